/* lr_common.h: status names and messages, versions, blobs; and the internal
 * helpers of lib/common/common.c (allocator plumbing, size arithmetic,
 * sized-struct copies, the PRNG). */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/common.h"
#include "libroute/lr_common.h"
#include "testutil.h"

/* ---- status names and messages ------------------------------------------ */

/* Written out independently of lib/common/common.c: a renumbered or renamed
 * status fails here. */
static const struct {
    lr_status status;
    int value;
    const char *name;
} statuses[] = {
    { LR_OK, 0, "LR_OK" },
    { LR_EINVAL, 1, "LR_EINVAL" },
    { LR_ENOMEM, 2, "LR_ENOMEM" },
    { LR_ERANGE, 3, "LR_ERANGE" },
    { LR_ENOENT, 4, "LR_ENOENT" },
    { LR_EEXIST, 5, "LR_EEXIST" },
    { LR_ELIMIT, 6, "LR_ELIMIT" },
    { LR_ECORRUPT, 7, "LR_ECORRUPT" },
    { LR_EVERSION, 8, "LR_EVERSION" },
    { LR_ENOTSUP, 9, "LR_ENOTSUP" },
    { LR_ESTATE, 10, "LR_ESTATE" },
    { LR_EBUFSIZE, 11, "LR_EBUFSIZE" },
    { LR_EGAP, 12, "LR_EGAP" },
    { LR_EBUSY, 13, "LR_EBUSY" },
    { LR_EEXPIRED, 14, "LR_EEXPIRED" },
};
#define N_STATUSES (sizeof statuses / sizeof statuses[0])

static void
test_status_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_STATUSES; i++) {
        assert_int_equal((int)statuses[i].status, statuses[i].value);
        const char *name = lr_status_name(statuses[i].status);
        assert_non_null(name);
        assert_string_equal(name, statuses[i].name);
    }
}

static void
test_strerror_every_status(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_STATUSES; i++) {
        const char *msg = lr_strerror(statuses[i].status);
        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
        assert_string_not_equal(msg, "unknown status");
        /* Static: the same pointer on every call. */
        assert_ptr_equal(msg, lr_strerror(statuses[i].status));
        /* Every status has its own message. */
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(msg, lr_strerror(statuses[j].status));
    }
    assert_string_equal(lr_strerror(LR_OK), "success");
}

/* The table ends at LR_EEXPIRED: the next value is not a status yet. */
static void
test_status_out_of_range(void **state)
{
    (void)state;
    static const long long bad[] = { 15, 16, 100,     1000,    INT_MAX,
                                     -1, -2, INT_MIN, UINT_MAX };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lr_status s = (lr_status)bad[i];
        const char *msg = lr_strerror(s);
        const char *name = lr_status_name(s);
        assert_non_null(msg);
        assert_non_null(name);
        assert_string_equal(msg, "unknown status");
        assert_string_equal(name, "LR_UNKNOWN");
    }
}

/* ---- version ------------------------------------------------------------- */

static void
test_version(void **state)
{
    (void)state;
    char expect[64];
    snprintf(expect, sizeof expect, "%d.%d.%d", LR_VERSION_MAJOR,
             LR_VERSION_MINOR, LR_VERSION_PATCH);
    assert_int_equal(LR_VERSION_NUMBER, LR_VERSION_MAJOR * 10000 +
                                            LR_VERSION_MINOR * 100 +
                                            LR_VERSION_PATCH);
    assert_string_equal(LR_VERSION_STRING, expect);
    assert_int_equal(lr_version_number(), LR_VERSION_NUMBER);
    assert_non_null(lr_version_string());
    assert_string_equal(lr_version_string(), LR_VERSION_STRING);
    assert_ptr_equal(lr_version_string(), lr_version_string());
    /* Components fit the encoding (two decimal digits for minor/patch). */
    assert_true(LR_VERSION_MINOR < 100 && LR_VERSION_PATCH < 100);
}

/* ---- blobs --------------------------------------------------------------- */

static void
test_blob_null(void **state)
{
    (void)state;
    assert_null(lr_blob_data(NULL));
    assert_int_equal(lr_blob_size(NULL), 0);
    lr_blob_destroy(NULL); /* a no-op */
}

/* A blob is freed through the allocator that made it, with the size it was
 * allocated with (tu_alloc checks the size on free). */
