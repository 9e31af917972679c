/* Internal view of lr_index for tests, fuzzers and the router.
 *
 * lib/index/ is layered: a file includes the private headers of the layers
 * below its own only, and calls only into them (tests/abi/include-layers.py
 * and call-layers.py hold it so). From the bottom:
 *
 *   index_store   the layout and its primitives: pools, reservation, time,
 *                 instances, nodes and runs, spans, LRU lists, scratch
 *   index_find    the read-only search of a prompt's keys
 *   index_emap    the engine-hash map of precise mode
 *   index_keys    block keys, prompt checks
 *   index_evict   trims, expiry, eviction (settle), clearing an instance
 *   index_learn   the learn's plan and apply, the journal, lr_index_learn
 *   index_match   lr_index_match, lr__index_peek
 *   index_kv, index_delta, index_check, index_state, index_life, vllm
 *                 the features on top (KV events, deltas, verify and
 *                 digest, snapshots, the handle, the vLLM decoder)
 *
 * This header is the folder's face: it declares what the rest of lib/ and
 * the tests use, and the files that define it include it. */
#ifndef LIBROUTE_LIB_INDEX_H
#define LIBROUTE_LIB_INDEX_H

#include "common/common.h"
#include "libroute/lr_index.h"

/* Lower tiers of the KV cache (lr_tier): LR_TIER_CPU and LR_TIER_DISK,
 * each an index of its own inside the GPU's (index_kv.c). */
#define LR__LOWER_TIERS 2

/* The routes of lower tier `tier` (LR_TIER_CPU, LR_TIER_DISK) of idx: an
 * index of the same block size and keys, or NULL while the tier has seen
 * no event (or for another tier value). A router peeks at it as at idx
 * itself (lr__index_peek, the same scratch), under the same lock; its
 * expiry is idx's (lr__index_expiry_due and lr_index_expire cover it). */
const lr_index *lr__index_tier(const lr_index *idx, int32_t tier);

/* A lower tier's index for idx, its time base at now_ns (index_life.c).
 * LR_ENOMEM. */
lr_status lr__index_lower_new(const lr_index *idx, uint64_t now_ns,
                              lr_index **out);

/* Walk every invariant (prefix property, child counts, LRU membership,
 * hash table contents, counters). LR_OK or LR_ECORRUPT. O(size). */
lr_status lr__index_verify(const lr_index *idx);

/* Checksum of the logical state (routes, flags, recency, LRU order,
 * instances, engine hashes, journal, counters); equal before and after a
 * failed call. O(size). */
uint64_t lr__index_digest(const lr_index *idx);

/* Deepest prefix (in blocks) that `instance` holds for these keys, with no
 * touch; for differential tests. */
uint32_t lr__index_depth_of(const lr_index *idx, uint32_t instance,
                            const uint64_t *keys, uint32_t n_keys);

/* One block route as the block-by-block semantics see it (for the naive
 * model tests): the prefix's key and its parent's (0 at the root), its
 * depth, the instance id, its flags, its child count (children held by the
 * same instance) and its recency stamp (ticks of 2^24 ns). */
#define LR__HOLD_LISTED 1u
#define LR__HOLD_REMOTE 2u
#define LR__HOLD_ANCHOR 4u
struct lr__hold_view {
    uint64_t key, parent_key;
    uint32_t depth, instance, flags, children, stamp;
};

/* Every route (in no particular order), then every listed route of the
 * LOCAL list and of the REMOTE list from head to tail (list 0 and 1). */
void lr__index_holds(const lr_index *idx,
                     void (*hold)(void *ctx, const struct lr__hold_view *h),
                     void (*listed)(void *ctx, int list, uint64_t key,
                                    uint32_t instance),
                     void *ctx);

/* Number of binary-search probes the last match made (bench/tests). */
uint32_t lr__index_last_probes(const lr_index *idx);

/* The bytes of the handle's own struct (its counters, time base, clock,
 * list heads, pointers and the match's scratch generation): a test that a
 * reader wrote nothing compares them before and after. */
const void *lr__index_raw(const lr_index *idx, size_t *size);

