/* The router's waiting queue: admission when the fleet is saturated,
 * priorities, fair share between tenants (lr_router.h, "Waiting"); and
 * the public entries that pass through it, lr_router_route() (to the
 * pipeline in route.c when the request goes at once) and
 * lr_router_fail() (a waiting request is withdrawn here).
 *
 *   route(MAY_WAIT)  saturated, or as urgent ones wait?  -> push (a copy)
 *                    else                                -> route now
 *   dispatch(now)    expired ones out (LR_EEXPIRED), then, while the
 *                    fleet is not saturated: peek, route now, take
 *   fail(id)         a waiting one: cancel
 *
 * The order is lr__admit's (parts/admit.h): band, then the tenants'
 * virtual counters, then arrival. Each entry's data is a struct
 * lr__waiter: the request as routed, with its own copy of the tokens and
 * boundaries, so that dispatch routes it on the state of its moment.
 *
 * Locks: wait_mu first, then the router's (and the index's, inside the
 * route). A route that may wait holds wait_mu from its saturation check
 * to its record, so that two of them do not both see room for one; a
 * route without the flag never takes it. */
#include "common/lr_hash.h"
#include "router/router_impl.h"

#define NONE LR_INSTANCE_NONE
#define SEED_WAIT 0x4c52574149545131ull /* "LRWAITQ1" */

/* A copy of q to wait: its multimodal inputs, tokens, boundaries, names
 * and identifiers (sizes checked by route(): at most LR_INDEX_MAX_TOKENS
 * + 1 tokens and boundaries, inputs no more than tokens, names and
 * identifiers bounded, so the sum fits). Of the flags only
 * LR_ROUTE_NO_LEARN stays: dispatch routes it at once. */
_Static_assert(offsetof(struct lr__waiter, tail) % _Alignof(lr_mm_input) == 0,
               "a waiter's tail holds its multimodal inputs first");

static lr_status
waiter_new(lr_router *r, const lr_request *q, struct lr__waiter **out)
{
    size_t n = q->n_tokens + q->n_boundaries;
    size_t lm = lr__router_name_len(q->model),
           la = lr__router_name_len(q->adapter);
    size_t ids = 0;
    for (size_t k = 0; k < q->n_mm; k++)
        ids += strlen(q->mm[k].identifier) + 1;
    size_t mmb = q->n_mm * sizeof(lr_mm_input);
    size_t bytes = sizeof(struct lr__waiter) + mmb + n * sizeof(uint32_t) +
                   (lm > 0 ? lm + 1 : 0) + (la > 0 ? la + 1 : 0) + ids;
    struct lr__waiter *w = lr__alloc(&r->mem, bytes);
    LR_RETURN_IF(w == NULL, LR_ENOMEM);
    w->q = *q;
    w->bytes = bytes;
    w->q.flags = q->flags & LR_ROUTE_NO_LEARN;
    w->q.tokens = NULL;
    w->q.boundaries = NULL;
    w->q.model = NULL;
    w->q.adapter = NULL;
    w->q.mm = NULL;
    /* the inputs first (the tail is aligned for them), then the rest */
    lr_mm_input *mm = (lr_mm_input *)(void *)w->tail;
    uint32_t *tok = (uint32_t *)(void *)((char *)w->tail + mmb);
    char *names = (char *)(tok + n); /* the names after the tokens */
    if (lm > 0) {
        memcpy(names, q->model, lm + 1);
        w->q.model = names;
        names += lm + 1;
    }
    if (la > 0) {
        memcpy(names, q->adapter, la + 1);
        w->q.adapter = names;
        names += la + 1;
    }
    for (size_t k = 0; k < q->n_mm; k++) {
        size_t li = strlen(q->mm[k].identifier) + 1;
        mm[k] = q->mm[k];
        memcpy(names, q->mm[k].identifier, li);
        mm[k].identifier = names;
        names += li;
    }
    if (q->n_mm > 0)
        w->q.mm = mm;
    if (q->n_tokens > 0) {
        memcpy(tok, q->tokens, q->n_tokens * sizeof(uint32_t));
        w->q.tokens = tok;
    }
    if (q->n_boundaries > 0) {
        memcpy(tok + q->n_tokens, q->boundaries,
               q->n_boundaries * sizeof(uint32_t));
        w->q.boundaries = tok + q->n_tokens;
    }
    *out = w;
    return LR_OK;
}

/* The queue, made at the first request that waits. */
static lr_status
queue_make(lr_router *r)
{
    if (r->aq_made)
        return LR_OK;
    LR_TRY(lr__admit_init(&r->aq, &r->mem, r->opt.queue_capacity,
                          r->opt.queue_tenants, LR_ROUTER_URGENCIES,
                          lr__mix64(r->hash_seed, SEED_WAIT)));
    r->aq_made = true;
    return LR_OK;
}

