/** @file
 * lr_policy: every routing policy of the library as a pure function over a
 * candidate table.
 *
 * A policy sees one row per routable instance (lr_candidate: cached
 * tokens, load counters, scraped engine stats, RTT, class speed, rank on
 * the consistent-hash ring), the request's facts and its parameters, and
 * picks one row. lr_router_route() gathers that table from its index, ring
 * and load tracker and then calls exactly lr_policy_decide(), so a host can
 * record tables (lr_router_candidates()) and replay, unit-test or fuzz any
 * policy without a router. The function allocates nothing, touches no
 * global state and is deterministic for a seed.
 *
 * State a policy keeps between requests lives with the router, not here:
 * the round-robin cursor and Lodestar's model come in through
 * lr_policy_input; DualMap's hotness window and the hash keys of the
 * session and consistent-hash policies only decide which ring key the
 * router ranks the rows by (lr_candidate.ring_rank); GORGO's tuned
 * weights are its parameters (see lr_cost.h for the tuner).
 *
 * Thread safety: lr_policy_decide() is reentrant; the model it is given
 * (lodestar) is used as lr_mlp_predict() uses it, one thread at a time.
 *
 * Example (replaying one recorded table):
 *   lr_policy_input in; lr_policy_input_init(&in);
 *   in.prompt_tokens = 8192; in.seed = 7;
 *   double scores[64];
 *   lr_decision d; lr_decision_init(&d);
 *   lr_policy_decide(LR_POLICY_MIN_TTFT, &in, rows, n, sizeof rows[0],
 *                    scores, &d);
 *   -> d.instance, d.reason, d.cost; scores[i] for every row
 */
#ifndef LIBROUTE_LR_POLICY_H
#define LIBROUTE_LR_POLICY_H

#include "lr_common.h"
#include "lr_mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- policies ------------------------------------------------------------ */

/** Routing policies. Values are stable and only ever appended; names
 * (lr_policy_name) are what lrsim, the bindings and the docs use. How many
 * there are is a run-time fact of the library (lr_policy_count()), never a
 * constant compiled into the host. @since 0.1 */
typedef enum lr_policy {
    LR_POLICY_RANDOM = 0,                /* "random" */
    LR_POLICY_ROUND_ROBIN = 1,           /* "round-robin" */
    LR_POLICY_LEAST_REQUEST = 2,         /* "least-request" */
    LR_POLICY_LEAST_LOAD = 3,            /* "least-load" */
    LR_POLICY_SESSION_AFFINITY = 4,      /* "session-affinity" */
    LR_POLICY_CONSISTENT_HASH = 5,       /* "consistent-hash" (bounded load) */
    LR_POLICY_PREFIX_CACHE = 6,          /* "prefix-cache" */
    LR_POLICY_PREFIX_CACHE_AND_LOAD = 7, /* "prefix-cache-and-load" (AIBrix) */
    LR_POLICY_SGLANG_CACHE_AWARE = 8,    /* "sglang-cache-aware" */
    LR_POLICY_PREBLE = 9,                /* "preble" */
    LR_POLICY_MIN_TTFT = 10,             /* "min-ttft" (Mooncake) */
    LR_POLICY_DYNAMO = 11,               /* "dynamo" */
    LR_POLICY_DUALMAP = 12,              /* "dualmap" */
    LR_POLICY_GORGO = 13,                /* "gorgo" */
    LR_POLICY_RANVIER = 14,              /* "ranvier" */
    LR_POLICY_LODESTAR = 15, /* "lodestar" (see lr_router_learn_step) */
    LR_POLICY_ADAPTIVE = 16, /* "adaptive": calibrates itself (@since 0.2) */
    LR_POLICY_LORA_AFFINITY = 17, /* "lora-affinity" (Inference Extension;
                                     @since 0.3) */
    LR_POLICY_AIBRIX_LORA = 18,   /* "aibrix-lora" (@since 0.3) */
    LR_POLICY_LLMD_PD = 19,       /* "llm-d-pd": decode first, then
                                     llm-d's prefix-based decider (@since
                                     0.3) */
    LR_POLICY_DYNAMO_PD = 20      /* "dynamo-pd": Dynamo's disaggregated
                                     router, conditional (@since 0.3) */
} lr_policy;

/** An instance's part in a disaggregated fleet (lr_instance_spec.role,
 * lr_candidate.role). A fleet whose instances are all LR_ROLE_BOTH is
 * aggregated: every decision keeps a request whole. With prefill
 * instances, a decision may split a request: a prefill instance computes
 * its KV, which moves to the decode instance that decodes it (vLLM's
 * disaggregated serving with a KV connector, SGLang's PD mode). @since
 * 0.3 */
typedef enum lr_role {
    LR_ROLE_BOTH = 0,    /* prefills and decodes its requests */
    LR_ROLE_PREFILL = 1, /* prefills for decode instances; decodes none */
    LR_ROLE_DECODE = 2   /* decodes; prefills a request kept whole */
} lr_role;

/** Number of policies this library has: values 0 .. count - 1 are all
 * valid. Never fails. @since 0.2 */
LR_API uint32_t lr_policy_count(void);

/** Name of a policy, or NULL outside 0 .. lr_policy_count() - 1. Never
 * fails. @since 0.1 */
LR_API const char *lr_policy_name(int32_t policy);

/** Policy by name (exact, as lr_policy_name gives it).
 * @param out  out: the policy's value.
 * @return LR_OK; LR_EINVAL (NULL); LR_ENOENT (no such name). @since 0.1 */
