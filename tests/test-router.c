/* lr_router: every policy against its published rule (../shared/FIELD.md
 * and the rules the router's design names), the request lifecycle, bad
 * input, parameters and DualMap rebalancing.
 *
 * Cluster states are built by hand through the public API only:
 * - in-flight load: place() drains every other instance for one route
 *   under least-request with LR_ROUTE_NO_LEARN, so the request's whole
 *   prompt is queued prefill on the chosen instance;
 * - cached prefixes: cache_on() feeds a KV BlockStored event;
 * - scrapes, RTTs and class rates through their setters.
 * Decisions are read with LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "libroute/lr_router.h"
#include "router-helpers.h"
#include "router/router.h"
#include "testutil.h"

#define assert_near(a, b)                                   \
    do {                                                    \
        double a_ = (a), b_ = (b);                          \
        if (!(fabs(a_ - b_) <= 1e-9 * (1.0 + fabs(b_))))    \
            fail_msg("%s = %.12g, want %.12g", #a, a_, b_); \
    } while (0)

static const lr_policy supported[] = { POLICIES_WITHOUT_LEARNER };
#define N_SUPPORTED (sizeof supported / sizeof supported[0])

/* ---- helpers --------------------------------------------------------------- */

static uint64_t next_id = 1;

static uint32_t
add(lr_router *r, uint32_t i, uint32_t cls, uint64_t rtt_ns)
{
    return add_instance(r, "10.0", i, cls, rtt_ns);
}

/* A router with n instances 0..n-1 of class 0. */
static lr_router *
mk(lr_policy policy, uint32_t n)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = policy;
    o.seed = OPT_SEED;
    o.max_instances = 64;
    o.max_requests = 4096;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(add(r, i, 0, 0), i);
    return r;
}

struct dec {
    lr_decision d;
    lr_score sc[64];
};

static lr_request
req(const uint32_t *t, size_t n, uint32_t flags, uint64_t now)
{
    lr_request q;
    lr_request_init(&q);
    q.id = next_id++;
    q.tokens = t;
    q.n_tokens = n;
    q.flags = flags;
    q.now_ns = now;
    return q;
}

static lr_status
route_q(lr_router *r, const lr_request *q, struct dec *o)
{
    lr_decision_init(&o->d);
    o->d.scores = o->sc;
    o->d.scores_capacity = 64;
    return lr_router_route(r, q, &o->d);
}

/* Ask only, with scores. */
static void
dry(lr_router *r, const uint32_t *t, size_t n, uint64_t now, struct dec *o)
{
    lr_request q = req(t, n, LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES, now);
    assert_st(route_q(r, &q, o), LR_OK);
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    assert_int_equal(o->d.n_scores, s.routable);
}

static double
score_of(const struct dec *o, uint32_t id)
{
    for (size_t i = 0; i < o->d.n_scores; i++)
        if (o->sc[i].instance == id)
            return o->sc[i].score;
    fail_msg("no score for instance %u", id);
    return NAN;
}

static lr_load_snapshot
snap(const lr_router *r, uint32_t id)
{
    lr_load_snapshot s;
    lr_load_snapshot_init(&s);
    assert_st(lr_router_instance_load(r, id, &s), LR_OK);
    return s;
}

static lr_router_stats
rstats(const lr_router *r)
{
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    return s;
}

/* Put one request in flight on `target`: every other instance drained for
 * the call, least-request, no learning, so its whole prompt of n_tokens is
 * queued prefill there. out_tokens 0 means the default (128). Needs ids
 * 0..count-1 live and none draining. Returns the request id. */
static uint64_t
place(lr_router *r, uint32_t target, uint32_t n_tokens, uint32_t out_tokens,
      uint64_t now)
{
    uint32_t n = lr_router_instance_count(r);
    int32_t pol = lr_router_policy(r);
    assert_st(lr_router_set_policy(r, LR_POLICY_LEAST_REQUEST), LR_OK);
    for (uint32_t i = 0; i < n; i++)
        if (i != target)
            assert_st(lr_router_drain_instance(r, i, 1), LR_OK);
    uint32_t *t = n_tokens > 0 ? malloc(n_tokens * sizeof *t) : NULL;
    uint64_t id = next_id++;
    if (t != NULL)
        toks(t, n_tokens, id ^ 0xabcdef);
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = t;
    q.n_tokens = n_tokens;
    q.flags = LR_ROUTE_NO_LEARN;
    q.expected_output_tokens = out_tokens;
    q.now_ns = now;
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.instance, target);
    for (uint32_t i = 0; i < n; i++)
        if (i != target)
            assert_st(lr_router_drain_instance(r, i, 0), LR_OK);
    assert_st(lr_router_set_policy(r, (lr_policy)pol), LR_OK);
    free(t);
    return id;
}

static void
place_n(lr_router *r, uint32_t target, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        place(r, target, 0, 1, T0);
}

/* Make the first n tokens (a multiple of BT) cached on `inst` with a KV
 * BlockStored event. */
static void
cache_on(lr_router *r, uint32_t inst, const uint32_t *t, size_t n)
{
    static uint64_t engine_hash = 1;
    assert_true(n % BT == 0 && n > 0);
    size_t nb = n / BT;
    uint64_t *h = malloc(nb * sizeof *h);
    for (size_t i = 0; i < nb; i++)
        h[i] = engine_hash++;
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = h;
    ev.n_blocks = nb;
    ev.block_size = BT;
    ev.token_ids = t;
    ev.n_tokens = n;
    assert_st(lr_router_kv_stored(r, inst, &ev, T0), LR_OK);
    free(h);
}

static void
set_param(lr_router *r, lr_param k, double v)
{
    assert_st(lr_router_set_param(r, k, v), LR_OK);
}

static void
set_rate(lr_router *r, uint32_t cls, double rate)
{
    lr_class_spec c;
    lr_class_spec_init(&c);
    c.prefill_tokens_per_s = rate;
    assert_st(lr_router_set_class(r, cls, &c), LR_OK);
}

static unsigned
popcount64(uint64_t x)
{
    unsigned n = 0;
    for (; x != 0; x &= x - 1)
        n++;
    return n;
}

/* ---- random, round-robin, least-request, least-load --------------------------------- */

static void
policy_random(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_RANDOM, 4);
    uint32_t t[64];
    unsigned count[4] = { 0 };
    for (int i = 0; i < 400; i++) {
        toks(t, 64, (uint64_t)i);
        lr_request q = req(t, 64, LR_ROUTE_SCORES, T0 + (uint64_t)i);
        struct dec o;
        assert_st(route_q(r, &q, &o), LR_OK);
        assert_reason(o.d, LR_REASON_RANDOM);
        assert_true(o.d.instance < 4);
        assert_int_equal(o.d.n_scores, 4);
        count[o.d.instance]++;
        assert_st(lr_router_complete(r, q.id, 10, T0 + (uint64_t)i), LR_OK);
    }
    for (int i = 0; i < 4; i++)
        assert_true(count[i] > 50); /* 100 expected, sd 8.7 */
    assert_int_equal(rstats(r).by_reason[LR_REASON_RANDOM], 400);
    lr_router_destroy(r);
}

static uint32_t
rr_next(lr_router *r, bool check_dry)
{
    uint32_t t[32];
    toks(t, 32, next_id);
    struct dec o;
    uint32_t asked = LR_INSTANCE_NONE;
    if (check_dry) {
        /* asking twice does not advance the cursor */
        dry(r, t, 32, T0, &o);
        asked = o.d.instance;
        dry(r, t, 32, T0, &o);
        assert_int_equal(o.d.instance, asked);
    }
    lr_request q = req(t, 32, 0, T0);
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_reason(o.d, LR_REASON_ROUND_ROBIN);
    if (check_dry)
        assert_int_equal(o.d.instance, asked);
    return o.d.instance;
}

static void
policy_round_robin(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_ROUND_ROBIN, 4);
    static const uint32_t a[] = { 0, 1, 2, 3, 0, 1 };
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(rr_next(r, i % 2 == 0), a[i]);
    /* draining skips: 3, 0, 1, 3, 0 */
    assert_st(lr_router_drain_instance(r, 2, 1), LR_OK);
    static const uint32_t b[] = { 3, 0, 1, 3, 0 };
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(rr_next(r, true), b[i]);
    assert_st(lr_router_drain_instance(r, 2, 0), LR_OK);
    static const uint32_t c[] = { 1, 2, 3, 0 };
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(rr_next(r, false), c[i]);
    /* the last served goes draining: the next id after it serves */
    assert_int_equal(rr_next(r, false), 1);
    assert_int_equal(rr_next(r, false), 2);
    assert_st(lr_router_drain_instance(r, 2, 1), LR_OK);
    assert_int_equal(rr_next(r, false), 3);
    assert_int_equal(rr_next(r, false), 0);
    lr_router_destroy(r);
}

static void
policy_least_request(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 3);
    place_n(r, 0, 2);
    place_n(r, 1, 1);
    uint32_t t[48];
    toks(t, 48, 1);
    struct dec o;
    dry(r, t, 48, T0, &o);
    assert_int_equal(o.d.instance, 2);
    assert_reason(o.d, LR_REASON_LEAST_LOADED);
    assert_near(o.d.cost, 0);
    assert_near(score_of(&o, 0), 2);
    assert_near(score_of(&o, 1), 1);
    assert_near(score_of(&o, 2), 0);
    place_n(r, 2, 2);
    dry(r, t, 48, T0, &o);
    assert_int_equal(o.d.instance, 1);
    /* a request past its first token is still in flight */
    uint64_t id = place(r, 1, 10, 0, T0);
    assert_st(lr_router_first_token(r, id, T0 + MS), LR_OK);
    dry(r, t, 48, T0, &o);
    assert_near(score_of(&o, 1), 2);
    assert_near(o.d.cost, 2);
    assert_reason(o.d, LR_REASON_LEAST_LOADED);
    lr_router_destroy(r);
}

static void
scrape(lr_router *r, uint32_t id, uint32_t running, uint32_t waiting,
       uint64_t at)
{
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.running = running;
    s.waiting = waiting;
    s.kv_use = 0.5;
    s.scraped_ns = at;
    assert_st(lr_router_set_stats(r, id, &s), LR_OK);
}

static void
policy_least_load(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_LOAD, 3);
    scrape(r, 0, 3, 2, T0);
    scrape(r, 1, 50, 10, T0 - 20 * SEC); /* stale at T0 (10 s max age) */
    place_n(r, 2, 2);
    uint32_t t[32];
    toks(t, 32, 2);
    struct dec o;
    dry(r, t, 32, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_LEAST_LOADED);
    assert_near(score_of(&o, 0), 5); /* in flight 0 + running 3 + waiting 2 */
    assert_near(score_of(&o, 1), 0); /* stale: ignored */
    assert_near(score_of(&o, 2), 2); /* in flight only */
    scrape(r, 1, 1, 0, T0);
    dry(r, t, 32, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_near(score_of(&o, 1), 1);
    scrape(r, 1, 2, 2, T0 + 1);
    dry(r, t, 32, T0 + 1, &o);
    assert_int_equal(o.d.instance, 2);
    /* an older scrape than the one held is ignored */
    scrape(r, 1, 0, 0, T0);
    dry(r, t, 32, T0 + 1, &o);
    assert_near(score_of(&o, 1), 4);
    /* eleven seconds later every scrape is stale */
    dry(r, t, 32, T0 + 11 * SEC + 1, &o);
    assert_near(score_of(&o, 0), 0);
    assert_near(score_of(&o, 1), 0);
    assert_true(o.d.instance == 0 || o.d.instance == 1);
    /* a longer max age keeps them */
    set_param(r, LR_PARAM_STATS_MAX_AGE_S, 30);
    dry(r, t, 32, T0 + 11 * SEC + 1, &o);
    assert_int_equal(o.d.instance, 2);
    lr_router_destroy(r);
}

/* ---- session-affinity and consistent-hash ------------------------------------------- */

static uint32_t
dry_session(lr_router *r, const uint32_t *t, size_t n, int has, uint64_t s)
{
    lr_request q = req(t, n, LR_ROUTE_DRY_RUN, T0);
    q.has_session = has;
    q.session = s;
    struct dec o;
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_reason(o.d, LR_REASON_SESSION);
    return o.d.instance;
}

