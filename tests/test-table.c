/* lr__table (lib/common/table.h): the worked example of its header, a randomized
 * differential test against a linear scan (tests/table-model.h) with
 * crafted hashes that make collisions and wrap-around the rule, the
 * verify walk on hand-broken tables, and an OOM loop over reserve and
 * init (B33, B34). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "table-model.h"
#include "common/table.h"
#include "testutil.h"

#define TAG(t) ((uint64_t)(t) << 32)

static struct lr__mem
libc_mem(void)
{
    struct lr__mem m;
    assert_int_equal(lr__mem_init(&m, NULL), LR_OK);
    return m;
}

/* Values are indices into keys[] here too: eq compares the key. */
static bool
eq_key(const void *keys, uint64_t key, uint32_t v)
{
    return ((const uint64_t *)keys)[v] == key;
}

static uint32_t
find_key(const struct lr__table *t, const uint64_t *keys, uint64_t hv,
         uint64_t key)
{
    return lr__table_find(t, hv, key, eq_key, keys);
}

/* ---- the example in table.h ---------------------------------------------- */

static void
worked_example(void **state)
{
    (void)state;
    struct lr__mem m = libc_mem();
    struct lr__table t;
    assert_int_equal(lr__table_init(&t, &m, 1), LR_OK);
    assert_int_equal(t.size, LR__TABLE_MIN_SIZE);
    uint64_t keys[10] = { 0 };
    keys[5] = 55;
    keys[9] = 99;
    uint64_t h5 = TAG(0x20000000u) | 0x1234, h9 = TAG(0x30000000u) | 0x5678;
    lr__table_insert(&t, h5, 5);
    lr__table_insert(&t, h9, 9);
    assert_true(t.slots[1] == (TAG(0x20000000u) | 6));
    assert_true(t.slots[2] == (TAG(0x30000000u) | 10));
    assert_int_equal(find_key(&t, keys, h9, 99), 9);
    assert_int_equal(find_key(&t, keys, h5, 55), 5);
    /* same tag, other key: only eq tells them apart */
    assert_int_equal(find_key(&t, keys, h9, 98), LR_NIL);
    lr__table_remove(&t, h5, 5);
    assert_true(t.slots[1] == (TAG(0x30000000u) | 10));
    assert_true(t.slots[2] == 0);
    assert_int_equal(find_key(&t, keys, h9, 99), 9);
    assert_int_equal(t.count, 1);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    lr__table_free(&t, &m);
    assert_int_equal(m.live, 0);
}

/* A run that starts in the last slot wraps to slot 0; deleting from its
 * head shifts the wrapped part back across the end. */
static void
wrap_around(void **state)
{
    (void)state;
    struct lr__mem m = libc_mem();
    struct lr__table t;
    assert_int_equal(lr__table_init(&t, &m, 6), LR_OK);
    assert_int_equal(t.size, 8);
    uint64_t keys[6];
    for (uint32_t v = 0; v < 6; v++) {
        keys[v] = 1000 + v;
        lr__table_insert(&t, TAG(UINT32_MAX) | v, v); /* home 7 */
    }
    assert_int_equal(lr__table_verify(&t), LR_OK);
    assert_true((uint32_t)t.slots[7] == 1 && (uint32_t)t.slots[0] == 2);
    lr__table_remove(&t, TAG(UINT32_MAX) | 0, 0);
    assert_true((uint32_t)t.slots[7] == 2 && t.slots[4] == 0);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    for (uint32_t v = 1; v < 6; v++)
        assert_int_equal(find_key(&t, keys, TAG(UINT32_MAX), keys[v]), v);
    /* a value whose home (0) precedes the wrapped run's end stays put */
    keys[0] = 7;
    lr__table_remove(&t, TAG(UINT32_MAX), 3);
    lr__table_insert(&t, TAG(0), 0);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    assert_int_equal(find_key(&t, keys, TAG(0), 7), 0);
    lr__table_remove(&t, TAG(UINT32_MAX), 1);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    assert_int_equal(find_key(&t, keys, TAG(0), 7), 0);
    assert_int_equal(find_key(&t, keys, TAG(UINT32_MAX), keys[5]), 5);
    lr__table_free(&t, &m);
}

