/* A naive model of lr__admit (lib/parts/admit.h) for the differential
 * test (test-admit.c) and the fuzz harness (fuzz_admit.c): unordered
 * arrays and linear scans, the order of admit.h written out literally.
 *
 *   am_push / am_peek / am_take / am_cancel / am_expire / am_counter
 *     do to the model what the lr__admit call does to the queue;
 *   am_step runs one operation on both and says, on stderr through the
 *     caller's `fail`, where they disagree (statuses, requests returned,
 *     counters, then lr__admit_verify()). */
#ifndef LIBROUTE_TESTS_ADMIT_MODEL_H
#define LIBROUTE_TESTS_ADMIT_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "parts/admit.h"

#define AM_MAXW 64
#define AM_MAXT 16

struct am_req {
    struct lr__admit_req q;
    uint64_t seq;
};

struct am_ten {
    uint64_t tenant;
    uint64_t counter;
    uint64_t idle_since; /* when it last had nothing left waiting */
    bool used;
};

struct am {
    struct am_req r[AM_MAXW];
    uint32_t n;
    struct am_ten t[AM_MAXT];
    uint64_t last[LR__ADMIT_BANDS];
    uint64_t seq, idle_clock;
    uint32_t max_waiting, max_tenants, bands;
};

static inline void
am_init(struct am *m, uint32_t max_waiting, uint32_t max_tenants,
        uint32_t bands)
{
    memset(m, 0, sizeof *m);
    m->max_waiting = max_waiting;
    m->max_tenants = max_tenants;
    m->bands = bands;
}

static inline int
am_ten_of(const struct am *m, uint64_t tenant)
{
    for (uint32_t i = 0; i < m->max_tenants; i++)
        if (m->t[i].used && m->t[i].tenant == tenant)
            return (int)i;
    return -1;
}

static inline uint32_t
am_waiting(const struct am *m, uint64_t tenant, int band)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->n; i++)
        n += m->r[i].q.tenant == tenant &&
             (band < 0 || m->r[i].q.band == (uint32_t)band);
    return n;
}

static inline int
am_find(const struct am *m, uint64_t id)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->r[i].q.id == id)
            return (int)i;
    return -1;
}

static inline lr_status
am_push(struct am *m, const struct lr__admit_req *q)
{
    if (q->band >= m->bands)
        return LR_EINVAL;
    if (am_find(m, q->id) >= 0)
        return LR_EEXIST;
    if (m->n >= m->max_waiting)
        return LR_ELIMIT;
    int t = am_ten_of(m, q->tenant);
    if (t < 0) {
        for (uint32_t i = 0; i < m->max_tenants && t < 0; i++)
            if (!m->t[i].used)
                t = (int)i;
        if (t < 0) { /* forget the tenant idle longest */
            for (uint32_t i = 0; i < m->max_tenants; i++)
                if (am_waiting(m, m->t[i].tenant, -1) == 0 &&
                    (t < 0 || m->t[i].idle_since < m->t[t].idle_since))
                    t = (int)i;
            if (t < 0)
                return LR_ELIMIT;
        }
        m->t[t] = (struct am_ten){ .tenant = q->tenant, .used = true };
    }
    if (am_waiting(m, q->tenant, (int)q->band) == 0) {
        bool any = false;
        uint64_t floor = 0;
        for (uint32_t i = 0; i < m->max_tenants; i++)
            if (m->t[i].used && (int)i != t &&
                am_waiting(m, m->t[i].tenant, (int)q->band) > 0 &&
                (!any || m->t[i].counter < floor)) {
                floor = m->t[i].counter;
                any = true;
            }
        if (!any)
            floor = m->last[q->band];
        if (m->t[t].counter < floor)
            m->t[t].counter = floor;
    }
    m->r[m->n++] = (struct am_req){ .q = *q, .seq = m->seq++ };
    return LR_OK;
}

/* The index of the request that goes out next, or -1. */
static inline int
am_next(const struct am *m)
{
    for (uint32_t b = 0; b < m->bands; b++) {
        int best = -1;
        uint64_t bc = 0;
        for (uint32_t i = 0; i < m->n; i++) {
            if (m->r[i].q.band != b)
                continue;
            uint64_t c = m->t[am_ten_of(m, m->r[i].q.tenant)].counter;
            if (best < 0 || c < bc ||
                (c == bc && m->r[i].seq < m->r[best].seq)) {
                best = (int)i;
                bc = c;
            }
        }
        if (best >= 0)
            return best;
    }
    return -1;
}

static inline void
am_remove(struct am *m, int i, bool charge)
{
    struct lr__admit_req q = m->r[i].q;
    m->r[i] = m->r[--m->n];
    struct am_ten *T = &m->t[am_ten_of(m, q.tenant)];
    if (charge)
        T->counter =
            T->counter + q.cost < T->counter ? UINT64_MAX : T->counter + q.cost;
    if (am_waiting(m, q.tenant, (int)q.band) == 0)
        m->last[q.band] = T->counter;
    if (am_waiting(m, q.tenant, -1) == 0)
        T->idle_since = ++m->idle_clock;
}

static inline lr_status
am_take_or_cancel(struct am *m, uint64_t id, struct lr__admit_req *out,
                  bool charge)
{
    int i = am_find(m, id);
    if (i < 0)
        return LR_ENOENT;
    *out = m->r[i].q;
    am_remove(m, i, charge);
    return LR_OK;
}

