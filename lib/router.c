/* lr_router: one index, one ring, one load tracker and every policy on one
 * code path.
 *
 * route() runs in four steps, and only the last one changes anything:
 *
 *   1. validate the request; hash its blocks once (kbuf);
 *   2. match the prompt against the index without touching recency, and
 *      read every routable instance's load into `cv` (one entry per
 *      routable instance, in id order);
 *   3. the policy picks an entry of `cv` (pure, apart from random draws);
 *   4. unless a dry run: learn the prompt for the chosen instance (the one
 *      step that can fail, atomically, with LR_ENOMEM), then record the
 *      dispatch (cannot fail: id and room were checked in step 1), then
 *      advance per-policy state (cursor, hotness window).
 *
 * A mutex serializes every public call on a router.
 *
 * Policy notes (the sources' own rules; docs/router.md has the table):
 * - "in flight" is the router's count of requests dispatched and not ended;
 *   the scraped running/waiting only enter least-load.
 * - Predicted times use the instance class's prefill rate:
 *   TTFT ~ (queued uncached prefill tokens + this request's uncached
 *   tokens) / rate.
 * - Ties break by a draw from the router's generator, so a fleet at low
 *   concurrency does not pile onto the lowest id. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common.h"
#include "index.h"
#include "learner.h"
#include "libroute/lr_ring.h"
#include "libroute/lr_router.h"
#include "load.h"
#include "lr_hash.h"
#include "ring.h"
#include "router.h"
#include "vllm.h"

#define NONE LR_INSTANCE_NONE
#define NAME_MAX_LEN 255u
#define SEED_SESSION 0x4c5253455353494full /* "LRSESSIO" */
#define SEED_NAMES 0x4c524e414d455331ull   /* "LRNAMES1" */
#define DEFAULT_RATE 8000.0
#define DECODE_STALL_NS 3000000000ull /* DualMap: no prefill for 3 s */

struct rinst {
    char *name;
    uint32_t name_len;
    uint8_t live;
    uint8_t draining;
};

/* One routable instance as a policy sees it during one route(). */
struct cand {
    uint32_t id;
    uint32_t cached; /* expected cached tokens there */
    uint32_t inflight;
    uint32_t prefix_caching;
    double load; /* least-load figure */
    uint64_t prefill, queued_tokens, prompt_tokens, kv;
    double rate;    /* class prefill tokens/s */
    double rtt_ms;  /* EWMA or the initial RTT */
    double stall_s; /* DualMap decode-bottleneck time */
    double score;
    /* Lodestar's features */
    uint32_t cls, queued, running, waiting;
    uint64_t decode;
    double kv_use;
};

/* Lodestar: when each instance last took a route through a prefix, for
 * the decayed hit ratio (direct-mapped; a collision forgets). */
#define FRESH_SLOTS 16384u
#define FRESH_HALF_LIFE_S 15.0
#define FRESH_MAX_BOUNDARIES 16u
#define F LR_LODESTAR_FEATURES
struct fresh {
    uint64_t tag; /* 0: empty */
    uint64_t ns;
};

/* DualMap's hotness window: the last W requests' prefix keys at each key
 * depth, with a count and a hot flag per key (open addressing). */
struct hot_ent {
    uint64_t key;
    uint32_t count; /* 0: empty */
    uint32_t hot;
};

struct gorgo {
    double w_rtt, w_queue;     /* in service */
    double inc_rtt, inc_queue; /* incumbent while a trial runs */
    double sigma;
    double f_inc; /* incumbent's p95, seconds */
    int phase;    /* 0: measuring the incumbent, 1: trial */
    uint32_t trial_samples;
    uint32_t since_hop;
    uint8_t outcomes, n_outcomes; /* last 8 trial results, bit = success */
    double win[128];
    uint32_t win_n, win_pos;
};

struct lr_router {
    struct lr__mem mem;
    pthread_mutex_t mu;
    struct lr__rng rng;
    lr_policy policy;
    uint32_t max_inst;
    uint32_t block_tokens;
    lr_index *ix;
    lr_ring *ring;
    lr_load *ld;
    struct rinst *inst;
    uint32_t n_inst;
    uint32_t *names; /* id + 1; 0 = empty */
    uint32_t names_mask;
    uint32_t *act; /* routable ids, ascending */
    uint32_t n_act;
    double *init_rtt_ms; /* per id: RTT given at add */
    double rate[LR_LOAD_MAX_CLASSES];
    double param[LR_PARAM_COUNT];
    /* per-route scratch, sized at create */
    struct cand *cv;
    double *val; /* one figure per cv entry, for the policies and plans */
    lr_index_hit *hits;
    uint32_t *cached_by_id;
    uint64_t *kbuf;
    size_t kbuf_cap;
    /* policy state */
    uint32_t rr_last;
    struct hot_ent *hot;
    uint32_t hot_mask;
    uint64_t *hot_win; /* window * depth keys, 0 = none */
    uint32_t hot_w, hot_depth, hot_pos, hot_filled;
    struct gorgo g;
    /* Lodestar, made at the first switch to it. `learner` is read without
     * the mutex by lr_router_learn_step(), hence atomic; it never changes
     * once set. */
    lr_learner_options lopt;
    lr_mlp_options lmo;
    bool has_lmo;
    _Atomic(lr_learner *) learner;
    uint32_t max_req;
    float *rows;     /* max_inst x F: the scored candidates, packed */
    float *pred;     /* max_inst: their predicted rewards */
    uint32_t *cidx;  /* max_inst: their cv indices */
    float *rq_feat;  /* max_req x (F + 1): features, prediction per slot */
    uint8_t *rq_has; /* max_req: a sample waits for its first token */
    struct fresh *fresh;
    float last_pred; /* this route's prediction for its choice, or NaN */
    lr_router_stats st;
};

/* ---- names and tables ----------------------------------------------------------- */

static const char *const policy_names[LR_POLICY_COUNT] = {
    "random",
    "round-robin",
    "least-request",
    "least-load",
    "session-affinity",
    "consistent-hash",
    "prefix-cache",
    "prefix-cache-and-load",
    "sglang-cache-aware",
    "preble",
    "min-ttft",
    "dynamo",
    "dualmap",
    "gorgo",
    "ranvier",
    "lodestar",
};

const char *
lr_policy_name(lr_policy policy)
{
    if ((unsigned)policy >= LR_POLICY_COUNT)
        return NULL;
    return policy_names[policy];
}

lr_status
lr_policy_from_name(const char *name, lr_policy *out)
{
    LR_RETURN_IF(name == NULL || out == NULL, LR_EINVAL);
    for (int i = 0; i < LR_POLICY_COUNT; i++) {
        if (strcmp(name, policy_names[i]) == 0) {
            *out = (lr_policy)i;
            return LR_OK;
        }
    }
    return LR_ENOENT;
}

static bool
policy_supported(int32_t p)
{
    return p >= 0 && p < LR_POLICY_COUNT;
}

static const char *const reason_names[] = {
    "none",       "random",   "round-robin", "least-loaded",
    "session",    "hash",     "prefix-hit",  "load-override",
    "slo-switch", "fallback", "min-cost",    "sampled",
    "k-filter",   "explore",  "cold-start",  "ood",
};

const char *
lr_reason_name(lr_reason reason)
{
    if ((unsigned)reason >= sizeof reason_names / sizeof reason_names[0])
        return NULL;
    return reason_names[reason];
}

struct pdef {
    double lo, hi, def;
    bool integer;
};

static const struct pdef pdefs[LR_PARAM_COUNT] = {
    [LR_PARAM_PREFIX_MIN_RATIO] = { 0, 1, 0.5, false },
    [LR_PARAM_BOUNDED_LOAD] = { 1, 100, 1.25, false },
    [LR_PARAM_AIBRIX_IMBALANCE] = { 0, 1e6, 8, false },
    [LR_PARAM_AIBRIX_STDDEV] = { 0, 100, 1, false },
    [LR_PARAM_SGLANG_ABS] = { 0, 1e6, 64, false },
    [LR_PARAM_SGLANG_REL] = { 1, 1e6, 1.5, false },
    [LR_PARAM_SGLANG_MIN_RATIO] = { 0, 1, 0.3, false },
    [LR_PARAM_PREBLE_HIT] = { 0, 1, 0.5, false },
    [LR_PARAM_DYNAMO_OVERLAP] = { 0, 1000, 1, false },
    [LR_PARAM_DYNAMO_TEMPERATURE] = { 0, 100, 0, false },
    [LR_PARAM_TTFT_SLO_S] = { 0.001, 3600, 5, false },
    [LR_PARAM_DUALMAP_KEY_TOKENS] = { 1, 1 << 20, 512, true },
    [LR_PARAM_DUALMAP_MAX_KEY_BLOCKS] = { 1, 64, 16, true },
    [LR_PARAM_DUALMAP_WINDOW] = { 16, 1 << 16, 1024, true },
    [LR_PARAM_GORGO_W_RTT] = { 0, 10, 0.5, false },
    [LR_PARAM_GORGO_W_QUEUE] = { 0, 10, 0.1, false },
    [LR_PARAM_GORGO_SIGMA] = { 0, 4, 0.5, false },
    [LR_PARAM_GORGO_FROZEN] = { 0, 1, 0, true },
    [LR_PARAM_GORGO_W_RTT_MAX] = { 0.05, 10, 2.0, false },
    [LR_PARAM_GORGO_W_QUEUE_MIN] = { 0, 0.5, 0.05, false },
    [LR_PARAM_RANVIER_PRESSURE] = { 0, 1000, 2, false },
    [LR_PARAM_SESSION_TOKENS] = { 1, 1 << 20, 256, true },
    [LR_PARAM_STATS_MAX_AGE_S] = { 0.001, 86400, 10, false },
    [LR_PARAM_DEFAULT_OUTPUT_TOKENS] = { 0, 1 << 20, 128, true },
    [LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN] = { 0, 1, 0, true },
    [LR_PARAM_LODESTAR_EPSILON] = { 0, 1, 0.1, false },
    [LR_PARAM_LODESTAR_TIE] = { 0, 10, 0.1, false },
    [LR_PARAM_LODESTAR_KV_THRESHOLD] = { 0, 1, 0.8, false },
    [LR_PARAM_LODESTAR_KFILTER_TOKENS] = { 0, 1 << 24, 100, true },
    [LR_PARAM_LODESTAR_OOD] = { 0, 1, 1, true },
    [LR_PARAM_LODESTAR_FALLBACK] = { 0, LR_POLICY_LODESTAR - 1,
                                     LR_POLICY_PREFIX_CACHE_AND_LOAD, true },
    [LR_PARAM_LODESTAR_CANDIDATES] = { 0, LR_ROUTER_MAX_INSTANCES, 0, true },
    [LR_PARAM_LODESTAR_MAX_TTFT_S] = { 0.001, 86400, 15, false },
};

#define P(r, k) ((r)->param[LR_PARAM_##k])

lr_bounds
lr_router_param_bounds(lr_param key)
{
    lr_bounds b = { LR_ENOTSUP, 0, 0, 0 };
    if ((unsigned)key >= LR_PARAM_COUNT)
        return b;
    b.status = LR_OK;
    b.lo = pdefs[key].lo;
    b.hi = pdefs[key].hi;
    b.def = pdefs[key].def;
    return b;
}

/* ---- init helpers --------------------------------------------------------------- */

void
lr_router_options_init(lr_router_options *opt)
{
    if (opt == NULL)
        return;
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->policy = LR_POLICY_PREFIX_CACHE_AND_LOAD;
    opt->max_instances = 1024;
    opt->max_requests = 65536;
    opt->index_capacity_blocks = 1u << 20;
    opt->block_tokens = 16;
    opt->index_ttl_ns = 3600ull * 1000000000ull;
    opt->ring_vnodes = 160;
}

void
lr_instance_spec_init(lr_instance_spec *s)
{
    if (s == NULL)
        return;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->prefix_caching = 1;
}

void
lr_class_spec_init(lr_class_spec *s)
{
    if (s == NULL)
        return;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->prefill_tokens_per_s = DEFAULT_RATE;
}

