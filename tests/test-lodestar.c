/* LR_POLICY_LODESTAR through lr_router: cold start decides exactly as its
 * fallback (a twin router running the fallback is the naive model), the
 * samples routes make, learning which class is fast, the out-of-range
 * fallback, the K-filter, exploration, the power-of-d draw, and the
 * learner calls' errors. */
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

static void
add(lr_router *r, uint32_t i, uint32_t cls)
{
    assert_int_equal(add_instance(r, "10.1", i, cls, 0), i);
}

/* A router of n instances; classes alternate 0, 1 when `hetero`. */
static lr_router *
mk(lr_policy policy, uint32_t n, bool hetero, uint32_t min_samples,
   uint32_t every)
{
    static lr_mlp_options m;
    lr_mlp_options_init(&m);
    m.hidden_layers = 2;
    m.width = 32;
    m.batch_size = 64;
    m.learning_rate = 3e-3;
    static lr_learner_options lo;
    lr_learner_options_init(&lo);
    lo.min_samples = min_samples;
    lo.retrain_every = every;
    lo.fifo_capacity = 2000;
    lo.replay_capacity = 500;
    lo.epochs = 30;
    lo.mlp = &m;
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = policy;
    o.seed = 0x10de;
    o.max_instances = 64;
    o.max_requests = 4096;
    o.learner = &lo;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < n; i++)
        add(r, i, hetero ? i % 2 : 0);
    return r;
}

/* Route one request that must succeed; returns the decision. */
static lr_decision
route(lr_router *r, uint64_t id, const uint32_t *t, size_t n, uint64_t now,
      uint32_t flags)
{
    lr_decision d;
    assert_st(route_one(r, id, t, n, flags, now, &d), LR_OK);
    return d;
}

static lr_learner_stats
lstats(lr_router *r)
{
    lr_learner_stats s;
    lr_learner_stats_init(&s);
    assert_st(lr_router_learner_stats(r, &s), LR_OK);
    return s;
}

static void
errors_and_setup(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 2, false, 10, 10);
    int32_t tr = 3;
    assert_st(lr_router_learn_step(r, 0, &tr), LR_ESTATE); /* no learner */
    lr_learner_stats s;
    lr_learner_stats_init(&s);
    assert_st(lr_router_learner_stats(r, &s), LR_ESTATE);
    assert_st(lr_router_learn_step(NULL, 0, &tr), LR_EINVAL);
    assert_st(lr_router_learner_stats(NULL, &s), LR_EINVAL);
    assert_st(lr_router_learner_stats(r, NULL), LR_EINVAL);
    assert_st(lr_router_set_policy(r, LR_POLICY_LODESTAR), LR_OK);
    assert_int_equal(lr_router_policy(r), LR_POLICY_LODESTAR);
    assert_st(lr_router_learn_step(r, 0, &tr), LR_OK);
    assert_int_equal(tr, 0);
    assert_st(lr_router_learn_step(r, 8, &tr), LR_EINVAL);
    s = lstats(r);
    assert_int_equal(s.samples, 0);
    assert_int_equal(s.model_round, 0);
    /* the fallback cannot be lodestar itself */
    assert_st(
        lr_router_set_param(r, LR_PARAM_LODESTAR_FALLBACK, LR_POLICY_LODESTAR),
        LR_ERANGE);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_FALLBACK, 2.5),
              LR_EINVAL);
    lr_router_destroy(r);
    /* learner options: n_features is the router's */
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    lo.n_features = 3;
    lr_router_options o;
    lr_router_options_init(&o);
    o.learner = &lo;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    lo.n_features = LR_LODESTAR_FEATURES;
    lo.struct_size = 4;
    assert_st(lr_router_create(&o, &r), LR_EVERSION);
    lo.struct_size = sizeof lo;
    lo.epochs = 0; /* checked at create, whatever the policy */
    o.policy = LR_POLICY_LODESTAR;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    o.policy = LR_POLICY_RANDOM;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    mo.width = 0; /* and so are the network's */
    lo.epochs = 3;
    lo.mlp = &mo;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    mo.width = 8;
    assert_st(lr_router_create(&o, &r), LR_OK);
    assert_st(lr_router_set_policy(r, LR_POLICY_LODESTAR), LR_OK);
    lr_router_destroy(r);
}

/* Cold start: every decision is the fallback's, reason cold-start; a twin
 * router that runs the fallback itself is the naive model. Also with
 * another fallback. */
