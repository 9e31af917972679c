/* Lodestar's state in a router: the learner, the features waiting for a
 * first token to become samples. The recency of (prefix, instance)
 * routes behind the decayed hit-ratio feature is the router's
 * (recency.h). The decide function is
 * lr__lodestar_decide (policy.h); the feature row is shared by both. */
#ifndef LIBROUTE_LIB_LODESTAR_H
#define LIBROUTE_LIB_LODESTAR_H

#include <stdatomic.h>

#include "common/common.h"
#include "libroute/lr_learner.h"
#include "libroute/lr_policy.h"

/* Lodestar's feature columns, laid out as lr_router.h lists them for
 * hosts: the numbers are part of the ABI. */
/* clang-format off */
enum lr__feature {
    LR__F_PROMPT = 0, LR__F_OUTPUT = 1,              /* the request */
    LR__F_HIT = 2, LR__F_HIT_DECAYED = 3,            /* its cached prefix */
    LR__F_INFLIGHT = 4, LR__F_QUEUED = 5,            /* the load tracker's */
    LR__F_PREFILL = 6, LR__F_DECODE = 7,
    LR__F_RUNNING = 8, LR__F_WAITING = 9, LR__F_KV_USE = 10, /* scraped */
    LR__F_RTT_MS = 11,
    LR__F_CLASS = 12, LR__F_CLASSES = 8 /* one-hot, LR__F_CLASSES columns */
};
/* clang-format on */

/* The feature row of a candidate for a request of `prompt` tokens and
 * `output` expected output tokens. */
void lr__lodestar_features(const lr_candidate *row, uint32_t prompt,
                           uint32_t output, float *f);

struct lr__lodestar {
    /* Read without the router's lock by lr_router_learn_step(), hence
     * atomic; it never changes once set. */
    _Atomic(lr_learner *) learner;
    lr_learner_options lopt;
    lr_mlp_options lmo;
    bool has_lmo;
    uint32_t max_req;
    float *rq_feat;  /* max_req x (F + 1): features, prediction per slot */
    uint8_t *rq_has; /* max_req: a sample waits for its first token */
};

/* Take the host's learner options (copied, checked as lr_learner_create
 * would); NULL: the defaults. */
lr_status lr__lodestar_init(struct lr__lodestar *ls,
                            const lr_learner_options *given,
                            const lr_allocator *a, uint32_t max_req);

/* Make the learner and the buffers, once; on failure nothing is kept. */
lr_status lr__lodestar_setup(struct lr__lodestar *ls, struct lr__mem *m);
void lr__lodestar_free(struct lr__lodestar *ls, struct lr__mem *m);

/* The network in service (serving side), or NULL. */
lr_mlp *lr__lodestar_model(struct lr__lodestar *ls);

/* A dispatch: keep the chosen row's features (and the model's
 * prediction, NaN if none) in request slot `slot` until its first token;
 * `ours` false clears the slot (another policy routed it). */
void lr__lodestar_dispatch(struct lr__lodestar *ls, uint32_t slot, bool ours,
                           const lr_candidate *row, uint32_t prompt,
                           uint32_t output, float predicted);

/* A request in slot `slot` leaves the queue (first token, ttft_s >= 0)
 * or ends without one (ttft_s < 0): its sample goes to the learner with
 * the TTFT clipped to max_ttft_s (the learner drops it beyond its
 * max_abs_reward), or nothing when there was no first token. */
void lr__lodestar_settle(struct lr__lodestar *ls, uint32_t slot, double ttft_s,
                         double max_ttft_s);

uint64_t lr__lodestar_digest(const struct lr__lodestar *ls, uint64_t d);

/* The learner of a Lodestar state (the router's, for the host's learner
 * calls; NULL for NULL). Read without the router's lock: the learner
 * trains on the host's thread. */
lr_learner *lr__lodestar_learner(const void *st);

#endif /* LIBROUTE_LIB_LODESTAR_H */
