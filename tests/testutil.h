/* Shared test helpers: status assertions, a counting, failure-injecting
 * allocator (B33) and a seed that is logged so any randomized failure can
 * be replayed. What two or more test programs need lives here or in a
 * topic header (index-helpers.h, load-helpers.h, router-helpers.h). */
#ifndef LIBROUTE_TESTS_TESTUTIL_H
#define LIBROUTE_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/common.h"
#include "libroute/lr_common.h"

/* Fail with both status names when a call returns the wrong status. */
#define assert_st(expr, want)                                            \
    do {                                                                 \
        lr_status st_got_ = (expr);                                      \
        lr_status st_want_ = (want);                                     \
        if (st_got_ != st_want_)                                         \
            fail_msg("%s returned %s, want %s", #expr,                   \
                     lr_status_name(st_got_), lr_status_name(st_want_)); \
    } while (0)

/* Host time is in nanoseconds: a millisecond, a second, and T0, the host
 * time most events in the tests carry (1000 s). */
#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (1000 * SEC)

/* The options seed of the routers and indexes the tests make, where the
 * seed itself is not what a test is about. */
#define OPT_SEED 0x5eed

/* Tokens per block of an index, and so of a router, made with the default
 * options. */
#define BT 16u

struct tu_alloc {
    lr_allocator a;     /* hooks pointing at this struct */
    size_t live_bytes;  /* bytes currently allocated */
    size_t live_blocks; /* allocations currently live */
    uint64_t calls;     /* alloc + realloc calls so far */
    uint64_t fail_at;   /* 1-based call index that fails; 0 = never */
    bool fail_forever;  /* once failed, keep failing */
    bool failed;        /* a failure was injected */
};

/* Reset counters and set up hooks; fail_at = 0 disables injection. */
void tu_alloc_init(struct tu_alloc *t);
void tu_alloc_arm(struct tu_alloc *t, uint64_t fail_at, bool forever);
void tu_alloc_disarm(struct tu_alloc *t);

/* OOM scenarios build their fixture with the allocator paused, then resume
 * it as the loop armed it, so that only the calls under test see failures
 * (and the fixture's allocations do not count towards fail_at). */
struct tu_arming {
    uint64_t fail_at;
    bool forever;
};
struct tu_arming tu_alloc_pause(struct tu_alloc *t);
void tu_alloc_resume(struct tu_alloc *t, struct tu_arming arm);

/* Seed from LR_TEST_SEED in the environment, else from `fallback`; printed
 * to stderr so a failure can be replayed. */
uint64_t tu_seed(const char *what, uint64_t fallback);

/* Whether two load snapshots hold the same values, field by field. Not
 * memcmp(): a snapshot returned by value need not carry its padding
 * bytes along (optimised builds copy only the fields). */
struct lr_load_snapshot;
bool tu_same_load(const struct lr_load_snapshot *a,
                  const struct lr_load_snapshot *b);

/* Tiny deterministic PRNG for tests (the library's splitmix64). */
static inline uint64_t
tu_rand(uint64_t *s)
{
    return lr__splitmix64(s);
}

static inline uint64_t
tu_below(uint64_t *s, uint64_t n)
{
    return n == 0 ? 0 : tu_rand(s) % n;
}

/* Uniform in [0, 1), from the top 53 bits. */
static inline double
tu_unit(uint64_t *s)
{
    return (double)(tu_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* n tokens drawn from the PRNG state s, a pure function of s. */
static inline void
tu_tokens(uint32_t *t, size_t n, uint64_t s)
{
    for (size_t i = 0; i < n; i++)
        t[i] = (uint32_t)tu_rand(&s);
}

/* OOM loop (B33): for N = 1, 2, ... call `scenario` with the allocator armed
 * to fail at allocation N (once, then again with forever = true). The
 * scenario returns true when it ran to the end with no injected failure,
 * which stops the loop. The scenario itself asserts that a failing call
 * returned LR_ENOMEM and left its handle unchanged; this driver asserts
 * that nothing leaked once the scenario has cleaned up. */
typedef bool (*tu_scenario)(struct tu_alloc *t, void *ctx);
void tu_oom_loop(tu_scenario scenario, void *ctx, uint64_t max_n);

#endif
