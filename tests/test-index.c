/* Unit tests of lr_index: API contract, keys, eviction scenarios. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "index-helpers.h"
#include "index/index.h"
#include "index/index_keys_simd.h"
#include "testutil.h"

static lr_index *
mk(uint64_t cap, uint32_t B, uint64_t ttl_ns)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.capacity_blocks = cap;
    o.block_tokens = B;
    o.ttl_ns = ttl_ns;
    o.max_instances = 8;
    lr_index *ix = NULL;
    assert_int_equal(lr_index_create(&o, &ix), LR_OK);
    return ix;
}

/* tokens: `nblk` blocks of B tokens, block b = base + b */
static void
fill(uint32_t *t, uint32_t nblk, uint32_t B, uint32_t base)
{
    for (uint32_t b = 0; b < nblk; b++)
        for (uint32_t j = 0; j < B; j++)
            t[b * B + j] = (base + b) * 1000 + j;
}

static lr_status
learn(lr_index *ix, const uint32_t *t, size_t n, uint32_t inst, int trust,
      uint64_t now)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = n;
    lr_status st = lr_index_learn(ix, &p, inst, trust, now);
    assert_int_equal(lr__index_verify(ix), LR_OK);
    return st;
}

static uint64_t
blocks(const lr_index *ix)
{
    return stats(ix).blocks;
}

static void
create_validation(void **state)
{
    (void)state;
    lr_index *ix = (lr_index *)1;
    assert_int_equal(lr_index_create(NULL, NULL), LR_EINVAL);
    assert_int_equal(lr_index_create(NULL, &ix), LR_OK);
    assert_int_equal(lr_index_block_tokens(ix), 16);
    lr_index_destroy(ix);
    lr_index_destroy(NULL);

    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = LR_INDEX_MAX_BLOCK_TOKENS + 1;
    assert_int_equal(lr_index_create(&o, &ix), LR_EINVAL);
    assert_null(ix);
    lr_index_options_init(&o);
    o.capacity_blocks = LR_INDEX_MAX_CAPACITY + 1;
    assert_int_equal(lr_index_create(&o, &ix), LR_EINVAL);
    lr_index_options_init(&o);
    o.max_instances = LR_INDEX_MAX_INSTANCES + 1;
    assert_int_equal(lr_index_create(&o, &ix), LR_EINVAL);
    lr_index_options_init(&o);
    o.struct_size = LR_INDEX_OPTIONS_SIZE_V1 - 1;
    assert_int_equal(lr_index_create(&o, &ix), LR_EVERSION);
    /* a half-set allocator is refused */
    lr_allocator a = { 0 };
    lr_index_options_init(&o);
    o.allocator = &a;
    assert_int_equal(lr_index_create(&o, &ix), LR_EINVAL);
    /* zeros mean defaults; a larger struct from a newer header is fine */
    struct {
        lr_index_options o;
        uint64_t future[4];
    } big;
    memset(&big, 0, sizeof big);
    big.o.struct_size = sizeof big;
    assert_int_equal(lr_index_create(&big.o, &ix), LR_OK);
    assert_int_equal(lr_index_block_tokens(ix), 16);
    lr_index_destroy(ix);
}

/* The documented chain (docs/index.md, "Keys"), one block at a time:
 * the tenant root, then each block's XXH3 chained by the step. */
static void
naive_keys16(uint64_t salt, const uint32_t *t, size_t nb, uint64_t *out)
{
    uint8_t sb[8];
    for (int i = 0; i < 8; i++)
        sb[i] = (uint8_t)(salt >> (8 * i));
    uint64_t prev = XXH3_64bits_withSeed(sb, 8, 0x4c52544e414e5431ull);
    for (size_t d = 0; d < nb; d++) {
        uint8_t buf[64];
        for (int j = 0; j < 16; j++)
            for (int b = 0; b < 4; b++)
                buf[4 * j + b] = (uint8_t)(t[d * 16 + j] >> (8 * b));
        uint64_t g = XXH3_64bits_withSeed(buf, 64, 0x4c52424c4f434b32ull);
        uint64_t x = (prev ^ g) * 0x9e3779b97f4a7c15ull;
        prev = (x << 32) | (x >> 32);
        out[d] = prev;
    }
}

