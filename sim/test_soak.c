/* The soak: lrsim's engines behind one router for an hour of
 * simulated traffic, everything a long-lived gateway sees going wrong at
 * once, then a clean end.
 *
 *   - multi-turn conversations over shared system prompts, about 20
 *     requests a second, on vLLM-like engines (engine.c) stepping in
 *     simulated time; first tokens and completions go back to the router;
 *   - churn: every 4 minutes an instance is added, and another drained
 *     and, once idle, removed (its engine with it);
 *   - scrapes every second per engine, a tenth of them late (delivered up
 *     to 3 s after they were taken) and some pairs swapped (an older one
 *     after a newer one);
 *   - KV-event storms: every minute one engine reports hundreds of stored
 *     blocks at once (vLLM's BlockStored, chained by engine hashes), then
 *     removes some and now and then clears everything;
 *   - the clock: once a scrape stamped with a wall clock and a route at
 *     2^63, both refused (LR_ERANGE) with the honest calls after them
 *     unaffected;
 *   - policies: adaptive, then dualmap, then prefix-cache-and-load.
 *
 * At the end (arrivals stop, the engines drain): every request has
 * finished, the router and every instance have nothing in flight,
 * lr__router_verify() passes after every phase, and the router's memory,
 * counted by its allocator, never passed the bound set for it. Runs in the
 * `slow` suite; a few seconds of wall time. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster.h"
#include "engine.h"
#include "libroute.h"
#include "router/router.h"
#include "util.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (7 * SEC)
#define HOUR (3600 * SEC)
#define BT 16u              /* tokens per block, router and engines */
#define MAX_INST 32u        /* instances over the hour (ids are reused) */
#define CAPACITY (1u << 16) /* index blocks */
/* The router's memory, all parts: the index is capped at CAPACITY blocks
 * and everything else at MAX_INST instances and 8192 requests in flight,
 * so it levels off (about 8 MiB here) instead of growing with the hour. */
#define MEM_BOUND (16u << 20)
#define N_SYS 12u
#define SYS_TOK 512u
#define N_CONV 240u
#define MAX_PROMPT 3072u

#define assert_st(expr, want)                                               \
    do {                                                                    \
        lr_status st_ = (expr);                                             \
        if (st_ != (want))                                                  \
            fail_msg("%s returned %s, want %s", #expr, lr_status_name(st_), \
                     lr_status_name(want));                                 \
    } while (0)

/* ---- the router's allocator: live bytes and their peak ------------------ */

struct counting {
    size_t live, peak;
};

static void
note(struct counting *c, size_t add, size_t sub)
{
    c->live = c->live + add - sub;
    if (c->live > c->peak)
        c->peak = c->live;
}

static void *
c_alloc(void *ud, size_t n)
{
    void *p = malloc(n);
    if (p != NULL)
        note(ud, n, 0);
    return p;
}

static void *
c_realloc(void *ud, void *p, size_t old, size_t n)
{
    void *q = realloc(p, n);
    if (q != NULL)
        note(ud, n, old);
    return q;
}

static void
c_free(void *ud, void *p, size_t n)
{
    free(p);
    note(ud, 0, n);
}

/* ---- the world ----------------------------------------------------------- */

struct req {
    struct sim_seq seq;
    uint64_t id;
    uint32_t inst; /* router id */
    bool live;
};

struct conv {
    uint32_t sys, turns, len;
    uint64_t seed;
};

struct scrape {
    uint64_t deliver_ns;
    uint32_t id;
    lr_engine_stats s;
};

struct world {
    struct sim_rng rng;
    lr_router *r;
    struct counting mem;
    struct sim_class cls;
    struct sim_instance inst[MAX_INST];
    struct sim_engine *eng[MAX_INST]; /* by router id; NULL: none */
    uint64_t busy_until[MAX_INST];    /* 0: idle */
    bool draining[MAX_INST];
    uint32_t added;
    struct req *req; /* by request slot */
    size_t n_req, cap_req;
    struct conv conv[N_CONV];
    struct scrape *sc;
    size_t n_sc, cap_sc;
    struct sim_emit emit[512];
    uint64_t next_id, done, refused_clock;
    uint64_t kv_events, kv_refused;
    uint32_t tok[MAX_PROMPT];
    uint64_t bh[MAX_PROMPT / BT];
};