static void
policy_session_affinity(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_SESSION_AFFINITY, 8);
    uint32_t t[300], base[300];
    /* one session: one instance whatever the tokens and the load */
    toks(t, 300, 1);
    uint32_t s0 = dry_session(r, t, 300, 1, 42);
    place_n(r, s0, 5);
    for (uint64_t i = 0; i < 40; i++) {
        toks(t, 300, 100 + i);
        assert_int_equal(dry_session(r, t, (size_t)(20 + i * 7), 1, 42), s0);
    }
    /* different sessions spread */
    uint64_t seen = 0;
    for (uint64_t s = 0; s < 40; s++)
        seen |= 1ull << dry_session(r, t, 300, 1, 1000 + s);
    assert_true(popcount64(seen) > 1);

    /* no session: the first 256 tokens decide */
    toks(base, 300, 7);
    uint32_t b0 = dry_session(r, base, 300, 0, 42);
    seen = 0;
    for (uint32_t i = 0; i < 40; i++) {
        memcpy(t, base, sizeof t);
        t[256 + i] ^= 0x5555u; /* differs after token 256 */
        assert_int_equal(dry_session(r, t, 300, 0, 0), b0);
        memcpy(t, base, sizeof t);
        t[100] = i; /* differs inside the first 256 */
        seen |= 1ull << dry_session(r, t, 300, 0, 0);
    }
    assert_true(popcount64(seen) > 1);

    /* every one of the first 256 token ids enters the hash, also for a
     * prompt shorter than 256 whose length is not a multiple of the block
     * size (published: hash of the first 256 token ids) */
    seen = 0;
    for (uint32_t i = 0; i < 40; i++) {
        memcpy(t, base, sizeof t);
        t[35] = i;
        seen |= 1ull << dry_session(r, t, 40, 0, 0);
    }
    assert_true(popcount64(seen) > 1);

    /* LR_PARAM_SESSION_TOKENS = 64: token 100 no longer matters */
    set_param(r, LR_PARAM_SESSION_TOKENS, 64);
    uint32_t b64 = dry_session(r, base, 300, 0, 0);
    for (uint32_t i = 0; i < 10; i++) {
        memcpy(t, base, sizeof t);
        t[100] = i;
        assert_int_equal(dry_session(r, t, 300, 0, 0), b64);
    }
    lr_router_destroy(r);
}

static void
policy_consistent_hash(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_CONSISTENT_HASH, 4);
    uint32_t p[300], t[300];
    toks(p, 300, 11);
    struct dec o;
    dry(r, p, 300, T0, &o);
    uint32_t h = o.d.instance, a = o.d.alt_instance;
    assert_reason(o.d, LR_REASON_HASH);
    assert_true(h < 4 && a < 4 && a != h);
    /* the same first 256 tokens: the same instance */
    for (uint32_t i = 0; i < 20; i++) {
        memcpy(t, p, sizeof t);
        t[260 + i] = i;
        dry(r, t, 300, T0, &o);
        assert_int_equal(o.d.instance, h);
    }
    /* bounded load: H 2, others 1: cap = ceil(1.25 x (5 + 1) / 4) = 2, and
     * H would hold 3: the next candidate (the alternative) takes it */
    place_n(r, h, 2);
    for (uint32_t i = 0; i < 4; i++)
        if (i != h)
            place_n(r, i, 1);
    dry(r, p, 300, T0, &o);
    assert_int_equal(o.d.instance, a);
    assert_reason(o.d, LR_REASON_HASH);
    assert_near(o.d.cost, 1);
    /* c = 2: cap = ceil(2 x 6 / 4) = 3, H fits */
    set_param(r, LR_PARAM_BOUNDED_LOAD, 2);
    dry(r, p, 300, T0, &o);
    assert_int_equal(o.d.instance, h);
    set_param(r, LR_PARAM_BOUNDED_LOAD, 1.25);
    dry(r, p, 300, T0, &o);
    assert_int_equal(o.d.instance, a);
    /* everyone at 2: cap = ceil(1.25 x 9 / 4) = 3, H fits again */
    for (uint32_t i = 0; i < 4; i++)
        if (i != h)
            place_n(r, i, 1);
    dry(r, p, 300, T0, &o);
    assert_int_equal(o.d.instance, h);
    assert_reason(o.d, LR_REASON_HASH);
    lr_router_destroy(r);
}

/* ---- prefix-cache, prefix-cache-and-load (AIBrix), sglang ---------------------------- */

static void
policy_prefix_cache(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_PREFIX_CACHE, 3);
    uint32_t a[64], b[64];
    toks(a, 64, 21);
    toks(b, 64, 22);
    cache_on(r, 1, a, 32); /* ratio 0.5 = tau: follows the cache */
    cache_on(r, 2, b, 16); /* ratio 0.25 < tau */
    place_n(r, 1, 3);
    place_n(r, 2, 1);
    struct dec o;
    dry(r, a, 64, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 32);
    assert_int_equal(o.d.best_cached_tokens, 32);
    assert_near(o.d.cost, -32);
    dry(r, b, 64, T0, &o);
    assert_int_equal(o.d.instance, 0); /* least loaded */
    assert_reason(o.d, LR_REASON_FALLBACK);
    assert_int_equal(o.d.best_cached_tokens, 16);
    set_param(r, LR_PARAM_PREFIX_MIN_RATIO, 0.25);
    dry(r, b, 64, T0, &o);
    assert_int_equal(o.d.instance, 2);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    set_param(r, LR_PARAM_PREFIX_MIN_RATIO, 0.6);
    dry(r, a, 64, T0, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_FALLBACK);
    /* equal best: the less loaded of them */
    set_param(r, LR_PARAM_PREFIX_MIN_RATIO, 0.5);
    cache_on(r, 2, a, 32);
    dry(r, a, 64, T0, &o);
    assert_int_equal(o.d.instance, 2);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    lr_router_destroy(r);
}

struct aib {
    uint32_t load[4];
    double k;         /* LR_PARAM_AIBRIX_STDDEV */
    double imbalance; /* LR_PARAM_AIBRIX_IMBALANCE */
    bool also2;       /* instance 2 holds the 128-token prefix too */
};

/* Prompt of 256 tokens; instance 0 holds 128 of it, instance 1 holds 64. */
static void
aibrix_case(const struct aib *c, struct dec *o)
{
    lr_router *r = mk(LR_POLICY_PREFIX_CACHE_AND_LOAD, 4);
    uint32_t p[256];
    toks(p, 256, 31);
    cache_on(r, 0, p, 128);
    cache_on(r, 1, p, 64);
    if (c->also2)
        cache_on(r, 2, p, 128);
    for (uint32_t i = 0; i < 4; i++)
        place_n(r, i, c->load[i]);
    set_param(r, LR_PARAM_AIBRIX_STDDEV, c->k);
    set_param(r, LR_PARAM_AIBRIX_IMBALANCE, c->imbalance);
    dry(r, p, 256, T0, o);
    lr_router_destroy(r);
}

