/* The recency table (recency.h): direct-mapped, one tag and one time per
 * slot. 16k slots of 16 bytes (256 KiB) hold the last boundaries of the
 * routes of the last few seconds of a busy gateway, which is the horizon
 * the readers care about (a half-life of 15 s, a freshness of 10 ms). */
#include "policy/recency.h"

#include "common/lr_hash.h"

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
