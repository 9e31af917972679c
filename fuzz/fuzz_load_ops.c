/* lr_load as a sequence of API calls, checked against a shadow of the
 * requests in flight.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header   max_instances 1..8; max_requests 1..64; rtt_alpha choice
 *            (default, 1, 0.5, 0.01); allocation failure at create: mode
 *            (none, none, once, from then on) and which allocation 1..8;
 *            a mask of the instances added at start
 *   op 0-2   dispatch: request id, instance, alternative (or the instance
 *            itself), prompt, cached, alt cached (each possibly one too
 *            many), expected output, struct_size (current, v1, too small)
 *   op 3     first token: id, time step back or forward
 *   op 4     complete: id, output tokens
 *   op 5     fail: id
 *   op 6     move: id, instance, cached
 *   op 7     add_instance: instance, class (64 and UINT32_MAX invalid),
 *            prefix_caching (2 and -1 invalid)
 *   op 8     remove_instance
 *   op 9     set_stats: instance, running, waiting, kv_use (NaN, inf, out
 *            of [0,1] among them), scrape time (older, same, newer),
 *            struct_size
 *   op 10    observe_rtt: instance, RTT (up to past LR_LOAD_MAX_RTT_NS)
 *   op 11    time moves forward
 *   op 12    queries: lr_load_get with struct sizes from too small to
 *            larger than known, lr_load_request, lr__load_req,
 *            lr__load_each_req with an early stop, lr_load_inflight
 * Instance ids are 0..7 (so some are past max_instances), 1000 and
 * LR_INSTANCE_NONE; request ids mostly come from a pool of 12 plus the
 * ids in flight, so duplicates and events after the end are common.
 *
 * After every call: lr__load_verify() == LR_OK; the status is exactly the
 * one the shadow predicts; a failed call (or a no-op: repeated first token,
 * older scrape) leaves lr__load_digest unchanged; every tracked instance's
 * counters equal the sums over the shadow's requests, so no counter can be
 * negative or wrapped, and they are all zero with nothing in flight; the
 * queue start, latest first token, scrape time and RTT EWMA equal the
 * shadow's; request views agree (a removed instance stops being anyone's
 * alternative, even when added again) and lists run newest first. After
 * create, the allocator aborts on any allocation: no call may allocate.
 * Then the same input is run again (fresh tracker, so another id-table
 * seed): the transcript of every result and the final digest must match. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index_util.h"
#include "parts/load.h"

#define MAX_OPS 256
#define MAX_INST 8
#define MAX_REQ 64
#define NONE LR_INSTANCE_NONE

static const uint32_t inst_ids[10] = { 0, 1, 2, 3, 4, 5, 6, 7, 1000, NONE };

/* ---- allocator: create may fail; nothing may allocate after it ---------- */

struct alloc {
    uint64_t count, fail_at;
    bool sticky, locked;
    size_t live;
    size_t shift; /* blocks start this far into what malloc gave */
};

static void *
a_alloc(void *ud, size_t n)
{
    struct alloc *a = ud;
    FUZZ_ASSERT(!a->locked); /* a call after create allocated */
    a->count++;
    if (a->fail_at != 0 &&
        (a->sticky ? a->count >= a->fail_at : a->count == a->fail_at))
        return NULL;
    char *p = malloc(n + a->shift);
    if (p == NULL)
        return NULL;
    a->live += n;
    return p + a->shift;
}

static void *
a_realloc(void *ud, void *p, size_t old_n, size_t new_n)
{
    (void)ud;
    (void)p;
    (void)old_n;
    (void)new_n;
    FUZZ_ASSERT(!"lr_load never reallocates");
    return NULL;
}

static void
a_free(void *ud, void *p, size_t n)
{
    struct alloc *a = ud;
    FUZZ_ASSERT(a->live >= n);
    a->live -= n;
    free((char *)p - a->shift);
}

/* ---- shadow ---------------------------------------------------------------- */

struct sreq {
    uint64_t id;
    uint32_t inst, prompt, cached, out;
    uint32_t alt, alt_cached;
    uint64_t dispatch_ns;
    uint64_t seq; /* when it joined its instance's list: newest largest */
    bool queued;
};

