/* Internal: the compute kernels of lr_mlp (mlp_kernel.c), for mlp.c (and
 * the learner's replay choice, which uses `dots`). The caller asks
 * lr__mlp_kernels_get() for one table and calls through it; which table
 * (AVX2+FMA or portable C) is chosen at run time. */
#ifndef LIBROUTE_LIB_MLP_KERNEL_H
#define LIBROUTE_LIB_MLP_KERNEL_H

#include <stddef.h>
#include <stdint.h>

/* C[m][n] for m < M, n < N (row stride ldc) is either
 *   act(bias[m] + sum_k A(m, k) B[k][n])   (accumulate == 0; act is ReLU
 *                                          when relu, else identity; bias
 *                                          may be NULL)
 * or C[m][n] + sum_k A(m, k) B[k][n]       (accumulate == 1),
 * with A(m, k) and B[k][n] as the operands below say. Sums run over k
 * in order, each C element on its own. */
struct lr__mlp_gemm {
    size_t M, N, K;
    struct {
        const float *p;
        size_t sm, sk;
    } A; /* A(m, k) = A.p[m * A.sm + k * A.sk]: either layout of a matrix */
    struct {
        const float *p;
        size_t ld;
    } B; /* B[k][n] = B.p[k * B.ld + n] */
    float *C;
    size_t ldc;
    const float *bias;
    int relu;
    int accumulate;
};

struct lr__mlp_kernels {
    const char *name; /* "avx2-fma" or "portable" */
    /* C as struct lr__mlp_gemm says. */
    void (*gemm)(const struct lr__mlp_gemm *g);
    /* dz = dh * (h > 0 ? s : 0) in place over rows x R (row stride ld),
     * and db[o] += sum of row o. R is a multiple of 8. */
    void (*relu_back)(float *dh, const float *h, size_t rows, size_t R,
                      size_t ld, float s, float *db);
    /* One Adam update of n parameters p with moments mo, v and gradient
     * g: weight decay wd added to g, step a, 1 / sqrt(bias correction) c. */
    void (*adam)(float *p, float *mo, float *v, const float *g, size_t n,
                 float wd, float a, float c);
    /* out[j] = the dot product of c with row idx[j] of x (rows of w
     * floats) for j < n: eight lane sums s[k % 8] += x[k] * c[k] over
     * k < w & ~7 in order, combined ((s0 + s1) + (s2 + s3)) + ((s4 + s5) +
     * (s6 + s7)), plus the remaining k summed in order from 0. Both sets
     * give the same bits (no FMA), and a row's bits do not depend on its
     * neighbours. */
    void (*dots)(const float *x, size_t w, const uint32_t *idx, size_t n,
                 const float *c, float *out);
};

/* The dot product of a and b (n floats) as `dots` computes it, in
 * portable C: the same bits as either kernel set. */
float lr__mlp_dot(const float *a, const float *b, size_t n);

/* The kernels to use now: AVX2+FMA when the CPU has them and
 * lr__mlp_force_portable() is off, else portable. Never fails. */
const struct lr__mlp_kernels *lr__mlp_kernels_get(void);

/* Name of the kernel in use: "avx2-fma" or "portable". */
const char *lr__mlp_kernel(void);

/* Tests and benchmarks: 1 forces the portable kernel, 0 restores the
 * run-time choice. Process-wide; not for use while networks are in use
 * on other threads. */
void lr__mlp_force_portable(int on);

#endif
