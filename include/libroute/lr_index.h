/** @file
 * lr_index: the block-aligned prefix index. It knows which engine instance
 * holds which token prefix in its KV cache.
 *
 * A prompt is cut into blocks of B tokens (B = block_tokens, 16 by default).
 * Block d's key chains a 64-bit XXH3 hash of its tokens onto block d-1's
 * key; block 0 chains onto a key derived from the tenant salt. One key
 * therefore names the whole prefix up to and including its block, and two
 * tenants never share a key. Keys are a pure function of (B, tokens, salt),
 * stable across processes and across releases of one key format (see
 * lr_block_keys()).
 *
 * The index holds *block routes*: (prefix key, instance) pairs. An instance
 * that holds a prefix of d blocks holds every shorter prefix of it too, and
 * the index never breaks that rule, not even when it evicts, so a match can
 * binary-search over the prompt's keys instead of probing every block.
 *
 * Routes come from three sources:
 * - lr_index_learn(): the gateway's own routing ("instance X will now hold
 *   this prompt"), trust LOCAL, or REMOTE when another replica told it;
 * - engine KV-cache events (precise mode): lr_index_kv_stored(),
 *   lr_index_kv_removed(), lr_index_kv_cleared();
 * - deltas exported by another gateway replica (lr_index_import_delta()),
 *   recorded as REMOTE.
 *
 * Lower tiers (@since 0.3): blocks an engine offloaded to host memory or
 * disk (lr_kv_stored.tier) are kept apart from the GPU's, one set of
 * routes per tier with the same keys, and answered by lr_index_match()
 * with LR_MATCH_TIER_CPU or LR_MATCH_TIER_DISK.
 *
 * Memory is bounded by capacity_blocks routes (per tier: a lower tier
 * used gets capacity_blocks and engine_map_capacity of its own, and
 * costs nothing until its first event). When full, the least
 * recently used routes go first, REMOTE before LOCAL (or by recency alone:
 * lr_index_options.eviction), always from the deep end of a prefix so
 * that no hole appears. An eviction trims a prefix back
 * to the nearest anchor: a boundary the host named when it learned (a
 * message end), a fork shared with another prefix, or an engine block
 * boundary. Routes unused for ttl_ns (host time) expire.
 *
 * Example:
 *   lr_index *idx;
 *   lr_index_options o = LR_INDEX_OPTIONS_INIT;
 *   o.capacity_blocks = 1u << 20;
 *   if (lr_index_create(&o, &idx) != LR_OK) ...
 *   lr_prompt p = LR_PROMPT_INIT;
 *   p.tokens = toks; p.n_tokens = n;
 *   lr_index_learn(idx, &p, instance_id, LR_TRUST_LOCAL, now_ns);
 *   lr_index_hit hits[64];
 *   lr_index_match_result m = LR_INDEX_MATCH_RESULT_INIT;
 *   m.hits = hits; m.hits_capacity = 64;
 *   lr_index_match(idx, &p, now_ns, 0, &m);
 *   // hits[0..m.n_hits) : instances with a cached prefix, deepest first
 *   lr_index_destroy(idx);
 *
 * Thread safety: one thread at a time per index. Callers may move an index
 * between threads but must not share it without a lock. lr_block_keys() is
 * reentrant.
 */
#ifndef LIBROUTE_LR_INDEX_H
#define LIBROUTE_LR_INDEX_H

#include "lr_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lr_index lr_index; /* opaque */

/** Trust of a route: what the gateway saw itself (LOCAL) or was told by a
 * peer replica (REMOTE). Under memory pressure REMOTE routes go first.
 * Stored in int32_t fields. @since 0.1 */
typedef enum lr_trust {
    LR_TRUST_LOCAL = 0,
    LR_TRUST_REMOTE = 1
} lr_trust;

/** Which routes memory pressure takes first (lr_index_options.eviction).
 * Stored in int32_t fields. @since 0.2 */
typedef enum lr_eviction {
    /** REMOTE routes before any LOCAL one, each kind least recently used
     * first (Ranvier: a peer's word is worth less than one's own). */
    LR_EVICT_REMOTE_FIRST = 0,
    /** The least recently used route, REMOTE or LOCAL: for replicas that
     * share one view of the fleet (deltas of each other's placements),
     * where a peer's fresh placement is worth more than one's own stale
     * one, as the engines' own LRU caches treat them. */
    LR_EVICT_LRU = 1
} lr_eviction;

