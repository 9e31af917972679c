/* lr_ring: the dual consistent-hash ring (public contract in lr_ring.h).
 *
 * Layout. Every instance owns `vnodes` points on a 64-bit circle; all of
 * them live in one array sorted by (position, name bytes), next to a small
 * table that jumps into the array by the top bits of a position. Here 3
 * instances with 2 vnodes each (n = 6 entries, b = 2 table bits); positions
 * are shown by their top byte:
 *
 *     name --XXH3(v as 4 LE bytes ++ name, LR_SEED_VNODE)--> vnode v
 *
 *   tab[h] = first entry whose top b bits are >= h
 *
 *        tab[0]=0  tab[1]=1          tab[2]=3  tab[3]=4
 *           |         |                 |         |
 *           v         v                 v         v
 *   vn[] +--------+--------+--------+--------+--------+--------+
 *        | 0x1c.. | 0x4a.. | 0x6f.. | 0x93.. | 0xc5.. | 0xe0.. |
 *        | id 7 A | id 9 B | id 7 A | id 4 C | id 9 B | id 4 C |
 *        +--------+--------+--------+--------+--------+--------+
 *         \_ h=0 _/ \___ h=1 _____/ \_ h=2 _/ \____ h=3 ______/
 *
 *   by_id, by_name: two uthash tables over the same struct inst records
 *   (name copied, id), used for duplicate checks, removal and tie breaks.
 *
 * Worked example (k = 2). A key's points are XXH3(j as 4 LE bytes ++ key
 * as 8 LE bytes, LR_SEED_RINGK). Say point 0 is 0x50..: its top 2 bits are 1,
 * so the scan starts at tab[1] = 1, steps over 0x4a.. (< 0x50..) and stops at
 * 0x6f..: out[0] = 7 (A). Say point 1 is 0x60..: it also lands on 0x6f..,
 * but A is taken, so the walk continues clockwise to 0x93..: out[1] = 4
 * (C). A point past the last entry, say 0xf0.., runs off the end and wraps
 * to vn[0]. Add D with vnodes at 0x58.. and 0xa0..: point 0 now stops at
 * 0x58.. and picks D, point 1 still picks A; a key neither of whose walks
 * meets a D vnode before its old pick keeps its old candidates exactly.
 *
 * Why this shape. A query costs, per point, one XXH3 call on 8 bytes, one
 * table read and a scan of one or two entries (the table has at most one
 * slot per entry, so each slot covers one to two entries on average); an
 * entry holds the position and the id side by side, so the scan and the
 * pick touch one cache line, and the k points are looked up in separate
 * passes so their cache misses overlap. Nothing is written, so queries are
 * safe from many threads at once. Ties between positions are broken by name
 * bytes (memcmp, then length): the array is a function of the set of names
 * alone, never of insertion order, so every gateway replica agrees.
 *
 * Mutations rebuild. Adding allocates the instance record, a fresh array
 * of n + vnodes entries and, if needed, a bigger table, and only then
 * enters the record in the hash tables and merges; an allocation failure
 * frees what this call made and leaves the ring untouched (B11). Removing
 * compacts the array in place and rebuilds the table in the old buffer
 * (a smaller ring never needs more slots), then tries to shrink both
 * blocks: it allocates nothing it needs, so taking a dead instance off the
 * ring works even when memory is exhausted.
 */
#include "ring.h"

#include "lr_hash.h"

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
/* 2^24 slots (64 MiB) is enough for the largest ring, 2^28 entries, with
 * 16 entries a slot; smaller rings use at most one slot per entry. */
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

/* One point on the circle. Position and id side by side (16 bytes with
 * padding on LP64), so the id is read from the line the scan loaded. */
struct vnode {
    uint64_t pos;
    uint32_t id;
};

