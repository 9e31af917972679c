/* Differential test of lr_load against a naive model.
 *
 * The model is an array of the live requests with every field a dispatch
 * or move gave them, plus per-instance telemetry. Its counters are never
 * kept: each snapshot is recomputed by summing over the array, following
 * the documented definitions:
 *  - inflight: requests on the instance; queued: those with no first token;
 *  - prefill_tokens: prompt - cached over the queued ones; queued_tokens:
 *    prompt over the queued ones; decode_tokens: expected output over the
 *    others; kv_tokens: prompt + expected output over all;
 *  - queue_since_ns: set when a request enters an empty queue (at dispatch,
 *    or at a move, to the request's dispatch time), 0 while empty;
 *  - last_first_token_ns: the largest first-token time seen;
 *  - a repeated first token is a no-op; events for unknown ids get
 *    LR_ENOENT; a move needs a queued request (LR_ESTATE) and makes the old
 *    instance the alternative; removing an instance drops its requests and
 *    ends its role as an alternative (adding it again does not revive it);
 *  - stats older than the held ones are ignored; the RTT is an EWMA;
 *  - a request dispatched with a prefill instance has a prefill leg there
 *    until prefill_done, its first token or its end: in flight and queued
 *    there, prompt - prefill cached as prefill, prompt as queued tokens,
 *    KV and prompt; at its own instance it adds no prefill and no queued
 *    tokens; removing the prefill instance ends the leg only.
 * Statuses are predicted exactly (including which check comes first), and
 * a call the model says fails, or does nothing, must leave lr__load_digest
 * unchanged. After every operation every instance's snapshot, every
 * request's view, each instance's request list (newest first) and
 * lr__load_verify are checked. Each run ends by ending every request and
 * checking that every counter is exactly zero.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "load-helpers.h"
#include "parts/load.h"
#include "testutil.h"

#define MAXINST 8
#define NONE LR_INSTANCE_NONE

struct mreq {
    uint64_t id;
    uint32_t inst, alt;
    uint32_t prompt, cached, alt_cached, out;
    uint64_t dispatch_ns;
    int queued;
    uint64_t seq; /* when it was linked to its instance: newest is largest */
    uint32_t pinst, pcached; /* the open prefill leg (NONE: none) */
    int split;               /* dispatched with a prefill leg */
};

struct minst {
    int live;
    uint32_t cls;
    int32_t pc;
    int has_stats;
    lr_engine_stats st;
    int has_rtt;
    double rtt;
    uint64_t last_first_ns;
    uint64_t queue_since_ns;
};

struct model {
    struct mreq *r;
    size_t n;
    uint32_t max_req, n_inst;
    double alpha;
    uint64_t seq;
    struct minst in[MAXINST];
};

struct run {
    struct model m;
    lr_load *ld;
    uint64_t rs;
    uint64_t now;
    int op;
    uint64_t pool; /* ids are mostly drawn from [0, pool) */
};

static int
m_live(const struct model *m, uint32_t inst)
{
    return inst < m->n_inst && m->in[inst].live;
}

static long
m_find(const struct model *m, uint64_t id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->r[i].id == id)
            return (long)i;
    return -1;
}

static uint32_t
m_queued(const struct model *m, uint32_t inst)
{
    uint32_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += (m->r[i].inst == inst && m->r[i].queued) + (m->r[i].pinst == inst);
    return n;
}

static void
m_drop(struct model *m, size_t i)
{
    m->r[i] = m->r[--m->n];
}

