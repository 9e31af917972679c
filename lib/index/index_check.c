/* lr_index, checks for tests, fuzzers and debug builds: lr__index_verify
 * walks every invariant listed at the top of index_store.c (and the
 * layout's own: chunks, run links, holder arrays, span tiling),
 * lr__index_digest checksums the logical state (equal before and after a
 * failed call, and blind to the layout), and the probes differential and
 * flooding tests use. They only read the index. */
#include "index/index.h"
#include "index/index_emap.h"
#include "index/index_find.h"
#include "index/index_learn.h"
#include "index/index_store.h"

#define CHECK(c)                \
    do {                        \
        if (!(c))               \
            return LR_ECORRUPT; \
    } while (0)

struct vcount {
    uint64_t *per_inst;
    uint64_t holds, remote, nodes, spans, chunks;
    uint64_t tabled; /* nodes the node table holds */
};

/* A table entry that is slot n itself (whatever key the slot holds). */
static bool
slot_eq(const void *ctx, uint64_t n, uint32_t v)
{
    (void)ctx;
    return v == n;
}

/* Child runs of r hanging at offset `off` held by s. */
static uint32_t
kids_at(const lr_index *ix, uint32_t r, uint32_t off, uint32_t s)
{
    uint32_t k = 0;
    for (uint32_t c = ix->runs[r].child; c != LR_NIL; c = ix->runs[c].sib)
        if (ix->runs[c].poff == off && hent_of(ix, c, s) != NULL)
            k++;
    return k;
}

static lr_status
verify_chunks(const lr_index *ix, uint32_t r, struct vcount *v)
{
    const struct run *R = &ix->runs[r];
    uint32_t nc = (R->len + CHUNK - 1) >> CHUNK_SHIFT, i = 0;
    uint32_t prev = LR_NIL;
    for (uint32_t c = R->first; c != LR_NIL; c = ix->chunks[c].next, i++) {
        CHECK(c < ix->cpool.top && i < nc);
        const struct chunk *C = &ix->chunks[c];
        CHECK(C->run == r && C->base == i * CHUNK && C->prev == prev);
        for (uint32_t k = 0; k < CHUNK && C->base + k < R->len; k++) {
            uint32_t n = (c << CHUNK_SHIFT) | k;
            bool tabled = node_tabled(C->base + k, R->top + C->base + k + 1);
            CHECK(lr__table_find(&ix->ntab, hkey(ix, ix->keys[n]), n, slot_eq,
                                 NULL) == (tabled ? n : LR_NIL));
            v->tabled += tabled;
        }
        prev = c;
    }
    CHECK(i == nc && R->last == prev);
    v->chunks += nc;
    v->nodes += R->len;
    return LR_OK;
}

static lr_status
verify_links(const lr_index *ix, uint32_t r)
{
    const struct run *R = &ix->runs[r];
    if (R->prun == LR_NIL) {
        CHECK(R->hang == LR_NIL && R->top == 0);
    } else {
        CHECK(R->prun < ix->rpool.top);
        const struct run *P = &ix->runs[R->prun];
        CHECK(P->state == RUN_LIVE && R->poff < P->len);
        CHECK(R->hang == lr__index_node_at(ix, R->prun, R->poff));
        CHECK(R->top == P->top + R->poff + 1);
        uint32_t c = P->child;
        while (c != LR_NIL && c != r)
            c = ix->runs[c].sib;
        CHECK(c == r);
    }
    uint32_t prev = LR_NIL, n = 0;
    for (uint32_t c = R->child; c != LR_NIL; c = ix->runs[c].sib) {
        CHECK(c < ix->rpool.top && ++n <= ix->rpool.top);
        CHECK(ix->runs[c].state == RUN_LIVE && ix->runs[c].prun == r &&
              ix->runs[c].sib_prev == prev);
        prev = c;
    }
    return LR_OK;
}

/* Instance s's spans in run r: they tile [0, to), their bottoms' child
 * counts are right, plain blocks have no child run of s, LOCAL is closed
 * upward and leaves are listed. */
