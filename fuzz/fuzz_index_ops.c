/* lr_index as a sequence of operations on two indexes, X and Y.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header   B {1,2,4,16}; capacity 8..512; max_instances 1..8; journal
 *            choice (default, 1, 4, disabled); TTL choice; seed 0..255;
 *            allocation failure: mode (none, none, once, from then on)
 *            and which allocation 1..1024 after both indexes exist
 *   op 0-2   learn on X or Y: instance (10 ids, LR_INSTANCE_NONE among
 *            them), trust (LOCAL, REMOTE, invalid), a pattern prompt,
 *            0..3 boundaries (possibly unsorted or past the end), and a
 *            variant: precomputed keys, wrong n_keys, NULL tokens, NULL
 *            boundaries
 *   op 3-4   match on X or Y: flags (0, NO_TOUCH, invalid), hits buffer
 *            of 0..4 (LR_EBUFSIZE), NULL hits with a capacity, the same
 *            prompt variants
 *   op 5     dry run: expire, then match with LR_MATCH_NO_TOUCH, which
 *            must then leave the digest unchanged whatever it returns
 *   op 6     expire X or Y
 *   op 7     remove_instance on X or Y
 *   op 8-9   export from X or Y (since 0, the last mark, a future mark),
 *            maybe flip one byte, import into the other index or itself
 *   op 10    time moves forward (0, 1 tick, 16 ticks, past the TTL)
 *   op 11    queries (stats, instance_blocks, mark), which change nothing
 * Tokens come from patterns over tiny alphabets, so prefixes collide, and
 * capacities are small, so eviction and expiry happen all the time.
 *
 * After every call: lr__index_verify() == LR_OK; a failed call (other
 * than LR_EBUFSIZE from match, which may still expire) leaves the digest
 * unchanged; statuses are documented ones; match results agree with
 * lr__index_depth_of() for every id, and a match with LR_MATCH_NO_TOUCH
 * agrees with lr__index_peek(), which changes no byte of the index; a
 * LOCAL learn leaves its instance holding the prompt (up to capacity).
 * Then the same input is run again
 * on fresh indexes with the same seed and with another seed: the digests
 * and the transcript of every result must be the same (B24). */
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index/index.h"
#include "index_util.h"

#define MAX_OPS 128
#define MAX_LEN 160

static const uint32_t ids[10] = {
    0, 1, 2, 3, 4, 5, 1000, 0x7fffffffu, 0xfffffffeu, LR_INSTANCE_NONE
};
#define N_VALID_IDS 9

struct prompt {
    uint32_t tok[MAX_LEN];
    uint64_t keys[MAX_LEN];
    uint32_t bounds[3];
    size_t n_keys;
    lr_prompt p;
    int variant;
};

/* A pattern prompt plus a variant: 0 precomputed keys, 1 precomputed keys
 * with a wrong count, 2 NULL tokens, 3 NULL boundaries, else plain. */
static void
decode_prompt(fuzz_dp *dp, uint32_t B, bool with_bounds, struct prompt *q)
{
    uint32_t pattern = fuzz_dp_next_range(dp, 0, FUZZ_N_PATTERNS - 1);
    uint32_t start = fuzz_dp_next_range(dp, 0, 3) * B;
    uint32_t len = fuzz_dp_next_range(dp, 0, MAX_LEN);
    uint32_t tweak = fuzz_dp_next_range(dp, 0, 255);
    uint64_t salt = fuzz_dp_next_range(dp, 0, 1);
    uint32_t nb = with_bounds ? fuzz_dp_next_range(dp, 0, 3) : 0;
    for (uint32_t i = 0; i < nb; i++)
        q->bounds[i] = fuzz_dp_next_range(dp, 0, len + 1);
    q->variant = (int)fuzz_dp_next_range(dp, 0, 7);
    fuzz_pattern_fill(q->tok, len, pattern, start, tweak);
    q->n_keys = fuzz_keys(B, q->tok, len, salt, q->keys, MAX_LEN);
    lr_prompt_init(&q->p);
    q->p.tokens = q->tok;
    q->p.n_tokens = len;
    q->p.tenant_salt = salt;
    q->p.boundaries = nb ? q->bounds : NULL;
    q->p.n_boundaries = nb;
    switch (q->variant) {
    case 0:
        q->p.keys = q->keys;
        q->p.n_keys = q->n_keys;
        q->p.tokens = NULL;
        break;
    case 1:
        q->p.keys = q->keys;
        q->p.n_keys = q->n_keys + 1;
        break;
    case 2:
        if (len > 0)
            q->p.tokens = NULL;
        break;
    case 3:
        q->p.boundaries = NULL;
        break;
    default:
        break;
    }
    fuzz_trace("  prompt: pattern=%u start=%u len=%u tweak=%u salt=%llu "
               "bounds=%u{%u,%u,%u} variant=%d",
               pattern, start, len, tweak, (unsigned long long)salt, nb,
               nb > 0 ? q->bounds[0] : 0, nb > 1 ? q->bounds[1] : 0,
               nb > 2 ? q->bounds[2] : 0, q->variant);
}

