/* lr_index, the store: the layout of struct lr_index (pictured, with its
 * invariants, at the top of index_store.c) and the primitives every layer
 * of lib/index builds on: pools and the memory reservation of a call's
 * first phase, host time, the instance table, nodes and runs, spans and
 * holder arrays, the LRU lists, the per-slot arrays of the engine-hash
 * map, and the scratch buffers. None of it knows what a learn, a match or
 * an eviction is; the layers above (index.h names them) do.
 *
 * Private to lib/index/: only the files of this folder include it. */
#ifndef LIBROUTE_LIB_INDEX_STORE_H
#define LIBROUTE_LIB_INDEX_STORE_H

#include "common/lr_hash.h"
#include "common/table.h"
#include "libroute/lr_index.h"

/* span.bits: the bottom block's flags and its child count */
#define HB_LISTED (1u << 31)
#define HB_REMOTE (1u << 30)
#define HB_ANCHOR (1u << 29)
#define HB_NCHILD ((1u << 29) - 1)
#define POOL_MAX ((uint32_t)INT32_MAX - 1) /* pool indices stay below */
#define INST_FREE 0xffffu                  /* span is free */
#define TICK_SHIFT 24
#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ull /* 2^64 / phi, odd */
#ifndef LR__LOWER_TIERS
#define LR__LOWER_TIERS 2 /* as index.h: LR_TIER_CPU, LR_TIER_DISK */
#endif

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
    uint32_t id;   /* insts[inst].id, the holders' order: a search by id
                      reads it without a load that waits on this one */
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
    uint32_t ev_m; /* index blocks per engine block, of its last GPU
                    * store (0: none since it was added) */
};

/* "No entry" in einst[], a per-slot array of the engine-hash map (the
 * map is index_emap.c's; the store grows its per-slot arrays with the
 * node slots). */
#define EINST_NONE 0xffffu
/* Pointed to by the layout, defined by their layers: an overflow entry of
 * the engine-hash map (index_emap.c), a journal entry (index_learn.h). */
struct emap_ent;
struct jent;

enum {
    LIST_LOCAL = 0,
    LIST_REMOTE = 1,
    N_LISTS = 2
};
/* Slots of lru_hint per list: 4,096 ticks of 2^24 ns, about 69 s. */
#define LRU_HINTS 4096u
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

/* What a match writes while it works (index_match.c): the instances met on
 * the walk up (cand[0, k)), and per instance slot its depth, its deepest
 * span in the run of its answer and the offset there; mark[s] == mark_gen
 * says slot s was met by the current walk; hk is the sort. Every array
 * has max_inst elements. The index keeps one for lr_index_match();
 * lr__index_peek() takes the caller's, so that readers share the index
 * and write only their own scratch. */
struct lr__match_scratch {
    uint32_t max_inst;
    uint32_t mark_gen;
    uint32_t *cand, *cspan, *cdepth, *mark, *cpos; /* one allocation */
    struct lr__hitkey *hk;
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

    /* Where things are: read by every match, written when an array
     * grows (or an instance comes or goes, a tier is made). */
    uint64_t *keys; /* CHUNK per chunk, kcap chunks */
    uint32_t kcap;
    struct chunk *chunks; /* free chunks chain through next; chcap of them */
    uint32_t chcap;
    struct run *runs; /* free runs chain through hidx */
    struct span *sp;  /* free spans chain through next */
    struct inst *insts;
    struct lr__table itab; /* instance id -> slot, sized for max_inst */

    /* the engine-hash map, see index_emap.c */
    uint64_t *ehash; /* per node slot, NULL before precise mode */
    uint16_t *einst; /* per node slot, EINST_NONE: no entry */
    uint16_t *eovf;  /* per chunk, a bit a slot: overflow entries */
    uint32_t ecap;   /* chunks all three slot arrays cover */
    uint32_t ecap_h, ecap_i, ecap_o; /* chunks each one covers */
    struct emap_ent *ep;             /* overflow entries */

    struct jent *journal; /* the LOCAL learns, see index_learn.c */

    /* The lower tiers' routes (index_kv.c, "Lower tiers"): lower[t - 1]
     * for tier t, an index of the same block size and keys made at the
     * tier's first event; NULL before. Part of the logical state (digest,
     * verify); not of snapshots or deltas. A lower index has none. */
    lr_index *lower[LR__LOWER_TIERS];

