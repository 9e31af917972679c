/* The router's private layout, shared by router.c (instances, telemetry,
 * parameters, statistics), router_kv.c (the parts' pass-through: KV
 * events, deltas, gauges) and route.c (the request path: route(), its
 * table, the lifecycle, rebalancing). */
#ifndef LIBROUTE_LIB_ROUTER_IMPL_H
#define LIBROUTE_LIB_ROUTER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/table.h"
#include "index/index.h"
#include "libroute/lr_ring.h"
#include "libroute/lr_router.h"
#include "parts/adapters.h"
#include "parts/admit.h"
#include "parts/load.h"
#include "policy/policy.h"
#include "router/marks.h"
#include "router/narrow.h"
#include "router/replica.h"

#define LR__ROUTER_DEFAULT_RATE 8000.0 /* prefill tokens/s of a class */
#define LR__TIER_COLUMNS 3u /* cached_by_id's arrays: GPU, CPU, disk */
/* A narrowed route's candidates before their duplicates go: each tier's
 * longest hits, the marks' instances, the least loaded by five measures
 * and a sample (each LR_PARAM_NARROW_WIDTH, 256 at most), the ring's,
 * two per state. */
#define LR__PICKSET_WORDS(max_inst) (((size_t)(max_inst) + 63u) / 64u)
#define LR__NARROW_PICK                                         \
    ((LR__TIER_COLUMNS + 1u + 5u + 1u) * 256u + LR_RING_MAX_K + \
     2u * LR__STATE_MAX)

/* An instance's part in a disaggregated fleet and where it runs
 * (lr_instance_spec.role, node, rack, region). */
struct lr__rplace {
    int32_t role;
    uint32_t node, rack, region;
};

struct lr__rinst {
    char *name;
    uint32_t name_len;
    uint8_t live;
    uint8_t draining;
    /* the models it serves (lr_name_hash of each), n_models of them; 0:
     * every model */
    uint32_t n_models;
    uint64_t *models;
    struct lr__rplace place;
};

/* One route's scratch: its table, scores, hits and keys, sized for
 * max_instances (rows, scores, hits, cached tokens by id) or grown to the
 * prompt (keys). Routes on several threads each take one from the
 * router's pool (lr__router_scratch_get), so the read side of route()
 * shares nothing it writes. */
struct lr__rscratch {
    struct lr__rscratch *next; /* the pool's free list */
    lr_candidate *rows;
    double *score;
    lr_index_hit *hits;
    /* by id: the GPU's cached tokens at [0, max_inst), then the tokens
     * past them on the CPU tier, then on disk (LR__TIER_COLUMNS arrays) */
    uint32_t *cached_by_id;
    /* the entries of cached_by_id the last match set (all others are 0):
     * what the next clears, LR__TIER_COLUMNS x max_inst at most */
    uint32_t *touched;
    uint32_t n_touched;
    /* a narrowed route's candidates, LR__NARROW_PICK at most, and a bit
     * per instance id (LR__PICKSET_WORDS), all clear between routes: what
     * sorts them and takes each once */
    uint32_t *pick;
    uint64_t *pickset;
    uint64_t *kbuf;
    size_t kbuf_cap;
    struct lr__match_scratch *ms; /* the index's peek */
    float *model;                 /* the scorer's pass (lr__pctx) */
    size_t model_cap;             /* floats */
};

/* A read-write lock whose waiters spin a while before they sleep
 * (lr__rwl_*, below). */
struct lr__rwl {
    pthread_rwlock_t rw;
    /* 1 while a writer holds rw: what a waiter reads while it spins, so
     * that spinning writes nothing the holder reads. */
    _Atomic uint32_t busy;
};

