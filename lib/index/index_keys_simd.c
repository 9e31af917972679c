/* lr_index, the block keys of 16-token blocks with several block hashes
 * at once. A block's hash (XXH3 of its 64 bytes, lr__hash64b) does not
 * depend on the chain, so a step hashes 8 blocks (AVX-512: one block a
 * lane of 64 bits) or 4 (AVX2), then chains them one by one. The chain's
 * latency (xor, multiply, rotate: about 5 cycles a block) bounds the
 * whole; one block at a time, XXH3's 56 instructions a block bound it
 * instead (docs/index.md, "Keys").
 *
 * A step loads its blocks whole, transposes them so that vector j holds
 * word j of every block, and does XXH3's arithmetic on the vectors: the
 * 64 x 64 -> 128-bit products from four 32 x 32 -> 64-bit ones, as
 * xxHash's portable code does. Blocks past the last full step are the
 * portable loop's (index_keys.c). The keys are the portable loop's, bit for bit
 * (tests/test-index.c, every kernel against a naive chain).
 *
 * The choice is made at run time (cpuid), cached in an atomic int;
 * lr__index_keys_cap() holds it below a kernel for tests and benchmarks. */
#include "index/index_keys_simd.h"

#include <stdatomic.h>

#if defined(__GNUC__) && defined(__x86_64__) && \
    !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
#define KEYS_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define KEYS_X86 0
#endif

#if KEYS_X86

/* ---- AVX-512 ------------------------------------------------------------- */

#define AVX512_FN __attribute__((target("avx512f,avx512dq")))
#define AVX512_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512dq")))

/* Low XOR high of the 128-bit products a * b, lane by lane. */
AVX512_INLINE __m512i
fold512(__m512i a, __m512i b)
{
    const __m512i m32 = _mm512_set1_epi64(0xffffffffll);
    __m512i ah = _mm512_srli_epi64(a, 32), bh = _mm512_srli_epi64(b, 32);
    __m512i ll = _mm512_mul_epu32(a, b), hl = _mm512_mul_epu32(ah, b);
    __m512i lh = _mm512_mul_epu32(a, bh), hh = _mm512_mul_epu32(ah, bh);
    __m512i cross = _mm512_add_epi64(
        _mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(hl, m32)),
        lh);
    __m512i hi =
        _mm512_add_epi64(_mm512_add_epi64(_mm512_srli_epi64(hl, 32),
                                          _mm512_srli_epi64(cross, 32)),
                         hh);
    __m512i lo =
        _mm512_mask_blend_epi32(0xaaaa, ll, _mm512_slli_epi64(cross, 32));
    return _mm512_xor_si512(lo, hi);
}

AVX512_FN static size_t
keys16_avx512(uint64_t *prev_io, const uint32_t *tok, size_t nblocks,
              uint64_t *out)
{
    uint64_t prev = *prev_io;
    struct lr__hash64b k;
    lr__hash64b_init(LR_SEED_BLOCK, &k);
    __m512i c[8];
    for (int j = 0; j < 8; j++)
        c[j] = _mm512_set1_epi64((long long)k.word[j]);
    const __m512i acc0 = _mm512_set1_epi64((long long)k.acc);
    const __m512i mx = _mm512_set1_epi64((long long)k.avalanche);
    size_t i = 0;
    for (; i + 8 <= nblocks; i += 8) {
        const uint32_t *p = tok + i * 16;
        __m512i b[8], t[8], u[8], w[8];
        for (int j = 0; j < 8; j++)
            b[j] = _mm512_loadu_si512((const void *)(p + 16 * j));
        /* 8 x 8 words: t pairs blocks 2m, 2m+1 word by word, u groups
         * four blocks, w[j] holds word j of blocks 0..7 */
        for (int m = 0; m < 4; m++) {
            t[2 * m] = _mm512_unpacklo_epi64(b[2 * m], b[2 * m + 1]);
            t[2 * m + 1] = _mm512_unpackhi_epi64(b[2 * m], b[2 * m + 1]);
        }
        for (int m = 0; m < 2; m++)
            for (int h = 0; h < 2; h++) {
                u[4 * m + 2 * h] =
                    _mm512_shuffle_i64x2(t[4 * m + h], t[4 * m + h + 2], 0x88);
                u[4 * m + 2 * h + 1] =
                    _mm512_shuffle_i64x2(t[4 * m + h], t[4 * m + h + 2], 0xdd);
            }
        /* u[0]: words 0, 4; u[1]: 2, 6; u[2]: 1, 5; u[3]: 3, 7 (blocks
         * 0-3), u[4..7] the same of blocks 4-7 */
        static const int word_lo[4] = { 0, 2, 1, 3 };
        for (int q = 0; q < 4; q++) {
            w[word_lo[q]] = _mm512_shuffle_i64x2(u[q], u[q + 4], 0x88);
            w[word_lo[q] + 4] = _mm512_shuffle_i64x2(u[q], u[q + 4], 0xdd);
        }
        __m512i acc = acc0;
        for (int j = 0; j < 8; j += 2)
            acc = _mm512_add_epi64(
                acc, fold512(_mm512_xor_si512(w[j], c[j]),
                             _mm512_xor_si512(w[j + 1], c[j + 1])));
        acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 37));
        acc = _mm512_mullo_epi64(acc, mx);
        acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 32));
        uint64_t g[8];
        _mm512_storeu_si512((void *)g, acc);
        for (int j = 0; j < 8; j++) {
            prev = lr__index_chain_step(prev, g[j]);
            out[i + j] = prev;
        }
    }
    /* explicit: gcc leaves it out before a tail call, and every SSE
     * instruction after the return would wait on the dirty upper halves
     * (here min-ttft's cost loop 4x slower, a route up to 45%) */
    _mm256_zeroupper();
    *prev_io = prev;
    return i;
}

