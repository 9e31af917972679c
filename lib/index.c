/* lr_index: the block-aligned prefix index. This file holds its core:
 * nodes, holds, LRU lists, learn, expiry, eviction, instances, lifecycle
 * and stats. The match's partition search is in index_match.c, precise
 * mode (KV events) in index_kv.c, the delta codec in index_delta.c,
 * verify and digest in index_check.c, the shared layout in index_impl.h.
 *
 * Layout
 * ------
 *
 *   ntab (lr__table, table.h: open addressing, fastrange home slot)
 *   +-------------+-------------+-----+
 *   | tag | n+1   | 0 (empty)   | ... |      tag = high 32 bits of the keyed
 *   +-------------+-------------+-----+      mix of the block key
 *          |
 *          v
 *   nodes[] (pool, 48 bytes each)             xh[] (pool, 28 bytes each)
 *   +----------------------------------+      +-----------------------+
 *   | key        (chained block hash)  |      | hold h | node | next  |
 *   | parent, child, sib_next, sib_prev|      +-----------------------+
 *   | more ---------------------------------> extra holders of the node
 *   | hold h  (first holder, inline)   |
 *   +----------------------------------+
 *
 *   hold = { inst, prev, next, bits, stamp }   (20 bytes)
 *     inst   instance slot holding this prefix
 *     prev,  neighbours in the LRU list of its trust class; a hold is named
 *     next   by a 32-bit ref: a node index (its inline hold) or
 *            REF_X | xhold index
 *     bits   LISTED | REMOTE | ANCHOR | number of child prefixes held by
 *            the same instance
 *     stamp  last use, in ticks of 2^24 ns since the index first saw time
 *
 * A node is a prefix (its key names every block up to it); a hold says an
 * instance caches that prefix. Nodes form a tree through parent / child /
 * sibling links (children of the root are not linked: nothing enumerates
 * them). A node exists exactly while some instance holds it.
 *
 * Invariants (lr__index_verify checks them all):
 *  1. Prefix property: if instance s holds node n, s holds n's parent. So
 *     along one prompt, "s holds depth d" is monotone in d and a match is a
 *     binary search over the prompt's chained keys.
 *  2. LOCAL is closed upward: the parent of a LOCAL hold is LOCAL.
 *  3. Every leaf hold (no child held by its instance) is in the LRU list of
 *     its trust class. Internal holds may be listed or not.
 *
 * Recency without touching whole paths: a hold's effective recency is the
 * newest stamp in its subtree (an ancestor is used whenever a descendant
 * is). Match and learn therefore stamp only the deepest hold they reach and
 * move it to the head of its list. Eviction pops the tail: a leaf is the
 * least recently used prefix and goes; an internal hold at the tail is
 * protected by its newer descendants and is just unlisted. When its last
 * child goes it becomes a leaf again and re-enters the list at the position
 * of that child's stamp, which is exactly where LRU order puts it.
 *
 * Worked example, B = 16, capacity 6:
 *   learn(A B C D | E F, inst 1)     boundary after D, full length F
 *       A-B-C-D*-E-F*     (* = anchor; only F's hold is listed)
 *   learn(A B X, inst 2)             A, B gain a second holder
 *       A-B-X*            (A, B: inline hold inst 1, extra hold inst 2)
 *   match(A B C D E Q) -> inst 1: 5 blocks (80 tokens), inst 2: 2 blocks
 *       probes: depth 3 (C present), 5 (E), 6 (Q absent) ... then inst 2
 *       is resolved by the partition search at depths 3 and 2.
 *   learn(P Q, inst 3) needs 2 routes and 7 + 2 > 6, so LRU leaves go:
 *   X (inst 2's only leaf, the oldest) is evicted, and the eviction trims
 *   on through B and A of inst 2, which are neither anchors nor used on
 *   their own: inst 2 never said a message ended there. Inst 1's A-B-C-D
 *   stays: D is an anchor, so evicting F trims only back to D.
 *
 * Every mutating call runs in three phases: validate and reserve memory
 * (the only phase that can fail), mutate (cannot fail), then expire and
 * evict back under capacity. That is what makes LR_ENOMEM leave the index
 * unchanged.
 */
#include "index_impl.h"

/* Defaults of lr_index_options (documented in lr_index.h). */
#define DEFAULT_CAPACITY (1u << 20)
#define DEFAULT_TTL_NS (3600ull * 1000000000ull)
#define DEFAULT_BLOCK_TOKENS 16u
#define DEFAULT_MAX_INSTANCES 1024u
#define DEFAULT_JOURNAL 4096u
#define EMAP_PER_BLOCK 2u /* engine_map_capacity per capacity block */
#define MAX_JOURNAL (1u << 24)
/* The caller's seed is mixed with "lrindex" before keying the tables. */
#define SEED_MIX 0x6c72696e646578ull
/* Per-instance scratch arrays of a match: cand, cref, cdepth, mark, tref. */
#define N_SCRATCH 5u
/* Nodes the first node table holds (64 slots at most 3/4 full). */
#define NODE_TABLE_START 48
/* Smallest array lr__index_grow makes, in elements. */
#define POOL_MIN 64

/* ------------------------------------------------------------------------ */
/* time                                                                      */
/* ------------------------------------------------------------------------ */

uint32_t
lr__index_tick(lr_index *ix, uint64_t now)
{
    if (!ix->has_epoch) {
        ix->has_epoch = true;
        ix->epoch_ns = now;
    }
    if (now <= ix->epoch_ns)
        return 0;
    uint64_t t = (now - ix->epoch_ns) >> TICK_SHIFT;
    uint32_t tick = t >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)t;
    if (tick > ix->last_tick)
        ix->last_tick = tick;
    return tick;
}

/* REMOTE routes (another replica's word) may live shorter than LOCAL
 * ones (remote_ttl_ns); each list ages by its own TTL. */
static inline bool
is_expired(const lr_index *ix, const struct hold *h, uint32_t tick)
{
    uint64_t ttl = (h->bits & HB_REMOTE) ? ix->remote_ttl_ticks : ix->ttl_ticks;
    if (ttl == UINT64_MAX || tick <= h->stamp)
        return false;
    return (uint64_t)(tick - h->stamp) > ttl;
}

