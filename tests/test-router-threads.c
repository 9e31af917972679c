/* Many threads on one lr_router (suite 'threads'; tools/run-tests also runs
 * it under ThreadSanitizer in build-ci-tsan).
 *
 * N_WORKERS threads route requests from their own id ranges (prompts from
 * a few shared "system prompts" plus random suffixes over a small
 * alphabet, so prefixes collide in the index), then send first_token /
 * complete / fail for each batch in a shuffled order. At the same time a
 * controller thread sets engine stats, observes RTTs, dry-runs with
 * LR_ROUTE_SCORES, reads stats, loads and parameters, sets parameters
 * within their bounds, switches policies, drains and undrains, adds and
 * removes a spare instance, plans and carries out rebalancing moves,
 * exports and re-imports deltas, clears KV state and walks
 * lr__router_verify().
 *
 * Statuses are checked exactly where the outcome is known: a route must
 * succeed (three instances are never drained), an event for a request that
 * already ended gets LR_ENOENT, and LR_ENOENT for a request that has not
 * ended is allowed only when the request went to the spare, which may have
 * been removed in the meantime (counted, not failed). At the end, with
 * every thread joined: lr__router_verify() == LR_OK, every instance's load
 * is all zeros, lr_router_get_stats() says nothing is in flight and counts
 * exactly the routes and dry runs the threads made.
 *
 * Three more cases: readers of one instance's load must never see a torn
 * update; a route's learn must not land on an instance removed since
 * its decision (with the generation check off it did in about a quarter
 * of the cycles); and the waiting queue under routes that may wait,
 * dispatches, withdrawals and completions from four threads, where every
 * request must end exactly one way and the queue's counters add up.
 *
 * LR_THREADS_OPS (default 20000) bounds the routes over all workers;
 * LR_TEST_SEED replays a seed. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "libroute/lr_router.h"
#include "router/router.h"
#include "testutil.h"

#define N_WORKERS 4
#define BATCH 32
#define N_BASE 4
#define MAX_INST 8
#define N_SYS 8
#define ALPHABET 40
#define MAX_PROMPT 160
#define SPARE_NAME "10.0.0.99:8000"
#define DEFAULT_OPS 20000
#define CTL_PER_BATCH 8

static const char *const base_names[N_BASE] = {
    "10.0.0.1:8000",
    "10.0.0.2:8000",
    "10.0.0.3:8000",
    "10.0.0.4:8000",
};

struct shared {
    lr_router *r;
    uint64_t seed;
    uint32_t routes_per_worker;
    uint32_t base_ids[N_BASE];
    /* the spare's id: the lowest free slot, the same every time it is
     * added again (the base instances are never removed) */
    uint32_t spare_id;
    _Atomic uint64_t clock;
    atomic_int workers_left;
    /* results */
    atomic_uint failures;
    _Atomic uint64_t routes_ok, dry_runs_ok;
    _Atomic uint64_t enoent_spare, enoent_after_end;
    _Atomic uint64_t batches;
    _Atomic uint64_t ctl_ops, moves_ok, moves_refused, spare_cycles;
    _Atomic uint64_t learn_steps, learn_rounds;
    pthread_mutex_t msg_mu;
    char first_msg[512];
};

/* Record a failure; the first message is printed by the main thread (cmocka
 * assertions must not run in other threads). */
