/* Models and LoRA adapters in lr_router (lr_router.h, "Models and
 * adapters"): a request that names a model reaches only the instances
 * serving it (a differential run against a naive model over random
 * fleets, drains and removals), an unknown model gets LR_ENOENT; an
 * adapter's prefixes are keyed apart (lr_name_hash and lr_adapter_salt
 * as documented); the router follows residency (least recently used
 * eviction, pins of requests in flight, the engine's report); the
 * published LoRA rules pinned on tables (lora-affinity, aibrix-lora);
 * adaptive learns an adapter's load time, and counts the adapters the
 * engines report queued for a slot; a waiting request keeps its
 * names and multimodal inputs; snapshots keep models; bad input changes
 * nothing; and the allocation-failure loops of an add with models and of a
 * restore. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "libroute/lr_index.h"
#include "libroute/lr_router.h"
#include "router-helpers.h"
#include "router/router.h"
#include "testutil.h"

#define NONE LR_INSTANCE_NONE
#define BT 16u

static lr_router *
mk_on(const lr_allocator *a, int32_t policy, uint32_t max_inst)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = a;
    o.policy = policy;
    o.seed = 11;
    o.max_instances = max_inst;
    o.max_requests = 1024;
    o.index_ttl_ns = 0;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    return r;
}

static lr_router *
mk(int32_t policy, uint32_t max_inst)
{
    return mk_on(NULL, policy, max_inst);
}

/* Add "10.2.0.<i>:8000" serving `models` (n of them) with `slots`. */
static lr_status
add_served(lr_router *r, uint32_t i, const char *const *models, uint32_t n,
           uint32_t slots, uint32_t *id)
{
    char name[32];
    snprintf(name, sizeof name, "10.2.0.%u:8000", i);
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = name;
    s.models = models;
    s.n_models = n;
    s.max_adapters = slots;
    return lr_router_add_instance(r, &s, id);
}

static lr_status
route_named(lr_router *r, uint64_t id, const uint32_t *t, size_t n,
            const char *model, const char *adapter, uint32_t flags,
            uint64_t now, lr_decision *d)
{
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = t;
    q.n_tokens = n;
    q.model = model;
    q.adapter = adapter;
    q.flags = flags;
    q.now_ns = now;
    lr_decision_init(d);
    return lr_router_route(r, &q, d);
}

static uint64_t
hash_of(const char *s)
{
    return lr_name_hash(s, strlen(s));
}

/* ---- keys ------------------------------------------------------------------------ */

/* The documented formulas, computed here from xxHash itself. */
static void
name_hash_and_salt(void **state)
{
    (void)state;
    assert_true(lr_name_hash(NULL, 0) == 0);
    assert_true(lr_name_hash("x", 0) == 0);
    assert_true(lr_name_hash("sql-lora", 8) ==
                XXH3_64bits_withSeed("sql-lora", 8, 0x4c524e414d453031ull));
    assert_true(lr_adapter_salt(77, 0) == 77);
    uint8_t b[16] = { 0 };
    uint64_t salt = 5, h = hash_of("sql-lora");
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(salt >> (8 * i));
        b[8 + i] = (uint8_t)(h >> (8 * i));
    }
    assert_true(lr_adapter_salt(5, h) ==
                XXH3_64bits_withSeed(b, 16, 0x4c52414441505431ull));
    assert_true(lr_adapter_salt(0, h) != 0);
    assert_true(lr_adapter_salt(0, h) != lr_adapter_salt(0, hash_of("other")));
}

/* An adapter's prompt matches only under that adapter; the keys a host
 * computes with lr_adapter_salt() are the router's. */
static void
adapter_prefixes_apart(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_PREFIX_CACHE, 4);
    uint32_t id;
    for (uint32_t i = 0; i < 3; i++)
        assert_st(add_served(r, i, NULL, 0, 4, &id), LR_OK);
    uint32_t t[8 * BT];
    toks(t, 8 * BT, 3);
    lr_decision d;
    assert_st(route_named(r, 1, t, 8 * BT, NULL, "a1", 0, T0, &d), LR_OK);
    uint32_t at = d.instance;
    assert_st(
        route_named(r, 2, t, 8 * BT, NULL, "a1", LR_ROUTE_DRY_RUN, T0 + MS, &d),
        LR_OK);
    assert_int_equal(d.instance, at);
    assert_int_equal(d.cached_tokens, 8 * BT);
    assert_st(
        route_named(r, 2, t, 8 * BT, NULL, NULL, LR_ROUTE_DRY_RUN, T0 + MS, &d),
        LR_OK);
    assert_int_equal(d.best_cached_tokens, 0);
    assert_st(
        route_named(r, 2, t, 8 * BT, NULL, "a2", LR_ROUTE_DRY_RUN, T0 + MS, &d),
        LR_OK);
    assert_int_equal(d.best_cached_tokens, 0);
    /* an empty adapter is the base model */
    assert_st(
        route_named(r, 2, t, 8 * BT, NULL, "", LR_ROUTE_DRY_RUN, T0 + MS, &d),
        LR_OK);
    assert_int_equal(d.best_cached_tokens, 0);
    /* the same keys, hashed by a host, learned as a base-model prompt with
     * the adapter's salt, are the adapter's prefix */
    uint32_t u[4 * BT];
    toks(u, 4 * BT, 4);
    lr_request q;
    lr_request_init(&q);
    q.id = 3;
    q.tokens = u;
    q.n_tokens = 4 * BT;
    q.tenant_salt = lr_adapter_salt(0, hash_of("a3"));
    q.now_ns = T0 + 2 * MS;
    lr_decision_init(&d);
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    at = d.instance;
    assert_st(route_named(r, 4, u, 4 * BT, NULL, "a3", LR_ROUTE_DRY_RUN,
                          T0 + 3 * MS, &d),
              LR_OK);
    assert_int_equal(d.instance, at);
    assert_int_equal(d.cached_tokens, 4 * BT);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* ---- models ---------------------------------------------------------------------- */

