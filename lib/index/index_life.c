/* lr_index, the handle: options and their defaults, create and destroy,
 * removing an instance, and the stats queries. It puts the layers
 * together (index.h lists them): the store's arrays, the engine-hash map,
 * the journal and the match's scratch are made here and freed here. */
#include "index/index.h"
#include "index/index_emap.h"
#include "index/index_evict.h"
#include "index/index_learn.h"
#include "index/index_store.h"

/* Defaults of lr_index_options (documented in lr_index.h). */
#define DEFAULT_CAPACITY (1u << 20)
#define DEFAULT_TTL_NS (3600ull * 1000000000ull)
#define DEFAULT_BLOCK_TOKENS 16u
#define DEFAULT_MAX_INSTANCES 1024u
#define DEFAULT_JOURNAL 4096u
#define DEFAULT_CLOCK_SKEW_NS 60000000000ull /* as the router's */
#define EMAP_PER_BLOCK 2u /* engine_map_capacity per capacity block */
#define MAX_JOURNAL (1u << 24)
/* The caller's seed is mixed with "lrindex" before keying the tables. */
#define SEED_MIX 0x6c72696e646578ull
/* Nodes the first node table holds (64 slots at most 3/4 full). */
#define NODE_TABLE_START 48

/* Each lower tier forgets the instance too; LR_ENOENT when no tier knew
 * it. */
lr_status
lr_index_remove_instance(lr_index *idx, uint32_t instance)
{
    LR_RETURN_IF(idx == NULL || instance == LR_INSTANCE_NONE, LR_EINVAL);
    bool known = false;
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (idx->lower[t] != NULL)
            known |= lr_index_remove_instance(idx->lower[t], instance) == LR_OK;
    uint32_t s;
    lr_status st = lr__index_clear(idx, instance, &s);
    if (st == LR_OK)
        lr__index_inst_del(idx, s);
    return st == LR_ENOENT && known ? LR_OK : st;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

LR__INIT_SIZED(lr_index_options_init_sized, lr_index_options, options_defaults,
               .capacity_blocks = DEFAULT_CAPACITY, .ttl_ns = DEFAULT_TTL_NS,
               .block_tokens = DEFAULT_BLOCK_TOKENS,
               .max_instances = DEFAULT_MAX_INSTANCES,
               .journal_capacity = DEFAULT_JOURNAL,
               .clock_skew_ns = DEFAULT_CLOCK_SKEW_NS)

/* The options whose 0 keeps the default; the others are the caller's as
 * given. */
#define ZERO_KEEPS_DEFAULT(X) \
    X(capacity_blocks)        \
    X(ttl_ns)                 \
    X(block_tokens)           \
    X(max_instances)          \
    X(journal_capacity)       \
    X(clock_skew_ns)

static void
index_free(lr_index *ix)
{
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (ix->lower[t] != NULL)
            index_free(ix->lower[t]);
    lr__index_store_free(ix);
    lr__index_emap_free(ix);
    lr__free(&ix->mem, ix->journal, (size_t)ix->j_cap * sizeof(struct jent));
    LR__HANDLE_FREE(ix, lr_index);
}

/* The caller's options over the defaults (zero means default), checked. */
static lr_status
resolve_options(const lr_index_options *opt, lr_index_options *o)
{
    lr_index_options_init(o);
    if (opt != NULL) {
        memset(o, 0, sizeof *o);
        LR_TRY(lr__copy_sized(o, sizeof *o, opt, LR_INDEX_OPTIONS_SIZE_V1));
#define KEEP(f) LR__ZERO_KEEPS_DEFAULT(o, &options_defaults, f)
        ZERO_KEEPS_DEFAULT(KEEP);
#undef KEEP
    }
    /* 0, as lr_index_options_init() leaves it: follows capacity_blocks */
    if (o->engine_map_capacity == 0)
        o->engine_map_capacity = EMAP_PER_BLOCK * o->capacity_blocks;
    LR_RETURN_IF(o->eviction != LR_EVICT_REMOTE_FIRST &&
                     o->eviction != LR_EVICT_LRU,
                 LR_EINVAL);
    LR_RETURN_IF(o->capacity_blocks > LR_INDEX_MAX_CAPACITY, LR_EINVAL);
    LR_RETURN_IF(o->block_tokens > LR_INDEX_MAX_BLOCK_TOKENS, LR_EINVAL);
    LR_RETURN_IF(o->max_instances > LR_INDEX_MAX_INSTANCES, LR_EINVAL);
    LR_RETURN_IF(o->journal_capacity != UINT32_MAX &&
                     o->journal_capacity > MAX_JOURNAL,
                 LR_EINVAL);
    LR_RETURN_IF(o->engine_map_capacity >
                     EMAP_PER_BLOCK * LR_INDEX_MAX_CAPACITY,
                 LR_EINVAL);
    return LR_OK;
}

lr_status
lr_index_create(const lr_index_options *opt, lr_index **out)
{
    lr_index_options o;
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    LR_TRY(resolve_options(opt, &o));
    lr_index *ix;
    LR_TRY(LR__HANDLE_NEW(ix, lr_index, o.allocator));
    ix->seed = lr__mix64(lr__hash_seed(o.seed, ix), SEED_MIX);
    ix->capacity = o.capacity_blocks;
    ix->ttl_ticks =
        o.ttl_ns == UINT64_MAX ? UINT64_MAX : o.ttl_ns >> TICK_SHIFT;
    uint64_t rttl = o.remote_ttl_ns ? o.remote_ttl_ns : o.ttl_ns;
    ix->remote_ttl_ticks = rttl == UINT64_MAX ? UINT64_MAX : rttl >> TICK_SHIFT;
    ix->replica_id = o.replica_id;
    ix->clock.skew_ns = o.clock_skew_ns;
    ix->evict_lru = o.eviction == LR_EVICT_LRU;
    ix->emap_cap = o.engine_map_capacity;
    ix->B = o.block_tokens;
    ix->max_inst = o.max_instances;
    ix->j_cap = o.journal_capacity == UINT32_MAX ? 0 : o.journal_capacity;
    ix->cpool.free = ix->rpool.free = ix->spool.free = ix->epool.free = LR_NIL;
    for (uint32_t c = 0; c < HCLASSES; c++)
        ix->hc[c].p.free = LR_NIL;
    lr__table_init(&ix->etab, &ix->mem, 0); /* no memory: cannot fail */
    lr__table_init(&ix->otab, &ix->mem, 0);
    ix->head[0] = ix->head[1] = ix->tail[0] = ix->tail[1] = LR_NIL;

    /* index_free() can release a partial construction: the sizes it reads
     * are set above, and a table not yet inited is zero-filled. */
    ix->insts = lr__calloc(&ix->mem, ix->max_inst, sizeof(struct inst));
    ix->ifree = lr__calloc(&ix->mem, ix->max_inst, sizeof(uint32_t));
    lr_status ist = lr__table_init(&ix->itab, &ix->mem, ix->max_inst);
    lr_status mst = lr__index_ms_init(&ix->mem, &ix->ms, ix->max_inst);
    ix->journal =
        ix->j_cap ? lr__calloc(&ix->mem, ix->j_cap, sizeof(struct jent)) : NULL;
    lr_status tst = lr__table_init(&ix->ntab, &ix->mem, NODE_TABLE_START);
    if (ix->insts == NULL || ix->ifree == NULL || ist != LR_OK ||
        mst != LR_OK || tst != LR_OK || (ix->j_cap && ix->journal == NULL)) {
        index_free(ix);
        return LR_ENOMEM;
    }
    for (uint32_t i = 0; i < ix->max_inst; i++)
        ix->ifree[i] = ix->max_inst - 1 - i;
    ix->n_ifree = ix->max_inst;
    *out = ix;
    return LR_OK;
}

/* A lower tier's index (index_kv.c): idx's block size, capacity, TTL,
 * instances and engine-map bound, its allocator, a seed drawn from its
 * own; no journal (a tier's routes are not exported), recency alone for
 * eviction (every route is LOCAL), and no clock of its own (idx judges
 * every timestamp first). Its time base is set at now_ns. */
lr_status
lr__index_lower_new(const lr_index *idx, uint64_t now_ns, lr_index **out)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.allocator = &idx->mem.a;
    o.seed = lr__mix64(idx->seed, SEED_MIX + 1);
    o.capacity_blocks = idx->capacity;
    o.ttl_ns = idx->ttl_ticks == UINT64_MAX ? UINT64_MAX
                                            : idx->ttl_ticks << TICK_SHIFT;
    if (o.ttl_ns == 0)
        o.ttl_ns = 1; /* 0 is "the default" to the options */
    o.block_tokens = idx->B;
    o.max_instances = idx->max_inst;
    o.journal_capacity = UINT32_MAX;
    o.engine_map_capacity = idx->emap_cap;
    o.eviction = LR_EVICT_LRU;
    o.clock_skew_ns = UINT64_MAX;
    lr_index *lo;
    LR_TRY(lr_index_create(&o, &lo));
    (void)lr__index_tick(lo, now_ns); /* the time base: expiry not due */
    *out = lo;
    return LR_OK;
}