void
lr_request_init(lr_request *q)
{
    if (q == NULL)
        return;
    memset(q, 0, sizeof *q);
    q->struct_size = sizeof *q;
}

void
lr_decision_init(lr_decision *d)
{
    if (d == NULL)
        return;
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    d->instance = NONE;
    d->alt_instance = NONE;
}

void
lr_router_stats_init(lr_router_stats *s)
{
    if (s == NULL)
        return;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
}

/* ---- lock ---------------------------------------------------------------------- */

static inline void
lock(const lr_router *r)
{
    pthread_mutex_lock(&((lr_router *)r)->mu);
}

static inline void
unlock(const lr_router *r)
{
    pthread_mutex_unlock(&((lr_router *)r)->mu);
}

/* ---- hotness window (DualMap) ---------------------------------------------------- */

static void
hot_free(struct lr__mem *m, struct hot_ent *hot, uint32_t mask, uint64_t *win,
         uint32_t w, uint32_t depth)
{
    if (hot != NULL)
        lr__free(m, hot, ((size_t)mask + 1) * sizeof *hot);
    if (win != NULL)
        lr__free(m, win, (size_t)w * depth * sizeof *win);
}

/* (Re)build the window for `w` requests of `depth` keys; LR_ENOMEM leaves
 * the old one in place. The counts start again from empty. */
static lr_status
hot_setup(lr_router *r, uint32_t w, uint32_t depth)
{
    uint32_t size = 16;
    while (size < 2u * w * depth)
        size <<= 1;
    struct hot_ent *hot = lr__calloc(&r->mem, size, sizeof *hot);
    uint64_t *win = lr__calloc(&r->mem, (size_t)w * depth, sizeof *win);
    if (hot == NULL || win == NULL) {
        hot_free(&r->mem, hot, size - 1, win, w, depth);
        return LR_ENOMEM;
    }
    hot_free(&r->mem, r->hot, r->hot_mask, r->hot_win, r->hot_w, r->hot_depth);
    r->hot = hot;
    r->hot_mask = size - 1;
    r->hot_win = win;
    r->hot_w = w;
    r->hot_depth = depth;
    r->hot_pos = 0;
    r->hot_filled = 0;
    return LR_OK;
}

static inline uint32_t
hot_home(const lr_router *r, uint64_t key)
{
    return (uint32_t)lr__mix64(key, SEED_NAMES) & r->hot_mask;
}

static struct hot_ent *
hot_find(const lr_router *r, uint64_t key)
{
    for (uint32_t i = hot_home(r, key);; i = (i + 1) & r->hot_mask) {
        struct hot_ent *e = &r->hot[i];
        if (e->count == 0)
            return NULL;
        if (e->key == key)
            return e;
    }
}

/* Hot: share above 2/n; once hot, stays hot until below 1/n. */
static void
hot_update(lr_router *r, struct hot_ent *e)
{
    double n = r->n_act > 0 ? (double)r->n_act : 1.0;
    double filled = r->hot_filled > 0 ? (double)r->hot_filled : 1.0;
    double share = (double)e->count / filled;
    if (!e->hot && share > 2.0 / n)
        e->hot = 1;
    else if (e->hot && share < 1.0 / n)
        e->hot = 0;
}

static void
hot_add(lr_router *r, uint64_t key)
{
    uint32_t i = hot_home(r, key);
    for (;; i = (i + 1) & r->hot_mask) {
        struct hot_ent *e = &r->hot[i];
        if (e->count == 0) {
            e->key = key;
            e->count = 1;
            e->hot = 0;
            hot_update(r, e);
            return;
        }
        if (e->key == key) {
            e->count++;
            hot_update(r, e);
            return;
        }
    }
}

static void
hot_del(lr_router *r, uint64_t key)
{
    uint32_t mask = r->hot_mask;
    uint32_t i = hot_home(r, key);
    while (r->hot[i].key != key || r->hot[i].count == 0)
        i = (i + 1) & mask;
    if (--r->hot[i].count > 0) {
        hot_update(r, &r->hot[i]);
        return;
    }
    for (uint32_t j = i;;) {
        j = (j + 1) & mask;
        struct hot_ent *e = &r->hot[j];
        if (e->count == 0)
            break;
        uint32_t h = hot_home(r, e->key);
        if (((j - h) & mask) >= ((j - i) & mask)) {
            r->hot[i] = *e;
            i = j;
        }
    }
    r->hot[i].count = 0;
}

/* Record one request's key at each depth (0 ends the list). */
static void
hot_record(lr_router *r, const uint64_t *keys, uint32_t n)
{
    uint64_t *slot = &r->hot_win[(size_t)r->hot_pos * r->hot_depth];
    if (r->hot_filled == r->hot_w) {
        for (uint32_t d = 0; d < r->hot_depth && slot[d] != 0; d++)
            hot_del(r, slot[d]);
    } else {
        r->hot_filled++;
    }
    for (uint32_t d = 0; d < r->hot_depth; d++) {
        slot[d] = d < n ? keys[d] : 0;
        if (slot[d] != 0)
            hot_add(r, slot[d]);
    }
    r->hot_pos = (r->hot_pos + 1) % r->hot_w;
}

/* ---- Lodestar's state -------------------------------------------------------------- */

static void
lodestar_free(lr_router *r)
{
    struct lr__mem *m = &r->mem;
    size_t ni = r->max_inst, nr = r->max_req;
    lr_learner_destroy(atomic_load(&r->learner));
    atomic_store(&r->learner, NULL);
    lr__free(m, r->rows, ni * F * sizeof(float));
    lr__free(m, r->pred, ni * sizeof(float));
    lr__free(m, r->cidx, ni * sizeof(uint32_t));
    lr__free(m, r->rq_feat, nr * (F + 1) * sizeof(float));
    lr__free(m, r->rq_has, nr);
    lr__free(m, r->fresh, FRESH_SLOTS * sizeof(struct fresh));
    r->rows = r->pred = r->rq_feat = NULL;
    r->cidx = NULL;
    r->rq_has = NULL;
    r->fresh = NULL;
}

/* Make the learner and the per-route and per-request buffers; on failure
 * nothing is kept. Called with the mutex held (or before the router is
 * shared). */
static lr_status
lodestar_setup(lr_router *r)
{
    if (atomic_load(&r->learner) != NULL)
        return LR_OK;
    struct lr__mem *m = &r->mem;
    size_t ni = r->max_inst, nr = r->max_req;
    r->rows = lr__alloc(m, ni * F * sizeof(float));
    r->pred = lr__alloc(m, ni * sizeof(float));
    r->cidx = lr__alloc(m, ni * sizeof(uint32_t));
    r->rq_feat = lr__alloc(m, nr * (F + 1) * sizeof(float));
    r->rq_has = lr__calloc(m, nr, 1);
    r->fresh = lr__calloc(m, FRESH_SLOTS, sizeof(struct fresh));
    lr_status st = LR_OK;
    if (r->rows == NULL || r->pred == NULL || r->cidx == NULL ||
        r->rq_feat == NULL || r->rq_has == NULL || r->fresh == NULL)
        st = LR_ENOMEM;
    lr_learner *l = NULL;
    if (st == LR_OK) {
        lr_learner_options lo = r->lopt;
        lo.allocator = &r->mem.a;
        lo.n_features = F;
        lo.mlp = r->has_lmo ? &r->lmo : NULL;
        st = lr_learner_create(&lo, &l);
    }
    if (st != LR_OK) {
        lodestar_free(r);
        return st;
    }
    atomic_store(&r->learner, l);
    return LR_OK;
}

/* ---- create / destroy ------------------------------------------------------------- */

static void
router_free(lr_router *r)
{
    struct lr__mem *m = &r->mem;
    if (r->inst != NULL) {
        for (uint32_t i = 0; i < r->max_inst; i++)
            if (r->inst[i].live)
                lr__free(m, r->inst[i].name, r->inst[i].name_len + 1);
        lr__free(m, r->inst, (size_t)r->max_inst * sizeof *r->inst);
    }
    lr__free(m, r->names, ((size_t)r->names_mask + 1) * sizeof *r->names);
    lr__free(m, r->act, (size_t)r->max_inst * sizeof *r->act);
    lr__free(m, r->init_rtt_ms, (size_t)r->max_inst * sizeof(double));
    lr__free(m, r->cv, (size_t)r->max_inst * sizeof *r->cv);
    lr__free(m, r->val, (size_t)r->max_inst * sizeof *r->val);
    lr__free(m, r->hits, (size_t)r->max_inst * sizeof *r->hits);
    lr__free(m, r->cached_by_id, (size_t)r->max_inst * sizeof(uint32_t));
    lr__free(m, r->kbuf, r->kbuf_cap * sizeof(uint64_t));
    hot_free(m, r->hot, r->hot_mask, r->hot_win, r->hot_w, r->hot_depth);
    lodestar_free(r);
    lr_index_destroy(r->ix);
    lr_ring_destroy(r->ring);
    lr_load_destroy(r->ld);
    pthread_mutex_destroy(&r->mu);
    struct lr__mem mm = *m;
    lr__free(&mm, r, sizeof *r);
}

static void
gorgo_reset(lr_router *r)
{
    struct gorgo *g = &r->g;
    g->w_rtt = g->inc_rtt = P(r, GORGO_W_RTT);
    g->w_queue = g->inc_queue = P(r, GORGO_W_QUEUE);
    g->sigma = P(r, GORGO_SIGMA);
    g->phase = 0;
    g->trial_samples = 0;
    g->since_hop = 0;
    g->outcomes = g->n_outcomes = 0;
    g->win_n = g->win_pos = 0;
    g->f_inc = 0;
}

