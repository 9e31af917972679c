/* lr_router: instances, telemetry intake, parameters, locking, the
 * route scratch pool and statistics. The request path (route() and the
 * lifecycle) is in route.c; the parts' pass-through (KV events, deltas,
 * gauges, expiry) in router_kv.c; the learner's calls in
 * router_learner.c; snapshots in snapshot.c. The policies sit behind the
 * router's policy table and keep their own state behind state operations
 * (policy.h): nothing here names a policy.
 *
 * Locking (router_impl.h): a read-write lock. route()'s decision and the
 * queries that build candidate rows (lr_router_candidates,
 * lr_router_policy_input, lr_router_rebalance_plan) take it shared; every
 * call that changes the router, and the short getters, take it exclusive.
 * The learner's training (lr_router_learn_step) runs outside it and swaps
 * its network in under it. */
#define _DEFAULT_SOURCE /* sysconf(_SC_NPROCESSORS_ONLN) */
#include <unistd.h>

#include "common/lr_hash.h"
#include "learn/learner.h"
#include "libroute/lr_ring.h"
#include "parts/ring.h"
#include "router/router.h"
#include "router/router_impl.h"

#define NONE LR_INSTANCE_NONE
#define NAME_MAX_LEN 255u
#define SEED_NAMES 0x4c524e414d455331ull /* "LRNAMES1" */
/* The parts' hash seeds, derived from the router's (never its routing
 * seed): the index's and the load tracker's. */
#define SEED_INDEX 0x4c52494e44455831ull /* "LRINDEX1" */
#define SEED_LOAD 0x4c524c4f41444831ull  /* "LRLOADH1" */
#define SEED_GORGO 0x4c52474f52474f31ull /* "LRGORGO1" */
#define SEED_MARKS 0x4c524d41524b5331ull /* "LRMARKS1" */
#define DEFAULT_RATE LR__ROUTER_DEFAULT_RATE

/* Words of the free-id bits (router_impl.h, free_w and free_s). */
#define FREE_WORDS(n) (((size_t)(n) + 63) / 64)

/* ---- init helpers ----------------------------------------------------------- */

LR__INIT_SIZED(lr_router_options_init_sized, lr_router_options,
               options_defaults, .policy = LR_POLICY_PREFIX_CACHE_AND_LOAD,
               .max_instances = 1024, .max_requests = 65536,
               .index_capacity_blocks = 1u << 20, .block_tokens = 16,
               .index_ttl_ns = 3600ull * 1000000000ull, .ring_vnodes = 160,
               .gauge_ttl_ns = 2000000000ull, .max_peers = 64,
               .queue_capacity = 4096, .queue_tenants = 1024,
               .queue_tokens = 1ull << 24)

/* The options whose 0 keeps the default; the others are the caller's as
 * given. */
#define ZERO_KEEPS_DEFAULT(X) \
    X(max_instances)          \
    X(max_requests)           \
    X(index_capacity_blocks)  \
    X(block_tokens)           \
    X(index_ttl_ns)           \
    X(ring_vnodes)            \
    X(gauge_ttl_ns)           \
    X(max_peers)              \
    X(queue_capacity)         \
    X(queue_tenants)          \
    X(queue_tokens)

LR__INIT_SIZED(lr_instance_spec_init_sized, lr_instance_spec, spec_defaults,
               .prefix_caching = 1)

LR__INIT_SIZED(lr_class_spec_init_sized, lr_class_spec, class_defaults,
               .prefill_tokens_per_s = DEFAULT_RATE)

LR__INIT_SIZED_ZERO(lr_request_init_sized, lr_request)
LR__INIT_SIZED_ZERO(lr_adapter_stats_init_sized, lr_adapter_stats)

LR__INIT_SIZED_ZERO(lr_router_stats_init_sized, lr_router_stats)

lr_bounds
lr_router_param_bounds(int32_t key)
{
    return lr_param_bounds(key);
}

/* ---- create / destroy ------------------------------------------------------------- */

/* ---- route scratch ------------------------------------------------------------ */

static void
scratch_free(lr_router *r, struct lr__rscratch *sc)
{
    struct lr__mem *m = &r->mem;
    size_t ni = r->max_inst;
    lr__free(m, sc->rows, ni * sizeof *sc->rows);
    lr__free(m, sc->score, ni * sizeof *sc->score);
    lr__free(m, sc->hits, ni * sizeof *sc->hits);
    lr__free(m, sc->cached_by_id, LR__TIER_COLUMNS * ni * sizeof(uint32_t));
    lr__free(m, sc->touched, LR__TIER_COLUMNS * ni * sizeof(uint32_t));
    lr__free(m, sc->pick, LR__NARROW_PICK * sizeof(uint32_t));
    lr__free(m, sc->pickset, LR__PICKSET_WORDS(ni) * sizeof(uint64_t));
    lr__free(m, sc->kbuf, sc->kbuf_cap * sizeof(uint64_t));
    lr__index_scratch_free(m, sc->ms);
    lr__free(m, sc->model, sc->model_cap * sizeof(float));
    lr__free(m, sc, sizeof *sc);
}

/* One more scratch (the first at create: a router used from one thread
 * never allocates one on its request path). */
static lr_status
scratch_new(lr_router *r, struct lr__rscratch **out)
{
    struct lr__mem *m = &r->mem;
    size_t ni = r->max_inst;
    struct lr__rscratch *sc = lr__calloc(m, 1, sizeof *sc);
    LR_RETURN_IF(sc == NULL, LR_ENOMEM);
    sc->rows = lr__calloc(m, ni, sizeof *sc->rows);
    sc->score = lr__calloc(m, ni, sizeof *sc->score);
    sc->hits = lr__calloc(m, ni, sizeof *sc->hits);
    sc->cached_by_id = lr__calloc(m, LR__TIER_COLUMNS * ni, sizeof(uint32_t));
    sc->touched = lr__alloc(m, LR__TIER_COLUMNS * ni * sizeof(uint32_t));
    sc->pick = lr__alloc(m, LR__NARROW_PICK * sizeof(uint32_t));
    sc->pickset = lr__calloc(m, LR__PICKSET_WORDS(ni), sizeof(uint64_t));
    lr_status st = sc->rows == NULL || sc->score == NULL || sc->hits == NULL ||
                           sc->cached_by_id == NULL ||
                           (ni > 0 && sc->touched == NULL) ||
                           sc->pick == NULL || (ni > 0 && sc->pickset == NULL)
                       ? LR_ENOMEM
                       : lr__index_scratch_new(r->ix, m, &sc->ms);
    if (st != LR_OK) {
        scratch_free(r, sc);
        return st;
    }
    *out = sc;
    return LR_OK;
}

lr_status
lr__router_scratch_get(lr_router *r, struct lr__rscratch **out)
{
    struct lr__rscratch *sc =
        atomic_exchange_explicit(&r->spare, NULL, memory_order_acquire);
    if (sc == NULL) {
        pthread_mutex_lock(&r->pool_mu);
        sc = r->pool;
        if (sc != NULL)
            r->pool = sc->next;
        pthread_mutex_unlock(&r->pool_mu);
    }
    if (sc == NULL) {
        LR_TRY(scratch_new(r, &sc));
        pthread_mutex_lock(&r->pool_mu);
        r->n_scratch++;
        pthread_mutex_unlock(&r->pool_mu);
    }
    *out = sc;
    return LR_OK;
}

