/* Disaggregated prefill and decode: the published pair rules pinned on
 * tables (llm-d-pd's decode-first profile and prefix-based decider,
 * dynamo-pd's conditional disaggregation, each leg apart as SGLang's PD
 * router decides them), adaptive's pair cost (a chat turn kept whole, a
 * long prompt split, the prefill instance nearest the decode instance),
 * the KV transfer's time by placement, the table's order and bad rows;
 * and in lr_router: roles and placement at add, the decode rows first,
 * both legs learnt and tracked, lr_router_prefill_done(), the prefill
 * leg's own round-robin turn, ring ranks apart, snapshots that keep the
 * roles, a fleet that cannot decode, and the allocation-failure loop of a
 * split route. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "libroute/lr_router.h"
#include "router-helpers.h"
#include "router/router.h"
#include "testutil.h"

#define NONE LR_INSTANCE_NONE
#define P LR_ROLE_PREFILL
#define D LR_ROLE_DECODE
#define KVB 131072.0 /* LR_PARAM_KV_BYTES_PER_TOKEN's default */

/* ---- tables --------------------------------------------------------------------- */

static lr_candidate
prow(uint32_t id, int32_t role, uint32_t cached, uint32_t queued,
     uint32_t kv_tokens)
{
    lr_candidate c;
    memset(&c, 0, sizeof c);
    c.instance = id;
    c.role = role;
    c.prefill_rate = 8000;
    c.cached_age_s = -1;
    c.prefix_caching = 1;
    c.cached_tokens = cached;
    c.queued = c.inflight = c.waiting = queued;
    c.kv_tokens = kv_tokens;
    c.adapter_free = UINT32_MAX;
    return c;
}

/* Every parameter at its default, then key = value for each pair of kv
 * (n_kv pairs). */
static void
params_with(double *p, const double *kv, size_t n_kv)
{
    for (uint32_t k = 0; k < lr_param_count(); k++)
        p[k] = lr_param_bounds((int32_t)k).def;
    for (size_t i = 0; i < n_kv; i++)
        p[(size_t)kv[2 * i]] = kv[2 * i + 1];
}

static lr_status
decide_on(int32_t policy, const lr_candidate *rows, size_t n, uint32_t prompt,
          const double *kv, size_t n_kv, lr_decision *d)
{
    double param[128];
    params_with(param, kv, n_kv);
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = prompt;
    in.seed = 7;
    in.params = param;
    in.n_params = lr_param_count();
    double scores[16];
    lr_decision_init(d);
    return lr_policy_decide(policy, &in, rows, n, sizeof rows[0], scores, d);
}

static lr_decision
decide_ok(int32_t policy, const lr_candidate *rows, size_t n, uint32_t prompt,
          const double *kv, size_t n_kv)
{
    lr_decision d;
    assert_st(decide_on(policy, rows, n, prompt, kv, n_kv, &d), LR_OK);
    return d;
}

/* A fleet without prefill rows keeps every request whole, and says that
 * it could not split (-1); so does a table too narrow for roles. */
static void
aggregated_tables(void **state)
{
    (void)state;
    lr_candidate rows[3] = { prow(0, LR_ROLE_BOTH, 0, 1, 0),
                             prow(1, D, 0, 0, 0),
                             prow(2, LR_ROLE_BOTH, 0, 2, 0) };
    int32_t ps[] = { LR_POLICY_LLMD_PD, LR_POLICY_DYNAMO_PD,
                     LR_POLICY_ADAPTIVE, LR_POLICY_LEAST_REQUEST };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        lr_decision d = decide_ok(ps[i], rows, 3, 4000, NULL, 0);
        assert_int_equal(d.prefill_instance, NONE);
        assert_int_equal(d.prefill_reason, -1);
        assert_true(d.transfer_s == 0);
    }
    /* a v3 table (no roles) of prefill rows' bytes: roles unread */
    lr_candidate pre[2] = { prow(0, P, 0, 0, 0), prow(1, P, 0, 0, 0) };
    unsigned char v3[2 * LR_CANDIDATE_SIZE_V3];
    memcpy(v3, &pre[0], LR_CANDIDATE_SIZE_V3);
    memcpy(v3 + LR_CANDIDATE_SIZE_V3, &pre[1], LR_CANDIDATE_SIZE_V3);
    double param[128], scores[2];
    params_with(param, NULL, 0);
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = 100;
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_policy_decide(LR_POLICY_LLMD_PD, &in,
                               (const lr_candidate *)(const void *)v3, 2,
                               LR_CANDIDATE_SIZE_V3, scores, &d),
              LR_OK);
    assert_int_equal(d.prefill_instance, NONE);
}

/* The rows that decode come first, at least one; a role is one of
 * three; the prefill leg's policy keeps no state (round-robin aside) and
 * reads no ring. */
