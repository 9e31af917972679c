/* lrsim tests: whole runs through the library. Conservation of requests
 * and tokens for every policy, on homogeneous, heterogeneous, memory-tight
 * and cross-region clusters; identical output for a seed; the generators;
 * cluster specs; multi-model fleets (a request reaches only its model's
 * engines) and LoRA traffic; TPOT against the engine's step times. */
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
#if defined(__linux__)
#include <sys/resource.h>
#endif

#include "cluster.h"
#include "fit.h"
#include "params.h"
#include "report.h"
#include "sim.h"
#include "suite.h"
#include "trace.h"
#include "workload.h"

/* Engine invariants (sim_engine_verify, a pass over every KV block, the
 * prefix table and the free queue) are checked after an engine's first
 * step and every VERIFY_EVERY-th after, and of every engine at the end of
 * the run (sim_config.verify_engines). After every step they were 99% of
 * this program's time, minutes of checks for runs that take a second
 * without them. Every step is checked where engines preempt
 * (test_conservation_pressure) and in test_engine's own runs. */
#define VERIFY_EVERY 8

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

/* The books of a finished run, checked from outside. */
static void
check_books(const struct sim_workload *w, const struct sim_cluster *c,
            const struct sim_result *res)
{
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
            /* one step (>= 1 us) per output token after the first; with
             * no move, first and last token came back over one RTT */
            assert_true(res->decode_us[q] + 1 >= w->reqs[q].output_tokens);
            if (res->moves == 0)
                assert_int_equal(res->decode_us[q],
                                 res->e2e_us[q] - res->ttft_us[q]);
            double tpot;
            assert_int_equal(sim_req_tpot(res, w, q, &tpot),
                             w->reqs[q].output_tokens >= 2);
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
}

/* Run, the engines' invariants checked every verify-th step, and check
 * the books from outside too. Returns sim_run's code. */
static int
run_checked_every(const struct sim_workload *w, const struct sim_cluster *c,
                  int32_t policy, int verify, struct sim_result *res)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.policy = policy;
    cfg.verify_engines = verify;
    struct sim_err err = { { 0 } };
    int rc = sim_run(&cfg, res, &err);
    if (rc == 1)
        return 1; /* not supported by this libroute */
    if (rc != 0)
        fail_msg("%s: %s", lr_policy_name((lr_policy)policy), err.msg);
    check_books(w, c, res);
    return 0;
}

static int
run_checked(const struct sim_workload *w, const struct sim_cluster *c,
            int32_t policy, struct sim_result *res)
{
    return run_checked_every(w, c, policy, VERIFY_EVERY, res);
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
    /* every one, lodestar included (with the library's 5000 samples it
     * never trains here; test_lodestar_learns checks a trained one) */
    assert_int_equal(ran, (int)lr_policy_count());
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
        assert_int_equal(run_checked_every(&w, &c, pols[k], 1, &res), 0);
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
    assert_int_equal(run_checked_every(&w, &c, LR_POLICY_ROUND_ROBIN, 1, &res),
                     0);
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
                              NULL, 0, 0, 1, 0, 0, NULL };
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

/* Gateway replicas: every front and sync balances its books, runs the
 * same twice, and exchanged what its sync says; sharing beats not
 * sharing on a conversation workload; one "replica" is the plain run. */
static void
run_rep(const struct sim_workload *w, const struct sim_cluster *c,
        int32_t policy, const char *front, const char *sync, uint32_t n,
        struct sim_result *res)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.policy = policy;
    cfg.verify_engines = VERIFY_EVERY;
    cfg.rep.n = n;
    struct sim_err err = { { 0 } };
    if (sim_front_parse(front, &cfg.rep, &err) != 0 ||
        sim_sync_parse(sync, &cfg.rep, &err) != 0)
        fail_msg("%s", err.msg);
    if (sim_run(&cfg, res, &err) != 0)
        fail_msg("%s %s %s: %s", lr_policy_name((lr_policy)policy), front,
                 sync, err.msg);
    check_books(w, c, res);
}

static void
test_replicas(void **state)
{
    (void)state;
    struct sim_workload w;
    build("conversation", 500, 14, 5, &w);
    struct sim_cluster c;
    parse_cluster("6xa100", &c);
    const int32_t pol = LR_POLICY_PREFIX_CACHE_AND_LOAD;
    static const char *const fronts[] = { "random", "round-robin", "session" };
    static const char *const syncs[] = { "none",           "events",
                                         "deltas:100",     "deltas:250:0.3",
                                         "events+deltas:100", "events+learn" };
    double hit[6] = { 0 };
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 6; k++) {
            struct sim_result a, b;
            memset(&b, 0, sizeof b);
            run_rep(&w, &c, pol, fronts[f], syncs[k], 3, &a);
            assert_int_equal(a.replicas, 3);
            if (f == 0) { /* the same twice */
                run_rep(&w, &c, pol, fronts[f], syncs[k], 3, &b);
                assert_true(a.ttft_mean_s == b.ttft_mean_s &&
                            a.hit_tokens == b.hit_tokens);
            }
            assert_int_equal(a.kv_events > 0, k == 1 || k >= 4);
            assert_int_equal(a.deltas_sent > 0, k >= 2 && k <= 4);
            assert_int_equal(a.gauges_sent > 0, k >= 1);
            assert_int_equal(a.deltas_dropped > 0, k == 3);
            if (f == 0)
                hit[k] = a.cache_hit_rate;
            sim_result_free(&a);
            sim_result_free(&b);
        }
    /* not sharing loses hits; events and deltas keep them */
    assert_true(hit[0] < 0.85 * hit[1]);
    assert_true(hit[0] < 0.85 * hit[2]);
    assert_true(hit[0] < 0.85 * hit[4]);
    assert_true(hit[0] < 0.85 * hit[5]);
    /* one replica is a single router, whatever the sync */
    struct sim_result one, plain;
    run_rep(&w, &c, pol, "random", "deltas:100", 1, &one);
    assert_int_equal(run_checked(&w, &c, pol, &plain), 0);
    assert_true(one.ttft_mean_s == plain.ttft_mean_s &&
                one.hit_tokens == plain.hit_tokens);
    assert_int_equal(one.deltas_sent + one.gauges_sent, 0);
    sim_result_free(&one);
    sim_result_free(&plain);
    /* the options */
    struct sim_replicas r = { 0 };
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_sync_parse("deltas:0", &r, &err), -1);
    assert_int_equal(sim_sync_parse("deltas:10:1", &r, &err), -1);
    assert_int_equal(sim_sync_parse("deltas:10:0.5x", &r, &err), -1);
    assert_int_equal(sim_sync_parse("gossip", &r, &err), -1);
    assert_int_equal(sim_sync_parse("events+", &r, &err), -1);
    assert_int_equal(sim_sync_parse("events+none", &r, &err), -1);
    assert_int_equal(sim_sync_parse("events+events", &r, &err), -1);
    assert_int_equal(sim_sync_parse("events+deltas:50:0.1", &r, &err), 0);
    assert_int_equal(r.sync, SIM_SYNC_EVENTS_DELTAS);
    assert_int_equal(r.delta_us, 50000);
    assert_true(sim_sync_events(&r) && sim_sync_deltas(&r));
    char desc[96];
    r.n = 4;
    sim_replicas_describe(&r, desc, sizeof desc);
    assert_string_equal(desc, "4 x random, events+deltas:50:0.1");
    assert_int_equal(sim_sync_parse("events+learn", &r, &err), 0);
    assert_int_equal(r.sync, SIM_SYNC_EVENTS_LEARN);
    assert_true(sim_sync_events(&r) && !sim_sync_deltas(&r));
    sim_replicas_describe(&r, desc, sizeof desc);
    assert_string_equal(desc, "4 x random, events+learn");
    assert_int_equal(sim_sync_parse("events+learn:10", &r, &err), -1);
    assert_int_equal(sim_front_parse("sticky", &r, &err), -1);
    assert_int_equal(sim_sync_parse("deltas:2.5:0.25", &r, &err), 0);
    assert_int_equal(r.delta_us, 2500);
    assert_true(r.loss == 0.25);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* A rounded trace's bursts, spread: same requests, arrival order sorted,
 * each within its window, deterministic. */
