/* Instances ordered by a load key, in buckets: who holds the least, in
 * O(1) per change and O(what is asked) per question, whatever the size
 * of the fleet.
 *
 * Each member is in one bucket, a doubly linked list; the key's bucket
 * is the caller's (lr__order_bucket_tokens() for token counts, the value
 * itself clamped for small counts). The counts per bucket give the
 * least, the most and any rank of the bucketed keys without a walk over
 * the members. Everything is made at init, so that changes never
 * allocate. */
#ifndef LIBROUTE_LIB_PARTS_ORDER_H
#define LIBROUTE_LIB_PARTS_ORDER_H

#include "common/common.h"

/* Buckets lr__order_bucket_tokens() uses. */
#define LR__ORDER_TOKEN_BUCKETS 496u

struct lr__order {
    uint32_t max_id, nb;
    uint32_t n;                    /* members */
    uint32_t lo, hi;               /* no member in a bucket below lo or
                                      above hi (hi < lo: none) */
    uint32_t *head, *tail, *cnt;   /* nb */
    uint32_t *next, *prev, *where; /* max_id; where: the member's bucket,
                                      UINT32_MAX when not a member */
};

/* Buckets 0 .. nb-1 for ids 0 .. max_id-1, empty. LR_ENOMEM: o is left
 * zeroed (lr__order_free is a no-op on it). */
lr_status lr__order_init(struct lr__order *o, struct lr__mem *m,
                         uint32_t max_id, uint32_t nb);
void lr__order_free(struct lr__order *o, struct lr__mem *m);

/* Put id (< max_id) in bucket b (clamped to nb - 1), a member or not. */
void lr__order_set(struct lr__order *o, uint32_t id, uint32_t b);
/* Take id out (a no-op when it is not a member). */
void lr__order_drop(struct lr__order *o, uint32_t id);
/* Whether id is a member. */
static inline bool
lr__order_has(const struct lr__order *o, uint32_t id)
{
    return id < o->max_id && o->where[id] != UINT32_MAX;
}

/* Up to `cap` members from the lowest buckets up into ids[], and how
 * many. Within a bucket, the longest there first: among equals, those
 * whose load moved last come last, so that ties go round the bucket
 * rather than to the instance that just finished a request. */
uint32_t lr__order_least(const struct lr__order *o, uint32_t *ids,
                         uint32_t cap);

/* The bucket of the k-th member (0-based) in bucket order; k < n. */
uint32_t lr__order_rank(const struct lr__order *o, uint32_t k);

/* The bucket of a token count: exact up to 7, then eight buckets per
 * power of two (within 12.5%), monotone. */
static inline uint32_t
lr__order_bucket_tokens(uint64_t v)
{
    if (v < 8)
        return (uint32_t)v;
    uint32_t e = 63u - (uint32_t)__builtin_clzll(v); /* >= 3 */
    return (e - 2u) * 8u + (uint32_t)((v >> (e - 3u)) & 7u);
}

/* LR_OK, or LR_ECORRUPT when a list, a count or a hint disagrees. */
lr_status lr__order_verify(const struct lr__order *o);

#endif /* LIBROUTE_LIB_PARTS_ORDER_H */
