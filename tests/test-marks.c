/* Where each prompt went (router/marks.h): the table against a naive
 * model, its allocation failure, and a router whose index is far smaller
 * than its conversations still sending each one's next turn where the
 * last one went. */
#include <stdlib.h>
#include <string.h>

#include "router-helpers.h"
#include "common/lr_hash.h"
#include "router/marks.h"
#include "router/router_impl.h"

#define KEYS 64u

struct found {
    uint32_t n, inst[KEYS], gen[KEYS];
    size_t depth[KEYS];
};

static void
collect(void *ctx, uint32_t inst, uint32_t gen, size_t depth)
{
    struct found *f = ctx;
    if (f->n < KEYS) {
        f->inst[f->n] = inst;
        f->gen[f->n] = gen;
        f->depth[f->n] = depth;
        f->n++;
    }
}

/* Chains of keys as prompts make them: prompt p's keys are the first
 * len(p) of its conversation's. */
static void
chain(uint64_t conv, uint64_t *k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        k[i] = lr__mix64(conv * 1000003u + i, 42) | 2;
}

/* One mark a prompt, at its deepest multiple of the stride; a longer
 * prompt of the same conversation finds it, deepest first; a shorter
 * one, or one under the stride, finds nothing; a newer put for the same
 * prompt takes the mark over. */
static void
marks_find_what_was_put(void **state)
{
    (void)state;
    struct lr__mem mem;
    assert_st(lr__mem_init(&mem, NULL), LR_OK);
    struct lr__marks t;
    assert_st(lr__marks_init(&t, &mem, 1024, 7), LR_OK);
    uint64_t k[KEYS];
    chain(1, k, KEYS);
    lr__marks_put(&t, k, LR__MARK_STRIDE - 1, 3, 0, 100); /* too short */
    assert_int_equal(lr__marks_count(&t), 0);
    lr__marks_put(&t, k, 2 * LR__MARK_STRIDE + 5, 3, 9, 100);
    assert_int_equal(lr__marks_count(&t), 1);
    struct found f = { 0 };
    lr__marks_find(&t, k, KEYS, 200, 1000, collect, &f);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.inst[0], 3);
    assert_int_equal(f.gen[0], 9);
    assert_int_equal(f.depth[0], 2 * LR__MARK_STRIDE);
    /* a prompt that stops before the mark's depth does not hold it */
    memset(&f, 0, sizeof f);
    lr__marks_find(&t, k, 2 * LR__MARK_STRIDE - 1, 200, 1000, collect, &f);
    assert_int_equal(f.n, 0);
    /* another conversation shares nothing */
    uint64_t o[KEYS];
    chain(2, o, KEYS);
    lr__marks_find(&t, o, KEYS, 200, 1000, collect, &f);
    assert_int_equal(f.n, 0);
    /* past the TTL it counts for nothing */
    lr__marks_find(&t, k, KEYS, 1101, 1000, collect, &f);
    assert_int_equal(f.n, 0);
    /* the same prompt learned elsewhere later: one mark, the newer */
    lr__marks_put(&t, k, 2 * LR__MARK_STRIDE + 1, 5, 9, 300);
    assert_int_equal(lr__marks_count(&t), 1);
    /* a deeper turn: two marks, the deepest first */
    lr__marks_put(&t, k, 3 * LR__MARK_STRIDE, 6, 9, 400);
    lr__marks_find(&t, k, KEYS, 500, 1000, collect, &f);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.inst[0], 6);
    assert_int_equal(f.depth[0], 3 * LR__MARK_STRIDE);
    assert_int_equal(f.inst[1], 5);
    lr__marks_free(&t, &mem);
    assert_int_equal(mem.live, 0);
}

/* A full table keeps the newest: of many more prompts than it holds, the
 * last ones put are all found, every mark found is one that was put, and
 * the count never passes the table's size. */
static void
marks_keep_the_newest(void **state)
{
    (void)state;
    struct lr__mem mem;
    assert_st(lr__mem_init(&mem, NULL), LR_OK);
    struct lr__marks t;
    assert_st(lr__marks_init(&t, &mem, 256, 11), LR_OK);
    uint64_t size = (t.mask + 1) * LR__MARK_WAYS;
    uint64_t k[KEYS];
    const uint32_t n = 5000;
    for (uint32_t c = 0; c < n; c++) {
        chain(100 + c, k, KEYS);
        lr__marks_put(&t, k, KEYS, c % 97, c, 1000 + c);
        assert_true(lr__marks_count(&t) <= size);
    }
    uint32_t recent = 0;
    for (uint32_t c = 0; c < n; c++) {
        chain(100 + c, k, KEYS);
        struct found f = { 0 };
        lr__marks_find(&t, k, KEYS, 1000 + n, UINT64_MAX, collect, &f);
        assert_true(f.n <= 1);
        if (f.n == 1) { /* its own: a mark names what was put for it */
            assert_int_equal(f.inst[0], c % 97);
            assert_int_equal(f.gen[0], c);
            assert_int_equal(f.depth[0], KEYS);
        }
        /* the last size / 8 put are all kept: each set's oldest goes */
        if (c >= n - size / 8)
            recent += f.n;
    }
    assert_int_equal(recent, size / 8);
    lr__marks_free(&t, &mem);
}