struct shadow {
    uint32_t max_inst, max_req;
    double alpha;
    bool live[MAX_INST];
    bool has_stats[MAX_INST];
    uint64_t scraped_ns[MAX_INST];
    bool has_rtt[MAX_INST];
    double rtt[MAX_INST];
    uint64_t last_first_ns[MAX_INST];
    uint64_t queue_since_ns[MAX_INST];
    struct sreq r[MAX_REQ];
    uint32_t n;
    uint64_t seq;
};

static bool
s_live(const struct shadow *s, uint32_t inst)
{
    return inst < s->max_inst && s->live[inst];
}

static int
s_find(const struct shadow *s, uint64_t id)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->r[i].id == id)
            return (int)i;
    return -1;
}

static void
s_drop(struct shadow *s, int i)
{
    s->r[i] = s->r[--s->n];
}

/* A request joins the queue of `inst`: an empty queue starts now. */
static void
s_enqueue(struct shadow *s, uint32_t inst, uint64_t dispatch_ns)
{
    for (uint32_t k = 0; k < s->n; k++)
        if (s->r[k].inst == inst && s->r[k].queued)
            return;
    s->queue_since_ns[inst] = dispatch_ns;
}

struct run {
    bool check;
    size_t shift;
    uint64_t transcript;
    uint64_t digest;
    uint64_t now;
    struct shadow s;
    lr_load *ld;
};

/* Counters of every instance against the shadow. */
static void
check_counters(struct run *r)
{
    const struct shadow *s = &r->s;
    uint64_t total = 0;
    for (uint32_t i = 0; i < 10; i++) {
        uint32_t inst = inst_ids[i];
        lr_load_snapshot sn;
        lr_load_snapshot_init(&sn);
        lr_status st = lr_load_get(r->ld, inst, &sn);
        if (!s_live(s, inst)) {
            FUZZ_ASSERT_STATUS(st, st == LR_ENOENT);
            continue;
        }
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        uint64_t n = 0, nq = 0, pf = 0, qt = 0, dec = 0, kv = 0, pt = 0;
        for (uint32_t k = 0; k < s->n; k++) {
            const struct sreq *q = &s->r[k];
            if (q->inst != inst)
                continue;
            n++;
            kv += (uint64_t)q->prompt + q->out;
            pt += q->prompt;
            if (q->queued) {
                nq++;
                pf += q->prompt - q->cached;
                qt += q->prompt;
            } else {
                dec += q->out;
            }
        }
        FUZZ_ASSERT(sn.inflight == n);
        FUZZ_ASSERT(sn.queued == nq);
        FUZZ_ASSERT(sn.prefill_tokens == pf);
        FUZZ_ASSERT(sn.queued_tokens == qt);
        FUZZ_ASSERT(sn.decode_tokens == dec);
        FUZZ_ASSERT(sn.kv_tokens == kv);
        FUZZ_ASSERT(sn.prompt_tokens == pt);
        FUZZ_ASSERT(sn.queue_since_ns == (nq ? s->queue_since_ns[inst] : 0));
        FUZZ_ASSERT(sn.last_first_token_ns == s->last_first_ns[inst]);
        FUZZ_ASSERT(sn.has_stats == (int32_t)s->has_stats[inst]);
        FUZZ_ASSERT(!sn.has_stats || sn.scraped_ns == s->scraped_ns[inst]);
        FUZZ_ASSERT(sn.has_rtt == (int32_t)s->has_rtt[inst]);
        FUZZ_ASSERT(sn.rtt_ns ==
                    (s->has_rtt[inst] ? (uint64_t)(s->rtt[inst] + 0.5) : 0));
        /* bounds that hold whatever the shadow says */
        FUZZ_ASSERT(sn.queued <= sn.inflight);
        FUZZ_ASSERT(sn.inflight <= s->max_req);
        FUZZ_ASSERT(sn.prefill_tokens <= sn.queued_tokens);
        FUZZ_ASSERT(sn.queued_tokens <= (uint64_t)sn.queued * UINT32_MAX);
        FUZZ_ASSERT(sn.decode_tokens <=
                    (uint64_t)(sn.inflight - sn.queued) * UINT32_MAX);
        FUZZ_ASSERT(sn.queued_tokens + sn.decode_tokens <= sn.kv_tokens);
        FUZZ_ASSERT(sn.queued_tokens <= sn.prompt_tokens &&
                    sn.prompt_tokens <= sn.kv_tokens);
        FUZZ_ASSERT(sn.kv_tokens <= (uint64_t)sn.inflight * 2 * UINT32_MAX);
        if (sn.queued == 0)
            FUZZ_ASSERT(sn.queue_since_ns == 0);
        if (sn.inflight == 0)
            FUZZ_ASSERT(sn.prefill_tokens == 0 && sn.queued_tokens == 0 &&
                        sn.decode_tokens == 0 && sn.kv_tokens == 0 &&
                        sn.prompt_tokens == 0);
        FUZZ_ASSERT(sn.has_stats == 0 || sn.has_stats == 1);
        FUZZ_ASSERT(sn.has_rtt == 0 || sn.has_rtt == 1);
        FUZZ_ASSERT(sn.rtt_ns <= LR_LOAD_MAX_RTT_NS);
        FUZZ_ASSERT(sn.kv_use >= 0.0 && sn.kv_use <= 1.0);
        total += n;
    }
    FUZZ_ASSERT(total == s->n);
    FUZZ_ASSERT(lr_load_inflight(r->ld) == s->n);
}

