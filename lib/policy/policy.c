/* The policy table and the policies that fit in a few lines each.
 *
 * Each entry of lr__policies[] names a policy, says what the router must
 * gather for it (index match, prefix ages, tree sizes, calibration; ring
 * ranks of which key), points at its decide function and, for a policy
 * with state, at its state operations (policy.h). A router decides on a
 * copy of this table (struct lr__ptable), so tests add rows without
 * touching the built-ins. Adding a policy is its decide function, its
 * state operations if it keeps any, and one entry here; the router
 * names none of them. The larger policies have files of their own
 * (dualmap.c, gorgo.c, lodestar.c, adaptive.c); the row helpers every
 * policy shares are in rows.c, and every cost formula is in cost.h.
 *
 * Conventions every decide function keeps:
 * - scores are NaN on entry; a policy writes the figure it ranks by (lower
 *   is better) for the rows it ranks;
 * - ties break by a uniform draw from c->rng (reservoir over the rows in
 *   table order), so a fleet at low concurrency does not pile onto the
 *   first row;
 * - "in flight" is the router's own count of requests dispatched and not
 *   ended; the scraped running/waiting enter least-load only.
 */
#include "policy/policy.h"

#include "common/lr_hash.h"
#include "libroute/lr_ring.h"
#include "policy/cost.h"

#define NONE LR_INSTANCE_NONE

/* ---- parameters ------------------------------------------------------------ */

/* A parameter's kind says its bounds and whether it is a whole number:
 *   FRACTION(def)       a share, in [0, 1]
 *   SWITCH(def)         0 (off) or 1 (on)
 *   UPTO(hi, def)       a real in [0, hi]
 *   REAL(lo, hi, def)   a real in [lo, hi]
 *   COUNT(lo, hi, def)  a whole number in [lo, hi] */
/* clang-format off */
#define FRACTION(d)       { 0, 1, (d), false }
#define SWITCH(d)         { 0, 1, (d), true }
#define UPTO(hi, d)       { 0, (hi), (d), false }
#define REAL(lo, hi, d)   { (lo), (hi), (d), false }
#define COUNT(lo, hi, d)  { (lo), (hi), (d), true }
/* clang-format on */

static const struct lr__range pdefs[LR__PARAM_COUNT] = {
    [LR_PARAM_PREFIX_MIN_RATIO] = FRACTION(0.5),
    [LR_PARAM_BOUNDED_LOAD] = REAL(1, 100, 1.25),
    [LR_PARAM_AIBRIX_IMBALANCE] = UPTO(1e6, 8),
    [LR_PARAM_AIBRIX_STDDEV] = UPTO(100, 1),
    [LR_PARAM_SGLANG_ABS] = UPTO(1e6, 64),
    [LR_PARAM_SGLANG_REL] = REAL(1, 1e6, 1.5),
    [LR_PARAM_SGLANG_MIN_RATIO] = FRACTION(0.3),
    [LR_PARAM_PREBLE_HIT] = FRACTION(0.5),
    [LR_PARAM_DYNAMO_OVERLAP] = UPTO(1000, 1),
    [LR_PARAM_DYNAMO_TEMPERATURE] = UPTO(100, 0),
    [LR_PARAM_TTFT_SLO_S] = REAL(0.001, 3600, 5),
    [LR_PARAM_DUALMAP_KEY_TOKENS] = COUNT(1, 1 << 20, 512),
    [LR_PARAM_DUALMAP_MAX_KEY_BLOCKS] = COUNT(1, 64, 16),
    [LR_PARAM_DUALMAP_WINDOW] = COUNT(16, 1 << 16, 1024),
    [LR_PARAM_GORGO_W_RTT] = UPTO(10, 0.5),
    [LR_PARAM_GORGO_W_QUEUE] = UPTO(10, 0.1),
    [LR_PARAM_GORGO_SIGMA] = UPTO(4, 0.5),
    [LR_PARAM_GORGO_FROZEN] = SWITCH(0),
    [LR_PARAM_GORGO_W_RTT_MAX] = REAL(0.05, 10, 2.0),
    [LR_PARAM_GORGO_W_QUEUE_MIN] = UPTO(0.5, 0.05),
    [LR_PARAM_RANVIER_PRESSURE] = UPTO(1000, 2),
    [LR_PARAM_SESSION_TOKENS] = COUNT(1, 1 << 20, 256),
    [LR_PARAM_STATS_MAX_AGE_S] = REAL(0.001, 86400, 10),
    [LR_PARAM_DEFAULT_OUTPUT_TOKENS] = COUNT(0, 1 << 20, 128),
    [LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN] = SWITCH(0),
    [LR_PARAM_LODESTAR_EPSILON] = FRACTION(0),
    [LR_PARAM_LODESTAR_TIE] = UPTO(10, 0.1),
    [LR_PARAM_LODESTAR_KV_THRESHOLD] = FRACTION(0.8),
    [LR_PARAM_LODESTAR_KFILTER_TOKENS] = COUNT(0, 1 << 24, 100),
    [LR_PARAM_LODESTAR_OOD] = SWITCH(1),
    [LR_PARAM_LODESTAR_FALLBACK] =
        COUNT(0, LR_POLICY_LODESTAR - 1, LR_POLICY_PREFIX_CACHE_AND_LOAD),
    [LR_PARAM_LODESTAR_CANDIDATES] = COUNT(0, 65534, 8),
    [LR_PARAM_LODESTAR_MAX_TTFT_S] = REAL(0.001, 86400, 60),
    [LR_PARAM_ADAPTIVE_WORK_WEIGHT] = UPTO(100, 3),
    [LR_PARAM_ADAPTIVE_CONTENTION] = UPTO(100, 3),
    [LR_PARAM_ADAPTIVE_TIE_S] = UPTO(10, 0.002),
    [LR_PARAM_ADAPTIVE_FRESH_S] = UPTO(60, 0.01),
    [LR_PARAM_ADAPTIVE_RTT_WEIGHT] = UPTO(100, 1),
    [LR_PARAM_ADAPTIVE_CALIBRATE] = SWITCH(1),
    [LR_PARAM_CLOCK_SKEW_S] = REAL(0.001, 4.7e9, 60),
    [LR_PARAM_SATURATION_QUEUE] = COUNT(1, 1e6, 8),
    [LR_PARAM_SATURATION_KV] = REAL(0.01, 1, 0.8),
    [LR_PARAM_FAIR_INPUT_WEIGHT] = UPTO(1000, 1),
    [LR_PARAM_FAIR_OUTPUT_WEIGHT] = UPTO(1000, 2),
    [LR_PARAM_ADAPTIVE_DEADLINE] = SWITCH(1),
    [LR_PARAM_SATURATION_PREFILL_S] = REAL(0.001, 3600, 0.15),
    [LR_PARAM_ADAPTER_LOAD_S] = UPTO(600, 0.1),
    [LR_PARAM_TIER_CPU_WEIGHT] = FRACTION(0.8),
    [LR_PARAM_TIER_DISK_WEIGHT] = FRACTION(0.25),
    [LR_PARAM_KV_BYTES_PER_TOKEN] = COUNT(1, 1 << 30, 131072),
    [LR_PARAM_KV_GBPS_NODE] = REAL(0.001, 1e5, 300),
    [LR_PARAM_KV_GBPS_RACK] = REAL(0.001, 1e5, 50),
    [LR_PARAM_KV_GBPS_REGION] = REAL(0.001, 1e5, 12.5),
    [LR_PARAM_KV_GBPS_WAN] = REAL(0.001, 1e5, 1.25),
    [LR_PARAM_PD_PREFILL_POLICY] = COUNT(-1, LR__POLICY_COUNT - 1, -1),
    [LR_PARAM_PD_MIN_UNCACHED] = COUNT(0, 1 << 26, 16),
    [LR_PARAM_PD_LOCAL_MAX_TOKENS] = COUNT(0, 1 << 26, 2048),
    [LR_PARAM_PD_LOCAL_MAX_RATIO] = FRACTION(0.7),
    [LR_PARAM_ADAPTIVE_PD_STALL] = UPTO(100, 0.1),
    [LR_PARAM_NARROW_ABOVE] = COUNT(0, 65534, 256),
    [LR_PARAM_NARROW_WIDTH] = COUNT(1, LR__NARROW_WIDTH_MAX, 16),
};

