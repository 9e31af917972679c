/* lr_router_snapshot / lr_router_restore and the index state under them
 * (lr__index_save / lr__index_load):
 *
 * - a restored router snapshots to the same bytes (instances, routes with
 *   trust and ages, engine hashes, watermarks, GORGO's weights, adaptive's
 *   fits, Lodestar's network);
 * - a replica restored from a snapshot and fed every engine's events
 *   again (the ones before its watermarks are duplicates) ends in the
 *   state of one that never stopped;
 * - ages run on the host clock across the downtime;
 * - corrupt, truncated, foreign-version or impossible blobs are refused
 *   and change nothing, and restore is all or nothing under allocation
 *   failures, with nothing leaked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "libroute/lr_ring.h"
#include "libroute/lr_vllm.h"
#include "common/lr_hash.h"
#include "mpw.h"
#include "router-helpers.h"
#include "policy/adaptive.h"
#include "router/router_impl.h"

#define BS 16u

static lr_router *
mk(int32_t policy, uint64_t replica, const lr_allocator *a)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = policy;
    o.seed = OPT_SEED;
    o.allocator = a;
    o.replica_id = replica;
    o.index_ttl_ns = 100 * SEC;
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    lo.min_samples = 64;
    lo.retrain_every = 64;
    lo.fifo_capacity = 256;
    lo.replay_capacity = 64;
    lo.epochs = 2;
    o.learner = &lo;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    return r;
}

static void
add_fleet(lr_router *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(add_instance(r, "10.1", i, i % 3, (i + 1) * MS), i);
}

static lr_blob *
snap(lr_router *r, uint64_t now)
{
    lr_blob *b = NULL;
    assert_st(lr_router_snapshot(r, now, &b), LR_OK);
    assert_non_null(b);
    return b;
}

static void
assert_same_blob(const lr_blob *a, const lr_blob *b, const char *what)
{
    if (lr_blob_size(a) != lr_blob_size(b) ||
        memcmp(lr_blob_data(a), lr_blob_data(b), lr_blob_size(a)) != 0)
        fail_msg("%s: the snapshots differ (%zu and %zu bytes)", what,
                 lr_blob_size(a), lr_blob_size(b));
}

/* A batch storing `nb` blocks of chain c from depth d (engine hashes
 * (c, depth)), at engine time ts. */
static void
store(struct mpw *w, uint32_t c, uint32_t d, uint32_t nb, double ts)
{
    uint64_t h[4];
    uint32_t t[4 * BS];
    for (uint32_t i = 0; i < nb; i++) {
        h[i] = ((uint64_t)c << 32) | (d + i + 1);
        for (uint32_t j = 0; j < BS; j++) {
            uint64_t s = ((uint64_t)c << 20) + (d + i) * BS + j;
            t[i * BS + j] = (uint32_t)tu_rand(&s);
        }
    }
    struct mpw_stored s = mpw_stored_of(h, nb, t, BS);
    s.has_parent = d > 0;
    s.parent = ((uint64_t)c << 32) | d;
    s.group_idx = 0;
    w->n = 0;
    mpw_batch_ts(w, 1, false, ts);
    mpw_stored_array(w, &s, MPW_HASH_UINT);
    mpw_batch_end(w, false);
}

static void
removal(struct mpw *w, uint32_t c, uint32_t d, double ts)
{
    uint64_t h = ((uint64_t)c << 32) | d;
    w->n = 0;
    mpw_batch_ts(w, 1, true, ts);
    mpw_removed(w, &h, 1, true, MPW_HASH_UINT);
    mpw_batch_end(w, true);
}

/* ---- a full router, saved and restored ------------------------------------------ */

/* A router with a bit of everything: routes learned (LOCAL) and imported
 * (REMOTE), engine events with watermarks, a draining instance, RTTs,
 * GORGO weights, adaptive's fits, a Lodestar network. */