/* After every call: the status is the predicted one, verify passes, and a
 * call that failed or did nothing left the digest as it was. */
static void
after(struct run *r, lr_status st, lr_status want, uint64_t d0, bool nop)
{
    fuzz_trace("  = %s", lr_status_name(st));
    fuzz_note(&r->transcript, (uint64_t)st);
    if (!r->check)
        return;
    if (st != want) {
        fprintf(stderr, "status %s, shadow says %s\n", lr_status_name(st),
                lr_status_name(want));
        FUZZ_ASSERT(st == want);
    }
    lr_status v = lr__load_verify(r->ld);
    FUZZ_ASSERT_STATUS(v, v == LR_OK);
    if (st != LR_OK || nop)
        FUZZ_ASSERT_STATUS(st, lr__load_digest(r->ld) == d0);
    check_counters(r);
}

/* ---- decoding ----------------------------------------------------------------- */

static uint64_t
dec_id(struct run *r, fuzz_dp *dp)
{
    uint32_t c = fuzz_dp_next_range(dp, 0, 15);
    if (c < 12)
        return c;
    if (c == 12)
        return UINT64_MAX;
    if (c == 13)
        return 1ull << 63;
    if (c == 14) {
        uint32_t k = fuzz_dp_next_range(dp, 0, MAX_REQ - 1);
        return r->s.n > 0 ? r->s.r[k % r->s.n].id : k;
    }
    return fuzz_dp_next_u64(dp);
}

static uint32_t
dec_inst(fuzz_dp *dp)
{
    return inst_ids[fuzz_dp_next_range(dp, 0, 9)];
}

static uint32_t
dec_tokens(fuzz_dp *dp)
{
    switch (fuzz_dp_next_range(dp, 0, 3)) {
    case 0:
        return 0;
    case 1:
        return fuzz_dp_next_range(dp, 0, 255);
    case 2:
        return fuzz_dp_next_range(dp, 0, 65535);
    default:
        return UINT32_MAX - fuzz_dp_next_range(dp, 0, 1);
    }
}

/* cached tokens for a prompt: none, all, one too many, some */
static uint32_t
dec_cached(fuzz_dp *dp, uint32_t prompt)
{
    switch (fuzz_dp_next_range(dp, 0, 3)) {
    case 0:
        return 0;
    case 1:
        return prompt;
    case 2:
        return prompt == UINT32_MAX ? prompt : prompt + 1;
    default:
        return fuzz_dp_next_range(dp, 0, prompt);
    }
}

static uint64_t
dec_time(struct run *r, fuzz_dp *dp)
{
    uint32_t c = fuzz_dp_next_range(dp, 0, 3);
    if (c == 0)
        return r->now;
    if (c == 1)
        return r->now - fuzz_dp_next_range(dp, 0, 1000000);
    r->now += fuzz_dp_next_range(dp, 0, 1000000);
    return r->now;
}

/* ---- operations ------------------------------------------------------------------ */

