/* lr_router's waiting queue (lr_router.h, "Waiting"): saturation from the
 * router's counters and from scrapes (stale ones too), waiting and
 * dispatch, urgency and fair share, shedding, expiry, cancellation, the
 * limits and bad input; below saturation a request that may wait is
 * routed exactly as one that may not; a differential run against a naive
 * model (admit-model.h's queue and per-instance counters) over random
 * operations, checking that every request ends exactly one way; and the
 * allocation-failure loops of route() and dispatch(). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admit-model.h"
#include "libroute/lr_router.h"
#include "router-helpers.h"
#include "router/router.h"
#include "testutil.h"

#define WAIT LR_ROUTE_MAY_WAIT
#define SHED LR_ROUTE_SHEDDABLE
#define NONE LR_INSTANCE_NONE

static lr_router *
mk_on(const lr_allocator *a, uint32_t n_inst, uint32_t depth, uint32_t capacity)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = a;
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.seed = 3;
    o.max_instances = 8;
    o.max_requests = 256;
    o.queue_capacity = capacity;
    o.queue_tenants = 8;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < n_inst; i++)
        assert_int_equal(add_instance(r, "10.2", i, 0, 0), i);
    assert_st(lr_router_set_param(r, LR_PARAM_SATURATION_QUEUE, depth), LR_OK);
    return r;
}

static lr_router *
mk(uint32_t n_inst, uint32_t depth)
{
    return mk_on(NULL, n_inst, depth, 64);
}

/* Route request `id` (prompt of n tokens from seed id) with flags, tenant,
 * urgency and deadline at now; *d gets the decision. */
/* Requests carry an image (placeholder tokens 2..6) when set. */
static bool rq_mm;

static lr_status
rq(lr_router *r, uint64_t id, size_t n, uint32_t flags, uint64_t tenant,
   uint32_t urgency, uint64_t deadline, uint64_t now, lr_decision *d)
{
    uint32_t t[512];
    assert_true(n <= 512);
    toks(t, n, id);
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = t;
    q.n_tokens = n;
    q.flags = flags;
    q.tenant = tenant;
    q.urgency = urgency;
    q.deadline_ns = deadline;
    q.expected_output_tokens = 10;
    q.now_ns = now;
    const lr_mm_input img = { "img-0", 2, 5 };
    if (rq_mm && n >= 7) {
        q.mm = &img;
        q.n_mm = 1;
    }
    lr_decision local;
    if (d == NULL)
        d = &local;
    lr_decision_init(d);
    return lr_router_route(r, &q, d);
}

/* Dispatch at now into out[cap]; the count. */
static size_t
disp(lr_router *r, uint64_t now, lr_dispatched *out, size_t cap)
{
    size_t n = 99;
    assert_st(lr_router_dispatch(r, now, out, cap, sizeof *out, &n), LR_OK);
    assert_router_ok(r);
    return n;
}

static lr_router_stats
stats(lr_router *r)
{
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    return s;
}

static int32_t
saturated(lr_router *r, uint64_t now)
{
    int32_t s = -1;
    assert_st(lr_router_saturated(r, now, &s), LR_OK);
    return s;
}

/* ---- saturation, waiting, dispatch ------------------------------------------------ */

static void
waits_when_saturated_and_goes_when_room(void **state)
{
    (void)state;
    lr_router *r = mk(2, 2);
    lr_decision d;
    assert_int_equal(saturated(r, T0), 0);
    for (uint64_t id = 1; id <= 4; id++) { /* 2 x 2: saturated after */
        assert_st(rq(r, id, 64, WAIT, 0, 3, 0, T0, &d), LR_OK);
        assert_int_not_equal(d.instance, NONE);
    }
    assert_int_equal(saturated(r, T0), 1);
    assert_st(rq(r, 5, 64, WAIT, 0, 3, 0, T0 + MS, &d), LR_OK);
    assert_int_equal(d.instance, NONE);
    assert_reason(d, LR_REASON_WAITING);
    assert_true(isnan(d.cost));
    lr_router_stats s = stats(r);
    assert_int_equal(s.waiting, 1);
    assert_int_equal(s.waiting_tokens, 64);
    assert_int_equal(s.waited, 1);
    assert_int_equal(s.inflight, 4);
    /* first_token/complete know nothing of a waiting request */
    assert_st(lr_router_first_token(r, 5, T0 + MS), LR_ENOENT);
    lr_dispatched out[4];
    assert_int_equal(disp(r, T0 + 2 * MS, out, 4), 0); /* still full */
    assert_st(lr_router_first_token(r, 1, T0 + 3 * MS), LR_OK);
    assert_int_equal(disp(r, T0 + 10 * MS, out, 4), 1);
    assert_int_equal(out[0].request_id, 5);
    assert_st(out[0].status, LR_OK);
    lr_load_snapshot ls;
    lr_load_snapshot_init(&ls);
    assert_st(lr_router_instance_load(r, out[0].instance, &ls), LR_OK);
    assert_int_equal(ls.queued, 2); /* where request 1 had its first token */
    assert_int_equal(out[0].waited_ns, 9 * MS);
    s = stats(r);
    assert_int_equal(s.waiting, 0);
    assert_int_equal(s.waiting_tokens, 0);
    assert_int_equal(s.waited_dispatched, 1);
    assert_int_equal(s.wait_ns, 9 * MS);
    assert_int_equal(s.inflight, 5);
    /* dispatched: now an ordinary request in flight */
    assert_st(lr_router_first_token(r, 5, T0 + 11 * MS), LR_OK);
    assert_st(lr_router_complete(r, 5, 3, T0 + 12 * MS), LR_OK);
    lr_router_destroy(r);
}

