/* The router's view of the other sources of its state: engines' KV-event
 * streams in sequence, and the other gateway replicas' deltas and load
 * gauges.
 *
 * KV-event sources
 * ----------------
 * vLLM numbers its batches 0, 1, 2, ... per engine (the ZMQ message's
 * second frame) and keeps the last ones on a replay socket. A router
 * applies one engine's batches in order, each once:
 *
 *   no batch applied yet       FIRST: applied, whatever its number
 *   seq == next                APPLIED (a replay that fills a gap too)
 *   seq >  next                GAP: refused (LR_EGAP); `next` stays, so
 *                              the host replays from it and later live
 *                              batches are refused until the replay
 *                              reaches them
 *   seq <  next, ts <= last    DUPLICATE: already applied, ignored
 *   seq <  next, ts >  last    RESTART: the engine came back and counts
 *                              from 0 again; its routes are dropped first
 *                              (what it cached died with it). A restart
 *                              first seen at seq > 0 lost the batches
 *                              before: after the drop, a gap from 0.
 *
 * A replay interleaves with the live stream, so both old numbers (already
 * applied) and new ones (not yet reachable) arrive: the first are
 * duplicates, the second gaps. Batches are never applied out of order: a
 * removal must see the store it removes.
 *
 * Peers
 * -----
 * A slot per replica that sent a delta or a gauge: the delta watermark
 * (the journal mark of the last delta applied, see lr__peers_delta_check)
 * and its latest gauge. A gauge is the peer's own in-flight counters per
 * instance; it lives ttl_ns from its arrival (the importer's clock: peers'
 * clocks are not comparable) and is replaced by a newer one. `sum` holds
 * the live gauges summed per instance, so route() adds one row per
 * candidate; until a sweep drops an expired gauge, the sum is rebuilt on
 * the fly from the live ones (lr__peers_add's slow path).
 *
 * Gauge wire format, version 1, integers little-endian:
 *
 *   off  size  field
 *     0     4  magic "LRGA"
 *     4     2  version (1)
 *     6     2  flags (0)
 *     8     8  origin replica id (non-zero)
 *    16     8  sequence: the exporter's gauge count, from 1
 *    24     4  n entries
 *    28     4  reserved (0)
 *    32        n x { varint id, strictly ascending; varint inflight,
 *                    queued, prefill, queued_tokens, prompt, decode, kv }
 *   end-8   8  XXH3_64bits_withSeed(bytes [0, end-8), "LRGAUGE1"), or
 *              with a peer key SipHash-2-4(key, bytes [0, end-8))
 *
 * Varints are unsigned LEB128 (wire.h). Only instances with a request in
 * flight are sent: a missing id means zero. */
#include <math.h>

#include "common/lr_hash.h"
#include "common/wire.h"
#include "router/replica.h"

/* ---- KV-event sources ------------------------------------------------------ */

int32_t
lr__kvsrc_judge(struct lr__kvsrc *k, uint64_t seq, double ts)
{
    if (!k->has)
        return LR_KV_SEQ_FIRST;
    if (seq == k->next)
        return LR_KV_SEQ_APPLIED;
    if (seq > k->next) {
        if (!k->gap)
            k->gaps++;
        k->gap = 1;
        return LR_KV_SEQ_GAP;
    }
    if (isnan(ts))
        return LR_KV_SEQ_NONE;
    if (ts > k->last_ts) {
        /* a restart first seen past 0 lost the batches before it */
        k->restarts++;
        return LR_KV_SEQ_RESTART;
    }
    k->dups++;
    return LR_KV_SEQ_DUPLICATE;
}

bool
lr__kvsrc_window(struct lr__kvsrc *k, double ts, uint64_t now_ns, double skew_s)
{
    if (!k->has)
        return true;
    double since =
        now_ns > k->last_at_ns ? (double)(now_ns - k->last_at_ns) / 1e9 : 0;
    if (ts <= k->last_ts + since + skew_s) {
        k->has_ahead = 0; /* an honest value breaks a pair */
        return true;
    }
    if (k->has_ahead && ts >= k->ahead_ts && ts - k->ahead_ts <= skew_s) {
        k->has_ahead = 0; /* the second of a pair: the clock stepped */
        return true;
    }
    k->ahead_ts = ts;
    k->has_ahead = 1;
    return false;
}