static lr_router *
busy_router(void)
{
    lr_router *r = mk(LR_POLICY_ADAPTIVE, 0x51, NULL);
    add_fleet(r, 5);
    assert_st(lr_router_observe_rtt(r, 2, 3 * MS + 7), LR_OK);
    assert_st(lr_router_drain_instance(r, 4, 1), LR_OK);
    uint32_t t[6 * BT];
    uint64_t now = T0;
    for (uint64_t i = 1; i <= 40; i++) {
        toks(t, 6 * BT, i % 7);
        assert_st(route_one(r, i, t, 6 * BT, 0, now, NULL), LR_OK);
        assert_st(lr_router_first_token(r, i, now + 30 * MS + i * MS), LR_OK);
        assert_st(lr_router_complete(r, i, 5, now + 60 * MS), LR_OK);
        now += 50 * MS;
    }
    /* Lodestar: its samples, then a network */
    assert_st(lr_router_set_policy(r, LR_POLICY_LODESTAR), LR_OK);
    for (uint64_t i = 100; i < 200; i++) {
        toks(t, 6 * BT, i % 11);
        assert_st(route_one(r, i, t, 6 * BT, 0, now, NULL), LR_OK);
        assert_st(lr_router_first_token(r, i, now + (i % 9) * MS), LR_OK);
        assert_st(lr_router_complete(r, i, 5, now + 20 * MS), LR_OK);
        now += 20 * MS;
    }
    int32_t trained = 0;
    assert_st(lr_router_learn_step(r, LR_LEARN_FORCE, &trained), LR_OK);
    assert_int_equal(trained, 1);
    assert_st(lr_router_set_policy(r, LR_POLICY_GORGO), LR_OK);
    assert_st(lr_router_set_param(r, LR_PARAM_GORGO_W_RTT, 0.3), LR_OK);
    /* a peer's delta: REMOTE routes, and its watermark */
    lr_router *peer = mk(LR_POLICY_PREFIX_CACHE, 0x52, NULL);
    add_fleet(peer, 5);
    toks(t, 6 * BT, 77);
    assert_st(route_one(peer, 1, t, 6 * BT, 0, now, NULL), LR_OK);
    lr_blob *d = NULL;
    assert_st(lr_router_export_delta(peer, 0, &d, NULL), LR_OK);
    assert_st(lr_router_import_delta(r, lr_blob_data(d), lr_blob_size(d), now),
              LR_OK);
    lr_blob_destroy(d);
    lr_router_destroy(peer);
    /* engine events on instance 1 and 3, with sequence numbers */
    struct mpw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    for (uint32_t k = 0; k < 6; k++) {
        store(w, k % 2, k / 2, 2, 10.0 + k);
        assert_st(lr_router_vllm_batch_seq(r, 1 + 2 * (k % 2), 100 + k / 2,
                                           w->buf, w->n, now, NULL),
                  LR_OK);
    }
    free(w);
    return r;
}

static void
roundtrip(void **state)
{
    (void)state;
    lr_router *a = busy_router();
    uint64_t now = T0 + 30 * SEC;
    lr_blob *sa = snap(a, now);
    lr_router *b = mk(LR_POLICY_GORGO, 0x53, NULL);
    assert_st(lr_router_restore(b, lr_blob_data(sa), lr_blob_size(sa), now),
              LR_OK);
    assert_router_ok(b);
    lr_blob *sb = snap(b, now);
    /* only the writer's replica id differs: compare past the header */
    assert_int_equal(lr_blob_size(sa), lr_blob_size(sb));
    assert_memory_equal(lr_blob_data(sa) + 32, lr_blob_data(sb) + 32,
                        lr_blob_size(sa) - 40);
    /* the instances and what they hold */
    assert_int_equal(lr_router_instance_count(b), 5);
    uint32_t id;
    assert_st(lr_router_find_instance(b, "10.1.0.2:8000", &id), LR_OK);
    assert_int_equal(id, 2);
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(b, &s), LR_OK);
    assert_int_equal(s.routable, 4); /* the draining one stays draining */
    uint32_t t[6 * BT];
    for (uint64_t k = 0; k < 12; k++) {
        toks(t, 6 * BT, k);
        lr_candidate ra[8], rb[8];
        size_t na, nb;
        lr_request q;
        lr_request_init(&q);
        q.tokens = t;
        q.n_tokens = 6 * BT;
        q.now_ns = now;
        assert_st(lr_router_candidates(a, &q, ra, 8, sizeof ra[0], &na), LR_OK);
        assert_st(lr_router_candidates(b, &q, rb, 8, sizeof rb[0], &nb), LR_OK);
        assert_int_equal(na, nb);
        for (size_t i = 0; i < na; i++) {
            assert_int_equal(ra[i].instance, rb[i].instance);
            assert_int_equal(ra[i].cached_tokens, rb[i].cached_tokens);
        }
    }
    /* the sources resume where they were */
    lr_kv_source src;
    lr_kv_source_init(&src);
    assert_st(lr_router_kv_source(b, 3, &src), LR_OK);
    assert_int_equal(src.has_seq, 1);
    assert_int_equal(src.next_seq, 103);
    /* GORGO's weight, adaptive's fits and Lodestar's network came along */
    double w;
    assert_st(lr_router_get_param(b, LR_PARAM_GORGO_W_RTT, &w), LR_OK);
    assert_true(w == 0.3);
    lr_blob *ma = NULL, *mb = NULL;
    assert_st(lr_router_learner_save(a, &ma), LR_OK);
    assert_st(lr_router_learner_save(b, &mb), LR_OK);
    assert_same_blob(ma, mb, "the network");
    const struct lr__adaptive *aa = lr__router_pstate(a, LR_POLICY_ADAPTIVE);
    const struct lr__adaptive *ab = lr__router_pstate(b, LR_POLICY_ADAPTIVE);
    assert_non_null(aa);
    assert_non_null(ab);
    assert_memory_equal(aa->cls, ab->cls, sizeof aa->cls);
    /* a router with instances refuses; so does one of another block */
    uint64_t d0 = lr__router_digest(b);
    assert_st(lr_router_restore(b, lr_blob_data(sa), lr_blob_size(sa), now),
              LR_ESTATE);
    assert_true(lr__router_digest(b) == d0);
    lr_router_options o;
    lr_router_options_init(&o);
    o.block_tokens = 32;
    lr_router *c = NULL;
    assert_st(lr_router_create(&o, &c), LR_OK);
    assert_st(lr_router_restore(c, lr_blob_data(sa), lr_blob_size(sa), now),
              LR_ENOTSUP);
    assert_int_equal(lr_router_instance_count(c), 0);
    /* too few instance slots */
    lr_router_options_init(&o);
    o.max_instances = 3;
    lr_router *e = NULL;
    assert_st(lr_router_create(&o, &e), LR_OK);
    assert_st(lr_router_restore(e, lr_blob_data(sa), lr_blob_size(sa), now),
              LR_ELIMIT);
    assert_st(lr_router_restore(NULL, lr_blob_data(sa), 9, now), LR_EINVAL);
    assert_st(lr_router_restore(e, NULL, 9, now), LR_EINVAL);
    assert_st(lr_router_snapshot(NULL, now, &mb), LR_EINVAL);
    lr_router_destroy(e);
    lr_router_destroy(c);
    lr_blob_destroy(ma);
    lr_blob_destroy(mb);
    lr_blob_destroy(sb);
    lr_blob_destroy(sa);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