static void
op_dispatch(struct run *r, fuzz_dp *dp)
{
    lr_dispatch d;
    lr_dispatch_init(&d);
    d.request_id = dec_id(r, dp);
    d.instance = dec_inst(dp);
    uint32_t alt = fuzz_dp_next_range(dp, 0, 11);
    d.alt_instance = alt < 10 ? inst_ids[alt] : alt == 10 ? d.instance : NONE;
    d.prompt_tokens = dec_tokens(dp);
    d.cached_tokens = dec_cached(dp, d.prompt_tokens);
    d.alt_cached_tokens = dec_cached(dp, d.prompt_tokens);
    d.expected_output_tokens = dec_tokens(dp);
    d.now_ns = dec_time(r, dp);
    uint32_t sz = fuzz_dp_next_range(dp, 0, 7);
    d.struct_size = sz == 1   ? LR_DISPATCH_SIZE_V1
                    : sz == 2 ? LR_DISPATCH_SIZE_V1 - 1
                              : sizeof d;
    fuzz_trace("dispatch(id=%llu, inst=%u, alt=%u, prompt=%u, cached=%u, "
               "alt_cached=%u, out=%u, now=%llu, size=%zu)",
               (unsigned long long)d.request_id, d.instance, d.alt_instance,
               d.prompt_tokens, d.cached_tokens, d.alt_cached_tokens,
               d.expected_output_tokens, (unsigned long long)d.now_ns,
               d.struct_size);
    struct shadow *s = &r->s;
    lr_status want;
    if (d.struct_size < LR_DISPATCH_SIZE_V1)
        want = LR_EVERSION;
    else if (d.cached_tokens > d.prompt_tokens ||
             d.alt_instance == d.instance ||
             d.alt_cached_tokens > d.prompt_tokens)
        want = LR_EINVAL;
    else if (!s_live(s, d.instance) ||
             (d.alt_instance != NONE && !s_live(s, d.alt_instance)))
        want = LR_ENOENT;
    else if (s_find(s, d.request_id) >= 0)
        want = LR_EEXIST;
    else if (s->n == s->max_req)
        want = LR_ELIMIT;
    else
        want = LR_OK;
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_dispatch(r->ld, &d);
    if (st == LR_OK && want == LR_OK) {
        s_enqueue(s, d.instance, d.now_ns);
        s->r[s->n++] =
            (struct sreq){ .id = d.request_id,
                           .inst = d.instance,
                           .prompt = d.prompt_tokens,
                           .cached = d.cached_tokens,
                           .out = d.expected_output_tokens,
                           .alt = d.alt_instance,
                           .alt_cached =
                               d.alt_instance != NONE ? d.alt_cached_tokens : 0,
                           .dispatch_ns = d.now_ns,
                           .seq = ++s->seq,
                           .queued = true };
    }
    after(r, st, want, d0, false);
}

static void
op_first_token(struct run *r, fuzz_dp *dp)
{
    uint64_t id = dec_id(r, dp);
    uint64_t now = dec_time(r, dp);
    fuzz_trace("first_token(id=%llu, now=%llu)", (unsigned long long)id,
               (unsigned long long)now);
    int i = s_find(&r->s, id);
    bool nop = i >= 0 && !r->s.r[i].queued;
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_first_token(r->ld, id, now);
    if (i >= 0 && st == LR_OK && !nop) {
        r->s.r[i].queued = false;
        uint32_t in = r->s.r[i].inst;
        if (now > r->s.last_first_ns[in])
            r->s.last_first_ns[in] = now;
    }
    after(r, st, i >= 0 ? LR_OK : LR_ENOENT, d0, nop);
}

static void
op_end(struct run *r, fuzz_dp *dp, bool fail)
{
    uint64_t id = dec_id(r, dp);
    uint32_t out = fail ? 0 : dec_tokens(dp);
    fuzz_trace("%s(id=%llu, out=%u)", fail ? "fail" : "complete",
               (unsigned long long)id, out);
    int i = s_find(&r->s, id);
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = fail ? lr_load_fail(r->ld, id)
                        : lr_load_complete(r->ld, id, out, r->now);
    if (i >= 0 && st == LR_OK)
        s_drop(&r->s, i);
    after(r, st, i >= 0 ? LR_OK : LR_ENOENT, d0, false);
}

