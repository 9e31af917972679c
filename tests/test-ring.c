/* Tests for lr_ring: argument checks, a differential run against a naive
 * sorted-array model (B34), movement and balance properties of consistent
 * hashing, and OOM loops over every mutator (B33). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "libroute/lr_ring.h"
#include "common/lr_hash.h"
#include "parts/ring.h"
#include "testutil.h"

/* The seeds exactly as lr_ring.h documents them: if the library's
 * constants ever drift from the documented wire format, this fails to
 * compile, and the model below (which uses these) stops agreeing. */
#define DOC_SEED_VNODE 0x4c52564e4f444531ull
#define DOC_SEED_RINGK 0x4c5252494e474b31ull
_Static_assert(DOC_SEED_VNODE == LR_SEED_VNODE, "vnode seed drifted");
_Static_assert(DOC_SEED_RINGK == LR_SEED_RINGK, "key seed drifted");

/* The documented vnode formula, written out independently of lib/parts/ring.c. */
static uint64_t
doc_vnode_pos(const char *name, size_t len, uint32_t v)
{
    uint8_t buf[4 + 255];
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(v >> (8 * i));
    memcpy(buf + 4, name, len);
    return XXH3_64bits_withSeed(buf, 4 + len, DOC_SEED_VNODE);
}

/* ---- helpers ----------------------------------------------------------- */

static lr_ring *
new_ring(struct tu_alloc *t, uint32_t vnodes, uint32_t max_instances)
{
    lr_ring_options o;
    lr_ring_options_init(&o);
    o.allocator = t != NULL ? &t->a : NULL;
    o.vnodes = vnodes;
    o.max_instances = max_instances;
    lr_ring *r = NULL;
    assert_int_equal(lr_ring_create(&o, &r), LR_OK);
    assert_non_null(r);
    return r;
}

static void
add_named(lr_ring *r, const char *prefix, uint32_t first, uint32_t count,
          uint32_t id_base)
{
    char name[64];
    for (uint32_t i = first; i < first + count; i++) {
        snprintf(name, sizeof name, "%s-%u", prefix, i);
        assert_int_equal(lr_ring_add(r, name, id_base + i), LR_OK);
    }
}

/* Instance i's name as a fleet would spell it: "10.A.B.C:8000". */
static void
ip_name(char *buf, size_t cap, uint32_t i)
{
    snprintf(buf, cap, "10.%u.%u.%u:8000", i / 62500, i / 250 % 250, i % 250);
}

static void
assert_verified(const lr_ring *r)
{
    lr_status st = lr__ring_verify(r);
    if (st != LR_OK)
        fail_msg("lr__ring_verify: %s", lr_status_name(st));
}

static bool
has_id(const uint32_t *ids, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] == id)
            return true;
    }
    return false;
}

/* ---- the naive model (B34) --------------------------------------------- */

/* Every vnode of every instance in one array, re-sorted from scratch after
 * each change and scanned linearly, with positions computed here from the
 * documented formulas. Nothing is shared with lib/parts/ring.c but XXH3. */
#define M_MAX_INST 64
#define M_MAX_VN 160

struct m_inst {
    char name[LR_RING_MAX_NAME + 1];
    size_t len;
    uint32_t id;
    uint64_t pos[M_MAX_VN];
};

struct m_vn {
    uint64_t pos;
    const struct m_inst *in;
};

struct model {
    uint32_t vnodes;
    uint32_t max;
    size_t count;
    struct m_inst inst[M_MAX_INST];
    size_t n;
    struct m_vn vn[M_MAX_INST * M_MAX_VN];
};

static int
m_name_cmp(const struct m_inst *a, const struct m_inst *b)
{
    size_t m = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, m);
    if (c != 0)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

static int
m_vn_cmp(const void *pa, const void *pb)
{
    const struct m_vn *a = pa;
    const struct m_vn *b = pb;
    if (a->pos != b->pos)
        return a->pos < b->pos ? -1 : 1;
    return m_name_cmp(a->in, b->in);
}

static void
m_rebuild(struct model *m)
{
    m->n = 0;
    for (size_t i = 0; i < m->count; i++) {
        for (uint32_t v = 0; v < m->vnodes; v++) {
            m->vn[m->n].pos = m->inst[i].pos[v];
            m->vn[m->n].in = &m->inst[i];
            m->n++;
        }
    }
    qsort(m->vn, m->n, sizeof m->vn[0], m_vn_cmp);
}

static struct model *
m_new(uint32_t vnodes, uint32_t max)
{
    assert_true(vnodes <= M_MAX_VN && max <= M_MAX_INST);
    struct model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->vnodes = vnodes;
    m->max = max;
    return m;
}

/* Index of the instance with this id, or m->count. */
static size_t
m_index_of(const struct model *m, uint32_t id)
{
    size_t i = 0;
    while (i < m->count && m->inst[i].id != id)
        i++;
    return i;
}

/* The status lr_ring_add must return, applying the change on LR_OK. */
static lr_status
m_add(struct model *m, const char *name, uint32_t id, const uint64_t *pos)
{
    if (name == NULL)
        return LR_EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > LR_RING_MAX_NAME || id == UINT32_MAX)
        return LR_EINVAL;
    for (size_t i = 0; i < m->count; i++) {
        if (m->inst[i].len == len && memcmp(m->inst[i].name, name, len) == 0)
            return LR_EEXIST;
    }
    if (m_index_of(m, id) < m->count)
        return LR_EEXIST;
    if (m->count >= m->max)
        return LR_ELIMIT;
    struct m_inst *e = &m->inst[m->count++];
    memcpy(e->name, name, len + 1);
    e->len = len;
    e->id = id;
    for (uint32_t v = 0; v < m->vnodes; v++)
        e->pos[v] = pos != NULL ? pos[v] : doc_vnode_pos(name, len, v);
    m_rebuild(m);
    return LR_OK;
}

static lr_status
m_remove(struct model *m, uint32_t id)
{
    if (id == UINT32_MAX)
        return LR_EINVAL;
    size_t i = m_index_of(m, id);
    if (i == m->count)
        return LR_ENOENT;
    m->inst[i] = m->inst[--m->count];
    m_rebuild(m);
    return LR_OK;
}

/* Point j of a key, from the documented formula. */
static uint64_t
key_point(uint64_t key, uint32_t j)
{
    uint8_t le[8];
    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)(key >> (8 * b));
    uint8_t buf[12];
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(j >> (8 * i));
    memcpy(buf + 4, le, 8);
    return lr__hash(buf, 12, DOC_SEED_RINGK);
}

static lr_status
m_candidates(const struct model *m, uint64_t key, uint32_t k, uint32_t *out,
             uint32_t *n_out)
{
    if (k == 0 || k > LR_RING_MAX_K)
        return LR_EINVAL;
    if (m->count == 0) {
        *n_out = 0;
        return LR_ESTATE;
    }
    uint32_t want = k < m->count ? k : (uint32_t)m->count;
    for (uint32_t j = 0; j < want; j++) {
        uint64_t p = key_point(key, j);
        size_t i = 0;
        while (i < m->n && m->vn[i].pos < p)
            i++;
        if (i == m->n)
            i = 0;
        while (has_id(out, j, m->vn[i].in->id))
            i = (i + 1) % m->n;
        out[j] = m->vn[i].in->id;
    }
    *n_out = want;
    return LR_OK;
}