static void
marks_oom(void **state)
{
    (void)state;
    struct tu_alloc a;
    tu_alloc_init(&a);
    struct lr__mem mem;
    assert_st(lr__mem_init(&mem, &a.a), LR_OK);
    tu_alloc_arm(&a, 1, false);
    struct lr__marks t;
    assert_st(lr__marks_init(&t, &mem, 1024, 1), LR_ENOMEM);
    assert_null(t.m);
    lr__marks_free(&t, &mem); /* a no-op */
    assert_int_equal(a.live_bytes, 0);
}

/* ---- a router whose index holds a few prompts -------------------------------------- */

#define TURN 512u /* tokens a turn adds */
#define CONVS 40u

static size_t
conv_prompt(uint32_t c, uint32_t turns, uint32_t *t)
{
    size_t n = (size_t)turns * TURN;
    for (size_t i = 0; i < n; i++)
        t[i] = (uint32_t)(c * 7919u + i * 104729u) & 0xffffu;
    return n;
}

/* An index of 256 blocks holds about one prompt of these; 40
 * conversations take turns in it. With 1,024 marks, each conversation's second
 * turn goes back where its first went and counts at least the first
 * turn's whole blocks as cached; a route that learns nothing leaves no
 * mark; an instance that left takes its marks with it. */
static void
small_index_keeps_placements(void **state)
{
    (void)state;
    lr_router_options o;
    lr_router_options_init(&o);
    o.max_instances = 16;
    o.index_capacity_blocks = 256;
    o.policy = LR_POLICY_PREFIX_CACHE;
    lr_router *r;
    /* without marks (the default) the second turns find nothing but
     * what the index still holds */
    assert_st(lr_router_create(&o, &r), LR_OK);
    assert_null(r->marks.m);
    lr_router_destroy(r);
    o.marks = LR_ROUTER_MAX_MARKS + 1;
    assert_st(lr_router_create(&o, &r), LR_EINVAL);
    o.marks = 1024;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < 8; i++)
        add_instance(r, "10.7", i, 0, 0);
    uint32_t *t = malloc(2 * TURN * sizeof *t);
    uint32_t first[CONVS];
    uint64_t now = 1000000000ull, id = 1;
    for (uint32_t c = 0; c < CONVS; c++) {
        lr_decision d;
        size_t n = conv_prompt(c, 1, t);
        assert_st(route_one(r, id++, t, n, 0, now += 1000000, &d), LR_OK);
        first[c] = d.instance;
        assert_st(lr_router_complete(r, id - 1, 1, now), LR_OK);
    }
    /* the index holds the last few first turns; the marks all of them */
    for (uint32_t c = 0; c < CONVS; c++) {
        lr_decision d;
        size_t n = conv_prompt(c, 2, t);
        assert_st(route_one(r, id++, t, n, LR_ROUTE_DRY_RUN, now, &d), LR_OK);
        assert_int_equal(d.instance, first[c]);
        assert_true(d.cached_tokens >= TURN / 16 / LR__MARK_STRIDE *
                                           LR__MARK_STRIDE * 16);
    }
    assert_router_ok(r);
    /* its engine cleared its cache (AllBlocksCleared, a restart): the
     * marks of its prompts count for nothing; another's still do */
    uint32_t other = first[1] != first[2] ? 2 : 3;
    assert_st(lr_router_kv_cleared(r, first[2]), LR_OK);
    lr_decision dc;
    size_t nc = conv_prompt(2, 2, t);
    assert_st(route_one(r, id++, t, nc, LR_ROUTE_DRY_RUN, now, &dc), LR_OK);
    assert_int_equal(dc.cached_tokens, 0);
    nc = conv_prompt(other, 2, t);
    assert_st(route_one(r, id++, t, nc, LR_ROUTE_DRY_RUN, now, &dc), LR_OK);
    if (first[other] != first[2])
        assert_int_equal(dc.instance, first[other]);
    /* the instance leaves: its marks count for nothing */
    assert_st(lr_router_remove_instance(r, first[0]), LR_OK);
    lr_decision d;
    size_t n = conv_prompt(0, 2, t);
    assert_st(route_one(r, id++, t, n, LR_ROUTE_DRY_RUN, now, &d), LR_OK);
    assert_int_equal(d.cached_tokens, 0);
    lr_router_destroy(r);

    /* learning nothing, routes leave no mark */
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < 8; i++)
        add_instance(r, "10.7", i, 0, 0);
    for (uint32_t c = 0; c < CONVS; c++) {
        n = conv_prompt(c, 1, t);
        assert_st(route_one(r, id++, t, n, LR_ROUTE_NO_LEARN, now, NULL),
                  LR_OK);
    }
    assert_int_equal(lr__marks_count(&r->marks), 0);
    lr_router_destroy(r);
    free(t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(marks_find_what_was_put),
        cmocka_unit_test(marks_keep_the_newest),
        cmocka_unit_test(marks_oom),
        cmocka_unit_test(small_index_keeps_placements),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
