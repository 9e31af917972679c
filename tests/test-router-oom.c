/* Allocation-failure loops over lr_router (B33): every allocation of one
 * call fails in turn (once, then from then on). The call must return
 * LR_ENOMEM, or LR_OK once the failing index lies past its allocations;
 * after a failure the router is exactly as it was (lr__router_digest), its
 * invariants hold (lr__router_verify), and destroy leaves nothing live
 * (tu_oom_loop checks the allocator's counters). */
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
add(lr_router *r, uint32_t i)
{
    assert_int_equal(add_instance(r, "10.1", i, i % 3, (i + 1) * MS), i);
}

/* A router on `a` with n_inst instances and some history: learned prompts
 * sharing prefixes, requests in flight (queued and decoding), a scrape. */
static lr_router *
populated(const lr_allocator *a, lr_policy policy, uint32_t n_inst)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = a;
    o.policy = policy;
    o.seed = 7;
    o.max_instances = n_inst + 8;
    o.max_requests = 256;
    o.index_capacity_blocks = 1u << 14;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < n_inst; i++)
        add(r, i);
    if (n_inst == 0)
        return r;
    uint32_t t[700];
    for (uint64_t k = 0; k < 8; k++) {
        toks(t, 700, 10 + k % 3);
        t[400] = (uint32_t)k;
        assert_st(route_one(r, 100 + k, t, 700, 0, T0 + k * MS, NULL), LR_OK);
    }
    assert_st(lr_router_first_token(r, 101, T0 + 20 * MS), LR_OK);
    assert_st(lr_router_complete(r, 102, 5, T0 + 30 * MS), LR_OK);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.running = 3;
    s.scraped_ns = T0;
    assert_st(lr_router_set_stats(r, 0, &s), LR_OK);
    assert_st(lr__router_verify(r), LR_OK);
    return r;
}

/* Common frame: build disarmed, re-arm, run `op`, disarm, check. */
typedef lr_status (*op_fn)(lr_router *r, void *ctx);

struct frame {
    lr_policy policy;
    uint32_t n_inst;
    op_fn op;
    void *ctx;
};

static bool
sc_frame(struct tu_alloc *t, void *vctx)
{
    const struct frame *f = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *r = populated(&t->a, f->policy, f->n_inst);
    uint64_t before = lr__router_digest(r);
    tu_alloc_resume(t, arm);
    lr_status st = f->op(r, f->ctx);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        if (lr__router_digest(r) != before)
            fail_msg("digest changed after LR_ENOMEM (policy %s, "
                     "allocation %llu%s)",
                     lr_policy_name(f->policy), (unsigned long long)arm.fail_at,
                     arm.forever ? " on" : "");
    } else {
        assert_st(st, LR_OK);
    }
    assert_st(lr__router_verify(r), LR_OK);
    lr_router_destroy(r);
    return !failed;
}

/* ---- create ------------------------------------------------------------------ */

static bool
sc_create(struct tu_alloc *t, void *ctx)
{
    const lr_policy *policy = ctx;
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = &t->a;
    o.policy = *policy;
    o.max_instances = 16;
    o.max_requests = 64;
    lr_router *r = (lr_router *)&o;
    lr_status st = lr_router_create(&o, &r);
    if (st == LR_ENOMEM) {
        assert_true(t->failed);
        assert_null(r);
        return false;
    }
    assert_st(st, LR_OK);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    add(r, 0);
    uint32_t tok[64];
    toks(tok, 64, 1);
    assert_st(route_one(r, 1, tok, 64, 0, T0, NULL), LR_OK);
    assert_st(lr__router_verify(r), LR_OK);
    lr_router_destroy(r);
    return !failed;
}

static void
oom_create(void **state)
{
    (void)state;
    lr_policy p = LR_POLICY_DUALMAP;
    tu_oom_loop(sc_create, &p, 200);
    p = LR_POLICY_RANDOM;
    tu_oom_loop(sc_create, &p, 200);
    p = LR_POLICY_LODESTAR; /* makes its learner at create */
    tu_oom_loop(sc_create, &p, 200);
    p = LR_POLICY_ADAPTIVE; /* its calibration and the recency table */
    tu_oom_loop(sc_create, &p, 200);
}

/* ---- set_policy: a policy's own state is made on first use, all or
 * nothing
 * ---------------------------------------------------------------------- */

static lr_status
op_set_policy(lr_router *r, void *ctx)
{
    lr_policy to = *(const lr_policy *)ctx;
    lr_policy was = lr_router_policy(r);
    lr_status st = lr_router_set_policy(r, to);
    assert_int_equal(lr_router_policy(r), st == LR_OK ? to : was);
    return st;
}

