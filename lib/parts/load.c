/* lr_load: per-instance load counters kept from dispatch and lifecycle
 * events, plus the engine stats and RTT the host feeds in.
 *
 * Every request in flight has a record (pool `rq`, free list through
 * `next`) that remembers exactly what its dispatch added, so the end of a
 * request subtracts the same amounts whatever happened in between. Records
 * are found by id through an lr__table (table.h) of record indices, sized
 * for max_requests at creation so that no call after it allocates, and
 * chained per instance, so removing an instance drops its requests in
 * O(their number).
 *
 * A request split between a prefill and a decode instance (a
 * disaggregated fleet) has two legs: the prefill leg (chained in the
 * prefill instance's second list) carries the prefill, until it ends at
 * prefill_done or the first token; the decode leg carries the rest, as
 * an unsplit request does, less the prefill. */
#include "parts/load.h"

#include <math.h>

#include "common/lr_hash.h"
#include "common/table.h"

#define NONE LR_INSTANCE_NONE
#define ID_SEED 0x4c524c4f41443031ull /* "LRLOAD01" */

struct req {
    uint64_t id;
    uint64_t dispatch_ns;
    uint32_t inst;
    uint32_t alt;
    uint32_t prompt;
    uint32_t cached;
    uint32_t alt_cached;
    uint32_t fork;       /* its hit's fork there, and the slack that still */
    uint32_t fork_slack; /* counts as the fork (lr__load_set_fork) */
    uint32_t out;        /* expected output tokens */
    uint32_t prev,
        next; /* per-instance list; `next` also links the free list */
    /* the prefill leg: its instance (NONE: none, or ended), the cached
     * tokens expected there, its links in that instance's second list */
    uint32_t pinst, pcached, pprev, pnext;
    uint8_t split; /* dispatched with a prefill leg: no prefill here */
    uint8_t queued;
    uint8_t observed; /* its engine reported the tokens it reused */
    uint8_t kv_full;  /* sent while its engine's KV cache was full */
    uint8_t fork_sib; /* the fork is a sibling's */
};

/* An instance's load, what a route's row reads (lr__load_fill) kept
 * together: a route reads it for every instance, so every byte here is
 * a byte of cache a route fills. What only the reports read and write is
 * in struct fit, beside it. */
struct inst {
    uint8_t live;
    uint8_t has_stats;
    uint8_t has_rtt;
    int32_t prefix_caching;
    uint32_t cls;
    uint32_t head;  /* newest request */
    uint32_t phead; /* newest request whose prefill leg is here */
    uint32_t inflight, queued;
    uint64_t prefill, queued_tokens, decode, kv, prompt;
    lr_engine_stats st;
    double rtt;
    uint64_t last_first_ns, queue_since_ns;
    /* the rows' cached_lost and sibling_lost, kept at each report (struct
     * fit) so that a route divides nothing */
    double lost, sib_excess;
};

/* What its engine reported reusing of the hits expected there: the
 * reports (each request's once) and their shares not delivered, both
 * decayed per report by LOST_KEEP; their ratio is struct inst's `lost`.
 * The same for the hits past a fork (lr_candidate's sibling_lost): the
 * reports of requests that had a sibling's fork in their hit, and how
 * many of them the engine delivered no more than about the fork of; and
 * the same of requests whose hit had a boundary where a sibling would
 * have forked and none had (plain): what the engine loses past such a
 * point anyway (a paged engine short of room). struct inst's sib_excess
 * is sib_lost less plain_lost, at least 0. */
struct fit {
    double lost_n, lost_sum;
    double sib_n, sib_sum, sib_lost;
    double plain_n, plain_sum, plain_lost;
};

/* The share lost is remembered over about 32 reports, and starts from 2
 * reports of "all delivered": one unlucky request does not halve an
 * instance's hits, a steady loss shows within a few dozen. */
#define LOST_KEEP (1.0 - 1.0 / 32)
#define LOST_PRIOR 2.0
/* A report counts only from a request sent while its engine's last
 * scrape showed its KV cache under this use: an engine whose cache is
 * full evicts for room, and loses what its queued requests were sent for
 * to the wait, which says how far behind it is, not what its cache policy
 * keeps. */
#define LOST_KV_FULL 0.8

struct lr_load {
    struct lr__mem mem;
    uint32_t max_inst, max_req;
    double alpha;
    uint64_t seed;
    struct inst *in;
    struct fit *fit; /* beside in[], by instance */
    struct req *rq;
    struct lr__table tab; /* request id -> record index */
    uint32_t free_head;
    uint64_t inflight;
};

