/* LoRA adapter residency per instance, as the router follows it between
 * its engines' reports: which adapters each instance holds, most recently
 * used first, and how many requests of each are in flight there; and the
 * adapter of each request in flight (by the load tracker's slot), so that
 * its end frees the adapter's pin.
 *
 * A dispatch makes its adapter resident (an engine loads what it is sent),
 * the least recently used adapter without requests in flight leaving when
 * every slot is taken; an engine's report (lr_router_set_adapters) puts
 * the adapters it names first and keeps the router's guesses behind them
 * while slots remain. Instances whose slots are not known are followed up
 * to LR__ADAPTERS_UNKNOWN_SLOTS adapters.
 *
 * Everything is made at the router's create and at an instance's add, so
 * that the request path never allocates. */
#ifndef LIBROUTE_LIB_PARTS_ADAPTERS_H
#define LIBROUTE_LIB_PARTS_ADAPTERS_H

#include "common/common.h"
#include "libroute/lr_policy.h"

/* Slots followed on an instance added without max_adapters. */
#define LR__ADAPTERS_UNKNOWN_SLOTS 8u

struct lr__adres {
    uint64_t hash;     /* lr_name_hash of the adapter, never 0 */
    uint64_t used_ns;  /* last dispatched there, or reported */
    uint32_t inflight; /* its requests in flight there (routed here) */
    uint32_t reported; /* 1: the engine's last report named it */
};

/* One instance's adapters: n of them, most recently used first. */
struct lr__adinst {
    uint32_t max; /* its slots as told (0: not known) */
    uint32_t n;   /* entries, at most LR_ROUTER_MAX_ADAPTERS */
    struct lr__adres e[];
};

struct lr__adreq {
    uint64_t hash;  /* 0: the request names no adapter */
    uint64_t model; /* its model's, 0: none */
    uint32_t inst;
};

struct lr__adapters {
    uint32_t max_inst, max_req;
    struct lr__adinst **inst; /* max_inst; NULL for an id without one */
    struct lr__adreq *req;    /* max_req, by load slot */
};

lr_status lr__adapters_setup(struct lr__adapters *a, struct lr__mem *m,
                             uint32_t max_inst, uint32_t max_req);
void lr__adapters_free(struct lr__adapters *a, struct lr__mem *m);

/* Make instance id's table for `max` slots (0: not known), empty; the old
 * one, if any, goes. LR_ENOMEM: nothing changed. */
lr_status lr__adapters_add(struct lr__adapters *a, struct lr__mem *m,
                           uint32_t id, uint32_t max);
void lr__adapters_remove(struct lr__adapters *a, struct lr__mem *m,
                         uint32_t id);

/* The columns of row `c` (its instance set) for a request of adapter
 * `hash` (0: none): adapter_missing, adapter_free, adapters_resident,
 * adapter_evicts, and adapter_load_s = load_s when it must load. */
void lr__adapters_fill(const struct lr__adapters *a, uint64_t hash,
                       double load_s, lr_candidate *c);

/* The adapters a request of adapter `hash` (not 0) would queue behind
 * for a slot on instance id, once every slot is held: the other adapters
 * with work there (requests routed there in flight, or named running or
 * waiting by the engine's last report; each once, however both know of
 * it) beyond the slots but the one its own adapter holds or waits for;
 * 0 while slots remain. UINT32_MAX when its slots are not known. */
uint32_t lr__adapters_ahead(const struct lr__adapters *a, uint32_t id,
                            uint64_t hash);

/* A request of model `model` and adapter `hash` (0: none) in load slot
 * `slot` was sent to `id` at now_ns. */
void lr__adapters_dispatch(struct lr__adapters *a, uint32_t slot, uint32_t id,
                           uint64_t model, uint64_t hash, uint64_t now_ns);

/* The request in `slot` ended: its pin goes. */
void lr__adapters_end(struct lr__adapters *a, uint32_t slot);

/* The request in `slot` moved to `id`: its adapter is pinned there now. */
void lr__adapters_move(struct lr__adapters *a, uint32_t slot, uint32_t id,
                       uint64_t now_ns);

/* The model of the request in `slot` (0: none). */
uint64_t lr__adapters_model(const struct lr__adapters *a, uint32_t slot);

/* An engine's report: `hashes` (n of them, distinct, the running ones
 * first) are resident now; `max` its slots (0: as before). Requires
 * n <= LR_ROUTER_MAX_ADAPTERS. */
void lr__adapters_report(struct lr__adapters *a, uint32_t id,
                         const uint64_t *hashes, size_t n, uint32_t max,
                         uint64_t now_ns);

/* Resident hashes of id, most recent first: up to cap into out; returns
 * how many there are. */
size_t lr__adapters_list(const struct lr__adapters *a, uint32_t id,
                         uint64_t *out, size_t cap);

uint64_t lr__adapters_digest(const struct lr__adapters *a, uint64_t d);
lr_status lr__adapters_verify(const struct lr__adapters *a);

#endif /* LIBROUTE_LIB_PARTS_ADAPTERS_H */
