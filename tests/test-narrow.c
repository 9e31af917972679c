/* A large fleet's narrowed routes: the load orders against a naive model,
 * their allocation failures, and routes that weigh a few candidates
 * deciding as the whole fleet's table would for the rules whose winner
 * the candidates must hold. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parts/order.h"
#include "router-helpers.h"
#include "router/narrow.h"
#include "router/router_impl.h"

/* ---- the orders ------------------------------------------------------------------- */

#define OIDS 300u
#define ONB 40u

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Random sets and drops against an array of buckets (UINT32_MAX: not a
 * member): the members, their count, the least of them, every rank. */
static void
order_matches_naive(void **state)
{
    (void)state;
    struct lr__mem m;
    assert_st(lr__mem_init(&m, NULL), LR_OK);
    struct lr__order o;
    assert_st(lr__order_init(&o, &m, OIDS, ONB), LR_OK);
    uint32_t naive[OIDS], ids[OIDS], sorted[OIDS];
    for (uint32_t i = 0; i < OIDS; i++)
        naive[i] = UINT32_MAX;
    uint64_t rng = tu_seed("order", 1);
    for (int step = 0; step < 20000; step++) {
        uint32_t id = (uint32_t)(tu_rand(&rng) % OIDS);
        if (tu_rand(&rng) % 3 == 0) {
            lr__order_drop(&o, id);
            naive[id] = UINT32_MAX;
        } else { /* past the last bucket: clamped */
            uint32_t b = (uint32_t)(tu_rand(&rng) % (ONB + 5));
            lr__order_set(&o, id, b);
            naive[id] = b < ONB ? b : ONB - 1;
        }
        if (step % 97 != 0)
            continue;
        assert_st(lr__order_verify(&o), LR_OK);
        uint32_t n = 0;
        for (uint32_t i = 0; i < OIDS; i++) {
            assert_int_equal(lr__order_has(&o, i), naive[i] != UINT32_MAX);
            if (naive[i] != UINT32_MAX)
                sorted[n++] = naive[i];
        }
        assert_int_equal(o.n, n);
        qsort(sorted, n, sizeof *sorted, cmp_u32);
        for (uint32_t k = 0; k < n; k++)
            assert_int_equal(lr__order_rank(&o, k), sorted[k]);
        uint32_t cap = (uint32_t)(tu_rand(&rng) % (OIDS + 1));
        uint32_t got = lr__order_least(&o, ids, cap);
        assert_int_equal(got, cap < n ? cap : n);
        /* the least: the buckets of the ones given are the first `got`
         * of the sorted buckets, each a member once */
        uint32_t given[OIDS];
        for (uint32_t k = 0; k < got; k++) {
            assert_true(naive[ids[k]] != UINT32_MAX);
            given[k] = naive[ids[k]];
        }
        qsort(given, got, sizeof *given, cmp_u32);
        for (uint32_t k = 0; k < got; k++)
            assert_int_equal(given[k], sorted[k]);
        qsort(ids, got, sizeof *ids, cmp_u32);
        for (uint32_t k = 1; k < got; k++)
            assert_true(ids[k - 1] < ids[k]);
    }
    lr__order_free(&o, &m);
    assert_int_equal(m.live, 0);
}

/* Within a bucket the longest there comes first: an instance whose load
 * moved (it finished a request) goes behind the others of its bucket. */
static void
order_longest_there_first(void **state)
{
    (void)state;
    struct lr__mem m;
    assert_st(lr__mem_init(&m, NULL), LR_OK);
    struct lr__order o;
    assert_st(lr__order_init(&o, &m, 16, 4), LR_OK);
    uint32_t ids[4];
    lr__order_set(&o, 5, 0);
    lr__order_set(&o, 3, 0);
    lr__order_set(&o, 9, 0);
    assert_int_equal(lr__order_least(&o, ids, 4), 3);
    assert_int_equal(ids[0], 5);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 9);
    lr__order_set(&o, 5, 1); /* a request, then its end */
    lr__order_set(&o, 5, 0);
    assert_int_equal(lr__order_least(&o, ids, 2), 2);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 9);
    lr__order_drop(&o, 9);
    assert_int_equal(lr__order_least(&o, ids, 4), 2);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 5);
    assert_st(lr__order_verify(&o), LR_OK);
    lr__order_free(&o, &m);
}