/* Below saturation a request that may wait is routed as any request: the
 * same decisions, seed for seed, with and without the flag. */
static void
below_saturation_nothing_changes(void **state)
{
    (void)state;
    lr_policy ps[] = { POLICIES_WITHOUT_LEARNER };
    for (size_t p = 0; p < sizeof ps / sizeof ps[0]; p++) {
        lr_router *a = mk(4, 1000), *b = mk(4, 1000);
        assert_st(lr_router_set_policy(a, ps[p]), LR_OK);
        assert_st(lr_router_set_policy(b, ps[p]), LR_OK);
        for (uint64_t id = 1; id <= 60; id++) {
            lr_decision da, db;
            uint64_t now = T0 + id * MS;
            assert_st(rq(a, id, 16 * (id % 9), 0, 0, 0, 0, now, &da), LR_OK);
            assert_st(
                rq(b, id, 16 * (id % 9), WAIT, id % 3, id % 8, 0, now, &db),
                LR_OK);
            assert_int_equal(da.instance, db.instance);
            assert_int_equal(da.reason, db.reason);
            assert_int_equal(da.seed, db.seed);
            if (id % 4 == 0) {
                assert_st(lr_router_first_token(a, id - 2, now), LR_OK);
                assert_st(lr_router_first_token(b, id - 2, now), LR_OK);
            }
        }
        assert_int_equal(stats(b).waited, 0);
        lr_router_destroy(a);
        lr_router_destroy(b);
    }
}

/* The most urgent band first; within a band the tenant served least, and
 * a tenant's requests in arrival order; a request never overtakes those
 * at least as urgent. */
static void
order_urgency_then_fair_share(void **state)
{
    (void)state;
    lr_router *r = mk(1, 1);
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK); /* saturates */
    /* tenant 7 sends 6 requests, then tenants 8 and 9 one each; a batch
     * request (urgency 5) and an urgent one (0) come last */
    uint64_t id = 10;
    for (int k = 0; k < 6; k++, id++)
        assert_st(rq(r, id, 32, WAIT, 7, 3, 0, T0 + id * MS, NULL), LR_OK);
    assert_st(rq(r, 20, 32, WAIT, 8, 3, 0, T0 + 20 * MS, NULL), LR_OK);
    assert_st(rq(r, 21, 32, WAIT, 9, 3, 0, T0 + 21 * MS, NULL), LR_OK);
    assert_st(rq(r, 22, 32, WAIT, 8, 5, 0, T0 + 22 * MS, NULL), LR_OK);
    assert_st(rq(r, 23, 32, WAIT, 9, 0, 0, T0 + 23 * MS, NULL), LR_OK);
    /* the counter is the tenant's, over every band: 23 charges tenant 9,
     * so at the tie after 20 tenant 7's 11 (earlier) goes before 21 */
    uint64_t want[] = { 23, 10, 20, 11, 21, 12, 13, 14, 15, 22 };
    uint64_t prev = 1, now = T0 + 30 * MS;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        lr_dispatched out[2];
        assert_int_equal(disp(r, now, out, 2), 0); /* prev holds it */
        assert_st(lr_router_first_token(r, prev, now), LR_OK);
        assert_int_equal(disp(r, now, out, 2), 1);
        if (out[0].request_id != want[k])
            fail_msg("dispatch %zu: request %llu, want %llu", k,
                     (unsigned long long)out[0].request_id,
                     (unsigned long long)want[k]);
        assert_int_equal(out[0].tenant,
                         want[k] >= 20 ? 8 + (want[k] - 20) % 2 : 7);
        prev = want[k];
        now += MS;
    }
    lr_router_destroy(r);
}

/* A request may not overtake waiting ones of its urgency or more, even
 * when there is room (the host has not dispatched yet); a more urgent
 * one may. */