    /* What every learn writes, a cache line away from what a match reads
     * (LR__GAP, common.h), so that one thread's learn costs another
     * thread's match only the lines the learn really changed: the node
     * table (its count moves with every insert), then the pools, lists
     * and counters. */
    LR__GAP(gap_ntab);
    struct lr__table ntab; /* block key -> node slot */
    LR__GAP(gap_pools);
    struct pool cpool;
    struct pool rpool;
    struct pool spool;
    struct hclass hc[HCLASSES];

    uint32_t head[N_LISTS], tail[N_LISTS];
    /* Where imported stamps go in the lists (lr__index_touch_at): per
     * list, LRU_HINTS slots, slot t % LRU_HINTS naming a span listed
     * last with stamp t, if it still is. Not state: made by the first
     * import, checked on every read. */
    uint32_t *lru_hint;
    uint64_t holds, remote, nodes;
    uint64_t stale; /* table entries of gone nodes */

    uint32_t *ifree; /* stack of free instance slots */
    uint32_t n_ifree;

    struct pool epool;     /* free entries chain through node */
    struct lr__table etab; /* (instance slot, engine hash) -> entry */
    struct lr__table otab; /* (instance slot, node slot) -> overflow */
    uint64_t emap_live;    /* entries */

    uint64_t j_seq; /* learns journalled (index_learn.c) */

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
    uint32_t last_probes;        /* node-table lookups of the last match */
    struct lr__match_scratch ms; /* lr_index_match's */
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

static inline struct hent *
run_hents(const lr_index *ix, const struct run *r)
{
    return ix->hc[r->hcls].v + ((size_t)r->hidx << r->hcls);
}

/* The entry of instance id `id` among run R's holders, or NULL: a
 * binary search (a run's holders stay sorted by instance id), so that a
 * system prompt a whole fleet holds costs log2(fleet) steps to look in.
 * Each step keeps the half that holds the last holder of id <= `id` (or
 * a range one longer) with a conditional move: the comparison's outcome
 * is a coin toss the branch predictor would miss half the time. */
static inline struct hent *
hent_of_id(const lr_index *ix, const struct run *R, uint32_t id)
{
    struct hent *b = run_hents(ix, R);
    uint32_t n = R->nh;
    if (n == 0)
        return NULL;
    while (n > 1) {
        uint32_t half = n / 2;
        b = b[half].id <= id ? b + half : b;
        n -= half;
    }
    return b->id == id ? b : NULL;
}

/* Instance s's entry in run r, or NULL: a scan of a few holders, else
 * hent_of_id (a learn or an eviction on a run the whole fleet holds). */
#define HENT_SCAN 4u
static inline struct hent *
hent_of(const lr_index *ix, uint32_t r, uint32_t s)
{
    const struct run *R = &ix->runs[r];
    if (R->nh > HENT_SCAN)
        return hent_of_id(ix, R, ix->insts[s].id);
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

/* What an index table lookup's equality needs beside the key: the index
 * and one slot (the instance of an engine-map lookup, the parent of a
 * node-table lookup by lr__index_child_of). */
struct lr__index_probe {
    const lr_index *ix;
    uint32_t slot;
};

/* ------------------------------------------------------------------------ */
/* defined in index_store.c                                                  */
/* ------------------------------------------------------------------------ */

/* ---- time ---- */

/* The tick of host time `now` on the index's time base (its epoch): ticks
 * of 2^TICK_SHIFT ns, 0 at or before the epoch. Reads only; the epoch must
 * be set. */
static inline uint32_t
lr__index_tick_at(const lr_index *ix, uint64_t now)
{
    if (now <= ix->epoch_ns)
        return 0;
    uint64_t t = (now - ix->epoch_ns) >> TICK_SHIFT;
    return t >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)t;
}

/* Take host time `now` (judged at the call's start, lr__index_judge) as
 * the call commits: the first one sets the epoch; the clock and last_tick
 * move on. Returns lr__index_tick_at(now). */
uint32_t lr__index_tick(lr_index *ix, uint64_t now);

/* ---- memory (phase 1 of a mutator: the only place it can fail) ---- */

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
/* Room for `nn` more nodes, `nr` more runs and `ns` more spans (and the
 * table slots of the nodes). LR_ENOMEM changes nothing logical. */
lr_status lr__index_reserve(lr_index *ix, uint64_t nn, uint64_t nr,
                            uint64_t ns);
/* Room for `more` holders in run r (which may move its holder array: not
 * a logical change), or for `more` new runs' arrays when r is LR_NIL. */
lr_status lr__index_hent_room(lr_index *ix, uint32_t r, uint32_t more);
/* The engine-hash map's per-slot arrays for `cap` chunks of node slots;
 * once they exist, every reserve grows them with the slots. */
lr_status lr__index_eslots_reserve(lr_index *ix, uint32_t cap);
/* Scratch arrays (not state): kbuf, abuf, path. */
lr_status lr__index_scratch_keys(lr_index *ix, size_t n);
lr_status lr__index_scratch_anchors(lr_index *ix, size_t n);
lr_status lr__index_scratch_path(lr_index *ix, size_t n);
/* The LRU lists' hints (lru_hint), made once: an import's first phase. */
lr_status lr__index_lru_hints(lr_index *ix);
/* A match scratch for max_inst instance slots from m (zeroed): LR_OK or
 * LR_ENOMEM with nothing allocated; and its release (a zeroed one too). */
lr_status lr__index_ms_init(struct lr__mem *m, struct lr__match_scratch *ms,
                            uint32_t max_inst);
void lr__index_ms_fini(struct lr__mem *m, struct lr__match_scratch *ms);
/* Free every array of the store (of a partial construction too: a size
 * not yet set is 0 and a table not yet inited is zero-filled). */
void lr__index_store_free(lr_index *ix);

/* ---- instances ---- */

/* Slot of an id or LR_NIL; add one (a free slot must exist); take one
 * back (it holds nothing); slot_for is lookup plus "is there room"
 * (LR_EINVAL, LR_ELIMIT). */
uint32_t lr__index_inst_lookup(const lr_index *ix, uint32_t id);
uint32_t lr__index_inst_add(lr_index *ix, uint32_t id);
void lr__index_inst_del(lr_index *ix, uint32_t s);
lr_status lr__index_slot_for(lr_index *ix, uint32_t id, uint32_t *slot);

/* ---- nodes and runs (phase 2: cannot fail; memory was reserved) ---- */

/* Slot of the node at offset `off` of run r (a walk over its chunks), and
 * the parent of node n (LR_NIL at the root). */
uint32_t lr__index_node_at(const lr_index *ix, uint32_t r, uint32_t off);
uint32_t lr__index_node_parent(const lr_index *ix, uint32_t n);
/* A new node for `key` under node `parent` (LR_NIL: the root): at the end
 * of parent's run when parent is its last node, else in a new run. One
 * chunk and one run must be reserved. */
uint32_t lr__index_node_new(lr_index *ix, uint64_t key, uint32_t parent);
/* Take back node n, the last node of its run, which no one holds (an
 * import's undo); an emptied run goes. */
void lr__index_node_pop(lr_index *ix, uint32_t n);
/* After run r lost holders or blocks: its nodes are what its holders
 * hold. An emptied run is freed, or with `defer` marked RUN_PENDING. */
void lr__index_run_fit(lr_index *ix, uint32_t r, bool defer);
/* Unhook run r from its parent run's children; free a run that is empty,
 * unheld and childless. */
void lr__index_child_unlink(lr_index *ix, uint32_t r);
void lr__index_run_release(lr_index *ix, uint32_t r);

/* ---- spans and holders ---- */

/* Make offset p of span x's range the bottom of a span (splitting off the
 * blocks above it into a span of their own); returns that span. */
uint32_t lr__index_cut(lr_index *ix, uint32_t x, uint32_t p);
/* Give instance s the blocks of stretches segs[0, n) (top down, each
 * starting right below a block s holds, or at the root), with `bits`
 * (REMOTE or 0), stamp tick, anchors at the depths in anchors[0, na)
 * counted from depth0 (the depth just above the first block; na LR_NIL:
 * every block is one); returns the deepest new span, unlisted. Spans,
 * holder rooms: reserved. */
uint32_t lr__index_grant(lr_index *ix, uint32_t s, const struct seg *segs,
                         uint32_t n, uint32_t bits, uint32_t tick,
                         const uint32_t *anchors, uint32_t na, uint32_t depth0);

/* ---- LRU lists ---- */

/* List unlisted span x at the head of its list (the newest). */
void lr__index_lru_push_head(lr_index *ix, uint32_t x);
/* Insert unlisted span x into its list where its stamp belongs. */
void lr__index_lru_insert(lr_index *ix, uint32_t x);
/* Stamp span x's bottom with tick and move it to the head of its list. */
void lr__index_touch(lr_index *ix, uint32_t x, uint32_t tick);
/* Give a span's bottom the recency `stamp` (never older than it had) and
 * list it where that stamp belongs: an imported route keeps the age its
 * exporter gave it. */
void lr__index_touch_at(lr_index *ix, uint32_t x, uint32_t stamp);

#endif /* LIBROUTE_LIB_INDEX_STORE_H */