#undef FRACTION
#undef SWITCH
#undef UPTO
#undef REAL
#undef COUNT

const struct lr__range *
lr__param_def(int32_t key)
{
    return key >= 0 && key < LR__PARAM_COUNT ? &pdefs[key] : NULL;
}

void
lr__param_defaults(double *param)
{
    for (int k = 0; k < LR__PARAM_COUNT; k++)
        param[k] = pdefs[k].def;
}

lr_status
lr__param_check(int32_t key, double value)
{
    const struct lr__range *d = lr__param_def(key);
    LR_RETURN_IF(isnan(value), LR_EINVAL);
    LR_RETURN_IF(d == NULL, LR_ENOTSUP);
    LR_RETURN_IF(value < d->lo || value > d->hi, LR_ERANGE);
    LR_RETURN_IF(d->integer && value != floor(value), LR_EINVAL);
    /* a prefill leg's policy decides on the route's state as it is: one
     * that keeps its own (but round-robin's turn) or reads a ring would
     * decide on state kept for another policy */
    if (key == LR_PARAM_PD_PREFILL_POLICY && value >= 0) {
        const struct lr__policy_def *p = &lr__policies[(int)value];
        LR_RETURN_IF(p->ring_key != LR_RING_KEY_NONE ||
                         (p->ops != NULL && value != LR_POLICY_ROUND_ROBIN),
                     LR_EINVAL);
    }
    return LR_OK;
}

uint32_t
lr_param_count(void)
{
    return LR__PARAM_COUNT;
}

lr_bounds
lr_param_bounds(int32_t key)
{
    return lr__bounds_of(lr__param_def(key));
}

/* ---- names ---------------------------------------------------------------------- */

static const char *const reason_names[LR__REASON_COUNT] = {
    "none",     "random",     "round-robin",   "least-loaded", "session",
    "hash",     "prefix-hit", "load-override", "slo-switch",   "fallback",
    "min-cost", "sampled",    "k-filter",      "explore",      "cold-start",
    "ood",      "waiting",    "adapter",       "whole",
};

uint32_t
lr_reason_count(void)
{
    return LR__REASON_COUNT;
}

const char *
lr_reason_name(int32_t reason)
{
    return reason >= 0 && reason < LR__REASON_COUNT ? reason_names[reason]
                                                    : NULL;
}

uint32_t
lr_policy_count(void)
{
    return LR__POLICY_COUNT;
}

const char *
lr_policy_name(int32_t policy)
{
    return policy >= 0 && policy < LR__POLICY_COUNT ? lr__policies[policy].name
                                                    : NULL;
}

lr_status
lr_policy_from_name(const char *name, int32_t *out)
{
    LR_RETURN_IF(name == NULL || out == NULL, LR_EINVAL);
    for (int32_t i = 0; i < LR__POLICY_COUNT; i++) {
        if (strcmp(name, lr__policies[i].name) == 0) {
            *out = i;
            return LR_OK;
        }
    }
    return LR_ENOENT;
}

uint32_t
lr_lodestar_feature_count(void)
{
    return LR_LODESTAR_FEATURES;
}

static double
hit_ratio(const struct lr__pctx *c, uint32_t best)
{
    return c->prompt > 0 ? (double)best / (double)c->prompt : 0;
}

/* ---- the simple policies -------------------------------------------------------------- */

static struct lr__choice
decide_random(const struct lr__pctx *c)
{
    uint32_t k = (uint32_t)lr__rng_below(c->rng, c->n);
    return lr__choose(c, k, LR_REASON_RANDOM, LR_POLICY_RANDOM);
}

/* The instance with the least id above the last one served, wrapping to
 * the least id. */
static struct lr__choice
decide_round_robin(const struct lr__pctx *c)
{
    uint32_t next = NONE, first = 0;
    for (uint32_t k = 0; k < c->n; k++) {
        uint32_t id = lr__row(c, k)->instance;
        if (id < lr__row(c, first)->instance)
            first = k;
        if ((c->last == NONE || id > c->last) &&
            (next == NONE || id < lr__row(c, next)->instance))
            next = k;
    }
    return lr__choose(c, next != NONE ? next : first, LR_REASON_ROUND_ROBIN,
                      LR_POLICY_ROUND_ROBIN);
}

static struct lr__choice
decide_least_request(const struct lr__pctx *c)
{
    return lr__choose(c, lr__least_inflight(c), LR_REASON_LEAST_LOADED,
                      LR_POLICY_LEAST_REQUEST);
}

/* Least load: in flight plus the engine's running and waiting. */
static struct lr__choice
decide_least_load(const struct lr__pctx *c)
{
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        c->score[k] =
            (double)r->inflight + ((double)r->running + (double)r->waiting);
    }
    return lr__choose(c, lr__pick_min(c), LR_REASON_LEAST_LOADED,
                      LR_POLICY_LEAST_LOAD);
}

static struct lr__choice
decide_session(const struct lr__pctx *c)
{
    uint32_t k = lr__row_of_rank(c, 1);
    return lr__choose(c, k != LR_NIL ? k : 0, LR_REASON_SESSION,
                      LR_POLICY_SESSION_AFFINITY);
}