/* ---- randomized differential test ---------------------------------------- */

static void
run_model(uint64_t seed, uint32_t expect, uint32_t n_ops, uint32_t op_mask)
{
    struct lr__mem mem = libc_mem();
    struct tm *m = test_malloc(sizeof *m);
    assert_int_equal(tm_init(m, &mem, expect, seed), LR_OK);
    uint64_t rs = seed;
    for (uint32_t i = 0; i < n_ops; i++) {
        uint32_t op = (uint32_t)tu_below(&rs, TM_N_OPS + 3);
        if (op >= TM_N_OPS)
            op = TM_INSERT; /* lean towards full tables */
        if (op == TM_REINIT && tu_below(&rs, 20) != 0)
            op = TM_REMOVE; /* and keep most of what was built */
        if (!(op_mask & (1u << op)))
            continue;
        /* keys from a window that drifts, so removes and finds hit */
        uint32_t key = (uint32_t)(i / 64 + tu_below(&rs, 200));
        uint32_t arg = (uint32_t)tu_rand(&rs);
        if (op == TM_RESERVE)
            arg %= 40;
        const char *err = tm_step(m, op, key, arg);
        if (err != NULL)
            fail_msg("seed %llu op %u (%u, key %u, arg %u): %s",
                     (unsigned long long)seed, i, op, key, arg, err);
    }
    tm_free(m);
    assert_int_equal(mem.live, 0);
    test_free(m);
}

static void
differential(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("table differential", 0x7ab1e001);
    for (uint32_t r = 0; r < 24; r++)
        run_model(seed + r, r % 3 == 0 ? 0 : r, 6000, ~0u);
}

/* Without reserve or reinit: the table grows one insert at a time. */
static void
differential_grow_only(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("table differential, inserts", 0x7ab1e002);
    for (uint32_t r = 0; r < 8; r++)
        run_model(seed + r, 0, 4000,
                  (1u << TM_INSERT) | (1u << TM_REMOVE) | (1u << TM_FIND));
}

/* ---- the verify walk ----------------------------------------------------- */

static void
verify_catches(void **state)
{
    (void)state;
    struct lr__mem m = libc_mem();
    struct lr__table t;
    assert_int_equal(lr__table_init(&t, &m, 6), LR_OK);
    for (uint32_t v = 0; v < 4; v++)
        lr__table_insert(&t, TAG(0x40000000u), v); /* home 2: slots 2..5 */
    assert_int_equal(lr__table_verify(&t), LR_OK);

    t.count++; /* count disagrees with the slots */
    assert_int_equal(lr__table_verify(&t), LR_ECORRUPT);
    t.count--;

    uint64_t saved = t.slots[3]; /* a hole in the run */
    t.slots[3] = 0;
    t.count--;
    assert_int_equal(lr__table_verify(&t), LR_ECORRUPT);
    t.slots[3] = saved;
    t.count++;

    t.slots[1] = t.slots[5]; /* a value before its home */
    t.slots[5] = 0;
    assert_int_equal(lr__table_verify(&t), LR_ECORRUPT);
    t.slots[5] = t.slots[1];
    t.slots[1] = 0;
    assert_int_equal(lr__table_verify(&t), LR_OK);

    for (uint32_t i = 0; i < t.size; i++) /* no empty slot at all */
        if (t.slots[i] == 0)
            t.slots[i] = TAG((uint64_t)i << 29) | 100;
    t.count = t.size;
    assert_int_equal(lr__table_verify(&t), LR_ECORRUPT);
    t.count = 4;
    for (uint32_t i = 0; i < t.size; i++)
        if ((uint32_t)t.slots[i] == 100)
            t.slots[i] = 0;
    assert_int_equal(lr__table_verify(&t), LR_OK);
    lr__table_free(&t, &m);
}

/* ---- empty tables and limits --------------------------------------------- */

