/* lr_index, learn: recording that an instance holds a prompt's prefix.
 * Every mutator that adds holds (lr_index_learn here, the KV events of
 * precise mode) runs the same three phases, which is what makes a failed
 * call change nothing (B11):
 *
 *   1. plan   find where the instance's holds and anybody's end along the
 *             prompt (the search, index_find.c), the stretches of the path
 *             between the two, and reserve every byte the change needs:
 *             the only step that can fail, and it changes nothing logical;
 *   2. apply  add the instance if new, the holds (spans) on the path and
 *             the new nodes below it, the anchors, the touch; cannot fail;
 *   3. settle expire and evict back under capacity (index_evict.c).
 *
 * Worked example, inst 2 learns A B X where inst 1 holds A B C D (one
 * run): the plan finds that anybody's holds end at B (depth 2) and inst
 * 2's at the root, and reserves a node, a run and the spans; the apply
 * grants inst 2 the stretch [A, B] of inst 1's run as one span (B its
 * bottom, with one child) and X as a new node in a new run hanging from B.
 * Inst 1's span stays whole: under B it still holds only C. A LOCAL learn
 * also makes LOCAL every REMOTE hold of the instance on the prompt's path
 * (invariant 2), and remembers its deepest key in the journal that
 * incremental delta exports read (index_delta.c). */
#include "index/index_learn.h"
#include "index/index.h"
#include "index/index_evict.h"
#include "index/index_find.h"
#include "index/index_keys.h"
#include "index/index_store.h"

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
            lr__index_lru_insert(ix, x);
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
    p->d_any = lr__index_deepest(ix, p->keys, 0, p->n, p->base, &p->node_any,
                                 &ix->last_probes);
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

/* Warm the line of slot h and the next: a removal's backward shift reads
 * on past its entry (at 3/4 load, about eight slots), as a probe does. */
static inline void
warm_slot(const uint64_t *sl, uint32_t size, uint32_t h)
{
    __builtin_prefetch(&sl[h]);
    __builtin_prefetch(&sl[h + 8 < size ? h + 8 : 0]);
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
                warm_slot(sl, size,
                          lr__table_home(hkey(ix, ix->keys[n2] ^ DEAD_KEY),
                                         size, salt));
            }
        }
    }
    uint32_t c = ix->cpool.free;
    for (uint32_t k = 0; k < n / CHUNK + 1 && c != LR_NIL; k++) {
        for (uint32_t st = ix->chunks[c].stale; st != 0; st &= st - 1) {
            uint32_t n2 = (c << CHUNK_SHIFT) | (uint32_t)__builtin_ctz(st);
            warm_slot(
                sl, size,
                lr__table_home(hkey(ix, ix->keys[n2] ^ DEAD_KEY), size, salt));
        }
        c = ix->chunks[c].next;
    }
}

/* Phase 2 of a learn. Returns the deepest hold's span (LR_NIL if n is 0). */
uint32_t
lr__index_apply_learn(lr_index *ix, struct learn_plan *p, uint32_t tick)
{
    if (p->s == LR_NIL)
        p->s = lr__index_inst_add(ix, p->id);
    uint32_t s = p->s, a = 0;
    p->node_n = p->node_any; /* unless new nodes follow it (below) */
    if (!p->remote && p->ds_run != LR_NIL)
        upgrade_up(ix, s, p->ds_run, p->ds_pos);
    /* anchors on what is already held */
    for (; a < p->n_anchors && p->anchors[a] <= p->d_s; a++) {
        uint32_t nd = lr__index_chain_node(ix, p->keys, p->anchors[a], p->base,
                                           &ix->last_probes);
        /* s holds the anchor's block; only a key that collided on the path
         * (or that a forged delta put there) can make either lookup miss */
        if (nd == LR_NIL)
            continue;
        uint32_t r = node_run(ix, nd), o = node_off(ix, nd);
        uint32_t x = hold_span(ix, r, o, s);
        if (x == LR_NIL)
            continue;
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
        /* depth of keys[0]'s parent; the first new node may start a run */
        uint32_t top = p->base == LR_NIL ? 0 : node_depth(ix, p->base);
        for (uint32_t d = p->d_any + 1; d <= p->n; d++) {
            if (d > p->d_any + 1 && (top + d) % TAB_STRIDE != 0)
                continue; /* not in the table (node_tabled) */
            /* the home slot's line and the next, where a probe from the
             * end of a line continues */
            uint32_t h = lr__table_home(hkey(ix, p->keys[d - 1]), size, salt);
            warm_slot(sl, size, h);
        }
        uint32_t parent = p->node_any, first = LR_NIL;
        for (uint32_t d = p->d_any + 1; d <= p->n; d++) {
            parent = lr__index_node_new(ix, p->keys[d - 1], parent);
            if (first == LR_NIL)
                first = parent;
        }
        p->node_n = parent;
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
    lr__index_lru_push_head(ix, x);
    return x;
}

/* ------------------------------------------------------------------------ */
/* learn                                                                     */
/* ------------------------------------------------------------------------ */

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
journal_add(lr_index *ix, uint64_t key, uint32_t node, uint32_t id)
{
    if (ix->j_cap > 0) {
        struct jent *j = &ix->journal[ix->j_seq % ix->j_cap];
        j->key = key;
        j->inst_id = id;
        j->node = node;
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
    LR_TRY(lr__index_judge(ix, now_ns));
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
        journal_add(ix, keys[n - 1], pl.node_n, instance);
    lr__index_settle(ix, tick);
    return LR_OK;
}
