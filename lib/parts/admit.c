/* lr__admit (admit.h): requests in per-tenant, per-band lists; per band, a
 * min-heap of the tenants waiting there by (counter, their first request's
 * push order); a min-heap of the requests with a deadline by (deadline,
 * push order); two tables (request id -> entry, tenant -> slot) sized at
 * init, so that no operation after it allocates. The tables are keyed by
 * a per-handle seed and never grow, so they never re-salt: a flood needs
 * the seed. */
#include "parts/admit.h"

#include "common/lr_hash.h"

/* ---- heaps ------------------------------------------------------------ */

/* One heap code for the bands' heaps (h < LR__ADMIT_BANDS: tenant slots by
 * counter, then their first request's push order) and the deadline heap
 * (h == DL: entries by deadline, then push order). */
#define DL LR__ADMIT_BANDS

static uint32_t *
h_arr(struct lr__admit *a, uint32_t h)
{
    return h == DL ? a->dheap : a->bheap[h];
}

static uint32_t *
h_count(struct lr__admit *a, uint32_t h)
{
    return h == DL ? &a->dn : &a->bn[h];
}

/* Where item v's place in heap h is kept. */
static uint32_t *
h_pos(struct lr__admit *a, uint32_t h, uint32_t v)
{
    return h == DL ? &a->ent[v].dpos : &a->ten[v].hpos[h];
}

/* Item x before item y in heap h. */
static bool
h_less(const struct lr__admit *a, uint32_t h, uint32_t x, uint32_t y)
{
    uint64_t kx, ky, sx, sy;
    if (h == DL) {
        kx = a->ent[x].q.deadline_ns;
        ky = a->ent[y].q.deadline_ns;
        sx = a->ent[x].seq;
        sy = a->ent[y].seq;
    } else {
        kx = a->ten[x].counter;
        ky = a->ten[y].counter;
        sx = a->ent[a->ten[x].head[h]].seq;
        sy = a->ent[a->ten[y].head[h]].seq;
    }
    return kx != ky ? kx < ky : sx < sy;
}

static void
h_set(struct lr__admit *a, uint32_t h, uint32_t i, uint32_t v)
{
    h_arr(a, h)[i] = v;
    *h_pos(a, h, v) = i;
}

static void
heap_up(struct lr__admit *a, uint32_t h, uint32_t i)
{
    uint32_t *arr = h_arr(a, h), v = arr[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!h_less(a, h, v, arr[p]))
            break;
        h_set(a, h, i, arr[p]);
        i = p;
    }
    h_set(a, h, i, v);
}

static void
heap_down(struct lr__admit *a, uint32_t h, uint32_t i)
{
    uint32_t *arr = h_arr(a, h), n = *h_count(a, h), v = arr[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h_less(a, h, arr[c + 1], arr[c]))
            c++;
        if (!h_less(a, h, arr[c], v))
            break;
        h_set(a, h, i, arr[c]);
        i = c;
    }
    h_set(a, h, i, v);
}

/* Item v's key in heap h moved (either way). */
static void
heap_fix(struct lr__admit *a, uint32_t h, uint32_t v)
{
    heap_up(a, h, *h_pos(a, h, v));
    heap_down(a, h, *h_pos(a, h, v));
}

static void
heap_push(struct lr__admit *a, uint32_t h, uint32_t v)
{
    uint32_t i = (*h_count(a, h))++;
    h_set(a, h, i, v);
    heap_up(a, h, i);
}

static void
heap_remove(struct lr__admit *a, uint32_t h, uint32_t v)
{
    uint32_t i = *h_pos(a, h, v), last = h_arr(a, h)[--*h_count(a, h)];
    *h_pos(a, h, v) = LR_NIL;
    if (last == v)
        return;
    h_set(a, h, i, last);
    heap_fix(a, h, last);
}

/* ---- tables ----------------------------------------------------------- */

static uint64_t
hv_of(const struct lr__admit *a, uint64_t key, uint64_t kind)
{
    return lr__mix64(key ^ kind, a->seed);
}

#define KIND_ID 0x4c5241444d494431ull  /* "LRADMID1" */
#define KIND_TEN 0x4c5241444d54454eull /* "LRADMTEN" */

