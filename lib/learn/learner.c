/* lr_learner: samples in from the serving side, models out to it, with no
 * lock between the two.
 *
 * Samples: a single-producer single-consumer ring (`pq`, pending_capacity
 * rows of n_features + 2 floats: features, reward, prediction). The
 * serving side writes a row and publishes it with a release store of
 * `head`; the step reads rows up to an acquire load of `head` and frees
 * them with a release store of `tail`.
 *
 * Models: the step publishes a new model by exchanging it into `incoming`
 * (a model never taken is freed by the step that replaces it). The serving
 * side takes it with an exchange at the start of lr_learner_score() and
 * pushes the model it replaces on the `retired` stack (a CAS push); the
 * step pops the whole stack with one exchange and frees it. The serving
 * side therefore never allocates or frees, and never waits.
 *
 * A step builds the next FIFO and replay buffers in fresh arrays, trains
 * on them, and only then commits (swaps the arrays, advances `tail`,
 * publishes), so LR_ENOMEM anywhere leaves every sample where it was. */
#include "learn/learner.h"

#include <math.h>
#include <stdatomic.h>

#include "common/lr_hash.h"
#include "learn/mlp.h"
#include "learn/mlp_kernel.h"

struct model {
    lr_mlp *net;
    uint64_t round, samples, replay;
    double mse;
    struct model *next; /* on the retired stack */
};

#define ERR_WINDOW 256u

/* The training side's rows: a FIFO of the newest samples (oldest first)
 * and a replay chosen from the ones that left it; x rows of the learner's
 * feature width, y their targets. The learner's own, or a step's next. */
struct bufs {
    float *fx, *fy; /* fifo_n rows, fifo_capacity allocated */
    float *rx, *ry; /* replay_n rows, replay_capacity allocated */
    uint32_t fifo_n, replay_n;
};

struct lr_learner {
    struct lr__mem mem; /* training side (and create/destroy) only */
    lr_learner_options o;
    lr_mlp_options mo;
    uint32_t d;
    size_t row; /* floats per pending row: d + 2 */
    /* pending queue */
    float *pq;
    uint32_t pcap;
    _Atomic uint64_t head; /* rows written (serving side) */
    _Atomic uint64_t tail; /* rows taken (training side) */
    /* mailbox */
    _Atomic(struct model *) incoming;
    _Atomic(struct model *) retired;
    atomic_int stepping;
    /* serving side */
    struct model *serving;
    uint64_t samples, dropped_full, dropped_range, predicted;
    float err[ERR_WINDOW];
    uint32_t err_n, err_pos;
    /* training side */
    struct bufs b;        /* FIFO and replay */
    uint64_t taken;       /* samples taken over the learner's life */
    uint64_t since_round; /* samples taken since the last round */
    uint64_t round;
    lr_mlp *prev; /* the last trained network (training side's copy) */
};

LR__INIT_SIZED(lr_learner_options_init_sized, lr_learner_options,
               options_defaults, .fifo_capacity = 5000, .replay_capacity = 5000,
               .pending_capacity = 8192, .min_samples = 5000,
               .retrain_every = 1000, .epochs = 30, .max_abs_reward = 15.0)

LR__INIT_SIZED_ZERO(lr_learner_stats_init_sized, lr_learner_stats)

/* ---- create / destroy ------------------------------------------------------ */

static void
model_free(struct model *m, struct lr__mem *mem)
{
    if (m == NULL)
        return;
    lr_mlp_destroy(m->net);
    lr__free(mem, m, sizeof *m);
}

static size_t
rows_bytes(size_t rows, size_t width)
{
    return rows * width * sizeof(float);
}

/* Buffers of l's capacities (the replay's only if it has one), empty.
 * LR_ENOMEM leaves what it got in b for bufs_free(). */
static lr_status
bufs_alloc(lr_learner *l, struct bufs *b)
{
    struct lr__mem *m = &l->mem;
    uint32_t fc = l->o.fifo_capacity, rc = l->o.replay_capacity;
    b->fx = lr__alloc(m, rows_bytes(fc, l->d));
    b->fy = lr__alloc(m, rows_bytes(fc, 1));
    LR_RETURN_IF(b->fx == NULL || b->fy == NULL, LR_ENOMEM);
    if (rc > 0) {
        b->rx = lr__alloc(m, rows_bytes(rc, l->d));
        b->ry = lr__alloc(m, rows_bytes(rc, 1));
        LR_RETURN_IF(b->rx == NULL || b->ry == NULL, LR_ENOMEM);
    }
    return LR_OK;
}

static void
bufs_free(lr_learner *l, struct bufs *b)
{
    struct lr__mem *m = &l->mem;
    uint32_t fc = l->o.fifo_capacity, rc = l->o.replay_capacity;
    lr__free(m, b->fx, rows_bytes(fc, l->d));
    lr__free(m, b->fy, rows_bytes(fc, 1));
    lr__free(m, b->rx, rows_bytes(rc, l->d));
    lr__free(m, b->ry, rows_bytes(rc, 1));
    memset(b, 0, sizeof *b);
}

