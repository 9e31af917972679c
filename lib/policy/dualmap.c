/* DualMap: two choices on a dual hash ring, SLO-aware selection, a
 * hotness window that lengthens the key of hot prefixes, and the
 * rebalancing plan.
 *
 * The key (router side, before the table is ranked):
 *
 *   prompt blocks  |--512--|--512--|--512--|--512--| ...  (DUALMAP_KEY_TOKENS)
 *   keys[d]                  k0      k1      k2       chained: k2 names all
 *   ring key       = k0 unless k0 is hot; then k1 unless k1 is hot; ...
 *
 * The shortest key is two blocks (DualMap's A.2.1: 2 x 512 tokens served
 * 95% of its conversation requests), or one when MAX_KEY_BLOCKS is 1; a
 * shorter prompt is keyed by the hash of all its tokens (the router's
 * short-prompt path). A prefix every request shares spreads over the ring
 * by its longer continuations, and a cold one keeps all its requests on
 * two instances.
 * Hot: share of the window > 2/n; cold again below 1/n (hysteresis).
 *
 * The choice (lr__dualmap_decide): the rows of ring ranks 1 and 2 are the
 * two candidates. Equal hits -> the less loaded (fewer pending prefill
 * tokens, a draw on a tie). Otherwise stay with the higher hit until its
 * expected TTFT (which counts a decode stall) passes the SLO, then the
 * less loaded (an SLO switch). A stall alone does not switch: it makes an
 * instance overloaded for the rebalancing plan only.
 */
#include "policy/dualmap.h"

#include "common/lr_hash.h"
#include "policy/cost.h"
#include "policy/policy.h"

#define NONE LR_INSTANCE_NONE
#define HOT_SEED 0x4c524e414d455331ull /* "LRNAMES1" */
#define HOT_UP 2.0                     /* hot above 2/n of the window */
#define HOT_DOWN 1.0                   /* cold again below 1/n */
#define KEY_FIRST 2u /* key blocks of the shortest key (DualMap A.2.1) */

struct lr__hot_ent {
    uint64_t key;
    uint32_t count; /* 0: empty */
    uint32_t hot;
};

/* ---- the hotness window ----------------------------------------------------- */

void
lr__hot_free(struct lr__hot *h, struct lr__mem *m)
{
    size_t n = (size_t)h->w * h->depth;
    lr__free(m, h->pool, n * sizeof *h->pool);
    lr__free(m, h->free, n * sizeof *h->free);
    lr__free(m, h->win, n * sizeof *h->win);
    lr__table_free(&h->tab, m);
    h->pool = NULL;
    h->free = NULL;
    h->win = NULL;
}

