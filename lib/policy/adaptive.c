/* adaptive: the library's own policy. It needs nothing a gateway does not
 * have: no class rates, no profile; it calibrates a TTFT model from the
 * first tokens the router observes, and it charges each placement what it
 * costs the other requests, not only what it costs its own.
 *
 * Calibration (router side, per class of instances). For each first token
 * on an instance of class c, with W the prefill tokens the request queued
 * behind plus its own uncached tokens at dispatch and D the requests
 * decoding there:
 *
 *   TTFT - RTT  ~  W x (s0 + s1 D) + b0 + b1 D,   every term >= 0
 *
 * fitted per class by least squares over the last ~FIT_MEMORY first
 * tokens (older ones weigh exponentially less, so the fit follows a class
 * whose speed drifts), shrunk towards a prior: the told class rate (the
 * library default when the host told none), 100% uncertain, so the first
 * few first tokens already move it. The terms are kept >= 0 (the
 * constrained least squares solved exactly per first token: four terms,
 * sixteen active sets). The signs matter more than they seem: in a fleet
 * past its capacity W, D and the queue all grow together, and an
 * unconstrained fit (a Kalman filter, tried first) explained the waits
 * with a negative slowdown against a large per-decoding step, until the
 * seconds per token it reported fell to nothing and the choice stopped
 * seeing the cache at all. Terms in the queue's length or the KV cache's
 * use did the same (they grow with W) and were dropped: W carries them.
 * The fit learns from the first tokens whose own prefill was at least a
 * fifth of W (QUEUE_RATIO_MAX): one that waited mostly behind others
 * measures how that queue drained, and in a saturated engine a queue
 * drains at the pace of KV space and decoding, not of prefill; learning
 * it as the class's speed made a class whose small KV cache stalls look
 * slow, its cache was left, and its backlog grew (conversation on the
 * "lodestar" cluster at 4 requests/s: 1.17x the best policy's mean, 1.00x
 * with the filter). So in a fleet past its capacity the fit keeps what
 * it learnt before the queues grew; the work term below is what makes
 * hits win there.
 *
 * Per class, not per instance: instances of one kind share one fit, so
 * noise in per-instance estimates cannot make a homogeneous fleet prefer
 * one replica. The router writes the fit, evaluated at each row's D, into
 * the candidate rows (ttft_s_per_token, ttft_base_s, ttft_s_per_decoding),
 * with each instance's time-averaged queue (prefill_tokens_avg) and route
 * rate: the policy itself stays a pure function of the table.
 *
 * Choice (lr__adaptive_decide), per row, in seconds:
 *
 *   ttft   = s x (pending + uncached) + base + RTT
 *   work   = WORK_WEIGHT x L x s x uncached     (those who queue behind)
 *   decode = CONTENTION x in flight x s_per_decoding  (those decoding there)
 *   score  = ttft + work + decode, near-ties (TIE_S) drawn
 *
 * L, the fleet's load, is the requests routed per instance per second
 * times the backlog most instances hold (the lower quartile of their
 * queued prefill, averaged over ~10 s or as it is now, whichever is
 * more): how many requests will queue behind the work a placement adds.
 * At low load L ~ 0 and the choice is the least predicted TTFT; when the
 * fleet is backlogged, a cache miss costs everyone, so hits win (what
 * preble and ranvier get right under overload); because L is a
 * fleet-wide figure, held by most instances, a burst on one prefix does
 * not turn affinity into a hot spot (what they get wrong). The averages
 * cover the part of their window the router has seen (1 - exp(-age /
 * tau) of it): counting the time before the router's first route as
 * idle made the route rate 1/10 of the truth after a second, and a fleet
 * driven past its capacity from the start was routed greedily for its
 * first ten or twenty seconds (share-70 on 4 L20 + 4 A100: 1.16x the best
 * mean, 1.01x with both). The backlog now counts for the same reason: a
 * fleet all of whose instances are behind now is behind, whatever the
 * last ten seconds were (4 A100 past capacity: p99 1.60x, 1.01x). The decode
 * term is the externality a greedy TTFT choice ignores: sending work to
 * the nearest or fastest instance slows every request decoding there. A
 * prefix routed to an instance in the last FRESH_S counts as not cached:
 * a request admitted together with the one bringing it computes it again.
 *
 * uncached is the prompt less the hit the instance's engine is expected
 * to deliver: cached_tokens x (1 - cached_lost), the share of its
 * expected hits it lately reported not reusing (lr_router_observe_cached).
 * An engine whose own cache keeps less than the router's index believes
 * (llama.cpp's slots, where another conversation took the slot in
 * between) is credited with what it delivers, and the fit learns from the
 * same figure; an engine that delivers what it was expected to keeps
 * cached_lost = 0, and its choices are unchanged. A hit that forks from
 * a live sibling there (another conversation on the same system prompt,
 * sibling_tokens) counts x (1 - min(1, sibling_lost / SIBLING_SURE)): on
 * an engine that gives the newcomer the sibling's slot (llama.cpp) the
 * sibling computes again what the newcomer saves, and a new
 * conversation goes where its system prompt is cached with no live
 * conversation on it, or where the load says; on a paged engine
 * (sibling_lost near 0) nothing changes.
 *
 * LoRA adapters. A request whose adapter is not resident waits for its
 * load (learnt per class from first tokens, apart with and without a
 * free slot). With every slot of an instance held by adapters with work,
 * an engine serves the adapters in turns: a request waits for those
 * queued ahead of it to take theirs, and that wait, not the load, makes
 * the tail when slots are scarce (one slot per engine, or a fleet past
 * its capacity): its mean per class said nothing of an instance where
 * ten adapters queue. So the wait is learnt per adapter ahead (x: the
 * other adapters with work there, beyond the slots but the one its own
 * holds or waits for), as the slope of what the TTFT model leaves
 * unexplained against x; the slope, not the mean, so that a model that
 * runs short in a saturated fleet is not charged to the instances that
 * have adapters queued, and per class, or over every class while a
 * class's own first tokens tell none. A resident adapter's request waits
 * x slopes (joining its adapter's turn changes no one's); a load waits
 * them after the load and adds a turn, which each adapter queued there
 * waits out, so the choice charges it its wait again, for the others.
 * x is counted on the router's residency table (lr__adapters_ahead):
 * the adapters of its own requests in flight there and those the engine
 * last reported running or waiting, each once, against the slots the
 * host told (max_adapters, or the engine's report); so an engine whose
 * slots were all held from the router's first route on (a router started
 * on a busy fleet) has its queue counted too, and an adapter whose
 * requests all ended there is not. Requests that name no adapter have no
 * such columns, and their rows, fits and choices are as before.
 */
