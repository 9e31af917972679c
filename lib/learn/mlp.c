/* lr_mlp: a small fully connected regression network (Lodestar's reward
 * predictor), float32, batched.
 *
 * Parameters: one contiguous float vector, layer by layer (l = 0..L-1
 * hidden, then the output layer), each layer its weights row-major
 * [out][in] followed by its biases [out]:
 *
 *   params: | W0 [W][d] | b0 [W] | W1 [W][W] | b1 [W] | ... | wo [W] | bo |
 *
 * so the optimizer is one loop over the vector and lr__mlp_params() can
 * hand it out. Nothing is packed or cached from it: every pass reads the
 * vector as it is.
 *
 * Activations are kept feature-major for a tile of up to TILE rows:
 *
 *   act[feature][row], row stride TILE, rows padded to a multiple of 8
 *
 * so a layer is C[out][rows] = W[out][in] . X[in][rows]: the GEMM kernels
 * broadcast one weight and multiply it into a vector of 8 rows. The same
 * kernel (with strides) does the two backward products, dX = W^T dZ and
 * dW += dZ X^T (X transposed to row-major for that one).
 *
 * The kernels (GEMM, ReLU backward, Adam; AVX2+FMA or portable, chosen
 * at run time) live in mlp_kernel.c; this file asks lr__mlp_kernels_get()
 * for the table once per call and passes it down.
 *
 * Serialized form (all little-endian, version 1):
 *
 *   0   magic "LRMLP\0\0\0"            8
 *   8   u32 format version (1)         4
 *   12  u32 n_inputs, hidden_layers,  16
 *           width, batch_size
 *   28  u64 seed                       8
 *   36  f64 dropout, learning_rate,   32
 *           weight_decay, grad_clip
 *   68  f64 target mean, target std   16
 *   84  f32 mean[d], std[d], min[d], max[d]
 *       f32 params[n_params]
 *       u64 XXH3-64 (seed MLP_HASH_SEED) of every byte before it
 *
 * Floats are written as their bit patterns, so a load is bit-exact. */
#include "learn/mlp.h"

#include <float.h>
#include <math.h>

#include "common/lr_hash.h"
#include "learn/mlp_kernel.h"

#define TILE 64u      /* rows per pass; predict scratch and train chunks */
#define ZCLAMP 1.0e6f /* |z-scored input| is clamped to this */
#define INIT_SALT 0x4c524d4c50494e49ull     /* "LRMLPINI": init weights rng */
#define MLP_HASH_SEED 0x4c524d4c50303031ull /* "LRMLP001" */
#define MLP_MAGIC "LRMLP\0\0\0"
#define MLP_VERSION 1u
#define HDR_SIZE 84u
/* The public bounds as the floats they are compared with (1e30f is a
 * little above 1e30), so a float at the bound is accepted everywhere. */
#define MAX_VALUE ((double)(float)LR_MLP_MAX_VALUE)
#define MAX_WEIGHT ((double)(float)LR_MLP_MAX_WEIGHT)

struct lr_mlp {
    struct lr__mem mem;
    void *raw; /* the one block: this struct and every array */
    size_t raw_size;
    lr_mlp_options opt; /* allocator cleared */
    uint32_t d, L, W;
    size_t n_params;
    float *params;
    float *adam_m, *adam_v;
    uint64_t step;
    struct lr__rng rng; /* shuffling and dropout */
    float *mean, *std, *lo, *hi;
    double tmean, tstd;
    float *scratch; /* predict: 2 x max(d, W) x TILE, then TILE */
};

/* ---- options -------------------------------------------------------------- */

LR__INIT_SIZED(lr_mlp_options_init_sized, lr_mlp_options, options_defaults,
               .hidden_layers = 3, .width = 128, .batch_size = 256,
               .dropout = 0.1, .learning_rate = 1e-3, .weight_decay = 1e-5,
               .grad_clip = 1.0)

static bool
options_ok(const lr_mlp_options *o)
{
    return o->n_inputs >= 1 && o->n_inputs <= LR_MLP_MAX_INPUTS &&
           o->hidden_layers >= 1 && o->hidden_layers <= LR_MLP_MAX_LAYERS &&
           o->width >= 1 && o->width <= LR_MLP_MAX_WIDTH &&
           o->batch_size >= 1 && o->batch_size <= LR_MLP_MAX_BATCH &&
           o->dropout >= 0.0 && o->dropout <= 0.9 && o->learning_rate > 0.0 &&
           o->learning_rate <= 1.0 && o->weight_decay >= 0.0 &&
           o->weight_decay < 1.0 && o->grad_clip >= 0.0 &&
           isfinite(o->grad_clip);
}

/* ---- shape ----------------------------------------------------------------- */

static size_t
count_params(uint32_t d, uint32_t L, uint32_t W)
{
    /* Within the option limits this is below 2^23; no overflow. */
    size_t w = W;
    return w * d + w + (size_t)(L - 1) * (w * w + w) + w + 1;
}

/* Inputs and outputs of layer l (l == L: the output layer). */
static inline uint32_t
layer_in(const lr_mlp *m, uint32_t l)
{
    return l == 0 ? m->d : m->W;
}

static inline uint32_t
layer_out(const lr_mlp *m, uint32_t l)
{
    return l == m->L ? 1 : m->W;
}

/* Where layer l's weights start in the parameter vector. */
static inline size_t
layer_off(const lr_mlp *m, uint32_t l)
{
    size_t w = m->W;
    if (l == 0)
        return 0;
    return w * m->d + w + (size_t)(l - 1) * (w * w + w);
}

static inline size_t
max_feat(const lr_mlp *m)
{
    return m->d > m->W ? m->d : m->W;
}

