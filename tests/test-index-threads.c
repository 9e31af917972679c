/* Several threads peek at one lr_index at once (suite 'threads';
 * tools/run-tests also runs it under ThreadSanitizer in build-ci-tsan).
 *
 * This is the router's coming read side: route()'s decision under a read
 * lock, lr__index_peek() from many threads, no writer. One index is filled
 * (shared system prompts with varied tails over a small alphabet, LOCAL and
 * REMOTE learns of several instances), its expiry settled, and each test
 * prompt's answer taken single-threaded with lr_index_match(NO_TOUCH).
 * Then N_READERS threads, each with its own scratch, started together,
 * peek at random prompts and compare every answer with that one; they
 * also ask lr__index_expiry_due(), which must stay false. At the end the
 * index must be as it was, digest and struct bytes. Under TSan a write by
 * a peek to anything the readers share is a data race and fails the run.
 *
 * LR_THREADS_OPS (default 20000) bounds the peeks of each thread;
 * LR_TEST_SEED replays a seed. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "testutil.h"

#define N_READERS 4
#define N_INST 8
#define N_SYS 6
#define N_PROMPTS 192
#define MAX_TOK 640
#define MAX_KEYS (MAX_TOK / BT)
#define DEFAULT_OPS 20000

struct prompt {
    uint32_t tok[MAX_TOK];
    uint64_t keys[MAX_KEYS];
    size_t n_tok, n_keys;
    /* lr_index_match(NO_TOUCH)'s answer */
    lr_status st;
    size_t n_hits;
    uint64_t deepest;
    lr_index_hit hits[N_INST];
};

struct shared {
    const lr_index *ix;
    const struct prompt *prompts;
    uint64_t now;
    uint64_t seed;
    uint32_t ops;
    atomic_int ready;
    atomic_uint mismatches, due;
    _Atomic uint64_t peeks, hits;
};

struct reader {
    struct shared *sh;
    struct lr__match_scratch *ms;
    int id;
};

/* A prompt: one of the system prompts, then a tail of its own. */
static void
make_prompt(uint64_t *rs, struct prompt *p)
{
    uint32_t sys = (uint32_t)tu_below(rs, N_SYS);
    size_t head = 64 + 32 * sys;
    p->n_tok = head + tu_below(rs, MAX_TOK - head + 1);
    for (size_t i = 0; i < head; i++)
        p->tok[i] = sys * 1000u + (uint32_t)i;
    uint32_t alphabet = 1 + (uint32_t)tu_below(rs, 3);
    for (size_t i = head; i < p->n_tok; i++)
        p->tok[i] = (uint32_t)tu_below(rs, alphabet);
    assert_st(
        lr_block_keys(BT, p->tok, p->n_tok, 0, p->keys, MAX_KEYS, &p->n_keys),
        LR_OK);
}

static void *
reader_main(void *arg)
{
    struct reader *r = arg;
    struct shared *sh = r->sh;
    uint64_t rs = sh->seed ^ ((uint64_t)r->id * 0x9e3779b97f4a7c15ull);
    atomic_fetch_add(&sh->ready, 1);
    while (atomic_load(&sh->ready) < N_READERS)
        sched_yield(); /* start together, so that the peeks overlap */
    uint64_t hits = 0;
    for (uint32_t i = 0; i < sh->ops; i++) {
        const struct prompt *p = &sh->prompts[tu_below(&rs, N_PROMPTS)];
        lr_index_hit h[N_INST];
        memset(h, 0, sizeof h);
        lr_index_match_result res;
        lr_index_match_result_init(&res);
        res.hits = h;
        res.hits_capacity = N_INST;
        lr_status st =
            lr__index_peek(sh->ix, p->keys, p->n_keys, sh->now, r->ms, &res);
        if (st != p->st || res.n_hits != p->n_hits ||
            res.deepest_tokens != p->deepest ||
            memcmp(h, p->hits, sizeof h) != 0)
            atomic_fetch_add(&sh->mismatches, 1);
        hits += res.n_hits;
        if (i % 64 == 0 && lr__index_expiry_due(sh->ix, sh->now))
            atomic_fetch_add(&sh->due, 1);
    }
    atomic_fetch_add(&sh->peeks, sh->ops);
    atomic_fetch_add(&sh->hits, hits);
    return NULL;
}

