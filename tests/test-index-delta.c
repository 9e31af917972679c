/* Deltas between gateway replicas: lr_index_mark(), lr_index_export_delta()
 * and lr_index_import_delta() against the contract in lr_index.h.
 *
 * Every mutating call is followed by lr__index_verify(); every failing
 * import must leave lr__index_digest() as it was (B11).
 *
 * The malformed-blob tests rewrite fields of a valid blob and reseal it, so
 * that exactly one thing is wrong. They use the wire layout written in
 * lib/index/index_delta.c (header of 48 bytes: magic "LRDX", u16 version (3),
 * u16 flags, u32 block_tokens, u32 n_nodes, u32 n_routes, u32 reserved,
 * u64 since, u64 mark, u64 origin replica id; version 2 has no origin and
 * a header of 40; then n_nodes x {u64 key, varint parent}, n_routes x
 * {u32 instance, varint node, varint age} (version 2 has no age); then the
 * checksum XXH3_64bits_withSeed(bytes before it, "LRDELTA1") as 8 little-endian
 * bytes), with a private copy of xxHash (B25). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index-helpers.h"
#include "index/index.h"
#include "testutil.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Written out here, not taken from lib/: a change on either side fails. */
#define DELTA_SEED 0x4c5244454c544131ull /* "LRDELTA1" */
#define OFF_VERSION 4
#define OFF_BLOCK 8
#define OFF_NODES 12
#define OFF_ROUTES 16
#define OFF_SINCE 24
#define OFF_MARK 32
#define OFF_ORIGIN 40
#define HEADER 48
#define HEADER_V2 40

/* ---- helpers -------------------------------------------------------------- */

struct mkopt {
    uint64_t cap;
    uint32_t max_inst;
    uint32_t journal;
    uint32_t block;
    uint64_t seed;
    const lr_allocator *a;
    uint64_t replica;
    uint64_t remote_ttl;
};

static lr_index *
mk_with(const struct mkopt *m)
{
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.allocator = m->a;
    o.seed = m->seed ? m->seed : OPT_SEED;
    o.capacity_blocks = m->cap;
    o.max_instances = m->max_inst;
    o.journal_capacity = m->journal;
    o.block_tokens = m->block ? m->block : BT;
    o.replica_id = m->replica;
    o.remote_ttl_ns = m->remote_ttl;
    /* these cases step the host's clock by minutes between calls; the
     * clock's own rules are test-index.c's (clock_judges_every_call) */
    o.clock_skew_ns = 3600 * SEC;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    assert_non_null(ix);
    assert_verified(ix);
    return ix;
}

static lr_index *
mk(uint64_t cap)
{
    struct mkopt m = { .cap = cap };
    return mk_with(&m);
}

/* A prompt of the test: tokens and message boundaries. */
struct pr {
    uint32_t t[16 * BT];
    size_t n;
    uint32_t bnd[4];
    size_t nb;
};

/* `blocks` blocks (plus `extra` tokens) of fresh tokens after the first
 * `share` blocks of `from` (may be NULL when share is 0). */
static void
mkpr(struct pr *p, const struct pr *from, size_t share, size_t blocks,
     size_t extra, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->n = (share + blocks) * BT + extra;
    assert_true(p->n <= sizeof p->t / sizeof p->t[0]);
    if (share > 0)
        memcpy(p->t, from->t, share * BT * sizeof p->t[0]);
    toks(p->t + share * BT, blocks * BT + extra, seed);
}

static void
learn(lr_index *ix, const struct pr *p, uint32_t inst, int32_t trust,
      uint64_t now)
{
    lr_prompt q = LR_PROMPT_INIT;
    q.tokens = p->t;
    q.n_tokens = p->n;
    q.boundaries = p->bnd;
    q.n_boundaries = p->nb;
    assert_st(lr_index_learn(ix, &q, inst, trust, now), LR_OK);
    assert_verified(ix);
}

#define MAX_HITS 32

struct mres {
    lr_index_hit h[MAX_HITS];
    size_t n;
    uint64_t deepest;
};

static struct mres
match_tokens(lr_index *ix, const uint32_t *t, size_t n)
{
    struct mres m;
    memset(&m, 0, sizeof m);
    lr_prompt q = LR_PROMPT_INIT;
    q.tokens = t;
    q.n_tokens = n;
    lr_index_match_result r = LR_INDEX_MATCH_RESULT_INIT;
    r.hits = m.h;
    r.hits_capacity = MAX_HITS;
    assert_st(lr_index_match(ix, &q, T(1), LR_MATCH_NO_TOUCH, &r), LR_OK);
    assert_verified(ix);
    m.n = r.n_hits;
    m.deepest = r.deepest_tokens;
    return m;
}

static struct mres
match(lr_index *ix, const struct pr *p)
{
    return match_tokens(ix, p->t, p->n);
}

/* Tokens of the prompt `inst` holds, 0 when not reported. */
static uint32_t
held(lr_index *ix, const struct pr *p, uint32_t inst)
{
    struct mres m = match(ix, p);
    for (size_t i = 0; i < m.n; i++)
        if (m.h[i].instance == inst)
            return m.h[i].tokens;
    return 0;
}

static void
assert_same_match(lr_index *a, lr_index *b, const uint32_t *t, size_t n)
{
    struct mres x = match_tokens(a, t, n), y = match_tokens(b, t, n);
    if (x.n != y.n)
        fail_msg("%zu hits vs %zu hits", x.n, y.n);
    for (size_t i = 0; i < x.n; i++)
        if (x.h[i].instance != y.h[i].instance ||
            x.h[i].tokens != y.h[i].tokens)
            fail_msg("hit %zu: (inst %u, %u tokens) vs (inst %u, %u tokens)", i,
                     x.h[i].instance, x.h[i].tokens, y.h[i].instance,
                     y.h[i].tokens);
    assert_int_equal(x.deepest, y.deepest);
}

/* Export; the index must not change. Returns the blob. */
static lr_blob *
export_since(const lr_index *ix, uint64_t since, uint64_t *mark_out)
{
    uint64_t before = lr__index_digest(ix);
    lr_blob *b = NULL;
    assert_st(lr_index_export_delta(ix, since, &b, mark_out), LR_OK);
    assert_non_null(b);
    assert_true(lr__index_digest(ix) == before);
    assert_verified(ix);
    return b;
}

static lr_status
import(lr_index *ix, const uint8_t *buf, size_t len, uint64_t now)
{
    uint64_t before = lr__index_digest(ix);
    return checked(ix, "import", before,
                   lr_index_import_delta(ix, buf, len, now));
}

static lr_status
import_blob(lr_index *ix, const lr_blob *b, uint64_t now)
{
    return import(ix, lr_blob_data(b), lr_blob_size(b), now);
}

static uint32_t
get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void
put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void
put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void
put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t
blob_routes(const lr_blob *b)
{
    assert_true(lr_blob_size(b) >= HEADER + 8);
    return get32(lr_blob_data(b) + OFF_ROUTES);
}

static uint32_t
blob_nodes(const lr_blob *b)
{
    return get32(lr_blob_data(b) + OFF_NODES);
}

/* Recompute the checksum after an edit. */
static void
reseal(uint8_t *buf, size_t len)
{
    put64(buf + len - 8, XXH3_64bits_withSeed(buf, len - 8, DELTA_SEED));
}

/* The blob's node and route tables, with where each field sits. */
#define PMAX 512
struct parsed {
    uint32_t nn, nr;
    uint64_t key[PMAX];
    uint32_t par[PMAX]; /* UINT32_MAX: a root block */
    size_t koff[PMAX], poff[PMAX], poff_len[PMAX];
    uint32_t rinst[PMAX], rnode[PMAX];
    size_t roff[PMAX], roff_len[PMAX];
};

