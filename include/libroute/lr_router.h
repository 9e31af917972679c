/** @file
 * lr_router: route() over live state. One router owns a prefix index, a
 * dual ring and a load tracker, and runs one policy from the literature at
 * a time; every policy shares this code path, so a comparison compares
 * policies and nothing else.
 *
 * The host's side:
 *
 *   create (options, policy); add instances by name
 *   per request:  route(request) -> decision       (records the dispatch)
 *                 first_token(id) ; complete(id) | fail(id)
 *   background:   set_stats(instance, scrape) ; observe_rtt(instance, rtt)
 *                 KV events ; deltas from other gateway replicas
 *
 * Time is the host's monotonic clock in nanoseconds, passed in every call
 * that needs it. Tokens are borrowed for the call.
 *
 * Clock (@since 0.2). The router judges every timestamp it is given (a
 * request's now_ns, a scrape's scraped_ns, the now_ns of lifecycle
 * events, KV events, deltas, vLLM batches, expiry and plans) against the
 * newest one it has taken. One more than LR_PARAM_CLOCK_SKEW_S (60 s)
 * ahead of it, or past LR_ROUTER_MAX_TIME_NS, is refused with LR_ERANGE
 * and the call changes nothing: a wall-clock value among monotonic ones,
 * or 2^63, can neither make every honest scrape after it look old nor
 * learn a route that never expires. A successful call's timestamp becomes
 * the newest (timestamps behind it are fine: hosts' threads race). When
 * the host's clock really jumps (an idle gap longer than the skew, a
 * restarted clock), the first call after the jump is refused and the next
 * one that agrees with it (not earlier, within the skew) is taken: retry
 * a refused call, or call lr_router_expire() from a timer more often than
 * the skew. A stray value between honest ones never moves the clock.
 * Queries (lr_router_candidates, lr_router_rebalance_plan) are judged the
 * same way but never move it.
 *
 * Thread safety: every lr_router_* call on one router may be made from
 * many threads at once (lr_router_destroy excepted). route() decides
 * under a shared lock, so routes from several threads run in parallel,
 * learns the prompt under the index's own lock (one learn at a time,
 * beside other routes' decisions) and takes the exclusive lock only to
 * record its choice; every call that changes the router takes it
 * exclusively (with glibc, waiting writers go first). The allocator may be
 * called from several threads at once. The router starts no thread.
 * lr_router_learn_step() trains outside the lock, so route() never waits behind
 * training.
 *
 * Missing or stale telemetry: an instance with no scrape counts as
 * running = waiting = 0 and kv_use = 0; a scrape older than
 * LR_PARAM_STATS_MAX_AGE_S is ignored the same way. An instance with no RTT
 * probe counts as the initial RTT it was added with (0 if none). The
 * router's own counters (in flight, queued, prefill tokens) are never
 * stale.
 *
 * Example:
 *   lr_router_options o; lr_router_options_init(&o);
 *   o.policy = LR_POLICY_DUALMAP;
 *   lr_router *r; lr_router_create(&o, &r);
 *   lr_instance_spec s; lr_instance_spec_init(&s); s.name = "10.0.0.5:8000";
 *   uint32_t id; lr_router_add_instance(r, &s, &id);
 *   lr_request q; lr_request_init(&q);
 *   q.id = 1; q.tokens = toks; q.n_tokens = n; q.now_ns = now;
 *   lr_decision d; lr_decision_init(&d);
 *   if (lr_router_route(r, &q, &d) == LR_OK) send_to(d.instance);
 *   ... lr_router_first_token(r, 1, t1); lr_router_complete(r, 1, 120, t2);
 */
#ifndef LIBROUTE_LR_ROUTER_H
#define LIBROUTE_LR_ROUTER_H

#include "lr_common.h"
#include "lr_cost.h"
#include "lr_index.h"
#include "lr_learner.h"
#include "lr_load.h"
#include "lr_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_router lr_router; /* opaque */

/* Policies, reasons, parameters, candidate tables and decisions are in
 * lr_policy.h: route() gathers a table and calls lr_policy_decide(). */

/* ---- create ------------------------------------------------------------------ */

/** Options for lr_router_create(). Initialize with lr_router_options_init().
 * @since 0.1 */
typedef struct lr_router_options {
    size_t struct_size;
    /** NULL: libc. Every part of the router uses it. */
    const lr_allocator *allocator;
    /** Seeds every random choice (random, sampling, tuners). */
    uint64_t seed;
    /** Initial policy; default LR_POLICY_PREFIX_CACHE_AND_LOAD. */
    int32_t policy;
    /** Instances at once, 1..LR_ROUTER_MAX_INSTANCES; default 1024. */
    uint32_t max_instances;
    /** Requests in flight at once; default 65536 (see lr_load_options). */
    uint32_t max_requests;
    /** Prefix index block size in tokens (default 16); see
     * lr_index_options. */
    uint32_t block_tokens;
    /** Prefix index capacity in blocks (default 1M) and route TTL (default
     * 1 h). See lr_index_options. */
    uint64_t index_capacity_blocks;
    uint64_t index_ttl_ns;
    /** Virtual nodes per instance on the ring; default 160. */
    uint32_t ring_vnodes;
    /** Reserved; must be 0 (LR_EINVAL otherwise). */
    uint32_t flags;
    /** Lodestar's learner (buffers, schedule, network); NULL: the
     * defaults. n_features is the router's (LR_LODESTAR_FEATURES; any other
     * non-zero value is LR_EINVAL); allocator and seed are the router's.
     * Copied; the learner is made when LR_POLICY_LODESTAR is first chosen. */
    const lr_learner_options *learner;
    /* v1 ends here */
    /** Keys the router's in-process hash tables (prefix index, request
     * ids, DualMap's hot prefixes, names): the defence against
     * hash flooding. 0 (the default): a random one from the operating
     * system (getrandom), drawn at create. Independent of `seed`, so a
     * host that fixes `seed` for reproducible decisions does not thereby
     * let clients aim keys at the tables; decisions never depend on it.
     * Set it only to reproduce a table layout. @since 0.2 */
    uint64_t hash_seed;
    /** This gateway replica's id: stamped on its deltas and gauges, so
     * that peers tell replicas apart, never apply one delta twice, and
     * ignore their own messages echoed back by the bus. 0: none (deltas
     * then go out anonymous, gauges cannot be exported). Give each
     * process incarnation its own id (a random 64-bit number at start).
     * @since 0.2 */
    uint64_t replica_id;
    /** REMOTE routes (from other replicas' deltas) unused this long
     * expire; 0: index_ttl_ns. See lr_index_options. @since 0.2 */
    uint64_t remote_ttl_ns;
    /** Other replicas' load gauges count this long after they arrive
     * (router's clock); default 2 s. @since 0.2 */
    uint64_t gauge_ttl_ns;
    /** Other replicas tracked at once (their delta watermarks and
     * gauges), 1..LR_ROUTER_MAX_PEERS; default 64. @since 0.2 */
    uint32_t max_peers;
    /** The index's lr_eviction; default LR_EVICT_REMOTE_FIRST. Replicas
     * that import each other's deltas route better with LR_EVICT_LRU
     * (docs/scale.md). @since 0.2 */
    int32_t index_eviction;
    /* v2 ends here */
    /** The waiting queue (see "Waiting"): requests held at once,
     * 1..LR_ROUTER_MAX_WAITING (default 4096); their prompt tokens held
     * at once (default 16M, 64 MiB; 1..2^40); tenants whose fair share is
     * kept at once, 1..LR_ROUTER_MAX_TENANTS (default 1024). Taken at the
     * first request that may wait, never before. @since 0.3 */
    uint32_t queue_capacity;
    uint32_t queue_tenants;
    uint64_t queue_tokens;
    /* v3 ends here */
    /** Placement marks: how many routed prompts' instances the router
     * remembers past its index (0, the default: none; at most
     * LR_ROUTER_MAX_MARKS). A mark is 24 bytes, where the index keeps
     * about 12 a block of every prompt, so a router whose index is
     * smaller than what its fleet caches still sends a conversation's
     * next turn where its history is. Size it to what the fleet's caches
     * hold: their KV blocks over the blocks a request adds (uncached
     * prompt and output); more marks than that name prefixes the
     * engines have evicted. Made at create; not kept in snapshots.
     * docs/router.md, "Placement marks". @since 0.3 */
    uint64_t marks;
    /* v4 ends here */
} lr_router_options;