/* ---- restarted from a snapshot == never stopped ----------------------------------- */

struct stream {
    struct mpw w[64];
    uint32_t inst[64];
    uint64_t seq[64];
    uint32_t n;
};

/* Two engines' event streams: stores extending chains, removals. */
static void
make_stream(struct stream *s, uint64_t seed)
{
    uint32_t depth[2][3] = { { 0 } };
    uint64_t next[2] = { 5, 0 };
    for (s->n = 0; s->n < 64; s->n++) {
        uint32_t e = (uint32_t)tu_below(&seed, 2);
        uint32_t c = (uint32_t)tu_below(&seed, 3);
        double ts = 100.0 + s->n;
        if (depth[e][c] > 0 && tu_below(&seed, 4) == 0) {
            removal(&s->w[s->n], e * 3 + c, depth[e][c], ts);
            depth[e][c]--;
        } else {
            uint32_t nb = 1 + (uint32_t)tu_below(&seed, 3);
            store(&s->w[s->n], e * 3 + c, depth[e][c], nb, ts);
            depth[e][c] += nb;
        }
        s->inst[s->n] = 1 + e;
        s->seq[s->n] = next[e]++;
    }
}

static void
feed(lr_router *r, const struct stream *s, uint32_t from, uint32_t to,
     uint64_t t0)
{
    for (uint32_t i = from; i < to; i++)
        assert_st(lr_router_vllm_batch_seq(r, s->inst[i], s->seq[i],
                                           s->w[i].buf, s->w[i].n, t0 + i * SEC,
                                           NULL),
                  LR_OK);
}

static void
restart_equals_never_stopped(void **state)
{
    (void)state;
    struct stream *s = calloc(1, sizeof *s);
    assert_non_null(s);
    uint64_t seed = tu_seed("snapshot replay", 0x736e6170ull);
    for (int round = 0; round < 6; round++) {
        make_stream(s, seed + (uint64_t)round);
        uint32_t cut = 10 + (uint32_t)round * 8;
        lr_router *a = mk(LR_POLICY_PREFIX_CACHE, 0x61, NULL);
        add_fleet(a, 3);
        feed(a, s, 0, cut, T0);
        lr_blob *sn = snap(a, T0 + cut * SEC);
        feed(a, s, cut, s->n, T0);
        /* B restarts from the snapshot a few seconds later (same clock)
         * and gets each engine's stream from its start (a replay of
         * everything still buffered): what it had is ignored */
        lr_router *b = mk(LR_POLICY_PREFIX_CACHE, 0x62, NULL);
        assert_st(lr_router_restore(b, lr_blob_data(sn), lr_blob_size(sn),
                                    T0 + (cut + 3) * SEC),
                  LR_OK);
        feed(b, s, 0, s->n, T0);
        lr_blob *x = snap(a, T0 + 90 * SEC), *y = snap(b, T0 + 90 * SEC);
        assert_memory_equal(lr_blob_data(x) + 32, lr_blob_data(y) + 32,
                            lr_blob_size(x) - 40);
        assert_int_equal(lr_blob_size(x), lr_blob_size(y));
        lr_router_stats st;
        lr_router_stats_init(&st);
        assert_st(lr_router_get_stats(b, &st), LR_OK);
        assert_int_equal(st.kv_duplicates, cut);
        lr_blob_destroy(x);
        lr_blob_destroy(y);
        lr_blob_destroy(sn);
        lr_router_destroy(b);
        lr_router_destroy(a);
    }
    free(s);
}

