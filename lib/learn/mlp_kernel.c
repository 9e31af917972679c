/* The compute kernels of lr_mlp: a small GEMM, the ReLU backward step
 * and the Adam update, each in portable C and in AVX2+FMA, and the
 * run-time choice between the two sets. mlp.c (the network: layout,
 * forward, backward, optimizer, save/load) reaches them only through the
 * table lr__mlp_kernels_get() returns, so it holds no intrinsics, no
 * target attributes and no cpuid.
 *
 * GEMM. The AVX2+FMA kernel keeps a 6 x 16 tile of C in 12 ymm
 * accumulators (6 broadcast weights, 2 vectors of 8 rows, 12 FMAs per
 * step of k); the portable one is plain C that gcc -O2 vectorizes (4 x 8
 * tiles). Edge tiles are masked (AVX2) or general (portable).
 *
 * Which bits must agree:
 * - Within one kernel set, each C element is its own sum over k in
 *   order, started from zero, with the same epilogue, whether it falls in
 *   a full tile, an edge tile or a masked lane. So an output does not
 *   depend on how many rows share the pass or where a row sits in it:
 *   a row predicted alone gives the bits it gets in a batch (tests/test-mlp.c
 *   checks this).
 * - Between the two sets, the GEMM and the ReLU backward differ in the
 *   last bits (FMA rounds once where the portable code rounds twice; the
 *   row sums of relu_back add their 8 lanes in another order); the tests
 *   hold each set to a naive model within a tolerance.
 * - Adam must agree to the bit: adam_avx2 does blocks of 8 and hands the
 *   tail to adam_portable, so a parameter's update would otherwise depend
 *   on its index. Both do the same IEEE operations (add, mul, div, sqrt,
 *   each correctly rounded) in the same order and adam_avx2 uses no FMA.
 *   The C must not be contracted into FMAs either: gcc in ISO C mode
 *   (-std=c11) does not contract, but clang does within an expression by
 *   default, and once it inlines adam_portable into adam_avx2 the tail is
 *   fused, so clang builds do not keep this today.
 *
 * The choice is made at run time (cpuid), cached in an atomic int, and
 * lr__mlp_force_portable() can pin the portable set for tests and
 * benchmarks. */
#include "learn/mlp_kernel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define MLP_X86 1
#include <immintrin.h>
#else
#define MLP_X86 0
#endif

/* ---- portable ------------------------------------------------------------ */

static inline void
tile_epilogue_p(const struct lr__mlp_gemm *g, size_t m, float *acc, float *c,
                size_t nr)
{
    if (g->accumulate) {
        for (size_t j = 0; j < nr; j++)
            c[j] += acc[j];
        return;
    }
    float b = g->bias != NULL ? g->bias[m] : 0.0f;
    for (size_t j = 0; j < nr; j++) {
        float v = acc[j] + b;
        if (g->relu)
            v = v > 0.0f ? v : 0.0f;
        c[j] = v;
    }
}

/* A full 4 x 8 tile: constant trip counts, so the compiler vectorizes
 * the j loops and keeps acc in registers. gcc does best with one j loop a
 * row (30 GFLOP/s at -O2 with SSE2 here); clang half-scalarizes that
 * (9 GFLOP/s) but vectorizes one j loop over the four rows, which gcc
 * does less well. Either way each acc[i][j] adds w_i * b[j] in k order,
 * so both give the same bits. */
