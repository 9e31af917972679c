/* lr_index, learn (index_learn.c): the two phases of a learn that the
 * other mutators which add holds (the KV events of precise mode) share,
 * and the journal of LOCAL learns that delta exports read. */
#ifndef LIBROUTE_LIB_INDEX_LEARN_H
#define LIBROUTE_LIB_INDEX_LEARN_H

#include "common/common.h"
#include "libroute/lr_index.h"

/* One LOCAL learn, for lr_index_export_delta(): its deepest key, the
 * instance and the key's node then (the key tells whether it still is). */
struct jent {
    uint64_t key;
    uint32_t inst_id;
    uint32_t node;
};

struct learn_plan {
    uint32_t s;    /* instance slot; LR_NIL: a new instance */
    uint32_t id;   /* instance id (a slot is added for it if new) */
    uint32_t base; /* node the keys hang from, LR_NIL for the root (s
                      holds it) */
    const uint64_t *keys;
    uint32_t n;              /* keys to hold */
    const uint32_t *anchors; /* ascending depths in 1..n */
    uint32_t n_anchors;
    bool remote;
    bool all_anchors; /* every block is an anchor (anchors unused) */
    /* filled by lr__index_plan_learn */
    uint32_t d_s, d_any;     /* depths below base held by s, by anyone */
    uint32_t node_any;       /* node at d_any (base when 0) */
    uint32_t ds_run, ds_pos; /* s's block at d_s (on base when 0), or
                                LR_NIL when s holds nothing there */
    uint32_t nseg;           /* ix->path[0, nseg): the stretches of the
                                path below d_s to d_any, deepest first */
    /* filled by lr__index_apply_learn */
    uint32_t node_n; /* node at depth n (base when n is 0) */
};

/* Phase 1: find where the instance's holds and anybody's end and reserve
 * the memory (the only step that can fail; LR_ENOMEM changes nothing
 * logical). Phase 2: add the instance if new and the holds, anchors at
 * p->anchors; returns the deepest span (LR_NIL when n is 0), stamped and
 * at the head of its list. Phase 3 is lr__index_settle (index_evict.h). */
lr_status lr__index_plan_learn(lr_index *ix, struct learn_plan *p);
uint32_t lr__index_apply_learn(lr_index *ix, struct learn_plan *p,
                               uint32_t tick);

#endif /* LIBROUTE_LIB_INDEX_LEARN_H */
