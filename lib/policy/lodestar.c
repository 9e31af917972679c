/* Lodestar: an online-learned reward predictor with guard rails.
 *
 * Decide (lr__lodestar_decide), over the candidate table:
 *
 *   no model    -> the fallback policy decides (cold start)
 *   explore     = with probability epsilon (0 by default, as the paper's
 *                 runs) a uniform draw over every row, before the K-filter
 *                 and before scoring (its Algorithm 4); only that row is
 *                 scored, for the decision's cost
 *   candidates  = the K-filter's two ring candidates when the fleet's KV
 *                 use is high and a long prefix is cached, else the
 *                 deepest hit + the d - 1 rows of least estimated TTFT
 *                 (d = LR_PARAM_LODESTAR_CANDIDATES; 0: every row)
 *   features    -> one batched forward pass per LR__CHUNK rows
 *   out of range: each row judged alone; the rows out of the model's
 *                 training range are dropped (OOD on), and the fallback
 *                 decides only when none is left (OOD)
 *   choose      = a draw among the rows left within TIE of the best
 *                 predicted reward: with epsilon 0 this is the only
 *                 exploration, and it never lands on a row predicted far
 *                 worse or out of range
 *
 * The candidates are marked in the score array (0 = candidate, NaN = not)
 * and then scored in place (score = -predicted reward), so deciding needs
 * no memory beyond the caller's scores and a fixed chunk on the stack.
 *
 * Router side: the features of each dispatch wait in the request's slot
 * until its first token makes them a sample (reward -TTFT); a direct-mapped
 * table remembers when each (prefix, instance) pair last took a route, for
 * the decayed hit ratio (a collision forgets). */
#include "policy/lodestar.h"

#include "common/lr_hash.h"
#include "learn/learner.h"
#include "learn/mlp.h"
#include "policy/cost.h"
#include "policy/policy.h"

#define F LR_LODESTAR_FEATURES
#define NONE LR_INSTANCE_NONE
#define LR__CHUNK 64u           /* rows per forward pass */
#define FRESH_HALF_LIFE_S 15.0  /* the decayed hit ratio's half-life */
#define FRESH_UNKNOWN_DECAY 0.5 /* unknown age: one half-life */
#define CANDIDATE_MARK 0.0      /* a score marking a row to be scored */

_Static_assert(LR__F_CLASS + LR__F_CLASSES == F, "feature columns");

/* ---- features ------------------------------------------------------------- */

void
lr__lodestar_features(const lr_candidate *r, uint32_t prompt, uint32_t output,
                      float *f)
{
    double p = (double)prompt;
    double hit = p > 0 ? r->cached_tokens / p : 0;
    double dec = 0;
    if (hit > 0)
        dec = hit * (r->cached_age_s < 0
                         ? FRESH_UNKNOWN_DECAY
                         : exp2(-r->cached_age_s / FRESH_HALF_LIFE_S));
    f[LR__F_PROMPT] = (float)p;
    f[LR__F_OUTPUT] = (float)output;
    f[LR__F_HIT] = (float)hit;
    f[LR__F_HIT_DECAYED] = (float)dec;
    f[LR__F_INFLIGHT] = (float)r->inflight;
    f[LR__F_QUEUED] = (float)r->queued;
    f[LR__F_PREFILL] = (float)r->prefill_tokens;
    f[LR__F_DECODE] = (float)r->decode_tokens;
    f[LR__F_RUNNING] = (float)r->running;
    f[LR__F_WAITING] = (float)r->waiting;
    f[LR__F_KV_USE] = (float)r->kv_use;
    f[LR__F_RTT_MS] = (float)r->rtt_ms;
    for (uint32_t j = LR__F_CLASS; j < F; j++)
        f[j] = 0;
    uint32_t cls = r->instance_class < LR__F_CLASSES ? r->instance_class
                                                     : LR__F_CLASSES - 1;
    f[LR__F_CLASS + cls] = 1;
}

/* ---- deciding --------------------------------------------------------------- */

/* The K-filter: under KV pressure with a long cached prefix, only the
 * ring's two candidates. Marks them; returns how many. */
