/* lr_index, the search (index_find.c): the read-only lookups of a
 * prompt's keys in the tree of prefixes, for the layers above the store.
 * Each takes the counter its lookups are added to (the node-table probes
 * of lr__index_last_probes(), or a reader's own), so that none writes the
 * index. */
#ifndef LIBROUTE_LIB_INDEX_FIND_H
#define LIBROUTE_LIB_INDEX_FIND_H

#include "common/common.h"
#include "libroute/lr_index.h"

/* The child of node x (LR_NIL: the root) under `key`, or LR_NIL: the
 * next node of x's run, or the first node of a run hanging from x (the
 * table holds those; *probes counts the table lookups). */
uint32_t lr__index_child_of(const lr_index *ix, uint32_t x, uint64_t key,
                            uint32_t *probes);

/* The deepest present node along keys[lo, hi) (depths lo+1..hi below
 * the node keys hang from), given that depth lo is (lo_node its node,
 * LR_NIL for the root): a binary search over the depths the node table
 * holds (TAB_STRIDE), then a walk of at most TAB_STRIDE - 1 blocks along
 * the runs. Returns that depth; *node_out its node; adds the lookups to
 * *probes. */
uint32_t lr__index_deepest(const lr_index *ix, const uint64_t *keys,
                           uint32_t lo, uint32_t hi, uint32_t lo_node,
                           uint32_t *node_out, uint32_t *probes);

/* The node of keys[t - 1] (keys hanging from node base, LR_NIL for the
 * root; base itself when t is 0), or LR_NIL when the index does not hold
 * that deep; adds the lookups to *probes. */
uint32_t lr__index_chain_node(const lr_index *ix, const uint64_t *keys,
                              uint32_t t, uint32_t base, uint32_t *probes);

/* Instance s's deepest depth on the path from the root to node n, 0 when
 * it holds none of it; *run_out and *pos_out name the block (LR_NIL when
 * 0). */
uint32_t lr__index_depth_on(const lr_index *ix, uint32_t s, uint32_t n,
                            uint32_t *run_out, uint32_t *pos_out);

#endif /* LIBROUTE_LIB_INDEX_FIND_H */
