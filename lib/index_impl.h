/* Private to lib/index*.c: the layout of struct lr_index (pictured at the
 * top of index.c) and the helpers its files share.
 *
 *   index.c        the core: nodes, holds, LRU, learn, expiry, eviction,
 *                  instances, lifecycle, stats
 *   index_match.c  lr_index_match and its partition search
 *   index_kv.c     precise mode: the engine-hash map and the KV events
 *   index_delta.c  the delta wire codec and the journal reading
 *   index_check.c  verify, digest and the test probes
 *
 * lib/index.h stays the internal view for tests, fuzzers and the router;
 * nothing outside lib/index*.c includes this file. */
#ifndef LIBROUTE_LIB_INDEX_IMPL_H
#define LIBROUTE_LIB_INDEX_IMPL_H

#include "index.h"
#include "lr_hash.h"
#include "table.h"

#define HB_LISTED (1u << 31)
#define HB_REMOTE (1u << 30)
#define HB_ANCHOR (1u << 29)
#define HB_NCHILD ((1u << 29) - 1)
#define REF_X (1u << 31)
#define POOL_MAX ((uint32_t)INT32_MAX - 1) /* refs use the top bit */
#define INST_FREE 0xffffu                  /* node is free */
#define PENDING 0xfffeu                    /* node emptied, not yet freed */
#define TICK_SHIFT 24
#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ull /* 2^64 / phi, odd */

struct hold {
    uint16_t inst; /* instance slot; INST_FREE / PENDING in a node */
    uint16_t aux;  /* in a node's inline hold: holders of the node */
    uint32_t prev;
    uint32_t next;
    uint32_t bits;
    uint32_t stamp;
};

struct node {
    uint64_t key;
    uint32_t parent;
    uint32_t child;
    uint32_t sib_next;
    uint32_t sib_prev;
    uint32_t more;
    struct hold h; /* h.inst == INST_FREE: node is free */
};

struct xhold {
    struct hold h;
    uint32_t node;
    uint32_t next;
};

struct inst {
    uint32_t id;
    uint32_t used;
    uint64_t blocks;
};

struct emap_ent {
    uint64_t ehash;
    uint64_t key;
    uint32_t node;
    uint32_t inst; /* LR_NIL: empty slot */
};

struct jent {
    uint64_t key;
    uint32_t inst_id;
    uint32_t pad;
};

enum {
    LIST_LOCAL = 0,
    LIST_REMOTE = 1,
    N_LISTS = 2
};
enum {
    WHY_EVICT,
    WHY_EXPIRE,
    WHY_DROP
};

/* A pool of fixed-size elements named by 32-bit index. Freed elements
 * are chained through a uint32_t field of their own (at offset `link`)
 * and handed out again first; `top` only grows, so [0, top) is every
 * element ever used and top - nfree are live. */
struct pool {
    uint32_t cap;   /* elements allocated */
    uint32_t top;   /* elements ever handed out */
    uint32_t free;  /* first free element, LR_NIL if none */
    uint32_t nfree; /* length of the free list */
};

struct lr_index {
    struct lr__mem mem;
    uint64_t seed;
    uint64_t capacity;
    uint64_t ttl_ticks;        /* UINT64_MAX: never */
    uint64_t remote_ttl_ticks; /* of REMOTE holds; UINT64_MAX: never */
    uint64_t replica_id;       /* stamped on exported deltas */
    bool evict_lru;            /* LR_EVICT_LRU: by recency alone */
    uint64_t emap_cap;
    uint32_t B;
    uint32_t max_inst;
    uint32_t j_cap;

    struct node *nodes;
    struct pool npool; /* free nodes chain through child */
    struct xhold *xh;
    struct pool xpool;     /* free extra holds chain through next */
    struct lr__table ntab; /* node key -> node index */

    uint32_t head[N_LISTS], tail[N_LISTS];
    uint64_t holds, remote;

    struct inst *insts;
    uint32_t *ifree; /* stack of free instance slots */
    uint32_t n_ifree;
    struct lr__table itab; /* instance id -> slot, sized for max_inst */