static void
test_spread(void **state)
{
    (void)state;
    struct sim_workload w;
    build("conversation", 200, 14, 5, &w);
    for (size_t q = 0; q < w.n_reqs; q++) /* bursts every 3 s */
        w.reqs[q].arrival_us = (q / 10) * 3000000ull;
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_workload_spread(&w, 3000000, 1, &err), 0);
    for (size_t q = 1; q < w.n_reqs; q++)
        assert_true(w.reqs[q - 1].arrival_us <= w.reqs[q].arrival_us);
    assert_true(w.reqs[w.n_reqs - 1].arrival_us < 20 * 3000000ull);
    assert_true(w.reqs[1].arrival_us != w.reqs[2].arrival_us);
    sim_workload_free(&w);
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
        { "4097", "count must be 1..4096 (lrsim's limit of instances)" },
        { "regions:0", "regions:K" },
        { "regions:1366", "regions:K needs K in 1..1365" },
        { "4000+97", "more than 4096 instances (lrsim's limit)" },
        { "2048xh100+2049xa100", "more than 4096 instances" },
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

/* ---- the largest fleet ----------------------------------------------------------- */

/* A short trace on lrsim's largest fleet, 4096 x a100 (SIM_MAX_INSTANCES):
 * 200 conversations of three turns over four shared system prompts, each
 * turn of every conversation within one second. For a load-only and a
 * cache-aware policy every request ends once and the books balance;
 * least-request spreads each burst over idle engines, so hundreds of
 * instances serve, the last one's id included in the range, and
 * prefix-cache-and-load finds the conversations' earlier turns. The
 * engines write only the memory they use (engine.c, "Memory"): 4096
 * engines' arrays written at create were 2.4 GB (sim-sim runs under
 * MALLOC_PERTURB_, which writes every calloc). One more instance is
 * refused (test_cluster_specs). */
static void
test_largest_fleet(void **state)
{
    (void)state;
    struct sim_cluster c;
    parse_cluster("4096", &c);
    assert_int_equal(c.n, SIM_MAX_INSTANCES);
    assert_string_equal(c.inst[0].name, "a100-00");
    assert_string_equal(c.inst[4095].name, "a100-4095");
    struct sim_workload w;
    sim_workload_init(&w);
    struct sim_trace_rec rec;
    memset(&rec, 0, sizeof rec);
    for (unsigned turn = 0; turn < 3; turn++)
        for (unsigned conv = 0; conv < 200; conv++) {
            /* system prompt (2 blocks), then one block per turn */
            char line[256];
            unsigned sys = conv % 4, blocks = 3 + turn;
            int n = snprintf(line, sizeof line,
                             "{\"timestamp\": %u, \"input_length\": %u, "
                             "\"output_length\": %u, \"session_id\": %u, "
                             "\"hash_ids\": [%u, %u",
                             1000 * turn + 5 * conv, 512 * blocks - 100,
                             8 + conv % 16, conv, 2 * sys, 2 * sys + 1);
            for (unsigned k = 0; k <= turn; k++)
                n += snprintf(line + n, sizeof line - (size_t)n, ", %u",
                              1000 + 10 * conv + k);
            snprintf(line + n, sizeof line - (size_t)n, "]}");
            struct sim_err err = { { 0 } };
            if (sim_trace_parse_line(line, strlen(line), SIM_TRACE_BLOCK,
                                     &rec, &err) != 0 ||
                sim_trace_add(&w, &rec, SIM_TRACE_BLOCK, &err) != 0)
                fail_msg("%s: %s", line, err.msg);
        }
    free(rec.hash_ids);
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_workload_sort(&w, &err), 0);
    static const int32_t policies[] = { LR_POLICY_LEAST_REQUEST,
                                        LR_POLICY_PREFIX_CACHE_AND_LOAD };
    for (size_t k = 0; k < 2; k++) {
        struct sim_config cfg;
        sim_config_init(&cfg);
        cfg.w = &w;
        cfg.c = &c;
        cfg.policy = policies[k];
        struct sim_result res;
        if (sim_run(&cfg, &res, &err) != 0)
            fail_msg("%s: %s", lr_policy_name((lr_policy)policies[k]),
                     err.msg);
        check_books(&w, &c, &res);
        assert_int_equal(res.completed, w.n_reqs);
        assert_int_equal(res.n_inst, SIM_MAX_INSTANCES);
        uint32_t used = 0;
        for (uint32_t i = 0; i < c.n; i++)
            used += res.per_inst[i].requests > 0;
        if (k == 0)
            assert_true(used >= 400);
        else
            assert_true(res.cache_hit_rate > 0.3);
        sim_result_free(&res);
    }
#if defined(__linux__)
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    if (ru.ru_maxrss > 1024L * 1024L) /* KiB */
        fail_msg("peak RSS %ld MiB on 4096 engines", ru.ru_maxrss / 1024);
#endif
    sim_workload_free(&w);
    sim_cluster_free(&c);
}

/* ---- lodestar ------------------------------------------------------------------ */

static void
lodestar_config(struct sim_config *cfg, const struct sim_workload *w,
                const struct sim_cluster *c)
{
    sim_config_init(cfg);
    cfg->w = w;
    cfg->c = c;
    cfg->policy = LR_POLICY_LODESTAR;
    cfg->lodestar_min = 100;
    cfg->lodestar_every = 100;
    cfg->lodestar_epochs = 5;
    cfg->verify_engines = VERIFY_EVERY;
}

static void
run_or_fail(const struct sim_config *cfg, struct sim_result *res)
{
    struct sim_err err = { { 0 } };
    if (sim_run(cfg, res, &err) != 0)
        fail_msg("%s", err.msg);
}

/* Lodestar end to end with a small min_samples: it trains, its model
 * decides, the books balance as for every policy, the curve is complete
 * and the samples it keeps are well formed. */