#define LR_ROUTER_OPTIONS_SIZE_V1 \
    (offsetof(lr_router_options, learner) + sizeof(void *))
#define LR_ROUTER_OPTIONS_SIZE_V2 \
    (offsetof(lr_router_options, index_eviction) + sizeof(int32_t))
#define LR_ROUTER_OPTIONS_SIZE_V3 \
    (offsetof(lr_router_options, queue_tokens) + sizeof(uint64_t))
#define LR_ROUTER_OPTIONS_SIZE_V4 \
    (offsetof(lr_router_options, marks) + sizeof(uint64_t))
/** Largest lr_router_options.marks. @since 0.3 */
#define LR_ROUTER_MAX_MARKS (1ull << 32)
/** Bounds of the waiting queue's options. @since 0.3 */
#define LR_ROUTER_MAX_WAITING (1u << 24)
#define LR_ROUTER_MAX_TENANTS (1u << 20)
#define LR_ROUTER_MAX_QUEUE_TOKENS (1ull << 40)
/** Priority bands of the waiting queue: lr_request.urgency is 0 .. this
 * - 1. @since 0.3 */
#define LR_ROUTER_URGENCIES 8u
/** Largest lr_router_options.max_peers. @since 0.2 */
#define LR_ROUTER_MAX_PEERS 4096u
#define LR_ROUTER_MAX_INSTANCES 65534u
/** Latest timestamp the router takes: LR_MAX_TIME_NS (2^60 ns, 36 years of
 * a monotonic clock; 2^62 in 0.2, which let a wall clock in nanoseconds
 * through); later ones are LR_ERANGE. @since 0.2 */
#define LR_ROUTER_MAX_TIME_NS LR_MAX_TIME_NS

#ifndef __cplusplus
#define LR_ROUTER_OPTIONS_INIT                                            \
    {                                                                     \
        .struct_size = sizeof(lr_router_options),                         \
        .policy = LR_POLICY_PREFIX_CACHE_AND_LOAD, .max_instances = 1024, \
        .max_requests = 65536, .block_tokens = 16,                        \
        .index_capacity_blocks = 1u << 20,                                \
        .index_ttl_ns = 3600ull * 1000000000ull, .ring_vnodes = 160,      \
        .gauge_ttl_ns = 2000000000ull, .max_peers = 64,                   \
        .queue_capacity = 4096, .queue_tenants = 1024,                    \
        .queue_tokens = 1ull << 24                                        \
    }
#endif

/** Zero the caller's `size` bytes of `opt`, set struct_size = size and
 * the defaults. Use the lr_router_options_init() macro, which passes
 * sizeof *opt as the caller's compiler sees it (every lr_X_init() is such
 * a macro over an exported lr_X_init_sized()). @since 0.2 */
LR_API void lr_router_options_init_sized(lr_router_options *opt, size_t size);
#define lr_router_options_init(o) lr_router_options_init_sized((o), sizeof *(o))

/** Create a router. NULL options mean the defaults.
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_router_create(const lr_router_options *opt,
                                  lr_router **out);

/** Destroy a router. NULL is a no-op. Not concurrently with other calls.
 * @since 0.1 */
LR_API void lr_router_destroy(lr_router *router);

/** Switch policy. State the policies share (index, load, ring) is kept;
 * so is each policy's own state (round-robin cursor, hotness window,
 * tuner, Lodestar's learner and samples, adaptive's calibration), made
 * the first time a policy that needs it is chosen.
 * @param policy  an lr_policy value.
 * @return LR_OK; LR_EINVAL (NULL, unknown policy); LR_ENOMEM (making the
 *   new policy's state failed; the old policy stays).
 * @since 0.1 */
LR_API lr_status lr_router_set_policy(lr_router *router, int32_t policy);

/** The policy in use; -1 for NULL. @since 0.1 */
LR_API int32_t lr_router_policy(const lr_router *router);

/* ---- instances --------------------------------------------------------------- */

/** An instance to add. @since 0.1 */
typedef struct lr_instance_spec {
    size_t struct_size;
    /** Host name (for example "10.0.0.5:8000"), 1..255 bytes; copied. It
     * places the instance on the ring, so every gateway replica computes
     * the same candidates. */
    const char *name;
    /** Class (GPU model), 0..LR_LOAD_MAX_CLASSES-1; see lr_class_spec. */
    uint32_t instance_class;
    /** 1 (default) if the engine caches prefixes, 0 if not. */
    int32_t prefix_caching;
    /** Initial RTT until probes arrive; 0 if unknown. */
    uint64_t rtt_ns;
    /* v1 ends here */
    /** The models it serves (vLLM's served model names: a base model and
     * its aliases), n_models names of 1..LR_ROUTER_MAX_NAME bytes each,
     * copied; at most LR_ROUTER_MAX_MODELS. 0 models: it serves whatever
     * a request names (the only kind of instance before 0.3). A request
     * that names a model is routed only to the instances that serve it.
     * @since 0.3 */
    const char *const *models;
    uint32_t n_models;
    /** Its LoRA adapter slots (vLLM's --max-loras): how many adapters it
     * holds at once. 0: not known, adapters load without a known bound.
     * @since 0.3 */
    uint32_t max_adapters;
    /* v2 ends here */
    /** Its lr_role in a disaggregated fleet: LR_ROLE_BOTH (0: every
     * instance before 0.3), LR_ROLE_PREFILL or LR_ROLE_DECODE. @since
     * 0.3 */
    int32_t role;
    /** Where it runs, as the host numbers its nodes, racks and regions
     * (0: unknown): two instances with the same nonzero node move KV at
     * LR_PARAM_KV_GBPS_NODE, the same rack at _RACK, the same region at
     * _REGION, else at _WAN; an unknown one compares as different from
     * everything but counts as the same region. @since 0.3 */
    uint32_t node, rack, region;
    /* v3 ends here */
} lr_instance_spec;

#define LR_INSTANCE_SPEC_SIZE_V1 (offsetof(lr_instance_spec, rtt_ns) + 8)
#define LR_INSTANCE_SPEC_SIZE_V2 (offsetof(lr_instance_spec, max_adapters) + 4)
#define LR_INSTANCE_SPEC_SIZE_V3 (offsetof(lr_instance_spec, region) + 4)
/** Bytes in a model or adapter name, and models one instance serves.
 * @since 0.3 */
#define LR_ROUTER_MAX_NAME 255u
#define LR_ROUTER_MAX_MODELS 16u
/** Adapters whose residency the router follows per instance: at most
 * this many slots count (max_adapters above it is this). @since 0.3 */
#define LR_ROUTER_MAX_ADAPTERS 64u

#ifndef __cplusplus
#define LR_INSTANCE_SPEC_INIT \
    { .struct_size = sizeof(lr_instance_spec), .prefix_caching = 1 }
#endif

/** Zero the caller's `size` bytes of `s`, set struct_size = size and
 * prefix_caching = 1. Use the lr_instance_spec_init() macro. @since 0.2 */
LR_API void lr_instance_spec_init_sized(lr_instance_spec *s, size_t size);
#define lr_instance_spec_init(s) lr_instance_spec_init_sized((s), sizeof *(s))

/** Add an instance; it receives routes at once. Ids are small integers
 * the router assigns; an id is reused only after its instance is removed.
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ERANGE (rtt_ns above
 *   LR_LOAD_MAX_RTT_NS); LR_EEXIST (name); LR_ELIMIT (max_instances);
 *   LR_ENOMEM. On failure nothing changes. @since 0.1 */
LR_API lr_status lr_router_add_instance(lr_router *router,
                                        const lr_instance_spec *spec,
                                        uint32_t *id);

/** Id of an instance by name. @return LR_OK; LR_EINVAL; LR_ENOENT.
 * @since 0.1 */
