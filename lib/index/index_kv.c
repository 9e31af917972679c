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
 * anchor); removing h1 drops all four. */
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
        /* the removal forgets this hash with its block, and the hashes
         * of every deeper block it takes */
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
