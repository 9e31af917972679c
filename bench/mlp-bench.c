/* mlp-bench: speed of the lr_mlp scorer (Lodestar's reward predictor).
 *
 * Prints one JSON object per line per case:
 *   {"name": "mlp_predict_64", "kernel": "avx2-fma", "us_p50": ..., ...}
 *
 * The network is Lodestar's default shape: d = 20 inputs, 3 hidden layers
 * of 128, batch 256.
 *   mlp_predict_<n>    one lr_mlp_predict() of n rows (64: a routing
 *                      decision's candidates; 8 and 16: a power-of-d
 *                      prefilter), with each kernel the CPU has;
 *                      gflops counts 2 flops per multiply-add
 *   mlp_train_epoch_10k  one lr_mlp_train() epoch over 10k rows
 *   mlp_train_20x10k     20 epochs over 10k rows (a full retrain)
 *
 * Usage: mlp-bench [--quick] [--filter SUBSTRING]
 * Medians are what to compare; the machine is shared and noisy.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "libroute.h"
#include "learn/mlp.h"

#define D 20
#define LAYERS 3
#define WIDTH 128

static uint64_t rs = 0x6d6c7062656e6368ull;

static double
unit(void)
{
    uint64_t z = bench_splitmix(&rs);
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static const char *filter;

static int
wanted(const char *name)
{
    return filter == NULL || strstr(name, filter) != NULL;
}

/* Rows of a smooth function of the features, so training does work. */
static void
make_data(size_t n, float *x, float *y)
{
    for (size_t r = 0; r < n; r++) {
        double s = 0.0;
        for (size_t i = 0; i < D; i++) {
            x[r * D + i] = (float)(unit() * 4.0 - 2.0);
            s += (i % 2 ? 0.5 : -0.25) * x[r * D + i];
        }
        y[r] = (float)(sin(s) + x[r * D] * x[r * D + 1] + 0.05 * unit());
    }
}

static lr_mlp *
make_net(void)
{
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = D;
    o.hidden_layers = LAYERS;
    o.width = WIDTH;
    o.seed = 42;
    lr_mlp *m;
    bench_check(lr_mlp_create(&o, &m), "lr_mlp_create");
    return m;
}

static double
flops_per_row(void)
{
    return 2.0 *
           ((double)D * WIDTH + (double)(LAYERS - 1) * WIDTH * WIDTH + WIDTH);
}

static void
bench_predict(lr_mlp *m, const float *x, size_t rows, int reps)
{
    char name[64];
    snprintf(name, sizeof name, "mlp_predict_%zu", rows);
    if (!wanted(name))
        return;
    float out[256];
    uint64_t *t = malloc((size_t)reps * sizeof *t);
    if (t == NULL)
        exit(1);
    for (int i = 0; i < 50; i++) /* warm up */
        bench_check(lr_mlp_predict(m, x, rows, out), "lr_mlp_predict");
    for (int i = 0; i < reps; i++) {
        const float *xi = x + (size_t)(i % 8) * rows * D; /* < 1000 rows */
        uint64_t t0 = bench_now_ns();
        bench_check(lr_mlp_predict(m, xi, rows, out), "lr_mlp_predict");
        t[i] = bench_now_ns() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_u64);
    double p50 = (double)t[reps / 2], p99 = (double)t[reps * 99 / 100];
    printf("{\"name\": \"%s\", \"kernel\": \"%s\", \"rows\": %zu, "
           "\"shape\": \"%dx%dx%d\", \"us_p50\": %.2f, \"us_p99\": %.2f, "
           "\"mflop\": %.3f, \"gflops\": %.1f, \"reps\": %d}\n",
           name, lr__mlp_kernel(), rows, D, LAYERS, WIDTH, p50 / 1e3, p99 / 1e3,
           flops_per_row() * (double)rows / 1e6,
           flops_per_row() * (double)rows / p50, reps);
    fflush(stdout);
    free(t);
}

static void
bench_train(const float *x, const float *y, size_t n, uint32_t epochs, int reps,
            const char *name)
{
    if (!wanted(name))
        return;
    uint64_t t[16];
    double loss = 0.0;
    for (int i = 0; i < reps; i++) {
        lr_mlp *m = make_net();
        bench_check(lr_mlp_fit_normalization(m, x, n, y), "fit_normalization");
        uint64_t t0 = bench_now_ns();
        bench_check(lr_mlp_train(m, x, y, n, epochs, &loss), "lr_mlp_train");
        t[i] = bench_now_ns() - t0;
        lr_mlp_destroy(m);
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_u64);
    double p50 = (double)t[reps / 2];
    /* forward + two backward products: about 3x the forward flops */
    double fl = 3.0 * flops_per_row() * (double)n * epochs;
    printf("{\"name\": \"%s\", \"kernel\": \"%s\", \"rows\": %zu, "
           "\"epochs\": %u, \"batch\": 256, \"ms_p50\": %.1f, "
           "\"gflops\": %.1f, \"loss\": %.4f, \"reps\": %d}\n",
           name, lr__mlp_kernel(), n, epochs, p50 / 1e6, fl / p50, loss, reps);
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            filter = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--quick] [--filter SUBSTRING]\n",
                    argv[0]);
            return 2;
        }
    }
    const int reps = quick ? 20 : 2000;
    const size_t ntrain = quick ? 1000 : 10000;
    float *x = malloc(ntrain * D * sizeof *x);
    float *y = malloc(ntrain * sizeof *y);
    if (x == NULL || y == NULL)
        return 1;
    make_data(ntrain, x, y);

    lr_mlp *m = make_net();
    bench_check(lr_mlp_fit_normalization(m, x, ntrain, y), "fit_normalization");
    bench_check(lr_mlp_train(m, x, y, ntrain, 1, NULL), "lr_mlp_train");
    static const size_t rows[] = { 64, 8, 16 };
    /* the run-time choice, then the portable kernel if that was not it */
    int kernels = strcmp(lr__mlp_kernel(), "portable") == 0 ? 1 : 2;
    for (int k = 0; k < kernels; k++) {
        lr__mlp_force_portable(k == 1);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            bench_predict(m, x, rows[i], reps);
    }
    lr__mlp_force_portable(0);
    lr_mlp_destroy(m);

    bench_train(x, y, ntrain, 1, quick ? 1 : 5,
                quick ? "mlp_train_epoch_1k" : "mlp_train_epoch_10k");
    if (!quick)
        bench_train(x, y, ntrain, 20, 1, "mlp_train_20x10k");
    free(x);
    free(y);
    return 0;
}