LR_API lr_status lr_router_find_instance(const lr_router *router,
                                         const char *name, uint32_t *id);

/** Drain (1) or undrain (0) an instance: a draining instance gets no new
 * routes; its requests in flight and its cached prefixes stay.
 * @return LR_OK; LR_EINVAL; LR_ENOENT; LR_ENOMEM (undraining puts the
 *   instance back on the ring; it stays draining). @since 0.1 */
LR_API lr_status lr_router_drain_instance(lr_router *router, uint32_t id,
                                          int32_t draining);

/** Remove an instance: its routes, its load and its requests in flight
 * (later events for them get LR_ENOENT). Never LR_ENOMEM.
 * @return LR_OK; LR_EINVAL; LR_ENOENT. @since 0.1 */
LR_API lr_status lr_router_remove_instance(lr_router *router, uint32_t id);

/** Instances added and not removed (draining ones included). 0 for NULL.
 * @since 0.1 */
LR_API uint32_t lr_router_instance_count(const lr_router *router);

/** Per-class engine speed, for the policies that predict time (min-ttft,
 * preble, dualmap). @since 0.1 */
typedef struct lr_class_spec {
    size_t struct_size;
    /** Prefill throughput in tokens/s, > 0; default 8000. */
    double prefill_tokens_per_s;
    /* v1 ends here */
} lr_class_spec;

#define LR_CLASS_SPEC_SIZE_V1 \
    (offsetof(lr_class_spec, prefill_tokens_per_s) + 8)

#ifndef __cplusplus
#define LR_CLASS_SPEC_INIT \
    { .struct_size = sizeof(lr_class_spec), .prefill_tokens_per_s = 8000 }
#endif

/** Zero the caller's `size` bytes of `s`, set struct_size = size and the
 * default rate. Use the lr_class_spec_init() macro. @since 0.2 */
LR_API void lr_class_spec_init_sized(lr_class_spec *s, size_t size);
#define lr_class_spec_init(s) lr_class_spec_init_sized((s), sizeof *(s))

/** Set a class's speed.
 * @return LR_OK; LR_EINVAL (NULL, instance_class >= LR_LOAD_MAX_CLASSES,
 *   a NaN rate: not a number is bad input, as in lr_router_set_param);
 *   LR_EVERSION; LR_ERANGE (a rate, infinities included, not in
 *   [1, 1e9]). @since 0.1 */
LR_API lr_status lr_router_set_class(lr_router *router, uint32_t instance_class,
                                     const lr_class_spec *spec);

/* ---- telemetry ------------------------------------------------------------------ */

/** Scraped engine metrics; see lr_load_set_stats. Also LR_ERANGE (@since
 * 0.2): scraped_ns refused by the clock (see "Clock"); nothing changes.
 * @since 0.1 */
LR_API lr_status lr_router_set_stats(lr_router *router, uint32_t id,
                                     const lr_engine_stats *stats);

/** An RTT probe; see lr_load_observe_rtt. @since 0.1 */
LR_API lr_status lr_router_observe_rtt(lr_router *router, uint32_t id,
                                       uint64_t rtt_ns);

/** An instance's load; see lr_load_get. @since 0.1 */
LR_API lr_status lr_router_instance_load(const lr_router *router, uint32_t id,
                                         lr_load_snapshot *out);

/** An instance's LoRA adapters as its engine reports them: vLLM's
 * `vllm:lora_requests_info` gauge, whose labels running_lora_adapters and
 * waiting_lora_adapters list the adapters with requests running or
 * waiting (comma-separated there; one name per entry here) and max_lora
 * its slots. @since 0.3 */
typedef struct lr_adapter_stats {
    size_t struct_size;
    /** Adapters with requests running there: resident. Borrowed. */
    const char *const *running;
    size_t n_running;
    /** Adapters with requests waiting there (to load, or for a slot).
     * Borrowed. */
    const char *const *waiting;
    size_t n_waiting;
    /** Its slots (max_lora); 0: keep what the instance was added with. */
    uint32_t max_adapters;
    /** When the gauge was read (host clock). */
    uint64_t scraped_ns;
    /* v1 ends here */
} lr_adapter_stats;

#define LR_ADAPTER_STATS_SIZE_V1 (offsetof(lr_adapter_stats, scraped_ns) + 8)

#ifndef __cplusplus
#define LR_ADAPTER_STATS_INIT \
    { .struct_size = sizeof(lr_adapter_stats) }
#endif

/** Zero the caller's `size` bytes of `s` and set struct_size = size. Use
 * the lr_adapter_stats_init() macro. @since 0.3 */
LR_API void lr_adapter_stats_init_sized(lr_adapter_stats *s, size_t size);
#define lr_adapter_stats_init(s) lr_adapter_stats_init_sized((s), sizeof *(s))

/** Tell the router which adapters an instance holds (see "Adapters").
 * Between reports the router follows residency itself: each route of an
 * adapter's request makes the adapter resident there, the least recently
 * used idle one leaving when the slots are full; a report replaces that
 * guess with the engine's word: its running and waiting adapters are
 * resident, the router's own guesses fill the slots left.
 * @return LR_OK; LR_EINVAL (NULL, a name NULL, empty or longer than
 *   LR_ROUTER_MAX_NAME, more than LR_ROUTER_MAX_ADAPTERS names in all);
 *   LR_EVERSION; LR_ENOENT (no such instance); LR_ERANGE (scraped_ns
 *   refused by the clock); LR_ENOMEM. On failure nothing changes.
 * @since 0.3 */
LR_API lr_status lr_router_set_adapters(lr_router *router, uint32_t id,
                                        const lr_adapter_stats *stats);

/** The adapters the router believes resident on an instance now, most
 * recently used first: their name hashes (lr_name_hash()) into `hashes`
 * (capacity entries; may be NULL with capacity 0), their count in *n.
 * @return LR_OK; LR_EINVAL; LR_ENOENT; LR_EBUFSIZE (capacity short: *n
 *   says how many, nothing written). @since 0.3 */
LR_API lr_status lr_router_adapters(const lr_router *router, uint32_t id,
                                    uint64_t *hashes, size_t capacity,
                                    size_t *n);

/* ---- route ------------------------------------------------------------------------ */

/** A request to route. Everything is borrowed for the call. @since 0.1 */
typedef struct lr_request {
    size_t struct_size;
    /** The host's id, unique among requests in flight. */
    uint64_t id;
    /** Prompt tokens, at most LR_INDEX_MAX_TOKENS. */
    const uint32_t *tokens;
    size_t n_tokens;
    /** Message ends (token offsets, ascending), learned as routes. */
    const uint32_t *boundaries;
    size_t n_boundaries;
    /** Enters every prefix key: tenants never share cached prefixes. A
     * request sent to vLLM with a cache_salt is routed with tenant_salt =
     * lr_name_hash(cache_salt, strlen(cache_salt)), so it matches the
     * blocks the engine's KV events store under that salt. */
    uint64_t tenant_salt;
    /** Session id for session-affinity; used when has_session. */
    uint64_t session;
    int32_t has_session;
    /** Expected output tokens; 0: unknown (LR_PARAM_DEFAULT_OUTPUT_TOKENS). */
    uint32_t expected_output_tokens;
    /** LR_ROUTE_* flags. */
    uint32_t flags;
    /** Host time now. */
    uint64_t now_ns;
    /* v1 ends here */
    /** The tenant whose fair share of the waiting queue this request
     * counts against (any value; 0 is a tenant like any other). Unlike
     * tenant_salt it does not separate cached prefixes. @since 0.3 */
    uint64_t tenant;
    /** Its TTFT deadline on the host's clock: still waiting then, it
     * comes back from lr_router_dispatch() as LR_EEXPIRED. 0: none.
     * @since 0.3 */
    uint64_t deadline_ns;
    /** Its priority band in the waiting queue, as RFC 9218's urgency: 0
     * (most urgent) .. LR_ROUTER_URGENCIES - 1. @since 0.3 */
    uint32_t urgency;
    /* v2 ends here */
    /** The model it names, NUL-terminated, at most LR_ROUTER_MAX_NAME
     * bytes; NULL or "": any instance. Only the instances that serve it
     * (lr_instance_spec.models) are candidates. @since 0.3 */
    const char *model;
    /** The LoRA adapter it runs under, NUL-terminated, at most
     * LR_ROUTER_MAX_NAME bytes; NULL or "": the base model. The adapter
     * enters every block key (lr_adapter_salt()): its cached prefixes
     * never match the base model's or another adapter's. @since 0.3 */
    const char *adapter;
    /* v3 ends here */
    /** Its multimodal inputs, n_mm of them, as lr_prompt.mm: their keys
     * enter the blocks they overlap, as vLLM's do, so a request matches
     * the blocks the engine's KV events store for the same inputs.
     * @since 0.3 */
    const lr_mm_input *mm;
    size_t n_mm;
    /* v4 ends here */
} lr_request;