LR__INIT_SIZED(lr_load_options_init_sized, lr_load_options, options_defaults,
               .max_instances = 1024, .max_requests = 65536, .rtt_alpha = 0.3)

LR__INIT_SIZED(lr_dispatch_init_sized, lr_dispatch, dispatch_defaults,
               .alt_instance = NONE, .prefill_instance = NONE)

LR__INIT_SIZED_ZERO(lr_engine_stats_init_sized, lr_engine_stats)

LR__INIT_SIZED_ZERO(lr_load_snapshot_init_sized, lr_load_snapshot)

static void
load_free(lr_load *ld)
{
    struct lr__mem *m = &ld->mem;
    lr__free(m, ld->in, (size_t)ld->max_inst * sizeof(struct inst));
    lr__free(m, ld->fit, (size_t)ld->max_inst * sizeof(struct fit));
    lr__free(m, ld->rq, (size_t)ld->max_req * sizeof(struct req));
    lr__table_free(&ld->tab, m);
    LR__HANDLE_FREE(ld, lr_load);
}

lr_status
lr_load_create(const lr_load_options *opt, lr_load **out)
{
    LR_RETURN_IF(out == NULL, LR_EINVAL);
    *out = NULL;
    lr_load_options o;
    lr_load_options_init(&o);
    if (opt != NULL) {
        lr_load_options given;
        memset(&given, 0, sizeof given);
        LR_TRY(
            lr__copy_sized(&given, sizeof given, opt, LR_LOAD_OPTIONS_SIZE_V1));
        o.allocator = given.allocator;
        if (given.max_instances)
            o.max_instances = given.max_instances;
        if (given.max_requests)
            o.max_requests = given.max_requests;
        if (given.rtt_alpha != 0.0)
            o.rtt_alpha = given.rtt_alpha;
    }
    LR_RETURN_IF(o.max_instances > LR_LOAD_MAX_INSTANCES, LR_EINVAL);
    LR_RETURN_IF(o.max_requests > LR_LOAD_MAX_REQUESTS, LR_EINVAL);
    LR_RETURN_IF(!(o.rtt_alpha > 0.0 && o.rtt_alpha <= 1.0), LR_EINVAL);
    lr_load *ld;
    LR_TRY(LR__HANDLE_NEW(ld, lr_load, o.allocator));
    ld->max_inst = o.max_instances;
    ld->max_req = o.max_requests;
    ld->alpha = o.rtt_alpha;
    /* Per tracker, from the operating system: a client sending request
     * ids cannot aim them at one spot of the table. */
    ld->seed = lr__hash_seed(0, ld) ^ ID_SEED;
    ld->in = lr__calloc(&ld->mem, ld->max_inst, sizeof(struct inst));
    ld->fit = lr__calloc(&ld->mem, ld->max_inst, sizeof(struct fit));
    ld->rq = lr__alloc(&ld->mem, (size_t)ld->max_req * sizeof(struct req));
    lr_status tst = lr__table_init(&ld->tab, &ld->mem, ld->max_req);
    if (ld->in == NULL || ld->fit == NULL || ld->rq == NULL || tst != LR_OK) {
        load_free(ld);
        return LR_ENOMEM;
    }
    for (uint32_t i = 0; i < ld->max_req; i++)
        ld->rq[i].next = i + 1 < ld->max_req ? i + 1 : LR_NIL;
    ld->free_head = 0;
    *out = ld;
    return LR_OK;
}

void
lr_load_destroy(lr_load *ld)
{
    if (ld != NULL)
        load_free(ld);
}

/* ---- request table --------------------------------------------------------- */

/* Keyed by a per-tracker seed (B26): request ids come from the host. */
static inline uint64_t
id_hash(const lr_load *ld, uint64_t id)
{
    return lr__mix64(id, ld->seed);
}

static bool
req_eq(const void *rq, uint64_t id, uint32_t r)
{
    return ((const struct req *)rq)[r].id == id;
}

/* Record of request `id` in flight, or LR_NIL. */
static uint32_t
req_find(const lr_load *ld, uint64_t id)
{
    return lr__table_find(&ld->tab, id_hash(ld, id), id, req_eq, ld->rq);
}

static struct inst *
inst_get(const lr_load *ld, uint32_t instance)
{
    if (ld == NULL || instance >= ld->max_inst || !ld->in[instance].live)
        return NULL;
    return &ld->in[instance];
}

int
lr__load_has(const lr_load *ld, uint32_t instance)
{
    return inst_get(ld, instance) != NULL;
}

/* ---- counters ---------------------------------------------------------------- */