static lr_status
verify_spans(const lr_index *ix, uint32_t r, const struct hent *h,
             struct vcount *v)
{
    const struct run *R = &ix->runs[r];
    uint32_t s = h->inst, at = h->to, n = 0;
    /* plain blocks: every child run of s hangs from a span's bottom */
    for (uint32_t c = R->child; c != LR_NIL; c = ix->runs[c].sib) {
        if (hent_of(ix, c, s) == NULL)
            continue;
        CHECK(ix->runs[c].poff < h->to);
        CHECK(ix->sp[span_at(ix, h, ix->runs[c].poff)].to ==
              ix->runs[c].poff + 1);
    }
    for (uint32_t x = h->span; x != LR_NIL; x = ix->sp[x].up) {
        CHECK(x < ix->spool.top && ++n <= ix->spool.top);
        const struct span *S = &ix->sp[x];
        CHECK(S->inst == s && S->run == r && S->to == at && S->from < S->to);
        uint32_t kids =
            (S->to < h->to ? 1u : 0u) + kids_at(ix, r, S->to - 1, s);
        CHECK(nchild(S) == kids);
        if (kids == 0)
            CHECK(S->bits & HB_LISTED); /* invariant 3 */
        if (!(S->bits & HB_REMOTE)) {   /* invariant 2 */
            uint32_t p = S->from > 0 ? S->up
                         : R->prun == LR_NIL
                             ? LR_NIL
                             : hold_span(ix, R->prun, R->poff, s);
            CHECK(p == LR_NIL || !(ix->sp[p].bits & HB_REMOTE));
        }
        uint32_t len = span_len(S);
        v->per_inst[s] += len;
        v->holds += len;
        if (S->bits & HB_REMOTE)
            v->remote += len;
        v->spans++;
        at = S->from;
    }
    CHECK(at == 0);
    return LR_OK;
}

static lr_status
verify_run(const lr_index *ix, uint32_t r, struct vcount *v)
{
    const struct run *R = &ix->runs[r];
    CHECK(R->state == RUN_LIVE && R->len > 0);
    LR_TRY(verify_chunks(ix, r, v));
    LR_TRY(verify_links(ix, r));
    CHECK(R->hcls < HCLASSES && R->nh <= (1u << R->hcls));
    CHECK(R->hidx < ix->hc[R->hcls].p.top);
    const struct hent *h = run_hents(ix, R);
    uint32_t len = 0;
    for (uint32_t i = 0; i < R->nh; i++) {
        uint32_t s = h[i].inst;
        CHECK(s < ix->max_inst && ix->insts[s].used);
        CHECK(h[i].id == ix->insts[s].id);
        CHECK(h[i].to > 0 && h[i].to <= R->len);
        if (i > 0) /* sorted by id, so distinct */
            CHECK(h[i - 1].id < h[i].id);
        if (R->prun != LR_NIL) /* invariant 1 */
            CHECK(hold_span(ix, R->prun, R->poff, s) != LR_NIL);
        if (h[i].to > len)
            len = h[i].to;
        LR_TRY(verify_spans(ix, r, &h[i], v));
    }
    CHECK(len == R->len); /* invariant 4 */
    return LR_OK;
}

static lr_status
verify_lists(const lr_index *ix)
{
    for (int l = 0; l < N_LISTS; l++) {
        uint32_t prev = LR_NIL;
        uint64_t count = 0;
        for (uint32_t x = ix->head[l]; x != LR_NIL; x = ix->sp[x].next) {
            CHECK(x < ix->spool.top && ++count <= ix->spool.top);
            const struct span *h = &ix->sp[x];
            CHECK(h->inst != INST_FREE);
            CHECK(h->bits & HB_LISTED);
            CHECK(list_of(h) == l);
            CHECK(h->prev == prev);
            prev = x;
        }
        CHECK(ix->tail[l] == prev);
    }
    return LR_OK;
}

/* Every stale bit names a slot whose entry is in the table under its
 * flipped key, and only those: the count matches. */
static lr_status
verify_stale(const lr_index *ix)
{
    uint64_t stale = 0;
    for (uint32_t c = 0; c < ix->cpool.top; c++) {
        const struct chunk *C = &ix->chunks[c];
        for (uint32_t k = 0; k < CHUNK; k++) {
            if (!(C->stale & (1u << k)))
                continue;
            uint32_t n = (c << CHUNK_SHIFT) | k;
            CHECK(C->run == LR_NIL || C->base + k >= ix->runs[C->run].len);
            CHECK(lr__table_find(&ix->ntab, hkey(ix, ix->keys[n] ^ DEAD_KEY), n,
                                 slot_eq, NULL) == n);
            stale++;
        }
    }
    CHECK(stale == ix->stale);
    return LR_OK;
}