static void
policy_prefix_cache_and_load(void **state)
{
    (void)state;
    struct dec o;
    /* balanced: the best match */
    aibrix_case(&(struct aib){ { 0, 0, 0, 0 }, 1, 8, false }, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 128);
    assert_near(o.d.cost, -128);
    /* {2,2,2,0}: mean 1.5, sd 0.866, limit 2.37: 0 passes the filter */
    aibrix_case(&(struct aib){ { 2, 2, 2, 0 }, 1, 8, false }, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* k = 0: limit = mean = 1.5: only 3 passes, no match: least loaded */
    aibrix_case(&(struct aib){ { 2, 2, 2, 0 }, 0, 8, false }, &o);
    assert_int_equal(o.d.instance, 3);
    assert_reason(o.d, LR_REASON_LEAST_LOADED);
    assert_int_equal(o.d.cached_tokens, 0);
    assert_int_equal(o.d.best_cached_tokens, 128);
    /* {4,1,1,1}: mean 1.75, sd 1.30, limit 3.05: 0 filtered out, the best
     * match among the rest is 1 (64 tokens) */
    aibrix_case(&(struct aib){ { 4, 1, 1, 1 }, 1, 8, false }, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 64);
    /* max - min = 8 is not > 8: no override (k large, so 0 passes) */
    aibrix_case(&(struct aib){ { 8, 0, 0, 0 }, 100, 8, false }, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* max - min = 9 > 8: least loaded, load-override */
    aibrix_case(&(struct aib){ { 9, 0, 0, 0 }, 100, 8, false }, &o);
    assert_true(o.d.instance >= 1 && o.d.instance <= 3);
    assert_reason(o.d, LR_REASON_LOAD_OVERRIDE);
    assert_near(o.d.cost, 0);
    /* the imbalance threshold is the parameter */
    aibrix_case(&(struct aib){ { 9, 0, 0, 0 }, 100, 9, false }, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* equal best match: the less loaded */
    aibrix_case(&(struct aib){ { 1, 0, 0, 0 }, 100, 8, true }, &o);
    assert_int_equal(o.d.instance, 2);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
}

/* Two instances with in-flight loads; instance 0 holds `cached` tokens of
 * a `prompt`-token prompt. */
static void
sglang_case(uint32_t l0, uint32_t l1, uint32_t cached, uint32_t prompt,
            struct dec *o)
{
    lr_router *r = mk(LR_POLICY_SGLANG_CACHE_AWARE, 2);
    uint32_t p[512];
    toks(p, prompt, 41);
    cache_on(r, 0, p, cached);
    place_n(r, 0, l0);
    place_n(r, 1, l1);
    dry(r, p, prompt, T0, o);
    lr_router_destroy(r);
}

static void
policy_sglang(void **state)
{
    (void)state;
    struct dec o;
    /* 60 apart: balanced; ratio 64 / 160 = 0.4 > 0.3: the match */
    sglang_case(100, 40, 64, 160, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 64);
    /* 70 apart (> 64) and 130 > 1.5 x 60: imbalanced: least loaded */
    sglang_case(130, 60, 64, 160, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_LOAD_OVERRIDE);
    assert_near(o.d.cost, 60);
    /* 90 apart but 300 < 1.5 x 210: both conditions are needed */
    sglang_case(300, 210, 64, 160, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* 60 > 1.5 x 0 but only 60 apart */
    sglang_case(60, 0, 64, 160, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* ratio 48 / 160 = 0.3, not > 0.3: the smallest radix tree (SGLang's
     * router source), whatever the load: instance 1 holds no block,
     * instance 0 the 3 of its match */
    sglang_case(1, 0, 48, 160, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_FALLBACK);
    assert_int_equal(o.d.best_cached_tokens, 48);
    assert_near(score_of(&o, 0), 3);
    assert_near(o.d.cost, 0);
    sglang_case(0, 1, 48, 160, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_FALLBACK);
    /* ratio 0.4 with the same loads: the match */
    sglang_case(1, 0, 64, 160, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
}

/* ---- preble, min-ttft, dynamo ------------------------------------------------------ */

static void
policy_preble(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_PREBLE, 3);
    uint32_t a[64], b[64];
    toks(a, 64, 51);
    toks(b, 64, 52);
    cache_on(r, 0, a, 48); /* 0.75 of a */
    cache_on(r, 1, b, 32); /* 0.5 of b */
    place(r, 0, 10000, 0, T0);
    struct dec o;
    /* hit ratio 0.75 > 0.5: the best hit, whatever its load */
    dry(r, a, 64, T0, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 48);
    /* 0.5 is not above 0.5: least predicted cost (prefill queue +
     * uncached) / rate */
    dry(r, b, 64, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_MIN_COST);
    assert_near(score_of(&o, 0), (10000.0 + 64) / 8000);
    assert_near(score_of(&o, 1), 32.0 / 8000);
    assert_near(score_of(&o, 2), 64.0 / 8000);
    assert_near(o.d.cost, 32.0 / 8000);
    place(r, 1, 100, 0, T0);
    dry(r, b, 64, T0, &o);
    assert_int_equal(o.d.instance, 2);
    assert_reason(o.d, LR_REASON_MIN_COST);
    assert_near(score_of(&o, 1), 132.0 / 8000);
    /* threshold 0.4: b's 0.5 now follows the hit */
    set_param(r, LR_PARAM_PREBLE_HIT, 0.4);
    dry(r, b, 64, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    lr_router_destroy(r);
}

static void
policy_min_ttft(void **state)
{
    (void)state;
    lr_router_options opt;
    lr_router_options_init(&opt);
    opt.policy = LR_POLICY_MIN_TTFT;
    opt.max_instances = 8;
    opt.max_requests = 64;
    lr_router *r;
    assert_st(lr_router_create(&opt, &r), LR_OK);
    assert_int_equal(add(r, 0, 0, 0), 0);
    assert_int_equal(add(r, 1, 1, 0), 1);
    static uint32_t p[1000];
    toks(p, 1000, 61);
    place(r, 0, 1000, 0, T0);
    place(r, 1, 3000, 0, T0);
    struct dec o;
    dry(r, p, 1000, T0, &o);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_MIN_COST);
    assert_near(o.d.cost, 2000.0 / 8000);
    assert_near(score_of(&o, 1), 4000.0 / 8000);
    /* class 1 four times faster: (3000 + 1000) / 32000 wins */
    set_rate(r, 1, 32000);
    dry(r, p, 1000, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_near(o.d.cost, 4000.0 / 32000);
    /* a cached prefix lowers this request's uncached part */
    cache_on(r, 0, p, 512);
    dry(r, p, 1000, T0, &o);
    assert_near(score_of(&o, 0), (1000.0 + 488) / 8000);
    assert_int_equal(o.d.instance, 1);
    set_rate(r, 1, 8000);
    dry(r, p, 1000, T0, &o);
    assert_int_equal(o.d.instance, 0);
    assert_int_equal(o.d.cached_tokens, 512);
    /* the queue counts uncached prefill: route p for real (cached 512) */
    lr_request q = req(p, 1000, LR_ROUTE_NO_LEARN, T0);
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_int_equal(o.d.instance, 0);
    assert_int_equal(snap(r, 0).prefill_tokens, 1000 + 488);
    assert_int_equal(snap(r, 0).queued_tokens, 2000);
    dry(r, p, 1000, T0, &o);
    assert_near(score_of(&o, 0), (1488.0 + 488) / 8000);
    /* queue + prefill only: a stalled queue adds nothing (Mooncake) */
    dry(r, p, 1000, T0 + 10 * SEC, &o);
    assert_near(score_of(&o, 0), (1488.0 + 488) / 8000);
    /* a first token leaves the queue */
    assert_st(lr_router_first_token(r, q.id, T0 + SEC), LR_OK);
    dry(r, p, 1000, T0 + SEC, &o);
    assert_near(score_of(&o, 0), (1000.0 + 488) / 8000);
    lr_router_destroy(r);
}

static void
policy_dynamo(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_DYNAMO, 3);
    uint32_t p[320];
    toks(p, 320, 71); /* 20 blocks */
    cache_on(r, 0, p, 160);
    place(r, 1, 100, 60, T0); /* kv 160 tokens: 10 blocks */
    struct dec o;
    dry(r, p, 320, T0, &o);
    /* cost = 1.0 x uncached blocks + in-flight kv blocks */
    assert_near(score_of(&o, 0), 10 + 0);
    assert_near(score_of(&o, 1), 20 + 10);
    assert_near(score_of(&o, 2), 20 + 0);
    assert_int_equal(o.d.instance, 0);
    assert_reason(o.d, LR_REASON_MIN_COST);
    assert_near(o.d.cost, 10);
    uint64_t big = place(r, 0, 200, 56, T0); /* kv 256: 16 blocks */
    dry(r, p, 320, T0, &o);
    assert_near(score_of(&o, 0), 26);
    assert_int_equal(o.d.instance, 2);
    /* overlap weight 2: 20 + 16 < 40 */
    set_param(r, LR_PARAM_DYNAMO_OVERLAP, 2);
    dry(r, p, 320, T0, &o);
    assert_near(score_of(&o, 0), 36);
    assert_near(score_of(&o, 1), 50);
    assert_near(score_of(&o, 2), 40);
    assert_int_equal(o.d.instance, 0);
    set_param(r, LR_PARAM_DYNAMO_OVERLAP, 1);
    /* the kv stays through decode; it leaves at the end */
    assert_st(lr_router_first_token(r, big, T0 + MS), LR_OK);
    dry(r, p, 320, T0, &o);
    assert_near(score_of(&o, 0), 26);
    assert_st(lr_router_complete(r, big, 56, T0 + 2 * MS), LR_OK);
    dry(r, p, 320, T0, &o);
    assert_near(score_of(&o, 0), 10);
    /* blocks round up: 17 tokens + 1 output = 2 blocks */
    place(r, 2, 17, 1, T0);
    dry(r, p, 320, T0, &o);
    assert_near(score_of(&o, 2), 22);

    /* temperature > 0: sampled, every instance reachable, the lower cost
     * more often. Costs 10, 30, 22. */
    set_param(r, LR_PARAM_DYNAMO_TEMPERATURE, 1);
    unsigned count[3] = { 0 };
    for (int i = 0; i < 3000; i++) {
        dry(r, p, 320, T0, &o);
        assert_reason(o.d, LR_REASON_SAMPLED);
        count[o.d.instance]++;
    }
    assert_true(count[0] > 0 && count[1] > 0 && count[2] > 0);
    assert_true(count[0] > count[2]);
    assert_true(count[2] > count[1]);
    /* temperature 0 again: argmin */
    set_param(r, LR_PARAM_DYNAMO_TEMPERATURE, 0);
    for (int i = 0; i < 20; i++) {
        dry(r, p, 320, T0, &o);
        assert_int_equal(o.d.instance, 0);
        assert_reason(o.d, LR_REASON_MIN_COST);
    }
    lr_router_destroy(r);
}

/* ---- dualmap ------------------------------------------------------------------------ */

static void
policy_dualmap_choice(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_DUALMAP, 8);
    static uint32_t p[1024];
    toks(p, 1024, 81);
    struct dec o;
    dry(r, p, 1024, T0, &o);
    uint32_t x = o.d.instance, y = o.d.alt_instance;
    assert_true(x < 8 && y < 8 && x != y);
    assert_reason(o.d, LR_REASON_LEAST_LOADED); /* equal hits (none) */
    /* the pair is a function of the prompt */
    for (int i = 0; i < 20; i++) {
        dry(r, p, 1024, T0, &o);
        assert_true((o.d.instance == x && o.d.alt_instance == y) ||
                    (o.d.instance == y && o.d.alt_instance == x));
    }
    /* equal hits: fewer pending prefill tokens */
    place(r, x, 1000, 0, T0);
    for (int i = 0; i < 5; i++) {
        dry(r, p, 1024, T0, &o);
        assert_int_equal(o.d.instance, y);
        assert_int_equal(o.d.alt_instance, x);
        assert_reason(o.d, LR_REASON_LEAST_LOADED);
    }
    /* a higher hit keeps the more loaded candidate while its expected
     * TTFT meets the SLO */
    cache_on(r, x, p, 512);
    dry(r, p, 1024, T0, &o);
    assert_int_equal(o.d.instance, x);
    assert_int_equal(o.d.alt_instance, y);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 512);
    assert_near(o.d.cost, (1000.0 + 512) / 8000);
    assert_near(score_of(&o, y), 1024.0 / 8000);
    /* past the SLO (5 s x 8000 tok/s): the less loaded, slo-switch */
    place(r, x, 39000, 0, T0);
    dry(r, p, 1024, T0, &o);
    assert_near(score_of(&o, x), (40000.0 + 512) / 8000);
    assert_int_equal(o.d.instance, y);
    assert_int_equal(o.d.alt_instance, x);
    assert_reason(o.d, LR_REASON_SLO_SWITCH);
    assert_near(o.d.cost, 1024.0 / 8000);
    /* a looser SLO keeps the hit */
    set_param(r, LR_PARAM_TTFT_SLO_S, 6);
    dry(r, p, 1024, T0, &o);
    assert_int_equal(o.d.instance, x);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    set_param(r, LR_PARAM_TTFT_SLO_S, 5);
    /* both past the SLO and the hit is also the less loaded: keep it */
    place(r, y, 50000, 0, T0);
    dry(r, p, 1024, T0, &o);
    assert_int_equal(o.d.instance, x);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* a real route records the other candidate */
    lr_request q = req(p, 1024, LR_ROUTE_NO_LEARN, T0);
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_int_equal(o.d.alt_instance, y);
    lr_router_destroy(r);
}

/* Decode bottleneck: a non-empty queue with no first token for 3 s adds
 * the interval to its TTFT estimate, which the SLO choice switches on. */
static void
policy_dualmap_decode_stall(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_DUALMAP, 8);
    static uint32_t p[1024];
    toks(p, 1024, 82);
    struct dec o;
    dry(r, p, 1024, T0, &o);
    uint32_t x = o.d.instance, y = o.d.alt_instance;
    cache_on(r, x, p, 512);
    place(r, x, 100, 0, T0);
    uint64_t second = place(r, x, 100, 0, T0);
    double est = (200.0 + 512) / 8000;
    dry(r, p, 1024, T0 + SEC, &o);
    assert_int_equal(o.d.instance, x);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_near(o.d.cost, est);
    /* 6 s without a prefill: 6 s more, past the SLO */
    dry(r, p, 1024, T0 + 6 * SEC, &o);
    assert_near(score_of(&o, x), est + 6);
    assert_int_equal(o.d.instance, y);
    assert_reason(o.d, LR_REASON_SLO_SWITCH);
    /* a first token at 3.5 s: the queue moved, no stall at 4 s */
    assert_st(lr_router_first_token(r, second, T0 + 3500 * MS), LR_OK);
    dry(r, p, 1024, T0 + 4 * SEC, &o);
    assert_near(score_of(&o, x), (100.0 + 512) / 8000);
    assert_int_equal(o.d.instance, x);
    /* 4 s after that first token: stalled for 4 s, but the estimate
     * (stall included) is under the SLO, so the hit stays: the choice
     * switches on the predicted TTFT alone (a stall only makes it a
     * source for the rebalancing plan) */
    dry(r, p, 1024, T0 + 7500 * MS, &o);
    assert_near(score_of(&o, x), (100.0 + 512) / 8000 + 4.0);
    assert_int_equal(o.d.instance, x);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* 5 s stalled: past the SLO, the switch */
    dry(r, p, 1024, T0 + 8500 * MS, &o);
    assert_near(score_of(&o, x), (100.0 + 512) / 8000 + 5.0);
    assert_int_equal(o.d.instance, y);
    assert_reason(o.d, LR_REASON_SLO_SWITCH);
    lr_router_destroy(r);
}

/* Route `n` requests sharing their first 1024 tokens (the shortest key,
 * two key blocks), each with its own 512-token suffix; return the set of
 * instances chosen from request `from` on. */
static uint64_t
dualmap_shared(lr_router *r, const uint32_t *shared, int n, int from,
               uint32_t flags)
{
    static uint32_t t[1536];
    uint64_t seen = 0;
    for (int i = 0; i < n; i++) {
        memcpy(t, shared, 1024 * sizeof *t);
        toks(t + 1024, 512, next_id + 0x77);
        lr_request q = req(t, 1536, flags, T0 + (uint64_t)i * MS);
        struct dec o;
        assert_st(route_q(r, &q, &o), LR_OK);
        if (i >= from)
            seen |= 1ull << o.d.instance;
        if (!(flags & LR_ROUTE_DRY_RUN))
            assert_st(lr_router_complete(r, q.id, 1, T0 + (uint64_t)i * MS),
                      LR_OK);
    }
    return seen;
}

/* The key starts at two key blocks (DualMap's A.2.1: 2 x 512 tokens):
 * prompts that share their first 1024 tokens share their two candidates;
 * sharing only the first 512 does not tie them to one pair; a prompt
 * shorter than two key blocks is keyed by all its tokens. */
static void
policy_dualmap_key_two_blocks(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_DUALMAP, 8);
    static uint32_t a[1536], b[1536];
    toks(a, 1536, 90);
    struct dec o;
    dry(r, a, 1536, T0, &o);
    uint64_t pair = (1ull << o.d.instance) | (1ull << o.d.alt_instance);
    uint64_t other = 0;
    for (uint64_t i = 0; i < 20; i++) {
        memcpy(b, a, 1536 * sizeof *b);
        toks(b + 1024, 512, 100 + i); /* the same 1024 */
        dry(r, b, 1536, T0, &o);
        assert_true(((1ull << o.d.instance) | (1ull << o.d.alt_instance)) ==
                    pair);
        toks(b + 512, 1024, 200 + i); /* the same 512 only */
        dry(r, b, 1536, T0, &o);
        other |= ((1ull << o.d.instance) | (1ull << o.d.alt_instance)) & ~pair;
        /* 600 tokens: keyed by all of them */
        toks(b + 512, 88, 300 + i);
        dry(r, b, 600, T0, &o);
        other |= ((1ull << o.d.instance) | (1ull << o.d.alt_instance)) & ~pair;
    }
    assert_true(other != 0);
    /* with one key block at most, the first 512 tokens are the key */
    set_param(r, LR_PARAM_DUALMAP_MAX_KEY_BLOCKS, 1);
    dry(r, a, 1536, T0, &o);
    pair = (1ull << o.d.instance) | (1ull << o.d.alt_instance);
    for (uint64_t i = 0; i < 20; i++) {
        toks(b, 1536, 400 + i);
        memcpy(b, a, 512 * sizeof *b);
        dry(r, b, 1536, T0, &o);
        assert_true(((1ull << o.d.instance) | (1ull << o.d.alt_instance)) ==
                    pair);
    }
    lr_router_destroy(r);
}

static void
policy_dualmap_hot_prefix(void **state)
{
    (void)state;
    static uint32_t shared[1024];
    toks(shared, 1024, 83);
    /* hot: the key grows past the shared 1024 tokens, the suffix decides */
    lr_router *r = mk(LR_POLICY_DUALMAP, 8);
    uint64_t seen = dualmap_shared(r, shared, 200, 10, 0);
    assert_true(popcount64(seen) > 2);
    assert_router_ok(r);
    lr_router_destroy(r);
    /* one key block at most: the two candidates of the shared 512 */
    r = mk(LR_POLICY_DUALMAP, 8);
    set_param(r, LR_PARAM_DUALMAP_MAX_KEY_BLOCKS, 1);
    seen = dualmap_shared(r, shared, 200, 0, 0);
    assert_true(popcount64(seen) <= 2);
    lr_router_destroy(r);
    /* dry runs record nothing in the hotness window */
    r = mk(LR_POLICY_DUALMAP, 8);
    seen = dualmap_shared(r, shared, 200, 0, LR_ROUTE_DRY_RUN);
    assert_true(popcount64(seen) <= 2);
    lr_router_destroy(r);
    /* cold again once the prefix leaves the window (16 requests) */
    r = mk(LR_POLICY_DUALMAP, 8);
    set_param(r, LR_PARAM_DUALMAP_WINDOW, 16);
    uint64_t pair;
    struct dec o;
    {
        static uint32_t t[1536];
        memcpy(t, shared, 1024 * sizeof *t);
        toks(t + 1024, 512, 1);
        dry(r, t, 1536, T0, &o);
        pair = (1ull << o.d.instance) | (1ull << o.d.alt_instance);
    }
    dualmap_shared(r, shared, 16, 0, 0);
    seen = dualmap_shared(r, shared, 40, 0, LR_ROUTE_DRY_RUN);
    assert_true(popcount64(seen) > 2);
    static uint32_t other[1536];
    for (int i = 0; i < 16; i++) {
        toks(other, 1536, 5000 + (uint64_t)i);
        lr_request q = req(other, 1536, 0, T0);
        assert_st(route_q(r, &q, &o), LR_OK);
        assert_st(lr_router_complete(r, q.id, 1, T0), LR_OK);
    }
    seen = dualmap_shared(r, shared, 40, 0, LR_ROUTE_DRY_RUN);
    assert_true((seen & ~pair) == 0);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* ---- gorgo ---------------------------------------------------------------------------- */

static void
policy_gorgo_cost(void **state)
{
    (void)state;
    lr_router_options opt;
    lr_router_options_init(&opt);
    opt.policy = LR_POLICY_GORGO;
    opt.max_instances = 8;
    opt.max_requests = 64;
    lr_router *r;
    assert_st(lr_router_create(&opt, &r), LR_OK);
    assert_int_equal(add(r, 0, 0, 279 * MS), 0); /* Frankfurt */
    assert_int_equal(add(r, 1, 0, 37 * MS), 1);  /* local */
    static uint32_t p[1200];
    toks(p, 1200, 91);
    struct dec o;
    /* equal cache: the near one */
    dry(r, p, 1200, T0, &o);
    assert_near(score_of(&o, 0), 0.5 * 279 + 1200);
    assert_near(score_of(&o, 1), 0.5 * 37 + 1200);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_MIN_COST);
    /* a big cache hit beats the RTT */
    cache_on(r, 0, p, 1024);
    dry(r, p, 1200, T0, &o);
    assert_near(score_of(&o, 0), 0.5 * 279 + 176);
    assert_int_equal(o.d.instance, 0);
    assert_int_equal(o.d.cached_tokens, 1024);
    /* queued prompt tokens, not discounted by cache hits, x w_queue */
    assert_int_equal(add(r, 2, 0, 37 * MS), 2);
    uint32_t pre[320];
    toks(pre, 320, 92);
    cache_on(r, 2, pre, 320);
    lr_request q = req(pre, 320, LR_ROUTE_NO_LEARN, T0);
    assert_st(lr_router_drain_instance(r, 0, 1), LR_OK);
    assert_st(lr_router_drain_instance(r, 1, 1), LR_OK);
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_int_equal(o.d.instance, 2);
    assert_int_equal(o.d.cached_tokens, 320);
    assert_st(lr_router_drain_instance(r, 0, 0), LR_OK);
    assert_st(lr_router_drain_instance(r, 1, 0), LR_OK);
    dry(r, p, 1200, T0, &o);
    assert_near(score_of(&o, 2), 0.5 * 37 + 1200 + 0.1 * 320);
    /* RTT probes: the first sets the EWMA, then alpha 0.3 */
    assert_st(lr_router_observe_rtt(r, 1, 100 * MS), LR_OK);
    dry(r, p, 1200, T0, &o);
    assert_near(score_of(&o, 1), 0.5 * 100 + 1200);
    assert_st(lr_router_observe_rtt(r, 1, 200 * MS), LR_OK);
    dry(r, p, 1200, T0, &o);
    assert_near(score_of(&o, 1), 0.5 * 130 + 1200);
    /* weights are parameters */
    set_param(r, LR_PARAM_GORGO_W_RTT, 2);
    set_param(r, LR_PARAM_GORGO_W_QUEUE, 0.5);
    dry(r, p, 1200, T0, &o);
    assert_near(score_of(&o, 0), 2 * 279 + 176.0);
    assert_near(score_of(&o, 2), 2 * 37 + 1200 + 0.5 * 320);
    lr_router_destroy(r);
}

/* Published (FIELD.md, GORGO): queued = prompt tokens dispatched to i and
 * not finished; releasing them at first token is an option. */
static void
policy_gorgo_queue_until_finished(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_GORGO, 2);
    uint64_t id = place(r, 0, 1000, 0, T0);
    uint64_t id2 = place(r, 0, 300, 0, T0);
    uint32_t p[64];
    toks(p, 64, 93);
    struct dec o;
    dry(r, p, 64, T0, &o);
    assert_near(score_of(&o, 0), 64 + 0.1 * 1300);
    /* published default: a request's prompt stays queued until it ends */
    assert_st(lr_router_first_token(r, id, T0 + MS), LR_OK);
    dry(r, p, 64, T0, &o);
    assert_near(score_of(&o, 0), 64 + 0.1 * 1300);
    /* the option releases it at the first token */
    assert_st(lr_router_set_param(r, LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN, 1),
              LR_OK);
    dry(r, p, 64, T0, &o);
    assert_near(score_of(&o, 0), 64 + 0.1 * 300);
    assert_st(lr_router_set_param(r, LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN, 0),
              LR_OK);
    assert_st(lr_router_complete(r, id, 1, T0 + 2 * MS), LR_OK);
    dry(r, p, 64, T0, &o);
    assert_near(score_of(&o, 0), 64 + 0.1 * 300);
    assert_st(lr_router_fail(r, id2, T0 + 3 * MS), LR_OK);
    dry(r, p, 64, T0, &o);
    assert_near(score_of(&o, 0), 64);
    assert_near(score_of(&o, 1), 64);
    assert_st(
        lr_router_set_param(r, LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN, 0.5),
        LR_EINVAL);
    lr_router_destroy(r);
}