static void
no_overtaking(void **state)
{
    (void)state;
    lr_router *r = mk(1, 1);
    lr_decision d;
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK);
    assert_st(rq(r, 2, 16, WAIT, 0, 4, 0, T0, &d), LR_OK);
    assert_int_equal(d.instance, NONE);
    assert_st(lr_router_first_token(r, 1, T0 + MS), LR_OK); /* room */
    assert_st(rq(r, 3, 16, WAIT, 0, 4, 0, T0 + MS, &d), LR_OK);
    assert_int_equal(d.instance, NONE); /* behind request 2 */
    assert_st(rq(r, 4, 16, WAIT, 0, 2, 0, T0 + MS, &d), LR_OK);
    assert_int_equal(d.instance, 0); /* nothing as urgent waits */
    lr_router_destroy(r);
}

static void
shed_when_saturated(void **state)
{
    (void)state;
    lr_router *r = mk(1, 1);
    lr_decision d;
    assert_st(rq(r, 1, 16, SHED, 0, 0, 0, T0, &d), LR_OK); /* room: goes */
    assert_int_equal(d.instance, 0);
    uint64_t before = lr__router_digest(r);
    assert_st(rq(r, 2, 16, SHED, 0, 0, 0, T0, &d), LR_EBUSY);
    assert_st(rq(r, 3, 16, SHED | WAIT, 0, 0, 0, T0, &d), LR_EBUSY);
    lr_router_stats s = stats(r);
    assert_int_equal(s.shed, 2);
    assert_int_equal(s.waited, 0);
    assert_int_equal(s.inflight, 1);
    (void)before;
    /* a plain request still goes at once, to a saturated fleet */
    assert_st(rq(r, 4, 16, 0, 0, 0, 0, T0, &d), LR_OK);
    assert_int_equal(d.instance, 0);
    lr_router_destroy(r);
}

static void
expire_and_cancel(void **state)
{
    (void)state;
    lr_router *r = mk(1, 1);
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK);
    assert_st(rq(r, 2, 16, WAIT, 0, 0, T0 + 50 * MS, T0, NULL), LR_OK);
    assert_st(rq(r, 3, 16, WAIT, 0, 0, T0 + 20 * MS, T0, NULL), LR_OK);
    assert_st(rq(r, 4, 16, WAIT, 0, 0, 0, T0, NULL), LR_OK);
    assert_st(rq(r, 5, 16, WAIT, 0, 0, T0 + 10 * MS, T0, NULL), LR_OK);
    assert_st(lr_router_fail(r, 5, T0 + MS), LR_OK); /* withdrawn */
    assert_st(lr_router_fail(r, 5, T0 + MS), LR_ENOENT);
    lr_dispatched out[4];
    assert_int_equal(disp(r, T0 + 60 * MS, out, 4), 2);
    assert_int_equal(out[0].request_id, 3); /* earliest deadline first */
    assert_st(out[0].status, LR_EEXPIRED);
    assert_int_equal(out[0].instance, NONE);
    assert_int_equal(out[0].waited_ns, 60 * MS);
    assert_int_equal(out[1].request_id, 2);
    assert_st(out[1].status, LR_EEXPIRED);
    lr_router_stats s = stats(r);
    assert_int_equal(s.waited, 4);
    assert_int_equal(s.waited_expired, 2);
    assert_int_equal(s.waited_cancelled, 1);
    assert_int_equal(s.waiting, 1);
    /* capacity bounds the entries: call again while it fills them */
    assert_st(lr_router_complete(r, 1, 1, T0 + 61 * MS), LR_OK);
    assert_int_equal(disp(r, T0 + 61 * MS, out, 0), 0);
    assert_int_equal(disp(r, T0 + 61 * MS, out, 1), 1);
    assert_int_equal(out[0].request_id, 4);
    lr_router_destroy(r);
}

/* A scrape saturates an instance (waiting, KV use); a stale scrape does
 * while the router has a request there; a never-scraped instance is
 * judged by the router's counters alone. */
