/* lr_cost: the three cost formulas against hand-computed values, the
 * per-kind parameters and bounds, GORGO's (1+1)-ES tuner against the
 * schedule its rules give (window 128, one step per hop of 32: 18 steps
 * by sample 672, 1/5 rule, stop under 0.02), bad input, and the
 * allocation-failure loop. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/cost.h"
#include "testutil.h"

static lr_cost *
mk(int32_t kind, uint64_t seed)
{
    lr_cost_options o;
    lr_cost_options_init(&o);
    o.kind = kind;
    o.seed = seed;
    lr_cost *c = NULL;
    assert_st(lr_cost_create(&o, &c), LR_OK);
    assert_int_equal(lr_cost_kind_of(c), kind);
    return c;
}

static lr_candidate
row(void)
{
    lr_candidate r;
    memset(&r, 0, sizeof r);
    r.prefill_rate = 8000;
    r.cached_age_s = -1;
    r.prefix_caching = 1;
    return r;
}

static void
formulas(void **state)
{
    (void)state;
    lr_candidate t[2] = { row(), row() };
    t[0].cached_tokens = 256;
    t[0].prefill_tokens = 4000;
    t[0].rtt_ms = 40;
    t[0].stall_s = 3.5;
    t[0].queued_tokens = 300;
    t[0].prompt_tokens = 900;
    t[0].kv_tokens = 33;
    t[1].prefill_rate = 16000;
    t[1].rtt_ms = 456;
    double out[2];
    lr_cost *c = mk(LR_COST_TTFT, 1);
    assert_st(lr_cost_eval(c, 1024, t, 2, sizeof t[0], out), LR_OK);
    assert_true(fabs(out[0] - ((4000.0 + 768) / 8000 + 0.040 + 3.5)) < 1e-12);
    assert_true(fabs(out[1] - (1024.0 / 16000 + 0.456)) < 1e-12);
    assert_st(lr_cost_set_param(c, LR_COST_W_RTT, 0), LR_OK);
    assert_st(lr_cost_set_param(c, LR_COST_W_STALL, 0), LR_OK);
    assert_st(lr_cost_eval(c, 1024, t, 2, sizeof t[0], out), LR_OK);
    assert_true(fabs(out[0] - (4000.0 + 768) / 8000) < 1e-12);
    lr_cost_destroy(c);

    c = mk(LR_COST_GORGO, 1);
    assert_st(lr_cost_eval(c, 1024, t, 2, sizeof t[0], out), LR_OK);
    assert_true(out[0] == 0.5 * 40 + 768 + 0.1 * 900);
    assert_true(out[1] == 0.5 * 456 + 1024);
    assert_st(lr_cost_set_param(c, LR_COST_QUEUE_AT_FIRST_TOKEN, 1), LR_OK);
    assert_st(lr_cost_eval(c, 1024, t, 2, sizeof t[0], out), LR_OK);
    assert_true(out[0] == 0.5 * 40 + 768 + 0.1 * 300);
    lr_cost_destroy(c);

    c = mk(LR_COST_DYNAMO, 1);
    assert_st(lr_cost_eval(c, 1024, t, 2, sizeof t[0], out), LR_OK);
    assert_true(out[0] == 48 + 3 && out[1] == 64); /* ceil(768/16), 33/16 */
    assert_st(lr_cost_set_param(c, LR_COST_BLOCK_TOKENS, 32), LR_OK);
    assert_st(lr_cost_set_param(c, LR_COST_W_UNCACHED, 2), LR_OK);
    assert_st(lr_cost_eval(c, 1024, t, 2, sizeof t[0], out), LR_OK);
    assert_true(out[0] == 2 * 24 + 2 && out[1] == 64);
    /* zero rows: nothing to do */
    assert_st(lr_cost_eval(c, 1024, NULL, 0, sizeof t[0], NULL), LR_OK);
    lr_cost_destroy(c);
}