void
lr_learner_destroy(lr_learner *l)
{
    if (l == NULL)
        return;
    struct lr__mem *m = &l->mem;
    model_free(l->serving, m);
    model_free(atomic_exchange(&l->incoming, NULL), m);
    for (struct model *r = atomic_exchange(&l->retired, NULL); r != NULL;) {
        struct model *next = r->next;
        model_free(r, m);
        r = next;
    }
    lr_mlp_destroy(l->prev);
    lr__free(m, l->pq, rows_bytes(l->pcap, l->row));
    bufs_free(l, &l->b);
    LR__HANDLE_FREE(l, lr_learner);
}

static lr_status
check_options(const lr_learner_options *o)
{
    LR_RETURN_IF(o->n_features < 1 || o->n_features > LR_MLP_MAX_INPUTS,
                 LR_EINVAL);
    LR_RETURN_IF(o->fifo_capacity < 1 ||
                     o->fifo_capacity > LR_LEARNER_MAX_SAMPLES,
                 LR_EINVAL);
    LR_RETURN_IF(o->replay_capacity > LR_LEARNER_MAX_SAMPLES, LR_EINVAL);
    LR_RETURN_IF(o->pending_capacity < 1 ||
                     o->pending_capacity > LR_LEARNER_MAX_SAMPLES,
                 LR_EINVAL);
    LR_RETURN_IF(o->min_samples < 1 || o->retrain_every < 1, LR_EINVAL);
    LR_RETURN_IF(o->epochs < 1 || o->epochs > 10000, LR_EINVAL);
    LR_RETURN_IF(!(o->max_abs_reward > 0) ||
                     !(o->max_abs_reward <= LR_MLP_MAX_VALUE),
                 LR_EINVAL);
    return LR_OK;
}

/* Copy and check the options and the network's (a throwaway network:
 * lr_mlp_create is the one judge of its options). */
static lr_status
take_options(const lr_learner_options *opt, lr_learner_options *o,
             lr_mlp_options *mo)
{
    lr_learner_options_init(o);
    LR_TRY(lr__copy_sized(o, sizeof *o, opt, LR_LEARNER_OPTIONS_SIZE_V1));
    LR_TRY(check_options(o));
    lr_mlp_options_init(mo);
    if (o->mlp != NULL)
        LR_TRY(lr__copy_sized(mo, sizeof *mo, o->mlp, LR_MLP_OPTIONS_SIZE_V1));
    mo->allocator = o->allocator;
    mo->seed = o->seed;
    mo->n_inputs = o->n_features;
    o->mlp = NULL; /* copied into mo */
    lr_mlp *probe = NULL;
    LR_TRY(lr_mlp_create(mo, &probe));
    lr_mlp_destroy(probe);
    return LR_OK;
}

lr_status
lr__learner_check_options(const lr_learner_options *opt)
{
    LR_RETURN_IF(opt == NULL, LR_EINVAL);
    lr_learner_options o;
    lr_mlp_options mo;
    return take_options(opt, &o, &mo);
}

lr_status
lr_learner_create(const lr_learner_options *opt, lr_learner **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL; /* on any failure (B5) */
    LR_RETURN_IF(opt == NULL, LR_EINVAL);
    lr_learner_options o;
    lr_mlp_options mo;
    LR_TRY(take_options(opt, &o, &mo));
    lr_learner *l;
    LR_TRY(LR__HANDLE_NEW(l, lr_learner, o.allocator));
    l->o = o;
    l->mo = mo;
    l->d = o.n_features;
    l->row = (size_t)o.n_features + 2;
    l->pcap = o.pending_capacity;
    atomic_init(&l->head, 0);
    atomic_init(&l->tail, 0);
    atomic_init(&l->incoming, NULL);
    atomic_init(&l->retired, NULL);
    atomic_init(&l->stepping, 0);
    l->pq = lr__alloc(&l->mem, rows_bytes(l->pcap, l->row));
    if (l->pq == NULL || bufs_alloc(l, &l->b) != LR_OK) {
        lr_learner_destroy(l);
        return LR_ENOMEM;
    }
    *out = l;
    return LR_OK;
}

/* ---- serving side ------------------------------------------------------------------ */

static bool
all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

lr_status
lr_learner_add_sample(lr_learner *l, const float *x, double reward,
                      double predicted)
{
    LR_RETURN_IF(l == NULL || x == NULL, LR_EINVAL);
    LR_RETURN_IF(!isfinite(reward) || !all_finite(x, l->d), LR_EINVAL);
    if (fabs(reward) > l->o.max_abs_reward) {
        l->dropped_range++;
        return LR_ERANGE;
    }
    uint64_t h = atomic_load_explicit(&l->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&l->tail, memory_order_acquire);
    if (h - t >= l->pcap) {
        l->dropped_full++;
        return LR_ELIMIT;
    }
    float *row = l->pq + (size_t)(h % l->pcap) * l->row;
    memcpy(row, x, l->d * sizeof(float));
    row[l->d] = (float)reward;
    row[l->d + 1] = isfinite(predicted) ? (float)predicted : NAN;
    atomic_store_explicit(&l->head, h + 1, memory_order_release);
    l->samples++;
    if (isfinite(predicted)) {
        l->predicted++;
        l->err[l->err_pos] = (float)fabs(predicted - reward);
        l->err_pos = (l->err_pos + 1) % ERR_WINDOW;
        if (l->err_n < ERR_WINDOW)
            l->err_n++;
    }
    return LR_OK;
}