#include "policy/adaptive.h"

#include "common/wire.h"

#include <math.h>

#include "common/lr_hash.h"
#include "parts/adapters.h"
#include "policy/cost.h"
#include "policy/policy.h"

/* The share of a sibling's victims' reports that lost their history
 * (lr_candidate.sibling_lost) past which an engine surely gives a
 * sibling's slot away: a newcomer takes one slot of the several its
 * siblings hold, so a fraction of the victims' reports shows it. */
#define SIBLING_SURE 0.25
#define KTOK 1000.0           /* W in the fit: thousands of tokens */
#define DSCALE 100.0          /* D in the fit: hundreds of requests */
#define W_MEAN_N 256          /* the typical W: a running mean over this many */
#define QAVG_TAU_S 10.0       /* the queue average's time constant */
#define QAVG_MIN_SEEN 0.01    /* a rate over 0.1 s of history at least */
#define BACKLOG_QUANTILE 0.25 /* the backlog "most instances" hold */
#define PRIOR_BASE_S 0.02     /* b0's prior: a step */
#define PRIOR_BASE_SD 0.1     /* ... and its uncertainty */
#define PRIOR_DEC_SD 0.5      /* s1 and b1 (per 100 decoding): may be large */
#define NOISE_SD 0.05         /* one TTFT's noise around the model, s */
#define FIT_MEMORY 500.0      /* first tokens the fit remembers, per class */
#define MIN_S0 1e-4           /* a 10M tokens/s class at most (s per ktok) */
#define QUEUE_RATIO_MAX 4.0   /* learn if the queue ahead <= 4x own prefill */
#define MAX_Y_S 3600.0        /* a first token after an hour: absurd input */
#define LOAD_MEMORY 32.0      /* adapter loads the load time averages over */
#define DECODE_MEMORY 512.0   /* completions the decode seconds average over */
#define MAX_LOAD_S 600.0      /* an adapter load's bound (as the parameter) */
#define MAX_STALL_S 1.0       /* the longest an adapter's load stalls a step */
#define SLOT_MEMORY 256.0     /* first tokens the slot wait fit remembers */
#define SLOT_MIN_N 16         /* first tokens, and turns, to tell a slope */

enum {
    S0,
    S1,
    B0,
    B1
};

/* ---- router side: calibration ---------------------------------------------- */

lr_status
lr__adaptive_setup(struct lr__adaptive *ad, struct lr__mem *m,
                   uint32_t max_inst, uint32_t max_req)
{
    if (ad->rq != NULL)
        return LR_OK;
    struct lr__calib_req *rq = lr__calloc(m, max_req, sizeof *rq);
    struct lr__qavg *qa = lr__calloc(m, max_inst, sizeof *qa);
    if (rq == NULL || qa == NULL) {
        lr__free(m, rq, (size_t)max_req * sizeof *rq);
        lr__free(m, qa, (size_t)max_inst * sizeof *qa);
        return LR_ENOMEM;
    }
    ad->qavg = qa;
    ad->max_inst = max_inst;
    for (size_t i = 0; i < max_req; i++) {
        rq[i].w = NAN;
        rq[i].dcls = UINT32_MAX;
    }
    memset(ad->cls, 0, sizeof ad->cls);
    memset(ad->decode, 0, sizeof ad->decode);
    ad->rq = rq;
    ad->max_req = max_req;
    return LR_OK;
}

void
lr__adaptive_free(struct lr__adaptive *ad, struct lr__mem *m)
{
    lr__free(m, ad->rq, (size_t)ad->max_req * sizeof *ad->rq);
    lr__free(m, ad->qavg, (size_t)ad->max_inst * sizeof *ad->qavg);
    ad->rq = NULL;
    ad->qavg = NULL;
}

/* The class's model before any first token: the told rate (the library
 * default when the host told none), 100% uncertain; no decode slowdown
 * known yet. The ridge is the prior's weight in the fit, in first tokens
 * of noise NOISE_SD: sigma^2 / prior variance, per term. */
static void
prior(struct lr__calib *c, double prefill_rate)
{
    static const double sd[LR__CALIB_DIM] = {
        [S1] = PRIOR_DEC_SD, [B0] = PRIOR_BASE_SD, [B1] = PRIOR_DEC_SD
    };
    memset(c, 0, sizeof *c);
    c->prior[S0] = KTOK / prefill_rate;
    c->prior[B0] = PRIOR_BASE_S;
    for (int i = 0; i < LR__CALIB_DIM; i++) {
        double v = i == S0 ? c->prior[S0] : sd[i];
        c->ridge[i] = NOISE_SD * NOISE_SD / (v * v);
        c->theta[i] = c->prior[i];
    }
}

/* The decoding requests on a row's instance, scaled. */
static double
decoding(const lr_candidate *row)
{
    uint32_t d = row->inflight > row->queued ? row->inflight - row->queued : 0;
    return (double)d / DSCALE;
}

/* The weight of q's past at now_ns: exp(-elapsed / tau); 1 before its
 * first update (an empty average: nothing to decay). */
static double
qavg_keep(const struct lr__qavg *q, uint64_t now_ns)
{
    if (q->t_ns == 0 || now_ns <= q->t_ns)
        return 1;
    return exp(-(double)(now_ns - q->t_ns) / 1e9 / QAVG_TAU_S);
}

/* The adapters a request of adapter `adapter` would queue behind for a
 * slot on instance id (lr__adapters_ahead); -1 when none is known: the
 * request names no adapter, or the instance's slots were not told. */
static double
ahead_on(const struct lr__adapters *tab, uint64_t adapter, uint32_t id)
{
    if (adapter == 0)
        return -1;
    uint32_t x = lr__adapters_ahead(tab, id, adapter);
    return x == UINT32_MAX ? -1 : (double)x;
}

/* What one more adapter ahead adds to a first token's wait: the slope of
 * the fit; -1 while the first tokens seen do not tell one (too few, too
 * few adapters ahead among them, or all with as many ahead). */
