/* lr_index, the store: the layout every layer of lib/index works on, and
 * the primitives that keep it. The layers above it (index.h lists them)
 * decide what to learn, match, forget and exchange; this file only holds
 * the routes: memory reservation (phase 1 of every mutator, the only step
 * that can fail), host time, the instance table, nodes and runs, spans and
 * holder arrays, the LRU lists and the scratch buffers.
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
 *   ntab (lr__table: block key -> node slot, for the nodes that start
 *          |  a run or lie at a depth that is a multiple of TAB_STRIDE;
 *          |  lr__index_deepest walks the runs to the others)
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
 */
#include "index/index_store.h"
#include "index/index.h"

/* Smallest array lr__index_grow makes, in elements. */
#define POOL_MIN 64

/* ------------------------------------------------------------------------ */
/* time                                                                      */
/* ------------------------------------------------------------------------ */

lr_status
lr__index_judge(lr_index *idx, uint64_t now_ns)
{
    return lr__clock_judge(&idx->clock, now_ns, true);
}

uint32_t
lr__index_tick(lr_index *ix, uint64_t now)
{
    lr__clock_take(&ix->clock, now); /* judged at the call's start */
    if (!ix->has_epoch) {
        ix->has_epoch = true;
        ix->epoch_ns = now;
    }
    uint32_t tick = lr__index_tick_at(ix, now);
    if (tick > ix->last_tick)
        ix->last_tick = tick;
    return tick;
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
        LR_TRY(lr__index_eslots_reserve(ix, cap));
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

lr_status
lr__index_lru_hints(lr_index *ix)
{
    if (ix->lru_hint != NULL)
        return LR_OK;
    uint32_t *h = lr__alloc(&ix->mem, (size_t)N_LISTS * LRU_HINTS * sizeof *h);
    LR_RETURN_IF(h == NULL, LR_ENOMEM);
    for (uint32_t i = 0; i < N_LISTS * LRU_HINTS; i++)
        h[i] = LR_NIL;
    ix->lru_hint = h;
    return LR_OK;
}

/* A match's scratch: the five per-instance arrays in one allocation, the
 * sort's keys in another (the order lr_index_create has always made them
 * in, which the OOM tests count). */
#define MS_ARRAYS 5u

lr_status
lr__index_ms_init(struct lr__mem *m, struct lr__match_scratch *ms,
                  uint32_t max_inst)
{
    memset(ms, 0, sizeof *ms);
    uint32_t *a = lr__calloc(m, (size_t)max_inst * MS_ARRAYS, sizeof(uint32_t));
    if (a == NULL)
        return LR_ENOMEM;
    struct lr__hitkey *hk =
        lr__calloc(m, (size_t)max_inst, sizeof(struct lr__hitkey));
    if (hk == NULL) {
        lr__free(m, a, (size_t)max_inst * MS_ARRAYS * sizeof(uint32_t));
        return LR_ENOMEM;
    }
    ms->max_inst = max_inst;
    ms->cand = a;
    ms->cspan = a + max_inst;
    ms->cdepth = ms->cspan + max_inst;
    ms->mark = ms->cdepth + max_inst;
    ms->cpos = ms->mark + max_inst;
    ms->hk = hk;
    return LR_OK;
}

void
lr__index_ms_fini(struct lr__mem *m, struct lr__match_scratch *ms)
{
    lr__free(m, ms->cand, (size_t)ms->max_inst * MS_ARRAYS * sizeof(uint32_t));
    lr__free(m, ms->hk, (size_t)ms->max_inst * sizeof(struct lr__hitkey));
    memset(ms, 0, sizeof *ms);
}

/* ---- the engine-hash map's per-slot arrays -------------------------------- */

/* They follow the node slots (index_emap.c gives them their meaning): they
 * exist from precise mode's first event on, and from then on grow with
 * chunk_reserve, so an index that never sees a KV event pays nothing. */
static lr_status
grow_slots(struct lr__mem *m, void **arr, uint32_t *have, uint32_t cap,
           size_t per_chunk, int fill)
{
    if (*have >= cap)
        return LR_OK;
    size_t old = (size_t)*have * per_chunk, n = (size_t)cap * per_chunk;
    uint8_t *p = lr__realloc(m, *arr, old, n);
    if (p == NULL)
        return LR_ENOMEM;
    memset(p + old, fill, n - old);
    *arr = p;
    *have = cap;
    return LR_OK;
}

lr_status
lr__index_eslots_reserve(lr_index *ix, uint32_t cap)
{
    if (cap <= ix->ecap)
        return LR_OK;
    /* each array keeps its own size, so a failure half way is harmless */
    LR_TRY(grow_slots(&ix->mem, (void **)&ix->ehash, &ix->ecap_h, cap,
                      CHUNK * sizeof(uint64_t), 0));
    LR_TRY(grow_slots(&ix->mem, (void **)&ix->einst, &ix->ecap_i, cap,
                      CHUNK * sizeof(uint16_t), 0xff)); /* EINST_NONE */
    LR_TRY(grow_slots(&ix->mem, (void **)&ix->eovf, &ix->ecap_o, cap,
                      sizeof(uint16_t), 0));
    ix->ecap = cap;
    return LR_OK;
}

/* Slots [from, to) of chunk c were freed: their nodes' entries were
 * forgotten with their holds, and no overflow entry is marked there. */
static void
eslots_freed(lr_index *ix, uint32_t c, uint32_t from, uint32_t to)
{
    if (ix->ecap > 0) {
        for (uint32_t k = from; k < to; k++)
            assert(ix->einst[(c << CHUNK_SHIFT) | k] == EINST_NONE);
        uint32_t bits = ((1u << to) - 1) & ~((1u << from) - 1);
        ix->eovf[c] &= (uint16_t)~bits;
    }
}

/* ---- holder arrays ------------------------------------------------------- */

/* Elements of holder class c, in bytes. */
static inline size_t
hc_elem(uint32_t c)
{
    return sizeof(struct hent) << c;
}

#define HENT_LINK offsetof(struct hent, span)

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
    while (i > 0 && a[i - 1].id > id)
        i--;
    memmove(a + i + 1, a + i, (size_t)(R->nh - i) * sizeof *a);
    R->nh++;
    struct hent *h = &a[i];
    h->inst = (uint16_t)s;
    h->pad = 0;
    h->id = id;
    h->to = 0;
    h->span = LR_NIL;
    return h;
}

