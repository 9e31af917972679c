/* lr__admit (lib/parts/admit.h): the order (bands, then the tenants'
 * virtual counters, then push order), the lift of a tenant that starts
 * waiting, fairness between a heavy and a light tenant, expiry, the
 * refusals; a differential run against the naive model of admit-model.h
 * over random operations; and the allocation-failure loop (only init
 * allocates: every later call works with an allocator that always
 * fails). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "admit-model.h"
#include "testutil.h"

struct fx {
    struct tu_alloc al;
    struct lr__mem mem;
    struct lr__admit a;
};

static void
fx_init(struct fx *f, uint32_t w, uint32_t t, uint32_t bands)
{
    tu_alloc_init(&f->al);
    assert_int_equal(lr__mem_init(&f->mem, &f->al.a), LR_OK);
    assert_int_equal(lr__admit_init(&f->a, &f->mem, w, t, bands, 7), LR_OK);
}

static void
fx_free(struct fx *f)
{
    lr__admit_free(&f->a, &f->mem);
    assert_int_equal(f->al.live_bytes, 0);
}

static lr_status
push(struct fx *f, uint64_t id, uint64_t tenant, uint32_t band, uint64_t cost,
     uint64_t deadline)
{
    struct lr__admit_req q = { .id = id,
                               .tenant = tenant,
                               .cost = cost,
                               .arrival_ns = id * 10,
                               .deadline_ns = deadline,
                               .band = band,
                               .flags = (uint32_t)id };
    lr_status st = lr__admit_push(&f->a, &q);
    assert_int_equal(lr__admit_verify(&f->a), LR_OK);
    return st;
}

/* Peek and take: the id that went out, 0 when none waits. */
static uint64_t
next(struct fx *f)
{
    struct lr__admit_req q;
    if (lr__admit_peek(&f->a, &q) != LR_OK)
        return 0;
    struct lr__admit_req got;
    assert_int_equal(lr__admit_take(&f->a, q.id, &got), LR_OK);
    assert_true(am_req_eq(&q, &got));
    assert_int_equal(lr__admit_verify(&f->a), LR_OK);
    return q.id;
}

static void
admit_bands_then_counters_then_order(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 16, 4, 3);
    assert_int_equal(push(&f, 1, 10, 2, 5, 0), LR_OK);
    assert_int_equal(push(&f, 2, 10, 1, 5, 0), LR_OK);
    assert_int_equal(push(&f, 3, 11, 1, 5, 0), LR_OK);
    assert_int_equal(push(&f, 4, 10, 1, 5, 0), LR_OK);
    assert_int_equal(push(&f, 5, 12, 0, 1, 0), LR_OK);
    /* band 0 first; in band 1 tenants 10 and 11 take turns (10 came
     * first, then 11 has been served less), 10's own in order; band 2
     * last */
    assert_int_equal(next(&f), 5);
    assert_int_equal(next(&f), 2);
    assert_int_equal(next(&f), 3);
    assert_int_equal(next(&f), 4);
    assert_int_equal(next(&f), 1);
    assert_int_equal(next(&f), 0);
    assert_int_equal(lr__admit_counter(&f.a, 10), 15);
    assert_int_equal(lr__admit_counter(&f.a, 11), 5);
    assert_int_equal(lr__admit_counter(&f.a, 12), 1);
    fx_free(&f);
}

/* A tenant sending ten times the others' requests gets no more than its
 * share while the others wait: served in turns by cost, the light tenants
 * finish their ten each within the first forty let out. */
static void
admit_heavy_tenant_gets_its_share(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 256, 8, 1);
    uint64_t id = 1;
    for (int i = 0; i < 100; i++)
        assert_int_equal(push(&f, id++, 0, 0, 100, 0), LR_OK);
    for (uint64_t t = 1; t <= 3; t++)
        for (int i = 0; i < 10; i++)
            assert_int_equal(push(&f, id++, t, 0, 100, 0), LR_OK);
    uint32_t light = 0, heavy = 0;
    for (int k = 0; k < 40; k++) {
        uint64_t out = next(&f);
        if (out <= 100)
            heavy++;
        else
            light++;
    }
    assert_int_equal(light, 30);
    assert_int_equal(heavy, 10);
    /* the heavy tenant then has the fleet to itself */
    for (int k = 0; k < 90; k++)
        assert_true(next(&f) <= 100);
    assert_int_equal(next(&f), 0);
    fx_free(&f);
}

/* Service received while away is not credit: a tenant that starts waiting
 * is lifted to the least counter waiting in its band, or to the counter
 * of the last to leave that band. */