void
lr__kvsrc_applied(struct lr__kvsrc *k, uint64_t seq, double ts, uint64_t now_ns)
{
    k->has = 1;
    k->gap = 0;
    k->next = seq + 1;
    if (!isnan(ts))
        k->last_ts = ts;
    k->last_at_ns = now_ns;
    k->batches++;
}

void
lr__kvsrc_forget(struct lr__kvsrc *k)
{
    k->has = 0;
    k->gap = 0;
    k->next = 0;
    k->last_ts = 0;
    k->last_at_ns = 0;
    k->has_ahead = 0;
}

/* ---- peers ----------------------------------------------------------------- */

#define GAUGE_MAGIC "LRGA"
#define GAUGE_VERSION 1
#define GAUGE_HEADER 32
#define GAUGE_SUM LR__FRAME_SUM
#define GAUGE_FIELDS 8 /* varints per entry: id and seven counters */
#define LR_SEED_GAUGE 0x4c52474155474531ull /* "LRGAUGE1" */

lr_status
lr__peers_init(struct lr__peers *ps, struct lr__mem *m, uint32_t max_peers,
               uint32_t max_inst, uint64_t self, uint64_t ttl_ns)
{
    memset(ps, 0, sizeof *ps);
    ps->self = self;
    ps->ttl_ns = ttl_ns;
    ps->max = max_peers;
    ps->max_inst = max_inst;
    ps->next_expire = UINT64_MAX;
    ps->p = lr__calloc(m, max_peers, sizeof *ps->p);
    ps->sum = lr__calloc(m, max_inst, sizeof *ps->sum);
    if (ps->p == NULL || ps->sum == NULL) {
        lr__peers_free(ps, m);
        return LR_ENOMEM;
    }
    return LR_OK;
}

void
lr__peers_free(struct lr__peers *ps, struct lr__mem *m)
{
    if (ps->p != NULL)
        for (uint32_t i = 0; i < ps->max; i++)
            lr__free(m, ps->p[i].g,
                     (size_t)ps->p[i].cap_g * sizeof *ps->p[i].g);
    lr__free(m, ps->p, (size_t)ps->max * sizeof *ps->p);
    lr__free(m, ps->sum, (size_t)ps->max_inst * sizeof *ps->sum);
    lr__free(m, ps->tmp, (size_t)ps->cap_tmp * sizeof *ps->tmp);
    ps->p = NULL;
    ps->sum = NULL;
    ps->tmp = NULL;
    ps->cap_tmp = 0;
}

static inline uint32_t
sat32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static inline uint64_t
sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Add one gauge entry to a sum (saturating: untrusted counts); whether
 * a field saturated. */
static bool
fold(struct lr__gauge *s, const struct lr__gauge *e)
{
    struct lr__gauge o = *s;
    s->inflight = sat32((uint64_t)s->inflight + e->inflight);
    s->queued = sat32((uint64_t)s->queued + e->queued);
    s->prefill = sat_add(s->prefill, e->prefill);
    s->queued_tokens = sat_add(s->queued_tokens, e->queued_tokens);
    s->prompt = sat_add(s->prompt, e->prompt);
    s->decode = sat_add(s->decode, e->decode);
    s->kv = sat_add(s->kv, e->kv);
    return s->inflight - o.inflight != e->inflight ||
           s->queued - o.queued != e->queued ||
           s->prefill - o.prefill != e->prefill ||
           s->queued_tokens - o.queued_tokens != e->queued_tokens ||
           s->prompt - o.prompt != e->prompt ||
           s->decode - o.decode != e->decode || s->kv - o.kv != e->kv;
}

/* Take back what fold() added (exact while no sum saturated). */
static void
unfold(struct lr__gauge *s, const struct lr__gauge *e)
{
    s->inflight -= e->inflight;
    s->queued -= e->queued;
    s->prefill -= e->prefill;
    s->queued_tokens -= e->queued_tokens;
    s->prompt -= e->prompt;
    s->decode -= e->decode;
    s->kv -= e->kv;
}

