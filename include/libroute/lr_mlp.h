/** @file
 * lr_mlp: a small fully connected network that predicts one number (a
 * reward) from a row of features, Lodestar's scorer.
 *
 *   input [N, d] -> z-score -> (Linear -> ReLU -> Dropout) x hidden_layers
 *                -> Linear -> one output per row
 *
 * Dropout is applied in training only, after every hidden layer but the
 * last (as Lodestar). The output is trained in z-score units of the
 * target and returned in the target's own units.
 *
 * The network is float32. Scoring N rows is one batched pass; on x86-64
 * CPUs with AVX2 and FMA a register-tiled kernel is chosen at run time, and
 * a portable kernel elsewhere. Results are deterministic for a seed on one
 * machine and kernel; they may differ in the last bits between kernels.
 *
 * Thread safety: one thread at a time per network (scoring uses scratch
 * memory inside the handle). lr_mlp_load() and lr_mlp_clone() make new,
 * independent handles.
 *
 * Example:
 *   lr_mlp_options o; lr_mlp_options_init(&o);
 *   o.n_inputs = 4;
 *   lr_mlp *m; lr_mlp_create(&o, &m);
 *   lr_mlp_fit_normalization(m, x, n, y);
 *   double mse; lr_mlp_train(m, x, y, n, 20, &mse);
 *   float out[64]; lr_mlp_predict(m, rows, 64, out);
 *   lr_blob *b; lr_mlp_save(m, &b); ... lr_blob_destroy(b);
 *   lr_mlp_destroy(m);
 */
#ifndef LIBROUTE_LR_MLP_H
#define LIBROUTE_LR_MLP_H

#include "lr_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_mlp lr_mlp; /* opaque */

/** Largest input width, hidden depth and hidden width. @since 0.1 */
#define LR_MLP_MAX_INPUTS 256u
#define LR_MLP_MAX_LAYERS 8u
#define LR_MLP_MAX_WIDTH 1024u
/** Largest mini-batch. @since 0.1 */
#define LR_MLP_MAX_BATCH 65536u
/** Largest magnitude of a training target (lr_mlp_train,
 * lr_mlp_fit_normalization) and of a normalization statistic (a feature's
 * mean and deviation, the target's mean and deviation) that a network
 * accepts, fits or loads. Beyond it a float network's output overflows.
 * @since 0.2 */
#define LR_MLP_MAX_VALUE 1e30
/** Largest magnitude of a weight or bias that lr_mlp_load() accepts and
 * lr_mlp_train() leaves: a step that would pass it is undone
 * (LR_ERANGE). Trained networks stay orders of magnitude below. @since 0.2
 */
#define LR_MLP_MAX_WEIGHT 1e4

/** Options for lr_mlp_create(). Initialize with lr_mlp_options_init().
 * @since 0.1 */
typedef struct lr_mlp_options {
    size_t struct_size;
    /** NULL: libc. */
    const lr_allocator *allocator;
    /** Seeds the initial weights (Xavier uniform), dropout and shuffling. */
    uint64_t seed;
    /** Features per row, 1..LR_MLP_MAX_INPUTS; no default (0 is
     * LR_EINVAL). */
    uint32_t n_inputs;
    /** Hidden layers, 1..LR_MLP_MAX_LAYERS; default 3. */
    uint32_t hidden_layers;
    /** Units per hidden layer, 1..LR_MLP_MAX_WIDTH; default 128. */
    uint32_t width;
    /** Rows per Adam step, 1..LR_MLP_MAX_BATCH; default 256. */
    uint32_t batch_size;
    /** Dropout probability in training, [0, 0.9]; default 0.1. */
    double dropout;
    /** Adam step size, (0, 1]; default 1e-3. */
    double learning_rate;
    /** L2 weight decay added to the gradient (as PyTorch Adam), [0, 1);
     * default 1e-5. */
    double weight_decay;
    /** Global gradient-norm clip, >= 0 (0: off); default 1.0. */
    double grad_clip;
    /* v1 ends here */
} lr_mlp_options;

#define LR_MLP_OPTIONS_SIZE_V1 (offsetof(lr_mlp_options, grad_clip) + 8)

/** Zero the caller's `size` bytes of `opt`, set struct_size = size and the
 * defaults. Use the lr_mlp_options_init() macro, which passes the caller's
 * sizeof. @since 0.2 */
LR_API void lr_mlp_options_init_sized(lr_mlp_options *opt, size_t size);
#define lr_mlp_options_init(opt) lr_mlp_options_init_sized((opt), sizeof *(opt))

/** Create a network with fresh weights, identity normalization and
 * unbounded feature ranges (every row is in range).
 * @return LR_OK; LR_EINVAL (NULL, a field out of its range); LR_EVERSION;
 *   LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_mlp_create(const lr_mlp_options *opt, lr_mlp **out);

/** Destroy a network. NULL is a no-op. @since 0.1 */
LR_API void lr_mlp_destroy(lr_mlp *mlp);

/** An independent copy: weights, statistics, ranges, optimizer state and
 * random state, so both continue identically.
 * @return LR_OK; LR_EINVAL; LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_mlp_clone(const lr_mlp *mlp, lr_mlp **out);

/** Features per row; 0 for NULL. @since 0.1 */
LR_API uint32_t lr_mlp_n_inputs(const lr_mlp *mlp);