static bool
ent_eq(const void *ctx, uint64_t key, uint32_t v)
{
    return ((const struct lr__admit_ent *)ctx)[v].q.id == key;
}

static bool
ten_eq(const void *ctx, uint64_t key, uint32_t v)
{
    return ((const struct lr__admit_ten *)ctx)[v].tenant == key;
}

static uint32_t
ent_find(const struct lr__admit *a, uint64_t id)
{
    return lr__table_find(&a->ids, hv_of(a, id, KIND_ID), id, ent_eq, a->ent);
}

static uint32_t
ten_find(const struct lr__admit *a, uint64_t tenant)
{
    return lr__table_find(&a->tens, hv_of(a, tenant, KIND_TEN), tenant, ten_eq,
                          a->ten);
}

/* ---- idle tenants ----------------------------------------------------- */

static void
idle_unlink(struct lr__admit *a, uint32_t t)
{
    struct lr__admit_ten *T = &a->ten[t];
    if (T->iprev != LR_NIL)
        a->ten[T->iprev].inext = T->inext;
    else
        a->idle_head = T->inext;
    if (T->inext != LR_NIL)
        a->ten[T->inext].iprev = T->iprev;
    else
        a->idle_tail = T->iprev;
    T->iprev = T->inext = LR_NIL;
}

static void
idle_append(struct lr__admit *a, uint32_t t)
{
    struct lr__admit_ten *T = &a->ten[t];
    T->inext = LR_NIL;
    T->iprev = a->idle_tail;
    if (a->idle_tail != LR_NIL)
        a->ten[a->idle_tail].inext = t;
    else
        a->idle_head = t;
    a->idle_tail = t;
}

/* A fresh slot for `tenant`: a free one, else the one idle longest
 * (forgotten). Room was checked. */
static uint32_t
ten_new(struct lr__admit *a, uint64_t tenant)
{
    uint32_t t = a->free_ten;
    if (t != LR_NIL) {
        a->free_ten = a->ten[t].inext;
    } else {
        t = a->idle_head;
        idle_unlink(a, t);
        lr__table_remove(&a->tens, hv_of(a, a->ten[t].tenant, KIND_TEN), t);
    }
    struct lr__admit_ten *T = &a->ten[t];
    memset(T, 0, sizeof *T);
    T->tenant = tenant;
    T->used = 1;
    for (uint32_t b = 0; b < LR__ADMIT_BANDS; b++)
        T->head[b] = T->tail[b] = T->hpos[b] = LR_NIL;
    T->iprev = T->inext = LR_NIL;
    lr__table_insert(&a->tens, hv_of(a, tenant, KIND_TEN), t);
    return t;
}

/* ---- init and free ---------------------------------------------------- */

void
lr__admit_free(struct lr__admit *a, struct lr__mem *m)
{
    if (a == NULL)
        return;
    lr__free(m, a->ent, (size_t)a->max_waiting * sizeof *a->ent);
    lr__free(m, a->dheap, (size_t)a->max_waiting * sizeof *a->dheap);
    lr__free(m, a->ten, (size_t)a->max_tenants * sizeof *a->ten);
    for (uint32_t b = 0; b < LR__ADMIT_BANDS; b++)
        lr__free(m, a->bheap[b], (size_t)a->max_tenants * sizeof(uint32_t));
    lr__table_free(&a->ids, m);
    lr__table_free(&a->tens, m);
    memset(a, 0, sizeof *a);
}

