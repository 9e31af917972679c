/* lrsim: one run = one policy over one workload on one cluster, driven
 * through libroute's public API exactly as a gateway drives it.
 *
 *   arrival ──route()──► (RTT/2) engine queue ──steps──► first token
 *      │                                                     │ (RTT/2)
 *      │                                  lr_router_first_token ◄┘
 *      │                              ... lr_router_complete (RTT/2 after
 *      │                                  the last token)
 *   every scrape period: engine state sampled (RTT/2 away), delivered to
 *   lr_router_set_stats after another RTT/2 with its sample time, plus an
 *   RTT probe (lr_router_observe_rtt, with jitter); with LoRA traffic, the
 *   engine's adapters too (lr_router_set_adapters)
 *
 * A discrete-event simulation on integer microseconds; events at equal
 * times run in the order they were scheduled, so a run is a pure function
 * of its configuration. No wall clock enters any decision: the time spent
 * in lr_router_route() is measured (CLOCK_MONOTONIC) and only reported. */
#ifndef LRSIM_SIM_H
#define LRSIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "engine.h"
#include "params.h"
#include "util.h"
#include "workload.h"

/* Decision reasons lrsim keeps counts of: at least lr_reason_count() of
 * the library it runs (a run fails otherwise). */
#define SIM_REASONS 32

/* Gateway replicas (--replicas, --front, --sync): n routers, each a full
 * lr_router, behind a front load balancer, sharing what they know (or
 * not). n = 1 is a single router, as without these options. */
enum { SIM_FRONT_RANDOM, SIM_FRONT_ROUND_ROBIN, SIM_FRONT_SESSION };
enum {
    SIM_SYNC_NONE,
    SIM_SYNC_EVENTS,       /* the engines' KV events alone */
    SIM_SYNC_DELTAS,       /* the routers' own placements, as deltas */
    SIM_SYNC_EVENTS_DELTAS, /* both: routes learn, peers hear of them by
                             * deltas, the engines' events correct them */
    SIM_SYNC_EVENTS_LEARN   /* the engines' events, and each router's own
                             * placements, shared with no one */
};
#define SIM_MAX_REPLICAS 64u

struct sim_replicas {
    uint32_t n;        /* routers (1..SIM_MAX_REPLICAS) */
    int front;         /* SIM_FRONT_*: who gets each request */
    int sync;          /* SIM_SYNC_*: none; every engine's KV events to
                        * every router (routes learn nothing themselves);
                        * deltas every delta_us; events and deltas; or
                        * events, routes learning for themselves */
    uint64_t delta_us; /* deltas: publication period */
    double loss;       /* deltas: share of deliveries lost, [0, 1) */
    uint64_t gauge_us; /* load gauges' period when n > 1 and sync is not
                        * none (100 ms); 0: none */
    uint64_t full_us; /* deltas: a full publication at least this often,
                       * what heals a lost one (10 s, as AIBrix syncs) */
    int eviction; /* the routers' lr_eviction; -1: LR_EVICT_LRU for
                   * replicas sharing deltas, else the library's default */
};

/* Whether the replicas take the engines' events, and exchange deltas. */
static inline int
sim_sync_events(const struct sim_replicas *r)
{
    return r->sync == SIM_SYNC_EVENTS || r->sync == SIM_SYNC_EVENTS_DELTAS ||
           r->sync == SIM_SYNC_EVENTS_LEARN;
}

static inline int
sim_sync_deltas(const struct sim_replicas *r)
{
    return r->sync == SIM_SYNC_DELTAS || r->sync == SIM_SYNC_EVENTS_DELTAS;
}

/* Parse --front and --sync values into r (0, or -1 with err). */
int sim_front_parse(const char *v, struct sim_replicas *r, struct sim_err *err);
int sim_sync_parse(const char *v, struct sim_replicas *r, struct sim_err *err);
/* "4 x random, deltas:100:0.1" */
void sim_replicas_describe(const struct sim_replicas *r, char *buf,
                           size_t len);

