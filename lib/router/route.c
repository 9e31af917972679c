/* The request path of lr_router: route(), the candidate table, the
 * lifecycle events and the rebalancing plan.
 *
 * route() runs in four sections (route_two_phase), one step per
 * function:
 *
 *   no lock:
 *     keys    block keys of the prompt (the route's scratch)
 *   read lock, many routes at once:
 *     match   cached tokens per instance (the index's peek: no touch;
 *             under the index's read lock)
 *     gather  rows[]: one lr_candidate per routable instance, in id order;
 *             in a fleet past LR_PARAM_NARROW_ABOVE, per candidate the
 *             policy can pick (narrow_pick: its hits, the ring's, the
 *             least loaded from the fleet's orders, a sample)
 *             (load tracker, scrapes, RTT, class rate, stall, and what
 *             the policy's states gather: prefix ages, calibration);
 *             with prefill instances, those that decode first
 *     rank    ring ranks of the policy's key (the states may supply it)
 *     decide  lr__pair_decide() on the router's policy table, with a
 *             seed drawn under the generator's own mutex: an instance,
 *             and in a disaggregated fleet maybe a prefill instance
 *   the index's write lock alone, one learn at a time:
 *     learn   the prompt at the chosen instances, unless they left
 *   write lock, one route at a time:
 *     record  dispatch (load tracker), then every state's record
 *             operation
 *
 * The table is read-only and each route writes only its own scratch (the
 * pool in router.c), so decisions run in parallel, and one route's learn
 * runs beside the others' decisions and records. Every other touch of the
 * index holds the index's lock inside the router's. Between the sections
 * another thread may drain or remove the chosen instance: the learn skips
 * an instance that left (its generation moved), the record checks, and
 * the route decides again (the learn for a drained instance stays, as
 * its cache does). Only the learn can fail, and atomically, before
 * anything else changes. Housekeeping that writes (index and peer expiry,
 * a state's refresh) is found due under the read lock and done under the
 * write lock before the table is built.
 *
 * Feedback runs the other way: first token -> load tracker and the
 * states' observe operation (GORGO's tuner, Lodestar's sample, adaptive's
 * calibration); completion and failure -> load tracker and the states. */
#include "common/lr_hash.h"
#include "learn/mlp.h"
#include "libroute/lr_ring.h"
#include "policy/dualmap.h"
#include "policy/recency.h"
#include "router/router_impl.h"

#define NONE LR_INSTANCE_NONE
#define KBUF_MIN 256u       /* first size of the key scratch */
#define UNLOCKED_KEYS 2048u /* keys hashed on the stack (16 KiB) */

/* One route's working state, between the pipeline's steps: what the
 * states' operations see of it (v), the key buffer, the seed of the
 * policy's draws and the choice. */
struct route {
    struct lr__route_view v;
    struct lr__rscratch *sc; /* its table, scores, hits and keys */
    const uint64_t *kb;      /* the keys hashed so far (sc->kbuf, or the
                                caller's stack), v.n_keys of them */
    uint64_t seed;           /* the policy's draws */
    struct lr__choice ch;
    /* a match made before the router's lock (route_early_match): its
     * hits in sc->hits, and the instances' generation then */
    bool early;
    size_t early_hits;
    uint64_t early_gen;
    /* a large fleet's match reports the deepest holders alone (the
     * index's cut peek): with cut.node not LR_NIL, the others are asked
     * after one by one (narrow_rest); hits_kept: the hits narrow_hits
     * took */
    bool cut_on;
    struct lr__peek_cut cut;
    uint32_t hits_kept;
    /* the index has a lower tier (its first KV event came): the match and
     * the rows read the tiers' columns */
    bool tiers;
    /* rows[0 .. nd) can decode, rows[nd .. v.routable) are prefill rows
     * (each part in id order) */
    uint32_t nd;
    /* a large fleet: the rows are the candidates in sc->pick (n_pick of
     * them so far, then sorted and each once), LR__NARROW_* of `narrow`
     * gathered; fs is the whole fleet's load for the policy */
    uint32_t narrow, n_pick;
    struct lr__fleet_stats fs;
    /* a large fleet: the ring's candidates narrow_pick read, in ring
     * order, which route_rank ranks (none read: no row is ranked) */
    uint32_t ring_ids[LR_RING_MAX_K], n_ring;
};

/* Every field of a new route zero but the policy scratch (v.scratch),
 * whose first v.n_scratch alone are read: an initializer would clear its
 * 512 bytes too, 8 more cache lines stored a call. */
static void
route_zero(struct route *rt)
{
    memset(rt, 0, offsetof(struct route, v.scratch));
    memset(&rt->v.n_scratch, 0,
           sizeof *rt - offsetof(struct route, v.n_scratch));
}

/* A route's state before its table (what route_zero left, or an earlier
 * try's). */
static void
route_start(const lr_router *r, struct route *rt, struct lr__rscratch *sc,
            const lr_request *q, const uint64_t *kb, size_t nk)
{
    rt->sc = sc;
    rt->v.pt = r->pt;
    rt->v.q = q;
    rt->v.keys = kb;
    rt->v.n_keys = nk;
    rt->v.block_tokens = r->block_tokens;
    rt->v.routable = r->n_act;
    rt->v.fleet = r->n_act;
    rt->v.policy = r->policy;
    rt->v.needs = lr__policy_needs(r->pt, r->policy, r->param);
    rt->v.param = r->param;
    rt->v.model = lr__router_name_hash(q->model);
    rt->v.rows_model = r->n_modeled > 0 ? rt->v.model : 0;
    rt->v.adapter = lr__router_name_hash(q->adapter);
    rt->v.salt = lr_adapter_salt(q->tenant_salt, rt->v.adapter);
    rt->v.adapters = &r->ad;
    rt->v.n_scratch = 0;
    rt->kb = kb;
    rt->seed = 0;
    rt->ch = (struct lr__choice){ 0 };
}

/* ---- route: keys and match ------------------------------------------------------------ */

static lr_status
scratch_keys(lr_router *r, struct lr__rscratch *sc, size_t n)
{
    return lr__grow(&r->mem, (void **)&sc->kbuf, &sc->kbuf_cap, n,
                    sizeof *sc->kbuf, KBUF_MIN);
}

/* The leading block keys a route needs: every one when it records (the
 * learn, the recency table) or the policy matches, follows recency or
 * DualMap's hotness; only those of the ring key's prefix for a ring
 * policy's decision alone (prefix_key reads no further); none for a
 * decision that reads only the load. The keys computed are the same
 * either way, so the decision is too. */
static size_t
keys_needed(const lr_router *r, const struct route *rt, uint32_t needs,
            bool records)
{
    const lr_request *q = rt->v.q;
    size_t all = q->n_tokens / r->block_tokens;
    if (records || (needs & (LR__NEEDS_MATCH | LR__NEEDS_AGE)))
        return all;
    uint32_t want = 0;
    int32_t kind = lr__policy_ring(r->pt, r->policy, r->param, &want);
    if (kind == LR_RING_KEY_HOTNESS)
        return all;
    if (kind == LR_RING_KEY_PREFIX ||
        (kind == LR_RING_KEY_SESSION && !q->has_session)) {
        size_t b = (size_t)r->param[LR_PARAM_SESSION_TOKENS] / r->block_tokens;
        return b < all ? b : all;
    }
    return 0;
}

/* Step 1: the prompt's block keys (those keys_needed says) into the
 * scratch, unless they were hashed already. */
static lr_status
route_keys(lr_router *r, struct route *rt, size_t n)
{
    const lr_request *q = rt->v.q;
    if (rt->kb != NULL && n <= rt->v.n_keys)
        return LR_OK; /* hashed before the lock was taken */
    rt->v.n_keys = n;
    LR_TRY(scratch_keys(r, rt->sc, n));
    rt->kb = rt->v.keys = rt->sc->kbuf;
    lr__index_input_keys(rt->v.salt, q->tokens, n, r->block_tokens, q->mm,
                         q->n_mm, rt->sc->kbuf);
    return LR_OK;
}

static void
prompt_of(const struct route *rt, lr_prompt *p)
{
    const lr_request *q = rt->v.q;
    lr_prompt_init(p);
    p->tokens = q->tokens;
    p->n_tokens = q->n_tokens;
    p->boundaries = q->boundaries;
    p->n_boundaries = q->n_boundaries;
    p->tenant_salt = rt->v.salt;
    p->keys = rt->v.n_keys > 0 ? rt->v.keys : NULL;
    p->n_keys = rt->v.n_keys;
}

/* cached_by_id[at] raised to tokens (a hit, a tier's, a mark's), an
 * entry set first remembered for the next match to clear. */