#define LR_REQUEST_SIZE_V1 (offsetof(lr_request, now_ns) + 8)
#define LR_REQUEST_SIZE_V2 (offsetof(lr_request, urgency) + 4)
#define LR_REQUEST_SIZE_V3 (offsetof(lr_request, adapter) + sizeof(void *))
#define LR_REQUEST_SIZE_V4 (offsetof(lr_request, n_mm) + sizeof(size_t))

/** Only ask: record no dispatch, learn nothing, touch no recency, advance
 * no cursor or tuner (random draws still advance the generator). */
#define LR_ROUTE_DRY_RUN 1u
/** Fill lr_decision.scores with every candidate's score. */
#define LR_ROUTE_SCORES 2u
/** Record the dispatch but do not learn the prompt into the index (a host
 * that feeds KV events instead). */
#define LR_ROUTE_NO_LEARN 4u
/** The request may wait in the router's queue (see "Waiting"). @since 0.3 */
#define LR_ROUTE_MAY_WAIT 8u
/** Refuse the request (LR_EBUSY) when it would have to wait: the fleet is
 * saturated, or requests at least as urgent wait. @since 0.3 */
#define LR_ROUTE_SHEDDABLE 16u

#ifndef __cplusplus
#define LR_REQUEST_INIT \
    { .struct_size = sizeof(lr_request) }
#endif

/** Zero the caller's `size` bytes of `q` and set struct_size = size. Use
 * the lr_request_init() macro. @since 0.2 */
LR_API void lr_request_init_sized(lr_request *q, size_t size);
#define lr_request_init(q) lr_request_init_sized((q), sizeof *(q))

/** Choose an instance for a request and (unless LR_ROUTE_DRY_RUN) record
 * the dispatch: the request is in flight there, and its prompt is learned
 * as cached there at its boundaries (unless LR_ROUTE_NO_LEARN or the
 * instance does not cache prefixes). The pipeline: hash the prompt's
 * blocks; match them against the index (policies that look at the
 * cache); gather one lr_candidate row per routable instance, in id
 * order, and rank the rows by the policy's ring key; draw a seed from
 * the router's generator and call lr_policy_decide(); record. The
 * decision's seed and lr_router_candidates()' table replay it.
 * @return LR_OK; LR_EINVAL (NULL, absurd length, bad boundaries);
 *   LR_EVERSION; LR_ENOENT (the request names a model no instance
 *   serves; @since 0.3); LR_ESTATE (no routable instance, or none of its
 *   model's); LR_EEXIST (id in
 *   flight); LR_ELIMIT (max_requests in flight); LR_EBUFSIZE (scores
 *   buffer short: n_scores says how many, nothing recorded); LR_ENOMEM;
 *   LR_ERANGE (now_ns refused by the clock, see "Clock"; judged after the
 *   request's own checks and before the router's state; @since 0.2);
 *   LR_EBUSY (LR_ROUTE_SHEDDABLE and it would wait; @since 0.3);
 *   LR_ELIMIT also when the waiting queue is full (@since 0.3).
 *   With LR_ROUTE_MAY_WAIT, LR_OK with decision->instance
 *   LR_INSTANCE_NONE and reason LR_REASON_WAITING: the request waits
 *   ("Waiting"); the decision's other fields are zero, cost NaN.
 *   LR_ROUTE_DRY_RUN never waits nor sheds: it answers what route() would
 *   choose if the request went now.
 *   On failure nothing is recorded. Once the request is valid (the checks
 *   up to LR_ELIMIT passed), route() first drops the routes older than the
 *   index TTL at now_ns, as lr_router_expire() does; that housekeeping
 *   stays even when a later step fails.
 * @since 0.1 */
LR_API lr_status lr_router_route(lr_router *router, const lr_request *request,
                                 lr_decision *decision);

/** The candidate table route() would decide on for this request now: one
 * row per routable instance, in instance id order (in a fleet with
 * prefill instances, those that decode first), with the cached tokens
 * the policy would see and the ring ranks of its key. Changes nothing
 * (no expiry, no recency, no draw).
 * @param rows      caller buffer of `capacity` rows of row_size bytes
 *                  (row_size >= LR_CANDIDATE_SIZE_V1); may be NULL when
 *                  capacity is 0.
 * @param n_rows    out: rows written, or needed with LR_EBUFSIZE.
 * @return LR_OK; LR_EINVAL (as route(), or row_size too small);
 *   LR_EVERSION; LR_ESTATE (no routable instance); LR_EBUFSIZE;
 *   LR_ENOMEM (the prompt's keys did not fit the scratch buffer);
 *   LR_ERANGE (now_ns refused by the clock; @since 0.2).
 * @since 0.2 */
LR_API lr_status lr_router_candidates(lr_router *router,
                                      const lr_request *request,
                                      lr_candidate *rows, size_t capacity,
                                      size_t row_size, size_t *n_rows);

/** The rest of what route() hands the policy for this request now: the
 * request's facts and the parameters in service (GORGO's weights as its
 * tuner has them in service, which during a trial differ from what
 * lr_router_get_param() reports) and the round-robin cursor. With
 * lr_router_candidates()' table, a decision's seed and, for Lodestar, the
 * model lr_router_learner_save() exports, lr_policy_decide() replays
 * route().
 * @param in        out: prompt_tokens, expected_output_tokens (the
 *                  default applied), block_tokens, last_instance,
 *                  params = `params` and n_params; seed 0; model NULL.
 * @param params    caller buffer of `capacity` doubles, indexed by lr_param.
 * @return LR_OK; LR_EINVAL (NULL, a bad request as route() checks it);
 *   LR_EVERSION; LR_EBUFSIZE (capacity below lr_param_count(): nothing
 *   written but in->n_params, the count needed). Changes nothing.
 * @since 0.2 */
LR_API lr_status lr_router_policy_input(lr_router *router,
                                        const lr_request *request,
                                        lr_policy_input *in, double *params,
                                        size_t capacity);

/* ---- lifecycle ------------------------------------------------------------------------ */

/** The prefill leg of a split request ended (lr_decision.prefill_instance):
 * its KV has moved to the decode instance (vLLM: the prefill request
 * returned its kv_transfer_params). The prefill instance's load drops
 * it, and the prefill's time feeds the policies that learn from it. A
 * request that was not split, or whose leg ended before: a no-op. A
 * first token ends the leg too.
 * @return LR_OK; LR_EINVAL; LR_ENOENT; LR_ERANGE (now_ns refused by the
 *   clock). @since 0.3 */
LR_API lr_status lr_router_prefill_done(lr_router *router, uint64_t request_id,
                                        uint64_t now_ns);

/** First token of a request: it leaves its instance's queue. The TTFT
 * (now - route time) feeds the policies that learn from it (GORGO's
 * tuner, Lodestar's samples, adaptive's calibration). A repeat is a no-op.
 * @return LR_OK; LR_EINVAL; LR_ENOENT;
 *   LR_ERANGE (now_ns refused by the clock, see "Clock"; judged
 *   first; @since 0.2). @since 0.1 */
LR_API lr_status lr_router_first_token(lr_router *router, uint64_t request_id,
                                       uint64_t now_ns);

