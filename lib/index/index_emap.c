/* lr_index, the engine-hash map of precise mode:
 * (instance slot, engine hash) -> node slot, for BlockRemoved events and
 * parent hashes. An entry lives exactly as long as its instance holds its
 * block: every removal of holds (eviction, expiry, KV removal, clearing)
 * forgets the hashes of the blocks it takes (lr__index_emap_forget), so
 * no entry is ever stale and the map never holds more than the routes.
 *
 *   etab: keyed hash of (s, ehash) -> value
 *         value < EV_OVF: a node slot n, whose primary entry this is:
 *             ehash[n] = ehash, einst[n] = s   (10 bytes a slot)
 *         value >= EV_OVF: entry ep[value - EV_OVF] of the overflow pool
 *             {ehash, node, inst}: a second instance (or a second hash) on
 *             one block, as with a system prompt many engines hold; also
 *             in otab, keyed by (s, node), and eovf marks the node
 *
 * The per-slot arrays exist from the first KV event on and grow with the
 * node slots (index_store.c keeps them); an index that never sees one pays
 * nothing.
 * Hashes are keyed by the handle's seed (B26): engine hashes come from the
 * network. */
#include "index/index_emap.h"
#include "index/index_store.h"

/* An overflow entry. */
struct emap_ent {
    uint64_t ehash;
    uint32_t node; /* its block's slot; the free list's link while free */
    uint16_t inst; /* EINST_NONE: free */
    uint16_t pad;
};

#define EMAP_HASH_SALT 0xe4a5u
#define OMAP_HASH_SALT 0x0e4au
#define EMAP_LINK offsetof(struct emap_ent, node)
#define EV_OVF (1u << 31)

static inline uint64_t
ehv(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    return lr__mix64(ehash ^ ((uint64_t)s * GOLDEN_GAMMA),
                     ix->seed ^ EMAP_HASH_SALT);
}

static inline uint64_t
ohv(const lr_index *ix, uint32_t s, uint32_t n)
{
    return lr__mix64(((uint64_t)s << 32) | n, ix->seed ^ OMAP_HASH_SALT);
}

static inline bool
ovf_bit(const lr_index *ix, uint32_t n)
{
    return (ix->eovf[n >> CHUNK_SHIFT] >> (n & CHUNK_MASK)) & 1;
}

static bool
emap_eq(const void *ctx, uint64_t ehash, uint32_t v)
{
    const struct lr__index_probe *p = ctx;
    const lr_index *ix = p->ix;
    if (v >= EV_OVF)
        return ix->ep[v - EV_OVF].inst == p->slot &&
               ix->ep[v - EV_OVF].ehash == ehash;
    return ix->einst[v] == p->slot && ix->ehash[v] == ehash;
}

/* Value of (s, ehash) in etab, or LR_NIL. */
static uint32_t
emap_get(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    if (ix->ecap == 0)
        return LR_NIL;
    struct lr__index_probe p = { ix, s };
    return lr__table_find(&ix->etab, ehv(ix, s, ehash), ehash, emap_eq, &p);
}

static uint32_t
emap_node(const lr_index *ix, uint32_t v)
{
    return v >= EV_OVF ? ix->ep[v - EV_OVF].node : v;
}

uint32_t
lr__index_emap_find(const lr_index *ix, uint32_t s, uint64_t ehash)
{
    uint32_t v = emap_get(ix, s, ehash);
    return v == LR_NIL ? LR_NIL : emap_node(ix, v);
}

static bool
omap_eq(const void *ctx, uint64_t n, uint32_t e)
{
    const struct lr__index_probe *p = ctx;
    return p->ix->ep[e].inst == p->slot && p->ix->ep[e].node == n;
}

