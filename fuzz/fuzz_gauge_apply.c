/* lr_router_import_gauges() on untrusted bytes: another replica's load
 * gauge for a router (replica id 1) with four instances, one of them
 * draining.
 *
 * Byte 0: bit 0 fixes up the trailing checksum (so that a mutated body
 * reaches the parser); bits 1..6 pick an allocation failure (0: none,
 * 1..31 that allocation, 32..63 that one and every one after).
 *
 * Properties: a documented status; a failed import leaves the router as
 * it was; an accepted one adds exactly what the message says to the
 * candidate rows of the instances this router has (checked against the
 * message decoded here, independently); the same message again is stale
 * and changes nothing; once the gauge's two seconds have passed the rows
 * are the router's own again. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_helpers.h"
#include "index_util.h"
#include "common/lr_hash.h"
#include "router/router.h"

#define GAUGE_SEED 0x4c52474155474531ull /* "LRGAUGE1" */
#define N_INST 4u

static lr_router *
fresh(const lr_allocator *a)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = a;
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.replica_id = 1;
    o.max_peers = 4;
    o.max_instances = 8;
    o.max_requests = 16;
    o.index_capacity_blocks = 1024;
    lr_router *r = NULL;
    lr_status st = lr_router_create(&o, &r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    for (uint32_t i = 0; i < N_INST; i++) {
        char name[8] = { 'e', (char)('0' + i), 0 };
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = name;
        uint32_t id;
        st = lr_router_add_instance(r, &s, &id);
        FUZZ_ASSERT_STATUS(st, st == LR_OK && id == i);
    }
    st = lr_router_drain_instance(r, 3, 1);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    return r;
}

/* inflight per routable instance (ids 0..2) as route() would see it */
static void
rows(lr_router *r, uint64_t now, uint32_t *inflight)
{
    uint32_t t[16] = { 1 };
    lr_request q;
    lr_request_init(&q);
    q.tokens = t;
    q.n_tokens = 16;
    q.now_ns = now;
    lr_candidate c[N_INST];
    size_t n = 0;
    fuzz_oom_pause();
    lr_status st = lr_router_candidates(r, &q, c, N_INST, sizeof c[0], &n);
    fuzz_oom_resume();
    FUZZ_ASSERT_STATUS(st, st == LR_OK && n == N_INST - 1);
    for (size_t k = 0; k < n; k++)
        inflight[c[k].instance] = c[k].inflight;
}

static uint64_t
var(const uint8_t **p, const uint8_t *end, bool *ok)
{
    uint64_t v = 0;
    for (int i = 0; i < 10 && *p < end; i++) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80))
            return v;
    }
    *ok = false;
    return 0;
}

/* The inflight the message adds per id 0..2 (saturated to 32 bits). */
static void
decode(const uint8_t *b, size_t n, uint64_t *add)
{
    uint32_t count = lr__get_u32(b + 24);
    const uint8_t *p = b + 32, *end = b + n - 8;
    bool ok = true;
    for (uint32_t i = 0; i < count && ok; i++) {
        uint64_t id = var(&p, end, &ok);
        uint64_t inflight = var(&p, end, &ok);
        for (int k = 0; k < 6; k++)
            (void)var(&p, end, &ok);
        if (ok && id < N_INST - 1)
            add[id] += inflight;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1);
    FUZZ_ASSERT(buf != NULL);
    memcpy(buf, data + 1, n);
    if ((data[0] & 1) && n >= 8)
        lr__put_u64(buf + n - 8, lr__hash(buf, n - 8, GAUGE_SEED));
    struct fuzz_oom oom;
    fuzz_oom_select(&oom, 0);
    lr_allocator a;
    fuzz_oom_allocator(&oom, &a);
    lr_router *r = fresh(&a);
    uint32_t t[16] = { 2 };
    lr_decision d;
    lr_decision_init(&d);
    for (uint64_t i = 1; i <= 3; i++) { /* its own requests */
        lr_request q;
        lr_request_init(&q);
        q.id = i;
        q.tokens = t;
        q.n_tokens = 16;
        q.now_ns = FUZZ_T0;
        FUZZ_ASSERT(lr_router_route(r, &q, &d) == LR_OK);
    }
    uint32_t own[N_INST] = { 0 }, got[N_INST] = { 0 };
    rows(r, FUZZ_T0, own);
    uint64_t d0 = lr__router_digest(r);
    fuzz_oom_select(&oom, (data[0] >> 1) & 63u);
    oom.armed = true;
    lr_status st = lr_router_import_gauges(r, buf, n, FUZZ_T0);
    fuzz_oom_select(&oom, 0);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ECORRUPT ||
                               st == LR_EVERSION || st == LR_ELIMIT ||
                               st == LR_ENOMEM);
    FUZZ_ASSERT(lr__router_verify(r) == LR_OK);
    if (st != LR_OK) {
        FUZZ_ASSERT(lr__router_digest(r) == d0);
    } else {
        uint64_t add[N_INST] = { 0 };
        bool own_echo = lr__get_u64(buf + 8) == 1;
        if (!own_echo)
            decode(buf, n, add);
        rows(r, FUZZ_T0 + FUZZ_SEC, got);
        for (uint32_t id = 0; id < N_INST - 1; id++) {
            uint64_t want = own[id] + add[id];
            FUZZ_ASSERT(got[id] == (want > UINT32_MAX ? UINT32_MAX : want));
        }
        uint64_t d1 = lr__router_digest(r);
        FUZZ_ASSERT(lr_router_import_gauges(r, buf, n, FUZZ_T0) == LR_OK);
        FUZZ_ASSERT(lr__router_digest(r) == d1);
        rows(r, FUZZ_T0 + 3 * FUZZ_SEC, got);
        FUZZ_ASSERT(memcmp(got, own, sizeof own) == 0);
    }
    lr_router_destroy(r);
    free(buf);
    return 0;
}
