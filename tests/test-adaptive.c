/* adaptive's calibration (lib/policy/adaptive.c): the per-class fit against a
 * naive solver of the same problem (every active set tried, the discounted
 * normal equations rebuilt from the whole history), the fit's terms kept
 * >= 0, a fleet past its capacity that must not teach it that prefill is
 * free, the wait per adapter queued for a slot, and, through lr_router,
 * learning which class is fast when the host told no rates. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "libroute/lr_router.h"
#include "parts/adapters.h"
#include "policy/adaptive.h"
#include "policy/policy.h"
#include "router-helpers.h"
#include "router/router.h"
#include "testutil.h"

/* The fit's scales and constants, as lib/policy/adaptive.c has them. */
#define KTOK 1000.0
#define DSCALE 100.0
#define MEMORY 500.0
#define QUEUE_RATIO_MAX 4.0
#define DIM LR__CALIB_DIM

struct setup {
    struct lr__mem mem;
    struct lr__adaptive ad;
};

static struct setup *
mk_ad(void)
{
    struct setup *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_st(lr__mem_init(&s->mem, NULL), LR_OK);
    assert_st(lr__adaptive_setup(&s->ad, &s->mem, 8, 64), LR_OK);
    return s;
}

static void
rm_ad(struct setup *s)
{
    lr__adaptive_free(&s->ad, &s->mem);
    assert_int_equal(s->mem.live, 0);
    free(s);
}

/* A row of class `cls` told `rate` tokens/s, with `pending` prefill tokens
 * queued and `decoding` requests past their first token. */
static lr_candidate
row_of(uint32_t cls, double rate, uint64_t pending, uint32_t decoding)
{
    lr_candidate c;
    memset(&c, 0, sizeof c);
    c.instance = cls;
    c.instance_class = cls;
    c.prefill_rate = rate;
    c.prefill_tokens = pending;
    c.inflight = decoding;
    c.cached_age_s = -1;
    return c;
}

/* Dispatch one request (slot 0) with `uncached` tokens on `row`, and
 * settle it with a first token after ttft_s. */
static void
observe(struct setup *s, const lr_candidate *row, uint32_t uncached,
        double ttft_s)
{
    lr__adaptive_dispatch(&s->ad, 0, row, uncached, -1, 0);
    lr__adaptive_settle(&s->ad, 0, ttft_s);
}

/* The fitted seconds per token and base of class `cls` at `decoding`
 * requests decoding, as the router writes them into a row. */
static void
fitted(const struct setup *s, uint32_t cls, uint32_t decoding,
       double *s_per_token, double *base)
{
    lr_candidate c = row_of(cls, 8000, 0, decoding);
    struct lr__keep_memo memo = LR__KEEP_MEMO_INIT;
    lr__adaptive_fill(&s->ad, &c, NULL, 0, T0, &memo);
    *s_per_token = c.ttft_s_per_token;
    *base = c.ttft_base_s;
}

/* ---- the naive model: the same problem, solved from scratch -------------- */

/* The determinant of the k x k matrix M (k <= DIM), by cofactor expansion
 * along the first row: slow, and independent of the library's
 * elimination, which is the point of a model. */
static double
det(int k, const double M[DIM][DIM])
{
    if (k == 1)
        return M[0][0];
    double d = 0, sign = 1;
    for (int col = 0; col < k; col++, sign = -sign) {
        double m[DIM][DIM] = { { 0 } };
        for (int i = 1; i < k; i++)
            for (int j = 0, jj = 0; j < k; j++)
                if (j != col)
                    m[i - 1][jj++] = M[i][j];
        d += sign * M[0][col] * det(k - 1, (const double(*)[DIM])m);
    }
    return d;
}

/* Solve the k x k system M z = r by Cramer's rule; false when singular. */
static bool
solve(int k, double M[DIM][DIM], double *r, double *z)
{
    double d = det(k, (const double(*)[DIM])M);
    if (!(fabs(d) > 1e-300))
        return false;
    for (int a = 0; a < k; a++) {
        double m[DIM][DIM] = { { 0 } };
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                m[i][j] = j == a ? r[i] : M[i][j];
        z[a] = det(k, (const double(*)[DIM])m) / d;
    }
    return true;
}

struct naive {
    int n;
    double x[4096][DIM], y[4096];
};

/* The objective sum_k keep^(n-1-k) (y_k - x_k.theta)^2 + ridge terms. */
static double
objective(const struct naive *nv, const struct lr__calib *c,
          const double *theta)
{
    const double keep = 1.0 - 1.0 / MEMORY;
    double f = 0, wgt = 1;
    for (int k = nv->n - 1; k >= 0; k--, wgt *= keep) {
        double e = nv->y[k];
        for (int i = 0; i < DIM; i++)
            e -= nv->x[k][i] * theta[i];
        f += wgt * e * e;
    }
    for (int i = 0; i < DIM; i++)
        f += c->ridge[i] * (theta[i] - c->prior[i]) * (theta[i] - c->prior[i]);
    return f;
}

/* The constrained minimum: every subset of terms held at their bounds,
 * the rest solved exactly; the feasible solution of least objective. */
