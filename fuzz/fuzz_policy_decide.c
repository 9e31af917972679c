/* lr_policy_decide() over arbitrary candidate tables, parameters and
 * seeds: a bad table or parameter gets a clear status and writes no
 * decision; a good one decides for every policy, names one of the rows,
 * explains itself with a reason the library has, ranks the chosen row at
 * its cost, and makes exactly the same choice again for the same seed.
 *
 * Input: parameters from the back (policy, row count, prompt length,
 * seed (its low bits also a TTFT budget for adaptive's headroom),
 * cursor, block size, how many parameter values, whether Lodestar gets a
 * model, whether the rows are shaped), then from the front the
 * rows and the parameter values as raw doubles. Raw rows are bytes (every
 * bit pattern: NaN rates, absurd counts, ranks past the ring); shaped
 * rows are valid ones built field by field from small ranges (instances
 * 0-15 and ring ranks 0 .. LR_RING_MAX_K + 1, so that tables repeat
 * instances and ranks; loads, hits and rates that the policies' branches
 * turn on), so that the fuzzer spends its time in the policies rather
 * than in the row check. Shaped rows have roles and placements; a flag
 * puts the rows that decode first (a table the library takes) or leaves
 * them as drawn. A pair decision names a prefill row's instance as its
 * prefill leg and a decode row's as its instance; a table without
 * prefill rows keeps every request whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "libroute/lr_policy.h"
#include "libroute/lr_ring.h"
#include "policy/policy.h"

#define MAX_ROWS 64

/* A small network for Lodestar, made once; scoring does not change it. */
static lr_mlp *
model(void)
{
    static lr_mlp *m;
    if (m == NULL) {
        lr_mlp_options o;
        lr_mlp_options_init(&o);
        o.n_inputs = LR_LODESTAR_FEATURES;
        o.hidden_layers = 1;
        o.width = 8;
        FUZZ_ASSERT(lr_mlp_create(&o, &m) == LR_OK);
    }
    return m;
}

static bool
finite_nonneg(double x)
{
    return isfinite(x) && x >= 0;
}

/* The library's own rule for a usable row, restated. */
static bool
row_ok(const lr_candidate *r, uint32_t prompt)
{
    return r->instance != LR_INSTANCE_NONE && r->cached_tokens <= prompt &&
           isfinite(r->prefill_rate) && finite_nonneg(r->ttft_s_per_token) &&
           finite_nonneg(r->ttft_base_s) &&
           finite_nonneg(r->ttft_s_per_decoding) &&
           finite_nonneg(r->prefill_tokens_avg) &&
           finite_nonneg(r->route_rate) && r->prefill_rate > 0 &&
           isfinite(r->rtt_ms) && r->rtt_ms >= 0 && isfinite(r->stall_s) &&
           r->stall_s >= 0 && r->kv_use >= 0 && r->kv_use <= 1 &&
           isfinite(r->cached_age_s) &&
           (r->prefix_caching == 0 || r->prefix_caching == 1) &&
           r->cached_lost >= 0 && r->cached_lost <= 1 &&
           (r->adapter_missing == 0 || r->adapter_missing == 1) &&
           (r->adapter_evicts == 0 || r->adapter_evicts == 1) &&
           finite_nonneg(r->adapter_load_s) &&
           (uint64_t)r->cached_tokens + r->cpu_tokens + r->disk_tokens <=
               prompt &&
           r->role >= LR_ROLE_BOTH && r->role <= LR_ROLE_DECODE &&
           finite_nonneg(r->decode_s) &&
           r->sibling_fork_tokens <= r->cached_tokens &&
           r->sibling_lost >= 0 && r->sibling_lost <= 1;
}

/* The rows that decode first, at least one (rows ok). */
static bool
order_ok(const lr_candidate *rows, size_t n)
{
    size_t nd = 0;
    while (nd < n && rows[nd].role != LR_ROLE_PREFILL)
        nd++;
    for (size_t k = nd; k < n; k++)
        if (rows[k].role != LR_ROLE_PREFILL)
            return false;
    return nd > 0;
}

/* Stable: the rows that decode, then the prefill rows. */
static void
order_rows(lr_candidate *rows, size_t n)
{
    lr_candidate tmp[64];
    size_t m = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < n; k++)
            if ((rows[k].role == LR_ROLE_PREFILL) == pass)
                tmp[m++] = rows[k];
    memcpy(rows, tmp, n * sizeof rows[0]);
}

