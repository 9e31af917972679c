/* lrsim: a workload is a list of requests in arrival order. A request's
 * prompt is a list of segments, each a run of tokens named by a seed
 * (util.h sim_token), so a 12k-request trace with 145M prompt tokens takes a
 * few megabytes and any prompt is regenerated exactly when it is routed:
 *
 *   request 7: arrival 12.5 s, 1400 in, 90 out
 *     segs: [sys prompt 3, 800 tok][user 7.1, 240][reply 7.1, 160][user 7.2, 200]
 *            ^ shared by every request that names seed "sys prompt 3"
 *
 * Equal seeds at equal positions give equal tokens, hence equal prefixes:
 * the prefix structure the router and the engines' caches see comes only
 * from which segments requests share. */
#ifndef LRSIM_WORKLOAD_H
#define LRSIM_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct sim_seg {
    uint64_t seed;
    uint32_t len;
    /* 1 if the segment ends a chat message (passed to the router as a
     * boundary); trace blocks are not messages. */
    uint32_t boundary;
};

struct sim_req {
    uint64_t arrival_us; /* simulated time, from 0 */
    uint32_t input_tokens;
    uint32_t output_tokens;
    size_t seg_first; /* into sim_workload.segs */
    uint32_t n_segs;
    uint32_t has_session;
    uint64_t session;
    uint64_t tenant; /* tenant salt: 0 for every built-in workload */
};

struct sim_workload {
    char name[64];
    char desc[256];
    struct sim_req *reqs;
    size_t n_reqs, cap_reqs;
    struct sim_seg *segs;
    size_t n_segs, cap_segs;
    /* Suggested cluster and its rationale (built-in generators only). */
    char cluster[96];
    uint64_t seed;
    double rate; /* mean arrival rate it was generated with, req/s; 0 for traces */
};

/* Parameters a user may override on any generator. 0 / NAN = the
 * generator's own default. */
struct sim_gen_opts {
    uint64_t seed;
    size_t requests; /* 0: the generator's default */
    double rate;     /* req/s; 0: default */
};

void sim_workload_init(struct sim_workload *w);
void sim_workload_free(struct sim_workload *w);

/* Append a request whose segments are `segs[0..n)`; input_tokens is their
 * total length. 0 or -1 (out of memory / absurd length, err set). */
int sim_workload_add(struct sim_workload *w, uint64_t arrival_us,
                     uint32_t output_tokens, const struct sim_seg *segs,
                     uint32_t n, uint64_t session, int has_session,
                     struct sim_err *err);

/* Keep the first n requests (by arrival order). */
void sim_workload_truncate(struct sim_workload *w, size_t n);

/* Sort requests by arrival time, stably. 0 or -1 (out of memory). */
int sim_workload_sort(struct sim_workload *w, struct sim_err *err);

/* Multiply arrival times by `scale` (> 0). */
void sim_workload_scale_time(struct sim_workload *w, double scale);

/* Spread the requests that share an arrival time uniformly over
 * [t, t + window_us) (a trace that rounds its timestamps replays its
 * arrivals as bursts otherwise), drawing from seed, then sort again.
 * 0 or -1 (out of memory). */
int sim_workload_spread(struct sim_workload *w, uint64_t window_us,
                        uint64_t seed, struct sim_err *err);

/* Expand request r's prompt into tokens (capacity >= input_tokens) and,
 * if bnd is non-NULL, its message ends (capacity >= n_segs) into bnd and
 * *n_bnd. */
void sim_workload_tokens(const struct sim_workload *w, size_t r, uint32_t *tok,
                         uint32_t *bnd, size_t *n_bnd);

/* Totals for reports. */
struct sim_workload_info {
    size_t requests;
    uint64_t input_tokens, output_tokens;
    uint32_t max_input;
    double duration_s; /* last arrival */
};
void sim_workload_info(const struct sim_workload *w,
                       struct sim_workload_info *out);

/* ---- built-in generators ------------------------------------------------- */

struct sim_generator {
    const char *name;
    const char *summary;
    const char *cluster; /* the cluster it is meant for */
    int (*build)(const struct sim_gen_opts *o, struct sim_workload *w,
                 struct sim_err *err);
};

/* The table of generators, NULL-terminated. */
extern const struct sim_generator sim_generators[];

const struct sim_generator *sim_generator_find(const char *name);

/* The workload lrsim runs with no arguments. */
#define SIM_DEFAULT_WORKLOAD "conversation"

#endif /* LRSIM_WORKLOAD_H */
