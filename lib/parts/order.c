/* Instances in buckets by load (order.h). */
#include "parts/order.h"

#define NIL UINT32_MAX

lr_status
lr__order_init(struct lr__order *o, struct lr__mem *m, uint32_t max_id,
               uint32_t nb)
{
    memset(o, 0, sizeof *o);
    if (nb == 0)
        nb = 1;
    uint32_t *head = lr__alloc(m, (size_t)nb * sizeof *head);
    uint32_t *tail = lr__alloc(m, (size_t)nb * sizeof *tail);
    uint32_t *cnt = lr__calloc(m, nb, sizeof *cnt);
    uint32_t *next = lr__alloc(m, (size_t)max_id * sizeof *next);
    uint32_t *prev = lr__alloc(m, (size_t)max_id * sizeof *prev);
    uint32_t *where = lr__alloc(m, (size_t)max_id * sizeof *where);
    if (head == NULL || tail == NULL || cnt == NULL ||
        (max_id > 0 && (next == NULL || prev == NULL || where == NULL))) {
        lr__free(m, head, (size_t)nb * sizeof *head);
        lr__free(m, tail, (size_t)nb * sizeof *tail);
        lr__free(m, cnt, (size_t)nb * sizeof *cnt);
        lr__free(m, next, (size_t)max_id * sizeof *next);
        lr__free(m, prev, (size_t)max_id * sizeof *prev);
        lr__free(m, where, (size_t)max_id * sizeof *where);
        return LR_ENOMEM;
    }
    for (uint32_t b = 0; b < nb; b++)
        head[b] = tail[b] = NIL;
    for (uint32_t i = 0; i < max_id; i++)
        where[i] = NIL;
    *o = (struct lr__order){ .max_id = max_id,
                             .nb = nb,
                             .lo = 1,
                             .hi = 0,
                             .head = head,
                             .tail = tail,
                             .cnt = cnt,
                             .next = next,
                             .prev = prev,
                             .where = where };
    return LR_OK;
}

void
lr__order_free(struct lr__order *o, struct lr__mem *m)
{
    if (o->head == NULL)
        return;
    lr__free(m, o->head, (size_t)o->nb * sizeof *o->head);
    lr__free(m, o->tail, (size_t)o->nb * sizeof *o->tail);
    lr__free(m, o->cnt, (size_t)o->nb * sizeof *o->cnt);
    lr__free(m, o->next, (size_t)o->max_id * sizeof *o->next);
    lr__free(m, o->prev, (size_t)o->max_id * sizeof *o->prev);
    lr__free(m, o->where, (size_t)o->max_id * sizeof *o->where);
    memset(o, 0, sizeof *o);
}

/* Out of its bucket's list, the hints kept true. */
static void
unlink_id(struct lr__order *o, uint32_t id)
{
    uint32_t b = o->where[id], nx = o->next[id], pv = o->prev[id];
    if (pv != NIL)
        o->next[pv] = nx;
    else
        o->head[b] = nx;
    if (nx != NIL)
        o->prev[nx] = pv;
    else
        o->tail[b] = pv;
    o->where[id] = NIL;
    o->cnt[b]--;
    o->n--;
    if (o->n == 0) {
        o->lo = 1;
        o->hi = 0;
        return;
    }
    if (o->cnt[b] > 0)
        return;
    if (b == o->lo)
        while (o->cnt[o->lo] == 0)
            o->lo++;
    if (b == o->hi)
        while (o->cnt[o->hi] == 0)
            o->hi--;
}

void
lr__order_set(struct lr__order *o, uint32_t id, uint32_t b)
{
    if (LR_NEVER(id >= o->max_id))
        return;
    if (b >= o->nb)
        b = o->nb - 1;
    if (o->where[id] == b)
        return;
    if (o->where[id] != NIL)
        unlink_id(o, id);
    uint32_t t = o->tail[b]; /* at the end: the longest there go first */
    o->prev[id] = t;
    o->next[id] = NIL;
    if (t != NIL)
        o->next[t] = id;
    else
        o->head[b] = id;
    o->tail[b] = id;
    o->where[id] = b;
    o->cnt[b]++;
    if (o->n++ == 0) {
        o->lo = o->hi = b;
        return;
    }
    o->lo = b < o->lo ? b : o->lo;
    o->hi = b > o->hi ? b : o->hi;
}

void
lr__order_drop(struct lr__order *o, uint32_t id)
{
    if (id < o->max_id && o->where[id] != NIL)
        unlink_id(o, id);
}

uint32_t
lr__order_least(const struct lr__order *o, uint32_t *ids, uint32_t cap)
{
    uint32_t got = 0;
    for (uint32_t b = o->lo; got < cap && b <= o->hi && o->n > 0; b++)
        for (uint32_t id = o->head[b]; id != NIL && got < cap; id = o->next[id])
            ids[got++] = id;
    return got;
}

uint32_t
lr__order_rank(const struct lr__order *o, uint32_t k)
{
    uint32_t b = o->lo;
    for (uint32_t seen = 0; b < o->hi; b++) {
        seen += o->cnt[b];
        if (seen > k)
            break;
    }
    return b;
}

lr_status
lr__order_verify(const struct lr__order *o)
{
    uint32_t total = 0;
    for (uint32_t b = 0; b < o->nb; b++) {
        uint32_t c = 0, pv = NIL;
        for (uint32_t id = o->head[b]; id != NIL; id = o->next[id]) {
            LR_RETURN_IF(id >= o->max_id || o->where[id] != b ||
                             o->prev[id] != pv || c > o->max_id,
                         LR_ECORRUPT);
            pv = id;
            c++;
        }
        LR_RETURN_IF(c != o->cnt[b] || o->tail[b] != pv, LR_ECORRUPT);
        LR_RETURN_IF(c > 0 && (b < o->lo || b > o->hi), LR_ECORRUPT);
        total += c;
    }
    LR_RETURN_IF(total != o->n, LR_ECORRUPT);
    LR_RETURN_IF(o->n > 0 && (o->cnt[o->lo] == 0 || o->cnt[o->hi] == 0),
                 LR_ECORRUPT);
    return LR_OK;
}
