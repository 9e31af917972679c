/* lr_index_import_delta() on untrusted blobs, and the export -> import
 * round trip.
 *
 * The first byte picks the half (its value mod 4; for 0 and 1 the value
 * divided by 4 picks an allocation failure inside the import: 0 none,
 * 1..31 that allocation only, 32..63 allocation n - 31 and every one
 * after):
 *   0  import the rest of the input as a delta into a small fixed index;
 *   1  the same after rewriting the trailing checksum to match, so that
 *      mutations reach the parser and the apply path instead of dying on
 *      the checksum;
 *   2  round trip: prompts decoded from the input are learned LOCAL into
 *      index A, A's full export is imported into an empty index B, and
 *      every prompt must then match the same on A and B;
 *   3  the same with an incremental export: B imports export(0) taken
 *      half-way, then export(mark) taken at the end.
 *
 * Properties: the status is a documented one; a failed import leaves the
 * digest unchanged (B11); lr__index_verify() holds after every call; a
 * blob that imported once imports again; an index holding only imported
 * (REMOTE) routes exports nothing; export never changes the index and is
 * deterministic. */
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index/index.h"
#include "index_util.h"
#include "common/lr_hash.h"

#define MAX_PROMPTS 12
#define MAX_LEN 96

static const uint32_t ids[8] = {
    0, 1, 2, 7, 1000, 0x7fffffffu, 0xfffffffeu, 42
};
static const uint64_t salts[3] = { 0, 1, 0xdeadbeefull };

static lr_index *
new_index_with(uint32_t B, uint64_t capacity, uint32_t max_inst, uint64_t seed,
               const lr_allocator *alloc)
{
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.allocator = alloc;
    o.block_tokens = B;
    o.capacity_blocks = capacity;
    o.max_instances = max_inst;
    o.seed = seed;
    lr_index *ix = NULL;
    lr_status st = lr_index_create(&o, &ix);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && ix != NULL);
    return ix;
}

static lr_index *
new_index(uint32_t B, uint64_t capacity, uint32_t max_inst, uint64_t seed)
{
    return new_index_with(B, capacity, max_inst, seed, NULL);
}

static void
learn(lr_index *ix, uint32_t inst, int32_t trust, uint64_t salt,
      uint32_t pattern, uint32_t start, uint32_t len, uint32_t tweak,
      const uint32_t *bounds, size_t n_bounds, uint64_t now)
{
    lr_status st = fuzz_learn_pattern(ix, inst, trust, salt, pattern, start,
                                      len, tweak, bounds, n_bounds, now);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_VERIFY(ix);
}

/* The fixed index deltas are applied to: block 4, room for 64 routes and 4
 * instances (3 used), LOCAL and REMOTE routes, two tenants, an anchor. The
 * seed corpus exports from indexes that learned the same patterns, so
 * blob keys meet keys held here. */
static lr_index *
base_index(const lr_allocator *alloc)
{
    lr_index *ix = new_index_with(4, 64, 4, 1, alloc);
    static const uint32_t b8[1] = { 8 };
    learn(ix, 1, LR_TRUST_LOCAL, 0, 0, 0, 24, ~0u, b8, 1, FUZZ_T0);
    learn(ix, 1, LR_TRUST_LOCAL, 0, 1, 0, 20, ~0u, NULL, 0, FUZZ_T0);
    learn(ix, 2, LR_TRUST_LOCAL, 0, 0, 0, 16, ~0u, NULL, 0, FUZZ_T0);
    learn(ix, 2, LR_TRUST_REMOTE, 0, 2, 0, 32, ~0u, NULL, 0, FUZZ_T0);
    learn(ix, 7, LR_TRUST_LOCAL, 7, 3, 0, 12, ~0u, NULL, 0, FUZZ_T0);
    learn(ix, 7, LR_TRUST_REMOTE, 0, 0, 0, 40, 20, NULL, 0, FUZZ_T0);
    return ix;
}

static bool
status_is_documented_for_import(lr_status st)
{
    /* LR_EINVAL only for NULL arguments, which this harness never passes */
    return st == LR_OK || st == LR_ECORRUPT || st == LR_EVERSION ||
           st == LR_ENOTSUP || st == LR_ELIMIT || st == LR_ENOMEM;
}

/* Export `since` and check what every export must satisfy. The caller
 * owns the blob. */