static double
fit_slope(const struct lr__slot_fit *f)
{
    double den = f->s0 * f->sxx - f->sx * f->sx;
    if (f->n < SLOT_MIN_N || f->sx < SLOT_MIN_N ||
        !(den > 1e-9 * f->s0 * f->sxx))
        return -1;
    double a = (f->s0 * f->sxy - f->sx * f->sy) / den;
    return !isfinite(a) ? -1 : a > 0 ? a : 0;
}

/* ... of a class, or of every class together while the class's own
 * first tokens tell none (a class that queues for slots seldom, or only
 * lately, is not taken for one that never waits); 0 until either does. */
static double
slot_slope(const struct lr__adaptive *ad, uint32_t cls, bool missing)
{
    double a = fit_slope(&ad->slot[cls][missing]);
    if (a < 0)
        a = fit_slope(&ad->slot_all[missing]);
    return a > 0 ? a : 0;
}

/* The seconds a request of row's adapter is expected to wait there for
 * the x adapters queued ahead of it to take their turns (0 until learnt):
 * as many turns as adapters ahead, each what one adds to a first token's
 * wait. */
static double
slot_wait(const struct lr__adaptive *ad, const lr_candidate *row, double x)
{
    if (!(x > 0))
        return 0;
    bool load = row->adapter_missing != 0;
    double v = x * slot_slope(ad, row->instance_class, load);
    return v < MAX_LOAD_S ? v : MAX_LOAD_S;
}

void
lr__adaptive_observe(struct lr__adaptive *ad, const lr_candidate *rows,
                     uint32_t n, uint32_t chosen, uint32_t chosen2,
                     uint64_t now_ns)
{
    for (uint32_t k = 0; k < n; k++) {
        struct lr__qavg *q = &ad->qavg[rows[k].instance];
        double keep = qavg_keep(q, now_ns);
        q->avg = keep * q->avg + (1 - keep) * (double)rows[k].prefill_tokens;
        q->seen = keep * q->seen + (1 - keep);
        q->routes = keep * q->routes +
                    (rows[k].instance == chosen || rows[k].instance == chosen2);
        if (now_ns > q->t_ns)
            q->t_ns = now_ns;
    }
}

/* The wait for the row's adapter into adapter_load_s: a load, and with
 * no slot free a slot's freeing (learnt apart; the load alone until one
 * was seen), and with every slot held the turns of the adapters queued
 * ahead (counted on tab), past the load when it must load. Returns the
 * wait of a request whose adapter is resident there: the turns ahead,
 * the first token's fixed wait. */
LR_NOINLINE static double
fill_adapter(const struct lr__adaptive *ad, lr_candidate *row,
             const struct lr__adapters *tab, uint64_t adapter)
{
    double x = ahead_on(tab, adapter, row->instance);
    const struct lr__load_fit *lf = ad->load[row->instance_class];
    bool full = row->adapter_free == 0;
    if (row->adapter_missing && lf[full].n > 0)
        row->adapter_load_s = lf[full].s;
    else if (row->adapter_missing && lf[0].n > 0)
        row->adapter_load_s = lf[0].s;
    double wait = slot_wait(ad, row, x);
    if (row->adapter_missing && wait > 0)
        row->adapter_load_s =
            (lf[0].n > 0 ? lf[0].s : row->adapter_load_s) + wait;
    return row->adapter_missing ? 0 : wait;
}

void
lr__adaptive_fill(const struct lr__adaptive *ad, lr_candidate *row,
                  const struct lr__adapters *tab, uint64_t adapter,
                  uint64_t now_ns, struct lr__keep_memo *memo)
{
    const struct lr__qavg *q = &ad->qavg[row->instance];
    if (q->t_ns != memo->t_ns) {
        memo->t_ns = q->t_ns;
        memo->keep = qavg_keep(q, now_ns);
    }
    /* the averages brought to now, over the part of the window the router
     * has seen: in its first seconds, the time before it is not idle time */
    double keep = memo->keep;
    double seen = keep * q->seen + (1 - keep);
    double now = (double)row->prefill_tokens;
    double avg = keep * q->avg + (1 - keep) * now;
    row->prefill_tokens_avg = seen > 0 ? avg / seen : now;
    row->route_rate = q->routes * keep / QAVG_TAU_S /
                      (seen > QAVG_MIN_SEEN ? seen : QAVG_MIN_SEEN);
    /* a row with nothing of an adapter to price (the request names none,
     * or its adapter is resident where the slots are not known) keeps the
     * calibration step small enough to stay inline in the gather */
    double waits = row->adapter_missing || row->adapter_free != UINT32_MAX
                       ? fill_adapter(ad, row, tab, adapter)
                       : 0;
    const struct lr__load_fit *dec = &ad->decode[row->instance_class];
    row->decode_s = dec->n > 0 ? dec->s : 0;
    const struct lr__calib *c = &ad->cls[row->instance_class];
    if (c->n == 0) {
        row->ttft_s_per_token = 0;
        row->ttft_base_s = waits;
        row->ttft_s_per_decoding = 0;
        return;
    }
    double d = decoding(row);
    double s = c->theta[S0] + c->theta[S1] * d;
    double b = c->theta[B0] + c->theta[B1] * d;
    double w = c->w_mean;
    double dd = (c->theta[S1] * w + c->theta[B1]) / DSCALE;
    /* a finite fit at absurd counts (2^32 decoding) may still overflow:
     * the row then keeps the told rate, as before any fit */
    if (!isfinite(s) || !isfinite(b) || !isfinite(dd)) {
        row->ttft_s_per_token = 0;
        row->ttft_base_s = waits;
        row->ttft_s_per_decoding = 0;
        return;
    }
    row->ttft_s_per_token = (s > MIN_S0 ? s : MIN_S0) / KTOK;
    row->ttft_base_s = (b > 0 ? b : 0) + waits;
    row->ttft_s_per_decoding = dd > 0 ? dd : 0;
}

void
lr__adaptive_dispatch(struct lr__adaptive *ad, uint32_t slot,
                      const lr_candidate *row, double uncached, double ahead,
                      double beyond_s)
{
    struct lr__calib *c = &ad->cls[row->instance_class];
    if (c->n == 0 && c->prior[S0] == 0)
        prior(c, row->prefill_rate);
    struct lr__calib_req *r = &ad->rq[slot];
    r->w = (float)(((double)row->prefill_tokens + uncached) / KTOK);
    r->d = (float)decoding(row);
    r->own = (float)(uncached / KTOK);
    r->rtt_s = (float)(row->rtt_ms / 1e3 + beyond_s);
    r->cls = row->instance_class;
    r->loads = !row->adapter_missing ? 0 : row->adapter_free > 0 ? 1 : 2;
    r->ahead = ahead >= 0 ? (float)ahead : -1.0f;
}

