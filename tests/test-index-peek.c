/* lr__index_peek(), the read-only match for concurrent routing (B34).
 *
 * Differential: random index states (learns LOCAL and REMOTE, KV events,
 * imports from a second index, removals, touching matches, time that
 * expires routes), and at every checkpoint, once expiry is settled, peek
 * and lr_index_match(LR_MATCH_NO_TOUCH) must give the same status, counts
 * and hits for prompts that hit, miss, fork and overflow the hits buffer.
 * Each peek must leave lr__index_digest() and every byte of the index's
 * struct (counters, clock, time base, probe count, its own match scratch)
 * as they were, whatever it returns. A cut peek (a large fleet's route)
 * reports the deepest of those hits, and the instances it left out,
 * asked one by one or sampled, answer the rest. Then the statuses peek
 * documents, lr__index_expiry_due() and an OOM loop over the scratch's
 * allocation. LR_TEST_SEED replays a seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index-helpers.h"

#define PB 4u        /* block tokens */
#define MAX_TOK 200u /* tokens of a prompt */
#define N_INST 6u    /* instance ids 1..N_INST (and 99, never learned) */
#define N_PATTERNS                                            \
    5u /* prompts share prefixes: few patterns, tiny alphabet \
        */
#define HITS 8u

/* What the differential run met, so that it cannot pass by testing
 * nothing: peeks with hits, with hits of several instances, too small a
 * buffer, and expiry settled by a writer before a peek. */
struct tally {
    uint64_t hits, multi, bufsize, expired, cut;
};

struct raw {
    uint8_t *bytes;
    size_t size;
};

static struct raw
raw_copy(const lr_index *ix)
{
    size_t n;
    const void *p = lr__index_raw(ix, &n);
    struct raw r = { malloc(n), n };
    assert_non_null(r.bytes);
    memcpy(r.bytes, p, n);
    return r;
}

static void
raw_same(const lr_index *ix, const struct raw *r, const char *what)
{
    size_t n;
    const void *p = lr__index_raw(ix, &n);
    if (n != r->size || memcmp(p, r->bytes, n) != 0)
        fail_msg("%s wrote into the index's struct", what);
}

/* A prompt of n tokens from pattern pat, forked at `fork` (n: none). */
static void
pattern(uint32_t *t, uint32_t n, uint32_t pat, uint32_t fork)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = (pat * 31u + i * (pat % 3u + 1u)) % 11u;
    if (fork < n)
        t[fork] ^= 0x100u;
}

struct pr {
    uint32_t tok[MAX_TOK];
    uint64_t keys[MAX_TOK / PB];
    uint32_t n;
    size_t n_keys;
    uint64_t salt;
};

static void
random_prompt(uint64_t *rs, struct pr *p)
{
    p->n = (uint32_t)tu_below(rs, MAX_TOK + 1);
    uint32_t fork = (uint32_t)tu_below(rs, p->n + 1 + p->n / 2);
    pattern(p->tok, p->n, (uint32_t)tu_below(rs, N_PATTERNS), fork);
    p->salt = tu_below(rs, 4) == 0 ? 7 : 0;
    assert_st(lr_block_keys(PB, p->tok, p->n, p->salt, p->keys, MAX_TOK / PB,
                            &p->n_keys),
              LR_OK);
}

static lr_prompt
as_prompt(const struct pr *p)
{
    lr_prompt q;
    lr_prompt_init(&q);
    q.tokens = p->tok;
    q.n_tokens = p->n;
    q.tenant_salt = p->salt;
    return q;
}

/* Peek, require that it wrote nothing; then match with NO_TOUCH and
 * require the same answer. The hits buffer holds cap hits. */
/* Two match results over hit buffers a and b of cap entries each. */
static void
results_on(lr_index_match_result *ra, lr_index_hit *a,
           lr_index_match_result *rb, lr_index_hit *b, size_t cap)
{
    lr_index_match_result_init(ra);
    lr_index_match_result_init(rb);
    ra->hits = a;
    rb->hits = b;
    ra->hits_capacity = rb->hits_capacity = cap;
}