static void
test_lodestar_learns(void **state)
{
    (void)state;
    struct sim_workload w;
    build("share-mixed", 600, 1.5, 21, &w);
    struct sim_cluster c;
    parse_cluster("2xa30+2xv100-nocache", &c);
    struct sim_result res;
    assert_int_equal(run_checked(&w, &c, LR_POLICY_LODESTAR, &res), 0);
    sim_result_free(&res); /* library defaults: 5000 samples, never trains */

    struct sim_config cfg;
    lodestar_config(&cfg, &w, &c);
    cfg.keep_samples = 1;
    run_or_fail(&cfg, &res);
    check_books(&w, &c, &res); /* as for every policy */
    assert_true(res.learn_rounds >= 1);
    assert_true(res.learn_steps >= 1);
    assert_true(res.by_reason[LR_REASON_COLD_START] > 0);
    assert_true(res.by_reason[LR_REASON_MIN_COST] +
                    res.by_reason[LR_REASON_EXPLORE] +
                    res.by_reason[LR_REASON_K_FILTER] >
                0);
    assert_true(res.pred_n > 0 && res.pred_mae >= 0);
    /* the curve: one point per step and one at the end; its "since"
     * counts add up to the run's */
    assert_int_equal(res.n_curve, res.learn_steps + 1);
    uint64_t dec = 0, by[SIM_REASONS] = { 0 }, trained = 0;
    for (size_t k = 0; k < res.n_curve; k++) {
        const struct sim_learn_point *p = &res.curve[k];
        if (k > 0) {
            assert_true(p->t_s >= res.curve[k - 1].t_s);
            assert_true(p->samples >= res.curve[k - 1].samples);
            assert_true(p->model_round >= res.curve[k - 1].model_round);
        }
        dec += p->decisions;
        trained += (uint64_t)p->trained;
        for (int j = 0; j < SIM_REASONS; j++)
            by[j] += p->by_reason[j];
    }
    assert_int_equal(trained, res.learn_rounds);
    assert_int_equal(dec, w.n_reqs - res.route_errors);
    assert_memory_equal(by, res.by_reason, sizeof by);
    assert_true(!isnan(res.curve[res.n_curve - 1].online_mae));
    /* samples: FIFO + replay, rows of 20 finite features and a reward of
     * minus a TTFT */
    assert_true(res.n_samples >= 100);
    assert_true(res.n_samples <= res.learn_samples);
    for (size_t i = 0; i < res.n_samples; i++) {
        const float *row = res.samples + i * (LR_LODESTAR_FEATURES + 1);
        for (size_t j = 0; j <= LR_LODESTAR_FEATURES; j++)
            assert_true(isfinite(row[j]));
        assert_true(row[LR_LODESTAR_FEATURES] < 0);
        assert_true(row[0] >= 1000 && row[0] <= 10000); /* prompt tokens */
    }
    /* the CSV: a header and one line per sample, 21 columns each */
    struct sim_report rep = { "workload test", &w, &c, &cfg, 1.0, &res, 1,
                              NULL, 0, 0, 1, 0, 0, NULL };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(sim_report_samples_csv(f, &rep), 0);
    fclose(f);
    size_t lines = 0, commas = 0;
    for (size_t i = 0; i < len; i++) {
        lines += buf[i] == '\n';
        commas += buf[i] == ',';
    }
    assert_int_equal(lines, res.n_samples + 1);
    assert_int_equal(commas, LR_LODESTAR_FEATURES * (res.n_samples + 1));
    assert_true(strncmp(buf, "prompt_tokens,", 14) == 0);
    free(buf);
    sim_result_free(&res);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* A run is a function of its options and seed, training included: the
 * same bytes twice (curve and all). */
static void
test_lodestar_deterministic(void **state)
{
    (void)state;
    struct sim_workload w;
    build("share-mixed", 500, 1.5, 5, &w);
    struct sim_cluster c;
    parse_cluster("2xa30+2xv100-nocache", &c);
    char *doc[2];
    for (int k = 0; k < 2; k++) {
        struct sim_config cfg;
        lodestar_config(&cfg, &w, &c);
        struct sim_result res;
        run_or_fail(&cfg, &res);
        assert_true(res.learn_rounds >= 1);
        struct sim_report rep = { "workload test", &w, &c, &cfg, 1.0, &res,
                                  1, NULL, 0, 0, 1, 0, 0, NULL };
        size_t len = 0;
        FILE *f = open_memstream(&doc[k], &len);
        assert_non_null(f);
        assert_int_equal(sim_report_json(f, &rep, 0), 0);
        fclose(f);
        sim_result_free(&res);
    }
    assert_string_equal(doc[0], doc[1]);
    assert_non_null(strstr(doc[0], "\"curve\""));
    assert_non_null(strstr(doc[0], "\"online_mae_s\""));
    assert_null(strstr(doc[0], "step_wall_s"));
    free(doc[0]);
    free(doc[1]);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* Frozen from the start: steps never run, so no model and every decision
 * is the cold-start fallback; the curve still has its points. Parameters
 * reach the router: no exploration at epsilon 0. Split windows add up. */
static void
test_lodestar_freeze_and_params(void **state)
{
    (void)state;
    struct sim_workload w;
    build("share-mixed", 400, 1.5, 8, &w);
    struct sim_cluster c;
    parse_cluster("2xa30+2xv100-nocache", &c);
    struct sim_config cfg;
    lodestar_config(&cfg, &w, &c);
    cfg.freeze_us = 0;
    struct sim_result res;
    run_or_fail(&cfg, &res);
    assert_int_equal(res.learn_steps, 0);
    assert_int_equal(res.learn_rounds, 0);
    assert_true(res.n_curve > 1);
    assert_int_equal(res.by_reason[LR_REASON_COLD_START],
                     w.n_reqs - res.route_errors);
    assert_true(isnan(res.pred_mae));
    sim_result_free(&res);

    struct sim_param p[2];
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_param_parse("lodestar-epsilon=0", &p[0], &err), 0);
    assert_int_equal(sim_param_parse("lodestar-ood=0", &p[1], &err), 0);
    lodestar_config(&cfg, &w, &c);
    cfg.params = p;
    cfg.n_params = 2;
    cfg.split_us = 60000000;
    run_or_fail(&cfg, &res);
    assert_true(res.learn_rounds >= 1);
    assert_int_equal(res.by_reason[LR_REASON_EXPLORE], 0);
    assert_int_equal(res.by_reason[LR_REASON_OOD], 0);
    assert_true(res.by_reason[LR_REASON_MIN_COST] > 0);
    assert_true(res.has_split);
    assert_int_equal(res.before.requests + res.after.requests, w.n_reqs);
    assert_int_equal(res.before.completed + res.after.completed,
                     res.completed);
    assert_int_equal(res.before.pred_n + res.after.pred_n, res.pred_n);
    assert_int_equal(res.before.pred_n, 0); /* no model before 60 s */
    sim_result_free(&res);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* --param NAME=VALUE: every lr_param has a name that parses with its
 * default; unknown names, bad values, fractions for integer keys and
 * values out of bounds are refused with a message saying which. */
static void
test_params(void **state)
{
    (void)state;
    for (int32_t k = 0; k < (int32_t)lr_param_count(); k++) {
        const char *name = sim_param_name(k);
        assert_non_null(name);
        lr_bounds b = lr_param_bounds(k);
        assert_int_equal(b.status, LR_OK);
        char arg[128];
        snprintf(arg, sizeof arg, "%s=%.17g", name, b.def);
        struct sim_param p;
        struct sim_err err = { { 0 } };
        if (sim_param_parse(arg, &p, &err) != 0)
            fail_msg("%s: %s", arg, err.msg);
        assert_int_equal(p.key, k);
        assert_true(p.value == b.def);
    }
    assert_null(sim_param_name(-1));
    assert_null(sim_param_name((int32_t)lr_param_count()));
    struct sim_param p;
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_param_parse("lodestar-candidates=4", &p, &err), 0);
    assert_int_equal(p.key, LR_PARAM_LODESTAR_CANDIDATES);
    assert_true(p.value == 4);
    assert_int_equal(sim_param_parse("lodestar-fallback=least-request", &p,
                                     &err),
                     0);
    assert_true(p.value == LR_POLICY_LEAST_REQUEST);
    assert_int_equal(sim_param_parse("aibrix-imbalance=1e1", &p, &err), 0);
    assert_true(p.value == 10);
    static const struct {
        const char *arg, *why;
    } bad[] = {
        { "lodestar-epsilon", "expected NAME=VALUE" },
        { "=3", "expected NAME=VALUE" },
        { "nope=1", "unknown parameter 'nope'" },
        { "lodestar-epsilon=abc", "expected a number" },
        { "lodestar-epsilon=", "expected a number" },
        { "lodestar-epsilon=nan", "expected a number" },
        { "lodestar-epsilon=1.5", "out of range" },
        { "lodestar-epsilon=-0.1", "out of range" },
        { "lodestar-candidates=2.5", "whole number" },
        { "lodestar-fallback=lodestar", "out of range" },
        { "lodestar-fallback=nope", "expected a number" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sim_err e = { { 0 } };
        if (sim_param_parse(bad[i].arg, &p, &e) != -1 ||
            strstr(e.msg, bad[i].why) == NULL)
            fail_msg("\"%s\": \"%s\", wanted \"%s\"", bad[i].arg, e.msg,
                     bad[i].why);
    }
}

/* ---- lrsim-fit ------------------------------------------------------------------- */

static int
read_csv(const char *text, struct sim_dataset *ds, struct sim_err *err)
{
    FILE *f = fmemopen((void *)(uintptr_t)text, strlen(text), "r");
    assert_non_null(f);
    int rc = sim_dataset_read(f, "t.csv", ds, err);
    fclose(f);
    return rc;
}

static void
test_fit(void **state)
{
    (void)state;
    struct sim_dataset ds;
    struct sim_err err = { { 0 } };
    assert_int_equal(read_csv("a,b,y\n1,2,3\n\n4, 5 ,6\r\n", &ds, &err), 0);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.d, 2);
    assert_true(ds.x[2] == 4 && ds.x[3] == 5 && ds.y[1] == 6);
    sim_dataset_free(&ds);
    static const struct {
        const char *text, *why;
    } bad[] = {
        { "", "empty" },
        { "y\n1\n", "at least one feature" },
        { "a,y\n1,2\n1\n", "t.csv:3: 1 columns" },
        { "a,y\n1,2,3\n", "t.csv:2: more columns" },
        { "a,y\n1,x\n", "t.csv:2: column 2: not a finite number" },
        { "a,y\nnan,1\n", "t.csv:2: column 1" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sim_err e = { { 0 } };
        if (read_csv(bad[i].text, &ds, &e) != -1 ||
            strstr(e.msg, bad[i].why) == NULL)
            fail_msg("case %zu: \"%s\", wanted \"%s\"", i, e.msg,
                     bad[i].why);
    }
    /* least squares recovers an exact linear law, a constant column and
     * a duplicated (collinear) column notwithstanding */
    struct sim_rng g;
    sim_rng_seed(&g, 1);
    ds.n = 400;
    ds.d = 4;
    ds.x = calloc(ds.n * ds.d, sizeof *ds.x);
    ds.y = calloc(ds.n, sizeof *ds.y);
    assert_true(ds.x != NULL && ds.y != NULL);
    for (size_t i = 0; i < ds.n; i++) {
        double *x = ds.x + i * ds.d;
        x[0] = sim_rng_unit(&g) * 100;
        x[1] = sim_rng_unit(&g) - 0.5;
        x[2] = 7;
        x[3] = x[1];
        ds.y[i] = 2 + 0.03 * x[0] - 4 * (x[1] + x[3]) / 2;
    }
    size_t *idx = calloc(ds.n, sizeof *idx);
    assert_non_null(idx);
    sim_shuffle_index(idx, ds.n, 9);
    size_t seen = 0;
    for (size_t i = 0; i < ds.n; i++)
        seen += idx[i] < ds.n;
    assert_int_equal(seen, ds.n);
    double coef[5];
    assert_int_equal(sim_fit_linear(&ds, idx, 320, 1e-9, coef, &err), 0);
    struct sim_score lin, mean, mtr, mte;
    sim_score_linear(&ds, idx + 320, 80, coef, &lin);
    assert_true(lin.mse < 1e-10);
    assert_true(fabs(coef[1] - 0.03) < 1e-6);
    assert_true(fabs(coef[3]) < 1e-12); /* the constant column */
    /* a law linear regression cannot follow: the network does better */
    for (size_t i = 0; i < ds.n; i++) {
        double *x = ds.x + i * ds.d;
        ds.y[i] = 10 * x[1] * x[1];
    }
    sim_score_mean(&ds, idx, 320, idx + 320, 80, &mean);
    assert_int_equal(sim_fit_linear(&ds, idx, 320, 1e-6, coef, &err), 0);
    sim_score_linear(&ds, idx + 320, 80, coef, &lin);
    assert_int_equal(sim_fit_mlp(&ds, idx, 320, idx + 320, 80, 3, 60, &mtr,
                                 &mte, &err),
                     0);
    assert_true(mte.mse < lin.mse);
    assert_true(lin.mse > 0.5 * mean.mse); /* the line is no help */
    free(idx);
    sim_dataset_free(&ds);
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

/* ---- TPOT ------------------------------------------------------------------------ */

/* A step of decoding sequences only, at these contexts, as the engine
 * model times it (docs/simulator.md, "Step time"): whole microseconds. */
static uint64_t
decode_step_us(const struct sim_class *k, const uint32_t *ctx, size_t n,
               double prefill_us)
{
    double t = k->overhead_us;
    for (size_t i = 0; i < n; i++)
        t += k->decode_seq_us + (double)ctx[i] * k->decode_ctx_us;
    t += prefill_us;
    uint64_t us = (uint64_t)(t + 0.5);
    return us ? us : 1;
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

/* TPOT on one a100, against the step times of the engine model. One
 * request alone: its decode steps, one sequence each, at a context one
 * token longer each time. Two arriving together: the first's prefill
 * runs alone, the second's in the next step beside the first's decode,
 * then both decode in batches of two, each step slower than one
 * sequence's; a request of one output token has no TPOT. */
static void
test_tpot(void **state)
{
    (void)state;
    const struct sim_class *k = sim_class_find("a100");
    assert_non_null(k);
    struct sim_cluster c;
    parse_cluster("1xa100", &c);
    const uint32_t P = 64, N = 9;

    struct sim_workload w;
    sim_workload_init(&w);
    add_req(&w, 0, 1, P, N);
    struct sim_result res;
    assert_int_equal(run_checked(&w, &c, LR_POLICY_LEAST_REQUEST, &res), 0);
    uint64_t alone = 0;
    for (uint32_t j = 0; j < N - 1; j++) {
        uint32_t ctx = P + j;
        alone += decode_step_us(k, &ctx, 1, 0);
    }
    assert_int_equal(res.decode_us[0], alone);
    double tpot1 = (double)alone / 1e6 / (double)(N - 1);
    double got;
    assert_true(sim_req_tpot(&res, &w, 0, &got));
    assert_true(got == tpot1);
    assert_int_equal(res.tpot_n, 1);
    assert_true(res.tpot_mean_s == tpot1);
    assert_true(res.tpot_p50_s == tpot1 && res.tpot_p99_s == tpot1);
    /* a100's decode step of one short sequence: about 8 ms */
    assert_true(tpot1 > 0.008 && tpot1 < 0.0082);
    sim_result_free(&res);
    sim_workload_free(&w);

    /* request 0 (N + 1 tokens) and 1 (N) together; 2 (1 token) later */
    sim_workload_init(&w);
    add_req(&w, 0, 2, P, N + 1);
    add_req(&w, 0, 3, P, N);
    add_req(&w, 20000000, 4, P, 1);
    assert_int_equal(run_checked(&w, &c, LR_POLICY_LEAST_REQUEST, &res), 0);
    assert_int_equal(res.completed, 3);
    double chunk = (double)P * k->prefill_us *
                   (1.0 + ((double)P / 2.0) / k->ctx_double);
    uint32_t ctx = P;
    uint64_t mixed = decode_step_us(k, &ctx, 1, chunk);
    uint64_t pairs = 0;
    for (uint32_t j = 1; j <= N - 1; j++) {
        uint32_t two[2] = { P + j, P + j - 1 };
        uint64_t step = decode_step_us(k, two, 2, 0);
        uint32_t one = P + j - 1;
        assert_true(step > decode_step_us(k, &one, 1, 0));
        pairs += step;
    }
    assert_int_equal(res.decode_us[0], mixed + pairs);
    assert_int_equal(res.decode_us[1], pairs);
    double t0 = (double)(mixed + pairs) / 1e6 / (double)N;
    double t1 = (double)pairs / 1e6 / (double)(N - 1);
    assert_true(sim_req_tpot(&res, &w, 0, &got) && got == t0);
    assert_true(sim_req_tpot(&res, &w, 1, &got) && got == t1);
    assert_false(sim_req_tpot(&res, &w, 2, &got));
    assert_true(t1 > tpot1);
    assert_int_equal(res.tpot_n, 2);
    double lo = t0 < t1 ? t0 : t1, hi = t0 < t1 ? t1 : t0;
    assert_true(fabs(res.tpot_mean_s - (t0 + t1) / 2) < 1e-12);
    assert_true(fabs(res.tpot_p50_s - (t0 + t1) / 2) < 1e-12);
    assert_true(fabs(res.tpot_p99_s - (lo + 0.99 * (hi - lo))) < 1e-12);
    /* the JSON carries them */
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = &w;
    cfg.c = &c;
    struct sim_report rep = { "workload test", &w, &c, &cfg, 1.0, &res,
                              1, NULL, 0, 0, 1, 0, 0, NULL };
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&json, &len);
    assert_non_null(f);
    assert_int_equal(sim_report_json(f, &rep, 0), 0);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "\"tpot_p50_s\": %.6g", res.tpot_p50_s);
    assert_non_null(strstr(json, want));
    assert_non_null(strstr(json, "\"tpot_mean_s\": "));
    assert_non_null(strstr(json, "\"tpot_p99_s\": "));
    free(json);
    sim_result_free(&res);
    sim_workload_free(&w);
    sim_cluster_free(&c);
}

/* --router-rates modes: what parses, what the library refuses, and the
 * description each run records. */
static void
test_rates(void **state)
{
    (void)state;
    static const char *const ok[] = { "nominal", "none", "scale:0.5",
                                      "scale:0.1", "scale:3" };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        struct sim_rates r;
        struct sim_err err = { { 0 } };
        char buf[40];
        if (sim_rates_parse(ok[k], &r, &err) != 0)
            fail_msg("%s: %s", ok[k], err.msg);
        sim_rates_describe(&r, buf, sizeof buf);
        assert_string_equal(buf, ok[k]);
    }
    static const char *const bad[] = { "",         "Nominal",    "scale:",
                                       "scale:0",  "scale:-1",   "scale:inf",
                                       "scale:2x", "scale:1e12", "none " };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct sim_rates r;
        struct sim_err err = { { 0 } };
        if (sim_rates_parse(bad[k], &r, &err) != -1 || err.msg[0] == '\0')
            fail_msg("'%s' was taken", bad[k]);
    }
    /* zeroed is nominal: a config made without --router-rates */
    struct sim_config cfg;
    sim_config_init(&cfg);
    assert_int_equal(cfg.rates.mode, SIM_RATES_NOMINAL);
}