/** A request finished with `output_tokens` generated.
 * @return LR_OK; LR_EINVAL; LR_ENOENT;
 *   LR_ERANGE (now_ns refused by the clock, see "Clock"; judged
 *   first; @since 0.2). @since 0.1 */
LR_API lr_status lr_router_complete(lr_router *router, uint64_t request_id,
                                    uint32_t output_tokens, uint64_t now_ns);

/** The engine serving a request reports how many of its prompt tokens it
 * reused from its cache (llama.cpp's `timings.cache_n`, vLLM's and
 * SGLang's `usage.prompt_tokens_details.cached_tokens`), counted in the
 * router's tokens: a host whose engine tokenizes differently scales it to
 * the prompt it routed. Call it once, between route() and the request's
 * end. The router compares it with the hit it expected there
 * (lr_decision.cached_tokens) and keeps, per instance, the share of
 * expected hits its engine did not deliver: the rows' cached_lost, which
 * adaptive discounts, so an engine whose own cache policy drops what the
 * router thinks it keeps stops being credited with it. Only a request's
 * first report counts; a later one changes nothing and returns LR_OK.
 * Not kept in snapshots: a restored router learns it again.
 * @param cached_tokens  at most the request's prompt tokens.
 * @return LR_OK; LR_EINVAL (NULL, more than the prompt); LR_ENOENT (not
 *   in flight); LR_ERANGE (now_ns refused by the clock, see "Clock").
 * @since 0.3 */
LR_API lr_status lr_router_observe_cached(lr_router *router,
                                          uint64_t request_id,
                                          uint32_t cached_tokens,
                                          uint64_t now_ns);

/** A request failed or was cancelled. A request waiting in the queue
 * (LR_ROUTE_MAY_WAIT) is withdrawn: it is never dispatched (@since 0.3).
 * One that another thread's lr_router_dispatch() let out a moment before
 * is failed in flight instead, with LR_OK too: a host that withdraws a
 * request ignores a dispatch entry for it that it has not handled yet.
 * @return LR_OK; LR_EINVAL; LR_ENOENT;
 *   LR_ERANGE (now_ns refused by the clock, see "Clock"; judged
 *   first; @since 0.2). @since 0.1 */
LR_API lr_status lr_router_fail(lr_router *router, uint64_t request_id,
                                uint64_t now_ns);

/* ---- waiting: admission, priorities, fair share ------------------------------------------ */

/* Waiting (@since 0.3). By default route() sends every request at once,
 * even to a saturated fleet, where it waits in an engine's FIFO behind
 * whatever came first. A request routed with LR_ROUTE_MAY_WAIT may be
 * held in the router instead, and let out later, most urgent first:
 *
 *   route(q | MAY_WAIT)  -> LR_OK, instance LR_INSTANCE_NONE,
 *                           reason LR_REASON_WAITING: the router holds it
 *   lr_router_dispatch(now) whenever capacity may have freed (a first
 *                           token, a completion, a scrape, a timer)
 *                        -> the requests to send now, each routed with the
 *                           state of that moment (and recorded in flight,
 *                           as route() records), and those whose deadline
 *                           passed (LR_EEXPIRED)
 *   lr_router_fail(id)   -> withdraws a waiting request (cancelled)
 *
 * Saturation. An instance is saturated when LR_PARAM_SATURATION_QUEUE of
 * the router's requests there wait for their first token, or their
 * uncached prompt tokens would take LR_PARAM_SATURATION_PREFILL_S plus
 * the instance's probed RTT at its class's prefill rate, or its fresh scrape
 * (lr_engine_stats) reports LR_PARAM_SATURATION_QUEUE waiting or at least
 * LR_PARAM_SATURATION_KV of its KV cache in use; a scrape older than
 * LR_PARAM_STATS_MAX_AGE_S counts as saturated while the router has a
 * request in flight there (so an instance whose scrapes stopped takes one
 * request at a time). An instance never scraped is judged by the router's
 * counters alone. The fleet is saturated when every routable instance
 * is, prefill instances (LR_ROLE_PREFILL) aside: a request always needs a
 * decode instance. Draining instances do not count.
 *
 * A MAY_WAIT request waits when the fleet is saturated or requests at
 * least as urgent wait already (it never overtakes them); otherwise it is
 * routed at once, as any request. A request without the flag is routed
 * at once always. With LR_ROUTE_SHEDDABLE, a request that would wait is
 * refused with LR_EBUSY instead and nothing is recorded.
 *
 * Order. Waiting requests go out by urgency (band 0 first); within a
 * band by fair share between tenants, after the Virtual Token Counter
 * (Sheng et al., OSDI 2024): each request let out charges its tenant
 * LR_PARAM_FAIR_INPUT_WEIGHT * prompt tokens + LR_PARAM_FAIR_OUTPUT_WEIGHT
 * * expected output tokens, and the tenant charged least goes next; a
 * tenant that starts waiting is lifted to the least counter of those
 * waiting, so idle time is not credit; within a tenant, by arrival.
 * dispatch lets requests out while the fleet is not saturated, checking
 * again after each.
 *
 * Every request that waits leaves the queue exactly one way: dispatched
 * (routed), expired (LR_EEXPIRED from dispatch), cancelled
 * (lr_router_fail), or, when its routing fails for good at dispatch (its
 * id came in flight meanwhile: LR_EEXIST), returned with that status.
 * The queue holds copies of the waiting requests' tokens and boundaries,
 * within lr_router_options.queue_capacity requests and queue_tokens
 * tokens: past either, route() answers LR_ELIMIT; past half of either, so
 * does it for a tenant that holds an even share of the queue among the
 * tenants waiting (it among them), so that one tenant's flood leaves the
 * others room. No thread, no clock: nothing happens between the host's
 * calls. A snapshot does not carry the queue (its requests are the
 * host's open connections): lr_router_restore() brings none back and
 * leaves the router's own as they are, and lr_router_destroy() drops the
 * waiting requests. Routes that may wait take the queue's lock, one at a
 * time; routes without the flag never touch it. */

/** One request lr_router_dispatch() let out of the queue. @since 0.3 */
typedef struct lr_dispatched {
    /** The request's id. */
    uint64_t request_id;
    /** LR_OK: routed and recorded in flight at `instance`; send it now.
     * LR_EEXPIRED: its deadline passed while it waited; answer it (429,
     * 504). LR_EEXIST: its id came in flight meanwhile; it is dropped. */
    int32_t status;
    /** The instance (LR_INSTANCE_NONE unless status is LR_OK). */
    uint32_t instance;
    /** The decision's reason, cached tokens and cost, as lr_decision's. */
    int32_t reason;
    uint32_t cached_tokens;
    double cost;
    /** How long it waited: now - its route()'s now_ns. */
    uint64_t waited_ns;
    /** Its urgency and tenant, as routed. */
    uint32_t urgency;
    uint64_t tenant;
    /* v1 ends here */
    /** The decision's prefill leg, as lr_decision's: the instance that
     * prefills it (LR_INSTANCE_NONE: `instance` does both), its reason
     * (-1: none), its cached tokens and the KV transfer's expected
     * seconds. @since 0.3 */
    uint32_t prefill_instance;
    int32_t prefill_reason;
    uint32_t prefill_cached_tokens;
    uint32_t reserved;
    double transfer_s;
} lr_dispatched;

/** Size of the first 0.3 lr_dispatched: the least stride a caller may
 * give. @since 0.3 */
#define LR_DISPATCHED_SIZE_V1 (offsetof(lr_dispatched, tenant) + 8)
/** ... with the prefill leg. @since 0.3 */
#define LR_DISPATCHED_SIZE_V2 (offsetof(lr_dispatched, transfer_s) + 8)

