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
 * LoRA adapters and cache salts (@since 0.3; skipped before). A
 * BlockStored with a lora_name is keyed as a router keys a request for
 * that adapter: under the salt lr_adapter_salt(tenant salt,
 * lr_name_hash(lora_name)), so it matches only that adapter's requests.
 * vLLM puts the adapter's name first in every block's extra keys, and a
 * request's cache_salt last in its prompt's first block: a store with no
 * parent whose first block's extra keys hold one string besides the
 * adapter's name, and whose other blocks hold nothing but that name, takes
 * lr_name_hash(that string) as its tenant salt. Route such a request with
 * lr_request.tenant_salt = lr_name_hash(cache_salt, its length) (0 when
 * it has none) and its adapter. A store with a parent continues the
 * parent's keys, salt and adapter included, so its extra keys may hold
 * the adapter's name only. (Older vLLM versions wrote a multimodal hash
 * as a bare string: one in a prompt's first block alone reads as a cache
 * salt, and those blocks land under a salt no request carries: they never
 * match.)
 *
 * Multimodal inputs (@since 0.3; skipped before). vLLM lists, after the
 * adapter's name, one tuple (identifier, offset) per input a block's
 * placeholder tokens overlap, offset counted from the block's first token
 * (negative for an input that began in an earlier block). Each block's
 * tuples give its lr_kv_stored.mm_hashes entry, so the store matches a
 * request that carries the same inputs at the same places
 * (lr_request.mm). Only where the engine's block is the index's
 * (block_size == block_tokens): an engine block of several index blocks
 * does not say which of them an input overlaps, and such a store is
 * skipped.
 *
 * Lower tiers (@since 0.3; skipped before). A store or removal whose
 * medium is "CPU" or "cpu" (vLLM's OffloadingConnector and LMCache write
 * "CPU", vLLM's Mooncake store connector "cpu") goes to the index's CPU
 * tier, "DISK" or "disk" to its disk tier (lr_kv_stored.tier). The
 * offloading connector's store carries no token ids (block size 0 or the
 * offloaded block's, parent nil): its engine hashes name blocks the
 * instance stored on the GPU, whose keys the tier takes; a store none of
 * whose hashes is known is counted in `unplaced`. A store with token ids
 * is keyed from them, chained on its parent (on the tier or the GPU); one
 * whose block size the index cannot place is skipped (not refused). A
 * removal on a tier removes there only; a GPU removal leaves the tiers'
 * copies. AllBlocksCleared clears every tier.
 *
 * Events this index cannot represent are skipped and counted, never
 * guessed at: blocks on a medium that is neither the GPU nor a lower tier
 * above, blocks
 * of an adapter known only by lora_id (an engine-local number no request
 * carries; vLLM before lora_name) or whose lora_name is empty, blocks
 * with other extra keys (prompt embeddings, a tuple that is not (string,
 * integer); any key but the adapter's name and the multimodal tuples past
 * a prompt's first block or in a store that continues a chain),
 * multimodal keys in engine blocks of several index blocks, KV-cache groups
 * other than 0 or of a kind other than full attention (`full_attention`, or
 * `mla_attention`, DeepSeek's latent attention, which vLLM counts as full
 * attention: applied), and event types this version does not know. A skipped
 * event is checked only as far as skipping needs: vLLM puts a sliding-window
 * group's store (its null blocks left out of the hashes) in the same batch as
 * the GPU stores, and those still apply. Removals and clears are unaffected:
 * they name engine hashes, which stand for whatever adapter and salt the
 * blocks were stored with.
 *
 * Data-parallel ranks: the batch's rank is reported in info and decides
 * nothing. Each rank is its own instance: subscribe to port + rank and
 * pass that rank's instance.
 *
 * A batch that is not msgpack, or not the schema's shape (no events
 * array; an event that is neither an array nor a map, or has no type
 * tag), is refused whole (LR_ECORRUPT). An event that is well framed but
 * whose fields do not add up (a field of the wrong type, token ids that
 * are not block_hashes x block_size, as vLLM 0.10 sends a sliding-window
 * group's store without its group_idx, extra keys that are not one
 * entry per block) is left out and counted in `invalid`; the rest of the
 * batch applies.
 *
 * Sequence numbers: each ZMQ message carries the batch's sequence number
 * (the second frame, 8 bytes big endian). A router applies the batches
 * of one engine in order with lr_router_vllm_batch_seq(): each at most
 * once, a gap reported for the host to replay, an engine restart dropping
 * that engine's routes first.
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
    /** Events of a type this index applies left out because their fields
     * do not add up (see the file comment). @since 0.2 */
    uint32_t invalid;
    /** lr_router_vllm_batch_seq() only (0 otherwise): what the batch's
     * sequence number made of it, an lr_kv_seq value. @since 0.2 */
    int32_t seq_state;
    /** lr_router_vllm_batch_seq() only: the sequence number the router
     * expects next from this source, after the call (on LR_EGAP: replay
     * from here). @since 0.2 */
    uint64_t next_seq;
    /* v2 ends here */
} lr_vllm_batch_info;

#define LR_VLLM_BATCH_INFO_SIZE_V1 (offsetof(lr_vllm_batch_info, done) + 4)
#define LR_VLLM_BATCH_INFO_SIZE_V2 (offsetof(lr_vllm_batch_info, next_seq) + 8)

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
 * @return LR_OK (events left out as skipped or invalid included: see
 *   info); LR_EINVAL (NULL, instance LR_INSTANCE_NONE); LR_EVERSION (info
 *   too small); LR_ECORRUPT (not msgpack, not the schema's shape, trailing
 *   bytes, absurd counts: nothing applied); LR_ENOTSUP (an event to apply
 *   whose engine block size is not a multiple of the index block size:
 *   nothing applied); LR_ELIMIT, LR_ENOMEM (the events before the
 *   failing one are applied, info->done says how many; applying the whole
 *   batch again is safe and ends in the state one uninterrupted call
 *   gives).
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

/** lr_router_vllm_batch() for batch number `seq` of the engine behind
 * `instance` (the ZMQ message's sequence frame): each batch is applied at
 * most once and in order (see lr_kv_seq and lr_router_kv_source()).
 *   - the first batch of a source (since its instance was added or
 *     reset), or the one expected next: applied;
 *   - a number already applied (a replay): ignored, LR_OK;
 *   - a number past the one expected: not applied, LR_EGAP; the host asks
 *     the engine to replay from info->next_seq (vLLM's replay socket), and
 *     live batches are refused the same way until the replay catches up;
 *   - a number already passed but a later timestamp than any applied: the
 *     engine restarted; its routes are dropped first, then the batch
 *     applies (LR_EGAP after the drop when it is not number 0: what came
 *     before it was lost).
 * A corrupt batch (LR_ECORRUPT, LR_ENOTSUP) counts as consumed: nothing of
 * it applies and the source moves past it. LR_ENOMEM, LR_ELIMIT or
 * LR_ERANGE (the clock) leave the source where it was, so the same call
 * can be repeated.
 * @param info  out, optional; seq_state and next_seq say what happened.
 * @return as lr_router_vllm_batch(), and LR_EGAP. @since 0.2 */
LR_API lr_status lr_router_vllm_batch_seq(lr_router *router, uint32_t instance,
                                          uint64_t seq, const uint8_t *buf,
                                          size_t len, uint64_t now_ns,
                                          lr_vllm_batch_info *info);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_VLLM_H */