lr_status
lr__router_scratch_model(lr_router *r, struct lr__rscratch *sc, size_t n)
{
    if (n <= sc->model_cap)
        return LR_OK;
    float *p = lr__calloc(&r->mem, n, sizeof *p);
    LR_RETURN_IF(p == NULL, LR_ENOMEM);
    lr__free(&r->mem, sc->model, sc->model_cap * sizeof(float));
    sc->model = p;
    sc->model_cap = n;
    return LR_OK;
}

void
lr__router_scratch_put(lr_router *r, struct lr__rscratch *sc)
{
    struct lr__rscratch *none = NULL;
    if (atomic_compare_exchange_strong_explicit(
            &r->spare, &none, sc, memory_order_release, memory_order_relaxed))
        return;
    pthread_mutex_lock(&r->pool_mu);
    sc->next = r->pool;
    r->pool = sc;
    pthread_mutex_unlock(&r->pool_mu);
}

/* ---- free ids (router_impl.h, free_w and free_s) -------------------------- */

static void
id_free(lr_router *r, uint32_t id)
{
    r->free_w[id / 64] |= 1ull << (id % 64);
    r->free_s[id / 4096] |= 1ull << (id / 64 % 64);
}

static void
id_take(lr_router *r, uint32_t id)
{
    uint64_t *w = &r->free_w[id / 64];
    *w &= ~(1ull << (id % 64));
    if (*w == 0)
        r->free_s[id / 4096] &= ~(1ull << (id / 64 % 64));
}

/* The lowest id no live instance holds; the caller has checked that
 * n_inst < max_inst, so there is one. */
static uint32_t
id_lowest_free(const lr_router *r)
{
    uint32_t s = 0;
    while (r->free_s[s] == 0)
        s++;
    uint32_t w = s * 64 + (uint32_t)__builtin_ctzll(r->free_s[s]);
    return w * 64 + (uint32_t)__builtin_ctzll(r->free_w[w]);
}

static void
router_free(lr_router *r)
{
    struct lr__mem *m = &r->mem;
    size_t ni = r->max_inst;
    if (r->inst != NULL) {
        for (uint32_t i = 0; i < r->max_inst; i++)
            if (r->inst[i].live) {
                lr__free(m, r->inst[i].name, r->inst[i].name_len + 1);
                lr__free(m, r->inst[i].models,
                         r->inst[i].n_models * sizeof(uint64_t));
            }
        lr__free(m, r->inst, ni * sizeof *r->inst);
    }
    lr__adapters_free(&r->ad, m);
    lr__fleet_free(&r->fleet, m);
    lr__marks_free(&r->marks, m);
    lr__table_free(&r->names, m);
    lr__free(m, r->act, ni * sizeof *r->act);
    lr__free(m, r->free_w, FREE_WORDS(ni) * sizeof(uint64_t));
    lr__free(m, r->free_s, FREE_WORDS(FREE_WORDS(ni)) * sizeof(uint64_t));
    lr__free(m, r->init_rtt_ms, ni * sizeof(double));
    struct lr__rscratch *spare = atomic_load(&r->spare);
    if (spare != NULL)
        scratch_free(r, spare);
    while (r->pool != NULL) {
        struct lr__rscratch *sc = r->pool;
        r->pool = sc->next;
        scratch_free(r, sc);
    }
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        ops->destroy(st, m);
    }
    lr__free(m, r->src, ni * sizeof *r->src);
    lr__free(m, r->ixgen, ni * sizeof *r->ixgen);
    lr__free(m, r->mgen, ni * sizeof *r->mgen);
    lr__peers_free(&r->peers, m);
    lr__router_wait_free(r);
    lr_index_destroy(r->ix);
    lr_ring_destroy(r->ring);
    lr_load_destroy(r->ld);
    pthread_rwlock_destroy(&r->ixlk.rw);
    pthread_rwlock_destroy(&r->lk.rw);
    pthread_mutex_destroy(&r->rng_mu);
    pthread_mutex_destroy(&r->pool_mu);
    pthread_mutex_destroy(&r->wait_mu);
    LR__HANDLE_FREE(r, lr_router);
}

struct lr__penv
lr__router_env(lr_router *r)
{
    struct lr__penv e = {
        .mem = &r->mem,
        .max_inst = r->max_inst,
        .max_req = r->opt.max_requests,
        .seed = r->opt.seed,
        .hash_seed = r->hash_seed,
        .param = r->param,
        .learner = r->has_opt_learner ? &r->opt_learner : NULL,
    };
    return e;
}

lr_status
lr__router_pstates_setup(lr_router *r, int32_t p)
{
    uint32_t want = lr__policy_states(r->pt, p, r->param), made = 0;
    struct lr__penv env = lr__router_env(r);
    lr_status st = LR_OK;
    for (uint32_t kind = 0; kind < LR__STATE_MAX && st == LR_OK; kind++) {
        const struct lr__pstate_ops *ops = lr__pstate_ops_of(r->pt, kind);
        if (!(want >> kind & 1) || ops == NULL ||
            lr__router_pstate(r, kind) != NULL)
            continue;
        void *x = NULL;
        st = ops->create(&env, &x);
        if (st == LR_OK) {
            atomic_store_explicit(&r->pstate[kind], x, memory_order_release);
            made |= 1u << kind;
        }
    }
    if (st != LR_OK) { /* all or none */
        LR__ROUTER_EACH_PSTATE(r, kind, ops, x)
        {
            if (made >> kind & 1) {
                atomic_store(&r->pstate[kind], NULL);
                ops->destroy(x, &r->mem);
            }
        }
    }
    lr__router_pstates_sync(r);
    return st;
}

void
lr__router_pstates_sync(lr_router *r)
{
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        if (ops->sync != NULL)
            ops->sync(st, r->param);
    }
}

/* The clock's skew from its parameter (<= 4.7e9 s: in 64 bits), set
 * when the parameter is: the read side judges times without writing. */
static void
clock_skew(lr_router *r)
{
    r->clock.skew_ns = (uint64_t)(r->param[LR_PARAM_CLOCK_SKEW_S] * 1e9);
}

