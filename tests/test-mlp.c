/* Unit tests of lr_mlp: option bounds and NULL handling; backprop against
 * finite differences; both kernels against a naive double-precision model
 * written here from lr__mlp_params(); training on a known function,
 * determinism and dropout; save/load (round trip, every truncation, every
 * byte flip, crafted blobs with a valid checksum); ranges; clone. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/lr_hash.h"
#include "learn/mlp.h"
#include "testutil.h"

/* The serialized layout (lib/learn/mlp.c), for the crafted-blob tests. */
#define HDR 84u
#define OFF_VERSION 8u
#define OFF_D 12u
#define OFF_L 16u
#define OFF_W 20u
#define OFF_BATCH 24u
#define OFF_DROPOUT 36u
#define OFF_LR 44u
#define OFF_WD 52u
#define OFF_CLIP 60u
#define OFF_TMEAN 68u
#define OFF_TSTD 76u
#define HASH_SEED 0x4c524d4c50303031ull

static uint64_t g_seed;

/* ---- helpers --------------------------------------------------------------- */

static lr_mlp *
mk(uint32_t d, uint32_t L, uint32_t W, uint64_t seed, double dropout,
   const lr_allocator *a)
{
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = d;
    o.hidden_layers = L;
    o.width = W;
    o.seed = seed;
    o.dropout = dropout;
    o.allocator = a;
    lr_mlp *m = NULL;
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    assert_non_null(m);
    return m;
}

