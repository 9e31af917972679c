/** @file
 * lr_load: per-instance load, from the router's own traffic and from the
 * engine stats and RTT probes the host feeds it.
 *
 * The tracker keeps one record per request in flight, so that every counter
 * it adds at dispatch is subtracted exactly once when the request ends,
 * whatever order the events arrive in:
 *
 *   dispatch -> [first_token] -> complete | fail
 *
 * A request may complete or fail without a first token; a first token after
 * the end, or any event for an id never dispatched, gets LR_ENOENT. When no
 * request is in flight every counter is zero.
 *
 * All memory is reserved at create time (max_instances, max_requests): no
 * later call allocates, so no later call can fail with LR_ENOMEM.
 *
 * Thread safety: none; one thread at a time per tracker. lr_router
 * reads its own from several routes at once under its shared lock and
 * changes it only under its exclusive lock.
 *
 * Example:
 *   lr_load *ld;
 *   lr_load_create(NULL, &ld);
 *   lr_load_add_instance(ld, 0, 0, 1);
 *   lr_dispatch d; lr_dispatch_init(&d);
 *   d.request_id = 42; d.instance = 0; d.prompt_tokens = 900;
 *   d.cached_tokens = 512; d.now_ns = now;
 *   lr_load_dispatch(ld, &d);
 *   ...
 *   lr_load_complete(ld, 42, 130, now);
 */
#ifndef LIBROUTE_LR_LOAD_H
#define LIBROUTE_LR_LOAD_H

#include "lr_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_load lr_load; /* opaque */

/** Largest instance id + 1 a tracker can hold. @since 0.1 */
#define LR_LOAD_MAX_INSTANCES 65534u
/** Largest max_requests. @since 0.1 */
#define LR_LOAD_MAX_REQUESTS (1u << 24)

/** Options for lr_load_create(). Initialize with lr_load_options_init().
 * @since 0.1 */
typedef struct lr_load_options {
    size_t struct_size;
    /** NULL: libc. */
    const lr_allocator *allocator;
    /** Instance ids are 0..max_instances-1; default 1024, at most
     * LR_LOAD_MAX_INSTANCES. */
    uint32_t max_instances;
    /** Requests in flight at once; default 65536, at most
     * LR_LOAD_MAX_REQUESTS. Dispatch beyond it gets LR_ELIMIT. */
    uint32_t max_requests;
    /** Weight of a new RTT sample in the EWMA, in (0, 1]; default 0.3
     * (GORGO). */
    double rtt_alpha;
    /* v1 ends here */
} lr_load_options;

#define LR_LOAD_OPTIONS_SIZE_V1 (offsetof(lr_load_options, rtt_alpha) + 8)

/** Zero the caller's `size` bytes of `opt`, set struct_size = size and the
 * defaults. Never fails on non-NULL. Use the lr_load_options_init() macro,
 * which passes the caller's sizeof. @since 0.2 */
LR_API void lr_load_options_init_sized(lr_load_options *opt, size_t size);
#define lr_load_options_init(opt) \
    lr_load_options_init_sized((opt), sizeof *(opt))

/** Create a tracker. NULL options mean the defaults.
 * @return LR_OK; LR_EINVAL (NULL out, bounds); LR_EVERSION; LR_ENOMEM.
 * @since 0.1 */
LR_API lr_status lr_load_create(const lr_load_options *opt, lr_load **out);

/** Destroy a tracker. NULL is a no-op. @since 0.1 */
LR_API void lr_load_destroy(lr_load *load);

/** Start tracking an instance.
 * @param instance        0..max_instances-1.
 * @param instance_class  the host's class (GPU model) id, <
 * LR_LOAD_MAX_CLASSES.
 * @param prefix_caching  1 if the engine caches prefixes, 0 if not.
 * @return LR_OK; LR_EINVAL; LR_ELIMIT (id >= max_instances); LR_EEXIST.
 * @since 0.1 */
LR_API lr_status lr_load_add_instance(lr_load *load, uint32_t instance,
                                      uint32_t instance_class,
                                      int32_t prefix_caching);

/** Instance classes are 0..LR_LOAD_MAX_CLASSES-1. @since 0.1 */
#define LR_LOAD_MAX_CLASSES 64u

/** Stop tracking an instance. Its requests in flight are dropped: later
 * events for them get LR_ENOENT. @return LR_OK; LR_EINVAL; LR_ENOENT.
 * @since 0.1 */
