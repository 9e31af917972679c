/* Status names, version, allocator plumbing, blobs and the PRNG. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise */
#endif
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "common/common.h"

/* One table, designated initialisers, checked complete at compile time
 * (B10). Values are append-only (B9). */
#define LR_STATUS_MAP(X)                                        \
    X(LR_OK, "success")                                         \
    X(LR_EINVAL, "invalid argument")                            \
    X(LR_ENOMEM, "out of memory")                               \
    X(LR_ERANGE, "value out of range")                          \
    X(LR_ENOENT, "no such instance, request or block")          \
    X(LR_EEXIST, "already exists")                              \
    X(LR_ELIMIT, "capacity limit reached")                      \
    X(LR_ECORRUPT, "malformed or corrupt input")                \
    X(LR_EVERSION, "unsupported struct size or format version") \
    X(LR_ENOTSUP, "not supported")                              \
    X(LR_ESTATE, "not valid in the current state")              \
    X(LR_EBUFSIZE, "buffer too small")                          \
    X(LR_EGAP, "sequence gap: earlier events are missing")      \
    X(LR_EBUSY, "saturated: a sheddable request refused")       \
    X(LR_EEXPIRED, "deadline passed while the request waited")

#define LR_X_COUNT(name, msg) +1
enum {
    LR_STATUS_COUNT = 0 LR_STATUS_MAP(LR_X_COUNT)
};
#undef LR_X_COUNT

static const char *const status_msg[] = {
#define LR_X_MSG(name, msg) [name] = msg,
    LR_STATUS_MAP(LR_X_MSG)
#undef LR_X_MSG
};
static const char *const status_sym[] = {
#define LR_X_SYM(name, msg) [name] = #name,
    LR_STATUS_MAP(LR_X_SYM)
#undef LR_X_SYM
};

_Static_assert(sizeof(status_msg) / sizeof(status_msg[0]) == LR_STATUS_COUNT,
               "status table has a gap");
_Static_assert(LR_EEXPIRED + 1 == LR_STATUS_COUNT,
               "a status value is missing from LR_STATUS_MAP");

const char *
lr_strerror(lr_status status)
{
    if ((unsigned)status >= LR_STATUS_COUNT)
        return "unknown status";
    return status_msg[status];
}

const char *
lr_status_name(lr_status status)
{
    if ((unsigned)status >= LR_STATUS_COUNT)
        return "LR_UNKNOWN";
    return status_sym[status];
}

unsigned
lr_version_number(void)
{
    return LR_VERSION_NUMBER;
}

const char *
lr_version_string(void)
{
    return LR_VERSION_STRING;
}

/* ---- allocator ---------------------------------------------------------- */

/* Blocks this large ask the kernel for transparent huge pages. The
 * index's tables are read at random: with 4 KiB pages nearly every probe
 * of a large index misses the TLB, and on a virtual machine a TLB miss
 * walks two page tables (measured here: an independent random load into
 * 32 MiB 11-15 ns with 4 KiB pages, 2-4 ns with huge pages; a dependent
 * one 190-230 ns against 130 ns). Only the default allocator does it: a
 * host's allocator decides for itself. Advice, never an error. */
#define HUGE_MIN ((size_t)4 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

static void *
advise_huge(void *p, size_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p != NULL && n >= HUGE_MIN) {
        uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        uintptr_t b = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);
        if (b > a)
            (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
    }
#else
    (void)n;
#endif
    return p;
}

static void *
libc_alloc(void *ud, size_t n)
{
    (void)ud;
    return advise_huge(malloc(n), n);
}

static void *
libc_realloc(void *ud, void *p, size_t old_n, size_t new_n)
{
    (void)ud;
    (void)old_n;
    return advise_huge(realloc(p, new_n), new_n);
}

static void
libc_free(void *ud, void *p, size_t n)
{
    (void)ud;
    (void)n;
    free(p);
}

lr_status
lr__mem_init(struct lr__mem *m, const lr_allocator *a)
{
    atomic_init(&m->live, 0);
    if (a == NULL) {
        m->a.alloc = libc_alloc;
        m->a.realloc = libc_realloc;
        m->a.free = libc_free;
        m->a.ud = NULL;
        return LR_OK;
    }
    if (a->alloc == NULL || a->realloc == NULL || a->free == NULL)
        return LR_EINVAL;
    m->a = *a;
    return LR_OK;
}