static void
cold_start_is_the_fallback(void **state)
{
    (void)state;
    static const lr_policy fallbacks[] = { LR_POLICY_PREFIX_CACHE_AND_LOAD,
                                           LR_POLICY_LEAST_REQUEST,
                                           LR_POLICY_DUALMAP };
    for (size_t f = 0; f < 3; f++) {
        lr_router *a = mk(LR_POLICY_LODESTAR, 6, false, 100000, 1000);
        lr_router *b = mk(fallbacks[f], 6, false, 100000, 1000);
        assert_st(
            lr_router_set_param(a, LR_PARAM_LODESTAR_FALLBACK, fallbacks[f]),
            LR_OK);
        uint32_t t[256];
        uint64_t now = T0;
        uint64_t s = 4;
        for (uint64_t id = 1; id <= 300; id++) {
            toks(t, 256, tu_below(&s, 12)); /* shared prompts */
            size_t n = 64 + tu_below(&s, 192);
            lr_decision da = route(a, id, t, n, now, 0);
            lr_decision db = route(b, id, t, n, now, 0);
            assert_int_equal(da.instance, db.instance);
            assert_reason(da, LR_REASON_COLD_START);
            if (fallbacks[f] !=
                LR_POLICY_LEAST_REQUEST) /* it skips the match */
                assert_int_equal(da.cached_tokens, db.cached_tokens);
            now += 5 * MS;
            if (id > 8) {
                uint64_t old = id - 8;
                assert_st(lr_router_first_token(a, old, now), LR_OK);
                assert_st(lr_router_first_token(b, old, now), LR_OK);
                assert_st(lr_router_complete(a, old, 10, now), LR_OK);
                assert_st(lr_router_complete(b, old, 10, now), LR_OK);
            }
        }
        lr_router_stats st;
        lr_router_stats_init(&st);
        assert_st(lr_router_get_stats(a, &st), LR_OK);
        assert_int_equal(st.by_reason[LR_REASON_COLD_START], 300);
        assert_int_equal(lstats(a).samples, 292);
        assert_st(lr__router_verify(a), LR_OK);
        lr_router_destroy(a);
        lr_router_destroy(b);
    }
}

/* Samples: one per first token, a slow one clipped to LODESTAR_MAX_TTFT_S;
 * the learner drops (and counts) one beyond its max_abs_reward (15 s):
 * with the default cap (60 s) a slow first token is dropped, as in the
 * paper, and with a cap of 15 s or less it is a sample at -cap (the model
 * sees what a backlog costs). None for a request that ends without one,
 * moves, or was a dry run. */