lr_status
lr_router_create(const lr_router_options *opt, lr_router **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    lr_router_options o;
    lr_router_options_init(&o);
    if (opt != NULL) {
        lr_router_options given;
        memset(&given, 0, sizeof given);
        LR_TRY(lr__copy_sized(&given, sizeof given, opt,
                              LR_ROUTER_OPTIONS_SIZE_V1));
        o.allocator = given.allocator;
        o.seed = given.seed;
        o.policy = given.policy;
        if (given.max_instances)
            o.max_instances = given.max_instances;
        if (given.max_requests)
            o.max_requests = given.max_requests;
        if (given.index_capacity_blocks)
            o.index_capacity_blocks = given.index_capacity_blocks;
        if (given.block_tokens)
            o.block_tokens = given.block_tokens;
        if (given.index_ttl_ns)
            o.index_ttl_ns = given.index_ttl_ns;
        if (given.ring_vnodes)
            o.ring_vnodes = given.ring_vnodes;
        LR_RETURN_IF(given.flags != 0, LR_EINVAL);
        o.learner = given.learner;
    }
    LR_RETURN_IF(o.policy < 0 || o.policy >= LR_POLICY_COUNT, LR_EINVAL);
    LR_RETURN_IF(!policy_supported(o.policy), LR_ENOTSUP);
    LR_RETURN_IF(o.max_instances > LR_ROUTER_MAX_INSTANCES, LR_EINVAL);
    struct lr__mem m;
    LR_TRY(lr__mem_init(&m, o.allocator));
    lr_router *r = lr__alloc(&m, sizeof *r);
    if (r == NULL)
        return LR_ENOMEM;
    memset(r, 0, sizeof *r);
    r->mem = m;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        lr__free(&m, r, sizeof *r);
        return LR_ENOMEM;
    }
    r->policy = (lr_policy)o.policy;
    r->max_inst = o.max_instances;
    r->max_req = o.max_requests;
    r->last_pred = NAN;
    atomic_init(&r->learner, NULL);
    lr_learner_options_init(&r->lopt);
    if (o.learner != NULL) {
        lr_status lst = lr__copy_sized(&r->lopt, sizeof r->lopt, o.learner,
                                       LR_LEARNER_OPTIONS_SIZE_V1);
        if (lst == LR_OK && r->lopt.n_features != 0 && r->lopt.n_features != F)
            lst = LR_EINVAL;
        if (lst == LR_OK && r->lopt.mlp != NULL) {
            lr_mlp_options_init(&r->lmo);
            lst = lr__copy_sized(&r->lmo, sizeof r->lmo, r->lopt.mlp,
                                 LR_MLP_OPTIONS_SIZE_V1);
            r->has_lmo = true;
        }
        if (lst == LR_OK) {
            lr_learner_options chk = r->lopt;
            chk.n_features = F;
            chk.allocator = o.allocator;
            lst = lr__learner_check_options(&chk);
        }
        r->lopt.mlp = NULL;
        if (lst != LR_OK) {
            pthread_mutex_destroy(&r->mu);
            lr__free(&m, r, sizeof *r);
            return lst;
        }
    }
    r->block_tokens = o.block_tokens;
    lr__rng_seed(&r->rng, o.seed);
    for (int k = 0; k < LR_PARAM_COUNT; k++)
        r->param[k] = pdefs[k].def;
    for (unsigned c = 0; c < LR_LOAD_MAX_CLASSES; c++)
        r->rate[c] = DEFAULT_RATE;
    r->rr_last = NONE;
    gorgo_reset(r);

    lr_status st = LR_OK;
    lr_index_options io;
    lr_index_options_init(&io);
    io.allocator = o.allocator;
    io.seed = o.seed;
    io.capacity_blocks = o.index_capacity_blocks;
    io.ttl_ns = o.index_ttl_ns;
    io.block_tokens = o.block_tokens;
    io.max_instances = o.max_instances;
    lr_ring_options ro;
    lr_ring_options_init(&ro);
    ro.allocator = o.allocator;
    ro.vnodes = o.ring_vnodes;
    ro.max_instances = o.max_instances;
    lr_load_options lo;
    lr_load_options_init(&lo);
    lo.allocator = o.allocator;
    lo.max_instances = o.max_instances;
    lo.max_requests = o.max_requests;
    st = lr_index_create(&io, &r->ix);
    if (st == LR_OK)
        st = lr_ring_create(&ro, &r->ring);
    if (st == LR_OK)
        st = lr_load_create(&lo, &r->ld);
    if (st != LR_OK) {
        router_free(r);
        return st;
    }
    uint32_t nsize = 16;
    while (nsize < 2u * o.max_instances)
        nsize <<= 1;
    r->names_mask = nsize - 1;
    r->names = lr__calloc(&r->mem, nsize, sizeof *r->names);
    r->inst = lr__calloc(&r->mem, r->max_inst, sizeof *r->inst);
    r->act = lr__calloc(&r->mem, r->max_inst, sizeof *r->act);
    r->init_rtt_ms = lr__calloc(&r->mem, r->max_inst, sizeof(double));
    r->cv = lr__calloc(&r->mem, r->max_inst, sizeof *r->cv);
    r->val = lr__calloc(&r->mem, r->max_inst, sizeof *r->val);
    r->hits = lr__calloc(&r->mem, r->max_inst, sizeof *r->hits);
    r->cached_by_id = lr__calloc(&r->mem, r->max_inst, sizeof(uint32_t));
    if (r->names == NULL || r->inst == NULL || r->act == NULL ||
        r->init_rtt_ms == NULL || r->cv == NULL || r->val == NULL ||
        r->hits == NULL || r->cached_by_id == NULL) {
        router_free(r);
        return LR_ENOMEM;
    }
    st = hot_setup(r, (uint32_t)P(r, DUALMAP_WINDOW),
                   (uint32_t)P(r, DUALMAP_MAX_KEY_BLOCKS));
    if (st == LR_OK && r->policy == LR_POLICY_LODESTAR)
        st = lodestar_setup(r);
    if (st != LR_OK) {
        router_free(r);
        return st;
    }
    *out = r;
    return LR_OK;
}

void
lr_router_destroy(lr_router *r)
{
    if (r != NULL)
        router_free(r);
}

lr_status
lr_router_set_policy(lr_router *r, lr_policy policy)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    LR_RETURN_IF((unsigned)policy >= LR_POLICY_COUNT, LR_EINVAL);
    LR_RETURN_IF(!policy_supported(policy), LR_ENOTSUP);
    lock(r);
    lr_status st = LR_OK;
    if (policy == LR_POLICY_LODESTAR)
        st = lodestar_setup(r);
    if (st == LR_OK)
        r->policy = policy;
    unlock(r);
    return st;
}

int32_t
lr_router_policy(const lr_router *r)
{
    if (r == NULL)
        return -1;
    lock(r);
    int32_t p = r->policy;
    unlock(r);
    return p;
}

/* ---- instances ------------------------------------------------------------------ */

static inline uint32_t
name_home(const lr_router *r, const char *name, size_t len)
{
    return (uint32_t)lr__hash(name, len, SEED_NAMES) & r->names_mask;
}

/* Table position holding `name`, or the empty slot where it would go;
 * *found says which. */
static uint32_t
name_slot(const lr_router *r, const char *name, size_t len, bool *found)
{
    for (uint32_t i = name_home(r, name, len);; i = (i + 1) & r->names_mask) {
        uint32_t s = r->names[i];
        if (s == 0) {
            *found = false;
            return i;
        }
        const struct rinst *in = &r->inst[s - 1];
        if (in->name_len == len && memcmp(in->name, name, len) == 0) {
            *found = true;
            return i;
        }
    }
}

static void
name_del(lr_router *r, uint32_t i)
{
    uint32_t mask = r->names_mask;
    for (uint32_t j = i;;) {
        j = (j + 1) & mask;
        uint32_t s = r->names[j];
        if (s == 0)
            break;
        const struct rinst *in = &r->inst[s - 1];
        uint32_t h = name_home(r, in->name, in->name_len);
        if (((j - h) & mask) >= ((j - i) & mask)) {
            r->names[i] = s;
            i = j;
        }
    }
    r->names[i] = 0;
}

static void
act_insert(lr_router *r, uint32_t id)
{
    uint32_t k = r->n_act;
    while (k > 0 && r->act[k - 1] > id) {
        r->act[k] = r->act[k - 1];
        k--;
    }
    r->act[k] = id;
    r->n_act++;
}

static void
act_remove(lr_router *r, uint32_t id)
{
    uint32_t k = 0;
    while (k < r->n_act && r->act[k] != id)
        k++;
    if (k == r->n_act)
        return;
    memmove(&r->act[k], &r->act[k + 1], (r->n_act - k - 1) * sizeof *r->act);
    r->n_act--;
}

static bool
valid_name(const char *name, size_t *len)
{
    if (name == NULL)
        return false;
    size_t n = 0;
    while (n <= NAME_MAX_LEN && name[n] != '\0')
        n++;
    *len = n;
    return n >= 1 && n <= NAME_MAX_LEN;
}

static lr_status
add_locked(lr_router *r, const lr_instance_spec *s, size_t len, uint32_t *id)
{
    bool found;
    uint32_t slot = name_slot(r, s->name, len, &found);
    LR_RETURN_IF(found, LR_EEXIST);
    LR_RETURN_IF(r->n_inst >= r->max_inst, LR_ELIMIT);
    uint32_t n = 0;
    while (r->inst[n].live)
        n++;
    char *copy = lr__alloc(&r->mem, len + 1);
    if (copy == NULL)
        return LR_ENOMEM;
    memcpy(copy, s->name, len);
    copy[len] = '\0';
    lr_status st = lr_ring_add(r->ring, copy, n);
    if (st != LR_OK) {
        lr__free(&r->mem, copy, len + 1);
        return st;
    }
    st = lr_load_add_instance(r->ld, n, s->instance_class, s->prefix_caching);
    if (st != LR_OK) { /* cannot happen: n < max_inst and free */
        lr_ring_remove(r->ring, n);
        lr__free(&r->mem, copy, len + 1);
        return st;
    }
    /* The initial RTT is not a probe: it serves (init_rtt_ms, see gather)
     * until the first probe, which then sets the EWMA. */
    struct rinst *in = &r->inst[n];
    in->name = copy;
    in->name_len = (uint32_t)len;
    in->live = 1;
    in->draining = 0;
    r->init_rtt_ms[n] = (double)s->rtt_ns / 1e6;
    r->names[slot] = n + 1;
    r->n_inst++;
    act_insert(r, n);
    *id = n;
    return LR_OK;
}

lr_status
lr_router_add_instance(lr_router *r, const lr_instance_spec *spec, uint32_t *id)
{
    LR_RETURN_IF(r == NULL || spec == NULL || id == NULL, LR_EINVAL);
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    LR_TRY(lr__copy_sized(&s, sizeof s, spec, LR_INSTANCE_SPEC_SIZE_V1));
    size_t len;
    LR_RETURN_IF(!valid_name(s.name, &len), LR_EINVAL);
    LR_RETURN_IF(s.instance_class >= LR_LOAD_MAX_CLASSES, LR_EINVAL);
    LR_RETURN_IF(s.prefix_caching != 0 && s.prefix_caching != 1, LR_EINVAL);
    LR_RETURN_IF(s.rtt_ns > LR_LOAD_MAX_RTT_NS, LR_ERANGE);
    lock(r);
    lr_status st = add_locked(r, &s, len, id);
    unlock(r);
    return st;
}

lr_status
lr_router_find_instance(const lr_router *r, const char *name, uint32_t *id)
{
    size_t len;
    LR_RETURN_IF(r == NULL || id == NULL || !valid_name(name, &len), LR_EINVAL);
    lock(r);
    bool found;
    uint32_t slot = name_slot(r, name, len, &found);
    if (found)
        *id = r->names[slot] - 1;
    unlock(r);
    return found ? LR_OK : LR_ENOENT;
}

static struct rinst *
inst_of(const lr_router *r, uint32_t id)
{
    if (id >= r->max_inst || !r->inst[id].live)
        return NULL;
    return &r->inst[id];
}

lr_status
lr_router_drain_instance(lr_router *r, uint32_t id, int32_t draining)
{
    LR_RETURN_IF(r == NULL || (draining != 0 && draining != 1), LR_EINVAL);
    lock(r);
    lr_status st = LR_OK;
    struct rinst *in = inst_of(r, id);
    if (in == NULL) {
        st = LR_ENOENT;
    } else if (draining && !in->draining) {
        lr_ring_remove(r->ring, id);
        act_remove(r, id);
        in->draining = 1;
    } else if (!draining && in->draining) {
        st = lr_ring_add(r->ring, in->name, id);
        if (st == LR_OK) {
            act_insert(r, id);
            in->draining = 0;
        }
    }
    unlock(r);
    return st;
}

lr_status
lr_router_remove_instance(lr_router *r, uint32_t id)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    struct rinst *in = inst_of(r, id);
    if (in == NULL) {
        unlock(r);
        return LR_ENOENT;
    }
    if (!in->draining) {
        lr_ring_remove(r->ring, id);
        act_remove(r, id);
    }
    lr_index_remove_instance(r->ix, id); /* LR_ENOENT if it never learned */
    lr_load_remove_instance(r->ld, id);
    bool found;
    uint32_t slot = name_slot(r, in->name, in->name_len, &found);
    if (LR_ALWAYS(found))
        name_del(r, slot);
    lr__free(&r->mem, in->name, in->name_len + 1);
    memset(in, 0, sizeof *in);
    r->n_inst--;
    /* rr_last stays: the cursor is an id position, not a reference */
    unlock(r);
    return LR_OK;
}

uint32_t
lr_router_instance_count(const lr_router *r)
{
    if (r == NULL)
        return 0;
    lock(r);
    uint32_t n = r->n_inst;
    unlock(r);
    return n;
}

lr_status
lr_router_set_class(lr_router *r, uint32_t cls, const lr_class_spec *spec)
{
    LR_RETURN_IF(r == NULL || spec == NULL, LR_EINVAL);
    LR_RETURN_IF(cls >= LR_LOAD_MAX_CLASSES, LR_EINVAL);
    lr_class_spec s;
    lr_class_spec_init(&s);
    LR_TRY(lr__copy_sized(&s, sizeof s, spec, LR_CLASS_SPEC_SIZE_V1));
    LR_RETURN_IF(isnan(s.prefill_tokens_per_s), LR_EINVAL);
    LR_RETURN_IF(
        !(s.prefill_tokens_per_s >= 1 && s.prefill_tokens_per_s <= 1e9),
        LR_ERANGE);
    lock(r);
    r->rate[cls] = s.prefill_tokens_per_s;
    unlock(r);
    return LR_OK;
}