static inline void
set_cached(struct lr__rscratch *sc, size_t at, uint32_t tokens)
{
    if (tokens <= sc->cached_by_id[at])
        return;
    if (sc->cached_by_id[at] == 0)
        sc->touched[sc->n_touched++] = (uint32_t)at;
    sc->cached_by_id[at] = tokens;
}

/* A narrowed route's hits: of the n in sc->hits, the routable w holding
 * the most tokens, the fewest in flight among equals (so that the least
 * loaded holder of the longest prefix is one, however many hold it),
 * into its candidates; how many. The scores are free until the
 * decision: the selection runs there, each hit one exact double (tokens
 * < 2^27, in flight clamped to 10 bits, the id 16). */
static uint32_t
narrow_hits(const lr_router *r, struct route *rt, size_t n, uint32_t w)
{
    struct lr__rscratch *sc = rt->sc;
    const struct lr__fleet *f = &r->fleet;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* the routable: a drained one's
                                        routes stay in the index */
        uint32_t id = sc->hits[i].instance;
        if (!lr__order_has(&f->o[LR__ORDER_INFLIGHT], id))
            continue;
        uint32_t busy = f->inflight[id] < 1023 ? f->inflight[id] : 1023;
        sc->score[m++] =
            ((double)sc->hits[i].tokens * 1024.0 + (double)(1023 - busy)) *
                65536.0 +
            (double)id;
    }
    size_t from = 0;
    if (m > w) {
        (void)lr__select(sc->score, m, m - w); /* [m - w, m): the most */
        from = m - w;
    }
    for (size_t i = from; i < m; i++) /* an exact integer: its low bits */
        sc->pick[rt->n_pick++] = (uint32_t)((uint64_t)sc->score[i] & 0xffffu);
    return (uint32_t)(m - from);
}

struct mark_ctx {
    const lr_router *r;
    struct route *rt;
    uint32_t picked;
};

/* A mark of a prompt this one holds: its instance held at least `depth`
 * blocks of it, unless its cache went since (it left, was cleared or
 * restarted: its marks generation moved). */
static void
mark_found(void *ctx, uint32_t inst, uint32_t gen, size_t depth)
{
    struct mark_ctx *x = ctx;
    const lr_router *r = x->r;
    struct lr__rscratch *sc = x->rt->sc;
    if (inst >= r->max_inst || r->mgen[inst] != gen)
        return;
    uint32_t tokens = (uint32_t)(depth * r->block_tokens);
    if (tokens <= sc->cached_by_id[inst])
        return;
    set_cached(sc, inst, tokens);
    /* a narrowed route's candidate, as a hit is (the deepest first) */
    if ((x->rt->narrow & LR__NARROW_HITS) &&
        x->picked < (uint32_t)r->param[LR_PARAM_NARROW_WIDTH] &&
        lr__order_has(&r->fleet.o[LR__ORDER_INFLIGHT], inst)) {
        x->rt->sc->pick[x->rt->n_pick++] = inst;
        x->picked++;
    }
}

/* Step 2, the marks (router/marks.h): what the index forgot of where the
 * prompts this one extends went. A hit past the index's counts; under
 * the index's read lock (the learn writes the marks under its write). */
static void
route_match_marks(lr_router *r, struct route *rt)
{
    if (r->marks.m == NULL || rt->v.n_keys < LR__MARK_STRIDE)
        return; /* none kept: not even the index's lock */
    struct mark_ctx x = { r, rt, 0 };
    lr__router_ix_rdlock(r);
    lr__marks_find(&r->marks, rt->v.keys, rt->v.n_keys, rt->v.q->now_ns,
                   r->opt.index_ttl_ns, mark_found, &x);
    lr__router_ix_rdunlock(r);
}

/* Step 2 for the lower tiers (lr_tier): how far past its GPU hit each
 * instance holds the prompt on the CPU tier, then on disk, into
 * cached_by_id's second and third arrays (lr_candidate.cpu_tokens,
 * disk_tokens): a tier's depth counts from the best of those above it,
 * so a block on two tiers counts once, on the better. A peek at each
 * tier's index that exists (none before its first KV event: nothing to
 * do, and every row stays as it was before tiers), into the hits buffer
 * the GPU's answer has been read from. A tier's failed peek (it cannot,
 * expiry being kept due-free with the GPU's) leaves its columns 0. */
static void
route_match_tiers(lr_router *r, struct route *rt)
{
    struct lr__rscratch *sc = rt->sc;
    uint32_t ni = r->max_inst;
    lr__router_ix_rdlock(r);
    for (int32_t t = LR_TIER_CPU; t <= LR_TIER_DISK; t++) {
        const lr_index *lo = lr__index_tier(r->ix, t);
        if (lo == NULL)
            continue;
        lr_index_match_result mr;
        lr_index_match_result_init(&mr);
        mr.hits = sc->hits;
        mr.hits_capacity = r->max_inst;
        if (lr__index_peek(lo, rt->v.keys, rt->v.n_keys, rt->v.q->now_ns,
                           sc->ms, &mr) != LR_OK)
            continue;
        for (size_t i = 0; i < mr.n_hits; i++) {
            uint32_t id = sc->hits[i].instance, tok = sc->hits[i].tokens;
            if (id >= ni)
                continue;
            /* past the best of the tiers above: the GPU's, and for disk
             * the CPU's too (its column runs on from the GPU's) */
            uint32_t above = sc->cached_by_id[id];
            if (t == LR_TIER_DISK)
                above += sc->cached_by_id[ni + id];
            set_cached(sc, (size_t)t * ni + id, tok > above ? tok - above : 0);
        }
        if (rt->narrow & LR__NARROW_HITS)
            (void)narrow_hits(r, rt, mr.n_hits,
                              (uint32_t)r->param[LR_PARAM_NARROW_WIDTH]);
    }
    lr__router_ix_rdunlock(r);
}

/* A cut match's hint to the next route's early one (match_hint): 2 and
 * its two bounds (enough <= 256, defer < 2^20); 1: a match that reports
 * every holder, 0: none. */
#define CUT_DEFER 8u /* x LR_PARAM_NARROW_WIDTH: a run of more is "many" */
static uint32_t
hint_of(const struct lr__peek_cut *cut)
{
    return 2u | cut->enough << 2 | cut->defer << 12;
}

/* Step 2: cached tokens per routable instance into the scratch's
 * cached_by_id (0 for all when the policy does not match), with the
 * lower tiers' (route_match_tiers). A peek: the index is only read
 * (expiry was made not due before, route_housekeep). */
static lr_status
route_match(lr_router *r, struct route *rt, bool want)
{
    struct lr__rscratch *sc = rt->sc;
    for (uint32_t i = 0; i < sc->n_touched; i++)
        sc->cached_by_id[sc->touched[i]] = 0;
    sc->n_touched = 0;
    /* a large fleet's route without tiers (whose columns count from the
     * GPU's, all of it) reads the deepest holders alone */
    struct lr__peek_cut cut = { 0, 0, LR_NIL };
    bool cuts = rt->narrow != 0 && !rt->tiers;
    if (cuts) {
        uint32_t w = (uint32_t)r->param[LR_PARAM_NARROW_WIDTH];
        cut.enough = (rt->narrow & LR__NARROW_HITS) ? w : 0;
        cut.defer = CUT_DEFER * w;
    }
    uint32_t hint = !want ? 0u : cuts ? hint_of(&cut) : 1u;
    if (atomic_load_explicit(&r->match_hint, memory_order_relaxed) != hint)
        atomic_store_explicit(&r->match_hint, hint, memory_order_relaxed);
    /* the early match, if no instance left since, and cut only if this
     * route may be */
    bool early =
        rt->early && rt->early_gen == r->ixgen_all && (cuts || !rt->cut_on);
    rt->hits_kept = 0;
    if (!want || rt->v.n_keys == 0 || !early)
        rt->cut_on = false;
    if (!want || rt->v.n_keys == 0)
        return LR_OK;
    lr_index_match_result mr;
    lr_index_match_result_init(&mr);
    mr.hits = sc->hits;
    mr.hits_capacity = r->max_inst;
    if (early) {
        mr.n_hits = rt->early_hits;
    } else {
        lr__router_ix_rdlock(r);
        lr_status st =
            lr__index_peek_cut(r->ix, rt->v.keys, rt->v.n_keys, rt->v.q->now_ns,
                               sc->ms, cuts ? &cut : NULL, &mr);
        rt->cut_on = cuts;
        rt->cut = cut;
        lr__router_ix_rdunlock(r);
        LR_TRY(st);
    }
    for (size_t i = 0; i < mr.n_hits; i++)
        if (sc->hits[i].instance < r->max_inst)
            set_cached(sc, sc->hits[i].instance, sc->hits[i].tokens);
    if (rt->narrow & LR__NARROW_HITS)
        rt->hits_kept = narrow_hits(r, rt, mr.n_hits,
                                    (uint32_t)r->param[LR_PARAM_NARROW_WIDTH]);
    route_match_marks(r, rt);
    if (rt->tiers)
        route_match_tiers(r, rt);
    return LR_OK;
}

