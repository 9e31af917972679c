/* lr_text_tokens(): sizes, the documented token values, the prefix property
 * and every error path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "libroute/lr_text.h"
#include "testutil.h"

/* The test computes expected tokens itself, straight from the formula in
 * lr_text.h, with its own copy of xxHash inlined (B25). */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* Seed documented in lr_text.h; written out here, not taken from lib/, so
 * that a change on either side fails the test. */
#define TEXT_SEED 0x4c52544558543031ull /* "LRTEXT01" */

#define SENTINEL 0xdeadbeefu

static size_t
ceil_div(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

/* Tokens of `text` by the documented formula. */
static void
reference_tokens(const uint8_t *text, size_t len, uint32_t width, uint32_t *out)
{
    for (size_t off = 0, i = 0; off < len; off += width, i++) {
        size_t w = len - off < width ? len - off : width;
        out[i] = (uint32_t)XXH3_64bits_withSeed(text + off, w, TEXT_SEED);
    }
}

static void
fill(uint32_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = SENTINEL;
}

static void
assert_untouched(const uint32_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(buf[i], SENTINEL);
}

static void
random_text(uint64_t *seed, uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)tu_rand(seed);
}

/* ---- sizes ---------------------------------------------------------------- */

static void
test_size_query(void **state)
{
    (void)state;
    static const uint8_t text[200];
    static const uint32_t widths[] = { 1, 2, 3, 4, 5, 7, 8, 16, 63, 64 };
    static const size_t lens[] = { 0,  1,  2,  3,  4,   5,   15,  16,
                                   17, 63, 64, 65, 127, 128, 129, 200 };
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            size_t needed = 12345;
            assert_int_equal(
                lr_text_tokens(text, lens[l], widths[w], NULL, 0, &needed),
                LR_OK);
            assert_int_equal(needed, ceil_div(lens[l], widths[w]));
            /* A NULL buffer asks for the size whatever the capacity. */
            needed = 12345;
            assert_int_equal(
                lr_text_tokens(text, lens[l], widths[w], NULL, 1000, &needed),
                LR_OK);
            assert_int_equal(needed, ceil_div(lens[l], widths[w]));
        }
    }
}

static void
test_empty_text(void **state)
{
    (void)state;
    uint32_t out[4];
    size_t needed = 99;
    fill(out, 4);
    /* NULL text is allowed when len is 0. */
    assert_int_equal(lr_text_tokens(NULL, 0, 4, out, 4, &needed), LR_OK);
    assert_int_equal(needed, 0);
    assert_untouched(out, 4);
    needed = 99;
    assert_int_equal(lr_text_tokens("abc", 0, 1, out, 4, &needed), LR_OK);
    assert_int_equal(needed, 0);
    assert_untouched(out, 4);
    needed = 99;
    assert_int_equal(lr_text_tokens(NULL, 0, 4, NULL, 0, &needed), LR_OK);
    assert_int_equal(needed, 0);
    /* Zero capacity is enough for zero tokens. */
    needed = 99;
    assert_int_equal(lr_text_tokens("abc", 0, 64, out, 0, &needed), LR_OK);
    assert_int_equal(needed, 0);
    assert_untouched(out, 4);
}

/* ---- values ----------------------------------------------------------------- */

/* Golden values: XXH3 output is stable from xxHash 0.8.0 on, so these never
 * change. A change here breaks every host that stored tokens. */
static void
test_golden_values(void **state)
{
    (void)state;
    static const char text[] = "The quick brown fox"; /* 19 bytes */
    static const uint32_t expect[] = { 0x8110e7d4u, 0x9c7d9eb3u, 0xd4c1f3ccu,
                                       0x01b3039bu, 0x4b3e0512u };
    uint32_t out[6];
    size_t needed = 0;
    fill(out, 6);
    assert_int_equal(lr_text_tokens(text, 19, 4, out, 6, &needed), LR_OK);
    assert_int_equal(needed, 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(out[i], expect[i]);
    assert_untouched(out + 5, 1); /* nothing past *needed */

    assert_int_equal(lr_text_tokens("a", 1, 1, out, 1, &needed), LR_OK);
    assert_int_equal(needed, 1);
    assert_int_equal(out[0], 0x43577988u);
}

/* Every width, many lengths (full and short last chunks): the tokens are
 * exactly the documented XXH3 values. */
static void
test_values_match_formula(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("text values", 0x7e47);
    uint8_t text[300];
    uint32_t got[300], want[300];
    random_text(&seed, text, sizeof text);
    for (uint32_t width = 1; width <= LR_TEXT_MAX_WIDTH; width++) {
        for (size_t len = 0; len <= sizeof text;
             len += 1 + tu_below(&seed, 23)) {
            size_t n = ceil_div(len, width);
            size_t needed = 0;
            fill(got, 300);
            assert_int_equal(lr_text_tokens(text, len, width, got, n, &needed),
                             LR_OK);
            assert_int_equal(needed, n);
            reference_tokens(text, len, width, want);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(got[i], want[i]);
            assert_untouched(got + n, 300 - n);
        }
    }
}

/* Equal text prefixes give equal token prefixes: two texts that agree on
 * their first P bytes agree on their first floor(P / width) tokens, and a
 * text cut at a multiple of width tokenizes to a prefix of the whole. */
static void
test_prefix_property(void **state)
{
    (void)state;
    static const uint32_t widths[] = { 1, 2, 3, 4, 5, 8, 13, 16, 32, 64 };
    uint64_t seed = tu_seed("text prefix", 0x9f1);
    uint8_t a[512], b[512];
    uint32_t ta[512], tb[512];
    for (int round = 0; round < 50; round++) {
        random_text(&seed, a, sizeof a);
        size_t p = (size_t)tu_below(&seed, sizeof a + 1);
        memcpy(b, a, p);
        random_text(&seed, b + p, sizeof b - p);
        if (p < sizeof b)
            b[p] = (uint8_t)(a[p] ^ 0x5a); /* they differ right at p */
        size_t len_b = p + (size_t)tu_below(&seed, sizeof b - p + 1);
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            uint32_t width = widths[w];
            size_t na, nb;
            assert_int_equal(lr_text_tokens(a, sizeof a, width, ta, 512, &na),
                             LR_OK);
            assert_int_equal(lr_text_tokens(b, len_b, width, tb, 512, &nb),
                             LR_OK);
            size_t shared = p / width;
            assert_true(shared <= na && shared <= nb);
            for (size_t i = 0; i < shared; i++)
                assert_int_equal(ta[i], tb[i]);

            /* The text cut at a chunk boundary is a token prefix. */
            size_t cut = (p / width) * width;
            size_t nc;
            assert_int_equal(lr_text_tokens(a, cut, width, tb, 512, &nc),
                             LR_OK);
            assert_int_equal(nc, cut / width);
            for (size_t i = 0; i < nc; i++)
                assert_int_equal(ta[i], tb[i]);
        }
    }
}

