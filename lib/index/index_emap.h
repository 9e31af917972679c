/* lr_index, the engine-hash map of precise mode (index_emap.c):
 * (instance slot, engine hash) -> the node of that engine block, for the
 * KV events, the layers that remove holds (which must forget their
 * hashes) and the snapshot. */
#ifndef LIBROUTE_LIB_INDEX_EMAP_H
#define LIBROUTE_LIB_INDEX_EMAP_H

#include "common/common.h"
#include "libroute/lr_index.h"

/* The node slot instance slot s maps engine hash `ehash` to, or LR_NIL. */
uint32_t lr__index_emap_find(const lr_index *ix, uint32_t s, uint64_t ehash);
/* Whether instance slot s maps an engine hash to node n. */
bool lr__index_emap_has(const lr_index *ix, uint32_t s, uint32_t n);
/* Room for `more` new entries (LR_ENOMEM changes nothing logical); set
 * one, replacing s's entry for ehash (room reserved). */
lr_status lr__index_emap_reserve(lr_index *ix, uint32_t more);
void lr__index_emap_put(lr_index *ix, uint32_t s, uint64_t ehash,
                        uint32_t node);
/* Instance s no longer holds offsets [from, to) of run r (called before
 * the nodes may go): forget their hashes. */
void lr__index_emap_forget(lr_index *ix, uint32_t s, uint32_t r, uint32_t from,
                           uint32_t to);
/* Every entry of s is gone (they go with its holds: nothing to do). */
void lr__index_emap_drop(lr_index *ix, uint32_t s);
/* Live entries; free the map (the per-slot arrays are the store's). */
uint64_t lr__index_emap_live(const lr_index *ix);
void lr__index_emap_free(lr_index *ix);
/* An order-independent checksum of the entries; the map's invariants
 * (LR_OK or LR_ECORRUPT); every entry (instance slot, engine hash, node
 * slot of its block), for snapshots. */
uint64_t lr__index_emap_digest(const lr_index *ix);
lr_status lr__index_emap_verify(const lr_index *ix);
void lr__index_emap_each(const lr_index *ix,
                         void (*fn)(void *ctx, uint32_t s, uint64_t ehash,
                                    uint32_t node),
                         void *ctx);

#endif /* LIBROUTE_LIB_INDEX_EMAP_H */