static uint32_t
varint(const uint8_t *buf, size_t *off, size_t *len)
{
    uint32_t v = 0;
    size_t start = *off;
    for (int i = 0; i < 5; i++) {
        uint8_t b = buf[(*off)++];
        v |= (uint32_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80))
            break;
    }
    *len = *off - start;
    return v;
}

static void
parse(const uint8_t *buf, size_t len, struct parsed *p)
{
    memset(p, 0, sizeof *p);
    p->nn = get32(buf + OFF_NODES);
    p->nr = get32(buf + OFF_ROUTES);
    assert_true(p->nn <= PMAX && p->nr <= PMAX);
    size_t off = HEADER;
    for (uint32_t i = 0; i < p->nn; i++) {
        p->koff[i] = off;
        p->key[i] = 0;
        for (int b = 0; b < 8; b++)
            p->key[i] |= (uint64_t)buf[off + (size_t)b] << (8 * b);
        off += 8;
        p->poff[i] = off;
        uint32_t v = varint(buf, &off, &p->poff_len[i]);
        assert_true(v <= i);
        p->par[i] = v == 0 ? UINT32_MAX : v - 1;
    }
    for (uint32_t r = 0; r < p->nr; r++) {
        p->rinst[r] = get32(buf + off);
        off += 4;
        p->roff[r] = off;
        p->rnode[r] = varint(buf, &off, &p->roff_len[r]);
        assert_true(p->rnode[r] < p->nn);
        size_t age_len;
        (void)varint(buf, &off, &age_len); /* the route's age */
    }
    assert_int_equal(off + 8, len);
}

static uint32_t
find_key(const struct parsed *p, uint64_t key)
{
    for (uint32_t i = 0; i < p->nn; i++)
        if (p->key[i] == key)
            return i;
    return UINT32_MAX;
}

/* A heap copy of the blob, exactly `len` bytes, so that a read past the end
 * shows under ASan and valgrind. */
static uint8_t *
copy_of(const lr_blob *b, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, lr_blob_data(b), len < lr_blob_size(b) ? len : lr_blob_size(b));
    return p;
}

/* A few prompts with shared prefixes, boundaries and a partial last block,
 * learned LOCAL into `ix` for instances 1..3. */
#define NSET 6
static struct pr set[NSET];

static void
make_set(void)
{
    mkpr(&set[0], NULL, 0, 5, 0, 100);
    set[0].bnd[0] = 2 * BT;
    set[0].bnd[1] = 3 * BT + 4;
    set[0].nb = 2;
    mkpr(&set[1], &set[0], 3, 3, 7, 101); /* forks after block 3 */
    mkpr(&set[2], NULL, 0, 4, 0, 102);
    mkpr(&set[3], &set[2], 4, 2, 0, 103); /* extends set[2] */
    mkpr(&set[4], &set[0], 2, 6, 0, 104);
    mkpr(&set[5], NULL, 0, 1, 15, 105);
}

static const uint32_t set_inst[NSET] = { 1, 2, 1, 3, 3, 2 };

static void
learn_set(lr_index *ix, uint64_t now)
{
    for (int i = 0; i < NSET; i++)
        learn(ix, &set[i], set_inst[i], LR_TRUST_LOCAL, now + (uint64_t)i);
}

/* Probes for comparisons: each prompt, a block shorter, and with a tail. */
static void
assert_same_on_set(lr_index *a, lr_index *b)
{
    for (int i = 0; i < NSET; i++) {
        uint32_t t[20 * BT];
        size_t n = set[i].n;
        memcpy(t, set[i].t, n * sizeof t[0]);
        assert_same_match(a, b, t, n);
        assert_same_match(a, b, t, n >= BT ? n - BT : 0);
        toks(t + n, 2 * BT, 900 + (uint64_t)i);
        assert_same_match(a, b, t, n + 2 * BT);
    }
}

/* ---- round trip ------------------------------------------------------------ */

static void
test_roundtrip_full(void **state)
{
    (void)state;
    make_set();
    lr_index *a = mk(4096), *b = mk(4096);
    learn_set(a, T(1));
    lr_blob *blob = export_since(a, 0, NULL);
    assert_true(blob_routes(blob) > 0);
    assert_st(import_blob(b, blob, T(2)), LR_OK);
    assert_same_on_set(a, b);
    for (int i = 0; i < NSET; i++)
        assert_true(match(b, &set[i]).n > 0);

    lr_index_stats sa = stats(a), sb = stats(b);
    assert_int_equal(sa.remote_blocks, 0);
    assert_int_equal(sb.blocks, sa.blocks);
    assert_int_equal(sb.remote_blocks, sb.blocks);
    assert_int_equal(sb.prefixes, sa.prefixes);
    assert_int_equal(sb.instances, sa.instances);
    for (uint32_t i = 1; i <= 3; i++) {
        uint64_t x = 0, y = 0;
        assert_st(lr_index_instance_blocks(a, i, &x), LR_OK);
        assert_st(lr_index_instance_blocks(b, i, &y), LR_OK);
        assert_int_equal(x, y);
    }
    /* importing the same delta again changes no route count */
    assert_st(import_blob(b, blob, T(3)), LR_OK);
    assert_int_equal(stats(b).blocks, sa.blocks);
    assert_int_equal(stats(b).remote_blocks, sa.blocks);
    assert_same_on_set(a, b);

    /* an empty index exports a valid, empty delta */
    lr_index *e = mk(16);
    lr_blob *eb = export_since(e, 0, NULL);
    assert_int_equal(blob_routes(eb), 0);
    uint64_t d = lr__index_digest(b);
    assert_st(import_blob(b, eb, T(4)), LR_OK);
    assert_true(lr__index_digest(b) == d);

    lr_blob_destroy(eb);
    lr_blob_destroy(blob);
    lr_index_destroy(e);
    lr_index_destroy(a);
    lr_index_destroy(b);
}

/* ---- incremental export ----------------------------------------------------- */

