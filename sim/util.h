/* lrsim: small shared pieces (error buffer, seeded generator, checked
 * allocation, token expansion). Tool code, not part of the libroute ABI. */
#ifndef LRSIM_UTIL_H
#define LRSIM_UTIL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define SIM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SIM_PRINTF(a, b)
#endif

/* Where a failing call says what went wrong: one message, written once
 * (the first error wins, so the innermost and most precise one stays). */
struct sim_err {
    char msg[512];
};

/* Format into err (unless it already holds a message); returns -1 so that
 * callers can write `return sim_errf(err, ...)`. err may be NULL. */
int sim_errf(struct sim_err *err, const char *fmt, ...) SIM_PRINTF(2, 3);

/* calloc(n, size) with overflow check; NULL on failure. */
void *sim_calloc(size_t n, size_t size);
/* realloc(p, n * size) with overflow check; NULL (p untouched) on failure. */
void *sim_reallocarray(void *p, size_t n, size_t size);

/* `bytes` of memory whose contents are unspecified: zero the first time,
 * whatever its last user left after. For a large array that a run may
 * use little of and whose user writes each part before it reads it (an
 * engine's blocks and tables). From SIM_ARENA_MIN bytes on it is mapped
 * from the system, so a page costs memory only once written (neither
 * malloc's reuse of freed memory nor MALLOC_PERTURB_ writes it).
 * sim_arena_put keeps it for the next sim_arena_get of the same size, in
 * any thread: the runs of a suite or of several policies reuse their
 * engines' pages instead of faulting fresh ones in and unmapping them
 * again. NULL on failure. */
#define SIM_ARENA_MIN (64u * 1024u)
void *sim_arena_get(size_t bytes);
void sim_arena_put(void *p, size_t bytes);

/* Grow *buf (elements of `size` bytes) to hold at least `need` elements;
 * capacity doubles. 0 on success, -1 (buffer untouched) on failure. */
int sim_grow(void **buf, size_t *cap, size_t need, size_t size);

/* ---- deterministic randomness ------------------------------------------ */

/* splitmix64 step: the seeding and mixing function. */
static inline uint64_t
sim_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* xoshiro256** seeded by splitmix64. Every random draw of lrsim comes from
 * one of these, seeded from --seed. */
struct sim_rng {
    uint64_t s[4];
};

void sim_rng_seed(struct sim_rng *r, uint64_t seed);
uint64_t sim_rng_next(struct sim_rng *r);
/* Uniform in [0, 1). */
double sim_rng_unit(struct sim_rng *r);
/* Uniform integer in [lo, hi] (inclusive; lo <= hi). */
uint64_t sim_rng_range(struct sim_rng *r, uint64_t lo, uint64_t hi);
/* Exponential with the given mean. */
double sim_rng_exp(struct sim_rng *r, double mean);
/* Normal (Box-Muller, one draw per call). */
double sim_rng_normal(struct sim_rng *r, double mean, double sd);

/* ---- tokens --------------------------------------------------------------- */

/* Token `i` of a segment named by `seed`: a pure function, so equal seeds
 * give equal token runs. Ids stay below 2^17, the size of a real
 * vocabulary. */
static inline uint32_t
sim_token(uint64_t seed, uint32_t i)
{
    return (uint32_t)(sim_mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1ull)) >>
                      47);
}

/* Fill out[0..n) with tokens start..start+n of segment `seed`. */
void sim_tokens(uint64_t seed, uint32_t start, uint32_t n, uint32_t *out);

#endif /* LRSIM_UTIL_H */
