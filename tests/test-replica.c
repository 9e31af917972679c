/* Many sources of one router's state: KV-event batches in sequence
 * (lr_router_vllm_batch_seq: in order, once, gaps reported and replayed,
 * restarts dropping the engine's routes), deltas between replicas (named
 * by origin, never echoed, never applied twice) and the other replicas'
 * load gauges (added to the candidate rows, expiring).
 *
 * The sequencing differential test drives a model engine through drops,
 * duplicates, replays of old batches and restarts, with a host that asks
 * for a replay on every LR_EGAP, and checks the router's index against an
 * index that got every batch exactly once, in order: the same bytes from
 * lr__index_save().
 *
 * The randomized test logs its seed; replay with LR_TEST_SEED=<n>. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "libroute/lr_ring.h"
#include "libroute/lr_vllm.h"
#include "common/lr_hash.h"
#include "mpw.h"
#include "router-helpers.h"
#include "router/router_impl.h"

#define BS 16u /* engine block size: one index block */
#define NCHAIN 4u
#define MAXB 512u /* batches of one engine run */

static lr_router *
mk_router(int32_t policy, uint64_t replica, uint32_t n_inst,
          const lr_allocator *a)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = policy;
    o.seed = OPT_SEED;
    o.allocator = a;
    o.replica_id = replica;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < n_inst; i++)
        assert_int_equal(add_instance(r, "10.0", i, 0, 0), i);
    return r;
}

/* Canonical bytes of an index (lr__index_save at a fixed time). */
static bool
same_index(const lr_index *a, const lr_index *b)
{
    lr_blob *x = NULL, *y = NULL;
    assert_st(lr__index_save(a, T0, &x), LR_OK);
    assert_st(lr__index_save(b, T0, &y), LR_OK);
    bool same = lr_blob_size(x) == lr_blob_size(y) &&
                memcmp(lr_blob_data(x), lr_blob_data(y), lr_blob_size(x)) == 0;
    lr_blob_destroy(x);
    lr_blob_destroy(y);
    return same;
}

/* ---- a model engine ------------------------------------------------------------ */

struct batch {
    uint8_t *buf;
    size_t len;
};

/* One engine: its chains of stored blocks and the batches of its current
 * run (numbered from 0 since it last started). */
struct engine {
    uint64_t rs;
    uint32_t run;
    double ts;
    uint32_t depth[NCHAIN];
    struct batch b[MAXB];
    uint32_t n;
};

static uint64_t
ehash(const struct engine *e, uint32_t chain, uint32_t depth)
{
    return ((uint64_t)e->run << 40) | ((uint64_t)chain << 32) | (depth + 1);
}

static void
chain_tokens(uint32_t chain, uint32_t depth, uint32_t n, uint32_t *t)
{
    for (uint32_t i = 0; i < n * BS; i++) {
        uint64_t s = ((uint64_t)chain << 24) + (uint64_t)depth * BS + i;
        t[i] = (uint32_t)tu_rand(&s);
    }
}

/* The next batch: 0-3 events (stores extending a chain, removals of a
 * chain's tail, now and then a clear), in either encoding. */
static struct batch *
produce(struct engine *e)
{
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    uint32_t n_ev = (uint32_t)tu_below(&e->rs, 4);
    bool map = tu_below(&e->rs, 2) != 0;
    e->ts += 1.0;
    mpw_batch_ts(w, n_ev, map, e->ts);
    for (uint32_t k = 0; k < n_ev; k++) {
        uint32_t c = (uint32_t)tu_below(&e->rs, NCHAIN);
        uint32_t r = (uint32_t)tu_below(&e->rs, 20);
        if (r < 13 || e->depth[c] == 0) {
            uint32_t nb = 1 + (uint32_t)tu_below(&e->rs, 3);
            uint64_t h[3];
            uint32_t t[3 * BS];
            for (uint32_t i = 0; i < nb; i++)
                h[i] = ehash(e, c, e->depth[c] + i);
            chain_tokens(c, e->depth[c], nb, t);
            struct mpw_stored s = mpw_stored_of(h, nb, t, BS);
            s.has_parent = e->depth[c] > 0;
            s.parent = ehash(e, c, e->depth[c] - 1);
            s.medium = "GPU";
            s.group_idx = 0;
            if (map)
                mpw_stored_map(w, &s, MPW_HASH_UINT);
            else
                mpw_stored_array(w, &s, MPW_HASH_UINT);
            e->depth[c] += nb;
        } else if (r < 19) {
            uint64_t h = ehash(e, c, e->depth[c] - 1);
            mpw_removed(w, &h, 1, map, MPW_HASH_UINT);
            e->depth[c]--;
        } else {
            mpw_cleared(w, map);
            memset(e->depth, 0, sizeof e->depth);
        }
    }
    mpw_batch_end(w, map);
    assert_false(w->overflow);
    assert_true(e->n < MAXB);
    struct batch *b = &e->b[e->n++];
    b->buf = malloc(w->n);
    assert_non_null(b->buf);
    memcpy(b->buf, w->buf, w->n);
    b->len = w->n;
    free(w);
    return b;
}

static void
engine_drop_run(struct engine *e)
{
    for (uint32_t i = 0; i < e->n; i++)
        free(e->b[i].buf);
    e->n = 0;
}

/* The engine restarts: its cache is gone and it counts from 0 again. */
static void
engine_restart(struct engine *e)
{
    engine_drop_run(e);
    e->run++;
    e->ts += 100;
    memset(e->depth, 0, sizeof e->depth);
}

/* ---- a host: deliver, and replay on a gap ---------------------------------------- */

struct host {
    lr_router *r;
    uint32_t id;
    uint64_t replays;
};

static lr_status
deliver(struct host *h, const struct engine *e, uint32_t seq)
{
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    uint64_t now = T0;
    lr_status st = lr_router_vllm_batch_seq(h->r, h->id, seq, e->b[seq].buf,
                                            e->b[seq].len, now, &info);
    assert_true(st == LR_OK || st == LR_EGAP);
    if (st == LR_EGAP) {
        assert_int_equal(info.seq_state == LR_KV_SEQ_GAP ||
                             info.seq_state == LR_KV_SEQ_RESTART,
                         1);
        lr_kv_source src;
        lr_kv_source_init(&src);
        assert_st(lr_router_kv_source(h->r, h->id, &src), LR_OK);
        assert_int_equal(src.gap, 1);
        assert_true(src.next_seq == info.next_seq);
        /* vLLM's replay socket: every batch from next_seq on */
        h->replays++;
        for (uint64_t s = info.next_seq; s < e->n; s++) {
            lr_vllm_batch_info ri;
            lr_vllm_batch_info_init(&ri);
            assert_st(lr_router_vllm_batch_seq(h->r, h->id, s, e->b[s].buf,
                                               e->b[s].len, now, &ri),
                      LR_OK);
        }
    }
    return st;
}

