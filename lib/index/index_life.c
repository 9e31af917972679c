/* lr_index, the handle: options and their defaults, create and destroy,
 * the instance table (instance id -> slot), and the stats queries. The
 * tree and learn are in index.c, removal in index_evict.c. */
#include "index/index_impl.h"

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
/* Per-instance scratch arrays of a match: cand, cspan, cdepth, mark, cpos. */
#define N_SCRATCH 5u
/* Nodes the first node table holds (64 slots at most 3/4 full). */
#define NODE_TABLE_START 48

/* ------------------------------------------------------------------------ */
/* instances                                                                 */
/* ------------------------------------------------------------------------ */

/* Instance ids hash apart from node keys under the same handle seed. */
#define INST_HASH_SALT 0x1du

static inline uint64_t
inst_hash(const lr_index *ix, uint32_t id)
{
    return lr__mix64(id, ix->seed ^ INST_HASH_SALT);
}

static bool
inst_eq(const void *insts, uint64_t id, uint32_t s)
{
    return ((const struct inst *)insts)[s].id == id;
}

uint32_t
lr__index_inst_lookup(const lr_index *ix, uint32_t id)
{
    return lr__table_find(&ix->itab, inst_hash(ix, id), id, inst_eq, ix->insts);
}

/* The table was sized for max_instances at creation: no reserve. */
uint32_t
lr__index_inst_add(lr_index *ix, uint32_t id)
{
    assert(ix->n_ifree > 0);
    uint32_t s = ix->ifree[--ix->n_ifree];
    ix->insts[s].id = id;
    ix->insts[s].used = 1;
    ix->insts[s].blocks = 0;
    lr__table_insert(&ix->itab, inst_hash(ix, id), s);
    return s;
}

static void
inst_del(lr_index *ix, uint32_t s)
{
    lr__table_remove(&ix->itab, inst_hash(ix, ix->insts[s].id), s);
    ix->insts[s].used = 0;
    ix->insts[s].blocks = 0;
    ix->ifree[ix->n_ifree++] = s;
}

/* Slot for an id, or LR_NIL with *room telling whether one can be made. */
lr_status
lr__index_slot_for(lr_index *ix, uint32_t id, uint32_t *slot)
{
    LR_RETURN_IF(id == LR_INSTANCE_NONE, LR_EINVAL);
    *slot = lr__index_inst_lookup(ix, id);
    if (*slot == LR_NIL && ix->n_ifree == 0)
        return LR_ELIMIT;
    return LR_OK;
}

lr_status
lr_index_remove_instance(lr_index *idx, uint32_t instance)
{
    uint32_t s;
    LR_TRY(lr__index_clear(idx, instance, &s));
    inst_del(idx, s);
    return LR_OK;
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
    struct lr__mem *m = &ix->mem;
    lr__free(m, ix->keys, (size_t)ix->kcap * CHUNK * sizeof(uint64_t));
    lr__free(m, ix->chunks, (size_t)ix->chcap * sizeof(struct chunk));
    lr__table_free(&ix->ntab, m);
    lr__free(m, ix->runs, (size_t)ix->rpool.cap * sizeof(struct run));
    lr__free(m, ix->sp, (size_t)ix->spool.cap * sizeof(struct span));
    for (uint32_t c = 0; c < HCLASSES; c++)
        lr__free(m, ix->hc[c].v, (size_t)ix->hc[c].p.cap * hc_elem(c));
    lr__free(m, ix->insts, (size_t)ix->max_inst * sizeof(struct inst));
    lr__free(m, ix->ifree, (size_t)ix->max_inst * sizeof(uint32_t));
    lr__table_free(&ix->itab, m);
    lr__index_emap_free(ix);
    lr__free(m, ix->journal, (size_t)ix->j_cap * sizeof(struct jent));
    lr__free(m, ix->kbuf, (size_t)ix->kbuf_cap * sizeof(uint64_t));
    lr__free(m, ix->abuf, (size_t)ix->abuf_cap * sizeof(uint32_t));
    lr__free(m, ix->path, (size_t)ix->path_cap * sizeof(struct seg));
    lr__free(m, ix->cand, (size_t)ix->max_inst * N_SCRATCH * sizeof(uint32_t));
    lr__free(m, ix->hk, (size_t)ix->max_inst * sizeof(struct lr__hitkey));
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
    ix->cand = lr__calloc(&ix->mem, (size_t)ix->max_inst * N_SCRATCH,
                          sizeof(uint32_t));
    ix->hk =
        lr__calloc(&ix->mem, (size_t)ix->max_inst, sizeof(struct lr__hitkey));
    ix->journal =
        ix->j_cap ? lr__calloc(&ix->mem, ix->j_cap, sizeof(struct jent)) : NULL;
    lr_status tst = lr__table_init(&ix->ntab, &ix->mem, NODE_TABLE_START);
    if (ix->insts == NULL || ix->ifree == NULL || ist != LR_OK ||
        ix->cand == NULL || ix->hk == NULL || tst != LR_OK ||
        (ix->j_cap && ix->journal == NULL)) {
        index_free(ix);
        return LR_ENOMEM;
    }
    ix->cspan = ix->cand + ix->max_inst;
    ix->cdepth = ix->cspan + ix->max_inst;
    ix->mark = ix->cdepth + ix->max_inst;
    ix->cpos = ix->mark + ix->max_inst;
    for (uint32_t i = 0; i < ix->max_inst; i++)
        ix->ifree[i] = ix->max_inst - 1 - i;
    ix->n_ifree = ix->max_inst;
    *out = ix;
    return LR_OK;
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