/* ------------------------------------------------------------------------ */
/* LRU lists                                                                 */
/* ------------------------------------------------------------------------ */

/* Span x was just listed in list l with its stamp: the hint of that tick
 * (once an import made the hints). */
static inline void
hint_set(lr_index *ix, int l, uint32_t x)
{
    if (ix->lru_hint != NULL)
        ix->lru_hint[(size_t)l * LRU_HINTS +
                     (ix->sp[x].stamp & (LRU_HINTS - 1))] = x;
}

/* A span listed in list l with stamp t, from the hints, or LR_NIL. A hint
 * is only a guess (the span may have gone, moved or been restamped since)
 * and is checked. */
static inline uint32_t
hint_at(const lr_index *ix, int l, uint32_t t)
{
    uint32_t c = ix->lru_hint[(size_t)l * LRU_HINTS + (t & (LRU_HINTS - 1))];
    if (c == LR_NIL || c >= ix->spool.top)
        return LR_NIL;
    const struct span *S = &ix->sp[c];
    if (S->inst == INST_FREE || !(S->bits & HB_LISTED) || list_of(S) != l ||
        S->stamp != t)
        return LR_NIL;
    return c;
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
    hint_set(ix, l, x);
}

void
lr__index_lru_push_head(lr_index *ix, uint32_t x)
{
    lru_push_head(ix, x);
}

