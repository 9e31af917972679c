/* lr_index_vllm_batch() on untrusted bytes: the whole input is one msgpack
 * payload from an engine, applied for instance 3 of an index that already
 * holds a few stored chains (engine hashes 1..4 on instance 3), so that
 * BlockStored events naming those parents reach the apply path.
 *
 * Properties: the status is a documented one; LR_ECORRUPT and LR_ENOTSUP
 * leave the digest unchanged; the info counters add up to the events
 * processed; lr__index_verify() holds; the same input applied to a fresh
 * index again gives the same status and digest (no hidden state). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_helpers.h"
#include "index/index.h"
#include "index_util.h"
#include "libroute/lr_vllm.h"

#define INST 3u

static lr_index *
fresh(void)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = 16;
    o.capacity_blocks = 4096;
    o.max_instances = 8;
    o.engine_map_capacity = 4096;
    o.seed = 7;
    lr_index *ix = NULL;
    lr_status st = lr_index_create(&o, &ix);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    /* hashes 1..4: one chain of four 16-token engine blocks */
    uint32_t tok[64];
    for (uint32_t i = 0; i < 64; i++)
        tok[i] = i * 7 + 1;
    uint64_t h[4] = { 1, 2, 3, 4 };
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = h;
    ev.n_blocks = 4;
    ev.block_size = 16;
    ev.token_ids = tok;
    ev.n_tokens = 64;
    st = lr_index_kv_stored(ix, INST, &ev, FUZZ_T0);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    return ix;
}

static void
one(const uint8_t *data, size_t size, lr_status *st_out, uint64_t *dig_out)
{
    lr_index *ix = fresh();
    uint64_t d0 = lr__index_digest(ix);
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    lr_status st = lr_index_vllm_batch(ix, INST, data, size, FUZZ_T0, &info);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ECORRUPT ||
                               st == LR_ENOTSUP || st == LR_ELIMIT ||
                               st == LR_ENOMEM);
    if (st == LR_ECORRUPT || st == LR_ENOTSUP) {
        FUZZ_ASSERT(lr__index_digest(ix) == d0);
        FUZZ_ASSERT(info.stored + info.removed + info.cleared + info.unplaced +
                        info.skipped + info.invalid ==
                    0);
    } else {
        FUZZ_ASSERT(info.done <= info.events);
        FUZZ_ASSERT(st != LR_OK || info.done == info.events);
        FUZZ_ASSERT(info.stored + info.removed + info.cleared + info.unplaced +
                        info.skipped + info.invalid ==
                    info.done);
    }
    FUZZ_VERIFY(ix);
    *st_out = st;
    *dig_out = lr__index_digest(ix);
    lr_index_destroy(ix);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lr_status s1, s2;
    uint64_t d1, d2;
    one(data, size, &s1, &d1);
    one(data, size, &s2, &d2);
    FUZZ_ASSERT(s1 == s2 && d1 == d2);
    return 0;
}