LR_API lr_status lr_policy_from_name(const char *name, int32_t *out);

/* ---- reasons --------------------------------------------------------------- */

/** Why an instance was chosen. Values are stable and only appended.
 * @since 0.1 */
typedef enum lr_reason {
    LR_REASON_NONE = 0,
    LR_REASON_RANDOM = 1,        /* uniform draw */
    LR_REASON_ROUND_ROBIN = 2,   /* next in turn */
    LR_REASON_LEAST_LOADED = 3,  /* the policy's load rule picked it */
    LR_REASON_SESSION = 4,       /* session or first-tokens hash */
    LR_REASON_HASH = 5,          /* consistent hash, within the load bound */
    LR_REASON_PREFIX_HIT = 6,    /* best cached prefix */
    LR_REASON_LOAD_OVERRIDE = 7, /* a cache choice overridden for load */
    LR_REASON_SLO_SWITCH = 8,    /* cache choice would break the TTFT SLO */
    LR_REASON_FALLBACK = 9,      /* no usable prefix: fallback rule */
    LR_REASON_MIN_COST = 10,     /* lowest predicted cost */
    LR_REASON_SAMPLED = 11,      /* drawn from a softmax over costs */
    LR_REASON_K_FILTER = 12,     /* restricted to hash candidates (Lodestar) */
    LR_REASON_EXPLORE = 13,      /* exploration draw (Lodestar) */
    LR_REASON_COLD_START = 14,   /* no trained model yet (Lodestar) */
    LR_REASON_OOD = 15,          /* input out of the model's range (Lodestar) */
    LR_REASON_WAITING = 16,      /* held in the router's queue: no instance yet
                                    (LR_ROUTE_MAY_WAIT; @since 0.3) */
    LR_REASON_ADAPTER = 17,      /* its LoRA adapter resident there, or a free
                                    slot (lora-affinity, aibrix-lora;
                                    @since 0.3) */
    LR_REASON_WHOLE = 18         /* kept whole where it decodes although
                                    prefill instances exist
                                    (lr_decision.prefill_reason; @since
                                    0.3) */
} lr_reason;

/** Number of reasons this library has (values 0 .. count - 1). Never
 * fails. @since 0.2 */
LR_API uint32_t lr_reason_count(void);

/** Name of a reason ("prefix-hit", ...), or NULL outside 0 ..
 * lr_reason_count() - 1. Never fails. @since 0.1 */
LR_API const char *lr_reason_name(int32_t reason);

/* ---- parameters --------------------------------------------------------------- */

/** Policy parameters: the router's run-time tunables
 * (lr_router_set_param) and the params array of lr_policy_input. Values
 * are stable and only appended; lr_param_count() says how many this
 * library has. @since 0.1 */