static void
op_learn(struct fuzz_index_run *r, fuzz_dp *dp, lr_index **ixs, uint32_t B,
         uint64_t capacity, uint64_t now, struct prompt *q)
{
    static const int32_t trusts[4] = { LR_TRUST_LOCAL, LR_TRUST_LOCAL,
                                       LR_TRUST_REMOTE, 2 };
    int t = fuzz_dp_next_bool(dp);
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 9)];
    int32_t trust = trusts[fuzz_dp_next_range(dp, 0, 3)];
    fuzz_trace("learn(%c, inst=%u, trust=%d, now=%llu)", "XY"[t], inst, trust,
               (unsigned long long)now);
    decode_prompt(dp, B, true, q);
    lr_index *ix = ixs[t];
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st = lr_index_learn(ix, &q->p, inst, trust, now);
    fuzz_trace("  = %s", lr_status_name(st));
    if (r->check) {
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EINVAL ||
                                   st == LR_ELIMIT || st == LR_ENOMEM);
        if (st == LR_OK && trust == LR_TRUST_LOCAL) {
            uint32_t n = (uint32_t)q->n_keys;
            if (n > capacity)
                n = (uint32_t)capacity;
            FUZZ_ASSERT(lr__index_depth_of(ix, inst, q->keys, n) == n);
        }
    }
    fuzz_index_after(r, ix, st, d0, st != LR_OK);
}

static void
do_match(struct fuzz_index_run *r, lr_index *ix, struct prompt *q, uint64_t now,
         uint32_t flags, int capv, bool dry)
{
    lr_index_hit hits[8], before[8];
    memset(hits, 0xa5, sizeof hits);
    memcpy(before, hits, sizeof hits);
    lr_index_match_result res;
    lr_index_match_result_init(&res);
    if (capv == 5) {
        res.hits = NULL;
        res.hits_capacity = 3;
    } else {
        res.hits = capv ? hits : NULL;
        res.hits_capacity = (size_t)capv;
    }
    if (dry) {
        lr_index_expire(ix, now);
        fuzz_note(&r->transcript, 0x3e);
        if (r->check)
            FUZZ_VERIFY(ix);
    }
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st = lr_index_match(ix, &q->p, now, flags, &res);
    fuzz_trace("  = %s, n_hits=%zu, deepest=%llu", lr_status_name(st),
               res.n_hits, (unsigned long long)res.deepest_tokens);
    if (st == LR_OK || st == LR_EBUFSIZE) {
        fuzz_note(&r->transcript, res.n_hits);
        fuzz_note(&r->transcript, res.deepest_tokens);
        fuzz_note(&r->transcript, res.prompt_blocks);
    }
    if (st == LR_OK)
        r->transcript =
            fuzz_fnv(r->transcript, hits, res.n_hits * sizeof *hits);
    if (r->check) {
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EINVAL ||
                                   st == LR_EBUFSIZE || st == LR_ENOMEM);
        if (dry)
            FUZZ_ASSERT_STATUS(st, lr__index_digest(ix) == d0);
        if (st == LR_OK || st == LR_EBUFSIZE)
            fuzz_check_match(ix, st, q->keys, q->n_keys, &res, before, ids,
                             N_VALID_IDS);
        if ((st == LR_OK || st == LR_EBUFSIZE) && flags == LR_MATCH_NO_TOUCH)
            fuzz_check_peek(ix, st, q->keys, q->n_keys, now, &res);
    }
    fuzz_index_after(r, ix, st, d0, st != LR_OK && st != LR_EBUFSIZE);
}