/* Ages run on the host clock: a route learned at T0 with a TTL of 100 s
 * expires at T0 + 100 s on the restored router too, downtime included;
 * restored on a clock that is behind, it keeps the age it had. */
static void
ages_across_downtime(void **state)
{
    (void)state;
    lr_router *a = mk(LR_POLICY_PREFIX_CACHE, 1, NULL);
    add_fleet(a, 2);
    uint32_t t[4 * BT];
    toks(t, 4 * BT, 3);
    assert_st(route_one(a, 1, t, 4 * BT, 0, T0, NULL), LR_OK);
    lr_blob *sn = snap(a, T0 + 10 * SEC);
    lr_decision d;
    lr_decision_init(&d);
    for (int later = 0; later < 2; later++) {
        lr_router *b = mk(LR_POLICY_PREFIX_CACHE, 2, NULL);
        /* the route is 10 s old at the snapshot */
        uint64_t at = later ? T0 + 50 * SEC : 20 * SEC; /* behind: 20 s */
        assert_st(lr_router_restore(b, lr_blob_data(sn), lr_blob_size(sn), at),
                  LR_OK);
        uint64_t alive = later ? T0 + 95 * SEC : at + 85 * SEC;
        uint64_t gone = later ? T0 + 105 * SEC : at + 95 * SEC;
        /* an idle jump past the clock's skew: taken on the second call */
        (void)lr_router_expire(b, alive);
        assert_st(lr_router_expire(b, alive), LR_OK);
        assert_st(route_one(b, 9, t, 4 * BT, LR_ROUTE_DRY_RUN, alive, &d),
                  LR_OK);
        assert_int_equal(d.cached_tokens, 4 * BT);
        assert_st(lr_router_expire(b, gone), LR_OK);
        assert_st(route_one(b, 9, t, 4 * BT, LR_ROUTE_DRY_RUN, gone, &d),
                  LR_OK);
        assert_int_equal(d.cached_tokens, 0);
        lr_router_destroy(b);
    }
    lr_blob_destroy(sn);
    lr_router_destroy(a);
}

/* ---- bad blobs ---------------------------------------------------------------------- */

static void
reseal(uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t h = XXH3_64bits_withSeed(b, n - 8, seed);
    for (int i = 0; i < 8; i++)
        b[n - 8 + i] = (uint8_t)(h >> (8 * i));
}

#define SNAP_SEED 0x4c52534e41505331ull /* "LRSNAPS1" */