/* Bounded-load consistent hashing: the ring's candidates in rank order,
 * the first under cap = ceil(c x (in flight + 1) / n), else the least
 * loaded. A rank's score is its position. A host's table may repeat a
 * rank: the first row holding it is that rank's candidate (as for
 * lr__row_of_rank), so at most LR_RING_MAX_K rows are ever ranked. */
static struct lr__choice
bounded(const struct lr__pctx *c, int32_t policy)
{
    uint32_t by_rank[LR_RING_MAX_K];
    uint64_t total = 0;
    for (uint32_t i = 0; i < LR_RING_MAX_K; i++)
        by_rank[i] = LR_NIL;
    for (uint32_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        total += r->inflight;
        if (r->ring_rank >= 1 && r->ring_rank <= LR_RING_MAX_K &&
            by_rank[r->ring_rank - 1] == LR_NIL)
            by_rank[r->ring_rank - 1] = k;
    }
    uint32_t n_ranks = 0; /* the ranks present, in rank order */
    for (uint32_t i = 0; i < LR_RING_MAX_K; i++)
        if (by_rank[i] != LR_NIL)
            by_rank[n_ranks++] = by_rank[i];
    double n = (double)c->n;
    if (c->fleet != NULL) { /* a few rows of a large fleet: its load */
        total = (uint64_t)c->fleet->sum;
        n = (double)c->fleet->n;
    }
    double cap = ceil(LR__P(c, BOUNDED_LOAD) * (double)(total + 1) / n);
    for (uint32_t i = 0; i < n_ranks; i++) {
        uint32_t k = by_rank[i];
        c->score[k] = (double)i;
        if ((double)lr__row(c, k)->inflight + 1 <= cap) {
            struct lr__choice ch = lr__choose(c, k, LR_REASON_HASH, policy);
            ch.cost = (double)lr__row(c, k)->inflight;
            if (i + 1 < n_ranks)
                ch.alt = lr__row(c, by_rank[i + 1])->instance;
            return ch;
        }
    }
    return lr__choose(c, lr__least_inflight(c), LR_REASON_LEAST_LOADED, policy);
}

static struct lr__choice
decide_consistent_hash(const struct lr__pctx *c)
{
    return bounded(c, LR_POLICY_CONSISTENT_HASH);
}

static struct lr__choice
decide_prefix_cache(const struct lr__pctx *c)
{
    uint32_t best = lr__best_cached(c);
    if (best > 0 && hit_ratio(c, best) >= LR__P(c, PREFIX_MIN_RATIO))
        return lr__choose(c, lr__least_among_best(c, best),
                          LR_REASON_PREFIX_HIT, LR_POLICY_PREFIX_CACHE);
    return lr__choose(c, lr__least_inflight(c), LR_REASON_FALLBACK,
                      LR_POLICY_PREFIX_CACHE);
}

/* AIBrix: max - min in flight above the imbalance threshold -> least
 * request; else the best (match, load) among the rows under mean + k x
 * stddev in flight; else least request. */
static struct lr__choice
decide_aibrix(const struct lr__pctx *c)
{
    const int32_t me = LR_POLICY_PREFIX_CACHE_AND_LOAD;
    double mn = INFINITY, mx = -INFINITY, sum = 0, sq = 0, n = (double)c->n;
    if (c->fleet != NULL) { /* a few rows of a large fleet: its load */
        mn = c->fleet->min;
        mx = c->fleet->max;
        sum = c->fleet->sum;
        sq = c->fleet->sq;
        n = c->fleet->n;
    } else {
        for (size_t k = 0; k < c->n; k++) {
            double l = (double)lr__row(c, k)->inflight;
            mn = l < mn ? l : mn;
            mx = l > mx ? l : mx;
            sum += l;
            sq += l * l;
        }
    }
    if (mx - mn > LR__P(c, AIBRIX_IMBALANCE))
        return lr__choose(c, lr__least_inflight(c), LR_REASON_LOAD_OVERRIDE,
                          me);
    double mean = sum / n;
    double var = sq / n - mean * mean;
    double limit = mean + LR__P(c, AIBRIX_STDDEV) * sqrt(var > 0 ? var : 0);
    uint32_t best = NONE, ties = 0;
    for (uint32_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        c->score[k] = -(double)r->cached_tokens;
        if ((double)r->inflight > limit)
            continue;
        const lr_candidate *b = best != NONE ? lr__row(c, best) : NULL;
        if (b == NULL || r->cached_tokens > b->cached_tokens ||
            (r->cached_tokens == b->cached_tokens &&
             r->inflight < b->inflight)) {
            best = k;
            ties = 1;
        } else if (r->cached_tokens == b->cached_tokens &&
                   r->inflight == b->inflight &&
                   lr__rng_below(c->rng, ++ties) == 0) {
            best = k;
        }
    }
    if (best == NONE)
        return lr__choose(c, lr__least_inflight(c), LR_REASON_LEAST_LOADED, me);
    return lr__choose(c, best,
                      lr__row(c, best)->cached_tokens > 0
                          ? LR_REASON_PREFIX_HIT
                          : LR_REASON_LEAST_LOADED,
                      me);
}

/* The row whose index holds the fewest blocks (ties drawn), among the
 * rows that cache prefixes when any does: an instance with prefix caching
 * off holds no block however much it serves (the router learns nothing
 * for it), where SGLang's tree would grow with its traffic. Scores are the
 * block counts of the rows it ranks. */
static uint32_t
smallest_tree(const struct lr__pctx *c)
{
    bool any = false;
    for (size_t k = 0; k < c->n; k++)
        any = any || lr__row(c, k)->prefix_caching;
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        c->score[k] = r->prefix_caching || !any ? (double)r->tree_blocks : NAN;
    }
    uint32_t best = NONE, ties = 0;
    for (uint32_t k = 0; k < c->n; k++) {
        if (isnan(c->score[k]))
            continue;
        if (best == NONE || c->score[k] < c->score[best]) {
            best = k;
            ties = 1;
        } else if (c->score[k] == c->score[best] &&
                   lr__rng_below(c->rng, ++ties) == 0) {
            best = k;
        }
    }
    return best;
}

/* SGLang's cache-aware router: imbalanced (max - min above the absolute
 * and max above the relative threshold) -> least loaded; else the best
 * match if its ratio passes; else the worker with the smallest radix tree
 * (SGLang's router source; FIELD.md's table says least loaded). */
static struct lr__choice
decide_sglang(const struct lr__pctx *c)
{
    const int32_t me = LR_POLICY_SGLANG_CACHE_AWARE;
    double mn = INFINITY, mx = -INFINITY;
    if (c->fleet != NULL) { /* a few rows of a large fleet: its load */
        mn = c->fleet->min;
        mx = c->fleet->max;
    }
    for (size_t k = 0; c->fleet == NULL && k < c->n; k++) {
        double l = (double)lr__row(c, k)->inflight;
        mn = l < mn ? l : mn;
        mx = l > mx ? l : mx;
    }
    if (mx - mn > LR__P(c, SGLANG_ABS) && mx > LR__P(c, SGLANG_REL) * mn)
        return lr__choose(c, lr__least_inflight(c), LR_REASON_LOAD_OVERRIDE,
                          me);
    uint32_t best = lr__best_cached(c);
    if (best > 0 && hit_ratio(c, best) > LR__P(c, SGLANG_MIN_RATIO))
        return lr__choose(c, lr__least_among_best(c, best),
                          LR_REASON_PREFIX_HIT, me);
    return lr__choose(c, smallest_tree(c), LR_REASON_FALLBACK, me);
}