/** Let waiting requests out: first every one whose deadline is at or
 * before now_ns (LR_EEXPIRED; earliest deadline first), then, while the
 * fleet is not saturated, the next in order, routed now as route() would
 * route it (the router's policy, the state of now; LR_ROUTE_DRY_RUN
 * aside, its flags kept). Stops when `capacity` entries are written:
 * call again while it fills them all.
 * @param out       caller buffer of `capacity` entries, item_size bytes
 *                  apart (the caller's sizeof(lr_dispatched), at least
 *                  LR_DISPATCHED_SIZE_V1); may be NULL when capacity is 0.
 * @param n_out     out: entries written; each entry's request has left
 *                  the queue.
 * @return LR_OK; LR_EINVAL (NULL, item_size too small); LR_ERANGE (now_ns
 *   refused by the clock, see "Clock"; nothing changes); LR_ENOMEM (a
 *   route's learn failed: that request stays waiting, the entries before
 *   it stand). No routable instance is not an error: nothing is sent.
 * @since 0.3 */
LR_API lr_status lr_router_dispatch(lr_router *router, uint64_t now_ns,
                                    lr_dispatched *out, size_t capacity,
                                    size_t item_size, size_t *n_out);

/** Whether the fleet is saturated now (1) or not (0), as route() and
 * dispatch judge it ("Waiting"); 1 with no routable instance.
 * @return LR_OK; LR_EINVAL; LR_ERANGE (now_ns refused by the clock; a
 *   query: it never moves it). @since 0.3 */
LR_API lr_status lr_router_saturated(lr_router *router, uint64_t now_ns,
                                     int32_t *saturated);

/* ---- rebalancing (DualMap) -------------------------------------------------------------- */

/** One proposed move of a queued request. @since 0.1 */
typedef struct lr_move {
    uint64_t request_id;
    uint32_t from;
    uint32_t to;
    /** Expected TTFT saved, seconds (> 0). */
    double benefit_s;
} lr_move;

/** Plan moves of queued requests off overloaded instances (expected TTFT
 * above the SLO) to their other candidate, where the expected TTFT there
 * is below the SLO and lower than here, by descending benefit, until each
 * source meets the SLO. The plan changes nothing; the host carries moves
 * out and reports each with lr_router_move(). Works for any policy; only
 * requests with an alternative (dualmap and consistent-hash record one)
 * can move.
 * @param moves      caller buffer of `capacity` entries, move_size bytes
 *                   apart (the caller's sizeof(lr_move), at least the 0.1
 *                   size); *n_moves is set to the moves written.
 * @return LR_OK; LR_EINVAL (NULL, move_size too small); LR_ERANGE (now_ns
 *   refused by the clock; a query: it never moves it). Never allocates.
 * @since 0.2 (0.1 had no move_size) */
LR_API lr_status lr_router_rebalance_plan(lr_router *router, uint64_t now_ns,
                                          lr_move *moves, size_t capacity,
                                          size_t move_size, size_t *n_moves);

/** Record that a queued request now runs on `to` (decodes there, when it
 * was split: its prefill leg stays).
 * @return LR_OK; LR_EINVAL (`to` holds its prefill leg); LR_ENOENT;
 *   LR_ESTATE (not queued, `to` is draining, does not serve the request's
 *   model or is a prefill instance, which decodes nothing: @since 0.3).
 *   @since 0.1 */
LR_API lr_status lr_router_move(lr_router *router, uint64_t request_id,
                                uint32_t to);

/* ---- parameters ------------------------------------------------------------------------- */

/** Bounds and default of a parameter (lr_param_bounds). @since 0.1 */
LR_API LR_DEPRECATED("use lr_param_bounds") lr_bounds
    lr_router_param_bounds(int32_t key);

/** Set a parameter. Out of bounds or NaN is rejected, never clamped.
 * @return LR_OK; LR_EINVAL (NULL, NaN, a fraction for an integer key);
 *   LR_ENOTSUP (unknown key); LR_ERANGE; LR_ENOMEM (the DualMap window
 *   keys are rebuilt; the old window stays). @since 0.1 */
LR_API lr_status lr_router_set_param(lr_router *router, int32_t key,
                                     double value);

/** Read a parameter (the tuned value for the GORGO weights).
 * @return LR_OK; LR_EINVAL; LR_ENOTSUP. @since 0.1 */
LR_API lr_status lr_router_get_param(const lr_router *router, int32_t key,
                                     double *value);

/* ---- precise mode and replicas: the router's index ------------------------------------- */

/** KV-cache events of instance `id`; see lr_index_kv_*. kv_stored also
 * returns LR_ERANGE (@since 0.2) when the clock refuses now_ns (judged
 * after the instance: LR_ENOENT first). @since 0.1 */
LR_API lr_status lr_router_kv_stored(lr_router *router, uint32_t id,
                                     const lr_kv_stored *ev, uint64_t now_ns);
LR_API lr_status lr_router_kv_removed(lr_router *router, uint32_t id,
                                      const uint64_t *block_hashes,
                                      size_t n_blocks, size_t *n_resolved);
LR_API lr_status lr_router_kv_cleared(lr_router *router, uint32_t id);
/** lr_index_kv_removed_tier() on a router's index, under the router's
 * lock: the engine dropped these blocks from tier `tier` (an lr_tier;
 * lr_router_kv_stored() takes the tier in lr_kv_stored.tier).
 * @return as lr_index_kv_removed_tier(), except that an instance the
 *   router does not have is LR_ENOENT. @since 0.3 */
LR_API lr_status lr_router_kv_removed_tier(lr_router *router, uint32_t id,
                                           int32_t tier,
                                           const uint64_t *block_hashes,
                                           size_t n_blocks, size_t *n_resolved);

/** What a batch's sequence number made of it (lr_router_vllm_batch_seq(),
 * lr_vllm.h). Stored in int32_t fields. @since 0.2 */
typedef enum lr_kv_seq {
    LR_KV_SEQ_NONE = 0,      /* no sequence number was involved */
    LR_KV_SEQ_APPLIED = 1,   /* the next one expected: applied */
    LR_KV_SEQ_FIRST = 2,     /* the first from this source (since it was
                                added or reset): applied */
    LR_KV_SEQ_DUPLICATE = 3, /* applied before (a replay): ignored */
    LR_KV_SEQ_GAP = 4,       /* batches are missing before it: not applied
                                (LR_EGAP); replay from next_seq */
    LR_KV_SEQ_RESTART = 5    /* the engine restarted (sequence back, time
                                forward): its routes were dropped, then
                                the batch applied */
} lr_kv_seq;

/** One KV-event source (an engine instance) as the router applied it.
 * @since 0.2 */
typedef struct lr_kv_source {
    size_t struct_size;
    /** 1 when a batch was applied since the instance was added or reset. */
    int32_t has_seq;
    /** 1 while batches before next_seq are missing: later batches are
     * refused (LR_EGAP) until a replay from next_seq arrives. */
    int32_t gap;
    /** The sequence number expected next: the host's "replay from". */
    uint64_t next_seq;
    /** Counters since the instance was added: batches applied, batches
     * ignored as applied before, gaps found, restarts (found or reset). */
    uint64_t batches;
    uint64_t duplicates;
    uint64_t gaps;
    uint64_t restarts;
    /* v1 ends here */
} lr_kv_source;

#define LR_KV_SOURCE_SIZE_V1 (offsetof(lr_kv_source, restarts) + 8)
#ifndef __cplusplus
#define LR_KV_SOURCE_INIT \
    { .struct_size = sizeof(lr_kv_source) }
#endif
/** Zero the caller's `size` bytes of `s` and set struct_size = size. Use
 * the lr_kv_source_init() macro. @since 0.2 */
LR_API void lr_kv_source_init_sized(lr_kv_source *s, size_t size);
#define lr_kv_source_init(s) lr_kv_source_init_sized((s), sizeof *(s))

/** Read the sequence state of instance `id`'s KV events: whether a gap is
 * open and the sequence number to replay from.
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ENOENT (no such instance).
 * @since 0.2 */
LR_API lr_status lr_router_kv_source(const lr_router *router, uint32_t id,
                                     lr_kv_source *out);

/** The engine behind instance `id` restarted, or its events cannot be
 * replayed: drop its routes and forget its sequence, so that the next
 * batch (any number) starts it again. Counted as a restart.
 * @return LR_OK; LR_EINVAL; LR_ENOENT. @since 0.2 */
LR_API lr_status lr_router_kv_reset(lr_router *router, uint32_t id);

