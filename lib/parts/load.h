/* Internal view of lr_load for the router, tests and fuzzers. */
#ifndef LIBROUTE_LIB_LOAD_H
#define LIBROUTE_LIB_LOAD_H

#include "common/common.h"
#include "libroute/lr_load.h"
#include "libroute/lr_policy.h"

/* One request in flight, as the router reads it. */
struct lr__req_view {
    uint64_t id;
    uint32_t instance;
    uint32_t alt_instance; /* LR_INSTANCE_NONE if none */
    uint32_t prompt_tokens;
    uint32_t cached_tokens;
    uint32_t alt_cached_tokens;
    uint32_t expected_output_tokens;
    uint64_t dispatch_ns;
    int queued;
    /* its prefill leg's instance while that leg is open, else NONE */
    uint32_t prefill_instance;
    /* The request's record, 0..max_requests-1: fixed while it is in
     * flight, reused after it ends (the router keys per-request data on
     * it). */
    uint32_t slot;
};

/* Read one request; LR_ENOENT if not in flight. */
lr_status lr__load_req(const lr_load *ld, uint64_t id, struct lr__req_view *v);

/* Request `id`'s engine reused `cached_tokens` of its prompt: fold the
 * share of its expected hit (*expected, its cached tokens at dispatch or
 * move) that was not delivered into its instance's cached_lost, and for a
 * request sent past a sibling's fork (lr__load_set_fork) whether the
 * engine delivered no more than the fork into its sibling_lost. Only a
 * request's first report counts: LR_EEXIST for a later one (nothing
 * changes). LR_ENOENT when not in flight; LR_EINVAL past its prompt. */
lr_status lr__load_observe_cached(lr_load *ld, uint64_t id,
                                  uint32_t cached_tokens, uint32_t *expected);

/* Request `id`'s hit had a fork at fork_tokens: where a sibling had left
 * its path (lr_candidate.sibling_fork_tokens; sibling true), or a
 * boundary where one could have and none had. Its report then also says
 * whether the engine delivered the fork and no more (up to `slack`
 * tokens past it: a template's tokens the two prompts share past the
 * boundary) or more of the hit, into the instance's share for each kind;
 * the rows' sibling_lost is the first less the second. A hit that ends
 * within the slack says nothing. Nothing if it is not in flight. */
void lr__load_set_fork(lr_load *ld, uint64_t id, uint32_t fork_tokens,
                       uint32_t slack, bool sibling);

/* Visit the requests of an instance, newest first. The callback returns
 * nonzero to stop. The tracker must not change during the walk. */
void lr__load_each_req(const lr_load *ld, uint32_t instance,
                       int (*fn)(void *ctx, const struct lr__req_view *v),
                       void *ctx);

/* Walk every invariant: per-instance counters equal the sums over their
 * requests, the id table finds every request. LR_OK or LR_ECORRUPT. */
lr_status lr__load_verify(const lr_load *ld);

/* Checksum of the logical state; equal before and after a failed call. */
uint64_t lr__load_digest(const lr_load *ld);

/* Key the request-id table with `seed` instead of the one drawn at create
 * (the router passes one derived from its hash seed). Only on a tracker
 * holding no request (asserts; a no-op in release builds otherwise).
 * Never fails. */
void lr__load_set_seed(lr_load *ld, uint64_t seed);

/* The load tracker's half of a tracked instance's candidate row, written
 * straight into *c (the route's hot path: no view in between): the
 * counters, the scraped stats when scraped at most max_age_ns before
 * now_ns (else 0), the class, prefix caching, DualMap's stall (seconds a
 * non-empty queue has gone without a first token, once past stall_ns),
 * the share of expected hits its engine did not deliver (cached_lost),
 * and the probed RTT in milliseconds, or `rtt_ms` when none was probed.
 * Leaves every other field of *c as it was. LR_ENOENT when the instance
 * is not tracked (c untouched). */
lr_status lr__load_fill(const lr_load *ld, uint32_t instance, uint64_t now_ns,
                        uint64_t max_age_ns, uint64_t stall_ns, double rtt_ms,
                        lr_candidate *c);

/* The RTT probed for a tracked instance, in ns: true and *rtt_ns, or false
 * when none was probed or the instance is not tracked. */
bool lr__load_rtt(const lr_load *ld, uint32_t instance, double *rtt_ns);

/* Whether a tracked instance is saturated at now_ns (lr_router.h,
 * "Waiting"): `depth` of its requests before their first token, or
 * their uncached prompt tokens taking prefill_s plus its probed RTT or
 * more at rate[its class] tokens/s, or a scrape at most max_age_ns old
 * reporting `depth` waiting or kv_use >= `kv`, or an older scrape while a
 * request is in flight there. An instance never scraped is judged by its
 * counters alone; an untracked one is saturated. */
struct lr__saturation {
    uint64_t max_age_ns;
    uint32_t depth;
    double kv;
    double prefill_s;
    const double *rate; /* LR_LOAD_MAX_CLASSES */
};
bool lr__load_saturated(const lr_load *ld, uint32_t instance, uint64_t now_ns,
                        const struct lr__saturation *sat);

/* Whether one more dispatch fits (max_requests). */
int lr__load_has_room(const lr_load *ld);

/* Whether `instance` is tracked. */
int lr__load_has(const lr_load *ld, uint32_t instance);

#endif /* LIBROUTE_LIB_LOAD_H */