LR_API lr_status lr_load_remove_instance(lr_load *load, uint32_t instance);

/** A request handed to an instance. @since 0.1 */
typedef struct lr_dispatch {
    size_t struct_size;
    /** The host's id, unique among requests in flight. */
    uint64_t request_id;
    uint32_t instance;
    /** Prompt length. */
    uint32_t prompt_tokens;
    /** Tokens expected to hit the instance's prefix cache, <= prompt. */
    uint32_t cached_tokens;
    /** Expected output length; 0 if unknown. */
    uint32_t expected_output_tokens;
    /** Another instance that could serve it (DualMap's second candidate)
     * and its expected cached tokens, for rebalancing plans;
     * LR_INSTANCE_NONE if none. */
    uint32_t alt_instance;
    uint32_t alt_cached_tokens;
    /** Host time of the dispatch. */
    uint64_t now_ns;
    /* v1 ends here */
    /** In a disaggregated fleet, the instance that prefills the request
     * before `instance` decodes it, its KV moving over between them
     * (LR_INSTANCE_NONE: `instance` does both), and the tokens expected to
     * hit its prefix cache, <= prompt. Until the prefill leg ends
     * (lr_load_prefill_done(), or the first token) the prefill instance
     * counts the request in flight and queued, its uncached tokens as
     * prefill and its prompt's KV; `instance` counts it in flight and
     * queued, with its KV and its decode but no prefill. @since 0.3 */
    uint32_t prefill_instance;
    uint32_t prefill_cached_tokens;
    /* v2 ends here */
} lr_dispatch;

#define LR_DISPATCH_SIZE_V1 (offsetof(lr_dispatch, now_ns) + 8)
#define LR_DISPATCH_SIZE_V2 (offsetof(lr_dispatch, prefill_cached_tokens) + 4)

/** Zero the caller's `size` bytes of `d`, set struct_size = size, alt_instance
 * = prefill_instance = LR_INSTANCE_NONE. Use the lr_dispatch_init() macro,
 * which passes the caller's sizeof. @since 0.2 */
LR_API void lr_dispatch_init_sized(lr_dispatch *d, size_t size);
#define lr_dispatch_init(d) lr_dispatch_init_sized((d), sizeof *(d))

/** Record a dispatch: the request is in flight and queued (no first token).
 * @return LR_OK; LR_EINVAL (NULL, cached > prompt, alt == instance,
 *   prefill_instance == instance); LR_EVERSION; LR_ENOENT (instance,
 *   alt_instance or prefill_instance not tracked); LR_EEXIST (request id
 *   in flight); LR_ELIMIT (max_requests).
 * @since 0.1 */
LR_API lr_status lr_load_dispatch(lr_load *load, const lr_dispatch *d);

/** The prefill leg of a request dispatched with a prefill_instance ended:
 * its KV has moved to the decode instance (vLLM: the prefill request
 * returned its kv_transfer_params). The prefill instance stops counting
 * it. A request without a prefill leg, or whose leg ended before: a no-op.
 * @return LR_OK; LR_EINVAL; LR_ENOENT (no such request in flight).
 * @since 0.3 */
LR_API lr_status lr_load_prefill_done(lr_load *load, uint64_t request_id,
                                      uint64_t now_ns);

/** The request's first token: it leaves the queue and starts decoding (a
 * prefill leg still open ends with it). A second first token for the same
 * request is a no-op (LR_OK).
 * @return LR_OK; LR_EINVAL; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_load_first_token(lr_load *load, uint64_t request_id,
                                     uint64_t now_ns);

/** The request ended with `output_tokens` generated; its record is freed.
 * @return LR_OK; LR_EINVAL; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_load_complete(lr_load *load, uint64_t request_id,
                                  uint32_t output_tokens, uint64_t now_ns);

/** The request failed or was cancelled; its record is freed.
 * @return LR_OK; LR_EINVAL; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_load_fail(lr_load *load, uint64_t request_id);

/** Move a request in flight to another instance (a rebalancing move the
 * host carried out), with the cached tokens expected there. A request that
 * already had its first token cannot move (LR_ESTATE). The old instance
 * becomes the request's alternative.
 * @return LR_OK; LR_EINVAL (cached > prompt); LR_ENOENT (request or
 *   instance); LR_ESTATE. @since 0.1 */
LR_API lr_status lr_load_move(lr_load *load, uint64_t request_id,
                              uint32_t instance, uint32_t cached_tokens);