/** Deltas for other gateway replicas; see lr_index_mark,
 * lr_index_export_delta and lr_index_import_delta. Instance ids in deltas
 * are this router's ids: replicas that add the same names in the same
 * order agree on them. Exported deltas carry lr_router_options.replica_id
 * and only the routes this router placed itself (never what it
 * imported). @since 0.1 */
LR_API uint64_t lr_router_mark(lr_router *router);
LR_API lr_status lr_router_export_delta(lr_router *router, uint64_t since_mark,
                                        lr_blob **out, uint64_t *mark_out);
LR_API lr_status lr_router_import_delta(lr_router *router, const uint8_t *buf,
                                        size_t len, uint64_t now_ns);
/* lr_router_import_delta() skips the routes of ids this router does not
 * have (any state): a peer's instance added here later starts cold. The
 * router's own delta (an echo) and the very delta of a replica applied
 * last (the bus delivered it twice) change nothing and return LR_OK,
 * counted in deltas_skipped; any other applies (applying a delta again is
 * harmless: its routes keep their ages), so a delta's marks, which the
 * sender alone vouches for, can make no later delta be skipped (0.2
 * skipped every delta below the highest mark seen: one forged mark of
 * 2^64 - 1 silenced a replica until its next full export). Per replica
 * the marks find lost deltas (deltas_lost). With a peer key
 * (lr_router_set_peer_key) exported deltas are sealed with it and only
 * deltas sealed with it are taken. Besides lr_index_import_delta()'s
 * statuses: LR_ELIMIT when no peer slot can be had (docs/scale.md,
 * "Peers"); LR_ERANGE (@since 0.2) when the clock refuses now_ns. */

/** Authenticate what replicas exchange: with a 16-byte key shared by every
 * replica (the host's secret, from its configuration), the deltas and
 * gauges this router exports carry a SipHash-2-4 MAC under the key in
 * place of their checksum, and it imports only those that do (a message
 * without it, or under another key, is LR_ECORRUPT). Without a key
 * (the default, and key NULL with len 0) messages carry their plain
 * checksum, and anyone who can publish on the bus is a peer. The key is
 * copied; it is not saved in snapshots. Set it on every replica before
 * they exchange anything: during a change of key, messages under the
 * other key are refused.
 * @return LR_OK; LR_EINVAL (NULL router, len other than 0 or 16, key NULL
 *   with len 16). @since 0.3 */
LR_API lr_status lr_router_set_peer_key(lr_router *router, const uint8_t *key,
                                        size_t len);

/* ---- replicas: shared load ------------------------------------------------------------- */

/** This router's own in-flight counters (per instance: requests, queued,
 * prefill, queued, prompt, decode and KV tokens; only instances with a
 * request in flight) as a small gauge message for the other replicas,
 * stamped with replica_id and a sequence number. Publish it every few
 * hundred ms; peers count it for gauge_ttl_ns (about 2 s).
 * @param out  out: a blob for lr_blob_destroy().
 * @return LR_OK; LR_EINVAL; LR_ESTATE (replica_id 0); LR_ENOMEM.
 * @since 0.2 */
LR_API lr_status lr_router_export_gauges(lr_router *router, lr_blob **out);

/** Take another replica's gauge message: until it expires (gauge_ttl_ns
 * after now_ns) or a newer one replaces it, its counts are added to this
 * router's own in every candidate row (in flight, queued, prefill, queued,
 * prompt, decode and KV tokens), so the load-aware policies see the
 * fleet's load, not only this replica's share. lr_router_instance_load()
 * still reports the router's own counters. Entries of ids this router
 * does not have are ignored; an older or repeated message, or the
 * router's own, changes nothing (LR_OK, counted in gauges_skipped).
 * @return LR_OK; LR_EINVAL; LR_ECORRUPT (malformed, checksum, or not
 *   sealed with the peer key); LR_EVERSION; LR_ELIMIT (no peer slot: every
 *   one has a live gauge, and a peer that has sent only gauges never takes
 *   a live peer's slot, docs/scale.md);
 *   LR_ERANGE (the clock refuses now_ns); LR_ENOMEM. On failure nothing
 *   changes. @since 0.2 */
LR_API lr_status lr_router_import_gauges(lr_router *router, const uint8_t *buf,
                                         size_t len, uint64_t now_ns);

/* ---- snapshot and restore ----------------------------------------------------------------- */

/** Save the router's learned state as one versioned, checksummed,
 * little-endian blob: the instances (names, ids, classes, draining,
 * RTTs), the prefix index (every route with its trust and age, and the
 * engine-hash map of precise mode), each KV-event source's sequence
 * watermark, the other replicas' delta watermarks, GORGO's tuned weights,
 * adaptive's calibrated TTFT models and Lodestar's network in service.
 * Not saved: requests in flight, load counters and scrapes (they are
 * re-learned in seconds), gauges, the learner's sample buffers, the
 * policy and parameters (the host's configuration).
 * @param now_ns  host time: ages are saved relative to it.
 * @param out     out: a blob for lr_blob_destroy().
 * @return LR_OK; LR_EINVAL; LR_ERANGE (now_ns ahead of the clock, as a
 *   dry-run route); LR_ENOMEM. Changes nothing. @since 0.2 */
LR_API lr_status lr_router_snapshot(lr_router *router, uint64_t now_ns,
                                    lr_blob **out);

/** Restore a snapshot into a router that has no instance yet (just
 * created with the host's options and policy). All or nothing: on any
 * failure the router is as it was. Routes keep their ages on the host
 * clock (a restore at a later now_ns on the same clock counts the
 * downtime); a KV-event source resumes at its watermark, so that replaying
 * each engine's events from there (duplicates are ignored) gives the
 * state of a router that never stopped. After a restore, the host
 * reconciles the instances with its configuration (add the new ones,
 * remove the gone ones).
 * @return LR_OK; LR_EINVAL; LR_ESTATE (the router has instances);
 *   LR_ECORRUPT (malformed, checksum mismatch, an impossible state);
 *   LR_EVERSION (another format version); LR_ENOTSUP (another block
 *   size); LR_ELIMIT (more instances, routes or peers than this router's
 *   options allow); LR_ERANGE (the clock refuses now_ns); LR_ENOMEM.
 *   @since 0.2 */
LR_API lr_status lr_router_restore(lr_router *router, const uint8_t *buf,
                                   size_t len, uint64_t now_ns);

/** Drop the routes unused for longer than the index TTL (lr_index_expire)
 * and (since 0.2) the other replicas' gauges past gauge_ttl_ns. route()
 * and the learning calls do this too; a host with idle periods may call
 * it from a timer, which also keeps the clock (see "Clock") moving.
 * @return LR_OK; LR_EINVAL (NULL); LR_ERANGE (now_ns refused by the
 * clock; nothing expired; @since 0.2). @since 0.1 */
LR_API lr_status lr_router_expire(lr_router *router, uint64_t now_ns);

/* ---- Lodestar: the learned policy ----------------------------------------------------- */

/* Lodestar's features of one (instance, request) pair, in this order
 * (LR_LODESTAR_FEATURES of them in this build; lr_lodestar_feature_count()
 * says how many the loaded library has). The instance's id is never a
 * feature.
 *
 *   0  prompt tokens             1  expected output tokens
 *   2  expected prefix-hit ratio on the instance (cached / prompt)
 *   3  the same, decayed with a 15 s half-life since the instance last
 *      took a route through that prefix (unknown age: one half-life)
 *   4  requests in flight        5  of which before their first token
 *   6  prefill tokens queued     7  decode tokens in flight
 *   8  running, 9 waiting, 10 KV use (scraped; 0 when stale or missing)
 *   11 RTT in ms
 *   12..19 class one-hot (classes 0..6; 7 and above share the last)
 *
 * Reward: -TTFT in seconds, the time from route() to
 * lr_router_first_token(). */