/* Take a newly published model, retiring the one in service. */
static void
take_incoming(lr_learner *l)
{
    struct model *m = atomic_exchange(&l->incoming, NULL);
    if (m == NULL)
        return;
    struct model *old = l->serving;
    l->serving = m;
    if (old == NULL)
        return;
    old->next = atomic_load_explicit(&l->retired, memory_order_relaxed);
    while (!atomic_compare_exchange_weak(&l->retired, &old->next, old))
        ;
}

lr_mlp *
lr__learner_model(lr_learner *l)
{
    take_incoming(l);
    return l->serving != NULL ? l->serving->net : NULL;
}

bool
lr__learner_incoming(const lr_learner *l)
{
    return atomic_load_explicit(&((lr_learner *)l)->incoming,
                                memory_order_acquire) != NULL;
}

lr_mlp *
lr__learner_serving(const lr_learner *l)
{
    return l->serving != NULL ? l->serving->net : NULL;
}

lr_status
lr__learner_install(lr_learner *l, lr_mlp *net)
{
    /* l->mem belongs to the training side: hold it as a step would */
    int expect = 0;
    LR_RETURN_IF(!atomic_compare_exchange_strong(&l->stepping, &expect, 1),
                 LR_ESTATE);
    struct model *m = lr__calloc(&l->mem, 1, sizeof *m);
    if (m == NULL) {
        atomic_store(&l->stepping, 0);
        return LR_ENOMEM;
    }
    m->net = net;
    model_free(atomic_exchange(&l->incoming, m), &l->mem);
    atomic_store(&l->stepping, 0);
    take_incoming(l); /* in service now */
    return LR_OK;
}

/* Both scoring calls: predictions, then the out-of-range count (ood
 * NULL) or the per-row verdicts. */
static lr_status
score(lr_learner *l, const float *x, size_t n, float *out, uint8_t *ood,
      size_t *n_ood)
{
    lr_mlp *net = lr__learner_model(l);
    LR_RETURN_IF(net == NULL, LR_ESTATE);
    if (n == 0) {
        if (n_ood != NULL)
            *n_ood = 0;
        return LR_OK;
    }
    LR_TRY(lr_mlp_predict(net, x, n, out));
    if (ood != NULL)
        return lr_mlp_out_of_range_rows(net, x, n, ood, n_ood);
    return n_ood != NULL ? lr_mlp_out_of_range(net, x, n, n_ood) : LR_OK;
}

lr_status
lr_learner_score(lr_learner *l, const float *x, size_t n, float *out,
                 size_t *n_ood)
{
    LR_RETURN_IF(l == NULL || (n > 0 && (x == NULL || out == NULL)), LR_EINVAL);
    return score(l, x, n, out, NULL, n_ood);
}

lr_status
lr_learner_score_rows(lr_learner *l, const float *x, size_t n, float *out,
                      uint8_t *ood, size_t *n_ood)
{
    LR_RETURN_IF(l == NULL ||
                     (n > 0 && (x == NULL || out == NULL || ood == NULL)),
                 LR_EINVAL);
    return score(l, x, n, out, ood, n_ood);
}

lr_status
lr_learner_get_stats(lr_learner *l, lr_learner_stats *out)
{
    LR_TRY(lr__out_check(l, out, LR_LEARNER_STATS_SIZE_V1));
    take_incoming(l);
    lr_learner_stats s;
    lr_learner_stats_init(&s);
    s.samples = l->samples;
    s.dropped_full = l->dropped_full;
    s.dropped_range = l->dropped_range;
    s.predicted = l->predicted;
    if (l->serving != NULL) {
        s.model_round = l->serving->round;
        s.model_samples = l->serving->samples;
        s.model_replay = l->serving->replay;
        s.model_mse = l->serving->mse;
    }
    double sum = 0;
    for (uint32_t i = 0; i < l->err_n; i++)
        sum += l->err[i];
    s.online_mae = l->err_n > 0 ? sum / l->err_n : NAN;
    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    size_t keep = out->struct_size;
    memcpy(out, &s, n);
    out->struct_size = keep;
    return LR_OK;
}

/* ---- training side ------------------------------------------------------------------ */