/* Step 2 ahead of the router's lock, for a recording route whose policy
 * (the last route's, as the hint says) matches: the peek under the
 * index's read lock alone, so that the router's read section is shorter.
 * Nothing if expiry is due (housekeeping comes first) or the clock is
 * out of bounds (the router judges it): route_match then peeks under the
 * lock, as it does when an instance left meanwhile. The same keys, the
 * same index (no expiry was due): the same hits as a peek under the
 * lock would find. */
static void
route_early_match(lr_router *r, struct route *rt)
{
    rt->early = false;
    rt->cut_on = false;
    uint32_t hint = atomic_load_explicit(&r->match_hint, memory_order_relaxed);
    if (rt->v.n_keys == 0 || hint == 0)
        return;
    lr_index_match_result mr;
    lr_index_match_result_init(&mr);
    mr.hits = rt->sc->hits;
    mr.hits_capacity = r->max_inst;
    /* the last route's cut, if it cut: whatever the fleet since, any cut
     * leaves a complete answer to narrow_rest */
    struct lr__peek_cut cut = { hint >> 2 & 0x3ffu, hint >> 12, LR_NIL };
    lr__router_ix_rdlock(r);
    rt->early =
        lr__index_peek_cut(r->ix, rt->kb, rt->v.n_keys, rt->v.q->now_ns,
                           rt->sc->ms, hint != 1 ? &cut : NULL, &mr) == LR_OK;
    rt->early_gen = r->ixgen_all;
    rt->cut_on = hint != 1;
    rt->cut = cut;
    lr__router_ix_rdunlock(r);
    rt->early_hits = mr.n_hits;
}

/* ---- route: gather and rank ---------------------------------------------------------- */

/* How old scraped stats may be and still count, in ns. */
static uint64_t
stats_max_age_ns(const lr_router *r)
{
    return (uint64_t)(r->param[LR_PARAM_STATS_MAX_AGE_S] * 1e9);
}

/* A row with nothing known (what lr__load_fill() would leave unset). */
static const lr_candidate empty_row = { .cached_age_s = -1 };
/* gather_row() writes every field by name instead of copying empty_row
 * first (a `rep stos` over each whole row was 5% of a call): a new field must
 * be written there. */
_Static_assert(sizeof(lr_candidate) == LR_CANDIDATE_SIZE_V6,
               "gather_row() writes each field of lr_candidate");

/* One routable instance's row: the load tracker's counters, stats, RTT
 * and DualMap's stall (lr__load_fill), then the router's own columns. */
static inline __attribute__((always_inline)) void
gather_row(const lr_router *r, const uint32_t *cached_by_id, bool tiers,
           uint32_t id, uint64_t adapter, uint64_t now_ns, uint64_t max_age_ns,
           lr_candidate *c)
{
    if (LR_NEVER(lr__load_fill(r->ld, id, now_ns, max_age_ns,
                               LR__DECODE_STALL_NS, r->init_rtt_ms[id],
                               c) != LR_OK)) {
        *c = empty_row;
        c->rtt_ms = r->init_rtt_ms[id];
    }
    c->instance = id;
    c->cached_tokens = c->prefix_caching ? cached_by_id[id] : 0;
    c->cpu_tokens = 0;
    c->disk_tokens = 0;
    if (tiers && c->prefix_caching) {
        c->cpu_tokens = cached_by_id[r->max_inst + id];
        c->disk_tokens = cached_by_id[2 * (size_t)r->max_inst + id];
    }
    c->prefill_rate = r->rate[c->instance_class];
    c->cached_age_s = -1;
    c->ring_rank = 0;
    c->flags = 0;
    c->tree_blocks = 0;
    c->ttft_s_per_token = 0;
    c->ttft_base_s = 0;
    c->ttft_s_per_decoding = 0;
    c->prefill_tokens_avg = 0;
    c->route_rate = 0;
    c->decode_s = 0;
    c->sibling_tokens = 0;
    c->sibling_fork_tokens = 0;
    if (adapter != 0) {
        lr__adapters_fill(&r->ad, adapter, r->param[LR_PARAM_ADAPTER_LOAD_S],
                          c);
    } else { /* nothing to load: the columns say no more */
        c->adapter_missing = 0;
        c->adapter_free = UINT32_MAX;
        c->adapter_load_s = 0;
        c->adapters_resident = 0;
        c->adapter_evicts = 0;
    }
    const struct lr__rplace *pl = &r->inst[id].place;
    c->role = pl->role;
    c->node = pl->node;
    c->rack = pl->rack;
    c->region = pl->region;
    if (lr__peers_held(&r->peers)) /* other replicas' in flight */
        lr__peers_add(&r->peers, now_ns, c);
}

/* Whether the route's rows are only its model's instances: it names one
 * and some instance declared the models it serves. */
static inline bool
filtered(const struct route *rt)
{
    return rt->v.rows_model != 0;
}

/* The row of instance `id` in the route's table, or NONE. The table
 * alone: the fleet may have changed since it was gathered (the record
 * runs under another lock than the gather), so neither act[] nor an
 * instance's role may say where a row is. Each part of the table (the
 * rows that decode, the prefill rows) is in id order. */
static uint32_t
row_of(const struct route *rt, uint32_t id)
{
    const lr_candidate *rows = rt->sc->rows;
    uint32_t edge[3] = { 0, rt->nd, rt->v.routable };
    for (int p = 0; p < 2; p++) {
        uint32_t k = LR__LOWER_BOUND(lr_candidate, instance, rows, edge[p],
                                     edge[p + 1], id);
        if (k < edge[p + 1] && rows[k].instance == id)
            return k;
    }
    return NONE;
}

/* No row for a request's model: LR_ENOENT when no instance serves it,
 * LR_ESTATE when those that do are all draining. */
static lr_status
no_rows(const lr_router *r, uint64_t model)
{
    for (uint32_t id = 0; id < r->max_inst; id++)
        if (r->inst[id].live && lr__router_serves(r, id, model))
            return LR_ESTATE;
    return LR_ENOENT;
}

/* Step 3: rows[0 .. n_act) in id order, with what the policy needs
 * beyond the counters: the blocks the index holds for each instance for
 * SGLang's smallest tree (LR__NEEDS_TREE), then what the policy's states
 * add (their gather: prefix ages, adaptive's calibrated model). With
 * prefill instances in the fleet, the rows that can decode come first
 * (each part in id order); a request no routable instance can decode is
 * LR_ESTATE. */
static lr_status
route_gather(lr_router *r, struct route *rt, uint32_t needs)
{
    uint64_t now = rt->v.q->now_ns;
    uint64_t max_age = stats_max_age_ns(r);
    lr_candidate *rows = rt->sc->rows;
    uint32_t n = 0, nd = 0;
    if (rt->narrow) { /* a large fleet: its candidates (narrow_pick) */
        for (uint32_t k = 0; k < rt->n_pick; k++)
            gather_row(r, rt->sc->cached_by_id, rt->tiers, rt->sc->pick[k],
                       rt->v.adapter, now, max_age, &rows[k]);
        n = nd = rt->n_pick;
    } else if (!filtered(rt) && r->n_prefill == 0) {
        for (uint32_t k = 0; k < r->n_act; k++)
            gather_row(r, rt->sc->cached_by_id, rt->tiers, r->act[k],
                       rt->v.adapter, now, max_age, &rows[k]);
        n = nd = r->n_act;
    } else { /* the instances that serve the request's model; the
              * prefill instances last */
        bool pd = r->n_prefill > 0;
        for (int pass = 0; pass < 1 + pd; pass++) {
            for (uint32_t k = 0; k < r->n_act; k++) {
                uint32_t id = r->act[k];
                if (pd && (r->inst[id].place.role == LR_ROLE_PREFILL) != pass)
                    continue;
                if (!filtered(rt) || lr__router_serves(r, id, rt->v.model))
                    gather_row(r, rt->sc->cached_by_id, rt->tiers, id,
                               rt->v.adapter, now, max_age, &rows[n++]);
            }
            if (pass == 0)
                nd = n;
        }
        if (n == 0)
            return no_rows(r, rt->v.model);
        if (nd == 0)
            return LR_ESTATE;
    }
    rt->nd = nd;
    rt->v.routable = n;
    rt->v.fleet = rt->narrow ? r->n_act : n;
    if (needs & LR__NEEDS_TREE) {
        lr__router_ix_rdlock(r);
        /* LR_ENOENT: never learned anything, an empty tree (0) */
        for (uint32_t k = 0; k < n; k++)
            if (lr_index_instance_blocks(r->ix, rows[k].instance,
                                         &rows[k].tree_blocks) != LR_OK)
                rows[k].tree_blocks = 0;
        lr__router_ix_rdunlock(r);
    }
    uint32_t kinds = lr__policy_states(r->pt, r->policy, r->param);
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        if ((kinds >> kind & 1) && ops->gather != NULL)
            ops->gather(st, rows, n, &rt->v, now);
    }
    return LR_OK;
}