/* ---- saturation ---------------------------------------------------------------- */

/* Whether every routable instance serving `model` (lr_name_hash; 0: any)
 * that can decode is saturated at now (true with none): a prefill
 * instance with room takes no request the decode instances cannot. Under
 * the router's lock (read or write). Stops at the first instance with
 * room, so an idle fleet costs one look. */
static bool
fleet_saturated(const lr_router *r, uint64_t now_ns, uint64_t model)
{
    struct lr__saturation sat = lr__router_saturation(r);
    if (r->n_modeled == 0)
        model = 0; /* every instance serves every model */
    for (uint32_t k = 0; k < r->n_act; k++)
        if (lr__router_serves(r, r->act[k], model) &&
            r->inst[r->act[k]].place.role != LR_ROLE_PREFILL &&
            !lr__load_saturated(r->ld, r->act[k], now_ns, &sat))
            return false;
    return true;
}

lr_status
lr_router_saturated(lr_router *r, uint64_t now_ns, int32_t *saturated)
{
    LR_RETURN_IF(r == NULL || saturated == NULL, LR_EINVAL);
    lr__router_rdlock(r);
    lr_status st = lr__router_clock(r, now_ns, false); /* a query */
    if (st == LR_OK)
        *saturated = fleet_saturated(r, now_ns, 0) ? 1 : 0;
    lr__router_rdunlock(r);
    return st;
}

/* ---- route: wait, shed or go ----------------------------------------------------------- */

/* What a request charges its tenant when it is let out: its weighted
 * tokens (the Virtual Token Counter's service), whole. */
static uint64_t
fair_cost(const lr_router *r, const lr_request *q)
{
    uint32_t out = q->expected_output_tokens
                       ? q->expected_output_tokens
                       : (uint32_t)r->param[LR_PARAM_DEFAULT_OUTPUT_TOKENS];
    double c = r->param[LR_PARAM_FAIR_INPUT_WEIGHT] * (double)q->n_tokens +
               r->param[LR_PARAM_FAIR_OUTPUT_WEIGHT] * (double)out;
    return (uint64_t)c; /* <= 1000 * 2^32 * 2: in 64 bits */
}

/* Whether q's tenant may add it to a queue past half full (in requests
 * or tokens): only while it holds less than an even share of the queue
 * among the tenants waiting, it among them. So a tenant that floods the
 * queue leaves the others room, and the queue's bounds are not a
 * first-come share of the fleet. */
static bool
fair_room(const lr_router *r, const lr_request *q)
{
    uint32_t held_n;
    uint64_t held_t;
    lr__admit_tenant(&r->aq, q->tenant, &held_n, &held_t);
    uint64_t tenants = r->aq.active + (held_n == 0);
    uint64_t cap_n = r->aq.max_waiting, cap_t = r->opt.queue_tokens;
    bool half = 2 * ((uint64_t)r->aq.count + 1) > cap_n ||
                2 * (r->wait_tokens + q->n_tokens) > cap_t;
    if (!half || tenants < 2)
        return true;
    /* <= 2^40 + 2^32 tokens times <= 2^20 tenants: in 64 bits */
    return ((uint64_t)held_n + 1) * tenants <= cap_n &&
           (held_t + q->n_tokens) * tenants <= cap_t;
}

static void
waiting_decision(const lr_router *r, lr_decision *d)
{
    d->instance = NONE;
    d->reason = LR_REASON_WAITING;
    d->cached_tokens = 0;
    d->best_cached_tokens = 0;
    d->cost = NAN;
    d->alt_instance = NONE;
    d->n_scores = 0;
    if (d->struct_size >= LR_DECISION_SIZE_V2) {
        d->decider = r->policy;
        d->seed = 0;
    }
}

/* Under wait_mu. The clock, then whether it must wait (as urgent ones
 * wait, or the fleet is saturated), under the router's read lock; then
 * route it now, shed it, or queue it. */
