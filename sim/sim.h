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
 *   RTT probe (lr_router_observe_rtt, with jitter)
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
#include "util.h"
#include "workload.h"

struct sim_config {
    const struct sim_workload *w;
    const struct sim_cluster *c;
    int32_t policy; /* an lr_policy value */
    uint64_t seed;  /* the router's seed and the probe jitter's */
    uint32_t block_tokens; /* engine block = router index block (16) */
    uint64_t index_blocks; /* router index capacity; 0: the cluster's KV */
    uint64_t scrape_us;    /* engine metrics period (100 ms) */
    uint64_t sample_us;    /* load-CV sampling period (100 ms) */
    double slo_ttft_s;     /* 5 s */
    double probe_jitter;   /* RTT probes: x (1 +- jitter), uniform; 0.05 */
    int rebalance;         /* carry out DualMap's rebalancing plans */
    int verify_engines;    /* check engine invariants after every step */
};

/* Fill defaults (everything but w, c, policy). */
void sim_config_init(struct sim_config *cfg);

enum { REQ_PENDING = 0, REQ_DONE = 1, REQ_FAILED = 2 };

/* Per instance, as the engine model measured it. */
struct sim_inst_result {
    uint64_t requests; /* routed there (after moves) */
    uint64_t query_tokens, hit_tokens;
    uint64_t preemptions;
    uint64_t evicted_blocks;
    double mean_pending; /* pending prefill tokens, time-averaged */
    double busy_frac;    /* share of the run spent in steps */
    uint64_t peak_used_blocks, capacity_blocks;
};

struct sim_result {
    int32_t policy;
    char policy_name[32];
    size_t n_reqs;
    uint32_t n_inst;
    /* per request */
    uint64_t *ttft_us; /* client-side; 0 if failed */
    uint64_t *e2e_us;
    uint32_t *inst;      /* instance it ran on (last one) */
    uint32_t *hit;       /* tokens its first admission found cached */
    uint32_t *route_ns;  /* measured time of its route() call */
    uint8_t *state;      /* REQ_* */
    uint8_t *finishes;   /* how many times it finished (must be 1) */
    struct sim_inst_result *per_inst;
    /* aggregates (computed by sim_run) */
    uint64_t completed, failed, route_errors;
    double ttft_mean_s, ttft_p50_s, ttft_p95_s, ttft_p99_s;
    double e2e_p50_s, e2e_p95_s;
    double cache_hit_rate;    /* engine-measured: hit / query tokens */
    double router_hit_belief; /* what the router expected, same ratio */
    double load_cv;
    double slo_attainment;
    double goodput_rps;
    double makespan_s;
    uint64_t preemptions, moves, events, steps;
    uint64_t by_reason[16];
    double param_w_rtt, param_w_queue; /* gorgo's tuned weights, else NAN */
    /* totals for the conservation checks */
    uint64_t input_tokens, output_tokens, sampled_tokens;
    uint64_t query_tokens, hit_tokens, prefilled_tokens, abandoned_tokens;
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

/* Percentile (linear interpolation between order statistics, as numpy's
 * default) of v[0..n) sorted ascending; NAN for n == 0. */
double sim_percentile(const double *sorted, size_t n, double p);

#endif /* LRSIM_SIM_H */