/* Drop the entry behind etab value v of instance s. */
static void
emap_del(lr_index *ix, uint32_t s, uint32_t v)
{
    if (v < EV_OVF) {
        lr__table_remove(&ix->etab, ehv(ix, s, ix->ehash[v]), v);
        ix->einst[v] = EINST_NONE;
    } else {
        uint32_t e = v - EV_OVF;
        struct emap_ent *en = &ix->ep[e];
        lr__table_remove(&ix->etab, ehv(ix, s, en->ehash), v);
        lr__table_remove(&ix->otab, ohv(ix, s, en->node), e);
        en->inst = EINST_NONE;
        pool_give(&ix->epool, ix->ep, sizeof *ix->ep, EMAP_LINK, e);
    }
    ix->emap_live--;
}

/* Room was reserved by lr__index_emap_reserve(). */
void
lr__index_emap_put(lr_index *ix, uint32_t s, uint64_t ehash, uint32_t n)
{
    uint32_t v = emap_get(ix, s, ehash);
    if (v != LR_NIL) {
        if (emap_node(ix, v) == n)
            return;
        emap_del(ix, s, v);
    }
    if (ix->einst[n] == EINST_NONE) {
        ix->ehash[n] = ehash;
        ix->einst[n] = (uint16_t)s;
        v = n;
    } else {
        uint32_t e = pool_take(&ix->epool, ix->ep, sizeof *ix->ep, EMAP_LINK);
        ix->ep[e].ehash = ehash;
        ix->ep[e].node = n;
        ix->ep[e].inst = (uint16_t)s;
        lr__table_insert(&ix->otab, ohv(ix, s, n), e);
        ix->eovf[n >> CHUNK_SHIFT] |= (uint16_t)(1u << (n & CHUNK_MASK));
        v = e + EV_OVF;
    }
    lr__table_insert(&ix->etab, ehv(ix, s, ehash), v);
    ix->emap_live++;
}

void
lr__index_emap_forget(lr_index *ix, uint32_t s, uint32_t r, uint32_t from,
                      uint32_t to)
{
    if (ix->ecap == 0 || from >= to)
        return;
    uint32_t n = lr__index_node_at(ix, r, from);
    for (uint32_t p = from;;) {
        if (ix->einst[n] == s)
            emap_del(ix, s, n);
        if (ovf_bit(ix, n) && ix->otab.count > 0) {
            struct lr__index_probe pr = { ix, s };
            uint32_t e;
            while ((e = lr__table_find(&ix->otab, ohv(ix, s, n), n, omap_eq,
                                       &pr)) != LR_NIL)
                emap_del(ix, s, e + EV_OVF);
        }
        if (++p == to)
            return;
        n = (n & CHUNK_MASK) != CHUNK_MASK
                ? n + 1
                : ix->chunks[n >> CHUNK_SHIFT].next << CHUNK_SHIFT;
    }
}

bool
lr__index_emap_has(const lr_index *ix, uint32_t s, uint32_t n)
{
    if (ix->ecap == 0)
        return false;
    if (ix->einst[n] == s)
        return true;
    if (!ovf_bit(ix, n) || ix->otab.count == 0)
        return false;
    struct lr__index_probe pr = { ix, s };
    return lr__table_find(&ix->otab, ohv(ix, s, n), n, omap_eq, &pr) != LR_NIL;
}

/* The slot arrays, the overflow pool, both tables. */
lr_status
lr__index_emap_reserve(lr_index *ix, uint32_t more)
{
    LR_TRY(lr__index_eslots_reserve(ix, ix->cpool.cap));
    LR_TRY(lr__index_pool_reserve(&ix->mem, &ix->epool, (void **)&ix->ep,
                                  sizeof *ix->ep, more, EV_OVF - 1));
    LR_TRY(lr__table_reserve(&ix->otab, &ix->mem, more));
    return lr__table_reserve(&ix->etab, &ix->mem, more);
}

uint64_t
lr__index_emap_live(const lr_index *ix)
{
    return ix->emap_live;
}