static void
tile4x8_p(const struct lr__mlp_gemm *g, size_t m0, size_t n0)
{
    float acc[4][8];
    memset(acc, 0, sizeof acc);
    const float *a0 = g->A.p + m0 * g->A.sm;
    const float *a1 = a0 + g->A.sm;
    const float *a2 = a1 + g->A.sm;
    const float *a3 = a2 + g->A.sm;
    const float *b = g->B.p + n0;
    const size_t sak = g->A.sk, ldb = g->B.ld, K = g->K;
    for (size_t k = 0; k < K; k++) {
        const float w0 = a0[k * sak], w1 = a1[k * sak];
        const float w2 = a2[k * sak], w3 = a3[k * sak];
#if !defined(__clang__)
        for (int j = 0; j < 8; j++)
            acc[0][j] += w0 * b[j];
        for (int j = 0; j < 8; j++)
            acc[1][j] += w1 * b[j];
        for (int j = 0; j < 8; j++)
            acc[2][j] += w2 * b[j];
        for (int j = 0; j < 8; j++)
            acc[3][j] += w3 * b[j];
#else
        for (int j = 0; j < 8; j++) {
            const float bj = b[j];
            acc[0][j] += w0 * bj;
            acc[1][j] += w1 * bj;
            acc[2][j] += w2 * bj;
            acc[3][j] += w3 * bj;
        }
#endif
        b += ldb;
    }
    for (size_t i = 0; i < 4; i++)
        tile_epilogue_p(g, m0 + i, acc[i], g->C + (m0 + i) * g->ldc + n0, 8);
}

/* Any tile up to 4 x 8. */
static void
tile_any_p(const struct lr__mlp_gemm *g, size_t m0, size_t n0, size_t mr,
           size_t nr)
{
    float acc[4][8];
    memset(acc, 0, sizeof acc);
    for (size_t k = 0; k < g->K; k++) {
        const float *b = g->B.p + k * g->B.ld + n0;
        for (size_t i = 0; i < mr; i++) {
            const float w = g->A.p[(m0 + i) * g->A.sm + k * g->A.sk];
            for (size_t j = 0; j < nr; j++)
                acc[i][j] += w * b[j];
        }
    }
    for (size_t i = 0; i < mr; i++)
        tile_epilogue_p(g, m0 + i, acc[i], g->C + (m0 + i) * g->ldc + n0, nr);
}

static void
gemm_portable(const struct lr__mlp_gemm *g)
{
    for (size_t m0 = 0; m0 < g->M; m0 += 4) {
        size_t mr = g->M - m0 < 4 ? g->M - m0 : 4;
        for (size_t n0 = 0; n0 < g->N; n0 += 8) {
            size_t nr = g->N - n0 < 8 ? g->N - n0 : 8;
            if (mr == 4 && nr == 8)
                tile4x8_p(g, m0, n0);
            else
                tile_any_p(g, m0, n0, mr, nr);
        }
    }
}

static void
relu_back_portable(float *dh, const float *h, size_t rows, size_t R, size_t ld,
                   float s, float *db)
{
    for (size_t o = 0; o < rows; o++) {
        float *d = dh + o * ld;
        const float *hh = h + o * ld;
        float part[8] = { 0 };
        for (size_t r = 0; r < R; r += 8) {
            for (int j = 0; j < 8; j++) {
                float v = hh[r + j] > 0.0f ? d[r + j] * s : 0.0f;
                d[r + j] = v;
                part[j] += v;
            }
        }
        float sum = 0.0f;
        for (int j = 0; j < 8; j++)
            sum += part[j];
        db[o] += sum;
    }
}

static void
adam_portable(float *p, float *mo, float *v, const float *g, size_t n, float wd,
              float a, float c)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];
        mo[i] = 0.9f * mo[i] + 0.1f * gi;
        v[i] = 0.999f * v[i] + 0.001f * (gi * gi);
        p[i] -= a * mo[i] / (sqrtf(v[i]) * c + 1e-8f);
    }
}

float
lr__mlp_dot(const float *a, const float *b, size_t n)
{
    /* eight partial sums: vectorizable without reassociation flags */
    float s[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    float t = 0;
    for (; i < n; i++)
        t += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) +
           t;
}

static void
dots_portable(const float *x, size_t w, const uint32_t *idx, size_t n,
              const float *c, float *out)
{
    for (size_t j = 0; j < n; j++)
        out[j] = lr__mlp_dot(x + (size_t)idx[j] * w, c, w);
}