/* ---- AVX2 ---------------------------------------------------------------- */

#define AVX2_FN __attribute__((target("avx2")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

AVX2_INLINE __m256i
fold256(__m256i a, __m256i b)
{
    const __m256i m32 = _mm256_set1_epi64x(0xffffffffll);
    __m256i ah = _mm256_srli_epi64(a, 32), bh = _mm256_srli_epi64(b, 32);
    __m256i ll = _mm256_mul_epu32(a, b), hl = _mm256_mul_epu32(ah, b);
    __m256i lh = _mm256_mul_epu32(a, bh), hh = _mm256_mul_epu32(ah, bh);
    __m256i cross = _mm256_add_epi64(
        _mm256_add_epi64(_mm256_srli_epi64(ll, 32), _mm256_and_si256(hl, m32)),
        lh);
    __m256i hi =
        _mm256_add_epi64(_mm256_add_epi64(_mm256_srli_epi64(hl, 32),
                                          _mm256_srli_epi64(cross, 32)),
                         hh);
    __m256i lo = _mm256_blend_epi32(ll, _mm256_slli_epi64(cross, 32), 0xaa);
    return _mm256_xor_si256(lo, hi);
}

/* The low 64 bits of a * m, lane by lane (AVX2 has no 64-bit multiply);
 * mh: m >> 32 in every lane. */
AVX2_INLINE __m256i
mul64(__m256i a, __m256i m, __m256i mh)
{
    __m256i cross = _mm256_add_epi64(
        _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m), _mm256_mul_epu32(a, mh));
    return _mm256_add_epi64(_mm256_mul_epu32(a, m),
                            _mm256_slli_epi64(cross, 32));
}