lr_status
lr__admit_init(struct lr__admit *a, struct lr__mem *m, uint32_t max_waiting,
               uint32_t max_tenants, uint32_t bands, uint64_t hash_seed)
{
    LR_RETURN_IF(a == NULL || m == NULL, LR_EINVAL);
    memset(a, 0, sizeof *a);
    LR_RETURN_IF(max_waiting == 0 || max_waiting > LR__ADMIT_MAX_WAITING,
                 LR_EINVAL);
    LR_RETURN_IF(max_tenants == 0 || max_tenants > LR__ADMIT_MAX_TENANTS,
                 LR_EINVAL);
    LR_RETURN_IF(bands == 0 || bands > LR__ADMIT_BANDS, LR_EINVAL);
    a->max_waiting = max_waiting;
    a->max_tenants = max_tenants;
    a->bands = bands;
    a->seed = hash_seed;
    a->ent = lr__alloc(m, (size_t)max_waiting * sizeof *a->ent);
    a->dheap = lr__alloc(m, (size_t)max_waiting * sizeof *a->dheap);
    a->ten = lr__alloc(m, (size_t)max_tenants * sizeof *a->ten);
    bool ok = a->ent != NULL && a->dheap != NULL && a->ten != NULL;
    for (uint32_t b = 0; ok && b < bands; b++) {
        a->bheap[b] = lr__alloc(m, (size_t)max_tenants * sizeof(uint32_t));
        ok = a->bheap[b] != NULL;
    }
    if (ok)
        ok = lr__table_init(&a->ids, m, max_waiting) == LR_OK &&
             lr__table_init(&a->tens, m, max_tenants) == LR_OK;
    if (!ok) {
        lr__admit_free(a, m); /* by the sizes; what is NULL is skipped */
        return LR_ENOMEM;
    }
    for (uint32_t i = 0; i < max_waiting; i++) {
        a->ent[i].next = i + 1 < max_waiting ? i + 1 : LR_NIL;
        a->ent[i].q.data = NULL;
    }
    for (uint32_t i = 0; i < max_tenants; i++) {
        memset(&a->ten[i], 0, sizeof a->ten[i]);
        a->ten[i].inext = i + 1 < max_tenants ? i + 1 : LR_NIL;
    }
    a->free_ent = 0;
    a->free_ten = 0;
    a->idle_head = a->idle_tail = LR_NIL;
    return LR_OK;
}

/* ---- operations ------------------------------------------------------- */

lr_status
lr__admit_push(struct lr__admit *a, const struct lr__admit_req *r)
{
    LR_RETURN_IF(a == NULL || r == NULL || a->ent == NULL, LR_EINVAL);
    LR_RETURN_IF(r->band >= a->bands, LR_EINVAL);
    LR_RETURN_IF(ent_find(a, r->id) != LR_NIL, LR_EEXIST);
    LR_RETURN_IF(a->count >= a->max_waiting, LR_ELIMIT);
    uint32_t t = ten_find(a, r->tenant);
    LR_RETURN_IF(t == LR_NIL && a->free_ten == LR_NIL && a->idle_head == LR_NIL,
                 LR_ELIMIT);
    /* nothing refused from here on */
    if (t == LR_NIL)
        t = ten_new(a, r->tenant);
    struct lr__admit_ten *T = &a->ten[t];
    uint32_t b = r->band;
    if (T->head[b] == LR_NIL) { /* starts waiting in band b: the lift */
        uint64_t floor =
            a->bn[b] > 0 ? a->ten[a->bheap[b][0]].counter : a->last[b];
        if (T->counter < floor) {
            T->counter = floor;
            for (uint32_t c = 0; c < a->bands; c++)
                if (T->hpos[c] != LR_NIL)
                    heap_fix(a, c, t);
        }
    }
    if (T->waiting == 0 && (T->iprev != LR_NIL || a->idle_head == t))
        idle_unlink(a, t);
    uint32_t e = a->free_ent;
    struct lr__admit_ent *E = &a->ent[e];
    a->free_ent = E->next;
    E->q = *r;
    E->seq = a->seq++;
    E->ten = t;
    E->next = LR_NIL;
    E->prev = T->tail[b];
    E->dpos = LR_NIL;
    if (T->tail[b] != LR_NIL)
        a->ent[T->tail[b]].next = e;
    T->tail[b] = e;
    lr__table_insert(&a->ids, hv_of(a, r->id, KIND_ID), e);
    if (r->deadline_ns != 0)
        heap_push(a, DL, e);
    if (T->head[b] == LR_NIL) {
        T->head[b] = e;
        heap_push(a, b, t);
    }
    a->active += T->waiting == 0;
    T->waiting++;
    T->held += r->size;
    a->count++;
    return LR_OK;
}

lr_status
lr__admit_peek(const struct lr__admit *a, struct lr__admit_req *out)
{
    LR_RETURN_IF(a == NULL || out == NULL, LR_EINVAL);
    for (uint32_t b = 0; b < a->bands; b++)
        if (a->bn[b] > 0) {
            *out = a->ent[a->ten[a->bheap[b][0]].head[b]].q;
            return LR_OK;
        }
    return LR_ENOENT;
}