static float *
rand_rows(uint64_t *s, size_t n, size_t d, double lo, double hi)
{
    float *x = malloc((n * d + 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n * d; i++)
        x[i] = (float)(lo + (hi - lo) * tu_unit(s));
    return x;
}

/* Replace every parameter with U(-a, a) (biases too). */
static void
rand_params(lr_mlp *m, uint64_t *s, double a)
{
    float *p = lr__mlp_params(m);
    for (size_t i = 0; i < lr__mlp_n_params(m); i++)
        p[i] = (float)((2.0 * tu_unit(s) - 1.0) * a);
}

static float *
params_copy(lr_mlp *m)
{
    size_t n = lr__mlp_n_params(m);
    float *c = malloc(n * sizeof *c);
    assert_non_null(c);
    memcpy(c, lr__mlp_params(m), n * sizeof *c);
    return c;
}

static void
assert_params_equal(lr_mlp *a, lr_mlp *b)
{
    assert_int_equal(lr__mlp_n_params(a), lr__mlp_n_params(b));
    assert_memory_equal(lr__mlp_params(a), lr__mlp_params(b),
                        lr__mlp_n_params(a) * sizeof(float));
}

static lr_blob *
save(const lr_mlp *m)
{
    lr_blob *b = NULL;
    assert_st(lr_mlp_save(m, &b), LR_OK);
    assert_non_null(b);
    return b;
}

/* The naive model: normalization the test computes itself, weights read
 * from lr__mlp_params(), everything in double, one row at a time. */
struct naive {
    uint32_t d, L, W;
    double mean[64], sd[64];
    double tmean, tsd;
};

static void
naive_identity(struct naive *nv, uint32_t d, uint32_t L, uint32_t W)
{
    memset(nv, 0, sizeof *nv);
    nv->d = d;
    nv->L = L;
    nv->W = W;
    for (uint32_t i = 0; i < d; i++)
        nv->sd[i] = 1.0;
    nv->tsd = 1.0;
}

static void
naive_fit(struct naive *nv, const float *x, size_t n, const float *y)
{
    for (uint32_t i = 0; i < nv->d; i++) {
        double s = 0, ss = 0, lo = x[i], hi = x[i];
        for (size_t r = 0; r < n; r++) {
            double v = x[r * nv->d + i];
            s += v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        double mean = s / (double)n;
        for (size_t r = 0; r < n; r++)
            ss += (x[r * nv->d + i] - mean) * (x[r * nv->d + i] - mean);
        nv->mean[i] = lo == hi ? lo : mean;
        nv->sd[i] = lo == hi ? 1.0 : sqrt(ss / (double)n);
    }
    if (y != NULL) {
        double s = 0, ss = 0;
        for (size_t r = 0; r < n; r++)
            s += y[r];
        double mean = s / (double)n;
        for (size_t r = 0; r < n; r++)
            ss += (y[r] - mean) * (y[r] - mean);
        nv->tmean = mean;
        nv->tsd = ss > 0 ? sqrt(ss / (double)n) : 1.0;
    }
}

/* Output in target units; `hidden` (optional) gets the last hidden layer. */
static double
naive_forward(const struct naive *nv, const float *p, const float *row,
              double *hidden)
{
    double a[1200], b[1200];
    for (uint32_t i = 0; i < nv->d; i++)
        a[i] = (row[i] - nv->mean[i]) / nv->sd[i];
    size_t off = 0;
    for (uint32_t l = 0; l <= nv->L; l++) {
        size_t in = l == 0 ? nv->d : nv->W, out = l == nv->L ? 1 : nv->W;
        const float *w = p + off, *bias = p + off + in * out;
        for (size_t o = 0; o < out; o++) {
            double s = bias[o];
            for (size_t i = 0; i < in; i++)
                s += (double)w[o * in + i] * a[i];
            b[o] = l == nv->L ? s : (s > 0 ? s : 0);
        }
        if (l + 1 == nv->L && hidden != NULL)
            memcpy(hidden, b, out * sizeof *b);
        memcpy(a, b, out * sizeof *b);
        off += in * out + out;
    }
    return a[0] * nv->tsd + nv->tmean;
}

/* Sum over rows of |w| |a| along the path, a scale for float tolerances. */
static double
naive_scale(const struct naive *nv, const float *p, const float *row)
{
    double a[1200], b[1200];
    for (uint32_t i = 0; i < nv->d; i++)
        a[i] = fabs((row[i] - nv->mean[i]) / nv->sd[i]);
    size_t off = 0;
    for (uint32_t l = 0; l <= nv->L; l++) {
        size_t in = l == 0 ? nv->d : nv->W, out = l == nv->L ? 1 : nv->W;
        const float *w = p + off, *bias = p + off + in * out;
        for (size_t o = 0; o < out; o++) {
            double s = fabs(bias[o]);
            for (size_t i = 0; i < in; i++)
                s += fabs((double)w[o * in + i]) * a[i];
            b[o] = s;
        }
        memcpy(a, b, out * sizeof *b);
        off += in * out + out;
    }
    return a[0] * nv->tsd;
}

/* ---- options, create, NULLs ------------------------------------------------- */

static void
options_init_defaults(void **state)
{
    (void)state;
    lr_mlp_options_init_sized(NULL, sizeof(lr_mlp_options));
    lr_mlp_options o;
    memset(&o, 0xa5, sizeof o);
    lr_mlp_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_null(o.allocator);
    assert_int_equal(o.seed, 0);
    assert_int_equal(o.n_inputs, 0);
    assert_int_equal(o.hidden_layers, 3);
    assert_int_equal(o.width, 128);
    assert_int_equal(o.batch_size, 256);
    assert_true(o.dropout == 0.1);
    assert_true(o.learning_rate == 1e-3);
    assert_true(o.weight_decay == 1e-5);
    assert_true(o.grad_clip == 1.0);
    assert_int_equal(LR_MLP_OPTIONS_SIZE_V1, sizeof(lr_mlp_options));
}

static lr_status
create_with(const lr_mlp_options *o)
{
    lr_mlp *m = (lr_mlp *)&m; /* must become NULL on failure */
    lr_status st = lr_mlp_create(o, &m);
    if (st == LR_OK) {
        assert_non_null(m);
        assert_int_equal(lr_mlp_n_inputs(m), o->n_inputs);
        lr_mlp_destroy(m);
    } else {
        assert_null(m);
    }
    return st;
}

static void
create_bounds(void **state)
{
    (void)state;
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = 4;
    assert_st(lr_mlp_create(&o, NULL), LR_EINVAL);
    lr_mlp *m = (lr_mlp *)&m;
    assert_st(lr_mlp_create(NULL, &m), LR_EINVAL);
    assert_null(m);
    assert_st(create_with(&o), LR_OK);

    struct {
        size_t off; /* of a uint32_t field */
        uint32_t bad[3], good[3];
    } u32s[] = {
        { offsetof(lr_mlp_options, n_inputs),
          { 0, LR_MLP_MAX_INPUTS + 1, UINT32_MAX },
          { 1, 17, LR_MLP_MAX_INPUTS } },
        { offsetof(lr_mlp_options, hidden_layers),
          { 0, LR_MLP_MAX_LAYERS + 1, UINT32_MAX },
          { 1, 2, LR_MLP_MAX_LAYERS } },
        { offsetof(lr_mlp_options, width),
          { 0, LR_MLP_MAX_WIDTH + 1, UINT32_MAX },
          { 1, 3, 64 } },
        { offsetof(lr_mlp_options, batch_size),
          { 0, LR_MLP_MAX_BATCH + 1, UINT32_MAX },
          { 1, 7, LR_MLP_MAX_BATCH } },
    };
    for (size_t f = 0; f < sizeof u32s / sizeof u32s[0]; f++) {
        for (int i = 0; i < 3; i++) {
            lr_mlp_options_init(&o);
            o.n_inputs = 4;
            o.width = 8;
            memcpy((char *)&o + u32s[f].off, &u32s[f].bad[i], sizeof(uint32_t));
            assert_st(create_with(&o), LR_EINVAL);
            memcpy((char *)&o + u32s[f].off, &u32s[f].good[i],
                   sizeof(uint32_t));
            assert_st(create_with(&o), LR_OK);
        }
    }
    /* the largest width, alone */
    lr_mlp_options_init(&o);
    o.n_inputs = 2;
    o.hidden_layers = 1;
    o.width = LR_MLP_MAX_WIDTH;
    assert_st(create_with(&o), LR_OK);

    struct {
        size_t off;
        double bad[6], good[4];
    } f64s[] = {
        { offsetof(lr_mlp_options, dropout),
          { -1e-300, -0.1, 0.9000001, 1.0, NAN, INFINITY },
          { 0.0, 1e-9, 0.5, 0.9 } },
        { offsetof(lr_mlp_options, learning_rate),
          { 0.0, -1e-3, 1.0000001, NAN, INFINITY, -INFINITY },
          { 1e-300, 1e-4, 0.5, 1.0 } },
        { offsetof(lr_mlp_options, weight_decay),
          { -1e-300, -0.5, 1.0, 2.0, NAN, INFINITY },
          { 0.0, 1e-9, 0.5, 0.999 } },
        { offsetof(lr_mlp_options, grad_clip),
          { -1e-300, -1.0, NAN, INFINITY, -INFINITY, -0.5 },
          { 0.0, 1e-9, 1.0, 1e300 } },
    };
    for (size_t f = 0; f < sizeof f64s / sizeof f64s[0]; f++) {
        for (int i = 0; i < 6; i++) {
            lr_mlp_options_init(&o);
            o.n_inputs = 4;
            o.width = 8;
            memcpy((char *)&o + f64s[f].off, &f64s[f].bad[i], sizeof(double));
            assert_st(create_with(&o), LR_EINVAL);
        }
        for (int i = 0; i < 4; i++) {
            lr_mlp_options_init(&o);
            o.n_inputs = 4;
            o.width = 8;
            memcpy((char *)&o + f64s[f].off, &f64s[f].good[i], sizeof(double));
            assert_st(create_with(&o), LR_OK);
        }
    }

    /* struct_size */
    lr_mlp_options_init(&o);
    o.n_inputs = 4;
    o.struct_size = 0;
    assert_st(create_with(&o), LR_EVERSION);
    o.struct_size = LR_MLP_OPTIONS_SIZE_V1 - 1;
    assert_st(create_with(&o), LR_EVERSION);
    o.struct_size = LR_MLP_OPTIONS_SIZE_V1;
    assert_st(create_with(&o), LR_OK);
    struct {
        lr_mlp_options o;
        uint64_t future[4];
    } big;
    memset(&big, 0xff, sizeof big);
    lr_mlp_options_init(&big.o);
    big.o.struct_size = sizeof big;
    big.o.n_inputs = 4;
    assert_st(create_with(&big.o), LR_OK);

    /* an allocator without hooks */
    lr_mlp_options_init(&o);
    o.n_inputs = 4;
    lr_allocator bad;
    memset(&bad, 0, sizeof bad);
    o.allocator = &bad;
    assert_st(create_with(&o), LR_EINVAL);
}

static void
null_handling(void **state)
{
    (void)state;
    lr_mlp_destroy(NULL);
    assert_int_equal(lr_mlp_n_inputs(NULL), 0);
    assert_int_equal(lr__mlp_width(NULL), 0);
    assert_int_equal(lr__mlp_n_params(NULL), 0);
    assert_null(lr__mlp_params(NULL));
    assert_non_null(lr__mlp_kernel());

    lr_mlp *m = mk(2, 1, 3, 1, 0.0, NULL);
    float x[4] = { 1, 2, 3, 4 }, y[2] = { 1, 2 }, out[2] = { 7, 7 };
    float g[64];
    double d = 0;
    size_t n = 0;
    lr_mlp *o = (lr_mlp *)&o;
    lr_blob *b = (lr_blob *)&b;

    assert_st(lr_mlp_clone(NULL, &o), LR_EINVAL);
    assert_null(o);
    assert_st(lr_mlp_clone(m, NULL), LR_EINVAL);
    assert_st(lr_mlp_fit_normalization(NULL, x, 2, y), LR_EINVAL);
    assert_st(lr_mlp_fit_normalization(m, NULL, 2, y), LR_EINVAL);
    assert_st(lr_mlp_fit_normalization(m, x, 0, y), LR_EINVAL);
    assert_st(lr_mlp_predict(NULL, x, 2, out), LR_EINVAL);
    assert_st(lr_mlp_predict(m, NULL, 2, out), LR_EINVAL);
    assert_st(lr_mlp_predict(m, x, 2, NULL), LR_EINVAL);
    assert_st(lr_mlp_predict(m, x, 0, out), LR_OK);
    assert_true(out[0] == 7 && out[1] == 7);
    assert_st(lr_mlp_out_of_range(NULL, x, 2, &n), LR_EINVAL);
    assert_st(lr_mlp_out_of_range(m, NULL, 2, &n), LR_EINVAL);
    assert_st(lr_mlp_out_of_range(m, x, 2, NULL), LR_EINVAL);
    assert_st(lr_mlp_out_of_range(m, NULL, 0, &n), LR_OK);
    assert_int_equal(n, 0);
    uint8_t fl[2] = { 7, 7 };
    assert_st(lr_mlp_out_of_range_rows(NULL, x, 2, fl, &n), LR_EINVAL);
    assert_st(lr_mlp_out_of_range_rows(m, NULL, 2, fl, &n), LR_EINVAL);
    assert_st(lr_mlp_out_of_range_rows(m, x, 2, NULL, &n), LR_EINVAL);
    assert_true(fl[0] == 7 && fl[1] == 7);
    n = 9;
    assert_st(lr_mlp_out_of_range_rows(m, NULL, 0, NULL, &n), LR_OK);
    assert_int_equal(n, 0);
    assert_st(lr_mlp_out_of_range_rows(m, x, 2, fl, NULL), LR_OK);
    assert_true(fl[0] == 0 && fl[1] == 0); /* never fitted: all in */
    assert_st(lr_mlp_train(NULL, x, y, 2, 1, &d), LR_EINVAL);
    assert_st(lr_mlp_train(m, NULL, y, 2, 1, &d), LR_EINVAL);
    assert_st(lr_mlp_train(m, x, NULL, 2, 1, &d), LR_EINVAL);
    assert_st(lr_mlp_train(m, x, y, 0, 1, &d), LR_EINVAL);
    assert_st(lr_mlp_loss(NULL, x, y, 2, &d), LR_EINVAL);
    assert_st(lr_mlp_loss(m, NULL, y, 2, &d), LR_EINVAL);
    assert_st(lr_mlp_loss(m, x, NULL, 2, &d), LR_EINVAL);
    assert_st(lr_mlp_loss(m, x, y, 0, &d), LR_EINVAL);
    assert_st(lr_mlp_loss(m, x, y, 2, NULL), LR_EINVAL);
    assert_st(lr_mlp_save(NULL, &b), LR_EINVAL);
    assert_null(b);
    assert_st(lr_mlp_save(m, NULL), LR_EINVAL);
    o = (lr_mlp *)&o;
    assert_st(lr_mlp_load(NULL, 10, NULL, &o), LR_EINVAL);
    assert_null(o);
    assert_st(lr_mlp_load((const uint8_t *)"x", 1, NULL, NULL), LR_EINVAL);
    assert_st(lr_mlp_load(NULL, 0, NULL, &o), LR_ECORRUPT);
    assert_st(lr__mlp_gradient(NULL, x, y, 2, g, &d), LR_EINVAL);
    assert_st(lr__mlp_gradient(m, x, y, 2, NULL, &d), LR_EINVAL);
    assert_st(lr__mlp_gradient(m, x, y, 0, g, &d), LR_EINVAL);
    assert_st(lr__mlp_loss_z(NULL, x, y, 2, &d), LR_EINVAL);
    assert_st(lr__mlp_loss_z(m, x, y, 2, NULL), LR_EINVAL);
    assert_st(lr__mlp_last_hidden(NULL, x, 2, g), LR_EINVAL);
    assert_st(lr__mlp_last_hidden(m, x, 2, NULL), LR_EINVAL);
    lr_mlp_destroy(m);
}

/* Sizes whose byte count overflows are refused before anything is read. */
static void
absurd_sizes(void **state)
{
    (void)state;
    lr_mlp *m = mk(4, 1, 3, 1, 0.0, NULL);
    float x[4] = { 0 }, y[1] = { 0 }, out[1];
    size_t huge = SIZE_MAX / 2, n;
    double d;
    assert_st(lr_mlp_predict(m, x, huge, out), LR_EINVAL);
    assert_st(lr_mlp_fit_normalization(m, x, huge, y), LR_EINVAL);
    assert_st(lr_mlp_out_of_range(m, x, huge, &n), LR_EINVAL);
    uint8_t fl[1];
    assert_st(lr_mlp_out_of_range_rows(m, x, huge, fl, &n), LR_EINVAL);
    assert_st(lr_mlp_train(m, x, y, huge, 1, &d), LR_EINVAL);
    assert_st(lr_mlp_loss(m, x, y, huge, &d), LR_EINVAL);
    assert_st(lr__mlp_last_hidden(m, x, huge, out), LR_EINVAL);
    lr_mlp_destroy(m);
}

static void
init_weights(void **state)
{
    (void)state;
    const uint32_t d = 5, L = 3, W = 9;
    lr_mlp *a = mk(d, L, W, 11, 0.1, NULL);
    lr_mlp *b = mk(d, L, W, 11, 0.1, NULL);
    lr_mlp *c = mk(d, L, W, 12, 0.1, NULL);
    assert_int_equal(lr__mlp_width(a), W);
    assert_int_equal(lr__mlp_n_params(a),
                     (size_t)W * d + W + (L - 1) * (W * W + W) + W + 1);
    assert_params_equal(a, b);
    assert_memory_not_equal(lr__mlp_params(a), lr__mlp_params(c),
                            lr__mlp_n_params(a) * sizeof(float));
    /* Xavier bounds, zero biases, not all tiny */
    const float *p = lr__mlp_params(a);
    size_t off = 0;
    for (uint32_t l = 0; l <= L; l++) {
        size_t in = l == 0 ? d : W, out = l == L ? 1 : W;
        double lim = sqrt(6.0 / (double)(in + out));
        double maxabs = 0;
        for (size_t i = 0; i < in * out; i++) {
            assert_true(fabs(p[off + i]) <= lim);
            maxabs = fmax(maxabs, fabs(p[off + i]));
        }
        assert_true(maxabs > lim / 4);
        for (size_t i = 0; i < out; i++)
            assert_true(p[off + in * out + i] == 0.0f);
        off += in * out + out;
    }
    assert_int_equal(off, lr__mlp_n_params(a));
    lr_mlp_destroy(a);
    lr_mlp_destroy(b);
    lr_mlp_destroy(c);
}

/* ---- gradient ------------------------------------------------------------- */

static double
fd_at(lr_mlp *m, const float *x, const float *y, size_t n, size_t i, double h)
{
    float *p = lr__mlp_params(m);
    float p0 = p[i];
    float up = (float)(p0 + h), dn = (float)(p0 - h);
    double lu, ld;
    p[i] = up;
    assert_st(lr__mlp_loss_z(m, x, y, n, &lu), LR_OK);
    p[i] = dn;
    assert_st(lr__mlp_loss_z(m, x, y, n, &ld), LR_OK);
    p[i] = p0;
    return (lu - ld) / ((double)up - (double)dn);
}

static bool
grad_close(double g, double fd)
{
    return fabs(g - fd) <= 1e-3 * fmax(fabs(g), fabs(fd)) + 2e-5;
}

static void
check_gradient(uint64_t seed)
{
    const uint32_t d = 5, W = 7;
    const size_t n = 9;
    uint64_t s = seed;
    lr_mlp *m = mk(d, 2, W, seed, 0.5, NULL); /* dropout must not matter */
    float *x = rand_rows(&s, n, d, -2, 3);
    float *y = rand_rows(&s, n, 1, -5, 20);
    assert_st(lr_mlp_fit_normalization(m, x, n, y), LR_OK);
    rand_params(m, &s, 0.8);
    size_t np = lr__mlp_n_params(m);
    float *g = malloc(np * sizeof *g);
    double loss = 0, lz = 0;
    assert_st(lr__mlp_gradient(m, x, y, n, g, &loss), LR_OK);
    assert_st(lr__mlp_loss_z(m, x, y, n, &lz), LR_OK);
    assert_true(fabs(loss - lz) <= 1e-5 * (1 + lz));
    size_t nonzero = 0;
    for (size_t i = 0; i < np; i++) {
        double fd = fd_at(m, x, y, n, i, 1e-3);
        if (!grad_close(g[i], fd)) /* a ReLU kink inside the step? */
            fd = fd_at(m, x, y, n, i, 1e-5);
        if (!grad_close(g[i], fd))
            fail_msg("param %zu of %zu: backprop %.8g, finite difference "
                     "%.8g (seed %llu, kernel %s)",
                     i, np, (double)g[i], fd, (unsigned long long)seed,
                     lr__mlp_kernel());
        nonzero += g[i] != 0.0f;
    }
    assert_true(nonzero > np / 2);
    free(g);
    free(x);
    free(y);
    lr_mlp_destroy(m);
}

static void
gradient_matches_finite_differences(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        lr__mlp_force_portable(k);
        for (uint64_t i = 0; i < 4; i++)
            check_gradient(g_seed + i);
    }
    lr__mlp_force_portable(0);
}

/* The gradient of a batch is the mean of the rows' gradients. */
static void
gradient_is_mean_over_rows(void **state)
{
    (void)state;
    uint64_t s = g_seed ^ 0x99;
    lr_mlp *m = mk(3, 3, 70, 3, 0.0, NULL);
    rand_params(m, &s, 0.3);
    const size_t n = 150; /* more than one tile of rows */
    float *x = rand_rows(&s, n, 3, -1, 1);
    float *y = rand_rows(&s, n, 1, -1, 1);
    size_t np = lr__mlp_n_params(m);
    float *g = malloc(np * sizeof *g), *g1 = malloc(np * sizeof *g1);
    double *sum = calloc(np, sizeof *sum), *asum = calloc(np, sizeof *asum);
    assert_st(lr__mlp_gradient(m, x, y, n, g, NULL), LR_OK);
    for (size_t r = 0; r < n; r++) {
        assert_st(lr__mlp_gradient(m, x + 3 * r, y + r, 1, g1, NULL), LR_OK);
        for (size_t i = 0; i < np; i++) {
            sum[i] += g1[i];
            asum[i] += fabs(g1[i]);
        }
    }
    double gmax = 0;
    for (size_t i = 0; i < np; i++)
        gmax = fmax(gmax, fabs(g[i]));
    assert_true(gmax > 0);
    for (size_t i = 0; i < np; i++)
        if (!(fabs(sum[i] / (double)n - g[i]) <=
              1e-5 * asum[i] / (double)n + 1e-7 * gmax))
            fail_msg("param %zu: batch %.9g, mean of rows %.9g", i,
                     (double)g[i], sum[i] / (double)n);
    free(asum);
    free(g);
    free(g1);
    free(sum);
    free(x);
    free(y);
    lr_mlp_destroy(m);
}

/* ---- forward against the naive model ---------------------------------------- */

static void
check_against_naive(uint32_t d, uint32_t L, uint32_t W, size_t n, bool fit,
                    uint64_t seed)
{
    uint64_t s = seed;
    lr_mlp *m = mk(d, L, W, seed, 0.3, NULL);
    struct naive nv;
    naive_identity(&nv, d, L, W);
    float *x = rand_rows(&s, n, d, -3, 5);
    if (fit) {
        size_t nf = 97;
        float *xf = rand_rows(&s, nf, d, -3, 5);
        float *yf = rand_rows(&s, nf, 1, 100, 140);
        if (d > 1)
            for (size_t r = 0; r < nf; r++)
                xf[r * d + 1] = 2.5f; /* a constant feature */
        assert_st(lr_mlp_fit_normalization(m, xf, nf, yf), LR_OK);
        naive_fit(&nv, xf, nf, yf);
        free(xf);
        free(yf);
    }
    rand_params(m, &s, 1.5 / sqrt((double)(W > d ? W : d)));
    const float *p = lr__mlp_params(m);
    float *out[2];
    for (int k = 0; k < 2; k++) {
        lr__mlp_force_portable(k);
        out[k] = malloc(n * sizeof(float));
        assert_st(lr_mlp_predict(m, x, n, out[k]), LR_OK);
        /* and again: no state carried between calls */
        float *again = malloc(n * sizeof(float));
        assert_st(lr_mlp_predict(m, x, n, again), LR_OK);
        assert_memory_equal(out[k], again, n * sizeof(float));
        free(again);
    }
    lr__mlp_force_portable(0);
    double *hid = malloc(W * sizeof(double));
    float *lh = malloc(n * W * sizeof(float));
    assert_st(lr__mlp_last_hidden(m, x, n, lh), LR_OK);
    for (size_t r = 0; r < n; r++) {
        double want = naive_forward(&nv, p, x + r * d, hid);
        double tol = 2e-5 * (naive_scale(&nv, p, x + r * d) + fabs(nv.tmean));
        for (int k = 0; k < 2; k++)
            if (!(fabs(out[k][r] - want) <= tol))
                fail_msg("d=%u L=%u W=%u n=%zu row %zu kernel %d: %.9g, "
                         "naive %.9g (tol %.3g)",
                         d, L, W, n, r, k, (double)out[k][r], want, tol);
        for (size_t o = 0; o < W; o++)
            if (!(fabs(lh[r * W + o] - hid[o]) <= 1e-4 * (1 + fabs(hid[o]))))
                fail_msg("hidden d=%u L=%u W=%u row %zu unit %zu: %.9g vs "
                         "%.9g",
                         d, L, W, r, o, (double)lh[r * W + o], hid[o]);
    }
    /* a row's result does not depend on the rows around it */
    for (size_t r = 0; r < n; r += 7) {
        float one;
        assert_st(lr_mlp_predict(m, x + r * d, 1, &one), LR_OK);
        assert_memory_equal(&one, &out[0][r], sizeof one);
    }
    free(hid);
    free(lh);
    free(out[0]);
    free(out[1]);
    free(x);
    lr_mlp_destroy(m);
}

static void
forward_matches_naive(void **state)
{
    (void)state;
    static const size_t ns[] = { 1, 3, 64, 67, 200 };
    static const uint32_t ws[] = { 1, 7, 128, 130 };
    static const uint32_t ds[] = { 1, 5, 20, 33 };
    uint64_t seed = g_seed;
    for (uint32_t L = 1; L <= 4; L++)
        for (size_t wi = 0; wi < 4; wi++)
            for (size_t ni = 0; ni < 5; ni++)
                check_against_naive(ds[(L + wi + ni) % 4], L, ws[wi], ns[ni],
                                    (L + ni) % 2 == 0, seed++);
}

static void
predict_rejects_non_finite(void **state)
{
    (void)state;
    lr_mlp *m = mk(3, 2, 5, 1, 0.0, NULL);
    float x[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    float y[3] = { 1, 2, 3 };
    float out[3] = { -1, -1, -1 };
    float bad[3] = { NAN, INFINITY, -INFINITY };
    lr_blob *b0 = save(m);
    for (int k = 0; k < 3; k++) {
        for (int at = 0; at < 9; at++) {
            float xs[9];
            memcpy(xs, x, sizeof xs);
            xs[at] = bad[k];
            double dd = 0;
            size_t n;
            float h[15];
            assert_st(lr_mlp_predict(m, xs, 3, out), LR_EINVAL);
            assert_true(out[0] == -1 && out[1] == -1 && out[2] == -1);
            assert_st(lr_mlp_loss(m, xs, y, 3, &dd), LR_EINVAL);
            assert_st(lr_mlp_train(m, xs, y, 3, 1, &dd), LR_EINVAL);
            assert_st(lr_mlp_fit_normalization(m, xs, 3, y), LR_EINVAL);
            assert_st(lr__mlp_last_hidden(m, xs, 3, h), LR_EINVAL);
            assert_st(lr_mlp_out_of_range(m, xs, 3, &n), LR_OK);
            assert_int_equal(n, 1); /* NaN and +-inf: out of range */
            uint8_t fl[3];
            assert_st(lr_mlp_out_of_range_rows(m, xs, 3, fl, &n), LR_OK);
            assert_int_equal(n, 1);
            for (int r = 0; r < 3; r++)
                assert_int_equal(fl[r], r == at / 3);
        }
        float ys[3] = { 1, 2, 3 };
        ys[1] = bad[k];
        double dd = 0;
        assert_st(lr_mlp_loss(m, x, ys, 3, &dd), LR_EINVAL);
        assert_st(lr_mlp_train(m, x, ys, 3, 1, &dd), LR_EINVAL);
        assert_st(lr_mlp_fit_normalization(m, x, 3, ys), LR_EINVAL);
    }
    lr_blob *b1 = save(m);
    assert_int_equal(lr_blob_size(b0), lr_blob_size(b1));
    assert_memory_equal(lr_blob_data(b0), lr_blob_data(b1), lr_blob_size(b0));
    lr_blob_destroy(b0);
    lr_blob_destroy(b1);
    lr_mlp_destroy(m);
}

/* predict, loss, out_of_range(_rows) and last_hidden never allocate. */
static void
queries_allocate_nothing(void **state)
{
    (void)state;
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_mlp *m = mk(20, 3, 128, 5, 0.1, &t.a);
    uint64_t s = 5;
    float *x = rand_rows(&s, 300, 20, -1, 1);
    float *y = rand_rows(&s, 300, 1, -1, 1);
    float *out = malloc(300 * 128 * sizeof(float));
    assert_st(lr_mlp_fit_normalization(m, x, 300, y), LR_OK);
    tu_alloc_arm(&t, 1, true); /* every allocation from now on fails */
    double mse;
    size_t n;
    for (size_t rows = 1; rows <= 300; rows += 37) {
        assert_st(lr_mlp_predict(m, x, rows, out), LR_OK);
        assert_st(lr_mlp_loss(m, x, y, rows, &mse), LR_OK);
        assert_st(lr_mlp_out_of_range(m, x, rows, &n), LR_OK);
        assert_st(lr_mlp_out_of_range_rows(m, x, rows, (uint8_t *)out, &n),
                  LR_OK);
        assert_st(lr__mlp_last_hidden(m, x, rows, out), LR_OK);
    }
    assert_int_equal(t.calls, 0);
    tu_alloc_disarm(&t);
    lr_mlp_destroy(m);
    assert_int_equal(t.live_bytes, 0);
    free(x);
    free(y);
    free(out);
}

static void
loss_is_mse_of_predictions(void **state)
{
    (void)state;
    uint64_t s = g_seed ^ 0x1055;
    lr_mlp *m = mk(4, 2, 16, 2, 0.0, NULL);
    const size_t n = 131;
    float *x = rand_rows(&s, n, 4, -1, 1);
    float *y = rand_rows(&s, n, 1, 3, 9);
    assert_st(lr_mlp_fit_normalization(m, x, n, y), LR_OK);
    rand_params(m, &s, 0.5);
    float *out = malloc(n * sizeof *out);
    assert_st(lr_mlp_predict(m, x, n, out), LR_OK);
    double want = 0, got = 0;
    for (size_t r = 0; r < n; r++)
        want += ((double)out[r] - y[r]) * ((double)out[r] - y[r]);
    want /= (double)n;
    assert_st(lr_mlp_loss(m, x, y, n, &got), LR_OK);
    assert_true(fabs(got - want) <= 1e-12 * want);
    /* loss_z is the same in z units */
    double lz;
    assert_st(lr__mlp_loss_z(m, x, y, n, &lz), LR_OK);
    struct naive nv;
    naive_identity(&nv, 4, 2, 16);
    naive_fit(&nv, x, n, y);
    assert_true(fabs(lz * nv.tsd * nv.tsd - want) <= 1e-4 * want);
    free(out);
    free(x);
    free(y);
    lr_mlp_destroy(m);
}

/* ---- normalization and ranges ------------------------------------------------ */

static void
fit_without_target_keeps_target_stats(void **state)
{
    (void)state;
    uint64_t s = 77;
    lr_mlp *m = mk(2, 1, 4, 1, 0.0, NULL);
    float *x = rand_rows(&s, 50, 2, 0, 1);
    float *y = rand_rows(&s, 50, 1, 10, 20);
    float row[2] = { 0.5f, 0.5f }, p0, p1, p2;
    assert_st(lr_mlp_predict(m, row, 1, &p0), LR_OK);
    /* untrained, zero biases, identity target: f(0.5, 0.5) unscaled */
    assert_st(lr_mlp_fit_normalization(m, x, 50, NULL), LR_OK);
    assert_st(lr_mlp_predict(m, row, 1, &p1), LR_OK);
    struct naive nv;
    naive_identity(&nv, 2, 1, 4);
    naive_fit(&nv, x, 50, NULL);
    assert_true(nv.tmean == 0.0 && nv.tsd == 1.0);
    assert_true(fabs(p1 - naive_forward(&nv, lr__mlp_params(m), row, NULL)) <
                1e-5);
    assert_st(lr_mlp_fit_normalization(m, x, 50, y), LR_OK);
    assert_st(lr_mlp_predict(m, row, 1, &p2), LR_OK);
    naive_fit(&nv, x, 50, y);
    assert_true(fabs(p2 - naive_forward(&nv, lr__mlp_params(m), row, NULL)) <
                1e-4);
    assert_true(p2 > 9 && p2 < 21);
    /* a refit without y leaves the target's statistics as they were */
    assert_st(lr_mlp_fit_normalization(m, x, 50, NULL), LR_OK);
    float p3;
    assert_st(lr_mlp_predict(m, row, 1, &p3), LR_OK);
    assert_memory_equal(&p2, &p3, sizeof p2);
    (void)p0;
    free(x);
    free(y);
    lr_mlp_destroy(m);
}

static void
constant_target_and_features(void **state)
{
    (void)state;
    lr_mlp *m = mk(2, 2, 6, 1, 0.0, NULL);
    float x[8] = { 3, 1e30f, 3, 1e30f, 3, 1e30f, 3, 1e30f };
    float y[4] = { 7, 7, 7, 7 };
    assert_st(lr_mlp_fit_normalization(m, x, 4, y), LR_OK);
    /* z = 0 for the fitted rows: the output is the target mean plus the
     * bias path, here exactly 7 (zero biases) */
    float out[4];
    assert_st(lr_mlp_predict(m, x, 4, out), LR_OK);
    for (int i = 0; i < 4; i++)
        assert_true(out[i] == 7.0f);
    /* extreme inputs stay finite (z is clamped) */
    float far[2] = { -3e38f, 3e38f };
    assert_st(lr_mlp_predict(m, far, 1, out), LR_OK);
    assert_true(isfinite(out[0]));
    size_t n;
    assert_st(lr_mlp_out_of_range(m, far, 1, &n), LR_OK);
    assert_int_equal(n, 1);
    assert_st(lr_mlp_out_of_range(m, x, 4, &n), LR_OK);
    assert_int_equal(n, 0);
    lr_mlp_destroy(m);
}

/* Each row judged alone: flags agree with a naive [min, max] check per
 * feature over the fitted rows, and their count with
 * lr_mlp_out_of_range(); the bounds themselves are in range. */
static void
out_of_range_rows(void **state)
{
    (void)state;
    uint64_t s = 31;
    enum {
        D = 4,
        N = 40,
        Q = 300
    };
    lr_mlp *m = mk(D, 1, 4, 1, 0.0, NULL);
    float *x = rand_rows(&s, N, D, -1, 1);
    assert_st(lr_mlp_fit_normalization(m, x, N, NULL), LR_OK);
    float lo[D], hi[D];
    for (int i = 0; i < D; i++) {
        lo[i] = hi[i] = x[i];
        for (int r = 1; r < N; r++) {
            lo[i] = x[r * D + i] < lo[i] ? x[r * D + i] : lo[i];
            hi[i] = x[r * D + i] > hi[i] ? x[r * D + i] : hi[i];
        }
    }
    float *q = rand_rows(&s, Q, D, -1.2f, 1.2f);
    for (int i = 0; i < D; i++) { /* the bounds themselves */
        q[i] = lo[i];
        q[D + i] = hi[i];
    }
    uint8_t fl[Q];
    size_t n = 0, n2 = 0, want = 0;
    assert_st(lr_mlp_out_of_range_rows(m, q, Q, fl, &n), LR_OK);
    assert_st(lr_mlp_out_of_range(m, q, Q, &n2), LR_OK);
    for (int r = 0; r < Q; r++) {
        bool out = false;
        for (int i = 0; i < D; i++)
            out = out || q[r * D + i] < lo[i] || q[r * D + i] > hi[i];
        assert_int_equal(fl[r], out);
        want += out;
    }
    assert_true(fl[0] == 0 && fl[1] == 0);
    assert_int_equal(n, want);
    assert_int_equal(n2, want);
    assert_true(want > 0 && want < Q);
    free(x);
    free(q);
    lr_mlp_destroy(m);
}

static void
out_of_range_counts(void **state)
{
    (void)state;
    lr_mlp *m = mk(3, 1, 4, 1, 0.0, NULL);
    float big[6] = { FLT_MAX, -FLT_MAX, 0, 1e30f, -1e30f, 5 };
    float inf[3] = { 0, INFINITY, 0 };
    float nan[3] = { 0, 0, NAN };
    size_t n = 99;
    /* before any fit every finite row is in range */
    assert_st(lr_mlp_out_of_range(m, big, 2, &n), LR_OK);
    assert_int_equal(n, 0);
    assert_st(lr_mlp_out_of_range(m, inf, 1, &n), LR_OK);
    assert_int_equal(n, 1);
    assert_st(lr_mlp_out_of_range(m, nan, 1, &n), LR_OK);
    assert_int_equal(n, 1);

    float fit[9] = { 0, 10, -1, 1, 20, -1, 2, 15, -1 }; /* x2 constant */
    assert_st(lr_mlp_fit_normalization(m, fit, 3, NULL), LR_OK);
    float rows[] = {
        0,     10,  -1,      /* corner: in */
        2,     20,  -1,      /* other corner: in */
        1,     15,  -1,      /* in */
        -0.1f, 15,  -1,      /* x0 low */
        2.01f, 15,  -1,      /* x0 high */
        1,     25,  -1,      /* x1 high */
        1,     15,  -0.999f, /* constant feature moved */
        3,     30,  0,       /* all out: counts once */
        1,     NAN, -1,      /* NaN */
        1,     15,  -1,      /* in */
    };
    assert_st(lr_mlp_out_of_range(m, rows, 10, &n), LR_OK);
    assert_int_equal(n, 6);
    assert_st(lr_mlp_out_of_range(m, rows, 3, &n), LR_OK);
    assert_int_equal(n, 0);
    assert_st(lr_mlp_out_of_range(m, rows + 9, 1, &n), LR_OK);
    assert_int_equal(n, 1);
    lr_mlp_destroy(m);
}

/* ---- training ----------------------------------------------------------------- */

static void
make_task(uint64_t *s, size_t n, float **x, float **y)
{
    *x = rand_rows(s, n, 3, -2, 2);
    *y = malloc(n * sizeof(float));
    for (size_t r = 0; r < n; r++) {
        const float *v = *x + 3 * r;
        (*y)[r] = (float)(sin(v[0]) + (double)v[1] * v[2]);
    }
}

static lr_mlp *
mk_trainer(uint64_t seed, double dropout, uint32_t L)
{
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = 3;
    o.hidden_layers = L;
    o.width = 64;
    o.batch_size = 64;
    o.learning_rate = 3e-3;
    o.dropout = dropout;
    o.seed = seed;
    lr_mlp *m;
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    return m;
}

static void
training_learns_a_function(void **state)
{
    (void)state;
    uint64_t s = g_seed ^ 0x7a1;
    float *x, *y, *hx, *hy;
    make_task(&s, 2000, &x, &y);
    make_task(&s, 500, &hx, &hy);
    for (int k = 0; k < 2; k++) {
        lr__mlp_force_portable(k);
        lr_mlp *m = mk_trainer(9, 0.0, 3);
        assert_st(lr_mlp_fit_normalization(m, x, 2000, y), LR_OK);
        double before, after, train_loss = -1, first = -1;
        assert_st(lr_mlp_loss(m, hx, hy, 500, &before), LR_OK);
        assert_st(lr_mlp_train(m, x, y, 2000, 1, &first), LR_OK);
        assert_st(lr_mlp_train(m, x, y, 2000, 29, &train_loss), LR_OK);
        assert_st(lr_mlp_loss(m, hx, hy, 500, &after), LR_OK);
        print_message("kernel %s: held-out MSE %.4f -> %.4f, training loss "
                      "%.4f -> %.4f\n",
                      lr__mlp_kernel(), before, after, first, train_loss);
        assert_true(after * 5 < before);
        assert_true(train_loss < first);
        /* no dropout: the reported loss is near the evaluated one */
        double tl;
        assert_st(lr_mlp_loss(m, x, y, 2000, &tl), LR_OK);
        assert_true(train_loss < 2 * tl + 0.05 && tl < 2 * train_loss + 0.05);
        lr_mlp_destroy(m);
    }
    lr__mlp_force_portable(0);
    free(x);
    free(y);
    free(hx);
    free(hy);
}

static void
training_is_deterministic(void **state)
{
    (void)state;
    uint64_t s = 31;
    float *x, *y;
    make_task(&s, 300, &x, &y);
    lr_mlp *a = mk_trainer(5, 0.2, 3), *b = mk_trainer(5, 0.2, 3);
    lr_mlp *c = mk_trainer(6, 0.2, 3);
    double la, lb, lc;
    lr_mlp *all[3] = { a, b, c };
    double *ls[3] = { &la, &lb, &lc };
    for (int i = 0; i < 3; i++) {
        assert_st(lr_mlp_fit_normalization(all[i], x, 300, y), LR_OK);
        assert_st(lr_mlp_train(all[i], x, y, 300, 3, ls[i]), LR_OK);
    }
    assert_params_equal(a, b);
    assert_true(la == lb);
    assert_memory_not_equal(lr__mlp_params(a), lr__mlp_params(c),
                            lr__mlp_n_params(a) * sizeof(float));
    /* training in two calls is training in one (the rng carries on) */
    lr_mlp *d = mk_trainer(5, 0.2, 3), *e = mk_trainer(5, 0.2, 3);
    assert_st(lr_mlp_fit_normalization(d, x, 300, y), LR_OK);
    assert_st(lr_mlp_fit_normalization(e, x, 300, y), LR_OK);
    assert_st(lr_mlp_train(d, x, y, 300, 4, NULL), LR_OK);
    assert_st(lr_mlp_train(e, x, y, 300, 1, NULL), LR_OK);
    assert_st(lr_mlp_train(e, x, y, 300, 3, NULL), LR_OK);
    assert_params_equal(d, e);
    for (int i = 0; i < 3; i++)
        lr_mlp_destroy(all[i]);
    lr_mlp_destroy(d);
    lr_mlp_destroy(e);
    free(x);
    free(y);
}

static void
dropout_only_in_training(void **state)
{
    (void)state;
    uint64_t s = 41;
    float *x, *y;
    make_task(&s, 256, &x, &y);
    /* 2 hidden layers: dropout after the first changes training */
    lr_mlp *a = mk_trainer(5, 0.0, 2), *b = mk_trainer(5, 0.5, 2);
    assert_params_equal(a, b); /* same start */
    double la, lb;
    assert_st(lr_mlp_train(a, x, y, 256, 2, &la), LR_OK);
    assert_st(lr_mlp_train(b, x, y, 256, 2, &lb), LR_OK);
    assert_memory_not_equal(lr__mlp_params(a), lr__mlp_params(b),
                            lr__mlp_n_params(a) * sizeof(float));
    assert_true(la != lb);
    /* predict on a dropout net is deterministic and dropout-free */
    float p1[16], p2[16];
    assert_st(lr_mlp_predict(b, x, 16, p1), LR_OK);
    assert_st(lr_mlp_predict(b, x, 16, p2), LR_OK);
    assert_memory_equal(p1, p2, sizeof p1);
    struct naive nv;
    naive_identity(&nv, 3, 2, 64);
    for (int r = 0; r < 16; r++)
        assert_true(fabs(p1[r] - naive_forward(&nv, lr__mlp_params(b),
                                               x + 3 * r, NULL)) < 1e-4);
    /* the gradient ignores dropout */
    size_t np = lr__mlp_n_params(b);
    float *g1 = malloc(np * sizeof *g1), *g2 = malloc(np * sizeof *g2);
    assert_st(lr__mlp_gradient(b, x, y, 256, g1, NULL), LR_OK);
    assert_st(lr__mlp_gradient(b, x, y, 256, g2, NULL), LR_OK);
    assert_memory_equal(g1, g2, np * sizeof *g1);
    free(g1);
    free(g2);
    lr_mlp_destroy(a);
    lr_mlp_destroy(b);

    /* 1 hidden layer: it is the last, so no dropout at all */
    a = mk_trainer(5, 0.0, 1);
    b = mk_trainer(5, 0.9, 1);
    assert_st(lr_mlp_train(a, x, y, 256, 2, &la), LR_OK);
    assert_st(lr_mlp_train(b, x, y, 256, 2, &lb), LR_OK);
    assert_params_equal(a, b);
    lr_mlp_destroy(a);
    lr_mlp_destroy(b);
    free(x);
    free(y);
}

/* The reported loss is in the target's units squared. */
static void
loss_in_target_units(void **state)
{
    (void)state;
    uint64_t s = 51;
    float *x, *y;
    make_task(&s, 200, &x, &y);
    /* x8 is exact in binary: the z-scored targets are the same bits, so
     * both train identically and the losses differ by exactly 64 */
    float *y10 = malloc(200 * sizeof *y10);
    for (int i = 0; i < 200; i++)
        y10[i] = y[i] * 8.0f;
    lr_mlp *a = mk_trainer(5, 0.1, 3), *b = mk_trainer(5, 0.1, 3);
    assert_st(lr_mlp_fit_normalization(a, x, 200, y), LR_OK);
    assert_st(lr_mlp_fit_normalization(b, x, 200, y10), LR_OK);
    double la, lb, ea, eb;
    assert_st(lr_mlp_train(a, x, y, 200, 3, &la), LR_OK);
    assert_st(lr_mlp_train(b, x, y10, 200, 3, &lb), LR_OK);
    assert_params_equal(a, b);
    assert_true(fabs(lb / la - 64.0) < 1e-12);
    assert_st(lr_mlp_loss(a, x, y, 200, &ea), LR_OK);
    assert_st(lr_mlp_loss(b, x, y10, 200, &eb), LR_OK);
    assert_true(fabs(eb / ea - 64.0) < 1e-12);
    /* 0 epochs: nothing changes, the loss as it stands */
    float *p0 = params_copy(a);
    double l0 = -1;
    assert_st(lr_mlp_train(a, x, y, 200, 0, &l0), LR_OK);
    assert_true(l0 == ea);
    assert_memory_equal(p0, lr__mlp_params(a), lr__mlp_n_params(a) * 4);
    free(p0);
    lr_mlp_destroy(a);
    lr_mlp_destroy(b);
    free(x);
    free(y);
    free(y10);
}

/* Batch sizes that do not divide the rows, rows < batch, batch 1. */
static void
odd_batches(void **state)
{
    (void)state;
    uint64_t s = 61;
    float *x, *y;
    make_task(&s, 203, &x, &y);
    static const uint32_t bs[] = { 1, 7, 64, 65, 200, 203, 204, 65536 };
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        lr_mlp_options o;
        lr_mlp_options_init(&o);
        o.n_inputs = 3;
        o.hidden_layers = 2;
        o.width = 9;
        o.batch_size = bs[i];
        o.grad_clip = i % 2 ? 0.0 : 0.5;
        o.weight_decay = i % 3 ? 0.0 : 0.1;
        lr_mlp *m;
        assert_st(lr_mlp_create(&o, &m), LR_OK);
        assert_st(lr_mlp_fit_normalization(m, x, 203, y), LR_OK);
        double before, after, l;
        assert_st(lr_mlp_loss(m, x, y, 203, &before), LR_OK);
        assert_st(lr_mlp_train(m, x, y, 203, bs[i] > 64 ? 30 : 3, &l), LR_OK);
        assert_st(lr_mlp_loss(m, x, y, 203, &after), LR_OK);
        assert_true(isfinite(l));
        assert_true(after < before);
        lr_mlp_destroy(m);
    }
    free(x);
    free(y);
}

/* ---- clone ---------------------------------------------------------------------- */

static void
clone_continues_identically(void **state)
{
    (void)state;
    uint64_t s = 71;
    float *x, *y;
    make_task(&s, 300, &x, &y);
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = 3;
    o.width = 16;
    o.dropout = 0.3;
    o.batch_size = 32;
    o.allocator = &t.a;
    lr_mlp *a, *c;
    assert_st(lr_mlp_create(&o, &a), LR_OK);
    assert_st(lr_mlp_fit_normalization(a, x, 300, y), LR_OK);
    assert_st(lr_mlp_train(a, x, y, 300, 2, NULL), LR_OK);
    assert_st(lr_mlp_clone(a, &c), LR_OK);
    assert_params_equal(a, c);
    double la, lc;
    assert_st(lr_mlp_train(a, x, y, 300, 3, &la), LR_OK);
    assert_st(lr_mlp_train(c, x, y, 300, 3, &lc), LR_OK);
    assert_params_equal(a, c);
    assert_true(la == lc);
    lr_blob *ba = save(a), *bc = save(c);
    assert_memory_equal(lr_blob_data(ba), lr_blob_data(bc), lr_blob_size(ba));
    lr_blob_destroy(ba);
    lr_blob_destroy(bc);
    /* independent: training one leaves the other */
    float *pc = params_copy(c);
    assert_st(lr_mlp_train(a, x, y, 300, 1, NULL), LR_OK);
    assert_memory_equal(pc, lr__mlp_params(c), lr__mlp_n_params(c) * 4);
    free(pc);
    lr_mlp_destroy(a);
    lr_mlp_destroy(c);
    assert_int_equal(t.live_bytes, 0);
    free(x);
    free(y);
}

/* ---- save / load ----------------------------------------------------------------- */

static lr_mlp *
trained_small(uint64_t seed)
{
    uint64_t s = seed;
    float *x, *y;
    make_task(&s, 100, &x, &y);
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = 3;
    o.hidden_layers = 2;
    o.width = 5;
    o.batch_size = 17;
    o.seed = seed;
    o.dropout = 0.25;
    o.learning_rate = 0.01;
    o.weight_decay = 0.001;
    o.grad_clip = 2.0;
    lr_mlp *m;
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    assert_st(lr_mlp_fit_normalization(m, x, 100, y), LR_OK);
    assert_st(lr_mlp_train(m, x, y, 100, 2, NULL), LR_OK);
    free(x);
    free(y);
    return m;
}

static void
save_load_round_trip(void **state)
{
    (void)state;
    uint64_t s = 81;
    float *x = rand_rows(&s, 70, 3, -3, 3);
    for (int shape = 0; shape < 3; shape++) {
        lr_mlp *m = shape == 0   ? trained_small(3)
                    : shape == 1 ? mk(3, 4, 130, 8, 0.0, NULL)
                                 : mk(3, 1, 1, 9, 0.9, NULL);
        lr_blob *b = save(m);
        size_t np = lr__mlp_n_params(m);
        assert_int_equal(lr_blob_size(b), HDR + 16 * 3 + 4 * np + 8);
        assert_memory_equal(lr_blob_data(b), "LRMLP\0\0\0", 8);
        assert_int_equal(lr__get_u32(lr_blob_data(b) + OFF_VERSION), 1);
        struct tu_alloc t;
        tu_alloc_init(&t);
        lr_mlp *l = NULL;
        assert_st(lr_mlp_load(lr_blob_data(b), lr_blob_size(b), &t.a, &l),
                  LR_OK);
        assert_non_null(l);
        assert_true(t.live_bytes > 0);
        assert_params_equal(m, l);
        for (int k = 0; k < 2; k++) {
            lr__mlp_force_portable(k);
            float pm[70], pl[70];
            assert_st(lr_mlp_predict(m, x, 70, pm), LR_OK);
            assert_st(lr_mlp_predict(l, x, 70, pl), LR_OK);
            assert_memory_equal(pm, pl, sizeof pm);
            size_t om, ol;
            assert_st(lr_mlp_out_of_range(m, x, 70, &om), LR_OK);
            assert_st(lr_mlp_out_of_range(l, x, 70, &ol), LR_OK);
            assert_int_equal(om, ol);
        }
        lr__mlp_force_portable(0);
        lr_blob *b2 = save(l);
        assert_int_equal(lr_blob_size(b), lr_blob_size(b2));
        assert_memory_equal(lr_blob_data(b), lr_blob_data(b2), lr_blob_size(b));
        lr_blob_destroy(b2);
        lr_mlp_destroy(l);
        assert_int_equal(t.live_bytes, 0);
        lr_blob_destroy(b);
        lr_mlp_destroy(m);
    }
    free(x);
}

/* A loaded network trains as a fresh one with the same weights would. */
static void
load_starts_fresh_optimizer(void **state)
{
    (void)state;
    uint64_t s = 91;
    float *x, *y;
    make_task(&s, 120, &x, &y);
    lr_mlp *a = mk_trainer(4, 0.2, 2), *b = mk_trainer(4, 0.2, 2);
    lr_blob *blob = save(a);
    lr_mlp *l;
    assert_st(lr_mlp_load(lr_blob_data(blob), lr_blob_size(blob), NULL, &l),
              LR_OK);
    assert_st(lr_mlp_train(b, x, y, 120, 2, NULL), LR_OK);
    assert_st(lr_mlp_train(l, x, y, 120, 2, NULL), LR_OK);
    assert_params_equal(b, l);
    lr_blob_destroy(blob);
    lr_mlp_destroy(a);
    lr_mlp_destroy(b);
    lr_mlp_destroy(l);
    free(x);
    free(y);
}

static lr_status
load_counted(const uint8_t *p, size_t n)
{
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_mlp *m = (lr_mlp *)&m;
    lr_status st = lr_mlp_load(p, n, &t.a, &m);
    if (st != LR_OK) {
        assert_null(m);
        assert_int_equal(t.calls, 0); /* nothing allocated */
    } else {
        lr_mlp_destroy(m);
    }
    assert_int_equal(t.live_bytes, 0);
    return st;
}

static void
load_rejects_truncations_and_flips(void **state)
{
    (void)state;
    lr_mlp *m = trained_small(5);
    lr_blob *b = save(m);
    const size_t n = lr_blob_size(b);
    uint8_t *buf = malloc(n);
    memcpy(buf, lr_blob_data(b), n);
    assert_st(load_counted(buf, n), LR_OK);
    for (size_t len = 0; len < n; len++) {
        uint8_t *cut = malloc(len + 1); /* exact size for ASan */
        memcpy(cut, buf, len);
        assert_st(load_counted(len ? cut : NULL, len), LR_ECORRUPT);
        free(cut);
    }
    /* and with bytes appended */
    uint8_t *longer = malloc(n + 8);
    memcpy(longer, buf, n);
    memset(longer + n, 0, 8);
    for (size_t extra = 1; extra <= 8; extra++)
        assert_st(load_counted(longer, n + extra), LR_ECORRUPT);
    free(longer);
    static const uint8_t masks[] = { 0x01, 0x10, 0x80, 0xff };
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof masks; k++) {
            buf[i] ^= masks[k];
            lr_status want = i >= OFF_VERSION && i < OFF_VERSION + 4
                                 ? LR_EVERSION
                                 : LR_ECORRUPT;
            lr_status got = load_counted(buf, n);
            if (got != want)
                fail_msg("flip 0x%02x at byte %zu of %zu: %s, want %s",
                         masks[k], i, n, lr_status_name(got),
                         lr_status_name(want));
            buf[i] ^= masks[k];
        }
    }
    assert_st(load_counted(buf, n), LR_OK);
    free(buf);
    lr_blob_destroy(b);
    lr_mlp_destroy(m);
}