#define F_INST 12u
#define F_MODELS 5u

static const char *const pool[F_MODELS] = { "m0", "m1", "m2", "m3", "m4" };

struct naive_inst {
    bool live, draining;
    uint32_t n;
    uint32_t m[3]; /* indexes into pool */
};

static bool
naive_serves(const struct naive_inst *x, int model)
{
    if (!x->live)
        return false;
    if (model < 0 || x->n == 0)
        return true;
    for (uint32_t j = 0; j < x->n; j++)
        if ((int)x->m[j] == model)
            return true;
    return false;
}

/* A random fleet of instances serving random models (none: every model),
 * drained, undrained, removed and added again at random, and requests
 * naming random models (an unknown one and none among them) under every
 * policy: the router's candidates are exactly the naive set, its choice
 * one of them, its status the naive one. */
static void
models_differential(void **state)
{
    (void)state;
    static const int32_t policies[] = { POLICIES_WITHOUT_LEARNER,
                                        LR_POLICY_LORA_AFFINITY,
                                        LR_POLICY_AIBRIX_LORA };
    uint64_t rng = 0x5eed;
    lr_router *r = mk(LR_POLICY_RANDOM, F_INST);
    struct naive_inst nv[F_INST];
    memset(nv, 0, sizeof nv);
    uint32_t t[6 * BT];
    uint64_t now = T0, req = 1;
    lr_candidate rows[F_INST];
    for (int step = 0; step < 3000; step++) {
        now += MS;
        uint32_t i = (uint32_t)tu_below(&rng, F_INST);
        uint64_t op = tu_below(&rng, 10);
        if (op == 0) { /* an add takes the lowest free id */
            i = 0;
            while (i < F_INST && nv[i].live)
                i++;
        }
        if (op == 0 && i < F_INST) { /* add */
            const char *names[3];
            uint32_t n = (uint32_t)tu_below(&rng, 4);
            for (uint32_t j = 0; j < n; j++) {
                nv[i].m[j] = (uint32_t)tu_below(&rng, F_MODELS - 1);
                names[j] = pool[nv[i].m[j]];
            }
            uint32_t id;
            assert_st(add_served(r, i, names, n, 2, &id), LR_OK);
            assert_int_equal(id, i);
            nv[i].live = true;
            nv[i].draining = false;
            nv[i].n = n;
        } else if (op == 0) {
            continue;                       /* full */
        } else if (op == 1 && nv[i].live) { /* remove */
            assert_st(lr_router_remove_instance(r, i), LR_OK);
            memset(&nv[i], 0, sizeof nv[i]);
        } else if (op == 2 && nv[i].live) { /* drain or undrain */
            nv[i].draining = !nv[i].draining;
            assert_st(lr_router_drain_instance(r, i, nv[i].draining), LR_OK);
        } else {                                               /* a request */
            int model = (int)tu_below(&rng, F_MODELS + 1) - 1; /* -1: none */
            const char *mname = model < 0 ? NULL : pool[model];
            assert_st(lr_router_set_policy(
                          r, policies[tu_below(&rng, sizeof policies /
                                                         sizeof policies[0])]),
                      LR_OK);
            bool any_live = false, any_routable = false;
            size_t n_elig = 0;
            uint32_t elig[F_INST];
            bool fleet_routable = false;
            for (uint32_t k = 0; k < F_INST; k++) {
                fleet_routable |= nv[k].live && !nv[k].draining;
                if (!naive_serves(&nv[k], model))
                    continue;
                any_live = true;
                if (!nv[k].draining) {
                    any_routable = true;
                    elig[n_elig++] = k;
                }
            }
            /* with no instance declaring models, any name is served */
            lr_status want = !fleet_routable ? LR_ESTATE
                             : any_routable  ? LR_OK
                             : any_live      ? LR_ESTATE
                                             : LR_ENOENT;
            toks(t, 6 * BT, tu_below(&rng, 5));
            lr_decision d;
            lr_status st =
                route_named(r, req, t, 6 * BT, mname,
                            tu_below(&rng, 2) ? "ad" : NULL, 0, now, &d);
            if (st != want)
                fail_msg("step %d: model %s: %s, want %s", step,
                         mname ? mname : "(none)", lr_strerror(st),
                         lr_strerror(want));
            if (st != LR_OK)
                continue;
            bool in = false;
            for (size_t k = 0; k < n_elig; k++)
                in |= elig[k] == d.instance;
            assert_true(in);
            lr_request q;
            lr_request_init(&q);
            q.id = 99999;
            q.tokens = t;
            q.n_tokens = 6 * BT;
            q.model = mname;
            q.now_ns = now;
            size_t got = 0;
            assert_st(
                lr_router_candidates(r, &q, rows, F_INST, sizeof rows[0], &got),
                LR_OK);
            assert_int_equal(got, n_elig);
            for (size_t k = 0; k < got; k++)
                assert_int_equal(rows[k].instance, elig[k]);
            if (tu_below(&rng, 2))
                assert_st(lr_router_complete(r, req, 1, now), LR_OK);
            req++;
        }
        if (step % 500 == 0)
            assert_router_ok(r);
    }
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* Round-robin takes turns among a model's instances: interleaved models
 * and alternating requests give every instance the same count. */
static void
round_robin_per_model(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_ROUND_ROBIN, 8);
    const char *m0[] = { "m0" }, *m1[] = { "m1" };
    uint32_t id;
    for (uint32_t i = 0; i < 6; i++)
        assert_st(add_served(r, i, i % 2 ? m1 : m0, 1, 0, &id), LR_OK);
    uint32_t t[BT], count[6] = { 0 };
    toks(t, BT, 1);
    lr_decision d;
    for (uint64_t k = 0; k < 60; k++) {
        bool odd = (k / 2) % 2; /* runs of two, the models alternating */
        assert_st(route_named(r, k + 1, t, BT, odd ? "m1" : "m0", NULL, 0,
                              T0 + k, &d),
                  LR_OK);
        assert_int_equal(d.instance % 2, odd ? 1 : 0);
        count[d.instance]++;
        assert_st(lr_router_complete(r, k + 1, 1, T0 + k), LR_OK);
    }
    for (int i = 0; i < 6; i++)
        assert_int_equal(count[i], 10);
    lr_router_destroy(r);
}

