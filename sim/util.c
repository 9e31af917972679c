/* lrsim: shared helpers (see util.h). */
#if !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1 /* MAP_ANONYMOUS (glibc) */
#endif
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#if !defined(__STDC_NO_ATOMICS__)
#include <stdatomic.h> /* the arenas' lock */
#endif

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#endif
#if defined(MAP_ANONYMOUS)
#define SIM_MAP_ANON MAP_ANONYMOUS
#elif defined(MAP_ANON)
#define SIM_MAP_ANON MAP_ANON
#endif

int
sim_errf(struct sim_err *err, const char *fmt, ...)
{
    if (err == NULL || err->msg[0] != '\0')
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (err->msg[0] == '\0')
        snprintf(err->msg, sizeof err->msg, "unknown error");
    return -1;
}

void *
sim_calloc(size_t n, size_t size)
{
    if (n == 0 || size == 0)
        return calloc(1, 1);
    if (n > SIZE_MAX / size)
        return NULL;
    return calloc(n, size);
}

void *
sim_reallocarray(void *p, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    return realloc(p, bytes ? bytes : 1);
}

/* ---- arenas ------------------------------------------------------------------- */

/* Blocks put back, by size: a few sizes at a time (one per engine class
 * of the runs in flight), each a list linked through the blocks' first
 * bytes. A spin lock: taken once per engine made or destroyed. */
#define ARENA_SIZES 16

struct arena_free {
    struct arena_free *next;
};

static struct {
    size_t bytes;
    struct arena_free *head;
} arenas[ARENA_SIZES];

#if !defined(__STDC_NO_ATOMICS__)
static atomic_flag arena_lock = ATOMIC_FLAG_INIT;

static void
arena_take(void)
{
    while (atomic_flag_test_and_set_explicit(&arena_lock,
                                             memory_order_acquire))
        ;
}

static void
arena_give(void)
{
    atomic_flag_clear_explicit(&arena_lock, memory_order_release);
}
#else
static void
arena_take(void)
{
}

static void
arena_give(void)
{
}
#endif

static int
arena_mapped(size_t bytes)
{
#if defined(SIM_MAP_ANON)
    return bytes >= SIM_ARENA_MIN;
#else
    (void)bytes;
    return 0;
#endif
}

void *
sim_arena_get(size_t bytes)
{
    if (bytes < sizeof(struct arena_free))
        bytes = sizeof(struct arena_free);
    void *p = NULL;
    arena_take();
    for (size_t k = 0; k < ARENA_SIZES && p == NULL; k++)
        if (arenas[k].bytes == bytes && arenas[k].head != NULL) {
            p = arenas[k].head;
            arenas[k].head = arenas[k].head->next;
        }
    arena_give();
    if (p != NULL)
        return p;
#if defined(SIM_MAP_ANON)
    if (arena_mapped(bytes)) {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | SIM_MAP_ANON, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
#endif
    return malloc(bytes);
}

void
sim_arena_put(void *p, size_t bytes)
{
    if (p == NULL)
        return;
    if (bytes < sizeof(struct arena_free))
        bytes = sizeof(struct arena_free);
    struct arena_free *f = p;
    size_t k = 0;
    arena_take();
    /* its size's list, else an empty one */
    while (k < ARENA_SIZES && arenas[k].bytes != bytes)
        k++;
    if (k == ARENA_SIZES)
        for (k = 0; k < ARENA_SIZES && arenas[k].head != NULL; k++)
            ;
    if (k < ARENA_SIZES) {
        arenas[k].bytes = bytes;
        f->next = arenas[k].head;
        arenas[k].head = f;
    }
    arena_give();
    if (k < ARENA_SIZES)
        return;
#if defined(SIM_MAP_ANON)
    if (arena_mapped(bytes)) {
        munmap(p, bytes);
        return;
    }
#endif
    free(p);
}

int
sim_grow(void **buf, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return -1;
        nc *= 2;
    }
    void *nb = sim_reallocarray(*buf, nc, size);
    if (nb == NULL)
        return -1;
    *buf = nb;
    *cap = nc;
    return 0;
}

/* ---- generator -------------------------------------------------------------- */

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void
sim_rng_seed(struct sim_rng *r, uint64_t seed)
{
    uint64_t z = seed;
    for (int i = 0; i < 4; i++) {
        z += 0x9e3779b97f4a7c15ull;
        r->s[i] = sim_mix64(z);
    }
}

uint64_t
sim_rng_next(struct sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double
sim_rng_unit(struct sim_rng *r)
{
    return (double)(sim_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t
sim_rng_range(struct sim_rng *r, uint64_t lo, uint64_t hi)
{
    uint64_t span = hi - lo + 1;
    if (span == 0) /* the whole 64-bit range */
        return sim_rng_next(r);
    /* rejection keeps the draw exactly uniform */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do
        x = sim_rng_next(r);
    while (x >= limit);
    return lo + x % span;
}

double
sim_rng_exp(struct sim_rng *r, double mean)
{
    return -mean * log1p(-sim_rng_unit(r));
}

double
sim_rng_normal(struct sim_rng *r, double mean, double sd)
{
    double u1 = sim_rng_unit(r), u2 = sim_rng_unit(r);
    double z = sqrt(-2.0 * log1p(-u1)) * cos(2.0 * 3.14159265358979323846 * u2);
    return mean + sd * z;
}

void
sim_tokens(uint64_t seed, uint32_t start, uint32_t n, uint32_t *out)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = sim_token(seed, start + i);
}