struct gw {
    double rtt, queue;
};

/* In-service weights, read from the scores: instance 0 has RTT 1 ms and
 * nothing queued, instance 1 RTT 0 and 1000 queued tokens; the prompt is
 * empty. */
static struct gw
gorgo_in_service(lr_router *r)
{
    struct dec o;
    dry(r, NULL, 0, T0, &o);
    struct gw w = { score_of(&o, 0), score_of(&o, 1) / 1000.0 };
    return w;
}

static struct gw
gorgo_param(lr_router *r)
{
    struct gw w;
    assert_st(lr_router_get_param(r, LR_PARAM_GORGO_W_RTT, &w.rtt), LR_OK);
    assert_st(lr_router_get_param(r, LR_PARAM_GORGO_W_QUEUE, &w.queue), LR_OK);
    return w;
}

/* `n` requests with TTFTs uniform in [lo, hi) seconds. */
static void
gorgo_feed(lr_router *r, int n, double lo, double hi, uint64_t *rs)
{
    static uint64_t now = T0;
    for (int i = 0; i < n; i++) {
        now += MS;
        lr_request q = req(NULL, 0, 0, now);
        struct dec o;
        assert_st(route_q(r, &q, &o), LR_OK);
        double ttft = lo + (hi - lo) * (double)tu_below(rs, 1000000) / 1e6;
        uint64_t ft = now + (uint64_t)(ttft * 1e9);
        assert_st(lr_router_first_token(r, q.id, ft), LR_OK);
        assert_st(lr_router_complete(r, q.id, 10, ft + MS), LR_OK);
    }
}

static bool
in(double v, double lo, double hi)
{
    return v >= lo - 1e-9 && v <= hi + 1e-9;
}

static lr_router *
gorgo_tuner_router(void)
{
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 0);
    assert_int_equal(add(r, 0, 0, 1 * MS), 0);
    assert_int_equal(add(r, 1, 0, 0), 1);
    assert_int_equal(add(r, 2, 0, 0), 2); /* takes the traffic: cost 0 */
    place(r, 1, 1000, 0, T0);
    assert_st(lr_router_set_policy(r, LR_POLICY_GORGO), LR_OK);
    return r;
}

