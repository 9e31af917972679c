/* GORGO: one cost per candidate, w_rtt x RTT + uncached prefill tokens +
 * w_queue x queued tokens (cost.h, lr__cost_gorgo), and the weights tuned
 * online by the cost model's (1+1) evolution strategy on the rolling p95
 * of the first tokens the router observes (cost.c, lr_cost_observe).
 *
 * The state is that tuner (an lr_cost of kind LR_COST_GORGO). The
 * weights it has in service are what the decision reads: after anything
 * that may move them (a first token, a parameter set, a restore) the
 * router asks the state to sync them into its parameters, so the policy
 * stays a pure function of the table and the parameters. It observes only
 * the first tokens of the routes it placed while it was the router's
 * policy: another policy's placements say nothing of its weights. */
#include "common/wire.h"
#include "policy/cost.h"
#include "policy/policy.h"

#define SEED_GORGO 0x4c52474f52474f31ull /* "LRGORGO1" */

struct lr__choice
lr__gorgo_decide(const struct lr__pctx *c)
{
    bool at_first = LR__P(c, GORGO_RELEASE_AT_FIRST_TOKEN) != 0;
    for (size_t k = 0; k < c->n; k++)
        c->score[k] =
            lr__cost_gorgo(lr__row(c, k), c->prompt, LR__P(c, GORGO_W_RTT),
                           LR__P(c, GORGO_W_QUEUE), at_first);
    return lr__choose(c, lr__pick_min(c), LR_REASON_MIN_COST, LR_POLICY_GORGO);
}

/* The router parameters that live in the tuner, and its keys for them. */
static int32_t
cost_key(int32_t key)
{
    switch (key) {
    case LR_PARAM_GORGO_W_RTT:
        return LR_COST_W_RTT;
    case LR_PARAM_GORGO_W_QUEUE:
        return LR_COST_W_QUEUE;
    case LR_PARAM_GORGO_SIGMA:
        return LR_COST_SIGMA;
    case LR_PARAM_GORGO_W_RTT_MAX:
        return LR_COST_W_RTT_MAX;
    case LR_PARAM_GORGO_W_QUEUE_MIN:
        return LR_COST_W_QUEUE_MIN;
    case LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN:
        return LR_COST_QUEUE_AT_FIRST_TOKEN;
    default:
        return -1;
    }
}

/* The parameters in the order a fresh tuner takes them: the bounds on the
 * weights before the weights. */
static const int32_t taken[] = {
    LR_PARAM_GORGO_W_RTT_MAX, LR_PARAM_GORGO_W_QUEUE_MIN,
    LR_PARAM_GORGO_W_RTT,     LR_PARAM_GORGO_W_QUEUE,
    LR_PARAM_GORGO_SIGMA,     LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN,
};

static lr_status
gorgo_create(const struct lr__penv *env, void **out)
{
    lr_cost_options co;
    lr_cost_options_init(&co);
    co.allocator = &env->mem->a;
    co.kind = LR_COST_GORGO;
    co.seed = env->seed ^ SEED_GORGO;
    lr_cost *c = NULL;
    LR_TRY(lr_cost_create(&co, &c));
    /* the router's parameters are in bounds, and the bounds are the
     * tuner's: none of these can fail */
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++)
        (void)lr_cost_set_param(c, cost_key(taken[i]), env->param[taken[i]]);
    (void)lr_cost_tune(c, env->param[LR_PARAM_GORGO_FROZEN] == 0);
    *out = c;
    return LR_OK;
}

static void
gorgo_destroy(void *st, struct lr__mem *m)
{
    (void)m;
    lr_cost_destroy(st);
}

static lr_status
gorgo_set_param(void *st, const struct lr__penv *env, int32_t key, double value)
{
    (void)env;
    if (key == LR_PARAM_GORGO_FROZEN)
        (void)lr_cost_tune(st, value == 0); /* a GORGO model, 0 or 1 */
    else if (cost_key(key) >= 0)            /* same bounds: cannot fail */
        (void)lr_cost_set_param(st, cost_key(key), value);
    return LR_OK;
}

/* The weights in service (a trial's while one runs) are what the policy
 * reads. */
static void
gorgo_sync(const void *st, double *param)
{
    param[LR_PARAM_GORGO_W_RTT] = lr__cost_in_service(st, LR_COST_W_RTT);
    param[LR_PARAM_GORGO_W_QUEUE] = lr__cost_in_service(st, LR_COST_W_QUEUE);
}

/* lr_router_get_param() reads the tuner's own values: the incumbent
 * weights during a trial, sigma as the 1/5 rule has moved it. */
static bool
gorgo_get(const void *st, int32_t key, double *value)
{
    return cost_key(key) >= 0 &&
           lr_cost_get_param(st, cost_key(key), value) == LR_OK;
}

static void
gorgo_first_token(void *st, uint32_t slot, double ttft_s, uint64_t now_ns,
                  int32_t policy, const double *param)
{
    (void)slot;
    (void)now_ns;
    (void)param;
    if (policy == LR_POLICY_GORGO)
        (void)lr_cost_observe(st, ttft_s); /* finite, >= 0 */
}

/* Snapshot section GORG: f64 w_rtt, f64 w_queue, f64 sigma. */
#define SECTION_BYTES 24u
static const int32_t saved[3] = { LR_COST_W_RTT, LR_COST_W_QUEUE,
                                  LR_COST_SIGMA };

static lr_status
gorgo_save(const void *st, struct lr__mem *m, lr_blob **out)
{
    uint8_t *buf;
    LR_TRY(lr__blob_new(m, SECTION_BYTES, out, &buf));
    struct lr__wr w = { buf, 0 };
    for (int i = 0; i < 3; i++) {
        double v = 0;
        (void)lr_cost_get_param(st, saved[i], &v);
        lr__wr_f64(&w, v);
    }
    return LR_OK;
}

static lr_status
gorgo_load(const struct lr__penv *env, const uint8_t *p, size_t n, void **out)
{
    struct lr__rd rd = { p, p + n, false };
    double v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = lr__rd_f64(&rd);
        lr_bounds b = lr_cost_param_bounds(LR_COST_GORGO, saved[i]);
        LR_RETURN_IF(!(v[i] >= b.lo && v[i] <= b.hi), LR_ECORRUPT);
    }
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    void *st = NULL;
    LR_TRY(gorgo_create(env, &st));
    for (int i = 0; i < 3; i++) /* in bounds: cannot fail */
        (void)lr_cost_set_param(st, saved[i], v[i]);
    *out = st;
    return LR_OK;
}

static uint64_t
gorgo_digest(const void *st, uint64_t d)
{
    return lr__digest_mix(d, lr__cost_digest(st));
}

const struct lr__pstate_ops lr__gorgo_ops = {
    .create = gorgo_create,
    .destroy = gorgo_destroy,
    .set_param = gorgo_set_param,
    .sync = gorgo_sync,
    .get = gorgo_get,
    .first_token = gorgo_first_token,
    .tag = 0x47524f47u, /* "GORG" little-endian */
    .save = gorgo_save,
    .load = gorgo_load,
    .digest = gorgo_digest,
};