void *
lr__alloc(struct lr__mem *m, size_t n)
{
    if (n == 0)
        n = 1;
    void *p = m->a.alloc(m->a.ud, n);
    if (p != NULL)
        atomic_fetch_add_explicit(&m->live, n, memory_order_relaxed);
    return p;
}

void *
lr__calloc(struct lr__mem *m, size_t count, size_t size)
{
    size_t n;
    if (!lr__mul_size(count, size, &n))
        return NULL;
    void *p = lr__alloc(m, n);
    if (p != NULL)
        memset(p, 0, n == 0 ? 1 : n);
    return p;
}

void *
lr__realloc(struct lr__mem *m, void *p, size_t old_n, size_t new_n)
{
    if (p == NULL)
        return lr__alloc(m, new_n);
    if (new_n == 0)
        new_n = 1;
    if (old_n == 0)
        old_n = 1;
    void *q = m->a.realloc(m->a.ud, p, old_n, new_n);
    if (q != NULL) {
        atomic_fetch_add_explicit(&m->live, new_n, memory_order_relaxed);
        atomic_fetch_sub_explicit(&m->live, old_n, memory_order_relaxed);
    }
    return q;
}

void
lr__free(struct lr__mem *m, void *p, size_t n)
{
    if (p == NULL)
        return;
    if (n == 0)
        n = 1;
    m->a.free(m->a.ud, p, n);
    atomic_fetch_sub_explicit(&m->live, n, memory_order_relaxed);
}

lr_status
lr__grow(struct lr__mem *m, void **arr, size_t *cap, size_t need, size_t elem,
         size_t min)
{
    if (need <= *cap)
        return LR_OK;
    size_t want = need > SIZE_MAX - need / 2 ? need : need + need / 2;
    if (want < min)
        want = min;
    size_t old_bytes = *cap * elem, bytes; /* *cap * elem fitted before */
    if (!lr__mul_size(want, elem, &bytes))
        return LR_ENOMEM;
    void *p = lr__realloc(m, *arr, old_bytes, bytes);
    if (p == NULL)
        return LR_ENOMEM;
    *arr = p;
    *cap = want;
    return LR_OK;
}

lr_status
lr__handle_new(const lr_allocator *a, size_t size, size_t mem_at, void *out)
{
    struct lr__mem m;
    LR_TRY(lr__mem_init(&m, a));
    void *h = lr__calloc(&m, 1, size);
    if (h == NULL)
        return LR_ENOMEM;
    memcpy((char *)h + mem_at, &m, sizeof m);
    memcpy(out, &h, sizeof h); /* a T *: same representation as void * */
    return LR_OK;
}

void
lr__handle_free(void *h, size_t size, size_t mem_at)
{
    struct lr__mem m;
    memcpy(&m, (char *)h + mem_at, sizeof m);
    lr__free(&m, h, size);
}

lr_status
lr__copy_sized(void *dst, size_t dst_size, const void *src, size_t min_size)
{
    size_t given;
    memcpy(&given, src, sizeof given);
    if (given < min_size)
        return LR_EVERSION;
    size_t n = given < dst_size ? given : dst_size;
    memcpy(dst, src, n);
    memcpy(dst, &dst_size, sizeof dst_size);
    return LR_OK;
}

lr_status
lr__copy_out(void *dst, const void *src, size_t src_size)
{
    size_t have;
    memcpy(&have, dst, sizeof have);
    size_t n = have < src_size ? have : src_size;
    memcpy(dst, src, n);
    memcpy(dst, &have, sizeof have);
    return LR_OK;
}

void
lr__init_sized(void *p, size_t size, const void *defaults, size_t def_size)
{
    if (p == NULL || size < sizeof(size_t))
        return;
    memset(p, 0, size);
    if (defaults != NULL)
        memcpy(p, defaults, size < def_size ? size : def_size);
    memcpy(p, &size, sizeof size);
}

/* ---- blobs -------------------------------------------------------------- */

