/* Tiered KV caches: blocks an engine offloaded to host memory or disk
 * (lr_kv_stored.tier, vLLM's medium "CPU"), kept per tier in the index,
 * read by the router's rows (lr_candidate.cpu_tokens, disk_tokens) and
 * weighed by dynamo and adaptive (LR_PARAM_TIER_*_WEIGHT). */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "index/index.h"
#include "libroute/lr_vllm.h"
#include "mpw.h"
#include "router-helpers.h"

#define INST 7u

static lr_index *
mk_index(const lr_allocator *a)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.seed = OPT_SEED;
    o.allocator = a;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    return ix;
}

/* Tokens INST holds for t[0, n) on a tier (an LR_MATCH_TIER_* flag, or 0
 * for the GPU). */
static uint32_t
on_tier(lr_index *ix, const uint32_t *t, size_t n, uint32_t inst,
        uint32_t tier_flag)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = n;
    lr_index_hit h[8];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 8;
    assert_st(lr_index_match(ix, &p, T0, LR_MATCH_NO_TOUCH | tier_flag, &r),
              LR_OK);
    for (size_t i = 0; i < r.n_hits; i++)
        if (h[i].instance == inst)
            return h[i].tokens;
    return 0;
}

/* A GPU store of n blocks of t (hashes h), chained on parent when
 * has_parent. */
static lr_status
gpu_store(lr_index *ix, uint32_t inst, const uint64_t *h, uint32_t n,
          const uint32_t *t, int has_parent, uint64_t parent)
{
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    e.block_hashes = h;
    e.n_blocks = n;
    e.block_size = BT;
    e.token_ids = t;
    e.n_tokens = (size_t)n * BT;
    e.has_parent = has_parent;
    e.parent_hash = parent;
    return lr_index_kv_stored(ix, inst, &e, T0);
}

/* vLLM's offloading connector's store: hashes only, on `tier`. */
static lr_status
tier_store(lr_index *ix, uint32_t inst, int32_t tier, const uint64_t *h,
           uint32_t n)
{
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    e.block_hashes = h;
    e.n_blocks = n;
    e.block_size = 0;
    e.tier = tier;
    return lr_index_kv_stored(ix, inst, &e, T0);
}

static const uint64_t H[4] = { 11, 12, 13, 14 };

/* A CPU store after the GPU's resolves through its engine hashes; a GPU
 * removal leaves the CPU copy; a CPU removal takes the block and deeper
 * ones from the CPU tier only. */
static void
cpu_store_resolves(void **state)
{
    (void)state;
    uint32_t t[64];
    tu_tokens(t, 64, 1);
    lr_index *ix = mk_index(NULL);
    assert_null(lr__index_tier(ix, LR_TIER_CPU));
    assert_st(gpu_store(ix, INST, H, 4, t, 0, 0), LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 0);
    /* the last two blocks offloaded: the tier holds their chain */
    assert_st(tier_store(ix, INST, LR_TIER_CPU, H + 2, 2), LR_OK);
    assert_non_null(lr__index_tier(ix, LR_TIER_CPU));
    assert_int_equal(on_tier(ix, t, 64, INST, 0), 64);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 64);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_DISK), 0);
    /* the GPU evicts block 2: its copy on the CPU stays */
    size_t res = 0;
    assert_st(lr_index_kv_removed(ix, INST, H + 1, 1, &res), LR_OK);
    assert_int_equal(res, 1);
    assert_int_equal(on_tier(ix, t, 64, INST, 0), 16);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 64);
    /* a CPU store of a block the GPU no longer has: the tier's own map */
    assert_st(tier_store(ix, INST, LR_TIER_CPU, H + 3, 1), LR_OK);
    /* the CPU drops block 4, then block 3 */
    assert_st(lr_index_kv_removed_tier(ix, INST, LR_TIER_CPU, H + 3, 1, &res),
              LR_OK);
    assert_int_equal(res, 1);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 48);
    assert_st(lr_index_kv_removed_tier(ix, INST, LR_TIER_CPU, H + 2, 1, &res),
              LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 0);
    assert_int_equal(on_tier(ix, t, 64, INST, 0), 16);
    assert_st(lr__index_verify(ix), LR_OK);
    /* a disk store (hash 11 on the GPU still) */
    assert_st(tier_store(ix, INST, LR_TIER_DISK, H, 1), LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_DISK), 16);
    /* cleared: every tier */
    assert_st(lr_index_kv_cleared(ix, INST), LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_DISK), 0);
    assert_int_equal(on_tier(ix, t, 64, INST, 0), 0);
    assert_st(lr__index_verify(ix), LR_OK);
    lr_index_destroy(ix);
}