/* ---- concurrent readers ----
 *
 * lr_index is one thread at a time, except lr__index_peek() and
 * lr__index_expiry_due(): any number of threads may call them at once on
 * one index while no thread calls anything else on it (a read lock around
 * them, a write lock around every other call). */

/* What a match writes as it works, sized for an index's max_instances;
 * one per reading thread. */
struct lr__match_scratch;

/* A prompt's keys under a tenant salt: its first nblocks, with the
 * multimodal inputs mm (checked by lr__index_mm_check()). */
void lr__index_input_keys(uint64_t salt, const uint32_t *tok, size_t nblocks,
                          uint32_t B, const lr_mm_input *mm, size_t n_mm,
                          uint64_t *out);
/* Multimodal inputs of a prompt of n_tokens: LR_OK or LR_EINVAL (NULL
 * with a count, an identifier NULL, empty or too long, an empty input,
 * inputs out of order, overlapping or past the prompt). */
lr_status lr__index_mm_check(const lr_mm_input *mm, size_t n_mm,
                             size_t n_tokens);

/* A scratch for idx's peeks, from allocator mem: lr__index_mem(idx) (its
 * bytes then count as the index's: call it where the index may be
 * written) or the caller's own. Free it from the same allocator (NULL is
 * accepted). LR_EINVAL, LR_ENOMEM. */
lr_status lr__index_scratch_new(const lr_index *idx, struct lr__mem *mem,
                                struct lr__match_scratch **out);
void lr__index_scratch_free(struct lr__mem *mem,
                            struct lr__match_scratch *scratch);

/* Whether a mutator at host time now_ns would change the index before its
 * own work: true when no call has set the time base yet (the first one
 * does), or when a route is expired at now_ns (the tail of an LRU list).
 * O(1); reads only. */
bool lr__index_expiry_due(const lr_index *idx, uint64_t now_ns);

/* lr_index_match(idx, a prompt whose block keys are keys[0, n_keys),
 * now_ns, LR_MATCH_NO_TOUCH, result), writing nothing in idx: no expiry,
 * no time, no probe count, no scratch of its own (scratch is the caller's,
 * from lr__index_scratch_new for this index). Precondition: expiry is not
 * due at now_ns (lr__index_expiry_due); then its hits are lr_index_match's.
 * LR_OK; LR_EBUFSIZE (n_hits says how many; no hit written); LR_EINVAL
 * (NULL, keys NULL with n_keys, n_keys > LR_INDEX_MAX_TOKENS, a scratch
 * for fewer instances, a bad hits buffer); LR_EVERSION (result's
 * struct_size); LR_ERANGE (now_ns refused by the index's clock, judged as
 * a query: a jump ahead waits for a writer to take it); LR_ESTATE (expiry
 * due: the caller runs lr_index_expire(), or a match, as a writer first).
 * Thread safety: see above. */
lr_status lr__index_peek(const lr_index *idx, const uint64_t *keys,
                         size_t n_keys, uint64_t now_ns,
                         struct lr__match_scratch *scratch,
                         lr_index_match_result *result);

/* A peek that reports only the deepest holders: what a large fleet's
 * route weighs (router/route.c). In: `enough`, `defer`. The walk up the
 * prompt's path (index_match.c) reads a run's holders whole, and stops
 * before the next run once it has `enough` hits, or before a run of more
 * than `defer` holders (of the deepest run, it reports those that reach
 * the prompt's deepest node if at most `defer` do, after a read of each
 * holder's extent): every holder it did not report holds less of the
 * prompt than every one it did, or as much when none was reported. Out: `node`,
 * where the holders not reported begin (LR_NIL: every holder was reported). */
struct lr__peek_cut {
    uint32_t enough, defer;
    uint32_t node;
};

/* lr__index_peek with a cut (NULL: every holder, as lr__index_peek). The
 * hits reported are the deepest, in the same order. */
lr_status lr__index_peek_cut(const lr_index *idx, const uint64_t *keys,
                             size_t n_keys, uint64_t now_ns,
                             struct lr__match_scratch *scratch,
                             struct lr__peek_cut *cut,
                             lr_index_match_result *result);