static lr_status
admit_locked(lr_router *r, const lr_request *q, lr_decision *d)
{
    bool waits = r->aq_made && lr__admit_waits_upto(&r->aq, q->urgency);
    struct lr__req_view v;
    uint64_t cost = 0;
    lr__router_rdlock(r);
    lr_status st = lr__router_clock(r, q->now_ns, true);
    if (st == LR_OK && !waits)
        waits = fleet_saturated(r, q->now_ns, lr__router_name_hash(q->model));
    if (st == LR_OK && waits && lr__load_req(r->ld, q->id, &v) == LR_OK)
        st = LR_EEXIST; /* as route() would say */
    if (st == LR_OK && waits && (q->flags & LR_ROUTE_SCORES) &&
        d->scores_capacity < r->n_act) {
        d->n_scores = r->n_act; /* as route() would say */
        st = LR_EBUFSIZE;
    }
    cost = fair_cost(r, q);
    lr__router_rdunlock(r);
    LR_TRY(st);
    if (!waits)
        return lr__router_route_now(r, q, d);
    if (q->flags & LR_ROUTE_SHEDDABLE) {
        r->wst.shed++;
        return LR_EBUSY;
    }
    LR_TRY(queue_make(r));
    LR_RETURN_IF(lr__admit_find(&r->aq, q->id, NULL), LR_EEXIST);
    LR_RETURN_IF(r->aq.count >= r->aq.max_waiting, LR_ELIMIT);
    LR_RETURN_IF(q->n_tokens > r->opt.queue_tokens - r->wait_tokens, LR_ELIMIT);
    LR_RETURN_IF(!fair_room(r, q), LR_ELIMIT);
    struct lr__waiter *w;
    LR_TRY(waiter_new(r, q, &w));
    struct lr__admit_req ar = {
        .id = q->id,
        .tenant = q->tenant,
        .cost = cost,
        .arrival_ns = q->now_ns,
        .deadline_ns = q->deadline_ns,
        .band = q->urgency,
        .data = w,
        .size = q->n_tokens,
    };
    st = lr__admit_push(&r->aq, &ar);
    if (st != LR_OK) {
        lr__free(&r->mem, w, w->bytes); /* not counted yet */
        return st;
    }
    r->wait_tokens += q->n_tokens;
    r->wst.waited++;
    lr__router_clock_take(r, q->now_ns);
    waiting_decision(r, d);
    return LR_OK;
}

static lr_status
route_admit(lr_router *r, const lr_request *q, lr_decision *d)
{
    pthread_mutex_lock(&r->wait_mu);
    lr_status st = admit_locked(r, q, d);
    pthread_mutex_unlock(&r->wait_mu);
    return st;
}

/* ---- dispatch -------------------------------------------------------------------- */

static lr_dispatched *
item_at(lr_dispatched *out, size_t item_size, size_t k)
{
    return (lr_dispatched *)((char *)out + k * item_size);
}

/* One entry: the fields this library knows, the rest of the caller's
 * item zeroed. */
static void
item_put(lr_dispatched *out, size_t item_size, size_t k, const lr_dispatched *x)
{
    lr_dispatched *o = item_at(out, item_size, k);
    memset(o, 0, item_size);
    memcpy(o, x, item_size < sizeof *x ? item_size : sizeof *x);
}

static lr_dispatched
item_of(const struct lr__admit_req *a, lr_status st, uint64_t now_ns)
{
    const struct lr__waiter *w = a->data;
    return (lr_dispatched){
        .request_id = a->id,
        .status = st,
        .instance = NONE,
        .reason = LR_REASON_NONE,
        .cost = NAN,
        .waited_ns = now_ns > a->arrival_ns ? now_ns - a->arrival_ns : 0,
        .urgency = a->band,
        .tenant = w->q.tenant,
        .prefill_instance = NONE,
        .prefill_reason = -1,
    };
}

/* Expired ones first, earliest deadline first; *k entries written so
 * far. */
static void
dispatch_expired(lr_router *r, uint64_t now_ns, lr_dispatched *out,
                 size_t capacity, size_t item_size, size_t *k)
{
    while (*k < capacity) {
        struct lr__admit_req a;
        if (lr__admit_expire(&r->aq, now_ns, &a, 1) == 0)
            break;
        lr_dispatched x = item_of(&a, LR_EEXPIRED, now_ns);
        item_put(out, item_size, (*k)++, &x);
        r->wst.expired++;
        lr__router_waiter_free(r, a.data);
    }
}

/* Whether the instances of `model` have room now. */
static bool
has_room(lr_router *r, uint64_t now_ns, uint64_t model)
{
    lr__router_rdlock(r);
    bool room = !fleet_saturated(r, now_ns, model) && lr__load_has_room(r->ld);
    lr__router_rdunlock(r);
    return room;
}

/* Then the next in order while its model's instances have room (one
 * queue for every model: the next waits for its own model's room).
 * LR_ENOMEM stops it with that request waiting; no routable instance
 * (LR_ESTATE) or a full load tracker (LR_ELIMIT) stops it quietly. */