static lr_status
m_dispatch(struct model *m, const lr_dispatch *d)
{
    if (d->cached_tokens > d->prompt_tokens || d->alt_instance == d->instance ||
        d->alt_cached_tokens > d->prompt_tokens ||
        (d->prefill_instance != NONE && d->prefill_instance == d->instance) ||
        d->prefill_cached_tokens > d->prompt_tokens)
        return LR_EINVAL;
    if (!m_live(m, d->instance))
        return LR_ENOENT;
    if (d->alt_instance != NONE && !m_live(m, d->alt_instance))
        return LR_ENOENT;
    if (d->prefill_instance != NONE && !m_live(m, d->prefill_instance))
        return LR_ENOENT;
    if (m_find(m, d->request_id) >= 0)
        return LR_EEXIST;
    if (m->n == m->max_req)
        return LR_ELIMIT;
    if (m_queued(m, d->instance) == 0)
        m->in[d->instance].queue_since_ns = d->now_ns;
    struct mreq *q = &m->r[m->n++];
    q->id = d->request_id;
    q->inst = d->instance;
    q->alt = d->alt_instance;
    q->prompt = d->prompt_tokens;
    q->cached = d->cached_tokens;
    q->alt_cached = d->alt_instance != NONE ? d->alt_cached_tokens : 0;
    q->out = d->expected_output_tokens;
    q->dispatch_ns = d->now_ns;
    q->queued = 1;
    q->seq = ++m->seq;
    q->pinst = NONE;
    q->split = d->prefill_instance != NONE;
    q->pcached = q->split ? d->prefill_cached_tokens : 0;
    if (q->split) {
        if (m_queued(m, d->prefill_instance) == 0)
            m->in[d->prefill_instance].queue_since_ns = d->now_ns;
        q->pinst = d->prefill_instance;
    }
    return LR_OK;
}

static lr_status
m_prefill_done(struct model *m, uint64_t id, int *changed)
{
    long i = m_find(m, id);
    if (i < 0)
        return LR_ENOENT;
    *changed = m->r[i].pinst != NONE;
    m->r[i].pinst = NONE;
    return LR_OK;
}

/* *changed says whether an LR_OK call changed anything. */
static lr_status
m_first_token(struct model *m, uint64_t id, uint64_t now, int *changed)
{
    long i = m_find(m, id);
    if (i < 0)
        return LR_ENOENT;
    struct mreq *q = &m->r[i];
    if (!q->queued) {
        *changed = 0;
        return LR_OK;
    }
    q->queued = 0;
    q->pinst = NONE; /* the prefill is over */
    if (now > m->in[q->inst].last_first_ns)
        m->in[q->inst].last_first_ns = now;
    return LR_OK;
}

static lr_status
m_end(struct model *m, uint64_t id)
{
    long i = m_find(m, id);
    if (i < 0)
        return LR_ENOENT;
    m_drop(m, (size_t)i);
    return LR_OK;
}

static lr_status
m_move(struct model *m, uint64_t id, uint32_t to, uint32_t cached)
{
    long i = m_find(m, id);
    if (i < 0)
        return LR_ENOENT;
    struct mreq *q = &m->r[i];
    if (!m_live(m, to))
        return LR_ENOENT;
    if (cached > q->prompt || to == q->inst || to == q->pinst)
        return LR_EINVAL;
    if (!q->queued)
        return LR_ESTATE;
    if (m_queued(m, to) == 0)
        m->in[to].queue_since_ns = q->dispatch_ns;
    q->alt = q->inst;
    q->alt_cached = q->cached;
    q->inst = to;
    q->cached = cached;
    q->seq = ++m->seq;
    return LR_OK;
}

static lr_status
m_add(struct model *m, uint32_t inst, uint32_t cls, int32_t pc)
{
    if (cls >= LR_LOAD_MAX_CLASSES || (pc != 0 && pc != 1) || inst == NONE)
        return LR_EINVAL;
    if (inst >= m->n_inst)
        return LR_ELIMIT;
    if (m->in[inst].live)
        return LR_EEXIST;
    memset(&m->in[inst], 0, sizeof m->in[inst]);
    m->in[inst].live = 1;
    m->in[inst].cls = cls;
    m->in[inst].pc = pc;
    return LR_OK;
}

static lr_status
m_remove(struct model *m, uint32_t inst)
{
    if (!m_live(m, inst))
        return LR_ENOENT;
    for (size_t i = m->n; i-- > 0;)
        if (m->r[i].inst == inst)
            m_drop(m, i);
    for (size_t i = 0; i < m->n; i++) /* its prefill legs end */
        if (m->r[i].pinst == inst)
            m->r[i].pinst = NONE;
    /* it is no one's alternative any more, even if added again later */
    for (size_t i = 0; i < m->n; i++)
        if (m->r[i].alt == inst) {
            m->r[i].alt = NONE;
            m->r[i].alt_cached = 0;
        }
    m->in[inst].live = 0;
    return LR_OK;
}

