/* Helpers the policy files share over a candidate table: the least
 * score, the deepest cached prefix, the least loaded among rows, a ring
 * rank's row, a choice; the key of a prompt's leading tokens; and for
 * disaggregated fleets the rows that decode, the prefill leg's policy,
 * the KV transfer's time and a pair's fields. A file
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
    struct lr__choice ch = {
        k, reason, c->score[k], NONE, policy, LR_NIL, -1, 0
    };
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

/* ---- disaggregated fleets -------------------------------------------------------- */

size_t
lr__decode_rows(const struct lr__pctx *c)
{
    if (c->stride < LR_CANDIDATE_SIZE_V4)
        return c->n;
    size_t k = 0;
    while (k < c->n && lr__row(c, k)->role != LR_ROLE_PREFILL)
        k++;
    return k;
}

int32_t
lr__prefill_policy(int32_t p, const double *param)
{
    double pp = param[LR_PARAM_PD_PREFILL_POLICY];
    return pp < 0 ? p : (int32_t)pp;
}

/* What separates two instances: 0 one node, 1 one rack, 2 one region
 * (or a placement not known), 3 regions apart. */
static int
distance(const lr_candidate *a, const lr_candidate *b)
{
    if (a->node != 0 && a->node == b->node)
        return 0;
    if (a->rack != 0 && a->rack == b->rack)
        return 1;
    if (a->region == 0 || b->region == 0 || a->region == b->region)
        return 2;
    return 3;
}

double
lr__transfer_s(const struct lr__pctx *c, const lr_candidate *a,
               const lr_candidate *b, double tokens)
{
    static const int32_t gbps[4] = { LR_PARAM_KV_GBPS_NODE,
                                     LR_PARAM_KV_GBPS_RACK,
                                     LR_PARAM_KV_GBPS_REGION,
                                     LR_PARAM_KV_GBPS_WAN };
    if (!(tokens > 0) || c->stride < LR_CANDIDATE_SIZE_V4)
        return 0;
    double bytes = tokens * LR__P(c, KV_BYTES_PER_TOKEN);
    return bytes / (c->param[gbps[distance(a, b)]] * 1e9);
}

void
lr__set_leg(const struct lr__pctx *c, struct lr__choice *ch, uint32_t kp,
            int32_t preason)
{
    ch->kp = kp;
    ch->preason = preason;
    ch->transfer_s = 0;
    if (kp == LR_NIL)
        return;
    const lr_candidate *d = lr__row(c, ch->k);
    ch->transfer_s = lr__transfer_s(
        c, lr__row(c, kp), d, (double)c->prompt - (double)d->cached_tokens);
}