    struct emap_ent *ep;   /* engine-hash entries, see index_kv.c */
    struct pool epool;     /* free entries chain through node */
    struct lr__table etab; /* (instance slot, engine hash) -> entry */

    struct jent *journal;
    uint64_t j_seq;

    bool has_epoch;
    uint64_t epoch_ns;
    uint32_t last_tick; /* the latest tick any call brought (delta ages) */

    uint64_t evicted, expired, learned;

    /* scratch, never part of the logical state */
    uint64_t *kbuf;
    uint32_t kbuf_cap;
    uint32_t *abuf;
    uint32_t abuf_cap;
    uint32_t *cand, *cref, *cdepth, *mark, *tref;
    uint32_t mark_gen;
    uint32_t last_probes;
};

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */
/* ------------------------------------------------------------------------ */

static inline struct hold *
H(const lr_index *ix, uint32_t ref)
{
    return (ref & REF_X) ? &ix->xh[ref & ~REF_X].h : &ix->nodes[ref].h;
}

static inline uint32_t
ref_node(const lr_index *ix, uint32_t ref)
{
    return (ref & REF_X) ? ix->xh[ref & ~REF_X].node : ref;
}

static inline int
list_of(const struct hold *h)
{
    return (h->bits & HB_REMOTE) ? LIST_REMOTE : LIST_LOCAL;
}

static inline uint32_t
nchild(const struct hold *h)
{
    return h->bits & HB_NCHILD;
}

static inline uint32_t
hold_find(const lr_index *ix, uint32_t n, uint32_t s)
{
    const struct node *nd = &ix->nodes[n];
    if (nd->h.inst == s)
        return n;
    for (uint32_t x = nd->more; x != LR_NIL; x = ix->xh[x].next)
        if (ix->xh[x].h.inst == s)
            return x | REF_X;
    return LR_NIL;
}

/* The hold of the instance of hold `ref` (on node n) on n's parent p, or
 * LR_NIL. The same as hold_find(ix, p, inst), faster where it matters: a
 * learn takes one instance's extra holds along a chain one after another
 * from the pool, so the parent's is usually the neighbouring element (the
 * walk up an eviction or an upgrade would otherwise chase a node's holder
 * list, one miss per holder, at every level). */
static inline uint32_t
parent_hold(const lr_index *ix, uint32_t ref, uint32_t p, uint32_t inst)
{
    if (ix->nodes[p].h.inst == inst)
        return p;
    if (ref & REF_X) {
        uint32_t x = ref & ~REF_X;
        if (x > 0 && ix->xh[x - 1].node == p && ix->xh[x - 1].h.inst == inst)
            return (x - 1) | REF_X;
        if (x + 1 < ix->xpool.top && ix->xh[x + 1].node == p &&
            ix->xh[x + 1].h.inst == inst)
            return (x + 1) | REF_X;
    }
    return hold_find(ix, p, inst);
}

/* ---- pools (room reserved by lr__index_pool_reserve) --------------------- */

static inline uint32_t *
pool_link(void *arr, size_t elem, size_t link, uint32_t i)
{
    return (uint32_t *)(void *)((char *)arr + (size_t)i * elem + link);
}

static inline uint32_t
pool_take(struct pool *p, void *arr, size_t elem, size_t link)
{
    if (p->free == LR_NIL) {
        assert(p->top < p->cap);
        return p->top++;
    }
    uint32_t i = p->free;
    p->free = *pool_link(arr, elem, link, i);
    p->nfree--;
    return i;
}

static inline void
pool_give(struct pool *p, void *arr, size_t elem, size_t link, uint32_t i)
{
    *pool_link(arr, elem, link, i) = p->free;
    p->free = i;
    p->nfree++;
}

static inline uint32_t
pool_live(const struct pool *p)
{
    return p->top - p->nfree;
}

/* ------------------------------------------------------------------------ */
/* node hash table                                                           */
/* ------------------------------------------------------------------------ */