/* The key chain is a documented, persistent format: pin it. */
#define GOLDEN_K0 0xe1df8a639f2b3f81ull
#define GOLDEN_K1 0x39853354a3b5b09full
static void
keys_are_the_documented_chain(void **state)
{
    (void)state;
    uint32_t t[40];
    for (uint32_t i = 0; i < 40; i++)
        t[i] = i * 2654435761u;
    uint64_t salt = 0x1234abcd5678ef00ull;
    uint64_t keys[3];
    size_t n;
    assert_int_equal(lr_block_keys(16, t, 40, salt, NULL, 0, &n), LR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(lr_block_keys(16, t, 40, salt, keys, 1, &n), LR_EBUFSIZE);
    assert_int_equal(lr_block_keys(16, t, 40, salt, keys, 3, &n), LR_OK);
    uint64_t want[2];
    naive_keys16(salt, t, 2, want);
    for (int d = 0; d < 2; d++)
        assert_int_equal(keys[d], want[d]);
    /* Golden values: guard against an accidental change of the recipe in
     * both the library and this test at once (format 2, 0.2). */
    uint32_t z[32] = { 0 };
    assert_int_equal(lr_block_keys(16, z, 32, 0, keys, 3, &n), LR_OK);
    assert_int_equal(keys[0], GOLDEN_K0);
    assert_int_equal(keys[1], GOLDEN_K1);

    assert_int_equal(lr_block_keys(0, t, 40, 0, keys, 3, &n), LR_EINVAL);
    assert_int_equal(lr_block_keys(16, NULL, 40, 0, keys, 3, &n), LR_EINVAL);
    assert_int_equal(lr_block_keys(16, t, 40, 0, keys, 3, NULL), LR_EINVAL);
    assert_int_equal(
        lr_block_keys(16, t, (size_t)LR_INDEX_MAX_TOKENS + 1, 0, keys, 3, &n),
        LR_EINVAL);
}

/* lr_mm_key_hash() as documented, from xxHash itself. */
static uint64_t
mm_key_model(const char *id, int64_t off)
{
    uint64_t h = XXH3_64bits_withSeed(id, strlen(id), 0x4c524e414d453031ull);
    h = h != 0 ? h : 1;
    uint8_t b[16];
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(h >> (8 * i));
        b[8 + i] = (uint8_t)((uint64_t)off >> (8 * i));
    }
    return XXH3_64bits_withSeed(b, 16, 0x4c524d4d4b455931ull);
}

/* Whether the upper halves of ymm0-15 (zmm0-15) are in use (XINUSE bits
 * 2 and 6, XGETBV with ECX = 1): a kernel that returns without
 * vzeroupper leaves them so, and every SSE instruction after it slows
 * down. false where the processor cannot tell. */
static bool
upper_dirty(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid"
                     : "=a"(a), "=b"(b), "=c"(c), "=d"(d)
                     : "a"(0u), "c"(0u));
    if (a < 0xd)
        return false;
    __asm__ volatile("cpuid"
                     : "=a"(a), "=b"(b), "=c"(c), "=d"(d)
                     : "a"(0xdu), "c"(1u));
    if (!(a & 4u)) /* no XGETBV with ECX = 1 */
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1u));
    (void)hi;
    return (lo & (1u << 2 | 1u << 6)) != 0;
#else
    return false;
#endif
}

/* Every kernel of 16-token blocks (several blocks hashed at once where the
 * CPU can) gives the naive chain's keys: prompts of 0 to 40 blocks and a
 * partial one (every tail past a step of 8 or 4), tokens at any 4-byte
 * alignment, random and extreme token values. A kernel above the CPU's
 * is not taken (the cap only lowers the choice), and none returns with
 * the vector registers' upper halves in use. */
static void
keys_every_kernel_is_the_chain(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("keys kernels", 0x6b65726e656c73ull);
    static uint32_t t[41 * 16 + 8];
    uint64_t want[41], got[41];
    static const enum lr__keys_isa caps[] = { LR__KEYS_PORTABLE, LR__KEYS_AVX2,
                                              LR__KEYS_AVX512 };
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        lr__index_keys_cap(caps[c]);
        assert_true(lr__index_keys_isa() <= caps[c]);
        for (int it = 0; it < 400; it++) {
            size_t off = (size_t)(tu_rand(&seed) % 8);
            size_t n = (size_t)(tu_rand(&seed) % (41 * 16 + 1));
            for (size_t i = 0; i < n; i++)
                t[off + i] = it % 7 == 0
                                 ? (uint32_t)(tu_rand(&seed) % 2) * UINT32_MAX
                             : it % 2 == 0 ? (uint32_t)tu_rand(&seed)
                                           : (uint32_t)(tu_rand(&seed) % 50);
            uint64_t salt = it % 3 == 0 ? 0 : tu_rand(&seed);
            size_t nk;
            lr_status st = lr_block_keys(16, t + off, n, salt, got, 41, &nk);
            bool dirty = upper_dirty();
            assert_int_equal(st, LR_OK);
            assert_false(dirty); /* the kernel cleared what it used */
            assert_int_equal(nk, n / 16);
            naive_keys16(salt, t + off, nk, want);
            for (size_t d = 0; d < nk; d++)
                assert_int_equal(got[d], want[d]);
        }
    }
    print_message("keys kernel: %d of 0 portable, 1 AVX2, 2 AVX-512\n",
                  (int)lr__index_keys_isa());
}

/* The AVX2 kernel for the cores whose clock drops after 512-bit work:
 * Skylake-SP (signature 0x50654), Cascade Lake (0x50657), Cooper Lake
 * (0x5065b); not Ice Lake-SP (0x606a6), Sapphire Rapids (0x806f8), a
 * client Skylake (0x506e3), another family's model 0x55, nor AMD's
 * Zen 4 (0xa10f11) or another vendor's family 6 model 0x55. */
static void
keys_kernel_avoids_clock_drops(void **state)
{
    (void)state;
    const uint32_t gb = 0x756e6547u, gc = 0x6c65746eu, gd = 0x49656e69u;
    static const uint32_t drops[] = { 0x50654u, 0x50657u, 0x5065bu };
    /* the last: model 0x55 of family 15 */
    static const uint32_t keeps[] = { 0x606a6u, 0x806f8u, 0x506e3u, 0x50f54u };
    for (size_t i = 0; i < sizeof drops / sizeof drops[0]; i++)
        assert_true(lr__index_keys_clock_drops(gb, gc, gd, drops[i]));
    for (size_t i = 0; i < sizeof keeps / sizeof keeps[0]; i++)
        assert_false(lr__index_keys_clock_drops(gb, gc, gd, keeps[i]));
    /* "AuthenticAMD" */
    const uint32_t ab = 0x68747541u, ac = 0x444d4163u, ad = 0x69746e65u;
    assert_false(lr__index_keys_clock_drops(ab, ac, ad, 0xa10f11u));
    assert_false(lr__index_keys_clock_drops(ab, ac, ad, 0x50654u));
}