struct lr_blob {
    lr_allocator a;
    size_t size;
    uint8_t *data;
};

uint8_t *
lr__blob_bytes(lr_blob *b)
{
    return b->data;
}

lr_status
lr__blob_new(const struct lr__mem *m, size_t size, lr_blob **out,
             uint8_t **data)
{
    size_t total;
    if (!lr__add_size(sizeof(lr_blob), size, &total))
        return LR_ENOMEM;
    lr_blob *b = m->a.alloc(m->a.ud, total);
    if (b == NULL)
        return LR_ENOMEM;
    b->a = m->a;
    b->size = size;
    b->data = (uint8_t *)(b + 1);
    *out = b;
    *data = b->data;
    return LR_OK;
}

const uint8_t *
lr_blob_data(const lr_blob *blob)
{
    return blob == NULL ? NULL : blob->data;
}

size_t
lr_blob_size(const lr_blob *blob)
{
    return blob == NULL ? 0 : blob->size;
}

void
lr_blob_destroy(lr_blob *blob)
{
    if (blob == NULL)
        return;
    lr_allocator a = blob->a;
    a.free(a.ud, blob, sizeof(lr_blob) + blob->size);
}

/* ---- PRNG --------------------------------------------------------------- */

void
lr__rng_seed(struct lr__rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = lr__splitmix64(&x);
}

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
lr__rng_next(struct lr__rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t
lr__rng_below(struct lr__rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = lr__rng_next(r);
    } while (x >= limit);
    return x % n;
}

double
lr__rng_unit(struct lr__rng *r)
{
    return (double)(lr__rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

lr_bounds
lr__bounds_of(const struct lr__range *r)
{
    lr_bounds b = { LR_ENOTSUP, 0, 0, 0, 0 };
    if (r == NULL || !(r->hi > r->lo))
        return b;
    b.status = LR_OK;
    b.flags = r->integer ? LR_BOUNDS_INTEGER : 0;
    b.lo = r->lo;
    b.hi = r->hi;
    b.def = r->def;
    return b;
}

/* ---- selection ------------------------------------------------------------ */

static void
swap_d(double *a, size_t i, size_t j)
{
    double t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Sift a[i] down the max-heap a[0..n). */
static void
sift_down(double *a, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && a[c + 1] > a[c])
            c++;
        if (!(a[c] > a[i]))
            return;
        swap_d(a, i, c);
        i = c;
    }
}

static void
heap_sort(double *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (size_t end = n; end-- > 1;) {
        swap_d(a, 0, end);
        sift_down(a, 0, end);
    }
}

/* Above this many elements, lr__select first narrows to a band. */
#define SELECT_BAND_MIN 4096u
#define SELECT_SAMPLE 128u
#define SELECT_SPREAD 8u

static double select_rounds(double *a, size_t n, size_t k);

/* One pass around two pivots taken from an evenly spaced sample, at the
 * sample's ranks SELECT_SPREAD either side of k's: the elements below the
 * first go to the front, those above the second to the back. When the
 * k-th lies in the band between, the band alone is searched (about a
 * tenth of a, in one pass instead of the rounds' several); otherwise the
 * whole, reordered, as before. */
static double
select_band(double *a, size_t n, size_t k)
{
    double smp[SELECT_SAMPLE];
    size_t step = n / SELECT_SAMPLE;
    for (size_t i = 0; i < SELECT_SAMPLE; i++)
        smp[i] = a[i * step];
    heap_sort(smp, SELECT_SAMPLE);
    size_t ks = (size_t)((double)k / (double)n * SELECT_SAMPLE);
    double p1 = smp[ks > SELECT_SPREAD ? ks - SELECT_SPREAD : 0];
    double p2 = smp[ks + SELECT_SPREAD < SELECT_SAMPLE ? ks + SELECT_SPREAD
                                                       : SELECT_SAMPLE - 1];
    size_t lt = 0, j = 0, gt = n;
    while (j < gt) {
        double x = a[j];
        if (x < p1)
            swap_d(a, lt++, j++);
        else if (x > p2)
            swap_d(a, j, --gt);
        else
            j++;
    }
    if (k >= lt && k < gt)
        return select_rounds(a + lt, gt - lt, k - lt);
    return select_rounds(a, n, k);
}

double
lr__select(double *a, size_t n, size_t k)
{
    return n >= SELECT_BAND_MIN ? select_band(a, n, k) : select_rounds(a, n, k);
}

/* Quickselect rounds, then a heap sort (common.h, lr__select). */
static double
select_rounds(double *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    unsigned budget = 2;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (lo < hi) {
        if (budget-- == 0) {
            heap_sort(a + lo, hi - lo + 1);
            break;
        }
        /* median of three to a[lo], then Hoare's partition around it */
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo])
            swap_d(a, mid, lo);
        if (a[hi] < a[lo])
            swap_d(a, hi, lo);
        if (a[hi] < a[mid])
            swap_d(a, hi, mid);
        double pivot = a[mid];
        size_t i = lo, j = hi;
        for (;;) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i >= j)
                break;
            swap_d(a, i++, j--);
        }
        /* a[lo..j] <= pivot <= a[j+1..hi] */
        if (k <= j)
            hi = j;
        else
            lo = j + 1;
    }
    return a[k];
}