static void
test_incremental_since_mark(void **state)
{
    (void)state;
    struct pr p1, p2, p3, p4;
    mkpr(&p1, NULL, 0, 5, 0, 200);
    mkpr(&p2, NULL, 0, 4, 0, 201);
    mkpr(&p3, NULL, 0, 3, 0, 202);
    mkpr(&p4, &p1, 2, 3, 0, 203); /* shares 2 blocks with p1 */
    lr_index *a = mk(4096);
    learn(a, &p1, 1, LR_TRUST_LOCAL, T(1));
    learn(a, &p2, 2, LR_TRUST_LOCAL, T(1));
    uint64_t m = lr_index_mark(a);
    assert_true(m > 0);
    learn(a, &p3, 1, LR_TRUST_LOCAL, T(2));
    learn(a, &p4, 3, LR_TRUST_LOCAL, T(2));
    /* REMOTE learns are not part of what A exports */
    struct pr p5;
    mkpr(&p5, NULL, 0, 2, 0, 204);
    learn(a, &p5, 4, LR_TRUST_REMOTE, T(2));
    assert_true(lr_index_mark(a) > m);

    uint64_t mark_out = 0;
    lr_blob *blob = export_since(a, m, &mark_out);
    assert_int_equal(mark_out, lr_index_mark(a));
    assert_int_equal(blob_routes(blob), 2);

    lr_index *c = mk(4096);
    assert_st(import_blob(c, blob, T(3)), LR_OK);
    assert_int_equal(held(c, &p3, 1), 3 * BT);
    assert_int_equal(held(c, &p4, 3), 5 * BT);
    /* learned before the mark: only what p4 shares */
    struct mres r1 = match(c, &p1);
    assert_int_equal(r1.n, 1);
    assert_int_equal(r1.h[0].instance, 3);
    assert_int_equal(r1.h[0].tokens, 2 * BT);
    assert_int_equal(match(c, &p2).n, 0);
    assert_int_equal(match(c, &p5).n, 0);
    assert_int_equal(stats(c).blocks, 3 + 5);

    /* nothing new since mark_out: an empty delta; a future mark: EINVAL */
    lr_blob *none = export_since(a, mark_out, NULL);
    assert_int_equal(blob_routes(none), 0);
    lr_blob *bad = NULL;
    assert_st(lr_index_export_delta(a, mark_out + 1, &bad, NULL), LR_EINVAL);
    assert_null(bad); /* nothing handed out */
    assert_st(lr_index_export_delta(NULL, 0, &bad, NULL), LR_EINVAL);
    assert_st(lr_index_export_delta(a, 0, NULL, NULL), LR_EINVAL);

    /* mark_out chains exports: what comes next is exactly the next learn */
    struct pr p6;
    mkpr(&p6, NULL, 0, 2, 0, 205);
    learn(a, &p6, 2, LR_TRUST_LOCAL, T(4));
    uint64_t m2 = 0;
    lr_blob *next = export_since(a, mark_out, &m2);
    assert_int_equal(blob_routes(next), 1);
    assert_int_equal(m2, lr_index_mark(a));
    lr_index *c2 = mk(4096);
    assert_st(import_blob(c2, next, T(5)), LR_OK);
    assert_int_equal(held(c2, &p6, 2), 2 * BT);
    assert_int_equal(stats(c2).blocks, 2);

    lr_blob_destroy(next);
    lr_blob_destroy(none);
    lr_blob_destroy(blob);
    lr_index_destroy(c2);
    lr_index_destroy(c);
    lr_index_destroy(a);
}

