/* LoRA adapter residency per instance (adapters.h). Tables are small (at
 * most LR_ROUTER_MAX_ADAPTERS entries, kept in recency order), so every
 * operation is a scan. */
#include "parts/adapters.h"

#include "common/lr_hash.h"
#include "libroute/lr_router.h"

#define INST_BYTES               \
    (sizeof(struct lr__adinst) + \
     (size_t)LR_ROUTER_MAX_ADAPTERS * sizeof(struct lr__adres))

/* Adapters followed at once on t: its slots, or a guess when unknown. */
static uint32_t
limit(const struct lr__adinst *t)
{
    return t->max > 0 ? t->max : LR__ADAPTERS_UNKNOWN_SLOTS;
}

lr_status
lr__adapters_setup(struct lr__adapters *a, struct lr__mem *m, uint32_t max_inst,
                   uint32_t max_req)
{
    a->inst = lr__calloc(m, max_inst, sizeof *a->inst);
    a->req = lr__calloc(m, max_req, sizeof *a->req);
    if (a->inst == NULL || a->req == NULL) {
        lr__free(m, a->inst, (size_t)max_inst * sizeof *a->inst);
        lr__free(m, a->req, (size_t)max_req * sizeof *a->req);
        a->inst = NULL;
        a->req = NULL;
        return LR_ENOMEM;
    }
    a->max_inst = max_inst;
    a->max_req = max_req;
    return LR_OK;
}

void
lr__adapters_free(struct lr__adapters *a, struct lr__mem *m)
{
    if (a->inst != NULL)
        for (uint32_t id = 0; id < a->max_inst; id++)
            lr__adapters_remove(a, m, id);
    lr__free(m, a->inst, (size_t)a->max_inst * sizeof *a->inst);
    lr__free(m, a->req, (size_t)a->max_req * sizeof *a->req);
    a->inst = NULL;
    a->req = NULL;
}

lr_status
lr__adapters_add(struct lr__adapters *a, struct lr__mem *m, uint32_t id,
                 uint32_t max)
{
    if (LR_NEVER(max > LR_ROUTER_MAX_ADAPTERS))
        max = LR_ROUTER_MAX_ADAPTERS;
    struct lr__adinst *t = lr__alloc(m, INST_BYTES);
    LR_RETURN_IF(t == NULL, LR_ENOMEM);
    lr__adapters_remove(a, m, id);
    t->max = max;
    t->n = 0;
    a->inst[id] = t;
    return LR_OK;
}

void
lr__adapters_remove(struct lr__adapters *a, struct lr__mem *m, uint32_t id)
{
    struct lr__adinst *t = a->inst[id];
    if (t == NULL)
        return;
    lr__free(m, t, INST_BYTES);
    a->inst[id] = NULL;
}

static uint32_t
find(const struct lr__adinst *t, uint64_t hash)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (t->e[i].hash == hash)
            return i;
    return LR_NIL;
}

/* Slots that hold an adapter with work on it (requests routed here in
 * flight, or named by the engine's last report). */
static uint32_t
busy(const struct lr__adinst *t)
{
    uint32_t b = 0;
    for (uint32_t i = 0; i < t->n; i++)
        b += t->e[i].inflight > 0 || t->e[i].reported;
    return b;
}

void
lr__adapters_fill(const struct lr__adapters *a, uint64_t hash, double load_s,
                  lr_candidate *c)
{
    const struct lr__adinst *t = a->inst[c->instance];
    if (t == NULL) { /* cannot happen for a live instance */
        c->adapter_missing = 0;
        c->adapter_free = UINT32_MAX;
        c->adapter_load_s = 0;
        c->adapters_resident = 0;
        c->adapter_evicts = 0;
        return;
    }
    bool res = hash == 0 || find(t, hash) != LR_NIL;
    uint32_t b = t->max > 0 ? busy(t) : 0;
    c->adapter_missing = !res;
    c->adapter_free = t->max == 0 ? UINT32_MAX : t->max > b ? t->max - b : 0;
    c->adapter_load_s = res ? 0 : load_s;
    c->adapters_resident = t->n;
    c->adapter_evicts = !res && t->n >= limit(t);
}

uint32_t
lr__adapters_ahead(const struct lr__adapters *a, uint32_t id, uint64_t hash)
{
    const struct lr__adinst *t = id < a->max_inst ? a->inst[id] : NULL;
    if (t == NULL || t->max == 0)
        return UINT32_MAX;
    uint32_t others = 0;
    for (uint32_t i = 0; i < t->n; i++)
        others +=
            t->e[i].hash != hash && (t->e[i].inflight > 0 || t->e[i].reported);
    return others >= t->max ? others + 1 - t->max : 0;
}

/* Move entry i to the front (most recent), the ones before it down. */
static void
to_front(struct lr__adinst *t, uint32_t i)
{
    struct lr__adres e = t->e[i];
    memmove(&t->e[1], &t->e[0], (size_t)i * sizeof e);
    t->e[0] = e;
}

/* Room for one more at the front: the table's tail, or the least recently
 * used entry without work when the table is full; LR_NIL when every entry
 * has work (the engine queues the request until a slot frees). */
static uint32_t
room(struct lr__adinst *t)
{
    if (t->n < limit(t))
        return t->n++;
    for (uint32_t i = t->n; i-- > 0;)
        if (t->e[i].inflight == 0 && !t->e[i].reported)
            return i;
    return LR_NIL;
}