static void
table_order(void **state)
{
    (void)state;
    lr_decision d;
    lr_candidate bad[2] = { prow(0, P, 0, 0, 0), prow(1, D, 0, 0, 0) };
    assert_st(decide_on(LR_POLICY_LLMD_PD, bad, 2, 100, NULL, 0, &d),
              LR_EINVAL);
    lr_candidate none[2] = { prow(0, P, 0, 0, 0), prow(1, P, 0, 0, 0) };
    assert_st(decide_on(LR_POLICY_ADAPTIVE, none, 2, 100, NULL, 0, &d),
              LR_EINVAL);
    lr_candidate odd[2] = { prow(0, D, 0, 0, 0), prow(1, 3, 0, 0, 0) };
    assert_st(decide_on(LR_POLICY_LEAST_REQUEST, odd, 2, 100, NULL, 0, &d),
              LR_EINVAL);
    odd[1].role = -1;
    assert_st(decide_on(LR_POLICY_LEAST_REQUEST, odd, 2, 100, NULL, 0, &d),
              LR_EINVAL);
    lr_candidate ok[2] = { prow(0, D, 0, 0, 0), prow(1, P, 0, 0, 0) };
    int32_t refused[] = { LR_POLICY_ADAPTIVE, LR_POLICY_SESSION_AFFINITY,
                          LR_POLICY_CONSISTENT_HASH, LR_POLICY_DUALMAP,
                          LR_POLICY_GORGO, LR_POLICY_LODESTAR,
                          LR_POLICY_RANVIER };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        double kv[] = { LR_PARAM_PD_PREFILL_POLICY, refused[i] };
        assert_st(decide_on(LR_POLICY_LEAST_REQUEST, ok, 2, 100, kv, 1, &d),
                  LR_EINVAL);
    }
    double kv[] = { LR_PARAM_PD_PREFILL_POLICY, LR_POLICY_ROUND_ROBIN };
    assert_st(decide_on(LR_POLICY_LEAST_REQUEST, ok, 2, 100, kv, 1, &d),
              LR_OK);
    assert_int_equal(d.prefill_instance, 1);
}

/* llm-d: the decode instance by prefix x 2 + queue (min-max), then split
 * when the prompt and its part not cached there are >= nonCachedTokens
 * (16), the prefill instance by the same profile. */
static void
llmd_pd_rule(void **state)
{
    (void)state;
    lr_candidate rows[4] = { prow(0, D, 960, 5, 0), prow(1, D, 0, 0, 0),
                             prow(2, P, 0, 3, 0), prow(3, P, 0, 0, 0) };
    /* d0: 2 x 0.96 + 0 = 1.92 > d1: 0 + 1; 40 uncached: split, p3 */
    lr_decision d = decide_ok(LR_POLICY_LLMD_PD, rows, 4, 1000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, 3);
    assert_reason(d, LR_REASON_PREFIX_HIT);
    assert_int_equal(d.prefill_reason, LR_REASON_LEAST_LOADED);
    assert_int_equal(d.decider, LR_POLICY_LLMD_PD);
    /* 10 uncached at the decode instance: whole there */
    rows[0].cached_tokens = 990;
    d = decide_ok(LR_POLICY_LLMD_PD, rows, 4, 1000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, NONE);
    assert_int_equal(d.prefill_reason, LR_REASON_WHOLE);
    /* the threshold is inclusive: 16 uncached splits */
    rows[0].cached_tokens = 984;
    d = decide_ok(LR_POLICY_LLMD_PD, rows, 4, 1000, NULL, 0);
    assert_int_equal(d.prefill_instance, 3);
    /* its code default 0 splits always */
    rows[0].cached_tokens = 1000;
    double always[] = { LR_PARAM_PD_MIN_UNCACHED, 0 };
    d = decide_ok(LR_POLICY_LLMD_PD, rows, 4, 1000, always, 1);
    assert_int_equal(d.prefill_instance, 3);
    /* a prompt shorter than the threshold stays whole */
    rows[0].cached_tokens = 0;
    d = decide_ok(LR_POLICY_LLMD_PD, rows, 4, 12, NULL, 0);
    assert_int_equal(d.prefill_instance, NONE);
}

/* Dynamo: a peek with overlap credit; whole where the uncached part is
 * < 2048 tokens and < 0.7 of the prompt; else prefill by the overlap
 * cost, decode by the fewest decode blocks. */
