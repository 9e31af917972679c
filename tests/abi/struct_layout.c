/* struct-abi (STYLE B13, B20.2): the published layout of every public struct
 * is frozen here and checked against the current headers at compile time.
 *
 * Each struct_<name>_v1 below is a copy of the struct as released in 0.1.
 * NEVER edit a frozen copy. When a release appends fields to a size-prefixed
 * struct, add a struct_<name>_v2 copy with the new fields and a matching
 * block of checks, and keep the v1 block: a program built against v1 must
 * keep working with every later library.
 *
 * What is checked, for each field of each frozen copy:
 *   - same offset (offsetof), same size, same type (via _Generic);
 * and for each struct:
 *   - size-prefixed structs: the current struct is at least as large as the
 *     frozen one (fields are only appended) and LR_<T>_SIZE_V1 equals the
 *     end of the frozen copy's last field;
 *   - plain structs (lr_allocator, lr_bounds, lr_index_hit, lr_score,
 *     lr_move): the size is exactly the frozen size, since they are
 *     copied, returned by value or laid out in caller arrays and therefore
 *     can never grow;
 * plus the values of the status codes and the other ABI constants, and at
 * run time that the library's version matches the headers it was built
 * with. A failure here means an ABI break: revert it, or bump the soname as
 * docs/abi.md describes. */
#include <libroute.h>

#include <stdio.h>
#include <string.h>

/* ---- checking macros ------------------------------------------------------ */

#define SAME_TYPE(expr, type) _Generic((expr), type : 1, default : 0)

/* Field `f` of the current struct `cur` has the frozen offset, size and
 * type. */
