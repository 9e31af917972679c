/* Where each prompt went, cheaper than the index's chains: one mark per
 * learned prompt, the key of its deepest multiple of LR__MARK_STRIDE
 * blocks and the instance it was learned at. The index holds every block
 * of a prompt (about 12 B each); when it is smaller than what the fleet
 * caches it drops whole chains, least recently used first, and a
 * conversation's next turn, seconds later, finds only what every prompt
 * shares. Its mark (24 B) survives far longer: the next turn's prompt
 * holds the last one's whole, so one of its own multiples of the stride
 * is that mark's key, and the route learns that the instance held at
 * least that much.
 *
 * A table of sets of LR__MARK_WAYS, the oldest of a set replaced; keyed
 * with the router's hash seed. A mark older than the index's TTL, or of
 * an instance whose cache went since (it left, its engine cleared or
 * restarted: the router's marks generation for it moved), counts for
 * nothing. Made at the router's create; the request path never
 * allocates. Read under the index's read lock, written under its write
 * lock (the learn's). */
#ifndef LIBROUTE_LIB_ROUTER_MARKS_H
#define LIBROUTE_LIB_ROUTER_MARKS_H

#include "common/common.h"

#define LR__MARK_STRIDE 16u /* blocks between the depths a mark can be at */
#define LR__MARK_WAYS 4u

struct lr__mark {
    uint64_t key; /* 0: empty */
    uint64_t at_ns;
    uint32_t inst, gen;
};

struct lr__marks {
    struct lr__mark *m; /* (mask + 1) x LR__MARK_WAYS */
    uint64_t mask;      /* sets - 1 */
    uint64_t seed;
};

/* A table for about `entries` marks (a power of two of sets, at least
 * one). LR_ENOMEM: t is left zeroed. */
lr_status lr__marks_init(struct lr__marks *t, struct lr__mem *mem,
                         uint64_t entries, uint64_t seed);
void lr__marks_free(struct lr__marks *t, struct lr__mem *mem);

/* A prompt of n block keys was learned at instance `inst` (generation
 * gen) at now_ns: its mark, when it is LR__MARK_STRIDE blocks or more. */
void lr__marks_put(struct lr__marks *t, const uint64_t *keys, size_t n,
                   uint32_t inst, uint32_t gen, uint64_t now_ns);

/* For each mark found at a multiple of the stride of the n keys, deepest
 * first, not older than ttl_ns at now_ns: fn(ctx, inst, gen, depth in
 * blocks). */
void lr__marks_find(const struct lr__marks *t, const uint64_t *keys, size_t n,
                    uint64_t now_ns, uint64_t ttl_ns,
                    void (*fn)(void *ctx, uint32_t inst, uint32_t gen,
                               size_t depth),
                    void *ctx);

/* The marks in use (a walk: tests). */
uint64_t lr__marks_count(const struct lr__marks *t);

#endif /* LIBROUTE_LIB_ROUTER_MARKS_H */