static void
dynamo_pd_rule(void **state)
{
    (void)state;
    lr_candidate rows[4] = { prow(0, D, 2560, 0, 8000), prow(1, D, 0, 0, 1000),
                             prow(2, P, 2048, 0, 0), prow(3, P, 0, 0, 0) };
    /* peek: d0 (96 + 500 blocks) against d1 (256 + 63): d1 cheaper */
    rows[0].kv_tokens = 1000;
    lr_decision d = decide_ok(LR_POLICY_DYNAMO_PD, rows, 4, 4096, NULL, 0);
    /* d0: 1536 uncached, 0.375 of the prompt: whole */
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, NONE);
    assert_int_equal(d.prefill_reason, LR_REASON_WHOLE);
    assert_int_equal(d.decider, LR_POLICY_DYNAMO_PD);
    /* 2048 uncached exactly: remote (the comparison is strict) */
    rows[0].cached_tokens = 2048;
    rows[0].kv_tokens = 8000;
    rows[1].cached_tokens = 2048;
    d = decide_ok(LR_POLICY_DYNAMO_PD, rows, 4, 4096, NULL, 0);
    assert_int_equal(d.instance, 1); /* fewer decode blocks */
    assert_int_equal(d.prefill_instance, 2); /* its overlap */
    assert_int_equal(d.prefill_reason, LR_REASON_MIN_COST);
    /* conditional disaggregation off (0): always split */
    rows[0].cached_tokens = 4000;
    rows[1].cached_tokens = 0;
    double off[] = { LR_PARAM_PD_LOCAL_MAX_TOKENS, 0 };
    d = decide_ok(LR_POLICY_DYNAMO_PD, rows, 4, 4096, off, 1);
    assert_int_equal(d.instance, 1);
    assert_int_equal(d.prefill_instance, 2);
    /* the ratio bound alone: 1000 of 1200 uncached (0.83) splits */
    rows[0].cached_tokens = 200;
    rows[0].kv_tokens = 0;
    rows[2].cached_tokens = 0;
    d = decide_ok(LR_POLICY_DYNAMO_PD, rows, 4, 1200, NULL, 0);
    assert_int_not_equal(d.prefill_instance, NONE);
}

/* A policy without a pair rule decides each leg on its rows and always
 * splits (SGLang's PD router): the router's policy on the rows that
 * decode, LR_PARAM_PD_PREFILL_POLICY (or the same) on the prefill rows. */
static void
legs_apart(void **state)
{
    (void)state;
    lr_candidate rows[4] = { prow(0, D, 1000, 3, 0), prow(1, D, 0, 1, 0),
                             prow(2, P, 0, 0, 0), prow(3, P, 500, 2, 0) };
    lr_decision d = decide_ok(LR_POLICY_LEAST_REQUEST, rows, 4, 1000, NULL, 0);
    assert_int_equal(d.instance, 1);
    assert_int_equal(d.prefill_instance, 2);
    assert_int_equal(d.prefill_reason, LR_REASON_LEAST_LOADED);
    double kv[] = { LR_PARAM_PD_PREFILL_POLICY, LR_POLICY_PREFIX_CACHE };
    d = decide_ok(LR_POLICY_LEAST_REQUEST, rows, 4, 1000, kv, 1);
    assert_int_equal(d.instance, 1);
    assert_int_equal(d.prefill_instance, 3);
    assert_int_equal(d.prefill_reason, LR_REASON_PREFIX_HIT);
    assert_int_equal(d.prefill_cached_tokens, 500);
    /* cached whole at the decode instance: still split */
    rows[1].cached_tokens = 1000;
    d = decide_ok(LR_POLICY_LEAST_REQUEST, rows, 4, 1000, NULL, 0);
    assert_int_equal(d.prefill_instance, 2);
    assert_true(d.transfer_s == 0); /* nothing to move */
}

/* The transfer: the tokens the decode instance lacks x 128 KiB over the
 * link between the two: a node, a rack, a region, regions apart. */
static void
transfer_by_placement(void **state)
{
    (void)state;
    lr_candidate rows[2] = { prow(0, D, 0, 0, 0), prow(1, P, 0, 0, 0) };
    rows[0].node = 1;
    rows[0].rack = 10;
    rows[0].region = 100;
    rows[1].node = 1;
    rows[1].rack = 10;
    rows[1].region = 100;
    struct {
        uint32_t node, rack, region;
        double gbps;
    } cases[] = { { 1, 10, 100, 300 }, { 2, 10, 100, 50 },
                  { 2, 11, 100, 12.5 }, { 2, 11, 101, 1.25 },
                  { 0, 0, 0, 12.5 } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rows[1].node = cases[i].node;
        rows[1].rack = cases[i].rack;
        rows[1].region = cases[i].region;
        lr_decision d = decide_ok(LR_POLICY_RANDOM, rows, 2, 1000, NULL, 0);
        assert_int_equal(d.prefill_instance, 1);
        double want = 1000 * KVB / (cases[i].gbps * 1e9);
        assert_true(fabs(d.transfer_s - want) < 1e-12);
    }
    /* a tenth of the prompt held at the decode instance moves no more */
    rows[0].cached_tokens = 100;
    double kv[] = { LR_PARAM_KV_BYTES_PER_TOKEN, 1000 };
    lr_decision d = decide_ok(LR_POLICY_RANDOM, rows, 2, 1000, kv, 1);
    assert_true(fabs(d.transfer_s - 900 * 1000 / 12.5e9) < 1e-15);
}