lr_status
lr__router_make_parts(const lr_router *r, lr_index **ix, lr_ring **ring,
                      lr_load **ld)
{
    const lr_router_options *o = &r->opt;
    *ix = NULL;
    *ring = NULL;
    *ld = NULL;
    lr_index_options io;
    lr_index_options_init(&io);
    io.allocator = &r->mem.a;
    /* its size */
    io.capacity_blocks = o->index_capacity_blocks;
    io.block_tokens = o->block_tokens;
    io.max_instances = o->max_instances;
    /* who it is */
    io.seed = lr__mix64(r->hash_seed, SEED_INDEX);
    io.replica_id = o->replica_id;
    /* what it forgets, and when */
    io.ttl_ns = o->index_ttl_ns;
    io.remote_ttl_ns = o->remote_ttl_ns;
    io.eviction = o->index_eviction;
    io.clock_skew_ns = UINT64_MAX; /* the router's clock judges */
    lr_ring_options ro;
    lr_ring_options_init(&ro);
    ro.allocator = &r->mem.a;
    ro.vnodes = o->ring_vnodes;
    ro.max_instances = o->max_instances;
    lr_load_options lo;
    lr_load_options_init(&lo);
    lo.allocator = &r->mem.a;
    lo.max_instances = o->max_instances;
    lo.max_requests = o->max_requests;
    lr_status st = lr_index_create(&io, ix);
    if (st == LR_OK)
        st = lr_ring_create(&ro, ring);
    if (st == LR_OK)
        st = lr_load_create(&lo, ld);
    if (st == LR_OK)
        lr__load_set_seed(*ld, lr__mix64(r->hash_seed, SEED_LOAD));
    if (st != LR_OK) {
        lr_index_destroy(*ix);
        lr_ring_destroy(*ring);
        lr_load_destroy(*ld);
        *ix = NULL;
        *ring = NULL;
        *ld = NULL;
    }
    return st;
}

/* Tables and scratch sized by max_instances. */
static lr_status
create_tables(lr_router *r)
{
    struct lr__mem *m = &r->mem;
    size_t ni = r->max_inst;
    LR_TRY(lr__table_init(&r->names, m, r->max_inst));
    r->inst = lr__calloc(m, ni, sizeof *r->inst);
    r->act = lr__calloc(m, ni, sizeof *r->act);
    r->free_w = lr__calloc(m, FREE_WORDS(ni), sizeof(uint64_t));
    r->free_s = lr__calloc(m, FREE_WORDS(FREE_WORDS(ni)), sizeof(uint64_t));
    r->init_rtt_ms = lr__calloc(m, ni, sizeof(double));
    r->src = lr__calloc(m, ni, sizeof *r->src);
    r->ixgen = lr__calloc(m, ni, sizeof *r->ixgen);
    r->mgen = lr__calloc(m, ni, sizeof *r->mgen);
    if (r->inst == NULL || r->act == NULL || r->free_w == NULL ||
        r->free_s == NULL || r->init_rtt_ms == NULL || r->src == NULL ||
        r->ixgen == NULL || r->mgen == NULL)
        return LR_ENOMEM;
    for (uint32_t id = 0; id < r->max_inst; id++)
        id_free(r, id);
    LR_TRY(lr__adapters_setup(&r->ad, m, r->max_inst, r->opt.max_requests));
    LR_TRY(lr__fleet_init(&r->fleet, m, r->max_inst));
    if (r->opt.marks > 0)
        LR_TRY(lr__marks_init(&r->marks, m, r->opt.marks,
                              lr__mix64(r->hash_seed, SEED_MARKS)));
    struct lr__rscratch *sc;
    LR_TRY(scratch_new(r, &sc));
    atomic_store_explicit(&r->spare, sc, memory_order_relaxed);
    r->n_scratch = 1;
    LR_TRY(lr__peers_init(&r->peers, m, r->opt.max_peers, r->max_inst,
                          r->opt.replica_id, r->opt.gauge_ttl_ns));
    lr__peers_on_moved(&r->peers, lr__router_gauge_moved, r);
    return lr__router_pstates_setup(r, r->policy);
}

/* opt.learner, copied with the MLP options it points to (both borrowed
 * for the call), and judged by every state kind that takes options. */
static lr_status
copy_policy_options(lr_router *r, const lr_learner_options *learner)
{
    if (learner != NULL) {
        lr_learner_options_init(&r->opt_learner);
        LR_TRY(lr__copy_sized(&r->opt_learner, sizeof r->opt_learner, learner,
                              LR_LEARNER_OPTIONS_SIZE_V1));
        const lr_mlp_options *mo = r->opt_learner.mlp;
        r->opt_learner.mlp = NULL;
        if (mo != NULL) {
            lr_mlp_options_init(&r->opt_learner_mlp);
            LR_TRY(lr__copy_sized(&r->opt_learner_mlp,
                                  sizeof r->opt_learner_mlp, mo,
                                  LR_MLP_OPTIONS_SIZE_V1));
            r->opt_learner.mlp = &r->opt_learner_mlp;
        }
        r->has_opt_learner = true;
    }
    struct lr__penv env = lr__router_env(r);
    for (uint32_t kind = 0; kind < LR__STATE_MAX; kind++) {
        const struct lr__pstate_ops *ops = lr__pstate_ops_of(r->pt, kind);
        if (ops != NULL && ops->check != NULL)
            LR_TRY(ops->check(&env));
    }
    return LR_OK;
}

/* The read-write locks (writers first where the C library can say so:
 * routes, which read, must not starve telemetry, which writes), the
 * generator's and the scratch pool's mutexes: all or none. */