/* A fresh ring holding the model's instances, added in a random order. */
static lr_ring *
m_fresh_ring(const struct model *m, bool explicit_pos, uint64_t *seed)
{
    size_t order[M_MAX_INST];
    for (size_t i = 0; i < m->count; i++)
        order[i] = i;
    for (size_t i = m->count; i > 1; i--) {
        size_t j = (size_t)tu_below(seed, i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    lr_ring *r = new_ring(NULL, m->vnodes, m->max);
    for (size_t i = 0; i < m->count; i++) {
        const struct m_inst *e = &m->inst[order[i]];
        assert_int_equal(
            lr__ring_add_at(r, e->name, e->id, explicit_pos ? e->pos : NULL),
            LR_OK);
    }
    return r;
}

/* The status lr__ring_add_many must return (ring.h: LR_EINVAL for any
 * invalid name or id, then LR_ELIMIT, then the first LR_EEXIST in batch
 * order), applying all n on LR_OK and nothing otherwise. */
static lr_status
m_add_many(struct model *m, const char *const *names, const uint32_t *ids,
           size_t n, const uint64_t *pos)
{
    for (size_t i = 0; i < n; i++) {
        if (names[i] == NULL || ids[i] == UINT32_MAX)
            return LR_EINVAL;
        size_t len = strlen(names[i]);
        if (len == 0 || len > LR_RING_MAX_NAME)
            return LR_EINVAL;
    }
    if (m->count + n > m->max)
        return LR_ELIMIT;
    struct model *c = malloc(sizeof *c);
    assert_non_null(c);
    memcpy(c, m, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        lr_status st = m_add(c, names[i], ids[i],
                             pos != NULL ? pos + i * m->vnodes : NULL);
        if (st != LR_OK) {
            free(c);
            return st;
        }
    }
    memcpy(m, c, sizeof *m);
    free(c);
    m_rebuild(m); /* its entries pointed into the copy */
    return LR_OK;
}

/* A fresh ring holding the model's instances, placed by one bulk build in
 * a random order. */
static lr_ring *
m_fresh_bulk(const struct model *m, bool explicit_pos, uint64_t *seed)
{
    static uint64_t pos[M_MAX_INST * M_MAX_VN];
    const char *names[M_MAX_INST];
    uint32_t ids[M_MAX_INST];
    size_t order[M_MAX_INST];
    for (size_t i = 0; i < m->count; i++)
        order[i] = i;
    for (size_t i = m->count; i > 1; i--) {
        size_t j = (size_t)tu_below(seed, i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < m->count; i++) {
        const struct m_inst *e = &m->inst[order[i]];
        names[i] = e->name;
        ids[i] = e->id;
        memcpy(pos + i * m->vnodes, e->pos, m->vnodes * sizeof pos[0]);
    }
    lr_ring *r = new_ring(NULL, m->vnodes, m->max);
    assert_int_equal(lr__ring_add_many_at(r, names, ids, m->count,
                                          explicit_pos ? pos : NULL),
                     LR_OK);
    assert_verified(r);
    return r;
}

/* ---- unit tests -------------------------------------------------------- */

static void
test_create_destroy(void **state)
{
    (void)state;
    lr_ring *r = (lr_ring *)&r; /* must be overwritten with NULL on error */
    assert_int_equal(lr_ring_create(NULL, NULL), LR_EINVAL);
    assert_int_equal(lr_ring_create(NULL, &r), LR_OK);
    assert_non_null(r);
    assert_int_equal(lr_ring_count(r), 0);
    assert_verified(r);
    lr_ring_destroy(r);
    lr_ring_destroy(NULL);

    /* the allocator sees every byte and gets every byte back */
    struct tu_alloc t;
    tu_alloc_init(&t);
    r = new_ring(&t, 8, 8);
    assert_int_equal(lr__ring_mem_live(r), t.live_bytes);
    add_named(r, "a", 0, 8, 0);
    assert_int_equal(lr__ring_mem_live(r), t.live_bytes);
    lr_ring_destroy(r);
    assert_int_equal(t.live_bytes, 0);
    assert_int_equal(t.live_blocks, 0);

    /* NULL handles in the queries that never fail */
    assert_int_equal(lr_ring_count(NULL), 0);
    assert_int_equal(lr_ring_contains(NULL, 1), 0);
    assert_int_equal(lr__ring_digest(NULL), 0);
    assert_int_equal(lr__ring_verify(NULL), LR_EINVAL);
}

static void
test_options(void **state)
{
    (void)state;
    lr_ring_options o;
    lr_ring_options_init_sized(NULL,
                               sizeof(lr_ring_options)); /* no-op, no crash */
    lr_ring_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_null(o.allocator);
    assert_int_equal(o.vnodes, 160);
    assert_int_equal(o.max_instances, 4096);

    lr_ring_options init = LR_RING_OPTIONS_INIT;
    assert_int_equal(init.struct_size, sizeof init);

    lr_ring *r = (lr_ring *)&r;
    o.struct_size = LR_RING_OPTIONS_SIZE_V1 - 1;
    assert_int_equal(lr_ring_create(&o, &r), LR_EVERSION);
    assert_null(r);
    o.struct_size = 0;
    assert_int_equal(lr_ring_create(&o, &r), LR_EVERSION);
    assert_null(r);

    /* exactly v1, and a larger struct from a future version */
    o.struct_size = LR_RING_OPTIONS_SIZE_V1;
    assert_int_equal(lr_ring_create(&o, &r), LR_OK);
    lr_ring_destroy(r);
    struct {
        lr_ring_options v1;
        uint64_t later_field;
    } big;
    memset(&big, 0, sizeof big);
    big.v1.struct_size = sizeof big;
    big.later_field = 12345;
    assert_int_equal(lr_ring_create(&big.v1, &r), LR_OK);
    lr_ring_destroy(r);

    lr_ring_options_init(&o);
    o.vnodes = LR_RING_MAX_VNODES + 1;
    assert_int_equal(lr_ring_create(&o, &r), LR_EINVAL);
    assert_null(r);
    o.vnodes = LR_RING_MAX_VNODES;
    o.max_instances = 65537;
    assert_int_equal(lr_ring_create(&o, &r), LR_EINVAL);
    assert_null(r);
    o.max_instances = 65536;
    assert_int_equal(lr_ring_create(&o, &r), LR_OK);
    /* the largest vnode count works end to end */
    add_named(r, "big", 0, 3, 0);
    assert_verified(r);
    uint32_t out[8];
    uint32_t n;
    assert_int_equal(lr_ring_candidates(r, 42, 8, out, &n), LR_OK);
    assert_int_equal(n, 3);
    lr_ring_destroy(r);

    /* a partly-set allocator is refused */
    lr_allocator half = { 0 };
    struct tu_alloc t;
    tu_alloc_init(&t);
    half.alloc = t.a.alloc;
    lr_ring_options_init(&o);
    o.allocator = &half;
    assert_int_equal(lr_ring_create(&o, &r), LR_EINVAL);
    assert_null(r);
    assert_int_equal(t.live_bytes, 0);
}

/* Zero means the default: 160 vnodes and 4096 instances. The vnode count
 * shows in the memory used per instance; the limit shows by reaching it. */
static void
test_option_defaults(void **state)
{
    (void)state;
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_ring_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.allocator = &t.a;
    lr_ring *r;
    assert_int_equal(lr_ring_create(&o, &r), LR_OK);
    lr_ring *ref = new_ring(&t, 160, 4096);
    add_named(r, "d", 0, 2, 0);
    add_named(ref, "d", 0, 2, 0);
    assert_int_equal(lr__ring_digest(r), lr__ring_digest(ref));
    lr_ring_destroy(r);
    lr_ring_destroy(ref);

    o.vnodes = 1;
    assert_int_equal(lr_ring_create(&o, &r), LR_OK);
    char name[32];
    for (uint32_t i = 0; i < 4096; i++) {
        snprintf(name, sizeof name, "i%u", i);
        assert_int_equal(lr_ring_add(r, name, i), LR_OK);
    }
    uint64_t d = lr__ring_digest(r);
    assert_int_equal(lr_ring_add(r, "one-too-many", 4096), LR_ELIMIT);
    assert_int_equal(lr__ring_digest(r), d);
    assert_int_equal(lr_ring_count(r), 4096);
    assert_verified(r);
    lr_ring_destroy(r);
    assert_int_equal(t.live_bytes, 0);
}

static void
test_bad_add(void **state)
{
    (void)state;
    lr_ring *r = new_ring(NULL, 4, 3);
    assert_int_equal(lr_ring_add(NULL, "a", 1), LR_EINVAL);
    add_named(r, "x", 0, 2, 10); /* x-0 -> 10, x-1 -> 11 */
    uint64_t d = lr__ring_digest(r);

    char longest[LR_RING_MAX_NAME + 2];
    memset(longest, 'n', sizeof longest);
    longest[LR_RING_MAX_NAME + 1] = '\0'; /* 256 bytes */
    assert_int_equal(lr_ring_add(r, NULL, 1), LR_EINVAL);
    assert_int_equal(lr_ring_add(r, "", 1), LR_EINVAL);
    assert_int_equal(lr_ring_add(r, longest, 1), LR_EINVAL);
    assert_int_equal(lr_ring_add(r, "ok", UINT32_MAX), LR_EINVAL);
    assert_int_equal(lr_ring_add(r, "x-0", 99), LR_EEXIST);   /* name */
    assert_int_equal(lr_ring_add(r, "fresh", 11), LR_EEXIST); /* id */
    assert_int_equal(lr__ring_digest(r), d);
    assert_int_equal(lr_ring_count(r), 2);
    assert_false(lr_ring_contains(r, 99));
    assert_false(lr_ring_contains(r, 1));
    assert_verified(r);

    /* 255 bytes is fine, and so is any non-NUL byte */
    longest[LR_RING_MAX_NAME] = '\0';
    longest[0] = (char)0xff;
    assert_int_equal(lr_ring_add(r, longest, 1), LR_OK);
    assert_true(lr_ring_contains(r, 1));
    d = lr__ring_digest(r);

    /* at the limit: ELIMIT, unchanged; room again after a removal */
    assert_int_equal(lr_ring_add(r, "fourth", 4), LR_ELIMIT);
    assert_int_equal(lr__ring_digest(r), d);
    assert_int_equal(lr_ring_remove(r, 10), LR_OK);
    assert_int_equal(lr_ring_add(r, "fourth", 4), LR_OK);
    assert_int_equal(lr_ring_count(r), 3);
    assert_verified(r);
    lr_ring_destroy(r);
}

static void
test_bad_remove(void **state)
{
    (void)state;
    lr_ring *r = new_ring(NULL, 4, 8);
    assert_int_equal(lr_ring_remove(NULL, 1), LR_EINVAL);
    assert_int_equal(lr_ring_remove(r, 1), LR_ENOENT);
    add_named(r, "y", 0, 3, 0);
    uint64_t d = lr__ring_digest(r);
    assert_int_equal(lr_ring_remove(r, UINT32_MAX), LR_EINVAL);
    assert_int_equal(lr_ring_remove(r, 3), LR_ENOENT);
    assert_int_equal(lr__ring_digest(r), d);

    /* remove then re-add gives back the very same ring */
    assert_int_equal(lr_ring_remove(r, 1), LR_OK);
    assert_false(lr_ring_contains(r, 1));
    assert_int_equal(lr_ring_remove(r, 1), LR_ENOENT);
    assert_int_equal(lr_ring_add(r, "y-1", 1), LR_OK);
    assert_int_equal(lr__ring_digest(r), d);

    /* down to empty and back up */
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(lr_ring_remove(r, i), LR_OK);
        assert_verified(r);
    }
    assert_int_equal(lr_ring_count(r), 0);
    add_named(r, "y", 0, 3, 0);
    assert_int_equal(lr__ring_digest(r), d);
    lr_ring_destroy(r);
}

static void
test_bad_candidates(void **state)
{
    (void)state;
    lr_ring *r = new_ring(NULL, 4, 16);
    uint32_t out[LR_RING_MAX_K + 1];
    uint32_t n = 77;

    assert_int_equal(lr_ring_candidates(r, 1, 2, out, &n), LR_ESTATE);
    assert_int_equal(n, 0);

    add_named(r, "z", 0, 3, 0);
    uint64_t d = lr__ring_digest(r);
    for (size_t i = 0; i < LR_RING_MAX_K + 1; i++)
        out[i] = 0xdeadbeef;
    n = 77;
    assert_int_equal(lr_ring_candidates(NULL, 1, 2, out, &n), LR_EINVAL);
    assert_int_equal(lr_ring_candidates(r, 1, 2, NULL, &n), LR_EINVAL);
    assert_int_equal(lr_ring_candidates(r, 1, 2, out, NULL), LR_EINVAL);
    assert_int_equal(lr_ring_candidates(r, 1, 0, out, &n), LR_EINVAL);
    assert_int_equal(lr_ring_candidates(r, 1, LR_RING_MAX_K + 1, out, &n),
                     LR_EINVAL);
    /* a refused call writes nothing */
    assert_int_equal(n, 77);
    for (size_t i = 0; i < LR_RING_MAX_K + 1; i++)
        assert_int_equal(out[i], 0xdeadbeef);
    assert_int_equal(lr__ring_digest(r), d);

    /* k == LR_RING_MAX_K writes k entries and no more */
    add_named(r, "z", 3, 7, 0);
    assert_int_equal(lr_ring_candidates(r, 1, LR_RING_MAX_K, out, &n), LR_OK);
    assert_int_equal(n, LR_RING_MAX_K);
    assert_int_equal(out[LR_RING_MAX_K], 0xdeadbeef);
    lr_ring_destroy(r);
}

/* n_out = min(k, count); ids distinct and on the ring; the k-list is a
 * prefix of the (k+1)-list (out[j] is always hash j's pick). */
static void
test_candidates_distinct(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("candidates_distinct", 7);
    lr_ring *r = new_ring(NULL, 20, 16);
    for (uint32_t count = 1; count <= 10; count++) {
        char name[32];
        snprintf(name, sizeof name, "inst-%u", count);
        assert_int_equal(lr_ring_add(r, name, 1000 + count), LR_OK);
        for (int q = 0; q < 300; q++) {
            uint64_t key = tu_rand(&seed);
            uint32_t prev[LR_RING_MAX_K];
            uint32_t prev_n = 0;
            for (uint32_t k = 1; k <= LR_RING_MAX_K; k++) {
                uint32_t out[LR_RING_MAX_K];
                uint32_t n;
                assert_int_equal(lr_ring_candidates(r, key, k, out, &n), LR_OK);
                assert_int_equal(n, k < count ? k : count);
                for (uint32_t i = 0; i < n; i++) {
                    assert_true(lr_ring_contains(r, out[i]));
                    assert_false(has_id(out, i, out[i]));
                }
                assert_true(n >= prev_n);
                assert_memory_equal(out, prev, prev_n * sizeof out[0]);
                memcpy(prev, out, n * sizeof out[0]);
                prev_n = n;
            }
        }
    }
    lr_ring_destroy(r);
}

static void
test_single_instance(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("single_instance", 11);
    lr_ring *r = new_ring(NULL, 0, 0);
    assert_int_equal(lr_ring_add(r, "only", 42), LR_OK);
    for (int q = 0; q < 2000; q++) {
        uint32_t out[LR_RING_MAX_K];
        uint32_t n;
        uint32_t k = 1 + (uint32_t)tu_below(&seed, LR_RING_MAX_K);
        uint64_t key = q < 4 ? (uint64_t[]){ 0, 1, UINT64_MAX, 1ull << 63 }[q]
                             : tu_rand(&seed);
        assert_int_equal(lr_ring_candidates(r, key, k, out, &n), LR_OK);
        assert_int_equal(n, 1);
        assert_int_equal(out[0], 42);
    }
    lr_ring_destroy(r);
}

/* The ring is a function of the set of names: any insertion order gives
 * the same digest and the same candidates. */
static void
test_insertion_order(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("insertion_order", 13);
    enum {
        N = 40
    };
    uint32_t order[N];
    for (uint32_t i = 0; i < N; i++)
        order[i] = i;
    for (uint32_t i = N; i > 1; i--) {
        uint32_t j = (uint32_t)tu_below(&seed, i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    lr_ring *a = new_ring(NULL, 0, 0);
    lr_ring *b = new_ring(NULL, 0, 0);
    char name[32];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(name, sizeof name, "gpu-%u.internal:8000", i);
        assert_int_equal(lr_ring_add(a, name, 500 + i), LR_OK);
        snprintf(name, sizeof name, "gpu-%u.internal:8000", order[i]);
        assert_int_equal(lr_ring_add(b, name, 500 + order[i]), LR_OK);
    }
    assert_verified(a);
    assert_verified(b);
    assert_int_equal(lr__ring_digest(a), lr__ring_digest(b));
    for (uint32_t q = 0; q < 10000; q++) {
        uint64_t key = tu_rand(&seed);
        uint32_t k = 1 + q % LR_RING_MAX_K;
        uint32_t oa[LR_RING_MAX_K];
        uint32_t ob[LR_RING_MAX_K];
        uint32_t na;
        uint32_t nb;
        assert_int_equal(lr_ring_candidates(a, key, k, oa, &na), LR_OK);
        assert_int_equal(lr_ring_candidates(b, key, k, ob, &nb), LR_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(oa, ob, na * sizeof oa[0]);
    }
    lr_ring_destroy(a);
    lr_ring_destroy(b);
}

/* Equal positions sort by name bytes (unsigned memcmp, then length), in
 * whatever order the instances arrive. 64-bit hashes never collide in a
 * test, so the positions are given explicitly. */
static void
test_ties_by_name(void **state)
{
    (void)state;
    static const char *names[] = { "b", "ab", "a", "\xc3\xa9", "abc" };
    /* by name: "a" < "ab" < "abc" < "b" < "\xc3\xa9" */
    static const uint32_t sorted_ids[] = { 2, 1, 4, 0, 3 };
    const uint64_t pos[2] = { 1000, UINT64_MAX };
    static const uint32_t orders[3][5] = { { 0, 1, 2, 3, 4 },
                                           { 4, 3, 2, 1, 0 },
                                           { 3, 0, 4, 2, 1 } };
    uint64_t d0 = 0;
    for (int o = 0; o < 3; o++) {
        lr_ring *r = new_ring(NULL, 2, 8);
        for (int i = 0; i < 5; i++) {
            uint32_t id = orders[o][i];
            assert_int_equal(lr__ring_add_at(r, names[id], id, pos), LR_OK);
            assert_verified(r);
        }
        if (o == 0)
            d0 = lr__ring_digest(r);
        assert_int_equal(lr__ring_digest(r), d0);
        /* Every point lands on one of the two ties (1000, or the one at
         * the very top of the circle), and each tie lists all five names
         * in order, so the picks are the name order whatever the key. */
        for (uint64_t key = 0; key < 200; key++) {
            uint32_t out[5];
            uint32_t n;
            assert_int_equal(lr_ring_candidates(r, key, 5, out, &n), LR_OK);
            assert_int_equal(n, 5);
            assert_memory_equal(out, sorted_ids, sizeof out);
        }
        lr_ring_destroy(r);
    }
}

/* A point exactly on a vnode picks that vnode ("at or after"), not the
 * next one. */
static void
test_point_on_vnode(void **state)
{
    (void)state;
    const uint64_t key = 0x0123456789abcdefull;
    const uint64_t p = key_point(key, 0);
    const uint64_t at[1] = { p };
    const uint64_t next[1] = { p + 1 };
    const uint64_t before[1] = { p - 1 };
    lr_ring *r = new_ring(NULL, 1, 8);
    assert_int_equal(lr__ring_add_at(r, "before", 1, before), LR_OK);
    assert_int_equal(lr__ring_add_at(r, "at", 2, at), LR_OK);
    assert_int_equal(lr__ring_add_at(r, "next", 3, next), LR_OK);
    uint32_t out[1];
    uint32_t n;
    assert_int_equal(lr_ring_candidates(r, key, 1, out, &n), LR_OK);
    assert_int_equal(out[0], 2);
    assert_int_equal(lr_ring_remove(r, 2), LR_OK);
    assert_int_equal(lr_ring_candidates(r, key, 1, out, &n), LR_OK);
    assert_int_equal(out[0], 3);
    lr_ring_destroy(r);
}

/* Regression: the first merge ran backward over the new instance's entries
 * and overwrote them with old ones before reading them, so every key
 * picked the first instance added. Interleaved positions catch it. */
static void
test_regress_merge_clobbered_new_vnodes(void **state)
{
    (void)state;
    lr_ring *r = new_ring(NULL, 3, 8);
    const uint64_t a[3] = { 10, 30, 50 };
    const uint64_t b[3] = { 20, 40, 60 };
    const uint64_t c[3] = { 5, 35, 65 };
    assert_int_equal(lr__ring_add_at(r, "a", 1, a), LR_OK);
    assert_int_equal(lr__ring_add_at(r, "b", 2, b), LR_OK);
    assert_verified(r);
    assert_int_equal(lr__ring_add_at(r, "c", 3, c), LR_OK);
    assert_verified(r);
    lr_ring_destroy(r);

    /* and with hashed positions, every instance gets picked first */
    r = new_ring(NULL, 0, 0);
    add_named(r, "node", 0, 4, 0);
    assert_verified(r);
    bool seen[4] = { false, false, false, false };
    for (uint64_t key = 0; key < 400; key++) {
        uint32_t out[1];
        uint32_t n;
        assert_int_equal(lr_ring_candidates(r, key, 1, out, &n), LR_OK);
        assert_true(out[0] < 4);
        seen[out[0]] = true;
    }
    for (int i = 0; i < 4; i++)
        assert_true(seen[i]);
    lr_ring_destroy(r);
}

/* Positions are a wire format (B26): these picks were computed when the
 * position formula was fixed (index in the bytes, not the seed), checked
 * against the model, and must never change. */
static void
test_golden_candidates(void **state)
{
    (void)state;
    static const char *names[] = { "10.0.0.5:8000", "10.0.0.6:8000",
                                   "10.0.0.7:8000", "10.0.0.8:8000" };
    static const uint32_t golden[8][3] = {
        { 6, 7, 8 }, { 8, 7, 5 }, { 8, 6, 5 }, { 8, 7, 5 },
        { 7, 5, 6 }, { 5, 7, 6 }, { 7, 8, 6 }, { 5, 7, 6 },
    };
    lr_ring *r = new_ring(NULL, 0, 0);
    struct model *m = m_new(160, 8);
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(lr_ring_add(r, names[i], 5 + i), LR_OK);
        assert_int_equal(m_add(m, names[i], 5 + i, NULL), LR_OK);
    }
    for (uint64_t key = 0; key < 8; key++) {
        uint32_t out[3];
        uint32_t mo[3];
        uint32_t n;
        uint32_t mn;
        assert_int_equal(lr_ring_candidates(r, key, 3, out, &n), LR_OK);
        assert_int_equal(m_candidates(m, key, 3, mo, &mn), LR_OK);
        assert_int_equal(n, 3);
        assert_memory_equal(out, mo, sizeof out);
        assert_memory_equal(out, golden[key], sizeof out);
    }
    free(m);
    lr_ring_destroy(r);
}

/* ---- differential test against the model (B34) ------------------------- */

struct diff_cfg {
    const char *what;
    uint32_t vnodes;
    uint32_t max;
    bool explicit_pos; /* positions from a small pool: ties, wrap-around */
    int ops;
};

static void
rand_name(uint64_t *s, bool small_alphabet, char *buf, size_t cap)
{
    assert_true(cap > LR_RING_MAX_NAME + 2);
    uint64_t r = tu_below(s, 100);
    if (r == 0) {
        buf[0] = '\0';
        return;
    }
    if (r == 1 || r == 2) { /* just past, and exactly at, the longest */
        size_t len = r == 1 ? LR_RING_MAX_NAME + 1 : LR_RING_MAX_NAME;
        memset(buf, 'L', len);
        buf[len - 1] = (char)('a' + tu_below(s, 3));
        buf[len] = '\0';
        return;
    }
    size_t len;
    if (small_alphabet) {
        /* "a", "ab", "b\xc3"...: prefixes and high bytes, many repeats */
        static const char alpha[] = { 'a', 'b', (char)0xc3 };
        len = 1 + (size_t)tu_below(s, 3);
        for (size_t i = 0; i < len; i++)
            buf[i] = alpha[tu_below(s, 3)];
    } else {
        len = 1 + (size_t)tu_below(s, 12);
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)(1 + tu_below(s, 255));
    }
    buf[len] = '\0';
}

static uint32_t
rand_id(uint64_t *s, const struct model *m)
{
    uint64_t r = tu_below(s, 100);
    if (r < 2)
        return UINT32_MAX;
    if (r < 60 && m->count > 0)
        return m->inst[tu_below(s, m->count)].id;
    return (uint32_t)tu_below(s, 96);
}

static void
check_same(const lr_ring *r, const struct model *m, const struct tu_alloc *t,
           uint64_t *seed)
{
    assert_verified(r);
    assert_int_equal(lr_ring_count(r), m->count);
    assert_int_equal(lr__ring_mem_live(r), t->live_bytes);
    for (size_t i = 0; i < m->count; i++)
        assert_true(lr_ring_contains(r, m->inst[i].id));
    uint32_t other = (uint32_t)tu_below(seed, 200);
    assert_int_equal(lr_ring_contains(r, other),
                     m_index_of(m, other) < m->count);
}

static void
run_diff(const struct diff_cfg *cfg, uint64_t *seed)
{
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_ring *r = new_ring(&t, cfg->vnodes, cfg->max);
    struct model *m = m_new(cfg->vnodes, cfg->max);
    uint64_t pool[16] = {
        0, 1, 2, UINT64_MAX - 1, UINT64_MAX, 1ull << 63, (1ull << 63) - 1
    };
    /* Some positions sit exactly on points of the keys in `hot`, which
     * queries use now and then: "at or after" must include the point. */
    uint64_t hot[4];
    for (int i = 0; i < 4; i++) {
        hot[i] = tu_rand(seed);
        pool[7 + 2 * i] = key_point(hot[i], 0);
        pool[8 + 2 * i] = key_point(hot[i], (uint32_t)(1 + i));
    }
    pool[15] = tu_rand(seed);
    char name[LR_RING_MAX_NAME + 8];
    uint64_t pos[M_MAX_VN];

    for (int op = 0; op < cfg->ops; op++) {
        uint64_t d0 = lr__ring_digest(r);
        uint64_t what = tu_below(seed, 100);
        lr_status want;
        lr_status got;
        if (what < 36) {
            rand_name(seed, cfg->explicit_pos, name, sizeof name);
            const char *np = tu_below(seed, 100) == 0 ? NULL : name;
            uint32_t id = rand_id(seed, m);
            if (cfg->explicit_pos) {
                for (uint32_t v = 0; v < cfg->vnodes; v++)
                    pos[v] = tu_below(seed, 4) == 0 ? tu_rand(seed)
                                                    : pool[tu_below(seed, 16)];
                want = m_add(m, np, id, pos);
                got = lr__ring_add_at(r, np, id, pos);
            } else {
                want = m_add(m, np, id, NULL);
                got = lr_ring_add(r, np, id);
            }
            if (got != want)
                fail_msg("op %d add: got %s, model %s", op, lr_status_name(got),
                         lr_status_name(want));
        } else if (what < 40) {
            /* a bulk build of 1..3 onto the ring as it is */
            static char bn[3][LR_RING_MAX_NAME + 8];
            static uint64_t bpos[3 * M_MAX_VN];
            const char *names[3];
            uint32_t ids[3];
            size_t nb = 1 + (size_t)tu_below(seed, 3);
            for (size_t i = 0; i < nb; i++) {
                rand_name(seed, cfg->explicit_pos, bn[i], sizeof bn[i]);
                names[i] = tu_below(seed, 100) == 0 ? NULL : bn[i];
                ids[i] = rand_id(seed, m);
            }
            for (uint32_t v = 0; v < nb * cfg->vnodes; v++)
                bpos[v] = tu_below(seed, 4) == 0 ? tu_rand(seed)
                                                 : pool[tu_below(seed, 16)];
            const uint64_t *pp = cfg->explicit_pos ? bpos : NULL;
            want = m_add_many(m, names, ids, nb, pp);
            got = lr__ring_add_many_at(r, names, ids, nb, pp);
            if (got != want)
                fail_msg("op %d add_many(%zu): got %s, model %s", op, nb,
                         lr_status_name(got), lr_status_name(want));
        } else if (what < 65) {
            uint32_t id = rand_id(seed, m);
            want = m_remove(m, id);
            got = lr_ring_remove(r, id);
            if (got != want)
                fail_msg("op %d remove %u: got %s, model %s", op, id,
                         lr_status_name(got), lr_status_name(want));
        } else {
            want = LR_OK;
            got = LR_OK;
            for (int q = 0; q < 8; q++) {
                uint64_t key = tu_below(seed, 4) == 0 ? hot[tu_below(seed, 4)]
                                                      : tu_rand(seed);
                uint32_t k = (uint32_t)tu_below(seed, LR_RING_MAX_K + 2);
                uint32_t out[LR_RING_MAX_K];
                uint32_t mo[LR_RING_MAX_K];
                uint32_t n = 99;
                uint32_t mn = 99;
                lr_status a = lr_ring_candidates(r, key, k, out, &n);
                lr_status b = m_candidates(m, key, k, mo, &mn);
                if (a != b || n != mn ||
                    (a == LR_OK && memcmp(out, mo, n * sizeof out[0]) != 0))
                    fail_msg("op %d candidates(key %llu, k %u): got %s n %u,"
                             " model %s n %u",
                             op, (unsigned long long)key, k, lr_status_name(a),
                             n, lr_status_name(b), mn);
            }
        }
        if (got != LR_OK)
            assert_int_equal(lr__ring_digest(r), d0);
        check_same(r, m, &t, seed);

        /* Now and then, the same instance set built from scratch in a
         * random order must be the same ring. */
        if (op % 250 == 249) {
            lr_ring *fresh = m_fresh_ring(m, cfg->explicit_pos, seed);
            assert_int_equal(lr__ring_digest(fresh), lr__ring_digest(r));
            lr_ring_destroy(fresh);
            fresh = m_fresh_bulk(m, cfg->explicit_pos, seed);
            assert_int_equal(lr__ring_digest(fresh), lr__ring_digest(r));
            lr_ring_destroy(fresh);
        }
    }
    lr_ring_destroy(r);
    free(m);
    assert_int_equal(t.live_bytes, 0);
}

static void
test_differential(void **state)
{
    (void)state;
    static const struct diff_cfg cfgs[] = {
        { "hashed, 1 vnode", 1, 40, false, 3000 },
        { "hashed, 16 vnodes", 16, 40, false, 3000 },
        { "hashed, 160 vnodes", 160, 24, false, 800 },
        { "ties, 1 vnode", 1, 40, true, 3000 },
        { "ties, 3 vnodes", 3, 24, true, 3000 },
        /* up to 960 entries in a few dozen leaves, most of them on 16
         * positions: runs of ties longer than a leaf, split and merged
         * across leaf boundaries */
        { "ties, 40 vnodes", 40, 24, true, 1200 },
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "differential (%s)", cfgs[i].what);
        uint64_t seed = tu_seed(what, 0x5eed0000u + i);
        run_diff(&cfgs[i], &seed);
    }
}

/* ---- consistent-hashing properties ------------------------------------- */

enum {
    MOVE_KEYS = 20000
};

static void
all_candidates(const lr_ring *r, const uint64_t *keys, uint32_t k,
               uint32_t *out)
{
    for (size_t i = 0; i < MOVE_KEYS; i++) {
        uint32_t n;
        assert_int_equal(lr_ring_candidates(r, keys[i], k, out + i * k, &n),
                         LR_OK);
        assert_int_equal(n, k);
    }
}

/* Count keys whose lists differ between before and after, asserting that
 * each of them has `id` in `with` (the list that holds the instance that
 * came or went) and that every key holding it did change. */
static size_t
count_moved(const uint32_t *before, const uint32_t *after, const uint32_t *with,
            uint32_t k, uint32_t id)
{
    size_t moved = 0;
    for (size_t i = 0; i < MOVE_KEYS; i++) {
        bool changed =
            memcmp(before + i * k, after + i * k, k * sizeof before[0]) != 0;
        bool holds = has_id(with + i * k, k, id);
        if (changed != holds)
            fail_msg("key %zu: changed %d but holds instance %u: %d", i,
                     changed, id, holds);
        moved += changed;
    }
    return moved;
}

static void
check_share(const char *what, size_t moved, uint32_t n, uint32_t k)
{
    /* Each of n + 1 instances holds about 1/(n + 1) of the arc, and k
     * walks each meet the one that came or went, so about k/(n + 1) of
     * the keys move. With 160 vnodes one instance's arc varies by about
     * 8 %, and 20000 keys add about 3 %: 0.5x..1.6x cannot flake, while a
     * ring that rehashes everything (moving ~all keys) or never moves
     * anything fails it. */
    double expect = (double)MOVE_KEYS * k / (n + 1);
    double ratio = (double)moved / expect;
    print_message("# %s n=%u k=%u: %zu keys moved, %.3fx of k/(n+1)\n", what, n,
                  k, moved, ratio);
    assert_true(ratio >= 0.5 && ratio <= 1.6);
}

static void
movement(uint32_t n, uint32_t k, uint64_t *seed)
{
    uint64_t *keys = malloc(MOVE_KEYS * sizeof *keys);
    uint32_t *c0 = malloc(MOVE_KEYS * k * sizeof *c0);
    uint32_t *c1 = malloc(MOVE_KEYS * k * sizeof *c1);
    uint32_t *c2 = malloc(MOVE_KEYS * k * sizeof *c2);
    assert_true(keys && c0 && c1 && c2);
    for (size_t i = 0; i < MOVE_KEYS; i++)
        keys[i] = tu_rand(seed);

    lr_ring *r = new_ring(NULL, 0, 0);
    add_named(r, "10.1.0", 0, n, 0);
    uint64_t d0 = lr__ring_digest(r);
    all_candidates(r, keys, k, c0);

    /* add: only keys that now list the newcomer change */
    assert_int_equal(lr_ring_add(r, "10.1.9.99:8000", 777), LR_OK);
    all_candidates(r, keys, k, c1);
    check_share("add", count_moved(c0, c1, c1, k, 777), n, k);

    /* remove: only keys that listed the leaver change */
    uint32_t gone = n / 3;
    assert_int_equal(lr_ring_remove(r, gone), LR_OK);
    all_candidates(r, keys, k, c2);
    check_share("remove", count_moved(c1, c2, c1, k, gone), n, k);

    /* taking the newcomer off again and putting `gone` back restores the
     * first ring exactly */
    assert_int_equal(lr_ring_remove(r, 777), LR_OK);
    add_named(r, "10.1.0", gone, 1, 0);
    assert_int_equal(lr__ring_digest(r), d0);
    all_candidates(r, keys, k, c1);
    assert_memory_equal(c0, c1, MOVE_KEYS * k * sizeof c0[0]);

    lr_ring_destroy(r);
    free(keys);
    free(c0);
    free(c1);
    free(c2);
}

static void
test_movement(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("movement", 17);
    static const uint32_t ns[] = { 16, 64 };
    static const uint32_t ks[] = { 1, 2, 3 };
    for (size_t a = 0; a < 2; a++) {
        for (size_t b = 0; b < 3; b++)
            movement(ns[a], ks[b], &seed);
    }
}

static void
test_balance(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("balance", 19);
    enum {
        N = 64,
        KEYS = 128000
    };
    lr_ring *r = new_ring(NULL, 160, 0);
    add_named(r, "10.2.0", 0, N, 0);
    size_t first[N] = { 0 };
    size_t any[N] = { 0 };
    for (int q = 0; q < KEYS; q++) {
        uint32_t out[2];
        uint32_t n;
        assert_int_equal(lr_ring_candidates(r, tu_rand(&seed), 2, out, &n),
                         LR_OK);
        first[out[0]]++;
        any[out[0]]++;
        any[out[1]]++;
    }
    /* With 160 vnodes an instance's share varies by about 1/sqrt(160),
     * 8 %; the extremes of 64 instances reach about 2.5 sigma, 20 %.
     * 0.65..1.35 leaves margin yet fails a ring without vnodes (one point
     * per instance spreads shares over 0..4x). */
    double lo = 2.0;
    double hi = 0.0;
    for (int i = 0; i < N; i++) {
        double f = (double)first[i] * N / KEYS;
        double a = (double)any[i] * N / (2.0 * KEYS);
        lo = f < lo ? f : lo;
        hi = f > hi ? f : hi;
        assert_true(f >= 0.65 && f <= 1.35);
        assert_true(a >= 0.65 && a <= 1.35);
    }
    print_message("# balance: first-candidate share %.3f..%.3f of 1/64\n", lo,
                  hi);
    lr_ring_destroy(r);
}

/* Regression: with per-vnode seeds (the first formula), XXH3's linear use
 * of the seed on short inputs made three-byte names sharing their first two
 * bytes ("vm1".."vm8") share nearly all vnode positions, and one instance
 * took ~90% of the keys. With the index in the hashed bytes every short
 * name gets its own positions and a fair share. */
static void
test_short_names_balance(void **state)
{
    (void)state;
    static const char *sets[3][8] = {
        { "vm1", "vm2", "vm3", "vm4", "vm5", "vm6", "vm7", "vm8" },
        { "n01", "n02", "n03", "n04", "n05", "n06", "n07", "n08" },
        { "a", "b", "c", "d", "e", "f", "g", "h" },
    };
    for (int set = 0; set < 3; set++) {
        lr_ring *r = new_ring(NULL, 160, 0);
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(lr_ring_add(r, sets[set][i], i), LR_OK);
        uint64_t seed = 23;
        size_t first[8] = { 0 };
        for (int q = 0; q < 40000; q++) {
            uint32_t out[1];
            uint32_t n;
            assert_int_equal(lr_ring_candidates(r, tu_rand(&seed), 1, out, &n),
                             LR_OK);
            first[out[0]]++;
        }
        lr_ring_destroy(r);
        for (int i = 0; i < 8; i++) {
            double share = (double)first[i] / 40000.0;
            if (share < 0.125 * 0.7 || share > 0.125 * 1.3)
                fail_msg("set %d: \"%s\" takes %.1f%% of keys (fair 12.5%%)",
                         set, sets[set][i], 100.0 * share);
        }
    }
}

/* ---- bulk build (lr__ring_add_many) ------------------------------------ */

/* Same instances, same ring: digest, verifier and the candidates of many
 * keys agree between a ring built one by one and one built in bulk. */
static void
assert_same_ring(const lr_ring *a, const lr_ring *b, uint64_t *seed)
{
    assert_verified(a);
    assert_verified(b);
    assert_int_equal(lr_ring_count(a), lr_ring_count(b));
    assert_int_equal(lr__ring_digest(a), lr__ring_digest(b));
    if (lr_ring_count(a) == 0)
        return;
    for (int q = 0; q < 2000; q++) {
        uint64_t key = tu_rand(seed);
        uint32_t k = 1 + (uint32_t)tu_below(seed, LR_RING_MAX_K);
        uint32_t oa[LR_RING_MAX_K];
        uint32_t ob[LR_RING_MAX_K];
        uint32_t na;
        uint32_t nb;
        assert_int_equal(lr_ring_candidates(a, key, k, oa, &na), LR_OK);
        assert_int_equal(lr_ring_candidates(b, key, k, ob, &nb), LR_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(oa, ob, na * sizeof oa[0]);
    }
}

static void
shuffle_u32(uint32_t *a, uint32_t n, uint64_t *seed)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)tu_below(seed, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* The bulk build gives the ring that one-by-one adds give, in any order:
 * into an empty ring, in two batches, and onto a ring already holding
 * part of the set; and the result takes later adds and removals like any
 * other ring. */
static void
test_bulk_matches_adds(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("bulk_matches_adds", 29);
    static const struct {
        uint32_t vnodes, n;
    } cfgs[] = { { 1, 1 },   { 1, 300 },   { 16, 5 },  { 16, 700 },
                 { 160, 1 }, { 160, 200 }, { 4096, 3 } };
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        uint32_t vn = cfgs[c].vnodes;
        uint32_t n = cfgs[c].n;
        char(*nb)[32] = malloc(n * sizeof *nb);
        const char **names = malloc(n * sizeof *names);
        uint32_t *ids = malloc(n * sizeof *ids);
        uint32_t *order = malloc(n * sizeof *order);
        assert_true(nb && names && ids && order);
        for (uint32_t i = 0; i < n; i++)
            order[i] = i;

        /* one by one, in a random order */
        lr_ring *one = new_ring(NULL, vn, n);
        shuffle_u32(order, n, &seed);
        for (uint32_t i = 0; i < n; i++) {
            ip_name(nb[i], sizeof nb[i], order[i]);
            assert_int_equal(lr_ring_add(one, nb[i], 7 * order[i]), LR_OK);
        }

        /* all at once, in another order */
        shuffle_u32(order, n, &seed);
        for (uint32_t i = 0; i < n; i++) {
            ip_name(nb[i], sizeof nb[i], order[i]);
            names[i] = nb[i];
            ids[i] = 7 * order[i];
        }
        lr_ring *all = new_ring(NULL, vn, n);
        assert_int_equal(lr__ring_add_many(all, names, ids, n), LR_OK);
        assert_same_ring(one, all, &seed);

        /* two batches, then a third of them added one by one before a
         * batch of the rest */
        uint32_t half = n / 2;
        lr_ring *two = new_ring(NULL, vn, n);
        assert_int_equal(lr__ring_add_many(two, names, ids, half), LR_OK);
        assert_verified(two);
        assert_int_equal(
            lr__ring_add_many(two, names + half, ids + half, n - half), LR_OK);
        assert_same_ring(one, two, &seed);
        lr_ring *mix = new_ring(NULL, vn, n);
        uint32_t third = n / 3;
        for (uint32_t i = 0; i < third; i++)
            assert_int_equal(lr_ring_add(mix, names[i], ids[i]), LR_OK);
        assert_int_equal(
            lr__ring_add_many(mix, names + third, ids + third, n - third),
            LR_OK);
        assert_same_ring(one, mix, &seed);

        /* churn on both sides keeps them equal */
        for (uint32_t i = 0; i < n && i < 40; i++) {
            assert_int_equal(lr_ring_remove(one, ids[i]), LR_OK);
            assert_int_equal(lr_ring_remove(all, ids[i]), LR_OK);
        }
        assert_same_ring(one, all, &seed);
        for (uint32_t i = 0; i < n && i < 20; i++) {
            assert_int_equal(lr_ring_add(one, names[i], ids[i]), LR_OK);
            assert_int_equal(lr_ring_add(all, names[i], ids[i]), LR_OK);
        }
        assert_same_ring(one, all, &seed);

        lr_ring_destroy(one);
        lr_ring_destroy(all);
        lr_ring_destroy(two);
        lr_ring_destroy(mix);
        free(nb);
        free(names);
        free(ids);
        free(order);
    }
}

/* Explicit positions from a pool of four: long runs of ties, ordered by
 * name, across leaf and bucket boundaries, must come out as the one by
 * one adds order them. */
static void
test_bulk_ties(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("bulk_ties", 31);
    enum {
        N = 48,
        VN = 40
    };
    static const uint64_t pool[4] = { 5, 1ull << 40, 1ull << 63, UINT64_MAX };
    static uint64_t pos[N * VN];
    static char nb[N][16];
    const char *names[N];
    uint32_t ids[N];
    for (uint32_t i = 0; i < N; i++) {
        /* prefixes and high bytes, so ties compare whole names */
        snprintf(nb[i], sizeof nb[i], "%s%u", i % 3 == 0 ? "\xc3" : "a",
                 i * 37 % 101);
        names[i] = nb[i];
        ids[i] = 1000 + i;
        for (uint32_t v = 0; v < VN; v++)
            pos[i * VN + v] = tu_below(&seed, 3) == 0
                                  ? tu_rand(&seed)
                                  : pool[tu_below(&seed, 4)];
    }
    lr_ring *one = new_ring(NULL, VN, N);
    uint32_t order[N];
    for (uint32_t i = 0; i < N; i++)
        order[i] = i;
    shuffle_u32(order, N, &seed);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t o = order[i];
        assert_int_equal(lr__ring_add_at(one, names[o], ids[o], pos + o * VN),
                         LR_OK);
    }
    lr_ring *all = new_ring(NULL, VN, N);
    assert_int_equal(lr__ring_add_many_at(all, names, ids, N, pos), LR_OK);
    assert_same_ring(one, all, &seed);
    lr_ring *two = new_ring(NULL, VN, N);
    assert_int_equal(lr__ring_add_many_at(two, names + N / 2, ids + N / 2,
                                          N - N / 2, pos + (N / 2) * VN),
                     LR_OK);
    assert_int_equal(lr__ring_add_many_at(two, names, ids, N / 2, pos), LR_OK);
    assert_same_ring(one, two, &seed);
    lr_ring_destroy(one);
    lr_ring_destroy(all);
    lr_ring_destroy(two);
}

