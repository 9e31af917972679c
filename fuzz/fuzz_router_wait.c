/* lr_router's waiting queue as a sequence of API calls, checked against a
 * shadow of which requests wait and which are in flight.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header  seed 0..255; instances at start 0..4; saturation depth 1..4;
 *           queue capacity 1..16, queue tokens 16..1024, tenant slots
 *           1..4; allocation failure (fuzz_oom_decode, 1..256)
 *   op 0-2  route: id 0..IDS-1, prompt 0..6 blocks, flags (MAY_WAIT,
 *           SHEDDABLE, DRY_RUN, NO_LEARN), tenant 0..5, urgency 0..8 (8
 *           invalid), deadline (none, now + 0..63 ms, past the largest
 *           time), a 0.1-sized request (the new fields unseen)
 *   op 3    dispatch: capacity 0..6, stride (the struct, larger, too small,
 *           the first 0.3 item's)
 *   op 4-6  first_token / complete / fail: id
 *   op 7    set_stats: instance, waiting 0..6, kv_use in eighths, scraped
 *           now or 11 s before (stale)
 *   op 8    time moves 0..2047 ms
 *   op 9    set_param: saturation queue, saturation KV, fair weights
 *           (in and out of bounds)
 *   op 10   instances: add, drain, undrain, remove
 *   op 11   queries: saturated, stats
 *
 * After every call: lr__router_verify() == LR_OK; the status is one the
 * header documents; LR_ENOMEM only once an allocation failed; a refused
 * route (but for LR_ENOMEM, which may follow route()'s housekeeping),
 * fail or dispatch leaves lr__router_digest() unchanged. Every request the
 * shadow has waiting is the router's: route() answered LR_REASON_WAITING only
 * with MAY_WAIT and LR_EBUSY only with SHEDDABLE; every dispatch entry names a
 * waiting request and leaves it waiting no more: LR_OK at a routable instance
 * (no prefill leg: the fleet is aggregated), nothing past the entries,
 * LR_EEXPIRED only past its deadline, LR_EEXIST only when its id is in
 * flight; the bands of one dispatch's LR_OK entries never go up and no
 * more urgent request is left behind; a dispatch that wrote less than its
 * capacity left no expired request and either nothing waiting or a
 * saturated fleet. stats.waiting is the shadow's count, and waited is
 * the sum of the ways out plus those still waiting. At the end the
 * router is destroyed with requests still waiting: nothing leaks. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index_util.h"
#include "router/router.h"

#define MAX_OPS 256
#define IDS 24
#define MAX_INST 6

struct sreq {
    bool wait, flight;
    uint32_t band;
    uint64_t deadline;
    uint32_t inst; /* where it is in flight */
};

struct run {
    lr_router *r;
    struct fuzz_oom oom;
    struct sreq q[IDS];
    bool live[MAX_INST], routable[MAX_INST];
    uint64_t now;
    uint64_t outs; /* expired + cancelled + dispatched + dropped */
};

static const char *
name_of(uint32_t k)
{
    static const char *const names[MAX_INST] = { "a:1", "b:1", "c:1",
                                                 "d:1", "e:1", "f:1" };
    return names[k % MAX_INST];
}

static uint32_t
n_waiting(const struct run *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < IDS; i++)
        n += r->q[i].wait;
    return n;
}