/* What a queued request adds to its instance's queue: its prefill and
 * prompt, none of them for the decode leg of a split one. */
static uint64_t
queue_prefill(const struct req *r)
{
    return r->split ? 0 : r->prompt - r->cached;
}

static uint64_t
queue_tokens(const struct req *r)
{
    return r->split ? 0 : r->prompt;
}

static void
enqueue(lr_load *ld, struct inst *in, struct req *r)
{
    r->kv_full = in->has_stats && in->st.kv_use >= LOST_KV_FULL;
    if (in->queued == 0)
        in->queue_since_ns = r->dispatch_ns;
    in->queued++;
    in->prefill += queue_prefill(r);
    in->queued_tokens += queue_tokens(r);
    (void)ld;
}

static void
dequeue(struct inst *in, const struct req *r)
{
    in->queued--;
    in->prefill -= queue_prefill(r);
    in->queued_tokens -= queue_tokens(r);
}

static void
link_req(lr_load *ld, struct inst *in, uint32_t r)
{
    struct req *q = &ld->rq[r];
    q->prev = LR_NIL;
    q->next = in->head;
    if (in->head != LR_NIL)
        ld->rq[in->head].prev = r;
    in->head = r;
}

static void
unlink_req(lr_load *ld, struct inst *in, uint32_t r)
{
    struct req *q = &ld->rq[r];
    if (q->prev != LR_NIL)
        ld->rq[q->prev].next = q->next;
    else
        in->head = q->next;
    if (q->next != LR_NIL)
        ld->rq[q->next].prev = q->prev;
}

/* The prefill leg of record r starts at instance `in` (id pi): queued
 * there with its uncached tokens, holding its prompt's KV. */
static void
prefill_begin(lr_load *ld, struct inst *in, uint32_t pi, uint32_t r)
{
    struct req *q = &ld->rq[r];
    q->pinst = pi;
    q->pprev = LR_NIL;
    q->pnext = in->phead;
    if (in->phead != LR_NIL)
        ld->rq[in->phead].pprev = r;
    in->phead = r;
    if (in->queued == 0)
        in->queue_since_ns = q->dispatch_ns;
    in->queued++;
    in->inflight++;
    in->prefill += q->prompt - q->pcached;
    in->queued_tokens += q->prompt;
    in->kv += q->prompt;
    in->prompt += q->prompt;
}

/* The prefill leg of record r ends, if open: its instance drops it. */
static void
prefill_end(lr_load *ld, uint32_t r)
{
    struct req *q = &ld->rq[r];
    if (q->pinst == NONE)
        return;
    struct inst *in = &ld->in[q->pinst];
    if (q->pprev != LR_NIL)
        ld->rq[q->pprev].pnext = q->pnext;
    else
        in->phead = q->pnext;
    if (q->pnext != LR_NIL)
        ld->rq[q->pnext].pprev = q->pprev;
    in->queued--;
    in->inflight--;
    in->prefill -= q->prompt - q->pcached;
    in->queued_tokens -= q->prompt;
    in->kv -= q->prompt;
    in->prompt -= q->prompt;
    q->pinst = NONE;
}

/* Subtract what request record r added and free the record. */
static void
end_req(lr_load *ld, uint32_t r)
{
    struct req *q = &ld->rq[r];
    prefill_end(ld, r);
    struct inst *in = &ld->in[q->inst];
    if (q->queued)
        dequeue(in, q);
    else
        in->decode -= q->out;
    in->inflight--;
    in->kv -= (uint64_t)q->prompt + q->out;
    in->prompt -= q->prompt;
    ld->inflight--;
    unlink_req(ld, in, r);
    lr__table_remove(&ld->tab, id_hash(ld, q->id), r);
    q->next = ld->free_head;
    ld->free_head = r;
}

/* ---- instances ----------------------------------------------------------------- */

lr_status
lr_load_add_instance(lr_load *ld, uint32_t instance, uint32_t instance_class,
                     int32_t prefix_caching)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    LR_RETURN_IF(instance_class >= LR_LOAD_MAX_CLASSES, LR_EINVAL);
    LR_RETURN_IF(prefix_caching != 0 && prefix_caching != 1, LR_EINVAL);
    LR_RETURN_IF(instance == NONE, LR_EINVAL);
    LR_RETURN_IF(instance >= ld->max_inst, LR_ELIMIT);
    struct inst *in = &ld->in[instance];
    LR_RETURN_IF(in->live, LR_EEXIST);
    memset(in, 0, sizeof *in);
    memset(&ld->fit[instance], 0, sizeof ld->fit[instance]);
    in->live = 1;
    in->cls = instance_class;
    in->prefix_caching = prefix_caching;
    in->head = LR_NIL;
    in->phead = LR_NIL;
    return LR_OK;
}

