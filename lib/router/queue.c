/* The waiting queue's storage: its waiters' memory, and its part of the
 * router's stats, digest and checks (the queue's logic, which routes, is
 * admission.c, above route.c; this file is below router.c, which frees
 * and reports through it). The queue and its counters are under wait_mu
 * (router_impl.h). */
#include "common/lr_hash.h"
#include "router/router_impl.h"

void
lr__router_waiter_free(lr_router *r, struct lr__waiter *w)
{
    r->wait_tokens -= w->q.n_tokens;
    lr__free(&r->mem, w, w->bytes);
}

void
lr__router_wait_stats(lr_router *r, lr_router_stats *s)
{
    pthread_mutex_lock(&r->wait_mu);
    s->waiting = r->aq_made ? r->aq.count : 0;
    s->waiting_tokens = r->wait_tokens;
    s->waited = r->wst.waited;
    s->waited_dispatched = r->wst.dispatched;
    s->waited_expired = r->wst.expired;
    s->waited_cancelled = r->wst.cancelled;
    s->waited_dropped = r->wst.dropped;
    s->shed = r->wst.shed;
    s->wait_ns = r->wst.wait_ns;
    pthread_mutex_unlock(&r->wait_mu);
}

uint64_t
lr__router_wait_digest(lr_router *r, uint64_t h)
{
    pthread_mutex_lock(&r->wait_mu);
    h = lr__digest_mix(h, r->aq_made ? r->aq.count : 0);
    h = lr__digest_mix(h, r->aq_made ? r->aq.seq : 0);
    h = lr__digest_mix(h, r->wait_tokens);
    /* what left the queue and how; not the sheds, which change nothing
     * (a refused call leaves the digest as it was) */
    h = lr__digest_mix(h, r->wst.waited ^ r->wst.dispatched << 16 ^
                              r->wst.expired << 32 ^ r->wst.cancelled << 40 ^
                              r->wst.dropped << 48 ^ r->wst.wait_ns);
    pthread_mutex_unlock(&r->wait_mu);
    return h;
}

/* The queue's invariants, and every waiter's tokens counted once. */
lr_status
lr__router_wait_verify(lr_router *r)
{
    pthread_mutex_lock(&r->wait_mu);
    lr_status st = LR_OK;
    if (r->aq_made) {
        st = lr__admit_verify(&r->aq);
        /* a free entry's data is NULL (parts/admit.c) */
        uint64_t tokens = 0, held = 0;
        for (uint32_t i = 0; st == LR_OK && i < r->aq.max_waiting; i++) {
            const struct lr__admit_ent *e = &r->aq.ent[i];
            const struct lr__waiter *w = e->q.data;
            if (w == NULL)
                continue;
            held++;
            tokens += w->q.n_tokens;
            if (w->q.id != e->q.id || w->q.urgency != e->q.band ||
                !lr__admit_find(&r->aq, e->q.id, NULL))
                st = LR_ECORRUPT;
        }
        if (st == LR_OK && (tokens != r->wait_tokens || held != r->aq.count))
            st = LR_ECORRUPT;
    } else if (r->wait_tokens != 0) {
        st = LR_ECORRUPT;
    }
    pthread_mutex_unlock(&r->wait_mu);
    return st;
}

void
lr__router_wait_free(lr_router *r)
{
    if (!r->aq_made)
        return;
    struct lr__admit_req a;
    while (lr__admit_peek(&r->aq, &a) == LR_OK) {
        (void)lr__admit_cancel(&r->aq, a.id, NULL);
        lr__router_waiter_free(r, a.data);
    }
    lr__admit_free(&r->aq, &r->mem);
    r->aq_made = false;
}
