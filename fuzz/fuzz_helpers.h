/* Shared helpers for the fuzz harnesses (B35). Fuzz code only: the library
 * itself never aborts or prints (B12). */
#ifndef LIBROUTE_FUZZ_HELPERS_H
#define LIBROUTE_FUZZ_HELPERS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "libroute/lr_common.h"

/* Check a property; on failure print where and what, then abort() so that
 * libFuzzer (or the regression driver under a debugger) stops right here. */
#define FUZZ_ASSERT(cond)                                                \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "%s:%d: FUZZ_ASSERT(%s) failed\n", __FILE__, \
                    __LINE__, #cond);                                    \
            abort();                                                     \
        }                                                                \
    } while (0)

/* Same, with a status in the message. */
#define FUZZ_ASSERT_STATUS(st, cond)                                       \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: FUZZ_ASSERT(%s) failed (status %s)\n", \
                    __FILE__, __LINE__, #cond, lr_status_name(st));        \
            abort();                                                       \
        }                                                                  \
    } while (0)

/* Host time in the harnesses, in nanoseconds; FUZZ_T0 is when the
 * harnesses on a fixed index (delta_apply, vllm_batch) make their calls. */
#define FUZZ_MS 1000000ull
#define FUZZ_SEC 1000000000ull
#define FUZZ_T0 (5 * FUZZ_SEC)

/* Every harness defines this; the regression driver and libFuzzer call it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small FNV-1a accumulator for transcripts of observable results
 * (determinism checks compare two runs' transcripts). */
static inline uint64_t
fuzz_fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t
fuzz_fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fuzz_fnv(h, b, 8);
}

#define FUZZ_FNV_INIT 0xcbf29ce484222325ull

/* Note an observable result in a run's transcript. */
static inline void
fuzz_note(uint64_t *transcript, uint64_t v)
{
    *transcript = fuzz_fnv_u64(*transcript, v);
}

#endif /* LIBROUTE_FUZZ_HELPERS_H */