static void
test_blob_roundtrip(void **state)
{
    (void)state;
    struct tu_alloc t;
    struct lr__mem m;
    tu_alloc_init(&t);
    assert_int_equal(lr__mem_init(&m, &t.a), LR_OK);

    for (size_t size = 0; size < 100; size += 33) {
        lr_blob *b = NULL;
        uint8_t *data = NULL;
        assert_int_equal(lr__blob_new(&m, size, &b, &data), LR_OK);
        assert_non_null(b);
        assert_non_null(data);
        memset(data, 0xab, size);
        assert_ptr_equal(lr_blob_data(b), data);
        assert_int_equal(lr_blob_size(b), size);
        assert_int_equal(t.live_blocks, 1);
        lr_blob_destroy(b);
        assert_int_equal(t.live_blocks, 0);
        assert_int_equal(t.live_bytes, 0);
    }
}

static void
test_blob_oom(void **state)
{
    (void)state;
    struct tu_alloc t;
    struct lr__mem m;
    tu_alloc_init(&t);
    assert_int_equal(lr__mem_init(&m, &t.a), LR_OK);
    tu_alloc_arm(&t, 1, false);
    lr_blob *b = NULL;
    uint8_t *data = NULL;
    assert_int_equal(lr__blob_new(&m, 10, &b, &data), LR_ENOMEM);
    assert_null(b);
    assert_int_equal(t.live_blocks, 0);
    /* A size that overflows is refused before any allocation. */
    tu_alloc_disarm(&t);
    assert_int_equal(lr__blob_new(&m, SIZE_MAX - 3, &b, &data), LR_ENOMEM);
    assert_null(b);
    assert_int_equal(t.live_blocks, 0);
}

/* ---- allocator plumbing --------------------------------------------------- */

static void
test_mem_init(void **state)
{
    (void)state;
    struct lr__mem m;
    /* NULL: libc */
    assert_int_equal(lr__mem_init(&m, NULL), LR_OK);
    void *p = lr__alloc(&m, 16);
    assert_non_null(p);
    assert_int_equal(m.live, 16);
    lr__free(&m, p, 16);
    assert_int_equal(m.live, 0);

    /* Every hook must be set. */
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_allocator a = t.a;
    a.alloc = NULL;
    assert_int_equal(lr__mem_init(&m, &a), LR_EINVAL);
    a = t.a;
    a.realloc = NULL;
    assert_int_equal(lr__mem_init(&m, &a), LR_EINVAL);
    a = t.a;
    a.free = NULL;
    assert_int_equal(lr__mem_init(&m, &a), LR_EINVAL);
}

static void
test_mem_accounting(void **state)
{
    (void)state;
    struct tu_alloc t;
    struct lr__mem m;
    tu_alloc_init(&t);
    assert_int_equal(lr__mem_init(&m, &t.a), LR_OK);

    uint8_t *p = lr__calloc(&m, 10, 4);
    assert_non_null(p);
    for (int i = 0; i < 40; i++)
        assert_int_equal(p[i], 0);
    assert_int_equal(m.live, 40);
    p = lr__realloc(&m, p, 40, 100);
    assert_non_null(p);
    assert_int_equal(m.live, 100);
    assert_int_equal(t.live_bytes, 100);
    lr__free(&m, p, 100);
    assert_int_equal(m.live, 0);
    assert_int_equal(t.live_blocks, 0);

    /* Zero-size requests still give a distinct block of one byte. */
    p = lr__alloc(&m, 0);
    assert_non_null(p);
    assert_int_equal(m.live, 1);
    lr__free(&m, p, 0);
    assert_int_equal(m.live, 0);

    /* Overflowing calloc fails without calling the allocator. */
    uint64_t calls = t.calls;
    assert_null(lr__calloc(&m, SIZE_MAX / 2, 3));
    assert_int_equal(t.calls, calls);

    /* A failed realloc keeps the old block and the old accounting. */
    p = lr__alloc(&m, 8);
    assert_non_null(p);
    tu_alloc_arm(&t, 1, false);
    assert_null(lr__realloc(&m, p, 8, 64));
    tu_alloc_disarm(&t);
    assert_int_equal(m.live, 8);
    lr__free(&m, p, 8);
    lr__free(&m, NULL, 8); /* NULL is a no-op */
    assert_int_equal(t.live_blocks, 0);
    assert_int_equal(m.live, 0);
}

/* ---- size arithmetic ------------------------------------------------------ */

