/* When each instance last took a route through a prefix: a fixed table
 * of (prefix key, instance) -> time, a policy state of its own
 * (LR__STATE_RECENCY) filled at dispatch for the policies that read a
 * cached prefix's age (LR__NEEDS_AGE: Lodestar's decayed hit ratio,
 * adaptive's "not cached yet"). Lossy on purpose: a slot holds the last pair
 * hashed to it, and an overwritten pair reads as unknown (-1), never as another
 * pair's age. Beside it, which prompt last went through each of a route's
 * boundaries on its instance: the rows' sibling columns (lr_candidate's
 * sibling_tokens, sibling_fork_tokens), read by adaptive. */
#ifndef LIBROUTE_LIB_RECENCY_H
#define LIBROUTE_LIB_RECENCY_H

#include "common/common.h"
#include "libroute/lr_policy.h"
#include "libroute/lr_router.h"

struct lr__route_view;

struct lr__recency_slot;
struct lr__branch_slot;

struct lr__recency {
    struct lr__recency_slot *slots; /* NULL until set up */
    uint64_t sum; /* sum over the slots of a hash of (slot, tag, time) */
    /* The branches: (boundary key, instance) -> the last prompt routed
     * to the instance through that boundary (its last key, its length,
     * when): who went on past a point of a prompt, for the rows' sibling
     * columns. Lossy like the slots. */
    struct lr__branch_slot *br;
    uint64_t br_sum;
};

/* Make the table, once (no-op when it exists); on failure nothing is
 * kept. */
lr_status lr__recency_setup(struct lr__recency *t, struct lr__mem *m);
void lr__recency_free(struct lr__recency *t, struct lr__mem *m);

/* Seconds since `id` was last routed through the prefix whose chained key
 * is `key`, or -1 when unknown (or no table). */
double lr__recency_age(const struct lr__recency *t, uint64_t key, uint32_t id,
                       uint64_t now_ns);

/* Remember that `id` took a route through these prefix keys now. */
void lr__recency_remember(struct lr__recency *t, const uint64_t *keys,
                          size_t n_keys, uint32_t id, uint64_t now_ns);

/* How many of q's boundaries (ascending, as route() checks; at most
 * LR_INDEX_MAX_TOKENS of them, each at most the prompt's length) lie
 * before token `limit`: a binary search, so that a prompt of many
 * boundaries costs a row no more than a few. */
static inline size_t
lr__boundaries_before(const lr_request *q, uint32_t limit)
{
    return lr__lower_bound_u32(q->boundaries, sizeof *q->boundaries, 0, 0,
                               (uint32_t)q->n_boundaries, limit);
}

/* Row c's sibling columns (lr_candidate's sibling_tokens and
 * sibling_fork_tokens) for the route in v, from its hit there
 * (c->cached_tokens) and the branches; left as they are when there is
 * nothing to say. */
void lr__recency_siblings(const struct lr__recency *t, lr_candidate *c,
                          const struct lr__route_view *v, uint64_t now_ns);

/* Remember that the route in v went to `id` through its boundaries (the
 * last 16 short of its end) and on to its last block. */
void lr__recency_branch(struct lr__recency *t, const struct lr__route_view *v,
                        uint32_t id, uint64_t now_ns);

/* Fold the table into a digest: O(1), from the running sum that
 * remember keeps, so a caller may take it around every call. */
uint64_t lr__recency_digest(const struct lr__recency *t, uint64_t d);

#endif /* LIBROUTE_LIB_RECENCY_H */