/* Entry e goes; its tenant is charged its cost when `charge`. */
static void
remove_entry(struct lr__admit *a, uint32_t e, bool charge)
{
    struct lr__admit_ent *E = &a->ent[e];
    uint32_t t = E->ten, b = E->q.band;
    struct lr__admit_ten *T = &a->ten[t];
    bool was_head = T->head[b] == e;
    if (E->prev != LR_NIL)
        a->ent[E->prev].next = E->next;
    else
        T->head[b] = E->next;
    if (E->next != LR_NIL)
        a->ent[E->next].prev = E->prev;
    else
        T->tail[b] = E->prev;
    lr__table_remove(&a->ids, hv_of(a, E->q.id, KIND_ID), e);
    if (E->dpos != LR_NIL)
        heap_remove(a, DL, e);
    if (charge) {
        uint64_t c = T->counter + E->q.cost;
        T->counter = c < T->counter ? UINT64_MAX : c;
    }
    if (T->head[b] == LR_NIL) {
        heap_remove(a, b, t);
        a->last[b] = T->counter;
    } else if (was_head || charge) {
        heap_fix(a, b, t);
    }
    if (charge)
        for (uint32_t c = 0; c < a->bands; c++)
            if (c != b && T->hpos[c] != LR_NIL)
                heap_fix(a, c, t);
    T->waiting--;
    T->held -= E->q.size;
    if (T->waiting == 0) {
        idle_append(a, t);
        a->active--;
    }
    E->next = a->free_ent;
    E->prev = LR_NIL;
    E->q.data = NULL; /* a free entry holds nothing of the owner's */
    a->free_ent = e;
    a->count--;
}

static lr_status
remove_id(struct lr__admit *a, uint64_t id, struct lr__admit_req *out,
          bool charge)
{
    LR_RETURN_IF(a == NULL || a->ent == NULL, LR_EINVAL);
    uint32_t e = ent_find(a, id);
    LR_RETURN_IF(e == LR_NIL, LR_ENOENT);
    if (out != NULL)
        *out = a->ent[e].q;
    remove_entry(a, e, charge);
    return LR_OK;
}

lr_status
lr__admit_take(struct lr__admit *a, uint64_t id, struct lr__admit_req *out)
{
    return remove_id(a, id, out, true);
}

lr_status
lr__admit_cancel(struct lr__admit *a, uint64_t id, struct lr__admit_req *out)
{
    return remove_id(a, id, out, false);
}

size_t
lr__admit_expire(struct lr__admit *a, uint64_t now_ns,
                 struct lr__admit_req *out, size_t cap)
{
    if (a == NULL || (out == NULL && cap > 0))
        return 0;
    size_t n = 0;
    while (n < cap && a->dn > 0 &&
           a->ent[a->dheap[0]].q.deadline_ns <= now_ns) {
        uint32_t e = a->dheap[0];
        out[n++] = a->ent[e].q;
        remove_entry(a, e, false);
    }
    return n;
}

bool
lr__admit_find(const struct lr__admit *a, uint64_t id,
               struct lr__admit_req *out)
{
    if (a == NULL || a->ent == NULL)
        return false;
    uint32_t e = ent_find(a, id);
    if (e == LR_NIL)
        return false;
    if (out != NULL)
        *out = a->ent[e].q;
    return true;
}

void
lr__admit_tenant(const struct lr__admit *a, uint64_t tenant, uint32_t *waiting,
                 uint64_t *held)
{
    uint32_t t = ten_find(a, tenant);
    *waiting = t == LR_NIL ? 0 : a->ten[t].waiting;
    *held = t == LR_NIL ? 0 : a->ten[t].held;
}

bool
lr__admit_waits_upto(const struct lr__admit *a, uint32_t band)
{
    for (uint32_t b = 0; b <= band && b < a->bands; b++)
        if (a->bn[b] > 0)
            return true;
    return false;
}

uint64_t
lr__admit_counter(const struct lr__admit *a, uint64_t tenant)
{
    if (a == NULL || a->ten == NULL)
        return 0;
    uint32_t t = ten_find(a, tenant);
    return t == LR_NIL ? 0 : a->ten[t].counter;
}