static void
corrupt_blobs(void **state)
{
    (void)state;
    lr_router *a = busy_router();
    lr_blob *sa = snap(a, T0 + 30 * SEC);
    size_t n = lr_blob_size(sa);
    uint8_t *buf = malloc(n + 16);
    assert_non_null(buf);
    lr_router *b = mk(LR_POLICY_GORGO, 2, NULL);
    uint64_t d0 = lr__router_digest(b);
    /* truncated anywhere */
    for (size_t l = 0; l < n; l += (l < 64 ? 1 : 37)) {
        memcpy(buf, lr_blob_data(sa), l);
        lr_status st = lr_router_restore(b, buf, l, T0);
        if (st != LR_ECORRUPT)
            fail_msg("truncated to %zu: %s", l, lr_status_name(st));
    }
    /* a bit flipped anywhere */
    for (size_t i = 0; i < n; i += (i < 64 ? 1 : 13)) {
        memcpy(buf, lr_blob_data(sa), n);
        buf[i] ^= (uint8_t)(1u << (i % 8));
        lr_status st = lr_router_restore(b, buf, n, T0);
        assert_true(st == LR_ECORRUPT ||
                    (st == LR_EVERSION && i >= 4 && i < 6));
    }
    /* another version, resealed */
    memcpy(buf, lr_blob_data(sa), n);
    buf[4] = 2;
    reseal(buf, n, SNAP_SEED);
    assert_st(lr_router_restore(b, buf, n, T0), LR_EVERSION);
    /* not a snapshot: a delta */
    assert_st(lr_router_restore(b, (const uint8_t *)"LRDX\2\0", 6, T0),
              LR_ECORRUPT);
    assert_true(d0 == lr__router_digest(b));
    assert_int_equal(lr_router_instance_count(b), 0);
    /* an unknown section is skipped: append one (count + 1), resealed */
    {
        size_t m = n + 16;
        uint8_t *u = malloc(m);
        assert_non_null(u);
        memcpy(u, lr_blob_data(sa), n - 8);
        memcpy(u + n - 8, "ZZZZ\0\0\0\0\0\0\0\0\0\0\0\0", 16);
        u[12]++;
        reseal(u, m, SNAP_SEED);
        assert_st(lr_router_restore(b, u, m, T0 + 30 * SEC), LR_OK);
        assert_int_equal(lr_router_instance_count(b), 5);
        free(u);
    }
    free(buf);
    lr_blob_destroy(sa);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

/* ---- random index states ------------------------------------------------- */

#define RT_BLOCKS 16u

/* Block k of conversation c of family f: the first two blocks are the
 * family's (a shared system prompt). */
static uint64_t
rt_ehash(uint32_t f, uint32_t c, uint32_t k)
{
    return k < 2 ? (uint64_t)f * 1000 + k + 1
                 : ((uint64_t)f * 100 + c + 1) * 1000 + k + 1;
}

static void
rt_tokens(uint32_t *t, uint32_t f, uint32_t c)
{
    toks(t, 2 * BT, 50 + f);
    toks(t + 2 * BT, (RT_BLOCKS - 2) * BT, 1000 + f * 100 + c);
}

/* A random sequence of learns (LOCAL and REMOTE, with message ends),
 * refreshing matches, KV events, time and expiry, on a small index that
 * evicts. */
static void
rt_churn(lr_index *a, uint64_t seed, uint64_t *now)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    uint32_t t[RT_BLOCKS * BT];
    for (int step = 0; step < 400; step++) {
        x = lr__mix64(x, 7);
        uint32_t f = (uint32_t)(x >> 8) % 3, c = (uint32_t)(x >> 16) % 5;
        uint32_t len = 1 + (uint32_t)(x >> 24) % RT_BLOCKS;
        uint32_t inst = 1 + (uint32_t)(x >> 32) % 5;
        rt_tokens(t, f, c);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = t;
        p.n_tokens = (size_t)len * BT;
        uint32_t bnd[2] = { 2 * BT, len * BT };
        switch ((x >> 40) % 6) {
        case 0:
        case 1:
            p.boundaries = bnd;
            p.n_boundaries = len > 2 ? 2 : 1;
            if (len <= 2)
                bnd[0] = len * BT;
            (void)lr_index_learn(
                a, &p, inst, (x >> 48) & 1 ? LR_TRUST_REMOTE : LR_TRUST_LOCAL,
                *now);
            break;
        case 2: {
            lr_index_hit hits[8];
            lr_index_match_result m;
            lr_index_match_result_init(&m);
            m.hits = hits;
            m.hits_capacity = 8;
            assert_st(lr_index_match(a, &p, *now, 0, &m), LR_OK);
            break;
        }
        case 3: {
            /* blocks [from, len) of the conversation, one engine event */
            uint32_t from = (uint32_t)(x >> 48) % len;
            uint64_t eh[RT_BLOCKS];
            for (uint32_t k = from; k < len; k++)
                eh[k - from] = rt_ehash(f, c, k);
            lr_kv_stored ev;
            lr_kv_stored_init(&ev);
            ev.block_hashes = eh;
            ev.n_blocks = len - from;
            ev.has_parent = from > 0;
            ev.parent_hash = from > 0 ? rt_ehash(f, c, from - 1) : 0;
            ev.block_size = BT;
            ev.token_ids = t + (size_t)from * BT;
            ev.n_tokens = (size_t)(len - from) * BT;
            lr_status st = lr_index_kv_stored(a, inst, &ev, *now);
            assert_true(st == LR_OK || st == LR_ENOENT);
            break;
        }
        case 4:
            *now += ((x >> 48) % 2000) * MS;
            break;
        default:
            *now += 30 * SEC;
            assert_st(lr_index_expire(a, *now), LR_OK);
            break;
        }
    }
}

/* Random states save, load into a fresh index, and save again to the
 * same bytes; the loaded index keeps every invariant and answers every
 * prompt as the saved one. */
static void
random_index_roundtrip(void **state)
{
    (void)state;
    lr_index_options o;
    lr_index_options_init(&o);
    o.capacity_blocks = 96;
    o.ttl_ns = 120 * SEC;
    o.seed = 3;
    uint32_t t[RT_BLOCKS * BT];
    for (uint64_t seed = 1; seed <= 60; seed++) {
        lr_index *a = NULL, *c = NULL;
        assert_st(lr_index_create(&o, &a), LR_OK);
        assert_st(lr_index_create(&o, &c), LR_OK);
        uint64_t now = T0;
        rt_churn(a, seed, &now);
        lr_blob *sa = NULL, *sc = NULL;
        assert_st(lr__index_save(a, now, &sa), LR_OK);
        assert_st(lr__index_load(c, lr_blob_data(sa), lr_blob_size(sa), now),
                  LR_OK);
        assert_st(lr__index_verify(c), LR_OK);
        assert_st(lr__index_save(c, now, &sc), LR_OK);
        assert_same_blob(sa, sc, "a loaded index's state");
        for (uint32_t f = 0; f < 3; f++)
            for (uint32_t k = 0; k < 5; k++) {
                rt_tokens(t, f, k);
                lr_prompt p;
                lr_prompt_init(&p);
                p.tokens = t;
                p.n_tokens = RT_BLOCKS * BT;
                lr_index_hit ha[8], hc[8];
                lr_index_match_result ma, mc;
                lr_index_match_result_init(&ma);
                lr_index_match_result_init(&mc);
                ma.hits = ha;
                mc.hits = hc;
                ma.hits_capacity = mc.hits_capacity = 8;
                assert_st(lr_index_match(a, &p, now, LR_MATCH_NO_TOUCH, &ma),
                          LR_OK);
                assert_st(lr_index_match(c, &p, now, LR_MATCH_NO_TOUCH, &mc),
                          LR_OK);
                assert_int_equal(ma.n_hits, mc.n_hits);
                assert_memory_equal(ha, hc, ma.n_hits * sizeof ha[0]);
            }
        lr_blob_destroy(sa);
        lr_blob_destroy(sc);
        lr_index_destroy(c);
        lr_index_destroy(a);
    }
}