lr_status
lr_load_remove_instance(lr_load *ld, uint32_t instance)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    struct inst *in = inst_get(ld, instance);
    LR_RETURN_IF(in == NULL, LR_ENOENT);
    while (in->head != LR_NIL)
        end_req(ld, in->head);
    /* the prefill legs here end; their requests decode elsewhere */
    while (in->phead != LR_NIL)
        prefill_end(ld, in->phead);
    in->live = 0;
    /* It is no one's alternative any more: an instance added again under
     * this id is a new one, with an empty cache. */
    for (uint32_t i = 0; i < ld->max_inst && ld->inflight > 0; i++) {
        if (!ld->in[i].live)
            continue;
        for (uint32_t r = ld->in[i].head; r != LR_NIL; r = ld->rq[r].next)
            if (ld->rq[r].alt == instance) {
                ld->rq[r].alt = NONE;
                ld->rq[r].alt_cached = 0;
            }
    }
    return LR_OK;
}

/* ---- lifecycle ----------------------------------------------------------------- */

lr_status
lr_load_dispatch(lr_load *ld, const lr_dispatch *dp)
{
    LR_RETURN_IF(ld == NULL || dp == NULL, LR_EINVAL);
    lr_dispatch d;
    lr_dispatch_init(&d);
    LR_TRY(lr__copy_sized(&d, sizeof d, dp, LR_DISPATCH_SIZE_V1));
    LR_RETURN_IF(d.cached_tokens > d.prompt_tokens, LR_EINVAL);
    LR_RETURN_IF(d.alt_instance == d.instance, LR_EINVAL);
    LR_RETURN_IF(d.alt_cached_tokens > d.prompt_tokens, LR_EINVAL);
    LR_RETURN_IF(d.prefill_instance != NONE && d.prefill_instance == d.instance,
                 LR_EINVAL);
    LR_RETURN_IF(d.prefill_cached_tokens > d.prompt_tokens, LR_EINVAL);
    struct inst *in = inst_get(ld, d.instance);
    LR_RETURN_IF(in == NULL, LR_ENOENT);
    LR_RETURN_IF(d.alt_instance != NONE && inst_get(ld, d.alt_instance) == NULL,
                 LR_ENOENT);
    struct inst *pin = NULL;
    if (d.prefill_instance != NONE) {
        pin = inst_get(ld, d.prefill_instance);
        LR_RETURN_IF(pin == NULL, LR_ENOENT);
    }
    LR_RETURN_IF(req_find(ld, d.request_id) != LR_NIL, LR_EEXIST);
    LR_RETURN_IF(ld->free_head == LR_NIL, LR_ELIMIT);
    uint32_t r = ld->free_head;
    struct req *q = &ld->rq[r];
    ld->free_head = q->next;
    q->id = d.request_id;
    q->dispatch_ns = d.now_ns;
    q->inst = d.instance;
    q->alt = d.alt_instance;
    q->prompt = d.prompt_tokens;
    q->cached = d.cached_tokens;
    q->fork = 0;
    q->fork_slack = 0;
    q->fork_sib = 0;
    q->alt_cached = d.alt_instance != NONE ? d.alt_cached_tokens : 0;
    q->out = d.expected_output_tokens;
    q->queued = 1;
    q->observed = 0;
    q->split = pin != NULL;
    q->pinst = NONE;
    q->pcached = pin != NULL ? d.prefill_cached_tokens : 0;
    lr__table_insert(&ld->tab, id_hash(ld, d.request_id), r);
    link_req(ld, in, r);
    enqueue(ld, in, q);
    in->inflight++;
    in->kv += (uint64_t)q->prompt + q->out;
    in->prompt += q->prompt;
    ld->inflight++;
    if (pin != NULL)
        prefill_begin(ld, pin, d.prefill_instance, r);
    return LR_OK;
}

lr_status
lr_load_prefill_done(lr_load *ld, uint64_t request_id, uint64_t now_ns)
{
    (void)now_ns;
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    uint32_t r = req_find(ld, request_id);
    LR_RETURN_IF(r == LR_NIL, LR_ENOENT);
    prefill_end(ld, r);
    return LR_OK;
}