static void
peek_vs_match(lr_index *ix, struct lr__match_scratch *ms, const struct pr *p,
              uint64_t now, size_t cap, uint64_t seed, int step,
              struct tally *tl)
{
    lr_index_hit ha[HITS], hb[HITS];
    memset(ha, 0xa5, sizeof ha);
    memset(hb, 0xa5, sizeof hb);
    lr_index_match_result ra, rb;
    results_on(&ra, ha, &rb, hb, cap);

    uint64_t d0 = lr__index_digest(ix);
    struct raw r0 = raw_copy(ix);
    lr_status sa = lr__index_peek(ix, p->keys, p->n_keys, now, ms, &ra);
    raw_same(ix, &r0, "lr__index_peek");
    assert_int_equal(lr__index_digest(ix), d0);
    free(r0.bytes);

    lr_prompt q = as_prompt(p);
    lr_status sb = lr_index_match(ix, &q, now, LR_MATCH_NO_TOUCH, &rb);
    assert_int_equal(lr__index_digest(ix), d0);
    if (sa != sb || ra.n_hits != rb.n_hits ||
        ra.prompt_blocks != rb.prompt_blocks ||
        ra.deepest_tokens != rb.deepest_tokens)
        fail_msg("seed %llu step %d: peek %s n_hits %zu deepest %llu, match "
                 "%s n_hits %zu deepest %llu",
                 (unsigned long long)seed, step, lr_status_name(sa), ra.n_hits,
                 (unsigned long long)ra.deepest_tokens, lr_status_name(sb),
                 rb.n_hits, (unsigned long long)rb.deepest_tokens);
    tl->hits += ra.n_hits > 0;
    tl->multi += ra.n_hits > 1;
    tl->bufsize += sa == LR_EBUFSIZE;
    /* LR_EBUFSIZE writes no hit: the buffers stay alike too */
    if (memcmp(ha, hb, sizeof ha) != 0)
        fail_msg("seed %llu step %d: peek and match hits differ",
                 (unsigned long long)seed, step);
}

/* The tokens of instance id among n hits (0: none). */
static uint64_t
tokens_of(const lr_index_hit *h, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].instance == id)
            return h[i].tokens;
    return 0;
}

/* A cut peek against the whole one: it reports the deepest holders (each
 * with its whole hit, every one it leaves out holding no more than the
 * least of them, all of them when it cuts nothing); asked one by one,
 * the others answer the whole peek's hits, once; a sample of the cut's
 * run is some of them, and all of them when it may take that many. */