/* A prompt's keys with multimodal inputs against a naive model of the
 * documented rule: every block XORs the key of every input it overlaps
 * (found by testing each input against each block, vLLM's rule) into its
 * token hash before the chain step. Random prompts, block sizes, inputs
 * (lengths from one token to several blocks, inputs ending in the
 * partial block or at the prompt's end); the index learns the prompt
 * with its inputs and must hold every model key: a match given the
 * model's keys finds the whole prompt. Without inputs the keys are
 * lr_block_keys()'s. */
static void
mm_keys_model(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("mm keys model", 0x6d6d6b657973ull);
    static const char *const ids[4] = { "img-a", "img-b", "audio-c",
                                        "a-uuid-given-by-the-client" };
    for (int it = 0; it < 300; it++) {
        uint32_t B = 1u + (uint32_t)(tu_rand(&seed) % 20);
        size_t n = (size_t)(tu_rand(&seed) % (6 * B + 1));
        uint32_t t[6 * 21];
        for (size_t i = 0; i < n; i++)
            t[i] = (uint32_t)(tu_rand(&seed) % 50);
        lr_mm_input in[8];
        size_t n_in = 0;
        uint64_t at = tu_rand(&seed) % (B + 1);
        while (n_in < 8 && at < n) {
            uint64_t len = 1 + tu_rand(&seed) % (2 * B + 1);
            if (at + len > n)
                len = n - at;
            in[n_in].identifier = ids[tu_rand(&seed) % 4];
            in[n_in].offset = (uint32_t)at;
            in[n_in].length = (uint32_t)len;
            n_in++;
            at += len + tu_rand(&seed) % (B + 2);
        }
        uint64_t salt = tu_rand(&seed);
        size_t nb = n / B;
        uint64_t model[6 * 21];
        uint8_t sb[8];
        for (int i = 0; i < 8; i++)
            sb[i] = (uint8_t)(salt >> (8 * i));
        uint64_t prev = XXH3_64bits_withSeed(sb, 8, 0x4c52544e414e5431ull);
        for (size_t d = 0; d < nb; d++) {
            uint8_t buf[4 * 20];
            for (uint32_t j = 0; j < B; j++)
                for (int b = 0; b < 4; b++)
                    buf[4 * j + b] = (uint8_t)(t[d * B + j] >> (8 * b));
            uint64_t g =
                XXH3_64bits_withSeed(buf, 4 * B, 0x4c52424c4f434b32ull);
            uint64_t s0 = d * B, e0 = s0 + B;
            for (size_t k = 0; k < n_in; k++)
                if (e0 > in[k].offset && s0 < in[k].offset + in[k].length)
                    g ^= mm_key_model(in[k].identifier,
                                      (int64_t)in[k].offset - (int64_t)s0);
            uint64_t x = (prev ^ g) * 0x9e3779b97f4a7c15ull;
            prev = (x << 32) | (x >> 32);
            model[d] = prev;
        }
        lr_index_options o;
        lr_index_options_init(&o);
        o.block_tokens = B;
        o.ttl_ns = UINT64_MAX;
        lr_index *ix = NULL;
        assert_int_equal(lr_index_create(&o, &ix), LR_OK);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = t;
        p.n_tokens = n;
        p.tenant_salt = salt;
        p.mm = in;
        p.n_mm = n_in;
        assert_int_equal(lr_index_learn(ix, &p, 1, LR_TRUST_LOCAL, 1), LR_OK);
        lr_prompt q;
        lr_prompt_init(&q);
        q.n_tokens = n;
        q.tenant_salt = salt;
        q.keys = model;
        q.n_keys = nb;
        lr_index_hit h[2];
        lr_index_match_result r;
        lr_index_match_result_init(&r);
        r.hits = h;
        r.hits_capacity = 2;
        assert_int_equal(lr_index_match(ix, &q, 2, 0, &r), LR_OK);
        uint32_t got = r.n_hits > 0 ? h[0].tokens : 0;
        if (got != nb * B)
            fail_msg("B %u n %zu inputs %zu: the model's keys hold %u of %zu",
                     B, n, n_in, got, nb * B);
        if (n_in == 0) {
            uint64_t k2[6 * 21];
            size_t n2;
            assert_int_equal(lr_block_keys(B, t, n, salt, k2, 6 * 21, &n2),
                             LR_OK);
            assert_memory_equal(k2, model, nb * sizeof *model);
        }
        lr_index_destroy(ix);
    }
    /* the public hash is the documented one */
    assert_true(lr_mm_key_hash("img-a", 5, -13) == mm_key_model("img-a", -13));
    assert_true(lr_mm_key_hash("img-a", 5, 3) != lr_mm_key_hash("img-a", 5, 4));
}

