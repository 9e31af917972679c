/* lrsim: the discrete-event loop (see sim.h for the event flow).
 *
 * Events live in a binary min-heap ordered by (time, sequence number); the
 * sequence number makes ties run in scheduling order. Arrivals enter the
 * heap one at a time (each arrival schedules the next), so the heap holds
 * only what is in flight: a few events per request in flight and per
 * instance. */
#define _POSIX_C_SOURCE 200809L
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libroute.h>

#define NS_BASE 1000000000ull /* simulated t = 0 is 1 s on the router's clock */
#define MAX_MOVES 256
#define MAX_DISPATCH 64 /* lr_router_dispatch()'s entries per call */
/* --admit queue: a request still waiting this long after the last arrival
 * means the router never let it out (a run would not end otherwise) */
#define STUCK_US (24ull * 3600 * 1000000)

enum ev_kind {
    EV_ARRIVAL,
    EV_RECV,         /* request reaches its engine */
    EV_STEP,         /* an engine step ends */
    EV_FIRST_TOKEN,  /* the gateway sees a first token */
    EV_COMPLETE,     /* the gateway sees a completion */
    EV_FAIL,         /* the gateway sees a refusal */
    EV_SCRAPE_TICK,  /* the gateway scrapes every engine */
    EV_SCRAPE_AT,    /* the scrape reaches an engine */
    EV_SCRAPE_BACK,  /* its answer reaches the gateway */
    EV_SAMPLE,       /* load-CV sample (measurement only) */
    EV_REBALANCE,    /* DualMap rebalancing plan */
    EV_LEARN,        /* lodestar: the host's learning thread runs a step */
    EV_DELTAS,       /* replicas publish their deltas (--sync deltas) */
    EV_GAUGES,       /* replicas publish their load gauges */
    EV_DEADLINE,     /* --admit queue: a waiting request's deadline */
    EV_ADAPTERS_BACK, /* an engine's adapters reach the gateway (LoRA) */
    EV_PRECV,         /* a split request's prefill leg reaches its engine */
    EV_KV_SEND,       /* its decode leg reaches the decode engine */
    EV_KV_DONE        /* its KV transfer ends */
};

struct ev {
    uint64_t t;
    uint64_t seq;
    uint64_t a; /* request index, or packed running/waiting */
    double x;   /* kv use of a scrape */
    uint32_t kind;
    uint32_t inst;
};

struct heap {
    struct ev *v;
    size_t n, cap;
    uint64_t next_seq;
};