/** Run one learner step (lr_learner_step) on the calling thread: take the
 * samples routes produced and, when enough have arrived, train and publish
 * a new model. Call it from a background thread of the host, as often as
 * convenient (every few hundred ms); it does not take the router's lock
 * while training, so route() never waits for it. Steps on one router are
 * serialized: a concurrent one gets LR_ESTATE.
 * @param flags    0 or LR_LEARN_FORCE.
 * @param trained  optional: 1 if a new model was published.
 * @return LR_OK; LR_EINVAL; LR_ESTATE (LR_POLICY_LODESTAR never chosen,
 *   or a step running); LR_ENOMEM (samples kept for the next step).
 * @since 0.1 */
LR_API lr_status lr_router_learn_step(lr_router *router, uint32_t flags,
                                      int32_t *trained);

/** Width of the router's learner rows: the same number as
 * lr_lodestar_feature_count(), which says it once; use that. Never fails.
 * @since 0.2, deprecated since 0.3 (exported until the next soname). */
LR_API LR_DEPRECATED("use lr_lodestar_feature_count") uint32_t
    lr_router_learner_feature_count(const lr_router *router);

/** Copy the samples the learner's next round would train on (FIFO, then
 * replay; see lr_learner_samples). Same thread rule as
 * lr_router_learn_step(): not during a step.
 * @param x          out: capacity rows of row_width floats; each row
 *                   starts with the features, the rest is zeroed.
 * @param row_width  floats per row of x, at least
 *                   lr_lodestar_feature_count().
 * @param y          out: capacity rewards.
 * @return LR_OK; LR_EINVAL (NULL, row_width too small); LR_ESTATE (no
 *   learner, or a step running); LR_EBUFSIZE (*n_samples says how many).
 * @since 0.2 (0.1 had no row_width) */
LR_API lr_status lr_router_learner_samples(lr_router *router, float *x,
                                           size_t row_width, float *y,
                                           size_t capacity, size_t *n_samples);

/** Serialize the network in service (lr_mlp_save's format), taking over a
 * newly trained one first as route() would: lr_mlp_load() of the blob
 * scores candidates exactly as route() does, for lr_policy_decide().
 * @param out  out: a blob for lr_blob_destroy().
 * @return LR_OK; LR_EINVAL; LR_ESTATE (no learner, or no model yet);
 *   LR_ENOMEM. @since 0.2 */
LR_API lr_status lr_router_learner_save(lr_router *router, lr_blob **out);

/** The learner's counters (lr_learner_get_stats).
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ESTATE (no learner yet).
 * @since 0.1 */
LR_API lr_status lr_router_learner_stats(const lr_router *router,
                                         lr_learner_stats *out);

/* ---- statistics -------------------------------------------------------------------------- */

/** Router counters. @since 0.1 */
typedef struct lr_router_stats {
    size_t struct_size;
    uint64_t routes;    /* decisions recorded */
    uint64_t dry_runs;  /* decisions only asked for */
    uint64_t inflight;  /* requests in flight now */
    uint64_t instances; /* instances now (draining included) */
    uint64_t routable;  /* of which not draining */
    /** Decisions by lr_reason, for reasons 0..15 only: see
     * lr_router_reason_counts() for every reason the library has. */
    uint64_t by_reason[16];
    /** Tokens routed and tokens expected to hit the cache. */
    uint64_t prompt_tokens;
    uint64_t cached_tokens;
    /* v1 ends here */
    /** KV-event batches with sequence numbers (lr_router_vllm_batch_seq):
     * applied, ignored as applied before, gaps found, engine restarts
     * (found or reset), and sources with a gap open now. @since 0.2 */
    uint64_t kv_batches;
    uint64_t kv_duplicates;
    uint64_t kv_gaps;
    uint64_t kv_restarts;
    uint64_t kv_gaps_open;
    /** Deltas exported, imported, and skipped on import (applied before,
     * or this router's own); deltas found lost (a later one started past
     * the last applied). @since 0.2 */
    uint64_t deltas_exported;
    uint64_t deltas_imported;
    uint64_t deltas_skipped;
    uint64_t deltas_lost;
    /** Gauges exported, imported, skipped (older, repeated or own) and
     * expired; replicas whose gauge counts now. @since 0.2 */
    uint64_t gauges_exported;
    uint64_t gauges_imported;
    uint64_t gauges_skipped;
    uint64_t gauges_expired;
    uint64_t peers_live;
    /* v2 ends here */
    /** lr_router_observe_cached(): requests whose engine reported the
     * prompt tokens it reused (each request's first report), the tokens
     * the router expected to hit for them, and the tokens their engines
     * reported (each at most the prompt). observed / expected is how
     * much of its predicted hits the fleet delivered. @since 0.3 */
    uint64_t observed_reports;
    uint64_t observed_expected_tokens;
    uint64_t observed_cached_tokens;
    /** The waiting queue: requests waiting now, and the tokens of their
     * prompts; requests that have waited (route() answered
     * LR_REASON_WAITING), and of those dispatched, expired, cancelled
     * and dropped at dispatch (LR_EEXIST); sheddable requests refused
     * (LR_EBUSY); and the total time the dispatched ones waited, in ns.
     * @since 0.3 */
    uint64_t waiting;
    uint64_t waiting_tokens;
    uint64_t waited;
    uint64_t waited_dispatched;
    uint64_t waited_expired;
    uint64_t waited_cancelled;
    uint64_t waited_dropped;
    uint64_t shed;
    uint64_t wait_ns;
    /* v3 ends here */
    /** Routes of requests naming a LoRA adapter, and of those the ones
     * sent where the adapter was not resident (a load caused, as the
     * router follows residency). @since 0.3 */
    uint64_t adapter_routes;
    uint64_t adapter_loads;
    /* v4 ends here */
} lr_router_stats;

#define LR_ROUTER_STATS_SIZE_V1 (offsetof(lr_router_stats, cached_tokens) + 8)
#define LR_ROUTER_STATS_SIZE_V2 (offsetof(lr_router_stats, peers_live) + 8)
#define LR_ROUTER_STATS_SIZE_V3 (offsetof(lr_router_stats, wait_ns) + 8)
#define LR_ROUTER_STATS_SIZE_V4 (offsetof(lr_router_stats, adapter_loads) + 8)

#ifndef __cplusplus
#define LR_ROUTER_STATS_INIT \
    { .struct_size = sizeof(lr_router_stats) }
#endif

/** Zero the caller's `size` bytes of `s` and set struct_size = size. Use
 * the lr_router_stats_init() macro. @since 0.2 */
LR_API void lr_router_stats_init_sized(lr_router_stats *s, size_t size);
#define lr_router_stats_init(s) lr_router_stats_init_sized((s), sizeof *(s))

/** Read the counters. @return LR_OK; LR_EINVAL; LR_EVERSION. @since 0.1 */
LR_API lr_status lr_router_get_stats(const lr_router *router,
                                     lr_router_stats *out);

/** Decisions recorded by reason: counts[r] for reason r, for every reason
 * the library has (lr_reason_count()).
 * @param counts    caller buffer of `capacity` entries; may be NULL when
 *                  capacity is 0.
 * @param n_counts  out: entries written, or needed with LR_EBUFSIZE.
 * @return LR_OK; LR_EINVAL; LR_EBUFSIZE. @since 0.2 */
LR_API lr_status lr_router_reason_counts(const lr_router *router,
                                         uint64_t *counts, size_t capacity,
                                         size_t *n_counts);

/** The counters of the router's prefix index (lr_index_get_stats): block
 * routes held (LOCAL and REMOTE), prefixes, bytes, and the cumulative
 * evicted, expired and learned blocks, for a host's metrics. Holds the
 * router's lock exclusively for as long as lr_index_get_stats takes
 * (engine_hashes walks the engine-hash map, so it grows with KV events
 * held): call it from a metrics scrape, not per request. Set
 * out->struct_size first (>= LR_INDEX_STATS_SIZE_V1).
 * @param out  out: the counters; fields past out->struct_size untouched.
 * @return LR_OK; LR_EINVAL (NULL); LR_EVERSION (struct_size too small).
 * Thread safety: like every lr_router_* call. @since 0.2 */
LR_API lr_status lr_router_index_stats(const lr_router *router,
                                       lr_index_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_ROUTER_H */