/* States an index can never be in, each in an otherwise valid blob. */
static void
impossible_index_states(void **state)
{
    (void)state;
    lr_index_options o;
    lr_index_options_init(&o);
    lr_index *a = NULL;
    assert_st(lr_index_create(&o, &a), LR_OK);
    uint32_t t[3 * BT];
    toks(t, 3 * BT, 1);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = 3 * BT;
    assert_st(lr_index_learn(a, &p, 5, LR_TRUST_REMOTE, T0), LR_OK);
    p.n_tokens = 2 * BT;
    lr_blob *b = NULL;
    assert_st(lr__index_save(a, T0, &b), LR_OK);
    size_t n = lr_blob_size(b);
    const uint8_t *g = lr_blob_data(b);
    /* layout: 40-byte header, 3 nodes x {u64 key, 1-byte parent}, then 3
     * holds x {node, id, flags, stamp} of one byte each */
    assert_int_equal(n, 40 + 3 * 9 + 3 * 4 + 8);
    uint8_t *x = malloc(n);
    assert_non_null(x);
    const size_t holds = 40 + 3 * 9;
    lr_index *c = NULL;
    assert_st(lr_index_create(&o, &c), LR_OK);
    memcpy(x, g, n);
    reseal(x, n, 0x4c52495354415431ull);
    assert_st(lr__index_load(c, x, n, T0), LR_OK); /* the checksum is right */
    lr_index_destroy(c);
    assert_st(lr_index_create(&o, &c), LR_OK);
    uint64_t d0 = lr__index_digest(c);
    struct {
        size_t off;
        uint8_t val;
        const char *what;
    } bad[] = {
        { 0, 0, "a LOCAL hold under a REMOTE one" }, /* set below */
        { 40 + 8, 3, "a node its own ancestor (a cycle)" },
        { holds + 1, 7, "an instance missing from the middle of a chain" },
        { holds + 2, 4, "an unknown flag" },
    };
    /* which node is the root: its parent byte is 0 */
    uint32_t root = 0, leaf = 0;
    for (uint32_t i = 0; i < 3; i++) {
        if (g[40 + i * 9 + 8] == 0)
            root = i;
    }
    for (uint32_t i = 0; i < 3; i++) {
        bool is_parent = false;
        for (uint32_t j = 0; j < 3; j++)
            if (g[40 + j * 9 + 8] == i + 1)
                is_parent = true;
        if (!is_parent)
            leaf = i;
    }
    /* holds are in node order: make the leaf's LOCAL, its parent REMOTE */
    bad[0].off = holds + leaf * 4 + 2;
    bad[0].val = (uint8_t)(g[holds + leaf * 4 + 2] & ~1u);
    bad[1].off = 40 + root * 9 + 8;
    bad[1].val = (uint8_t)(leaf + 1);
    bad[2].off = holds + (3 - root - leaf) * 4 + 1; /* the middle node */
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(x, g, n);
        x[bad[k].off] = bad[k].val;
        reseal(x, n, 0x4c52495354415431ull);
        lr_status st = lr__index_load(c, x, n, T0);
        if (st != LR_ECORRUPT)
            fail_msg("%s: %s", bad[k].what, lr_status_name(st));
        assert_true(lr__index_digest(c) == d0);
    }
    /* a full index refuses a load; a small one cannot take it */
    assert_st(lr__index_load(a, g, n, T0), LR_ESTATE);
    lr_index_options_init(&o);
    o.capacity_blocks = 2;
    lr_index *small = NULL;
    assert_st(lr_index_create(&o, &small), LR_OK);
    assert_st(lr__index_load(small, g, n, T0), LR_ELIMIT);
    lr_index_destroy(small);
    free(x);
    lr_blob_destroy(b);
    lr_index_destroy(c);
    lr_index_destroy(a);
}

/* ---- forged times ----------------------------------------------------------------- */

#define ISTATE_SEED 0x4c52495354415431ull /* "LRISTAT1" */

static void
put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* An index state's time base, forged with its checksum recomputed: in 0.2
 * an epoch of 2^62 (every later time before it: tick 0) or a hold stamped
 * 2^32 - 2 made the restored routes, and every route learned after them,
 * never expire. The time base is judged now: an epoch after the save, a
 * save past LR_MAX_TIME_NS, a stamp after the save are LR_ECORRUPT. */