/** Engine metrics the host scraped. @since 0.1 */
typedef struct lr_engine_stats {
    size_t struct_size;
    /** Requests running on the engine (vllm:num_requests_running). */
    uint32_t running;
    /** Requests waiting on the engine (vllm:num_requests_waiting). */
    uint32_t waiting;
    /** KV cache use in [0, 1] (vllm:kv_cache_usage_perc). */
    double kv_use;
    /** Host time of the scrape. */
    uint64_t scraped_ns;
    /* v1 ends here */
} lr_engine_stats;

#define LR_ENGINE_STATS_SIZE_V1 (offsetof(lr_engine_stats, scraped_ns) + 8)

/** Zero the caller's `size` bytes of `s` and set struct_size = size. Use the
 * lr_engine_stats_init() macro, which passes the caller's sizeof. @since 0.2 */
LR_API void lr_engine_stats_init_sized(lr_engine_stats *s, size_t size);
#define lr_engine_stats_init(s) lr_engine_stats_init_sized((s), sizeof *(s))

/** Replace an instance's scraped stats. A scrape older than the one held
 * is ignored (LR_OK): scrapes may arrive out of order.
 * @return LR_OK; LR_EINVAL (NULL, kv_use NaN or outside [0,1]);
 *   LR_EVERSION; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_load_set_stats(lr_load *load, uint32_t instance,
                                   const lr_engine_stats *stats);

/** Fold an RTT probe into the instance's EWMA (the first sample sets it).
 * @param rtt_ns  at most LR_LOAD_MAX_RTT_NS.
 * @return LR_OK; LR_EINVAL; LR_ERANGE (absurd RTT); LR_ENOENT.
 * @since 0.1 */
LR_API lr_status lr_load_observe_rtt(lr_load *load, uint32_t instance,
                                     uint64_t rtt_ns);

/** One minute: an RTT above this is a broken probe, not a network.
 * @since 0.1 */
#define LR_LOAD_MAX_RTT_NS 60000000000ull

/** An instance's load at one moment. @since 0.1 */
typedef struct lr_load_snapshot {
    size_t struct_size;
    uint32_t instance_class;
    int32_t prefix_caching;
    /** Requests dispatched and not ended. */
    uint32_t inflight;
    /** Of which queued: no first token yet. */
    uint32_t queued;
    /** Uncached prompt tokens of queued requests (prefill still to do). */
    uint64_t prefill_tokens;
    /** Whole prompt tokens of queued requests. */
    uint64_t queued_tokens;
    /** Expected output tokens of requests past their first token. */
    uint64_t decode_tokens;
    /** Prompt + expected output tokens of every request in flight: the KV
     * they hold or will hold. */
    uint64_t kv_tokens;
    /** Latest scrape; meaningful when has_stats. */
    int32_t has_stats;
    uint32_t running;
    uint32_t waiting;
    double kv_use;
    uint64_t scraped_ns;
    /** RTT EWMA; meaningful when has_rtt. */
    int32_t has_rtt;
    uint64_t rtt_ns;
    /** Host time of the latest first token on this instance (0: none). */
    uint64_t last_first_token_ns;
    /** Host time the queue last went from empty to non-empty. */
    uint64_t queue_since_ns;
    /** Whole prompt tokens of every request in flight, queued or
     * decoding (GORGO's queued tokens, released when a request ends). */
    uint64_t prompt_tokens;
    /* v1 ends here */
} lr_load_snapshot;

#define LR_LOAD_SNAPSHOT_SIZE_V1 (offsetof(lr_load_snapshot, prompt_tokens) + 8)

/** Zero the caller's `size` bytes of `s` and set struct_size = size. Use the
 * lr_load_snapshot_init() macro, which passes the caller's sizeof. @since 0.2
 */
LR_API void lr_load_snapshot_init_sized(lr_load_snapshot *s, size_t size);
#define lr_load_snapshot_init(s) lr_load_snapshot_init_sized((s), sizeof *(s))

/** Read an instance's load.
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_load_get(const lr_load *load, uint32_t instance,
                             lr_load_snapshot *out);

/** Requests in flight over all instances. 0 for NULL. @since 0.1 */
LR_API uint64_t lr_load_inflight(const lr_load *load);

/** Where a request in flight is: its instance and whether it is still
 * queued (1) or decoding (0). Either out pointer may be NULL.
 * @return LR_OK; LR_EINVAL; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_load_request(const lr_load *load, uint64_t request_id,
                                 uint32_t *instance, int32_t *queued);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_LOAD_H */