/* --admit: how the gateway hands requests to the router. now: route()
 * sends every request at once (what lrsim always did); queue: requests
 * are routed with LR_ROUTE_MAY_WAIT (their class's urgency and deadline,
 * their tenant) and the router's queue lets them out through
 * lr_router_dispatch(). */
enum { SIM_ADMIT_NOW = 0, SIM_ADMIT_QUEUE = 1 };

struct sim_config {
    const struct sim_workload *w;
    const struct sim_cluster *c;
    int32_t policy; /* an lr_policy value */
    uint64_t seed;  /* the router's seed and the probe jitter's */
    uint32_t block_tokens; /* engine block = router index block (16) */
    uint64_t index_blocks; /* router index capacity; 0: the cluster's KV */
    uint64_t marks;        /* lr_router_options.marks */
    uint64_t queue_tokens; /* lr_router_options.queue_tokens; 0: default */
    uint64_t scrape_us;    /* engine metrics period (100 ms) */
    uint64_t sample_us;    /* load-CV sampling period (100 ms) */
    double slo_ttft_s;     /* 5 s */
    double probe_jitter;   /* RTT probes: x (1 +- jitter), uniform; 0.05 */
    int rebalance;         /* carry out DualMap's rebalancing plans */
    /* check engine invariants (tests): 0 never; N > 0 after an engine's
     * 1st, (N+1)th, (2N+1)th... step (1: after every step), of both
     * engines after every KV transfer, and of every engine at the end of
     * the run */
    int verify_engines;
    /* every policy's router: parameters set after create (and after the
     * SLO, so a ttft-slo-s here wins) */
    const struct sim_param *params;
    size_t n_params;
    /* the class speeds the router is told (lr_router_set_class); zeroed =
     * nominal, the true ones */
    struct sim_rates rates;
    /* TTFT (and lodestar's prediction error) of the requests arriving
     * before and from this time, also reported; SIM_NEVER: none */
    uint64_t split_us;
    /* lodestar only. The host's learning thread is an event every
     * learn_us that calls lr_router_learn_step() and takes no simulated
     * time; none at or after freeze_us (SIM_NEVER: never frozen). */
    uint64_t learn_us;     /* 1 s */
    uint64_t freeze_us;
    uint32_t lodestar_min;    /* lr_learner_options.min_samples; 0: its default */
    uint32_t lodestar_every;  /* retrain_every; 0: default */
    uint32_t lodestar_epochs; /* epochs; 0: default */
    double lodestar_max_reward; /* max_abs_reward (s); 0: default (15) */
    int keep_samples; /* copy lr_router_learner_samples() into the result */
    struct sim_replicas rep; /* n = 1: a single router */
    int admit; /* SIM_ADMIT_* */
    /* LoRA (traffic with adapters): every engine's adapter slots (vLLM's
     * --max-loras; 0: no LoRA, adapter requests fail) and the time a step
     * spends loading an adapter. The routers are told both (max_adapters,
     * LR_PARAM_ADAPTER_LOAD_S) and get each engine's adapters with its
     * stats (lr_router_set_adapters). */
    uint32_t max_loras;       /* 4 */
    uint64_t adapter_load_us; /* 100 ms */
    /* CPU tier (vLLM's OffloadingConnector; engine.h): each engine's
     * host-memory blocks (0: none), and what a load from it costs: KV
     * bytes per token over the host link's bandwidth (GB/s, 1e9 bytes).
     * With --sync events the engines publish the tier's stores and drops
     * (lr_kv_stored.tier = LR_TIER_CPU). */
    uint32_t cpu_blocks;
    double cpu_load_gbps;      /* 25: PCIe 4.0 x16, achieved */
    double kv_bytes_per_token; /* 131072: the classes' 8B model, bf16 */
    /* Disaggregated fleets (instances of role prefill): a split request's
     * KV moves from its prefill to its decode instance in
     *   setup + (prompt tokens the decode engine lacks) x kv_bytes_per_token
     *           / kv_gbps[level]
     * level: sim_placement_level (one node, rack, region, across regions;
     * the library's defaults 300, 50, 12.5, 1.25 GB/s). Links are not
     * contended: transfers at once over one link each take the full
     * bandwidth. The routers are told the same figures (LR_PARAM_KV_*;
     * a --param names them otherwise). */
    double kv_gbps[4];
    uint64_t kv_setup_us; /* 1 ms */
};