void
lr__adapters_dispatch(struct lr__adapters *a, uint32_t slot, uint32_t id,
                      uint64_t model, uint64_t hash, uint64_t now_ns)
{
    struct lr__adreq *rq = &a->req[slot];
    rq->hash = 0;
    rq->model = model;
    rq->inst = id;
    struct lr__adinst *t = a->inst[id];
    if (hash == 0 || LR_NEVER(t == NULL))
        return;
    uint32_t i = find(t, hash);
    if (i == LR_NIL) {
        i = room(t);
        if (i == LR_NIL)
            return; /* followed once a report or a later route sees it */
        t->e[i] = (struct lr__adres){ .hash = hash };
    }
    t->e[i].used_ns = now_ns > t->e[i].used_ns ? now_ns : t->e[i].used_ns;
    t->e[i].inflight++;
    to_front(t, i);
    rq->hash = hash;
}

void
lr__adapters_end(struct lr__adapters *a, uint32_t slot)
{
    struct lr__adreq *rq = &a->req[slot];
    if (rq->hash == 0)
        return;
    struct lr__adinst *t = rq->inst < a->max_inst ? a->inst[rq->inst] : NULL;
    uint32_t i = t != NULL ? find(t, rq->hash) : LR_NIL;
    if (i != LR_NIL && t->e[i].inflight > 0)
        t->e[i].inflight--;
    rq->hash = 0;
}

void
lr__adapters_move(struct lr__adapters *a, uint32_t slot, uint32_t id,
                  uint64_t now_ns)
{
    uint64_t hash = a->req[slot].hash, model = a->req[slot].model;
    lr__adapters_end(a, slot);
    lr__adapters_dispatch(a, slot, id, model, hash, now_ns);
}

uint64_t
lr__adapters_model(const struct lr__adapters *a, uint32_t slot)
{
    return a->req[slot].model;
}

void
lr__adapters_report(struct lr__adapters *a, uint32_t id, const uint64_t *hashes,
                    size_t n, uint32_t max, uint64_t now_ns)
{
    struct lr__adinst *t = a->inst[id];
    if (LR_NEVER(t == NULL))
        return;
    if (max > 0)
        t->max = max;
    /* the named ones first, in the report's order, with what the router
     * knows of them (their requests in flight); then the router's other
     * guesses, most recent first, while slots remain */
    struct lr__adres old[LR_ROUTER_MAX_ADAPTERS];
    uint32_t n_old = t->n;
    memcpy(old, t->e, (size_t)n_old * sizeof *old);
    uint32_t lim = limit(t);
    uint32_t k = 0;
    for (size_t j = 0; j < n && k < LR_ROUTER_MAX_ADAPTERS; j++) {
        struct lr__adres e = { .hash = hashes[j], .used_ns = now_ns };
        for (uint32_t i = 0; i < n_old; i++)
            if (old[i].hash == e.hash) {
                e.inflight = old[i].inflight;
                e.used_ns = old[i].used_ns > now_ns ? old[i].used_ns : now_ns;
                old[i].hash = 0; /* taken */
            }
        e.reported = 1;
        t->e[k++] = e;
    }
    /* the guesses with requests in flight stay (they run there whatever
     * the report said), then the idle ones while slots remain; each in
     * recency order */
    for (int busy_pass = 1; busy_pass >= 0; busy_pass--)
        for (uint32_t i = 0; i < n_old && k < LR_ROUTER_MAX_ADAPTERS; i++) {
            if (old[i].hash == 0 || (old[i].inflight > 0) != busy_pass ||
                (!busy_pass && k >= lim))
                continue;
            old[i].reported = 0;
            t->e[k++] = old[i];
        }
    t->n = k;
}

size_t
lr__adapters_list(const struct lr__adapters *a, uint32_t id, uint64_t *out,
                  size_t cap)
{
    const struct lr__adinst *t = a->inst[id];
    if (t == NULL)
        return 0;
    for (uint32_t i = 0; i < t->n && i < cap; i++)
        out[i] = t->e[i].hash;
    return t->n;
}

uint64_t
lr__adapters_digest(const struct lr__adapters *a, uint64_t d)
{
    for (uint32_t id = 0; id < a->max_inst; id++) {
        const struct lr__adinst *t = a->inst[id];
        if (t == NULL)
            continue;
        d = lr__digest_mix(d, ((uint64_t)id << 32) | t->n);
        d = lr__digest_mix(d, t->max);
        for (uint32_t i = 0; i < t->n; i++) {
            d = lr__digest_mix(d, t->e[i].hash);
            d = lr__digest_mix(d, t->e[i].used_ns);
            d = lr__digest_mix(d, ((uint64_t)t->e[i].inflight << 1) |
                                      t->e[i].reported);
        }
    }
    for (uint32_t s = 0; s < a->max_req; s++)
        if (a->req[s].hash != 0 || a->req[s].model != 0)
            d = lr__digest_mix(d, a->req[s].hash ^ a->req[s].model ^
                                      ((uint64_t)s << 40) ^ a->req[s].inst);
    return d;
}

lr_status
lr__adapters_verify(const struct lr__adapters *a)
{
    for (uint32_t id = 0; id < a->max_inst; id++) {
        const struct lr__adinst *t = a->inst[id];
        if (t == NULL)
            continue;
        LR_RETURN_IF(t->n > LR_ROUTER_MAX_ADAPTERS ||
                         t->max > LR_ROUTER_MAX_ADAPTERS,
                     LR_ECORRUPT);
        for (uint32_t i = 0; i < t->n; i++) {
            LR_RETURN_IF(t->e[i].hash == 0 || t->e[i].reported > 1,
                         LR_ECORRUPT);
            for (uint32_t j = 0; j < i; j++)
                LR_RETURN_IF(t->e[j].hash == t->e[i].hash, LR_ECORRUPT);
        }
    }
    return LR_OK;
}