/* adaptive: a chat turn on a history its decode instance holds stays
 * whole on an idle decode instance; a long prompt while the decode
 * instances decode is split; the prefill instance next to the decode
 * instance beats one a region away. */
static void
adaptive_pair(void **state)
{
    (void)state;
    lr_candidate rows[4] = { prow(0, D, 3900, 0, 0), prow(1, D, 0, 0, 0),
                             prow(2, P, 0, 0, 0), prow(3, P, 0, 0, 0) };
    for (int i = 0; i < 4; i++)
        rows[i].queued = rows[i].waiting = rows[i].inflight = 0;
    lr_decision d = decide_ok(LR_POLICY_ADAPTIVE, rows, 4, 4000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, NONE);
    assert_int_equal(d.prefill_reason, LR_REASON_WHOLE);
    /* 8000 new tokens; 30 decoding on each decode instance: a second of
     * prefill there stalls them */
    rows[0].cached_tokens = 0;
    rows[0].inflight = rows[1].inflight = 30;
    rows[2].rack = rows[0].rack = 5;
    rows[2].region = rows[0].region = 1;
    rows[3].region = 2;
    rows[1].region = 1;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 4, 8000, NULL, 0);
    assert_int_not_equal(d.prefill_instance, NONE);
    assert_int_equal(d.prefill_reason, LR_REASON_MIN_COST);
    assert_true(d.transfer_s > 0);
    /* the prefill instance in the decode instance's region (and rack,
     * when that is d0) */
    assert_int_equal(d.prefill_instance, 2);
    /* even behind a prefill queue of 100 s: its second is more than 0.1 x
     * the decode seconds assumed before any completed (128 output tokens
     * x the 20 ms base); with a bound loose enough, it stays whole */
    rows[2].prefill_tokens = rows[3].prefill_tokens = 800000;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 4, 8000, NULL, 0);
    assert_int_not_equal(d.prefill_instance, NONE);
    double kv[] = { LR_PARAM_ADAPTIVE_PD_STALL, 100 };
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 4, 8000, kv, 1);
    assert_int_equal(d.prefill_instance, NONE);
}

/* adaptive weighs a decode instance's batch by the whole output: the
 * request's 128 tokens each wait on the 30 decoding there (0.1 ms each a
 * step), 0.38 s, more than the 83 ms of KV the instance holding its
 * history saves it; its first step alone (3 x 30 x 0.1 ms) would not be. */
static void
adaptive_pair_decoding(void **state)
{
    (void)state;
    lr_candidate rows[3] = { prow(0, D, 7900, 0, 0), prow(1, D, 0, 0, 0),
                             prow(2, P, 7900, 0, 0) };
    for (int i = 0; i < 3; i++) {
        rows[i].queued = rows[i].waiting = rows[i].inflight = 0;
        rows[i].ttft_s_per_decoding = 0.0001;
    }
    rows[0].inflight = 30;
    lr_decision d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_equal(d.instance, 1);
    rows[0].inflight = 1;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_equal(d.instance, 0);
}

/* adaptive keeps a turn whole on a busy decode instance only when the
 * prefill pool is behind: its wait there at least twice the seconds the
 * prefill stalls all those decoding, and the prefill at most 0.1 x their
 * decode seconds (decode_s, in a table wide enough to carry it). */
