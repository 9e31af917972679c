/* Differential test of lr_index against a naive model (B34).
 *
 * The model is a plain list of routes (instance, the first d blocks of some
 * learned prompt, own stamp, trust), scanned linearly. Its rules are the
 * documented ones:
 *  - learn holds every block prefix of the prompt (aligned down) for the
 *    instance; new routes get stamp now; a fully known prompt's deepest
 *    route is stamped now; a LOCAL learn makes the whole path LOCAL;
 *  - match reports, per instance, the deepest d with (instance, prompt[:d])
 *    held, and (unless NO_TOUCH) stamps that route now;
 *  - a route expires when the newest stamp in its subtree (same instance,
 *    routes that extend it) is older than the TTL, in ticks of 2^24 ns;
 *  - removing an instance drops its routes.
 * Capacity is large enough that nothing is evicted; eviction has its own
 * scenario tests in test-index.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "testutil.h"

#define B 4
#define MAXBLK 14
#define NINST 6

struct mroute {
    uint32_t inst;
    uint32_t nblk;
    uint32_t tok[MAXBLK * B];
    uint32_t stamp;
    int remote;
};

struct model {
    struct mroute *r;
    size_t n, cap;
    uint64_t epoch;
    int has_epoch;
    uint64_t ttl_ticks;
};

static uint32_t
m_tick(struct model *m, uint64_t now)
{
    if (!m->has_epoch) {
        m->has_epoch = 1;
        m->epoch = now;
    }
    return now <= m->epoch ? 0 : (uint32_t)((now - m->epoch) >> 24);
}

static long
m_find(const struct model *m, uint32_t inst, const uint32_t *tok, uint32_t nblk)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->r[i].inst == inst && m->r[i].nblk == nblk &&
            memcmp(m->r[i].tok, tok, (size_t)nblk * B * 4) == 0)
            return (long)i;
    return -1;
}

static uint32_t
m_depth(const struct model *m, uint32_t inst, const uint32_t *tok,
        uint32_t nblk, long *which)
{
    uint32_t best = 0;
    *which = -1;
    for (size_t i = 0; i < m->n; i++) {
        const struct mroute *r = &m->r[i];
        if (r->inst != inst || r->nblk > nblk || r->nblk <= best)
            continue;
        if (memcmp(r->tok, tok, (size_t)r->nblk * B * 4) == 0) {
            best = r->nblk;
            *which = (long)i;
        }
    }
    return best;
}

static void
m_learn(struct model *m, uint32_t inst, const uint32_t *tok, uint32_t nblk,
        int remote, uint64_t now)
{
    uint32_t t = m_tick(m, now);
    uint32_t deepest_known = 0;
    for (uint32_t d = 1; d <= nblk; d++) {
        long i = m_find(m, inst, tok, d);
        if (i >= 0) {
            if (!remote)
                m->r[i].remote = 0;
            deepest_known = d;
            continue;
        }
        if (m->n == m->cap) {
            m->cap = m->cap ? m->cap * 2 : 256;
            m->r = realloc(m->r, m->cap * sizeof *m->r);
            assert_non_null(m->r);
        }
        struct mroute *r = &m->r[m->n++];
        r->inst = inst;
        r->nblk = d;
        memcpy(r->tok, tok, (size_t)d * B * 4);
        r->stamp = t;
        r->remote = remote;
    }
    if (deepest_known == nblk && nblk > 0)
        m->r[m_find(m, inst, tok, nblk)].stamp = t;
}

static void
m_expire(struct model *m, uint64_t now)
{
    uint32_t t = m_tick(m, now);
    /* effective recency: newest own stamp among routes extending r */
    char *dead = calloc(m->n + 1, 1);
    assert_non_null(dead);
    for (size_t i = 0; i < m->n; i++) {
        const struct mroute *r = &m->r[i];
        if (!(t > r->stamp && (uint64_t)(t - r->stamp) > m->ttl_ticks))
            continue;
        uint32_t eff = r->stamp;
        for (size_t j = 0; j < m->n; j++) {
            const struct mroute *q = &m->r[j];
            if (q->inst == r->inst && q->nblk > r->nblk && q->stamp > eff &&
                memcmp(q->tok, r->tok, (size_t)r->nblk * B * 4) == 0)
                eff = q->stamp;
        }
        if (t > eff && (uint64_t)(t - eff) > m->ttl_ticks)
            dead[i] = 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        if (!dead[i])
            m->r[k++] = m->r[i];
    m->n = k;
    free(dead);
}

