/* lr_learner: options, the sample queue, the schedule, the FIFO and
 * replay buffers against a naive model, learning a known function,
 * determinism, and allocation failures in every step. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "learn/learner.h"
#include "libroute/lr_learner.h"
#include "learn/mlp.h"
#include "learn/mlp_kernel.h"
#include "testutil.h"

#define D 3

/* A small, fast network for tests. */
static lr_mlp_options
small_net(void)
{
    lr_mlp_options m;
    lr_mlp_options_init(&m);
    m.hidden_layers = 2;
    m.width = 16;
    m.batch_size = 32;
    m.dropout = 0;
    m.learning_rate = 1e-2;
    return m;
}

static lr_learner *
make(uint32_t fifo, uint32_t replay, uint32_t pending, uint32_t min,
     uint32_t every, const lr_allocator *a)
{
    static lr_mlp_options m;
    m = small_net();
    lr_learner_options o;
    lr_learner_options_init(&o);
    o.n_features = D;
    o.fifo_capacity = fifo;
    o.replay_capacity = replay;
    o.pending_capacity = pending;
    o.min_samples = min;
    o.retrain_every = every;
    o.epochs = 5;
    o.seed = 7;
    o.mlp = &m;
    o.allocator = a;
    lr_learner *l = NULL;
    lr_status st = lr_learner_create(&o, &l);
    if (st != LR_OK)
        return NULL;
    return l;
}

static void
point(float *x, uint64_t *s)
{
    for (int k = 0; k < D; k++)
        x[k] = (float)(tu_rand(s) % 1000) / 1000.0f;
}

/* The function the learner must find. */
static double
truth(const float *x)
{
    return -(0.5 + 2.0 * x[0] + 3.0 * x[1] * x[2]);
}

static void
options_checked(void **state)
{
    (void)state;
    lr_learner_options o;
    lr_learner_options_init(&o);
    assert_int_equal(o.fifo_capacity, 5000);
    assert_int_equal(o.replay_capacity, 5000);
    assert_int_equal(o.retrain_every, 1000);
    assert_int_equal(o.min_samples, 5000);
    lr_learner *l = NULL;
    assert_st(lr_learner_create(&o, &l), LR_EINVAL); /* no n_features */
    assert_null(l);
    assert_st(lr_learner_create(NULL, &l), LR_EINVAL);
    o.n_features = D;
    assert_st(lr_learner_create(&o, NULL), LR_EINVAL);
    lr_learner_options bad = o;
    bad.n_features = LR_MLP_MAX_INPUTS + 1;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    bad = o;
    bad.fifo_capacity = 0;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    bad = o;
    bad.pending_capacity = LR_LEARNER_MAX_SAMPLES + 1;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    bad = o;
    bad.epochs = 0;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    bad = o;
    bad.max_abs_reward = NAN;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    /* a bound past what a network trains on would let a 1e300 reward
     * through to a float target of infinity */
    bad.max_abs_reward = 1e31;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    assert_null(l);
    bad.max_abs_reward = LR_MLP_MAX_VALUE;
    assert_st(lr_learner_create(&bad, &l), LR_OK);
    lr_learner_destroy(l);
    l = (lr_learner *)&l; /* a failed create clears it (B5) */
    bad = o;
    bad = o;
    bad.retrain_every = 0;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    bad = o;
    bad.struct_size = 8;
    assert_st(lr_learner_create(&bad, &l), LR_EVERSION);
    lr_mlp_options m;
    lr_mlp_options_init(&m);
    m.width = 0; /* the network's options are checked at create too */
    bad = o;
    bad.mlp = &m;
    assert_st(lr_learner_create(&bad, &l), LR_EINVAL);
    assert_null(l);
    assert_st(lr_learner_create(&o, &l), LR_OK);
    lr_learner_destroy(l);
    lr_learner_destroy(NULL);
}

