/* Precise mode: lr_index_kv_stored(), lr_index_kv_removed() and
 * lr_index_kv_cleared() against the contract written in lr_index.h.
 *
 * Every mutating call goes through a helper that runs lr__index_verify()
 * afterwards and, when the call failed, checks that lr__index_digest() did
 * not move (B11). Engine hashes are opaque 64-bit values: the tests use
 * arbitrary ones (0 and UINT64_MAX included) and rely only on the index
 * recomputing its own keys from the token ids.
 *
 * The randomized test (B34) logs its seed; replay with LR_TEST_SEED=<n>. */
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

/* ---- helpers -------------------------------------------------------------- */

struct mkopt {
    uint64_t cap;          /* capacity_blocks (0: default) */
    uint32_t max_inst;     /* max_instances (0: default) */
    uint64_t emap_cap;     /* engine_map_capacity (0: default) */
    uint64_t ttl;          /* ttl_ns (0: default) */
    const lr_allocator *a; /* NULL: libc */
};

/* Indexes made with the libc allocator are tracked, so that a test that
 * fails half-way (cmocka longjmps out) leaks nothing under valgrind: the
 * teardown destroys whatever drop() did not. Indexes on a test allocator
 * are not tracked: that allocator lives on a stack frame. */
#define MAX_LIVE 16
static lr_index *live_ix[MAX_LIVE];

static void
track(lr_index *ix)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live_ix[i] == NULL) {
            live_ix[i] = ix;
            return;
        }
    fail_msg("too many live indexes");
}

static void
drop(lr_index *ix)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live_ix[i] == ix)
            live_ix[i] = NULL;
    lr_index_destroy(ix);
}

static int
teardown(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_LIVE; i++) {
        lr_index_destroy(live_ix[i]);
        live_ix[i] = NULL;
    }
    return 0;
}

static lr_index *
mk_with(const struct mkopt *m)
{
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.allocator = m->a;
    o.seed = OPT_SEED;
    o.capacity_blocks = m->cap;
    o.max_instances = m->max_inst;
    o.engine_map_capacity = m->emap_cap;
    o.ttl_ns = m->ttl;
    o.block_tokens = BT;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    assert_non_null(ix);
    if (m->a == NULL)
        track(ix);
    assert_int_equal(lr_index_block_tokens(ix), BT);
    assert_verified(ix);
    return ix;
}

static lr_index *
mk(uint64_t cap, uint32_t max_inst, uint64_t emap_cap)
{
    struct mkopt m = { .cap = cap, .max_inst = max_inst, .emap_cap = emap_cap };
    return mk_with(&m);
}

/* Apply a BlockStored event; verify afterwards and, on failure, require the
 * index to be unchanged. */
static lr_status
store(lr_index *ix, uint32_t inst, const uint64_t *hashes, size_t n_blocks,
      int has_parent, uint64_t parent, uint32_t bs, const uint32_t *tok,
      uint64_t salt, uint64_t now)
{
    lr_kv_stored ev = LR_KV_STORED_INIT;
    ev.block_hashes = hashes;
    ev.n_blocks = n_blocks;
    ev.parent_hash = parent;
    ev.has_parent = has_parent;
    ev.block_size = bs;
    ev.token_ids = tok;
    ev.n_tokens = n_blocks * bs;
    ev.tenant_salt = salt;
    uint64_t before = lr__index_digest(ix);
    return checked(ix, "kv_stored", before,
                   lr_index_kv_stored(ix, inst, &ev, now));
}

/* Raw event variant for the argument checks. */
static lr_status
store_ev(lr_index *ix, uint32_t inst, const lr_kv_stored *ev, uint64_t now)
{
    uint64_t before = lr__index_digest(ix);
    return checked(ix, "kv_stored", before,
                   lr_index_kv_stored(ix, inst, ev, now));
}

/* Apply a BlockRemoved event that must succeed; returns n_resolved. */
static size_t
removed(lr_index *ix, uint32_t inst, const uint64_t *hashes, size_t n)
{
    size_t res = 12345;
    assert_st(lr_index_kv_removed(ix, inst, hashes, n, &res), LR_OK);
    assert_verified(ix);
    assert_true(res <= n);
    return res;
}

static lr_status
removed_st(lr_index *ix, uint32_t inst, const uint64_t *hashes, size_t n,
           size_t *res)
{
    uint64_t before = lr__index_digest(ix);
    return checked(ix, "kv_removed", before,
                   lr_index_kv_removed(ix, inst, hashes, n, res));
}

static lr_status
cleared(lr_index *ix, uint32_t inst)
{
    uint64_t before = lr__index_digest(ix);
    return checked(ix, "kv_cleared", before, lr_index_kv_cleared(ix, inst));
}

static uint64_t
iblocks(const lr_index *ix, uint32_t inst)
{
    uint64_t v = 777;
    assert_st(lr_index_instance_blocks(ix, inst, &v), LR_OK);
    return v;
}

#define MAX_HITS 64

/* No-touch match; checks the result's own consistency and returns n_hits.
 * hits must hold MAX_HITS entries. */
static size_t
match_all(lr_index *ix, const uint32_t *t, size_t n, uint64_t salt,
          lr_index_hit *hits, uint64_t *deepest)
{
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = t;
    p.n_tokens = n;
    p.tenant_salt = salt;
    lr_index_match_result r = LR_INDEX_MATCH_RESULT_INIT;
    r.hits = hits;
    r.hits_capacity = MAX_HITS;
    assert_st(lr_index_match(ix, &p, T(1), LR_MATCH_NO_TOUCH, &r), LR_OK);
    assert_verified(ix);
    assert_true(r.n_hits <= MAX_HITS);
    assert_int_equal(r.prompt_blocks, n / BT);
    uint64_t deep = 0;
    for (size_t i = 0; i < r.n_hits; i++) {
        assert_true(hits[i].tokens > 0);
        assert_int_equal(hits[i].tokens % BT, 0);
        assert_true(hits[i].tokens <= n);
        if (hits[i].tokens > deep)
            deep = hits[i].tokens;
        if (i > 0) {
            bool ordered = hits[i - 1].tokens > hits[i].tokens ||
                           (hits[i - 1].tokens == hits[i].tokens &&
                            hits[i - 1].instance < hits[i].instance);
            assert_true(ordered);
        }
    }
    assert_int_equal(r.deepest_tokens, deep);
    if (deepest != NULL)
        *deepest = r.deepest_tokens;
    return r.n_hits;
}

/* Tokens of the prompt `inst` holds (0 when match does not report it). */
static uint32_t
held(lr_index *ix, uint32_t inst, const uint32_t *t, size_t n, uint64_t salt)
{
    lr_index_hit hits[MAX_HITS];
    size_t k = match_all(ix, t, n, salt, hits, NULL);
    for (size_t i = 0; i < k; i++)
        if (hits[i].instance == inst)
            return hits[i].tokens;
    return 0;
}

/* A match that refreshes what it finds. */
static void
touch_match(lr_index *ix, const uint32_t *t, size_t n, uint64_t now)
{
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = t;
    p.n_tokens = n;
    lr_index_hit hits[MAX_HITS];
    lr_index_match_result r = LR_INDEX_MATCH_RESULT_INIT;
    r.hits = hits;
    r.hits_capacity = MAX_HITS;
    assert_st(lr_index_match(ix, &p, now, 0, &r), LR_OK);
    assert_verified(ix);
}

/* ---- stored chains -------------------------------------------------------- */

/* Two events chained through has_parent form one prefix; keys come from the
 * token ids (lr_block_keys), not from the engine hashes. */