static void
samples_from_first_tokens(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LODESTAR, 3, false, 100000, 1000);
    uint32_t t[64];
    toks(t, 64, 1);
    route(r, 1, t, 64, T0, 0);
    route(r, 2, t, 64, T0, 0);
    route(r, 3, t, 64, T0, 0);
    route(r, 4, t, 64, T0, 0);
    route(r, 99, t, 64, T0, LR_ROUTE_DRY_RUN);
    assert_st(lr_router_first_token(r, 1, T0 + 200 * MS), LR_OK);
    assert_st(lr_router_first_token(r, 1, T0 + 300 * MS), LR_OK); /* repeat */
    assert_st(lr_router_complete(r, 2, 5, T0 + 300 * MS), LR_OK);
    assert_st(lr_router_fail(r, 3, T0 + 300 * MS), LR_OK);
    assert_st(lr_router_first_token(r, 4, T0 + 16 * SEC), LR_OK); /* late */
    assert_int_equal(lstats(r).samples, 1);
    assert_int_equal(lstats(r).dropped_range, 1); /* -16 s: beyond 15 */
    assert_st(lr_router_first_token(r, 4, T0 + 60 * SEC), LR_OK); /* no-op */
    /* a cap of 15 s: the late one is a sample at -15 s */
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_MAX_TTFT_S, 15), LR_OK);
    route(r, 8, t, 64, T0, 0);
    assert_st(lr_router_first_token(r, 8, T0 + 16 * SEC), LR_OK);
    assert_int_equal(lstats(r).samples, 2);
    int32_t trained = 1;
    assert_st(lr_router_learn_step(r, 0, &trained), LR_OK);
    assert_int_equal(trained, 0);
    float x[4 * LR_LODESTAR_FEATURES], y[4];
    size_t ns = 0;
    assert_st(lr_router_learner_samples(r, x, LR_LODESTAR_FEATURES, y, 4, &ns),
              LR_OK);
    assert_int_equal(ns, 2);
    assert_true(fabs(y[0] + 0.2) < 1e-6 && y[1] == -15.0f);
    /* a lower cap clips lower */
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_MAX_TTFT_S, 2), LR_OK);
    route(r, 9, t, 64, T0, 0);
    assert_st(lr_router_first_token(r, 9, T0 + 3 * SEC), LR_OK);
    assert_st(lr_router_learn_step(r, 0, &trained), LR_OK);
    assert_st(lr_router_learner_samples(r, x, LR_LODESTAR_FEATURES, y, 4, &ns),
              LR_OK);
    assert_int_equal(ns, 3);
    assert_true(y[2] == -2.0f);
    /* wider rows: the same features, then zeros */
    assert_int_equal(lr_lodestar_feature_count(), LR_LODESTAR_FEATURES);
    enum {
        W = LR_LODESTAR_FEATURES + 3
    };
    float xw[4 * W], yw[4];
    memset(xw, 0x5a, sizeof xw);
    assert_st(lr_router_learner_samples(r, xw, W, yw, 4, &ns), LR_OK);
    assert_int_equal(ns, 3);
    for (size_t i = 0; i < ns; i++) {
        assert_memory_equal(xw + i * W, x + i * LR_LODESTAR_FEATURES,
                            LR_LODESTAR_FEATURES * sizeof *x);
        for (size_t j = LR_LODESTAR_FEATURES; j < W; j++)
            assert_true(xw[i * W + j] == 0.0f);
    }
    assert_st(
        lr_router_learner_samples(r, xw, LR_LODESTAR_FEATURES - 1, yw, 4, &ns),
        LR_EINVAL);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_MAX_TTFT_S, 60), LR_OK);
    /* a move drops the sample: its features were the old instance's */
    route(r, 5, t, 64, T0, 0);
    lr_decision d = route(r, 6, t, 64, T0, 0);
    uint32_t to = (d.instance + 1) % 3;
    assert_st(lr_router_move(r, 6, to), LR_OK);
    assert_st(lr_router_first_token(r, 6, T0 + 100 * MS), LR_OK);
    assert_st(lr_router_first_token(r, 5, T0 + 100 * MS), LR_OK);
    assert_int_equal(lstats(r).samples, 4);
    /* a switch away: routes of other policies make no sample */
    assert_st(lr_router_set_policy(r, LR_POLICY_ROUND_ROBIN), LR_OK);
    route(r, 7, t, 64, T0, 0);
    assert_st(lr_router_first_token(r, 7, T0 + 100 * MS), LR_OK);
    assert_int_equal(lstats(r).samples, 4);
    assert_st(lr_router_set_policy(r, LR_POLICY_LODESTAR), LR_OK);
    assert_int_equal(lstats(r).samples, 4); /* kept across switches */
    assert_st(lr__router_verify(r), LR_OK);
    lr_router_destroy(r);
}

/* A small cluster model: class 1 prefills 4x slower than class 0, and
 * the TTFT is the uncached prompt over the rate plus the queue ahead.
 * Returns the TTFT in ns for a request routed to `inst`. */
struct fleet {
    uint32_t n;
    double busy_until[8]; /* seconds */
};

static double
serve(struct fleet *f, uint32_t inst, double now_s, uint32_t uncached)
{
    double rate = inst % 2 == 0 ? 20000.0 : 5000.0;
    double start = f->busy_until[inst] > now_s ? f->busy_until[inst] : now_s;
    double done = start + 0.01 + uncached / rate;
    f->busy_until[inst] = done;
    return done - now_s;
}

/* Run `n` requests through the fleet model; returns the mean TTFT. The
 * host steps the learner every 50 requests. */
static double
drive(lr_router *r, struct fleet *f, uint64_t *id, uint64_t *now, int n,
      uint64_t *s, uint64_t *by_reason)
{
    uint32_t t[512];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        toks(t, 512, tu_rand(s)); /* no reuse */
        size_t len = 256 + tu_below(s, 256);
        lr_decision d = route(r, *id, t, len, *now, 0);
        if (by_reason != NULL)
            by_reason[d.reason]++;
        double ttft = serve(f, d.instance, (double)*now / 1e9,
                            (uint32_t)(len - d.cached_tokens));
        sum += ttft;
        assert_st(lr_router_first_token(r, *id, *now + (uint64_t)(ttft * 1e9)),
                  LR_OK);
        assert_st(lr_router_complete(r, *id, 1, *now + (uint64_t)(ttft * 1e9)),
                  LR_OK);
        (*id)++;
        *now += 60 * MS;
        if (i % 50 == 49 && lr_router_policy(r) == LR_POLICY_LODESTAR)
            assert_st(lr_router_learn_step(r, 0, NULL), LR_OK);
    }
    return sum / n;
}

