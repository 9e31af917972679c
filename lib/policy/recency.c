/* The recency table (recency.h): direct-mapped, one tag and one time per
 * slot. 16k slots of 16 bytes (256 KiB) hold the last boundaries of the
 * routes of the last few seconds of a busy gateway, which is the horizon
 * the readers care about (a half-life of 15 s, a freshness of 10 ms). */
#include "policy/recency.h"

#include "common/lr_hash.h"
#include "policy/policy.h"

#define SLOTS 16384u               /* power of two */
#define RECENCY_MAX_BOUNDARIES 16u /* the last 16 of a route are kept */

struct lr__recency_slot {
    uint64_t tag; /* 0: empty */
    uint64_t ns;
};

/* The branch table: as many slots, 32 bytes each (512 KiB). */
#define BR_SLOTS 16384u
struct lr__branch_slot {
    uint64_t tag;  /* 0: empty */
    uint64_t next; /* the key of the prompt's block after the boundary */
    uint64_t ns;
    uint32_t tip_blocks; /* its blocks */
    uint32_t pad;
};
/* A sibling routed longer ago than this is taken to have ended (its
 * conversation's next turn would have come): 30 s, a few turns' think
 * time. */
#define BR_LIVE_NS 30000000000ull
/* The deepest boundaries of a hit looked at for a fork. */
#define BR_FORK_LOOKS 4u

lr_status
lr__recency_setup(struct lr__recency *t, struct lr__mem *m)
{
    if (t->slots != NULL)
        return LR_OK;
    t->sum = 0;
    t->br_sum = 0;
    t->slots = lr__calloc(m, SLOTS, sizeof *t->slots);
    t->br = lr__calloc(m, BR_SLOTS, sizeof *t->br);
    if (t->slots == NULL || t->br == NULL) {
        lr__recency_free(t, m);
        return LR_ENOMEM;
    }
    return LR_OK;
}

void
lr__recency_free(struct lr__recency *t, struct lr__mem *m)
{
    lr__free(m, t->slots, SLOTS * sizeof *t->slots);
    lr__free(m, t->br, BR_SLOTS * sizeof *t->br);
    t->slots = NULL;
    t->br = NULL;
}

/* Not keyed by the router's hash seed, unlike its hash tables: which
 * pairs this lossy table keeps changes what Lodestar and adaptive read,
 * so a random slot function would make decisions differ between runs
 * (B24). Aimed keys cannot make it slower (one slot per lookup); at worst
 * they knock pairs out, which reads as "not routed there lately". */
static inline uint64_t
tag_of(uint64_t key, uint32_t id)
{
    return lr__mix64(key, (uint64_t)id + 1) | 1;
}

/* What a slot adds to the running sum (0 for an empty slot). */
static inline uint64_t
slot_sum(const struct lr__recency_slot *e, size_t i)
{
    return e->tag == 0
               ? 0
               : lr__mix64(e->tag ^ lr__mix64(e->ns, i), 0x9e3779b97f4a7c15ull);
}

double
lr__recency_age(const struct lr__recency *t, uint64_t key, uint32_t id,
                uint64_t now_ns)
{
    if (t->slots == NULL)
        return -1;
    uint64_t tag = tag_of(key, id);
    const struct lr__recency_slot *e = &t->slots[tag & (SLOTS - 1)];
    if (e->tag != tag)
        return -1;
    return now_ns > e->ns ? (double)(now_ns - e->ns) / 1e9 : 0;
}

void
lr__recency_remember(struct lr__recency *t, const uint64_t *keys, size_t n_keys,
                     uint32_t id, uint64_t now_ns)
{
    if (t->slots == NULL)
        return;
    for (size_t i = 0; i < n_keys; i++) {
        uint64_t tag = tag_of(keys[i], id);
        size_t at = tag & (SLOTS - 1);
        struct lr__recency_slot *e = &t->slots[at];
        t->sum -= slot_sum(e, at);
        e->tag = tag;
        e->ns = now_ns;
        t->sum += slot_sum(e, at);
    }
}

/* ---- branches ------------------------------------------------------------------ */

/* A branch slot's tag: the pair's, apart from the age table's. */
static inline uint64_t
br_tag(uint64_t key, uint32_t id)
{
    return tag_of(key ^ 0x6272616e63686573ull /* "branches" */, id);
}

static inline uint64_t
br_slot_sum(const struct lr__branch_slot *e, size_t i)
{
    return e->tag == 0 ? 0
                       : lr__mix64(e->tag ^ lr__mix64(e->ns ^ e->next, i),
                                   (uint64_t)e->tip_blocks + 1);
}

static const struct lr__branch_slot *
br_find(const struct lr__recency *t, uint64_t key, uint32_t id)
{
    uint64_t tag = br_tag(key, id);
    const struct lr__branch_slot *e = &t->br[tag & (BR_SLOTS - 1)];
    return e->tag == tag ? e : NULL;
}

/* Whether the prompt in e, through v's block b (1-based), went on along
 * another path than v's: a prompt that goes on as v does is v's own
 * history or its continuation, and one of them a prefix of the other. */
static inline bool
br_other(const struct lr__branch_slot *e, const struct lr__route_view *v,
         size_t b)
{
    return b < v->n_keys && v->keys[b] != e->next;
}