/* Token buckets are monotone, exact below 8, within 12.5% above. */
static void
order_token_buckets(void **state)
{
    (void)state;
    uint64_t rng = tu_seed("buckets", 2);
    for (uint64_t v = 0; v < 8; v++)
        assert_int_equal(lr__order_bucket_tokens(v), v);
    assert_true(lr__order_bucket_tokens(UINT64_MAX) < LR__ORDER_TOKEN_BUCKETS);
    for (int i = 0; i < 100000; i++) {
        uint64_t a = tu_rand(&rng) >> (tu_rand(&rng) % 64);
        uint64_t b = a + (tu_rand(&rng) >> (tu_rand(&rng) % 64 + 1));
        if (b < a)
            continue;
        assert_true(lr__order_bucket_tokens(a) <= lr__order_bucket_tokens(b));
        if (lr__order_bucket_tokens(a) == lr__order_bucket_tokens(b) && a >= 8)
            assert_true((double)(b - a) <= (double)a / 8);
    }
}

/* Every allocation of an order and of the fleet's fails in turn:
 * LR_ENOMEM, nothing left behind. */
static void
order_oom(void **state)
{
    (void)state;
    for (uint64_t at = 1;; at++) {
        struct tu_alloc t;
        tu_alloc_init(&t);
        struct lr__mem m;
        assert_st(lr__mem_init(&m, &t.a), LR_OK);
        tu_alloc_arm(&t, at, false);
        struct lr__fleet f;
        lr_status st = lr__fleet_init(&f, &m, 100);
        if (st == LR_OK) {
            assert_false(t.failed);
            lr__fleet_free(&f, &m);
            assert_int_equal(t.live_bytes, 0);
            break;
        }
        assert_st(st, LR_ENOMEM);
        assert_int_equal(t.live_bytes, 0);
        assert_int_equal(f.o[0].head, NULL);
    }
}

/* ---- narrowed routes ------------------------------------------------------------- */

#define FLEET 600u
#define CONVS 64u
#define TURN 256u /* tokens a turn adds */

struct rig {
    lr_router *r;
    uint64_t now, next_id;
    uint32_t turns[CONVS];
    uint64_t live[48]; /* requests in flight, ended in turn */
    uint32_t n_live;
};

static void
rig_open(struct rig *g, lr_policy policy)
{
    memset(g, 0, sizeof *g);
    lr_router_options o;
    lr_router_options_init(&o);
    o.max_instances = 1024;
    o.policy = policy;
    o.seed = 7;
    assert_st(lr_router_create(&o, &g->r), LR_OK);
    for (uint32_t i = 0; i < FLEET; i++)
        add_instance(g->r, "10.9", i, 0, 0);
    g->now = 1000000000ull;
    g->next_id = 1;
    /* a loaded fleet, about 2.5 requests in flight each, unevenly: short
     * prompts of their own, sent to random instances, never ended */
    uint64_t rng = 99;
    uint32_t t[32];
    for (uint32_t i = 0; i < 1500; i++) {
        for (uint32_t k = 0; k < 32; k++)
            t[k] = (uint32_t)tu_rand(&rng);
        lr_router_set_policy(g->r, LR_POLICY_RANDOM);
        assert_st(route_one(g->r, g->next_id++, t, 32, 0, g->now, NULL), LR_OK);
    }
    assert_st(lr_router_set_policy(g->r, policy), LR_OK);
}

#define SYSTEM 512u /* tokens every prompt opens with */

/* Conversation c's prompt at its turn into t (c >= CONVS: a new one at
 * its first turn); its length. Every prompt opens with the same SYSTEM
 * tokens, so that many instances hold that much of a new one. */
static size_t
prompt_of_conv(const struct rig *g, uint32_t c, uint32_t *t)
{
    size_t n = SYSTEM + (size_t)((c < CONVS ? g->turns[c] : 0) + 1) * TURN;
    for (size_t i = 0; i < n; i++)
        t[i] = i < SYSTEM ? (uint32_t)(i * 31u) & 0xffffu
                          : (uint32_t)(c * 1000003u + i * 7919u) & 0xffffu;
    return n;
}