static void
policy_gorgo_tuner(void **state)
{
    (void)state;
    uint64_t rs = tu_seed("router gorgo tuner", 0x6016);
    lr_router *r = gorgo_tuner_router();
    struct gw w = gorgo_in_service(r), p = gorgo_param(r);
    assert_near(w.rtt, 0.5);
    assert_near(w.queue, 0.1);
    assert_near(p.rtt, 0.5);
    assert_near(p.queue, 0.1);
    /* 128 first tokens (the oldest 32 very slow) measure the incumbent;
     * a candidate serves */
    gorgo_feed(r, 32, 9.0, 10.0, &rs);
    gorgo_feed(r, 96, 1.0, 2.0, &rs);
    w = gorgo_in_service(r);
    p = gorgo_param(r);
    assert_true(w.rtt != 0.5 || w.queue != 0.1);
    assert_near(p.rtt, 0.5);
    assert_near(p.queue, 0.1);
    assert_true(in(w.rtt, 0.05, 2.0) && in(w.queue, 0.05, 0.5));
    struct gw cand = w;
    /* one hop of 32 fast ones under the candidate: it is judged then (one
     * step per hop, as GORGO), on a window the very slow ones have left,
     * wins and becomes the tuned value */
    gorgo_feed(r, 31, 0.1, 0.2, &rs);
    w = gorgo_in_service(r);
    assert_true(w.rtt == cand.rtt && w.queue == cand.queue);
    assert_near(gorgo_param(r).rtt, 0.5);
    gorgo_feed(r, 1, 0.1, 0.2, &rs);
    p = gorgo_param(r);
    assert_near(p.rtt, cand.rtt);
    assert_near(p.queue, cand.queue);
    assert_true(p.rtt != 0.5 || p.queue != 0.1);
    lr_router_destroy(r);

    /* bounds: with a big step the weights stay in [0.05, w_rtt_max] and
     * [w_queue_min, 0.5]. TTFTs fall 10% every 32 requests, so every
     * trial beats its incumbent and is accepted. */
    r = gorgo_tuner_router();
    set_param(r, LR_PARAM_GORGO_W_RTT_MAX, 0.6);
    set_param(r, LR_PARAM_GORGO_W_QUEUE_MIN, 0.2);
    set_param(r, LR_PARAM_GORGO_W_QUEUE, 0.3);
    set_param(r, LR_PARAM_GORGO_SIGMA, 4);
    int changed = 0;
    struct gw last = gorgo_param(r);
    double base = 3.0;
    for (int round = 0; round < 40; round++, base *= 0.9) {
        gorgo_feed(r, 32, base, base * 1.05, &rs);
        w = gorgo_in_service(r);
        p = gorgo_param(r);
        assert_true(in(w.rtt, 0.05, 0.6));
        assert_true(in(w.queue, 0.2, 0.5));
        assert_true(in(p.rtt, 0.05, 0.6));
        assert_true(in(p.queue, 0.2, 0.5));
        changed += p.rtt != last.rtt || p.queue != last.queue;
        last = p;
    }
    assert_true(changed > 0);

    /* frozen: the incumbent serves and nothing moves, though the TTFTs
     * keep falling (which the running tuner would accept) */
    set_param(r, LR_PARAM_GORGO_FROZEN, 1);
    struct gw f = gorgo_param(r);
    w = gorgo_in_service(r);
    assert_near(w.rtt, f.rtt);
    assert_near(w.queue, f.queue);
    double sigma0, sigma1;
    assert_st(lr_router_get_param(r, LR_PARAM_GORGO_SIGMA, &sigma0), LR_OK);
    for (int round = 0; round < 12; round++, base *= 0.9)
        gorgo_feed(r, 32, base, base * 1.05, &rs);
    p = gorgo_param(r);
    w = gorgo_in_service(r);
    assert_true(p.rtt == f.rtt && p.queue == f.queue);
    assert_near(w.rtt, f.rtt);
    assert_near(w.queue, f.queue);
    assert_st(lr_router_get_param(r, LR_PARAM_GORGO_SIGMA, &sigma1), LR_OK);
    assert_true(sigma0 == sigma1);

    /* running again with TTFTs rising 10% every 32: every trial loses, the
     * incumbent is restored each time and stays the tuned value */
    set_param(r, LR_PARAM_GORGO_FROZEN, 0);
    base = 0.2;
    for (int round = 0; round < 40; round++, base *= 1.1) {
        gorgo_feed(r, 32, base, base * 1.05, &rs);
        p = gorgo_param(r);
        assert_true(p.rtt == f.rtt && p.queue == f.queue);
        w = gorgo_in_service(r);
        assert_true(in(w.rtt, 0.05, 0.6));
        assert_true(in(w.queue, 0.2, 0.5));
    }
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* ---- ranvier --------------------------------------------------------------------------- */

static void
policy_ranvier(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_RANVIER, 5);
    uint32_t p[512];
    toks(p, 512, 101);
    cache_on(r, 1, p, 256);
    cache_on(r, 2, p, 128);
    struct dec o;
    dry(r, p, 512, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    assert_int_equal(o.d.cached_tokens, 256);
    assert_near(score_of(&o, 1), -256);
    assert_near(score_of(&o, 2), -128);
    /* in flight 2,4,2,2,2: median 2, 4 is not > 2 x 2 */
    for (uint32_t i = 0; i < 5; i++)
        place_n(r, i, i == 1 ? 4 : 2);
    dry(r, p, 512, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    /* 5 > 4: least loaded, load-override */
    place_n(r, 1, 1);
    dry(r, p, 512, T0, &o);
    assert_true(o.d.instance != 1);
    assert_reason(o.d, LR_REASON_LOAD_OVERRIDE);
    assert_int_equal(snap(r, o.d.instance).inflight, 2);
    /* the factor is a parameter; 0 turns the override off */
    set_param(r, LR_PARAM_RANVIER_PRESSURE, 3);
    dry(r, p, 512, T0, &o);
    assert_int_equal(o.d.instance, 1);
    set_param(r, LR_PARAM_RANVIER_PRESSURE, 0);
    place_n(r, 1, 10);
    dry(r, p, 512, T0, &o);
    assert_int_equal(o.d.instance, 1);
    assert_reason(o.d, LR_REASON_PREFIX_HIT);
    lr_router_destroy(r);

    /* miss: bounded-load consistent hash, reason fallback */
    r = mk(LR_POLICY_RANVIER, 5);
    uint32_t m[300];
    toks(m, 300, 102);
    dry(r, m, 300, T0, &o);
    uint32_t h = o.d.instance, a = o.d.alt_instance;
    assert_reason(o.d, LR_REASON_FALLBACK);
    assert_int_equal(o.d.best_cached_tokens, 0);
    assert_st(lr_router_set_policy(r, LR_POLICY_CONSISTENT_HASH), LR_OK);
    dry(r, m, 300, T0, &o);
    assert_int_equal(o.d.instance, h);
    assert_int_equal(o.d.alt_instance, a);
    assert_st(lr_router_set_policy(r, LR_POLICY_RANVIER), LR_OK);
    /* H holds 1 of 1: cap = ceil(1.25 x 2 / 5) = 1: next candidate */
    place_n(r, h, 1);
    dry(r, m, 300, T0, &o);
    assert_int_equal(o.d.instance, a);
    assert_reason(o.d, LR_REASON_FALLBACK);
    lr_router_destroy(r);
}

/* ---- lifecycle ------------------------------------------------------------------------- */

static void
assert_idle(const lr_router *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        lr_load_snapshot s = snap(r, i);
        if (s.inflight || s.queued || s.prefill_tokens || s.queued_tokens ||
            s.decode_tokens || s.kv_tokens || s.prompt_tokens)
            fail_msg("instance %u not idle: inflight %u queued %u prefill "
                     "%llu queued_tokens %llu decode %llu kv %llu prompt %llu",
                     i, s.inflight, s.queued,
                     (unsigned long long)s.prefill_tokens,
                     (unsigned long long)s.queued_tokens,
                     (unsigned long long)s.decode_tokens,
                     (unsigned long long)s.kv_tokens,
                     (unsigned long long)s.prompt_tokens);
    }
    assert_int_equal(rstats(r).inflight, 0);
}

static void
lifecycle_random(void **state)
{
    (void)state;
    uint64_t rs = tu_seed("router lifecycle", 0x11fec7c1e);
    enum {
        N = 600,
        NI = 6
    };
    lr_router *r = mk(LR_POLICY_DUALMAP, NI);
    set_rate(r, 0, 20000);
    set_param(r, LR_PARAM_TTFT_SLO_S, 0.1);
    static uint64_t ids[N];
    static uint8_t st[N]; /* 0 unrouted, 1 in flight, 2 ended */
    memset(st, 0, sizeof st);
    static uint32_t t[2048], pre[8][1024];
    for (int k = 0; k < 8; k++)
        toks(pre[k], 1024, 7000 + (uint64_t)k);
    uint64_t now = T0;
    size_t routed = 0, live = 0, moves = 0;
    while (routed < N || live > 0) {
        now += 1 + tu_below(&rs, 5 * MS);
        if (routed < N && (live == 0 || tu_below(&rs, 3) == 0)) {
            lr_policy pol = supported[tu_below(&rs, N_SUPPORTED)];
            if (tu_below(&rs, 2) == 0)
                pol = LR_POLICY_DUALMAP; /* alternatives for moves */
            assert_st(lr_router_set_policy(r, pol), LR_OK);
            size_t n = tu_below(&rs, 2048);
            uint64_t k = tu_below(&rs, 8);
            size_t shared = n / 2 < 1024 ? n / 2 : 1024;
            memcpy(t, pre[k], shared * sizeof *t);
            toks(t + shared, n - shared, next_id);
            lr_request q =
                req(t, n, tu_below(&rs, 4) ? 0 : LR_ROUTE_NO_LEARN, now);
            q.expected_output_tokens = (uint32_t)tu_below(&rs, 300);
            q.has_session = (int32_t)tu_below(&rs, 2);
            q.session = tu_below(&rs, 10);
            struct dec o;
            assert_st(route_q(r, &q, &o), LR_OK);
            ids[routed] = q.id;
            st[routed] = 1;
            routed++;
            live++;
            continue;
        }
        size_t k = tu_below(&rs, routed);
        while (st[k] != 1)
            k = (k + 1) % routed;
        switch (tu_below(&rs, 7)) {
        case 0:
        case 1:
        case 2: /* repeats are no-ops */
            assert_st(lr_router_first_token(r, ids[k], now), LR_OK);
            break;
        case 3:
        case 4:
            assert_st(lr_router_complete(r, ids[k], 5, now), LR_OK);
            goto ended;
        case 5:
            assert_st(lr_router_fail(r, ids[k], now), LR_OK);
            goto ended;
        default: {
            lr_move mv[8];
            size_t nm = 99;
            assert_st(
                lr_router_rebalance_plan(r, now, mv, 8, sizeof mv[0], &nm),
                LR_OK);
            assert_true(nm <= 8);
            for (size_t i = 0; i < nm; i++) {
                assert_true(mv[i].benefit_s > 0);
                assert_true(mv[i].from != mv[i].to);
                assert_st(lr_router_move(r, mv[i].request_id, mv[i].to), LR_OK);
                moves++;
            }
            assert_router_ok(r);
            break;
        }
        }
        continue;
ended:
        st[k] = 2;
        live--;
        assert_st(lr_router_first_token(r, ids[k], now), LR_ENOENT);
        assert_st(lr_router_complete(r, ids[k], 1, now), LR_ENOENT);
        assert_st(lr_router_fail(r, ids[k], now), LR_ENOENT);
        assert_st(lr_router_move(r, ids[k], 0), LR_ENOENT);
    }
    fprintf(stderr, "# lifecycle: %zu requests, %zu moves\n", routed, moves);
    assert_true(moves > 0);
    assert_idle(r, NI);
    assert_router_ok(r);
    lr_router_stats s = rstats(r);
    assert_int_equal(s.routes, N);
    uint64_t sum = 0;
    for (int i = 0; i < 16; i++)
        sum += s.by_reason[i];
    assert_int_equal(sum, N);
    lr_router_destroy(r);
}

static void
lifecycle_unknown_duplicate(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 2);
    assert_st(lr_router_first_token(r, 77, T0), LR_ENOENT);
    assert_st(lr_router_complete(r, 77, 1, T0), LR_ENOENT);
    assert_st(lr_router_fail(r, 77, T0), LR_ENOENT);
    assert_st(lr_router_move(r, 77, 1), LR_ENOENT);
    uint32_t t[64];
    toks(t, 64, 1);
    lr_request q = req(t, 64, 0, T0);
    struct dec o;
    assert_st(route_q(r, &q, &o), LR_OK);
    uint64_t before = lr__router_digest(r);
    lr_router_stats s0 = rstats(r);
    assert_st(route_q(r, &q, &o), LR_EEXIST);
    assert_true(lr__router_digest(r) == before);
    assert_int_equal(rstats(r).routes, s0.routes);
    /* asking about an id in flight is fine */
    q.flags = LR_ROUTE_DRY_RUN;
    assert_st(route_q(r, &q, &o), LR_OK);
    q.flags = 0;
    assert_st(lr_router_first_token(r, q.id, T0 + 1), LR_OK);
    assert_st(lr_router_first_token(r, q.id, T0 + 2), LR_OK);
    assert_st(lr_router_complete(r, q.id, 3, T0 + 3), LR_OK);
    assert_st(lr_router_complete(r, q.id, 3, T0 + 3), LR_ENOENT);
    /* ended: the id may be used again */
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_st(lr_router_fail(r, q.id, T0 + 4), LR_OK);
    assert_idle(r, 2);
    assert_st(lr_router_first_token(NULL, 1, T0), LR_EINVAL);
    assert_st(lr_router_complete(NULL, 1, 1, T0), LR_EINVAL);
    assert_st(lr_router_fail(NULL, 1, T0), LR_EINVAL);
    lr_router_destroy(r);
}

static bool
same_loads(const lr_router *r, uint32_t n, const lr_load_snapshot *a)
{
    for (uint32_t i = 0; i < n; i++) {
        lr_load_snapshot s = snap(r, i);
        if (!tu_same_load(&s, &a[i]))
            return false;
    }
    return true;
}

static void
lifecycle_dry_run(void **state)
{
    (void)state;
    for (size_t pi = 0; pi < N_SUPPORTED; pi++) {
        lr_router *r = mk(supported[pi], 4);
        /* some state first */
        static uint32_t t[600];
        for (uint64_t i = 0; i < 6; i++) {
            toks(t, 600, 200 + i % 3);
            t[500] = (uint32_t)i;
            lr_request q = req(t, 600, 0, T0);
            struct dec o;
            assert_st(route_q(r, &q, &o), LR_OK);
        }
        lr_load_snapshot l0[4];
        for (uint32_t i = 0; i < 4; i++)
            l0[i] = snap(r, i);
        lr_router_stats s0 = rstats(r);
        toks(t, 600, 999);
        struct dec o, o2;
        for (int k = 0; k < 3; k++) {
            dry(r, t, 600, T0 + SEC, &o);
            assert_int_equal(o.d.cached_tokens, 0);
            assert_int_equal(o.d.best_cached_tokens, 0); /* not learned */
            assert_int_equal(o.d.n_scores, 4);
        }
        lr_router_stats s1 = rstats(r);
        assert_int_equal(s1.dry_runs, s0.dry_runs + 3);
        s1.dry_runs = s0.dry_runs;
        assert_memory_equal(&s0, &s1, sizeof s0);
        assert_true(same_loads(r, 4, l0));
        /* a real route of the same prompt now learns it */
        lr_request q = req(t, 600, 0, T0 + SEC);
        assert_st(route_q(r, &q, &o2), LR_OK);
        assert_int_equal(rstats(r).routes, s0.routes + 1);
        dry(r, t, 600, T0 + SEC, &o);
        if (supported[pi] >= LR_POLICY_PREFIX_CACHE)
            assert_int_equal(o.d.best_cached_tokens, 592);
        assert_router_ok(r);
        lr_router_destroy(r);
    }
}