void
lr__recency_siblings(const struct lr__recency *t, lr_candidate *c,
                     const struct lr__route_view *v, uint64_t now_ns)
{
    uint32_t B = v->block_tokens;
    size_t cb = c->cached_tokens / B;
    if (t->br == NULL || cb == 0 || cb > v->n_keys)
        return;
    /* past the hit's end: a sibling there is overwritten by this route */
    const struct lr__branch_slot *e = br_find(t, v->keys[cb - 1], c->instance);
    /* a record stamped after now (threads race) is live */
    if (e != NULL && br_other(e, v, cb) &&
        (e->ns > now_ns || now_ns - e->ns < BR_LIVE_NS) && e->tip_blocks > cb &&
        2 * cb >= e->tip_blocks)
        c->sibling_tokens = (uint32_t)((e->tip_blocks - cb) * B);
    /* within the hit: a sibling there since overwrote this prompt's last
     * (the deepest boundaries in the hit's upper half) */
    const lr_request *q = v->q;
    uint32_t looks = 0;
    for (size_t i = lr__boundaries_before(q, (uint32_t)(cb * B));
         i-- > 0 && looks < BR_FORK_LOOKS;) {
        size_t b = q->boundaries[i] / B;
        if (b == 0 || 2 * b < cb)
            break;
        looks++;
        e = br_find(t, v->keys[b - 1], c->instance);
        if (e != NULL && br_other(e, v, b)) {
            c->sibling_fork_tokens = (uint32_t)(b * B);
            break;
        }
    }
}

void
lr__recency_branch(struct lr__recency *t, const struct lr__route_view *v,
                   uint32_t id, uint64_t now_ns)
{
    const lr_request *q = v->q;
    if (t->br == NULL || v->n_keys == 0)
        return;
    size_t first = q->n_boundaries > RECENCY_MAX_BOUNDARIES
                       ? q->n_boundaries - RECENCY_MAX_BOUNDARIES
                       : 0;
    for (size_t i = first; i < q->n_boundaries; i++) {
        size_t b = q->boundaries[i] / v->block_tokens;
        if (b == 0 || b >= v->n_keys)
            continue;
        uint64_t tag = br_tag(v->keys[b - 1], id);
        size_t at = tag & (BR_SLOTS - 1);
        struct lr__branch_slot *e = &t->br[at];
        t->br_sum -= br_slot_sum(e, at);
        e->tag = tag;
        e->next = v->keys[b];
        e->ns = now_ns;
        e->tip_blocks = (uint32_t)v->n_keys;
        t->br_sum += br_slot_sum(e, at);
    }
}

uint64_t
lr__recency_digest(const struct lr__recency *t, uint64_t d)
{
    if (t->slots == NULL)
        return d;
    return lr__digest_mix(lr__digest_mix(d, t->sum), t->br_sum);
}

/* ---- the state, behind its operations ------------------------------------------ */

static lr_status
rec_create(const struct lr__penv *env, void **out)
{
    struct lr__recency *t = lr__calloc(env->mem, 1, sizeof *t);
    LR_RETURN_IF(t == NULL, LR_ENOMEM);
    if (lr__recency_setup(t, env->mem) != LR_OK) {
        lr__free(env->mem, t, sizeof *t);
        return LR_ENOMEM;
    }
    *out = t;
    return LR_OK;
}

static void
rec_destroy(void *st, struct lr__mem *m)
{
    lr__recency_free(st, m);
    lr__free(m, st, sizeof(struct lr__recency));
}

/* Each cached prefix's age: seconds since a route through it (negative:
 * unknown); and its siblings. */
static void
rec_gather(const void *st, lr_candidate *rows, uint32_t n,
           struct lr__route_view *v, uint64_t now_ns)
{
    for (uint32_t k = 0; k < n; k++) {
        lr_candidate *c = &rows[k];
        size_t blocks = c->cached_tokens / v->block_tokens;
        if (blocks > 0 && blocks <= v->n_keys)
            c->cached_age_s =
                lr__recency_age(st, v->keys[blocks - 1], c->instance, now_ns);
        lr__recency_siblings(st, c, v, now_ns);
    }
}

/* While the router's policy reads ages: the placement's prefixes, its
 * last boundaries and its whole length. */
static void
rec_record(void *st, const struct lr__placed *p, uint64_t now_ns)
{
    const struct lr__route_view *v = p->v;
    const lr_request *q = v->q;
    if (v->n_keys == 0 || !p->rows[p->k].prefix_caching ||
        !(v->needs & LR__NEEDS_AGE))
        return;
    uint64_t keys[RECENCY_MAX_BOUNDARIES + 1];
    size_t n = 0;
    size_t first = q->n_boundaries > RECENCY_MAX_BOUNDARIES
                       ? q->n_boundaries - RECENCY_MAX_BOUNDARIES
                       : 0;
    for (size_t i = first; i <= q->n_boundaries; i++) {
        size_t b = i < q->n_boundaries ? q->boundaries[i] / v->block_tokens
                                       : v->n_keys;
        if (b > 0 && b <= v->n_keys)
            keys[n++] = v->keys[b - 1];
    }
    lr__recency_remember(st, keys, n, p->rows[p->k].instance, now_ns);
    lr__recency_branch(st, v, p->rows[p->k].instance, now_ns);
    /* a split request's prefill instance computes the prefix too */
    if (p->ch.kp != LR_NIL && p->rows[p->ch.kp].prefix_caching)
        lr__recency_remember(st, keys, n, p->rows[p->ch.kp].instance, now_ns);
}

static uint64_t
rec_digest(const void *st, uint64_t d)
{
    return lr__recency_digest(st, d);
}

const struct lr__pstate_ops lr__recency_ops = {
    .create = rec_create,
    .destroy = rec_destroy,
    .gather = rec_gather,
    .record = rec_record,
    .digest = rec_digest,
};
