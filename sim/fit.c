/* lrsim-fit: CSV samples, least squares and lr_mlp (see fit.h). */
#define _POSIX_C_SOURCE 200809L
#include "fit.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

void
sim_dataset_free(struct sim_dataset *ds)
{
    if (ds == NULL)
        return;
    free(ds->x);
    free(ds->y);
    memset(ds, 0, sizeof *ds);
}

static int
blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return 0;
    return 1;
}

/* Parse the numbers of one row into v[0..cols). 0, or -1 (err). */
static int
parse_row(char *line, size_t cols, double *v, const char *path, size_t ln,
          struct sim_err *err)
{
    char *p = line;
    for (size_t c = 0; c < cols; c++) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno == ERANGE || !isfinite(x))
            return sim_errf(err, "%s:%zu: column %zu: not a finite number",
                            path, ln, c + 1);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
            end++;
        if (c + 1 < cols) {
            if (*end != ',')
                return sim_errf(err,
                                "%s:%zu: %zu columns, the header has "
                                "%zu",
                                path, ln, c + 1, cols);
            p = end + 1;
        } else if (*end != '\0') {
            return sim_errf(err, "%s:%zu: more columns than the header's %zu",
                            path, ln, cols);
        }
        v[c] = x;
    }
    return 0;
}

int
sim_dataset_read(FILE *f, const char *path, struct sim_dataset *out,
                 struct sim_err *err)
{
    memset(out, 0, sizeof *out);
    char *line = NULL;
    size_t lcap = 0, ln = 0, cap = 0, cols = 0;
    double *row = NULL;
    int rc = -1;
    ssize_t got;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        ln++;
        if (blank(line))
            continue;
        if (cols == 0) { /* the header */
            cols = 1;
            for (const char *s = line; *s; s++)
                cols += *s == ',';
            if (cols < 2) {
                sim_errf(err,
                         "%s:%zu: need at least one feature and the "
                         "target",
                         path, ln);
                goto out;
            }
            row = sim_calloc(cols, sizeof *row);
            if (row == NULL) {
                sim_errf(err, "out of memory");
                goto out;
            }
            out->d = cols - 1;
            continue;
        }
        if (parse_row(line, cols, row, path, ln, err) != 0)
            goto out;
        if (out->n == cap) {
            size_t nc = cap ? 2 * cap : 1024;
            double *x = sim_reallocarray(out->x, nc, out->d * sizeof *x);
            if (x == NULL) {
                sim_errf(err, "out of memory");
                goto out;
            }
            out->x = x;
            double *y = sim_reallocarray(out->y, nc, sizeof *y);
            if (y == NULL) {
                sim_errf(err, "out of memory");
                goto out;
            }
            out->y = y;
            cap = nc;
        }
        memcpy(out->x + out->n * out->d, row, out->d * sizeof *row);
        out->y[out->n++] = row[out->d];
    }
    if (ferror(f)) {
        sim_errf(err, "%s: read error", path);
        goto out;
    }
    if (cols == 0) {
        sim_errf(err, "%s: empty (no header)", path);
        goto out;
    }
    rc = 0;
out:
    free(line);
    free(row);
    if (rc != 0)
        sim_dataset_free(out);
    return rc;
}

void
sim_shuffle_index(size_t *idx, size_t n, uint64_t seed)
{
    struct sim_rng g;
    sim_rng_seed(&g, seed ^ 0x66697473706c6974ull);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)sim_rng_range(&g, 0, i - 1);
        size_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

/* ---- least squares ------------------------------------------------------------ */

/* Solve A w = b in place for a symmetric positive definite A (n x n) by
 * Cholesky. 0, or -1 if A is not positive definite. */