static bool
gauge_live(const struct lr__peer *p, uint64_t now_ns)
{
    return p->id != 0 && p->has_gauge && now_ns < p->gexpire_ns;
}

/* The next expiry, from the gauges held. */
static void
reexpire(struct lr__peers *ps)
{
    ps->next_expire = UINT64_MAX;
    for (uint32_t i = 0; i < ps->max; i++) {
        const struct lr__peer *p = &ps->p[i];
        if (p->id != 0 && p->has_gauge && p->gexpire_ns < ps->next_expire)
            ps->next_expire = p->gexpire_ns;
    }
}

/* Rebuild the sums and the next expiry from the gauges held, and tell
 * moved() that any instance may have changed. */
static void
resum(struct lr__peers *ps)
{
    memset(ps->sum, 0, (size_t)ps->max_inst * sizeof *ps->sum);
    ps->sum_sat = false;
    for (uint32_t i = 0; i < ps->max; i++) {
        const struct lr__peer *p = &ps->p[i];
        if (p->id == 0 || !p->has_gauge)
            continue;
        for (uint32_t j = 0; j < p->n_g; j++)
            if (p->g[j].id < ps->max_inst &&
                fold(&ps->sum[p->g[j].id], &p->g[j]))
                ps->sum_sat = true;
    }
    reexpire(ps);
    if (ps->moved != NULL)
        ps->moved(ps->moved_ctx, LR_INSTANCE_NONE);
}

/* Add (or take back) n gauge entries to the sums; a saturated sum makes
 * the caller rebuild them (ps->sum_sat). */
static void
sum_entries(struct lr__peers *ps, const struct lr__gauge *e, uint32_t n,
            bool add)
{
    if (ps->sum_sat)
        return; /* rebuilt at the end */
    for (uint32_t j = 0; j < n; j++) {
        if (e[j].id >= ps->max_inst)
            continue;
        if (!add)
            unfold(&ps->sum[e[j].id], &e[j]);
        else if (fold(&ps->sum[e[j].id], &e[j]))
            ps->sum_sat = true;
    }
}

/* Tell moved() of the instances of n entries (their sums are final). */
static void
moved_entries(const struct lr__peers *ps, const struct lr__gauge *e, uint32_t n)
{
    if (ps->moved == NULL || ps->sum_sat)
        return; /* resum() tells of every instance */
    for (uint32_t j = 0; j < n; j++)
        ps->moved(ps->moved_ctx, e[j].id);
}

/* moved_entries() of two gauges of one peer (ascending ids), an
 * instance in both told once. */
static void
moved_union(const struct lr__peers *ps, const struct lr__gauge *a, uint32_t na,
            const struct lr__gauge *b, uint32_t nb)
{
    if (ps->moved == NULL || ps->sum_sat)
        return;
    uint32_t i = 0, j = 0;
    while (i < na || j < nb) {
        uint32_t id;
        if (j == nb || (i < na && a[i].id < b[j].id)) {
            id = a[i++].id;
        } else {
            id = b[j].id;
            i += i < na && a[i].id == id;
            j++;
        }
        ps->moved(ps->moved_ctx, id);
    }
}

/* A peer's gauge goes (p->g keeps its entries for moved_entries()). */
static void
drop_gauge(struct lr__peers *ps, struct lr__peer *p)
{
    if (!p->has_gauge)
        return;
    sum_entries(ps, p->g, p->n_g, false);
    p->has_gauge = 0;
}

/* Entry of `id` in a peer's gauge (ascending ids), or NULL. */
static const struct lr__gauge *
gauge_find(const struct lr__peer *p, uint32_t id)
{
    uint32_t lo = LR__LOWER_BOUND(struct lr__gauge, id, p->g, 0, p->n_g, id);
    return lo < p->n_g && p->g[lo].id == id ? &p->g[lo] : NULL;
}