static void
adaptive_pair_stall(void **state)
{
    (void)state;
    /* d0 holds the history and decodes 30; 125 us a prefill token */
    lr_candidate rows[3] = { prow(0, D, 7900, 0, 0), prow(1, D, 0, 0, 0),
                             prow(2, P, 0, 0, 0) };
    for (int i = 0; i < 3; i++)
        rows[i].queued = rows[i].waiting = rows[i].inflight = 0;
    rows[0].inflight = rows[1].inflight = 30;
    /* 100 new tokens (12.5 ms), the prefill instance idle: split, a wait
     * of nothing does not pay for stalling 30 */
    lr_decision d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, 2);
    /* a queue of 1 s there (8000 tokens) pays for 2 x 12.5 ms x 30 */
    rows[2].prefill_tokens = 8000;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, NONE);
    assert_int_equal(d.prefill_reason, LR_REASON_WHOLE);
    /* ... not for 400 new tokens (2 x 50 ms x 30 = 3 s); 10 s does */
    rows[0].cached_tokens = 7600;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_not_equal(d.prefill_instance, NONE);
    rows[2].prefill_tokens = 80000;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, NONE);
    /* 3000 new tokens (375 ms) behind a queue of 1000 s: more than
     * 0.1 x the 2.56 s assumed (128 output tokens x 20 ms) */
    rows[0].cached_tokens = 5000;
    rows[2].prefill_tokens = 8000000;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_not_equal(d.prefill_instance, NONE);
    /* requests there that decode for 10 s take it; 1 s ones do not */
    rows[0].decode_s = rows[1].decode_s = 10;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prefill_instance, NONE);
    rows[0].decode_s = rows[1].decode_s = 1;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0);
    assert_int_not_equal(d.prefill_instance, NONE);
    /* a v4 table does not carry decode_s: the 2.56 s assumed */
    rows[0].decode_s = rows[1].decode_s = 10;
    unsigned char v4[3 * LR_CANDIDATE_SIZE_V4];
    for (int i = 0; i < 3; i++)
        memcpy(v4 + (size_t)i * LR_CANDIDATE_SIZE_V4, &rows[i],
               LR_CANDIDATE_SIZE_V4);
    double param[128], scores[3];
    params_with(param, NULL, 0);
    lr_policy_input in;
    lr_policy_input_init(&in);
    in.prompt_tokens = 8000;
    in.seed = 7;
    in.params = param;
    in.n_params = lr_param_count();
    lr_decision_init(&d);
    assert_st(lr_policy_decide(LR_POLICY_ADAPTIVE, &in, (lr_candidate *)v4, 3,
                               LR_CANDIDATE_SIZE_V4, scores, &d),
              LR_OK);
    assert_int_not_equal(d.prefill_instance, NONE);
    /* the bound at 0 keeps a request whole only where nothing is in
     * flight */
    rows[0].cached_tokens = 7900;
    double zero[] = { LR_PARAM_ADAPTIVE_PD_STALL, 0 };
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, zero, 1);
    assert_int_not_equal(d.prefill_instance, NONE);
    rows[0].inflight = rows[1].inflight = 0;
    d = decide_ok(LR_POLICY_ADAPTIVE, rows, 3, 8000, zero, 1);
    assert_int_equal(d.prefill_instance, NONE);
    /* a decode_s that is not a time is refused */
    rows[0].decode_s = NAN;
    assert_st(decide_on(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0, &d),
              LR_EINVAL);
    rows[0].decode_s = -1;
    assert_st(decide_on(LR_POLICY_ADAPTIVE, rows, 3, 8000, NULL, 0, &d),
              LR_EINVAL);
}

/* ---- the router ----------------------------------------------------------------- */

static lr_router *
mk_on(const lr_allocator *a, int32_t policy)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = a;
    o.policy = policy;
    o.seed = 3;
    o.max_instances = 8;
    o.max_requests = 256;
    o.index_ttl_ns = 0;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    return r;
}

static lr_status
add_role(lr_router *r, const char *name, int32_t role, uint32_t rack,
         uint32_t *id)
{
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = name;
    s.role = role;
    s.rack = rack;
    s.region = 1;
    return lr_router_add_instance(r, &s, id);
}

/* Two decode instances (ids 0, 2) and two prefill ones (1, 3), added
 * interleaved. */
static lr_router *
pd_fleet(const lr_allocator *a, int32_t policy)
{
    lr_router *r = mk_on(a, policy);
    uint32_t id;
    assert_st(add_role(r, "d0", D, 1, &id), LR_OK);
    assert_st(add_role(r, "p1", P, 1, &id), LR_OK);
    assert_st(add_role(r, "d2", D, 2, &id), LR_OK);
    assert_st(add_role(r, "p3", P, 2, &id), LR_OK);
    return r;
}

static bool
is_prefill(uint32_t id)
{
    return id == 1 || id == 3;
}

/* A split route: its legs, the load on each, the prefill leg's end, the
 * prefix learnt at both; the next turn stays whole where it decodes. */