lr_status
lr_load_first_token(lr_load *ld, uint64_t request_id, uint64_t now_ns)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    uint32_t r = req_find(ld, request_id);
    LR_RETURN_IF(r == LR_NIL, LR_ENOENT);
    struct req *q = &ld->rq[r];
    if (!q->queued)
        return LR_OK;
    prefill_end(ld, r); /* a first token: the prefill is over */
    struct inst *in = &ld->in[q->inst];
    dequeue(in, q);
    q->queued = 0;
    in->decode += q->out;
    if (now_ns > in->last_first_ns)
        in->last_first_ns = now_ns;
    return LR_OK;
}

lr_status
lr_load_complete(lr_load *ld, uint64_t request_id, uint32_t output_tokens,
                 uint64_t now_ns)
{
    (void)output_tokens;
    (void)now_ns;
    /* The tracker keeps no per-request history: completing a request
     * and failing it release the same counters. */
    return lr_load_fail(ld, request_id);
}

lr_status
lr_load_fail(lr_load *ld, uint64_t request_id)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    uint32_t r = req_find(ld, request_id);
    LR_RETURN_IF(r == LR_NIL, LR_ENOENT);
    end_req(ld, r);
    return LR_OK;
}

lr_status
lr_load_move(lr_load *ld, uint64_t request_id, uint32_t instance,
             uint32_t cached_tokens)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    uint32_t r = req_find(ld, request_id);
    LR_RETURN_IF(r == LR_NIL, LR_ENOENT);
    struct req *q = &ld->rq[r];
    struct inst *to = inst_get(ld, instance);
    LR_RETURN_IF(to == NULL, LR_ENOENT);
    LR_RETURN_IF(cached_tokens > q->prompt, LR_EINVAL);
    LR_RETURN_IF(instance == q->inst || instance == q->pinst, LR_EINVAL);
    LR_RETURN_IF(!q->queued, LR_ESTATE);
    struct inst *from = &ld->in[q->inst];
    dequeue(from, q);
    from->inflight--;
    from->kv -= (uint64_t)q->prompt + q->out;
    from->prompt -= q->prompt;
    unlink_req(ld, from, r);
    q->alt = q->inst;
    q->alt_cached = q->cached;
    q->inst = instance;
    q->cached = cached_tokens;
    q->fork = 0;
    q->fork_slack = 0;
    q->fork_sib = 0;
    link_req(ld, to, r);
    enqueue(ld, to, q);
    to->inflight++;
    to->kv += (uint64_t)q->prompt + q->out;
    to->prompt += q->prompt;
    return LR_OK;
}

/* ---- telemetry ------------------------------------------------------------------ */

lr_status
lr_load_set_stats(lr_load *ld, uint32_t instance, const lr_engine_stats *stats)
{
    LR_RETURN_IF(ld == NULL || stats == NULL, LR_EINVAL);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    LR_TRY(lr__copy_sized(&s, sizeof s, stats, LR_ENGINE_STATS_SIZE_V1));
    LR_RETURN_IF(!(s.kv_use >= 0.0 && s.kv_use <= 1.0), LR_EINVAL);
    struct inst *in = inst_get(ld, instance);
    LR_RETURN_IF(in == NULL, LR_ENOENT);
    if (in->has_stats && s.scraped_ns < in->st.scraped_ns)
        return LR_OK;
    in->st = s;
    in->st.struct_size = sizeof s;
    in->has_stats = 1;
    return LR_OK;
}

lr_status
lr_load_observe_rtt(lr_load *ld, uint32_t instance, uint64_t rtt_ns)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    LR_RETURN_IF(rtt_ns > LR_LOAD_MAX_RTT_NS, LR_ERANGE);
    struct inst *in = inst_get(ld, instance);
    LR_RETURN_IF(in == NULL, LR_ENOENT);
    if (!in->has_rtt)
        in->rtt = (double)rtt_ns;
    else
        in->rtt += ld->alpha * ((double)rtt_ns - in->rtt);
    in->has_rtt = 1;
    return LR_OK;
}

/* ---- queries ---------------------------------------------------------------------- */

lr_status
lr_load_get(const lr_load *ld, uint32_t instance, lr_load_snapshot *out)
{
    LR_TRY(lr__out_check(ld, out, LR_LOAD_SNAPSHOT_SIZE_V1));
    const struct inst *in = inst_get(ld, instance);
    LR_RETURN_IF(in == NULL, LR_ENOENT);
    lr_load_snapshot s;
    memset(&s, 0, sizeof s);
    s.instance_class = in->cls;
    s.prefix_caching = in->prefix_caching;
    s.inflight = in->inflight;
    s.queued = in->queued;
    s.prefill_tokens = in->prefill;
    s.queued_tokens = in->queued_tokens;
    s.decode_tokens = in->decode;
    s.kv_tokens = in->kv;
    s.prompt_tokens = in->prompt;
    s.has_stats = in->has_stats;
    s.running = in->st.running;
    s.waiting = in->st.waiting;
    s.kv_use = in->st.kv_use;
    s.scraped_ns = in->st.scraped_ns;
    s.has_rtt = in->has_rtt;
    s.rtt_ns = (uint64_t)(in->rtt + 0.5);
    s.last_first_token_ns = in->last_first_ns;
    s.queue_since_ns = in->queued ? in->queue_since_ns : 0;
    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    s.struct_size = out->struct_size;
    memcpy(out, &s, n);
    return LR_OK;
}