static void
admit_lift(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 32, 4, 2);
    for (uint64_t i = 1; i <= 5; i++)
        assert_int_equal(push(&f, i, 1, 0, 10, 0), LR_OK);
    for (int k = 0; k < 3; k++)
        next(&f);
    assert_int_equal(lr__admit_counter(&f.a, 1), 30);
    /* tenant 2 arrives with nothing served: lifted to 30, so it does not
     * take the next three turns in a row */
    assert_int_equal(push(&f, 6, 2, 0, 10, 0), LR_OK);
    assert_int_equal(lr__admit_counter(&f.a, 2), 30);
    assert_int_equal(next(&f), 4); /* tie on 30: tenant 1's came first */
    assert_int_equal(next(&f), 6);
    assert_int_equal(next(&f), 5);
    /* band 0 empty: the last to leave had 50; a newcomer starts there */
    assert_int_equal(push(&f, 7, 3, 0, 10, 0), LR_OK);
    assert_int_equal(lr__admit_counter(&f.a, 3), 50);
    /* band 1 never used: no lift */
    assert_int_equal(push(&f, 8, 4, 1, 10, 0), LR_OK);
    assert_int_equal(lr__admit_counter(&f.a, 4), 0);
    fx_free(&f);
}

static void
admit_expire_and_cancel(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 16, 4, 2);
    assert_int_equal(push(&f, 1, 1, 0, 10, 300), LR_OK);
    assert_int_equal(push(&f, 2, 1, 1, 10, 100), LR_OK);
    assert_int_equal(push(&f, 3, 2, 0, 10, 0), LR_OK);
    assert_int_equal(push(&f, 4, 2, 0, 10, 100), LR_OK);
    struct lr__admit_req out[4];
    assert_int_equal(lr__admit_expire(&f.a, 99, out, 4), 0);
    /* deadline, then push order; one at a time when cap says so */
    assert_int_equal(lr__admit_expire(&f.a, 100, out, 1), 1);
    assert_int_equal(out[0].id, 2);
    assert_int_equal(lr__admit_expire(&f.a, 100, out, 4), 1);
    assert_int_equal(out[0].id, 4);
    assert_int_equal(lr__admit_verify(&f.a), LR_OK);
    /* neither charged */
    assert_int_equal(lr__admit_counter(&f.a, 1), 0);
    assert_int_equal(lr__admit_counter(&f.a, 2), 0);
    assert_int_equal(lr__admit_cancel(&f.a, 1, &out[0]), LR_OK);
    assert_int_equal(out[0].deadline_ns, 300);
    assert_int_equal(lr__admit_cancel(&f.a, 1, NULL), LR_ENOENT);
    assert_int_equal(lr__admit_take(&f.a, 2, NULL), LR_ENOENT);
    assert_int_equal(lr__admit_expire(&f.a, UINT64_MAX, out, 4), 0);
    assert_int_equal(lr__admit_counter(&f.a, 1), 0);
    assert_int_equal(next(&f), 3);
    assert_int_equal(f.a.count, 0);
    fx_free(&f);
}

static void
admit_refusals(void **state)
{
    (void)state;
    struct fx f;
    struct lr__mem m;
    struct lr__admit bad;
    assert_int_equal(lr__mem_init(&m, NULL), LR_OK);
    assert_int_equal(lr__admit_init(&bad, &m, 0, 1, 1, 1), LR_EINVAL);
    assert_int_equal(lr__admit_init(&bad, &m, 1, 0, 1, 1), LR_EINVAL);
    assert_int_equal(lr__admit_init(&bad, &m, 1, 1, 0, 1), LR_EINVAL);
    assert_int_equal(lr__admit_init(&bad, &m, 1, 1, LR__ADMIT_BANDS + 1, 1),
                     LR_EINVAL);
    assert_int_equal(
        lr__admit_init(&bad, &m, LR__ADMIT_MAX_WAITING + 1, 1, 1, 1),
        LR_EINVAL);
    assert_int_equal(lr__admit_init(&bad, &m, 1, UINT32_MAX, 1, 1), LR_EINVAL);
    assert_int_equal(lr__admit_push(NULL, NULL), LR_EINVAL);
    assert_int_equal(lr__admit_push(&bad, NULL), LR_EINVAL);
    lr__admit_free(&bad, &m); /* a failed init: nothing to free */

    fx_init(&f, 3, 2, 2);
    assert_int_equal(push(&f, 1, 1, 2, 1, 0), LR_EINVAL); /* band */
    assert_int_equal(push(&f, 1, 1, 0, 1, 0), LR_OK);
    assert_int_equal(push(&f, 1, 2, 1, 1, 0), LR_EEXIST);
    assert_int_equal(push(&f, 2, 2, 0, 1, 0), LR_OK);
    /* two tenants waiting, two slots: a third is refused, then taken in
     * once a slot's tenant has nothing waiting (its counter forgotten) */
    assert_int_equal(push(&f, 3, 3, 0, 1, 0), LR_ELIMIT);
    assert_int_equal(push(&f, 3, 1, 0, 1, 0), LR_OK);
    assert_int_equal(push(&f, 4, 1, 0, 1, 0), LR_ELIMIT); /* 3 waiting */
    assert_int_equal(lr__admit_take(&f.a, 2, NULL), LR_OK);
    assert_int_equal(lr__admit_counter(&f.a, 2), 1);
    assert_int_equal(push(&f, 4, 3, 0, 1, 0), LR_OK);
    assert_int_equal(lr__admit_counter(&f.a, 2), 0); /* forgotten */
    assert_false(lr__admit_find(&f.a, 2, NULL));
    assert_true(lr__admit_find(&f.a, 4, NULL));
    /* a refused push changed nothing */
    assert_int_equal(f.a.count, 3);
    fx_free(&f);
}

