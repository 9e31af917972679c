/** @file
 * lr_learner: Lodestar's online learner. It collects (features, reward)
 * samples from the serving side, retrains an lr_mlp on the host's thread
 * every `retrain_every` new samples, and hands the new model to the
 * serving side without a lock.
 *
 *   serving side (route path)            training side (host's thread)
 *   -------------------------            -----------------------------
 *   lr_learner_score()   <- model --     lr_learner_step(): trains a new
 *   lr_learner_add_sample() -- samples ->  model on FIFO + replay samples
 *
 * Samples go through a bounded single-producer single-consumer queue
 * (pending_capacity); models through a one-slot mailbox. Neither side
 * waits for the other: a step trains for as long as it takes while
 * scoring continues on the model in service, which is swapped for the new
 * one at the next lr_learner_score(). The old model is freed by the next
 * step, never on the serving side.
 *
 * Buffers, as Lodestar: the newest `fifo_capacity` samples, plus a replay
 * buffer of `replay_capacity` older samples chosen for diversity when they
 * leave the FIFO: each candidate's last-hidden-layer activations under the
 * previous model, scaled by its prediction error, L2-normalized, then
 * greedy k-center (farthest point, cosine distance). Every round trains a
 * fresh network on FIFO + replay.
 *
 * Memory: all sample buffers are reserved at create
 * ((pending + fifo + replay) x n_features floats); a step allocates the new
 * network and its training scratch, and frees them on failure.
 *
 * Thread safety: the serving calls (lr_learner_add_sample,
 * lr_learner_score, lr_learner_score_rows, lr_learner_get_stats) one
 * thread at a time; the training calls (lr_learner_step,
 * lr_learner_samples) may come from any thread: they guard themselves,
 * and one that overlaps another gets LR_ESTATE. A serving call and a training
 * call may run at the same time. lr_learner_destroy() overlaps nothing.
 * lr_router wraps all of this. The training side allocates (through the
 * handle's allocator) on its own thread; the serving side never allocates or
 * frees.
 *
 * Example:
 *   lr_learner_options o; lr_learner_options_init(&o);
 *   o.n_features = 12;
 *   lr_learner *l; lr_learner_create(&o, &l);
 *   // serving thread
 *   size_t ood; if (lr_learner_score(l, rows, n, pred, &ood) == LR_OK) ...
 *   lr_learner_add_sample(l, row, -ttft_s, predicted);
 *   // background thread
 *   int32_t trained; lr_learner_step(l, 0, &trained);
 */
#ifndef LIBROUTE_LR_LEARNER_H
#define LIBROUTE_LR_LEARNER_H

#include "lr_common.h"
#include "lr_mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_learner lr_learner; /* opaque */

/** Largest buffer capacity (each of pending, FIFO, replay). @since 0.1 */
#define LR_LEARNER_MAX_SAMPLES (1u << 22)

/** Options for lr_learner_create(). Initialize with
 * lr_learner_options_init(). @since 0.1 */
typedef struct lr_learner_options {
    size_t struct_size;
    /** NULL: libc. */
    const lr_allocator *allocator;
    /** Seeds every network and every random choice. */
    uint64_t seed;
    /** Features per sample, 1..LR_MLP_MAX_INPUTS; no default. */
    uint32_t n_features;
    /** Newest samples kept, 1..LR_LEARNER_MAX_SAMPLES; default 5000. */
    uint32_t fifo_capacity;
    /** Older samples kept for diversity, 0..LR_LEARNER_MAX_SAMPLES;
     * default 5000. */
    uint32_t replay_capacity;
    /** Samples between lr_learner_step() calls before new ones are
     * dropped (and counted), 1..LR_LEARNER_MAX_SAMPLES; default 8192. */
    uint32_t pending_capacity;
    /** Samples needed before the first model (cold start), >= 1; default
     * 5000. */
    uint32_t min_samples;
    /** New samples between rounds (theta), >= 1; default 1000. */
    uint32_t retrain_every;
    /** Training passes per round, 1..10000; default 30. */
    uint32_t epochs;
    /** Samples with |reward| above this are dropped (Lodestar drops TTFT
     * above 15 s); > 0 and at most LR_MLP_MAX_VALUE (1e30), default 15. */
    double max_abs_reward;
    /** The network's shape and training options; NULL: lr_mlp defaults.
     * n_inputs, allocator and seed are the learner's. Copied. */
    const lr_mlp_options *mlp;
    /* v1 ends here */
} lr_learner_options;

#define LR_LEARNER_OPTIONS_SIZE_V1 \
    (offsetof(lr_learner_options, mlp) + sizeof(void *))

/** Zero the caller's `size` bytes of `opt`, set struct_size = size and the
 * defaults. Use the lr_learner_options_init() macro, which passes the caller's
 * sizeof. @since 0.2 */
LR_API void lr_learner_options_init_sized(lr_learner_options *opt, size_t size);
#define lr_learner_options_init(opt) \
    lr_learner_options_init_sized((opt), sizeof *(opt))

/** Create a learner with no model (cold).
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_learner_create(const lr_learner_options *opt,
                                   lr_learner **out);

/** Destroy a learner and its models. NULL is a no-op. @since 0.1 */
LR_API void lr_learner_destroy(lr_learner *learner);