/** The memory tier of an engine's KV cache a block is on (vLLM's
 * `medium`): the GPU's own cache, or a lower tier an offloading connector
 * copied it to (vLLM's OffloadingConnector and LMCache: host memory,
 * "CPU"; a disk tier, "DISK"). A hit on a lower tier costs the engine a
 * transfer, not a recompute. Stored in int32_t fields (lr_kv_stored.tier).
 * @since 0.3 */
typedef enum lr_tier {
    LR_TIER_GPU = 0,
    LR_TIER_CPU = 1,
    LR_TIER_DISK = 2
} lr_tier;

/** Largest prompt the index accepts, in tokens; longer ones are LR_EINVAL.
 * @since 0.1 */
#define LR_INDEX_MAX_TOKENS (1u << 26)
/** Largest block size in tokens. @since 0.1 */
#define LR_INDEX_MAX_BLOCK_TOKENS 4096u
/** Largest capacity_blocks. @since 0.1 */
#define LR_INDEX_MAX_CAPACITY (1ull << 31)
/** Largest max_instances. @since 0.1 */
#define LR_INDEX_MAX_INSTANCES 65534u

/** Options fixed at creation. Size-prefixed: set struct_size (the INIT
 * macro or lr_index_options_init() does). Zero in a numeric field means the
 * default. @since 0.1 */
typedef struct lr_index_options {
    size_t struct_size;
    /** Borrowed for the call and copied; NULL means libc. */
    const lr_allocator *allocator;
    /** Seed of the in-process hash tables (defence against hash flooding).
     * 0 (the default): a random one from the operating system (getrandom;
     * @since 0.2, in 0.1 a fixed constant). Set it only to reproduce a
     * table layout: a seed a client knows lets it aim keys at one spot.
     * Does not affect block keys, which are the same in every process,
     * nor anything the index answers. */
    uint64_t seed;
    /** Most block routes held at once; default 1048576, at most
     * LR_INDEX_MAX_CAPACITY. Memory grows with use up to this bound. */
    uint64_t capacity_blocks;
    /** Routes unused this long (host nanoseconds) expire; default 3600 s;
     * UINT64_MAX means never. Resolution is 2^24 ns (about 16.8 ms). */
    uint64_t ttl_ns;
    /** Tokens per block; default 16, at most LR_INDEX_MAX_BLOCK_TOKENS. */
    uint32_t block_tokens;
    /** Distinct instance ids the index will track; default 1024, at most
     * LR_INDEX_MAX_INSTANCES. */
    uint32_t max_instances;
    /** LOCAL learns remembered for lr_index_export_delta(); default 4096;
     * UINT32_MAX disables the journal (every export is then full). */
    uint32_t journal_capacity;
    /** Engine-hash entries kept for precise mode, over all instances;
     * 0 (what lr_index_options_init() leaves): 2 * capacity_blocks; at
     * most 2 * LR_INDEX_MAX_CAPACITY.
     * An entry lives exactly while its instance holds its block: evicting,
     * expiring or removing the block forgets the hash (0.1 kept stale
     * entries until room was needed). Entries outnumber routes only when
     * one block is stored under several engine hashes (the same tokens
     * with different engine extra keys: give those different tenant
     * salts); while entries fill the bound, lr_index_kv_stored() returns
     * LR_ELIMIT. */
    uint64_t engine_map_capacity;
    /* v1 ends here; fields are only ever appended. */
    /** This gateway replica's id, stamped on every exported delta (0:
     * none). lr_index_import_delta() ignores a delta that carries it: a
     * replica's own deltas echoed back by the bus. Give every process
     * incarnation its own id (a random 64-bit number at start). @since 0.2 */
    uint64_t replica_id;
    /** REMOTE routes (imported from other replicas, or learned with
     * LR_TRUST_REMOTE) unused this long expire; 0: ttl_ns; UINT64_MAX:
     * never. A replica's word about another's placements is worth less
     * with age than its own. Resolution 2^24 ns. @since 0.2 */
    uint64_t remote_ttl_ns;
    /** An lr_eviction: what goes first when the index is full; default
     * LR_EVICT_REMOTE_FIRST. Other values are LR_EINVAL. @since 0.2 */
    int32_t eviction;
    /* v2 ends here */
    /** How far ahead of the newest timestamp the index has taken a call's
     * now_ns may be (nanoseconds); one further ahead is refused with
     * LR_ERANGE and changes nothing, as the router's clock does
     * (lr_router.h, "Clock": a host clock that really moved is taken at
     * its second call); every timestamp past LR_MAX_TIME_NS is refused,
     * the first too. 0: 60 s; UINT64_MAX: only the LR_MAX_TIME_NS bound
     * (an owner that judges the timestamps itself, as the router does).
     * @since 0.3 */
    uint64_t clock_skew_ns;
    /* v3 ends here */
} lr_index_options;