static void
parameters(void **state)
{
    (void)state;
    assert_int_equal(lr_cost_kind_count(), 3);
    assert_string_equal(lr_cost_kind_name(LR_COST_GORGO), "gorgo");
    assert_null(lr_cost_kind_name(3));
    assert_null(lr_cost_kind_name(-1));
    /* which keys each kind has */
    int has[3] = { 0 };
    for (int32_t k = 0; k < 3; k++)
        for (int32_t p = 0; p < (int32_t)lr_cost_param_count(); p++)
            has[k] += lr_cost_param_bounds(k, p).status == LR_OK;
    assert_int_equal(has[LR_COST_TTFT], 2);
    assert_int_equal(has[LR_COST_GORGO], 6);
    assert_int_equal(has[LR_COST_DYNAMO], 2);
    lr_bounds b = lr_cost_param_bounds(LR_COST_GORGO, LR_COST_W_QUEUE_MIN);
    assert_true(b.status == LR_OK && b.def == 0.05 && b.hi == 0.5);
    b = lr_cost_param_bounds(LR_COST_DYNAMO, LR_COST_BLOCK_TOKENS);
    assert_true(b.flags == LR_BOUNDS_INTEGER && b.def == 16);
    assert_int_equal(lr_cost_param_bounds(LR_COST_TTFT, LR_COST_W_QUEUE).status,
                     LR_ENOTSUP);
    assert_int_equal(lr_cost_param_bounds(7, 0).status, LR_ENOTSUP);
    lr_cost *c = mk(LR_COST_GORGO, 1);
    double v;
    assert_st(lr_cost_get_param(c, LR_COST_W_RTT, &v), LR_OK);
    assert_true(v == 0.5);
    uint64_t d0 = lr__cost_digest(c);
    assert_st(lr_cost_set_param(c, LR_COST_W_RTT, 11), LR_ERANGE);
    assert_st(lr_cost_set_param(c, LR_COST_W_RTT, NAN), LR_EINVAL);
    assert_st(lr_cost_set_param(c, LR_COST_QUEUE_AT_FIRST_TOKEN, 0.5),
              LR_EINVAL);
    assert_st(lr_cost_set_param(c, LR_COST_W_STALL, 1), LR_ENOTSUP);
    assert_st(lr_cost_set_param(c, 99, 1), LR_ENOTSUP);
    assert_st(lr_cost_get_param(c, LR_COST_BLOCK_TOKENS, &v), LR_ENOTSUP);
    assert_st(lr_cost_get_param(c, LR_COST_W_RTT, NULL), LR_EINVAL);
    assert_st(lr_cost_set_param(NULL, LR_COST_W_RTT, 1), LR_EINVAL);
    assert_true(lr__cost_digest(c) == d0);
    lr_cost_destroy(c);
    /* only GORGO tunes */
    c = mk(LR_COST_TTFT, 1);
    assert_st(lr_cost_tune(c, 1), LR_ENOTSUP);
    assert_st(lr_cost_tune(c, 2), LR_EINVAL);
    lr_cost_destroy(c);
}

static void
bad_input(void **state)
{
    (void)state;
    lr_cost *c = NULL;
    lr_cost_options o;
    lr_cost_options_init(&o);
    assert_st(lr_cost_create(&o, NULL), LR_EINVAL);
    o.kind = 3;
    assert_st(lr_cost_create(&o, &c), LR_EINVAL);
    assert_null(c);
    o.kind = LR_COST_TTFT;
    o.struct_size = LR_COST_OPTIONS_SIZE_V1 - 1;
    assert_st(lr_cost_create(&o, &c), LR_EVERSION);
    assert_st(lr_cost_create(NULL, &c), LR_OK); /* defaults: TTFT */
    assert_int_equal(lr_cost_kind_of(c), LR_COST_TTFT);
    lr_candidate t[1] = { row() };
    double out[1];
    assert_st(lr_cost_eval(c, 10, t, 1, LR_CANDIDATE_SIZE_V1 - 1, out),
              LR_EINVAL);
    t[0].cached_tokens = 11;
    assert_st(lr_cost_eval(c, 10, t, 1, sizeof t[0], out), LR_EINVAL);
    t[0].cached_tokens = 0;
    t[0].prefill_rate = -1;
    assert_st(lr_cost_eval(c, 10, t, 1, sizeof t[0], out), LR_EINVAL);
    assert_st(lr_cost_eval(NULL, 10, t, 1, sizeof t[0], out), LR_EINVAL);
    assert_st(lr_cost_eval(c, 10, t, 1, sizeof t[0], NULL), LR_EINVAL);
    assert_st(lr_cost_observe(c, -1), LR_EINVAL);
    assert_st(lr_cost_observe(c, INFINITY), LR_EINVAL);
    assert_st(lr_cost_observe(c, 0.5), LR_OK); /* not tuning: ignored */
    lr_cost_tuner_stats s;
    lr_cost_tuner_stats_init(&s);
    assert_st(lr_cost_tuner_get_stats(c, &s), LR_OK);
    assert_int_equal(s.state, 0);
    assert_int_equal(s.samples, 0);
    s.struct_size = 8;
    assert_st(lr_cost_tuner_get_stats(c, &s), LR_EVERSION);
    assert_int_equal(lr_cost_kind_of(NULL), -1);
    lr_cost_destroy(c);
    lr_cost_destroy(NULL);
}