/* ---- telemetry --------------------------------------------------------------------- */

lr_status
lr_router_set_stats(lr_router *r, uint32_t id, const lr_engine_stats *stats)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = lr_load_set_stats(r->ld, id, stats);
    unlock(r);
    return st;
}

lr_status
lr_router_observe_rtt(lr_router *r, uint32_t id, uint64_t rtt_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = lr_load_observe_rtt(r->ld, id, rtt_ns);
    unlock(r);
    return st;
}

lr_status
lr_router_instance_load(const lr_router *r, uint32_t id, lr_load_snapshot *out)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = lr_load_get(r->ld, id, out);
    unlock(r);
    return st;
}

/* ---- route: gathering -------------------------------------------------------------- */

static lr_status
scratch_keys(lr_router *r, size_t n)
{
    if (n <= r->kbuf_cap)
        return LR_OK;
    size_t want = n < 256 ? 256 : n + n / 2;
    uint64_t *p = lr__realloc(&r->mem, r->kbuf, r->kbuf_cap * sizeof *p,
                              want * sizeof *p);
    if (p == NULL)
        return LR_ENOMEM;
    r->kbuf = p;
    r->kbuf_cap = want;
    return LR_OK;
}

static bool
policy_matches(lr_policy p)
{
    switch (p) {
    case LR_POLICY_PREFIX_CACHE:
    case LR_POLICY_PREFIX_CACHE_AND_LOAD:
    case LR_POLICY_SGLANG_CACHE_AWARE:
    case LR_POLICY_PREBLE:
    case LR_POLICY_MIN_TTFT:
    case LR_POLICY_DYNAMO:
    case LR_POLICY_DUALMAP:
    case LR_POLICY_GORGO:
    case LR_POLICY_RANVIER:
    case LR_POLICY_LODESTAR:
        return true;
    default:
        return false;
    }
}

/* Fill cv[0..n_act) with every routable instance's state. */
static void
gather(lr_router *r, uint64_t now_ns, const uint32_t *cached_by_id,
       bool have_match)
{
    uint64_t max_age = (uint64_t)(P(r, STATS_MAX_AGE_S) * 1e9);
    for (uint32_t k = 0; k < r->n_act; k++) {
        uint32_t id = r->act[k];
        struct cand *c = &r->cv[k];
        struct lr__inst_view v;
        if (LR_NEVER(lr__load_view(r->ld, id, &v) != LR_OK))
            memset(&v, 0, sizeof v);
        c->id = id;
        c->prefix_caching = (uint32_t)v.prefix_caching;
        c->cached = have_match && v.prefix_caching ? cached_by_id[id] : 0;
        c->inflight = v.inflight;
        bool fresh = v.has_stats && now_ns >= v.scraped_ns &&
                     now_ns - v.scraped_ns <= max_age;
        c->load = (double)v.inflight +
                  (fresh ? (double)v.running + (double)v.waiting : 0.0);
        c->prefill = v.prefill;
        c->queued_tokens = v.queued_tokens;
        c->prompt_tokens = v.prompt;
        c->kv = v.kv;
        c->rate = r->rate[v.cls];
        c->rtt_ms = v.has_rtt ? v.rtt_ns / 1e6 : r->init_rtt_ms[id];
        c->cls = v.cls;
        c->queued = v.queued;
        c->decode = v.decode;
        c->running = fresh ? v.running : 0;
        c->waiting = fresh ? v.waiting : 0;
        c->kv_use = fresh ? v.kv_use : 0;
        /* DualMap's decode bottleneck: a queue that saw no first token for
         * 3 s is stuck behind decoding; count the wait. */
        c->stall_s = 0;
        if (v.queued > 0) {
            uint64_t since = v.last_first_ns > v.queue_since_ns
                                 ? v.last_first_ns
                                 : v.queue_since_ns;
            if (now_ns > since && now_ns - since > DECODE_STALL_NS)
                c->stall_s = (double)(now_ns - since) / 1e9;
        }
        c->score = NAN;
    }
}

/* ---- route: choosing ----------------------------------------------------------------- */

/* Index of the least val[] among cv entries with ok[] (NULL: all), ties
 * broken by a uniform draw (reservoir). */
static uint32_t
pick_min(lr_router *r, const double *val, uint32_t n, const bool *ok)
{
    uint32_t best = NONE, ties = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (ok != NULL && !ok[k])
            continue;
        if (best == NONE || val[k] < val[best]) {
            best = k;
            ties = 1;
        } else if (val[k] == val[best]) {
            ties++;
            if (lr__rng_below(&r->rng, ties) == 0)
                best = k;
        }
    }
    return best;
}

struct choice {
    uint32_t k; /* index into cv */
    int32_t reason;
    double cost;
    uint32_t alt;      /* instance id or NONE */
    lr_policy decider; /* the policy that chose (Lodestar's fallback) */
};

static double
ttft_est(const struct cand *c, uint32_t prompt)
{
    double uncached = (double)(prompt - c->cached);
    return ((double)c->prefill + uncached) / c->rate + c->stall_s;
}

static uint32_t
best_cached(const lr_router *r)
{
    uint32_t b = 0;
    for (uint32_t k = 0; k < r->n_act; k++)
        if (r->cv[k].cached > b)
            b = r->cv[k].cached;
    return b;
}

/* Least in flight among the entries holding `best` cached tokens. Every
 * entry's score becomes its negated hit, the figure cache policies rank by. */
static uint32_t
least_among_best(lr_router *r, double *val, uint32_t best)
{
    for (uint32_t k = 0; k < r->n_act; k++) {
        struct cand *c = &r->cv[k];
        val[k] = c->cached == best ? (double)c->inflight : INFINITY;
        c->score = -(double)c->cached;
    }
    return pick_min(r, val, r->n_act, NULL);
}

static uint32_t
least_inflight(lr_router *r, double *val)
{
    for (uint32_t k = 0; k < r->n_act; k++)
        val[k] = r->cv[k].score = (double)r->cv[k].inflight;
    return pick_min(r, val, r->n_act, NULL);
}