void
lr__index_emap_drop(lr_index *ix, uint32_t s)
{
    (void)ix;
    (void)s; /* forgotten with its holds (remove_all_of) */
}

void
lr__index_emap_free(lr_index *ix)
{
    lr__free(&ix->mem, ix->ep, (size_t)ix->epool.cap * sizeof(struct emap_ent));
    lr__table_free(&ix->etab, &ix->mem);
    lr__table_free(&ix->otab, &ix->mem);
}

uint64_t
lr__index_emap_digest(const lr_index *ix)
{
    uint64_t d = 0; /* a sum: independent of where entries sit */
    for (uint32_t n = 0; ix->ecap > 0 && n < ix->cpool.top * CHUNK; n++)
        if (ix->einst[n] != EINST_NONE)
            d += lr__mix64(ix->ehash[n] ^ ix->keys[n],
                           (uint64_t)ix->insts[ix->einst[n]].id + 1);
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst != EINST_NONE)
            d += lr__mix64(en->ehash ^ ix->keys[en->node],
                           (uint64_t)ix->insts[en->inst].id + 1);
    }
    return d;
}

void
lr__index_emap_each(const lr_index *ix,
                    void (*fn)(void *ctx, uint32_t s, uint64_t ehash,
                               uint32_t node),
                    void *ctx)
{
    for (uint32_t n = 0; ix->ecap > 0 && n < ix->cpool.top * CHUNK; n++)
        if (ix->einst[n] != EINST_NONE)
            fn(ctx, ix->einst[n], ix->ehash[n], n);
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst != EINST_NONE)
            fn(ctx, en->inst, en->ehash, en->node);
    }
}

/* Every entry's instance holds its block and the tables find it; the
 * counts agree. */
lr_status
lr__index_emap_verify(const lr_index *ix)
{
    uint64_t live = 0, ovf = 0;
    uint32_t nfree = 0;
    if (ix->ecap > 0 && ix->ecap < ix->cpool.cap)
        return LR_ECORRUPT; /* the slot arrays cover every slot */
    for (uint32_t n = 0; ix->ecap > 0 && n < ix->cpool.top * CHUNK; n++) {
        if (ix->einst[n] == EINST_NONE)
            continue;
        uint32_t s = ix->einst[n];
        live++;
        if (s >= ix->max_inst || !ix->insts[s].used ||
            ix->chunks[n >> CHUNK_SHIFT].run == LR_NIL ||
            node_off(ix, n) >= ix->runs[node_run(ix, n)].len ||
            !holds_node(ix, n, s) || emap_get(ix, s, ix->ehash[n]) != n)
            return LR_ECORRUPT;
    }
    for (uint32_t e = 0; e < ix->epool.top; e++) {
        const struct emap_ent *en = &ix->ep[e];
        if (en->inst == EINST_NONE)
            continue;
        live++;
        ovf++;
        uint32_t n = en->node;
        if (en->inst >= ix->max_inst || !ix->insts[en->inst].used ||
            ix->ecap == 0 || !ovf_bit(ix, n) ||
            ix->chunks[n >> CHUNK_SHIFT].run == LR_NIL ||
            !holds_node(ix, n, en->inst) ||
            emap_get(ix, en->inst, en->ehash) != e + EV_OVF)
            return LR_ECORRUPT;
    }
    for (uint32_t e = ix->epool.free; e != LR_NIL; e = ix->ep[e].node)
        if (e >= ix->epool.top || ix->ep[e].inst != EINST_NONE ||
            ++nfree > ix->epool.top)
            return LR_ECORRUPT;
    if (live != ix->emap_live || live != ix->etab.count ||
        ovf != ix->otab.count || nfree != ix->epool.nfree ||
        ovf + nfree != ix->epool.top)
        return LR_ECORRUPT;
    if (lr__table_verify(&ix->etab) != LR_OK)
        return LR_ECORRUPT;
    return lr__table_verify(&ix->otab);
}