static void
saturation_from_scrapes(void **state)
{
    (void)state;
    lr_router *r = mk(1, 4);
    lr_engine_stats es;
    lr_engine_stats_init(&es);
    es.scraped_ns = T0;
    es.waiting = 4;
    assert_st(lr_router_set_stats(r, 0, &es), LR_OK);
    assert_int_equal(saturated(r, T0), 1);
    es.waiting = 3;
    es.kv_use = 0.85;
    assert_st(lr_router_set_stats(r, 0, &es), LR_OK);
    assert_int_equal(saturated(r, T0), 1);
    assert_st(lr_router_set_param(r, LR_PARAM_SATURATION_KV, 0.9), LR_OK);
    assert_int_equal(saturated(r, T0), 0);
    /* stale (10 s default age): room while nothing of ours is there */
    uint64_t late = T0 + 11 * SEC;
    assert_int_equal(saturated(r, late), 0);
    lr_decision d;
    assert_st(rq(r, 1, 16, WAIT, 0, 0, 0, late, &d), LR_OK);
    assert_int_equal(d.instance, 0);
    assert_int_equal(saturated(r, late), 1); /* one at a time */
    assert_st(rq(r, 2, 16, WAIT, 0, 0, 0, late, &d), LR_OK);
    assert_int_equal(d.instance, NONE);
    assert_st(lr_router_complete(r, 1, 1, late + MS), LR_OK);
    lr_dispatched out[2];
    assert_int_equal(disp(r, late + MS, out, 2), 1);
    assert_int_equal(out[0].request_id, 2);
    /* no routable instance: saturated; requests wait until one comes */
    assert_st(lr_router_drain_instance(r, 0, 1), LR_OK);
    assert_int_equal(saturated(r, late + MS), 1);
    assert_st(rq(r, 3, 16, WAIT, 0, 0, 0, late + MS, &d), LR_OK);
    assert_int_equal(d.instance, NONE);
    assert_int_equal(disp(r, late + 2 * MS, out, 2), 0);
    assert_int_equal(add_instance(r, "10.3", 1, 0, 0), 1);
    assert_int_equal(disp(r, late + 3 * MS, out, 2), 1);
    assert_int_equal(out[0].instance, 1);
    lr_router_destroy(r);
}

/* The prefill the router queued at an instance saturates it when it
 * would take LR_PARAM_SATURATION_PREFILL_S plus the instance's RTT at its
 * class's rate: at 1000 tokens/s and 0.15 s, 150 tokens; one request at
 * least, whatever its size (an instance with nothing queued has room). */
static void
saturation_from_queued_prefill(void **state)
{
    (void)state;
    lr_router *r = mk(1, 1000);
    lr_class_spec cs;
    lr_class_spec_init(&cs);
    cs.prefill_tokens_per_s = 1000;
    assert_st(lr_router_set_class(r, 0, &cs), LR_OK);
    assert_int_equal(saturated(r, T0), 0);
    assert_st(rq(r, 1, 128, 0, 0, 0, 0, T0, NULL), LR_OK);
    assert_int_equal(saturated(r, T0), 0); /* 0.128 s */
    assert_st(rq(r, 2, 32, 0, 0, 0, 0, T0, NULL), LR_OK);
    assert_int_equal(saturated(r, T0), 1); /* 0.16 s */
    assert_st(lr_router_first_token(r, 1, T0 + MS), LR_OK);
    assert_int_equal(saturated(r, T0 + MS), 0);
    assert_st(lr_router_set_param(r, LR_PARAM_SATURATION_PREFILL_S, 0.02),
              LR_OK);
    assert_int_equal(saturated(r, T0 + MS), 1); /* 32 tokens: 0.032 s */
    /* an instance 50 ms away needs that much more queued: it drains it
     * while the next request travels */
    assert_st(lr_router_observe_rtt(r, 0, 50 * MS), LR_OK);
    assert_int_equal(saturated(r, T0 + MS), 0); /* 0.032 < 0.07 */
    assert_st(rq(r, 3, 48, 0, 0, 0, 0, T0 + MS, NULL), LR_OK);
    assert_int_equal(saturated(r, T0 + MS), 1); /* 0.08 */
    lr_router_destroy(r);
}

/* ---- limits, bad input, the clock, ids ------------------------------------------- */