static void
bad_input(void **state)
{
    (void)state;
    lr_learner *l = make(8, 4, 4, 4, 4, NULL);
    assert_non_null(l);
    float x[D] = { 0.1f, 0.2f, 0.3f }, out[2];
    assert_st(lr_learner_add_sample(NULL, x, -1, NAN), LR_EINVAL);
    assert_st(lr_learner_add_sample(l, NULL, -1, NAN), LR_EINVAL);
    assert_st(lr_learner_add_sample(l, x, NAN, NAN), LR_EINVAL);
    assert_st(lr_learner_add_sample(l, x, INFINITY, NAN), LR_EINVAL);
    x[1] = NAN;
    assert_st(lr_learner_add_sample(l, x, -1, NAN), LR_EINVAL);
    x[1] = 0.2f;
    assert_st(lr_learner_add_sample(l, x, -16, NAN), LR_ERANGE);
    assert_st(lr_learner_score(l, x, 1, out, NULL), LR_ESTATE);
    assert_st(lr_learner_score(NULL, x, 1, out, NULL), LR_EINVAL);
    assert_st(lr_learner_score(l, NULL, 1, out, NULL), LR_EINVAL);
    uint8_t fl[1];
    assert_st(lr_learner_score_rows(l, x, 1, out, fl, NULL), LR_ESTATE);
    assert_st(lr_learner_score_rows(NULL, x, 1, out, fl, NULL), LR_EINVAL);
    assert_st(lr_learner_score_rows(l, NULL, 1, out, fl, NULL), LR_EINVAL);
    assert_st(lr_learner_score_rows(l, x, 1, NULL, fl, NULL), LR_EINVAL);
    assert_st(lr_learner_score_rows(l, x, 1, out, NULL, NULL), LR_EINVAL);
    assert_st(lr_learner_step(NULL, 0, NULL), LR_EINVAL);
    assert_st(lr_learner_step(l, 2, NULL), LR_EINVAL);
    int32_t tr = 7;
    assert_st(lr_learner_step(l, LR_LEARN_FORCE, &tr), LR_OK);
    assert_int_equal(tr, 0); /* no sample at all */
    lr_learner_stats s;
    lr_learner_stats_init(&s);
    assert_st(lr_learner_get_stats(l, &s), LR_OK);
    assert_int_equal(s.dropped_range, 1);
    assert_int_equal(s.samples, 0);
    assert_true(isnan(s.online_mae));
    s.struct_size = 8;
    assert_st(lr_learner_get_stats(l, &s), LR_EVERSION);
    assert_st(lr_learner_get_stats(NULL, &s), LR_EINVAL);
    size_t n = 9;
    assert_st(lr_learner_samples(NULL, NULL, NULL, 0, &n), LR_EINVAL);
    assert_st(lr_learner_samples(l, NULL, NULL, 0, &n), LR_OK);
    assert_int_equal(n, 0);
    lr_learner_destroy(l);
}

static void
queue_full_then_drained(void **state)
{
    (void)state;
    lr_learner *l = make(100, 0, 4, 1000, 1000, NULL);
    assert_non_null(l);
    float x[D] = { 0.5f, 0.5f, 0.5f };
    for (int i = 0; i < 4; i++)
        assert_st(lr_learner_add_sample(l, x, -1, NAN), LR_OK);
    assert_st(lr_learner_add_sample(l, x, -1, NAN), LR_ELIMIT);
    int32_t tr = 1;
    assert_st(lr_learner_step(l, 0, &tr), LR_OK); /* takes, no round */
    assert_int_equal(tr, 0);
    uint64_t pend;
    uint32_t fifo, replay;
    lr__learner_sizes(l, &pend, &fifo, &replay);
    assert_int_equal(pend, 0);
    assert_int_equal(fifo, 4);
    for (int i = 0; i < 4; i++)
        assert_st(lr_learner_add_sample(l, x, -1, NAN), LR_OK);
    lr_learner_stats s;
    lr_learner_stats_init(&s);
    assert_st(lr_learner_get_stats(l, &s), LR_OK);
    assert_int_equal(s.samples, 8);
    assert_int_equal(s.dropped_full, 1);
    assert_int_equal(s.model_round, 0);
    lr_learner_destroy(l);
}

/* The schedule: nothing before min_samples, then a round every
 * retrain_every new samples. */
