/** @file
 * lr_cost: the cost models the policies rank candidates by, as a handle a
 * host can evaluate, tune and inspect on its own.
 *
 * A cost model turns a candidate row (lr_candidate: cached tokens, load,
 * RTT, class speed) and the request's prompt length into one number,
 * lower is better. Three kinds, the formulas the router's policies use
 * (one implementation):
 *
 *   LR_COST_TTFT    predicted time to first token, seconds:
 *                     (prefill_tokens + prompt - cached) / prefill_rate
 *                     + W_RTT x rtt_ms / 1000 + W_STALL x stall_s
 *                   (min-ttft uses W_RTT = W_STALL = 0, dualmap W_STALL = 1)
 *   LR_COST_GORGO   GORGO's cost, in tokens:
 *                     W_RTT x rtt_ms + (prompt - cached)
 *                     + W_QUEUE x (QUEUE_AT_FIRST_TOKEN ? queued_tokens
 *                                                     : prompt_tokens)
 *   LR_COST_DYNAMO  NVIDIA Dynamo's cost, in blocks of BLOCK_TOKENS:
 *                     W_UNCACHED x ceil((prompt - cached) / B)
 *                     + ceil(kv_tokens / B)
 *
 * Parameters are enum keys with a bounds query per kind (LR_ENOTSUP for a
 * key the kind does not have). A GORGO model carries GORGO's online tuner:
 * a (1+1) evolution strategy over W_RTT and W_QUEUE in log space. Each
 * observed TTFT goes into a rolling window of LR_COST_TUNE_WINDOW samples,
 * and the tuner takes one step per LR_COST_TUNE_HOP samples once the
 * window is full, as GORGO does (its Fig. 3: 18 steps by sample 672). The
 * first full window (sample 128) scores the incumbent by its p95 and puts
 * a trial in service; every later hop judges the trial in service by the
 * window's p95 (the window then holds the trial's hop and the samples
 * before it) and puts the next trial in service: a trial that beats the
 * incumbent by more than 0.5% replaces it, a failed one is rolled back;
 * the step size follows the 1/5 success rule over the last 8 trials and
 * tuning stops when it falls under 0.02. W_RTT stays in [0.05, W_RTT_MAX]
 * and W_QUEUE in [W_QUEUE_MIN, 0.5] (GORGO's guard against reward
 * hacking).
 *
 * Thread safety: one thread at a time per handle; lr_cost_eval() on a
 * handle nobody is changing is reentrant.
 *
 * Example:
 *   lr_cost_options o; lr_cost_options_init(&o);
 *   o.kind = LR_COST_GORGO;
 *   lr_cost *c; lr_cost_create(&o, &c);
 *   double cost[64];
 *   lr_cost_eval(c, prompt_tokens, rows, n, sizeof rows[0], cost);
 *   lr_cost_tune(c, 1);
 *   ... for every first token: lr_cost_observe(c, ttft_s);
 *   lr_cost_destroy(c);
 */
#ifndef LIBROUTE_LR_COST_H
#define LIBROUTE_LR_COST_H

#include "lr_common.h"
#include "lr_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_cost lr_cost; /* opaque */

/** Cost model kinds. Values are stable and only appended. @since 0.2 */
typedef enum lr_cost_kind {
    LR_COST_TTFT = 0,
    LR_COST_GORGO = 1,
    LR_COST_DYNAMO = 2
} lr_cost_kind;

/** Number of kinds this library has (values 0 .. count - 1). Never fails.
 * @since 0.2 */
LR_API uint32_t lr_cost_kind_count(void);

/** Name of a kind ("ttft", "gorgo", "dynamo"), or NULL. Never fails.
 * @since 0.2 */
LR_API const char *lr_cost_kind_name(int32_t kind);

/** Cost model parameters. Which a kind has: TTFT: W_RTT, W_STALL; GORGO:
 * W_RTT, W_QUEUE, QUEUE_AT_FIRST_TOKEN, SIGMA, W_RTT_MAX, W_QUEUE_MIN;
 * DYNAMO: W_UNCACHED, BLOCK_TOKENS. Values are stable and only appended.
 * @since 0.2 */
typedef enum lr_cost_param {
    /** Weight of the RTT: TTFT seconds per second of RTT (1); GORGO
     * tokens per millisecond (0.5). */
    LR_COST_W_RTT = 0,
    /** GORGO: weight of the queued tokens (0.1). */
    LR_COST_W_QUEUE = 1,
    /** TTFT: weight of the decode-stall seconds (1). */
    LR_COST_W_STALL = 2,
    /** DYNAMO: weight of the uncached prefill blocks (1). */
    LR_COST_W_UNCACHED = 3,
    /** DYNAMO: tokens per block (16). */
    LR_COST_BLOCK_TOKENS = 4,
    /** GORGO: 1 counts only queued requests' prompt tokens (released at
     * the first token), 0 every request's until it ends (0). */
    LR_COST_QUEUE_AT_FIRST_TOKEN = 5,
    /** GORGO tuner: its step size in log space (0.5 at first). The tuner
     * moves it (the 1/5 rule): reading it gives the step size now, setting
     * it sets the next step's. */
    LR_COST_SIGMA = 6,
    /** GORGO tuner: cap on W_RTT (2.0) and floor on W_QUEUE (0.05). */
    LR_COST_W_RTT_MAX = 7,
    LR_COST_W_QUEUE_MIN = 8
} lr_cost_param;

/** Number of parameter keys (0 .. count - 1; a kind has a subset). Never
 * fails. @since 0.2 */
LR_API uint32_t lr_cost_param_count(void);