static lr_status
verify_all(const lr_index *ix, struct vcount *v)
{
    for (uint32_t r = 0; r < ix->rpool.top; r++)
        if (ix->runs[r].state != RUN_FREE)
            LR_TRY(verify_run(ix, r, v));
    LR_TRY(verify_lists(ix));
    CHECK(v->holds == ix->holds && v->remote == ix->remote);
    CHECK(ix->holds <= ix->capacity);
    CHECK(v->nodes == ix->nodes && ix->ntab.count == v->tabled + ix->stale);
    LR_TRY(verify_stale(ix));
    CHECK(v->spans == pool_live(&ix->spool));
    CHECK(v->chunks == pool_live(&ix->cpool));
    uint32_t used = 0;
    for (uint32_t s = 0; s < ix->max_inst; s++) {
        if (!ix->insts[s].used)
            continue;
        used++;
        CHECK(v->per_inst[s] == ix->insts[s].blocks &&
              lr__index_inst_lookup(ix, ix->insts[s].id) == s);
    }
    CHECK(used + ix->n_ifree == ix->max_inst && ix->itab.count == used);
    CHECK(lr__table_verify(&ix->itab) == LR_OK);
    CHECK(lr__table_verify(&ix->ntab) == LR_OK);
    return lr__index_emap_verify(ix);
}

lr_status
lr__index_verify(const lr_index *ix)
{
    if (ix == NULL)
        return LR_EINVAL;
    struct lr__mem m = ix->mem;
    struct vcount v = { 0 };
    v.per_inst = lr__calloc(&m, ix->max_inst, sizeof(uint64_t));
    if (v.per_inst == NULL)
        return LR_ENOMEM;
    lr_status st = verify_all(ix, &v);
    lr__free(&m, v.per_inst, (size_t)ix->max_inst * sizeof(uint64_t));
    for (uint32_t t = 0; st == LR_OK && t < LR__LOWER_TIERS; t++)
        if (ix->lower[t] != NULL)
            st = ix->lower[t]->lower[0] == NULL &&
                         ix->lower[t]->lower[1] == NULL &&
                         ix->lower[t]->B == ix->B
                     ? lr__index_verify(ix->lower[t])
                     : LR_ECORRUPT;
    return st;
}

#define DIGEST_SEED 0x6469676573740000ull /* "digest" */

static inline uint64_t
dmix(uint64_t d, uint64_t v)
{
    return lr__mix64(d ^ v, DIGEST_SEED) + GOLDEN_GAMMA;
}

/* One block hold: its prefix (key and parent key), instance, flags and
 * stamp. Summed, so that the digest does not see the layout. */
static uint64_t
hold_digest(uint64_t key, uint64_t pkey, uint32_t id, uint32_t bits,
            uint32_t stamp)
{
    uint64_t d = dmix(0, key);
    d = dmix(d, pkey);
    d = dmix(d, ((uint64_t)id << 32) | bits);
    return dmix(d, stamp);
}

static uint64_t
span_digest(const lr_index *ix, const struct span *S)
{
    const struct run *R = &ix->runs[S->run];
    uint32_t id = ix->insts[S->inst].id;
    uint32_t n = lr__index_node_at(ix, S->run, S->from);
    uint64_t pkey = S->from > 0         ? ix->keys[lr__index_node_parent(ix, n)]
                    : R->hang == LR_NIL ? 0
                                        : ix->keys[R->hang];
    uint64_t sum = 0;
    for (uint32_t p = S->from; p < S->to; p++) {
        bool bottom = p + 1 == S->to;
        uint32_t bits = bottom ? S->bits : plain_bits(S);
        uint32_t stamp = bottom ? S->stamp : S->stamp_top;
        sum += hold_digest(ix->keys[n], pkey, id, bits, stamp);
        pkey = ix->keys[n];
        if (!bottom)
            n = (n & CHUNK_MASK) != CHUNK_MASK
                    ? n + 1
                    : ix->chunks[n >> CHUNK_SHIFT].next << CHUNK_SHIFT;
    }
    return sum;
}

