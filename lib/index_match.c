/* lr_index, the match: lr_index_match() finds, for every instance, the
 * longest prefix of a prompt it holds. A binary search (lr__index_deepest,
 * shared with learn in index.c) finds the deepest prefix anyone holds;
 * the partition search below resolves every other holder of block 0 with
 * shared probes. The index layout is pictured at the top of index.c. */
#include "index_impl.h"

void
lr_index_match_result_init_sized(lr_index_match_result *r, size_t size)
{
    lr__init_sized(r, size, NULL, 0);
}

static uint32_t
next_gen(lr_index *ix)
{
    if (++ix->mark_gen == 0) {
        memset(ix->mark, 0, (size_t)ix->max_inst * sizeof(uint32_t));
        ix->mark_gen = 1;
    }
    return ix->mark_gen;
}

static uint32_t
mark_holders(lr_index *ix, uint32_t n)
{
    uint32_t g = next_gen(ix);
    const struct node *nd = &ix->nodes[n];
    ix->mark[nd->h.inst] = g;
    ix->tref[nd->h.inst] = n;
    for (uint32_t x = nd->more; x != LR_NIL; x = ix->xh[x].next) {
        ix->mark[ix->xh[x].h.inst] = g;
        ix->tref[ix->xh[x].h.inst] = x | REF_X;
    }
    return g;
}

/* Partition search. Every candidate in cand[0..k) holds depth lo (cdepth
 * says so) and none holds depth hi + 1. Probing mid splits them into those
 * that hold mid (they go on in [mid, hi]) and the rest ([lo, mid - 1]), so
 * candidates that stop at the same depth share their probes, and the array
 * ends up grouped by depth, deepest first.
 *
 * Most probes need no holder walk. Along one prompt the holder sets only
 * shrink: holders(block 0) contains holders(mid), which contains
 * holders(deepest node). The candidates are the difference of the outer
 * two, so when the node's holder count equals nh_root every candidate holds
 * it, and when it equals nh_deep none does. Otherwise the split walks the
 * node's holders (not the candidates: deep nodes have one or two holders
 * while dozens of instances may share a system prompt), and a sparse set
 * (tref = position in ix->cand) answers "is this holder a candidate in the
 * range" in O(1). */
static void
solve(lr_index *ix, const uint64_t *keys, uint32_t lo, uint32_t hi,
      uint32_t *cand, uint32_t k, uint32_t nh_root, uint32_t nh_deep)
{
    while (k > 0 && lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        prefetch_step(ix, keys, lo, hi, mid);
        uint32_t n = node_find(ix, keys[mid - 1]);
        ix->last_probes++;
        uint32_t nh = n == LR_NIL ? 0 : ix->nodes[n].h.aux;
        if (n == LR_NIL || nh == nh_deep) {
            hi = mid - 1;
            continue;
        }
        if (nh == nh_root) {
            for (uint32_t j = 0; j < k; j++)
                ix->cdepth[cand[j]] = mid;
            lo = mid;
            continue;
        }
        uint32_t base = (uint32_t)(cand - ix->cand);
        uint32_t i = 0;
        const struct node *nd = &ix->nodes[n];
        for (uint32_t x = LR_NIL;;) {
            uint32_t s = x == LR_NIL ? nd->h.inst : ix->xh[x].h.inst;
            uint32_t pos = ix->tref[s];
            if (pos >= base + i && pos < base + k && ix->cand[pos] == s) {
                uint32_t other = cand[i];
                cand[i] = s;
                cand[pos - base] = other;
                ix->tref[other] = pos;
                ix->tref[s] = base + i;
                ix->cdepth[s] = mid;
                i++;
            }
            x = x == LR_NIL ? nd->more : ix->xh[x].next;
            if (x == LR_NIL)
                break;
        }
        solve(ix, keys, mid, hi, cand, i, nh_root, nh_deep);
        cand += i;
        k -= i;
        hi = mid - 1;
    }
}

/* After solve: one holder walk per distinct depth finds each candidate's
 * hold (for the touch). Candidates of one depth are contiguous. */
static void
resolve_refs(lr_index *ix, const uint64_t *keys, uint32_t from, uint32_t to)
{
    uint32_t i = from;
    while (i < to) {
        uint32_t d = ix->cdepth[ix->cand[i]];
        uint32_t j = i + 1;
        while (j < to && ix->cdepth[ix->cand[j]] == d)
            j++;
        uint32_t n = node_find(ix, keys[d - 1]);
        const struct node *nd = &ix->nodes[n];
        for (uint32_t x = LR_NIL;;) {
            uint32_t s = x == LR_NIL ? nd->h.inst : ix->xh[x].h.inst;
            uint32_t pos = ix->tref[s];
            if (pos >= i && pos < j && ix->cand[pos] == s)
                ix->cref[s] = x == LR_NIL ? n : (x | REF_X);
            x = x == LR_NIL ? nd->more : ix->xh[x].next;
            if (x == LR_NIL)
                break;
        }
        i = j;
    }
}

/* Every instance holding some prefix of a prompt whose deepest present
 * depth d_any has node n_any, into ix->cand[0..k) (returned), with its
 * depth in ix->cdepth and its hold in ix->cref. The holders of n_any
 * matched d_any deep; everyone else holding block 0 matched somewhere in
 * [1, d_any), and the partition search places them. */
