/* lr__table (lib/common/table.h) as a sequence of operations, checked against the
 * trivial model of tests/table-model.h (a linear scan of the owner's
 * array), under injected allocation failures.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header  expected size at init 0..TM_CAP; the seed of the crafted tag
 *           (a 32-bit value); allocation failure: mode (none, none, once,
 *           from then on) and which allocation 1..64
 *   op      TM_INSERT / TM_REMOVE / TM_FIND / TM_RESERVE / TM_REINIT
 *           (0..4), then a key 0..TM_KEYS-1 and an argument 0..65535
 *           (insert: where the free-value search starts; reserve: how
 *           many, mod TM_CAP + 1; reinit: the expected size, likewise)
 * Keys hash to a handful of tags (0, UINT32_MAX and its neighbour, two
 * around the middle, the seeded one) or, one in three, to a mixed hash,
 * so probe runs are long, wrap around the end and hold values whose tags
 * match but whose keys differ.
 *
 * After every operation: the table finds exactly what the model holds
 * (before the operation, for the key it names, and after inserts and
 * removes, for every key held), lr__table_verify() holds, the count
 * matches, a reserve that failed left the slots, size and count as they
 * were, and one that succeeded left room for what it was asked. At the
 * end, freeing the table returns every byte. */
#include <stdlib.h>

#include "../tests/table-model.h"
#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index_util.h"

#define MAX_OPS 512
#define MAX_ARG 65535u

static const char *const op_names[TM_N_OPS] = { "insert", "remove", "find",
                                                "reserve", "reinit" };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    uint32_t expect = fuzz_dp_next_range(&dp, 0, TM_CAP);
    uint32_t seed = fuzz_dp_next_u32(&dp);
    uint32_t mode = fuzz_dp_next_range(&dp, 0, 3);
    uint32_t fail_at = fuzz_dp_next_range(&dp, 1, 64);

    struct fuzz_oom oom = { .fail_at = mode >= 2 ? fail_at : 0,
                            .sticky = mode == 3 };
    lr_allocator a;
    fuzz_oom_allocator(&oom, &a);
    struct lr__mem mem;
    FUZZ_ASSERT(lr__mem_init(&mem, &a) == LR_OK);
    oom.armed = true;

    struct tm *m = malloc(sizeof *m);
    FUZZ_ASSERT(m != NULL);
    lr_status st = tm_init(m, &mem, expect, seed);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ENOMEM);
    fuzz_trace("init(expect %u) = %s", expect, lr_status_name(st));

    for (int i = 0; i < MAX_OPS && !fuzz_dp_empty(&dp); i++) {
        uint32_t op = fuzz_dp_next_range(&dp, 0, TM_N_OPS - 1);
        uint32_t key = fuzz_dp_next_range(&dp, 0, TM_KEYS - 1);
        uint32_t arg = fuzz_dp_next_range(&dp, 0, MAX_ARG);
        fuzz_trace("%s(key %u, arg %u): count %u, size %u", op_names[op], key,
                   arg, m->t.count, m->t.size);
        const char *err = tm_step(m, op, key, arg);
        if (err != NULL) {
            fprintf(stderr, "op %d %s(key %u, arg %u): %s\n", i, op_names[op],
                    key, arg, err);
            abort();
        }
    }
    fuzz_trace("end: count %u, size %u, %llu allocation(s) failed", m->t.count,
               m->t.size, (unsigned long long)oom.failures);
    tm_free(m);
    FUZZ_ASSERT(mem.live == 0);
    free(m);
    return 0;
}