static void
lifecycle_remove_instance(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_PREFIX_CACHE, 3);
    uint32_t p[128];
    toks(p, 128, 301);
    cache_on(r, 1, p, 128);
    uint64_t a = place(r, 1, 100, 0, T0);
    uint64_t b = place(r, 1, 50, 0, T0);
    uint64_t c = place(r, 2, 10, 0, T0);
    assert_st(lr_router_first_token(r, b, T0 + 1), LR_OK);
    assert_int_equal(rstats(r).inflight, 3);
    assert_st(lr_router_remove_instance(r, 1), LR_OK);
    assert_int_equal(lr_router_instance_count(r), 2);
    assert_int_equal(rstats(r).inflight, 1);
    assert_int_equal(rstats(r).instances, 2);
    assert_st(lr_router_first_token(r, a, T0 + 2), LR_ENOENT);
    assert_st(lr_router_complete(r, b, 1, T0 + 2), LR_ENOENT);
    assert_st(lr_router_fail(r, a, T0 + 2), LR_ENOENT);
    lr_load_snapshot s;
    lr_load_snapshot_init(&s);
    assert_st(lr_router_instance_load(r, 1, &s), LR_ENOENT);
    assert_st(lr_router_remove_instance(r, 1), LR_ENOENT);
    assert_st(lr_router_drain_instance(r, 1, 1), LR_ENOENT);
    uint32_t id;
    assert_st(lr_router_find_instance(r, "10.0.0.1:8000", &id), LR_ENOENT);
    /* its routes went with it */
    struct dec o;
    dry(r, p, 128, T0, &o);
    assert_int_equal(o.d.best_cached_tokens, 0);
    assert_true(o.d.instance != 1);
    assert_int_equal(o.d.n_scores, 2);
    /* the id comes back for a new instance, empty */
    assert_int_equal(add(r, 7, 0, 0), 1);
    assert_st(lr_router_find_instance(r, "10.0.0.7:8000", &id), LR_OK);
    assert_int_equal(id, 1);
    s = snap(r, 1);
    assert_int_equal(s.inflight, 0);
    dry(r, p, 128, T0, &o);
    assert_int_equal(o.d.best_cached_tokens, 0);
    assert_st(lr_router_complete(r, c, 1, T0 + 3), LR_OK);
    assert_idle(r, 3);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* Instance ids under churn, against a model: an add takes the lowest id
 * no live instance holds, a removal frees its id, and the routable ids
 * (lr_router_candidates' rows) are the live, undrained ones ascending.
 * 4200 ids span two words of the router's free-id summary and end in a
 * partial word; the router is filled to its maximum, thinned and refilled,
 * and a restore of its snapshot must give the same ids and go on the same
 * way. */
#define IDS_MAX 4200u

struct id_model {
    uint32_t name[IDS_MAX]; /* the name number an id holds */
    uint8_t live[IDS_MAX];
    uint8_t draining[IDS_MAX];
    uint32_t n_live;
    uint32_t next_name;
};

static lr_status
ids_add_name(lr_router *r, uint32_t name, uint32_t *id)
{
    char nm[32];
    snprintf(nm, sizeof nm, "10.%u.%u.%u:8000", name / 40000, name / 200 % 200,
             name % 200);
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = nm;
    return lr_router_add_instance(r, &s, id);
}

static void
ids_add(lr_router *r, struct id_model *m)
{
    uint32_t want = 0;
    while (want < IDS_MAX && m->live[want])
        want++;
    uint32_t id = LR_INSTANCE_NONE;
    if (want == IDS_MAX) {
        assert_st(ids_add_name(r, m->next_name++, &id), LR_ELIMIT);
        return;
    }
    assert_st(ids_add_name(r, m->next_name, &id), LR_OK);
    assert_int_equal(id, want);
    m->name[id] = m->next_name++;
    m->live[id] = 1;
    m->draining[id] = 0;
    m->n_live++;
}

/* A live id picked at random (the model holds at least one). */
static uint32_t
ids_pick(const struct id_model *m, uint64_t *rs)
{
    uint32_t id = (uint32_t)tu_below(rs, IDS_MAX);
    while (!m->live[id])
        id = (id + 1) % IDS_MAX;
    return id;
}

static void
ids_check(lr_router *r, const struct id_model *m)
{
    static lr_candidate rows[IDS_MAX];
    static uint32_t want[IDS_MAX];
    uint32_t n_want = 0;
    for (uint32_t id = 0; id < IDS_MAX; id++)
        if (m->live[id] && !m->draining[id])
            want[n_want++] = id;
    lr_router_stats st = rstats(r);
    assert_int_equal(st.instances, m->n_live);
    assert_int_equal(st.routable, n_want);
    lr_request q;
    lr_request_init(&q);
    q.now_ns = T0;
    size_t n_rows = 0;
    assert_st(
        lr_router_candidates(r, &q, rows, IDS_MAX, sizeof rows[0], &n_rows),
        n_want > 0 ? LR_OK : LR_ESTATE);
    assert_int_equal(n_rows, n_want);
    for (uint32_t k = 0; k < n_want; k++)
        assert_int_equal(rows[k].instance, want[k]);
    for (uint32_t id = 0; id < IDS_MAX; id += 97) {
        if (!m->live[id])
            continue;
        char nm[32];
        snprintf(nm, sizeof nm, "10.%u.%u.%u:8000", m->name[id] / 40000,
                 m->name[id] / 200 % 200, m->name[id] % 200);
        uint32_t got = LR_INSTANCE_NONE;
        assert_st(lr_router_find_instance(r, nm, &got), LR_OK);
        assert_int_equal(got, id);
    }
    assert_router_ok(r);
}

/* n random steps: adds (the lowest free id), removals and drains. */
static void
ids_churn(lr_router *r, struct id_model *m, uint64_t *rs, uint32_t n,
          uint32_t add_pct)
{
    for (uint32_t k = 0; k < n; k++) {
        uint64_t x = tu_below(rs, 100);
        if (m->n_live == 0 || x < add_pct) {
            ids_add(r, m);
        } else if (x < add_pct + (100 - add_pct) * 3 / 4) {
            uint32_t id = ids_pick(m, rs);
            assert_st(lr_router_remove_instance(r, id), LR_OK);
            m->live[id] = 0;
            m->n_live--;
        } else {
            uint32_t id = ids_pick(m, rs);
            uint8_t d = !m->draining[id];
            assert_st(lr_router_drain_instance(r, id, d), LR_OK);
            m->draining[id] = d;
        }
    }
}

static lr_router *
ids_router(void)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.seed = OPT_SEED;
    o.max_instances = IDS_MAX;
    o.ring_vnodes = 4;
    o.index_capacity_blocks = 1024;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    return r;
}

static void
lifecycle_id_reuse(void **state)
{
    (void)state;
    static struct id_model m;
    memset(&m, 0, sizeof m);
    uint64_t rs = tu_seed("lifecycle_id_reuse", 0x1d5e);
    lr_router *r = ids_router();
    /* low ids freed and taken again while the router is small */
    ids_churn(r, &m, &rs, 600, 55);
    ids_check(r, &m);
    /* to the maximum, where an add is refused */
    while (m.n_live < IDS_MAX)
        ids_add(r, &m);
    ids_add(r, &m);
    ids_check(r, &m);
    /* at the maximum: every freed id, in both summary words and the
     * partial last word, is the next add's */
    static const uint32_t holes[] = { 4199, 4096, 4095, 64, 63, 0 };
    for (size_t h = 0; h < sizeof holes / sizeof holes[0]; h++) {
        assert_st(lr_router_remove_instance(r, holes[h]), LR_OK);
        m.live[holes[h]] = 0;
        m.n_live--;
    }
    ids_check(r, &m);
    while (m.n_live < IDS_MAX)
        ids_add(r, &m);
    /* thinned at random, then churned near the maximum */
    ids_churn(r, &m, &rs, 3000, 10);
    ids_check(r, &m);
    ids_churn(r, &m, &rs, 4000, 60);
    ids_check(r, &m);
    /* a restore holds the same ids, routable and free alike */
    lr_blob *b = NULL;
    assert_st(lr_router_snapshot(r, T0, &b), LR_OK);
    lr_router *r2 = ids_router();
    assert_st(lr_router_restore(r2, lr_blob_data(b), lr_blob_size(b), T0),
              LR_OK);
    lr_blob_destroy(b);
    ids_check(r2, &m);
    uint64_t rs2 = rs;
    struct id_model m2 = m;
    ids_churn(r, &m, &rs, 1500, 50);
    ids_churn(r2, &m2, &rs2, 1500, 50);
    ids_check(r, &m);
    ids_check(r2, &m2);
    lr_router_destroy(r2);
    lr_router_destroy(r);
}

static void
lifecycle_draining(void **state)
{
    (void)state;
    for (size_t pi = 0; pi < N_SUPPORTED; pi++) {
        lr_router *r = mk(supported[pi], 3);
        uint64_t a = place(r, 1, 100, 0, T0);
        uint64_t b = place(r, 1, 100, 0, T0);
        assert_st(lr_router_drain_instance(r, 1, 1), LR_OK);
        assert_st(lr_router_drain_instance(r, 1, 1), LR_OK); /* repeat */
        assert_int_equal(rstats(r).routable, 2);
        assert_int_equal(rstats(r).instances, 3);
        static uint32_t t[256];
        for (uint64_t i = 0; i < 40; i++) {
            toks(t, 256, 400 + i);
            lr_request q = req(t, 256, LR_ROUTE_SCORES, T0 + i);
            q.has_session = 1;
            q.session = i;
            struct dec o;
            assert_st(route_q(r, &q, &o), LR_OK);
            assert_true(o.d.instance != 1);
            assert_true(o.d.alt_instance != 1);
            assert_int_equal(o.d.n_scores, 2);
            assert_st(lr_router_complete(r, q.id, 1, T0 + i), LR_OK);
        }
        /* in-flight events on the draining instance still work */
        assert_st(lr_router_first_token(r, a, T0 + SEC), LR_OK);
        assert_st(lr_router_complete(r, a, 1, T0 + SEC), LR_OK);
        assert_st(lr_router_fail(r, b, T0 + SEC), LR_OK);
        /* nothing routable */
        assert_st(lr_router_drain_instance(r, 0, 1), LR_OK);
        assert_st(lr_router_drain_instance(r, 2, 1), LR_OK);
        uint64_t before = lr__router_digest(r);
        lr_request q = req(t, 256, 0, T0);
        struct dec o;
        assert_st(route_q(r, &q, &o), LR_ESTATE);
        q.flags = LR_ROUTE_DRY_RUN;
        assert_st(route_q(r, &q, &o), LR_ESTATE);
        assert_true(lr__router_digest(r) == before);
        assert_st(lr_router_drain_instance(r, 2, 0), LR_OK);
        q.flags = 0;
        assert_st(route_q(r, &q, &o), LR_OK);
        assert_int_equal(o.d.instance, 2);
        assert_st(lr_router_complete(r, q.id, 1, T0), LR_OK);
        assert_st(lr_router_drain_instance(r, 0, 2), LR_EINVAL);
        assert_st(lr_router_drain_instance(r, 9, 1), LR_ENOENT);
        assert_idle(r, 3);
        assert_router_ok(r);
        lr_router_destroy(r);
    }
    /* no instance at all */
    lr_router *r = mk(LR_POLICY_RANDOM, 0);
    lr_request q = req(NULL, 0, 0, T0);
    struct dec o;
    assert_st(route_q(r, &q, &o), LR_ESTATE);
    lr_router_destroy(r);
}

static void
lifecycle_scores_buffer(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_DYNAMO, 3);
    uint32_t t[64];
    toks(t, 64, 501);
    uint64_t before = lr__router_digest(r);
    lr_router_stats s0 = rstats(r);
    lr_score sc[2];
    lr_request q = req(t, 64, LR_ROUTE_SCORES, T0);
    lr_decision d;
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = 2;
    assert_st(lr_router_route(r, &q, &d), LR_EBUFSIZE);
    assert_int_equal(d.n_scores, 3);
    assert_true(lr__router_digest(r) == before);
    lr_router_stats s1 = rstats(r);
    assert_memory_equal(&s0, &s1, sizeof s0);
    assert_idle(r, 3);
    q.flags = LR_ROUTE_SCORES | LR_ROUTE_DRY_RUN;
    assert_st(lr_router_route(r, &q, &d), LR_EBUFSIZE);
    assert_int_equal(d.n_scores, 3);
    /* capacity enough but no buffer */
    d.scores = NULL;
    d.scores_capacity = 3;
    assert_st(lr_router_route(r, &q, &d), LR_EINVAL);
    /* without LR_ROUTE_SCORES a short buffer is fine */
    d.scores = sc;
    d.scores_capacity = 2;
    q.flags = 0;
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.n_scores, 0);
    lr_router_destroy(r);
}