typedef enum lr_param {
    /** prefix-cache: least match ratio to follow the cache (0.5). */
    LR_PARAM_PREFIX_MIN_RATIO = 0,
    /** consistent-hash: load bound c, cap = ceil(c x mean) (1.25). */
    LR_PARAM_BOUNDED_LOAD = 1,
    /** prefix-cache-and-load: max - min in flight above which the least
     * loaded wins (8). */
    LR_PARAM_AIBRIX_IMBALANCE = 2,
    /** prefix-cache-and-load: k in mean + k x stddev (1). */
    LR_PARAM_AIBRIX_STDDEV = 3,
    /** sglang-cache-aware: absolute (64) and relative (1.5) imbalance. */
    LR_PARAM_SGLANG_ABS = 4,
    LR_PARAM_SGLANG_REL = 5,
    /** sglang-cache-aware: least match ratio for the cache (0.3). */
    LR_PARAM_SGLANG_MIN_RATIO = 6,
    /** preble: hit ratio above which the best hit wins (0.5). */
    LR_PARAM_PREBLE_HIT = 7,
    /** dynamo: weight of uncached prefill blocks (1.0) and temperature
     * (0: argmin). */
    LR_PARAM_DYNAMO_OVERLAP = 8,
    LR_PARAM_DYNAMO_TEMPERATURE = 9,
    /** dualmap and rebalancing: TTFT SLO in seconds (5). */
    LR_PARAM_TTFT_SLO_S = 10,
    /** dualmap: tokens per hash-key block (512), and the most key blocks
     * a hot prefix can grow to (16). Router only: they choose the ring
     * key. */
    LR_PARAM_DUALMAP_KEY_TOKENS = 11,
    LR_PARAM_DUALMAP_MAX_KEY_BLOCKS = 12,
    /** dualmap: requests in the hotness window (1024). Router only. */
    LR_PARAM_DUALMAP_WINDOW = 13,
    /** gorgo: weights (0.5, 0.1) and the tuner's step size (0.5). In a
     * router the tuner moves the weights (lr_router_get_param reads the
     * incumbent); lr_policy_decide uses the weights it is given. */
    LR_PARAM_GORGO_W_RTT = 14,
    LR_PARAM_GORGO_W_QUEUE = 15,
    LR_PARAM_GORGO_SIGMA = 16,
    /** gorgo: 1 freezes the tuner, 0 lets it run (0). Router only. */
    LR_PARAM_GORGO_FROZEN = 17,
    /** gorgo: bounds the tuner keeps the weights in: the cap on w_rtt
     * (2.0) and the floor on w_queue (0.05). Router only. */
    LR_PARAM_GORGO_W_RTT_MAX = 18,
    LR_PARAM_GORGO_W_QUEUE_MIN = 19,
    /** ranvier: in flight above this x median -> least loaded (2); 0 off. */
    LR_PARAM_RANVIER_PRESSURE = 20,
    /** session-affinity, consistent-hash, ranvier and Lodestar's K-filter:
     * leading tokens hashed into the ring key (256). Router only. */
    LR_PARAM_SESSION_TOKENS = 21,
    /** Scrapes older than this are ignored, seconds (10). Router only. */
    LR_PARAM_STATS_MAX_AGE_S = 22,
    /** Output tokens assumed when a request does not say (128). */
    LR_PARAM_DEFAULT_OUTPUT_TOKENS = 23,
    /** gorgo: 0 counts a request's prompt tokens in its instance's queue
     * until the request ends, as published; 1 releases them at its first
     * token (the published option) (0). */
    LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN = 24,
    /** lodestar: probability of a uniform exploration draw over every
     * candidate, before the K-filter and scoring (Algorithm 4) (0, as in
     * the paper's runs; its code's default is 0.1). With 0 the tie band
     * (LODESTAR_TIE) is the only exploration. */
    LR_PARAM_LODESTAR_EPSILON = 25,
    /** lodestar: candidates within this fraction of the best predicted
     * reward tie, and one of them is drawn (0.1). */
    LR_PARAM_LODESTAR_TIE = 26,
    /** lodestar: K-filter when the mean KV use of the candidates is above
     * this (0.8) and the best cached prefix holds more than
     * LODESTAR_KFILTER_TOKENS tokens (100): only the rows of ring ranks 1
     * and 2 are scored. */
    LR_PARAM_LODESTAR_KV_THRESHOLD = 27,
    LR_PARAM_LODESTAR_KFILTER_TOKENS = 28,
    /** lodestar: 1 drops the candidates whose features leave the training
     * range, each judged alone, and falls back when none is left; 0
     * scores every candidate (1). */
    LR_PARAM_LODESTAR_OOD = 29,
    /** lodestar: the policy used on cold start and out of range (7,
     * prefix-cache-and-load); any policy but lodestar. */
    LR_PARAM_LODESTAR_FALLBACK = 30,
    /** lodestar: score at most this many candidates: the one with the
     * deepest cached prefix and those a cheap TTFT estimate (queue and
     * uncached prefill, as min-ttft) ranks best; 0 scores every candidate
     * (8). Before 0.2's release this was a uniform draw, default 0. */
    LR_PARAM_LODESTAR_CANDIDATES = 31,
    /** lodestar: a first token later than this many seconds after the
     * route makes a sample clipped to it (reward -this) instead of being
     * dropped; the learner then keeps it when this is within its
     * max_abs_reward (15) and drops it (counted) otherwise. The default
     * (60) is above the learner's 15, so slow first tokens are dropped, as
     * in the paper; 15 or less clips them into the samples, so the model
     * sees what a backlog costs (docs/learning.md measures both). Router
     * only. */
    LR_PARAM_LODESTAR_MAX_TTFT_S = 32,
    /** adaptive: weight of the prefill work a placement adds for the
     * requests that will queue behind it (3): the work's seconds count
     * this x (requests routed per instance per second) x (the fleet's
     * lasting backlog, seconds) times over. 0: each request for itself.
     * @since 0.2 */
    LR_PARAM_ADAPTIVE_WORK_WEIGHT = 33,
    /** adaptive: weight of the decode contention a placement adds for the
     * requests on its instance (3): each of them waits
     * ttft_s_per_decoding longer, this many times over. 0: off.
     * @since 0.2 */
    LR_PARAM_ADAPTIVE_CONTENTION = 34,
    /** adaptive: scores within this many seconds of the best tie, and one
     * of them is drawn (0.002): measurement noise must not pile a burst
     * onto one instance. @since 0.2 */
    LR_PARAM_ADAPTIVE_TIE_S = 35,
    /** adaptive: a prefix routed to an instance less than this many
     * seconds ago counts as not cached there yet (0.01): a request
     * admitted together with the one bringing it computes it again.
     * @since 0.2 */
    LR_PARAM_ADAPTIVE_FRESH_S = 36,
    /** adaptive: weight of the RTT in the predicted TTFT (1). @since 0.2 */
    LR_PARAM_ADAPTIVE_RTT_WEIGHT = 37,
    /** adaptive: 1 fits each class's TTFT model from the first tokens the
     * router sees, 0 keeps it as it is (the told rates before any fit)
     * (1). Router only. @since 0.2 */
    LR_PARAM_ADAPTIVE_CALIBRATE = 38,
    /** The router's clock: a timestamp more than this many seconds ahead
     * of the newest one the router has taken is refused with LR_ERANGE
     * and changes nothing (60; 0.001 .. 4.7e9, past LR_ROUTER_MAX_TIME_NS:
     * the top turns the check off). See
     * "Clock" in lr_router.h. Router only. @since 0.2 */
    LR_PARAM_CLOCK_SKEW_S = 39,
    /** Saturation: an instance is saturated when this many of the
     * router's requests there wait for their first token, or its scrape
     * reports this many waiting (8; 1 .. 1e6). See "Waiting" in
     * lr_router.h. Router only. @since 0.3 */
    LR_PARAM_SATURATION_QUEUE = 40,
    /** Saturation: ... or its scrape reports at least this share of its
     * KV cache in use (0.8; 0.01 .. 1). Router only. @since 0.3 */
    LR_PARAM_SATURATION_KV = 41,
    /** The waiting queue's fair share (the Virtual Token Counter): a
     * request let out charges its tenant input_weight * prompt tokens +
     * output_weight * expected output tokens (1 and 2; 0 .. 1000 each).
     * Router only. @since 0.3 */
    LR_PARAM_FAIR_INPUT_WEIGHT = 42,
    LR_PARAM_FAIR_OUTPUT_WEIGHT = 43,
    /** adaptive: 1 chooses, for a request with a deadline, among the
     * instances predicted to meet it (its headroom) when its least-cost
     * choice would not, and the one predicted fastest when none would
     * (reason LR_REASON_SLO_SWITCH); 0 ignores deadlines (1). @since 0.3 */
    LR_PARAM_ADAPTIVE_DEADLINE = 44,
    /** Saturation: ... or the prefill the router has queued there (its
     * requests' uncached prompt tokens before their first token) would
     * take this many seconds, plus the instance's RTT, at its class's
     * rate (lr_router_set_class; 8000 tokens/s untold) (0.15; 0.001 ..
     * 3600). Router only. @since 0.3 */
    LR_PARAM_SATURATION_PREFILL_S = 45,
    /** Seconds an engine takes to load a LoRA adapter that is not
     * resident (0.1): what every policy's rows say until adaptive has
     * learnt the figure from first tokens. @since 0.3 */
    LR_PARAM_ADAPTER_LOAD_S = 46,
    /** What a prompt token the instance holds on a lower tier of its KV
     * cache (lr_candidate.cpu_tokens, disk_tokens) is worth against one
     * on its GPU (1): host memory 0.8 (llm-d's tier weights, GPU 1.0 /
     * CPU 0.8; Dynamo's --router-host-cache-hit-weight is 0.75), disk 0.25
     * (Dynamo's --router-disk-cache-hit-weight); 0 .. 1 each. dynamo
     * credits weight x lower-tier blocks against its prefill blocks;
     * adaptive counts weight x lower-tier tokens as cached. Other
     * policies ignore lower tiers. @since 0.3 */
    LR_PARAM_TIER_CPU_WEIGHT = 47,
    LR_PARAM_TIER_DISK_WEIGHT = 48,
    /** Bytes of KV cache a prompt token takes (131072: Llama-3-8B in
     * bf16, 32 layers x 8 KV heads x 128 x 2 x 2 bytes; 1 .. 2^30): what
     * a split request moves from its prefill to its decode instance,
     * for the prompt tokens the decode instance does not hold. @since
     * 0.3 */
    LR_PARAM_KV_BYTES_PER_TOKEN = 49,
    /** KV transfer bandwidth in GB/s between two instances on one node
     * (300: NVLink), in one rack (50: a 400 Gb/s RDMA NIC), in one region
     * (12.5: 100 GbE across racks) and across regions (1.25); by
     * lr_instance_spec.node, rack, region (0: unknown, as far as it
     * goes). 0.001 .. 10^5. @since 0.3 */
    LR_PARAM_KV_GBPS_NODE = 50,
    LR_PARAM_KV_GBPS_RACK = 51,
    LR_PARAM_KV_GBPS_REGION = 52,
    LR_PARAM_KV_GBPS_WAN = 53,
    /** The policy that picks a split request's prefill instance when
     * the router's policy has no pair rule of its own (SGLang's
     * --prefill-policy): -1 (the default) the router's policy, on the
     * prefill rows; else the id of a policy that keeps no state and
     * reads no ring (random, least-request, least-load, the prefix
     * policies, dynamo, min-ttft, the LoRA ones, llm-d-pd, dynamo-pd) or
     * round-robin (which keeps a turn of its own for prefill); others
     * are LR_EINVAL. @since 0.3 */
    LR_PARAM_PD_PREFILL_POLICY = 54,
    /** llm-d-pd's decider: split when the decode instance would prefill
     * at least this many uncached tokens itself (16: llm-d's sample
     * configuration's nonCachedTokens; 0, its code default, splits
     * always). 0 .. 2^26. @since 0.3 */
    LR_PARAM_PD_MIN_UNCACHED = 55,
    /** dynamo-pd's conditional disaggregation (isl_bounding): prefill
     * where it decodes when its uncached tokens there are fewer than
     * this (2048) and a share of the prompt below
     * LR_PARAM_PD_LOCAL_MAX_RATIO (0.7). @since 0.3 */
    LR_PARAM_PD_LOCAL_MAX_TOKENS = 56,
    LR_PARAM_PD_LOCAL_MAX_RATIO = 57,
    /** adaptive keeps a request whole on a decode instance where
     * requests are in flight (prefilling it there, in their decode
     * steps) only when its prefill's seconds there are at most this x
     * the decode seconds of a request there (lr_candidate.decode_s;
     * before any is known, the request's expected output tokens x the
     * instance's calibrated first-token base), what it may add to their
     * time per output token, and the wait it would have at the prefill
     * instance is at least twice what it stalls them all together (0.1;
     * 0 .. 100; 0: only on an idle decode instance). @since 0.3 */
    LR_PARAM_ADAPTIVE_PD_STALL = 58,
    /** A large fleet: a route whose routable instances are more than
     * this many (256; 0 .. 65534) weighs only the candidates its policy
     * can pick: the instances holding the prompt's longest prefixes, the
     * ring's candidates, the least loaded by the measure the policy
     * reads, and a uniform sample, LR_PARAM_NARROW_WIDTH of each
     * (docs/router.md, "Large fleets"). A fleet this size or smaller is
     * weighed whole, as is a route that names a model or an adapter,
     * and one in a fleet with prefill instances.
     * lr_router_candidates() and lr_router_policy_input() list every
     * routable instance whatever this is. @since 0.3 */
    LR_PARAM_NARROW_ABOVE = 59,
    /** How many instances each source of a narrowed route gives (16;
     * 1 .. 256). @since 0.3 */
    LR_PARAM_NARROW_WIDTH = 60
} lr_param;