/* ------------------------------------------------------------------------ */
/* keys                                                                      */
/* ------------------------------------------------------------------------ */

uint64_t
lr__index_tenant_root(uint64_t salt)
{
    uint8_t b[sizeof salt];
    lr__put_u64(b, salt);
    return lr__hash(b, sizeof b, LR_SEED_TENANT);
}

void
lr__index_chain_keys(uint64_t prev, const uint32_t *tok, size_t nblocks,
                     uint32_t B, uint64_t *out)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t buf[sizeof(uint32_t) * LR_INDEX_MAX_BLOCK_TOKENS];
    for (size_t i = 0; i < nblocks; i++) {
        for (uint32_t j = 0; j < B; j++)
            lr__put_u32(buf + sizeof(uint32_t) * j, tok[i * B + j]);
        prev =
            lr__hash(buf, (size_t)B * sizeof(uint32_t), prev ^ LR_SEED_BLOCK);
        out[i] = prev;
    }
#else
    size_t bytes = (size_t)B * sizeof(uint32_t);
    for (size_t i = 0; i < nblocks; i++) {
        prev = lr__hash(tok + i * B, bytes, prev ^ LR_SEED_BLOCK);
        out[i] = prev;
    }
#endif
}

lr_status
lr_block_keys(uint32_t block_tokens, const uint32_t *tokens, size_t n_tokens,
              uint64_t tenant_salt, uint64_t *keys, size_t capacity,
              size_t *n_keys)
{
    LR_RETURN_IF(n_keys == NULL, LR_EINVAL);
    LR_RETURN_IF(block_tokens == 0 || block_tokens > LR_INDEX_MAX_BLOCK_TOKENS,
                 LR_EINVAL);
    LR_RETURN_IF(n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(tokens == NULL && n_tokens != 0, LR_EINVAL);
    size_t n = n_tokens / block_tokens;
    *n_keys = n;
    if (keys == NULL)
        return capacity == 0 ? LR_OK : LR_EINVAL;
    LR_RETURN_IF(capacity < n, LR_EBUFSIZE);
    lr__index_chain_keys(lr__index_tenant_root(tenant_salt), tokens, n,
                         block_tokens, keys);
    return LR_OK;
}

/* ------------------------------------------------------------------------ */
/* node hash table                                                           */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* memory reservation (phase 1: the only place mutators can fail)            */
/* ------------------------------------------------------------------------ */

lr_status
lr__index_grow(struct lr__mem *m, void **arr, uint32_t *cap, uint32_t need,
               size_t elem, uint32_t limit)
{
    if (need <= *cap)
        return LR_OK;
    if (need > limit)
        return LR_ENOMEM;
    uint64_t want = (uint64_t)*cap + *cap / 2;
    if (want < need)
        want = need;
    if (want < POOL_MIN)
        want = POOL_MIN;
    if (want > limit)
        want = limit;
    size_t old_b, new_b;
    if (!lr__mul_size(*cap, elem, &old_b) ||
        !lr__mul_size((size_t)want, elem, &new_b))
        return LR_ENOMEM;
    void *p = lr__realloc(m, *arr, old_b, new_b);
    if (p == NULL)
        return LR_ENOMEM;
    /* Fault the new pages in now, in the call that grows the pool, not
     * one page at a time in the calls that follow. */
    memset((char *)p + old_b, 0, new_b - old_b);
    *arr = p;
    *cap = (uint32_t)want;
    return LR_OK;
}

/* Room for `nn` more nodes and `nx` more extra holds. */
lr_status
lr__index_pool_reserve(struct lr__mem *m, struct pool *p, void **arr,
                       size_t elem, uint64_t more, uint32_t limit)
{
    uint64_t need = (uint64_t)p->top + more;
    need = need > p->nfree ? need - p->nfree : 0;
    if (need > limit)
        return LR_ENOMEM;
    return lr__index_grow(m, arr, &p->cap, (uint32_t)need, elem, limit);
}

/* Room for `nn` more nodes and `nx` more extra holds. */
lr_status
lr__index_reserve(lr_index *ix, uint64_t nn, uint64_t nx)
{
    uint64_t limit64 = ix->capacity + nn + nx + POOL_MIN;
    uint32_t limit = limit64 > POOL_MAX ? POOL_MAX : (uint32_t)limit64;
    LR_TRY(lr__index_pool_reserve(&ix->mem, &ix->npool, (void **)&ix->nodes,
                                  sizeof(struct node), nn, limit));
    LR_TRY(lr__index_pool_reserve(&ix->mem, &ix->xpool, (void **)&ix->xh,
                                  sizeof(struct xhold), nx, limit));
    return lr__table_reserve(&ix->ntab, &ix->mem,
                             nn > UINT32_MAX ? UINT32_MAX : (uint32_t)nn);
}

/* Scratch arrays are not state: growing them changes nothing logical. */
lr_status
lr__index_scratch_keys(lr_index *ix, size_t n)
{
    return lr__index_grow(&ix->mem, (void **)&ix->kbuf, &ix->kbuf_cap,
                          (uint32_t)n, sizeof *ix->kbuf, UINT32_MAX);
}

lr_status
lr__index_scratch_anchors(lr_index *ix, size_t n)
{
    return lr__index_grow(&ix->mem, (void **)&ix->abuf, &ix->abuf_cap,
                          (uint32_t)n, sizeof *ix->abuf, UINT32_MAX);
}

/* ------------------------------------------------------------------------ */
/* pools                                                                     */
/* ------------------------------------------------------------------------ */

#define NODE_LINK offsetof(struct node, child)
#define XHOLD_LINK offsetof(struct xhold, next)

/* A free node or extra hold is marked INST_FREE (verify and the walks
 * over [0, top) skip it). */
static void
node_release(lr_index *ix, uint32_t n)
{
    ix->nodes[n].h.inst = INST_FREE;
    pool_give(&ix->npool, ix->nodes, sizeof *ix->nodes, NODE_LINK, n);
}

/* ------------------------------------------------------------------------ */
/* LRU lists                                                                 */
/* ------------------------------------------------------------------------ */

static void
lru_unlink(lr_index *ix, uint32_t ref)
{
    struct hold *h = H(ix, ref);
    int l = list_of(h);
    if (h->prev != LR_NIL)
        H(ix, h->prev)->next = h->next;
    else
        ix->head[l] = h->next;
    if (h->next != LR_NIL)
        H(ix, h->next)->prev = h->prev;
    else
        ix->tail[l] = h->prev;
    h->prev = h->next = LR_NIL;
    h->bits &= ~HB_LISTED;
}

static void
lru_push_head(lr_index *ix, uint32_t ref)
{
    struct hold *h = H(ix, ref);
    int l = list_of(h);
    h->prev = LR_NIL;
    h->next = ix->head[l];
    if (ix->head[l] != LR_NIL)
        H(ix, ix->head[l])->prev = ref;
    else
        ix->tail[l] = ref;
    ix->head[l] = ref;
    h->bits |= HB_LISTED;
}

/* Insert an unlisted hold where its stamp belongs, searching from the tail
 * (where re-entering holds belong) for at most LRU_SEEK_MAX steps; a
 * search that runs out inserts where it stopped (bounded work, order then
 * approximate). */
#define LRU_SEEK_MAX 64

static void
lru_insert_by_stamp(lr_index *ix, uint32_t ref)
{
    struct hold *h = H(ix, ref);
    int l = list_of(h);
    uint32_t cur = ix->tail[l];
    for (int steps = 0; cur != LR_NIL && steps < LRU_SEEK_MAX; steps++) {
        if (H(ix, cur)->stamp >= h->stamp)
            break;
        cur = H(ix, cur)->prev;
    }
    if (cur == LR_NIL) {
        lru_push_head(ix, ref);
        return;
    }
    struct hold *c = H(ix, cur);
    h->prev = cur;
    h->next = c->next;
    if (c->next != LR_NIL)
        H(ix, c->next)->prev = ref;
    else
        ix->tail[l] = ref;
    c->next = ref;
    h->bits |= HB_LISTED;
}

void
lr__index_touch(lr_index *ix, uint32_t ref, uint32_t tick)
{
    struct hold *h = H(ix, ref);
    if (h->bits & HB_LISTED)
        lru_unlink(ix, ref);
    h->stamp = tick;
    lru_push_head(ix, ref);
}

void
lr__index_touch_at(lr_index *ix, uint32_t ref, uint32_t stamp)
{
    struct hold *h = H(ix, ref);
    if (h->stamp >= stamp && (h->bits & HB_LISTED))
        return; /* already as recent, and listed */
    if (h->bits & HB_LISTED)
        lru_unlink(ix, ref);
    if (h->stamp < stamp)
        h->stamp = stamp;
    int l = list_of(h);
    uint32_t head = ix->head[l], tail = ix->tail[l];
    if (head == LR_NIL || H(ix, head)->stamp <= h->stamp) {
        lru_push_head(ix, ref);
        return;
    }
    if (h->stamp - H(ix, tail)->stamp < H(ix, head)->stamp - h->stamp) {
        lru_insert_by_stamp(ix, ref); /* nearer the tail: from there */
        return;
    }
    /* nearer the head (a route used a moment before the newest): walk
     * from the head, as boundedly as lru_insert_by_stamp walks from the
     * tail */
    uint32_t cur = head;
    for (int steps = 0; steps < LRU_SEEK_MAX; steps++) {
        uint32_t next = H(ix, cur)->next;
        if (next == LR_NIL || H(ix, next)->stamp <= h->stamp)
            break;
        cur = next;
    }
    struct hold *c = H(ix, cur);
    h->prev = cur;
    h->next = c->next;
    if (c->next != LR_NIL)
        H(ix, c->next)->prev = ref;
    else
        ix->tail[l] = ref;
    c->next = ref;
    h->bits |= HB_LISTED;
}

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

/* ------------------------------------------------------------------------ */
/* removal                                                                   */
/* ------------------------------------------------------------------------ */

static void
child_unlink(lr_index *ix, uint32_t n)
{
    struct node *nd = &ix->nodes[n];
    if (nd->parent == LR_NIL)
        return;
    if (nd->sib_prev != LR_NIL)
        ix->nodes[nd->sib_prev].sib_next = nd->sib_next;
    else
        ix->nodes[nd->parent].child = nd->sib_next;
    if (nd->sib_next != LR_NIL)
        ix->nodes[nd->sib_next].sib_prev = nd->sib_prev;
}

static void
count_drop(lr_index *ix, const struct hold *h, int why)
{
    ix->holds--;
    if (h->bits & HB_REMOTE)
        ix->remote--;
    ix->insts[h->inst].blocks--;
    if (why == WHY_EVICT)
        ix->evicted++;
    else if (why == WHY_EXPIRE)
        ix->expired++;
}

/* The inline hold of node n is gone: move its first extra hold in. Its
 * LRU neighbours must now name it by the node's ref. */
static void
promote_first_extra(lr_index *ix, uint32_t n)
{
    struct node *nd = &ix->nodes[n];
    uint32_t x = nd->more;
    uint16_t nh = nd->h.aux;
    nd->h = ix->xh[x].h;
    nd->h.aux = nh;
    nd->more = ix->xh[x].next;
    if (!(nd->h.bits & HB_LISTED))
        return;
    int l = list_of(&nd->h);
    if (nd->h.prev != LR_NIL)
        H(ix, nd->h.prev)->next = n;
    else
        ix->head[l] = n;
    if (nd->h.next != LR_NIL)
        H(ix, nd->h.next)->prev = n;
    else
        ix->tail[l] = n;
}

/* Take hold `ref` off its node. With `free_node`, a node left with no
 * holder is deleted; otherwise it is marked PENDING for a later sweep. The
 * caller fixes the parent hold's child count.
 *
 * An extra hold is unlinked from its node's singly linked holder list,
 * which needs its predecessor, and the oldest holds (the ones evicted) sit
 * at the list's end. *pred is a guess of the predecessor (an extra hold
 * index, LR_NIL for none), checked before any walk, and comes back as the
 * real one (LR_NIL: the list's head). A trim walking up one instance's
 * chain passes the predecessor one level down, minus one: lists along a
 * chain learned by the same instances in the same order are laid out
 * alike, so that guess usually hits (see parent_hold). */
static void
hold_remove(lr_index *ix, uint32_t ref, int why, bool free_node, uint32_t *pred)
{
    struct hold *h = H(ix, ref);
    uint32_t n = ref_node(ix, ref);
    struct node *nd = &ix->nodes[n];
    if (h->bits & HB_LISTED)
        lru_unlink(ix, ref);
    count_drop(ix, h, why);
    nd->h.aux--;
    uint32_t x; /* the extra hold that goes back to its pool */
    if (ref & REF_X) {
        x = ref & ~REF_X;
        uint32_t y = *pred;
        uint32_t *pp;
        if (nd->more == x) {
            pp = &nd->more;
            y = LR_NIL;
        } else if (y != LR_NIL && y < ix->xpool.top && ix->xh[y].next == x &&
                   ix->xh[y].node == n && ix->xh[y].h.inst != INST_FREE) {
            pp = &ix->xh[y].next;
        } else {
            for (y = nd->more; ix->xh[y].next != x; y = ix->xh[y].next)
                ;
            pp = &ix->xh[y].next;
        }
        *pred = y;
        *pp = ix->xh[x].next;
    } else if (nd->more != LR_NIL) {
        *pred = LR_NIL;
        x = nd->more;
        promote_first_extra(ix, n);
    } else if (!free_node) {
        nd->h.inst = PENDING;
        return;
    } else {
        assert(nd->child == LR_NIL);
        lr__table_remove(&ix->ntab, hkey(ix, nd->key), n);
        child_unlink(ix, n);
        node_release(ix, n);
        return;
    }
    ix->xh[x].h.inst = INST_FREE;
    pool_give(&ix->xpool, ix->xh, sizeof *ix->xh, XHOLD_LINK, x);
}

/* Batch eviction. A trim frees a run of blocks (an evicted message is
 * hundreds of them), and each freed node's table slot is a cache miss
 * that the backward-shift delete waits for. Before removing anything,
 * walk the run read-only, as the trim below will (same conditions, same
 * carried stamp), for at most TRIM_WARM holds, and load the home slot of
 * every node that will be freed: the loads are independent, so their
 * misses overlap, and the deletes then find their slots in cache. The
 * walk also pulls the run's nodes in. Returns the holds covered (>= 1);
 * the trim warms the next stretch when it gets that far. Reads only. */
#define TRIM_WARM 64u

static uint32_t
warm_trim_run(const lr_index *ix, uint32_t ref, bool precise)
{
    uint64_t warm = 0;
    uint32_t k = 0;
    uint32_t stamp = H(ix, ref)->stamp;
    while (k < TRIM_WARM) {
        k++;
        const struct hold *h = H(ix, ref);
        uint32_t n = ref_node(ix, ref);
        const struct node *nd = &ix->nodes[n];
        if (!(ref & REF_X) && nd->more == LR_NIL)
            warm += lr__table_peek(&ix->ntab, hkey(ix, nd->key));
        if (nd->parent == LR_NIL)
            break;
        uint32_t pref = parent_hold(ix, ref, nd->parent, h->inst);
        if (pref == LR_NIL)
            break;
        const struct hold *ph = H(ix, pref);
        if (nchild(ph) != 1 || (ph->bits & HB_ANCHOR) ||
            !(precise || ph->stamp <= stamp))
            break;
        ref = pref;
    }
    lr__sink(warm);
    return k;
}

/* Remove leaf hold `ref`, then walk up. A parent hold left with no child
 * has the recency of that child (or its own, when newer): if its own stamp
 * is no newer than the child's and it is not an anchor, it goes too, so
 * evictions cut whole segments back to a message boundary and expiry takes
 * everything that aged together. In precise mode (the engine dropped the
 * block) stamps do not matter: the cut goes back to the engine block
 * boundary. A parent that stays becomes a leaf at its inherited recency.
 * Preserves invariants 1-3. */
void
lr__index_remove_leaf_and_trim(lr_index *ix, uint32_t ref, int why,
                               bool precise)
{
    uint32_t warmed = 0;    /* holds of the run whose slots are warm */
    uint32_t pred = LR_NIL; /* guess for hold_remove, see there */
    for (;;) {
        if (warmed == 0)
            warmed = warm_trim_run(ix, ref, precise);
        warmed--;
        struct hold *h = H(ix, ref);
        assert(nchild(h) == 0);
        uint32_t s = h->inst;
        uint32_t stamp = h->stamp;
        uint32_t p = ix->nodes[ref_node(ix, ref)].parent;
        uint32_t pref = p != LR_NIL ? parent_hold(ix, ref, p, s) : LR_NIL;
        hold_remove(ix, ref, why, true, &pred);
        pred = pred != LR_NIL && pred > 0 ? pred - 1 : LR_NIL;
        if (pref == LR_NIL)
            return;
        struct hold *ph = H(ix, pref);
        if (LR_NEVER(nchild(ph) == 0))
            return;
        ph->bits--;
        if (nchild(ph) > 0)
            return;
        if (!(ph->bits & HB_ANCHOR) && (precise || ph->stamp <= stamp)) {
            if (ph->stamp < stamp)
                ph->stamp = stamp; /* the walk carries the subtree's recency */
            ref = pref;
            continue;
        }
        if (ph->stamp < stamp) {
            ph->stamp = stamp;
            if (ph->bits & HB_LISTED)
                lru_unlink(ix, pref);
        }
        if (!(ph->bits & HB_LISTED))
            lru_insert_by_stamp(ix, pref);
        return;
    }
}

/* Pop the tail of list l: a leaf is removed (and trimmed), an internal hold
 * is only unlisted, being protected by its newer descendants. */
static void
pop_tail(lr_index *ix, int l, int why)
{
    uint32_t ref = ix->tail[l];
    struct hold *h = H(ix, ref);
    lru_unlink(ix, ref);
    if (nchild(h) > 0)
        return;
    lr__index_remove_leaf_and_trim(ix, ref, why, false);
}

void
lr__index_expire_all(lr_index *ix, uint32_t tick)
{
    if (ix->ttl_ticks == UINT64_MAX && ix->remote_ttl_ticks == UINT64_MAX)
        return;
    /* Until stable: a REMOTE leaf expiring can uncover a LOCAL parent that
     * aged with it, and the other way round. */
    bool more = true;
    while (more) {
        more = false;
        for (int l = 0; l < N_LISTS; l++)
            while (ix->tail[l] != LR_NIL &&
                   is_expired(ix, H(ix, ix->tail[l]), tick)) {
                pop_tail(ix, l, WHY_EXPIRE);
                more = true;
            }
    }
}

/* The list memory pressure takes from: REMOTE while it has a route, or
 * (LR_EVICT_LRU) the one whose tail was used least recently. */
static int
evict_list(const lr_index *ix)
{
    uint32_t r = ix->tail[LIST_REMOTE], l = ix->tail[LIST_LOCAL];
    if (r == LR_NIL)
        return LIST_LOCAL;
    if (l == LR_NIL || !ix->evict_lru)
        return LIST_REMOTE;
    return H(ix, r)->stamp <= H(ix, l)->stamp ? LIST_REMOTE : LIST_LOCAL;
}

static void
evict_to_capacity(lr_index *ix)
{
    while (ix->holds > ix->capacity) {
        int l = evict_list(ix);
        if (LR_NEVER(ix->tail[l] == LR_NIL))
            return;
        pop_tail(ix, l, WHY_EVICT);
    }
}

void
lr__index_settle(lr_index *ix, uint32_t tick)
{
    lr__index_expire_all(ix, tick);
    evict_to_capacity(ix);
}

/* Drop every hold of instance s in the subtree under node root (root's own
 * hold excluded). Walks the child links with no stack: descend to a leaf
 * of s, remove it, climb to its parent, repeat. */
void
lr__index_remove_descendants(lr_index *ix, uint32_t s, uint32_t root)
{
    uint32_t cur = root;
    for (;;) {
        uint32_t cref = hold_find(ix, cur, s);
        if (nchild(H(ix, cref)) > 0) {
            uint32_t c = ix->nodes[cur].child;
            while (c != LR_NIL && hold_find(ix, c, s) == LR_NIL)
                c = ix->nodes[c].sib_next;
            if (!LR_NEVER(c == LR_NIL)) {
                cur = c;
                continue;
            }
            H(ix, cref)->bits &= ~HB_NCHILD;
        }
        if (cur == root)
            return;
        uint32_t p = ix->nodes[cur].parent;
        uint32_t pref = parent_hold(ix, cref, p, s);
        uint32_t pred = LR_NIL;
        hold_remove(ix, cref, WHY_DROP, true, &pred);
        H(ix, pref)->bits--;
        cur = p;
    }
}

/* Drop every hold of instance s: O(nodes). Two passes so that no node is
 * freed while a child still points at it. */
static void
remove_all_of(lr_index *ix, uint32_t s)
{
    for (uint32_t n = 0; n < ix->npool.top; n++) {
        if (ix->nodes[n].h.inst == INST_FREE || ix->nodes[n].h.inst == PENDING)
            continue;
        uint32_t ref = hold_find(ix, n, s);
        uint32_t pred = LR_NIL;
        if (ref != LR_NIL)
            hold_remove(ix, ref, WHY_DROP, false, &pred);
    }
    /* A PENDING node has no holder left, so (prefix property) none of its
     * descendants has one either: they are all PENDING. */
    for (uint32_t n = 0; n < ix->npool.top; n++) {
        if (ix->nodes[n].h.inst != PENDING)
            continue;
        lr__table_remove(&ix->ntab, hkey(ix, ix->nodes[n].key), n);
        uint32_t p = ix->nodes[n].parent;
        if (p != LR_NIL && ix->nodes[p].h.inst != PENDING)
            child_unlink(ix, n);
    }
    for (uint32_t n = 0; n < ix->npool.top; n++)
        if (ix->nodes[n].h.inst == PENDING)
            node_release(ix, n);
    /* Surviving holds of other instances kept their child counts, which
     * never count another instance's children. */
}

/* ------------------------------------------------------------------------ */
/* search                                                                    */
/* ------------------------------------------------------------------------ */

/* Binary search over a prompt's keys: the deepest depth in [lo, hi]
 * whose node exists (s == LR_NIL) or is held by instance s, given that
 * depth lo qualifies. *ref_out is that node (or s's hold on it), or lo_ref
 * when nothing deeper than lo qualifies. A search for any holder (match,
 * the new part of a learn) warms both slots the next probe may read; an
 * instance's search (the known part of a learn) does not, as before the
 * two searches were one function. */
uint32_t
lr__index_deepest(lr_index *ix, uint32_t s, const uint64_t *keys, uint32_t lo,
                  uint32_t hi, uint32_t lo_ref, uint32_t *ref_out)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (s == LR_NIL)
            prefetch_step(ix, keys, lo, hi, mid);
        uint32_t r = node_find(ix, keys[mid - 1]);
        if (r != LR_NIL && s != LR_NIL)
            r = hold_find(ix, r, s);
        ix->last_probes++;
        if (r != LR_NIL) {
            lo = mid;
            lo_ref = r;
        } else {
            hi = mid - 1;
        }
    }
    *ref_out = lo_ref;
    return lo;
}