#define LR_INDEX_OPTIONS_SIZE_V1 \
    (offsetof(lr_index_options, engine_map_capacity) + sizeof(uint64_t))
#define LR_INDEX_OPTIONS_SIZE_V2 \
    (offsetof(lr_index_options, eviction) + sizeof(int32_t))
#define LR_INDEX_OPTIONS_SIZE_V3 \
    (offsetof(lr_index_options, clock_skew_ns) + sizeof(uint64_t))
#ifndef __cplusplus
#define LR_INDEX_OPTIONS_INIT \
    { .struct_size = sizeof(lr_index_options) }
#endif

/** Zero the caller's `size` bytes of `opt`, stamp struct_size = size and
 * set the defaults. Use the lr_index_options_init() macro, which passes
 * sizeof *opt as the caller's compiler sees it. @since 0.2 */
LR_API void lr_index_options_init_sized(lr_index_options *opt, size_t size);
#define lr_index_options_init(opt) \
    lr_index_options_init_sized((opt), sizeof *(opt))

/** Create an index.
 * @param opt  borrowed; NULL means all defaults.
 * @param out  out: the new index, or NULL on failure.
 * @return LR_OK; LR_EINVAL (NULL out, option out of range); LR_EVERSION
 *   (struct_size smaller than LR_INDEX_OPTIONS_SIZE_V1); LR_ENOMEM.
 * Thread safety: reentrant. @since 0.1 */
LR_API lr_status lr_index_create(const lr_index_options *opt, lr_index **out);

/** Destroy an index and everything it holds. NULL is a no-op. @since 0.1 */
LR_API void lr_index_destroy(lr_index *idx);

/* ---- keys ------------------------------------------------------------------ */

/** Compute the chained block keys of a token sequence: keys[d] names the
 * prefix made of blocks 0..d. Only complete blocks get a key.
 *
 * key[-1] = XXH3_64bits_withSeed(salt as 8 little-endian bytes,
 *                                0x4c52544e414e5431 "LRTNANT1")
 * g[d]    = XXH3_64bits_withSeed(tokens of block d as little-endian uint32,
 *                                0x4c52424c4f434b32 "LRBLOCK2")
 * x       = (key[d-1] ^ g[d]) * 0x9e3779b97f4a7c15 (mod 2^64)
 * key[d]  = x rotated by 32 bits
 *
 * This is key format 2 (0.2); 0.1's format 1 seeded each block's hash with
 * the previous key. Deltas carry keys, so their wire version is 2 too.
 *
 * @param block_tokens  1..LR_INDEX_MAX_BLOCK_TOKENS.
 * @param tokens        borrowed; may be NULL when n_tokens is 0.
 * @param keys          out, capacity entries; may be NULL to ask the size.
 * @param n_keys        out: floor(n_tokens / block_tokens).
 * @return LR_OK; LR_EINVAL; LR_EBUFSIZE when capacity < *n_keys (nothing
 *   written).
 * Thread safety: reentrant. @since 0.1 */
LR_API lr_status lr_block_keys(uint32_t block_tokens, const uint32_t *tokens,
                               size_t n_tokens, uint64_t tenant_salt,
                               uint64_t *keys, size_t capacity, size_t *n_keys);

/** The 64-bit hash of a name (a model, a LoRA adapter, a cache salt) as
 * the library keys it: XXH3_64bits_withSeed(the len bytes of name,
 * 0x4c524e414d453031 "LRNAME01"); 0 when len is 0 (no name), and never 0
 * otherwise (a hash of 0 becomes 1). name may be NULL when len is 0.
 * Thread safety: reentrant. @since 0.3 */
LR_API uint64_t lr_name_hash(const char *name, size_t len);

/** The salt a prompt's blocks are keyed with under a LoRA adapter whose
 * lr_name_hash() is adapter_hash: tenant_salt itself when adapter_hash is
 * 0 (the base model), else XXH3_64bits_withSeed(tenant_salt and
 * adapter_hash as 8 little-endian bytes each, 0x4c52414441505431
 * "LRADAPT1"). A router keys each request this way, and a KV event
 * carrying a lora_name the same, so an adapter's blocks match only that
 * adapter's. Thread safety: reentrant. @since 0.3 */