/* TTFT estimate of every row into the scores, then the least. */
static uint32_t
min_ttft_row(const struct lr__pctx *c, double w_stall)
{
    for (size_t k = 0; k < c->n; k++)
        c->score[k] = lr__cost_ttft(lr__row(c, k), c->prompt, 0, w_stall);
    return lr__pick_min(c);
}

/* Preble: the best hit when its ratio passes, else the least estimated
 * TTFT: queue + prefill (the decode-stall term is DualMap's, not
 * Preble's). */
static struct lr__choice
decide_preble(const struct lr__pctx *c)
{
    uint32_t best = lr__best_cached(c);
    if (best > 0 && hit_ratio(c, best) > LR__P(c, PREBLE_HIT))
        return lr__choose(c, lr__least_among_best(c, best),
                          LR_REASON_PREFIX_HIT, LR_POLICY_PREBLE);
    return lr__choose(c, min_ttft_row(c, 0), LR_REASON_MIN_COST,
                      LR_POLICY_PREBLE);
}

/* Mooncake: queue + prefill only. */
static struct lr__choice
decide_min_ttft(const struct lr__pctx *c)
{
    return lr__choose(c, min_ttft_row(c, 0), LR_REASON_MIN_COST,
                      LR_POLICY_MIN_TTFT);
}

/* Dynamo: argmin of its cost at temperature 0, else a softmax draw over
 * min-max normalized costs, as Dynamo samples. */
/* Dynamo's credit for a row's lower-tier blocks: host_cache_hit_weight x
 * host overlap blocks + disk_cache_hit_weight x disk overlap blocks
 * (Dynamo lib/kv-router/src/scheduling/selector/default.rs; defaults
 * 0.75 and 0.25 in scheduling/config.rs: --router-host-cache-hit-weight,
 * --router-disk-cache-hit-weight). Here the weights are the router's
 * LR_PARAM_TIER_CPU_WEIGHT (0.8, llm-d's; set 0.75 for Dynamo's) and
 * LR_PARAM_TIER_DISK_WEIGHT (0.25). 0 without lower-tier columns. */
static double
dynamo_tier_credit(const struct lr__pctx *c, const lr_candidate *r)
{
    if (c->stride < LR_CANDIDATE_SIZE_V3 ||
        (r->cpu_tokens == 0 && r->disk_tokens == 0))
        return 0;
    return (LR__P(c, TIER_CPU_WEIGHT) * (double)r->cpu_tokens +
            LR__P(c, TIER_DISK_WEIGHT) * (double)r->disk_tokens) /
           (double)c->block_tokens;
}

static struct lr__choice
decide_dynamo(const struct lr__pctx *c)
{
    double mn = INFINITY, mx = -INFINITY;
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        c->score[k] = lr__cost_dynamo_tiered(
            r, c->prompt, (double)c->block_tokens, LR__P(c, DYNAMO_OVERLAP),
            dynamo_tier_credit(c, r));
        mn = c->score[k] < mn ? c->score[k] : mn;
        mx = c->score[k] > mx ? c->score[k] : mx;
    }
    double t = LR__P(c, DYNAMO_TEMPERATURE);
    if (t <= 0 || mx == mn)
        return lr__choose(c, lr__pick_min(c), LR_REASON_MIN_COST,
                          LR_POLICY_DYNAMO);
    double z = 0;
    for (size_t k = 0; k < c->n; k++)
        z += exp(-((c->score[k] - mn) / (mx - mn)) / t);
    double u = lr__rng_unit(c->rng) * z, acc = 0;
    uint32_t pick = (uint32_t)c->n - 1;
    for (uint32_t k = 0; k < c->n; k++) {
        acc += exp(-((c->score[k] - mn) / (mx - mn)) / t);
        if (u < acc) {
            pick = k;
            break;
        }
    }
    return lr__choose(c, pick, LR_REASON_SAMPLED, LR_POLICY_DYNAMO);
}

/* The median of the rows' in-flight counts: the middle one, or the mean
 * of the two middle ones. Selects in the scores, which the caller
 * overwrites afterwards: O(n) expected, O(n log n) at worst. */
static double
median_inflight(const struct lr__pctx *c)
{
    if (c->fleet != NULL) /* a few rows of a large fleet: its median */
        return c->fleet->median;
    for (size_t k = 0; k < c->n; k++)
        c->score[k] = (double)lr__row(c, k)->inflight;
    double lo = lr__select(c->score, c->n, (c->n - 1) / 2);
    if (c->n % 2)
        return lo;
    /* the upper middle: the least of the upper half, which lr__select
     * left above the lower middle */
    double hi = c->score[c->n / 2];
    for (size_t k = c->n / 2; k < c->n; k++)
        hi = c->score[k] < hi ? c->score[k] : hi;
    return (lo + hi) / 2;
}

/* Ranvier: the longest cached prefix (least in flight among equals); no
 * prefix -> bounded-load hashing; the load override sends a choice whose
 * in flight exceeds PRESSURE x median to the least loaded. The median is
 * the true one: at low concurrency (median 0) a choice with any request
 * in flight is overridden. */
static struct lr__choice
decide_ranvier(const struct lr__pctx *c)
{
    const int32_t me = LR_POLICY_RANVIER;
    uint32_t best = lr__best_cached(c);
    if (best == 0) {
        struct lr__choice ch = bounded(c, me);
        ch.reason = LR_REASON_FALLBACK;
        return ch;
    }
    double pressure = LR__P(c, RANVIER_PRESSURE);
    double median = pressure > 0 ? median_inflight(c) : 0;
    struct lr__choice ch =
        lr__choose(c, lr__least_among_best(c, best), LR_REASON_PREFIX_HIT, me);
    if (pressure > 0 && (double)lr__row(c, ch.k)->inflight > pressure * median)
        ch = lr__choose(c, lr__least_inflight(c), LR_REASON_LOAD_OVERRIDE, me);
    return ch;
}

/* ---- the table ----------------------------------------------------------------------- */