static void
readers_share_one_index(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index-threads", 0x7ead);
    const char *e = getenv("LR_THREADS_OPS");
    uint32_t ops =
        e != NULL && *e != '\0' ? (uint32_t)strtoul(e, NULL, 0) : DEFAULT_OPS;
    lr_index_options o;
    lr_index_options_init(&o);
    o.max_instances = N_INST;
    o.capacity_blocks = 1u << 14;
    o.ttl_ns = 600 * SEC;
    lr_index *ix;
    assert_st(lr_index_create(&o, &ix), LR_OK);

    uint64_t rs = seed;
    struct prompt *ps = calloc(N_PROMPTS, sizeof *ps);
    assert_non_null(ps);
    for (int i = 0; i < N_PROMPTS; i++)
        make_prompt(&rs, &ps[i]);
    /* learn some of them (and some others), each for a few instances */
    uint64_t now = T0;
    for (int i = 0; i < 3 * N_PROMPTS; i++) {
        struct prompt tmp;
        const struct prompt *p = &ps[tu_below(&rs, N_PROMPTS)];
        if (tu_below(&rs, 3) == 0) {
            make_prompt(&rs, &tmp);
            p = &tmp;
        }
        lr_prompt q;
        lr_prompt_init(&q);
        q.tokens = p->tok;
        q.n_tokens = tu_below(&rs, p->n_tok + 1);
        assert_st(lr_index_learn(
                      ix, &q, 1 + (uint32_t)tu_below(&rs, N_INST),
                      tu_below(&rs, 4) ? LR_TRUST_LOCAL : LR_TRUST_REMOTE, now),
                  LR_OK);
        now += 10 * MS;
    }
    /* the read side's precondition, then every answer single-threaded */
    assert_st(lr_index_expire(ix, now), LR_OK);
    assert_false(lr__index_expiry_due(ix, now));
    uint64_t answered = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        struct prompt *p = &ps[i];
        lr_prompt q;
        lr_prompt_init(&q);
        q.keys = p->keys;
        q.n_keys = p->n_keys;
        q.tokens = p->tok;
        q.n_tokens = p->n_tok;
        lr_index_match_result res;
        lr_index_match_result_init(&res);
        res.hits = p->hits;
        res.hits_capacity = N_INST;
        p->st = lr_index_match(ix, &q, now, LR_MATCH_NO_TOUCH, &res);
        assert_st(p->st, LR_OK);
        p->n_hits = res.n_hits;
        p->deepest = res.deepest_tokens;
        answered += p->n_hits > 1;
    }
    assert_true(answered > N_PROMPTS / 4); /* shared prefixes, really */

    struct shared sh = {
        .ix = ix, .prompts = ps, .now = now, .seed = seed, .ops = ops
    };
    struct reader rd[N_READERS];
    for (int i = 0; i < N_READERS; i++) {
        rd[i] = (struct reader){ &sh, NULL, i };
        assert_st(lr__index_scratch_new(ix, lr__index_mem(ix), &rd[i].ms),
                  LR_OK);
    }
    uint64_t d0 = lr__index_digest(ix);
    size_t size;
    const void *raw = lr__index_raw(ix, &size);
    uint8_t *before = malloc(size);
    assert_non_null(before);
    memcpy(before, raw, size);

    pthread_t t[N_READERS];
    for (int i = 0; i < N_READERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader_main, &rd[i]), 0);
    for (int i = 0; i < N_READERS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);

    if (atomic_load(&sh.mismatches) != 0)
        fail_msg("%u of %llu peeks differed from the single-threaded match",
                 atomic_load(&sh.mismatches),
                 (unsigned long long)atomic_load(&sh.peeks));
    assert_int_equal(atomic_load(&sh.due), 0);
    assert_int_equal(atomic_load(&sh.peeks), (uint64_t)ops * N_READERS);
    assert_true(ops == 0 || atomic_load(&sh.hits) > 0);
    assert_int_equal(memcmp(lr__index_raw(ix, &size), before, size), 0);
    assert_int_equal(lr__index_digest(ix), d0);
    assert_st(lr__index_verify(ix), LR_OK);

    for (int i = 0; i < N_READERS; i++)
        lr__index_scratch_free(lr__index_mem(ix), rd[i].ms);
    free(before);
    free(ps);
    lr_index_destroy(ix);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(readers_share_one_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
