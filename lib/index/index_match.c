/* lr_index, the match: for every instance, the longest prefix of a prompt
 * it holds. The search (index_find.c) finds the deepest node anyone holds
 * along the prompt; every other answer is on the path from that node up
 * to the root. The walk up visits each run of the path once and reads its
 * holder array, where each holder says how much of the run it holds: the
 * first run (from the bottom) that names an instance gives its depth. A
 * prompt that shares a system prompt with 55 instances costs one holder
 * array of 55 entries, not 55 probes.
 *
 * Worked example (the layout's, index_store.c): match(A B C D E Q) finds
 * E at depth 5 in run 0; run 0's holders are inst 1 (to 6) and inst 2 (to
 * 2): inst 1 holds 5 blocks here, inst 2 holds 2; run 0 hangs from the
 * root, so the walk ends. Hits: inst 1 80 tokens, inst 2 32.
 *
 * A large fleet's route reads only the deepest holders (lr__index_peek_cut:
 * the walk stops once it has enough, or before a run held by many), then
 * asks after the few other instances it weighs one by one
 * (lr__index_depth_below: a binary search of each run's holders above
 * the cut), so that a system prompt the whole fleet holds costs a few
 * probes, not a holder array of thousands.
 *
 * Two entry points share the search, the walk and the sort:
 * lr_index_match() expires first, works in the index's own scratch and
 * touches the hits; lr__index_peek() reads the index only, writing its
 * caller's scratch, so that several threads may peek at one index while
 * no one writes it (the router's route() under a read lock). */
#include "index/index.h"
#include "index/index_evict.h"
#include "index/index_find.h"
#include "index/index_keys.h"
#include "index/index_store.h"

LR__INIT_SIZED_ZERO(lr_index_match_result_init_sized, lr_index_match_result)

static uint32_t
next_gen(struct lr__match_scratch *ms)
{
    if (++ms->mark_gen == 0) {
        memset(ms->mark, 0, (size_t)ms->max_inst * sizeof(uint32_t));
        ms->mark_gen = 1;
    }
    return ms->mark_gen;
}

/* Whether at most `few` of run R's holders (h) reach offset o: a read of
 * their holds alone, stopping at the first past `few`. */
static bool
deep_few(const struct run *R, const struct hent *h, uint32_t o, uint32_t few)
{
    uint32_t deep = 0;
    for (uint32_t i = 0; i < R->nh && deep <= few; i++)
        deep += h[i].to >= o + 1;
    return deep <= few;
}

/* Every instance holding some prefix of the path from the root to node n
 * into ms->cand[0..k) (returned), with its depth in ms->cdepth, its
 * deepest span in the run of its answer in ms->cspan and the offset there
 * in ms->cpos. Reads the index only. */
static uint32_t
candidates(const lr_index *ix, struct lr__match_scratch *ms, uint32_t n,
           struct lr__peek_cut *cut)
{
    uint32_t k = 0;
    uint32_t g = next_gen(ms);
    uint32_t *mark = ms->mark, *cand = ms->cand, *cdepth = ms->cdepth;
    uint32_t *cspan = ms->cspan, *cpos = ms->cpos;
    if (cut != NULL)
        cut->node = LR_NIL;
    while (n != LR_NIL) {
        uint32_t r = node_run(ix, n), o = node_off(ix, n);
        const struct run *R = &ix->runs[r];
        const struct hent *h = run_hents(ix, R);
        if (cut != NULL && (k >= cut->enough || R->nh > cut->defer)) {
            /* the deepest run, held by many: those of its holders that
             * reach the node hold the longest prefix, all of it when few
             * do (a conversation that extends a prompt many hold) */
            if (k == 0 && cut->enough > 0 && deep_few(R, h, o, cut->defer))
                for (uint32_t i = 0; i < R->nh; i++)
                    if (h[i].to >= o + 1 && mark[h[i].inst] != g) {
                        uint32_t s = h[i].inst;
                        mark[s] = g;
                        cand[k++] = s;
                        cdepth[s] = R->top + o + 1;
                        cspan[s] = h[i].span;
                        cpos[s] = o;
                    }
            cut->node = n; /* everyone left holds less than this */
            break;
        }
        for (uint32_t i = 0; i < R->nh; i++) {
            uint32_t s = h[i].inst;
            if (mark[s] == g)
                continue;
            mark[s] = g;
            uint32_t hs = h[i].to < o + 1 ? h[i].to : o + 1;
            cand[k++] = s;
            cdepth[s] = R->top + hs;
            cspan[s] = h[i].span;
            cpos[s] = hs - 1;
        }
        n = R->hang;
    }
    return k;
}

/* Order the k candidate slots in ms->cand as the hits are reported:
 * deeper first, then the lower instance id. The walk met them nearly so:
 * runs deepest first, each run's holders by id (only a holder of part of
 * a run is out of place), so an insertion sort of one 64-bit key per hit
 * does about k steps. */