static lr_status
samples_locked(const lr_learner *l, float *x, float *y, size_t cap,
               size_t *n_out)
{
    size_t n = (size_t)l->b.fifo_n + l->b.replay_n;
    *n_out = n;
    LR_RETURN_IF(cap < n, LR_EBUFSIZE);
    LR_RETURN_IF(n > 0 && (x == NULL || y == NULL), LR_EINVAL);
    if (l->b.fifo_n > 0) {
        memcpy(x, l->b.fx, rows_bytes(l->b.fifo_n, l->d));
        memcpy(y, l->b.fy, rows_bytes(l->b.fifo_n, 1));
    }
    if (l->b.replay_n > 0) {
        memcpy(x + (size_t)l->b.fifo_n * l->d, l->b.rx,
               rows_bytes(l->b.replay_n, l->d));
        memcpy(y + l->b.fifo_n, l->b.ry, rows_bytes(l->b.replay_n, 1));
    }
    return LR_OK;
}

lr_status
lr_learner_samples(lr_learner *l, float *x, float *y, size_t cap, size_t *n_out)
{
    LR_RETURN_IF(l == NULL || n_out == NULL, LR_EINVAL);
    int expect = 0;
    LR_RETURN_IF(!atomic_compare_exchange_strong(&l->stepping, &expect, 1),
                 LR_ESTATE);
    lr_status st = samples_locked(l, x, y, cap, n_out);
    atomic_store(&l->stepping, 0);
    return st;
}

/* The next buffers a step builds before it commits. */
struct next {
    struct bufs b;
    float *tx, *ty; /* training set: FIFO then replay */
    struct model *pub;
    lr_mlp *net;
    /* replay selection scratch */
    float *px, *py; /* pool rows */
    float *emb;     /* pool embeddings */
    float *mind;
    uint32_t *pick;
    size_t pool_cap, emb_w;
};

static void
next_free(lr_learner *l, struct next *n)
{
    struct lr__mem *m = &l->mem;
    uint32_t fc = l->o.fifo_capacity, rc = l->o.replay_capacity;
    bufs_free(l, &n->b);
    lr__free(m, n->tx, rows_bytes((size_t)fc + rc, l->d));
    lr__free(m, n->ty, rows_bytes((size_t)fc + rc, 1));
    lr__free(m, n->px, rows_bytes(n->pool_cap, l->d));
    lr__free(m, n->py, rows_bytes(n->pool_cap, 1));
    lr__free(m, n->emb, rows_bytes(n->pool_cap, n->emb_w));
    lr__free(m, n->mind, rows_bytes(n->pool_cap, 1));
    lr__free(m, n->pick, n->pool_cap * sizeof(uint32_t));
    model_free(n->pub, m);
    lr_mlp_destroy(n->net);
    memset(n, 0, sizeof *n);
}

/* Embed the pool rows for the diversity choice: the previous network's
 * last hidden activations times its absolute error on the row, or with no
 * network yet the rows' z-scored features; then L2-normalize. */
static lr_status
embed_pool(lr_learner *l, struct next *n, size_t m)
{
    size_t w = n->emb_w;
    if (l->prev != NULL) {
        LR_TRY(lr__mlp_last_hidden(l->prev, n->px, m, n->emb));
        /* errors, one row at a time through `mind` as scratch */
        LR_TRY(lr_mlp_predict(l->prev, n->px, m, n->mind));
        for (size_t i = 0; i < m; i++) {
            float e = fabsf(n->mind[i] - n->py[i]);
            float *v = n->emb + i * w;
            for (size_t k = 0; k < w; k++)
                v[k] *= e;
        }
    } else {
        for (size_t k = 0; k < w; k++) {
            double s = 0, s2 = 0;
            for (size_t i = 0; i < m; i++) {
                double v = n->px[i * l->d + k];
                s += v;
                s2 += v * v;
            }
            double mean = s / (double)m, var = s2 / (double)m - mean * mean;
            double sd = var > 1e-12 ? sqrt(var) : 1.0;
            for (size_t i = 0; i < m; i++)
                n->emb[i * w + k] = (float)((n->px[i * l->d + k] - mean) / sd);
        }
    }
    for (size_t i = 0; i < m; i++) {
        float *v = n->emb + i * w;
        float nn = sqrtf(lr__mlp_dot(v, v, w));
        if (nn > 0)
            for (size_t k = 0; k < w; k++)
                v[k] /= nn;
    }
    return LR_OK;
}

/* Greedy k-center over the pool (farthest point, cosine distance): pick
 * `k` rows into n->pick. The first is the row with the largest embedding
 * before normalization would be ideal; the pool order (oldest replay
 * first) is used instead, which keeps the choice deterministic. See
 * lr__k_center. */
static lr_status
k_center(lr_learner *l, struct next *n, size_t m, size_t k)
{
    return lr__k_center(&l->mem, n->emb, n->emb_w, m, k, n->pick);
}