void
lr__peers_add(const struct lr__peers *ps, uint64_t now_ns, lr_candidate *c)
{
    if (ps->p == NULL || ps->next_expire == UINT64_MAX ||
        c->instance >= ps->max_inst)
        return;
    struct lr__gauge s;
    if (now_ns < ps->next_expire) {
        s = ps->sum[c->instance];
    } else { /* a gauge expired and no sweep ran since: the live ones */
        memset(&s, 0, sizeof s);
        for (uint32_t i = 0; i < ps->max; i++) {
            const struct lr__peer *p = &ps->p[i];
            const struct lr__gauge *e =
                gauge_live(p, now_ns) ? gauge_find(p, c->instance) : NULL;
            if (e != NULL)
                fold(&s, e);
        }
    }
    c->inflight = sat32((uint64_t)c->inflight + s.inflight);
    c->queued = sat32((uint64_t)c->queued + s.queued);
    c->prefill_tokens = sat_add(c->prefill_tokens, s.prefill);
    c->queued_tokens = sat_add(c->queued_tokens, s.queued_tokens);
    c->prompt_tokens = sat_add(c->prompt_tokens, s.prompt);
    c->decode_tokens = sat_add(c->decode_tokens, s.decode);
    c->kv_tokens = sat_add(c->kv_tokens, s.kv);
}

/* Drop the gauges expired at now_ns, but `keep`'s: their entries leave
 * the sums, then moved() hears of them. The caller settles sum_sat. */
static void
sweep(struct lr__peers *ps, uint64_t now_ns, const struct lr__peer *keep)
{
    for (uint32_t i = 0; i < ps->max; i++) {
        struct lr__peer *p = &ps->p[i];
        if (p != keep && p->id != 0 && p->has_gauge &&
            now_ns >= p->gexpire_ns) {
            drop_gauge(ps, p);
            ps->expired++;
        }
    }
    reexpire(ps);
    for (uint32_t i = 0; i < ps->max; i++) {
        struct lr__peer *p = &ps->p[i];
        if (p != keep && p->id != 0 && !p->has_gauge && p->n_g > 0) {
            moved_entries(ps, p->g, p->n_g);
            p->n_g = 0;
        }
    }
}

void
lr__peers_expire(struct lr__peers *ps, uint64_t now_ns)
{
    if (ps->p == NULL || now_ns < ps->next_expire)
        return;
    sweep(ps, now_ns, NULL);
    if (ps->sum_sat)
        resum(ps);
}

uint64_t
lr__peers_live(const struct lr__peers *ps, uint64_t now_ns)
{
    uint64_t n = 0;
    for (uint32_t i = 0; ps->p != NULL && i < ps->max; i++)
        n += gauge_live(&ps->p[i], now_ns);
    return n;
}

static struct lr__peer *
peer_find(struct lr__peers *ps, uint64_t id)
{
    for (uint32_t i = 0; i < ps->max; i++)
        if (ps->p[i].id == id)
            return &ps->p[i];
    return NULL;
}

/* A slot for a new peer: a free one; else the one heard from least
 * recently among those without a live gauge (its delta watermark goes: at
 * worst a replayed delta of it is applied again); else, for a newcomer
 * that brings a delta (`delta`), the live peer with the least evidence:
 * one that never sent a delta, the latest of those to arrive. A peer that
 * sent deltas keeps its slot against every newcomer, and a newcomer with
 * gauges alone takes no live peer's: gauges from many made-up origins
 * cannot lock out a replica that shares deltas (docs/scale.md says what a
 * peer key adds). NULL: no slot. */
static struct lr__peer *
peer_slot(struct lr__peers *ps, uint64_t now_ns, bool delta)
{
    struct lr__peer *dead = NULL, *weak = NULL;
    for (uint32_t i = 0; i < ps->max; i++) {
        struct lr__peer *p = &ps->p[i];
        if (p->id == 0)
            return p;
        if (!gauge_live(p, now_ns)) {
            if (dead == NULL || p->seen_ns < dead->seen_ns)
                dead = p;
        } else if (!p->has_delta &&
                   (weak == NULL || p->first_ns > weak->first_ns)) {
            weak = p;
        }
    }
    return dead != NULL ? dead : delta ? weak : NULL;
}

/* Take slot p for peer id (p from peer_slot) at now_ns. */
static void
peer_claim(struct lr__peers *ps, struct lr__peer *p, uint64_t id,
           uint64_t now_ns)
{
    bool had_gauge = p->id != 0 && p->has_gauge;
    p->id = id;
    p->mark = 0;
    p->has_mark = 0;
    p->has_last = 0;
    p->has_delta = 0;
    p->delta_gap = 0;
    drop_gauge(ps, p);
    if (had_gauge) {
        reexpire(ps);
        moved_entries(ps, p->g, p->n_g);
        if (ps->sum_sat)
            resum(ps);
    }
    p->n_g = 0;
    p->gseq = 0;
    p->first_ns = now_ns;
}