static void
verify(struct world *w)
{
    lr_status st = lr__router_verify(w->r);
    if (st != LR_OK)
        fail_msg("lr__router_verify: %s", lr_status_name(st));
    if (w->mem.peak > MEM_BOUND)
        fail_msg("router memory peaked at %zu bytes, bound %u", w->mem.peak,
                 MEM_BOUND);
}

static uint32_t
add_engine(struct world *w)
{
    char name[48];
    snprintf(name, sizeof name, "10.9.%u.%u:8000", w->added / 250,
             w->added % 250);
    w->added++;
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = name;
    s.rtt_ns = MS;
    uint32_t id;
    assert_st(lr_router_add_instance(w->r, &s, &id), LR_OK);
    assert_true(id < MAX_INST && w->eng[id] == NULL);
    struct sim_instance *in = &w->inst[id];
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "%s", name);
    in->cls = &w->cls;
    in->prefix_caching = 1;
    w->eng[id] = sim_engine_create(in, BT);
    assert_non_null(w->eng[id]);
    w->busy_until[id] = 0;
    w->draining[id] = false;
    return id;
}

/* A request of conversation c: its system prompt, then its history. */
static uint32_t
prompt_of(struct world *w, struct conv *c)
{
    uint32_t n = SYS_TOK + c->len;
    if (n > MAX_PROMPT)
        n = MAX_PROMPT;
    sim_tokens(0x5150000ull + c->sys, 0, SYS_TOK, w->tok);
    sim_tokens(c->seed, 0, n - SYS_TOK, w->tok + SYS_TOK);
    return n;
}

static struct req *
new_req(struct world *w)
{
    for (size_t i = 0; i < w->n_req; i++)
        if (!w->req[i].live)
            return &w->req[i];
    if (w->n_req == w->cap_req) {
        /* the engines hold pointers into the array: never move it */
        fail_msg("request slots exhausted (%zu)", w->cap_req);
    }
    return &w->req[w->n_req++];
}

static void
arrive(struct world *w, uint64_t now)
{
    struct conv *c = &w->conv[sim_rng_range(&w->rng, 0, N_CONV - 1)];
    if (c->turns > 12 || SYS_TOK + c->len >= MAX_PROMPT) {
        c->seed = sim_rng_next(&w->rng);
        c->sys = (uint32_t)sim_rng_range(&w->rng, 0, N_SYS - 1);
        c->turns = 0;
        c->len = 0;
    }
    c->len += (uint32_t)sim_rng_range(&w->rng, 32, 256);
    c->turns++;
    uint32_t n = prompt_of(w, c);
    uint32_t out = (uint32_t)sim_rng_range(&w->rng, 16, 160);
    lr_request q;
    lr_request_init(&q);
    q.id = ++w->next_id;
    q.tokens = w->tok;
    q.n_tokens = n;
    q.expected_output_tokens = out;
    q.now_ns = now;
    uint32_t bounds[1] = { SYS_TOK };
    q.boundaries = bounds;
    q.n_boundaries = 1;
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_router_route(w->r, &q, &d), LR_OK);
    assert_true(d.instance < MAX_INST && w->eng[d.instance] != NULL);
    assert_false(w->draining[d.instance]);
    struct req *rq = new_req(w);
    memset(rq, 0, sizeof *rq);
    rq->id = q.id;
    rq->inst = d.instance;
    rq->live = true;
    struct sim_seq *s = &rq->seq;
    s->req = (uint32_t)(rq - w->req);
    s->prompt = n;
    s->output = out;
    s->inst = d.instance;
    assert_int_equal(sim_seq_set_keys(s, w->tok, n, BT, 0), 0);
    assert_int_equal(sim_seq_reserve(s, n + out, BT), 0);
    assert_true(sim_engine_fits(w->eng[d.instance], n, out));
    sim_engine_enqueue(w->eng[d.instance], s, 0);
}