static void
cut_vs_whole(lr_index *ix, struct lr__match_scratch *ms, const struct pr *p,
             uint64_t now, uint64_t *rs, uint64_t seed, int step,
             struct tally *tl)
{
    lr_index_hit whole[HITS], cut[HITS], smp[HITS];
    lr_index_match_result rw, rc;
    results_on(&rw, whole, &rc, cut, HITS);
    if (lr__index_peek(ix, p->keys, p->n_keys, now, ms, &rw) != LR_OK)
        return;
    struct lr__peek_cut c = { (uint32_t)tu_below(rs, N_INST + 1),
                              (uint32_t)tu_below(rs, N_INST + 1), 7 };
    struct raw r0 = raw_copy(ix);
    assert_st(lr__index_peek_cut(ix, p->keys, p->n_keys, now, ms, &c, &rc),
              LR_OK);
    raw_same(ix, &r0, "lr__index_peek_cut");
    free(r0.bytes);
    assert_int_equal(rc.deepest_tokens, rw.deepest_tokens);
    uint64_t least = UINT64_MAX;
    for (size_t i = 0; i < rc.n_hits; i++) {
        if (tokens_of(whole, rw.n_hits, cut[i].instance) != cut[i].tokens)
            fail_msg("seed %llu step %d: cut hit %u of %llu tokens",
                     (unsigned long long)seed, step, cut[i].instance,
                     (unsigned long long)cut[i].tokens);
        least = cut[i].tokens < least ? cut[i].tokens : least;
    }
    /* cut at once: the prompt's deepest node, as the search finds it */
    struct lr__peek_cut c0 = { 0, 0, 7 };
    assert_st(lr__index_peek_cut(ix, p->keys, p->n_keys, now, ms, &c0, &rc),
              LR_OK);
    assert_int_equal(rc.n_hits, 0);
    assert_int_equal(c0.node, lr__index_deepest_node(ix, p->keys, p->n_keys));
    assert_int_equal(c0.node == LR_NIL, rw.n_hits == 0);
    assert_st(lr__index_peek_cut(ix, p->keys, p->n_keys, now, ms, &c, &rc),
              LR_OK);
    if (c.node == LR_NIL) {
        assert_int_equal(rc.n_hits, rw.n_hits);
        return;
    }
    tl->cut += rc.n_hits < rw.n_hits;
    /* none reported: the deepest are more than the cut reads as few */
    if (rc.n_hits == 0 && c.enough > 0) {
        uint32_t deepest = 0;
        for (size_t i = 0; i < rw.n_hits; i++)
            deepest += whole[i].tokens == rw.deepest_tokens;
        assert_true(deepest > c.defer);
    }
    /* a sample of every holder of the cut's run left (asked: remembered) */
    size_t ns = lr__index_sample_at(ix, ms, c.node, tu_rand(rs), HITS, smp);
    /* HITS holds every instance: the sample reads every run up the path */
    assert_int_equal(ns, rw.n_hits - rc.n_hits);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(tokens_of(cut, rc.n_hits, smp[i].instance), 0);
        assert_int_equal(tokens_of(whole, rw.n_hits, smp[i].instance),
                         smp[i].tokens);
    }
    for (uint32_t id = 1; id <= N_INST + 1; id++) {
        uint32_t q = id <= N_INST ? id : 99;
        uint64_t want = tokens_of(whole, rw.n_hits, q);
        bool told =
            tokens_of(cut, rc.n_hits, q) > 0 || tokens_of(smp, ns, q) > 0;
        uint64_t got = (uint64_t)lr__index_depth_below(ix, ms, c.node, q) * PB;
        if (got != (told ? 0 : want))
            fail_msg("seed %llu step %d: instance %u holds %llu tokens, "
                     "asked after the cut %llu",
                     (unsigned long long)seed, step, q,
                     (unsigned long long)want, (unsigned long long)got);
        assert_true(want < least || tokens_of(cut, rc.n_hits, q) > 0);
        assert_int_equal(lr__index_depth_below(ix, ms, c.node, q), 0);
    }
}

static lr_status
kv_event(lr_index *ix, uint64_t *rs, const struct pr *p, uint32_t inst,
         uint64_t now)
{
    uint64_t hashes[MAX_TOK / PB];
    size_t nb = p->n / (2 * PB); /* engine blocks of two index blocks */
    for (size_t i = 0; i < nb; i++)
        hashes[i] = p->keys[2 * i + 1] % 64; /* collide now and then */
    lr_kv_stored ev;
    lr_kv_stored_init(&ev);
    ev.block_hashes = hashes;
    ev.n_blocks = nb;
    ev.block_size = 2 * PB;
    ev.token_ids = p->tok;
    ev.n_tokens = nb * 2 * PB;
    ev.tenant_salt = p->salt;
    if (tu_below(rs, 3) == 0) {
        ev.has_parent = 1;
        ev.parent_hash = tu_below(rs, 64);
    }
    return lr_index_kv_stored(ix, inst, &ev, now);
}

static lr_index *
make_index(uint64_t *rs, uint64_t ttl_ns, uint32_t max_inst)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = PB;
    o.capacity_blocks = 40 + tu_below(rs, 400);
    o.max_instances = max_inst;
    o.ttl_ns = ttl_ns;
    o.remote_ttl_ns = tu_below(rs, 2) ? ttl_ns / 2 : 0;
    o.eviction = tu_below(rs, 2) ? LR_EVICT_LRU : LR_EVICT_REMOTE_FIRST;
    o.seed = tu_rand(rs);
    lr_index *ix;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    return ix;
}

