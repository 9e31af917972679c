/* lrsim: workloads and the built-in generators (see workload.h).
 *
 * Every generator draws from one xoshiro stream seeded by --seed, and
 * names each distinct piece of text (a system prompt, a user message, a
 * reply) by a segment seed drawn from that stream, so a workload is a pure
 * function of (generator, seed, requests, rate). Arrivals are Poisson
 * unless a generator says otherwise. */
#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

#define US_PER_S 1000000.0

void
sim_workload_init(struct sim_workload *w)
{
    memset(w, 0, sizeof *w);
}

void
sim_workload_free(struct sim_workload *w)
{
    if (w == NULL)
        return;
    free(w->reqs);
    free(w->segs);
    free(w->adapter_names);
    free(w->adapter_hash);
    memset(w, 0, sizeof *w);
}

int
sim_workload_add(struct sim_workload *w, uint64_t arrival_us,
                 uint32_t output_tokens, const struct sim_seg *segs,
                 uint32_t n, uint64_t session, int has_session,
                 struct sim_err *err)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += segs[i].len;
    if (total == 0 || total > LR_INDEX_MAX_TOKENS || total > UINT32_MAX)
        return sim_errf(err, "request with %llu prompt tokens (must be 1..%u)",
                        (unsigned long long)total, LR_INDEX_MAX_TOKENS);
    if (output_tokens == 0)
        return sim_errf(err, "request with 0 output tokens");
    if (sim_grow((void **)&w->reqs, &w->cap_reqs, w->n_reqs + 1,
                 sizeof *w->reqs) != 0 ||
        sim_grow((void **)&w->segs, &w->cap_segs, w->n_segs + n,
                 sizeof *w->segs) != 0)
        return sim_errf(err, "out of memory (%zu requests)", w->n_reqs + 1);
    memcpy(w->segs + w->n_segs, segs, n * sizeof *segs);
    struct sim_req *r = &w->reqs[w->n_reqs++];
    memset(r, 0, sizeof *r);
    r->arrival_us = arrival_us;
    r->input_tokens = (uint32_t)total;
    r->output_tokens = output_tokens;
    r->seg_first = w->n_segs;
    r->n_segs = n;
    r->session = session;
    r->has_session = has_session ? 1u : 0u;
    w->n_segs += n;
    return 0;
}

void
sim_workload_truncate(struct sim_workload *w, size_t n)
{
    if (n < w->n_reqs)
        w->n_reqs = n;
}

void
sim_workload_scale_time(struct sim_workload *w, double scale)
{
    for (size_t i = 0; i < w->n_reqs; i++)
        w->reqs[i].arrival_us =
            (uint64_t)llround((double)w->reqs[i].arrival_us * scale);
    w->rate = w->rate > 0 ? w->rate / scale : 0;
}

int
sim_workload_spread(struct sim_workload *w, uint64_t window_us, uint64_t seed,
                    struct sim_err *err)
{
    if (window_us == 0 || w->n_reqs == 0)
        return 0;
    struct sim_rng rng;
    sim_rng_seed(&rng, seed ^ 0x737072656164ull); /* "spread" */
    for (size_t i = 0; i < w->n_reqs;) {
        size_t j = i;
        uint64_t t = w->reqs[i].arrival_us;
        while (j < w->n_reqs && w->reqs[j].arrival_us == t)
            j++;
        if (j - i > 1)
            for (size_t k = i; k < j; k++)
                w->reqs[k].arrival_us = t + sim_rng_range(&rng, 0,
                                                          window_us - 1);
        i = j;
    }
    return sim_workload_sort(w, err);
}

void
sim_workload_tokens(const struct sim_workload *w, size_t r, uint32_t *tok,
                    uint32_t *bnd, size_t *n_bnd)
{
    const struct sim_req *q = &w->reqs[r];
    const struct sim_seg *s = &w->segs[q->seg_first];
    uint32_t at = 0;
    size_t nb = 0;
    for (uint32_t i = 0; i < q->n_segs; i++) {
        sim_tokens(s[i].seed, 0, s[i].len, tok + at);
        at += s[i].len;
        if (bnd != NULL && s[i].boundary)
            bnd[nb++] = at;
    }
    if (n_bnd != NULL)
        *n_bnd = nb;
}

void
sim_workload_info(const struct sim_workload *w, struct sim_workload_info *out)
{
    memset(out, 0, sizeof *out);
    out->requests = w->n_reqs;
    for (size_t i = 0; i < w->n_reqs; i++) {
        const struct sim_req *q = &w->reqs[i];
        out->input_tokens += q->input_tokens;
        out->output_tokens += q->output_tokens;
        if (q->input_tokens > out->max_input)
            out->max_input = q->input_tokens;
    }
    if (w->n_reqs > 0)
        out->duration_s = (double)w->reqs[w->n_reqs - 1].arrival_us / US_PER_S;
}

/* Stable sort by arrival (a merge sort: generators emit conversations turn
 * by turn, and equal times must keep their generation order). */
static int
sort_by_arrival(struct sim_workload *w, struct sim_err *err)
{
    size_t n = w->n_reqs;
    int sorted = 1;
    for (size_t i = 1; i < n && sorted; i++)
        sorted = w->reqs[i - 1].arrival_us <= w->reqs[i].arrival_us;
    if (sorted)
        return 0;
    struct sim_req *tmp = sim_calloc(n, sizeof *tmp);
    if (tmp == NULL)
        return sim_errf(err, "out of memory sorting %zu requests", n);
    struct sim_req *a = w->reqs, *b = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = a[j].arrival_us < a[i].arrival_us ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        struct sim_req *t = a;
        a = b;
        b = t;
    }
    if (a != w->reqs)
        memcpy(w->reqs, a, n * sizeof *a);
    free(tmp);
    return 0;
}

int
sim_workload_sort(struct sim_workload *w, struct sim_err *err)
{
    return sort_by_arrival(w, err);
}