static void
naive_fit(const struct naive *nv, const struct lr__calib *c, const double *lo,
          double *best)
{
    const double keep = 1.0 - 1.0 / MEMORY;
    double A[DIM][DIM] = { { 0 } }, b[DIM] = { 0 }, wgt = 1;
    for (int k = nv->n - 1; k >= 0; k--, wgt *= keep)
        for (int i = 0; i < DIM; i++) {
            b[i] += wgt * nv->x[k][i] * nv->y[k];
            for (int j = 0; j < DIM; j++)
                A[i][j] += wgt * nv->x[k][i] * nv->x[k][j];
        }
    double fbest = INFINITY;
    memcpy(best, lo, DIM * sizeof *best); /* every term at its bound */
    for (unsigned fixed = 0; fixed < (1u << DIM); fixed++) {
        int idx[DIM], k = 0;
        double theta[DIM];
        for (int i = 0; i < DIM; i++) {
            theta[i] = lo[i];
            if (!(fixed >> i & 1))
                idx[k++] = i;
        }
        double M[DIM][DIM], r[DIM], z[DIM];
        for (int a = 0; a < k; a++) {
            int i = idx[a];
            r[a] = b[i] + c->ridge[i] * c->prior[i];
            for (int j = 0; j < DIM; j++)
                if (fixed >> j & 1)
                    r[a] -= A[i][j] * lo[j];
            for (int e = 0; e < k; e++)
                M[a][e] = A[i][idx[e]] + (a == e ? c->ridge[i] : 0);
        }
        if (k > 0 && !solve(k, M, r, z))
            continue;
        bool ok = true;
        for (int a = 0; a < k; a++) {
            theta[idx[a]] = z[a];
            ok &= z[a] >= lo[idx[a]] - 1e-12;
        }
        double f = ok ? objective(nv, c, theta) : INFINITY;
        if (f < fbest) {
            fbest = f;
            memcpy(best, theta, sizeof theta);
        }
    }
}

/* The fit after every first token against the naive model: its
 * objective is the constrained minimum's (to a part in 1e6), its terms
 * are >= their bounds, and it folded in exactly the first tokens whose
 * queue ahead was at most 4x their own prefill. The traffic moves from
 * light load (W small, D varying: the slowdown is identifiable) to a
 * loaded fleet (longer queues, D nearly fixed), with noise. */
static void
fit_matches_the_naive_solver(void **state)
{
    (void)state;
    struct setup *s = mk_ad();
    static struct naive nv;
    nv.n = 0;
    const double lo[DIM] = { 1e-4, 0, 0, 0 };
    uint64_t rng = 7;
    int skipped = 0;
    for (int k = 0; k < 1500; k++) {
        bool saturated = k >= 700;
        uint64_t pending =
            saturated ? 2000 + tu_below(&rng, 30000) : tu_below(&rng, 8000);
        uint32_t dec = saturated ? 95 + (uint32_t)tu_below(&rng, 10)
                                 : (uint32_t)tu_below(&rng, 120);
        uint32_t uncached = 200 + (uint32_t)tu_below(&rng, 4000);
        double w = (double)(pending + uncached) / KTOK, d = dec / DSCALE;
        double truth = w * (0.09 + 0.05 * d) + 0.02 + 0.01 * d;
        double y = truth * (0.8 + 0.4 * tu_unit(&rng));
        lr_candidate c = row_of(1, 8000, pending, dec);
        observe(s, &c, uncached, y);
        const struct lr__calib *cl = &s->ad.cls[1];
        if ((double)pending > QUEUE_RATIO_MAX * uncached) {
            assert_int_equal(cl->n, (uint32_t)nv.n); /* not folded in */
            skipped++;
            continue;
        }
        nv.x[nv.n][0] = w;
        nv.x[nv.n][1] = w * d;
        nv.x[nv.n][2] = 1;
        nv.x[nv.n][3] = d;
        nv.y[nv.n++] = y;
        assert_int_equal(cl->n, (uint32_t)nv.n);
        double want[DIM];
        naive_fit(&nv, cl, lo, want);
        double f_got = objective(&nv, cl, cl->theta);
        double f_want = objective(&nv, cl, want);
        for (int i = 0; i < DIM; i++)
            assert_true(cl->theta[i] >= lo[i]);
        if (!(f_got <= f_want * (1 + 1e-6) + 1e-12))
            fail_msg("first token %d: objective %.9g, the minimum %.9g", k,
                     f_got, f_want);
    }
    /* both kinds were there */
    assert_true(skipped > 100 && nv.n > 700);
    rm_ad(s);
}

/* A fleet past its capacity. First, light load teaches the class its
 * speed (0.09 s per thousand tokens). Then every first token waits
 * behind a long queue (W of 50k to 2M tokens) that drains at its own
 * pace (here 0.3 s per thousand, with ~100 requests decoding everywhere,
 * and a minute's floor): what such a wait measures is the queue, not the
 * class. The seconds per token the fit reports must stay the class's:
 * an unconstrained fit over every first token (0.2's first Kalman
 * filter) explained those waits with the decoding count, reported
 * tokens as nearly free (0.003 s per thousand), and the policy stopped
 * seeing the cache. */
static void
saturated_fleet_keeps_its_token_cost(void **state)
{
    (void)state;
    struct setup *s = mk_ad();
    uint64_t rng = 11;
    for (int k = 0; k < 600; k++) {
        uint64_t pending = tu_below(&rng, 4000);
        uint32_t dec = (uint32_t)tu_below(&rng, 60);
        uint32_t uncached = 1000 + (uint32_t)tu_below(&rng, 8000);
        double w = (double)(pending + uncached) / KTOK;
        double y = 0.09 * w + 0.02 + 0.01 * (tu_unit(&rng) - 0.5);
        lr_candidate c = row_of(2, 8000, pending, dec);
        observe(s, &c, uncached, y);
    }
    double spt, base;
    fitted(s, 2, 0, &spt, &base);
    assert_true(fabs(spt * KTOK - 0.09) < 0.09 * 0.1);
    for (int k = 0; k < 4000; k++) {
        uint64_t pending = 50000 + tu_below(&rng, 2000000);
        uint32_t dec = 90 + (uint32_t)tu_below(&rng, 20);
        uint32_t uncached = 500 + (uint32_t)tu_below(&rng, 8000);
        double w = (double)(pending + uncached) / KTOK;
        double y = 60 + 0.3 * w + 2.0 * (tu_unit(&rng) - 0.5);
        lr_candidate c = row_of(2, 8000, pending, dec);
        observe(s, &c, uncached, y);
    }
    for (uint32_t dec = 0; dec <= 110; dec += 10) {
        fitted(s, 2, dec, &spt, &base);
        if (!(fabs(spt * KTOK - 0.09) < 0.09 * 0.25))
            fail_msg("after saturation, at %u decoding: %.4f s per ktok, "
                     "learnt 0.09",
                     dec, spt * KTOK);
    }
    print_message("after saturation: %.4f s per ktok (learnt 0.09)\n",
                  spt * KTOK);
    rm_ad(s);
}