static void
test_journal_overflow_exports_all(void **state)
{
    (void)state;
    struct mkopt mo = { .cap = 4096, .journal = 4 };
    lr_index *a = mk_with(&mo);
    struct pr p[10];
    uint64_t marks[11];
    for (int i = 0; i < 10; i++) {
        mkpr(&p[i], NULL, 0, 2 + (size_t)i % 3, 0, 300 + (uint64_t)i);
        marks[i] = lr_index_mark(a);
        learn(a, &p[i], 1 + (uint32_t)i % 4, LR_TRUST_LOCAL, T(1 + i));
    }
    marks[10] = lr_index_mark(a);

    /* a mark the journal no longer reaches: every LOCAL route */
    lr_blob *full = export_since(a, marks[2], NULL);
    lr_index *c = mk(4096);
    assert_st(import_blob(c, full, T(20)), LR_OK);
    for (int i = 0; i < 10; i++)
        assert_int_equal(held(c, &p[i], 1 + (uint32_t)i % 4), p[i].n);
    assert_int_equal(stats(c).blocks, stats(a).blocks);

    /* a mark it still reaches: just the learns since */
    lr_blob *part = export_since(a, marks[7], NULL);
    assert_int_equal(blob_routes(part), 3);
    lr_index *d = mk(4096);
    assert_st(import_blob(d, part, T(20)), LR_OK);
    for (int i = 0; i < 10; i++)
        assert_int_equal(held(d, &p[i], 1 + (uint32_t)i % 4),
                         i >= 7 ? p[i].n : 0);

    /* journal disabled: every export is full, the mark still moves */
    struct mkopt mo2 = { .cap = 4096, .journal = UINT32_MAX };
    lr_index *e = mk_with(&mo2);
    for (int i = 0; i < 3; i++)
        learn(e, &p[i], 1, LR_TRUST_LOCAL, T(1));
    uint64_t m = lr_index_mark(e);
    learn(e, &p[3], 1, LR_TRUST_LOCAL, T(2));
    lr_blob *all = export_since(e, m, NULL);
    lr_index *f = mk(4096);
    assert_st(import_blob(f, all, T(3)), LR_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(held(f, &p[i], 1), p[i].n);

    lr_blob_destroy(all);
    lr_blob_destroy(part);
    lr_blob_destroy(full);
    lr_index_destroy(f);
    lr_index_destroy(e);
    lr_index_destroy(d);
    lr_index_destroy(c);
    lr_index_destroy(a);
}

/* ---- no echo; LOCAL stays LOCAL ------------------------------------------- */

static void
test_no_gossip_echo(void **state)
{
    (void)state;
    make_set();
    lr_index *a = mk(4096), *b = mk(4096);
    learn_set(a, T(1));
    lr_blob *blob = export_since(a, 0, NULL);
    uint64_t mb = lr_index_mark(b);
    assert_st(import_blob(b, blob, T(2)), LR_OK);
    assert_int_equal(lr_index_mark(b), mb);

    lr_blob *echo = export_since(b, 0, NULL);
    assert_int_equal(blob_routes(echo), 0);
    lr_index *c = mk(4096);
    assert_st(import_blob(c, echo, T(3)), LR_OK);
    assert_int_equal(stats(c).blocks, 0);
    lr_blob *echo2 = export_since(b, mb, NULL);
    assert_int_equal(blob_routes(echo2), 0);

    /* a REMOTE learn is not exported either */
    struct pr r;
    mkpr(&r, NULL, 0, 3, 0, 400);
    learn(b, &r, 9, LR_TRUST_REMOTE, T(4));
    lr_blob *echo3 = export_since(b, 0, NULL);
    assert_int_equal(blob_routes(echo3), 0);

    /* a LOCAL learn is, and alone */
    struct pr q;
    mkpr(&q, NULL, 0, 2, 0, 401);
    learn(b, &q, 5, LR_TRUST_LOCAL, T(5));
    lr_blob *own = export_since(b, 0, NULL);
    assert_int_equal(blob_routes(own), 1);
    lr_index *d = mk(4096);
    assert_st(import_blob(d, own, T(6)), LR_OK);
    assert_int_equal(held(d, &q, 5), 2 * BT);
    assert_int_equal(stats(d).blocks, 2);

    lr_blob *mine = export_since(b, mb, NULL);
    assert_int_equal(blob_routes(mine), 1);

    lr_blob_destroy(mine);
    lr_blob_destroy(own);
    lr_blob_destroy(echo3);
    lr_blob_destroy(echo2);
    lr_blob_destroy(echo);
    lr_blob_destroy(blob);
    lr_index_destroy(d);
    lr_index_destroy(c);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

static void
test_local_stays_local(void **state)
{
    (void)state;
    struct pr p, pl;
    mkpr(&p, NULL, 0, 4, 0, 500);
    mkpr(&pl, &p, 4, 2, 0, 501); /* p plus two blocks */
    lr_index *a = mk(4096), *b = mk(4096);
    learn(a, &p, 1, LR_TRUST_LOCAL, T(1));
    learn(b, &p, 1, LR_TRUST_LOCAL, T(1));
    lr_blob *same = export_since(a, 0, NULL);
    assert_st(import_blob(b, same, T(2)), LR_OK);
    assert_int_equal(stats(b).remote_blocks, 0);
    assert_int_equal(stats(b).blocks, 4);

    /* a longer route: only the new blocks are REMOTE */
    learn(a, &pl, 1, LR_TRUST_LOCAL, T(3));
    lr_blob *longer = export_since(a, 0, NULL);
    assert_st(import_blob(b, longer, T(4)), LR_OK);
    assert_int_equal(stats(b).blocks, 6);
    assert_int_equal(stats(b).remote_blocks, 2);
    assert_int_equal(held(b, &pl, 1), 6 * BT);

    /* B's own export still carries p (LOCAL), not the REMOTE extension */
    lr_blob *mine = export_since(b, 0, NULL);
    lr_index *c = mk(4096);
    assert_st(import_blob(c, mine, T(5)), LR_OK);
    assert_int_equal(held(c, &pl, 1), 4 * BT);
    assert_int_equal(stats(c).blocks, 4);

    /* a LOCAL learn of the extension upgrades it */
    learn(b, &pl, 1, LR_TRUST_LOCAL, T(6));
    assert_int_equal(stats(b).remote_blocks, 0);
    lr_blob_destroy(mine);
    lr_blob_destroy(longer);
    lr_blob_destroy(same);
    lr_index_destroy(c);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

/* KV-event routes are LOCAL: they upgrade imported REMOTE routes. */
static void
test_kv_routes_are_local(void **state)
{
    (void)state;
    struct pr p;
    mkpr(&p, NULL, 0, 3, 0, 550);
    lr_index *a = mk(4096), *b = mk(4096);
    learn(a, &p, 1, LR_TRUST_LOCAL, T(1));
    lr_blob *blob = export_since(a, 0, NULL);
    assert_st(import_blob(b, blob, T(2)), LR_OK);
    assert_int_equal(stats(b).remote_blocks, 3);
    const uint64_t h[3] = { 7, 8, 9 };
    lr_kv_stored ev = LR_KV_STORED_INIT;
    ev.block_hashes = h;
    ev.n_blocks = 3;
    ev.block_size = BT;
    ev.token_ids = p.t;
    ev.n_tokens = 3 * BT;
    assert_st(lr_index_kv_stored(b, 1, &ev, T(3)), LR_OK);
    assert_verified(b);
    assert_int_equal(stats(b).remote_blocks, 0);
    assert_int_equal(stats(b).blocks, 3);
    lr_blob *mine = export_since(b, 0, NULL);
    assert_true(blob_routes(mine) >= 1);
    lr_index *c = mk(4096);
    assert_st(import_blob(c, mine, T(4)), LR_OK);
    assert_int_equal(held(c, &p, 1), 3 * BT);
    lr_blob_destroy(mine);
    lr_blob_destroy(blob);
    lr_index_destroy(c);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

/* ---- eviction prefers REMOTE --------------------------------------------- */

static void
test_import_evicts_remote_first(void **state)
{
    (void)state;
    struct pr loc[4], rem[4];
    lr_index *a = mk(4096), *b = mk(20);
    for (int i = 0; i < 4; i++) {
        mkpr(&loc[i], NULL, 0, 4, 0, 600 + (uint64_t)i);
        mkpr(&rem[i], NULL, 0, 4, 0, 700 + (uint64_t)i);
        /* B's LOCAL routes are older than anything imported */
        learn(b, &loc[i], 1 + (uint32_t)i, LR_TRUST_LOCAL, T(1 + i));
        learn(a, &rem[i], 1 + (uint32_t)i, LR_TRUST_LOCAL, T(50 + i));
    }
    assert_int_equal(stats(b).blocks, 16);
    lr_blob *blob = export_since(a, 0, NULL);
    assert_st(import_blob(b, blob, T(100)), LR_OK);
    lr_index_stats s = stats(b);
    assert_true(s.blocks <= 20);
    assert_int_equal(s.blocks, 20);
    assert_int_equal(s.remote_blocks, 4);
    assert_int_equal(s.evicted_blocks, 12);
    for (int i = 0; i < 4; i++)
        assert_int_equal(held(b, &loc[i], 1 + (uint32_t)i), 4 * BT);

    /* a LOCAL learn under pressure still evicts REMOTE first */
    struct pr more;
    mkpr(&more, NULL, 0, 3, 0, 800);
    learn(b, &more, 9, LR_TRUST_LOCAL, T(101));
    s = stats(b);
    assert_true(s.blocks <= 20);
    assert_int_equal(s.remote_blocks, 0); /* the last REMOTE chain went */
    assert_int_equal(s.blocks, 19);
    assert_int_equal(held(b, &more, 9), 3 * BT);
    for (int i = 0; i < 4; i++)
        assert_int_equal(held(b, &loc[i], 1 + (uint32_t)i), 4 * BT);
    lr_blob_destroy(blob);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

/* The exporter's message ends stay anchors on the importer: evicting the
 * tail of an imported prompt trims it back to its last message end. */
static void
test_import_keeps_message_ends(void **state)
{
    (void)state;
    struct pr p;
    mkpr(&p, NULL, 0, 6, 0, 650);
    p.bnd[0] = 4 * BT; /* a message ends after block 4 */
    p.nb = 1;
    /* B holds one LOCAL block and room for six: the six imported routes
     * force an eviction. (The delta itself must not exceed capacity_blocks:
     * lr_index_import_delta() currently refuses that with LR_ELIMIT.) */
    struct pr q;
    mkpr(&q, NULL, 0, 1, 0, 651);
    lr_index *a = mk(4096), *b = mk(6);
    learn(b, &q, 2, LR_TRUST_LOCAL, T(1));
    learn(a, &p, 1, LR_TRUST_LOCAL, T(1));
    lr_blob *blob = export_since(a, 0, NULL);
    assert_int_equal(blob_routes(blob), 2);
    assert_st(import_blob(b, blob, T(2)), LR_OK);
    lr_index_stats s = stats(b);
    assert_int_equal(s.blocks, 1 + 4);
    assert_int_equal(s.evicted_blocks, 2);
    assert_int_equal(held(b, &p, 1), 4 * BT);
    assert_int_equal(held(b, &q, 2), 1 * BT);
    lr_blob_destroy(blob);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

/* A delta names its exporter; the exporter ignores its own echo; a
 * version-2 delta (key format 2, no origin, no ages) imports as the same
 * routes. */
static void
test_origin_echo_and_v2(void **state)
{
    (void)state;
    struct pr p;
    mkpr(&p, NULL, 0, 5, 0, 700);
    struct mkopt ma = { .cap = 4096, .replica = 0x1234567890abcdefull };
    lr_index *a = mk_with(&ma);
    learn(a, &p, 3, LR_TRUST_LOCAL, T(1));
    uint64_t mark = 0;
    lr_blob *blob = export_since(a, 0, &mark);
    const uint8_t *good = lr_blob_data(blob);
    size_t len = lr_blob_size(blob);
    assert_int_equal(good[OFF_VERSION], 3);
    assert_true(get64(good + OFF_ORIGIN) == ma.replica);
    assert_true(get64(good + OFF_MARK) == mark);
    assert_true(get64(good + OFF_SINCE) == 0);

    /* the exporter's own delta, back from the bus: nothing changes */
    uint64_t da = lr__index_digest(a);
    assert_st(import_blob(a, blob, T(2)), LR_OK);
    assert_true(lr__index_digest(a) == da);

    /* a peer takes it as REMOTE */
    lr_index *b = mk(4096);
    assert_st(import_blob(b, blob, T(2)), LR_OK);
    assert_int_equal(held(b, &p, 3), 5 * BT);
    assert_int_equal(stats(b).remote_blocks, 5);

    /* the same routes written as version 2: no origin, no ages
     * (every age here is 0: a one-byte varint after each route) */
    struct parsed pb;
    parse(good, len, &pb);
    uint8_t *v1 = malloc(len);
    assert_non_null(v1);
    memcpy(v1, good, HEADER_V2);
    size_t n1 = HEADER_V2, from = HEADER;
    for (uint32_t r = 0; r < pb.nr; r++) {
        size_t end = pb.roff[r] + pb.roff_len[r];
        memcpy(v1 + n1, good + from, end - from);
        n1 += end - from;
        assert_int_equal(good[end], 0); /* the age */
        from = end + 1;
    }
    memcpy(v1 + n1, good + from, len - from);
    n1 += len - from;
    put16(v1 + OFF_VERSION, 2);
    reseal(v1, n1);
    lr_index *c = mk(4096);
    assert_st(import(c, v1, n1, T(2)), LR_OK);
    assert_true(lr__index_digest(c) == lr__index_digest(b));
    /* a version-2 blob is never an echo, even for its exporter */
    assert_st(import(a, v1, n1, T(2)), LR_OK);
    free(v1);
    lr_blob_destroy(blob);
    lr_index_destroy(c);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

/* REMOTE routes age by remote_ttl_ns, LOCAL ones by ttl_ns. */
static void
test_remote_ttl(void **state)
{
    (void)state;
    struct pr p, q;
    mkpr(&p, NULL, 0, 4, 0, 710);
    mkpr(&q, NULL, 0, 3, 0, 711);
    lr_index *a = mk(4096);
    learn(a, &p, 1, LR_TRUST_LOCAL, T(1));
    lr_blob *blob = export_since(a, 0, NULL);
    struct mkopt mb = { .cap = 4096, .remote_ttl = 10 * SEC };
    lr_index *b = mk_with(&mb);
    assert_st(import_blob(b, blob, T(1)), LR_OK);
    learn(b, &q, 2, LR_TRUST_LOCAL, T(1));
    assert_st(lr_index_expire(b, T(9)), LR_OK);
    assert_int_equal(held(b, &p, 1), 4 * BT);
    assert_st(lr_index_expire(b, T(12)), LR_OK);
    assert_verified(b);
    assert_int_equal(held(b, &p, 1), 0);      /* REMOTE: gone after 10 s */
    assert_int_equal(held(b, &q, 2), 3 * BT); /* LOCAL: the hour's TTL */
    assert_int_equal(stats(b).expired_blocks, 4);
    lr_blob_destroy(blob);
    lr_index_destroy(b);

    /* ages travel: p last used 40 s before q at the exporter is imported
     * as 40 s older, so a full export does not make it look fresh */
    learn(a, &q, 2, LR_TRUST_LOCAL, T(41));
    blob = export_since(a, 0, NULL);
    b = mk_with(&mb);
    struct pr z;
    mkpr(&z, NULL, 0, 1, 0, 712);
    learn(b, &z, 3, LR_TRUST_LOCAL, T(1)); /* B's clock starts early */
    assert_st(import_blob(b, blob, T(100)), LR_OK);
    assert_st(lr_index_expire(b, T(105)), LR_OK);
    assert_int_equal(held(b, &p, 1), 0);      /* 44 s old: past 10 s */
    assert_int_equal(held(b, &q, 2), 3 * BT); /* 4 s old */
    assert_verified(b);
    lr_blob_destroy(blob);
    lr_index_destroy(b);
    lr_index_destroy(a);
}

/* LR_EVICT_LRU: a full index drops the least recently used route, REMOTE
 * or LOCAL; the default drops REMOTE ones first. */
static void
test_eviction_lru(void **state)
{
    (void)state;
    struct pr old, fresh, add;
    mkpr(&old, NULL, 0, 3, 0, 720);
    mkpr(&fresh, NULL, 0, 3, 0, 721);
    mkpr(&add, NULL, 0, 2, 0, 722);
    lr_index *a = mk(4096);
    learn(a, &fresh, 1, LR_TRUST_LOCAL, T(20));
    lr_blob *blob = export_since(a, 0, NULL);
    for (int lru = 0; lru < 2; lru++) {
        lr_index_options o = LR_INDEX_OPTIONS_INIT;
        o.seed = OPT_SEED;
        o.capacity_blocks = 7;
        o.eviction = lru ? LR_EVICT_LRU : LR_EVICT_REMOTE_FIRST;
        lr_index *b = NULL;
        assert_st(lr_index_create(&o, &b), LR_OK);
        learn(b, &old, 2, LR_TRUST_LOCAL, T(1));       /* LOCAL, old */
        assert_st(import_blob(b, blob, T(20)), LR_OK); /* REMOTE, fresh */
        learn(b, &add, 3, LR_TRUST_LOCAL, T(21));      /* 8 > 7: one goes */
        assert_verified(b);
        if (lru) { /* the old LOCAL route's tail went */
            assert_int_equal(held(b, &old, 2), 0);
            assert_int_equal(held(b, &fresh, 1), 3 * BT);
        } else {
            assert_int_equal(held(b, &old, 2), 3 * BT);
            assert_true(held(b, &fresh, 1) < 3 * BT);
        }
        lr_index_destroy(b);
    }
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.eviction = 2;
    lr_index *bad = NULL;
    assert_st(lr_index_create(&o, &bad), LR_EINVAL);
    lr_blob_destroy(blob);
    lr_index_destroy(a);
}

/* An imported route lands in the LRU list where its age puts it, however
 * deep: here 300 REMOTE routes, one a second, and then a route as old as
 * the 101st. A walk bounded at 64 steps from the nearer end put it among
 * the 64 oldest, and 65 evictions took it where 100 should. */
static void
test_import_lands_by_age(void **state)
{
    (void)state;
    enum {
        N = 300,
        GONE = 90
    };
    struct pr *p = calloc(N, sizeof *p);
    struct pr q, last, add;
    assert_non_null(p);
    lr_index *a = mk(4096), *c = mk(4096);
    for (uint32_t i = 0; i < N; i++) {
        mkpr(&p[i], NULL, 0, 1, 0, 900 + i);
        learn(a, &p[i], 1, LR_TRUST_LOCAL, T(1 + i));
    }
    mkpr(&q, NULL, 0, 1, 0, 1900);
    mkpr(&last, NULL, 0, 1, 0, 1901);
    learn(c, &q, 2, LR_TRUST_LOCAL, T(101));
    learn(c, &last, 2, LR_TRUST_LOCAL, T(N)); /* c's clock at a's */
    lr_blob *pa = export_since(a, 0, NULL), *pc = export_since(c, 0, NULL);
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.seed = OPT_SEED;
    o.capacity_blocks = N + 2;
    o.eviction = LR_EVICT_LRU;
    o.clock_skew_ns = 3600 * SEC;
    lr_index *b = NULL;
    assert_st(lr_index_create(&o, &b), LR_OK);
    assert_st(lr_index_expire(b, T(1)), LR_OK); /* b's clock from a's start */
    assert_st(import_blob(b, pa, T(N)), LR_OK);
    assert_st(import_blob(b, pc, T(N)), LR_OK);
    assert_int_equal(stats(b).blocks, N + 2);
    for (uint32_t k = 0; k < GONE; k++) { /* each evicts the oldest */
        mkpr(&add, NULL, 0, 1, 0, 2000 + k);
        learn(b, &add, 3, LR_TRUST_LOCAL, T(N + 1 + k));
    }
    assert_int_equal(stats(b).evicted_blocks, GONE);
    assert_int_equal(held(b, &p[GONE - 1], 1), 0);
    assert_int_equal(held(b, &p[GONE], 1), BT);
    assert_int_equal(held(b, &q, 2), BT); /* as old as p[100]: kept */
    lr_blob_destroy(pa);
    lr_blob_destroy(pc);
    lr_index_destroy(b);
    lr_index_destroy(c);
    lr_index_destroy(a);
    free(p);
}

/* ---- malformed blobs -------------------------------------------------------- */

struct victim {
    lr_index *ix;
    uint64_t digest;
};

static void
expect_rejected(struct victim *v, const uint8_t *buf, size_t len,
                lr_status want, const char *what)
{
    lr_status st = import(v->ix, buf, len, T(9));
    if (st != want)
        fail_msg("%s: import returned %s, want %s", what, lr_status_name(st),
                 lr_status_name(want));
    assert_true(lr__index_digest(v->ix) == v->digest);
}

/* A chain that contradicts the importer where its node table cannot see
 * it (the key held at a depth the table skips, under another parent):
 * the import goes in, the index stays consistent, and the importer's own
 * prompts answer as before (the forged chain hangs where no real prompt
 * reaches). A fresh victim, so the caller's keeps its digest. */
static void
expect_unseen(const uint8_t *buf, size_t len, const struct pr *own,
              const struct pr *other, const char *what)
{
    lr_index *ix = mk(4096);
    learn(ix, own, 1, LR_TRUST_LOCAL, T(1));
    learn(ix, other, 7, LR_TRUST_LOCAL, T(1));
    uint32_t h_own = held(ix, own, 1), h_other = held(ix, other, 7);
    lr_status st = import(ix, buf, len, T(9));
    if (st != LR_OK)
        fail_msg("%s: import returned %s, want LR_OK", what,
                 lr_status_name(st));
    assert_st(lr__index_verify(ix), LR_OK);
    assert_int_equal(held(ix, own, 1), h_own);
    assert_int_equal(held(ix, other, 7), h_other);
    lr_index_destroy(ix);
}

static void
test_malformed_blobs(void **state)
{
    (void)state;
    make_set();
    lr_index *a = mk(4096);
    learn_set(a, T(1));
    lr_blob *blob = export_since(a, 0, NULL);
    const size_t len = lr_blob_size(blob);
    const uint8_t *good = lr_blob_data(blob);
    const uint32_t nn = blob_nodes(blob);
    assert_true(nn >= 3 && nn < 127); /* one-byte varints below */

    /* the checksum is the documented one */
    uint8_t *buf = copy_of(blob, len);
    reseal(buf, len);
    assert_memory_equal(buf, good, len);
    assert_memory_equal(good, "LRDX", 4);
    assert_int_equal(get32(good + OFF_BLOCK), BT);

    /* the victim holds LOCAL routes of its own, some on the same chains */
    struct victim v;
    v.ix = mk(4096);
    struct pr own;
    mkpr(&own, &set[0], 2, 3, 0, 900);
    learn(v.ix, &own, 1, LR_TRUST_LOCAL, T(1));
    learn(v.ix, &set[2], 7, LR_TRUST_LOCAL, T(1));
    v.digest = lr__index_digest(v.ix);

    /* empty and NULL */
    expect_rejected(&v, buf, 0, LR_ECORRUPT, "empty");
    expect_rejected(&v, NULL, 5, LR_EINVAL, "NULL with a length");
    assert_st(lr_index_import_delta(NULL, buf, len, T(9)), LR_EINVAL);
    assert_true(import(v.ix, NULL, 0, T(9)) != LR_OK);
    assert_true(lr__index_digest(v.ix) == v.digest);

    /* truncated at every length, each in its own exact-size buffer */
    for (size_t l = 0; l < len; l++) {
        uint8_t *p = copy_of(blob, l);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu of %zu", l, len);
        expect_rejected(&v, p, l, LR_ECORRUPT, what);
        free(p);
    }
    /* one byte too many */
    {
        uint8_t *p = malloc(len + 1);
        assert_non_null(p);
        memcpy(p, good, len);
        p[len] = 0;
        expect_rejected(&v, p, len + 1, LR_ECORRUPT, "trailing byte");
        /* even with the checksum moved to the new end */
        memcpy(p, good, len - 8);
        p[len - 8] = 0;
        reseal(p, len + 1);
        expect_rejected(&v, p, len + 1, LR_ECORRUPT, "resealed trailing");
        free(p);
    }

    /* every single-bit flip */
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, good, len);
            buf[i] ^= (uint8_t)(1u << bit);
            lr_status st = import(v.ix, buf, len, T(9));
            bool ok = st == LR_ECORRUPT ||
                      /* the version field may be judged before the sum */
                      (st == LR_EVERSION && i >= OFF_VERSION &&
                       i < OFF_VERSION + 2) ||
                      (st == LR_ENOTSUP && i >= OFF_BLOCK && i < OFF_BLOCK + 4);
            if (!ok)
                fail_msg("bit %d of byte %zu flipped: import returned %s", bit,
                         i, lr_status_name(st));
            assert_true(lr__index_digest(v.ix) == v.digest);
        }
    }

    /* wrong magic, resealed */
    memcpy(buf, good, len);
    buf[0] = 'X';
    reseal(buf, len);
    expect_rejected(&v, buf, len, LR_ECORRUPT, "magic");

    /* wrong version, resealed: only the version is wrong */
    static const uint16_t versions[] = { 0, 1, 4, 0xffff };
    for (size_t k = 0; k < 4; k++) {
        memcpy(buf, good, len);
        put16(buf + OFF_VERSION, versions[k]);
        reseal(buf, len);
        expect_rejected(&v, buf, len, LR_EVERSION, "version");
    }

    /* another block size, resealed */
    static const uint32_t sizes[] = { 32, 8, 0 };
    for (size_t k = 0; k < 3; k++) {
        memcpy(buf, good, len);
        put32(buf + OFF_BLOCK, sizes[k]);
        reseal(buf, len);
        expect_rejected(&v, buf, len, LR_ENOTSUP, "block size");
    }
    /* and an index of another block size refuses the real blob */
    {
        struct mkopt mo = { .cap = 64, .block = 32 };
        struct victim w;
        w.ix = mk_with(&mo);
        w.digest = lr__index_digest(w.ix);
        expect_rejected(&w, good, len, LR_ENOTSUP, "32-token index");
        lr_index_destroy(w.ix);
    }

    /* a parent pointing forward, and a node naming itself */
    struct parsed pb;
    parse(good, len, &pb);
    assert_int_equal(pb.nn, nn);
    for (uint32_t i = 0; i + 2 < nn && i < 3; i++) {
        for (uint8_t fwd = (uint8_t)(i + 1); fwd <= i + 2; fwd++) {
            memcpy(buf, good, len);
            assert_int_equal(pb.poff_len[i], 1);
            buf[pb.poff[i]] = fwd; /* parent = node fwd - 1 >= i */
            reseal(buf, len);
            expect_rejected(&v, buf, len, LR_ECORRUPT, "forward parent");
        }
    }
    /* a route naming a node past the end */
    memcpy(buf, good, len);
    assert_int_equal(pb.roff_len[0], 1);
    buf[pb.roff[0]] = (uint8_t)nn;
    reseal(buf, len);
    expect_rejected(&v, buf, len, LR_ECORRUPT, "route node");
    /* counts that do not fit the body */
    memcpy(buf, good, len);
    put32(buf + OFF_NODES, 0xffffffffu);
    reseal(buf, len);
    expect_rejected(&v, buf, len, LR_ECORRUPT, "node count");
    memcpy(buf, good, len);
    put32(buf + OFF_ROUTES, get32(good + OFF_ROUTES) + 1);
    reseal(buf, len);
    expect_rejected(&v, buf, len, LR_ECORRUPT, "route count");
    /* the same key twice in one blob */
    memcpy(buf, good, len);
    put64(buf + pb.koff[2], pb.key[0]);
    reseal(buf, len);
    expect_rejected(&v, buf, len, LR_ECORRUPT, "duplicate key");

    /* chains that contradict the importing index. The victim holds set[0]
     * blocks 0 and 1 (through `own`), chained k0 -> k1. */
    {
        uint64_t k01[2];
        size_t nk = 0;
        assert_st(lr_block_keys(BT, set[0].t, 2 * BT, 0, k01, 2, &nk), LR_OK);
        uint32_t j1 = find_key(&pb, k01[1]);
        assert_true(j1 != UINT32_MAX);
        assert_true(pb.par[j1] != UINT32_MAX);
        assert_true(pb.key[pb.par[j1]] == k01[0]);
        assert_int_equal(pb.poff_len[j1], 1);

        /* k1 declared a root block: k1 is its run's second block, which
         * the node table does not hold (TAB_STRIDE), so the importer
         * cannot see that it holds k1 elsewhere */
        memcpy(buf, good, len);
        buf[pb.poff[j1]] = 0;
        reseal(buf, len);
        expect_unseen(buf, len, &own, &set[2], "held key as a root");
        /* a fresh index has nothing to contradict: accepted */
        lr_index *fresh = mk(4096);
        assert_st(import(fresh, buf, len, T(9)), LR_OK);
        lr_index_destroy(fresh);

        /* the victim's own block 2 (child of k1 there) put in place of k1,
         * that is under k0 */
        uint64_t ko[5];
        assert_st(lr_block_keys(BT, own.t, 5 * BT, 0, ko, 5, &nk), LR_OK);
        assert_true(ko[1] == k01[1]);
        assert_true(find_key(&pb, ko[2]) == UINT32_MAX);
        memcpy(buf, good, len);
        put64(buf + pb.koff[j1], ko[2]);
        reseal(buf, len);
        expect_unseen(buf, len, &own, &set[2], "held key, other parent");

        /* a block the table holds (the first of a run) put in place of
         * k1: seen, rejected */
        struct pr lone;
        mkpr(&lone, NULL, 0, 2, 0, 4242);
        uint64_t kl[2];
        assert_st(lr_block_keys(BT, lone.t, 2 * BT, 0, kl, 2, &nk), LR_OK);
        assert_true(find_key(&pb, kl[0]) == UINT32_MAX);
        struct victim w;
        w.ix = mk(4096);
        learn(w.ix, &own, 1, LR_TRUST_LOCAL, T(1));
        learn(w.ix, &lone, 7, LR_TRUST_LOCAL, T(1));
        w.digest = lr__index_digest(w.ix);
        memcpy(buf, good, len);
        put64(buf + pb.koff[j1], kl[0]);
        reseal(buf, len);
        expect_rejected(&w, buf, len, LR_ECORRUPT,
                        "held run start, other parent");
        lr_index_destroy(w.ix);
        fresh = mk(4096);
        assert_st(import(fresh, buf, len, T(9)), LR_OK);
        lr_index_destroy(fresh);

        /* k0 declared a child of another root of the blob */
        uint32_t j0 = pb.par[j1], other = UINT32_MAX;
        for (uint32_t i = j0 + 1; i < nn && other == UINT32_MAX; i++)
            if (pb.par[i] == UINT32_MAX)
                other = i;
        (void)other;
        for (uint32_t i = 0; i < j0 && other == UINT32_MAX; i++)
            if (pb.par[i] == UINT32_MAX)
                other = i;
        if (other != UINT32_MAX && other < j0) {
            memcpy(buf, good, len);
            assert_int_equal(pb.poff_len[j0], 1);
            buf[pb.poff[j0]] = (uint8_t)(other + 1);
            reseal(buf, len);
            expect_rejected(&v, buf, len, LR_ECORRUPT, "root under a node");
        }
    }

    /* after all that the real blob still goes in */
    assert_st(import(v.ix, good, len, T(10)), LR_OK);
    for (int i = 0; i < NSET; i++)
        assert_int_equal(held(v.ix, &set[i], set_inst[i]),
                         held(a, &set[i], set_inst[i]));

    free(buf);
    lr_blob_destroy(blob);
    lr_index_destroy(v.ix);
    lr_index_destroy(a);
}

/* ---- instance limit ----------------------------------------------------------- */

static void
test_import_max_instances(void **state)
{
    (void)state;
    struct pr p[4];
    for (int i = 0; i < 4; i++)
        mkpr(&p[i], NULL, 0, 2, 0, 1000 + (uint64_t)i);
    struct mkopt mo = { .cap = 4096, .max_inst = 3 };
    lr_index *b = mk_with(&mo);
    learn(b, &p[0], 1, LR_TRUST_LOCAL, T(1));
    learn(b, &p[1], 2, LR_TRUST_LOCAL, T(1));

    lr_index *a = mk(4096);
    learn(a, &p[2], 10, LR_TRUST_LOCAL, T(1));
    learn(a, &p[3], 11, LR_TRUST_LOCAL, T(1));
    learn(a, &p[0], 1, LR_TRUST_LOCAL, T(1)); /* known to B */
    lr_blob *two_new = export_since(a, 0, NULL);
    uint64_t d = lr__index_digest(b);
    assert_st(import_blob(b, two_new, T(2)), LR_ELIMIT);
    assert_true(lr__index_digest(b) == d);
    assert_int_equal(stats(b).instances, 2);

    /* one new id fits, known ids do not count */
    lr_index *a2 = mk(4096);
    learn(a2, &p[2], 10, LR_TRUST_LOCAL, T(1));
    learn(a2, &p[3], 1, LR_TRUST_LOCAL, T(1));
    learn(a2, &p[3], 2, LR_TRUST_LOCAL, T(1));
    lr_blob *one_new = export_since(a2, 0, NULL);
    assert_st(import_blob(b, one_new, T(2)), LR_OK);
    assert_int_equal(stats(b).instances, 3);
    assert_int_equal(held(b, &p[2], 10), 2 * BT);
    /* now full: the two-new blob still does not fit (11 is new) */
    d = lr__index_digest(b);
    assert_st(import_blob(b, two_new, T(3)), LR_ELIMIT);
    assert_true(lr__index_digest(b) == d);

    lr_blob_destroy(one_new);
    lr_blob_destroy(two_new);
    lr_index_destroy(a2);
    lr_index_destroy(a);
    lr_index_destroy(b);
}

/* ---- export is const and deterministic ------------------------------------ */

static void
test_export_deterministic(void **state)
{
    (void)state;
    make_set();
    lr_index *a = mk(4096), *a2 = mk(4096);
    learn_set(a, T(1));
    learn_set(a2, T(1));
    uint64_t d = lr__index_digest(a);
    lr_blob *x = export_since(a, 0, NULL);
    lr_blob *y = export_since(a, 0, NULL);
    lr_blob *z = export_since(a2, 0, NULL);
    assert_true(lr__index_digest(a) == d);
    assert_int_equal(lr_blob_size(x), lr_blob_size(y));
    assert_memory_equal(lr_blob_data(x), lr_blob_data(y), lr_blob_size(x));
    /* the same operations on another index with the same seed */
    assert_int_equal(lr_blob_size(x), lr_blob_size(z));
    assert_memory_equal(lr_blob_data(x), lr_blob_data(z), lr_blob_size(x));

    uint64_t m = 0;
    lr_blob *i1 = export_since(a, 2, &m);
    lr_blob *i2 = export_since(a, 2, &m);
    assert_int_equal(lr_blob_size(i1), lr_blob_size(i2));
    assert_memory_equal(lr_blob_data(i1), lr_blob_data(i2), lr_blob_size(i1));
    assert_true(lr__index_digest(a) == d);

    lr_blob_destroy(i2);
    lr_blob_destroy(i1);
    lr_blob_destroy(z);
    lr_blob_destroy(y);
    lr_blob_destroy(x);
    lr_index_destroy(a2);
    lr_index_destroy(a);
}

/* ---- OOM (B33) ------------------------------------------------------------------ */

/* Enough routes that export's and import's temporaries grow past their
 * first sizes, and enough new nodes that the importer's pools grow. */
#define OOM_PROMPTS 40
static struct pr oom_pr[OOM_PROMPTS];

static void
make_oom_prompts(void)
{
    for (int i = 0; i < OOM_PROMPTS; i++) {
        if (i > 0 && i % 3 == 0)
            mkpr(&oom_pr[i], &oom_pr[i - 1], 2, 2 + (size_t)i % 4, 0,
                 2000 + (uint64_t)i);
        else
            mkpr(&oom_pr[i], NULL, 0, 3 + (size_t)i % 5, 0, 2000 + (uint64_t)i);
    }
}

static void
learn_oom(lr_index *ix, int from, int to, uint32_t inst_base)
{
    for (int i = from; i < to; i++)
        learn(ix, &oom_pr[i], inst_base + (uint32_t)i % 7, LR_TRUST_LOCAL,
              T(1 + i));
}

struct oom_export_ctx {
    uint8_t *ref[2];
    size_t ref_len[2];
    unsigned enomem;
};

static bool
oom_export(struct tu_alloc *t, void *vctx)
{
    struct oom_export_ctx *ctx = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    struct mkopt mo = { .cap = 4096, .a = &t->a };
    lr_index *ix = mk_with(&mo);
    learn_oom(ix, 0, OOM_PROMPTS / 2, 1);
    uint64_t m = lr_index_mark(ix);
    learn_oom(ix, OOM_PROMPTS / 2, OOM_PROMPTS, 1);
    const uint64_t since[2] = { 0, m };

    tu_alloc_resume(t, arm);
    for (int k = 0; k < 2; k++) {
        uint64_t before = lr__index_digest(ix);
        lr_blob *b = NULL;
        uint64_t mo_out = 12345;
        lr_status st = lr_index_export_delta(ix, since[k], &b, &mo_out);
        verify_quiet(t, ix);
        if (lr__index_digest(ix) != before)
            fail_msg("export changed the index (allocation %llu failing)",
                     (unsigned long long)arm.fail_at);
        if (st == LR_ENOMEM) {
            assert_null(b); /* nothing handed out, nothing leaked */
            ctx->enomem++;
            continue;
        }
        assert_st(st, LR_OK);
        assert_non_null(b);
        assert_int_equal(mo_out, lr_index_mark(ix));
        if (ctx->ref[k] == NULL) {
            ctx->ref_len[k] = lr_blob_size(b);
            ctx->ref[k] = malloc(ctx->ref_len[k]);
            assert_non_null(ctx->ref[k]);
            memcpy(ctx->ref[k], lr_blob_data(b), ctx->ref_len[k]);
        } else {
            /* a success after failures elsewhere is still the same blob */
            assert_int_equal(lr_blob_size(b), ctx->ref_len[k]);
            assert_memory_equal(lr_blob_data(b), ctx->ref[k], ctx->ref_len[k]);
        }
        lr_blob_destroy(b);
    }
    tu_alloc_disarm(t);
    lr_index_destroy(ix);
    return !t->failed;
}

static void
test_oom_export(void **state)
{
    (void)state;
    make_oom_prompts();
    struct oom_export_ctx ctx = { { NULL, NULL }, { 0, 0 }, 0 };
    struct tu_alloc t;
    tu_alloc_init(&t);
    assert_true(oom_export(&t, &ctx)); /* reference blobs */
    assert_int_equal(t.live_bytes, 0);
    assert_true(ctx.ref_len[0] > ctx.ref_len[1]);
    tu_oom_loop(oom_export, &ctx, 10000);
    assert_true(ctx.enomem >= 4);
    free(ctx.ref[0]);
    free(ctx.ref[1]);
}

struct oom_import_ctx {
    uint8_t *blob;
    size_t len;
    struct clean_end ref;
    unsigned enomem;
};

static bool
oom_import(struct tu_alloc *t, void *vctx)
{
    struct oom_import_ctx *ctx = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    struct mkopt mo = { .cap = 4096, .a = &t->a };
    lr_index *ix = mk_with(&mo);
    /* B holds some of the same prompts LOCAL for some of the instances */
    learn_oom(ix, 0, 8, 1);

    tu_alloc_resume(t, arm);
    uint64_t before = lr__index_digest(ix);
    lr_status st = lr_index_import_delta(ix, ctx->blob, ctx->len, T(100));
    verify_quiet(t, ix);
    tu_alloc_disarm(t);
    if (st != LR_OK) {
        assert_enomem_unchanged(ix, "import", st, before, arm.fail_at);
        ctx->enomem++;
        /* still usable: the retry gives what a clean run gives */
        assert_st(lr_index_import_delta(ix, ctx->blob, ctx->len, T(100)),
                  LR_OK);
        assert_verified(ix);
    }
    assert_clean_end(&ctx->ref, ix, arm.fail_at);
    for (int i = 0; i < OOM_PROMPTS; i++)
        assert_int_equal(held(ix, &oom_pr[i], 101 + (uint32_t)i % 7),
                         oom_pr[i].n);
    lr_index_destroy(ix);
    return !t->failed;
}

static void
test_oom_import(void **state)
{
    (void)state;
    make_oom_prompts();
    lr_index *a = mk(4096);
    learn_oom(a, 0, OOM_PROMPTS, 101);
    lr_blob *b = export_since(a, 0, NULL);
    struct oom_import_ctx ctx = { 0 };
    ctx.len = lr_blob_size(b);
    ctx.blob = malloc(ctx.len);
    assert_non_null(ctx.blob);
    memcpy(ctx.blob, lr_blob_data(b), ctx.len);
    lr_blob_destroy(b);
    lr_index_destroy(a);

    struct tu_alloc t;
    tu_alloc_init(&t);
    assert_true(oom_import(&t, &ctx)); /* reference */
    assert_int_equal(t.live_bytes, 0);
    tu_oom_loop(oom_import, &ctx, 10000);
    assert_true(ctx.enomem >= 4);
    free(ctx.blob);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_full),
        cmocka_unit_test(test_incremental_since_mark),
        cmocka_unit_test(test_journal_overflow_exports_all),
        cmocka_unit_test(test_no_gossip_echo),
        cmocka_unit_test(test_local_stays_local),
        cmocka_unit_test(test_kv_routes_are_local),
        cmocka_unit_test(test_import_evicts_remote_first),
        cmocka_unit_test(test_import_keeps_message_ends),
        cmocka_unit_test(test_origin_echo_and_v2),
        cmocka_unit_test(test_remote_ttl),
        cmocka_unit_test(test_eviction_lru),
        cmocka_unit_test(test_import_lands_by_age),
        cmocka_unit_test(test_malformed_blobs),
        cmocka_unit_test(test_import_max_instances),
        cmocka_unit_test(test_export_deterministic),
        cmocka_unit_test(test_oom_export),
        cmocka_unit_test(test_oom_import),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