/* It learns that class 0 is fast: after the first rounds almost every
 * choice is a class-0 instance, and the mean TTFT beats the fallback's
 * (which cannot tell the classes apart). */
static void
learns_the_fast_class(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LODESTAR, 4, true, 300, 200);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_EPSILON, 0), LR_OK);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_OOD, 0), LR_OK);
    struct fleet f = { 4, { 0 } };
    uint64_t id = 1, now = T0, s = 8;
    double cold = drive(r, &f, &id, &now, 400, &s, NULL);
    assert_true(lstats(r).model_round >= 1);
    uint64_t reasons[16] = { 0 };
    double warm = drive(r, &f, &id, &now, 400, &s, reasons);
    assert_int_equal(reasons[LR_REASON_MIN_COST], 400);
    /* where it sent them */
    lr_router *b = mk(LR_POLICY_PREFIX_CACHE_AND_LOAD, 4, true, 300, 200);
    struct fleet g = { 4, { 0 } };
    uint64_t id2 = 1, now2 = T0, s2 = 8;
    drive(b, &g, &id2, &now2, 400, &s2, NULL);
    double base = drive(b, &g, &id2, &now2, 400, &s2, NULL);
    lr_learner_stats ls = lstats(r);
    print_message("TTFT mean: cold %.4f s, learned %.4f s, fallback %.4f s; "
                  "online MAE %.4f s, rounds %llu\n",
                  cold, warm, base, ls.online_mae,
                  (unsigned long long)ls.model_round);
    assert_true(warm < base * 0.8);
    assert_true(ls.online_mae < 0.05);
    lr_router_destroy(r);
    lr_router_destroy(b);
}

/* Out of range: once trained on small queues, every candidate with a
 * queue far beyond anything seen: each is dropped (judged alone), none is
 * left, and the fallback decides (reason ood); with the guard off, the
 * model scores them. */
static void
out_of_range_falls_back(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LODESTAR, 4, true, 300, 200);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_EPSILON, 0), LR_OK);
    struct fleet f = { 4, { 0 } };
    uint64_t id = 1, now = T0, s = 8;
    drive(r, &f, &id, &now, 400, &s, NULL);
    assert_true(lstats(r).model_round >= 1);
    /* 200 requests in flight at once: far outside training */
    uint32_t t[300];
    lr_decision d;
    for (int i = 0; i < 200; i++) {
        toks(t, 300, 5000 + (uint64_t)i);
        d = route(r, id++, t, 300, now, 0);
    }
    assert_reason(d, LR_REASON_OOD);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_OOD, 0), LR_OK);
    toks(t, 300, 9999);
    d = route(r, id++, t, 300, now, LR_ROUTE_DRY_RUN);
    assert_reason(d, LR_REASON_MIN_COST);
    assert_false(isnan(d.cost));
    lr_router_destroy(r);
}

/* Exploration: epsilon 1 makes every decision an exploration draw over
 * all instances. The power-of-d draw scores exactly d candidates and
 * always the deepest cached one. */
static void
explore_and_power_of_d(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LODESTAR, 8, true, 300, 200);
    struct fleet f = { 8, { 0 } };
    uint64_t id = 1, now = T0, s = 8;
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_OOD, 0), LR_OK);
    drive(r, &f, &id, &now, 400, &s, NULL);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_EPSILON, 1), LR_OK);
    uint32_t hits[8] = { 0 };
    uint32_t t[128];
    for (int i = 0; i < 400; i++) {
        toks(t, 128, 70000 + (uint64_t)i);
        lr_decision d = route(r, id++, t, 128, now, LR_ROUTE_DRY_RUN);
        assert_reason(d, LR_REASON_EXPLORE);
        hits[d.instance]++;
    }
    for (int i = 0; i < 8; i++)
        assert_true(hits[i] > 20);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_EPSILON, 0), LR_OK);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_CANDIDATES, 3), LR_OK);
    /* a cached prompt on instance 5 */
    toks(t, 128, 123);
    lr_request q;
    lr_request_init(&q);
    q.id = id++;
    q.tokens = t;
    q.n_tokens = 128;
    q.now_ns = now;
    lr_decision d;
    lr_decision_init(&d);
    /* learn the prompt on 5 only: round-robin without learning up to 4,
     * then one route that learns */
    assert_st(lr_router_set_policy(r, LR_POLICY_ROUND_ROBIN), LR_OK);
    q.flags = LR_ROUTE_NO_LEARN;
    do {
        q.id = id++;
        assert_st(lr_router_route(r, &q, &d), LR_OK);
        assert_st(lr_router_complete(r, q.id, 1, now), LR_OK);
    } while (d.instance != 4);
    q.flags = 0;
    q.id = id++;
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.instance, 5);
    assert_st(lr_router_complete(r, q.id, 1, now), LR_OK);
    assert_st(lr_router_set_policy(r, LR_POLICY_LODESTAR), LR_OK);
    lr_score sc[8];
    for (int i = 0; i < 50; i++) {
        q.id = id++;
        q.flags = LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES;
        lr_decision_init(&d);
        d.scores = sc;
        d.scores_capacity = 8;
        assert_st(lr_router_route(r, &q, &d), LR_OK);
        int scored = 0;
        bool five = false;
        for (size_t k = 0; k < d.n_scores; k++) {
            if (!isnan(sc[k].score)) {
                scored++;
                five |= sc[k].instance == 5;
            }
        }
        assert_int_equal(scored, 3);
        if (!five)
            fail_msg("instance 5 (cached %u) not scored; chosen %u reason %s",
                     sc[5].cached_tokens, d.instance, lr_reason_name(d.reason));
    }
    lr_router_destroy(r);
}