static void
op_move(struct run *r, fuzz_dp *dp)
{
    uint64_t id = dec_id(r, dp);
    uint32_t to = dec_inst(dp);
    int i = s_find(&r->s, id);
    uint32_t prompt = i >= 0 ? r->s.r[i].prompt : 100;
    uint32_t cached = dec_cached(dp, prompt);
    fuzz_trace("move(id=%llu, to=%u, cached=%u)", (unsigned long long)id, to,
               cached);
    lr_status want;
    if (i < 0 || !s_live(&r->s, to))
        want = LR_ENOENT;
    else if (cached > prompt || to == r->s.r[i].inst)
        want = LR_EINVAL;
    else if (!r->s.r[i].queued)
        want = LR_ESTATE;
    else
        want = LR_OK;
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_move(r->ld, id, to, cached);
    if (st == LR_OK && want == LR_OK) {
        s_enqueue(&r->s, to, r->s.r[i].dispatch_ns);
        r->s.r[i].alt = r->s.r[i].inst;
        r->s.r[i].alt_cached = r->s.r[i].cached;
        r->s.r[i].inst = to;
        r->s.r[i].cached = cached;
        r->s.r[i].seq = ++r->s.seq;
    }
    after(r, st, want, d0, false);
}

static void
op_add(struct run *r, fuzz_dp *dp)
{
    static const int32_t pcs[4] = { 0, 1, 2, -1 };
    uint32_t inst = dec_inst(dp);
    uint32_t cls = fuzz_dp_next_range(dp, 0, LR_LOAD_MAX_CLASSES + 1);
    if (cls == LR_LOAD_MAX_CLASSES + 1)
        cls = UINT32_MAX;
    int32_t pc = pcs[fuzz_dp_next_range(dp, 0, 3)];
    fuzz_trace("add_instance(%u, class=%u, prefix_caching=%d)", inst, cls, pc);
    lr_status want;
    if (cls >= LR_LOAD_MAX_CLASSES || (pc != 0 && pc != 1) || inst == NONE)
        want = LR_EINVAL;
    else if (inst >= r->s.max_inst)
        want = LR_ELIMIT;
    else if (r->s.live[inst])
        want = LR_EEXIST;
    else
        want = LR_OK;
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_add_instance(r->ld, inst, cls, pc);
    if (st == LR_OK && want == LR_OK) {
        r->s.live[inst] = true;
        r->s.has_stats[inst] = false;
        r->s.has_rtt[inst] = false;
        r->s.rtt[inst] = 0.0;
        r->s.last_first_ns[inst] = 0;
    }
    after(r, st, want, d0, false);
}

static void
op_remove(struct run *r, fuzz_dp *dp)
{
    uint32_t inst = dec_inst(dp);
    fuzz_trace("remove_instance(%u)", inst);
    bool known = s_live(&r->s, inst);
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_remove_instance(r->ld, inst);
    if (known && st == LR_OK) {
        r->s.live[inst] = false;
        for (int i = (int)r->s.n - 1; i >= 0; i--)
            if (r->s.r[i].inst == inst)
                s_drop(&r->s, i);
        /* no longer anyone's alternative, even once added again */
        for (uint32_t i = 0; i < r->s.n; i++)
            if (r->s.r[i].alt == inst) {
                r->s.r[i].alt = NONE;
                r->s.r[i].alt_cached = 0;
            }
    }
    after(r, st, known ? LR_OK : LR_ENOENT, d0, false);
}

static void
op_stats(struct run *r, fuzz_dp *dp)
{
    static const double kv[8] = {
        0.0, 0.5, 1.0, -0.1, 1.5, NAN, INFINITY, 1e-9
    };
    uint32_t inst = dec_inst(dp);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.running = fuzz_dp_next_range(dp, 0, 255);
    s.waiting = fuzz_dp_next_range(dp, 0, 255);
    s.kv_use = kv[fuzz_dp_next_range(dp, 0, 7)];
    s.scraped_ns = dec_time(r, dp);
    uint32_t sz = fuzz_dp_next_range(dp, 0, 7);
    if (sz == 1)
        s.struct_size = LR_ENGINE_STATS_SIZE_V1;
    else if (sz == 2)
        s.struct_size = LR_ENGINE_STATS_SIZE_V1 - 1;
    fuzz_trace("set_stats(%u, running=%u, waiting=%u, kv_use=%g, at=%llu, "
               "size=%zu)",
               inst, s.running, s.waiting, s.kv_use,
               (unsigned long long)s.scraped_ns, s.struct_size);
    lr_status want = LR_OK;
    bool nop = false;
    if (s.struct_size < LR_ENGINE_STATS_SIZE_V1)
        want = LR_EVERSION;
    else if (!(s.kv_use >= 0.0 && s.kv_use <= 1.0))
        want = LR_EINVAL;
    else if (!s_live(&r->s, inst))
        want = LR_ENOENT;
    if (want == LR_OK)
        nop = r->s.has_stats[inst] && s.scraped_ns < r->s.scraped_ns[inst];
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_set_stats(r->ld, inst, &s);
    if (st == LR_OK && want == LR_OK && !nop) {
        r->s.has_stats[inst] = true;
        r->s.scraped_ns[inst] = s.scraped_ns;
    }
    after(r, st, want, d0, nop);
    if (r->check && st == LR_OK && !nop) {
        lr_load_snapshot sn;
        lr_load_snapshot_init(&sn);
        FUZZ_ASSERT(lr_load_get(r->ld, inst, &sn) == LR_OK);
        FUZZ_ASSERT(sn.has_stats == 1 && sn.running == s.running &&
                    sn.waiting == s.waiting && sn.kv_use == s.kv_use &&
                    sn.scraped_ns == s.scraped_ns);
    }
}