static void
router_split_route(void **state)
{
    (void)state;
    lr_router *r = pd_fleet(NULL, LR_POLICY_LLMD_PD);
    uint32_t t[2048];
    toks(t, 2048, 1);
    lr_decision d;
    assert_st(route_one(r, 1, t, 2000, 0, T0, &d), LR_OK);
    assert_false(is_prefill(d.instance));
    assert_true(is_prefill(d.prefill_instance));
    assert_true(d.transfer_s > 0);
    uint32_t dec = d.instance, pre = d.prefill_instance;
    lr_load_snapshot v;
    lr_load_snapshot_init(&v);
    assert_st(lr_router_instance_load(r, pre, &v), LR_OK);
    assert_int_equal(v.inflight, 1);
    assert_true(v.prefill_tokens >= 2000 - BT);
    assert_st(lr_router_instance_load(r, dec, &v), LR_OK);
    assert_int_equal(v.inflight, 1);
    assert_int_equal(v.prefill_tokens, 0);
    assert_st(lr_router_prefill_done(r, 1, T0 + 100 * MS), LR_OK);
    assert_st(lr_router_instance_load(r, pre, &v), LR_OK);
    assert_int_equal(v.inflight, 0);
    assert_st(lr_router_prefill_done(r, 1, T0 + 101 * MS), LR_OK); /* no-op */
    assert_st(lr_router_prefill_done(r, 77, T0 + 101 * MS), LR_ENOENT);
    assert_st(lr_router_prefill_done(NULL, 1, T0 + 101 * MS), LR_EINVAL);
    assert_st(lr_router_first_token(r, 1, T0 + 120 * MS), LR_OK);
    assert_st(lr_router_complete(r, 1, 50, T0 + SEC), LR_OK);
    /* the next turn: the history at both, the decode instance's wins
     * the profile's tie on the prefix (queues equal) only by draw, so
     * the decider is what is pinned: 8 new tokens stay whole */
    assert_st(route_one(r, 2, t, 2008, 0, T0 + 2 * SEC, &d), LR_OK);
    assert_false(is_prefill(d.instance));
    assert_true(d.cached_tokens >= 2000 - BT);
    assert_int_equal(d.prefill_instance, NONE);
    assert_int_equal(d.prefill_reason, LR_REASON_WHOLE);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* Request id of t's 256 tokens routed at `at`, its first token at
 * `first`, its completion at `end`. */
static void
served(lr_router *r, uint64_t id, const uint32_t *t, uint64_t at,
       uint64_t first, uint64_t end)
{
    assert_st(route_one(r, id, t, 256, 0, at, NULL), LR_OK);
    assert_st(lr_router_first_token(r, id, first), LR_OK);
    assert_st(lr_router_complete(r, id, 100, end), LR_OK);
}

/* adaptive learns the decode seconds of its class from the requests it
 * routed that completed after a first token: every row of the class
 * carries their mean; a failed request, one without a first token and one
 * another policy routed do not count. */
static void
router_decode_seconds(void **state)
{
    (void)state;
    lr_router *r = pd_fleet(NULL, LR_POLICY_ADAPTIVE);
    uint32_t t[256];
    toks(t, 256, 3);
    lr_candidate rows[8];
    size_t n = candidates_of(r, t, 256, T0, rows, 8);
    for (size_t i = 0; i < n; i++)
        assert_true(rows[i].decode_s == 0);
    served(r, 1, t, T0, T0 + SEC, T0 + 5 * SEC);
    n = candidates_of(r, t, 256, T0 + 5 * SEC, rows, 8);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(rows[i].decode_s - 4.0) < 1e-9);
    /* failed after its first token; completed without one */
    assert_st(route_one(r, 2, t, 256, 0, T0 + 6 * SEC, NULL), LR_OK);
    assert_st(lr_router_first_token(r, 2, T0 + 7 * SEC), LR_OK);
    assert_st(lr_router_fail(r, 2, T0 + 20 * SEC), LR_OK);
    assert_st(route_one(r, 3, t, 256, 0, T0 + 21 * SEC, NULL), LR_OK);
    assert_st(lr_router_complete(r, 3, 100, T0 + 40 * SEC), LR_OK);
    n = candidates_of(r, t, 256, T0 + 40 * SEC, rows, 8);
    assert_true(fabs(rows[0].decode_s - 4.0) < 1e-9);
    /* a request whose instance is removed ends with it, in adaptive's
     * record too: the next one in its slot, routed by another policy,
     * is not taken for it */
    lr_decision d;
    assert_st(route_one(r, 4, t, 256, 0, T0 + 41 * SEC, &d), LR_OK);
    assert_st(lr_router_first_token(r, 4, T0 + 42 * SEC), LR_OK);
    assert_st(lr_router_remove_instance(r, d.instance), LR_OK);
    assert_st(lr_router_set_policy(r, LR_POLICY_LLMD_PD), LR_OK);
    served(r, 6, t, T0 + 43 * SEC, T0 + 44 * SEC, T0 + 60 * SEC);
    assert_st(lr_router_set_policy(r, LR_POLICY_ADAPTIVE), LR_OK);
    n = candidates_of(r, t, 256, T0 + 60 * SEC, rows, 8);
    assert_true(fabs(rows[0].decode_s - 4.0) < 1e-9);
    /* a second completion, 2 s: the mean of both */
    served(r, 5, t, T0 + 61 * SEC, T0 + 62 * SEC, T0 + 64 * SEC);
    n = candidates_of(r, t, 256, T0 + 64 * SEC, rows, 8);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(rows[i].decode_s - 3.0) < 1e-9);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* Scores come in table order: the decode rows, then the prefill rows. */