/* Engines whose step ends by now finish it; idle engines start one. */
static void
step_engines(struct world *w, uint64_t now)
{
    for (uint32_t id = 0; id < MAX_INST; id++) {
        struct sim_engine *e = w->eng[id];
        if (e == NULL)
            continue;
        if (w->busy_until[id] != 0 && w->busy_until[id] <= now) {
            size_t n = sim_engine_finish_step(e, w->emit);
            for (size_t k = 0; k < n; k++) {
                struct req *rq = &w->req[w->emit[k].seq->req];
                if (w->emit[k].kind == EMIT_FIRST_TOKEN) {
                    assert_st(lr_router_first_token(w->r, rq->id, now), LR_OK);
                } else {
                    assert_st(lr_router_complete(w->r, rq->id,
                                                 rq->seq.generated, now),
                              LR_OK);
                    sim_seq_free(&rq->seq);
                    rq->live = false;
                    w->done++;
                }
            }
            w->busy_until[id] = 0;
        }
        if (w->busy_until[id] == 0) {
            uint64_t us = sim_engine_start_step(e);
            if (us > 0)
                w->busy_until[id] = now + us * 1000;
        }
    }
}

static void
take_scrapes(struct world *w, uint64_t now)
{
    for (uint32_t id = 0; id < MAX_INST; id++) {
        if (w->eng[id] == NULL)
            continue;
        struct sim_engine_state es;
        sim_engine_state(w->eng[id], &es);
        if (sim_grow((void **)&w->sc, &w->cap_sc, w->n_sc + 1, sizeof *w->sc))
            fail_msg("out of memory");
        struct scrape *sc = &w->sc[w->n_sc++];
        lr_engine_stats_init(&sc->s);
        sc->id = id;
        sc->s.running = es.running;
        sc->s.waiting = es.waiting;
        sc->s.kv_use = es.kv_use;
        sc->s.scraped_ns = now;
        uint64_t late = sim_rng_range(&w->rng, 0, 9) == 0
                            ? sim_rng_range(&w->rng, 1, 3000) * MS
                            : sim_rng_range(&w->rng, 0, 20) * MS;
        sc->deliver_ns = now + late;
    }
}

static void
deliver_scrapes(struct world *w, uint64_t now)
{
    size_t k = 0;
    for (size_t i = 0; i < w->n_sc; i++) {
        struct scrape *sc = &w->sc[i];
        if (sc->deliver_ns > now) {
            w->sc[k++] = *sc;
            continue;
        }
        /* an instance removed since: LR_ENOENT; else taken (an older
         * scrape than the one held is ignored with LR_OK) */
        lr_status st = lr_router_set_stats(w->r, sc->id, &sc->s);
        if (w->eng[sc->id] != NULL)
            assert_st(st, LR_OK);
        else if (st != LR_OK && st != LR_ENOENT)
            fail_msg("late scrape of a removed instance: %s",
                     lr_status_name(st));
    }
    w->n_sc = k;
}

/* A storm: one engine reports many prompts' blocks at once (chained
 * BlockStored events), removes some, and now and then clears them all. */
static void
kv_storm(struct world *w, uint64_t now)
{
    uint32_t id;
    do
        id = (uint32_t)sim_rng_range(&w->rng, 0, MAX_INST - 1);
    while (w->eng[id] == NULL);
    for (int e = 0; e < 400; e++) {
        struct conv *c = &w->conv[sim_rng_range(&w->rng, 0, N_CONV - 1)];
        uint32_t n = prompt_of(w, c) / BT * BT;
        uint32_t nb = n / BT;
        for (uint32_t b = 0; b < nb; b++)
            w->bh[b] = sim_mix64(((uint64_t)id << 40) ^ (c->seed + b) ^
                                 ((uint64_t)c->sys << 52) ^ b);
        lr_kv_stored ev;
        lr_kv_stored_init(&ev);
        ev.block_hashes = w->bh;
        ev.n_blocks = nb;
        ev.block_size = BT;
        ev.token_ids = w->tok;
        ev.n_tokens = n;
        lr_status st = lr_router_kv_stored(w->r, id, &ev, now);
        w->kv_events++;
        if (st == LR_ELIMIT) /* the engine-hash map is full: counted */
            w->kv_refused++;
        else
            assert_st(st, LR_OK);
        if (e % 5 == 0) {
            size_t resolved;
            assert_st(lr_router_kv_removed(w->r, id, w->bh + nb / 2,
                                           nb - nb / 2, &resolved),
                      LR_OK);
        }
    }
    if (sim_rng_range(&w->rng, 0, 3) == 0)
        assert_st(lr_router_kv_cleared(w->r, id), LR_OK);
}