/* ---- generator helpers ------------------------------------------------------- */

struct gen {
    struct sim_rng rng;
    struct sim_workload *w;
    uint64_t next_seed; /* distinct segment names */
    double t_us;        /* Poisson clock */
    double rate;
    size_t n;
    struct sim_err *err;
};

static void
gen_init(struct gen *g, const struct sim_gen_opts *o, struct sim_workload *w,
         struct sim_err *err, size_t def_n, double def_rate)
{
    memset(g, 0, sizeof *g);
    sim_rng_seed(&g->rng, o->seed);
    g->w = w;
    g->next_seed = sim_mix64(o->seed ^ 0x6c7273696d736567ull); /* "lrsimseg" */
    g->n = o->requests ? o->requests : def_n;
    g->rate = o->rate > 0 ? o->rate : def_rate;
    g->err = err;
    w->seed = o->seed;
    w->rate = g->rate;
}

/* A fresh segment name. */
static uint64_t
fresh(struct gen *g)
{
    return sim_mix64(++g->next_seed);
}

static uint32_t
uni(struct gen *g, uint32_t lo, uint32_t hi)
{
    return (uint32_t)sim_rng_range(&g->rng, lo, hi);
}

/* Next Poisson arrival at rate r (req/s). */
static uint64_t
poisson_next(struct gen *g, double rate)
{
    g->t_us += sim_rng_exp(&g->rng, US_PER_S / rate);
    return (uint64_t)llround(g->t_us);
}

/* Log-normal with the given median, clamped to [lo, hi]. */
static uint32_t
lognormal(struct gen *g, double median, double sigma, uint32_t lo, uint32_t hi)
{
    double x = median * exp(sim_rng_normal(&g->rng, 0.0, sigma));
    if (x < lo)
        return lo;
    if (x > hi)
        return hi;
    return (uint32_t)llround(x);
}

static uint32_t
normal_out(struct gen *g, double mean, double sd)
{
    double x = sim_rng_normal(&g->rng, mean, sd);
    return x < 1 ? 1u : (uint32_t)llround(x);
}

/* Zipf(s) over 0..n-1 by inversion of the precomputed CDF. */
struct zipf {
    double *cdf;
    uint32_t n;
};

static int
zipf_init(struct zipf *z, uint32_t n, double s)
{
    z->n = n;
    z->cdf = sim_calloc(n, sizeof *z->cdf);
    if (z->cdf == NULL)
        return -1;
    double acc = 0;
    for (uint32_t k = 0; k < n; k++) {
        acc += pow((double)(k + 1), -s);
        z->cdf[k] = acc;
    }
    for (uint32_t k = 0; k < n; k++)
        z->cdf[k] /= acc;
    return 0;
}