static bool
calib_finite(const struct lr__calib *c)
{
    double sum = 0;
    for (int i = 0; i < LR__CALIB_DIM; i++) {
        sum += c->theta[i] + c->bv[i];
        for (int j = 0; j < LR__CALIB_DIM; j++)
            sum += c->A[i][j];
    }
    return isfinite(sum); /* any inf or NaN makes the sum so */
}

/* Solve the k x k system M z = r (Gaussian elimination with partial
 * pivoting, M and r overwritten); false when M is singular. */
static bool
solve(int k, double M[LR__CALIB_DIM][LR__CALIB_DIM], double *r, double *z)
{
    for (int c = 0; c < k; c++) {
        int p = c;
        for (int i = c + 1; i < k; i++)
            if (fabs(M[i][c]) > fabs(M[p][c]))
                p = i;
        if (!(fabs(M[p][c]) > 0))
            return false;
        for (int j = 0; j < k; j++) {
            double t = M[c][j];
            M[c][j] = M[p][j];
            M[p][j] = t;
        }
        double t = r[c];
        r[c] = r[p];
        r[p] = t;
        for (int i = c + 1; i < k; i++) {
            double f = M[i][c] / M[c][c];
            for (int j = c; j < k; j++)
                M[i][j] -= f * M[c][j];
            r[i] -= f * r[c];
        }
    }
    for (int i = k - 1; i >= 0; i--) {
        double v = r[i];
        for (int j = i + 1; j < k; j++)
            v -= M[i][j] * z[j];
        z[i] = v / M[i][i];
    }
    return true;
}

/* Fold one observation y of x . theta into the class's fit: discount the
 * normal equations, add the observation, and solve
 *
 *   min  sum_k keep^k (y_k - x_k . theta)^2 + sum_i ridge_i (theta_i -
 * prior_i)^2 s.t. theta_i >= lo_i
 *
 * exactly. With H = A + diag(ridge) (positive definite: every ridge is
 * > 0) and g = bv + ridge . prior, the minimum is the one point where, for
 * some set F of free terms, theta solves H theta = g on F with the others
 * at their bounds, every free term is >= its bound, and the gradient
 * pushes every bound term against its bound (KKT). Four terms make
 * sixteen sets: each is tried, the first that satisfies KKT is the
 * answer (there is exactly one). The old theta stays if none passes
 * numerically. */
static void
fit(struct lr__calib *c, const double *x, double y)
{
    static const double lo[LR__CALIB_DIM] = { [S0] = MIN_S0 };
    enum {
        N = LR__CALIB_DIM
    };
    const double keep = 1.0 - 1.0 / FIT_MEMORY;
    double H[N][N], g[N];
    for (int i = 0; i < N; i++) {
        c->bv[i] = keep * c->bv[i] + x[i] * y;
        for (int j = 0; j < N; j++)
            c->A[i][j] = keep * c->A[i][j] + x[i] * x[j];
    }
    for (int i = 0; i < N; i++) {
        g[i] = c->bv[i] + c->ridge[i] * c->prior[i];
        for (int j = 0; j < N; j++)
            H[i][j] = c->A[i][j] + (i == j ? c->ridge[i] : 0);
    }
    /* the all-free set first: in light load it is the answer */
    for (unsigned fixed = 0; fixed < 1u << N; fixed++) {
        double M[N][N], r[N], z[N], theta[N];
        int idx[N], k = 0;
        for (int i = 0; i < N; i++) {
            theta[i] = lo[i];
            if (!(fixed >> i & 1))
                idx[k++] = i;
        }
        for (int a = 0; a < k; a++) {
            r[a] = g[idx[a]];
            for (int j = 0; j < N; j++)
                if (fixed >> j & 1)
                    r[a] -= H[idx[a]][j] * lo[j];
            for (int e = 0; e < k; e++)
                M[a][e] = H[idx[a]][idx[e]];
        }
        if (k > 0 && !solve(k, M, r, z))
            continue;
        bool kkt = true;
        for (int a = 0; a < k; a++) {
            theta[idx[a]] = z[a];
            kkt &= z[a] >= lo[idx[a]];
        }
        /* a bound term must not want to move inwards: (H theta - g)_i >= 0 */
        for (int i = 0; i < N && kkt; i++) {
            if (!(fixed >> i & 1))
                continue;
            double grad = -g[i];
            for (int j = 0; j < N; j++)
                grad += H[i][j] * theta[j];
            kkt &= grad >= -1e-12 * (fabs(g[i]) + 1);
        }
        if (kkt) {
            memcpy(c->theta, theta, sizeof theta);
            return;
        }
    }
}

static void
fold_slot(struct lr__slot_fit *f, double x, double y)
{
    const double keep = 1.0 - 1.0 / SLOT_MEMORY;
    f->s0 = keep * f->s0 + 1;
    f->sx = keep * f->sx + x;
    f->sxx = keep * f->sxx + x * x;
    f->sy = keep * f->sy + y;
    f->sxy = keep * f->sxy + x * y;
    f->n++;
}

/* The class's model at features x. */
static double
predicted(const struct lr__calib *c, const double *x)
{
    double pred = 0;
    for (int i = 0; i < LR__CALIB_DIM; i++)
        pred += c->theta[i] * x[i];
    return pred;
}

/* The first token of an adapter request on an instance whose slots are
 * known: what the class's model leaves unexplained, against the adapters
 * it had ahead. Every such first token counts, however long its queue:
 * where slots are scarce the queues are long. */
static void
learn_slot_wait(struct lr__adaptive *ad, const struct lr__calib_req *r,
                double w, double ttft_s)
{
    double y = ttft_s - r->rtt_s;
    y = y < 0 ? 0 : y > MAX_Y_S ? MAX_Y_S : y;
    double x[LR__CALIB_DIM] = { w, w * r->d, 1, r->d };
    double extra = y - predicted(&ad->cls[r->cls], x);
    extra = extra < 0 ? 0 : extra > MAX_LOAD_S ? MAX_LOAD_S : extra;
    if (!isfinite(extra))
        return;
    fold_slot(&ad->slot[r->cls][r->loads > 0], r->ahead, extra);
    fold_slot(&ad->slot_all[r->loads > 0], r->ahead, extra);
}