static lr_blob *
export_checked(const lr_index *ix, uint64_t since, uint64_t *mark)
{
    uint64_t d0 = lr__index_digest(ix);
    lr_blob *a = NULL, *b = NULL;
    uint64_t m = 0;
    lr_status st = lr_index_export_delta(ix, since, &a, &m);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && a != NULL);
    FUZZ_ASSERT(m == lr_index_mark(ix));
    st = lr_index_export_delta(ix, since, &b, NULL);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && b != NULL);
    FUZZ_ASSERT(lr__index_digest(ix) == d0); /* export never changes it */
    FUZZ_ASSERT(lr_blob_size(a) == lr_blob_size(b));
    FUZZ_ASSERT(lr_blob_size(a) >= FUZZ_DELTA_HEADER + 8);
    FUZZ_ASSERT(memcmp(lr_blob_data(a), lr_blob_data(b), lr_blob_size(a)) == 0);
    const uint8_t *p = lr_blob_data(a);
    size_t n = lr_blob_size(a);
    FUZZ_ASSERT(memcmp(p, "LRDX", 4) == 0);
    FUZZ_ASSERT(lr__get_u64(p + n - 8) == lr__hash(p, n - 8, LR_SEED_DELTA));
    lr_blob_destroy(b);
    if (mark != NULL)
        *mark = m;
    return a;
}

static uint32_t
blob_routes(const lr_blob *b)
{
    return lr__get_u32(lr_blob_data(b) + 16);
}

/* ---- half 1: untrusted blobs -------------------------------------------- */

static void
import_half(const uint8_t *data, size_t size, bool fix_checksum,
            unsigned oom_sel)
{
    struct fuzz_oom oom;
    fuzz_oom_select(&oom, oom_sel);
    lr_allocator alloc;
    fuzz_oom_allocator(&oom, &alloc);
    uint8_t *buf = NULL;
    if (size > 0) {
        buf = malloc(size);
        FUZZ_ASSERT(buf != NULL);
        memcpy(buf, data, size);
        if (fix_checksum)
            fuzz_delta_reseal(buf, size);
    }
    lr_index *ix = base_index(&alloc);
    uint64_t d0 = lr__index_digest(ix);
    oom.armed = true;
    lr_status st = lr_index_import_delta(ix, buf, size, FUZZ_T0 + FUZZ_SEC);
    oom.armed = false;
    fuzz_trace("import_delta(base, %zu bytes) = %s (allocation %llu%s fails)",
               size, lr_status_name(st), (unsigned long long)oom.fail_at,
               oom.sticky ? "+" : "");
    if (oom.failures == 0)
        FUZZ_ASSERT_STATUS(st, st != LR_ENOMEM);
    FUZZ_ASSERT_STATUS(st, status_is_documented_for_import(st));
    FUZZ_VERIFY(ix);
    if (st != LR_OK) {
        FUZZ_ASSERT_STATUS(st, lr__index_digest(ix) == d0);
        /* Retried with all the memory it wants, a blob refused for
         * another reason is refused the same way again; one refused for
         * memory is not refused for memory again. */
        lr_status st2 =
            lr_index_import_delta(ix, buf, size, FUZZ_T0 + FUZZ_SEC);
        FUZZ_VERIFY(ix);
        if (st != LR_ENOMEM) {
            FUZZ_ASSERT_STATUS(st2, st2 == st);
            FUZZ_ASSERT_STATUS(st2, lr__index_digest(ix) == d0);
        } else {
            FUZZ_ASSERT_STATUS(st2, st2 != LR_ENOMEM);
        }
    } else {
        lr_index_stats s = { .struct_size = sizeof s };
        FUZZ_ASSERT(lr_index_get_stats(ix, &s) == LR_OK);
        FUZZ_ASSERT(s.blocks <= 64 && s.remote_blocks <= s.blocks);
        /* a blob that applied once applies again */
        st = lr_index_import_delta(ix, buf, size, FUZZ_T0 + 2 * FUZZ_SEC);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        FUZZ_VERIFY(ix);
        lr_blob_destroy(export_checked(ix, 0, NULL));

        /* an empty index accepts what the base accepted, and then holds
         * only REMOTE routes, so it exports none */
        lr_index *e = new_index(4, 64, 4, 99);
        st = lr_index_import_delta(e, buf, size, FUZZ_T0);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        FUZZ_VERIFY(e);
        FUZZ_ASSERT(lr_index_get_stats(e, &s) == LR_OK);
        FUZZ_ASSERT(s.remote_blocks == s.blocks);
        lr_blob *b = export_checked(e, 0, NULL);
        FUZZ_ASSERT(blob_routes(b) == 0);
        FUZZ_ASSERT(lr_blob_size(b) == FUZZ_DELTA_HEADER + 8);
        lr_blob_destroy(b);
        lr_index_destroy(e);
    }
    lr_index_destroy(ix);
    free(buf);
}