/* The rank at u in [0, 1). */
static uint32_t
zipf_at(const struct zipf *z, double u)
{
    uint32_t lo = 0, hi = z->n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (z->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint32_t
zipf_draw(const struct zipf *z, struct sim_rng *rng)
{
    return zipf_at(z, sim_rng_unit(rng));
}

static int
add(struct gen *g, uint64_t t, uint32_t out, const struct sim_seg *s,
    uint32_t n, uint64_t session, int has_session)
{
    return sim_workload_add(g->w, t, out, s, n, session, has_session, g->err);
}

static void
describe(struct sim_workload *w, const char *name, const char *cluster)
{
    snprintf(w->name, sizeof w->name, "%s", name);
    snprintf(w->cluster, sizeof w->cluster, "%s", cluster);
}

/* ---- conversation: multi-turn chats with growing history ------------------- */

#define CONV_SYS 8
#define CONV_MAX_TURNS 16
#define CONV_WARM_US (CONV_MAX_TURNS * 35.0 * US_PER_S)

/* Sessions arrive as a Poisson process; each has 2..16 turns, a shared
 * system prompt (one of 8, 1-3k tokens), user messages of 40-900 tokens
 * and replies of 60-600 tokens; turn k+1 arrives 5-35 s after turn k
 * (think time). Every turn's prompt is the whole history. */
static int
gen_conversation(const struct sim_gen_opts *o, struct sim_workload *w,
                 struct sim_err *err)
{
    struct gen g;
    gen_init(&g, o, w, err, 4000, 14.0);
    struct sim_seg sys[CONV_SYS];
    for (int i = 0; i < CONV_SYS; i++)
        sys[i] = (struct sim_seg){ fresh(&g), uni(&g, 1000, 3000), 1 };
    struct sim_seg hist[2 * CONV_MAX_TURNS + 1];
    double mean_turns = (2.0 + CONV_MAX_TURNS) / 2.0;
    size_t made = 0;
    /* A window cut from a service that has been running: sessions start
     * from -WARM on, and turns before 0 only build history (their prefixes
     * are cold, as in a trace window). Sessions start until the horizon at
     * which the requests average the rate; the first n are kept. */
    double horizon_us = (double)g.n / g.rate * US_PER_S;
    g.t_us = -CONV_WARM_US;
    for (uint64_t sess = 1; made < g.n || g.t_us < horizon_us; sess++) {
        g.t_us += sim_rng_exp(&g.rng, US_PER_S * mean_turns / g.rate);
        double t = g.t_us;
        uint32_t turns = uni(&g, 2, CONV_MAX_TURNS);
        uint32_t nh = 0;
        hist[nh++] = sys[uni(&g, 0, CONV_SYS - 1)];
        for (uint32_t k = 0; k < turns; k++) {
            hist[nh++] = (struct sim_seg){ fresh(&g), uni(&g, 40, 900), 1 };
            uint32_t reply = uni(&g, 60, 600);
            if (t >= 0) {
                if (add(&g, (uint64_t)llround(t), reply, hist, nh, sess, 1) != 0)
                    return -1;
                made++;
            }
            hist[nh++] = (struct sim_seg){ fresh(&g), reply, 1 };
            t += (double)uni(&g, 5000, 35000) * 1000.0;
        }
    }
    describe(w, "conversation", "8xa100");
    snprintf(w->desc, sizeof w->desc,
             "multi-turn chats, 2-16 turns, growing history, 8 shared system "
             "prompts; %.1f req/s",
             g.rate);
    if (sort_by_arrival(w, err) != 0)
        return -1;
    sim_workload_truncate(w, g.n);
    return 0;
}

/* ---- system-prompts: shared system prompts fanned out ---------------------------- */

/* Agent-style fan-out: jobs arrive as a Poisson process; each picks one of
 * 24 system prompts (2-6k tokens) and sends 4-12 requests at once (within
 * 50 ms), each with its own 50-300-token query; outputs 30-300 tokens. */
static int
gen_system_prompts(const struct sim_gen_opts *o, struct sim_workload *w,
                   struct sim_err *err)
{
    struct gen g;
    gen_init(&g, o, w, err, 4000, 24.0);
    enum { NSYS = 24 };
    struct sim_seg sys[NSYS];
    for (int i = 0; i < NSYS; i++)
        sys[i] = (struct sim_seg){ fresh(&g), uni(&g, 2000, 6000), 1 };
    size_t made = 0;
    while (made < g.n) {
        uint64_t t = poisson_next(&g, g.rate / 8.0);
        uint32_t fan = uni(&g, 4, 12);
        struct sim_seg s[2];
        s[0] = sys[uni(&g, 0, NSYS - 1)];
        for (uint32_t k = 0; k < fan && made < g.n; k++) {
            s[1] = (struct sim_seg){ fresh(&g), uni(&g, 50, 300), 1 };
            uint64_t at = t + (uint64_t)uni(&g, 0, 50000);
            if (add(&g, at, uni(&g, 30, 300), s, 2, 0, 0) != 0)
                return -1;
            made++;
        }
    }
    describe(w, "system-prompts", "8xa100");
    snprintf(w->desc, sizeof w->desc,
             "fan-out jobs of 4-12 requests sharing one of 24 system prompts "
             "(2-6k tokens); %.1f req/s",
             g.rate);
    return sort_by_arrival(w, err);
}

/* ---- tools-zipf: skewed popular tool prompts ------------------------------------------ */

/* 32 tool/agent prompts of 2-6k tokens, chosen by Zipf(1.2): the hottest
 * takes a third of the requests, the top 4 over half. Each request
 * appends a unique 200-1200-token task; outputs 20-200 tokens. All the
 * prompts fit in every instance's cache (about 130k tokens), so spreading
 * costs little reuse, while following the cache piles the hot prompt's
 * traffic onto the one instance that holds it (DualMap's hot-spot). */
static int
gen_tools_zipf(const struct sim_gen_opts *o, struct sim_workload *w,
               struct sim_err *err)
{
    struct gen g;
    gen_init(&g, o, w, err, 6000, 30.0);
    enum { NTOOL = 32 };
    struct sim_seg tool[NTOOL];
    struct zipf z = { 0 };
    if (zipf_init(&z, NTOOL, 1.2) != 0)
        return sim_errf(err, "out of memory");
    for (int i = 0; i < NTOOL; i++)
        tool[i] = (struct sim_seg){ fresh(&g), uni(&g, 2000, 6000), 1 };
    int rc = 0;
    for (size_t i = 0; i < g.n && rc == 0; i++) {
        uint64_t t = poisson_next(&g, g.rate);
        struct sim_seg s[2];
        s[0] = tool[zipf_draw(&z, &g.rng)];
        s[1] = (struct sim_seg){ fresh(&g), uni(&g, 200, 1200), 1 };
        rc = add(&g, t, uni(&g, 20, 200), s, 2, 0, 0);
    }
    free(z.cdf);
    describe(w, "tools-zipf", "8xa100");
    snprintf(w->desc, sizeof w->desc,
             "32 tool prompts (2-6k tokens) by Zipf(1.2) popularity + a "
             "unique task; %.1f req/s",
             g.rate);
    return rc;
}

/* ---- wildchat: short, low-reuse prompts ------------------------------------------------- */

#define WILD_WARM_US (4 * 60.0 * US_PER_S)

/* WildChat-like: 75% single-turn prompts, 25% short follow-ups of 2-4
 * turns; user messages log-normal (median 120 tokens, long tail to 4k),
 * replies log-normal (median 250, up to 2k); no shared system prompt. */
static int
gen_wildchat(const struct sim_gen_opts *o, struct sim_workload *w,
             struct sim_err *err)
{
    struct gen g;
    gen_init(&g, o, w, err, 6000, 40.0);
    size_t made = 0;
    struct sim_seg hist[8];
    double horizon_us = (double)g.n / g.rate * US_PER_S;
    g.t_us = -WILD_WARM_US; /* as in gen_conversation */
    for (uint64_t sess = 1; made < g.n || g.t_us < horizon_us; sess++) {
        /* 0.75 x 1 + 0.25 x 3 = 1.5 turns per session on average */
        g.t_us += sim_rng_exp(&g.rng, US_PER_S * 1.5 / g.rate);
        double t = g.t_us;
        uint32_t turns = sim_rng_unit(&g.rng) < 0.75 ? 1 : uni(&g, 2, 4);
        uint32_t nh = 0;
        for (uint32_t k = 0; k < turns; k++) {
            hist[nh++] = (struct sim_seg){
                fresh(&g), lognormal(&g, 120, 1.0, 4, 4000), 1
            };
            uint32_t reply = lognormal(&g, 250, 0.8, 8, 2000);
            if (t >= 0) {
                if (add(&g, (uint64_t)llround(t), reply, hist, nh, sess, 1) != 0)
                    return -1;
                made++;
            }
            hist[nh++] = (struct sim_seg){ fresh(&g), reply, 1 };
            t += (double)uni(&g, 10000, 60000) * 1000.0;
        }
    }
    describe(w, "wildchat", "8xa100");
    snprintf(w->desc, sizeof w->desc,
             "short low-reuse chat (WildChat-like): median prompt 120 tokens, "
             "75%% single-turn; %.1f req/s",
             g.rate);
    if (sort_by_arrival(w, err) != 0)
        return -1;
    sim_workload_truncate(w, g.n);
    return 0;
}

/* ---- Lodestar's prefix-sharing sets ----------------------------------------------------- */

#define SHARE_GROUPS 128

/* One Lodestar-style request: input U[lo, hi], of which the first
 * `ratio` is the prefix of one of SHARE_GROUPS groups (uniform), the rest
 * unique; output N(100, 10). Two requests of one group share the shorter
 * of their two prefixes. */
static int
share_request(struct gen *g, const uint64_t *groups, uint64_t t, double ratio,
              uint32_t lo, uint32_t hi)
{
    uint32_t len = uni(g, lo, hi);
    uint32_t shared = (uint32_t)llround(ratio * len);
    struct sim_seg s[2];
    uint32_t n = 0;
    if (shared > 0)
        s[n++] = (struct sim_seg){ groups[uni(g, 0, SHARE_GROUPS - 1)], shared,
                                   1 };
    if (len > shared)
        s[n++] = (struct sim_seg){ fresh(g), len - shared, 1 };
    return add(g, t, normal_out(g, 100, 10), s, n, 0, 0);
}

struct share_cfg {
    const char *name;
    double ratio;       /* < 0: per request from {.1, .3, .5, .7} */
    double ratio_after; /* >= 0: the ratio from the middle of the run on */
    double rate_after;  /* > 0: the rate from the middle of the run on */
    uint32_t lo, hi;
    double def_rate;
    size_t def_n;
    const char *cluster;
};

static int
gen_share(const struct share_cfg *c, const struct sim_gen_opts *o,
          struct sim_workload *w, struct sim_err *err)
{
    static const double mix[4] = { 0.1, 0.3, 0.5, 0.7 };
    struct gen g;
    gen_init(&g, o, w, err, c->def_n, c->def_rate);
    uint64_t groups[SHARE_GROUPS];
    for (int i = 0; i < SHARE_GROUPS; i++)
        groups[i] = fresh(&g);
    double rate_after = c->rate_after;
    if (rate_after > 0 && o->rate > 0) /* keep the step's proportion */
        rate_after *= o->rate / c->def_rate;
    for (size_t i = 0; i < g.n; i++) {
        int late = 2 * i >= g.n;
        double rate = late && rate_after > 0 ? rate_after : g.rate;
        uint64_t t = poisson_next(&g, rate);
        double ratio = c->ratio;
        if (late && c->ratio_after >= 0)
            ratio = c->ratio_after;
        if (ratio < 0)
            ratio = mix[uni(&g, 0, 3)];
        if (share_request(&g, groups, t, ratio, c->lo, c->hi) != 0)
            return -1;
    }
    snprintf(w->name, sizeof w->name, "%s", c->name);
    snprintf(w->cluster, sizeof w->cluster, "%s", c->cluster);
    /* where the shift happens, for --split-s and --lodestar-freeze-s */
    double shift_s =
        g.n > 0 ? (double)w->reqs[w->n_reqs - g.n + g.n / 2].arrival_us / 1e6
                : 0;
    if (c->rate_after > 0)
        snprintf(w->desc, sizeof w->desc,
                 "Lodestar-style mixed sharing, inputs %u-%u tokens; rate "
                 "%.1f then %.1f req/s from the middle of the run (request "
                 "%zu, %.1f s)",
                 c->lo, c->hi, g.rate, rate_after, g.n / 2, shift_s);
    else if (c->ratio_after >= 0)
        snprintf(w->desc, sizeof w->desc,
                 "Lodestar-style sharing %.0f%% then %.0f%% from the middle "
                 "of the run (request %zu, %.1f s), inputs %u-%u tokens; "
                 "%.1f req/s",
                 100 * c->ratio, 100 * c->ratio_after, g.n / 2, shift_s, c->lo,
                 c->hi, g.rate);
    else if (c->ratio < 0)
        snprintf(w->desc, sizeof w->desc,
                 "Lodestar-style sharing 10/30/50/70%% mixed, inputs %u-%u "
                 "tokens, output N(100,10); %.1f req/s",
                 c->lo, c->hi, g.rate);
    else
        snprintf(w->desc, sizeof w->desc,
                 "Lodestar-style %.0f%% prefix sharing (128 groups), inputs "
                 "%u-%u tokens, output N(100,10); %.1f req/s",
                 100 * c->ratio, c->lo, c->hi, g.rate);
    return 0;
}

#define SHARE_GEN(fn, ...)                                              \
    static int fn(const struct sim_gen_opts *o, struct sim_workload *w, \
                  struct sim_err *err)                                  \
    {                                                                   \
        static const struct share_cfg c = { __VA_ARGS__ };              \
        return gen_share(&c, o, w, err);                                \
    }

SHARE_GEN(gen_share10, "share-10", 0.1, -1, 0, 1000, 10000, 10.0, 3000,
          "8xa100")
SHARE_GEN(gen_share30, "share-30", 0.3, -1, 0, 1000, 10000, 11.0, 3000,
          "8xa100")
SHARE_GEN(gen_share50, "share-50", 0.5, -1, 0, 1000, 10000, 13.0, 3000,
          "8xa100")
SHARE_GEN(gen_share70, "share-70", 0.7, -1, 0, 1000, 10000, 16.0, 3000,
          "8xa100")
SHARE_GEN(gen_share_mixed, "share-mixed", -1, -1, 0, 1000, 10000, 12.0, 3000,
          "8xa100")
SHARE_GEN(gen_share_shift, "share-shift", 0.05, 0.5, 0, 1000, 10000, 11.0,
          4000, "8xa100")
SHARE_GEN(gen_rate_shift, "rate-shift", -1, -1, 22.0, 1000, 10000, 10.0, 4000,
          "8xa100")
SHARE_GEN(gen_short_high_rate, "short-high-rate", 0.5, -1, 0, 128, 1024, 140.0,
          12000, "8xa100")

const struct sim_generator sim_generators[] = {
    { "conversation", "multi-turn chats with growing history (default)",
      "8xa100", gen_conversation },
    { "system-prompts", "shared system prompts fanned out by agent jobs",
      "8xa100", gen_system_prompts },
    { "tools-zipf", "skewed popular tool prompts (Zipf 1.2)", "8xa100",
      gen_tools_zipf },
    { "wildchat", "short low-reuse prompts (WildChat-like)", "8xa100",
      gen_wildchat },
    { "share-10", "Lodestar: 10% prefix sharing, 1-10k tokens", "8xa100",
      gen_share10 },
    { "share-30", "Lodestar: 30% prefix sharing", "8xa100", gen_share30 },
    { "share-50", "Lodestar: 50% prefix sharing", "8xa100", gen_share50 },
    { "share-70", "Lodestar: 70% prefix sharing", "8xa100", gen_share70 },
    { "share-mixed", "Lodestar: 10/30/50/70% mixed", "8xa100",
      gen_share_mixed },
    { "share-shift", "sharing shifts from 5% to 50% mid-run", "8xa100",
      gen_share_shift },
    { "rate-shift", "mixed sharing, rate steps from 10 to 22 req/s mid-run",
      "8xa100", gen_rate_shift },
    { "short-high-rate",
      "Lodestar Fig. 1b: short inputs (128-1024), 50% sharing, high rate",
      "8xa100", gen_short_high_rate },
    { NULL, NULL, NULL, NULL },
};

const struct sim_generator *
sim_generator_find(const char *name)
{
    for (const struct sim_generator *g = sim_generators; g->name; g++)
        if (strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

/* ---- request classes, tenants, bursts ---------------------------------------- */

static const struct sim_rclass builtin_rclasses[] = {
    { "interactive", 0, 2.0, 0, 0 },
    { "batch", 4, 60.0, 0, 0 },
};

static int
parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end != '\0' || !(x >= lo) || !(x <= hi))
        return -1;
    *out = x;
    return 0;
}

/* One "NAME=SHARE[:URGENCY:SLO_S][:shed]". */
static int
parse_rclass(char *item, struct sim_rclass *c, struct sim_err *err)
{
    char *eq = strchr(item, '=');
    if (eq == NULL || eq == item)
        return sim_errf(err, "expected NAME=SHARE[:URGENCY:SLO_S][:shed], "
                             "got '%s'", item);
    *eq = '\0';
    size_t nl = strlen(item);
    if (nl >= SIM_RCLASS_NAME)
        return sim_errf(err, "class name '%s' longer than %d characters",
                        item, SIM_RCLASS_NAME - 1);
    for (const char *p = item; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return sim_errf(err, "class name '%s': lowercase letters, digits, "
                                 "'-' and '_' only", item);
    memset(c, 0, sizeof *c);
    memcpy(c->name, item, nl + 1);
    const struct sim_rclass *known = NULL;
    for (size_t k = 0; k < sizeof builtin_rclasses / sizeof *builtin_rclasses;
         k++)
        if (strcmp(builtin_rclasses[k].name, item) == 0)
            known = &builtin_rclasses[k];
    char *f[5];
    int nf = 0;
    char *save = NULL;
    for (char *t = strtok_r(eq + 1, ":", &save); t != NULL;
         t = strtok_r(NULL, ":", &save)) {
        if (nf == 4)
            return sim_errf(err, "class %s: too many fields", c->name);
        f[nf++] = t;
    }
    if (nf > 0 && strcmp(f[nf - 1], "shed") == 0) {
        c->sheddable = 1;
        nf--;
    }
    if (nf == 0 || parse_num(f[0], 0, 1e9, &c->share) != 0)
        return sim_errf(err, "class %s: expected a share >= 0", c->name);
    if (nf == 1) {
        if (known == NULL)
            return sim_errf(err, "class %s: give its urgency and SLO "
                                 "(%s=SHARE:URGENCY:SLO_S); only interactive "
                                 "and batch are built in", c->name, c->name);
        c->urgency = known->urgency;
        c->slo_s = known->slo_s;
        return 0;
    }
    double u;
    if (nf != 3)
        return sim_errf(err, "class %s: give both urgency and SLO", c->name);
    if (parse_num(f[1], 0, LR_ROUTER_URGENCIES - 1, &u) != 0 || u != floor(u))
        return sim_errf(err, "class %s: urgency '%s' is not 0..%u", c->name,
                        f[1], LR_ROUTER_URGENCIES - 1);
    c->urgency = (uint32_t)u;
    if (parse_num(f[2], 1e-3, 86400, &c->slo_s) != 0)
        return sim_errf(err, "class %s: SLO '%s' is not 0.001..86400 s",
                        c->name, f[2]);
    return 0;
}

int
sim_mix_parse_classes(const char *spec, struct sim_mix *m, struct sim_err *err)
{
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return sim_errf(err, "list too long");
    strcpy(buf, spec);
    struct sim_rclass cls[SIM_MAX_RCLASSES];
    uint32_t n = 0;
    double total = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (n == SIM_MAX_RCLASSES)
            return sim_errf(err, "more than %d classes", SIM_MAX_RCLASSES);
        if (parse_rclass(t, &cls[n], err) != 0)
            return -1;
        for (uint32_t k = 0; k < n; k++)
            if (strcmp(cls[k].name, cls[n].name) == 0)
                return sim_errf(err, "class %s given twice", cls[n].name);
        total += cls[n].share;
        n++;
    }
    if (n == 0)
        return sim_errf(err, "empty list");
    if (!(total > 0))
        return sim_errf(err, "the shares sum to 0");
    for (uint32_t k = 0; k < n; k++)
        cls[k].share /= total;
    memcpy(m->cls, cls, sizeof cls);
    m->n_cls = n;
    return 0;
}

int
sim_mix_parse_tenants(const char *spec, struct sim_mix *m, struct sim_err *err)
{
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return sim_errf(err, "list too long");
    strcpy(buf, spec);
    double w[SIM_MAX_TENANTS];
    uint32_t n = 0;
    if (strchr(spec, ',') == NULL) {
        double x;
        if (parse_num(spec, 1, SIM_MAX_TENANTS, &x) != 0 || x != floor(x))
            return sim_errf(err, "expected a count 1..%d or weights W1,W2,..."
                                 ", got '%s'", SIM_MAX_TENANTS, spec);
        n = (uint32_t)x;
        for (uint32_t k = 0; k < n; k++)
            w[k] = 1;
    } else {
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t != NULL;
             t = strtok_r(NULL, ",", &save)) {
            if (n == SIM_MAX_TENANTS)
                return sim_errf(err, "more than %d tenants", SIM_MAX_TENANTS);
            if (parse_num(t, 0, 1e9, &w[n]) != 0)
                return sim_errf(err, "weight '%s' is not a number >= 0", t);
            n++;
        }
        double total = 0;
        for (uint32_t k = 0; k < n; k++)
            total += w[k];
        if (n == 0 || !(total > 0))
            return sim_errf(err, "the weights sum to 0");
    }
    memcpy(m->tenant_w, w, n * sizeof *w);
    m->n_tenants = n;
    return 0;
}

int
sim_mix_parse_burst(const char *spec, struct sim_mix *m, struct sim_err *err)
{
    char buf[128];
    if (strlen(spec) >= sizeof buf)
        return sim_errf(err, "'%s' is too long", spec);
    strcpy(buf, spec);
    double period = 60;
    char *colon = strchr(buf, ':');
    if (colon != NULL) {
        *colon = '\0';
        if (parse_num(colon + 1, 1e-3, 1e6, &period) != 0)
            return sim_errf(err, "period '%s' is not 0.001..1e6 s", colon + 1);
    }
    double x;
    if (parse_num(buf, 1, 1e6, &x) != 0)
        return sim_errf(err, "expected X[:PERIOD_S] with X >= 1, got '%s'",
                        spec);
    m->burst = x;
    m->burst_period_s = period;
    return 0;
}

int
sim_mix_any(const struct sim_mix *m)
{
    return m->n_cls > 0 || m->n_tenants > 0;
}

/* Index drawn from cumulative weights by u in [0, 1). */
static uint32_t
draw_weighted(const double *w, uint32_t n, double total, double u)
{
    double acc = 0, at = u * total;
    for (uint32_t k = 0; k + 1 < n; k++) {
        acc += w[k];
        if (at < acc)
            return k;
    }
    return n - 1;
}

void
sim_workload_mix(struct sim_workload *w, const struct sim_mix *m,
                 uint64_t seed)
{
    w->mix = *m;
    struct sim_rng rng;
    sim_rng_seed(&rng, seed ^ 0x6c7273696d6d6978ull); /* "lrsimmix" */
    double cls_w[SIM_MAX_RCLASSES];
    for (uint32_t k = 0; k < m->n_cls; k++)
        cls_w[k] = m->cls[k].share;
    double ten_total = 0;
    for (uint32_t k = 0; k < m->n_tenants; k++)
        ten_total += m->tenant_w[k];
    for (size_t i = 0; i < w->n_reqs; i++) {
        struct sim_req *q = &w->reqs[i];
        /* two uniforms: from the session, so that its turns agree, or from
         * the stream */
        double u1, u2;
        if (q->has_session) {
            uint64_t h = sim_mix64(seed ^ sim_mix64(q->session ^
                                                    0x636c617373ull));
            u1 = (double)(h >> 11) * 0x1.0p-53;
            u2 = (double)(sim_mix64(h) >> 11) * 0x1.0p-53;
        } else {
            u1 = sim_rng_unit(&rng);
            u2 = sim_rng_unit(&rng);
        }
        q->rclass = m->n_cls ? draw_weighted(cls_w, m->n_cls, 1.0, u1) : 0;
        q->owner = m->n_tenants
                       ? draw_weighted(m->tenant_w, m->n_tenants, ten_total, u2)
                       : 0;
    }
    if (m->burst > 1 && m->burst_period_s > 0) {
        /* t -> P floor(t / P) + (t mod P) / X: monotone, so the order
         * stays */
        uint64_t p = (uint64_t)llround(m->burst_period_s * US_PER_S);
        if (p == 0)
            p = 1;
        for (size_t i = 0; i < w->n_reqs; i++) {
            uint64_t t = w->reqs[i].arrival_us;
            w->reqs[i].arrival_us =
                t / p * p + (uint64_t)llround((double)(t % p) / m->burst);
        }
    }
}

void
sim_mix_describe(const struct sim_mix *m, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
#define PUT(...)                                                          \
    do {                                                                  \
        if (used < len) {                                                 \
            int w_ = snprintf(buf + used, len - used, __VA_ARGS__);       \
            if (w_ > 0)                                                   \
                used += (size_t)w_;                                       \
        }                                                                 \
    } while (0)
    for (uint32_t k = 0; k < m->n_cls; k++) {
        const struct sim_rclass *c = &m->cls[k];
        PUT("%s%s %.0f%% (urgency %u, SLO %g s%s)", k ? ", " : "classes ",
            c->name, 100 * c->share, c->urgency, c->slo_s,
            c->sheddable ? ", sheddable" : "");
    }
    if (m->n_tenants > 0) {
        PUT("%s%u tenant%s", used ? "; " : "", m->n_tenants,
            m->n_tenants == 1 ? "" : "s");
        int equal = 1;
        for (uint32_t k = 1; k < m->n_tenants; k++)
            equal &= m->tenant_w[k] == m->tenant_w[0];
        for (uint32_t k = 0; !equal && k < m->n_tenants; k++)
            PUT("%s%g", k ? ":" : " at rates ", m->tenant_w[k]);
    }
    if (m->burst > 1)
        PUT("%sbursts of x%g the mean rate, one every %g s", used ? "; " : "",
            m->burst, m->burst_period_s);
#undef PUT
}

double
sim_req_slo(const struct sim_workload *w, size_t r, double dflt)
{
    if (w->mix.n_cls == 0)
        return dflt;
    return w->mix.cls[w->reqs[r].rclass].slo_s;
}

/* ---- LoRA adapters and models ------------------------------------------------- */

static const char *const model_names[SIM_MAX_MODELS] = {
    "llama-3-8b", "qwen-2.5-7b", "mistral-7b", "gemma-2-9b",
};

void
sim_lora_init(struct sim_lora *l)
{
    memset(l, 0, sizeof *l);
    l->zipf = 1.0;
    l->share = 1.0;
}

int
sim_lora_parse_models(const char *spec, struct sim_lora *l,
                      struct sim_err *err)
{
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return sim_errf(err, "list too long");
    strcpy(buf, spec);
    double w[SIM_MAX_MODELS];
    uint32_t n = 0;
    if (strchr(spec, ',') == NULL) {
        double x;
        if (parse_num(spec, 1, SIM_MAX_MODELS, &x) != 0 || x != floor(x))
            return sim_errf(err, "expected a count 1..%u or weights W1,W2,..."
                                 ", got '%s'", SIM_MAX_MODELS, spec);
        n = (uint32_t)x;
        for (uint32_t k = 0; k < n; k++)
            w[k] = 1;
    } else {
        char *save = NULL;
        double total = 0;
        for (char *t = strtok_r(buf, ",", &save); t != NULL;
             t = strtok_r(NULL, ",", &save)) {
            if (n == SIM_MAX_MODELS)
                return sim_errf(err, "more than %u models", SIM_MAX_MODELS);
            if (parse_num(t, 0, 1e9, &w[n]) != 0)
                return sim_errf(err, "weight '%s' is not a number >= 0", t);
            total += w[n++];
        }
        if (n == 0 || !(total > 0))
            return sim_errf(err, "the weights sum to 0");
    }
    memcpy(l->model_w, w, n * sizeof *w);
    l->n_models = n;
    return 0;
}

const char *
sim_adapter_name(const struct sim_workload *w, uint32_t a)
{
    if (a == 0 || a > w->lora.n_adapters || w->adapter_names == NULL)
        return NULL;
    return w->adapter_names + (size_t)a * SIM_ADAPTER_NAME;
}

const char *
sim_model_name(uint32_t m)
{
    return m < SIM_MAX_MODELS ? model_names[m] : NULL;
}

uint64_t
sim_req_salt(const struct sim_workload *w, size_t r)
{
    const struct sim_req *q = &w->reqs[r];
    if (q->adapter == 0 || w->adapter_hash == NULL)
        return q->tenant;
    return lr_adapter_salt(q->tenant, w->adapter_hash[q->adapter]);
}

static double
unit_of(uint64_t h)
{
    return (double)(h >> 11) * 0x1.0p-53;
}

/* A map from 64-bit keys (sessions, prompts' seeds) to a value, for one
 * pass of sim_workload_lora: open addressing, never full. */
struct kmap {
    uint64_t *key;
    uint32_t *val;
    uint8_t *used;
    size_t mask;
};

static int
kmap_init(struct kmap *m, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    m->mask = cap - 1;
    m->key = sim_calloc(cap, sizeof *m->key);
    m->val = sim_calloc(cap, sizeof *m->val);
    m->used = sim_calloc(cap, sizeof *m->used);
    return m->key && m->val && m->used ? 0 : -1;
}

static void
kmap_free(struct kmap *m)
{
    free(m->key);
    free(m->val);
    free(m->used);
}

/* The value of key; *fresh = 1 (and the value 0) if it was not there. */
static uint32_t *
kmap_get(struct kmap *m, uint64_t key, int *fresh)
{
    size_t i = sim_mix64(key) & m->mask;
    while (m->used[i] && m->key[i] != key)
        i = (i + 1) & m->mask;
    *fresh = !m->used[i];
    m->used[i] = 1;
    m->key[i] = key;
    return &m->val[i];
}

/* The model adapter a belongs to: drawn by the weights from its name. */
static uint32_t
adapter_model(const struct sim_workload *w, uint32_t a, double mtot)
{
    double u = unit_of(sim_mix64(w->adapter_hash[a] ^ 0x6d6f64656cull));
    return draw_weighted(w->lora.model_w, w->lora.n_models, mtot, u);
}

/* Rank r's adapter at time t (see sim_workload_lora). */
static uint32_t
rotate(const struct sim_lora *l, uint32_t r, uint64_t t_us)
{
    uint64_t n = l->n_adapters, epoch = 0;
    if (l->shift_s > 0)
        epoch = t_us / (uint64_t)llround(l->shift_s * US_PER_S);
    return 1 + (uint32_t)((r + epoch * ((n + 3) / 4)) % n);
}

int
sim_workload_lora(struct sim_workload *w, const struct sim_lora *l,
                  uint64_t seed, struct sim_err *err)
{
    w->lora = *l;
    free(w->adapter_names);
    free(w->adapter_hash);
    w->adapter_names = NULL;
    w->adapter_hash = NULL;
    uint32_t n = l->n_adapters;
    if (n == 0 && l->n_models == 0)
        return 0;
    struct zipf z = { 0 };
    struct kmap m = { 0 };
    w->adapter_names = sim_calloc((size_t)n + 1, SIM_ADAPTER_NAME);
    w->adapter_hash = sim_calloc((size_t)n + 1, sizeof *w->adapter_hash);
    if (w->adapter_names == NULL || w->adapter_hash == NULL ||
        (n > 0 && (zipf_init(&z, n, l->zipf) != 0 ||
                   kmap_init(&m, w->n_reqs) != 0))) {
        free(z.cdf);
        kmap_free(&m);
        return sim_errf(err, "out of memory (adapters)");
    }
    for (uint32_t a = 1; a <= n; a++) {
        char *name = w->adapter_names + (size_t)a * SIM_ADAPTER_NAME;
        snprintf(name, SIM_ADAPTER_NAME, "lora-%04u", a);
        w->adapter_hash[a] = lr_name_hash(name, strlen(name));
    }
    double mtot = 0;
    for (uint32_t k = 0; k < l->n_models; k++)
        mtot += l->model_w[k];
    struct sim_rng rng;
    sim_rng_seed(&rng, seed ^ 0x6c7273696d6c6f72ull); /* "lrsimlor" */
    for (size_t i = 0; i < w->n_reqs; i++) {
        struct sim_req *q = &w->reqs[i];
        uint32_t a = 0;
        int fresh;
        if (n > 0 && l->by == SIM_ADAPTER_BY_PROMPT) {
            /* the prompt's rank + 1, or 0: the base model */
            uint64_t key = w->segs[q->seg_first].seed;
            uint32_t *v = kmap_get(&m, key, &fresh);
            if (fresh) {
                uint64_t h = sim_mix64(seed ^ sim_mix64(key ^ 0x70726f6d7074ull));
                *v = unit_of(sim_mix64(h)) < l->share
                         ? zipf_at(&z, unit_of(h)) + 1
                         : 0;
            }
            a = *v ? rotate(l, *v - 1, q->arrival_us) : 0;
        } else if (n > 0) {
            uint32_t *v = q->has_session ? kmap_get(&m, q->session, &fresh)
                                         : NULL;
            if (v == NULL || fresh) {
                double u1 = sim_rng_unit(&rng), u2 = sim_rng_unit(&rng);
                a = u2 < l->share ? rotate(l, zipf_at(&z, u1), q->arrival_us)
                                  : 0;
                if (v != NULL)
                    *v = a;
            } else {
                a = *v;
            }
        }
        q->adapter = a;
        q->model = 0;
        if (l->n_models == 0)
            continue;
        if (a != 0)
            q->model = adapter_model(w, a, mtot);
        else if (q->has_session)
            q->model = draw_weighted(
                l->model_w, l->n_models, mtot,
                unit_of(sim_mix64(seed ^ sim_mix64(q->session ^ 0x6d6f64ull))));
        else
            q->model = draw_weighted(l->model_w, l->n_models, mtot,
                                     sim_rng_unit(&rng));
    }
    free(z.cdf);
    kmap_free(&m);
    return 0;
}

int
sim_models_assign(const struct sim_workload *w, uint32_t n, uint32_t *model_of)
{
    uint32_t nm = w->lora.n_models;
    if (nm == 0) {
        memset(model_of, 0, n * sizeof *model_of);
        return 0;
    }
    if (n < nm)
        return -1;
    /* quotas: in proportion, at least one each (largest remainders) */
    double tot = 0;
    for (uint32_t k = 0; k < nm; k++)
        tot += w->lora.model_w[k];
    int64_t quota[SIM_MAX_MODELS];
    double rem[SIM_MAX_MODELS];
    int64_t given = 0;
    for (uint32_t k = 0; k < nm; k++) {
        double x = (double)n * w->lora.model_w[k] / tot;
        quota[k] = (int64_t)floor(x);
        rem[k] = x - floor(x);
        if (quota[k] < 1) {
            quota[k] = 1;
            rem[k] = -1;
        }
        given += quota[k];
    }
    while (given < (int64_t)n) {
        uint32_t b = 0;
        for (uint32_t k = 1; k < nm; k++)
            if (rem[k] > rem[b])
                b = k;
        quota[b]++;
        rem[b] = -1;
        given++;
    }
    while (given > (int64_t)n) {
        uint32_t b = 0;
        for (uint32_t k = 1; k < nm; k++)
            if (quota[k] > quota[b])
                b = k;
        quota[b]--;
        given--;
    }
    /* interleaved: smooth weighted round robin over the quotas */
    int64_t cur[SIM_MAX_MODELS] = { 0 };
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = 0;
        for (uint32_t k = 0; k < nm; k++) {
            cur[k] += quota[k];
            if (cur[k] > cur[b])
                b = k;
        }
        cur[b] -= (int64_t)n;
        model_of[i] = b;
    }
    return 0;
}