static uint32_t
cv_index(const lr_router *r, uint32_t id)
{
    uint32_t lo = 0, hi = r->n_act;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->act[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_act && r->act[lo] == id ? lo : NONE;
}

/* Key of the prompt's first `tokens` tokens (session and consistent hash):
 * the chained block key when those tokens are whole blocks, else a hash of
 * the tokens (a block key of fewer tokens would ignore the tail). */
static uint64_t
prefix_key(const lr_router *r, const lr_request *q, size_t nk, uint32_t tokens)
{
    size_t m = q->n_tokens < tokens ? q->n_tokens : tokens;
    size_t b = m / r->block_tokens;
    if (b > 0 && b <= nk && b * r->block_tokens == m)
        return r->kbuf[b - 1];
    uint64_t h = lr__hash(q->tokens, m * sizeof(uint32_t),
                          SEED_SESSION ^ q->tenant_salt);
    return h;
}

/* Bounded-load consistent hashing: the ring's candidates in order, the
 * first under cap = ceil(c x (in flight + 1) / n), else the least loaded. */
static struct choice
choose_bounded(lr_router *r, uint64_t key, double *val)
{
    struct choice ch = { 0, LR_REASON_HASH, NAN, NONE, LR_POLICY_RANDOM };
    uint32_t ids[LR_RING_MAX_K];
    uint32_t k = r->n_act < LR_RING_MAX_K ? r->n_act : LR_RING_MAX_K;
    uint32_t got = 0;
    lr_ring_candidates(r->ring, key, k, ids, &got);
    uint64_t total = 0;
    for (uint32_t i = 0; i < r->n_act; i++)
        total += r->cv[i].inflight;
    double cap = ceil(P(r, BOUNDED_LOAD) * (double)(total + 1) / r->n_act);
    for (uint32_t i = 0; i < got; i++) {
        uint32_t ci = cv_index(r, ids[i]);
        if (ci == NONE)
            continue;
        r->cv[ci].score = (double)i;
        if ((double)r->cv[ci].inflight + 1 <= cap) {
            ch.k = ci;
            ch.cost = (double)r->cv[ci].inflight;
            for (uint32_t j = i + 1; j < got; j++)
                if (cv_index(r, ids[j]) != NONE) {
                    ch.alt = ids[j];
                    break;
                }
            return ch;
        }
    }
    ch.k = least_inflight(r, val);
    ch.reason = LR_REASON_LEAST_LOADED;
    ch.cost = r->cv[ch.k].score;
    return ch;
}

static struct choice
choose_aibrix(lr_router *r, double *val)
{
    struct choice ch = { 0, LR_REASON_LEAST_LOADED, NAN, NONE,
                         LR_POLICY_RANDOM };
    uint32_t n = r->n_act;
    double mn = INFINITY, mx = -INFINITY, sum = 0, sq = 0;
    for (uint32_t k = 0; k < n; k++) {
        double l = (double)r->cv[k].inflight;
        mn = l < mn ? l : mn;
        mx = l > mx ? l : mx;
        sum += l;
        sq += l * l;
    }
    if (mx - mn > P(r, AIBRIX_IMBALANCE)) {
        ch.k = least_inflight(r, val);
        ch.reason = LR_REASON_LOAD_OVERRIDE;
        ch.cost = r->cv[ch.k].score;
        return ch;
    }
    double mean = sum / n;
    double var = sq / n - mean * mean;
    double limit = mean + P(r, AIBRIX_STDDEV) * sqrt(var > 0 ? var : 0);
    /* sorted by (match desc, load asc): the best (match, load) under the
     * limit; ties drawn */
    uint32_t best = NONE, ties = 0;
    for (uint32_t k = 0; k < n; k++) {
        const struct cand *c = &r->cv[k];
        r->cv[k].score = -(double)c->cached;
        if ((double)c->inflight > limit)
            continue;
        if (best == NONE || c->cached > r->cv[best].cached ||
            (c->cached == r->cv[best].cached &&
             c->inflight < r->cv[best].inflight)) {
            best = k;
            ties = 1;
        } else if (c->cached == r->cv[best].cached &&
                   c->inflight == r->cv[best].inflight) {
            if (lr__rng_below(&r->rng, ++ties) == 0)
                best = k;
        }
    }
    if (best == NONE) {
        ch.k = least_inflight(r, val);
        ch.cost = r->cv[ch.k].score;
        return ch;
    }
    ch.k = best;
    ch.reason =
        r->cv[best].cached > 0 ? LR_REASON_PREFIX_HIT : LR_REASON_LEAST_LOADED;
    ch.cost = r->cv[best].score;
    return ch;
}

static struct choice
choose_sglang(lr_router *r, const lr_request *q, double *val)
{
    struct choice ch = { 0, LR_REASON_FALLBACK, NAN, NONE, LR_POLICY_RANDOM };
    double mn = INFINITY, mx = -INFINITY;
    for (uint32_t k = 0; k < r->n_act; k++) {
        double l = (double)r->cv[k].inflight;
        mn = l < mn ? l : mn;
        mx = l > mx ? l : mx;
    }
    if (mx - mn > P(r, SGLANG_ABS) && mx > P(r, SGLANG_REL) * mn) {
        ch.k = least_inflight(r, val);
        ch.reason = LR_REASON_LOAD_OVERRIDE;
        ch.cost = r->cv[ch.k].score;
        return ch;
    }
    uint32_t best = best_cached(r);
    double ratio = q->n_tokens > 0 ? (double)best / (double)q->n_tokens : 0;
    if (best > 0 && ratio > P(r, SGLANG_MIN_RATIO)) {
        ch.k = least_among_best(r, val, best);
        ch.reason = LR_REASON_PREFIX_HIT;
        ch.cost = r->cv[ch.k].score;
        return ch;
    }
    ch.k = least_inflight(r, val);
    ch.cost = r->cv[ch.k].score;
    return ch;
}

static struct choice
choose_dualmap(lr_router *r, const lr_request *q, size_t nk, uint64_t *keybuf,
               uint32_t *n_keys, double *val)
{
    struct choice ch = { 0, LR_REASON_LEAST_LOADED, NAN, NONE,
                         LR_POLICY_RANDOM };
    /* key blocks: DUALMAP_KEY_TOKENS rounded down to index blocks */
    uint32_t per = (uint32_t)P(r, DUALMAP_KEY_TOKENS) / r->block_tokens;
    if (per == 0)
        per = 1;
    uint32_t avail = (uint32_t)(nk / per);
    if (avail > r->hot_depth)
        avail = r->hot_depth;
    *n_keys = avail;
    for (uint32_t d = 0; d < avail; d++)
        keybuf[d] = r->kbuf[(size_t)(d + 1) * per - 1] | 1; /* never 0 */
    uint64_t key;
    if (avail == 0) {
        key = prefix_key(r, q, nk, (uint32_t)P(r, DUALMAP_KEY_TOKENS));
    } else {
        uint32_t d = 0;
        while (d + 1 < avail) {
            const struct hot_ent *e = hot_find(r, keybuf[d]);
            if (e == NULL || !e->hot)
                break;
            d++;
        }
        key = keybuf[d];
    }
    uint32_t ids[2], got = 0;
    lr_ring_candidates(r->ring, key, 2, ids, &got);
    uint32_t a = got > 0 ? cv_index(r, ids[0]) : NONE;
    uint32_t b = got > 1 ? cv_index(r, ids[1]) : NONE;
    if (a == NONE) { /* cannot happen: the ring holds exactly cv */
        ch.k = least_inflight(r, val);
        return ch;
    }
    uint32_t prompt = (uint32_t)q->n_tokens;
    struct cand *ca = &r->cv[a];
    ca->score = ttft_est(ca, prompt);
    if (b == NONE) {
        ch.k = a;
        ch.reason = ca->cached > 0 ? LR_REASON_PREFIX_HIT : LR_REASON_HASH;
        ch.cost = ca->score;
        return ch;
    }
    struct cand *cb = &r->cv[b];
    cb->score = ttft_est(cb, prompt);
    /* less loaded = fewer pending prefill tokens (then a draw) */
    uint32_t less = cb->prefill < ca->prefill ? b
                    : ca->prefill < cb->prefill
                        ? a
                        : (lr__rng_below(&r->rng, 2) ? b : a);
    if (ca->cached == cb->cached) {
        ch.k = less;
        ch.reason = LR_REASON_LEAST_LOADED;
    } else {
        uint32_t hi = ca->cached > cb->cached ? a : b;
        /* overloaded: expected TTFT past the SLO, or a decode bottleneck
         * (no prefill done for 3 s while the queue is non-empty) */
        bool over = r->cv[hi].score > P(r, TTFT_SLO_S) || r->cv[hi].stall_s > 0;
        if (!over || hi == less) {
            ch.k = hi;
            ch.reason = LR_REASON_PREFIX_HIT;
        } else {
            ch.k = less;
            ch.reason = LR_REASON_SLO_SWITCH;
        }
    }
    ch.alt = r->cv[ch.k == a ? b : a].id;
    ch.cost = r->cv[ch.k].score;
    return ch;
}

static struct choice
choose_ranvier(lr_router *r, const lr_request *q, size_t nk, double *val)
{
    uint32_t best = best_cached(r);
    if (best == 0) {
        uint64_t key = prefix_key(r, q, nk, (uint32_t)P(r, SESSION_TOKENS));
        struct choice ch = choose_bounded(r, key, val);
        ch.reason = LR_REASON_FALLBACK;
        return ch;
    }
    struct choice ch = { 0, LR_REASON_PREFIX_HIT, NAN, NONE, LR_POLICY_RANDOM };
    ch.k = least_among_best(r, val, best);
    ch.cost = r->cv[ch.k].score;
    double pressure = P(r, RANVIER_PRESSURE);
    if (pressure > 0) {
        /* median in flight (upper median), by counting */
        for (uint32_t k = 0; k < r->n_act; k++)
            val[k] = (double)r->cv[k].inflight;
        uint32_t n = r->n_act, want = n / 2;
        double med = 0;
        for (uint32_t k = 0; k < n; k++) {
            uint32_t below = 0, eq = 0;
            for (uint32_t j = 0; j < n; j++) {
                below += val[j] < val[k];
                eq += val[j] == val[k];
            }
            if (below <= want && want < below + eq) {
                med = val[k];
                break;
            }
        }
        if (med < 1)
            med = 1;
        if ((double)r->cv[ch.k].inflight > pressure * med) {
            ch.k = least_inflight(r, val);
            ch.reason = LR_REASON_LOAD_OVERRIDE;
            ch.cost = r->cv[ch.k].score;
        }
    }
    return ch;
}

static struct choice
choose_dynamo(lr_router *r, const lr_request *q, double *val)
{
    struct choice ch = { 0, LR_REASON_MIN_COST, NAN, NONE, LR_POLICY_RANDOM };
    double B = (double)r->block_tokens;
    double w = P(r, DYNAMO_OVERLAP);
    double mn = INFINITY, mx = -INFINITY;
    for (uint32_t k = 0; k < r->n_act; k++) {
        struct cand *c = &r->cv[k];
        double uncached = ceil((double)(q->n_tokens - c->cached) / B);
        double decode = ceil((double)c->kv / B);
        val[k] = c->score = w * uncached + decode;
        mn = val[k] < mn ? val[k] : mn;
        mx = val[k] > mx ? val[k] : mx;
    }
    double t = P(r, DYNAMO_TEMPERATURE);
    if (t <= 0 || mx == mn) {
        ch.k = pick_min(r, val, r->n_act, NULL);
    } else {
        /* softmax over min-max normalized costs, as Dynamo samples */
        double z = 0;
        for (uint32_t k = 0; k < r->n_act; k++)
            z += exp(-((val[k] - mn) / (mx - mn)) / t);
        double u = lr__rng_unit(&r->rng) * z, acc = 0;
        ch.k = r->n_act - 1;
        for (uint32_t k = 0; k < r->n_act; k++) {
            acc += exp(-((val[k] - mn) / (mx - mn)) / t);
            if (u < acc) {
                ch.k = k;
                break;
            }
        }
        ch.reason = LR_REASON_SAMPLED;
    }
    ch.cost = r->cv[ch.k].score;
    return ch;
}

static struct choice choose_lodestar(lr_router *r, const lr_request *q,
                                     size_t nk, double *val, uint64_t *keybuf,
                                     uint32_t *n_keys);

static struct choice
choose(lr_router *r, lr_policy policy, const lr_request *q, size_t nk,
       double *val, uint64_t *keybuf, uint32_t *n_keys)
{
    struct choice ch = { 0, LR_REASON_NONE, NAN, NONE, LR_POLICY_RANDOM };
    uint32_t n = r->n_act;
    uint32_t prompt = (uint32_t)q->n_tokens;
    switch (policy) {
    case LR_POLICY_RANDOM:
        ch.k = (uint32_t)lr__rng_below(&r->rng, n);
        ch.reason = LR_REASON_RANDOM;
        break;
    case LR_POLICY_ROUND_ROBIN: {
        /* the first routable id after the last one served */
        uint32_t k = 0;
        if (r->rr_last != NONE)
            while (k < n && r->act[k] <= r->rr_last)
                k++;
        ch.k = k < n ? k : 0;
        ch.reason = LR_REASON_ROUND_ROBIN;
        break;
    }
    case LR_POLICY_LEAST_REQUEST:
        ch.k = least_inflight(r, val);
        ch.reason = LR_REASON_LEAST_LOADED;
        ch.cost = r->cv[ch.k].score;
        break;
    case LR_POLICY_LEAST_LOAD:
        for (uint32_t k = 0; k < n; k++)
            val[k] = r->cv[k].score = r->cv[k].load;
        ch.k = pick_min(r, val, n, NULL);
        ch.reason = LR_REASON_LEAST_LOADED;
        ch.cost = r->cv[ch.k].score;
        break;
    case LR_POLICY_SESSION_AFFINITY: {
        uint64_t key =
            q->has_session
                ? lr__mix64(q->session, SEED_SESSION)
                : prefix_key(r, q, nk, (uint32_t)P(r, SESSION_TOKENS));
        uint32_t id = NONE, got = 0;
        lr_ring_candidates(r->ring, key, 1, &id, &got);
        ch.k = got ? cv_index(r, id) : 0;
        if (ch.k == NONE)
            ch.k = 0;
        ch.reason = LR_REASON_SESSION;
        break;
    }
    case LR_POLICY_CONSISTENT_HASH:
        ch = choose_bounded(
            r, prefix_key(r, q, nk, (uint32_t)P(r, SESSION_TOKENS)), val);
        break;
    case LR_POLICY_PREFIX_CACHE: {
        uint32_t best = best_cached(r);
        double ratio = prompt > 0 ? (double)best / prompt : 0;
        if (best > 0 && ratio >= P(r, PREFIX_MIN_RATIO)) {
            ch.k = least_among_best(r, val, best);
            ch.reason = LR_REASON_PREFIX_HIT;
        } else {
            ch.k = least_inflight(r, val);
            ch.reason = LR_REASON_FALLBACK;
        }
        ch.cost = r->cv[ch.k].score;
        break;
    }
    case LR_POLICY_PREFIX_CACHE_AND_LOAD:
        ch = choose_aibrix(r, val);
        break;
    case LR_POLICY_SGLANG_CACHE_AWARE:
        ch = choose_sglang(r, q, val);
        break;
    case LR_POLICY_PREBLE: {
        uint32_t best = best_cached(r);
        double ratio = prompt > 0 ? (double)best / prompt : 0;
        if (best > 0 && ratio > P(r, PREBLE_HIT)) {
            ch.k = least_among_best(r, val, best);
            ch.reason = LR_REASON_PREFIX_HIT;
        } else {
            for (uint32_t k = 0; k < n; k++)
                val[k] = r->cv[k].score = ttft_est(&r->cv[k], prompt);
            ch.k = pick_min(r, val, n, NULL);
            ch.reason = LR_REASON_MIN_COST;
        }
        ch.cost = r->cv[ch.k].score;
        break;
    }
    case LR_POLICY_MIN_TTFT:
        for (uint32_t k = 0; k < n; k++) {
            struct cand *c = &r->cv[k];
            c->stall_s = 0; /* Mooncake: queue + prefill only */
            val[k] = c->score = ttft_est(c, prompt);
        }
        ch.k = pick_min(r, val, n, NULL);
        ch.reason = LR_REASON_MIN_COST;
        ch.cost = r->cv[ch.k].score;
        break;
    case LR_POLICY_DYNAMO:
        ch = choose_dynamo(r, q, val);
        break;
    case LR_POLICY_DUALMAP:
        ch = choose_dualmap(r, q, nk, keybuf, n_keys, val);
        break;
    case LR_POLICY_GORGO: {
        bool at_first = P(r, GORGO_RELEASE_AT_FIRST_TOKEN) != 0;
        for (uint32_t k = 0; k < n; k++) {
            const struct cand *c = &r->cv[k];
            val[k] = r->g.w_rtt * c->rtt_ms + (double)(prompt - c->cached) +
                     r->g.w_queue * (double)(at_first ? c->queued_tokens
                                                      : c->prompt_tokens);
            r->cv[k].score = val[k];
        }
        ch.k = pick_min(r, val, n, NULL);
        ch.reason = LR_REASON_MIN_COST;
        ch.cost = r->cv[ch.k].score;
        break;
    }
    case LR_POLICY_RANVIER:
        ch = choose_ranvier(r, q, nk, val);
        break;
    case LR_POLICY_LODESTAR:
        return choose_lodestar(r, q, nk, val, keybuf, n_keys);
    default: /* cannot happen: policies are checked when set */
        ch.k = least_inflight(r, val);
        ch.reason = LR_REASON_FALLBACK;
        break;
    }
    ch.decider = policy;
    return ch;
}

/* ---- route: Lodestar ------------------------------------------------------------------- */

static inline uint64_t
fresh_tag(uint64_t key, uint32_t id)
{
    return lr__mix64(key, (uint64_t)id + 1) | 1;
}

/* Age of instance `id`'s last route through the prefix of `blocks` blocks,
 * in seconds, or a negative value when unknown. */
static double
fresh_age(const lr_router *r, uint32_t id, size_t blocks, uint64_t now_ns)
{
    uint64_t tag = fresh_tag(r->kbuf[blocks - 1], id);
    const struct fresh *e = &r->fresh[tag & (FRESH_SLOTS - 1)];
    if (e->tag != tag)
        return -1;
    return now_ns > e->ns ? (double)(now_ns - e->ns) / 1e9 : 0;
}

/* Remember that `id` took this route now, at its boundaries (the last
 * FRESH_MAX_BOUNDARIES) and at its whole length. */
static void
fresh_record(lr_router *r, const lr_request *q, size_t nk, uint32_t id)
{
    size_t first = q->n_boundaries > FRESH_MAX_BOUNDARIES
                       ? q->n_boundaries - FRESH_MAX_BOUNDARIES
                       : 0;
    for (size_t i = first; i <= q->n_boundaries; i++) {
        size_t b =
            i < q->n_boundaries ? q->boundaries[i] / r->block_tokens : nk;
        if (b == 0 || b > nk)
            continue;
        uint64_t tag = fresh_tag(r->kbuf[b - 1], id);
        struct fresh *e = &r->fresh[tag & (FRESH_SLOTS - 1)];
        e->tag = tag;
        e->ns = q->now_ns;
    }
}

/* The feature row (LR_LODESTAR_FEATURES) of cv entry k, from this
 * route's snapshot of the instances: the same before and after the
 * dispatch, so scoring and the sample see one state. */
static void
feature_row(const lr_router *r, const lr_request *q, size_t nk, uint32_t k,
            float *f)
{
    double prompt = (double)q->n_tokens;
    double out = q->expected_output_tokens ? (double)q->expected_output_tokens
                                           : P(r, DEFAULT_OUTPUT_TOKENS);
    const struct cand *c = &r->cv[k];
    double hit = prompt > 0 ? c->cached / prompt : 0;
    double dec = 0;
    size_t blocks = c->cached / r->block_tokens;
    if (hit > 0 && blocks > 0 && blocks <= nk) {
        double age = fresh_age(r, c->id, blocks, q->now_ns);
        dec = hit * (age < 0 ? 0.5 : exp2(-age / FRESH_HALF_LIFE_S));
    }
    f[0] = (float)prompt;
    f[1] = (float)out;
    f[2] = (float)hit;
    f[3] = (float)dec;
    f[4] = (float)c->inflight;
    f[5] = (float)c->queued;
    f[6] = (float)c->prefill;
    f[7] = (float)c->decode;
    f[8] = (float)c->running;
    f[9] = (float)c->waiting;
    f[10] = (float)c->kv_use;
    f[11] = (float)c->rtt_ms;
    for (uint32_t j = 12; j < F; j++)
        f[j] = 0;
    f[12 + (c->cls < F - 12 ? c->cls : F - 13)] = 1;
}

/* Lodestar: score the candidates with the learned model and take the
 * best, with its guard rails: the fallback policy on cold start and out
 * of range, the K-filter under KV pressure, exploration and a random
 * tiebreak among the near-best. */
static struct choice
choose_lodestar(lr_router *r, const lr_request *q, size_t nk, double *val,
                uint64_t *keybuf, uint32_t *n_keys)
{
    uint32_t n = r->n_act;
    r->last_pred = NAN;
    /* candidates: the K-filter, else a power-of-d draw, else all */
    uint32_t nc = 0;
    bool kf = false;
    uint32_t best = best_cached(r);
    if (n > 2 && best > P(r, LODESTAR_KFILTER_TOKENS)) {
        double kv = 0;
        for (uint32_t k = 0; k < n; k++)
            kv += r->cv[k].kv_use;
        if (kv / n > P(r, LODESTAR_KV_THRESHOLD)) {
            uint64_t key = prefix_key(r, q, nk, (uint32_t)P(r, SESSION_TOKENS));
            uint32_t ids[2], got = 0;
            lr_ring_candidates(r->ring, key, 2, ids, &got);
            for (uint32_t i = 0; i < got; i++) {
                uint32_t ci = cv_index(r, ids[i]);
                if (ci != NONE)
                    r->cidx[nc++] = ci;
            }
            kf = nc > 0;
        }
    }
    if (!kf) {
        for (uint32_t k = 0; k < n; k++)
            r->cidx[k] = k;
        nc = n;
        uint32_t dcap = (uint32_t)P(r, LODESTAR_CANDIDATES);
        if (dcap > 0 && nc > dcap) {
            uint32_t bk = 0;
            for (uint32_t k = 1; k < n; k++)
                if (r->cv[k].cached > r->cv[bk].cached)
                    bk = k;
            r->cidx[0] = bk;
            r->cidx[bk] = 0;
            for (uint32_t i = 1; i < dcap; i++) {
                uint32_t j = i + (uint32_t)lr__rng_below(&r->rng, nc - i);
                uint32_t t = r->cidx[i];
                r->cidx[i] = r->cidx[j];
                r->cidx[j] = t;
            }
            nc = dcap;
        }
    }
    for (uint32_t i = 0; i < nc; i++)
        feature_row(r, q, nk, r->cidx[i], r->rows + (size_t)i * F);
    size_t ood = 0;
    lr_status st = lr_learner_score(
        atomic_load_explicit(&r->learner, memory_order_relaxed), r->rows, nc,
        r->pred, &ood);
    if (st != LR_OK || (ood > 0 && P(r, LODESTAR_OOD) != 0)) {
        lr_policy fb = (lr_policy)P(r, LODESTAR_FALLBACK);
        struct choice ch = choose(r, fb, q, nk, val, keybuf, n_keys);
        ch.reason = st != LR_OK ? LR_REASON_COLD_START : LR_REASON_OOD;
        return ch;
    }
    for (uint32_t i = 0; i < nc; i++)
        r->cv[r->cidx[i]].score = -(double)r->pred[i];
    struct choice ch = { 0, kf ? LR_REASON_K_FILTER : LR_REASON_MIN_COST, NAN,
                         NONE, LR_POLICY_LODESTAR };
    uint32_t pick = 0;
    if (lr__rng_unit(&r->rng) < P(r, LODESTAR_EPSILON)) {
        pick = (uint32_t)lr__rng_below(&r->rng, nc);
        ch.reason = LR_REASON_EXPLORE;
    } else {
        float top = r->pred[0];
        for (uint32_t i = 1; i < nc; i++)
            top = r->pred[i] > top ? r->pred[i] : top;
        double thr = top - P(r, LODESTAR_TIE) * fabs((double)top);
        uint32_t ties = 0;
        for (uint32_t i = 0; i < nc; i++)
            if ((double)r->pred[i] >= thr &&
                lr__rng_below(&r->rng, ++ties) == 0)
                pick = i;
    }
    ch.k = r->cidx[pick];
    ch.cost = -(double)r->pred[pick];
    r->last_pred = r->pred[pick];
    if (kf && nc > 1)
        ch.alt = r->cv[r->cidx[pick == 0 ? 1 : 0]].id;
    return ch;
}

/* ---- route ------------------------------------------------------------------------------ */

static lr_status
check_request(const lr_request *q)
{
    LR_RETURN_IF(q->n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(q->n_tokens > 0 && q->tokens == NULL, LR_EINVAL);
    LR_RETURN_IF(q->n_boundaries > 0 && q->boundaries == NULL, LR_EINVAL);
    LR_RETURN_IF(q->n_boundaries > q->n_tokens + 1, LR_EINVAL);
    for (size_t i = 0; i < q->n_boundaries; i++) {
        LR_RETURN_IF(q->boundaries[i] > q->n_tokens, LR_EINVAL);
        LR_RETURN_IF(i > 0 && q->boundaries[i] < q->boundaries[i - 1],
                     LR_EINVAL);
    }
    LR_RETURN_IF(q->flags & ~(uint32_t)(LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES |
                                        LR_ROUTE_NO_LEARN),
                 LR_EINVAL);
    LR_RETURN_IF(q->has_session != 0 && q->has_session != 1, LR_EINVAL);
    return LR_OK;
}

/* After a dispatch: keep the chosen instance's features until the
 * request's first token makes them a sample. */
static void
lodestar_record(lr_router *r, const lr_request *q, size_t nk,
                const struct choice *ch)
{
    struct lr__req_view v;
    if (LR_NEVER(lr__load_req(r->ld, q->id, &v) != LR_OK))
        return;
    bool ours = r->policy == LR_POLICY_LODESTAR;
    r->rq_has[v.slot] = ours;
    if (!ours)
        return;
    float *row = r->rq_feat + (size_t)v.slot * (F + 1);
    feature_row(r, q, nk, ch->k, row);
    row[F] = r->last_pred;
    if (nk > 0 && r->cv[ch->k].prefix_caching)
        fresh_record(r, q, nk, r->cv[ch->k].id);
}

/* A request leaves the queue or ends: its sample, if any, is made (first
 * token in time) or dropped. */
static void
lodestar_settle(lr_router *r, const struct lr__req_view *v, bool first,
                uint64_t now_ns)
{
    if (r->rq_has == NULL || !r->rq_has[v->slot])
        return;
    r->rq_has[v->slot] = 0;
    if (!first || now_ns < v->dispatch_ns)
        return;
    double ttft = (double)(now_ns - v->dispatch_ns) / 1e9;
    if (ttft > P(r, LODESTAR_MAX_TTFT_S))
        return;
    const float *row = r->rq_feat + (size_t)v->slot * (F + 1);
    /* a full queue or a reward out of range is counted by the learner */
    (void)lr_learner_add_sample(
        atomic_load_explicit(&r->learner, memory_order_relaxed), row, -ttft,
        row[F]);
}

static lr_status
route_locked(lr_router *r, const lr_request *q, lr_decision *d)
{
    bool dry = (q->flags & LR_ROUTE_DRY_RUN) != 0;
    bool want_scores = (q->flags & LR_ROUTE_SCORES) != 0;
    LR_RETURN_IF(r->n_act == 0, LR_ESTATE);
    if (want_scores && d->scores_capacity < r->n_act) {
        d->n_scores = r->n_act;
        return LR_EBUFSIZE;
    }
    LR_RETURN_IF(want_scores && d->scores == NULL, LR_EINVAL);
    if (!dry) {
        struct lr__req_view v;
        LR_RETURN_IF(lr__load_req(r->ld, q->id, &v) == LR_OK, LR_EEXIST);
        LR_RETURN_IF(!lr__load_has_room(r->ld), LR_ELIMIT);
    }
    /* 0. expiry: time-driven housekeeping (lr_router_expire()), kept
     * even when a later step fails */
    lr_index_expire(r->ix, q->now_ns);
    /* 1. keys */
    size_t nk = q->n_tokens / r->block_tokens;
    LR_TRY(scratch_keys(r, nk));
    if (nk > 0)
        LR_TRY(lr_block_keys(r->block_tokens, q->tokens, q->n_tokens,
                             q->tenant_salt, r->kbuf, r->kbuf_cap, &nk));
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = q->tokens;
    p.n_tokens = q->n_tokens;
    p.boundaries = q->boundaries;
    p.n_boundaries = q->n_boundaries;
    p.tenant_salt = q->tenant_salt;
    p.keys = nk > 0 ? r->kbuf : NULL;
    p.n_keys = nk;
    /* 2. match and load */
    bool have_match = policy_matches(r->policy) && nk > 0;
    if (have_match) {
        lr_index_match_result mr;
        lr_index_match_result_init(&mr);
        mr.hits = r->hits;
        mr.hits_capacity = r->max_inst;
        lr_status st =
            lr_index_match(r->ix, &p, q->now_ns, LR_MATCH_NO_TOUCH, &mr);
        if (st != LR_OK)
            return st;
        for (uint32_t k = 0; k < r->n_act; k++)
            r->cached_by_id[r->act[k]] = 0;
        for (size_t i = 0; i < mr.n_hits; i++)
            if (r->hits[i].instance < r->max_inst)
                r->cached_by_id[r->hits[i].instance] = r->hits[i].tokens;
    }
    gather(r, q->now_ns, r->cached_by_id, have_match);
    /* 3. choose */
    double *val = r->val;
    uint64_t keybuf[64];
    uint32_t n_keys = 0;
    struct lr__rng rng_before = r->rng; /* a failed call draws nothing */
    struct choice ch = choose(r, r->policy, q, nk, val, keybuf, &n_keys);
    const struct cand *c = &r->cv[ch.k];
    /* 4. record */
    if (!dry) {
        if (!(q->flags & LR_ROUTE_NO_LEARN) && c->prefix_caching && nk > 0) {
            lr_status st =
                lr_index_learn(r->ix, &p, c->id, LR_TRUST_LOCAL, q->now_ns);
            if (st != LR_OK) {
                r->rng = rng_before;
                return st;
            }
        }
        lr_dispatch dp;
        lr_dispatch_init(&dp);
        dp.request_id = q->id;
        dp.instance = c->id;
        dp.prompt_tokens = (uint32_t)q->n_tokens;
        dp.cached_tokens = c->cached;
        dp.expected_output_tokens = q->expected_output_tokens
                                        ? q->expected_output_tokens
                                        : (uint32_t)P(r, DEFAULT_OUTPUT_TOKENS);
        if (ch.alt != NONE && ch.alt != c->id) {
            dp.alt_instance = ch.alt;
            uint32_t ak = cv_index(r, ch.alt);
            dp.alt_cached_tokens = ak != NONE ? r->cv[ak].cached : 0;
        }
        dp.now_ns = q->now_ns;
        lr_status st = lr_load_dispatch(r->ld, &dp);
        if (LR_NEVER(st != LR_OK))
            return st; /* checked above; the learn stays, harmlessly */
        if (ch.decider == LR_POLICY_ROUND_ROBIN)
            r->rr_last = c->id;
        if (ch.decider == LR_POLICY_DUALMAP && n_keys > 0)
            hot_record(r, keybuf, n_keys);
        if (r->rq_has != NULL)
            lodestar_record(r, q, nk, &ch);
        r->st.routes++;
        r->st.by_reason[ch.reason]++;
        r->st.prompt_tokens += q->n_tokens;
        r->st.cached_tokens += c->cached;
    } else {
        r->st.dry_runs++;
    }
    d->instance = c->id;
    d->reason = ch.reason;
    d->cached_tokens = c->cached;
    d->best_cached_tokens = best_cached(r);
    d->cost = ch.cost;
    d->alt_instance = ch.alt;
    if (want_scores) {
        for (uint32_t k = 0; k < r->n_act; k++) {
            d->scores[k].instance = r->cv[k].id;
            d->scores[k].cached_tokens = r->cv[k].cached;
            d->scores[k].score = r->cv[k].score;
        }
        d->n_scores = r->n_act;
    } else {
        d->n_scores = 0;
    }
    return LR_OK;
}

lr_status
lr_router_route(lr_router *r, const lr_request *request, lr_decision *decision)
{
    LR_RETURN_IF(r == NULL || request == NULL || decision == NULL, LR_EINVAL);
    lr_request q;
    lr_request_init(&q);
    LR_TRY(lr__copy_sized(&q, sizeof q, request, LR_REQUEST_SIZE_V1));
    LR_RETURN_IF(decision->struct_size < LR_DECISION_SIZE_V1, LR_EVERSION);
    LR_TRY(check_request(&q));
    lock(r);
    lr_status st = route_locked(r, &q, decision);
    unlock(r);
    return st;
}

/* ---- lifecycle and the GORGO tuner ---------------------------------------------------------- */

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
window_p95(const struct gorgo *g)
{
    double tmp[128];
    memcpy(tmp, g->win, g->win_n * sizeof *tmp);
    qsort(tmp, g->win_n, sizeof *tmp, cmp_double);
    uint32_t i = (uint32_t)ceil(0.95 * g->win_n) - 1;
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

static void
gorgo_propose(lr_router *r)
{
    struct gorgo *g = &r->g;
    g->inc_rtt = g->w_rtt;
    g->inc_queue = g->w_queue;
    double lo_q = P(r, GORGO_W_QUEUE_MIN);
    double hi_r = P(r, GORGO_W_RTT_MAX);
    double lr_ = log(g->w_rtt > 0.05 ? g->w_rtt : 0.05);
    double lq = log(g->w_queue > lo_q && g->w_queue > 1e-6 ? g->w_queue
                    : lo_q > 1e-6                          ? lo_q
                                                           : 1e-6);
    g->w_rtt = clampd(exp(lr_ + g->sigma * gauss(&r->rng)), 0.05, hi_r);
    g->w_queue = clampd(exp(lq + g->sigma * gauss(&r->rng)), lo_q, 0.5);
    g->phase = 1;
    g->trial_samples = 0;
}

/* One observed TTFT (seconds) for the (1+1)-ES of GORGO: rolling p95 over
 * 128 samples, evaluated every 32; a trial lasts until the window holds
 * only the candidate's samples. */
static void
gorgo_observe(lr_router *r, double ttft_s)
{
    struct gorgo *g = &r->g;
    if (r->policy != LR_POLICY_GORGO || P(r, GORGO_FROZEN) != 0 ||
        g->sigma < 0.02)
        return;
    g->win[g->win_pos] = ttft_s;
    g->win_pos = (g->win_pos + 1) % 128;
    if (g->win_n < 128)
        g->win_n++;
    g->since_hop++;
    if (g->phase == 1)
        g->trial_samples++;
    if (g->win_n < 128 || g->since_hop < 32)
        return;
    g->since_hop = 0;
    double f = window_p95(g);
    if (g->phase == 0) {
        g->f_inc = f;
        gorgo_propose(r);
        return;
    }
    if (g->trial_samples < 128)
        return;
    bool ok = f < g->f_inc * (1.0 - 0.005);
    if (ok) {
        g->f_inc = f;
    } else {
        g->w_rtt = g->inc_rtt;
        g->w_queue = g->inc_queue;
    }
    g->outcomes = (uint8_t)((g->outcomes << 1) | (ok ? 1u : 0u));
    if (g->n_outcomes < 8)
        g->n_outcomes++;
    int succ = 0;
    for (int i = 0; i < g->n_outcomes; i++)
        succ += (g->outcomes >> i) & 1;
    double rate = (double)succ / g->n_outcomes;
    if (rate > 0.2)
        g->sigma /= 0.817;
    else if (rate < 0.2)
        g->sigma *= 0.817;
    if (g->sigma > 4)
        g->sigma = 4;
    if (g->sigma < 0.02)
        return; /* converged: the incumbent stays in service */
    gorgo_propose(r);
}

lr_status
lr_router_first_token(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    struct lr__req_view v;
    lr_status st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK && v.queued) {
        st = lr_load_first_token(r->ld, request_id, now_ns);
        if (st == LR_OK && now_ns >= v.dispatch_ns)
            gorgo_observe(r, (double)(now_ns - v.dispatch_ns) / 1e9);
        if (st == LR_OK)
            lodestar_settle(r, &v, true, now_ns);
    }
    unlock(r);
    return st;
}

lr_status
lr_router_complete(lr_router *r, uint64_t request_id, uint32_t output_tokens,
                   uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    struct lr__req_view v;
    lr_status st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK)
        st = lr_load_complete(r->ld, request_id, output_tokens, now_ns);
    if (st == LR_OK)
        lodestar_settle(r, &v, false, now_ns);
    unlock(r);
    return st;
}

lr_status
lr_router_fail(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    (void)now_ns;
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    struct lr__req_view v;
    lr_status st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK)
        st = lr_load_fail(r->ld, request_id);
    if (st == LR_OK)
        lodestar_settle(r, &v, false, now_ns);
    unlock(r);
    return st;
}