static void
test_stored_chain_with_parent(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[6 * BT];
    toks(t, 6 * BT, 1);
    const uint64_t h1[3] = { 0, UINT64_MAX, 0x8000000000000000ull };
    const uint64_t h2[2] = { 0x1234, 0xfeedfacecafebeefull };

    assert_st(store(ix, 7, h1, 3, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_int_equal(held(ix, 7, t, 3 * BT, 0), 3 * BT);
    assert_st(store(ix, 7, h2, 2, 1, h1[2], BT, t + 3 * BT, 0, T(2)), LR_OK);

    lr_index_hit hits[MAX_HITS];
    uint64_t deep = 0;
    assert_int_equal(match_all(ix, t, 5 * BT, 0, hits, &deep), 1);
    assert_int_equal(hits[0].instance, 7);
    assert_int_equal(hits[0].tokens, 5 * BT);
    assert_int_equal(deep, 5 * BT);
    /* a longer prompt stops at what was stored; a shorter one at its end */
    assert_int_equal(held(ix, 7, t, 6 * BT, 0), 5 * BT);
    assert_int_equal(held(ix, 7, t, 5 * BT + 7, 0), 5 * BT);
    assert_int_equal(held(ix, 7, t, 2 * BT + 9, 0), 2 * BT);
    assert_int_equal(held(ix, 8, t, 5 * BT, 0), 0);

    /* the keys are the documented chained keys of the token ids */
    uint64_t keys[5];
    size_t nk = 0;
    assert_st(lr_block_keys(BT, t, 5 * BT, 0, keys, 5, &nk), LR_OK);
    assert_int_equal(nk, 5);
    assert_int_equal(lr__index_depth_of(ix, 7, keys, 5), 5);
    lr_prompt p = LR_PROMPT_INIT;
    p.keys = keys;
    p.n_keys = 5;
    p.n_tokens = 5 * BT;
    lr_index_match_result r = LR_INDEX_MATCH_RESULT_INIT;
    r.hits = hits;
    r.hits_capacity = MAX_HITS;
    assert_st(lr_index_match(ix, &p, T(3), 0, &r), LR_OK);
    assert_verified(ix);
    assert_int_equal(r.n_hits, 1);
    assert_int_equal(hits[0].tokens, 5 * BT);

    /* one changed token in block 3 ends the match after block 2 */
    uint32_t t2[5 * BT];
    memcpy(t2, t, sizeof t2);
    t2[3 * BT + 5] ^= 1;
    assert_int_equal(held(ix, 7, t2, 5 * BT, 0), 3 * BT);

    lr_index_stats s = stats(ix);
    assert_int_equal(s.blocks, 5);
    assert_int_equal(s.remote_blocks, 0);
    assert_int_equal(s.prefixes, 5);
    assert_int_equal(s.instances, 1);
    assert_int_equal(s.engine_hashes, 5);
    assert_int_equal(iblocks(ix, 7), 5);

    /* a fork chained on an interior block: both branches match */
    uint32_t f[1 * BT + 2 * BT];
    memcpy(f, t, BT * sizeof *f);
    toks(f + BT, 2 * BT, 99);
    const uint64_t hf[2] = { 42, 43 };
    assert_st(store(ix, 7, hf, 2, 1, h1[0], BT, f + BT, 0, T(4)), LR_OK);
    assert_int_equal(held(ix, 7, f, 3 * BT, 0), 3 * BT);
    assert_int_equal(held(ix, 7, t, 5 * BT, 0), 5 * BT);
    assert_int_equal(iblocks(ix, 7), 7);
    assert_int_equal(stats(ix).engine_hashes, 7);
    drop(ix);
}

/* An engine block of block_size = m * block_tokens is m index blocks; its
 * removal drops all m of them and nothing before its start. */
static void
test_engine_block_spans_index_blocks(void **state)
{
    (void)state;
    static const uint32_t sizes[] = { 32, 64, 128 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint32_t bs = sizes[si], m = bs / BT;
        lr_index *ix = mk(4096, 16, 0);
        uint32_t t[4 * 128];
        toks(t, 4 * bs, 10 + si);
        const uint64_t h[4] = { 11, 12, 13, 14 };
        assert_st(store(ix, 1, h, 4, 0, 0, bs, t, 0, T(1)), LR_OK);
        assert_int_equal(held(ix, 1, t, 4 * bs, 0), 4 * bs);
        assert_int_equal(iblocks(ix, 1), 4 * m);
        assert_int_equal(stats(ix).engine_hashes, 4);

        /* drop the last engine block: back to 3 engine blocks exactly */
        assert_int_equal(removed(ix, 1, &h[3], 1), 1);
        assert_int_equal(iblocks(ix, 1), 3 * m);
        for (uint32_t L = 0; L <= 4 * bs; L += BT)
            assert_int_equal(held(ix, 1, t, L, 0), L < 3 * bs ? L : 3 * bs);

        /* drop an interior one: back to its start, deeper ones go too */
        assert_int_equal(removed(ix, 1, &h[1], 1), 1);
        assert_int_equal(iblocks(ix, 1), m);
        for (uint32_t L = 0; L <= 4 * bs; L += BT)
            assert_int_equal(held(ix, 1, t, L, 0), L < bs ? L : bs);
        assert_int_equal(stats(ix).engine_hashes, 1);

        /* chained again on the survivor, then all of it removed */
        assert_st(store(ix, 1, &h[1], 3, 1, h[0], bs, t + bs, 0, T(2)), LR_OK);
        assert_int_equal(held(ix, 1, t, 4 * bs, 0), 4 * bs);
        assert_int_equal(removed(ix, 1, &h[0], 1), 1);
        assert_int_equal(iblocks(ix, 1), 0);
        assert_int_equal(held(ix, 1, t, 4 * bs, 0), 0);
        assert_int_equal(stats(ix).blocks, 0);
        assert_int_equal(stats(ix).prefixes, 0);
        assert_int_equal(stats(ix).engine_hashes, 0);
        drop(ix);
    }
}

/* Two instances with different engine block sizes share index nodes;
 * a removal on one leaves the other whole. */
static void
test_engine_block_sizes_mixed(void **state)
{
    (void)state;
    lr_index *ix = mk(4096, 16, 0);
    uint32_t t[8 * BT];
    toks(t, 8 * BT, 3);
    const uint64_t a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    const uint64_t b[2] = { 1, 2 }; /* same values, other instance's map */
    assert_st(store(ix, 1, a, 8, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_st(store(ix, 2, b, 2, 0, 0, 4 * BT, t, 0, T(1)), LR_OK);
    assert_int_equal(stats(ix).prefixes, 8);
    assert_int_equal(stats(ix).blocks, 16);
    /* inst 1 drops index block 2 (its engine block 2) */
    assert_int_equal(removed(ix, 1, &a[2], 1), 1);
    assert_int_equal(held(ix, 1, t, 8 * BT, 0), 2 * BT);
    assert_int_equal(held(ix, 2, t, 8 * BT, 0), 8 * BT);
    /* inst 2 drops its second engine block (index blocks 4..7) */
    assert_int_equal(removed(ix, 2, &b[1], 1), 1);
    assert_int_equal(held(ix, 2, t, 8 * BT, 0), 4 * BT);
    assert_int_equal(held(ix, 1, t, 8 * BT, 0), 2 * BT);
    assert_int_equal(stats(ix).prefixes, 4);
    drop(ix);
}

/* ---- argument and state errors ------------------------------------------- */

static void
test_stored_rejects(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[8 * BT];
    toks(t, 8 * BT, 4);
    const uint64_t h[4] = { 0xa1, 0xa2, 0xa3, 0xa4 };
    assert_st(store(ix, 1, h, 2, 0, 0, BT, t, 0, T(1)), LR_OK);
    const uint64_t d0 = lr__index_digest(ix);
    const uint64_t inst0 = stats(ix).instances;

    /* block_size not a multiple of block_tokens */
    static const uint32_t bad_sizes[] = { 8, 24, 40, 17, 1 };
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        assert_st(store(ix, 1, h, 2, 0, 0, bad_sizes[i], t, 0, T(2)),
                  LR_ENOTSUP);
        assert_st(store(ix, 9, h, 2, 0, 0, bad_sizes[i], t, 0, T(2)),
                  LR_ENOTSUP);
    }
    assert_true(lr__index_digest(ix) == d0);
    assert_int_equal(stats(ix).instances, inst0);

    lr_kv_stored ev = LR_KV_STORED_INIT;
    ev.block_hashes = h;
    ev.n_blocks = 2;
    ev.block_size = BT;
    ev.token_ids = t;
    ev.n_tokens = 2 * BT;

    /* n_tokens != n_blocks * block_size */
    lr_kv_stored e = ev;
    e.n_tokens = 2 * BT - 1;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    e.n_tokens = 2 * BT + 1;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    e.n_tokens = 3 * BT;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    e.n_tokens = 0;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    /* an absurd block size */
    e = ev;
    e.block_size = 0;
    e.n_tokens = 0;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);

    /* NULL pointers */
    assert_st(lr_index_kv_stored(NULL, 1, &ev, T(2)), LR_EINVAL);
    assert_st(store_ev(ix, 1, NULL, T(2)), LR_EINVAL);
    e = ev;
    e.block_hashes = NULL;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    e = ev;
    e.token_ids = NULL;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    /* the reserved instance id */
    assert_st(store_ev(ix, LR_INSTANCE_NONE, &ev, T(2)), LR_EINVAL);

    /* has_parent other than 0/1 */
    static const int32_t bad_hp[] = { 2, -1, INT32_MAX, INT32_MIN };
    for (size_t i = 0; i < sizeof bad_hp / sizeof bad_hp[0]; i++) {
        e = ev;
        e.has_parent = bad_hp[i];
        e.parent_hash = h[1];
        assert_st(store_ev(ix, 1, &e, T(2)), LR_EINVAL);
    }

    /* struct_size too small */
    e = ev;
    e.struct_size = LR_KV_STORED_SIZE_V1 - 1;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EVERSION);
    e.struct_size = 0;
    assert_st(store_ev(ix, 1, &e, T(2)), LR_EVERSION);
    assert_true(lr__index_digest(ix) == d0);

    /* unknown parent: for a known instance, for an instance never seen,
     * and for a hash only another instance knows */
    assert_st(store(ix, 1, &h[2], 1, 1, 0xdead, BT, t + 2 * BT, 0, T(2)),
              LR_ENOENT);
    assert_st(store(ix, 9, &h[2], 1, 1, h[1], BT, t + 2 * BT, 0, T(2)),
              LR_ENOENT);
    assert_int_equal(stats(ix).instances, inst0);
    assert_st(lr_index_instance_blocks(ix, 9, &(uint64_t){ 0 }), LR_ENOENT);
    assert_true(lr__index_digest(ix) == d0);

    /* the exact v1 size is accepted */
    e = ev;
    e.struct_size = LR_KV_STORED_SIZE_V1;
    e.block_hashes = &h[2];
    e.has_parent = 1;
    e.parent_hash = h[1];
    e.token_ids = t + 2 * BT;
    assert_st(store_ev(ix, 1, &e, T(3)), LR_OK);
    assert_int_equal(held(ix, 1, t, 4 * BT, 0), 4 * BT);

    /* a parent the engine has since removed is unknown again */
    assert_int_equal(removed(ix, 1, &h[2], 1), 1);
    assert_st(store(ix, 1, &h[3], 1, 1, h[2], BT, t + 3 * BT, 0, T(4)),
              LR_ENOENT);
    assert_int_equal(held(ix, 1, t, 4 * BT, 0), 2 * BT);
    drop(ix);
}

static void
test_stored_max_instances(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 2, 0);
    uint32_t t[2 * BT];
    toks(t, 2 * BT, 5);
    const uint64_t h[2] = { 1, 2 };
    assert_st(store(ix, 10, h, 2, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_st(store(ix, 20, h, 2, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_st(store(ix, 30, h, 2, 0, 0, BT, t, 0, T(1)), LR_ELIMIT);
    assert_int_equal(stats(ix).instances, 2);
    assert_int_equal(held(ix, 30, t, 2 * BT, 0), 0);
    /* known instances keep working */
    assert_st(store(ix, 10, h, 2, 0, 0, BT, t, 0, T(2)), LR_OK);
    drop(ix);
}

/* ---- removals ------------------------------------------------------------- */

static void
test_removed_interior_takes_deeper(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[5 * BT];
    toks(t, 5 * BT, 6);
    const uint64_t h[5] = { 101, 102, 103, 104, 105 };
    /* both engines report the same hashes for the same content */
    assert_st(store(ix, 1, h, 5, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_st(store(ix, 2, h, 5, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_int_equal(stats(ix).prefixes, 5);

    assert_int_equal(removed(ix, 1, &h[2], 1), 1);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0), 2 * BT);
    assert_int_equal(held(ix, 2, t, 5 * BT, 0), 5 * BT);
    assert_int_equal(iblocks(ix, 1), 2);
    assert_int_equal(iblocks(ix, 2), 5);
    assert_int_equal(stats(ix).engine_hashes, 2 + 5);

    /* the deeper hashes went with it: they no longer resolve */
    assert_int_equal(removed(ix, 1, &h[3], 2), 0);
    assert_st(store(ix, 1, &h[4], 1, 1, h[3], BT, t + 4 * BT, 0, T(2)),
              LR_ENOENT);

    /* re-storing the removed block does not bring back the deeper ones */
    assert_st(store(ix, 1, &h[2], 1, 1, h[1], BT, t + 2 * BT, 0, T(2)), LR_OK);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0), 3 * BT);
    assert_int_equal(removed(ix, 1, &h[3], 2), 0);

    /* the other instance removes independently */
    assert_int_equal(removed(ix, 2, &h[3], 1), 1);
    assert_int_equal(held(ix, 2, t, 5 * BT, 0), 3 * BT);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0), 3 * BT);
    assert_int_equal(stats(ix).prefixes, 3);
    assert_int_equal(stats(ix).blocks, 6);

    /* removing the first block empties the instance, which stays known */
    assert_int_equal(removed(ix, 1, &h[0], 1), 1);
    assert_int_equal(iblocks(ix, 1), 0);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0), 0);
    assert_int_equal(held(ix, 2, t, 5 * BT, 0), 3 * BT);

    /* several hashes in one event: an ancestor first takes the rest */
    assert_st(store(ix, 1, h, 5, 0, 0, BT, t, 0, T(3)), LR_OK);
    const uint64_t batch[3] = { h[1], h[3], h[4] };
    assert_int_equal(removed(ix, 1, batch, 3), 1);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0), 1 * BT);
    /* deepest first: every one resolves */
    assert_st(store(ix, 1, &h[1], 4, 1, h[0], BT, t + BT, 0, T(4)), LR_OK);
    const uint64_t back[4] = { h[4], h[3], h[2], h[1] };
    assert_int_equal(removed(ix, 1, back, 4), 4);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0), 1 * BT);
    drop(ix);
}