static void
oom_set_policy(void **state)
{
    (void)state;
    /* dualmap: its hotness window is made on first use */
    static const lr_policy to[] = { LR_POLICY_ADAPTIVE, LR_POLICY_LODESTAR,
                                    LR_POLICY_DUALMAP };
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        struct frame f = { LR_POLICY_RANDOM, 4, op_set_policy, (void *)&to[i] };
        tu_oom_loop(sc_frame, &f, 200);
    }
    /* lodestar first (its learner), then adaptive (the rest) */
    static const lr_policy ad = LR_POLICY_ADAPTIVE;
    struct frame f = { LR_POLICY_LODESTAR, 4, op_set_policy, (void *)&ad };
    tu_oom_loop(sc_frame, &f, 200);
}

/* ---- add_instance --------------------------------------------------------------- */

static lr_status
op_add(lr_router *r, void *ctx)
{
    (void)ctx;
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = "10.9.9.9:8000";
    uint32_t id = LR_INSTANCE_NONE;
    lr_status st = lr_router_add_instance(r, &s, &id);
    if (st == LR_OK) {
        assert_int_equal(lr_router_find_instance(r, s.name, &id), LR_OK);
    } else {
        assert_int_equal(lr_router_find_instance(r, s.name, &id), LR_ENOENT);
    }
    return st;
}

static void
oom_add_instance(void **state)
{
    (void)state;
    struct frame f = { LR_POLICY_DUALMAP, 4, op_add, NULL };
    tu_oom_loop(sc_frame, &f, 200);
    f.n_inst = 0; /* the first instance: the ring starts its tables */
    tu_oom_loop(sc_frame, &f, 200);
}

/* ---- route ---------------------------------------------------------------------- */

static lr_status
op_route(lr_router *r, void *ctx)
{
    (void)ctx;
    /* a fresh 3000-token prompt, sharing its first 300 tokens with the
     * history: the key scratch and the index grow */
    static uint32_t t[3000];
    toks(t, 700, 10);
    toks(t + 300, 2700, 4242);
    lr_status st = route_one(r, 9999, t, 3000, 0, T0 + 40 * MS, NULL);
    if (st != LR_OK)
        assert_st(lr_router_first_token(r, 9999, T0 + 50 * MS), LR_ENOENT);
    return st;
}

static void
oom_route(void **state)
{
    (void)state;
    static const lr_policy all[] = { POLICIES_WITHOUT_LEARNER,
                                     LR_POLICY_LODESTAR };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        struct frame f = { all[i], 4, op_route, NULL };
        tu_oom_loop(sc_frame, &f, 400);
    }
}

static void
oom_route_many_instances(void **state)
{
    (void)state;
    /* more instances than the on-stack score scratch holds */
    struct frame f = { LR_POLICY_PREFIX_CACHE_AND_LOAD, 300, op_route, NULL };
    tu_oom_loop(sc_frame, &f, 400);
}

/* ---- set_param -------------------------------------------------------------------- */

static lr_status
op_window(lr_router *r, void *ctx)
{
    const double *v = ctx;
    double old;
    assert_st(lr_router_get_param(r, LR_PARAM_DUALMAP_WINDOW, &old), LR_OK);
    lr_status st = lr_router_set_param(r, LR_PARAM_DUALMAP_WINDOW, *v);
    double now;
    assert_st(lr_router_get_param(r, LR_PARAM_DUALMAP_WINDOW, &now), LR_OK);
    assert_true(now == (st == LR_OK ? *v : old));
    return st;
}

static lr_status
op_key_blocks(lr_router *r, void *ctx)
{
    (void)ctx;
    return lr_router_set_param(r, LR_PARAM_DUALMAP_MAX_KEY_BLOCKS, 4);
}

/* Lodestar falling back to DualMap needs DualMap's hotness window: made
 * by the set_param, all or nothing (the fallback stays as it was). */
static lr_status
op_fallback_dualmap(lr_router *r, void *ctx)
{
    (void)ctx;
    double old, now;
    assert_st(lr_router_get_param(r, LR_PARAM_LODESTAR_FALLBACK, &old), LR_OK);
    lr_status st =
        lr_router_set_param(r, LR_PARAM_LODESTAR_FALLBACK, LR_POLICY_DUALMAP);
    assert_st(lr_router_get_param(r, LR_PARAM_LODESTAR_FALLBACK, &now), LR_OK);
    assert_true(now == (st == LR_OK ? LR_POLICY_DUALMAP : old));
    return st;
}