static lr_status
dry(struct rig *g, const uint32_t *t, size_t n, bool whole, lr_decision *d)
{
    assert_st(
        lr_router_set_param(g->r, LR_PARAM_NARROW_ABOVE, whole ? 65534 : 256),
        LR_OK);
    return route_one(g->r, 1ull << 50, t, n, LR_ROUTE_DRY_RUN, g->now, d);
}

static uint32_t
inflight_of(const struct rig *g, uint32_t id)
{
    lr_load_snapshot s;
    lr_load_snapshot_init(&s);
    assert_st(lr_router_instance_load(g->r, id, &s), LR_OK);
    return s.inflight;
}

/* The fleet's in-flight figures against a walk over every instance. */
static void
check_stats(const struct rig *g)
{
    struct lr__fleet_stats fs;
    lr__fleet_stats(&g->r->fleet, &fs);
    uint32_t v[FLEET], mn = UINT32_MAX, mx = 0;
    double sum = 0, sq = 0;
    for (uint32_t id = 0; id < FLEET; id++) {
        v[id] = inflight_of(g, id);
        mn = v[id] < mn ? v[id] : mn;
        mx = v[id] > mx ? v[id] : mx;
        sum += v[id];
        sq += (double)v[id] * v[id];
    }
    qsort(v, FLEET, sizeof *v, cmp_u32);
    assert_int_equal(fs.n, FLEET);
    assert_int_equal(fs.min, mn);
    assert_int_equal(fs.max, mx);
    assert_true(fabs(fs.sum - sum) < 1e-9);
    assert_true(fabs(fs.sq - sq) < 1e-9);
    assert_true(fabs(fs.median - (v[FLEET / 2 - 1] + v[FLEET / 2]) / 2.0) <
                1e-9);
}

/* One turn of conversation c routed (narrowed) and kept in flight; the
 * oldest in flight ends. */
static void
rig_step(struct rig *g, uint32_t c, const uint32_t *t, size_t n)
{
    lr_decision d;
    assert_st(route_one(g->r, g->next_id, t, n, 0, g->now, &d), LR_OK);
    uint32_t k = g->n_live < 48 ? g->n_live++ : (uint32_t)(g->next_id % 48);
    if (g->live[k] != 0)
        assert_st(lr_router_complete(g->r, g->live[k], 10, g->now), LR_OK);
    g->live[k] = g->next_id++;
    if (c < CONVS)
        g->turns[c] = (g->turns[c] + 1) % 12;
    g->now += 20000000ull;
}

/* For the rules whose winner the candidates hold (the least in flight,
 * the longest prefix and the least in flight among its holders, the
 * ring's, the turn after the last), a narrowed route picks what the whole
 * table would: the same instance where the rule draws nothing, else one
 * with the same figures (the draws among ties differ). */