/* Hashes nobody stored: LR_ENOENT and nothing changes (no tier made);
 * some known: those apply. A store with tokens (LMCache's shape) chains
 * on a GPU parent. Removing the instance drops its lower tiers too. */
static void
unresolved_and_tokens(void **state)
{
    (void)state;
    uint32_t t[64];
    tu_tokens(t, 64, 2);
    lr_index *ix = mk_index(NULL);
    assert_st(gpu_store(ix, INST, H, 2, t, 0, 0), LR_OK);
    uint64_t d0 = lr__index_digest(ix);
    static const uint64_t unknown[2] = { 99, 98 };
    assert_st(tier_store(ix, INST, LR_TIER_CPU, unknown, 2), LR_ENOENT);
    assert_st(tier_store(ix, 8, LR_TIER_CPU, H, 2), LR_ENOENT);
    assert_true(lr__index_digest(ix) == d0);
    assert_null(lr__index_tier(ix, LR_TIER_CPU));
    static const uint64_t mixed[3] = { 99, 11, 12 };
    assert_st(tier_store(ix, INST, LR_TIER_CPU, mixed, 3), LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 32);
    /* tokens 32..63 on the CPU, parent hash 12 (on the GPU) */
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    static const uint64_t h2[2] = { 21, 22 };
    e.block_hashes = h2;
    e.n_blocks = 2;
    e.block_size = BT;
    e.token_ids = t + 32;
    e.n_tokens = 32;
    e.has_parent = 1;
    e.parent_hash = 12;
    e.tier = LR_TIER_DISK;
    assert_st(lr_index_kv_stored(ix, INST, &e, T0), LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_DISK), 64);
    assert_int_equal(on_tier(ix, t, 64, INST, 0), 32);
    e.parent_hash = 77; /* unknown parent */
    assert_st(lr_index_kv_stored(ix, INST, &e, T0), LR_ENOENT);
    assert_st(lr__index_verify(ix), LR_OK);
    assert_st(lr_index_remove_instance(ix, INST), LR_OK);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_DISK), 0);
    assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 0);
    assert_st(lr_index_remove_instance(ix, INST), LR_ENOENT);
    assert_st(lr__index_verify(ix), LR_OK);
    lr_index_destroy(ix);
}

