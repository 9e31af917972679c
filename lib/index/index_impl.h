/* Private to lib/index*.c: the layout of struct lr_index (pictured at the
 * top of index.c) and the helpers its files share.
 *
 *   index.c        the core: block keys, reservation, runs, spans, LRU,
 *                  learn
 *   index_evict.c  removal: trim, expiry, eviction, dropping an instance
 *   index_life.c   the handle: options, create, destroy, the instance
 *                  table, stats
 *   index_match.c  lr_index_match: the search and the walk up the path
 *   index_kv.c     precise mode: the engine-hash map and the KV events
 *   index_delta.c  the delta wire codec and the journal reading
 *   index_state.c  the whole index as routes, for snapshots
 *   index_check.c  verify, digest and the test probes
 *
 * lib/index/index.h stays the internal view for tests, fuzzers and the router;
 * nothing outside lib/index*.c includes this file. */
#ifndef LIBROUTE_LIB_INDEX_IMPL_H
#define LIBROUTE_LIB_INDEX_IMPL_H

#include "common/lr_hash.h"
#include "common/table.h"
#include "index/index.h"

/* span.bits: the bottom block's flags and its child count */
#define HB_LISTED (1u << 31)
#define HB_REMOTE (1u << 30)
#define HB_ANCHOR (1u << 29)
#define HB_NCHILD ((1u << 29) - 1)
#define POOL_MAX ((uint32_t)INT32_MAX - 1) /* pool indices stay below */
#define INST_FREE 0xffffu                  /* span is free */
#define TICK_SHIFT 24
#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ull /* 2^64 / phi, odd */

/* Node slots come in chunks of CHUNK: slot n is keys[n], in chunk n /
 * CHUNK, at offset chunks[n / CHUNK].base + n % CHUNK of its run. */
#define CHUNK_SHIFT 4u
#define CHUNK (1u << CHUNK_SHIFT)
#define CHUNK_MASK (CHUNK - 1u)

/* Holder arrays come in classes of 1, 2, 4, ... 65536 entries. */
#define HCLASSES 17u

enum {
    RUN_FREE = 0,
    RUN_LIVE = 1,
    RUN_PENDING = 2 /* emptied by remove_all_of, freed at its end */
};

/* CHUNK consecutive node slots of one run. */
struct chunk {
    uint32_t run;  /* LR_NIL: the chunk is free */
    uint32_t base; /* offset in the run of the chunk's first slot */
    uint32_t next; /* the run's next chunk; the free list's link */
    uint32_t prev;
    uint32_t stale; /* bit i: slot i's node is gone but its table entry
                       stays, under its key ^ DEAD_KEY (see run_push) */
};

/* A gone node's key is flipped with this, so no lookup finds it, while
 * its table entry can still be found and deleted when the slot is used
 * again. */
#define DEAD_KEY 0xdeadbeefdeadbeefull

/* The node table holds a node when it starts its run or when its depth
 * is a multiple of TAB_STRIDE: a search finds the deepest such node by
 * key and walks the last blocks along the runs (lr__index_deepest). A
 * new block then costs a table insert (a random line, and another for
 * the stale entry its slot gives up) once in TAB_STRIDE blocks, not on
 * every block. */
#define TAB_STRIDE 16u

static inline bool
node_tabled(uint32_t off, uint32_t depth)
{
    return off == 0 || depth % TAB_STRIDE == 0;
}

/* A run: a chain of nodes, each the only in-run child of the one
 * before. Other chains may hang from any of its nodes (child runs). A run
 * never splits and never merges; it grows at its end and shrinks from it.
 * Its nodes exist exactly while someone holds them: len is the largest
 * `to` of its holders. */
struct run {
    uint32_t first, last; /* chunks, LR_NIL while len is 0 */
    uint32_t len;         /* nodes */
    uint32_t top;         /* depth of the node it hangs from (0: root) */
    uint32_t hang;        /* slot of that node, LR_NIL for the root */
    uint32_t prun, poff;  /* its run and offset, LR_NIL for the root */
    uint32_t child;       /* first child run (children of the root are not
                             linked: nothing enumerates them) */
    uint32_t sib, sib_prev;
    uint32_t hidx; /* holders: element hidx of holder class hcls; the free
                      list's link while the run is free */
    uint16_t nh;   /* holders */
    uint8_t hcls;
    uint8_t state; /* RUN_* */
};