/* The ring key the policy ranks by: the session's, the prompt's leading
 * tokens', or what the state of the policy that owns the key computes
 * (DualMap's hot prefix, which also leaves scratch for its record); false
 * when it reads no ring. *want: the ranks it reads. */
static bool
ring_key(lr_router *r, struct route *rt, uint64_t *key, uint32_t *want)
{
    *want = 0;
    int32_t kind = lr__policy_ring(r->pt, r->policy, r->param, want);
    int32_t owner = lr__policy_ring_owner(r->pt, r->policy, r->param);
    uint32_t session_tokens = (uint32_t)r->param[LR_PARAM_SESSION_TOKENS];
    const lr_request *q = rt->v.q;
    const struct lr__pstate_ops *ops =
        owner != LR__POLICY_NONE ? lr__pstate_ops_of(r->pt, (uint32_t)owner)
                                 : NULL;
    void *st = ops != NULL ? lr__router_pstate(r, (uint32_t)owner) : NULL;
    rt->v.n_scratch = 0;
    if (kind == LR_RING_KEY_NONE)
        return false;
    if (st != NULL && ops->ring_key != NULL)
        *key = ops->ring_key(st, &rt->v);
    else if (kind == LR_RING_KEY_SESSION && q->has_session)
        *key = lr__mix64(q->session, LR__SEED_SESSION);
    else
        *key = lr__prefix_key(&rt->v, session_tokens);
    return true;
}

/* Step 4: ring ranks of the policy's key into the rows (`key`, `want`:
 * ring_key's, computed once per route). */
static void
route_rank(lr_router *r, struct route *rt, bool has_key, uint64_t key,
           uint32_t want)
{
    if (!has_key)
        return;
    uint32_t ids[LR_RING_MAX_K], got = 0;
    if (!filtered(rt) && rt->nd == rt->v.routable && !rt->narrow) {
        if (want > r->n_act)
            want = r->n_act;
        (void)lr_ring_candidates(r->ring, key, want, ids, &got); /* k ok */
        for (uint32_t i = 0; i < got; i++) {
            uint32_t k = lr__router_act_index(r, ids[i]);
            if (LR_ALWAYS(k != NONE)) /* the ring holds the routable */
                rt->sc->rows[k].ring_rank = i + 1;
        }
        return;
    }
    /* a model's instances rank in the ring's order among themselves: the
     * fleet's first LR_RING_MAX_K candidates, those of other models
     * skipped; the rows that decode and the prefill rows rank apart (each
     * leg is decided on its own rows). A large fleet's rows are unfiltered
     * (narrow_of) and hold the ring's first `want` candidates, which
     * narrow_pick read (or did not: then none is ranked). */
    const uint32_t *ring = ids;
    if (rt->narrow) {
        ring = rt->ring_ids;
        got = rt->n_ring;
    } else {
        uint32_t ask = r->n_act < LR_RING_MAX_K ? r->n_act : LR_RING_MAX_K;
        (void)lr_ring_candidates(r->ring, key, ask, ids, &got); /* k ok */
    }
    uint32_t rank[2] = { 0, 0 };
    for (uint32_t i = 0; i < got; i++) {
        uint32_t k = row_of(rt, ring[i]);
        if (k == NONE)
            continue;
        uint32_t *rk = &rank[k >= rt->nd];
        if (*rk < want)
            rt->sc->rows[k].ring_rank = ++*rk;
    }
}

/* The sources of a route's candidates (LR__NARROW_*), or 0 when it
 * weighs every routable instance: a fleet of at most
 * LR_PARAM_NARROW_ABOVE, a policy whose rule reads them all, a request
 * for a model or an adapter (which instances serve it, which hold it, is
 * in no order), a fleet with prefill instances. */
static uint32_t
narrow_of(const lr_router *r, const struct route *rt)
{
    if (r->n_act <= (uint32_t)r->param[LR_PARAM_NARROW_ABOVE] || filtered(rt) ||
        rt->v.adapter != 0 || r->n_prefill > 0)
        return 0;
    return lr__policy_narrow(r->pt, r->policy, r->param);
}

/* "LRNARROW": a narrowed route's sample, from the route's own seed. */
#define SEED_SAMPLE 0x4c524e4152524f57ull

/* A narrowed route's candidates besides its hits (route_match's): the
 * ring's for its key, the least loaded of each order it reads, a uniform
 * sample drawn with the route's seed, and what its states name. */
static void
narrow_pick(lr_router *r, struct route *rt, bool has_key, uint64_t key,
            uint32_t want)
{
    uint32_t *pick = rt->sc->pick,
             w = (uint32_t)r->param[LR_PARAM_NARROW_WIDTH];
    /* a miss: the match kept no hit and left none to narrow_rest (the
     * index knows no routable holder of any of the prompt) */
    bool miss = rt->hits_kept == 0 && !(rt->cut_on && rt->cut.node != LR_NIL);
    rt->n_ring = 0;
    if (has_key && ((rt->narrow & LR__NARROW_RING) ||
                    ((rt->narrow & LR__NARROW_RING_MISS) && miss))) {
        uint32_t got = 0;
        (void)lr_ring_candidates(r->ring, key, want < 1 ? 1 : want,
                                 rt->ring_ids, &got); /* k in range */
        memcpy(pick + rt->n_pick, rt->ring_ids, got * sizeof *pick);
        rt->n_pick += got;
        rt->n_ring = got;
    }
    static const uint32_t order[][2] = {
        { LR__NARROW_INFLIGHT, LR__ORDER_INFLIGHT },
        { LR__NARROW_LOAD, LR__ORDER_LOAD },
        { LR__NARROW_BACKLOG, LR__ORDER_BACKLOG },
        { LR__NARROW_QUEUE, LR__ORDER_QUEUE },
        { LR__NARROW_KV, LR__ORDER_KV },
    };
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (rt->narrow & order[i][0])
            rt->n_pick +=
                lr__order_least(&r->fleet.o[order[i][1]], pick + rt->n_pick, w);
    if (rt->narrow & LR__NARROW_SAMPLE) {
        struct lr__rng g;
        lr__rng_seed(&g, rt->seed ^ SEED_SAMPLE);
        for (uint32_t i = 0; i < w; i++)
            pick[rt->n_pick++] = r->act[lr__rng_below(&g, r->n_act)];
    }
    if (rt->narrow & LR__NARROW_STATE) {
        uint32_t kinds = lr__policy_states(r->pt, r->policy, r->param);
        LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
        {
            if ((kinds >> kind & 1) && ops->narrow != NULL)
                rt->n_pick += ops->narrow(st, &rt->v, r->act, r->n_act,
                                          pick + rt->n_pick, 2);
        }
    }
}

/* narrow_rest's reach per hit it wants: the instances of least in flight
 * it asks, and the holders of a prefix held by many it samples. */
#define REST_WALK 2u
#define REST_SAMPLE 4u
/* "LRRESTSM": the sample's start, from the route's own seed. */
#define SEED_REST 0x4c52524553545344ull

/* The rest of a cut match (route_match), under the index's read lock:
 * the hits the cut left out that the route still wants, and the depth
 * of every other candidate. The cut reported every holder deeper than
 * those it did not, and stopped before a run of more than its `defer`
 * holders: the hits still wanted are drawn from the least in flight of
 * the fleet that hold some of the prompt (REST_WALK per hit wanted asked,
 * in in-flight order) and, when the cut kept no hit (the longest prefix
 * is the one held by many), from the holders up the prompt's path
 * (REST_SAMPLE per hit wanted: every holder of the runs that fit, then
 * the rest spread evenly over the first run of more), the deepest and
 * least in flight first (narrow_hits). Exact, then, where the longest
 * prefix's holders are few; where they are many, the least in flight of
 * a sample of them, as power-of-k choices take it. A hit the cut kept is
 * deeper than all of those: the others are only more candidates, and the
 * least loaded of them are the ones a rule takes. The rest starts
 * from the prompt's deepest node as the index is now (a route may have
 * learned since the cut, which the scratch's marks outlive). */