static void
run_diff(uint64_t seed, int steps, struct tally *tl)
{
    uint64_t rs = seed;
    uint64_t ttl =
        tu_below(&rs, 3) == 0 ? UINT64_MAX : (8ull + tu_below(&rs, 60)) << 24;
    uint32_t max_inst = 1 + (uint32_t)tu_below(&rs, N_INST);
    lr_index *ix = make_index(&rs, ttl, max_inst);
    lr_index *other = make_index(&rs, UINT64_MAX, N_INST + 1);
    struct lr__match_scratch *ms;
    assert_st(lr__index_scratch_new(ix, lr__index_mem(ix), &ms), LR_OK);
    uint64_t now = T0;
    struct pr p;
    for (int step = 0; step < steps; step++) {
        random_prompt(&rs, &p);
        lr_prompt q = as_prompt(&p);
        uint32_t inst = 1 + (uint32_t)tu_below(&rs, N_INST);
        lr_status st = LR_OK;
        switch (tu_below(&rs, 10)) {
        case 0:
        case 1:
        case 2:
            st = lr_index_learn(
                ix, &q, inst,
                tu_below(&rs, 3) ? LR_TRUST_LOCAL : LR_TRUST_REMOTE, now);
            break;
        case 3:
            st = kv_event(ix, &rs, &p, inst, now);
            break;
        case 4: { /* a touching match */
            lr_index_hit h[HITS];
            lr_index_match_result r;
            lr_index_match_result_init(&r);
            r.hits = h;
            r.hits_capacity = HITS;
            st = lr_index_match(ix, &q, now, 0, &r);
            break;
        }
        case 5: { /* another replica's routes */
            st = lr_index_learn(other, &q, inst, LR_TRUST_LOCAL, now);
            lr_blob *b = NULL;
            if (st == LR_OK)
                st = lr_index_export_delta(other, 0, &b, NULL);
            if (st == LR_OK)
                st = lr_index_import_delta(ix, lr_blob_data(b), lr_blob_size(b),
                                           now);
            lr_blob_destroy(b);
            break;
        }
        case 6:
            if (tu_below(&rs, 4) == 0)
                st = lr_index_remove_instance(ix, inst);
            break;
        default:
            now += tu_below(&rs, 3) << 24; /* 0, 1 or 2 ticks */
            break;
        }
        if (st != LR_OK && st != LR_ELIMIT && st != LR_ENOENT &&
            st != LR_EBUFSIZE)
            fail_msg("seed %llu step %d: %s", (unsigned long long)seed, step,
                     lr_status_name(st));
        /* the reader's precondition: a writer settles expiry first */
        if (lr__index_expiry_due(ix, now)) {
            tl->expired++;
            assert_st(lr_index_expire(ix, now), LR_OK);
            assert_false(lr__index_expiry_due(ix, now));
        }
        for (int k = 0; k < 4; k++) {
            random_prompt(&rs, &p);
            size_t cap = tu_below(&rs, 4) == 0 ? tu_below(&rs, 3) : HITS;
            peek_vs_match(ix, ms, &p, now, cap, seed, step, tl);
            cut_vs_whole(ix, ms, &p, now, &rs, seed, step, tl);
        }
        assert_verified(ix);
    }
    lr__index_scratch_free(lr__index_mem(ix), ms);
    lr_index_destroy(other);
    lr_index_destroy(ix);
}

static void
peek_equals_match_no_touch(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index-peek", 0x9eec);
    struct tally tl = { 0 };
    for (uint64_t i = 0; i < 24; i++)
        run_diff(seed + i * 0x9e3779b97f4a7c15ull, 400, &tl);
    if (tl.hits < 2000 || tl.multi < 500 || tl.bufsize < 200 ||
        tl.expired < 50 || tl.cut < 500)
        fail_msg("too little met: %llu peeks with hits, %llu with several, "
                 "%llu LR_EBUFSIZE, %llu expiries, %llu cut",
                 (unsigned long long)tl.hits, (unsigned long long)tl.multi,
                 (unsigned long long)tl.bufsize, (unsigned long long)tl.expired,
                 (unsigned long long)tl.cut);
    print_message("%llu cut peeks left hits out\n", (unsigned long long)tl.cut);
}