static void
schedule(void **state)
{
    (void)state;
    lr_learner *l = make(64, 16, 256, 50, 20, NULL);
    assert_non_null(l);
    uint64_t s = 1;
    float x[D], out[1];
    int32_t tr;
    int rounds = 0;
    for (int i = 1; i <= 130; i++) {
        point(x, &s);
        assert_st(lr_learner_add_sample(l, x, truth(x), NAN), LR_OK);
        assert_st(lr_learner_step(l, 0, &tr), LR_OK);
        bool want = i == 50 || (i > 50 && (i - 50) % 20 == 0);
        if (tr != (want ? 1 : 0))
            fail_msg("sample %d: trained %d, want %d", i, tr, want);
        rounds += tr;
        if (i < 50)
            assert_st(lr_learner_score(l, x, 1, out, NULL), LR_ESTATE);
        else
            assert_st(lr_learner_score(l, x, 1, out, NULL), LR_OK);
    }
    assert_int_equal(rounds, 5);
    lr_learner_stats st;
    lr_learner_stats_init(&st);
    assert_st(lr_learner_get_stats(l, &st), LR_OK);
    assert_int_equal(st.model_round, 5);
    assert_int_equal(st.model_samples, 64 + 16);
    assert_int_equal(st.model_replay, 16);
    assert_true(st.model_mse >= 0);
    /* a forced round trains whatever the counts */
    assert_st(lr_learner_step(l, LR_LEARN_FORCE, &tr), LR_OK);
    assert_int_equal(tr, 1);
    lr_learner_destroy(l);
}

/* Naive model of the buffers: the FIFO is exactly the newest
 * fifo_capacity samples in order; the replay holds min(capacity, pool)
 * rows, each of them a sample that left the FIFO, with no row twice. */
static void
buffers_against_naive_model(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("learner-buffers", 11);
    uint64_t s = seed;
    for (int trial = 0; trial < 6; trial++) {
        uint32_t fc = 1 + (uint32_t)tu_below(&s, 40);
        uint32_t rc = (uint32_t)tu_below(&s, 30);
        uint32_t pc = 1 + (uint32_t)tu_below(&s, 60);
        lr_learner *l = make(fc, rc, pc, 1u << 30, 1u << 30, NULL);
        assert_non_null(l);
        size_t n_all = 0, cap_all = 4096;
        float *all = calloc(cap_all * D, sizeof(float));
        float *ally = calloc(cap_all, sizeof(float));
        uint32_t taken = 0; /* samples the learner took */
        uint32_t queued = 0;
        for (int op = 0; op < 300 && n_all < cap_all; op++) {
            if (tu_below(&s, 4) != 0) {
                float x[D];
                point(x, &s);
                x[0] = (float)n_all; /* unique: identifies the sample */
                lr_status st = lr_learner_add_sample(l, x, -0.001 * n_all, NAN);
                if (queued >= pc) {
                    assert_st(st, LR_ELIMIT);
                    continue;
                }
                assert_st(st, LR_OK);
                memcpy(all + n_all * D, x, sizeof x);
                ally[n_all] = (float)(-0.001 * (double)n_all);
                n_all++;
                queued++;
            } else {
                assert_st(lr_learner_step(l, 0, NULL), LR_OK);
                taken += queued;
                queued = 0;
                size_t n = 0;
                size_t cap = (size_t)fc + rc;
                float *x = calloc(cap * D + 1, sizeof(float));
                float *y = calloc(cap + 1, sizeof(float));
                assert_st(lr_learner_samples(l, x, y, cap, &n), LR_OK);
                uint32_t want_fifo = taken < fc ? taken : fc;
                uint32_t left = taken - want_fifo;
                uint64_t pend;
                uint32_t fifo, replay;
                lr__learner_sizes(l, &pend, &fifo, &replay);
                assert_int_equal(pend, 0);
                assert_int_equal(fifo, want_fifo);
                assert_int_equal(replay, left < rc ? left : rc);
                assert_int_equal(n, (size_t)fifo + replay);
                for (uint32_t i = 0; i < fifo; i++)
                    assert_float_equal(x[i * D], (float)(left + i), 0);
                /* replay rows: distinct samples that left the FIFO */
                for (uint32_t i = 0; i < replay; i++) {
                    float id = x[(fifo + i) * D];
                    assert_true(id >= 0 && id < (float)left);
                    assert_memory_equal(x + (fifo + i) * D,
                                        all + (size_t)id * D,
                                        D * sizeof(float));
                    for (uint32_t j = 0; j < i; j++)
                        assert_true(x[(fifo + j) * D] != id);
                }
                free(x);
                free(y);
            }
        }
        free(all);
        free(ally);
        lr_learner_destroy(l);
    }
}

/* The replay choice is for diversity: a pool of many copies of one point
 * and a few distinct points keeps every distinct point. */
