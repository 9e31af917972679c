/* lr_cost: the cost models and GORGO's online tuner.
 *
 * The formulas themselves are inline in cost.h so that the decide
 * functions and lr_cost_eval() run the same code. This file
 * holds the handle: its kind, the parameter vector with per-kind bounds,
 * and the (1+1) evolution strategy that tunes a GORGO model's weights.
 *
 * The tuner, per observed TTFT:
 *
 *   window (LR_COST_TUNE_WINDOW samples, rolling) <- ttft
 *   every LR_COST_TUNE_HOP samples, once the window is full (one step
 *   per hop, as GORGO: 18 steps by sample 672):
 *     phase MEASURE: the window scores the incumbent (p95) -> propose
 *     phase TRIAL:   the window (its last hop the trial's own samples)
 *                    p95 < incumbent x (1 - 0.5%) ? accept : roll back;
 *                    1/5 rule over the last 8 trials adapts sigma;
 *                    propose the next trial unless sigma < 0.02
 *   propose: w' = clip(exp(ln w + sigma x N(0, 1)), bounds)
 *
 * The weights in service are param[] (a trial's while one runs); the
 * incumbent is kept aside and is what lr_cost_get_param() reports.
 */
#include "policy/cost.h"

#include <stdlib.h>

#include "common/lr_hash.h"

#define N_KEYS 9
#define N_KINDS 3

/* GORGO's published guard rails and the 1/5 rule's constants. */
#define W_RTT_FLOOR 0.05    /* the tuner never drops w_rtt below this */
#define W_QUEUE_CAP 0.5     /* ... nor raises w_queue above this */
#define LOG_FLOOR 1e-6      /* log of a zero weight */
#define ACCEPT_MARGIN 0.005 /* a trial must beat the incumbent by 0.5% */
#define SUCCESS_TARGET 0.2  /* the 1/5 rule */
#define SIGMA_FACTOR 0.817  /* sigma /= or *= this */
#define SIGMA_MAX 4.0       /* the step size never grows past this */
#define SIGMA_STOP 0.02     /* converged below this */
#define OUTCOMES 8          /* trials the success rate looks back over */
#define P95 0.95

enum {
    PHASE_MEASURE,
    PHASE_TRIAL
};

struct tuner {
    bool on;
    int phase;
    double inc_rtt, inc_queue; /* incumbent while a trial runs */
    double f_inc;              /* incumbent's p95, seconds (NaN: none) */
    uint32_t since_hop;
    uint8_t outcomes, n_outcomes; /* last trials, bit = success */
    double win[LR_COST_TUNE_WINDOW];
    uint32_t win_n, win_pos;
    uint64_t trials, accepted, samples;
};

struct lr_cost {
    struct lr__mem mem;
    int32_t kind;
    double param[N_KEYS]; /* in service */
    struct lr__rng rng;
    struct tuner t;
};

static const struct lr__range kdefs[N_KINDS][N_KEYS] = {
    [LR_COST_TTFT] = {
        [LR_COST_W_RTT] = { 0, 1000, 1, false },
        [LR_COST_W_STALL] = { 0, 1000, 1, false },
    },
    [LR_COST_GORGO] = {
        [LR_COST_W_RTT] = { 0, 10, 0.5, false },
        [LR_COST_W_QUEUE] = { 0, 10, 0.1, false },
        [LR_COST_QUEUE_AT_FIRST_TOKEN] = { 0, 1, 0, true },
        [LR_COST_SIGMA] = { 0, SIGMA_MAX, 0.5, false },
        [LR_COST_W_RTT_MAX] = { W_RTT_FLOOR, 10, 2.0, false },
        [LR_COST_W_QUEUE_MIN] = { 0, W_QUEUE_CAP, 0.05, false },
    },
    [LR_COST_DYNAMO] = {
        [LR_COST_W_UNCACHED] = { 0, 1000, 1, false },
        [LR_COST_BLOCK_TOKENS] = { 1, 1 << 20, 16, true },
    },
};

static const char *const kind_names[N_KINDS] = { "ttft", "gorgo", "dynamo" };