/** Number of parameters this library has: keys 0 .. count - 1 are all
 * valid. Never fails. @since 0.2 */
LR_API uint32_t lr_param_count(void);

/** Bounds and default of a parameter: status LR_ENOTSUP for an unknown
 * key; flags LR_BOUNDS_INTEGER for keys that take whole numbers only.
 * Never fails. @since 0.2 */
LR_API lr_bounds lr_param_bounds(int32_t key);

/* ---- the candidate table --------------------------------------------------------- */

/** One routable instance as a policy sees it. Plain data: a host that
 * records tables may store and replay them; the router fills them in
 * lr_router_candidates(). Arrays of rows are passed with the caller's
 * sizeof(lr_candidate) as `row_size`, so the struct may grow at its end in
 * later releases. @since 0.2 */
typedef struct lr_candidate {
    /** The instance's id; decisions name it. */
    uint32_t instance;
    /** Prompt tokens expected to hit its prefix cache (0 for policies
     * that do not match, and for an instance that caches nothing). */
    uint32_t cached_tokens;
    /** Requests dispatched to it and not ended, and of those the ones
     * still before their first token. */
    uint32_t inflight;
    uint32_t queued;
    /** Uncached prompt tokens of its queued requests (prefill to do). */
    uint64_t prefill_tokens;
    /** Whole prompt tokens of its queued requests. */
    uint64_t queued_tokens;
    /** Whole prompt tokens of every request in flight on it. */
    uint64_t prompt_tokens;
    /** Expected output tokens of its requests past their first token. */
    uint64_t decode_tokens;
    /** Prompt + expected output tokens of its requests in flight: the KV
     * they hold or will hold. */
    uint64_t kv_tokens;
    /** Scraped engine stats; 0 when missing or stale. */
    uint32_t running;
    uint32_t waiting;
    double kv_use;
    /** Round-trip time to it, milliseconds (probed EWMA or the initial
     * estimate; 0 unknown). */
    double rtt_ms;
    /** Prefill throughput of its class, tokens/s (> 0). */
    double prefill_rate;
    /** DualMap's decode bottleneck: seconds its queue has been waiting
     * without a first token, counted once past 3 s; else 0. */
    double stall_s;
    /** Seconds since a request was last routed to it through its cached
     * prefix; negative when unknown (lodestar's decayed hit ratio). */
    double cached_age_s;
    /** Its class (GPU model), 0 .. LR_LOAD_MAX_CLASSES - 1. */
    uint32_t instance_class;
    /** 1 if it caches prefixes, 0 if not. */
    int32_t prefix_caching;
    /** Rank of the instance among the ring's candidates for the request's
     * ring key, 1 for the first; 0 when it is not among them or the
     * policy uses no ring (see lr_policy_ring_key). */
    uint32_t ring_rank;
    /** Reserved; 0. */
    uint32_t flags;
    /** Blocks the router's index holds for the instance
     * (lr_index_instance_blocks): the size of its radix tree, which
     * sglang-cache-aware's low-match branch minimizes, as SGLang's router
     * does. The router fills it only for the policies that read it
     * (sglang-cache-aware, and Lodestar when that is its fallback); 0
     * otherwise. */
    uint64_t tree_blocks;
    /** The router's calibrated TTFT model of the instance (adaptive):
     * seconds per queued prefill token and fixed seconds, fitted online
     * from the first tokens it observed there; 0 before the first (the
     * policy then uses prefill_rate). For a request whose adapter is
     * resident there while every slot is held, the fixed seconds include
     * the wait learnt for the adapters queued ahead of it for a slot.
     * Finite, >= 0. */
    double ttft_s_per_token;
    double ttft_base_s;
    /** ... and the seconds one more request decoding on the instance adds
     * to a first token there (decode contention), from the same fit. */
    double ttft_s_per_decoding;
    /** prefill_tokens averaged over the last ten seconds or so of routes,
     * or over the time the router has seen when that is less (adaptive's
     * overload signal: a backlog that lasts, not a burst). */
    double prefill_tokens_avg;
    /** Requests routed to it per second, averaged the same way. */
    double route_rate;
    /* v1 ends here */
    /** The share of its expected cached tokens that its engine lately
     * reported not reusing (lr_router_observe_cached()): in [0, 1], 0
     * while it reported nothing, and 0 in a row shorter than
     * LR_CANDIDATE_SIZE_V2. adaptive counts cached_tokens x (1 - this).
     * @since 0.3 */
    double cached_lost;
    /* v2 ends here */
    /** 1 when its engine must load the request's LoRA adapter first (not
     * resident there); 0 when it is resident, or the request names none.
     * @since 0.3 */
    int32_t adapter_missing;
    /** Its adapter slots that hold no adapter with requests in flight:
     * room to load one without waiting (max_adapters less the busy ones);
     * UINT32_MAX when its slots are not known. @since 0.3 */
    uint32_t adapter_free;
    /** Seconds its engine is expected to keep the request's first token
     * waiting for its adapter: 0 when resident, else
     * LR_PARAM_ADAPTER_LOAD_S, or what adaptive learnt (a load, and with
     * no slot free the turns of the adapters queued ahead of it for a
     * slot, learnt per adapter ahead). Finite, >= 0. @since 0.3 */
    double adapter_load_s;
    /** Adapters resident there; and 1 when loading the request's adapter
     * evicts another one (every slot is taken). For a request that names
     * no adapter the adapter columns are 0, adapter_free UINT32_MAX.
     * @since 0.3 */
    uint32_t adapters_resident;
    int32_t adapter_evicts;
    /** Prompt tokens past cached_tokens that its engine holds on a lower
     * tier of its KV cache (blocks an offloading connector copied to host
     * memory, or to disk, as the engine's KV events said: lr_kv_stored
     * .tier): loaded, not computed, on a hit. A block on two tiers counts
     * on the better one: cpu_tokens runs on from cached_tokens, and
     * disk_tokens on from both; cached_tokens + cpu_tokens + disk_tokens
     * <= the prompt. 0 for an instance that caches no prefix, for
     * policies that do not match, and while no lower-tier event arrived.
     * Only dynamo (LR_PARAM_TIER_CPU_WEIGHT, LR_PARAM_TIER_DISK_WEIGHT on
     * its overlap credit) and adaptive (the same weights on its cached
     * tokens) read them. @since 0.3 */
    uint32_t cpu_tokens;
    uint32_t disk_tokens;
    /* v3 ends here */
    /** Its lr_role. In a table with prefill rows, every row that can
     * decode (LR_ROLE_BOTH, LR_ROLE_DECODE) comes before every
     * LR_ROLE_PREFILL row (the router gathers them so). @since 0.3 */
    int32_t role;
    /** Where it runs (lr_instance_spec.node, rack, region; 0: unknown):
     * what a KV transfer between two rows costs. @since 0.3 */
    uint32_t node, rack, region;
    /* v4 ends here */
    /** The router's calibrated decode time of its class (adaptive): the
     * mean seconds from first token to completion of the requests it
     * routed to instances of that class and saw complete lately; 0 before
     * the first (the policy then assumes the expected output tokens x
     * ttft_base_s). What a prefill kept on a decode instance is weighed
     * against: the seconds it stalls the requests decoding there, as a
     * share of theirs. Finite, >= 0; 0 in a row shorter than
     * LR_CANDIDATE_SIZE_V5. @since 0.3 */
    double decode_s;
    /* v5 ends here */
    /** A sibling of the request there: another prompt routed to the
     * instance in the last 30 s through the point where this request's
     * hit ends (cached_tokens; a boundary of that prompt) and on past it
     * along another path than this request's. Its tokens past that point
     * when the point holds at least half of it, else 0 (0: none, or no
     * boundaries, or a policy that reads no ages). An engine that keeps one
     * prompt per slot and gives a request the free slot of the most similar one
     * (llama.cpp's slots) overwrites the sibling's tokens past the point, which
     * its next turn computes again; a paged engine keeps both.
     * @since 0.3 */
    uint32_t sibling_tokens;
    /** Where a sibling routed to the instance after this request's own
     * last route there, through a boundary of its hit, left its path:
     * that depth in tokens when it holds at least half of the hit, else 0.
     * What an engine of slots still holds of the hit. @since 0.3 */
    uint32_t sibling_fork_tokens;
    /** Of the requests whose hit there a sibling had left since their
     * last route (sibling_fork_tokens), the share whose engine reported
     * reusing the fork and no more (lr_router_observe_cached()), less
     * the same share of requests whose hit had no sibling's fork: high
     * where a sibling takes a conversation's slot (llama.cpp), near 0
     * where it does not (a paged engine), 0 until reported. A newcomer
     * takes one of its siblings' slots, so only a fraction of their
     * reports show it: adaptive counts the hit of a row with a sibling as
     * cached_tokens x (1 - min(1, 4 x this)), nothing once a quarter of
     * such reports lost their history: on an engine of slots the prefix
     * it shares with a live sibling costs that sibling as much as it
     * saves. In [0, 1]; 0 in a row shorter than LR_CANDIDATE_SIZE_V6.
     * @since 0.3 */
    double sibling_lost;
} lr_candidate;

