/* lodestar-bench: what Lodestar costs on the request path.
 *
 * A router of 64 instances (4 classes) runs LR_POLICY_LODESTAR with the
 * default learner (3 x 128 network, FIFO 5000 + replay 5000, 30 epochs).
 * It is fed synthetic traffic (1-4k-token prompts from 32 shared system
 * prompts, a TTFT that grows with the queue and the uncached share) until
 * the learner holds 10k samples and serves a model. Then, one JSON line
 * per case:
 *
 *   route_lodestar_64_d<D>   lr_router_route() (a real route, ended right
 *                            after) scoring all 64 candidates (D = 0) or
 *                            D of them (the deepest hit and the D - 1
 *                            of least TTFT estimate); ns_p50, ns_p99
 *   route_while_training     the same route() (D = 0) on this thread while
 *                            another thread runs lr_router_learn_step()
 *                            retraining on the 10k samples; the step's
 *                            wall time, the routes made meanwhile and
 *                            their p50 / p99 / max
 *   route_idle_reference     the same number of routes with no training,
 *                            right after, for the ratio
 *   learner_step_<case>      first: a standalone lr_learner (defaults)
 *                            stepping on this thread alone: the first
 *                            round (5000 samples), a full one with
 *                            nothing to choose (10,000), and a round after
 *                            1000 new samples (6000 candidates for 5000
 *                            replay slots, then training on 10,000); ms
 *
 * Usage: lodestar-bench [--quick]
 * The machine is shared and noisy: compare medians, and ratios within one
 * run.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libroute.h"

#include "lodestar-rig.h"


#define rnd lsr_rnd
#define one lsr_one

static void
report(const char *name, uint64_t *v, size_t n, const char *extra)
{
    if (n == 0) {
        printf("{\"name\": \"%s\", \"n\": 0%s}\n", name, extra);
        return;
    }
    qsort(v, n, sizeof *v, bench_cmp_u64);
    printf("{\"name\": \"%s\", \"n\": %zu, \"ns_p50\": %llu, \"ns_p99\": %llu, "
           "\"ns_max\": %llu%s}\n",
           name, n, (unsigned long long)v[n / 2],
           (unsigned long long)v[(n * 99) / 100], (unsigned long long)v[n - 1],
           extra);
    fflush(stdout);
}

struct trainer {
    lr_router *r;
    atomic_int done;
    uint64_t ns;
    int32_t trained;
    lr_status st;
};

static void *
train_main(void *arg)
{
    struct trainer *t = arg;
    uint64_t t0 = bench_now_ns();
    t->st = lr_router_learn_step(t->r, LR_LEARN_FORCE, &t->trained);
    t->ns = bench_now_ns() - t0;
    atomic_store(&t->done, 1);
    return NULL;
}

/* A standalone learner's steps, timed on this thread alone. */
static void
learner_steps(int quick)
{
    lr_learner_options o;
    lr_learner_options_init(&o);
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    o.n_features = 20;
    if (quick) {
        o.fifo_capacity = o.replay_capacity = o.min_samples = 200;
        o.retrain_every = 40;
        o.epochs = 2;
        mo.width = 16;
    }
    o.mlp = &mo;
    lr_learner *l;
    lr_status st = lr_learner_create(&o, &l);
    if (st != LR_OK)
        bench_check(st, "learner");
    static const char *const names[3] = { "first_round", "full_no_choice",
                                          "replay_choice" };
    uint32_t adds[3] = { o.min_samples, o.fifo_capacity, o.retrain_every };
    for (int round = 0; round < 3; round++) {
        float x[20];
        for (uint32_t i = 0; i < adds[round]; i++) {
            for (int k = 0; k < 20; k++)
                x[k] = (float)(rnd() % 1000) / 100.0f;
            double y = -(0.1 * x[0] + 0.01 * x[1] * x[2]);
            if ((st = lr_learner_add_sample(l, x, y, NAN)) != LR_OK)
                bench_check(st, "add_sample");
        }
        int32_t tr = 0;
        uint64_t t0 = bench_now_ns();
        st = lr_learner_step(l, round == 1 ? LR_LEARN_FORCE : 0, &tr);
        uint64_t t1 = bench_now_ns();
        if (st != LR_OK || !tr)
            bench_check(st, "learner step");
        lr_learner_stats ls;
        lr_learner_stats_init(&ls);
        lr_learner_get_stats(l, &ls);
        printf("{\"name\": \"learner_step_%s\", \"ms\": %.1f, "
               "\"samples\": %llu, \"replay\": %llu}\n",
               names[round], (double)(t1 - t0) / 1e6,
               (unsigned long long)ls.model_samples,
               (unsigned long long)ls.model_replay);
        fflush(stdout);
    }
    lr_learner_destroy(l);
}

int
main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    learner_steps(quick);
    size_t nsamp = 0;
    lr_router *r = lsr_trained_router(quick, &nsamp);
    fprintf(stderr, "lodestar-bench: model trained on %zu samples\n", nsamp);

    size_t reps = quick ? 200 : 20000;
    uint64_t *v = malloc(reps * sizeof *v);
    static const uint32_t ds[] = { 0, 16, 8, 4, 2 };
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        lr_router_set_param(r, LR_PARAM_LODESTAR_CANDIDATES, ds[k]);
        for (size_t i = 0; i < reps; i++)
            v[i] = one(r, 0);
        char name[64];
        snprintf(name, sizeof name, "route_lodestar_64_d%u", ds[k]);
        report(name, v, reps, "");
    }
    lr_router_set_param(r, LR_PARAM_LODESTAR_CANDIDATES, 0);

    /* route while a retrain on the samples runs on another thread */
    size_t cap = 2000000;
    uint64_t *w = malloc(cap * sizeof *w);
    struct trainer t = { .r = r };
    atomic_init(&t.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, train_main, &t);
    size_t n = 0;
    while (!atomic_load(&t.done) && n < cap)
        w[n++] = one(r, 0);
    pthread_join(th, NULL);
    if (t.st != LR_OK || !t.trained)
        bench_check(t.st, "retrain");
    /* the reference: as many routes with no training */
    size_t nref = n < reps ? reps : n;
    if (nref > cap)
        nref = cap;
    uint64_t *ref = malloc(nref * sizeof *ref);
    for (size_t i = 0; i < nref; i++)
        ref[i] = one(r, 0);
    report("route_idle_reference", ref, nref, "");
    char extra[128];
    snprintf(extra, sizeof extra, ", \"train_ms\": %.1f, \"samples\": %zu",
             (double)t.ns / 1e6, nsamp);
    report("route_while_training", w, n, extra);
    free(ref);
    free(w);
    free(v);
    free(lsr_prompt_buf);
    lr_router_destroy(r);
    return 0;
}