lr_status
lr__peers_delta_check(struct lr__peers *ps, uint64_t origin, uint64_t since,
                      uint64_t mark, uint64_t now_ns, bool *apply)
{
    *apply = true;
    if (origin == 0)
        return LR_OK;
    if (origin == ps->self) { /* our own, back from the bus */
        *apply = false;
        return LR_OK;
    }
    struct lr__peer *p = peer_find(ps, origin);
    if (p == NULL)
        return peer_slot(ps, now_ns, true) != NULL ? LR_OK : LR_ELIMIT;
    *apply = !(p->has_last && p->last_since == since && p->last_mark == mark);
    return LR_OK;
}

void
lr__peers_delta_done(struct lr__peers *ps, uint64_t origin, uint64_t since,
                     uint64_t mark, uint64_t now_ns)
{
    if (origin == 0 || origin == ps->self)
        return;
    struct lr__peer *p = peer_find(ps, origin);
    if (p == NULL) {
        p = peer_slot(ps, now_ns, true);
        if (LR_NEVER(p == NULL)) /* checked by lr__peers_delta_check */
            return;
        peer_claim(ps, p, origin, now_ns);
    }
    if (since == 0) {
        p->delta_gap = 0;
        p->mark = mark;
    } else {
        if (p->has_mark && since > p->mark) {
            p->delta_gap = 1; /* deltas (p->mark, since] never arrived */
            ps->delta_gaps++;
        }
        if (!p->has_mark || mark > p->mark)
            p->mark = mark;
    }
    p->has_mark = 1;
    p->last_since = since;
    p->last_mark = mark;
    p->has_last = 1;
    p->has_delta = 1;
    p->seen_ns = now_ns;
}

uint32_t
lr__peers_marks(const struct lr__peers *ps, uint64_t *ids, uint64_t *marks,
                uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; ps->p != NULL && i < ps->max; i++) {
        const struct lr__peer *p = &ps->p[i];
        if (p->id == 0 || !p->has_mark)
            continue;
        if (n < cap) {
            ids[n] = p->id;
            marks[n] = p->mark;
        }
        n++;
    }
    return n;
}

lr_status
lr__peers_set_mark(struct lr__peers *ps, uint64_t id, uint64_t mark)
{
    LR_RETURN_IF(id == 0 || id == ps->self, LR_ECORRUPT);
    struct lr__peer *p = peer_find(ps, id);
    if (p == NULL) {
        p = peer_slot(ps, 0, true);
        LR_RETURN_IF(p == NULL, LR_ELIMIT);
        peer_claim(ps, p, id, 0);
    }
    p->mark = mark; /* finds losses; skips nothing (no last delta) */
    p->has_mark = 1;
    p->has_delta = 1;
    return LR_OK;
}

/* ---- gauges ---------------------------------------------------------------- */

static void
write_entry(struct lr__wr *w, const struct lr__gauge *e)
{
    lr__wr_var(w, e->id);
    lr__wr_var(w, e->inflight);
    lr__wr_var(w, e->queued);
    lr__wr_var(w, e->prefill);
    lr__wr_var(w, e->queued_tokens);
    lr__wr_var(w, e->prompt);
    lr__wr_var(w, e->decode);
    lr__wr_var(w, e->kv);
}

/* An instance's load counters into *v, if it is tracked and has a request
 * in flight (only those are sent). */
static bool
counters(const lr_load *ld, uint32_t id, lr_candidate *v)
{
    return lr__load_fill(ld, id, 0, 0, UINT64_MAX, 0, v) == LR_OK &&
           v->inflight > 0;
}

/* What write_gauge writes: the message for these entries. */
struct gauge_out {
    const struct lr__peers *ps;
    uint64_t seq;
    const lr_load *ld;
    const uint32_t *ids;
    uint32_t n, n_e;
};