/* The suite's ratios: per seed to the best policy, a median over seeds,
 * the worst cell and the geometric mean; a policy that did not run, and
 * one whose runs completed nothing. */
static void
test_suite_ratios(void **state)
{
    (void)state;
    /* 2 cells x 3 seeds x 3 policies, [(cell * 3 + seed) * 3 + policy] */
    const double v[] = {
        /* cell 0: A best on seeds 0 and 1, B on seed 2; C did not run on
         * seed 1 */
        1, 2, 4,  2, 3, NAN,  3, 1.5, 6,
        /* cell 1: A best on seed 0, B on seeds 1 and 2; C completed
         * nothing on seed 2 */
        1, 2, 4,  4, 2, 8,  8, 4, INFINITY,
    };
    struct sim_suite_ratios r;
    assert_int_equal(sim_suite_ratios(v, 2, 3, 3, &r), 0);
    const double eps = 1e-12;
    /* per seed */
    assert_true(fabs(r.per_seed[0] - 1) < eps);
    assert_true(fabs(r.per_seed[4] - 1.5) < eps); /* cell 0, seed 1: 3 / 2 */
    assert_true(isnan(r.per_seed[5]));            /* C did not run */
    assert_true(fabs(r.per_seed[6] - 2) < eps);   /* 3 / 1.5 */
    assert_true(isinf(r.per_seed[17]));
    /* medians: cell 0 A {1, 1, 2} = 1, B {2, 1.5, 1} = 1.5, C {4, 4} = 4 */
    assert_true(fabs(r.cell[0] - 1) < eps);
    assert_true(fabs(r.cell[1] - 1.5) < eps);
    assert_true(fabs(r.cell[2] - 4) < eps);
    /* cell 1: A {1, 2, 2}, B {2, 1, 1}: B's median is 1; C {4, 4, inf} */
    assert_true(fabs(r.cell[3] - 2) < eps);
    assert_true(fabs(r.cell[4] - 1) < eps);
    assert_true(fabs(r.cell[5] - 4) < eps);
    /* the unit: the median over seeds of the best value */
    assert_true(fabs(r.best[0] - 1.5) < eps); /* {1, 2, 1.5} */
    assert_true(fabs(r.best[1] - 2) < eps);   /* {1, 2, 4} */
    /* worst cells and geometric means */
    assert_int_equal(r.worst_cell[0], 1);
    assert_true(fabs(r.worst[0] - 2) < eps);
    assert_true(fabs(r.geomean[0] - sqrt(2)) < eps);
    assert_int_equal(r.worst_cell[1], 0);
    assert_true(fabs(r.worst[1] - 1.5) < eps);
    assert_true(fabs(r.worst[2] - 4) < eps);
    sim_suite_ratios_free(&r);

    /* with two seeds the median is the mean: the best on one seed only
     * shows no 1; a policy that never ran has no ratio at all */
    const double w[] = { 1, 2, NAN, 3, 2, NAN };
    assert_int_equal(sim_suite_ratios(w, 1, 2, 3, &r), 0);
    assert_true(fabs(r.cell[0] - 1.25) < eps); /* {1, 1.5} */
    assert_true(fabs(r.cell[1] - 1.5) < eps);  /* {2, 1} */
    assert_true(isnan(r.cell[2]) && isnan(r.worst[2]) && isnan(r.geomean[2]));
    sim_suite_ratios_free(&r);
}