/* ---- the clock -------------------------------------------------------------- */

lr_status
lr__clock_judge(struct lr__clock *c, uint64_t t_ns, bool mutates)
{
    LR_RETURN_IF(t_ns > LR_MAX_TIME_NS, LR_ERANGE);
    /* newest <= 2^60 and a skew below 2^63: the sum fits in 64 bits */
    uint64_t skew = c->skew_ns > INT64_MAX ? INT64_MAX : c->skew_ns;
    uint64_t newest = atomic_load_explicit(&c->newest, memory_order_relaxed);
    if (newest == 0 || t_ns <= newest + skew) {
        /* an honest value breaks a pair (written only when one is open:
         * routes on several threads do not share a line for nothing) */
        if (mutates &&
            atomic_load_explicit(&c->ahead, memory_order_relaxed) != 0)
            atomic_store_explicit(&c->ahead, 0, memory_order_relaxed);
        return LR_OK;
    }
    if (!mutates)
        return LR_ERANGE;
    uint64_t prev = atomic_load_explicit(&c->ahead, memory_order_relaxed);
    if (prev != 0 && t_ns >= prev && t_ns - prev <= skew)
        return LR_OK; /* the second of a pair: the clock moved */
    atomic_store_explicit(&c->ahead, t_ns, memory_order_relaxed);
    return LR_ERANGE;
}

void
lr__clock_take(struct lr__clock *c, uint64_t t_ns)
{
    uint64_t n = atomic_load_explicit(&c->newest, memory_order_relaxed);
    while (t_ns > n && !atomic_compare_exchange_weak_explicit(
                           &c->newest, &n, t_ns, memory_order_relaxed,
                           memory_order_relaxed))
        ;
    if (atomic_load_explicit(&c->ahead, memory_order_relaxed) != 0)
        atomic_store_explicit(&c->ahead, 0, memory_order_relaxed);
}
/* ---- SipHash-2-4 ------------------------------------------------------------ */

static inline uint64_t
rotl64(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define SIPROUND(v0, v1, v2, v3) \
    do {                         \
        v0 += v1;                \
        v1 = rotl64(v1, 13);     \
        v1 ^= v0;                \
        v0 = rotl64(v0, 32);     \
        v2 += v3;                \
        v3 = rotl64(v3, 16);     \
        v3 ^= v2;                \
        v0 += v3;                \
        v3 = rotl64(v3, 21);     \
        v3 ^= v0;                \
        v2 += v1;                \
        v1 = rotl64(v1, 17);     \
        v1 ^= v2;                \
        v2 = rotl64(v2, 32);     \
    } while (0)

uint64_t
lr__siphash(const uint8_t key[16], const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t k0 = lr__get_u64(key), k1 = lr__get_u64(key + 8);
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = lr__get_u64(p + i);
        v3 ^= m;
        SIPROUND(v0, v1, v2, v3);
        SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = (uint64_t)len << 56;
    for (size_t i = whole; i < len; i++)
        last |= (uint64_t)p[i] << (8 * (i - whole));
    v3 ^= last;
    SIPROUND(v0, v1, v2, v3);
    SIPROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}