/* The frame's body (lr__frame_blob writes its head and sum). */
static void
write_gauge(struct lr__wr *w, const void *arg)
{
    const struct gauge_out *a = arg;
    const struct lr__peers *ps = a->ps;
    uint64_t seq = a->seq;
    const lr_load *ld = a->ld;
    const uint32_t *ids = a->ids;
    uint32_t n = a->n, n_e = a->n_e;
    lr__wr_u16(w, 0);
    lr__wr_u64(w, ps->self);
    lr__wr_u64(w, seq);
    lr__wr_u32(w, n_e);
    lr__wr_u32(w, 0);
    for (uint32_t k = 0; k < n; k++) {
        lr_candidate v;
        if (!counters(ld, ids[k], &v))
            continue;
        struct lr__gauge e = { .id = ids[k],
                               .inflight = v.inflight,
                               .queued = v.queued,
                               .prefill = v.prefill_tokens,
                               .queued_tokens = v.queued_tokens,
                               .prompt = v.prompt_tokens,
                               .decode = v.decode_tokens,
                               .kv = v.kv_tokens };
        write_entry(w, &e);
    }
}

lr_status
lr__gauges_export(struct lr__peers *ps, const struct lr__mem *m,
                  const lr_load *ld, const uint32_t *ids, uint32_t n,
                  lr_blob **out)
{
    LR_RETURN_IF(ps->self == 0, LR_ESTATE);
    uint32_t n_e = 0;
    for (uint32_t k = 0; k < n; k++) {
        lr_candidate v;
        n_e += counters(ld, ids[k], &v);
    }
    uint64_t seq = ps->gseq_out + 1;
    struct gauge_out a = { ps, seq, ld, ids, n, n_e };
    LR_TRY(lr__frame_blob(m, GAUGE_MAGIC, GAUGE_VERSION, LR_SEED_GAUGE,
                          write_gauge, &a, out));
    lr__frame_seal(lr__blob_bytes(*out), lr_blob_size(*out), lr__peers_key(ps));
    ps->gseq_out = seq;
    return LR_OK;
}

struct gauge_msg {
    uint64_t origin, seq;
    uint32_t n;
    struct lr__rd body; /* at the first entry */
};

static lr_status
gauge_header(const uint8_t *buf, size_t len, const uint8_t *key,
             struct gauge_msg *g)
{
    LR_TRY(lr__frame_check(buf, len, GAUGE_HEADER, GAUGE_MAGIC, GAUGE_VERSION,
                           LR_SEED_GAUGE, key));
    LR_RETURN_IF((lr__get_u16(buf + LR__FRAME_OFF_FLAGS) & ~LR__FRAME_KEYED) !=
                         0 ||
                     lr__get_u32(buf + 28) != 0,
                 LR_ECORRUPT);
    g->origin = lr__get_u64(buf + 8);
    g->seq = lr__get_u64(buf + 16);
    g->n = lr__get_u32(buf + 24);
    LR_RETURN_IF(g->origin == 0 || g->seq == 0, LR_ECORRUPT);
    size_t body = len - GAUGE_HEADER - GAUGE_SUM;
    LR_RETURN_IF(g->n > body / GAUGE_FIELDS, LR_ECORRUPT);
    g->body.p = buf + GAUGE_HEADER;
    g->body.end = buf + len - GAUGE_SUM;
    g->body.bad = false;
    return LR_OK;
}

/* Read the entries: every one checked, the known ones kept in out (room
 * for g->n). *n_out: how many were kept. */
static lr_status
gauge_entries(struct gauge_msg *g, struct lr__gauge *out, uint32_t *n_out,
              bool (*known)(const void *, uint32_t), const void *ctx)
{
    struct lr__rd *r = &g->body;
    uint64_t prev = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        struct lr__gauge e;
        uint64_t id = lr__rd_var(r);
        e.inflight = lr__rd_var32(r);
        e.queued = lr__rd_var32(r);
        e.prefill = lr__rd_var(r);
        e.queued_tokens = lr__rd_var(r);
        e.prompt = lr__rd_var(r);
        e.decode = lr__rd_var(r);
        e.kv = lr__rd_var(r);
        LR_RETURN_IF(r->bad || id >= LR_INSTANCE_NONE, LR_ECORRUPT);
        LR_RETURN_IF(i > 0 && id <= prev, LR_ECORRUPT);
        LR_RETURN_IF(e.queued > e.inflight, LR_ECORRUPT);
        prev = id;
        e.id = (uint32_t)id;
        if (known != NULL && !known(ctx, e.id))
            continue;
        if (out != NULL)
            out[kept] = e;
        kept++;
    }
    LR_RETURN_IF(r->p != r->end, LR_ECORRUPT);
    *n_out = kept;
    return LR_OK;
}