/* The node table holds a run's first node and every TAB_STRIDE-th (16th)
 * depth; a match walks the runs for the rest (index_find.c). Every fork
 * depth over two and a half strides, every prefix length: the exact
 * deepest hold of each instance; then with the fork's run gone, and with
 * its slots used again by a new learn (stale table entries given up). */
static void
forks_around_the_table_stride(void **state)
{
    (void)state;
    enum {
        NB = 40
    };
    uint32_t a[NB * 4], b[NB * 4];
    fill(a, NB, 4, 0);
    for (uint32_t f = 0; f <= NB; f++) {
        lr_index *ix = mk(1000, 4, UINT64_MAX);
        fill(b, NB, 4, 0);
        fill(b + f * 4, NB - f, 4, 500 + f); /* b forks from a at block f */
        assert_int_equal(learn(ix, a, NB * 4, 1, LR_TRUST_LOCAL, 1), LR_OK);
        assert_int_equal(learn(ix, b, NB * 4, 2, LR_TRUST_LOCAL, 2), LR_OK);
        for (uint32_t l = 0; l <= NB; l++) {
            uint32_t shared = (l < f ? l : f) * 4;
            assert_int_equal(held_by(ix, a, l * 4, 1, 3), l * 4);
            assert_int_equal(held_by(ix, a, l * 4, 2, 3), shared);
            assert_int_equal(held_by(ix, b, l * 4, 2, 3), l * 4);
            assert_int_equal(held_by(ix, b, l * 4, 1, 3), shared);
        }
        assert_int_equal(lr_index_remove_instance(ix, 2), LR_OK);
        assert_int_equal(lr__index_verify(ix), LR_OK);
        assert_int_equal(blocks(ix), NB);
        for (uint32_t l = 0; l <= NB; l++) {
            assert_int_equal(held_by(ix, a, l * 4, 1, 4), l * 4);
            assert_int_equal(held_by(ix, b, l * 4, 1, 4), (l < f ? l : f) * 4);
            assert_int_equal(held_by(ix, b, l * 4, 2, 4), 0);
        }
        assert_int_equal(learn(ix, b, NB * 4, 3, LR_TRUST_LOCAL, 5), LR_OK);
        for (uint32_t l = 0; l <= NB; l++)
            assert_int_equal(held_by(ix, b, l * 4, 3, 6), l * 4);
        lr_index_destroy(ix);
    }
}

static void
learn_match_basics(void **state)
{
    (void)state;
    lr_index *ix = mk(1000, 4, UINT64_MAX);
    uint32_t a[40], b[40];
    fill(a, 10, 4, 0);
    fill(b, 10, 4, 0);
    fill(b + 24, 4, 4, 500); /* b shares the first 6 blocks of a */
    assert_int_equal(learn(ix, a, 40, 7, LR_TRUST_LOCAL, 1), LR_OK);
    assert_int_equal(learn(ix, b, 38, 9, LR_TRUST_LOCAL, 2), LR_OK);
    /* partial tail of b (38 = 9 blocks + 2) is not learned */
    assert_int_equal(held_by(ix, a, 40, 7, 3), 40);
    assert_int_equal(held_by(ix, a, 40, 9, 3), 24);
    assert_int_equal(held_by(ix, b, 40, 9, 3), 36);
    assert_int_equal(held_by(ix, b, 40, 7, 3), 24);
    assert_int_equal(held_by(ix, a, 3, 7, 3), 0); /* shorter than a block */
    assert_int_equal(blocks(ix), 10 + 9);

    /* result ordering, deepest, prompt_blocks */
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = a;
    p.n_tokens = 40;
    lr_index_hit h[2];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 2;
    assert_int_equal(lr_index_match(ix, &p, 4, 0, &r), LR_OK);
    assert_int_equal(r.n_hits, 2);
    assert_int_equal(h[0].instance, 7);
    assert_int_equal(h[1].instance, 9);
    assert_int_equal(r.deepest_tokens, 40);
    assert_int_equal(r.prompt_blocks, 10);
    /* too small a buffer: EBUFSIZE, n_hits says how many, nothing written */
    r.hits_capacity = 1;
    h[0].instance = 12345;
    uint64_t d0 = lr__index_digest(ix);
    assert_int_equal(lr_index_match(ix, &p, 5, 0, &r), LR_EBUFSIZE);
    assert_int_equal(r.n_hits, 2);
    assert_int_equal(h[0].instance, 12345);
    assert_int_equal(lr__index_digest(ix), d0);

    /* precomputed keys give the same answer */
    uint64_t keys[10];
    size_t nk;
    assert_int_equal(lr_block_keys(4, a, 40, 0, keys, 10, &nk), LR_OK);
    lr_prompt pk;
    lr_prompt_init(&pk);
    pk.keys = keys;
    pk.n_keys = nk;
    pk.n_tokens = 40;
    r.hits_capacity = 2;
    assert_int_equal(lr_index_match(ix, &pk, 6, 0, &r), LR_OK);
    assert_int_equal(r.n_hits, 2);
    assert_int_equal(h[0].tokens, 40);
    pk.n_keys = 9; /* must agree with n_tokens */
    assert_int_equal(lr_index_match(ix, &pk, 6, 0, &r), LR_EINVAL);

    /* a caller's wider hit struct: written at its stride, in order */
    struct wide_hit {
        lr_index_hit h;
        uint32_t extra;
    } w[3];
    memset(w, 0x5a, sizeof w);
    pk.n_keys = nk;
    r.hits = &w[0].h;
    r.hits_capacity = 3;
    r.hit_size = sizeof w[0];
    assert_int_equal(lr_index_match(ix, &pk, 6, 0, &r), LR_OK);
    assert_int_equal(r.n_hits, 2);
    assert_int_equal(w[0].h.instance, 7);
    assert_int_equal(w[0].h.tokens, 40);
    assert_int_equal(w[1].h.instance, 9);
    assert_int_equal(w[0].extra, 0x5a5a5a5a);
    assert_int_equal(w[2].h.instance, 0x5a5a5a5a);
    r.hit_size = LR_INDEX_HIT_SIZE_V1 - 1;
    assert_int_equal(lr_index_match(ix, &pk, 6, 0, &r), LR_EINVAL);
    r.hit_size = 0; /* the 0.1 size */
    r.hits = h;
    r.hits_capacity = 2;
    assert_int_equal(lr_index_match(ix, &pk, 6, 0, &r), LR_OK);
    assert_int_equal(h[1].instance, 9);

    /* re-learning known prompts adds nothing */
    assert_int_equal(learn(ix, a, 40, 7, LR_TRUST_LOCAL, 7), LR_OK);
    assert_int_equal(blocks(ix), 19);
    lr_index_destroy(ix);
}