/* Fold x into f's mean, whose weight stops falling at `memory` samples. */
static void
fit_mean(struct lr__load_fit *f, double x, double memory)
{
    f->n += f->n < UINT32_MAX;
    double a = 1.0 / (f->n < memory ? f->n : memory);
    f->s += a * (x - f->s);
}

void
lr__adaptive_settle(struct lr__adaptive *ad, uint32_t slot, double ttft_s)
{
    if (ad->rq == NULL)
        return;
    struct lr__calib_req *r = &ad->rq[slot];
    double w = r->w;
    r->w = NAN;
    if (isnan(w) || ttft_s < 0)
        return;
    if (r->ahead >= 0)
        learn_slot_wait(ad, r, w, ttft_s);
    /* waited mostly behind others: a measure of the queue, not the class */
    if (w - r->own > QUEUE_RATIO_MAX * r->own)
        return;
    struct lr__calib *c = &ad->cls[r->cls];
    double y = ttft_s - r->rtt_s;
    y = y < 0 ? 0 : y > MAX_Y_S ? MAX_Y_S : y;
    double x[LR__CALIB_DIM] = { w, w * r->d, 1, r->d };
    if (r->loads) {
        /* an adapter load: what the model leaves unexplained is the
         * load's time; the model itself learns from the others */
        double extra = y - predicted(c, x);
        extra = extra < 0 ? 0 : extra > MAX_LOAD_S ? MAX_LOAD_S : extra;
        struct lr__load_fit *lf = &ad->load[r->cls][r->loads - 1];
        if (isfinite(extra))
            fit_mean(lf, extra, LOAD_MEMORY);
        return;
    }
    /* absurd telemetry (a queue of 2^60 tokens) must not leave a fit that
     * is not finite: the rows would be refused and route() with them */
    struct lr__calib keep = *c;
    fit(c, x, y);
    if (!calib_finite(c)) {
        *c = keep;
        return;
    }
    c->n++;
    c->w_mean += (w - c->w_mean) / (c->n < W_MEAN_N ? c->n : W_MEAN_N);
}

void
lr__adaptive_end(struct lr__adaptive *ad, uint32_t slot, uint64_t now_ns,
                 bool completed)
{
    if (ad->rq == NULL)
        return;
    struct lr__calib_req *r = &ad->rq[slot];
    uint32_t cls = r->dcls;
    uint64_t first = r->first_ns;
    r->dcls = UINT32_MAX;
    r->first_ns = 0;
    if (!completed || cls >= LR_LOAD_MAX_CLASSES || first == 0 ||
        now_ns < first)
        return;
    fit_mean(&ad->decode[cls], (double)(now_ns - first) / 1e9, DECODE_MEMORY);
}

uint64_t
lr__adaptive_digest(const struct lr__adaptive *ad, uint64_t d)
{
    if (ad->rq == NULL)
        return d;
    d = lr__digest_mix(d, lr__hash(ad->cls, sizeof ad->cls, 11));
    d = lr__digest_mix(d, lr__hash(ad->load, sizeof ad->load, 14));
    d = lr__digest_mix(d, lr__hash(ad->slot, sizeof ad->slot, 15));
    d = lr__digest_mix(d, lr__hash(ad->slot_all, sizeof ad->slot_all, 16));
    d = lr__digest_mix(d, lr__hash(ad->decode, sizeof ad->decode, 17));
    d = lr__digest_mix(
        d, lr__hash(ad->qavg, (size_t)ad->max_inst * sizeof *ad->qavg, 13));
    return lr__digest_mix(
        d, lr__hash(ad->rq, (size_t)ad->max_req * sizeof *ad->rq, 12));
}

/* ---- deciding ----------------------------------------------------------------- */

/* Seconds per prefill token of a row: its fit, else its class rate. */
static double
s_per_token(const lr_candidate *r)
{
    return r->ttft_s_per_token > 0 ? r->ttft_s_per_token
                                   : 1.0 / r->prefill_rate;
}

/* The q-quantile (lower) of a[0..n), reordering a. */
static double
quantile(double *a, size_t n, double q)
{
    return lr__select(a, n, (size_t)(q * (double)(n - 1)));
}

/* The fleet's load: requests routed per instance per second times the
 * backlog most instances hold (the lower quartile of their queued
 * prefill, in seconds), averaged over ~10 s or now, whichever is more:
 * how many requests will queue behind the work a placement adds. Uses
 * the scores as scratch. */
static double
fleet_load(const struct lr__pctx *c)
{
    double rate = 0;
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        rate += r->route_rate;
        c->score[k] = s_per_token(r) * r->prefill_tokens_avg;
    }
    double lasting = quantile(c->score, c->n, BACKLOG_QUANTILE);
    for (size_t k = 0; k < c->n; k++) {
        const lr_candidate *r = lr__row(c, k);
        c->score[k] = s_per_token(r) * (double)r->prefill_tokens;
    }
    double now = quantile(c->score, c->n, BACKLOG_QUANTILE);
    return rate / (double)c->n * (lasting > now ? lasting : now);
}

/* The row's predicted TTFT for this request (*ttft), plus what placing
 * it there costs the others: its prefill work for those queued behind
 * it, its decoding for those on the instance. */
static double
social_cost(const struct lr__pctx *c, const lr_candidate *r, double load,
            double *ttft_out)
{
    double s = s_per_token(r);
    double cached = lr__adaptive_delivered(r, c->stride, c->param);
    /* a prefix routed here so recently that the request bringing it may
     * be admitted in the same step is not cached yet: a request admitted
     * with it computes it again */
    if (r->cached_age_s >= 0 && r->cached_age_s < LR__P(c, ADAPTIVE_FRESH_S))
        cached = 0;
    /* the hit forks from a live sibling's prompt there: on an engine that
     * gives this request the sibling's slot (sibling_lost near 1), the
     * sibling computes again what this request saves */
    if (c->stride >= LR_CANDIDATE_SIZE_V6 && r->sibling_tokens > 0)
        cached *=
            1 - (r->sibling_lost < SIBLING_SURE ? r->sibling_lost / SIBLING_SURE
                                                : 1);
    double own = s * ((double)c->prompt - cached);
    double ttft = s * (double)r->prefill_tokens + own + r->ttft_base_s +
                  LR__P(c, ADAPTIVE_RTT_WEIGHT) * r->rtt_ms / 1e3;
    double work = LR__P(c, ADAPTIVE_WORK_WEIGHT) * load * own;
    double decode = LR__P(c, ADAPTIVE_CONTENTION) * (double)r->inflight *
                    r->ttft_s_per_decoding;
    /* a LoRA adapter to load: its own wait, the step it stalls for those
     * in flight there, when it evicts another adapter, that adapter's
     * next load, and with no slot free, the turn it adds */
    double load_s = lr__row_adapter_load_s(c, r);
    if (load_s > 0) {
        ttft += load_s;
        /* the load stalls the engine's steps; a wait for a slot beyond
         * what a load takes (MAX_STALL_S) is a wait while the engine runs
         * on, its own only */
        decode += LR__P(c, ADAPTIVE_CONTENTION) * (double)r->inflight *
                  (load_s < MAX_STALL_S ? load_s : MAX_STALL_S);
        work += r->adapter_evicts ? load_s : 0;
        /* with every slot held its adapter also adds a turn there, which
         * each adapter queued there waits out: about as long as its own
         * wait for a slot */
        work += r->adapter_free == 0 ? load_s : 0;
    }
    *ttft_out = ttft;
    return ttft + work + decode;
}