static int
ev_less(const struct ev *a, const struct ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int
heap_push(struct heap *h, struct ev e)
{
    if (sim_grow((void **)&h->v, &h->cap, h->n + 1, sizeof *h->v) != 0)
        return -1;
    e.seq = h->next_seq++;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = e;
    return 0;
}

static struct ev
heap_pop(struct heap *h)
{
    struct ev top = h->v[0];
    struct ev last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l >= h->n)
            break;
        m = l;
        if (l + 1 < h->n && ev_less(&h->v[l + 1], &h->v[l]))
            m = l + 1;
        if (!ev_less(&h->v[m], &last))
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

/* ---- run state ------------------------------------------------------------------ */

/* An engine's adapters as a scrape found them (LoRA), on their way to
 * the gateway. */
struct asnap {
    struct sim_adapter_report rep;
    uint64_t scraped_us;
    uint32_t ids[LR_ROUTER_MAX_ADAPTERS];
};

/* An engine's KV-event hooks' context (--sync events). */
struct sink {
    struct run *r;
    uint32_t inst;
};

struct run {
    const struct sim_config *cfg;
    const struct sim_workload *w;
    const struct sim_cluster *c;
    struct sim_result *res;
    struct sim_err *err;
    lr_router *router; /* routers[0]: the one with a single router */
    /* gateway replicas (cfg->rep): routers[k] is replica k; a request's
     * later events go to the replica that routed it */
    lr_router **routers;
    uint32_t n_rep;
    uint8_t *rep_of;
    struct sim_rng front_rng, loss_rng;
    uint64_t *marks; /* deltas: each replica's journal mark */
    uint64_t delta_ticks;
    /* --sync events: the engines' hooks, a token scratch to rebuild a
     * stored run's token ids, the removals of the engine stepping */
    struct sink *sinks;
    uint32_t *ev_tok, *ev_bnd;
    size_t ev_tok_cap, ev_bnd_cap;
    uint64_t *rm;
    size_t rm_n, rm_cap;
    uint32_t rm_inst;
    /* ... and the CPU tier's drops (cfg->cpu_blocks) */
    uint64_t *rmc;
    size_t rmc_n, rmc_cap;
    uint32_t rmc_inst;
    int sink_failed;
    uint32_t *rid;     /* router id per instance */
    uint32_t *inst_of; /* instance per router id */
    uint32_t max_rid;
    struct sim_engine **eng;
    struct heap heap;
    uint64_t now;
    /* sequences: a pool whose buffers are reused */
    struct sim_seq **seq_of; /* per request while in flight */
    struct sim_seq **pseq_of; /* a split request's prefill leg */
    struct sim_seq **pulled;  /* sim_engine_pull's scratch (max batch) */
    size_t max_batch;
    struct sim_seq **pool;
    size_t pool_n, pool_cap, seqs_made;
    struct sim_emit *emit;
    uint32_t *tok, *bnd;
    size_t tok_cap, bnd_cap;
    size_t next_arrival;
    size_t done; /* requests completed or failed */
    uint64_t last_arrival_us;
    struct sim_rng jitter;
    /* load sampling */
    double cv_sum;
    uint64_t cv_n, samples;
    double *pending_sum;
    lr_move moves[MAX_MOVES];
    /* --admit queue: requests waiting in each replica's router queue, and
     * whether request q waits there now */
    uint64_t *waiting;
    uint8_t *in_queue;
    lr_dispatched out[MAX_DISPATCH];
    /* lodestar's learning curve: counters at the previous point */
    uint64_t reason_prev[SIM_REASONS];
    uint64_t routes_prev;
    double pmae_sum; /* since the previous point */
    uint64_t pmae_n;
    /* LoRA and models: the model each instance serves; the adapter
     * scrapes in flight (a pool: snaps[k] is free when listed in free_) */
    uint32_t *model_of;
    int lora; /* the traffic names adapters */
    struct asnap *snaps;
    size_t n_snaps, cap_snaps;
    uint32_t *free_snaps;
    size_t n_free_snaps, cap_free_snaps;
};

static uint64_t
ns_of(uint64_t us)
{
    return NS_BASE + us * 1000u;
}

static int
push(struct run *r, uint64_t t, uint32_t kind, uint32_t inst, uint64_t a,
     double x)
{
    struct ev e = { t, 0, a, x, kind, inst };
    if (heap_push(&r->heap, e) != 0)
        return sim_errf(r->err, "out of memory (event queue)");
    return 0;
}

static int
lib_fail(struct run *r, const char *call, lr_status st)
{
    return sim_errf(r->err, "%s: %s: %s (%s)", r->res->policy_name, call,
                    lr_strerror(st), lr_status_name(st));
}

/* The router's decision counts by reason, SIM_REASONS of them. */
static int
read_reasons(struct run *r, uint64_t *by)
{
    size_t n = 0;
    memset(by, 0, SIM_REASONS * sizeof *by);
    lr_status st = lr_router_reason_counts(r->router, by, SIM_REASONS, &n);
    if (st != LR_OK)
        return lib_fail(r, "lr_router_reason_counts", st);
    return 0;
}

static uint64_t
half_rtt(const struct run *r, uint32_t i)
{
    return r->c->inst[i].rtt_us / 2;
}

/* A sequence from the pool, or a new one. The pool has room for every
 * sequence ever made, so seq_put cannot fail. */
static struct sim_seq *
seq_get(struct run *r)
{
    if (r->pool_n > 0)
        return r->pool[--r->pool_n];
    if (sim_grow((void **)&r->pool, &r->pool_cap, r->seqs_made + 1,
                 sizeof *r->pool) != 0)
        return NULL;
    /* one cache line for the fields every step reads (engine.h) */
    size_t size = (sizeof(struct sim_seq) + 63) / 64 * 64;
    struct sim_seq *s = aligned_alloc(64, size);
    if (s == NULL)
        return NULL;
    memset(s, 0, size);
    r->seqs_made++;
    return s;
}

/* A sequence from the pool for request q, zeroed but for the buffers it
 * keeps (its keys and blocks, and their capacities). */
static struct sim_seq *
seq_fresh(struct run *r, size_t q)
{
    struct sim_seq *s = seq_get(r);
    if (s == NULL)
        return NULL;
    uint64_t *keys = s->keys;
    uint32_t *blocks = s->blocks;
    uint32_t ck = s->cap_keys, cb = s->cap_blocks;
    memset(s, 0, sizeof *s);
    s->keys = keys;
    s->blocks = blocks;
    s->cap_keys = ck;
    s->cap_blocks = cb;
    s->req = (uint32_t)q;
    return s;
}

static void
seq_put(struct run *r, struct sim_seq *s)
{
    r->pool[r->pool_n++] = s;
}

/* A request has ended (completed or failed): exactly once. */
static int
finish_req(struct run *r, size_t q, int state)
{
    struct sim_result *res = r->res;
    if (res->finishes[q]++ != 0)
        return sim_errf(r->err, "internal: request %zu finished twice", q);
    res->state[q] = (uint8_t)state;
    r->done++;
    if (state == REQ_DONE)
        res->completed++;
    else if (state == REQ_EXPIRED)
        res->expired++;
    else if (state == REQ_SHED)
        res->shed++;
    else
        res->failed++;
    if (state != REQ_DONE)
        res->gone_us[q] = r->now;
    return 0;
}

static int flush_removed(struct run *r);

static int
kick(struct run *r, uint32_t i)
{
    uint64_t us = sim_engine_start_step(r->eng[i]);
    if (flush_removed(r) != 0) /* the evictions of its admissions */
        return -1;
    if (us == 0)
        return 0;
    return push(r, r->now + us, EV_STEP, i, 0, 0);
}

/* ---- arrival: route() --------------------------------------------------------------- */

static int
prepare_tokens(struct run *r, size_t q, size_t *n_bnd)
{
    const struct sim_req *rq = &r->w->reqs[q];
    if (sim_grow((void **)&r->tok, &r->tok_cap, rq->input_tokens,
                 sizeof *r->tok) != 0 ||
        sim_grow((void **)&r->bnd, &r->bnd_cap, rq->n_segs,
                 sizeof *r->bnd) != 0)
        return sim_errf(r->err, "out of memory (token buffer)");
    sim_workload_tokens(r->w, q, r->tok, r->bnd, n_bnd);
    return 0;
}

static uint64_t
now_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The front load balancer: which replica gets request q. */
static uint32_t
pick_replica(struct run *r, size_t q)
{
    if (r->n_rep == 1)
        return 0;
    const struct sim_req *rq = &r->w->reqs[q];
    switch (r->cfg->rep.front) {
    case SIM_FRONT_ROUND_ROBIN:
        return (uint32_t)(q % r->n_rep);
    case SIM_FRONT_SESSION:
        if (rq->has_session)
            return (uint32_t)(sim_mix64(rq->session) % r->n_rep);
        return (uint32_t)sim_rng_range(&r->front_rng, 0, r->n_rep - 1);
    default:
        return (uint32_t)sim_rng_range(&r->front_rng, 0, r->n_rep - 1);
    }
}

static int send_req(struct run *r, size_t q, uint32_t rid, int32_t reason,
                    double cost);
static int send_split(struct run *r, size_t q, uint32_t rid, int32_t reason,
                      uint32_t prid);

/* Request q's TTFT deadline: its arrival + its class's SLO. */
static uint64_t
deadline_us(const struct run *r, size_t q)
{
    const struct sim_req *rq = &r->w->reqs[q];
    const struct sim_rclass *c = &r->w->mix.cls[rq->rclass];
    return rq->arrival_us + (uint64_t)llround(c->slo_s * 1e6);
}

/* What the request tells the router of its tenant and class (urgency,
 * deadline) when the workload has them, in both modes (adaptive weighs a
 * deadline); with --admit queue, that it may wait, or be shed. */
static void
admission_fields(struct run *r, size_t q, lr_request *lq)
{
    const struct sim_req *rq = &r->w->reqs[q];
    const struct sim_mix *m = &r->w->mix;
    int queue = r->cfg->admit == SIM_ADMIT_QUEUE;
    if (queue)
        lq->flags |= LR_ROUTE_MAY_WAIT;
    lq->tenant = rq->owner;
    if (m->n_cls == 0)
        return; /* no class: urgency 0, no deadline */
    const struct sim_rclass *c = &m->cls[rq->rclass];
    lq->urgency = c->urgency;
    lq->deadline_ns = ns_of(deadline_us(r, q));
    if (queue && c->sheddable)
        lq->flags |= LR_ROUTE_SHEDDABLE;
}

static int
on_arrival(struct run *r, size_t q)
{
    const struct sim_req *rq = &r->w->reqs[q];
    size_t n_bnd = 0;
    if (prepare_tokens(r, q, &n_bnd) != 0)
        return -1;
    lr_request lq;
    lr_request_init(&lq);
    lq.id = q + 1;
    lq.tokens = r->tok;
    lq.n_tokens = rq->input_tokens;
    lq.boundaries = n_bnd ? r->bnd : NULL;
    lq.n_boundaries = n_bnd;
    lq.tenant_salt = rq->tenant;
    lq.session = rq->session;
    lq.has_session = rq->has_session ? 1 : 0;
    lq.now_ns = ns_of(r->now);
    if (r->w->lora.n_models > 0)
        lq.model = sim_model_name(rq->model);
    lq.adapter = sim_adapter_name(r->w, rq->adapter);
    /* precise mode: the engines' events are what the routers know */
    if (r->cfg->rep.sync == SIM_SYNC_EVENTS)
        lq.flags |= LR_ROUTE_NO_LEARN;
    int queue = r->cfg->admit == SIM_ADMIT_QUEUE;
    if (queue || sim_mix_any(&r->w->mix))
        admission_fields(r, q, &lq);
    uint32_t k = pick_replica(r, q);
    r->rep_of[q] = (uint8_t)k;
    lr_decision d;
    lr_decision_init(&d);
    uint64_t t0 = now_mono_ns();
    lr_status st = lr_router_route(r->routers[k], &lq, &d);
    uint64_t t1 = now_mono_ns();
    r->res->route_ns[q] = (uint32_t)(t1 - t0 > UINT32_MAX ? UINT32_MAX
                                                           : t1 - t0);
    if (st == LR_ENOTSUP) {
        sim_errf(r->err, "%s: not supported by this libroute (route: %s)",
                 r->res->policy_name, lr_status_name(st));
        return 1;
    }
    if (queue && st == LR_EBUSY) /* sheddable, and it would have waited */
        return finish_req(r, q, REQ_SHED);
    if (st != LR_OK) {
        /* a gateway answers 503; the request is lost */
        r->res->route_errors++;
        return finish_req(r, q, REQ_FAILED);
    }
    if (queue && d.instance == LR_INSTANCE_NONE &&
        d.reason == LR_REASON_WAITING) {
        /* held in the router's queue: let out by lr_router_dispatch(),
         * or expired there at its deadline */
        r->res->waited[q] = 1;
        r->in_queue[q] = 1;
        r->waiting[k]++;
        if (lq.deadline_ns == 0)
            return 0;
        return push(r, deadline_us(r, q), EV_DEADLINE, 0, q, 0);
    }
    if (d.prefill_instance != LR_INSTANCE_NONE)
        return send_split(r, q, d.instance, d.reason, d.prefill_instance);
    return send_req(r, q, d.instance, d.reason, d.cost);
}

/* Request q, routed to router id `rid` (its tokens in r->tok): its
 * sequence, then the engine's queue RTT/2 later, or the refusal of a
 * request the engine can never fit. */
static int
send_req(struct run *r, size_t q, uint32_t rid, int32_t reason, double cost)
{
    const struct sim_req *rq = &r->w->reqs[q];
    if (rid >= r->max_rid || r->inst_of[rid] == UINT32_MAX)
        return sim_errf(r->err, "%s: route() chose unknown instance %u",
                        r->res->policy_name, rid);
    uint32_t i = r->inst_of[rid];
    if (r->w->lora.n_models > 0 && r->model_of[i] != rq->model)
        return sim_errf(r->err, "%s: route() sent request %zu of model %s "
                                "to %s, which serves %s",
                        r->res->policy_name, q, sim_model_name(rq->model),
                        r->c->inst[i].name,
                        sim_model_name(r->model_of[i]));
    if (r->cfg->policy == LR_POLICY_LODESTAR &&
        (reason == LR_REASON_MIN_COST || reason == LR_REASON_K_FILTER ||
         reason == LR_REASON_EXPLORE))
        r->res->pred_ttft_s[q] = (float)cost; /* cost = -predicted reward */
    struct sim_seq *s = seq_fresh(r, q);
    if (s == NULL)
        return sim_errf(r->err, "out of memory (sequence)");
    s->prompt = rq->input_tokens;
    s->output = rq->output_tokens;
    s->inst = i;
    s->adapter = rq->adapter;
    r->seq_of[q] = s;
    /* an adapter's blocks under its own salt, as the router keys them */
    if (sim_seq_set_keys(s, r->tok, rq->input_tokens, r->cfg->block_tokens,
                         sim_req_salt(r->w, q)) != 0 ||
        sim_seq_reserve(s, rq->input_tokens + rq->output_tokens,
                        r->cfg->block_tokens) != 0)
        return sim_errf(r->err, "out of memory (sequence blocks)");
    r->res->inst[q] = i;
    if (r->c->inst[i].role == LR_ROLE_PREFILL)
        return sim_errf(r->err, "%s: route() sent request %zu whole to "
                                "prefill instance %s",
                        r->res->policy_name, q, r->c->inst[i].name);
    if (!sim_engine_fits(r->eng[i], s->prompt, s->output) ||
        !sim_engine_serves(r->eng[i], s->adapter))
        return push(r, r->now + r->c->inst[i].rtt_us, EV_FAIL, i, q, 0);
    return push(r, r->now + half_rtt(r, i), EV_RECV, i, q, 0);
}

/* A split request: its decode leg's sequence waits (it goes to its
 * engine at the prefill's end); its prefill leg, a sequence of the same
 * prompt and one output token that holds its KV at its end, reaches its
 * engine RTT/2 later. A leg that can never fit fails the request. */
static int
send_split(struct run *r, size_t q, uint32_t rid, int32_t reason,
           uint32_t prid)
{
    if (prid >= r->max_rid || r->inst_of[prid] == UINT32_MAX ||
        rid >= r->max_rid || r->inst_of[rid] == UINT32_MAX)
        return sim_errf(r->err, "%s: route() chose unknown instances %u, %u",
                        r->res->policy_name, rid, prid);
    uint32_t i = r->inst_of[prid], di = r->inst_of[rid];
    if (r->c->inst[i].role != LR_ROLE_PREFILL ||
        r->c->inst[di].role == LR_ROLE_PREFILL)
        return sim_errf(r->err, "%s: route() split request %zu as %s then "
                                "%s",
                        r->res->policy_name, q, r->c->inst[i].name,
                        r->c->inst[di].name);
    const struct sim_req *rq = &r->w->reqs[q];
    struct sim_seq *s[2];
    for (int k = 0; k < 2; k++) {
        struct sim_seq *x = seq_fresh(r, q);
        if (x == NULL)
            return sim_errf(r->err, "out of memory (sequence)");
        x->prompt = rq->input_tokens;
        x->output = k == 0 ? rq->output_tokens : 1;
        x->hold = k == 1;
        x->inst = k == 0 ? di : i;
        if (sim_seq_set_keys(x, r->tok, rq->input_tokens,
                             r->cfg->block_tokens, sim_req_salt(r->w, q)) != 0 ||
            sim_seq_reserve(x, x->prompt + x->output, r->cfg->block_tokens) != 0)
            return sim_errf(r->err, "out of memory (sequence blocks)");
        s[k] = x;
    }
    (void)reason;
    r->seq_of[q] = s[0];
    r->pseq_of[q] = s[1];
    r->res->inst[q] = di;
    r->res->prefill_inst[q] = i;
    r->res->n_split++;
    if (!sim_engine_fits(r->eng[di], rq->input_tokens, rq->output_tokens) ||
        !sim_engine_fits(r->eng[i], rq->input_tokens, 1))
        return push(r, r->now + r->c->inst[di].rtt_us, EV_FAIL, di, q, 0);
    return push(r, r->now + half_rtt(r, i), EV_PRECV, i, q, 0);
}

/* --admit queue: what replica k's router lets out of its queue now: each
 * request routed (sent to its engine) or expired. Called whenever
 * capacity may have freed: a first token, a completion, a failure, a
 * scrape, a gauge exchange, and at each waiting request's deadline. */
static int
let_out(struct run *r, uint32_t k)
{
    if (r->cfg->admit != SIM_ADMIT_QUEUE || r->waiting[k] == 0)
        return 0;
    struct sim_result *res = r->res;
    for (;;) {
        size_t n = 0;
        lr_status st = lr_router_dispatch(r->routers[k], ns_of(r->now), r->out,
                                          MAX_DISPATCH, sizeof r->out[0], &n);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_dispatch", st);
        for (size_t j = 0; j < n; j++) {
            const lr_dispatched *d = &r->out[j];
            size_t q = (size_t)(d->request_id - 1);
            if (d->request_id == 0 || q >= r->w->n_reqs || !r->in_queue[q] ||
                r->rep_of[q] != k)
                return sim_errf(r->err, "%s: lr_router_dispatch() let out "
                                        "request %llu, which does not wait "
                                        "there",
                                res->policy_name,
                                (unsigned long long)d->request_id);
            r->in_queue[q] = 0;
            r->waiting[k]--;
            res->wait_us[q] = r->now - r->w->reqs[q].arrival_us;
            if (d->status == LR_OK) {
                size_t n_bnd;
                if (prepare_tokens(r, q, &n_bnd) != 0 ||
                    send_req(r, q, d->instance, d->reason, d->cost) != 0)
                    return -1;
            } else if (d->status == LR_EEXPIRED) {
                if (finish_req(r, q, REQ_EXPIRED) != 0)
                    return -1;
            } else if (d->status == LR_EEXIST) {
                res->route_errors++; /* ids are unique here: never */
                if (finish_req(r, q, REQ_FAILED) != 0)
                    return -1;
            } else {
                return lib_fail(r, "lr_router_dispatch entry",
                                (lr_status)d->status);
            }
        }
        if (n < MAX_DISPATCH)
            return 0;
    }
}

static int
let_out_all(struct run *r)
{
    for (uint32_t k = 0; k < r->n_rep; k++)
        if (let_out(r, k) != 0)
            return -1;
    return 0;
}

static int
schedule_next_arrival(struct run *r)
{
    if (r->next_arrival >= r->w->n_reqs)
        return 0;
    size_t q = r->next_arrival++;
    return push(r, r->w->reqs[q].arrival_us, EV_ARRIVAL, 0, q, 0);
}

/* ---- engine events ------------------------------------------------------------------ */

static int pull(struct run *r, uint32_t i);
static int on_prefilled(struct run *r, uint32_t p, size_t q);

static int
on_step(struct run *r, uint32_t i)
{
    size_t n = sim_engine_finish_step(r->eng[i], r->emit);
    /* its 1st step, its (N+1)th, (2N+1)th...; every engine also at the
     * end (summarize) */
    if (r->cfg->verify_engines > 0 &&
        (sim_engine_counters(r->eng[i])->steps - 1) %
                (uint64_t)r->cfg->verify_engines ==
            0 &&
        sim_engine_verify(r->eng[i], r->err) != 0)
        return sim_errf(r->err, "engine %u invariant broken", i);
    uint64_t back = r->now + half_rtt(r, i);
    for (size_t k = 0; k < n; k++) {
        struct sim_seq *s = r->emit[k].seq;
        size_t q = s->req;
        uint64_t arrival = r->w->reqs[q].arrival_us;
        if (r->emit[k].kind == EMIT_PREFILLED) {
            if (on_prefilled(r, i, q) != 0)
                return -1;
        } else if (r->emit[k].kind == EMIT_FIRST_TOKEN) {
            r->res->ttft_us[q] = back - arrival;
            r->res->decode_us[q] = r->now; /* until its last token */
            r->res->hit[q] = s->first_hit;
            if (push(r, back, EV_FIRST_TOKEN, i, q, 0) != 0)
                return -1;
        } else {
            r->res->e2e_us[q] = back - arrival;
            r->res->decode_us[q] = r->now - r->res->decode_us[q];
            r->res->preemptions += s->preemptions;
            if (push(r, back, EV_COMPLETE, i, q, 0) != 0)
                return -1;
            r->seq_of[q] = NULL;
            seq_put(r, s);
        }
    }
    if (pull(r, i) != 0)
        return -1;
    return kick(r, i);
}

static int
on_recv(struct run *r, uint32_t i, size_t q)
{
    struct sim_seq *s = r->seq_of[q];
    s->inst = i;
    r->res->inst[q] = i;
    sim_engine_enqueue(r->eng[i], s, 0);
    return kick(r, i);
}

/* ---- disaggregation: prefill leg, KV transfer, decode leg ------------------------ */

static int
on_precv(struct run *r, uint32_t i, size_t q)
{
    sim_engine_enqueue(r->eng[i], r->pseq_of[q], 0);
    return kick(r, i);
}

/* The decode engine's pulls that its memory allows now: each transfer
 * from the request's prefill instance starts. */
static int
pull(struct run *r, uint32_t i)
{
    for (;;) {
        size_t n = sim_engine_pull(r->eng[i], r->pulled, r->max_batch);
        for (size_t k = 0; k < n; k++) {
            const struct sim_seq *s = r->pulled[k];
            size_t q = s->req;
            uint32_t p = r->pseq_of[q]->inst;
            int lvl = sim_placement_level(&r->c->inst[p], &r->c->inst[i]);
            double bytes = (double)s->received * r->cfg->kv_bytes_per_token;
            uint64_t us = r->cfg->kv_setup_us +
                          (uint64_t)llround(bytes /
                                            (r->cfg->kv_gbps[lvl] * 1e3));
            r->res->transfer_us[q] = us;
            r->res->kv_transfer_bytes += (uint64_t)bytes;
            if (push(r, r->now + us, EV_KV_DONE, i, q, 0) != 0)
                return -1;
        }
        if (n < r->max_batch)
            return 0;
    }
}

/* The prefill leg has computed the prompt: its answer goes back to the
 * gateway, which sends the decode leg to its engine. */
static int
on_prefilled(struct run *r, uint32_t p, size_t q)
{
    r->res->prefill_us[q] = r->now - r->w->reqs[q].arrival_us;
    uint32_t d = r->seq_of[q]->inst;
    return push(r, r->now + half_rtt(r, p) + half_rtt(r, d), EV_KV_SEND, d,
                q, 0);
}

static int
on_kv_send(struct run *r, uint32_t i, size_t q)
{
    sim_engine_enqueue_remote(r->eng[i], r->seq_of[q]);
    if (pull(r, i) != 0)
        return -1;
    return kick(r, i);
}

/* The KV is in: the decode leg runs, the prefill engine lets its blocks
 * go, and the router hears the prefill leg ended. */
static int
on_kv_done(struct run *r, uint32_t i, size_t q)
{
    struct sim_seq *ps = r->pseq_of[q];
    uint32_t p = ps->inst;
    sim_engine_kv_arrived(r->eng[i], r->seq_of[q]);
    sim_engine_release_held(r->eng[p], ps);
    r->pseq_of[q] = NULL;
    seq_put(r, ps);
    r->res->prefill_dones[q]++;
    lr_status st = lr_router_prefill_done(r->routers[r->rep_of[q]], q + 1,
                                          ns_of(r->now));
    if (st != LR_OK)
        return lib_fail(r, "lr_router_prefill_done", st);
    if (r->cfg->verify_engines &&
        (sim_engine_verify(r->eng[i], r->err) != 0 ||
         sim_engine_verify(r->eng[p], r->err) != 0))
        return sim_errf(r->err, "engine invariant broken after a transfer");
    if (pull(r, p) != 0 || kick(r, p) != 0)
        return -1;
    return kick(r, i);
}

static int
on_router_event(struct run *r, const struct ev *e)
{
    uint64_t id = e->a + 1, now = ns_of(r->now);
    lr_status st;
    size_t q = (size_t)e->a;
    lr_router *router = r->routers[r->rep_of[q]];
    switch (e->kind) {
    case EV_FIRST_TOKEN:
        st = lr_router_first_token(router, id, now);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_first_token", st);
        if (!isnan(r->res->pred_ttft_s[q])) {
            /* the same reward the router sees: route() to first token */
            double obs = (double)r->res->ttft_us[q] / 1e6;
            r->pmae_sum += fabs((double)r->res->pred_ttft_s[q] - obs);
            r->pmae_n++;
        }
        return let_out(r, r->rep_of[q]);
    case EV_COMPLETE:
        /* what the engine reused at admission, as a gateway reads it from
         * the response (llama.cpp's timings.cache_n, vLLM's usage) */
        st = lr_router_observe_cached(router, id, r->res->hit[q], now);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_observe_cached", st);
        st = lr_router_complete(router, id, r->w->reqs[q].output_tokens, now);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_complete", st);
        if (finish_req(r, q, REQ_DONE) != 0)
            return -1;
        return let_out(r, r->rep_of[q]);
    default: /* EV_FAIL: the engine refused a request it can never fit */
        st = lr_router_fail(router, id, now);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_fail", st);
        seq_put(r, r->seq_of[q]);
        r->seq_of[q] = NULL;
        if (r->pseq_of[q] != NULL) {
            seq_put(r, r->pseq_of[q]);
            r->pseq_of[q] = NULL;
        }
        if (finish_req(r, q, REQ_FAILED) != 0)
            return -1;
        return let_out(r, r->rep_of[q]);
    }
}

/* --admit queue: request q's deadline. Still waiting, it expires now:
 * its router says so at this dispatch. */
static int
on_deadline(struct run *r, size_t q)
{
    if (!r->in_queue[q])
        return 0;
    return let_out(r, r->rep_of[q]);
}

/* ---- telemetry ------------------------------------------------------------------------- */

static int
periodic(struct run *r, uint32_t kind, uint64_t period)
{
    if (r->done >= r->w->n_reqs)
        return 0;
    return push(r, r->now + period, kind, 0, 0, 0);
}

static int
on_scrape_tick(struct run *r)
{
    if (r->cfg->admit == SIM_ADMIT_QUEUE &&
        r->now > r->last_arrival_us + STUCK_US)
        return sim_errf(r->err, "%s: requests still wait in the router's "
                                "queue a day after the last arrival",
                        r->res->policy_name);
    for (uint32_t i = 0; i < r->c->n; i++)
        if (push(r, r->now + half_rtt(r, i), EV_SCRAPE_AT, i, 0, 0) != 0)
            return -1;
    return periodic(r, EV_SCRAPE_TICK, r->cfg->scrape_us);
}

static int
on_scrape_at(struct run *r, uint32_t i)
{
    struct sim_engine_state s;
    sim_engine_state(r->eng[i], &s);
    uint64_t packed = (uint64_t)s.running << 32 | s.waiting;
    if (push(r, r->now + half_rtt(r, i), EV_SCRAPE_BACK, i, packed,
             s.kv_use) != 0)
        return -1;
    if (!r->lora)
        return 0;
    /* vLLM's vllm:lora_requests_info, read with the other metrics */
    size_t k;
    if (r->n_free_snaps > 0) {
        k = r->free_snaps[--r->n_free_snaps];
    } else {
        if (sim_grow((void **)&r->snaps, &r->cap_snaps, r->n_snaps + 1,
                     sizeof *r->snaps) != 0 ||
            sim_grow((void **)&r->free_snaps, &r->cap_free_snaps,
                     r->n_snaps + 1, sizeof *r->free_snaps) != 0)
            return sim_errf(r->err, "out of memory (adapter scrapes)");
        k = r->n_snaps++;
    }
    struct asnap *a = &r->snaps[k];
    sim_engine_adapters(r->eng[i], a->ids, LR_ROUTER_MAX_ADAPTERS, &a->rep);
    a->scraped_us = r->now;
    return push(r, r->now + half_rtt(r, i), EV_ADAPTERS_BACK, i, k, 0);
}

/* An engine's adapters reach the gateway: every replica is told. */
static int
on_adapters_back(struct run *r, const struct ev *e)
{
    struct asnap *a = &r->snaps[e->a];
    const char *names[LR_ROUTER_MAX_ADAPTERS];
    uint32_t n = a->rep.n_running + a->rep.n_waiting;
    for (uint32_t k = 0; k < n; k++)
        names[k] = sim_adapter_name(r->w, a->ids[k]);
    lr_adapter_stats st;
    lr_adapter_stats_init(&st);
    st.running = names;
    st.n_running = a->rep.n_running;
    st.waiting = names + a->rep.n_running;
    st.n_waiting = a->rep.n_waiting;
    st.max_adapters = a->rep.max_loras;
    st.scraped_ns = ns_of(a->scraped_us);
    r->free_snaps[r->n_free_snaps++] = (uint32_t)e->a;
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_status s = lr_router_set_adapters(r->routers[k], r->rid[e->inst],
                                             &st);
        if (s != LR_OK)
            return lib_fail(r, "lr_router_set_adapters", s);
    }
    return 0;
}

