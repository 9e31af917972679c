/* lr_index: the block-aligned prefix index. This file holds its core:
 * runs, spans, LRU lists, learn, expiry, eviction, instances, lifecycle
 * and stats. The match is in index_match.c, precise mode (KV events) in
 * index_kv.c, the delta codec in index_delta.c, verify and digest in
 * index_check.c, the shared layout in index_impl.h.
 *
 * What it stores
 * --------------
 *
 * Logically, the index is a tree of prefixes (one node per distinct
 * block key) and a set of holds: (node, instance), each with a recency
 * stamp and flags (anchor, remote, listed). An engine's prefix cache is
 * prefix-closed, and so is each instance's set of holds: an instance that
 * holds a node holds its parent. The representation records holders
 * where they change, not on every block:
 *
 *   ntab (lr__table: block key -> node slot)
 *          |
 *          v
 *   keys[] (8 bytes a slot) + chunks[] (one header per CHUNK = 16 slots)
 *   +---------------------------+   +---------------------------+
 *   | k0 k1 k2 ... k15          |   | k16 k17 ...               |  run 7
 *   +---------------------------+   +---------------------------+
 *     chunk {run 7, base 0}           chunk {run 7, base 16}
 *
 *   runs[] (a chain of nodes; child runs hang from any of its nodes)
 *   +--------------------------------------------------------------+
 *   | chunks, len, top (depth above it), hang (node it hangs from),|
 *   | child / sibling runs, holders: hent[] = {inst, to, span}     |
 *   +--------------------------------------------------------------+
 *          |  instance s holds offsets [0, to) of the run
 *          v
 *   spans[] (per run and instance, tiling [0, to), chained by `up`)
 *   +--------------------------------------------------------------+
 *   | [from, to), bits and stamp of the bottom block, stamp_top of |
 *   | the others, LRU prev/next                                    |
 *   +--------------------------------------------------------------+
 *
 * A span's blocks above its bottom are plain: not anchors, not listed,
 * with one child (the next block of the run) held by the same instance,
 * the span's trust and recency stamp_top. Anything else (an anchor, a
 * fork, a touch, a trust change) ends a span: a span is cut in two where
 * a block stops being plain. So the per-block holds are exactly the
 * spans' blocks with those states, and the LRU lists (which order span
 * bottoms) hold exactly the listed holds.
 *
 * Invariants (lr__index_verify checks them all):
 *  1. Prefix property: if instance s holds a node, s holds its parent. A
 *     holder holds a prefix of every run, and the node a run hangs from.
 *     So along one prompt, "s holds depth d" is monotone in d.
 *  2. LOCAL is closed upward: the parent of a LOCAL hold is LOCAL.
 *  3. Every leaf hold (no child held by its instance) is in the LRU list
 *     of its trust class. Internal holds may be listed or not.
 *  4. A node exists exactly while someone holds it: a run's length is
 *     the largest `to` of its holders.
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
 *       run 0: A-B-C-D*-E-F*   (* = anchor); inst 1: spans [A..D], [E, F]
 *   learn(A B X, inst 2)             X hangs from B in a new run
 *       run 1: X* (hangs from B); inst 2: span [A, B] of run 0 and [X]
 *       of run 1. Inst 1's span [A..D] stays whole: under B it holds only
 *       C, so B is plain for it.
 *   match(A B C D E Q) -> inst 1: 5 blocks (80 tokens), inst 2: 2 blocks
 *       the search finds E in run 0; walking up the path, run 0's
 *       holders answer both (inst 2 holds [0, 2) of it).
 *   learn(P Q, inst 3) needs 2 routes and 7 + 2 > 6, so LRU leaves go:
 *   X (inst 2's only leaf, the oldest) is evicted, and the eviction trims
 *   on through B and A of inst 2, which are neither anchors nor used on
 *   their own: inst 2 never said a message ended there. Run 1 empties and
 *   goes. Inst 1's A-B-C-D stays: D is an anchor, so evicting F trims only
 *   back to D. The whole span [E, F] goes in one step.
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
/* Per-instance scratch arrays of a match: cand, cspan, cdepth, mark, cpos. */
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
is_expired(const lr_index *ix, const struct span *x, uint32_t tick)
{
    uint64_t ttl = (x->bits & HB_REMOTE) ? ix->remote_ttl_ticks : ix->ttl_ticks;
    if (ttl == UINT64_MAX || tick <= x->stamp)
        return false;
    return (uint64_t)(tick - x->stamp) > ttl;
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

/* One step of the chain: a bijection of the previous key for a given
 * block hash, so prefixes that differ stay different (an odd multiplier,
 * then the halves swapped so that the next multiply mixes the high bits
 * down). Its latency (xor, multiply, rotate) is all the chain costs: the
 * block hashes do not depend on it and overlap. */
static inline uint64_t
chain_step(uint64_t prev, uint64_t g)
{
    uint64_t x = (prev ^ g) * LR_CHAIN_MUL;
    return (x << 32) | (x >> 32);
}

void
lr__index_chain_keys(uint64_t prev, const uint32_t *tok, size_t nblocks,
                     uint32_t B, uint64_t *out)
{
    size_t bytes = (size_t)B * sizeof(uint32_t);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t buf[sizeof(uint32_t) * LR_INDEX_MAX_BLOCK_TOKENS];
    for (size_t i = 0; i < nblocks; i++) {
        for (uint32_t j = 0; j < B; j++)
            lr__put_u32(buf + sizeof(uint32_t) * j, tok[i * B + j]);
        out[i] = lr__hash(buf, bytes, LR_SEED_BLOCK);
    }
#else
    if (B == 16) { /* the default: a constant length lets XXH3 specialise */
        for (size_t i = 0; i < nblocks; i++) {
            prev = chain_step(prev, lr__hash(tok + i * 16, 64, LR_SEED_BLOCK));
            out[i] = prev;
        }
        return;
    }
    for (size_t i = 0; i < nblocks; i++)
        out[i] = lr__hash(tok + i * B, bytes, LR_SEED_BLOCK);
#endif
    for (size_t i = 0; i < nblocks; i++) {
        prev = chain_step(prev, out[i]);
        out[i] = prev;
    }
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
/* memory reservation (phase 1: the only place mutators can fail)            */
/* ------------------------------------------------------------------------ */

/* Growth of the arrays whose size follows the routes (node keys and
 * chunks, spans, the engine-hash slots): 1.25x, so that memory at any
 * size stays within a quarter of what is used; the others: 1.5x. */
#define GROW_SHIFT 1u
#define GROW_SHIFT_BIG 2u

static lr_status
grow_by(struct lr__mem *m, void **arr, uint32_t *cap, uint32_t need,
        size_t elem, uint32_t limit, uint32_t min, uint32_t shift)
{
    if (need <= *cap)
        return LR_OK;
    if (need > limit)
        return LR_ENOMEM;
    uint64_t want = (uint64_t)*cap + (*cap >> shift);
    if (want < need)
        want = need;
    if (want < min)
        want = min;
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

static lr_status
grow_min(struct lr__mem *m, void **arr, uint32_t *cap, uint32_t need,
         size_t elem, uint32_t limit, uint32_t min)
{
    return grow_by(m, arr, cap, need, elem, limit, min, GROW_SHIFT);
}

lr_status
lr__index_grow(struct lr__mem *m, void **arr, uint32_t *cap, uint32_t need,
               size_t elem, uint32_t limit)
{
    return grow_min(m, arr, cap, need, elem, limit, POOL_MIN);
}

lr_status
lr__index_grow_big(struct lr__mem *m, void **arr, uint32_t *cap, uint32_t need,
                   size_t elem, uint32_t limit)
{
    return grow_by(m, arr, cap, need, elem, limit, POOL_MIN, GROW_SHIFT_BIG);
}

static lr_status
pool_reserve_by(struct lr__mem *m, struct pool *p, void **arr, size_t elem,
                uint64_t more, uint32_t limit, uint32_t shift)
{
    uint64_t need = (uint64_t)p->top + more;
    need = need > p->nfree ? need - p->nfree : 0;
    if (need > limit)
        return LR_ENOMEM;
    return grow_by(m, arr, &p->cap, (uint32_t)need, elem, limit, POOL_MIN,
                   shift);
}

lr_status
lr__index_pool_reserve(struct lr__mem *m, struct pool *p, void **arr,
                       size_t elem, uint64_t more, uint32_t limit)
{
    return pool_reserve_by(m, p, arr, elem, more, limit, GROW_SHIFT);
}

/* Room for `more` chunks: keys[] and chunks[] grow to the same size. */
static lr_status
chunk_reserve(lr_index *ix, uint64_t more)
{
    struct pool *p = &ix->cpool;
    if (pool_has(p, more))
        return LR_OK;
    uint64_t need = (uint64_t)p->top + more - p->nfree;
    uint32_t limit = POOL_MAX >> CHUNK_SHIFT;
    if (need > limit)
        return LR_ENOMEM;
    /* keys[], chunks[] and (in precise mode) the engine-hash slot arrays
     * each keep their own size: when one growth fails, the others stay
     * grown, harmlessly, and the pool uses the smallest */
    uint32_t kcap = ix->kcap, ccap = ix->chcap;
    LR_TRY(lr__index_grow_big(&ix->mem, (void **)&ix->keys, &kcap,
                              (uint32_t)need, CHUNK * sizeof(uint64_t), limit));
    ix->kcap = kcap;
    LR_TRY(lr__index_grow_big(&ix->mem, (void **)&ix->chunks, &ccap,
                              (uint32_t)need, sizeof(struct chunk), limit));
    ix->chcap = ccap;
    uint32_t cap = ccap < kcap ? ccap : kcap;
    if (ix->ecap > 0) /* precise mode */
        LR_TRY(lr__index_emap_slots(ix, cap));
    p->cap = cap;
    return LR_OK;
}

lr_status
lr__index_reserve(lr_index *ix, uint64_t nn, uint64_t nr, uint64_t ns)
{
    /* a new stretch may start a run and so a chunk of its own */
    LR_TRY(chunk_reserve(ix, nn == 0 ? 0 : (nn + CHUNK - 1) / CHUNK + nr + 1));
    LR_TRY(lr__index_pool_reserve(&ix->mem, &ix->rpool, (void **)&ix->runs,
                                  sizeof(struct run), nr, POOL_MAX));
    LR_TRY(pool_reserve_by(&ix->mem, &ix->spool, (void **)&ix->sp,
                           sizeof(struct span), ns, POOL_MAX, GROW_SHIFT_BIG));
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

lr_status
lr__index_scratch_path(lr_index *ix, size_t n)
{
    return lr__index_grow(&ix->mem, (void **)&ix->path, &ix->path_cap,
                          (uint32_t)n, sizeof *ix->path, UINT32_MAX);
}

/* ---- holder arrays ------------------------------------------------------- */

#define HENT_LINK offsetof(struct hent, span)

static size_t
hc_elem(uint32_t c)
{
    return sizeof(struct hent) << c;
}

static lr_status
hc_reserve(lr_index *ix, uint32_t c, uint32_t more)
{
    struct pool *p = &ix->hc[c].p;
    if (pool_has(p, more))
        return LR_OK;
    uint64_t need = (uint64_t)p->top + more - p->nfree;
    uint32_t min = (POOL_MIN >> c) > 0 ? POOL_MIN >> c : 1;
    return grow_min(&ix->mem, (void **)&ix->hc[c].v, &p->cap, (uint32_t)need,
                    hc_elem(c), POOL_MAX >> c, min);
}

lr_status
lr__index_hent_room(lr_index *ix, uint32_t r, uint32_t more)
{
    if (r == LR_NIL)
        return hc_reserve(ix, 0, more);
    struct run *R = &ix->runs[r];
    uint32_t c = R->hcls;
    while ((uint64_t)R->nh + more > (1ull << c))
        c++;
    if (c == R->hcls)
        return LR_OK;
    if (LR_NEVER(c >= HCLASSES))
        return LR_ENOMEM;
    LR_TRY(hc_reserve(ix, c, 1));
    /* a bigger array, the same holders: not a logical change */
    uint32_t i = pool_take(&ix->hc[c].p, ix->hc[c].v, hc_elem(c), HENT_LINK);
    memcpy(ix->hc[c].v + ((size_t)i << c), run_hents(ix, R),
           (size_t)R->nh * sizeof(struct hent));
    pool_give(&ix->hc[R->hcls].p, ix->hc[R->hcls].v, hc_elem(R->hcls),
              HENT_LINK, R->hidx);
    R->hidx = i;
    R->hcls = (uint8_t)c;
    return LR_OK;
}

/* A run's holders stay sorted by instance id, so that a match reads the
 * holders of a shared prefix in the order it reports them (index_match.c
 * then has next to nothing left to sort). */
static struct hent *
hent_add(lr_index *ix, uint32_t r, uint32_t s)
{
    struct run *R = &ix->runs[r];
    assert(R->nh < (1u << R->hcls));
    struct hent *a = run_hents(ix, R);
    uint32_t id = ix->insts[s].id, i = R->nh;
    while (i > 0 && ix->insts[a[i - 1].inst].id > id)
        i--;
    memmove(a + i + 1, a + i, (size_t)(R->nh - i) * sizeof *a);
    R->nh++;
    struct hent *h = &a[i];
    h->inst = (uint16_t)s;
    h->pad = 0;
    h->to = 0;
    h->span = LR_NIL;
    return h;
}

static void
hent_del(lr_index *ix, uint32_t r, struct hent *h)
{
    struct run *R = &ix->runs[r];
    struct hent *a = run_hents(ix, R);
    uint32_t i = (uint32_t)(h - a);
    memmove(a + i, a + i + 1, (size_t)(R->nh - i - 1) * sizeof *a);
    R->nh--;
}

/* ------------------------------------------------------------------------ */
/* LRU lists                                                                 */
/* ------------------------------------------------------------------------ */

static void
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

static void
lru_push_head(lr_index *ix, uint32_t x)
{
    struct span *h = &ix->sp[x];
    int l = list_of(h);
    h->prev = LR_NIL;
    h->next = ix->head[l];
    if (ix->head[l] != LR_NIL)
        ix->sp[ix->head[l]].prev = x;
    else
        ix->tail[l] = x;
    ix->head[l] = x;
    h->bits |= HB_LISTED;
}

/* Insert an unlisted span where its stamp belongs, searching from the
 * tail (where re-entering holds belong) for at most LRU_SEEK_MAX steps; a
 * search that runs out inserts where it stopped (bounded work, order then
 * approximate). */
#define LRU_SEEK_MAX 64

static void
lru_insert_by_stamp(lr_index *ix, uint32_t x)
{
    struct span *h = &ix->sp[x];
    int l = list_of(h);
    uint32_t cur = ix->tail[l];
    for (int steps = 0; cur != LR_NIL && steps < LRU_SEEK_MAX; steps++) {
        if (ix->sp[cur].stamp >= h->stamp)
            break;
        cur = ix->sp[cur].prev;
    }
    if (cur == LR_NIL) {
        lru_push_head(ix, x);
        return;
    }
    struct span *c = &ix->sp[cur];
    h->prev = cur;
    h->next = c->next;
    if (c->next != LR_NIL)
        ix->sp[c->next].prev = x;
    else
        ix->tail[l] = x;
    c->next = x;
    h->bits |= HB_LISTED;
}

void
lr__index_touch(lr_index *ix, uint32_t x, uint32_t tick)
{
    struct span *h = &ix->sp[x];
    if (h->bits & HB_LISTED)
        lru_unlink(ix, x);
    h->stamp = tick;
    lru_push_head(ix, x);
}

void
lr__index_touch_at(lr_index *ix, uint32_t x, uint32_t stamp)
{
    struct span *h = &ix->sp[x];
    if (h->stamp >= stamp && (h->bits & HB_LISTED))
        return; /* already as recent, and listed */
    if (h->bits & HB_LISTED)
        lru_unlink(ix, x);
    if (h->stamp < stamp)
        h->stamp = stamp;
    int l = list_of(h);
    uint32_t head = ix->head[l], tail = ix->tail[l];
    if (head == LR_NIL || ix->sp[head].stamp <= h->stamp) {
        lru_push_head(ix, x);
        return;
    }
    if (h->stamp - ix->sp[tail].stamp < ix->sp[head].stamp - h->stamp) {
        lru_insert_by_stamp(ix, x); /* nearer the tail: from there */
        return;
    }
    /* nearer the head (a route used a moment before the newest): walk
     * from the head, as boundedly as lru_insert_by_stamp walks from the
     * tail */
    uint32_t cur = head;
    for (int steps = 0; steps < LRU_SEEK_MAX; steps++) {
        uint32_t next = ix->sp[cur].next;
        if (next == LR_NIL || ix->sp[next].stamp <= h->stamp)
            break;
        cur = next;
    }
    struct span *c = &ix->sp[cur];
    h->prev = cur;
    h->next = c->next;
    if (c->next != LR_NIL)
        ix->sp[c->next].prev = x;
    else
        ix->tail[l] = x;
    c->next = x;
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
/* nodes and runs                                                            */
/* ------------------------------------------------------------------------ */

#define CHUNK_LINK offsetof(struct chunk, next)
#define RUN_LINK offsetof(struct run, hidx)
#define SPAN_LINK offsetof(struct span, next)

uint32_t
lr__index_node_at(const lr_index *ix, uint32_t r, uint32_t off)
{
    const struct run *R = &ix->runs[r];
    uint32_t k = off >> CHUNK_SHIFT;
    uint32_t nc = (R->len + CHUNK - 1) >> CHUNK_SHIFT;
    uint32_t c;
    if (k < nc - 1 - k) {
        c = R->first;
        for (uint32_t i = 0; i < k; i++)
            c = ix->chunks[c].next;
    } else {
        c = R->last;
        for (uint32_t i = nc - 1; i > k; i--)
            c = ix->chunks[c].prev;
    }
    return (c << CHUNK_SHIFT) | (off & CHUNK_MASK);
}

uint32_t
lr__index_node_parent(const lr_index *ix, uint32_t n)
{
    const struct chunk *c = &ix->chunks[n >> CHUNK_SHIFT];
    if (n & CHUNK_MASK)
        return n - 1;
    if (c->base == 0)
        return ix->runs[c->run].hang;
    return (c->prev << CHUNK_SHIFT) | CHUNK_MASK;
}

static void
child_link(lr_index *ix, uint32_t r)
{
    struct run *R = &ix->runs[r];
    struct run *P = &ix->runs[R->prun];
    R->sib_prev = LR_NIL;
    R->sib = P->child;
    if (P->child != LR_NIL)
        ix->runs[P->child].sib_prev = r;
    P->child = r;
}

static void
child_unlink(lr_index *ix, uint32_t r)
{
    struct run *R = &ix->runs[r];
    if (R->prun == LR_NIL)
        return;
    if (R->sib_prev != LR_NIL)
        ix->runs[R->sib_prev].sib = R->sib;
    else
        ix->runs[R->prun].child = R->sib;
    if (R->sib != LR_NIL)
        ix->runs[R->sib].sib_prev = R->sib_prev;
    R->sib = R->sib_prev = LR_NIL;
}

/* A new, empty run hanging from node `hang` (LR_NIL: the root). A run and
 * a holder array of class 0 were reserved. */
static uint32_t
run_new(lr_index *ix, uint32_t hang)
{
    uint32_t r = pool_take(&ix->rpool, ix->runs, sizeof *ix->runs, RUN_LINK);
    struct run *R = &ix->runs[r];
    R->first = R->last = LR_NIL;
    R->len = 0;
    R->hang = hang;
    R->child = R->sib = R->sib_prev = LR_NIL;
    R->nh = 0;
    R->hcls = 0;
    R->state = RUN_LIVE;
    R->hidx = pool_take(&ix->hc[0].p, ix->hc[0].v, hc_elem(0), HENT_LINK);
    if (hang == LR_NIL) {
        R->top = 0;
        R->prun = R->poff = LR_NIL;
    } else {
        R->prun = node_run(ix, hang);
        R->poff = node_off(ix, hang);
        R->top = ix->runs[R->prun].top + R->poff + 1;
        child_link(ix, r);
    }
    return r;
}

/* Append a node for `key` at the end of run r (a chunk reserved). A slot
 * whose earlier node's table entry is still there (see run_cut_nodes)
 * gives that entry up now: a remove and an insert, where deleting at
 * eviction and inserting now would cost the same, but the eviction is
 * then free, and a fleet that shares more than it learns anew (a held
 * prompt sent to one more instance) never pays for most of them. */
static uint32_t
run_push(lr_index *ix, uint32_t r, uint64_t key)
{
    struct run *R = &ix->runs[r];
    uint32_t o = R->len;
    if ((o & CHUNK_MASK) == 0) {
        uint32_t c =
            pool_take(&ix->cpool, ix->chunks, sizeof *ix->chunks, CHUNK_LINK);
        struct chunk *C = &ix->chunks[c];
        C->run = r;
        C->base = o;
        C->next = LR_NIL;
        C->prev = R->last;
        if (R->last != LR_NIL)
            ix->chunks[R->last].next = c;
        else
            R->first = c;
        R->last = c;
    }
    uint32_t n = (R->last << CHUNK_SHIFT) | (o & CHUNK_MASK);
    struct chunk *C = &ix->chunks[R->last];
    uint32_t bit = 1u << (o & CHUNK_MASK);
    if (C->stale & bit) {
        lr__table_remove(&ix->ntab, hkey(ix, ix->keys[n] ^ DEAD_KEY), n);
        C->stale &= ~bit;
        ix->stale--;
    }
    ix->keys[n] = key;
    lr__table_insert(&ix->ntab, hkey(ix, key), n);
    R->len++;
    ix->nodes++;
    return n;
}

/* Prefetch the table slots of the stale entries that n nodes appended
 * below `parent` (LR_NIL: the root) will give up (run_push): those of the
 * parent's last chunk past its end, if the nodes extend its run, and of
 * the chunks at the head of the free list, which they will take (the
 * eviction that made room has just freed them, so they are in cache). */
static void
warm_stale(const lr_index *ix, uint32_t parent, uint32_t n)
{
    const uint64_t *sl = ix->ntab.slots;
    uint32_t size = ix->ntab.size;
    uint64_t salt = ix->ntab.salt;
    if (parent != LR_NIL) {
        const struct run *R = &ix->runs[node_run(ix, parent)];
        if (node_off(ix, parent) + 1 == R->len && (R->len & CHUNK_MASK)) {
            uint32_t c = R->last, st = ix->chunks[c].stale;
            st &= ~((1u << (R->len & CHUNK_MASK)) - 1);
            for (; st != 0; st &= st - 1) {
                uint32_t n2 = (c << CHUNK_SHIFT) | (uint32_t)__builtin_ctz(st);
                __builtin_prefetch(&sl[lr__table_home(
                    hkey(ix, ix->keys[n2] ^ DEAD_KEY), size, salt)]);
            }
        }
    }
    uint32_t c = ix->cpool.free;
    for (uint32_t k = 0; k < n / CHUNK + 1 && c != LR_NIL; k++) {
        for (uint32_t st = ix->chunks[c].stale; st != 0; st &= st - 1) {
            uint32_t n2 = (c << CHUNK_SHIFT) | (uint32_t)__builtin_ctz(st);
            __builtin_prefetch(&sl[lr__table_home(
                hkey(ix, ix->keys[n2] ^ DEAD_KEY), size, salt)]);
        }
        c = ix->chunks[c].next;
    }
}

uint32_t
lr__index_node_new(lr_index *ix, uint64_t key, uint32_t parent)
{
    uint32_t r;
    if (parent != LR_NIL &&
        node_off(ix, parent) + 1 == ix->runs[node_run(ix, parent)].len)
        r = node_run(ix, parent);
    else
        r = run_new(ix, parent);
    return run_push(ix, r, key);
}

/* The nodes at offsets [len, R->len) of run r go, and the chunks left
 * empty. Their table entries stay, under flipped keys that no lookup
 * matches, until their slots are used again (run_push): freeing a run of
 * nodes touches only its own chunks, in order. */
static void
run_cut_nodes(lr_index *ix, uint32_t r, uint32_t len)
{
    struct run *R = &ix->runs[r];
    uint32_t c = R->last;
    ix->nodes -= R->len - len;
    ix->stale += R->len - len;
    while (R->len > len) {
        uint32_t o = --R->len;
        uint32_t n = (c << CHUNK_SHIFT) | (o & CHUNK_MASK);
        ix->keys[n] ^= DEAD_KEY;
        ix->chunks[c].stale |= 1u << (o & CHUNK_MASK);
        lr__index_emap_slots_freed(ix, n);
        if ((o & CHUNK_MASK) == 0) {
            uint32_t p = ix->chunks[c].prev;
            ix->chunks[c].run = LR_NIL;
            pool_give(&ix->cpool, ix->chunks, sizeof *ix->chunks, CHUNK_LINK,
                      c);
            c = p;
        }
    }
    R->last = c;
    if (c == LR_NIL)
        R->first = LR_NIL;
    else
        ix->chunks[c].next = LR_NIL;
}

static void
run_release(lr_index *ix, uint32_t r)
{
    struct run *R = &ix->runs[r];
    assert(R->len == 0 && R->nh == 0 && R->child == LR_NIL);
    pool_give(&ix->hc[R->hcls].p, ix->hc[R->hcls].v, hc_elem(R->hcls),
              HENT_LINK, R->hidx);
    R->state = RUN_FREE;
    pool_give(&ix->rpool, ix->runs, sizeof *ix->runs, RUN_LINK, r);
}

void
lr__index_node_pop(lr_index *ix, uint32_t n)
{
    uint32_t r = node_run(ix, n);
    assert(node_off(ix, n) + 1 == ix->runs[r].len);
    run_cut_nodes(ix, r, ix->runs[r].len - 1);
    if (ix->runs[r].len == 0) {
        child_unlink(ix, r);
        run_release(ix, r);
    }
}

/* After run r lost holders or blocks: its nodes are what its holders
 * hold (invariant 4). An emptied run is freed, or with `defer` marked
 * RUN_PENDING for remove_all_of to free. */
static void
run_fit(lr_index *ix, uint32_t r, bool defer)
{
    struct run *R = &ix->runs[r];
    const struct hent *h = run_hents(ix, R);
    uint32_t len = 0;
    for (uint32_t i = 0; i < R->nh; i++)
        if (h[i].to > len)
            len = h[i].to;
    if (len < R->len)
        run_cut_nodes(ix, r, len);
    if (len > 0)
        return;
    if (defer) {
        R->state = RUN_PENDING;
        return;
    }
    child_unlink(ix, r);
    run_release(ix, r);
}

/* ------------------------------------------------------------------------ */
/* spans                                                                     */
/* ------------------------------------------------------------------------ */

static uint32_t
span_new(lr_index *ix, uint32_t r, uint32_t s, uint32_t from, uint32_t to,
         uint32_t bits, uint32_t flags, uint32_t stamp, uint32_t up)
{
    uint32_t x = pool_take(&ix->spool, ix->sp, sizeof *ix->sp, SPAN_LINK);
    struct span *S = &ix->sp[x];
    S->run = r;
    S->inst = (uint16_t)s;
    S->flags = (uint16_t)flags;
    S->bits = bits;
    S->from = from;
    S->to = to;
    S->stamp = S->stamp_top = stamp;
    S->prev = S->next = LR_NIL;
    S->up = up;
    return x;
}

static void
span_free(lr_index *ix, uint32_t x)
{
    ix->sp[x].inst = INST_FREE;
    pool_give(&ix->spool, ix->sp, sizeof *ix->sp, SPAN_LINK, x);
}

uint32_t
lr__index_cut(lr_index *ix, uint32_t x, uint32_t p)
{
    struct span *S = &ix->sp[x];
    assert(p >= S->from && p < S->to);
    if (p + 1 == S->to)
        return x;
    uint32_t u = span_new(ix, S->run, S->inst, S->from, p + 1, plain_bits(S),
                          S->flags, S->stamp_top, S->up);
    S = &ix->sp[x];
    S->from = p + 1;
    S->up = u;
    return u;
}

/* The counters for `len` blocks of span x going. */
static void
count_drop(lr_index *ix, const struct span *x, uint32_t len, int why)
{
    ix->holds -= len;
    if (x->bits & HB_REMOTE)
        ix->remote -= len;
    ix->insts[x->inst].blocks -= len;
    if (why == WHY_EVICT)
        ix->evicted += len;
    else if (why == WHY_EXPIRE)
        ix->expired += len;
}

/* Take span x (its instance's deepest in its run) out whole; the run
 * shrinks or goes. The caller fixes the parent block's child count. */
static void
span_remove(lr_index *ix, uint32_t x, int why, bool defer)
{
    struct span *S = &ix->sp[x];
    uint32_t r = S->run;
    if (S->bits & HB_LISTED)
        lru_unlink(ix, x);
    count_drop(ix, S, span_len(S), why);
    lr__index_emap_forget(ix, S->inst, r, S->from, S->to);
    struct hent *h = hent_of(ix, r, S->inst);
    assert(h != NULL && h->span == x);
    h->span = S->up;
    h->to = S->from;
    if (h->to == 0)
        hent_del(ix, r, h);
    span_free(ix, x);
    run_fit(ix, r, defer);
}

/* The span whose bottom is the block above span x's top, or LR_NIL. */
static uint32_t
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

/* ------------------------------------------------------------------------ */
/* removal                                                                   */
/* ------------------------------------------------------------------------ */

/* Remove leaf span x's bottom block, then walk up, a span at a time. A
 * parent hold left with no child has the recency of that child (or its
 * own, when newer): if its own stamp is no newer than the child's and it
 * is not an anchor, it goes too, so evictions cut whole segments back to a
 * message boundary and expiry takes everything that aged together. In
 * precise mode (the engine dropped the block) stamps do not matter: the
 * cut goes back to the engine block boundary. A parent that stays becomes
 * a leaf at its inherited recency. The plain blocks above a bottom go
 * with it unless their own stamp is newer (a clock that went back), in
 * which case the block above the bottom stays as a leaf. This is the
 * block-by-block walk of the documented semantics, done a span at a time:
 * one step frees a whole span, and the nodes no one holds any more in one
 * batch. Preserves the invariants. */
void
lr__index_remove_leaf_and_trim(lr_index *ix, uint32_t x, int why, bool precise)
{
    for (;;) {
        struct span *S = &ix->sp[x];
        assert(nchild(S) == 0);
        uint32_t stamp = S->stamp;
        if (span_len(S) > 1) {
            /* the block above the bottom stays if it is an anchor (it
             * takes the newer stamp), or (unless precise) if it was used
             * later (a clock that went back) */
            bool anchor = (S->flags & SF_ANCHORS) != 0;
            if (anchor || (!precise && S->stamp_top > stamp)) {
                if (S->bits & HB_LISTED)
                    lru_unlink(ix, x);
                count_drop(ix, S, 1, why);
                lr__index_emap_forget(ix, S->inst, S->run, S->to - 1, S->to);
                S->to--;
                S->stamp = S->stamp_top > stamp ? S->stamp_top : stamp;
                S->bits = plain_bits(S) & ~HB_NCHILD;
                struct hent *h = hent_of(ix, S->run, S->inst);
                h->to = S->to;
                run_fit(ix, S->run, false);
                lru_insert_by_stamp(ix, x);
                return;
            }
            if (stamp < S->stamp_top)
                stamp = S->stamp_top; /* precise: the walk carries the max */
        }
        uint32_t px = span_parent(ix, x);
        span_remove(ix, x, why, false);
        if (px == LR_NIL)
            return;
        struct span *P = &ix->sp[px];
        if (LR_NEVER(nchild(P) == 0))
            return;
        P->bits--;
        if (nchild(P) > 0)
            return;
        if (!(P->bits & HB_ANCHOR) && (precise || P->stamp <= stamp)) {
            if (P->stamp < stamp)
                P->stamp = stamp; /* the walk carries the subtree's recency */
            x = px;
            continue;
        }
        if (P->stamp < stamp) {
            P->stamp = stamp;
            if (P->bits & HB_LISTED)
                lru_unlink(ix, px);
        }
        if (!(P->bits & HB_LISTED))
            lru_insert_by_stamp(ix, px);
        return;
    }
}

/* Pop the tail of list l: a leaf is removed (and trimmed), an internal hold
 * is only unlisted, being protected by its newer descendants. */
static void
pop_tail(lr_index *ix, int l, int why)
{
    uint32_t x = ix->tail[l];
    lru_unlink(ix, x);
    if (nchild(&ix->sp[x]) > 0)
        return;
    lr__index_remove_leaf_and_trim(ix, x, why, false);
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
                   is_expired(ix, &ix->sp[ix->tail[l]], tick)) {
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
    return ix->sp[r].stamp <= ix->sp[l].stamp ? LIST_REMOTE : LIST_LOCAL;
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

/* Drop instance s's holds in run r (all of them: no child run of r is
 * held by s any more). The run shrinks or, unless `defer`, goes. */
static void
drop_run(lr_index *ix, uint32_t s, uint32_t r, bool defer)
{
    struct hent *h = hent_of(ix, r, s);
    for (uint32_t x = h->span; x != LR_NIL;) {
        struct span *S = &ix->sp[x];
        uint32_t up = S->up;
        if (S->bits & HB_LISTED)
            lru_unlink(ix, x);
        count_drop(ix, S, span_len(S), WHY_DROP);
        lr__index_emap_forget(ix, s, r, S->from, S->to);
        span_free(ix, x);
        x = up;
    }
    hent_del(ix, r, h);
    run_fit(ix, r, defer);
}

/* Drop instance s from the subtree of run c (s holds c's first node):
 * a walk with no stack, children before their run, resuming the scan of
 * a run's children after the one just left. */
static void
drop_subtree(lr_index *ix, uint32_t s, uint32_t c)
{
    uint32_t cur = c, scan = ix->runs[c].child;
    for (;;) {
        uint32_t d = scan;
        while (d != LR_NIL && hent_of(ix, d, s) == NULL)
            d = ix->runs[d].sib;
        if (d != LR_NIL) {
            cur = d;
            scan = ix->runs[d].child;
            continue;
        }
        uint32_t next = ix->runs[cur].sib, up = ix->runs[cur].prun;
        bool done = cur == c;
        drop_run(ix, s, cur, false);
        if (done)
            return;
        cur = up;
        scan = next;
    }
}

uint32_t
lr__index_remove_below(lr_index *ix, uint32_t s, uint32_t r, uint32_t p)
{
    /* child runs hanging at p or below */
    for (uint32_t c = ix->runs[r].child; c != LR_NIL;) {
        uint32_t next = ix->runs[c].sib;
        if (ix->runs[c].poff >= p && hent_of(ix, c, s) != NULL)
            drop_subtree(ix, s, c);
        c = next;
    }
    struct hent *h = hent_of(ix, r, s);
    assert(h != NULL && h->to > p);
    /* spans wholly below p */
    while (ix->sp[h->span].from > p) {
        uint32_t x = h->span;
        struct span *S = &ix->sp[x];
        if (S->bits & HB_LISTED)
            lru_unlink(ix, x);
        count_drop(ix, S, span_len(S), WHY_DROP);
        lr__index_emap_forget(ix, s, r, S->from, S->to);
        h->span = S->up;
        span_free(ix, x);
    }
    uint32_t x = h->span;
    struct span *S = &ix->sp[x];
    if (S->to > p + 1) {
        /* p was plain: it becomes the bottom, with its own state */
        if (S->bits & HB_LISTED)
            lru_unlink(ix, x);
        count_drop(ix, S, S->to - p - 1, WHY_DROP);
        lr__index_emap_forget(ix, s, r, p + 1, S->to);
        S->to = p + 1;
        S->stamp = S->stamp_top;
        S->bits = plain_bits(S) & ~HB_NCHILD;
    } else {
        S->bits &= ~HB_NCHILD;
    }
    h->to = p + 1;
    run_fit(ix, r, false);
    return x;
}

/* Drop every hold of instance s: O(runs + spans). Emptied runs are
 * freed at the end, so that no run is freed while a child still hangs
 * from it. */
static void
remove_all_of(lr_index *ix, uint32_t s)
{
    for (uint32_t r = 0; r < ix->rpool.top; r++)
        if (ix->runs[r].state == RUN_LIVE && hent_of(ix, r, s) != NULL)
            drop_run(ix, s, r, true);
    /* A pending run has no holder left, so (prefix property) none of its
     * children has one either: they are all pending. */
    for (uint32_t r = 0; r < ix->rpool.top; r++) {
        const struct run *R = &ix->runs[r];
        if (R->state == RUN_PENDING && R->prun != LR_NIL &&
            ix->runs[R->prun].state != RUN_PENDING)
            child_unlink(ix, r);
    }
    for (uint32_t r = 0; r < ix->rpool.top; r++)
        if (ix->runs[r].state == RUN_PENDING) {
            ix->runs[r].child = LR_NIL;
            run_release(ix, r);
        }
}

/* ------------------------------------------------------------------------ */
/* search                                                                    */
/* ------------------------------------------------------------------------ */

uint32_t
lr__index_deepest(lr_index *ix, const uint64_t *keys, uint32_t lo, uint32_t hi,
                  uint32_t lo_node, uint32_t *node_out)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        prefetch_step(ix, keys, lo, hi, mid);
        uint32_t n = node_find(ix, keys[mid - 1]);
        ix->last_probes++;
        if (n != LR_NIL) {
            lo = mid;
            lo_node = n;
        } else {
            hi = mid - 1;
        }
    }
    *node_out = lo_node;
    return lo;
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

/* ------------------------------------------------------------------------ */
/* insertion (phase 2: cannot fail; memory was reserved)                    */
/* ------------------------------------------------------------------------ */

uint32_t
lr__index_grant(lr_index *ix, uint32_t s, const struct seg *segs, uint32_t n,
                uint32_t bits, uint32_t tick, const uint32_t *anchors,
                uint32_t na, uint32_t depth0)
{
    bool every = na == LR_NIL;
    uint32_t flags = every ? SF_ANCHORS : 0;
    uint32_t depth = depth0, a = 0, last = LR_NIL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = segs[i].run;
        struct hent *h = hent_of(ix, r, s);
        if (h == NULL) {
            assert(segs[i].lo == 0);
            h = hent_add(ix, r, s);
        }
        assert(h->to == segs[i].lo);
        for (uint32_t p = segs[i].lo; p <= segs[i].hi;) {
            uint32_t end = segs[i].hi;
            uint32_t b = bits | 1u; /* one child: the next block */
            if (every) {
                b |= HB_ANCHOR;
            } else if (a < na && anchors[a] <= depth + (end - p + 1)) {
                end = p + (anchors[a] - depth - 1);
                b |= HB_ANCHOR;
                a++;
            }
            uint32_t len = end - p + 1;
            uint32_t x =
                span_new(ix, r, s, p, end + 1, b, flags, tick, h->span);
            h->span = x;
            h->to = end + 1;
            ix->holds += len;
            if (bits & HB_REMOTE)
                ix->remote += len;
            ix->insts[s].blocks += len;
            ix->learned += len;
            depth += len;
            p = end + 1;
            last = x;
        }
    }
    if (last != LR_NIL)
        ix->sp[last].bits--; /* the deepest has no child */
    return last;
}

/* Flip instance s's REMOTE holds from offset p of run r upward to LOCAL
 * (invariant 2). */
static void
upgrade_up(lr_index *ix, uint32_t s, uint32_t r, uint32_t p)
{
    uint32_t x = hold_span(ix, r, p, s);
    if (!(ix->sp[x].bits & HB_REMOTE))
        return;
    x = lr__index_cut(ix, x, p);
    while (x != LR_NIL) {
        struct span *S = &ix->sp[x];
        if (!(S->bits & HB_REMOTE))
            return;
        bool listed = (S->bits & HB_LISTED) != 0;
        if (listed)
            lru_unlink(ix, x);
        S->bits &= ~HB_REMOTE;
        ix->remote -= span_len(S);
        if (listed)
            lru_insert_by_stamp(ix, x);
        x = span_parent(ix, x);
    }
}

/* Phase 1 of a learn: where anybody's holds and the instance's end, and
 * the stretches of the path between the two (into ix->path, deepest
 * first); then the memory. */
lr_status
lr__index_plan_learn(lr_index *ix, struct learn_plan *p)
{
    ix->last_probes = 0;
    p->d_s = 0;
    p->ds_run = p->ds_pos = LR_NIL;
    p->nseg = 0;
    p->d_any = lr__index_deepest(ix, p->keys, 0, p->n, p->base, &p->node_any);
    uint32_t br = LR_NIL, bo = 0;
    if (p->base != LR_NIL) {
        br = node_run(ix, p->base);
        bo = node_off(ix, p->base);
        p->ds_run = br; /* s holds base (the caller checked) */
        p->ds_pos = bo;
    }
    uint32_t d = p->d_any, n = p->node_any;
    while (d > 0) {
        uint32_t r = node_run(ix, n), o = node_off(ix, n);
        uint32_t lo = r == br ? bo + 1 : 0;
        const struct hent *h = p->s != LR_NIL ? hent_of(ix, r, p->s) : NULL;
        uint32_t hs = lo;
        if (h != NULL && h->to > lo) {
            hs = h->to < o + 1 ? h->to : o + 1;
            p->d_s = d - (o + 1 - hs);
            p->ds_run = r;
            p->ds_pos = hs - 1;
        }
        if (hs <= o) {
            LR_TRY(lr__index_scratch_path(ix, (size_t)p->nseg + 2));
            ix->path[p->nseg++] = (struct seg){ r, hs, o };
        }
        if (hs > lo || lo > 0)
            break; /* s's deepest, or base's run */
        d -= o + 1;
        n = ix->runs[r].hang;
        if (LR_NEVER(n == LR_NIL && d > 0))
            break; /* two keys collided: stop at the root */
    }
    LR_TRY(lr__index_scratch_path(ix, (size_t)p->nseg + 2));
    for (uint32_t i = 0; i < p->nseg; i++)
        if (p->s == LR_NIL || hent_of(ix, ix->path[i].run, p->s) == NULL)
            LR_TRY(lr__index_hent_room(ix, ix->path[i].run, 1));
    uint32_t m = p->n - p->d_any;
    bool new_run = m > 0 && (p->node_any == LR_NIL ||
                             node_off(ix, p->node_any) + 1 !=
                                 ix->runs[node_run(ix, p->node_any)].len);
    if (new_run)
        LR_TRY(lr__index_hent_room(ix, LR_NIL, 1));
    /* spans: one per stretch and anchor, plus the cuts (anchors on held
     * blocks, the fork, the upgrade, the touch) */
    uint64_t spans = (uint64_t)p->nseg + 1 + 2 * (uint64_t)p->n_anchors + 4;
    return lr__index_reserve(ix, m, new_run ? 1 : 0, spans);
}

/* Phase 2 of a learn. Returns the deepest hold's span (LR_NIL if n is 0). */
uint32_t
lr__index_apply_learn(lr_index *ix, struct learn_plan *p, uint32_t tick)
{
    if (p->s == LR_NIL)
        p->s = lr__index_inst_add(ix, p->id);
    uint32_t s = p->s, a = 0;
    if (!p->remote && p->ds_run != LR_NIL)
        upgrade_up(ix, s, p->ds_run, p->ds_pos);
    /* anchors on what is already held */
    for (; a < p->n_anchors && p->anchors[a] <= p->d_s; a++) {
        uint32_t nd = node_find(ix, p->keys[p->anchors[a] - 1]);
        uint32_t r = node_run(ix, nd), o = node_off(ix, nd);
        uint32_t x = hold_span(ix, r, o, s);
        if (!(ix->sp[x].flags & SF_ANCHORS))
            ix->sp[lr__index_cut(ix, x, o)].bits |= HB_ANCHOR;
    }
    if (p->n == p->d_s) {
        if (p->n == 0 || p->ds_run == LR_NIL)
            return LR_NIL;
        uint32_t x = lr__index_cut(ix, hold_span(ix, p->ds_run, p->ds_pos, s),
                                   p->ds_pos);
        lr__index_touch(ix, x, tick);
        return x;
    }
    if (p->ds_run != LR_NIL) /* the block above the new ones forks */
        ix->sp[lr__index_cut(ix, hold_span(ix, p->ds_run, p->ds_pos, s),
                             p->ds_pos)]
            .bits++;
    /* the path's stretches, top down, then the new nodes */
    struct seg *g = ix->path;
    uint32_t ns = p->nseg;
    for (uint32_t i = 0; i < ns / 2; i++) {
        struct seg t = g[i];
        g[i] = g[ns - 1 - i];
        g[ns - 1 - i] = t;
    }
    if (p->n > p->d_any) {
        /* Every new node's insert misses in the slot table, and so does
         * the removal of a stale entry its slot gives up. Prefetch them
         * all first, so that the misses overlap and the inserts below
         * find their lines in cache. */
        warm_stale(ix, p->node_any, p->n - p->d_any);
        const uint64_t *sl = ix->ntab.slots;
        uint32_t size = ix->ntab.size;
        uint64_t salt = ix->ntab.salt;
        for (uint32_t d = p->d_any + 1; d <= p->n; d++) {
            /* the home slot's line and the next, where a probe from the
             * end of a line continues */
            uint32_t h = lr__table_home(hkey(ix, p->keys[d - 1]), size, salt);
            __builtin_prefetch(&sl[h]);
            __builtin_prefetch(&sl[h + 8 < size ? h + 8 : 0]);
        }
        uint32_t parent = p->node_any, first = LR_NIL;
        for (uint32_t d = p->d_any + 1; d <= p->n; d++) {
            parent = lr__index_node_new(ix, p->keys[d - 1], parent);
            if (first == LR_NIL)
                first = parent;
        }
        struct seg nw = { node_run(ix, first), node_off(ix, first),
                          node_off(ix, first) + (p->n - p->d_any) - 1 };
        if (ns > 0 && g[ns - 1].run == nw.run && g[ns - 1].hi + 1 == nw.lo)
            g[ns - 1].hi = nw.hi;
        else
            g[ns++] = nw;
    }
    uint32_t x = lr__index_grant(
        ix, s, g, ns, p->remote ? HB_REMOTE : 0, tick, p->anchors + a,
        p->all_anchors ? LR_NIL : p->n_anchors - a, p->d_s);
    lru_push_head(ix, x);
    return x;
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
    lr__free(m, ix->keys, (size_t)ix->kcap * CHUNK * sizeof(uint64_t));
    lr__free(m, ix->chunks, (size_t)ix->chcap * sizeof(struct chunk));
    lr__table_free(&ix->ntab, m);
    lr__free(m, ix->runs, (size_t)ix->rpool.cap * sizeof(struct run));
    lr__free(m, ix->sp, (size_t)ix->spool.cap * sizeof(struct span));
    for (uint32_t c = 0; c < HCLASSES; c++)
        lr__free(m, ix->hc[c].v, (size_t)ix->hc[c].p.cap * hc_elem(c));
    lr__free(m, ix->insts, (size_t)ix->max_inst * sizeof(struct inst));
    lr__free(m, ix->ifree, (size_t)ix->max_inst * sizeof(uint32_t));
    lr__table_free(&ix->itab, m);
    lr__index_emap_free(ix);
    lr__free(m, ix->journal, (size_t)ix->j_cap * sizeof(struct jent));
    lr__free(m, ix->kbuf, (size_t)ix->kbuf_cap * sizeof(uint64_t));
    lr__free(m, ix->abuf, (size_t)ix->abuf_cap * sizeof(uint32_t));
    lr__free(m, ix->path, (size_t)ix->path_cap * sizeof(struct seg));
    lr__free(m, ix->cand, (size_t)ix->max_inst * N_SCRATCH * sizeof(uint32_t));
    lr__free(m, ix->hk, (size_t)ix->max_inst * sizeof(struct lr__hitkey));
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
    ix->cpool.free = ix->rpool.free = ix->spool.free = ix->epool.free = LR_NIL;
    for (uint32_t c = 0; c < HCLASSES; c++)
        ix->hc[c].p.free = LR_NIL;
    lr__table_init(&ix->etab, &ix->mem, 0); /* no memory: cannot fail */
    lr__table_init(&ix->otab, &ix->mem, 0);
    ix->head[0] = ix->head[1] = ix->tail[0] = ix->tail[1] = LR_NIL;

    /* index_free() can release a partial construction: the sizes it reads
     * are set above, and a table not yet inited is zero-filled. */
    ix->insts = lr__calloc(&ix->mem, ix->max_inst, sizeof(struct inst));
    ix->ifree = lr__calloc(&ix->mem, ix->max_inst, sizeof(uint32_t));
    lr_status ist = lr__table_init(&ix->itab, &ix->mem, ix->max_inst);
    ix->cand = lr__calloc(&ix->mem, (size_t)ix->max_inst * N_SCRATCH,
                          sizeof(uint32_t));
    ix->hk =
        lr__calloc(&ix->mem, (size_t)ix->max_inst, sizeof(struct lr__hitkey));
    ix->journal =
        ix->j_cap ? lr__calloc(&ix->mem, ix->j_cap, sizeof(struct jent)) : NULL;
    lr_status tst = lr__table_init(&ix->ntab, &ix->mem, NODE_TABLE_START);
    if (ix->insts == NULL || ix->ifree == NULL || ist != LR_OK ||
        ix->cand == NULL || ix->hk == NULL || tst != LR_OK ||
        (ix->j_cap && ix->journal == NULL)) {
        index_free(ix);
        return LR_ENOMEM;
    }
    ix->cspan = ix->cand + ix->max_inst;
    ix->cdepth = ix->cspan + ix->max_inst;
    ix->mark = ix->cdepth + ix->max_inst;
    ix->cpos = ix->mark + ix->max_inst;
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
    st.prefixes = idx->nodes;
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