LR_API uint64_t lr_adapter_salt(uint64_t tenant_salt, uint64_t adapter_hash);

/** Largest lr_mm_input.identifier, in bytes. @since 0.3 */
#define LR_INDEX_MAX_MM_IDENTIFIER 255u

/** The key a multimodal input adds to one block, as vLLM lists it in the
 * block's extra keys: the tuple (identifier, offset), offset being the
 * input's first placeholder token minus the block's first token (negative
 * when the input began in an earlier block). XXH3_64bits_withSeed(
 * lr_name_hash(identifier, len) and offset as 8 little-endian bytes each,
 * 0x4c524d4d4b455931 "LRMMKEY1"). A block's multimodal hash is the XOR of
 * its keys' hashes (0 with none); it is XORed into the block's token hash
 * g[d] before the chain step (lr_block_keys()), so the same placeholder
 * tokens with another input, or the input at another place, never match.
 * Thread safety: reentrant. @since 0.3 */
LR_API uint64_t lr_mm_key_hash(const char *identifier, size_t len,
                               int64_t offset);

/** One multimodal input of a prompt (an image, an audio clip): its
 * placeholder tokens are [offset, offset + length) of the prompt, and
 * `identifier` (NUL-terminated, 1..LR_INDEX_MAX_MM_IDENTIFIER bytes) is
 * the engine's name for its data: vLLM's mm_feature.identifier, the hash
 * of the input's data, or the uuid the client gave it
 * (multi_modal_uuids). Each full block the placeholder overlaps gets
 * lr_mm_key_hash(identifier, offset - the block's first token). Not
 * size-prefixed: its layout is fixed. @since 0.3 */
typedef struct lr_mm_input {
    const char *identifier;
    uint32_t offset;
    uint32_t length;
} lr_mm_input;

/* ---- prompts --------------------------------------------------------------- */

/** A prompt as the index sees it. Everything is borrowed for the call.
 * @since 0.1 */
typedef struct lr_prompt {
    size_t struct_size;
    /** Token ids; may be NULL when keys is given. */
    const uint32_t *tokens;
    /** Prompt length in tokens; at most LR_INDEX_MAX_TOKENS. */
    size_t n_tokens;
    /** Message ends as token offsets, ascending, each <= n_tokens; each is
     * aligned down to a block. Used by learn; ignored by match. */
    const uint32_t *boundaries;
    size_t n_boundaries;
    /** Enters every key: prefixes of different tenants never match. */
    uint64_t tenant_salt;
    /** Optional precomputed keys from lr_block_keys() (same block size and
     * salt). When set, tokens is not read and n_keys must equal
     * n_tokens / block_tokens: a host routes and learns one prompt while
     * hashing it once. */
    const uint64_t *keys;
    size_t n_keys;
    /* v1 ends here */
    /** Its multimodal inputs, n_mm of them, by ascending offset, none
     * overlapping another, each inside the prompt (length >= 1); their
     * keys enter the blocks they overlap (lr_mm_input). Not with keys
     * (lr_block_keys() knows no inputs): both set is LR_EINVAL. @since
     * 0.3 */
    const lr_mm_input *mm;
    size_t n_mm;
    /* v2 ends here */
} lr_prompt;

#define LR_PROMPT_SIZE_V1 (offsetof(lr_prompt, n_keys) + sizeof(size_t))
#define LR_PROMPT_SIZE_V2 (offsetof(lr_prompt, n_mm) + sizeof(size_t))
#ifndef __cplusplus
#define LR_PROMPT_INIT \
    { .struct_size = sizeof(lr_prompt) }
#endif
/** Zero the caller's `size` bytes of `p`, stamp struct_size = size and
 * set the defaults. Use the lr_prompt_init() macro, which passes
 * sizeof *p as the caller's compiler sees it. @since 0.2 */
LR_API void lr_prompt_init_sized(lr_prompt *p, size_t size);
#define lr_prompt_init(p) lr_prompt_init_sized((p), sizeof *(p))

/* ---- learn and match ------------------------------------------------------- */