/* A malloc'ed copy of the blob's bytes. */
static uint8_t *
resealed(const lr_blob *b, size_t *n)
{
    *n = lr_blob_size(b);
    uint8_t *p = malloc(*n);
    memcpy(p, lr_blob_data(b), *n);
    return p;
}

static void
reseal(uint8_t *p, size_t n)
{
    lr__put_u64(p + n - 8, lr__hash(p, n - 8, HASH_SEED));
}

static void
put_f32_at(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    lr__put_u32(p, u);
}

static void
put_f64_at(uint8_t *p, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    lr__put_u64(p, u);
}

/* Whether two networks save to the same bytes. */
static bool
same_bytes(const lr_mlp *a, const lr_mlp *b)
{
    lr_blob *x = save(a), *y = save(b);
    bool same = lr_blob_size(x) == lr_blob_size(y) &&
                memcmp(lr_blob_data(x), lr_blob_data(y), lr_blob_size(x)) == 0;
    lr_blob_destroy(x);
    lr_blob_destroy(y);
    return same;
}

/* Issue 16, hostile case 3: lr_mlp_load accepted finite but extreme
 * models that then predicted +-inf with LR_OK. Weights or normalization
 * past the bounds are refused (load_rejects_crafted_blobs), and so is a
 * model within them whose outputs overflow on its own probe rows (means,
 * minima, maxima). */
