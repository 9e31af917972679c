/* lr__admit: the queue a router holds requests in while its fleet is
 * saturated, and the order it lets them out in.
 *
 * Order. A waiting request goes out before another when, in turn:
 *
 *   1. its band is more urgent (band 0 first; up to LR__ADMIT_BANDS);
 *   2. its tenant has been served less (the tenant's virtual counter,
 *      after Sheng et al.'s Virtual Token Counter, OSDI 2024: every
 *      request let out charges its tenant `cost`, the owner's weighted
 *      tokens);
 *   3. it came first (the order of the pushes).
 *
 * So within a band the tenants take turns by service received, and each
 * tenant's own requests keep their order. A tenant that starts waiting in
 * a band, having had nothing there, is lifted to the least counter of the
 * tenants waiting in that band (or, when none is, to the counter of the
 * last one that stopped waiting there): service it did not ask for while
 * it was away is not credit it can spend later against tenants that kept
 * the fleet busy.
 *
 * What leaves the queue and how: lr__admit_take() (let out: charged),
 * lr__admit_cancel() (the host withdrew it: not charged) and
 * lr__admit_expire() (its deadline passed: not charged, returned so that
 * the owner can answer it; nothing is dropped silently).
 *
 * Memory is taken once, at init, for max_waiting requests and
 * max_tenants tenants; no other call allocates, so none can fail for
 * memory. A full queue refuses a push (LR_ELIMIT). A tenant with nothing
 * waiting keeps its counter while its slot is not needed; a new tenant
 * takes the slot idle longest when no slot is free (the lift above makes
 * forgetting an idle tenant's counter harmless). Every operation is
 * O(log n) in the requests or tenants waiting (expire: per request).
 *
 * Thread safety: one thread at a time. Never aborts, prints or allocates
 * outside the lr__mem given. */
#ifndef LIBROUTE_LIB_PARTS_ADMIT_H
#define LIBROUTE_LIB_PARTS_ADMIT_H

#include "common/common.h"
#include "common/table.h"

#define LR__ADMIT_BANDS 8u
#define LR__ADMIT_MAX_WAITING (1u << 24)
#define LR__ADMIT_MAX_TENANTS (1u << 20)

/* A request as the owner pushes it and gets it back. */
struct lr__admit_req {
    uint64_t id;          /* unique among the waiting */
    uint64_t tenant;      /* any value; the owner's tenant key */
    uint64_t cost;        /* charged to the tenant when let out */
    uint64_t arrival_ns;  /* the owner's, kept */
    uint64_t deadline_ns; /* expired from then on; 0: never */
    uint32_t band;        /* 0 (most urgent) .. bands - 1 */
    uint32_t flags;       /* the owner's, kept */
    void *data;           /* the owner's, kept */
    uint64_t size;        /* the owner's measure of it, summed per tenant */
};

struct lr__admit_ent {
    struct lr__admit_req q;
    uint64_t seq;        /* push order */
    uint32_t prev, next; /* the tenant's band list; next: free list too */
    uint32_t ten;        /* tenant slot */
    uint32_t dpos;       /* place in the deadline heap, LR_NIL if none */
};

struct lr__admit_ten {
    uint64_t tenant;
    uint64_t counter;
    uint32_t waiting; /* requests waiting, every band */
    uint64_t held;    /* their sizes */
    uint32_t head[LR__ADMIT_BANDS], tail[LR__ADMIT_BANDS];
    uint32_t hpos[LR__ADMIT_BANDS]; /* place in the band's heap, or LR_NIL */
    uint32_t iprev, inext;          /* idle list (waiting 0), or free list */
    uint8_t used;
};