/** Smallest row_size a caller may pass. @since 0.2 */
#define LR_CANDIDATE_SIZE_V1 (offsetof(lr_candidate, route_rate) + 8)
/** row_size that carries cached_lost. @since 0.3 */
#define LR_CANDIDATE_SIZE_V2 (offsetof(lr_candidate, cached_lost) + 8)
/** row_size that carries the adapter and lower-tier columns. @since 0.3 */
#define LR_CANDIDATE_SIZE_V3 (offsetof(lr_candidate, disk_tokens) + 4)
/** row_size that carries the role and the placement. @since 0.3 */
#define LR_CANDIDATE_SIZE_V4 (offsetof(lr_candidate, region) + 4)
/** row_size that carries decode_s. @since 0.3 */
#define LR_CANDIDATE_SIZE_V5 (offsetof(lr_candidate, decode_s) + 8)
/** row_size that carries the sibling columns. @since 0.3 */
#define LR_CANDIDATE_SIZE_V6 (offsetof(lr_candidate, sibling_lost) + 8)

/** Which ring key a policy ranks its rows by: the router computes the
 * ring candidates of that key and writes their ranks into the table. 0:
 * none; 1: the session (or the prompt's first LR_PARAM_SESSION_TOKENS
 * tokens without one); 2: the prompt's first LR_PARAM_SESSION_TOKENS
 * tokens; 3: DualMap's hotness-adapted prefix key. @since 0.2 */