/** Record that `instance` now holds the prompt: the prefix at each boundary
 * (aligned down to a block) and at the full length (also aligned down).
 * Boundaries become eviction anchors. Already-held blocks are refreshed;
 * a LOCAL learn upgrades REMOTE routes on the path. If the prompt has more
 * blocks than capacity_blocks, only the first capacity_blocks are learned.
 * Cost: O(prompt length) hashing, about log2(blocks) lookups, and then
 * O(runs on the path + boundaries + new blocks): recording that an instance
 * holds a prefix others already hold does not cost one step per block.
 * @param instance  host-chosen id, any value but LR_INSTANCE_NONE.
 * @param trust     LR_TRUST_LOCAL (journaled for export) or LR_TRUST_REMOTE.
 * @return LR_OK; LR_EINVAL (NULL, bad boundaries, absurd length, bad trust);
 *   LR_EVERSION; LR_ELIMIT (max_instances distinct ids already tracked);
 *   LR_ENOMEM. On failure the index is unchanged.
 * @since 0.1 */
LR_API lr_status lr_index_learn(lr_index *idx, const lr_prompt *prompt,
                                uint32_t instance, int32_t trust,
                                uint64_t now_ns);

/** One instance's cached prefix for a prompt. @since 0.1 */
typedef struct lr_index_hit {
    uint32_t instance;
    /** Leading tokens cached there, a multiple of block_tokens, > 0. */
    uint32_t tokens;
} lr_index_hit;

/** Size of the 0.1 lr_index_hit: the least stride a caller may give.
 * @since 0.2 */
#define LR_INDEX_HIT_SIZE_V1 (offsetof(lr_index_hit, tokens) + 4)

/** Result of a match. The caller provides the hits buffer. @since 0.1 */
typedef struct lr_index_match_result {
    size_t struct_size;
    /** Caller buffer; may be NULL when hits_capacity is 0. */
    lr_index_hit *hits;
    size_t hits_capacity;
    /** Out: instances with a non-zero match, sorted by tokens descending,
     * then instance ascending. When n_hits > hits_capacity the call returns
     * LR_EBUFSIZE, writes no hit and touches nothing. */
    size_t n_hits;
    /** Out: the deepest match over all instances, in tokens. */
    uint64_t deepest_tokens;
    /** Out: complete blocks in the prompt. */
    uint64_t prompt_blocks;
    /* v1 ends here */
    /** In: the caller's sizeof(lr_index_hit), the stride of `hits`, at
     * least LR_INDEX_HIT_SIZE_V1 (LR_EINVAL otherwise); 0 means
     * LR_INDEX_HIT_SIZE_V1, the 0.1 size. @since 0.2 */
    size_t hit_size;
    /* v2 ends here */
} lr_index_match_result;

#define LR_INDEX_MATCH_RESULT_SIZE_V1 \
    (offsetof(lr_index_match_result, prompt_blocks) + sizeof(uint64_t))
#define LR_INDEX_MATCH_RESULT_SIZE_V2 \
    (offsetof(lr_index_match_result, hit_size) + sizeof(size_t))
#ifndef __cplusplus
#define LR_INDEX_MATCH_RESULT_INIT                    \
    {                                                 \
        .struct_size = sizeof(lr_index_match_result), \
        .hit_size = sizeof(lr_index_hit)              \
    }
#endif
/** Zero the caller's `size` bytes of `r` and stamp struct_size = size
 * (hit_size stays 0: the 0.1 size). Use the lr_index_match_result_init()
 * macro, which passes sizeof *r and sets hit_size to sizeof(lr_index_hit)
 * as the caller's compiler sees them (it evaluates `r` twice).
 * @since 0.2 */
LR_API void lr_index_match_result_init_sized(lr_index_match_result *r,
                                             size_t size);
#define lr_index_match_result_init(r)                    \
    (lr_index_match_result_init_sized((r), sizeof *(r)), \
     (void)((r)->hit_size = sizeof(lr_index_hit)))

/** lr_index_match() flag: do not refresh the matched routes' recency (a dry
 * run). Expired routes are still dropped. @since 0.1 */
#define LR_MATCH_NO_TOUCH 1u
/** lr_index_match() flags: answer for the routes of a lower tier (the
 * blocks the instances hold there, from lr_kv_stored.tier) instead of the
 * GPU's; at most one of them. Every prefix of a tier is its own: an
 * instance's depth there counts the blocks above its GPU copy too. With
 * no lower-tier event yet, no hit. @since 0.3 */
#define LR_MATCH_TIER_CPU 2u
#define LR_MATCH_TIER_DISK 4u

