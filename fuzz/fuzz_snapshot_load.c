/* lr_router_restore() on untrusted bytes.
 *
 * Byte 0 picks what the rest is: mode (byte 0 & 3)
 *   0  a snapshot as is;
 *   1  a snapshot with its trailing checksum fixed up, so that a mutated
 *      body reaches the parsers;
 *   2  as 1, and the index section's own checksum fixed up too, so that
 *      mutations reach the index state's checks;
 *   3  as 2, with an allocation failure picked by byte 0 >> 2 (0: none,
 *      1..31 that allocation, 32..63 that one and every one after).
 *
 * Properties: the status is a documented one; a failed restore leaves the
 * router as it was (digest, no instance); an accepted snapshot restores to
 * a router that verifies, whose own snapshot restores into a third router
 * that snapshots to the same bytes (past the header, which names the
 * writer), and a second restore into it is LR_ESTATE. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_helpers.h"
#include "index_util.h"
#include "common/lr_hash.h"
#include "router/router.h"

#define SNAP_SEED 0x4c52534e41505331ull   /* "LRSNAPS1" */
#define ISTATE_SEED 0x4c52495354415431ull /* "LRISTAT1" */
#define T_INDX 0x58444e49u                /* "INDX" little-endian */
#define HEADER 32

static lr_router *
fresh(const lr_allocator *a, uint64_t replica)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = a;
    o.seed = 3;
    o.max_instances = 16;
    o.max_requests = 64;
    o.index_capacity_blocks = 4096;
    o.replica_id = replica;
    o.max_peers = 8;
    lr_router *r = NULL;
    lr_status st = lr_router_create(&o, &r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    return r;
}

static void
reseal(uint8_t *b, size_t n, uint64_t seed)
{
    if (n >= 8)
        lr__put_u64(b + n - 8, lr__hash(b, n - 8, seed));
}

/* Fix up the INDX section's checksum (sections: u32 tag, u32 0, u64 len). */
static void
reseal_index(uint8_t *b, size_t n)
{
    if (n < HEADER + 8)
        return;
    size_t off = HEADER, end = n - 8;
    uint32_t count = lr__get_u32(b + 12);
    for (uint32_t i = 0; i < count && off + 16 <= end; i++) {
        uint32_t tag = lr__get_u32(b + off);
        uint64_t len = lr__get_u64(b + off + 8);
        off += 16;
        if (len > end - off)
            return;
        if (tag == T_INDX)
            reseal(b + off, (size_t)len, ISTATE_SEED);
        off += (size_t)len;
    }
}

static lr_blob *
snapshot(lr_router *r, uint64_t now)
{
    lr_blob *b = NULL;
    fuzz_oom_pause();
    lr_status st = lr_router_snapshot(r, now, &b);
    fuzz_oom_resume();
    FUZZ_ASSERT_STATUS(st, st == LR_OK && b != NULL);
    return b;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0] & 3u;
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1);
    FUZZ_ASSERT(buf != NULL);
    memcpy(buf, data + 1, n);
    if (mode >= 2)
        reseal_index(buf, n);
    if (mode >= 1)
        reseal(buf, n, SNAP_SEED);

    struct fuzz_oom oom;
    fuzz_oom_select(&oom, 0);
    lr_allocator a;
    fuzz_oom_allocator(&oom, &a);
    lr_router *r = fresh(&a, 9);
    uint64_t d0 = lr__router_digest(r);
    if (mode == 3) {
        fuzz_oom_select(&oom, data[0] >> 2); /* 0..63: none, once, sticky */
        oom.armed = true;
    }
    const uint64_t now = FUZZ_T0 + 100 * FUZZ_SEC;
    lr_status st = lr_router_restore(r, buf, n, now);
    fuzz_oom_select(&oom, 0);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ECORRUPT ||
                               st == LR_EVERSION || st == LR_ENOTSUP ||
                               st == LR_ELIMIT || st == LR_ENOMEM);
    FUZZ_ASSERT(lr__router_verify(r) == LR_OK);
    if (st != LR_OK) {
        FUZZ_ASSERT(lr__router_digest(r) == d0);
        FUZZ_ASSERT(lr_router_instance_count(r) == 0);
    } else {
        FUZZ_ASSERT(lr_router_restore(r, buf, n, now) == LR_ESTATE ||
                    lr_router_instance_count(r) == 0);
        lr_blob *s1 = snapshot(r, now);
        /* the same replica id: a restore skips a peer watermark under the
         * restoring router's own id (its own deltas are echoes), so a
         * blob that names r2's id as a peer would not come back whole */
        lr_router *r2 = fresh(NULL, 9);
        st = lr_router_restore(r2, lr_blob_data(s1), lr_blob_size(s1), now);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        FUZZ_ASSERT(lr__router_verify(r2) == LR_OK);
        lr_blob *s2 = snapshot(r2, now);
        FUZZ_ASSERT(lr_blob_size(s1) == lr_blob_size(s2));
        FUZZ_ASSERT(memcmp(lr_blob_data(s1) + HEADER, lr_blob_data(s2) + HEADER,
                           lr_blob_size(s1) - HEADER - 8) == 0);
        lr_blob_destroy(s2);
        lr_blob_destroy(s1);
        lr_router_destroy(r2);
    }
    lr_router_destroy(r);
    free(buf);
    return 0;
}