/* ---- AVX2 + FMA ---------------------------------------------------------- */

#if MLP_X86
#define AVX_FN __attribute__((target("avx2,fma")))
#define AVX_INLINE \
    static inline __attribute__((always_inline, target("avx2,fma")))

static const int32_t mask_tbl[16] = { -1, -1, -1, -1, -1, -1, -1, -1,
                                      0,  0,  0,  0,  0,  0,  0,  0 };

/* Write one row of a tile: c0 (and c1 when nv == 2) to C row m. */
AVX_INLINE void
row_out_avx2(const struct lr__mlp_gemm *g, size_t m, size_t n0, __m256 c0,
             __m256 c1, const int nv, const int masked, __m256i mask)
{
    float *c = g->C + m * g->ldc + n0;
    __m256 x[2] = { c0, c1 };
    for (int v = 0; v < nv; v++) {
        const int part = masked && v == nv - 1;
        if (g->accumulate) {
            __m256 old = part ? _mm256_maskload_ps(c + 8 * v, mask)
                              : _mm256_loadu_ps(c + 8 * v);
            x[v] = _mm256_add_ps(old, x[v]);
        } else {
            if (g->bias != NULL)
                x[v] = _mm256_add_ps(x[v], _mm256_broadcast_ss(g->bias + m));
            if (g->relu)
                x[v] = _mm256_max_ps(x[v], _mm256_setzero_ps());
        }
        if (part)
            _mm256_maskstore_ps(c + 8 * v, mask, x[v]);
        else
            _mm256_storeu_ps(c + 8 * v, x[v]);
    }
}

/* One mr x (8 nv) tile of C (mr <= 6, nv 1 or 2); `masked`: the last
 * vector has only the lanes of `mask`. All three are constants after
 * inlining, and the accumulators are named variables (not an array), so
 * both gcc and clang keep them in registers. */