static void
bad_input(void **state)
{
    (void)state;
    uint32_t t[32];
    tu_tokens(t, 32, 3);
    lr_index *ix = mk_index(NULL);
    assert_st(gpu_store(ix, INST, H, 2, t, 0, 0), LR_OK);
    uint64_t d0 = lr__index_digest(ix);
    assert_st(tier_store(ix, INST, 3, H, 2), LR_EINVAL);
    assert_st(tier_store(ix, INST, -1, H, 2), LR_EINVAL);
    assert_st(tier_store(ix, LR_INSTANCE_NONE, LR_TIER_CPU, H, 2), LR_EINVAL);
    assert_st(tier_store(ix, INST, LR_TIER_CPU, NULL, 2), LR_EINVAL);
    size_t res;
    assert_st(lr_index_kv_removed_tier(ix, INST, 3, H, 1, &res), LR_EINVAL);
    assert_st(lr_index_kv_removed_tier(ix, INST, LR_TIER_CPU, NULL, 1, &res),
              LR_EINVAL);
    assert_st(lr_index_kv_removed_tier(ix, 9, LR_TIER_CPU, H, 1, &res),
              LR_ENOENT);
    /* nothing on the tier yet: nothing resolves */
    res = 5;
    assert_st(lr_index_kv_removed_tier(ix, INST, LR_TIER_CPU, H, 1, &res),
              LR_OK);
    assert_int_equal(res, 0);
    /* both tiers at once */
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = 32;
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    assert_st(lr_index_match(ix, &p, T0,
                             LR_MATCH_TIER_CPU | LR_MATCH_TIER_DISK, &r),
              LR_EINVAL);
    /* a 0.2 caller's struct has no tier: the GPU */
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    e.struct_size = LR_KV_STORED_SIZE_V1;
    e.block_hashes = H;
    e.n_blocks = 2;
    e.block_size = BT;
    e.token_ids = t;
    e.n_tokens = 32;
    e.tier = LR_TIER_CPU; /* past its size: not read */
    assert_st(lr_index_kv_stored(ix, INST, &e, T0), LR_OK);
    assert_null(lr__index_tier(ix, LR_TIER_CPU));
    (void)d0;
    /* a lower store with tokens of a block size the index cannot place */
    e.struct_size = sizeof e;
    e.block_size = 8;
    e.n_tokens = 16;
    e.n_blocks = 2;
    assert_st(lr_index_kv_stored(ix, INST, &e, T0), LR_ENOTSUP);
    assert_null(lr__index_tier(ix, LR_TIER_CPU));
    lr_index_destroy(ix);
}

/* A batch as vLLM's scheduler sends it: the GPU store, then the
 * offloading connector's store (medium "CPU", no token ids, block size 0
 * or 16), array and map events; later the connector's CPU removal and a
 * GPU removal; an unknown medium is skipped. */
static void
vllm_batches(void **state)
{
    (void)state;
    uint32_t t[64];
    tu_tokens(t, 64, 4);
    for (int map = 0; map < 2; map++)
        for (uint32_t bs = 0; bs <= BT; bs += BT) {
            lr_index *ix = mk_index(NULL);
            struct mpw *w = calloc(1, sizeof *w);
            struct mpw_stored g = mpw_stored_of(H, 4, t, BT);
            g.medium = "GPU";
            struct mpw_stored c = mpw_stored_of(H + 1, 3, NULL, bs);
            c.medium = "CPU";
            c.no_tokens = true;
            struct mpw_stored x = mpw_stored_of(H, 1, NULL, bs);
            x.medium = "NVME";
            x.no_tokens = true;
            mpw_batch(w, 3, map);
            if (map) {
                mpw_stored_map(w, &g, MPW_HASH_BYTES);
                mpw_stored_map(w, &c, MPW_HASH_BYTES);
                mpw_stored_map(w, &x, MPW_HASH_BYTES);
            } else {
                mpw_stored_array(w, &g, MPW_HASH_UINT);
                mpw_stored_array(w, &c, MPW_HASH_UINT);
                mpw_stored_array(w, &x, MPW_HASH_UINT);
            }
            mpw_batch_end(w, map);
            lr_vllm_batch_info info;
            lr_vllm_batch_info_init(&info);
            assert_st(lr_index_vllm_batch(ix, INST, w->buf, w->n, T0, &info),
                      LR_OK);
            assert_int_equal(info.stored, 2);
            assert_int_equal(info.skipped, 1);
            assert_int_equal(info.unplaced + info.invalid, 0);
            assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 64);
            /* the GPU evicts from block 2 on, the CPU block 4 */
            w->n = 0;
            mpw_batch(w, 2, map);
            mpw_removed_on(w, H + 1, 1, map,
                           map ? MPW_HASH_BYTES : MPW_HASH_UINT, "GPU");
            mpw_removed_on(w, H + 3, 1, map,
                           map ? MPW_HASH_BYTES : MPW_HASH_UINT, "CPU");
            mpw_batch_end(w, map);
            lr_vllm_batch_info_init(&info);
            assert_st(lr_index_vllm_batch(ix, INST, w->buf, w->n, T0, &info),
                      LR_OK);
            assert_int_equal(info.removed, 2);
            assert_int_equal(on_tier(ix, t, 64, INST, 0), 16);
            assert_int_equal(on_tier(ix, t, 64, INST, LR_MATCH_TIER_CPU), 48);
            assert_st(lr__index_verify(ix), LR_OK);
            free(w);
            lr_index_destroy(ix);
        }
}