static void
router_scores_order(void **state)
{
    (void)state;
    lr_router *r = pd_fleet(NULL, LR_POLICY_LEAST_REQUEST);
    uint32_t t[256];
    toks(t, 256, 2);
    lr_score sc[4];
    lr_request q;
    lr_request_init(&q);
    q.id = 5;
    q.tokens = t;
    q.n_tokens = 256;
    q.flags = LR_ROUTE_SCORES;
    q.now_ns = T0;
    lr_decision d;
    lr_decision_init(&d);
    d.scores = sc;
    d.scores_capacity = 4;
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.n_scores, 4);
    uint32_t want[4] = { 0, 2, 1, 3 };
    for (int i = 0; i < 4; i++)
        assert_int_equal(sc[i].instance, want[i]);
    lr_candidate rows[4];
    assert_int_equal(candidates_of(r, t, 256, T0, rows, 4), 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rows[i].instance, want[i]);
        assert_int_equal(rows[i].role, i < 2 ? D : P);
        assert_int_equal(rows[i].rack, want[i] < 2 ? 1 : 2);
    }
    lr_router_destroy(r);
}

/* Round-robin on the prefill leg takes a turn of its own. */
static void
router_prefill_turns(void **state)
{
    (void)state;
    lr_router *r = pd_fleet(NULL, LR_POLICY_ROUND_ROBIN);
    uint32_t t[64];
    toks(t, 64, 3);
    uint32_t dec[4], pre[4];
    for (uint64_t i = 0; i < 4; i++) {
        lr_decision d;
        assert_st(route_one(r, 10 + i, t, 64, 0, T0 + i * MS, &d), LR_OK);
        dec[i] = d.instance;
        pre[i] = d.prefill_instance;
    }
    for (int i = 0; i < 4; i++) {
        assert_false(is_prefill(dec[i]));
        assert_true(is_prefill(pre[i]));
        if (i > 0) {
            assert_int_not_equal(dec[i], dec[i - 1]);
            assert_int_not_equal(pre[i], pre[i - 1]);
        }
    }
    assert_st(lr_router_set_param(r, LR_PARAM_PD_PREFILL_POLICY,
                                  LR_POLICY_ADAPTIVE),
              LR_EINVAL);
    assert_st(lr_router_set_param(r, LR_PARAM_PD_PREFILL_POLICY,
                                  LR_POLICY_LEAST_REQUEST),
              LR_OK);
    lr_router_destroy(r);
}

/* A ring policy ranks each leg's rows apart: both legs get rank 1. */
static void
router_ring_apart(void **state)
{
    (void)state;
    lr_router *r = pd_fleet(NULL, LR_POLICY_CONSISTENT_HASH);
    uint32_t t[512];
    for (uint64_t s = 0; s < 16; s++) {
        toks(t, 512, 100 + s);
        lr_decision d;
        assert_st(route_one(r, 100 + s, t, 512, 0, T0 + s * MS, &d), LR_OK);
        assert_false(is_prefill(d.instance));
        assert_true(is_prefill(d.prefill_instance));
        assert_reason(d, LR_REASON_HASH);
        assert_int_equal(d.prefill_reason, LR_REASON_HASH);
    }
    lr_router_destroy(r);
}

/* Roles at add; a fleet that cannot decode; a snapshot keeps them. */
static void
router_roles(void **state)
{
    (void)state;
    lr_router *r = mk_on(NULL, LR_POLICY_ADAPTIVE);
    uint32_t id, p0, p1;
    assert_st(add_role(r, "x", 3, 0, &id), LR_EINVAL);
    assert_st(add_role(r, "x", -1, 0, &id), LR_EINVAL);
    assert_int_equal(lr_router_instance_count(r), 0);
    assert_st(add_role(r, "p0", P, 0, &p0), LR_OK);
    assert_st(add_role(r, "p1", P, 0, &p1), LR_OK);
    uint32_t t[128];
    toks(t, 128, 4);
    assert_st(route_one(r, 1, t, 128, 0, T0, NULL), LR_ESTATE);
    /* a 0.2 caller's spec: role, placement unread */
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = "old";
    s.role = 77;
    s.struct_size = LR_INSTANCE_SPEC_SIZE_V2;
    uint32_t old;
    assert_st(lr_router_add_instance(r, &s, &old), LR_OK);
    lr_decision d;
    assert_st(route_one(r, 2, t, 128, 0, T0 + MS, &d), LR_OK);
    assert_int_equal(d.instance, old);
    assert_true(d.prefill_instance == p0 || d.prefill_instance == p1 ||
                d.prefill_instance == NONE);
    assert_st(lr_router_drain_instance(r, old, 1), LR_OK);
    assert_st(route_one(r, 3, t, 128, 0, T0 + 2 * MS, NULL), LR_ESTATE);
    assert_st(lr_router_drain_instance(r, old, 0), LR_OK);
    assert_router_ok(r);
    lr_blob *b;
    assert_st(lr_router_snapshot(r, T0 + SEC, &b), LR_OK);
    lr_router *c = mk_on(NULL, LR_POLICY_ADAPTIVE);
    assert_st(lr_router_restore(c, lr_blob_data(b), lr_blob_size(b), T0 + SEC),
              LR_OK);
    assert_router_ok(c);
    assert_true(lr__router_digest(c) != 0);
    lr_candidate rows[3];
    assert_int_equal(candidates_of(c, t, 128, T0 + SEC, rows, 3), 3);
    assert_int_equal(rows[0].instance, old);
    assert_int_equal(rows[1].role, P);
    assert_int_equal(rows[2].role, P);
    /* the placement section is checked: a duplicate record is corrupt */
    lr_blob_destroy(b);
    lr_router_destroy(c);
    lr_router_destroy(r);
}

