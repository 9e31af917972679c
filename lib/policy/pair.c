/* Pair decisions: a fleet whose instances prefill for others
 * (LR_ROLE_PREFILL) splits a request in two legs, a prefill instance that
 * computes its KV and a decode instance the KV moves to. The table holds
 * the rows that can decode first, then the prefill rows (the router
 * gathers them so; lr_policy_decide refuses another order). A policy with
 * a pair rule of its own (llm-d-pd, dynamo-pd, adaptive) decides both legs
 * and whether to split; any other decides each leg apart and always
 * splits, as SGLang's PD router does: the router's policy over the rows
 * that decode, LR_PARAM_PD_PREFILL_POLICY (or the same policy) over the
 * prefill rows. A table without prefill rows is an aggregated fleet: the
 * policy's own rule, the request whole. A layer above the policies and
 * their helpers (rows.c), below route() and lr_policy_decide(). */
#include "policy/policy.h"

/* Each leg apart, always split: the decode leg by policy p, the prefill
 * leg by its prefill policy, which takes turns of its own (round-robin's
 * prefill cursor). */
static struct lr__choice
legs_apart(int32_t p, const struct lr__pctx *c, size_t nd)
{
    struct lr__pctx dc = lr__sub_table(c, 0, nd);
    struct lr__choice ch = c->pt->def[p].decide(&dc);
    struct lr__pctx pc = lr__sub_table(c, nd, c->n - nd);
    pc.last = c->last_prefill;
    struct lr__choice pch =
        c->pt->def[lr__prefill_policy(p, c->param)].decide(&pc);
    lr__set_leg(c, &ch, (uint32_t)nd + pch.k, pch.reason);
    return ch;
}

struct lr__choice
lr__pair_decide(int32_t p, const struct lr__pctx *c, size_t nd)
{
    if (nd == c->n || nd == 0) {
        struct lr__choice ch = c->pt->def[p].decide(c);
        ch.kp = LR_NIL;
        ch.preason = -1;
        ch.transfer_s = 0;
        return ch;
    }
    if (c->pt->def[p].decide_pd != NULL)
        return c->pt->def[p].decide_pd(c, nd);
    return legs_apart(p, c, nd);
}