static void
narrowed_matches_whole(void **state)
{
    (void)state;
    static const lr_policy policies[] = {
        LR_POLICY_ROUND_ROBIN,
        LR_POLICY_LEAST_REQUEST,
        LR_POLICY_LEAST_LOAD,
        LR_POLICY_SESSION_AFFINITY,
        LR_POLICY_CONSISTENT_HASH,
        LR_POLICY_PREFIX_CACHE,
        LR_POLICY_PREFIX_CACHE_AND_LOAD,
        LR_POLICY_RANVIER,
        LR_POLICY_DUALMAP,
        LR_POLICY_RANDOM,
        LR_POLICY_AIBRIX_LORA,
    };
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    uint64_t rng = tu_seed("narrowed", 3);
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        struct rig g;
        rig_open(&g, policies[p]);
        for (int step = 0; step < 300; step++) {
            /* a quarter are new conversations: their longest hit is the
             * opening every instance they went to holds */
            uint32_t c = tu_rand(&rng) % 4 == 0
                             ? CONVS + (uint32_t)step
                             : (uint32_t)(tu_rand(&rng) % CONVS);
            size_t n = prompt_of_conv(&g, c, t);
            lr_decision a, b;
            assert_st(dry(&g, t, n, false, &a), LR_OK);
            assert_st(dry(&g, t, n, true, &b), LR_OK);
            /* a hit's depth is the rule's; elsewhere the tie drawn among
             * the least loaded may hold some of the prompt or not */
            /* DualMap draws between its two when their queues tie */
            if (policies[p] == LR_POLICY_DUALMAP) {
                assert_int_equal(a.alt_instance == a.instance, false);
                assert_true(a.instance == b.instance ||
                            a.instance == b.alt_instance);
            } else if (a.reason != b.reason ||
                       (a.reason == LR_REASON_PREFIX_HIT &&
                        a.cached_tokens != b.cached_tokens))
                fail_msg("%s, step %d: cached %u (%s) narrowed, %u (%s) whole",
                         lr_policy_name(policies[p]), step, a.cached_tokens,
                         lr_reason_name(a.reason), b.cached_tokens,
                         lr_reason_name(b.reason));
            switch (policies[p]) {
            case LR_POLICY_ROUND_ROBIN:
            case LR_POLICY_SESSION_AFFINITY:
                if (a.instance != b.instance)
                    fail_msg("%s, step %d: %u narrowed, %u whole",
                             lr_policy_name(policies[p]), step, a.instance,
                             b.instance);
                break;
            case LR_POLICY_RANDOM:
                break;
            default:
                assert_int_equal(inflight_of(&g, a.instance),
                                 inflight_of(&g, b.instance));
                break;
            }
            assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, 256),
                      LR_OK);
            rig_step(&g, c, t, n);
            if (step % 50 == 0) {
                assert_router_ok(g.r);
                check_stats(&g);
            }
        }
        assert_router_ok(g.r);
        lr_router_destroy(g.r);
    }
    free(t);
}

/* A narrowed route weighs a few rows: the scores it lists; a fleet at or
 * under LR_PARAM_NARROW_ABOVE, a route naming an adapter, and
 * lr_router_candidates() list them all. */
static void
narrowed_weighs_few(void **state)
{
    (void)state;
    struct rig g;
    rig_open(&g, LR_POLICY_ADAPTIVE);
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    lr_score *sc = calloc(FLEET, sizeof *sc);
    lr_candidate *rows = calloc(FLEET, sizeof *rows);
    for (uint32_t c = 0; c < CONVS; c++)
        rig_step(&g, c, t, prompt_of_conv(&g, c, t));
    size_t n = prompt_of_conv(&g, 3, t);
    lr_request q;
    lr_request_init(&q);
    q.id = 1ull << 50;
    q.tokens = t;
    q.n_tokens = n;
    q.flags = LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES;
    q.now_ns = g.now;
    lr_decision d;
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = FLEET;
    assert_st(lr_router_route(g.r, &q, &d), LR_OK);
    /* hits, three orders and a sample of 16 at most */
    assert_true(d.n_scores >= 16 && d.n_scores <= 5 * 16);
    for (size_t k = 1; k < d.n_scores; k++)
        assert_true(sc[k - 1].instance < sc[k].instance);
    assert_int_equal(candidates_of(g.r, t, n, g.now, rows, FLEET), FLEET);
    assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, FLEET), LR_OK);
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = FLEET;
    assert_st(lr_router_route(g.r, &q, &d), LR_OK);
    assert_int_equal(d.n_scores, FLEET);
    assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, 256), LR_OK);
    q.adapter = "sql"; /* which instances hold it is in no order */
    assert_st(lr_router_set_policy(g.r, LR_POLICY_LORA_AFFINITY), LR_OK);
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = FLEET;
    assert_st(lr_router_route(g.r, &q, &d), LR_OK);
    assert_int_equal(d.n_scores, FLEET);
    lr_router_destroy(g.r);
    free(rows);
    free(sc);
    free(t);
}

/* The rows of the route that just ran (its scratch, back as the router's
 * spare) against the whole table's: each weighs the cached tokens the
 * whole table gives its instance. */
static void
rows_hold_as_whole(const struct rig *g, const lr_score *sc, size_t n,
                   const uint32_t *whole_cached)
{
    const lr_candidate *rows = atomic_load(&g->r->spare)->rows;
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(rows[k].instance, sc[k].instance);
        if (rows[k].cached_tokens != whole_cached[rows[k].instance])
            fail_msg("instance %u: %u cached tokens narrowed, %u whole",
                     rows[k].instance, rows[k].cached_tokens,
                     whole_cached[rows[k].instance]);
    }
}