/* ---- the k-center choice ------------------------------------------------------
 *
 * What it computes (the definition, and what the model in tests/test-learner.c
 * runs): every row starts at distance +inf; pick 0 is row 0; after each
 * pick c, every row whose distance is not below 0 takes min(its distance,
 * 1 - dot(row, c)) (dot: the kernels' `dots`), and the next pick is the
 * first such row of the largest distance above -1 (a row whose distance
 * fell below 0 is out: a near-copy of a pick; none left: row 0 again).
 *
 * How: a scan of all rows per pick reads the whole embedding (2.5 MB for
 * 5000 rows of 128) k times, which is memory-bound. Instead only the KC_TOP
 * rows of largest distance (the "top") follow every pick; the others keep
 * the distance of the last refresh, an upper bound of their own (a
 * distance only falls), and the largest of them (the threshold). While
 * the top's best beats the threshold it is the pick; otherwise a refresh
 * brings every row up to date (KC_CHUNK rows at a time against every pick
 * since the last, so a row is read once per refresh) and chooses the top
 * again. A distance is a min over the same dot products whatever their
 * order, so the picks are those of the scan, bit for bit. Ties go to the
 * lower row: keys compare (distance, -row). */
#define KC_TOP 256u
#define KC_CHUNK 64u

struct kc_key {
    float d;
    uint32_t i;
};

static inline bool
kc_gt(float ad, uint32_t ai, float bd, uint32_t bi)
{
    return ad > bd || (ad == bd && ai < bi);
}

/* Row states. */
enum {
    KC_OUT,
    KC_TOP_ROW,
    KC_GONE
};

struct kc {
    const struct lr__mlp_kernels *kr;
    const float *emb;
    size_t w;
    float *d;      /* per row: its distance (up to date for top rows) */
    uint8_t *st;   /* per row: KC_* */
    uint32_t *out; /* rows KC_OUT, any order */
    size_t n_out;
    uint32_t *top; /* rows KC_TOP_ROW, any order */
    size_t n_top;
    struct kc_key *heap; /* refresh: the top chosen, a min-heap */
    float *dd;           /* dot products, max(KC_TOP, KC_CHUNK) */
    bool thr_any;        /* the largest (stale) key of the KC_OUT rows */
    float thr_d;
    uint32_t thr_i;
};

/* rows[0..n) against the pick c: each takes the min of its distance and
 * 1 - dot(row, c). (A row below 0 is out for good, whatever its distance
 * becomes after, so a refresh may update one before dropping it.) */
static void
kc_apply(struct kc *s, const uint32_t *rows, size_t n, uint32_t c)
{
    s->kr->dots(s->emb, s->w, rows, n, s->emb + (size_t)c * s->w, s->dd);
    for (size_t q = 0; q < n; q++) {
        float dist = 1.0f - s->dd[q];
        if (dist < s->d[rows[q]])
            s->d[rows[q]] = dist;
    }
}

static inline void
kc_swap(struct kc_key *h, size_t i, size_t j)
{
    struct kc_key t = h[i];
    h[i] = h[j];
    h[j] = t;
}

static void
kc_heap_down(struct kc_key *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && kc_gt(h[m].d, h[m].i, h[l].d, h[l].i))
            m = l;
        if (r < n && kc_gt(h[m].d, h[m].i, h[r].d, h[r].i))
            m = r;
        if (m == i)
            return;
        kc_swap(h, i, m);
        i = m;
    }
}

static void
kc_heap_up(struct kc_key *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!kc_gt(h[p].d, h[p].i, h[i].d, h[i].i))
            return;
        kc_swap(h, i, p);
        i = p;
    }
}

/* A key passed over for the top: the threshold keeps the largest. */
static void
kc_thr(struct kc *s, float d, uint32_t i)
{
    if (!s->thr_any || kc_gt(d, i, s->thr_d, s->thr_i)) {
        s->thr_any = true;
        s->thr_d = d;
        s->thr_i = i;
    }
}

/* Bring every KC_OUT row up to date with picks[0..np) (the picks since
 * the last refresh; the last is the pick just made, which the top rows
 * have already taken), drop the rows out before the last, then choose
 * the top and the threshold again among all rows left. */