const lr_index *
lr__index_tier(const lr_index *idx, int32_t tier)
{
    if (idx == NULL || tier < LR_TIER_CPU || tier > LR_TIER_DISK)
        return NULL;
    return idx->lower[tier - 1];
}

void
lr_index_destroy(lr_index *idx)
{
    if (idx != NULL)
        index_free(idx);
}

struct lr__mem *
lr__index_mem(lr_index *idx)
{
    return &idx->mem;
}

uint32_t
lr_index_block_tokens(const lr_index *idx)
{
    return idx == NULL ? 0 : idx->B;
}

LR__INIT_SIZED_ZERO(lr_prompt_init_sized, lr_prompt)

/* ------------------------------------------------------------------------ */
/* queries                                                                   */
/* ------------------------------------------------------------------------ */

lr_status
lr_index_get_stats(const lr_index *idx, lr_index_stats *stats)
{
    LR_TRY(lr__out_check(idx, stats, LR_INDEX_STATS_SIZE_V1));
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.blocks = idx->holds;
    st.remote_blocks = idx->remote;
    st.prefixes = idx->nodes;
    st.instances = idx->max_inst - idx->n_ifree;
    st.engine_hashes = lr__index_emap_live(idx);
    st.bytes = idx->mem.live;
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (idx->lower[t] != NULL)
            st.bytes += idx->lower[t]->mem.live;
    st.evicted_blocks = idx->evicted;
    st.expired_blocks = idx->expired;
    st.learned_blocks = idx->learned;
    size_t n = stats->struct_size < sizeof st ? stats->struct_size : sizeof st;
    size_t keep = stats->struct_size;
    memcpy(stats, &st, n);
    stats->struct_size = keep;
    return LR_OK;
}

lr_status
lr_index_instance_blocks(const lr_index *idx, uint32_t instance, uint64_t *out)
{
    LR_RETURN_IF(idx == NULL || out == NULL, LR_EINVAL);
    LR_RETURN_IF(instance == LR_INSTANCE_NONE, LR_EINVAL);
    uint32_t s = lr__index_inst_lookup(idx, instance);
    LR_RETURN_IF(s == LR_NIL, LR_ENOENT);
    *out = idx->insts[s].blocks;
    return LR_OK;
}