/* Whether row k is predicted to meet a TTFT budget (0: every row is). */
static inline bool
meets(const struct lr__pctx *c, size_t k, double load, double budget_s)
{
    if (budget_s <= 0)
        return true;
    double t;
    (void)social_cost(c, lr__row(c, k), load, &t);
    return t <= budget_s;
}

/* A draw among the rows within ADAPTIVE_TIE_S of `lo` that meet
 * budget_s (0: every row), so that noise (a probe's jitter, a fit's) does
 * not pile a burst onto one instance; `first` when none does (scores all
 * infinite or NaN: absurd telemetry). */
static uint32_t
draw_near(const struct lr__pctx *c, double lo, double load, double budget_s,
          uint32_t first)
{
    double tie = lo + LR__P(c, ADAPTIVE_TIE_S);
    uint32_t pick = first, ties = 0;
    for (uint32_t k = 0; k < c->n; k++)
        if (c->score[k] <= tie && meets(c, k, load, budget_s) &&
            lr__rng_below(c->rng, ++ties) == 0)
            pick = k;
    return pick;
}

/* The least score among the rows predicted to meet budget_s > 0, drawn
 * among near-ties; LR_INSTANCE_NONE when no row meets it. */
static uint32_t
least_meeting(const struct lr__pctx *c, double load, double budget_s)
{
    double lo = INFINITY;
    uint32_t first = LR_INSTANCE_NONE;
    for (uint32_t k = 0; k < c->n; k++) {
        if (!meets(c, k, load, budget_s))
            continue;
        if (first == LR_INSTANCE_NONE)
            first = k;
        if (c->score[k] < lo)
            lo = c->score[k];
    }
    return first == LR_INSTANCE_NONE ? first
                                     : draw_near(c, lo, load, budget_s, first);
}

/* The row predicted fastest for this request. */
static uint32_t
fastest(const struct lr__pctx *c, double load)
{
    uint32_t best = 0;
    double lo = INFINITY, t;
    for (uint32_t k = 0; k < c->n; k++) {
        (void)social_cost(c, lr__row(c, k), load, &t);
        if (t < lo) {
            lo = t;
            best = k;
        }
    }
    return best;
}

struct lr__choice
lr__adaptive_decide(const struct lr__pctx *c)
{
    double load = fleet_load(c), lo = INFINITY, t;
    for (size_t k = 0; k < c->n; k++) {
        c->score[k] = social_cost(c, lr__row(c, k), load, &t);
        lo = c->score[k] < lo ? c->score[k] : lo;
    }
    uint32_t pick = draw_near(c, lo, load, 0, 0);
    if (c->budget_s <= 0 || LR__P(c, ADAPTIVE_DEADLINE) == 0 ||
        meets(c, pick, load, c->budget_s))
        return lr__choose(c, pick, LR_REASON_MIN_COST, LR_POLICY_ADAPTIVE);
    /* Headroom: the least-cost choice would miss the request's deadline.
     * Among the instances predicted to meet it, the least cost; when none
     * is, the one predicted fastest, the request's best chance. */
    uint32_t k = least_meeting(c, load, c->budget_s);
    if (k == LR_INSTANCE_NONE)
        k = fastest(c, load);
    return lr__choose(c, k,
                      k == pick ? LR_REASON_MIN_COST : LR_REASON_SLO_SWITCH,
                      LR_POLICY_ADAPTIVE);
}

/* ---- disaggregated fleets ------------------------------------------------------ */

/* The seconds a request decoding at row r spends on the others decoding
 * there: its expected output tokens, each a step that the requests in
 * flight there lengthen by their calibrated seconds per decoding request.
 * What its time per output token (TPOT) is there, beyond an idle
 * instance's: a split's transfer draws a conversation to the decode
 * instance that holds its history, and without this that instance's
 * batch grew until its TPOT p99 was 1.11x the published rules' (the
 * cross-rack P/D cell, the median over seeds 1-8; 1.01x with it). */
static double
decoding_s(const struct lr__pctx *c, const lr_candidate *r)
{
    return (double)c->output * (double)r->inflight * r->ttft_s_per_decoding;
}

/* The wait at the prefill instance that lets a request stay whole on a
 * busy decode instance: at least this many times the seconds it stalls
 * those decoding there, all together (lrsim's P/D cells, seeds 1-16:
 * 1.5 to 2.5 met the published rules' TTFT and TPOT everywhere). */
#define STALL_PAYS 2.0

/* A request kept whole at decode row r: its social cost there (and what
 * it costs those decoding there, decoding_s), where its prefill may stay;
 * else INFINITY. A prefill mixed into the decode steps delays every
 * request in flight there (decoding, or about to: the decode legs waiting
 * for their KV, the whole requests queued before it) and every one that
 * arrives meanwhile by its own seconds, and each of them by that share of
 * its decode seconds is what its time per output token (TPOT) grows by.
 * So where any is, the prefill may stay only when
 *
 *   - its seconds are at most LR_PARAM_ADAPTIVE_PD_STALL (0.1) x the
 *     decode seconds of a request there (decode_s, its class's mean;
 *     before any completed, the expected output tokens x the first-token
 *     base, PRIOR_BASE_S before any): a chat turn on a history the
 *     instance holds, not a long prompt; and
 *   - the wait it would have at the prefill instance (p_wait, the queue
 *     at the pool's best, in seconds) is at least STALL_PAYS x those
 *     seconds x the requests it stalls: a pool that is behind.
 *
 * Every request small enough, whatever the pool's queue (0.01 x its
 * expected output x base), left mean TTFT 2.3x dynamo-pd's on chat 1P:3D,
 * where the one prefill instance is the fleet's bottleneck, and TPOT p99
 * 1.1x the rules' on 3P:1D, where the one decode instance is (seeds
 * 1-8); the same bound on the decode seconds did as badly on 3P:1D chat.
 * Looser bounds, or a price per stalled second (0.05 to 10), kept long
 * prompts whole (TPOT p99 1.2x to 16x). */
