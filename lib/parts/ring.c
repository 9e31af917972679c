/* lr_ring: the dual consistent-hash ring (public contract in lr_ring.h).
 *
 * Layout. Every instance owns `vnodes` points on a 64-bit circle; all of
 * them, sorted by (position, name bytes), live in leaves of at most LEAF
 * (64) entries, doubly linked in ring order. Each leaf keeps its last
 * position (`hi`) and its predecessor's (`lo`, 0 for the head) in its
 * header. A jump table maps the top b bits of a position to the first leaf
 * that can hold it, with that leaf's hi and next copied into the slot.
 * Here 3 instances with 2 vnodes each in 3 leaves (positions shown by
 * their top byte), b = 2 table bits:
 *
 *     name --XXH3(v as 4 LE bytes ++ name, LR_SEED_VNODE)--> vnode v
 *
 *   tab[h] = { first leaf whose hi has top b bits >= h, its hi, its next };
 *            leaf NULL if none (a point there wraps to the head)
 *
 *     tab[0] tab[1]          tab[2]                  tab[3]
 *        \    |                |                       |
 *   head  v   v                v                       v  tail
 *   +--------+--------+   +--------+--------+     +--------+--------+
 *   | 0x1c.. | 0x4a.. |<->| 0x6f.. | 0x93.. |<--->| 0xc5.. | 0xe0.. |-> NULL
 *   | id 7 A | id 9 B |   | id 7 A | id 4 C |     | id 9 B | id 4 C |
 *   +--------+--------+   +--------+--------+     +--------+--------+
 *   lo 0, hi 0x4a..       lo 0x4a.., hi 0x93..    lo 0x93.., hi 0xe0..
 *
 *   by_id, by_name: two uthash tables over the same struct inst records
 *   (name copied, id), used for duplicate checks, removal and tie breaks.
 *
 * Worked example (k = 2). A key's points are XXH3(j as 4 LE bytes ++ key
 * as 8 LE bytes, LR_SEED_RINGK). Say point 0 is 0x50..: its top 2 bits are
 * 1; tab[1] names the head, but its copied hi 0x4a.. is below the point,
 * so the walk takes the copied next, the middle leaf (hi 0x93..), without
 * reading the head; inside it the first entry >= 0x50.. is 0x6f..: out[0]
 * = 7 (A). Say point 1 is 0x60..: it also lands on 0x6f.., but A is taken,
 * so the walk continues clockwise to 0x93..: out[1] = 4 (C). A point past
 * the tail's hi, say 0xf0.., finds tab[3]'s hi below it and no next leaf,
 * and wraps to the head's first entry. Add D with vnodes at 0x58.. and
 * 0xa0..: point 0 now stops at 0x58.. and picks D, point 1 still picks A;
 * a key neither of whose walks meets a D vnode before its old pick keeps
 * its old candidates exactly.
 *
 * Why this shape. A query costs, per point, one XXH3 call on 8 bytes, one
 * table slot, the header of its leaf (hi, n and lo; a further step only
 * when two leaves end in the slot before the point), and in the leaf a
 * guess from lo and hi (positions are hashes, spread evenly) that is
 * usually right within a step; position and id sit side by side, so the
 * pick reads the line the search loaded. That is the cache lines 0.2's
 * dense arrays cost, in about 6% fewer instructions (callgrind, 256
 * instances). Nothing is written,
 * so queries are safe from many threads at once. Ties between positions
 * are broken by name bytes (memcmp, then length): the order is a function
 * of the set of names alone, never of insertion order, so every gateway
 * replica agrees.
 *
 * Churn is O(vnodes x log(total vnodes)) and nothing in it grows with the
 * number of leaves (a sorted array, or leaves kept in one array with a
 * jump table rebuilt per add, cost instances x vnodes per add: 65,534
 * adds to a router took 69 s that way).
 * Adding an instance sorts its vnodes, finds each one's leaf through the
 * table, merges each leaf's share into it and splits a leaf that
 * overflows into leaves at most 3/4 full, linked in after it. Only a split
 * or a grown tail changes a hi or a next, and then only the table slots
 * from the leaf's lo to its last new leaf's hi, a contiguous run.
 * Everything that can fail comes first: the instance record, its map
 * entries, the new leaves a split needs (counted exactly before anything
 * moves), a bigger table when the leaf count crosses a power of two, and a
 * scratch buffer; only then does the commit move entries, which cannot
 * fail (B11). Removing recomputes the instance's positions and deletes
 * each entry from its leaf; a leaf that empties is unlinked, a small one
 * that fits into a neighbour is merged, and the slots over the changed
 * run are repaired. It allocates nothing it needs, so taking a dead
 * instance off the ring works even when memory is exhausted. The table is
 * rebuilt (O(leaves)) only when the leaf count doubles or, with
 * hysteresis, falls below half of the count it was sized for: amortized
 * O(1) per leaf.
 *
 * Bulk build (lr__ring_add_many): every position, old and new, is counted
 * into one of up to 2^10 buckets by its top bits and scattered into fresh
 * leaves at its bucket's place; each bucket is then sorted in a scratch
 * array, by the next bits and within those tiny buckets by (position,
 * name): O(total) for hashed positions, O(total log total) at worst.
 */
#include "parts/ring.h"

#include "common/lr_hash.h"

/* uthash, wrapped as B27 says: out-of-memory is reported, never fatal, and
 * every block comes from the ring's allocator. The macros take no context
 * argument, so each function that may allocate or free through uthash
 * declares `uh_mem` (and `uh_oom` where it adds) in its own scope. Any use
 * of uthash's built-in hash function fails to compile: every key is hashed
 * by this file (map_*) and passed BYHASHVALUE. */
#define HASH_NONFATAL_OOM 1
#define uthash_malloc(sz) lr__alloc(uh_mem, (sz))
#define uthash_free(ptr, sz) lr__free(uh_mem, (ptr), (sz))
#define uthash_nonfatal_oom(elt) ((void)(elt), uh_oom = true)
#define HASH_FUNCTION(keyptr, keylen, hashv) ring_uses_byhashvalue_only
#include <uthash.h>

#define DEFAULT_VNODES 160u
#define DEFAULT_MAX_INSTANCES 4096u
/* Entries per leaf, and how full a split leaves them: a leaf split (or
 * filled from empty) is at most 3/4 full, so the next adds into it move a
 * few hundred bytes, not a leaf's worth. */
#define LEAF 64u
#define LEAF_FILL 48u
/* A leaf that removals bring down to LEAF_MERGE / 2 entries is merged with
 * a neighbour when both fit in a split leaf's fill, so churn cannot leave
 * a ring of nearly empty leaves. */
#define LEAF_MERGE LEAF_FILL
/* Jump table size: 2^b slots with b = floor(log2(leaves)), one or two
 * leaves per slot, as in 0.2's table; after removals b may lag one more
 * (hysteresis: rebuilt when it is two off). Each slot also copies its
 * leaf's hi and next (struct tslot), so most points reach their leaf with
 * one header read. A bigger table (2 or 4 slots per leaf) steps less but
 * missed the cache more often in callgrind's simulation of a ring larger
 * than the cache. At most 2^28 entries (65536 instances x 4096 vnodes)
 * make at most 2^28 leaves; 2^24 slots is plenty. */
#define TAB_MAX_BITS 24u

/* In-process seeds: uthash buckets and the digest. Neither crosses a
 * process, so unlike LR_SEED_VNODE they are free to change. The ring has
 * no seed option, and its keys (names and ids) come from the host's own
 * configuration rather than from requests, so a fixed seed is no flooding
 * risk. */
#define MAP_SEED 0x4c52524d41505331ull    /* "LRRMAPS1" */
#define DIGEST_SEED 0x4c52524449475331ull /* "LRRDIGS1" */

struct inst {
    UT_hash_handle hh_id;   /* key: id, 4 bytes */
    UT_hash_handle hh_name; /* key: name[0..len) */
    uint32_t id;
    uint32_t len; /* strlen(name), 1..LR_RING_MAX_NAME */
    char name[];  /* copied from the caller (B7) */
};

/* One point on the circle: position and id side by side, so the id is
 * read from the line the search loaded. */
struct vnode {
    uint64_t pos;
    uint32_t id;
};

/* A query reads hi, n and lo, the header's first 24 bytes, so with the
 * allocator's 16-byte alignment they share one cache line three times in
 * four; next is read only to step on, prev only by mutators. */