#define FIELD(cur, frozen, f, type)                                          \
    _Static_assert(offsetof(cur, f) == offsetof(struct frozen, f),           \
                   #cur "." #f ": offset changed");                          \
    _Static_assert(sizeof(((cur *)0)->f) == sizeof(((struct frozen *)0)->f), \
                   #cur "." #f ": size changed");                            \
    _Static_assert(SAME_TYPE(((cur *)0)->f, type),                           \
                   #cur "." #f ": type changed");                            \
    _Static_assert(SAME_TYPE(((struct frozen *)0)->f, type),                 \
                   #cur "." #f ": frozen copy and check disagree")

/* A size-prefixed struct: may grow at the end, never shrink; its SIZE_V1
 * macro marks the end of the last v1 field. */
#define SIZED(cur, frozen, size_v1, last)                               \
    _Static_assert(offsetof(cur, struct_size) == 0,                     \
                   #cur ": struct_size must come first");               \
    _Static_assert(sizeof(cur) >= sizeof(struct frozen),                \
                   #cur ": smaller than its v1 layout");                \
    _Static_assert((size_v1) == offsetof(struct frozen, last) +         \
                                    sizeof(((struct frozen *)0)->last), \
                   #size_v1 ": does not end at the v1 last field")

/* A struct that is copied whole: its size is frozen. */
#define FIXED(cur, frozen)                                   \
    _Static_assert(sizeof(cur) == sizeof(struct frozen),     \
                   #cur ": size changed");                   \
    _Static_assert(_Alignof(cur) == _Alignof(struct frozen), \
                   #cur ": alignment changed")

/* ---- lr_common.h ------------------------------------------------------------ */

typedef void *(*alloc_fn)(void *, size_t);
typedef void *(*realloc_fn)(void *, void *, size_t, size_t);
typedef void (*free_fn)(void *, void *, size_t);

struct lr_allocator_v1 {
    alloc_fn alloc;
    realloc_fn realloc;
    free_fn free;
    void *ud;
};
FIELD(lr_allocator, lr_allocator_v1, alloc, alloc_fn);
FIELD(lr_allocator, lr_allocator_v1, realloc, realloc_fn);
FIELD(lr_allocator, lr_allocator_v1, free, free_fn);
FIELD(lr_allocator, lr_allocator_v1, ud, void *);
FIXED(lr_allocator, lr_allocator_v1);

/* lr_status travels as int32_t (lr_bounds.status since 0.2: the same
 * four bytes as the enum field of 0.1), so its size is ABI too. */
_Static_assert(sizeof(lr_status) == sizeof(int32_t),
               "lr_status must stay 32 bits (built with -fshort-enums?)");

/* 0.1 had `lr_status status` and four bytes of padding where 0.2 has
 * `int32_t flags`: the same layout. */
struct lr_bounds_v1 {
    int32_t status;
    int32_t flags;
    double lo;
    double hi;
    double def;
};
FIELD(lr_bounds, lr_bounds_v1, status, int32_t);
FIELD(lr_bounds, lr_bounds_v1, flags, int32_t);
FIELD(lr_bounds, lr_bounds_v1, lo, double);
FIELD(lr_bounds, lr_bounds_v1, hi, double);
FIELD(lr_bounds, lr_bounds_v1, def, double);
FIXED(lr_bounds, lr_bounds_v1);

/* Status codes are append-only (B9): existing values never change. */
_Static_assert(LR_OK == 0, "LR_OK renumbered");
_Static_assert(LR_EINVAL == 1, "LR_EINVAL renumbered");
_Static_assert(LR_ENOMEM == 2, "LR_ENOMEM renumbered");
_Static_assert(LR_ERANGE == 3, "LR_ERANGE renumbered");
_Static_assert(LR_ENOENT == 4, "LR_ENOENT renumbered");
_Static_assert(LR_EEXIST == 5, "LR_EEXIST renumbered");
_Static_assert(LR_ELIMIT == 6, "LR_ELIMIT renumbered");
_Static_assert(LR_ECORRUPT == 7, "LR_ECORRUPT renumbered");
_Static_assert(LR_EVERSION == 8, "LR_EVERSION renumbered");
_Static_assert(LR_ENOTSUP == 9, "LR_ENOTSUP renumbered");
_Static_assert(LR_ESTATE == 10, "LR_ESTATE renumbered");
_Static_assert(LR_EBUFSIZE == 11, "LR_EBUFSIZE renumbered");
_Static_assert(LR_EGAP == 12, "LR_EGAP renumbered");

/* ---- lr_index.h ------------------------------------------------------------- */

struct lr_index_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    uint64_t seed;
    uint64_t capacity_blocks;
    uint64_t ttl_ns;
    uint32_t block_tokens;
    uint32_t max_instances;
    uint32_t journal_capacity;
    uint64_t engine_map_capacity;
};
FIELD(lr_index_options, lr_index_options_v1, struct_size, size_t);
FIELD(lr_index_options, lr_index_options_v1, allocator, const lr_allocator *);
FIELD(lr_index_options, lr_index_options_v1, seed, uint64_t);
FIELD(lr_index_options, lr_index_options_v1, capacity_blocks, uint64_t);
FIELD(lr_index_options, lr_index_options_v1, ttl_ns, uint64_t);
FIELD(lr_index_options, lr_index_options_v1, block_tokens, uint32_t);
FIELD(lr_index_options, lr_index_options_v1, max_instances, uint32_t);
FIELD(lr_index_options, lr_index_options_v1, journal_capacity, uint32_t);
FIELD(lr_index_options, lr_index_options_v1, engine_map_capacity, uint64_t);
SIZED(lr_index_options, lr_index_options_v1, LR_INDEX_OPTIONS_SIZE_V1,
      engine_map_capacity);

struct lr_prompt_v1 {
    size_t struct_size;
    const uint32_t *tokens;
    size_t n_tokens;
    const uint32_t *boundaries;
    size_t n_boundaries;
    uint64_t tenant_salt;
    const uint64_t *keys;
    size_t n_keys;
};
FIELD(lr_prompt, lr_prompt_v1, struct_size, size_t);
FIELD(lr_prompt, lr_prompt_v1, tokens, const uint32_t *);
FIELD(lr_prompt, lr_prompt_v1, n_tokens, size_t);
FIELD(lr_prompt, lr_prompt_v1, boundaries, const uint32_t *);
FIELD(lr_prompt, lr_prompt_v1, n_boundaries, size_t);
FIELD(lr_prompt, lr_prompt_v1, tenant_salt, uint64_t);
FIELD(lr_prompt, lr_prompt_v1, keys, const uint64_t *);
FIELD(lr_prompt, lr_prompt_v1, n_keys, size_t);
SIZED(lr_prompt, lr_prompt_v1, LR_PROMPT_SIZE_V1, n_keys);
/* 0.3: multimodal inputs, appended; lr_mm_input is copied whole */
_Static_assert(offsetof(lr_prompt, mm) == LR_PROMPT_SIZE_V1 &&
                   LR_PROMPT_SIZE_V2 ==
                       offsetof(lr_prompt, n_mm) + sizeof(size_t),
               "lr_prompt: 0.3 appended mm, n_mm");
struct lr_mm_input_v1 {
    const char *identifier;
    uint32_t offset;
    uint32_t length;
};
FIXED(lr_mm_input, lr_mm_input_v1);
FIELD(lr_mm_input, lr_mm_input_v1, identifier, const char *);
FIELD(lr_mm_input, lr_mm_input_v1, offset, uint32_t);
FIELD(lr_mm_input, lr_mm_input_v1, length, uint32_t);

struct lr_index_hit_v1 {
    uint32_t instance;
    uint32_t tokens;
};
FIELD(lr_index_hit, lr_index_hit_v1, instance, uint32_t);
FIELD(lr_index_hit, lr_index_hit_v1, tokens, uint32_t);
FIXED(lr_index_hit, lr_index_hit_v1);

struct lr_index_match_result_v1 {
    size_t struct_size;
    lr_index_hit *hits;
    size_t hits_capacity;
    size_t n_hits;
    uint64_t deepest_tokens;
    uint64_t prompt_blocks;
};
FIELD(lr_index_match_result, lr_index_match_result_v1, struct_size, size_t);
FIELD(lr_index_match_result, lr_index_match_result_v1, hits, lr_index_hit *);
FIELD(lr_index_match_result, lr_index_match_result_v1, hits_capacity, size_t);
FIELD(lr_index_match_result, lr_index_match_result_v1, n_hits, size_t);
FIELD(lr_index_match_result, lr_index_match_result_v1, deepest_tokens,
      uint64_t);
FIELD(lr_index_match_result, lr_index_match_result_v1, prompt_blocks, uint64_t);
SIZED(lr_index_match_result, lr_index_match_result_v1,
      LR_INDEX_MATCH_RESULT_SIZE_V1, prompt_blocks);
/* 0.2 appended the hits' stride. */
struct lr_index_match_result_v2 {
    struct lr_index_match_result_v1 v1;
    size_t hit_size;
};
_Static_assert(offsetof(lr_index_match_result, hit_size) ==
                   offsetof(struct lr_index_match_result_v2, hit_size),
               "lr_index_match_result.hit_size: offset changed");
_Static_assert(LR_INDEX_MATCH_RESULT_SIZE_V2 ==
                   offsetof(struct lr_index_match_result_v2, hit_size) +
                       sizeof(size_t),
               "LR_INDEX_MATCH_RESULT_SIZE_V2: does not end at hit_size");
_Static_assert(LR_INDEX_HIT_SIZE_V1 == 8 && LR_SCORE_SIZE_V1 == 16,
               "the 0.1 array element sizes");

struct lr_kv_stored_v1 {
    size_t struct_size;
    const uint64_t *block_hashes;
    size_t n_blocks;
    uint64_t parent_hash;
    int32_t has_parent;
    uint32_t block_size;
    const uint32_t *token_ids;
    size_t n_tokens;
    uint64_t tenant_salt;
};
FIELD(lr_kv_stored, lr_kv_stored_v1, struct_size, size_t);
FIELD(lr_kv_stored, lr_kv_stored_v1, block_hashes, const uint64_t *);
FIELD(lr_kv_stored, lr_kv_stored_v1, n_blocks, size_t);
FIELD(lr_kv_stored, lr_kv_stored_v1, parent_hash, uint64_t);
FIELD(lr_kv_stored, lr_kv_stored_v1, has_parent, int32_t);
FIELD(lr_kv_stored, lr_kv_stored_v1, block_size, uint32_t);
FIELD(lr_kv_stored, lr_kv_stored_v1, token_ids, const uint32_t *);
FIELD(lr_kv_stored, lr_kv_stored_v1, n_tokens, size_t);
FIELD(lr_kv_stored, lr_kv_stored_v1, tenant_salt, uint64_t);
SIZED(lr_kv_stored, lr_kv_stored_v1, LR_KV_STORED_SIZE_V1, tenant_salt);
/* 0.3: the tier, appended */
_Static_assert(offsetof(lr_kv_stored, tier) ==
                   offsetof(struct lr_kv_stored_v1, tenant_salt) + 8,
               "lr_kv_stored.tier: not right after tenant_salt");
_Static_assert(LR_KV_STORED_SIZE_V2 == offsetof(lr_kv_stored, tier) + 4,
               "LR_KV_STORED_SIZE_V2: does not end at tier");
_Static_assert(offsetof(lr_kv_stored, mm_hashes) >= LR_KV_STORED_SIZE_V2 &&
                   LR_KV_STORED_SIZE_V3 ==
                       offsetof(lr_kv_stored, mm_hashes) + sizeof(void *),
               "lr_kv_stored: 0.3 appended mm_hashes after tier");
_Static_assert(LR_TIER_GPU == 0 && LR_TIER_CPU == 1 && LR_TIER_DISK == 2,
               "lr_tier values");
/* 0.3: the adapter and lower-tier columns of lr_candidate end at
 * disk_tokens, right after the adapter's */
_Static_assert(offsetof(lr_candidate, cpu_tokens) ==
                       offsetof(lr_candidate, adapter_evicts) + 4 &&
                   offsetof(lr_candidate, disk_tokens) ==
                       offsetof(lr_candidate, cpu_tokens) + 4,
               "lr_candidate: the tier columns moved");
_Static_assert(LR_CANDIDATE_SIZE_V3 == offsetof(lr_candidate, disk_tokens) + 4,
               "LR_CANDIDATE_SIZE_V3: does not end at disk_tokens");
/* 0.3: the role and placement after them */
_Static_assert(offsetof(lr_candidate, role) == LR_CANDIDATE_SIZE_V3 &&
                   offsetof(lr_candidate, node) ==
                       offsetof(lr_candidate, role) + 4 &&
                   offsetof(lr_candidate, rack) ==
                       offsetof(lr_candidate, node) + 4 &&
                   offsetof(lr_candidate, region) ==
                       offsetof(lr_candidate, rack) + 4,
               "lr_candidate: role and placement moved");
_Static_assert(LR_CANDIDATE_SIZE_V4 == offsetof(lr_candidate, region) + 4,
               "LR_CANDIDATE_SIZE_V4: does not end at region");
/* 0.3: adaptive's decode seconds after them, 8-aligned */
_Static_assert(offsetof(lr_candidate, decode_s) ==
                       ((LR_CANDIDATE_SIZE_V4 + 7) & ~(size_t)7) &&
                   LR_CANDIDATE_SIZE_V5 ==
                       offsetof(lr_candidate, decode_s) + 8,
               "lr_candidate: decode_s moved");
/* 0.3: the sibling columns after it */
_Static_assert(offsetof(lr_candidate, sibling_tokens) == LR_CANDIDATE_SIZE_V5 &&
                   offsetof(lr_candidate, sibling_fork_tokens) ==
                       LR_CANDIDATE_SIZE_V5 + 4 &&
                   offsetof(lr_candidate, sibling_lost) ==
                       LR_CANDIDATE_SIZE_V5 + 8 &&
                   LR_CANDIDATE_SIZE_V6 ==
                       offsetof(lr_candidate, sibling_lost) + 8 &&
                   sizeof(lr_candidate) == LR_CANDIDATE_SIZE_V6,
               "lr_candidate: the sibling columns moved");
_Static_assert(LR_ROLE_BOTH == 0 && LR_ROLE_PREFILL == 1 &&
                   LR_ROLE_DECODE == 2,
               "lr_role values");

struct lr_index_stats_v1 {
    size_t struct_size;
    uint64_t blocks;
    uint64_t remote_blocks;
    uint64_t prefixes;
    uint64_t instances;
    uint64_t engine_hashes;
    uint64_t bytes;
    uint64_t evicted_blocks;
    uint64_t expired_blocks;
    uint64_t learned_blocks;
};
FIELD(lr_index_stats, lr_index_stats_v1, struct_size, size_t);
FIELD(lr_index_stats, lr_index_stats_v1, blocks, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, remote_blocks, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, prefixes, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, instances, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, engine_hashes, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, bytes, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, evicted_blocks, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, expired_blocks, uint64_t);
FIELD(lr_index_stats, lr_index_stats_v1, learned_blocks, uint64_t);
SIZED(lr_index_stats, lr_index_stats_v1, LR_INDEX_STATS_SIZE_V1,
      learned_blocks);

_Static_assert(LR_TRUST_LOCAL == 0, "LR_TRUST_LOCAL renumbered");
_Static_assert(LR_TRUST_REMOTE == 1, "LR_TRUST_REMOTE renumbered");
_Static_assert(LR_MATCH_NO_TOUCH == 1u, "LR_MATCH_NO_TOUCH changed");
_Static_assert(LR_INSTANCE_NONE == UINT32_MAX, "LR_INSTANCE_NONE changed");

/* ---- lr_load.h -------------------------------------------------------------- */

struct lr_load_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    uint32_t max_instances;
    uint32_t max_requests;
    double rtt_alpha;
};
FIELD(lr_load_options, lr_load_options_v1, struct_size, size_t);
FIELD(lr_load_options, lr_load_options_v1, allocator, const lr_allocator *);
FIELD(lr_load_options, lr_load_options_v1, max_instances, uint32_t);
FIELD(lr_load_options, lr_load_options_v1, max_requests, uint32_t);
FIELD(lr_load_options, lr_load_options_v1, rtt_alpha, double);
SIZED(lr_load_options, lr_load_options_v1, LR_LOAD_OPTIONS_SIZE_V1, rtt_alpha);

struct lr_dispatch_v1 {
    size_t struct_size;
    uint64_t request_id;
    uint32_t instance;
    uint32_t prompt_tokens;
    uint32_t cached_tokens;
    uint32_t expected_output_tokens;
    uint32_t alt_instance;
    uint32_t alt_cached_tokens;
    uint64_t now_ns;
};
FIELD(lr_dispatch, lr_dispatch_v1, struct_size, size_t);
FIELD(lr_dispatch, lr_dispatch_v1, request_id, uint64_t);
FIELD(lr_dispatch, lr_dispatch_v1, instance, uint32_t);
FIELD(lr_dispatch, lr_dispatch_v1, prompt_tokens, uint32_t);
FIELD(lr_dispatch, lr_dispatch_v1, cached_tokens, uint32_t);
FIELD(lr_dispatch, lr_dispatch_v1, expected_output_tokens, uint32_t);
FIELD(lr_dispatch, lr_dispatch_v1, alt_instance, uint32_t);
FIELD(lr_dispatch, lr_dispatch_v1, alt_cached_tokens, uint32_t);
FIELD(lr_dispatch, lr_dispatch_v1, now_ns, uint64_t);
_Static_assert(offsetof(lr_dispatch, prefill_instance) ==
                       sizeof(struct lr_dispatch_v1) &&
                   LR_DISPATCH_SIZE_V2 ==
                       offsetof(lr_dispatch, prefill_cached_tokens) + 4,
               "lr_dispatch: 0.3 appended the prefill leg after now_ns");
SIZED(lr_dispatch, lr_dispatch_v1, LR_DISPATCH_SIZE_V1, now_ns);

struct lr_engine_stats_v1 {
    size_t struct_size;
    uint32_t running;
    uint32_t waiting;
    double kv_use;
    uint64_t scraped_ns;
};
FIELD(lr_engine_stats, lr_engine_stats_v1, struct_size, size_t);
FIELD(lr_engine_stats, lr_engine_stats_v1, running, uint32_t);
FIELD(lr_engine_stats, lr_engine_stats_v1, waiting, uint32_t);
FIELD(lr_engine_stats, lr_engine_stats_v1, kv_use, double);
FIELD(lr_engine_stats, lr_engine_stats_v1, scraped_ns, uint64_t);
SIZED(lr_engine_stats, lr_engine_stats_v1, LR_ENGINE_STATS_SIZE_V1, scraped_ns);

struct lr_load_snapshot_v1 {
    size_t struct_size;
    uint32_t instance_class;
    int32_t prefix_caching;
    uint32_t inflight;
    uint32_t queued;
    uint64_t prefill_tokens;
    uint64_t queued_tokens;
    uint64_t decode_tokens;
    uint64_t kv_tokens;
    int32_t has_stats;
    uint32_t running;
    uint32_t waiting;
    double kv_use;
    uint64_t scraped_ns;
    int32_t has_rtt;
    uint64_t rtt_ns;
    uint64_t last_first_token_ns;
    uint64_t queue_since_ns;
    uint64_t prompt_tokens;
};
FIELD(lr_load_snapshot, lr_load_snapshot_v1, struct_size, size_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, instance_class, uint32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, prefix_caching, int32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, inflight, uint32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, queued, uint32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, prefill_tokens, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, queued_tokens, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, decode_tokens, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, kv_tokens, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, has_stats, int32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, running, uint32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, waiting, uint32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, kv_use, double);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, scraped_ns, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, has_rtt, int32_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, rtt_ns, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, last_first_token_ns, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, queue_since_ns, uint64_t);
FIELD(lr_load_snapshot, lr_load_snapshot_v1, prompt_tokens, uint64_t);
SIZED(lr_load_snapshot, lr_load_snapshot_v1, LR_LOAD_SNAPSHOT_SIZE_V1,
      prompt_tokens);

_Static_assert(LR_LOAD_MAX_INSTANCES == 65534u,
               "LR_LOAD_MAX_INSTANCES changed");
_Static_assert(LR_LOAD_MAX_REQUESTS == (1u << 24),
               "LR_LOAD_MAX_REQUESTS changed");
_Static_assert(LR_LOAD_MAX_CLASSES == 64u, "LR_LOAD_MAX_CLASSES changed");
_Static_assert(LR_LOAD_MAX_RTT_NS == 60000000000ull,
               "LR_LOAD_MAX_RTT_NS changed");

/* ---- lr_mlp.h --------------------------------------------------------------- */

struct lr_mlp_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    uint64_t seed;
    uint32_t n_inputs;
    uint32_t hidden_layers;
    uint32_t width;
    uint32_t batch_size;
    double dropout;
    double learning_rate;
    double weight_decay;
    double grad_clip;
};
FIELD(lr_mlp_options, lr_mlp_options_v1, struct_size, size_t);
FIELD(lr_mlp_options, lr_mlp_options_v1, allocator, const lr_allocator *);
FIELD(lr_mlp_options, lr_mlp_options_v1, seed, uint64_t);
FIELD(lr_mlp_options, lr_mlp_options_v1, n_inputs, uint32_t);
FIELD(lr_mlp_options, lr_mlp_options_v1, hidden_layers, uint32_t);
FIELD(lr_mlp_options, lr_mlp_options_v1, width, uint32_t);
FIELD(lr_mlp_options, lr_mlp_options_v1, batch_size, uint32_t);
FIELD(lr_mlp_options, lr_mlp_options_v1, dropout, double);
FIELD(lr_mlp_options, lr_mlp_options_v1, learning_rate, double);
FIELD(lr_mlp_options, lr_mlp_options_v1, weight_decay, double);
FIELD(lr_mlp_options, lr_mlp_options_v1, grad_clip, double);
SIZED(lr_mlp_options, lr_mlp_options_v1, LR_MLP_OPTIONS_SIZE_V1, grad_clip);

/* ---- lr_learner.h ------------------------------------------------------------ */

struct lr_learner_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    uint64_t seed;
    uint32_t n_features;
    uint32_t fifo_capacity;
    uint32_t replay_capacity;
    uint32_t pending_capacity;
    uint32_t min_samples;
    uint32_t retrain_every;
    uint32_t epochs;
    double max_abs_reward;
    const lr_mlp_options *mlp;
};
FIELD(lr_learner_options, lr_learner_options_v1, struct_size, size_t);
FIELD(lr_learner_options, lr_learner_options_v1, allocator,
      const lr_allocator *);
FIELD(lr_learner_options, lr_learner_options_v1, seed, uint64_t);
FIELD(lr_learner_options, lr_learner_options_v1, n_features, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, fifo_capacity, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, replay_capacity, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, pending_capacity, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, min_samples, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, retrain_every, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, epochs, uint32_t);
FIELD(lr_learner_options, lr_learner_options_v1, max_abs_reward, double);
FIELD(lr_learner_options, lr_learner_options_v1, mlp, const lr_mlp_options *);
SIZED(lr_learner_options, lr_learner_options_v1, LR_LEARNER_OPTIONS_SIZE_V1,
      mlp);

struct lr_learner_stats_v1 {
    size_t struct_size;
    uint64_t samples;
    uint64_t dropped_full;
    uint64_t dropped_range;
    uint64_t model_round;
    uint64_t model_samples;
    uint64_t model_replay;
    double model_mse;
    double online_mae;
    uint64_t predicted;
};
FIELD(lr_learner_stats, lr_learner_stats_v1, struct_size, size_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, samples, uint64_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, dropped_full, uint64_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, dropped_range, uint64_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, model_round, uint64_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, model_samples, uint64_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, model_replay, uint64_t);
FIELD(lr_learner_stats, lr_learner_stats_v1, model_mse, double);
FIELD(lr_learner_stats, lr_learner_stats_v1, online_mae, double);
FIELD(lr_learner_stats, lr_learner_stats_v1, predicted, uint64_t);
SIZED(lr_learner_stats, lr_learner_stats_v1, LR_LEARNER_STATS_SIZE_V1,
      predicted);
_Static_assert(LR_MLP_MAX_INPUTS == 256u, "LR_MLP_MAX_INPUTS changed");
_Static_assert(LR_MLP_MAX_LAYERS == 8u, "LR_MLP_MAX_LAYERS changed");
_Static_assert(LR_MLP_MAX_WIDTH == 1024u, "LR_MLP_MAX_WIDTH changed");
_Static_assert(LR_MLP_MAX_BATCH == 65536u, "LR_MLP_MAX_BATCH changed");

/* ---- lr_ring.h -------------------------------------------------------------- */

struct lr_ring_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    uint32_t vnodes;
    uint32_t max_instances;
};
FIELD(lr_ring_options, lr_ring_options_v1, struct_size, size_t);
FIELD(lr_ring_options, lr_ring_options_v1, allocator, const lr_allocator *);
FIELD(lr_ring_options, lr_ring_options_v1, vnodes, uint32_t);
FIELD(lr_ring_options, lr_ring_options_v1, max_instances, uint32_t);
SIZED(lr_ring_options, lr_ring_options_v1, LR_RING_OPTIONS_SIZE_V1,
      max_instances);

/* ---- lr_router.h ------------------------------------------------------------ */

/* lr_policy_from_name() writes an lr_policy through a pointer, so its size is
 * ABI too. */
_Static_assert(sizeof(lr_policy) == sizeof(int32_t),
               "lr_policy must stay 32 bits (built with -fshort-enums?)");

struct lr_router_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    uint64_t seed;
    int32_t policy;
    uint32_t max_instances;
    uint32_t max_requests;
    uint32_t block_tokens;
    uint64_t index_capacity_blocks;
    uint64_t index_ttl_ns;
    uint32_t ring_vnodes;
    uint32_t flags;
    const lr_learner_options *learner;
};
FIELD(lr_router_options, lr_router_options_v1, struct_size, size_t);
FIELD(lr_router_options, lr_router_options_v1, allocator, const lr_allocator *);
FIELD(lr_router_options, lr_router_options_v1, seed, uint64_t);
FIELD(lr_router_options, lr_router_options_v1, policy, int32_t);
FIELD(lr_router_options, lr_router_options_v1, max_instances, uint32_t);
FIELD(lr_router_options, lr_router_options_v1, max_requests, uint32_t);
FIELD(lr_router_options, lr_router_options_v1, index_capacity_blocks, uint64_t);
FIELD(lr_router_options, lr_router_options_v1, block_tokens, uint32_t);
FIELD(lr_router_options, lr_router_options_v1, index_ttl_ns, uint64_t);
FIELD(lr_router_options, lr_router_options_v1, ring_vnodes, uint32_t);
FIELD(lr_router_options, lr_router_options_v1, flags, uint32_t);
FIELD(lr_router_options, lr_router_options_v1, learner,
      const lr_learner_options *);
SIZED(lr_router_options, lr_router_options_v1, LR_ROUTER_OPTIONS_SIZE_V1,
      learner);

struct lr_instance_spec_v1 {
    size_t struct_size;
    const char *name;
    uint32_t instance_class;
    int32_t prefix_caching;
    uint64_t rtt_ns;
};
FIELD(lr_instance_spec, lr_instance_spec_v1, struct_size, size_t);
FIELD(lr_instance_spec, lr_instance_spec_v1, name, const char *);
FIELD(lr_instance_spec, lr_instance_spec_v1, instance_class, uint32_t);
FIELD(lr_instance_spec, lr_instance_spec_v1, prefix_caching, int32_t);
FIELD(lr_instance_spec, lr_instance_spec_v1, rtt_ns, uint64_t);
SIZED(lr_instance_spec, lr_instance_spec_v1, LR_INSTANCE_SPEC_SIZE_V1, rtt_ns);
/* 0.3 appended models and adapter slots (v2), then the role and the
 * placement (v3) */
_Static_assert(LR_INSTANCE_SPEC_SIZE_V2 ==
                       offsetof(lr_instance_spec, max_adapters) + 4 &&
                   offsetof(lr_instance_spec, role) >=
                       LR_INSTANCE_SPEC_SIZE_V2 &&
                   offsetof(lr_instance_spec, node) ==
                       offsetof(lr_instance_spec, role) + 4 &&
                   LR_INSTANCE_SPEC_SIZE_V3 ==
                       offsetof(lr_instance_spec, region) + 4,
               "lr_instance_spec: the v3 fields moved");

struct lr_class_spec_v1 {
    size_t struct_size;
    double prefill_tokens_per_s;
};
FIELD(lr_class_spec, lr_class_spec_v1, struct_size, size_t);
FIELD(lr_class_spec, lr_class_spec_v1, prefill_tokens_per_s, double);
SIZED(lr_class_spec, lr_class_spec_v1, LR_CLASS_SPEC_SIZE_V1,
      prefill_tokens_per_s);

struct lr_request_v1 {
    size_t struct_size;
    uint64_t id;
    const uint32_t *tokens;
    size_t n_tokens;
    const uint32_t *boundaries;
    size_t n_boundaries;
    uint64_t tenant_salt;
    uint64_t session;
    int32_t has_session;
    uint32_t expected_output_tokens;
    uint32_t flags;
    uint64_t now_ns;
};
FIELD(lr_request, lr_request_v1, struct_size, size_t);
FIELD(lr_request, lr_request_v1, id, uint64_t);
FIELD(lr_request, lr_request_v1, tokens, const uint32_t *);
FIELD(lr_request, lr_request_v1, n_tokens, size_t);
FIELD(lr_request, lr_request_v1, boundaries, const uint32_t *);
FIELD(lr_request, lr_request_v1, n_boundaries, size_t);
FIELD(lr_request, lr_request_v1, tenant_salt, uint64_t);
FIELD(lr_request, lr_request_v1, session, uint64_t);
FIELD(lr_request, lr_request_v1, has_session, int32_t);
FIELD(lr_request, lr_request_v1, expected_output_tokens, uint32_t);
FIELD(lr_request, lr_request_v1, flags, uint32_t);
FIELD(lr_request, lr_request_v1, now_ns, uint64_t);
SIZED(lr_request, lr_request_v1, LR_REQUEST_SIZE_V1, now_ns);
_Static_assert(offsetof(lr_request, tenant) == LR_REQUEST_SIZE_V1 &&
                   offsetof(lr_request, deadline_ns) ==
                       LR_REQUEST_SIZE_V1 + 8 &&
                   offsetof(lr_request, urgency) == LR_REQUEST_SIZE_V1 + 16 &&
                   LR_REQUEST_SIZE_V2 == LR_REQUEST_SIZE_V1 + 20,
               "lr_request: 0.3 appended tenant, deadline_ns, urgency");
_Static_assert(offsetof(lr_request, mm) == LR_REQUEST_SIZE_V3 &&
                   LR_REQUEST_SIZE_V4 ==
                       offsetof(lr_request, n_mm) + sizeof(size_t),
               "lr_request: 0.3 appended mm, n_mm after adapter");

struct lr_dispatched_v1 {
    uint64_t request_id;
    int32_t status;
    uint32_t instance;
    int32_t reason;
    uint32_t cached_tokens;
    double cost;
    uint64_t waited_ns;
    uint32_t urgency;
    uint64_t tenant;
};
FIELD(lr_dispatched, lr_dispatched_v1, request_id, uint64_t);
FIELD(lr_dispatched, lr_dispatched_v1, status, int32_t);
FIELD(lr_dispatched, lr_dispatched_v1, instance, uint32_t);
FIELD(lr_dispatched, lr_dispatched_v1, reason, int32_t);
FIELD(lr_dispatched, lr_dispatched_v1, cached_tokens, uint32_t);
FIELD(lr_dispatched, lr_dispatched_v1, cost, double);
FIELD(lr_dispatched, lr_dispatched_v1, waited_ns, uint64_t);
FIELD(lr_dispatched, lr_dispatched_v1, urgency, uint32_t);
FIELD(lr_dispatched, lr_dispatched_v1, tenant, uint64_t);
_Static_assert(LR_DISPATCHED_SIZE_V1 ==
                   offsetof(struct lr_dispatched_v1, tenant) + 8,
               "LR_DISPATCHED_SIZE_V1: does not end at tenant");
/* its items travel with the caller's stride: the prefill leg appended */
_Static_assert(offsetof(lr_dispatched, prefill_instance) ==
                       sizeof(struct lr_dispatched_v1) &&
                   LR_DISPATCHED_SIZE_V2 ==
                       offsetof(lr_dispatched, transfer_s) + 8,
               "lr_dispatched: the prefill leg moved");

struct lr_score_v1 {
    uint32_t instance;
    uint32_t cached_tokens;
    double score;
};
FIELD(lr_score, lr_score_v1, instance, uint32_t);
FIELD(lr_score, lr_score_v1, cached_tokens, uint32_t);
FIELD(lr_score, lr_score_v1, score, double);
FIXED(lr_score, lr_score_v1);

struct lr_decision_v1 {
    size_t struct_size;
    uint32_t instance;
    int32_t reason;
    uint32_t cached_tokens;
    uint32_t best_cached_tokens;
    double cost;
    uint32_t alt_instance;
    lr_score *scores;
    size_t scores_capacity;
    size_t n_scores;
};
FIELD(lr_decision, lr_decision_v1, struct_size, size_t);
FIELD(lr_decision, lr_decision_v1, instance, uint32_t);
FIELD(lr_decision, lr_decision_v1, reason, int32_t);
FIELD(lr_decision, lr_decision_v1, cached_tokens, uint32_t);
FIELD(lr_decision, lr_decision_v1, best_cached_tokens, uint32_t);
FIELD(lr_decision, lr_decision_v1, cost, double);
FIELD(lr_decision, lr_decision_v1, alt_instance, uint32_t);
FIELD(lr_decision, lr_decision_v1, scores, lr_score *);
FIELD(lr_decision, lr_decision_v1, scores_capacity, size_t);
FIELD(lr_decision, lr_decision_v1, n_scores, size_t);
SIZED(lr_decision, lr_decision_v1, LR_DECISION_SIZE_V1, n_scores);

/* 0.2 appended three fields to lr_decision. */
struct lr_decision_v2 {
    struct lr_decision_v1 v1;
    int32_t decider;
    uint64_t seed;
    size_t score_size;
};
_Static_assert(offsetof(lr_decision, decider) ==
                   offsetof(struct lr_decision_v2, decider),
               "lr_decision.decider: offset changed");
_Static_assert(offsetof(lr_decision, seed) ==
                   offsetof(struct lr_decision_v2, seed),
               "lr_decision.seed: offset changed");
_Static_assert(offsetof(lr_decision, score_size) ==
                   offsetof(struct lr_decision_v2, score_size),
               "lr_decision.score_size: offset changed");
_Static_assert(LR_DECISION_SIZE_V2 ==
                   offsetof(struct lr_decision_v2, score_size) + sizeof(size_t),
               "LR_DECISION_SIZE_V2: does not end at the v2 last field");

/* 0.3 appended the prefill leg of a split decision. */
struct lr_decision_v3 {
    struct lr_decision_v2 v2;
    uint32_t prefill_instance;
    int32_t prefill_reason;
    uint32_t prefill_cached_tokens;
    uint32_t reserved;
    double transfer_s;
};
_Static_assert(offsetof(lr_decision, prefill_instance) ==
                       offsetof(struct lr_decision_v3, prefill_instance) &&
                   offsetof(lr_decision, prefill_reason) ==
                       offsetof(struct lr_decision_v3, prefill_reason) &&
                   offsetof(lr_decision, prefill_cached_tokens) ==
                       offsetof(struct lr_decision_v3, prefill_cached_tokens) &&
                   offsetof(lr_decision, transfer_s) ==
                       offsetof(struct lr_decision_v3, transfer_s),
               "lr_decision: the prefill leg's fields moved");
_Static_assert(LR_DECISION_SIZE_V3 ==
                   offsetof(struct lr_decision_v3, transfer_s) + 8,
               "LR_DECISION_SIZE_V3: does not end at transfer_s");

/* ---- lr_policy.h and lr_cost.h (0.2) ------------------------------------------- */

/* Candidate rows travel in arrays with the caller's row size: the struct
 * may grow at its end, never change in front. */
struct lr_candidate_v1 {
    uint32_t instance;
    uint32_t cached_tokens;
    uint32_t inflight;
    uint32_t queued;
    uint64_t prefill_tokens;
    uint64_t queued_tokens;
    uint64_t prompt_tokens;
    uint64_t decode_tokens;
    uint64_t kv_tokens;
    uint32_t running;
    uint32_t waiting;
    double kv_use;
    double rtt_ms;
    double prefill_rate;
    double stall_s;
    double cached_age_s;
    uint32_t instance_class;
    int32_t prefix_caching;
    uint32_t ring_rank;
    uint32_t flags;
    uint64_t tree_blocks;
    double ttft_s_per_token;
    double ttft_base_s;
    double ttft_s_per_decoding;
    double prefill_tokens_avg;
    double route_rate;
};
FIELD(lr_candidate, lr_candidate_v1, instance, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, cached_tokens, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, inflight, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, queued, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, prefill_tokens, uint64_t);
FIELD(lr_candidate, lr_candidate_v1, queued_tokens, uint64_t);
FIELD(lr_candidate, lr_candidate_v1, prompt_tokens, uint64_t);
FIELD(lr_candidate, lr_candidate_v1, decode_tokens, uint64_t);
FIELD(lr_candidate, lr_candidate_v1, kv_tokens, uint64_t);
FIELD(lr_candidate, lr_candidate_v1, running, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, waiting, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, kv_use, double);
FIELD(lr_candidate, lr_candidate_v1, rtt_ms, double);
FIELD(lr_candidate, lr_candidate_v1, prefill_rate, double);
FIELD(lr_candidate, lr_candidate_v1, stall_s, double);
FIELD(lr_candidate, lr_candidate_v1, cached_age_s, double);
FIELD(lr_candidate, lr_candidate_v1, instance_class, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, prefix_caching, int32_t);
FIELD(lr_candidate, lr_candidate_v1, ring_rank, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, flags, uint32_t);
FIELD(lr_candidate, lr_candidate_v1, tree_blocks, uint64_t);
FIELD(lr_candidate, lr_candidate_v1, ttft_s_per_token, double);
FIELD(lr_candidate, lr_candidate_v1, ttft_base_s, double);
FIELD(lr_candidate, lr_candidate_v1, ttft_s_per_decoding, double);
FIELD(lr_candidate, lr_candidate_v1, prefill_tokens_avg, double);
FIELD(lr_candidate, lr_candidate_v1, route_rate, double);
_Static_assert(sizeof(lr_candidate) >= sizeof(struct lr_candidate_v1),
               "lr_candidate: smaller than its v1 layout");
_Static_assert(LR_CANDIDATE_SIZE_V1 ==
                   offsetof(struct lr_candidate_v1, route_rate) +
                       sizeof(double),
               "LR_CANDIDATE_SIZE_V1: does not end at the v1 last field");
/* 0.3 appended the share of expected hits the engine did not deliver. */
struct lr_candidate_v2 {
    struct lr_candidate_v1 v1;
    double cached_lost;
};
_Static_assert(offsetof(lr_candidate, cached_lost) ==
                   offsetof(struct lr_candidate_v2, cached_lost),
               "lr_candidate.cached_lost: offset changed");
_Static_assert(LR_CANDIDATE_SIZE_V2 ==
                   offsetof(struct lr_candidate_v2, cached_lost) +
                       sizeof(double),
               "LR_CANDIDATE_SIZE_V2: does not end at cached_lost");

struct lr_policy_input_v1 {
    size_t struct_size;
    const double *params;
    size_t n_params;
    uint32_t prompt_tokens;
    uint32_t expected_output_tokens;
    uint32_t block_tokens;
    uint32_t last_instance;
    uint64_t seed;
    lr_mlp *model;
};
FIELD(lr_policy_input, lr_policy_input_v1, struct_size, size_t);
FIELD(lr_policy_input, lr_policy_input_v1, params, const double *);
FIELD(lr_policy_input, lr_policy_input_v1, n_params, size_t);
FIELD(lr_policy_input, lr_policy_input_v1, prompt_tokens, uint32_t);
FIELD(lr_policy_input, lr_policy_input_v1, expected_output_tokens, uint32_t);
FIELD(lr_policy_input, lr_policy_input_v1, block_tokens, uint32_t);
FIELD(lr_policy_input, lr_policy_input_v1, last_instance, uint32_t);
FIELD(lr_policy_input, lr_policy_input_v1, seed, uint64_t);
FIELD(lr_policy_input, lr_policy_input_v1, model, lr_mlp *);
SIZED(lr_policy_input, lr_policy_input_v1, LR_POLICY_INPUT_SIZE_V1, model);
_Static_assert(offsetof(lr_policy_input, ttft_budget_s) ==
                       LR_POLICY_INPUT_SIZE_V1 &&
                   LR_POLICY_INPUT_SIZE_V2 == LR_POLICY_INPUT_SIZE_V1 + 8,
               "lr_policy_input: 0.3 appended ttft_budget_s");

struct lr_cost_options_v1 {
    size_t struct_size;
    const lr_allocator *allocator;
    int32_t kind;
    uint64_t seed;
};
FIELD(lr_cost_options, lr_cost_options_v1, struct_size, size_t);
FIELD(lr_cost_options, lr_cost_options_v1, allocator, const lr_allocator *);
FIELD(lr_cost_options, lr_cost_options_v1, kind, int32_t);
FIELD(lr_cost_options, lr_cost_options_v1, seed, uint64_t);
SIZED(lr_cost_options, lr_cost_options_v1, LR_COST_OPTIONS_SIZE_V1, seed);

struct lr_cost_tuner_stats_v1 {
    size_t struct_size;
    int32_t state;
    uint64_t trials;
    uint64_t accepted;
    double sigma;
    double incumbent_p95_s;
    uint64_t samples;
};
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, struct_size, size_t);
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, state, int32_t);
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, trials, uint64_t);
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, accepted, uint64_t);
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, sigma, double);
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, incumbent_p95_s, double);
FIELD(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, samples, uint64_t);
SIZED(lr_cost_tuner_stats, lr_cost_tuner_stats_v1, LR_COST_TUNER_STATS_SIZE_V1,
      samples);