/** For every instance, the longest block-aligned prefix of the prompt it
 * holds. Hashing is O(prompt length); lookups are a binary search over the
 * prompt's keys, about log2(blocks) probes, then one step per run on the
 * matched path (holders are kept per run, not per block).
 * Matched routes are refreshed (least recently used goes first on eviction)
 * unless flags has LR_MATCH_NO_TOUCH. Expired routes are dropped first.
 * @return LR_OK; LR_EINVAL; LR_EVERSION; LR_EBUFSIZE (n_hits says how many
 *   are needed; the index is unchanged apart from expiry); LR_ENOMEM (the
 *   key scratch, or a refresh that needs room; unchanged apart from
 *   expiry).
 * @since 0.1 */
LR_API lr_status lr_index_match(lr_index *idx, const lr_prompt *prompt,
                                uint64_t now_ns, uint32_t flags,
                                lr_index_match_result *result);

/** Drop every route of an instance and forget its id (and its engine-hash
 * map), on every tier. O(runs and spans of the index).
 * @return LR_OK; LR_ENOENT when the index never saw the id. @since 0.1 */
LR_API lr_status lr_index_remove_instance(lr_index *idx, uint32_t instance);

/** Drop every route whose recency is older than now_ns - ttl_ns. Match and
 * learn do this too; a host with idle periods may call it from a timer.
 * @return LR_OK; LR_EINVAL (NULL). @since 0.1 (0.1 returned void) */
LR_API lr_status lr_index_expire(lr_index *idx, uint64_t now_ns);

/* ---- precise mode: engine KV-cache events ---------------------------------- */

/** An engine's BlockStored event (vLLM schema): `n_blocks` engine blocks
 * of `block_size` tokens each, chained on `parent_hash` when has_parent.
 * The index recomputes its own keys from the token ids and remembers engine
 * hash -> key so later removals resolve. block_size must be a multiple of
 * the index's block_tokens (one engine block then spans several index
 * blocks); other sizes are LR_ENOTSUP. @since 0.1 */
typedef struct lr_kv_stored {
    size_t struct_size;
    const uint64_t *block_hashes; /* n_blocks engine hashes, borrowed */
    size_t n_blocks;
    uint64_t parent_hash;      /* engine hash of the block before */
    int32_t has_parent;        /* 0: the first block starts the prompt */
    uint32_t block_size;       /* engine tokens per block */
    const uint32_t *token_ids; /* n_blocks * block_size tokens, borrowed */
    size_t n_tokens;
    uint64_t tenant_salt; /* as in lr_prompt (a LoRA, say) */
    /* v1 ends here */
    /** An lr_tier: the tier the engine stored the blocks on (0, the GPU,
     * in a v1 struct). A lower-tier store (LR_TIER_CPU, LR_TIER_DISK)
     * goes to that tier's routes, which only the router's rows read
     * (lr_candidate.cpu_tokens) and lr_index_match() answers with
     * LR_MATCH_TIER_CPU or LR_MATCH_TIER_DISK:
     *   - with no token ids (n_tokens 0: vLLM's OffloadingConnector sends
     *     none, and block size 0 or 16), each engine hash names a block
     *     this instance stored on the GPU (or on that tier) before: its
     *     own key and every key above it come from there; block_size,
     *     parent_hash, tenant_salt and mm_hashes are not read. A hash the index
     *     does not know (never stored on the GPU, or forgotten since) is
     *     left out; when none is known the call is LR_ENOENT;
     *   - with token ids (LMCache, Mooncake), as a GPU store, its parent
     *     found among the instance's blocks on that tier or on the GPU.
     * The tier's routes hold the whole chain from the first block, as an
     * engine that offloads what it computed does. Other values are
     * LR_EINVAL. @since 0.3 */
    int32_t tier;
    /* v2 ends here */
    /** NULL, or n_blocks entries: block j's multimodal hash, the XOR of
     * lr_mm_key_hash() over the (identifier, offset) pairs vLLM's
     * extra_keys list for it (0: none). A nonzero one needs block_size
     * == block_tokens (else LR_ENOTSUP): an engine block that spans
     * several index blocks does not say which of them an input overlaps.
     * Borrowed. @since 0.3 */
    const uint64_t *mm_hashes;
    /* v3 ends here */
} lr_kv_stored;