/* ---- half 2: round trip ---------------------------------------------------- */

struct prompt {
    uint32_t tok[MAX_LEN];
    uint32_t len;
    uint64_t salt;
    uint32_t inst;
    uint32_t bounds[2];
    uint32_t n_bounds;
};

static void
decode_prompt(fuzz_dp *dp, struct prompt *p)
{
    p->inst = ids[fuzz_dp_next_range(dp, 0, 7)];
    p->salt = salts[fuzz_dp_next_range(dp, 0, 2)];
    uint32_t pattern = fuzz_dp_next_range(dp, 0, FUZZ_N_PATTERNS - 1);
    uint32_t start = fuzz_dp_next_range(dp, 0, 15);
    p->len = fuzz_dp_next_range(dp, 0, MAX_LEN);
    uint32_t tweak = fuzz_dp_next_range(dp, 0, 127);
    fuzz_pattern_fill(p->tok, p->len, pattern, start, tweak);
    p->n_bounds = fuzz_dp_next_range(dp, 0, 2);
    for (uint32_t i = 0; i < p->n_bounds; i++)
        p->bounds[i] = fuzz_dp_next_range(dp, 0, p->len);
    if (p->n_bounds == 2 && p->bounds[0] > p->bounds[1]) {
        uint32_t t = p->bounds[0];
        p->bounds[0] = p->bounds[1];
        p->bounds[1] = t;
    }
    fuzz_trace("prompt inst=%u salt=%llu pattern=%u start=%u len=%u "
               "tweak=%u bounds=%u{%u,%u}",
               p->inst, (unsigned long long)p->salt, pattern, start, p->len,
               tweak, p->n_bounds, p->bounds[0], p->bounds[1]);
}

static void
learn_prompt(lr_index *ix, const struct prompt *p)
{
    lr_prompt lp = LR_PROMPT_INIT;
    lp.tokens = p->tok;
    lp.n_tokens = p->len;
    lp.tenant_salt = p->salt;
    lp.boundaries = p->bounds;
    lp.n_boundaries = p->n_bounds;
    lr_status st = lr_index_learn(ix, &lp, p->inst, LR_TRUST_LOCAL, FUZZ_T0);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_VERIFY(ix);
}

static void
match_np(lr_index *ix, const struct prompt *p, lr_index_hit *hits,
         lr_index_match_result *r)
{
    lr_prompt lp = LR_PROMPT_INIT;
    lp.tokens = p->tok;
    lp.n_tokens = p->len;
    lp.tenant_salt = p->salt;
    lr_index_match_result_init(r);
    memset(hits, 0, 8 * sizeof *hits);
    r->hits = hits;
    r->hits_capacity = 8;
    lr_status st = lr_index_match(ix, &lp, FUZZ_T0, LR_MATCH_NO_TOUCH, r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
}

/* Every prompt matches the same on a and b. */
static void
same_matches(lr_index *a, lr_index *b, const struct prompt *ps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        lr_index_hit ha[8], hb[8];
        lr_index_match_result ra, rb;
        match_np(a, &ps[i], ha, &ra);
        match_np(b, &ps[i], hb, &rb);
        FUZZ_ASSERT(ra.n_hits == rb.n_hits);
        FUZZ_ASSERT(ra.deepest_tokens == rb.deepest_tokens);
        FUZZ_ASSERT(ra.prompt_blocks == rb.prompt_blocks);
        FUZZ_ASSERT(memcmp(ha, hb, ra.n_hits * sizeof *ha) == 0);
    }
}