static void
m_remove(struct model *m, uint32_t inst)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->r[i].inst != inst)
            m->r[k++] = m->r[i];
    m->n = k;
}

/* A prompt of up to MAXBLK blocks drawn from 5 block patterns, so that
 * prompts share prefixes often, plus 0..B-1 tail tokens. */
static uint32_t
make_prompt(uint64_t *rs, uint32_t *tok, uint32_t *ntok)
{
    uint32_t nblk = (uint32_t)tu_below(rs, MAXBLK + 1);
    for (uint32_t b = 0; b < nblk; b++) {
        uint32_t pat = (uint32_t)tu_below(rs, b < 2 ? 2 : 5);
        for (uint32_t j = 0; j < B; j++)
            tok[b * B + j] = pat * 100 + j + (b < 1 ? 0 : 7 * (pat == 4));
    }
    uint32_t tail = (uint32_t)tu_below(rs, B);
    for (uint32_t j = 0; j < tail; j++)
        tok[nblk * B + j] = 999;
    *ntok = nblk * B + tail;
    return nblk;
}

static void
check_stats(const lr_index *ix, const struct model *m, const uint32_t *ids)
{
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    assert_int_equal(lr_index_get_stats(ix, &st), LR_OK);
    uint64_t remote = 0;
    for (size_t i = 0; i < m->n; i++)
        remote += (uint64_t)m->r[i].remote;
    assert_int_equal(st.blocks, m->n);
    assert_int_equal(st.remote_blocks, remote);
    for (int k = 0; k < NINST; k++) {
        uint64_t want = 0, got = 0;
        for (size_t i = 0; i < m->n; i++)
            want += m->r[i].inst == ids[k];
        lr_status s = lr_index_instance_blocks(ix, ids[k], &got);
        assert_true(s == LR_OK || s == LR_ENOENT);
        assert_int_equal(got, want);
    }
}