/* The suite's cells: words and quotes, names given and derived, the
 * built-in grid. */
static void
test_suite_cells(void **state)
{
    (void)state;
    char **argv;
    int argc;
    struct sim_err err = { { 0 } };
    assert_int_equal(
        sim_suite_split("  a 'b c'  x\"d'e\" #f g\n", &argv, &argc, &err), 0);
    assert_int_equal(argc, 3);
    assert_string_equal(argv[0], "a");
    assert_string_equal(argv[1], "b c");
    assert_string_equal(argv[2], "xd'e");
    sim_suite_words_free(argv, argc);

    char path[] = "/tmp/lrsim-cells-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("# my cells\n"
          "--trace /data/x/foo.jsonl --cluster 16 --time-scale 0.5\n"
          "   \n"
          "--workload=wildchat --rate 3  # a comment\n"
          "mine: --workload tools-zipf --trace-block 256\n"
          "spaced: --trace 'a b.jsonl'\n",
          f);
    fclose(f);
    struct sim_suite_cells cells;
    if (sim_suite_read(path, &cells, &err) != 0)
        fail_msg("%s", err.msg);
    remove(path);
    assert_int_equal(cells.n, 4);
    assert_string_equal(cells.v[0].name, "foo/16");
    assert_int_equal(cells.v[0].argc, 6);
    assert_non_null(strstr(cells.v[0].where, ":2"));
    assert_string_equal(cells.v[1].name, "wildchat@3");
    assert_string_equal(cells.v[1].args, "--workload=wildchat --rate 3");
    assert_string_equal(cells.v[2].name, "mine");
    assert_string_equal(cells.v[2].argv[0], "--workload");
    assert_string_equal(cells.v[3].args, "--trace \"a b.jsonl\"");
    sim_suite_cells_free(&cells);

    assert_int_equal(sim_suite_builtin(&cells, &err), 0);
    static const char *const names[] = {
        "conversation/8", "conversation/hetero",   "conversation/regions:3",
        "share-mixed/8",  "share-mixed/hetero@10", "wildchat/8",
        "tools-zipf/8",   "system-prompts/8",      "rate-shift/8",
        "lora-zipf100",   "lora-hot",              "lora-shift",
        "models-70-30",   "cpu-offload",           "cpu-offload-none",
    };
    assert_int_equal(cells.n, sizeof names / sizeof names[0]);
    for (size_t k = 0; k < cells.n; k++) {
        assert_string_equal(cells.v[k].name, names[k]);
        assert_non_null(strstr(cells.v[k].args,
                               "--lodestar-min 1000 --lodestar-every 500"));
        /* a built-in cell's name is not one of its arguments */
        assert_int_equal(cells.v[k].argv[0][0], '-');
    }
    sim_suite_cells_free(&cells);
}

/* ---- request classes, tenants, the router's queue ------------------------------------ */

/* --mix, --tenants and --burst: what they accept and refuse, and what they
 * lay over a workload: classes and tenants by their shares, one per
 * session, deterministic; the requests themselves untouched; bursts in
 * the first 1/X of each period, the order kept. */
static void
test_mix(void **state)
{
    (void)state;
    struct sim_mix m;
    struct sim_err err = { { 0 } };
    memset(&m, 0, sizeof m);
    assert_int_equal(sim_mix_parse_classes("interactive=3,batch=7", &m, &err),
                     0);
    assert_int_equal(m.n_cls, 2);
    assert_true(fabs(m.cls[0].share - 0.3) < 1e-12);
    assert_int_equal(m.cls[0].urgency, 0);
    assert_true(m.cls[0].slo_s == 2.0 && m.cls[1].slo_s == 60.0);
    assert_int_equal(m.cls[1].urgency, 4);
    assert_int_equal(sim_mix_parse_classes("chat=1:1:0.5:shed,batch=1:shed",
                                           &m, &err),
                     0);
    assert_true(m.cls[0].sheddable && m.cls[1].sheddable);
    assert_int_equal(m.cls[0].urgency, 1);
    assert_true(m.cls[0].slo_s == 0.5 && m.cls[1].slo_s == 60.0);
    static const char *const bad_cls[] = {
        "", "chat=1", "interactive", "=1", "interactive=-1",
        "interactive=0,batch=0", "x=1:8:1", "x=1:0", "x=1:0:0", "Chat=1:0:1",
        "interactive=1,interactive=1", "x=1:0:1:shed:x",
    };
    for (size_t k = 0; k < sizeof bad_cls / sizeof *bad_cls; k++) {
        memset(&err, 0, sizeof err);
        if (sim_mix_parse_classes(bad_cls[k], &m, &err) == 0)
            fail_msg("--mix %s accepted", bad_cls[k]);
    }
    memset(&m, 0, sizeof m);
    assert_int_equal(sim_mix_parse_tenants("3", &m, &err), 0);
    assert_int_equal(m.n_tenants, 3);
    assert_int_equal(sim_mix_parse_tenants("10,1,1,1", &m, &err), 0);
    assert_int_equal(m.n_tenants, 4);
    assert_true(m.tenant_w[0] == 10 && m.tenant_w[3] == 1);
    static const char *const bad_ten[] = { "0", "65", "1.5", "x", "0,0",
                                           "1,-1" };
    for (size_t k = 0; k < sizeof bad_ten / sizeof *bad_ten; k++)
        assert_int_equal(sim_mix_parse_tenants(bad_ten[k], &m, &err), -1);
    assert_int_equal(sim_mix_parse_burst("4", &m, &err), 0);
    assert_true(m.burst == 4 && m.burst_period_s == 60);
    assert_int_equal(sim_mix_parse_burst("3:20", &m, &err), 0);
    assert_true(m.burst == 3 && m.burst_period_s == 20);
    assert_int_equal(sim_mix_parse_burst("0.5", &m, &err), -1);
    assert_int_equal(sim_mix_parse_burst("2:0", &m, &err), -1);
    char desc[512];
    sim_mix_describe(&m, desc, sizeof desc);
    assert_non_null(strstr(desc, "4 tenants at rates 10:1:1:1"));
    assert_non_null(strstr(desc, "bursts of x3"));

    /* laid over a workload without sessions: shares, and nothing else
     * moves but the arrivals of the bursts */
    struct sim_workload w, plain, again;
    build("tools-zipf", 4000, 30, 7, &w);
    build("tools-zipf", 4000, 30, 7, &plain);
    build("tools-zipf", 4000, 30, 7, &again);
    memset(&m, 0, sizeof m);
    assert_int_equal(sim_mix_parse_classes("interactive=0.3,batch=0.7", &m,
                                           &err),
                     0);
    assert_int_equal(sim_mix_parse_tenants("10,1,1,1", &m, &err), 0);
    assert_int_equal(sim_mix_parse_burst("4:10", &m, &err), 0);
    sim_workload_mix(&w, &m, 7);
    sim_workload_mix(&again, &m, 7);
    assert_true(sim_mix_any(&w.mix));
    size_t by_cls[2] = { 0 }, by_ten[4] = { 0 };
    for (size_t q = 0; q < w.n_reqs; q++) {
        const struct sim_req *a = &w.reqs[q], *b = &plain.reqs[q];
        assert_int_equal(a->input_tokens, b->input_tokens);
        assert_int_equal(a->output_tokens, b->output_tokens);
        assert_int_equal(a->seg_first, b->seg_first);
        assert_int_equal(a->rclass, again.reqs[q].rclass);
        assert_int_equal(a->owner, again.reqs[q].owner);
        assert_true(a->rclass < 2 && a->owner < 4);
        by_cls[a->rclass]++;
        by_ten[a->owner]++;
        /* in the first 10 / 4 s of its 10 s period, order kept */
        assert_true(a->arrival_us % 10000000ull <= 2500000ull);
        assert_true(a->arrival_us / 10000000ull ==
                    b->arrival_us / 10000000ull);
        if (q > 0)
            assert_true(w.reqs[q - 1].arrival_us <= a->arrival_us);
        assert_true(sim_req_slo(&w, q, 5) ==
                    (a->rclass == 0 ? 2.0 : 60.0));
        assert_true(sim_req_slo(&plain, q, 5) == 5.0);
    }
    assert_true(by_cls[0] > 1000 && by_cls[0] < 1400); /* 30% of 4000 */
    assert_true(by_ten[0] > 2900 && by_ten[0] < 3250); /* 10/13 */
    for (int i = 1; i < 4; i++)
        assert_true(by_ten[i] > 220 && by_ten[i] < 400);
    sim_workload_free(&w);
    sim_workload_free(&plain);
    sim_workload_free(&again);

    /* sessions keep one class and one tenant */
    build("conversation", 1500, 14, 3, &w);
    sim_workload_mix(&w, &m, 3);
    for (size_t q = 0; q < w.n_reqs; q++)
        for (size_t j = q + 1; j < w.n_reqs && j < q + 200; j++)
            if (w.reqs[j].session == w.reqs[q].session) {
                assert_int_equal(w.reqs[j].rclass, w.reqs[q].rclass);
                assert_int_equal(w.reqs[j].owner, w.reqs[q].owner);
            }
    sim_workload_free(&w);
}