/* The K-filter: with the fleet's KV nearly full and a long cached prefix,
 * only the prefix group's two ring candidates are scored. */
static void
k_filter(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LODESTAR, 6, true, 300, 200);
    struct fleet f = { 6, { 0 } };
    uint64_t id = 1, now = T0, s = 8;
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_OOD, 0), LR_OK);
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_EPSILON, 0), LR_OK);
    drive(r, &f, &id, &now, 400, &s, NULL);
    uint32_t t[512];
    toks(t, 512, 4242);
    lr_decision d = route(r, id, t, 512, now, 0); /* now cached somewhere */
    assert_st(lr_router_complete(r, id++, 1, now), LR_OK);
    lr_engine_stats es;
    lr_engine_stats_init(&es);
    es.kv_use = 0.95;
    es.scraped_ns = now;
    for (uint32_t i = 0; i < 6; i++)
        assert_st(lr_router_set_stats(r, i, &es), LR_OK);
    lr_score sc[6];
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = 6;
    lr_request q;
    lr_request_init(&q);
    q.id = id++;
    q.tokens = t;
    q.n_tokens = 512;
    q.now_ns = now;
    q.flags = LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES;
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_reason(d, LR_REASON_K_FILTER);
    int scored = 0;
    for (size_t k = 0; k < d.n_scores; k++)
        scored += !isnan(sc[k].score);
    assert_int_equal(scored, 2);
    assert_true(d.alt_instance != LR_INSTANCE_NONE);
    assert_true(d.alt_instance != d.instance);
    /* below the threshold: everything is scored */
    assert_st(lr_router_set_param(r, LR_PARAM_LODESTAR_KV_THRESHOLD, 0.99),
              LR_OK);
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = 6;
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_reason(d, LR_REASON_MIN_COST);
    lr_router_destroy(r);
}

/* Switching to lodestar under allocation failure: LR_ENOMEM, the policy
 * and the router unchanged, nothing leaked. */
static bool
sc_switch(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = &t->a;
    o.max_instances = 8;
    o.max_requests = 64;
    o.policy = LR_POLICY_RANDOM;
    lr_router *r;
    assert_st(lr_router_create(&o, &r), LR_OK);
    add(r, 0, 0);
    uint64_t before = lr__router_digest(r);
    tu_alloc_resume(t, arm);
    lr_status st = lr_router_set_policy(r, LR_POLICY_LODESTAR);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_int_equal(lr_router_policy(r), LR_POLICY_RANDOM);
        assert_true(lr__router_digest(r) == before);
        assert_st(lr_router_learn_step(r, 0, NULL), LR_ESTATE);
    } else {
        assert_st(st, LR_OK);
    }
    lr_router_destroy(r);
    return !failed;
}

static void
oom_switch(void **state)
{
    (void)state;
    tu_oom_loop(sc_switch, NULL, 200);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(errors_and_setup),
        cmocka_unit_test(cold_start_is_the_fallback),
        cmocka_unit_test(samples_from_first_tokens),
        cmocka_unit_test(learns_the_fast_class),
        cmocka_unit_test(out_of_range_falls_back),
        cmocka_unit_test(explore_and_power_of_d),
        cmocka_unit_test(k_filter),
        cmocka_unit_test(oom_switch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