static void
op_rtt(struct run *r, fuzz_dp *dp)
{
    uint32_t inst = dec_inst(dp);
    uint64_t rtt;
    switch (fuzz_dp_next_range(dp, 0, 5)) {
    case 0:
        rtt = 0;
        break;
    case 1:
        rtt = fuzz_dp_next_range(dp, 0, 0xffffff);
        break;
    case 2:
        rtt = fuzz_dp_next_u64(dp) % (LR_LOAD_MAX_RTT_NS + 1);
        break;
    case 3:
        rtt = LR_LOAD_MAX_RTT_NS;
        break;
    case 4:
        rtt = LR_LOAD_MAX_RTT_NS + 1;
        break;
    default:
        rtt = UINT64_MAX;
        break;
    }
    fuzz_trace("observe_rtt(%u, %llu)", inst, (unsigned long long)rtt);
    lr_status want = rtt > LR_LOAD_MAX_RTT_NS ? LR_ERANGE
                     : !s_live(&r->s, inst)   ? LR_ENOENT
                                              : LR_OK;
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    lr_status st = lr_load_observe_rtt(r->ld, inst, rtt);
    if (st == LR_OK && want == LR_OK) {
        struct shadow *s = &r->s;
        if (!s->has_rtt[inst])
            s->rtt[inst] = (double)rtt;
        else
            s->rtt[inst] += s->alpha * ((double)rtt - s->rtt[inst]);
        s->has_rtt[inst] = true;
    }
    after(r, st, want, d0, false);
    if (st == LR_OK) {
        lr_load_snapshot sn;
        lr_load_snapshot_init(&sn);
        FUZZ_ASSERT(lr_load_get(r->ld, inst, &sn) == LR_OK);
        FUZZ_ASSERT(sn.has_rtt == 1);
        fuzz_note(&r->transcript, sn.rtt_ns);
    }
}

struct walk {
    const struct run *r;
    uint32_t inst, n, stop;
    uint64_t last_seq;
};

static int
walk_cb(void *ctx, const struct lr__req_view *v)
{
    struct walk *w = ctx;
    int i = s_find(&w->r->s, v->id);
    FUZZ_ASSERT(i >= 0);
    const struct sreq *q = &w->r->s.r[i];
    FUZZ_ASSERT(v->instance == w->inst && q->inst == w->inst);
    FUZZ_ASSERT(v->prompt_tokens == q->prompt);
    FUZZ_ASSERT(v->cached_tokens == q->cached);
    FUZZ_ASSERT(v->expected_output_tokens == q->out);
    FUZZ_ASSERT(v->queued == (int)q->queued);
    FUZZ_ASSERT(v->dispatch_ns == q->dispatch_ns);
    FUZZ_ASSERT(w->n == 0 || q->seq < w->last_seq); /* newest first */
    w->last_seq = q->seq;
    FUZZ_ASSERT(v->alt_instance == q->alt);
    FUZZ_ASSERT(v->alt_cached_tokens == q->alt_cached);
    FUZZ_ASSERT(v->alt_instance == NONE || s_live(&w->r->s, v->alt_instance));
    FUZZ_ASSERT(v->alt_instance != v->instance);
    FUZZ_ASSERT(v->alt_cached_tokens <= v->prompt_tokens);
    return ++w->n == w->stop;
}