static void
narrow_rest(lr_router *r, struct route *rt)
{
    struct lr__rscratch *sc = rt->sc;
    uint32_t B = r->block_tokens;
    uint32_t w = (uint32_t)r->param[LR_PARAM_NARROW_WIDTH];
    lr__router_ix_rdlock(r);
    uint32_t node = lr__index_deepest_node(r->ix, rt->v.keys, rt->v.n_keys);
    if (node == LR_NIL) {
        lr__router_ix_rdunlock(r);
        return;
    }
    uint32_t before = rt->n_pick; /* asked after below */
    /* the walk's ids, each asked once: their bits in pickset (empty
     * until narrow_unique), cleared below */
    uint32_t walked[REST_WALK * LR__NARROW_WIDTH_MAX], asked = 0;
    uint64_t *set = sc->pickset;
    if ((rt->narrow & LR__NARROW_HITS) && rt->hits_kept < w) {
        const struct lr__order *o = &r->fleet.o[LR__ORDER_INFLIGHT];
        uint32_t need = w - rt->hits_kept, nf = 0;
        for (uint32_t b = o->lo; b <= o->hi && o->n > 0; b++)
            for (uint32_t id = o->head[b];
                 id != UINT32_MAX && asked < REST_WALK * need;
                 id = o->next[id]) {
                walked[asked++] = id;
                set[id >> 6] |= 1ull << (id & 63);
                uint32_t d = lr__index_depth_below(r->ix, sc->ms, node, id);
                if (d > 0) {
                    sc->hits[nf].instance = id;
                    sc->hits[nf++].tokens = d * B;
                }
            }
        if (rt->hits_kept == 0) /* the longest prefix is past the cut */
            nf += lr__index_sample_at(r->ix, sc->ms, node, rt->seed ^ SEED_REST,
                                      REST_SAMPLE * need, sc->hits + nf);
        for (uint32_t k = 0; k < nf; k++)
            if (sc->hits[k].instance < r->max_inst)
                set_cached(sc, sc->hits[k].instance, sc->hits[k].tokens);
        (void)narrow_hits(r, rt, nf, need);
    }
    for (uint32_t k = 0; k < before; k++) {
        uint32_t id = sc->pick[k];
        if (id < r->max_inst && (set[id >> 6] >> (id & 63) & 1))
            continue; /* the walk asked it: nothing new (the same index) */
        uint32_t d = lr__index_depth_below(r->ix, sc->ms, node, id);
        if (d > 0)
            set_cached(sc, id, d * B);
    }
    lr__router_ix_rdunlock(r);
    for (uint32_t k = 0; k < asked; k++)
        set[walked[k] >> 6] = 0;
}

/* A narrowed route's candidates sorted, each once: a bit per id set,
 * then read back in order and cleared, O(candidates + max_inst / 64). */
static void
narrow_unique(const lr_router *r, struct route *rt)
{
    uint32_t *pick = rt->sc->pick;
    uint64_t *set = rt->sc->pickset;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t i = 0; i < rt->n_pick; i++) {
        uint32_t id = pick[i];
        if (id >= r->max_inst)
            continue; /* none is: every source names a routable id */
        set[id >> 6] |= 1ull << (id & 63);
        lo = id < lo ? id : lo;
        hi = id > hi ? id : hi;
    }
    uint32_t n = 0;
    for (uint32_t wd = lo >> 6; lo <= hi && wd <= hi >> 6; wd++) {
        uint64_t b = set[wd];
        set[wd] = 0;
        while (b != 0) {
            pick[n++] = wd << 6 | (uint32_t)__builtin_ctzll(b);
            b &= b - 1;
        }
    }
    rt->n_pick = n;
}

/* Steps 1-4: the table route() decides on; `records`: the route will
 * learn and record (not a dry run, not lr_router_candidates()). */
static lr_status
route_table(lr_router *r, struct route *rt, bool records, bool whole)
{
    uint32_t needs = lr__policy_needs(r->pt, r->policy, r->param);
    LR_TRY(route_keys(r, rt, keys_needed(r, rt, needs, records)));
    /* a tier is made by a KV event, under the router's write lock: stable
     * while this route holds the read lock */
    rt->tiers = (needs & LR__NEEDS_MATCH) &&
                (lr__index_tier(r->ix, LR_TIER_CPU) != NULL ||
                 lr__index_tier(r->ix, LR_TIER_DISK) != NULL);
    rt->narrow = whole ? 0 : narrow_of(r, rt);
    rt->n_pick = 0;
    LR_TRY(route_match(r, rt, (needs & LR__NEEDS_MATCH) != 0));
    uint64_t key = 0;
    uint32_t want = 0;
    bool has_key = ring_key(r, rt, &key, &want);
    if (rt->narrow) {
        narrow_pick(r, rt, has_key, key, want);
        if (rt->cut_on && rt->cut.node != LR_NIL)
            narrow_rest(r, rt);
        narrow_unique(r, rt);
    }
    if (rt->n_pick == 0)
        rt->narrow = 0; /* no source gave one: the whole fleet */
    LR_TRY(route_gather(r, rt, needs));
    route_rank(r, rt, has_key, key, want);
    return LR_OK;
}

/* ---- route: decide and record ----------------------------------------------------------- */

/* The request's TTFT budget at its now (lr_policy_input.ttft_budget_s). */
static double
budget_of(const lr_request *q)
{
    if (q->deadline_ns == 0)
        return 0;
    if (q->deadline_ns <= q->now_ns)
        return 1e-9;
    return (double)(q->deadline_ns - q->now_ns) / 1e9;
}

static uint32_t
output_of(const lr_router *r, const lr_request *q)
{
    return q->expected_output_tokens
               ? q->expected_output_tokens
               : (uint32_t)r->param[LR_PARAM_DEFAULT_OUTPUT_TOKENS];
}

/* Step 5: the policy's context: the table, the request, the parameters,
 * and what the policy's states prepare (round-robin's cursor, Lodestar's
 * network). */
static struct lr__pctx
route_decide(lr_router *r, struct route *rt)
{
    struct lr__pctx c = {
        .rows = rt->sc->rows,
        .n = rt->v.routable,
        .stride = sizeof(lr_candidate),
        .param = r->param,
        .prompt = (uint32_t)rt->v.q->n_tokens,
        .output = output_of(r, rt->v.q),
        .block_tokens = r->block_tokens,
        .last = NONE,
        .last_prefill = NONE,
        .model = NULL,
        .pt = r->pt,
        .score = rt->sc->score,
        .budget_s = budget_of(rt->v.q),
        .rows_model = rt->v.rows_model,
    };
    if (rt->narrow) {
        lr__fleet_stats(&r->fleet, &rt->fs);
        c.fleet = &rt->fs;
    }
    uint32_t kinds = lr__policy_states(r->pt, r->policy, r->param);
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        if ((kinds >> kind & 1) && ops->prepare != NULL)
            ops->prepare(st, &c);
    }
    return c;
}

/* A report of a request whose hit forks counts as the fork when it is
 * at most this many blocks past it (lr__load_set_fork). */
#define FORK_SLACK_BLOCKS 2u

/* The dispatch into the load tracker (checked in advance: cannot fail). */
static lr_status
record_dispatch(lr_router *r, const struct route *rt, const lr_candidate *c)
{
    lr_dispatch dp;
    lr_dispatch_init(&dp);
    dp.request_id = rt->v.q->id;
    dp.instance = c->instance;
    dp.prompt_tokens = (uint32_t)rt->v.q->n_tokens;
    dp.cached_tokens = c->cached_tokens;
    dp.expected_output_tokens = output_of(r, rt->v.q);
    /* the other candidate, while it is still routable (the table may be
     * older than the fleet: another thread may have drained it since) */
    uint32_t alt = rt->ch.alt;
    if (alt != NONE && alt != c->instance &&
        lr__router_act_index(r, alt) != NONE) {
        uint32_t ak = row_of(rt, alt);
        dp.alt_instance = alt;
        dp.alt_cached_tokens = ak != NONE ? rt->sc->rows[ak].cached_tokens : 0;
    }
    if (rt->ch.kp != LR_NIL) { /* split: its prefill leg */
        const lr_candidate *p = &rt->sc->rows[rt->ch.kp];
        dp.prefill_instance = p->instance;
        dp.prefill_cached_tokens = p->cached_tokens;
    }
    dp.now_ns = rt->v.q->now_ns;
    LR_TRY(lr_load_dispatch(r->ld, &dp));
    if (!(rt->v.needs & LR__NEEDS_AGE))
        return LR_OK; /* no sibling columns gathered, none to learn */
    if (c->sibling_fork_tokens > 0) {
        lr__load_set_fork(r->ld, dp.request_id, c->sibling_fork_tokens,
                          FORK_SLACK_BLOCKS * r->block_tokens, true);
    } else { /* where a sibling would have forked: the deepest boundary
              * in the hit's upper half (lr__recency_siblings') */
        const lr_request *q = rt->v.q;
        uint32_t B = r->block_tokens, cb = c->cached_tokens / B;
        size_t i = lr__boundaries_before(q, (uint32_t)(cb * B));
        uint32_t b = i > 0 ? q->boundaries[i - 1] / B : 0;
        if (b > 0 && 2 * b >= cb)
            lr__load_set_fork(r->ld, dp.request_id, b * B,
                              FORK_SLACK_BLOCKS * B, false);
    }
    return LR_OK;
}