static void
check(struct run *r)
{
    fuzz_oom_pause();
    lr_status st = lr__router_verify(r->r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    lr_router_stats s;
    lr_router_stats_init(&s);
    FUZZ_ASSERT(lr_router_get_stats(r->r, &s) == LR_OK);
    FUZZ_ASSERT(s.waiting == n_waiting(r));
    FUZZ_ASSERT(s.waited == s.waited_dispatched + s.waited_expired +
                                s.waited_cancelled + s.waited_dropped +
                                s.waiting);
    FUZZ_ASSERT(s.waited_dispatched + s.waited_expired + s.waited_cancelled +
                    s.waited_dropped ==
                r->outs);
    fuzz_oom_resume();
}

static bool
enomem_ok(const struct run *r, lr_status st)
{
    return st != LR_ENOMEM || r->oom.failures > 0;
}

static uint64_t
digest(struct run *r)
{
    fuzz_oom_pause();
    uint64_t d = lr__router_digest(r->r);
    fuzz_oom_resume();
    return d;
}

static void
op_route(struct run *r, fuzz_dp *dp)
{
    uint32_t id = fuzz_dp_next_range(dp, 0, IDS - 1);
    uint32_t blocks = fuzz_dp_next_range(dp, 0, 6);
    uint32_t fl = fuzz_dp_next_range(dp, 0, 15);
    uint32_t flags =
        (fl & 1 ? LR_ROUTE_MAY_WAIT : 0) | (fl & 2 ? LR_ROUTE_SHEDDABLE : 0) |
        (fl & 4 ? LR_ROUTE_DRY_RUN : 0) | (fl & 8 ? LR_ROUTE_NO_LEARN : 0);
    uint32_t tenant = fuzz_dp_next_range(dp, 0, 5);
    uint32_t urgency = fuzz_dp_next_range(dp, 0, LR_ROUTER_URGENCIES);
    uint32_t dl = fuzz_dp_next_range(dp, 0, 65);
    bool v1 = fuzz_dp_next_range(dp, 0, 7) == 0;
    uint32_t t[96];
    for (uint32_t i = 0; i < 96; i++)
        t[i] = (i * 7 + id % 3) % 5; /* prefixes collide */
    lr_request q;
    lr_request_init(&q);
    if (v1)
        q.struct_size = LR_REQUEST_SIZE_V1;
    q.id = id;
    q.tokens = t;
    q.n_tokens = blocks * 16;
    q.flags = flags;
    q.tenant = tenant;
    q.urgency = urgency;
    q.deadline_ns = dl == 64   ? r->now + 5 * FUZZ_MS
                    : dl == 65 ? LR_ROUTER_MAX_TIME_NS + 1
                               : (dl < 32 ? 0 : r->now + dl * FUZZ_MS);
    q.expected_output_tokens = 4;
    q.now_ns = r->now;
    lr_decision d;
    lr_decision_init(&d);
    uint64_t before = digest(r);
    lr_status st = lr_router_route(r->r, &q, &d);
    fuzz_trace("route(id %u, %u blocks, flags %#x, tenant %u, urgency %u, "
               "deadline %llu%s) = %s -> %u",
               id, blocks, flags, tenant, urgency,
               (unsigned long long)q.deadline_ns, v1 ? ", v1" : "",
               lr_status_name(st), d.instance);
    bool dry = flags & LR_ROUTE_DRY_RUN;
    bool seen_new = !v1; /* a 0.1 request has urgency 0, no deadline */
    bool bad = seen_new && (urgency >= LR_ROUTER_URGENCIES ||
                            q.deadline_ns > LR_ROUTER_MAX_TIME_NS);
    FUZZ_ASSERT_STATUS(st, enomem_ok(r, st));
    if (bad) {
        FUZZ_ASSERT_STATUS(st, st == LR_EINVAL);
    } else {
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EEXIST ||
                                   st == LR_ELIMIT || st == LR_EBUSY ||
                                   st == LR_ESTATE || st == LR_ENOMEM);
    }
    if (st == LR_EBUSY)
        FUZZ_ASSERT(!dry && (flags & LR_ROUTE_SHEDDABLE));
    if (st == LR_EEXIST)
        FUZZ_ASSERT(r->q[id].wait || r->q[id].flight);
    if (st != LR_OK) {
        /* LR_ENOMEM may come after route()'s housekeeping, which stays
         * (lr_router.h); the cmocka OOM loop holds the queue's own */
        FUZZ_ASSERT(st == LR_ENOMEM || digest(r) == before);
        return;
    }
    if (dry)
        return;
    if (d.instance == LR_INSTANCE_NONE) {
        FUZZ_ASSERT(flags & LR_ROUTE_MAY_WAIT);
        FUZZ_ASSERT(d.reason == LR_REASON_WAITING);
        FUZZ_ASSERT(!r->q[id].wait && !r->q[id].flight);
        r->q[id] = (struct sreq){ .wait = true,
                                  .band = seen_new ? urgency : 0,
                                  .deadline = seen_new ? q.deadline_ns : 0 };
    } else {
        FUZZ_ASSERT(d.instance < MAX_INST && r->routable[d.instance]);
        FUZZ_ASSERT(!r->q[id].flight);
        r->q[id].flight = true; /* a waiting id routed without the flag */
        r->q[id].inst = d.instance;
    }
}