/* Every request ends one way (served, expired, shed or failed), and the
 * per class and per tenant books add up to it; what waited, expired or
 * was shed agrees with the request's class and with the routers' own
 * counts (sim_run checks those too). */
static void
check_admission(const struct sim_workload *w, const struct sim_result *res)
{
    assert_true(res->has_admission);
    assert_int_equal(res->completed + res->failed + res->expired + res->shed,
                     w->n_reqs);
    uint64_t by_state[5] = { 0 }, waited = 0;
    for (size_t q = 0; q < w->n_reqs; q++) {
        assert_int_equal(res->finishes[q], 1);
        assert_true(res->state[q] >= REQ_DONE && res->state[q] <= REQ_SHED);
        by_state[res->state[q]]++;
        waited += res->waited[q];
        const struct sim_req *rq = &w->reqs[q];
        double slo = sim_req_slo(w, q, 5);
        if (res->state[q] == REQ_EXPIRED) {
            /* only a waiting request expires, at its deadline */
            assert_true(res->waited[q]);
            assert_true(w->mix.n_cls > 0);
            assert_true((double)res->wait_us[q] >= slo * 1e6 - 1);
            assert_true(res->gone_us[q] == rq->arrival_us + res->wait_us[q]);
        }
        if (res->state[q] == REQ_SHED) {
            assert_false(res->waited[q]);
            assert_true(w->mix.cls[rq->rclass].sheddable);
            assert_true(res->gone_us[q] == rq->arrival_us);
        }
        if (res->state[q] == REQ_DONE && res->waited[q])
            assert_true(res->ttft_us[q] > res->wait_us[q]);
        if (res->admit == SIM_ADMIT_NOW)
            assert_false(res->waited[q]);
    }
    assert_int_equal(by_state[REQ_DONE], res->completed);
    assert_int_equal(by_state[REQ_EXPIRED], res->expired);
    assert_int_equal(by_state[REQ_SHED], res->shed);
    assert_int_equal(waited, res->n_waited);
    if (res->admit == SIM_ADMIT_QUEUE) {
        assert_int_equal(res->router_waited, res->n_waited);
        assert_int_equal(res->router_dispatched + res->router_expired,
                         res->n_waited);
        assert_int_equal(res->router_expired, res->expired);
        assert_int_equal(res->router_shed, res->shed);
    }
    uint64_t req = 0, met = 0, done = 0, exp = 0, shed = 0, fail = 0;
    assert_int_equal(res->n_rclasses, w->mix.n_cls);
    for (uint32_t c = 0; c < res->n_rclasses; c++) {
        const struct sim_rclass_result *cr = &res->rclass[c];
        assert_int_equal(cr->requests, cr->completed + cr->expired + cr->shed +
                                           cr->failed);
        assert_true(cr->met <= cr->completed);
        assert_true(cr->slo_attainment >= 0 && cr->slo_attainment <= 1);
        req += cr->requests;
        met += cr->met;
        done += cr->completed;
        exp += cr->expired;
        shed += cr->shed;
        fail += cr->failed;
    }
    if (res->n_rclasses > 0) {
        assert_int_equal(req, w->n_reqs);
        assert_int_equal(done, res->completed);
        assert_int_equal(exp, res->expired);
        assert_int_equal(shed, res->shed);
        assert_int_equal(fail, res->failed);
    }
    req = done = exp = shed = 0;
    double demand = 0, service = 0;
    assert_int_equal(res->n_tenants, w->mix.n_tenants);
    for (uint32_t i = 0; i < res->n_tenants; i++) {
        const struct sim_tenant_result *t = &res->tenant[i];
        assert_int_equal(t->requests, t->completed + t->expired + t->shed +
                                          t->failed);
        req += t->requests;
        done += t->completed;
        demand += t->demand_share;
        service += t->service_share;
    }
    if (res->n_tenants > 0) {
        assert_int_equal(req, w->n_reqs);
        assert_int_equal(done, res->completed);
        assert_true(fabs(demand - 1) < 1e-9);
        assert_true(fabs(service - 1) < 1e-9);
        assert_true(res->jain_windows > 0);
        assert_true(res->jain > 0 && res->jain <= 1 + 1e-12);
    }
}

static void
run_admit(const struct sim_workload *w, const struct sim_cluster *c,
          int32_t policy, int admit, uint32_t replicas,
          struct sim_result *res)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.policy = policy;
    cfg.verify_engines = VERIFY_EVERY;
    cfg.admit = admit;
    cfg.rep.n = replicas;
    struct sim_err err = { { 0 } };
    if (sim_run(&cfg, res, &err) != 0)
        fail_msg("%s, admit %d, %u replicas: %s",
                 lr_policy_name((lr_policy)policy), admit, replicas, err.msg);
    check_admission(w, res);
}

/* An overloaded fleet, with and without the router's queue: interactive
 * requests with a tight SLO, sheddable batch ones, four tenants; one
 * router and three (each its own queue). */
