/* adaptive: the library's own policy, a TTFT model per class of
 * instances calibrated from the first tokens the router observes, and a
 * choice that weighs what a placement costs the other requests. The
 * decide function is lr__adaptive_decide (policy.h); this header is the
 * router's side: the per-class calibration, the per-instance averages and
 * the per-request features that wait for a first token. */
#ifndef LIBROUTE_LIB_ADAPTIVE_H
#define LIBROUTE_LIB_ADAPTIVE_H

#include "common/common.h"
#include "libroute/lr_load.h"
#include "libroute/lr_policy.h"

/* One class's TTFT model (a class is a group of instances of one kind,
 * as the host set them up), fitted online:
 *
 *   TTFT - RTT = W x (s0 + s1 x D) + b0 + b1 x D
 *
 * W: the prefill tokens the request queued behind plus its own uncached
 * tokens at dispatch; D: the requests decoding on its instance then (the
 * router's own count). s0 is the class's seconds per prefill token, s1
 * how much each decoding request slows a prefill (it shares the steps),
 * b0 + b1 x D the step a first token waits for. Every term is >= 0.
 * Only first tokens whose own prefill was a fifth of W or more are
 * folded in (adaptive.c says why).
 * theta holds (s0, s1, b0, b1) in scaled units (see adaptive.c); A and
 * bv are the fit's discounted normal equations, prior and ridge the
 * prior it shrinks to; n counts the first tokens folded in. */
#define LR__CALIB_DIM 4
struct lr__calib {
    double theta[LR__CALIB_DIM];
    double A[LR__CALIB_DIM][LR__CALIB_DIM];
    double bv[LR__CALIB_DIM];
    double prior[LR__CALIB_DIM];
    double ridge[LR__CALIB_DIM];
    double w_mean; /* the typical W (scaled), for the contention term */
    uint32_t n;
};

/* A dispatch's features, kept until its first token (w and own in
 * thousands of tokens), and until it ends, the class it decodes on and
 * when its first token came. */
struct lr__calib_req {
    float w, own, d, rtt_s; /* w NaN: none; own: its uncached tokens */
    uint32_t cls;
    uint32_t loads; /* its adapter: 1 loaded in a free slot, 2 no slot free */
    float ahead;    /* adapters ahead of it for a slot; -1: none known */
    uint32_t dcls;  /* its decode instance's class; UINT32_MAX: none kept */
    uint64_t first_ns; /* its first token; 0: none yet */
};

/* A mean of seconds over the last samples (a running mean whose weight
 * stops falling at a memory of N samples). The seconds a class's engines
 * keep a first token waiting for a LoRA adapter, learnt from the first
 * tokens of requests that loaded one: what the class's TTFT model leaves
 * unexplained, averaged over the last ~LOAD_MEMORY loads; apart for loads
 * into a free slot and loads that found every slot held by adapters with
 * requests in flight (those wait for a slot to free, which takes a
 * request's decoding, not a load). And a class's decode seconds per
 * request, from first token to completion, over the last ~DECODE_MEMORY
 * completions. */
struct lr__load_fit {
    double s; /* the estimate */
    uint32_t n;
};

/* The seconds a first token waits per adapter queued ahead of it for a
 * slot (on an instance whose slots are all held, the other adapters with
 * work there beyond the slots but the one its own holds or waits for:
 * lr__adapters_ahead): the slope of a line fitted by least squares to what
 * the class's TTFT model left unexplained of the first tokens of adapter
 * requests, against the adapters they had ahead (0 for most), over the
 * last ~SLOT_MEMORY of them; apart for requests whose adapter was
 * resident there and those that loaded it. The decayed sums of the
 * normal equations: weight, x, x^2, y, x y. */
struct lr__slot_fit {
    double s0, sx, sxx, sy, sxy;
    uint32_t n;
};

/* An instance's queued prefill tokens, averaged over time. */
struct lr__qavg {
    uint64_t t_ns; /* last update; 0: none */
    double avg;
    double routes; /* routes here, decayed with the same time constant */
    double seen;   /* the share of the window observed: 1 - exp(-age / tau) */
};

struct lr__adaptive {
    uint32_t max_req, max_inst;
    struct lr__qavg *qavg;                            /* max_inst */
    struct lr__calib cls[LR_LOAD_MAX_CLASSES];        /* n == 0: the prior */
    struct lr__load_fit load[LR_LOAD_MAX_CLASSES][2]; /* free slot, none */
    struct lr__slot_fit slot[LR_LOAD_MAX_CLASSES][2]; /* resident, loads */
    struct lr__slot_fit slot_all[2];                  /* every class's */
    struct lr__load_fit decode[LR_LOAD_MAX_CLASSES];  /* decode_s */
    struct lr__calib_req *rq;                         /* max_req */
};