/* ---- sequencing -------------------------------------------------------------------- */

static void
seq_differential(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("kv sequence differential", 0x6b7673657164ull);
    uint64_t rs = seed;
    for (int round = 0; round < 12; round++) {
        lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE, 0, 3, NULL);
        /* a restart puts the engine's clock 100 s on while the host's
         * stays (a wider window than the router's time since allows) */
        assert_st(lr_router_set_param(r, LR_PARAM_CLOCK_SKEW_S, 1000), LR_OK);
        lr_index *ref = NULL;
        lr_index_options io;
        lr_index_options_init(&io);
        io.seed = 99;
        io.max_instances = 1024;
        assert_st(lr_index_create(&io, &ref), LR_OK);
        struct engine *e = calloc(1, sizeof *e);
        assert_non_null(e);
        e->rs = tu_rand(&rs);
        e->ts = 1e9;
        struct host h = { r, 1, 0 };
        for (int step = 0; step < 300; step++) {
            if (step > 0 && tu_below(&rs, 60) == 0) {
                engine_restart(e);
                (void)lr_index_kv_cleared(ref, h.id);
            }
            struct batch *b = produce(e);
            uint32_t seq = e->n - 1;
            assert_st(lr_index_vllm_batch(ref, h.id, b->buf, b->len, T0, NULL),
                      LR_OK);
            uint32_t fault = (uint32_t)tu_below(&rs, 20);
            if (fault < 2)
                continue; /* lost on the wire */
            (void)deliver(&h, e, seq);
            if (fault == 2) /* delivered twice */
                (void)deliver(&h, e, seq);
            if (fault == 3 && seq > 0) /* an old one replayed */
                (void)deliver(&h, e, (uint32_t)tu_below(&rs, seq));
        }
        /* a last batch reveals a loss at the very end */
        struct batch *b = produce(e);
        assert_st(lr_index_vllm_batch(ref, h.id, b->buf, b->len, T0, NULL),
                  LR_OK);
        (void)deliver(&h, e, e->n - 1);
        assert_router_ok(r);
        if (!same_index(r->ix, ref))
            fail_msg("round %d: the router's index differs from the model's",
                     round);
        lr_router_stats s;
        lr_router_stats_init(&s);
        assert_st(lr_router_get_stats(r, &s), LR_OK);
        assert_int_equal(s.kv_gaps_open, 0);
        assert_true(s.kv_gaps > 0 && s.kv_duplicates > 0);
        assert_true(s.kv_batches >= 300 * 0.9 - 1);
        engine_drop_run(e);
        free(e);
        lr_index_destroy(ref);
        lr_router_destroy(r);
    }
}

/* The engine time of the last batch one_store() wrote: seq_apply() passes
 * the router T0 + that many seconds, so that the router's clock runs with
 * the engine's. */
static double last_store_ts;

/* One batch storing one chain block, numbered seq, at engine time ts. */
static void
one_store(struct mpw *w, uint64_t hash, double ts, uint32_t tok_seed)
{
    last_store_ts = ts;
    uint32_t t[BS];
    tu_tokens(t, BS, tok_seed);
    struct mpw_stored s = mpw_stored_of(&hash, 1, t, BS);
    w->n = 0;
    mpw_batch_ts(w, 1, false, ts);
    mpw_stored_array(w, &s, MPW_HASH_UINT);
    mpw_batch_end(w, false);
}

static uint64_t
held_blocks(lr_router *r, uint32_t id)
{
    uint64_t n = 0;
    lr_status st = lr_index_instance_blocks(r->ix, id, &n);
    return st == LR_OK ? n : 0;
}

static lr_status
seq_apply(lr_router *r, uint32_t id, uint64_t seq, const struct mpw *w,
          int32_t want_state, uint64_t want_next)
{
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    lr_status st = lr_router_vllm_batch_seq(
        r, id, seq, w->buf, w->n, T0 + (uint64_t)(last_store_ts * 1e9), &info);
    if (info.seq_state != want_state || info.next_seq != want_next)
        fail_msg("seq %llu: state %d next %llu, want %d %llu",
                 (unsigned long long)seq, info.seq_state,
                 (unsigned long long)info.next_seq, want_state,
                 (unsigned long long)want_next);
    return st;
}

/* Batches 0..5 of one engine, one block each, engine time 10..15 s. */
static void
six_batches(lr_router *r, struct mpw *w)
{
    for (uint64_t q = 0; q <= 5; q++) {
        one_store(w, 700 + q, 10.0 + (double)q, 70 + (uint32_t)q);
        assert_st(seq_apply(r, 1, q, w,
                            q == 0 ? LR_KV_SEQ_FIRST : LR_KV_SEQ_APPLIED,
                            q + 1),
                  LR_OK);
    }
    assert_int_equal(held_blocks(r, 1), 6);
}

/* A replay of an applied batch whose timestamp is NaN: 0.2 could not tell
 * it from a restart or a duplicate, applied it (LR_OK, state NONE), moved
 * the expected number back (6 -> 4) and made the next live batch a gap.
 * A timestamp that is not a time makes the batch corrupt: refused where
 * the sequence went back, nothing changed. */
static void
regress_nan_replay_cannot_rewind(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE, 0, 2, NULL);
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    six_batches(r, w);
    assert_st(lr_router_kv_removed(r, 1, (uint64_t[]){ 705 }, 1, NULL), LR_OK);
    uint64_t d0 = lr__router_digest(r);
    one_store(w, 705, NAN, 75);
    last_store_ts = 15.0;
    assert_st(seq_apply(r, 1, 3, w, LR_KV_SEQ_NONE, 6), LR_ECORRUPT);
    assert_true(lr__router_digest(r) == d0);
    assert_int_equal(held_blocks(r, 1), 5); /* the removed block stays out */
    one_store(w, 706, 16.0, 76);
    assert_st(seq_apply(r, 1, 6, w, LR_KV_SEQ_APPLIED, 7), LR_OK);
    free(w);
    lr_router_destroy(r);
}

/* One batch stamped +inf, 1e308 or far ahead: in 0.2 it became the
 * engine's last time, so the batches of a real restart after it (number
 * back, time "behind") were dropped as duplicates with LR_OK, its old
 * routes stayed and no restart was counted. Now the first two are corrupt
 * (consumed where expected: a replay would not mend them) and the third is
 * outside the engine clock's window (LR_ERANGE, nothing changed); the
 * restart is seen. */