/* ---- residency --------------------------------------------------------------------- */

static size_t
resident(lr_router *r, uint32_t id, uint64_t *h, size_t cap)
{
    size_t n = 0;
    assert_st(lr_router_adapters(r, id, h, cap, &n), LR_OK);
    return n;
}

/* Two slots: a third adapter evicts the least recently used idle one; an
 * adapter with a request in flight stays; the rows say so. */
static void
residency_follows_routes(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 2);
    uint32_t id;
    assert_st(add_served(r, 0, NULL, 0, 2, &id), LR_OK);
    uint32_t t[2 * BT];
    toks(t, 2 * BT, 1);
    lr_decision d;
    uint64_t h[8];
    assert_st(route_named(r, 1, t, 2 * BT, NULL, "a1", 0, T0, &d), LR_OK);
    assert_st(route_named(r, 2, t, 2 * BT, NULL, "a2", 0, T0 + MS, &d), LR_OK);
    assert_int_equal(resident(r, 0, h, 8), 2);
    assert_true(h[0] == hash_of("a2") && h[1] == hash_of("a1"));
    /* both pinned: a third has no slot */
    lr_candidate row;
    lr_request q;
    lr_request_init(&q);
    q.id = 50;
    q.tokens = t;
    q.n_tokens = 2 * BT;
    q.adapter = "a3";
    q.now_ns = T0 + 2 * MS;
    size_t got;
    assert_st(lr_router_candidates(r, &q, &row, 1, sizeof row, &got), LR_OK);
    assert_int_equal(row.adapter_missing, 1);
    assert_int_equal(row.adapter_free, 0);
    assert_int_equal(row.adapters_resident, 2);
    assert_int_equal(row.adapter_evicts, 1);
    assert_true(row.adapter_load_s == 0.1); /* LR_PARAM_ADAPTER_LOAD_S */
    q.adapter = "a1";
    assert_st(lr_router_candidates(r, &q, &row, 1, sizeof row, &got), LR_OK);
    assert_int_equal(row.adapter_missing, 0);
    assert_true(row.adapter_load_s == 0);
    /* a3 while both are pinned: not followed (the engine queues it) */
    assert_st(route_named(r, 3, t, 2 * BT, NULL, "a3", 0, T0 + 3 * MS, &d),
              LR_OK);
    assert_int_equal(resident(r, 0, h, 8), 2);
    /* a1 ends: idle, the least recent; a4 takes its slot */
    assert_st(lr_router_complete(r, 1, 1, T0 + 4 * MS), LR_OK);
    assert_st(route_named(r, 4, t, 2 * BT, NULL, "a4", 0, T0 + 5 * MS, &d),
              LR_OK);
    assert_int_equal(resident(r, 0, h, 8), 2);
    assert_true(h[0] == hash_of("a4") && h[1] == hash_of("a2"));
    lr_router_stats st;
    lr_router_stats_init(&st);
    assert_st(lr_router_get_stats(r, &st), LR_OK);
    assert_int_equal(st.adapter_routes, 4);
    assert_int_equal(st.adapter_loads, 4); /* each was new there */
    /* the short buffer */
    size_t n = 0;
    assert_st(lr_router_adapters(r, 0, h, 1, &n), LR_EBUFSIZE);
    assert_int_equal(n, 2);
    assert_st(lr_router_adapters(r, 5, h, 8, &n), LR_ENOENT);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* The engine's word replaces the guesses: its adapters first, then the
 * router's own while slots remain, those with requests in flight kept. */