/* The clock: a wall-clock scrape and a route at 2^63 are refused; the
 * honest calls around them are not. */
static void
clock_jump(struct world *w, uint64_t now)
{
    uint64_t d0 = lr__router_digest(w->r);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.waiting = 1000;
    s.scraped_ns = now + 1764000000ull * SEC;
    uint32_t id = 0;
    while (w->eng[id] == NULL)
        id++;
    assert_st(lr_router_set_stats(w->r, id, &s), LR_ERANGE);
    lr_request q;
    lr_request_init(&q);
    q.id = ~0ull;
    q.tokens = w->tok;
    q.n_tokens = 64;
    q.now_ns = 1ull << 63;
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_router_route(w->r, &q, &d), LR_ERANGE);
    assert_true(lr__router_digest(w->r) == d0);
    w->refused_clock += 2;
}

/* Every 4 minutes: add one, drain another; a drained one goes when idle. */
static void
churn(struct world *w, uint64_t now, bool drain_one)
{
    add_engine(w);
    uint32_t routable = 0, victim = MAX_INST;
    for (uint32_t id = 0; id < MAX_INST; id++) {
        if (w->eng[id] == NULL || w->draining[id])
            continue;
        routable++;
        if (victim == MAX_INST)
            victim = id;
    }
    if (drain_one && routable > 4) {
        assert_st(lr_router_drain_instance(w->r, victim, 1), LR_OK);
        w->draining[victim] = true;
    }
    (void)now;
}

static void
reap_drained(struct world *w)
{
    for (uint32_t id = 0; id < MAX_INST; id++) {
        if (w->eng[id] == NULL || !w->draining[id] || w->busy_until[id] != 0)
            continue;
        struct sim_engine_state es;
        sim_engine_state(w->eng[id], &es);
        if (es.running + es.waiting > 0)
            continue;
        lr_load_snapshot ls;
        lr_load_snapshot_init(&ls);
        assert_st(lr_router_instance_load(w->r, id, &ls), LR_OK);
        assert_int_equal(ls.inflight, 0);
        assert_st(lr_router_remove_instance(w->r, id), LR_OK);
        sim_engine_destroy(w->eng[id]);
        w->eng[id] = NULL;
        w->draining[id] = false;
    }
}