/* Step 6: learn the prompt at the chosen instance: the one step of a
 * recording route that can fail for want of memory, and then it changes
 * nothing. Under the index's write lock alone, so that it runs beside
 * other routes' decisions and records; gen, read with the decision, says
 * whether the instance left since (its generation moved), and then there
 * is nothing to learn. */
static lr_status
learn_at(lr_router *r, const struct route *rt, const lr_prompt *p,
         const lr_candidate *c, uint32_t gen)
{
    if (!c->prefix_caching || r->ixgen[c->instance] != gen)
        return LR_OK;
    LR_TRY(
        lr_index_learn(r->ix, p, c->instance, LR_TRUST_LOCAL, rt->v.q->now_ns));
    lr__marks_put(&r->marks, rt->v.keys, rt->v.n_keys, c->instance,
                  r->mgen[c->instance], rt->v.q->now_ns);
    return LR_OK;
}

/* ... and at the prefill leg of a split request too: the decode instance
 * holds the KV after the transfer, the prefill instance computed it. The
 * decode leg's learn is the one that can fail the route (first, so that
 * a failure changes nothing); the prefill leg's is a hint that may be
 * lost for want of memory. */
static lr_status
route_learn(lr_router *r, const struct route *rt, uint32_t gen, uint32_t gen_p)
{
    const lr_request *q = rt->v.q;
    if ((q->flags & LR_ROUTE_NO_LEARN) || rt->v.n_keys == 0)
        return LR_OK;
    lr_prompt p;
    prompt_of(rt, &p);
    lr__router_ix_lock(r);
    lr_status st = learn_at(r, rt, &p, &rt->sc->rows[rt->ch.k], gen);
    if (st == LR_OK && rt->ch.kp != LR_NIL)
        (void)learn_at(r, rt, &p, &rt->sc->rows[rt->ch.kp], gen_p);
    lr__router_ix_unlock(r);
    return st;
}

/* Step 7: dispatch, and tell every state of the placement. */
static lr_status
route_record(lr_router *r, const struct route *rt)
{
    const lr_request *q = rt->v.q;
    const lr_candidate *c = &rt->sc->rows[rt->ch.k];
    lr_status st = record_dispatch(r, rt, c);
    if (LR_NEVER(st != LR_OK))
        return st; /* checked just before; the learn stays, harmlessly */
    lr__router_fleet_touch(r, c->instance);
    if (rt->ch.kp != LR_NIL)
        lr__router_fleet_touch(r, rt->sc->rows[rt->ch.kp].instance);
    struct lr__req_view v;
    struct lr__placed pl = {
        .v = &rt->v,
        .rows = rt->sc->rows,
        .n = rt->v.routable,
        .k = rt->ch.k,
        .ch = rt->ch,
        .slot = LR_ALWAYS(lr__load_req(r->ld, q->id, &v) == LR_OK) ? v.slot
                                                                   : LR_NIL,
        .output = output_of(r, q),
    };
    LR__ROUTER_EACH_PSTATE(r, kind, ops, sp)
    {
        if (ops->record != NULL)
            ops->record(sp, &pl, q->now_ns);
    }
    if (pl.slot != LR_NIL)
        lr__adapters_dispatch(&r->ad, pl.slot, c->instance, rt->v.model,
                              rt->v.adapter, q->now_ns);
    r->st.adapter_routes += rt->v.adapter != 0;
    r->st.adapter_loads += c->adapter_missing != 0;
    r->st.routes++;
    r->by_reason[rt->ch.reason]++;
    r->st.prompt_tokens += q->n_tokens;
    r->st.cached_tokens += c->cached_tokens;
    return LR_OK;
}

static lr_score *
score_at(const lr_decision *d, size_t stride, size_t k)
{
    return (lr_score *)((char *)d->scores + k * stride);
}

/* The caller's stride of lr_score: 0.1's size unless it says more. */
static size_t
score_stride(const lr_decision *d)
{
    return d->struct_size >= LR_DECISION_SIZE_V2 && d->score_size != 0
               ? d->score_size
               : LR_SCORE_SIZE_V1;
}

/* Every row's score into the caller's buffer. */
static void
fill_scores(const struct route *rt, lr_decision *d)
{
    size_t stride = score_stride(d);
    for (uint32_t k = 0; k < rt->v.routable; k++) {
        lr_score *s = score_at(d, stride, k);
        s->instance = rt->sc->rows[k].instance;
        s->cached_tokens = rt->sc->rows[k].cached_tokens;
        s->score = rt->sc->score[k];
    }
    d->n_scores = rt->v.routable;
}

/* What the record step needs of the load tracker: the id not in flight,
 * room for one more; judged before the decision and again under the write
 * lock (another thread may have dispatched meanwhile). */
static lr_status
record_check(const lr_router *r, const lr_request *q)
{
    struct lr__req_view v;
    LR_RETURN_IF(lr__load_req(r->ld, q->id, &v) == LR_OK, LR_EEXIST);
    LR_RETURN_IF(!lr__load_has_room(r->ld), LR_ELIMIT);
    return LR_OK;
}

/* Checks that need the router's state, before anything changes. */
static lr_status
route_check(lr_router *r, const lr_request *q, lr_decision *d)
{
    LR_RETURN_IF(r->n_act == 0, LR_ESTATE);
    if (q->flags & LR_ROUTE_SCORES) {
        if (d->scores_capacity < r->n_act) {
            d->n_scores = r->n_act;
            return LR_EBUFSIZE;
        }
        LR_RETURN_IF(d->scores == NULL, LR_EINVAL);
        LR_RETURN_IF(score_stride(d) < LR_SCORE_SIZE_V1, LR_EINVAL);
    }
    if (!(q->flags & LR_ROUTE_DRY_RUN))
        LR_TRY(record_check(r, q));
    return LR_OK;
}

/* Housekeeping a route's decision must not see undone: index routes past
 * their TTL (and its time base, at the first call), peers' expired
 * gauges, what the policy states must refresh (a network to take over).
 * Checked under the read lock; when due, done under the write lock, and
 * kept even when a later step fails. Returns with the read lock held. */
static bool
states_due(const lr_router *r)
{
    LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
    {
        if (ops->refresh_due != NULL && ops->refresh_due(st))
            return true;
    }
    return false;
}

static bool
index_due(const lr_router *r, uint64_t now_ns)
{
    lr__router_ix_rdlock(r);
    bool due = lr__index_expiry_due(r->ix, now_ns);
    lr__router_ix_rdunlock(r);
    return due;
}

static void
route_housekeep(lr_router *r, uint64_t now_ns)
{
    while (index_due(r, now_ns) || lr__peers_expiry_due(&r->peers, now_ns) ||
           states_due(r)) {
        lr__router_rdunlock(r);
        lr__router_lock(r);
        lr__router_ix_lock(r);
        (void)lr_index_expire(r->ix, now_ns); /* judged: in bounds */
        lr__router_ix_unlock(r);
        if (lr__peers_expiry_due(&r->peers, now_ns)) {
            lr__peers_expire(&r->peers, now_ns); /* touches what moved */
        }
        LR__ROUTER_EACH_PSTATE(r, kind, ops, st)
        {
            if (ops->refresh != NULL)
                ops->refresh(st);
        }
        lr__router_unlock(r);
        lr__router_rdlock(r);
    }
}

/* A seed for the policy's draws: the routing generator's next, in the
 * order the decisions take it; *before and *after say what to undo. */
static uint64_t
draw(lr_router *r, struct lr__rng *before, struct lr__rng *after)
{
    pthread_mutex_lock(&r->rng_mu);
    *before = r->rng;
    uint64_t seed = lr__rng_next(&r->rng);
    *after = r->rng;
    pthread_mutex_unlock(&r->rng_mu);
    return seed;
}

/* A failed route draws nothing: undone unless another route drew since
 * (then the draw is simply spent, as the decision of a route that a
 * concurrent one made fail). */
static void
undraw(lr_router *r, const struct lr__rng *before, const struct lr__rng *after)
{
    pthread_mutex_lock(&r->rng_mu);
    if (memcmp(&r->rng, after, sizeof *after) == 0)
        r->rng = *before;
    pthread_mutex_unlock(&r->rng_mu);
}

