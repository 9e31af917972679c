/** @file
 * lr_ring: the dual consistent-hash ring. Instances are placed on a 64-bit
 * ring by their names (vnodes virtual nodes each), so every gateway replica
 * that knows the same names computes the same candidates without talking
 * to the others. For a key, k independent hash functions each pick the
 * first instance clockwise of their point; when a pick repeats an earlier
 * one, the walk goes on clockwise to the next instance not yet picked. The
 * result is k distinct candidates (fewer only when fewer instances exist).
 *
 * Adding or removing one of n instances changes the candidates of about
 * k/n of the keys, and never those of a key whose candidates neither
 * included the removed instance nor include the added one.
 *
 * Positions (stable across processes and releases):
 *   vnode v of name s: XXH3_64bits_withSeed(v as 4 little-endian bytes
 *                      followed by the bytes of s, 4 + strlen(s),
 *                      0x4c52564e4f444531)
 *   point j of key k:  XXH3_64bits_withSeed(j as 4 little-endian bytes
 *                      followed by k as 8 little-endian bytes, 12,
 *                      0x4c5252494e474b31)
 * The index goes into the bytes, not the seed: for short inputs XXH3 folds
 * the seed in linearly, and per-vnode seeds made similar short names share
 * positions.
 * Equal positions are ordered by name bytes, so the ring never depends on
 * insertion order.
 *
 * Example:
 *   lr_ring *ring;
 *   lr_ring_create(NULL, &ring);
 *   lr_ring_add(ring, "10.0.0.5:8000", 5);
 *   lr_ring_add(ring, "10.0.0.6:8000", 6);
 *   uint32_t cand[2]; uint32_t n;
 *   lr_ring_candidates(ring, key, 2, cand, &n);
 *   lr_ring_destroy(ring);
 *
 * Thread safety: one thread at a time per ring for mutators; the const
 * queries (lr_ring_candidates, lr_ring_count, lr_ring_contains) may run
 * concurrently with each other.
 */
#ifndef LIBROUTE_LR_RING_H
#define LIBROUTE_LR_RING_H

#include "lr_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_ring lr_ring; /* opaque */

/** Most candidates one query returns. @since 0.1 */
#define LR_RING_MAX_K 8u
/** Longest instance name in bytes, without the NUL. @since 0.1 */
#define LR_RING_MAX_NAME 255u
/** Most virtual nodes per instance. @since 0.1 */
#define LR_RING_MAX_VNODES 4096u

/** Options fixed at creation; zero means the default. @since 0.1 */
typedef struct lr_ring_options {
    size_t struct_size;
    const lr_allocator *allocator; /* borrowed, copied; NULL = libc */
    uint32_t vnodes;               /* per instance; default 160 */
    uint32_t max_instances;        /* default 4096, at most 65536; an add
                                      or remove costs O(vnodes x log) */
    /* v1 ends here */
} lr_ring_options;

#define LR_RING_OPTIONS_SIZE_V1 \
    (offsetof(lr_ring_options, max_instances) + sizeof(uint32_t))
#ifndef __cplusplus
#define LR_RING_OPTIONS_INIT \
    { .struct_size = sizeof(lr_ring_options) }
#endif
/** Fill with defaults and set struct_size = size. Never fails on non-NULL.
 * Use the lr_ring_options_init() macro, which passes the caller's
 * sizeof. @since 0.2 */
LR_API void lr_ring_options_init_sized(lr_ring_options *opt, size_t size);
#define lr_ring_options_init(opt) \
    lr_ring_options_init_sized((opt), sizeof *(opt))

/** Create an empty ring.
 * @param opt borrowed; NULL means defaults.
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_ENOMEM. @since 0.1 */
LR_API lr_status lr_ring_create(const lr_ring_options *opt, lr_ring **out);

/** Destroy a ring. NULL is a no-op. @since 0.1 */
LR_API void lr_ring_destroy(lr_ring *ring);

/** Place an instance on the ring.
 * @param name  NUL-terminated, 1..LR_RING_MAX_NAME bytes; copied.
 * @param id    host-chosen id returned by queries; not LR_INSTANCE_NONE
 *              (UINT32_MAX).
 * @return LR_OK; LR_EINVAL; LR_EEXIST (name or id already placed);
 *   LR_ELIMIT (max_instances); LR_ENOMEM. On failure nothing changes.
 * @since 0.1 */
LR_API lr_status lr_ring_add(lr_ring *ring, const char *name, uint32_t id);

/** Take an instance off the ring.
 * @return LR_OK; LR_EINVAL; LR_ENOENT. Never LR_ENOMEM: removal only
 *   compacts. @since 0.1 */
LR_API lr_status lr_ring_remove(lr_ring *ring, uint32_t id);

/** Instances on the ring. Never fails; 0 for NULL. @since 0.1 */
LR_API uint32_t lr_ring_count(const lr_ring *ring);

/** Whether an id is on the ring: 1 or 0. Never fails. @since 0.1 */
LR_API int lr_ring_contains(const lr_ring *ring, uint32_t id);

/** The k distinct candidates for a key, in hash-function order (out[0] is
 * hash 0's pick).
 * @param k      1..LR_RING_MAX_K.
 * @param out    out: at least k entries.
 * @param n_out  out: min(k, instances on the ring).
 * @return LR_OK; LR_EINVAL (nothing written); LR_ESTATE (the ring is
 *   empty; *n_out = 0). @since 0.1 */
LR_API lr_status lr_ring_candidates(const lr_ring *ring, uint64_t key,
                                    uint32_t k, uint32_t *out, uint32_t *n_out);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_RING_H */