static lr_status
dispatch_next(lr_router *r, uint64_t now_ns, lr_dispatched *out,
              size_t capacity, size_t item_size, size_t *k)
{
    while (*k < capacity) {
        struct lr__admit_req a;
        if (lr__admit_peek(&r->aq, &a) != LR_OK)
            break;
        struct lr__waiter *w = a.data;
        if (!has_room(r, now_ns, lr__router_name_hash(w->q.model)))
            break;
        lr_request q = w->q;
        q.now_ns = now_ns;
        lr_decision d;
        lr_decision_init(&d);
        lr_status st = lr__router_route_now(r, &q, &d);
        if (st == LR_ENOMEM)
            return st;
        if (st == LR_ESTATE || st == LR_ELIMIT || st == LR_ERANGE)
            break; /* nowhere to send it now: it waits */
        lr_dispatched x = item_of(&a, st, now_ns);
        if (st == LR_OK) {
            (void)lr__admit_take(&r->aq, a.id, NULL); /* peeked: there */
            x.instance = d.instance;
            x.reason = d.reason;
            x.cached_tokens = d.cached_tokens;
            x.cost = d.cost;
            x.prefill_instance = d.prefill_instance;
            x.prefill_reason = d.prefill_reason;
            x.prefill_cached_tokens = d.prefill_cached_tokens;
            x.transfer_s = d.transfer_s;
            r->wst.dispatched++;
            r->wst.wait_ns += x.waited_ns;
        } else { /* LR_EEXIST: its id in flight; nothing else remains */
            (void)lr__admit_cancel(&r->aq, a.id, NULL);
            r->wst.dropped++;
        }
        item_put(out, item_size, (*k)++, &x);
        lr__router_waiter_free(r, w);
    }
    return LR_OK;
}

lr_status
lr_router_dispatch(lr_router *r, uint64_t now_ns, lr_dispatched *out,
                   size_t capacity, size_t item_size, size_t *n_out)
{
    LR_RETURN_IF(r == NULL || n_out == NULL, LR_EINVAL);
    LR_RETURN_IF(capacity > 0 && out == NULL, LR_EINVAL);
    LR_RETURN_IF(item_size < LR_DISPATCHED_SIZE_V1, LR_EINVAL);
    *n_out = 0;
    pthread_mutex_lock(&r->wait_mu);
    lr_status st = lr__router_enter(r, now_ns);
    (void)lr__router_leave(r, st, now_ns);
    size_t k = 0;
    if (st == LR_OK && r->aq_made) {
        dispatch_expired(r, now_ns, out, capacity, item_size, &k);
        st = dispatch_next(r, now_ns, out, capacity, item_size, &k);
    }
    pthread_mutex_unlock(&r->wait_mu);
    *n_out = k;
    return st;
}

/* ---- cancel ---------------------------------------------------------------------- */

static lr_status
wait_cancel(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    pthread_mutex_lock(&r->wait_mu);
    lr_status st = LR_ENOENT;
    if (r->aq_made && lr__admit_find(&r->aq, request_id, NULL)) {
        st = lr__router_enter(r, now_ns);
        (void)lr__router_leave(r, st, now_ns);
        struct lr__admit_req a;
        if (st == LR_OK &&
            LR_ALWAYS(lr__admit_cancel(&r->aq, request_id, &a) == LR_OK)) {
            r->wst.cancelled++;
            lr__router_waiter_free(r, a.data);
        }
    }
    pthread_mutex_unlock(&r->wait_mu);
    return st;
}

/* ---- the entries: route() and fail() -------------------------------------------------- */

lr_status
lr_router_route(lr_router *r, const lr_request *request, lr_decision *decision)
{
    LR_RETURN_IF(r == NULL || request == NULL || decision == NULL, LR_EINVAL);
    lr_request q = { 0 }; /* lr__copy_sized() fills only what the caller has */
    LR_TRY(lr__copy_sized(&q, sizeof q, request, LR_REQUEST_SIZE_V1));
    LR_RETURN_IF(decision->struct_size < LR_DECISION_SIZE_V1, LR_EVERSION);
    LR_TRY(lr__router_check_request(&q));
    if (!(q.flags & LR_ROUTE_DRY_RUN) &&
        (q.flags & (LR_ROUTE_MAY_WAIT | LR_ROUTE_SHEDDABLE)))
        return route_admit(r, &q, decision);
    return lr__router_route_now(r, &q, decision);
}

lr_status
lr_router_fail(lr_router *r, uint64_t request_id, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr_status st = wait_cancel(r, request_id, now_ns);
    if (st != LR_ENOENT)
        return st; /* it was waiting: withdrawn, or the clock refused */
    return lr__router_fail_inflight(r, request_id, now_ns);
}