/* First tokens that explain nothing (a constant wait, whatever W and D)
 * leave every term >= 0 and finite, and a per-token cost >= the floor. */
static void
uninformative_first_tokens_stay_sane(void **state)
{
    (void)state;
    struct setup *s = mk_ad();
    uint64_t rng = 3;
    for (int k = 0; k < 3000; k++) {
        uint64_t pending = tu_below(&rng, 3000000);
        uint32_t dec = (uint32_t)tu_below(&rng, 300);
        lr_candidate c = row_of(0, 8000, pending, dec);
        observe(s, &c, 1 + (uint32_t)tu_below(&rng, 9000),
                k % 7 == 0 ? 3599.0 : 60.0);
    }
    const struct lr__calib *cl = &s->ad.cls[0];
    for (int i = 0; i < DIM; i++)
        assert_true(isfinite(cl->theta[i]) && cl->theta[i] >= 0);
    double spt, base;
    fitted(s, 0, 50, &spt, &base);
    assert_true(spt > 0 && isfinite(spt) && base >= 0 && isfinite(base));
    /* absurd inputs (an hour's first token and more, a negative one, a
     * queue of 2^60 tokens) change nothing that is not finite */
    lr_candidate c = row_of(0, 8000, 1ull << 60, 1u << 31);
    observe(s, &c, 4000, 1e300);
    observe(s, &c, 4000, -1);
    for (int i = 0; i < DIM; i++)
        assert_true(isfinite(cl->theta[i]) && cl->theta[i] >= 0);
    rm_ad(s);
}

/* ---- through the router --------------------------------------------------- */

/* Two classes: even instances prefill at 20000 tokens/s, odd ones at
 * 4000; the router is told neither (both at the library default). */
struct fleet {
    double busy_until[8]; /* seconds */
};

static double
serve(struct fleet *f, uint32_t inst, double now_s, uint32_t uncached)
{
    double rate = inst % 2 == 0 ? 20000.0 : 4000.0;
    double start = f->busy_until[inst] > now_s ? f->busy_until[inst] : now_s;
    double done = start + 0.01 + uncached / rate;
    f->busy_until[inst] = done;
    return done - now_s;
}

static lr_router *
mk_router(lr_policy policy)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = policy;
    o.seed = 0xada;
    o.max_instances = 16;
    o.max_requests = 1024;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(add_instance(r, "10.7", i, i % 2, 0), i);
    return r;
}

/* Route n requests of fresh 256-767 token prompts every 40 ms through the
 * fleet; returns their mean TTFT and counts the fast class's share. */
static double
drive(lr_router *r, struct fleet *f, uint64_t *id, uint64_t *now, int n,
      int *on_fast)
{
    uint32_t t[768];
    uint64_t rng = *id * 7919;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        size_t len = 256 + tu_below(&rng, 512);
        toks(t, len, tu_rand(&rng));
        lr_decision d;
        assert_st(route_one(r, *id, t, len, 0, *now, &d), LR_OK);
        *on_fast += d.instance % 2 == 0;
        double ttft = serve(f, d.instance, (double)*now / 1e9,
                            (uint32_t)(len - d.cached_tokens));
        sum += ttft;
        uint64_t at = *now + (uint64_t)(ttft * 1e9);
        assert_st(lr_router_first_token(r, *id, at), LR_OK);
        assert_st(lr_router_complete(r, *id, 1, at), LR_OK);
        (*id)++;
        *now += 40 * MS;
    }
    return sum / n;
}

/* Told no rates, adaptive learns each class's speed from the first
 * tokens (the rows it writes come within 25% of the truth) and routes
 * better than min-ttft, which cannot tell the classes apart. */
static void
learns_class_speeds_untold(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_ADAPTIVE);
    struct fleet f = { { 0 } };
    uint64_t id = 1, now = T0;
    int fast = 0;
    drive(r, &f, &id, &now, 300, &fast);
    fast = 0;
    double warm = drive(r, &f, &id, &now, 300, &fast);
    lr_candidate rows[4];
    size_t n = 0;
    uint32_t t[64];
    toks(t, 64, 1);
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = t;
    q.n_tokens = 64;
    q.now_ns = now;
    assert_st(lr_router_candidates(r, &q, rows, 4, sizeof rows[0], &n), LR_OK);
    assert_int_equal(n, 4);
    /* the fast class, which takes most first tokens, within 25%; the
     * slow one, which it learns to avoid, at least 2x slower (it began at
     * the default 8000 tokens/s, between the two) */
    for (size_t k = 0; k < n; k++) {
        double truth = rows[k].instance % 2 == 0 ? 1 / 20000.0 : 1 / 4000.0;
        print_message("instance %u: %.1f us per token (true %.1f)\n",
                      rows[k].instance, rows[k].ttft_s_per_token * 1e6,
                      truth * 1e6);
        if (rows[k].instance % 2 == 0)
            assert_true(fabs(rows[k].ttft_s_per_token - truth) < 0.25 * truth);
        else
            assert_true(rows[k].ttft_s_per_token >
                        2 * rows[0].ttft_s_per_token);
    }
    lr_router *m = mk_router(LR_POLICY_MIN_TTFT);
    struct fleet g = { { 0 } };
    uint64_t id2 = 1, now2 = T0;
    int fast2 = 0;
    drive(m, &g, &id2, &now2, 300, &fast2);
    fast2 = 0;
    double base = drive(m, &g, &id2, &now2, 300, &fast2);
    print_message("TTFT mean: adaptive %.4f s (%d/300 on the fast class), "
                  "min-ttft %.4f s (%d/300)\n",
                  warm, fast, base, fast2);
    assert_true(warm < base * 0.8);
    assert_true(fast > fast2);
    assert_router_ok(r);
    lr_router_destroy(r);
    lr_router_destroy(m);
}