/* Determinism: the same call twice gives the same tokens (no hidden state,
 * no per-process seed). */
static void
test_deterministic(void **state)
{
    (void)state;
    static const char text[] = "system: you are a helpful assistant\n";
    uint32_t t1[16], t2[16];
    size_t n1, n2;
    assert_int_equal(lr_text_tokens(text, sizeof text - 1, 4, t1, 16, &n1),
                     LR_OK);
    assert_int_equal(lr_text_tokens(text, sizeof text - 1, 4, t2, 16, &n2),
                     LR_OK);
    assert_int_equal(n1, n2);
    assert_memory_equal(t1, t2, n1 * sizeof t1[0]);
}

/* ---- errors ----------------------------------------------------------------- */

static void
test_einval(void **state)
{
    (void)state;
    static const char text[] = "abcdefgh";
    uint32_t out[8];
    size_t needed = 777;
    fill(out, 8);

    /* width 0 and width past LR_TEXT_MAX_WIDTH */
    assert_int_equal(lr_text_tokens(text, 8, 0, out, 8, &needed), LR_EINVAL);
    assert_int_equal(
        lr_text_tokens(text, 8, LR_TEXT_MAX_WIDTH + 1, out, 8, &needed),
        LR_EINVAL);
    assert_int_equal(lr_text_tokens(text, 8, 65, NULL, 0, &needed), LR_EINVAL);
    assert_int_equal(lr_text_tokens(text, 8, UINT32_MAX, out, 8, &needed),
                     LR_EINVAL);
    /* NULL needed, with and without a buffer */
    assert_int_equal(lr_text_tokens(text, 8, 4, out, 8, NULL), LR_EINVAL);
    assert_int_equal(lr_text_tokens(text, 8, 4, NULL, 0, NULL), LR_EINVAL);
    /* NULL text with len > 0 */
    assert_int_equal(lr_text_tokens(NULL, 1, 4, out, 8, &needed), LR_EINVAL);
    assert_int_equal(lr_text_tokens(NULL, 8, 4, NULL, 0, &needed), LR_EINVAL);
    /* absurd length (checked before the text is read) */
    assert_int_equal(
        lr_text_tokens(text, (size_t)LR_TEXT_MAX_BYTES + 1, 4, out, 8, &needed),
        LR_EINVAL);
    assert_int_equal(lr_text_tokens(text, SIZE_MAX, 64, NULL, 0, &needed),
                     LR_EINVAL);
    /* width 64 and width 1 are the valid extremes */
    assert_int_equal(
        lr_text_tokens(text, 8, LR_TEXT_MAX_WIDTH, NULL, 0, &needed), LR_OK);
    assert_int_equal(needed, 1);

    /* A rejected call wrote no token. */
    assert_untouched(out, 8);
}

static void
test_ebufsize_writes_nothing(void **state)
{
    (void)state;
    static const char text[] = "0123456789abcdefghij"; /* 20 bytes */
    uint32_t out[8];
    size_t needed;

    for (size_t cap = 0; cap < 5; cap++) {
        fill(out, 8);
        needed = 0;
        assert_int_equal(lr_text_tokens(text, 20, 4, out, cap, &needed),
                         LR_EBUFSIZE);
        assert_int_equal(needed, 5); /* says how much is needed */
        assert_untouched(out, 8);
    }
    /* capacity exactly needed: written, nothing past it */
    fill(out, 8);
    assert_int_equal(lr_text_tokens(text, 20, 4, out, 5, &needed), LR_OK);
    assert_int_equal(needed, 5);
    assert_untouched(out + 5, 3);
    for (size_t i = 0; i < 5; i++)
        assert_int_not_equal(out[i], SENTINEL);

    /* one token short with a short last chunk */
    fill(out, 8);
    assert_int_equal(lr_text_tokens(text, 19, 6, out, 3, &needed), LR_EBUFSIZE);
    assert_int_equal(needed, 4);
    assert_untouched(out, 8);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_query),
        cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_golden_values),
        cmocka_unit_test(test_values_match_formula),
        cmocka_unit_test(test_prefix_property),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_einval),
        cmocka_unit_test(test_ebufsize_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