static void
test_size_arithmetic(void **state)
{
    (void)state;
    size_t r = 7;
    assert_true(lr__mul_size(0, SIZE_MAX, &r) && r == 0);
    assert_true(lr__mul_size(SIZE_MAX, 1, &r) && r == SIZE_MAX);
    assert_true(lr__mul_size(1u << 16, 1u << 15, &r) && r == (1u << 31));
    r = 7;
    assert_false(lr__mul_size(SIZE_MAX / 2 + 1, 2, &r));
    assert_int_equal(r, 7); /* untouched on overflow */
    assert_false(lr__mul_size(SIZE_MAX, SIZE_MAX, &r));

    assert_true(lr__add_size(SIZE_MAX - 1, 1, &r) && r == SIZE_MAX);
    assert_true(lr__add_size(0, 0, &r) && r == 0);
    r = 7;
    assert_false(lr__add_size(SIZE_MAX, 1, &r));
    assert_false(lr__add_size(1, SIZE_MAX, &r));
    assert_int_equal(r, 7);
}

/* ---- size-prefixed structs ------------------------------------------------ */

struct opts_v1 {
    size_t struct_size;
    uint32_t a;
    uint32_t b;
};
struct opts_v2 {
    size_t struct_size;
    uint32_t a;
    uint32_t b;
    uint64_t c; /* appended in "v2" */
};
#define OPTS_SIZE_V1 (offsetof(struct opts_v2, b) + sizeof(uint32_t))

static void
test_copy_sized(void **state)
{
    (void)state;
    struct opts_v2 dst;

    /* An older caller: its prefix is copied, the tail keeps the defaults,
     * struct_size becomes the library's own size. */
    struct opts_v1 old = { .struct_size = sizeof old, .a = 1, .b = 2 };
    memset(&dst, 0, sizeof dst);
    dst.c = 42;
    assert_int_equal(lr__copy_sized(&dst, sizeof dst, &old, OPTS_SIZE_V1),
                     LR_OK);
    assert_int_equal(dst.struct_size, sizeof dst);
    assert_int_equal(dst.a, 1);
    assert_int_equal(dst.b, 2);
    assert_int_equal(dst.c, 42);

    /* A newer caller with a longer struct: only what we know is read. */
    struct {
        struct opts_v2 v2;
        uint64_t future;
    } newer = { { sizeof newer, 3, 4, 5 }, 6 };
    memset(&dst, 0, sizeof dst);
    assert_int_equal(lr__copy_sized(&dst, sizeof dst, &newer, OPTS_SIZE_V1),
                     LR_OK);
    assert_int_equal(dst.struct_size, sizeof dst);
    assert_int_equal(dst.a, 3);
    assert_int_equal(dst.c, 5);

    /* Smaller than v1: LR_EVERSION, nothing copied. */
    struct opts_v1 tiny = { .struct_size = OPTS_SIZE_V1 - 1, .a = 9 };
    memset(&dst, 0, sizeof dst);
    assert_int_equal(lr__copy_sized(&dst, sizeof dst, &tiny, OPTS_SIZE_V1),
                     LR_EVERSION);
    assert_int_equal(dst.struct_size, 0);
    assert_int_equal(dst.a, 0);
    tiny.struct_size = 0;
    assert_int_equal(lr__copy_sized(&dst, sizeof dst, &tiny, OPTS_SIZE_V1),
                     LR_EVERSION);
}

/* ---- little-endian helpers ------------------------------------------------ */

static void
test_le_bytes(void **state)
{
    (void)state;
    uint8_t buf[8];
    lr__put_u64(buf, 0x0102030405060708ull);
    static const uint8_t le64[8] = { 8, 7, 6, 5, 4, 3, 2, 1 };
    assert_memory_equal(buf, le64, 8);
    assert_true(lr__get_u64(buf) == 0x0102030405060708ull);
    lr__put_u32(buf, 0xa1b2c3d4u);
    assert_int_equal(buf[0], 0xd4);
    assert_int_equal(buf[3], 0xa1);
    assert_int_equal(lr__get_u32(buf), 0xa1b2c3d4u);
    lr__put_u16(buf, 0xbeef);
    assert_int_equal(buf[0], 0xef);
    assert_int_equal(buf[1], 0xbe);
    assert_int_equal(lr__get_u16(buf), 0xbeef);
}

/* ---- PRNG ------------------------------------------------------------------- */