static void
sort_cands(const lr_index *ix, struct lr__match_scratch *ms, uint32_t k)
{
    struct lr__hitkey *a = ms->hk;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = ms->cand[i];
        struct lr__hitkey v = { ((uint64_t)(UINT32_MAX - ms->cdepth[s]) << 32) |
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
        ms->cand[i] = a[i].slot;
}

/* The caller's stride of lr_index_hit: 0.1's size unless it says more. */
static size_t
hit_stride(const lr_index_match_result *r)
{
    return r->struct_size >= LR_INDEX_MATCH_RESULT_SIZE_V2 && r->hit_size
               ? r->hit_size
               : LR_INDEX_HIT_SIZE_V1;
}

/* The checks of a result buffer both entry points make first. */
static lr_status
result_check(const lr_index_match_result *result)
{
    LR_RETURN_IF(result->struct_size < LR_INDEX_MATCH_RESULT_SIZE_V1,
                 LR_EVERSION);
    LR_RETURN_IF(result->hits == NULL && result->hits_capacity != 0, LR_EINVAL);
    LR_RETURN_IF(hit_stride(result) < LR_INDEX_HIT_SIZE_V1, LR_EINVAL);
    return LR_OK;
}

/* The search and the walk up for keys[0, n), in scratch ms, the probes
 * added to *probes: fills the result's counts and, unless LR_EBUFSIZE,
 * leaves the k hits (*k) sorted in ms->cand. k is 0 when nobody holds the
 * first block. Reads the index only. */
static inline lr_status
find_hits(const lr_index *ix, const uint64_t *keys, uint32_t n,
          struct lr__match_scratch *ms, uint32_t *probes,
          struct lr__peek_cut *cut, lr_index_match_result *result, uint32_t *k)
{
    result->prompt_blocks = n;
    result->deepest_tokens = 0;
    result->n_hits = 0;
    *k = 0;
    uint32_t n_any;
    uint32_t d_any = lr__index_deepest(ix, keys, 0, n, LR_NIL, &n_any, probes);
    if (d_any == 0) {
        if (cut != NULL)
            cut->node = LR_NIL;
        return LR_OK;
    }
    /* a node exists only while someone holds it: k >= 1 unless cut */
    *k = candidates(ix, ms, n_any, cut);
    result->n_hits = *k;
    result->deepest_tokens = (uint64_t)d_any * ix->B;
    if (*k > result->hits_capacity)
        return LR_EBUFSIZE;
    sort_cands(ix, ms, *k);
    return LR_OK;
}

static inline void
write_hits(const lr_index *ix, const struct lr__match_scratch *ms, uint32_t k,
           lr_index_match_result *result)
{
    size_t stride = hit_stride(result);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = ms->cand[i];
        lr_index_hit *h = (lr_index_hit *)((char *)result->hits + i * stride);
        h->instance = ix->insts[s].id;
        h->tokens = ms->cdepth[s] * ix->B;
    }
}

lr_status
lr_index_match(lr_index *idx, const lr_prompt *prompt, uint64_t now_ns,
               uint32_t flags, lr_index_match_result *result)
{
    LR_RETURN_IF(idx == NULL || result == NULL, LR_EINVAL);
    LR_TRY(result_check(result));
    const uint32_t tiers = LR_MATCH_TIER_CPU | LR_MATCH_TIER_DISK;
    LR_RETURN_IF(flags & ~(LR_MATCH_NO_TOUCH | tiers), LR_EINVAL);
    LR_RETURN_IF((flags & tiers) == tiers, LR_EINVAL);
    lr_index *ix = idx;
    lr_prompt p;
    const uint64_t *keys;
    uint32_t n;
    LR_TRY(lr__index_prompt_keys(ix, prompt, &p, &keys, &n));
    LR_TRY(lr__index_judge(ix, now_ns));
    if (flags & tiers) {
        /* a lower tier's routes: its own index, judged by this one */
        lr_index *lo = ix->lower[(flags & LR_MATCH_TIER_CPU) ? 0 : 1];
        if (lo != NULL)
            return lr_index_match(lo, prompt, now_ns, flags & ~tiers, result);
        result->prompt_blocks = n;
        result->deepest_tokens = 0;
        result->n_hits = 0;
        return LR_OK;
    }

    uint32_t tick = lr__index_tick(ix, now_ns);
    lr__index_expire_all(ix, tick);
    ix->last_probes = 0;
    struct lr__match_scratch *ms = &ix->ms;
    uint32_t k;
    LR_TRY(find_hits(ix, keys, n, ms, &ix->last_probes, NULL, result, &k));
    if (k == 0)
        return LR_OK;
    /* a touch below a span's bottom cuts the span there: one span each */
    if (!(flags & LR_MATCH_NO_TOUCH))
        LR_TRY(lr__index_reserve(ix, 0, 0, k));
    write_hits(ix, ms, k, result);
    if (!(flags & LR_MATCH_NO_TOUCH))
        for (uint32_t i = 0; i < k; i++) {
            uint32_t s = ms->cand[i];
            uint32_t x = ms->cspan[s], pos = ms->cpos[s];
            while (ix->sp[x].from > pos)
                x = ix->sp[x].up;
            lr__index_touch(ix, lr__index_cut(ix, x, pos), tick);
        }
    return LR_OK;
}