#define SIM_NEVER UINT64_MAX

/* Fill defaults (everything but w, c, policy). */
void sim_config_init(struct sim_config *cfg);

/* How a request ended. Expired: its deadline passed while it waited in
 * the router's queue; shed: refused at arrival (LR_EBUSY); both only with
 * --admit queue, and neither is served. */
enum {
    REQ_PENDING = 0,
    REQ_DONE = 1,
    REQ_FAILED = 2,
    REQ_EXPIRED = 3,
    REQ_SHED = 4
};

/* One point of lodestar's learning curve: taken at every learning event
 * (and once at the end of the run). Counts marked "since" cover the time
 * since the previous point. */
struct sim_learn_point {
    double t_s;           /* simulated time */
    int stepped;          /* lr_router_learn_step() was called */
    int trained;          /* and published a model */
    uint64_t samples;     /* lr_learner_stats: samples queued, ever */
    uint64_t model_round; /* rounds of the model in service (0: none) */
    uint64_t model_samples;
    double model_mse;     /* its training error, s^2 */
    double online_mae;    /* the learner's: last 256 predicted samples, s */
    /* lrsim's own check, since: |predicted - observed TTFT| over the first
     * tokens of requests the model scored (NAN if none) */
    double pred_mae;
    uint64_t pred_n;
    uint64_t decisions;     /* since */
    uint64_t by_reason[SIM_REASONS]; /* since */
    double step_wall_s;     /* measured time in the call; never compared */
};

/* TTFT and TPOT of the requests that arrived in a window of the run. */
struct sim_window {
    uint64_t requests, completed;
    double ttft_mean_s, ttft_p50_s, ttft_p99_s;
    double tpot_mean_s, tpot_p50_s, tpot_p99_s;
    double pred_mae; /* lrsim's prediction error check (lodestar), or NAN */
    uint64_t pred_n;
};

/* Per instance, as the engine model measured it. */
struct sim_inst_result {
    uint64_t requests; /* routed there (after moves) */
    uint64_t query_tokens, hit_tokens;
    uint64_t preemptions;
    uint64_t evicted_blocks;
    double mean_pending; /* pending prefill tokens, time-averaged */
    double busy_frac;    /* share of the run spent in steps */
    uint64_t peak_used_blocks, capacity_blocks;
    uint64_t adapter_loads; /* LoRA adapters it loaded */
    uint64_t cpu_hit_tokens; /* CPU tier: tokens loaded from it */
    uint32_t model;         /* with models: the model it serves */
};

/* Per request class (--mix): its requests and how they ended. SLO
 * attainment counts every request of the class: an expired, shed or
 * failed one is a miss. */
struct sim_rclass_result {
    uint64_t requests, met, completed, expired, shed, failed, waited;
    double slo_attainment; /* met / requests */
    double goodput_rps;    /* met per second of the arrival window */
    double ttft_mean_s, ttft_p99_s; /* completed requests */
    double tpot_mean_s, tpot_p99_s; /* ... of 2 or more output tokens */
    double wait_mean_s;    /* in the router's queue, of those dispatched */
};

/* Per tenant (--tenants). Tokens are prompt + output; "served" counts
 * those served while requests arrived (a prompt at its first token, the
 * output evenly over its decode), so a fleet that is overloaded
 * throughout shows whom it served. */