uint64_t
lr_load_inflight(const lr_load *ld)
{
    return ld != NULL ? ld->inflight : 0;
}

static void
view_of(const lr_load *ld, const struct req *q, struct lr__req_view *v)
{
    v->id = q->id;
    v->instance = q->inst;
    v->alt_instance = inst_get(ld, q->alt) != NULL ? q->alt : NONE;
    v->prompt_tokens = q->prompt;
    v->cached_tokens = q->cached;
    v->alt_cached_tokens = v->alt_instance != NONE ? q->alt_cached : 0;
    v->expected_output_tokens = q->out;
    v->dispatch_ns = q->dispatch_ns;
    v->queued = q->queued;
    v->prefill_instance = q->pinst;
    v->slot = (uint32_t)(q - ld->rq);
}

lr_status
lr__load_req(const lr_load *ld, uint64_t id, struct lr__req_view *v)
{
    LR_RETURN_IF(ld == NULL || v == NULL, LR_EINVAL);
    uint32_t r = req_find(ld, id);
    LR_RETURN_IF(r == LR_NIL, LR_ENOENT);
    view_of(ld, &ld->rq[r], v);
    return LR_OK;
}

lr_status
lr__load_observe_cached(lr_load *ld, uint64_t id, uint32_t cached_tokens,
                        uint32_t *expected)
{
    uint32_t r = req_find(ld, id);
    LR_RETURN_IF(r == LR_NIL, LR_ENOENT);
    struct req *q = &ld->rq[r];
    LR_RETURN_IF(cached_tokens > q->prompt, LR_EINVAL);
    *expected = q->cached;
    if (q->observed)
        return LR_EEXIST;
    q->observed = 1;
    if (q->cached == 0) /* nothing was expected: nothing to judge */
        return LR_OK;
    if (q->kv_full)
        return LR_OK; /* lost to the wait, if lost */
    struct inst *in = &ld->in[q->inst];
    struct fit *f = &ld->fit[q->inst];
    double lost = cached_tokens >= q->cached
                      ? 0
                      : (double)(q->cached - cached_tokens) / q->cached;
    f->lost_n = LOST_KEEP * f->lost_n + 1;
    f->lost_sum = LOST_KEEP * f->lost_sum + lost;
    in->lost = f->lost_sum / (f->lost_n + LOST_PRIOR);
    if (q->fork > 0 && (uint64_t)q->fork + q->fork_slack < q->cached) {
        /* did the engine deliver the fork and no more (an engine of
         * slots whose slot a sibling took), or more of the hit (a paged
         * engine evicts a conversation's tail a block at a time)? */
        double took =
            (uint64_t)cached_tokens <= (uint64_t)q->fork + q->fork_slack;
        double *n = q->fork_sib ? &f->sib_n : &f->plain_n;
        double *sum = q->fork_sib ? &f->sib_sum : &f->plain_sum;
        *n = LOST_KEEP * *n + 1;
        *sum = LOST_KEEP * *sum + took;
        double share = *sum / (*n + LOST_PRIOR);
        if (q->fork_sib)
            f->sib_lost = share;
        else
            f->plain_lost = share;
        /* what a sibling's fork loses beyond what the engine loses anyway */
        in->sib_excess =
            f->sib_lost > f->plain_lost ? f->sib_lost - f->plain_lost : 0;
    }
    return LR_OK;
}

void
lr__load_set_fork(lr_load *ld, uint64_t id, uint32_t fork_tokens,
                  uint32_t slack, bool sibling)
{
    uint32_t r = req_find(ld, id);
    if (r != LR_NIL) {
        ld->rq[r].fork = fork_tokens;
        ld->rq[r].fork_slack = slack;
        ld->rq[r].fork_sib = sibling;
    }
}

lr_status
lr_load_request(const lr_load *ld, uint64_t request_id, uint32_t *instance,
                int32_t *queued)
{
    struct lr__req_view v;
    LR_TRY(lr__load_req(ld, request_id, &v));
    if (instance != NULL)
        *instance = v.instance;
    if (queued != NULL)
        *queued = v.queued;
    return LR_OK;
}