struct lr_router {
    /* Read by every call; written at create, by a restore (the parts)
     * and by lr_router_set_policy(), under the write lock. */
    struct lr__mem mem;
    uint32_t spins; /* LR__ROUTER_SPINS, or 0 on a single processor */
    int32_t policy;
    uint32_t max_inst;
    uint32_t block_tokens;
    lr_index *ix;
    lr_ring *ring;
    lr_load *ld;
    LR__GAP(gap_lk);
    /* The router's lock (lr__router_lock / lr__router_rdlock): route()'s
     * decision and the queries read under it, everything that changes
     * the router writes. Writers are preferred (glibc), so that routes
     * cannot starve the telemetry. */
    struct lr__rwl lk;
    LR__GAP(gap_ixlk);
    /* The index's lock (lr__router_ix_*), taken inside the router's: the
     * one writer that holds only the router's read lock, a route's learn,
     * holds it to write; what reads the index under the router's read
     * lock (the match, the housekeeping's check, SGLang's tree sizes)
     * holds it to read. Under the router's write lock the index needs
     * nothing more. So one route's learn runs beside another's gather and
     * decision. */
    struct lr__rwl ixlk;
    LR__GAP(gap_rng);
    /* The routing generator: one draw per decision, in order, under its
     * own small lock (the decision runs under the read lock). */
    pthread_mutex_t rng_mu;
    struct lr__rng rng;
    LR__GAP(gap_pool);
    /* Routes' scratch not in use (lr__router_scratch_get/put): the one
     * put back last in `spare`, taken and given back with one atomic
     * exchange each, so that routes on one thread never take pool_mu;
     * the others in `pool`, under pool_mu. */
    _Atomic(struct lr__rscratch *) spare;
    pthread_mutex_t pool_mu;
    struct lr__rscratch *pool;
    size_t n_scratch; /* made, in use or not */
    LR__GAP(gap_hint);
    /* dry runs: counted under the read lock */
    _Atomic uint64_t dry_runs;
    /* 1 when the last route's policy matched the prompt: whether the
     * next matches before it takes the router's lock (a hint, read and
     * written relaxed; route_match checks) */
    _Atomic uint32_t match_hint;
    LR__GAP(gap_clock);
    /* The clock (lr__router_clock), its skew LR_PARAM_CLOCK_SKEW_S:
     * taken by every route. */
    struct lr__clock clock;
    LR__GAP(gap_rest);
    struct lr__adapters ad; /* LoRA residency (parts/adapters.h) */
    /* instances that declared models: while 0, no route filters */
    uint32_t n_modeled;
    /* live LR_ROLE_PREFILL instances: while 0, a route's table is in id
     * order and every decision keeps its request whole */
    uint32_t n_prefill;
    struct lr__rinst *inst;
    uint32_t n_inst;
    /* Keys every table of the router and its parts: the host's
     * hash_seed, else from the operating system; never the routing
     * generator's seed. */
    uint64_t hash_seed;
    struct lr__table names; /* name -> id */
    uint32_t *act;          /* routable ids, ascending */
    uint32_t n_act;
    /* the routable ids in load order, for a large fleet's routes
     * (narrow.h): kept by every call that changes an instance's load
     * while fleet_on, that is while a route may read them (more than
     * LR_PARAM_NARROW_ABOVE routable); empty while not
     * (lr__router_fleet_sync). Under the write lock. */
    struct lr__fleet fleet;
    bool fleet_on;
    /* where each learned prompt went (marks.h), under the index's lock */
    struct lr__marks marks;
    /* The ids no live instance holds, as bits: free_w[w] bit b for id
     * 64w + b; free_s[s] bit b set while free_w[64s + b] is not 0. An add
     * takes the lowest free id: the first summary word that is not 0 (at
     * most 16 of them), then the word it names. */
    uint64_t *free_w;
    uint64_t *free_s;
    double *init_rtt_ms; /* per id: RTT given at add */
    double rate[LR_LOAD_MAX_CLASSES];
    /* Policy parameters; the values a state owns (GORGO's weights in
     * service) are synced in from it (lr__router_pstates_sync). */
    double param[LR__PARAM_COUNT];
    /* Each state kind's state (policy.h: the policies' own, the recency
     * table), made on first use and kept; NULL until then. Read without
     * the lock by the host's learner calls, hence atomic. */
    _Atomic(void *) pstate[LR__STATE_MAX];
    const struct lr__ptable *pt; /* its policies (lr__builtin_policies) */
    /* replicas and event sources (replica.c) */
    struct lr__kvsrc *src; /* max_inst: each instance's KV-event stream */
    /* max_inst: each id's generation, bumped when the instance leaves,
     * under both locks: a route reads it with its decision and learns
     * only if it has not moved (route_learn) */
    uint32_t *ixgen;
    uint64_t ixgen_all; /* bumped with any of ixgen, and at a restore */
    /* max_inst: each id's marks generation (marks.h), bumped under both
     * locks when its cache is gone (it leaves, its engine cleared or
     * restarted): its marks made before count for nothing */
    uint32_t *mgen;
    struct lr__peers peers;
    lr_router_options opt; /* as resolved at create (restore rebuilds) */
    /* opt.learner as given, copied (with the MLP options it points to):
     * what a policy state is made with (lr__router_env) */
    lr_learner_options opt_learner;
    lr_mlp_options opt_learner_mlp;
    bool has_opt_learner;
    LR__GAP(gap_st);
    /* counted by every route's record */
    lr_router_stats st;
    uint64_t by_reason[LR__REASON_COUNT];
    LR__GAP(gap_wait);
    /* The waiting queue (router_wait.c): its lock, taken before the
     * router's and the index's, by the calls that touch the queue (a
     * route that may wait or shed, dispatch, fail, the stats); the queue
     * is made at the first request that may wait. Each entry's data is
     * its struct lr__waiter. */
    pthread_mutex_t wait_mu;
    struct lr__admit aq;
    bool aq_made;
    uint64_t wait_tokens; /* prompt tokens of the waiting */
    struct {
        uint64_t waited, dispatched, expired, cancelled, dropped, shed, wait_ns;
    } wst;
};