/* lora-affinity, the Gateway API Inference Extension's LoRA scheduling:
 * its LoRA affinity scorer (1 where the request's adapter is resident,
 * 0.8 where a slot is free to load it, 0 elsewhere), its queue scorer
 * (1 at the shortest queue, 0 at the longest, min-max normalised; 1 for
 * all when equal) and its KV-cache scorer (1 - KV use), weight 1 each;
 * the highest total wins, ties drawn. The queue is the engine's scraped
 * waiting count, or the router's own count of requests before their
 * first token when that is more (a scrape lags). A score is the negated
 * total. */
static uint32_t
queue_of(const lr_candidate *r)
{
    return r->waiting > r->queued ? r->waiting : r->queued;
}

/* A narrowed route's queue bounds: the whole fleet's, widened by what
 * the rows read since (a key is as fresh as its instance's last change),
 * so that every row scores within [0, 1]. */
static void
fleet_queues(const struct lr__pctx *c, uint32_t *qmin, uint32_t *qmax)
{
    if (c->fleet == NULL)
        return;
    *qmin = c->fleet->qmin < *qmin ? c->fleet->qmin : *qmin;
    *qmax = c->fleet->qmax > *qmax ? c->fleet->qmax : *qmax;
}

static struct lr__choice
decide_lora_affinity(const struct lr__pctx *c)
{
    uint32_t qmin = UINT32_MAX, qmax = 0;
    bool missing = false;
    for (size_t k = 0; k < c->n; k++) {
        uint32_t q = queue_of(lr__row(c, k));
        qmin = q < qmin ? q : qmin;
        qmax = q > qmax ? q : qmax;
        missing |= !lr__row_adapter_resident(c, lr__row(c, k));
    }
    fleet_queues(c, &qmin, &qmax);
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        bool res = lr__row_adapter_resident(c, r);
        double lora = res ? 1.0 : r->adapter_free > 0u ? 0.8 : 0.0;
        double queue =
            qmax > qmin ? (double)(qmax - queue_of(r)) / (double)(qmax - qmin)
                        : 1.0;
        c->score[k] = -(lora + queue + (1.0 - r->kv_use));
    }
    /* "adapter" when the adapter decided: it is not resident everywhere */
    uint32_t k = lr__pick_min(c);
    bool res = lr__row_adapter_resident(c, lr__row(c, k));
    return lr__choose(
        c, k, missing && res ? LR_REASON_ADAPTER : LR_REASON_LEAST_LOADED,
        LR_POLICY_LORA_AFFINITY);
}

/* aibrix-lora, AIBrix's adapter routing: an adapter is served by the pods
 * its controller loaded it on, and the gateway sends its requests to the
 * least loaded of those (least request); an adapter resident nowhere is
 * loaded where the fewest adapters are (the controller's placement),
 * fewest in flight among equals. A score is the in-flight count among the
 * resident rows, and adapters + in flight / (most in flight + 1)
 * otherwise. */
static struct lr__choice
decide_aibrix_lora(const struct lr__pctx *c)
{
    uint32_t most = 0;
    bool any = false, missing = false;
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        most = r->inflight > most ? r->inflight : most;
        any |= lr__row_adapter_resident(c, r);
        missing |= !lr__row_adapter_resident(c, r);
    }
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        if (any) /* NaN once picked: the others are not ranked */
            c->score[k] =
                lr__row_adapter_resident(c, r) ? (double)r->inflight : INFINITY;
        else
            c->score[k] = (double)(c->stride >= LR_CANDIDATE_SIZE_V3
                                       ? r->adapters_resident
                                       : 0) +
                          (double)r->inflight / ((double)most + 1.0);
    }
    uint32_t pick = lr__pick_min(c);
    for (size_t k = 0; k < c->n; k++)
        if (isinf(c->score[k]))
            c->score[k] = NAN;
    return lr__choose(c, pick,
                      !missing ? LR_REASON_LEAST_LOADED
                      : any    ? LR_REASON_ADAPTER
                               : LR_REASON_FALLBACK,
                      LR_POLICY_AIBRIX_LORA);
}

/* ---- disaggregated fleets: the published pair rules ------------------------------- */

/* llm-d's scheduling profile for both legs (llm-d-inference-scheduler's
 * deploy/config/pd-epp-config.yaml): the prefix-cache scorer at weight 2
 * (matched share of the prompt) plus the queue scorer at weight 1 (1 at
 * the shortest queue, 0 at the longest, min-max normalised; 1 for all
 * when equal), the highest total wins, ties drawn. A score is the negated
 * total. */
static struct lr__choice
llmd_profile(const struct lr__pctx *c)
{
    uint32_t qmin = UINT32_MAX, qmax = 0;
    for (size_t k = 0; k < c->n; k++) {
        uint32_t q = queue_of(lr__row(c, k));
        qmin = q < qmin ? q : qmin;
        qmax = q > qmax ? q : qmax;
    }
    fleet_queues(c, &qmin, &qmax);
    double prompt = c->prompt > 0 ? (double)c->prompt : 1.0;
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        double queue =
            qmax > qmin ? (double)(qmax - queue_of(r)) / (double)(qmax - qmin)
                        : 1.0;
        c->score[k] = -(2.0 * (double)r->cached_tokens / prompt + queue);
    }
    uint32_t k = lr__pick_min(c);
    return lr__choose(c, k,
                      lr__row(c, k)->cached_tokens > 0 ? LR_REASON_PREFIX_HIT
                                                       : LR_REASON_LEAST_LOADED,
                      LR_POLICY_LLMD_PD);
}

/* llm-d-pd, llm-d's disaggregated profile handler: the decode instance
 * first (the profile above, over the rows that decode), then its
 * prefix-based decider: split when the prompt and its part not cached at
 * that decode instance are both at least nonCachedTokens
 * (LR_PARAM_PD_MIN_UNCACHED; 0 splits always), the prefill instance by
 * the same profile over the prefill rows. */
static struct lr__choice
decide_llmd_pd(const struct lr__pctx *c, size_t nd)
{
    struct lr__pctx dc = lr__sub_table(c, 0, nd);
    struct lr__choice ch = llmd_profile(&dc);
    uint32_t uncached = c->prompt - lr__row(c, ch.k)->cached_tokens;
    double thr = LR__P(c, PD_MIN_UNCACHED);
    if (thr > 0 && ((double)c->prompt < thr || (double)uncached < thr)) {
        lr__set_leg(c, &ch, LR_NIL, LR_REASON_WHOLE);
        return ch;
    }
    struct lr__pctx pc = lr__sub_table(c, nd, c->n - nd);
    struct lr__choice pch = llmd_profile(&pc);
    lr__set_leg(c, &ch, (uint32_t)nd + pch.k, pch.reason);
    return ch;
}