_Static_assert(LR_RING_KEY_NONE == 0 && LR_RING_KEY_SESSION == 1 &&
                   LR_RING_KEY_PREFIX == 2 && LR_RING_KEY_HOTNESS == 3,
               "LR_RING_KEY_* renumbered");
_Static_assert(LR_COST_TTFT == 0 && LR_COST_GORGO == 1 && LR_COST_DYNAMO == 2,
               "lr_cost_kind renumbered");
_Static_assert(LR_COST_W_RTT == 0 && LR_COST_W_QUEUE == 1 &&
                   LR_COST_W_STALL == 2 && LR_COST_W_UNCACHED == 3 &&
                   LR_COST_BLOCK_TOKENS == 4 &&
                   LR_COST_QUEUE_AT_FIRST_TOKEN == 5 && LR_COST_SIGMA == 6 &&
                   LR_COST_W_RTT_MAX == 7 && LR_COST_W_QUEUE_MIN == 8,
               "lr_cost_param renumbered");
_Static_assert(LR_BOUNDS_INTEGER == 1, "LR_BOUNDS_INTEGER changed");
_Static_assert(LR_COST_TUNE_WINDOW == 128u && LR_COST_TUNE_HOP == 32u,
               "the GORGO tuner's window changed");

struct lr_move_v1 {
    uint64_t request_id;
    uint32_t from;
    uint32_t to;
    double benefit_s;
};
FIELD(lr_move, lr_move_v1, request_id, uint64_t);
FIELD(lr_move, lr_move_v1, from, uint32_t);
FIELD(lr_move, lr_move_v1, to, uint32_t);
FIELD(lr_move, lr_move_v1, benefit_s, double);
FIXED(lr_move, lr_move_v1);