static void
failf(struct shared *sh, const char *fmt, ...)
{
    if (atomic_fetch_add(&sh->failures, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        pthread_mutex_lock(&sh->msg_mu);
        vsnprintf(sh->first_msg, sizeof sh->first_msg, fmt, ap);
        pthread_mutex_unlock(&sh->msg_mu);
        va_end(ap);
    }
}

/* Check a condition; `what` names the call, `st` is its status. */
#define CHECK(sh, cond, what, st)                                            \
    do {                                                                     \
        if (!(cond))                                                         \
            failf((sh), "%s:%d: %s failed: %s (status %s)", __FILE__,        \
                  __LINE__, #cond, (what), lr_status_name((lr_status)(st))); \
    } while (0)

static uint64_t
tick(struct shared *sh)
{
    /* 100 us of host time per call, over all threads */
    return atomic_fetch_add(&sh->clock, 100000) + 100000;
}

static uint32_t
sys_token(uint32_t sys, uint32_t pos)
{
    uint64_t s = ((uint64_t)sys << 32) | pos;
    return (uint32_t)(tu_rand(&s) % ALPHABET);
}

/* A prompt: one of N_SYS shared system prompts (16..72 tokens), then a
 * random suffix of 0..63 tokens over the same small alphabet. */
static size_t
make_prompt(uint64_t *rng, uint32_t *tok, uint32_t *boundary)
{
    uint32_t sys = (uint32_t)tu_below(rng, N_SYS);
    uint32_t sys_len = 16 + 8 * sys;
    uint32_t n = sys_len + (uint32_t)tu_below(rng, 64);
    for (uint32_t i = 0; i < sys_len; i++)
        tok[i] = sys_token(sys, i);
    for (uint32_t i = sys_len; i < n; i++)
        tok[i] = (uint32_t)tu_below(rng, ALPHABET);
    *boundary = sys_len;
    return n;
}

static bool
known_instance(const struct shared *sh, uint32_t id)
{
    for (int i = 0; i < N_BASE; i++)
        if (sh->base_ids[i] == id)
            return true;
    return id == sh->spare_id;
}

/* ---- workers ---------------------------------------------------------------- */

struct req {
    uint64_t id;
    uint32_t instance;
    bool ended;
};

enum {
    EV_FIRST,
    EV_COMPLETE,
    EV_FAIL
};

struct ev {
    uint32_t req;
    uint32_t kind;
};

struct worker {
    struct shared *sh;
    int index;
};

static void
worker_event(struct shared *sh, struct req *q, uint32_t kind, uint64_t *rng)
{
    lr_status st;
    uint64_t now = tick(sh);
    switch (kind) {
    case EV_FIRST:
        st = lr_router_first_token(sh->r, q->id, now);
        break;
    case EV_COMPLETE:
        st =
            lr_router_complete(sh->r, q->id, (uint32_t)tu_below(rng, 300), now);
        break;
    default:
        st = lr_router_fail(sh->r, q->id, now);
        break;
    }
    bool was_ended = q->ended;
    if (kind != EV_FIRST)
        q->ended = true;
    if (was_ended) {
        /* the record is gone: always LR_ENOENT */
        CHECK(sh, st == LR_ENOENT, "event after the end", st);
        atomic_fetch_add(&sh->enoent_after_end, 1);
    } else if (st == LR_ENOENT) {
        /* only the spare is ever removed (moves only go to base
         * instances, so a request on a base instance stays there or on
         * another base instance) */
        CHECK(sh, q->instance == sh->spare_id, "LR_ENOENT off the spare", st);
        atomic_fetch_add(&sh->enoent_spare, 1);
    } else {
        CHECK(sh, st == LR_OK, "event", st);
    }
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    uint64_t rng = sh->seed ^ (0x1000003ull * (uint64_t)(w->index + 1));
    uint64_t seq = 0;
    uint32_t tok[MAX_PROMPT];
    struct req reqs[BATCH];
    struct ev evs[3 * BATCH];
    uint32_t done = 0;
    while (done < sh->routes_per_worker) {
        uint32_t n = sh->routes_per_worker - done;
        if (n > BATCH)
            n = BATCH;
        /* route a batch */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t boundary;
            size_t len = make_prompt(&rng, tok, &boundary);
            lr_request q;
            lr_request_init(&q);
            q.id = ((uint64_t)(w->index + 1) << 40) | seq++;
            q.tokens = tok;
            q.n_tokens = len;
            q.boundaries = &boundary;
            q.n_boundaries = 1;
            q.tenant_salt = tu_below(&rng, 16) == 0 ? 7 : 0;
            if (tu_below(&rng, 4) == 0) {
                q.has_session = 1;
                q.session = tu_below(&rng, 32);
            }
            q.expected_output_tokens = (uint32_t)tu_below(&rng, 256);
            q.flags = tu_below(&rng, 8) == 0 ? LR_ROUTE_NO_LEARN : 0;
            q.now_ns = tick(sh);
            lr_decision d;
            lr_decision_init(&d);
            lr_status st = lr_router_route(sh->r, &q, &d);
            CHECK(sh, st == LR_OK, "route", st);
            if (st == LR_OK) {
                atomic_fetch_add(&sh->routes_ok, 1);
                CHECK(sh, known_instance(sh, d.instance),
                      "decision names a known instance", st);
                CHECK(sh, d.cached_tokens <= len, "cached <= prompt", st);
                CHECK(sh,
                      d.alt_instance == LR_INSTANCE_NONE ||
                          (known_instance(sh, d.alt_instance) &&
                           d.alt_instance != d.instance),
                      "alt instance", st);
            }
            reqs[i].id = q.id;
            reqs[i].instance = st == LR_OK ? d.instance : LR_INSTANCE_NONE;
            reqs[i].ended = st != LR_OK;
        }
        /* every request gets one of: first+complete, complete, fail,
         * first+fail, first+first+complete; all events of the batch are
         * then shuffled, so ends often come before first tokens */
        uint32_t ne = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (reqs[i].ended)
                continue;
            switch (tu_below(&rng, 5)) {
            case 0:
                evs[ne++] = (struct ev){ i, EV_FIRST };
                evs[ne++] = (struct ev){ i, EV_COMPLETE };
                break;
            case 1:
                evs[ne++] = (struct ev){ i, EV_COMPLETE };
                break;
            case 2:
                evs[ne++] = (struct ev){ i, EV_FAIL };
                break;
            case 3:
                evs[ne++] = (struct ev){ i, EV_FIRST };
                evs[ne++] = (struct ev){ i, EV_FAIL };
                break;
            default:
                evs[ne++] = (struct ev){ i, EV_FIRST };
                evs[ne++] = (struct ev){ i, EV_FIRST };
                evs[ne++] = (struct ev){ i, EV_COMPLETE };
                break;
            }
        }
        for (uint32_t i = ne; i > 1; i--) {
            uint32_t j = (uint32_t)tu_below(&rng, i);
            struct ev t = evs[i - 1];
            evs[i - 1] = evs[j];
            evs[j] = t;
        }
        for (uint32_t i = 0; i < ne; i++)
            worker_event(sh, &reqs[evs[i].req], evs[i].kind, &rng);
        done += n;
        /* pace: the controller gets CTL_PER_BATCH calls in per batch, so
         * that it runs alongside the workers however the scheduler and the
         * mutex favour them (the controller never waits for workers) */
        uint64_t want = (atomic_fetch_add(&sh->batches, 1) + 1) * CTL_PER_BATCH;
        while (atomic_load(&sh->ctl_ops) < want)
            sched_yield();
    }
    atomic_fetch_sub(&sh->workers_left, 1);
    return NULL;
}

/* ---- controller --------------------------------------------------------------- */

struct ctl {
    struct shared *sh;
    uint64_t rng;
    bool spare_live;
    bool spare_draining;
    bool base0_draining;
};

static uint32_t
any_id(struct ctl *c)
{
    /* a base id, the spare (live or not) or an id never used */
    uint32_t k = (uint32_t)tu_below(&c->rng, N_BASE + 2);
    if (k < N_BASE)
        return c->sh->base_ids[k];
    return k == N_BASE ? c->sh->spare_id : MAX_INST - 1;
}

static bool
id_live(const struct ctl *c, uint32_t id)
{
    for (int i = 0; i < N_BASE; i++)
        if (c->sh->base_ids[i] == id)
            return true;
    return id == c->sh->spare_id && c->spare_live;
}

static uint32_t
routable_now(const struct ctl *c)
{
    return N_BASE - (c->base0_draining ? 1 : 0) +
           (c->spare_live && !c->spare_draining ? 1 : 0);
}

static void
ctl_set_stats(struct ctl *c)
{
    struct shared *sh = c->sh;
    uint32_t id = any_id(c);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.running = (uint32_t)tu_below(&c->rng, 64);
    s.waiting = (uint32_t)tu_below(&c->rng, 64);
    s.kv_use = (double)tu_below(&c->rng, 101) / 100.0;
    s.scraped_ns = tick(sh);
    lr_status st = lr_router_set_stats(sh->r, id, &s);
    CHECK(sh, id_live(c, id) ? st == LR_OK : st == LR_ENOENT, "set_stats", st);
}

static void
ctl_rtt(struct ctl *c)
{
    struct shared *sh = c->sh;
    uint32_t id = any_id(c);
    uint64_t rtt = 100000 + tu_below(&c->rng, 50000000);
    lr_status st = lr_router_observe_rtt(sh->r, id, rtt);
    CHECK(sh, id_live(c, id) ? st == LR_OK : st == LR_ENOENT, "observe_rtt",
          st);
}