/* ---- rebalancing -------------------------------------------------------------------------- */

struct plan_ctx {
    lr_router *r;
    uint32_t src_k;
    double *extra; /* per cv entry: net prefill tokens planned onto it
                    * (negative: planned off it) */
    lr_move *moves;
    size_t cap, n;
    /* the best movable request of the current pass */
    uint64_t best_id;
    uint32_t best_to;
    double best_benefit;
    uint32_t best_uncached_here, best_uncached_there;
    const lr_move *done;
    size_t n_done;
};

static bool
planned(const struct plan_ctx *pc, uint64_t id)
{
    for (size_t i = 0; i < pc->n; i++)
        if (pc->moves[i].request_id == id)
            return true;
    return false;
}

static int
plan_visit(void *ctx, const struct lr__req_view *v)
{
    struct plan_ctx *pc = ctx;
    lr_router *r = pc->r;
    if (!v->queued || v->alt_instance == NONE || planned(pc, v->id))
        return 0;
    uint32_t tk = cv_index(r, v->alt_instance);
    if (tk == NONE)
        return 0;
    const struct cand *here = &r->cv[pc->src_k], *there = &r->cv[tk];
    double slo = P(r, TTFT_SLO_S);
    double t_here =
        ((double)here->prefill + pc->extra[pc->src_k]) / here->rate +
        here->stall_s;
    uint32_t unc_there = v->prompt_tokens - v->alt_cached_tokens;
    double t_there =
        ((double)there->prefill + pc->extra[tk] + unc_there) / there->rate +
        there->stall_s;
    double benefit = t_here - t_there;
    if (benefit > 0 && t_there < slo && benefit > pc->best_benefit) {
        pc->best_benefit = benefit;
        pc->best_id = v->id;
        pc->best_to = tk;
        pc->best_uncached_here = v->prompt_tokens - v->cached_tokens;
        pc->best_uncached_there = unc_there;
    }
    return 0;
}