static void
regress_forged_index_times_refused(void **state)
{
    (void)state;
    lr_index_options o;
    lr_index_options_init(&o);
    lr_index *a = NULL;
    assert_st(lr_index_create(&o, &a), LR_OK);
    uint32_t t[3 * BT];
    toks(t, 3 * BT, 1);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = 3 * BT;
    assert_st(lr_index_learn(a, &p, 5, LR_TRUST_LOCAL, T0), LR_OK);
    lr_blob *b = NULL;
    assert_st(lr__index_save(a, T0, &b), LR_OK);
    size_t n = lr_blob_size(b);
    const uint8_t *g = lr_blob_data(b);
    /* 40-byte header, 3 nodes of 9 bytes, 3 holds of 4 one-byte fields */
    assert_int_equal(n, 40 + 3 * 9 + 3 * 4 + 8);
    const size_t holds = 40 + 3 * 9;
    uint8_t *x = malloc(n);
    assert_non_null(x);
    lr_index *c = NULL;
    assert_st(lr_index_create(&o, &c), LR_OK);
    uint64_t d0 = lr__index_digest(c);
    for (int k = 0; k < 4; k++) {
        memcpy(x, g, n);
        if (k == 0)
            put64(x + 24, 1ull << 62); /* epoch */
        else if (k == 1)
            put64(x + 24, T0 + SEC); /* epoch after the save */
        else if (k == 2)
            put64(x + 32, LR_MAX_TIME_NS + 1); /* saved */
        else
            x[holds + 2 * 4 + 3] = 0x7f; /* a stamp 2 s after the save */
        reseal(x, n, ISTATE_SEED);
        lr_status st = lr__index_load(c, x, n, T0);
        if (st != LR_ECORRUPT)
            fail_msg("forged time %d: %s", k, lr_status_name(st));
        assert_true(lr__index_digest(c) == d0);
    }
    /* the honest state loads, and its routes expire */
    memcpy(x, g, n);
    assert_st(lr__index_load(c, x, n, T0), LR_OK);
    assert_st(lr_index_expire(c, T0 + 60 * SEC), LR_OK);
    assert_st(lr_index_expire(c, T0 + 120 * SEC), LR_OK);
    for (uint64_t h = 1; h <= 70; h++) /* an hour on, a minute at a time */
        assert_st(lr_index_expire(c, T0 + 120 * SEC + h * 60 * SEC), LR_OK);
    lr_index_stats is = { .struct_size = sizeof is };
    assert_st(lr_index_get_stats(c, &is), LR_OK);
    assert_int_equal(is.blocks, 0);
    free(x);
    lr_blob_destroy(b);
    lr_index_destroy(c);
    lr_index_destroy(a);
}

/* Offset of the first byte of section `tag` in snapshot x (n bytes), or
 * 0. */
static size_t
section_at(const uint8_t *x, size_t n, const char tag[4])
{
    size_t off = 32;
    while (off + 16 <= n - 8) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)x[off + 8 + i] << (8 * i);
        if (memcmp(x + off, tag, 4) == 0)
            return off + 16;
        off += 16 + (size_t)len;
    }
    return 0;
}

/* A KV source's last engine timestamp of +inf in a snapshot (NaN was
 * refused in 0.2, +inf taken): restart detection was off for that engine
 * after the restore. Refused now, as a batch so stamped is. */