static inline uint64_t
hkey(const lr_index *ix, uint64_t key)
{
    return lr__mix64(key, ix->seed);
}

static inline bool
node_eq(const void *nodes, uint64_t key, uint32_t n)
{
    return ((const struct node *)nodes)[n].key == key;
}

static inline uint32_t
node_find(const lr_index *ix, uint64_t key)
{
    return lr__table_find(&ix->ntab, hkey(ix, key), key, node_eq, ix->nodes);
}

/* Warm the slot a lookup or an insert of `key` starts at. A real load,
 * not __builtin_prefetch: on the virtual machines measured here a
 * prefetch that misses the TLB is dropped and gained nothing, while an
 * independent load overlaps its miss with the caller's work. */
static inline void
prefetch_key(const lr_index *ix, uint64_t key)
{
    lr__sink(lr__table_peek(&ix->ntab, hkey(ix, key)));
}

/* A binary search step at mid over [lo, hi] is followed by a probe in
 * [mid, hi] or in [lo, mid - 1]: warm both slots while this probe misses. */
static inline void
prefetch_step(const lr_index *ix, const uint64_t *keys, uint32_t lo,
              uint32_t hi, uint32_t mid)
{
    uint32_t up = mid + (hi - mid + 1) / 2;
    uint32_t dn = lo + (mid - lo) / 2;
    if (up > mid && up <= hi)
        prefetch_key(ix, keys[up - 1]);
    if (dn > lo)
        prefetch_key(ix, keys[dn - 1]);
}

struct learn_plan {
    uint32_t s;        /* instance slot; LR_NIL: a new instance */
    uint32_t id;       /* instance id (a slot is added for it if new) */
    uint32_t base;     /* node the keys hang from, LR_NIL for the root */
    uint32_t base_ref; /* s's hold on base */
    const uint64_t *keys;
    uint32_t n;              /* keys to hold */
    const uint32_t *anchors; /* ascending depths in 1..n */
    uint32_t n_anchors;
    bool remote;
    /* filled by lr__index_plan_learn */
    uint32_t d_s, d_any, ref_ds, node_any;
};

/* ---- shared by the index files (defined in index.c unless noted) ------ */

/* Host time -> ticks of 2^TICK_SHIFT ns since the first time seen. */
uint32_t lr__index_tick(lr_index *ix, uint64_t now);

/* key[-1] of a tenant and the chained block keys (see lr_block_keys()). */
uint64_t lr__index_tenant_root(uint64_t salt);
void lr__index_chain_keys(uint64_t prev, const uint32_t *tok, size_t nblocks,
                          uint32_t B, uint64_t *out);

/* Phase 1: room for `nn` more nodes and `nx` more extra holds, and the
 * scratch arrays. LR_ENOMEM changes nothing logical. */
lr_status lr__index_reserve(lr_index *ix, uint64_t nn, uint64_t nx);
lr_status lr__index_scratch_keys(lr_index *ix, size_t n);
lr_status lr__index_scratch_anchors(lr_index *ix, size_t n);

/* Instances: slot of an id or LR_NIL; add one (a free slot must exist);
 * slot_for is lookup plus "is there room" (LR_EINVAL, LR_ELIMIT). */
uint32_t lr__index_inst_lookup(const lr_index *ix, uint32_t id);
uint32_t lr__index_inst_add(lr_index *ix, uint32_t id);
lr_status lr__index_slot_for(lr_index *ix, uint32_t id, uint32_t *slot);

/* Phase 2 (cannot fail; memory was reserved). */
uint32_t lr__index_hold_new(lr_index *ix, uint32_t n, uint32_t s, uint32_t bits,
                            uint32_t tick);
uint32_t lr__index_node_new(lr_index *ix, uint64_t key, uint32_t parent);
void lr__index_touch(lr_index *ix, uint32_t ref, uint32_t tick);
/* Give a hold the recency `stamp` (never older than it had) and list it
 * where that stamp belongs: an imported route keeps the age its exporter
 * gave it. */