static void
tenants_never_share(void **state)
{
    (void)state;
    lr_index *ix = mk(1000, 4, UINT64_MAX);
    uint32_t a[16];
    fill(a, 4, 4, 3);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = a;
    p.n_tokens = 16;
    p.tenant_salt = 1;
    assert_int_equal(lr_index_learn(ix, &p, 1, LR_TRUST_LOCAL, 1), LR_OK);
    lr_index_hit h[4];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 4;
    p.tenant_salt = 2;
    assert_int_equal(lr_index_match(ix, &p, 2, 0, &r), LR_OK);
    assert_int_equal(r.n_hits, 0);
    p.tenant_salt = 1;
    assert_int_equal(lr_index_match(ix, &p, 2, 0, &r), LR_OK);
    assert_int_equal(r.n_hits, 1);
    lr_index_destroy(ix);
}

static void
bad_input_changes_nothing(void **state)
{
    (void)state;
    lr_index *ix = mk(100, 4, UINT64_MAX);
    uint32_t a[16];
    fill(a, 4, 4, 1);
    assert_int_equal(learn(ix, a, 16, 1, LR_TRUST_LOCAL, 1), LR_OK);
    uint64_t d0 = lr__index_digest(ix);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = a;
    p.n_tokens = 16;
    assert_int_equal(lr_index_learn(NULL, &p, 1, 0, 2), LR_EINVAL);
    assert_int_equal(lr_index_learn(ix, NULL, 1, 0, 2), LR_EINVAL);
    assert_int_equal(lr_index_learn(ix, &p, LR_INSTANCE_NONE, 0, 2), LR_EINVAL);
    assert_int_equal(lr_index_learn(ix, &p, 1, 2, 2), LR_EINVAL);
    assert_int_equal(lr_index_learn(ix, &p, 1, -1, 2), LR_EINVAL);
    uint32_t bnd[2] = { 8, 4 }; /* not ascending */
    p.boundaries = bnd;
    p.n_boundaries = 2;
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    bnd[0] = 4;
    bnd[1] = 17; /* beyond the prompt */
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    p.boundaries = NULL; /* NULL with a count */
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    p.n_boundaries = 0;
    p.tokens = NULL;
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    p.tokens = a;
    p.n_tokens = (size_t)LR_INDEX_MAX_TOKENS + 1;
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    p.n_tokens = 16;
    p.struct_size = LR_PROMPT_SIZE_V1 - 1;
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EVERSION);
    p.struct_size = sizeof p;
    /* multimodal inputs: NULL with a count, a NULL, empty or too long
     * identifier, an empty input, one past the prompt, two overlapping or
     * out of order, more than the prompt's tokens, and inputs with keys */
    char longid[LR_INDEX_MAX_MM_IDENTIFIER + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    const lr_mm_input bad[7][2] = {
        { { NULL, 0, 4 } },
        { { "", 0, 4 } },
        { { longid, 0, 4 } },
        { { "img", 0, 0 } },
        { { "img", 14, 3 } },
        { { "img", 2, 4 }, { "img", 5, 2 } },
        { { "img", 6, 2 }, { "img", 2, 2 } },
    };
    for (int c = 0; c < 9; c++) {
        p.mm = c < 7 ? bad[c] : c == 7 ? NULL : bad[5];
        p.n_mm = c >= 5 && c < 7 ? 2 : c == 8 ? 17 : 1;
        assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    }
    longid[LR_INDEX_MAX_MM_IDENTIFIER] = '\0'; /* the longest is fine */
    const lr_mm_input good = { longid, 2, 4 };
    uint64_t kk[1];
    size_t nkk;
    assert_int_equal(lr_block_keys(16, a, 16, 0, kk, 1, &nkk), LR_OK);
    p.mm = &good;
    p.n_mm = 1;
    p.keys = kk;
    p.n_keys = 1;
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 2), LR_EINVAL);
    lr_index_match_result mr;
    lr_index_match_result_init(&mr);
    assert_int_equal(lr_index_match(ix, &p, 2, 0, &mr), LR_EINVAL);
    p.keys = NULL;
    p.n_keys = 0;
    assert_int_equal(lr_index_match(ix, &p, 2, LR_MATCH_NO_TOUCH, &mr), LR_OK);
    p.mm = NULL;
    p.n_mm = 0;

    lr_index_match_result r;
    lr_index_match_result_init(&r);
    assert_int_equal(lr_index_match(ix, &p, 2, 0, NULL), LR_EINVAL);
    assert_int_equal(lr_index_match(ix, &p, 2, 0x80, &r), LR_EINVAL);
    r.hits_capacity = 3; /* NULL buffer with a capacity */
    assert_int_equal(lr_index_match(ix, &p, 2, 0, &r), LR_EINVAL);
    r.hits_capacity = 0;
    r.struct_size = 8;
    assert_int_equal(lr_index_match(ix, &p, 2, 0, &r), LR_EVERSION);

    assert_int_equal(lr_index_remove_instance(ix, 99), LR_ENOENT);
    assert_int_equal(lr_index_remove_instance(ix, LR_INSTANCE_NONE), LR_EINVAL);
    uint64_t nb;
    assert_int_equal(lr_index_instance_blocks(ix, 99, &nb), LR_ENOENT);
    assert_int_equal(lr_index_instance_blocks(ix, 1, NULL), LR_EINVAL);
    lr_index_stats st;
    st.struct_size = 8;
    assert_int_equal(lr_index_get_stats(ix, &st), LR_EVERSION);
    assert_int_equal(lr__index_digest(ix), d0);
    lr_index_expire(NULL, 1);
    assert_int_equal(lr_index_mark(NULL), 0);
    lr_index_destroy(ix);
}