/** Set the normalization from samples: per feature the mean, standard
 * deviation (1 where a feature is constant) and [min, max] range; with
 * `y` non-NULL also the target's mean and deviation. Weights are kept.
 * @param x  n_rows x n_inputs floats, row-major.
 * @return LR_OK; LR_EINVAL (NULL, n_rows 0, a non-finite value);
 *   LR_ERANGE (a feature or target beyond LR_MLP_MAX_VALUE, so that a
 *   mean or deviation could pass it; nothing changed; @since 0.2).
 * @since 0.1 */
LR_API lr_status lr_mlp_fit_normalization(lr_mlp *mlp, const float *x,
                                          size_t n_rows, const float *y);

/** Predict one value per row (inference: no dropout). Allocates nothing.
 * Zero rows is a no-op (x and out may then be NULL). Every value written
 * with LR_OK is finite.
 * @param out  n_rows floats.
 * @return LR_OK; LR_EINVAL (NULL, a non-finite input; nothing written);
 *   LR_ERANGE (a prediction overflowed to infinity or NaN: what out then
 *   holds is unspecified, but never a non-finite value; @since 0.2).
 * @since 0.1 */
LR_API lr_status lr_mlp_predict(lr_mlp *mlp, const float *x, size_t n_rows,
                                float *out);

/** Count the rows with any feature outside the range fitted by
 * lr_mlp_fit_normalization() (NaN and infinities count as outside). Zero
 * rows is a no-op (x may then be NULL).
 * @return LR_OK; LR_EINVAL. @since 0.1 */
LR_API lr_status lr_mlp_out_of_range(const lr_mlp *mlp, const float *x,
                                     size_t n_rows, size_t *n_out);

/** Judge each row alone against the range fitted by
 * lr_mlp_fit_normalization(): flags[r] = 1 when row r has any feature
 * outside it (NaN and infinities count as outside), else 0. This is what
 * lets a caller drop the rows the network was not trained on and keep the
 * others (Lodestar's per-candidate range check), where
 * lr_mlp_out_of_range() only counts them. A network never fitted flags
 * only rows with a non-finite feature. Zero rows is a no-op (x and flags may
 * then be NULL). Allocates nothing.
 * @param x      n_rows x n_inputs floats, row-major (borrowed).
 * @param flags  out: n_rows bytes, 1 out of range, 0 in range.
 * @param n_out  optional out: how many rows are flagged.
 * @return LR_OK; LR_EINVAL (NULL network, NULL x or flags with rows, a
 *   size that overflows). Thread safety: reentrant on a network nobody is
 *   changing. @since 0.2 */
LR_API lr_status lr_mlp_out_of_range_rows(const lr_mlp *mlp, const float *x,
                                          size_t n_rows, uint8_t *flags,
                                          size_t *n_out);

/** Train: `epochs` passes over the rows in a fresh shuffled order each,
 * mini-batch Adam on squared error, with dropout. 0 epochs trains nothing
 * and reports the current loss (no dropout). A step whose loss turns
 * non-finite, or that leaves a parameter non-finite or beyond
 * LR_MLP_MAX_WEIGHT (a diverging learning rate), undoes the whole call.
 * @param loss  optional: mean squared error over the last epoch's batches,
 *   in the target's units squared.
 * @return LR_OK; LR_EINVAL (NULL, n_rows 0, a non-finite value);
 *   LR_ERANGE (a target beyond LR_MLP_MAX_VALUE, or the training
 *   diverged; the network is unchanged; @since 0.2); LR_ENOMEM (the
 *   network is unchanged). @since 0.1 */
LR_API lr_status lr_mlp_train(lr_mlp *mlp, const float *x, const float *y,
                              size_t n_rows, uint32_t epochs, double *loss);

/** Mean squared error of the predictions (no dropout). Allocates nothing.
 * @return LR_OK; LR_EINVAL; LR_ERANGE (a prediction or the error
 *   overflowed; @since 0.2). @since 0.1 */
LR_API lr_status lr_mlp_loss(lr_mlp *mlp, const float *x, const float *y,
                             size_t n_rows, double *mse);

/** Serialize: shape, training options, normalization, ranges and weights
 * (not the optimizer state), versioned and checksummed, little-endian.
 * Format version 1: magic "LRMLP\0\0\0", u32 version, u32 n_inputs,
 * hidden_layers, width, batch_size, u64 seed, f64 dropout, learning_rate,
 * weight_decay, grad_clip, target mean and std, f32 per-input mean, std,
 * min and max, f32 parameters (layer by layer, weights [out][in] then
 * biases), then the XXH3-64 of every byte before it with seed
 * 0x4c524d4c50303031 ("LRMLP001"). Floats are stored as bit patterns.
 * @return LR_OK; LR_EINVAL; LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_mlp_save(const lr_mlp *mlp, lr_blob **out);

/** Load a network lr_mlp_save() wrote. It predicts exactly as the saved
 * one; training starts with a fresh optimizer state. A blob is refused
 * when a weight or bias is beyond LR_MLP_MAX_WEIGHT, a mean or deviation
 * beyond LR_MLP_MAX_VALUE, or when the network predicts a non-finite
 * value for the rows of the per-feature means, minima and maxima (a
 * finite but extreme model).
 * @param allocator  NULL: libc.
 * @return LR_OK; LR_EINVAL; LR_EVERSION (a format this library does not
 *   read); LR_ECORRUPT (truncated, checksum, bad shape or value; nothing
 *   kept); LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_mlp_load(const uint8_t *buf, size_t len,
                             const lr_allocator *allocator, lr_mlp **out);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_MLP_H */