/* The time averages (routes per second, queued prefill) cover the part of
 * their ~10 s window the router has seen: one second after its first
 * route, a fleet routed 20 requests/s is routed 20/s, not 2/s (the window
 * with the time before the router counted as idle), and the queue is its
 * mean over that second. Against a naive model: each interval between
 * routes weighs exp(-age / tau) of its length (its queue is the one seen
 * at its end), over tau x (1 - exp(-seen / tau)). */
static void
averages_cover_the_time_seen(void **state)
{
    (void)state;
    struct setup *s = mk_ad();
    const double tau = 10.0;
    lr_candidate rows[2] = { row_of(0, 8000, 0, 0), row_of(1, 8000, 0, 0) };
    rows[1].instance = 1;
    enum {
        N = 20
    };
    uint64_t t[N + 1];
    double q[N + 1];
    for (int i = 0; i <= N; i++) {
        /* instance 0 takes every route; its queue is 0 for the first half
         * second, 500 tokens for the second */
        t[i] = T0 + (uint64_t)i * (SEC / N);
        q[i] = i <= N / 2 ? 0 : 500;
        rows[0].prefill_tokens = (uint64_t)q[i];
        lr__adaptive_observe(&s->ad, rows, 2, 0, LR_INSTANCE_NONE, t[i]);
    }
    double age[N + 1], routes = 0, queue = 0;
    for (int i = 0; i <= N; i++) {
        age[i] = (double)(t[N] - t[i]) / 1e9;
        routes += exp(-age[i] / tau);
        if (i > 0)
            queue += q[i] * (exp(-age[i] / tau) - exp(-age[i - 1] / tau));
    }
    double seen = 1 - exp(-age[0] / tau);
    double want_rate = routes / (tau * seen), want_queue = queue / seen;
    for (int k = 0; k < 2; k++) {
        lr_candidate c = rows[k];
        struct lr__keep_memo memo = LR__KEEP_MEMO_INIT;
        lr__adaptive_fill(&s->ad, &c, NULL, 0, t[N], &memo);
        print_message("instance %d: %.3f routes/s, %.1f tokens queued\n", k,
                      c.route_rate, c.prefill_tokens_avg);
        if (k == 0) {
            assert_true(fabs(c.route_rate - want_rate) < 1e-9 * want_rate);
            assert_true(fabs(c.prefill_tokens_avg - want_queue) <
                        1e-9 * want_queue);
            assert_true(c.route_rate > 20 && c.route_rate < 22);
            assert_true(c.prefill_tokens_avg > 240 &&
                        c.prefill_tokens_avg < 260);
        } else {
            assert_true(c.route_rate == 0 && c.prefill_tokens_avg == 0);
        }
    }
    /* an instance never observed: its queue now, no routes */
    lr_candidate c = row_of(2, 8000, 777, 0);
    struct lr__keep_memo memo = LR__KEEP_MEMO_INIT;
    lr__adaptive_fill(&s->ad, &c, NULL, 0, t[N], &memo);
    assert_true(c.route_rate == 0 && c.prefill_tokens_avg == 777);
    rm_ad(s);
}

/* ---- adapters queued for a slot ---------------------------------------------- */

/* The wait per adapter ahead for a slot is the slope of what the class's
 * model leaves unexplained against the adapters ahead the router counted
 * at dispatch (here 0.3 s each, over a model that explains the rest); a
 * dispatch whose count is not known (< 0) teaches nothing. A resident
 * adapter's row then waits that many turns in its fixed seconds, counted
 * on the router's residency table: the other adapters with work there
 * (the engine's running and waiting ones, the router's own in flight,
 * each once; not one whose requests all ended), beyond the slots but the
 * one its own holds or waits for; none where the slots are not known. */