static void
regress_load_refuses_extreme_models(void **state)
{
    (void)state;
    lr_mlp *m = trained_small(7);
    lr_blob *b = save(m);
    const size_t np = lr__mlp_n_params(m), par_at = HDR + 16 * 3;
    size_t n;
    uint8_t *p;
    /* every weight near the bound (9000) and the target deviation at
     * 1e30: each value is legal, the product overflows float on the
     * probe. The probe runs on the loaded network, so this refusal
     * allocates (and frees) where the others allocate nothing. */
    p = resealed(b, &n);
    for (size_t i = 0; i < np; i++)
        put_f32_at(p + par_at + 4 * i, 9000.0f);
    put_f64_at(p + OFF_TSTD, 1e30);
    reseal(p, n);
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_mlp *got = (lr_mlp *)&got;
    assert_st(lr_mlp_load(p, n, &t.a, &got), LR_ECORRUPT);
    assert_null(got);
    assert_int_equal(t.live_bytes, 0);
    /* the same with an ordinary deviation loads: the probe is what
     * refused it */
    put_f64_at(p + OFF_TSTD, 1.0);
    reseal(p, n);
    assert_st(load_counted(p, n), LR_OK);
    free(p);
    lr_blob_destroy(b);
    lr_mlp_destroy(m);
}