/* The fleet is saturated when every instance that decodes is, idle
 * prefill instances aside; a request let out of the queue carries its
 * prefill leg. */
static void
router_waiting_pair(void **state)
{
    (void)state;
    lr_router *r = pd_fleet(NULL, LR_POLICY_LLMD_PD);
    assert_st(lr_router_set_param(r, LR_PARAM_SATURATION_QUEUE, 1), LR_OK);
    uint32_t t[1024];
    lr_decision d;
    for (uint64_t i = 0; i < 2; i++) {
        toks(t, 1024, 40 + i);
        assert_st(route_one(r, 1 + i, t, 1024, LR_ROUTE_MAY_WAIT, T0 + i * MS,
                            &d),
                  LR_OK);
        assert_int_not_equal(d.instance, NONE);
        assert_true(is_prefill(d.prefill_instance));
    }
    int32_t sat = -1;
    assert_st(lr_router_saturated(r, T0 + 2 * MS, &sat), LR_OK);
    assert_int_equal(sat, 1); /* both decode instances hold one queued */
    toks(t, 1024, 50);
    assert_st(route_one(r, 3, t, 1024, LR_ROUTE_MAY_WAIT, T0 + 3 * MS, &d),
              LR_OK);
    assert_reason(d, LR_REASON_WAITING);
    assert_int_equal(d.instance, NONE);
    assert_st(lr_router_first_token(r, 1, T0 + 4 * MS), LR_OK);
    lr_dispatched out[2];
    size_t n = 0;
    assert_st(lr_router_dispatch(r, T0 + 5 * MS, out, 2, sizeof out[0], &n),
              LR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].request_id, 3);
    assert_int_equal(out[0].status, LR_OK);
    assert_false(is_prefill(out[0].instance));
    assert_true(is_prefill(out[0].prefill_instance));
    assert_true(out[0].transfer_s > 0);
    assert_int_equal(out[0].prefill_reason, LR_REASON_LEAST_LOADED);
    /* a caller of the first 0.3 stride still takes entries */
    assert_st(lr_router_dispatch(r, T0 + 6 * MS, out, 1, LR_DISPATCHED_SIZE_V1,
                                 &n),
              LR_OK);
    assert_router_ok(r);
    lr_router_destroy(r);
}

/* A split route under allocation failures: LR_ENOMEM changes nothing. */
static bool
sc_route(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_router *r = pd_fleet(&t->a, LR_POLICY_LLMD_PD);
    uint32_t tk[4096];
    /* the states and scratch made on a first route of one block */
    toks(tk, 16, 9);
    assert_st(route_one(r, 1, tk, 16, 0, T0, NULL), LR_OK);
    uint64_t d0 = lr__router_digest(r);
    size_t live0 = lr__router_mem_live(r);
    tu_alloc_resume(t, arm);
    toks(tk, 4096, 10);
    lr_decision d;
    lr_status st = route_one(r, 2, tk, 4096, 0, T0 + MS, &d);
    bool failed = t->failed;
    (void)tu_alloc_pause(t);
    assert_true(st == LR_OK || st == LR_ENOMEM);
    if (st == LR_ENOMEM) {
        assert_true(lr__router_digest(r) == d0);
        assert_int_equal(lr__router_mem_live(r), live0);
    } else {
        assert_int_not_equal(d.prefill_instance, NONE); /* it did split */
    }
    assert_router_ok(r);
    lr_router_destroy(r);
    t->failed = failed;
    return st == LR_OK && !failed;
}

static void
oom_split_route(void **state)
{
    (void)state;
    tu_oom_loop(sc_route, NULL, 400);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(aggregated_tables),
        cmocka_unit_test(table_order),
        cmocka_unit_test(llmd_pd_rule),
        cmocka_unit_test(dynamo_pd_rule),
        cmocka_unit_test(legs_apart),
        cmocka_unit_test(transfer_by_placement),
        cmocka_unit_test(adaptive_pair),
        cmocka_unit_test(adaptive_pair_stall),
        cmocka_unit_test(adaptive_pair_decoding),
        cmocka_unit_test(router_split_route),
        cmocka_unit_test(router_decode_seconds),
        cmocka_unit_test(router_scores_order),
        cmocka_unit_test(router_prefill_turns),
        cmocka_unit_test(router_ring_apart),
        cmocka_unit_test(router_roles),
        cmocka_unit_test(router_waiting_pair),
        cmocka_unit_test(oom_split_route),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