/* ---- the clock ------------------------------------------------------------
 *
 * Every call that takes a timestamp judges it here, under the lock, before
 * it changes anything, and takes it once it succeeded (common.h, "the
 * clock"; the skew is LR_PARAM_CLOCK_SKEW_S):
 *
 *   LR_TRY(lr__router_clock(r, now_ns, true));   // LR_ERANGE: refused
 *   ... the call's work; on success:
 *   lr__router_clock_take(r, now_ns);
 */
lr_status lr__router_clock(lr_router *r, uint64_t t_ns, bool mutates);
void lr__router_clock_take(lr_router *r, uint64_t t_ns);

/* Waits a contended lock spins before it sleeps. A route()'s write
 * section holds the lock for a few microseconds, and a thread that routes
 * back to back takes it again within a few more (route, complete, route),
 * so a waiter often sees several holds go by. Sleeping at once costs a
 * futex wait, the holder's wake and the scheduler's wake-up latency, more
 * than the wait (docs/perf.md, "Threads"). The spin reads `busy` and
 * tries the lock only when no writer looks to hold it; its bound is about
 * 100 us at a 25 ns pause. A holder that was descheduled makes the waiter
 * sleep after the bound; on a single processor, where the holder cannot
 * run while the waiter spins, the waiter sleeps at once (spins = 0). */
#define LR__ROUTER_SPINS 4096u

static inline void
lr__router_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Write and read sides of a lock with a spinning wait (above). The wait
 * is out of line: each side inlines a try and a test, so that the many
 * places a route takes a lock add a few bytes to the code it runs. */
void lr__rwl_wait(struct lr__rwl *l, uint32_t spins, bool write);

static inline void
lr__rwl_lock(struct lr__rwl *l, uint32_t spins)
{
    if (pthread_rwlock_trywrlock(&l->rw) != 0)
        lr__rwl_wait(l, spins, true);
    atomic_store_explicit(&l->busy, 1, memory_order_relaxed);
}

static inline void
lr__rwl_unlock(struct lr__rwl *l)
{
    atomic_store_explicit(&l->busy, 0, memory_order_relaxed);
    pthread_rwlock_unlock(&l->rw);
}

static inline void
lr__rwl_rdlock(struct lr__rwl *l, uint32_t spins)
{
    if (pthread_rwlock_tryrdlock(&l->rw) != 0)
        lr__rwl_wait(l, spins, false);
}

static inline void
lr__rwl_rdunlock(struct lr__rwl *l)
{
    pthread_rwlock_unlock(&l->rw);
}

/* The write side: everything that changes the router. */
static inline void
lr__router_lock(const lr_router *r)
{
    lr__rwl_lock(&((lr_router *)r)->lk, r->spins);
}

static inline void
lr__router_unlock(const lr_router *r)
{
    lr__rwl_unlock(&((lr_router *)r)->lk);
}

/* The read side: route()'s decision and the queries, many at once. */
static inline void
lr__router_rdlock(const lr_router *r)
{
    lr__rwl_rdlock(&((lr_router *)r)->lk, r->spins);
}

static inline void
lr__router_rdunlock(const lr_router *r)
{
    lr__rwl_rdunlock(&((lr_router *)r)->lk);
}

/* The index's lock, taken while the router's read lock is held. */
static inline void
lr__router_ix_lock(const lr_router *r)
{
    lr__rwl_lock(&((lr_router *)r)->ixlk, r->spins);
}

static inline void
lr__router_ix_unlock(const lr_router *r)
{
    lr__rwl_unlock(&((lr_router *)r)->ixlk);
}