static lr_status
m_stats(struct model *m, uint32_t inst, const lr_engine_stats *s, int *changed)
{
    if (!(s->kv_use >= 0.0 && s->kv_use <= 1.0))
        return LR_EINVAL;
    if (!m_live(m, inst))
        return LR_ENOENT;
    struct minst *in = &m->in[inst];
    if (in->has_stats && s->scraped_ns < in->st.scraped_ns) {
        *changed = 0;
        return LR_OK;
    }
    in->st = *s;
    in->has_stats = 1;
    return LR_OK;
}

static lr_status
m_rtt(struct model *m, uint32_t inst, uint64_t rtt)
{
    if (rtt > LR_LOAD_MAX_RTT_NS)
        return LR_ERANGE;
    if (!m_live(m, inst))
        return LR_ENOENT;
    struct minst *in = &m->in[inst];
    if (!in->has_rtt)
        in->rtt = (double)rtt;
    else
        in->rtt += m->alpha * ((double)rtt - in->rtt);
    in->has_rtt = 1;
    return LR_OK;
}

/* ---- checks -------------------------------------------------------------------- */

static void
check_instance(struct run *r, uint32_t inst)
{
    const struct model *m = &r->m;
    lr_load_snapshot s;
    lr_load_snapshot_init(&s);
    lr_status st = lr_load_get(r->ld, inst, &s);
    if (!m_live(m, inst)) {
        if (st != LR_ENOENT)
            fail_msg("op %d: instance %u is not tracked, get returned %s",
                     r->op, inst, lr_status_name(st));
        return;
    }
    assert_st(st, LR_OK);
    uint64_t n = 0, nq = 0, pf = 0, qt = 0, dec = 0, kv = 0, pt = 0;
    for (size_t i = 0; i < m->n; i++) {
        const struct mreq *q = &m->r[i];
        if (q->inst != inst)
            continue;
        n++;
        kv += (uint64_t)q->prompt + q->out;
        pt += q->prompt;
        if (q->queued) {
            nq++;
            pf += q->split ? 0 : q->prompt - q->cached;
            qt += q->split ? 0 : q->prompt;
        } else {
            dec += q->out;
        }
    }
    for (size_t i = 0; i < m->n; i++) { /* prefill legs here */
        const struct mreq *q = &m->r[i];
        if (q->pinst != inst)
            continue;
        n++;
        nq++;
        pf += q->prompt - q->pcached;
        qt += q->prompt;
        kv += q->prompt;
        pt += q->prompt;
    }
    const struct minst *in = &m->in[inst];
    uint64_t want[] = {
        in->cls,
        (uint64_t)in->pc,
        n,
        nq,
        pf,
        qt,
        dec,
        kv,
        (uint64_t)in->has_stats,
        in->st.running,
        in->st.waiting,
        in->st.scraped_ns,
        (uint64_t)in->has_rtt,
        in->has_rtt ? (uint64_t)(in->rtt + 0.5) : 0,
        in->last_first_ns,
        nq ? in->queue_since_ns : 0,
        pt,
    };
    uint64_t got[] = {
        s.instance_class,
        (uint64_t)s.prefix_caching,
        s.inflight,
        s.queued,
        s.prefill_tokens,
        s.queued_tokens,
        s.decode_tokens,
        s.kv_tokens,
        (uint64_t)s.has_stats,
        s.running,
        s.waiting,
        s.scraped_ns,
        (uint64_t)s.has_rtt,
        s.rtt_ns,
        s.last_first_token_ns,
        s.queue_since_ns,
        s.prompt_tokens,
    };
    static const char *const names[] = {
        "instance_class", "prefix_caching", "inflight",
        "queued",         "prefill_tokens", "queued_tokens",
        "decode_tokens",  "kv_tokens",      "has_stats",
        "running",        "waiting",        "scraped_ns",
        "has_rtt",        "rtt_ns",         "last_first_token_ns",
        "queue_since_ns", "prompt_tokens",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (want[k] != got[k])
            fail_msg("op %d: instance %u: %s is %llu, model says %llu", r->op,
                     inst, names[k], (unsigned long long)got[k],
                     (unsigned long long)want[k]);
    if (!(s.kv_use == in->st.kv_use))
        fail_msg("op %d: instance %u: kv_use %g, model says %g", r->op, inst,
                 s.kv_use, in->st.kv_use);
    if (n == 0)
        assert_idle(r->ld, inst);
}

struct walk {
    const struct run *r;
    uint32_t inst;
    size_t n;
    uint64_t last_seq;
};

static int
walk_cb(void *ctx, const struct lr__req_view *v)
{
    struct walk *w = ctx;
    const struct model *m = &w->r->m;
    long i = m_find(m, v->id);
    if (i < 0 || m->r[i].inst != w->inst)
        fail_msg("op %d: instance %u lists request %llu, model disagrees",
                 w->r->op, w->inst, (unsigned long long)v->id);
    if (w->n > 0 && m->r[i].seq >= w->last_seq)
        fail_msg("op %d: instance %u lists request %llu out of order", w->r->op,
                 w->inst, (unsigned long long)v->id);
    w->last_seq = m->r[i].seq;
    w->n++;
    return 0;
}

static void
check_request(const struct run *r, const struct mreq *q)
{
    const struct model *m = &r->m;
    struct lr__req_view v;
    memset(&v, 0xa5, sizeof v);
    lr_status st = lr__load_req(r->ld, q->id, &v);
    if (st != LR_OK)
        fail_msg("op %d: request %llu in flight, lr__load_req says %s", r->op,
                 (unsigned long long)q->id, lr_status_name(st));
    assert_true(q->alt == NONE || m_live(m, q->alt));
    if (v.id != q->id || v.instance != q->inst || v.alt_instance != q->alt ||
        v.prompt_tokens != q->prompt || v.cached_tokens != q->cached ||
        v.alt_cached_tokens != q->alt_cached ||
        v.expected_output_tokens != q->out || v.dispatch_ns != q->dispatch_ns ||
        v.queued != q->queued || v.prefill_instance != q->pinst)
        fail_msg("op %d: request %llu: view (inst %u alt %u prompt %u cached "
                 "%u alt_cached %u out %u at %llu queued %d) != model (inst "
                 "%u alt %u prompt %u cached %u alt_cached %u out %u at %llu "
                 "queued %d)",
                 r->op, (unsigned long long)q->id, v.instance, v.alt_instance,
                 v.prompt_tokens, v.cached_tokens, v.alt_cached_tokens,
                 v.expected_output_tokens, (unsigned long long)v.dispatch_ns,
                 v.queued, q->inst, q->alt, q->prompt, q->cached, q->alt_cached,
                 q->out, (unsigned long long)q->dispatch_ns, q->queued);
    uint32_t inst = 12345;
    int32_t queued = -1;
    assert_st(lr_load_request(r->ld, q->id, &inst, &queued), LR_OK);
    assert_int_equal(inst, q->inst);
    assert_int_equal(queued, q->queued);
}

static void
check_all(struct run *r)
{
    const struct model *m = &r->m;
    assert_load_ok(r->ld);
    if (lr_load_inflight(r->ld) != m->n)
        fail_msg("op %d: lr_load_inflight %llu, model has %zu", r->op,
                 (unsigned long long)lr_load_inflight(r->ld), m->n);
    for (uint32_t i = 0; i <= m->n_inst; i++)
        check_instance(r, i);
    for (size_t i = 0; i < m->n; i++)
        check_request(r, &m->r[i]);
    size_t listed = 0;
    for (uint32_t i = 0; i < m->n_inst; i++) {
        struct walk w = { .r = r, .inst = i };
        lr__load_each_req(r->ld, i, walk_cb, &w);
        listed += w.n;
    }
    assert_int_equal(listed, m->n);
}

/* ---- random operations ------------------------------------------------------------ */

static uint64_t
pick_id(struct run *r)
{
    uint64_t c = tu_below(&r->rs, 20);
    if (c == 0)
        return tu_rand(&r->rs); /* almost surely unknown */
    if (c == 1)
        return UINT64_MAX - tu_below(&r->rs, 2);
    /* mostly an id in flight, when there is one */
    if (c < 15 && r->m.n > 0)
        return r->m.r[tu_below(&r->rs, r->m.n)].id;
    return tu_below(&r->rs, r->pool);
}

static uint32_t
pick_inst(struct run *r)
{
    uint64_t c = tu_below(&r->rs, 30);
    if (c == 0)
        return NONE;
    if (c == 1)
        return r->m.n_inst; /* past max_instances */
    if (c == 2)
        return (uint32_t)tu_rand(&r->rs);
    return (uint32_t)tu_below(&r->rs, r->m.n_inst);
}

static uint32_t
pick_tokens(struct run *r)
{
    uint64_t c = tu_below(&r->rs, 40);
    if (c == 0)
        return 0;
    if (c == 1)
        return UINT32_MAX - (uint32_t)tu_below(&r->rs, 3);
    return (uint32_t)tu_below(&r->rs, 5000);
}

/* cached tokens for a prompt: mostly valid, sometimes one too many */
static uint32_t
pick_cached(struct run *r, uint32_t prompt)
{
    uint64_t c = tu_below(&r->rs, 25);
    if (c == 0 && prompt < UINT32_MAX)
        return prompt + 1;
    if (c == 1)
        return prompt;
    return (uint32_t)tu_below(&r->rs, (uint64_t)prompt + 1);
}

/* Mostly a tracked instance, so that most calls get through. */
static uint32_t
pick_live_inst(struct run *r)
{
    if (tu_below(&r->rs, 8) != 0) {
        uint32_t start = (uint32_t)tu_below(&r->rs, r->m.n_inst);
        for (uint32_t k = 0; k < r->m.n_inst; k++) {
            uint32_t i = (start + k) % r->m.n_inst;
            if (r->m.in[i].live)
                return i;
        }
    }
    return pick_inst(r);
}

static uint64_t
pick_time(struct run *r)
{
    r->now += tu_below(&r->rs, 1000000);
    /* events may carry times out of order */
    if (tu_below(&r->rs, 8) == 0)
        return r->now - tu_below(&r->rs, 5000000);
    return r->now;
}

/* Run the call and the model; compare statuses and, when the model says
 * nothing changed, the digests. */
#define STEP(call, model_call)                                              \
    do {                                                                    \
        uint64_t d0_ = lr__load_digest(r->ld);                              \
        int changed_ = 1;                                                   \
        int *chg_ = &changed_;                                              \
        (void)chg_;                                                         \
        lr_status got_ = (call);                                            \
        lr_status want_ = (model_call);                                     \
        if (got_ != want_)                                                  \
            fail_msg("op %d: %s returned %s, model says %s", r->op, #call,  \
                     lr_status_name(got_), lr_status_name(want_));          \
        if ((want_ != LR_OK || !changed_) && lr__load_digest(r->ld) != d0_) \
            fail_msg("op %d: %s (%s) changed the tracker", r->op, #call,    \
                     lr_status_name(got_));                                 \
    } while (0)

static void
op_dispatch(struct run *r)
{
    lr_dispatch d;
    lr_dispatch_init(&d);
    d.request_id =
        tu_below(&r->rs, 4) == 0 ? tu_below(&r->rs, r->pool) : pick_id(r);
    d.instance = pick_live_inst(r);
    d.prompt_tokens = pick_tokens(r);
    d.cached_tokens = pick_cached(r, d.prompt_tokens);
    d.expected_output_tokens =
        tu_below(&r->rs, 5) == 0 ? 0 : pick_tokens(r) / 4;
    if (tu_below(&r->rs, 2) == 0) {
        d.alt_instance =
            tu_below(&r->rs, 20) == 0 ? d.instance : pick_live_inst(r);
        d.alt_cached_tokens = pick_cached(r, d.prompt_tokens);
    } else if (tu_below(&r->rs, 20) == 0) {
        d.alt_cached_tokens = pick_cached(r, d.prompt_tokens);
    }
    if (tu_below(&r->rs, 3) == 0) { /* split: sometimes onto itself */
        d.prefill_instance =
            tu_below(&r->rs, 20) == 0 ? d.instance : pick_live_inst(r);
        d.prefill_cached_tokens = pick_cached(r, d.prompt_tokens);
    } else if (tu_below(&r->rs, 20) == 0) {
        d.prefill_cached_tokens = pick_cached(r, d.prompt_tokens);
    }
    d.now_ns = pick_time(r);
    STEP(lr_load_dispatch(r->ld, &d), m_dispatch(&r->m, &d));
}

static void
op_prefill_done(struct run *r)
{
    uint64_t id = pick_id(r);
    uint64_t t = pick_time(r);
    STEP(lr_load_prefill_done(r->ld, id, t), m_prefill_done(&r->m, id, chg_));
}

static void
op_first_token(struct run *r)
{
    uint64_t id = pick_id(r);
    uint64_t t = pick_time(r);
    STEP(lr_load_first_token(r->ld, id, t), m_first_token(&r->m, id, t, chg_));
}

static void
op_end(struct run *r, int fail)
{
    uint64_t id = pick_id(r);
    uint64_t t = pick_time(r);
    uint32_t out = (uint32_t)tu_below(&r->rs, 2000);
    if (fail)
        STEP(lr_load_fail(r->ld, id), m_end(&r->m, id));
    else
        STEP(lr_load_complete(r->ld, id, out, t), m_end(&r->m, id));
}

static void
op_move(struct run *r)
{
    uint64_t id = pick_id(r);
    uint32_t to = pick_live_inst(r);
    long i = m_find(&r->m, id);
    uint32_t cached = pick_cached(r, i >= 0 ? r->m.r[i].prompt
                                            : (uint32_t)tu_below(&r->rs, 100));
    STEP(lr_load_move(r->ld, id, to, cached), m_move(&r->m, id, to, cached));
}

static void
op_add(struct run *r)
{
    uint32_t inst = pick_inst(r);
    uint64_t c = tu_below(&r->rs, 20);
    uint32_t cls = c == 0   ? LR_LOAD_MAX_CLASSES
                   : c == 1 ? UINT32_MAX
                            : (uint32_t)tu_below(&r->rs, LR_LOAD_MAX_CLASSES);
    c = tu_below(&r->rs, 20);
    int32_t pc = c == 0 ? 2 : c == 1 ? -1 : (int32_t)tu_below(&r->rs, 2);
    STEP(lr_load_add_instance(r->ld, inst, cls, pc),
         m_add(&r->m, inst, cls, pc));
}

static void
op_remove(struct run *r)
{
    uint32_t inst = pick_inst(r);
    STEP(lr_load_remove_instance(r->ld, inst), m_remove(&r->m, inst));
}

static void
op_stats(struct run *r)
{
    static const double kv[] = { 0.0, 1.0, 0.5, 0.125, -0.25, 1.5, NAN };
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.running = (uint32_t)tu_below(&r->rs, 100);
    s.waiting = (uint32_t)tu_below(&r->rs, 100);
    uint64_t c = tu_below(&r->rs, 10);
    s.kv_use = c < 7 ? kv[c] : (double)tu_below(&r->rs, 1001) / 1000.0;
    s.scraped_ns = pick_time(r);
    uint32_t inst = pick_inst(r);
    /* a scrape as old as the one held replaces it */
    if (m_live(&r->m, inst) && tu_below(&r->rs, 4) == 0)
        s.scraped_ns = r->m.in[inst].st.scraped_ns;
    STEP(lr_load_set_stats(r->ld, inst, &s), m_stats(&r->m, inst, &s, chg_));
}

static void
op_rtt(struct run *r)
{
    uint64_t c = tu_below(&r->rs, 12);
    uint64_t rtt = c == 0   ? LR_LOAD_MAX_RTT_NS
                   : c == 1 ? LR_LOAD_MAX_RTT_NS + 1
                   : c == 2 ? UINT64_MAX
                   : c == 3 ? 0
                            : tu_below(&r->rs, 50000000);
    uint32_t inst = pick_inst(r);
    STEP(lr_load_observe_rtt(r->ld, inst, rtt), m_rtt(&r->m, inst, rtt));
}

static void
assert_all_zero(struct run *r)
{
    assert_int_equal(lr_load_inflight(r->ld), 0);
    for (uint32_t i = 0; i < r->m.n_inst; i++)
        if (r->m.in[i].live)
            assert_idle(r->ld, i);
}

static void
run_diff(uint64_t seed, uint32_t n_inst, uint32_t max_req, double alpha,
         int ops)
{
    struct run run;
    struct run *r = &run;
    memset(r, 0, sizeof *r);
    r->rs = seed;
    r->now = SEC;
    r->pool = (uint64_t)max_req * 2 + 4;
    r->m.n_inst = n_inst;
    r->m.max_req = max_req;
    r->m.alpha = alpha;
    r->m.r = calloc(max_req + 1, sizeof *r->m.r);
    assert_non_null(r->m.r);
    lr_load_options o;
    lr_load_options_init(&o);
    o.max_instances = n_inst;
    o.max_requests = max_req;
    o.rtt_alpha = alpha;
    assert_st(lr_load_create(&o, &r->ld), LR_OK);
    for (uint32_t i = 0; i < n_inst; i++) {
        if (i > 0 && tu_below(&r->rs, 4) == 0)
            continue;
        uint32_t cls = (uint32_t)tu_below(&r->rs, 4);
        int32_t pc = (int32_t)tu_below(&r->rs, 2);
        assert_st(lr_load_add_instance(r->ld, i, cls, pc), LR_OK);
        assert_st(m_add(&r->m, i, cls, pc), LR_OK);
    }

    for (r->op = 0; r->op < ops; r->op++) {
        uint64_t which = tu_below(&r->rs, 106);
        if (which >= 100)
            op_prefill_done(r);
        else if (which < 30)
            op_dispatch(r);
        else if (which < 47)
            op_first_token(r);
        else if (which < 57)
            op_end(r, 0);
        else if (which < 64)
            op_end(r, 1);
        else if (which < 76)
            op_move(r);
        else if (which < 81)
            op_add(r);
        else if (which < 83)
            op_remove(r);
        else if (which < 89)
            op_stats(r);
        else if (which < 95)
            op_rtt(r);
        else
            /* an id that was never dispatched, or ended long ago */
            switch (tu_below(&r->rs, 4)) {
            case 0: {
                uint64_t id = tu_rand(&r->rs) | (1ull << 63);
                STEP(lr_load_first_token(r->ld, id, r->now),
                     m_first_token(&r->m, id, r->now, chg_));
                break;
            }
            case 1: {
                uint64_t id = r->pool + tu_below(&r->rs, 1000);
                STEP(lr_load_complete(r->ld, id, 1, r->now), m_end(&r->m, id));
                break;
            }
            case 2: {
                uint64_t id = r->pool + tu_below(&r->rs, 1000);
                STEP(lr_load_fail(r->ld, id), m_end(&r->m, id));
                break;
            }
            default: {
                uint64_t id = r->pool + tu_below(&r->rs, 1000);
                STEP(lr_load_move(r->ld, id, 0, 0), m_move(&r->m, id, 0, 0));
                break;
            }
            }
        check_all(r);
        if (r->m.n == 0)
            assert_all_zero(r);
    }

    /* end everything, in random order and ways */
    while (r->m.n > 0) {
        size_t i = (size_t)tu_below(&r->rs, r->m.n);
        uint64_t id = r->m.r[i].id;
        if (tu_below(&r->rs, 2) == 0)
            STEP(lr_load_first_token(r->ld, id, r->now),
                 m_first_token(&r->m, id, r->now, chg_));
        if (tu_below(&r->rs, 2) == 0)
            STEP(lr_load_complete(r->ld, id, 0, r->now), m_end(&r->m, id));
        else
            STEP(lr_load_fail(r->ld, id), m_end(&r->m, id));
        check_all(r);
    }
    assert_all_zero(r);
    assert_load_ok(r->ld);
    lr_load_destroy(r->ld);
    free(r->m.r);
}

static void
diff_small_table(void **state)
{
    (void)state;
    /* 8 requests: the id table has 16 slots, so probes collide and the
     * request limit is hit all the time */
    uint64_t seed = tu_seed("load diff, 4 instances, 8 requests", 0x10ad0001);
    run_diff(seed, 4, 8, 0.3, 6000);
}

static void
diff_medium(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("load diff, 8 instances, 64 requests", 0x10ad0002);
    run_diff(seed, MAXINST, 64, 0.5, 6000);
}

static void
diff_many_seeds(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("load diff, 12 seeds", 0x10ad0003);
    static const uint32_t maxreq[] = { 1, 2, 5, 16, 33, 200 };
    static const double alphas[] = { 1.0, 0.3, 0.01 };
    for (uint64_t i = 0; i < 12; i++)
        run_diff(seed + i, 1 + (uint32_t)(i % MAXINST), maxreq[i % 6],
                 alphas[i % 3], 2000);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(diff_small_table),
        cmocka_unit_test(diff_medium),
        cmocka_unit_test(diff_many_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