AVX2_FN static size_t
keys16_avx2(uint64_t *prev_io, const uint32_t *tok, size_t nblocks,
            uint64_t *out)
{
    uint64_t prev = *prev_io;
    struct lr__hash64b k;
    lr__hash64b_init(LR_SEED_BLOCK, &k);
    __m256i c[8];
    for (int j = 0; j < 8; j++)
        c[j] = _mm256_set1_epi64x((long long)k.word[j]);
    const __m256i acc0 = _mm256_set1_epi64x((long long)k.acc);
    const __m256i mx = _mm256_set1_epi64x((long long)k.avalanche);
    const __m256i mxh = _mm256_set1_epi64x((long long)(k.avalanche >> 32));
    size_t i = 0;
    for (; i + 4 <= nblocks; i += 4) {
        const uint32_t *p = tok + i * 16;
        __m256i w[8];
        /* each half of the four blocks (words 0-3, then 4-7): a 4 x 4
         * transpose, w[j] holding word j of blocks 0..3 */
        for (int h = 0; h < 2; h++) {
            __m256i a[4], t[4];
            for (int m = 0; m < 4; m++)
                a[m] = _mm256_loadu_si256((const void *)(p + 16 * m + 8 * h));
            t[0] = _mm256_unpacklo_epi64(a[0], a[1]);
            t[1] = _mm256_unpackhi_epi64(a[0], a[1]);
            t[2] = _mm256_unpacklo_epi64(a[2], a[3]);
            t[3] = _mm256_unpackhi_epi64(a[2], a[3]);
            w[4 * h + 0] = _mm256_permute2x128_si256(t[0], t[2], 0x20);
            w[4 * h + 1] = _mm256_permute2x128_si256(t[1], t[3], 0x20);
            w[4 * h + 2] = _mm256_permute2x128_si256(t[0], t[2], 0x31);
            w[4 * h + 3] = _mm256_permute2x128_si256(t[1], t[3], 0x31);
        }
        __m256i acc = acc0;
        for (int j = 0; j < 8; j += 2)
            acc = _mm256_add_epi64(
                acc, fold256(_mm256_xor_si256(w[j], c[j]),
                             _mm256_xor_si256(w[j + 1], c[j + 1])));
        acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 37));
        acc = mul64(acc, mx, mxh);
        acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 32));
        uint64_t g[4];
        _mm256_storeu_si256((void *)g, acc);
        for (int j = 0; j < 4; j++) {
            prev = lr__index_chain_step(prev, g[j]);
            out[i + j] = prev;
        }
    }
    _mm256_zeroupper(); /* as keys16_avx512 */
    *prev_io = prev;
    return i;
}

#endif /* KEYS_X86 */

/* ---- the choice ---------------------------------------------------------- */

static _Atomic int cpu_isa = -1; /* -1: not asked yet */
static _Atomic int isa_cap = LR__KEYS_AVX512;

bool
lr__index_keys_clock_drops(uint32_t vendor_ebx, uint32_t vendor_ecx,
                           uint32_t vendor_edx, uint32_t signature)
{
    if (vendor_ebx != 0x756e6547u /* "Genu" */ ||
        vendor_edx != 0x49656e69u /* "ineI" */ ||
        vendor_ecx != 0x6c65746eu /* "ntel" */)
        return false;
    uint32_t family = signature >> 8 & 0xfu;
    uint32_t model = (signature >> 4 & 0xfu) | (signature >> 12 & 0xf0u);
    return family == 6 && model == 0x55;
}

#if KEYS_X86
static bool
clock_drops(void)
{
    unsigned a, b, c, d, sig, x1, x2, x3;
    return __get_cpuid(0, &a, &b, &c, &d) &&
           __get_cpuid(1, &sig, &x1, &x2, &x3) &&
           lr__index_keys_clock_drops(b, c, d, sig);
}
#endif

static int
cpu_keys_isa(void)
{
    int c = atomic_load_explicit(&cpu_isa, memory_order_relaxed);
    if (c >= 0)
        return c;
    c = LR__KEYS_PORTABLE;
#if KEYS_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512dq") && !clock_drops())
        c = LR__KEYS_AVX512;
    else if (__builtin_cpu_supports("avx2"))
        c = LR__KEYS_AVX2;
#endif
    atomic_store_explicit(&cpu_isa, c, memory_order_relaxed);
    return c;
}

enum lr__keys_isa
lr__index_keys_isa(void)
{
    int c = cpu_keys_isa();
    int cap = atomic_load_explicit(&isa_cap, memory_order_relaxed);
    return (enum lr__keys_isa)(c < cap ? c : cap);
}

void
lr__index_keys_cap(enum lr__keys_isa cap)
{
    atomic_store_explicit(&isa_cap, (int)cap, memory_order_relaxed);
}

size_t
lr__index_chain_keys16_simd(uint64_t *prev, const uint32_t *tok, size_t nblocks,
                            uint64_t *out)
{
#if KEYS_X86
    switch (lr__index_keys_isa()) {
    case LR__KEYS_AVX512:
        return keys16_avx512(prev, tok, nblocks, out);
    case LR__KEYS_AVX2:
        return keys16_avx2(prev, tok, nblocks, out);
    case LR__KEYS_PORTABLE:
        break;
    }
#else
    (void)prev, (void)tok, (void)nblocks, (void)out;
#endif
    return 0;
}
