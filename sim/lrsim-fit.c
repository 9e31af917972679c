/* lrsim-fit: does Lodestar's network beat linear regression on held-out
 * samples? Reads `lrsim --dump-samples FILE` output (see fit.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libroute.h>

#include "fit.h"

#define EXIT_USAGE 2

static void
usage(FILE *f, unsigned epochs)
{
    fprintf(f,
"usage: lrsim-fit [options] FILE.csv\n"
"\n"
"Fit Lodestar's samples (lrsim --dump-samples: features, then the reward)\n"
"two ways and compare them on held-out rows: lr_mlp with the library's\n"
"default shape, and ordinary least squares on z-scored inputs.\n"
"\n"
"  --seed N        the split and the network's seed (42)\n"
"  --test-frac F   share of rows held out, in (0, 1) (0.2)\n"
"  --epochs N      training passes of the network (the learner's: %u)\n"
"  --ridge R       ridge on the normalized normal equations (1e-6)\n"
"  --help\n"
"\n"
"Exit status: 0 ok, 1 a fit failed, 2 bad usage or input.\n",
            epochs);
}

static int
num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(x >= lo) || !(x <= hi)) {
        fprintf(stderr, "lrsim-fit: %s: expected a number in [%g, %g], got "
                        "'%s'\n",
                flag, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static double
mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    double seed = 42, frac = 0.2, epochs = lo.epochs, ridge = 1e-6;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, lo.epochs);
            return 0;
        }
        double *dst = NULL, lo_v = 0, hi_v = 0;
        if (strcmp(a, "--seed") == 0) {
            dst = &seed;
            hi_v = 9007199254740992.0;
        } else if (strcmp(a, "--test-frac") == 0) {
            dst = &frac;
            lo_v = 1e-9;
            hi_v = 1 - 1e-9;
        } else if (strcmp(a, "--epochs") == 0) {
            dst = &epochs;
            lo_v = 1;
            hi_v = 10000;
        } else if (strcmp(a, "--ridge") == 0) {
            dst = &ridge;
            hi_v = 1e6;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "lrsim-fit: unknown option '%s' (see --help)\n", a);
            return EXIT_USAGE;
        } else if (path == NULL) {
            path = a;
            continue;
        } else {
            fprintf(stderr, "lrsim-fit: one file only ('%s')\n", a);
            return EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "lrsim-fit: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        if (num(a, argv[++i], lo_v, hi_v, dst) != 0)
            return EXIT_USAGE;
        if ((dst == &seed || dst == &epochs) && *dst != floor(*dst)) {
            fprintf(stderr, "lrsim-fit: %s: expected a whole number\n", a);
            return EXIT_USAGE;
        }
    }
    if (path == NULL) {
        usage(stderr, lo.epochs);
        return EXIT_USAGE;
    }
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "lrsim-fit: %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    struct sim_dataset ds;
    struct sim_err err = { { 0 } };
    int rd = sim_dataset_read(f, path, &ds, &err);
    if (f != stdin)
        fclose(f);
    if (rd != 0) {
        fprintf(stderr, "lrsim-fit: %s\n", err.msg);
        return EXIT_USAGE;
    }
    size_t nte = (size_t)llround((double)ds.n * frac);
    size_t ntr = ds.n - nte;
    if (ntr < 2 || nte < 1) {
        fprintf(stderr, "lrsim-fit: %s: %zu rows are too few to split\n", path,
                ds.n);
        sim_dataset_free(&ds);
        return EXIT_USAGE;
    }
    size_t *idx = sim_calloc(ds.n, sizeof *idx);
    double *coef = sim_calloc(ds.d + 1, sizeof *coef);
    int rc = 1;
    if (idx == NULL || coef == NULL) {
        fprintf(stderr, "lrsim-fit: out of memory\n");
        goto out;
    }
    sim_shuffle_index(idx, ds.n, (uint64_t)seed);
    const size_t *tr = idx, *te = idx + ntr;
    struct sim_score base, lin_tr, lin_te, mlp_tr, mlp_te;
    sim_score_mean(&ds, tr, ntr, te, nte, &base);
    double t0 = mono_s();
    if (sim_fit_linear(&ds, tr, ntr, ridge, coef, &err) != 0) {
        fprintf(stderr, "lrsim-fit: %s\n", err.msg);
        goto out;
    }
    sim_score_linear(&ds, tr, ntr, coef, &lin_tr);
    sim_score_linear(&ds, te, nte, coef, &lin_te);
    double t1 = mono_s();
    if (sim_fit_mlp(&ds, tr, ntr, te, nte, (uint64_t)seed, (uint32_t)epochs,
                    &mlp_tr, &mlp_te, &err) != 0) {
        fprintf(stderr, "lrsim-fit: %s\n", err.msg);
        goto out;
    }
    double t2 = mono_s();
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    printf("lrsim-fit: %s: %zu rows x %zu features; %zu train, %zu held out "
           "(seed %.0f)\n",
           path, ds.n, ds.d, ntr, nte, seed);
    printf("%-34s %11s %11s %11s %8s\n", "model", "train MSE", "test MSE",
           "test MAE", "fit (s)");
    printf("%-34s %11s %11.5f %11.5f %8s\n", "training mean", "-", base.mse,
           base.mae, "-");
    char lab[64];
    snprintf(lab, sizeof lab, "linear (OLS, ridge %g)", ridge);
    printf("%-34s %11.5f %11.5f %11.5f %8.2f\n", lab, lin_tr.mse, lin_te.mse,
           lin_te.mae, t1 - t0);
    snprintf(lab, sizeof lab, "lr_mlp %ux%u (%.0f epochs)", mo.hidden_layers,
             mo.width, epochs);
    printf("%-34s %11.5f %11.5f %11.5f %8.2f\n", lab, mlp_tr.mse, mlp_te.mse,
           mlp_te.mae, t2 - t1);
    printf("held-out MSE: network / linear = %.3f; MAE: %.3f (below 1: the "
           "network is better)\n",
           mlp_te.mse / lin_te.mse, mlp_te.mae / lin_te.mae);
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    free(idx);
    free(coef);
    sim_dataset_free(&ds);
    return rc;
}
