/* lr_index, precise mode: the engine KV-cache events (lr_index_kv_stored,
 * lr_index_kv_removed, lr_index_kv_cleared) and the map from an engine's
 * block hash to the index's own key that lets a removal find its block.
 * The index layout is pictured at the top of index.c. */
#include "index_impl.h"

void
lr_kv_stored_init(lr_kv_stored *ev)
{
    if (ev == NULL)
        return;
    memset(ev, 0, sizeof *ev);
    ev->struct_size = sizeof *ev;
}

/* ------------------------------------------------------------------------ */
/* engine-hash map (precise mode)                                            */
/* ------------------------------------------------------------------------ */

static inline uint64_t
ehv(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    return lr__mix64(ehash ^ ((uint64_t)s * 0x9e3779b97f4a7c15ull),
                     ix->seed ^ 0xe4a5);
}

static struct emap_ent *
emap_get(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    if (ix->e_size == 0)
        return NULL;
    uint64_t i = ehv(ix, s, ehash) & (ix->e_size - 1);
    for (;;) {
        struct emap_ent *e = &ix->emap[i];
        if (e->inst == LR_NIL)
            return NULL;
        if (e->inst == s && e->ehash == ehash)
            return e;
        i = (i + 1) & (ix->e_size - 1);
    }
}

/* An entry is live while its node still exists with the same key and its
 * instance still holds it; evictions leave stale entries behind, which are
 * dropped lazily. */
bool
lr__index_emap_valid(const lr_index *ix, const struct emap_ent *e)
{
    if (e->node >= ix->n_top)
        return false;
    const struct node *nd = &ix->nodes[e->node];
    if (nd->h.inst == INST_FREE || nd->h.inst == PENDING || nd->key != e->key)
        return false;
    return hold_find(ix, e->node, e->inst) != LR_NIL;
}

static void
emap_del_at(lr_index *ix, uint64_t i)
{
    uint64_t mask = ix->e_size - 1;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        struct emap_ent *e = &ix->emap[j];
        if (e->inst == LR_NIL)
            break;
        uint64_t home = ehv(ix, e->inst, e->ehash) & mask;
        bool movable =
            (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            ix->emap[i] = *e;
            i = j;
        }
    }
    ix->emap[i].inst = LR_NIL;
    ix->e_count--;
}

static void
emap_put(lr_index *ix, uint32_t s, uint64_t ehash, uint32_t node, uint64_t key)
{
    uint64_t mask = ix->e_size - 1;
    uint64_t i = ehv(ix, s, ehash) & mask;
    for (;;) {
        struct emap_ent *e = &ix->emap[i];
        if (e->inst == LR_NIL) {
            e->inst = s;
            e->ehash = ehash;
            ix->e_count++;
            break;
        }
        if (e->inst == s && e->ehash == ehash)
            break;
        i = (i + 1) & mask;
    }
    ix->emap[i].node = node;
    ix->emap[i].key = key;
}

/* Delete entries matching (s or any when s == LR_NIL) and, when
 * stale_only, only those no longer valid. Returns how many went. */
uint64_t
lr__index_emap_sweep(lr_index *ix, uint32_t s, bool stale_only)
{
    uint64_t gone = 0;
    uint64_t i = 0;
    while (i < ix->e_size) {
        struct emap_ent *e = &ix->emap[i];
        if (e->inst != LR_NIL && (s == LR_NIL || e->inst == s) &&
            (!stale_only || !lr__index_emap_valid(ix, e))) {
            emap_del_at(ix, i);
            gone++;
            continue; /* a shifted entry now sits at i */
        }
        i++;
    }
    return gone;
}

static lr_status
emap_reserve(lr_index *ix, uint64_t more)
{
    uint64_t need = ix->e_count + more;
    if (need * 10 <= ix->e_size * 7)
        return LR_OK;
    uint64_t size = ix->e_size ? ix->e_size : 64;
    while (need * 10 > size * 7)
        size *= 2;
    size_t bytes;
    if (size > ((uint64_t)1 << 40) ||
        !lr__mul_size((size_t)size, sizeof(struct emap_ent), &bytes))
        return LR_ENOMEM;
    struct emap_ent *ne = lr__alloc(&ix->mem, bytes);
    if (ne == NULL)
        return LR_ENOMEM;
    for (uint64_t i = 0; i < size; i++)
        ne[i].inst = LR_NIL;
    struct emap_ent *old = ix->emap;
    uint64_t old_size = ix->e_size;
    ix->emap = ne;
    ix->e_size = size;
    ix->e_count = 0;
    for (uint64_t i = 0; i < old_size; i++)
        if (old[i].inst != LR_NIL)
            emap_put(ix, old[i].inst, old[i].ehash, old[i].node, old[i].key);
    lr__free(&ix->mem, old, (size_t)old_size * sizeof(struct emap_ent));
    return LR_OK;
}

/* precise mode                                                              */
/* ------------------------------------------------------------------------ */