lr_status
lr_router_rebalance_plan(lr_router *r, uint64_t now_ns, lr_move *moves,
                         size_t capacity, size_t *n_moves)
{
    LR_RETURN_IF(r == NULL || n_moves == NULL, LR_EINVAL);
    LR_RETURN_IF(capacity > 0 && moves == NULL, LR_EINVAL);
    *n_moves = 0;
    lock(r);
    if (r->n_act == 0) {
        unlock(r);
        return LR_OK;
    }
    for (uint32_t k = 0; k < r->n_act; k++)
        r->cached_by_id[r->act[k]] = 0;
    gather(r, now_ns, r->cached_by_id, false);
    double *extra = r->val; /* net prefill tokens planned per entry */
    memset(extra, 0, r->n_act * sizeof *extra);
    struct plan_ctx pc = { r, 0, extra, moves, capacity, 0, 0,
                           0, 0, 0,     0,     NULL,     0 };
    double slo = P(r, TTFT_SLO_S);
    for (uint32_t k = 0; k < r->n_act && pc.n < capacity; k++) {
        const struct cand *c = &r->cv[k];
        pc.src_k = k;
        /* move the best request off k while k is overloaded: its queue
         * breaks the SLO, or it is in a decode bottleneck (DualMap: no
         * prefill done for 3 s while the queue is non-empty) */
        while (pc.n < capacity &&
               (c->stall_s > 0 ||
                ((double)c->prefill + extra[k]) / c->rate + c->stall_s > slo)) {
            pc.best_benefit = 0;
            pc.best_id = 0;
            pc.best_to = NONE;
            lr__load_each_req(r->ld, c->id, plan_visit, &pc);
            if (pc.best_to == NONE)
                break;
            moves[pc.n].request_id = pc.best_id;
            moves[pc.n].from = c->id;
            moves[pc.n].to = r->cv[pc.best_to].id;
            moves[pc.n].benefit_s = pc.best_benefit;
            pc.n++;
            extra[k] -= pc.best_uncached_here;
            extra[pc.best_to] += pc.best_uncached_there;
        }
    }
    *n_moves = pc.n;
    unlock(r);
    return LR_OK;
}

lr_status
lr_router_move(lr_router *r, uint64_t request_id, uint32_t to)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = LR_OK;
    struct lr__req_view v;
    const struct rinst *in = inst_of(r, to);
    if (in == NULL)
        st = LR_ENOENT;
    else if (in->draining)
        st = LR_ESTATE;
    else
        st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK && !v.queued)
        st = LR_ESTATE;
    if (st == LR_OK) {
        uint32_t cached = 0;
        if (to == v.alt_instance)
            cached = v.alt_cached_tokens;
        st = lr_load_move(r->ld, request_id, to, cached);
        /* its features were the old instance's: no sample */
        if (st == LR_OK)
            lodestar_settle(r, &v, false, 0);
    }
    unlock(r);
    return st;
}