/* ------------------------------------------------------------------------ */
/* insertion (phase 2: cannot fail; memory was reserved)                    */
/* ------------------------------------------------------------------------ */

/* hold_new and node_new are inlined into apply_learn's loop (one call
 * per new block); index_delta.c gets the lr__index_ wrappers below. */
static inline uint32_t
hold_new(lr_index *ix, uint32_t n, uint32_t s, uint32_t bits, uint32_t tick)
{
    struct node *nd = &ix->nodes[n];
    uint32_t ref;
    struct hold *h;
    if (nd->h.inst == INST_FREE) {
        ref = n;
        h = &nd->h;
        nd->h.aux = 0;
    } else {
        uint32_t x = pool_take(&ix->xpool, ix->xh, sizeof *ix->xh, XHOLD_LINK);
        ix->xh[x].node = n;
        ix->xh[x].h.aux = 0;
        ix->xh[x].next = nd->more;
        nd->more = x;
        ref = x | REF_X;
        h = &ix->xh[x].h;
    }
    h->inst = (uint16_t)s;
    nd->h.aux++;
    h->prev = h->next = LR_NIL;
    h->bits = bits;
    h->stamp = tick;
    ix->holds++;
    if (bits & HB_REMOTE)
        ix->remote++;
    ix->insts[s].blocks++;
    ix->learned++;
    return ref;
}

