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
    /* With --adapters and --models (sim_workload_lora): its LoRA adapter,
     * 1 .. lora.n_adapters (0: the base model), and its model, an index
     * into the model names (0 without --models, when it names none). */
    uint32_t adapter;
    uint32_t model;
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

/* ---- LoRA adapters and models ----------------------------------------------- */

#define SIM_MAX_ADAPTERS 4096u
#define SIM_MAX_MODELS 4u
#define SIM_ADAPTER_NAME 16 /* "lora-0001" */

/* Who keeps an adapter: each request (a session keeps its first turn's
 * in the window), or each system prompt (a request's first segment: the
 * requests sharing a prompt run under one adapter, the prompt's rank
 * drawn once). */
enum { SIM_ADAPTER_BY_REQUEST = 0, SIM_ADAPTER_BY_PROMPT = 1 };

/* What --adapters, --adapter-* and --models lay over a workload. Zeroed:
 * nothing (sim_lora_init sets the defaults of the rest). */
struct sim_lora {
    uint32_t n_adapters; /* 0: no adapter */
    double zipf;         /* rank r is drawn with weight (r + 1)^-zipf (1) */
    double share;        /* of the requests (sessions, prompts) that run
                          * under an adapter; the rest: the base model (1) */
    double shift_s;      /* > 0: every shift_s the ranking rotates by a
                          * quarter of the adapters */
    int by;              /* SIM_ADAPTER_BY_* */
    uint32_t n_models;   /* 0: one model, which requests do not name */
    double model_w[SIM_MAX_MODELS]; /* relative request rates */
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
    struct sim_lora lora; /* what sim_workload_lora() laid over it */
    /* adapter a's name at adapter_names + a * SIM_ADAPTER_NAME and its
     * lr_name_hash() at adapter_hash[a], a = 1 .. lora.n_adapters (entry
     * 0: none, hash 0) */
    char *adapter_names;
    uint64_t *adapter_hash;
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

/* Defaults: Zipf 1, share 1, no shift, by request, no models. */
void sim_lora_init(struct sim_lora *l);

/* --models N (N models of equal rates) or W1,W2,... (one model per
 * weight), at most SIM_MAX_MODELS. 0 or -1 (err). */
int sim_lora_parse_models(const char *spec, struct sim_lora *l,
                          struct sim_err *err);

/* Lay l over w (nothing without adapters or models), drawing from seed
 * (a stream of its own: the requests, their tokens and arrival order are
 * those of the workload without it):
 *   - a request runs under an adapter with probability share, of rank r
 *     drawn by Zipf(zipf) over the n_adapters; by request, a session keeps
 *     what its first turn in the window drew; by prompt, every request of
 *     a first segment has its draw;
 *   - with shift_s, rank r at time t is adapter
 *     1 + (r + floor(t / shift_s) x ceil(n / 4)) mod n, so the hot set
 *     moves every shift_s (a session keeps the adapter of its first turn);
 *   - with models, each request (each session) draws a model by the
 *     weights; an adapter belongs to one model, drawn by the weights from
 *     its name, and its requests name that model.
 * Copies l into w->lora. 0 or -1 (out of memory). */
int sim_workload_lora(struct sim_workload *w, const struct sim_lora *l,
                      uint64_t seed, struct sim_err *err);

/* Adapter a's name ("lora-0007"); NULL for 0. Model m's name. */
const char *sim_adapter_name(const struct sim_workload *w, uint32_t a);
const char *sim_model_name(uint32_t m);

/* The salt request r's blocks are keyed with, by the engines and by the
 * router: its tenant's, under its adapter lr_adapter_salt(tenant,
 * lr_name_hash(adapter)). */
uint64_t sim_req_salt(const struct sim_workload *w, size_t r);

/* Which model each of n instances serves (with models): the instances
 * split in proportion to the models' weights, interleaved (smooth
 * weighted round robin), each model at least one. 0, or -1 if there are
 * fewer instances than models. */
int sim_models_assign(const struct sim_workload *w, uint32_t n,
                      uint32_t *model_of);

/* "100 adapters by Zipf(1) per request, ranking rotating every 60 s; 2
 * models at 70:30", or "" for none. */
void sim_lora_describe(const struct sim_lora *l, char *buf, size_t len);

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