static void
oom_set_param(void **state)
{
    (void)state;
    double w = 64;
    struct frame f = { LR_POLICY_DUALMAP, 4, op_window, &w };
    tu_oom_loop(sc_frame, &f, 50);
    w = 4096;
    tu_oom_loop(sc_frame, &f, 50);
    f.op = op_key_blocks;
    tu_oom_loop(sc_frame, &f, 50);
    struct frame h = { LR_POLICY_LODESTAR, 4, op_fallback_dualmap, NULL };
    tu_oom_loop(sc_frame, &h, 50);
}

/* ---- kv_stored ---------------------------------------------------------------------- */

static lr_status
op_kv_stored(lr_router *r, void *ctx)
{
    (void)ctx;
    static uint32_t t[40 * BT];
    toks(t, 40 * BT, 5151);
    uint64_t h[40];
    for (int i = 0; i < 40; i++)
        h[i] = 0xe000 + (uint64_t)i;
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = h;
    ev.n_blocks = 40;
    ev.block_size = BT;
    ev.token_ids = t;
    ev.n_tokens = 40 * BT;
    return lr_router_kv_stored(r, 1, &ev, T0 + 40 * MS);
}

static void
oom_kv_stored(void **state)
{
    (void)state;
    struct frame f = { LR_POLICY_DYNAMO, 4, op_kv_stored, NULL };
    tu_oom_loop(sc_frame, &f, 200);
}

/* ---- import_delta --------------------------------------------------------------------- */

static lr_status
op_import(lr_router *r, void *ctx)
{
    const lr_blob *b = ctx;
    return lr_router_import_delta(r, lr_blob_data(b), lr_blob_size(b),
                                  T0 + 40 * MS);
}

static void
oom_import_delta(void **state)
{
    (void)state;
    /* a peer replica with the same instance names learned other prompts */
    lr_router_options o;
    lr_router_options_init(&o);
    o.max_instances = 12;
    o.policy = LR_POLICY_ROUND_ROBIN;
    lr_router *peer;
    assert_st(lr_router_create(&o, &peer), LR_OK);
    for (uint32_t i = 0; i < 4; i++)
        add(peer, i);
    static uint32_t t[900];
    for (uint64_t k = 0; k < 12; k++) {
        toks(t, 900, 600 + k % 4);
        t[500] = (uint32_t)k;
        assert_st(route_one(peer, k + 1, t, 900, 0, T0 + k, NULL), LR_OK);
    }
    lr_blob *b = NULL;
    uint64_t mark;
    assert_st(lr_router_export_delta(peer, 0, &b, &mark), LR_OK);
    lr_router_destroy(peer);
    struct frame f = { LR_POLICY_RANVIER, 4, op_import, b };
    tu_oom_loop(sc_frame, &f, 300);
    lr_blob_destroy(b);
}

/* ---- rebalance_plan --------------------------------------------------------------------- */

static lr_status
op_plan(lr_router *r, void *ctx)
{
    (void)ctx;
    assert_st(lr_router_set_param(r, LR_PARAM_TTFT_SLO_S, 0.001), LR_OK);
    uint64_t before = lr__router_digest(r);
    lr_move mv[8];
    size_t n = 99;
    /* plans use scratch reserved at create: no allocation can fail one */
    lr_status st =
        lr_router_rebalance_plan(r, T0 + 40 * MS, mv, 8, sizeof mv[0], &n);
    assert_st(st, LR_OK);
    assert_true(lr__router_digest(r) == before);
    /* undo the SLO so the frame's digest comparison is about the plan */
    assert_st(lr_router_set_param(r, LR_PARAM_TTFT_SLO_S, 5), LR_OK);
    return st;
}

/* A plan uses scratch reserved at create: with every allocation failing
 * from the first one after setup, it still succeeds and allocates nothing. */
static void
oom_rebalance_plan(void **state)
{
    (void)state;
    struct tu_alloc t;
    tu_alloc_init(&t);
    struct frame f = { LR_POLICY_DUALMAP, 4, op_plan, NULL };
    tu_alloc_arm(&t, 1, true);
    assert_true(sc_frame(&t, &f)); /* sc_frame: true when nothing failed */
    assert_int_equal(t.live_bytes, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oom_create),
        cmocka_unit_test(oom_add_instance),
        cmocka_unit_test(oom_set_policy),
        cmocka_unit_test(oom_route),
        cmocka_unit_test(oom_route_many_instances),
        cmocka_unit_test(oom_set_param),
        cmocka_unit_test(oom_kv_stored),
        cmocka_unit_test(oom_import_delta),
        cmocka_unit_test(oom_rebalance_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