static void
test_admission(void **state)
{
    (void)state;
    struct sim_workload w;
    build("share-mixed", 500, 40, 13, &w);
    struct sim_mix m;
    struct sim_err err = { { 0 } };
    memset(&m, 0, sizeof m);
    assert_int_equal(sim_mix_parse_classes("interactive=0.3:0:1.5,"
                                           "batch=0.5,bulk=0.2:6:20:shed",
                                           &m, &err),
                     0);
    assert_int_equal(sim_mix_parse_tenants("10,1,1,1", &m, &err), 0);
    sim_workload_mix(&w, &m, 13);
    struct sim_cluster c;
    parse_cluster("3xa100", &c);
    int32_t pols[] = { LR_POLICY_LEAST_REQUEST, LR_POLICY_PREFIX_CACHE_AND_LOAD,
                       LR_POLICY_ADAPTIVE };
    for (size_t k = 0; k < sizeof pols / sizeof *pols; k++) {
        struct sim_result now, q, q3;
        run_admit(&w, &c, pols[k], SIM_ADMIT_NOW, 1, &now);
        run_admit(&w, &c, pols[k], SIM_ADMIT_QUEUE, 1, &q);
        run_admit(&w, &c, pols[k], SIM_ADMIT_QUEUE, 3, &q3);
        /* dispatching at once: nothing waits, expires or is shed */
        assert_int_equal(now.n_waited + now.expired + now.shed, 0);
        assert_int_equal(now.completed, w.n_reqs);
        /* the queue under overload holds requests, and lets some expire or
         * sheds them */
        assert_true(q.n_waited > 0);
        assert_true(q.expired + q.shed > 0);
        assert_true(q3.n_waited > 0);
        sim_result_free(&now);
        sim_result_free(&q);
        sim_result_free(&q3);
    }
    /* without classes: tenants only, nothing has a deadline */
    struct sim_workload t;
    build("share-mixed", 300, 40, 14, &t);
    struct sim_mix mt;
    memset(&mt, 0, sizeof mt);
    assert_int_equal(sim_mix_parse_tenants("4", &mt, &err), 0);
    sim_workload_mix(&t, &mt, 14);
    struct sim_result r;
    run_admit(&t, &c, LR_POLICY_LEAST_REQUEST, SIM_ADMIT_QUEUE, 1, &r);
    assert_int_equal(r.expired + r.shed, 0);
    assert_int_equal(r.completed, t.n_reqs);
    sim_result_free(&r);
    /* neither classes nor tenants nor the queue: no admission figures */
    struct sim_workload p;
    build("share-mixed", 100, 10, 14, &p);
    run_admit(&p, &c, LR_POLICY_LEAST_REQUEST, SIM_ADMIT_QUEUE, 1, &r);
    sim_result_free(&r);
    assert_int_equal(run_checked(&p, &c, LR_POLICY_LEAST_REQUEST, &r), 0);
    assert_false(r.has_admission);
    sim_result_free(&r);
    sim_workload_free(&p);
    sim_workload_free(&t);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* The JSON of a run with classes and tenants names every admission
 * figure, and the same seed gives the same bytes; a run without them
 * has none. */
static char *
render_admit(const struct sim_workload *w, const struct sim_cluster *c,
             int admit)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.admit = admit;
    cfg.policy = LR_POLICY_PREFIX_CACHE_AND_LOAD;
    struct sim_result res;
    struct sim_err err = { { 0 } };
    if (sim_run(&cfg, &res, &err) != 0)
        fail_msg("%s", err.msg);
    struct sim_report rep = { "workload test", w, c, &cfg, 1.0, &res, 1,
                              NULL, 0, 0, 1, 0, 0, NULL };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(sim_report_json(f, &rep, 0), 0);
    /* the table after a NUL: its route() column is measured */
    fputc('\0', f);
    sim_report_table(f, &rep);
    fclose(f);
    sim_result_free(&res);
    return buf;
}

/* The table that render_admit() wrote after the JSON. */
static const char *
table_of(const char *buf)
{
    return buf + strlen(buf) + 1;
}