static void
roundtrip_half(const uint8_t *data, size_t size, bool incremental)
{
    static const uint32_t Bs[4] = { 1, 2, 4, 16 };
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    uint32_t B = Bs[fuzz_dp_next_range(&dp, 0, 3)];
    uint32_t capacity = fuzz_dp_next_range(&dp, 1, 256);
    size_t n = fuzz_dp_next_range(&dp, 1, MAX_PROMPTS);
    size_t split = incremental ? fuzz_dp_next_range(&dp, 0, (uint32_t)n) : n;
    fuzz_trace("roundtrip B=%u capacity=%u prompts=%zu split=%zu", B, capacity,
               n, split);
    struct prompt *ps = calloc(n, sizeof *ps);
    FUZZ_ASSERT(ps != NULL);
    for (size_t i = 0; i < n; i++)
        decode_prompt(&dp, &ps[i]);

    lr_index *a = new_index(B, capacity, 8, 1);
    lr_index *b = new_index(B, capacity, 8, 2); /* seeds differ on purpose */
    for (size_t i = 0; i < split; i++)
        learn_prompt(a, &ps[i]);
    uint64_t m1 = 0;
    lr_blob *b1 = export_checked(a, 0, &m1);
    FUZZ_ASSERT(m1 == lr_index_mark(a));
    for (size_t i = split; i < n; i++)
        learn_prompt(a, &ps[i]);
    lr_blob *b2 = NULL;
    uint64_t m2 = 0;
    if (incremental) {
        b2 = export_checked(a, m1, &m2);
    } else {
        lr_blob_destroy(b1);
        b1 = export_checked(a, 0, &m2);
    }
    FUZZ_ASSERT(m2 == lr_index_mark(a));
    if (m2 > 0) {
        /* nothing was learned since m2 */
        lr_blob *e = export_checked(a, m2, NULL);
        FUZZ_ASSERT(blob_routes(e) == 0);
        lr_blob_destroy(e);
    }

    lr_status st =
        lr_index_import_delta(b, lr_blob_data(b1), lr_blob_size(b1), FUZZ_T0);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_VERIFY(b);
    if (b2 != NULL) {
        st = lr_index_import_delta(b, lr_blob_data(b2), lr_blob_size(b2),
                                   FUZZ_T0);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        FUZZ_VERIFY(b);
    }

    lr_index_stats sa = { .struct_size = sizeof sa };
    lr_index_stats sb = { .struct_size = sizeof sb };
    FUZZ_ASSERT(lr_index_get_stats(a, &sa) == LR_OK);
    FUZZ_ASSERT(lr_index_get_stats(b, &sb) == LR_OK);
    FUZZ_ASSERT(sa.remote_blocks == 0);
    FUZZ_ASSERT(sb.remote_blocks == sb.blocks);
    /* An incremental export is exact only while A never evicted: the
     * journal names each learn by its deepest block, and a learn trimmed
     * back to an anchor since is left out. */
    if (!incremental || sa.evicted_blocks == 0) {
        FUZZ_ASSERT(sa.blocks == sb.blocks);
        FUZZ_ASSERT(sa.prefixes == sb.prefixes);
        same_matches(a, b, ps, n);
    }
    /* B holds only REMOTE routes: its export is empty. */
    lr_blob *e = export_checked(b, 0, NULL);
    FUZZ_ASSERT(blob_routes(e) == 0);
    lr_blob_destroy(e);

    /* A applying its own full export: LOCAL stays LOCAL, nothing new. */
    lr_blob *self = export_checked(a, 0, NULL);
    st = lr_index_import_delta(a, lr_blob_data(self), lr_blob_size(self),
                               FUZZ_T0);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_VERIFY(a);
    lr_index_stats sa2 = { .struct_size = sizeof sa2 };
    FUZZ_ASSERT(lr_index_get_stats(a, &sa2) == LR_OK);
    FUZZ_ASSERT(sa2.remote_blocks == 0 && sa2.blocks == sa.blocks);
    if (!incremental || sa.evicted_blocks == 0)
        same_matches(a, b, ps, n);
    lr_blob_destroy(self);

    lr_blob_destroy(b1);
    lr_blob_destroy(b2);
    lr_index_destroy(a);
    lr_index_destroy(b);
    free(ps);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 4) {
    case 0:
        import_half(data + 1, size - 1, false, data[0] >> 2);
        break;
    case 1:
        import_half(data + 1, size - 1, true, data[0] >> 2);
        break;
    case 2:
        roundtrip_half(data + 1, size - 1, false);
        break;
    default:
        roundtrip_half(data + 1, size - 1, true);
        break;
    }
    return 0;
}
