/* lr_ring: the dual consistent-hash ring (public contract in lr_ring.h).
 *
 * Layout. Every instance owns `vnodes` points on a 64-bit circle; all of
 * them, sorted by (position, name bytes), live in a sequence of leaves of
 * at most LEAF (64) entries. An array of leaf pointers keeps the leaves in
 * ring order, next to the last position of each leaf (`last`) and a jump
 * table from the top bits of a position to the first leaf that can hold
 * it. Here 3 instances with 2 vnodes each in 3 leaves (positions shown by
 * their top byte), b = 2 table bits:
 *
 *     name --XXH3(v as 4 LE bytes ++ name, LR_SEED_VNODE)--> vnode v
 *
 *   tab[h] = first leaf whose last position has top b bits >= h
 *
 *     tab[0]=0  tab[1]=1  tab[2]=1  tab[3]=2
 *
 *   lv[0]                 lv[1]                      lv[2]
 *   +--------+--------+   +--------+--------+        +--------+
 *   | 0x1c.. | 0x4a.. |   | 0x6f.. | 0x93.. |        | 0xc5.. | 0xe0..
 *   | id 7 A | id 9 B |   | id 7 A | id 4 C |        | id 9 B | id 4 C
 *   +--------+--------+   +--------+--------+        +--------+--------+
 *   last[0] = 0x4a..      last[1] = 0x93..           last[2] = 0xe0..
 *
 *   by_id, by_name: two uthash tables over the same struct inst records
 *   (name copied, id), used for duplicate checks, removal and tie breaks.
 *
 * Worked example (k = 2). A key's points are XXH3(j as 4 LE bytes ++ key
 * as 8 LE bytes, LR_SEED_RINGK). Say point 0 is 0x50..: its top 2 bits are
 * 1, so the walk starts at leaf tab[1] = 1, whose last position 0x93.. is
 * >= the point; inside it the first entry >= 0x50.. is 0x6f..: out[0] = 7
 * (A). Say point 1 is 0x60..: it also lands on 0x6f.., but A is taken, so
 * the walk continues clockwise to 0x93..: out[1] = 4 (C). A point past the
 * last entry, say 0xf0.., runs off the end and wraps to lv[0]'s first
 * entry. Add D with vnodes at 0x58.. and 0xa0..: point 0 now stops at
 * 0x58.. and picks D, point 1 still picks A; a key neither of whose walks
 * meets a D vnode before its old pick keeps its old candidates exactly.
 *
 * Why this shape. A query costs, per point, one XXH3 call on 8 bytes, one
 * table read, usually one `last` read, and in one leaf a guess from its
 * bounds (positions are hashes, spread evenly) that is usually right
 * within a step; position and id sit side by side, so the pick reads the
 * line the search loaded. Nothing is written, so queries are safe from many
 * threads at once. Ties between positions are broken by name bytes
 * (memcmp, then length): the order is a function of the set of names
 * alone, never of insertion order, so every gateway replica agrees.
 *
 * Churn is O(vnodes x log(total vnodes)) plus one O(leaves) pass (issue
 * 16: 0.1 kept one sorted array and rebuilt it, instances x vnodes per add:
 * 10,000 adds took 174 s and one add at 10k instances held route() for
 * 48 ms). Adding an instance sorts its vnodes, finds each one's leaf by
 * binary search over `last`, merges each leaf's share into it and splits
 * a leaf that overflows into leaves at most 3/4 full. Everything that can
 * fail comes first: the instance record, its map entries, the new leaves a
 * split needs (counted exactly before anything moves), bigger leaf arrays
 * and jump table if needed, and a scratch buffer; only then does the
 * commit move entries, which cannot fail (B11). Removing recomputes the
 * instance's positions, finds and deletes each entry in its leaf, then in
 * one pass drops empty leaves and merges neighbours that fit together in
 * a split leaf's fill; then it tries to shrink the leaf arrays and the
 * jump table. It allocates nothing it needs, so taking a dead instance off
 * the ring works even when memory is exhausted. Both rebuild the jump
 * table (O(leaves)).
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
/* Neighbouring leaves whose entries together fit in a split leaf's fill
 * are merged on removal, so churn cannot leave a ring of nearly empty
 * leaves. */
#define LEAF_MERGE LEAF_FILL
/* At most 2^28 entries in at least 2^28 / LEAF leaves: 2^23 jump slots
 * suffice (one slot per leaf at most). */
#define TAB_MAX_BITS 23u

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