lr_status
lr_index_kv_stored(lr_index *idx, uint32_t instance, const lr_kv_stored *ev,
                   uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL || ev == NULL, LR_EINVAL);
    lr_index *ix = idx;
    lr_kv_stored e;
    memset(&e, 0, sizeof e);
    LR_TRY(lr__copy_sized(&e, sizeof e, ev, LR_KV_STORED_SIZE_V1));
    LR_RETURN_IF(instance == LR_INSTANCE_NONE, LR_EINVAL);
    LR_RETURN_IF(e.block_size == 0 || e.block_size > (1u << 20), LR_EINVAL);
    LR_RETURN_IF(e.n_blocks > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(e.n_blocks != 0 &&
                     (e.block_hashes == NULL || e.token_ids == NULL),
                 LR_EINVAL);
    LR_RETURN_IF((uint64_t)e.n_blocks * e.block_size != e.n_tokens, LR_EINVAL);
    LR_RETURN_IF(e.n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(e.has_parent != 0 && e.has_parent != 1, LR_EINVAL);
    LR_RETURN_IF(e.block_size % ix->B != 0, LR_ENOTSUP);
    uint32_t s; /* after the input checks: bad input is EINVAL, not ELIMIT */
    LR_TRY(lr__index_slot_for(ix, instance, &s));
    if (e.n_blocks == 0)
        return LR_OK;

    uint32_t m = e.block_size / ix->B;
    uint64_t base_key = lr__index_tenant_root(e.tenant_salt);
    uint32_t base = LR_NIL, base_ref = LR_NIL;
    if (e.has_parent) {
        struct emap_ent *pe =
            s != LR_NIL ? emap_get(ix, s, e.parent_hash) : NULL;
        if (pe == NULL || !lr__index_emap_valid(ix, pe))
            return LR_ENOENT;
        base = pe->node;
        base_key = pe->key;
        base_ref = hold_find(ix, base, s);
    }
    uint32_t n = (uint32_t)(e.n_blocks * m);
    uint32_t eb = (uint32_t)e.n_blocks;
    if (n > ix->capacity) {
        eb = (uint32_t)(ix->capacity / m);
        n = eb * m;
        if (n == 0)
            return LR_OK;
    }
    LR_TRY(lr__index_scratch_keys(ix, n));
    LR_TRY(lr__index_scratch_anchors(ix, eb));
    lr__index_chain_keys(base_key, e.token_ids, n, ix->B, ix->kbuf);
    for (uint32_t j = 0; j < eb; j++)
        ix->abuf[j] = (j + 1) * m;

    /* Engine-map room. A hash needs a new entry unless a live one exists:
     * a stale entry (its block was evicted) may be swept below and then
     * re-inserted, so it counts as new too. */
    uint64_t fresh = 0;
    for (uint32_t j = 0; j < eb; j++) {
        const struct emap_ent *en =
            s == LR_NIL ? NULL : emap_get(ix, s, e.block_hashes[j]);
        if (en == NULL || !lr__index_emap_valid(ix, en))
            fresh++;
    }
    if (ix->e_count + fresh > ix->emap_cap) {
        uint64_t stale = 0;
        for (uint64_t i = 0; i < ix->e_size; i++)
            if (ix->emap[i].inst != LR_NIL &&
                !lr__index_emap_valid(ix, &ix->emap[i]))
                stale++;
        if (ix->e_count - stale + fresh > ix->emap_cap)
            return LR_ELIMIT;
    }

    struct learn_plan pl = {
        .s = s,
        .base = base,
        .base_ref = base_ref,
        .keys = ix->kbuf,
        .n = n,
        .anchors = ix->abuf,
        .n_anchors = eb,
        .remote = false,
    };
    ix->last_probes = 0;
    if (s != LR_NIL) {
        lr__index_plan_learn(ix, &pl);
    } else {
        pl.d_s = 0;
        pl.ref_ds = LR_NIL;
        pl.d_any =
            lr__index_deepest_present(ix, ix->kbuf, 0, n, base, &pl.node_any);
    }
    LR_TRY(lr__index_reserve(ix, n - pl.d_any, pl.d_any - pl.d_s));
    LR_TRY(emap_reserve(ix, fresh));

    /* phase 2 */
    if (ix->e_count + fresh > ix->emap_cap)
        lr__index_emap_sweep(ix, LR_NIL, true);
    uint32_t tick = lr__index_tick(ix, now_ns);
    if (s == LR_NIL)
        s = pl.s = lr__index_inst_add(ix, instance);
    lr__index_apply_learn(ix, &pl, tick);
    for (uint32_t j = 0; j < eb; j++) {
        uint32_t d = (j + 1) * m;
        uint32_t node = node_find(ix, ix->kbuf[d - 1]);
        emap_put(ix, s, e.block_hashes[j], node, ix->kbuf[d - 1]);
    }
    /* phase 3 */
    lr__index_expire_all(ix, tick);
    lr__index_evict_to_capacity(ix);
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
        struct emap_ent *e = emap_get(idx, s, block_hashes[i]);
        if (e == NULL)
            continue;
        if (lr__index_emap_valid(idx, e)) {
            uint32_t node = e->node;
            lr__index_remove_descendants(idx, s, node);
            lr__index_remove_leaf_and_trim(idx, hold_find(idx, node, s),
                                           WHY_DROP, true);
            resolved++;
        }
        /* the entry may have moved while descendants' entries stayed */
        e = emap_get(idx, s, block_hashes[i]);
        if (e != NULL)
            emap_del_at(idx, (uint64_t)(e - idx->emap));
    }
    if (n_resolved != NULL)
        *n_resolved = resolved;
    return LR_OK;
}

lr_status
lr_index_kv_cleared(lr_index *idx, uint32_t instance)
{
    LR_RETURN_IF(idx == NULL || instance == LR_INSTANCE_NONE, LR_EINVAL);
    uint32_t s = lr__index_inst_lookup(idx, instance);
    LR_RETURN_IF(s == LR_NIL, LR_ENOENT);
    lr__index_remove_all_of(idx, s);
    lr__index_emap_sweep(idx, s, false);
    return LR_OK;
}