struct sim_tenant_result {
    uint64_t requests, met, completed, expired, shed, failed;
    double demand_share;  /* its share of the tokens that arrived */
    double service_share; /* its share of the tokens served */
    double slo_attainment;
    double ttft_mean_s;
    double tpot_mean_s;
    double backlogged; /* share of the fairness windows it was backlogged */
};

struct sim_result {
    int32_t policy;
    char policy_name[32];
    char router_rates[40]; /* cfg->rates, described (sim_rates_describe) */
    size_t n_reqs;
    uint32_t n_inst;
    /* per request */
    uint64_t *ttft_us; /* client-side; 0 if failed */
    uint64_t *e2e_us;
    uint64_t *decode_us; /* its first token to its last, at the engine:
                          * TPOT = decode_us / (output_tokens - 1) */
    uint32_t *inst;      /* instance it ran on (last one) */
    uint32_t *hit;       /* tokens its first admission found cached */
    uint32_t *route_ns;  /* measured time of its route() call */
    uint8_t *state;      /* REQ_* */
    uint8_t *finishes;   /* how many times it finished (must be 1) */
    uint8_t *waited;     /* it waited in the router's queue (--admit queue) */
    uint64_t *wait_us;   /* how long, until dispatched or expired */
    uint64_t *gone_us;   /* when it ended unserved (expired, shed, failed) */
    uint32_t *prefill_inst; /* a split request's prefill instance, else
                             * UINT32_MAX */
    uint64_t *prefill_us;   /* ... arrival to its prefill's end */
    uint64_t *transfer_us;  /* ... its KV transfer's time */
    uint8_t *prefill_dones; /* lr_router_prefill_done calls (must be 1 for
                             * a split request that finished, else 0) */
    float *pred_ttft_s;  /* lodestar's predicted TTFT when its model chose
                          * (min-cost, k-filter, explore); else NAN */
    struct sim_inst_result *per_inst;
    /* aggregates (computed by sim_run) */
    uint64_t completed, failed, route_errors;
    double ttft_mean_s, ttft_p50_s, ttft_p95_s, ttft_p99_s;
    /* time per output token after the first (sim_req_tpot), over the
     * completed requests of 2 or more output tokens (tpot_n) */
    double tpot_mean_s, tpot_p50_s, tpot_p99_s;
    uint64_t tpot_n;
    double e2e_p50_s, e2e_p95_s;
    double cache_hit_rate;    /* engine-measured: hit / query tokens */
    double router_hit_belief; /* what the router expected, same ratio */
    double load_cv;
    double slo_attainment;
    double goodput_rps;
    double makespan_s;
    uint64_t preemptions, moves, events, steps;
    uint64_t by_reason[SIM_REASONS];
    double param_w_rtt, param_w_queue; /* gorgo's tuned weights, else NAN */
    /* lodestar: the learning curve, the learner's final counters, and
     * (with keep_samples) its samples, LR_LODESTAR_FEATURES + 1 floats per
     * row: the features, then the reward (-TTFT, s) */
    struct sim_learn_point *curve;
    size_t n_curve, cap_curve;
    uint64_t learn_steps, learn_rounds, learn_samples;
    uint64_t learn_dropped_full, learn_dropped_range;
    double pred_mae; /* lrsim's check over the whole run, or NAN */
    uint64_t pred_n;
    float *samples;
    size_t n_samples;
    double learn_wall_s; /* measured time in learn steps */
    /* with cfg.split_us */
    int has_split;
    struct sim_window before, after;
    /* totals for the conservation checks */
    uint64_t input_tokens, output_tokens, sampled_tokens;
    uint64_t query_tokens, hit_tokens, prefilled_tokens, abandoned_tokens;
    /* slots engines (SIM_CACHE_SLOTS) in the cluster: their counters and
     * the router's predicted cached tokens (what it expected where it
     * sent each request), against which hit_tokens is what they
     * delivered */
    int has_slots;
    uint64_t slot_hits, host_hits, host_saves, host_drops;
    uint64_t predicted_tokens;
    /* replicas: the setting, described, and what they exchanged */
    uint32_t replicas;
    char replicas_desc[48];
    uint64_t deltas_sent, delta_bytes, deltas_dropped;
    uint64_t gauges_sent, gauge_bytes;
    uint64_t kv_events, kv_unplaced;
    /* admission: with request classes, tenants or --admit queue
     * (has_admission), how requests ended and whom the fleet served */
    int has_admission;
    int admit; /* SIM_ADMIT_* */
    uint64_t expired, shed, n_waited; /* requests */
    double wait_mean_s;   /* router queue, of the dispatched ones */
    double arrival_span_s; /* first to last arrival: goodput's unit */
    /* the routers' own counts (lr_router_stats, summed over replicas) */
    uint64_t router_waited, router_dispatched, router_expired, router_shed;
    uint32_t n_rclasses;
    struct sim_rclass_result rclass[SIM_MAX_RCLASSES];
    uint32_t n_tenants;
    struct sim_tenant_result tenant[SIM_MAX_TENANTS];
    /* Jain's index of the tenants' service, each over its max-min fair
     * share, per window of the arrival period, averaged (see sim.c,
     * fairness()); NAN with fewer than 2 tenants */
    double jain;
    uint32_t jain_windows;
    double jain_window_s;
    /* LoRA and models: when the traffic names adapters (has_adapters),
     * the engines' adapter loads, and of those the loads that evicted a
     * resident adapter; has_models when it names models */
    int has_adapters, has_models;
    uint64_t adapter_loads, adapter_evictions;
    /* CPU tier (cfg.cpu_blocks > 0): the engines' loads from it
     * (admissions, tokens, the time they added to steps), blocks copied
     * to it and dropped from it; the tier's KV events (stores and drop
     * batches) sent to the routers, and the stores they could not place
     * (no hash known; also in kv_unplaced) */
    int has_cpu_tier;
    uint64_t cpu_hits, cpu_hit_tokens, cpu_stored_blocks, cpu_evicted_blocks;
    double cpu_load_s;
    uint64_t kv_cpu_events, kv_cpu_unplaced;
    /* disaggregation (a cluster with prefill instances): requests split,
     * the KV they moved, the transfers' mean time, the tokens decode
     * engines received */
    int has_pd;
    uint64_t n_split, kv_transfer_bytes, received_tokens;
    double transfer_mean_s;
    /* measured (vary between runs; never compared) */
    double route_ns_p50, route_ns_p99, route_ns_mean;
    double wall_s;
};

/* Run one policy. Returns 0; 1 if the library does not support the policy
 * (err says so; nothing else happened); -1 on error (err). The result is
 * filled on 0 and must be released with sim_result_free() in every case. */
int sim_run(const struct sim_config *cfg, struct sim_result *out,
            struct sim_err *err);
void sim_result_free(struct sim_result *r);

/* Free the per-request arrays (and lodestar's samples), keeping the
 * aggregates, the per-instance figures and the learning curve: what the
 * table and the JSON use. The suite keeps hundreds of results at once. */
void sim_result_drop_requests(struct sim_result *r);

/* Request q's TPOT (time per output token after the first, s) in *tpot_s:
 * its decode_us / (output_tokens - 1). 1 if it has one (served, with 2 or
 * more output tokens), else 0. Needs the per-request arrays. */
int sim_req_tpot(const struct sim_result *r, const struct sim_workload *w,
                 size_t q, double *tpot_s);

/* Percentile (linear interpolation between order statistics, as numpy's
 * default) of v[0..n) sorted ascending; NAN for n == 0. */
double sim_percentile(const double *sorted, size_t n, double p);

#endif /* LRSIM_SIM_H */