#define LR_RING_KEY_NONE 0
#define LR_RING_KEY_SESSION 1
#define LR_RING_KEY_PREFIX 2
#define LR_RING_KEY_HOTNESS 3

/** The ring key kind of a policy (LR_RING_KEY_*) and how many ranks it
 * reads (0 .. LR_RING_MAX_K); -1 for an unknown policy. Lodestar reads
 * its fallback's key when that policy has one. Never fails. @since 0.2 */
LR_API int32_t lr_policy_ring_key(int32_t policy, uint32_t *ranks);

/* ---- decisions -------------------------------------------------------------------- */

/** One instance's score in a decision. @since 0.1 */
typedef struct lr_score {
    uint32_t instance;
    /** Tokens expected to hit that instance's prefix cache. */
    uint32_t cached_tokens;
    /** The figure the policy ranks by, lower is better (a cost, a load, or
     * a negated hit); NaN where the policy did not rank this instance. */
    double score;
} lr_score;

/** Size of the 0.1 lr_score: the least stride a caller may give.
 * @since 0.2 */
#define LR_SCORE_SIZE_V1 (offsetof(lr_score, score) + sizeof(double))

/** A routing decision. @since 0.1 */
typedef struct lr_decision {
    size_t struct_size;
    /** Out: the chosen instance. */
    uint32_t instance;
    /** Out: an lr_reason. */
    int32_t reason;
    /** Out: tokens expected to hit the cache there. Policies that do not
     * look at the cache (random, round-robin, least-request, least-load,
     * session-affinity, consistent-hash) skip the index match, so for
     * them this and best_cached_tokens are 0 whatever is cached. */
    uint32_t cached_tokens;
    /** Out: the deepest cached prefix on any candidate. */
    uint32_t best_cached_tokens;
    /** Out: the policy's predicted cost for the choice (its score); NaN
     * when the policy predicts none. */
    double cost;
    /** Out: the other candidate (dualmap, consistent-hash, Lodestar's
     * K-filter), or LR_INSTANCE_NONE. */
    uint32_t alt_instance;
    /** In: caller buffer for LR_ROUTE_SCORES, one entry per routable
     * instance (element size: score_size); may be NULL when
     * scores_capacity is 0. */
    lr_score *scores;
    size_t scores_capacity;
    /** Out: scores written (the table's order: instance id order, the
     * instances that decode first in a fleet with prefill instances), or
     * needed when the call returned LR_EBUFSIZE. */
    size_t n_scores;
    /* v1 ends here */
    /** Out: the policy that made the choice: the router's policy, or
     * Lodestar's fallback on cold start and out of range. @since 0.2 */
    int32_t decider;
    /** Out: the seed the policy drew with; lr_policy_decide() with the
     * same table, parameters and seed makes the same choice. @since 0.2 */
    uint64_t seed;
    /** In: the caller's sizeof(lr_score), the stride of `scores`, at
     * least LR_SCORE_SIZE_V1 (LR_EINVAL otherwise); 0 means
     * LR_SCORE_SIZE_V1, the 0.1 size. The library writes the fields it
     * knows of each entry. @since 0.2 */
    size_t score_size;
    /* v2 ends here */
    /** Out: the instance that prefills the request when the decision
     * splits it (a fleet with LR_ROLE_PREFILL instances): `instance`
     * then decodes it, its KV moving over; LR_INSTANCE_NONE: `instance`
     * does both. @since 0.3 */
    uint32_t prefill_instance;
    /** Out: the prefill leg's lr_reason (why that prefill instance),
     * or LR_REASON_WHOLE when a fleet that could split kept the request
     * whole; -1 when no candidate was a prefill instance. */
    int32_t prefill_reason;
    /** Out: tokens expected to hit the cache at prefill_instance. */
    uint32_t prefill_cached_tokens;
    uint32_t reserved;
    /** Out: the KV transfer's expected seconds (0 when not split). */
    double transfer_s;
    /* v3 ends here */
} lr_decision;