static void
kc_refresh(struct kc *s, const uint32_t *picks, size_t np)
{
    size_t w = 0;
    for (size_t c0 = 0; c0 < s->n_out; c0 += KC_CHUNK) {
        size_t cn = s->n_out - c0 < KC_CHUNK ? s->n_out - c0 : KC_CHUNK;
        uint32_t *rows = s->out + c0;
        for (size_t p = 0; p + 1 < np; p++)
            kc_apply(s, rows, cn, picks[p]);
        /* out before the last pick: below 0 after the ones before it */
        size_t keep = 0;
        for (size_t q = 0; q < cn; q++) {
            if (s->d[rows[q]] < 0)
                s->st[rows[q]] = KC_GONE;
            else
                rows[keep++] = rows[q];
        }
        if (np > 0)
            kc_apply(s, rows, keep, picks[np - 1]);
        memmove(s->out + w, rows, keep * sizeof *rows);
        w += keep;
    }
    s->n_out = w;
    /* the top again: the KC_TOP largest keys among top and out rows */
    size_t nh = 0;
    s->thr_any = false;
    for (size_t src = 0; src < 2; src++) {
        const uint32_t *rows = src == 0 ? s->top : s->out;
        size_t n = src == 0 ? s->n_top : s->n_out;
        for (size_t q = 0; q < n; q++) {
            struct kc_key k = { s->d[rows[q]], rows[q] };
            if (nh < KC_TOP) {
                s->heap[nh] = k;
                kc_heap_up(s->heap, nh++);
            } else if (kc_gt(k.d, k.i, s->heap[0].d, s->heap[0].i)) {
                kc_thr(s, s->heap[0].d, s->heap[0].i);
                s->heap[0] = k;
                kc_heap_down(s->heap, nh, 0);
            } else {
                kc_thr(s, k.d, k.i);
            }
        }
    }
    /* old top rows are out rows unless chosen again */
    for (size_t q = 0; q < s->n_top; q++)
        s->st[s->top[q]] = KC_OUT;
    for (size_t q = 0; q < nh; q++)
        s->st[s->heap[q].i] = KC_TOP_ROW;
    w = 0;
    for (size_t q = 0; q < s->n_out; q++)
        if (s->st[s->out[q]] == KC_OUT)
            s->out[w++] = s->out[q];
    for (size_t q = 0; q < s->n_top; q++)
        if (s->st[s->top[q]] == KC_OUT)
            s->out[w++] = s->top[q];
    s->n_out = w;
    s->n_top = nh;
    for (size_t q = 0; q < nh; q++)
        s->top[q] = s->heap[q].i;
}

/* The best key above -1 among the top rows: *row, or false. */
static bool
kc_best(const struct kc *s, uint32_t *row)
{
    bool any = false;
    float bd = -1;
    uint32_t bi = 0;
    for (size_t q = 0; q < s->n_top; q++) {
        uint32_t r = s->top[q];
        if (s->d[r] > -1 && (!any || kc_gt(s->d[r], r, bd, bi))) {
            any = true;
            bd = s->d[r];
            bi = r;
        }
    }
    /* the top wins when its best beats every out row's bound */
    if (!any ||
        (s->thr_any && s->thr_d > -1 && kc_gt(s->thr_d, s->thr_i, bd, bi)))
        return false;
    *row = bi;
    return true;
}

lr_status
lr__k_center(struct lr__mem *mem, const float *emb, size_t w, size_t m,
             size_t k, uint32_t *pick)
{
    LR_RETURN_IF(m == 0 || m > UINT32_MAX, LR_EINVAL);
    struct kc s = { .kr = lr__mlp_kernels_get(), .emb = emb, .w = w };
    size_t nd = KC_TOP > KC_CHUNK ? KC_TOP : KC_CHUNK;
    s.d = lr__alloc(mem, m * sizeof *s.d);
    s.st = lr__alloc(mem, m);
    s.out = lr__alloc(mem, m * sizeof *s.out);
    s.top = lr__alloc(mem, KC_TOP * sizeof *s.top);
    s.heap = lr__alloc(mem, KC_TOP * sizeof *s.heap);
    s.dd = lr__alloc(mem, nd * sizeof *s.dd);
    lr_status st = LR_ENOMEM;
    if (s.d == NULL || s.st == NULL || s.out == NULL || s.top == NULL ||
        s.heap == NULL || s.dd == NULL)
        goto done;
    for (size_t i = 0; i < m; i++) {
        s.d[i] = INFINITY;
        s.st[i] = KC_OUT;
        s.out[i] = (uint32_t)i;
    }
    s.n_out = m;
    size_t pend = 0; /* picks from here on are not in the out rows yet */
    uint32_t cur = 0;
    for (size_t j = 0; j < k; j++) {
        pick[j] = cur;
        if (s.st[cur] != KC_GONE) {
            /* (row 0 again when nothing was left is gone already) */
            if (s.st[cur] == KC_OUT) {
                /* only the refresh's top or its best can be picked */
                for (size_t q = 0; q < s.n_out; q++)
                    if (s.out[q] == cur) {
                        s.out[q] = s.out[--s.n_out];
                        break;
                    }
            } else {
                for (size_t q = 0; q < s.n_top; q++)
                    if (s.top[q] == cur) {
                        s.top[q] = s.top[--s.n_top];
                        break;
                    }
            }
            s.st[cur] = KC_GONE;
        }
        /* the top rows: out when below 0, else against the pick */
        size_t keep = 0;
        for (size_t q = 0; q < s.n_top; q++) {
            uint32_t r = s.top[q];
            if (s.d[r] < 0)
                s.st[r] = KC_GONE;
            else
                s.top[keep++] = r;
        }
        s.n_top = keep;
        kc_apply(&s, s.top, s.n_top, cur);
        if (j + 1 == k)
            break;
        uint32_t next;
        if (!kc_best(&s, &next)) {
            kc_refresh(&s, pick + pend, j + 1 - pend);
            pend = j + 1;
            if (!kc_best(&s, &next))
                next = 0;
        }
        cur = next;
    }
    st = LR_OK;
done:
    lr__free(mem, s.d, m * sizeof *s.d);
    lr__free(mem, s.st, m);
    lr__free(mem, s.out, m * sizeof *s.out);
    lr__free(mem, s.top, KC_TOP * sizeof *s.top);
    lr__free(mem, s.heap, KC_TOP * sizeof *s.heap);
    lr__free(mem, s.dd, nd * sizeof *s.dd);
    return st;
}