/* Issue 16, hostile case 3: predictions came back NaN or infinite with
 * LR_OK. A network that passes its load probe but overflows on a far
 * input says LR_ERANGE and writes zeros. */
static void
regress_predict_never_returns_non_finite(void **state)
{
    (void)state;
    lr_mlp *m = mk(2, 2, 8, 3, 0.0, NULL);
    float fit[4] = { 0, 0, 1, 1 }, ty[2] = { -1e30f, 1e30f };
    assert_st(lr_mlp_fit_normalization(m, fit, 2, ty), LR_OK);
    /* weights 9000, biases 0: layers [8][2] + 8, [8][8] + 8, [1][8] + 1 */
    float *w = lr__mlp_params(m);
    assert_int_equal(lr__mlp_n_params(m), 16 + 8 + 64 + 8 + 8 + 1);
    for (size_t i = 0; i < lr__mlp_n_params(m); i++)
        w[i] = 9000.0f;
    memset(w + 16, 0, 8 * sizeof *w);
    memset(w + 24 + 64, 0, 8 * sizeof *w);
    w[24 + 72 + 8] = 0.0f;
    /* the fitted mean row has z = 0: output 0 x 1e30 + 0 */
    float ok[2] = { 0.5f, 0.5f }, out[2] = { 1, 1 };
    assert_st(lr_mlp_predict(m, ok, 1, out), LR_OK);
    assert_true(out[0] == 0.0f);
    /* z clamped at 1e6: 2 x 1e6 x 9000 -> x 8 x 9000 -> x 8 x 9000, about
     * 9e19, times the target deviation 1e30 is past float's 3.4e38 */
    float far[4] = { 0.5f, 0.5f, 3e38f, 3e38f };
    assert_st(lr_mlp_predict(m, far, 2, out), LR_ERANGE);
    assert_true(out[0] == 0.0f && out[1] == 0.0f);
    double mse;
    float y[2] = { 0, 0 };
    assert_st(lr_mlp_loss(m, far, y, 2, &mse), LR_ERANGE);
    lr_mlp_destroy(m);
}