/* An index with routes for two instances, expiry settled at T0 + 1 s. */
static lr_index *
small_index(uint64_t ttl_ns)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = PB;
    o.max_instances = 4;
    o.ttl_ns = ttl_ns;
    lr_index *ix;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    uint32_t t[64];
    pattern(t, 64, 1, 64);
    lr_prompt q;
    lr_prompt_init(&q);
    q.tokens = t;
    q.n_tokens = 64;
    assert_st(lr_index_learn(ix, &q, 1, LR_TRUST_LOCAL, T0), LR_OK);
    q.n_tokens = 24;
    assert_st(lr_index_learn(ix, &q, 2, LR_TRUST_REMOTE, T0 + SEC), LR_OK);
    return ix;
}

/* Whatever peek returns, the index is as it was, byte for byte. */
static void
peek_writes_nothing(void **state)
{
    (void)state;
    lr_index *ix = small_index(10 * SEC);
    lr_index *big;
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = PB;
    o.max_instances = 16;
    assert_st(lr_index_create(&o, &big), LR_OK);
    struct lr__match_scratch *ms, *small_ms;
    assert_st(lr__index_scratch_new(ix, lr__index_mem(ix), &small_ms), LR_OK);
    assert_st(lr__index_scratch_new(big, lr__index_mem(ix), &ms), LR_OK);
    uint32_t t[64];
    pattern(t, 64, 1, 64);
    uint64_t keys[16];
    size_t nk;
    assert_st(lr_block_keys(PB, t, 64, 0, keys, 16, &nk), LR_OK);
    lr_index_hit h[HITS];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = HITS;

    uint64_t d0 = lr__index_digest(ix);
    struct raw r0 = raw_copy(ix);
    uint64_t now = T0 + 2 * SEC;
    assert_false(lr__index_expiry_due(ix, now));
    /* a hit for both, with a scratch sized for a bigger index */
    assert_st(lr__index_peek(ix, keys, nk, now, ms, &r), LR_OK);
    assert_int_equal(r.n_hits, 2);
    assert_int_equal(h[0].instance, 1);
    assert_int_equal(h[0].tokens, 64);
    assert_int_equal(h[1].instance, 2);
    assert_int_equal(h[1].tokens, 24);
    assert_int_equal(r.deepest_tokens, 64);
    assert_int_equal(r.prompt_blocks, 16);
    /* a miss, no keys */
    assert_st(lr__index_peek(ix, NULL, 0, now, small_ms, &r), LR_OK);
    assert_int_equal(r.n_hits, 0);
    assert_int_equal(r.prompt_blocks, 0);
    /* the buffer too small: the count, no hit written */
    memset(h, 0, sizeof h);
    r.hits_capacity = 1;
    assert_st(lr__index_peek(ix, keys, nk, now, small_ms, &r), LR_EBUFSIZE);
    assert_int_equal(r.n_hits, 2);
    assert_int_equal(h[0].instance, 0);
    r.hits_capacity = HITS;
    /* refused: expiry due, a time the clock refuses, bad arguments */
    assert_true(lr__index_expiry_due(ix, T0 + 12 * SEC));
    assert_st(lr__index_peek(ix, keys, nk, T0 + 12 * SEC, small_ms, &r),
              LR_ESTATE);
    assert_st(lr__index_peek(ix, keys, nk, T0 + 3600 * SEC, small_ms, &r),
              LR_ERANGE);
    assert_st(lr__index_peek(ix, NULL, 3, now, small_ms, &r), LR_EINVAL);
    assert_st(lr__index_peek(ix, keys, nk, now, NULL, &r), LR_EINVAL);
    assert_st(lr__index_peek(ix, keys, nk, now, small_ms, NULL), LR_EINVAL);
    assert_st(lr__index_peek(NULL, keys, nk, now, small_ms, &r), LR_EINVAL);
    assert_st(
        lr__index_peek(ix, keys, LR_INDEX_MAX_TOKENS + 1ull, now, small_ms, &r),
        LR_EINVAL);
    r.hits = NULL;
    assert_st(lr__index_peek(ix, keys, nk, now, small_ms, &r), LR_EINVAL);
    r.hits = h;
    r.struct_size = 8;
    assert_st(lr__index_peek(ix, keys, nk, now, small_ms, &r), LR_EVERSION);
    r.struct_size = sizeof r;
    raw_same(ix, &r0, "lr__index_peek");
    assert_int_equal(lr__index_digest(ix), d0);

    /* a scratch made for a smaller index does not fit a bigger one */
    assert_st(lr__index_peek(big, keys, nk, T0, small_ms, &r), LR_EINVAL);
    free(r0.bytes);
    lr__index_scratch_free(lr__index_mem(ix), small_ms);
    lr__index_scratch_free(lr__index_mem(ix), ms);
    lr__index_scratch_free(lr__index_mem(ix), NULL);
    lr_index_destroy(big);
    lr_index_destroy(ix);
}