/* A counter saturates instead of wrapping. */
static void
admit_counter_saturates(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 4, 2, 1);
    assert_int_equal(push(&f, 1, 1, 0, UINT64_MAX - 1, 0), LR_OK);
    assert_int_equal(push(&f, 2, 1, 0, 5, 0), LR_OK);
    next(&f);
    next(&f);
    assert_int_equal(lr__admit_counter(&f.a, 1), UINT64_MAX);
    fx_free(&f);
}

/* Random operations on the queue and the model, small enough that the
 * queue fills, tenant slots run out and get reused, and deadlines and
 * costs collide. */
static void
admit_differential(void **state)
{
    (void)state;
    uint64_t s = tu_seed("admit-differential", 0xad317);
    for (int round = 0; round < 40; round++) {
        uint32_t w = 1 + (uint32_t)tu_below(&s, AM_MAXW);
        uint32_t t = 1 + (uint32_t)tu_below(&s, 6);
        uint32_t bands = 1 + (uint32_t)tu_below(&s, 3);
        uint32_t ids = 2 * w + 2, tenants = t + 3;
        struct fx f;
        fx_init(&f, w, t, bands);
        struct am *m = malloc(sizeof *m);
        assert_non_null(m);
        am_init(m, w, t, bands);
        uint64_t now = 0;
        for (int k = 0; k < 3000; k++) {
            int op = (int)tu_below(&s, 10);
            op = op < 5   ? AM_PUSH
                 : op < 7 ? AM_TAKE_NEXT
                 : op < 8 ? AM_TAKE
                 : op < 9 ? AM_CANCEL
                          : AM_EXPIRE;
            now += tu_below(&s, 4);
            struct lr__admit_req q = {
                .id = tu_below(&s, ids),
                .tenant = tu_below(&s, tenants),
                .cost = tu_below(&s, 3) == 0 ? 0 : tu_below(&s, 50),
                .arrival_ns = now,
                .deadline_ns = tu_below(&s, 2) ? 0 : now + tu_below(&s, 20),
                .band = (uint32_t)tu_below(&s, bands + 1), /* one too many */
                .flags = (uint32_t)tu_rand(&s),
                .size = tu_below(&s, 100),
            };
            if (!am_step(m, &f.a, op, &q, now, 1 + (uint32_t)tu_below(&s, 4),
                         tenants, ids))
                fail_msg("round %d op %d: the queue left the model", round, k);
        }
        free(m);
        fx_free(&f);
    }
}

/* Only init allocates, all or nothing; afterwards nothing does. */
static bool
oom_scenario(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    struct lr__mem mem;
    assert_int_equal(lr__mem_init(&mem, &t->a), LR_OK);
    struct lr__admit a;
    lr_status st = lr__admit_init(&a, &mem, 40, 8, 3, 1);
    if (st == LR_ENOMEM) {
        assert_int_equal(t->live_bytes, 0);
        assert_null(a.ent); /* as zeroed: freeing it again is a no-op */
        lr__admit_free(&a, &mem);
        return false;
    }
    assert_int_equal(st, LR_OK);
    bool clean = !t->failed;
    tu_alloc_arm(t, t->calls + 1, true); /* every allocation from now */
    uint64_t s = 42;
    for (uint64_t i = 0; i < 200; i++) {
        struct lr__admit_req q = { .id = i % 50,
                                   .tenant = tu_below(&s, 12),
                                   .cost = 3,
                                   .deadline_ns = tu_below(&s, 3) ? 0 : i,
                                   .band = (uint32_t)tu_below(&s, 3) };
        lr_status p = lr__admit_push(&a, &q);
        assert_true(p == LR_OK || p == LR_EEXIST || p == LR_ELIMIT);
        if (i % 3 == 0 && lr__admit_peek(&a, &q) == LR_OK)
            assert_int_equal(lr__admit_take(&a, q.id, NULL), LR_OK);
        struct lr__admit_req out[4];
        (void)lr__admit_expire(&a, i / 2, out, 4);
        assert_int_equal(lr__admit_verify(&a), LR_OK);
    }
    lr__admit_free(&a, &mem);
    tu_alloc_disarm(t);
    return clean;
}

static void
admit_oom_loop(void **state)
{
    (void)state;
    tu_oom_loop(oom_scenario, NULL, 64);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(admit_bands_then_counters_then_order),
        cmocka_unit_test(admit_heavy_tenant_gets_its_share),
        cmocka_unit_test(admit_lift),
        cmocka_unit_test(admit_expire_and_cancel),
        cmocka_unit_test(admit_refusals),
        cmocka_unit_test(admit_counter_saturates),
        cmocka_unit_test(admit_differential),
        cmocka_unit_test(admit_oom_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
