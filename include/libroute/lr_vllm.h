/* libroute: vLLM KV-cache event batches (precise mode).
 *
 * A vLLM engine started with KV events enabled publishes, over ZMQ, one
 * msgpack payload per batch: [timestamp, [event, ...], data_parallel_rank]
 * (or the same as a map with keys "ts", "events", "data_parallel_rank").
 * Each event is either a positional array tagged by its type name
 * ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
 * lora_id, medium, lora_name, extra_keys, group_idx, ...], or a map with a
 * "type" key and named fields. Both encodings are decoded, at both levels;
 * unknown fields and trailing positional fields are ignored. The host owns
 * the socket: it passes each payload frame here.
 *
 * Engine block hashes may arrive as unsigned or signed integers or as
 * bytes; bytes are reduced to their last 8 bytes read big endian (the low
 * 64 bits of the digest as an integer), so one engine's events agree with
 * themselves whichever form it ships.
 *
 * Events this index cannot represent are skipped and counted, never
 * guessed at: blocks on another medium than the GPU (CPU offload), blocks
 * of a LoRA adapter, blocks with extra keys (multimodal inputs, cache
 * salts), KV-cache groups other than 0 or of a kind other than full
 * attention, and event types this version does not know.
 *
 * Thread safety: as the handle the batch is applied to (a router is
 * internally locked; an index is not). */
#ifndef LIBROUTE_LR_VLLM_H
#define LIBROUTE_LR_VLLM_H

#include "lr_common.h"
#include "lr_index.h"
#include "lr_router.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What a batch held and what was done with it. */
typedef struct lr_vllm_batch_info {
    size_t struct_size;
    /** The batch's timestamp (engine clock, seconds); 0 when absent. */
    double timestamp;
    /** Its data-parallel rank; -1 when absent. */
    int64_t dp_rank;
    /** Events in the batch. */
    uint32_t events;
    /** Events applied, by kind. */
    uint32_t stored;
    uint32_t removed;
    uint32_t cleared;
    /** BlockStored events whose parent block is unknown here (stored
     * before the router listened, or evicted since): not placeable, so
     * left out, as lr_index_kv_stored() does with LR_ENOENT. */
    uint32_t unplaced;
    /** Events skipped as not representable (see the file comment). */
    uint32_t skipped;
    /** Events processed, in order, before the call returned: all of them
     * on LR_OK; on a mid-batch LR_ELIMIT or LR_ENOMEM the events before
     * the failing one, which are applied. */
    uint32_t done;
    /* v1 ends here */
} lr_vllm_batch_info;

#define LR_VLLM_BATCH_INFO_SIZE_V1 (offsetof(lr_vllm_batch_info, done) + 4)

/** Zero the caller's `size` bytes of `info` and set struct_size = size. Use the
 * lr_vllm_batch_info_init() macro, which passes the caller's sizeof. @since 0.2
 */
LR_API void lr_vllm_batch_info_init_sized(lr_vllm_batch_info *info,
                                          size_t size);
#define lr_vllm_batch_info_init(info) \
    lr_vllm_batch_info_init_sized((info), sizeof *(info))

/** Apply one vLLM KV-event batch (a msgpack payload) from `instance` to an
 * index. The whole payload is decoded and checked before anything is
 * applied.
 * @param info  out, optional.
 * @return LR_OK; LR_EINVAL (NULL, instance LR_INSTANCE_NONE); LR_EVERSION
 *   (info too small); LR_ECORRUPT (not msgpack, not the schema, trailing
 *   bytes, absurd sizes: nothing applied); LR_ENOTSUP (an engine block
 *   size that is not a multiple of the index block size: nothing
 *   applied); LR_ELIMIT, LR_ENOMEM (the events before the failing one are
 *   applied, info->done says how many; applying the whole batch again is
 *   safe and ends in the state one uninterrupted call gives).
 * @since 0.1 */
LR_API lr_status lr_index_vllm_batch(lr_index *idx, uint32_t instance,
                                     const uint8_t *buf, size_t len,
                                     uint64_t now_ns, lr_vllm_batch_info *info);

/** lr_index_vllm_batch() on a router's index, under the router's lock.
 * @return as lr_index_vllm_batch(), except that an instance the router
 *   does not have, LR_INSTANCE_NONE included, is LR_ENOENT (as in every
 *   lr_router_* call that takes an id; a bare index has no instances to
 *   look up, so lr_index_vllm_batch() says LR_EINVAL for
 *   LR_INSTANCE_NONE); and LR_ERANGE (@since 0.2) when the router's clock
 *   refuses now_ns (see "Clock" in lr_router.h), judged after the
 *   instance. @since 0.1 */
LR_API lr_status lr_router_vllm_batch(lr_router *router, uint32_t instance,
                                      const uint8_t *buf, size_t len,
                                      uint64_t now_ns,
                                      lr_vllm_batch_info *info);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_VLLM_H */