void
sim_lora_describe(const struct sim_lora *l, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
#define PUT(...)                                                          \
    do {                                                                  \
        if (used < len) {                                                 \
            int w_ = snprintf(buf + used, len - used, __VA_ARGS__);       \
            if (w_ > 0)                                                   \
                used += (size_t)w_;                                       \
        }                                                                 \
    } while (0)
    if (l->n_adapters > 0) {
        PUT("%u LoRA adapters by Zipf(%g) popularity, per %s", l->n_adapters,
            l->zipf, l->by == SIM_ADAPTER_BY_PROMPT ? "prompt" : "request");
        if (l->share < 1)
            PUT(", %.0f%% of the requests (the rest: the base model)",
                100 * l->share);
        if (l->shift_s > 0)
            PUT(", the ranking rotating every %g s", l->shift_s);
    }
    uint32_t nm = l->n_models < SIM_MAX_MODELS ? l->n_models : SIM_MAX_MODELS;
    if (nm > 0) {
        PUT("%s%u model%s", used ? "; " : "", nm, nm == 1 ? "" : "s");
        for (uint32_t k = 0; k < nm; k++)
            PUT("%s%s", k ? ", " : " (", model_names[k]);
        for (uint32_t k = 0; k < nm; k++)
            PUT("%s%g", k ? ":" : ") at rates ", l->model_w[k]);
        PUT(", each on its own instances");
    }
#undef PUT
}