static void
run_diff(uint64_t seed, int ops, uint64_t ttl_ns)
{
    uint64_t rs = seed;
    lr_index_options o;
    lr_index_options_init(&o);
    o.block_tokens = B;
    o.capacity_blocks = 1u << 20;
    o.ttl_ns = ttl_ns;
    o.max_instances = NINST;
    o.seed = seed;
    lr_index *ix;
    assert_int_equal(lr_index_create(&o, &ix), LR_OK);
    struct model m = { 0 };
    m.ttl_ticks = ttl_ns == UINT64_MAX ? UINT64_MAX : ttl_ns >> 24;

    uint32_t ids[NINST];
    for (int k = 0; k < NINST; k++)
        ids[k] = (uint32_t)tu_rand(&rs) | 1u; /* never LR_INSTANCE_NONE */
    uint64_t now = T0;
    uint32_t tok[MAXBLK * B + B];
    lr_index_hit hits[NINST];

    for (int op = 0; op < ops; op++) {
        uint32_t ntok;
        uint32_t nblk = make_prompt(&rs, tok, &ntok);
        uint32_t which = (uint32_t)tu_below(&rs, 100);
        now += tu_below(&rs, ttl_ns == UINT64_MAX ? SEC : ttl_ns / 6 + 1);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = tok;
        p.n_tokens = ntok;
        if (op == 0 || which < 45) {
            uint32_t inst = ids[tu_below(&rs, NINST)];
            int remote = tu_below(&rs, 4) == 0;
            uint32_t bnd[3];
            size_t nb = (size_t)tu_below(&rs, 4);
            for (size_t i = 0; i < nb; i++)
                bnd[i] = (uint32_t)tu_below(&rs, ntok + 1);
            for (size_t i = 1; i < nb; i++) /* sort */
                for (size_t j = i; j > 0 && bnd[j] < bnd[j - 1]; j--) {
                    uint32_t t = bnd[j];
                    bnd[j] = bnd[j - 1];
                    bnd[j - 1] = t;
                }
            p.boundaries = bnd;
            p.n_boundaries = nb;
            assert_int_equal(
                lr_index_learn(ix, &p, inst,
                               remote ? LR_TRUST_REMOTE : LR_TRUST_LOCAL, now),
                LR_OK);
            m_learn(&m, inst, tok, nblk, remote, now);
            m_expire(&m, now);
        } else if (which < 90) {
            uint32_t flags = tu_below(&rs, 3) == 0 ? LR_MATCH_NO_TOUCH : 0;
            lr_index_match_result r;
            lr_index_match_result_init(&r);
            r.hits = hits;
            r.hits_capacity = NINST;
            assert_int_equal(lr_index_match(ix, &p, now, flags, &r), LR_OK);
            m_expire(&m, now);
            uint32_t t = m_tick(&m, now);
            uint32_t deepest = 0;
            size_t expect_hits = 0;
            for (int k = 0; k < NINST; k++) {
                long w;
                uint32_t d = m_depth(&m, ids[k], tok, nblk, &w);
                if (d == 0)
                    continue;
                expect_hits++;
                if (d > deepest)
                    deepest = d;
                int found = 0;
                for (size_t h = 0; h < r.n_hits; h++)
                    if (hits[h].instance == ids[k]) {
                        found = 1;
                        if (hits[h].tokens != d * B)
                            fail_msg("op %d: instance %u matched %u tokens, "
                                     "model says %u",
                                     op, ids[k], hits[h].tokens, d * B);
                    }
                if (!found)
                    fail_msg("op %d: instance %u missing (model %u blocks)", op,
                             ids[k], d);
                if (!flags)
                    m.r[w].stamp = t;
            }
            assert_int_equal(r.n_hits, expect_hits);
            assert_int_equal(r.deepest_tokens, (uint64_t)deepest * B);
            assert_int_equal(r.prompt_blocks, nblk);
            for (size_t h = 1; h < r.n_hits; h++)
                assert_true(hits[h - 1].tokens > hits[h].tokens ||
                            (hits[h - 1].tokens == hits[h].tokens &&
                             hits[h - 1].instance < hits[h].instance));
        } else if (which < 96) {
            lr_index_expire(ix, now);
            m_expire(&m, now);
        } else {
            uint32_t inst = ids[tu_below(&rs, NINST)];
            lr_status s = lr_index_remove_instance(ix, inst);
            int known = 0;
            uint64_t dummy;
            (void)dummy;
            for (size_t i = 0; i < m.n; i++)
                known |= m.r[i].inst == inst;
            assert_true(s == LR_OK || s == LR_ENOENT);
            if (known)
                assert_int_equal(s, LR_OK);
            m_remove(&m, inst);
        }
        assert_int_equal(lr__index_verify(ix), LR_OK);
        check_stats(ix, &m, ids);
    }
    lr_index_destroy(ix);
    free(m.r);
}

static void
diff_no_ttl(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index diff, no TTL", 0x5eed0001);
    run_diff(seed, 4000, UINT64_MAX);
}

static void
diff_with_ttl(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index diff, TTL 3 s", 0x5eed0002);
    run_diff(seed, 4000, 3000000000ull);
}

static void
diff_short_ttl_many_seeds(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("index diff, TTL 0.5 s, 8 seeds", 0x5eed0003);
    for (uint64_t i = 0; i < 8; i++)
        run_diff(seed + i, 600, 500000000ull);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(diff_no_ttl),
        cmocka_unit_test(diff_with_ttl),
        cmocka_unit_test(diff_short_ttl_many_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