static void
limits_and_bad_input(void **state)
{
    (void)state;
    lr_router_options o;
    lr_router_options_init(&o);
    lr_router *r = NULL;
    o.queue_capacity = LR_ROUTER_MAX_WAITING + 1;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    lr_router_options_init(&o);
    o.queue_tenants = LR_ROUTER_MAX_TENANTS + 1;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    lr_router_options_init(&o);
    o.queue_tokens = LR_ROUTER_MAX_QUEUE_TOKENS + 1;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);

    r = mk_on(NULL, 1, 1, 3);
    lr_decision d;
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK);
    uint64_t before = lr__router_digest(r);
    assert_st(rq(r, 2, 16, WAIT, 0, LR_ROUTER_URGENCIES, 0, T0, &d), LR_EINVAL);
    assert_st(rq(r, 2, 16, WAIT, 0, 0, LR_ROUTER_MAX_TIME_NS + 1, T0, &d),
              LR_EINVAL);
    assert_st(rq(r, 2, 16, WAIT, 0, 0, 0, T0 + 3600 * SEC, &d), LR_ERANGE);
    assert_st(rq(r, 1, 16, WAIT, 0, 0, 0, T0, &d), LR_EEXIST); /* in flight */
    assert_true(lr__router_digest(r) == before);
    for (uint64_t id = 2; id <= 4; id++)
        assert_st(rq(r, id, 16, WAIT, 0, 0, 0, T0, &d), LR_OK);
    before = lr__router_digest(r);
    assert_st(rq(r, 3, 16, WAIT, 0, 0, 0, T0, &d), LR_EEXIST); /* waiting */
    assert_st(rq(r, 5, 16, WAIT, 0, 0, 0, T0, &d), LR_ELIMIT); /* 3 wait */
    assert_true(lr__router_digest(r) == before);
    assert_int_equal(stats(r).waiting, 3);
    /* dispatch's own checks */
    lr_dispatched out[2];
    size_t n = 9;
    assert_st(lr_router_dispatch(NULL, T0, out, 2, sizeof *out, &n), LR_EINVAL);
    assert_st(lr_router_dispatch(r, T0, NULL, 2, sizeof *out, &n), LR_EINVAL);
    assert_st(lr_router_dispatch(r, T0, out, 2, sizeof *out, NULL), LR_EINVAL);
    assert_st(lr_router_dispatch(r, T0, out, 2, LR_DISPATCHED_SIZE_V1 - 1, &n),
              LR_EINVAL);
    assert_st(lr_router_dispatch(r, T0 + 3600 * SEC, out, 2, sizeof *out, &n),
              LR_ERANGE);
    assert_int_equal(n, 0);
    assert_true(lr__router_digest(r) == before);
    assert_st(lr_router_saturated(r, T0, NULL), LR_EINVAL);
    int32_t sat;
    assert_st(lr_router_saturated(NULL, T0, &sat), LR_EINVAL);
    /* a larger stride: the tail of each entry zeroed */
    struct {
        lr_dispatched d;
        uint64_t pad[2];
    } big[2];
    memset(big, 0xab, sizeof big);
    assert_st(lr_router_first_token(r, 1, T0 + MS), LR_OK);
    assert_st(lr_router_dispatch(r, T0 + MS, &big[0].d, 2, sizeof big[0], &n),
              LR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(big[0].d.request_id, 2);
    assert_int_equal(big[0].pad[0], 0);
    assert_int_equal(big[0].pad[1], 0);
    /* its id came in flight meanwhile: dropped with LR_EEXIST */
    assert_st(lr_router_first_token(r, 2, T0 + 2 * MS), LR_OK);
    assert_st(rq(r, 3, 16, 0, 0, 0, 0, T0 + 2 * MS, &d), LR_OK);
    assert_st(lr_router_first_token(r, 3, T0 + 3 * MS), LR_OK);
    assert_int_equal(disp(r, T0 + 3 * MS, out, 2), 2);
    assert_int_equal(out[0].request_id, 3);
    assert_st(out[0].status, LR_EEXIST);
    assert_int_equal(out[1].request_id, 4);
    assert_st(out[1].status, LR_OK);
    lr_router_stats s = stats(r);
    assert_int_equal(s.waited_dropped, 1);
    assert_int_equal(s.waiting, 0);
    lr_router_destroy(r);

    /* the token bound */
    o = (lr_router_options){ 0 };
    lr_router_options_init(&o);
    o.queue_tokens = 40;
    assert_st(lr_router_create(&o, &r), LR_OK);
    assert_int_equal(add_instance(r, "10.4", 0, 0, 0), 0);
    assert_st(lr_router_set_param(r, LR_PARAM_SATURATION_QUEUE, 1), LR_OK);
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK);
    assert_st(rq(r, 2, 32, WAIT, 0, 0, 0, T0, &d), LR_OK);
    assert_st(rq(r, 3, 16, WAIT, 0, 0, 0, T0, &d), LR_ELIMIT);
    assert_st(rq(r, 4, 8, WAIT, 0, 0, 0, T0, &d), LR_OK);
    assert_int_equal(stats(r).waiting_tokens, 40);
    lr_router_destroy(r); /* with requests waiting: nothing leaks */
}

/* The router hands a request's deadline to the policy as its TTFT budget
 * (lr_policy_input.ttft_budget_s), so lr_policy_decide() replays it. */
static void
budget_in_policy_input(void **state)
{
    (void)state;
    lr_router *r = mk(1, 8);
    uint32_t t[16];
    toks(t, 16, 1);
    lr_request q;
    lr_request_init(&q);
    q.id = 1;
    q.tokens = t;
    q.n_tokens = 16;
    q.now_ns = T0;
    double params[64];
    uint64_t deadlines[] = { 0, T0 + 2 * SEC, T0, T0 - 1 };
    double want[] = { 0, 2.0, 1e-9, 1e-9 };
    for (size_t k = 0; k < 4; k++) {
        q.deadline_ns = deadlines[k];
        lr_policy_input in;
        lr_policy_input_init(&in);
        assert_st(lr_router_policy_input(r, &q, &in, params, 64), LR_OK);
        assert_true(in.ttft_budget_s == want[k]);
    }
    lr_router_destroy(r);
}

