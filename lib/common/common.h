/* Internal helpers shared by every part of libroute. Never installed. */
#ifndef LIBROUTE_LIB_COMMON_H
#define LIBROUTE_LIB_COMMON_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "libroute/lr_common.h"

/* Invariant checks (B12): assert in debug builds, a safe value in release
 * builds. Use LR_ALWAYS(x) in `if (LR_ALWAYS(x))` for "should always hold"
 * and LR_NEVER(x) for "should never happen" defensive branches. */
#ifdef NDEBUG
#define LR_ALWAYS(x) (x)
#define LR_NEVER(x) (x)
#else
#define LR_ALWAYS(x) ((x) ? 1 : (assert(0 && #x), 0))
#define LR_NEVER(x) ((x) ? (assert(0 && #x), 1) : 0)
#endif

#define LR_TRY(expr)                \
    do {                            \
        lr_status lr__st_ = (expr); \
        if (lr__st_ != LR_OK)       \
            return lr__st_;         \
    } while (0)

#define LR_RETURN_IF(cond, status) \
    do {                           \
        if (cond)                  \
            return (status);       \
    } while (0)

#define LR_NIL UINT32_MAX

/* Keep a value the compiler would otherwise drop, so that a load made
 * only to pull a cache line in (the ring's and the index's prefetches)
 * stays a load. */
static inline void
lr__sink(uint64_t v)
{
#if defined(__GNUC__)
    __asm__ volatile("" : : "r"(v));
#else
    volatile uint64_t keep = v;
    (void)keep;
#endif
}

/* A function the compiler must not inline: a hot loop that keeps its own
 * registers instead of sharing its caller's allocation. */
#if defined(__GNUC__)
#define LR_NOINLINE __attribute__((noinline))
#else
#define LR_NOINLINE
#endif

/* A function the common path does not call (a lock's wait): kept out of
 * the way of the code that runs every call. */
#if defined(__GNUC__)
#define LR_COLD __attribute__((cold, noinline))
#else
#define LR_COLD
#endif

/* Bytes between fields that different threads write (LR__GAP): a cache
 * line, so that no two of them share one whatever the struct's address
 * (the host's allocator aligns it to 16 at best). A route on one core
 * otherwise pulls the lines that a route on the other core just wrote,
 * and between two dies such a pull costs hundreds of nanoseconds
 * (docs/perf.md, "Threads"). */
#define LR__GAP_BYTES 64
#define LR__GAP(name) char name[LR__GAP_BYTES]

/* ---- allocator ---------------------------------------------------------- */

struct lr__mem {
    lr_allocator a;
    /* bytes allocated now through this handle; atomic: a router's routes
     * on several threads take their scratch through one lr__mem */
    _Atomic size_t live;
};

/* Copy `a` (or libc when NULL) into m. LR_EINVAL for a partly-set hook set. */
lr_status lr__mem_init(struct lr__mem *m, const lr_allocator *a);
void *lr__alloc(struct lr__mem *m, size_t n);
void *lr__calloc(struct lr__mem *m, size_t count, size_t size);
void *lr__realloc(struct lr__mem *m, void *p, size_t old_n, size_t new_n);
void lr__free(struct lr__mem *m, void *p, size_t n);

/* Room for `need` elements of `elem` bytes in *arr (*cap of them now):
 * grown to need + need / 2, at least `min`, when it holds fewer. LR_OK,
 * or LR_ENOMEM with *arr and *cap as they were. For scratch arrays. */
lr_status lr__grow(struct lr__mem *m, void **arr, size_t *cap, size_t need,
                   size_t elem, size_t min);

/* A new handle: `size` zeroed bytes from the caller's allocator `a` (NULL:
 * libc's; one without all three functions: LR_EINVAL), which the handle
 * keeps at byte `mem_at` (its `struct lr__mem` field, counting the handle)
 * for its later allocations and its destroy. `out` is the address of the
 * caller's pointer to it, left as it was on failure. */
lr_status lr__handle_new(const lr_allocator *a, size_t size, size_t mem_at,
                         void *out);
/* The same for a handle `h` of type T (with its lr__mem as `mem`). */
#define LR__HANDLE_NEW(h, T, a) \
    lr__handle_new((a), sizeof(T), offsetof(T, mem), &(h))
/* The handle's own bytes back to the allocator it keeps inside them (read
 * out first): the last step of a destroy, after its parts are freed. */
void lr__handle_free(void *h, size_t size, size_t mem_at);
#define LR__HANDLE_FREE(h, T) lr__handle_free((h), sizeof(T), offsetof(T, mem))

/* Options read over their defaults `def`: a field the caller left 0 keeps
 * its default (for the fields where 0 is not a choice of its own). */
#define LR__ZERO_KEEPS_DEFAULT(o, def, f) \
    if ((o)->f == 0)                      \
        (o)->f = (def)->f;