static void
report_replaces_guesses(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 2);
    uint32_t id;
    assert_st(add_served(r, 0, NULL, 0, 3, &id), LR_OK);
    uint32_t t[BT];
    toks(t, BT, 2);
    lr_decision d;
    assert_st(route_named(r, 1, t, BT, NULL, "g1", 0, T0, &d), LR_OK);
    assert_st(route_named(r, 2, t, BT, NULL, "g2", 0, T0 + MS, &d), LR_OK);
    assert_st(lr_router_complete(r, 2, 1, T0 + 2 * MS), LR_OK);
    const char *run[] = { "x" }, *wait[] = { "y", "x" };
    lr_adapter_stats s;
    lr_adapter_stats_init(&s);
    s.running = run;
    s.n_running = 1;
    s.waiting = wait;
    s.n_waiting = 2;
    s.max_adapters = 3;
    s.scraped_ns = T0 + 3 * MS;
    assert_st(lr_router_set_adapters(r, 0, &s), LR_OK);
    uint64_t h[8];
    /* x, y, then g1 (in flight) before g2 (idle: no slot left) */
    assert_int_equal(resident(r, 0, h, 8), 3);
    assert_true(h[0] == hash_of("x") && h[1] == hash_of("y") &&
                h[2] == hash_of("g1"));
    /* the report's slots count: max 2 now, g1 stays (in flight) */
    s.max_adapters = 2;
    s.n_waiting = 0;
    s.scraped_ns = T0 + 4 * MS;
    assert_st(lr_router_set_adapters(r, 0, &s), LR_OK);
    assert_int_equal(resident(r, 0, h, 8), 2);
    assert_true(h[0] == hash_of("x") && h[1] == hash_of("g1"));

    /* bad input: a status, and nothing changes */
    uint64_t d0 = lr__router_digest(r);
    char longname[LR_ROUTER_MAX_NAME + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    const char *bad1[] = { NULL }, *bad2[] = { "" }, *bad3[] = { longname };
    const char *many[LR_ROUTER_MAX_ADAPTERS + 1];
    for (size_t i = 0; i <= LR_ROUTER_MAX_ADAPTERS; i++)
        many[i] = "z";
    lr_adapter_stats b = s;
    assert_st(lr_router_set_adapters(NULL, 0, &s), LR_EINVAL);
    assert_st(lr_router_set_adapters(r, 0, NULL), LR_EINVAL);
    b.running = bad1;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_EINVAL);
    b.running = bad2;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_EINVAL);
    b.running = bad3;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_EINVAL);
    b.running = NULL;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_EINVAL);
    b.running = many;
    b.n_running = LR_ROUTER_MAX_ADAPTERS + 1;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_EINVAL);
    b = s;
    b.max_adapters = LR_ROUTER_MAX_ADAPTERS + 1;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_ERANGE);
    b = s;
    b.struct_size = 8;
    assert_st(lr_router_set_adapters(r, 0, &b), LR_EVERSION);
    assert_st(lr_router_set_adapters(r, 1, &s), LR_ENOENT);
    b = s;
    b.scraped_ns = LR_ROUTER_MAX_TIME_NS + 1; /* refused by the clock */
    assert_st(lr_router_set_adapters(r, 0, &b), LR_ERANGE);
    assert_true(lr__router_digest(r) == d0);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* ---- the published rules, pinned on tables ------------------------------------------ */

static lr_candidate
lrow(uint32_t id, int32_t missing, uint32_t free_slots, uint32_t queued,
     double kv)
{
    lr_candidate c;
    memset(&c, 0, sizeof c);
    c.instance = id;
    c.prefill_rate = 8000;
    c.cached_age_s = -1;
    c.prefix_caching = 1;
    c.adapter_missing = missing;
    c.adapter_free = free_slots;
    c.adapter_load_s = missing ? 0.1 : 0;
    c.queued = c.inflight = queued;
    c.kv_use = kv;
    return c;
}

static lr_decision
decide(int32_t policy, const lr_candidate *rows, size_t n, size_t row_size,
       double *scores)
{
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = 64;
    in.seed = 5;
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_policy_decide(policy, &in, rows, n, row_size, scores, &d),
              LR_OK);
    return d;
}

/* The Inference Extension's sum: LoRA 1 / 0.8 / 0, queue min-max, 1 - KV. */
static void
lora_affinity_rule(void **state)
{
    (void)state;
    lr_candidate rows[3] = { lrow(0, 0, 0, 5, 0.9), lrow(1, 1, 1, 0, 0),
                             lrow(2, 1, 0, 0, 0) };
    double sc[3];
    lr_decision d =
        decide(LR_POLICY_LORA_AFFINITY, rows, 3, sizeof rows[0], sc);
    assert_int_equal(d.instance, 1); /* 0.8 + 1 + 1 */
    assert_reason(d, LR_REASON_LEAST_LOADED);
    assert_true(fabs(sc[0] + (1.0 + 0.0 + 0.1)) < 1e-12);
    assert_true(fabs(sc[1] + 2.8) < 1e-12);
    assert_true(fabs(sc[2] + 2.0) < 1e-12);
    /* resident and idle: it wins, for its adapter */
    rows[0] = lrow(0, 0, 0, 0, 0);
    d = decide(LR_POLICY_LORA_AFFINITY, rows, 3, sizeof rows[0], sc);
    assert_int_equal(d.instance, 0);
    assert_reason(d, LR_REASON_ADAPTER);
    /* rows without the adapter columns: every adapter resident */
    lr_candidate two[2] = { lrow(0, 0, 0, 3, 0), lrow(1, 1, 0, 1, 0) };
    unsigned char old[2 * LR_CANDIDATE_SIZE_V2];
    memcpy(old, &two[0], LR_CANDIDATE_SIZE_V2);
    memcpy(old + LR_CANDIDATE_SIZE_V2, &two[1], LR_CANDIDATE_SIZE_V2);
    d = decide(LR_POLICY_LORA_AFFINITY, (const lr_candidate *)(void *)old, 2,
               LR_CANDIDATE_SIZE_V2, sc);
    assert_int_equal(d.instance, 1);
    assert_reason(d, LR_REASON_LEAST_LOADED);
    /* a column out of its domain is refused */
    rows[1].adapter_missing = 2;
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = 64;
    lr_decision_init(&d);
    assert_st(lr_policy_decide(LR_POLICY_LORA_AFFINITY, &in, rows, 3,
                               sizeof rows[0], sc, &d),
              LR_EINVAL);
    rows[1] = lrow(1, 1, 1, 0, 0);
    rows[1].adapter_load_s = NAN;
    assert_st(lr_policy_decide(LR_POLICY_LORA_AFFINITY, &in, rows, 3,
                               sizeof rows[0], sc, &d),
              LR_EINVAL);
}

/* AIBrix: the least loaded of the instances holding the adapter; none
 * holding it: the one with the fewest adapters. */