static uint32_t
mark_kfilter(const struct lr__pctx *c)
{
    if (c->n <= 2 || lr__best_cached(c) <= LR__P(c, LODESTAR_KFILTER_TOKENS))
        return 0;
    double kv = 0;
    for (size_t k = 0; k < c->n; k++)
        kv += lr__row(c, k)->kv_use;
    if (kv / (double)c->n <= LR__P(c, LODESTAR_KV_THRESHOLD))
        return 0;
    uint32_t nc = 0;
    for (uint32_t rank = 1; rank <= 2; rank++) {
        uint32_t k = lr__row_of_rank(c, rank);
        if (k != LR_NIL) {
            c->score[k] = CANDIDATE_MARK;
            nc++;
        }
    }
    return nc;
}

/* The candidates a cheap model thinks best: the deepest hit, and the
 * d - 1 other rows with the least estimated TTFT (the queue and prefill
 * estimate of min-ttft, lr__cost_ttft), ties to the lower row; or every
 * row. The network then only ranks what the cheap model could not rule
 * out: scoring 8 rows costs a sixth of scoring 64 (docs/learning.md has
 * what it does to decisions). */
#define TOPD_MAX 64u

static uint32_t
mark_sample(const struct lr__pctx *c)
{
    uint32_t n = (uint32_t)c->n;
    uint32_t d = (uint32_t)LR__P(c, LODESTAR_CANDIDATES);
    if (d == 0 || n <= d || d > TOPD_MAX) {
        for (uint32_t k = 0; k < n; k++)
            c->score[k] = CANDIDATE_MARK;
        return n;
    }
    uint32_t bk = 0;
    for (uint32_t k = 1; k < n; k++)
        if (lr__row(c, k)->cached_tokens > lr__row(c, bk)->cached_tokens)
            bk = k;
    c->score[bk] = CANDIDATE_MARK;
    /* the d - 1 least estimates among the others, kept sorted */
    double best[TOPD_MAX];
    uint32_t row[TOPD_MAX], m = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (k == bk)
            continue;
        double e = lr__cost_ttft(lr__row(c, k), c->prompt, 0, 0);
        if (m == d - 1 && !(e < best[m - 1]))
            continue;
        uint32_t i = m < d - 1 ? m++ : m - 1;
        for (; i > 0 && e < best[i - 1]; i--) {
            best[i] = best[i - 1];
            row[i] = row[i - 1];
        }
        best[i] = e;
        row[i] = k;
    }
    for (uint32_t i = 0; i < m; i++)
        c->score[row[i]] = CANDIDATE_MARK;
    return m + 1;
}

static lr_status
predict(const struct lr__pctx *c, const float *x, size_t n, float *out)
{
    return c->model_scratch != NULL
               ? lr__mlp_predict_into(c->model, x, n, out, c->model_scratch)
               : lr_mlp_predict(c->model, x, n, out);
}

/* Score the marked rows in chunks: score = -predicted reward. With
 * `drop`, a row out of the model's range is unmarked (NaN) instead. Counts
 * the rows left into *left. */
static lr_status
score_marked(const struct lr__pctx *c, bool drop, uint32_t *left)
{
    float x[LR__CHUNK * F], pred[LR__CHUNK];
    uint32_t idx[LR__CHUNK];
    uint8_t out[LR__CHUNK];
    *left = 0;
    for (uint32_t k = 0; k < c->n;) {
        uint32_t m = 0;
        for (; k < c->n && m < LR__CHUNK; k++) {
            if (isnan(c->score[k]))
                continue;
            idx[m] = k;
            lr__lodestar_features(lr__row(c, k), c->prompt, c->output,
                                  x + (size_t)m * F);
            m++;
        }
        if (m == 0)
            break;
        LR_TRY(predict(c, x, m, pred));
        if (drop)
            LR_TRY(lr_mlp_out_of_range_rows(c->model, x, m, out, NULL));
        for (uint32_t i = 0; i < m; i++) {
            bool gone = drop && out[i];
            c->score[idx[i]] = gone ? NAN : -(double)pred[i];
            *left += !gone;
        }
    }
    return LR_OK;
}

/* Score row k alone (the exploration draw's cost). */
static lr_status
score_one(const struct lr__pctx *c, uint32_t k)
{
    float x[F], pred;
    lr__lodestar_features(lr__row(c, k), c->prompt, c->output, x);
    LR_TRY(predict(c, x, 1, &pred));
    c->score[k] = -(double)pred;
    return LR_OK;
}