/* One holder of a run: instance s holds the run's offsets [0, to). */
struct hent {
    uint16_t inst;
    uint16_t pad;
    uint32_t to;
    uint32_t span; /* its deepest span in the run */
};

/* A span: instance `inst` holds offsets [from, to) of run `run` with
 * the same state on every block but the last (the bottom). Every block
 * above the bottom is plain: not an anchor, not listed, its only child
 * held by inst is the next block of the run, the same trust as the
 * bottom, and recency stamp_top (never newer than the bottom's stamp).
 * The bottom carries `bits` (listed, remote, anchor, children held by
 * inst) and `stamp`. Spans of one (run, instance) tile [0, to) and are
 * chained upward through `up`. An LRU list links spans; their bottoms are
 * what it orders. One exception to "plain": with SF_ANCHORS every block of
 * the span is an anchor (precise mode, where each engine block end is one:
 * one span per KV event, not one per block). */
#define SF_ANCHORS 1u

struct span {
    uint32_t run;
    uint16_t inst;  /* instance slot; INST_FREE: free span */
    uint16_t flags; /* SF_* */
    uint32_t bits;
    uint32_t from, to;
    uint32_t stamp;      /* the bottom block's last use */
    uint32_t stamp_top;  /* every other block's */
    uint32_t prev, next; /* LRU list of its trust class; next is the free
                            list's link while free */
    uint32_t up;         /* span above in the same run and instance */
};

struct inst {
    uint32_t id;
    uint32_t used;
    uint64_t blocks;
};

/* An overflow entry of the engine-hash map (index_kv.c). */
struct emap_ent {
    uint64_t ehash;
    uint32_t node; /* its block's slot; the free list's link while free */
    uint16_t inst; /* EINST_NONE: free */
    uint16_t pad;
};
#define EINST_NONE 0xffffu

struct jent {
    uint64_t key;
    uint32_t inst_id;
    uint32_t node; /* key's node then; the key tells whether it still is */
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

struct hclass {
    struct hent *v; /* element i is v[i << class .. (i + 1) << class) */
    struct pool p;  /* free elements chain through their first span */
};

/* A match's sort key (depth, then id) and the instance slot it is for. */
struct lr__hitkey {
    uint64_t key;
    uint32_t slot;
    uint32_t pad;
};

/* One stretch of a path inside a run: offsets [lo, hi]. */
struct seg {
    uint32_t run, lo, hi;
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

    uint64_t *keys; /* CHUNK per chunk, kcap chunks */
    uint32_t kcap;
    struct chunk *chunks; /* free chunks chain through next; chcap of them */
    uint32_t chcap;
    struct pool cpool;
    struct lr__table ntab; /* block key -> node slot */
    struct run *runs;      /* free runs chain through hidx */
    struct pool rpool;
    struct span *sp; /* free spans chain through next */
    struct pool spool;
    struct hclass hc[HCLASSES];

    uint32_t head[N_LISTS], tail[N_LISTS];
    uint64_t holds, remote, nodes;
    uint64_t stale; /* table entries of gone nodes */

    struct inst *insts;
    uint32_t *ifree; /* stack of free instance slots */
    uint32_t n_ifree;
    struct lr__table itab; /* instance id -> slot, sized for max_inst */

    /* the engine-hash map, see index_kv.c */
    uint64_t *ehash; /* per node slot, NULL before precise mode */
    uint16_t *einst; /* per node slot, EINST_NONE: no entry */
    uint16_t *eovf;  /* per chunk, a bit a slot: overflow entries */
    uint32_t ecap;   /* chunks all three slot arrays cover */
    uint32_t ecap_h, ecap_i, ecap_o; /* chunks each one covers */
    struct emap_ent *ep;             /* overflow entries */
    struct pool epool;               /* free entries chain through node */
    struct lr__table etab;           /* (instance slot, engine hash) -> entry */
    struct lr__table otab; /* (instance slot, node slot) -> overflow */
    uint64_t emap_live;    /* entries */

    struct jent *journal;
    uint64_t j_seq;

    struct lr__clock clock; /* judges every now_ns (lr__index_judge) */
    bool has_epoch;
    uint64_t epoch_ns;
    uint32_t last_tick; /* the latest tick any call brought (delta ages) */

    uint64_t evicted, expired, learned;