/* Past half full, a tenant holding its even share of the queue (among
 * the tenants waiting, it among them) gets LR_ELIMIT; the others still
 * find room. A tenant alone fills the queue. */
static void
fair_room_when_half_full(void **state)
{
    (void)state;
    lr_router *r = mk_on(NULL, 1, 1, 8);
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK); /* saturates */
    uint64_t id = 10;
    for (int k = 0; k < 3; k++)
        assert_st(rq(r, id++, 16, WAIT, 7, 3, 0, T0, NULL), LR_OK);
    assert_st(rq(r, id++, 16, WAIT, 8, 3, 0, T0, NULL), LR_OK);
    /* 4 of 8 wait: A (7) holds 3, B (8) 1 */
    assert_st(rq(r, id++, 16, WAIT, 7, 3, 0, T0, NULL), LR_OK); /* 4 x 2 */
    assert_st(rq(r, id++, 16, WAIT, 7, 3, 0, T0, NULL), LR_ELIMIT);
    assert_st(rq(r, id++, 16, WAIT, 8, 3, 0, T0, NULL), LR_OK);
    assert_st(rq(r, id++, 16, WAIT, 9, 3, 0, T0, NULL), LR_OK); /* C: 1 x 3 */
    assert_st(rq(r, id++, 16, WAIT, 8, 3, 0, T0, NULL), LR_ELIMIT); /* 3 x 3 */
    assert_int_equal(stats(r).waiting, 7);
    lr_router_destroy(r);
    /* alone, a tenant has the whole queue */
    r = mk_on(NULL, 1, 1, 8);
    assert_st(rq(r, 1, 16, 0, 0, 0, 0, T0, NULL), LR_OK);
    for (uint64_t k = 0; k < 8; k++)
        assert_st(rq(r, 10 + k, 16, WAIT, 7, 3, 0, T0, NULL), LR_OK);
    assert_st(rq(r, 20, 16, WAIT, 7, 3, 0, T0, NULL), LR_ELIMIT);
    lr_router_destroy(r);
}

/* ---- the differential run ------------------------------------------------------------ */

enum {
    D_IDLE,
    D_WAIT,
    D_QUEUED,
    D_DECODE,
    D_ENDED
};

#define D_IDS 400
#define D_INST 3

struct dm {
    struct am q;             /* the naive queue */
    uint32_t queued[D_INST]; /* requests before their first token */
    uint8_t state[D_IDS];
    uint32_t inst[D_IDS];
    uint32_t depth;
    uint64_t ends[5]; /* dispatched, expired, cancelled, shed,
                         routed at once */
};

static bool
dm_saturated(const struct dm *m)
{
    for (uint32_t i = 0; i < D_INST; i++)
        if (m->queued[i] < m->depth)
            return false;
    return true;
}

/* The queue's fair room (admission.c, written out): past half full (in
 * requests; the tokens stay far below their bound here), a tenant may
 * add a request only while it holds less than an even share among the
 * tenants waiting, it among them. */
static bool
dm_fair_room(const struct dm *m, uint64_t tenant, size_t n)
{
    (void)n;
    uint64_t tenants = 0, held = am_waiting(&m->q, tenant, -1);
    for (uint32_t i = 0; i < m->q.n; i++) {
        bool first = true; /* count each tenant once */
        for (uint32_t j = 0; j < i; j++)
            first &= m->q.r[j].q.tenant != m->q.r[i].q.tenant;
        tenants += first;
    }
    tenants += held == 0;
    if (2 * ((uint64_t)m->q.n + 1) <= m->q.max_waiting || tenants < 2)
        return true;
    return (held + 1) * tenants <= m->q.max_waiting;
}

static void
dm_place(struct dm *m, uint64_t id, uint32_t inst)
{
    assert_true(inst < D_INST);
    m->state[id] = D_QUEUED;
    m->inst[id] = inst;
    m->queued[inst]++;
}