static void
ctl_dry_run(struct ctl *c)
{
    struct shared *sh = c->sh;
    uint32_t tok[MAX_PROMPT], boundary;
    size_t len = make_prompt(&c->rng, tok, &boundary);
    lr_score scores[MAX_INST];
    lr_request q;
    lr_request_init(&q);
    q.id = 1; /* never a worker id; a dry run records nothing anyway */
    q.tokens = tok;
    q.n_tokens = len;
    q.flags = LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES;
    q.now_ns = tick(sh);
    lr_decision d;
    lr_decision_init(&d);
    d.scores = scores;
    d.scores_capacity = MAX_INST;
    lr_status st = lr_router_route(sh->r, &q, &d);
    CHECK(sh, st == LR_OK, "dry run", st);
    if (st != LR_OK)
        return;
    atomic_fetch_add(&sh->dry_runs_ok, 1);
    /* only this thread changes the fleet and the parameters: the count
     * is exact, all routable instances unless the fleet is narrowed
     * (LR_PARAM_NARROW_ABOVE below it), and then some of them */
    double above = 0;
    CHECK(sh, lr_router_get_param(sh->r, LR_PARAM_NARROW_ABOVE, &above) == LR_OK,
          "get_param", st);
    if (routable_now(c) <= (uint32_t)above)
        CHECK(sh, d.n_scores == routable_now(c), "n_scores == routable", st);
    else
        CHECK(sh, d.n_scores >= 1 && d.n_scores <= routable_now(c),
              "n_scores within the routable", st);
    bool chosen_listed = false;
    for (size_t k = 0; k < d.n_scores && k < MAX_INST; k++) {
        CHECK(sh, id_live(c, scores[k].instance), "score names a live id", st);
        CHECK(sh, k == 0 || scores[k - 1].instance < scores[k].instance,
              "scores in id order", st);
        CHECK(sh, scores[k].cached_tokens <= len, "score cached <= prompt", st);
        chosen_listed |= scores[k].instance == d.instance;
    }
    CHECK(sh, chosen_listed, "the choice is among the scores", st);
}

static void
ctl_read(struct ctl *c)
{
    struct shared *sh = c->sh;
    lr_router_stats s;
    lr_router_stats_init(&s);
    lr_status st = lr_router_get_stats(sh->r, &s);
    CHECK(sh, st == LR_OK, "get_stats", st);
    CHECK(sh, s.instances == N_BASE + (c->spare_live ? 1u : 0u),
          "stats.instances", st);
    CHECK(sh, s.routable == routable_now(c), "stats.routable", st);
    CHECK(sh, s.inflight <= (uint64_t)N_WORKERS * BATCH, "stats.inflight", st);
    CHECK(sh, lr_router_instance_count(sh->r) == s.instances, "instance_count",
          st);
    for (uint32_t id = 0; id < MAX_INST; id++) {
        lr_load_snapshot sn;
        lr_load_snapshot_init(&sn);
        st = lr_router_instance_load(sh->r, id, &sn);
        CHECK(sh, id_live(c, id) ? st == LR_OK : st == LR_ENOENT,
              "instance_load", st);
        if (st != LR_OK)
            continue;
        /* a counter that went below zero shows up huge */
        CHECK(sh, sn.inflight <= N_WORKERS * BATCH, "load.inflight", st);
        CHECK(sh, sn.queued <= sn.inflight, "load.queued", st);
        CHECK(sh, sn.prefill_tokens <= sn.queued_tokens, "load.prefill", st);
        CHECK(sh, sn.kv_tokens < (1ull << 40), "load.kv_tokens", st);
        CHECK(sh, sn.decode_tokens <= sn.kv_tokens, "load.decode", st);
    }
    lr_param key = (lr_param)tu_below(&c->rng, (int)lr_param_count());
    double v = -1;
    st = lr_router_get_param(sh->r, key, &v);
    lr_bounds b = lr_param_bounds(key);
    CHECK(sh, st == LR_OK, "get_param", st);
    /* GORGO_SIGMA may leave its bounds while the tuner adapts it */
    CHECK(sh, key == LR_PARAM_GORGO_SIGMA || (v >= b.lo && v <= b.hi),
          "get_param within bounds", st);
    int32_t p = lr_router_policy(sh->r);
    CHECK(sh, p >= 0 && p < (int)lr_policy_count(), "policy", LR_OK);
}

static void
ctl_set_param(struct ctl *c)
{
    struct shared *sh = c->sh;
    lr_param key = (lr_param)tu_below(&c->rng, (int)lr_param_count());
    lr_bounds b = lr_param_bounds(key);
    double hi = b.hi;
    /* keep the DualMap window (window x key blocks entries) and the other
     * large integer ranges small enough to rebuild often */
    if (hi > b.lo + 4096)
        hi = b.lo + 4096;
    double v;
    switch (tu_below(&c->rng, 4)) {
    case 0:
        v = b.def;
        break;
    case 1:
        v = b.lo;
        break;
    case 2:
        v = hi;
        break;
    default:
        v = b.lo + (hi - b.lo) * (double)tu_below(&c->rng, 1001) / 1000.0;
        break;
    }
    if (b.flags & LR_BOUNDS_INTEGER)
        v = (double)(int64_t)v;
    /* the threads' timestamps race by a few ms, which a tiny clock skew
     * would refuse (test-hostile.c tests the clock) */
    if (key == LR_PARAM_CLOCK_SKEW_S && v < b.def)
        v = b.def;
    /* a prefill leg's policy may not be one that keeps state or reads a
     * ring, whatever its id's bounds (test-pd.c) */
    if (key == LR_PARAM_PD_PREFILL_POLICY)
        v = tu_below(&c->rng, 2) ? -1 : LR_POLICY_LEAST_LOAD;
    lr_status st = lr_router_set_param(sh->r, key, v);
    CHECK(sh, st == LR_OK, "set_param within bounds", st);
}

static void
ctl_policy(struct ctl *c)
{
    struct shared *sh = c->sh;
    lr_policy p = (lr_policy)tu_below(&c->rng, (int)lr_policy_count());
    lr_status st = lr_router_set_policy(sh->r, p);
    CHECK(sh, st == LR_OK, "set_policy", st);
}