static void
test_rng(void **state)
{
    (void)state;
    struct lr__rng a, b, c;
    lr__rng_seed(&a, 42);
    lr__rng_seed(&b, 42);
    lr__rng_seed(&c, 43);
    int same_as_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = lr__rng_next(&a);
        assert_true(x == lr__rng_next(&b)); /* same seed, same stream */
        same_as_c += x == lr__rng_next(&c);
    }
    assert_true(same_as_c < 3);

    int seen[7] = { 0 };
    for (int i = 0; i < 7000; i++) {
        uint64_t v = lr__rng_below(&a, 7);
        assert_true(v < 7);
        seen[v]++;
    }
    for (int i = 0; i < 7; i++)
        assert_true(seen[i] > 800 && seen[i] < 1200);
    assert_true(lr__rng_below(&a, 0) == 0);
    assert_true(lr__rng_below(&a, 1) == 0);
    for (int i = 0; i < 1000; i++) {
        double u = lr__rng_unit(&a);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

/* SipHash-2-4 against the reference vectors of the paper (Aumasson and
 * Bernstein, appendix A): key 00..0f, messages 00, 00 01, ...; and
 * against a one-bit change of the key or the message. */
static void
test_siphash(void **state)
{
    (void)state;
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    assert_true(lr__siphash(key, msg, 0) == 0x726fdb47dd0e0e31ull);
    assert_true(lr__siphash(key, msg, 8) == 0x93f5f5799a932462ull);
    assert_true(lr__siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
    uint64_t h = lr__siphash(key, msg, 63);
    key[0] ^= 1;
    assert_true(lr__siphash(key, msg, 63) != h);
    key[0] ^= 1;
    msg[62] ^= 0x80;
    assert_true(lr__siphash(key, msg, 63) != h);
}

/* The clock's rules (common.h): the bound, the skew, the pair. */
static void
test_clock(void **state)
{
    (void)state;
    struct lr__clock c = { .skew_ns = 60 };
    assert_int_equal(lr__clock_judge(&c, LR_MAX_TIME_NS + 1, true), LR_ERANGE);
    assert_int_equal(lr__clock_judge(&c, 1000, true), LR_OK); /* first */
    lr__clock_take(&c, 1000);
    assert_int_equal(lr__clock_judge(&c, 1060, false), LR_OK);
    assert_int_equal(lr__clock_judge(&c, 1061, false), LR_ERANGE);
    assert_int_equal(lr__clock_judge(&c, 5000, true), LR_ERANGE);
    assert_int_equal(lr__clock_judge(&c, 900, true), LR_OK); /* breaks it */
    assert_int_equal(lr__clock_judge(&c, 5000, true), LR_ERANGE);
    assert_int_equal(lr__clock_judge(&c, 5030, true), LR_OK); /* a pair */
    lr__clock_take(&c, 5030);
    assert_int_equal(lr__clock_judge(&c, 5000, true), LR_OK); /* behind */
    lr__clock_take(&c, 5000);
    assert_true(c.newest == 5030);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* lr__select gives the k-th smallest, as a sort does, on both sides of
 * its band pass's size: random, few distinct, ascending, descending and
 * all-equal values, k at either end and in between. */
static void
test_select(void **state)
{
    (void)state;
    static double a[20000], sorted[20000];
    static const size_t sizes[] = { 1, 2, 7, 100, 4095, 4096, 20000 };
    uint64_t rs = tu_seed("test_select", 0x5e1ec7);
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t n = sizes[z];
        for (int shape = 0; shape < 5; shape++) {
            for (size_t i = 0; i < n; i++)
                sorted[i] = shape == 0   ? tu_unit(&rs)
                            : shape == 1 ? (double)tu_below(&rs, 5)
                            : shape == 2 ? (double)i
                            : shape == 3 ? (double)(n - i)
                                         : 3.0;
            qsort(sorted, n, sizeof *sorted, cmp_double);
            size_t ks[] = { 0, n / 4, n / 2, n - 1, tu_below(&rs, n) };
            for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
                for (size_t i = 0; i < n; i++)
                    a[i] = shape == 0   ? sorted[(i * 7919) % n]
                           : shape == 3 ? sorted[n - 1 - i]
                                        : sorted[(i * 31) % n];
                /* the want: the k-th of a's own sort */
                double want;
                static double b[20000];
                memcpy(b, a, n * sizeof *a);
                qsort(b, n, sizeof *b, cmp_double);
                want = b[ks[q]];
                assert_true(lr__select(a, n, ks[q]) == want);
            }
        }
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_strerror_every_status),
        cmocka_unit_test(test_status_out_of_range),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_blob_null),
        cmocka_unit_test(test_blob_roundtrip),
        cmocka_unit_test(test_blob_oom),
        cmocka_unit_test(test_mem_init),
        cmocka_unit_test(test_mem_accounting),
        cmocka_unit_test(test_size_arithmetic),
        cmocka_unit_test(test_copy_sized),
        cmocka_unit_test(test_le_bytes),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_siphash),
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_select),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