/* A valid row from small ranges (see the opening). */
static void
shape_row(fuzz_dp *dp, uint32_t prompt, lr_candidate *r)
{
    r->instance = fuzz_dp_next_range(dp, 0, 15);
    r->cached_tokens = fuzz_dp_next_range(dp, 0, prompt);
    r->inflight = fuzz_dp_next_range(dp, 0, 64);
    r->queued = fuzz_dp_next_range(dp, 0, r->inflight);
    r->prefill_tokens = fuzz_dp_next_range(dp, 0, 1u << 16);
    r->queued_tokens = r->prefill_tokens;
    r->prompt_tokens = r->prefill_tokens;
    r->decode_tokens = fuzz_dp_next_range(dp, 0, 1u << 16);
    r->kv_tokens = r->prompt_tokens + r->decode_tokens;
    r->running = fuzz_dp_next_range(dp, 0, 64);
    r->waiting = fuzz_dp_next_range(dp, 0, 64);
    r->kv_use = fuzz_dp_next_range(dp, 0, 100) / 100.0;
    r->rtt_ms = fuzz_dp_next_range(dp, 0, 500);
    r->prefill_rate = 1 + fuzz_dp_next_range(dp, 0, 100000);
    r->stall_s = fuzz_dp_next_range(dp, 0, 10);
    r->cached_age_s = (double)fuzz_dp_next_range(dp, 0, 100) - 1;
    r->instance_class = fuzz_dp_next_range(dp, 0, 3);
    r->prefix_caching = fuzz_dp_next_bool(dp);
    r->ring_rank = fuzz_dp_next_range(dp, 0, LR_RING_MAX_K + 1);
    r->tree_blocks = fuzz_dp_next_range(dp, 0, 1000);
    r->ttft_s_per_token = fuzz_dp_next_range(dp, 0, 1000) * 1e-6;
    r->ttft_base_s = fuzz_dp_next_range(dp, 0, 1000) * 1e-3;
    r->ttft_s_per_decoding = fuzz_dp_next_range(dp, 0, 1000) * 1e-4;
    r->prefill_tokens_avg = fuzz_dp_next_range(dp, 0, 1u << 16);
    r->route_rate = fuzz_dp_next_range(dp, 0, 1000) * 0.1;
    r->cached_lost = fuzz_dp_next_range(dp, 0, 100) / 100.0;
    /* the request's adapter: resident, or to load (slots free or not, a
     * load that evicts, up to 2 s) */
    r->adapter_missing = (int32_t)fuzz_dp_next_range(dp, 0, 1);
    r->adapter_free = fuzz_dp_next_range(dp, 0, 3);
    if (r->adapter_free == 3)
        r->adapter_free = UINT32_MAX;
    r->adapters_resident = fuzz_dp_next_range(dp, 0, 8);
    r->adapter_evicts = r->adapter_missing && r->adapter_free == 0;
    r->adapter_load_s =
        r->adapter_missing ? fuzz_dp_next_range(dp, 0, 200) / 100.0 : 0;
    /* the lower tiers past the GPU's hit (dynamo's and adaptive's
     * weights) */
    r->cpu_tokens = fuzz_dp_next_range(dp, 0, prompt - r->cached_tokens);
    r->disk_tokens = fuzz_dp_next_range(
        dp, 0, prompt - r->cached_tokens - r->cpu_tokens);
    /* a disaggregated fleet's roles; placements that meet and differ */
    r->role = (int32_t)fuzz_dp_next_range(dp, 0, 2);
    r->node = fuzz_dp_next_range(dp, 0, 3);
    r->rack = fuzz_dp_next_range(dp, 0, 3);
    r->region = fuzz_dp_next_range(dp, 0, 2);
    /* adaptive's decode seconds of the class: none known, or to 100 s */
    r->decode_s = fuzz_dp_next_range(dp, 0, 1000) * 0.1;
    /* a sibling past the hit, one within it, the engine's share lost */
    r->sibling_tokens = fuzz_dp_next_range(dp, 0, 4096);
    r->sibling_fork_tokens = fuzz_dp_next_range(dp, 0, r->cached_tokens);
    r->sibling_lost = fuzz_dp_next_range(dp, 0, 100) / 100.0;
}

