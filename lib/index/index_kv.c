/* lr_index, precise mode: the engine KV-cache events (lr_index_kv_stored,
 * lr_index_kv_removed, lr_index_kv_cleared). A BlockStored event is a learn
 * (index_learn.c) whose every engine block end is an anchor, plus an entry
 * of the engine-hash map (index_emap.c) per engine block, by which a later
 * removal or a child event finds its block. A removal drops the block and
 * everything below it, then trims back to the engine block boundary above
 * (index_evict.c).
 *
 * Worked example, index blocks of 16 tokens, an engine block of 32: a
 * stored event of engine blocks h1, h2 (64 tokens) learns 4 index blocks
 * with anchors at 2 and 4 and maps h1 to the node at depth 2, h2 to the one
 * at 4. Removing h2 then drops depths 3 and 4 and stops at 2, h1's end (an
 * anchor); removing h1 drops all four.
 *
 * Lower tiers. An engine that offloads blocks to host memory or disk
 * (vLLM's OffloadingConnector, LMCache) reports them as stores and
 * removals with another medium. Each lower tier is an index of its own,
 * ix->lower[tier - 1], with the GPU's block size and keys, made at the
 * tier's first event, so a router reads "how deep does instance X hold
 * this prompt on the CPU" with the same peek as on the GPU:
 *
 *   ix (GPU)            ix->lower[0] (CPU)      ix->lower[1] (DISK)
 *   keys k1 k2 k3 k4    keys k1 k2 k3 k4 k5     (none yet: NULL)
 *   inst 7 holds k1-k2  inst 7 holds k1-k5
 *   emap 7: h1 h2       emap 7: h3 h4 h5
 *
 * A tier's index holds the whole chain from the first block: an engine
 * offloads what it computed, block by block, so what it holds on a tier
 * is, like its GPU cache, closed under prefixes; and the router counts a
 * tier only past the GPU's depth (lr_candidate.cpu_tokens), where the
 * engine's connector looks it up. A GPU removal leaves the tier alone (the
 * offloaded copy outlives the GPU's); a tier's removal drops the block
 * and its instance's deeper ones there, as on the GPU.
 *
 * vLLM's OffloadingConnector sends no token ids: only the engine hashes
 * of blocks it copied from the GPU. Each hash resolves through the GPU's
 * engine-hash map (then the tier's own, for a block stored there
 * before) to a node, whose key and chain of parent keys are the tier's
 * keys: no token is needed. The hashes of one store are one request's
 * blocks, in order, on one chain: a run of hashes each below the one
 * before is one learn of the deepest one's chain, an anchor and a map
 * entry at each. (Hashes on several chains make one learn each; on
 * LR_ENOMEM the chains before stay, and the same store again ends where
 * one uninterrupted call does.) LMCache and Mooncake send token ids and a
 * parent: keyed from the tokens as on the GPU, chained on the parent
 * found on the tier or, failing that, on the GPU. */
#include "index/index.h"
#include "index/index_emap.h"
#include "index/index_evict.h"
#include "index/index_keys.h"
#include "index/index_learn.h"
#include "index/index_store.h"

LR__INIT_SIZED_ZERO(lr_kv_stored_init_sized, lr_kv_stored)

/* Largest engine block accepted, in tokens. */
#define MAX_ENGINE_BLOCK (1u << 20)

/* Copy and check a BlockStored event for `instance` (the statuses of
 * lr_index.h, in the order it lists them). */