/* Make the calibration tables, once; on failure nothing is kept. */
lr_status lr__adaptive_setup(struct lr__adaptive *ad, struct lr__mem *m,
                             uint32_t max_inst, uint32_t max_req);
void lr__adaptive_free(struct lr__adaptive *ad, struct lr__mem *m);

/* The decay of the time averages from one update time to now, for the
 * rows of one route: lr__adaptive_observe stamps every candidate with the
 * same time, so one exp() serves them all. Start each route with
 * LR__KEEP_MEMO_INIT. */
struct lr__keep_memo {
    uint64_t t_ns; /* the update time `keep` is for; UINT64_MAX: none */
    double keep;
};
#define LR__KEEP_MEMO_INIT \
    {                      \
        UINT64_MAX, 0      \
    }

/* Write the row's class model, at the row's decoding count, into the row
 * (ttft_s_per_token, ttft_base_s; 0 before the class's first
 * observation), and its time averages brought to now. For a request of
 * adapter `adapter` (0: none), the wait learnt for it: its load, plus the
 * turns of the adapters queued ahead of it for a slot there, as the
 * router's residency `tab` counts them (lr__adapters_ahead): into
 * adapter_load_s when it must load, added to ttft_base_s when it is
 * resident. */
struct lr__adapters;
void lr__adaptive_fill(const struct lr__adaptive *ad, lr_candidate *row,
                       const struct lr__adapters *tab, uint64_t adapter,
                       uint64_t now_ns, struct lr__keep_memo *memo);

/* A route to instance `chosen` (and `chosen2`, a split request's prefill
 * instance, or LR_INSTANCE_NONE) was recorded at now_ns over these rows:
 * fold each instance's queued prefill into its time average, and count
 * the route at each. */
void lr__adaptive_observe(struct lr__adaptive *ad, const lr_candidate *rows,
                          uint32_t n, uint32_t chosen, uint32_t chosen2,
                          uint64_t now_ns);

/* A dispatch to `row`'s instance with `uncached` tokens to prefill and
 * `ahead` adapters queued ahead of it for a slot (< 0: not known): keep
 * the work it queued behind for its first token, and the seconds of it
 * the class's model does not explain beyond the row's RTT (beyond_s: a
 * split request's KV transfer and decode step). */
void lr__adaptive_dispatch(struct lr__adaptive *ad, uint32_t slot,
                           const lr_candidate *row, double uncached,
                           double ahead, double beyond_s);

/* The cached tokens a row's engine is expected to deliver: cached_tokens,
 * plus its lower tiers' tokens at their weights (rows of at least
 * LR_CANDIDATE_SIZE_V3 bytes), less the share it lately did not deliver
 * (cached_lost, in rows of at least LR_CANDIDATE_SIZE_V2 bytes). */
static inline double
lr__adaptive_delivered(const lr_candidate *row, size_t row_size,
                       const double *param)
{
    double lost = row_size >= LR_CANDIDATE_SIZE_V2 ? row->cached_lost : 0;
    if (row_size < LR_CANDIDATE_SIZE_V3 ||
        (row->cpu_tokens == 0 && row->disk_tokens == 0))
        return (double)row->cached_tokens * (1 - lost); /* as before tiers */
    /* a token on a lower tier is loaded, not computed: it counts at its
     * tier's weight (LR_PARAM_TIER_*_WEIGHT; llm-d's and Dynamo's) */
    double cached = (double)row->cached_tokens +
                    param[LR_PARAM_TIER_CPU_WEIGHT] * (double)row->cpu_tokens +
                    param[LR_PARAM_TIER_DISK_WEIGHT] * (double)row->disk_tokens;
    return cached * (1 - lost);
}

/* The request in `slot` got its first token after ttft_s (ttft_s < 0: it
 * ended without one, or moved): fold it into its class's model. */
void lr__adaptive_settle(struct lr__adaptive *ad, uint32_t slot, double ttft_s);

/* The request in `slot` ended at now_ns, completed or not (failed,
 * moved): a completion after a first token folds its decode seconds into
 * its decode class's mean; the slot keeps nothing of it after. */
void lr__adaptive_end(struct lr__adaptive *ad, uint32_t slot, uint64_t now_ns,
                      bool completed);

uint64_t lr__adaptive_digest(const struct lr__adaptive *ad, uint64_t d);

#endif /* LIBROUTE_LIB_ADAPTIVE_H */