/* ---- the router ------------------------------------------------------------- */

static lr_router *
mk_router(int32_t policy, uint32_t *a, uint32_t *b)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.seed = OPT_SEED;
    o.policy = policy;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    *a = add_instance(r, "10.0", 1, 0, 0);
    *b = add_instance(r, "10.0", 2, 0, 0);
    return r;
}

static lr_status
r_store(lr_router *r, uint32_t id, int32_t tier, const uint64_t *h,
        uint32_t n, const uint32_t *t)
{
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    e.block_hashes = h;
    e.n_blocks = n;
    e.tier = tier;
    if (t != NULL) {
        e.block_size = BT;
        e.token_ids = t;
        e.n_tokens = (size_t)n * BT;
    }
    return lr_router_kv_stored(r, id, &e, T0);
}

static const lr_candidate *
row_of(const lr_candidate *rows, size_t n, uint32_t id)
{
    for (size_t k = 0; k < n; k++)
        if (rows[k].instance == id)
            return &rows[k];
    fail_msg("no row for %u", id);
    return NULL;
}

/* 256 tokens, 16 blocks: instance a holds the first 128 on its GPU;
 * instance b held all 256, offloaded them to the CPU, and its GPU then
 * evicted them all. Rows: a 128 + 0, b 0 + 256. dynamo with the CPU
 * weight 0.8: a has 8 blocks to compute, b 16 - 0.8 x 16 = 3.2: b; with
 * 0.25: b 12: a. adaptive the same way. With the weight 0 both policies
 * choose as they did before tiers (a). */