/* Issue 16, hostile case 3: lr_mlp_train on a target of 3e38 returned
 * LR_OK, after which its own saved blob was refused. Absurd targets are
 * refused, a step whose loss or weights turn non-finite undoes the whole
 * call, and whatever training leaves loads again. */
static void
regress_train_refuses_absurd_targets(void **state)
{
    (void)state;
    lr_mlp *m = trained_small(11);
    lr_mlp *keep;
    assert_st(lr_mlp_clone(m, &keep), LR_OK);
    float x[6] = { 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f };
    float y[2] = { 3e38f, 1.0f };
    assert_st(lr_mlp_train(m, x, y, 2, 3, NULL), LR_ERANGE);
    assert_st(lr_mlp_fit_normalization(m, x, 2, y), LR_ERANGE);
    assert_true(same_bytes(m, keep));
    y[0] = NAN;
    assert_st(lr_mlp_train(m, x, y, 2, 3, NULL), LR_EINVAL);
    y[0] = INFINITY;
    assert_st(lr_mlp_train(m, x, y, 2, 3, NULL), LR_EINVAL);
    assert_true(same_bytes(m, keep));
    lr_mlp_destroy(keep);
    lr_mlp_destroy(m);

    /* a step that carries a weight past LR_MLP_MAX_WEIGHT (Adam moves
     * each by about the rate, 1 here): the call is undone */
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = 3;
    o.hidden_layers = 2;
    o.width = 16;
    o.batch_size = 2;
    o.learning_rate = 1.0;
    o.grad_clip = 0.0;
    o.dropout = 0.0;
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    float *w = lr__mlp_params(m);
    for (size_t i = 0; i < lr__mlp_n_params(m); i++)
        w[i] = w[i] > 0 ? 9999.5f : -9999.5f;
    assert_st(lr_mlp_clone(m, &keep), LR_OK);
    float sane[2] = { 1.0f, -1.0f };
    double loss = -1;
    assert_st(lr_mlp_train(m, x, sane, 2, 4, &loss), LR_ERANGE);
    assert_true(loss == -1);
    assert_true(same_bytes(m, keep));
    lr_mlp_destroy(keep);
    lr_mlp_destroy(m);
    /* a step whose loss turns non-finite: weights within the bound whose
     * activations overflow float on these inputs (z clamped at 1e6, then
     * x 64 x 9000 per layer, six layers); undone too */
    float fx[6] = { 3e38f, 3e38f, 3e38f, -3e38f, -3e38f, -3e38f };
    o.learning_rate = 1e-3;
    o.hidden_layers = 6;
    o.width = 64;
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    w = lr__mlp_params(m);
    for (size_t i = 0; i < lr__mlp_n_params(m); i++)
        w[i] = 9000.0f;
    assert_st(lr_mlp_clone(m, &keep), LR_OK);
    assert_st(lr_mlp_train(m, fx, sane, 2, 1, &loss), LR_ERANGE);
    assert_true(same_bytes(m, keep));
    /* and a fresh network trains on sane targets; the result loads */
    lr_mlp_destroy(m);
    assert_st(lr_mlp_create(&o, &m), LR_OK);
    assert_st(lr_mlp_train(m, x, sane, 2, 4, &loss), LR_OK);
    assert_true(isfinite(loss));
    lr_blob *b = save(m);
    lr_mlp *m2;
    assert_st(lr_mlp_load(lr_blob_data(b), lr_blob_size(b), NULL, &m2), LR_OK);
    lr_mlp_destroy(m2);
    lr_blob_destroy(b);
    lr_mlp_destroy(keep);
    lr_mlp_destroy(m);
}