/* A LOCAL learn of the first n tokens of t for inst at now. */
static void
learn_n(lr_index *ix, uint32_t inst, const uint32_t *t, size_t n, uint64_t now)
{
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = t;
    p.n_tokens = n;
    uint64_t before = lr__index_digest(ix);
    (void)checked(ix, "learn", before,
                  lr_index_learn(ix, &p, inst, LR_TRUST_LOCAL, now));
}

/* A route learned past what the engine stored (a request routed there,
 * its prefill not stored yet) outlives the removal of a stored block
 * above it: only the block's hash goes, since that prefill stores the
 * block again. Once the engine has stored the whole route, a removal
 * takes the deeper blocks as before; with engine blocks of m index
 * blocks, a learned tail shorter than one engine block is not one. */
static void
test_removed_keeps_routes_not_yet_stored(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[8 * BT];
    toks(t, 8 * BT, 9);
    const uint64_t h[8] = { 201, 202, 203, 204, 205, 206, 207, 208 };
    assert_st(store(ix, 1, h, 5, 0, 0, BT, t, 0, T(1)), LR_OK);
    learn_n(ix, 1, t, 8 * BT, T(2)); /* the next turn, routed to 1 */
    assert_int_equal(held(ix, 1, t, 8 * BT, 0), 8 * BT);
    /* the engine drops its last block, then the one above: the route
     * stays, the hashes go */
    assert_int_equal(removed(ix, 1, &h[4], 1), 1);
    assert_int_equal(removed(ix, 1, &h[3], 1), 1);
    assert_int_equal(held(ix, 1, t, 8 * BT, 0), 8 * BT);
    assert_int_equal(iblocks(ix, 1), 8);
    assert_int_equal(stats(ix).engine_hashes, 3);
    assert_int_equal(removed(ix, 1, &h[3], 1), 0); /* forgotten */
    /* the prefill stores the blocks again, the whole route: a removal
     * now takes what lies below */
    assert_st(store(ix, 1, &h[3], 5, 1, h[2], BT, t + 3 * BT, 0, T(3)), LR_OK);
    assert_int_equal(removed(ix, 1, &h[5], 1), 1);
    assert_int_equal(held(ix, 1, t, 8 * BT, 0), 5 * BT);
    assert_int_equal(iblocks(ix, 1), 5);

    /* engine blocks of 2 index blocks: 3 engine blocks stored (6 index
     * blocks), a learn one index block past them is no request waiting:
     * the removal takes it */
    assert_st(store(ix, 2, h, 3, 0, 0, 2 * BT, t, 0, T(4)), LR_OK);
    learn_n(ix, 2, t, 7 * BT, T(5));
    assert_int_equal(held(ix, 2, t, 8 * BT, 0), 7 * BT);
    assert_int_equal(removed(ix, 2, &h[2], 1), 1);
    assert_int_equal(held(ix, 2, t, 8 * BT, 0), 4 * BT);
    /* ... a learn a whole engine block past them is */
    learn_n(ix, 2, t, 8 * BT, T(6));
    assert_int_equal(removed(ix, 2, &h[1], 1), 1);
    assert_int_equal(held(ix, 2, t, 8 * BT, 0), 8 * BT);
    drop(ix);
}