/* Build the next FIFO (the newest fifo_capacity of FIFO + new rows) and
 * the next replay (chosen from replay + rows leaving the FIFO). */
static lr_status
build_buffers(lr_learner *l, struct next *n, uint64_t t0, uint64_t n_new)
{
    struct lr__mem *mem = &l->mem;
    uint32_t fc = l->o.fifo_capacity, rc = l->o.replay_capacity;
    size_t d = l->d;
    LR_TRY(bufs_alloc(l, &n->b));
    /* all rows in age order: FIFO (0..fifo_n), then pending (new) */
    uint64_t total = (uint64_t)l->b.fifo_n + n_new;
    uint64_t leave = total > fc ? total - fc : 0; /* oldest `leave` go */
    /* pool for the replay choice: replay + leaving rows */
    size_t pool = (size_t)l->b.replay_n + (size_t)leave;
    n->b.fifo_n = (uint32_t)(total - leave);
    if (rc > 0 && pool > 0) {
        n->pool_cap = pool;
        n->emb_w = l->prev != NULL ? lr__mlp_width(l->prev) : d;
        n->px = lr__alloc(mem, rows_bytes(pool, d));
        n->py = lr__alloc(mem, rows_bytes(pool, 1));
        n->emb = lr__alloc(mem, rows_bytes(pool, n->emb_w));
        n->mind = lr__alloc(mem, rows_bytes(pool, 1));
        n->pick = lr__alloc(mem, pool * sizeof(uint32_t));
        LR_RETURN_IF(n->px == NULL || n->py == NULL || n->emb == NULL ||
                         n->mind == NULL || n->pick == NULL,
                     LR_ENOMEM);
        if (l->b.replay_n > 0) {
            memcpy(n->px, l->b.rx, rows_bytes(l->b.replay_n, d));
            memcpy(n->py, l->b.ry, rows_bytes(l->b.replay_n, 1));
        }
    }
    size_t pi = l->b.replay_n, fi = 0;
    for (uint64_t i = 0; i < total; i++) {
        const float *x;
        float y;
        if (i < l->b.fifo_n) {
            x = l->b.fx + (size_t)i * d;
            y = l->b.fy[i];
        } else {
            const float *row =
                l->pq + (size_t)((t0 + (i - l->b.fifo_n)) % l->pcap) * l->row;
            x = row;
            y = row[d];
        }
        if (i < leave) {
            if (rc > 0) {
                memcpy(n->px + pi * d, x, d * sizeof(float));
                n->py[pi++] = y;
            }
        } else {
            memcpy(n->b.fx + fi * d, x, d * sizeof(float));
            n->b.fy[fi++] = y;
        }
    }
    if (rc == 0)
        return LR_OK;
    if (pool <= rc) {
        if (pool > 0) {
            memcpy(n->b.rx, n->px, rows_bytes(pool, d));
            memcpy(n->b.ry, n->py, rows_bytes(pool, 1));
        }
        n->b.replay_n = (uint32_t)pool;
        return LR_OK;
    }
    LR_TRY(embed_pool(l, n, pool));
    LR_TRY(k_center(l, n, pool, rc));
    for (size_t j = 0; j < rc; j++) {
        uint32_t p = n->pick[j];
        memcpy(n->b.rx + j * d, n->px + (size_t)p * d, d * sizeof(float));
        n->b.ry[j] = n->py[p];
    }
    n->b.replay_n = rc;
    return LR_OK;
}

static lr_status
train_round(lr_learner *l, struct next *n)
{
    struct lr__mem *mem = &l->mem;
    size_t d = l->d;
    size_t rows = (size_t)n->b.fifo_n + n->b.replay_n;
    LR_RETURN_IF(rows == 0, LR_ESTATE);
    size_t cap = (size_t)l->o.fifo_capacity + l->o.replay_capacity;
    n->tx = lr__alloc(mem, rows_bytes(cap, d));
    n->ty = lr__alloc(mem, rows_bytes(cap, 1));
    n->pub = lr__calloc(mem, 1, sizeof *n->pub);
    LR_RETURN_IF(n->tx == NULL || n->ty == NULL || n->pub == NULL, LR_ENOMEM);
    memcpy(n->tx, n->b.fx, rows_bytes(n->b.fifo_n, d));
    memcpy(n->ty, n->b.fy, rows_bytes(n->b.fifo_n, 1));
    if (n->b.replay_n > 0) {
        memcpy(n->tx + (size_t)n->b.fifo_n * d, n->b.rx,
               rows_bytes(n->b.replay_n, d));
        memcpy(n->ty + n->b.fifo_n, n->b.ry, rows_bytes(n->b.replay_n, 1));
    }
    lr_mlp_options mo = l->mo;
    mo.seed = lr__mix64(l->o.seed, l->round + 1);
    LR_TRY(lr_mlp_create(&mo, &n->net));
    LR_TRY(lr_mlp_fit_normalization(n->net, n->tx, rows, n->ty));
    double mse = NAN;
    LR_TRY(lr_mlp_train(n->net, n->tx, n->ty, rows, l->o.epochs, &mse));
    LR_TRY(lr_mlp_clone(n->net, &n->pub->net));
    n->pub->round = l->round + 1;
    n->pub->samples = rows;
    n->pub->replay = n->b.replay_n;
    n->pub->mse = mse;
    return LR_OK;
}

