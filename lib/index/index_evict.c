/* lr_index, removal: what leaves the index and how. A leaf's trim back to
 * a message boundary (lr__index_remove_leaf_and_trim), expiry by TTL per
 * trust class, eviction down to capacity from the LRU tails (settle, the
 * third phase of every mutator), and dropping an instance's holds below a
 * block or all of them (lr__index_remove_below, lr__index_clear). Every
 * step keeps the invariants listed with the layout (index_store.c), and
 * forgets the engine hashes of the blocks it takes (index_emap.c). None of
 * it allocates, so none of it can fail.
 *
 * Worked example, capacity 6, inst 1 holding A-B-C-D*-E-F* (* an anchor,
 * F the oldest leaf) when a learn adds two holds: settle pops the LOCAL
 * list's tail, F's span [E, F], which goes whole; D becomes a leaf and
 * re-enters the list where F's recency puts it, and stays, being an
 * anchor: 4 holds and the 2 new ones. Had D not been an anchor, the trim
 * would have gone on up while the blocks were no newer than F. */
#include "index/index_evict.h"
#include "index/index.h"
#include "index/index_emap.h"
#include "index/index_store.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

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

static void
hent_del(lr_index *ix, uint32_t r, struct hent *h)
{
    struct run *R = &ix->runs[r];
    struct hent *a = run_hents(ix, R);
    uint32_t i = (uint32_t)(h - a);
    memmove(a + i, a + i + 1, (size_t)(R->nh - i - 1) * sizeof *a);
    R->nh--;
}

static void
span_free(lr_index *ix, uint32_t x)
{
    ix->sp[x].inst = INST_FREE;
    pool_give(&ix->spool, ix->sp, sizeof *ix->sp, SPAN_LINK, x);
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

/* lr__index_run_fit after one holder's hold of run r shrank from `was`
 * blocks: nothing changes unless it held the whole run (the longest hold
 * is the run's length, invariant 4), so that a run the whole fleet holds
 * is not read through each time one of them lets go of part of it. */
static void
fit_after(lr_index *ix, uint32_t r, uint32_t was, bool defer)
{
    if (was >= ix->runs[r].len)
        lr__index_run_fit(ix, r, defer);
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
    uint32_t was = h->to;
    h->span = S->up;
    h->to = S->from;
    if (h->to == 0)
        hent_del(ix, r, h);
    span_free(ix, x);
    fit_after(ix, r, was, defer);
}

/* ------------------------------------------------------------------------ */
/* trimming, expiry and eviction                                             */
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
                uint32_t was = h->to;
                h->to = S->to;
                fit_after(ix, S->run, was, false);
                lr__index_lru_insert(ix, x);
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
            lr__index_lru_insert(ix, px);
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

bool
lr__index_expiry_due(const lr_index *ix, uint64_t now_ns)
{
    if (!ix->has_epoch)
        return true; /* the first call sets the time base */
    uint32_t tick = lr__index_tick_at(ix, now_ns);
    for (int l = 0; l < N_LISTS; l++)
        if (ix->tail[l] != LR_NIL && is_expired(ix, &ix->sp[ix->tail[l]], tick))
            return true;
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (ix->lower[t] != NULL && lr__index_expiry_due(ix->lower[t], now_ns))
            return true;
    return false;
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

/* ------------------------------------------------------------------------ */
/* dropping an instance's holds                                              */
/* ------------------------------------------------------------------------ */

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
    uint32_t was = h->to;
    hent_del(ix, r, h);
    fit_after(ix, r, was, defer);
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

/* The first run from d on along its siblings that s holds, or LR_NIL. */
static uint32_t
held_from(const lr_index *ix, uint32_t d, uint32_t s)
{
    while (d != LR_NIL && hent_of(ix, d, s) == NULL)
        d = ix->runs[d].sib;
    return d;
}

/* Whether s's last node in run r (below offset p, or anywhere with p ==
 * LR_NIL) is a leaf of s none of whose m deepest blocks, down to the
 * removed block (depth `floor`) at most, carries an engine hash of s. */
static bool
unstored_leaf(const lr_index *ix, uint32_t s, uint32_t r, uint32_t p,
              uint32_t m, uint32_t floor)
{
    const struct hent *h = hent_of(ix, r, s);
    uint32_t last = h->to - 1;
    if (p != LR_NIL && last <= p)
        return false;
    for (uint32_t d = ix->runs[r].child; d != LR_NIL; d = ix->runs[d].sib)
        if (ix->runs[d].poff == last && hent_of(ix, d, s) != NULL)
            return false; /* not a leaf of s */
    uint32_t n = lr__index_node_at(ix, r, last);
    for (uint32_t k = 0; k < m && node_depth(ix, n) >= floor; k++) {
        if (lr__index_emap_has(ix, s, n))
            return false;
        n = lr__index_node_parent(ix, n);
    }
    return true;
}

bool
lr__index_unstored_below(const lr_index *ix, uint32_t s, uint32_t r, uint32_t p,
                         uint32_t m)
{
    uint32_t floor = ix->runs[r].top + p + 1;
    if (unstored_leaf(ix, s, r, p, m, floor))
        return true;
    /* the runs of s hanging at p or below, and their subtrees: a walk with
     * no stack, down to the first child s holds, else on to the next
     * sibling s holds, else back up */
    for (uint32_t c = held_from(ix, ix->runs[r].child, s); c != LR_NIL;
         c = held_from(ix, ix->runs[c].sib, s)) {
        if (ix->runs[c].poff < p)
            continue;
        uint32_t cur = c;
        for (;;) {
            if (unstored_leaf(ix, s, cur, LR_NIL, m, floor))
                return true;
            uint32_t d = held_from(ix, ix->runs[cur].child, s);
            if (d != LR_NIL) {
                cur = d;
                continue;
            }
            while (cur != c) {
                d = held_from(ix, ix->runs[cur].sib, s);
                if (d != LR_NIL)
                    break;
                cur = ix->runs[cur].prun;
            }
            if (cur == c)
                break;
            cur = d;
        }
    }
    return false;
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
    uint32_t was = h->to;
    h->to = p + 1;
    fit_after(ix, r, was, false);
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
            lr__index_child_unlink(ix, r);
    }
    for (uint32_t r = 0; r < ix->rpool.top; r++)
        if (ix->runs[r].state == RUN_PENDING) {
            ix->runs[r].child = LR_NIL;
            lr__index_run_release(ix, r);
        }
}

/* ------------------------------------------------------------------------ */
/* entry points                                                              */
/* ------------------------------------------------------------------------ */

lr_status
lr_index_expire(lr_index *idx, uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL, LR_EINVAL);
    LR_TRY(lr__index_judge(idx, now_ns));
    lr__index_expire_all(idx, lr__index_tick(idx, now_ns));
    /* the lower tiers take idx's judgement (their clocks judge nothing) */
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (idx->lower[t] != NULL)
            (void)lr_index_expire(idx->lower[t], now_ns);
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