uint64_t
lr__index_digest(const lr_index *ix)
{
    uint64_t holds = 0;
    for (uint32_t x = 0; x < ix->spool.top; x++)
        if (ix->sp[x].inst != INST_FREE)
            holds += span_digest(ix, &ix->sp[x]);
    uint64_t d = dmix(0, holds);
    for (int l = 0; l < N_LISTS; l++)
        for (uint32_t x = ix->head[l]; x != LR_NIL; x = ix->sp[x].next) {
            const struct span *S = &ix->sp[x];
            d = dmix(d, ix->keys[lr__index_node_at(ix, S->run, S->to - 1)] ^
                            S->inst);
        }
    d = dmix(d, ix->holds);
    d = dmix(d, ix->remote);
    d = dmix(d, ix->nodes);
    d = dmix(d, ix->evicted);
    d = dmix(d, ix->expired);
    d = dmix(d, ix->learned);
    d = dmix(d, ix->j_seq);
    d = dmix(d, ix->has_epoch ? ix->epoch_ns + 1 : 0);
    for (uint64_t q = ix->j_seq > ix->j_cap ? ix->j_seq - ix->j_cap : 0;
         q < ix->j_seq && ix->j_cap > 0; q++)
        d = dmix(d, ix->journal[q % ix->j_cap].key ^
                        ix->journal[q % ix->j_cap].inst_id);
    for (uint32_t s = 0; s < ix->max_inst; s++)
        if (ix->insts[s].used)
            d = dmix(d, ((uint64_t)ix->insts[s].id << 32) ^ s ^
                            (ix->insts[s].blocks << 40));
    for (uint32_t i = 0; i < ix->n_ifree; i++)
        d = dmix(d, ix->ifree[i]);
    d = dmix(d, lr__index_emap_digest(ix));
    /* a lower tier once made is state (an index without one digests as
     * before tiers existed) */
    for (uint32_t t = 0; t < LR__LOWER_TIERS; t++)
        if (ix->lower[t] != NULL)
            d = dmix(d, lr__index_digest(ix->lower[t]) + t);
    return d;
}

void
lr__index_holds(const lr_index *ix,
                void (*hold)(void *ctx, const struct lr__hold_view *h),
                void (*listed)(void *ctx, int list, uint64_t key,
                               uint32_t instance),
                void *ctx)
{
    for (uint32_t x = 0; x < ix->spool.top; x++) {
        const struct span *S = &ix->sp[x];
        if (S->inst == INST_FREE)
            continue;
        const struct run *R = &ix->runs[S->run];
        struct lr__hold_view v;
        v.instance = ix->insts[S->inst].id;
        uint32_t n = lr__index_node_at(ix, S->run, S->from);
        v.parent_key = S->from > 0 ? ix->keys[lr__index_node_parent(ix, n)]
                       : R->hang == LR_NIL ? 0
                                           : ix->keys[R->hang];
        for (uint32_t p = S->from; p < S->to; p++) {
            bool bottom = p + 1 == S->to;
            uint32_t bits = bottom ? S->bits : plain_bits(S);
            v.key = ix->keys[n];
            v.depth = R->top + p + 1;
            v.flags = ((bits & HB_LISTED) ? LR__HOLD_LISTED : 0) |
                      ((bits & HB_REMOTE) ? LR__HOLD_REMOTE : 0) |
                      ((bits & HB_ANCHOR) ? LR__HOLD_ANCHOR : 0);
            v.children = bits & HB_NCHILD;
            v.stamp = bottom ? S->stamp : S->stamp_top;
            hold(ctx, &v);
            v.parent_key = v.key;
            if (!bottom)
                n = (n & CHUNK_MASK) != CHUNK_MASK
                        ? n + 1
                        : ix->chunks[n >> CHUNK_SHIFT].next << CHUNK_SHIFT;
        }
    }
    for (int l = 0; l < N_LISTS; l++)
        for (uint32_t x = ix->head[l]; x != LR_NIL; x = ix->sp[x].next) {
            const struct span *S = &ix->sp[x];
            listed(ctx, l, ix->keys[lr__index_node_at(ix, S->run, S->to - 1)],
                   ix->insts[S->inst].id);
        }
}

uint32_t
lr__index_depth_of(const lr_index *idx, uint32_t instance, const uint64_t *keys,
                   uint32_t n_keys)
{
    uint32_t s = lr__index_inst_lookup(idx, instance);
    if (s == LR_NIL)
        return 0;
    uint32_t n, r, p, probes = 0; /* not a match: not counted */
    if (lr__index_deepest(idx, keys, 0, n_keys, LR_NIL, &n, &probes) == 0)
        return 0;
    return lr__index_depth_on(idx, s, n, &r, &p);
}

uint32_t
lr__index_last_probes(const lr_index *idx)
{
    return idx->last_probes;
}

const void *
lr__index_raw(const lr_index *idx, size_t *size)
{
    *size = sizeof *idx;
    return idx;
}

/* ---- flooding ------------------------------------------------------------ */

uint64_t
lr__index_key_hash(const lr_index *ix, uint64_t key)
{
    return hkey(ix, key);
}

void
lr__index_node_table_stats(const lr_index *ix, uint32_t *count, uint32_t *size,
                           uint32_t *max_probe, uint64_t *sum_probe,
                           uint32_t *resalts)
{
    *count = ix->ntab.count;
    *size = ix->ntab.size;
    *resalts = ix->ntab.resalts;
    lr__table_probe_stats(&ix->ntab, max_probe, sum_probe);
}