static int
rwl_init(struct lr__rwl *l)
{
    pthread_rwlockattr_t a;
    if (pthread_rwlockattr_init(&a) != 0)
        return -1;
#if defined(__GLIBC__)
    (void)pthread_rwlockattr_setkind_np(
        &a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    int e = pthread_rwlock_init(&l->rw, &a);
    pthread_rwlockattr_destroy(&a);
    atomic_init(&l->busy, 0);
    return e;
}

static lr_status
locks_init(lr_router *r)
{
    if (rwl_init(&r->lk) != 0)
        return LR_ENOMEM;
    if (rwl_init(&r->ixlk) != 0) {
        pthread_rwlock_destroy(&r->lk.rw);
        return LR_ENOMEM;
    }
    if (pthread_mutex_init(&r->rng_mu, NULL) != 0) {
        pthread_rwlock_destroy(&r->ixlk.rw);
        pthread_rwlock_destroy(&r->lk.rw);
        return LR_ENOMEM;
    }
    if (pthread_mutex_init(&r->pool_mu, NULL) != 0) {
        pthread_mutex_destroy(&r->rng_mu);
        pthread_rwlock_destroy(&r->ixlk.rw);
        pthread_rwlock_destroy(&r->lk.rw);
        return LR_ENOMEM;
    }
    if (pthread_mutex_init(&r->wait_mu, NULL) != 0) {
        pthread_mutex_destroy(&r->pool_mu);
        pthread_mutex_destroy(&r->rng_mu);
        pthread_rwlock_destroy(&r->ixlk.rw);
        pthread_rwlock_destroy(&r->lk.rw);
        return LR_ENOMEM;
    }
    return LR_OK;
}

/* The host's options over the defaults (0 fields keep the default). */
static lr_status
read_options(const lr_router_options *opt, lr_router_options *o)
{
    *o = options_defaults;
    if (opt == NULL)
        return LR_OK;
    memset(o, 0, sizeof *o);
    LR_TRY(lr__copy_sized(o, sizeof *o, opt, LR_ROUTER_OPTIONS_SIZE_V1));
    /* the policy's 0 is a policy of its own: taken as given */
#define KEEP(f) LR__ZERO_KEEPS_DEFAULT(o, &options_defaults, f)
    ZERO_KEEPS_DEFAULT(KEEP);
#undef KEEP
    LR_RETURN_IF(o->index_eviction != LR_EVICT_REMOTE_FIRST &&
                     o->index_eviction != LR_EVICT_LRU,
                 LR_EINVAL);
    LR_RETURN_IF(o->max_peers > LR_ROUTER_MAX_PEERS, LR_EINVAL);
    LR_RETURN_IF(o->flags != 0, LR_EINVAL);
    LR_RETURN_IF(o->policy < 0 || o->policy >= LR__POLICY_COUNT, LR_EINVAL);
    LR_RETURN_IF(o->max_instances > LR_ROUTER_MAX_INSTANCES, LR_EINVAL);
    LR_RETURN_IF(o->queue_capacity > LR_ROUTER_MAX_WAITING ||
                     o->queue_tenants > LR_ROUTER_MAX_TENANTS ||
                     o->queue_tokens > LR_ROUTER_MAX_QUEUE_TOKENS,
                 LR_EINVAL);
    LR_RETURN_IF(o->marks > LR_ROUTER_MAX_MARKS, LR_EINVAL);
    return LR_OK;
}

lr_status
lr_router_create(const lr_router_options *opt, lr_router **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    lr_router_options o;
    LR_TRY(read_options(opt, &o));
    lr_router *r;
    LR_TRY(LR__HANDLE_NEW(r, lr_router, o.allocator));
    if (locks_init(r) != LR_OK) {
        LR__HANDLE_FREE(r, lr_router);
        return LR_ENOMEM;
    }
    r->spins = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? LR__ROUTER_SPINS : 0;
    r->opt = o;
    r->opt.learner = NULL; /* borrowed for the call only */
    r->opt.allocator = NULL;
    r->policy = o.policy;
    r->max_inst = o.max_instances;
    r->block_tokens = o.block_tokens;
    lr__rng_seed(&r->rng, o.seed);
    r->hash_seed = lr__hash_seed(o.hash_seed, r);
    lr__param_defaults(r->param);
    clock_skew(r);
    for (unsigned c = 0; c < LR_LOAD_MAX_CLASSES; c++)
        r->rate[c] = DEFAULT_RATE;
    for (uint32_t k = 0; k < LR__STATE_MAX; k++)
        atomic_init(&r->pstate[k], NULL);
    r->pt = &lr__builtin_policies;
    lr_status st = copy_policy_options(r, o.learner);
    if (st == LR_OK)
        st = lr__router_make_parts(r, &r->ix, &r->ring, &r->ld);
    if (st == LR_OK)
        st = create_tables(r);
    if (st != LR_OK) {
        router_free(r);
        return st;
    }
    *out = r;
    return LR_OK;
}

void
lr_router_destroy(lr_router *r)
{
    if (r != NULL)
        router_free(r);
}

lr_status
lr__router_set_policies(lr_router *r, const struct lr__ptable *t)
{
    LR_RETURN_IF(r == NULL || t == NULL || t->n < LR__POLICY_COUNT ||
                     t->n >= LR__STATE_MAX,
                 LR_EINVAL);
    lr__router_lock(r);
    lr_status st = r->n_inst != 0 ? LR_ESTATE : LR_OK;
    if (st == LR_OK) {
        r->pt = t;
        st = lr__router_pstates_setup(r, r->policy);
    }
    return lr__router_release(r, st);
}

lr_status
lr_router_set_policy(lr_router *r, int32_t policy)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    LR_RETURN_IF(policy < 0, LR_EINVAL);
    lr__router_lock(r);
    lr_status st = (uint32_t)policy < r->pt->n ? LR_OK : LR_EINVAL;
    if (st == LR_OK)
        st = lr__router_pstates_setup(r, policy);
    if (st == LR_OK)
        r->policy = policy;
    return lr__router_release(r, st);
}

int32_t
lr_router_policy(const lr_router *r)
{
    if (r == NULL)
        return -1;
    lr__router_lock(r);
    int32_t p = r->policy;
    lr__router_unlock(r);
    return p;
}

uint32_t
lr_router_instance_count(const lr_router *r)
{
    if (r == NULL)
        return 0;
    lr__router_lock(r);
    uint32_t n = r->n_inst;
    lr__router_unlock(r);
    return n;
}

/* ---- the clock (router_impl.h) ------------------------------------------ */

lr_status
lr__router_clock(lr_router *r, uint64_t t_ns, bool mutates)
{
    return lr__clock_judge(&r->clock, t_ns, mutates);
}

void
lr__router_clock_take(lr_router *r, uint64_t t_ns)
{
    lr__clock_take(&r->clock, t_ns);
}

/* ---- instances ------------------------------------------------------------------ */

/* Instance names -> ids: an lr__table of ids keyed by the name's hash;
 * the lookup compares the name held in the instance table. */
struct name_probe {
    const struct lr__rinst *inst;
    const char *name;
    size_t len;
};

static inline uint64_t
name_hash(const lr_router *r, const char *name, size_t len)
{
    return lr__hash(name, len, r->hash_seed ^ SEED_NAMES);
}

static bool
name_eq(const void *ctx, uint64_t key, uint32_t id)
{
    const struct name_probe *p = ctx;
    (void)key;
    return p->inst[id].name_len == p->len &&
           memcmp(p->inst[id].name, p->name, p->len) == 0;
}

/* The id of the instance named `name`, or LR_NIL. */
static uint32_t
name_find(const lr_router *r, const char *name, size_t len)
{
    struct name_probe p = { r->inst, name, len };
    return lr__table_find(&r->names, name_hash(r, name, len), 0, name_eq, &p);
}