#define LR_DECISION_SIZE_V1 (offsetof(lr_decision, n_scores) + sizeof(size_t))
#define LR_DECISION_SIZE_V2 (offsetof(lr_decision, score_size) + sizeof(size_t))
#define LR_DECISION_SIZE_V3 (offsetof(lr_decision, transfer_s) + 8)

#ifndef __cplusplus
#define LR_DECISION_INIT                                                      \
    {                                                                         \
        .struct_size = sizeof(lr_decision), .instance = LR_INSTANCE_NONE,     \
        .alt_instance = LR_INSTANCE_NONE, .decider = -1,                      \
        .score_size = sizeof(lr_score), .prefill_instance = LR_INSTANCE_NONE, \
        .prefill_reason = -1                                                  \
    }
#endif

/** Zero the caller's `size` bytes of `d` and set struct_size = size and
 * instance = alt_instance = LR_INSTANCE_NONE, decider = -1 (score_size
 * stays 0: the 0.1 size). Use the lr_decision_init() macro, which passes
 * sizeof *d and sets score_size to sizeof(lr_score) as the caller's
 * compiler sees them (it evaluates `d` twice). @since 0.2 */
LR_API void lr_decision_init_sized(lr_decision *d, size_t size);
#define lr_decision_init(d)                    \
    (lr_decision_init_sized((d), sizeof *(d)), \
     (void)((d)->score_size = sizeof(lr_score)))