static void
aibrix_lora_rule(void **state)
{
    (void)state;
    lr_candidate rows[3] = { lrow(0, 0, 0, 5, 0), lrow(1, 1, 1, 0, 0),
                             lrow(2, 0, 0, 3, 0) };
    double sc[3];
    lr_decision d = decide(LR_POLICY_AIBRIX_LORA, rows, 3, sizeof rows[0], sc);
    assert_int_equal(d.instance, 2);
    assert_reason(d, LR_REASON_ADAPTER);
    assert_true(isnan(sc[1]) && sc[0] == 5 && sc[2] == 3);
    for (int k = 0; k < 3; k++) {
        rows[k].adapter_missing = 1;
        rows[k].adapters_resident = k == 1 ? 4u : 2u;
    }
    d = decide(LR_POLICY_AIBRIX_LORA, rows, 3, sizeof rows[0], sc);
    assert_int_equal(d.instance, 2); /* 2 adapters, 3 < 5 in flight */
    assert_reason(d, LR_REASON_FALLBACK);
}

/* ---- adaptive ------------------------------------------------------------------------ */

/* First tokens of requests that loaded their adapter come 0.5 s late:
 * adaptive learns 0.5 s as the class's load time, and then keeps an
 * adapter where it is resident rather than load it on an idle twin. */
static void
adaptive_learns_load_time(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_ADAPTIVE, 4);
    uint32_t id;
    for (uint32_t i = 0; i < 2; i++)
        assert_st(add_served(r, i, NULL, 0, 1, &id), LR_OK);
    uint32_t t[4 * BT];
    uint64_t now = T0, loads_before = 0;
    char name[16];
    for (uint64_t k = 1; k <= 200; k++) {
        toks(t, 4 * BT, k);
        snprintf(name, sizeof name, "a%u", (unsigned)(k % 5));
        lr_decision d;
        assert_st(route_named(r, k, t, 4 * BT, NULL, name, 0, now, &d), LR_OK);
        /* loaded (missing where it went): 0.5 s more */
        lr_router_stats st;
        lr_router_stats_init(&st);
        assert_st(lr_router_get_stats(r, &st), LR_OK);
        bool loaded = st.adapter_loads > loads_before;
        loads_before = st.adapter_loads;
        uint64_t ttft = 20 * MS + (loaded ? 500 * MS : 0);
        assert_st(lr_router_first_token(r, k, now + ttft), LR_OK);
        assert_st(lr_router_complete(r, k, 1, now + ttft + MS), LR_OK);
        now += 2 * SEC;
    }
    lr_candidate rows[2];
    lr_request q;
    lr_request_init(&q);
    q.id = 100001;
    q.tokens = t;
    q.n_tokens = 4 * BT;
    q.adapter = "never-seen";
    q.now_ns = now;
    size_t got;
    assert_st(lr_router_candidates(r, &q, rows, 2, sizeof rows[0], &got),
              LR_OK);
    assert_int_equal(got, 2);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rows[k].adapter_missing, 1);
        if (fabs(rows[k].adapter_load_s - 0.5) > 0.1)
            fail_msg("learnt %.3f s, want 0.5", rows[k].adapter_load_s);
    }
    /* with no slot free the wait is learnt apart: until one such first
     * token, the load's figure; then its own (3 s here: a slot freed by a
     * request's decoding) */
    toks(t, 4 * BT, 5);
    lr_decision d0;
    assert_st(route_named(r, 300, t, 4 * BT, NULL, "p0", 0, now, &d0), LR_OK);
    assert_st(route_named(r, 301, t, 4 * BT, NULL, "p1", 0, now, &d0), LR_OK);
    q.adapter = "p2"; /* both slots held by requests in flight */
    assert_st(lr_router_candidates(r, &q, rows, 2, sizeof rows[0], &got),
              LR_OK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rows[k].adapter_free, 0);
        assert_true(fabs(rows[k].adapter_load_s - 0.5) < 0.1);
    }
    assert_st(route_named(r, 302, t, 4 * BT, NULL, "p2", 0, now + MS, &d0),
              LR_OK);
    for (uint64_t k = 300; k < 303; k++) {
        uint64_t ttft = k == 302 ? 3 * SEC + 20 * MS : 520 * MS;
        assert_st(lr_router_first_token(r, k, now + ttft), LR_OK);
    }
    q.adapter = "p3";
    q.now_ns = now + 4 * SEC;
    assert_st(lr_router_candidates(r, &q, rows, 2, sizeof rows[0], &got),
              LR_OK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rows[k].adapter_free, 0); /* still in flight */
        if (fabs(rows[k].adapter_load_s - 3.0) > 0.3)
            fail_msg("learnt %.3f s with no slot, want 3",
                     rows[k].adapter_load_s);
    }
    for (uint64_t k = 300; k < 303; k++)
        assert_st(lr_router_complete(r, k, 1, now + 5 * SEC), LR_OK);
    now += 6 * SEC;

    /* "hot" resident on one with its request still queued there, the
     * other idle: a 0.5 s load costs more than a short prefill ahead */
    lr_decision d;
    toks(t, 4 * BT, 7);
    assert_st(route_named(r, 500, t, 4 * BT, NULL, "hot", 0, now, &d), LR_OK);
    uint32_t hot = d.instance;
    toks(t, 4 * BT, 9);
    assert_st(route_named(r, 502, t, 4 * BT, NULL, "hot", LR_ROUTE_DRY_RUN,
                          now + 2 * MS, &d),
              LR_OK);
    assert_int_equal(d.instance, hot);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* Instance id's engine reports its adapters: `run` running, then the
 * nw adapters "<prefix>0", "<prefix>1", ... waiting. */
static void
report_queue(lr_router *r, uint32_t id, const char *const *run, size_t nr,
             const char *prefix, size_t nw, uint64_t now)
{
    char names[8][16];
    const char *wait[8];
    assert_true(nw <= 8);
    for (size_t k = 0; k < nw; k++) {
        snprintf(names[k], sizeof names[k], "%s%u", prefix, (unsigned)k);
        wait[k] = names[k];
    }
    lr_adapter_stats s;
    lr_adapter_stats_init(&s);
    s.running = run;
    s.n_running = nr;
    s.waiting = wait;
    s.n_waiting = nw;
    s.scraped_ns = now;
    assert_st(lr_router_set_adapters(r, id, &s), LR_OK);
}