static void
op_dispatch(struct run *r, fuzz_dp *dp)
{
    uint32_t cap = fuzz_dp_next_range(dp, 0, 6);
    uint32_t kind = fuzz_dp_next_range(dp, 0, 3);
    /* the whole item, a longer stride, one too short, and the first 0.3
     * item (no prefill leg) */
    size_t stride = kind == 0   ? sizeof(lr_dispatched)
                    : kind == 1 ? sizeof(lr_dispatched) + 24
                    : kind == 2 ? LR_DISPATCHED_SIZE_V1 - 8
                                : LR_DISPATCHED_SIZE_V1;
    _Alignas(8) unsigned char buf[6 * (sizeof(lr_dispatched) + 24)];
    memset(buf, 0xee, sizeof buf);
    size_t n = 99;
    uint64_t before = digest(r);
    lr_status st =
        lr_router_dispatch(r->r, r->now, (lr_dispatched *)buf, cap, stride, &n);
    fuzz_trace("dispatch(cap %u, stride %zu) = %s, %zu", cap, stride,
               lr_status_name(st), n);
    FUZZ_ASSERT_STATUS(st, enomem_ok(r, st));
    if (kind == 2) {
        FUZZ_ASSERT_STATUS(st, st == LR_EINVAL);
        FUZZ_ASSERT(digest(r) == before);
        return;
    }
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ENOMEM);
    FUZZ_ASSERT(n <= cap);
    uint32_t last_band = 0;
    /* nothing written past the items */
    if (n < cap)
        FUZZ_ASSERT(buf[n * stride] == 0xee);
    for (size_t k = 0; k < n; k++) {
        lr_dispatched x;
        memset(&x, 0, sizeof x);
        memcpy(&x, buf + k * stride, stride < sizeof x ? stride : sizeof x);
        for (size_t b = sizeof x; b < stride; b++)
            FUZZ_ASSERT(buf[k * stride + b] == 0);
        /* an aggregated fleet: never a prefill leg */
        if (stride >= sizeof x)
            FUZZ_ASSERT(x.prefill_instance == LR_INSTANCE_NONE &&
                        x.prefill_reason == -1 && x.transfer_s == 0);
        fuzz_trace("  %llu: %s at %u, band %u",
                   (unsigned long long)x.request_id,
                   lr_status_name((lr_status)x.status), x.instance, x.urgency);
        FUZZ_ASSERT(x.request_id < IDS);
        struct sreq *q = &r->q[x.request_id];
        FUZZ_ASSERT(q->wait && x.urgency == q->band);
        q->wait = false;
        r->outs++;
        if (x.status == LR_OK) {
            FUZZ_ASSERT(x.instance < MAX_INST && r->routable[x.instance]);
            FUZZ_ASSERT(!q->flight);
            FUZZ_ASSERT(x.urgency >= last_band);
            last_band = x.urgency;
            q->flight = true;
            q->inst = x.instance;
        } else if (x.status == LR_EEXPIRED) {
            FUZZ_ASSERT(q->deadline != 0 && q->deadline <= r->now);
            FUZZ_ASSERT(x.instance == LR_INSTANCE_NONE);
        } else {
            FUZZ_ASSERT_STATUS((lr_status)x.status, x.status == LR_EEXIST);
            FUZZ_ASSERT(q->flight);
        }
    }
    for (uint32_t i = 0; i < IDS && last_band > 0; i++)
        FUZZ_ASSERT(!r->q[i].wait || r->q[i].band >= last_band || st != LR_OK);
    if (st == LR_OK && n < cap) {
        fuzz_oom_pause();
        int32_t sat = 0;
        FUZZ_ASSERT(lr_router_saturated(r->r, r->now, &sat) == LR_OK);
        fuzz_oom_resume();
        for (uint32_t i = 0; i < IDS; i++)
            FUZZ_ASSERT(!r->q[i].wait || r->q[i].deadline == 0 ||
                        r->q[i].deadline > r->now);
        FUZZ_ASSERT(n_waiting(r) == 0 || sat == 1);
    }
}

