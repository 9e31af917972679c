/* Helpers the policy files share over a candidate table: the least
 * score, the deepest cached prefix, the least loaded among rows, a ring
 * rank's row, a choice; and the key of a prompt's leading tokens. A file
 * of its own, below the table (policy.c) and the policies that use them,
 * so that the table calling the policies and the policies calling these
 * make no circle. Ties break by a uniform draw from c->rng (reservoir
 * over the rows in table order). */
#include "common/lr_hash.h"
#include "policy/policy.h"

#define NONE LR_INSTANCE_NONE

struct lr__choice
lr__choose(const struct lr__pctx *c, uint32_t k, int32_t reason, int32_t policy)
{
    struct lr__choice ch = { k, reason, c->score[k], NONE, policy };
    return ch;
}

uint32_t
lr__pick_min(const struct lr__pctx *c)
{
    const double *val = c->score;
    uint32_t best = NONE, ties = 0;
    for (uint32_t k = 0; k < c->n; k++) {
        if (best == NONE || val[k] < val[best]) {
            best = k;
            ties = 1;
        } else if (val[k] == val[best] && lr__rng_below(c->rng, ++ties) == 0) {
            best = k;
        }
    }
    return best;
}

uint32_t
lr__best_cached(const struct lr__pctx *c)
{
    uint32_t b = 0;
    for (size_t k = 0; k < c->n; k++)
        if (lr__row(c, k)->cached_tokens > b)
            b = lr__row(c, k)->cached_tokens;
    return b;
}

uint32_t
lr__least_among_best(const struct lr__pctx *c, uint32_t best)
{
    uint32_t pick = NONE, ties = 0;
    for (uint32_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        c->score[k] = -(double)r->cached_tokens;
        if (r->cached_tokens != best)
            continue;
        if (pick == NONE || r->inflight < lr__row(c, pick)->inflight) {
            pick = k;
            ties = 1;
        } else if (r->inflight == lr__row(c, pick)->inflight &&
                   lr__rng_below(c->rng, ++ties) == 0) {
            pick = k;
        }
    }
    return pick;
}

uint32_t
lr__least_inflight(const struct lr__pctx *c)
{
    for (size_t k = 0; k < c->n; k++)
        c->score[k] = (double)lr__row(c, k)->inflight;
    return lr__pick_min(c);
}

uint32_t
lr__row_of_rank(const struct lr__pctx *c, uint32_t rank)
{
    for (uint32_t k = 0; k < c->n; k++)
        if (lr__row(c, k)->ring_rank == rank)
            return k;
    return LR_NIL;
}

uint64_t
lr__prefix_key(const struct lr__route_view *v, uint32_t tokens)
{
    const lr_request *q = v->q;
    size_t m = q->n_tokens < tokens ? q->n_tokens : tokens;
    size_t b = m / v->block_tokens;
    if (b > 0 && b <= v->n_keys && b * v->block_tokens == m)
        return v->keys[b - 1];
    return lr__hash(q->tokens, m * sizeof(uint32_t),
                    LR__SEED_SESSION ^ q->tenant_salt);
}