static void
regress_far_timestamp_cannot_blind_restarts(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE, 0, 2, NULL);
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    six_batches(r, w);
    one_store(w, 706, INFINITY, 76);
    last_store_ts = 16.0;
    assert_st(seq_apply(r, 1, 6, w, LR_KV_SEQ_APPLIED, 7), LR_ECORRUPT);
    one_store(w, 707, 1e308, 77);
    last_store_ts = 17.0;
    assert_st(seq_apply(r, 1, 7, w, LR_KV_SEQ_APPLIED, 8), LR_ECORRUPT);
    uint64_t d0 = lr__router_digest(r);
    one_store(w, 708, 1e10, 78); /* a valid time, 300 years on */
    last_store_ts = 18.0;
    assert_st(seq_apply(r, 1, 8, w, LR_KV_SEQ_NONE, 8), LR_ERANGE);
    assert_true(lr__router_digest(r) == d0);
    assert_int_equal(held_blocks(r, 1), 6);
    /* the engine restarts 20 s later */
    one_store(w, 800, 38.0, 80);
    assert_st(seq_apply(r, 1, 0, w, LR_KV_SEQ_RESTART, 1), LR_OK);
    assert_int_equal(held_blocks(r, 1), 1);
    lr_kv_source src;
    lr_kv_source_init(&src);
    assert_st(lr_router_kv_source(r, 1, &src), LR_OK);
    assert_int_equal(src.restarts, 1);
    free(w);
    lr_router_destroy(r);
}

/* The engine's clock may step (an NTP correction): the first batch past
 * the window is refused and the next that agrees with it is taken, as the
 * router's own clock does; a stray value between honest ones never moves
 * it. */
static void
engine_clock_window(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE, 0, 2, NULL);
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    six_batches(r, w); /* engine 10..15 s at host T0 + 10..15 s */
    /* the host's time since counts: 100 s later, 150 s on is fine */
    assert_st(lr_router_expire(r, T0 + 70 * SEC), LR_OK);
    one_store(w, 706, 165.0, 76);
    last_store_ts = 115.0;
    assert_st(seq_apply(r, 1, 6, w, LR_KV_SEQ_APPLIED, 7), LR_OK);
    /* a stray far value, then an honest one, then the stray again */
    one_store(w, 707, 5000.0, 77);
    last_store_ts = 116.0;
    assert_st(seq_apply(r, 1, 7, w, LR_KV_SEQ_NONE, 7), LR_ERANGE);
    one_store(w, 707, 166.0, 77);
    last_store_ts = 116.0;
    assert_st(seq_apply(r, 1, 7, w, LR_KV_SEQ_APPLIED, 8), LR_OK);
    one_store(w, 708, 5000.0, 78);
    last_store_ts = 117.0;
    assert_st(seq_apply(r, 1, 8, w, LR_KV_SEQ_NONE, 8), LR_ERANGE);
    /* the clock really stepped: the retry agrees, and is taken */
    one_store(w, 708, 5001.0, 78);
    last_store_ts = 117.0;
    assert_st(seq_apply(r, 1, 8, w, LR_KV_SEQ_APPLIED, 9), LR_OK);
    free(w);
    lr_router_destroy(r);
}