AVX_INLINE void
tile_avx2(const struct lr__mlp_gemm *g, size_t m0, size_t n0, const int mr,
          const int nv, const int masked, __m256i mask)
{
    const size_t sam = g->A.sm, sak = g->A.sk, ldb = g->B.ld, K = g->K;
    const float *a = g->A.p + m0 * sam;
    const float *b = g->B.p + n0;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00;
    __m256 c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    __m256 c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (size_t k = 0; k < K; k++) {
        __m256 b0, b1;
        if (nv == 1) {
            b0 = masked ? _mm256_maskload_ps(b, mask) : _mm256_loadu_ps(b);
            b1 = b0;
        } else {
            b0 = _mm256_loadu_ps(b);
            b1 = masked ? _mm256_maskload_ps(b + 8, mask)
                        : _mm256_loadu_ps(b + 8);
        }
#define MLP_STEP(i)                                          \
    if (mr > (i)) {                                          \
        __m256 w = _mm256_broadcast_ss(a + (size_t)(i)*sam); \
        c##i##0 = _mm256_fmadd_ps(w, b0, c##i##0);           \
        if (nv == 2)                                         \
            c##i##1 = _mm256_fmadd_ps(w, b1, c##i##1);       \
    }
        MLP_STEP(0)
        MLP_STEP(1)
        MLP_STEP(2)
        MLP_STEP(3)
        MLP_STEP(4)
        MLP_STEP(5)
#undef MLP_STEP
        a += sak;
        b += ldb;
    }
#define MLP_ROW(i) \
    if (mr > (i))  \
        row_out_avx2(g, m0 + (i), n0, c##i##0, c##i##1, nv, masked, mask);
    MLP_ROW(0)
    MLP_ROW(1)
    MLP_ROW(2)
    MLP_ROW(3)
    MLP_ROW(4)
    MLP_ROW(5)
#undef MLP_ROW
}

#define TILE_CASE(MR)                           \
    case (MR)*4 + 0:                            \
        tile_avx2(g, m0, n0, (MR), 1, 0, mask); \
        break;                                  \
    case (MR)*4 + 1:                            \
        tile_avx2(g, m0, n0, (MR), 1, 1, mask); \
        break;                                  \
    case (MR)*4 + 2:                            \
        tile_avx2(g, m0, n0, (MR), 2, 0, mask); \
        break;                                  \
    case (MR)*4 + 3:                            \
        tile_avx2(g, m0, n0, (MR), 2, 1, mask); \
        break;

AVX_FN static void
gemm_avx2(const struct lr__mlp_gemm *g)
{
    for (size_t m0 = 0; m0 < g->M; m0 += 6) {
        size_t mr = g->M - m0 < 6 ? g->M - m0 : 6;
        for (size_t n0 = 0; n0 < g->N; n0 += 16) {
            size_t nr = g->N - n0 < 16 ? g->N - n0 : 16;
            size_t nv = nr > 8 ? 2 : 1;
            size_t rem = nr - 8 * (nv - 1); /* lanes of the last vector */
            size_t masked = rem < 8;
            __m256i mask = _mm256_loadu_si256(
                (const __m256i *)(const void *)(mask_tbl + 8 - rem));
            switch (mr * 4 + (nv - 1) * 2 + masked) {
                TILE_CASE(1)
                TILE_CASE(2)
                TILE_CASE(3)
                TILE_CASE(4)
                TILE_CASE(5)
                TILE_CASE(6)
            default:
                break;
            }
        }
    }
}

AVX_INLINE float
hsum_avx2(__m256 v)
{
    __m128 x =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

AVX_FN static void
relu_back_avx2(float *dh, const float *h, size_t rows, size_t R, size_t ld,
               float s, float *db)
{
    const __m256 vs = _mm256_set1_ps(s);
    const __m256 zero = _mm256_setzero_ps();
    for (size_t o = 0; o < rows; o++) {
        float *d = dh + o * ld;
        const float *hh = h + o * ld;
        __m256 sum = zero;
        for (size_t r = 0; r < R; r += 8) {
            __m256 keep =
                _mm256_cmp_ps(_mm256_loadu_ps(hh + r), zero, _CMP_GT_OQ);
            __m256 v =
                _mm256_and_ps(keep, _mm256_mul_ps(_mm256_loadu_ps(d + r), vs));
            _mm256_storeu_ps(d + r, v);
            sum = _mm256_add_ps(sum, v);
        }
        db[o] += hsum_avx2(sum);
    }
}

/* The eight lanes of s combined as lr__mlp_dot combines its sums, plus
 * the tail of rows r against c from k = w8 (the same bits). */
AVX_INLINE float
dot_finish_avx2(__m256 s, const float *r, const float *c, size_t w8, size_t w)
{
    __m128 lo = _mm256_castps256_ps128(s), hi = _mm256_extractf128_ps(s, 1);
    /* (s0+s1, s2+s3, s4+s5, s6+s7), then ((s0+s1)+(s2+s3), (s4+s5)+(s6+s7)) */
    __m128 p = _mm_hadd_ps(lo, hi);
    p = _mm_hadd_ps(p, p);
    float v = _mm_cvtss_f32(p) + _mm_cvtss_f32(_mm_shuffle_ps(p, p, 1));
    float t = 0;
    for (size_t k = w8; k < w; k++)
        t += r[k] * c[k];
    return v + t;
}

/* Eight rows at a time: eight independent lane-sum chains share each load
 * of c (no FMA: a product is rounded before it is added, as in C). The
 * chains stay eight named registers, spelled out once by EIGHT_ROWS: row
 * q's sum s<q> takes r[q] * c over k, then becomes out[j + q]. */
#define EIGHT_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DOT_ACC(q) \
    s##q = _mm256_add_ps(s##q, _mm256_mul_ps(_mm256_loadu_ps(r[q] + k), ck));
#define DOT_OUT(q) out[j + (q)] = dot_finish_avx2(s##q, r[q], c, w8, w);

AVX_FN static void
dots_avx2(const float *x, size_t w, const uint32_t *idx, size_t n,
          const float *c, float *out)
{
    size_t w8 = w & ~(size_t)7, j = 0;
    for (; j + 8 <= n; j += 8) {
        const float *r[8];
        for (int q = 0; q < 8; q++)
            r[q] = x + (size_t)idx[j + q] * w;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        __m256 s4 = s0, s5 = s0, s6 = s0, s7 = s0;
        for (size_t k = 0; k < w8; k += 8) {
            __m256 ck = _mm256_loadu_ps(c + k);
            EIGHT_ROWS(DOT_ACC)
        }
        EIGHT_ROWS(DOT_OUT)
    }
    for (; j < n; j++) {
        const float *r = x + (size_t)idx[j] * w;
        __m256 s = _mm256_setzero_ps();
        for (size_t k = 0; k < w8; k += 8)
            s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_loadu_ps(r + k),
                                               _mm256_loadu_ps(c + k)));
        out[j] = dot_finish_avx2(s, r, c, w8, w);
    }
}
#undef DOT_OUT
#undef DOT_ACC
#undef EIGHT_ROWS