static lr_status
step_locked(lr_learner *l, uint32_t flags, int32_t *trained)
{
    /* free what the serving side retired */
    for (struct model *r = atomic_exchange(&l->retired, NULL); r != NULL;) {
        struct model *next = r->next;
        model_free(r, &l->mem);
        r = next;
    }
    uint64_t t0 = atomic_load_explicit(&l->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&l->head, memory_order_acquire);
    uint64_t n_new = h - t0;
    bool have = l->b.fifo_n + l->b.replay_n + n_new > 0;
    bool train;
    if ((flags & LR_LEARN_FORCE) != 0)
        train = have;
    else if (l->round == 0)
        train = l->taken + n_new >= l->o.min_samples;
    else
        train = l->since_round + n_new >= l->o.retrain_every;
    if (!train && n_new == 0)
        return LR_OK;
    struct next n;
    memset(&n, 0, sizeof n);
    lr_status st = build_buffers(l, &n, t0, n_new);
    if (st == LR_OK && train)
        st = train_round(l, &n);
    if (st == LR_ERANGE) {
        /* training diverged (lr_mlp_train undid it): the samples are
         * taken as usual, so the next round does not retry the same
         * set forever, and nothing is published */
        lr_mlp_destroy(n.net);
        model_free(n.pub, &l->mem);
        n.net = NULL;
        n.pub = NULL;
        train = false;
    } else if (st != LR_OK) {
        next_free(l, &n);
        return st;
    }
    /* commit: nothing below fails */
    bufs_free(l, &l->b);
    l->b = n.b;
    memset(&n.b, 0, sizeof n.b);
    atomic_store_explicit(&l->tail, h, memory_order_release);
    l->taken += n_new;
    l->since_round += n_new;
    if (train) {
        l->round++;
        l->since_round = 0;
        lr_mlp_destroy(l->prev);
        l->prev = n.net;
        n.net = NULL;
        model_free(atomic_exchange(&l->incoming, n.pub), &l->mem);
        n.pub = NULL;
        *trained = 1;
    }
    next_free(l, &n);
    return st;
}

lr_status
lr_learner_step(lr_learner *l, uint32_t flags, int32_t *trained)
{
    LR_RETURN_IF(l == NULL || (flags & ~LR_LEARN_FORCE) != 0, LR_EINVAL);
    int32_t dummy;
    if (trained == NULL)
        trained = &dummy;
    *trained = 0;
    int expect = 0;
    LR_RETURN_IF(!atomic_compare_exchange_strong(&l->stepping, &expect, 1),
                 LR_ESTATE);
    lr_status st = step_locked(l, flags, trained);
    atomic_store(&l->stepping, 0);
    return st;
}

/* ---- internal ------------------------------------------------------------------------- */

uint64_t
lr__learner_digest(const lr_learner *l)
{
    uint64_t h = lr__hash(&l->b.fifo_n, sizeof l->b.fifo_n, 1);
    h = lr__hash(&l->b.replay_n, sizeof l->b.replay_n, h);
    if (l->b.fifo_n > 0) {
        h = lr__hash(l->b.fx, rows_bytes(l->b.fifo_n, l->d), h);
        h = lr__hash(l->b.fy, rows_bytes(l->b.fifo_n, 1), h);
    }
    if (l->b.replay_n > 0) {
        h = lr__hash(l->b.rx, rows_bytes(l->b.replay_n, l->d), h);
        h = lr__hash(l->b.ry, rows_bytes(l->b.replay_n, 1), h);
    }
    uint64_t v[6] = { atomic_load(&l->head),
                      atomic_load(&l->tail),
                      l->taken,
                      l->since_round,
                      l->round,
                      l->samples };
    return lr__hash(v, sizeof v, h);
}

void
lr__learner_sizes(const lr_learner *l, uint64_t *pending, uint32_t *fifo,
                  uint32_t *replay)
{
    *pending = atomic_load(&l->head) - atomic_load(&l->tail);
    *fifo = l->b.fifo_n;
    *replay = l->b.replay_n;
}