static void
op_match(struct fuzz_index_run *r, fuzz_dp *dp, lr_index **ixs, uint32_t B,
         uint64_t now, struct prompt *q, bool dry)
{
    /* 8: a flag no release defines (2 and 4, the lower tiers, are valid
     * since 0.3; this harness feeds no lower-tier event) */
    static const uint32_t flagv[4] = { 0, LR_MATCH_NO_TOUCH, LR_MATCH_NO_TOUCH,
                                       8 };
    int t = fuzz_dp_next_bool(dp);
    uint32_t flags =
        dry ? LR_MATCH_NO_TOUCH : flagv[fuzz_dp_next_range(dp, 0, 3)];
    int capv = (int)fuzz_dp_next_range(dp, 0, 5);
    fuzz_trace("%smatch(%c, flags=%u, capv=%d, now=%llu)", dry ? "expire+" : "",
               "XY"[t], flags, capv, (unsigned long long)now);
    decode_prompt(dp, B, false, q);
    do_match(r, ixs[t], q, now, flags, capv, dry);
}

static void
op_transfer(struct fuzz_index_run *r, fuzz_dp *dp, lr_index **ixs,
            uint64_t *marks, uint64_t now)
{
    int src = fuzz_dp_next_bool(dp);
    int dst = fuzz_dp_next_range(dp, 0, 3) == 0 ? src : !src;
    uint32_t sv = fuzz_dp_next_range(dp, 0, 3);
    uint32_t corrupt = fuzz_dp_next_range(dp, 0, 3) == 0;
    uint32_t pos = fuzz_dp_next_range(dp, 0, 0xffff);
    uint32_t xor = fuzz_dp_next_range(dp, 1, 255);
    uint64_t cur = lr_index_mark(ixs[src]);
    uint64_t since = sv == 0 ? 0 : sv == 3 ? cur + 1 : marks[src];
    fuzz_trace("export(%c, since=%llu [mark %llu]) -> %simport(%c, now=%llu)",
               "XY"[src], (unsigned long long)since, (unsigned long long)cur,
               corrupt ? "corrupt -> " : "", "XY"[dst],
               (unsigned long long)now);
    uint64_t d0 = r->check ? lr__index_digest(ixs[src]) : 0;
    lr_blob *blob = NULL;
    uint64_t m = 0;
    lr_status st = lr_index_export_delta(ixs[src], since, &blob, &m);
    fuzz_trace("  export = %s (%zu bytes)", lr_status_name(st),
               blob ? lr_blob_size(blob) : 0);
    if (r->check) {
        /* export never changes the index */
        FUZZ_ASSERT(lr__index_digest(ixs[src]) == d0);
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EINVAL || st == LR_ENOMEM);
        FUZZ_ASSERT(since <= cur || st == LR_EINVAL);
        FUZZ_ASSERT((st == LR_OK) == (blob != NULL));
    }
    fuzz_index_after(r, ixs[src], st, d0, false);
    if (st != LR_OK)
        return;
    marks[src] = m;
    size_t n = lr_blob_size(blob);
    uint8_t *buf = malloc(n);
    FUZZ_ASSERT(buf != NULL);
    memcpy(buf, lr_blob_data(blob), n);
    r->transcript = fuzz_fnv(r->transcript, buf, n);
    lr_blob_destroy(blob);
    if (corrupt) {
        buf[pos % n] ^= (uint8_t) xor ;
        fuzz_trace("  buf[%zu] ^= %#x", pos % n, xor);
    }
    lr_index *ix = ixs[dst];
    d0 = r->check ? lr__index_digest(ix) : 0;
    st = lr_index_import_delta(ix, buf, n, now);
    fuzz_trace("  import = %s", lr_status_name(st));
    if (r->check) {
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ECORRUPT ||
                                   st == LR_EVERSION || st == LR_ENOTSUP ||
                                   st == LR_ELIMIT || st == LR_ENOMEM);
        /* same block size, keys never contradict: only the instance
         * limit (or memory) can refuse an intact blob */
        if (!corrupt)
            FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ELIMIT ||
                                       st == LR_ENOMEM);
    }
    fuzz_index_after(r, ix, st, d0, st != LR_OK);
    free(buf);
}

static void
op_query(struct fuzz_index_run *r, fuzz_dp *dp, lr_index **ixs,
         uint64_t capacity)
{
    int t = fuzz_dp_next_bool(dp);
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 9)];
    lr_index *ix = ixs[t];
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_index_stats s;
    uint64_t blocks;
    lr_status st2 = fuzz_index_query(r, ix, inst, capacity, &s, &blocks);
    fuzz_trace("query(%c, inst=%u): blocks=%llu remote=%llu prefixes=%llu "
               "instances=%llu; instance_blocks = %s %llu",
               "XY"[t], inst, (unsigned long long)s.blocks,
               (unsigned long long)s.remote_blocks,
               (unsigned long long)s.prefixes, (unsigned long long)s.instances,
               lr_status_name(st2), (unsigned long long)blocks);
    fuzz_note(&r->transcript, s.remote_blocks);
    fuzz_note(&r->transcript, s.prefixes);
    fuzz_note(&r->transcript, lr_index_mark(ix));
    if (r->check) {
        FUZZ_ASSERT(lr__index_digest(ix) == d0); /* lr_index_mark too */
        FUZZ_ASSERT(s.remote_blocks <= s.blocks);
        FUZZ_ASSERT(s.prefixes <= s.blocks);
    }
}