static double
whole_at(const struct lr__pctx *c, const lr_candidate *r, double load,
         double p_wait)
{
    double t, cost = social_cost(c, r, load, &t);
    double own =
        s_per_token(r) *
        ((double)c->prompt - lr__adaptive_delivered(r, c->stride, c->param));
    own = own > 0 ? own : 0;
    double dec = (double)r->inflight + r->route_rate * own;
    double base = r->ttft_base_s > 0 ? r->ttft_base_s : PRIOR_BASE_S;
    double decode = c->stride >= LR_CANDIDATE_SIZE_V5 && r->decode_s > 0
                        ? r->decode_s
                        : (double)c->output * base;
    if (dec >= 0.5 && !(own <= LR__P(c, ADAPTIVE_PD_STALL) * decode &&
                        p_wait >= STALL_PAYS * own * dec))
        return INFINITY;
    return cost + decoding_s(c, r);
}

/* The decode leg of a split at row r: the step that brings its first
 * token once the KV is there, the way to it, what its decoding costs
 * those decoding there, and what they cost its own (decoding_s). */
static double
decode_leg(const struct lr__pctx *c, const lr_candidate *r)
{
    return r->ttft_base_s + LR__P(c, ADAPTIVE_RTT_WEIGHT) * r->rtt_ms / 1e3 +
           LR__P(c, ADAPTIVE_CONTENTION) * (double)r->inflight *
               r->ttft_s_per_decoding +
           decoding_s(c, r);
}

/* The pair: with p the prefill row of least cost (its predicted TTFT and
 * the work it adds there, as for a whole request), each decode row's cost
 * is the lesser of keeping the request whole there and splitting it from
 * p (p's cost, the KV transfer of what the row does not hold, its decode
 * leg); the least decode row wins (near-ties drawn), split when that is
 * the lesser, and the prefill row is then chosen again with the transfer
 * to that decode row counted (a rack's link against a region's). Each
 * pool's load (fleet_load) is its own. The deadline headroom of
 * lr__adaptive_decide is not applied to pairs. */
struct lr__choice
lr__adaptive_decide_pd(const struct lr__pctx *c, size_t nd)
{
    struct lr__pctx dc = lr__sub_table(c, 0, nd);
    struct lr__pctx pc = lr__sub_table(c, nd, c->n - nd);
    double load_d = fleet_load(&dc), load_p = fleet_load(&pc), t;
    uint32_t best_p = 0;
    for (size_t k = 0; k < pc.n; k++) {
        pc.score[k] = social_cost(&pc, lr__row(&pc, k), load_p, &t);
        if (pc.score[k] < pc.score[best_p])
            best_p = (uint32_t)k;
    }
    const lr_candidate *p = lr__row(&pc, best_p);
    double p_cost = pc.score[best_p], lo = INFINITY;
    double p_wait = s_per_token(p) * (double)p->prefill_tokens;
    for (size_t k = 0; k < nd; k++) {
        const lr_candidate *d = lr__row(&dc, k);
        double split =
            p_cost + decode_leg(c, d) +
            lr__transfer_s(c, p, d,
                           (double)c->prompt - (double)d->cached_tokens);
        double whole = whole_at(&dc, d, load_d, p_wait);
        dc.score[k] = split < whole ? split : whole;
        lo = dc.score[k] < lo ? dc.score[k] : lo;
    }
    uint32_t k = draw_near(&dc, lo, load_d, 0, 0);
    const lr_candidate *d = lr__row(&dc, k);
    struct lr__choice ch =
        lr__choose(&dc, k, LR_REASON_MIN_COST, LR_POLICY_ADAPTIVE);
    double whole = whole_at(&dc, d, load_d, p_wait);
    if (!isinf(whole) && dc.score[k] >= whole) {
        lr__set_leg(c, &ch, LR_NIL, LR_REASON_WHOLE);
        return ch;
    }
    /* the prefill rows' scores still hold their costs: add the transfer
     * to the decode row chosen */
    double plo = INFINITY;
    for (size_t j = 0; j < pc.n; j++) {
        pc.score[j] +=
            lr__transfer_s(c, lr__row(&pc, j), d,
                           (double)c->prompt - (double)d->cached_tokens);
        plo = pc.score[j] < plo ? pc.score[j] : plo;
    }
    uint32_t kp = draw_near(&pc, plo, load_p, 0, 0);
    lr__set_leg(c, &ch, (uint32_t)nd + kp, LR_REASON_MIN_COST);
    return ch;
}

/* ---- the state, behind its operations ------------------------------------------ */

static lr_status
ad_create(const struct lr__penv *env, void **out)
{
    struct lr__adaptive *ad = lr__calloc(env->mem, 1, sizeof *ad);
    LR_RETURN_IF(ad == NULL, LR_ENOMEM);
    lr_status st =
        lr__adaptive_setup(ad, env->mem, env->max_inst, env->max_req);
    if (st != LR_OK) {
        lr__free(env->mem, ad, sizeof *ad);
        return st;
    }
    *out = ad;
    return LR_OK;
}

static void
ad_destroy(void *st, struct lr__mem *m)
{
    lr__adaptive_free(st, m);
    lr__free(m, st, sizeof(struct lr__adaptive));
}

/* Each row's calibrated model and time averages (lr__adaptive_fill). */
static void
ad_gather(const void *st, lr_candidate *rows, uint32_t n,
          struct lr__route_view *v, uint64_t now_ns)
{
    struct lr__keep_memo memo = LR__KEEP_MEMO_INIT;
    const struct lr__adapters *tab = v->adapters;
    uint64_t adapter = v->adapter; /* read once: a row's store may alias */
    for (uint32_t k = 0; k < n; k++)
        lr__adaptive_fill(st, &rows[k], tab, adapter, now_ns, &memo);
}