/* Overflow-checked size arithmetic (B22): false on overflow. */
static inline bool
lr__mul_size(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b)
        return false;
    *out = a * b;
    return true;
}

static inline bool
lr__add_size(size_t a, size_t b, size_t *out)
{
    if (a > SIZE_MAX - b)
        return false;
    *out = a + b;
    return true;
}

/* Options structs: the library reads min(struct_size, sizeof) bytes and
 * defaults the rest. LR_EVERSION under `min_size`. */
lr_status lr__copy_sized(void *dst, size_t dst_size, const void *src,
                         size_t min_size);

/* Output structs: copy `src` (src_size bytes, the library's struct) into
 * a caller's struct of any size >= its v1 size, as much as both know,
 * keeping the caller's struct_size. Never fails; returns LR_OK. */
lr_status lr__copy_out(void *dst, const void *src, size_t src_size);

/* The checks before a query fills a caller's output struct: LR_EINVAL for
 * a NULL handle `h` or `out`, LR_EVERSION when out's struct_size is under
 * `min_size`, else LR_OK. */
static inline lr_status
lr__out_check(const void *h, const void *out, size_t min_size)
{
    if (h == NULL || out == NULL)
        return LR_EINVAL;
    size_t have;
    memcpy(&have, out, sizeof have);
    return have < min_size ? LR_EVERSION : LR_OK;
}

/* The lr_X_init_sized() functions: zero the caller's `size` bytes, copy
 * the library's defaults (def_size bytes; NULL for none) into the prefix
 * both know and stamp struct_size = size. NULL or a size too small to
 * hold struct_size is a no-op. */
void lr__init_sized(void *p, size_t size, const void *defaults,
                    size_t def_size);

/* Define `static const T name`, the defaults of public struct T (its
 * struct_size and the designated initializers that follow), and the
 * exported `void fn(T *p, size_t size)` that copies them (declared in
 * T's header; fn is written out, T_init_sized, so that a grep for it
 * finds its definition); the _ZERO form: every field zero but
 * struct_size. */
#define LR__INIT_SIZED(fn, T, name, ...)                             \
    static const T name = { .struct_size = sizeof(T), __VA_ARGS__ }; \
    void fn(T *p, size_t size)                                       \
    {                                                                \
        lr__init_sized(p, size, &name, sizeof name);                 \
    }
#define LR__INIT_SIZED_ZERO(fn, T)        \
    void fn(T *p, size_t size)            \
    {                                     \
        lr__init_sized(p, size, NULL, 0); \
    }

/* ---- blobs -------------------------------------------------------------- */

/* A blob carries a copy of the allocator that made it, so it can be freed
 * after its handle is gone. */
lr_status lr__blob_new(const struct lr__mem *m, size_t size, lr_blob **out,
                       uint8_t **data);

/* The bytes of a blob the library made, writable (a frame resealed). */
uint8_t *lr__blob_bytes(lr_blob *b);

/* ---- hash seeds (entropy.c) ---------------------------------------------- */

/* The seed a handle keys its hash tables with: `given` when the host set
 * one (non-zero), else 64 bits from the operating system (getrandom), else
 * a mix of addresses, a counter and the clocks. Never 0, never fails.
 * `salt` (the handle, say) only feeds the fallback. Separate from every
 * routing generator: fixing a router's seed for reproducible decisions
 * never fixes its hash seed. */
uint64_t lr__hash_seed(uint64_t given, const void *salt);
/* The same with the entropy source given (tests pass one that fails):
 * source fills n bytes and says whether it could. */
uint64_t lr__seed_from(bool (*source)(void *buf, size_t n), const void *salt);

/* ---- PRNG: splitmix64 seeding a xoshiro256** (B24) ---------------------- */

struct lr__rng {
    uint64_t s[4];
};

void lr__rng_seed(struct lr__rng *r, uint64_t seed);

/* splitmix64: the next of the sequence seeded at *x (it seeds lr__rng;
 * tests and benchmarks use it as their repeatable PRNG). */
static inline uint64_t
lr__splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
uint64_t lr__rng_next(struct lr__rng *r);
/* Uniform in [0, n) for n >= 1, without modulo bias. */
uint64_t lr__rng_below(struct lr__rng *r, uint64_t n);
/* Uniform in [0, 1). */
double lr__rng_unit(struct lr__rng *r);

/* ---- search over id-sorted arrays ---------------------------------------- */

/* First position in [lo, hi) of an array of `size`-byte elements, sorted
 * ascending by the uint32_t at byte offset `off` of each, whose key is not
 * below `id` (hi when none is). Use LR__LOWER_BOUND, which fills in the
 * element's size and the key's offset. */