static int
on_scrape_back(struct run *r, const struct ev *e)
{
    uint32_t i = e->inst;
    lr_engine_stats st;
    lr_engine_stats_init(&st);
    st.running = (uint32_t)(e->a >> 32);
    st.waiting = (uint32_t)e->a;
    st.kv_use = e->x;
    st.scraped_ns = ns_of(r->now - half_rtt(r, i));
    /* every replica scrapes and probes every engine (the same answer) */
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_status s = lr_router_set_stats(r->routers[k], r->rid[i], &st);
        if (s != LR_OK)
            return lib_fail(r, "lr_router_set_stats", s);
        double j = r->cfg->probe_jitter;
        double f = 1.0 + j * (2.0 * sim_rng_unit(&r->jitter) - 1.0);
        uint64_t rtt_ns =
            (uint64_t)llround((double)r->c->inst[i].rtt_us * 1000.0 * f);
        s = lr_router_observe_rtt(r->routers[k], r->rid[i], rtt_ns);
        if (s != LR_OK)
            return lib_fail(r, "lr_router_observe_rtt", s);
    }
    return let_out_all(r);
}

static int
on_sample(struct run *r)
{
    uint32_t n = r->c->n;
    double sum = 0, sq = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct sim_engine_state s;
        sim_engine_state(r->eng[i], &s);
        double v = (double)s.pending_prefill;
        r->pending_sum[i] += v;
        sum += v;
        sq += v * v;
    }
    r->samples++;
    double mean = sum / n;
    if (mean > 0) {
        double var = sq / n - mean * mean;
        r->cv_sum += sqrt(var > 0 ? var : 0) / mean;
        r->cv_n++;
    }
    /* balance is measured while traffic arrives, not in the drain */
    if (r->now + r->cfg->sample_us > r->last_arrival_us)
        return 0;
    return periodic(r, EV_SAMPLE, r->cfg->sample_us);
}

static int
rebalance_one(struct run *r, lr_router *router)
{
    size_t n = 0;
    lr_status st =
        lr_router_rebalance_plan(router, ns_of(r->now), r->moves, MAX_MOVES,
                                 sizeof r->moves[0], &n);
    if (st != LR_OK)
        return lib_fail(r, "lr_router_rebalance_plan", st);
    for (size_t k = 0; k < n; k++) {
        const lr_move *m = &r->moves[k];
        size_t q = (size_t)(m->request_id - 1);
        if (q >= r->w->n_reqs || m->to >= r->max_rid ||
            r->inst_of[m->to] == UINT32_MAX)
            return sim_errf(r->err, "%s: rebalance plan names unknown ids",
                            r->res->policy_name);
        struct sim_seq *s = r->seq_of[q];
        uint32_t to = r->inst_of[m->to];
        /* only a request still waiting in its engine's queue can move;
         * one already admitted stays; nothing moves to a prefill
         * instance, nor while its prefill leg runs */
        if (s == NULL || r->c->inst[to].role == LR_ROLE_PREFILL ||
            r->pseq_of[q] != NULL ||
            !sim_engine_fits(r->eng[to], s->prompt, s->output) ||
            !sim_engine_serves(r->eng[to], s->adapter) ||
            sim_engine_remove_waiting(r->eng[s->inst], s) != 0)
            continue;
        if (r->w->lora.n_models > 0 && r->model_of[to] != r->w->reqs[q].model)
            return sim_errf(r->err, "%s: rebalance plan moves request %zu of "
                                    "model %s to %s, which serves %s",
                            r->res->policy_name, q,
                            sim_model_name(r->w->reqs[q].model),
                            r->c->inst[to].name,
                            sim_model_name(r->model_of[to]));
        st = lr_router_move(router, m->request_id, m->to);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_move", st);
        r->res->moves++;
        if (push(r, r->now + half_rtt(r, to), EV_RECV, to, q, 0) != 0)
            return -1;
    }
    return 0;
}

