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
    /* With --mix and --tenants (sim_workload_mix): the request's class, an
     * index into sim_workload.mix.cls, and the tenant whose fair share it
     * counts against (lr_request.tenant), 0 .. mix.n_tenants - 1. Both 0
     * without them. Unlike `tenant`, the fair-share tenant does not
     * separate cached prefixes. */
    uint32_t rclass;
    uint32_t owner;
};

/* ---- request classes, tenants, bursts --------------------------------------- */

#define SIM_MAX_RCLASSES 8
#define SIM_MAX_TENANTS 64
#define SIM_RCLASS_NAME 16

/* A request class: what its clients ask of the first token. */
struct sim_rclass {
    char name[SIM_RCLASS_NAME];
    uint32_t urgency; /* lr_request.urgency: 0 (most urgent) .. 7 */
    double slo_s;     /* TTFT objective; with --admit queue the deadline */
    int sheddable;    /* --admit queue: routed with LR_ROUTE_SHEDDABLE */
    double share;     /* of the requests (the shares sum to 1) */
};

/* What --mix, --tenants and --burst lay over a workload's requests. Zeroed:
 * nothing (the workload as generated or read). */
struct sim_mix {
    struct sim_rclass cls[SIM_MAX_RCLASSES];
    uint32_t n_cls;    /* 0: no classes */
    double tenant_w[SIM_MAX_TENANTS]; /* relative request rates */
    uint32_t n_tenants; /* 0: no tenants */
    double burst;       /* on-off bursts: peak / mean rate; <= 1: none */
    double burst_period_s;
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
    struct sim_mix mix; /* what sim_workload_mix() laid over it */
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

/* --mix LIST: "NAME=SHARE[:URGENCY:SLO_S][:shed]", comma-separated. The
 * built-in names interactive (urgency 0, SLO 2 s) and batch (4, 60 s) may
 * leave out urgency and SLO; other names must give them. Shares are
 * normalized. 0 or -1 (err). */
int sim_mix_parse_classes(const char *spec, struct sim_mix *m,
                          struct sim_err *err);

/* --tenants N (N tenants of equal rates) or W1,W2,... (one tenant per
 * weight, its rate in proportion). 0 or -1 (err). */
int sim_mix_parse_tenants(const char *spec, struct sim_mix *m,
                          struct sim_err *err);

/* --burst X[:PERIOD_S]: X >= 1, period 60 s unless given. 0 or -1 (err). */
int sim_mix_parse_burst(const char *spec, struct sim_mix *m,
                        struct sim_err *err);

/* Lay m over w, drawing from seed (a stream of its own: the requests, their
 * tokens and arrival order are those of the workload without it):
 *   - each request gets a class by the shares and a tenant by the weights;
 *     the turns of one session share both (drawn from the session id);
 *   - bursts move the arrivals: every period of the original time is
 *     squeezed into its first period / X, so the traffic comes in waves
 *     at X times the mean rate, the mean rate unchanged (an on-off
 *     modulated Poisson process, when the arrivals were Poisson).
 * Copies m into w->mix. */
void sim_workload_mix(struct sim_workload *w, const struct sim_mix *m,
                      uint64_t seed);

/* Does w carry classes or tenants? */
int sim_mix_any(const struct sim_mix *m);

/* "interactive 30% (urgency 0, SLO 2 s), batch 70% (4, 60 s, sheddable);
 * 4 tenants 10:1:1:1; bursts x4 every 60 s", or "" for none. */
void sim_mix_describe(const struct sim_mix *m, char *buf, size_t len);

/* The TTFT objective of request r: its class's, or `dflt` without
 * classes. */
double sim_req_slo(const struct sim_workload *w, size_t r, double dflt);

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
