/* lrsim: shared helpers (see util.h). */
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
