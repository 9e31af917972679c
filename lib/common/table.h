/* lr__table: the one open-addressing hash table of libroute. It maps a
 * 64-bit hash to a 32-bit value, a reference into an array its owner keeps
 * (a node, a request record, a pool entry). It never stores keys and never
 * reads the owner's array except through the equality callback of a
 * lookup, so growing and deleting cost no cache miss on the owner's data.
 *
 * Layout
 * ------
 *
 *   slots[] (size words, at most 3/4 full, linear probing)
 *   +-----------+-----------+---+-----------+---+-----+
 *   | tag | v+1 | tag | v+1 | 0 | tag | v+1 | 0 | ... |    0 = empty
 *   +-----------+-----------+---+-----------+---+-----+
 *     hi 32 bits  lo 32 bits
 *
 *   tag  = hv >> 32, the high half of the caller's keyed 64-bit hash
 *   home = (tag * size) >> 32  (fastrange: any size, no modulo, no mask)
 *          or, once the table has re-salted itself (below),
 *          (mix(tag, salt) >> 32) * size >> 32
 *   v    = the value, < LR_NIL; stored plus one so that 0 means empty
 *
 * The tag picks the home slot, so rehashing and backward-shift deletion
 * work from the slot words alone. A lookup compares tags first and calls
 * the owner's equality callback only on a tag match (a false match needs
 * 32 equal hash bits).
 *
 * Worked example, size 8, values are indices into the owner's nodes[]:
 *   insert(hv = 0x20000000_..., 5)  home = 0x2000_0000 * 8 >> 32 = 1
 *   insert(hv = 0x30000000_..., 9)  home = 1, taken -> slot 2
 *     slots: [0, 2000_0000|6, 3000_0000|10, 0, 0, 0, 0, 0]
 *   find(hv = 0x30000000_..., key, eq)  slot 1: tag differs; slot 2:
 *     tag matches, eq(ctx, key, 9) is true -> 9
 *   remove(hv = 0x20000000_..., 5)  empties slot 1, then shifts slot 2
 *     back into it (its home 1 does not lie in (1, 2]): no tombstone.
 *
 * Flooding bound. Owners key hv with a per-handle random seed
 * (lr__hash_seed), so a client cannot aim keys at one region of the
 * table. Should that seed leak, linear probing would let aimed keys pile
 * into one run that every lookup near it walks. So every insert notes its
 * probe length, and the next reserve after a probe longer than
 * LR__TABLE_PROBE_BOUND(size) re-salts the table: a fresh salt from the
 * operating system re-spreads the stored tags over the slots (from the
 * slot words alone, as a growth does) and aimed keys lose their aim. Only
 * keys whose whole 32-bit tags collide (2^32 hash evaluations each for a
 * client who knows the seed) stay together. A re-salt waits for size / 8
 * inserts since the last rebuild, so even such keys cost O(1) amortized.
 * The salt starts at 0, which keeps the plain fastrange home and the hot
 * path as it was; nothing a table answers depends on where a value sits.
 *
 * Contract for every user:
 * - A value is in the table at most once, under the hash it was inserted
 *   with; the owner recomputes that hash to remove it (the caller's hash is
 *   keyed per handle, STYLE B26).
 * - lr__table_reserve() before lr__table_insert(): inserts never allocate
 *   and never fail, which is how a mutator does all its allocation in
 *   phase 1 and cannot fail in phase 2 (B11).
 * - Values are at most LR_NIL - 1; lookups answer LR_NIL for "absent".
 *
 * Used by the index (nodes, instance ids, engine hashes, delta codec
 * temporaries) and the load tracker (request ids). A key -> pool table
 * keeps its keys in a pool array and maps to pool indices: eq gets the
 * pool as ctx and compares pool[value].key with the key. A name -> id
 * table hashes the string, points ctx at a probe holding the names and
 * the string, and compares the strings in eq.
 *
 * Thread safety: one thread at a time per table; lookups on a table no
 * one mutates are reentrant. Never aborts, prints or allocates outside the
 * lr__mem given. */
#ifndef LIBROUTE_LIB_TABLE_H
#define LIBROUTE_LIB_TABLE_H

#include "common/common.h"

struct lr__table {
    uint64_t *slots;  /* `size` slot words; see the picture */
    uint32_t size;    /* slots, >= 1 */
    uint32_t count;   /* values held */
    uint64_t salt;    /* 0: plain fastrange home; else re-salted */
    uint32_t worst;   /* longest insert probe since the last rebuild */
    uint32_t since;   /* inserts since the last rebuild */
    uint32_t resalts; /* re-salts so far (tests, observability) */
};

/* Smallest table that holds memory, in slots. */
#define LR__TABLE_MIN_SIZE 8u
/* At most LOAD_NUM / LOAD_DEN of the slots are filled. */
#define LR__TABLE_LOAD_NUM 3u
#define LR__TABLE_LOAD_DEN 4u
/* The tag half of a slot word. */
#define LR__TABLE_TAG (~(uint64_t)0xffffffffu)

/* Probes an insert may take before the next reserve re-salts the table:
 * far past what random keys reach (linear probing at 3/4 load has
 * expected maximum runs of a few log2(size) slots). */
#define LR__TABLE_PROBE_BOUND(size) (64u + 16u * (uint32_t)lr__log2_u32(size))

static inline unsigned
lr__log2_u32(uint32_t x)
{
    unsigned b = 0;
    while (x >>= 1)
        b++;
    return b;
}

/* Home slot of hash hv (or a slot word: the tag is its high half) in a
 * table of `size` slots with `salt`. */