/* The fallback policy decides, for `why`. */
static struct lr__choice
fallback(const struct lr__pctx *c, int32_t why)
{
    for (size_t k = 0; k < c->n; k++)
        c->score[k] = NAN;
    /* the fallback's row of the same table (not lr__policy_decide: the
     * table calls this file, and this file does not call the table) */
    struct lr__choice ch =
        c->pt->def[(int32_t)LR__P(c, LODESTAR_FALLBACK)].decide(c);
    ch.reason = why;
    return ch;
}

/* A draw among the rows within TIE of the best predicted reward. */
static uint32_t
pick_near_best(const struct lr__pctx *c)
{
    double top = -INFINITY;
    for (size_t k = 0; k < c->n; k++)
        if (!isnan(c->score[k]) && -c->score[k] > top)
            top = -c->score[k];
    double thr = top - LR__P(c, LODESTAR_TIE) * fabs(top);
    uint32_t pick = LR_NIL, ties = 0;
    for (uint32_t k = 0; k < c->n; k++)
        if (!isnan(c->score[k]) && -c->score[k] >= thr &&
            lr__rng_below(c->rng, ++ties) == 0)
            pick = k;
    return pick;
}

struct lr__choice
lr__lodestar_decide(const struct lr__pctx *c)
{
    if (c->model == NULL)
        return fallback(c, LR_REASON_COLD_START);
    /* Algorithm 4's exploration: uniform over every row, before the
     * K-filter and the scores (no draw at all with epsilon 0) */
    double eps = LR__P(c, LODESTAR_EPSILON);
    if (eps > 0 && lr__rng_unit(c->rng) < eps) {
        uint32_t k = (uint32_t)lr__rng_below(c->rng, c->n);
        if (score_one(c, k) != LR_OK)
            return fallback(c, LR_REASON_COLD_START);
        return lr__choose(c, k, LR_REASON_EXPLORE, LR_POLICY_LODESTAR);
    }
    bool kf = mark_kfilter(c) > 0;
    if (!kf)
        (void)mark_sample(c);
    uint32_t left = 0;
    if (score_marked(c, LR__P(c, LODESTAR_OOD) != 0, &left) != LR_OK)
        return fallback(c, LR_REASON_COLD_START);
    if (left == 0) /* every candidate out of range */
        return fallback(c, LR_REASON_OOD);
    uint32_t k = pick_near_best(c);
    if (k == LR_NIL) /* no finite prediction: the model is of no use */
        return fallback(c, LR_REASON_COLD_START);
    struct lr__choice ch = lr__choose(
        c, k, kf ? LR_REASON_K_FILTER : LR_REASON_MIN_COST, LR_POLICY_LODESTAR);
    if (kf) { /* the other ring candidate, scored or dropped */
        uint32_t a = lr__row_of_rank(c, 1), b = lr__row_of_rank(c, 2);
        uint32_t other = k == a ? b : a;
        if (other != LR_NIL && other != k)
            ch.alt = lr__row(c, other)->instance;
    }
    return ch;
}

/* ---- router side ------------------------------------------------------------- */

lr_status
lr__lodestar_init(struct lr__lodestar *ls, const lr_learner_options *given,
                  const lr_allocator *a, uint32_t max_req)
{
    memset(ls, 0, sizeof *ls);
    atomic_init(&ls->learner, NULL);
    ls->max_req = max_req;
    lr_learner_options_init(&ls->lopt);
    if (given == NULL)
        return LR_OK;
    LR_TRY(lr__copy_sized(&ls->lopt, sizeof ls->lopt, given,
                          LR_LEARNER_OPTIONS_SIZE_V1));
    LR_RETURN_IF(ls->lopt.n_features != 0 && ls->lopt.n_features != F,
                 LR_EINVAL);
    const lr_mlp_options *mo = ls->lopt.mlp;
    ls->lopt.mlp = NULL; /* borrowed for the call only */
    if (mo != NULL) {
        lr_mlp_options_init(&ls->lmo);
        LR_TRY(lr__copy_sized(&ls->lmo, sizeof ls->lmo, mo,
                              LR_MLP_OPTIONS_SIZE_V1));
        ls->has_lmo = true;
    }
    lr_learner_options chk = ls->lopt;
    chk.n_features = F;
    chk.allocator = a;
    chk.mlp = ls->has_lmo ? &ls->lmo : NULL;
    return lr__learner_check_options(&chk);
}