static inline size_t
round_up16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* ---- allocation -------------------------------------------------------------- */

struct layout {
    size_t params, adam_m, adam_v, mean, std, lo, hi, scratch; /* floats */
    size_t floats;
};

/* Bump allocation in floats: n floats at *at, the next start kept on a
 * multiple of 16 floats (64 bytes). Returns where the n floats start. */
static size_t
carve(size_t *at, size_t n)
{
    size_t start = *at;
    *at += round_up16(n);
    return start;
}

static size_t
struct_floats(void)
{
    return round_up16((sizeof(struct lr_mlp) + sizeof(float) - 1) /
                      sizeof(float));
}

static void
make_layout(uint32_t d, uint32_t W, size_t n_params, struct layout *lo)
{
    size_t mf = d > W ? d : W;
    size_t at = struct_floats();
    lo->params = carve(&at, n_params);
    lo->adam_m = carve(&at, n_params);
    lo->adam_v = carve(&at, n_params);
    lo->mean = carve(&at, d);
    lo->std = carve(&at, d);
    lo->lo = carve(&at, d);
    lo->hi = carve(&at, d);
    lo->scratch = carve(&at, 2 * mf * TILE + TILE);
    lo->floats = at;
}

/* A zeroed network of shape o (already validated), arrays in place, no
 * weights initialized. */
static lr_status
mlp_alloc(const lr_mlp_options *o, const lr_allocator *allocator, lr_mlp **out)
{
    struct lr__mem mem;
    LR_TRY(lr__mem_init(&mem, allocator));
    size_t np = count_params(o->n_inputs, o->hidden_layers, o->width);
    struct layout lo;
    make_layout(o->n_inputs, o->width, np, &lo);
    size_t bytes = lo.floats * sizeof(float) + 64; /* small: no overflow */
    void *raw = lr__alloc(&mem, bytes);
    if (raw == NULL)
        return LR_ENOMEM;
    memset(raw, 0, bytes);
    float *base = (float *)(void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    lr_mlp *m = (lr_mlp *)(void *)base;
    m->mem = mem;
    m->raw = raw;
    m->raw_size = bytes;
    m->opt = *o;
    m->opt.struct_size = sizeof m->opt;
    m->opt.allocator = NULL;
    m->d = o->n_inputs;
    m->L = o->hidden_layers;
    m->W = o->width;
    m->n_params = np;
    m->params = base + lo.params;
    m->adam_m = base + lo.adam_m;
    m->adam_v = base + lo.adam_v;
    m->mean = base + lo.mean;
    m->std = base + lo.std;
    m->lo = base + lo.lo;
    m->hi = base + lo.hi;
    m->scratch = base + lo.scratch;
    for (uint32_t i = 0; i < m->d; i++) {
        m->std[i] = 1.0f;
        m->lo[i] = -FLT_MAX;
        m->hi[i] = FLT_MAX;
    }
    m->tmean = 0.0;
    m->tstd = 1.0;
    m->step = 0;
    lr__rng_seed(&m->rng, o->seed);
    *out = m;
    return LR_OK;
}

/* Xavier uniform weights, zero biases. */
static void
init_weights(lr_mlp *m)
{
    struct lr__rng r;
    lr__rng_seed(&r, m->opt.seed ^ INIT_SALT);
    for (uint32_t l = 0; l <= m->L; l++) {
        size_t in = layer_in(m, l), out = layer_out(m, l);
        double a = sqrt(6.0 / (double)(in + out));
        float *w = m->params + layer_off(m, l);
        for (size_t i = 0; i < in * out; i++)
            w[i] = (float)((2.0 * lr__rng_unit(&r) - 1.0) * a);
        memset(w + in * out, 0, out * sizeof(float));
    }
}

lr_status
lr_mlp_create(const lr_mlp_options *opt, lr_mlp **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    LR_RETURN_IF(opt == NULL, LR_EINVAL);
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    LR_TRY(lr__copy_sized(&o, sizeof o, opt, LR_MLP_OPTIONS_SIZE_V1));
    LR_RETURN_IF(!options_ok(&o), LR_EINVAL);
    lr_mlp *m;
    LR_TRY(mlp_alloc(&o, o.allocator, &m));
    init_weights(m);
    *out = m;
    return LR_OK;
}

void
lr_mlp_destroy(lr_mlp *mlp)
{
    if (mlp == NULL)
        return;
    struct lr__mem mem = mlp->mem;
    lr__free(&mem, mlp->raw, mlp->raw_size);
}

lr_status
lr_mlp_clone(const lr_mlp *mlp, lr_mlp **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    LR_RETURN_IF(mlp == NULL, LR_EINVAL);
    lr_mlp *c;
    LR_TRY(mlp_alloc(&mlp->opt, &mlp->mem.a, &c));
    size_t np = mlp->n_params, d = mlp->d;
    memcpy(c->params, mlp->params, np * sizeof(float));
    memcpy(c->adam_m, mlp->adam_m, np * sizeof(float));
    memcpy(c->adam_v, mlp->adam_v, np * sizeof(float));
    memcpy(c->mean, mlp->mean, d * sizeof(float));
    memcpy(c->std, mlp->std, d * sizeof(float));
    memcpy(c->lo, mlp->lo, d * sizeof(float));
    memcpy(c->hi, mlp->hi, d * sizeof(float));
    c->tmean = mlp->tmean;
    c->tstd = mlp->tstd;
    c->step = mlp->step;
    c->rng = mlp->rng;
    *out = c;
    return LR_OK;
}

/* ---- queries ---------------------------------------------------------------- */

uint32_t
lr_mlp_n_inputs(const lr_mlp *mlp)
{
    return mlp == NULL ? 0 : mlp->d;
}

uint32_t
lr__mlp_width(const lr_mlp *m)
{
    return m == NULL ? 0 : m->W;
}

size_t
lr__mlp_n_params(const lr_mlp *m)
{
    return m == NULL ? 0 : m->n_params;
}

float *
lr__mlp_params(lr_mlp *m)
{
    return m == NULL ? NULL : m->params;
}

/* ---- input checks ------------------------------------------------------------- */

/* n_rows x d floats fit in memory (B22). */
static bool
size_ok(size_t n_rows, uint32_t d)
{
    size_t n;
    return lr__mul_size(n_rows, d, &n) && lr__mul_size(n, sizeof(float), &n);
}

/* Every |x[i]| <= bound (NaN fails). */
static bool
all_within(const float *x, size_t n, double bound)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (uint32_t) !(fabs((double)x[i]) <= bound);
    return bad == 0;
}