/* Steps 1-5 under the read lock: the table and the choice. */
static lr_status
route_read(lr_router *r, struct route *rt, lr_decision *d, struct lr__pctx *c,
           struct lr__rng *prng, struct lr__rng *before, struct lr__rng *after)
{
    const lr_request *q = rt->v.q;
    /* the clock before the router's state (lr_router.h: the request's
     * own checks, then the clock, then the rest) */
    LR_TRY(lr__router_clock(r, q->now_ns, true));
    LR_TRY(route_check(r, q, d));
    route_housekeep(r, q->now_ns);
    route_start(r, rt, rt->sc, q, rt->kb, rt->v.n_keys);
    /* the seed first: a narrowed table's sample is drawn with it */
    rt->seed = draw(r, before, after);
    lr_status st = route_table(r, rt, !(q->flags & LR_ROUTE_DRY_RUN), false);
    if (st == LR_OK) {
        *c = route_decide(r, rt);
        if (c->model != NULL) {
            st = lr__router_scratch_model(r, rt->sc,
                                          lr__mlp_scratch_floats(c->model));
            c->model_scratch = rt->sc->model;
        }
    }
    if (st != LR_OK) {
        undraw(r, before, after);
        return st;
    }
    lr__rng_seed(prng, rt->seed);
    c->rng = prng;
    for (uint32_t k = 0; k < rt->v.routable; k++)
        rt->sc->score[k] = NAN;
    rt->ch = lr__pair_decide(r->policy, c, rt->nd);
    return LR_OK;
}

/* How often a route decides again when its choice stopped being routable
 * between the decision and the record (an instance drained or removed by
 * another thread meanwhile). */
#define ROUTE_TRIES 8

/* The decision under the read lock (many routes at once), then the learn
 * under the index's write lock alone (one learn at a time, beside other
 * routes' decisions and records), then the record under the write lock
 * (one at a time, and short: the dispatch, the states' records). */
static lr_status
route_two_phase(lr_router *r, struct route *rt, lr_decision *d)
{
    const lr_request *q = rt->v.q;
    bool dry = (q->flags & LR_ROUTE_DRY_RUN) != 0;
    const uint64_t *kb = rt->kb;
    size_t nk = rt->v.n_keys;
    for (int tries = 0;; tries++) {
        struct lr__pctx c;
        struct lr__rng prng, before, after;
        rt->kb = kb;
        rt->v.n_keys = nk;
        lr__router_rdlock(r);
        lr_status st = route_read(r, rt, d, &c, &prng, &before, &after);
        if (st == LR_OK && dry) {
            atomic_fetch_add_explicit(&r->dry_runs, 1, memory_order_relaxed);
            lr__router_clock_take(r, q->now_ns);
        }
        uint32_t gen =
            st == LR_OK && !dry ? r->ixgen[rt->sc->rows[rt->ch.k].instance] : 0;
        uint32_t gen_p = st == LR_OK && !dry && rt->ch.kp != LR_NIL
                             ? r->ixgen[rt->sc->rows[rt->ch.kp].instance]
                             : 0;
        lr__router_rdunlock(r);
        if (st != LR_OK)
            return st;
        if (!dry) {
            st = route_learn(r, rt, gen, gen_p);
            if (st != LR_OK) {
                undraw(r, &before, &after);
                return st;
            }
        }
        if (!dry) {
            lr__router_lock(r);
            uint32_t id = rt->sc->rows[rt->ch.k].instance;
            st = record_check(r, q);
            bool moved = st == LR_OK && lr__router_act_index(r, id) == NONE;
            if (rt->ch.kp != LR_NIL)
                moved |= st == LR_OK &&
                         lr__router_act_index(
                             r, rt->sc->rows[rt->ch.kp].instance) == NONE;
            if (st == LR_OK && !moved)
                st = route_record(r, rt);
            if (st == LR_OK && !moved)
                lr__router_clock_take(r, q->now_ns);
            lr__router_unlock(r);
            if (st != LR_OK || moved)
                undraw(r, &before, &after);
            if (st != LR_OK)
                return st;
            if (moved) {
                rt->early = false; /* this route's learn is in the index */
                if (tries + 1 < ROUTE_TRIES)
                    continue;
                return LR_ESTATE; /* the fleet changed under every try */
            }
        }
        lr__decision_fill(d, &c, &rt->ch, rt->seed);
        d->n_scores = 0;
        if (q->flags & LR_ROUTE_SCORES)
            fill_scores(rt, d);
        return LR_OK;
    }
}

lr_status
lr__router_check_request(const lr_request *q)
{
    LR_RETURN_IF(q->n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(q->n_tokens > 0 && q->tokens == NULL, LR_EINVAL);
    LR_RETURN_IF(q->n_boundaries > 0 && q->boundaries == NULL, LR_EINVAL);
    LR_RETURN_IF(q->n_boundaries > q->n_tokens + 1, LR_EINVAL);
    for (size_t i = 0; i < q->n_boundaries; i++) {
        LR_RETURN_IF(q->boundaries[i] > q->n_tokens, LR_EINVAL);
        LR_RETURN_IF(i > 0 && q->boundaries[i] < q->boundaries[i - 1],
                     LR_EINVAL);
    }
    LR_RETURN_IF(q->flags & ~(uint32_t)(LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES |
                                        LR_ROUTE_NO_LEARN | LR_ROUTE_MAY_WAIT |
                                        LR_ROUTE_SHEDDABLE),
                 LR_EINVAL);
    LR_RETURN_IF(q->has_session != 0 && q->has_session != 1, LR_EINVAL);
    LR_RETURN_IF(q->urgency >= LR_ROUTER_URGENCIES, LR_EINVAL);
    LR_RETURN_IF(q->deadline_ns > LR_ROUTER_MAX_TIME_NS, LR_EINVAL);
    LR_RETURN_IF(lr__router_name_len(q->model) > LR_ROUTER_MAX_NAME ||
                     lr__router_name_len(q->adapter) > LR_ROUTER_MAX_NAME,
                 LR_EINVAL);
    return lr__index_mm_check(q->mm, q->n_mm, q->n_tokens);
}

lr_status
lr__router_route_now(lr_router *r, const lr_request *q, lr_decision *decision)
{
    struct lr__rscratch *sc;
    LR_TRY(lr__router_scratch_get(r, &sc));
    /* Hashing is pure and a recording route needs every key: hash before
     * any lock (block_tokens never changes after creation), on the stack
     * up to UNLOCKED_KEYS, in the scratch beyond. A dry run hashes under
     * the read lock only what its policy reads (keys_needed). */
    uint64_t kb[UNLOCKED_KEYS];
    size_t nk = q->n_tokens / r->block_tokens;
    struct route rt; /* the rest under the lock */
    route_zero(&rt);
    rt.sc = sc;
    rt.v.q = q; /* the caller's own copy */
    lr_status st = LR_OK;
    if (!(q->flags & LR_ROUTE_DRY_RUN) && nk > 0) {
        uint64_t *buf = kb;
        if (nk > UNLOCKED_KEYS) {
            st = scratch_keys(r, sc, nk);
            buf = sc->kbuf;
        }
        uint64_t salt =
            lr_adapter_salt(q->tenant_salt, lr__router_name_hash(q->adapter));
        if (st == LR_OK) {
            lr__index_input_keys(salt, q->tokens, nk, r->block_tokens, q->mm,
                                 q->n_mm, buf);
            rt.kb = buf;
            rt.v.n_keys = nk;
        }
    }
    if (st == LR_OK && rt.kb != NULL)
        route_early_match(r, &rt);
    if (st == LR_OK)
        st = route_two_phase(r, &rt, decision);
    lr__router_scratch_put(r, sc);
    return st;
}

static void
copy_rows(const struct route *rt, lr_candidate *rows, size_t row_size)
{
    for (uint32_t k = 0; k < rt->v.routable; k++) {
        char *dst = (char *)rows + k * row_size;
        memset(dst, 0, row_size);
        memcpy(dst, &rt->sc->rows[k],
               row_size < sizeof(lr_candidate) ? row_size
                                               : sizeof(lr_candidate));
    }
}

lr_status
lr_router_candidates(lr_router *r, const lr_request *request,
                     lr_candidate *rows, size_t capacity, size_t row_size,
                     size_t *n_rows)
{
    LR_RETURN_IF(r == NULL || request == NULL || n_rows == NULL, LR_EINVAL);
    LR_RETURN_IF(capacity > 0 && rows == NULL, LR_EINVAL);
    LR_RETURN_IF(row_size < LR_CANDIDATE_SIZE_V1, LR_EINVAL);
    lr_request q = { 0 }; /* lr__copy_sized() fills only what the caller has */
    LR_TRY(lr__copy_sized(&q, sizeof q, request, LR_REQUEST_SIZE_V1));
    LR_TRY(lr__router_check_request(&q));
    struct lr__rscratch *sc;
    LR_TRY(lr__router_scratch_get(r, &sc));
    lr__router_rdlock(r);
    lr_status st = r->n_act == 0 ? LR_ESTATE : LR_OK;
    if (st == LR_OK) /* a query: judged, never taken */
        st = lr__router_clock(r, q.now_ns, false);
    *n_rows = r->n_act;
    /* without a model to filter by, every routable instance is a row */
    bool filtered = r->n_modeled > 0 && lr__router_name_len(q.model) > 0;
    if (st == LR_OK && !filtered && capacity < r->n_act)
        st = LR_EBUFSIZE;
    if (st == LR_OK)
        route_housekeep(r, q.now_ns);
    struct route rt;
    route_zero(&rt);
    route_start(r, &rt, sc, &q, NULL, 0);
    if (st == LR_OK)
        st = route_table(r, &rt, false, true);
    if (st == LR_OK) {
        *n_rows = rt.v.routable;
        if (capacity < rt.v.routable)
            st = LR_EBUFSIZE;
    }
    if (st == LR_OK)
        copy_rows(&rt, rows, row_size);
    lr__router_rdunlock(r);
    lr__router_scratch_put(r, sc);
    return st;
}

lr_status
lr_router_policy_input(lr_router *r, const lr_request *request,
                       lr_policy_input *in, double *params, size_t capacity)
{
    LR_RETURN_IF(r == NULL || request == NULL || in == NULL, LR_EINVAL);
    LR_RETURN_IF(capacity > 0 && params == NULL, LR_EINVAL);
    LR_RETURN_IF(in->struct_size < LR_POLICY_INPUT_SIZE_V1, LR_EVERSION);
    lr_request q = { 0 }; /* lr__copy_sized() fills only what the caller has */
    LR_TRY(lr__copy_sized(&q, sizeof q, request, LR_REQUEST_SIZE_V1));
    LR_TRY(lr__router_check_request(&q));
    in->n_params = LR__PARAM_COUNT;
    LR_RETURN_IF(capacity < LR__PARAM_COUNT, LR_EBUFSIZE);
    struct lr__rscratch *sc;
    LR_TRY(lr__router_scratch_get(r, &sc));
    lr__router_rdlock(r);
    memcpy(params, r->param, sizeof r->param);
    in->params = params;
    in->prompt_tokens = (uint32_t)q.n_tokens;
    in->expected_output_tokens = output_of(r, &q);
    in->block_tokens = r->block_tokens;
    struct route rt; /* only the decision's context: no match */
    route_zero(&rt);
    route_start(r, &rt, sc, &q, NULL, 0);
    in->last_instance = route_decide(r, &rt).last; /* the cursor, if any */
    in->seed = 0;
    in->model = NULL;
    if (in->struct_size >= LR_POLICY_INPUT_SIZE_V2)
        in->ttft_budget_s = budget_of(&q);
    lr__router_rdunlock(r);
    lr__router_scratch_put(r, sc);
    return LR_OK;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

lr_status
lr_router_prefill_done(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    struct lr__req_view v;
    lr_status st = lr__router_enter(r, now_ns);
    if (st == LR_OK)
        st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK)
        st = lr_load_prefill_done(r->ld, request_id, now_ns);
    if (st == LR_OK && v.prefill_instance != NONE)
        lr__router_fleet_touch(r, v.prefill_instance);
    return lr__router_leave(r, st, now_ns);
}

lr_status
lr_router_first_token(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    struct lr__req_view v;
    lr_status st = lr__router_enter(r, now_ns);
    if (st == LR_OK)
        st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK && v.queued)
        st = lr_load_first_token(r->ld, request_id, now_ns);
    if (st == LR_OK && v.queued) {
        /* -1: a first token before its dispatch (threads race): no sample */
        double ttft = now_ns >= v.dispatch_ns
                          ? (double)(now_ns - v.dispatch_ns) / 1e9
                          : -1;
        LR__ROUTER_EACH_PSTATE(r, kind, ops, sp)
        {
            if (ops->first_token != NULL)
                ops->first_token(sp, v.slot, ttft, now_ns, r->policy, r->param);
        }
        lr__router_pstates_sync(r);
        lr__router_fleet_touch(r, v.instance);
    }
    return lr__router_leave(r, st, now_ns);
}