/* The rules one by one, with the stats and the source query. */
static void
seq_rules(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE, 0, 2, NULL);
    /* the restarts below put the engine's clock (and the host's) 100 s on */
    assert_st(lr_router_set_param(r, LR_PARAM_CLOCK_SKEW_S, 1000), LR_OK);
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    lr_kv_source src;
    lr_kv_source_init(&src);
    assert_st(lr_router_kv_source(r, 1, &src), LR_OK);
    assert_int_equal(src.has_seq, 0);
    assert_st(lr_router_kv_source(r, 7, &src), LR_ENOENT);

    /* the first batch: any number */
    one_store(w, 100, 10.0, 1);
    assert_st(seq_apply(r, 1, 41, w, LR_KV_SEQ_FIRST, 42), LR_OK);
    assert_int_equal(held_blocks(r, 1), 1);
    /* the same again, and later with a stale timestamp: duplicates */
    uint64_t d0 = lr__router_digest(r);
    assert_st(seq_apply(r, 1, 41, w, LR_KV_SEQ_DUPLICATE, 42), LR_OK);
    one_store(w, 101, 9.0, 2);
    assert_st(seq_apply(r, 1, 40, w, LR_KV_SEQ_DUPLICATE, 42), LR_OK);
    assert_int_equal(held_blocks(r, 1), 1);
    (void)d0;
    /* the next one */
    one_store(w, 102, 11.0, 3);
    assert_st(seq_apply(r, 1, 42, w, LR_KV_SEQ_APPLIED, 43), LR_OK);
    assert_int_equal(held_blocks(r, 1), 2);
    /* 43 lost: 44 is refused, and so is 45 until the replay */
    one_store(w, 104, 13.0, 5);
    assert_st(seq_apply(r, 1, 44, w, LR_KV_SEQ_GAP, 43), LR_EGAP);
    one_store(w, 105, 14.0, 6);
    assert_st(seq_apply(r, 1, 45, w, LR_KV_SEQ_GAP, 43), LR_EGAP);
    assert_int_equal(held_blocks(r, 1), 2);
    assert_st(lr_router_kv_source(r, 1, &src), LR_OK);
    assert_int_equal(src.gap, 1);
    assert_int_equal(src.next_seq, 43);
    assert_int_equal(src.gaps, 1); /* one gap, refused twice */
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    assert_int_equal(s.kv_gaps_open, 1);
    /* the replay: 43, 44, 45 */
    one_store(w, 103, 12.0, 4);
    assert_st(seq_apply(r, 1, 43, w, LR_KV_SEQ_APPLIED, 44), LR_OK);
    one_store(w, 104, 13.0, 5);
    assert_st(seq_apply(r, 1, 44, w, LR_KV_SEQ_APPLIED, 45), LR_OK);
    one_store(w, 105, 14.0, 6);
    assert_st(seq_apply(r, 1, 45, w, LR_KV_SEQ_APPLIED, 46), LR_OK);
    assert_int_equal(held_blocks(r, 1), 5);
    assert_st(lr_router_kv_source(r, 1, &src), LR_OK);
    assert_int_equal(src.gap, 0);

    /* a restart: the number goes back, the time forward. Its routes go
     * first, then batch 0 applies. */
    one_store(w, 200, 100.0, 7);
    assert_st(seq_apply(r, 1, 0, w, LR_KV_SEQ_RESTART, 1), LR_OK);
    assert_int_equal(held_blocks(r, 1), 1);
    for (uint64_t q = 1; q <= 5; q++) {
        one_store(w, 200 + q, 100.0 + (double)q, 7 + (uint32_t)q);
        assert_st(seq_apply(r, 1, q, w, LR_KV_SEQ_APPLIED, q + 1), LR_OK);
    }
    assert_int_equal(held_blocks(r, 1), 6);
    /* a restart first seen at its batch 3 (below the 6 expected, later in
     * time): routes dropped, 0..2 to replay */
    one_store(w, 300, 200.0, 8);
    assert_st(seq_apply(r, 1, 3, w, LR_KV_SEQ_RESTART, 0), LR_EGAP);
    assert_int_equal(held_blocks(r, 1), 0);
    one_store(w, 301, 199.0, 9);
    assert_st(seq_apply(r, 1, 0, w, LR_KV_SEQ_APPLIED, 1), LR_OK);
    assert_st(lr_router_kv_source(r, 1, &src), LR_OK);
    assert_int_equal(src.restarts, 2);
    assert_int_equal(src.gaps, 2);

    /* an explicit reset (the host knows the engine restarted, or cannot
     * replay): routes dropped, the next batch starts the source anew */
    assert_st(lr_router_kv_reset(r, 1), LR_OK);
    assert_int_equal(held_blocks(r, 1), 0);
    assert_st(lr_router_kv_reset(r, 9), LR_ENOENT);
    one_store(w, 400, 50.0, 10);
    assert_st(seq_apply(r, 1, 77, w, LR_KV_SEQ_FIRST, 78), LR_OK);
    assert_int_equal(held_blocks(r, 1), 1);

    /* AllBlocksCleared in sequence clears */
    w->n = 0;
    mpw_batch_ts(w, 1, true, 51.0);
    mpw_cleared(w, true);
    mpw_batch_end(w, true);
    assert_st(seq_apply(r, 1, 78, w, LR_KV_SEQ_APPLIED, 79), LR_OK);
    assert_int_equal(held_blocks(r, 1), 0);

    /* a corrupt batch is consumed: nothing applied, the source moves on */
    static const uint8_t junk[] = { 0x93, 0xc1 };
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    assert_st(lr_router_vllm_batch_seq(r, 1, 79, junk, sizeof junk, T0, &info),
              LR_ECORRUPT);
    assert_int_equal(info.next_seq, 80);
    /* sources are per instance; a removed instance's state goes */
    one_store(w, 500, 60.0, 11);
    assert_st(seq_apply(r, 0, 5, w, LR_KV_SEQ_FIRST, 6), LR_OK);
    assert_st(lr_router_remove_instance(r, 0), LR_OK);
    assert_st(lr_router_vllm_batch_seq(r, 0, 6, w->buf, w->n, T0, NULL),
              LR_ENOENT);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    assert_int_equal(s.kv_restarts, 3);
    assert_true(s.kv_batches >= 13);
    assert_int_equal(s.kv_duplicates, 2);
    /* bad arguments */
    assert_st(lr_router_vllm_batch_seq(NULL, 1, 0, w->buf, w->n, T0, NULL),
              LR_EINVAL);
    assert_st(lr_router_vllm_batch_seq(r, 1, 0, NULL, 3, T0, NULL), LR_EINVAL);
    lr_vllm_batch_info small;
    lr_vllm_batch_info_init(&small);
    small.struct_size = 8;
    assert_st(lr_router_vllm_batch_seq(r, 1, 0, w->buf, w->n, T0, &small),
              LR_EVERSION);
    lr_kv_source tiny;
    lr_kv_source_init(&tiny);
    tiny.struct_size = 4;
    assert_st(lr_router_kv_source(r, 1, &tiny), LR_EVERSION);
    assert_router_ok(r);
    free(w);
    lr_router_destroy(r);
}

/* ---- allocation failures on the sequenced path ------------------------------------ */

struct seq_oom {
    struct mpw w[3];
    uint64_t want;
};

static bool
sc_seq(struct tu_alloc *t, void *ctx)
{
    struct seq_oom *c = ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE, 0, 2, &t->a);
    tu_alloc_resume(t, arm);
    bool failed = false;
    for (uint64_t s = 0; s < 3; s++) {
        lr_status st =
            lr_router_vllm_batch_seq(r, 1, s, c->w[s].buf, c->w[s].n, T0, NULL);
        assert_true(st == LR_OK || st == LR_ENOMEM);
        if (st == LR_ENOMEM) { /* the same call again completes it */
            failed = true;
            arm = tu_alloc_pause(t);
            assert_st(lr_router_vllm_batch_seq(r, 1, s, c->w[s].buf, c->w[s].n,
                                               T0, NULL),
                      LR_OK);
            tu_alloc_resume(t, arm);
        }
    }
    failed |= t->failed;
    (void)tu_alloc_pause(t);
    assert_router_ok(r);
    lr_blob *b = NULL;
    assert_st(lr__index_save(r->ix, T0, &b), LR_OK);
    uint64_t d = lr__hash(lr_blob_data(b), lr_blob_size(b), 0);
    lr_blob_destroy(b);
    if (c->want == 0)
        c->want = d;
    assert_true(d == c->want);
    lr_router_destroy(r);
    t->failed = failed; /* the pauses re-armed the counter */
    return !failed;
}

static void
seq_oom(void **state)
{
    (void)state;
    struct seq_oom *c = calloc(1, sizeof *c);
    assert_non_null(c);
    for (uint64_t s = 0; s < 3; s++)
        one_store(&c->w[s], 10 + s, 1.0 + (double)s, (uint32_t)s + 20);
    /* the state one uninterrupted run gives */
    struct tu_alloc t;
    tu_alloc_init(&t);
    assert_true(sc_seq(&t, c));
    tu_oom_loop(sc_seq, c, 5000);
    free(c);
}

/* ---- deltas between replicas ------------------------------------------------------- */

static lr_blob *export(lr_router *r, uint64_t since, uint64_t *mark)
{
    lr_blob *b = NULL;
    assert_st(lr_router_export_delta(r, since, &b, mark), LR_OK);
    return b;
}

static lr_status
import(lr_router *r, const lr_blob *b, uint64_t now)
{
    return lr_router_import_delta(r, lr_blob_data(b), lr_blob_size(b), now);
}

static uint32_t
delta_routes(const lr_blob *b)
{
    const uint8_t *p = lr_blob_data(b);
    return (uint32_t)p[16] | (uint32_t)p[17] << 8 | (uint32_t)p[18] << 16 |
           (uint32_t)p[19] << 24;
}

static lr_router_stats
rstats(lr_router *r)
{
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    return s;
}