/* Each replica plans for the requests it routed. */
static int
on_rebalance(struct run *r)
{
    for (uint32_t k = 0; k < r->n_rep; k++)
        if (rebalance_one(r, r->routers[k]) != 0)
            return -1;
    return periodic(r, EV_REBALANCE, r->cfg->scrape_us);
}

/* ---- lodestar: learning ----------------------------------------------------------------- */

static int
add_point(struct run *r, int stepped, int trained, double wall_s)
{
    struct sim_result *res = r->res;
    if (sim_grow((void **)&res->curve, &res->cap_curve, res->n_curve + 1,
                 sizeof *res->curve) != 0)
        return sim_errf(r->err, "out of memory (learning curve)");
    struct sim_learn_point *p = &res->curve[res->n_curve++];
    memset(p, 0, sizeof *p);
    p->t_s = (double)r->now / 1e6;
    p->stepped = stepped;
    p->trained = trained;
    p->step_wall_s = wall_s;
    lr_learner_stats ls;
    lr_learner_stats_init(&ls);
    lr_status st = lr_router_learner_stats(r->router, &ls);
    if (st != LR_OK)
        return lib_fail(r, "lr_router_learner_stats", st);
    p->samples = ls.samples;
    p->model_round = ls.model_round;
    p->model_samples = ls.model_samples;
    p->model_mse = ls.model_mse;
    p->online_mae = ls.online_mae;
    p->pred_mae = r->pmae_n ? r->pmae_sum / (double)r->pmae_n : NAN;
    p->pred_n = r->pmae_n;
    r->pmae_sum = 0;
    r->pmae_n = 0;
    lr_router_stats rs;
    lr_router_stats_init(&rs);
    st = lr_router_get_stats(r->router, &rs);
    if (st != LR_OK)
        return lib_fail(r, "lr_router_get_stats", st);
    p->decisions = rs.routes - r->routes_prev;
    r->routes_prev = rs.routes;
    uint64_t by[SIM_REASONS];
    if (read_reasons(r, by) != 0)
        return -1;
    for (int k = 0; k < SIM_REASONS; k++) {
        p->by_reason[k] = by[k] - r->reason_prev[k];
        r->reason_prev[k] = by[k];
    }
    res->learn_samples = ls.samples;
    res->learn_rounds = ls.model_round;
    res->learn_dropped_full = ls.dropped_full;
    res->learn_dropped_range = ls.dropped_range;
    return 0;
}

/* The host's learning thread, in simulated time: one step, which takes
 * none. A real gateway trains beside route(); here a new model serves as
 * soon as the samples of its round exist. */
static int
on_learn(struct run *r)
{
    int stepped = 0;
    int32_t trained = 0;
    double wall = 0;
    if (r->now < r->cfg->freeze_us) {
        /* every replica learns on its own samples; the curve follows
         * replica 0's */
        for (uint32_t k = 0; k < r->n_rep; k++) {
            int32_t tr = 0;
            uint64_t t0 = now_mono_ns();
            lr_status st = lr_router_learn_step(r->routers[k], 0, &tr);
            double w = (double)(now_mono_ns() - t0) / 1e9;
            r->res->learn_wall_s += w;
            /* LR_ENOMEM keeps the samples for the next step */
            if (st != LR_OK && st != LR_ENOMEM)
                return lib_fail(r, "lr_router_learn_step", st);
            if (k == 0) {
                trained = tr;
                wall = w;
            }
        }
        stepped = 1;
        r->res->learn_steps++;
    }
    if (add_point(r, stepped, trained != 0, wall) != 0)
        return -1;
    return periodic(r, EV_LEARN, r->cfg->learn_us);
}

/* ---- replicas: deltas, gauges, engine events --------------------------------------------- */

/* Every replica publishes what it learned since its last publication
 * (every full_us, everything: what heals a lost delta) to every other;
 * each delivery is lost with probability rep.loss. */
static int
on_deltas(struct run *r)
{
    const struct sim_replicas *rep = &r->cfg->rep;
    uint64_t every = rep->full_us > rep->delta_us ? rep->full_us / rep->delta_us
                                                  : 1;
    /* with the engines' events, which every replica takes, a lost delta
     * costs only until its request is prefilled and stored: no full
     * publications */
    int full = rep->full_us > 0 && rep->sync == SIM_SYNC_DELTAS &&
               r->delta_ticks % every == every - 1;
    r->delta_ticks++;
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_blob *b = NULL;
        uint64_t mark = 0;
        lr_status st = lr_router_export_delta(r->routers[k],
                                              full ? 0 : r->marks[k], &b, &mark);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_export_delta", st);
        r->marks[k] = mark;
        r->res->deltas_sent++;
        r->res->delta_bytes += lr_blob_size(b);
        for (uint32_t j = 0; j < r->n_rep && st == LR_OK; j++) {
            if (j == k)
                continue;
            if (rep->loss > 0 && sim_rng_unit(&r->loss_rng) < rep->loss) {
                r->res->deltas_dropped++;
                continue;
            }
            st = lr_router_import_delta(r->routers[j], lr_blob_data(b),
                                        lr_blob_size(b), ns_of(r->now));
        }
        lr_blob_destroy(b);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_import_delta", st);
    }
    return periodic(r, EV_DELTAS, rep->delta_us);
}

/* Every replica's in-flight counters to every other. */
static int
on_gauges(struct run *r)
{
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_blob *b = NULL;
        lr_status st = lr_router_export_gauges(r->routers[k], &b);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_export_gauges", st);
        r->res->gauges_sent++;
        r->res->gauge_bytes += lr_blob_size(b);
        for (uint32_t j = 0; j < r->n_rep && st == LR_OK; j++)
            if (j != k)
                st = lr_router_import_gauges(r->routers[j], lr_blob_data(b),
                                             lr_blob_size(b), ns_of(r->now));
        lr_blob_destroy(b);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_import_gauges", st);
    }
    if (let_out_all(r) != 0)
        return -1;
    return periodic(r, EV_GAUGES, r->cfg->rep.gauge_us);
}

/* An engine's CPU-tier drops, as one BlockRemoved of that tier per
 * replica. */
static int
flush_removed_cpu(struct run *r)
{
    if (r->rmc_n == 0)
        return 0;
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_status st = lr_router_kv_removed_tier(r->routers[k],
                                                 r->rid[r->rmc_inst],
                                                 LR_TIER_CPU, r->rmc, r->rmc_n,
                                                 NULL);
        if (st != LR_OK && st != LR_ENOENT) /* ENOENT: nothing stored yet */
            return lib_fail(r, "lr_router_kv_removed_tier", st);
    }
    r->res->kv_events++;
    r->res->kv_cpu_events++;
    r->rmc_n = 0;
    return 0;
}

/* An engine's evictions, as one BlockRemoved per replica (and its CPU
 * tier's drops). */
static int
flush_removed(struct run *r)
{
    if (flush_removed_cpu(r) != 0)
        return -1;
    if (r->rm_n == 0)
        return 0;
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_status st = lr_router_kv_removed(r->routers[k], r->rid[r->rm_inst],
                                            r->rm, r->rm_n, NULL);
        if (st != LR_OK && st != LR_ENOENT) /* ENOENT: nothing stored yet */
            return lib_fail(r, "lr_router_kv_removed", st);
    }
    r->res->kv_events++;
    r->rm_n = 0;
    return 0;
}

/* Buffer a removal of key into *buf (the removals of one engine at a
 * time: another engine's flush the buffers first). */
static void
buffer_removed(struct run *r, uint32_t inst, uint64_t key, uint64_t **buf,
               size_t *n, size_t *cap, uint32_t *of)
{
    if (*n > 0 && *of != inst && flush_removed(r) != 0)
        r->sink_failed = 1;
    if (sim_grow((void **)buf, cap, *n + 1, sizeof **buf) != 0) {
        r->sink_failed = 1;
        sim_errf(r->err, "out of memory (KV events)");
        return;
    }
    *of = inst;
    (*buf)[(*n)++] = key;
}

static void
sink_removed(void *ctx, uint64_t key)
{
    struct sink *sk = ctx;
    struct run *r = sk->r;
    if (r->rmc_n > 0 && r->rmc_inst != sk->inst && flush_removed(r) != 0)
        r->sink_failed = 1;
    buffer_removed(r, sk->inst, key, &r->rm, &r->rm_n, &r->rm_cap, &r->rm_inst);
}

static void
sink_cpu_removed(void *ctx, uint64_t key)
{
    struct sink *sk = ctx;
    struct run *r = sk->r;
    if (r->rm_n > 0 && r->rm_inst != sk->inst && flush_removed(r) != 0)
        r->sink_failed = 1;
    buffer_removed(r, sk->inst, key, &r->rmc, &r->rmc_n, &r->rmc_cap,
                   &r->rmc_inst);
}

/* Blocks an engine copied to its CPU tier: a BlockStored of that tier
 * with engine hashes only (vLLM's OffloadingConnector sends no token
 * ids), to every replica. */
static void
sink_cpu_stored(void *ctx, const uint64_t *keys, uint32_t n)
{
    struct sink *sk = ctx;
    struct run *r = sk->r;
    if (r->sink_failed || flush_removed(r) != 0) {
        r->sink_failed = 1;
        return;
    }
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = keys;
    ev.n_blocks = n;
    ev.block_size = r->cfg->block_tokens;
    ev.tier = LR_TIER_CPU;
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_status st = lr_router_kv_stored(r->routers[k], r->rid[sk->inst], &ev,
                                           ns_of(r->now));
        if (st == LR_ENOENT) { /* no hash known: not placeable */
            r->res->kv_unplaced++;
            r->res->kv_cpu_unplaced++;
        } else if (st != LR_OK) {
            lib_fail(r, "lr_router_kv_stored(CPU)", st);
            r->sink_failed = 1;
            return;
        }
    }
    r->res->kv_events++;
    r->res->kv_cpu_events++;
}

/* A run of blocks stored on an engine: BlockStored to every replica, with
 * the token ids rebuilt from the workload. */
static void
sink_stored(void *ctx, const struct sim_seq *s, uint32_t from, uint32_t to)
{
    struct sink *sk = ctx;
    struct run *r = sk->r;
    const struct sim_req *rq = &r->w->reqs[s->req];
    if (r->sink_failed || flush_removed(r) != 0) {
        r->sink_failed = 1;
        return;
    }
    size_t n_bnd;
    if (sim_grow((void **)&r->ev_tok, &r->ev_tok_cap, rq->input_tokens,
                 sizeof *r->ev_tok) != 0 ||
        sim_grow((void **)&r->ev_bnd, &r->ev_bnd_cap, rq->n_segs,
                 sizeof *r->ev_bnd) != 0) {
        r->sink_failed = 1;
        sim_errf(r->err, "out of memory (KV events)");
        return;
    }
    sim_workload_tokens(r->w, s->req, r->ev_tok, r->ev_bnd, &n_bnd);
    uint32_t bt = r->cfg->block_tokens;
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = s->keys + from;
    ev.n_blocks = to - from;
    ev.has_parent = from > 0;
    ev.parent_hash = from > 0 ? s->keys[from - 1] : 0;
    ev.block_size = bt;
    ev.token_ids = r->ev_tok + (size_t)from * bt;
    ev.n_tokens = (size_t)(to - from) * bt;
    ev.tenant_salt = sim_req_salt(r->w, s->req);
    for (uint32_t k = 0; k < r->n_rep; k++) {
        lr_status st = lr_router_kv_stored(r->routers[k], r->rid[sk->inst], &ev,
                                           ns_of(r->now));
        if (st == LR_ENOENT) { /* its parent was evicted: not placeable */
            r->res->kv_unplaced++;
        } else if (st != LR_OK) {
            lib_fail(r, "lr_router_kv_stored", st);
            r->sink_failed = 1;
            return;
        }
    }
    r->res->kv_events++;
}

/* ---- set-up and tear-down --------------------------------------------------------------- */

void
sim_config_init(struct sim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->seed = 42;
    cfg->block_tokens = 16;
    cfg->scrape_us = 100000;
    cfg->sample_us = 100000;
    cfg->slo_ttft_s = 5.0;
    cfg->probe_jitter = 0.05;
    cfg->rebalance = 1;
    cfg->split_us = SIM_NEVER;
    cfg->learn_us = 1000000;
    cfg->freeze_us = SIM_NEVER;
    cfg->rep.n = 1;
    cfg->rep.gauge_us = 100000;
    cfg->rep.full_us = 10000000;
    cfg->rep.eviction = -1;
    cfg->max_loras = 4;
    cfg->adapter_load_us = 100000;
    cfg->cpu_load_gbps = 25.0;
    cfg->kv_bytes_per_token = 131072.0;
    cfg->kv_gbps[0] = 300.0;
    cfg->kv_gbps[1] = 50.0;
    cfg->kv_gbps[2] = 12.5;
    cfg->kv_gbps[3] = 1.25;
    cfg->kv_setup_us = 1000;
}