static void
slot_wait_per_adapter_ahead(void **state)
{
    (void)state;
    struct setup *s = mk_ad();
    /* queued mostly behind others (10,000 tokens ahead of its 100): the
     * class's model keeps its prior (0.125 s per 1,000 tokens, 20 ms) */
    lr_candidate row = row_of(0, 8000, 10000, 0);
    row.adapter_free = 0;
    row.adapters_resident = 2;
    double model = 0.125 * 10.1 + 0.02;
    for (int i = 0; i < 64; i++) {
        double x = (double)(i % 5);
        lr__adaptive_dispatch(&s->ad, 0, &row, 100, x, 0);
        lr__adaptive_settle(&s->ad, 0, model + 0.3 * x);
        /* not known: a minute late, and nothing learnt from it */
        lr__adaptive_dispatch(&s->ad, 0, &row, 100, -1, 0);
        lr__adaptive_settle(&s->ad, 0, 60);
    }
    /* instance 0: 2 slots; "hot" and "o" running, w0-w2 waiting, w1 also
     * the router's own request in flight, g routed there while a slot was
     * free and ended since. Instance 1: the same report, slots not told */
    enum {
        HOT = 1,
        O,
        W0,
        W1,
        W2,
        G,
        NEW
    };
    const uint64_t named[] = { HOT, O, W0, W1, W2 };
    struct lr__adapters a;
    memset(&a, 0, sizeof a);
    assert_st(lr__adapters_setup(&a, &s->mem, 8, 64), LR_OK);
    assert_st(lr__adapters_add(&a, &s->mem, 0, 2), LR_OK);
    assert_st(lr__adapters_add(&a, &s->mem, 1, 0), LR_OK);
    lr__adapters_dispatch(&a, 7, 0, 0, G, T0);
    for (uint32_t id = 0; id < 2; id++)
        lr__adapters_report(&a, id, named, 5, 0, T0 + 1);
    lr__adapters_dispatch(&a, 8, 0, 0, W1, T0 + 2);
    lr__adapters_end(&a, 7);
    assert_int_equal(lr__adapters_ahead(&a, 0, HOT), 3);
    assert_int_equal(lr__adapters_ahead(&a, 0, W0), 3);  /* not itself */
    assert_int_equal(lr__adapters_ahead(&a, 0, NEW), 4); /* its own turn */
    assert_int_equal(lr__adapters_ahead(&a, 1, HOT), UINT32_MAX);
    static const struct {
        uint32_t inst;
        uint64_t adapter;
        double want;
    } cases[] = {
        { 0, HOT, 0.9 },
        { 0, W0, 0.9 },
        { 1, HOT, 0 },
        { 0, 0, 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        lr_candidate c = row_of(0, 8000, 0, 0);
        c.instance = cases[k].inst;
        c.adapter_free = UINT32_MAX;
        if (cases[k].adapter != 0)
            lr__adapters_fill(&a, cases[k].adapter, 0.1, &c);
        assert_int_equal(c.adapter_missing, 0);
        struct lr__keep_memo memo = LR__KEEP_MEMO_INIT;
        lr__adaptive_fill(&s->ad, &c, &a, cases[k].adapter, T0 + 3, &memo);
        if (fabs(c.ttft_base_s - cases[k].want) > 1e-6)
            fail_msg("case %zu: %.6f s, want %.3f", k, c.ttft_base_s,
                     cases[k].want);
        assert_true(c.adapter_load_s == 0);
    }
    lr__adapters_free(&a, &s->mem);
    rm_ad(s);
}

/* ---- what each engine delivers ---------------------------------------------- */

/* The share of expected hits an instance's engine did not deliver
 * (lr_router_observe_cached, the rows' cached_lost), against a naive
 * model: each report's share lost, weighted keep^(reports after it), over
 * the weights plus LOST_PRIOR reports of nothing lost, as
 * lib/parts/load.c has them. A request's later reports, and reports of
 * requests that expected no hit, change no share; the stats count each
 * request's first report. No engine here reports its KV cache, so every
 * report counts (the next test). */
#define LOST_KEEP (1.0 - 1.0 / 32)
#define LOST_PRIOR 2.0

static void
observed_hits_calibrate_each_instance(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE_AND_LOAD);
    enum {
        N = 400,
        LEN = 512
    };
    static double shares[4][N];
    size_t n_shares[4] = { 0 };
    uint64_t reports = 0, expected = 0, got = 0;
    uint64_t rng = 99, now = T0;
    uint32_t t[LEN];
    for (uint64_t id = 1; id <= N; id++, now += 10 * MS) {
        /* eight prompts: most requests expect a hit somewhere */
        toks(t, LEN, 1 + tu_below(&rng, 8));
        lr_decision d;
        assert_st(route_one(r, id, t, LEN, 0, now, &d), LR_OK);
        uint32_t seen = (uint32_t)tu_below(&rng, LEN + 1);
        assert_st(lr_router_observe_cached(r, id, seen, now), LR_OK);
        reports++;
        expected += d.cached_tokens;
        got += seen;
        if (d.cached_tokens > 0) {
            double lost =
                seen >= d.cached_tokens
                    ? 0
                    : (double)(d.cached_tokens - seen) / d.cached_tokens;
            shares[d.instance][n_shares[d.instance]++] = lost;
        }
        /* a second report is not a second sample */
        assert_st(lr_router_observe_cached(r, id, 0, now), LR_OK);
        assert_st(lr_router_first_token(r, id, now + MS), LR_OK);
        assert_st(lr_router_complete(r, id, 1, now + 2 * MS), LR_OK);
        /* ended: not in flight any more */
        assert_st(lr_router_observe_cached(r, id, 0, now + 2 * MS), LR_ENOENT);
    }
    lr_request q;
    lr_request_init(&q);
    q.id = N + 1;
    q.tokens = t;
    q.n_tokens = LEN;
    q.now_ns = now;
    lr_candidate rows[4];
    size_t n = 0;
    assert_st(lr_router_candidates(r, &q, rows, 4, sizeof rows[0], &n), LR_OK);
    assert_int_equal(n, 4);
    size_t judged = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = rows[k].instance;
        double num = 0, den = 0, w = 1;
        for (size_t j = n_shares[i]; j-- > 0; w *= LOST_KEEP) {
            num += w * shares[i][j];
            den += w;
        }
        double want = n_shares[i] > 0 ? num / (den + LOST_PRIOR) : 0;
        print_message("instance %u: %zu reports, %.4f lost (model %.4f)\n", i,
                      n_shares[i], rows[k].cached_lost, want);
        assert_true(fabs(rows[k].cached_lost - want) < 1e-9);
        assert_true(rows[k].cached_lost >= 0 && rows[k].cached_lost <= 1);
        judged += n_shares[i];
    }
    assert_true(judged > N / 2); /* most requests expected a hit */
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    assert_int_equal(s.observed_reports, reports);
    assert_int_equal(s.observed_expected_tokens, expected);
    assert_int_equal(s.observed_cached_tokens, got);
    /* a v2 caller's struct ends before the counters: nothing written there */
    lr_router_stats v2;
    memset(&v2, 0xee, sizeof v2);
    lr_router_stats_init_sized(&v2, LR_ROUTER_STATS_SIZE_V2);
    assert_st(lr_router_get_stats(r, &v2), LR_OK);
    assert_true(v2.observed_reports == 0xeeeeeeeeeeeeeeeeull);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* The cached_lost of instance `id` in the candidate rows. */
static double
lost_of(lr_router *r, uint32_t id, uint64_t now)
{
    uint32_t t[16];
    toks(t, 16, 77);
    lr_candidate rows[4];
    size_t n = candidates_of(r, t, 16, now, rows, 4);
    for (size_t k = 0; k < n; k++)
        if (rows[k].instance == id)
            return rows[k].cached_lost;
    fail_msg("instance %u not a candidate", id);
    return -1;
}

/* Instance id's engine scraped with its KV cache `kv_use` full. */
static void
scrape_kv(lr_router *r, uint32_t id, double kv_use, uint64_t now)
{
    lr_engine_stats st;
    lr_engine_stats_init(&st);
    st.kv_use = kv_use;
    st.scraped_ns = now;
    assert_st(lr_router_set_stats(r, id, &st), LR_OK);
}

/* A report from a request sent while its engine's KV cache was at least
 * 80% full says nothing of what the engine keeps (an engine evicting for
 * room loses prefixes to the wait): counted in the stats, not in the
 * share. The same report from a request sent when the cache had room is
 * a full loss: 1 over the report and LOST_PRIOR's two. */