static inline uint32_t
lr__lower_bound_u32(const void *base, size_t size, size_t off, uint32_t lo,
                    uint32_t hi, uint32_t id)
{
    const unsigned char *b = base;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t key;
        memcpy(&key, b + (size_t)mid * size + off, sizeof key);
        if (key < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* LR__LOWER_BOUND(struct x, field, array, lo, hi, id): the above over an
 * array of struct x keyed by its `field` (a uint32_t, checked at compile
 * time). */
#define LR__LOWER_BOUND(T, f, a, lo, hi, id)                               \
    ((void)sizeof(char[sizeof(((T *)0)->f) == sizeof(uint32_t) ? 1 : -1]), \
     lr__lower_bound_u32((a), sizeof(T), offsetof(T, f), (lo), (hi), (id)))

/* ---- little-endian byte helpers (B26: never raw memory on the wire) ----- */

static inline void
lr__put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void
lr__put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t
lr__get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t
lr__get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* 64 bits: the low word first. */
static inline void
lr__put_u64(uint8_t *p, uint64_t v)
{
    lr__put_u32(p, (uint32_t)v);
    lr__put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t
lr__get_u64(const uint8_t *p)
{
    return lr__get_u32(p) | (uint64_t)lr__get_u32(p + 4) << 32;
}

/* Floats: their IEEE-754 bits, through an integer of their width (memcpy,
 * no aliasing); one definition for float (32) and double (64). */
#define LR__FLOAT_LE(F, N)                           \
    static inline void lr__put_f##N(uint8_t *p, F v) \
    {                                                \
        uint##N##_t u;                               \
        memcpy(&u, &v, sizeof u);                    \
        lr__put_u##N(p, u);                          \
    }                                                \
    static inline F lr__get_f##N(const uint8_t *p)   \
    {                                                \
        uint##N##_t u = lr__get_u##N(p);             \
        F v;                                         \
        memcpy(&v, &u, sizeof v);                    \
        return v;                                    \
    }
LR__FLOAT_LE(float, 32)
LR__FLOAT_LE(double, 64)
#undef LR__FLOAT_LE

/* A parameter's range and default, as the parameter tables hold them
 * (policy.c, cost.c); hi > lo for every defined one, so an all-zero entry
 * is an unknown key. */
struct lr__range {
    double lo, hi, def;
    bool integer;
};

/* Its public form; NULL or an all-zero entry: LR_ENOTSUP. */
lr_bounds lr__bounds_of(const struct lr__range *r);

/* SipHash-2-4 (Aumasson and Bernstein) of buf under a 16-byte key: the
 * MAC of the frames replicas exchange when the host sets a peer key
 * (lr_router_set_peer_key). Never fails. */
uint64_t lr__siphash(const uint8_t key[16], const void *buf, size_t len);

/* ---- the clock --------------------------------------------------------------
 *
 * How a handle judges the host's timestamps (lr_common.h, LR_MAX_TIME_NS;
 * lr_router.h, "Clock"). Every call that takes a timestamp judges it before
 * it changes anything and takes it once it succeeded:
 *
 *   LR_TRY(lr__clock_judge(&clock, now_ns, true));   // LR_ERANGE: refused
 *   ... the call's work; on success:
 *   lr__clock_take(&clock, now_ns);
 *
 * A timestamp past LR_MAX_TIME_NS, or more than skew_ns ahead of the newest
 * one taken, is refused; the first one too when it is past the bound. Two
 * calls in a row that are both that far ahead, the second not earlier and
 * within the skew of the first, mean the host's clock really moved (an
 * idle gap, a restart of its clock): the second is taken. Any timestamp
 * within the skew in between breaks such a pair, so a stray value (a wall
 * clock among monotonic ones, 2^59) never moves the clock. `mutates` is
 * false for queries: they are judged but never count towards a pair. The
 * pair's bookkeeping is the only thing a refusal changes; no digest sees
 * it. skew_ns UINT64_MAX judges the bound only (a part whose owner judged
 * the timestamp already). */
struct lr__clock {
    /* Atomic: a router judges and takes the times of routes on several
     * threads at once (relaxed: the clock orders nothing else). */
    _Atomic uint64_t newest; /* newest timestamp taken; 0: none yet */
    _Atomic uint64_t ahead;  /* the last one refused as ahead, when the
                                call before this one was refused so too (0:
                                none) */
    uint64_t skew_ns;
};

lr_status lr__clock_judge(struct lr__clock *c, uint64_t t_ns, bool mutates);
void lr__clock_take(struct lr__clock *c, uint64_t t_ns);

/* The k-th smallest (0-based, k < n) of a[0..n), which it reorders; no
 * NaN in a. O(n) expected and O(n log n) at worst, whatever the values
 * (a host's candidate table can be shaped against a plain quickselect):
 * partitions around a median of three until 2 log2(n) rounds have not
 * finished, then heap-sorts what is left. Never fails. */
double lr__select(double *a, size_t n, size_t k);

#endif /* LIBROUTE_LIB_COMMON_H */
