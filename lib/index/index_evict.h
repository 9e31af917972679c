/* lr_index, removal (index_evict.c): the third phase of every mutator
 * (settle: expiry, then eviction down to capacity) and the removals the
 * KV events and the instance calls make. None of it can fail. */
#ifndef LIBROUTE_LIB_INDEX_EVICT_H
#define LIBROUTE_LIB_INDEX_EVICT_H

#include "common/common.h"
#include "libroute/lr_index.h"

/* Why blocks go: the counter they are added to (evicted, expired, none). */
enum {
    WHY_EVICT,
    WHY_EXPIRE,
    WHY_DROP
};

/* Expire and evict back under capacity at `tick`; the expiry half alone
 * (drop every route unused for its TTL). */
void lr__index_settle(lr_index *ix, uint32_t tick);
void lr__index_expire_all(lr_index *ix, uint32_t tick);
/* Remove leaf span x's bottom block and trim upward (precise: back to the
 * engine block boundary, whatever the stamps). Preserves the invariants. */
void lr__index_remove_leaf_and_trim(lr_index *ix, uint32_t x, int why,
                                    bool precise);
/* Whether instance s holds, strictly below offset p of run r (which s
 * holds), a leaf none of whose m deepest blocks (down to p at most)
 * carries an engine hash of s: a route learned past what the engine
 * stored, a request routed there whose prefill has not been stored. No
 * stack; O(s's runs below p). */
bool lr__index_unstored_below(const lr_index *ix, uint32_t s, uint32_t r,
                              uint32_t p, uint32_t m);
/* Drop every hold of instance s strictly below offset p of run r (which s
 * holds); returns the span whose bottom is now p. */
uint32_t lr__index_remove_below(lr_index *ix, uint32_t s, uint32_t r,
                                uint32_t p);
/* Drop every route and engine hash of instance id `instance`; *slot is
 * its slot, which stays in use. LR_EINVAL, LR_ENOENT (never seen). */
lr_status lr__index_clear(lr_index *idx, uint32_t instance, uint32_t *slot);

#endif /* LIBROUTE_LIB_INDEX_EVICT_H */