/* The whole table's rows for t[0..n) into rows (FLEET) and each
 * instance's cached tokens into cached (by id). */
static void
whole_cached(const struct rig *g, const uint32_t *t, size_t n,
             lr_candidate *rows, uint32_t *cached)
{
    assert_int_equal(candidates_of(g->r, t, n, g->now, rows, FLEET), FLEET);
    for (uint32_t k = 0; k < FLEET; k++)
        cached[rows[k].instance] = rows[k].cached_tokens;
}

/* A narrowed route of t[0..n) (a dry run, or recorded under the rig's
 * next id) into d, its scores in sc: a few rows, each holding what the
 * whole table's cached says. */
static void
scored(struct rig *g, bool rec, const uint32_t *t, size_t n, lr_score *sc,
       const uint32_t *cached, lr_decision *d)
{
    lr_request q;
    lr_request_init(&q);
    q.id = rec ? g->next_id++ : 1ull << 50;
    q.tokens = t;
    q.n_tokens = n;
    q.flags = LR_ROUTE_SCORES | (rec ? 0 : LR_ROUTE_DRY_RUN);
    q.now_ns = g->now;
    lr_decision_init(d);
    d->scores = sc;
    d->scores_capacity = FLEET;
    assert_st(lr_router_route(g->r, &q, d), LR_OK);
    assert_true(d->n_scores < FLEET / 4);
    rows_hold_as_whole(g, sc, d->n_scores, cached);
}

/* Each routable instance in the orders with its in flight, or (n 0) no
 * instance in them. */
static void
orders_hold(const struct rig *g, uint32_t n)
{
    assert_int_equal(g->r->fleet.o[LR__ORDER_INFLIGHT].n, n);
    for (uint32_t id = 0; n > 0 && id < FLEET; id++)
        if (lr__router_act_index(g->r, id) != LR_INSTANCE_NONE)
            assert_int_equal(g->r->fleet.inflight[id], inflight_of(g, id));
    assert_router_ok(g->r);
}

/* The orders are kept only while a route may read them: past
 * LR_PARAM_NARROW_ABOVE routable instances. Below (by the parameter, or
 * as instances leave) they are empty and the load's changes skip them;
 * past it again every routable instance is put back, as it is loaded. */
static void
orders_follow_the_threshold(void **state)
{
    (void)state;
    struct rig g;
    rig_open(&g, LR_POLICY_PREFIX_CACHE_AND_LOAD);
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    orders_hold(&g, FLEET);
    assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, FLEET), LR_OK);
    orders_hold(&g, 0);
    for (uint32_t c = 0; c < CONVS; c++) /* loads move while they are off */
        rig_step(&g, c, t, prompt_of_conv(&g, c, t));
    orders_hold(&g, 0);
    assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, FLEET - 2),
              LR_OK);
    orders_hold(&g, FLEET);
    /* two leave: at the threshold, off; one comes back: on */
    assert_st(lr_router_drain_instance(g.r, 7, 1), LR_OK);
    orders_hold(&g, FLEET - 1);
    for (uint32_t c = 0; c < CONVS; c++)
        rig_step(&g, c, t, prompt_of_conv(&g, c, t));
    orders_hold(&g, FLEET - 1);
    assert_st(lr_router_remove_instance(g.r, 9), LR_OK);
    orders_hold(&g, 0);
    add_instance(g.r, "10.9", 9, 0, 0);
    orders_hold(&g, FLEET - 1);
    lr_router_destroy(g.r);
    free(t);
}

/* The ring ranks of a narrowed route's rows: the whole table's, for the
 * ring's first candidates, each among the rows; for ranvier, whose rule
 * hashes only when nothing holds the prompt, none on a hit. */
