/* lr_index, precise mode: the engine KV-cache events (lr_index_kv_stored,
 * lr_index_kv_removed, lr_index_kv_cleared) and the map from an engine's
 * block hash to the index's own key that lets a removal find its block.
 * The index layout is pictured at the top of index.c. */
#include "index/index_impl.h"

LR__INIT_SIZED_ZERO(lr_kv_stored_init_sized, lr_kv_stored)

/* ------------------------------------------------------------------------ */
/* engine-hash map (precise mode)                                            */
/* ------------------------------------------------------------------------ */
/*
 * (instance slot, engine hash) -> node slot, for BlockRemoved events and
 * parent hashes. An entry lives exactly as long as its instance holds its
 * block: every removal of holds (eviction, expiry, KV removal, clearing)
 * forgets the hashes of the blocks it takes (lr__index_emap_forget), so
 * no entry is ever stale and the map never holds more than the routes.
 *
 *   etab: keyed hash of (s, ehash) -> value
 *         value < EV_OVF: a node slot n, whose primary entry this is:
 *             ehash[n] = ehash, einst[n] = s   (10 bytes a slot)
 *         value >= EV_OVF: entry ep[value - EV_OVF] of the overflow pool
 *             {ehash, node, inst}: a second instance (or a second hash) on
 *             one block, as with a system prompt many engines hold; also
 *             in otab, keyed by (s, node), and eovf marks the node
 *
 * The per-slot arrays exist from the first KV event on and grow with the
 * node slots (chunk_reserve); an index that never sees one pays nothing.
 * Hashes are keyed by the handle's seed (B26): engine hashes come from the
 * network. */
#define EMAP_HASH_SALT 0xe4a5u
#define OMAP_HASH_SALT 0x0e4au
#define EMAP_LINK offsetof(struct emap_ent, node)
#define EV_OVF (1u << 31)

static inline uint64_t
ehv(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    return lr__mix64(ehash ^ ((uint64_t)s * GOLDEN_GAMMA),
                     ix->seed ^ EMAP_HASH_SALT);
}

static inline uint64_t
ohv(const lr_index *ix, uint32_t s, uint32_t n)
{
    return lr__mix64(((uint64_t)s << 32) | n, ix->seed ^ OMAP_HASH_SALT);
}

static inline bool
ovf_bit(const lr_index *ix, uint32_t n)
{
    return (ix->eovf[n >> CHUNK_SHIFT] >> (n & CHUNK_MASK)) & 1;
}

static bool
emap_eq(const void *ctx, uint64_t ehash, uint32_t v)
{
    const struct lr__index_probe *p = ctx;
    const lr_index *ix = p->ix;
    if (v >= EV_OVF)
        return ix->ep[v - EV_OVF].inst == p->slot &&
               ix->ep[v - EV_OVF].ehash == ehash;
    return ix->einst[v] == p->slot && ix->ehash[v] == ehash;
}

/* Value of (s, ehash) in etab, or LR_NIL. */
static uint32_t
emap_get(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    if (ix->ecap == 0)
        return LR_NIL;
    struct lr__index_probe p = { ix, s };
    return lr__table_find(&ix->etab, ehv(ix, s, ehash), ehash, emap_eq, &p);
}

static uint32_t
emap_node(const lr_index *ix, uint32_t v)
{
    return v >= EV_OVF ? ix->ep[v - EV_OVF].node : v;
}

static bool
omap_eq(const void *ctx, uint64_t n, uint32_t e)
{
    const struct lr__index_probe *p = ctx;
    return p->ix->ep[e].inst == p->slot && p->ix->ep[e].node == n;
}

/* Drop the entry behind etab value v of instance s. */
static void
emap_del(lr_index *ix, uint32_t s, uint32_t v)
{
    if (v < EV_OVF) {
        lr__table_remove(&ix->etab, ehv(ix, s, ix->ehash[v]), v);
        ix->einst[v] = EINST_NONE;
    } else {
        uint32_t e = v - EV_OVF;
        struct emap_ent *en = &ix->ep[e];
        lr__table_remove(&ix->etab, ehv(ix, s, en->ehash), v);
        lr__table_remove(&ix->otab, ohv(ix, s, en->node), e);
        en->inst = EINST_NONE;
        pool_give(&ix->epool, ix->ep, sizeof *ix->ep, EMAP_LINK, e);
    }
    ix->emap_live--;
}

/* Set (s, ehash) -> node n. Room was reserved by emap_reserve(). */
static void
emap_put(lr_index *ix, uint32_t s, uint64_t ehash, uint32_t n)
{
    uint32_t v = emap_get(ix, s, ehash);
    if (v != LR_NIL) {
        if (emap_node(ix, v) == n)
            return;
        emap_del(ix, s, v);
    }
    if (ix->einst[n] == EINST_NONE) {
        ix->ehash[n] = ehash;
        ix->einst[n] = (uint16_t)s;
        v = n;
    } else {
        uint32_t e = pool_take(&ix->epool, ix->ep, sizeof *ix->ep, EMAP_LINK);
        ix->ep[e].ehash = ehash;
        ix->ep[e].node = n;
        ix->ep[e].inst = (uint16_t)s;
        lr__table_insert(&ix->otab, ohv(ix, s, n), e);
        ix->eovf[n >> CHUNK_SHIFT] |= (uint16_t)(1u << (n & CHUNK_MASK));
        v = e + EV_OVF;
    }
    lr__table_insert(&ix->etab, ehv(ix, s, ehash), v);
    ix->emap_live++;
}