/* ---- verify ----------------------------------------------------------- */

#define CHECK(c) LR_RETURN_IF(!(c), LR_ECORRUPT)

static lr_status
verify_tenant(const struct lr__admit *a, uint32_t t, uint32_t *seen)
{
    const struct lr__admit_ten *T = &a->ten[t];
    CHECK(ten_find(a, T->tenant) == t);
    uint32_t n = 0;
    uint64_t held = 0;
    for (uint32_t b = 0; b < LR__ADMIT_BANDS; b++) {
        if (b >= a->bands) {
            CHECK(T->head[b] == LR_NIL && T->hpos[b] == LR_NIL);
            continue;
        }
        uint32_t prev = LR_NIL;
        for (uint32_t e = T->head[b]; e != LR_NIL; e = a->ent[e].next) {
            CHECK(e < a->max_waiting && n < a->max_waiting);
            const struct lr__admit_ent *E = &a->ent[e];
            CHECK(E->ten == t && E->q.band == b && E->prev == prev);
            CHECK(prev == LR_NIL || a->ent[prev].seq < E->seq);
            CHECK(ent_find(a, E->q.id) == e);
            held += E->q.size;
            CHECK((E->q.deadline_ns == 0) == (E->dpos == LR_NIL));
            CHECK(E->dpos == LR_NIL ||
                  (E->dpos < a->dn && a->dheap[E->dpos] == e));
            prev = e;
            n++;
        }
        CHECK(T->tail[b] == prev);
        if (T->head[b] == LR_NIL)
            CHECK(T->hpos[b] == LR_NIL);
        else
            CHECK(T->hpos[b] < a->bn[b] && a->bheap[b][T->hpos[b]] == t);
    }
    CHECK(n == T->waiting && held == T->held);
    *seen += n;
    return LR_OK;
}

lr_status
lr__admit_verify(const struct lr__admit *a)
{
    LR_RETURN_IF(a == NULL || a->ent == NULL, LR_EINVAL);
    uint32_t seen = 0, used = 0, idle = 0;
    for (uint32_t t = 0; t < a->max_tenants; t++) {
        if (!a->ten[t].used)
            continue;
        used++;
        idle += a->ten[t].waiting == 0;
        LR_TRY(verify_tenant(a, t, &seen));
    }
    CHECK(seen == a->count && a->count <= a->max_waiting);
    CHECK(a->active == used - idle);
    CHECK(a->ids.count == a->count && a->tens.count == used);
    /* idle list: exactly the used tenants with nothing waiting */
    uint32_t n = 0, prev = LR_NIL;
    for (uint32_t t = a->idle_head; t != LR_NIL; t = a->ten[t].inext) {
        CHECK(t < a->max_tenants && n < a->max_tenants);
        CHECK(a->ten[t].used && a->ten[t].waiting == 0);
        CHECK(a->ten[t].iprev == prev);
        prev = t;
        n++;
    }
    CHECK(a->idle_tail == prev && n == idle);
    /* free slots: the rest */
    n = 0;
    for (uint32_t t = a->free_ten; t != LR_NIL; t = a->ten[t].inext) {
        CHECK(t < a->max_tenants && n < a->max_tenants && !a->ten[t].used);
        n++;
    }
    CHECK(n + used == a->max_tenants);
    n = 0;
    for (uint32_t e = a->free_ent; e != LR_NIL; e = a->ent[e].next) {
        CHECK(e < a->max_waiting && n < a->max_waiting);
        n++;
    }
    CHECK(n + a->count == a->max_waiting);
    /* heap orders */
    for (uint32_t b = 0; b < a->bands; b++)
        for (uint32_t i = 1; i < a->bn[b]; i++)
            CHECK(!h_less(a, b, a->bheap[b][i], a->bheap[b][(i - 1) / 2]));
    for (uint32_t i = 1; i < a->dn; i++)
        CHECK(!h_less(a, DL, a->dheap[i], a->dheap[(i - 1) / 2]));
    return lr__table_verify(&a->ids) == LR_OK &&
                   lr__table_verify(&a->tens) == LR_OK
               ? LR_OK
               : LR_ECORRUPT;
}
