/* Allocation failures and lr_mlp (B33): every allocation of create, clone,
 * load, train, save and the internal gradient fails in turn (once, then
 * from then on). The failing call returns LR_ENOMEM, sets its out
 * parameter to NULL where it has one, and leaves the network exactly as it
 * was: the parameter bytes, a prediction, a save() blob, and the optimizer
 * state and random state (checked by training it and an untouched clone
 * afterwards: they must stay bit-identical). Nothing leaks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "learn/mlp.h"
#include "testutil.h"

#define N_ROWS 90
#define D 3

static float xs[N_ROWS * D], ys[N_ROWS];

static void
make_data(void)
{
    uint64_t s = 0x00a1;
    for (size_t i = 0; i < N_ROWS * D; i++)
        xs[i] = (float)(tu_unit(&s) * 4 - 2);
    for (size_t r = 0; r < N_ROWS; r++)
        ys[r] = (float)(sin(xs[r * D]) + xs[r * D + 1] * xs[r * D + 2]);
}

struct shape {
    uint32_t L, W, batch;
    double dropout;
};

static lr_mlp_options
opts(const struct shape *sh, const lr_allocator *a)
{
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = D;
    o.hidden_layers = sh->L;
    o.width = sh->W;
    o.batch_size = sh->batch;
    o.dropout = sh->dropout;
    o.seed = 17;
    o.allocator = a;
    return o;
}

/* A trained network on t's allocator (set up without failures). */
static lr_mlp *
trained(struct tu_alloc *t, const struct shape *sh)
{
    lr_mlp_options o = opts(sh, &t->a);
    lr_mlp *m;
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    assert_st(lr_mlp_fit_normalization(m, xs, N_ROWS, ys), LR_OK);
    assert_st(lr_mlp_train(m, xs, ys, N_ROWS, 2, NULL), LR_OK);
    return m;
}

/* Everything observable about a network, to compare before and after. */
struct snap {
    float *params;
    size_t n_params;
    float pred[8];
    lr_blob *blob;
};

static void
take(lr_mlp *m, struct snap *s)
{
    s->n_params = lr__mlp_n_params(m);
    s->params = malloc(s->n_params * sizeof(float));
    assert_non_null(s->params);
    memcpy(s->params, lr__mlp_params(m), s->n_params * sizeof(float));
    assert_st(lr_mlp_predict(m, xs, 8, s->pred), LR_OK);
    assert_st(lr_mlp_save(m, &s->blob), LR_OK);
}

static void
assert_same(lr_mlp *m, const struct snap *s)
{
    struct snap now;
    take(m, &now);
    assert_int_equal(now.n_params, s->n_params);
    assert_memory_equal(now.params, s->params, s->n_params * sizeof(float));
    assert_memory_equal(now.pred, s->pred, sizeof s->pred);
    assert_int_equal(lr_blob_size(now.blob), lr_blob_size(s->blob));
    assert_memory_equal(lr_blob_data(now.blob), lr_blob_data(s->blob),
                        lr_blob_size(s->blob));
    free(now.params);
    lr_blob_destroy(now.blob);
}

static void
drop(struct snap *s)
{
    free(s->params);
    lr_blob_destroy(s->blob);
}

/* m and its clone c (made before the failing call) train identically:
 * the optimizer moments, step count and rng of m are untouched. */
static void
assert_trains_like(lr_mlp *m, lr_mlp *c)
{
    double lm, lc;
    assert_st(lr_mlp_train(m, xs, ys, N_ROWS, 2, &lm), LR_OK);
    assert_st(lr_mlp_train(c, xs, ys, N_ROWS, 2, &lc), LR_OK);
    assert_memory_equal(lr__mlp_params(m), lr__mlp_params(c),
                        lr__mlp_n_params(m) * sizeof(float));
    assert_true(lm == lc);
}

static const struct shape shapes[] = {
    { 3, 16, 32, 0.2 },
    { 1, 1, 1, 0.0 },
    { 2, 70, 200, 0.5 }, /* more than one tile of rows per batch */
};

/* Each scenario below runs for every shape. */
static void
each_shape(tu_scenario sc)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        tu_oom_loop(sc, (void *)&shapes[i], 64);
}

/* What the scenarios after create start from, set up with failures
 * paused: a trained network m, an untouched clone c of it (when asked
 * for, else NULL) and a snapshot s of m. */
struct fixture {
    lr_mlp *m, *c;
    struct snap s;
};

static void
fixture_make(struct tu_alloc *t, const struct shape *sh, bool with_clone,
             struct fixture *f)
{
    struct tu_arming a = tu_alloc_pause(t);
    f->m = trained(t, sh);
    f->c = NULL;
    if (with_clone)
        assert_st(lr_mlp_clone(f->m, &f->c), LR_OK);
    take(f->m, &f->s);
    tu_alloc_resume(t, a);
}

static void
fixture_drop(struct fixture *f)
{
    if (f->c != NULL)
        lr_mlp_destroy(f->c);
    lr_mlp_destroy(f->m);
    drop(&f->s);
}

/* ---- create --------------------------------------------------------------- */

static bool
sc_create(struct tu_alloc *t, void *ctx)
{
    const struct shape *sh = ctx;
    lr_mlp_options o = opts(sh, &t->a);
    lr_mlp *m = (lr_mlp *)&m;
    lr_status st = lr_mlp_create(&o, &m);
    if (st == LR_ENOMEM) {
        assert_true(t->failed);
        assert_null(m);
        return false;
    }
    assert_st(st, LR_OK);
    struct tu_arming a = tu_alloc_pause(t);
    float p[4];
    assert_st(lr_mlp_predict(m, xs, 4, p), LR_OK);
    assert_st(lr_mlp_train(m, xs, ys, N_ROWS, 1, NULL), LR_OK);
    lr_mlp_destroy(m);
    tu_alloc_resume(t, a);
    return !t->failed;
}

