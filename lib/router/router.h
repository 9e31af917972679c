/* Internal view of lr_router for tests and fuzzers. */
#ifndef LIBROUTE_LIB_ROUTER_H
#define LIBROUTE_LIB_ROUTER_H

#include "common/common.h"
#include "libroute/lr_router.h"

/* Checksum of the router's logical state: its index, ring and load
 * tracker, instance table, policy state and counters; equal before and
 * after a failed call. 0 for NULL. */
uint64_t lr__router_digest(const lr_router *r);

/* Walk the invariants of the router and its parts: LR_OK or LR_ECORRUPT. */
lr_status lr__router_verify(const lr_router *r);

/* Bytes allocated through the router's allocator by the router itself
 * (its parts count their own). */
size_t lr__router_mem_live(const lr_router *r);

/* Route with policy table t instead of the library's (tests: a table of
 * the library's rows and more, a stateful policy added through its row
 * alone). t is borrowed for the router's life; at least the library's
 * LR__POLICY_COUNT rows. LR_ESTATE once the router has an instance. */
struct lr__ptable;
lr_status lr__router_set_policies(lr_router *r, const struct lr__ptable *t);

#endif /* LIBROUTE_LIB_ROUTER_H */
