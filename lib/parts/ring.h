/* Internal interface of the consistent-hash ring (lib/parts/ring.c). Never
 * installed; tests and fuzzers reach it through the internal archive. */
#ifndef LIBROUTE_LIB_RING_H
#define LIBROUTE_LIB_RING_H

#include "common/common.h"
#include "libroute/lr_ring.h"

/* Largest max_instances (the public header states the number in prose
 * only). Slot and table indices rely on it: 65536 * LR_RING_MAX_VNODES
 * entries fit in 32 bits. */
#define LR__RING_MAX_INSTANCES 65536u

/* lr_ring_add with the vnode positions given instead of hashed: `pos` holds
 * exactly the ring's vnodes count of positions (borrowed); NULL means the
 * documented XXH3 positions, which is what lr_ring_add passes. Tests use
 * explicit positions to force ties and wrap-around, which 64-bit hashes
 * never produce. Once used, lr__ring_verify stops checking that positions
 * equal the hashes of the names. Same statuses and atomicity as
 * lr_ring_add. */
lr_status lr__ring_add_at(lr_ring *r, const char *name, uint32_t id,
                          const uint64_t *pos);

/* Place n instances at once: names[i] (borrowed, copied) gets ids[i].
 * The result is the ring, digest included, that adding them one by one in
 * any order makes, built in O(total) for hashed positions (O(total log
 * total) at worst) instead of n adds: every entry, old and new, is
 * counted into buckets by its top bits, scattered into fresh leaves and
 * sorted within its bucket. For filling an empty ring (a snapshot
 * restore); on a full one it still rebuilds every leaf, and memory peaks
 * at the old leaves plus the new. All or nothing (B11): LR_OK; LR_EINVAL
 * (r NULL; names or ids NULL with n > 0; any name or id that lr_ring_add
 * refuses as such), checked first; then LR_ELIMIT (count + n >
 * max_instances); then, entering the batch in order, LR_EEXIST (a name or
 * id already placed or repeated in the batch) or LR_ENOMEM. n = 0 is
 * LR_OK and changes nothing. */
lr_status lr__ring_add_many(lr_ring *r, const char *const *names,
                            const uint32_t *ids, size_t n);

/* lr__ring_add_many with explicit positions, as lr__ring_add_at: instance
 * i's vnodes count of positions at pos[i * vnodes] (borrowed; NULL means
 * the documented ones). */
lr_status lr__ring_add_many_at(lr_ring *r, const char *const *names,
                               const uint32_t *ids, size_t n,
                               const uint64_t *pos);

/* Walk every invariant of the ring (B34): LR_OK, or LR_ECORRUPT naming
 * nothing (debug builds assert first). LR_EINVAL for NULL. Reentrant on a
 * ring nobody is mutating. */
lr_status lr__ring_verify(const lr_ring *r);

/* Checksum of the ring's observable state: options, the instance set
 * (name, id) and the sorted vnode array. It does not depend on insertion
 * order, so two rings holding the same instances have equal digests, and a
 * failed call must leave it unchanged (B33). 0 for NULL. Never fails. */
uint64_t lr__ring_digest(const lr_ring *r);

/* Bytes currently allocated through the ring's allocator, itself
 * included. 0 for NULL. Never fails. */
size_t lr__ring_mem_live(const lr_ring *r);

/* Steps mutators have taken since creation: entries moved or merged,
 * jump-table slots written, leaves stepped over while searching. Tests
 * use it to show, deterministically, that an add's or a removal's cost
 * does not grow with the ring. 0 for NULL. Never fails. */
uint64_t lr__ring_work(const lr_ring *r);

#endif /* LIBROUTE_LIB_RING_H */