static void
lifecycle_bad_input(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_PREFIX_CACHE_AND_LOAD, 3);
    static uint32_t t[256];
    toks(t, 256, 601);
    lr_request ok = req(t, 256, 0, T0);
    struct dec o;
    assert_st(route_q(r, &ok, &o), LR_OK);
    uint64_t before = lr__router_digest(r);
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_router_route(NULL, &ok, &d), LR_EINVAL);
    assert_st(lr_router_route(r, NULL, &d), LR_EINVAL);
    assert_st(lr_router_route(r, &ok, NULL), LR_EINVAL);
    uint32_t bnd_desc[2] = { 128, 64 };
    uint32_t bnd_far[1] = { 257 };
    uint32_t bnd_ok[2] = { 64, 64 };
    for (int c = 0; c < 9; c++) {
        lr_request q = req(t, 256, 0, T0);
        lr_status want = LR_EINVAL;
        switch (c) {
        case 0:
            q.n_tokens = (size_t)LR_INDEX_MAX_TOKENS + 1;
            break;
        case 1:
            q.tokens = NULL;
            break;
        case 2:
            q.boundaries = bnd_desc;
            q.n_boundaries = 2;
            break;
        case 3:
            q.boundaries = bnd_far;
            q.n_boundaries = 1;
            break;
        case 4:
            q.boundaries = NULL;
            q.n_boundaries = 1;
            break;
        case 5:
            q.flags = 32; /* no such flag */
            break;
        case 6:
            q.flags = 0x80000000u | LR_ROUTE_DRY_RUN;
            break;
        case 7:
            q.has_session = 2;
            break;
        case 8:
            q.struct_size = offsetof(lr_request, now_ns);
            want = LR_EVERSION;
            break;
        }
        assert_st(route_q(r, &q, &o), want);
        assert_true(lr__router_digest(r) == before);
    }
    lr_request q = req(t, 256, 0, T0);
    lr_decision_init(&d);
    d.struct_size = offsetof(lr_decision, n_scores);
    assert_st(lr_router_route(r, &q, &d), LR_EVERSION);
    assert_true(lr__router_digest(r) == before);
    /* equal boundaries are ascending enough */
    q.boundaries = bnd_ok;
    q.n_boundaries = 2;
    assert_st(route_q(r, &q, &o), LR_OK);
    assert_router_ok(r);
    before = lr__router_digest(r);
    /* other entry points */
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    uint32_t id;
    assert_st(lr_router_add_instance(r, &s, &id), LR_EINVAL); /* no name */
    s.name = "10.0.0.0:8000";
    assert_st(lr_router_add_instance(r, &s, &id), LR_EEXIST);
    s.name = "x";
    s.instance_class = LR_LOAD_MAX_CLASSES;
    assert_st(lr_router_add_instance(r, &s, &id), LR_EINVAL);
    s.instance_class = 0;
    s.prefix_caching = 2;
    assert_st(lr_router_add_instance(r, &s, &id), LR_EINVAL);
    s.prefix_caching = 1;
    s.rtt_ns = LR_LOAD_MAX_RTT_NS + 1;
    assert_st(lr_router_add_instance(r, &s, &id), LR_ERANGE);
    lr_class_spec c;
    lr_class_spec_init(&c);
    c.prefill_tokens_per_s = 0.5;
    assert_st(lr_router_set_class(r, 0, &c), LR_ERANGE);
    c.prefill_tokens_per_s = NAN;
    assert_st(lr_router_set_class(r, 0, &c), LR_EINVAL);
    c.prefill_tokens_per_s = 100;
    assert_st(lr_router_set_class(r, LR_LOAD_MAX_CLASSES, &c), LR_EINVAL);
    assert_true(lr__router_digest(r) == before);
    lr_router_destroy(r);
}

static void
params(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_DUALMAP, 2);
    for (int k = 0; k < (int)lr_param_count(); k++) {
        lr_bounds b = lr_param_bounds((lr_param)k);
        assert_st(b.status, LR_OK);
        assert_true(b.lo <= b.def && b.def <= b.hi);
        double v;
        assert_st(lr_router_get_param(r, (lr_param)k, &v), LR_OK);
        assert_near(v, b.def);
        uint64_t before = lr__router_digest(r);
        assert_st(
            lr_router_set_param(r, (lr_param)k, nextafter(b.lo, -INFINITY)),
            LR_ERANGE);
        assert_st(lr_router_set_param(r, (lr_param)k, b.lo - 1), LR_ERANGE);
        assert_st(
            lr_router_set_param(r, (lr_param)k, nextafter(b.hi, INFINITY)),
            LR_ERANGE);
        assert_st(lr_router_set_param(r, (lr_param)k, INFINITY), LR_ERANGE);
        assert_st(lr_router_set_param(r, (lr_param)k, NAN), LR_EINVAL);
        assert_true(lr__router_digest(r) == before);
        assert_st(lr_router_get_param(r, (lr_param)k, &v), LR_OK);
        assert_near(v, b.def);
        /* the bounds themselves are accepted and read back */
        assert_st(lr_router_set_param(r, (lr_param)k, b.lo), LR_OK);
        assert_st(lr_router_get_param(r, (lr_param)k, &v), LR_OK);
        assert_true(v == b.lo);
        assert_st(lr_router_set_param(r, (lr_param)k, b.hi), LR_OK);
        assert_st(lr_router_get_param(r, (lr_param)k, &v), LR_OK);
        assert_true(v == b.hi);
        double mid = b.lo + (b.hi - b.lo) / 3;
        mid = floor(mid); /* integer keys want integers */
        if (mid < b.lo)
            mid = b.lo;
        assert_st(lr_router_set_param(r, (lr_param)k, mid), LR_OK);
        assert_st(lr_router_get_param(r, (lr_param)k, &v), LR_OK);
        assert_true(v == mid);
        assert_st(lr_router_set_param(r, (lr_param)k, b.def), LR_OK);
        assert_router_ok(r);
    }
    /* integer keys refuse fractions */
    uint64_t before = lr__router_digest(r);
    assert_st(lr_router_set_param(r, LR_PARAM_DUALMAP_WINDOW, 100.5),
              LR_EINVAL);
    assert_st(lr_router_set_param(r, LR_PARAM_GORGO_FROZEN, 0.5), LR_EINVAL);
    assert_true(lr__router_digest(r) == before);
    /* unknown keys */
    lr_bounds b = lr_param_bounds((int32_t)lr_param_count());
    assert_st(b.status, LR_ENOTSUP);
    b = lr_param_bounds(-1);
    assert_st(b.status, LR_ENOTSUP);
    double v;
    assert_st(lr_router_set_param(r, (int32_t)lr_param_count(), 1), LR_ENOTSUP);
    assert_st(lr_router_set_param(r, -1, 1), LR_ENOTSUP);
    assert_st(lr_router_get_param(r, (int32_t)lr_param_count(), &v),
              LR_ENOTSUP);
    assert_st(lr_router_set_param(NULL, LR_PARAM_BOUNDED_LOAD, 2), LR_EINVAL);
    assert_st(lr_router_get_param(NULL, LR_PARAM_BOUNDED_LOAD, &v), LR_EINVAL);
    assert_st(lr_router_get_param(r, LR_PARAM_BOUNDED_LOAD, NULL), LR_EINVAL);
    assert_true(lr__router_digest(r) == before);
    /* the published defaults */
    static const struct {
        lr_param k;
        double def;
    } pub[] = {
        { LR_PARAM_BOUNDED_LOAD, 1.25 },
        { LR_PARAM_AIBRIX_IMBALANCE, 8 },
        { LR_PARAM_AIBRIX_STDDEV, 1 },
        { LR_PARAM_SGLANG_ABS, 64 },
        { LR_PARAM_SGLANG_REL, 1.5 },
        { LR_PARAM_SGLANG_MIN_RATIO, 0.3 },
        { LR_PARAM_PREBLE_HIT, 0.5 },
        { LR_PARAM_DYNAMO_OVERLAP, 1 },
        { LR_PARAM_DYNAMO_TEMPERATURE, 0 },
        { LR_PARAM_TTFT_SLO_S, 5 },
        { LR_PARAM_DUALMAP_KEY_TOKENS, 512 },
        { LR_PARAM_GORGO_W_RTT, 0.5 },
        { LR_PARAM_GORGO_W_QUEUE, 0.1 },
        { LR_PARAM_GORGO_SIGMA, 0.5 },
        { LR_PARAM_GORGO_W_RTT_MAX, 2.0 },
        { LR_PARAM_GORGO_W_QUEUE_MIN, 0.05 },
        { LR_PARAM_RANVIER_PRESSURE, 2 },
        { LR_PARAM_SESSION_TOKENS, 256 },
    };
    for (size_t i = 0; i < sizeof pub / sizeof pub[0]; i++)
        assert_near(lr_param_bounds(pub[i].k).def, pub[i].def);
    lr_router_destroy(r);
}

static void
policy_names(void **state)
{
    (void)state;
    for (int p = 0; p < (int)lr_policy_count(); p++) {
        const char *name = lr_policy_name((lr_policy)p);
        assert_non_null(name);
        int32_t back = -1;
        assert_st(lr_policy_from_name(name, &back), LR_OK);
        assert_int_equal(back, p);
        for (int q = 0; q < p; q++)
            assert_string_not_equal(name, lr_policy_name((lr_policy)q));
    }
    assert_string_equal(lr_policy_name(LR_POLICY_PREFIX_CACHE_AND_LOAD),
                        "prefix-cache-and-load");
    assert_string_equal(lr_policy_name(LR_POLICY_LODESTAR), "lodestar");
    assert_null(lr_policy_name((int32_t)lr_policy_count()));
    assert_null(lr_policy_name(-1));
    int32_t p;
    assert_st(lr_policy_from_name("nope", &p), LR_ENOENT);
    assert_st(lr_policy_from_name("Random", &p), LR_ENOENT);
    assert_st(lr_policy_from_name(NULL, &p), LR_EINVAL);
    assert_st(lr_policy_from_name("random", NULL), LR_EINVAL);
    for (int k = 0; k < 19; k++)
        assert_non_null(lr_reason_name((lr_reason)k));
    assert_string_equal(lr_reason_name(LR_REASON_SLO_SWITCH), "slo-switch");
    assert_string_equal(lr_reason_name(LR_REASON_WAITING), "waiting");
    assert_string_equal(lr_reason_name(LR_REASON_ADAPTER), "adapter");
    assert_string_equal(lr_reason_name(LR_REASON_WHOLE), "whole");
    assert_null(lr_reason_name((lr_reason)19));

    lr_router *r = mk(LR_POLICY_RANDOM, 1);
    for (size_t i = 0; i < N_SUPPORTED; i++) {
        assert_st(lr_router_set_policy(r, supported[i]), LR_OK);
        assert_int_equal(lr_router_policy(r), supported[i]);
    }
    uint64_t before = lr__router_digest(r);
    assert_st(lr_router_set_policy(r, (lr_policy)(int)lr_policy_count()),
              LR_EINVAL);
    assert_st(lr_router_set_policy(NULL, LR_POLICY_RANDOM), LR_EINVAL);
    assert_true(lr__router_digest(r) == before);
    assert_int_equal(lr_router_policy(r), LR_POLICY_ADAPTIVE);
    assert_int_equal(lr_router_policy(NULL), -1);
    lr_router_destroy(r);
    lr_router_options o;
    lr_router_options_init(&o);
    assert_int_equal(o.policy, LR_POLICY_PREFIX_CACHE_AND_LOAD);
    o.policy = LR_POLICY_LODESTAR;
    assert_st(lr_router_create(&o, &r), LR_OK);
    assert_int_equal(lr_router_policy(r), LR_POLICY_LODESTAR);
    lr_router_destroy(r);
    o.policy = (int)lr_policy_count();
    r = (lr_router *)&o;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    assert_st(lr_router_create(NULL, NULL), LR_EINVAL);
    assert_st(lr_router_create(NULL, &r), LR_OK);
    assert_int_equal(lr_router_policy(r), LR_POLICY_PREFIX_CACHE_AND_LOAD);
    lr_router_destroy(r);
    lr_router_destroy(NULL);
}

/* ---- rebalancing ------------------------------------------------------------------------ */

/* Two instances under dualmap; 0 holds a 512-token prefix; `n` requests of
 * that prefix plus their own 512 tokens go to 0 (the hit) with 1 as their
 * other candidate. */
static lr_router *
rebalance_setup(uint64_t *ids, int n)
{
    lr_router *r = mk(LR_POLICY_DUALMAP, 2);
    static uint32_t t[1024];
    toks(t, 512, 701);
    cache_on(r, 0, t, 512);
    for (int i = 0; i < n; i++) {
        toks(t + 512, 512, 800 + (uint64_t)i);
        lr_request q = req(t, 1024, LR_ROUTE_NO_LEARN, T0 + (uint64_t)i * MS);
        struct dec o;
        assert_st(route_q(r, &q, &o), LR_OK);
        assert_int_equal(o.d.instance, 0);
        assert_int_equal(o.d.alt_instance, 1);
        assert_reason(o.d, LR_REASON_PREFIX_HIT);
        ids[i] = q.id;
    }
    return r;
}

/* A peer's delta naming instance ids this router does not have: those
 * routes are skipped and take no index slot (they used to, until routes
 * failed with LR_ELIMIT); the known ids' routes are used; an instance
 * added afterwards starts cold. */
static void
delta_foreign_ids(void **state)
{
    (void)state;
    lr_router *a = mk(LR_POLICY_ROUND_ROBIN, 6);
    static uint32_t t[6][512];
    uint32_t on[6];
    struct dec o;
    for (uint32_t i = 0; i < 6; i++) {
        toks(t[i], 512, 900 + i);
        lr_request q = req(t[i], 512, 0, T0);
        assert_st(route_q(a, &q, &o), LR_OK);
        on[i] = o.d.instance;
    }
    lr_blob *blob = NULL;
    assert_st(lr_router_export_delta(a, 0, &blob, NULL), LR_OK);

    lr_router_options opt;
    lr_router_options_init(&opt);
    opt.policy = LR_POLICY_PREFIX_CACHE;
    opt.max_instances = 3; /* fewer slots than the peer has ids */
    lr_router *b = NULL;
    assert_st(lr_router_create(&opt, &b), LR_OK);
    add(b, 0, 0, 0);
    add(b, 1, 0, 0);
    assert_st(lr_router_import_delta(b, lr_blob_data(blob), lr_blob_size(blob),
                                     T0 + MS),
              LR_OK);
    add(b, 2, 0, 0);
    for (uint32_t i = 0; i < 6; i++) {
        dry(b, t[i], 512, T0 + 2 * MS, &o);
        for (size_t k = 0; k < o.d.n_scores; k++) {
            uint32_t want = o.sc[k].instance == on[i] && on[i] < 2 ? 512 : 0;
            assert_int_equal(o.sc[k].cached_tokens, want);
        }
    }
    /* every instance can still learn: the index has its slots */
    for (uint32_t i = 0; i < 30; i++) {
        uint32_t u[64];
        toks(u, 64, 5000 + i);
        lr_request q = req(u, 64, 0, T0 + 3 * MS);
        assert_st(route_q(b, &q, &o), LR_OK);
    }
    assert_st(lr__router_verify(b), LR_OK);
    lr_blob_destroy(blob);
    lr_router_destroy(b);
    lr_router_destroy(a);
}