struct lr_router_stats_v1 {
    size_t struct_size;
    uint64_t routes;
    uint64_t dry_runs;
    uint64_t inflight;
    uint64_t instances;
    uint64_t routable;
    uint64_t by_reason[16];
    uint64_t prompt_tokens;
    uint64_t cached_tokens;
};
FIELD(lr_router_stats, lr_router_stats_v1, struct_size, size_t);
FIELD(lr_router_stats, lr_router_stats_v1, routes, uint64_t);
FIELD(lr_router_stats, lr_router_stats_v1, dry_runs, uint64_t);
FIELD(lr_router_stats, lr_router_stats_v1, inflight, uint64_t);
FIELD(lr_router_stats, lr_router_stats_v1, instances, uint64_t);
FIELD(lr_router_stats, lr_router_stats_v1, routable, uint64_t);
/* An array: _Generic sees it decayed to uint64_t *, and the size check holds
 * the element count. */
FIELD(lr_router_stats, lr_router_stats_v1, by_reason, uint64_t *);
FIELD(lr_router_stats, lr_router_stats_v1, prompt_tokens, uint64_t);
FIELD(lr_router_stats, lr_router_stats_v1, cached_tokens, uint64_t);
SIZED(lr_router_stats, lr_router_stats_v1, LR_ROUTER_STATS_SIZE_V1,
      cached_tokens);