static int
cholesky_solve(double *a, double *b, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (size_t k = 0; k < j; k++)
            s -= a[j * n + k] * a[j * n + k];
        if (!(s > 0))
            return -1;
        double l = sqrt(s);
        a[j * n + j] = l;
        for (size_t i = j + 1; i < n; i++) {
            double t = a[i * n + j];
            for (size_t k = 0; k < j; k++)
                t -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = t / l;
        }
    }
    for (size_t i = 0; i < n; i++) { /* L z = b */
        double t = b[i];
        for (size_t k = 0; k < i; k++)
            t -= a[i * n + k] * b[k];
        b[i] = t / a[i * n + i];
    }
    for (size_t i = n; i-- > 0;) { /* L' w = z */
        double t = b[i];
        for (size_t k = i + 1; k < n; k++)
            t -= a[k * n + i] * b[k];
        b[i] = t / a[i * n + i];
    }
    return 0;
}

int
sim_fit_linear(const struct sim_dataset *ds, const size_t *idx, size_t m,
               double ridge, double *coef, struct sim_err *err)
{
    size_t d = ds->d;
    if (m == 0)
        return sim_errf(err, "no training rows");
    double *mu = sim_calloc(d, sizeof *mu), *sd = sim_calloc(d, sizeof *sd);
    double *a = sim_calloc(d * d, sizeof *a), *b = sim_calloc(d, sizeof *b);
    double *z = sim_calloc(d, sizeof *z);
    int rc = -1;
    if (!mu || !sd || !a || !b || !z) {
        sim_errf(err, "out of memory");
        goto out;
    }
    double ym = 0;
    for (size_t r = 0; r < m; r++) {
        const double *x = ds->x + idx[r] * d;
        for (size_t j = 0; j < d; j++)
            mu[j] += x[j];
        ym += ds->y[idx[r]];
    }
    for (size_t j = 0; j < d; j++)
        mu[j] /= (double)m;
    ym /= (double)m;
    for (size_t r = 0; r < m; r++) {
        const double *x = ds->x + idx[r] * d;
        for (size_t j = 0; j < d; j++)
            sd[j] += (x[j] - mu[j]) * (x[j] - mu[j]);
    }
    for (size_t j = 0; j < d; j++) {
        sd[j] = sqrt(sd[j] / (double)m);
        if (!(sd[j] > 1e-12))
            sd[j] = 1; /* a constant feature: its z is 0 everywhere */
    }
    for (size_t r = 0; r < m; r++) {
        const double *x = ds->x + idx[r] * d;
        double yc = ds->y[idx[r]] - ym;
        for (size_t j = 0; j < d; j++)
            z[j] = (x[j] - mu[j]) / sd[j];
        for (size_t i = 0; i < d; i++) {
            b[i] += z[i] * yc;
            for (size_t j = 0; j <= i; j++)
                a[i * d + j] += z[i] * z[j];
        }
    }
    for (size_t i = 0; i < d; i++) {
        for (size_t j = 0; j <= i; j++) {
            a[i * d + j] /= (double)m;
            a[j * d + i] = a[i * d + j];
        }
        a[i * d + i] += ridge;
        b[i] /= (double)m;
    }
    if (cholesky_solve(a, b, d) != 0) {
        sim_errf(err, "least squares: the normal equations are not positive "
                      "definite (raise the ridge)");
        goto out;
    }
    /* back to raw features: y = ym + sum w_j (x_j - mu_j) / sd_j */
    coef[0] = ym;
    for (size_t j = 0; j < d; j++) {
        coef[1 + j] = b[j] / sd[j];
        coef[0] -= b[j] * mu[j] / sd[j];
    }
    rc = 0;
out:
    free(mu);
    free(sd);
    free(a);
    free(b);
    free(z);
    return rc;
}

void
sim_score_linear(const struct sim_dataset *ds, const size_t *idx, size_t m,
                 const double *coef, struct sim_score *out)
{
    double se = 0, ae = 0;
    for (size_t r = 0; r < m; r++) {
        const double *x = ds->x + idx[r] * ds->d;
        double p = coef[0];
        for (size_t j = 0; j < ds->d; j++)
            p += coef[1 + j] * x[j];
        double e = p - ds->y[idx[r]];
        se += e * e;
        ae += fabs(e);
    }
    out->mse = m ? se / (double)m : NAN;
    out->mae = m ? ae / (double)m : NAN;
}