#define LR_KV_STORED_SIZE_V1 (offsetof(lr_kv_stored, tenant_salt) + 8)
#define LR_KV_STORED_SIZE_V2 (offsetof(lr_kv_stored, tier) + 4)
#define LR_KV_STORED_SIZE_V3 \
    (offsetof(lr_kv_stored, mm_hashes) + sizeof(void *))
#ifndef __cplusplus
#define LR_KV_STORED_INIT \
    { .struct_size = sizeof(lr_kv_stored) }
#endif
/** Zero the caller's `size` bytes of `ev`, stamp struct_size = size and
 * set the defaults. Use the lr_kv_stored_init() macro, which passes
 * sizeof *ev as the caller's compiler sees it. @since 0.2 */
LR_API void lr_kv_stored_init_sized(lr_kv_stored *ev, size_t size);
#define lr_kv_stored_init(ev) lr_kv_stored_init_sized((ev), sizeof *(ev))

/** Apply a BlockStored event for `instance`. The routes are LOCAL and each
 * engine block end is an anchor. Blocks already held are refreshed. A
 * lower tier's store (ev->tier) goes to that tier's routes (see
 * lr_kv_stored.tier); a tier is made at its first event.
 * @return LR_OK; LR_EINVAL (NULL, n_tokens != n_blocks * block_size,
 *   absurd sizes, a tier out of range); LR_EVERSION (struct_size too
 *   small); LR_ENOTSUP (block_size not a multiple of block_tokens);
 *   LR_ENOENT (has_parent and the parent hash is unknown for this
 *   instance: the event cannot be placed, nothing changes; a lower-tier
 *   store without tokens none of whose hashes is known); LR_ELIMIT
 *   (max_instances or engine_map_capacity reached); LR_ENOMEM. On failure
 *   the index is unchanged (a lower-tier store without tokens whose
 *   hashes lie on several chains keeps the chains it applied before an
 *   LR_ENOMEM or LR_ELIMIT; vLLM sends one chain a store).
 * @since 0.1 */
LR_API lr_status lr_index_kv_stored(lr_index *idx, uint32_t instance,
                                    const lr_kv_stored *ev, uint64_t now_ns);

/** Apply a BlockRemoved event: the engine dropped these blocks. A removed
 * block takes every deeper block of that instance with it (the engine can
 * no longer hit them either). Unknown hashes are skipped: an engine
 * reports removals of blocks stored before the index listened.
 * One exception, for an index that also learns its routes (a gateway that
 * takes the engines' events and learns at dispatch, or imports peers'
 * deltas): when the instance holds below the removed block a route the
 * engine never stored (a leaf with no engine hash of it on its last
 * engine block: a request routed there whose prefill has not been
 * stored), the block and what lies below stay and only the block's
 * engine hashes go, since that prefill will store the block again
 * (@since 0.3). The engine block's size is the instance's last GPU
 * store's (one index block until its first store after a restore). An
 * index fed by events alone never holds such a route: nothing changes.
 * @param n_resolved  out, optional: how many hashes were known.
 * @return LR_OK; LR_EINVAL; LR_ENOENT for an instance never seen.
 * @since 0.1 */
LR_API lr_status lr_index_kv_removed(lr_index *idx, uint32_t instance,
                                     const uint64_t *block_hashes,
                                     size_t n_blocks, size_t *n_resolved);

/** lr_index_kv_removed() for the blocks the engine dropped from one tier
 * (an lr_tier): LR_TIER_GPU is lr_index_kv_removed(); a lower tier drops
 * them (and the deeper blocks of the instance there) from that tier's
 * routes only. A GPU removal leaves the lower tiers' copies, as an
 * engine's offloaded copy outlives the GPU's.
 * @return LR_OK; LR_EINVAL (NULL, a tier out of range); LR_ENOENT for an
 *   instance never seen on any tier. @since 0.3 */
LR_API lr_status lr_index_kv_removed_tier(lr_index *idx, uint32_t instance,
                                          int32_t tier,
                                          const uint64_t *block_hashes,
                                          size_t n_blocks, size_t *n_resolved);

/** Apply AllBlocksCleared: drop every route and engine hash of the
 * instance, on every tier (vLLM's reset of the prefix cache; forgetting a
 * lower tier the engine kept only costs hits); the instance stays known.
 * @return LR_OK; LR_EINVAL; LR_ENOENT for an instance never seen.
 * @since 0.1 */
LR_API lr_status lr_index_kv_cleared(lr_index *idx, uint32_t instance);

/* ---- deltas between gateway replicas --------------------------------------- */