void lr__index_touch_at(lr_index *ix, uint32_t ref, uint32_t stamp);

/* Check a prompt and point *keys at its block keys (the host's, or
 * computed into ix->kbuf); *n_keys of them. LR_EINVAL, LR_EVERSION,
 * LR_ENOMEM (the scratch array; not state). */
lr_status lr__index_prompt_keys(lr_index *ix, const lr_prompt *in, lr_prompt *p,
                                const uint64_t **keys, uint32_t *n_keys);

/* Binary search over a prompt's keys for the deepest depth in [lo, hi]
 * present at all (s == LR_NIL) or held by instance slot s; see index.c. */
uint32_t lr__index_deepest(lr_index *ix, uint32_t s, const uint64_t *keys,
                           uint32_t lo, uint32_t hi, uint32_t lo_ref,
                           uint32_t *ref_out);

/* A learn in three phases (every mutator that adds holds runs them):
 * plan_learn finds where the instance's holds and anybody's end and
 * reserves the memory (the only step that can fail; LR_ENOMEM changes
 * nothing logical); apply_learn adds the instance if new and the holds,
 * anchors at p->anchors, and returns the deepest hold's ref (LR_NIL when
 * n is 0); settle expires and evicts back under capacity. */
lr_status lr__index_plan_learn(lr_index *ix, struct learn_plan *p);
uint32_t lr__index_apply_learn(lr_index *ix, struct learn_plan *p,
                               uint32_t tick);
void lr__index_settle(lr_index *ix, uint32_t tick);
/* Drop every route unused for ttl_ns (the expiry half of settle). */
void lr__index_expire_all(lr_index *ix, uint32_t tick);

/* Removal; each preserves invariants 1-3. */
void lr__index_remove_leaf_and_trim(lr_index *ix, uint32_t ref, int why,
                                    bool precise);
void lr__index_remove_descendants(lr_index *ix, uint32_t s, uint32_t root);
/* Drop every route and engine hash of instance id `instance`; *slot is
 * its slot, which stays in use. LR_EINVAL, LR_ENOENT (never seen). */
lr_status lr__index_clear(lr_index *idx, uint32_t instance, uint32_t *slot);

/* Grow array *arr of *cap elements to hold `need` (1.5x, at most limit),
 * zeroing the new part. LR_ENOMEM leaves it as it was. */
lr_status lr__index_grow(struct lr__mem *m, void **arr, uint32_t *cap,
                         uint32_t need, size_t elem, uint32_t limit);

/* Room in pool p (array *arr) for `more` elements beyond the live ones.
 * LR_ENOMEM leaves both as they were. */
lr_status lr__index_pool_reserve(struct lr__mem *m, struct pool *p, void **arr,
                                 size_t elem, uint64_t more, uint32_t limit);

/* index_kv.c, the engine-hash map: live entries (a walk); drop every
 * entry of instance slot s; free it all; an order-independent checksum of
 * the live entries; its invariants (LR_OK or LR_ECORRUPT). */
uint64_t lr__index_emap_live(const lr_index *ix);
void lr__index_emap_drop(lr_index *ix, uint32_t s);
void lr__index_emap_free(lr_index *ix);
uint64_t lr__index_emap_digest(const lr_index *ix);
lr_status lr__index_emap_verify(const lr_index *ix);
/* ... and for snapshots (index_state.c): visit every live entry (instance
 * slot, engine hash, key of its block); room for `more` entries; set one
 * (room reserved). */
void lr__index_emap_each(const lr_index *ix,
                         void (*fn)(void *ctx, uint32_t s, uint64_t ehash,
                                    uint64_t key),
                         void *ctx);
lr_status lr__index_emap_reserve(lr_index *ix, uint32_t more);
void lr__index_emap_put(lr_index *ix, uint32_t s, uint64_t ehash, uint32_t node,
                        uint64_t key);

#endif /* LIBROUTE_LIB_INDEX_IMPL_H */
