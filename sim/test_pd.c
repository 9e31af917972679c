/* lrsim tests: disaggregated fleets. A split request's first token
 * against the engine model's step times and the KV link; a transfer
 * across regions slower than one in a rack; requests kept whole run on
 * the decode instance; every request ends once and every split one that
 * was served called lr_router_prefill_done once, with the engines'
 * invariants checked after every step, for every policy. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libroute.h>

#include "cluster.h"
#include "params.h"
#include "sim.h"
#include "workload.h"

static void
parse_cluster(const char *spec, struct sim_cluster *c)
{
    struct sim_err err = { { 0 } };
    if (sim_cluster_parse(spec, c, &err) != 0)
        fail_msg("%s: %s", spec, err.msg);
}

static void
add_req(struct sim_workload *w, uint64_t at_us, uint64_t seed, uint32_t prompt,
        uint32_t output)
{
    struct sim_seg seg = { seed, prompt, 1 };
    struct sim_err err = { { 0 } };
    if (sim_workload_add(w, at_us, output, &seg, 1, 0, 0, &err) != 0)
        fail_msg("%s", err.msg);
}

/* The books of a run on a fleet with prefill instances. */
static void
check_pd_books(const struct sim_workload *w, const struct sim_cluster *c,
               const struct sim_result *res)
{
    assert_int_equal(res->completed + res->failed, w->n_reqs);
    uint64_t out = 0, split = 0;
    for (size_t q = 0; q < w->n_reqs; q++) {
        assert_int_equal(res->finishes[q], 1);
        int served = res->state[q] == REQ_DONE;
        int was_split = res->prefill_inst[q] != UINT32_MAX;
        split += was_split;
        assert_int_equal(res->prefill_dones[q], was_split && served);
        if (!served)
            continue;
        out += w->reqs[q].output_tokens;
        /* decoded where no prefill instance is; prefilled where one is */
        assert_true(res->inst[q] < c->n);
        assert_int_not_equal(c->inst[res->inst[q]].role, LR_ROLE_PREFILL);
        if (was_split) {
            assert_int_equal(c->inst[res->prefill_inst[q]].role,
                             LR_ROLE_PREFILL);
            assert_true(res->prefill_us[q] > 0 &&
                        res->prefill_us[q] + res->transfer_us[q] <
                            res->ttft_us[q]);
        }
        assert_true(res->e2e_us[q] >= res->ttft_us[q]);
    }
    assert_int_equal(split, res->n_split);
    assert_int_equal(res->sampled_tokens, out);
    assert_int_equal(res->query_tokens,
                     res->hit_tokens + res->prefilled_tokens +
                         res->abandoned_tokens + res->received_tokens);
}

static int
run_pd(const struct sim_workload *w, const struct sim_cluster *c,
       int32_t policy, const struct sim_param *params, size_t n_params,
       struct sim_result *res)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.policy = policy;
    cfg.verify_engines = 1;
    cfg.params = params;
    cfg.n_params = n_params;
    struct sim_err err = { { 0 } };
    int rc = sim_run(&cfg, res, &err);
    if (rc == 1)
        return 1;
    if (rc != 0)
        fail_msg("%s: %s", lr_policy_name((lr_policy)policy), err.msg);
    check_pd_books(w, c, res);
    return 0;
}

static uint64_t
step_us(double t)
{
    uint64_t us = (uint64_t)(t + 0.5);
    return us ? us : 1;
}

/* One request of P tokens split between a prefill and a decode a100 in
 * one rack: its TTFT is RTT/2 to the prefill engine, the prefill step,
 * RTT/2 back and RTT/2 to the decode engine, the transfer of P - 1
 * tokens' KV (setup + bytes / 50 GB/s), the decode engine's step that
 * computes the last prompt token and samples the first, RTT/2 back. */