static void
run_once(struct fuzz_index_run *r, const uint8_t *data, size_t size)
{
    static const uint32_t Bs[4] = { 1, 2, 4, 16 };
    static const uint32_t journals[4] = { 0, 1, 4, UINT32_MAX };
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    uint32_t B = Bs[fuzz_dp_next_range(&dp, 0, 3)];
    uint64_t capacity = fuzz_dp_next_range(&dp, 8, 512);
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.block_tokens = B;
    o.capacity_blocks = capacity;
    o.max_instances = fuzz_dp_next_range(&dp, 1, 8);
    o.journal_capacity = journals[fuzz_dp_next_range(&dp, 0, 3)];
    o.ttl_ns = fuzz_index_ttl(&dp);
    o.seed = fuzz_dp_next_range(&dp, 0, 255) ^ r->seed_xor;
    fuzz_oom_decode(&dp, 1024, &r->oom.fail_at, &r->oom.sticky);
    lr_allocator alloc;
    fuzz_oom_allocator(&r->oom, &alloc);
    o.allocator = &alloc;
    fuzz_trace("X, Y = index(B=%u, capacity=%llu, max_instances=%u, "
               "journal=%u, ttl=%llu); allocation %llu fails%s",
               B, (unsigned long long)capacity, o.max_instances,
               o.journal_capacity, (unsigned long long)o.ttl_ns,
               (unsigned long long)r->oom.fail_at,
               r->oom.sticky ? " and every one after" : "");
    lr_index *ixs[2] = { NULL, NULL };
    for (int i = 0; i < 2; i++) {
        lr_status st = lr_index_create(&o, &ixs[i]);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
    }
    r->oom.armed = true;
    struct prompt *q = malloc(sizeof *q);
    FUZZ_ASSERT(q != NULL);
    uint64_t marks[2] = { 0, 0 };
    uint64_t now = FUZZ_SEC;
    for (int i = 0; i < MAX_OPS && !fuzz_dp_empty(&dp); i++) {
        switch (fuzz_dp_next_range(&dp, 0, 11)) {
        case 0:
        case 1:
        case 2:
            op_learn(r, &dp, ixs, B, capacity, now, q);
            break;
        case 3:
        case 4:
            op_match(r, &dp, ixs, B, now, q, false);
            break;
        case 5:
            op_match(r, &dp, ixs, B, now, q, true);
            break;
        case 6: {
            int t = fuzz_dp_next_bool(&dp);
            uint64_t d0 = r->check ? lr__index_digest(ixs[t]) : 0;
            lr_index_expire(ixs[t], now);
            fuzz_trace("expire(%c, now=%llu)", "XY"[t],
                       (unsigned long long)now);
            fuzz_index_after(r, ixs[t], LR_OK, d0, false);
            break;
        }
        case 7: {
            int t = fuzz_dp_next_bool(&dp);
            uint32_t inst = ids[fuzz_dp_next_range(&dp, 0, 9)];
            uint64_t d0 = r->check ? lr__index_digest(ixs[t]) : 0;
            lr_status st = lr_index_remove_instance(ixs[t], inst);
            fuzz_trace("remove_instance(%c, inst=%u) = %s", "XY"[t], inst,
                       lr_status_name(st));
            if (r->check)
                FUZZ_ASSERT_STATUS(
                    st, st == LR_OK || st == LR_ENOENT ||
                            (st == LR_EINVAL && inst == LR_INSTANCE_NONE));
            fuzz_index_after(r, ixs[t], st, d0, st != LR_OK);
            break;
        }
        case 8:
        case 9:
            op_transfer(r, &dp, ixs, marks, now);
            break;
        case 10: {
            now += fuzz_index_dt(&dp);
            fuzz_trace("now = %llu", (unsigned long long)now);
            for (int t = 0; t < 2; t++)
                fuzz_index_clock(ixs[t], now);
            break;
        }
        default:
            op_query(r, &dp, ixs, capacity);
            break;
        }
    }
    for (int i = 0; i < 2; i++) {
        r->digest[i] = lr__index_digest(ixs[i]);
        lr_index_destroy(ixs[i]);
    }
    free(q);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_index_replays(run_once, data, size);
    return 0;
}