static void
differential(void **state)
{
    (void)state;
    for (uint64_t round = 0; round < 40; round++) {
        uint64_t s = round * 7919 + 5;
        struct dm *m = calloc(1, sizeof *m);
        assert_non_null(m);
        m->depth = 1 + (uint32_t)tu_below(&s, 3);
        uint32_t cap = 8 + (uint32_t)tu_below(&s, 40);
        am_init(&m->q, cap, 8, LR_ROUTER_URGENCIES);
        lr_router *r = mk_on(NULL, D_INST, m->depth, cap);
        uint64_t next = 1, now = T0;
        for (int op = 0; op < 600; op++) {
            uint64_t k = tu_below(&s, 10);
            now += tu_below(&s, 3) * MS;
            if (k < 4 && next < D_IDS) { /* route */
                uint64_t id = next++;
                uint32_t fl = tu_below(&s, 8) == 0   ? SHED
                              : tu_below(&s, 8) == 0 ? 0
                                                     : WAIT;
                uint64_t tenant = tu_below(&s, 5);
                uint32_t urg = (uint32_t)tu_below(&s, 3) * 3;
                uint64_t dl =
                    tu_below(&s, 3) == 0 ? now + tu_below(&s, 40) * MS : 0;
                size_t n = 16 * tu_below(&s, 6);
                bool as_urgent = false;
                for (uint32_t i = 0; i < m->q.n; i++)
                    as_urgent |= m->q.r[i].q.band <= urg;
                bool must = fl != 0 && (as_urgent || dm_saturated(m));
                lr_decision d;
                lr_status st = rq(r, id, n, fl, tenant, urg, dl, now, &d);
                if (!must) {
                    assert_st(st, LR_OK);
                    dm_place(m, id, d.instance);
                    m->ends[4]++;
                } else if (fl & SHED) {
                    assert_st(st, LR_EBUSY);
                    m->ends[3]++;
                    m->state[id] = D_ENDED;
                } else {
                    struct lr__admit_req ar = { .id = id,
                                                .tenant = tenant,
                                                .cost = n + 2 * 10,
                                                .arrival_ns = now,
                                                .deadline_ns = dl,
                                                .band = urg,
                                                .size = n };
                    lr_status want =
                        m->q.n < m->q.max_waiting && !dm_fair_room(m, tenant, n)
                            ? LR_ELIMIT
                            : am_push(&m->q, &ar);
                    assert_st(st, want);
                    if (st == LR_OK) {
                        assert_int_equal(d.instance, NONE);
                        m->state[id] = D_WAIT;
                    }
                }
            } else if (k < 6) { /* dispatch */
                lr_dispatched out[64];
                size_t cap_out = 1 + tu_below(&s, 6);
                size_t n = disp(r, now, out, cap_out);
                size_t j = 0;
                struct lr__admit_req ex[64];
                size_t ne = am_expire(&m->q, now, ex, cap_out);
                for (; j < ne; j++) {
                    assert_true(j < n);
                    assert_int_equal(out[j].request_id, ex[j].id);
                    assert_st(out[j].status, LR_EEXPIRED);
                    m->state[ex[j].id] = D_ENDED;
                    m->ends[1]++;
                }
                while (j < cap_out && !dm_saturated(m)) {
                    int i = am_next(&m->q);
                    if (i < 0)
                        break;
                    struct lr__admit_req got;
                    uint64_t want = m->q.r[i].q.id;
                    assert_st(am_take_or_cancel(&m->q, want, &got, true),
                              LR_OK);
                    assert_true(j < n);
                    if (out[j].request_id != want)
                        fail_msg("round %llu op %d: dispatched %llu, the "
                                 "model %llu",
                                 (unsigned long long)round, op,
                                 (unsigned long long)out[j].request_id,
                                 (unsigned long long)want);
                    assert_st(out[j].status, LR_OK);
                    assert_int_equal(out[j].urgency, got.band);
                    assert_int_equal(out[j].tenant, got.tenant);
                    dm_place(m, want, out[j].instance);
                    m->ends[0]++;
                    j++;
                }
                assert_int_equal(n, j);
            } else if (k < 8) { /* a first token or a completion */
                uint64_t id = 1 + tu_below(&s, next);
                if (id >= D_IDS)
                    continue;
                bool done = tu_below(&s, 2);
                lr_status st = done ? lr_router_complete(r, id, 1, now)
                                    : lr_router_first_token(r, id, now);
                if (m->state[id] == D_QUEUED || m->state[id] == D_DECODE) {
                    assert_st(st, LR_OK);
                    if (m->state[id] == D_QUEUED)
                        m->queued[m->inst[id]]--;
                    m->state[id] = done ? D_ENDED : D_DECODE;
                } else {
                    assert_st(st, LR_ENOENT);
                }
            } else if (k < 9) { /* fail: cancels a waiting one */
                uint64_t id = 1 + tu_below(&s, next);
                if (id >= D_IDS)
                    continue;
                lr_status st = lr_router_fail(r, id, now);
                if (m->state[id] == D_WAIT) {
                    struct lr__admit_req got;
                    assert_st(st, LR_OK);
                    assert_st(am_take_or_cancel(&m->q, id, &got, false), LR_OK);
                    m->state[id] = D_ENDED;
                    m->ends[2]++;
                } else if (m->state[id] == D_QUEUED ||
                           m->state[id] == D_DECODE) {
                    assert_st(st, LR_OK);
                    if (m->state[id] == D_QUEUED)
                        m->queued[m->inst[id]]--;
                    m->state[id] = D_ENDED;
                } else {
                    assert_st(st, LR_ENOENT);
                }
            } else { /* the stats against the model */
                lr_router_stats st = stats(r);
                assert_int_equal(st.waiting, m->q.n);
                assert_int_equal(st.waited_dispatched, m->ends[0]);
                assert_int_equal(st.waited_expired, m->ends[1]);
                assert_int_equal(st.waited_cancelled, m->ends[2]);
                assert_int_equal(st.shed, m->ends[3]);
                assert_int_equal(st.waited,
                                 m->ends[0] + m->ends[1] + m->ends[2] + m->q.n);
                assert_int_equal(saturated(r, now), dm_saturated(m));
            }
        }
        /* every request ended exactly one way, or still waits or runs */
        uint64_t waiting = 0;
        for (uint64_t id = 1; id < next && id < D_IDS; id++)
            waiting += m->state[id] == D_WAIT;
        assert_int_equal(waiting, m->q.n);
        assert_int_equal(stats(r).waiting, m->q.n);
        assert_router_ok(r);
        lr_router_destroy(r);
        free(m);
    }
}