static void
empty_and_limits(void **state)
{
    (void)state;
    struct lr__mem m = libc_mem();
    struct lr__table t;
    uint64_t keys[1] = { 1 };
    assert_int_equal(lr__table_init(&t, &m, 0), LR_OK);
    assert_int_equal(m.live, 0);
    assert_int_equal(find_key(&t, keys, TAG(UINT32_MAX), 1), LR_NIL);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    assert_int_equal(lr__table_reserve(&t, &m, 0), LR_OK);
    assert_int_equal(m.live, 0);
    /* more than 32-bit slot numbers can address: refused, nothing moves */
    assert_int_equal(lr__table_reserve(&t, &m, UINT32_MAX), LR_ENOMEM);
    assert_int_equal(m.live, 0);
    assert_int_equal(lr__table_reserve(&t, &m, 1), LR_OK);
    assert_int_equal(t.size, LR__TABLE_MIN_SIZE);
    lr__table_insert(&t, TAG(UINT32_MAX), 0);
    assert_int_equal(find_key(&t, keys, TAG(UINT32_MAX), 1), 0);
    lr__table_free(&t, &m);
    lr__table_free(&t, &m); /* twice is fine */
    assert_int_equal(m.live, 0);
    struct lr__table big;
    assert_int_equal(lr__table_init(&big, &m, UINT32_MAX), LR_ENOMEM);
    assert_int_equal(m.live, 0);
    lr__table_free(&big, &m);
}

/* ---- OOM loop ------------------------------------------------------------ */

/* Build a table of colliding values with the allocator disarmed, then
 * arm it and grow: LR_ENOMEM must leave the same slots, size and count, a
 * table that still finds, removes and grows once memory is back. */
static bool
sc_reserve(struct tu_alloc *ta, void *ctx)
{
    (void)ctx;
    uint64_t armed = ta->fail_at;
    bool forever = ta->fail_forever;
    tu_alloc_disarm(ta);
    struct lr__mem m;
    assert_int_equal(lr__mem_init(&m, &ta->a), LR_OK);
    struct lr__table t;
    assert_int_equal(lr__table_init(&t, &m, 0), LR_OK);
    uint64_t keys[40];
    for (uint32_t v = 0; v < 40; v++) {
        keys[v] = v;
        assert_int_equal(lr__table_reserve(&t, &m, 1), LR_OK);
        lr__table_insert(&t, TAG(v % 4 * 0x10000000u), v);
    }
    struct lr__table before = t;
    uint64_t copy[64];
    assert_true(t.size <= 64);
    memcpy(copy, t.slots, t.size * sizeof(uint64_t));

    tu_alloc_arm(ta, armed, forever);
    lr_status st = lr__table_reserve(&t, &m, 200);
    struct lr__table fresh;
    lr_status st2 = lr__table_init(&fresh, &m, 50);
    bool failed = ta->failed;
    tu_alloc_disarm(ta);

    if (st == LR_ENOMEM) {
        assert_ptr_equal(t.slots, before.slots);
        assert_int_equal(t.size, before.size);
        assert_int_equal(t.count, before.count);
        assert_memory_equal(t.slots, copy, t.size * sizeof(uint64_t));
    } else {
        assert_int_equal(st, LR_OK);
        assert_true((t.count + 200) * 4 <= (uint64_t)t.size * 3);
    }
    if (st2 == LR_ENOMEM)
        assert_int_equal(fresh.count, 0);
    else
        assert_int_equal(st2, LR_OK);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    for (uint32_t v = 0; v < 40; v++)
        assert_int_equal(find_key(&t, keys, TAG(v % 4 * 0x10000000u), v), v);
    lr__table_remove(&t, TAG(0), 0);
    assert_int_equal(lr__table_reserve(&t, &m, 200), LR_OK);
    assert_int_equal(lr__table_verify(&t), LR_OK);
    lr__table_free(&fresh, &m);
    lr__table_free(&t, &m);
    return !failed;
}

static void
oom_reserve(void **state)
{
    (void)state;
    tu_oom_loop(sc_reserve, NULL, 50);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(worked_example),
        cmocka_unit_test(wrap_around),
        cmocka_unit_test(differential),
        cmocka_unit_test(differential_grow_only),
        cmocka_unit_test(verify_catches),
        cmocka_unit_test(empty_and_limits),
        cmocka_unit_test(oom_reserve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
