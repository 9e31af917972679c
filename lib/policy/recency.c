/* The recency table (recency.h): direct-mapped, one tag and one time per
 * slot. 16k slots of 16 bytes (256 KiB) hold the last boundaries of the
 * routes of the last few seconds of a busy gateway, which is the horizon
 * the readers care about (a half-life of 15 s, a freshness of 10 ms). */
#include "policy/recency.h"

#include "common/lr_hash.h"
#include "policy/policy.h"

#define SLOTS 16384u /* power of two */

struct lr__recency_slot {
    uint64_t tag; /* 0: empty */
    uint64_t ns;
};

lr_status
lr__recency_setup(struct lr__recency *t, struct lr__mem *m)
{
    if (t->slots != NULL)
        return LR_OK;
    t->sum = 0;
    t->slots = lr__calloc(m, SLOTS, sizeof *t->slots);
    return t->slots != NULL ? LR_OK : LR_ENOMEM;
}

void
lr__recency_free(struct lr__recency *t, struct lr__mem *m)
{
    lr__free(m, t->slots, SLOTS * sizeof *t->slots);
    t->slots = NULL;
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

uint64_t
lr__recency_digest(const struct lr__recency *t, uint64_t d)
{
    if (t->slots == NULL)
        return d;
    return lr__digest_mix(d, t->sum);
}

/* ---- the state, behind its operations ------------------------------------------ */

#define RECENCY_MAX_BOUNDARIES 16u /* the last 16 of a route are kept */

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
 * unknown). */
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