/* ---- allocation failure ------------------------------------------------------------- */

/* Checks between the calls under test allocate too (the index's walk):
 * hold the failure schedule over them, the calls counted and a failure
 * so far kept. */
struct held {
    struct tu_arming arm;
    uint64_t calls;
    bool failed;
};

static struct held
hold(struct tu_alloc *t)
{
    struct held h = { .calls = t->calls, .failed = t->failed };
    h.arm = tu_alloc_pause(t);
    return h;
}

static void
unhold(struct tu_alloc *t, struct held h)
{
    tu_alloc_resume(t, h.arm);
    t->calls = h.calls;
    t->failed = h.failed;
}

/* route() that waits (the queue made at the first, a waiter's copy at
 * each, its image's identifier included) and dispatch (the learn):
 * LR_ENOMEM leaves the router as it was and leaks nothing. */
static bool
sc_wait(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *r = mk_on(&t->a, 2, 1, 16);
    assert_st(rq(r, 1, 64, 0, 0, 0, 0, T0, NULL), LR_OK);
    assert_st(rq(r, 2, 64, 0, 0, 0, 0, T0, NULL), LR_OK);
    tu_alloc_resume(t, arm);
    bool clean = true;
    for (uint64_t id = 3; id < 12; id++) {
        struct held h = hold(t);
        uint64_t before = lr__router_digest(r);
        unhold(t, h);
        lr_status st = rq(r, id, 16 * id, WAIT, id % 3, (uint32_t)(id % 2),
                          id % 4 ? 0 : T0 + 5 * MS, T0 + id * MS, NULL);
        h = hold(t);
        if (st == LR_ENOMEM) {
            clean = false;
            assert_true(lr__router_digest(r) == before);
        } else {
            assert_st(st, LR_OK);
        }
        assert_router_ok(r);
        unhold(t, h);
    }
    assert_st(lr_router_first_token(r, 1, T0 + 20 * MS), LR_OK);
    assert_st(lr_router_first_token(r, 2, T0 + 20 * MS), LR_OK);
    /* LR_ENOMEM stops dispatch with the failed request still waiting:
     * the entries before it stand, and each left the queue */
    lr_dispatched out[8];
    size_t n = 0;
    uint64_t waiting = stats(r).waiting;
    lr_status st = lr_router_dispatch(r, T0 + 20 * MS, out, 8, sizeof *out, &n);
    if (st == LR_ENOMEM) {
        clean = false;
        assert_true(n < waiting);
    } else {
        assert_st(st, LR_OK);
    }
    assert_int_equal(stats(r).waiting, waiting - n);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    assert_router_ok(r);
    lr_router_destroy(r);
    return clean && !failed;
}

static void
oom_wait_and_dispatch(void **state)
{
    (void)state;
    tu_oom_loop(sc_wait, NULL, 400);
    rq_mm = true;
    tu_oom_loop(sc_wait, NULL, 400);
    rq_mm = false;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(waits_when_saturated_and_goes_when_room),
        cmocka_unit_test(below_saturation_nothing_changes),
        cmocka_unit_test(order_urgency_then_fair_share),
        cmocka_unit_test(no_overtaking),
        cmocka_unit_test(shed_when_saturated),
        cmocka_unit_test(expire_and_cancel),
        cmocka_unit_test(saturation_from_scrapes),
        cmocka_unit_test(saturation_from_queued_prefill),
        cmocka_unit_test(limits_and_bad_input),
        cmocka_unit_test(fair_room_when_half_full),
        cmocka_unit_test(budget_in_policy_input),
        cmocka_unit_test(differential),
        cmocka_unit_test(oom_wait_and_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