void
sim_result_free(struct sim_result *r)
{
    if (r == NULL)
        return;
    free(r->ttft_us);
    free(r->e2e_us);
    free(r->decode_us);
    free(r->inst);
    free(r->hit);
    free(r->route_ns);
    free(r->state);
    free(r->finishes);
    free(r->waited);
    free(r->wait_us);
    free(r->gone_us);
    free(r->per_inst);
    free(r->pred_ttft_s);
    free(r->prefill_inst);
    free(r->prefill_us);
    free(r->transfer_us);
    free(r->prefill_dones);
    free(r->curve);
    free(r->samples);
    memset(r, 0, sizeof *r);
}

void
sim_result_drop_requests(struct sim_result *r)
{
    free(r->ttft_us);
    free(r->e2e_us);
    free(r->decode_us);
    free(r->inst);
    free(r->hit);
    free(r->route_ns);
    free(r->state);
    free(r->finishes);
    free(r->waited);
    free(r->wait_us);
    free(r->gone_us);
    free(r->pred_ttft_s);
    free(r->samples);
    free(r->prefill_inst);
    free(r->prefill_us);
    free(r->transfer_us);
    free(r->prefill_dones);
    r->prefill_inst = NULL;
    r->prefill_us = r->transfer_us = NULL;
    r->prefill_dones = NULL;
    r->waited = NULL;
    r->wait_us = r->gone_us = NULL;
    r->ttft_us = r->e2e_us = r->decode_us = NULL;
    r->inst = r->hit = r->route_ns = NULL;
    r->state = r->finishes = NULL;
    r->pred_ttft_s = r->samples = NULL;
    r->n_samples = 0;
}

static int
alloc_result(struct sim_result *res, size_t n, uint32_t n_inst)
{
    res->n_reqs = n;
    res->n_inst = n_inst;
    res->ttft_us = sim_calloc(n, sizeof *res->ttft_us);
    res->e2e_us = sim_calloc(n, sizeof *res->e2e_us);
    res->decode_us = sim_calloc(n, sizeof *res->decode_us);
    res->inst = sim_calloc(n, sizeof *res->inst);
    res->hit = sim_calloc(n, sizeof *res->hit);
    res->route_ns = sim_calloc(n, sizeof *res->route_ns);
    res->state = sim_calloc(n, sizeof *res->state);
    res->finishes = sim_calloc(n, sizeof *res->finishes);
    res->waited = sim_calloc(n, sizeof *res->waited);
    res->wait_us = sim_calloc(n, sizeof *res->wait_us);
    res->gone_us = sim_calloc(n, sizeof *res->gone_us);
    res->per_inst = sim_calloc(n_inst, sizeof *res->per_inst);
    res->pred_ttft_s = sim_calloc(n, sizeof *res->pred_ttft_s);
    res->prefill_inst = sim_calloc(n, sizeof *res->prefill_inst);
    res->prefill_us = sim_calloc(n, sizeof *res->prefill_us);
    res->transfer_us = sim_calloc(n, sizeof *res->transfer_us);
    res->prefill_dones = sim_calloc(n, sizeof *res->prefill_dones);
    if (!res->prefill_inst || !res->prefill_us || !res->transfer_us ||
        !res->prefill_dones)
        return -1;
    for (size_t q = 0; q < n; q++)
        res->prefill_inst[q] = UINT32_MAX;
    if (!res->ttft_us || !res->e2e_us || !res->decode_us || !res->inst ||
        !res->hit || !res->route_ns || !res->state || !res->finishes ||
        !res->per_inst || !res->pred_ttft_s || !res->waited ||
        !res->wait_us || !res->gone_us)
        return -1;
    for (size_t q = 0; q < n; q++)
        res->pred_ttft_s[q] = NAN;
    res->pred_mae = NAN;
    return 0;
}

/* Replica k's router (replica 0's is the only one without replicas). All
 * add the same instances in the same order, so they agree on the ids. */
static int
make_router(struct run *r, uint32_t rk)
{
    const struct sim_config *cfg = r->cfg;
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = cfg->policy;
    o.seed = cfg->seed + rk; /* replicas draw differently */
    if (r->n_rep > 1)
        o.replica_id = rk + 1;
    /* replicas that import each other's placements keep the fleet's
     * recency order, as the engines do (docs/scale.md) */
    if (cfg->rep.eviction >= 0)
        o.index_eviction = cfg->rep.eviction;
    else if (r->n_rep > 1 && (sim_sync_deltas(&cfg->rep) ||
                              cfg->rep.sync == SIM_SYNC_EVENTS_LEARN))
        o.index_eviction = LR_EVICT_LRU;
    o.block_tokens = cfg->block_tokens;
    o.max_instances = r->c->n;
    uint64_t total = 0, batch = 0;
    for (uint32_t i = 0; i < r->c->n; i++) {
        total += r->c->inst[i].cls->kv_tokens / cfg->block_tokens;
        batch += r->c->inst[i].cls->max_batch;
    }
    /* requests in flight: the library's default (65,536), or the fleet's
     * running batches if more (a fleet of over 256 a100s), as a gateway
     * sizes the table to its fleet */
    if (batch > o.max_requests)
        o.max_requests = batch > LR_LOAD_MAX_REQUESTS ? LR_LOAD_MAX_REQUESTS
                                                      : (uint32_t)batch;
    /* a gateway sizes its index to the fleet's KV cache; one that learns
     * its routes and takes the engines' events too holds the fleet's
     * cache, as the events report it, and the placements of requests not
     * yet prefilled: twice that (docs/scale.md, "Under overload") */
    if (cfg->rep.sync == SIM_SYNC_EVENTS_DELTAS ||
        cfg->rep.sync == SIM_SYNC_EVENTS_LEARN)
        total *= 2;
    o.index_capacity_blocks = cfg->index_blocks ? cfg->index_blocks : total;
    if (o.index_capacity_blocks > LR_INDEX_MAX_CAPACITY)
        o.index_capacity_blocks = LR_INDEX_MAX_CAPACITY;
    o.marks = cfg->marks;
    if (cfg->queue_tokens)
        o.queue_tokens = cfg->queue_tokens;
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    if (cfg->lodestar_min)
        lo.min_samples = cfg->lodestar_min;
    if (cfg->lodestar_every)
        lo.retrain_every = cfg->lodestar_every;
    if (cfg->lodestar_epochs)
        lo.epochs = cfg->lodestar_epochs;
    if (cfg->lodestar_max_reward > 0)
        lo.max_abs_reward = cfg->lodestar_max_reward;
    o.learner = &lo;
    lr_router *router = NULL;
    lr_status st = lr_router_create(&o, &router);
    r->routers[rk] = router;
    if (st == LR_ENOTSUP) {
        sim_errf(r->err, "%s: not supported by this libroute (%s)",
                 r->res->policy_name, lr_status_name(st));
        return 1;
    }
    if (st != LR_OK)
        return lib_fail(r, "lr_router_create", st);
    st = lr_router_set_param(router, LR_PARAM_TTFT_SLO_S, cfg->slo_ttft_s);
    if (st != LR_OK)
        return lib_fail(r, "lr_router_set_param(TTFT_SLO_S)", st);
    /* the engines' adapter load time, as their operator would say it */
    if (r->lora) {
        st = lr_router_set_param(router, LR_PARAM_ADAPTER_LOAD_S,
                                 (double)cfg->adapter_load_us / 1e6);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_set_param(ADAPTER_LOAD_S)", st);
    }
    /* the KV links as the operator would describe them */
    static const lr_param kvp[5] = {
        LR_PARAM_KV_BYTES_PER_TOKEN, LR_PARAM_KV_GBPS_NODE,
        LR_PARAM_KV_GBPS_RACK, LR_PARAM_KV_GBPS_REGION, LR_PARAM_KV_GBPS_WAN
    };
    for (int k = 0; k < 5; k++) {
        st = lr_router_set_param(router, kvp[k],
                                 k == 0 ? cfg->kv_bytes_per_token
                                        : cfg->kv_gbps[k - 1]);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_set_param(KV)", st);
    }
    for (size_t k = 0; k < cfg->n_params; k++) {
        const struct sim_param *p = &cfg->params[k];
        st = lr_router_set_param(router, (lr_param)p->key, p->value);
        if (st != LR_OK)
            return sim_errf(r->err, "%s: --param %s=%g: %s",
                            r->res->policy_name, sim_param_name(p->key),
                            p->value, lr_strerror(st));
    }
    /* what the router is told of class speeds: the true rates, scaled, or
     * nothing (the library's default for every class) */
    for (const struct sim_class *k = sim_classes;
         cfg->rates.mode != SIM_RATES_NONE && k->name; k++) {
        lr_class_spec cs;
        lr_class_spec_init(&cs);
        cs.prefill_tokens_per_s = 1e6 / k->prefill_us;
        if (cfg->rates.mode == SIM_RATES_SCALE)
            cs.prefill_tokens_per_s *= cfg->rates.scale;
        st = lr_router_set_class(router, (uint32_t)(k - sim_classes), &cs);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_set_class", st);
    }
    if (rk == 0) {
        r->max_rid = o.max_instances + 1;
        r->inst_of = sim_calloc(r->max_rid, sizeof *r->inst_of);
        r->rid = sim_calloc(r->c->n, sizeof *r->rid);
        if (r->inst_of == NULL || r->rid == NULL)
            return sim_errf(r->err, "out of memory");
        memset(r->inst_of, 0xff, r->max_rid * sizeof *r->inst_of);
    }
    for (uint32_t i = 0; i < r->c->n; i++) {
        const struct sim_instance *in = &r->c->inst[i];
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = in->name;
        s.instance_class = in->class_id;
        s.prefix_caching = in->prefix_caching;
        s.rtt_ns = in->rtt_us * 1000u;
        const char *model[1] = { sim_model_name(r->model_of[i]) };
        if (r->w->lora.n_models > 0) {
            s.models = model;
            s.n_models = 1;
        }
        if (r->lora)
            s.max_adapters = r->cfg->max_loras;
        s.role = in->role;
        s.node = in->node;
        s.rack = in->rack;
        s.region = in->region;
        uint32_t id;
        st = lr_router_add_instance(router, &s, &id);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_add_instance", st);
        if (rk > 0 && id != r->rid[i])
            return sim_errf(r->err, "replica %u gave instance %u id %u, "
                                    "replica 0 %u",
                            rk, i, id, r->rid[i]);
        r->rid[i] = id;
        if (r->rid[i] >= r->max_rid)
            return sim_errf(r->err, "router id %u out of range", r->rid[i]);
        r->inst_of[r->rid[i]] = i;
    }
    return 0;
}

/* The routers, and what the replicas share. */
static int
setup_replicas(struct run *r)
{
    const struct sim_replicas *rep = &r->cfg->rep;
    r->n_rep = rep->n ? rep->n : 1;
    r->routers = sim_calloc(r->n_rep, sizeof *r->routers);
    r->rep_of = sim_calloc(r->w->n_reqs ? r->w->n_reqs : 1, sizeof *r->rep_of);
    r->marks = sim_calloc(r->n_rep, sizeof *r->marks);
    r->waiting = sim_calloc(r->n_rep, sizeof *r->waiting);
    r->in_queue = sim_calloc(r->w->n_reqs ? r->w->n_reqs : 1,
                             sizeof *r->in_queue);
    if (r->routers == NULL || r->rep_of == NULL || r->marks == NULL ||
        r->waiting == NULL || r->in_queue == NULL)
        return sim_errf(r->err, "out of memory (replicas)");
    sim_rng_seed(&r->front_rng, r->cfg->seed ^ 0x66726f6e74ull);
    sim_rng_seed(&r->loss_rng, r->cfg->seed ^ 0x6c6f7373ull);
    for (uint32_t k = 0; k < r->n_rep; k++) {
        int rc = make_router(r, k);
        if (rc != 0)
            return rc;
    }
    r->router = r->routers[0];
    if (!sim_sync_events(rep))
        return 0;
    r->sinks = sim_calloc(r->c->n, sizeof *r->sinks);
    if (r->sinks == NULL)
        return sim_errf(r->err, "out of memory (replicas)");
    for (uint32_t i = 0; i < r->c->n; i++) {
        r->sinks[i] = (struct sink){ r, i };
        struct sim_kv_sink ks = { .stored = sink_stored,
                                  .removed = sink_removed,
                                  .ctx = &r->sinks[i] };
        if (r->cfg->cpu_blocks > 0) {
            ks.cpu_stored = sink_cpu_stored;
            ks.cpu_removed = sink_cpu_removed;
        }
        sim_engine_set_sink(r->eng[i], &ks);
    }
    return 0;
}