struct leaf {
    uint64_t hi;          /* e[n - 1].pos */
    uint32_t n;           /* entries, 1..LEAF in a ring (0 only while built) */
    uint64_t lo;          /* prev->hi, 0 for the head: interpolation bound */
    struct leaf *next;    /* clockwise; NULL after the tail */
    struct leaf *prev;    /* NULL before the head */
    struct vnode e[LEAF]; /* sorted by (position, name) */
};

/* A jump-table slot: the first leaf whose hi reaches the slot, with that
 * leaf's hi and next copied beside it. A point past `hi` goes straight to
 * `next` (usually its leaf) without reading the first leaf's header,
 * which is how the old dense `last[]` array answered the same question
 * from the cache. */
struct tslot {
    struct leaf *l; /* NULL: no leaf reaches the slot */
    struct leaf *next;
    uint64_t hi;
};

struct lr_ring {
    struct lr__mem mem;
    uint32_t vnodes;        /* per instance, 1..LR_RING_MAX_VNODES */
    uint32_t max_instances; /* 1..LR__RING_MAX_INSTANCES */
    uint32_t count;         /* instances placed */
    bool custom_pos;        /* lr__ring_add_at placed explicit positions */
    struct inst *by_id;     /* uthash head over hh_id */
    struct inst *by_name;   /* uthash head over hh_name */
    struct leaf *head;      /* first leaf in ring order; NULL if none */
    struct leaf *tail;      /* last leaf */
    size_t nl;              /* leaves */
    size_t n;               /* entries: count * vnodes */
    struct tslot *tab;      /* 2^tab_bits slots; NULL when nl == 0 */
    unsigned tab_bits;      /* see TAB_MAX_BITS; 0 when nl == 0 */
    size_t tab_cap;         /* slots allocated, >= 2^tab_bits */
    uint64_t work;          /* lr__ring_work: steps mutators took */
};

/* ---- positions (B26: documented in lr_ring.h, never change) ------------ */

/* Exactly the formulas lr_ring.h documents. The index (vnode v, point j)
 * goes into the hashed bytes, never into the seed: for inputs of up to 16
 * bytes XXH3 folds the seed in linearly before its final mix, so with
 * seed + v two names whose bytes differ the way two seeds differ shared
 * positions, and "vm1".."vm8" gave one instance ~90% of the keys
 * (test_short_names_balance pins the fix). */
static uint64_t
vnode_pos(const char *name, size_t len, uint32_t v)
{
    uint8_t buf[4 + LR_RING_MAX_NAME];
    lr__put_u32(buf, v);
    memcpy(buf + 4, name, len);
    return lr__hash(buf, 4 + len, LR_SEED_VNODE);
}

static uint64_t
key_point(const uint8_t key_le[8], uint32_t j)
{
    uint8_t buf[12];
    lr__put_u32(buf, j);
    memcpy(buf + 4, key_le, 8);
    return lr__hash(buf, 12, LR_SEED_RINGK);
}

/* Name order for equal positions: bytes as unsigned (memcmp), then the
 * shorter name first. */
static int
name_cmp(const char *a, size_t la, const char *b, size_t lb)
{
    int c = memcmp(a, b, la < lb ? la : lb);
    if (c != 0)
        return c;
    return (la > lb) - (la < lb);
}

/* ---- the two maps (B27) ------------------------------------------------ */

/* uthash keeps 32 bits of hash; fold so both halves of XXH3 count. */
static unsigned
fold(uint64_t h)
{
    return (unsigned)(h ^ (h >> 32));
}

static struct inst *
map_find_id(const lr_ring *r, uint32_t id)
{
    struct inst *e;
    HASH_FIND_BYHASHVALUE(hh_id, r->by_id, &id, sizeof id,
                          fold(lr__mix64(id, MAP_SEED)), e);
    return e;
}

static struct inst *
map_find_name(const lr_ring *r, const char *name, size_t len)
{
    struct inst *e;
    HASH_FIND_BYHASHVALUE(hh_name, r->by_name, name, len,
                          fold(lr__hash(name, len, MAP_SEED)), e);
    return e;
}

/* Enter e in both maps, or in neither: LR_ENOMEM when uthash could not make
 * or grow a table. The caller has checked that neither key is present. */
static lr_status
map_add(lr_ring *r, struct inst *e)
{
    struct lr__mem *uh_mem = &r->mem;
    bool uh_oom = false;
    HASH_ADD_KEYPTR_BYHASHVALUE(hh_id, r->by_id, &e->id, sizeof e->id,
                                fold(lr__mix64(e->id, MAP_SEED)), e);
    if (uh_oom)
        return LR_ENOMEM;
    HASH_ADD_KEYPTR_BYHASHVALUE(hh_name, r->by_name, e->name, e->len,
                                fold(lr__hash(e->name, e->len, MAP_SEED)), e);
    if (uh_oom) {
        /* Undo the id entry. Deleting never allocates; at worst the id
         * table keeps buckets it grew, which no query can observe. */
        HASH_DELETE(hh_id, r->by_id, e);
        return LR_ENOMEM;
    }
    return LR_OK;
}

/* Take e out of both maps. Never fails: deleting only frees. */
static void
map_del(lr_ring *r, struct inst *e)
{
    struct lr__mem *uh_mem = &r->mem;
    HASH_DELETE(hh_id, r->by_id, e);
    HASH_DELETE(hh_name, r->by_name, e);
}

static size_t
inst_size(size_t len)
{
    /* len <= LR_RING_MAX_NAME, so this cannot overflow */
    return sizeof(struct inst) + len + 1;
}

/* ---- the jump table ------------------------------------------------------ */

/* The table size a ring of nl >= 1 leaves is built with: floor(log2 nl)
 * bits, at least 1. The size in use may be one more after removals
 * (tab_ok). */
static unsigned
tab_bits_for(size_t nl)
{
    unsigned b = 1;
    while (b < TAB_MAX_BITS && ((size_t)2 << b) <= nl)
        b++;
    return b;
}

/* Whether `bits` may serve nl leaves: from tab_bits_for(nl) up to one
 * more. Rebuilding only outside that band makes the rebuilds amortized
 * O(1) per leaf: after one, the leaf count must double or halve before the
 * next. */
static bool
tab_ok(unsigned bits, size_t nl)
{
    unsigned want = tab_bits_for(nl);
    return bits >= want && bits <= want + 1 && bits <= TAB_MAX_BITS;
}

static size_t
slot_of(const lr_ring *r, uint64_t pos)
{
    return (size_t)(pos >> (64u - r->tab_bits));
}

static void
tslot_set(struct tslot *t, struct leaf *l)
{
    t->l = l;
    t->next = l != NULL ? l->next : NULL;
    t->hi = l != NULL ? l->hi : 0;
}

/* The slot's first candidate for a point p in it: its leaf, or the next
 * one when p lies past that leaf's hi (NULL: past the tail). */
static struct leaf *
tslot_leaf(const struct tslot *t, uint64_t p)
{
    return p <= t->hi ? t->l : t->next;
}

/* Fill every slot from the list: O(slots + leaves). */
static void
tab_build(lr_ring *r)
{
    size_t slots = (size_t)1 << r->tab_bits;
    struct leaf *l = r->head;
    for (size_t h = 0; h < slots; h++) {
        while (l != NULL && slot_of(r, l->hi) < h)
            l = l->next;
        tslot_set(&r->tab[h], l);
    }
    r->work += slots + r->nl;
}

/* Repair the slots after a run of leaves changed. Every leaf before the
 * run (the next of the last one included, which slots copy) and after it
 * is unchanged; `from` is the run's first leaf as it is now (NULL: the
 * run vanished at the tail), `lo` the hi of the leaf before the run
 * (ignored when `at_head`: the run starts the list), and `hmax` at least
 * the slot of the run's last hi, before and after the change. Slots up to
 * lo's point at the leaf before the run or earlier, and slots past hmax
 * at a leaf after it, both as before; only (slot(lo), hmax] is
 * recomputed, from the list as it is now. lo is passed rather than read
 * from the leaf before, whose header a split or a deletion would
 * otherwise pull into the cache for nothing. */
static void
tab_refresh(lr_ring *r, struct leaf *from, bool at_head, uint64_t lo,
            size_t hmax)
{
    size_t h = at_head ? 0 : slot_of(r, lo) + 1;
    struct leaf *l = from;
    for (; h <= hmax; h++) {
        while (l != NULL && slot_of(r, l->hi) < h) {
            l = l->next;
            r->work++;
        }
        tslot_set(&r->tab[h], l);
        r->work++;
    }
}

/* The first leaf whose hi is >= p, or NULL: starts at the slot of p and
 * steps (a slot covers about one leaf). For readers. */