/* List unlisted span x right after span cur of list l. */
static inline void
lru_link_after(lr_index *ix, uint32_t x, uint32_t cur, int l)
{
    struct span *h = &ix->sp[x];
    struct span *c = &ix->sp[cur];
    h->prev = cur;
    h->next = c->next;
    if (c->next != LR_NIL)
        ix->sp[c->next].prev = x;
    else
        ix->tail[l] = x;
    c->next = x;
    h->bits |= HB_LISTED;
    hint_set(ix, l, x);
}

/* Insert an unlisted span where its stamp belongs, searching from the
 * tail (where re-entering holds belong) for at most LRU_SEEK_MAX steps; a
 * search that runs out inserts where it stopped (bounded work, order then
 * approximate). */
#define LRU_SEEK_MAX 64

/* Where an imported stamp goes when the hints name a span at or above
 * it: the first tick from `stamp` up that names a listed span, then
 * tailward past every span at least as recent (bounded as the walks
 * below are). So an import lands where LRU order puts it, however deep in
 * the list: a bounded walk from an end put a route of a few seconds'
 * age next to the tail of a long list, where the next eviction took it,
 * and a replica lost the placements its peers had just shared. LR_NIL:
 * no hint in range. */
static uint32_t
hinted_place(const lr_index *ix, int l, uint32_t stamp, uint32_t newest)
{
    uint32_t reach =
        newest - stamp < LRU_HINTS ? newest - stamp : LRU_HINTS - 1;
    for (uint32_t d = 0; d <= reach; d++) {
        uint32_t cur = hint_at(ix, l, stamp + d);
        if (cur == LR_NIL)
            continue;
        for (int steps = 0; steps < LRU_SEEK_MAX; steps++) {
            uint32_t next = ix->sp[cur].next;
            if (next == LR_NIL || ix->sp[next].stamp < stamp)
                break;
            cur = next;
        }
        return cur;
    }
    return LR_NIL;
}

void
lr__index_lru_insert(lr_index *ix, uint32_t x)
{
    struct span *h = &ix->sp[x];
    int l = list_of(h);
    uint32_t head = ix->head[l];
    if (ix->lru_hint != NULL && head != LR_NIL &&
        ix->sp[head].stamp > h->stamp) {
        uint32_t at = hinted_place(ix, l, h->stamp, ix->sp[head].stamp);
        if (at != LR_NIL) {
            lru_link_after(ix, x, at, l);
            return;
        }
    }
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
    lru_link_after(ix, x, cur, l);
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
    if (ix->lru_hint != NULL) {
        uint32_t at = hinted_place(ix, l, h->stamp, ix->sp[head].stamp);
        if (at != LR_NIL) {
            lru_link_after(ix, x, at, l);
            return;
        }
    }
    if (h->stamp - ix->sp[tail].stamp < ix->sp[head].stamp - h->stamp) {
        lr__index_lru_insert(ix, x); /* nearer the tail: from there */
        return;
    }
    /* nearer the head (a route used a moment before the newest): walk
     * from the head, as boundedly as lr__index_lru_insert walks from the
     * tail */
    uint32_t cur = head;
    for (int steps = 0; steps < LRU_SEEK_MAX; steps++) {
        uint32_t next = ix->sp[cur].next;
        if (next == LR_NIL || ix->sp[next].stamp <= h->stamp)
            break;
        cur = next;
    }
    lru_link_after(ix, x, cur, l);
}

/* ------------------------------------------------------------------------ */
/* nodes and runs                                                            */
/* ------------------------------------------------------------------------ */

#define CHUNK_LINK offsetof(struct chunk, next)
#define RUN_LINK offsetof(struct run, hidx)

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

void
lr__index_child_unlink(lr_index *ix, uint32_t r)
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
    if (node_tabled(o, R->top + o + 1))
        lr__table_insert(&ix->ntab, hkey(ix, key), n);
    R->len++;
    ix->nodes++;
    return n;
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
/* Node at offset o (in chunk c) of a run, one the node table holds,
 * goes: its entry stays, under its flipped key, until the slot is used
 * again (run_push). The other nodes' keys are left as they are: nothing
 * reads a key past its run's end. */