/* Where the engines report every slot held from the router's first route
 * on (a router started on a busy fleet: it never sees a slot free), the
 * adapters they report waiting are the ones a request queues behind:
 * adaptive learns what each adds to a first token (0.4 s here) and
 * sends a resident adapter's request where fewer queue. The router's own
 * requests of an adapter the engine also reports waiting count once. */
static void
adaptive_counts_reported_waiting(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_ADAPTIVE, 4);
    uint32_t id;
    for (uint32_t i = 0; i < 2; i++)
        assert_st(add_served(r, i, NULL, 0, 2, &id), LR_OK);
    const char *run[2][2] = { { "hot", "o0" }, { "hot", "o1" } };
    uint32_t t[4 * BT];
    uint64_t now = T0;
    /* the class's TTFT model first: 20 ms, from base-model requests */
    for (uint64_t k = 0; k < 400; k++) {
        toks(t, 4 * BT, 2000 + k);
        lr_decision d;
        assert_st(route_named(r, 2000 + k, t, 4 * BT, NULL, NULL, 0, now, &d),
                  LR_OK);
        assert_st(lr_router_first_token(r, 2000 + k, now + 20 * MS), LR_OK);
        assert_st(lr_router_complete(r, 2000 + k, 1, now + 21 * MS), LR_OK);
        now += 100 * MS;
    }
    for (uint64_t k = 0; k < 64; k++) {
        /* "hot" and one other running on each, 0-3 others waiting */
        size_t nw[2] = { k % 4, (k + 2) % 4 };
        for (uint32_t i = 0; i < 2; i++)
            report_queue(r, i, run[i], 2, i ? "v" : "w", nw[i], now);
        toks(t, 4 * BT, 100 + k);
        lr_decision d;
        assert_st(
            route_named(r, k + 1, t, 4 * BT, NULL, "hot", 0, now + MS, &d),
            LR_OK);
        uint64_t ttft = 20 * MS + nw[d.instance] * 400 * MS;
        assert_st(lr_router_first_token(r, k + 1, now + MS + ttft), LR_OK);
        assert_st(lr_router_complete(r, k + 1, 1, now + 2 * MS + ttft), LR_OK);
        now += 2 * SEC;
    }
    /* Instance 0: "g", routed there, then three waiting, then g's
     * request ends (g idle: no work, no turn); instance 1: two waiting,
     * that are also the router's own requests in flight there (counted
     * once). Adapters ahead of "hot": o0 and the three waiting less the
     * slot hot's own does not hold, 3; o1, v0 and v1 less that slot, 2. */
    report_queue(r, 0, run[0], 1, "w", 0, now);
    toks(t, 4 * BT, 400);
    lr_decision d;
    assert_st(route_named(r, 400, t, 4 * BT, NULL, "g", 0, now + MS, &d),
              LR_OK);
    if (d.instance != 0)
        assert_st(lr_router_move(r, 400, 0), LR_OK);
    report_queue(r, 0, run[0], 2, "w", 3, now + MS);
    assert_st(lr_router_complete(r, 400, 1, now + 2 * MS), LR_OK);
    uint64_t h[8];
    assert_int_equal(resident(r, 0, h, 8), 6);
    report_queue(r, 1, run[1], 2, "v", 2, now + 2 * MS);
    for (uint64_t k = 0; k < 2; k++) {
        char name[8];
        snprintf(name, sizeof name, "v%u", (unsigned)k);
        toks(t, 4 * BT, 500 + k);
        assert_st(
            route_named(r, 500 + k, t, 4 * BT, NULL, name, 0, now + 2 * MS, &d),
            LR_OK);
        if (d.instance != 1)
            assert_st(lr_router_move(r, 500 + k, 1), LR_OK);
    }
    assert_int_equal(resident(r, 1, h, 8), 4);
    lr_candidate rows[2];
    lr_request q;
    lr_request_init(&q);
    q.id = 900;
    q.tokens = t;
    q.n_tokens = 4 * BT;
    q.adapter = "hot";
    q.now_ns = now + 3 * MS;
    size_t got;
    assert_st(lr_router_candidates(r, &q, rows, 2, sizeof rows[0], &got),
              LR_OK);
    assert_int_equal(got, 2);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rows[k].adapter_missing, 0);
        assert_int_equal(rows[k].adapter_free, 0);
    }
    /* one adapter more ahead on instance 0: 0.4 s more */
    double more = rows[0].ttft_base_s - rows[1].ttft_base_s;
    if (fabs(more - 0.4) > 0.1)
        fail_msg("%.3f s more for one adapter more ahead, want 0.4", more);
    for (uint64_t k = 0; k < 16; k++) {
        toks(t, 4 * BT, 700 + k);
        assert_st(route_named(r, 700 + k, t, 4 * BT, NULL, "hot",
                              LR_ROUTE_DRY_RUN, now + 3 * MS, &d),
                  LR_OK);
        assert_int_equal(d.instance, 1);
    }
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* ---- a waiting request keeps its names and inputs ------------------------------------- */