static lr_cost_tuner_stats
tstats(const lr_cost *c)
{
    lr_cost_tuner_stats s;
    lr_cost_tuner_stats_init(&s);
    assert_st(lr_cost_tuner_get_stats(c, &s), LR_OK);
    return s;
}

/* The schedule, GORGO's (its Fig. 3: 18 steps by sample 672): the first
 * full window scores the incumbent at sample 128 and puts a trial in
 * service; from then on every hop of 32 samples judges the trial in
 * service and puts the next one in. A flat objective never beats the
 * incumbent by 0.5%, so every trial fails, sigma shrinks by 0.817 per
 * trial, and tuning stops after the 16th trial, at sample 128 + 16 x 32
 * = 640 (0.5 x 0.817^16 < 0.02), with the incumbent in service. */
static void
tuner_schedule(void **state)
{
    (void)state;
    lr_cost *c = mk(LR_COST_GORGO, 9);
    assert_st(lr_cost_tune(c, 1), LR_OK);
    for (uint32_t i = 1; i <= 3000; i++) {
        assert_st(lr_cost_observe(c, 0.25), LR_OK);
        lr_cost_tuner_stats s = tstats(c);
        uint64_t want_trials = i < 128 ? 0 : (i - 128) / 32;
        if (want_trials > 16)
            want_trials = 16;
        assert_int_equal(s.trials, want_trials);
        assert_int_equal(s.accepted, 0);
        if (i < 128)
            assert_int_equal(s.state, 1);
        else if (s.trials < 16)
            assert_int_equal(s.state, 2);
        else
            assert_int_equal(s.state, 3);
        assert_true(fabs(s.sigma - 0.5 * pow(0.817, (double)s.trials)) <
                    1e-12);
        assert_int_equal(s.samples, i < 640 ? i : 640);
    }
    double w;
    assert_st(lr_cost_get_param(c, LR_COST_W_RTT, &w), LR_OK);
    assert_true(w == 0.5);
    assert_true(lr__cost_in_service(c, LR_COST_W_RTT) == 0.5);
    assert_true(lr__cost_in_service(c, LR_COST_W_QUEUE) == 0.1);
    lr_cost_destroy(c);
}

/* 18 steps by sample 672: an objective that keeps improving (TTFTs that
 * fall with every sample) wins every trial, so the 1/5 rule never stops
 * the tuner, and each hop after the incumbent's window judges one trial:
 * the incumbent scored at 128, then 17 trials at 160, 192, ..., 672. The
 * incumbent's p95 is each accepted window's. */
static void
tuner_steps_by_672(void **state)
{
    (void)state;
    lr_cost *c = mk(LR_COST_GORGO, 4);
    assert_st(lr_cost_tune(c, 1), LR_OK);
    double p95 = NAN;
    for (uint32_t i = 1; i <= 672; i++) {
        assert_st(lr_cost_observe(c, 1000.0 / i), LR_OK);
        lr_cost_tuner_stats s = tstats(c);
        uint64_t want = i < 160 ? 0 : (i - 128) / 32;
        assert_int_equal(s.trials, want);
        assert_int_equal(s.accepted, want);
        assert_int_equal(s.state, i < 128 ? 1 : 2);
        if (i >= 128 && i % 32 == 0) {
            /* the window's p95: its 7th largest of the last 128 */
            double want_p95 = 1000.0 / (i - 121);
            assert_true(fabs(s.incumbent_p95_s - want_p95) < 1e-9);
            assert_true(isnan(p95) || s.incumbent_p95_s < p95);
            p95 = s.incumbent_p95_s;
        }
    }
    assert_int_equal(tstats(c).trials + 1, 18); /* + the incumbent's */
    lr_cost_destroy(c);
}

/* An objective the weights move, with multiplicative noise (a TTFT's
 * spread): the tuner accepts only improvements (its incumbent p95 only
 * falls, by at least 0.5% each time), every proposal stays inside GORGO's
 * bounds, and it still learns. Judged every hop, a trial's window is
 * three quarters its predecessors' samples, so one run can stall (the 1/5
 * rule stops it after 16 failures); over ten seeds most end nearer the
 * optimum than they started, and some much nearer. */
