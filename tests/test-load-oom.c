/* Allocation failures and lr_load (B33). lr_load reserves all its memory
 * at create time, so:
 *  - create is run with every allocation failing in turn (once, then from
 *    then on): it must return LR_ENOMEM, set *out to NULL and leak nothing;
 *  - once created, no call allocates: a whole workload runs against an
 *    allocator that fails every allocation, every call succeeds (or fails
 *    with its documented status, never LR_ENOMEM) and the allocator sees
 *    no allocation call at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "load-helpers.h"
#include "parts/load.h"
#include "testutil.h"

struct create_ctx {
    uint32_t max_instances, max_requests;
};

static bool
sc_create(struct tu_alloc *t, void *vctx)
{
    const struct create_ctx *c = vctx;
    lr_load_options o;
    lr_load_options_init(&o);
    o.allocator = &t->a;
    o.max_instances = c->max_instances;
    o.max_requests = c->max_requests;
    lr_load *ld = (lr_load *)&ld;
    lr_status st = lr_load_create(&o, &ld);
    if (st == LR_ENOMEM) {
        assert_true(t->failed);
        assert_null(ld);
        return false;
    }
    assert_st(st, LR_OK);
    assert_non_null(ld);
    assert_load_ok(ld);
    assert_st(lr_load_add_instance(ld, 0, 0, 1), LR_OK);
    assert_st(load_dispatch(ld, 1, 0, 10, 0, 1, 1), LR_OK);
    assert_load_ok(ld);
    lr_load_destroy(ld);
    return !t->failed;
}

static void
oom_create(void **state)
{
    (void)state;
    static const struct create_ctx cases[] = {
        { 0, 0 },  /* the defaults */
        { 1, 1 },  /* the smallest */
        { 3, 50 }, /* odd sizes */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        tu_oom_loop(sc_create, (void *)&cases[i], 64);
}

/* A workload touching every mutator and query, with the allocator failing
 * every allocation from the first one after create on. */
static void
workload(lr_load *ld, uint64_t seed)
{
    uint64_t rs = seed;
    uint64_t now = 1000;
    for (uint32_t i = 0; i < 6; i++)
        assert_st(lr_load_add_instance(ld, i, i % 3, (int32_t)(i % 2)), LR_OK);
    for (int round = 0; round < 4; round++) {
        /* fill to the limit */
        for (uint64_t id = 0; id < 32; id++) {
            lr_dispatch d = disp(id * 7 + (uint64_t)round, (uint32_t)(id % 6),
                                 (uint32_t)tu_below(&rs, 4000), 0,
                                 (uint32_t)tu_below(&rs, 500), now++);
            d.cached_tokens = (uint32_t)tu_below(&rs, d.prompt_tokens + 1ull);
            d.alt_instance = (uint32_t)((id + 1) % 6);
            d.alt_cached_tokens = d.cached_tokens / 2;
            assert_st(lr_load_dispatch(ld, &d), LR_OK);
        }
        assert_st(load_dispatch(ld, 999, 0, 1, 0, 0, now), LR_ELIMIT);
        for (uint64_t id = 0; id < 32; id++) {
            uint64_t rid = id * 7 + (uint64_t)round;
            if (id % 3 == 0)
                assert_st(lr_load_move(ld, rid, (uint32_t)((id + 2) % 6), 0),
                          LR_OK);
            if (id % 2 == 0)
                assert_st(lr_load_first_token(ld, rid, now++), LR_OK);
            if (id % 4 == 0)
                assert_st(lr_load_first_token(ld, rid, now++), LR_OK);
        }
        lr_engine_stats s;
        lr_engine_stats_init(&s);
        for (uint32_t i = 0; i < 6; i++) {
            s.running = i;
            s.kv_use = 0.1 * i;
            s.scraped_ns = now++;
            assert_st(lr_load_set_stats(ld, i, &s), LR_OK);
            assert_st(lr_load_observe_rtt(ld, i, tu_below(&rs, 1000000)),
                      LR_OK);
            lr_load_snapshot sn = snap(ld, i);
            assert_true(sn.inflight <= 32);
        }
        struct lr__req_view v;
        assert_st(lr__load_req(ld, (uint64_t)round, &v), LR_OK);
        assert_st(lr_load_request(ld, (uint64_t)round, NULL, NULL), LR_OK);
        assert_int_equal(lr_load_inflight(ld), 32);
        assert_load_ok(ld);
        (void)lr__load_digest(ld);
        /* end them all, one way or another */
        for (uint64_t id = 0; id < 32; id++) {
            uint64_t rid = id * 7 + (uint64_t)round;
            if (id % 5 == 0)
                assert_st(lr_load_fail(ld, rid), LR_OK);
            else if (id % 5 == 1 && round % 2 == 1)
                continue; /* dropped by remove_instance below */
            else
                assert_st(lr_load_complete(ld, rid, 1, now++), LR_OK);
        }
        if (round % 2 == 1) {
            for (uint32_t i = 0; i < 6; i++) {
                assert_st(lr_load_remove_instance(ld, i), LR_OK);
                assert_st(lr_load_add_instance(ld, i, 0, 0), LR_OK);
            }
        }
        assert_int_equal(lr_load_inflight(ld), 0);
        for (uint32_t i = 0; i < 6; i++)
            assert_idle(ld, i);
        assert_load_ok(ld);
    }
}

static void
no_allocation_after_create(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("load oom workload", 0x10ad00);
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_load_options o;
    lr_load_options_init(&o);
    o.allocator = &t.a;
    o.max_instances = 6;
    o.max_requests = 32;
    lr_load *ld;
    assert_st(lr_load_create(&o, &ld), LR_OK);
    size_t live = t.live_bytes;
    assert_true(live > 0);
    /* from now on every allocation fails, and is counted */
    tu_alloc_arm(&t, 1, true);
    workload(ld, seed);
    assert_int_equal(t.calls, 0);
    assert_false(t.failed);
    assert_int_equal(t.live_bytes, live);
    tu_alloc_disarm(&t);
    lr_load_destroy(ld);
    assert_int_equal(t.live_bytes, 0);
    assert_int_equal(t.live_blocks, 0);
}

/* The same under tu_oom_loop: the scenario creates with the allocator
 * armed at N; when create survives, the workload must run to the end with
 * no further failure injected. */
static bool
sc_create_then_work(struct tu_alloc *t, void *vctx)
{
    (void)vctx;
    lr_load_options o;
    lr_load_options_init(&o);
    o.allocator = &t->a;
    o.max_instances = 6;
    o.max_requests = 32;
    lr_load *ld = NULL;
    lr_status st = lr_load_create(&o, &ld);
    if (st == LR_ENOMEM) {
        assert_null(ld);
        return false;
    }
    assert_st(st, LR_OK);
    uint64_t calls = t->calls;
    bool failed = t->failed;
    workload(ld, 7);
    assert_int_equal(t->calls, calls);
    assert_int_equal(t->failed, failed);
    lr_load_destroy(ld);
    return !failed;
}

static void
oom_create_then_work(void **state)
{
    (void)state;
    tu_oom_loop(sc_create_then_work, NULL, 64);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oom_create),
        cmocka_unit_test(no_allocation_after_create),
        cmocka_unit_test(oom_create_then_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