/** Serving side: queue one sample for the next step.
 * @param reward     the observed reward (for routing: -TTFT in seconds).
 * @param predicted  what the model in service predicted for it, or NaN;
 *                   feeds the online error in the stats.
 * @return LR_OK; LR_EINVAL (NULL, a non-finite feature or reward);
 *   LR_ERANGE (|reward| above max_abs_reward: dropped, counted);
 *   LR_ELIMIT (pending queue full: dropped, counted). Allocates nothing.
 * @since 0.1 */
LR_API lr_status lr_learner_add_sample(lr_learner *learner,
                                       const float *features, double reward,
                                       double predicted);

/** Serving side: predict the reward of n rows with the model in service
 * (taking over a newly trained one first), and count the rows outside the
 * ranges it was trained on. Allocates nothing.
 * @param out     n_rows floats.
 * @param n_ood   optional: rows out of range.
 * @return LR_OK; LR_EINVAL (NULL, a non-finite feature); LR_ESTATE (no
 *   model yet); LR_ERANGE (the model predicted a non-finite value; out
 *   holds zeros; @since 0.2). @since 0.1 */
LR_API lr_status lr_learner_score(lr_learner *learner, const float *x,
                                  size_t n_rows, float *out, size_t *n_ood);

/** Serving side: as lr_learner_score(), and judge each row alone against
 * the ranges the model in service was trained on
 * (lr_mlp_out_of_range_rows), so a caller can drop the rows out of range
 * and keep the others, as Lodestar's router does per candidate. Allocates
 * nothing.
 * @param x      n_rows x n_features floats (borrowed).
 * @param out    out: n_rows floats, the predicted rewards.
 * @param ood    out: n_rows bytes, 1 where the row is out of range.
 * @param n_ood  optional out: how many rows are.
 * @return LR_OK; LR_EINVAL (NULL, a non-finite feature; nothing written);
 *   LR_ESTATE (no model yet); LR_ERANGE (as lr_learner_score(); @since
 *   0.2). Thread safety: a serving call, as
 *   lr_learner_score(). @since 0.2 */
LR_API lr_status lr_learner_score_rows(lr_learner *learner, const float *x,
                                       size_t n_rows, float *out, uint8_t *ood,
                                       size_t *n_ood);

/** lr_learner_step() flag: train now if there is any sample, whatever the
 * counts. */
#define LR_LEARN_FORCE 1u

/** Training side: take the queued samples and, when min_samples (first
 * round) or retrain_every new samples (later rounds) have arrived, train a
 * new model and publish it. This is the slow call; it never blocks the
 * serving side.
 * @param trained  optional: 1 if a model was published, else 0.
 * @return LR_OK; LR_EINVAL (NULL, unknown flags); LR_ESTATE (another step
 *   is running); LR_ENOMEM (nothing taken, nothing published: the same
 *   samples are there for the next step); LR_ERANGE (training diverged,
 *   lr_mlp_train: the samples were taken, no model was published and the
 *   one in service stays; @since 0.2). @since 0.1 */
LR_API lr_status lr_learner_step(lr_learner *learner, uint32_t flags,
                                 int32_t *trained);

/** Training side: copy the samples the next round would train on (FIFO,
 * then replay) for offline study. x: capacity x n_features floats, y:
 * capacity floats (rewards).
 * @return LR_OK; LR_EINVAL; LR_ESTATE (a step is running); LR_EBUFSIZE
 *   (*n_samples says how many). @since 0.1 */
LR_API lr_status lr_learner_samples(lr_learner *learner, float *x, float *y,
                                    size_t capacity, size_t *n_samples);

/** Learner counters. @since 0.1 */
typedef struct lr_learner_stats {
    size_t struct_size;
    /** Samples queued, and dropped for a full queue or a reward out of
     * range. */
    uint64_t samples;
    uint64_t dropped_full;
    uint64_t dropped_range;
    /** Training rounds of the model in service (0: none yet), the samples
     * it trained on (FIFO + replay), and its training error (mean squared
     * error, reward units squared). */
    uint64_t model_round;
    uint64_t model_samples;
    uint64_t model_replay;
    double model_mse;
    /** Mean |predicted - reward| over the last 256 samples added with a
     * prediction (NaN before any): the online error, a learning curve. */
    double online_mae;
    /** Samples with a prediction, over the learner's life. */
    uint64_t predicted;
    /* v1 ends here */
} lr_learner_stats;

#define LR_LEARNER_STATS_SIZE_V1 (offsetof(lr_learner_stats, predicted) + 8)

/** Zero the caller's `size` bytes of `s` and set struct_size = size. Use the
 * lr_learner_stats_init() macro, which passes the caller's sizeof. @since 0.2
 */
LR_API void lr_learner_stats_init_sized(lr_learner_stats *s, size_t size);
#define lr_learner_stats_init(s) lr_learner_stats_init_sized((s), sizeof *(s))

/** Serving side: read the counters, taking over a newly trained model
 * first (as lr_learner_score does), so model_round counts a step that
 * returned. Not reentrant: it may swap the model in service.
 * @return LR_OK; LR_EINVAL; LR_EVERSION. @since 0.1 */
LR_API lr_status lr_learner_get_stats(lr_learner *learner,
                                      lr_learner_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_LEARNER_H */