static inline uint32_t
node_new(lr_index *ix, uint64_t key, uint32_t parent)
{
    uint32_t n = pool_take(&ix->npool, ix->nodes, sizeof *ix->nodes, NODE_LINK);
    struct node *nd = &ix->nodes[n];
    nd->key = key;
    nd->parent = parent;
    nd->child = LR_NIL;
    nd->sib_prev = LR_NIL;
    nd->sib_next = LR_NIL;
    nd->more = LR_NIL;
    nd->h.inst = INST_FREE;
    if (parent != LR_NIL) {
        struct node *pn = &ix->nodes[parent];
        nd->sib_next = pn->child;
        if (pn->child != LR_NIL)
            ix->nodes[pn->child].sib_prev = n;
        pn->child = n;
    }
    lr__table_insert(&ix->ntab, hkey(ix, key), n);
    return n;
}

uint32_t
lr__index_hold_new(lr_index *ix, uint32_t n, uint32_t s, uint32_t bits,
                   uint32_t tick)
{
    return hold_new(ix, n, s, bits, tick);
}

uint32_t
lr__index_node_new(lr_index *ix, uint64_t key, uint32_t parent)
{
    return node_new(ix, key, parent);
}

/* Flip the REMOTE holds of s from `ref` upward to LOCAL (invariant 2). */
static void
upgrade_up(lr_index *ix, uint32_t ref)
{
    while (ref != LR_NIL) {
        struct hold *h = H(ix, ref);
        if (!(h->bits & HB_REMOTE))
            return;
        bool listed = (h->bits & HB_LISTED) != 0;
        if (listed)
            lru_unlink(ix, ref);
        h->bits &= ~HB_REMOTE;
        ix->remote--;
        if (listed)
            lru_insert_by_stamp(ix, ref);
        uint32_t p = ix->nodes[ref_node(ix, ref)].parent;
        ref = p != LR_NIL ? parent_hold(ix, ref, p, h->inst) : LR_NIL;
    }
}