static bool
all_finite(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

lr_status
lr_mlp_fit_normalization(lr_mlp *mlp, const float *x, size_t n_rows,
                         const float *y)
{
    LR_RETURN_IF(mlp == NULL || x == NULL || n_rows == 0, LR_EINVAL);
    LR_RETURN_IF(!size_ok(n_rows, mlp->d), LR_EINVAL);
    const size_t d = mlp->d;
    LR_RETURN_IF(!all_finite(x, n_rows * d), LR_EINVAL);
    LR_RETURN_IF(y != NULL && !all_finite(y, n_rows), LR_EINVAL);
    /* Values within the bound keep every mean and deviation within it
     * (a deviation is at most half the range), so lr_mlp_load() takes
     * what this fits. */
    LR_RETURN_IF(!all_within(x, n_rows * d, MAX_VALUE), LR_ERANGE);
    LR_RETURN_IF(y != NULL && !all_within(y, n_rows, MAX_VALUE), LR_ERANGE);
    for (size_t i = 0; i < d; i++) {
        double sum = 0.0;
        float lo = x[i], hi = x[i];
        for (size_t r = 0; r < n_rows; r++) {
            float v = x[r * d + i];
            sum += v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        double mean = sum / (double)n_rows;
        double ss = 0.0;
        for (size_t r = 0; r < n_rows; r++) {
            double e = (double)x[r * d + i] - mean;
            ss += e * e;
        }
        double sd = sqrt(ss / (double)n_rows);
        float fm = (float)mean, fs;
        if (lo == hi) { /* constant */
            fm = lo;
            fs = 1.0f;
        } else {
            fs = sd > (double)FLT_MAX ? FLT_MAX : (float)sd;
            if (!(fs >= FLT_MIN))
                fs = 1.0f;
        }
        mlp->mean[i] = fm;
        mlp->std[i] = fs;
        mlp->lo[i] = lo;
        mlp->hi[i] = hi;
    }
    if (y != NULL) {
        double sum = 0.0;
        float lo = y[0], hi = y[0];
        for (size_t r = 0; r < n_rows; r++) {
            sum += y[r];
            lo = y[r] < lo ? y[r] : lo;
            hi = y[r] > hi ? y[r] : hi;
        }
        double mean = sum / (double)n_rows, ss = 0.0;
        for (size_t r = 0; r < n_rows; r++)
            ss += ((double)y[r] - mean) * ((double)y[r] - mean);
        double sd = sqrt(ss / (double)n_rows);
        if (lo == hi) {
            mean = lo;
            sd = 1.0;
        } else if (!(sd > 0.0)) {
            sd = 1.0;
        }
        mlp->tmean = mean;
        mlp->tstd = sd;
    }
    return LR_OK;
}

/* Whether a row has a feature outside the fitted range (NaN included). */
static bool
row_out_of_range(const lr_mlp *mlp, const float *row)
{
    bool out = false;
    for (size_t i = 0; i < mlp->d; i++)
        out |= !(row[i] >= mlp->lo[i] && row[i] <= mlp->hi[i]);
    return out;
}

lr_status
lr_mlp_out_of_range(const lr_mlp *mlp, const float *x, size_t n_rows,
                    size_t *n_out)
{
    LR_RETURN_IF(mlp == NULL || n_out == NULL, LR_EINVAL);
    LR_RETURN_IF(x == NULL && n_rows > 0, LR_EINVAL);
    LR_RETURN_IF(!size_ok(n_rows, mlp->d), LR_EINVAL);
    size_t bad = 0;
    for (size_t r = 0; r < n_rows; r++)
        bad += row_out_of_range(mlp, x + r * mlp->d);
    *n_out = bad;
    return LR_OK;
}

lr_status
lr_mlp_out_of_range_rows(const lr_mlp *mlp, const float *x, size_t n_rows,
                         uint8_t *flags, size_t *n_out)
{
    LR_RETURN_IF(mlp == NULL, LR_EINVAL);
    LR_RETURN_IF((x == NULL || flags == NULL) && n_rows > 0, LR_EINVAL);
    LR_RETURN_IF(!size_ok(n_rows, mlp->d), LR_EINVAL);
    size_t bad = 0;
    for (size_t r = 0; r < n_rows; r++) {
        flags[r] = row_out_of_range(mlp, x + r * mlp->d);
        bad += flags[r];
    }
    if (n_out != NULL)
        *n_out = bad;
    return LR_OK;
}

/* ---- forward ---------------------------------------------------------------- */

static inline size_t
round_up8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* X0[i][r] = clamp((x[row r][i] - mean[i]) / std[i]) for r < n (rows taken
 * from idx, or base + r when idx is NULL), zero for n <= r < R. */
static void
load_inputs(const lr_mlp *m, const float *x, const size_t *idx, size_t base,
            size_t n, size_t R, float *X0)
{
    const size_t d = m->d;
    for (size_t r = 0; r < n; r++) {
        const float *row = x + (idx != NULL ? idx[r] : base + r) * d;
        for (size_t i = 0; i < d; i++) {
            float z = (row[i] - m->mean[i]) / m->std[i];
            z = z > ZCLAMP ? ZCLAMP : z;
            z = z < -ZCLAMP ? -ZCLAMP : z;
            X0[i * TILE + r] = z;
        }
    }
    for (size_t i = 0; i < d; i++)
        for (size_t r = n; r < R; r++)
            X0[i * TILE + r] = 0.0f;
}

/* Layer l forward over R columns: out = act(W_l in + b_l), act ReLU for
 * the hidden layers and the identity for the output layer (l == L). */
static void
layer_forward(const lr_mlp *m, const struct lr__mlp_kernels *k, uint32_t l,
              const float *in, float *out, size_t R)
{
    const float *w = m->params + layer_off(m, l);
    size_t nin = layer_in(m, l), nout = layer_out(m, l);
    struct lr__mlp_gemm g = { .M = nout,
                              .N = R,
                              .K = nin,
                              .A = { w, nin, 1 },
                              .B = { in, TILE },
                              .C = out,
                              .ldc = TILE,
                              .bias = w + nout * nin,
                              .relu = l < m->L };
    k->gemm(&g);
}

/* Inference for up to TILE rows in `scratch` (lr__mlp_scratch_floats).
 * Returns the last hidden layer's activations (feature-major); with
 * f != NULL also the z-unit outputs. Reads the network only. */
static const float *
forward_tile(const lr_mlp *m, const struct lr__mlp_kernels *k, const float *x,
             size_t base, size_t n, float *f, float *scratch)
{
    size_t R = round_up8(n);
    float *a = scratch, *b = scratch + max_feat(m) * TILE;
    load_inputs(m, x, NULL, base, n, R, a);
    for (uint32_t l = 0; l < m->L; l++) {
        layer_forward(m, k, l, a, b, R);
        float *t = a;
        a = b;
        b = t;
    }
    if (f != NULL)
        layer_forward(m, k, m->L, a, f, R);
    return a;
}

/* Rows r0..r0 + n - 1 of x (n <= TILE) through the network: their
 * predictions in target units, rounded to float, in `scratch` (valid
 * until its next pass). */
static const float *
predict_tile(const lr_mlp *m, const struct lr__mlp_kernels *k, const float *x,
             size_t r0, size_t n, float *scratch)
{
    float *f = scratch + 2 * max_feat(m) * TILE;
    forward_tile(m, k, x, r0, n, f, scratch);
    for (size_t r = 0; r < n; r++)
        f[r] = (float)((double)f[r] * m->tstd + m->tmean);
    return f;
}

size_t
lr__mlp_scratch_floats(const lr_mlp *m)
{
    return 2 * max_feat(m) * TILE + TILE;
}

lr_status
lr__mlp_predict_into(const lr_mlp *mlp, const float *x, size_t n_rows,
                     float *out, float *scratch)
{
    LR_RETURN_IF(mlp == NULL || scratch == NULL, LR_EINVAL);
    LR_RETURN_IF(n_rows > 0 && (x == NULL || out == NULL), LR_EINVAL);
    LR_RETURN_IF(!size_ok(n_rows, mlp->d), LR_EINVAL);
    LR_RETURN_IF(n_rows > 0 && !all_finite(x, n_rows * mlp->d), LR_EINVAL);
    const struct lr__mlp_kernels *k = lr__mlp_kernels_get();
    for (size_t r0 = 0; r0 < n_rows; r0 += TILE) {
        size_t n = n_rows - r0 < TILE ? n_rows - r0 : TILE;
        memcpy(out + r0, predict_tile(mlp, k, x, r0, n, scratch),
               n * sizeof *out);
    }
    /* an extreme network overflowed: no infinity escapes */
    if (!all_finite(out, n_rows)) {
        memset(out, 0, n_rows * sizeof *out);
        return LR_ERANGE;
    }
    return LR_OK;
}

lr_status
lr_mlp_predict(lr_mlp *mlp, const float *x, size_t n_rows, float *out)
{
    LR_RETURN_IF(mlp == NULL, LR_EINVAL);
    return lr__mlp_predict_into(mlp, x, n_rows, out, mlp->scratch);
}

lr_status
lr__mlp_last_hidden(lr_mlp *m, const float *x, size_t n, float *out)
{
    LR_RETURN_IF(m == NULL || x == NULL || out == NULL, LR_EINVAL);
    LR_RETURN_IF(!size_ok(n, m->d) || !size_ok(n, m->W), LR_EINVAL);
    LR_RETURN_IF(!all_finite(x, n * m->d), LR_EINVAL);
    const struct lr__mlp_kernels *k = lr__mlp_kernels_get();
    const size_t W = m->W;
    for (size_t r0 = 0; r0 < n; r0 += TILE) {
        size_t nt = n - r0 < TILE ? n - r0 : TILE;
        const float *h = forward_tile(m, k, x, r0, nt, NULL, m->scratch);
        for (size_t r = 0; r < nt; r++)
            for (size_t o = 0; o < W; o++)
                out[(r0 + r) * W + o] = h[o * TILE + r];
    }
    return LR_OK;
}

lr_status
lr_mlp_loss(lr_mlp *mlp, const float *x, const float *y, size_t n_rows,
            double *mse)
{
    LR_RETURN_IF(mlp == NULL || x == NULL || y == NULL || mse == NULL,
                 LR_EINVAL);
    LR_RETURN_IF(n_rows == 0 || !size_ok(n_rows, mlp->d), LR_EINVAL);
    LR_RETURN_IF(!all_finite(x, n_rows * mlp->d) || !all_finite(y, n_rows),
                 LR_EINVAL);
    const struct lr__mlp_kernels *k = lr__mlp_kernels_get();
    double sse = 0.0;
    for (size_t r0 = 0; r0 < n_rows; r0 += TILE) {
        size_t n = n_rows - r0 < TILE ? n_rows - r0 : TILE;
        const float *p = predict_tile(mlp, k, x, r0, n, mlp->scratch);
        for (size_t r = 0; r < n; r++) {
            double e = (double)p[r] - (double)y[r0 + r];
            sse += e * e;
        }
    }
    LR_RETURN_IF(!isfinite(sse), LR_ERANGE);
    *mse = sse / (double)n_rows;
    return LR_OK;
}

/* ---- training ---------------------------------------------------------------- */

/* Buffers of one forward/backward pass over TILE rows, plus the gradient
 * and (training) the row order. One allocation. */
struct ws {
    float *act; /* X0 [d][TILE], then H_1..H_L [W][TILE] */
    float *dh, *dx;
    float *xt; /* [TILE][max(d, W)] */
    float *f, *g, *zy;
    float *grad;
    size_t *perm;
    void *raw;
    size_t bytes;
};

static lr_status
ws_alloc(lr_mlp *m, size_t n_perm, struct ws *ws)
{
    /* within the option limits no float count below overflows */
    size_t at = 0;
    size_t act = carve(&at, ((size_t)m->d + (size_t)m->L * m->W) * TILE);
    size_t dh = carve(&at, (size_t)m->W * TILE);
    size_t dx = carve(&at, (size_t)m->W * TILE);
    size_t xt = carve(&at, TILE * max_feat(m));
    size_t f = carve(&at, TILE), g = carve(&at, TILE), zy = carve(&at, TILE);
    size_t grad = carve(&at, m->n_params);
    size_t fbytes, pbytes, bytes;
    if (!lr__mul_size(at, sizeof(float), &fbytes) ||
        !lr__mul_size(n_perm, sizeof(size_t), &pbytes) ||
        !lr__add_size(fbytes, pbytes, &bytes) ||
        !lr__add_size(bytes, 64, &bytes))
        return LR_EINVAL;
    void *raw = lr__alloc(&m->mem, bytes);
    if (raw == NULL)
        return LR_ENOMEM;
    memset(raw, 0, bytes);
    float *p = (float *)(void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    ws->raw = raw;
    ws->bytes = bytes;
    ws->act = p + act;
    ws->dh = p + dh;
    ws->dx = p + dx;
    ws->xt = p + xt;
    ws->f = p + f;
    ws->g = p + g;
    ws->zy = p + zy;
    ws->grad = p + grad;
    ws->perm = n_perm > 0 ? (size_t *)(void *)(p + at) : NULL;
    return LR_OK;
}

static void
ws_free(lr_mlp *m, struct ws *ws)
{
    lr__free(&m->mem, ws->raw, ws->bytes);
}

static inline float *
act_of(const lr_mlp *m, const struct ws *ws, uint32_t l)
{
    return l == 0 ? ws->act
                  : ws->act + ((size_t)m->d + (size_t)(l - 1) * m->W) * TILE;
}

/* Inverted dropout on H (rows x n, stride TILE): each unit kept with
 * probability 1 - p and scaled by 1 / (1 - p). 16 random bits a unit. */
static void
dropout(lr_mlp *m, float *H, size_t rows, size_t n)
{
    uint32_t thr = (uint32_t)lrint(m->opt.dropout * 65536.0);
    float s = (float)(1.0 / (1.0 - m->opt.dropout));
    uint64_t bits = 0;
    int left = 0;
    for (size_t o = 0; o < rows; o++) {
        float *h = H + o * TILE;
        for (size_t r = 0; r < n; r++) {
            if (left == 0) {
                bits = lr__rng_next(&m->rng);
                left = 4;
            }
            uint32_t u = (uint32_t)(bits & 0xffffu);
            bits >>= 16;
            left--;
            h[r] = u >= thr ? h[r] * s : 0.0f;
        }
    }
}

static void
transpose_to(const float *X, size_t rows, size_t n, float *XT)
{
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < rows; i++)
            XT[r * rows + i] = X[i * TILE + r];
}

/* Layer l's weight gradient over the n real rows: dW_l += dZ X^T, with
 * dZ [out][TILE] and X [in][TILE] feature-major. X goes row-major into
 * xt first, so that the kernel reads it by rows. */
static void
weight_grad(const lr_mlp *m, const struct lr__mlp_kernels *k, uint32_t l,
            const float *dz, const float *X, size_t n, float *xt, float *grad)
{
    size_t nin = layer_in(m, l);
    transpose_to(X, nin, n, xt);
    struct lr__mlp_gemm g = { .M = layer_out(m, l),
                              .N = nin,
                              .K = n,
                              .A = { dz, TILE, 1 },
                              .B = { xt, nin },
                              .C = grad + layer_off(m, l),
                              .ldc = nin,
                              .accumulate = 1 };
    k->gemm(&g);
}

/* The gradient at layer l's input over R columns: dX = W_l^T dZ. */
static void
input_grad(const lr_mlp *m, const struct lr__mlp_kernels *k, uint32_t l,
           const float *dz, float *dx, size_t R)
{
    size_t nin = layer_in(m, l);
    struct lr__mlp_gemm g = { .M = nin,
                              .N = R,
                              .K = layer_out(m, l),
                              .A = { m->params + layer_off(m, l), 1, nin },
                              .B = { dz, TILE },
                              .C = dx,
                              .ldc = TILE };
    k->gemm(&g);
}

/* Forward and backward over `count` rows (from idx, or base + r), adding
 * scale * d(sum of squared z-errors)/dparams into ws->grad and the sum of
 * squared z-errors into *sse. With drop, hidden layers but the last get
 * dropout from the handle's rng. */
static void
pass(lr_mlp *m, const struct lr__mlp_kernels *k, struct ws *ws, const float *x,
     const float *y, const size_t *idx, size_t base, size_t count, bool drop,
     float scale, double *sse)
{
    const size_t W = m->W;
    const uint32_t L = m->L;
    float *gbo = ws->grad + layer_off(m, L) + W;
    for (size_t c0 = 0; c0 < count; c0 += TILE) {
        size_t n = count - c0 < TILE ? count - c0 : TILE;
        size_t R = round_up8(n);
        const size_t *ci = idx != NULL ? idx + c0 : NULL;
        load_inputs(m, x, ci, base + c0, n, R, ws->act);
        for (size_t r = 0; r < n; r++) {
            size_t row = ci != NULL ? ci[r] : base + c0 + r;
            ws->zy[r] = (float)(((double)y[row] - m->tmean) / m->tstd);
        }
        float s[LR_MLP_MAX_LAYERS];
        for (uint32_t l = 0; l < L; l++) {
            float *H = act_of(m, ws, l + 1);
            layer_forward(m, k, l, act_of(m, ws, l), H, R);
            s[l] = 1.0f;
            if (drop && l + 1 < L && m->opt.dropout > 0.0) {
                dropout(m, H, W, n);
                s[l] = (float)(1.0 / (1.0 - m->opt.dropout));
            }
        }
        const float *HL = act_of(m, ws, L);
        layer_forward(m, k, L, HL, ws->f, R);
        float gb = 0.0f;
        for (size_t r = 0; r < R; r++) {
            float e = r < n ? ws->f[r] - ws->zy[r] : 0.0f;
            *sse += (double)e * (double)e;
            ws->g[r] = 2.0f * scale * e;
            gb += ws->g[r];
        }
        /* output layer: dwo += g HL^T, dbo += sum g, dH = wo^T g */
        weight_grad(m, k, L, ws->g, HL, n, ws->xt, ws->grad);
        gbo[0] += gb;
        input_grad(m, k, L, ws->g, ws->dh, R);
        float *dh = ws->dh, *dx = ws->dx;
        for (uint32_t l = L; l-- > 0;) {
            size_t nin = layer_in(m, l);
            float *gb_l = ws->grad + layer_off(m, l) + W * nin;
            /* dZ in place; db += row sums */
            k->relu_back(dh, act_of(m, ws, l + 1), W, R, TILE, s[l], gb_l);
            weight_grad(m, k, l, dh, act_of(m, ws, l), n, ws->xt, ws->grad);
            if (l == 0)
                break;
            input_grad(m, k, l, dh, dx, R);
            float *t = dh;
            dh = dx;
            dx = t;
        }
    }
}

/* Clip the global gradient norm, then one Adam step (weight decay added
 * to the gradient, bias-corrected moments). */
static void
optimizer_step(lr_mlp *m, const struct lr__mlp_kernels *k, float *grad)
{
    const size_t np = m->n_params;
    if (m->opt.grad_clip > 0.0) {
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t i = 0;
        for (; i + 4 <= np; i += 4) {
            s0 += (double)grad[i] * grad[i];
            s1 += (double)grad[i + 1] * grad[i + 1];
            s2 += (double)grad[i + 2] * grad[i + 2];
            s3 += (double)grad[i + 3] * grad[i + 3];
        }
        for (; i < np; i++)
            s0 += (double)grad[i] * grad[i];
        double norm = sqrt(s0 + s1 + s2 + s3);
        if (norm > m->opt.grad_clip) {
            float f = (float)(m->opt.grad_clip / (norm + 1e-6));
            for (i = 0; i < np; i++)
                grad[i] *= f;
        }
    }
    m->step++;
    double t = (double)m->step;
    double bc1 = 1.0 - pow(0.9, t), bc2 = 1.0 - pow(0.999, t);
    float a = (float)(m->opt.learning_rate / bc1);
    float c = (float)(1.0 / sqrt(bc2));
    float wd = (float)m->opt.weight_decay;
    k->adam(m->params, m->adam_m, m->adam_v, grad, np, wd, a, c);
}

static bool
xy_ok(const lr_mlp *m, const float *x, const float *y, size_t n)
{
    return x != NULL && y != NULL && n > 0 && size_ok(n, m->d) &&
           all_finite(x, n * m->d) && all_finite(y, n);
}

static bool probe_ok(lr_mlp *m);

/* Whether training left every parameter finite and within the bound a
 * load accepts. */
static bool
params_ok(const lr_mlp *m)
{
    return all_within(m->params, m->n_params, MAX_WEIGHT);
}

/* What a training call may have to undo: parameters, both Adam moments,
 * the step count and the generator. */
struct undo {
    float *f; /* params, adam_m, adam_v */
    uint64_t step;
    struct lr__rng rng;
};

static lr_status
undo_save(lr_mlp *m, struct undo *u)
{
    size_t np = m->n_params;
    u->f = lr__alloc(&m->mem, 3 * np * sizeof(float)); /* small: no ovf */
    if (u->f == NULL)
        return LR_ENOMEM;
    memcpy(u->f, m->params, np * sizeof(float));
    memcpy(u->f + np, m->adam_m, np * sizeof(float));
    memcpy(u->f + 2 * np, m->adam_v, np * sizeof(float));
    u->step = m->step;
    u->rng = m->rng;
    return LR_OK;
}

static void
undo_apply(lr_mlp *m, const struct undo *u)
{
    size_t np = m->n_params;
    memcpy(m->params, u->f, np * sizeof(float));
    memcpy(m->adam_m, u->f + np, np * sizeof(float));
    memcpy(m->adam_v, u->f + 2 * np, np * sizeof(float));
    m->step = u->step;
    m->rng = u->rng;
}

static void
undo_free(lr_mlp *m, struct undo *u)
{
    lr__free(&m->mem, u->f, 3 * m->n_params * sizeof(float));
}

lr_status
lr_mlp_train(lr_mlp *mlp, const float *x, const float *y, size_t n_rows,
             uint32_t epochs, double *loss)
{
    LR_RETURN_IF(mlp == NULL || !xy_ok(mlp, x, y, n_rows), LR_EINVAL);
    LR_RETURN_IF(!all_within(y, n_rows, MAX_VALUE), LR_ERANGE);
    if (epochs == 0) {
        /* nothing to train: report the loss as it stands */
        double mse = 0.0;
        if (loss != NULL)
            LR_TRY(lr_mlp_loss(mlp, x, y, n_rows, &mse));
        if (loss != NULL)
            *loss = mse;
        return LR_OK;
    }
    struct ws ws;
    struct undo u;
    LR_TRY(ws_alloc(mlp, n_rows, &ws));
    if (undo_save(mlp, &u) != LR_OK) {
        ws_free(mlp, &ws);
        return LR_ENOMEM;
    }
    /* nothing below fails but divergence, which is undone */
    const struct lr__mlp_kernels *k = lr__mlp_kernels_get();
    const size_t B = mlp->opt.batch_size;
    double sse = 0.0;
    bool diverged = false;
    for (uint32_t e = 0; e < epochs && !diverged; e++) {
        /* a fresh order from the rng alone, so that n epochs in one call
         * are the same as in several */
        for (size_t i = 0; i < n_rows; i++)
            ws.perm[i] = i;
        for (size_t i = n_rows - 1; i > 0; i--) {
            size_t j = (size_t)lr__rng_below(&mlp->rng, (uint64_t)i + 1);
            size_t t = ws.perm[i];
            ws.perm[i] = ws.perm[j];
            ws.perm[j] = t;
        }
        sse = 0.0;
        for (size_t b0 = 0; b0 < n_rows && !diverged; b0 += B) {
            size_t nb = n_rows - b0 < B ? n_rows - b0 : B;
            memset(ws.grad, 0, mlp->n_params * sizeof(float));
            pass(mlp, k, &ws, x, y, ws.perm + b0, 0, nb, true,
                 (float)(1.0 / (double)nb), &sse);
            optimizer_step(mlp, k, ws.grad);
            diverged = !isfinite(sse) || !params_ok(mlp);
        }
    }
    ws_free(mlp, &ws);
    /* and never leave a network lr_mlp_load() would refuse */
    diverged = diverged || !probe_ok(mlp);
    if (diverged)
        undo_apply(mlp, &u);
    undo_free(mlp, &u);
    LR_RETURN_IF(diverged, LR_ERANGE);
    if (loss != NULL)
        *loss = sse / (double)n_rows * mlp->tstd * mlp->tstd;
    return LR_OK;
}

lr_status
lr__mlp_gradient(lr_mlp *m, const float *x, const float *y, size_t n,
                 float *grad, double *loss)
{
    LR_RETURN_IF(m == NULL || grad == NULL || !xy_ok(m, x, y, n), LR_EINVAL);
    struct ws ws;
    LR_TRY(ws_alloc(m, 0, &ws));
    const struct lr__mlp_kernels *k = lr__mlp_kernels_get();
    double sse = 0.0;
    pass(m, k, &ws, x, y, NULL, 0, n, false, (float)(1.0 / (double)n), &sse);
    memcpy(grad, ws.grad, m->n_params * sizeof(float));
    ws_free(m, &ws);
    if (loss != NULL)
        *loss = sse / (double)n;
    return LR_OK;
}

lr_status
lr__mlp_loss_z(lr_mlp *m, const float *x, const float *y, size_t n,
               double *loss)
{
    LR_RETURN_IF(m == NULL || loss == NULL || !xy_ok(m, x, y, n), LR_EINVAL);
    size_t mf = max_feat(m);
    double *buf = lr__alloc(&m->mem, 2 * mf * sizeof(double));
    if (buf == NULL)
        return LR_ENOMEM;
    double *a = buf, *b = buf + mf, sse = 0.0;
    for (size_t r = 0; r < n; r++) {
        a = buf;
        b = buf + mf;
        for (size_t i = 0; i < m->d; i++) {
            double z = ((double)x[r * m->d + i] - m->mean[i]) / m->std[i];
            z = z > ZCLAMP ? ZCLAMP : z;
            a[i] = z < -ZCLAMP ? -ZCLAMP : z;
        }
        for (uint32_t l = 0; l <= m->L; l++) {
            size_t nin = layer_in(m, l), nout = layer_out(m, l);
            const float *w = m->params + layer_off(m, l);
            for (size_t o = 0; o < nout; o++) {
                double s = 0.0;
                for (size_t i = 0; i < nin; i++)
                    s += (double)w[o * nin + i] * a[i];
                s += w[nout * nin + o];
                b[o] = l == m->L || s > 0.0 ? s : 0.0;
            }
            double *t = a;
            a = b;
            b = t;
        }
        double e = a[0] - ((double)y[r] - m->tmean) / m->tstd;
        sse += e * e;
    }
    lr__free(&m->mem, buf, 2 * mf * sizeof(double));
    *loss = sse / (double)n;
    return LR_OK;
}

/* ---- save / load -------------------------------------------------------------- */

static size_t
blob_size(uint32_t d, size_t n_params)
{
    return HDR_SIZE + 16 * (size_t)d + 4 * n_params + 8;
}

lr_status
lr_mlp_save(const lr_mlp *mlp, lr_blob **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    LR_RETURN_IF(mlp == NULL, LR_EINVAL);
    const size_t d = mlp->d, np = mlp->n_params;
    size_t size = blob_size(mlp->d, np);
    lr_blob *b;
    uint8_t *p;
    LR_TRY(lr__blob_new(&mlp->mem, size, &b, &p));
    uint8_t *q = p;
    memcpy(q, MLP_MAGIC, 8);
    lr__put_u32(q + 8, MLP_VERSION);
    lr__put_u32(q + 12, mlp->d);
    lr__put_u32(q + 16, mlp->L);
    lr__put_u32(q + 20, mlp->W);
    lr__put_u32(q + 24, mlp->opt.batch_size);
    lr__put_u64(q + 28, mlp->opt.seed);
    lr__put_f64(q + 36, mlp->opt.dropout);
    lr__put_f64(q + 44, mlp->opt.learning_rate);
    lr__put_f64(q + 52, mlp->opt.weight_decay);
    lr__put_f64(q + 60, mlp->opt.grad_clip);
    lr__put_f64(q + 68, mlp->tmean);
    lr__put_f64(q + 76, mlp->tstd);
    q += HDR_SIZE;
    const float *arr[4] = { mlp->mean, mlp->std, mlp->lo, mlp->hi };
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < d; i++, q += 4)
            lr__put_f32(q, arr[a][i]);
    for (size_t i = 0; i < np; i++, q += 4)
        lr__put_f32(q, mlp->params[i]);
    lr__put_u64(q, lr__hash(p, size - 8, MLP_HASH_SEED));
    *out = b;
    return LR_OK;
}

static bool
f32s_finite(const uint8_t *p, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |=
            (uint32_t)((lr__get_u32(p + 4 * i) & 0x7f800000u) == 0x7f800000u);
    return bad == 0;
}

/* A finite network whose weights multiply up past float's range predicts
 * infinities: try it on the rows of the feature means, minima and maxima
 * (on the stack: 3 KiB at most). */
static bool
probe_ok(lr_mlp *m)
{
    const size_t d = m->d;
    float x[3 * LR_MLP_MAX_INPUTS], out[3];
    for (size_t i = 0; i < d; i++) {
        x[i] = m->mean[i];
        x[d + i] = m->lo[i];
        x[2 * d + i] = m->hi[i];
    }
    return lr_mlp_predict(m, x, 3, out) == LR_OK;
}

lr_status
lr_mlp_load(const uint8_t *buf, size_t len, const lr_allocator *allocator,
            lr_mlp **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    LR_RETURN_IF(buf == NULL && len > 0, LR_EINVAL);
    LR_RETURN_IF(len < 12, LR_ECORRUPT);
    LR_RETURN_IF(memcmp(buf, MLP_MAGIC, 8) != 0, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u32(buf + 8) != MLP_VERSION, LR_EVERSION);
    LR_RETURN_IF(len < HDR_SIZE + 8, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u64(buf + len - 8) !=
                     lr__hash(buf, len - 8, MLP_HASH_SEED),
                 LR_ECORRUPT);
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = lr__get_u32(buf + 12);
    o.hidden_layers = lr__get_u32(buf + 16);
    o.width = lr__get_u32(buf + 20);
    o.batch_size = lr__get_u32(buf + 24);
    o.seed = lr__get_u64(buf + 28);
    o.dropout = lr__get_f64(buf + 36);
    o.learning_rate = lr__get_f64(buf + 44);
    o.weight_decay = lr__get_f64(buf + 52);
    o.grad_clip = lr__get_f64(buf + 60);
    LR_RETURN_IF(!options_ok(&o), LR_ECORRUPT);
    const size_t d = o.n_inputs;
    size_t np = count_params(o.n_inputs, o.hidden_layers, o.width);
    LR_RETURN_IF(len != blob_size(o.n_inputs, np), LR_ECORRUPT);
    double tmean = lr__get_f64(buf + 68), tstd = lr__get_f64(buf + 76);
    LR_RETURN_IF(!(fabs(tmean) <= MAX_VALUE) ||
                     !(tstd > 0.0 && tstd <= MAX_VALUE),
                 LR_ECORRUPT);
    const uint8_t *q = buf + HDR_SIZE;
    LR_RETURN_IF(!f32s_finite(q, 4 * d + np), LR_ECORRUPT);
    for (size_t i = 0; i < d; i++) {
        float mean = lr__get_f32(q + 4 * i);
        float sd = lr__get_f32(q + 4 * (d + i));
        float lo = lr__get_f32(q + 4 * (2 * d + i));
        float hi = lr__get_f32(q + 4 * (3 * d + i));
        LR_RETURN_IF(!(fabs((double)mean) <= MAX_VALUE) || !(sd > 0.0f) ||
                         !((double)sd <= MAX_VALUE) || !(lo <= hi),
                     LR_ECORRUPT);
    }
    for (size_t i = 0; i < np; i++)
        LR_RETURN_IF(
            !(fabs((double)lr__get_f32(q + 4 * (4 * d + i))) <= MAX_WEIGHT),
            LR_ECORRUPT);
    /* valid: only now allocate */
    lr_mlp *m;
    LR_TRY(mlp_alloc(&o, allocator, &m));
    float *arr[4] = { m->mean, m->std, m->lo, m->hi };
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < d; i++, q += 4)
            arr[a][i] = lr__get_f32(q);
    for (size_t i = 0; i < np; i++, q += 4)
        m->params[i] = lr__get_f32(q);
    m->tmean = tmean;
    m->tstd = tstd;
    if (!probe_ok(m)) {
        lr_mlp_destroy(m);
        return LR_ECORRUPT;
    }
    *out = m;
    return LR_OK;
}