_Static_assert(LR_ROUTER_STATS_SIZE_V2 ==
                   offsetof(lr_router_stats, peers_live) + sizeof(uint64_t),
               "LR_ROUTER_STATS_SIZE_V2: does not end at peers_live");
_Static_assert(LR_ROUTER_STATS_SIZE_V3 ==
                   LR_ROUTER_STATS_SIZE_V2 + 12 * sizeof(uint64_t),
               "lr_router_stats: 0.3 appended twelve counters");
_Static_assert(offsetof(lr_router_stats, waiting) ==
                   LR_ROUTER_STATS_SIZE_V2 + 3 * sizeof(uint64_t),
               "lr_router_stats: the queue's counters follow observed_*");

struct lr_vllm_batch_info_v1 {
    size_t struct_size;
    double timestamp;
    int64_t dp_rank;
    uint32_t events;
    uint32_t stored;
    uint32_t removed;
    uint32_t cleared;
    uint32_t unplaced;
    uint32_t skipped;
    uint32_t done;
};
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, struct_size, size_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, timestamp, double);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, dp_rank, int64_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, events, uint32_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, stored, uint32_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, removed, uint32_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, cleared, uint32_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, unplaced, uint32_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, skipped, uint32_t);
FIELD(lr_vllm_batch_info, lr_vllm_batch_info_v1, done, uint32_t);
SIZED(lr_vllm_batch_info, lr_vllm_batch_info_v1, LR_VLLM_BATCH_INFO_SIZE_V1,
      done);

