/* Allocation-failure loops over lr_index mutators (B33): every allocation
 * in turn fails (once, then from then on); a failing call must return
 * LR_ENOMEM, leave the index exactly as it was (digest) and leak nothing.
 * Precise-mode and delta mutators have their loops in test-index-kv.c and
 * test-index-delta.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "testutil.h"

static void
fill(uint32_t *t, uint32_t n, uint32_t base)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = base + i / 3;
}

static lr_index *
populated(struct tu_alloc *t, uint64_t cap)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.allocator = &t->a;
    o.block_tokens = 4;
    o.capacity_blocks = cap;
    o.max_instances = 4;
    o.journal_capacity = 8;
    lr_index *ix;
    assert_int_equal(lr_index_create(&o, &ix), LR_OK);
    uint32_t tok[64];
    for (uint32_t i = 0; i < 6; i++) {
        fill(tok, 64, i < 3 ? 0 : 1000 * i);
        tok[40 + i] = 77 + i;
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = tok;
        p.n_tokens = 64;
        assert_int_equal(lr_index_learn(ix, &p, 10 + i % 3, 0, i + 1), LR_OK);
    }
    return ix;
}

/* After the call under test (status st; before, the digest from before
 * it): disarm; LR_ENOMEM must have left the index as it was, anything else
 * must be LR_OK. Returns whether a failure was injected. */
static bool
ended(struct tu_alloc *t, const lr_index *ix, lr_status st, uint64_t before)
{
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM)
        assert_int_equal(lr__index_digest(ix), before);
    else
        assert_int_equal(st, LR_OK);
    return failed;
}

static bool
sc_create(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    lr_index_options o;
    lr_index_options_init(&o);
    o.allocator = &t->a;
    lr_index *ix = (lr_index *)1;
    lr_status st = lr_index_create(&o, &ix);
    if (st == LR_ENOMEM) {
        assert_null(ix);
        return false;
    }
    assert_int_equal(st, LR_OK);
    lr_index_destroy(ix);
    return !t->failed;
}

struct learn_ctx {
    uint32_t ntok; /* prompt length */
    uint32_t base; /* token base: 0 shares with the populated prompts */
    uint32_t inst; /* 10..12 known, 13 new */
    uint64_t cap;
    int trust;
    bool warm_scratch; /* grow the key scratch before arming */
};

static bool
sc_learn(struct tu_alloc *t, void *vctx)
{
    struct learn_ctx *c = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_index *ix = populated(t, c->cap);
    if (c->warm_scratch) { /* so that only the index's state allocates */
        uint32_t *w = calloc(c->ntok, sizeof *w);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = w;
        p.n_tokens = c->ntok;
        lr_index_match_result r;
        lr_index_match_result_init(&r);
        assert_int_equal(lr_index_match(ix, &p, 50, LR_MATCH_NO_TOUCH, &r),
                         LR_OK);
        free(w);
    }
    uint64_t before = lr__index_digest(ix);
    tu_alloc_resume(t, arm);

    uint32_t *tok = malloc(c->ntok * sizeof *tok);
    fill(tok, c->ntok, c->base);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = tok;
    p.n_tokens = c->ntok;
    uint32_t bnd[2] = { 8, 20 };
    p.boundaries = bnd;
    p.n_boundaries = c->ntok >= 20 ? 2 : 0;
    lr_status st = lr_index_learn(ix, &p, c->inst, c->trust, 100);
    bool failed = ended(t, ix, st, before);
    assert_int_equal(lr__index_verify(ix), LR_OK);
    free(tok);
    lr_index_destroy(ix);
    return !failed;
}

static bool
sc_match(struct tu_alloc *t, void *vctx)
{
    (void)vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_index *ix = populated(t, 1000);
    uint64_t before = lr__index_digest(ix);
    tu_alloc_resume(t, arm);
    /* a prompt longer than any before forces the key scratch to grow */
    uint32_t tok[4096];
    fill(tok, 4096, 0);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = tok;
    p.n_tokens = 4096;
    lr_index_hit h[4];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 4;
    lr_status st = lr_index_match(ix, &p, 50, 0, &r);
    bool failed = ended(t, ix, st, before);
    lr_index_destroy(ix);
    return !failed;
}

static void
oom_create(void **state)
{
    (void)state;
    tu_oom_loop(sc_create, NULL, 100);
}

static void
oom_learn_new_prompt(void **state)
{
    (void)state;
    struct learn_ctx c = {
        .ntok = 3000, .base = 50000, .inst = 11, .cap = 1 << 16
    };
    tu_oom_loop(sc_learn, &c, 200);
}

static void
oom_learn_shared_prefix_new_instance(void **state)
{
    (void)state;
    struct learn_ctx c = { .ntok = 200, .base = 0, .inst = 13, .cap = 1 << 16 };
    tu_oom_loop(sc_learn, &c, 200);
}

static void
oom_learn_under_eviction(void **state)
{
    (void)state;
    /* 50 new blocks into a full index of 60: most of it is evicted, and
     * the node table's reservation for the new nodes makes it grow */
    struct learn_ctx c = {
        .ntok = 200, .base = 7000, .inst = 12, .cap = 60, .warm_scratch = true
    };
    tu_oom_loop(sc_learn, &c, 200);
    c.trust = LR_TRUST_REMOTE;
    tu_oom_loop(sc_learn, &c, 200);
}

static void
oom_match(void **state)
{
    (void)state;
    tu_oom_loop(sc_match, NULL, 100);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oom_create),
        cmocka_unit_test(oom_learn_new_prompt),
        cmocka_unit_test(oom_learn_shared_prefix_new_instance),
        cmocka_unit_test(oom_learn_under_eviction),
        cmocka_unit_test(oom_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