static inline void
tabled_gone(lr_index *ix, uint32_t c, uint32_t o)
{
    ix->keys[(c << CHUNK_SHIFT) | (o & CHUNK_MASK)] ^= DEAD_KEY;
    ix->chunks[c].stale |= 1u << (o & CHUNK_MASK);
    ix->stale++;
}

static void
run_cut_nodes(lr_index *ix, uint32_t r, uint32_t len)
{
    struct run *R = &ix->runs[r];
    uint32_t c = R->last;
    ix->nodes -= R->len - len;
    while (R->len > len) {
        /* offsets [lo, R->len) of the last chunk go, a chunk at a time:
         * only the nodes the table holds are touched (their keys flipped,
         * their slots marked stale), one or two in a chunk */
        struct chunk *C = &ix->chunks[c];
        uint32_t lo = len > C->base ? len : C->base;
        uint32_t top = R->top + 1; /* depth of offset 0 */
        if (lo == 0)
            tabled_gone(ix, c, 0); /* the run's first node */
        for (uint32_t o =
                 lo + (TAB_STRIDE - (top + lo) % TAB_STRIDE) % TAB_STRIDE;
             o < R->len; o += TAB_STRIDE)
            if (o != 0)
                tabled_gone(ix, c, o);
        eslots_freed(ix, c, lo - C->base, R->len - C->base);
        R->len = lo;
        if (lo == C->base) {
            uint32_t p = C->prev;
            C->run = LR_NIL;
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

void
lr__index_run_release(lr_index *ix, uint32_t r)
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
        lr__index_child_unlink(ix, r);
        lr__index_run_release(ix, r);
    }
}

/* After run r lost holders or blocks: its nodes are what its holders
 * hold (invariant 4). An emptied run is freed, or with `defer` marked
 * RUN_PENDING for remove_all_of to free. */
void
lr__index_run_fit(lr_index *ix, uint32_t r, bool defer)
{
    struct run *R = &ix->runs[r];
    const struct hent *h = run_hents(ix, R);
    uint32_t len = 0;
    for (uint32_t i = 0; i < R->nh && len < R->len; i++) /* to <= R->len */
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
    lr__index_child_unlink(ix, r);
    lr__index_run_release(ix, r);
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
    ix->insts[s].ev_m = 0;
    lr__table_insert(&ix->itab, inst_hash(ix, id), s);
    return s;
}

void
lr__index_inst_del(lr_index *ix, uint32_t s)
{
    lr__table_remove(&ix->itab, inst_hash(ix, ix->insts[s].id), s);
    ix->insts[s].used = 0;
    ix->insts[s].blocks = 0;
    ix->ifree[ix->n_ifree++] = s;
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

/* ------------------------------------------------------------------------ */
/* release                                                                   */
/* ------------------------------------------------------------------------ */

void
lr__index_store_free(lr_index *ix)
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
    lr__free(m, ix->ehash, (size_t)ix->ecap_h * CHUNK * sizeof(uint64_t));
    lr__free(m, ix->einst, (size_t)ix->ecap_i * CHUNK * sizeof(uint16_t));
    lr__free(m, ix->eovf, (size_t)ix->ecap_o * sizeof(uint16_t));
    lr__free(m, ix->kbuf, (size_t)ix->kbuf_cap * sizeof(uint64_t));
    lr__free(m, ix->abuf, (size_t)ix->abuf_cap * sizeof(uint32_t));
    lr__free(m, ix->path, (size_t)ix->path_cap * sizeof(struct seg));
    lr__free(m, ix->lru_hint, (size_t)N_LISTS * LRU_HINTS * sizeof(uint32_t));
    lr__index_ms_fini(m, &ix->ms);
}