/* The first position in act[] whose id is not below `id`. */
static uint32_t
act_lower(const lr_router *r, uint32_t id)
{
    uint32_t lo = 0, hi = r->n_act;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->act[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* act[] stays ascending: an id above every routable one (adds in id
 * order, a restore) is appended; one below moves the tail up by one, a
 * memmove no longer than the table a route() builds. */
static void
act_insert(lr_router *r, uint32_t id)
{
    uint32_t k =
        r->n_act > 0 && r->act[r->n_act - 1] > id ? act_lower(r, id) : r->n_act;
    memmove(&r->act[k + 1], &r->act[k], (r->n_act - k) * sizeof *r->act);
    r->act[k] = id;
    r->n_act++;
    lr__router_fleet_touch(r, id);
    lr__router_fleet_sync(r);
}

static void
act_remove(lr_router *r, uint32_t id)
{
    uint32_t k = act_lower(r, id);
    if (k == r->n_act || r->act[k] != id)
        return;
    memmove(&r->act[k], &r->act[k + 1], (r->n_act - k - 1) * sizeof *r->act);
    r->n_act--;
    lr__fleet_drop(&r->fleet, id);
    lr__router_fleet_sync(r);
}

/* The wait of lr__rwl_lock (write) and lr__rwl_rdlock, whose first try
 * failed: spin while the holder writes, then sleep (router_impl.h). */
LR_COLD void
lr__rwl_wait(struct lr__rwl *l, uint32_t spins, bool write)
{
    bool held = false;
    for (unsigned i = 0; !held && i < spins; i++) {
        lr__router_pause();
        held = atomic_load_explicit(&l->busy, memory_order_relaxed) == 0 &&
               (write ? pthread_rwlock_trywrlock(&l->rw)
                      : pthread_rwlock_tryrdlock(&l->rw)) == 0;
    }
    if (!held)
        (void)(write ? pthread_rwlock_wrlock(&l->rw)
                     : pthread_rwlock_rdlock(&l->rw));
}

void
lr__router_fleet_touch(lr_router *r, uint32_t id)
{
    if (!r->fleet_on)
        return; /* no route reads them: a row's fill and five moves saved */
    if (lr__router_act_index(r, id) == NONE) {
        lr__fleet_drop(&r->fleet, id);
        return;
    }
    uint64_t now = atomic_load_explicit(&r->clock.newest, memory_order_relaxed);
    lr_candidate c;
    memset(&c, 0, sizeof c);
    c.instance = id;
    (void)lr__load_fill(r->ld, id, now,
                        (uint64_t)(r->param[LR_PARAM_STATS_MAX_AGE_S] * 1e9),
                        UINT64_MAX, 0, &c); /* tracked while routable */
    lr__peers_add(&r->peers, now, &c);
    lr__fleet_set(&r->fleet, &c);
}

void
lr__router_fleet_touch_all(lr_router *r)
{
    for (uint32_t k = 0; k < r->n_act; k++)
        lr__router_fleet_touch(r, r->act[k]);
}

void
lr__router_fleet_sync(lr_router *r)
{
    bool on = r->n_act > (uint32_t)r->param[LR_PARAM_NARROW_ABOVE];
    if (on == r->fleet_on)
        return;
    r->fleet_on = on;
    if (on)
        lr__router_fleet_touch_all(r);
    else
        lr__fleet_clear(&r->fleet);
}

void
lr__router_gauge_moved(void *ctx, uint32_t id)
{
    lr_router *r = ctx;
    if (id == LR_INSTANCE_NONE)
        lr__router_fleet_touch_all(r);
    else
        lr__router_fleet_touch(r, id);
}

uint32_t
lr__router_act_index(const lr_router *r, uint32_t id)
{
    uint32_t k = act_lower(r, id);
    return k < r->n_act && r->act[k] == id ? k : NONE;
}

static bool
valid_name(const char *name, size_t *len)
{
    if (name == NULL)
        return false;
    size_t n = 0;
    while (n <= NAME_MAX_LEN && name[n] != '\0')
        n++;
    *len = n;
    return n >= 1 && n <= NAME_MAX_LEN;
}

/* A spec's models: each name valid, their hashes into h (distinct ones
 * only; *n_out of them). */
static lr_status
model_hashes(const lr_instance_spec *s, uint64_t *h, uint32_t *n_out)
{
    LR_RETURN_IF(s->n_models > LR_ROUTER_MAX_MODELS, LR_EINVAL);
    LR_RETURN_IF(s->n_models > 0 && s->models == NULL, LR_EINVAL);
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_models; i++) {
        size_t len;
        LR_RETURN_IF(!valid_name(s->models[i], &len), LR_EINVAL);
        uint64_t x = lr_name_hash(s->models[i], len);
        bool seen = false;
        for (uint32_t j = 0; j < n; j++)
            seen |= h[j] == x;
        if (!seen)
            h[n++] = x;
    }
    *n_out = n;
    return LR_OK;
}

static lr_status
add_locked(lr_router *r, const lr_instance_spec *s, size_t len,
           const uint64_t *models, uint32_t n_models, uint32_t *id)
{
    LR_RETURN_IF(name_find(r, s->name, len) != LR_NIL, LR_EEXIST);
    LR_RETURN_IF(r->n_inst >= r->max_inst, LR_ELIMIT);
    uint32_t n = id_lowest_free(r);
    char *copy = lr__alloc(&r->mem, len + 1);
    uint64_t *mcopy =
        n_models > 0 ? lr__alloc(&r->mem, n_models * sizeof *mcopy) : NULL;
    lr_status st = copy == NULL || (n_models > 0 && mcopy == NULL)
                       ? LR_ENOMEM
                       : lr__adapters_add(&r->ad, &r->mem, n, s->max_adapters);
    if (st == LR_OK) {
        memcpy(copy, s->name, len);
        copy[len] = '\0';
        st = lr_ring_add(r->ring, copy, n);
        if (st != LR_OK)
            lr__adapters_remove(&r->ad, &r->mem, n);
    }
    if (st != LR_OK) {
        lr__free(&r->mem, copy, len + 1);
        lr__free(&r->mem, mcopy, n_models * sizeof *mcopy);
        return st;
    }
    st = lr_load_add_instance(r->ld, n, s->instance_class, s->prefix_caching);
    if (LR_NEVER(st != LR_OK)) {          /* n < max_inst and free */
        (void)lr_ring_remove(r->ring, n); /* just added: cannot fail */
        lr__adapters_remove(&r->ad, &r->mem, n);
        lr__free(&r->mem, copy, len + 1);
        lr__free(&r->mem, mcopy, n_models * sizeof *mcopy);
        return st;
    }
    /* The initial RTT is not a probe: it serves (init_rtt_ms, see gather)
     * until the first probe, which then sets the EWMA. */
    struct lr__rinst *in = &r->inst[n];
    in->name = copy;
    in->name_len = (uint32_t)len;
    in->live = 1;
    in->draining = 0;
    if (n_models > 0)
        memcpy(mcopy, models, n_models * sizeof *mcopy);
    in->models = mcopy;
    in->n_models = n_models;
    r->n_modeled += n_models > 0;
    in->place = (struct lr__rplace){ s->role, s->node, s->rack, s->region };
    r->n_prefill += s->role == LR_ROLE_PREFILL;
    r->init_rtt_ms[n] = (double)s->rtt_ns / 1e6;
    lr__table_insert(&r->names, name_hash(r, copy, len),
                     n); /* sized at create */
    id_take(r, n);
    r->n_inst++;
    act_insert(r, n);
    *id = n;
    return LR_OK;
}

void
lr__router_put_instance(lr_router *r, uint32_t id, char *name, uint32_t len,
                        bool draining, double init_rtt_ms, uint64_t *models,
                        uint32_t n_models, const struct lr__rplace *place)
{
    struct lr__rinst *in = &r->inst[id];
    in->name = name;
    in->name_len = len;
    in->live = 1;
    in->draining = draining;
    in->models = models;
    in->n_models = n_models;
    r->n_modeled += n_models > 0;
    in->place = *place;
    r->n_prefill += place->role == LR_ROLE_PREFILL;
    r->init_rtt_ms[id] = init_rtt_ms;
    lr__table_insert(&r->names, name_hash(r, name, len), id); /* sized */
    id_take(r, id);
    r->n_inst++;
    if (!draining)
        act_insert(r, id);
}

bool
lr__router_name_ok(const char *name, size_t len)
{
    return len >= 1 && len <= NAME_MAX_LEN && memchr(name, 0, len) == NULL;
}

lr_status
lr_router_add_instance(lr_router *r, const lr_instance_spec *spec, uint32_t *id)
{
    LR_RETURN_IF(r == NULL || spec == NULL || id == NULL, LR_EINVAL);
    lr_instance_spec s = spec_defaults;
    LR_TRY(lr__copy_sized(&s, sizeof s, spec, LR_INSTANCE_SPEC_SIZE_V1));
    size_t len;
    LR_RETURN_IF(!valid_name(s.name, &len), LR_EINVAL);
    LR_RETURN_IF(s.instance_class >= LR_LOAD_MAX_CLASSES, LR_EINVAL);
    LR_RETURN_IF(s.prefix_caching != 0 && s.prefix_caching != 1, LR_EINVAL);
    LR_RETURN_IF(s.rtt_ns > LR_LOAD_MAX_RTT_NS, LR_ERANGE);
    uint64_t models[LR_ROUTER_MAX_MODELS];
    uint32_t n_models = 0;
    LR_TRY(model_hashes(&s, models, &n_models));
    LR_RETURN_IF(s.max_adapters > LR_ROUTER_MAX_ADAPTERS, LR_ERANGE);
    LR_RETURN_IF(s.role < LR_ROLE_BOTH || s.role > LR_ROLE_DECODE, LR_EINVAL);
    lr__router_lock(r);
    lr_status st = add_locked(r, &s, len, models, n_models, id);
    return lr__router_release(r, st);
}

lr_status
lr_router_find_instance(const lr_router *r, const char *name, uint32_t *id)
{
    size_t len;
    LR_RETURN_IF(r == NULL || id == NULL || !valid_name(name, &len), LR_EINVAL);
    lr__router_lock(r);
    uint32_t found = name_find(r, name, len);
    if (found != LR_NIL)
        *id = found;
    lr__router_unlock(r);
    return found != LR_NIL ? LR_OK : LR_ENOENT;
}

struct lr__rinst *
lr__router_inst(const lr_router *r, uint32_t id)
{
    if (id >= r->max_inst || !r->inst[id].live)
        return NULL;
    return &r->inst[id];
}

lr_status
lr_router_drain_instance(lr_router *r, uint32_t id, int32_t draining)
{
    LR_RETURN_IF(r == NULL || (draining != 0 && draining != 1), LR_EINVAL);
    lr__router_lock(r);
    lr_status st = LR_OK;
    struct lr__rinst *in = lr__router_inst(r, id);
    if (in == NULL) {
        st = LR_ENOENT;
    } else if (draining && !in->draining) {
        (void)lr_ring_remove(r->ring, id); /* on the ring: cannot fail */
        act_remove(r, id);
        in->draining = 1;
    } else if (!draining && in->draining) {
        st = lr_ring_add(r->ring, in->name, id);
        if (st == LR_OK) {
            act_insert(r, id);
            in->draining = 0;
        }
    }
    return lr__router_release(r, st);
}

void
lr__router_settle_ended(lr_router *r, uint32_t slot, uint64_t now_ns,
                        bool completed)
{
    LR__ROUTER_EACH_PSTATE(r, kind, ops, sp)
    {
        if (ops->ended != NULL)
            ops->ended(sp, slot, now_ns, completed);
    }
}

/* lr__load_each_req's visit of a removed instance's requests. */
static int
settle_gone(void *ctx, const struct lr__req_view *v)
{
    lr_router *r = ctx;
    lr__router_settle_ended(r, v->slot, r->clock.newest, false);
    return 0;
}

lr_status
lr_router_remove_instance(lr_router *r, uint32_t id)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    struct lr__rinst *in = lr__router_inst(r, id);
    if (in == NULL) {
        return lr__router_release(r, LR_ENOENT);
    }
    if (!in->draining) {
        (void)lr_ring_remove(r->ring, id); /* on the ring: cannot fail */
        act_remove(r, id);
    }
    /* LR_ENOENT when it never learned anything: nothing to drop; a
     * route that chose it and has yet to learn sees the new generation
     * and does not (route_learn) */
    lr__router_ix_lock(r);
    (void)lr_index_remove_instance(r->ix, id);
    r->ixgen[id]++;
    r->ixgen_all++;
    lr__router_marks_forget(r, id);
    lr__router_ix_unlock(r);
    /* its requests end with it, in the policies' states too */
    lr__load_each_req(r->ld, id, settle_gone, r);
    (void)lr_load_remove_instance(r->ld, id); /* tracked since its add */
    lr__table_remove(&r->names, name_hash(r, in->name, in->name_len), id);
    lr__free(&r->mem, in->name, in->name_len + 1);
    lr__free(&r->mem, in->models, in->n_models * sizeof(uint64_t));
    r->n_modeled -= in->n_models > 0;
    r->n_prefill -= in->place.role == LR_ROLE_PREFILL;
    lr__adapters_remove(&r->ad, &r->mem, id);
    memset(in, 0, sizeof *in);
    /* a new instance under this id starts anew; the counters stay in the
     * router's totals */
    r->st.kv_batches += r->src[id].batches;
    r->st.kv_duplicates += r->src[id].dups;
    r->st.kv_gaps += r->src[id].gaps;
    r->st.kv_restarts += r->src[id].restarts;
    memset(&r->src[id], 0, sizeof r->src[id]);
    id_free(r, id);
    r->n_inst--;
    return lr__router_release(r, LR_OK);
}

