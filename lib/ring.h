/* Internal interface of the consistent-hash ring (lib/ring.c). Never
 * installed; tests and fuzzers reach it through the internal archive. */
#ifndef LIBROUTE_LIB_RING_H
#define LIBROUTE_LIB_RING_H

#include "common.h"
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