/* route() expires first and keeps the expiry when it fails: a route
 * refused for a full request table changes nothing, a valid one drops the
 * stale routes exactly as lr_router_expire() does. */
static void
route_expires_first(void **state)
{
    (void)state;
    lr_router_options opt;
    lr_router_options_init(&opt);
    opt.policy = LR_POLICY_PREFIX_CACHE;
    opt.index_ttl_ns = 10 * SEC;
    opt.max_requests = 1;
    lr_router *r = NULL;
    assert_st(lr_router_create(&opt, &r), LR_OK);
    add(r, 0, 0, 0);
    add(r, 1, 0, 0);
    static uint32_t t[256];
    toks(t, 256, 77);
    struct dec o;
    lr_request q = req(t, 256, 0, T0);
    assert_st(route_q(r, &q, &o), LR_OK);
    uint32_t first = o.d.instance;
    /* table full: refused before anything, even long after the TTL */
    uint64_t d0 = lr__router_digest(r);
    lr_request q2 = req(t, 256, 0, T0 + 60 * SEC);
    assert_st(route_q(r, &q2, &o), LR_ELIMIT);
    assert_true(lr__router_digest(r) == d0);
    dry(r, t, 256, T0 + 5 * SEC, &o);
    assert_int_equal(o.sc[first].cached_tokens, 256);
    /* expiry on its own equals what route() does before choosing */
    assert_st(lr_router_expire(r, T0 + 60 * SEC), LR_OK);
    dry(r, t, 256, T0 + 60 * SEC, &o);
    assert_int_equal(o.d.best_cached_tokens, 0);
    assert_st(lr_router_expire(NULL, 0), LR_EINVAL);
    assert_st(lr__router_verify(r), LR_OK);
    lr_router_destroy(r);
}

/* lr_router_index_stats() is the router's index counters: learned,
 * evicted for capacity and expired blocks add up to what is held. */
static void
index_stats(void **state)
{
    (void)state;
    lr_router_options opt;
    lr_router_options_init(&opt);
    opt.policy = LR_POLICY_ROUND_ROBIN;
    opt.index_capacity_blocks = 64;
    opt.index_ttl_ns = 10 * SEC;
    lr_router *r = NULL;
    assert_st(lr_router_create(&opt, &r), LR_OK);
    add(r, 0, 0, 0);
    add(r, 1, 0, 0);
    lr_index_stats s;
    memset(&s, 0xff, sizeof s);
    s.struct_size = sizeof s;
    assert_st(lr_router_index_stats(r, &s), LR_OK);
    assert_int_equal(s.struct_size, sizeof s);
    assert_int_equal(s.blocks, 0);
    assert_int_equal(s.learned_blocks, 0);
    assert_int_equal(s.evicted_blocks, 0);
    /* 40 distinct prompts of 4 blocks each: 160 learned, 64 held */
    struct dec o;
    for (uint32_t i = 0; i < 40; i++) {
        uint32_t t[64];
        toks(t, 64, 3000 + i);
        lr_request q = req(t, 64, 0, T0 + i * MS);
        assert_st(route_q(r, &q, &o), LR_OK);
        assert_st(lr_router_complete(r, q.id, 1, T0 + i * MS), LR_OK);
    }
    assert_st(lr_router_index_stats(r, &s), LR_OK);
    assert_int_equal(s.learned_blocks, 160);
    assert_true(s.blocks <= 64 && s.blocks > 0);
    assert_int_equal(s.remote_blocks, 0);
    assert_int_equal(s.expired_blocks, 0);
    assert_int_equal(s.learned_blocks - s.evicted_blocks, s.blocks);
    /* past the TTL every route goes, and is counted as expired */
    uint64_t held = s.blocks, evicted = s.evicted_blocks;
    assert_st(lr_router_expire(r, T0 + 60 * SEC), LR_OK);
    assert_st(lr_router_index_stats(r, &s), LR_OK);
    assert_int_equal(s.blocks, 0);
    assert_int_equal(s.expired_blocks, held);
    assert_int_equal(s.evicted_blocks, evicted);
    /* bad input changes nothing */
    uint64_t d0 = lr__router_digest(r);
    assert_st(lr_router_index_stats(NULL, &s), LR_EINVAL);
    assert_st(lr_router_index_stats(r, NULL), LR_EINVAL);
    s.struct_size = LR_INDEX_STATS_SIZE_V1 - 1;
    assert_st(lr_router_index_stats(r, &s), LR_EVERSION);
    assert_true(lr__router_digest(r) == d0);
    lr_router_destroy(r);
}

static void
rebalance(void **state)
{
    (void)state;
    uint64_t ids[10];
    lr_router *r = rebalance_setup(ids, 10);
    assert_int_equal(snap(r, 0).prefill_tokens, 5120);
    assert_int_equal(snap(r, 0).queued, 10);
    lr_move mv[16];
    size_t nm = 99;
    /* under the SLO: nothing to do */
    assert_st(
        lr_router_rebalance_plan(r, T0 + 20 * MS, mv, 16, sizeof mv[0], &nm),
        LR_OK);
    assert_int_equal(nm, 0);
    /* SLO 0.3 s: 0 expects 5120 / 8000 = 0.64 s; 1 is free */
    set_param(r, LR_PARAM_TTFT_SLO_S, 0.3);
    uint64_t before = lr__router_digest(r);
    assert_st(
        lr_router_rebalance_plan(r, T0 + 20 * MS, mv, 16, sizeof mv[0], &nm),
        LR_OK);
    assert_true(lr__router_digest(r) == before); /* a plan changes nothing */
    assert_true(nm >= 1);
    for (size_t i = 0; i < nm; i++) {
        assert_int_equal(mv[i].from, 0);
        assert_int_equal(mv[i].to, 1);
        assert_true(mv[i].benefit_s > 0);
        if (i > 0)
            assert_true(mv[i].benefit_s <= mv[i - 1].benefit_s);
        for (size_t j = 0; j < i; j++)
            assert_true(mv[j].request_id != mv[i].request_id);
    }
    /* first move: 0.64 - 1024 / 8000 */
    assert_near(mv[0].benefit_s, 0.64 - 0.128);
    /* each move keeps the TTFT there under the SLO, counting the moves
     * planned before it: 1024 / 8000, 2048 / 8000, then 3072 / 8000 is
     * past 0.3 s. Two moves. */
    assert_int_equal(nm, 2);
    assert_near(mv[1].benefit_s, 4608.0 / 8000 - 2048.0 / 8000);
    /* carry out the first: the load moves */
    assert_st(lr_router_move(r, mv[0].request_id, 1), LR_OK);
    lr_load_snapshot s0 = snap(r, 0), s1 = snap(r, 1);
    assert_int_equal(s0.inflight, 9);
    assert_int_equal(s0.prefill_tokens, 4608);
    assert_int_equal(s1.inflight, 1);
    assert_int_equal(s1.queued, 1);
    assert_int_equal(s1.prefill_tokens, 1024); /* nothing cached on 1 */
    assert_st(lr_router_move(r, mv[1].request_id, 1), LR_OK);
    assert_true((double)snap(r, 1).prefill_tokens / 8000 < 0.3);
    assert_router_ok(r);
    /* after its first token a request cannot move */
    assert_st(lr_router_first_token(r, mv[0].request_id, T0 + 30 * MS), LR_OK);
    before = lr__router_digest(r);
    assert_st(lr_router_move(r, mv[0].request_id, 0), LR_ESTATE);
    assert_true(lr__router_digest(r) == before);
    /* bad moves */
    uint64_t other = 0;
    for (int i = 0; i < 10; i++)
        if (ids[i] != mv[0].request_id && ids[i] != mv[1].request_id)
            other = ids[i];
    assert_st(lr_router_move(r, other, 9), LR_ENOENT);
    assert_st(lr_router_move(r, 424242, 1), LR_ENOENT);
    assert_st(lr_router_drain_instance(r, 1, 1), LR_OK);
    assert_st(lr_router_move(r, other, 1), LR_ESTATE);
    assert_st(lr_router_drain_instance(r, 1, 0), LR_OK);
    assert_st(lr_router_move(r, other, 1), LR_OK);
    assert_st(lr_router_move(NULL, other, 1), LR_EINVAL);
    /* capacity bounds the plan */
    set_param(r, LR_PARAM_TTFT_SLO_S, 0.2);
    assert_st(
        lr_router_rebalance_plan(r, T0 + 40 * MS, mv, 1, sizeof mv[0], &nm),
        LR_OK);
    assert_true(nm <= 1);
    assert_st(
        lr_router_rebalance_plan(r, T0 + 40 * MS, NULL, 0, sizeof mv[0], &nm),
        LR_OK);
    assert_int_equal(nm, 0);
    assert_st(lr_router_rebalance_plan(r, T0, NULL, 1, sizeof mv[0], &nm),
              LR_EINVAL);
    assert_st(lr_router_rebalance_plan(r, T0, mv, 1, sizeof mv[0], NULL),
              LR_EINVAL);
    /* a move smaller than 0.1's lr_move */
    assert_st(lr_router_rebalance_plan(r, T0, mv, 1, sizeof mv[0] - 1, &nm),
              LR_EINVAL);
    assert_st(lr_router_rebalance_plan(NULL, T0, mv, 1, sizeof mv[0], &nm),
              LR_EINVAL);
    for (int i = 0; i < 10; i++)
        assert_st(lr_router_fail(r, ids[i], T0 + SEC), LR_OK);
    assert_idle(r, 2);
    lr_router_destroy(r);
}

/* DualMap's decode bottleneck in rebalancing: a queue without a first
 * token for 3 s is overloaded, its wait added to its TTFT. */
static void
rebalance_decode_stall(void **state)
{
    (void)state;
    uint64_t ids[2];
    lr_router *r = rebalance_setup(ids, 2);
    lr_move mv[4];
    size_t nm = 99;
    assert_st(lr_router_rebalance_plan(r, T0 + SEC, mv, 4, sizeof mv[0], &nm),
              LR_OK);
    assert_int_equal(nm, 0);
    assert_st(
        lr_router_rebalance_plan(r, T0 + 3500 * MS, mv, 4, sizeof mv[0], &nm),
        LR_OK);
    assert_true(nm >= 1);
    for (size_t i = 0; i < nm; i++) {
        assert_int_equal(mv[i].from, 0);
        assert_int_equal(mv[i].to, 1);
        assert_true(mv[i].benefit_s > 3.0);
    }
    lr_router_destroy(r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policy_random),
        cmocka_unit_test(policy_round_robin),
        cmocka_unit_test(policy_least_request),
        cmocka_unit_test(policy_least_load),
        cmocka_unit_test(policy_session_affinity),
        cmocka_unit_test(policy_consistent_hash),
        cmocka_unit_test(policy_prefix_cache),
        cmocka_unit_test(policy_prefix_cache_and_load),
        cmocka_unit_test(policy_sglang),
        cmocka_unit_test(policy_preble),
        cmocka_unit_test(policy_min_ttft),
        cmocka_unit_test(policy_dynamo),
        cmocka_unit_test(policy_dualmap_choice),
        cmocka_unit_test(policy_dualmap_decode_stall),
        cmocka_unit_test(policy_dualmap_key_two_blocks),
        cmocka_unit_test(policy_dualmap_hot_prefix),
        cmocka_unit_test(policy_gorgo_cost),
        cmocka_unit_test(policy_gorgo_queue_until_finished),
        cmocka_unit_test(policy_gorgo_tuner),
        cmocka_unit_test(policy_ranvier),
        cmocka_unit_test(lifecycle_random),
        cmocka_unit_test(lifecycle_unknown_duplicate),
        cmocka_unit_test(lifecycle_dry_run),
        cmocka_unit_test(lifecycle_remove_instance),
        cmocka_unit_test(lifecycle_id_reuse),
        cmocka_unit_test(lifecycle_draining),
        cmocka_unit_test(lifecycle_scores_buffer),
        cmocka_unit_test(lifecycle_bad_input),
        cmocka_unit_test(params),
        cmocka_unit_test(policy_names),
        cmocka_unit_test(delta_foreign_ids),
        cmocka_unit_test(route_expires_first),
        cmocka_unit_test(index_stats),
        cmocka_unit_test(rebalance),
        cmocka_unit_test(rebalance_decode_stall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