void
sim_score_mean(const struct sim_dataset *ds, const size_t *train, size_t ntr,
               const size_t *test, size_t nte, struct sim_score *out)
{
    double ym = 0;
    for (size_t r = 0; r < ntr; r++)
        ym += ds->y[train[r]];
    ym = ntr ? ym / (double)ntr : 0;
    double se = 0, ae = 0;
    for (size_t r = 0; r < nte; r++) {
        double e = ym - ds->y[test[r]];
        se += e * e;
        ae += fabs(e);
    }
    out->mse = nte ? se / (double)nte : NAN;
    out->mae = nte ? ae / (double)nte : NAN;
}

/* ---- the network ------------------------------------------------------------------ */

static int
gather(const struct sim_dataset *ds, const size_t *idx, size_t m, float **x,
       float **y)
{
    *x = sim_calloc(m ? m : 1, ds->d * sizeof **x);
    *y = sim_calloc(m ? m : 1, sizeof **y);
    if (*x == NULL || *y == NULL)
        return -1;
    for (size_t r = 0; r < m; r++) {
        for (size_t j = 0; j < ds->d; j++)
            (*x)[r * ds->d + j] = (float)ds->x[idx[r] * ds->d + j];
        (*y)[r] = (float)ds->y[idx[r]];
    }
    return 0;
}

static void
score_pred(const float *p, const float *y, size_t m, struct sim_score *out)
{
    double se = 0, ae = 0;
    for (size_t r = 0; r < m; r++) {
        double e = (double)p[r] - (double)y[r];
        se += e * e;
        ae += fabs(e);
    }
    out->mse = m ? se / (double)m : NAN;
    out->mae = m ? ae / (double)m : NAN;
}

int
sim_fit_mlp(const struct sim_dataset *ds, const size_t *train, size_t ntr,
            const size_t *test, size_t nte, uint64_t seed, uint32_t epochs,
            struct sim_score *on_train, struct sim_score *on_test,
            struct sim_err *err)
{
    if (ntr == 0)
        return sim_errf(err, "no training rows");
    if (ds->d > LR_MLP_MAX_INPUTS)
        return sim_errf(err, "%zu features; lr_mlp takes at most %u", ds->d,
                        LR_MLP_MAX_INPUTS);
    float *xtr = NULL, *ytr = NULL, *xte = NULL, *yte = NULL, *p = NULL;
    lr_mlp *m = NULL;
    int rc = -1;
    size_t most = ntr > nte ? ntr : nte;
    p = sim_calloc(most, sizeof *p);
    if (p == NULL || gather(ds, train, ntr, &xtr, &ytr) != 0 ||
        gather(ds, test, nte, &xte, &yte) != 0) {
        sim_errf(err, "out of memory");
        goto out;
    }
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = (uint32_t)ds->d;
    o.seed = seed;
    lr_status st = lr_mlp_create(&o, &m);
    if (st == LR_OK)
        st = lr_mlp_fit_normalization(m, xtr, ntr, ytr);
    if (st == LR_OK)
        st = lr_mlp_train(m, xtr, ytr, ntr, epochs, NULL);
    if (st == LR_OK)
        st = lr_mlp_predict(m, xtr, ntr, p);
    if (st == LR_OK)
        score_pred(p, ytr, ntr, on_train);
    if (st == LR_OK && nte > 0)
        st = lr_mlp_predict(m, xte, nte, p);
    if (st != LR_OK) {
        sim_errf(err, "lr_mlp: %s (%s)", lr_strerror(st), lr_status_name(st));
        goto out;
    }
    score_pred(p, yte, nte, on_test);
    rc = 0;
out:
    lr_mlp_destroy(m);
    free(xtr);
    free(ytr);
    free(xte);
    free(yte);
    free(p);
    return rc;
}