static void
test_split_ttft(void **state)
{
    (void)state;
    const struct sim_class *k = sim_class_find("a100");
    struct sim_cluster c;
    parse_cluster("1xa100:p+1xa100:d", &c);
    assert_int_equal(c.n_prefill, 1);
    assert_int_equal(c.n_decode, 1);
    assert_int_equal(sim_placement_level(&c.inst[0], &c.inst[1]), 1);
    const uint32_t P = 1024, N = 4;
    struct sim_workload w;
    sim_workload_init(&w);
    add_req(&w, 0, 7, P, N);
    struct sim_result res;
    assert_int_equal(run_pd(&w, &c, LR_POLICY_LLMD_PD, NULL, 0, &res), 0);
    assert_int_equal(res.completed, 1);
    assert_int_equal(res.prefill_inst[0], 0);
    assert_int_equal(res.inst[0], 1);
    uint64_t half = SIM_DEFAULT_RTT_US / 2;
    uint64_t prefill =
        step_us(k->overhead_us + (double)P * k->prefill_us *
                                     (1.0 + ((double)P / 2.0) / k->ctx_double));
    uint64_t xfer = 1000 + (uint64_t)llround((double)(P - 1) * 131072.0 / 50e3);
    uint64_t last = step_us(
        k->overhead_us +
        k->prefill_us * (1.0 + ((double)(P - 1) + 0.5) / k->ctx_double));
    assert_int_equal(res.prefill_us[0], half + prefill);
    assert_int_equal(res.transfer_us[0], xfer);
    assert_int_equal(res.ttft_us[0],
                     half + prefill + 2 * half + xfer + last + half);
    assert_int_equal(res.received_tokens, P - 1);
    assert_int_equal(res.kv_transfer_bytes, (uint64_t)(P - 1) * 131072u);
    sim_result_free(&res);
    sim_workload_free(&w);
    sim_cluster_free(&c);
}

/* The same request with its prefill instance in another region: the
 * transfer at 1.25 GB/s, a TTFT that much longer; on one node, shorter. */
static void
test_placement(void **state)
{
    (void)state;
    const char *specs[3] = { "1xa100:p/region2+1xa100:d", "1xa100:p+1xa100:d",
                             "1xa100:p/node7+1xa100:d/node7" };
    const double gbps[3] = { 1.25, 50, 300 };
    const int level[3] = { 3, 1, 0 };
    uint64_t ttft[3];
    const uint32_t P = 2048;
    for (int k = 0; k < 3; k++) {
        struct sim_cluster c;
        parse_cluster(specs[k], &c);
        assert_int_equal(sim_placement_level(&c.inst[0], &c.inst[1]), level[k]);
        struct sim_workload w;
        sim_workload_init(&w);
        add_req(&w, 0, 9, P, 3);
        struct sim_result res;
        assert_int_equal(run_pd(&w, &c, LR_POLICY_LLMD_PD, NULL, 0, &res), 0);
        assert_int_equal(res.transfer_us[0],
                         1000 + (uint64_t)llround((double)(P - 1) * 131072.0 /
                                                  (gbps[k] * 1e3)));
        ttft[k] = res.ttft_us[0];
        sim_result_free(&res);
        sim_workload_free(&w);
        sim_cluster_free(&c);
    }
    assert_true(ttft[0] > ttft[1] && ttft[1] > ttft[2]);
    assert_true(ttft[0] - ttft[1] > 150000); /* ~0.21 s against ~5 ms */
}

/* A prompt shorter than llm-d-pd's threshold (16 uncached tokens) is
 * kept whole and runs on the decode instance, which prefills it; no
 * prefill_done. */
static void
test_kept_whole(void **state)
{
    (void)state;
    struct sim_cluster c;
    parse_cluster("1xa100:p+2xa100:d", &c);
    struct sim_workload w;
    sim_workload_init(&w);
    add_req(&w, 0, 11, 10, 5);
    add_req(&w, 1000, 12, 12, 5);
    struct sim_result res;
    assert_int_equal(run_pd(&w, &c, LR_POLICY_LLMD_PD, NULL, 0, &res), 0);
    assert_int_equal(res.completed, 2);
    assert_int_equal(res.n_split, 0);
    for (size_t q = 0; q < 2; q++) {
        assert_int_equal(res.prefill_inst[q], UINT32_MAX);
        assert_int_equal(c.inst[res.inst[q]].role, LR_ROLE_DECODE);
        assert_int_equal(res.prefill_dones[q], 0);
    }
    assert_int_equal(res.per_inst[0].query_tokens, 0);
    sim_result_free(&res);
    sim_workload_free(&w);
    sim_cluster_free(&c);
}

/* Every policy on a small chat workload over a split fleet, and long
 * prompts on a30s (32k tokens of KV each) where decode engines wait for
 * memory: the books balance, the engines' invariants hold. */