static void
replay_keeps_the_diverse(void **state)
{
    (void)state;
    lr_learner *l = make(4, 5, 256, 1u << 30, 1u << 30, NULL);
    assert_non_null(l);
    /* 40 samples leave the FIFO: 36 copies of A, and B..E among them */
    float pts[5][D] = { { 0.5f, 0.5f, 0.5f },
                        { 0.9f, 0.1f, 0.1f },
                        { 0.1f, 0.9f, 0.1f },
                        { 0.1f, 0.1f, 0.9f },
                        { 0.9f, 0.9f, 0.1f } };
    for (int i = 0; i < 44; i++) {
        int which = i % 9 == 3 && i / 9 < 4 ? 1 + i / 9 : 0;
        assert_st(lr_learner_add_sample(l, pts[which], -1 - 0.01 * which, NAN),
                  LR_OK);
    }
    assert_st(lr_learner_step(l, 0, NULL), LR_OK);
    float x[9 * D], y[9];
    size_t n;
    assert_st(lr_learner_samples(l, x, y, 9, &n), LR_OK);
    assert_int_equal(n, 9);
    bool seen[5] = { false };
    for (int i = 4; i < 9; i++)
        for (int k = 0; k < 5; k++)
            if (memcmp(x + i * D, pts[k], sizeof pts[k]) == 0)
                seen[k] = true;
    for (int k = 0; k < 5; k++)
        if (!seen[k])
            fail_msg("point %d is not in the replay buffer", k);
    lr_learner_destroy(l);
}

/* Mean absolute error on 200 fresh points, and that of the best
 * constant (the mean) for scale. */
static double
holdout_mae(lr_learner *l, uint64_t seed, double *constant_mae)
{
    uint64_t s = seed;
    float x[200 * D], out[200];
    for (int i = 0; i < 200; i++)
        point(x + i * D, &s);
    size_t ood = 9;
    assert_st(lr_learner_score(l, x, 200, out, &ood), LR_OK);
    double e = 0, mean = 0, c = 0;
    for (int i = 0; i < 200; i++) {
        e += fabs(out[i] - truth(x + i * D));
        mean += truth(x + i * D) / 200;
    }
    for (int i = 0; i < 200; i++)
        c += fabs(truth(x + i * D) - mean);
    *constant_mae = c / 200;
    return e / 200;
}

/* It learns: the holdout error, and the online error (predictions made
 * before the samples were seen), fall far below the error of the best
 * constant. */
static void
learns_a_known_function(void **state)
{
    (void)state;
    static lr_mlp_options m;
    m = small_net();
    m.width = 32;
    lr_learner_options o;
    lr_learner_options_init(&o);
    o.n_features = D;
    o.fifo_capacity = 800;
    o.replay_capacity = 200;
    o.min_samples = 400;
    o.retrain_every = 200;
    o.epochs = 40;
    o.seed = 3;
    o.mlp = &m;
    lr_learner *l;
    assert_st(lr_learner_create(&o, &l), LR_OK);
    uint64_t s = 5;
    float x[D], p[1];
    for (int i = 0; i < 1400; i++) {
        point(x, &s);
        double pred = NAN;
        if (lr_learner_score(l, x, 1, p, NULL) == LR_OK)
            pred = p[0];
        assert_st(lr_learner_add_sample(l, x, truth(x), pred), LR_OK);
        assert_st(lr_learner_step(l, 0, NULL), LR_OK);
    }
    lr_learner_stats st;
    lr_learner_stats_init(&st);
    assert_st(lr_learner_get_stats(l, &st), LR_OK);
    assert_true(st.model_round >= 4);
    assert_true(st.predicted > 900);
    double base;
    double mae = holdout_mae(l, 99, &base);
    print_message("holdout MAE %.4f, online MAE %.4f, best constant %.4f\n",
                  mae, st.online_mae, base);
    assert_true(mae < 0.1 * base);
    assert_true(st.online_mae < 0.1 * base);
    /* outside the training ranges: counted */
    float far[2 * D] = { 0.5f, 0.5f, 0.5f, 7.0f, 0.5f, 0.5f };
    float out[2];
    size_t ood = 0;
    assert_st(lr_learner_score(l, far, 2, out, &ood), LR_OK);
    assert_int_equal(ood, 1);
    /* ... and judged per row: the second row, with the same predictions */
    float out2[2];
    uint8_t fl[2] = { 9, 9 };
    ood = 0;
    assert_st(lr_learner_score_rows(l, far, 2, out2, fl, &ood), LR_OK);
    assert_int_equal(ood, 1);
    assert_true(fl[0] == 0 && fl[1] == 1);
    assert_memory_equal(out, out2, sizeof out);
    assert_st(lr_learner_score_rows(l, far, 2, out2, fl, NULL), LR_OK);
    ood = 9;
    assert_st(lr_learner_score_rows(l, NULL, 0, NULL, NULL, &ood), LR_OK);
    assert_int_equal(ood, 0);
    lr_learner_destroy(l);
}

