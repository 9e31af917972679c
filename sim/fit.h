/* lrsim-fit: offline study of Lodestar's samples. Reads the CSV that
 * `lrsim --dump-samples` writes, splits it into training and held-out
 * rows with a seed, and fits two predictors of the last column:
 *
 *   - lr_mlp, through its public API, with the library's default shape
 *     and the learner's default epochs (what Lodestar retrains);
 *   - ordinary least squares on z-scored inputs: the normal equations in
 *     double, (Z'Z/n + ridge I) w = Z'(y - mean y)/n, solved by Cholesky.
 *
 * Both are scored on the held-out rows (MSE, MAE), beside the trivial
 * predictor "the training mean". Lodestar's Fig. 5 claims the network
 * beats linear regression there. */
#ifndef LRSIM_FIT_H
#define LRSIM_FIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util.h"

/* Rows of d features and one target, row-major. */
struct sim_dataset {
    size_t n, d;
    double *x; /* n x d */
    double *y; /* n */
};

void sim_dataset_free(struct sim_dataset *ds);

/* Read a CSV: one header line (names, ignored but counted), then rows of
 * numbers, the last column the target; blank lines skipped. Every row
 * must have the header's column count (>= 2). Errors name FILE:LINE.
 * 0, or -1 (err). */
int sim_dataset_read(FILE *f, const char *path, struct sim_dataset *out,
                     struct sim_err *err);

/* Indices 0..n-1 shuffled by seed (Fisher-Yates): the first n_train are
 * the training rows. */
void sim_shuffle_index(size_t *idx, size_t n, uint64_t seed);

/* Errors of a predictor on rows idx[0..m). */
struct sim_score {
    double mse, mae;
};

/* OLS on z-scored inputs with a ridge (on the normalized normal
 * equations, intercept not penalized). coef: d + 1 doubles written, the
 * intercept then one weight per raw (unscaled) feature. 0, or -1 (err:
 * not positive definite, out of memory). */
int sim_fit_linear(const struct sim_dataset *ds, const size_t *idx, size_t m,
                   double ridge, double *coef, struct sim_err *err);
void sim_score_linear(const struct sim_dataset *ds, const size_t *idx, size_t m,
                      const double *coef, struct sim_score *out);

/* An lr_mlp with the library's defaults (n_inputs = d, seed), normalized
 * on the training rows, trained `epochs` passes; scored on the train and
 * test rows. 0, or -1 (err). */
int sim_fit_mlp(const struct sim_dataset *ds, const size_t *train, size_t ntr,
                const size_t *test, size_t nte, uint64_t seed, uint32_t epochs,
                struct sim_score *on_train, struct sim_score *on_test,
                struct sim_err *err);

/* The training mean as the prediction. */
void sim_score_mean(const struct sim_dataset *ds, const size_t *train,
                    size_t ntr, const size_t *test, size_t nte,
                    struct sim_score *out);

#endif /* LRSIM_FIT_H */