static void
test_every_policy(void **state)
{
    (void)state;
    const struct sim_generator *g = sim_generator_find("conversation");
    assert_non_null(g);
    struct sim_workload w;
    struct sim_gen_opts o = { 5, 60, 10 };
    struct sim_err err = { { 0 } };
    sim_workload_init(&w);
    if (g->build(&o, &w, &err) != 0)
        fail_msg("%s", err.msg);
    sim_workload_truncate(&w, 60);
    struct sim_cluster c;
    parse_cluster("1xa100:p+1xa100:p/rack2+2xa100:d", &c);
    struct sim_param prefill = { LR_PARAM_PD_PREFILL_POLICY,
                                 (double)LR_POLICY_SGLANG_CACHE_AWARE };
    uint64_t splits = 0;
    for (uint32_t p = 0; p < lr_policy_count(); p++) {
        if (p == LR_POLICY_LORA_AFFINITY || p == LR_POLICY_AIBRIX_LORA)
            continue;
        struct sim_result res;
        int rc =
            run_pd(&w, &c, (int32_t)p, p % 2 ? &prefill : NULL, p % 2, &res);
        if (rc == 0)
            splits += res.n_split;
        sim_result_free(&res);
    }
    assert_true(splits > 0);
    sim_workload_free(&w);
    sim_cluster_free(&c);

    g = sim_generator_find("share-10");
    assert_non_null(g);
    struct sim_gen_opts o2 = { 3, 40, 20 };
    sim_workload_init(&w);
    if (g->build(&o2, &w, &err) != 0)
        fail_msg("%s", err.msg);
    sim_workload_truncate(&w, 40);
    parse_cluster("2xa30:p+1xa30:d", &c);
    int32_t pols[3] = { LR_POLICY_ADAPTIVE, LR_POLICY_DYNAMO_PD,
                        LR_POLICY_LEAST_LOAD };
    for (int k = 0; k < 3; k++) {
        struct sim_result res;
        assert_int_equal(run_pd(&w, &c, pols[k], NULL, 0, &res), 0);
        sim_result_free(&res);
    }
    sim_workload_free(&w);
    sim_cluster_free(&c);
}

/* The grammar: roles, placement, and what it refuses. */
static void
test_specs(void **state)
{
    (void)state;
    struct sim_cluster c;
    parse_cluster("2xh100:prefill@2ms/rack3/region2+1xa100-nocache:d+9", &c);
    assert_int_equal(c.n, 12);
    assert_int_equal(c.n_prefill, 2);
    assert_int_equal(c.n_decode, 1);
    assert_int_equal(c.inst[0].role, LR_ROLE_PREFILL);
    assert_int_equal(c.inst[0].rack, 3);
    assert_int_equal(c.inst[0].region, 2);
    assert_int_equal(c.inst[0].rtt_us, 2000);
    assert_int_equal(c.inst[0].node, c.inst[1].node);
    assert_int_equal(c.inst[2].role, LR_ROLE_DECODE);
    assert_false(c.inst[2].prefix_caching);
    assert_int_equal(c.inst[3].role, LR_ROLE_BOTH);
    /* nine in a group: two nodes of up to eight */
    assert_int_equal(c.inst[3].node, c.inst[10].node);
    assert_int_not_equal(c.inst[10].node, c.inst[11].node);
    assert_int_equal(sim_placement_level(&c.inst[0], &c.inst[2]), 3);
    assert_int_equal(sim_placement_level(&c.inst[2], &c.inst[3]), 1);
    char buf[256];
    sim_cluster_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, "2 x h100 prefill (2 ms rack 3 region 2)"));
    sim_cluster_free(&c);
    const char *bad[] = { "2xa100:x",      "2xa100:p/rack", "2xa100:p/rack0",
                          "2xa100/shelf2", "2xa100:pd",     "1xa100:b/node" };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct sim_err err = { { 0 } };
        assert_int_equal(sim_cluster_parse(bad[k], &c, &err), -1);
        assert_true(err.msg[0] != '\0');
    }
    /* a param of the pair rules, by policy name */
    struct sim_param p;
    struct sim_err err = { { 0 } };
    assert_int_equal(
        sim_param_parse("pd-prefill-policy=sglang-cache-aware", &p, &err), 0);
    assert_int_equal(p.key, LR_PARAM_PD_PREFILL_POLICY);
    assert_true(p.value == (double)LR_POLICY_SGLANG_CACHE_AWARE);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_ttft), cmocka_unit_test(test_placement),
        cmocka_unit_test(test_kept_whole), cmocka_unit_test(test_every_policy),
        cmocka_unit_test(test_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