/** Position of the LOCAL-learn journal. Pass it to a later
 * lr_index_export_delta() to get what was learned since. Never fails on a
 * non-NULL index. @since 0.1 */
LR_API uint64_t lr_index_mark(const lr_index *idx);

/** Export what was learned LOCALLY since `since_mark` (0: everything held
 * LOCAL) as a versioned, checksummed, little-endian blob: the exporting
 * replica's id (lr_index_options.replica_id), the journal marks it covers
 * (since_mark, *mark_out], the distinct prefix chains once each, then
 * (instance, prefix) routes. REMOTE routes are never exported: what a
 * replica imported goes back to nobody (no echo between replicas). Routes
 * evicted since are left out. When the journal no longer reaches back to
 * since_mark, the export holds every LOCAL route instead, which is always
 * a superset. Incremental exports carry what lr_index_learn() learned;
 * routes from engine KV events reach peers through the engine's own event
 * stream (each replica subscribes to every engine) and appear only in full
 * exports. A learn whose deep end was evicted before the export is left
 * out of an incremental export (the journal names the deepest block); a
 * full export carries whatever of it remains.
 * @param out       out: a blob for lr_blob_destroy().
 * @param mark_out  out, optional: the mark to pass next time.
 * @return LR_OK; LR_EINVAL (NULL, since_mark in the future); LR_ENOMEM.
 * The index is never changed. @since 0.1 */
LR_API lr_status lr_index_export_delta(const lr_index *idx, uint64_t since_mark,
                                       lr_blob **out, uint64_t *mark_out);

/** Apply a delta from another replica: its routes become REMOTE routes
 * here (LOCAL routes stay LOCAL), expiring after remote_ttl_ns unused.
 * Instance ids must mean the same instance on both replicas (hosts derive
 * them from instance names). A delta carrying this index's own replica id
 * changes nothing. Deltas of format version 2 (no replica id, no ages)
 * are accepted; 0.1's (version 1, format-1 block keys) get LR_EVERSION.
 * The index keeps no per-peer state: a router's
 * lr_router_import_delta() also ignores a delta it applied already.
 * @return LR_OK; LR_EINVAL (NULL); LR_ECORRUPT (malformed, truncated,
 *   checksum mismatch, or a chain that contradicts this index);
 *   LR_EVERSION (unknown format version); LR_ENOTSUP (other block size);
 *   LR_ELIMIT (more new instance ids than free slots, or more
 *   (instance, prefix) pairs than capacity_blocks); LR_ENOMEM.
 *   On failure the index is unchanged.
 * @since 0.1 */
LR_API lr_status lr_index_import_delta(lr_index *idx, const uint8_t *buf,
                                       size_t len, uint64_t now_ns);

/* ---- queries --------------------------------------------------------------- */

/** Counters of an index. @since 0.1 */
typedef struct lr_index_stats {
    size_t struct_size;
    uint64_t blocks;         /* block routes held now */
    uint64_t remote_blocks;  /* of which REMOTE */
    uint64_t prefixes;       /* distinct prefix keys held by anyone */
    uint64_t instances;      /* instance ids tracked */
    uint64_t engine_hashes;  /* live engine hashes; counting walks the map */
    uint64_t bytes;          /* bytes the index has allocated (lower
                                tiers included, @since 0.3) */
    uint64_t evicted_blocks; /* cumulative: dropped for capacity */
    uint64_t expired_blocks; /* cumulative: dropped by TTL */
    uint64_t learned_blocks; /* cumulative: routes added */
    /* v1 ends here */
} lr_index_stats;

#define LR_INDEX_STATS_SIZE_V1 \
    (offsetof(lr_index_stats, learned_blocks) + sizeof(uint64_t))

/** Read the counters. Set stats->struct_size first.
 * @return LR_OK; LR_EINVAL; LR_EVERSION. @since 0.1 */
LR_API lr_status lr_index_get_stats(const lr_index *idx, lr_index_stats *stats);

/** Block routes held by one instance.
 * @return LR_OK; LR_EINVAL; LR_ENOENT for an instance never seen.
 * @since 0.1 */
LR_API lr_status lr_index_instance_blocks(const lr_index *idx,
                                          uint32_t instance, uint64_t *out);

/** Tokens per block of this index. Never fails on non-NULL. @since 0.1 */
LR_API uint32_t lr_index_block_tokens(const lr_index *idx);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_INDEX_H */