static uint32_t
candidates(lr_index *ix, const uint64_t *keys, uint32_t d_any, uint32_t n_any)
{
    uint32_t k = 0;
    uint32_t g = mark_holders(ix, n_any);
    const struct node *nd = &ix->nodes[n_any];
    ix->cand[k++] = nd->h.inst;
    for (uint32_t x = nd->more; x != LR_NIL; x = ix->xh[x].next)
        ix->cand[k++] = ix->xh[x].h.inst;
    for (uint32_t i = 0; i < k; i++) {
        ix->cdepth[ix->cand[i]] = d_any;
        ix->cref[ix->cand[i]] = ix->tref[ix->cand[i]];
    }
    uint32_t k_deep = k;
    if (d_any > 1) {
        /* Everyone else holding block 0 matched somewhere in [1, d_any). */
        uint32_t n1 = node_find(ix, keys[0]);
        const struct node *r = &ix->nodes[n1];
        uint32_t s = r->h.inst;
        if (ix->mark[s] != g) {
            ix->cdepth[s] = 1;
            ix->cref[s] = n1;
            ix->cand[k++] = s;
        }
        for (uint32_t x = r->more; x != LR_NIL; x = ix->xh[x].next) {
            s = ix->xh[x].h.inst;
            if (ix->mark[s] != g) {
                ix->cdepth[s] = 1;
                ix->cref[s] = x | REF_X;
                ix->cand[k++] = s;
            }
        }
        for (uint32_t i = k_deep; i < k; i++)
            ix->tref[ix->cand[i]] = i; /* sparse-set positions for solve */
        solve(ix, keys, 1, d_any - 1, ix->cand + k_deep, k - k_deep, r->h.aux,
              nd->h.aux);
        resolve_refs(ix, keys, k_deep, k);
    }

    return k;
}

/* Whether instance slot a's hit goes before b's: deeper first, then the
 * lower instance id. */
static bool
hit_before(const lr_index *ix, uint32_t a, uint32_t b)
{
    if (ix->cdepth[a] != ix->cdepth[b])
        return ix->cdepth[a] > ix->cdepth[b];
    return ix->insts[a].id < ix->insts[b].id;
}

/* Order the k candidate slots in ix->cand as the hits are reported
 * (insertion sort: k is the number of instances sharing a prefix). */
static void
sort_cands(lr_index *ix, uint32_t k)
{
    uint32_t *c = ix->cand;
    for (uint32_t i = 1; i < k; i++) {
        uint32_t v = c[i];
        uint32_t j = i;
        while (j > 0 && hit_before(ix, v, c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = v;
    }
}

/* The caller's stride of lr_index_hit: 0.1's size unless it says more. */
static size_t
hit_stride(const lr_index_match_result *r)
{
    return r->struct_size >= LR_INDEX_MATCH_RESULT_SIZE_V2 && r->hit_size
               ? r->hit_size
               : LR_INDEX_HIT_SIZE_V1;
}

lr_status
lr_index_match(lr_index *idx, const lr_prompt *prompt, uint64_t now_ns,
               uint32_t flags, lr_index_match_result *result)
{
    LR_RETURN_IF(idx == NULL || result == NULL, LR_EINVAL);
    LR_RETURN_IF(result->struct_size < LR_INDEX_MATCH_RESULT_SIZE_V1,
                 LR_EVERSION);
    LR_RETURN_IF(result->hits == NULL && result->hits_capacity != 0, LR_EINVAL);
    LR_RETURN_IF(hit_stride(result) < LR_INDEX_HIT_SIZE_V1, LR_EINVAL);
    LR_RETURN_IF(flags & ~LR_MATCH_NO_TOUCH, LR_EINVAL);
    lr_index *ix = idx;
    lr_prompt p;
    const uint64_t *keys;
    uint32_t n;
    LR_TRY(lr__index_prompt_keys(ix, prompt, &p, &keys, &n));

    uint32_t tick = lr__index_tick(ix, now_ns);
    lr__index_expire_all(ix, tick);
    ix->last_probes = 0;
    result->prompt_blocks = n;
    result->deepest_tokens = 0;
    result->n_hits = 0;

    uint32_t n_any;
    uint32_t d_any = lr__index_deepest(ix, LR_NIL, keys, 0, n, LR_NIL, &n_any);
    if (d_any == 0)
        return LR_OK;

    uint32_t k = candidates(ix, keys, d_any, n_any);
    result->n_hits = k;
    result->deepest_tokens = (uint64_t)d_any * ix->B;
    if (k > result->hits_capacity)
        return LR_EBUFSIZE;
    sort_cands(ix, k);
    size_t stride = hit_stride(result);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = ix->cand[i];
        lr_index_hit *h = (lr_index_hit *)((char *)result->hits + i * stride);
        h->instance = ix->insts[s].id;
        h->tokens = ix->cdepth[s] * ix->B;
    }
    if (!(flags & LR_MATCH_NO_TOUCH))
        for (uint32_t i = 0; i < k; i++)
            lr__index_touch(ix, ix->cref[ix->cand[i]], tick);
    return LR_OK;
}