static void
observed_from_a_full_cache_say_nothing(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_PREFIX_CACHE);
    uint32_t big[1024];
    toks(big, 1024, 3);
    lr_decision a, b, c;
    uint64_t now = T0;
    assert_st(route_one(r, 1, big, 1024, 0, now, &a), LR_OK);
    scrape_kv(r, a.instance, 0.8, now + MS);
    assert_st(route_one(r, 2, big, 512, 0, now + 2 * MS, &b), LR_OK);
    assert_int_equal(b.instance, a.instance);
    assert_true(b.cached_tokens > 0);
    assert_st(lr_router_observe_cached(r, 2, 0, now + 3 * MS), LR_OK);
    assert_true(lost_of(r, a.instance, now + 3 * MS) == 0);
    /* room again: the same prompt, the same report, now counted */
    scrape_kv(r, a.instance, 0.79, now + 4 * MS);
    assert_st(route_one(r, 3, big, 512, 0, now + 5 * MS, &c), LR_OK);
    assert_int_equal(c.instance, a.instance);
    assert_true(c.cached_tokens > 0);
    assert_st(lr_router_observe_cached(r, 3, 0, now + 6 * MS), LR_OK);
    assert_true(fabs(lost_of(r, a.instance, now + 6 * MS) -
                     1.0 / (1.0 + LOST_PRIOR)) < 1e-12);
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    assert_int_equal(s.observed_reports, 2);
    assert_int_equal(s.observed_expected_tokens,
                     b.cached_tokens + c.cached_tokens);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* Bad reports get a status and change nothing. */
static void
observe_cached_bad_input(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_ADAPTIVE);
    uint32_t t[100];
    toks(t, 100, 5);
    assert_st(route_one(r, 1, t, 100, 0, T0, NULL), LR_OK);
    uint64_t before = lr__router_digest(r);
    assert_st(lr_router_observe_cached(NULL, 1, 0, T0), LR_EINVAL);
    assert_st(lr_router_observe_cached(r, 1, 101, T0), LR_EINVAL);
    assert_st(lr_router_observe_cached(r, 2, 0, T0), LR_ENOENT);
    assert_st(lr_router_observe_cached(r, 1, 0, LR_MAX_TIME_NS + 1), LR_ERANGE);
    assert_true(lr__router_digest(r) == before);
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_st(lr_router_get_stats(r, &s), LR_OK);
    assert_int_equal(s.observed_reports, 0);
    /* the whole prompt is a valid report */
    assert_st(lr_router_observe_cached(r, 1, 100, T0), LR_OK);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* adaptive's choice over the two rows of `row_size` bytes each (rows
 * truncated to it, as an older caller's table), or LR_INSTANCE_NONE with
 * *st its status when it refuses them. */
static uint32_t
adaptive_pick(const lr_policy_input *in, const lr_candidate rows[2],
              size_t row_size, lr_status *st)
{
    _Alignas(lr_candidate) unsigned char t[2 * sizeof(lr_candidate)];
    memcpy(t, &rows[0], row_size);
    memcpy(t + row_size, &rows[1], row_size);
    double sc[2];
    lr_decision d;
    lr_decision_init(&d);
    *st = lr_policy_decide(LR_POLICY_ADAPTIVE, in,
                           (const lr_candidate *)(const void *)t, 2, row_size,
                           sc, &d);
    return *st == LR_OK ? d.instance : LR_INSTANCE_NONE;
}

/* The contest both hit tests start from: a 1000-token prompt with every
 * default parameter; instance 10 holding `hit10` of it, 11 holding
 * `hit11`, both caching, idle, of class 0. */
static void
hit_contest(lr_policy_input *in, lr_candidate rows[2], uint32_t hit10,
            uint32_t hit11)
{
    lr_policy_input_init(in); /* params NULL: every default */
    in->prompt_tokens = 1000;
    in->seed = 1;
    for (int k = 0; k < 2; k++) {
        rows[k] = row_of(0, 8000, 0, 0);
        rows[k].instance = 10 + (uint32_t)k;
        rows[k].cached_tokens = k == 0 ? hit10 : hit11;
        rows[k].prefix_caching = 1;
    }
}

/* The same, which must decide. */
static uint32_t
adaptive_picks(const lr_policy_input *in, const lr_candidate rows[2],
               size_t row_size)
{
    lr_status st;
    uint32_t k = adaptive_pick(in, rows, row_size, &st);
    assert_st(st, LR_OK);
    return k;
}

/* adaptive credits a row with the hit its engine delivers: of two idle
 * rows, the one expecting 900 of 1000 tokens whose engine lately lost 90%
 * of its hits (90 delivered) loses to one expecting 500 that delivers
 * them; in a row table too short to carry cached_lost (0.2's rows), the
 * expected hit is taken whole. A share outside [0, 1] is refused. */
static void
adaptive_credits_delivered_hits(void **state)
{
    (void)state;
    lr_policy_input in;
    lr_candidate rows[2];
    hit_contest(&in, rows, 900, 500);
    rows[0].cached_lost = 0.9;
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 11);
    rows[0].cached_lost = 0;
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 10);
    /* rows of LR_CANDIDATE_SIZE_V1 bytes: the share is not there to read */
    rows[0].cached_lost = 0.9;
    assert_int_equal(adaptive_picks(&in, rows, LR_CANDIDATE_SIZE_V1), 10);
    double bad[] = { -0.1, 1.5, NAN, INFINITY };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rows[1].cached_lost = bad[k];
        lr_status st;
        assert_int_equal(adaptive_pick(&in, rows, sizeof rows[0], &st),
                         LR_INSTANCE_NONE);
        assert_st(st, LR_EINVAL);
    }
}

/* ---- siblings ----------------------------------------------------------------- */

/* A conversation's turn: system prompt `sys` (64 tokens), then its
 * messages (64 tokens each, from `conv`), turns + 1 of them; boundaries
 * after the system prompt and after each message. */
struct turn {
    uint32_t t[64 * 8];
    uint32_t b[8];
    size_t n, nb;
};