static inline size_t
am_expire(struct am *m, uint64_t now, struct lr__admit_req *out, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        int best = -1;
        for (uint32_t i = 0; i < m->n; i++) {
            const struct am_req *R = &m->r[i];
            if (R->q.deadline_ns == 0 || R->q.deadline_ns > now)
                continue;
            if (best < 0 || R->q.deadline_ns < m->r[best].q.deadline_ns ||
                (R->q.deadline_ns == m->r[best].q.deadline_ns &&
                 R->seq < m->r[best].seq))
                best = (int)i;
        }
        if (best < 0)
            break;
        out[n++] = m->r[best].q;
        am_remove(m, best, false);
    }
    return n;
}

static inline uint64_t
am_counter(const struct am *m, uint64_t tenant)
{
    int t = am_ten_of(m, tenant);
    return t < 0 ? 0 : m->t[t].counter;
}

static inline bool
am_req_eq(const struct lr__admit_req *x, const struct lr__admit_req *y)
{
    return x->id == y->id && x->tenant == y->tenant && x->cost == y->cost &&
           x->arrival_ns == y->arrival_ns && x->deadline_ns == y->deadline_ns &&
           x->band == y->band && x->flags == y->flags;
}

enum {
    AM_PUSH,
    AM_TAKE,
    AM_CANCEL,
    AM_EXPIRE,
    AM_TAKE_NEXT,
    AM_N_OPS
};

/* One operation on both; `tenants` and `ids` bound the keys the caller
 * uses (the counters of tenants 0..tenants-1 and the presence of ids
 * 0..ids-1 are compared after it). Returns false (after printing) on the
 * first disagreement. */
static inline bool
am_step(struct am *m, struct lr__admit *a, int op,
        const struct lr__admit_req *q, uint64_t now, uint32_t cap,
        uint32_t tenants, uint32_t ids)
{
    struct lr__admit_req x, y;
    switch (op) {
    case AM_PUSH: {
        lr_status s1 = am_push(m, q), s2 = lr__admit_push(a, q);
        if (s1 != s2) {
            fprintf(stderr, "push id %llu: model %s, queue %s\n",
                    (unsigned long long)q->id, lr_status_name(s1),
                    lr_status_name(s2));
            return false;
        }
        break;
    }
    case AM_TAKE:
    case AM_CANCEL: {
        bool ch = op == AM_TAKE;
        memset(&x, 0, sizeof x);
        memset(&y, 0, sizeof y);
        lr_status s1 = am_take_or_cancel(m, q->id, &x, ch);
        lr_status s2 =
            ch ? lr__admit_take(a, q->id, &y) : lr__admit_cancel(a, q->id, &y);
        if (s1 != s2 || (s1 == LR_OK && !am_req_eq(&x, &y))) {
            fprintf(stderr, "%s id %llu: model %s, queue %s\n",
                    ch ? "take" : "cancel", (unsigned long long)q->id,
                    lr_status_name(s1), lr_status_name(s2));
            return false;
        }
        break;
    }
    case AM_EXPIRE: {
        struct lr__admit_req o1[AM_MAXW], o2[AM_MAXW];
        if (cap > AM_MAXW)
            cap = AM_MAXW;
        size_t n1 = am_expire(m, now, o1, cap);
        size_t n2 = lr__admit_expire(a, now, o2, cap);
        if (n1 != n2) {
            fprintf(stderr, "expire(%llu, %u): model %zu, queue %zu\n",
                    (unsigned long long)now, cap, n1, n2);
            return false;
        }
        for (size_t i = 0; i < n1; i++)
            if (!am_req_eq(&o1[i], &o2[i])) {
                fprintf(stderr, "expire: #%zu differs (ids %llu, %llu)\n", i,
                        (unsigned long long)o1[i].id,
                        (unsigned long long)o2[i].id);
                return false;
            }
        break;
    }
    case AM_TAKE_NEXT: { /* what a dispatcher does: peek, then take */
        int i = am_next(m);
        lr_status s = lr__admit_peek(a, &y);
        if ((i < 0) != (s == LR_ENOENT) ||
            (i >= 0 && (s != LR_OK || !am_req_eq(&m->r[i].q, &y)))) {
            fprintf(stderr, "peek: model id %lld, queue %s id %llu\n",
                    i < 0 ? -1LL : (long long)m->r[i].q.id, lr_status_name(s),
                    (unsigned long long)y.id);
            return false;
        }
        if (i >= 0) {
            uint64_t id = m->r[i].q.id;
            am_take_or_cancel(m, id, &x, true);
            if (lr__admit_take(a, id, &y) != LR_OK) {
                fprintf(stderr, "take of the peeked id %llu failed\n",
                        (unsigned long long)id);
                return false;
            }
        }
        break;
    }
    default:
        return false;
    }
    if (a->count != m->n) {
        fprintf(stderr, "count: model %u, queue %u\n", m->n, a->count);
        return false;
    }
    for (uint32_t t = 0; t < tenants; t++)
        if (am_counter(m, t) != lr__admit_counter(a, t)) {
            fprintf(stderr, "tenant %u: counter model %llu, queue %llu\n", t,
                    (unsigned long long)am_counter(m, t),
                    (unsigned long long)lr__admit_counter(a, t));
            return false;
        }
    for (uint32_t id = 0; id < ids; id++)
        if ((am_find(m, id) >= 0) != lr__admit_find(a, id, NULL)) {
            fprintf(stderr, "id %u: waiting in one only\n", id);
            return false;
        }
    lr_status v = lr__admit_verify(a);
    if (v != LR_OK) {
        fprintf(stderr, "lr__admit_verify: %s\n", lr_status_name(v));
        return false;
    }
    return true;
}

#endif /* LIBROUTE_TESTS_ADMIT_MODEL_H */