static bool
params_ok(const double *p, size_t n)
{
    for (size_t k = 0; k < n && k < lr_param_count(); k++) {
        lr_bounds b = lr_param_bounds((int32_t)k);
        if (!(p[k] >= b.lo && p[k] <= b.hi) ||
            ((b.flags & LR_BOUNDS_INTEGER) && p[k] != floor(p[k])))
            return false;
        /* the prefill leg's policy keeps no state but round-robin's turn
         * and reads no ring */
        if (k == LR_PARAM_PD_PREFILL_POLICY && p[k] >= 0) {
            const struct lr__policy_def *d = &lr__policies[(int)p[k]];
            if (d->ring_key != LR_RING_KEY_NONE ||
                (d->ops != NULL && p[k] != LR_POLICY_ROUND_ROBIN))
                return false;
        }
    }
    return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    int32_t policy = (int32_t)fuzz_dp_take_range(&dp, 0, LR__POLICY_COUNT);
    size_t n = fuzz_dp_take_range(&dp, 0, MAX_ROWS);
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = fuzz_dp_take_range(&dp, 0, 1u << 20);
    in.seed = fuzz_dp_take_u64(&dp);
    /* a TTFT budget from the seed's bits (adaptive's headroom): none, or
     * 0 .. 8 s in steps of 1/32 s, 0 meaning none */
    if (in.seed & 1)
        in.ttft_budget_s = (double)((in.seed >> 1) & 0xff) / 32.0;
    in.last_instance = fuzz_dp_take_u32(&dp);
    in.block_tokens = fuzz_dp_take_range(&dp, 0, 64);
    in.expected_output_tokens = fuzz_dp_take_range(&dp, 0, 4096);
    size_t n_params = fuzz_dp_take_range(&dp, 0, LR__PARAM_COUNT + 2);
    in.model = fuzz_dp_take_bool(&dp) ? model() : NULL;

    bool shaped = fuzz_dp_take_bool(&dp);
    bool ordered = fuzz_dp_take_bool(&dp);

    lr_candidate rows[MAX_ROWS];
    memset(rows, 0, sizeof rows);
    size_t got = 0;
    if (shaped) {
        for (size_t k = 0; k < n; k++)
            shape_row(&dp, in.prompt_tokens, &rows[k]);
        if (ordered)
            order_rows(rows, n);
    } else {
        const uint8_t *raw = fuzz_dp_bytes(&dp, n * sizeof rows[0], &got);
        if (got > 0)
            memcpy(rows, raw, got);
    }
    double param[LR__PARAM_COUNT + 2];
    memset(param, 0, sizeof param);
    const uint8_t *praw = fuzz_dp_bytes(&dp, n_params * sizeof(double), &got);
    if (got > 0)
        memcpy(param, praw, got);
    n_params = got / sizeof(double);
    in.params = param;
    in.n_params = n_params;

    bool good =
        n > 0 && policy < LR__POLICY_COUNT && params_ok(param, n_params);
    for (size_t k = 0; k < n; k++)
        good = good && row_ok(&rows[k], in.prompt_tokens);
    good = good && order_ok(rows, n);

    double sc[MAX_ROWS], sc2[MAX_ROWS];
    lr_decision d, d2;
    lr_decision_init(&d);
    lr_status st =
        lr_policy_decide(policy, &in, rows, n, sizeof rows[0], sc, &d);
    if (!good) {
        FUZZ_ASSERT_STATUS(st, st == LR_EINVAL || st == LR_ERANGE ||
                                   st == LR_ENOTSUP);
        FUZZ_ASSERT(d.instance == LR_INSTANCE_NONE);
        return 0;
    }
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    /* the choice is a row; its score is the decision's cost (bounded-load
     * hashing ranks by ring position but reports the load) */
    bool found = false, costed = isnan(d.cost) ||
                                 d.decider == LR_POLICY_CONSISTENT_HASH ||
                                 d.decider == LR_POLICY_RANVIER;
    for (size_t k = 0; k < n; k++)
        if (rows[k].instance == d.instance) {
            found = true;
            costed = costed || sc[k] == d.cost;
        }
    FUZZ_ASSERT(found && costed);
    FUZZ_ASSERT(d.reason >= 0 && (uint32_t)d.reason < lr_reason_count());
    FUZZ_ASSERT(d.decider >= 0 && d.decider < LR__POLICY_COUNT);
    FUZZ_ASSERT(d.seed == in.seed);
    /* the pair: a prefill row's instance, the other leg a decode row's */
    bool any_prefill = false, pre_found = false, dec_found = false;
    for (size_t k = 0; k < n; k++) {
        bool pre = rows[k].role == LR_ROLE_PREFILL;
        any_prefill |= pre;
        pre_found |= pre && rows[k].instance == d.prefill_instance;
        dec_found |= !pre && rows[k].instance == d.instance;
    }
    FUZZ_ASSERT(dec_found);
    if (!any_prefill)
        FUZZ_ASSERT(d.prefill_instance == LR_INSTANCE_NONE &&
                    d.prefill_reason == -1);
    else if (d.prefill_instance == LR_INSTANCE_NONE)
        FUZZ_ASSERT(d.prefill_reason == LR_REASON_WHOLE && d.transfer_s == 0);
    else
        FUZZ_ASSERT(pre_found && d.prefill_reason >= 0 &&
                    (uint32_t)d.prefill_reason < lr_reason_count() &&
                    d.transfer_s >= 0 && isfinite(d.transfer_s));
    /* the same seed, the same choice and scores */
    lr_decision_init(&d2);
    st = lr_policy_decide(policy, &in, rows, n, sizeof rows[0], sc2, &d2);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_ASSERT(d2.instance == d.instance && d2.reason == d.reason);
    FUZZ_ASSERT(d2.alt_instance == d.alt_instance);
    FUZZ_ASSERT(d2.prefill_instance == d.prefill_instance &&
                d2.prefill_reason == d.prefill_reason);
    for (size_t k = 0; k < n; k++)
        FUZZ_ASSERT(sc[k] == sc2[k] || (isnan(sc[k]) && isnan(sc2[k])));
    return 0;
}
