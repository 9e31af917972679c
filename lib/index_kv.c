/* lr_index, precise mode: the engine KV-cache events (lr_index_kv_stored,
 * lr_index_kv_removed, lr_index_kv_cleared) and the map from an engine's
 * block hash to the index's own key that lets a removal find its block.
 * The index layout is pictured at the top of index.c. */
#include "index_impl.h"

void
lr_kv_stored_init_sized(lr_kv_stored *ev, size_t size)
{
    lr__init_sized(ev, size, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* engine-hash map (precise mode)                                            */
/* ------------------------------------------------------------------------ */

/* Entries live in a pool (ep[], free list through `node`, inst ==
 * LR_NIL when free) and etab maps (instance slot, engine hash) to an entry
 * index. Entries never move, so a caller may hold an index across other
 * map changes. The hash is keyed by the handle's seed (B26): engine hashes
 * come from the network. */
#define EMAP_HASH_SALT 0xe4a5u
#define EMAP_LINK offsetof(struct emap_ent, node)

static inline uint64_t
ehv(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    return lr__mix64(ehash ^ ((uint64_t)s * GOLDEN_GAMMA),
                     ix->seed ^ EMAP_HASH_SALT);
}

struct emap_probe {
    const struct emap_ent *ep;
    uint32_t s;
};

static bool
emap_eq(const void *ctx, uint64_t ehash, uint32_t e)
{
    const struct emap_probe *p = ctx;
    return p->ep[e].inst == p->s && p->ep[e].ehash == ehash;
}

/* Entry of (s, ehash), live or stale, or LR_NIL. */
static uint32_t
emap_get(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    struct emap_probe p = { ix->ep, s };
    return lr__table_find(&ix->etab, ehv(ix, s, ehash), ehash, emap_eq, &p);
}

/* An entry is live while a node with its key exists and its instance
 * holds it; evictions leave stale entries behind, which are dropped
 * lazily. `node` is where the key was, a hint (keys are unique). Returns
 * the node, or LR_NIL for a stale entry. */
static uint32_t
emap_node(const lr_index *ix, const struct emap_ent *e)
{
    uint32_t n = e->node;
    if (!((n >> CHUNK_SHIFT) < ix->cpool.top &&
          ix->chunks[n >> CHUNK_SHIFT].run != LR_NIL &&
          node_off(ix, n) < ix->runs[node_run(ix, n)].len &&
          ix->keys[n] == e->key))
        n = node_find(ix, e->key);
    return n != LR_NIL && holds_node(ix, n, e->inst) ? n : LR_NIL;
}

static bool
emap_valid(const lr_index *ix, const struct emap_ent *e)
{
    return emap_node(ix, e) != LR_NIL;
}

static void
emap_del(lr_index *ix, uint32_t e)
{
    struct emap_ent *en = &ix->ep[e];
    lr__table_remove(&ix->etab, ehv(ix, en->inst, en->ehash), e);
    en->inst = LR_NIL;
    pool_give(&ix->epool, ix->ep, sizeof *ix->ep, EMAP_LINK, e);
}

/* Set (s, ehash) -> (node, key), adding the entry if needed. Room was
 * reserved by emap_reserve(). */
static void
emap_put(lr_index *ix, uint32_t s, uint64_t ehash, uint32_t node, uint64_t key)
{
    uint32_t e = emap_get(ix, s, ehash);
    if (e == LR_NIL) {
        e = pool_take(&ix->epool, ix->ep, sizeof *ix->ep, EMAP_LINK);
        ix->ep[e].inst = s;
        ix->ep[e].ehash = ehash;
        lr__table_insert(&ix->etab, ehv(ix, s, ehash), e);
    }
    ix->ep[e].node = node;
    ix->ep[e].key = key;
}

/* Delete entries of s (any when s == LR_NIL) and, when stale_only, only
 * those no longer valid. Returns how many went. */
static uint64_t
emap_sweep(lr_index *ix, uint32_t s, bool stale_only)
{
    uint64_t gone = 0;
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst != LR_NIL && (s == LR_NIL || en->inst == s) &&
            (!stale_only || !emap_valid(ix, en))) {
            emap_del(ix, e);
            gone++;
        }
    }
    return gone;
}

/* Room for `more` new entries in the pool and the table. */
static lr_status
emap_reserve(lr_index *ix, uint32_t more)
{
    LR_TRY(lr__index_pool_reserve(&ix->mem, &ix->epool, (void **)&ix->ep,
                                  sizeof *ix->ep, more, LR_NIL - 1));
    return lr__table_reserve(&ix->etab, &ix->mem, more);
}

static uint64_t
emap_count_if(const lr_index *ix, bool valid)
{
    uint64_t n = 0;
    for (uint32_t e = 0; e < ix->epool.top; e++)
        if (ix->ep[e].inst != LR_NIL && emap_valid(ix, &ix->ep[e]) == valid)
            n++;
    return n;
}

uint64_t
lr__index_emap_live(const lr_index *ix)
{
    return emap_count_if(ix, true);
}

void
lr__index_emap_drop(lr_index *ix, uint32_t s)
{
    emap_sweep(ix, s, false);
}

void
lr__index_emap_free(lr_index *ix)
{
    lr__free(&ix->mem, ix->ep, (size_t)ix->epool.cap * sizeof(struct emap_ent));
    lr__table_free(&ix->etab, &ix->mem);
}