uint32_t
lr_cost_kind_count(void)
{
    return N_KINDS;
}

uint32_t
lr_cost_param_count(void)
{
    return N_KEYS;
}

const char *
lr_cost_kind_name(int32_t kind)
{
    return kind >= 0 && kind < N_KINDS ? kind_names[kind] : NULL;
}

static const struct lr__range *
kdef_of(int32_t kind, int32_t key)
{
    if (kind < 0 || kind >= N_KINDS || key < 0 || key >= N_KEYS ||
        !(kdefs[kind][key].hi > kdefs[kind][key].lo))
        return NULL;
    return &kdefs[kind][key];
}

lr_bounds
lr_cost_param_bounds(int32_t kind, int32_t key)
{
    return lr__bounds_of(kdef_of(kind, key));
}

LR__INIT_SIZED(lr_cost_options_init_sized, lr_cost_options, cost_defaults,
               .kind = LR_COST_TTFT)

LR__INIT_SIZED_ZERO(lr_cost_tuner_stats_init_sized, lr_cost_tuner_stats)

/* ---- the tuner ------------------------------------------------------------ */

static void
tuner_reset(lr_cost *c)
{
    struct tuner *t = &c->t;
    bool on = t->on;
    memset(t, 0, sizeof *t);
    t->on = on;
    t->phase = PHASE_MEASURE;
    t->inc_rtt = c->param[LR_COST_W_RTT];
    t->inc_queue = c->param[LR_COST_W_QUEUE];
    t->f_inc = NAN;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
window_p95(const struct tuner *t)
{
    double tmp[LR_COST_TUNE_WINDOW];
    memcpy(tmp, t->win, t->win_n * sizeof *tmp);
    qsort(tmp, t->win_n, sizeof *tmp, cmp_double);
    uint32_t i = (uint32_t)ceil(P95 * t->win_n) - 1;
    return tmp[i];
}

/* Standard normal draw (Box-Muller). */
static double
gauss(struct lr__rng *rng)
{
    double u1 = lr__rng_unit(rng), u2 = lr__rng_unit(rng);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double
clampd(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* Put a trial in service: a log-normal step from the incumbent. */
static void
propose(lr_cost *c)
{
    struct tuner *t = &c->t;
    double *p = c->param;
    t->inc_rtt = p[LR_COST_W_RTT];
    t->inc_queue = p[LR_COST_W_QUEUE];
    double lo_q = p[LR_COST_W_QUEUE_MIN];
    double hi_r = p[LR_COST_W_RTT_MAX];
    double w_r = p[LR_COST_W_RTT], w_q = p[LR_COST_W_QUEUE];
    double lr_ = log(w_r > W_RTT_FLOOR ? w_r : W_RTT_FLOOR);
    double lq = log(w_q > lo_q && w_q > LOG_FLOOR ? w_q
                    : lo_q > LOG_FLOOR            ? lo_q
                                                  : LOG_FLOOR);
    double sigma = p[LR_COST_SIGMA];
    p[LR_COST_W_RTT] =
        clampd(exp(lr_ + sigma * gauss(&c->rng)), W_RTT_FLOOR, hi_r);
    p[LR_COST_W_QUEUE] =
        clampd(exp(lq + sigma * gauss(&c->rng)), lo_q, W_QUEUE_CAP);
    t->phase = PHASE_TRIAL;
}

/* Judge the trial in service against the incumbent by the window's p95,
 * then adapt the step size by the 1/5 rule. */
static void
judge(lr_cost *c, double f)
{
    struct tuner *t = &c->t;
    bool ok = f < t->f_inc * (1.0 - ACCEPT_MARGIN);
    t->trials++;
    if (ok) {
        t->f_inc = f;
        t->accepted++;
    } else {
        c->param[LR_COST_W_RTT] = t->inc_rtt;
        c->param[LR_COST_W_QUEUE] = t->inc_queue;
    }
    t->outcomes = (uint8_t)((t->outcomes << 1) | (ok ? 1u : 0u));
    if (t->n_outcomes < OUTCOMES)
        t->n_outcomes++;
    int succ = 0;
    for (int i = 0; i < t->n_outcomes; i++)
        succ += (t->outcomes >> i) & 1;
    double rate = (double)succ / t->n_outcomes;
    double *sigma = &c->param[LR_COST_SIGMA];
    if (rate > SUCCESS_TARGET)
        *sigma /= SIGMA_FACTOR;
    else if (rate < SUCCESS_TARGET)
        *sigma *= SIGMA_FACTOR;
    if (*sigma > SIGMA_MAX)
        *sigma = SIGMA_MAX;
}

bool
lr__cost_tuning(const lr_cost *c)
{
    return c->kind == LR_COST_GORGO && c->t.on &&
           c->param[LR_COST_SIGMA] >= SIGMA_STOP;
}

lr_status
lr_cost_observe(lr_cost *c, double ttft_s)
{
    LR_RETURN_IF(c == NULL || !isfinite(ttft_s) || ttft_s < 0, LR_EINVAL);
    if (!lr__cost_tuning(c))
        return LR_OK;
    struct tuner *t = &c->t;
    t->samples++;
    t->win[t->win_pos] = ttft_s;
    t->win_pos = (t->win_pos + 1) % LR_COST_TUNE_WINDOW;
    if (t->win_n < LR_COST_TUNE_WINDOW)
        t->win_n++;
    t->since_hop++;
    if (t->win_n < LR_COST_TUNE_WINDOW || t->since_hop < LR_COST_TUNE_HOP)
        return LR_OK;
    t->since_hop = 0;
    double f = window_p95(t);
    if (t->phase == PHASE_MEASURE) {
        t->f_inc = f;
        propose(c);
        return LR_OK;
    }
    /* a trial is judged at every hop, on the rolling window (GORGO's Fig.
     * 3: 18 steps by sample 672); its last HOP samples are its own */
    judge(c, f);
    if (c->param[LR_COST_SIGMA] >= SIGMA_STOP)
        propose(c);
    return LR_OK; /* converged: the incumbent stays in service */
}

/* End a trial: the incumbent serves again. */
static void
end_trial(lr_cost *c)
{
    if (c->t.phase != PHASE_TRIAL)
        return;
    c->param[LR_COST_W_RTT] = c->t.inc_rtt;
    c->param[LR_COST_W_QUEUE] = c->t.inc_queue;
    c->t.phase = PHASE_MEASURE;
}

lr_status
lr_cost_tune(lr_cost *c, int32_t on)
{
    LR_RETURN_IF(c == NULL || (on != 0 && on != 1), LR_EINVAL);
    LR_RETURN_IF(c->kind != LR_COST_GORGO, LR_ENOTSUP);
    if (!on)
        end_trial(c);
    c->t.on = on != 0;
    return LR_OK;
}

lr_status
lr_cost_tuner_get_stats(const lr_cost *c, lr_cost_tuner_stats *out)
{
    LR_TRY(lr__out_check(c, out, LR_COST_TUNER_STATS_SIZE_V1));
    lr_cost_tuner_stats s;
    memset(&s, 0, sizeof s);
    const struct tuner *t = &c->t;
    if (!t->on)
        s.state = 0;
    else if (c->param[LR_COST_SIGMA] < SIGMA_STOP)
        s.state = 3;
    else
        s.state = t->phase == PHASE_TRIAL ? 2 : 1;
    s.trials = t->trials;
    s.accepted = t->accepted;
    s.sigma = c->param[LR_COST_SIGMA];
    s.incumbent_p95_s = t->f_inc;
    s.samples = t->samples;
    return lr__copy_out(out, &s, sizeof s);
}

/* ---- the handle ------------------------------------------------------------- */

lr_status
lr_cost_create(const lr_cost_options *opt, lr_cost **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    lr_cost_options o = cost_defaults;
    if (opt != NULL)
        LR_TRY(lr__copy_sized(&o, sizeof o, opt, LR_COST_OPTIONS_SIZE_V1));
    LR_RETURN_IF(o.kind < 0 || o.kind >= N_KINDS, LR_EINVAL);
    lr_cost *c;
    LR_TRY(LR__HANDLE_NEW(c, lr_cost, o.allocator));
    c->kind = o.kind;
    for (int k = 0; k < N_KEYS; k++)
        c->param[k] = kdefs[o.kind][k].def;
    lr__rng_seed(&c->rng, o.seed);
    tuner_reset(c);
    *out = c;
    return LR_OK;
}

void
lr_cost_destroy(lr_cost *c)
{
    if (c != NULL)
        LR__HANDLE_FREE(c, lr_cost);
}

int32_t
lr_cost_kind_of(const lr_cost *c)
{
    return c != NULL ? c->kind : -1;
}

lr_status
lr_cost_set_param(lr_cost *c, int32_t key, double value)
{
    LR_RETURN_IF(c == NULL || isnan(value), LR_EINVAL);
    const struct lr__range *d = kdef_of(c->kind, key);
    LR_RETURN_IF(d == NULL, LR_ENOTSUP);
    LR_RETURN_IF(value < d->lo || value > d->hi, LR_ERANGE);
    LR_RETURN_IF(d->integer && value != floor(value), LR_EINVAL);
    if (key == LR_COST_W_RTT || key == LR_COST_W_QUEUE) {
        /* a weight set by hand ends the trial and is the new incumbent */
        end_trial(c);
        c->param[key] = value;
        c->t.inc_rtt = c->param[LR_COST_W_RTT];
        c->t.inc_queue = c->param[LR_COST_W_QUEUE];
        return LR_OK;
    }
    c->param[key] = value;
    return LR_OK;
}

lr_status
lr_cost_get_param(const lr_cost *c, int32_t key, double *value)
{
    LR_RETURN_IF(c == NULL || value == NULL, LR_EINVAL);
    LR_RETURN_IF(kdef_of(c->kind, key) == NULL, LR_ENOTSUP);
    bool trial = c->t.phase == PHASE_TRIAL;
    if (trial && key == LR_COST_W_RTT)
        *value = c->t.inc_rtt;
    else if (trial && key == LR_COST_W_QUEUE)
        *value = c->t.inc_queue;
    else
        *value = c->param[key];
    return LR_OK;
}

double
lr__cost_in_service(const lr_cost *c, int32_t key)
{
    return c->param[key];
}

lr_status
lr_cost_eval(const lr_cost *c, uint32_t prompt, const lr_candidate *rows,
             size_t n, size_t row_size, double *out)
{
    LR_RETURN_IF(c == NULL || (n > 0 && (rows == NULL || out == NULL)),
                 LR_EINVAL);
    LR_TRY(lr__rows_check(rows, n, row_size, prompt));
    const double *p = c->param;
    for (size_t k = 0; k < n; k++) {
        const lr_candidate *r =
            (const lr_candidate *)((const char *)rows + k * row_size);
        switch (c->kind) {
        case LR_COST_TTFT:
            out[k] =
                lr__cost_ttft(r, prompt, p[LR_COST_W_RTT], p[LR_COST_W_STALL]);
            break;
        case LR_COST_GORGO:
            out[k] =
                lr__cost_gorgo(r, prompt, p[LR_COST_W_RTT], p[LR_COST_W_QUEUE],
                               p[LR_COST_QUEUE_AT_FIRST_TOKEN] != 0);
            break;
        default:
            out[k] = lr__cost_dynamo(r, prompt, p[LR_COST_BLOCK_TOKENS],
                                     p[LR_COST_W_UNCACHED]);
            break;
        }
    }
    return LR_OK;
}

/* ---- internal hooks ------------------------------------------------------------ */

uint64_t
lr__cost_digest(const lr_cost *c)
{
    if (c == NULL)
        return 0;
    const struct tuner *t = &c->t;
    uint64_t h = lr__hash(c->param, sizeof c->param, (uint64_t)c->kind);
    h = lr__digest_mix(h, ((uint64_t)t->on << 8) | (uint64_t)t->phase);
    h = lr__digest_mix(h, lr__double_bits(t->inc_rtt));
    h = lr__digest_mix(h, lr__double_bits(t->inc_queue));
    h = lr__digest_mix(h, lr__double_bits(t->f_inc));
    h = lr__digest_mix(h, (uint64_t)t->win_n);
    h = lr__digest_mix(h, ((uint64_t)t->since_hop << 32) | t->win_pos);
    h = lr__digest_mix(h, lr__hash(t->win, t->win_n * sizeof(double), 1));
    h = lr__digest_mix(h, t->trials ^ (t->accepted << 24) ^ t->samples);
    for (int k = 0; k < 4; k++)
        h = lr__digest_mix(h, c->rng.s[k]);
    return h;
}

size_t
lr__cost_mem_live(const lr_cost *c)
{
    return c != NULL ? c->mem.live : 0;
}

/* ---- candidate rows ------------------------------------------------------- */

static bool
row_finite_nonneg(double x)
{
    return isfinite(x) && x >= 0;
}

lr_status
lr__rows_check(const lr_candidate *rows, size_t n, size_t row_size,
               uint32_t prompt)
{
    LR_RETURN_IF(row_size < LR_CANDIDATE_SIZE_V1, LR_EINVAL);
    for (size_t k = 0; k < n; k++) {
        const lr_candidate *r =
            (const lr_candidate *)((const char *)rows + k * row_size);
        /* NONE is "no instance": a decision naming it names nothing */
        LR_RETURN_IF(r->instance == LR_INSTANCE_NONE, LR_EINVAL);
        LR_RETURN_IF(r->cached_tokens > prompt, LR_EINVAL);
        LR_RETURN_IF(!(isfinite(r->prefill_rate) && r->prefill_rate > 0),
                     LR_EINVAL);
        LR_RETURN_IF(!row_finite_nonneg(r->rtt_ms) ||
                         !row_finite_nonneg(r->stall_s),
                     LR_EINVAL);
        LR_RETURN_IF(!(r->kv_use >= 0 && r->kv_use <= 1), LR_EINVAL);
        LR_RETURN_IF(isnan(r->cached_age_s) || isinf(r->cached_age_s),
                     LR_EINVAL);
        LR_RETURN_IF(r->prefix_caching != 0 && r->prefix_caching != 1,
                     LR_EINVAL);
        LR_RETURN_IF(!row_finite_nonneg(r->ttft_s_per_token) ||
                         !row_finite_nonneg(r->ttft_base_s) ||
                         !row_finite_nonneg(r->ttft_s_per_decoding) ||
                         !row_finite_nonneg(r->prefill_tokens_avg) ||
                         !row_finite_nonneg(r->route_rate),
                     LR_EINVAL);
        LR_RETURN_IF(row_size >= LR_CANDIDATE_SIZE_V2 &&
                         !(r->cached_lost >= 0 && r->cached_lost <= 1),
                     LR_EINVAL);
        LR_RETURN_IF(
            row_size >= LR_CANDIDATE_SIZE_V3 &&
                ((r->adapter_missing != 0 && r->adapter_missing != 1) ||
                 (r->adapter_evicts != 0 && r->adapter_evicts != 1) ||
                 !row_finite_nonneg(r->adapter_load_s) ||
                 (uint64_t)r->cached_tokens + r->cpu_tokens + r->disk_tokens >
                     prompt),
            LR_EINVAL);
        LR_RETURN_IF(row_size >= LR_CANDIDATE_SIZE_V4 &&
                         (r->role < LR_ROLE_BOTH || r->role > LR_ROLE_DECODE),
                     LR_EINVAL);
        LR_RETURN_IF(row_size >= LR_CANDIDATE_SIZE_V5 &&
                         !row_finite_nonneg(r->decode_s),
                     LR_EINVAL);
        LR_RETURN_IF(row_size >= LR_CANDIDATE_SIZE_V6 &&
                         (r->sibling_fork_tokens > r->cached_tokens ||
                          !(r->sibling_lost >= 0 && r->sibling_lost <= 1)),
                     LR_EINVAL);
    }
    return LR_OK;
}