static void
waiting_keeps_names(void **state)
{
    (void)state;
    lr_router *r = mk(LR_POLICY_LEAST_REQUEST, 4);
    const char *m0[] = { "m0" }, *m1[] = { "m1" };
    uint32_t id;
    assert_st(add_served(r, 0, m0, 1, 2, &id), LR_OK);
    assert_st(add_served(r, 1, m1, 1, 2, &id), LR_OK);
    assert_st(lr_router_set_param(r, LR_PARAM_SATURATION_QUEUE, 1), LR_OK);
    uint32_t t[2 * BT];
    toks(t, 2 * BT, 1);
    lr_decision d;
    assert_st(route_named(r, 1, t, 2 * BT, "m0", NULL, 0, T0, &d), LR_OK);
    assert_int_equal(d.instance, 0);
    assert_st(route_named(r, 2, t, 2 * BT, "m1", NULL, 0, T0, &d), LR_OK);
    assert_int_equal(d.instance, 1);
    char model[8], adapter[8], image[8];
    strcpy(model, "m0");
    strcpy(adapter, "lx");
    strcpy(image, "img-1");
    lr_mm_input mm[2] = { { image, 2, 3 }, { image, BT + 2, 4 } };
    lr_request q;
    lr_request_init(&q);
    q.id = 3;
    q.tokens = t;
    q.n_tokens = 2 * BT;
    q.model = model;
    q.adapter = adapter;
    q.mm = mm;
    q.n_mm = 2;
    q.flags = LR_ROUTE_MAY_WAIT;
    q.now_ns = T0 + MS;
    lr_decision_init(&d);
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.instance, NONE);
    assert_reason(d, LR_REASON_WAITING);
    memset(model, 'q', sizeof model - 1); /* the caller's buffers go */
    memset(adapter, 'q', sizeof adapter - 1);
    memset(image, 'q', sizeof image - 1);
    memset(mm, 0, sizeof mm);
    assert_st(lr_router_first_token(r, 1, T0 + 2 * MS), LR_OK);
    lr_dispatched out[2];
    size_t n = 0;
    assert_st(lr_router_dispatch(r, T0 + 3 * MS, out, 2, sizeof out[0], &n),
              LR_OK);
    assert_int_equal(n, 1);
    assert_st(out[0].status, LR_OK);
    assert_int_equal(out[0].instance, 0);
    uint64_t h[4];
    assert_int_equal(resident(r, 0, h, 4), 1);
    assert_true(h[0] == hash_of("lx"));
    /* it was learned with its inputs: the same inputs find both blocks,
     * another image in block 1 only block 0 (a policy that matches) */
    assert_st(lr_router_set_policy(r, LR_POLICY_PREFIX_CACHE), LR_OK);
    for (int c = 0; c < 2; c++) {
        const lr_mm_input again[2] = { { "img-1", 2, 3 },
                                       { c ? "img-2" : "img-1", BT + 2, 4 } };
        lr_request_init(&q);
        q.id = 4;
        q.tokens = t;
        q.n_tokens = 2 * BT;
        q.model = "m0";
        q.adapter = "lx";
        q.mm = again;
        q.n_mm = 2;
        q.now_ns = T0 + 4 * MS;
        lr_candidate rows[2];
        size_t nr = 0;
        assert_st(lr_router_candidates(r, &q, rows, 2, sizeof rows[0], &nr),
                  LR_OK);
        assert_int_equal(nr, 1);
        assert_int_equal(rows[0].cached_tokens, c ? BT : 2 * BT);
    }
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* ---- snapshots -------------------------------------------------------------------- */

static lr_router *
modeled_fleet(const lr_allocator *a)
{
    lr_router *r = mk_on(a, LR_POLICY_PREFIX_CACHE_AND_LOAD, 8);
    const char *m0[] = { "m0", "alias" }, *m1[] = { "m1" };
    uint32_t id;
    assert_st(add_served(r, 0, m0, 2, 4, &id), LR_OK);
    assert_st(add_served(r, 1, m1, 1, 0, &id), LR_OK);
    assert_st(add_served(r, 2, NULL, 0, 8, &id), LR_OK);
    assert_st(add_served(r, 3, NULL, 0, 0, &id), LR_OK);
    uint32_t t[4 * BT];
    toks(t, 4 * BT, 1);
    lr_decision d;
    assert_st(route_named(r, 1, t, 4 * BT, "alias", "a", 0, T0, &d), LR_OK);
    return r;
}

static void
snapshot_keeps_models(void **state)
{
    (void)state;
    lr_router *a = modeled_fleet(NULL);
    lr_blob *sa = NULL;
    assert_st(lr_router_snapshot(a, T0 + SEC, &sa), LR_OK);
    lr_router *b = mk(LR_POLICY_PREFIX_CACHE_AND_LOAD, 8);
    assert_st(
        lr_router_restore(b, lr_blob_data(sa), lr_blob_size(sa), T0 + SEC),
        LR_OK);
    assert_router_ok(b);
    lr_blob *sb = NULL;
    assert_st(lr_router_snapshot(b, T0 + SEC, &sb), LR_OK);
    assert_int_equal(lr_blob_size(sa), lr_blob_size(sb));
    assert_memory_equal(lr_blob_data(sa), lr_blob_data(sb), lr_blob_size(sa));
    uint32_t t[BT];
    toks(t, BT, 9);
    lr_decision d;
    for (uint64_t k = 10; k < 30; k++) {
        assert_st(route_named(b, k, t, BT, "m1", NULL, 0, T0 + SEC + k, &d),
                  LR_OK);
        assert_true(d.instance == 1 || d.instance >= 2);
        assert_st(
            route_named(b, 100 + k, t, BT, "m0", NULL, 0, T0 + SEC + k, &d),
            LR_OK);
        assert_true(d.instance != 1);
    }
    assert_st(route_named(b, 99, t, BT, "m9", NULL, 0, T0 + 2 * SEC, &d),
              LR_OK); /* instances 2 and 3 serve every model */
    assert_true(d.instance >= 2);
    lr_blob_destroy(sa);
    lr_blob_destroy(sb);
    lr_router_destroy(a);
    lr_router_destroy(b);
}

struct oom_snap {
    lr_blob *snap;
};

