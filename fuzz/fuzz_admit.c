/* lr__admit (lib/parts/admit.h) as a sequence of operations, checked
 * against the naive model of tests/admit-model.h after every one (the
 * statuses, the requests returned, every tenant's counter, which ids wait,
 * and lr__admit_verify()), with injected allocation failures at init.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header  max waiting 1..AM_MAXW, tenant slots 1..AM_MAXT, bands
 *           1..LR__ADMIT_BANDS; allocation failure at init: mode (none,
 *           none, once, from then on) and which allocation 1..16
 *   op      push / take-next (peek, then take) / take / cancel / expire
 *           (0..4); then an id (0..2 * max waiting + 1), a tenant (0..slots
 *           + 3: more tenants than slots), a band (0..bands: one past the
 *           last), a cost (0, small, or near the top, so counters tie and
 *           saturate), a deadline (none, or now plus 0..31), a step of the
 *           clock 0..15 and expire's cap 1..8.
 * A failed init must leave nothing allocated; a successful one is the
 * only allocation: the operations run with every allocation failing. At
 * the end, freeing the queue returns every byte. */
#include <stdlib.h>

#include "../tests/admit-model.h"
#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index_util.h"

#define MAX_OPS 1024

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    uint32_t w = fuzz_dp_next_range(&dp, 1, AM_MAXW);
    uint32_t t = fuzz_dp_next_range(&dp, 1, AM_MAXT);
    uint32_t bands = fuzz_dp_next_range(&dp, 1, LR__ADMIT_BANDS);
    uint32_t mode = fuzz_dp_next_range(&dp, 0, 3);
    uint32_t fail_at = fuzz_dp_next_range(&dp, 1, 16);

    struct fuzz_oom oom = { .fail_at = mode >= 2 ? fail_at : 0,
                            .sticky = mode == 3 };
    lr_allocator al;
    fuzz_oom_allocator(&oom, &al);
    struct lr__mem mem;
    FUZZ_ASSERT(lr__mem_init(&mem, &al) == LR_OK);
    oom.armed = true;
    struct lr__admit a;
    lr_status st = lr__admit_init(&a, &mem, w, t, bands, 0x5eed);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ENOMEM);
    fuzz_trace("init(%u, %u, %u) = %s", w, t, bands, lr_status_name(st));
    if (st != LR_OK) {
        FUZZ_ASSERT(atomic_load(&mem.live) == 0);
        return 0;
    }
    /* nothing after init allocates */
    oom.fail_at = oom.count + 1;
    oom.sticky = true;

    struct am *m = malloc(sizeof *m);
    FUZZ_ASSERT(m != NULL);
    am_init(m, w, t, bands);
    uint32_t ids = 2 * w + 2, tenants = t + 4;
    uint64_t now = 0;
    for (int k = 0; k < MAX_OPS && !fuzz_dp_empty(&dp); k++) {
        int op = (int)fuzz_dp_next_range(&dp, 0, AM_N_OPS - 1);
        struct lr__admit_req q = { 0 };
        q.id = fuzz_dp_next_range(&dp, 0, ids - 1);
        q.tenant = fuzz_dp_next_range(&dp, 0, tenants - 1);
        q.band = fuzz_dp_next_range(&dp, 0, bands);
        switch (fuzz_dp_next_range(&dp, 0, 3)) {
        case 0:
            q.cost = 0;
            break;
        case 1:
        case 2:
            q.cost = fuzz_dp_next_range(&dp, 0, 255);
            break;
        default:
            q.cost = UINT64_MAX - fuzz_dp_next_range(&dp, 0, 255);
        }
        uint32_t dl = fuzz_dp_next_range(&dp, 0, 32);
        now += fuzz_dp_next_range(&dp, 0, 15);
        q.deadline_ns = dl == 32 ? 0 : now + dl;
        q.arrival_ns = now;
        q.flags = (uint32_t)k;
        q.size = q.cost & 0xff; /* summed per tenant: verify checks it */
        uint32_t cap = fuzz_dp_next_range(&dp, 1, 8);
        fuzz_trace(
            "op %d: %d id %llu tenant %llu band %u cost %llu "
            "deadline %llu now %llu cap %u",
            k, op, (unsigned long long)q.id, (unsigned long long)q.tenant,
            q.band, (unsigned long long)q.cost,
            (unsigned long long)q.deadline_ns, (unsigned long long)now, cap);
        FUZZ_ASSERT(am_step(m, &a, op, &q, now, cap, tenants, ids));
    }
    free(m);
    lr__admit_free(&a, &mem);
    FUZZ_ASSERT(atomic_load(&mem.live) == 0);
    return 0;
}