/* The same operations in the same order (no FMA), so both give the same
 * bits. */
AVX_FN static void
adam_avx2(float *p, float *mo, float *v, const float *g, size_t n, float wd,
          float a, float c)
{
    const __m256 vwd = _mm256_set1_ps(wd), va = _mm256_set1_ps(a);
    const __m256 vc = _mm256_set1_ps(c), eps = _mm256_set1_ps(1e-8f);
    const __m256 b1 = _mm256_set1_ps(0.9f), nb1 = _mm256_set1_ps(0.1f);
    const __m256 b2 = _mm256_set1_ps(0.999f), nb2 = _mm256_set1_ps(0.001f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 gi =
            _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(vwd, pi));
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mo + i)),
                                  _mm256_mul_ps(nb1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(nb2, _mm256_mul_ps(gi, gi)));
        __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), vc), eps);
        pi = _mm256_sub_ps(pi, _mm256_div_ps(_mm256_mul_ps(va, mi), den));
        _mm256_storeu_ps(mo + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, pi);
    }
    adam_portable(p + i, mo + i, v + i, g + i, n - i, wd, a, c);
}
#endif /* MLP_X86 */

/* ---- kernel choice ------------------------------------------------------- */

/* One table per instruction set, each naming its variant of every kernel
 * (a new kernel is one line here). */
#define KERNELS(label, isa)                                              \
    {                                                                    \
        .name = label, .gemm = gemm_##isa, .relu_back = relu_back_##isa, \
        .adam = adam_##isa, .dots = dots_##isa,                          \
    }

static const struct lr__mlp_kernels kernels_portable =
    KERNELS("portable", portable);
#if MLP_X86
static const struct lr__mlp_kernels kernels_avx2 = KERNELS("avx2-fma", avx2);
#endif
#undef KERNELS

static _Atomic int cpu_has_avx2 = -1; /* -1: not asked yet */
static _Atomic int forced_portable = 0;

static bool
use_avx2(void)
{
#if MLP_X86
    if (atomic_load_explicit(&forced_portable, memory_order_relaxed))
        return false;
    int c = atomic_load_explicit(&cpu_has_avx2, memory_order_relaxed);
    if (c < 0) {
        __builtin_cpu_init();
        c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&cpu_has_avx2, c, memory_order_relaxed);
    }
    return c != 0;
#else
    return false;
#endif
}

const struct lr__mlp_kernels *
lr__mlp_kernels_get(void)
{
#if MLP_X86
    if (use_avx2())
        return &kernels_avx2;
#endif
    return &kernels_portable;
}

const char *
lr__mlp_kernel(void)
{
    return lr__mlp_kernels_get()->name;
}

void
lr__mlp_force_portable(int on)
{
    atomic_store_explicit(&forced_portable, on != 0, memory_order_relaxed);
}