lr_status
lr__gauges_import(struct lr__peers *ps, struct lr__mem *m, const uint8_t *buf,
                  size_t len, uint64_t now_ns,
                  bool (*known)(const void *, uint32_t), const void *ctx)
{
    struct gauge_msg g;
    LR_TRY(gauge_header(buf, len, lr__peers_key(ps), &g));
    struct gauge_msg pass1 = g;
    uint32_t kept;
    LR_TRY(gauge_entries(&pass1, NULL, &kept, known, ctx));
    if (g.origin == ps->self) {
        ps->skipped++;
        return LR_OK;
    }
    struct lr__peer *p = peer_find(ps, g.origin);
    if (p != NULL && gauge_live(p, now_ns) && g.seq <= p->gseq) {
        ps->skipped++; /* an older or the same gauge */
        return LR_OK;
    }
    struct lr__peer *slot = p != NULL ? p : peer_slot(ps, now_ns, false);
    LR_RETURN_IF(slot == NULL, LR_ELIMIT);
    /* the entries into the spare array (grown first: all or nothing),
     * which then trades places with the peer's */
    if (kept > ps->cap_tmp) {
        struct lr__gauge *arr = lr__alloc(m, (size_t)kept * sizeof *arr);
        LR_RETURN_IF(arr == NULL, LR_ENOMEM);
        lr__free(m, ps->tmp, (size_t)ps->cap_tmp * sizeof *ps->tmp);
        ps->tmp = arr;
        ps->cap_tmp = kept;
    }
    if (p == NULL)
        peer_claim(ps, slot, g.origin, now_ns);
    uint32_t n_new;
    (void)gauge_entries(&g, ps->tmp, &n_new, known, ctx); /* pass 1 */
    drop_gauge(ps, slot);
    sum_entries(ps, ps->tmp, n_new, true);
    struct lr__gauge *old = slot->g;
    uint32_t n_old = slot->n_g, cap_old = slot->cap_g;
    slot->g = ps->tmp;
    slot->n_g = n_new;
    slot->cap_g = ps->cap_tmp;
    ps->tmp = old;
    ps->cap_tmp = cap_old;
    slot->has_gauge = 1;
    slot->gseq = g.seq;
    slot->gexpire_ns = sat_add(now_ns, ps->ttl_ns);
    slot->seen_ns = now_ns;
    ps->imported++;
    sweep(ps, now_ns, slot); /* the others that expired meanwhile */
    moved_union(ps, old, n_old, slot->g, slot->n_g);
    if (ps->sum_sat)
        resum(ps);
    return LR_OK;
}

uint64_t
lr__peers_digest(const struct lr__peers *ps, uint64_t d)
{
    for (uint32_t i = 0; ps->p != NULL && i < ps->max; i++) {
        const struct lr__peer *p = &ps->p[i];
        if (p->id == 0)
            continue;
        d = lr__digest_mix(d, p->id);
        d = lr__digest_mix(d, p->mark ^ ((uint64_t)p->has_mark << 62) ^
                                  ((uint64_t)p->delta_gap << 61) ^
                                  ((uint64_t)p->has_delta << 60));
        d = lr__digest_mix(d, p->has_last ? p->last_since ^ ~p->last_mark : 0);
        d = lr__digest_mix(d, p->first_ns);
        d = lr__digest_mix(d, p->has_gauge ? p->gseq ^ p->gexpire_ns : 0);
        for (uint32_t j = 0; p->has_gauge && j < p->n_g; j++)
            d = lr__digest_mix(d, lr__hash(&p->g[j], sizeof p->g[j], j));
    }
    return d; /* counters left out: what was skipped changed nothing */
}