/** The GORGO tuner's rolling window and hop, in samples. @since 0.2 */
#define LR_COST_TUNE_WINDOW 128u
#define LR_COST_TUNE_HOP 32u

/** Bounds and default of a parameter for a kind; status LR_ENOTSUP when
 * the kind has no such key. Never fails. @since 0.2 */
LR_API lr_bounds lr_cost_param_bounds(int32_t kind, int32_t key);

/** Options for lr_cost_create(). @since 0.2 */
typedef struct lr_cost_options {
    size_t struct_size;
    /** NULL: libc. */
    const lr_allocator *allocator;
    /** An lr_cost_kind; default LR_COST_TTFT. */
    int32_t kind;
    /** Seeds the tuner's steps. */
    uint64_t seed;
    /* v1 ends here */
} lr_cost_options;

#define LR_COST_OPTIONS_SIZE_V1 (offsetof(lr_cost_options, seed) + 8)

#ifndef __cplusplus
#define LR_COST_OPTIONS_INIT \
    { .struct_size = sizeof(lr_cost_options) }
#endif

/** Zero the caller's `size` bytes of `opt`, set struct_size = size and
 * the defaults. Use the lr_cost_options_init() macro. @since 0.2 */
LR_API void lr_cost_options_init_sized(lr_cost_options *opt, size_t size);
#define lr_cost_options_init(o) lr_cost_options_init_sized((o), sizeof *(o))

/** Create a cost model with its kind's default parameters, not tuning.
 * @return LR_OK; LR_EINVAL (NULL out, unknown kind, partial allocator);
 *   LR_EVERSION; LR_ENOMEM. @since 0.2 */
LR_API lr_status lr_cost_create(const lr_cost_options *opt, lr_cost **out);

/** Destroy a cost model. NULL is a no-op. @since 0.2 */
LR_API void lr_cost_destroy(lr_cost *cost);

/** The model's kind; -1 for NULL. @since 0.2 */
LR_API int32_t lr_cost_kind_of(const lr_cost *cost);

/** Set a parameter. Setting W_RTT or W_QUEUE of a tuning model ends the
 * trial in progress: the value set becomes the incumbent.
 * @return LR_OK; LR_EINVAL (NULL, NaN, a fraction for an integer key);
 *   LR_ENOTSUP (not a key of this kind); LR_ERANGE. @since 0.2 */
LR_API lr_status lr_cost_set_param(lr_cost *cost, int32_t key, double value);

/** Read a parameter; for the tuned weights, the incumbent (the best
 * weights known), which during a trial differ from the weights in
 * service.
 * @return LR_OK; LR_EINVAL; LR_ENOTSUP. @since 0.2 */
LR_API lr_status lr_cost_get_param(const lr_cost *cost, int32_t key,
                                   double *value);

/** Evaluate the model with the weights in service.
 * @param rows  n_rows candidates every row_size bytes (borrowed);
 *              row_size >= LR_CANDIDATE_SIZE_V1.
 * @param out   out: n_rows costs.
 * @return LR_OK; LR_EINVAL (NULL, row_size too small, a row's
 *   cached_tokens above prompt_tokens, a non-positive or non-finite
 *   prefill_rate for TTFT). Zero rows is a no-op. @since 0.2 */
LR_API lr_status lr_cost_eval(const lr_cost *cost, uint32_t prompt_tokens,
                              const lr_candidate *rows, size_t n_rows,
                              size_t row_size, double *out);

/** Start (1) or stop (0) tuning. Starting (or resuming) goes on from the
 * current weights and step size; stopping ends a trial (the incumbent
 * serves) and freezes the weights.
 * @return LR_OK; LR_EINVAL (NULL, not 0 or 1); LR_ENOTSUP (only GORGO
 *   models tune). @since 0.2 */
LR_API lr_status lr_cost_tune(lr_cost *cost, int32_t on);

/** Feed one observed TTFT (seconds) to the tuner; ignored (LR_OK) while
 * not tuning or after it converged.
 * @return LR_OK; LR_EINVAL (NULL, negative or non-finite). @since 0.2 */
LR_API lr_status lr_cost_observe(lr_cost *cost, double ttft_s);

/** The tuner's progress. @since 0.2 */
typedef struct lr_cost_tuner_stats {
    size_t struct_size;
    /** 0 off, 1 measuring the incumbent, 2 a trial in service, 3 converged
     * (step size under 0.02). */
    int32_t state;
    /** Trials judged and trials accepted. */
    uint64_t trials;
    uint64_t accepted;
    /** Current step size and the incumbent's window p95 (seconds; NaN
     * before the first judgement). */
    double sigma;
    double incumbent_p95_s;
    /** Samples observed while tuning. */
    uint64_t samples;
    /* v1 ends here */
} lr_cost_tuner_stats;

#define LR_COST_TUNER_STATS_SIZE_V1 (offsetof(lr_cost_tuner_stats, samples) + 8)

/** Zero the caller's `size` bytes of `s` and set struct_size. Use the
 * lr_cost_tuner_stats_init() macro. @since 0.2 */
LR_API void lr_cost_tuner_stats_init_sized(lr_cost_tuner_stats *s, size_t size);
#define lr_cost_tuner_stats_init(s) \
    lr_cost_tuner_stats_init_sized((s), sizeof *(s))

/** Read the tuner's progress.
 * @return LR_OK; LR_EINVAL; LR_EVERSION. @since 0.2 */
LR_API lr_status lr_cost_tuner_get_stats(const lr_cost *cost,
                                         lr_cost_tuner_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_COST_H */