static inline void
lr__router_ix_rdlock(const lr_router *r)
{
    lr__rwl_rdlock(&((lr_router *)r)->ixlk, r->spins);
}

static inline void
lr__router_ix_rdunlock(const lr_router *r)
{
    lr__rwl_rdunlock(&((lr_router *)r)->ixlk);
}

/* A route's scratch from the pool (made when none is free: LR_ENOMEM),
 * and back. Under neither lock. */
lr_status lr__router_scratch_get(lr_router *r, struct lr__rscratch **out);
void lr__router_scratch_put(lr_router *r, struct lr__rscratch *sc);
/* Grow sc's scorer buffer to n floats: LR_ENOMEM leaves it as it was. */
lr_status lr__router_scratch_model(lr_router *r, struct lr__rscratch *sc,
                                   size_t n);

/* Unlock, then return st: the tail of every call that writes. */
static inline lr_status
lr__router_release(const lr_router *r, lr_status st)
{
    lr__router_unlock(r);
    return st;
}

/* A live instance, or NULL. */
struct lr__rinst *lr__router_inst(const lr_router *r, uint32_t id);

/* The clock protocol above, for a timestamped call that mutates: enter
 * takes the mutex and returns the clock's verdict on now_ns; enter_inst
 * first returns LR_ENOENT when `id` is not an instance; leave takes now_ns
 * when st is LR_OK, releases the mutex and returns st. Every enter is
 * followed by one leave. */
static inline lr_status
lr__router_enter(lr_router *r, uint64_t now_ns)
{
    lr__router_lock(r);
    return lr__router_clock(r, now_ns, true);
}

static inline lr_status
lr__router_enter_inst(lr_router *r, uint32_t id, uint64_t now_ns)
{
    lr__router_lock(r);
    return lr__router_inst(r, id) == NULL ? LR_ENOENT
                                          : lr__router_clock(r, now_ns, true);
}

static inline lr_status
lr__router_leave(lr_router *r, lr_status st, uint64_t now_ns)
{
    if (st == LR_OK)
        lr__router_clock_take(r, now_ns);
    return lr__router_release(r, st);
}

/* Instance id's cache is gone: its placement marks count for nothing.
 * Under the router's and the index's write locks. */
static inline void
lr__router_marks_forget(lr_router *r, uint32_t id)
{
    if (id < r->max_inst)
        r->mgen[id]++;
}

/* Position of a routable id in act[] (and in a whole fleet's table), or
 * LR_INSTANCE_NONE. */
uint32_t lr__router_act_index(const lr_router *r, uint32_t id);

/* Instance id's load may have changed (or whether it is routable): its
 * place in the fleet's orders (narrow.h) from its row at the newest
 * time; ... every routable instance's (lr_router_expire, a restore).
 * Under the write lock. */
void lr__router_fleet_touch(lr_router *r, uint32_t id);

/* What waits on request slot `slot` in the policies' states goes: the
 * request ended at now_ns (completed, or failed, moved or lost with its
 * instance: false). Under the exclusive lock. */
void lr__router_settle_ended(lr_router *r, uint32_t slot, uint64_t now_ns,
                             bool completed);
void lr__router_fleet_touch_all(lr_router *r);
/* The orders kept or not, after the routable count or
 * LR_PARAM_NARROW_ABOVE changed: turned on, every routable instance is
 * put in; turned off, they are emptied. Under the write lock. */
void lr__router_fleet_sync(lr_router *r);
/* The peers' callback (lr__peers_on_moved): touch instance id, or every
 * one for LR_INSTANCE_NONE. */
void lr__router_gauge_moved(void *ctx, uint32_t id);

/* ---- policy state (policy.h, struct lr__pstate_ops) ----------------------
 *
 * The router knows no policy: it makes the state kinds its policy uses
 * (lr__policy_states) and calls each state's operations. */

/* What states are made with: the router's allocator, sizes, seeds,
 * parameters and learner options. */
struct lr__penv lr__router_env(lr_router *r);

/* The state of kind `kind`, or NULL when none was made. */
static inline void *
lr__router_pstate(const lr_router *r, uint32_t kind)
{
    return atomic_load_explicit(&((lr_router *)r)->pstate[kind],
                                memory_order_acquire);
}

/* Make the states policy p uses that do not exist yet: all or none
 * (LR_ENOMEM). */
lr_status lr__router_pstates_setup(lr_router *r, int32_t p);

/* The values the states own over the router's parameters (GORGO's tuned
 * weights), after anything that may move them. */