/* Refusals change nothing: not the digest, not the count, not the bytes
 * held beyond what uthash may keep from a grown table. */
static void
test_bulk_bad(void **state)
{
    (void)state;
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_ring *r = new_ring(&t, 8, 6);
    add_named(r, "b", 0, 2, 0); /* b-0 -> 0, b-1 -> 1 */
    uint64_t d = lr__ring_digest(r);
    const char *names[4] = { "n0", "n1", "n2", "n3" };
    uint32_t ids[4] = { 10, 11, 12, 13 };

    assert_int_equal(lr__ring_add_many(NULL, names, ids, 1), LR_EINVAL);
    assert_int_equal(lr__ring_add_many(r, NULL, ids, 1), LR_EINVAL);
    assert_int_equal(lr__ring_add_many(r, names, NULL, 1), LR_EINVAL);
    assert_int_equal(lr__ring_add_many(r, NULL, NULL, 0), LR_OK);
    const char *bad_name[3] = { "ok", "", "ok2" };
    assert_int_equal(lr__ring_add_many(r, bad_name, ids, 3), LR_EINVAL);
    bad_name[1] = NULL;
    assert_int_equal(lr__ring_add_many(r, bad_name, ids, 3), LR_EINVAL);
    uint32_t bad_id[2] = { 10, UINT32_MAX };
    assert_int_equal(lr__ring_add_many(r, names, bad_id, 2), LR_EINVAL);
    /* EINVAL before ELIMIT, ELIMIT before EEXIST */
    const char *five[5] = { "a", "b", "c", "", "e" };
    uint32_t five_ids[5] = { 20, 21, 22, 23, 24 };
    assert_int_equal(lr__ring_add_many(r, five, five_ids, 5), LR_EINVAL);
    five[3] = "b-0";
    assert_int_equal(lr__ring_add_many(r, five, five_ids, 5), LR_ELIMIT);
    /* EEXIST: a placed name, a placed id, a name or an id twice */
    const char *dup_name[3] = { "x", "b-1", "y" };
    assert_int_equal(lr__ring_add_many(r, dup_name, ids, 3), LR_EEXIST);
    uint32_t dup_id[3] = { 10, 11, 1 };
    assert_int_equal(lr__ring_add_many(r, names, dup_id, 3), LR_EEXIST);
    const char *twice[3] = { "x", "y", "x" };
    assert_int_equal(lr__ring_add_many(r, twice, ids, 3), LR_EEXIST);
    uint32_t twice_id[3] = { 10, 11, 10 };
    assert_int_equal(lr__ring_add_many(r, names, twice_id, 3), LR_EEXIST);

    assert_int_equal(lr__ring_digest(r), d);
    assert_int_equal(lr_ring_count(r), 2);
    for (int i = 0; i < 4; i++)
        assert_false(lr_ring_contains(r, ids[i]));
    assert_int_equal(lr__ring_mem_live(r), t.live_bytes);
    assert_verified(r);

    /* and the good batch goes in, up to the limit exactly */
    assert_int_equal(lr__ring_add_many(r, names, ids, 4), LR_OK);
    assert_int_equal(lr_ring_count(r), 6);
    assert_verified(r);
    lr_ring *ref = new_ring(NULL, 8, 6);
    add_named(ref, "b", 0, 2, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(lr_ring_add(ref, names[i], ids[i]), LR_OK);
    assert_int_equal(lr__ring_digest(r), lr__ring_digest(ref));
    lr_ring_destroy(ref);
    lr_ring_destroy(r);
    assert_int_equal(t.live_bytes, 0);
}

/* ---- churn cost: nothing O(leaves) per add ------------------------------- */

/* Work per add and per removal must not grow with the ring. Counted, not
 * timed (lr__ring_work: entries moved, table slots written, leaves
 * stepped over), so the test is deterministic. Each window doubles the
 * ring, so each holds about one table rebuild (the leaf count doubles
 * too) and compares like with like. Rebuilding the whole table on
 * every add, as 0.2's first leaves did (with an array of every leaf
 * besides), makes the 8k..16k window cost 6.3x the 1k..2k one per add
 * (checked by forcing it); bounded work stays within a few percent. */
static void
test_churn_cost_flat(void **state)
{
    (void)state;
    enum {
        VN = 16,
        BIG = 16384
    };
    lr_ring *r = new_ring(NULL, VN, BIG);
    char name[32];
    uint64_t *w = malloc((BIG + 1) * sizeof *w);
    assert_non_null(w);
    w[0] = lr__ring_work(r);
    for (uint32_t i = 0; i < BIG; i++) {
        ip_name(name, sizeof name, i);
        assert_int_equal(lr_ring_add(r, name, i), LR_OK);
        w[i + 1] = lr__ring_work(r);
    }
    assert_verified(r);
    double small = (double)(w[2048] - w[1024]) / 1024.0;
    double big = (double)(w[16384] - w[8192]) / 8192.0;
    print_message("# work per add: %.1f at 1k..2k, %.1f at 8k..16k (%.2fx)\n",
                  small, big, big / small);
    assert_true(big <= 1.3 * small);
    /* and no single add pays for the whole ring but the few that
     * rebuild the table (about one per doubling) */
    unsigned heavy = 0;
    for (uint32_t i = 1024; i < BIG; i++)
        heavy += w[i + 1] - w[i] > 4 * small;
    assert_true(heavy <= 8);
    free(w);

    /* removals: 1024 from a ring of 2048, and from the 16k ring */
    lr_ring *s = new_ring(NULL, VN, BIG);
    for (uint32_t i = 0; i < 2048; i++) {
        ip_name(name, sizeof name, i);
        assert_int_equal(lr_ring_add(s, name, i), LR_OK);
    }
    uint64_t s0 = lr__ring_work(s);
    uint64_t r0 = lr__ring_work(r);
    for (uint32_t i = 0; i < 1024; i++) {
        uint32_t id = i * 2 + 1;
        assert_int_equal(lr_ring_remove(s, id), LR_OK);
        assert_int_equal(lr_ring_remove(r, id * 8), LR_OK);
    }
    double rm_small = (double)(lr__ring_work(s) - s0) / 1024.0;
    double rm_big = (double)(lr__ring_work(r) - r0) / 1024.0;
    print_message("# work per removal: %.1f at 2k, %.1f at 16k (%.2fx)\n",
                  rm_small, rm_big, rm_big / rm_small);
    assert_true(rm_big <= 1.3 * rm_small);
    assert_verified(r);
    assert_verified(s);
    lr_ring_destroy(s);
    lr_ring_destroy(r);
}

/* ---- OOM loops (B33) --------------------------------------------------- */

static bool
oom_create(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    lr_ring_options o;
    lr_ring_options_init(&o);
    o.allocator = &t->a;
    lr_ring *r = (lr_ring *)&o;
    lr_status st = lr_ring_create(&o, &r);
    if (st == LR_ENOMEM) {
        assert_null(r);
        return false;
    }
    assert_int_equal(st, LR_OK);
    lr_ring_destroy(r);
    return !t->failed;
}

static void
test_oom_create(void **state)
{
    (void)state;
    tu_oom_loop(oom_create, NULL, 100);
}

enum {
    OOM_MAX_BATCH = 200
};

struct oom_add_ctx {
    uint32_t vnodes;
    uint32_t pre;   /* instances placed before failures are armed */
    uint32_t batch; /* adds under test */
    /* digest after the first i adds of the batch, from a ring built with
     * no failures: a failed add i must leave exactly want[i] */
    uint64_t want[OOM_MAX_BATCH + 1];
};

static bool
oom_add(struct tu_alloc *t, void *vctx)
{
    struct oom_add_ctx *c = vctx;
    struct tu_arming a = tu_alloc_pause(t);
    lr_ring *r = new_ring(t, c->vnodes, 0);
    add_named(r, "pre", 0, c->pre, 0);
    tu_alloc_resume(t, a);

    char name[32];
    bool complete = true;
    for (uint32_t i = 0; i < c->batch; i++) {
        snprintf(name, sizeof name, "batch-%u", i);
        lr_status st = lr_ring_add(r, name, 100000 + i);
        assert_int_equal(lr__ring_mem_live(r), t->live_bytes);
        if (st == LR_ENOMEM) {
            assert_verified(r);
            assert_int_equal(lr__ring_digest(r), c->want[i]);
            assert_false(lr_ring_contains(r, 100000 + i));
            complete = false;
            break;
        }
        assert_int_equal(st, LR_OK);
    }
    assert_verified(r);
    if (complete)
        assert_int_equal(lr__ring_digest(r), c->want[c->batch]);
    lr_ring_destroy(r);
    return complete && !t->failed;
}

static void
run_oom_add(uint32_t vnodes, uint32_t pre, uint32_t batch)
{
    static struct oom_add_ctx c;
    assert_true(batch <= OOM_MAX_BATCH);
    c.vnodes = vnodes;
    c.pre = pre;
    c.batch = batch;
    lr_ring *ref = new_ring(NULL, vnodes, 0);
    add_named(ref, "pre", 0, pre, 0);
    c.want[0] = lr__ring_digest(ref);
    for (uint32_t i = 0; i < batch; i++) {
        add_named(ref, "batch", i, 1, 100000);
        c.want[i + 1] = lr__ring_digest(ref);
    }
    lr_ring_destroy(ref);
    tu_oom_loop(oom_add, &c, 100000);
}

static void
test_oom_add(void **state)
{
    (void)state;
    /* the first add makes both uthash tables */
    run_oom_add(16, 0, 4);
    /* past the jump table's growth points */
    run_oom_add(7, 3, 12);
    /* enough names for uthash to grow its bucket arrays under failure */
    run_oom_add(1, 100, 200);
}

/* Removal allocates nothing it needs: under any failure it succeeds, and
 * the only casualty is the optional shrink (a larger block stays). The
 * jump table shrinks only once the leaf count has fallen below half of
 * what it was sized for (hysteresis), so the ring is big enough for that
 * to happen on the way down. */
enum {
    RM_N = 16
};

static uint32_t
rm_order(int i)
{
    return (uint32_t)(i * 7 + 3) % RM_N; /* a permutation of 0..15 */
}

static bool
oom_remove(struct tu_alloc *t, void *vctx)
{
    const uint64_t *want = vctx; /* digests after each removal */
    struct tu_arming a = tu_alloc_pause(t);
    lr_ring *r = new_ring(t, 50, 0);
    add_named(r, "rm", 0, RM_N, 0);
    tu_alloc_resume(t, a);
    for (int i = 0; i < RM_N; i++) {
        assert_int_equal(lr_ring_remove(r, rm_order(i)), LR_OK);
        assert_verified(r);
        assert_int_equal(lr__ring_mem_live(r), t->live_bytes);
        assert_int_equal(lr__ring_digest(r), want[i]);
    }
    lr_ring_destroy(r);
    return !t->failed;
}

static void
test_oom_remove(void **state)
{
    (void)state;
    uint64_t want[RM_N];
    for (int i = 0; i < RM_N; i++) {
        /* the reference: the survivors placed from scratch */
        lr_ring *ref = new_ring(NULL, 50, 0);
        for (uint32_t id = 0; id < RM_N; id++) {
            bool gone = false;
            for (int j = 0; j <= i; j++)
                gone = gone || rm_order(j) == id;
            if (!gone)
                add_named(ref, "rm", id, 1, 0);
        }
        want[i] = lr__ring_digest(ref);
        lr_ring_destroy(ref);
    }
    tu_oom_loop(oom_remove, want, 1000);
}

/* A bulk build under failure: all or nothing, onto an empty ring and onto
 * one already holding instances. */
struct oom_bulk_ctx {
    uint32_t pre;
    uint64_t before, after; /* digests without failures */
};

enum {
    BULK_N = 24
};

static bool
oom_bulk(struct tu_alloc *t, void *vctx)
{
    const struct oom_bulk_ctx *c = vctx;
    struct tu_arming a = tu_alloc_pause(t);
    lr_ring *r = new_ring(t, 16, 0);
    add_named(r, "pre", 0, c->pre, 0);
    tu_alloc_resume(t, a);
    static char nb[BULK_N][32];
    const char *names[BULK_N];
    uint32_t ids[BULK_N];
    for (uint32_t i = 0; i < BULK_N; i++) {
        ip_name(nb[i], sizeof nb[i], i);
        names[i] = nb[i];
        ids[i] = 100000 + i;
    }
    lr_status st = lr__ring_add_many(r, names, ids, BULK_N);
    assert_int_equal(lr__ring_mem_live(r), t->live_bytes);
    assert_verified(r);
    bool complete = st == LR_OK;
    if (complete) {
        assert_int_equal(lr__ring_digest(r), c->after);
    } else {
        assert_int_equal(st, LR_ENOMEM);
        assert_int_equal(lr__ring_digest(r), c->before);
        assert_int_equal(lr_ring_count(r), c->pre);
        for (uint32_t i = 0; i < BULK_N; i++)
            assert_false(lr_ring_contains(r, ids[i]));
    }
    lr_ring_destroy(r);
    return complete && !t->failed;
}

static void
test_oom_bulk(void **state)
{
    (void)state;
    static const uint32_t pres[2] = { 0, 5 };
    for (int i = 0; i < 2; i++) {
        struct oom_bulk_ctx c;
        c.pre = pres[i];
        lr_ring *ref = new_ring(NULL, 16, 0);
        add_named(ref, "pre", 0, c.pre, 0);
        c.before = lr__ring_digest(ref);
        char name[32];
        for (uint32_t j = 0; j < BULK_N; j++) {
            ip_name(name, sizeof name, j);
            assert_int_equal(lr_ring_add(ref, name, 100000 + j), LR_OK);
        }
        c.after = lr__ring_digest(ref);
        lr_ring_destroy(ref);
        tu_oom_loop(oom_bulk, &c, 10000);
    }
}

/* A whole life under failure: create, adds, queries, removals, re-adds.
 * Whatever fails must fail cleanly; the loop checks for leaks. */
static bool
oom_lifecycle(struct tu_alloc *t, void *ctx)
{
    (void)ctx;
    lr_ring_options o;
    lr_ring_options_init(&o);
    o.allocator = &t->a;
    o.vnodes = 24;
    o.max_instances = 6;
    lr_ring *r;
    lr_status st = lr_ring_create(&o, &r);
    if (st == LR_ENOMEM)
        return false;
    assert_int_equal(st, LR_OK);
    static const struct {
        char op;
        uint32_t id;
    } script[] = { { '+', 1 }, { '+', 2 }, { '+', 3 }, { '?', 0 }, { '-', 2 },
                   { '+', 4 }, { '+', 5 }, { '-', 1 }, { '?', 0 }, { '+', 1 },
                   { '+', 2 }, { '-', 5 }, { '-', 4 }, { '?', 0 } };
    bool complete = true;
    for (size_t i = 0; i < sizeof script / sizeof script[0]; i++) {
        uint64_t d0 = lr__ring_digest(r);
        char name[32];
        snprintf(name, sizeof name, "life-%u", script[i].id);
        if (script[i].op == '+') {
            st = lr_ring_add(r, name, script[i].id);
        } else if (script[i].op == '-') {
            st = lr_ring_remove(r, script[i].id);
            assert_int_equal(st, LR_OK);
        } else {
            uint32_t out[3];
            uint32_t n;
            st = lr_ring_candidates(r, i, 3, out, &n);
            assert_int_equal(st, LR_OK);
        }
        assert_verified(r);
        if (st == LR_ENOMEM) {
            assert_int_equal(lr__ring_digest(r), d0);
            complete = false;
            break;
        }
        assert_int_equal(st, LR_OK);
    }
    lr_ring_destroy(r);
    return complete && !t->failed;
}

static void
test_oom_lifecycle(void **state)
{
    (void)state;
    tu_oom_loop(oom_lifecycle, NULL, 1000);
}

/* Removal hands memory back: after emptying most of a ring, the bytes in
 * use fall with it. */
static void
test_remove_shrinks(void **state)
{
    (void)state;
    struct tu_alloc t;
    tu_alloc_init(&t);
    lr_ring *r = new_ring(&t, 160, 0);
    add_named(r, "s", 0, 64, 0);
    size_t full = t.live_bytes;
    for (uint32_t i = 0; i < 60; i++)
        assert_int_equal(lr_ring_remove(r, i), LR_OK);
    assert_verified(r);
    assert_true(t.live_bytes * 8 < full);
    lr_ring *ref = new_ring(NULL, 160, 0);
    add_named(ref, "s", 60, 4, 0);
    assert_int_equal(lr__ring_digest(r), lr__ring_digest(ref));
    lr_ring_destroy(ref);
    lr_ring_destroy(r);
    assert_int_equal(t.live_bytes, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_destroy),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_option_defaults),
        cmocka_unit_test(test_bad_add),
        cmocka_unit_test(test_bad_remove),
        cmocka_unit_test(test_bad_candidates),
        cmocka_unit_test(test_candidates_distinct),
        cmocka_unit_test(test_single_instance),
        cmocka_unit_test(test_insertion_order),
        cmocka_unit_test(test_ties_by_name),
        cmocka_unit_test(test_point_on_vnode),
        cmocka_unit_test(test_regress_merge_clobbered_new_vnodes),
        cmocka_unit_test(test_golden_candidates),
        cmocka_unit_test(test_differential),
        cmocka_unit_test(test_movement),
        cmocka_unit_test(test_balance),
        cmocka_unit_test(test_short_names_balance),
        cmocka_unit_test(test_remove_shrinks),
        cmocka_unit_test(test_bulk_matches_adds),
        cmocka_unit_test(test_bulk_ties),
        cmocka_unit_test(test_bulk_bad),
        cmocka_unit_test(test_churn_cost_flat),
        cmocka_unit_test(test_oom_create),
        cmocka_unit_test(test_oom_add),
        cmocka_unit_test(test_oom_remove),
        cmocka_unit_test(test_oom_bulk),
        cmocka_unit_test(test_oom_lifecycle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