lr_status
lr_router_set_class(lr_router *r, uint32_t cls, const lr_class_spec *spec)
{
    LR_RETURN_IF(r == NULL || spec == NULL, LR_EINVAL);
    LR_RETURN_IF(cls >= LR_LOAD_MAX_CLASSES, LR_EINVAL);
    lr_class_spec s = class_defaults;
    LR_TRY(lr__copy_sized(&s, sizeof s, spec, LR_CLASS_SPEC_SIZE_V1));
    LR_RETURN_IF(isnan(s.prefill_tokens_per_s), LR_EINVAL);
    LR_RETURN_IF(
        !(s.prefill_tokens_per_s >= 1 && s.prefill_tokens_per_s <= 1e9),
        LR_ERANGE);
    lr__router_lock(r);
    r->rate[cls] = s.prefill_tokens_per_s;
    return lr__router_release(r, LR_OK);
}

/* ---- telemetry --------------------------------------------------------------------- */

lr_status
lr_router_set_stats(lr_router *r, uint32_t id, const lr_engine_stats *stats)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    /* the scrape's own time is what the clock judges (a mis-stamped
     * scrape must not make the honest ones after it look old) */
    bool stamped =
        stats != NULL && stats->struct_size >= LR_ENGINE_STATS_SIZE_V1;
    lr__router_lock(r);
    lr_status st =
        stamped ? lr__router_clock(r, stats->scraped_ns, true) : LR_OK;
    if (st == LR_OK)
        st = lr_load_set_stats(r->ld, id, stats);
    if (st == LR_OK && stamped)
        lr__router_clock_take(r, stats->scraped_ns);
    if (st == LR_OK)
        lr__router_fleet_touch(r, id);
    return lr__router_release(r, st);
}