/* Due exactly when a mutator at that time would change the index first. */
static void
expiry_due_is_exact(void **state)
{
    (void)state;
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = PB;
    lr_index *fresh;
    assert_st(lr_index_create(&o, &fresh), LR_OK);
    assert_true(lr__index_expiry_due(fresh, T0)); /* no time base yet */
    assert_st(lr_index_expire(fresh, T0), LR_OK);
    assert_false(lr__index_expiry_due(fresh, T0));
    assert_false(lr__index_expiry_due(fresh, T0 + 100000 * SEC));
    lr_index_destroy(fresh);

    lr_index *ix = small_index(10 * SEC);
    /* inst 1's route was used at T0, inst 2's at T0 + 1 s; a TTL of 10 s
     * is 596 ticks of 2^24 ns: due once more than that has passed */
    uint64_t ttl_ticks = (10 * SEC) >> 24;
    uint64_t edge = T0 + ((ttl_ticks + 1) << 24);
    uint64_t d0 = lr__index_digest(ix);
    for (uint64_t t = edge - (4ull << 24); t <= edge + (4ull << 24);
         t += 1ull << 22) {
        bool due = lr__index_expiry_due(ix, t);
        lr_index *copy = small_index(10 * SEC);
        assert_st(lr_index_expire(copy, t), LR_OK);
        lr_index_stats s = stats(copy);
        if (due != (s.expired_blocks > 0))
            fail_msg("at T0 + %llu ns: due %d, expire took %llu blocks",
                     (unsigned long long)(t - T0), due,
                     (unsigned long long)s.expired_blocks);
        lr_index_destroy(copy);
    }
    assert_int_equal(lr__index_digest(ix), d0);
    assert_st(lr_index_expire(ix, edge + SEC), LR_OK);
    assert_false(lr__index_expiry_due(ix, edge + SEC));
    lr_index_destroy(ix);

    lr_index *never = small_index(UINT64_MAX);
    assert_false(lr__index_expiry_due(never, UINT64_C(1) << 59));
    lr_index_destroy(never);
}

/* The scratch's allocation fails cleanly at every allocation. */
static bool
scratch_oom(struct tu_alloc *t, void *vctx)
{
    (void)vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_index_options o;
    lr_index_options_init(&o);
    o.allocator = &t->a;
    lr_index *ix;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    uint64_t d0 = lr__index_digest(ix);
    size_t live = t->live_bytes;
    tu_alloc_resume(t, arm);
    /* not NULL before: a failure must set it to NULL */
    struct lr__match_scratch *ms = (struct lr__match_scratch *)(void *)&arm;
    lr_status st = lr__index_scratch_new(ix, lr__index_mem(ix), &ms);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_null(ms);
        assert_int_equal(t->live_bytes, live);
    } else {
        assert_st(st, LR_OK);
        lr__index_scratch_free(lr__index_mem(ix), ms);
    }
    assert_int_equal(lr__index_digest(ix), d0);
    lr_index_destroy(ix);
    return !failed;
}

static void
scratch_alloc_oom(void **state)
{
    (void)state;
    tu_oom_loop(scratch_oom, NULL, 16);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(peek_equals_match_no_touch),
        cmocka_unit_test(peek_writes_nothing),
        cmocka_unit_test(expiry_due_is_exact),
        cmocka_unit_test(scratch_alloc_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