static void
tuner_improves(void **state)
{
    (void)state;
    const double start = fabs(log(0.5 / 0.3)) + fabs(log(0.1 / 0.4));
    int nearer = 0, much = 0;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        lr_cost *c = mk(LR_COST_GORGO, seed);
        assert_st(lr_cost_tune(c, 1), LR_OK);
        assert_st(lr_cost_set_param(c, LR_COST_W_RTT_MAX, 1.0), LR_OK);
        double best = INFINITY;
        uint64_t s = 5 * seed;
        uint64_t accepted = 0;
        for (int i = 0; i < 20000; i++) {
            double wr = lr__cost_in_service(c, LR_COST_W_RTT);
            double wq = lr__cost_in_service(c, LR_COST_W_QUEUE);
            assert_true(wr >= 0.05 && wr <= 1.0);
            assert_true(wq >= 0.05 && wq <= 0.5);
            double z = sqrt(-2 * log(tu_unit(&s) + 1e-300)) *
                       cos(6.283185307179586 * tu_unit(&s));
            double ttft = (fabs(log(wr / 0.3)) + fabs(log(wq / 0.4)) + 0.1) *
                          exp(0.3 * z);
            assert_st(lr_cost_observe(c, ttft), LR_OK);
            lr_cost_tuner_stats st = tstats(c);
            if (!isnan(st.incumbent_p95_s)) {
                assert_true(st.incumbent_p95_s <= best);
                if (st.accepted > accepted)
                    assert_true(st.incumbent_p95_s < best * 0.995);
                best = st.incumbent_p95_s;
                accepted = st.accepted;
            }
        }
        double wr, wq;
        assert_st(lr_cost_get_param(c, LR_COST_W_RTT, &wr), LR_OK);
        assert_st(lr_cost_get_param(c, LR_COST_W_QUEUE, &wq), LR_OK);
        double dist = fabs(log(wr / 0.3)) + fabs(log(wq / 0.4));
        nearer += dist < start;
        much += dist < start / 2;
        lr_cost_destroy(c);
    }
    assert_true(nearer >= 6);
    assert_true(much >= 3);
}

/* Freezing or setting a weight during a trial puts the incumbent back;
 * the same seed gives the same trials. */
static void
tuner_freeze_and_set(void **state)
{
    (void)state;
    lr_cost *a = mk(LR_COST_GORGO, 77), *b = mk(LR_COST_GORGO, 77);
    assert_st(lr_cost_tune(a, 1), LR_OK);
    assert_st(lr_cost_tune(b, 1), LR_OK);
    for (int i = 0; i < 200; i++) {
        assert_st(lr_cost_observe(a, 0.1 + i % 3), LR_OK);
        assert_st(lr_cost_observe(b, 0.1 + i % 3), LR_OK);
    }
    assert_true(lr__cost_digest(a) == lr__cost_digest(b));
    assert_int_equal(tstats(a).state, 2);
    assert_true(lr__cost_in_service(a, LR_COST_W_RTT) != 0.5 ||
                lr__cost_in_service(a, LR_COST_W_QUEUE) != 0.1);
    assert_st(lr_cost_tune(a, 0), LR_OK);
    assert_int_equal(tstats(a).state, 0);
    assert_true(lr__cost_in_service(a, LR_COST_W_RTT) == 0.5);
    assert_true(lr__cost_in_service(a, LR_COST_W_QUEUE) == 0.1);
    uint64_t d = lr__cost_digest(a);
    assert_st(lr_cost_observe(a, 1), LR_OK); /* frozen: ignored */
    assert_true(lr__cost_digest(a) == d);
    /* b: a weight set by hand ends the trial and becomes the incumbent */
    assert_st(lr_cost_set_param(b, LR_COST_W_QUEUE, 0.3), LR_OK);
    double v;
    assert_st(lr_cost_get_param(b, LR_COST_W_QUEUE, &v), LR_OK);
    assert_true(v == 0.3 && lr__cost_in_service(b, LR_COST_W_QUEUE) == 0.3);
    assert_true(lr__cost_in_service(b, LR_COST_W_RTT) == 0.5);
    assert_int_equal(tstats(b).state, 1);
    lr_cost_destroy(a);
    lr_cost_destroy(b);
}

static bool
oom_create(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    lr_cost_options o;
    lr_cost_options_init(&o);
    o.allocator = &t->a;
    o.kind = LR_COST_GORGO;
    lr_cost *c = NULL;
    lr_status st = lr_cost_create(&o, &c);
    if (st == LR_ENOMEM) {
        assert_null(c);
        return false;
    }
    assert_st(st, LR_OK);
    assert_true(lr__cost_mem_live(c) > 0);
    assert_st(lr_cost_tune(c, 1), LR_OK);
    for (int i = 0; i < 300; i++)
        assert_st(lr_cost_observe(c, 0.2), LR_OK);
    lr_cost_destroy(c);
    return !t->failed;
}

static void
oom(void **state)
{
    (void)state;
    tu_oom_loop(oom_create, NULL, 100);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(formulas),
        cmocka_unit_test(parameters),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(tuner_schedule),
        cmocka_unit_test(tuner_steps_by_672),
        cmocka_unit_test(tuner_improves),
        cmocka_unit_test(tuner_freeze_and_set),
        cmocka_unit_test(oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