    /* scratch, never part of the logical state */
    uint64_t *kbuf;
    uint32_t kbuf_cap;
    uint32_t *abuf;
    uint32_t abuf_cap;
    struct seg *path;
    uint32_t path_cap;
    uint32_t *cand, *cspan, *cdepth, *mark, *cpos;
    struct lr__hitkey *hk; /* max_inst: a match's sort */
    uint32_t mark_gen;
    uint32_t last_probes;
};

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */
/* ------------------------------------------------------------------------ */

/* qsort's ascending order of uint32_t ids (the delta codec, the state). */
static inline int
lr__index_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static inline int
list_of(const struct span *x)
{
    return (x->bits & HB_REMOTE) ? LIST_REMOTE : LIST_LOCAL;
}

static inline uint32_t
nchild(const struct span *x)
{
    return x->bits & HB_NCHILD;
}

static inline uint32_t
span_len(const struct span *x)
{
    return x->to - x->from;
}

/* The bits of a block of span x above its bottom. */
static inline uint32_t
plain_bits(const struct span *x)
{
    return (x->bits & HB_REMOTE) | ((x->flags & SF_ANCHORS) ? HB_ANCHOR : 0) |
           1u;
}

static inline uint32_t
node_run(const lr_index *ix, uint32_t n)
{
    return ix->chunks[n >> CHUNK_SHIFT].run;
}

static inline uint32_t
node_off(const lr_index *ix, uint32_t n)
{
    return ix->chunks[n >> CHUNK_SHIFT].base + (n & CHUNK_MASK);
}

/* Depth of node n: blocks from the root down to it, itself included. */
static inline uint32_t
node_depth(const lr_index *ix, uint32_t n)
{
    return ix->runs[node_run(ix, n)].top + node_off(ix, n) + 1;
}

/* Whether slot n (remembered earlier: its node may be gone and the slot
 * used again) holds a live node under `key`. */
static inline bool
lr__index_node_live(const lr_index *ix, uint32_t n, uint64_t key)
{
    if (n == LR_NIL || (n >> CHUNK_SHIFT) >= ix->cpool.top)
        return false;
    const struct chunk *c = &ix->chunks[n >> CHUNK_SHIFT];
    return c->run != LR_NIL &&
           c->base + (n & CHUNK_MASK) < ix->runs[c->run].len &&
           ix->keys[n] == key;
}

/* The node after n in its run, or LR_NIL at the run's end. */
static inline uint32_t
node_next(const lr_index *ix, uint32_t n)
{
    const struct chunk *c = &ix->chunks[n >> CHUNK_SHIFT];
    if (c->base + (n & CHUNK_MASK) + 1 >= ix->runs[c->run].len)
        return LR_NIL;
    if ((n & CHUNK_MASK) != CHUNK_MASK)
        return n + 1;
    return c->next << CHUNK_SHIFT;
}

static inline struct hent *
run_hents(const lr_index *ix, const struct run *r)
{
    return ix->hc[r->hcls].v + ((size_t)r->hidx << r->hcls);
}

/* Instance s's entry in run r, or NULL. */
static inline struct hent *
hent_of(const lr_index *ix, uint32_t r, uint32_t s)
{
    const struct run *R = &ix->runs[r];
    struct hent *h = run_hents(ix, R);
    for (uint32_t i = 0; i < R->nh; i++)
        if (h[i].inst == s)
            return &h[i];
    return NULL;
}

/* s's span covering offset p of its run, given s's entry there (p < to). */
static inline uint32_t
span_at(const lr_index *ix, const struct hent *h, uint32_t p)
{
    uint32_t x = h->span;
    while (ix->sp[x].from > p)
        x = ix->sp[x].up;
    return x;
}

/* The span of s holding offset p of run r, or LR_NIL when s does not. */
static inline uint32_t
hold_span(const lr_index *ix, uint32_t r, uint32_t p, uint32_t s)
{
    const struct hent *h = hent_of(ix, r, s);
    return h != NULL && h->to > p ? span_at(ix, h, p) : LR_NIL;
}

/* Whether instance s holds node n. */
static inline bool
holds_node(const lr_index *ix, uint32_t n, uint32_t s)
{
    return hold_span(ix, node_run(ix, n), node_off(ix, n), s) != LR_NIL;
}

/* Elements of holder class c, in bytes. */
static inline size_t
hc_elem(uint32_t c)
{
    return sizeof(struct hent) << c;
}

/* The span whose bottom is the block above span x's top, or LR_NIL. */
static inline uint32_t
span_parent(const lr_index *ix, uint32_t x)
{
    const struct span *S = &ix->sp[x];
    if (S->from > 0)
        return S->up;
    const struct run *R = &ix->runs[S->run];
    if (R->prun == LR_NIL)
        return LR_NIL;
    uint32_t p = hold_span(ix, R->prun, R->poff, S->inst);
    assert(p != LR_NIL && ix->sp[p].to == R->poff + 1);
    return p;
}

/* Take span x out of its LRU list. */
static inline void
lru_unlink(lr_index *ix, uint32_t x)
{
    struct span *h = &ix->sp[x];
    int l = list_of(h);
    if (h->prev != LR_NIL)
        ix->sp[h->prev].next = h->next;
    else
        ix->head[l] = h->next;
    if (h->next != LR_NIL)
        ix->sp[h->next].prev = h->prev;
    else
        ix->tail[l] = h->prev;
    h->prev = h->next = LR_NIL;
    h->bits &= ~HB_LISTED;
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

/* Whether pool p can hand out `more` elements without growing. */
static inline bool
pool_has(const struct pool *p, uint64_t more)
{
    return (uint64_t)p->cap - p->top + p->nfree >= more;
}

/* Where a free span keeps its pool link. */
#define SPAN_LINK offsetof(struct span, next)

/* ------------------------------------------------------------------------ */
/* node hash table                                                           */
/* ------------------------------------------------------------------------ */

static inline uint64_t
hkey(const lr_index *ix, uint64_t key)
{
    return lr__mix64(key, ix->seed);
}

static inline bool
node_eq(const void *keys, uint64_t key, uint32_t n)
{
    return ((const uint64_t *)keys)[n] == key;
}

static inline uint32_t
node_find(const lr_index *ix, uint64_t key)
{
    return lr__table_find(&ix->ntab, hkey(ix, key), key, node_eq, ix->keys);
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

struct learn_plan {
    uint32_t s;    /* instance slot; LR_NIL: a new instance */
    uint32_t id;   /* instance id (a slot is added for it if new) */
    uint32_t base; /* node the keys hang from, LR_NIL for the root (s
                      holds it) */
    const uint64_t *keys;
    uint32_t n;              /* keys to hold */
    const uint32_t *anchors; /* ascending depths in 1..n */
    uint32_t n_anchors;
    bool remote;
    bool all_anchors; /* every block is an anchor (anchors unused) */
    /* filled by lr__index_plan_learn */
    uint32_t d_s, d_any;     /* depths below base held by s, by anyone */
    uint32_t node_any;       /* node at d_any (base when 0) */
    uint32_t ds_run, ds_pos; /* s's block at d_s (on base when 0), or
                                LR_NIL when s holds nothing there */
    uint32_t nseg;           /* ix->path[0, nseg): the stretches of the
                                path below d_s to d_any, deepest first */
    /* filled by lr__index_apply_learn */
    uint32_t node_n; /* node at depth n (base when n is 0) */
};

/* ---- shared by the index files (defined in index.c unless noted) ------ */

/* Host time -> ticks of 2^TICK_SHIFT ns since the first time seen; never
 * less than a tick returned before. */
uint32_t lr__index_tick(lr_index *ix, uint64_t now);

/* key[-1] of a tenant and the chained block keys (see lr_block_keys()). */
uint64_t lr__index_tenant_root(uint64_t salt);
void lr__index_chain_keys(uint64_t prev, const uint32_t *tok, size_t nblocks,
                          uint32_t B, uint64_t *out);

/* Phase 1: room for `nn` more nodes, `nr` more runs and `ns` more spans
 * (and the table slots of the nodes). LR_ENOMEM changes nothing logical. */
lr_status lr__index_reserve(lr_index *ix, uint64_t nn, uint64_t nr,
                            uint64_t ns);
/* Room for `more` holders in run r (which may move its holder array: not
 * a logical change), or for `more` new runs' arrays when r is LR_NIL. */
lr_status lr__index_hent_room(lr_index *ix, uint32_t r, uint32_t more);
lr_status lr__index_scratch_keys(lr_index *ix, size_t n);
lr_status lr__index_scratch_anchors(lr_index *ix, size_t n);
lr_status lr__index_scratch_path(lr_index *ix, size_t n);

/* index_life.c, instances: slot of an id or LR_NIL; add one (a free slot
 * must exist); slot_for is lookup plus "is there room" (LR_EINVAL,
 * LR_ELIMIT). */
uint32_t lr__index_inst_lookup(const lr_index *ix, uint32_t id);
uint32_t lr__index_inst_add(lr_index *ix, uint32_t id);
lr_status lr__index_slot_for(lr_index *ix, uint32_t id, uint32_t *slot);

/* Slot of the node at offset `off` of run r (a walk over its chunks), and
 * the parent of node n (LR_NIL at the root). */
uint32_t lr__index_node_at(const lr_index *ix, uint32_t r, uint32_t off);
uint32_t lr__index_node_parent(const lr_index *ix, uint32_t n);

/* Phase 2 (cannot fail; memory was reserved). */
/* Make offset p of span x's range the bottom of a span (splitting off the
 * blocks above it into a span of their own); returns that span. */
uint32_t lr__index_cut(lr_index *ix, uint32_t x, uint32_t p);
void lr__index_touch(lr_index *ix, uint32_t x, uint32_t tick);
/* A new node for `key` under node `parent` (LR_NIL: the root): at the end
 * of parent's run when parent is its last node, else in a new run. One
 * chunk and one run must be reserved. */
uint32_t lr__index_node_new(lr_index *ix, uint64_t key, uint32_t parent);
/* Take back node n, the last node of its run, which no one holds (an
 * import's undo); an emptied run goes. */
void lr__index_node_pop(lr_index *ix, uint32_t n);
/* Give instance s the blocks of stretches segs[0, n) (top down, each
 * starting right below a block s holds, or at the root), with `bits`
 * (REMOTE or 0), stamp tick, anchors at the depths in anchors[0, na)
 * counted from depth0 (the depth just above the first block); returns
 * the deepest new span, unlisted. Spans, holder rooms: reserved. */
uint32_t lr__index_grant(lr_index *ix, uint32_t s, const struct seg *segs,
                         uint32_t n, uint32_t bits, uint32_t tick,
                         const uint32_t *anchors, uint32_t na, uint32_t depth0);
/* Give a span's bottom the recency `stamp` (never older than it had) and list
 * it where that stamp belongs: an imported route keeps the age its exporter
 * gave it. */
void lr__index_touch_at(lr_index *ix, uint32_t x, uint32_t stamp);

/* Check a prompt and point *keys at its block keys (the host's, or
 * computed into ix->kbuf); *n_keys of them. LR_EINVAL, LR_EVERSION,
 * LR_ENOMEM (the scratch array; not state). */
lr_status lr__index_prompt_keys(lr_index *ix, const lr_prompt *in, lr_prompt *p,
                                const uint64_t **keys, uint32_t *n_keys);

/* The deepest present node along keys[lo, hi) (depths lo+1..hi below
 * the node keys hang from), given that depth lo is (lo_node its node,
 * LR_NIL for the root): a binary search over the depths the node table
 * holds (TAB_STRIDE), then a walk of at most TAB_STRIDE - 1 blocks along
 * the runs. Returns that depth; *node_out its node. */
uint32_t lr__index_deepest(lr_index *ix, const uint64_t *keys, uint32_t lo,
                           uint32_t hi, uint32_t lo_node, uint32_t *node_out);

/* What an index table lookup's equality needs beside the key: the index
 * and one slot (the instance of an engine-map lookup, the parent of a
 * node-table lookup by lr__index_child_of). */
struct lr__index_probe {
    const lr_index *ix;
    uint32_t slot;
};

/* The child of node x (LR_NIL: the root) under `key`, or LR_NIL: the
 * next node of x's run, or the first node of a run hanging from x (the
 * table holds those; *probes counts the table lookups). */
uint32_t lr__index_child_of(const lr_index *ix, uint32_t x, uint64_t key,
                            uint32_t *probes);

/* The node of keys[t - 1] (keys hanging from node base, LR_NIL for the
 * root; base itself when t is 0), or LR_NIL when the index does not hold
 * that deep. */
uint32_t lr__index_chain_node(lr_index *ix, const uint64_t *keys, uint32_t t,
                              uint32_t base);

/* Instance s's deepest depth on the path from the root to node n (n at
 * depth d), 0 when it holds none of it; *run_out and *pos_out name the
 * block (LR_NIL when 0). */
uint32_t lr__index_depth_on(const lr_index *ix, uint32_t s, uint32_t n,
                            uint32_t *run_out, uint32_t *pos_out);

/* A learn in three phases (every mutator that adds holds runs them):
 * plan_learn finds where the instance's holds and anybody's end and
 * reserves the memory (the only step that can fail; LR_ENOMEM changes
 * nothing logical); apply_learn adds the instance if new and the holds,
 * anchors at p->anchors, and returns the deepest span (LR_NIL when n is
 * 0); settle expires and evicts back under capacity. */
lr_status lr__index_plan_learn(lr_index *ix, struct learn_plan *p);
uint32_t lr__index_apply_learn(lr_index *ix, struct learn_plan *p,
                               uint32_t tick);
/* index_evict.c: settle, and the expiry half of it (drop every route
 * unused for its TTL). */
void lr__index_settle(lr_index *ix, uint32_t tick);
void lr__index_expire_all(lr_index *ix, uint32_t tick);

/* Insert unlisted span x into its LRU list where its stamp belongs. */
void lr__index_lru_insert(lr_index *ix, uint32_t x);
/* After run r lost holders or blocks: its nodes are what its holders
 * hold. An emptied run is freed, or with `defer` marked RUN_PENDING. */
void lr__index_run_fit(lr_index *ix, uint32_t r, bool defer);
/* Unhook run r from its parent run's children; free a run that is empty,
 * unheld and childless. */
void lr__index_child_unlink(lr_index *ix, uint32_t r);
void lr__index_run_release(lr_index *ix, uint32_t r);

/* index_evict.c: removal; each preserves the invariants. */
void lr__index_remove_leaf_and_trim(lr_index *ix, uint32_t x, int why,
                                    bool precise);
/* Drop every hold of instance s strictly below offset p of run r (which s
 * holds); returns the span whose bottom is now p. Needs no memory. */
uint32_t lr__index_remove_below(lr_index *ix, uint32_t s, uint32_t r,
                                uint32_t p);
/* Drop every route and engine hash of instance id `instance`; *slot is
 * its slot, which stays in use. LR_EINVAL, LR_ENOENT (never seen). */
lr_status lr__index_clear(lr_index *idx, uint32_t instance, uint32_t *slot);

/* Grow array *arr of *cap elements to hold `need` (1.5x, at most limit),
 * zeroing the new part. LR_ENOMEM leaves it as it was. */
lr_status lr__index_grow(struct lr__mem *m, void **arr, uint32_t *cap,
                         uint32_t need, size_t elem, uint32_t limit);

/* The same, 1.25x at a time: for the arrays whose size follows the
 * routes (node keys and chunks, spans, the engine-hash slot arrays). */
lr_status lr__index_grow_big(struct lr__mem *m, void **arr, uint32_t *cap,
                             uint32_t need, size_t elem, uint32_t limit);

/* Room in pool p (array *arr) for `more` elements beyond the live ones.
 * LR_ENOMEM leaves both as they were. */
lr_status lr__index_pool_reserve(struct lr__mem *m, struct pool *p, void **arr,
                                 size_t elem, uint64_t more, uint32_t limit);

/* index_kv.c, the engine-hash map: instance s no longer holds offsets
 * [from, to) of run r (called before the nodes may go): forget their
 * hashes; slots [from, to) of chunk c were freed; the per-slot arrays for `cap`
 * chunks (once precise mode started); live entries; drop every entry of s; free
 * it all; an order-independent checksum of the entries; its invariants
 * (LR_OK or LR_ECORRUPT). */
void lr__index_emap_forget(lr_index *ix, uint32_t s, uint32_t r, uint32_t from,
                           uint32_t to);
void lr__index_emap_slots_freed(lr_index *ix, uint32_t c, uint32_t from,
                                uint32_t to);
lr_status lr__index_emap_slots(lr_index *ix, uint32_t cap);
uint64_t lr__index_emap_live(const lr_index *ix);
void lr__index_emap_drop(lr_index *ix, uint32_t s);
void lr__index_emap_free(lr_index *ix);
uint64_t lr__index_emap_digest(const lr_index *ix);
lr_status lr__index_emap_verify(const lr_index *ix);
/* ... and for snapshots (index_state.c): visit every entry (instance
 * slot, engine hash, node slot of its block); room for `more` entries;
 * set one (room reserved). */
void lr__index_emap_each(const lr_index *ix,
                         void (*fn)(void *ctx, uint32_t s, uint64_t ehash,
                                    uint32_t node),
                         void *ctx);
lr_status lr__index_emap_reserve(lr_index *ix, uint32_t more);
void lr__index_emap_put(lr_index *ix, uint32_t s, uint64_t ehash,
                        uint32_t node);

#endif /* LIBROUTE_LIB_INDEX_IMPL_H */