uint64_t
lr__index_emap_digest(const lr_index *ix)
{
    uint64_t d = 0; /* a sum: independent of where entries sit */
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst != LR_NIL && emap_valid(ix, en))
            d += lr__mix64(en->ehash ^ en->key, en->inst + 1);
    }
    return d;
}

lr_status
lr__index_emap_verify(const lr_index *ix)
{
    uint32_t used = 0, nfree = 0;
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst == LR_NIL)
            continue;
        used++;
        if (en->inst >= ix->max_inst || !ix->insts[en->inst].used ||
            emap_get(ix, en->inst, en->ehash) != e)
            return LR_ECORRUPT;
    }
    for (uint32_t e = ix->epool.free; e != LR_NIL; e = ix->ep[e].node)
        if (e >= ix->epool.top || ix->ep[e].inst != LR_NIL ||
            ++nfree > ix->epool.top)
            return LR_ECORRUPT;
    if (used != ix->etab.count || nfree != ix->epool.nfree ||
        used + nfree != ix->epool.top)
        return LR_ECORRUPT;
    return lr__table_verify(&ix->etab);
}

/* ------------------------------------------------------------------------ */
/* precise mode                                                              */
/* ------------------------------------------------------------------------ */

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
    return LR_OK;
}

/* Where the event's chain hangs: the tenant's root, or the block of the
 * parent hash, which slot s must hold (LR_ENOENT otherwise). */
static lr_status
kv_base(const lr_index *ix, uint32_t s, const lr_kv_stored *e,
        struct learn_plan *pl, uint64_t *base_key)
{
    pl->base = LR_NIL;
    *base_key = lr__index_tenant_root(e->tenant_salt);
    if (!e->has_parent)
        return LR_OK;
    uint32_t pi = s != LR_NIL ? emap_get(ix, s, e->parent_hash) : LR_NIL;
    uint32_t n = pi != LR_NIL ? emap_node(ix, &ix->ep[pi]) : LR_NIL;
    LR_RETURN_IF(n == LR_NIL, LR_ENOENT);
    pl->base = n;
    *base_key = ix->ep[pi].key;
    return LR_OK;
}

/* Engine-map entries the event needs, LR_ELIMIT past engine_map_capacity.
 * A hash needs a new entry unless a live one exists: a stale entry (its
 * block was evicted) may be swept and then re-inserted, so it counts as
 * new too. */
static lr_status
kv_fresh(const lr_index *ix, uint32_t s, const uint64_t *hashes, uint32_t eb,
         uint32_t *fresh)
{
    *fresh = 0;
    for (uint32_t j = 0; j < eb; j++) {
        uint32_t en = s == LR_NIL ? LR_NIL : emap_get(ix, s, hashes[j]);
        if (en == LR_NIL || !emap_valid(ix, &ix->ep[en]))
            (*fresh)++;
    }
    uint64_t want = (uint64_t)ix->etab.count + *fresh;
    if (want > ix->emap_cap && want - emap_count_if(ix, false) > ix->emap_cap)
        return LR_ELIMIT;
    return LR_OK;
}

lr_status
lr_index_kv_stored(lr_index *idx, uint32_t instance, const lr_kv_stored *ev,
                   uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL || ev == NULL, LR_EINVAL);
    lr_index *ix = idx;
    lr_kv_stored e;
    LR_TRY(kv_event(ix, instance, ev, &e));
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
    if (pl.n == 0)
        return LR_OK;
    LR_TRY(lr__index_scratch_keys(ix, pl.n));
    LR_TRY(lr__index_scratch_anchors(ix, eb));
    lr__index_chain_keys(base_key, e.token_ids, pl.n, ix->B, ix->kbuf);
    pl.keys = ix->kbuf;
    pl.anchors = ix->abuf;
    for (uint32_t j = 0; j < eb; j++)
        ix->abuf[j] = (j + 1) * m;
    uint32_t fresh;
    LR_TRY(kv_fresh(ix, s, e.block_hashes, eb, &fresh));
    LR_TRY(lr__index_plan_learn(ix, &pl));
    LR_TRY(emap_reserve(ix, fresh));

    /* phase 2 */
    if (ix->etab.count + fresh > ix->emap_cap)
        emap_sweep(ix, LR_NIL, true);
    uint32_t tick = lr__index_tick(ix, now_ns);
    lr__index_apply_learn(ix, &pl, tick);
    for (uint32_t j = 0; j < eb; j++) {
        uint64_t key = ix->kbuf[(j + 1) * m - 1];
        emap_put(ix, pl.s, e.block_hashes[j], node_find(ix, key), key);
    }
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
        uint32_t e = emap_get(idx, s, block_hashes[i]);
        if (e == LR_NIL)
            continue;
        uint32_t node = emap_node(idx, &idx->ep[e]);
        if (node != LR_NIL) {
            uint32_t x = lr__index_remove_below(idx, s, node_run(idx, node),
                                                node_off(idx, node));
            lr__index_remove_leaf_and_trim(idx, x, WHY_DROP, true);
            resolved++;
        }
        /* Removal leaves the map alone (entries of the dropped deeper
         * blocks go stale), so e is still this hash's entry. */
        emap_del(idx, e);
    }
    if (n_resolved != NULL)
        *n_resolved = resolved;
    return LR_OK;
}

lr_status
lr_index_kv_cleared(lr_index *idx, uint32_t instance)
{
    uint32_t s; /* the instance stays known */
    return lr__index_clear(idx, instance, &s);
}
