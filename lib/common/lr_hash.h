/* The only door to xxHash (B25): inlined, so no XXH_* symbol is exported
 * and a host linking its own xxHash or zstd never collides with ours. */
#ifndef LIBROUTE_LIB_LR_HASH_H
#define LIBROUTE_LIB_LR_HASH_H

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdint.h>
#include <string.h>

/* Persistent seeds (B26): documented in the public headers, never change. */
#define LR_SEED_TENANT 0x4c52544e414e5431ull /* "LRTNANT1" */
#define LR_SEED_BLOCK 0x4c52424c4f434b32ull  /* "LRBLOCK2" (key format 2) */
#define LR_CHAIN_MUL 0x9e3779b97f4a7c15ull   /* 2^64 / phi, odd */
#define LR_SEED_VNODE 0x4c52564e4f444531ull  /* "LRVNODE1" */
#define LR_SEED_RINGK 0x4c5252494e474b31ull  /* "LRRINGK1" */
#define LR_SEED_TEXT 0x4c52544558543031ull   /* "LRTEXT01" */
#define LR_SEED_DELTA 0x4c5244454c544131ull  /* "LRDELTA1" */
#define LR_SEED_NAME 0x4c524e414d453031ull   /* "LRNAME01" */
#define LR_SEED_ADAPT 0x4c52414441505431ull  /* "LRADAPT1" */
#define LR_SEED_MMKEY 0x4c524d4d4b455931ull  /* "LRMMKEY1" */

static inline uint64_t
lr__hash(const void *p, size_t n, uint64_t seed)
{
    return XXH3_64bits_withSeed(p, n, seed);
}

/* lr__hash() of one 64-byte input under a fixed seed, taken apart for
 * kernels that hash several inputs at once (index/index_keys_simd.c).
 * XXH3 (len 17..128, default secret) XORs the input's eight little-endian
 * words w[j] with word[j], multiplies each pair (w0, w1), (w2, w3), (w4,
 * w5), (w6, w7) to 128 bits and folds it (low XOR high), adds the four
 * folds to acc, then avalanches: x ^= x >> 37, x *= avalanche,
 * x ^= x >> 32. tests/test-index.c holds each kernel to lr__hash(). */
struct lr__hash64b {
    uint64_t word[8];
    uint64_t acc;
    uint64_t avalanche;
};

static inline void
lr__hash64b_init(uint64_t seed, struct lr__hash64b *k)
{
    const uint8_t *s = XXH3_kSecret;
    /* the pair at input offset 16i meets the secret at 16 * slot[i] */
    static const unsigned slot[4] = { 0, 2, 3, 1 };
    for (unsigned i = 0; i < 4; i++) {
        k->word[2 * i] = XXH_readLE64(s + 16 * slot[i]) + seed;
        k->word[2 * i + 1] = XXH_readLE64(s + 16 * slot[i] + 8) - seed;
    }
    k->acc = 64 * XXH_PRIME64_1;
    k->avalanche = 0x165667919E3779F9ull;
}

/* Keyed mix of a 64-bit value for in-process tables (seeded per handle). */
static inline uint64_t
lr__mix64(uint64_t x, uint64_t seed)
{
    x ^= seed;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Digests (lr__X_digest): fold one value into a running checksum. */
static inline uint64_t
lr__digest_mix(uint64_t h, uint64_t v)
{
    return lr__mix64(h ^ v, 0x9e3779b97f4a7c15ull);
}

/* A double's bit pattern, for digests. */
static inline uint64_t
lr__double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

#endif /* LIBROUTE_LIB_LR_HASH_H */