static void
ctl_fleet(struct ctl *c)
{
    struct shared *sh = c->sh;
    lr_status st;
    switch (tu_below(&c->rng, 4)) {
    case 0: /* drain or undrain base 0: three instances stay routable */
        st = lr_router_drain_instance(sh->r, sh->base_ids[0],
                                      !c->base0_draining);
        CHECK(sh, st == LR_OK, "drain base 0", st);
        if (st == LR_OK)
            c->base0_draining = !c->base0_draining;
        break;
    case 1: /* drain or undrain the spare */
        st = lr_router_drain_instance(sh->r, sh->spare_id, !c->spare_draining);
        if (!c->spare_live) {
            CHECK(sh, st == LR_ENOENT, "drain a removed spare", st);
        } else {
            CHECK(sh, st == LR_OK, "drain spare", st);
            if (st == LR_OK)
                c->spare_draining = !c->spare_draining;
        }
        break;
    default: /* add or remove the spare */
        if (c->spare_live) {
            st = lr_router_remove_instance(sh->r, sh->spare_id);
            CHECK(sh, st == LR_OK, "remove spare", st);
            c->spare_live = false;
            c->spare_draining = false;
            atomic_fetch_add(&sh->spare_cycles, 1);
        } else {
            lr_instance_spec s;
            lr_instance_spec_init(&s);
            s.name = SPARE_NAME;
            s.instance_class = 1;
            s.rtt_ns = 2000000;
            uint32_t id = LR_INSTANCE_NONE;
            st = lr_router_add_instance(sh->r, &s, &id);
            CHECK(sh, st == LR_OK, "add spare", st);
            CHECK(sh, id == sh->spare_id, "the spare gets its id again", st);
            c->spare_live = st == LR_OK;
        }
        break;
    }
}

static void
ctl_rebalance(struct ctl *c)
{
    struct shared *sh = c->sh;
    lr_move moves[8];
    size_t n = 99;
    lr_status st;
    if (tu_below(&c->rng, 2) == 0) {
        /* a tight SLO, so that queues break it and moves get planned */
        static const double slo[3] = { 0.005, 0.02, 0.05 };
        st = lr_router_set_param(sh->r, LR_PARAM_TTFT_SLO_S,
                                 slo[tu_below(&c->rng, 3)]);
        CHECK(sh, st == LR_OK, "set_param(TTFT_SLO_S)", st);
    }
    if (tu_below(&c->rng, 2) == 0) {
        /* the policies that record an alternative */
        st = lr_router_set_policy(sh->r, tu_below(&c->rng, 2)
                                             ? LR_POLICY_DUALMAP
                                             : LR_POLICY_CONSISTENT_HASH);
        CHECK(sh, st == LR_OK, "set_policy", st);
    }
    st = lr_router_rebalance_plan(sh->r, tick(sh), moves, 8, sizeof moves[0],
                                  &n);
    CHECK(sh, st == LR_OK && n <= 8, "rebalance_plan", st);
    if (st != LR_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        CHECK(sh, moves[i].benefit_s > 0 && moves[i].from != moves[i].to,
              "a move", st);
        /* never onto the spare: the workers rely on it (see above) */
        if (moves[i].to == sh->spare_id)
            continue;
        st = lr_router_move(sh->r, moves[i].request_id, moves[i].to);
        /* the request may have started or ended since the plan, and
         * base 0 may be draining */
        CHECK(sh, st == LR_OK || st == LR_ENOENT || st == LR_ESTATE, "move",
              st);
        atomic_fetch_add(st == LR_OK ? &sh->moves_ok : &sh->moves_refused, 1);
    }
}

static void
ctl_index(struct ctl *c)
{
    struct shared *sh = c->sh;
    lr_status st;
    if (tu_below(&c->rng, 2) == 0) {
        uint32_t id = any_id(c);
        st = lr_router_kv_cleared(sh->r, id);
        /* LR_ENOENT also when the index never saw a live instance */
        CHECK(sh, st == LR_OK || st == LR_ENOENT, "kv_cleared", st);
        CHECK(sh, id_live(c, id) || st == LR_ENOENT, "kv_cleared", st);
        return;
    }
    uint64_t since = tu_below(&c->rng, 2) ? lr_router_mark(sh->r) : 0;
    lr_blob *b = NULL;
    uint64_t mark = 0;
    st = lr_router_export_delta(sh->r, since, &b, &mark);
    CHECK(sh, st == LR_OK && b != NULL, "export_delta", st);
    if (st != LR_OK)
        return;
    st = lr_router_import_delta(sh->r, lr_blob_data(b), lr_blob_size(b),
                                tick(sh));
    /* a route of the spare removed between export and import comes back
     * as REMOTE for its id: harmless, and the next removal drops it */
    CHECK(sh, st == LR_OK || st == LR_ELIMIT, "import own delta", st);
    lr_blob_destroy(b);
}

static void *
ctl_main(void *arg)
{
    struct ctl *c = arg;
    struct shared *sh = c->sh;
    while (atomic_load(&sh->workers_left) > 0) {
        switch (tu_below(&c->rng, 16)) {
        case 0:
        case 1:
            ctl_set_stats(c);
            break;
        case 2:
        case 3:
            ctl_rtt(c);
            break;
        case 4:
        case 5:
            ctl_dry_run(c);
            break;
        case 6:
        case 7:
            ctl_read(c);
            break;
        case 8:
            ctl_set_param(c);
            break;
        case 9:
            ctl_policy(c);
            break;
        case 10:
        case 11:
            ctl_fleet(c);
            break;
        case 12:
            ctl_rebalance(c);
            break;
        case 13:
            ctl_index(c);
            break;
        default: {
            lr_status st = lr__router_verify(sh->r);
            CHECK(sh, st == LR_OK, "lr__router_verify while running", st);
            break;
        }
        }
        atomic_fetch_add(&sh->ctl_ops, 1);
    }
    return NULL;
}

/* The host's learner thread: steps (training outside the router's mutex)
 * while workers route on the model in service, and reads the samples. */
static void *
learn_main(void *arg)
{
    struct shared *sh = arg;
    float *x = malloc(sizeof(float) * 600 * LR_LODESTAR_FEATURES);
    float *y = malloc(sizeof(float) * 600);
    while (atomic_load(&sh->workers_left) > 0) {
        int32_t tr = 0;
        lr_status st = lr_router_learn_step(sh->r, 0, &tr);
        CHECK(sh, st == LR_OK, "learn_step", st);
        atomic_fetch_add(&sh->learn_steps, 1);
        if (tr)
            atomic_fetch_add(&sh->learn_rounds, 1);
        size_t n = 0;
        st = lr_router_learner_samples(sh->r, x, LR_LODESTAR_FEATURES, y, 600,
                                       &n);
        CHECK(sh, st == LR_OK && n <= 600, "learner_samples", st);
        for (size_t i = 0; st == LR_OK && i < n; i++)
            CHECK(sh, y[i] <= 0 && y[i] >= -15, "sample reward", st);
        struct timespec ts = { 0, 200000 }; /* a host steps now and then */
        nanosleep(&ts, NULL);
    }
    free(x);
    free(y);
    return NULL;
}