static void
load_rejects_crafted_blobs(void **state)
{
    (void)state;
    lr_mlp *m = trained_small(7);
    lr_blob *b = save(m);
    const uint32_t d = 3;
    const size_t np = lr__mlp_n_params(m);
    const size_t mean_at = HDR, std_at = HDR + 4 * d, min_at = HDR + 8 * d,
                 max_at = HDR + 12 * d, par_at = HDR + 16 * d;
    size_t n;
    uint8_t *p;

    /* resealing an unchanged blob changes nothing */
    p = resealed(b, &n);
    reseal(p, n);
    assert_st(load_counted(p, n), LR_OK);
    free(p);

    struct f32_edit {
        size_t at;
        float v;
    } f32s[] = {
        { par_at, NAN },
        { par_at + 4 * (np - 1), INFINITY },
        { par_at + 4 * (np / 2), -INFINITY },
        { mean_at, NAN },
        { std_at, 0.0f },
        { std_at + 4, -1.0f },
        { std_at + 8, INFINITY },
        { min_at, INFINITY },
        { max_at + 4, NAN },
        { min_at, 1e30f }, /* min > max */
        { max_at + 8, -1e30f },
        /* finite but past LR_MLP_MAX_WEIGHT or _VALUE */
        { par_at, 2e4f },
        { par_at + 4 * (np - 1), -1e5f },
        { mean_at, 1e31f },
        { std_at + 4, 3e38f },
    };
    for (size_t i = 0; i < sizeof f32s / sizeof f32s[0]; i++) {
        p = resealed(b, &n);
        put_f32_at(p + f32s[i].at, f32s[i].v);
        reseal(p, n);
        lr_status st = load_counted(p, n);
        if (st != LR_ECORRUPT)
            fail_msg("f32 edit %zu: %s", i, lr_status_name(st));
        free(p);
    }
    struct f64_edit {
        size_t at;
        double v;
    } f64s[] = {
        { OFF_DROPOUT, -0.1 },  { OFF_DROPOUT, 0.95 }, { OFF_DROPOUT, NAN },
        { OFF_LR, 0.0 },        { OFF_LR, 2.0 },       { OFF_LR, INFINITY },
        { OFF_WD, 1.0 },        { OFF_WD, -1e-9 },     { OFF_CLIP, -1.0 },
        { OFF_CLIP, INFINITY }, { OFF_TMEAN, NAN },    { OFF_TMEAN, -INFINITY },
        { OFF_TSTD, 0.0 },      { OFF_TSTD, -2.0 },    { OFF_TSTD, INFINITY },
        { OFF_TMEAN, -2e30 },   { OFF_TSTD, 1e31 }, /* past LR_MLP_MAX_VALUE */
    };
    for (size_t i = 0; i < sizeof f64s / sizeof f64s[0]; i++) {
        p = resealed(b, &n);
        put_f64_at(p + f64s[i].at, f64s[i].v);
        reseal(p, n);
        lr_status st = load_counted(p, n);
        if (st != LR_ECORRUPT)
            fail_msg("f64 edit %zu: %s", i, lr_status_name(st));
        free(p);
    }
    struct u32_edit {
        size_t at;
        uint32_t v;
    } u32s[] = {
        { OFF_D, 0 },
        { OFF_D, 4 },
        { OFF_D, 1000 },
        { OFF_D, UINT32_MAX },
        { OFF_L, 0 },
        { OFF_L, 3 },
        { OFF_L, 9 },
        { OFF_L, UINT32_MAX },
        { OFF_W, 0 },
        { OFF_W, 6 },
        { OFF_W, 4 },
        { OFF_W, 1025 },
        { OFF_W, 1u << 30 },
        { OFF_W, UINT32_MAX },
        { OFF_BATCH, 0 },
        { OFF_BATCH, 65537 },
        { OFF_BATCH, UINT32_MAX },
    };
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        p = resealed(b, &n);
        lr__put_u32(p + u32s[i].at, u32s[i].v);
        reseal(p, n);
        lr_status st = load_counted(p, n);
        if (st != LR_ECORRUPT)
            fail_msg("u32 edit %zu: %s", i, lr_status_name(st));
        free(p);
    }
    /* a future version, correctly sealed */
    p = resealed(b, &n);
    lr__put_u32(p + OFF_VERSION, 2);
    reseal(p, n);
    assert_st(load_counted(p, n), LR_EVERSION);
    lr__put_u32(p + OFF_VERSION, 0);
    reseal(p, n);
    assert_st(load_counted(p, n), LR_EVERSION);
    free(p);
    /* edits that stay valid load, and predict differently */
    p = resealed(b, &n);
    put_f32_at(p + par_at, 0.0f);
    put_f64_at(p + OFF_DROPOUT, 0.0);
    put_f32_at(p + min_at, -FLT_MAX);
    put_f32_at(p + max_at, FLT_MAX);
    put_f32_at(p + std_at, 1e-40f); /* subnormal but positive */
    reseal(p, n);
    assert_st(load_counted(p, n), LR_OK);
    free(p);
    lr_blob_destroy(b);
    lr_mlp_destroy(m);
}

