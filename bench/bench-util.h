/* What every benchmark here needs: a seeded PRNG (splitmix64, so runs
 * repeat), a monotonic clock in nanoseconds, medians, and an exit on a
 * failed call. */
#ifndef LIBROUTE_BENCH_UTIL_H
#define LIBROUTE_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "libroute.h"

static inline uint64_t
bench_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t
bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* qsort order of uint64_t, for medians and percentiles */
static inline int
bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v; n > 0). */
static inline uint64_t
bench_median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_cmp_u64);
    return v[n / 2];
}

/* A benchmark cannot go on after a failed call: say which, and exit. */
static inline void
bench_check(lr_status st, const char *what)
{
    if (st != LR_OK) {
        fprintf(stderr, "bench: %s: %s\n", what, lr_strerror(st));
        exit(1);
    }
}

#endif