static bool
sc_restore(struct tu_alloc *t, void *ctx)
{
    struct oom_snap *c = ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *b = mk_on(&t->a, LR_POLICY_PREFIX_CACHE_AND_LOAD, 8);
    uint64_t d0 = lr__router_digest(b);
    size_t live0 = lr__router_mem_live(b);
    tu_alloc_resume(t, arm);
    lr_status st = lr_router_restore(b, lr_blob_data(c->snap),
                                     lr_blob_size(c->snap), T0 + SEC);
    bool failed = t->failed;
    (void)tu_alloc_pause(t);
    assert_true(st == LR_OK || st == LR_ENOMEM);
    if (st == LR_ENOMEM) {
        assert_true(lr__router_digest(b) == d0);
        assert_int_equal(lr__router_mem_live(b), live0);
    } else {
        assert_int_equal(lr_router_instance_count(b), 4);
        assert_router_ok(b);
    }
    lr_router_destroy(b);
    t->failed = failed;
    return st == LR_OK && !failed;
}

/* An add with models and slots under allocation failures: all or
 * nothing. */
static bool
sc_add(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *r = modeled_fleet(&t->a);
    uint64_t d0 = lr__router_digest(r);
    tu_alloc_resume(t, arm);
    const char *ms[] = { "m5", "m6", "m5" };
    uint32_t id = NONE;
    lr_status st = add_served(r, 7, ms, 3, 16, &id);
    bool failed = t->failed;
    (void)tu_alloc_pause(t);
    assert_true(st == LR_OK || st == LR_ENOMEM);
    if (st == LR_ENOMEM)
        assert_true(lr__router_digest(r) == d0);
    else
        assert_int_equal(lr_router_instance_count(r), 5);
    assert_router_ok(r);
    lr_router_destroy(r);
    t->failed = failed;
    return st == LR_OK && !failed;
}

static void
oom_models(void **state)
{
    (void)state;
    lr_router *a = modeled_fleet(NULL);
    struct oom_snap c = { NULL };
    assert_st(lr_router_snapshot(a, T0 + SEC, &c.snap), LR_OK);
    lr_router_destroy(a);
    tu_oom_loop(sc_restore, &c, 2000);
    tu_oom_loop(sc_add, NULL, 200);
    lr_blob_destroy(c.snap);
}

/* ---- bad input ---------------------------------------------------------------------- */

static void
bad_names(void **state)
{
    (void)state;
    lr_router *r = modeled_fleet(NULL);
    char longname[LR_ROUTER_MAX_NAME + 2];
    memset(longname, 'm', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    uint32_t t[BT];
    toks(t, BT, 3);
    lr_decision d;
    uint64_t d1 = lr__router_digest(r);
    assert_st(route_named(r, 5, t, BT, longname, NULL, 0, T0 + MS, &d),
              LR_EINVAL);
    assert_st(route_named(r, 5, t, BT, NULL, longname, 0, T0 + MS, &d),
              LR_EINVAL);
    assert_true(lr__router_digest(r) == d1);
    longname[LR_ROUTER_MAX_NAME] = '\0'; /* 255 bytes: a name */
    assert_st(
        route_named(r, 5, t, BT, NULL, longname, LR_ROUTE_DRY_RUN, T0 + MS, &d),
        LR_OK);
    uint64_t d0 = lr__router_digest(r);
    /* a model no instance serves, when every instance declares models */
    lr_router *s = mk(LR_POLICY_ROUND_ROBIN, 4);
    const char *m0[] = { "m0" };
    uint32_t id;
    assert_st(add_served(s, 0, m0, 1, 0, &id), LR_OK);
    assert_st(route_named(s, 1, t, BT, "nope", NULL, 0, T0, &d), LR_ENOENT);
    assert_st(lr_router_drain_instance(s, 0, 1), LR_OK);
    assert_st(route_named(s, 1, t, BT, "m0", NULL, 0, T0, &d), LR_ESTATE);
    lr_router_destroy(s);

    const char *too_many[LR_ROUTER_MAX_MODELS + 1];
    for (size_t i = 0; i <= LR_ROUTER_MAX_MODELS; i++)
        too_many[i] = "m";
    const char *null_one[] = { "m0", NULL }, *empty[] = { "" };
    const char *long_one[] = { longname };
    longname[LR_ROUTER_MAX_NAME] = 'm';
    assert_st(add_served(r, 9, too_many, LR_ROUTER_MAX_MODELS + 1, 0, &id),
              LR_EINVAL);
    assert_st(add_served(r, 9, null_one, 2, 0, &id), LR_EINVAL);
    assert_st(add_served(r, 9, empty, 1, 0, &id), LR_EINVAL);
    assert_st(add_served(r, 9, long_one, 1, 0, &id), LR_EINVAL);
    assert_st(add_served(r, 9, NULL, 1, 0, &id), LR_EINVAL);
    assert_st(add_served(r, 9, NULL, 0, LR_ROUTER_MAX_ADAPTERS + 1, &id),
              LR_ERANGE);
    /* a request may move only to an instance of its model */
    assert_st(lr_router_move(r, 1, 1), LR_ESTATE);
    assert_true(lr__router_digest(r) == d0);
    assert_router_ok(r);
    lr_router_destroy(r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(name_hash_and_salt),
        cmocka_unit_test(adapter_prefixes_apart),
        cmocka_unit_test(models_differential),
        cmocka_unit_test(round_robin_per_model),
        cmocka_unit_test(residency_follows_routes),
        cmocka_unit_test(report_replaces_guesses),
        cmocka_unit_test(lora_affinity_rule),
        cmocka_unit_test(aibrix_lora_rule),
        cmocka_unit_test(adaptive_learns_load_time),
        cmocka_unit_test(adaptive_counts_reported_waiting),
        cmocka_unit_test(waiting_keeps_names),
        cmocka_unit_test(snapshot_keeps_models),
        cmocka_unit_test(oom_models),
        cmocka_unit_test(bad_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