static int
setup(struct run *r)
{
    const struct sim_cluster *c = r->c;
    if (alloc_result(r->res, r->w->n_reqs, c->n) != 0)
        return sim_errf(r->err, "out of memory (%zu requests)", r->w->n_reqs);
    r->eng = sim_calloc(c->n, sizeof *r->eng);
    r->seq_of = sim_calloc(r->w->n_reqs, sizeof *r->seq_of);
    r->pseq_of = sim_calloc(r->w->n_reqs, sizeof *r->pseq_of);
    r->pending_sum = sim_calloc(c->n, sizeof *r->pending_sum);
    uint32_t max_batch = 1;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->inst[i].cls->max_batch > max_batch)
            max_batch = c->inst[i].cls->max_batch;
    r->emit = sim_calloc(max_batch, sizeof *r->emit);
    r->pulled = sim_calloc(max_batch, sizeof *r->pulled);
    r->max_batch = max_batch;
    if (!r->eng || !r->seq_of || !r->pending_sum || !r->emit || !r->pulled ||
        !r->pseq_of)
        return sim_errf(r->err, "out of memory");
    r->lora = r->w->lora.n_adapters > 0;
    r->model_of = sim_calloc(c->n, sizeof *r->model_of);
    if (r->model_of == NULL)
        return sim_errf(r->err, "out of memory");
    if (sim_models_assign(r->w, c->n, r->model_of) != 0)
        return sim_errf(r->err, "%u models need at least as many instances, "
                                "not %u",
                        r->w->lora.n_models, c->n);
    for (uint32_t i = 0; i < c->n; i++) {
        r->eng[i] = sim_engine_create(&c->inst[i], r->cfg->block_tokens);
        if (r->eng[i] == NULL)
            return sim_errf(r->err, "cannot create engine %s (memory, or KV "
                                    "smaller than one block)",
                            c->inst[i].name);
        sim_engine_set_lora(r->eng[i], r->cfg->max_loras,
                            r->cfg->adapter_load_us);
        /* KV bytes per token over GB/s: microseconds per token */
        double us = r->cfg->kv_bytes_per_token /
                    (r->cfg->cpu_load_gbps * 1e3);
        if (r->cfg->cpu_blocks > 0 &&
            sim_engine_set_cpu_tier(r->eng[i], r->cfg->cpu_blocks, us) != 0)
            return sim_errf(r->err, "out of memory (CPU tier of %u blocks)",
                            r->cfg->cpu_blocks);
    }
    sim_rng_seed(&r->jitter, r->cfg->seed ^ 0x6c7273696d6a6974ull);
    if (r->w->n_reqs > 0)
        r->last_arrival_us = r->w->reqs[r->w->n_reqs - 1].arrival_us;
    return setup_replicas(r);
}

static void
teardown(struct run *r)
{
    for (size_t i = 0; i < r->pool_n; i++) {
        sim_seq_free(r->pool[i]);
        free(r->pool[i]);
    }
    if (r->seq_of != NULL)
        for (size_t q = 0; q < r->w->n_reqs; q++)
            if (r->seq_of[q] != NULL) {
                sim_seq_free(r->seq_of[q]);
                free(r->seq_of[q]);
            }
    if (r->pseq_of != NULL)
        for (size_t q = 0; q < r->w->n_reqs; q++)
            if (r->pseq_of[q] != NULL) {
                sim_seq_free(r->pseq_of[q]);
                free(r->pseq_of[q]);
            }
    if (r->eng != NULL)
        for (uint32_t i = 0; i < r->c->n; i++)
            sim_engine_destroy(r->eng[i]);
    for (uint32_t k = 0; r->routers != NULL && k < r->n_rep; k++)
        lr_router_destroy(r->routers[k]);
    free(r->routers);
    free(r->rep_of);
    free(r->marks);
    free(r->waiting);
    free(r->in_queue);
    free(r->sinks);
    free(r->ev_tok);
    free(r->ev_bnd);
    free(r->rm);
    free(r->rmc);
    free(r->eng);
    free(r->seq_of);
    free(r->pseq_of);
    free(r->pulled);
    free(r->pool);
    free(r->emit);
    free(r->tok);
    free(r->bnd);
    free(r->rid);
    free(r->inst_of);
    free(r->pending_sum);
    free(r->heap.v);
    free(r->model_of);
    free(r->snaps);
    free(r->free_snaps);
}

static int
dispatch(struct run *r, const struct ev *e)
{
    switch (e->kind) {
    case EV_ARRIVAL: {
        int rc = on_arrival(r, (size_t)e->a);
        return rc != 0 ? rc : schedule_next_arrival(r);
    }
    case EV_RECV:
        return on_recv(r, e->inst, (size_t)e->a);
    case EV_STEP:
        return on_step(r, e->inst);
    case EV_FIRST_TOKEN:
    case EV_COMPLETE:
    case EV_FAIL:
        return on_router_event(r, e);
    case EV_SCRAPE_TICK:
        return on_scrape_tick(r);
    case EV_SCRAPE_AT:
        return on_scrape_at(r, e->inst);
    case EV_SCRAPE_BACK:
        return on_scrape_back(r, e);
    case EV_SAMPLE:
        return on_sample(r);
    case EV_LEARN:
        return on_learn(r);
    case EV_DELTAS:
        return on_deltas(r);
    case EV_GAUGES:
        return on_gauges(r);
    case EV_DEADLINE:
        return on_deadline(r, (size_t)e->a);
    case EV_ADAPTERS_BACK:
        return on_adapters_back(r, e);
    case EV_PRECV:
        return on_precv(r, e->inst, (size_t)e->a);
    case EV_KV_SEND:
        return on_kv_send(r, e->inst, (size_t)e->a);
    case EV_KV_DONE:
        return on_kv_done(r, e->inst, (size_t)e->a);
    default:
        return on_rebalance(r);
    }
}