static void
deterministic_for_a_seed(void **state)
{
    (void)state;
    float probe[4 * D], a[4], b[4];
    uint64_t ps = 77;
    for (int i = 0; i < 4; i++)
        point(probe + i * D, &ps);
    for (int run = 0; run < 2; run++) {
        lr_learner *l = make(50, 20, 256, 60, 30, NULL);
        assert_non_null(l);
        uint64_t s = 9;
        float x[D];
        for (int i = 0; i < 150; i++) {
            point(x, &s);
            assert_st(lr_learner_add_sample(l, x, truth(x), NAN), LR_OK);
            if (i % 10 == 9)
                assert_st(lr_learner_step(l, 0, NULL), LR_OK);
        }
        assert_st(lr_learner_score(l, probe, 4, run ? b : a, NULL), LR_OK);
        lr_learner_destroy(l);
    }
    assert_memory_equal(a, b, sizeof a);
}

/* Allocation failures in a step: LR_ENOMEM, the same buffers and queue,
 * no model published; the next step does the work. Both a taking step
 * (buffers and replay choice) and a training step. */
struct oom_ctx {
    int with_model;
};

static bool
sc_step(struct tu_alloc *t, void *vctx)
{
    const struct oom_ctx *ctx = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_learner *l = make(20, 10, 64, 30, 25, &t->a);
    assert_non_null(l);
    uint64_t s = 3;
    float x[D], out[1];
    if (ctx->with_model) {
        for (int i = 0; i < 40; i++) {
            point(x, &s);
            assert_st(lr_learner_add_sample(l, x, truth(x), NAN), LR_OK);
        }
        assert_st(lr_learner_step(l, 0, NULL), LR_OK);
        assert_st(lr_learner_score(l, x, 1, out, NULL), LR_OK);
    }
    for (int i = 0; i < 30; i++) {
        point(x, &s);
        assert_st(lr_learner_add_sample(l, x, truth(x), NAN), LR_OK);
    }
    uint64_t before = lr__learner_digest(l);
    float before_pred[1] = { 0 };
    lr_status had = lr_learner_score(l, x, 1, before_pred, NULL);
    tu_alloc_resume(t, arm);
    int32_t tr = 5;
    lr_status st = lr_learner_step(l, 0, &tr);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_int_equal(tr, 0);
        assert_true(lr__learner_digest(l) == before);
        float again[1];
        assert_st(lr_learner_score(l, x, 1, again, NULL), had);
        if (had == LR_OK)
            assert_memory_equal(again, before_pred, sizeof again);
        assert_st(lr_learner_step(l, 0, &tr), LR_OK);
        assert_int_equal(tr, 1);
    } else {
        assert_st(st, LR_OK);
        assert_int_equal(tr, 1);
    }
    assert_st(lr_learner_score(l, x, 1, out, NULL), LR_OK);
    lr_learner_destroy(l);
    return !failed;
}

static void
oom_step(void **state)
{
    (void)state;
    static const struct oom_ctx cold = { 0 }, warm = { 1 };
    tu_oom_loop(sc_step, (void *)&cold, 200);
    tu_oom_loop(sc_step, (void *)&warm, 200);
}

static bool
sc_create(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    lr_learner *l = make(20, 10, 64, 30, 25, &t->a);
    if (l == NULL)
        return false;
    lr_learner_destroy(l);
    return !t->failed;
}

static void
oom_create(void **state)
{
    (void)state;
    tu_oom_loop(sc_create, NULL, 64);
}

/* ---- the k-center choice against the scan it replaces ---------------------- */

/* The scan of every row per pick (the learner's code before the top and
 * the refreshes). */