static void
instance_limit(void **state)
{
    (void)state;
    lr_index *ix = mk(1000, 4, UINT64_MAX); /* max_instances 8 */
    uint32_t a[8];
    fill(a, 2, 4, 1);
    for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(learn(ix, a, 8, 100 + i, 0, 1), LR_OK);
    uint64_t d0 = lr__index_digest(ix);
    assert_int_equal(learn(ix, a, 8, 200, 0, 2), LR_ELIMIT);
    assert_int_equal(lr__index_digest(ix), d0);
    /* bad input is reported as such even when no slot is free */
    assert_int_equal(learn(ix, a, 8, 200, 7, 2), LR_EINVAL);
    lr_prompt bad;
    lr_prompt_init(&bad);
    bad.n_tokens = 8; /* NULL tokens */
    assert_int_equal(lr_index_learn(ix, &bad, 200, 0, 2), LR_EINVAL);
    assert_int_equal(lr__index_digest(ix), d0);
    /* removing one frees a slot; its routes are gone */
    assert_int_equal(lr_index_remove_instance(ix, 103), LR_OK);
    assert_int_equal(held_by(ix, a, 8, 103, 3), 0);
    assert_int_equal(learn(ix, a, 8, 200, 0, 3), LR_OK);
    assert_int_equal(held_by(ix, a, 8, 200, 3), 8);
    assert_int_equal(held_by(ix, a, 8, 100, 3), 8);
    assert_int_equal(blocks(ix), 16);
    lr_index_destroy(ix);
}

/* LRU: the least recently matched or learned prompt goes first. */
static void
eviction_is_lru(void **state)
{
    (void)state;
    lr_index *ix = mk(12, 4, UINT64_MAX);
    uint32_t p[4][16];
    for (int i = 0; i < 4; i++)
        fill(p[i], 4, 4, 10 * (uint32_t)i + 1);
    uint64_t t = 1ull << 30;
    for (int i = 0; i < 3; i++)
        assert_int_equal(learn(ix, p[i], 16, 1, 0, t * (uint64_t)(i + 1)),
                         LR_OK);
    assert_int_equal(blocks(ix), 12);
    /* touch prompt 0 by a match: prompt 1 is now the oldest */
    lr_prompt q;
    lr_prompt_init(&q);
    q.tokens = p[0];
    q.n_tokens = 16;
    lr_index_match_result r;
    lr_index_hit h[2];
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 2;
    assert_int_equal(lr_index_match(ix, &q, t * 4, 0, &r), LR_OK);
    assert_int_equal(learn(ix, p[3], 16, 1, 0, t * 5), LR_OK);
    assert_true(blocks(ix) <= 12);
    assert_int_equal(held_by(ix, p[0], 16, 1, t * 6), 16);
    assert_int_equal(held_by(ix, p[1], 16, 1, t * 6), 0);
    assert_int_equal(held_by(ix, p[2], 16, 1, t * 6), 16);
    assert_int_equal(held_by(ix, p[3], 16, 1, t * 6), 16);
    /* a NO_TOUCH match does not refresh: prompt 2 goes next */
    q.tokens = p[2];
    assert_int_equal(lr_index_match(ix, &q, t * 7, LR_MATCH_NO_TOUCH, &r),
                     LR_OK);
    assert_int_equal(learn(ix, p[1], 16, 1, 0, t * 8), LR_OK);
    assert_int_equal(held_by(ix, p[2], 16, 1, t * 9), 0);
    assert_int_equal(held_by(ix, p[0], 16, 1, t * 9), 16);
    lr_index_destroy(ix);
}

/* Evicting the deep end of a prompt trims back to the last boundary the
 * host named, never leaving a hole. */