static void
router_weighs_tiers(void **state)
{
    (void)state;
    uint32_t t[256];
    tu_tokens(t, 256, 5);
    uint64_t h[16];
    for (uint32_t i = 0; i < 16; i++)
        h[i] = 100 + i;
    static const int32_t pol[2] = { LR_POLICY_DYNAMO, LR_POLICY_ADAPTIVE };
    for (int p = 0; p < 2; p++) {
        uint32_t a, b;
        lr_router *r = mk_router(pol[p], &a, &b);
        assert_st(r_store(r, a, LR_TIER_GPU, h, 8, t), LR_OK);
        assert_st(r_store(r, b, LR_TIER_GPU, h, 16, t), LR_OK);
        assert_st(r_store(r, b, LR_TIER_CPU, h, 16, NULL), LR_OK);
        size_t res;
        assert_st(lr_router_kv_removed_tier(r, b, LR_TIER_GPU, h, 1, &res),
                  LR_OK);
        assert_int_equal(res, 1);
        assert_st(lr_router_kv_removed_tier(r, 99, LR_TIER_CPU, h, 1, &res),
                  LR_ENOENT);
        lr_candidate rows[4];
        size_t n = candidates_of(r, t, 256, T0, rows, 4);
        assert_int_equal(n, 2);
        assert_int_equal(row_of(rows, n, a)->cached_tokens, 128);
        assert_int_equal(row_of(rows, n, a)->cpu_tokens, 0);
        assert_int_equal(row_of(rows, n, b)->cached_tokens, 0);
        assert_int_equal(row_of(rows, n, b)->cpu_tokens, 256);
        assert_int_equal(row_of(rows, n, b)->disk_tokens, 0);
        lr_decision d;
        assert_st(route_one(r, 1, t, 256, LR_ROUTE_DRY_RUN, T0, &d), LR_OK);
        if (d.instance != b)
            fail_msg("%s chose %u, want %u (CPU weight 0.8)",
                     lr_policy_name(pol[p]), d.instance, b);
        assert_st(lr_router_set_param(r, LR_PARAM_TIER_CPU_WEIGHT, 0.25),
                  LR_OK);
        assert_st(route_one(r, 2, t, 256, LR_ROUTE_DRY_RUN, T0, &d), LR_OK);
        if (d.instance != a)
            fail_msg("%s chose %u, want %u (CPU weight 0.25)",
                     lr_policy_name(pol[p]), d.instance, a);
        assert_st(lr_router_set_param(r, LR_PARAM_TIER_CPU_WEIGHT, 1.5),
                  LR_ERANGE);
        /* a block on both tiers counts on the GPU: b gets its GPU copy
         * of the first 64 tokens back */
        assert_st(r_store(r, b, LR_TIER_GPU, h, 4, t), LR_OK);
        n = candidates_of(r, t, 256, T0, rows, 4);
        assert_int_equal(row_of(rows, n, b)->cached_tokens, 64);
        assert_int_equal(row_of(rows, n, b)->cpu_tokens, 192);
        /* the CPU tier spills its last block to disk (a hash known on
         * the CPU tier only): no deeper than the CPU's, it adds nothing */
        assert_st(r_store(r, b, LR_TIER_DISK, h + 15, 1, NULL), LR_OK);
        n = candidates_of(r, t, 256, T0, rows, 4);
        assert_int_equal(row_of(rows, n, b)->disk_tokens, 0);
        assert_st(r_store(r, a, LR_TIER_DISK, h + 11, 1, NULL), LR_ENOENT);
        assert_router_ok(r);
        /* the tier's routes expire with the GPU's (the clock takes a
         * jump at its second call) */
        uint64_t later = T0 + 7200 * SEC;
        (void)lr_router_expire(r, later);
        assert_st(lr_router_expire(r, later), LR_OK);
        n = candidates_of(r, t, 256, later, rows, 4);
        assert_int_equal(row_of(rows, n, b)->cpu_tokens, 0);
        lr_router_destroy(r);
    }
}

/* lr_policy_decide() checks the columns: a row's tiers past the prompt
 * are LR_EINVAL; dynamo's scores follow the weights. */
static void
rows_check(void **state)
{
    (void)state;
    lr_candidate rows[2];
    memset(rows, 0, sizeof rows);
    for (int k = 0; k < 2; k++) {
        rows[k].instance = (uint32_t)k;
        rows[k].prefill_rate = 8000;
        rows[k].cached_age_s = -1;
        rows[k].prefix_caching = 1;
        rows[k].adapter_free = UINT32_MAX;
    }
    rows[0].cached_tokens = 128;
    rows[1].cpu_tokens = 256;
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = 256;
    double sc[2];
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_policy_decide(LR_POLICY_DYNAMO, &in, rows, 2, sizeof rows[0],
                               sc, &d),
              LR_OK);
    assert_int_equal(d.instance, 1);
    assert_true(sc[1] < sc[0]);
    rows[1].disk_tokens = 1;
    assert_st(lr_policy_decide(LR_POLICY_DYNAMO, &in, rows, 2, sizeof rows[0],
                               sc, &d),
              LR_EINVAL);
    /* the weights as parameters: the CPU worth nothing */
    rows[1].disk_tokens = 0;
    double params[LR_PARAM_TIER_DISK_WEIGHT + 1];
    for (int32_t k = 0; k <= LR_PARAM_TIER_DISK_WEIGHT; k++)
        params[k] = lr_param_bounds(k).def;
    assert_true(params[LR_PARAM_TIER_CPU_WEIGHT] == 0.8);
    assert_true(params[LR_PARAM_TIER_DISK_WEIGHT] == 0.25);
    params[LR_PARAM_TIER_CPU_WEIGHT] = 0;
    in.params = params;
    in.n_params = LR_PARAM_TIER_DISK_WEIGHT + 1;
    assert_st(lr_policy_decide(LR_POLICY_DYNAMO, &in, rows, 2, sizeof rows[0],
                               sc, &d),
              LR_OK);
    assert_int_equal(d.instance, 0);
}