/* Phase 1 of a learn: where the instance's and anybody's holds end. */
lr_status
lr__index_plan_learn(lr_index *ix, struct learn_plan *p)
{
    ix->last_probes = 0;
    p->d_s = 0;
    p->ref_ds = LR_NIL;
    p->node_any = p->base;
    if (p->s != LR_NIL) {
        p->d_s = lr__index_deepest(ix, p->s, p->keys, 0, p->n, p->base_ref,
                                   &p->ref_ds);
        if (p->d_s > 0)
            p->node_any = ref_node(ix, p->ref_ds);
    }
    p->d_any = p->d_s;
    if (p->d_s < p->n)
        p->d_any = lr__index_deepest(ix, LR_NIL, p->keys, p->d_s, p->n,
                                     p->node_any, &p->node_any);
    return lr__index_reserve(ix, p->n - p->d_any, p->d_any - p->d_s);
}

/* Blocks found per stretch of a learn over existing nodes. */
#define LEARN_WARM 64u

/* Phase 2 of a learn. Returns the deepest hold's ref (LR_NIL if n == 0). */
uint32_t
lr__index_apply_learn(lr_index *ix, struct learn_plan *p, uint32_t tick)
{
    if (p->s == LR_NIL)
        p->s = lr__index_inst_add(ix, p->id);
    uint32_t a = 0;
    if (!p->remote && p->ref_ds != LR_NIL)
        upgrade_up(ix, p->ref_ds);
    /* anchors on what is already held */
    for (; a < p->n_anchors && p->anchors[a] <= p->d_s; a++) {
        uint32_t n = node_find(ix, p->keys[p->anchors[a] - 1]);
        H(ix, hold_find(ix, n, p->s))->bits |= HB_ANCHOR;
    }
    if (p->n == p->d_s) {
        if (p->ref_ds != LR_NIL && p->n > 0)
            lr__index_touch(ix, p->ref_ds, tick);
        return p->n > 0 ? p->ref_ds : LR_NIL;
    }
    uint32_t prev_node = p->d_s > 0 ? ref_node(ix, p->ref_ds) : p->base;
    uint32_t prev_ref = p->d_s > 0 ? p->ref_ds : p->base_ref;
    uint32_t base_bits = p->remote ? HB_REMOTE : 0;
    /* Every new block's insert misses in the slot table. Touch them all
     * first, as independent loads the CPU overlaps, so that the inserts
     * below find their lines in cache (43 -> 28 us per new 8k prompt). */
    uint64_t warm = 0;
    for (uint32_t d = p->d_any + 1; d <= p->n; d++)
        warm += lr__table_peek(&ix->ntab, hkey(ix, p->keys[d - 1]));
    lr__sink(warm);
    /* Blocks that exist (another instance holds them, as when a policy
     * sends a held prompt elsewhere) cost two dependent misses each: the
     * slot, then the node. Take them in stretches of LEARN_WARM: load
     * every slot, then find every node and load it, then add the holds,
     * so that each pass overlaps its misses. */
    uint32_t found[LEARN_WARM];
    for (uint32_t d = p->d_s + 1; d <= p->n;) {
        uint32_t m = 0;
        if (d <= p->d_any) {
            m = p->d_any - d + 1;
            if (m > LEARN_WARM)
                m = LEARN_WARM;
            uint64_t w = 0;
            for (uint32_t i = 0; i < m; i++)
                w += lr__table_peek(&ix->ntab, hkey(ix, p->keys[d + i - 1]));
            lr__sink(w);
            for (uint32_t i = 0; i < m; i++) {
                found[i] = node_find(ix, p->keys[d + i - 1]);
                w += ix->nodes[found[i]].more;
            }
            lr__sink(w);
        }
        uint32_t cnt = m ? m : p->n - d + 1;
        for (uint32_t i = 0; i < cnt; i++, d++) {
            uint32_t n = m ? found[i] : node_new(ix, p->keys[d - 1], prev_node);
            uint32_t bits = base_bits;
            if (a < p->n_anchors && p->anchors[a] == d) {
                bits |= HB_ANCHOR;
                a++;
            }
            uint32_t ref = hold_new(ix, n, p->s, bits, tick);
            if (prev_ref != LR_NIL)
                H(ix, prev_ref)->bits++;
            prev_node = n;
            prev_ref = ref;
        }
    }
    lru_push_head(ix, prev_ref);
    return prev_ref;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

static const lr_index_options options_defaults = {
    .struct_size = sizeof(lr_index_options),
    .capacity_blocks = DEFAULT_CAPACITY,
    .ttl_ns = DEFAULT_TTL_NS,
    .block_tokens = DEFAULT_BLOCK_TOKENS,
    .max_instances = DEFAULT_MAX_INSTANCES,
    .journal_capacity = DEFAULT_JOURNAL,
    .engine_map_capacity = EMAP_PER_BLOCK * DEFAULT_CAPACITY,
};

void
lr_index_options_init_sized(lr_index_options *opt, size_t size)
{
    lr__init_sized(opt, size, &options_defaults, sizeof options_defaults);
}

static void
index_free(lr_index *ix)
{
    struct lr__mem *m = &ix->mem;
    lr__free(m, ix->nodes, (size_t)ix->npool.cap * sizeof(struct node));
    lr__free(m, ix->xh, (size_t)ix->xpool.cap * sizeof(struct xhold));
    lr__table_free(&ix->ntab, m);
    lr__free(m, ix->insts, (size_t)ix->max_inst * sizeof(struct inst));
    lr__free(m, ix->ifree, (size_t)ix->max_inst * sizeof(uint32_t));
    lr__table_free(&ix->itab, m);
    lr__index_emap_free(ix);
    lr__free(m, ix->journal, (size_t)ix->j_cap * sizeof(struct jent));
    lr__free(m, ix->kbuf, (size_t)ix->kbuf_cap * sizeof(uint64_t));
    lr__free(m, ix->abuf, (size_t)ix->abuf_cap * sizeof(uint32_t));
    lr__free(m, ix->cand, (size_t)ix->max_inst * N_SCRATCH * sizeof(uint32_t));
    struct lr__mem mm = *m;
    lr__free(&mm, ix, sizeof *ix);
}

/* The caller's options over the defaults (zero means default), checked. */
static lr_status
resolve_options(const lr_index_options *opt, lr_index_options *o)
{
    lr_index_options_init(o);
    if (opt != NULL) {
        lr_index_options in;
        memset(&in, 0, sizeof in);
        LR_TRY(lr__copy_sized(&in, sizeof in, opt, LR_INDEX_OPTIONS_SIZE_V1));
        o->allocator = in.allocator;
        o->seed = in.seed;
        if (in.capacity_blocks)
            o->capacity_blocks = in.capacity_blocks;
        if (in.ttl_ns)
            o->ttl_ns = in.ttl_ns;
        if (in.block_tokens)
            o->block_tokens = in.block_tokens;
        if (in.max_instances)
            o->max_instances = in.max_instances;
        if (in.journal_capacity)
            o->journal_capacity = in.journal_capacity;
        o->engine_map_capacity = in.engine_map_capacity
                                     ? in.engine_map_capacity
                                     : EMAP_PER_BLOCK * o->capacity_blocks;
        o->replica_id = in.replica_id;
        o->remote_ttl_ns = in.remote_ttl_ns;
        o->eviction = in.eviction;
    }
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
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    lr_index_options o;
    LR_TRY(resolve_options(opt, &o));
    struct lr__mem m;
    LR_TRY(lr__mem_init(&m, o.allocator));
    lr_index *ix = lr__calloc(&m, 1, sizeof *ix);
    if (ix == NULL)
        return LR_ENOMEM;
    ix->mem = m;
    ix->mem.live = m.live;
    ix->seed = lr__mix64(lr__hash_seed(o.seed, ix), SEED_MIX);
    ix->capacity = o.capacity_blocks;
    ix->ttl_ticks =
        o.ttl_ns == UINT64_MAX ? UINT64_MAX : o.ttl_ns >> TICK_SHIFT;
    uint64_t rttl = o.remote_ttl_ns ? o.remote_ttl_ns : o.ttl_ns;
    ix->remote_ttl_ticks = rttl == UINT64_MAX ? UINT64_MAX : rttl >> TICK_SHIFT;
    ix->replica_id = o.replica_id;
    ix->evict_lru = o.eviction == LR_EVICT_LRU;
    ix->emap_cap = o.engine_map_capacity;
    ix->B = o.block_tokens;
    ix->max_inst = o.max_instances;
    ix->j_cap = o.journal_capacity == UINT32_MAX ? 0 : o.journal_capacity;
    ix->npool.free = ix->xpool.free = ix->epool.free = LR_NIL;
    lr__table_init(&ix->etab, &ix->mem, 0); /* no memory: cannot fail */
    ix->head[0] = ix->head[1] = ix->tail[0] = ix->tail[1] = LR_NIL;

    /* index_free() can release a partial construction: the sizes it reads
     * are set above, and a table not yet inited is zero-filled. */
    ix->insts = lr__calloc(&ix->mem, ix->max_inst, sizeof(struct inst));
    ix->ifree = lr__calloc(&ix->mem, ix->max_inst, sizeof(uint32_t));
    lr_status ist = lr__table_init(&ix->itab, &ix->mem, ix->max_inst);
    ix->cand = lr__calloc(&ix->mem, (size_t)ix->max_inst * N_SCRATCH,
                          sizeof(uint32_t));
    ix->journal =
        ix->j_cap ? lr__calloc(&ix->mem, ix->j_cap, sizeof(struct jent)) : NULL;
    lr_status tst = lr__table_init(&ix->ntab, &ix->mem, NODE_TABLE_START);
    if (ix->insts == NULL || ix->ifree == NULL || ist != LR_OK ||
        ix->cand == NULL || tst != LR_OK ||
        (ix->j_cap && ix->journal == NULL)) {
        index_free(ix);
        return LR_ENOMEM;
    }
    ix->cref = ix->cand + ix->max_inst;
    ix->cdepth = ix->cref + ix->max_inst;
    ix->mark = ix->cdepth + ix->max_inst;
    ix->tref = ix->mark + ix->max_inst;
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

void
lr_prompt_init_sized(lr_prompt *p, size_t size)
{
    lr__init_sized(p, size, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* learn                                                                     */
/* ------------------------------------------------------------------------ */

/* Validate a prompt and put its keys in ix->kbuf (or point at the host's).
 * Can fail with LR_ENOMEM growing the scratch buffer, which is not state. */
lr_status
lr__index_prompt_keys(lr_index *ix, const lr_prompt *in, lr_prompt *p,
                      const uint64_t **keys, uint32_t *n_keys)
{
    LR_RETURN_IF(in == NULL, LR_EINVAL);
    memset(p, 0, sizeof *p);
    LR_TRY(lr__copy_sized(p, sizeof *p, in, LR_PROMPT_SIZE_V1));
    LR_RETURN_IF(p->n_tokens > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(p->boundaries == NULL && p->n_boundaries != 0, LR_EINVAL);
    LR_RETURN_IF(p->n_boundaries > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    size_t n = p->n_tokens / ix->B;
    if (p->keys != NULL) {
        LR_RETURN_IF(p->n_keys != n, LR_EINVAL);
        *keys = p->keys;
    } else {
        LR_RETURN_IF(p->tokens == NULL && p->n_tokens != 0, LR_EINVAL);
        LR_TRY(lr__index_scratch_keys(ix, n));
        lr__index_chain_keys(lr__index_tenant_root(p->tenant_salt), p->tokens,
                             n, ix->B, ix->kbuf);
        *keys = ix->kbuf;
    }
    for (size_t i = 0; i < p->n_boundaries; i++) {
        LR_RETURN_IF(p->boundaries[i] > p->n_tokens, LR_EINVAL);
        LR_RETURN_IF(i > 0 && p->boundaries[i] < p->boundaries[i - 1],
                     LR_EINVAL);
    }
    *n_keys = (uint32_t)n;
    return LR_OK;
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

/* The anchors of a learn of n blocks into ix->abuf: the boundaries
 * aligned down to a block and deduplicated, plus the full length. */
static lr_status
learn_anchors(lr_index *ix, const lr_prompt *p, uint32_t n, uint32_t *na)
{
    LR_TRY(lr__index_scratch_anchors(ix, p->n_boundaries + 1));
    *na = 0;
    for (size_t i = 0; i < p->n_boundaries; i++) {
        uint32_t d = p->boundaries[i] / ix->B;
        if (d == 0 || d > n || (*na > 0 && ix->abuf[*na - 1] == d))
            continue;
        ix->abuf[(*na)++] = d;
    }
    if (n > 0 && (*na == 0 || ix->abuf[*na - 1] != n))
        ix->abuf[(*na)++] = n;
    return LR_OK;
}

/* Remember a LOCAL learn for lr_index_export_delta(): its deepest key.
 * With no journal only the mark moves. */
static void
journal_add(lr_index *ix, uint64_t key, uint32_t id)
{
    if (ix->j_cap > 0) {
        struct jent *j = &ix->journal[ix->j_seq % ix->j_cap];
        j->key = key;
        j->inst_id = id;
    }
    ix->j_seq++;
}

lr_status
lr_index_learn(lr_index *idx, const lr_prompt *prompt, uint32_t instance,
               int32_t trust, uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL, LR_EINVAL);
    LR_RETURN_IF(trust != LR_TRUST_LOCAL && trust != LR_TRUST_REMOTE,
                 LR_EINVAL);
    lr_index *ix = idx;
    lr_prompt p;
    const uint64_t *keys;
    uint32_t n;
    LR_TRY(lr__index_prompt_keys(ix, prompt, &p, &keys, &n));
    uint32_t s; /* after the input checks: bad input is EINVAL, not ELIMIT */
    LR_TRY(lr__index_slot_for(ix, instance, &s));
    if (n > ix->capacity)
        n = (uint32_t)ix->capacity;

    uint32_t na;
    LR_TRY(learn_anchors(ix, &p, n, &na));
    struct learn_plan pl = { .s = s,
                             .id = instance,
                             .base = LR_NIL,
                             .base_ref = LR_NIL,
                             .keys = keys,
                             .n = n,
                             .anchors = ix->abuf,
                             .n_anchors = na,
                             .remote = trust == LR_TRUST_REMOTE };
    LR_TRY(lr__index_plan_learn(ix, &pl));
    uint32_t tick = lr__index_tick(ix, now_ns);
    lr__index_apply_learn(ix, &pl, tick);
    if (!pl.remote && n > 0)
        journal_add(ix, keys[n - 1], instance);
    lr__index_settle(ix, tick);
    return LR_OK;
}

lr_status
lr_index_expire(lr_index *idx, uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL, LR_EINVAL);
    lr__index_expire_all(idx, lr__index_tick(idx, now_ns));
    return LR_OK;
}

lr_status
lr__index_clear(lr_index *idx, uint32_t instance, uint32_t *slot)
{
    LR_RETURN_IF(idx == NULL || instance == LR_INSTANCE_NONE, LR_EINVAL);
    uint32_t s = lr__index_inst_lookup(idx, instance);
    LR_RETURN_IF(s == LR_NIL, LR_ENOENT);
    remove_all_of(idx, s);
    lr__index_emap_drop(idx, s);
    *slot = s;
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
/* queries                                                                   */
/* ------------------------------------------------------------------------ */

lr_status
lr_index_get_stats(const lr_index *idx, lr_index_stats *stats)
{
    LR_RETURN_IF(idx == NULL || stats == NULL, LR_EINVAL);
    LR_RETURN_IF(stats->struct_size < LR_INDEX_STATS_SIZE_V1, LR_EVERSION);
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.blocks = idx->holds;
    st.remote_blocks = idx->remote;
    st.prefixes = pool_live(&idx->npool);
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