void
lr__load_each_req(const lr_load *ld, uint32_t instance,
                  int (*fn)(void *ctx, const struct lr__req_view *v), void *ctx)
{
    const struct inst *in = inst_get(ld, instance);
    if (in == NULL)
        return;
    for (uint32_t r = in->head; r != LR_NIL; r = ld->rq[r].next) {
        struct lr__req_view v;
        view_of(ld, &ld->rq[r], &v);
        if (fn(ctx, &v))
            return;
    }
}

/* ---- checks ------------------------------------------------------------------------ */

lr_status
lr__load_verify(const lr_load *ld)
{
    LR_RETURN_IF(ld == NULL, LR_EINVAL);
    uint64_t total = 0;
    for (uint32_t i = 0; i < ld->max_inst; i++) {
        const struct inst *in = &ld->in[i];
        if (!in->live)
            continue;
        uint64_t n = 0, nq = 0, pf = 0, qt = 0, dec = 0, kv = 0, pt = 0;
        uint32_t prev = LR_NIL;
        for (uint32_t r = in->head; r != LR_NIL; r = ld->rq[r].next) {
            const struct req *q = &ld->rq[r];
            if (q->prev != prev || q->inst != i || n > ld->max_req)
                return LR_ECORRUPT;
            if (q->alt != NONE && (q->alt == i || inst_get(ld, q->alt) == NULL))
                return LR_ECORRUPT;
            if (req_find(ld, q->id) != r)
                return LR_ECORRUPT;
            /* an open prefill leg: a split request, elsewhere, queued */
            if (q->pinst != NONE &&
                (!q->split || q->pinst == i || inst_get(ld, q->pinst) == NULL ||
                 !q->queued))
                return LR_ECORRUPT;
            n++;
            kv += (uint64_t)q->prompt + q->out;
            pt += q->prompt;
            if (q->queued) {
                nq++;
                pf += queue_prefill(q);
                qt += queue_tokens(q);
            } else {
                dec += q->out;
            }
            prev = r;
        }
        total += n;
        prev = LR_NIL;
        uint64_t np = 0;
        for (uint32_t r = in->phead; r != LR_NIL; r = ld->rq[r].pnext) {
            const struct req *q = &ld->rq[r];
            if (q->pprev != prev || q->pinst != i || np > ld->max_req)
                return LR_ECORRUPT;
            np++;
            n++;
            nq++;
            pf += q->prompt - q->pcached;
            qt += q->prompt;
            kv += q->prompt;
            pt += q->prompt;
            prev = r;
        }
        if (n != in->inflight || nq != in->queued || pf != in->prefill ||
            qt != in->queued_tokens || dec != in->decode || kv != in->kv ||
            pt != in->prompt)
            return LR_ECORRUPT;
    }
    if (total != ld->inflight)
        return LR_ECORRUPT;
    if (ld->tab.count != total || lr__table_verify(&ld->tab) != LR_OK)
        return LR_ECORRUPT;
    uint64_t nfree = 0;
    for (uint32_t r = ld->free_head; r != LR_NIL && nfree <= ld->max_req;
         r = ld->rq[r].next)
        nfree++;
    if (nfree + total != ld->max_req)
        return LR_ECORRUPT;
    return LR_OK;
}

static uint64_t
mixin(uint64_t h, uint64_t v)
{
    return lr__mix64(h ^ v, 0x9e3779b97f4a7c15ull);
}

