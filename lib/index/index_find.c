/* lr_index, the search: where a prompt's keys lead in the tree of
 * prefixes (index_store.c pictures it). The node table holds only the
 * nodes that start a run or lie at a depth that is a multiple of
 * TAB_STRIDE; a search finds the deepest of those a prompt reaches by a
 * binary search over its keys at those depths (each probe warming both
 * possible next ones), then walks at most TAB_STRIDE - 1 blocks along the
 * runs: a step takes the next node of the run when its key is the
 * prompt's next, else the table's run start under that key hanging from
 * the node.
 *
 * Worked example, TAB_STRIDE 16, a prompt of 100 blocks whose first 70
 * are held: the table holds depths 16, 32, ..., 96 of it, and is probed
 * at 48 (found), 80 (absent) and 64 (found); the walk goes from the node
 * at 64 through 65..70 and stops at 71, which no child of 70 has (one
 * more lookup if a run hangs from 70's run): depth 70.
 *
 * Everything here only reads the index: the learn asks it where a prompt
 * forks from what is held, the match where its hits end, concurrent
 * readers too (lr__index_peek). Lookups are counted into the caller's
 * counter, never into the index. */
#include "index/index_find.h"
#include "index/index_store.h"

/* Warm the slot a lookup or an insert of `key` starts at. A real load,
 * not __builtin_prefetch: on the virtual machines measured here a
 * prefetch that misses the TLB is dropped and gained nothing, while an
 * independent load overlaps its miss with the caller's work. */
static inline void
prefetch_key(const lr_index *ix, uint64_t key)
{
    lr__sink(lr__table_peek(&ix->ntab, hkey(ix, key)));
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

/* A run's first node under `key` hanging from node p->slot: the table
 * lookup of lr__index_child_of(), which passes over a node of the same
 * key elsewhere (only a collision or a forged delta puts one there). */
static bool
child_eq(const void *ctx, uint64_t key, uint32_t n)
{
    const struct lr__index_probe *p = ctx;
    return p->ix->keys[n] == key && node_off(p->ix, n) == 0 &&
           p->ix->runs[node_run(p->ix, n)].hang == p->slot;
}

uint32_t
lr__index_child_of(const lr_index *ix, uint32_t x, uint64_t key,
                   uint32_t *probes)
{
    if (x != LR_NIL) {
        uint32_t y = node_next(ix, x);
        if (y != LR_NIL && ix->keys[y] == key)
            return y;
        /* no run hangs from x's run: nothing to look up (a learn that
         * extends a prompt's end, a KV event after its parent's) */
        if (ix->runs[node_run(ix, x)].child == LR_NIL)
            return LR_NIL;
    }
    struct lr__index_probe p = { ix, x };
    *probes += 1;
    return lr__table_find(&ix->ntab, hkey(ix, key), key, child_eq, &p);
}

/* The table position t (keys[t - 1]) that is the j-th multiple of
 * TAB_STRIDE in depth after `first`. */
#define TAB_POS(first, j) ((first) + ((j)-1u) * TAB_STRIDE)

uint32_t
lr__index_deepest(const lr_index *ix, const uint64_t *keys, uint32_t lo,
                  uint32_t hi, uint32_t lo_node, uint32_t *node_out,
                  uint32_t *probes)
{
    /* keys[t - 1] is at depth a + t; the table holds every node whose
     * depth is a multiple of TAB_STRIDE: binary search over those (at
     * positions first, first + TAB_STRIDE, ...), then walk the rest. */
    uint32_t a = lo_node == LR_NIL ? 0 : node_depth(ix, lo_node) - lo;
    uint32_t first = lo + TAB_STRIDE - (a + lo) % TAB_STRIDE;
    uint32_t c = first <= hi ? (hi - first) / TAB_STRIDE + 1 : 0;
    uint32_t jl = 0, jh = c, x = lo_node;
    uint32_t pr = 0; /* counted here, stored once: nothing else is written */
    while (jl < jh) {
        uint32_t mid = jl + (jh - jl + 1) / 2;
        uint32_t up = mid + (jh - mid + 1) / 2, dn = jl + (mid - jl) / 2;
        if (up > mid && up <= jh)
            prefetch_key(ix, keys[TAB_POS(first, up) - 1]);
        if (dn > jl)
            prefetch_key(ix, keys[TAB_POS(first, dn) - 1]);
        uint32_t n = node_find(ix, keys[TAB_POS(first, mid) - 1]);
        pr++;
        if (n != LR_NIL) {
            jl = mid;
            x = n;
        } else {
            jh = mid - 1;
        }
    }
    uint32_t d = jl == 0 ? lo : TAB_POS(first, jl);
    /* the next multiple is absent (or past hi): walk at most to before it */
    uint32_t end = jl < c ? TAB_POS(first, jl + 1) - 1 : hi;
    for (; d < end; d++) {
        uint32_t y = lr__index_child_of(ix, x, keys[d], &pr);
        if (y == LR_NIL)
            break;
        x = y;
    }
    *probes += pr;
    *node_out = x;
    return d;
}

uint32_t
lr__index_chain_node(const lr_index *ix, const uint64_t *keys, uint32_t t,
                     uint32_t base, uint32_t *probes)
{
    /* from the table's node at or above depth t, down the runs: one
     * lookup and at most TAB_STRIDE - 1 steps, not a whole search (a
     * learn resolves every held anchor of a conversation this way) */
    uint32_t a = base == LR_NIL ? 0 : node_depth(ix, base);
    uint32_t r = (a + t) % TAB_STRIDE;
    uint32_t d = r <= t ? t - r : 0, x = base;
    if (d > 0) {
        x = node_find(ix, keys[d - 1]);
        *probes += 1;
        if (x == LR_NIL)
            return LR_NIL;
    }
    for (; d < t; d++) { /* x may be the root (LR_NIL) before the first */
        x = lr__index_child_of(ix, x, keys[d], probes);
        if (x == LR_NIL)
            return LR_NIL;
    }
    return x;
}

uint32_t
lr__index_depth_on(const lr_index *ix, uint32_t s, uint32_t n,
                   uint32_t *run_out, uint32_t *pos_out)
{
    *run_out = *pos_out = LR_NIL;
    while (n != LR_NIL) {
        uint32_t r = node_run(ix, n), o = node_off(ix, n);
        const struct hent *h = hent_of(ix, r, s);
        if (h != NULL) {
            uint32_t hs = h->to < o + 1 ? h->to : o + 1;
            *run_out = r;
            *pos_out = hs - 1;
            return ix->runs[r].top + hs;
        }
        n = ix->runs[r].hang;
    }
    return 0;
}