/* ---- allocation failures ----------------------------------------------------- */

struct oom_ctx {
    uint32_t t[128];
    uint64_t h[8];
    int tokens; /* 1: the store carries tokens (LMCache's shape) */
    uint64_t want;
};

static void
oom_fixture(lr_index *ix, const struct oom_ctx *c)
{
    assert_st(gpu_store(ix, INST, c->h, 8, c->t, 0, 0), LR_OK);
    assert_st(gpu_store(ix, 3, c->h, 4, c->t, 0, 0), LR_OK);
}

static lr_status
oom_op(lr_index *ix, const struct oom_ctx *c)
{
    if (!c->tokens) {
        lr_status st = tier_store(ix, INST, LR_TIER_CPU, c->h + 2, 6);
        if (st == LR_OK)
            st = tier_store(ix, 3, LR_TIER_CPU, c->h, 4);
        return st;
    }
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    e.block_hashes = c->h + 4;
    e.n_blocks = 4;
    e.block_size = BT;
    e.token_ids = c->t + 64;
    e.n_tokens = 64;
    e.has_parent = 1;
    e.parent_hash = c->h[3];
    e.tier = LR_TIER_DISK;
    return lr_index_kv_stored(ix, INST, &e, T0);
}

static bool
sc_tier(struct tu_alloc *t, void *vctx)
{
    struct oom_ctx *c = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_index *ix = mk_index(&t->a);
    oom_fixture(ix, c);
    uint64_t d0 = lr__index_digest(ix);
    tu_alloc_resume(t, arm);
    /* one call: all or nothing (the second call of the hash-only case
     * runs on what the first left) */
    lr_status st = c->tokens ? oom_op(ix, c)
                             : tier_store(ix, INST, LR_TIER_CPU, c->h + 2, 6);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        if (lr__index_digest(ix) != d0)
            fail_msg("allocation %llu%s: a failed store changed the index",
                     (unsigned long long)arm.fail_at, arm.forever ? " on" : "");
        assert_st(oom_op(ix, c), LR_OK);
    } else {
        assert_st(st, LR_OK);
        if (!c->tokens)
            assert_st(tier_store(ix, 3, LR_TIER_CPU, c->h, 4), LR_OK);
    }
    assert_true(lr__index_digest(ix) == c->want);
    assert_st(lr__index_verify(ix), LR_OK);
    lr_index_destroy(ix);
    return !failed;
}

static void
oom(void **state)
{
    (void)state;
    struct oom_ctx c;
    memset(&c, 0, sizeof c);
    tu_tokens(c.t, 128, 6);
    for (uint32_t i = 0; i < 8; i++)
        c.h[i] = 500 + i;
    for (c.tokens = 0; c.tokens < 2; c.tokens++) {
        lr_index *ix = mk_index(NULL);
        oom_fixture(ix, &c);
        assert_st(oom_op(ix, &c), LR_OK);
        c.want = lr__index_digest(ix);
        lr_index_destroy(ix);
        tu_oom_loop(sc_tier, &c, 10000);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_store_resolves),
        cmocka_unit_test(unresolved_and_tokens),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(vllm_batches),
        cmocka_unit_test(router_weighs_tiers),
        cmocka_unit_test(rows_check),
        cmocka_unit_test(oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