uint64_t
lr__load_digest(const lr_load *ld)
{
    if (ld == NULL)
        return 0;
    uint64_t h = ld->inflight;
    for (uint32_t i = 0; i < ld->max_inst; i++) {
        const struct inst *in = &ld->in[i];
        if (!in->live)
            continue;
        uint64_t rtt;
        memcpy(&rtt, &in->rtt, sizeof rtt);
        uint64_t kvu;
        memcpy(&kvu, &in->st.kv_use, sizeof kvu);
        uint64_t f[] = { i,
                         in->cls,
                         (uint64_t)in->prefix_caching,
                         in->inflight,
                         in->queued,
                         in->prefill,
                         in->queued_tokens,
                         in->decode,
                         in->kv,
                         in->prompt,
                         (uint64_t)in->has_stats,
                         in->st.running,
                         in->st.waiting,
                         kvu,
                         in->st.scraped_ns,
                         (uint64_t)in->has_rtt,
                         rtt,
                         in->last_first_ns,
                         in->queued ? in->queue_since_ns : 0,
                         lr__double_bits(ld->fit[i].lost_n),
                         lr__double_bits(ld->fit[i].lost_sum),
                         lr__double_bits(ld->fit[i].sib_n),
                         lr__double_bits(ld->fit[i].sib_sum),
                         lr__double_bits(ld->fit[i].plain_n),
                         lr__double_bits(ld->fit[i].plain_sum) };
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            h = mixin(h, f[k]);
        /* requests: order-independent sum */
        uint64_t s = 0;
        for (uint32_t r = in->head; r != LR_NIL; r = ld->rq[r].next) {
            const struct req *q = &ld->rq[r];
            uint64_t g = mixin(q->id, q->dispatch_ns);
            g = mixin(g, ((uint64_t)q->alt << 32) | q->prompt);
            g = mixin(g, ((uint64_t)q->cached << 32) | q->alt_cached);
            g = mixin(g, ((uint64_t)q->out << 3) | (uint64_t)q->kv_full << 2 |
                             (uint64_t)q->observed << 1 | q->queued);
            g = mixin(g, ((uint64_t)q->pinst << 32) | q->pcached);
            g = mixin(g, (uint64_t)q->fork_slack);
            g = mixin(g, ((uint64_t)q->fork << 2) | (uint64_t)q->fork_sib << 1 |
                             q->split);
            s += g;
        }
        h = mixin(h, s);
    }
    return h;
}

lr_status
lr__load_fill(const lr_load *ld, uint32_t instance, uint64_t now_ns,
              uint64_t max_age_ns, uint64_t stall_ns, double rtt_ms,
              lr_candidate *c)
{
    const struct inst *in = inst_get(ld, instance);
    LR_RETURN_IF(in == NULL, LR_ENOENT);
    bool fresh = in->has_stats && now_ns >= in->st.scraped_ns &&
                 now_ns - in->st.scraped_ns <= max_age_ns;
    c->inflight = in->inflight;
    c->queued = in->queued;
    c->prefill_tokens = in->prefill;
    c->queued_tokens = in->queued_tokens;
    c->prompt_tokens = in->prompt;
    c->decode_tokens = in->decode;
    c->kv_tokens = in->kv;
    c->running = fresh ? in->st.running : 0;
    c->waiting = fresh ? in->st.waiting : 0;
    c->kv_use = fresh ? in->st.kv_use : 0;
    c->rtt_ms = in->has_rtt ? in->rtt / 1e6 : rtt_ms;
    c->instance_class = in->cls;
    c->prefix_caching = in->prefix_caching;
    c->cached_lost = in->lost;
    c->sibling_lost = in->sib_excess;
    c->stall_s = 0;
    if (in->queued > 0) {
        uint64_t since = in->last_first_ns > in->queue_since_ns
                             ? in->last_first_ns
                             : in->queue_since_ns;
        if (now_ns > since && now_ns - since > stall_ns)
            c->stall_s = (double)(now_ns - since) / 1e9;
    }
    return LR_OK;
}

bool
lr__load_saturated(const lr_load *ld, uint32_t instance, uint64_t now_ns,
                   const struct lr__saturation *sat)
{
    const struct inst *in = inst_get(ld, instance);
    if (in == NULL)
        return true;
    if (in->queued >= sat->depth)
        return true;
    /* the work queued there covers the bound plus the time a request
     * sent now takes to arrive: an engine far away drains its queue
     * while the next request travels */
    double rtt_s = in->has_rtt ? in->rtt / 1e9 : 0;
    if (in->queued > 0 &&
        (double)in->prefill >= (sat->prefill_s + rtt_s) * sat->rate[in->cls])
        return true;
    if (!in->has_stats)
        return false;
    /* a scrape stamped after now (threads race) is fresh */
    bool fresh = now_ns < in->st.scraped_ns ||
                 now_ns - in->st.scraped_ns <= sat->max_age_ns;
    if (!fresh)
        return in->inflight > 0;
    return in->st.waiting >= sat->depth || in->st.kv_use >= sat->kv;
}

bool
lr__load_rtt(const lr_load *ld, uint32_t instance, double *rtt_ns)
{
    const struct inst *in = inst_get(ld, instance);
    if (in == NULL || !in->has_rtt)
        return false;
    *rtt_ns = in->rtt;
    return true;
}

int
lr__load_has_room(const lr_load *ld)
{
    return ld != NULL && ld->free_head != LR_NIL;
}

void
lr__load_set_seed(lr_load *ld, uint64_t seed)
{
    if (LR_ALWAYS(ld->inflight == 0 && ld->tab.count == 0))
        ld->seed = seed ^ ID_SEED;
}