static void
eviction_trims_to_anchor(void **state)
{
    (void)state;
    lr_index *ix = mk(8, 4, UINT64_MAX);
    uint32_t a[32], b[8];
    fill(a, 8, 4, 1);
    fill(b, 2, 4, 900);
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = a;
    p.n_tokens = 32;
    uint32_t bnd[2] = { 10, 20 }; /* aligned down: blocks 2 and 5 */
    p.boundaries = bnd;
    p.n_boundaries = 2;
    assert_int_equal(lr_index_learn(ix, &p, 1, 0, 1ull << 30), LR_OK);
    /* two new blocks need room: the prompt's tail (blocks 6..8) goes and
     * the cut stops at the boundary after block 5 */
    assert_int_equal(learn(ix, b, 8, 2, 0, 2ull << 30), LR_OK);
    assert_int_equal(held_by(ix, a, 32, 1, 3ull << 30), 20);
    assert_int_equal(blocks(ix), 7);
    lr_index_destroy(ix);
}

/* Under pressure REMOTE routes go before LOCAL ones, even newer ones. */
static void
eviction_remote_first(void **state)
{
    (void)state;
    lr_index *ix = mk(8, 4, UINT64_MAX);
    uint32_t a[16], b[16], c[16];
    fill(a, 4, 4, 1);
    fill(b, 4, 4, 100);
    fill(c, 4, 4, 200);
    uint64_t t = 1ull << 30;
    assert_int_equal(learn(ix, a, 16, 1, LR_TRUST_LOCAL, t), LR_OK);
    assert_int_equal(learn(ix, b, 16, 2, LR_TRUST_REMOTE, 2 * t), LR_OK);
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    lr_index_get_stats(ix, &st);
    assert_int_equal(st.remote_blocks, 4);
    assert_int_equal(learn(ix, c, 16, 3, LR_TRUST_LOCAL, 3 * t), LR_OK);
    assert_int_equal(held_by(ix, a, 16, 1, 4 * t), 16); /* older, but LOCAL */
    assert_int_equal(held_by(ix, b, 16, 2, 4 * t), 0);
    assert_int_equal(held_by(ix, c, 16, 3, 4 * t), 16);
    /* at capacity, a new REMOTE route is itself the first to go */
    assert_int_equal(learn(ix, b, 8, 2, LR_TRUST_REMOTE, 5 * t), LR_OK);
    lr_index_get_stats(ix, &st);
    assert_int_equal(st.remote_blocks, 0);
    assert_int_equal(held_by(ix, a, 16, 1, 6 * t), 16);
    lr_index_destroy(ix);

    /* a LOCAL learn upgrades the REMOTE routes on its path, and only
     * those: b's REMOTE tail beyond the learned prefix stays REMOTE */
    ix = mk(100, 4, UINT64_MAX);
    assert_int_equal(learn(ix, b, 16, 2, LR_TRUST_REMOTE, t), LR_OK);
    assert_int_equal(learn(ix, b, 8, 2, LR_TRUST_LOCAL, 2 * t), LR_OK);
    lr_index_get_stats(ix, &st);
    assert_int_equal(st.remote_blocks, 2);
    assert_int_equal(learn(ix, b, 16, 2, LR_TRUST_REMOTE, 3 * t), LR_OK);
    lr_index_get_stats(ix, &st);
    assert_int_equal(st.remote_blocks, 2); /* REMOTE never downgrades */
    assert_int_equal(learn(ix, b, 16, 2, LR_TRUST_LOCAL, 4 * t), LR_OK);
    lr_index_get_stats(ix, &st);
    assert_int_equal(st.remote_blocks, 0);
    lr_index_destroy(ix);
}

/* A prompt longer than the whole capacity keeps its first blocks. */
static void
prompt_longer_than_capacity(void **state)
{
    (void)state;
    lr_index *ix = mk(5, 4, UINT64_MAX);
    uint32_t a[40];
    fill(a, 10, 4, 1);
    assert_int_equal(learn(ix, a, 40, 1, 0, 1), LR_OK);
    assert_int_equal(blocks(ix), 5);
    assert_int_equal(held_by(ix, a, 40, 1, 2), 20);
    lr_index_destroy(ix);
}

static void
ttl_expires_whole_subtrees(void **state)
{
    (void)state;
    uint64_t s = SEC;
    lr_index *ix = mk(1000, 4, 10 * s);
    uint32_t a[16], b[16];
    fill(a, 4, 4, 1);
    fill(b, 2, 4, 1);
    fill(b + 8, 2, 4, 50); /* shares a's first 2 blocks */
    assert_int_equal(learn(ix, a, 16, 1, 0, 100 * s), LR_OK);
    assert_int_equal(learn(ix, b, 16, 1, 0, 105 * s), LR_OK);
    /* at 112 s: a's tail (last used at 100 s) expired, the shared part
     * lives on through b */
    lr_index_expire(ix, 112 * s);
    assert_int_equal(lr__index_verify(ix), LR_OK);
    assert_int_equal(held_by(ix, a, 16, 1, 112 * s), 8);
    assert_int_equal(held_by(ix, b, 16, 1, 112 * s), 16);
    /* a match refreshes only what it reached */
    assert_int_equal(held_by(ix, b, 16, 1, 114 * s), 16);
    assert_int_equal(held_by(ix, b, 16, 1, 116 * s), 0);
    assert_int_equal(blocks(ix), 0);
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    lr_index_get_stats(ix, &st);
    assert_int_equal(st.expired_blocks, 6);
    lr_index_destroy(ix);
}

