/* lrsim tests: whole runs through the library. Conservation of requests
 * and tokens for every policy, on homogeneous, heterogeneous, memory-tight
 * and cross-region clusters; identical output for a seed; the generators;
 * cluster specs. */
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
#include "report.h"
#include "sim.h"
#include "workload.h"

static void
build(const char *gen, size_t n, double rate, uint64_t seed,
      struct sim_workload *w)
{
    const struct sim_generator *g = sim_generator_find(gen);
    assert_non_null(g);
    struct sim_gen_opts o = { seed, n, rate };
    struct sim_err err = { { 0 } };
    sim_workload_init(w);
    if (g->build(&o, w, &err) != 0)
        fail_msg("%s: %s", gen, err.msg);
    sim_workload_truncate(w, n);
}

static void
parse_cluster(const char *spec, struct sim_cluster *c)
{
    struct sim_err err = { { 0 } };
    if (sim_cluster_parse(spec, c, &err) != 0)
        fail_msg("%s: %s", spec, err.msg);
}

/* Run and check the books from outside too. Returns sim_run's code. */
static int
run_checked(const struct sim_workload *w, const struct sim_cluster *c,
            int32_t policy, struct sim_result *res)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.policy = policy;
    cfg.verify_engines = 1;
    struct sim_err err = { { 0 } };
    int rc = sim_run(&cfg, res, &err);
    if (rc == 1)
        return 1; /* not supported by this libroute */
    if (rc != 0)
        fail_msg("%s: %s", lr_policy_name((lr_policy)policy), err.msg);
    assert_int_equal(res->n_reqs, w->n_reqs);
    assert_int_equal(res->completed + res->failed, w->n_reqs);
    uint64_t in = 0, out = 0;
    for (size_t q = 0; q < w->n_reqs; q++) {
        assert_int_equal(res->finishes[q], 1);
        assert_true(res->state[q] == REQ_DONE || res->state[q] == REQ_FAILED);
        if (res->state[q] == REQ_DONE) {
            out += w->reqs[q].output_tokens;
            in += w->reqs[q].input_tokens;
            assert_true(res->ttft_us[q] > 0);
            assert_true(res->e2e_us[q] >= res->ttft_us[q]);
            assert_true(res->hit[q] < w->reqs[q].input_tokens);
            assert_true(res->inst[q] < c->n);
        }
    }
    assert_int_equal(res->sampled_tokens, out);
    assert_int_equal(res->query_tokens, res->hit_tokens +
                                            res->prefilled_tokens +
                                            res->abandoned_tokens);
    if (res->preemptions == 0)
        assert_int_equal(res->hit_tokens + res->prefilled_tokens, in);
    uint64_t per = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        per += res->per_inst[i].requests;
        assert_true(res->per_inst[i].peak_used_blocks <=
                    res->per_inst[i].capacity_blocks);
    }
    assert_int_equal(per, res->completed);
    assert_true(res->cache_hit_rate >= 0 && res->cache_hit_rate <= 1);
    assert_true(res->slo_attainment >= 0 && res->slo_attainment <= 1);
    return 0;
}