static void
test_removed_unknown_hashes_and_instances(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[3 * BT];
    toks(t, 3 * BT, 7);
    const uint64_t h[3] = { 1, 2, 3 };
    assert_st(store(ix, 1, h, 3, 0, 0, BT, t, 0, T(1)), LR_OK);

    /* only unknown hashes: skipped, nothing changes */
    const uint64_t unk[3] = { 999, 0, UINT64_MAX };
    uint64_t d0 = lr__index_digest(ix);
    assert_int_equal(removed(ix, 1, unk, 3), 0);
    assert_true(lr__index_digest(ix) == d0);
    /* a hash of another instance is unknown to this one */
    assert_st(store(ix, 2, (const uint64_t[]){ 77 }, 1, 0, 0, BT, t, 0, T(1)),
              LR_OK);
    d0 = lr__index_digest(ix);
    assert_int_equal(removed(ix, 1, (const uint64_t[]){ 77 }, 1), 0);
    assert_true(lr__index_digest(ix) == d0);

    /* known ones among unknown ones are counted */
    const uint64_t mix[4] = { 999, h[2], 998, h[2] };
    assert_int_equal(removed(ix, 1, mix, 4), 1);
    assert_int_equal(held(ix, 1, t, 3 * BT, 0), 2 * BT);

    /* n_resolved is optional; an empty event is fine */
    assert_st(removed_st(ix, 1, &h[1], 1, NULL), LR_OK);
    assert_int_equal(held(ix, 1, t, 3 * BT, 0), 1 * BT);
    size_t res = 5;
    assert_st(removed_st(ix, 1, NULL, 0, &res), LR_OK);
    assert_int_equal(res, 0);

    /* argument errors */
    assert_st(removed_st(ix, 1, NULL, 1, &res), LR_EINVAL);
    assert_st(lr_index_kv_removed(NULL, 1, h, 1, &res), LR_EINVAL);
    assert_st(lr_index_kv_cleared(NULL, 1), LR_EINVAL);
    assert_st(removed_st(ix, LR_INSTANCE_NONE, h, 1, &res), LR_EINVAL);
    assert_st(cleared(ix, LR_INSTANCE_NONE), LR_EINVAL);

    /* instances never seen */
    assert_st(removed_st(ix, 42, h, 1, &res), LR_ENOENT);
    assert_st(removed_st(ix, 42, NULL, 0, &res), LR_ENOENT);
    assert_st(cleared(ix, 42), LR_ENOENT);
    assert_int_equal(stats(ix).instances, 2);

    /* an instance seen through learn() only is known: nothing resolves */
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = t;
    p.n_tokens = 3 * BT;
    assert_st(lr_index_learn(ix, &p, 5, LR_TRUST_LOCAL, T(2)), LR_OK);
    assert_verified(ix);
    assert_int_equal(removed(ix, 5, h, 3), 0);
    assert_int_equal(held(ix, 5, t, 3 * BT, 0), 3 * BT);
    drop(ix);
}

/* ---- clear ------------------------------------------------------------------ */