static void
narrowed_ring_ranks(void **state)
{
    (void)state;
    static const lr_policy policies[] = { LR_POLICY_CONSISTENT_HASH,
                                          LR_POLICY_RANVIER };
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    lr_score *sc = calloc(FLEET, sizeof *sc);
    lr_candidate *rows = calloc(FLEET, sizeof *rows);
    uint32_t *cached = calloc(FLEET, sizeof *cached);
    uint32_t *rank = calloc(FLEET, sizeof *rank);
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        struct rig g;
        rig_open(&g, policies[p]);
        for (uint32_t c = 0; c < CONVS; c++)
            rig_step(&g, c, t, prompt_of_conv(&g, c, t));
        for (int miss = 0; miss < 2; miss++) {
            size_t n = prompt_of_conv(&g, 5, t);
            if (miss) /* a prompt no instance holds any of */
                for (size_t i = 0; i < n; i++)
                    t[i] = 0x70000u + (uint32_t)i;
            assert_int_equal(candidates_of(g.r, t, n, g.now, rows, FLEET),
                             FLEET);
            uint32_t want = 0, held = 0;
            for (uint32_t k = 0; k < FLEET; k++) {
                cached[rows[k].instance] = rows[k].cached_tokens;
                rank[rows[k].instance] = rows[k].ring_rank;
                want += rows[k].ring_rank > 0;
                held += rows[k].cached_tokens > 0;
            }
            assert_int_equal(want, LR_RING_MAX_K);
            if (policies[p] == LR_POLICY_RANVIER) /* it matches */
                assert_int_equal(held == 0, miss);
            lr_decision d;
            scored(&g, false, t, n, sc, cached, &d);
            const lr_candidate *nr = atomic_load(&g.r->spare)->rows;
            uint32_t ranked = 0;
            for (size_t k = 0; k < d.n_scores; k++) {
                if (nr[k].ring_rank > 0)
                    assert_int_equal(nr[k].ring_rank, rank[nr[k].instance]);
                ranked += nr[k].ring_rank > 0;
            }
            bool hashes = policies[p] != LR_POLICY_RANVIER || miss;
            assert_int_equal(ranked, hashes ? want : 0);
        }
        lr_router_destroy(g.r);
    }
    free(rank);
    free(cached);
    free(rows);
    free(sc);
    free(t);
}

/* A prompt whose opening most of a large fleet holds (more than a cut
 * match reads whole: 8 x LR_PARAM_NARROW_WIDTH), the busy most of all: a
 * narrowed route reads the deepest holders alone, asks after its other
 * candidates one by one and samples the opening's holders. Every row it
 * weighs holds what the whole table says, dry or recording (the early
 * match), and prefix-cache takes a holder among the least in flight of
 * the opening's holders, though the least in flight of the fleet hold
 * none of it; at the conversation's next turn it takes the longest hit. */