static inline uint32_t
lr__table_home(uint64_t hv, uint32_t size, uint64_t salt)
{
    uint64_t tag = hv >> 32;
    if (salt != 0) { /* only after a flood was seen: murmur's finalizer */
        uint64_t x = tag ^ salt;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        x *= 0xc4ceb9fe1a85ec53ull;
        x ^= x >> 33;
        tag = x >> 32;
    }
    return (uint32_t)((tag * (uint64_t)size) >> 32);
}

/* Set up a table with room for `expect` values (at most 3/4 full), or
 * holding no memory when expect is 0 (lookups still work; the first
 * reserve allocates). On failure (LR_ENOMEM) *t holds no memory and
 * lr__table_free() on it is a no-op; LR_ENOMEM also when expect is beyond
 * what 32-bit slot numbers can address. */
lr_status lr__table_init(struct lr__table *t, struct lr__mem *m,
                         uint32_t expect);

/* Release the slots (m must be the lr__mem they came from). The table is
 * then empty and holds no memory; it may be freed again or re-inited. A
 * zero-filled struct lr__table (an owner's calloc) may be freed too, so a
 * partial construction can be released. Never fails. */
void lr__table_free(struct lr__table *t, struct lr__mem *m);

/* Make room for `more` inserts beyond count, keeping the table at most 3/4
 * full. Growth is 1.5x (or to what is needed) and rehashes from the slot
 * words alone; so does a re-salt (see the flooding bound). LR_OK or
 * LR_ENOMEM; on LR_ENOMEM the table is unchanged and usable. O(size) when
 * it grows or re-salts, O(1) otherwise. */
lr_status lr__table_reserve(struct lr__table *t, struct lr__mem *m,
                            uint32_t more);

/* Internal to the table: put a slot word in the first empty slot from
 * its home (insert and rehash); returns how many slots it passed. */
static inline uint32_t
lr__table_place(uint64_t *slots, uint32_t size, uint64_t salt, uint64_t word)
{
    uint32_t b = lr__table_home(word, size, salt);
    uint32_t d = 0;
    while (slots[b] != 0) {
        if (++b == size)
            b = 0;
        d++;
    }
    slots[b] = word;
    return d;
}

/* Add `value` (< LR_NIL) under hash hv. Room must have been reserved; no
 * duplicate check (the caller looked it up first, or knows). Inline: a
 * learn inserts once per new block. Never fails. */
static inline void
lr__table_insert(struct lr__table *t, uint64_t hv, uint32_t value)
{
    assert(value < LR_NIL);
    assert(((uint64_t)t->count + 1) * LR__TABLE_LOAD_DEN <=
           (uint64_t)t->size * LR__TABLE_LOAD_NUM);
    uint32_t d = lr__table_place(t->slots, t->size, t->salt,
                                 (hv & LR__TABLE_TAG) | ((uint64_t)value + 1));
    t->worst = d > t->worst ? d : t->worst;
    t->since++;
    t->count++;
}

/* Remove `value`, inserted under hash hv, with backward-shift deletion
 * (no tombstones: every other value stays reachable from its home without
 * crossing an empty slot). Removing a value that is not there is a bug
 * (asserts in debug builds, changes nothing in release builds). Never
 * fails. */
void lr__table_remove(struct lr__table *t, uint64_t hv, uint32_t value);

/* The equality callback of a lookup: whether `value` stands for `key` in
 * the owner's data `ctx` (usually the owner's array: ctx[value].key ==
 * key). The key is whatever the owner hashed to get hv, passed through
 * untouched; an owner with wider keys (a string, two fields) points ctx
 * at a probe holding them and ignores key or uses it for one field. */
typedef bool (*lr__table_eq)(const void *ctx, uint64_t key, uint32_t value);

/* The value under hash hv for which eq(ctx, key, value) holds, or LR_NIL.
 * eq is called only on values whose stored tag equals hv >> 32. Inline
 * with a function-pointer parameter so that the compiler inlines each
 * call site's `eq` (a static function) into the probe loop. Never fails;
 * reads only the slots and whatever eq reads. */
static inline uint32_t
lr__table_find(const struct lr__table *t, uint64_t hv, uint64_t key,
               lr__table_eq eq, const void *ctx)
{
    uint32_t tag = (uint32_t)(hv >> 32);
    uint32_t size = t->size;
    uint32_t b = lr__table_home(hv, size, t->salt);
    for (;;) {
        uint64_t s = t->slots[b];
        if (s == 0)
            return LR_NIL;
        if ((uint32_t)(s >> 32) == tag && eq(ctx, key, (uint32_t)s - 1))
            return (uint32_t)s - 1;
        if (++b == size)
            b = 0;
    }
}

/* The word in hv's home slot. Loading it (and keeping it with lr__sink())
 * pulls the line a later find or insert of hv starts at into the cache;
 * independent loads overlap their misses where a dependent probe chain
 * cannot. Never fails. */
static inline uint64_t
lr__table_peek(const struct lr__table *t, uint64_t hv)
{
    return t->slots[lr__table_home(hv, t->size, t->salt)];
}

/* Probe lengths of the values held: the longest and the sum of the slots
 * each value sits past its home (a successful lookup of it reads that
 * many slots plus one). O(size); for tests and benchmarks that count
 * work instead of timing it. */
void lr__table_probe_stats(const struct lr__table *t, uint32_t *max,
                           uint64_t *sum);

/* Walk the invariants: count equals the filled slots, the table is at
 * most 3/4 full (so an empty slot ends every probe), and every value is
 * reachable from its home without crossing an empty slot. LR_OK or
 * LR_ECORRUPT. O(size). For tests and the owners' verify walks. */
lr_status lr__table_verify(const struct lr__table *t);

#endif /* LIBROUTE_LIB_TABLE_H */
