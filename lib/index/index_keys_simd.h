/* lr_index, the block keys of 16-token blocks with several block hashes
 * at once (index_keys_simd.c), and the run-time choice of kernel. */
#ifndef LIBROUTE_LIB_INDEX_KEYS_SIMD_H
#define LIBROUTE_LIB_INDEX_KEYS_SIMD_H

#include "common/common.h"
#include "common/lr_hash.h"

/* The kernels, fastest last. */
enum lr__keys_isa {
    LR__KEYS_PORTABLE = 0, /* one block at a time (index_keys.c) */
    LR__KEYS_AVX2 = 1,     /* 4 blocks a step */
    LR__KEYS_AVX512 = 2,   /* 8 blocks a step (AVX-512 F and DQ) */
};

/* One step of the chain: a bijection of the previous key for a given
 * block hash, so prefixes that differ stay different (an odd multiplier,
 * then the halves swapped so that the next multiply mixes the high bits
 * down). Its latency (xor, multiply, rotate) is all the chain costs: the
 * block hashes do not depend on it and overlap. */
static inline uint64_t
lr__index_chain_step(uint64_t prev, uint64_t g)
{
    uint64_t x = (prev ^ g) * LR_CHAIN_MUL;
    return (x << 32) | (x >> 32);
}

/* The chained keys of the first blocks of 16 tokens into out, from the
 * key before them (*prev, left the last key written), with the fastest
 * kernel the CPU runs under the cap: how many, whole steps of 8 or 4
 * blocks (0 with the portable one); the portable loop does the rest. The
 * keys are its own, bit for bit. */
size_t lr__index_chain_keys16_simd(uint64_t *prev, const uint32_t *tok,
                                   size_t nblocks, uint64_t *out);

/* The kernel lr__index_chain_keys16_simd() uses now. */
enum lr__keys_isa lr__index_keys_isa(void);

/* Tests and benchmarks: use no kernel above `cap` (LR__KEYS_AVX512: as
 * the CPU allows, the default). Process-wide. */
void lr__index_keys_cap(enum lr__keys_isa cap);

/* Whether a processor lowers a core's clock for a while after 512-bit
 * multiplies, so that the AVX2 kernel serves it better: Intel's first
 * AVX-512 server cores (Skylake-SP, Cascade Lake, Cooper Lake: family 6,
 * model 0x55), told by cpuid leaf 0's vendor registers and leaf 1's
 * EAX (the signature). A gateway hashing every few microseconds would
 * run all its code at the lower clock. */
bool lr__index_keys_clock_drops(uint32_t vendor_ebx, uint32_t vendor_ecx,
                                uint32_t vendor_edx, uint32_t signature);

#endif /* LIBROUTE_LIB_INDEX_KEYS_SIMD_H */