/* ------------------------------------------------------------------------ */
/* concurrent readers                                                        */
/* ------------------------------------------------------------------------ */

lr_status
lr__index_peek(const lr_index *idx, const uint64_t *keys, size_t n_keys,
               uint64_t now_ns, struct lr__match_scratch *scratch,
               lr_index_match_result *result)
{
    return lr__index_peek_cut(idx, keys, n_keys, now_ns, scratch, NULL, result);
}

lr_status
lr__index_peek_cut(const lr_index *idx, const uint64_t *keys, size_t n_keys,
                   uint64_t now_ns, struct lr__match_scratch *scratch,
                   struct lr__peek_cut *cut, lr_index_match_result *result)
{
    LR_RETURN_IF(idx == NULL || scratch == NULL || result == NULL, LR_EINVAL);
    LR_TRY(result_check(result));
    LR_RETURN_IF(keys == NULL && n_keys != 0, LR_EINVAL);
    LR_RETURN_IF(n_keys > LR_INDEX_MAX_TOKENS, LR_EINVAL);
    LR_RETURN_IF(scratch->max_inst < idx->max_inst, LR_EINVAL);
    /* judged as a query is: never counts towards a clock jump */
    struct lr__clock clock = idx->clock;
    LR_TRY(lr__clock_judge(&clock, now_ns, false));
    LR_RETURN_IF(lr__index_expiry_due(idx, now_ns), LR_ESTATE);
    uint32_t k, probes = 0;
    lr_status st = find_hits(idx, keys, (uint32_t)n_keys, scratch, &probes, cut,
                             result, &k);
    if (st == LR_OK)
        write_hits(idx, scratch, k, result);
    return st;
}

uint32_t
lr__index_depth_below(const lr_index *idx, struct lr__match_scratch *ms,
                      uint32_t n, uint32_t id)
{
    while (n != LR_NIL) {
        const struct run *R = &idx->runs[node_run(idx, n)];
        const struct hent *h = hent_of_id(idx, R, id);
        if (h != NULL) {
            uint32_t s = h->inst, o = node_off(idx, n);
            if (ms->mark[s] == ms->mark_gen)
                return 0; /* reported, or asked before */
            ms->mark[s] = ms->mark_gen;
            return R->top + (h->to < o + 1 ? h->to : o + 1);
        }
        n = R->hang;
    }
    return 0;
}

uint32_t
lr__index_sample_at(const lr_index *idx, struct lr__match_scratch *ms,
                    uint32_t node, uint64_t seed, uint32_t cap,
                    lr_index_hit *out)
{
    uint32_t got = 0;
    for (uint32_t n = node; n != LR_NIL && got < cap;) {
        uint32_t o = node_off(idx, n);
        const struct run *R = &idx->runs[node_run(idx, n)];
        const struct hent *h = run_hents(idx, R);
        /* a run of more than are left to take: that many of it, spread
         * from a drawn start, and the walk ends there */
        uint32_t left = cap - got, k = R->nh <= left ? R->nh : left;
        uint64_t at = R->nh > left ? seed % R->nh : 0;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t x = (uint32_t)((at + (uint64_t)i * R->nh / k) % R->nh);
            uint32_t s = h[x].inst;
            if (ms->mark[s] == ms->mark_gen)
                continue; /* reported, or asked */
            ms->mark[s] = ms->mark_gen;
            uint32_t hs = h[x].to < o + 1 ? h[x].to : o + 1;
            out[got].instance = h[x].id;
            out[got++].tokens = (R->top + hs) * idx->B;
        }
        if (R->nh > left)
            break;
        n = R->hang;
    }
    return got;
}

uint32_t
lr__index_deepest_node(const lr_index *idx, const uint64_t *keys, size_t n_keys)
{
    uint32_t node = LR_NIL, probes = 0;
    if (n_keys == 0 || lr__index_deepest(idx, keys, 0, (uint32_t)n_keys, LR_NIL,
                                         &node, &probes) == 0)
        return LR_NIL;
    return node;
}

lr_status
lr__index_scratch_new(const lr_index *idx, struct lr__mem *mem,
                      struct lr__match_scratch **out)
{
    LR_RETURN_IF(idx == NULL || mem == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    struct lr__match_scratch *ms = lr__alloc(mem, sizeof *ms);
    LR_RETURN_IF(ms == NULL, LR_ENOMEM);
    if (lr__index_ms_init(mem, ms, idx->max_inst) != LR_OK) {
        lr__free(mem, ms, sizeof *ms);
        return LR_ENOMEM;
    }
    *out = ms;
    return LR_OK;
}

void
lr__index_scratch_free(struct lr__mem *mem, struct lr__match_scratch *scratch)
{
    if (scratch == NULL)
        return;
    lr__index_ms_fini(mem, scratch);
    lr__free(mem, scratch, sizeof *scratch);
}
