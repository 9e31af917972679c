/* A large fleet's routes weigh a few candidates: the routable instances
 * kept in load order (five orders, each O(1) per change), and the
 * fleet's in-flight figures that the policies' fleet-wide rules read.
 * route.c builds a route's candidates from them; every call that changes
 * an instance's load puts it back in its buckets (router.c,
 * lr__router_fleet_touch) from the row a route would gather for it at
 * the router's newest time, under the router's write lock, and routes
 * read the orders under the read lock.
 *
 * A key is as fresh as the instance's last change: a scrape that ages
 * out or a peer's gauge that expires moves its row, not its bucket,
 * until its next change. The rows a narrowed route gathers are read
 * fresh, so a stale key can only leave an instance out of the few,
 * never misstate it. */
#ifndef LIBROUTE_LIB_ROUTER_NARROW_H
#define LIBROUTE_LIB_ROUTER_NARROW_H

#include "common/common.h"
#include "parts/order.h"
#include "policy/policy.h"

/* The orders, one per LR__NARROW_* load measure. */
#define LR__ORDER_INFLIGHT 0u /* requests in flight, its own and peers' */
#define LR__ORDER_LOAD 1u     /* that + the engine's running and waiting */
#define LR__ORDER_BACKLOG 2u  /* uncached prompt tokens queued */
#define LR__ORDER_QUEUE                                           \
    3u                  /* before their first token: the engine's \
                           waiting or the router's queued, the more */
#define LR__ORDER_KV 4u /* the engine's KV use, in thousandths */
#define LR__ORDERS 5u
/* Buckets of the count orders: exact below, the last one "this or more" */
#define LR__ORDER_COUNTS 1024u

struct lr__fleet {
    struct lr__order o[LR__ORDERS];
    uint32_t *inflight; /* max_inst: each member's in flight, exact */
    double sum, sq;     /* over the members */
};

lr_status lr__fleet_init(struct lr__fleet *f, struct lr__mem *m,
                         uint32_t max_inst);
void lr__fleet_free(struct lr__fleet *f, struct lr__mem *m);

/* Instance c->instance is routable and its row (as a route would gather
 * it) is *c: its place in the orders, a member or not yet. */
void lr__fleet_set(struct lr__fleet *f, const lr_candidate *c);
/* It is no longer routable. */
void lr__fleet_drop(struct lr__fleet *f, uint32_t id);
/* No member left: O(max_inst). */
void lr__fleet_clear(struct lr__fleet *f);

/* The members' in-flight figures. */
void lr__fleet_stats(const struct lr__fleet *f, struct lr__fleet_stats *s);

/* LR_OK, or LR_ECORRUPT when an order disagrees with itself, the members
 * with act (n routable ids), or a member's bucket with its in flight. */
lr_status lr__fleet_verify(const struct lr__fleet *f, const uint32_t *act,
                           uint32_t n);

#endif /* LIBROUTE_LIB_ROUTER_NARROW_H */