/* ---- the test ------------------------------------------------------------------ */

static void
threads_hammer_one_router(void **state)
{
    (void)state;
    struct shared *sh = calloc(1, sizeof *sh);
    assert_non_null(sh);
    pthread_mutex_init(&sh->msg_mu, NULL);
    sh->seed = tu_seed("router-threads", 0x7e57c0de);
    uint32_t total = DEFAULT_OPS;
    const char *env = getenv("LR_THREADS_OPS");
    if (env != NULL && atoi(env) > 0)
        total = (uint32_t)atoi(env);
    sh->routes_per_worker = (total + N_WORKERS - 1) / N_WORKERS;
    atomic_init(&sh->clock, SEC);

    /* a small, quick learner: rounds happen during the run */
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    mo.hidden_layers = 1;
    mo.width = 8;
    mo.batch_size = 32;
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    lo.fifo_capacity = 400;
    lo.replay_capacity = 200;
    lo.min_samples = 20;
    lo.retrain_every = 20;
    lo.epochs = 2;
    lo.mlp = &mo;
    lr_router_options o;
    lr_router_options_init(&o);
    o.seed = sh->seed;
    o.policy = LR_POLICY_LODESTAR;
    o.learner = &lo;
    o.max_instances = MAX_INST;
    o.max_requests = 1024;
    o.index_capacity_blocks = 1024; /* small: eviction all the time */
    o.marks = 512; /* and marks past it, read and written by every route */
    o.block_tokens = 4;
    o.index_ttl_ns = SEC; /* 1 s of host time: expiry too */
    o.ring_vnodes = 32;
    assert_int_equal(lr_router_create(&o, &sh->r), LR_OK);
    for (int i = 0; i < N_BASE; i++) {
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = base_names[i];
        s.instance_class = (uint32_t)(i % 2);
        s.prefix_caching = i == 3 ? 0 : 1;
        s.rtt_ns = (uint64_t)(i + 1) * MS;
        assert_int_equal(lr_router_add_instance(sh->r, &s, &sh->base_ids[i]),
                         LR_OK);
    }
    lr_class_spec cs;
    lr_class_spec_init(&cs);
    cs.prefill_tokens_per_s = 2000;
    assert_int_equal(lr_router_set_class(sh->r, 1, &cs), LR_OK);

    struct ctl c = { .sh = sh, .rng = sh->seed ^ 0xc0ffee };
    /* add the spare once to learn its id */
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = SPARE_NAME;
    assert_int_equal(lr_router_add_instance(sh->r, &s, &sh->spare_id), LR_OK);
    c.spare_live = true;

    atomic_init(&sh->workers_left, N_WORKERS);
    pthread_t tw[N_WORKERS], tc, tl;
    struct worker w[N_WORKERS];
    assert_int_equal(pthread_create(&tc, NULL, ctl_main, &c), 0);
    assert_int_equal(pthread_create(&tl, NULL, learn_main, sh), 0);
    for (int i = 0; i < N_WORKERS; i++) {
        w[i] = (struct worker){ sh, i };
        assert_int_equal(pthread_create(&tw[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < N_WORKERS; i++)
        assert_int_equal(pthread_join(tw[i], NULL), 0);
    assert_int_equal(pthread_join(tc, NULL), 0);
    assert_int_equal(pthread_join(tl, NULL), 0);

    fprintf(
        stderr,
        "router-threads: %llu routes, %llu dry runs, %llu controller "
        "ops, %llu spare add/remove cycles, moves %llu ok / %llu "
        "refused; LR_ENOENT: %llu after the end, %llu on a removed "
        "spare\n",
        (unsigned long long)sh->routes_ok, (unsigned long long)sh->dry_runs_ok,
        (unsigned long long)sh->ctl_ops, (unsigned long long)sh->spare_cycles,
        (unsigned long long)sh->moves_ok, (unsigned long long)sh->moves_refused,
        (unsigned long long)sh->enoent_after_end,
        (unsigned long long)sh->enoent_spare);
    fprintf(stderr, "router-threads: %llu learner steps, %llu rounds\n",
            (unsigned long long)sh->learn_steps,
            (unsigned long long)sh->learn_rounds);
    if (atomic_load(&sh->failures) != 0)
        fail_msg("%u failed checks; first: %s", atomic_load(&sh->failures),
                 sh->first_msg);

    /* quiescent: everything ended, nothing left anywhere */
    assert_int_equal(lr__router_verify(sh->r), LR_OK);
    for (uint32_t id = 0; id < MAX_INST; id++) {
        lr_load_snapshot sn;
        lr_load_snapshot_init(&sn);
        lr_status st = lr_router_instance_load(sh->r, id, &sn);
        if (!id_live(&c, id)) {
            assert_int_equal(st, LR_ENOENT);
            continue;
        }
        assert_int_equal(st, LR_OK);
        assert_int_equal(sn.inflight, 0);
        assert_int_equal(sn.queued, 0);
        assert_int_equal(sn.prefill_tokens, 0);
        assert_int_equal(sn.queued_tokens, 0);
        assert_int_equal(sn.decode_tokens, 0);
        assert_int_equal(sn.kv_tokens, 0);
    }
    lr_router_stats st;
    lr_router_stats_init(&st);
    assert_int_equal(lr_router_get_stats(sh->r, &st), LR_OK);
    assert_int_equal(st.inflight, 0);
    /* no update lost under contention */
    assert_int_equal(st.routes, sh->routes_ok);
    assert_int_equal(st.dry_runs, sh->dry_runs_ok);
    assert_int_equal(st.routes, (uint64_t)sh->routes_per_worker * N_WORKERS);
    uint64_t by_reason = 0;
    for (int i = 0; i < 16; i++)
        by_reason += st.by_reason[i];
    assert_int_equal(by_reason, st.routes);
    assert_int_equal(st.instances, N_BASE + (c.spare_live ? 1u : 0u));

    lr_router_destroy(sh->r);
    pthread_mutex_destroy(&sh->msg_mu);
    free(sh);
}

/* ---- torn reads --------------------------------------------------------------

 * Readers (routes, dry runs with scores, candidate tables) run at once
 * under the router's read lock while one writer keeps rewriting every
 * instance's scrape so that a row read whole satisfies running ==
 * waiting == kv_use x 1000. A reader that saw half of a write (a table
 * gathered without the lock while a scrape lands) finds a row that breaks
 * it. */

#define TORN_INST 6
#define TORN_READERS 3

struct torn {
    lr_router *r;
    _Atomic uint32_t stop;
    _Atomic uint32_t bad;
    _Atomic uint64_t reads;
    char msg[160];
    pthread_mutex_t mu;
};

static void
torn_fail(struct torn *t, const char *what, const lr_candidate *c)
{
    pthread_mutex_lock(&t->mu);
    if (atomic_fetch_add(&t->bad, 1) == 0)
        snprintf(t->msg, sizeof t->msg,
                 "%s: instance %u running %u waiting %u kv_use %g rtt %g", what,
                 c->instance, c->running, c->waiting, c->kv_use, c->rtt_ms);
    pthread_mutex_unlock(&t->mu);
}

static void *
torn_writer(void *arg)
{
    struct torn *t = arg;
    for (uint32_t k = 1; !atomic_load(&t->stop); k = k % 999 + 1) {
        for (uint32_t id = 0; id < TORN_INST; id++) {
            lr_engine_stats es;
            lr_engine_stats_init(&es);
            es.running = es.waiting = k;
            es.kv_use = k / 1000.0;
            es.scraped_ns = SEC;
            (void)lr_router_set_stats(t->r, id, &es);
        }
    }
    return NULL;
}

static void *
torn_reader(void *arg)
{
    struct torn *t = arg;
    uint32_t tok[64];
    for (int i = 0; i < 64; i++)
        tok[i] = (uint32_t)i * 7 + 1;
    lr_candidate rows[TORN_INST];
    lr_score sc[TORN_INST];
    uint64_t n = 0;
    while (!atomic_load(&t->stop)) {
        lr_request q;
        lr_request_init(&q);
        q.tokens = tok;
        q.n_tokens = 64;
        q.now_ns = SEC;
        size_t got = 0;
        lr_status st = lr_router_candidates(t->r, &q, rows, TORN_INST,
                                            sizeof rows[0], &got);
        if (st != LR_OK || got != TORN_INST) {
            torn_fail(t, "candidates failed", &rows[0]);
            break;
        }
        for (size_t k = 0; k < got; k++) {
            const lr_candidate *c = &rows[k];
            /* the stats age out (SEC old at SEC: fresh) */
            if (c->running != c->waiting ||
                (c->running != 0 && c->kv_use != c->running / 1000.0))
                torn_fail(t, "a torn scrape", c);
        }
        /* a dry run with scores: the decision's table, read whole */
        lr_decision d;
        lr_decision_init(&d);
        d.scores = sc;
        d.scores_capacity = TORN_INST;
        q.flags = LR_ROUTE_DRY_RUN | LR_ROUTE_SCORES;
        q.id = n;
        st = lr_router_route(t->r, &q, &d);
        if (st != LR_OK || d.n_scores != TORN_INST)
            torn_fail(t, "dry run failed", &rows[0]);
        n++;
    }
    atomic_fetch_add(&t->reads, n);
    return NULL;
}

static void
threads_no_torn_reads(void **state)
{
    (void)state;
    struct torn t = { 0 };
    pthread_mutex_init(&t.mu, NULL);
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LEAST_LOAD; /* reads running and waiting */
    o.max_instances = TORN_INST;
    assert_int_equal(lr_router_create(&o, &t.r), LR_OK);
    for (uint32_t i = 0; i < TORN_INST; i++) {
        char name[32];
        snprintf(name, sizeof name, "10.7.0.%u:8000", i);
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = name;
        uint32_t id;
        assert_int_equal(lr_router_add_instance(t.r, &s, &id), LR_OK);
    }
    pthread_t w, rd[TORN_READERS];
    assert_int_equal(pthread_create(&w, NULL, torn_writer, &t), 0);
    for (int i = 0; i < TORN_READERS; i++)
        assert_int_equal(pthread_create(&rd[i], NULL, torn_reader, &t), 0);
    struct timespec ts = { 1, 0 }; /* 1 s */
    nanosleep(&ts, NULL);
    atomic_store(&t.stop, 1);
    for (int i = 0; i < TORN_READERS; i++)
        assert_int_equal(pthread_join(rd[i], NULL), 0);
    assert_int_equal(pthread_join(w, NULL), 0);
    fprintf(stderr, "router-threads: %llu torn-read checks\n",
            (unsigned long long)atomic_load(&t.reads));
    if (atomic_load(&t.bad) != 0)
        fail_msg("%u torn reads; first: %s", atomic_load(&t.bad), t.msg);
    assert_true(atomic_load(&t.reads) > 0);
    lr_router_destroy(t.r);
    pthread_mutex_destroy(&t.mu);
}

/* ---- a learn for an instance removed since its route's decision ----
 *
 * A route decides under the shared lock and learns afterwards under the
 * index's lock alone; a removal in between must win. One thread routes
 * prompts of its own to two instances, A and B, under sglang-cache-aware
 * (which learns); another removes A and adds it again, under the same id
 * and with prefix caching off, so that nothing may learn for it; then,
 * once a few more routes went by, it reads A's tree size from the
 * candidate rows: any block there was learned by a route that chose the
 * removed A. A waiting remover takes the write lock the moment the
 * router's reader lets go, that is just before the reader's learn, so
 * the race runs every cycle. */
#define GONE_CYCLES 200

struct gone {
    lr_router *r;
    uint32_t a, b;
    atomic_int stop;
    _Atomic uint64_t routes;
    _Atomic uint64_t clock;
    atomic_uint bad, errors;
};

static void *
gone_router(void *arg)
{
    struct gone *g = arg;
    uint32_t tok[64];
    for (uint64_t k = 1; !atomic_load(&g->stop); k++) {
        for (uint32_t i = 0; i < 64; i++)
            tok[i] = (uint32_t)(k * 2654435761u + i * 40503u);
        lr_request q;
        lr_request_init(&q);
        q.id = k;
        q.tokens = tok;
        q.n_tokens = 64;
        q.now_ns = atomic_fetch_add(&g->clock, 1000) + 1000;
        lr_decision d;
        lr_decision_init(&d);
        lr_status st = lr_router_route(g->r, &q, &d);
        if (st == LR_OK)
            st = lr_router_complete(g->r, k, 1, q.now_ns);
        if (st != LR_OK && st != LR_ENOENT && st != LR_ESTATE)
            atomic_fetch_add(&g->errors, 1);
        atomic_fetch_add(&g->routes, 1);
    }
    return NULL;
}

static uint32_t
gone_add(struct gone *g, int32_t caching)
{
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = "10.8.0.1:8000";
    s.prefix_caching = caching;
    uint32_t id = UINT32_MAX;
    if (lr_router_add_instance(g->r, &s, &id) != LR_OK)
        atomic_fetch_add(&g->errors, 1);
    return id;
}

/* A's tree size, as the candidate rows say it. */
static uint64_t
gone_tree(struct gone *g)
{
    uint32_t tok[16] = { 1 };
    lr_request q;
    lr_request_init(&q);
    q.tokens = tok;
    q.n_tokens = 16;
    q.now_ns = atomic_load(&g->clock);
    lr_candidate rows[2];
    size_t n = 0;
    if (lr_router_candidates(g->r, &q, rows, 2, sizeof rows[0], &n) != LR_OK) {
        atomic_fetch_add(&g->errors, 1);
        return 0;
    }
    for (size_t k = 0; k < n; k++)
        if (rows[k].instance == g->a)
            return rows[k].tree_blocks;
    return 0;
}

static void
threads_no_learn_after_remove(void **state)
{
    (void)state;
    struct gone g = { 0 };
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_SGLANG_CACHE_AWARE; /* learns; gathers tree sizes */
    o.max_instances = 2;
    assert_int_equal(lr_router_create(&o, &g.r), LR_OK);
    g.a = gone_add(&g, 1);
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = "10.8.0.2:8000";
    assert_int_equal(lr_router_add_instance(g.r, &s, &g.b), LR_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, gone_router, &g), 0);
    for (int c = 0; c < GONE_CYCLES; c++) {
        uint64_t seen = atomic_load(&g.routes);
        while (atomic_load(&g.routes) < seen + 4)
            sched_yield(); /* A (caching on) takes routes and learns */
        assert_int_equal(lr_router_remove_instance(g.r, g.a), LR_OK);
        uint32_t id = gone_add(&g, 0);
        assert_int_equal(id, g.a); /* the lowest free id, again */
        seen = atomic_load(&g.routes);
        while (atomic_load(&g.routes) < seen + 4)
            sched_yield();
        if (gone_tree(&g) != 0)
            atomic_fetch_add(&g.bad, 1);
        assert_int_equal(lr_router_remove_instance(g.r, g.a), LR_OK);
        assert_int_equal(gone_add(&g, 1), g.a);
    }
    atomic_store(&g.stop, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    fprintf(stderr, "router-threads: %d remove cycles, %llu routes\n",
            GONE_CYCLES, (unsigned long long)atomic_load(&g.routes));
    assert_int_equal(atomic_load(&g.errors), 0);
    if (atomic_load(&g.bad) != 0)
        fail_msg("%u of %d cycles: blocks learned for a removed instance",
                 atomic_load(&g.bad), GONE_CYCLES);
    assert_int_equal(lr__router_verify(g.r), LR_OK);
    lr_router_destroy(g.r);
}

/* ---- the waiting queue under threads ----------------------------------------------- */

#define WQ_WORKERS 3
#define WQ_PER 400
#define WQ_IDS (WQ_WORKERS * WQ_PER)
#define WQ_OPEN 3 /* a worker's requests routed at once and running */

/* Each request id's story: 1 routed at once, 2 waited; then dispatched,
 * expired, cancelled by its worker (each at most once). */
struct wq {
    lr_router *r;
    _Atomic uint32_t how[WQ_IDS + 1];
    _Atomic uint32_t out[WQ_IDS + 1];
    _Atomic uint64_t now;
    _Atomic int stop;
    _Atomic uint32_t errors;
};

static uint64_t
wq_now(struct wq *w)
{
    return atomic_fetch_add(&w->now, 1000) + 1000;
}

/* A request in flight ends (its worker may have failed it already). */
static void
wq_end(struct wq *w, uint64_t id)
{
    lr_status a = lr_router_first_token(w->r, id, wq_now(w));
    lr_status b = lr_router_complete(w->r, id, 3, wq_now(w));
    if ((a != LR_OK && a != LR_ENOENT) || (b != LR_OK && b != LR_ENOENT))
        atomic_fetch_add(&w->errors, 1);
}

/* A request out of the queue: it must have waited (or be in its route
 * still, 3: dispatch may take it before its worker hears back), and
 * leave only once; a dispatched one runs and ends. Its worker's fail()
 * may come between the dispatch and this: fail() then ended it in flight,
 * and the worker, which cannot tell that from a withdrawal (both LR_OK),
 * marked it withdrawn (1); the dispatch's mark replaces it. */
static void
wq_take(struct wq *w, const lr_dispatched *d, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t id = d[k].request_id;
        uint32_t how = id == 0 || id > WQ_IDS ? 0 : atomic_load(&w->how[id]);
        if (how != 2 && how != 3) {
            atomic_fetch_add(&w->errors, 1);
            continue;
        }
        uint32_t was =
            atomic_exchange(&w->out[id], (uint32_t)d[k].status + 100);
        if (was != 0 && !(was == 1 && d[k].status == LR_OK)) {
            atomic_fetch_add(&w->errors, 1);
            continue;
        }
        if (d[k].status == LR_OK)
            wq_end(w, id);
    }
}

static void *
wq_dispatcher(void *arg)
{
    struct wq *w = arg;
    lr_dispatched d[8];
    while (!atomic_load(&w->stop)) {
        size_t n = 0;
        lr_status st =
            lr_router_dispatch(w->r, wq_now(w), d, 8, sizeof d[0], &n);
        if (st != LR_OK)
            atomic_fetch_add(&w->errors, 1);
        wq_take(w, d, n);
        if (n == 0)
            sched_yield();
    }
    return NULL;
}

struct wq_worker {
    struct wq *w;
    uint32_t first;
    uint64_t seed;
};

static void *
wq_route(void *arg)
{
    struct wq_worker *k = arg;
    struct wq *w = k->w;
    uint32_t t[64];
    uint64_t open[WQ_OPEN]; /* its requests running, oldest at head */
    uint32_t head = 0, n_open = 0;
    for (uint32_t i = 0; i < WQ_PER; i++) {
        uint64_t id = k->first + i;
        if (n_open > 0 && (n_open == WQ_OPEN || tu_below(&k->seed, 2))) {
            wq_end(w, open[head]); /* one finishes as time goes by */
            head = (head + 1) % WQ_OPEN;
            n_open--;
        }
        for (uint32_t j = 0; j < 64; j++)
            t[j] = (uint32_t)(tu_rand(&k->seed) % 7);
        lr_request q;
        lr_request_init(&q);
        q.id = id;
        q.tokens = t;
        q.n_tokens = 16 + tu_below(&k->seed, 48);
        q.flags = LR_ROUTE_MAY_WAIT;
        q.tenant = tu_below(&k->seed, 4);
        q.urgency = (uint32_t)tu_below(&k->seed, 3);
        q.now_ns = wq_now(w);
        q.deadline_ns = tu_below(&k->seed, 4) == 0 ? q.now_ns + 20000 : 0;
        lr_decision d;
        lr_decision_init(&d);
        atomic_store(&w->how[id], 3); /* in its route */
        lr_status st = lr_router_route(w->r, &q, &d);
        if (st == LR_ELIMIT) { /* the queue is full: refused */
            atomic_store(&w->how[id], 4);
            continue;
        }
        if (st != LR_OK) {
            atomic_fetch_add(&w->errors, 1);
            continue;
        }
        if (d.instance == LR_INSTANCE_NONE) {
            atomic_store(&w->how[id], 2);
            if (tu_below(&k->seed, 8) == 0) { /* the client leaves */
                lr_status f = lr_router_fail(w->r, id, wq_now(w));
                uint32_t zero = 0;
                /* withdrawn, unless dispatch took it first (then fail
                 * ended it in flight, or it had ended: LR_ENOENT) */
                if (f == LR_OK)
                    atomic_compare_exchange_strong(&w->out[id], &zero, 1);
                else if (f != LR_ENOENT)
                    atomic_fetch_add(&w->errors, 1);
            }
        } else { /* it runs while the worker's next ones are routed */
            atomic_store(&w->how[id], 1);
            open[(head + n_open++) % WQ_OPEN] = id;
        }
    }
    for (uint32_t j = 0; j < n_open; j++)
        wq_end(w, open[(head + j) % WQ_OPEN]);
    return NULL;
}

/* Routes that may wait, dispatches, cancellations and completions from
 * four threads at once: every request ends one way, the queue's
 * counters add up, and nothing is left in flight or waiting. */
static void
threads_waiting_queue(void **state)
{
    (void)state;
    struct wq *w = calloc(1, sizeof *w);
    assert_non_null(w);
    atomic_store(&w->now, 1000 * 1000000000ull);
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_ADAPTIVE;
    o.max_instances = 4;
    o.queue_capacity = 64; /* small enough to fill: LR_ELIMIT too */
    assert_int_equal(lr_router_create(&o, &w->r), LR_OK);
    for (uint32_t i = 0; i < 2; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "10.9.0.%u:8000", i);
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = nm;
        uint32_t id;
        assert_int_equal(lr_router_add_instance(w->r, &s, &id), LR_OK);
    }
    assert_int_equal(lr_router_set_param(w->r, LR_PARAM_SATURATION_QUEUE, 1),
                     LR_OK);
    pthread_t disp, th[WQ_WORKERS];
    struct wq_worker k[WQ_WORKERS];
    assert_int_equal(pthread_create(&disp, NULL, wq_dispatcher, w), 0);
    for (uint32_t i = 0; i < WQ_WORKERS; i++) {
        k[i] = (struct wq_worker){ w, 1 + i * WQ_PER, 77 + i };
        assert_int_equal(pthread_create(&th[i], NULL, wq_route, &k[i]), 0);
    }
    for (uint32_t i = 0; i < WQ_WORKERS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    atomic_store(&w->stop, 1);
    assert_int_equal(pthread_join(disp, NULL), 0);
    /* what still waits goes now: nothing is in flight */
    for (;;) {
        lr_dispatched d[8];
        size_t n = 0;
        assert_int_equal(
            lr_router_dispatch(w->r, wq_now(w), d, 8, sizeof d[0], &n), LR_OK);
        if (n == 0)
            break;
        wq_take(w, d, n);
    }
    assert_int_equal(atomic_load(&w->errors), 0);
    lr_router_stats s;
    lr_router_stats_init(&s);
    assert_int_equal(lr_router_get_stats(w->r, &s), LR_OK);
    uint64_t waited = 0, now = 0, gone = 0, full = 0, by[3] = { 0 };
    for (uint32_t id = 1; id <= WQ_IDS; id++) {
        uint32_t h = atomic_load(&w->how[id]), o2 = atomic_load(&w->out[id]);
        now += h == 1;
        waited += h == 2;
        full += h == 4;
        gone += h == 2 && o2 != 0;
        by[0] += o2 == 100 + LR_OK;
        by[1] += o2 == 100 + LR_EEXPIRED;
        by[2] += o2 == 1;
        if (h == 1 && o2 != 0)
            fail_msg("request %u routed at once left the queue", id);
    }
    fprintf(stderr,
            "router-threads: %llu routed at once, %llu refused (queue "
            "full), %llu waited: %llu dispatched, %llu expired, %llu "
            "cancelled\n",
            (unsigned long long)now, (unsigned long long)full,
            (unsigned long long)waited, (unsigned long long)s.waited_dispatched,
            (unsigned long long)s.waited_expired,
            (unsigned long long)s.waited_cancelled);
    assert_int_equal(now + waited + full, WQ_IDS);
    assert_int_equal(gone, waited); /* each left one way */
    assert_int_equal(s.waited, waited);
    assert_int_equal(s.waited_dispatched, by[0]);
    assert_int_equal(s.waited_expired, by[1]);
    assert_int_equal(s.waited_cancelled, by[2]);
    assert_int_equal(s.waiting, 0);
    assert_int_equal(s.inflight, 0);
    assert_int_equal(s.waited_dispatched + s.waited_expired +
                         s.waited_cancelled + s.waited_dropped,
                     waited);
    assert_int_equal(lr__router_verify(w->r), LR_OK);
    lr_router_destroy(w->r);
    free(w);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_hammer_one_router),
        cmocka_unit_test(threads_no_torn_reads),
        cmocka_unit_test(threads_no_learn_after_remove),
        cmocka_unit_test(threads_waiting_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