_Static_assert(LR_ROUTER_MAX_INSTANCES == 65534u,
               "LR_ROUTER_MAX_INSTANCES changed");

/* Policies, reasons and parameters are append-only like the status codes:
 * existing values never change. The *_COUNT macros grow when a value is
 * appended (update them here then); they never shrink. */
_Static_assert(LR_POLICY_RANDOM == 0, "LR_POLICY_RANDOM renumbered");
_Static_assert(LR_POLICY_ROUND_ROBIN == 1, "LR_POLICY_ROUND_ROBIN renumbered");
_Static_assert(LR_POLICY_LEAST_REQUEST == 2,
               "LR_POLICY_LEAST_REQUEST renumbered");
_Static_assert(LR_POLICY_LEAST_LOAD == 3, "LR_POLICY_LEAST_LOAD renumbered");
_Static_assert(LR_POLICY_SESSION_AFFINITY == 4,
               "LR_POLICY_SESSION_AFFINITY renumbered");
_Static_assert(LR_POLICY_CONSISTENT_HASH == 5,
               "LR_POLICY_CONSISTENT_HASH renumbered");
_Static_assert(LR_POLICY_PREFIX_CACHE == 6,
               "LR_POLICY_PREFIX_CACHE renumbered");
_Static_assert(LR_POLICY_PREFIX_CACHE_AND_LOAD == 7,
               "LR_POLICY_PREFIX_CACHE_AND_LOAD renumbered");
_Static_assert(LR_POLICY_SGLANG_CACHE_AWARE == 8,
               "LR_POLICY_SGLANG_CACHE_AWARE renumbered");
_Static_assert(LR_POLICY_PREBLE == 9, "LR_POLICY_PREBLE renumbered");
_Static_assert(LR_POLICY_MIN_TTFT == 10, "LR_POLICY_MIN_TTFT renumbered");
_Static_assert(LR_POLICY_DYNAMO == 11, "LR_POLICY_DYNAMO renumbered");
_Static_assert(LR_POLICY_DUALMAP == 12, "LR_POLICY_DUALMAP renumbered");
_Static_assert(LR_POLICY_GORGO == 13, "LR_POLICY_GORGO renumbered");
_Static_assert(LR_POLICY_RANVIER == 14, "LR_POLICY_RANVIER renumbered");
_Static_assert(LR_POLICY_LODESTAR == 15, "LR_POLICY_LODESTAR renumbered");

_Static_assert(LR_REASON_NONE == 0, "LR_REASON_NONE renumbered");
_Static_assert(LR_REASON_RANDOM == 1, "LR_REASON_RANDOM renumbered");
_Static_assert(LR_REASON_ROUND_ROBIN == 2, "LR_REASON_ROUND_ROBIN renumbered");
_Static_assert(LR_REASON_LEAST_LOADED == 3,
               "LR_REASON_LEAST_LOADED renumbered");
_Static_assert(LR_REASON_SESSION == 4, "LR_REASON_SESSION renumbered");
_Static_assert(LR_REASON_HASH == 5, "LR_REASON_HASH renumbered");
_Static_assert(LR_REASON_PREFIX_HIT == 6, "LR_REASON_PREFIX_HIT renumbered");
_Static_assert(LR_REASON_LOAD_OVERRIDE == 7,
               "LR_REASON_LOAD_OVERRIDE renumbered");
_Static_assert(LR_REASON_SLO_SWITCH == 8, "LR_REASON_SLO_SWITCH renumbered");
_Static_assert(LR_REASON_FALLBACK == 9, "LR_REASON_FALLBACK renumbered");
_Static_assert(LR_REASON_MIN_COST == 10, "LR_REASON_MIN_COST renumbered");
_Static_assert(LR_REASON_SAMPLED == 11, "LR_REASON_SAMPLED renumbered");
_Static_assert(LR_REASON_K_FILTER == 12, "LR_REASON_K_FILTER renumbered");
_Static_assert(LR_REASON_EXPLORE == 13, "LR_REASON_EXPLORE renumbered");
_Static_assert(LR_REASON_COLD_START == 14, "LR_REASON_COLD_START renumbered");
_Static_assert(LR_REASON_OOD == 15, "LR_REASON_OOD renumbered");