/* Hashes of a report's names, the running ones first, each once. */
static lr_status
report_hashes(const char *const *names, size_t n, uint64_t *h, size_t *k)
{
    LR_RETURN_IF(n > 0 && names == NULL, LR_EINVAL);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        LR_RETURN_IF(!valid_name(names[i], &len), LR_EINVAL);
        uint64_t x = lr_name_hash(names[i], len);
        bool seen = false;
        for (size_t j = 0; j < *k && !seen; j++)
            seen = h[j] == x;
        if (!seen)
            h[(*k)++] = x;
    }
    return LR_OK;
}

lr_status
lr_router_set_adapters(lr_router *r, uint32_t id, const lr_adapter_stats *stats)
{
    LR_RETURN_IF(r == NULL || stats == NULL, LR_EINVAL);
    lr_adapter_stats s;
    memset(&s, 0, sizeof s);
    LR_TRY(lr__copy_sized(&s, sizeof s, stats, LR_ADAPTER_STATS_SIZE_V1));
    LR_RETURN_IF(s.n_running > LR_ROUTER_MAX_ADAPTERS ||
                     s.n_waiting > LR_ROUTER_MAX_ADAPTERS - s.n_running,
                 LR_EINVAL);
    LR_RETURN_IF(s.max_adapters > LR_ROUTER_MAX_ADAPTERS, LR_ERANGE);
    uint64_t h[LR_ROUTER_MAX_ADAPTERS];
    size_t k = 0;
    LR_TRY(report_hashes(s.running, s.n_running, h, &k));
    LR_TRY(report_hashes(s.waiting, s.n_waiting, h, &k));
    lr__router_lock(r);
    lr_status st = lr__router_inst(r, id) == NULL
                       ? LR_ENOENT
                       : lr__router_clock(r, s.scraped_ns, true);
    if (st == LR_OK) {
        lr__adapters_report(&r->ad, id, h, k, s.max_adapters, s.scraped_ns);
        lr__router_clock_take(r, s.scraped_ns);
    }
    return lr__router_release(r, st);
}

lr_status
lr_router_adapters(const lr_router *r, uint32_t id, uint64_t *hashes,
                   size_t capacity, size_t *n)
{
    LR_RETURN_IF(r == NULL || n == NULL, LR_EINVAL);
    LR_RETURN_IF(hashes == NULL && capacity != 0, LR_EINVAL);
    lr__router_rdlock(r);
    lr_status st = LR_OK;
    if (lr__router_inst(r, id) == NULL) {
        st = LR_ENOENT;
    } else {
        uint64_t tmp[LR_ROUTER_MAX_ADAPTERS];
        size_t have =
            lr__adapters_list(&r->ad, id, tmp, LR_ROUTER_MAX_ADAPTERS);
        *n = have;
        if (have > capacity)
            st = LR_EBUFSIZE;
        else if (have > 0)
            memcpy(hashes, tmp, have * sizeof *tmp);
    }
    lr__router_rdunlock(r);
    return st;
}

lr_status
lr_router_observe_rtt(lr_router *r, uint32_t id, uint64_t rtt_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr_status st = lr_load_observe_rtt(r->ld, id, rtt_ns);
    return lr__router_release(r, st);
}

lr_status
lr_router_instance_load(const lr_router *r, uint32_t id, lr_load_snapshot *out)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr_status st = lr_load_get(r->ld, id, out);
    return lr__router_release(r, st);
}

/* ---- parameters ---------------------------------------------------------------------------- */

/* Every state that depends on `key` rebuilds first (a key belongs to at
 * most one state: LR_ENOMEM there leaves everything as it was); then the
 * value is taken, the states the policy now uses are made (Lodestar's
 * fallback names other states), and the states' own values synced. */
static lr_status
set_param_locked(lr_router *r, int32_t key, double value)
{
    struct lr__penv env = lr__router_env(r);
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        if (ops->set_param != NULL)
            LR_TRY(ops->set_param(st, &env, key, value));
    }
    double old = r->param[key];
    r->param[key] = value;
    lr_status st = lr__router_pstates_setup(r, r->policy);
    if (st != LR_OK)
        r->param[key] = old;
    lr__router_pstates_sync(r);
    lr__router_fleet_sync(r);
    clock_skew(r);
    return st;
}

lr_status
lr_router_set_param(lr_router *r, int32_t key, double value)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    LR_TRY(lr__param_check(key, value));
    lr__router_lock(r);
    lr_status st = set_param_locked(r, key, value);
    return lr__router_release(r, st);
}

lr_status
lr_router_get_param(const lr_router *r, int32_t key, double *value)
{
    LR_RETURN_IF(r == NULL || value == NULL, LR_EINVAL);
    LR_RETURN_IF(lr__param_def(key) == NULL, LR_ENOTSUP);
    lr__router_lock(r);
    bool owned = false;
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        if (!owned && ops->get != NULL)
            owned = ops->get(st, key, value);
    }
    if (!owned)
        *value = r->param[key];
    return lr__router_release(r, LR_OK);
}

/* ---- statistics ---------------------------------------------------------------------------------- */

lr_status
lr_router_get_stats(const lr_router *r, lr_router_stats *out)
{
    LR_TRY(lr__out_check(r, out, LR_ROUTER_STATS_SIZE_V1));
    lr__router_lock(r);
    lr_router_stats s = r->st;
    s.dry_runs = atomic_load(&((lr_router *)r)->dry_runs);
    s.inflight = lr_load_inflight(r->ld);
    s.instances = r->n_inst;
    s.routable = r->n_act;
    size_t nr = sizeof s.by_reason / sizeof s.by_reason[0];
    for (size_t i = 0; i < nr && i < LR__REASON_COUNT; i++)
        s.by_reason[i] = r->by_reason[i];
    for (uint32_t i = 0; i < r->max_inst; i++) {
        const struct lr__kvsrc *k = &r->src[i];
        s.kv_batches += k->batches;
        s.kv_duplicates += k->dups;
        s.kv_gaps += k->gaps;
        s.kv_restarts += k->restarts;
        s.kv_gaps_open += k->gap;
    }
    s.gauges_exported = r->peers.gseq_out;
    s.gauges_imported = r->peers.imported;
    s.gauges_skipped = r->peers.skipped;
    s.gauges_expired = r->peers.expired;
    s.peers_live = lr__peers_live(&r->peers, 0); /* held: not yet swept */
    lr__router_unlock(r);
    lr__router_wait_stats((lr_router *)r, &s);
    return lr__copy_out(out, &s, sizeof s);
}

lr_status
lr_router_index_stats(const lr_router *r, lr_index_stats *out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr__router_ix_lock(r);
    lr_status st = lr_index_get_stats(r->ix, out);
    lr__router_ix_unlock(r);
    return lr__router_release(r, st);
}