/* Every policy the library names, on a small conversation workload. */
static void
test_conservation_all_policies(void **state)
{
    (void)state;
    struct sim_workload w;
    build("conversation", 400, 14, 3, &w);
    struct sim_cluster c;
    parse_cluster("4xa100+2xv100-nocache", &c);
    int ran = 0;
    for (int p = 0; lr_policy_name((lr_policy)p) != NULL; p++) {
        struct sim_result res;
        if (run_checked(&w, &c, p, &res) == 0)
            ran++;
        sim_result_free(&res);
    }
    assert_true(ran >= 15);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* KV so tight that engines preempt, and prompts too long for some
 * instances (they fail): the books still balance. */
static void
test_conservation_pressure(void **state)
{
    (void)state;
    struct sim_workload w;
    build("tools-zipf", 300, 30, 5, &w);
    /* a30: 32k tokens of KV, so 16k-token prompts crowd it */
    struct sim_cluster c;
    parse_cluster("lodestar", &c);
    int32_t pols[] = { LR_POLICY_LEAST_REQUEST, LR_POLICY_PREFIX_CACHE,
                       LR_POLICY_DUALMAP, LR_POLICY_GORGO };
    uint64_t preempted = 0;
    for (size_t k = 0; k < sizeof pols / sizeof pols[0]; k++) {
        struct sim_result res;
        assert_int_equal(run_checked(&w, &c, pols[k], &res), 0);
        preempted += res.preemptions;
        sim_result_free(&res);
    }
    assert_true(preempted > 0);
    sim_cluster_free(&c);
    sim_workload_free(&w);

    /* a request that fits nowhere fails, exactly once */
    sim_workload_init(&w);
    struct sim_seg big = { 1, 70000, 1 }, small = { 2, 100, 1 };
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_workload_add(&w, 0, 10, &small, 1, 0, 0, &err), 0);
    assert_int_equal(sim_workload_add(&w, 1000, 10, &big, 1, 0, 0, &err), 0);
    assert_int_equal(sim_workload_add(&w, 2000, 10, &small, 1, 0, 0, &err), 0);
    parse_cluster("2xa30", &c);
    struct sim_result res;
    assert_int_equal(run_checked(&w, &c, LR_POLICY_ROUND_ROBIN, &res), 0);
    assert_int_equal(res.failed, 1);
    assert_int_equal(res.state[1], REQ_FAILED);
    assert_int_equal(res.completed, 2);
    sim_result_free(&res);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

static void
test_regions(void **state)
{
    (void)state;
    struct sim_workload w;
    build("wildchat", 300, 10, 9, &w);
    struct sim_cluster c;
    parse_cluster("regions:2", &c);
    assert_int_equal(c.n, 6);
    assert_int_equal(c.inst[5].rtt_us, 456000);
    struct sim_result a, b;
    assert_int_equal(run_checked(&w, &c, LR_POLICY_GORGO, &a), 0);
    assert_int_equal(run_checked(&w, &c, LR_POLICY_ROUND_ROBIN, &b), 0);
    /* TTFT includes the RTT: round-robin sends a third of the requests
     * 456 ms away, so its median cannot beat the nearest region's RTT */
    assert_true(b.ttft_p50_s > 0.037);
    assert_true(a.ttft_p50_s < b.ttft_p50_s);
    sim_result_free(&a);
    sim_result_free(&b);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

static char *
render(const struct sim_workload *w, const struct sim_cluster *c,
       const int32_t *pols, size_t n, int json)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    struct sim_result *runs = calloc(n, sizeof *runs);
    assert_non_null(runs);
    for (size_t k = 0; k < n; k++) {
        cfg.policy = pols[k];
        struct sim_err err = { { 0 } };
        if (sim_run(&cfg, &runs[k], &err) != 0)
            fail_msg("%s", err.msg);
    }
    struct sim_report rep = { "workload test", w, c, &cfg, 1.0, runs, n,
                              NULL, 0, 0, 1 };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    if (json)
        assert_int_equal(sim_report_json(f, &rep, 0), 0);
    else
        assert_int_equal(sim_report_svg(f, &rep), 0);
    fclose(f);
    for (size_t k = 0; k < n; k++)
        sim_result_free(&runs[k]);
    free(runs);
    return buf;
}

/* Same seed, same bytes (measured timings left out); another seed,
 * other bytes. */
static void
test_deterministic(void **state)
{
    (void)state;
    int32_t pols[] = { LR_POLICY_RANDOM, LR_POLICY_DUALMAP, LR_POLICY_GORGO,
                       LR_POLICY_PREFIX_CACHE_AND_LOAD };
    struct sim_cluster c;
    parse_cluster("2xh100+2xa100", &c);
    struct sim_workload w1, w2, w3;
    build("share-mixed", 300, 12, 11, &w1);
    build("share-mixed", 300, 12, 11, &w2);
    build("share-mixed", 300, 12, 12, &w3);
    char *a = render(&w1, &c, pols, 4, 1);
    char *b = render(&w2, &c, pols, 4, 1);
    char *d = render(&w3, &c, pols, 4, 1);
    assert_string_equal(a, b);
    assert_string_not_equal(a, d);
    assert_null(strstr(a, "route_ns"));
    assert_non_null(strstr(a, "\"ttft_p99_s\""));
    char *s1 = render(&w1, &c, pols, 4, 0);
    char *s2 = render(&w2, &c, pols, 4, 0);
    assert_string_equal(s1, s2);
    assert_non_null(strstr(s1, "<polyline"));
    assert_non_null(strstr(s1, "</svg>"));
    free(a);
    free(b);
    free(d);
    free(s1);
    free(s2);
    sim_workload_free(&w1);
    sim_workload_free(&w2);
    sim_workload_free(&w3);
    sim_cluster_free(&c);
}

/* Every generator: n requests, sorted, deterministic for a seed. */
static void
test_generators(void **state)
{
    (void)state;
    for (const struct sim_generator *g = sim_generators; g->name; g++) {
        struct sim_workload a, b;
        build(g->name, 500, 0, 4, &a);
        build(g->name, 500, 0, 4, &b);
        assert_int_equal(a.n_reqs, 500);
        assert_int_equal(a.n_segs, b.n_segs);
        assert_memory_equal(a.reqs, b.reqs, a.n_reqs * sizeof *a.reqs);
        assert_memory_equal(a.segs, b.segs, a.n_segs * sizeof *a.segs);
        for (size_t q = 1; q < a.n_reqs; q++)
            assert_true(a.reqs[q - 1].arrival_us <= a.reqs[q].arrival_us);
        struct sim_workload_info wi;
        sim_workload_info(&a, &wi);
        assert_true(wi.duration_s > 0);
        assert_non_null(sim_generator_find(a.name));
        sim_workload_free(&a);
        sim_workload_free(&b);
    }
    /* the rate is what was asked, within Poisson noise */
    struct sim_workload w;
    build("conversation", 4000, 20, 1, &w);
    struct sim_workload_info wi;
    sim_workload_info(&w, &wi);
    double rate = (double)wi.requests / wi.duration_s;
    assert_true(rate > 17 && rate < 23);
    sim_workload_free(&w);
}

static void
test_cluster_specs(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        uint32_t n;
    } good[] = {
        { "8", 8 },           { "8xa100", 8 },   { "a100", 1 },
        { "4xh100+4xa100", 8 }, { "4xa30+4xv100-nocache", 8 },
        { "2xa100@279ms", 2 }, { "3xl20@0.5", 3 }, { "regions", 12 },
        { "regions:1", 3 },   { "lodestar", 8 },  { "hetero", 8 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct sim_cluster c;
        parse_cluster(good[i].spec, &c);
        assert_int_equal(c.n, good[i].n);
        sim_cluster_free(&c);
    }
    struct sim_cluster c;
    parse_cluster("4xa30+4xv100-nocache@12ms", &c);
    assert_int_equal(c.inst[0].prefix_caching, 1);
    assert_int_equal(c.inst[7].prefix_caching, 0);
    assert_int_equal(c.inst[7].rtt_us, 12000);
    assert_string_equal(c.inst[7].cls->name, "v100");
    sim_cluster_free(&c);
    static const struct {
        const char *spec, *why;
    } bad[] = {
        { "", "empty" },
        { "0", "count must be" },
        { "4xfoo", "unknown class \"foo\"" },
        { "4xa100+", "empty" },
        { "4ya100", "expected 'x'" },
        { "4xa100@-3", "RTT" },
        { "4xa100-cache", "unexpected" },
        { "2000", "count must be" },
        { "regions:0", "regions:K" },
        { "600xa100+600xa100", "more than" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sim_err err = { { 0 } };
        if (sim_cluster_parse(bad[i].spec, &c, &err) != -1 ||
            strstr(err.msg, bad[i].why) == NULL)
            fail_msg("\"%s\": \"%s\", wanted \"%s\"", bad[i].spec, err.msg,
                     bad[i].why);
        sim_cluster_free(&c);
    }
}

static void
test_percentile(void **state)
{
    (void)state;
    double v[] = { 1, 2, 3, 4 };
    assert_true(fabs(sim_percentile(v, 4, 50) - 2.5) < 1e-12);
    assert_true(sim_percentile(v, 4, 100) == 4);
    assert_true(sim_percentile(v, 4, 0) == 1);
    assert_true(isnan(sim_percentile(v, 0, 50)));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conservation_all_policies),
        cmocka_unit_test(test_conservation_pressure),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_generators),
        cmocka_unit_test(test_cluster_specs),
        cmocka_unit_test(test_percentile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