static void
delta_once_and_no_echo(void **state)
{
    (void)state;
    lr_router *a = mk_router(LR_POLICY_PREFIX_CACHE, 0xA, 4, NULL);
    lr_router *b = mk_router(LR_POLICY_PREFIX_CACHE, 0xB, 4, NULL);
    uint32_t t[8][6 * BT];
    for (int i = 0; i < 8; i++)
        toks(t[i], 6 * BT, 100 + (uint64_t)i);
    for (uint64_t i = 0; i < 4; i++)
        assert_st(route_one(a, i + 1, t[i], 6 * BT, 0, T0, NULL), LR_OK);
    uint64_t m1;
    lr_blob *d1 = export(a, 0, &m1);
    assert_int_equal(rstats(a).deltas_exported, 1);
    assert_st(import(b, d1, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 1);
    /* the same delta again, even much later, changes nothing */
    uint64_t db = lr__router_digest(b);
    lr_router_stats sb = rstats(b);
    assert_st(import(b, d1, T0 + 50 * SEC), LR_OK);
    assert_int_equal(rstats(b).deltas_skipped, sb.deltas_skipped + 1);
    lr_router_stats sb2 = rstats(b);
    sb2.deltas_skipped = sb.deltas_skipped;
    assert_memory_equal(&sb2, &sb, sizeof sb);
    (void)db;
    /* B routes nothing of its own: what it imported goes back to nobody */
    lr_blob *eb = export(b, 0, NULL);
    assert_int_equal(delta_routes(eb), 0);
    lr_blob_destroy(eb);
    /* A's own delta, echoed back by the bus */
    uint64_t da = lr__router_digest(a);
    assert_st(import(a, d1, T0), LR_OK);
    assert_true(lr__router_digest(a) == da);
    assert_int_equal(rstats(a).deltas_skipped, 1);

    /* the next ones: incremental, applied once each */
    for (uint64_t i = 4; i < 6; i++)
        assert_st(route_one(a, i + 1, t[i], 6 * BT, 0, T0, NULL), LR_OK);
    uint64_t m2;
    lr_blob *d2 = export(a, m1, &m2);
    assert_st(import(b, d2, T0), LR_OK);
    assert_st(import(b, d2, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 2);
    /* an older full export looks like A restarted (its mark went back)
     * and applies again: the same routes, refreshed; B then takes d2's
     * marks as new once more */
    assert_st(import(b, d1, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 3);
    assert_st(import(b, d2, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 4);
    /* d3 lost, d4 arrives: applied, the loss counted; a full export heals */
    assert_st(route_one(a, 7, t[6], 6 * BT, 0, T0, NULL), LR_OK);
    uint64_t m3, m4;
    lr_blob *d3 = export(a, m2, &m3);
    assert_st(route_one(a, 8, t[7], 6 * BT, 0, T0, NULL), LR_OK);
    lr_blob *d4 = export(a, m3, &m4);
    assert_st(import(b, d4, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_lost, 1);
    uint32_t ids[1];
    lr_decision d;
    lr_decision_init(&d);
    assert_st(route_one(b, 100, t[6], 6 * BT, LR_ROUTE_DRY_RUN, T0, &d), LR_OK);
    assert_int_equal(d.cached_tokens, 0); /* d3's placement never came */
    lr_blob *full = export(a, 0, NULL);
    assert_st(import(b, full, T0), LR_OK);
    assert_st(route_one(b, 101, t[6], 6 * BT, LR_ROUTE_DRY_RUN, T0, &d), LR_OK);
    assert_int_equal(d.cached_tokens, 6 * BT);
    /* once healed, the same full export is a duplicate */
    lr_router_stats before = rstats(b);
    assert_st(import(b, full, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_skipped, before.deltas_skipped + 1);
    (void)ids;

    /* A restarts under the same id: its journal counts from 0 again, and
     * its first (full) export is taken */
    lr_router *a2 = mk_router(LR_POLICY_PREFIX_CACHE, 0xA, 4, NULL);
    assert_st(route_one(a2, 1, t[0], 3 * BT, 0, T0, NULL), LR_OK);
    lr_blob *f2 = export(a2, 0, NULL);
    before = rstats(b);
    assert_st(import(b, f2, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, before.deltas_imported + 1);
    assert_router_ok(b);

    lr_blob_destroy(f2);
    lr_blob_destroy(full);
    lr_blob_destroy(d4);
    lr_blob_destroy(d3);
    lr_blob_destroy(d2);
    lr_blob_destroy(d1);
    lr_router_destroy(a2);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

/* ---- gauges ----------------------------------------------------------------------- */

static lr_blob *
gauges(lr_router *r)
{
    lr_blob *b = NULL;
    assert_st(lr_router_export_gauges(r, &b), LR_OK);
    return b;
}

static lr_status
take_gauges(lr_router *r, const lr_blob *b, uint64_t now)
{
    return lr_router_import_gauges(r, lr_blob_data(b), lr_blob_size(b), now);
}

/* The inflight of each candidate row of r for a small request at now. */
static void
row_inflight(lr_router *r, uint64_t now, uint32_t *out, uint32_t n)
{
    uint32_t t[BT];
    toks(t, BT, 5);
    lr_request q;
    lr_request_init(&q);
    q.tokens = t;
    q.n_tokens = BT;
    q.now_ns = now;
    lr_candidate rows[8];
    size_t got = 0;
    assert_st(lr_router_candidates(r, &q, rows, 8, sizeof rows[0], &got),
              LR_OK);
    assert_int_equal(got, n);
    for (uint32_t k = 0; k < n; k++)
        out[rows[k].instance] = rows[k].inflight;
}

static void
gauges_shared_and_expiring(void **state)
{
    (void)state;
    lr_router *a = mk_router(LR_POLICY_ROUND_ROBIN, 1, 3, NULL);
    lr_router *b = mk_router(LR_POLICY_LEAST_REQUEST, 2, 3, NULL);
    lr_router *c = mk_router(LR_POLICY_LEAST_REQUEST, 3, 3, NULL);
    uint32_t t[BT];
    toks(t, BT, 9);
    /* A: six requests in flight, round-robin: two on each, then one more
     * finishes its first token */
    for (uint64_t i = 1; i <= 6; i++)
        assert_st(route_one(a, i, t, BT, LR_ROUTE_NO_LEARN, T0, NULL), LR_OK);
    assert_st(lr_router_complete(a, 1, 4, T0), LR_OK);
    lr_load_snapshot ls;
    lr_load_snapshot_init(&ls);
    uint32_t want[3];
    for (uint32_t id = 0; id < 3; id++) {
        assert_st(lr_router_instance_load(a, id, &ls), LR_OK);
        want[id] = ls.inflight;
    }
    lr_blob *g1 = gauges(a);
    assert_st(take_gauges(b, g1, T0), LR_OK);
    uint32_t got[3];
    row_inflight(b, T0 + SEC, got, 3);
    for (uint32_t id = 0; id < 3; id++)
        assert_int_equal(got[id], want[id]);
    /* B's own requests add to them; least-request sees the sum */
    lr_decision d;
    lr_decision_init(&d);
    assert_st(route_one(b, 50, t, BT, LR_ROUTE_NO_LEARN, T0 + SEC, &d), LR_OK);
    uint32_t least = want[0] <= want[1] && want[0] <= want[2] ? 0
                     : want[1] <= want[2]                     ? 1
                                                              : 2;
    assert_int_equal(d.instance, least);
    /* its own instance load is its own */
    assert_st(lr_router_instance_load(b, d.instance, &ls), LR_OK);
    assert_int_equal(ls.inflight, 1);
    /* stale (the same gauge again, an older one) and own: skipped */
    lr_blob *g2 = gauges(a);
    assert_st(take_gauges(b, g2, T0 + SEC), LR_OK);
    lr_router_stats s0 = rstats(b);
    assert_st(take_gauges(b, g1, T0 + SEC), LR_OK);
    assert_st(take_gauges(b, g2, T0 + SEC), LR_OK);
    lr_blob *own = gauges(b);
    assert_st(take_gauges(b, own, T0 + SEC), LR_OK);
    assert_int_equal(rstats(b).gauges_skipped, s0.gauges_skipped + 3);
    /* C never heard from A: nothing added */
    row_inflight(c, T0 + SEC, got, 3);
    assert_int_equal(got[0] + got[1] + got[2], 0);
    /* two seconds later the gauge no longer counts (before and after a
     * sweep) */
    row_inflight(b, T0 + SEC + 2 * SEC + 1, got, 3);
    assert_int_equal(got[0] + got[1] + got[2], 1); /* B's own request */
    assert_st(lr_router_expire(b, T0 + 4 * SEC), LR_OK);
    row_inflight(b, T0 + 4 * SEC, got, 3);
    assert_int_equal(got[0] + got[1] + got[2], 1);
    assert_int_equal(rstats(b).gauges_expired, 1);
    assert_int_equal(rstats(b).peers_live, 0);
    /* then a newer gauge of A counts again */
    lr_blob *g3 = gauges(a);
    assert_st(take_gauges(b, g3, T0 + 5 * SEC), LR_OK);
    assert_int_equal(rstats(b).peers_live, 1);
    row_inflight(b, T0 + 5 * SEC, got, 3);
    assert_int_equal(got[0] + got[1] + got[2], 5 + 1);
    /* no replica id: no gauges to export */
    lr_router *anon = mk_router(LR_POLICY_ROUND_ROBIN, 0, 1, NULL);
    lr_blob *x = NULL;
    assert_st(lr_router_export_gauges(anon, &x), LR_ESTATE);
    assert_null(x);
    lr_router_destroy(anon);
    assert_router_ok(b);
    lr_blob_destroy(g1);
    lr_blob_destroy(g2);
    lr_blob_destroy(g3);
    lr_blob_destroy(own);
    lr_router_destroy(c);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

/* Every truncation and bit flip of a gauge message is refused and changes
 * nothing; so do crafted ones with bad contents. */
static void
gauges_malformed(void **state)
{
    (void)state;
    lr_router *a = mk_router(LR_POLICY_ROUND_ROBIN, 1, 3, NULL);
    lr_router *b = mk_router(LR_POLICY_LEAST_REQUEST, 2, 3, NULL);
    uint32_t t[BT];
    toks(t, BT, 9);
    for (uint64_t i = 1; i <= 4; i++)
        assert_st(route_one(a, i, t, BT, LR_ROUTE_NO_LEARN, T0, NULL), LR_OK);
    lr_blob *g = gauges(a);
    size_t n = lr_blob_size(g);
    uint8_t *buf = malloc(n + 1);
    assert_non_null(buf);
    uint64_t d0 = lr__router_digest(b);
    for (size_t l = 0; l < n; l++) {
        memcpy(buf, lr_blob_data(g), l);
        assert_st(lr_router_import_gauges(b, buf, l, T0), LR_ECORRUPT);
    }
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, lr_blob_data(g), n);
            buf[i] ^= (uint8_t)(1u << bit);
            lr_status st = lr_router_import_gauges(b, buf, n, T0);
            assert_true(st == LR_ECORRUPT ||
                        (st == LR_EVERSION && (i == 4 || i == 5)));
        }
    assert_true(lr__router_digest(b) == d0);
    assert_st(lr_router_import_gauges(NULL, buf, n, T0), LR_EINVAL);
    assert_st(lr_router_import_gauges(b, NULL, 4, T0), LR_EINVAL);
    free(buf);
    lr_blob_destroy(g);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

struct gauge_oom {
    lr_blob *g;
};

static bool
sc_gauge(struct tu_alloc *t, void *ctx)
{
    struct gauge_oom *c = ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *b = mk_router(LR_POLICY_LEAST_REQUEST, 2, 3, &t->a);
    uint64_t d0 = lr__router_digest(b);
    tu_alloc_resume(t, arm);
    lr_status st = take_gauges(b, c->g, T0);
    bool failed = t->failed;
    (void)tu_alloc_pause(t);
    assert_true(st == LR_OK || st == LR_ENOMEM);
    if (st == LR_ENOMEM)
        assert_true(lr__router_digest(b) == d0);
    else
        assert_int_equal(rstats(b).gauges_imported, 1);
    lr_router_destroy(b);
    t->failed = failed;
    return st == LR_OK && !failed;
}

static void
gauges_oom(void **state)
{
    (void)state;
    lr_router *a = mk_router(LR_POLICY_ROUND_ROBIN, 1, 3, NULL);
    uint32_t t[BT];
    toks(t, BT, 9);
    for (uint64_t i = 1; i <= 4; i++)
        assert_st(route_one(a, i, t, BT, LR_ROUTE_NO_LEARN, T0, NULL), LR_OK);
    struct gauge_oom c = { gauges(a) };
    tu_oom_loop(sc_gauge, &c, 100);
    lr_blob_destroy(c.g);
    lr_router_destroy(a);
}

/* More replicas than max_peers: a slot is reused once a peer's gauge has
 * expired; while every slot's is live, LR_ELIMIT. */
static void
gauges_peer_limit(void **state)
{
    (void)state;
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.replica_id = 100;
    o.max_peers = 2;
    lr_router *b = NULL;
    assert_st(lr_router_create(&o, &b), LR_OK);
    add_instance(b, "10.0", 0, 0, 0);
    lr_blob *g[3];
    for (int i = 0; i < 3; i++) {
        lr_router *p =
            mk_router(LR_POLICY_ROUND_ROBIN, 1 + (uint64_t)i, 1, NULL);
        g[i] = gauges(p);
        lr_router_destroy(p);
    }
    assert_st(take_gauges(b, g[0], T0), LR_OK);
    assert_st(take_gauges(b, g[1], T0), LR_OK);
    uint64_t d0 = lr__router_digest(b);
    assert_st(take_gauges(b, g[2], T0 + SEC), LR_ELIMIT);
    assert_true(lr__router_digest(b) == d0);
    assert_st(take_gauges(b, g[2], T0 + 3 * SEC), LR_OK);
    o.max_peers = LR_ROUTER_MAX_PEERS + 1;
    lr_router *bad = NULL;
    assert_st(lr_router_create(&o, &bad), LR_EINVAL);
    for (int i = 0; i < 3; i++)
        lr_blob_destroy(g[i]);
    lr_router_destroy(b);
}

/* A copy of delta b whose header says (since, mark), resealed: what
 * anyone on the bus can send in a replica's name when no peer key is
 * set. */
static uint8_t *
forge_marks(const lr_blob *b, uint64_t since, uint64_t mark)
{
    size_t n = lr_blob_size(b);
    uint8_t *x = malloc(n);
    assert_non_null(x);
    memcpy(x, lr_blob_data(b), n);
    for (int i = 0; i < 8; i++) {
        x[24 + i] = (uint8_t)(since >> (8 * i));
        x[32 + i] = (uint8_t)(mark >> (8 * i));
    }
    uint64_t h = XXH3_64bits_withSeed(x, n - 8, LR_SEED_DELTA);
    for (int i = 0; i < 8; i++)
        x[n - 8 + i] = (uint8_t)(h >> (8 * i));
    return x;
}

/* A delta in a replica's name with mark 2^64 - 1: 0.2 then skipped every
 * later incremental delta of that replica with LR_OK (deltas_skipped
 * rising, deltas_lost 0) until its next full export. Now only the very
 * delta applied last is a duplicate: the replica's next delta applies. */
static void
regress_forged_delta_mark_skips_nothing(void **state)
{
    (void)state;
    lr_router *a = mk_router(LR_POLICY_PREFIX_CACHE, 0xA, 4, NULL);
    lr_router *b = mk_router(LR_POLICY_PREFIX_CACHE, 0xB, 4, NULL);
    uint32_t t[4][6 * BT];
    for (int i = 0; i < 4; i++)
        toks(t[i], 6 * BT, 300 + (uint64_t)i);
    assert_st(route_one(a, 1, t[0], 6 * BT, 0, T0, NULL), LR_OK);
    uint64_t m1, m2;
    lr_blob *d1 = export(a, 0, &m1);
    assert_st(import(b, d1, T0), LR_OK);
    uint8_t *forged = forge_marks(d1, m1, UINT64_MAX);
    assert_st(lr_router_import_delta(b, forged, lr_blob_size(d1), T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 2);
    /* a's next learns, incremental from m1 */
    assert_st(route_one(a, 2, t[1], 6 * BT, 0, T0, NULL), LR_OK);
    lr_blob *d2 = export(a, m1, &m2);
    assert_st(import(b, d2, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 3);
    assert_int_equal(rstats(b).deltas_skipped, 0);
    lr_candidate rows[4];
    size_t n = 0;
    lr_request q;
    lr_request_init(&q);
    q.tokens = t[1];
    q.n_tokens = 6 * BT;
    q.now_ns = T0;
    assert_st(lr_router_candidates(b, &q, rows, 4, sizeof rows[0], &n), LR_OK);
    uint32_t best = 0;
    for (size_t k = 0; k < n; k++)
        best = rows[k].cached_tokens > best ? rows[k].cached_tokens : best;
    assert_int_equal(best, 6 * BT); /* learned from d2 */
    /* the bus delivers d2 twice: the second is a duplicate */
    assert_st(import(b, d2, T0), LR_OK);
    assert_int_equal(rstats(b).deltas_skipped, 1);
    free(forged);
    lr_blob_destroy(d1);
    lr_blob_destroy(d2);
    lr_router_destroy(a);
    lr_router_destroy(b);
}

/* max_peers made-up origins that refresh gauges before they expire held
 * every peer slot in 0.2: an honest new replica's gauges and deltas got
 * LR_ELIMIT for as long as the flood went on. A replica that brings a
 * delta now takes the slot of the live peer with the least evidence
 * (gauges only, the latest to arrive); one with gauges alone still waits
 * for a free or dead slot, and a peer that sent deltas keeps its slot. */
static void
regress_gauge_flood_cannot_lock_out_a_replica(void **state)
{
    (void)state;
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.replica_id = 100;
    o.max_peers = 2;
    lr_router *b = NULL;
    assert_st(lr_router_create(&o, &b), LR_OK);
    for (uint32_t i = 0; i < 4; i++)
        add_instance(b, "10.0", i, 0, 0);
    lr_blob *g[2];
    for (int i = 0; i < 2; i++) {
        lr_router *p =
            mk_router(LR_POLICY_ROUND_ROBIN, 900 + (uint64_t)i, 4, NULL);
        g[i] = gauges(p);
        lr_router_destroy(p);
    }
    /* the flood holds both slots, refreshed every second */
    assert_st(take_gauges(b, g[0], T0), LR_OK);
    assert_st(take_gauges(b, g[1], T0 + SEC / 2), LR_OK);
    lr_router *honest = mk_router(LR_POLICY_PREFIX_CACHE, 7, 4, NULL);
    uint32_t t[6 * BT];
    toks(t, 6 * BT, 31);
    assert_st(route_one(honest, 1, t, 6 * BT, 0, T0, NULL), LR_OK);
    lr_blob *hg = gauges(honest), *hd = export(honest, 0, NULL);
    uint64_t d0 = lr__router_digest(b);
    assert_st(take_gauges(b, hg, T0 + SEC), LR_ELIMIT); /* gauges alone */
    assert_true(lr__router_digest(b) == d0);
    assert_st(import(b, hd, T0 + SEC), LR_OK); /* a delta: evidence */
    assert_st(take_gauges(b, hg, T0 + SEC), LR_OK);
    assert_int_equal(rstats(b).deltas_imported, 1);
    /* the flood's newest origin lost its slot and cannot take it back */
    assert_st(take_gauges(b, g[0], T0 + 3 * SEC / 2), LR_OK);
    assert_st(take_gauges(b, g[1], T0 + 3 * SEC / 2), LR_ELIMIT);
    lr_blob_destroy(hg);
    lr_blob_destroy(hd);
    for (int i = 0; i < 2; i++)
        lr_blob_destroy(g[i]);
    lr_router_destroy(honest);
    lr_router_destroy(b);
}

/* With a peer key, only messages sealed with it are taken: anything made
 * up on the bus (or sealed with another key, or not sealed) is
 * LR_ECORRUPT and changes nothing. */
static void
peer_key_seals_deltas_and_gauges(void **state)
{
    (void)state;
    static const uint8_t key[16] = { 1, 2,  3,  4,  5,  6,  7,  8,
                                     9, 10, 11, 12, 13, 14, 15, 16 };
    uint8_t other[16];
    memcpy(other, key, 16);
    other[15] ^= 1;
    lr_router *a = mk_router(LR_POLICY_PREFIX_CACHE, 0xA, 4, NULL);
    lr_router *b = mk_router(LR_POLICY_PREFIX_CACHE, 0xB, 4, NULL);
    assert_st(lr_router_set_peer_key(a, key, 16), LR_OK);
    uint32_t t[6 * BT];
    toks(t, 6 * BT, 41);
    assert_st(route_one(a, 1, t, 6 * BT, 0, T0, NULL), LR_OK);
    lr_blob *d = export(a, 0, NULL), *g = gauges(a);
    uint64_t d0 = lr__router_digest(b);
    assert_st(import(b, d, T0), LR_ECORRUPT); /* b has no key */
    assert_st(take_gauges(b, g, T0), LR_ECORRUPT);
    assert_st(lr_router_set_peer_key(b, other, 16), LR_OK);
    assert_st(import(b, d, T0), LR_ECORRUPT);
    assert_st(take_gauges(b, g, T0), LR_ECORRUPT);
    /* a delta forged without the key, in a's name */
    uint8_t *f = forge_marks(d, 0, 5);
    assert_st(lr_router_set_peer_key(b, key, 16), LR_OK);
    assert_st(lr_router_import_delta(b, f, lr_blob_size(d), T0), LR_ECORRUPT);
    assert_true(lr__router_digest(b) == d0);
    /* the right key */
    assert_st(import(b, d, T0), LR_OK);
    assert_st(take_gauges(b, g, T0), LR_OK);
    assert_int_equal(rstats(b).gauges_imported, 1);
    /* bad arguments */
    assert_st(lr_router_set_peer_key(b, key, 15), LR_EINVAL);
    assert_st(lr_router_set_peer_key(b, NULL, 16), LR_EINVAL);
    assert_st(lr_router_set_peer_key(NULL, key, 16), LR_EINVAL);
    assert_st(lr_router_set_peer_key(b, NULL, 0), LR_OK); /* cleared */
    assert_st(import(b, d, T0), LR_ECORRUPT);
    free(f);
    lr_blob_destroy(d);
    lr_blob_destroy(g);
    lr_router_destroy(a);
    lr_router_destroy(b);
}

/* Every replica call that takes a time is judged by the router's clock
 * (lr_router.h, "Clock"): a timestamp far ahead is LR_ERANGE and changes
 * nothing (no sequence consumed, no gauge, no delta mark, no snapshot). */
static void
clock_refusals(void **state)
{
    (void)state;
    const uint64_t far = T0 + 3600 * SEC, bad = UINT64_MAX;
    lr_router *a = mk_router(LR_POLICY_PREFIX_CACHE_AND_LOAD, 5, 2, NULL);
    lr_router *b = mk_router(LR_POLICY_PREFIX_CACHE_AND_LOAD, 6, 2, NULL);
    uint32_t t[4 * BT];
    toks(t, 4 * BT, 8);
    assert_st(route_one(a, 1, t, 4 * BT, 0, T0, NULL), LR_OK);
    assert_st(route_one(b, 1, t, 4 * BT, LR_ROUTE_DRY_RUN, T0, NULL), LR_OK);
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    one_store(w, 100, 10.0, 1);
    lr_blob *g = gauges(a), *d = export(a, 0, NULL), *sn = NULL;
    uint64_t before = lr__router_digest(b);
    /* (an honest call between two far ones: a pair would be a jump) */
    for (int k = 0; k < 2; k++) {
        uint64_t at = k ? bad : far;
        assert_st(lr_router_vllm_batch_seq(b, 1, 7, w->buf, w->n, at, NULL),
                  LR_ERANGE);
        assert_st(lr_router_expire(b, T0), LR_OK);
        assert_st(take_gauges(b, g, at), LR_ERANGE);
        assert_st(lr_router_expire(b, T0), LR_OK);
        assert_st(
            lr_router_import_delta(b, lr_blob_data(d), lr_blob_size(d), at),
            LR_ERANGE);
        assert_st(lr_router_expire(b, T0), LR_OK);
        assert_st(lr_router_snapshot(b, at, &sn), LR_ERANGE);
        assert_null(sn);
    }
    assert_int_equal(lr__router_digest(b), before);
    lr_kv_source src;
    lr_kv_source_init(&src);
    assert_st(lr_router_kv_source(b, 1, &src), LR_OK);
    assert_int_equal(src.has_seq, 0);
    lr_router_stats st = rstats(b);
    assert_int_equal(st.kv_batches + st.gauges_imported + st.deltas_imported,
                     0);
    /* a restore at a refused time leaves the router empty */
    assert_st(lr_router_snapshot(a, T0, &sn), LR_OK);
    lr_router *c = mk_router(LR_POLICY_PREFIX_CACHE_AND_LOAD, 7, 0, NULL);
    assert_st(lr_router_restore(c, lr_blob_data(sn), lr_blob_size(sn), bad),
              LR_ERANGE);
    assert_int_equal(rstats(c).instances, 0);
    assert_st(lr_router_restore(c, lr_blob_data(sn), lr_blob_size(sn), T0),
              LR_OK);
    assert_int_equal(rstats(c).instances, 2);
    lr_blob_destroy(sn);
    lr_blob_destroy(g);
    lr_blob_destroy(d);
    free(w);
    lr_router_destroy(c);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seq_rules),
        cmocka_unit_test(regress_nan_replay_cannot_rewind),
        cmocka_unit_test(regress_far_timestamp_cannot_blind_restarts),
        cmocka_unit_test(engine_clock_window),
        cmocka_unit_test(seq_differential),
        cmocka_unit_test(seq_oom),
        cmocka_unit_test(delta_once_and_no_echo),
        cmocka_unit_test(gauges_shared_and_expiring),
        cmocka_unit_test(gauges_malformed),
        cmocka_unit_test(gauges_oom),
        cmocka_unit_test(gauges_peer_limit),
        cmocka_unit_test(regress_forged_delta_mark_skips_nothing),
        cmocka_unit_test(regress_gauge_flood_cannot_lock_out_a_replica),
        cmocka_unit_test(peer_key_seals_deltas_and_gauges),
        cmocka_unit_test(clock_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