lr_status
lr__hot_setup(struct lr__hot *h, struct lr__mem *m, uint32_t w, uint32_t depth)
{
    size_t n = (size_t)w * depth; /* at most this many distinct keys */
    struct lr__hot nh = { 0 };
    nh.seed = h->seed;
    nh.w = w;
    nh.depth = depth;
    nh.pool = lr__calloc(m, n, sizeof *nh.pool);
    nh.free = lr__alloc(m, n * sizeof *nh.free);
    nh.win = lr__calloc(m, n, sizeof *nh.win);
    if (nh.pool == NULL || nh.free == NULL || nh.win == NULL ||
        lr__table_init(&nh.tab, m, (uint32_t)n) != LR_OK) {
        lr__hot_free(&nh, m);
        return LR_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        nh.free[i] = (uint32_t)(n - 1 - i);
    nh.n_free = (uint32_t)n;
    lr__hot_free(h, m);
    *h = nh;
    return LR_OK;
}

/* Keyed by the router's hash seed: the keys are prompt hashes a client
 * can aim. */
static inline uint64_t
hot_hash(const struct lr__hot *h, uint64_t key)
{
    return lr__mix64(key, h->seed ^ HOT_SEED);
}

static bool
hot_eq(const void *ctx, uint64_t key, uint32_t e)
{
    return ((const struct lr__hot_ent *)ctx)[e].key == key;
}

/* The entry of `key`, or LR_NIL. */
static uint32_t
hot_find(const struct lr__hot *h, uint64_t key)
{
    return lr__table_find(&h->tab, hot_hash(h, key), key, hot_eq, h->pool);
}

static void
hot_update(const struct lr__hot *h, struct lr__hot_ent *e, uint32_t routable)
{
    double n = routable > 0 ? (double)routable : 1.0;
    double filled = h->filled > 0 ? (double)h->filled : 1.0;
    double share = (double)e->count / filled;
    if (!e->hot && share > HOT_UP / n)
        e->hot = 1;
    else if (e->hot && share < HOT_DOWN / n)
        e->hot = 0;
}

/* One more request with `key` in the window. The pool has an entry for
 * every key the window can hold, and the table room for them. */
static void
hot_add(struct lr__hot *h, uint64_t key, uint32_t routable)
{
    uint32_t i = hot_find(h, key);
    if (i == LR_NIL) {
        i = h->free[--h->n_free];
        h->pool[i].key = key;
        h->pool[i].count = 0;
        h->pool[i].hot = 0;
        lr__table_insert(&h->tab, hot_hash(h, key), i);
    }
    h->pool[i].count++;
    hot_update(h, &h->pool[i], routable);
}

/* One request with `key` left the window; its entry goes with the last. */
static void
hot_del(struct lr__hot *h, uint64_t key, uint32_t routable)
{
    uint32_t i = hot_find(h, key);
    if (LR_NEVER(i == LR_NIL))
        return;
    if (--h->pool[i].count > 0) {
        hot_update(h, &h->pool[i], routable);
        return;
    }
    lr__table_remove(&h->tab, hot_hash(h, key), i);
    h->free[h->n_free++] = i;
}

void
lr__hot_record(struct lr__hot *h, const uint64_t *keys, uint32_t n,
               uint32_t routable)
{
    if (h->pool == NULL) /* no window made (lr__hot_setup): nothing kept */
        return;
    uint64_t *slot = &h->win[(size_t)h->pos * h->depth];
    if (h->filled == h->w) {
        for (uint32_t d = 0; d < h->depth && slot[d] != 0; d++)
            hot_del(h, slot[d], routable);
    } else {
        h->filled++;
    }
    for (uint32_t d = 0; d < h->depth; d++) {
        slot[d] = d < n ? keys[d] : 0;
        if (slot[d] != 0)
            hot_add(h, slot[d], routable);
    }
    h->pos = (h->pos + 1) % h->w;
}

uint32_t
lr__hot_first_blocks(const struct lr__hot *h)
{
    return h->depth < KEY_FIRST ? h->depth : KEY_FIRST;
}

uint32_t
lr__hot_keys(const struct lr__hot *h, const uint64_t *block_keys,
             size_t n_blocks, uint32_t per, uint64_t *keys)
{
    size_t first = lr__hot_first_blocks(h);
    size_t last = n_blocks / per; /* key blocks the prompt has */
    if (last > h->depth)
        last = h->depth;
    uint32_t n = 0;
    for (size_t b = first; b <= last; b++)
        keys[n++] = block_keys[b * per - 1] | 1; /* never 0 */
    return n;
}

uint64_t
lr__hot_pick(const struct lr__hot *h, const uint64_t *keys, uint32_t n)
{
    uint32_t d = 0;
    while (d + 1 < n && h->pool != NULL) {
        uint32_t e = hot_find(h, keys[d]);
        if (e == LR_NIL || !h->pool[e].hot)
            break;
        d++;
    }
    return keys[d];
}

lr_status
lr__hot_verify(const struct lr__hot *h)
{
    uint64_t in_win = 0, counted = 0;
    size_t n = (size_t)h->w * h->depth;
    for (size_t i = 0; i < n; i++)
        in_win += h->win[i] != 0;
    for (uint32_t i = 0; i < n; i++)
        counted += h->pool[i].count;
    if (in_win != counted || h->tab.count + h->n_free != n ||
        lr__table_verify(&h->tab) != LR_OK)
        return LR_ECORRUPT;
    for (size_t i = 0; i < n; i++)
        if (h->win[i] != 0 && hot_find(h, h->win[i]) == LR_NIL)
            return LR_ECORRUPT;
    return LR_OK;
}

uint64_t
lr__hot_digest(const struct lr__hot *h, uint64_t d)
{
    d = lr__digest_mix(d, ((uint64_t)h->w << 32) | h->depth);
    d = lr__digest_mix(d, ((uint64_t)h->pos << 32) | h->filled);
    for (size_t i = 0; h->win != NULL && i < (size_t)h->w * h->depth; i++)
        if (h->win[i] != 0)
            d = lr__digest_mix(d, h->win[i] ^ i);
    return d;
}

/* ---- the choice --------------------------------------------------------------- */

/* DualMap's TTFT estimate of a row: queue + prefill + the stall term. */
static double
estimate(const struct lr__pctx *c, uint32_t k)
{
    return c->score[k] = lr__cost_ttft(lr__row(c, k), c->prompt, 0, 1);
}

struct lr__choice
lr__dualmap_decide(const struct lr__pctx *c)
{
    const int32_t me = LR_POLICY_DUALMAP;
    uint32_t a = lr__row_of_rank(c, 1), b = lr__row_of_rank(c, 2);
    if (a == LR_NIL) /* a host's table without ranks, never the router's */
        return lr__choose(c, lr__least_inflight(c), LR_REASON_LEAST_LOADED, me);
    const lr_candidate *ra = lr__row(c, a);
    estimate(c, a);
    if (b == LR_NIL)
        return lr__choose(
            c, a, ra->cached_tokens > 0 ? LR_REASON_PREFIX_HIT : LR_REASON_HASH,
            me);
    const lr_candidate *rb = lr__row(c, b);
    estimate(c, b);
    /* less loaded = fewer pending prefill tokens (then a draw) */
    uint32_t less = rb->prefill_tokens < ra->prefill_tokens   ? b
                    : ra->prefill_tokens < rb->prefill_tokens ? a
                    : lr__rng_below(c->rng, 2)                ? b
                                                              : a;
    struct lr__choice ch;
    if (ra->cached_tokens == rb->cached_tokens) {
        ch = lr__choose(c, less, LR_REASON_LEAST_LOADED, me);
    } else {
        uint32_t hi = ra->cached_tokens > rb->cached_tokens ? a : b;
        /* overloaded: its expected TTFT (the stall term included) past
         * the SLO; a stall under the SLO does not switch */
        bool over = c->score[hi] > LR__P(c, TTFT_SLO_S);
        if (!over || hi == less)
            ch = lr__choose(c, hi, LR_REASON_PREFIX_HIT, me);
        else
            ch = lr__choose(c, less, LR_REASON_SLO_SWITCH, me);
    }
    ch.alt = lr__row(c, ch.k == a ? b : a)->instance;
    return ch;
}

/* ---- the rebalancing plan -------------------------------------------------------- */

struct plan {
    const lr_candidate *rows;
    uint32_t n;
    const double *param;
    uint32_t src;     /* the row being relieved */
    size_t src_first; /* its first move in moves[] */
    double *extra;    /* per row: net prefill tokens planned onto it */
    lr_move *moves;
    size_t move_size, n_moves;
    /* the best movable request of the current pass */
    uint64_t best_id;
    uint32_t best_to;
    double best_benefit;
    uint32_t best_unc_here, best_unc_there;
};

static lr_move *
move_at(const struct plan *p, size_t i)
{
    return (lr_move *)((char *)p->moves + i * p->move_size);
}

/* Whether request id already has a move: only the current source's moves
 * can hold it (a request is queued on one instance). */
static bool
planned(const struct plan *p, uint64_t id)
{
    for (size_t i = p->src_first; i < p->n_moves; i++)
        if (move_at(p, i)->request_id == id)
            return true;
    return false;
}

/* Row of an instance id (rows ascending by id), or LR_NIL. */
static uint32_t
row_of(const struct plan *p, uint32_t id)
{
    uint32_t lo = LR__LOWER_BOUND(lr_candidate, instance, p->rows, 0, p->n, id);
    return lo < p->n && p->rows[lo].instance == id ? lo : LR_NIL;
}

/* Expected TTFT of row k with `more` tokens of prefill added. */
static double
ttft_with(const struct plan *p, uint32_t k, double more)
{
    const lr_candidate *r = &p->rows[k];
    return lr__ttft_s(r, (double)r->prefill_tokens + p->extra[k] + more, 0, 1);
}

static int
plan_visit(void *ctx, const struct lr__req_view *v)
{
    struct plan *p = ctx;
    if (!v->queued || v->alt_instance == NONE || planned(p, v->id))
        return 0;
    uint32_t to = row_of(p, v->alt_instance);
    if (to == LR_NIL)
        return 0;
    uint32_t unc_there = v->prompt_tokens - v->alt_cached_tokens;
    double t_here = ttft_with(p, p->src, 0);
    double t_there = ttft_with(p, to, unc_there);
    double benefit = t_here - t_there;
    if (benefit > 0 && t_there < p->param[LR_PARAM_TTFT_SLO_S] &&
        benefit > p->best_benefit) {
        p->best_benefit = benefit;
        p->best_id = v->id;
        p->best_to = to;
        p->best_unc_here = v->prompt_tokens - v->cached_tokens;
        p->best_unc_there = unc_there;
    }
    return 0;
}

/* Overloaded: its queue breaks the SLO, or it is in a decode bottleneck
 * (no prefill done for 3 s while the queue is non-empty). */
static bool
overloaded(const struct plan *p, uint32_t k)
{
    return p->rows[k].stall_s > 0 ||
           ttft_with(p, k, 0) > p->param[LR_PARAM_TTFT_SLO_S];
}

size_t
lr__dualmap_plan(const lr_candidate *rows, uint32_t n, const double *param,
                 const lr_load *ld, double *extra, lr_move *moves,
                 size_t capacity, size_t move_size)
{
    struct plan p = { 0 };
    p.rows = rows;
    p.n = n;
    p.param = param;
    p.extra = extra;
    p.moves = moves;
    p.move_size = move_size;
    memset(extra, 0, n * sizeof *extra);
    for (uint32_t k = 0; k < n && p.n_moves < capacity; k++) {
        p.src = k;
        p.src_first = p.n_moves;
        /* move the best request off k while k is overloaded */
        while (p.n_moves < capacity && overloaded(&p, k)) {
            p.best_benefit = 0;
            p.best_id = 0;
            p.best_to = LR_NIL;
            lr__load_each_req(ld, rows[k].instance, plan_visit, &p);
            if (p.best_to == LR_NIL)
                break;
            lr_move *m = move_at(&p, p.n_moves++);
            m->request_id = p.best_id;
            m->from = rows[k].instance;
            m->to = rows[p.best_to].instance;
            m->benefit_s = p.best_benefit;
            extra[k] -= p.best_unc_here;
            extra[p.best_to] += p.best_unc_there;
        }
    }
    return p.n_moves;
}

/* ---- the state: the hotness window ---------------------------------------------- */

/* Made for a router whose ring key is DualMap's (DualMap, or Lodestar
 * falling back to it): window x key blocks entries, 600 KiB at the
 * defaults. */
static lr_status
hot_create(const struct lr__penv *env, void **out)
{
    struct lr__hot *h = lr__calloc(env->mem, 1, sizeof *h);
    LR_RETURN_IF(h == NULL, LR_ENOMEM);
    h->seed = env->hash_seed;
    lr_status st = lr__hot_setup(
        h, env->mem, (uint32_t)env->param[LR_PARAM_DUALMAP_WINDOW],
        (uint32_t)env->param[LR_PARAM_DUALMAP_MAX_KEY_BLOCKS]);
    if (st != LR_OK) {
        lr__free(env->mem, h, sizeof *h);
        return st;
    }
    *out = h;
    return LR_OK;
}

static void
hot_destroy(void *st, struct lr__mem *m)
{
    lr__hot_free(st, m);
    lr__free(m, st, sizeof(struct lr__hot));
}

/* A window of another size starts again (LR_ENOMEM: the old one stays). */
static lr_status
hot_set_param(void *st, const struct lr__penv *env, int32_t key, double value)
{
    struct lr__hot *h = st;
    if (key == LR_PARAM_DUALMAP_WINDOW)
        return lr__hot_setup(h, env->mem, (uint32_t)value, h->depth);
    if (key == LR_PARAM_DUALMAP_MAX_KEY_BLOCKS)
        return lr__hot_setup(h, env->mem, h->w, (uint32_t)value);
    return LR_OK;
}

/* DualMap's ring key: the deepest hot-enough prefix key, two key blocks
 * at least (the keys are left in v->scratch for the record); a shorter
 * prompt: the hash of its first two key blocks' worth of tokens. */
static uint64_t
hot_ring_key(const void *st, struct lr__route_view *v)
{
    const struct lr__hot *h = st;
    uint32_t key_tokens = (uint32_t)v->param[LR_PARAM_DUALMAP_KEY_TOKENS];
    uint32_t per = key_tokens / v->block_tokens;
    v->n_scratch =
        lr__hot_keys(h, v->keys, v->n_keys, per > 0 ? per : 1, v->scratch);
    if (v->n_scratch == 0)
        return lr__prefix_key(v, lr__hot_first_blocks(h) * key_tokens);
    return lr__hot_pick(h, v->scratch, v->n_scratch);
}

static void
hot_record_placed(void *st, const struct lr__placed *p, uint64_t now_ns)
{
    (void)now_ns;
    if (p->ch.decider == LR_POLICY_DUALMAP && p->v->n_scratch > 0)
        lr__hot_record(st, p->v->scratch, p->v->n_scratch, p->v->fleet);
}

static uint64_t
hot_digest_of(const void *st, uint64_t d)
{
    return lr__hot_digest(st, d);
}

static lr_status
hot_verify_of(const void *st)
{
    return lr__hot_verify(st);
}

const struct lr__pstate_ops lr__dualmap_ops = {
    .create = hot_create,
    .destroy = hot_destroy,
    .set_param = hot_set_param,
    .ring_key = hot_ring_key,
    .record = hot_record_placed,
    .digest = hot_digest_of,
    .verify = hot_verify_of,
};