/* dynamo-pd, Dynamo's disaggregated router with its conditional
 * disaggregation (isl_bounding): a peek at the decode instance its KV
 * router would pick with overlap credit (Dynamo's cost over the rows that
 * decode); the request stays whole there when the tokens it does not
 * hold are fewer than LR_PARAM_PD_LOCAL_MAX_TOKENS (2048; 0: never) and
 * less than LR_PARAM_PD_LOCAL_MAX_RATIO (0.7) of the prompt. Otherwise
 * the prefill instance by Dynamo's cost without its decode term (the
 * prefill pool's router tracks no active blocks), and the decode instance
 * by Dynamo's cost without overlap credit: its decode blocks (the
 * prompt's blocks, the same on every row, left out). */
static struct lr__choice
decide_dynamo_pd(const struct lr__pctx *c, size_t nd)
{
    struct lr__pctx dc = lr__sub_table(c, 0, nd);
    struct lr__choice peek = decide_dynamo(&dc);
    peek.decider = LR_POLICY_DYNAMO_PD;
    double eff = (double)c->prompt - (double)lr__row(c, peek.k)->cached_tokens;
    double ratio = eff / (c->prompt > 0 ? (double)c->prompt : 1.0);
    if (eff < LR__P(c, PD_LOCAL_MAX_TOKENS) &&
        ratio < LR__P(c, PD_LOCAL_MAX_RATIO)) {
        lr__set_leg(c, &peek, LR_NIL, LR_REASON_WHOLE);
        return peek;
    }
    double bt = (double)c->block_tokens;
    for (size_t k = 0; k < nd; k++)
        dc.score[k] = ceil((double)lr__row(c, k)->kv_tokens / bt);
    struct lr__choice ch = lr__choose(
        &dc, lr__pick_min(&dc), LR_REASON_LEAST_LOADED, LR_POLICY_DYNAMO_PD);
    struct lr__pctx pc = lr__sub_table(c, nd, c->n - nd);
    for (size_t k = 0; k < pc.n; k++) {
        const lr_candidate *r = lr__row(&pc, k);
        pc.score[k] =
            lr__cost_dynamo_tiered(r, c->prompt, bt, LR__P(c, DYNAMO_OVERLAP),
                                   dynamo_tier_credit(c, r)) -
            ceil((double)r->kv_tokens / bt);
    }
    uint32_t kp = lr__pick_min(&pc);
    lr__set_leg(c, &ch, (uint32_t)nd + kp, LR_REASON_MIN_COST);
    return ch;
}

static struct lr__choice
decide_dynamo_whole(const struct lr__pctx *c)
{
    struct lr__choice ch = decide_dynamo(c);
    ch.decider = LR_POLICY_DYNAMO_PD;
    return ch;
}

#define M LR__NEEDS_MATCH
/* What each rule reads of a large fleet (LR__NARROW_*): hits and the
 * least loaded by the measure it weighs; a uniform sample besides where
 * an instance's speed or distance also counts (its class, its RTT), so
 * that the fastest of the idle ones has its chance. */
#define H LR__NARROW_HITS
#define R LR__NARROW_RING
#define I LR__NARROW_INFLIGHT
#define L LR__NARROW_LOAD
#define B LR__NARROW_BACKLOG
#define S LR__NARROW_SAMPLE
const struct lr__policy_def lr__policies[LR__POLICY_COUNT] = {
    [LR_POLICY_RANDOM] = { "random", 0, LR_RING_KEY_NONE, 0, decide_random,
                           .narrow = S },
    [LR_POLICY_ROUND_ROBIN] = { "round-robin", 0, LR_RING_KEY_NONE, 0,
                                decide_round_robin, &lr__round_robin_ops,
                                .narrow = LR__NARROW_STATE },
    [LR_POLICY_LEAST_REQUEST] = { "least-request", 0, LR_RING_KEY_NONE, 0,
                                  decide_least_request, .narrow = I },
    [LR_POLICY_LEAST_LOAD] = { "least-load", 0, LR_RING_KEY_NONE, 0,
                               decide_least_load, .narrow = L },
    [LR_POLICY_SESSION_AFFINITY] = { "session-affinity", 0, LR_RING_KEY_SESSION,
                                     1, decide_session, .narrow = R },
    [LR_POLICY_CONSISTENT_HASH] = { "consistent-hash", 0, LR_RING_KEY_PREFIX,
                                    LR_RING_MAX_K, decide_consistent_hash,
                                    .narrow = R | I },
    [LR_POLICY_PREFIX_CACHE] = { "prefix-cache", M, LR_RING_KEY_NONE, 0,
                                 decide_prefix_cache, .narrow = H | I },
    [LR_POLICY_PREFIX_CACHE_AND_LOAD] = { "prefix-cache-and-load", M,
                                          LR_RING_KEY_NONE, 0, decide_aibrix,
                                          .narrow = H | I },
    [LR_POLICY_SGLANG_CACHE_AWARE] = { "sglang-cache-aware", M | LR__NEEDS_TREE,
                                       LR_RING_KEY_NONE, 0, decide_sglang,
                                       .narrow = H | I | S },
    [LR_POLICY_PREBLE] = { "preble", M, LR_RING_KEY_NONE, 0, decide_preble,
                           .narrow = H | B | S },
    [LR_POLICY_MIN_TTFT] = { "min-ttft", M, LR_RING_KEY_NONE, 0,
                             decide_min_ttft, .narrow = H | B | S },
    [LR_POLICY_DYNAMO] = { "dynamo", M, LR_RING_KEY_NONE, 0, decide_dynamo,
                           .narrow = H | I | B | S },
    [LR_POLICY_DUALMAP] = { "dualmap", M, LR_RING_KEY_HOTNESS, 2,
                            lr__dualmap_decide, &lr__dualmap_ops, .narrow = R },
    [LR_POLICY_GORGO] = { "gorgo", M, LR_RING_KEY_NONE, 0, lr__gorgo_decide,
                          &lr__gorgo_ops, .narrow = H | B | S },
    [LR_POLICY_RANVIER] = { "ranvier", M, LR_RING_KEY_PREFIX, LR_RING_MAX_K,
                            decide_ranvier,
                            .narrow = H | LR__NARROW_RING_MISS | I },
    [LR_POLICY_LODESTAR] = { "lodestar", M | LR__NEEDS_AGE, LR_RING_KEY_PREFIX,
                             2, lr__lodestar_decide, &lr__lodestar_ops,
                             LR_PARAM_LODESTAR_FALLBACK + 1,
                             .narrow = H | R | I | B | S },
    [LR_POLICY_ADAPTIVE] = { "adaptive", M | LR__NEEDS_CALIB | LR__NEEDS_AGE,
                             LR_RING_KEY_NONE, 0, lr__adaptive_decide,
                             &lr__adaptive_ops,
                             .decide_pd = lr__adaptive_decide_pd,
                             .narrow = H | I | L | B | S },
    /* a route naming an adapter weighs every row (which instances hold
     * it is in no order); without one every instance holds it */
    [LR_POLICY_LORA_AFFINITY] = { "lora-affinity", 0, LR_RING_KEY_NONE, 0,
                                  decide_lora_affinity,
                                  .narrow =
                                      LR__NARROW_QUEUE | LR__NARROW_KV | S },
    [LR_POLICY_AIBRIX_LORA] = { "aibrix-lora", 0, LR_RING_KEY_NONE, 0,
                                decide_aibrix_lora, .narrow = I },
    [LR_POLICY_LLMD_PD] = { "llm-d-pd", M, LR_RING_KEY_NONE, 0, llmd_profile,
                            .decide_pd = decide_llmd_pd,
                            .narrow = H | LR__NARROW_QUEUE | S },
    [LR_POLICY_DYNAMO_PD] = { "dynamo-pd", M, LR_RING_KEY_NONE, 0,
                              decide_dynamo_whole,
                              .decide_pd = decide_dynamo_pd,
                              .narrow = H | I | B | S },
};
#undef H
#undef R
#undef I
#undef L
#undef B
#undef S
#undef M