static void
test_admission_json(void **state)
{
    (void)state;
    struct sim_workload w;
    build("share-mixed", 300, 30, 5, &w);
    struct sim_cluster c;
    parse_cluster("2xa100", &c);
    char *plain = render_admit(&w, &c, SIM_ADMIT_NOW);
    assert_null(strstr(plain, "admission"));
    assert_null(strstr(plain, "\"mix\""));
    struct sim_mix m;
    struct sim_err err = { { 0 } };
    memset(&m, 0, sizeof m);
    assert_int_equal(sim_mix_parse_classes("interactive=0.3,batch=0.7:shed",
                                           &m, &err),
                     0);
    assert_int_equal(sim_mix_parse_tenants("10,1,1,1", &m, &err), 0);
    sim_workload_mix(&w, &m, 5);
    char *a = render_admit(&w, &c, SIM_ADMIT_QUEUE);
    char *b = render_admit(&w, &c, SIM_ADMIT_QUEUE);
    assert_string_equal(a, b);
    static const char *const keys[] = {
        "\"mix\": \"classes interactive 30%", "\"admission\": {",
        "\"admit\": \"queue\"", "\"arrival_span_s\"", "\"waited\"",
        "\"wait_mean_s\"", "\"expired\"", "\"shed\"", "\"router\": {",
        "\"dispatched\"", "\"classes\": [", "\"name\": \"interactive\"",
        "\"urgency\": 4", "\"slo_s\": 60", "\"sheddable\": true",
        "\"slo_attainment\"", "\"goodput_rps\"", "\"ttft_p99_s\"",
        "\"tenants\": [", "\"weight\": 10", "\"demand_share\"",
        "\"service_share\"", "\"backlogged\"", "\"jain\"",
        "\"jain_windows\"", "\"jain_window_s\"",
        /* the table */
        "admission (queue)", "interactive (2 s)", "batch (60 s)",
        "tenant 3", "jain",
    };
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        if (strstr(a, keys[k]) == NULL && strstr(table_of(a), keys[k]) == NULL)
            fail_msg("no %s in the output", keys[k]);
    assert_null(strstr(table_of(plain), "admission"));
    char *n = render_admit(&w, &c, SIM_ADMIT_NOW);
    assert_non_null(strstr(n, "\"admit\": \"now\""));
    assert_non_null(strstr(n, "\"waited\": 0"));
    free(plain);
    free(a);
    free(b);
    free(n);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* ---- LoRA adapters and models ------------------------------------------------ */

static void
lay_lora(struct sim_workload *w, uint32_t adapters, const char *models)
{
    struct sim_lora l;
    sim_lora_init(&l);
    l.n_adapters = adapters;
    struct sim_err err = { { 0 } };
    if (models != NULL && sim_lora_parse_models(models, &l, &err) != 0)
        fail_msg("--models %s: %s", models, err.msg);
    if (sim_workload_lora(w, &l, 11, &err) != 0)
        fail_msg("%s", err.msg);
}

/* Two models at 70:30 on 8 instances (6 and 2, interleaved): every
 * policy sends every request to an instance of its model, and both
 * models' instances serve. */
static void
test_models(void **state)
{
    (void)state;
    struct sim_workload w;
    build("conversation", 400, 14, 5, &w);
    lay_lora(&w, 0, "70,30");
    struct sim_err err = { { 0 } };
    struct sim_lora bad;
    sim_lora_init(&bad);
    assert_int_equal(sim_lora_parse_models("5", &bad, &err), -1);
    assert_int_equal(sim_lora_parse_models("1,0,0,0,1", &bad, &err), -1);
    assert_int_equal(sim_lora_parse_models("0,0", &bad, &err), -1);
    size_t per_model[2] = { 0, 0 };
    for (size_t q = 0; q < w.n_reqs; q++) {
        assert_true(w.reqs[q].model < 2);
        assert_int_equal(w.reqs[q].adapter, 0);
        per_model[w.reqs[q].model]++;
        /* a conversation keeps its model */
        for (size_t j = 0; j < q; j++)
            if (w.reqs[j].has_session && w.reqs[q].has_session &&
                w.reqs[j].session == w.reqs[q].session)
                assert_int_equal(w.reqs[j].model, w.reqs[q].model);
    }
    assert_true(per_model[0] > 200 && per_model[1] > 60);
    struct sim_cluster c;
    parse_cluster("8", &c);
    uint32_t model_of[8], count[2] = { 0, 0 };
    assert_int_equal(sim_models_assign(&w, 8, model_of), 0);
    for (int i = 0; i < 8; i++)
        count[model_of[i]]++;
    assert_int_equal(count[0], 6);
    assert_int_equal(count[1], 2);
    assert_int_equal(model_of[0], 0); /* interleaved, not 6 then 2 */
    assert_true(model_of[6] == 0 || model_of[7] == 0);
    assert_int_equal(sim_models_assign(&w, 1, model_of), -1);
    int ran = 0;
    for (int p = 0; lr_policy_name((lr_policy)p) != NULL; p++) {
        struct sim_result res;
        if (run_checked(&w, &c, p, &res) != 0) {
            sim_result_free(&res);
            continue;
        }
        ran++;
        assert_true(res.has_models);
        assert_int_equal(res.failed, 0);
        uint64_t served[2] = { 0, 0 };
        for (size_t q = 0; q < w.n_reqs; q++) {
            uint32_t i = res.inst[q];
            if (model_of[i] != w.reqs[q].model)
                fail_msg("%s: request %zu of model %u ran on %s (model %u)",
                         res.policy_name, q, w.reqs[q].model, c.inst[i].name,
                         model_of[i]);
            served[model_of[i]]++;
        }
        for (int i = 0; i < 8; i++)
            assert_int_equal(res.per_inst[i].model, model_of[i]);
        assert_int_equal(served[0], per_model[0]);
        assert_int_equal(served[1], per_model[1]);
        sim_result_free(&res);
    }
    assert_int_equal(ran, (int)lr_policy_count());
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* LoRA traffic: the overlay draws adapters by popularity (a session keeps
 * one), runs balance their books with the engines' invariants checked
 * (every VERIFY_EVERY-th step and at the end), adapters load, and the
 * JSON says so; without slots every adapter request fails. */
static void
test_lora_runs(void **state)
{
    (void)state;
    struct sim_workload w;
    build("wildchat", 500, 30, 9, &w);
    lay_lora(&w, 20, NULL);
    size_t hot = 0, with = 0;
    for (size_t q = 0; q < w.n_reqs; q++) {
        assert_true(w.reqs[q].adapter >= 1 && w.reqs[q].adapter <= 20);
        hot += w.reqs[q].adapter == 1;
        with++;
        assert_true(sim_req_salt(&w, q) != 0);
        for (size_t j = 0; j < q; j++)
            if (w.reqs[j].has_session && w.reqs[q].has_session &&
                w.reqs[j].session == w.reqs[q].session)
                assert_int_equal(w.reqs[j].adapter, w.reqs[q].adapter);
    }
    /* Zipf(1) over 20: rank 1 takes 1 / H(20) = 28% */
    assert_true(hot > with / 6 && hot < with / 2);
    assert_string_equal(sim_adapter_name(&w, 7), "lora-0007");
    assert_null(sim_adapter_name(&w, 0));
    struct sim_cluster c;
    parse_cluster("4", &c);
    int32_t pols[] = { LR_POLICY_LEAST_REQUEST, LR_POLICY_PREFIX_CACHE_AND_LOAD,
                       LR_POLICY_LORA_AFFINITY, LR_POLICY_AIBRIX_LORA };
    for (size_t k = 0; k < sizeof pols / sizeof *pols; k++) {
        struct sim_config cfg;
        sim_config_init(&cfg);
        cfg.w = &w;
        cfg.c = &c;
        cfg.policy = pols[k];
        cfg.verify_engines = VERIFY_EVERY;
        cfg.max_loras = 2;
        struct sim_result res;
        struct sim_err err = { { 0 } };
        int rc = sim_run(&cfg, &res, &err);
        if (rc != 0)
            fail_msg("%s: %s", lr_policy_name((lr_policy)pols[k]), err.msg);
        check_books(&w, &c, &res);
        assert_true(res.has_adapters);
        assert_int_equal(res.failed, 0);
        assert_true(res.adapter_loads >= 20 / 4);
        uint64_t per = 0;
        for (uint32_t i = 0; i < c.n; i++)
            per += res.per_inst[i].adapter_loads;
        assert_int_equal(per, res.adapter_loads);
        struct sim_report rep = { "workload test", &w, &c, &cfg, 1.0, &res,
                                  1, NULL, 0, 0, 1, 0, 0, NULL };
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        assert_non_null(f);
        assert_int_equal(sim_report_json(f, &rep, 0), 0);
        fclose(f);
        assert_non_null(strstr(buf, "\"adapter_loads\": "));
        assert_non_null(strstr(buf, "\"lora\": {"));
        free(buf);
        sim_result_free(&res);
        /* no slots: the engines refuse every adapter request */
        cfg.max_loras = 0;
        if (sim_run(&cfg, &res, &err) != 0)
            fail_msg("%s", err.msg);
        assert_int_equal(res.failed, w.n_reqs);
        sim_result_free(&res);
    }
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

/* ---- the CPU tier -------------------------------------------------------------------- */

static int
run_tier(const struct sim_workload *w, const struct sim_cluster *c,
         int32_t policy, uint32_t cpu_blocks, struct sim_result *res,
         char **json)
{
    struct sim_config cfg;
    sim_config_init(&cfg);
    cfg.w = w;
    cfg.c = c;
    cfg.policy = policy;
    cfg.verify_engines = VERIFY_EVERY;
    cfg.cpu_blocks = cpu_blocks;
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_sync_parse("events", &cfg.rep, &err), 0);
    int rc = sim_run(&cfg, res, &err);
    if (rc == 1)
        return 1;
    if (rc != 0)
        fail_msg("%s: %s", lr_policy_name((lr_policy)policy), err.msg);
    check_books(w, c, res);
    struct sim_report rep = { "workload test", w, c, &cfg, 1.0, res,
                              1, NULL, 0, 0, 1, 0, 0, NULL };
    size_t len = 0;
    FILE *f = open_memstream(json, &len);
    assert_non_null(f);
    assert_int_equal(sim_report_json(f, &rep, 0), 0);
    fclose(f);
    return 0;
}

/* Conversations on a30s, whose GPU cache holds a few histories: with a
 * CPU tier the engines load what the GPU lost (their books balance, the
 * invariants hold every VERIFY_EVERY-th step and at the end), the
 * routers get the tier's stores and drops (--sync events) and place
 * them, and the engines find more cached than without the tier (over the
 * four policies). A small tier drops blocks for room. The JSON names the
 * tier only when there is one. */
static void
test_cpu_tier_runs(void **state)
{
    (void)state;
    struct sim_workload w;
    build("conversation", 300, 3, 5, &w);
    struct sim_cluster c;
    parse_cluster("4xa30", &c);
    int32_t pols[] = { LR_POLICY_LEAST_REQUEST, LR_POLICY_PREFIX_CACHE_AND_LOAD,
                       LR_POLICY_DYNAMO, LR_POLICY_ADAPTIVE };
    uint64_t hit_on = 0, hit_off = 0;
    for (size_t k = 0; k < sizeof pols / sizeof *pols; k++) {
        struct sim_result on, off;
        char *jon = NULL, *joff = NULL;
        if (run_tier(&w, &c, pols[k], 2048, &on, &jon) != 0)
            continue;
        assert_int_equal(run_tier(&w, &c, pols[k], 0, &off, &joff), 0);
        assert_true(on.has_cpu_tier);
        assert_true(on.cpu_hits > 0);
        assert_true(on.cpu_hit_tokens > 0);
        assert_true(on.cpu_hit_tokens <= on.hit_tokens);
        assert_true(on.cpu_load_s > 0);
        uint64_t per = 0;
        for (uint32_t i = 0; i < c.n; i++)
            per += on.per_inst[i].cpu_hit_tokens;
        assert_int_equal(per, on.cpu_hit_tokens);
        assert_true(on.cpu_stored_blocks > 0);
        /* the routers placed every store of the tier */
        assert_true(on.kv_cpu_events > 0);
        assert_int_equal(on.kv_cpu_unplaced, 0);
        hit_on += on.hit_tokens;
        hit_off += off.hit_tokens;
        assert_false(off.has_cpu_tier);
        assert_int_equal(off.cpu_hit_tokens + off.cpu_stored_blocks +
                             off.kv_cpu_events,
                         0);
        assert_non_null(strstr(jon, "\"cpu_hit_tokens\": "));
        assert_non_null(strstr(jon, "\"cpu_tier\": {\"blocks\": 2048"));
        assert_null(strstr(joff, "cpu_"));
        free(jon);
        free(joff);
        sim_result_free(&on);
        sim_result_free(&off);
    }
    /* the tier adds hits (a run with it routes differently, so one
     * policy may find fewer; the four together find more) */
    if (hit_on <= hit_off)
        fail_msg("%llu tokens cached with the tier, %llu without",
                 (unsigned long long)hit_on, (unsigned long long)hit_off);
    /* a tier of 512 blocks drops for room, and says so */
    struct sim_result small;
    char *js = NULL;
    assert_int_equal(run_tier(&w, &c, LR_POLICY_PREFIX_CACHE_AND_LOAD, 512,
                              &small, &js),
                     0);
    assert_true(small.cpu_evicted_blocks > 0);
    assert_true(small.cpu_stored_blocks > small.cpu_evicted_blocks);
    assert_true(small.cpu_stored_blocks - small.cpu_evicted_blocks <=
                512ull * c.n);
    assert_true(small.kv_cpu_events > 0);
    free(js);
    sim_result_free(&small);
    sim_cluster_free(&c);
    sim_workload_free(&w);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conservation_all_policies),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_spread),
        cmocka_unit_test(test_conservation_pressure),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_generators),
        cmocka_unit_test(test_cluster_specs),
        cmocka_unit_test(test_largest_fleet),
        cmocka_unit_test(test_percentile),
        cmocka_unit_test(test_tpot),
        cmocka_unit_test(test_lodestar_learns),
        cmocka_unit_test(test_lodestar_deterministic),
        cmocka_unit_test(test_lodestar_freeze_and_params),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_rates),
        cmocka_unit_test(test_suite_ratios),
        cmocka_unit_test(test_suite_cells),
        cmocka_unit_test(test_mix),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_admission_json),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_lora_runs),
        cmocka_unit_test(test_cpu_tier_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