static void
regress_forged_kv_time_refused(void **state)
{
    (void)state;
    lr_router *a = busy_router();
    lr_blob *sa = snap(a, T0 + 30 * SEC);
    size_t n = lr_blob_size(sa);
    uint8_t *x = malloc(n);
    assert_non_null(x);
    memcpy(x, lr_blob_data(sa), n);
    size_t k = section_at(x, n, "KSEQ");
    assert_true(k != 0);
    /* u32 n; then { u32 id; u8 flags; u64 next; f64 ts } */
    double inf = INFINITY;
    uint64_t bits;
    memcpy(&bits, &inf, 8);
    put64(x + k + 4 + 4 + 1 + 8, bits);
    reseal(x, n, SNAP_SEED);
    lr_router *b = mk(LR_POLICY_GORGO, 2, NULL);
    uint64_t d0 = lr__router_digest(b);
    assert_st(lr_router_restore(b, x, n, T0 + 30 * SEC), LR_ECORRUPT);
    assert_true(lr__router_digest(b) == d0);
    free(x);
    lr_blob_destroy(sa);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

/* A peer's delta mark of 2^64 - 1 in a snapshot: after the restore, 0.2
 * skipped that peer's incremental deltas until its next full export. A
 * restored mark now only finds losses: the peer's next delta applies. */
static void
regress_forged_peer_mark_skips_nothing(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_PREFIX_CACHE, 0x61, NULL);
    lr_router *peer = mk(LR_POLICY_PREFIX_CACHE, 0x62, NULL);
    add_fleet(r, 3);
    add_fleet(peer, 3);
    uint32_t t[6 * BT];
    toks(t, 6 * BT, 91);
    assert_st(route_one(peer, 1, t, 6 * BT, 0, T0, NULL), LR_OK);
    uint64_t m1, m2;
    lr_blob *d1 = NULL, *d2 = NULL;
    assert_st(lr_router_export_delta(peer, 0, &d1, &m1), LR_OK);
    assert_st(lr_router_import_delta(r, lr_blob_data(d1), lr_blob_size(d1), T0),
              LR_OK);
    lr_blob *sr = snap(r, T0);
    size_t n = lr_blob_size(sr);
    uint8_t *x = malloc(n);
    assert_non_null(x);
    memcpy(x, lr_blob_data(sr), n);
    size_t k = section_at(x, n, "PEER");
    assert_true(k != 0);
    put64(x + k + 4 + 8, UINT64_MAX); /* u32 n; { u64 id; u64 mark } */
    reseal(x, n, SNAP_SEED);
    lr_router *b = mk(LR_POLICY_PREFIX_CACHE, 0x63, NULL);
    assert_st(lr_router_restore(b, x, n, T0), LR_OK);
    toks(t, 6 * BT, 92);
    assert_st(route_one(peer, 2, t, 6 * BT, 0, T0, NULL), LR_OK);
    assert_st(lr_router_export_delta(peer, m1, &d2, &m2), LR_OK);
    assert_st(lr_router_import_delta(b, lr_blob_data(d2), lr_blob_size(d2), T0),
              LR_OK);
    lr_router_stats st;
    lr_router_stats_init(&st);
    assert_st(lr_router_get_stats(b, &st), LR_OK);
    assert_int_equal(st.deltas_imported, 1);
    assert_int_equal(st.deltas_skipped, 0);
    free(x);
    lr_blob_destroy(d1);
    lr_blob_destroy(d2);
    lr_blob_destroy(sr);
    lr_router_destroy(b);
    lr_router_destroy(peer);
    lr_router_destroy(r);
}

/* ---- allocation failures ------------------------------------------------------------ */

struct oom_ctx {
    lr_blob *snap;
};

static bool
sc_restore(struct tu_alloc *t, void *ctx)
{
    struct oom_ctx *c = ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *b = mk(LR_POLICY_PREFIX_CACHE, 7, &t->a);
    uint64_t d0 = lr__router_digest(b);
    size_t live0 = lr__router_mem_live(b);
    tu_alloc_resume(t, arm);
    lr_status st = lr_router_restore(b, lr_blob_data(c->snap),
                                     lr_blob_size(c->snap), T0 + 30 * SEC);
    bool failed = t->failed;
    (void)tu_alloc_pause(t);
    assert_true(st == LR_OK || st == LR_ENOMEM);
    if (st == LR_ENOMEM) {
        assert_true(lr__router_digest(b) == d0);
        assert_int_equal(lr__router_mem_live(b), live0);
        assert_int_equal(lr_router_instance_count(b), 0);
    } else {
        assert_int_equal(lr_router_instance_count(b), 5);
        assert_router_ok(b);
    }
    lr_router_destroy(b);
    t->failed = failed;
    return st == LR_OK && !failed;
}

static bool
sc_snapshot(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *a = mk(LR_POLICY_PREFIX_CACHE, 7, &t->a);
    add_fleet(a, 3);
    uint32_t tk[4 * BT];
    toks(tk, 4 * BT, 2);
    assert_st(route_one(a, 1, tk, 4 * BT, 0, T0, NULL), LR_OK);
    uint64_t d0 = lr__router_digest(a);
    tu_alloc_resume(t, arm);
    lr_blob *b = NULL;
    lr_status st = lr_router_snapshot(a, T0, &b);
    bool failed = t->failed;
    (void)tu_alloc_pause(t);
    assert_true(st == LR_OK || st == LR_ENOMEM);
    assert_true((st == LR_OK) == (b != NULL));
    assert_true(lr__router_digest(a) == d0);
    lr_blob_destroy(b);
    lr_router_destroy(a);
    t->failed = failed;
    return st == LR_OK && !failed;
}

static void
oom(void **state)
{
    (void)state;
    lr_router *a = busy_router();
    struct oom_ctx c = { snap(a, T0 + 30 * SEC) };
    lr_router_destroy(a);
    tu_oom_loop(sc_restore, &c, 2000);
    tu_oom_loop(sc_snapshot, &c, 200);
    lr_blob_destroy(c.snap);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip),
        cmocka_unit_test(restart_equals_never_stopped),
        cmocka_unit_test(ages_across_downtime),
        cmocka_unit_test(corrupt_blobs),
        cmocka_unit_test(impossible_index_states),
        cmocka_unit_test(regress_forged_index_times_refused),
        cmocka_unit_test(regress_forged_kv_time_refused),
        cmocka_unit_test(regress_forged_peer_mark_skips_nothing),
        cmocka_unit_test(random_index_roundtrip),
        cmocka_unit_test(oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
