/* lr_index, the match: lr_index_match() finds, for every instance, the
 * longest prefix of a prompt it holds. A binary search over the prompt's
 * keys (lr__index_deepest, shared with learn in index.c) finds the
 * deepest node anyone holds; every other answer is on the path from that
 * node up to the root. The walk up visits each run of the path once and
 * reads its holder array, where each holder says how much of the run it
 * holds: the first run (from the bottom) that names an instance gives its
 * depth. A prompt that shares a system prompt with 55 instances costs one
 * holder array of 55 entries, not 55 probes. The index layout is pictured
 * at the top of index.c. */
#include "index/index_impl.h"

LR__INIT_SIZED_ZERO(lr_index_match_result_init_sized, lr_index_match_result)

static uint32_t
next_gen(lr_index *ix)
{
    if (++ix->mark_gen == 0) {
        memset(ix->mark, 0, (size_t)ix->max_inst * sizeof(uint32_t));
        ix->mark_gen = 1;
    }
    return ix->mark_gen;
}

/* Every instance holding some prefix of the path from the root to node n
 * into ix->cand[0..k) (returned), with its depth in ix->cdepth, its
 * deepest span in the run of its answer in ix->cspan and the offset there
 * in ix->cpos. */
static uint32_t
candidates(lr_index *ix, uint32_t n)
{
    uint32_t k = 0;
    uint32_t g = next_gen(ix);
    while (n != LR_NIL) {
        uint32_t r = node_run(ix, n), o = node_off(ix, n);
        const struct run *R = &ix->runs[r];
        const struct hent *h = run_hents(ix, R);
        for (uint32_t i = 0; i < R->nh; i++) {
            uint32_t s = h[i].inst;
            if (ix->mark[s] == g)
                continue;
            ix->mark[s] = g;
            uint32_t hs = h[i].to < o + 1 ? h[i].to : o + 1;
            ix->cand[k++] = s;
            ix->cdepth[s] = R->top + hs;
            ix->cspan[s] = h[i].span;
            ix->cpos[s] = hs - 1;
        }
        n = R->hang;
    }
    return k;
}

/* Order the k candidate slots in ix->cand as the hits are reported:
 * deeper first, then the lower instance id. The walk met them nearly so:
 * runs deepest first, each run's holders by id (only a holder of part of
 * a run is out of place), so an insertion sort of one 64-bit key per hit
 * does about k steps. */
static void
sort_cands(lr_index *ix, uint32_t k)
{
    struct lr__hitkey *a = ix->hk;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = ix->cand[i];
        struct lr__hitkey v = { ((uint64_t)(UINT32_MAX - ix->cdepth[s]) << 32) |
                                    ix->insts[s].id,
                                s, 0 };
        uint32_t j = i;
        while (j > 0 && a[j - 1].key > v.key) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
    for (uint32_t i = 0; i < k; i++)
        ix->cand[i] = a[i].slot;
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
    LR_TRY(lr__index_judge(ix, now_ns));

    uint32_t tick = lr__index_tick(ix, now_ns);
    lr__index_expire_all(ix, tick);
    ix->last_probes = 0;
    result->prompt_blocks = n;
    result->deepest_tokens = 0;
    result->n_hits = 0;

    uint32_t n_any;
    uint32_t d_any = lr__index_deepest(ix, keys, 0, n, LR_NIL, &n_any);
    if (d_any == 0)
        return LR_OK;

    uint32_t k = candidates(ix, n_any);
    result->n_hits = k;
    result->deepest_tokens = (uint64_t)d_any * ix->B;
    if (k > result->hits_capacity)
        return LR_EBUFSIZE;
    /* a touch below a span's bottom cuts the span there: one span each */
    if (!(flags & LR_MATCH_NO_TOUCH))
        LR_TRY(lr__index_reserve(ix, 0, 0, k));
    sort_cands(ix, k);
    size_t stride = hit_stride(result);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = ix->cand[i];
        lr_index_hit *h = (lr_index_hit *)((char *)result->hits + i * stride);
        h->instance = ix->insts[s].id;
        h->tokens = ix->cdepth[s] * ix->B;
    }
    if (!(flags & LR_MATCH_NO_TOUCH))
        for (uint32_t i = 0; i < k; i++) {
            uint32_t s = ix->cand[i];
            uint32_t x = ix->cspan[s], pos = ix->cpos[s];
            while (ix->sp[x].from > pos)
                x = ix->sp[x].up;
            lr__index_touch(ix, lr__index_cut(ix, x, pos), tick);
        }
    return LR_OK;
}