/* which: 0 first_token, 1 complete, 2 fail */
static void
op_end(struct run *r, fuzz_dp *dp, int which)
{
    uint32_t id = fuzz_dp_next_range(dp, 0, IDS - 1);
    struct sreq *q = &r->q[id];
    uint64_t before = digest(r);
    lr_status st = which == 0   ? lr_router_first_token(r->r, id, r->now)
                   : which == 1 ? lr_router_complete(r->r, id, 2, r->now)
                                : lr_router_fail(r->r, id, r->now);
    fuzz_trace("%s(%u) = %s",
               which == 0   ? "first_token"
               : which == 1 ? "complete"
                            : "fail",
               id, lr_status_name(st));
    if (which == 2 && q->wait) { /* withdrawn from the queue */
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        q->wait = false;
        r->outs++;
        return;
    }
    FUZZ_ASSERT_STATUS(st, st == (q->flight ? LR_OK : LR_ENOENT));
    if (st != LR_OK)
        FUZZ_ASSERT(digest(r) == before);
    else if (which != 0)
        q->flight = false;
}

static void
op_stats(struct run *r, fuzz_dp *dp)
{
    uint32_t id = fuzz_dp_next_range(dp, 0, MAX_INST - 1);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.waiting = fuzz_dp_next_range(dp, 0, 6);
    s.kv_use = fuzz_dp_next_range(dp, 0, 8) / 8.0;
    bool stale = fuzz_dp_next_bool(dp) && r->now > 11 * FUZZ_SEC;
    s.scraped_ns = stale ? r->now - 11 * FUZZ_SEC : r->now;
    lr_status st = lr_router_set_stats(r->r, id, &s);
    fuzz_trace("set_stats(%u, waiting %u, kv %.3f%s) = %s", id, s.waiting,
               s.kv_use, stale ? ", stale" : "", lr_status_name(st));
    FUZZ_ASSERT_STATUS(st, st == (r->live[id] ? LR_OK : LR_ENOENT));
}

static void
op_param(struct run *r, fuzz_dp *dp)
{
    static const int32_t keys[] = { LR_PARAM_SATURATION_QUEUE,
                                    LR_PARAM_SATURATION_KV,
                                    LR_PARAM_FAIR_INPUT_WEIGHT,
                                    LR_PARAM_FAIR_OUTPUT_WEIGHT };
    int32_t key = keys[fuzz_dp_next_range(dp, 0, 3)];
    double v = fuzz_dp_next_range(dp, 0, 10) / 2.0;
    lr_bounds b = lr_param_bounds(key);
    lr_status st = lr_router_set_param(r->r, key, v);
    fuzz_trace("set_param(%d, %g) = %s", key, v, lr_status_name(st));
    lr_status want = v < b.lo || v > b.hi ? LR_ERANGE
                     : (b.flags & LR_BOUNDS_INTEGER) && v != (double)(int)v
                         ? LR_EINVAL
                         : LR_OK;
    FUZZ_ASSERT_STATUS(st, st == want);
}

static void
op_instances(struct run *r, fuzz_dp *dp)
{
    uint32_t k = fuzz_dp_next_range(dp, 0, MAX_INST - 1);
    uint32_t what = fuzz_dp_next_range(dp, 0, 3);
    lr_status st;
    if (what == 0) {
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = name_of(k);
        uint32_t id = LR_INSTANCE_NONE;
        st = lr_router_add_instance(r->r, &s, &id);
        FUZZ_ASSERT_STATUS(st, enomem_ok(r, st));
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EEXIST ||
                                   st == LR_ENOMEM || st == LR_ELIMIT);
        if (st == LR_OK) {
            FUZZ_ASSERT(id < MAX_INST && !r->live[id]);
            r->live[id] = r->routable[id] = true;
        }
    } else if (what < 3) {
        st = lr_router_drain_instance(r->r, k, what == 1);
        FUZZ_ASSERT_STATUS(st, enomem_ok(r, st));
        if (st == LR_OK)
            r->routable[k] = what == 2;
        else
            FUZZ_ASSERT_STATUS(st, st == LR_ENOENT || st == LR_ENOMEM);
    } else {
        st = lr_router_remove_instance(r->r, k);
        FUZZ_ASSERT_STATUS(st, st == (r->live[k] ? LR_OK : LR_ENOENT));
        if (st == LR_OK) {
            r->live[k] = r->routable[k] = false;
            for (uint32_t i = 0; i < IDS; i++) /* they went with it */
                if (r->q[i].flight && r->q[i].inst == k)
                    r->q[i].flight = false;
        }
    }
    fuzz_trace("instances(%u, %u) = %s", k, what, lr_status_name(st));
}