static int
loop(struct run *r)
{
    if (r->w->n_reqs == 0)
        return sim_errf(r->err, "empty workload");
    if (schedule_next_arrival(r) != 0 || push(r, 0, EV_SCRAPE_TICK, 0, 0, 0) ||
        push(r, 0, EV_SAMPLE, 0, 0, 0) != 0)
        return -1;
    if (r->cfg->rebalance && r->cfg->policy == LR_POLICY_DUALMAP &&
        push(r, r->cfg->scrape_us, EV_REBALANCE, 0, 0, 0) != 0)
        return -1;
    if (r->cfg->policy == LR_POLICY_LODESTAR &&
        push(r, r->cfg->learn_us, EV_LEARN, 0, 0, 0) != 0)
        return -1;
    const struct sim_replicas *rep = &r->cfg->rep;
    if (r->n_rep > 1 && sim_sync_deltas(rep) &&
        push(r, rep->delta_us, EV_DELTAS, 0, 0, 0) != 0)
        return -1;
    if (r->n_rep > 1 && rep->sync != SIM_SYNC_NONE && rep->gauge_us > 0 &&
        push(r, rep->gauge_us, EV_GAUGES, 0, 0, 0) != 0)
        return -1;
    while (r->heap.n > 0) {
        struct ev e = heap_pop(&r->heap);
        r->now = e.t;
        r->res->events++;
        int rc = dispatch(r, &e);
        if (rc == 0 && r->sink_failed)
            rc = -1; /* an engine event hook failed (err says why) */
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- results ----------------------------------------------------------------------------- */

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double
sim_percentile(const double *v, size_t n, double p)
{
    if (n == 0)
        return NAN;
    double pos = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= n)
        return v[n - 1];
    double f = pos - (double)lo;
    return v[lo] + (v[lo + 1] - v[lo]) * f;
}

/* Conservation: every request ended exactly once; the engines' token books
 * balance; every requested output token was sampled. */
static int
check_books(struct run *r)
{
    struct sim_result *res = r->res;
    for (size_t q = 0; q < res->n_reqs; q++)
        if (res->finishes[q] != 1)
            return sim_errf(r->err, "internal: request %zu finished %u times",
                            q, res->finishes[q]);
    if (res->completed + res->failed + res->expired + res->shed !=
        res->n_reqs)
        return sim_errf(r->err, "internal: %llu completed + %llu failed + "
                                "%llu expired + %llu shed != %zu requests",
                        (unsigned long long)res->completed,
                        (unsigned long long)res->failed,
                        (unsigned long long)res->expired,
                        (unsigned long long)res->shed, res->n_reqs);
    /* the routers' books agree: every request that waited left the queue
     * once, dispatched or expired, and the shed ones were refused */
    if (r->cfg->admit == SIM_ADMIT_QUEUE &&
        (res->router_waited != res->n_waited ||
         res->router_dispatched + res->router_expired != res->n_waited ||
         res->router_expired != res->expired ||
         res->router_shed != res->shed))
        return sim_errf(r->err, "%s: the routers count %llu waited, %llu "
                                "dispatched, %llu expired, %llu shed; lrsim "
                                "%llu waited, %llu expired, %llu shed",
                        res->policy_name,
                        (unsigned long long)res->router_waited,
                        (unsigned long long)res->router_dispatched,
                        (unsigned long long)res->router_expired,
                        (unsigned long long)res->router_shed,
                        (unsigned long long)res->n_waited,
                        (unsigned long long)res->expired,
                        (unsigned long long)res->shed);
    if (res->query_tokens != res->hit_tokens + res->prefilled_tokens +
                                 res->abandoned_tokens + res->received_tokens)
        return sim_errf(r->err, "internal: prefill books do not balance");
    /* a split request that was served heard one prefill_done; no other */
    for (size_t q = 0; q < res->n_reqs; q++)
        if (res->prefill_dones[q] !=
            (res->prefill_inst[q] != UINT32_MAX && res->state[q] == REQ_DONE))
            return sim_errf(r->err, "internal: request %zu: %u prefill_done "
                                    "calls",
                            q, res->prefill_dones[q]);
    uint64_t want = 0;
    for (size_t q = 0; q < res->n_reqs; q++)
        if (res->state[q] == REQ_DONE)
            want += r->w->reqs[q].output_tokens;
    if (want != res->sampled_tokens)
        return sim_errf(r->err, "internal: %llu output tokens sampled, %llu "
                                "requested",
                        (unsigned long long)res->sampled_tokens,
                        (unsigned long long)want);
    return 0;
}

/* ---- admission: classes, tenants, fairness ----------------------------------------- */

/* Fairness windows: the arrival period in windows of about this length. */
#define FAIR_WINDOW_US 30000000ull

/* Add `tok` tokens served over [a, b) (a point at a when a == b) to the
 * windows of row `srv` (n_win windows of wl us from t0); what falls after
 * the last window is not counted. */
static void
spread_served(double *srv, size_t n_win, uint64_t t0, double wl, uint64_t a,
              uint64_t b, double tok)
{
    double end = (double)n_win * wl;
    double x = (double)(a - t0), y = (double)(b - t0);
    if (x >= end || tok <= 0)
        return;
    if (b <= a) {
        srv[(size_t)(x / wl)] += tok;
        return;
    }
    double rate = tok / (y - x);
    for (size_t k = (size_t)(x / wl); k < n_win; k++) {
        double lo = (double)k * wl, hi = lo + wl;
        double from = x > lo ? x : lo, to = y < hi ? y : hi;
        if (to > from)
            srv[k] += rate * (to - from);
        if (y <= hi)
            break;
    }
}

static size_t
window_of(uint64_t t, uint64_t t0, double wl, size_t n_win)
{
    size_t k = t <= t0 ? 0 : (size_t)((double)(t - t0) / wl);
    return k < n_win ? k : n_win - 1;
}

/* Jain's fairness index of the tenants' service, window by window over
 * the arrival period (windows of about FAIR_WINDOW_US; one if it is
 * shorter). In a window, tenant i's demand D_i is the tokens (prompt +
 * output) it had waiting at the window's start (arrived, neither served
 * nor ended unserved) plus those arriving in it; S_i is what it was
 * served there (a prompt at its first token, the output evenly over its
 * decode). Its fair share f_i is its max-min share of the window's
 * service S = sum S_i given the demands: min(D_i, theta), theta the level
 * at which the shares sum to S. Tenants with D_i > theta are backlogged:
 * they wanted more than the fleet gave each; their fair share is equal.
 * The window's index is Jain's over x_i = S_i / f_i of the tenants with
 * demand: (sum x)^2 / (n sum x^2), 1 when every backlogged tenant got the
 * same and every other one what it asked. The run's is the mean over the
 * windows with at least two tenants with demand. */
static int
fairness(struct run *r)
{
    struct sim_result *res = r->res;
    const struct sim_workload *w = r->w;
    uint32_t nt = w->mix.n_tenants;
    res->jain = NAN;
    if (nt == 0 || w->n_reqs == 0)
        return 0;
    uint64_t t0 = w->reqs[0].arrival_us, t1 = r->last_arrival_us;
    uint64_t span = t1 > t0 ? t1 - t0 : 1;
    size_t n_win = (size_t)(span / FAIR_WINDOW_US);
    if (n_win == 0)
        n_win = 1;
    double wl = (double)span / (double)n_win;
    res->jain_window_s = wl / 1e6;
    double *arr = sim_calloc((size_t)nt * n_win, sizeof *arr);
    double *srv = sim_calloc((size_t)nt * n_win, sizeof *srv);
    double *drop = sim_calloc((size_t)nt * n_win, sizeof *drop);
    double *served_row = sim_calloc(nt, sizeof *served_row);
    double *d = sim_calloc(nt, sizeof *d);
    double *sorted = sim_calloc(nt, sizeof *sorted);
    double *backlog = sim_calloc(nt, sizeof *backlog);
    if (!arr || !srv || !drop || !served_row || !d || !sorted || !backlog) {
        free(arr);
        free(srv);
        free(drop);
        free(served_row);
        free(d);
        free(sorted);
        free(backlog);
        return sim_errf(r->err, "out of memory (fairness)");
    }
    double arr_total = 0, srv_total = 0;
    for (size_t q = 0; q < w->n_reqs; q++) {
        const struct sim_req *rq = &w->reqs[q];
        uint32_t i = rq->owner;
        double tok = (double)rq->input_tokens + (double)rq->output_tokens;
        arr[(size_t)i * n_win + window_of(rq->arrival_us, t0, wl, n_win)] +=
            tok;
        if (res->state[q] == REQ_DONE) {
            uint64_t ft = rq->arrival_us + res->ttft_us[q];
            uint64_t end = rq->arrival_us + res->e2e_us[q];
            spread_served(srv + (size_t)i * n_win, n_win, t0, wl, ft, ft,
                          (double)rq->input_tokens);
            spread_served(srv + (size_t)i * n_win, n_win, t0, wl, ft,
                          end > ft ? end : ft, (double)rq->output_tokens);
        } else if (res->gone_us[q] <= t1) {
            drop[(size_t)i * n_win +
                 window_of(res->gone_us[q], t0, wl, n_win)] += tok;
        }
    }
    double jsum = 0;
    uint32_t jn = 0;
    uint64_t backlogged[SIM_MAX_TENANTS] = { 0 };
    for (size_t k = 0; k < n_win; k++) {
        double s_tot = 0;
        uint32_t m = 0;
        for (uint32_t i = 0; i < nt; i++) {
            d[i] = backlog[i] + arr[(size_t)i * n_win + k];
            if (d[i] < 0.5) /* rounding of the spread output */
                d[i] = 0;
            s_tot += srv[(size_t)i * n_win + k];
            served_row[i] += srv[(size_t)i * n_win + k];
            if (d[i] > 0)
                sorted[m++] = d[i];
        }
        /* water-filling: theta such that sum min(D_i, theta) = S */
        qsort(sorted, m, sizeof *sorted, cmp_d);
        double theta = INFINITY, left = s_tot;
        for (uint32_t j = 0; j < m; j++) {
            if (sorted[j] * (double)(m - j) > left) {
                theta = left / (double)(m - j);
                break;
            }
            left -= sorted[j];
        }
        if (m >= 2 && s_tot > 0) {
            double sx = 0, sxx = 0;
            for (uint32_t i = 0; i < nt; i++) {
                if (d[i] <= 0)
                    continue;
                double f = d[i] < theta ? d[i] : theta;
                double x = f > 0 ? srv[(size_t)i * n_win + k] / f : 0;
                sx += x;
                sxx += x * x;
                backlogged[i] += d[i] > theta;
            }
            jsum += sxx > 0 ? sx * sx / ((double)m * sxx) : 0;
            jn++;
        }
        for (uint32_t i = 0; i < nt; i++) {
            backlog[i] = d[i] - srv[(size_t)i * n_win + k] -
                         drop[(size_t)i * n_win + k];
            if (backlog[i] < 0)
                backlog[i] = 0;
        }
    }
    for (uint32_t i = 0; i < nt; i++) {
        for (size_t k = 0; k < n_win; k++)
            arr_total += arr[(size_t)i * n_win + k];
        srv_total += served_row[i];
    }
    for (uint32_t i = 0; i < nt; i++) {
        struct sim_tenant_result *t = &res->tenant[i];
        double a = 0;
        for (size_t k = 0; k < n_win; k++)
            a += arr[(size_t)i * n_win + k];
        t->demand_share = arr_total > 0 ? a / arr_total : 0;
        t->service_share = srv_total > 0 ? served_row[i] / srv_total : 0;
        t->backlogged = jn ? (double)backlogged[i] / (double)jn : 0;
    }
    res->jain = jn ? jsum / (double)jn : NAN;
    res->jain_windows = jn;
    free(arr);
    free(srv);
    free(drop);
    free(served_row);
    free(d);
    free(sorted);
    free(backlog);
    return 0;
}


int
sim_req_tpot(const struct sim_result *r, const struct sim_workload *w,
             size_t q, double *tpot_s)
{
    uint32_t out = w->reqs[q].output_tokens;
    if (r->state[q] != REQ_DONE || out < 2)
        return 0;
    *tpot_s = (double)r->decode_us[q] / 1e6 / (double)(out - 1);
    return 1;
}

/* The mean, p50 and p99 of v[0..n) (sorted in place); NAN for n == 0. */
static void
tpot_stats(double *v, size_t n, double sum, double *mean, double *p50,
           double *p99)
{
    qsort(v, n, sizeof *v, cmp_d);
    *mean = n ? sum / (double)n : NAN;
    if (p50 != NULL)
        *p50 = sim_percentile(v, n, 50);
    *p99 = sim_percentile(v, n, 99);
}

/* Request q's end into a table's counters (served, within slo_s, expired,
 * shed, failed); 1 and its TTFT in *ttft_s when it was served. */
static int
tally_end(const struct sim_result *res, size_t q, double slo_s,
          uint64_t *completed, uint64_t *met, uint64_t *expired,
          uint64_t *shed, uint64_t *failed, double *ttft_s)
{
    switch (res->state[q]) {
    case REQ_DONE:
        *ttft_s = (double)res->ttft_us[q] / 1e6;
        (*completed)++;
        *met += *ttft_s <= slo_s;
        return 1;
    case REQ_EXPIRED:
        (*expired)++;
        return 0;
    case REQ_SHED:
        (*shed)++;
        return 0;
    default:
        (*failed)++;
        return 0;
    }
}
/* Per class and per tenant: how requests ended, SLO attainment (TTFT <=
 * the class's SLO, or --slo-ttft without classes; every request counts,
 * an unserved one as a miss), TTFT and waits; then fairness(). */
static int
summarize_admission(struct run *r)
{
    struct sim_result *res = r->res;
    const struct sim_workload *w = r->w;
    res->admit = r->cfg->admit;
    res->has_admission =
        sim_mix_any(&w->mix) || r->cfg->admit == SIM_ADMIT_QUEUE;
    if (!res->has_admission)
        return 0;
    size_t n = res->n_reqs;
    uint64_t t0 = w->reqs[0].arrival_us;
    res->arrival_span_s = (double)(r->last_arrival_us - t0) / 1e6;
    double span = res->arrival_span_s > 0 ? res->arrival_span_s : 1;
    uint32_t nc = w->mix.n_cls ? w->mix.n_cls : 0;
    uint32_t nt = w->mix.n_tenants;
    res->n_rclasses = nc;
    res->n_tenants = nt;
    double *v = sim_calloc(n ? n : 1, sizeof *v);
    double *u = sim_calloc(n ? n : 1, sizeof *u); /* TPOT */
    if (v == NULL || u == NULL) {
        free(v);
        free(u);
        return sim_errf(r->err, "out of memory");
    }
    double wsum = 0;
    uint64_t wn = 0;
    for (size_t q = 0; q < n; q++) {
        res->n_waited += res->waited[q];
        if (res->waited[q] && res->state[q] != REQ_EXPIRED) {
            wsum += (double)res->wait_us[q] / 1e6;
            wn++;
        }
    }
    res->wait_mean_s = wn ? wsum / (double)wn : 0;
    for (uint32_t c = 0; c < nc; c++) {
        struct sim_rclass_result *cr = &res->rclass[c];
        double slo = w->mix.cls[c].slo_s, sum = 0, wsc = 0, usum = 0;
        size_t k = 0, ku = 0;
        uint64_t wnc = 0;
        for (size_t q = 0; q < n; q++) {
            if (w->reqs[q].rclass != c)
                continue;
            cr->requests++;
            cr->waited += res->waited[q];
            if (res->waited[q] && res->state[q] != REQ_EXPIRED) {
                wsc += (double)res->wait_us[q] / 1e6;
                wnc++;
            }
            double t;
            if (tally_end(res, q, slo, &cr->completed, &cr->met,
                          &cr->expired, &cr->shed, &cr->failed, &t)) {
                v[k++] = t;
                sum += t;
            }
            if (sim_req_tpot(res, w, q, &t)) {
                u[ku++] = t;
                usum += t;
            }
        }
        qsort(v, k, sizeof *v, cmp_d);
        cr->slo_attainment =
            cr->requests ? (double)cr->met / (double)cr->requests : NAN;
        cr->goodput_rps = (double)cr->met / span;
        cr->ttft_mean_s = k ? sum / (double)k : NAN;
        cr->ttft_p99_s = sim_percentile(v, k, 99);
        cr->wait_mean_s = wnc ? wsc / (double)wnc : 0;
        tpot_stats(u, ku, usum, &cr->tpot_mean_s, NULL, &cr->tpot_p99_s);
    }
    free(v);
    free(u);
    for (uint32_t i = 0; i < nt; i++) {
        struct sim_tenant_result *t = &res->tenant[i];
        double sum = 0, usum = 0;
        uint64_t un = 0;
        for (size_t q = 0; q < n; q++) {
            if (w->reqs[q].owner != i)
                continue;
            t->requests++;
            double tt;
            if (tally_end(res, q, sim_req_slo(w, q, r->cfg->slo_ttft_s),
                          &t->completed, &t->met, &t->expired, &t->shed,
                          &t->failed, &tt))
                sum += tt;
            if (sim_req_tpot(res, w, q, &tt)) {
                usum += tt;
                un++;
            }
        }
        t->slo_attainment =
            t->requests ? (double)t->met / (double)t->requests : NAN;
        t->ttft_mean_s = t->completed ? sum / (double)t->completed : NAN;
        t->tpot_mean_s = un ? usum / (double)un : NAN;
    }
    return fairness(r);
}

/* TTFT, TPOT and prediction error of the requests arriving in [from,
 * to). */
static int
window(struct run *r, uint64_t from, uint64_t to, struct sim_window *out)
{
    const struct sim_result *res = r->res;
    double *v = sim_calloc(res->n_reqs, sizeof *v);
    double *u = sim_calloc(res->n_reqs, sizeof *u);
    if (v == NULL || u == NULL) {
        free(v);
        free(u);
        return sim_errf(r->err, "out of memory");
    }
    memset(out, 0, sizeof *out);
    size_t k = 0, ku = 0;
    double sum = 0, esum = 0, usum = 0;
    for (size_t q = 0; q < res->n_reqs; q++) {
        uint64_t a = r->w->reqs[q].arrival_us;
        if (a < from || a >= to)
            continue;
        out->requests++;
        if (res->state[q] != REQ_DONE)
            continue;
        double t = (double)res->ttft_us[q] / 1e6;
        v[k++] = t;
        sum += t;
        if (!isnan(res->pred_ttft_s[q])) {
            esum += fabs((double)res->pred_ttft_s[q] - t);
            out->pred_n++;
        }
        if (sim_req_tpot(res, r->w, q, &t)) {
            u[ku++] = t;
            usum += t;
        }
    }
    qsort(v, k, sizeof *v, cmp_d);
    out->completed = k;
    out->ttft_mean_s = k ? sum / (double)k : NAN;
    out->ttft_p50_s = sim_percentile(v, k, 50);
    out->ttft_p99_s = sim_percentile(v, k, 99);
    out->pred_mae = out->pred_n ? esum / (double)out->pred_n : NAN;
    tpot_stats(u, ku, usum, &out->tpot_mean_s, &out->tpot_p50_s,
               &out->tpot_p99_s);
    free(v);
    free(u);
    return 0;
}

/* Lodestar's end of run: a last curve point and, if asked, the samples. */
static int
summarize_lodestar(struct run *r)
{
    struct sim_result *res = r->res;
    if (add_point(r, 0, 0, 0) != 0)
        return -1;
    if (!r->cfg->keep_samples)
        return 0;
    size_t n = 0;
    const size_t d = lr_lodestar_feature_count();
    lr_status st = lr_router_learner_samples(r->router, NULL, d, NULL, 0, &n);
    if (st != LR_OK && st != LR_EBUFSIZE)
        return lib_fail(r, "lr_router_learner_samples", st);
    float *x = sim_calloc(n ? n : 1, d * sizeof *x);
    float *y = sim_calloc(n ? n : 1, sizeof *y);
    res->samples = sim_calloc(n ? n : 1, (d + 1) * sizeof *res->samples);
    if (x == NULL || y == NULL || res->samples == NULL) {
        free(x);
        free(y);
        return sim_errf(r->err, "out of memory (%zu samples)", n);
    }
    size_t got = 0;
    st = lr_router_learner_samples(r->router, x, d, y, n, &got);
    if (st == LR_OK)
        for (size_t i = 0; i < got; i++) {
            memcpy(res->samples + i * (d + 1), x + i * d, d * sizeof *x);
            res->samples[i * (d + 1) + d] = y[i];
        }
    res->n_samples = got;
    free(x);
    free(y);
    if (st != LR_OK)
        return lib_fail(r, "lr_router_learner_samples", st);
    return 0;
}

static int
summarize(struct run *r)
{
    struct sim_result *res = r->res;
    size_t n = res->n_reqs;
    double *v = sim_calloc(n, sizeof *v);
    if (v == NULL)
        return sim_errf(r->err, "out of memory");
    size_t k = 0, ok = 0;
    double sum = 0;
    uint64_t end_us = 0;
    for (size_t q = 0; q < n; q++) {
        const struct sim_req *rq = &r->w->reqs[q];
        res->input_tokens += rq->input_tokens;
        res->output_tokens += rq->output_tokens;
        if (res->state[q] != REQ_DONE)
            continue;
        double t = (double)res->ttft_us[q] / 1e6;
        v[k++] = t;
        sum += t;
        ok += t < r->cfg->slo_ttft_s;
        uint64_t end = rq->arrival_us + res->e2e_us[q];
        if (end > end_us)
            end_us = end;
        res->per_inst[res->inst[q]].requests++;
    }
    qsort(v, k, sizeof *v, cmp_d);
    res->ttft_mean_s = k ? sum / (double)k : NAN;
    res->ttft_p50_s = sim_percentile(v, k, 50);
    res->ttft_p95_s = sim_percentile(v, k, 95);
    res->ttft_p99_s = sim_percentile(v, k, 99);
    k = 0;
    sum = 0;
    for (size_t q = 0; q < n; q++)
        if (sim_req_tpot(res, r->w, q, &v[k])) {
            sum += v[k];
            k++;
        }
    res->tpot_n = k;
    tpot_stats(v, k, sum, &res->tpot_mean_s, &res->tpot_p50_s,
               &res->tpot_p99_s);
    k = 0;
    for (size_t q = 0; q < n; q++)
        if (res->state[q] == REQ_DONE)
            v[k++] = (double)res->e2e_us[q] / 1e6;
    qsort(v, k, sizeof *v, cmp_d);
    res->e2e_p50_s = sim_percentile(v, k, 50);
    res->e2e_p95_s = sim_percentile(v, k, 95);
    res->slo_attainment = n ? (double)ok / (double)n : 0;
    uint64_t start = r->w->reqs[0].arrival_us;
    res->makespan_s = (double)(end_us > start ? end_us - start : 0) / 1e6;
    res->goodput_rps = res->makespan_s > 0 ? (double)ok / res->makespan_s : 0;
    res->load_cv = r->cv_n ? r->cv_sum / (double)r->cv_n : 0;
    /* measured routing time */
    sum = 0;
    for (size_t q = 0; q < n; q++) {
        v[q] = (double)res->route_ns[q];
        sum += v[q];
    }
    qsort(v, n, sizeof *v, cmp_d);
    res->route_ns_p50 = sim_percentile(v, n, 50);
    res->route_ns_p99 = sim_percentile(v, n, 99);
    res->route_ns_mean = n ? sum / (double)n : 0;
    free(v);
    double span = r->now > 0 ? (double)r->now : 1;
    for (uint32_t i = 0; i < r->c->n; i++) {
        if (r->cfg->verify_engines > 0 &&
            sim_engine_verify(r->eng[i], r->err) != 0)
            return sim_errf(r->err, "engine %u invariant broken at the end",
                            i);
        const struct sim_engine_counters *c = sim_engine_counters(r->eng[i]);
        struct sim_engine_state st;
        sim_engine_state(r->eng[i], &st);
        struct sim_inst_result *pi = &res->per_inst[i];
        pi->query_tokens = c->query_tokens;
        pi->hit_tokens = c->hit_tokens;
        pi->preemptions = c->preemptions;
        pi->evicted_blocks = c->evicted_blocks;
        pi->mean_pending =
            r->samples ? r->pending_sum[i] / (double)r->samples : 0;
        pi->busy_frac = (double)c->busy_us / span;
        pi->peak_used_blocks = c->peak_used_blocks;
        pi->capacity_blocks = st.capacity_blocks;
        pi->adapter_loads = c->adapter_loads;
        pi->cpu_hit_tokens = c->cpu_hit_tokens;
        pi->model = r->model_of[i];
        res->cpu_hits += c->cpu_hits;
        res->cpu_hit_tokens += c->cpu_hit_tokens;
        res->cpu_stored_blocks += c->cpu_stored_blocks;
        res->cpu_evicted_blocks += c->cpu_evicted_blocks;
        res->cpu_load_s += (double)c->cpu_load_us / 1e6;
        res->adapter_loads += c->adapter_loads;
        res->adapter_evictions += c->adapter_evictions;
        res->query_tokens += c->query_tokens;
        res->received_tokens += c->received_tokens;
        res->hit_tokens += c->hit_tokens;
        res->prefilled_tokens += c->prefilled_tokens;
        res->abandoned_tokens += c->abandoned_tokens;
        res->sampled_tokens += c->sampled_tokens;
        res->steps += c->steps;
        if (r->c->inst[i].cls->cache_kind == SIM_CACHE_SLOTS) {
            res->has_slots = 1;
            res->slot_hits += c->slot_hits;
            res->host_hits += c->host_hits;
            res->host_saves += c->host_saves;
            res->host_drops += c->host_drops;
        }
    }
    res->has_pd = r->c->n_prefill > 0;
    double tsum = 0;
    uint64_t tn = 0;
    for (size_t q = 0; q < res->n_reqs; q++)
        if (res->prefill_dones[q]) {
            tsum += (double)res->transfer_us[q] / 1e6;
            tn++;
        }
    res->transfer_mean_s = tn ? tsum / (double)tn : NAN;
    res->has_adapters = r->lora;
    res->has_cpu_tier = r->cfg->cpu_blocks > 0;
    res->has_models = r->w->lora.n_models > 0;
    res->cache_hit_rate = res->query_tokens
                              ? (double)res->hit_tokens /
                                    (double)res->query_tokens
                              : 0;
    uint64_t prompt = 0, cached = 0;
    memset(res->by_reason, 0, sizeof res->by_reason);
    for (uint32_t rk = 0; rk < r->n_rep; rk++) { /* over the replicas */
        lr_router_stats rs;
        lr_router_stats_init(&rs);
        lr_status st = lr_router_get_stats(r->routers[rk], &rs);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_get_stats", st);
        prompt += rs.prompt_tokens;
        cached += rs.cached_tokens;
        res->router_waited += rs.waited;
        res->router_dispatched += rs.waited_dispatched;
        res->router_expired += rs.waited_expired;
        res->router_shed += rs.shed;
        uint64_t by[SIM_REASONS];
        size_t nb = 0;
        st = lr_router_reason_counts(r->routers[rk], by, SIM_REASONS, &nb);
        if (st != LR_OK)
            return lib_fail(r, "lr_router_reason_counts", st);
        for (size_t j = 0; j < nb; j++)
            res->by_reason[j] += by[j];
    }
    res->router_hit_belief = prompt ? (double)cached / (double)prompt : 0;
    res->predicted_tokens = cached;
    size_t pn = 0;
    double psum = 0;
    for (size_t q = 0; q < n; q++)
        if (res->state[q] == REQ_DONE && !isnan(res->pred_ttft_s[q])) {
            psum += fabs((double)res->pred_ttft_s[q] -
                         (double)res->ttft_us[q] / 1e6);
            pn++;
        }
    res->pred_n = pn;
    res->pred_mae = pn ? psum / (double)pn : NAN;
    if (r->cfg->split_us != SIM_NEVER) {
        res->has_split = 1;
        if (window(r, 0, r->cfg->split_us, &res->before) != 0 ||
            window(r, r->cfg->split_us, SIM_NEVER, &res->after) != 0)
            return -1;
    }
    if (r->cfg->policy == LR_POLICY_LODESTAR && summarize_lodestar(r) != 0)
        return -1;
    if (summarize_admission(r) != 0)
        return -1;
    res->param_w_rtt = res->param_w_queue = NAN;
    if (r->cfg->policy == LR_POLICY_GORGO) {
        lr_router_get_param(r->router, LR_PARAM_GORGO_W_RTT, &res->param_w_rtt);
        lr_router_get_param(r->router, LR_PARAM_GORGO_W_QUEUE,
                            &res->param_w_queue);
    }
    return check_books(r);
}

int
sim_run(const struct sim_config *cfg, struct sim_result *out,
        struct sim_err *err)
{
    memset(out, 0, sizeof *out);
    out->policy = cfg->policy;
    const char *name = lr_policy_name((lr_policy)cfg->policy);
    snprintf(out->policy_name, sizeof out->policy_name, "%s",
             name ? name : "?");
    sim_rates_describe(&cfg->rates, out->router_rates,
                       sizeof out->router_rates);
    out->replicas = cfg->rep.n ? cfg->rep.n : 1;
    sim_replicas_describe(&cfg->rep, out->replicas_desc,
                          sizeof out->replicas_desc);
    if (cfg->w == NULL || cfg->c == NULL || cfg->c->n == 0 ||
        cfg->block_tokens == 0 || cfg->scrape_us == 0 || cfg->sample_us == 0 ||
        cfg->learn_us == 0 || (cfg->n_params > 0 && cfg->params == NULL) ||
        cfg->rep.n > SIM_MAX_REPLICAS || cfg->max_loras > SIM_MAX_LORAS ||
        (cfg->cpu_blocks > 0 && !(cfg->cpu_load_gbps > 0 &&
                                  cfg->kv_bytes_per_token > 0)) ||
        (sim_sync_deltas(&cfg->rep) && cfg->rep.delta_us == 0))
        return sim_errf(err, "bad simulation configuration");
    if (cfg->c->n_prefill > 0) {
        /* what disaggregation is not modelled with */
        int slots = 0;
        for (uint32_t i = 0; i < cfg->c->n; i++)
            slots |= cfg->c->inst[i].cls->cache_kind == SIM_CACHE_SLOTS;
        if (cfg->admit == SIM_ADMIT_QUEUE || cfg->cpu_blocks > 0 ||
            cfg->w->lora.n_adapters > 0 || slots)
            return sim_errf(err, "a cluster with prefill instances runs "
                                 "without --admit queue, a CPU tier, LoRA "
                                 "adapters and slots engines");
        if (cfg->c->n_prefill == cfg->c->n)
            return sim_errf(err, "a cluster of prefill instances only: "
                                 "nothing decodes");
        for (int k = 0; k < 4; k++)
            if (!(cfg->kv_gbps[k] > 0))
                return sim_errf(err, "bad KV link bandwidth");
    }
    uint64_t t0 = now_mono_ns();
    struct run r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.w = cfg->w;
    r.c = cfg->c;
    r.res = out;
    r.err = err;
    int rc = setup(&r);
    if (rc == 0)
        rc = loop(&r);
    if (rc == 0)
        rc = summarize(&r);
    teardown(&r);
    out->wall_s = (double)(now_mono_ns() - t0) / 1e9;
    return rc;
}