static const struct leaf *
leaf_at(const lr_ring *r, uint64_t p)
{
    const struct leaf *l = tslot_leaf(&r->tab[slot_of(r, p)], p);
    while (l != NULL && l->hi < p)
        l = l->next;
    return l;
}

/* leaf_at for mutators, counting its steps. */
static struct leaf *
leaf_find(lr_ring *r, uint64_t p)
{
    struct leaf *l = tslot_leaf(&r->tab[slot_of(r, p)], p);
    r->work++;
    while (l != NULL && l->hi < p) {
        l = l->next;
        r->work++;
    }
    return l;
}

/* ---- leaves -------------------------------------------------------------- */

/* The first index in leaf l with position >= p (l->n if none). */
static uint32_t
lower_in_leaf(const struct leaf *l, uint64_t p)
{
    uint32_t lo = 0, hi = l->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (l->e[mid].pos < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* lower_in_leaf by interpolation: positions are hashes, spread evenly, so
 * the guess from the leaf's bounds (lo and hi, in the header the walk has
 * just read) is usually within a step of the answer, and one line of the
 * leaf is read instead of a binary search's six. Any spread is still
 * answered exactly, in at most LEAF steps. The guess alone, 0..n, tells a
 * caller which line to warm up. */
static uint32_t
guess_in_leaf(const struct leaf *l, uint64_t p)
{
    uint32_t n = l->n;
    uint64_t lo = l->lo, hi = l->hi;
    uint32_t g = 0;
    if (p > lo && hi > lo)
        g = (uint32_t)((double)(p - lo) / (double)(hi - lo) * (double)n);
    return g > n ? n : g;
}

static uint32_t
lower_in_leaf_at(const struct leaf *l, uint64_t p)
{
    uint32_t n = l->n;
    uint32_t g = guess_in_leaf(l, p);
    while (g > 0 && l->e[g - 1].pos >= p)
        g--;
    while (g < n && l->e[g].pos < p)
        g++;
    return g;
}

static struct leaf *
leaf_new(lr_ring *r)
{
    struct leaf *l = lr__alloc(&r->mem, sizeof *l);
    if (l != NULL) {
        l->n = 0;
        l->next = NULL;
        l->prev = NULL;
    }
    return l;
}

static void
leaf_free(lr_ring *r, struct leaf *l)
{
    lr__free(&r->mem, l, sizeof *l);
}

/* Take l out of the list (it keeps its entries); its successor's lo
 * follows. Never fails. */
static void
leaf_unlink(lr_ring *r, struct leaf *l)
{
    struct leaf *p = l->prev;
    struct leaf *x = l->next;
    if (p != NULL)
        p->next = x;
    else
        r->head = x;
    if (x != NULL) {
        x->prev = p;
        x->lo = p != NULL ? p->hi : 0;
    } else {
        r->tail = p;
    }
    r->nl--;
}

static void
sift_down(uint64_t *a, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && a[child + 1] > a[child])
            child++;
        if (a[root] >= a[child])
            return;
        uint64_t t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

/* Heapsort: in place and allocation-free (qsort may call malloc behind the
 * allocator's back, B21). All positions belong to one instance, so equal
 * positions need no name order. */
static void
sort_u64(uint64_t *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (size_t end = n; end > 1;) {
        end--;
        uint64_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

/* Whether the entry (pos, id) sorts after the new instance e's entry at
 * position p. Names differ (duplicates are refused), so the order is
 * strict; names are read only on a position tie. */
static bool
after_new(const lr_ring *r, uint64_t pos, uint32_t id, uint64_t p,
          const struct inst *e)
{
    if (pos != p)
        return pos > p;
    const struct inst *ia = map_find_id(r, id);
    if (LR_NEVER(ia == NULL))
        return false;
    return name_cmp(ia->name, ia->len, e->name, e->len) > 0;
}

/* The leaf a new entry of e at position p goes into: the first whose last
 * entry sorts after it, else the tail. Its hi settles it unless it equals
 * p (a tie: then the last entry's name decides). */
static struct leaf *
target_leaf(lr_ring *r, uint64_t p, const struct inst *e)
{
    struct leaf *l = leaf_find(r, p);
    while (l != NULL) {
        if (l->hi > p)
            return l;
        const struct vnode *z = &l->e[l->n - 1];
        if (after_new(r, z->pos, z->id, p, e))
            return l;
        l = l->next;
        r->work++;
    }
    return r->tail;
}

/* Leaves m entries make when a leaf splits: at most LEAF_FILL each. */
static size_t
leaves_for(size_t m)
{
    return m <= LEAF ? 1 : (m + LEAF_FILL - 1) / LEAF_FILL;
}

/* What an add needs, worked out before anything changes. One block holds
 * the sorted new positions, each one's target leaf, and the merge
 * scratch. */
struct add_plan {
    void *block;
    size_t block_size;
    uint64_t *fresh;    /* the new positions, sorted (v of them) */
    struct leaf **grp;  /* per fresh entry: its target leaf */
    struct vnode *mv;   /* merge scratch: LEAF + v entries */
    size_t extra;       /* leaves the splits add */
    struct leaf *spare; /* `extra` fresh leaves, chained through next */
    unsigned bits;      /* table bits after the add */
    struct tslot *ntab; /* a bigger table, or NULL: the current one */
    size_t ntab_cap;
};

static void
plan_free(lr_ring *r, struct add_plan *pl)
{
    while (pl->spare != NULL) {
        struct leaf *l = pl->spare;
        pl->spare = l->next;
        leaf_free(r, l);
    }
    lr__free(&r->mem, pl->block, pl->block_size);
    lr__free(&r->mem, pl->ntab, pl->ntab_cap * sizeof *pl->ntab);
    memset(pl, 0, sizeof *pl);
}

/* `count` fresh leaves chained through next onto *chain, or LR_ENOMEM
 * (those made so far stay on the chain for the caller to free). */
static lr_status
spares_new(lr_ring *r, size_t count, struct leaf **chain)
{
    for (size_t i = 0; i < count; i++) {
        struct leaf *l = leaf_new(r);
        if (l == NULL)
            return LR_ENOMEM;
        l->next = *chain;
        *chain = l;
    }
    return LR_OK;
}

/* The table for nl_new leaves after an add: the current one if its size
 * still fits (tab_ok), else a rebuild at tab_bits_for(nl_new), in a new
 * block unless the current one is big enough (a shrink that could not
 * give memory back leaves it so). */
static lr_status
plan_tab(lr_ring *r, size_t nl_new, unsigned *bits, struct tslot **ntab,
         size_t *ntab_cap)
{
    *bits = r->tab_bits;
    *ntab = NULL;
    *ntab_cap = 0;
    if (r->tab != NULL && tab_ok(r->tab_bits, nl_new))
        return LR_OK;
    *bits = tab_bits_for(nl_new);
    size_t slots = (size_t)1 << *bits;
    if (slots <= r->tab_cap)
        return LR_OK;
    *ntab = lr__alloc(&r->mem, slots * sizeof **ntab);
    if (*ntab == NULL)
        return LR_ENOMEM;
    *ntab_cap = slots;
    return LR_OK;
}

/* Phase 1 of an add: every allocation, and where each new entry goes. */
static lr_status
plan_add(lr_ring *r, const struct inst *e, const uint64_t *pos,
         struct add_plan *pl)
{
    size_t v = r->vnodes;
    memset(pl, 0, sizeof *pl);
    /* v <= 4096: no overflow */
    pl->block_size = v * sizeof *pl->fresh + v * sizeof *pl->grp +
                     (LEAF + v) * sizeof *pl->mv;
    pl->block = lr__alloc(&r->mem, pl->block_size);
    if (pl->block == NULL) {
        pl->block_size = 0;
        return LR_ENOMEM;
    }
    pl->mv = pl->block; /* the 16-byte entries first keep all aligned */
    pl->fresh = (uint64_t *)(pl->mv + LEAF + v);
    pl->grp = (struct leaf **)(pl->fresh + v);
    for (uint32_t i = 0; i < v; i++)
        pl->fresh[i] = pos != NULL ? pos[i] : vnode_pos(e->name, e->len, i);
    sort_u64(pl->fresh, v);
    /* the target leaf of each (in ring order), and the leaves splits add */
    if (r->nl == 0) {
        pl->extra = leaves_for(v);
        for (size_t i = 0; i < v; i++)
            pl->grp[i] = NULL;
    } else {
        /* Three passes, so the cache misses overlap instead of queueing
         * (real loads, kept by lr__sink): the table
         * slots of all new positions, then the headers they point at,
         * then the targets, by then mostly cached. */
        for (size_t i = 0; i < v; i++)
            pl->grp[i] =
                tslot_leaf(&r->tab[slot_of(r, pl->fresh[i])], pl->fresh[i]);
        for (size_t i = 0; i < v; i++)
            if (pl->grp[i] != NULL)
                lr__sink(pl->grp[i]->hi);
        for (size_t i = 0; i < v; i++)
            pl->grp[i] = target_leaf(r, pl->fresh[i], e);
        for (size_t a = 0; a < v;) {
            size_t b = a;
            while (b < v && pl->grp[b] == pl->grp[a])
                b++;
            pl->extra += leaves_for(pl->grp[a]->n + (b - a)) - 1;
            a = b;
        }
    }
    LR_TRY(spares_new(r, pl->extra, &pl->spare));
    return plan_tab(r, r->nl + pl->extra, &pl->bits, &pl->ntab, &pl->ntab_cap);
}

/* Spread mv[0..k) over q leaves, evenly: `first`, then spares linked in
 * after it (their prev and lo set, `first`'s left as they are). Returns
 * the last leaf, whose next the caller links. */
static struct leaf *
spread(lr_ring *r, struct add_plan *pl, size_t k, struct leaf *first, size_t q)
{
    struct leaf *cur = first;
    size_t at = 0;
    for (size_t j = 0; j < q; j++) {
        if (j > 0) {
            struct leaf *s = pl->spare;
            pl->spare = s->next;
            s->prev = cur;
            s->lo = cur->hi;
            cur->next = s;
            cur = s;
        }
        size_t take = k / q + (j < k % q ? 1 : 0);
        memcpy(cur->e, pl->mv + at, take * sizeof *cur->e);
        cur->n = (uint32_t)take;
        cur->hi = cur->e[take - 1].pos;
        at += take;
    }
    r->work += k + q;
    return cur;
}

/* Merge fresh[a..b) into their target leaf l, splitting it if it
 * overflows: l keeps the first share and the spares after it take the
 * rest, so the list stays in ring order and no other leaf moves. A new
 * entry goes before l's last one unless l is the tail (target_leaf), so
 * only a split or the tail changes a hi, and only then does the table or
 * the next leaf need a look. With `fix_tab` the slots over the changed
 * run are repaired at once. */
static void
merge_group(lr_ring *r, const struct inst *e, struct add_plan *pl, size_t a,
            size_t b, bool fix_tab)
{
    struct leaf *l = pl->grp[a];
    size_t k = l->n + (b - a);
    uint64_t old_hi = l->hi;
    if (k <= LEAF) {
        /* In place, from the back: only the entries after the first new
         * one move, each once. */
        size_t x = l->n, y = b, w = k;
        while (y > a) {
            if (x > 0 && after_new(r, l->e[x - 1].pos, l->e[x - 1].id,
                                   pl->fresh[y - 1], e))
                l->e[--w] = l->e[--x];
            else
                l->e[--w] = (struct vnode){ pl->fresh[--y], e->id };
        }
        r->work += k - x;
        l->n = (uint32_t)k;
        l->hi = l->e[k - 1].pos;
        if (l->hi != old_hi) {
            if (l->next != NULL)
                l->next->lo = l->hi;
            if (fix_tab)
                tab_refresh(r, l, l == r->head, l->lo, slot_of(r, l->hi));
        }
        return;
    }
    struct leaf *after = l->next;
    size_t x = 0, y = a;
    k = 0;
    while (x < l->n || y < b) {
        bool take_old =
            y == b || (x < l->n &&
                       !after_new(r, l->e[x].pos, l->e[x].id, pl->fresh[y], e));
        if (take_old)
            pl->mv[k++] = l->e[x++];
        else
            pl->mv[k++] = (struct vnode){ pl->fresh[y++], e->id };
    }
    size_t q = leaves_for(k);
    struct leaf *last = spread(r, pl, k, l, q);
    last->next = after;
    if (after != NULL) {
        after->prev = last;
        after->lo = last->hi;
    } else {
        r->tail = last;
    }
    r->nl += q - 1;
    /* only entries were added: the run's hi can only have grown */
    if (fix_tab)
        tab_refresh(r, l, l == r->head, l->lo, slot_of(r, last->hi));
}

/* Phase 2 of an add: cannot fail. */
static void
commit_add(lr_ring *r, const struct inst *e, struct add_plan *pl)
{
    size_t v = r->vnodes;
    bool rebuild = pl->bits != r->tab_bits || r->tab == NULL;
    if (r->nl == 0) {
        for (size_t i = 0; i < v; i++)
            pl->mv[i] = (struct vnode){ pl->fresh[i], e->id };
        struct leaf *first = pl->spare;
        pl->spare = first->next;
        first->prev = NULL;
        first->lo = 0;
        struct leaf *last = spread(r, pl, v, first, pl->extra);
        last->next = NULL;
        r->head = first;
        r->tail = last;
        r->nl = pl->extra;
    } else {
        for (size_t a = 0; a < v;) {
            size_t b = a;
            while (b < v && pl->grp[b] == pl->grp[a])
                b++;
            merge_group(r, e, pl, a, b, !rebuild);
            a = b;
        }
    }
    assert(pl->spare == NULL);
    pl->extra = 0;
    r->n += v;
    if (rebuild) {
        if (pl->ntab != NULL) {
            lr__free(&r->mem, r->tab, r->tab_cap * sizeof *r->tab);
            r->tab = pl->ntab;
            r->tab_cap = pl->ntab_cap;
            pl->ntab = NULL;
            pl->ntab_cap = 0;
        }
        r->tab_bits = pl->bits;
        tab_build(r);
    }
}

/* ---- public API -------------------------------------------------------- */

LR__INIT_SIZED(lr_ring_options_init_sized, lr_ring_options, options_defaults,
               .vnodes = DEFAULT_VNODES, .max_instances = DEFAULT_MAX_INSTANCES)

lr_status
lr_ring_create(const lr_ring_options *opt, lr_ring **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    lr_ring_options o;
    lr_ring_options_init(&o);
    if (opt != NULL)
        LR_TRY(lr__copy_sized(&o, sizeof o, opt, LR_RING_OPTIONS_SIZE_V1));
    LR_RETURN_IF(o.vnodes > LR_RING_MAX_VNODES, LR_EINVAL);
    LR_RETURN_IF(o.max_instances > LR__RING_MAX_INSTANCES, LR_EINVAL);
    if (o.vnodes == 0)
        o.vnodes = DEFAULT_VNODES;
    if (o.max_instances == 0)
        o.max_instances = DEFAULT_MAX_INSTANCES;

    lr_ring *r;
    LR_TRY(LR__HANDLE_NEW(r, lr_ring, o.allocator));
    r->vnodes = o.vnodes;
    r->max_instances = o.max_instances;
    *out = r;
    return LR_OK;
}

static void
free_leaves(lr_ring *r, struct leaf *l)
{
    while (l != NULL) {
        struct leaf *next = l->next;
        leaf_free(r, l);
        l = next;
    }
}

void
lr_ring_destroy(lr_ring *ring)
{
    if (ring == NULL)
        return;
    struct inst *e;
    struct inst *tmp;
    HASH_ITER(hh_id, ring->by_id, e, tmp)
    {
        map_del(ring, e);
        lr__free(&ring->mem, e, inst_size(e->len));
    }
    free_leaves(ring, ring->head);
    lr__free(&ring->mem, ring->tab, ring->tab_cap * sizeof *ring->tab);
    LR__HANDLE_FREE(ring, lr_ring);
}

/* 1..LR_RING_MAX_NAME bytes. The scan stops one byte past the longest legal
 * name, so an unterminated buffer is never read far. */
static lr_status
check_name(const char *name, size_t *len)
{
    LR_RETURN_IF(name == NULL, LR_EINVAL);
    size_t n = 0;
    while (n <= LR_RING_MAX_NAME && name[n] != '\0')
        n++;
    LR_RETURN_IF(n == 0 || n > LR_RING_MAX_NAME, LR_EINVAL);
    *len = n;
    return LR_OK;
}

/* A record for (name, id), entered in both maps: LR_OK, LR_EEXIST (the name
 * or the id is placed) or LR_ENOMEM, with nothing left behind on failure. */
static lr_status
inst_enter(lr_ring *r, const char *name, size_t len, uint32_t id,
           struct inst **out)
{
    LR_RETURN_IF(map_find_name(r, name, len) != NULL, LR_EEXIST);
    LR_RETURN_IF(map_find_id(r, id) != NULL, LR_EEXIST);
    struct inst *e = lr__calloc(&r->mem, 1, inst_size(len));
    if (e == NULL)
        return LR_ENOMEM;
    e->id = id;
    e->len = (uint32_t)len;
    memcpy(e->name, name, len + 1);
    if (map_add(r, e) != LR_OK) {
        lr__free(&r->mem, e, inst_size(len));
        return LR_ENOMEM;
    }
    *out = e;
    return LR_OK;
}

/* Undo inst_enter. Never fails. */
static void
inst_drop(lr_ring *r, struct inst *e)
{
    map_del(r, e);
    lr__free(&r->mem, e, inst_size(e->len));
}

lr_status
lr__ring_add_at(lr_ring *r, const char *name, uint32_t id, const uint64_t *pos)
{
    size_t len;
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    LR_TRY(check_name(name, &len));
    LR_RETURN_IF(id == UINT32_MAX, LR_EINVAL); /* LR_INSTANCE_NONE */
    LR_RETURN_IF(map_find_name(r, name, len) != NULL, LR_EEXIST);
    LR_RETURN_IF(map_find_id(r, id) != NULL, LR_EEXIST);
    LR_RETURN_IF(r->count >= r->max_instances, LR_ELIMIT);

    /* Everything that can fail comes first (the record and the maps, then
     * plan_add); the commit cannot fail. n <= 65536 * 4096 = 2^28
     * entries. The plan reads names only for ties, through the maps, and
     * e's own entries are not in the leaves yet, so entering e first
     * changes no target. */
    struct inst *e;
    LR_TRY(inst_enter(r, name, len, id, &e));
    struct add_plan pl;
    lr_status st = plan_add(r, e, pos, &pl);
    if (st != LR_OK) {
        /* Undo: free only what this call allocated. */
        plan_free(r, &pl);
        inst_drop(r, e);
        return st;
    }
    commit_add(r, e, &pl);
    plan_free(r, &pl);
    r->count++;
    if (pos != NULL)
        r->custom_pos = true;
    return LR_OK;
}

lr_status
lr_ring_add(lr_ring *ring, const char *name, uint32_t id)
{
    return lr__ring_add_at(ring, name, id, NULL);
}

/* After one entry left leaf l (whose hi was old_hi), restore the leaf
 * invariants locally: an empty leaf is unlinked; one down to half a
 * split's fill that fits together with its predecessor, else its
 * successor, within LEAF_MERGE entries joins it; then the table slots
 * over the changed run are repaired. Looking at the neighbours only for a
 * leaf that small spares most deletions two header reads (cache misses in
 * a large ring) and still leaves no leaf below half that fill beside one
 * it fits with: leaves stay about a third full or more, as 0.2's one pass
 * over all leaves kept them. The entries keep their order (a merge
 * appends the later leaf to the earlier), and no leaf outside l and one
 * neighbour changes. Allocates nothing, never fails. */
static void
leaf_shrunk(lr_ring *r, struct leaf *l, uint64_t old_hi)
{
    bool small = l->n <= LEAF_MERGE / 2;
    if (l->n > 0) {
        l->hi = l->e[l->n - 1].pos;
        if (!small && l->hi == old_hi)
            return; /* the common case: no neighbour, no slot to look at */
    }
    struct leaf *p = l->prev;
    struct leaf *x = l->next;
    if (l->n == 0) {
        /* p's next changes, and slots copy it: the run starts at p */
        leaf_unlink(r, l);
        leaf_free(r, l);
        if (p != NULL)
            tab_refresh(r, p, p == r->head, p->lo, slot_of(r, old_hi));
        else
            tab_refresh(r, x, true, 0, slot_of(r, old_hi));
        return;
    }
    if (small && p != NULL && p->n + l->n <= LEAF_MERGE) {
        memcpy(p->e + p->n, l->e, l->n * sizeof *l->e);
        p->n += l->n;
        p->hi = l->hi;
        r->work += l->n;
        leaf_unlink(r, l);
        leaf_free(r, l);
        tab_refresh(r, p, p == r->head, p->lo, slot_of(r, old_hi));
        return;
    }
    if (small && x != NULL && l->n + x->n <= LEAF_MERGE) {
        uint64_t x_hi = x->hi;
        memcpy(l->e + l->n, x->e, x->n * sizeof *x->e);
        l->n += x->n;
        l->hi = x_hi;
        r->work += x->n;
        leaf_unlink(r, x);
        leaf_free(r, x);
        tab_refresh(r, l, l == r->head, l->lo, slot_of(r, x_hi));
        return;
    }
    if (l->hi != old_hi) {
        if (x != NULL)
            x->lo = l->hi;
        tab_refresh(r, l, l == r->head, l->lo, slot_of(r, old_hi));
    }
}

/* Delete the entry (p, id). Entries with the same position (ties) may
 * spill into the next leaves. */
static void
delete_entry(lr_ring *r, uint64_t p, uint32_t id)
{
    for (struct leaf *l = leaf_find(r, p); l != NULL; l = l->next) {
        uint32_t j = lower_in_leaf_at(l, p);
        while (j < l->n && l->e[j].pos == p && l->e[j].id != id)
            j++;
        if (j < l->n && l->e[j].pos == p) {
            uint64_t old_hi = l->hi;
            memmove(l->e + j, l->e + j + 1, (l->n - j - 1) * sizeof *l->e);
            l->n--;
            r->work += l->n - j + 1;
            leaf_shrunk(r, l, old_hi);
            return;
        }
        if (j < l->n) /* a later position: not in the ring */
            break;
        r->work++;
    }
    assert(!"every vnode of a placed instance is in the ring");
}

/* Delete every entry of e, whose positions come from its name. In chunks
 * on the stack (removal allocates nothing): first the table slots of the
 * whole chunk, then the leaf headers they point at, then the lines each
 * entry's guess falls on, so the cache misses of a chunk overlap instead
 * of queueing (real loads, kept by lr__sink); then the
 * deletions, which find all of it cached. The warm-up only reads, so the
 * deletions reshaping the leaves after it cannot mislead it. */
static void
delete_all(lr_ring *r, const struct inst *e)
{
    enum {
        CHUNK = 32
    };
    uint64_t p[CHUNK];
    const struct leaf *l[CHUNK];
    for (uint32_t v0 = 0; v0 < r->vnodes; v0 += CHUNK) {
        uint32_t m = r->vnodes - v0 < CHUNK ? r->vnodes - v0 : CHUNK;
        for (uint32_t i = 0; i < m; i++) {
            p[i] = vnode_pos(e->name, e->len, v0 + i);
            l[i] = tslot_leaf(&r->tab[slot_of(r, p[i])], p[i]);
        }
        for (uint32_t i = 0; i < m; i++)
            if (l[i] != NULL)
                lr__sink(l[i]->hi);
        for (uint32_t i = 0; i < m; i++) {
            if (l[i] != NULL && l[i]->hi >= p[i]) {
                uint32_t g = guess_in_leaf(l[i], p[i]);
                lr__sink(l[i]->e[g < l[i]->n ? g : l[i]->n - 1].pos);
            }
        }
        for (uint32_t i = 0; i < m; i++)
            delete_entry(r, p[i], e->id);
    }
}

/* The test-only path for explicit positions, which are not recomputable
 * from the name: filter the instance out of every leaf, then one pass
 * drops empty leaves and merges neighbours (as leaf_shrunk would), and
 * the table is rebuilt. O(entries). */
static void
remove_everywhere(lr_ring *r, uint32_t id)
{
    struct leaf *l = r->head;
    struct leaf *w = NULL; /* the last leaf kept */
    r->head = NULL;
    r->nl = 0;
    while (l != NULL) {
        struct leaf *next = l->next;
        uint32_t k = 0;
        for (uint32_t j = 0; j < l->n; j++) {
            if (l->e[j].id != id)
                l->e[k++] = l->e[j];
        }
        l->n = k;
        r->work += l->n;
        if (k == 0) {
            leaf_free(r, l);
        } else if (w != NULL && w->n + k <= LEAF_MERGE) {
            memcpy(w->e + w->n, l->e, k * sizeof *l->e);
            w->n += k;
            w->hi = w->e[w->n - 1].pos;
            leaf_free(r, l);
        } else {
            l->hi = l->e[k - 1].pos;
            l->prev = w;
            l->lo = w != NULL ? w->hi : 0;
            if (w != NULL)
                w->next = l;
            else
                r->head = l;
            w = l;
            r->nl++;
        }
        l = next;
    }
    /* Merges only ever grow the last leaf kept, before its successor is
     * linked, so every lo set above is final. */
    if (w != NULL)
        w->next = NULL;
    r->tail = w;
}

lr_status
lr_ring_remove(lr_ring *ring, uint32_t id)
{
    LR_RETURN_IF(ring == NULL || id == UINT32_MAX, LR_EINVAL);
    struct inst *e = map_find_id(ring, id);
    LR_RETURN_IF(e == NULL, LR_ENOENT);

    /* Positions from the name (or, for the test-only explicit positions,
     * a scan of every leaf). No step allocates, so removal cannot fail
     * (lr_ring.h allows LR_ENOMEM; it is never returned). */
    bool rebuild = ring->custom_pos;
    if (ring->custom_pos) {
        remove_everywhere(ring, id);
    } else {
        delete_all(ring, e);
    }
    ring->n -= ring->vnodes;
    inst_drop(ring, e);
    ring->count--;
    if (ring->nl == 0) {
        lr__free(&ring->mem, ring->tab, ring->tab_cap * sizeof *ring->tab);
        ring->tab = NULL;
        ring->tab_cap = 0;
        ring->tab_bits = 0;
        return LR_OK;
    }
    if (!tab_ok(ring->tab_bits, ring->nl)) {
        /* Fewer slots: the block in hand is big enough. Give the rest
         * back if the allocator can; if not, the larger block stays and
         * its capacity is remembered, so it is later freed with the size
         * it was allocated with. */
        ring->tab_bits = tab_bits_for(ring->nl) + 1;
        if (ring->tab_bits > TAB_MAX_BITS)
            ring->tab_bits = TAB_MAX_BITS;
        rebuild = true;
        size_t slots = (size_t)1 << ring->tab_bits;
        void *p = lr__realloc(&ring->mem, ring->tab,
                              ring->tab_cap * sizeof *ring->tab,
                              slots * sizeof *ring->tab);
        if (p != NULL) {
            ring->tab = p;
            ring->tab_cap = slots;
        }
    }
    if (rebuild)
        tab_build(ring);
    return LR_OK;
}

uint32_t
lr_ring_count(const lr_ring *ring)
{
    return ring == NULL ? 0 : ring->count;
}

int
lr_ring_contains(const lr_ring *ring, uint32_t id)
{
    return ring != NULL && map_find_id(ring, id) != NULL;
}

lr_status
lr_ring_candidates(const lr_ring *ring, uint64_t key, uint32_t k, uint32_t *out,
                   uint32_t *n_out)
{
    LR_RETURN_IF(ring == NULL || out == NULL || n_out == NULL, LR_EINVAL);
    LR_RETURN_IF(k == 0 || k > LR_RING_MAX_K, LR_EINVAL);
    if (ring->count == 0) {
        *n_out = 0;
        return LR_ESTATE;
    }
    uint32_t want = k < ring->count ? k : ring->count;
    uint8_t key_le[8];
    lr__put_u64(key_le, key);
    unsigned shift = 64u - ring->tab_bits;

    /* Two passes, so the cache misses of the k points overlap instead of
     * queueing: the table loads of all points are independent of each
     * other; only the walk past picked instances depends on earlier
     * picks. */
    uint64_t pt[LR_RING_MAX_K];
    const struct leaf *at[LR_RING_MAX_K];
    for (uint32_t j = 0; j < want; j++) {
        pt[j] = key_point(key_le, j);
        at[j] = tslot_leaf(&ring->tab[pt[j] >> shift], pt[j]);
    }
    for (uint32_t j = 0; j < want; j++) {
        /* First entry at or after the point, wrapping past the tail to
         * the head. */
        const struct leaf *l = at[j];
        while (l != NULL && l->hi < pt[j])
            l = l->next;
        uint32_t e = 0;
        if (l == NULL)
            l = ring->head;
        else
            e = lower_in_leaf_at(l, pt[j]);
        /* Walk on past instances already picked. It ends: fewer than
         * `count` are picked, so an unpicked instance owns some entry. */
        for (;;) {
            uint32_t id = l->e[e].id;
            uint32_t p = 0;
            while (p < j && out[p] != id)
                p++;
            if (p == j)
                break;
            if (++e == l->n) {
                e = 0;
                l = l->next != NULL ? l->next : ring->head;
            }
        }
        out[j] = l->e[e].id;
    }
    *n_out = want;
    return LR_OK;
}

/* ---- bulk build (ring.h) ------------------------------------------------- */

/* Whether entry a sorts before entry b: position, then name bytes. Both
 * ids are in the maps. */
static bool
vn_less(const lr_ring *r, const struct vnode *a, const struct vnode *b)
{
    if (a->pos != b->pos)
        return a->pos < b->pos;
    const struct inst *ia = map_find_id(r, a->id);
    const struct inst *ib = map_find_id(r, b->id);
    if (LR_NEVER(ia == NULL || ib == NULL))
        return false;
    return name_cmp(ia->name, ia->len, ib->name, ib->len) < 0;
}

static void
vn_sift(const lr_ring *r, struct vnode *a, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && vn_less(r, &a[child], &a[child + 1]))
            child++;
        if (!vn_less(r, &a[root], &a[child]))
            return;
        struct vnode t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

/* Sort one bucket: insertion sort for the handful hashed positions put in
 * a bucket, heapsort past that, so skewed explicit positions stay
 * O(m log m). */
static void
vn_sort(const lr_ring *r, struct vnode *a, size_t m)
{
    if (m <= 32) {
        for (size_t i = 1; i < m; i++) {
            struct vnode t = a[i];
            size_t j = i;
            while (j > 0 && vn_less(r, &t, &a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = t;
        }
        return;
    }
    for (size_t i = m / 2; i-- > 0;)
        vn_sift(r, a, i, m);
    for (size_t end = m; end > 1;) {
        end--;
        struct vnode t = a[0];
        a[0] = a[end];
        a[end] = t;
        vn_sift(r, a, 0, end);
    }
}

/* The new leaves of a bulk build, seen as one array of N entries: the
 * first `big` leaves hold per + 1 entries, the others per (per <
 * LEAF_FILL). */
struct bulk {
    struct leaf **lv; /* nl new leaves, in ring order */
    size_t nl;
    size_t per, big;
    unsigned c1;       /* level-1 bucket bits: 2^c1 buckets */
    uint32_t *cnt1;    /* 2^c1 + 1 counts, then starts */
    unsigned c2;       /* level-2 bits for the largest bucket */
    uint32_t *cnt2;    /* 2^c2 + 1 */
    struct vnode *tmp; /* two scratch arrays of the largest bucket */
    size_t tmp_n;
    unsigned bits; /* table bits for nl */
    struct tslot *ntab;
    size_t ntab_cap;
};

/* The c for 2^c buckets of at least per_bucket of m entries, at most
 * `most`. Level 1: buckets of 8k..16k entries (up to 256 KiB, so one sorts
 * in the core's own cache) and at most 2^10 of them, the write streams the
 * scatter keeps open: with 2^12 (and 2^18 in a one-level first try), the
 * scattered writes missed the TLB and a 65,534-instance build took 2.5 s
 * (17 s), against 1.4 s. Level 2: about 8 entries a bucket. */
static unsigned
bulk_bits(size_t m, size_t per_bucket, unsigned most)
{
    unsigned c = 0;
    while (c < most && (per_bucket << (c + 1)) <= m)
        c++;
    return c;
}

static size_t
bulk_bucket(uint64_t pos, unsigned skip, unsigned bits)
{
    return bits == 0 ? 0 : (size_t)((pos << skip) >> (64u - bits));
}

/* Entry i of the new leaves. */
static struct vnode *
bulk_slot(const struct bulk *b, size_t i)
{
    size_t edge = b->big * (b->per + 1);
    if (i < edge)
        return &b->lv[i / (b->per + 1)]->e[i % (b->per + 1)];
    i -= edge;
    return &b->lv[b->big + i / b->per]->e[i % b->per];
}

/* Copy entries [from, from + m) of the new leaves out to `to` (out) or
 * back from it, leaf by leaf. */
static void
bulk_copy(const struct bulk *b, size_t from, size_t m, struct vnode *buf,
          bool out)
{
    while (m > 0) {
        struct vnode *at = bulk_slot(b, from);
        size_t edge = b->big * (b->per + 1);
        size_t cap = from < edge ? b->per + 1 : b->per;
        size_t off = from < edge ? from % (b->per + 1) : (from - edge) % b->per;
        size_t take = cap - off < m ? cap - off : m;
        if (out)
            memcpy(buf, at, take * sizeof *buf);
        else
            memcpy(at, buf, take * sizeof *buf);
        buf += take;
        from += take;
        m -= take;
    }
}

static void
bulk_free(lr_ring *r, struct bulk *b)
{
    for (size_t i = 0; b->lv != NULL && i < b->nl; i++)
        if (b->lv[i] != NULL)
            leaf_free(r, b->lv[i]);
    lr__free(&r->mem, b->lv, b->nl * sizeof *b->lv);
    if (b->cnt1 != NULL)
        lr__free(&r->mem, b->cnt1,
                 (((size_t)1 << b->c1) + 1) * sizeof *b->cnt1);
    if (b->cnt2 != NULL)
        lr__free(&r->mem, b->cnt2,
                 (((size_t)1 << b->c2) + 1) * sizeof *b->cnt2);
    lr__free(&r->mem, b->tmp, 2 * b->tmp_n * sizeof *b->tmp);
    lr__free(&r->mem, b->ntab, b->ntab_cap * sizeof *b->ntab);
    memset(b, 0, sizeof *b);
}

/* Position v of new instance e (batch index i). */
static uint64_t
bulk_pos(const lr_ring *r, const struct inst *e, const uint64_t *pos, size_t i,
         uint32_t v)
{
    return pos != NULL ? pos[i * r->vnodes + v] : vnode_pos(e->name, e->len, v);
}

/* Phase 1 of a bulk build, the new instances already in the maps: every
 * allocation, sized by a first count of the level-1 buckets. */
static lr_status
bulk_plan(lr_ring *r, const uint32_t *ids, const uint64_t *pos, size_t n,
          struct bulk *b)
{
    memset(b, 0, sizeof *b);
    size_t total = r->n + n * r->vnodes; /* <= 2^28 */
    size_t nl = (total + LEAF_FILL - 1) / LEAF_FILL;
    b->per = total / nl;
    b->big = total % nl;
    b->lv = lr__calloc(&r->mem, nl, sizeof *b->lv);
    if (b->lv == NULL)
        return LR_ENOMEM;
    b->nl = nl;
    for (size_t i = 0; i < nl; i++)
        if ((b->lv[i] = leaf_new(r)) == NULL)
            return LR_ENOMEM;
    unsigned c1 = bulk_bits(total, 8192, 10);
    b->cnt1 = lr__calloc(&r->mem, ((size_t)1 << c1) + 1, sizeof *b->cnt1);
    if (b->cnt1 == NULL)
        return LR_ENOMEM;
    b->c1 = c1;
    for (const struct leaf *l = r->head; l != NULL; l = l->next)
        for (uint32_t j = 0; j < l->n; j++)
            b->cnt1[bulk_bucket(l->e[j].pos, 0, c1)]++;
    for (size_t i = 0; i < n; i++) {
        const struct inst *e = map_find_id(r, ids[i]);
        for (uint32_t v = 0; v < r->vnodes; v++)
            b->cnt1[bulk_bucket(bulk_pos(r, e, pos, i, v), 0, c1)]++;
    }
    size_t most = 0;
    for (size_t h = 0; h < ((size_t)1 << c1); h++)
        most = b->cnt1[h] > most ? b->cnt1[h] : most;
    unsigned c2 = bulk_bits(most, 8, 16);
    b->cnt2 = lr__alloc(&r->mem, (((size_t)1 << c2) + 1) * sizeof *b->cnt2);
    if (b->cnt2 == NULL)
        return LR_ENOMEM;
    b->c2 = c2;
    b->tmp = lr__alloc(&r->mem, 2 * most * sizeof *b->tmp);
    if (b->tmp == NULL)
        return LR_ENOMEM;
    b->tmp_n = most;
    /* the table: reuse the ring's block when it is big enough */
    b->bits = tab_bits_for(nl);
    size_t slots = (size_t)1 << b->bits;
    if (slots > r->tab_cap) {
        b->ntab = lr__alloc(&r->mem, slots * sizeof *b->ntab);
        if (b->ntab == NULL)
            return LR_ENOMEM;
        b->ntab_cap = slots;
    }
    return LR_OK;
}

/* Sort m entries of one level-1 bucket (positions sharing their top c1
 * bits) from `src` into `dst`: a counting sort on the next bits, then each
 * small level-2 bucket by (position, name). */
static void
bulk_sort_bucket(const lr_ring *r, struct bulk *b, struct vnode *src,
                 struct vnode *dst, size_t m)
{
    unsigned c2 = bulk_bits(m, 8, b->c2);
    size_t nb = (size_t)1 << c2;
    memset(b->cnt2, 0, (nb + 1) * sizeof *b->cnt2);
    for (size_t i = 0; i < m; i++)
        b->cnt2[bulk_bucket(src[i].pos, b->c1, c2)]++;
    uint32_t at = 0;
    for (size_t h = 0; h <= nb; h++) {
        uint32_t c = b->cnt2[h];
        b->cnt2[h] = at;
        at += c;
    }
    for (size_t i = 0; i < m; i++)
        dst[b->cnt2[bulk_bucket(src[i].pos, b->c1, c2)]++] = src[i];
    /* cnt2[h] is now the end of level-2 bucket h */
    size_t from = 0;
    for (size_t h = 0; h < nb; h++) {
        vn_sort(r, dst + from, b->cnt2[h] - from);
        from = b->cnt2[h];
    }
}

/* Phase 2 of a bulk build: cannot fail. Scatter every entry into its
 * level-1 bucket's range of the new leaves (2^c1 sequential streams),
 * sort each bucket through the scratch arrays, then link the new leaves
 * and drop the old ones. */
static void
bulk_commit(lr_ring *r, const uint32_t *ids, const uint64_t *pos, size_t n,
            struct bulk *b)
{
    size_t nb = (size_t)1 << b->c1;
    uint32_t at = 0; /* counts become each bucket's next free index */
    for (size_t h = 0; h <= nb; h++) {
        uint32_t c = b->cnt1[h];
        b->cnt1[h] = at;
        at += c;
    }
    for (const struct leaf *l = r->head; l != NULL; l = l->next)
        for (uint32_t j = 0; j < l->n; j++)
            *bulk_slot(b, b->cnt1[bulk_bucket(l->e[j].pos, 0, b->c1)]++) =
                l->e[j];
    for (size_t i = 0; i < n; i++) {
        const struct inst *e = map_find_id(r, ids[i]);
        for (uint32_t v = 0; v < r->vnodes; v++) {
            uint64_t p = bulk_pos(r, e, pos, i, v);
            *bulk_slot(b, b->cnt1[bulk_bucket(p, 0, b->c1)]++) =
                (struct vnode){ p, ids[i] };
        }
    }
    /* now cnt1[h] is the end of bucket h, and the start of bucket h + 1 */
    size_t total = r->n + n * r->vnodes;
    size_t from = 0;
    for (size_t h = 0; h < nb; h++) {
        size_t m = b->cnt1[h] - from;
        if (m > 1) {
            bulk_copy(b, from, m, b->tmp, true);
            bulk_sort_bucket(r, b, b->tmp, b->tmp + b->tmp_n, m);
            bulk_copy(b, from, m, b->tmp + b->tmp_n, false);
        }
        from = b->cnt1[h];
    }
    assert(from == total);
    r->work += 5 * total + nb;

    free_leaves(r, r->head);
    struct leaf *prev = NULL;
    for (size_t i = 0; i < b->nl; i++) {
        struct leaf *l = b->lv[i];
        l->n = (uint32_t)(b->per + (i < b->big ? 1 : 0));
        l->hi = l->e[l->n - 1].pos;
        l->lo = prev != NULL ? prev->hi : 0;
        l->prev = prev;
        l->next = NULL;
        if (prev != NULL)
            prev->next = l;
        prev = l;
    }
    r->head = b->lv[0];
    r->tail = prev;
    r->nl = b->nl;
    r->n = total;
    r->count += (uint32_t)n;
    memset(b->lv, 0, b->nl * sizeof *b->lv); /* the ring owns them now */
    if (b->ntab != NULL) {
        lr__free(&r->mem, r->tab, r->tab_cap * sizeof *r->tab);
        r->tab = b->ntab;
        r->tab_cap = b->ntab_cap;
        b->ntab = NULL;
        b->ntab_cap = 0;
    }
    r->tab_bits = b->bits;
    tab_build(r);
}

lr_status
lr__ring_add_many_at(lr_ring *r, const char *const *names, const uint32_t *ids,
                     size_t n, const uint64_t *pos)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    if (n == 0)
        return LR_OK;
    LR_RETURN_IF(names == NULL || ids == NULL, LR_EINVAL);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        LR_TRY(check_name(names[i], &len));
        LR_RETURN_IF(ids[i] == UINT32_MAX, LR_EINVAL);
    }
    LR_RETURN_IF(n > r->max_instances - r->count, LR_ELIMIT);

    /* Records and map entries first, one by one, so a name or id repeated
     * in the batch is found like one already placed; then the plan. Up to
     * then a failure undoes the records entered; the commit cannot fail. */
    size_t entered = 0;
    lr_status st = LR_OK;
    for (; entered < n; entered++) {
        struct inst *e;
        size_t len = strlen(names[entered]); /* checked above */
        st = inst_enter(r, names[entered], len, ids[entered], &e);
        if (st != LR_OK)
            break;
    }
    struct bulk b;
    memset(&b, 0, sizeof b);
    if (st == LR_OK)
        st = bulk_plan(r, ids, pos, n, &b);
    if (st != LR_OK) {
        bulk_free(r, &b);
        while (entered-- > 0)
            inst_drop(r, map_find_id(r, ids[entered]));
        return st;
    }
    bulk_commit(r, ids, pos, n, &b);
    bulk_free(r, &b);
    if (pos != NULL)
        r->custom_pos = true;
    return LR_OK;
}

lr_status
lr__ring_add_many(lr_ring *r, const char *const *names, const uint32_t *ids,
                  size_t n)
{
    return lr__ring_add_many_at(r, names, ids, n, NULL);
}

/* ---- internals for tests (ring.h) -------------------------------------- */

/* Whether (p, id) is in the ring. */
static bool
has_entry(const lr_ring *r, uint64_t p, uint32_t id)
{
    for (const struct leaf *l = leaf_at(r, p); l != NULL; l = l->next) {
        uint32_t j = lower_in_leaf(l, p);
        while (j < l->n && l->e[j].pos == p) {
            if (l->e[j].id == id)
                return true;
            j++;
        }
        if (j < l->n)
            return false;
    }
    return false;
}

lr_status
lr__ring_verify(const lr_ring *r)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    LR_RETURN_IF(r->vnodes == 0 || r->vnodes > LR_RING_MAX_VNODES, LR_ECORRUPT);
    LR_RETURN_IF(r->max_instances == 0 ||
                     r->max_instances > LR__RING_MAX_INSTANCES,
                 LR_ECORRUPT);
    LR_RETURN_IF(r->count > r->max_instances, LR_ECORRUPT);
    LR_RETURN_IF(HASH_CNT(hh_id, r->by_id) != r->count, LR_ECORRUPT);
    LR_RETURN_IF(HASH_CNT(hh_name, r->by_name) != r->count, LR_ECORRUPT);
    LR_RETURN_IF(r->n != (size_t)r->count * r->vnodes, LR_ECORRUPT);

    /* The two maps describe the same records. */
    struct inst *e;
    struct inst *tmp;
    HASH_ITER(hh_id, r->by_id, e, tmp)
    {
        LR_RETURN_IF(e->id == UINT32_MAX, LR_ECORRUPT);
        LR_RETURN_IF(e->len == 0 || e->len > LR_RING_MAX_NAME, LR_ECORRUPT);
        LR_RETURN_IF(strlen(e->name) != e->len, LR_ECORRUPT);
        LR_RETURN_IF(map_find_id(r, e->id) != e, LR_ECORRUPT);
        LR_RETURN_IF(map_find_name(r, e->name, e->len) != e, LR_ECORRUPT);
    }

    if (r->n == 0) {
        LR_RETURN_IF(r->nl != 0 || r->head != NULL || r->tail != NULL,
                     LR_ECORRUPT);
        LR_RETURN_IF(r->tab != NULL || r->tab_cap != 0 || r->tab_bits != 0,
                     LR_ECORRUPT);
        return LR_OK;
    }
    LR_RETURN_IF(r->head == NULL || r->tab == NULL, LR_ECORRUPT);

    /* The list: links agree both ways from head to tail, nl leaves of
     * 1..LEAF entries, each hi its last position and each lo its
     * predecessor's hi (0 at the head), and the whole sequence sorted by
     * (position, name) with every entry naming a placed instance. The
     * walk is bounded by nl, so a cycle is caught too. */
    const struct inst *prev = NULL;
    uint64_t prev_pos = 0;
    size_t total = 0;
    size_t leaves = 0;
    const struct leaf *before = NULL;
    const struct leaf *l = r->head;
    for (; l != NULL && leaves < r->nl; before = l, l = l->next, leaves++) {
        LR_RETURN_IF(l->prev != before, LR_ECORRUPT);
        LR_RETURN_IF(l->n == 0 || l->n > LEAF, LR_ECORRUPT);
        LR_RETURN_IF(l->hi != l->e[l->n - 1].pos, LR_ECORRUPT);
        LR_RETURN_IF(l->lo != (before != NULL ? before->hi : 0), LR_ECORRUPT);
        total += l->n;
        for (uint32_t j = 0; j < l->n; j++) {
            const struct inst *cur = map_find_id(r, l->e[j].id);
            LR_RETURN_IF(cur == NULL, LR_ECORRUPT);
            if (prev != NULL) {
                LR_RETURN_IF(prev_pos > l->e[j].pos, LR_ECORRUPT);
                LR_RETURN_IF(prev_pos == l->e[j].pos &&
                                 name_cmp(prev->name, prev->len, cur->name,
                                          cur->len) > 0,
                             LR_ECORRUPT);
            }
            prev = cur;
            prev_pos = l->e[j].pos;
        }
    }
    LR_RETURN_IF(l != NULL || leaves != r->nl || before != r->tail,
                 LR_ECORRUPT);
    LR_RETURN_IF(total != r->n, LR_ECORRUPT);

    /* The table's size is in its band, and every slot points at the
     * first leaf whose hi reaches it (NULL past the tail's). */
    LR_RETURN_IF(!tab_ok(r->tab_bits, r->nl), LR_ECORRUPT);
    size_t slots = (size_t)1 << r->tab_bits;
    LR_RETURN_IF(r->tab_cap < slots, LR_ECORRUPT);
    l = r->head;
    for (size_t h = 0; h < slots; h++) {
        while (l != NULL && slot_of(r, l->hi) < h)
            l = l->next;
        const struct tslot *t = &r->tab[h];
        LR_RETURN_IF(t->l != l, LR_ECORRUPT);
        LR_RETURN_IF(t->next != (l != NULL ? l->next : NULL), LR_ECORRUPT);
        LR_RETURN_IF(t->hi != (l != NULL ? l->hi : 0), LR_ECORRUPT);
    }

    /* Each instance sits exactly where its name hashes. With n equal to
     * count * vnodes, finding every expected (position, id) means the
     * leaves hold nothing else (up to a 64-bit collision inside one name,
     * which would only repeat an identical entry). */
    if (!r->custom_pos) {
        HASH_ITER(hh_id, r->by_id, e, tmp)
        {
            for (uint32_t v = 0; v < r->vnodes; v++)
                LR_RETURN_IF(
                    !has_entry(r, vnode_pos(e->name, e->len, v), e->id),
                    LR_ECORRUPT);
        }
    }
    return LR_OK;
}

uint64_t
lr__ring_digest(const lr_ring *r)
{
    if (r == NULL)
        return 0;
    uint8_t b[16];
    lr__put_u32(b, r->vnodes);
    lr__put_u32(b + 4, r->max_instances);
    lr__put_u32(b + 8, r->count);
    lr__put_u32(b + 12, (uint32_t)r->n);
    uint64_t d = lr__hash(b, 16, DIGEST_SEED);
    for (const struct leaf *l = r->head; l != NULL; l = l->next) {
        for (uint32_t j = 0; j < l->n; j++) {
            lr__put_u64(b, l->e[j].pos);
            lr__put_u32(b + 8, l->e[j].id);
            d = lr__hash(b, 12, d);
        }
    }
    /* A sum over the records: the maps iterate in insertion order, which
     * the digest must not see. */
    uint64_t s = 0;
    struct inst *e;
    struct inst *tmp;
    HASH_ITER(hh_id, r->by_id, e, tmp)
    {
        s += lr__hash(e->name, e->len, lr__mix64(e->id, DIGEST_SEED));
    }
    return d ^ lr__mix64(s, DIGEST_SEED);
}

size_t
lr__ring_mem_live(const lr_ring *r)
{
    return r == NULL ? 0 : r->mem.live;
}

uint64_t
lr__ring_work(const lr_ring *r)
{
    return r == NULL ? 0 : r->work;
}