struct leaf {
    uint32_t n;           /* entries, 1..LEAF in a ring (0 only while built) */
    struct vnode e[LEAF]; /* sorted by (position, name) */
};

struct lr_ring {
    struct lr__mem mem;
    uint32_t vnodes;        /* per instance, 1..LR_RING_MAX_VNODES */
    uint32_t max_instances; /* 1..LR__RING_MAX_INSTANCES */
    uint32_t count;         /* instances placed */
    bool custom_pos;        /* lr__ring_add_at placed explicit positions */
    struct inst *by_id;     /* uthash head over hh_id */
    struct inst *by_name;   /* uthash head over hh_name */
    struct leaf **lv;       /* nl leaves in ring order; NULL if none */
    uint64_t *last;         /* last[i] = lv[i]->e[lv[i]->n - 1].pos */
    size_t nl;              /* leaves */
    size_t nl_cap;          /* leaf slots allocated in lv and last */
    size_t n;               /* entries: count * vnodes */
    uint32_t *tab;          /* 2^tab_bits slots; NULL when nl == 0 */
    unsigned tab_bits;      /* tab_bits_for(nl), 0 when nl == 0 */
    size_t tab_cap;         /* slots allocated, >= 2^tab_bits */
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

/* ---- leaves -------------------------------------------------------------- */

/* One jump slot per leaf at most (2^b <= nl for nl >= 2). */
static unsigned
tab_bits_for(size_t nl)
{
    unsigned b = 1;
    while (b < TAB_MAX_BITS && ((size_t)2 << b) <= nl)
        b++;
    return b;
}

static void
tab_fill(uint32_t *tab, unsigned bits, const uint64_t *last, size_t nl)
{
    unsigned shift = 64u - bits;
    size_t slots = (size_t)1 << bits;
    size_t i = 0;
    for (size_t h = 0; h < slots; h++) {
        while (i < nl && (last[i] >> shift) < h)
            i++;
        tab[h] = (uint32_t)i;
    }
}

/* The first leaf whose last position is >= p, or nl: starts at the jump
 * slot of p and steps (a slot covers about one leaf). */
static size_t
leaf_for(const lr_ring *r, uint64_t p)
{
    size_t i = r->tab[p >> (64u - r->tab_bits)];
    while (i < r->nl && r->last[i] < p)
        i++;
    return i;
}

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

/* lower_in_leaf for leaf i by interpolation: positions are hashes, spread
 * evenly, so the guess from the leaf's bounds (the previous leaf's last
 * position and its own, both in last[], one cache line) is usually within
 * a step of the answer, and one line of the leaf is read instead of a
 * binary search's six. Any spread is still answered exactly, in at most
 * LEAF steps. */
static uint32_t
lower_in_leaf_at(const lr_ring *r, size_t i, uint64_t p)
{
    const struct leaf *l = r->lv[i];
    uint32_t n = l->n;
    uint64_t lo = i > 0 ? r->last[i - 1] : 0, hi = r->last[i];
    uint32_t g = 0;
    if (p > lo && hi > lo)
        g = (uint32_t)((double)(p - lo) / (double)(hi - lo) * (double)n);
    if (g > n)
        g = n;
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
    if (l != NULL)
        l->n = 0;
    return l;
}

static void
leaf_free(lr_ring *r, struct leaf *l)
{
    lr__free(&r->mem, l, sizeof *l);
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
 * entry sorts after it, else the last leaf. */
static size_t
target_leaf(const lr_ring *r, uint64_t p, const struct inst *e)
{
    size_t lo = 0, hi = r->nl;
    while (lo < hi) { /* first leaf with last >= p */
        size_t mid = lo + (hi - lo) / 2;
        if (r->last[mid] < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo < r->nl) { /* ties: step past leaves ending before e */
        const struct leaf *l = r->lv[lo];
        if (after_new(r, l->e[l->n - 1].pos, l->e[l->n - 1].id, p, e))
            break;
        lo++;
    }
    return lo < r->nl ? lo : r->nl - 1;
}

/* Leaves m entries make when a leaf splits: at most LEAF_FILL each. */
static size_t
leaves_for(size_t m)
{
    return m <= LEAF ? 1 : (m + LEAF_FILL - 1) / LEAF_FILL;
}

/* What an add needs, worked out before anything changes. */
struct add_plan {
    uint64_t *fresh;     /* the new positions, sorted (v of them) */
    size_t *grp;         /* per fresh entry: its target leaf */
    size_t extra;        /* leaves the splits add */
    struct leaf **spare; /* `extra` fresh leaves */
    struct leaf **nlv;   /* bigger leaf arrays, or NULL: in place */
    uint64_t *nlast;
    size_t ncap;
    uint32_t *ntab; /* a bigger jump table, or NULL */
    size_t ntab_cap;
    struct vnode *mv; /* merge scratch: LEAF + v entries */
    size_t scratch;   /* entries in mv */
};

static void
plan_free(lr_ring *r, struct add_plan *pl, size_t v)
{
    struct lr__mem *m = &r->mem;
    for (size_t i = 0; pl->spare != NULL && i < pl->extra; i++)
        if (pl->spare[i] != NULL)
            leaf_free(r, pl->spare[i]);
    lr__free(m, pl->spare, pl->extra * sizeof *pl->spare);
    lr__free(m, pl->fresh, v * sizeof *pl->fresh);
    lr__free(m, pl->grp, v * sizeof *pl->grp);
    lr__free(m, pl->nlv, pl->ncap * sizeof *pl->nlv);
    lr__free(m, pl->nlast, pl->ncap * sizeof *pl->nlast);
    lr__free(m, pl->ntab, pl->ntab_cap * sizeof *pl->ntab);
    lr__free(m, pl->mv, pl->scratch * sizeof *pl->mv);
    memset(pl, 0, sizeof *pl);
}

/* Phase 1 of an add: every allocation, and where each new entry goes. */
static lr_status
plan_add(lr_ring *r, const struct inst *e, const uint64_t *pos,
         struct add_plan *pl)
{
    struct lr__mem *m = &r->mem;
    size_t v = r->vnodes;
    memset(pl, 0, sizeof *pl);
    pl->fresh = lr__alloc(m, v * sizeof *pl->fresh);
    pl->grp = lr__alloc(m, v * sizeof *pl->grp);
    pl->scratch = LEAF + v;
    pl->mv = lr__alloc(m, pl->scratch * sizeof *pl->mv);
    if (pl->fresh == NULL || pl->grp == NULL || pl->mv == NULL)
        return LR_ENOMEM;
    for (uint32_t i = 0; i < v; i++)
        pl->fresh[i] = pos != NULL ? pos[i] : vnode_pos(e->name, e->len, i);
    sort_u64(pl->fresh, v);
    /* the target leaf of each (non-decreasing), and the leaves splits add */
    if (r->nl == 0) {
        pl->extra = leaves_for(v) > 1 ? leaves_for(v) : 1;
        for (size_t i = 0; i < v; i++)
            pl->grp[i] = 0;
    } else {
        for (size_t i = 0; i < v; i++)
            pl->grp[i] = target_leaf(r, pl->fresh[i], e);
        for (size_t a = 0; a < v;) {
            size_t b = a;
            while (b < v && pl->grp[b] == pl->grp[a])
                b++;
            size_t mm = r->lv[pl->grp[a]]->n + (b - a);
            pl->extra += leaves_for(mm) - 1;
            a = b;
        }
    }
    if (pl->extra > 0) {
        pl->spare = lr__calloc(m, pl->extra, sizeof *pl->spare);
        if (pl->spare == NULL)
            return LR_ENOMEM;
        for (size_t i = 0; i < pl->extra; i++)
            if ((pl->spare[i] = leaf_new(r)) == NULL)
                return LR_ENOMEM;
    }
    size_t nl = r->nl + pl->extra;
    if (nl > r->nl_cap) {
        pl->ncap = nl > 2 * r->nl_cap ? nl : 2 * r->nl_cap;
        pl->nlv = lr__alloc(m, pl->ncap * sizeof *pl->nlv);
        pl->nlast = lr__alloc(m, pl->ncap * sizeof *pl->nlast);
        if (pl->nlv == NULL || pl->nlast == NULL)
            return LR_ENOMEM;
    }
    size_t slots = (size_t)1 << tab_bits_for(nl);
    if (slots > r->tab_cap) {
        pl->ntab_cap = slots;
        pl->ntab = lr__alloc(m, slots * sizeof *pl->ntab);
        if (pl->ntab == NULL)
            return LR_ENOMEM;
    }
    return LR_OK;
}

/* Spread m merged entries over q leaves (q - 1 of them spare), evenly. */
static void
spread(struct add_plan *pl, size_t m, struct leaf **out, size_t q)
{
    size_t at = 0;
    for (size_t j = 0; j < q; j++) {
        size_t take = m / q + (j < m % q ? 1 : 0);
        struct leaf *l = out[j];
        memcpy(l->e, pl->mv + at, take * sizeof *l->e);
        l->n = (uint32_t)take;
        at += take;
    }
}

/* Phase 2 of an add: cannot fail. Leaves are rewritten from the last to
 * the first, so with the arrays in place no leaf is overwritten before it
 * is read (a leaf moves only towards the end). */
static void
commit_add(lr_ring *r, const struct inst *e, struct add_plan *pl)
{
    size_t v = r->vnodes;
    size_t nl = r->nl + pl->extra;
    struct leaf **dst = pl->nlv != NULL ? pl->nlv : r->lv;
    uint64_t *dlast = pl->nlast != NULL ? pl->nlast : r->last;
    size_t spare = 0;
    if (r->nl == 0) {
        for (size_t i = 0; i < v; i++)
            pl->mv[i] = (struct vnode){ pl->fresh[i], e->id };
        spread(pl, v, pl->spare, pl->extra);
        for (size_t j = 0; j < pl->extra; j++) {
            dst[j] = pl->spare[j];
            dlast[j] = dst[j]->e[dst[j]->n - 1].pos;
        }
        spare = pl->extra;
    } else {
        size_t w = nl;
        size_t b = v; /* fresh[a..b) is the group of leaf i */
        for (size_t i = r->nl; i-- > 0;) {
            size_t a = b;
            while (a > 0 && pl->grp[a - 1] == i)
                a--;
            struct leaf *l = r->lv[i];
            if (a == b) {
                dst[--w] = l;
                dlast[w] = r->last[i];
                continue;
            }
            /* merge the leaf's entries with fresh[a..b) */
            size_t x = 0, y = a, k = 0;
            while (x < l->n || y < b) {
                bool take_old =
                    y == b ||
                    (x < l->n &&
                     !after_new(r, l->e[x].pos, l->e[x].id, pl->fresh[y], e));
                if (take_old)
                    pl->mv[k++] = l->e[x++];
                else
                    pl->mv[k++] = (struct vnode){ pl->fresh[y++], e->id };
            }
            size_t q = leaves_for(k);
            struct leaf *out[LEAF + LR_RING_MAX_VNODES];
            out[0] = l;
            for (size_t j = 1; j < q; j++)
                out[j] = pl->spare[spare++];
            spread(pl, k, out, q);
            for (size_t j = q; j-- > 0;) {
                dst[--w] = out[j];
                dlast[w] = out[j]->e[out[j]->n - 1].pos;
            }
            b = a;
        }
    }
    assert(spare == pl->extra);
    if (pl->nlv != NULL) {
        lr__free(&r->mem, r->lv, r->nl_cap * sizeof *r->lv);
        lr__free(&r->mem, r->last, r->nl_cap * sizeof *r->last);
        r->lv = pl->nlv;
        r->last = pl->nlast;
        r->nl_cap = pl->ncap;
        pl->nlv = NULL;
        pl->nlast = NULL;
        pl->ncap = 0;
    }
    if (pl->ntab != NULL) {
        lr__free(&r->mem, r->tab, r->tab_cap * sizeof *r->tab);
        r->tab = pl->ntab;
        r->tab_cap = pl->ntab_cap;
        pl->ntab = NULL;
        pl->ntab_cap = 0;
    }
    /* the spare leaves now belong to the ring */
    lr__free(&r->mem, pl->spare, pl->extra * sizeof *pl->spare);
    pl->spare = NULL;
    pl->extra = 0;
    r->nl = nl;
    r->n += v;
    r->tab_bits = tab_bits_for(nl);
    tab_fill(r->tab, r->tab_bits, r->last, r->nl);
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
    for (size_t i = 0; i < ring->nl; i++)
        leaf_free(ring, ring->lv[i]);
    lr__free(&ring->mem, ring->lv, ring->nl_cap * sizeof *ring->lv);
    lr__free(&ring->mem, ring->last, ring->nl_cap * sizeof *ring->last);
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

    /* Everything that can fail comes first (plan_add, the record, the
     * maps); the commit cannot fail. n <= 65536 * 4096 = 2^28 entries. */
    struct inst *e = lr__calloc(&r->mem, 1, inst_size(len));
    if (e == NULL)
        return LR_ENOMEM;
    e->id = id;
    e->len = (uint32_t)len;
    memcpy(e->name, name, len + 1);
    struct add_plan pl;
    lr_status st = plan_add(r, e, pos, &pl);
    if (st == LR_OK)
        st = map_add(r, e);
    if (st != LR_OK) {
        /* Undo: free only what this call allocated. The maps hold e only
         * if map_add succeeded, and it is the last step that can fail. */
        plan_free(r, &pl, r->vnodes);
        lr__free(&r->mem, e, inst_size(len));
        return st;
    }
    commit_add(r, e, &pl);
    plan_free(r, &pl, r->vnodes);
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

/* Delete the entry (p, id) from its leaf. Entries with the same position
 * (ties) may spill into the next leaves. */
static void
delete_entry(lr_ring *r, uint64_t p, uint32_t id)
{
    for (size_t i = leaf_for(r, p); i < r->nl; i++) {
        struct leaf *l = r->lv[i];
        uint32_t j = lower_in_leaf(l, p);
        while (j < l->n && l->e[j].pos == p && l->e[j].id != id)
            j++;
        if (j < l->n && l->e[j].pos == p) {
            memmove(l->e + j, l->e + j + 1, (l->n - j - 1) * sizeof *l->e);
            l->n--;
            if (l->n > 0)
                r->last[i] = l->e[l->n - 1].pos;
            return;
        }
        if (j < l->n) /* a later position: not in the ring */
            break;
    }
    assert(!"every vnode of a placed instance is in the ring");
}

/* One pass after deletions: drop empty leaves, merge a leaf into the one
 * before it when both fit in LEAF_MERGE entries. Allocates nothing. */
static void
compact_leaves(lr_ring *r)
{
    size_t w = 0;
    for (size_t i = 0; i < r->nl; i++) {
        struct leaf *l = r->lv[i];
        if (l->n == 0) {
            leaf_free(r, l);
            continue;
        }
        if (w > 0 && r->lv[w - 1]->n + l->n <= LEAF_MERGE) {
            struct leaf *p = r->lv[w - 1];
            memcpy(p->e + p->n, l->e, l->n * sizeof *l->e);
            p->n += l->n;
            r->last[w - 1] = p->e[p->n - 1].pos;
            leaf_free(r, l);
            continue;
        }
        r->lv[w] = l;
        r->last[w] = l->e[l->n - 1].pos;
        w++;
    }
    r->nl = w;
}

/* Give memory back after a removal. Best effort: if the allocator cannot
 * make the smaller blocks, the larger ones stay and their capacity is
 * remembered, so they are later freed with the size they were allocated
 * with. The two leaf arrays share one capacity, so they move together. */
static void
shrink(lr_ring *r)
{
    if (r->nl_cap > 2 * r->nl + 8) {
        size_t cap = r->nl;
        struct leaf **lv = lr__alloc(&r->mem, cap * sizeof *lv);
        uint64_t *last = lr__alloc(&r->mem, cap * sizeof *last);
        if (lv != NULL && last != NULL) {
            memcpy(lv, r->lv, cap * sizeof *lv);
            memcpy(last, r->last, cap * sizeof *last);
            lr__free(&r->mem, r->lv, r->nl_cap * sizeof *r->lv);
            lr__free(&r->mem, r->last, r->nl_cap * sizeof *r->last);
            r->lv = lv;
            r->last = last;
            r->nl_cap = cap;
        } else {
            lr__free(&r->mem, lv, cap * sizeof *lv);
            lr__free(&r->mem, last, cap * sizeof *last);
        }
    }
    size_t slots = (size_t)1 << r->tab_bits;
    if (r->tab_cap > slots) {
        void *p = lr__realloc(&r->mem, r->tab, r->tab_cap * sizeof *r->tab,
                              slots * sizeof *r->tab);
        if (p != NULL) {
            r->tab = p;
            r->tab_cap = slots;
        }
    }
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
    if (ring->custom_pos) {
        for (size_t i = 0; i < ring->nl; i++) {
            struct leaf *l = ring->lv[i];
            uint32_t w = 0;
            for (uint32_t j = 0; j < l->n; j++) {
                if (l->e[j].id != id)
                    l->e[w++] = l->e[j];
            }
            l->n = w;
        }
    } else {
        for (uint32_t v = 0; v < ring->vnodes; v++)
            delete_entry(ring, vnode_pos(e->name, e->len, v), id);
    }
    ring->n -= ring->vnodes;
    map_del(ring, e);
    lr__free(&ring->mem, e, inst_size(e->len));
    ring->count--;
    compact_leaves(ring);
    if (ring->nl == 0) {
        lr__free(&ring->mem, ring->lv, ring->nl_cap * sizeof *ring->lv);
        lr__free(&ring->mem, ring->last, ring->nl_cap * sizeof *ring->last);
        lr__free(&ring->mem, ring->tab, ring->tab_cap * sizeof *ring->tab);
        ring->lv = NULL;
        ring->last = NULL;
        ring->nl_cap = 0;
        ring->tab = NULL;
        ring->tab_cap = 0;
        ring->tab_bits = 0;
        return LR_OK;
    }
    ring->tab_bits = tab_bits_for(ring->nl);
    tab_fill(ring->tab, ring->tab_bits, ring->last, ring->nl);
    shrink(ring);
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
    const size_t nl = ring->nl;
    unsigned shift = 64u - ring->tab_bits;

    /* Two passes, so the cache misses of the k points overlap instead of
     * queueing: the jump-table loads of all points are independent of
     * each other; only the walk past picked instances depends on earlier
     * picks. */
    uint64_t pt[LR_RING_MAX_K];
    size_t at[LR_RING_MAX_K];
    for (uint32_t j = 0; j < want; j++) {
        pt[j] = key_point(key_le, j);
        at[j] = ring->tab[pt[j] >> shift];
    }
    for (uint32_t j = 0; j < want; j++) {
        /* First entry at or after the point, wrapping past the end to the
         * first leaf. */
        size_t i = at[j];
        while (i < nl && ring->last[i] < pt[j])
            i++;
        uint32_t e = 0;
        if (i == nl)
            i = 0;
        else
            e = lower_in_leaf_at(ring, i, pt[j]);
        /* Walk on past instances already picked. It ends: fewer than
         * `count` are picked, so an unpicked instance owns some entry. */
        for (;;) {
            uint32_t id = ring->lv[i]->e[e].id;
            uint32_t p = 0;
            while (p < j && out[p] != id)
                p++;
            if (p == j)
                break;
            if (++e == ring->lv[i]->n) {
                e = 0;
                if (++i == nl)
                    i = 0;
            }
        }
        out[j] = ring->lv[i]->e[e].id;
    }
    *n_out = want;
    return LR_OK;
}

/* ---- internals for tests (ring.h) -------------------------------------- */

/* Whether (p, id) is in the ring. */
static bool
has_entry(const lr_ring *r, uint64_t p, uint32_t id)
{
    for (size_t i = leaf_for(r, p); i < r->nl; i++) {
        const struct leaf *l = r->lv[i];
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
    LR_RETURN_IF(r->nl_cap < r->nl, LR_ECORRUPT);

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
        LR_RETURN_IF(r->nl != 0 || r->lv != NULL || r->tab != NULL,
                     LR_ECORRUPT);
        LR_RETURN_IF(r->tab_cap != 0 || r->tab_bits != 0, LR_ECORRUPT);
        return LR_OK;
    }
    LR_RETURN_IF(r->nl == 0 || r->lv == NULL || r->tab == NULL, LR_ECORRUPT);

    /* Leaves hold 1..LEAF entries, last[] is each leaf's last position,
     * and the whole sequence is sorted by (position, name) with every
     * entry naming a placed instance. */
    const struct inst *prev = NULL;
    uint64_t prev_pos = 0;
    size_t total = 0;
    for (size_t i = 0; i < r->nl; i++) {
        const struct leaf *l = r->lv[i];
        LR_RETURN_IF(l == NULL || l->n == 0 || l->n > LEAF, LR_ECORRUPT);
        LR_RETURN_IF(r->last[i] != l->e[l->n - 1].pos, LR_ECORRUPT);
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
    LR_RETURN_IF(total != r->n, LR_ECORRUPT);

    /* The table points each slot at its first leaf. */
    LR_RETURN_IF(r->tab_bits != tab_bits_for(r->nl), LR_ECORRUPT);
    size_t slots = (size_t)1 << r->tab_bits;
    LR_RETURN_IF(r->tab_cap < slots, LR_ECORRUPT);
    unsigned shift = 64u - r->tab_bits;
    for (size_t h = 0; h < slots; h++) {
        size_t t = r->tab[h];
        LR_RETURN_IF(t > r->nl, LR_ECORRUPT);
        LR_RETURN_IF(t < r->nl && (r->last[t] >> shift) < h, LR_ECORRUPT);
        LR_RETURN_IF(t > 0 && (r->last[t - 1] >> shift) >= h, LR_ECORRUPT);
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
    for (size_t i = 0; i < r->nl; i++) {
        const struct leaf *l = r->lv[i];
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
