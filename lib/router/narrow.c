/* The routable instances in load order (narrow.h). */
#include "router/narrow.h"

lr_status
lr__fleet_init(struct lr__fleet *f, struct lr__mem *m, uint32_t max_inst)
{
    memset(f, 0, sizeof *f);
    static const uint32_t nb[LR__ORDERS] = {
        [LR__ORDER_INFLIGHT] = LR__ORDER_COUNTS,
        [LR__ORDER_LOAD] = LR__ORDER_COUNTS,
        [LR__ORDER_BACKLOG] = LR__ORDER_TOKEN_BUCKETS,
        [LR__ORDER_QUEUE] = LR__ORDER_COUNTS,
        [LR__ORDER_KV] = 1001,
    };
    lr_status st = LR_OK;
    for (uint32_t i = 0; i < LR__ORDERS && st == LR_OK; i++)
        st = lr__order_init(&f->o[i], m, max_inst, nb[i]);
    if (st == LR_OK) {
        f->inflight = lr__calloc(m, max_inst, sizeof *f->inflight);
        st = f->inflight != NULL || max_inst == 0 ? LR_OK : LR_ENOMEM;
    }
    if (st != LR_OK)
        lr__fleet_free(f, m);
    return st;
}

void
lr__fleet_free(struct lr__fleet *f, struct lr__mem *m)
{
    uint32_t max_inst = f->o[0].max_id;
    for (uint32_t i = 0; i < LR__ORDERS; i++)
        lr__order_free(&f->o[i], m);
    lr__free(m, f->inflight, (size_t)max_inst * sizeof *f->inflight);
    memset(f, 0, sizeof *f);
}

void
lr__fleet_drop(struct lr__fleet *f, uint32_t id)
{
    if (!lr__order_has(&f->o[LR__ORDER_INFLIGHT], id))
        return;
    double v = f->inflight[id];
    f->sum -= v;
    f->sq -= v * v;
    f->inflight[id] = 0;
    for (uint32_t i = 0; i < LR__ORDERS; i++)
        lr__order_drop(&f->o[i], id);
    if (f->o[LR__ORDER_INFLIGHT].n == 0)
        f->sum = f->sq = 0; /* no rounding left behind */
}

void
lr__fleet_clear(struct lr__fleet *f)
{
    for (uint32_t id = 0; id < f->o[0].max_id; id++)
        lr__fleet_drop(f, id);
}

void
lr__fleet_set(struct lr__fleet *f, const lr_candidate *c)
{
    uint32_t id = c->instance;
    double was = lr__order_has(&f->o[LR__ORDER_INFLIGHT], id)
                     ? (double)f->inflight[id]
                     : 0;
    double v = c->inflight;
    f->sum += v - was;
    f->sq += v * v - was * was;
    f->inflight[id] = c->inflight;
    uint64_t load = (uint64_t)c->inflight + c->running + c->waiting;
    lr__order_set(&f->o[LR__ORDER_INFLIGHT], id, c->inflight);
    lr__order_set(&f->o[LR__ORDER_LOAD], id,
                  load < LR__ORDER_COUNTS ? (uint32_t)load : UINT32_MAX);
    lr__order_set(&f->o[LR__ORDER_BACKLOG], id,
                  lr__order_bucket_tokens(c->prefill_tokens));
    lr__order_set(&f->o[LR__ORDER_QUEUE], id,
                  c->waiting > c->queued ? c->waiting : c->queued);
    double kv = c->kv_use * 1000;
    lr__order_set(&f->o[LR__ORDER_KV], id,
                  kv > 0 ? (kv < 1000 ? (uint32_t)kv : 1000) : 0);
}

/* The exact most in flight: the top bucket's when it is below the clamp,
 * else the most of its members. */
static uint32_t
fleet_max(const struct lr__fleet *f)
{
    const struct lr__order *o = &f->o[LR__ORDER_INFLIGHT];
    if (o->hi + 1 < o->nb)
        return o->hi;
    uint32_t mx = 0;
    for (uint32_t id = o->head[o->hi]; id != UINT32_MAX; id = o->next[id])
        mx = f->inflight[id] > mx ? f->inflight[id] : mx;
    return mx;
}

/* The k-th least in flight (0-based), exact below the clamp. */
static uint32_t
fleet_kth(const struct lr__fleet *f, uint32_t k)
{
    const struct lr__order *o = &f->o[LR__ORDER_INFLIGHT];
    uint32_t b = lr__order_rank(o, k);
    return b + 1 < o->nb ? b : fleet_max(f);
}

void
lr__fleet_stats(const struct lr__fleet *f, struct lr__fleet_stats *s)
{
    const struct lr__order *o = &f->o[LR__ORDER_INFLIGHT];
    memset(s, 0, sizeof *s);
    s->n = o->n;
    if (o->n == 0)
        return;
    s->min = fleet_kth(f, 0);
    s->max = fleet_max(f);
    s->sum = f->sum;
    s->sq = f->sq;
    uint32_t lo = fleet_kth(f, (o->n - 1) / 2);
    s->median = o->n % 2 ? lo : (lo + (double)fleet_kth(f, o->n / 2)) / 2;
    /* queues clamp at the last bucket: 1,023 or more reads 1,023 */
    s->qmin = f->o[LR__ORDER_QUEUE].lo;
    s->qmax = f->o[LR__ORDER_QUEUE].hi;
}

lr_status
lr__fleet_verify(const struct lr__fleet *f, const uint32_t *act, uint32_t n)
{
    double sum = 0;
    for (uint32_t i = 0; i < LR__ORDERS; i++) {
        LR_TRY(lr__order_verify(&f->o[i]));
        LR_RETURN_IF(f->o[i].n != n, LR_ECORRUPT);
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t id = act[k];
        for (uint32_t i = 0; i < LR__ORDERS; i++)
            LR_RETURN_IF(!lr__order_has(&f->o[i], id), LR_ECORRUPT);
        uint32_t v = f->inflight[id];
        LR_RETURN_IF(f->o[LR__ORDER_INFLIGHT].where[id] !=
                         (v < LR__ORDER_COUNTS ? v : LR__ORDER_COUNTS - 1),
                     LR_ECORRUPT);
        sum += v;
    }
    LR_RETURN_IF(fabs(sum - f->sum) > 1e-6 * (sum + 1), LR_ECORRUPT);
    return LR_OK;
}
