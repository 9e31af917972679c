/* Internal view of lr_learner for the router and tests. */
#ifndef LIBROUTE_LIB_LEARNER_H
#define LIBROUTE_LIB_LEARNER_H

#include "common/common.h"
#include "libroute/lr_learner.h"

/* Check learner options (and their network's) as lr_learner_create()
 * would, without making the learner. LR_ENOMEM is possible (a throwaway
 * network). */
lr_status lr__learner_check_options(const lr_learner_options *opt);

/* Checksum of the training side's logical state (FIFO and replay rows,
 * counters, queue positions, round); equal before and after a failed
 * step. Not concurrently with a step. */
uint64_t lr__learner_digest(const lr_learner *l);

/* Samples waiting in the queue; FIFO and replay sizes. Not concurrently
 * with a step. */
void lr__learner_sizes(const lr_learner *l, uint64_t *pending, uint32_t *fifo,
                       uint32_t *replay);

/* Serving side: take over a newly trained model (as lr_learner_score
 * does) and return the network in service, or NULL before the first. The
 * network stays valid until the next serving-side call. */
lr_mlp *lr__learner_model(lr_learner *l);

/* The serving side split in two for readers that run at once (a router's
 * decisions under its read lock): whether a newly trained model waits to
 * be taken (any thread), and the network in service without taking one
 * (readers, while no serving-side call runs: the caller's write lock
 * orders lr__learner_model() against them). */
bool lr__learner_incoming(const lr_learner *l);
lr_mlp *lr__learner_serving(const lr_learner *l);

/* Put `net` in service (a restored model; the learner takes it over) as
 * if a step had published it: the serving side takes it at once; the
 * sample buffers and the round count are unchanged. Not during a step
 * (LR_ESTATE); LR_ENOMEM changes nothing (net stays the caller's). */
lr_status lr__learner_install(lr_learner *l, lr_mlp *net);
/* The replay choice: greedy k-center (farthest point, cosine distance
 * 1 - dot) over m rows of w floats (L2-normalized), k picks into pick[k]
 * (learner.c says exactly which). LR_ENOMEM on scratch allocation
 * failure; LR_EINVAL when m is 0. */
lr_status lr__k_center(struct lr__mem *mem, const float *emb, size_t w,
                       size_t m, size_t k, uint32_t *pick);

#endif
