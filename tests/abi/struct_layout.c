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
 *   - plain structs (lr_allocator, lr_bounds, lr_index_hit): the size is
 *     exactly the frozen size, since they are copied, returned by value or
 *     laid out in caller arrays and therefore can never grow;
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

/* lr_status is an enum field in lr_bounds, so its size is ABI too. */
_Static_assert(sizeof(lr_status) == sizeof(int32_t),
               "lr_status must stay 32 bits (built with -fshort-enums?)");

struct lr_bounds_v1 {
    lr_status status;
    double lo;
    double hi;
    double def;
};
FIELD(lr_bounds, lr_bounds_v1, status, lr_status);
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

/* ---- run time ------------------------------------------------------------- */

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

int
main(void)
{
    check_init_macros();
    check_version();
    if (failures != 0) {
        fprintf(stderr, "struct-abi: %d check(s) failed\n", failures);
        return 1;
    }
    printf("struct-abi: OK (layouts checked at compile time)\n");
    return 0;
}