void
lr__index_emap_forget(lr_index *ix, uint32_t s, uint32_t r, uint32_t from,
                      uint32_t to)
{
    if (ix->ecap == 0 || from >= to)
        return;
    uint32_t n = lr__index_node_at(ix, r, from);
    for (uint32_t p = from;;) {
        if (ix->einst[n] == s)
            emap_del(ix, s, n);
        if (ovf_bit(ix, n) && ix->otab.count > 0) {
            struct lr__index_probe pr = { ix, s };
            uint32_t e;
            while ((e = lr__table_find(&ix->otab, ohv(ix, s, n), n, omap_eq,
                                       &pr)) != LR_NIL)
                emap_del(ix, s, e + EV_OVF);
        }
        if (++p == to)
            return;
        n = (n & CHUNK_MASK) != CHUNK_MASK
                ? n + 1
                : ix->chunks[n >> CHUNK_SHIFT].next << CHUNK_SHIFT;
    }
}

void
lr__index_emap_slots_freed(lr_index *ix, uint32_t c, uint32_t from, uint32_t to)
{
    if (ix->ecap > 0) {
        for (uint32_t k = from; k < to; k++)
            assert(ix->einst[(c << CHUNK_SHIFT) | k] == EINST_NONE);
        uint32_t bits = ((1u << to) - 1) & ~((1u << from) - 1);
        ix->eovf[c] &= (uint16_t)~bits;
    }
}

/* The per-slot arrays for slots [0, cap * CHUNK) of the node pool (grown
 * by chunk_reserve once they exist). LR_ENOMEM changes nothing logical. */
static lr_status
grow_slots(struct lr__mem *m, void **arr, uint32_t *have, uint32_t cap,
           size_t per_chunk, int fill)
{
    if (*have >= cap)
        return LR_OK;
    size_t old = (size_t)*have * per_chunk, n = (size_t)cap * per_chunk;
    uint8_t *p = lr__realloc(m, *arr, old, n);
    if (p == NULL)
        return LR_ENOMEM;
    memset(p + old, fill, n - old);
    *arr = p;
    *have = cap;
    return LR_OK;
}

lr_status
lr__index_emap_slots(lr_index *ix, uint32_t cap)
{
    if (cap <= ix->ecap)
        return LR_OK;
    /* each array keeps its own size, so a failure half way is harmless */
    LR_TRY(grow_slots(&ix->mem, (void **)&ix->ehash, &ix->ecap_h, cap,
                      CHUNK * sizeof(uint64_t), 0));
    LR_TRY(grow_slots(&ix->mem, (void **)&ix->einst, &ix->ecap_i, cap,
                      CHUNK * sizeof(uint16_t), 0xff)); /* EINST_NONE */
    LR_TRY(grow_slots(&ix->mem, (void **)&ix->eovf, &ix->ecap_o, cap,
                      sizeof(uint16_t), 0));
    ix->ecap = cap;
    return LR_OK;
}

/* Room for `more` new entries: the slot arrays, the overflow pool, both
 * tables. */
static lr_status
emap_reserve(lr_index *ix, uint32_t more)
{
    LR_TRY(lr__index_emap_slots(ix, ix->cpool.cap));
    LR_TRY(lr__index_pool_reserve(&ix->mem, &ix->epool, (void **)&ix->ep,
                                  sizeof *ix->ep, more, EV_OVF - 1));
    LR_TRY(lr__table_reserve(&ix->otab, &ix->mem, more));
    return lr__table_reserve(&ix->etab, &ix->mem, more);
}

uint64_t
lr__index_emap_live(const lr_index *ix)
{
    return ix->emap_live;
}

void
lr__index_emap_drop(lr_index *ix, uint32_t s)
{
    (void)ix;
    (void)s; /* forgotten with its holds (remove_all_of) */
}

void
lr__index_emap_free(lr_index *ix)
{
    lr__free(&ix->mem, ix->ehash,
             (size_t)ix->ecap_h * CHUNK * sizeof(uint64_t));
    lr__free(&ix->mem, ix->einst,
             (size_t)ix->ecap_i * CHUNK * sizeof(uint16_t));
    lr__free(&ix->mem, ix->eovf, (size_t)ix->ecap_o * sizeof(uint16_t));
    lr__free(&ix->mem, ix->ep, (size_t)ix->epool.cap * sizeof(struct emap_ent));
    lr__table_free(&ix->etab, &ix->mem);
    lr__table_free(&ix->otab, &ix->mem);
}