static void
op_query(struct run *r, fuzz_dp *dp)
{
    (void)dp;
    int32_t sat = -1;
    lr_status st = lr_router_saturated(r->r, r->now, &sat);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_ASSERT(sat == 0 || sat == 1);
    bool any = false;
    for (uint32_t k = 0; k < MAX_INST; k++)
        any |= r->routable[k];
    if (!any)
        FUZZ_ASSERT(sat == 1);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    struct run *r = calloc(1, sizeof *r);
    FUZZ_ASSERT(r != NULL);
    lr_router_options o;
    lr_router_options_init(&o);
    o.seed = fuzz_dp_next_range(&dp, 0, 255);
    uint32_t n0 = fuzz_dp_next_range(&dp, 0, 4);
    uint32_t depth = fuzz_dp_next_range(&dp, 1, 4);
    o.queue_capacity = fuzz_dp_next_range(&dp, 1, 16);
    o.queue_tokens = fuzz_dp_next_range(&dp, 16, 1024);
    o.queue_tenants = fuzz_dp_next_range(&dp, 1, 4);
    o.max_instances = MAX_INST;
    o.max_requests = 64;
    o.policy = LR_POLICY_PREFIX_CACHE_AND_LOAD;
    o.index_ttl_ns = 1000000ull * FUZZ_SEC; /* no expiry within a run */
    fuzz_oom_decode(&dp, 256, &r->oom.fail_at, &r->oom.sticky);
    lr_allocator alloc;
    fuzz_oom_allocator(&r->oom, &alloc);
    o.allocator = &alloc;
    lr_status st = lr_router_create(&o, &r->r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    st = lr_router_set_param(r->r, LR_PARAM_SATURATION_QUEUE, depth);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    /* the clock is router_ops's to fuzz: here time only moves forward,
     * by up to 2 s an op, and may pass the default skew between calls
     * that take it (the top of the range turns the check off) */
    st = lr_router_set_param(r->r, LR_PARAM_CLOCK_SKEW_S,
                             lr_param_bounds(LR_PARAM_CLOCK_SKEW_S).hi);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    r->now = 1000 * FUZZ_SEC;
    for (uint32_t k = 0; k < n0; k++) {
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = name_of(k);
        uint32_t id;
        FUZZ_ASSERT(lr_router_add_instance(r->r, &s, &id) == LR_OK);
        r->live[id] = r->routable[id] = true;
    }
    fuzz_trace("router(seed %llu, %u instances, depth %u, capacity %u, "
               "tokens %llu, tenants %u); allocation %llu fails%s",
               (unsigned long long)o.seed, n0, depth, o.queue_capacity,
               (unsigned long long)o.queue_tokens, o.queue_tenants,
               (unsigned long long)r->oom.fail_at,
               r->oom.sticky ? " and every one after" : "");
    r->oom.armed = true;
    for (int i = 0; i < MAX_OPS && !fuzz_dp_empty(&dp); i++) {
        switch (fuzz_dp_next_range(&dp, 0, 11)) {
        case 0:
        case 1:
        case 2:
            op_route(r, &dp);
            break;
        case 3:
            op_dispatch(r, &dp);
            break;
        case 4:
            op_end(r, &dp, 0);
            break;
        case 5:
            op_end(r, &dp, 1);
            break;
        case 6:
            op_end(r, &dp, 2);
            break;
        case 7:
            op_stats(r, &dp);
            break;
        case 8:
            r->now += fuzz_dp_next_range(&dp, 0, 2047) * FUZZ_MS;
            break;
        case 9:
            op_param(r, &dp);
            break;
        case 10:
            op_instances(r, &dp);
            break;
        default:
            op_query(r, &dp);
            break;
        }
        check(r);
    }
    r->oom.armed = false;
    lr_router_destroy(r->r); /* requests may still wait: nothing leaks */
    free(r);
    return 0;
}