static void
narrowed_many_holders(void **state)
{
    (void)state;
    static const lr_policy policies[] = { LR_POLICY_PREFIX_CACHE,
                                          LR_POLICY_ADAPTIVE };
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    lr_score *sc = calloc(FLEET, sizeof *sc);
    lr_candidate *rows = calloc(FLEET, sizeof *rows);
    uint32_t *cached = calloc(1024, sizeof *cached);
    uint32_t *held = calloc(FLEET, sizeof *held);
    for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++) {
        struct rig g;
        rig_open(&g, policies[pi]);
        /* the opening, learned by those with 2 or more in flight */
        size_t n = prompt_of_conv(&g, CONVS, t);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = t;
        p.n_tokens = SYSTEM;
        assert_int_equal(candidates_of(g.r, t, n, g.now, rows, FLEET), FLEET);
        uint32_t holders = 0;
        for (uint32_t k = 0; k < FLEET; k++)
            if (rows[k].inflight >= 2) {
                assert_st(lr_index_learn(g.r->ix, &p, rows[k].instance,
                                         LR_TRUST_LOCAL, g.now),
                          LR_OK);
                holders++;
            }
        assert_true(holders > 8 * 16 && holders < FLEET - 32);
        for (int step = 0; step < 40; step++) {
            uint32_t c = CONVS + 1000 + (uint32_t)step; /* a new one */
            n = prompt_of_conv(&g, c, t);
            whole_cached(&g, t, n, rows, cached);
            uint32_t nh = 0;
            for (uint32_t k = 0; k < FLEET; k++)
                if (rows[k].cached_tokens == SYSTEM)
                    held[nh++] = rows[k].inflight;
            assert_true(nh >= holders);
            qsort(held, nh, sizeof *held, cmp_u32);
            for (int rec = 0; rec < 2; rec++) {
                lr_decision d;
                scored(&g, rec != 0, t, n, sc, cached, &d);
                if (policies[pi] != LR_POLICY_PREFIX_CACHE)
                    continue;
                assert_int_equal(d.reason, LR_REASON_PREFIX_HIT);
                assert_int_equal(d.cached_tokens, SYSTEM);
                /* 64 of the holders sampled: among their least tenth */
                if (inflight_of(&g, d.instance) > held[nh / 10] + rec)
                    fail_msg("step %d: took a holder with %u in flight; a "
                             "tenth of the %u holders have %u or fewer",
                             step, inflight_of(&g, d.instance), nh,
                             held[nh / 10]);
            }
            /* its next turn: the deepest hit is the instance it went to,
             * one the cut reads (the longest: exact) */
            for (size_t i = n; i < n + TURN; i++)
                t[i] = (uint32_t)(c * 1000003u + i * 7919u) & 0xffffu;
            n += TURN;
            whole_cached(&g, t, n, rows, cached);
            lr_decision d, b;
            scored(&g, false, t, n, sc, cached, &d);
            assert_st(dry(&g, t, n, true, &b), LR_OK);
            assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, 256),
                      LR_OK);
            if (policies[pi] == LR_POLICY_PREFIX_CACHE &&
                (d.cached_tokens != b.cached_tokens ||
                 inflight_of(&g, d.instance) != inflight_of(&g, b.instance)))
                fail_msg("step %d: next turn: %u cached, %u in flight "
                         "narrowed; %u, %u whole",
                         step, d.cached_tokens, inflight_of(&g, d.instance),
                         b.cached_tokens, inflight_of(&g, b.instance));
            g.now += 20000000ull;
        }
        assert_router_ok(g.r);
        lr_router_destroy(g.r);
    }
    free(held);
    free(cached);
    free(rows);
    free(sc);
    free(t);
}

/* A peer router on the rig's fleet: replica `rid`, its own requests. */
static lr_router *
peer_open(uint64_t rid)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.max_instances = 1024;
    o.policy = LR_POLICY_RANDOM;
    o.seed = rid;
    o.replica_id = rid;
    lr_router *r;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < FLEET; i++)
        add_instance(r, "10.9", i, 0, 0);
    return r;
}

/* The peers' gauges reach the orders of the instances they name, and
 * leave them when they are replaced or expire: every member's in flight
 * in the orders is its own plus the live gauges' (each peer's counters
 * when it exported), and a narrowed least-request picks as the whole
 * table does. */