void
lr__lodestar_free(struct lr__lodestar *ls, struct lr__mem *m)
{
    size_t nr = ls->max_req;
    lr_learner_destroy(atomic_load(&ls->learner));
    atomic_store(&ls->learner, NULL);
    lr__free(m, ls->rq_feat, nr * (F + 1) * sizeof(float));
    lr__free(m, ls->rq_has, nr);
    ls->rq_feat = NULL;
    ls->rq_has = NULL;
}

lr_status
lr__lodestar_setup(struct lr__lodestar *ls, struct lr__mem *m)
{
    if (atomic_load(&ls->learner) != NULL)
        return LR_OK;
    size_t nr = ls->max_req;
    ls->rq_feat = lr__alloc(m, nr * (F + 1) * sizeof(float));
    ls->rq_has = lr__calloc(m, nr, 1);
    lr_status st = LR_OK;
    if (ls->rq_feat == NULL || ls->rq_has == NULL)
        st = LR_ENOMEM;
    lr_learner *l = NULL;
    if (st == LR_OK) {
        lr_learner_options lo = ls->lopt;
        lo.allocator = &m->a;
        lo.n_features = F;
        lo.mlp = ls->has_lmo ? &ls->lmo : NULL;
        st = lr_learner_create(&lo, &l);
    }
    if (st != LR_OK) {
        lr__lodestar_free(ls, m);
        return st;
    }
    atomic_store(&ls->learner, l);
    return LR_OK;
}

lr_mlp *
lr__lodestar_model(struct lr__lodestar *ls)
{
    lr_learner *l = atomic_load_explicit(&ls->learner, memory_order_relaxed);
    return l != NULL ? lr__learner_model(l) : NULL;
}

void
lr__lodestar_dispatch(struct lr__lodestar *ls, uint32_t slot, bool ours,
                      const lr_candidate *row, uint32_t prompt, uint32_t output,
                      float predicted)
{
    ls->rq_has[slot] = ours;
    if (!ours)
        return;
    float *f = ls->rq_feat + (size_t)slot * (F + 1);
    lr__lodestar_features(row, prompt, output, f);
    f[F] = predicted;
}

void
lr__lodestar_settle(struct lr__lodestar *ls, uint32_t slot, double ttft_s,
                    double max_ttft_s)
{
    if (ls->rq_has == NULL || !ls->rq_has[slot])
        return;
    ls->rq_has[slot] = 0;
    if (ttft_s < 0)
        return;
    /* a slow first token is clipped to max_ttft_s, not dropped here: the
     * learner keeps it (the model sees what a backlog costs) when that is
     * within its max_abs_reward, and drops and counts it otherwise
     * (Lodestar's 15 s rule; the default, see LODESTAR_MAX_TTFT_S) */
    const float *f = ls->rq_feat + (size_t)slot * (F + 1);
    /* a full queue or a reward out of range is counted by the learner */
    (void)lr_learner_add_sample(
        atomic_load_explicit(&ls->learner, memory_order_relaxed), f,
        -(ttft_s < max_ttft_s ? ttft_s : max_ttft_s), f[F]);
}

uint64_t
lr__lodestar_digest(const struct lr__lodestar *ls, uint64_t d)
{
    lr_learner *l = atomic_load(&ls->learner);
    if (l == NULL)
        return d;
    d = lr__digest_mix(d, lr__learner_digest(l));
    for (uint32_t i = 0; i < ls->max_req; i++)
        if (ls->rq_has[i])
            d = lr__digest_mix(d, lr__hash(ls->rq_feat + (size_t)i * (F + 1),
                                           (F + 1) * sizeof(float), i));
    return d;
}

/* ---- the state, behind its operations ------------------------------------------ */

static lr_status
ls_check(const struct lr__penv *env)
{
    struct lr__lodestar ls;
    return lr__lodestar_init(&ls, env->learner, &env->mem->a, env->max_req);
}

static lr_status
ls_create(const struct lr__penv *env, void **out)
{
    struct lr__lodestar *ls = lr__alloc(env->mem, sizeof *ls);
    LR_RETURN_IF(ls == NULL, LR_ENOMEM);
    lr_status st = lr__lodestar_init(ls, env->learner, &env->mem->a,
                                     env->max_req); /* checked at create */
    if (st == LR_OK)
        st = lr__lodestar_setup(ls, env->mem);
    if (st != LR_OK) {
        lr__free(env->mem, ls, sizeof *ls);
        return st;
    }
    *out = ls;
    return LR_OK;
}