const struct lr__ptable lr__builtin_policies = { lr__policies,
                                                 LR__POLICY_COUNT };

struct lr__choice
lr__policy_decide(int32_t p, const struct lr__pctx *c)
{
    return c->pt->def[p].decide(c);
}

/* Lodestar falls back to another policy: it needs what that one needs. */
static int32_t
fallback_of(const struct lr__ptable *t, int32_t p, const double *param)
{
    int32_t key = t->def[p].fallback_param - 1;
    return key >= 0 ? (int32_t)param[key] : LR__POLICY_NONE;
}

int32_t
lr__policy_ring_owner(const struct lr__ptable *t, int32_t p,
                      const double *param)
{
    int32_t fb = fallback_of(t, p, param);
    if (fb != LR__POLICY_NONE && t->def[fb].ring_key != LR_RING_KEY_NONE)
        return fb;
    return t->def[p].ring_key != LR_RING_KEY_NONE ? p : LR__POLICY_NONE;
}

uint32_t
lr__policy_states(const struct lr__ptable *t, int32_t p, const double *param)
{
    int32_t fb = fallback_of(t, p, param);
    int32_t pp = lr__prefill_policy(p, param);
    uint32_t kinds = 0;
    if (t->def[p].ops != NULL)
        kinds |= 1u << p;
    if (fb != LR__POLICY_NONE && t->def[fb].ops != NULL)
        kinds |= 1u << fb;
    if (t->def[pp].ops != NULL) /* round-robin's prefill turn */
        kinds |= 1u << pp;
    if (lr__policy_needs(t, p, param) & LR__NEEDS_AGE)
        kinds |= 1u << LR__STATE_RECENCY;
    return kinds;
}

const struct lr__pstate_ops *
lr__pstate_ops_of(const struct lr__ptable *t, uint32_t kind)
{
    if (kind < t->n)
        return t->def[kind].ops;
    return kind == LR__STATE_RECENCY ? &lr__recency_ops : NULL;
}

/* ---- round-robin's cursor ---------------------------------------------------------- */

/* The instance a round-robin decision served last: the next goes to the
 * least id above it. An id position, not a reference: it stays when that
 * instance goes. One cursor per model whose instances a route's rows are
 * (a few, direct-mapped: a model that takes another's place starts its
 * turn anew), so that a model's instances take turns among themselves
 * and not after the other models' turns; cursor 0 is the whole fleet's. */
#define RR_CURSORS 16u

struct rr_state {
    uint32_t last[RR_CURSORS];
    uint32_t last_prefill[RR_CURSORS]; /* split requests' prefill turn */
    uint64_t model[RR_CURSORS];
};

static uint32_t
rr_slot(uint64_t model)
{
    return model == 0 ? 0 : 1 + (uint32_t)(model % (RR_CURSORS - 1));
}

static lr_status
rr_create(const struct lr__penv *env, void **out)
{
    struct rr_state *s = lr__alloc(env->mem, sizeof *s);
    LR_RETURN_IF(s == NULL, LR_ENOMEM);
    for (uint32_t i = 0; i < RR_CURSORS; i++) {
        s->last[i] = NONE;
        s->last_prefill[i] = NONE;
        s->model[i] = 0;
    }
    *out = s;
    return LR_OK;
}

static void
rr_destroy(void *st, struct lr__mem *m)
{
    lr__free(m, st, sizeof(struct rr_state));
}

static void
rr_prepare(const void *st, struct lr__pctx *c)
{
    const struct rr_state *s = st;
    uint32_t i = rr_slot(c->rows_model);
    bool same = s->model[i] == c->rows_model;
    c->last = same ? s->last[i] : NONE;
    c->last_prefill = same ? s->last_prefill[i] : NONE;
}

/* A narrowed route: the least routable id above the cursor, and the
 * least of all (the turn wraps). */
static uint32_t
rr_narrow(const void *st, const struct lr__route_view *v, const uint32_t *act,
          uint32_t n_act, uint32_t *ids, uint32_t cap)
{
    const struct rr_state *s = st;
    uint32_t i = rr_slot(v->rows_model);
    uint32_t last = s->model[i] == v->rows_model ? s->last[i] : NONE;
    if (n_act == 0 || cap < 2)
        return 0;
    uint32_t k = last == NONE ? 0
                              : lr__lower_bound_u32(act, sizeof *act, 0, 0,
                                                    n_act, last + 1);
    ids[0] = act[0];
    ids[1] = act[k < n_act ? k : 0];
    return 2;
}

static void
rr_record(void *st, const struct lr__placed *p, uint64_t now_ns)
{
    (void)now_ns;
    struct rr_state *s = st;
    bool leg =
        p->ch.kp != LR_NIL &&
        lr__prefill_policy(p->v->policy, p->v->param) == LR_POLICY_ROUND_ROBIN;
    if (p->ch.decider != LR_POLICY_ROUND_ROBIN && !leg)
        return;
    uint32_t i = rr_slot(p->v->rows_model);
    if (s->model[i] != p->v->rows_model) {
        s->model[i] = p->v->rows_model;
        s->last[i] = NONE;
        s->last_prefill[i] = NONE;
    }
    if (p->ch.decider == LR_POLICY_ROUND_ROBIN)
        s->last[i] = p->rows[p->k].instance;
    if (leg)
        s->last_prefill[i] = p->rows[p->ch.kp].instance;
}

static uint64_t
rr_digest(const void *st, uint64_t d)
{
    const struct rr_state *s = st;
    for (uint32_t i = 0; i < RR_CURSORS; i++)
        d = lr__digest_mix(d, s->model[i] ^ ((uint64_t)s->last[i] << 1) ^
                                  ((uint64_t)s->last_prefill[i] << 33));
    return d;
}

const struct lr__pstate_ops lr__round_robin_ops = {
    .create = rr_create,
    .destroy = rr_destroy,
    .prepare = rr_prepare,
    .narrow = rr_narrow,
    .record = rr_record,
    .digest = rr_digest,
};