/* ---- parameters ---------------------------------------------------------------------------- */

lr_status
lr_router_set_param(lr_router *r, lr_param key, double value)
{
    LR_RETURN_IF(r == NULL || isnan(value), LR_EINVAL);
    LR_RETURN_IF((unsigned)key >= LR_PARAM_COUNT, LR_ENOTSUP);
    const struct pdef *d = &pdefs[key];
    LR_RETURN_IF(value < d->lo || value > d->hi, LR_ERANGE);
    LR_RETURN_IF(d->integer && value != floor(value), LR_EINVAL);
    lr_status st = LR_OK;
    lock(r);
    switch (key) {
    case LR_PARAM_DUALMAP_WINDOW:
        st = hot_setup(r, (uint32_t)value, r->hot_depth);
        break;
    case LR_PARAM_DUALMAP_MAX_KEY_BLOCKS:
        st = hot_setup(r, r->hot_w, (uint32_t)value);
        break;
    default:
        break;
    }
    if (st == LR_OK) {
        r->param[key] = value;
        switch (key) {
        case LR_PARAM_GORGO_W_RTT:
            r->g.w_rtt = r->g.inc_rtt = value;
            r->g.phase = 0;
            break;
        case LR_PARAM_GORGO_W_QUEUE:
            r->g.w_queue = r->g.inc_queue = value;
            r->g.phase = 0;
            break;
        case LR_PARAM_GORGO_SIGMA:
            r->g.sigma = value;
            break;
        case LR_PARAM_GORGO_FROZEN:
            if (value != 0 && r->g.phase == 1) {
                /* freezing ends a trial: the incumbent serves */
                r->g.w_rtt = r->g.inc_rtt;
                r->g.w_queue = r->g.inc_queue;
                r->g.phase = 0;
            }
            break;
        default:
            break;
        }
    }
    unlock(r);
    return st;
}

lr_status
lr_router_get_param(const lr_router *r, lr_param key, double *value)
{
    LR_RETURN_IF(r == NULL || value == NULL, LR_EINVAL);
    LR_RETURN_IF((unsigned)key >= LR_PARAM_COUNT, LR_ENOTSUP);
    lock(r);
    switch (key) {
    case LR_PARAM_GORGO_W_RTT:
        *value = r->g.phase == 1 ? r->g.inc_rtt : r->g.w_rtt;
        break;
    case LR_PARAM_GORGO_W_QUEUE:
        *value = r->g.phase == 1 ? r->g.inc_queue : r->g.w_queue;
        break;
    case LR_PARAM_GORGO_SIGMA:
        *value = r->g.sigma;
        break;
    default:
        *value = r->param[key];
        break;
    }
    unlock(r);
    return LR_OK;
}

/* ---- index pass-through ------------------------------------------------------------------------ */

lr_status
lr_router_kv_stored(lr_router *r, uint32_t id, const lr_kv_stored *ev,
                    uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = inst_of(r, id) == NULL
                       ? LR_ENOENT
                       : lr_index_kv_stored(r->ix, id, ev, now_ns);
    unlock(r);
    return st;
}

lr_status
lr_router_kv_removed(lr_router *r, uint32_t id, const uint64_t *block_hashes,
                     size_t n_blocks, size_t *n_resolved)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = inst_of(r, id) == NULL
                       ? LR_ENOENT
                       : lr_index_kv_removed(r->ix, id, block_hashes, n_blocks,
                                             n_resolved);
    unlock(r);
    return st;
}

lr_status
lr_router_kv_cleared(lr_router *r, uint32_t id)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st =
        inst_of(r, id) == NULL ? LR_ENOENT : lr_index_kv_cleared(r->ix, id);
    unlock(r);
    return st;
}

uint64_t
lr_router_mark(lr_router *r)
{
    if (r == NULL)
        return 0;
    lock(r);
    uint64_t m = lr_index_mark(r->ix);
    unlock(r);
    return m;
}

lr_status
lr_router_export_delta(lr_router *r, uint64_t since_mark, lr_blob **out,
                       uint64_t *mark_out)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = lr_index_export_delta(r->ix, since_mark, out, mark_out);
    unlock(r);
    return st;
}

/* Routes of instances this router does not have are not imported: they
 * could never be chosen, and they would take the index's instance slots. */
static bool
known_id(void *ctx, uint32_t id)
{
    return inst_of(ctx, id) != NULL;
}

lr_status
lr_router_import_delta(lr_router *r, const uint8_t *buf, size_t len,
                       uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st =
        lr__index_import_delta_if(r->ix, buf, len, now_ns, known_id, r);
    unlock(r);
    return st;
}

lr_status
lr_router_vllm_batch(lr_router *r, uint32_t id, const uint8_t *buf, size_t len,
                     uint64_t now_ns, lr_vllm_batch_info *info)
{
    LR_RETURN_IF(r == NULL || (buf == NULL && len != 0), LR_EINVAL);
    LR_RETURN_IF(info != NULL && info->struct_size < LR_VLLM_BATCH_INFO_SIZE_V1,
                 LR_EVERSION);
    lr_vllm_batch_info in;
    lr_vllm_batch_info_init(&in);
    lock(r);
    lr_status st =
        inst_of(r, id) == NULL
            ? LR_ENOENT
            : lr__vllm_apply(r->ix, &r->mem, id, buf, len, now_ns, &in);
    unlock(r);
    lr__vllm_info_out(info, &in);
    return st;
}

lr_status
lr_router_expire(lr_router *r, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_index_expire(r->ix, now_ns);
    unlock(r);
    return LR_OK;
}

/* ---- statistics ---------------------------------------------------------------------------------- */

lr_status
lr_router_get_stats(const lr_router *r, lr_router_stats *out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    LR_RETURN_IF(out->struct_size < LR_ROUTER_STATS_SIZE_V1, LR_EVERSION);
    lock(r);
    lr_router_stats s = r->st;
    s.inflight = lr_load_inflight(r->ld);
    s.instances = r->n_inst;
    s.routable = r->n_act;
    unlock(r);
    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    s.struct_size = out->struct_size;
    memcpy(out, &s, n);
    return LR_OK;
}

/* ---- internal hooks ------------------------------------------------------------------------------ */

static uint64_t
dmix(uint64_t h, uint64_t v)
{
    return lr__mix64(h ^ v, 0x9e3779b97f4a7c15ull);
}

static uint64_t
dbits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

uint64_t
lr__router_digest(const lr_router *r)
{
    if (r == NULL)
        return 0;
    lock(r);
    uint64_t h = lr__index_digest(r->ix);
    h = dmix(h, lr__ring_digest(r->ring));
    h = dmix(h, lr__load_digest(r->ld));
    h = dmix(h, ((uint64_t)r->policy << 32) | r->n_inst);
    h = dmix(h, ((uint64_t)r->n_act << 32) | r->rr_last);
    for (uint32_t i = 0; i < r->max_inst; i++) {
        const struct rinst *in = &r->inst[i];
        if (!in->live)
            continue;
        h = dmix(h, lr__hash(in->name, in->name_len, i));
        h = dmix(h, in->draining);
        h = dmix(h, dbits(r->init_rtt_ms[i]));
    }
    for (uint32_t k = 0; k < r->n_act; k++)
        h = dmix(h, r->act[k]);
    for (int k = 0; k < LR_PARAM_COUNT; k++)
        h = dmix(h, dbits(r->param[k]));
    for (unsigned c = 0; c < LR_LOAD_MAX_CLASSES; c++)
        h = dmix(h, dbits(r->rate[c]));
    for (int k = 0; k < 4; k++)
        h = dmix(h, r->rng.s[k]);
    h = dmix(h, ((uint64_t)r->hot_w << 32) | r->hot_depth);
    h = dmix(h, ((uint64_t)r->hot_pos << 32) | r->hot_filled);
    for (size_t i = 0; i < (size_t)r->hot_w * r->hot_depth; i++)
        if (r->hot_win[i] != 0)
            h = dmix(h, r->hot_win[i] ^ i);
    const struct gorgo *g = &r->g;
    h = dmix(h, dbits(g->w_rtt) ^ dbits(g->w_queue) * 3);
    h = dmix(h, dbits(g->sigma) ^ ((uint64_t)g->phase << 1));
    h = dmix(h, ((uint64_t)g->win_n << 32) | g->trial_samples);
    h = dmix(h, r->st.routes ^ (r->st.dry_runs << 20) ^ r->st.prompt_tokens);
    lr_learner *l = atomic_load(&r->learner);
    if (l != NULL) {
        h = dmix(h, lr__learner_digest(l));
        for (uint32_t i = 0; i < r->max_req; i++)
            if (r->rq_has[i])
                h = dmix(h, lr__hash(r->rq_feat + (size_t)i * (F + 1),
                                     (F + 1) * sizeof(float), i));
        h = dmix(h, lr__hash(r->fresh, FRESH_SLOTS * sizeof *r->fresh, 7));
    }
    unlock(r);
    return h;
}

lr_status
lr__router_verify(const lr_router *r)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lock(r);
    lr_status st = lr__index_verify(r->ix);
    if (st == LR_OK)
        st = lr__ring_verify(r->ring);
    if (st == LR_OK)
        st = lr__load_verify(r->ld);
    uint32_t live = 0, routable = 0;
    for (uint32_t i = 0; st == LR_OK && i < r->max_inst; i++) {
        const struct rinst *in = &r->inst[i];
        if (!in->live)
            continue;
        live++;
        bool found;
        uint32_t slot = name_slot(r, in->name, in->name_len, &found);
        if (!found || r->names[slot] != i + 1 || !lr__load_has(r->ld, i) ||
            lr_ring_contains(r->ring, i) != !in->draining ||
            (cv_index(r, i) != NONE) != !in->draining)
            st = LR_ECORRUPT;
        routable += !in->draining;
    }
    if (st == LR_OK && (live != r->n_inst || routable != r->n_act ||
                        lr_ring_count(r->ring) != r->n_act))
        st = LR_ECORRUPT;
    for (uint32_t k = 1; st == LR_OK && k < r->n_act; k++)
        if (r->act[k - 1] >= r->act[k])
            st = LR_ECORRUPT;
    /* hotness counts equal the window's contents */
    if (st == LR_OK) {
        uint64_t in_win = 0, counted = 0;
        for (size_t i = 0; i < (size_t)r->hot_w * r->hot_depth; i++)
            in_win += r->hot_win[i] != 0;
        for (uint32_t i = 0; i <= r->hot_mask; i++)
            counted += r->hot[i].count;
        if (in_win != counted)
            st = LR_ECORRUPT;
    }
    unlock(r);
    return st;
}

size_t
lr__router_mem_live(const lr_router *r)
{
    return r != NULL ? r->mem.live : 0;
}

/* ---- Lodestar: the host's learner calls ------------------------------------------------------ */

lr_status
lr_router_learn_step(lr_router *r, uint32_t flags, int32_t *trained)
{
    LR_RETURN_IF(r == NULL || (flags & ~LR_LEARN_FORCE) != 0, LR_EINVAL);
    lr_learner *l = atomic_load_explicit(&r->learner, memory_order_acquire);
    LR_RETURN_IF(l == NULL, LR_ESTATE);
    return lr_learner_step(l, flags, trained);
}

lr_status
lr_router_learner_samples(lr_router *r, float *x, float *y, size_t capacity,
                          size_t *n_samples)
{
    LR_RETURN_IF(r == NULL || n_samples == NULL, LR_EINVAL);
    lr_learner *l = atomic_load_explicit(&r->learner, memory_order_acquire);
    LR_RETURN_IF(l == NULL, LR_ESTATE);
    return lr_learner_samples(l, x, y, capacity, n_samples);
}

lr_status
lr_router_learner_stats(const lr_router *r, lr_learner_stats *out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    lock(r);
    lr_learner *l = atomic_load_explicit(&r->learner, memory_order_relaxed);
    lr_status st = l != NULL ? lr_learner_get_stats(l, out) : LR_ESTATE;
    unlock(r);
    return st;
}