/* ---- deciding ------------------------------------------------------------------- */

/** A request's facts and a policy's knobs for lr_policy_decide().
 * @since 0.2 */
typedef struct lr_policy_input {
    size_t struct_size;
    /** Parameter values indexed by lr_param key (params[k] is key k);
     * keys at or past n_params, and all keys when params is NULL, take
     * their defaults. Borrowed for the call. */
    const double *params;
    size_t n_params;
    /** Prompt length in tokens. */
    uint32_t prompt_tokens;
    /** Expected output tokens; 0: LR_PARAM_DEFAULT_OUTPUT_TOKENS. */
    uint32_t expected_output_tokens;
    /** Tokens per KV block (dynamo counts blocks); 0: 16. */
    uint32_t block_tokens;
    /** round-robin: the instance served last, or LR_INSTANCE_NONE. */
    uint32_t last_instance;
    /** Seeds every draw the policy makes (ties, sampling, exploration). */
    uint64_t seed;
    /** lodestar: the network that scores the candidates (borrowed; one
     * thread at a time, as lr_mlp_predict), with LR_LODESTAR_FEATURES
     * inputs; NULL: cold start, the fallback decides. */
    lr_mlp *model;
    /* v1 ends here */
    /** The request's TTFT budget: seconds left until its deadline
     * (lr_request.deadline_ns less now), the smallest positive value
     * (1e-9) once it has passed; 0: no deadline. Finite, >= 0. adaptive
     * prefers an instance predicted to meet it (LR_PARAM_ADAPTIVE_DEADLINE).
     * @since 0.3 */
    double ttft_budget_s;
    /* v2 ends here */
} lr_policy_input;

#define LR_POLICY_INPUT_SIZE_V1 \
    (offsetof(lr_policy_input, model) + sizeof(void *))
#define LR_POLICY_INPUT_SIZE_V2 \
    (offsetof(lr_policy_input, ttft_budget_s) + sizeof(double))

#ifndef __cplusplus
#define LR_POLICY_INPUT_INIT                                        \
    {                                                               \
        .struct_size = sizeof(lr_policy_input), .block_tokens = 16, \
        .last_instance = LR_INSTANCE_NONE                           \
    }
#endif

/** Zero the caller's `size` bytes of `in` and set struct_size = size,
 * block_tokens = 16 and last_instance = LR_INSTANCE_NONE. Use the
 * lr_policy_input_init() macro. @since 0.2 */
LR_API void lr_policy_input_init_sized(lr_policy_input *in, size_t size);
#define lr_policy_input_init(in) lr_policy_input_init_sized((in), sizeof *(in))

/** Features of one (instance, request) pair as Lodestar scores them,
 * computed from a candidate row and the request (see lr_router.h for the
 * list). @since 0.1 */
#define LR_LODESTAR_FEATURES 20u

/** Width of Lodestar's feature rows in this library (LR_LODESTAR_FEATURES
 * of the build). Never fails. @since 0.2 */
LR_API uint32_t lr_lodestar_feature_count(void);

/** Choose one row of a candidate table with a policy: the same code
 * lr_router_route() runs after it has gathered its table.
 * @param policy    an lr_policy value.
 * @param input     the request's facts, parameters and seed.
 * @param rows      n_rows candidates (borrowed), laid out every row_size
 *                  bytes; row_size >= LR_CANDIDATE_SIZE_V1.
 * @param scores    out: n_rows doubles, each row's score (lower is better;
 *                  NaN where the policy did not rank the row). Required:
 *                  the policy also works in it.
 * @param out       out: instance, reason, cached_tokens,
 *                  best_cached_tokens, cost, alt_instance and (when its
 *                  struct_size has them) decider and seed; its scores
 *                  buffer is not used (n_scores = 0).
 * @return LR_OK; LR_EINVAL (NULL, n_rows 0, row_size too small, a row
 *   whose instance is LR_INSTANCE_NONE, a row's cached_tokens above
 *   prompt_tokens, a prefill_rate not finite and
 *   positive, a negative or non-finite rtt_ms or stall_s, kv_use outside
 *   [0, 1], and in rows that carry them: cached_lost or sibling_lost
 *   outside [0, 1], a negative or non-finite decode_s or adapter_load_s,
 *   sibling_fork_tokens above cached_tokens; a NaN parameter or a fraction for
 * an integer key, a model of the wrong width); LR_EVERSION (a struct_size);
 * LR_ENOTSUP (unknown policy); LR_ERANGE (a parameter outside its bounds). Rows
 * may name the same instance twice: the policy ranks rows, not instances; and
 *   two rows may carry the same ring_rank: the first one of a rank is
 *   that rank's candidate. Allocates nothing; deterministic for a seed;
 *   O(n_rows log n_rows) at worst for every policy.
 * @since 0.2 */
LR_API lr_status lr_policy_decide(int32_t policy, const lr_policy_input *input,
                                  const lr_candidate *rows, size_t n_rows,
                                  size_t row_size, double *scores,
                                  lr_decision *out);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_POLICY_H */