static void
oom_create(void **state)
{
    (void)state;
    each_shape(sc_create);
}

/* ---- clone ------------------------------------------------------------------ */

static bool
sc_clone(struct tu_alloc *t, void *ctx)
{
    struct fixture f;
    fixture_make(t, ctx, false, &f);
    lr_mlp *c = (lr_mlp *)&c;
    lr_status st = lr_mlp_clone(f.m, &c);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_null(c);
    } else {
        assert_st(st, LR_OK);
        assert_trains_like(c, f.m);
        lr_mlp_destroy(c);
    }
    fixture_drop(&f);
    return !failed;
}

static void
oom_clone(void **state)
{
    (void)state;
    each_shape(sc_clone);
}

/* ---- load and save ------------------------------------------------------------ */

static bool
sc_load(struct tu_alloc *t, void *ctx)
{
    struct fixture f;
    fixture_make(t, ctx, false, &f);
    lr_mlp *l = (lr_mlp *)&l;
    lr_status st =
        lr_mlp_load(lr_blob_data(f.s.blob), lr_blob_size(f.s.blob), &t->a, &l);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_null(l);
    } else {
        assert_st(st, LR_OK);
        assert_same(l, &f.s);
        lr_mlp_destroy(l);
    }
    fixture_drop(&f);
    return !failed;
}

static void
oom_load(void **state)
{
    (void)state;
    each_shape(sc_load);
}

static bool
sc_save(struct tu_alloc *t, void *ctx)
{
    struct fixture f;
    fixture_make(t, ctx, true, &f);
    lr_blob *b = (lr_blob *)&b;
    lr_status st = lr_mlp_save(f.m, &b);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_null(b);
    } else {
        assert_st(st, LR_OK);
        assert_int_equal(lr_blob_size(b), lr_blob_size(f.s.blob));
        assert_memory_equal(lr_blob_data(b), lr_blob_data(f.s.blob),
                            lr_blob_size(b));
        lr_blob_destroy(b);
    }
    assert_same(f.m, &f.s);
    assert_trains_like(f.m, f.c);
    fixture_drop(&f);
    return !failed;
}

static void
oom_save(void **state)
{
    (void)state;
    each_shape(sc_save);
}

/* ---- train and the internal gradient ------------------------------------------- */

static bool
sc_train(struct tu_alloc *t, void *ctx)
{
    struct fixture f;
    fixture_make(t, ctx, true, &f);
    double loss = -7.0;
    lr_status st = lr_mlp_train(f.m, xs, ys, N_ROWS, 3, &loss);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_true(loss == -7.0); /* not written */
        assert_same(f.m, &f.s);
        assert_trains_like(f.m, f.c);
    } else {
        assert_st(st, LR_OK);
        assert_st(lr_mlp_train(f.c, xs, ys, N_ROWS, 3, NULL), LR_OK);
        assert_memory_equal(lr__mlp_params(f.m), lr__mlp_params(f.c),
                            lr__mlp_n_params(f.m) * sizeof(float));
    }
    fixture_drop(&f);
    return !failed;
}

static void
oom_train(void **state)
{
    (void)state;
    each_shape(sc_train);
}

static bool
sc_gradient(struct tu_alloc *t, void *ctx)
{
    struct fixture f;
    fixture_make(t, ctx, true, &f);
    float *g = malloc(lr__mlp_n_params(f.m) * sizeof *g);
    double loss = -7.0, lz = -7.0;
    lr_status st = lr__mlp_gradient(f.m, xs, ys, N_ROWS, g, &loss);
    lr_status st2 = lr__mlp_loss_z(f.m, xs, ys, N_ROWS, &lz);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM)
        assert_true(loss == -7.0);
    else
        assert_st(st, LR_OK);
    if (st2 == LR_ENOMEM)
        assert_true(lz == -7.0);
    else
        assert_st(st2, LR_OK);
    assert_true(failed || (st == LR_OK && st2 == LR_OK));
    assert_same(f.m, &f.s);
    assert_trains_like(f.m, f.c);
    free(g);
    fixture_drop(&f);
    return !failed;
}

static void
oom_gradient(void **state)
{
    (void)state;
    each_shape(sc_gradient);
}

/* Once created, scoring never allocates: a whole scoring workload runs
 * with every allocation failing. */
static void
scoring_never_allocates(void **state)
{
    (void)state;
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_mlp *m = trained(&t, &shapes[0]);
    tu_alloc_arm(&t, 1, true);
    float out[N_ROWS];
    double mse;
    size_t n;
    for (size_t rows = 1; rows <= N_ROWS; rows += 11) {
        assert_st(lr_mlp_predict(m, xs, rows, out), LR_OK);
        assert_st(lr_mlp_loss(m, xs, ys, rows, &mse), LR_OK);
        assert_st(lr_mlp_out_of_range(m, xs, rows, &n), LR_OK);
        assert_st(lr_mlp_fit_normalization(m, xs, rows, ys), LR_OK);
    }
    assert_int_equal(t.calls, 0);
    tu_alloc_disarm(&t);
    lr_mlp_destroy(m);
    assert_int_equal(t.live_bytes, 0);
}

int
main(void)
{
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oom_create),
        cmocka_unit_test(oom_clone),
        cmocka_unit_test(oom_load),
        cmocka_unit_test(oom_save),
        cmocka_unit_test(oom_train),
        cmocka_unit_test(oom_gradient),
        cmocka_unit_test(scoring_never_allocates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
