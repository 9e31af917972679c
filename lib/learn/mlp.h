/* Internal view of lr_mlp for the learner, tests, fuzzers and benchmarks. */
#ifndef LIBROUTE_LIB_MLP_H
#define LIBROUTE_LIB_MLP_H

#include "common/common.h"
#include "learn/mlp_kernel.h"
#include "libroute/lr_mlp.h"

/* Units per hidden layer. */
uint32_t lr__mlp_width(const lr_mlp *m);

/* Last hidden layer's activations (inference, after ReLU) for n rows:
 * out is n x width floats. Allocates nothing. LR_EINVAL as lr_mlp_predict. */
lr_status lr__mlp_last_hidden(lr_mlp *m, const float *x, size_t n, float *out);

/* Inference as lr_mlp_predict, in the caller's scratch of
 * lr__mlp_scratch_floats(m) floats instead of the handle's: reads the
 * network only, so that threads may share one. */
size_t lr__mlp_scratch_floats(const lr_mlp *m);
lr_status lr__mlp_predict_into(const lr_mlp *m, const float *x, size_t n,
                               float *out, float *scratch);

/* Every trainable parameter, one contiguous float vector (layer by layer:
 * weights row-major [out][in], then biases). */
size_t lr__mlp_n_params(const lr_mlp *m);
float *lr__mlp_params(lr_mlp *m);

/* Loss L = mean over rows of (f(x) - z(y))^2, with f the network's output
 * in target z-score units and no dropout, and its gradient dL/dparams
 * (n_params floats). For gradient checks. May allocate (LR_ENOMEM). */
lr_status lr__mlp_gradient(lr_mlp *m, const float *x, const float *y, size_t n,
                           float *grad, double *loss);

/* The same L, without the gradient, in double precision where it matters
 * for finite differences. */
lr_status lr__mlp_loss_z(lr_mlp *m, const float *x, const float *y, size_t n,
                         double *loss);

#endif
