/* DualMap's state and plans, for the router: the hotness window that
 * chooses the hash key, and the rebalancing plan. The decide function is
 * lr__dualmap_decide (policy.h). */
#ifndef LIBROUTE_LIB_DUALMAP_H
#define LIBROUTE_LIB_DUALMAP_H

#include "common/common.h"
#include "common/table.h"
#include "libroute/lr_router.h"
#include "parts/load.h"

/* The last `w` requests' prefix keys at each of `depth` key depths, with
 * a count and a hot flag per key. A key is hot when its share of the
 * window passes 2/n (n routable instances) and cold again below 1/n. */
struct lr__hot {
    uint64_t seed;            /* keys the table: the router's hash seed */
    struct lr__hot_ent *pool; /* w x depth entries: one per distinct key */
    uint32_t *free;           /* stack of unused pool entries */
    uint32_t n_free;
    struct lr__table tab; /* key -> pool entry */
    uint64_t *win;        /* w x depth keys, 0 = none */
    uint32_t w, depth, pos, filled;
};

/* (Re)build the window for `w` requests of `depth` keys; LR_ENOMEM leaves
 * the old one in place. The counts start again from empty. */
lr_status lr__hot_setup(struct lr__hot *h, struct lr__mem *m, uint32_t w,
                        uint32_t depth);
void lr__hot_free(struct lr__hot *h, struct lr__mem *m);

/* Key blocks of the shortest key: 2 (DualMap's A.2.1), or the depth when
 * that is 1. */
uint32_t lr__hot_first_blocks(const struct lr__hot *h);

/* The prompt's keys (blocks of `per` index blocks, never 0), from its
 * first lr__hot_first_blocks() key blocks up to `depth` key blocks, into
 * keys[]; returns how many it has (0: the prompt is shorter than the
 * shortest key). */
uint32_t lr__hot_keys(const struct lr__hot *h, const uint64_t *block_keys,
                      size_t n_blocks, uint32_t per, uint64_t *keys);

/* The ring key: the deepest key whose every shallower key is hot. n >= 1. */
uint64_t lr__hot_pick(const struct lr__hot *h, const uint64_t *keys,
                      uint32_t n);

/* Record one request's keys (n of them) in the window (none made: a
 * no-op), with `routable`
 * instances setting the thresholds. */
void lr__hot_record(struct lr__hot *h, const uint64_t *keys, uint32_t n,
                    uint32_t routable);

/* Counts equal the window's contents: LR_OK or LR_ECORRUPT. */
lr_status lr__hot_verify(const struct lr__hot *h);
uint64_t lr__hot_digest(const struct lr__hot *h, uint64_t d);

/* The rebalancing plan over a candidate table sorted by instance id (the
 * router's), with the load tracker's queued requests: moves of queued
 * requests off instances whose queue breaks the TTFT SLO (or is in a
 * decode bottleneck) to their other candidate, where the request's TTFT
 * would be below the SLO and lower, by descending benefit, until each
 * source meets the SLO. `extra` is scratch for n doubles. Writes at most
 * `capacity` moves of `move_size` bytes; returns how many. */
size_t lr__dualmap_plan(const lr_candidate *rows, uint32_t n,
                        const double *param, const lr_load *ld, double *extra,
                        lr_move *moves, size_t capacity, size_t move_size);

#endif /* LIBROUTE_LIB_DUALMAP_H */