/* A request ends (complete, fail): its record goes, and what waits on
 * its first token in the states is dropped. */
static lr_status
end_request(lr_router *r, uint64_t request_id, uint32_t output_tokens,
            uint64_t now_ns, bool completed)
{
    struct lr__req_view v;
    lr_status st = lr__router_enter(r, now_ns);
    if (st == LR_OK)
        st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK)
        st = completed
                 ? lr_load_complete(r->ld, request_id, output_tokens, now_ns)
                 : lr_load_fail(r->ld, request_id);
    if (st == LR_OK) {
        lr__router_settle_ended(r, v.slot, now_ns, completed);
        lr__adapters_end(&r->ad, v.slot);
        lr__router_fleet_touch(r, v.instance);
        if (v.prefill_instance != NONE)
            lr__router_fleet_touch(r, v.prefill_instance);
    }
    return lr__router_leave(r, st, now_ns);
}

lr_status
lr_router_complete(lr_router *r, uint64_t request_id, uint32_t output_tokens,
                   uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    return end_request(r, request_id, output_tokens, now_ns, true);
}

lr_status
lr_router_observe_cached(lr_router *r, uint64_t request_id,
                         uint32_t cached_tokens, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    uint32_t expected = 0;
    lr_status st = lr__router_enter(r, now_ns);
    if (st == LR_OK)
        st = lr__load_observe_cached(r->ld, request_id, cached_tokens,
                                     &expected);
    if (st == LR_OK) {
        r->st.observed_reports++;
        r->st.observed_expected_tokens += expected;
        r->st.observed_cached_tokens += cached_tokens;
    } else if (st == LR_EEXIST) {
        st = LR_OK; /* a repeat: the first report stands */
    }
    return lr__router_leave(r, st, now_ns);
}

lr_status
lr__router_fail_inflight(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    return end_request(r, request_id, 0, now_ns, false);
}

/* ---- rebalancing ------------------------------------------------------------------------------ */

lr_status
lr_router_rebalance_plan(lr_router *r, uint64_t now_ns, lr_move *moves,
                         size_t capacity, size_t move_size, size_t *n_moves)
{
    LR_RETURN_IF(r == NULL || n_moves == NULL, LR_EINVAL);
    LR_RETURN_IF(capacity > 0 && moves == NULL, LR_EINVAL);
    LR_RETURN_IF(move_size < sizeof(lr_move), LR_EINVAL);
    *n_moves = 0;
    struct lr__rscratch *sc;
    LR_TRY(lr__router_scratch_get(r, &sc));
    lr__router_rdlock(r);
    lr_status st = lr__router_clock(r, now_ns, false); /* a query */
    if (st == LR_OK) {
        uint64_t max_age = stats_max_age_ns(r);
        for (uint32_t k = 0; k < r->n_act; k++) {
            sc->cached_by_id[r->act[k]] = 0;
            gather_row(r, sc->cached_by_id, false, r->act[k], 0, now_ns,
                       max_age, &sc->rows[k]);
        }
        *n_moves = lr__dualmap_plan(sc->rows, r->n_act, r->param, r->ld,
                                    sc->score, moves, capacity, move_size);
    }
    lr__router_rdunlock(r);
    lr__router_scratch_put(r, sc);
    return st;
}

lr_status
lr_router_move(lr_router *r, uint64_t request_id, uint32_t to)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr_status st = LR_OK;
    struct lr__req_view v;
    const struct lr__rinst *in = lr__router_inst(r, to);
    if (in == NULL)
        st = LR_ENOENT;
    else if (in->draining || in->place.role == LR_ROLE_PREFILL)
        st = LR_ESTATE; /* a prefill instance decodes nothing */
    else
        st = lr__load_req(r->ld, request_id, &v);
    if (st == LR_OK &&
        (!v.queued ||
         !lr__router_serves(r, to, lr__adapters_model(&r->ad, v.slot))))
        st = LR_ESTATE;
    if (st == LR_OK) {
        uint32_t cached = to == v.alt_instance ? v.alt_cached_tokens : 0;
        st = lr_load_move(r->ld, request_id, to, cached);
        if (st == LR_OK) { /* its features were the old instance's */
            lr__router_settle_ended(r, v.slot, r->clock.newest, false);
            lr__adapters_move(&r->ad, v.slot, to, r->clock.newest);
            lr__router_fleet_touch(r, v.instance);
            lr__router_fleet_touch(r, to);
        }
    }
    return lr__router_release(r, st);
}