static lr_status
kv_event(const lr_index *ix, uint32_t instance, const lr_kv_stored *ev,
         lr_kv_stored *e)
{
    memset(e, 0, sizeof *e);
    LR_TRY(lr__copy_sized(e, sizeof *e, ev, LR_KV_STORED_SIZE_V1));
    LR_RETURN_IF(instance == LR_INSTANCE_NONE, LR_EINVAL);
    LR_RETURN_IF(e->block_size == 0 || e->block_size > MAX_ENGINE_BLOCK,
                 LR_EINVAL);
    LR_RETURN_IF(e->n_blocks > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(e->n_blocks != 0 &&
                     (e->block_hashes == NULL || e->token_ids == NULL),
                 LR_EINVAL);
    LR_RETURN_IF((uint64_t)e->n_blocks * e->block_size != e->n_tokens,
                 LR_EINVAL);
    LR_RETURN_IF(e->n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(e->has_parent != 0 && e->has_parent != 1, LR_EINVAL);
    LR_RETURN_IF(e->block_size % ix->B != 0, LR_ENOTSUP);
    bool mm = false;
    for (size_t j = 0; e->mm_hashes != NULL && j < e->n_blocks; j++)
        mm |= e->mm_hashes[j] != 0;
    LR_RETURN_IF(mm && e->block_size != ix->B, LR_ENOTSUP);
    if (!mm)
        e->mm_hashes = NULL; /* none: the keys as without */
    return LR_OK;
}

/* Where the event's chain hangs: the tenant's root, or the block of the
 * parent hash, which slot s must hold (LR_ENOENT otherwise: an entry
 * exists only while its block is held). */
static lr_status
kv_base(const lr_index *ix, uint32_t s, const lr_kv_stored *e,
        struct learn_plan *pl, uint64_t *base_key)
{
    pl->base = LR_NIL;
    *base_key = lr__index_tenant_root(e->tenant_salt);
    if (!e->has_parent)
        return LR_OK;
    uint32_t n =
        s != LR_NIL ? lr__index_emap_find(ix, s, e->parent_hash) : LR_NIL;
    LR_RETURN_IF(n == LR_NIL, LR_ENOENT);
    pl->base = n;
    *base_key = ix->keys[pl->base];
    return LR_OK;
}

/* Engine-map entries the event adds (hashes s has not mapped yet),
 * LR_ELIMIT past engine_map_capacity. */
static lr_status
kv_fresh(const lr_index *ix, uint32_t s, const uint64_t *hashes, uint32_t eb)
{
    if (ix->emap_live + eb <= ix->emap_cap)
        return LR_OK; /* even if every hash is new */
    uint32_t fresh = 0;
    for (uint32_t j = 0; j < eb; j++)
        if (s == LR_NIL || lr__index_emap_find(ix, s, hashes[j]) == LR_NIL)
            fresh++;
    LR_RETURN_IF(ix->emap_live + fresh > ix->emap_cap, LR_ELIMIT);
    return LR_OK;
}

/* ---- lower tiers ---------------------------------------------------------- */

/* Where an engine hash of instance `id` is: its node and depth in the
 * GPU's index, else the tier's own (lo), else another lower tier's (a
 * block the host-memory tier spilled to disk). */
struct tier_at {
    const lr_index *ix;
    uint32_t node, depth;
};

static bool
tier_resolve(const lr_index *g, const lr_index *lo, uint32_t id, uint64_t h,
             struct tier_at *a)
{
    const lr_index *in[2 + LR__LOWER_TIERS] = { g, lo };
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        in[2 + t] = g->lower[t] != lo ? g->lower[t] : NULL;
    for (int k = 0; k < 2 + LR__LOWER_TIERS; k++) {
        if (in[k] == NULL)
            continue;
        uint32_t s = lr__index_inst_lookup(in[k], id);
        uint32_t n = s != LR_NIL ? lr__index_emap_find(in[k], s, h) : LR_NIL;
        if (n != LR_NIL) {
            *a = (struct tier_at){ in[k], n, node_depth(in[k], n) };
            return true;
        }
    }
    return false;
}

/* The node above a->node at depth d (<= a->depth). */
static uint32_t
tier_up(const struct tier_at *a, uint32_t d)
{
    uint32_t n = a->node;
    for (uint32_t k = a->depth; k > d; k--)
        n = lr__index_node_parent(a->ix, n);
    return n;
}

/* The keys of the chain from the root down to a's block at depth d (<=
 * a->depth) into out[0, d). */
static void
tier_chain(const struct tier_at *a, uint32_t d, uint64_t *out)
{
    uint32_t n = tier_up(a, d);
    for (uint32_t k = d; k > 0; k--) {
        out[k - 1] = a->ix->keys[n];
        n = lr__index_node_parent(a->ix, n);
    }
}

/* Learn lo->kbuf[0, n) for instance `id` in tier index lo, anchored at
 * the m ascending depths at[0, m) (each <= n), and map engine hash
 * hashes[which[k]] to the block at depth at[k]: kv_stored's three phases
 * on a chain whose keys are given. */
static lr_status
tier_learn(lr_index *lo, uint32_t id, uint32_t n, const uint32_t *at,
           const uint32_t *which, uint32_t m, const uint64_t *hashes,
           uint64_t now_ns)
{
    uint32_t s;
    LR_TRY(lr__index_slot_for(lo, id, &s));
    uint32_t fresh = 0;
    for (uint32_t k = 0; k < m; k++)
        if (s == LR_NIL ||
            lr__index_emap_find(lo, s, hashes[which[k]]) == LR_NIL)
            fresh++;
    LR_RETURN_IF(lo->emap_live + fresh > lo->emap_cap, LR_ELIMIT);
    struct learn_plan pl = { .s = s,
                             .id = id,
                             .base = LR_NIL,
                             .keys = lo->kbuf,
                             .n = n,
                             .anchors = at,
                             .n_anchors = m };
    LR_TRY(lr__index_plan_learn(lo, &pl));
    LR_TRY(lr__index_emap_reserve(lo, m));
    uint32_t tick = lr__index_tick(lo, now_ns);
    lr__index_apply_learn(lo, &pl, tick);
    uint32_t node = pl.node_n, d = n;
    for (uint32_t k = m; k-- > 0;) {
        for (; d > at[k]; d--)
            node = lr__index_node_parent(lo, node);
        lr__index_emap_put(lo, pl.s, hashes[which[k]], node);
    }
    lr__index_settle(lo, tick);
    return LR_OK;
}

/* A store with no token ids: each run of hashes that descend one from
 * the other, resolved through the GPU's map (or the tier's), is one
 * learn of its deepest block's chain. LR_ENOENT when no hash resolves. */
static lr_status
tier_stored_hashes(const lr_index *g, lr_index *lo, uint32_t id,
                   const uint64_t *h, uint32_t nb, uint64_t now_ns)
{
    LR_TRY(lr__index_scratch_anchors(lo, 2 * (size_t)nb));
    bool any = false;
    uint32_t j = 0;
    while (j < nb) {
        struct tier_at a, last;
        if (!tier_resolve(g, lo, id, h[j], &a)) {
            j++;
            continue;
        }
        /* abuf[0, nb): the depths; abuf[nb, 2 nb): which hash */
        uint32_t *at = lo->abuf, *which = lo->abuf + nb, m = 0;
        at[m] = a.depth;
        which[m++] = j;
        last = a;
        uint32_t k = j + 1;
        for (; k < nb; k++) {
            struct tier_at b;
            if (!tier_resolve(g, lo, id, h[k], &b))
                continue; /* unknown: left out */
            if (b.depth <= last.depth ||
                b.ix->keys[tier_up(&b, last.depth)] != last.ix->keys[last.node])
                break; /* another chain: the next learn */
            at[m] = b.depth;
            which[m++] = k;
            last = b;
        }
        j = k;
        uint32_t n = last.depth;
        if (n > lo->capacity) { /* keep what fits, as a learn does */
            n = (uint32_t)lo->capacity;
            while (m > 0 && at[m - 1] > n)
                m--;
            if (m == 0)
                continue;
        }
        LR_TRY(lr__index_scratch_keys(lo, n));
        tier_chain(&last, n, lo->kbuf);
        LR_TRY(tier_learn(lo, id, n, at, which, m, h, now_ns));
        any = true;
    }
    return any ? LR_OK : LR_ENOENT;
}

/* A store with token ids (checked by kv_event): keyed from them, chained
 * on the parent's chain (on the tier or the GPU) or the tenant's root. */
static lr_status
tier_stored_tokens(const lr_index *g, lr_index *lo, uint32_t id,
                   const lr_kv_stored *e, uint64_t now_ns)
{
    struct tier_at a = { g, LR_NIL, 0 };
    uint64_t base_key = lr__index_tenant_root(e->tenant_salt);
    if (e->has_parent) {
        LR_RETURN_IF(!tier_resolve(g, lo, id, e->parent_hash, &a), LR_ENOENT);
        base_key = a.ix->keys[a.node];
    }
    uint32_t m = e->block_size / lo->B, p = a.depth;
    uint64_t eb = e->n_blocks;
    if (p + eb * m > lo->capacity)
        eb = p >= lo->capacity ? 0 : (lo->capacity - p) / m;
    if (eb == 0)
        return LR_OK;
    uint32_t n = p + (uint32_t)eb * m;
    LR_TRY(lr__index_scratch_keys(lo, n));
    LR_TRY(lr__index_scratch_anchors(lo, 2 * (size_t)eb));
    if (p > 0)
        tier_chain(&a, p, lo->kbuf);
    lr__index_chain_keys_mm(base_key, e->token_ids, (size_t)eb * m, lo->B,
                            e->mm_hashes, lo->kbuf + p);
    uint32_t *at = lo->abuf, *which = lo->abuf + eb;
    for (uint32_t j = 0; j < eb; j++) {
        at[j] = p + (j + 1) * m;
        which[j] = j;
    }
    return tier_learn(lo, id, n, at, which, (uint32_t)eb, e->block_hashes,
                      now_ns);
}

/* lr_index_kv_stored() for a lower tier (e copied, tier checked). A tier
 * made by this call goes again when the call fails: nothing changed. */
static lr_status
kv_stored_lower(lr_index *ix, uint32_t instance, const lr_kv_stored *e,
                uint64_t now_ns)
{
    bool tokens = e->n_tokens > 0;
    lr_kv_stored chk;
    if (tokens) {
        LR_TRY(kv_event(ix, instance, e, &chk));
        e = &chk; /* its multimodal hashes judged */
    } else {
        LR_RETURN_IF(instance == LR_INSTANCE_NONE, LR_EINVAL);
        LR_RETURN_IF(e->n_blocks > LR_INDEX_MAX_TOKENS, LR_EINVAL);
        LR_RETURN_IF(e->n_blocks != 0 && e->block_hashes == NULL, LR_EINVAL);
        LR_RETURN_IF(e->has_parent != 0 && e->has_parent != 1, LR_EINVAL);
    }
    LR_TRY(lr__index_judge(ix, now_ns));
    if (e->n_blocks == 0)
        return LR_OK;
    lr_index **slot = &ix->lower[e->tier - 1];
    bool fresh = *slot == NULL;
    if (fresh)
        LR_TRY(lr__index_lower_new(ix, now_ns, slot));
    lr_status st =
        tokens ? tier_stored_tokens(ix, *slot, instance, e, now_ns)
               : tier_stored_hashes(ix, *slot, instance, e->block_hashes,
                                    (uint32_t)e->n_blocks, now_ns);
    if (st != LR_OK && fresh) {
        lr_index_destroy(*slot);
        *slot = NULL;
    }
    if (st == LR_OK)
        (void)lr__index_tick(ix, now_ns); /* the call's time is taken */
    return st;
}

lr_status
lr_index_kv_stored(lr_index *idx, uint32_t instance, const lr_kv_stored *ev,
                   uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL || ev == NULL, LR_EINVAL);
    lr_index *ix = idx;
    lr_kv_stored e;
    memset(&e, 0, sizeof e);
    LR_TRY(lr__copy_sized(&e, sizeof e, ev, LR_KV_STORED_SIZE_V1));
    LR_RETURN_IF(e.tier < LR_TIER_GPU || e.tier > LR_TIER_DISK, LR_EINVAL);
    if (e.tier != LR_TIER_GPU)
        return kv_stored_lower(ix, instance, &e, now_ns);
    LR_TRY(kv_event(ix, instance, ev, &e));
    LR_TRY(lr__index_judge(ix, now_ns));
    uint32_t s; /* after the input checks: bad input is EINVAL, not ELIMIT */
    LR_TRY(lr__index_slot_for(ix, instance, &s));
    if (e.n_blocks == 0)
        return LR_OK;
    struct learn_plan pl = { .s = s, .id = instance, .anchors = ix->abuf };
    uint64_t base_key;
    LR_TRY(kv_base(ix, s, &e, &pl, &base_key));

    /* One engine block is m index blocks; keep whole engine blocks. */
    uint32_t m = e.block_size / ix->B;
    uint32_t eb = (uint32_t)e.n_blocks;
    if ((uint64_t)eb * m > ix->capacity)
        eb = (uint32_t)(ix->capacity / m);
    pl.n = eb * m;
    pl.n_anchors = eb;
    pl.all_anchors = m == 1; /* every block ends an engine block */
    if (pl.n == 0)
        return LR_OK;
    LR_TRY(lr__index_scratch_keys(ix, pl.n));
    LR_TRY(lr__index_scratch_anchors(ix, eb));
    lr__index_chain_keys_mm(base_key, e.token_ids, pl.n, ix->B, e.mm_hashes,
                            ix->kbuf);
    pl.keys = ix->kbuf;
    pl.anchors = ix->abuf;
    for (uint32_t j = 0; j < eb; j++)
        ix->abuf[j] = (j + 1) * m;
    LR_TRY(kv_fresh(ix, s, e.block_hashes, eb));
    LR_TRY(lr__index_plan_learn(ix, &pl));
    LR_TRY(lr__index_emap_reserve(ix, eb));

    /* phase 2 */
    uint32_t tick = lr__index_tick(ix, now_ns);
    lr__index_apply_learn(ix, &pl, tick);
    /* engine block j ends at depth (j + 1) m: its node, up the chain from
     * the end (into abuf, whose anchors the learn has used) */
    uint32_t n = pl.node_n;
    for (uint32_t j = eb; j-- > 0;) {
        ix->abuf[j] = n;
        for (uint32_t k = 0; j > 0 && k < m; k++)
            n = lr__index_node_parent(ix, n);
    }
    for (uint32_t j = 0; j < eb; j++)
        lr__index_emap_put(ix, pl.s, e.block_hashes[j], ix->abuf[j]);
    ix->insts[pl.s].ev_m = m;
    lr__index_settle(ix, tick);
    return LR_OK;
}

lr_status
lr_index_kv_removed(lr_index *idx, uint32_t instance,
                    const uint64_t *block_hashes, size_t n_blocks,
                    size_t *n_resolved)
{
    LR_RETURN_IF(idx == NULL || instance == LR_INSTANCE_NONE, LR_EINVAL);
    LR_RETURN_IF(block_hashes == NULL && n_blocks != 0, LR_EINVAL);
    uint32_t s = lr__index_inst_lookup(idx, instance);
    LR_RETURN_IF(s == LR_NIL, LR_ENOENT);
    size_t resolved = 0;
    for (size_t i = 0; i < n_blocks; i++) {
        uint32_t node = lr__index_emap_find(idx, s, block_hashes[i]);
        if (node == LR_NIL)
            continue;
        uint32_t r = node_run(idx, node), off = node_off(idx, node);
        resolved++;
        /* a route learned past what the engine stored is a request
         * routed there and not yet stored, whose prefill will store this
         * block again: only the hash goes */
        uint32_t m = idx->insts[s].ev_m ? idx->insts[s].ev_m : 1;
        if (lr__index_unstored_below(idx, s, r, off, m)) {
            lr__index_emap_forget(idx, s, r, off, off + 1);
            continue;
        }
        /* the removal forgets this hash with its block, and the hashes
         * of every deeper block it takes */
        uint32_t x = lr__index_remove_below(idx, s, r, off);
        lr__index_remove_leaf_and_trim(idx, x, WHY_DROP, true);
    }
    if (n_resolved != NULL)
        *n_resolved = resolved;
    return LR_OK;
}

lr_status
lr_index_kv_removed_tier(lr_index *idx, uint32_t instance, int32_t tier,
                         const uint64_t *block_hashes, size_t n_blocks,
                         size_t *n_resolved)
{
    LR_RETURN_IF(idx == NULL || instance == LR_INSTANCE_NONE, LR_EINVAL);
    LR_RETURN_IF(tier < LR_TIER_GPU || tier > LR_TIER_DISK, LR_EINVAL);
    LR_RETURN_IF(block_hashes == NULL && n_blocks != 0, LR_EINVAL);
    if (tier == LR_TIER_GPU)
        return lr_index_kv_removed(idx, instance, block_hashes, n_blocks,
                                   n_resolved);
    lr_index *lo = idx->lower[tier - 1];
    lr_status st = lo != NULL ? lr_index_kv_removed(lo, instance, block_hashes,
                                                    n_blocks, n_resolved)
                              : LR_ENOENT;
    if (st != LR_ENOENT)
        return st;
    /* the instance has nothing on this tier: nothing resolves */
    if (n_resolved != NULL)
        *n_resolved = 0;
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (lr__index_inst_lookup(idx, instance) != LR_NIL ||
            (idx->lower[t] != NULL &&
             lr__index_inst_lookup(idx->lower[t], instance) != LR_NIL))
            return LR_OK;
    return LR_ENOENT;
}

lr_status
lr_index_kv_cleared(lr_index *idx, uint32_t instance)
{
    LR_RETURN_IF(idx == NULL || instance == LR_INSTANCE_NONE, LR_EINVAL);
    bool known = false;
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (idx->lower[t] != NULL)
            known |= lr_index_kv_cleared(idx->lower[t], instance) == LR_OK;
    uint32_t s; /* the instance stays known */
    lr_status st = lr__index_clear(idx, instance, &s);
    return st == LR_ENOENT && known ? LR_OK : st;
}