int32_t
lr__policy_ring(const struct lr__ptable *t, int32_t p, const double *param,
                uint32_t *ranks)
{
    int32_t fb = fallback_of(t, p, param);
    const struct lr__policy_def *d = &t->def[p];
    int32_t key = d->ring_key;
    uint32_t k = d->ring_k;
    if (fb != LR__POLICY_NONE && t->def[fb].ring_key != LR_RING_KEY_NONE) {
        key = t->def[fb].ring_key;
        k = t->def[fb].ring_k > k ? t->def[fb].ring_k : k;
    }
    *ranks = k;
    return key;
}

uint32_t
lr__policy_needs(const struct lr__ptable *t, int32_t p, const double *param)
{
    int32_t fb = fallback_of(t, p, param);
    int32_t pp = lr__prefill_policy(p, param);
    return t->def[p].needs | t->def[pp].needs |
           (fb != LR__POLICY_NONE ? t->def[fb].needs : 0);
}

uint32_t
lr__policy_narrow(const struct lr__ptable *t, int32_t p, const double *param)
{
    int32_t fb = fallback_of(t, p, param);
    int32_t pp = lr__prefill_policy(p, param);
    uint32_t a = t->def[p].narrow, b = t->def[pp].narrow;
    uint32_t f = fb != LR__POLICY_NONE ? t->def[fb].narrow : a;
    return a == 0 || b == 0 || f == 0 ? 0 : a | b | f;
}

int32_t
lr_policy_ring_key(int32_t policy, uint32_t *ranks)
{
    uint32_t k = 0;
    int32_t key = -1;
    if (policy >= 0 && policy < LR__POLICY_COUNT) {
        double param[LR__PARAM_COUNT];
        lr__param_defaults(param);
        key = lr__policy_ring(&lr__builtin_policies, policy, param, &k);
    }
    if (ranks != NULL)
        *ranks = k;
    return key;
}

/* ---- the public entry ---------------------------------------------------------------- */

LR__INIT_SIZED(lr_policy_input_init_sized, lr_policy_input, input_defaults,
               .block_tokens = 16, .last_instance = NONE)

LR__INIT_SIZED(lr_decision_init_sized, lr_decision, decision_defaults,
               .instance = NONE, .alt_instance = NONE,
               .decider = LR__POLICY_NONE, .prefill_instance = NONE,
               .prefill_reason = -1)

/* The caller's parameters over the defaults, each checked. */
static lr_status
params_from(const lr_policy_input *in, double *param)
{
    lr__param_defaults(param);
    LR_RETURN_IF(in->n_params > 0 && in->params == NULL, LR_EINVAL);
    size_t n = in->n_params < LR__PARAM_COUNT ? in->n_params : LR__PARAM_COUNT;
    for (size_t k = 0; k < n; k++) {
        LR_TRY(lr__param_check((int32_t)k, in->params[k]));
        param[k] = in->params[k];
    }
    return LR_OK;
}

/* The choice into a decision, as route() reports it. */
void
lr__decision_fill(lr_decision *d, const struct lr__pctx *c,
                  const struct lr__choice *ch, uint64_t seed)
{
    const lr_candidate *r = lr__row(c, ch->k);
    d->instance = r->instance;
    d->reason = ch->reason;
    d->cached_tokens = r->cached_tokens;
    d->best_cached_tokens = lr__best_cached(c);
    d->cost = ch->cost;
    d->alt_instance = ch->alt;
    if (d->struct_size >= LR_DECISION_SIZE_V2) {
        d->decider = ch->decider;
        d->seed = seed;
    }
    if (d->struct_size >= LR_DECISION_SIZE_V3) {
        bool split = ch->kp != LR_NIL;
        d->prefill_instance = split ? lr__row(c, ch->kp)->instance : NONE;
        d->prefill_reason = ch->preason;
        d->prefill_cached_tokens =
            split ? lr__row(c, ch->kp)->cached_tokens : 0;
        d->reserved = 0;
        d->transfer_s = ch->transfer_s;
    }
}

lr_status
lr_policy_decide(int32_t policy, const lr_policy_input *input,
                 const lr_candidate *rows, size_t n_rows, size_t row_size,
                 double *scores, lr_decision *out)
{
    LR_RETURN_IF(input == NULL || rows == NULL || n_rows == 0 ||
                     scores == NULL || out == NULL,
                 LR_EINVAL);
    LR_RETURN_IF(n_rows > UINT32_MAX - 1, LR_EINVAL);
    LR_RETURN_IF(policy < 0 || policy >= LR__POLICY_COUNT, LR_ENOTSUP);
    lr_policy_input in = { 0 }; /* a 0.2 caller's has no budget */
    LR_TRY(lr__copy_sized(&in, sizeof in, input, LR_POLICY_INPUT_SIZE_V1));
    LR_RETURN_IF(!(in.ttft_budget_s >= 0) || isinf(in.ttft_budget_s),
                 LR_EINVAL);
    LR_RETURN_IF(out->struct_size < LR_DECISION_SIZE_V1, LR_EVERSION);
    double param[LR__PARAM_COUNT];
    LR_TRY(params_from(&in, param));
    LR_TRY(lr__rows_check(rows, n_rows, row_size, in.prompt_tokens));
    if (in.block_tokens == 0)
        in.block_tokens = input_defaults.block_tokens;
    LR_RETURN_IF(in.model != NULL &&
                     lr_mlp_n_inputs(in.model) != LR_LODESTAR_FEATURES,
                 LR_EINVAL);
    struct lr__rng rng;
    lr__rng_seed(&rng, in.seed);
    for (size_t k = 0; k < n_rows; k++)
        scores[k] = NAN;
    struct lr__pctx c = {
        .rows = rows,
        .n = n_rows,
        .stride = row_size,
        .param = param,
        .prompt = in.prompt_tokens,
        .output = in.expected_output_tokens
                      ? in.expected_output_tokens
                      : (uint32_t)param[LR_PARAM_DEFAULT_OUTPUT_TOKENS],
        .block_tokens = in.block_tokens,
        .last = in.last_instance,
        .model = in.model,
        .pt = &lr__builtin_policies,
        .rng = &rng,
        .score = scores,
        .budget_s = in.ttft_budget_s,
    };
    c.last_prefill = c.last;
    /* the rows that can decode first, and at least one of them */
    size_t nd = lr__decode_rows(&c);
    for (size_t k = nd; k < n_rows; k++)
        LR_RETURN_IF(lr__row(&c, k)->role != LR_ROLE_PREFILL, LR_EINVAL);
    LR_RETURN_IF(nd == 0, LR_EINVAL);
    struct lr__choice ch = lr__pair_decide(policy, &c, nd);
    lr__decision_fill(out, &c, &ch, in.seed);
    out->n_scores = 0;
    return LR_OK;
}