static void
test_cleared_keeps_instance(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[6 * BT], u[2 * BT];
    toks(t, 6 * BT, 8);
    toks(u, 2 * BT, 9);
    const uint64_t h[6] = { 1, 2, 3, 4, 5, 6 };
    const uint64_t g[2] = { 70, 71 };
    assert_st(store(ix, 1, h, 3, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_st(store(ix, 1, &h[3], 3, 1, h[2], BT, t + 3 * BT, 0, T(1)), LR_OK);
    assert_st(store(ix, 1, g, 2, 0, 0, BT, u, 0, T(1)), LR_OK);
    assert_st(store(ix, 2, h, 3, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_int_equal(iblocks(ix, 1), 8);
    const uint64_t d2_blocks = iblocks(ix, 2);

    assert_st(cleared(ix, 1), LR_OK);
    assert_int_equal(iblocks(ix, 1), 0);
    assert_int_equal(held(ix, 1, t, 6 * BT, 0), 0);
    assert_int_equal(held(ix, 1, u, 2 * BT, 0), 0);
    assert_int_equal(held(ix, 2, t, 6 * BT, 0), 3 * BT);
    assert_int_equal(iblocks(ix, 2), d2_blocks);
    lr_index_stats s = stats(ix);
    assert_int_equal(s.instances, 2);
    assert_int_equal(s.blocks, 3);
    assert_int_equal(s.prefixes, 3);
    assert_int_equal(s.engine_hashes, 3);

    /* its engine hashes are forgotten, even once the instance holds the
     * same prefixes again (instance 2 kept those nodes alive) */
    lr_prompt lp = LR_PROMPT_INIT;
    lp.tokens = t;
    lp.n_tokens = 3 * BT;
    assert_st(lr_index_learn(ix, &lp, 1, LR_TRUST_LOCAL, T(2)), LR_OK);
    assert_verified(ix);
    assert_int_equal(held(ix, 1, t, 6 * BT, 0), 3 * BT);
    assert_int_equal(removed(ix, 1, h, 6), 0);
    assert_int_equal(removed(ix, 1, g, 2), 0);
    assert_int_equal(held(ix, 1, t, 6 * BT, 0), 3 * BT);
    assert_int_equal(stats(ix).engine_hashes, 3);
    assert_st(store(ix, 1, &h[3], 1, 1, h[2], BT, t + 3 * BT, 0, T(2)),
              LR_ENOENT);
    /* clearing again drops the learned route too; instance 2 still
     * resolves its own hashes */
    assert_st(cleared(ix, 1), LR_OK);
    assert_int_equal(iblocks(ix, 1), 0);
    assert_int_equal(held(ix, 2, t, 6 * BT, 0), 3 * BT);
    assert_int_equal(removed(ix, 2, &h[2], 1), 1);
    assert_int_equal(held(ix, 2, t, 6 * BT, 0), 2 * BT);

    /* and the cleared instance stores afresh */
    assert_st(store(ix, 1, h, 6, 0, 0, BT, t, 0, T(3)), LR_OK);
    assert_int_equal(held(ix, 1, t, 6 * BT, 0), 6 * BT);
    assert_int_equal(stats(ix).engine_hashes, 6 + 2);
    assert_int_equal(removed(ix, 1, &h[1], 1), 1);
    assert_int_equal(held(ix, 1, t, 6 * BT, 0), 1 * BT);
    drop(ix);
}

/* ---- refresh, salt -------------------------------------------------------- */

static void
test_restore_refreshes_not_duplicates(void **state)
{
    (void)state;
    /* capacity 6 routes; engine map kept large to isolate route eviction */
    lr_index *ix = mk(6, 16, 1000);
    uint32_t ta[2 * BT], tb[2 * BT], tc[2 * BT], td[2 * BT];
    toks(ta, 2 * BT, 20);
    toks(tb, 2 * BT, 21);
    toks(tc, 2 * BT, 22);
    toks(td, 2 * BT, 23);
    const uint64_t ha[2] = { 0xa1, 0xa2 }, hb[2] = { 0xb1, 0xb2 },
                   hc[2] = { 0xc1, 0xc2 }, hd[2] = { 0xd1, 0xd2 };
    assert_st(store(ix, 1, ha, 2, 0, 0, BT, ta, 0, T(1)), LR_OK);
    assert_st(store(ix, 1, hb, 2, 0, 0, BT, tb, 0, T(2)), LR_OK);
    assert_st(store(ix, 1, hc, 2, 0, 0, BT, tc, 0, T(3)), LR_OK);
    lr_index_stats s0 = stats(ix);
    assert_int_equal(s0.blocks, 6);

    /* same event again, later: refreshed, not duplicated */
    assert_st(store(ix, 1, ha, 2, 0, 0, BT, ta, 0, T(4)), LR_OK);
    lr_index_stats s1 = stats(ix);
    assert_int_equal(s1.blocks, s0.blocks);
    assert_int_equal(s1.prefixes, s0.prefixes);
    assert_int_equal(s1.learned_blocks, s0.learned_blocks);
    assert_int_equal(s1.engine_hashes, s0.engine_hashes);
    assert_int_equal(s1.evicted_blocks, 0);
    assert_int_equal(iblocks(ix, 1), 6);
    /* a re-store chained on its own parent is a refresh too */
    assert_st(store(ix, 1, &ha[1], 1, 1, ha[0], BT, ta + BT, 0, T(4)), LR_OK);
    assert_int_equal(stats(ix).blocks, 6);

    /* the next store evicts the least recently used: B, not A */
    assert_st(store(ix, 1, hd, 2, 0, 0, BT, td, 0, T(5)), LR_OK);
    lr_index_stats s2 = stats(ix);
    assert_int_equal(s2.blocks, 6);
    assert_int_equal(s2.evicted_blocks, 2);
    assert_int_equal(held(ix, 1, ta, 2 * BT, 0), 2 * BT);
    assert_int_equal(held(ix, 1, tb, 2 * BT, 0), 0);
    assert_int_equal(held(ix, 1, tc, 2 * BT, 0), 2 * BT);
    assert_int_equal(held(ix, 1, td, 2 * BT, 0), 2 * BT);
    assert_int_equal(removed(ix, 1, hb, 2), 0);
    drop(ix);

    /* an overlapping event adds only what is new */
    ix = mk(1024, 16, 0);
    uint32_t t[4 * BT];
    toks(t, 4 * BT, 24);
    const uint64_t h[4] = { 1, 2, 3, 4 };
    assert_st(store(ix, 1, h, 3, 0, 0, BT, t, 0, T(1)), LR_OK);
    uint64_t learned = stats(ix).learned_blocks;
    assert_st(store(ix, 1, h, 4, 0, 0, BT, t, 0, T(2)), LR_OK);
    assert_int_equal(stats(ix).blocks, 4);
    assert_int_equal(stats(ix).learned_blocks, learned + 1);
    assert_int_equal(stats(ix).engine_hashes, 4);
    drop(ix);
}

static void
test_tenant_salt_separates(void **state)
{
    (void)state;
    lr_index *ix = mk(1024, 16, 0);
    uint32_t t[5 * BT];
    toks(t, 5 * BT, 30);
    const uint64_t h[5] = { 1, 2, 3, 4, 5 };
    assert_st(store(ix, 1, h, 3, 0, 0, BT, t, 0x11, T(1)), LR_OK);
    assert_int_equal(held(ix, 1, t, 3 * BT, 0x11), 3 * BT);
    assert_int_equal(held(ix, 1, t, 3 * BT, 0x22), 0);
    assert_int_equal(held(ix, 1, t, 3 * BT, 0), 0);

    assert_st(store(ix, 2, h, 3, 0, 0, BT, t, 0x22, T(1)), LR_OK);
    lr_index_hit hits[MAX_HITS];
    assert_int_equal(match_all(ix, t, 3 * BT, 0x22, hits, NULL), 1);
    assert_int_equal(hits[0].instance, 2);
    assert_int_equal(match_all(ix, t, 3 * BT, 0x11, hits, NULL), 1);
    assert_int_equal(hits[0].instance, 1);
    assert_int_equal(stats(ix).prefixes, 6);

    /* a child chained on a salted parent continues that tenant's prefix */
    assert_st(store(ix, 1, &h[3], 2, 1, h[2], BT, t + 3 * BT, 0x11, T(2)),
              LR_OK);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0x11), 5 * BT);
    assert_int_equal(held(ix, 1, t, 5 * BT, 0x22), 0);
    drop(ix);
}

/* ---- engine-hash map bound ------------------------------------------------ */

static void
test_engine_map_capacity(void **state)
{
    (void)state;
    lr_index *ix = mk(1000, 16, 4);
    uint32_t t[8 * BT], u[3 * BT];
    toks(t, 8 * BT, 40);
    toks(u, 3 * BT, 41);
    const uint64_t h[5] = { 1, 2, 3, 4, 5 };
    assert_st(store(ix, 1, h, 4, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_int_equal(stats(ix).engine_hashes, 4);

    /* nothing stale to sweep: a new hash does not fit, for anyone */
    assert_st(store(ix, 1, &h[4], 1, 1, h[3], BT, t + 4 * BT, 0, T(2)),
              LR_ELIMIT);
    assert_st(store(ix, 1, h, 5, 0, 0, BT, t, 0, T(2)), LR_ELIMIT);
    assert_st(store(ix, 2, (const uint64_t[]){ 9 }, 1, 0, 0, BT, u, 0, T(2)),
              LR_ELIMIT);
    assert_int_equal(stats(ix).instances, 1);
    assert_int_equal(held(ix, 1, t, 8 * BT, 0), 4 * BT);
    /* known hashes need no room */
    assert_st(store(ix, 1, h, 4, 0, 0, BT, t, 0, T(3)), LR_OK);

    /* removing block 1 leaves blocks 2, 3 stale: room for three new ones */
    assert_int_equal(removed(ix, 1, &h[1], 1), 1);
    assert_int_equal(stats(ix).engine_hashes, 1);
    const uint64_t g[3] = { 60, 61, 62 };
    assert_st(store(ix, 1, g, 3, 0, 0, BT, u, 0, T(4)), LR_OK);
    assert_int_equal(stats(ix).engine_hashes, 4);
    assert_int_equal(held(ix, 1, u, 3 * BT, 0), 3 * BT);
    assert_int_equal(removed(ix, 1, g, 3), 1); /* g[0] takes g[1], g[2] */
    assert_int_equal(removed(ix, 1, h, 1), 1);
    assert_int_equal(stats(ix).engine_hashes, 0);
    drop(ix);
}

/* Options from lr_index_options_init() with only capacity_blocks set: the
 * engine map follows it (two entries a block), as with
 * LR_INDEX_OPTIONS_INIT. It stayed at the default capacity's 2M before,
 * whatever capacity the host (or the router) chose. */
static void
test_engine_map_follows_capacity(void **state)
{
    (void)state;
    lr_index_options o;
    lr_index_options_init(&o);
    assert_int_equal(o.engine_map_capacity, 0);
    o.seed = OPT_SEED;
    o.capacity_blocks = 2;
    o.block_tokens = BT;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    track(ix);
    uint32_t t[BT];
    toks(t, BT, 43);
    /* one block under five engine hashes: four entries fit */
    for (uint64_t k = 0; k < 4; k++)
        assert_st(store(ix, 1, (const uint64_t[]){ 100 + k }, 1, 0, 0, BT, t, 0,
                        T(1)),
                  LR_OK);
    assert_int_equal(stats(ix).engine_hashes, 4);
    assert_st(store(ix, 1, (const uint64_t[]){ 104 }, 1, 0, 0, BT, t, 0, T(1)),
              LR_ELIMIT);
    drop(ix);
}

/* The bound holds however the entries are counted: after any successful
 * store the index remembers at most engine_map_capacity engine hashes. */
static void
test_engine_map_never_exceeds_capacity(void **state)
{
    (void)state;
    lr_index *ix = mk(1000, 16, 4);
    uint32_t t[5 * BT];
    toks(t, 5 * BT, 42);
    const uint64_t h[5] = { 1, 2, 3, 4, 5 };
    assert_st(store(ix, 1, h, 4, 0, 0, BT, t, 0, T(1)), LR_OK);
    assert_int_equal(removed(ix, 1, &h[1], 1), 1); /* 2, 3 now stale */
    /* this event needs five live entries; four are allowed */
    lr_status st = store(ix, 1, h, 5, 0, 0, BT, t, 0, T(2));
    if (st == LR_OK) {
        lr_index_stats s = stats(ix);
        if (s.engine_hashes > 4)
            fail_msg("kv_stored returned LR_OK but the index now remembers "
                     "%llu engine hashes, engine_map_capacity is 4",
                     (unsigned long long)s.engine_hashes);
    } else {
        assert_st(st, LR_ELIMIT);
    }
    drop(ix);
}

/* ---- capacity pressure ---------------------------------------------------- */

/* Root chains of 1..3 engine blocks stored into a small index: it never
 * holds more than capacity_blocks routes, and exactly the engine blocks it
 * still holds resolve on removal. */
static void
check_capacity_pressure(uint32_t bs, uint64_t cap, uint64_t emap_cap)
{
    enum {
        NCH = 60,
        MAXB = 3
    };
    const uint32_t m = bs / BT;
    lr_index *ix = mk(cap, 16, emap_cap);
    static uint32_t tk[NCH][MAXB * 64];
    uint64_t hs[NCH][MAXB];
    uint32_t nb[NCH], inst[NCH];
    uint64_t seed = 1000 + bs;
    for (uint32_t c = 0; c < NCH; c++) {
        nb[c] = 1 + (uint32_t)tu_below(&seed, MAXB);
        inst[c] = 1 + c % 3;
        toks(tk[c], (size_t)nb[c] * bs, 5000 + c);
        for (uint32_t j = 0; j < nb[c]; j++)
            hs[c][j] = tu_rand(&seed);
        lr_status st =
            store(ix, inst[c], hs[c], nb[c], 0, 0, bs, tk[c], 0, T(1 + c));
        if (st != LR_OK)
            fail_msg("bs %u cap %llu: store of chain %u returned %s", bs,
                     (unsigned long long)cap, c, lr_status_name(st));
        lr_index_stats s = stats(ix);
        assert_true(s.blocks <= cap);
        /* the chain just stored is the most recent: it is held whole */
        assert_int_equal(held(ix, inst[c], tk[c], (size_t)nb[c] * bs, 0),
                         nb[c] * bs);
        /* a touching match makes an older chain recent again */
        if (c >= 4 && c % 4 == 0)
            touch_match(ix, tk[c - 4], (size_t)nb[c - 4] * bs, T(1 + c));
    }
    lr_index_stats s = stats(ix);
    assert_true(s.evicted_blocks > 0);

    /* what is held is whole engine blocks; removing deepest first, exactly
     * the held ones resolve */
    uint64_t live_total = 0;
    uint32_t live[NCH];
    for (uint32_t c = 0; c < NCH; c++) {
        uint32_t tokens = held(ix, inst[c], tk[c], (size_t)nb[c] * bs, 0);
        assert_int_equal(tokens % bs, 0);
        live[c] = tokens / bs;
        live_total += live[c];
        uint64_t keys[MAXB * 4];
        size_t nk = 0;
        assert_st(lr_block_keys(BT, tk[c], (size_t)nb[c] * bs, 0, keys,
                                MAXB * 4, &nk),
                  LR_OK);
        assert_int_equal(lr__index_depth_of(ix, inst[c], keys, (uint32_t)nk),
                         live[c] * m);
    }
    assert_int_equal(stats(ix).engine_hashes, live_total);
    for (uint32_t c = 0; c < NCH; c++) {
        /* an evicted parent cannot be chained on */
        if (live[c] < nb[c] && live[c] + 1 < nb[c]) {
            uint32_t j = live[c] + 1;
            assert_st(store(ix, inst[c], &hs[c][j], 1, 1, hs[c][j - 1], bs,
                            tk[c] + (size_t)j * bs, 0, T(100)),
                      LR_ENOENT);
        }
        uint64_t rev[MAXB];
        for (uint32_t j = 0; j < nb[c]; j++)
            rev[j] = hs[c][nb[c] - 1 - j];
        assert_int_equal(removed(ix, inst[c], rev, nb[c]), live[c]);
    }
    assert_int_equal(stats(ix).blocks, 0);
    assert_int_equal(stats(ix).engine_hashes, 0);
    drop(ix);
}

static void
test_capacity_pressure_evicts_lru(void **state)
{
    (void)state;
    check_capacity_pressure(32, 16, 0); /* default engine map */
    check_capacity_pressure(64, 40, 0);
    check_capacity_pressure(16, 16, 1000);
}

/* Engine map at its default (capacity_blocks) and one index block per
 * engine block: a full index must still evict LRU routes to take new
 * events ("When full, the least recently used routes go first"). */
static void
test_capacity_pressure_default_engine_map(void **state)
{
    (void)state;
    check_capacity_pressure(16, 16, 0);
}

static void
test_capacity_lru_order(void **state)
{
    (void)state;
    lr_index *ix = mk(8, 16, 100);
    uint32_t t[5][2 * BT];
    uint64_t h[5][2];
    for (int c = 0; c < 5; c++) {
        toks(t[c], 2 * BT, 60 + (uint64_t)c);
        h[c][0] = 100 + (uint64_t)c * 2;
        h[c][1] = 101 + (uint64_t)c * 2;
    }
    for (int c = 0; c < 4; c++)
        assert_st(store(ix, 1, h[c], 2, 0, 0, BT, t[c], 0, T(1 + c)), LR_OK);
    /* a touching match makes chain 0 recent; chain 1 is now the oldest */
    touch_match(ix, t[0], 2 * BT, T(10));
    assert_st(store(ix, 1, h[4], 2, 0, 0, BT, t[4], 0, T(11)), LR_OK);
    assert_int_equal(held(ix, 1, t[0], 2 * BT, 0), 2 * BT);
    assert_int_equal(held(ix, 1, t[1], 2 * BT, 0), 0);
    for (int c = 2; c < 5; c++)
        assert_int_equal(held(ix, 1, t[c], 2 * BT, 0), 2 * BT);
    assert_int_equal(removed(ix, 1, h[1], 2), 0);
    const uint64_t back[2] = { h[0][1], h[0][0] };
    assert_int_equal(removed(ix, 1, back, 2), 2);
    drop(ix);
}

/* ---- randomized differential test (B34) ------------------------------------ */

/* Documents share prefixes of arbitrary length (sometimes inside an engine
 * block). Engine hashes are content hashes, as an engine's are: the chained
 * keys of the document at the engine's block size, scrambled. */
#define DF_DOCS 24
#define DF_TOK 512
#define DF_INST 4
#define DF_IB (DF_TOK / BT) /* index blocks per document */
static const uint32_t df_bs[DF_INST] = { 16, 32, 64, 32 };

struct mblk {
    uint64_t h;
    uint64_t parent;
    uint32_t doc;   /* a document whose prefix this block ends */
    uint32_t depth; /* engine blocks up to and including this one */
    bool live;
};

struct minst {
    struct mblk b[DF_DOCS * DF_IB];
    size_t n;
    bool seen;
};

struct df {
    uint32_t tok[DF_DOCS][DF_TOK];
    uint64_t ikey[DF_DOCS][DF_IB];          /* index keys */
    uint64_t ekey[DF_INST][DF_DOCS][DF_IB]; /* engine hashes */
    struct minst in[DF_INST];
    uint64_t scratch[DF_DOCS * DF_IB * DF_IB];
};

static struct mblk *
m_find(struct minst *mi, uint64_t h)
{
    for (size_t i = 0; i < mi->n; i++)
        if (mi->b[i].h == h)
            return &mi->b[i];
    return NULL;
}

static bool
m_live(struct minst *mi, uint64_t h)
{
    struct mblk *b = m_find(mi, h);
    return b != NULL && b->live;
}

static bool
m_descends(struct minst *mi, struct mblk *b, uint64_t anc)
{
    for (;;) {
        if (b->h == anc)
            return true;
        if (b->depth <= 1)
            return false;
        b = m_find(mi, b->parent);
        if (b == NULL)
            fail_msg("model: a live block lost its parent");
    }
}

/* Expected index depth (blocks) of instance i for a prompt's keys. */
static uint32_t
m_depth(const struct df *D, uint32_t i, const uint64_t *pk, uint32_t npk)
{
    const struct minst *mi = &D->in[i];
    uint32_t m = df_bs[i] / BT, best = 0;
    for (size_t k = 0; k < mi->n; k++) {
        const struct mblk *b = &mi->b[k];
        if (!b->live)
            continue;
        uint32_t lim = b->depth * m;
        if (lim > npk)
            lim = npk;
        uint32_t l = 0;
        while (l < lim && D->ikey[b->doc][l] == pk[l])
            l++;
        if (l > best)
            best = l;
    }
    return best;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Distinct index prefixes instance i holds, by the model. */
static uint64_t
m_blocks(struct df *D, uint32_t i)
{
    const struct minst *mi = &D->in[i];
    uint32_t m = df_bs[i] / BT;
    size_t n = 0;
    for (size_t k = 0; k < mi->n; k++) {
        if (!mi->b[k].live)
            continue;
        for (uint32_t l = 0; l < mi->b[k].depth * m; l++)
            D->scratch[n++] = D->ikey[mi->b[k].doc][l];
    }
    qsort(D->scratch, n, sizeof D->scratch[0], cmp_u64);
    uint64_t d = 0;
    for (size_t k = 0; k < n; k++)
        d += k == 0 || D->scratch[k] != D->scratch[k - 1];
    return d;
}

static void
df_probe(struct df *D, lr_index *ix, uint64_t *rs, uint32_t step)
{
    uint32_t p[DF_TOK + 48];
    uint32_t d = (uint32_t)tu_below(rs, DF_DOCS);
    size_t L = tu_below(rs, DF_TOK + 1);
    size_t tail = tu_below(rs, 3) == 0 ? 0 : tu_below(rs, 48);
    memcpy(p, D->tok[d], L * sizeof *p);
    for (size_t k = 0; k < tail; k++)
        p[L + k] = (uint32_t)tu_rand(rs) | 0x80000000u; /* never in a doc */
    size_t n = L + tail;
    uint64_t pk[(DF_TOK + 48) / BT];
    size_t npk = 0;
    assert_st(lr_block_keys(BT, p, n, 0, pk, sizeof pk / sizeof pk[0], &npk),
              LR_OK);

    lr_index_hit want[DF_INST], hits[MAX_HITS];
    size_t nw = 0;
    uint64_t wdeep = 0;
    for (uint32_t i = 0; i < DF_INST; i++) {
        uint32_t dep = m_depth(D, i, pk, (uint32_t)npk);
        if (lr__index_depth_of(ix, i + 1, pk, (uint32_t)npk) != dep)
            fail_msg("step %u: depth_of(inst %u) = %u, model %u", step, i + 1,
                     lr__index_depth_of(ix, i + 1, pk, (uint32_t)npk), dep);
        if (dep == 0)
            continue;
        size_t j = nw++;
        while (j > 0 && want[j - 1].tokens < dep * BT) {
            want[j] = want[j - 1];
            j--;
        }
        want[j].instance = i + 1;
        want[j].tokens = dep * BT;
        if (dep * BT > wdeep)
            wdeep = dep * BT;
    }
    uint64_t deep = 0;
    size_t nh = match_all(ix, p, n, 0, hits, &deep);
    if (nh != nw)
        fail_msg("step %u: match reports %zu instances, model %zu", step, nh,
                 nw);
    for (size_t k = 0; k < nh; k++)
        if (hits[k].instance != want[k].instance ||
            hits[k].tokens != want[k].tokens)
            fail_msg("step %u: hit %zu is (inst %u, %u tokens), model (inst "
                     "%u, %u tokens)",
                     step, k, hits[k].instance, hits[k].tokens,
                     want[k].instance, want[k].tokens);
    assert_int_equal(deep, wdeep);
}

static void
df_totals(struct df *D, lr_index *ix, uint32_t step)
{
    uint64_t blocks = 0, live = 0;
    for (uint32_t i = 0; i < DF_INST; i++) {
        struct minst *mi = &D->in[i];
        uint64_t v = 0;
        lr_status st = lr_index_instance_blocks(ix, i + 1, &v);
        if (!mi->seen) {
            assert_st(st, LR_ENOENT);
            continue;
        }
        assert_st(st, LR_OK);
        uint64_t want = m_blocks(D, i);
        if (v != want)
            fail_msg("step %u: instance %u holds %llu blocks, model %llu", step,
                     i + 1, (unsigned long long)v, (unsigned long long)want);
        blocks += want;
        for (size_t k = 0; k < mi->n; k++)
            live += mi->b[k].live;
    }
    lr_index_stats s = stats(ix);
    assert_int_equal(s.blocks, blocks);
    assert_int_equal(s.remote_blocks, 0);
    if (s.engine_hashes != live)
        fail_msg("step %u: %llu engine hashes resolve, model %llu", step,
                 (unsigned long long)s.engine_hashes, (unsigned long long)live);
}

static void
test_random_differential(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index-kv differential", 0x6b76646966660001ull);
    uint64_t rs = seed;
    static struct df storage; /* static: nothing to leak on failure */
    struct df *D = &storage;
    memset(D, 0, sizeof *D);

    /* documents: random, each sharing a random-length prefix with an
     * earlier one more often than not */
    for (uint32_t d = 0; d < DF_DOCS; d++) {
        toks(D->tok[d], DF_TOK, tu_rand(&rs));
        if (d > 0 && tu_below(&rs, 10) < 7) {
            uint32_t from = (uint32_t)tu_below(&rs, d);
            size_t share = tu_below(&rs, 2) ? tu_below(&rs, DF_TOK)
                                            : BT * tu_below(&rs, DF_IB);
            memcpy(D->tok[d], D->tok[from], share * sizeof(uint32_t));
        }
        size_t nk = 0;
        assert_st(
            lr_block_keys(BT, D->tok[d], DF_TOK, 0, D->ikey[d], DF_IB, &nk),
            LR_OK);
        for (uint32_t i = 0; i < DF_INST; i++) {
            assert_st(lr_block_keys(df_bs[i], D->tok[d], DF_TOK, 0xe5,
                                    D->ekey[i][d], DF_IB, &nk),
                      LR_OK);
            for (size_t k = 0; k < nk; k++)
                D->ekey[i][d][k] ^= 0x9e3779b97f4a7c15ull;
        }
    }

    struct mkopt mo = { .cap = 1u << 20, .max_inst = 16, .ttl = UINT64_MAX };
    lr_index *ix = mk_with(&mo);
    const uint32_t steps = 4000;
    uint64_t n_ok = 0, n_enoent = 0, n_resolved = 0;
    for (uint32_t step = 0; step < steps; step++) {
        uint32_t i = (uint32_t)tu_below(&rs, DF_INST);
        struct minst *mi = &D->in[i];
        uint32_t bs = df_bs[i], J = DF_TOK / bs;
        uint64_t now = T(1) + (uint64_t)step * 1000000u;
        uint64_t r = tu_below(&rs, 100);
        if (r < 62) {
            /* BlockStored */
            uint32_t d = (uint32_t)tu_below(&rs, DF_DOCS);
            uint32_t j0;
            if (tu_below(&rs, 10) < 5) {
                j0 = 0; /* continue the live chain of this document */
                while (j0 < J && m_live(mi, D->ekey[i][d][j0]))
                    j0++;
                if (j0 == J || tu_below(&rs, 4) == 0)
                    j0 = (uint32_t)tu_below(&rs, j0 + (j0 < J));
            } else {
                j0 = (uint32_t)tu_below(&rs, J);
            }
            uint32_t k = 1 + (uint32_t)tu_below(&rs, J - j0 < 4 ? J - j0 : 4);
            uint64_t parent = j0 > 0 ? D->ekey[i][d][j0 - 1] : 0;
            lr_status want = j0 > 0 && !m_live(mi, parent) ? LR_ENOENT : LR_OK;
            lr_status st =
                store(ix, i + 1, &D->ekey[i][d][j0], k, j0 > 0, parent, bs,
                      D->tok[d] + (size_t)j0 * bs, 0, now);
            if (st != want)
                fail_msg("step %u: store inst %u doc %u blocks [%u, %u) "
                         "returned %s, model %s",
                         step, i + 1, d, j0, j0 + k, lr_status_name(st),
                         lr_status_name(want));
            if (st == LR_OK) {
                n_ok++;
                mi->seen = true;
                for (uint32_t j = j0; j < j0 + k; j++) {
                    struct mblk *b = m_find(mi, D->ekey[i][d][j]);
                    if (b == NULL) {
                        b = &mi->b[mi->n++];
                        b->h = D->ekey[i][d][j];
                        b->parent = j > 0 ? D->ekey[i][d][j - 1] : 0;
                        b->doc = d;
                        b->depth = j + 1;
                    }
                    b->live = true;
                }
            } else {
                n_enoent++;
            }
        } else if (r < 97) {
            /* BlockRemoved: known hashes (live or not), unknown ones */
            uint64_t hs[4];
            size_t n = 1 + tu_below(&rs, 4);
            for (size_t k = 0; k < n; k++) {
                uint64_t c = tu_below(&rs, 100);
                if (c < 70 && mi->n > 0)
                    hs[k] = mi->b[tu_below(&rs, mi->n)].h;
                else if (c < 85)
                    hs[k] =
                        D->ekey[i][tu_below(&rs, DF_DOCS)][tu_below(&rs, J)];
                else
                    hs[k] = tu_rand(&rs);
            }
            size_t res = 0;
            lr_status st = removed_st(ix, i + 1, hs, n, &res);
            if (!mi->seen) {
                assert_st(st, LR_ENOENT);
                continue;
            }
            assert_st(st, LR_OK);
            size_t want = 0;
            for (size_t k = 0; k < n; k++) {
                struct mblk *x = m_find(mi, hs[k]);
                if (x == NULL || !x->live)
                    continue;
                want++;
                for (size_t q = 0; q < mi->n; q++)
                    if (mi->b[q].live && m_descends(mi, &mi->b[q], x->h))
                        mi->b[q].live = false;
            }
            if (res != want)
                fail_msg("step %u: kv_removed inst %u resolved %zu of %zu, "
                         "model %zu",
                         step, i + 1, res, n, want);
            n_resolved += res;
        } else {
            /* AllBlocksCleared */
            lr_status st = cleared(ix, i + 1);
            assert_st(st, mi->seen ? LR_OK : LR_ENOENT);
            for (size_t q = 0; q < mi->n; q++)
                mi->b[q].live = false;
        }
        if (step % 8 == 7)
            for (int k = 0; k < 4; k++)
                df_probe(D, ix, &rs, step);
        if (step % 50 == 49)
            df_totals(D, ix, step);
    }
    df_totals(D, ix, steps);
    /* the stream exercised every path */
    assert_true(n_ok > 1000);
    assert_true(n_enoent > 50);
    assert_true(n_resolved > 200);
    drop(ix);
}

/* ---- OOM (B33) ------------------------------------------------------------- */

struct oom_ctx {
    struct clean_end ref; /* digest after a run with no failure */
    unsigned enomem;      /* calls that reported LR_ENOMEM */
};

#define OOM_STEPS 4

static lr_status
oom_step(lr_index *ix, int k, const uint32_t *tok)
{
    static const uint64_t base[OOM_STEPS] = { 0x1000, 0x2000, 0x3000, 0x4000 };
    uint64_t h[128];
    lr_kv_stored ev = LR_KV_STORED_INIT;
    for (int j = 0; j < 128; j++)
        h[j] = base[k] + (uint64_t)j;
    ev.block_hashes = h;
    switch (k) {
    case 0: /* a new instance, 90 engine blocks of 2 index blocks; the first
             * 40 index blocks are shared with instances 1 and 2 */
        ev.n_blocks = 90;
        ev.block_size = 2 * BT;
        ev.token_ids = tok;
        break;
    case 1: /* instance 1 extends its chain by 70 blocks */
        ev.n_blocks = 70;
        ev.block_size = BT;
        ev.has_parent = 1;
        ev.parent_hash = 0x100 + 39;
        ev.token_ids = tok + 40 * BT;
        break;
    case 2: /* instance 2 re-stores what it holds plus 30 more */
        ev.n_blocks = 40;
        ev.block_size = BT;
        ev.token_ids = tok;
        for (int j = 0; j < 10; j++)
            h[j] = 0x200 + (uint64_t)j;
        break;
    default: /* a new instance, 50 engine blocks of 4 index blocks */
        ev.n_blocks = 50;
        ev.block_size = 4 * BT;
        ev.token_ids = tok + 1000 * BT;
        break;
    }
    ev.n_tokens = ev.n_blocks * ev.block_size;
    static const uint32_t inst[OOM_STEPS] = { 3, 1, 2, 4 };
    return lr_index_kv_stored(ix, inst[k], &ev, T(10 + k));
}

static uint32_t oom_tok[1200 * BT];

static bool
oom_kv_stored(struct tu_alloc *t, void *vctx)
{
    struct oom_ctx *ctx = vctx;
    struct tu_arming arm = tu_alloc_pause(t);

    /* pre-populated: two instances sharing a prefix, 40 engine hashes */
    struct mkopt mo = { .cap = 100000, .max_inst = 8, .a = &t->a };
    lr_index *ix = mk_with(&mo);
    uint64_t h1[40], h2[10];
    for (int j = 0; j < 40; j++)
        h1[j] = 0x100 + (uint64_t)j;
    for (int j = 0; j < 10; j++)
        h2[j] = 0x200 + (uint64_t)j;
    assert_st(store(ix, 1, h1, 40, 0, 0, BT, oom_tok, 0, T(1)), LR_OK);
    assert_st(store(ix, 2, h2, 10, 0, 0, BT, oom_tok, 0, T(2)), LR_OK);

    tu_alloc_resume(t, arm);
    for (int k = 0; k < OOM_STEPS; k++) {
        uint64_t before = lr__index_digest(ix);
        lr_status st = oom_step(ix, k, oom_tok);
        verify_quiet(t, ix);
        if (st == LR_OK)
            continue;
        char what[16];
        snprintf(what, sizeof what, "step %d", k);
        assert_enomem_unchanged(ix, what, st, before, arm.fail_at);
        /* the index is still usable: finish with no failures */
        tu_alloc_disarm(t);
        ctx->enomem++;
        assert_st(oom_step(ix, k, oom_tok), LR_OK);
        assert_verified(ix);
    }
    tu_alloc_disarm(t);
    assert_clean_end(&ctx->ref, ix, arm.fail_at);
    assert_int_equal(held(ix, 1, oom_tok, 110 * BT, 0), 110 * BT);
    assert_int_equal(held(ix, 3, oom_tok, 180 * BT, 0), 180 * BT);
    drop(ix);
    return !t->failed;
}

static void
test_oom_kv_stored(void **state)
{
    (void)state;
    toks(oom_tok, sizeof oom_tok / sizeof oom_tok[0], 77);
    struct oom_ctx ctx = { 0 };
    struct tu_alloc t;
    tu_alloc_init(&t);
    assert_true(oom_kv_stored(&t, &ctx)); /* reference run */
    assert_true(ctx.ref.have);
    assert_int_equal(t.live_bytes, 0);
    tu_oom_loop(oom_kv_stored, &ctx, 10000);
    /* every step allocates, in both modes */
    assert_true(ctx.enomem >= 2 * OOM_STEPS);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stored_chain_with_parent, teardown),
        cmocka_unit_test_teardown(test_engine_block_spans_index_blocks,
                                  teardown),
        cmocka_unit_test_teardown(test_engine_block_sizes_mixed, teardown),
        cmocka_unit_test_teardown(test_stored_rejects, teardown),
        cmocka_unit_test_teardown(test_stored_max_instances, teardown),
        cmocka_unit_test_teardown(test_removed_keeps_routes_not_yet_stored,
                                  teardown),
        cmocka_unit_test_teardown(test_removed_interior_takes_deeper, teardown),
        cmocka_unit_test_teardown(test_removed_unknown_hashes_and_instances,
                                  teardown),
        cmocka_unit_test_teardown(test_cleared_keeps_instance, teardown),
        cmocka_unit_test_teardown(test_restore_refreshes_not_duplicates,
                                  teardown),
        cmocka_unit_test_teardown(test_tenant_salt_separates, teardown),
        cmocka_unit_test_teardown(test_engine_map_capacity, teardown),
        cmocka_unit_test_teardown(test_engine_map_follows_capacity, teardown),
        cmocka_unit_test_teardown(test_engine_map_never_exceeds_capacity,
                                  teardown),
        cmocka_unit_test_teardown(test_capacity_pressure_evicts_lru, teardown),
        cmocka_unit_test_teardown(test_capacity_pressure_default_engine_map,
                                  teardown),
        cmocka_unit_test_teardown(test_capacity_lru_order, teardown),
        cmocka_unit_test_teardown(test_random_differential, teardown),
        cmocka_unit_test_teardown(test_oom_kv_stored, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