lr_status
lr_router_reason_counts(const lr_router *r, uint64_t *counts, size_t capacity,
                        size_t *n_counts)
{
    LR_RETURN_IF(r == NULL || n_counts == NULL, LR_EINVAL);
    LR_RETURN_IF(capacity > 0 && counts == NULL, LR_EINVAL);
    *n_counts = LR__REASON_COUNT;
    LR_RETURN_IF(capacity < LR__REASON_COUNT, LR_EBUFSIZE);
    lr__router_lock(r);
    memcpy(counts, r->by_reason, sizeof r->by_reason);
    return lr__router_release(r, LR_OK);
}

/* ---- internal hooks ------------------------------------------------------------------------------ */

uint64_t
lr__router_digest(const lr_router *r)
{
    if (r == NULL)
        return 0;
    lr__router_lock(r);
    lr__router_ix_lock(r);
    uint64_t h = lr__index_digest(r->ix);
    lr__router_ix_unlock(r);
    h = lr__digest_mix(h, lr__ring_digest(r->ring));
    h = lr__digest_mix(h, lr__load_digest(r->ld));
    h = lr__digest_mix(h, r->clock.newest); /* not .ahead: a refusal's */
    h = lr__digest_mix(h, ((uint64_t)r->policy << 32) | r->n_inst);
    h = lr__digest_mix(h, r->n_act);
    for (uint32_t i = 0; i < r->max_inst; i++) {
        const struct lr__rinst *in = &r->inst[i];
        if (!in->live)
            continue;
        h = lr__digest_mix(h, lr__hash(in->name, in->name_len, i));
        h = lr__digest_mix(h, in->draining);
        h = lr__digest_mix(h, lr__double_bits(r->init_rtt_ms[i]));
        for (uint32_t j = 0; j < in->n_models; j++)
            h = lr__digest_mix(h, in->models[j]);
        h = lr__digest_mix(h, lr__hash(&in->place, sizeof in->place, 17));
    }
    h = lr__adapters_digest(&r->ad, h);
    for (uint32_t k = 0; k < r->n_act; k++)
        h = lr__digest_mix(h, r->act[k]);
    h = lr__digest_mix(h, lr__hash(r->param, sizeof r->param, 1));
    h = lr__digest_mix(h, lr__hash(r->rate, sizeof r->rate, 2));
    for (int k = 0; k < 4; k++)
        h = lr__digest_mix(h, r->rng.s[k]);
    h = lr__digest_mix(h, r->st.routes ^ (atomic_load(&r->dry_runs) << 20) ^
                              r->st.prompt_tokens);
    h = lr__digest_mix(h, lr__hash(r->by_reason, sizeof r->by_reason, 3));
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        h = lr__digest_mix(h, kind);
        if (ops->digest != NULL)
            h = ops->digest(st, h);
    }
    /* the counters of exports and skipped imports are left out */
    h = lr__peers_digest(&r->peers, h);
    for (uint32_t i = 0; i < r->max_inst; i++) /* counters left out */
        if (r->src[i].has)
            h = lr__digest_mix(h, r->src[i].next ^ ((uint64_t)i << 40) ^
                                      ((uint64_t)r->src[i].gap << 63) ^
                                      lr__double_bits(r->src[i].last_ts) ^
                                      r->src[i].last_at_ns);
    lr__router_unlock(r);
    return lr__router_wait_digest((lr_router *)r, h); /* its lock first */
}

/* Every live instance is named, tracked, and on the ring and routable
 * exactly when not draining. */
static lr_status
verify_instances(const lr_router *r)
{
    uint32_t live = 0, routable = 0, modeled = 0, prefill = 0;
    for (uint32_t i = 0; i < r->max_inst; i++) {
        const struct lr__rinst *in = &r->inst[i];
        if (!in->live)
            continue;
        live++;
        modeled += in->n_models > 0;
        prefill += in->place.role == LR_ROLE_PREFILL;
        if (in->place.role < LR_ROLE_BOTH || in->place.role > LR_ROLE_DECODE)
            return LR_ECORRUPT;
        if (in->n_models > LR_ROUTER_MAX_MODELS ||
            (in->n_models > 0) != (in->models != NULL) || r->ad.inst[i] == NULL)
            return LR_ECORRUPT;
        if (name_find(r, in->name, in->name_len) != i ||
            !lr__load_has(r->ld, i) ||
            lr_ring_contains(r->ring, i) != !in->draining ||
            (lr__router_act_index(r, i) != NONE) != !in->draining)
            return LR_ECORRUPT;
        routable += !in->draining;
    }
    if (live != r->n_inst || routable != r->n_act || modeled != r->n_modeled ||
        prefill != r->n_prefill || r->names.count != r->n_inst ||
        lr__table_verify(&r->names) != LR_OK ||
        lr_ring_count(r->ring) != r->n_act)
        return LR_ECORRUPT;
    for (uint32_t k = 1; k < r->n_act; k++)
        if (r->act[k - 1] >= r->act[k])
            return LR_ECORRUPT;
    LR_RETURN_IF(r->fleet_on !=
                     (r->n_act > (uint32_t)r->param[LR_PARAM_NARROW_ABOVE]),
                 LR_ECORRUPT);
    LR_TRY(lr__fleet_verify(&r->fleet, r->act, r->fleet_on ? r->n_act : 0));
    /* an id's free bit is set exactly when no live instance holds it, a
     * summary bit exactly when its word is not 0, and no bit past the
     * last id is set */
    for (uint32_t i = 0; i < r->max_inst; i++)
        if ((r->free_w[i / 64] >> (i % 64) & 1) == r->inst[i].live)
            return LR_ECORRUPT;
    size_t nw = FREE_WORDS(r->max_inst), ns = FREE_WORDS(nw);
    if (r->max_inst % 64 != 0 && r->free_w[nw - 1] >> (r->max_inst % 64) != 0)
        return LR_ECORRUPT;
    for (size_t w = 0; w < ns * 64; w++)
        if ((r->free_s[w / 64] >> (w % 64) & 1) !=
            (w < nw && r->free_w[w] != 0))
            return LR_ECORRUPT;
    return LR_OK;
}

lr_status
lr__router_verify(const lr_router *r)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr__router_ix_lock(r);
    lr_status st = lr__index_verify(r->ix);
    lr__router_ix_unlock(r);
    if (st == LR_OK)
        st = lr__ring_verify(r->ring);
    if (st == LR_OK)
        st = lr__load_verify(r->ld);
    if (st == LR_OK)
        st = verify_instances(r);
    if (st == LR_OK)
        st = lr__adapters_verify(&r->ad);
    LR__ROUTER_EACH_PSTATE(r, kind, ops, x)
    {
        if (st == LR_OK && ops->verify != NULL)
            st = ops->verify(x);
    }
    lr__router_unlock(r);
    return st == LR_OK ? lr__router_wait_verify((lr_router *)r) : st;
}

size_t
lr__router_mem_live(const lr_router *r)
{
    return r != NULL ? r->mem.live : 0;
}