static void
narrowed_follows_gauges(void **state)
{
    (void)state;
    struct rig g;
    rig_open(&g, LR_POLICY_LEAST_REQUEST);
    lr_router *peer[2] = { peer_open(2), peer_open(3) };
    uint32_t *at[2] = { calloc(FLEET, sizeof(uint32_t)),
                        calloc(FLEET, sizeof(uint32_t)) };
    bool live[2] = { false, false };
    uint64_t sent[2] = { 0, 0 };
    uint64_t pid = 1, rng = tu_seed("gauges", 5);
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    for (int round = 0; round < 40; round++) {
        for (int k = 0; k < 2; k++) {
            /* the second peer falls silent after round 12: its gauge
             * expires (2 s) */
            if (k == 1 && round >= 12) {
                if (live[1] && g.now >= sent[1] + 2000000000ull)
                    live[1] = false;
                continue;
            }
            /* a few new requests on few instances, some ended */
            for (int j = 0; j < 30; j++) {
                uint32_t tok[8];
                for (uint32_t x = 0; x < 8; x++)
                    tok[x] = (uint32_t)tu_rand(&rng);
                assert_st(route_one(peer[k], pid++, tok, 8, 0, g.now, NULL),
                          LR_OK);
                if (tu_rand(&rng) % 3 == 0)
                    (void)lr_router_complete(peer[k], 1 + tu_rand(&rng) % pid,
                                             5, g.now);
            }
            lr_blob *b = NULL;
            assert_st(lr_router_export_gauges(peer[k], &b), LR_OK);
            assert_st(lr_router_import_gauges(g.r, lr_blob_data(b),
                                              lr_blob_size(b), g.now),
                      LR_OK);
            lr_blob_destroy(b);
            for (uint32_t id = 0; id < FLEET; id++) {
                lr_load_snapshot ls;
                lr_load_snapshot_init(&ls);
                assert_st(lr_router_instance_load(peer[k], id, &ls), LR_OK);
                at[k][id] = ls.inflight;
            }
            live[k] = true;
            sent[k] = g.now;
        }
        uint32_t c = (uint32_t)(tu_rand(&rng) % CONVS);
        size_t n = prompt_of_conv(&g, c, t);
        lr_decision a, w;
        assert_st(dry(&g, t, n, false, &a), LR_OK);
        assert_st(dry(&g, t, n, true, &w), LR_OK);
        /* narrowed again: the orders kept (and rebuilt) */
        assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, 256), LR_OK);
        rig_step(&g, c, t, n); /* routes: the expiry runs */
        g.now += 480000000ull; /* half a second a round in all */
        assert_st(lr_router_expire(g.r, g.now), LR_OK);
        for (uint32_t id = 0; id < FLEET; id++) {
            uint64_t want = inflight_of(&g, id);
            for (int k = 0; k < 2; k++)
                want +=
                    live[k] && g.now < sent[k] + 2000000000ull ? at[k][id] : 0;
            if (g.r->fleet.inflight[id] != want)
                fail_msg("round %d, instance %u: %u in flight in the "
                         "orders, %llu live",
                         round, id, g.r->fleet.inflight[id],
                         (unsigned long long)want);
        }
        assert_router_ok(g.r);
        /* the narrowed route's pick is as little loaded as the whole
         * table's (both counted before the step) */
        assert_int_equal(a.reason, w.reason);
    }
    assert_false(live[1]); /* the silent peer's gauge expired */
    lr_router_destroy(peer[0]);
    lr_router_destroy(peer[1]);
    lr_router_destroy(g.r);
    free(at[0]);
    free(at[1]);
    free(t);
}

/* Drains, removals and adds keep the orders to the routable; a drained
 * instance's cached prefix is never a candidate. */
static void
narrowed_follows_the_fleet(void **state)
{
    (void)state;
    struct rig g;
    rig_open(&g, LR_POLICY_PREFIX_CACHE_AND_LOAD);
    uint32_t *t = malloc((SYSTEM + 12 * TURN) * sizeof *t);
    uint64_t rng = tu_seed("fleet", 4);
    for (int step = 0; step < 400; step++) {
        uint32_t c = (uint32_t)(tu_rand(&rng) % CONVS);
        size_t n = prompt_of_conv(&g, c, t);
        uint32_t id = (uint32_t)(tu_rand(&rng) % FLEET);
        switch (tu_rand(&rng) % 8) {
        case 0:
            (void)lr_router_drain_instance(g.r, id, 1);
            break;
        case 1:
            (void)lr_router_drain_instance(g.r, id, 0);
            break;
        default:
            break;
        }
        lr_decision d;
        assert_st(dry(&g, t, n, false, &d), LR_OK);
        const struct lr__rinst *in = lr__router_inst(g.r, d.instance);
        assert_non_null(in);
        assert_false(in->draining);
        assert_st(lr_router_set_param(g.r, LR_PARAM_NARROW_ABOVE, 256), LR_OK);
        rig_step(&g, c, t, n);
        if (step % 40 == 0)
            assert_router_ok(g.r);
    }
    assert_router_ok(g.r);
    lr_router_destroy(g.r);
    free(t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_matches_naive),
        cmocka_unit_test(order_longest_there_first),
        cmocka_unit_test(order_token_buckets),
        cmocka_unit_test(order_oom),
        cmocka_unit_test(narrowed_matches_whole),
        cmocka_unit_test(narrowed_many_holders),
        cmocka_unit_test(narrowed_ring_ranks),
        cmocka_unit_test(orders_follow_the_threshold),
        cmocka_unit_test(narrowed_weighs_few),
        cmocka_unit_test(narrowed_follows_the_fleet),
        cmocka_unit_test(narrowed_follows_gauges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