static void
ls_destroy(void *st, struct lr__mem *m)
{
    lr__lodestar_free(st, m);
    lr__free(m, st, sizeof(struct lr__lodestar));
}

/* The network in service, as its learner published it: taken over under
 * the router's write lock (refresh) before the decisions that read it, so
 * that decisions on several threads read one network and none is retired
 * while a decision holds it. */
static void
ls_prepare(const void *st, struct lr__pctx *c)
{
    lr_learner *l = lr__lodestar_learner(st);
    c->model = l != NULL ? lr__learner_serving(l) : NULL;
}

static bool
ls_refresh_due(const void *st)
{
    lr_learner *l = lr__lodestar_learner(st);
    return l != NULL && lr__learner_incoming(l);
}

static void
ls_refresh(void *st)
{
    (void)lr__lodestar_model(st);
}

/* Every placement: the dispatch's features wait for its first token when
 * Lodestar is the router's policy (its samples are its own placements),
 * with the prediction when Lodestar (not its fallback) chose; otherwise
 * the slot is cleared. */
static void
ls_record(void *st, const struct lr__placed *p, uint64_t now_ns)
{
    (void)now_ns;
    if (p->slot == LR_NIL)
        return;
    float pred = p->ch.decider == LR_POLICY_LODESTAR ? (float)-p->ch.cost : NAN;
    lr__lodestar_dispatch(st, p->slot, p->v->policy == LR_POLICY_LODESTAR,
                          &p->rows[p->k], (uint32_t)p->v->q->n_tokens,
                          p->output, pred);
}

static void
ls_first_token(void *st, uint32_t slot, double ttft_s, uint64_t now_ns,
               int32_t policy, const double *param)
{
    (void)policy;
    (void)now_ns;
    lr__lodestar_settle(st, slot, ttft_s, param[LR_PARAM_LODESTAR_MAX_TTFT_S]);
}

static void
ls_ended(void *st, uint32_t slot, uint64_t now_ns, bool completed)
{
    (void)now_ns;
    (void)completed;
    lr__lodestar_settle(st, slot, -1, 0);
}

/* Snapshot section LODE: the network in service (lr_mlp_save's format),
 * when there is one. */
static lr_status
ls_save(const void *st, struct lr__mem *m, lr_blob **out)
{
    (void)m;
    lr_mlp *net = lr__lodestar_model((struct lr__lodestar *)st);
    *out = NULL;
    return net != NULL ? lr_mlp_save(net, out) : LR_OK;
}

static lr_status
ls_load(const struct lr__penv *env, const uint8_t *p, size_t n, void **out)
{
    lr_mlp *net = NULL;
    LR_TRY(lr_mlp_load(p, n, &env->mem->a, &net));
    lr_status st =
        lr_mlp_n_inputs(net) == LR_LODESTAR_FEATURES ? LR_OK : LR_ECORRUPT;
    void *ls = NULL;
    if (st == LR_OK)
        st = ls_create(env, &ls);
    if (st == LR_OK) {
        st = lr__learner_install(lr__lodestar_learner(ls), net);
        if (st == LR_OK)
            net = NULL; /* the learner's now */
        else
            ls_destroy(ls, env->mem);
    }
    lr_mlp_destroy(net);
    if (st == LR_OK)
        *out = ls;
    return st;
}

static uint64_t
ls_digest(const void *st, uint64_t d)
{
    return lr__lodestar_digest(st, d);
}

lr_learner *
lr__lodestar_learner(const void *st)
{
    const struct lr__lodestar *ls = st;
    return ls != NULL
               ? atomic_load_explicit(&((struct lr__lodestar *)ls)->learner,
                                      memory_order_acquire)
               : NULL;
}

const struct lr__pstate_ops lr__lodestar_ops = {
    .check = ls_check,
    .create = ls_create,
    .destroy = ls_destroy,
    .refresh_due = ls_refresh_due,
    .refresh = ls_refresh,
    .prepare = ls_prepare,
    .record = ls_record,
    .first_token = ls_first_token,
    .ended = ls_ended,
    .tag = 0x45444f4cu, /* "LODE" little-endian */
    .save = ls_save,
    .load = ls_load,
    .digest = ls_digest,
};
