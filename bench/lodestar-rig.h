/* The Lodestar rig of the benches (lodestar-bench, libroute-bench): a
 * router of 64 instances (4 classes) running LR_POLICY_LODESTAR with the
 * default learner, fed synthetic traffic (1-4k-token prompts from 32
 * shared system prompts, a TTFT that grows with the uncached share and
 * the class) until the learner holds 10k samples and serves a model.
 * Header-only: each bench includes it once. */
#ifndef LIBROUTE_BENCH_LODESTAR_RIG_H
#define LIBROUTE_BENCH_LODESTAR_RIG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "libroute.h"
#include "bench-util.h"

#define LSR_NINST 64
#define LSR_NSYS 32

static uint64_t lsr_rs = 0x6c6f6465ull;

static uint64_t
lsr_rnd(void)
{
    return bench_splitmix(&lsr_rs);
}

static uint32_t *lsr_prompt_buf;
static uint64_t lsr_host_ns = 1000000000000ull;
static uint64_t lsr_next_id = 1;

/* A prompt: a shared system prompt, then its own tokens. */
static size_t
lsr_make_prompt(void)
{
    uint32_t sys = (uint32_t)(lsr_rnd() % LSR_NSYS);
    size_t len = 1024 + lsr_rnd() % 3072;
    uint64_t s = sys * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < 512; i++)
        lsr_prompt_buf[i] = (uint32_t)(s = s * 6364136223846793005ull +
                                           1442695040888963407ull) >>
                            7;
    for (size_t i = 512; i < len; i++)
        lsr_prompt_buf[i] = (uint32_t)lsr_rnd();
    return len;
}

/* Route one request and end it at once, with a TTFT from a simple model
 * so the samples mean something. Returns route()'s time in ns. */
static uint64_t
lsr_one(lr_router *r, int with_sample)
{
    size_t n = lsr_make_prompt();
    lr_request q;
    lr_request_init(&q);
    q.id = lsr_next_id++;
    q.tokens = lsr_prompt_buf;
    q.n_tokens = n;
    q.now_ns = lsr_host_ns;
    lr_decision d;
    lr_decision_init(&d);
    uint64_t t0 = bench_now_ns();
    lr_status st = lr_router_route(r, &q, &d);
    uint64_t t1 = bench_now_ns();
    if (st != LR_OK)
        bench_check(st, "route");
    lsr_host_ns += 2000000; /* 2 ms between requests */
    if (with_sample) {
        double rate = 4000.0 * (1 + d.instance % 4);
        double ttft = 0.02 + (double)(n - d.cached_tokens) / rate;
        st = lr_router_first_token(r, q.id,
                                   lsr_host_ns + (uint64_t)(ttft * 1e9));
        if (st != LR_OK)
            bench_check(st, "first_token");
    }
    st = lr_router_complete(r, q.id, 1, lsr_host_ns);
    if (st != LR_OK)
        bench_check(st, "complete");
    return t1 - t0;
}

/* The trained router (quick: a small network and buffers, for smoke
 * tests); *nsamp the samples its model was trained on. Exits on error. */
static lr_router *
lsr_trained_router(int quick, size_t *nsamp)
{
    lsr_prompt_buf = malloc(4096 * sizeof *lsr_prompt_buf);
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    if (quick) {
        mo.width = 16;
        lo.fifo_capacity = 300;
        lo.replay_capacity = 200;
        lo.min_samples = 300;
        lo.epochs = 2;
    }
    lo.mlp = &mo;
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LODESTAR;
    o.max_instances = LSR_NINST;
    o.learner = &lo;
    lr_router *r;
    lr_status st = lr_router_create(&o, &r);
    if (st != LR_OK)
        bench_check(st, "create");
    for (uint32_t i = 0; i < LSR_NINST; i++) {
        char name[32];
        snprintf(name, sizeof name, "10.2.0.%u:8000", i);
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = name;
        s.instance_class = i % 4;
        uint32_t id;
        if ((st = lr_router_add_instance(r, &s, &id)) != LR_OK)
            bench_check(st, "add");
    }
    /* no exploration, no range guard: every measured route scores */
    lr_router_set_param(r, LR_PARAM_LODESTAR_EPSILON, 0);
    lr_router_set_param(r, LR_PARAM_LODESTAR_OOD, 0);
    size_t want = (size_t)lo.fifo_capacity + lo.replay_capacity;
    size_t feed = quick ? want + 200 : want + 2000;
    for (size_t i = 0; i < feed; i++) {
        lsr_one(r, 1);
        if (i % 1000 == 999 && (st = lr_router_learn_step(r, 0, NULL)) != LR_OK)
            bench_check(st, "learn_step");
    }
    int32_t tr = 0;
    if ((st = lr_router_learn_step(r, LR_LEARN_FORCE, &tr)) != LR_OK || !tr)
        bench_check(st, "first model");
    *nsamp = 0;
    lr_router_learner_samples(r, NULL, LR_LODESTAR_FEATURES, NULL, 0, nsamp);
    return r;
}

#endif /* LIBROUTE_BENCH_LODESTAR_RIG_H */