uint64_t
lr__index_emap_digest(const lr_index *ix)
{
    uint64_t d = 0; /* a sum: independent of where entries sit */
    for (uint32_t n = 0; ix->ecap > 0 && n < ix->cpool.top * CHUNK; n++)
        if (ix->einst[n] != EINST_NONE)
            d += lr__mix64(ix->ehash[n] ^ ix->keys[n],
                           (uint64_t)ix->insts[ix->einst[n]].id + 1);
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst != EINST_NONE)
            d += lr__mix64(en->ehash ^ ix->keys[en->node],
                           (uint64_t)ix->insts[en->inst].id + 1);
    }
    return d;
}

void
lr__index_emap_each(const lr_index *ix,
                    void (*fn)(void *ctx, uint32_t s, uint64_t ehash,
                               uint32_t node),
                    void *ctx)
{
    for (uint32_t n = 0; ix->ecap > 0 && n < ix->cpool.top * CHUNK; n++)
        if (ix->einst[n] != EINST_NONE)
            fn(ctx, ix->einst[n], ix->ehash[n], n);
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst != EINST_NONE)
            fn(ctx, en->inst, en->ehash, en->node);
    }
}

lr_status
lr__index_emap_reserve(lr_index *ix, uint32_t more)
{
    return emap_reserve(ix, more);
}

void
lr__index_emap_put(lr_index *ix, uint32_t s, uint64_t ehash, uint32_t node)
{
    emap_put(ix, s, ehash, node);
}

/* Every entry's instance holds its block and the tables find it; the
 * counts agree. */
lr_status
lr__index_emap_verify(const lr_index *ix)
{
    uint64_t live = 0, ovf = 0;
    uint32_t nfree = 0;
    if (ix->ecap > 0 && ix->ecap < ix->cpool.cap)
        return LR_ECORRUPT; /* the slot arrays cover every slot */
    for (uint32_t n = 0; ix->ecap > 0 && n < ix->cpool.top * CHUNK; n++) {
        if (ix->einst[n] == EINST_NONE)
            continue;
        uint32_t s = ix->einst[n];
        live++;
        if (s >= ix->max_inst || !ix->insts[s].used ||
            ix->chunks[n >> CHUNK_SHIFT].run == LR_NIL ||
            node_off(ix, n) >= ix->runs[node_run(ix, n)].len ||
            !holds_node(ix, n, s) || emap_get(ix, s, ix->ehash[n]) != n)
            return LR_ECORRUPT;
    }
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst == EINST_NONE)
            continue;
        live++;
        ovf++;
        uint32_t n = en->node;
        if (en->inst >= ix->max_inst || !ix->insts[en->inst].used ||
            ix->ecap == 0 || !ovf_bit(ix, n) ||
            ix->chunks[n >> CHUNK_SHIFT].run == LR_NIL ||
            !holds_node(ix, n, en->inst) ||
            emap_get(ix, en->inst, en->ehash) != e + EV_OVF)
            return LR_ECORRUPT;
    }
    for (uint32_t e = ix->epool.free; e != LR_NIL; e = ix->ep[e].node)
        if (e >= ix->epool.top || ix->ep[e].inst != EINST_NONE ||
            ++nfree > ix->epool.top)
            return LR_ECORRUPT;
    if (live != ix->emap_live || live != ix->etab.count ||
        ovf != ix->otab.count || nfree != ix->epool.nfree ||
        ovf + nfree != ix->epool.top)
        return LR_ECORRUPT;
    if (lr__table_verify(&ix->etab) != LR_OK)
        return LR_ECORRUPT;
    return lr__table_verify(&ix->otab);
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
    uint32_t v = s != LR_NIL ? emap_get(ix, s, e->parent_hash) : LR_NIL;
    LR_RETURN_IF(v == LR_NIL, LR_ENOENT);
    pl->base = emap_node(ix, v);
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
        if (s == LR_NIL || emap_get(ix, s, hashes[j]) == LR_NIL)
            fresh++;
    LR_RETURN_IF(ix->emap_live + fresh > ix->emap_cap, LR_ELIMIT);
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
    lr__index_chain_keys(base_key, e.token_ids, pl.n, ix->B, ix->kbuf);
    pl.keys = ix->kbuf;
    pl.anchors = ix->abuf;
    for (uint32_t j = 0; j < eb; j++)
        ix->abuf[j] = (j + 1) * m;
    LR_TRY(kv_fresh(ix, s, e.block_hashes, eb));
    LR_TRY(lr__index_plan_learn(ix, &pl));
    LR_TRY(emap_reserve(ix, eb));

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
        emap_put(ix, pl.s, e.block_hashes[j], ix->abuf[j]);
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
        uint32_t v = emap_get(idx, s, block_hashes[i]);
        if (v == LR_NIL)
            continue;
        /* the removal forgets this hash with its block, and the hashes
         * of every deeper block it takes */
        uint32_t node = emap_node(idx, v);
        uint32_t x = lr__index_remove_below(idx, s, node_run(idx, node),
                                            node_off(idx, node));
        lr__index_remove_leaf_and_trim(idx, x, WHY_DROP, true);
        resolved++;
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