struct lr_ring {
    struct lr__mem mem;
    uint32_t vnodes;        /* per instance, 1..LR_RING_MAX_VNODES */
    uint32_t max_instances; /* 1..LR__RING_MAX_INSTANCES */
    uint32_t count;         /* instances placed */
    bool custom_pos;        /* lr__ring_add_at placed explicit positions */
    struct inst *by_id;     /* uthash head over hh_id */
    struct inst *by_name;   /* uthash head over hh_name */
    struct vnode *vn;       /* n entries sorted by (pos, name); NULL if 0 */
    size_t n;               /* count * vnodes */
    size_t vn_cap;          /* entries allocated, >= n */
    uint32_t *tab;          /* 2^tab_bits slots; NULL when n == 0 */
    unsigned tab_bits;      /* tab_bits_for(n), 0 when n == 0 */
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

/* ---- the sorted array and its jump table ------------------------------- */

/* At most one slot per entry (2^b <= n for n >= 2), so the table never
 * outweighs the array it indexes, and each slot covers one to two entries
 * on average. */
static unsigned
tab_bits_for(size_t n)
{
    unsigned b = 1;
    while (b < TAB_MAX_BITS && ((size_t)2 << b) <= n)
        b++;
    return b;
}

static void
tab_fill(uint32_t *tab, unsigned bits, const struct vnode *vn, size_t n)
{
    unsigned shift = 64u - bits;
    size_t slots = (size_t)1 << bits;
    size_t i = 0;
    for (size_t h = 0; h < slots; h++) {
        while (i < n && (vn[i].pos >> shift) < h)
            i++;
        tab[h] = (uint32_t)i;
    }
}

static void
sift_down(struct vnode *a, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && a[child + 1].pos > a[child].pos)
            child++;
        if (a[root].pos >= a[child].pos)
            return;
        struct vnode t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

/* Heapsort by position: in place and allocation-free (qsort may call
 * malloc behind the allocator's back, B21). All entries belong to one
 * instance, so equal positions need no name order. */
static void
sort_by_pos(struct vnode *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (size_t end = n; end > 1;) {
        end--;
        struct vnode t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

/* Whether the old entry a sorts after the new instance's entry b. Names
 * differ (duplicates are refused), so the order is strict. */
static bool
old_after_new(const lr_ring *r, const struct vnode *a, const struct vnode *b,
              const struct inst *e)
{
    if (a->pos != b->pos)
        return a->pos > b->pos;
    const struct inst *ia = map_find_id(r, a->id);
    if (LR_NEVER(ia == NULL))
        return false;
    return name_cmp(ia->name, ia->len, e->name, e->len) > 0;
}

/* Merge the ring's n sorted entries with the v sorted entries of e that sit
 * at dst[n .. n + v). It runs forward: after taking i old and j - n new
 * entries the write cursor is w = i + (j - n) <= j, so it never passes the
 * next unread new entry; once the old entries run out, w == j and the rest
 * of the new ones are already in place. */
static void
merge_into(const lr_ring *r, struct vnode *dst, const struct inst *e, size_t v)
{
    const struct vnode *old = r->vn;
    size_t end = r->n + v;
    size_t i = 0;
    size_t j = r->n;
    size_t w = 0;
    while (i < r->n) {
        if (j < end && old_after_new(r, &old[i], &dst[j], e))
            dst[w++] = dst[j++];
        else
            dst[w++] = old[i++];
    }
}

/* Give memory back after a removal. Best effort: if the allocator cannot
 * resize a block, the larger one stays and its capacity is remembered, so
 * it is later freed with the size it was allocated with. */
static void
shrink(lr_ring *r)
{
    if (r->vn_cap > r->n) {
        void *p = lr__realloc(&r->mem, r->vn, r->vn_cap * sizeof *r->vn,
                              r->n * sizeof *r->vn);
        if (p != NULL) {
            r->vn = p;
            r->vn_cap = r->n;
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

/* ---- public API -------------------------------------------------------- */

static const lr_ring_options options_defaults = {
    .struct_size = sizeof(lr_ring_options),
    .vnodes = DEFAULT_VNODES,
    .max_instances = DEFAULT_MAX_INSTANCES,
};

void
lr_ring_options_init_sized(lr_ring_options *opt, size_t size)
{
    lr__init_sized(opt, size, &options_defaults, sizeof options_defaults);
}

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

    struct lr__mem mem;
    LR_TRY(lr__mem_init(&mem, o.allocator));
    lr_ring *r = lr__calloc(&mem, 1, sizeof *r);
    LR_RETURN_IF(r == NULL, LR_ENOMEM);
    r->mem = mem; /* after the allocation, so `live` counts the ring */
    r->vnodes = o.vnodes;
    r->max_instances = o.max_instances;
    r->by_id = NULL;
    r->by_name = NULL;
    r->vn = NULL;
    r->tab = NULL;
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
    lr__free(&ring->mem, ring->vn, ring->vn_cap * sizeof *ring->vn);
    lr__free(&ring->mem, ring->tab, ring->tab_cap * sizeof *ring->tab);
    struct lr__mem mem = ring->mem; /* the ring cannot free itself from
                                     * inside itself */
    lr__free(&mem, ring, sizeof *ring);
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

    /* n <= 65536 * 4096 = 2^28 entries; only the byte sizes can overflow,
     * and only where size_t is 32 bits. */
    size_t v = r->vnodes;
    size_t n = r->n + v;
    size_t vn_bytes;
    LR_RETURN_IF(!lr__mul_size(n, sizeof(struct vnode), &vn_bytes), LR_ENOMEM);
    unsigned bits = tab_bits_for(n);
    size_t slots = (size_t)1 << bits;
    bool new_tab = slots > r->tab_cap;

    /* Everything that can fail comes first and goes into fresh memory. */
    struct inst *e = lr__calloc(&r->mem, 1, inst_size(len));
    struct vnode *vn = lr__alloc(&r->mem, vn_bytes);
    uint32_t *tab = new_tab ? lr__alloc(&r->mem, slots * sizeof *tab) : NULL;
    if (e == NULL || vn == NULL || (new_tab && tab == NULL))
        goto oom;
    e->id = id;
    e->len = (uint32_t)len;
    memcpy(e->name, name, len + 1);
    if (map_add(r, e) != LR_OK)
        goto oom;

    /* Commit: nothing below can fail. */
    struct vnode *fresh = vn + r->n;
    for (uint32_t i = 0; i < r->vnodes; i++) {
        fresh[i].pos = pos != NULL ? pos[i] : vnode_pos(e->name, len, i);
        fresh[i].id = id;
    }
    sort_by_pos(fresh, v);
    merge_into(r, vn, e, v);
    lr__free(&r->mem, r->vn, r->vn_cap * sizeof *r->vn);
    r->vn = vn;
    r->n = n;
    r->vn_cap = n;
    if (new_tab) {
        lr__free(&r->mem, r->tab, r->tab_cap * sizeof *r->tab);
        r->tab = tab;
        r->tab_cap = slots;
    }
    r->tab_bits = bits;
    tab_fill(r->tab, bits, r->vn, r->n);
    r->count++;
    if (pos != NULL)
        r->custom_pos = true;
    return LR_OK;

oom:
    /* Undo: free only what this call allocated. The maps hold e only if
     * map_add succeeded, and nothing fails after that. */
    lr__free(&r->mem, tab, slots * sizeof *tab);
    lr__free(&r->mem, vn, vn_bytes);
    lr__free(&r->mem, e, inst_size(len));
    return LR_ENOMEM;
}

lr_status
lr_ring_add(lr_ring *ring, const char *name, uint32_t id)
{
    return lr__ring_add_at(ring, name, id, NULL);
}

lr_status
lr_ring_remove(lr_ring *ring, uint32_t id)
{
    LR_RETURN_IF(ring == NULL || id == UINT32_MAX, LR_EINVAL);
    struct inst *e = map_find_id(ring, id);
    LR_RETURN_IF(e == NULL, LR_ENOENT);

    /* Compaction keeps the survivors in their order, which is exactly the
     * order of a ring built from the remaining names; the smaller table
     * fits in the old one's slots. No step allocates, so removal cannot
     * fail (lr_ring.h allows LR_ENOMEM; it is never returned). */
    size_t w = 0;
    for (size_t i = 0; i < ring->n; i++) {
        if (ring->vn[i].id != id)
            ring->vn[w++] = ring->vn[i];
    }
    ring->n = w;
    map_del(ring, e);
    lr__free(&ring->mem, e, inst_size(e->len));
    ring->count--;

    if (ring->n == 0) {
        lr__free(&ring->mem, ring->vn, ring->vn_cap * sizeof *ring->vn);
        lr__free(&ring->mem, ring->tab, ring->tab_cap * sizeof *ring->tab);
        ring->vn = NULL;
        ring->vn_cap = 0;
        ring->tab = NULL;
        ring->tab_cap = 0;
        ring->tab_bits = 0;
        return LR_OK;
    }
    ring->tab_bits = tab_bits_for(ring->n);
    tab_fill(ring->tab, ring->tab_bits, ring->vn, ring->n);
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
    const struct vnode *vn = ring->vn;
    size_t n = ring->n;
    unsigned shift = 64u - ring->tab_bits;

    /* Three passes, so the cache misses of the k points overlap instead of
     * queueing: the table loads of all points are independent of each
     * other, and so are the scans; only the walk past picked instances
     * depends on earlier picks, and it starts on lines already loaded. */
    uint64_t pt[LR_RING_MAX_K];
    size_t at[LR_RING_MAX_K];
    for (uint32_t j = 0; j < want; j++) {
        pt[j] = key_point(key_le, j);
        at[j] = ring->tab[pt[j] >> shift];
    }
    for (uint32_t j = 0; j < want; j++) {
        /* First entry at or after the point, wrapping past the end to 0.
         * Entries in later slots are all >= the point, so the scan needs
         * no slot bound. */
        size_t i = at[j];
        while (i < n && vn[i].pos < pt[j])
            i++;
        at[j] = i == n ? 0 : i;
    }
    for (uint32_t j = 0; j < want; j++) {
        size_t i = at[j];
        /* Walk on past instances already picked. It ends: fewer than
         * `count` are picked, so an unpicked instance owns some entry. */
        for (;;) {
            uint32_t id = vn[i].id;
            uint32_t p = 0;
            while (p < j && out[p] != id)
                p++;
            if (p == j)
                break;
            if (++i == n)
                i = 0;
        }
        out[j] = vn[i].id;
    }
    *n_out = want;
    return LR_OK;
}

/* ---- internals for tests (ring.h) -------------------------------------- */

/* Index of the first entry with position >= p, or n. */
static size_t
lower_bound(const lr_ring *r, uint64_t p)
{
    size_t lo = 0;
    size_t hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->vn[mid].pos < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
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
    LR_RETURN_IF(r->vn_cap < r->n, LR_ECORRUPT);

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
        LR_RETURN_IF(r->vn != NULL || r->tab != NULL, LR_ECORRUPT);
        LR_RETURN_IF(r->tab_cap != 0 || r->tab_bits != 0, LR_ECORRUPT);
        return LR_OK;
    }
    LR_RETURN_IF(r->vn == NULL || r->tab == NULL, LR_ECORRUPT);

    /* Sorted by (position, name); every entry names a placed instance. */
    const struct inst *prev = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const struct inst *cur = map_find_id(r, r->vn[i].id);
        LR_RETURN_IF(cur == NULL, LR_ECORRUPT);
        if (i > 0) {
            uint64_t a = r->vn[i - 1].pos;
            uint64_t b = r->vn[i].pos;
            LR_RETURN_IF(a > b, LR_ECORRUPT);
            LR_RETURN_IF(a == b && name_cmp(prev->name, prev->len, cur->name,
                                            cur->len) > 0,
                         LR_ECORRUPT);
        }
        prev = cur;
    }

    /* The table points each slot at its first entry. */
    LR_RETURN_IF(r->tab_bits != tab_bits_for(r->n), LR_ECORRUPT);
    size_t slots = (size_t)1 << r->tab_bits;
    LR_RETURN_IF(r->tab_cap < slots, LR_ECORRUPT);
    unsigned shift = 64u - r->tab_bits;
    for (size_t h = 0; h < slots; h++) {
        size_t t = r->tab[h];
        LR_RETURN_IF(t > r->n, LR_ECORRUPT);
        LR_RETURN_IF(t < r->n && (r->vn[t].pos >> shift) < h, LR_ECORRUPT);
        LR_RETURN_IF(t > 0 && (r->vn[t - 1].pos >> shift) >= h, LR_ECORRUPT);
    }

    /* Each instance sits exactly where its name hashes. With n equal to
     * count * vnodes, finding every expected (position, id) means the
     * array holds nothing else (up to a 64-bit collision inside one name,
     * which would only repeat an identical entry). */
    if (!r->custom_pos) {
        HASH_ITER(hh_id, r->by_id, e, tmp)
        {
            for (uint32_t v = 0; v < r->vnodes; v++) {
                uint64_t p = vnode_pos(e->name, e->len, v);
                size_t i = lower_bound(r, p);
                while (i < r->n && r->vn[i].pos == p && r->vn[i].id != e->id)
                    i++;
                LR_RETURN_IF(i == r->n || r->vn[i].pos != p, LR_ECORRUPT);
            }
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
    for (size_t i = 0; i < r->n; i++) {
        lr__put_u64(b, r->vn[i].pos);
        lr__put_u32(b + 8, r->vn[i].id);
        d = lr__hash(b, 12, d);
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