/* Batch eviction (index_evict.c, a span at a time) against chains shared
 * by several instances: holder lists laid out alike along a chain (whole
 * prompts learned one after another), and unlike (instances learning
 * pieces in interleaved order, so neighbouring extra holds belong to other
 * chains). Every step is checked by verify, and the survivors by a
 * match. */
static void
eviction_of_shared_chains(void **state)
{
    (void)state;
    enum {
        NB = 24,
        B4 = 4
    };
    uint32_t a[NB * B4];
    fill(a, NB, B4, 7);
    for (int interleave = 0; interleave < 2; interleave++) {
        lr_index *ix = mk(3 * NB, B4, UINT64_MAX);
        uint64_t t = 1;
        if (!interleave) {
            for (uint32_t i = 1; i <= 3; i++)
                assert_int_equal(learn(ix, a, NB * B4, i, 0, t++), LR_OK);
        } else {
            /* instances take the chain 4 blocks at a time, in turn */
            for (uint32_t n = 4; n <= NB; n += 4)
                for (uint32_t i = 1; i <= 3; i++)
                    assert_int_equal(learn(ix, a, n * B4, i, 0, t++), LR_OK);
        }
        assert_int_equal(blocks(ix), 3 * NB);
        /* instance 3 refreshes: 1 then 2 are the oldest leaves */
        assert_int_equal(held_by(ix, a, NB * B4, 3, t), NB * B4);
        assert_int_equal(learn(ix, a, NB * B4, 3, 0, t++), LR_OK);
        /* each new 12-block prompt evicts as many */
        uint32_t b[12 * B4];
        fill(b, 12, B4, 900);
        assert_int_equal(learn(ix, b, 12 * B4, 4, 0, t++), LR_OK);
        /* without anchors inside, 1's whole chain goes at once (a
         * message is evicted whole); interleaved, 1 anchored every 4
         * blocks and loses 3 segments of 4 */
        assert_int_equal(blocks(ix), interleave ? 3 * NB : 3 * NB - 12);
        assert_int_equal(held_by(ix, a, NB * B4, 1, t),
                         interleave ? (NB - 12) * B4 : 0);
        assert_int_equal(held_by(ix, a, NB * B4, 2, t), NB * B4);
        fill(b, 12, B4, 1900);
        assert_int_equal(learn(ix, b, 12 * B4, 5, 0, t++), LR_OK);
        assert_int_equal(held_by(ix, a, NB * B4, 1, t), 0);
        assert_int_equal(held_by(ix, a, NB * B4, 3, t), NB * B4);
        fill(b, 12, B4, 2900);
        assert_int_equal(learn(ix, b, 12 * B4, 6, 0, t++), LR_OK);
        fill(b, 12, B4, 3900);
        assert_int_equal(learn(ix, b, 12 * B4, 6, 0, t++), LR_OK);
        assert_int_equal(held_by(ix, a, NB * B4, 2, t), 0);
        assert_int_equal(held_by(ix, a, NB * B4, 3, t), NB * B4);
        assert_int_equal(blocks(ix), 3 * NB);
        assert_int_equal(lr_index_remove_instance(ix, 3), LR_OK);
        assert_int_equal(lr__index_verify(ix), LR_OK);
        assert_int_equal(held_by(ix, a, NB * B4, 3, t), 0);
        lr_index_destroy(ix);
    }
}

static void
stats_and_bytes(void **state)
{
    (void)state;
    lr_index *ix = mk(100000, 16, UINT64_MAX);
    uint32_t *t = malloc(16 * 256 * sizeof *t);
    for (uint32_t i = 0; i < 100; i++) {
        fill(t, 256, 16, i * 1000);
        assert_int_equal(learn(ix, t, 16 * 256, i % 8, 0, i + 1), LR_OK);
    }
    free(t);
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    assert_int_equal(lr_index_get_stats(ix, &st), LR_OK);
    assert_int_equal(st.blocks, 25600);
    assert_int_equal(st.prefixes, 25600);
    assert_int_equal(st.instances, 8);
    assert_int_equal(st.learned_blocks, 25600);
    /* memory stays within the published budget of 64 bytes per block
     * (plus fixed overhead) */
    assert_true(st.bytes < 25600 * 64 + 200000);
    lr_index_destroy(ix);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(create_validation),
        cmocka_unit_test(keys_are_the_documented_chain),
        cmocka_unit_test(keys_every_kernel_is_the_chain),
        cmocka_unit_test(keys_kernel_avoids_clock_drops),
        cmocka_unit_test(mm_keys_model),
        cmocka_unit_test(learn_match_basics),
        cmocka_unit_test(forks_around_the_table_stride),
        cmocka_unit_test(tenants_never_share),
        cmocka_unit_test(bad_input_changes_nothing),
        cmocka_unit_test(instance_limit),
        cmocka_unit_test(eviction_is_lru),
        cmocka_unit_test(eviction_trims_to_anchor),
        cmocka_unit_test(eviction_remote_first),
        cmocka_unit_test(prompt_longer_than_capacity),
        cmocka_unit_test(ttl_expires_whole_subtrees),
        cmocka_unit_test(eviction_of_shared_chains),
        cmocka_unit_test(stats_and_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