void lr__router_pstates_sync(lr_router *r);

/* Every state the router has, in kind order: `kind` and `ops`, `st`. */
#define LR__ROUTER_EACH_PSTATE(r, kind, ops, st)                             \
    for (uint32_t kind = 0; kind < LR__STATE_MAX; kind++)                    \
        for (void *st = lr__router_pstate((r), kind); st != NULL; st = NULL) \
            for (const struct lr__pstate_ops *ops =                          \
                     lr__pstate_ops_of((r)->pt, kind);                       \
                 ops != NULL; ops = NULL)

/* A fresh index, ring and load tracker made with the router's options
 * (all or none). */
lr_status lr__router_make_parts(const lr_router *r, lr_index **ix,
                                lr_ring **ring, lr_load **ld);

/* ---- route and the waiting queue (route.c, queue.c, admission.c) -------- */

/* A waiting request (admission.c): the request as routed, its tokens and
 * boundaries copied into tail (q's pointers point there), and the size
 * of this allocation. */
struct lr__waiter {
    lr_request q;
    size_t bytes;
    /* multimodal inputs, tokens, boundaries, names, identifiers */
    uint32_t tail[];
};

/* The saturation rule's parameters as the router holds them now (under
 * its lock). */
static inline struct lr__saturation
lr__router_saturation(const lr_router *r)
{
    struct lr__saturation sat = {
        .max_age_ns = (uint64_t)(r->param[LR_PARAM_STATS_MAX_AGE_S] * 1e9),
        .depth = (uint32_t)r->param[LR_PARAM_SATURATION_QUEUE],
        .kv = r->param[LR_PARAM_SATURATION_KV],
        .prefill_s = r->param[LR_PARAM_SATURATION_PREFILL_S],
        .rate = r->rate,
    };
    return sat;
}

/* Bytes of a request's model or adapter name before its NUL, up to
 * LR_ROUTER_MAX_NAME + 1 (too long); 0 for NULL. */
static inline size_t
lr__router_name_len(const char *s)
{
    size_t n = 0;
    if (s != NULL)
        while (n <= LR_ROUTER_MAX_NAME && s[n] != '\0')
            n++;
    return n;
}

/* The lr_name_hash of a request's model or adapter (0: none). */
static inline uint64_t
lr__router_name_hash(const char *s)
{
    return lr_name_hash(s, lr__router_name_len(s));
}

/* Whether instance id (live) serves the model whose lr_name_hash is
 * `model` (0: any); an instance that declared no models serves all. */
static inline bool
lr__router_serves(const lr_router *r, uint32_t id, uint64_t model)
{
    const struct lr__rinst *in = &r->inst[id];
    if (model == 0 || in->n_models == 0)
        return true;
    for (uint32_t j = 0; j < in->n_models; j++)
        if (in->models[j] == model)
            return true;
    return false;
}

/* route()'s checks of a request alone (sizes, boundaries, flags). */
lr_status lr__router_check_request(const lr_request *q);

/* route() on a checked request, a copy of the caller's that lives
 * through the call (route() and dispatch() each make their own): the
 * pipeline, the record. */
lr_status lr__router_route_now(lr_router *r, const lr_request *q,
                               lr_decision *d);

/* lr_router_fail() of a request in flight. */
lr_status lr__router_fail_inflight(lr_router *r, uint64_t request_id,
                                   uint64_t now_ns);

/* queue.c: a waiter freed and its tokens uncounted; the queue's part of
 * the stats, digest and checks; the queue and its waiters freed. Each
 * takes wait_mu but free (the router is being destroyed). */
void lr__router_waiter_free(lr_router *r, struct lr__waiter *w);
void lr__router_wait_stats(lr_router *r, lr_router_stats *s);
uint64_t lr__router_wait_digest(lr_router *r, uint64_t h);
lr_status lr__router_wait_verify(lr_router *r);
void lr__router_wait_free(lr_router *r);

/* Snapshot restore: a name an instance may have (1..255 bytes, no NUL);
 * commit instance `id` (a free slot; its ring and load entries exist;
 * `name` is taken over). Cannot fail. */
bool lr__router_name_ok(const char *name, size_t len);
void lr__router_put_instance(lr_router *r, uint32_t id, char *name,
                             uint32_t len, bool draining, double init_rtt_ms,
                             uint64_t *models, uint32_t n_models,
                             const struct lr__rplace *place);

#endif /* LIBROUTE_LIB_ROUTER_IMPL_H */