static void
op_query(struct run *r, fuzz_dp *dp)
{
    uint32_t inst = dec_inst(dp);
    uint64_t id = dec_id(r, dp);
    uint32_t szc = fuzz_dp_next_range(dp, 0, 3);
    uint32_t stop = fuzz_dp_next_range(dp, 0, 4);
    fuzz_trace("query(inst=%u, id=%llu, size choice %u, stop after %u)", inst,
               (unsigned long long)id, szc, stop);
    uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
    struct {
        lr_load_snapshot s;
        uint64_t future;
    } big;
    memset(&big, 0x5a, sizeof big);
    static const size_t sizes[4] = { 0, LR_LOAD_SNAPSHOT_SIZE_V1 - 1,
                                     LR_LOAD_SNAPSHOT_SIZE_V1, sizeof big };
    big.s.struct_size = sizes[szc];
    lr_status st = lr_load_get(r->ld, inst, &big.s);
    fuzz_note(&r->transcript, (uint64_t)st);
    if (r->check) {
        lr_status want = szc < 2                ? LR_EVERSION
                         : !s_live(&r->s, inst) ? LR_ENOENT
                                                : LR_OK;
        FUZZ_ASSERT_STATUS(st, st == want);
        FUZZ_ASSERT(big.future == 0x5a5a5a5a5a5a5a5aull);
        FUZZ_ASSERT(big.s.struct_size == sizes[szc]);
    }
    if (st == LR_OK) {
        fuzz_note(&r->transcript, big.s.inflight);
        fuzz_note(&r->transcript, big.s.queued);
        fuzz_note(&r->transcript, big.s.prefill_tokens);
        fuzz_note(&r->transcript, big.s.queued_tokens);
        fuzz_note(&r->transcript, big.s.decode_tokens);
        fuzz_note(&r->transcript, big.s.kv_tokens);
        fuzz_note(&r->transcript, big.s.queue_since_ns);
        fuzz_note(&r->transcript, big.s.last_first_token_ns);
        fuzz_note(&r->transcript, big.s.rtt_ns);
        fuzz_note(&r->transcript, big.s.scraped_ns);
    }

    uint32_t where = 12345;
    int32_t queued = -1;
    st = lr_load_request(r->ld, id, &where, &queued);
    fuzz_note(&r->transcript, (uint64_t)st);
    int i = s_find(&r->s, id);
    struct lr__req_view v;
    lr_status st2 = lr__load_req(r->ld, id, &v);
    if (r->check) {
        FUZZ_ASSERT_STATUS(st, st == (i >= 0 ? LR_OK : LR_ENOENT));
        FUZZ_ASSERT_STATUS(st2, st2 == st);
        FUZZ_ASSERT(lr_load_request(r->ld, id, NULL, NULL) == st);
        if (i >= 0) {
            FUZZ_ASSERT(where == r->s.r[i].inst && v.instance == where);
            FUZZ_ASSERT(queued == (int32_t)r->s.r[i].queued);
            FUZZ_ASSERT(v.id == id);
            FUZZ_ASSERT(v.alt_instance == r->s.r[i].alt);
            FUZZ_ASSERT(v.alt_cached_tokens == r->s.r[i].alt_cached);
            FUZZ_ASSERT(v.cached_tokens == r->s.r[i].cached);
            FUZZ_ASSERT(v.dispatch_ns == r->s.r[i].dispatch_ns);
        }
    }
    if (st == LR_OK) {
        fuzz_note(&r->transcript, where);
        fuzz_note(&r->transcript, (uint64_t)queued);
        fuzz_note(&r->transcript, v.alt_instance);
        fuzz_note(&r->transcript, v.alt_cached_tokens);
        fuzz_note(&r->transcript, v.dispatch_ns);
    }

    struct walk w = { .r = r, .inst = inst, .stop = stop };
    lr__load_each_req(r->ld, inst, walk_cb, &w);
    fuzz_note(&r->transcript, w.n);
    if (r->check) {
        uint32_t n = 0;
        for (uint32_t k = 0; k < r->s.n; k++)
            n += r->s.r[k].inst == inst;
        FUZZ_ASSERT(w.n == (stop != 0 && stop < n ? stop : n));
        FUZZ_ASSERT(lr__load_digest(r->ld) == d0);
    }
    fuzz_note(&r->transcript, lr_load_inflight(r->ld));
}

/* ---- driver ------------------------------------------------------------------------ */