_Static_assert(LR_PARAM_PREFIX_MIN_RATIO == 0,
               "LR_PARAM_PREFIX_MIN_RATIO renumbered");
_Static_assert(LR_PARAM_BOUNDED_LOAD == 1, "LR_PARAM_BOUNDED_LOAD renumbered");
_Static_assert(LR_PARAM_AIBRIX_IMBALANCE == 2,
               "LR_PARAM_AIBRIX_IMBALANCE renumbered");
_Static_assert(LR_PARAM_AIBRIX_STDDEV == 3,
               "LR_PARAM_AIBRIX_STDDEV renumbered");
_Static_assert(LR_PARAM_SGLANG_ABS == 4, "LR_PARAM_SGLANG_ABS renumbered");
_Static_assert(LR_PARAM_SGLANG_REL == 5, "LR_PARAM_SGLANG_REL renumbered");
_Static_assert(LR_PARAM_SGLANG_MIN_RATIO == 6,
               "LR_PARAM_SGLANG_MIN_RATIO renumbered");
_Static_assert(LR_PARAM_PREBLE_HIT == 7, "LR_PARAM_PREBLE_HIT renumbered");
_Static_assert(LR_PARAM_DYNAMO_OVERLAP == 8,
               "LR_PARAM_DYNAMO_OVERLAP renumbered");
_Static_assert(LR_PARAM_DYNAMO_TEMPERATURE == 9,
               "LR_PARAM_DYNAMO_TEMPERATURE renumbered");
_Static_assert(LR_PARAM_TTFT_SLO_S == 10, "LR_PARAM_TTFT_SLO_S renumbered");
_Static_assert(LR_PARAM_DUALMAP_KEY_TOKENS == 11,
               "LR_PARAM_DUALMAP_KEY_TOKENS renumbered");
_Static_assert(LR_PARAM_DUALMAP_MAX_KEY_BLOCKS == 12,
               "LR_PARAM_DUALMAP_MAX_KEY_BLOCKS renumbered");
_Static_assert(LR_PARAM_DUALMAP_WINDOW == 13,
               "LR_PARAM_DUALMAP_WINDOW renumbered");
_Static_assert(LR_PARAM_GORGO_W_RTT == 14, "LR_PARAM_GORGO_W_RTT renumbered");
_Static_assert(LR_PARAM_GORGO_W_QUEUE == 15,
               "LR_PARAM_GORGO_W_QUEUE renumbered");
_Static_assert(LR_PARAM_GORGO_SIGMA == 16, "LR_PARAM_GORGO_SIGMA renumbered");
_Static_assert(LR_PARAM_GORGO_FROZEN == 17, "LR_PARAM_GORGO_FROZEN renumbered");
_Static_assert(LR_PARAM_GORGO_W_RTT_MAX == 18,
               "LR_PARAM_GORGO_W_RTT_MAX renumbered");
_Static_assert(LR_PARAM_GORGO_W_QUEUE_MIN == 19,
               "LR_PARAM_GORGO_W_QUEUE_MIN renumbered");
_Static_assert(LR_PARAM_RANVIER_PRESSURE == 20,
               "LR_PARAM_RANVIER_PRESSURE renumbered");
_Static_assert(LR_PARAM_SESSION_TOKENS == 21,
               "LR_PARAM_SESSION_TOKENS renumbered");
_Static_assert(LR_PARAM_STATS_MAX_AGE_S == 22,
               "LR_PARAM_STATS_MAX_AGE_S renumbered");
_Static_assert(LR_PARAM_DEFAULT_OUTPUT_TOKENS == 23,
               "LR_PARAM_DEFAULT_OUTPUT_TOKENS renumbered");
_Static_assert(LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN == 24,
               "LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN renumbered");
_Static_assert(LR_PARAM_LODESTAR_EPSILON == 25,
               "LR_PARAM_LODESTAR_EPSILON renumbered");
_Static_assert(LR_PARAM_LODESTAR_TIE == 26, "LR_PARAM_LODESTAR_TIE renumbered");
_Static_assert(LR_PARAM_LODESTAR_KV_THRESHOLD == 27,
               "LR_PARAM_LODESTAR_KV_THRESHOLD renumbered");
_Static_assert(LR_PARAM_LODESTAR_KFILTER_TOKENS == 28,
               "LR_PARAM_LODESTAR_KFILTER_TOKENS renumbered");
_Static_assert(LR_PARAM_LODESTAR_OOD == 29, "LR_PARAM_LODESTAR_OOD renumbered");
_Static_assert(LR_PARAM_LODESTAR_FALLBACK == 30,
               "LR_PARAM_LODESTAR_FALLBACK renumbered");
_Static_assert(LR_PARAM_LODESTAR_CANDIDATES == 31,
               "LR_PARAM_LODESTAR_CANDIDATES renumbered");
_Static_assert(LR_PARAM_LODESTAR_MAX_TTFT_S == 32,
               "LR_PARAM_LODESTAR_MAX_TTFT_S renumbered");
_Static_assert(LR_LODESTAR_FEATURES == 20u, "LR_LODESTAR_FEATURES changed");
_Static_assert(LR_LEARN_FORCE == 1u, "LR_LEARN_FORCE changed");

_Static_assert(LR_ROUTE_DRY_RUN == 1u, "LR_ROUTE_DRY_RUN changed");
_Static_assert(LR_ROUTE_SCORES == 2u, "LR_ROUTE_SCORES changed");
_Static_assert(LR_ROUTE_NO_LEARN == 4u, "LR_ROUTE_NO_LEARN changed");

/* ---- run time ------------------------------------------------------------- */

/* ---- replicas and KV-event sources (0.2) ------------------------------------- */

/* 0.2 appended to lr_index_options, lr_router_options, lr_router_stats
 * and lr_vllm_batch_info. */