static void
soak(void **state)
{
    (void)state;
    struct world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    sim_rng_seed(&w->rng, 16);
    const struct sim_class *a100 = sim_class_find("a100");
    assert_non_null(a100);
    w->cls = *a100;
    w->cls.kv_tokens = 60000; /* small caches: evictions all hour */
    w->cap_req = 8192;
    w->req = calloc(w->cap_req, sizeof *w->req);
    assert_non_null(w->req);
    for (uint32_t c = 0; c < N_CONV; c++) {
        w->conv[c].seed = sim_rng_next(&w->rng);
        w->conv[c].sys = c % N_SYS;
    }
    lr_allocator al = { c_alloc, c_realloc, c_free, &w->mem };
    lr_router_options o;
    lr_router_options_init(&o);
    o.allocator = &al;
    o.seed = 16;
    o.policy = LR_POLICY_ADAPTIVE;
    o.max_instances = MAX_INST;
    o.max_requests = 8192;
    o.block_tokens = BT;
    o.index_capacity_blocks = CAPACITY;
    o.index_ttl_ns = 600 * SEC;
    assert_st(lr_router_create(&o, &w->r), LR_OK);
    for (int i = 0; i < 6; i++)
        add_engine(w);

    const uint64_t dt = MS; /* the loop's resolution */
    uint64_t next_arrival = T0, next_scrape = T0, next_storm = T0 + 30 * SEC;
    uint64_t next_churn = T0 + 240 * SEC;
    bool jumped = false;
    uint64_t now = T0;
    uint64_t end_arrivals = T0 + HOUR, deadline = T0 + HOUR + 1200 * SEC;
    int churns = 0;
    for (; now < deadline; now += dt) {
        bool arriving = now < end_arrivals;
        while (arriving && next_arrival <= now) {
            arrive(w, now);
            next_arrival += (uint64_t)(sim_rng_exp(&w->rng, 0.05) * 1e9) + 1;
        }
        step_engines(w, now);
        if (now >= next_scrape) {
            take_scrapes(w, now);
            next_scrape += SEC;
        }
        deliver_scrapes(w, now);
        if (arriving && now >= next_storm) {
            kv_storm(w, now);
            next_storm += 60 * SEC;
        }
        if (arriving && now >= next_churn) {
            churn(w, now, true);
            next_churn += 240 * SEC;
            churns++;
            /* the policy changes with the phase */
            lr_policy p = churns == 5    ? LR_POLICY_DUALMAP
                          : churns == 10 ? LR_POLICY_PREFIX_CACHE_AND_LOAD
                                         : (lr_policy)-1;
            if ((int)p >= 0)
                assert_st(lr_router_set_policy(w->r, p), LR_OK);
            verify(w);
        }
        if (!jumped && now >= T0 + HOUR / 2) {
            clock_jump(w, now);
            jumped = true;
        }
        if (now % (10 * SEC) == 0) {
            reap_drained(w);
            assert_st(lr_router_expire(w->r, now), LR_OK);
        }
        if (!arriving && w->done == w->next_id && w->n_sc == 0)
            break;
    }
    /* the end: everything finished, nothing in flight anywhere */
    assert_true(now < deadline);
    assert_int_equal(w->done, w->next_id);
    lr_router_stats rs;
    lr_router_stats_init(&rs);
    assert_st(lr_router_get_stats(w->r, &rs), LR_OK);
    assert_int_equal(rs.inflight, 0);
    for (uint32_t id = 0; id < MAX_INST; id++) {
        if (w->eng[id] == NULL)
            continue;
        lr_load_snapshot ls;
        lr_load_snapshot_init(&ls);
        assert_st(lr_router_instance_load(w->r, id, &ls), LR_OK);
        assert_true(ls.inflight == 0 && ls.queued == 0 &&
                    ls.prefill_tokens == 0 && ls.queued_tokens == 0 &&
                    ls.decode_tokens == 0);
        struct sim_err err = { { 0 } };
        if (sim_engine_verify(w->eng[id], &err) != 0)
            fail_msg("engine %u: %s", id, err.msg);
    }
    verify(w);
    assert_true(jumped && w->refused_clock == 2);
    assert_true(churns >= 14);
    assert_true(rs.routes > 50000);
    print_message("soak: %llu requests over %.0f simulated s, %d churns, "
                  "%llu KV events (%llu refused), %u instances added; router "
                  "memory peak %.1f MiB (bound %u MiB), now %.1f MiB; cached "
                  "%.1f%% of prompt tokens\n",
                  (unsigned long long)w->next_id, (double)(now - T0) / 1e9,
                  churns, (unsigned long long)w->kv_events,
                  (unsigned long long)w->kv_refused, w->added,
                  (double)w->mem.peak / (1 << 20), MEM_BOUND >> 20,
                  (double)w->mem.live / (1 << 20),
                  100.0 * (double)rs.cached_tokens / (double)rs.prompt_tokens);
    lr_router_destroy(w->r);
    assert_int_equal(w->mem.live, 0);
    for (uint32_t id = 0; id < MAX_INST; id++)
        sim_engine_destroy(w->eng[id]);
    for (size_t i = 0; i < w->n_req; i++)
        if (w->req[i].live)
            sim_seq_free(&w->req[i].seq);
    free(w->req);
    free(w->sc);
    free(w);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(soak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
