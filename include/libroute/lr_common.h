/** @file
 * Common ground for every libroute header: visibility macros, the status
 * enum, version queries, the per-handle allocator, parameter bounds and
 * library-allocated blobs.
 *
 * Rules that hold for the whole library:
 * - Every fallible call returns an lr_status; a call that fails leaves its
 *   handle exactly as it was.
 * - The library never aborts, exits, prints, reads a clock or starts a
 *   thread; the host passes time in nanoseconds of its monotonic clock.
 * - Pointers passed in are borrowed for the length of the call; whatever the
 *   library keeps, it copies.
 *
 * Example:
 *   lr_status st = lr_index_create(NULL, &idx);
 *   if (st != LR_OK) fprintf(stderr, "libroute: %s\n", lr_strerror(st));
 */
#ifndef LIBROUTE_LR_COMMON_H
#define LIBROUTE_LR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "lr_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- visibility (overridable) ------------------------------------------ */
#ifndef LR_API
#if defined(_WIN32) && defined(LR_BUILDING_DLL)
#define LR_API __declspec(dllexport)
#elif defined(_WIN32) && defined(LR_USING_DLL)
#define LR_API __declspec(dllimport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#define LR_API __attribute__((visibility("default")))
#else
#define LR_API
#endif
#endif

/* Experimental declarations are hidden in the shared library unless the
 * host overrides the macro; only the static archive exposes them. */
#ifndef LR_EXPERIMENTAL
#if defined(__GNUC__) && __GNUC__ >= 4
#define LR_EXPERIMENTAL __attribute__((visibility("hidden")))
#else
#define LR_EXPERIMENTAL
#endif
#endif

#if defined(LR_DISABLE_DEPRECATE_WARNINGS)
#define LR_DEPRECATED(msg)
#elif defined(__GNUC__) || defined(__clang__)
#define LR_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define LR_DEPRECATED(msg)
#endif

/* ---- status codes: explicit values, append-only ------------------------ */
typedef enum lr_status {
    LR_OK = 0,        /* success */
    LR_EINVAL = 1,    /* bad argument: NULL, NaN, out of domain, absurd size */
    LR_ENOMEM = 2,    /* allocation failed; the handle is unchanged */
    LR_ERANGE = 3,    /* parameter outside its bounds (never clamped) */
    LR_ENOENT = 4,    /* unknown instance, request or engine block */
    LR_EEXIST = 5,    /* duplicate instance id or name */
    LR_ELIMIT = 6,    /* a host-set capacity was reached */
    LR_ECORRUPT = 7,  /* malformed delta, snapshot, KV event or model */
    LR_EVERSION = 8,  /* struct_size or serialized format version unsupported */
    LR_ENOTSUP = 9,   /* unknown parameter or unsupported combination */
    LR_ESTATE = 10,   /* call not valid in the handle's current state */
    LR_EBUFSIZE = 11, /* caller buffer too small; the needed size is reported */
    LR_EGAP = 12,     /* a sequence gap: earlier events are missing (replay
                         them); @since 0.2 */
    LR_EBUSY = 13,    /* the fleet is saturated: a sheddable request refused;
                         @since 0.3 */
    LR_EEXPIRED = 14  /* a waiting request's deadline passed before it could
                         be sent; @since 0.3 */
} lr_status;

/** Static English description of a status.
 * @return a static string, never NULL ("unknown status" outside the table).
 * Thread safety: reentrant. @since 0.1 */
LR_API const char *lr_strerror(lr_status status);

/** Symbol name of a status, for example "LR_EINVAL".
 * @return a static string, never NULL ("LR_UNKNOWN" outside the table).
 * Thread safety: reentrant. @since 0.1 */
LR_API const char *lr_status_name(lr_status status);

/* ---- version ------------------------------------------------------------ */

/** LR_VERSION_NUMBER of the library actually linked. Never fails.
 * Thread safety: reentrant. @since 0.1 */
LR_API unsigned lr_version_number(void);

/** LR_VERSION_STRING of the library actually linked; static, never NULL.
 * Thread safety: reentrant. @since 0.1 */
LR_API const char *lr_version_string(void);

/* ---- allocator: one per handle, passed in the options -------------------- */

/** Memory hooks. Every allocation a handle makes goes through them. `free`
 * and `realloc` receive the size originally requested, so pool or arena
 * hosts can use it. The struct is copied at create time; `ud` is passed to
 * every hook unchanged. Hooks are called from whichever thread is using the
 * handle. A NULL allocator pointer in options means libc malloc/realloc/free.
 * All three hooks must be set. @since 0.1 */
typedef struct lr_allocator {
    void *(*alloc)(void *ud, size_t size);
    void *(*realloc)(void *ud, void *ptr, size_t old_size, size_t new_size);
    void (*free)(void *ud, void *ptr, size_t size);
    void *ud;
} lr_allocator;

/* ---- instances ---------------------------------------------------------- */

/** Instance id reserved as "none"; never a valid instance id for any part.
 * @since 0.1 */
#define LR_INSTANCE_NONE UINT32_MAX

/* ---- time ------------------------------------------------------------------ */

/** Every timestamp a handle takes is the host's monotonic clock in
 * nanoseconds from an origin within the last 36 years (boot, the process's
 * start: CLOCK_MONOTONIC, CLOCK_BOOTTIME, Go's time since a start, Python's
 * time.monotonic_ns()), never past this bound, 2^60 ns. A wall clock in
 * nanoseconds since 1970 (above 1.6e18 since 2020) is past it, so a
 * wall-clock value mixed among monotonic ones is refused (LR_ERANGE) even
 * when it is the first timestamp a handle sees. Each handle also refuses a
 * timestamp too far ahead of the newest it has taken (lr_router.h, "Clock").
 * @since 0.3 */
#define LR_MAX_TIME_NS (1ull << 60)

/* ---- parameter bounds ------------------------------------------------------ */

/** Bounds of a run-time parameter: values in [lo, hi] are accepted, `def`
 * is the default. @since 0.1 */
typedef struct lr_bounds {
    /** An lr_status: LR_OK, or LR_ENOTSUP for an unknown key. */
    int32_t status;
    /** LR_BOUNDS_INTEGER: the key takes whole numbers only (a fraction is
     * LR_EINVAL). @since 0.2 (padding in 0.1, always 0 there) */
    int32_t flags;
    double lo;
    double hi;
    double def;
} lr_bounds;

/** lr_bounds.flags: whole numbers only. @since 0.2 */
#define LR_BOUNDS_INTEGER 1

/* ---- library-allocated output --------------------------------------------- */

/** Bytes the library allocated for the caller (for example an index delta).
 * Release with lr_blob_destroy(), never with free(). @since 0.1 */
typedef struct lr_blob lr_blob;

/** Start of the blob's bytes; NULL for a NULL blob. Never fails.
 * Thread safety: reentrant on a blob not being destroyed. @since 0.1 */
LR_API const uint8_t *lr_blob_data(const lr_blob *blob);

/** Length of the blob in bytes; 0 for a NULL blob. Never fails. @since 0.1 */
LR_API size_t lr_blob_size(const lr_blob *blob);

/** Release a blob with the allocator that made it. NULL is a no-op.
 * @since 0.1 */
LR_API void lr_blob_destroy(lr_blob *blob);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_COMMON_H */