static void
turn_of(struct turn *x, uint32_t sys, uint32_t conv, size_t msgs)
{
    toks(x->t, 64, sys);
    x->n = 64;
    x->nb = 0;
    x->b[x->nb++] = 64;
    for (size_t m = 0; m < msgs; m++) {
        toks(x->t + x->n, 64, 1000 * conv + (uint32_t)m);
        x->n += 64;
        x->b[x->nb++] = (uint32_t)x->n;
    }
}

static lr_request
req_of(const struct turn *x, uint64_t id, uint64_t now)
{
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = x->t;
    q.n_tokens = x->n;
    q.boundaries = x->b;
    q.n_boundaries = x->nb;
    q.now_ns = now;
    return q;
}

/* The row of instance 0 for turn x. */
static lr_candidate
row0(lr_router *r, const struct turn *x, uint64_t now)
{
    lr_request q = req_of(x, 999999, now);
    lr_candidate rows[4];
    size_t n = 0;
    assert_st(lr_router_candidates(r, &q, rows, 4, sizeof rows[0], &n), LR_OK);
    for (size_t k = 0; k < n; k++)
        if (rows[k].instance == 0)
            return rows[k];
    fail_msg("instance 0 not a candidate");
    return rows[0];
}

/* Route turn x as request id to instance 0 (the others drained) and end
 * it, its engine reporting `seen` cached tokens (UINT32_MAX: no report). */
static void
send0(lr_router *r, const struct turn *x, uint64_t id, uint64_t now,
      uint32_t seen)
{
    lr_request q = req_of(x, id, now);
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.instance, 0);
    if (seen != UINT32_MAX)
        assert_st(lr_router_observe_cached(r, id, seen, now + MS), LR_OK);
    assert_st(lr_router_first_token(r, id, now + MS), LR_OK);
    assert_st(lr_router_complete(r, id, 4, now + 2 * MS), LR_OK);
}

/* The sibling columns, and what an engine's reports teach the router:
 * conversation X's first turn (the system prompt and a message) on
 * instance 0; a new conversation Y on the same system prompt then forks
 * from it where its hit there ends: X's 64 tokens past the system prompt
 * are its sibling (while X is live: not after 30 s). X's next turn has
 * its history there and no sibling, until Y goes there: then Y left X's
 * path at the system prompt, within X's hit (sibling_fork_tokens 64).
 * An engine that delivers that fork and no more (llama.cpp's slots)
 * raises the instance's sibling_lost as the load tracker's model has it
 * (a report of 1 over LOST_PRIOR's 2 of nothing lost); one that delivers
 * the whole hit (a paged engine) lowers it; a report of a request that
 * had no fork leaves it, and X's first turn again has none: X's later
 * turn went on along its path. */
static void
siblings_in_the_rows(void **state)
{
    (void)state;
    lr_router *r = mk_router(LR_POLICY_ADAPTIVE);
    for (uint32_t i = 1; i < 4; i++)
        assert_st(lr_router_drain_instance(r, i, 1), LR_OK);
    struct turn x0, x1, y0;
    turn_of(&x0, 7, 1, 1);
    turn_of(&x1, 7, 1, 2);
    turn_of(&y0, 7, 2, 1);
    uint64_t now = T0;
    send0(r, &x0, 1, now, UINT32_MAX);
    lr_candidate c = row0(r, &y0, now + SEC);
    assert_int_equal(c.cached_tokens, 64);
    assert_int_equal(c.sibling_tokens, 64);
    assert_int_equal(c.sibling_fork_tokens, 0);
    assert_true(c.sibling_lost == 0);
    c = row0(r, &y0, now + 31 * SEC);
    assert_int_equal(c.sibling_tokens, 0); /* X ended, as far as we know */
    c = row0(r, &x1, now + SEC);
    assert_int_equal(c.cached_tokens, 128);
    assert_int_equal(c.sibling_tokens, 0);
    assert_int_equal(c.sibling_fork_tokens, 0); /* its own history */
    send0(r, &y0, 2, now + SEC, UINT32_MAX);
    c = row0(r, &x1, now + 2 * SEC);
    assert_int_equal(c.sibling_fork_tokens, 64);
    /* the engine delivered the fork: a slot engine */
    send0(r, &x1, 3, now + 2 * SEC, 64);
    double sib = 1 / (1 + LOST_PRIOR);
    c = row0(r, &y0, now + 3 * SEC);
    assert_true(fabs(c.sibling_lost - sib) < 1e-12);
    /* X's first turn again: no sibling left its path (X's later turn went
     * on along it); delivered whole, a plain report changes nothing */
    c = row0(r, &x0, now + 3 * SEC);
    assert_int_equal(c.sibling_fork_tokens, 0);
    send0(r, &x0, 4, now + 3 * SEC, 128);
    assert_true(fabs(row0(r, &y0, now + 4 * SEC).sibling_lost - sib) < 1e-12);
    /* lost past the same boundary without a sibling (a paged engine
     * short of room): the fork is not what loses it */
    send0(r, &x0, 8, now + 4 * SEC, 0);
    double plain = LOST_KEEP * 0 + 1, plain_n = LOST_KEEP + 1;
    assert_true(fabs(row0(r, &y0, now + 4 * SEC).sibling_lost -
                     (sib - plain / (plain_n + LOST_PRIOR))) < 1e-12);
    /* a third conversation's next turn after Y's: the whole hit
     * delivered, a paged engine */
    struct turn z0, z1;
    turn_of(&z0, 7, 3, 1);
    turn_of(&z1, 7, 3, 2);
    send0(r, &z0, 5, now + 4 * SEC, UINT32_MAX);
    send0(r, &y0, 6, now + 4 * SEC, UINT32_MAX);
    c = row0(r, &z1, now + 5 * SEC);
    assert_int_equal(c.cached_tokens, 128);
    assert_int_equal(c.sibling_fork_tokens, 64);
    send0(r, &z1, 7, now + 5 * SEC, c.cached_tokens);
    double n2 = LOST_KEEP + 1, s2 = LOST_KEEP * 1 + 0;
    double want = s2 / (n2 + LOST_PRIOR) - plain / (plain_n + LOST_PRIOR);
    assert_true(fabs(row0(r, &y0, now + 6 * SEC).sibling_lost -
                     (want > 0 ? want : 0)) < 1e-12);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* adaptive counts a hit that forks from a live sibling at
 * cached_tokens x (1 - min(1, 4 x sibling_lost)): where the engine gives
 * the newcomer the sibling's slot (a quarter of the reports or more) a
 * 500-token hit counts for nothing, and a 100-token hit elsewhere wins;
 * where it does not (0), or in rows too short to carry the columns
 * (LR_CANDIDATE_SIZE_V5), the hit counts whole, and in between in part.
 * A share outside [0, 1], or a fork past the hit, is refused. */
static void
adaptive_spares_siblings(void **state)
{
    (void)state;
    lr_policy_input in;
    lr_candidate rows[2];
    hit_contest(&in, rows, 500, 100);
    rows[0].sibling_tokens = 300;
    rows[0].sibling_lost = 1;
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 11);
    rows[0].sibling_lost = 0.25; /* a quarter of the reports: sure */
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 11);
    rows[0].sibling_lost = 0.05; /* 500 x 0.8 = 400 still beats 100 */
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 10);
    rows[0].sibling_lost = 0;
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 10);
    rows[0].sibling_lost = 1;
    rows[0].sibling_tokens = 0; /* no sibling: the hit is its own */
    assert_int_equal(adaptive_picks(&in, rows, sizeof rows[0]), 10);
    rows[0].sibling_tokens = 300;
    assert_int_equal(adaptive_picks(&in, rows, LR_CANDIDATE_SIZE_V5), 10);
    double bad[] = { -0.1, 1.5, NAN, INFINITY };
    lr_status st;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rows[1].sibling_lost = bad[k];
        assert_int_equal(adaptive_pick(&in, rows, sizeof rows[0], &st),
                         LR_INSTANCE_NONE);
        assert_st(st, LR_EINVAL);
    }
    rows[1].sibling_lost = 0;
    rows[1].sibling_fork_tokens = 101;
    assert_int_equal(adaptive_pick(&in, rows, sizeof rows[0], &st),
                     LR_INSTANCE_NONE);
    assert_st(st, LR_EINVAL);
}