static void
run_once(struct run *r, const uint8_t *data, size_t size)
{
    static const double alphas[4] = { 0.0, 1.0, 0.5, 0.01 };
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    lr_load_options o;
    lr_load_options_init(&o);
    o.max_instances = fuzz_dp_next_range(&dp, 1, MAX_INST);
    o.max_requests = fuzz_dp_next_range(&dp, 1, MAX_REQ);
    o.rtt_alpha = alphas[fuzz_dp_next_range(&dp, 0, 3)];
    struct alloc a = { .shift = r->shift };
    fuzz_oom_decode(&dp, 8, &a.fail_at, &a.sticky);
    uint32_t mask = fuzz_dp_next_range(&dp, 0, 255);
    lr_allocator al = { a_alloc, a_realloc, a_free, &a };
    o.allocator = &al;
    fuzz_trace("load(max_instances=%u, max_requests=%u, alpha=%g); "
               "allocation %llu fails%s; instances %#x",
               o.max_instances, o.max_requests, o.rtt_alpha,
               (unsigned long long)a.fail_at,
               a.sticky ? " and every one after" : "", mask);

    memset(&r->s, 0, sizeof r->s);
    r->s.max_inst = o.max_instances;
    r->s.max_req = o.max_requests;
    r->s.alpha = o.rtt_alpha != 0.0 ? o.rtt_alpha : 0.3;
    r->now = FUZZ_SEC;
    r->ld = (lr_load *)&r->ld;
    lr_status st = lr_load_create(&o, &r->ld);
    fuzz_note(&r->transcript, (uint64_t)st);
    if (st != LR_OK) {
        /* only an injected failure may stop create, and it cleans up */
        FUZZ_ASSERT_STATUS(st, st == LR_ENOMEM && a.fail_at != 0);
        FUZZ_ASSERT(r->ld == NULL);
        FUZZ_ASSERT(a.live == 0);
        r->digest = 0;
        return;
    }
    a.locked = true;

    for (uint32_t i = 0; i < MAX_INST; i++) {
        if (!(mask & (1u << i)))
            continue;
        st = lr_load_add_instance(r->ld, i, i % 4, (int32_t)(i % 2));
        FUZZ_ASSERT_STATUS(st, st == (i < o.max_instances ? LR_OK : LR_ELIMIT));
        r->s.live[i] = st == LR_OK;
    }

    for (int i = 0; i < MAX_OPS && !fuzz_dp_empty(&dp); i++) {
        switch (fuzz_dp_next_range(&dp, 0, 12)) {
        case 0:
        case 1:
        case 2:
            op_dispatch(r, &dp);
            break;
        case 3:
            op_first_token(r, &dp);
            break;
        case 4:
            op_end(r, &dp, false);
            break;
        case 5:
            op_end(r, &dp, true);
            break;
        case 6:
            op_move(r, &dp);
            break;
        case 7:
            op_add(r, &dp);
            break;
        case 8:
            op_remove(r, &dp);
            break;
        case 9:
            op_stats(r, &dp);
            break;
        case 10:
            op_rtt(r, &dp);
            break;
        case 11:
            r->now += fuzz_dp_next_range(&dp, 0, 0xffffff);
            fuzz_trace("now = %llu", (unsigned long long)r->now);
            break;
        default:
            op_query(r, &dp);
            break;
        }
    }

    /* end what is left: every counter must come back to zero */
    while (r->s.n > 0) {
        uint64_t id = r->s.r[r->s.n - 1].id;
        fuzz_trace("drain: complete(id=%llu)", (unsigned long long)id);
        uint64_t d0 = r->check ? lr__load_digest(r->ld) : 0;
        st = lr_load_complete(r->ld, id, 0, r->now);
        r->s.n--;
        after(r, st, LR_OK, d0, false);
    }
    FUZZ_ASSERT(lr_load_inflight(r->ld) == 0);
    r->digest = lr__load_digest(r->ld);
    lr_load_destroy(r->ld);
    FUZZ_ASSERT(a.live == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run a = { .check = true, .transcript = FUZZ_FNV_INIT };
    run_once(&a, data, size);
    if (fuzz_trace_on())
        return 0;
    /* the second tracker sits 64 bytes further into its block, so its id
     * table (seeded from the address) hashes differently: nothing
     * observable may change */
    struct run b = { .transcript = FUZZ_FNV_INIT, .shift = 64 };
    run_once(&b, data, size);
    FUZZ_ASSERT(a.digest == b.digest);
    FUZZ_ASSERT(a.transcript == b.transcript);
    return 0;
}