#define APPENDED(cur, frozen, f)                                   \
    _Static_assert(offsetof(cur, f) == offsetof(struct frozen, f), \
                   #cur "." #f ": offset changed")

struct lr_index_options_v2 {
    struct lr_index_options_v1 v1;
    uint64_t replica_id;
    uint64_t remote_ttl_ns;
    int32_t eviction;
};
APPENDED(lr_index_options, lr_index_options_v2, replica_id);
APPENDED(lr_index_options, lr_index_options_v2, remote_ttl_ns);
APPENDED(lr_index_options, lr_index_options_v2, eviction);
_Static_assert(LR_INDEX_OPTIONS_SIZE_V2 ==
                   offsetof(struct lr_index_options_v2, eviction) + 4,
               "LR_INDEX_OPTIONS_SIZE_V2: does not end at eviction");

struct lr_router_options_v2 {
    struct lr_router_options_v1 v1;
    uint64_t hash_seed;
    uint64_t replica_id;
    uint64_t remote_ttl_ns;
    uint64_t gauge_ttl_ns;
    uint32_t max_peers;
    int32_t index_eviction;
};
APPENDED(lr_router_options, lr_router_options_v2, hash_seed);
APPENDED(lr_router_options, lr_router_options_v2, replica_id);
APPENDED(lr_router_options, lr_router_options_v2, remote_ttl_ns);
APPENDED(lr_router_options, lr_router_options_v2, gauge_ttl_ns);
APPENDED(lr_router_options, lr_router_options_v2, max_peers);
APPENDED(lr_router_options, lr_router_options_v2, index_eviction);
_Static_assert(LR_ROUTER_OPTIONS_SIZE_V2 ==
                   offsetof(struct lr_router_options_v2, index_eviction) + 4,
               "LR_ROUTER_OPTIONS_SIZE_V2: does not end at index_eviction");
_Static_assert(LR_EVICT_REMOTE_FIRST == 0 && LR_EVICT_LRU == 1,
               "lr_eviction renumbered");

struct lr_router_options_v3 {
    struct lr_router_options_v2 v2;
    uint32_t queue_capacity;
    uint32_t queue_tenants;
    uint64_t queue_tokens;
};
APPENDED(lr_router_options, lr_router_options_v3, queue_capacity);
APPENDED(lr_router_options, lr_router_options_v3, queue_tenants);
APPENDED(lr_router_options, lr_router_options_v3, queue_tokens);
_Static_assert(LR_ROUTER_OPTIONS_SIZE_V3 ==
                   offsetof(struct lr_router_options_v3, queue_tokens) + 8,
               "LR_ROUTER_OPTIONS_SIZE_V3: does not end at queue_tokens");

struct lr_router_options_v4 {
    struct lr_router_options_v3 v3;
    uint64_t marks;
};
APPENDED(lr_router_options, lr_router_options_v4, marks);
_Static_assert(LR_ROUTER_OPTIONS_SIZE_V4 ==
                   offsetof(struct lr_router_options_v4, marks) + 8,
               "LR_ROUTER_OPTIONS_SIZE_V4: does not end at marks");

struct lr_router_stats_v2 {
    struct lr_router_stats_v1 v1;
    uint64_t kv_batches, kv_duplicates, kv_gaps, kv_restarts, kv_gaps_open;
    uint64_t deltas_exported, deltas_imported, deltas_skipped, deltas_lost;
    uint64_t gauges_exported, gauges_imported, gauges_skipped, gauges_expired;
    uint64_t peers_live;
};
APPENDED(lr_router_stats, lr_router_stats_v2, kv_batches);
APPENDED(lr_router_stats, lr_router_stats_v2, kv_gaps_open);
APPENDED(lr_router_stats, lr_router_stats_v2, deltas_exported);
APPENDED(lr_router_stats, lr_router_stats_v2, deltas_lost);
APPENDED(lr_router_stats, lr_router_stats_v2, gauges_exported);
APPENDED(lr_router_stats, lr_router_stats_v2, peers_live);
_Static_assert(LR_ROUTER_STATS_SIZE_V2 == sizeof(struct lr_router_stats_v2),
               "LR_ROUTER_STATS_SIZE_V2: does not end at peers_live");

struct lr_vllm_batch_info_v2 { /* flat: v1 ends on a 4-byte field */
    size_t struct_size;
    double timestamp;
    int64_t dp_rank;
    uint32_t events, stored, removed, cleared, unplaced, skipped, done;
    uint32_t invalid;
    int32_t seq_state;
    uint64_t next_seq;
};
APPENDED(lr_vllm_batch_info, lr_vllm_batch_info_v2, invalid);
APPENDED(lr_vllm_batch_info, lr_vllm_batch_info_v2, seq_state);
APPENDED(lr_vllm_batch_info, lr_vllm_batch_info_v2, next_seq);
_Static_assert(LR_VLLM_BATCH_INFO_SIZE_V2 ==
                   sizeof(struct lr_vllm_batch_info_v2),
               "LR_VLLM_BATCH_INFO_SIZE_V2: does not end at next_seq");

struct lr_kv_source_v1 {
    size_t struct_size;
    int32_t has_seq;
    int32_t gap;
    uint64_t next_seq;
    uint64_t batches;
    uint64_t duplicates;
    uint64_t gaps;
    uint64_t restarts;
};
FIELD(lr_kv_source, lr_kv_source_v1, struct_size, size_t);
FIELD(lr_kv_source, lr_kv_source_v1, has_seq, int32_t);
FIELD(lr_kv_source, lr_kv_source_v1, gap, int32_t);
FIELD(lr_kv_source, lr_kv_source_v1, next_seq, uint64_t);
FIELD(lr_kv_source, lr_kv_source_v1, batches, uint64_t);
FIELD(lr_kv_source, lr_kv_source_v1, duplicates, uint64_t);
FIELD(lr_kv_source, lr_kv_source_v1, gaps, uint64_t);
FIELD(lr_kv_source, lr_kv_source_v1, restarts, uint64_t);
SIZED(lr_kv_source, lr_kv_source_v1, LR_KV_SOURCE_SIZE_V1, restarts);

_Static_assert(LR_KV_SEQ_NONE == 0 && LR_KV_SEQ_APPLIED == 1 &&
                   LR_KV_SEQ_FIRST == 2 && LR_KV_SEQ_DUPLICATE == 3 &&
                   LR_KV_SEQ_GAP == 4 && LR_KV_SEQ_RESTART == 5,
               "lr_kv_seq renumbered");
_Static_assert(LR_ROUTER_MAX_PEERS == 4096u, "LR_ROUTER_MAX_PEERS changed");

static int failures;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* The *_INIT macros set struct_size to the size the caller was built with. */
static void
check_init_macros(void)
{
    lr_index_options io = LR_INDEX_OPTIONS_INIT;
    lr_prompt p = LR_PROMPT_INIT;
    lr_index_match_result m = LR_INDEX_MATCH_RESULT_INIT;
    lr_kv_stored kv = LR_KV_STORED_INIT;
    lr_ring_options ro = LR_RING_OPTIONS_INIT;
    CHECK(io.struct_size == sizeof(lr_index_options));
    CHECK(p.struct_size == sizeof(lr_prompt));
    CHECK(m.struct_size == sizeof(lr_index_match_result));
    CHECK(kv.struct_size == sizeof(lr_kv_stored));
    CHECK(ro.struct_size == sizeof(lr_ring_options));
    CHECK(io.allocator == NULL && io.capacity_blocks == 0);
    CHECK(p.tokens == NULL && p.n_keys == 0);
}

static void
check_version(void)
{
    char expect[64];
    snprintf(expect, sizeof expect, "%d.%d.%d", LR_VERSION_MAJOR,
             LR_VERSION_MINOR, LR_VERSION_PATCH);
    CHECK(LR_VERSION_NUMBER ==
          LR_VERSION_MAJOR * 10000 + LR_VERSION_MINOR * 100 + LR_VERSION_PATCH);
    CHECK(strcmp(LR_VERSION_STRING, expect) == 0);
    CHECK(lr_version_number() == LR_VERSION_NUMBER);
    CHECK(lr_version_string() != NULL);
    if (lr_version_string() != NULL)
        CHECK(strcmp(lr_version_string(), LR_VERSION_STRING) == 0);
    printf("headers %s (%d), library %s (%u)\n", LR_VERSION_STRING,
           LR_VERSION_NUMBER,
           lr_version_string() ? lr_version_string() : "(null)",
           lr_version_number());
}

/* A program built against the 0.1 headers passes the 0.1 size of
 * lr_decision: lr_decision_init_sized() writes only that prefix, and
 * route() and lr_policy_decide() fill only the fields it has. */
static void
check_old_callers(void)
{
    unsigned char buf[sizeof(lr_decision) + 16];
    memset(buf, 0xa5, sizeof buf);
    lr_decision *d = (lr_decision *)(void *)buf;
    lr_decision_init_sized(d, LR_DECISION_SIZE_V1);
    CHECK(d->struct_size == LR_DECISION_SIZE_V1);
    CHECK(d->instance == LR_INSTANCE_NONE);
    for (size_t i = LR_DECISION_SIZE_V1; i < sizeof buf; i++)
        CHECK(buf[i] == 0xa5);
    lr_candidate rows[2];
    memset(rows, 0, sizeof rows);
    rows[0].instance = 3;
    rows[1].instance = 4;
    rows[0].prefill_rate = rows[1].prefill_rate = 1000;
    rows[1].inflight = 1;
    double sc[2];
    lr_policy_input in = LR_POLICY_INPUT_INIT;
    CHECK(lr_policy_decide(LR_POLICY_LEAST_REQUEST, &in, rows, 2,
                           sizeof rows[0], sc, d) == LR_OK);
    CHECK(d->instance == 3);
    for (size_t i = LR_DECISION_SIZE_V1; i < sizeof buf; i++)
        CHECK(buf[i] == 0xa5);
    /* the C initializers and the functions agree (field by field: the
     * padding of an initialized struct is unspecified) */
    lr_decision a = LR_DECISION_INIT, b;
    lr_decision_init(&b);
    CHECK(a.struct_size == b.struct_size && a.instance == b.instance &&
          a.alt_instance == b.alt_instance && a.decider == b.decider &&
          a.score_size == b.score_size && a.scores == b.scores);
    lr_router_options ra = LR_ROUTER_OPTIONS_INIT, rb;
    lr_router_options_init(&rb);
    CHECK(ra.struct_size == rb.struct_size && ra.policy == rb.policy &&
          ra.max_instances == rb.max_instances &&
          ra.max_requests == rb.max_requests &&
          ra.block_tokens == rb.block_tokens &&
          ra.index_capacity_blocks == rb.index_capacity_blocks &&
          ra.index_ttl_ns == rb.index_ttl_ns &&
          ra.ring_vnodes == rb.ring_vnodes &&
          ra.gauge_ttl_ns == rb.gauge_ttl_ns && ra.max_peers == rb.max_peers);
}

/* Counts are run-time facts of the library (never compiled into hosts);
 * each only grows. */
static void
check_counts(void)
{
    if (lr_policy_count() < 16 || lr_param_count() < 33 ||
        lr_reason_count() < 16 ||
        lr_lodestar_feature_count() != LR_LODESTAR_FEATURES) {
        fprintf(stderr, "struct-abi: a count shrank or changed\n");
        failures++;
    }
}

int
main(void)
{
    check_init_macros();
    check_version();
    check_counts();
    check_old_callers();
    if (failures != 0) {
        fprintf(stderr, "struct-abi: %d check(s) failed\n", failures);
        return 1;
    }
    printf("struct-abi: OK (layouts checked at compile time)\n");
    return 0;
}