/* With a deadline, adaptive keeps its least-cost choice when that meets
 * it, takes the least-cost instance predicted to meet it when it would
 * not (reason slo-switch), and the one predicted fastest when none would.
 * Row 0 queues 2 s of prefill and decodes nothing; row 1 queues nothing
 * but decodes 100 requests, each costing 0.1 s to a first token there:
 * its cost (the decode term, 30 s) is far above row 0's, its TTFT far
 * below. */
static void
adaptive_meets_deadlines(void **state)
{
    (void)state;
    lr_candidate rows[2] = { row_of(0, 8000, 16000, 0),
                             row_of(1, 8000, 0, 100) };
    rows[1].ttft_s_per_decoding = 0.1;
    rows[1].ttft_s_per_token = 1.0 / 8000;
    double params[LR__PARAM_COUNT];
    for (int k = 0; k < LR__PARAM_COUNT; k++)
        params[k] = lr_param_bounds(k).def;
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.params = params;
    in.n_params = LR__PARAM_COUNT;
    in.prompt_tokens = 800; /* 0.1 s of its own */
    in.seed = 3;
    double sc[2];
    lr_decision d;
    lr_decision_init(&d);
    struct {
        double budget;
        double on;
        uint32_t want;
        int32_t reason;
    } cases[] = {
        { 0, 1, 0, LR_REASON_MIN_COST },      /* no deadline */
        { 5, 1, 0, LR_REASON_MIN_COST },      /* row 0 meets 5 s */
        { 1, 1, 1, LR_REASON_SLO_SWITCH },    /* only row 1 meets 1 s */
        { 0.01, 1, 1, LR_REASON_SLO_SWITCH }, /* none: the fastest */
        { 1, 0, 0, LR_REASON_MIN_COST },      /* switched off */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        in.ttft_budget_s = cases[k].budget;
        params[LR_PARAM_ADAPTIVE_DEADLINE] = cases[k].on;
        assert_st(lr_policy_decide(LR_POLICY_ADAPTIVE, &in, rows, 2,
                                   sizeof rows[0], sc, &d),
                  LR_OK);
        assert_int_equal(d.instance, cases[k].want);
        assert_reason(d, cases[k].reason);
    }
    /* a 0.2 caller's input has no budget; a bad budget is refused */
    in.ttft_budget_s = 1;
    params[LR_PARAM_ADAPTIVE_DEADLINE] = 1;
    in.struct_size = LR_POLICY_INPUT_SIZE_V1;
    assert_st(lr_policy_decide(LR_POLICY_ADAPTIVE, &in, rows, 2, sizeof rows[0],
                               sc, &d),
              LR_OK);
    assert_int_equal(d.instance, 0);
    in.struct_size = sizeof in;
    double bad[] = { -1, NAN, INFINITY };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        in.ttft_budget_s = bad[k];
        assert_st(lr_policy_decide(LR_POLICY_ADAPTIVE, &in, rows, 2,
                                   sizeof rows[0], sc, &d),
                  LR_EINVAL);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fit_matches_the_naive_solver),
        cmocka_unit_test(saturated_fleet_keeps_its_token_cost),
        cmocka_unit_test(uninformative_first_tokens_stay_sane),
        cmocka_unit_test(learns_class_speeds_untold),
        cmocka_unit_test(averages_cover_the_time_seen),
        cmocka_unit_test(slot_wait_per_adapter_ahead),
        cmocka_unit_test(observed_hits_calibrate_each_instance),
        cmocka_unit_test(observed_from_a_full_cache_say_nothing),
        cmocka_unit_test(observe_cached_bad_input),
        cmocka_unit_test(adaptive_credits_delivered_hits),
        cmocka_unit_test(siblings_in_the_rows),
        cmocka_unit_test(adaptive_spares_siblings),
        cmocka_unit_test(adaptive_meets_deadlines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
