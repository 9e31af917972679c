/* The policies: one table, one decide function each.
 *
 * A policy sees a struct lr__pctx and nothing else: the candidate rows
 * (public lr_candidate), the request's facts, the parameter values, a
 * random generator and, for Lodestar, a model. It writes a score per row
 * and returns a struct lr__choice. It never sees the router: the router
 * gathers the rows (lib/router/router.c), ranks them by the ring key the
 * policy's entry names, calls lr__policy_decide(), then records the
 * choice and updates the per-policy state it keeps (round-robin cursor,
 * DualMap's hotness window in lib/policy/dualmap.c, GORGO's tuner in
 * lib/policy/cost.c, Lodestar's samples in lib/policy/lodestar.c).
 * lr_policy_decide() (the public entry) builds the same context from the
 * caller's table.
 *
 *   router.c --gather--> rows[] --lr__policy_decide(p)--> choice
 *                          ^                  |
 *      index, ring, load --+     lr__policies[p].decide (policy.c,
 *                                dualmap.c, lodestar.c) -> cost.c formulas
 */
#ifndef LIBROUTE_LIB_POLICY_H
#define LIBROUTE_LIB_POLICY_H

#include <math.h>

#include "common/common.h"
#include "libroute/lr_policy.h"

/* How many of each enum this build has (the public headers name none of
 * these counts: hosts ask lr_policy_count() and friends). */
#define LR__POLICY_COUNT 17
#define LR__PARAM_COUNT 40
#define LR__REASON_COUNT 16

/* "No policy chose": a choice's decider before a policy has made it. */
#define LR__POLICY_NONE (-1)

/* The rows a policy reads besides the counters every row has. */
#define LR__NEEDS_MATCH 1u /* cached_tokens from the index */
#define LR__NEEDS_AGE 2u   /* cached_age_s (Lodestar's decayed hit ratio) */
#define LR__NEEDS_TREE 4u  /* tree_blocks (SGLang's smallest tree) */
#define LR__NEEDS_CALIB 8u /* ttft_s_per_token, ttft_base_s (adaptive) */

/* DualMap's decode bottleneck: a queue that saw no first token for this
 * long is stuck behind decoding (the router's gather computes stall_s). */
#define LR__DECODE_STALL_NS 3000000000ull

/* Everything a policy sees for one decision. */
struct lr__pctx {
    const lr_candidate *rows; /* n rows, `stride` bytes apart */
    size_t n;
    size_t stride;
    const double *param; /* LR__PARAM_COUNT values, in bounds */
    uint32_t prompt;     /* prompt tokens */
    uint32_t output;     /* expected output tokens (default applied) */
    uint32_t block_tokens;
    uint32_t last; /* round-robin cursor: instance served last, or NONE */
    lr_mlp *model; /* lodestar's scorer, or NULL */
    struct lr__rng *rng;
    double *score; /* n: out, NaN on entry */
};

/* A policy's pick. */
struct lr__choice {
    uint32_t k;      /* row index */
    int32_t reason;  /* lr_reason */
    double cost;     /* the policy's figure for the choice, or NaN */
    uint32_t alt;    /* the other candidate's instance id, or NONE */
    int32_t decider; /* the policy that chose */
};

struct lr__policy_def {
    const char *name;
    uint32_t needs;   /* LR__NEEDS_* */
    int32_t ring_key; /* LR_RING_KEY_* */
    uint32_t ring_k;  /* ranks it reads */
    struct lr__choice (*decide)(const struct lr__pctx *c);
};

/* The table of policies, indexed by lr_policy. */
extern const struct lr__policy_def lr__policies[LR__POLICY_COUNT];

/* Decide with policy p (0 .. LR__POLICY_COUNT - 1) on a context whose
 * scores are NaN; fills c->score and returns the choice. Never fails. */
struct lr__choice lr__policy_decide(int32_t p, const struct lr__pctx *c);

/* The ring key a router ranks rows by for policy p, and how many ranks;
 * Lodestar's is its fallback's when that one has a key. */
int32_t lr__policy_ring(int32_t p, const double *param, uint32_t *ranks);

/* What policy p needs gathered (LR__NEEDS_*), Lodestar's fallback's
 * needs included. */
uint32_t lr__policy_needs(int32_t p, const double *param);

/* ---- parameters ---------------------------------------------------------- */

/* Bounds of parameter `key` (0 .. LR__PARAM_COUNT - 1). */
const struct lr__range *lr__param_def(int32_t key);

/* Fill `param` with every default. */
void lr__param_defaults(double *param);

/* LR_OK if `value` may be set for `key`, else LR_EINVAL (NaN, fraction for
 * an integer key) or LR_ERANGE. */
lr_status lr__param_check(int32_t key, double value);

/* ---- helpers the policy files share ---------------------------------------- */

static inline const lr_candidate *
lr__row(const struct lr__pctx *c, size_t k)
{
    return (const lr_candidate *)((const char *)c->rows + k * c->stride);
}

#define LR__P(c, key) ((c)->param[LR_PARAM_##key])

/* Index of the least score among the rows (ties drawn uniformly). */
uint32_t lr__pick_min(const struct lr__pctx *c);

/* Deepest cached prefix over the rows. */
uint32_t lr__best_cached(const struct lr__pctx *c);

/* The row holding `best` cached tokens with the fewest requests in flight
 * (ties drawn); every score becomes the row's negated hit. */
uint32_t lr__least_among_best(const struct lr__pctx *c, uint32_t best);

/* Least in flight (ties drawn); scores are the in-flight counts. */
uint32_t lr__least_inflight(const struct lr__pctx *c);

/* Row of ring rank `rank` (1-based), or LR_NIL. */
uint32_t lr__row_of_rank(const struct lr__pctx *c, uint32_t rank);

/* A choice of row k by `policy` for `reason`, its cost the row's score. */
struct lr__choice lr__choose(const struct lr__pctx *c, uint32_t k,
                             int32_t reason, int32_t policy);

/* Write a choice into a decision as route() and lr_policy_decide() report
 * it (instance, reason, cached, best cached, cost, alt, decider, seed). */
void lr__decision_fill(lr_decision *d, const struct lr__pctx *c,
                       const struct lr__choice *ch, uint64_t seed);

/* The big policies, each in its own file. */
struct lr__choice lr__dualmap_decide(const struct lr__pctx *c);
struct lr__choice lr__lodestar_decide(const struct lr__pctx *c);
struct lr__choice lr__adaptive_decide(const struct lr__pctx *c);

#endif /* LIBROUTE_LIB_POLICY_H */