static void
naive_k_center(const float *emb, size_t w, size_t m, size_t k, uint32_t *pick)
{
    float *mind = malloc(m * sizeof *mind);
    assert_non_null(mind);
    for (size_t i = 0; i < m; i++)
        mind[i] = INFINITY;
    size_t cur = 0;
    for (size_t j = 0; j < k; j++) {
        pick[j] = (uint32_t)cur;
        mind[cur] = -1;
        const float *c = emb + cur * w;
        size_t far = 0;
        float best = -1;
        for (size_t i = 0; i < m; i++) {
            if (mind[i] < 0)
                continue;
            float dist = 1.0f - lr__mlp_dot(emb + i * w, c, w);
            if (dist < mind[i])
                mind[i] = dist;
            if (mind[i] > best) {
                best = mind[i];
                far = i;
            }
        }
        cur = far;
    }
    free(mind);
}

/* Rows of a few kinds: random directions, exact and near copies (whose
 * distances fall below 0 and leave), rows on a few clusters (ties and
 * long stretches without a refresh), zero rows, and with `odd` an
 * infinite and a NaN row. L2-normalized as the learner does. */
static float *
kc_rows(size_t m, size_t w, uint64_t seed, int odd)
{
    float *e = malloc(m * w * sizeof *e);
    assert_non_null(e);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < m; i++) {
        float *v = e + i * w;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned kind = (unsigned)(x >> 60);
        size_t src = i > 0 ? (size_t)((x >> 20) % i) : 0;
        for (size_t q = 0; q < w; q++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            float r = (float)((double)(x >> 40) / (double)(1ull << 24)) - 0.5f;
            if (kind < 2 && i > 0)
                v[q] = e[src * w + q]; /* an exact copy */
            else if (kind < 4 && i > 0)
                v[q] = e[src * w + q] + r * 1e-6f; /* a near copy */
            else if (kind < 8)
                v[q] = (float)((src % 5) == q % 5) + r * 0.01f; /* clusters */
            else if (kind == 8)
                v[q] = 0;
            else
                v[q] = r;
        }
        if (odd && i == m / 3)
            v[0] = INFINITY;
        if (odd && i == m / 2)
            v[w - 1] = NAN;
        float nn = sqrtf(lr__mlp_dot(v, v, w));
        if (nn > 0)
            for (size_t q = 0; q < w; q++)
                v[q] /= nn;
    }
    return e;
}

static void
k_center_matches_the_scan(void **state)
{
    (void)state;
    static const size_t ms[] = { 1, 2, 3, 9, 200, 700, 1300 };
    static const size_t ws[] = { 1, 3, 8, 16, 37, 128 };
    struct lr__mem mem;
    assert_int_equal(lr__mem_init(&mem, NULL), LR_OK);
    uint64_t seed = 1;
    for (int portable = 0; portable < 2; portable++) {
        lr__mlp_force_portable(portable);
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof ws / sizeof *ws; b++)
                for (int odd = 0; odd < 2; odd++) {
                    size_t m = ms[a], w = ws[b];
                    if (m * w > 200000)
                        continue;
                    float *e = kc_rows(m, w, seed++, odd);
                    size_t ks[] = { 1, m / 2, m > 1 ? m - 1 : 1, m, m + 3 };
                    uint32_t *p0 = malloc((m + 3) * sizeof *p0);
                    uint32_t *p1 = malloc((m + 3) * sizeof *p1);
                    assert_non_null(p0);
                    assert_non_null(p1);
                    for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
                        size_t k = ks[c] > 0 ? ks[c] : 1;
                        naive_k_center(e, w, m, k, p0);
                        assert_int_equal(lr__k_center(&mem, e, w, m, k, p1),
                                         LR_OK);
                        if (memcmp(p0, p1, k * sizeof *p0) != 0) {
                            size_t j = 0;
                            while (p0[j] == p1[j])
                                j++;
                            fail_msg("m %zu w %zu k %zu odd %d portable %d: "
                                     "pick %zu is %u, the scan's %u",
                                     m, w, k, odd, portable, j, p1[j], p0[j]);
                        }
                    }
                    free(p0);
                    free(p1);
                    free(e);
                }
    }
    lr__mlp_force_portable(0);
    assert_int_equal(lr__k_center(&mem, NULL, 4, 0, 1, NULL), LR_EINVAL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(options_checked),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(queue_full_then_drained),
        cmocka_unit_test(schedule),
        cmocka_unit_test(buffers_against_naive_model),
        cmocka_unit_test(replay_keeps_the_diverse),
        cmocka_unit_test(k_center_matches_the_scan),
        cmocka_unit_test(learns_a_known_function),
        cmocka_unit_test(deterministic_for_a_seed),
        cmocka_unit_test(oom_create),
        cmocka_unit_test(oom_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