struct lr__admit {
    struct lr__admit_ent *ent;
    struct lr__admit_ten *ten;
    uint32_t *dheap;                  /* entries by (deadline, seq) */
    uint32_t *bheap[LR__ADMIT_BANDS]; /* tenants by (counter, head seq) */
    uint32_t bn[LR__ADMIT_BANDS];     /* tenants in each band's heap */
    uint64_t last[LR__ADMIT_BANDS];   /* counter of the last to leave one */
    struct lr__table ids;             /* request id -> entry */
    struct lr__table tens;            /* tenant -> slot */
    uint64_t seed;                    /* keys both tables */
    uint64_t seq;
    uint32_t max_waiting, max_tenants, bands;
    uint32_t count;     /* requests waiting */
    uint32_t active;    /* tenants with requests waiting */
    uint32_t dn;        /* entries in dheap */
    uint32_t free_ent;  /* free list of entries (through next) */
    uint32_t free_ten;  /* free list of tenant slots (through inext) */
    uint32_t idle_head; /* idle tenants, idle longest first */
    uint32_t idle_tail;
};

/* Room for max_waiting requests (1 .. LR__ADMIT_MAX_WAITING) of at most
 * max_tenants tenants (1 .. LR__ADMIT_MAX_TENANTS) in `bands` bands
 * (1 .. LR__ADMIT_BANDS); hash_seed keys the tables (lr__hash_seed).
 * LR_EINVAL for a size out of range, LR_ENOMEM with nothing held. */
lr_status lr__admit_init(struct lr__admit *a, struct lr__mem *m,
                         uint32_t max_waiting, uint32_t max_tenants,
                         uint32_t bands, uint64_t hash_seed);
/* Free what init took; a zeroed or failed struct is fine. */
void lr__admit_free(struct lr__admit *a, struct lr__mem *m);

/* Queue r. LR_EINVAL: band out of range; LR_EEXIST: the id is waiting;
 * LR_ELIMIT: max_waiting are waiting, or r's tenant is new and every
 * tenant slot holds a tenant with requests waiting. A refused push
 * changes nothing. */
lr_status lr__admit_push(struct lr__admit *a, const struct lr__admit_req *r);
/* The request that goes out next (the order above) into *out, and its
 * place in that order is kept: LR_ENOENT when none waits. */
lr_status lr__admit_peek(const struct lr__admit *a, struct lr__admit_req *out);
/* Let request `id` out: removed, its tenant charged its cost. *out (may
 * be NULL) gets it. LR_ENOENT when it is not waiting. */
lr_status lr__admit_take(struct lr__admit *a, uint64_t id,
                         struct lr__admit_req *out);
/* Withdraw request `id`: removed, nothing charged. LR_ENOENT when it is
 * not waiting. */
lr_status lr__admit_cancel(struct lr__admit *a, uint64_t id,
                           struct lr__admit_req *out);
/* Remove up to `cap` requests whose deadline is at or before now_ns,
 * earliest deadline first (then push order), into out[]; returns how
 * many. Nothing charged. Call again while it returns cap. */
size_t lr__admit_expire(struct lr__admit *a, uint64_t now_ns,
                        struct lr__admit_req *out, size_t cap);
/* Whether request `id` waits (and a copy, when out is not NULL). */
bool lr__admit_find(const struct lr__admit *a, uint64_t id,
                    struct lr__admit_req *out);
/* Tenant `tenant`'s requests waiting and the sum of their sizes (0 and
 * 0 when it has no slot). */
void lr__admit_tenant(const struct lr__admit *a, uint64_t tenant,
                      uint32_t *waiting, uint64_t *held);
/* Whether a request waits in band `band` or a more urgent one. */
bool lr__admit_waits_upto(const struct lr__admit *a, uint32_t band);
/* Tenant `tenant`'s counter, or 0 when it has no slot. */
uint64_t lr__admit_counter(const struct lr__admit *a, uint64_t tenant);

/* Walk every invariant (lists, heaps, tables, counts): LR_OK or
 * LR_ECORRUPT. O(n log n); for tests and fuzzing. */
lr_status lr__admit_verify(const struct lr__admit *a);

#endif /* LIBROUTE_LIB_PARTS_ADMIT_H */