/* After a cut peek in scratch: how many blocks of the prompt instance id
 * holds from cut node `node` up (0: none, or it was reported already, or
 * it was asked already: each instance is answered once per peek). Reads
 * the index; O(runs on the path x log holders). */
uint32_t lr__index_depth_below(const lr_index *idx,
                               struct lr__match_scratch *scratch, uint32_t node,
                               uint32_t id);

/* After a cut peek in scratch: up to `cap` holders of the prompt from
 * node `node` up, as hits (the blocks each holds) into out, and how
 * many, none reported or asked before (each is remembered as asked):
 * every holder of each run up the path while the run's holders fit in
 * what is left of cap, then, from the first run of more, as many as are
 * left spread evenly over its holders from a start drawn from seed.
 * O(cap + the holders of the runs read whole). */
uint32_t lr__index_sample_at(const lr_index *idx,
                             struct lr__match_scratch *scratch, uint32_t node,
                             uint64_t seed, uint32_t cap, lr_index_hit *out);

/* The deepest node of the prompt anyone holds (LR_NIL: none): a cut
 * node again after the index changed. Reads the index. */
uint32_t lr__index_deepest_node(const lr_index *idx, const uint64_t *keys,
                                size_t n_keys);

/* The index's allocator (for callers' scratch owned by the same host). */
struct lr__mem *lr__index_mem(lr_index *idx);

/* Judge a call's now_ns by the index's clock (lr_index_options
 * clock_skew_ns; common.h, "the clock") before the call changes anything:
 * LR_OK or LR_ERANGE. The time is taken when the call commits (its
 * first lr__index_tick). */
lr_status lr__index_judge(lr_index *idx, uint64_t now_ns);

/* lr_index_import_delta() restricted to the routes whose instance id
 * keep(ctx, id) accepts (keep NULL: all); the others are skipped as if the
 * delta did not carry them, so they take no instance slot. With a key the
 * delta must be sealed with it (wire.h). Same contract otherwise: on
 * failure the index is unchanged. */
lr_status lr__index_import_delta_if(lr_index *idx, const uint8_t *buf,
                                    size_t len, uint64_t now_ns,
                                    bool (*keep)(void *, uint32_t), void *ctx,
                                    const uint8_t *key);

/* The hash the node table keys `key` with (the handle's seed mixed in):
 * tests aim keys at one spot of the table with it, as a client who knew
 * the seed could. */
uint64_t lr__index_key_hash(const lr_index *idx, uint64_t key);

/* The node table's count, size, longest and summed probe lengths of the
 * values held (lr__table_probe_stats) and its re-salts: flooding tests
 * count work instead of timing it. O(size). */
void lr__index_node_table_stats(const lr_index *idx, uint32_t *count,
                                uint32_t *size, uint32_t *max_probe,
                                uint64_t *sum_probe, uint32_t *resalts);

/* A delta's header, checked (magic, version, checksum or the MAC under
 * key when not NULL, since <= mark): its origin replica (0 for a 0.1
 * delta), the journal marks it covers and its header size. LR_ECORRUPT,
 * LR_EVERSION. */
lr_status lr__index_delta_peek(const uint8_t *buf, size_t len,
                               const uint8_t *key, uint64_t *origin,
                               uint64_t *since, uint64_t *mark, size_t *header);

/* The index's whole logical state for a snapshot: every route with its
 * trust, anchor flag and recency, the engine-hash map, the time base.
 * Representation-independent (prefix chains, holds per prefix). The index
 * is not changed. */
lr_status lr__index_save(const lr_index *idx, uint64_t now_ns, lr_blob **out);

/* Load a state written by lr__index_save into an index that holds no
 * route (a fresh one), at host time now_ns. Instance ids must fit the
 * index's max_instances. LR_ECORRUPT (malformed, or an impossible state:
 * a hold without its parent, a LOCAL hold under a REMOTE one, ...),
 * LR_EVERSION, LR_ENOTSUP (block size), LR_ELIMIT (more routes than the
 * capacity, more instances than max_instances), LR_ESTATE (the index is
 * not empty), LR_ENOMEM. On failure the index may hold part of the state:
 * the caller discards it. */
lr_status lr__index_load(lr_index *idx, const uint8_t *buf, size_t len,
                         uint64_t now_ns);

#endif