int
main(void)
{
    g_seed = tu_seed("mlp", 0x6d6c70);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(options_init_defaults),
        cmocka_unit_test(create_bounds),
        cmocka_unit_test(null_handling),
        cmocka_unit_test(absurd_sizes),
        cmocka_unit_test(init_weights),
        cmocka_unit_test(gradient_matches_finite_differences),
        cmocka_unit_test(gradient_is_mean_over_rows),
        cmocka_unit_test(forward_matches_naive),
        cmocka_unit_test(predict_rejects_non_finite),
        cmocka_unit_test(queries_allocate_nothing),
        cmocka_unit_test(loss_is_mse_of_predictions),
        cmocka_unit_test(fit_without_target_keeps_target_stats),
        cmocka_unit_test(constant_target_and_features),
        cmocka_unit_test(out_of_range_rows),
        cmocka_unit_test(out_of_range_counts),
        cmocka_unit_test(training_learns_a_function),
        cmocka_unit_test(training_is_deterministic),
        cmocka_unit_test(dropout_only_in_training),
        cmocka_unit_test(loss_in_target_units),
        cmocka_unit_test(odd_batches),
        cmocka_unit_test(clone_continues_identically),
        cmocka_unit_test(save_load_round_trip),
        cmocka_unit_test(load_starts_fresh_optimizer),
        cmocka_unit_test(load_rejects_truncations_and_flips),
        cmocka_unit_test(load_rejects_crafted_blobs),
        cmocka_unit_test(regress_load_refuses_extreme_models),
        cmocka_unit_test(regress_predict_never_returns_non_finite),
        cmocka_unit_test(regress_train_refuses_absurd_targets),
    };
    printf("# kernel: %s\n", lr__mlp_kernel());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