/* Its own placements: what the fit will learn from at the first token,
 * and the averages of every row it saw. */
static void
ad_record(void *st, const struct lr__placed *p, uint64_t now_ns)
{
    struct lr__adaptive *ad = st;
    if (p->v->policy != LR_POLICY_ADAPTIVE || p->slot == LR_NIL ||
        ad->rq == NULL)
        return;
    /* a split request's first token is its prefill's (at the prefill
     * instance's class), the KV's transfer and the decode instance's
     * first step: the fit learns the first, the rest a fixed delay */
    bool split = p->ch.kp != LR_NIL;
    const lr_candidate *c = &p->rows[split ? p->ch.kp : p->k];
    const lr_candidate *d = &p->rows[p->k];
    double delivered = lr__adaptive_delivered(c, sizeof *c, p->v->param);
    double beyond =
        split ? p->ch.transfer_s + d->ttft_base_s + d->rtt_ms / 1e3 : 0;
    lr__adaptive_dispatch(st, p->slot, c, (double)p->v->q->n_tokens - delivered,
                          ahead_on(p->v->adapters, p->v->adapter, c->instance),
                          beyond);
    lr__adaptive_observe(st, p->rows, p->n, d->instance,
                         split ? c->instance : LR_INSTANCE_NONE, now_ns);
    ad->rq[p->slot].dcls = d->instance_class;
    ad->rq[p->slot].first_ns = 0;
}

static void
ad_first_token(void *st, uint32_t slot, double ttft_s, uint64_t now_ns,
               int32_t policy, const double *param)
{
    (void)policy;
    struct lr__adaptive *ad = st;
    /* a frozen fit takes no sample */
    lr__adaptive_settle(ad, slot,
                        param[LR_PARAM_ADAPTIVE_CALIBRATE] != 0 ? ttft_s : -1);
    if (ad->rq != NULL && ad->rq[slot].dcls != UINT32_MAX && now_ns > 0)
        ad->rq[slot].first_ns = now_ns;
}

static void
ad_ended(void *st, uint32_t slot, uint64_t now_ns, bool completed)
{
    lr__adaptive_settle(st, slot, -1);
    lr__adaptive_end(st, slot, now_ns, completed);
}

/* Snapshot section ADPT: u32 classes; per class f64 theta, bv, prior,
 * ridge and a row of A per term, f64 w_mean, u32 first tokens fitted. */
static void
write_fits(struct lr__wr *w, const struct lr__adaptive *ad)
{
    lr__wr_u32(w, LR_LOAD_MAX_CLASSES);
    for (uint32_t c = 0; c < LR_LOAD_MAX_CLASSES; c++) {
        const struct lr__calib *k = &ad->cls[c];
        for (int i = 0; i < LR__CALIB_DIM; i++) {
            lr__wr_f64(w, k->theta[i]);
            lr__wr_f64(w, k->bv[i]);
            lr__wr_f64(w, k->prior[i]);
            lr__wr_f64(w, k->ridge[i]);
            for (int j = 0; j < LR__CALIB_DIM; j++)
                lr__wr_f64(w, k->A[i][j]);
        }
        lr__wr_f64(w, k->w_mean);
        lr__wr_u32(w, k->n);
    }
}

static lr_status
ad_save(const void *st, struct lr__mem *m, lr_blob **out)
{
    struct lr__wr w = { NULL, 0 };
    write_fits(&w, st);
    uint8_t *buf;
    LR_TRY(lr__blob_new(m, w.n, out, &buf));
    w = (struct lr__wr){ buf, 0 };
    write_fits(&w, st);
    return LR_OK;
}

/* A fit a restore may take: every term >= 0 and finite (the fit solves
 * with A + diag(ridge)). */
static bool
finite_calib(const struct lr__calib *k)
{
    for (int i = 0; i < LR__CALIB_DIM; i++) {
        if (!(k->theta[i] >= 0) || !isfinite(k->theta[i]) ||
            !isfinite(k->bv[i]) || !isfinite(k->prior[i]) ||
            !(k->ridge[i] >= 0) || !isfinite(k->ridge[i]))
            return false;
        for (int j = 0; j < LR__CALIB_DIM; j++)
            if (!isfinite(k->A[i][j]))
                return false;
    }
    return isfinite(k->w_mean);
}

static lr_status
ad_load(const struct lr__penv *env, const uint8_t *p, size_t n, void **out)
{
    struct lr__calib cls[LR_LOAD_MAX_CLASSES];
    memset(cls, 0, sizeof cls); /* padding too: the digest hashes the bytes */
    struct lr__rd rd = { p, p + n, false };
    LR_RETURN_IF(lr__rd_u32(&rd) != LR_LOAD_MAX_CLASSES, LR_ECORRUPT);
    for (uint32_t c = 0; c < LR_LOAD_MAX_CLASSES; c++) {
        struct lr__calib *k = &cls[c];
        for (int i = 0; i < LR__CALIB_DIM; i++) {
            k->theta[i] = lr__rd_f64(&rd);
            k->bv[i] = lr__rd_f64(&rd);
            k->prior[i] = lr__rd_f64(&rd);
            k->ridge[i] = lr__rd_f64(&rd);
            for (int j = 0; j < LR__CALIB_DIM; j++)
                k->A[i][j] = lr__rd_f64(&rd);
        }
        k->w_mean = lr__rd_f64(&rd);
        k->n = lr__rd_u32(&rd);
        LR_RETURN_IF(rd.bad || !finite_calib(k), LR_ECORRUPT);
    }
    LR_RETURN_IF(rd.p != rd.end, LR_ECORRUPT);
    void *st = NULL;
    LR_TRY(ad_create(env, &st));
    memcpy(((struct lr__adaptive *)st)->cls, cls, sizeof cls);
    *out = st;
    return LR_OK;
}

static uint64_t
ad_digest(const void *st, uint64_t d)
{
    return lr__adaptive_digest(st, d);
}

const struct lr__pstate_ops lr__adaptive_ops = {
    .create = ad_create,
    .destroy = ad_destroy,
    .gather = ad_gather,
    .record = ad_record,
    .first_token = ad_first_token,
    .ended = ad_ended,
    .tag = 0x54504441u, /* "ADPT" little-endian */
    .save = ad_save,
    .load = ad_load,
    .digest = ad_digest,
};
