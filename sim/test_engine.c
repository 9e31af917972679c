/* lrsim tests: the engine model. Prefix hits only for contiguous leading
 * blocks, LRU eviction from the deep end, caching off, preemption and
 * recompute, LoRA adapters (LRU slots, a load stalls its step, at most
 * max_loras adapters in a batch, no starvation, each adapter's KV apart),
 * the CPU tier (a prefix the GPU lost loads from host memory at the
 * transfer's cost, LRU there, its KV events), disaggregation's prefill
 * and decode legs, and a randomized stress run that checks every invariant
 * after every step (the cache never exceeds its capacity). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libroute.h>

#include "engine.h"
#include "util.h"

#define BT 4

/* A tiny class: 4-token blocks, `kv` tokens of KV. */
static struct sim_class
tiny(uint64_t kv, uint32_t batch, uint32_t budget)
{
    struct sim_class c = { "tiny", "test", 100, 1, 1000, 1, 0.01, batch,
                           budget, kv, 100000, SIM_CACHE_PAGED, 0, 0 };
    return c;
}

struct rig {
    struct sim_class cls;
    struct sim_instance inst;
    struct sim_engine *e;
    struct sim_emit emit[64];
    uint64_t firsts, completes;
};

static void
rig_init(struct rig *r, uint64_t kv, int caching, uint32_t batch,
         uint32_t budget)
{
    memset(r, 0, sizeof *r);
    r->cls = tiny(kv, batch, budget);
    r->inst.cls = &r->cls;
    r->inst.prefix_caching = caching;
    r->e = sim_engine_create(&r->inst, BT);
    assert_non_null(r->e);
}

/* A slots engine (llama.cpp): `batch` slots, a host prompt cache of
 * `host` tokens. */
static void
rig_init_slots(struct rig *r, uint64_t kv, int caching, uint32_t batch,
               uint32_t budget, uint64_t host)
{
    memset(r, 0, sizeof *r);
    r->cls = tiny(kv, batch, budget);
    r->cls.cache_kind = SIM_CACHE_SLOTS;
    r->cls.host_cache_tokens = host;
    r->cls.slot_similarity = 0.1;
    r->inst.cls = &r->cls;
    r->inst.prefix_caching = caching;
    r->e = sim_engine_create(&r->inst, BT);
    assert_non_null(r->e);
}

/* Run steps until idle, checking invariants after each. */
static void
drain(struct rig *r)
{
    for (int guard = 0; guard < 1000000; guard++) {
        if (sim_engine_start_step(r->e) == 0)
            return;
        size_t n = sim_engine_finish_step(r->e, r->emit);
        struct sim_err err = { { 0 } };
        if (sim_engine_verify(r->e, &err) != 0)
            fail_msg("invariant: %s", err.msg);
        for (size_t k = 0; k < n; k++) {
            if (r->emit[k].kind == EMIT_FIRST_TOKEN)
                r->firsts++;
            else
                r->completes++;
        }
    }
    fail_msg("engine never went idle");
}

static void
seq_init(struct sim_seq *s, uint32_t req, const uint32_t *tok, uint32_t n,
         uint32_t out)
{
    memset(s, 0, sizeof *s);
    s->req = req;
    s->prompt = n;
    s->output = out;
    assert_int_equal(sim_seq_set_keys(s, tok, n, BT, 0), 0);
    assert_int_equal(sim_seq_reserve(s, n + out, BT), 0);
}

static void
fill(uint32_t *t, uint32_t n, uint32_t base)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = base + i;
}

static void
test_leading_hits_only(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 4000, 1, 16, 64);
    uint32_t x[16], a[24], b[24], c[24];
    fill(x, 16, 1000);
    /* a = X + Y, b = X + Z, c = W + Y (Y not leading) */
    memcpy(a, x, sizeof x);
    fill(a + 16, 8, 2000);
    memcpy(b, x, sizeof x);
    fill(b + 16, 8, 3000);
    fill(c, 16, 4000);
    fill(c + 16, 8, 2000);
    struct sim_seq sa, sb, sc, sd;
    seq_init(&sa, 0, a, 24, 3);
    sim_engine_enqueue(r.e, &sa, 0);
    drain(&r);
    assert_int_equal(sa.first_hit, 0);
    seq_init(&sb, 1, b, 24, 3);
    sim_engine_enqueue(r.e, &sb, 0);
    drain(&r);
    assert_int_equal(sb.first_hit, 16); /* X, 4 whole blocks */
    seq_init(&sc, 2, c, 24, 3);
    sim_engine_enqueue(r.e, &sc, 0);
    drain(&r);
    assert_int_equal(sc.first_hit, 0); /* Y's blocks are not leading */
    /* the whole prompt cached: the last token is still computed */
    seq_init(&sd, 3, a, 24, 2);
    sim_engine_enqueue(r.e, &sd, 0);
    drain(&r);
    assert_int_equal(sd.first_hit, 20);
    assert_int_equal(r.firsts, 4);
    assert_int_equal(r.completes, 4);
    const struct sim_engine_counters *c2 = sim_engine_counters(r.e);
    assert_int_equal(c2->query_tokens, 96);
    assert_int_equal(c2->hit_tokens, 36);
    assert_int_equal(c2->prefilled_tokens, 60);
    assert_int_equal(c2->sampled_tokens, 11);
    sim_seq_free(&sa);
    sim_seq_free(&sb);
    sim_seq_free(&sc);
    sim_seq_free(&sd);
    sim_engine_destroy(r.e);
}

static void
test_caching_off(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 4000, 0, 16, 64);
    uint32_t a[32];
    fill(a, 32, 5);
    struct sim_seq s1, s2;
    seq_init(&s1, 0, a, 32, 2);
    sim_engine_enqueue(r.e, &s1, 0);
    drain(&r);
    seq_init(&s2, 1, a, 32, 2);
    sim_engine_enqueue(r.e, &s2, 0);
    drain(&r);
    assert_int_equal(s2.first_hit, 0);
    struct sim_engine_state st;
    sim_engine_state(r.e, &st);
    assert_int_equal(st.cached_blocks, 0);
    sim_seq_free(&s1);
    sim_seq_free(&s2);
    sim_engine_destroy(r.e);
}

/* Capacity 20 blocks (80 tokens): three 32-token prompts do not all stay.
 * The least recently released goes first, from its deep end. */
static void
test_lru_eviction(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 80, 1, 16, 64);
    uint32_t p[3][32];
    struct sim_seq s[3];
    for (int i = 0; i < 3; i++) {
        fill(p[i], 32, 10000u * (uint32_t)(i + 1));
        seq_init(&s[i], (uint32_t)i, p[i], 32, 1);
        sim_engine_enqueue(r.e, &s[i], 0);
        drain(&r);
    }
    /* p0 was released first, so its deep blocks went first: its leading
     * block may survive, its full prefix may not; p2 is whole */
    struct sim_seq t2, t0;
    seq_init(&t2, 10, p[2], 32, 1);
    sim_engine_enqueue(r.e, &t2, 0);
    drain(&r);
    assert_int_equal(t2.first_hit, 28);
    seq_init(&t0, 11, p[0], 32, 1);
    sim_engine_enqueue(r.e, &t0, 0);
    drain(&r);
    assert_true(t0.first_hit < 28);
    struct sim_engine_state st;
    sim_engine_state(r.e, &st);
    assert_true(st.cached_blocks <= st.capacity_blocks);
    assert_true(sim_engine_counters(r.e)->evicted_blocks > 0);
    for (int i = 0; i < 3; i++)
        sim_seq_free(&s[i]);
    sim_seq_free(&t2);
    sim_seq_free(&t0);
    sim_engine_destroy(r.e);
}

/* Many sequences that together need more KV than there is: preemption
 * frees the most recently admitted, everything still finishes, and the
 * books balance. */
static void
test_preemption(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 400, 1, 16, 48);
    enum { N = 12 };
    struct sim_seq s[N];
    uint32_t tok[60];
    uint64_t want_out = 0, want_in = 0;
    for (uint32_t i = 0; i < N; i++) {
        fill(tok, 60, 100000u * (i % 3)); /* 3 shared prompts */
        seq_init(&s[i], i, tok, 40 + i, 50);
        assert_true(sim_engine_fits(r.e, s[i].prompt, s[i].output));
        sim_engine_enqueue(r.e, &s[i], 0);
        want_out += 50;
        want_in += 40 + i;
    }
    drain(&r);
    const struct sim_engine_counters *c = sim_engine_counters(r.e);
    assert_true(c->preemptions > 0);
    assert_int_equal(r.completes, N);
    assert_int_equal(r.firsts, N);
    assert_int_equal(c->sampled_tokens, want_out);
    assert_int_equal(c->query_tokens,
                     c->hit_tokens + c->prefilled_tokens + c->abandoned_tokens);
    assert_true(c->query_tokens >= want_in);
    assert_true(c->peak_used_blocks <= 100);
    for (uint32_t i = 0; i < N; i++) {
        assert_int_equal(s[i].generated, 50);
        sim_seq_free(&s[i]);
    }
    sim_engine_destroy(r.e);
}

static void
test_fits(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 400, 1, 16, 48);
    assert_true(sim_engine_fits(r.e, 300, 90));
    assert_false(sim_engine_fits(r.e, 390, 20)); /* over capacity */
    sim_engine_destroy(r.e);
}

/* A slot keeps its last prompt: the same conversation reuses it, another
 * with the same system prompt takes the slot and the first one's history
 * is gone (kept under half: not saved); a slot taken by recency saves its
 * prompt to the host cache, from which a later request loads it back. */
static void
test_slots(void **state)
{
    (void)state;
    struct rig r;
    rig_init_slots(&r, 4000, 1, 1, 64, 64);
    uint32_t sys[16], a[40], b[24], z[24], p[32];
    fill(sys, 16, 1000);
    memcpy(a, sys, sizeof sys);
    fill(a + 16, 24, 2000); /* a[0..24): turn 1, a[0..32): 2, a[0..40): 3 */
    memcpy(b, sys, sizeof sys);
    fill(b + 16, 8, 3000);
    struct sim_seq s[8];
    seq_init(&s[0], 0, a, 24, 2);
    sim_engine_enqueue(r.e, &s[0], 0);
    drain(&r);
    assert_int_equal(s[0].first_hit, 0);
    seq_init(&s[1], 1, a, 32, 2); /* the next turn: its slot's prompt */
    sim_engine_enqueue(r.e, &s[1], 0);
    drain(&r);
    assert_int_equal(s[1].first_hit, 24);
    seq_init(&s[2], 2, b, 24, 2); /* another conversation, same system */
    sim_engine_enqueue(r.e, &s[2], 0);
    drain(&r);
    assert_int_equal(s[2].first_hit, 16);
    seq_init(&s[3], 3, a, 40, 2); /* turn 3: only the system prompt left */
    sim_engine_enqueue(r.e, &s[3], 0);
    drain(&r);
    assert_int_equal(s[3].first_hit, 16);
    const struct sim_engine_counters *c = sim_engine_counters(r.e);
    assert_int_equal(c->slot_hits, 3);
    assert_int_equal(c->host_saves, 0);
    /* an unrelated prompt takes the slot by recency: a[0..40) is saved */
    fill(z, 24, 5000);
    seq_init(&s[4], 4, z, 24, 2);
    sim_engine_enqueue(r.e, &s[4], 0);
    drain(&r);
    assert_int_equal(s[4].first_hit, 0);
    assert_int_equal(c->host_saves, 1);
    /* conversation a comes back: z is saved, a loaded from the host */
    memcpy(p, a, 32 * sizeof *p);
    seq_init(&s[5], 5, a, 40, 2);
    sim_engine_enqueue(r.e, &s[5], 0);
    drain(&r);
    assert_int_equal(s[5].first_hit, 36); /* all but the last block */
    assert_int_equal(c->host_saves, 2);
    assert_int_equal(c->host_hits, 1);
    /* caching off: nothing is reused or saved */
    struct rig off;
    rig_init_slots(&off, 4000, 0, 1, 64, 64);
    seq_init(&s[6], 6, a, 24, 2);
    sim_engine_enqueue(off.e, &s[6], 0);
    drain(&off);
    seq_init(&s[7], 7, a, 32, 2);
    sim_engine_enqueue(off.e, &s[7], 0);
    drain(&off);
    assert_int_equal(s[7].first_hit, 0);
    assert_int_equal(sim_engine_counters(off.e)->host_saves, 0);
    for (int i = 0; i < 8; i++)
        sim_seq_free(&s[i]);
    (void)p;
    sim_engine_destroy(r.e);
    sim_engine_destroy(off.e);
}

/* Random prompts over a few shared prefixes, random arrivals between
 * steps, tight memory: every invariant after every step (rounds 4 and 5:
 * slots engines, with and without a host cache). */
static void
test_stress(void **state)
{
    (void)state;
    struct sim_rng rng;
    sim_rng_seed(&rng, 7);
    for (int round = 0; round < 6; round++) {
        struct rig r;
        if (round < 4)
            rig_init(&r, 600 + 200 * (uint64_t)round, round != 3,
                     8 + 4u * (uint32_t)round, 32 + 16u * (uint32_t)round);
        else
            rig_init_slots(&r, 800, 1, 4, 48, round == 4 ? 400 : 0);
        enum { N = 300 };
        struct sim_seq *s = calloc(N, sizeof *s);
        assert_non_null(s);
        uint32_t tok[200];
        uint64_t out = 0;
        uint32_t next = 0;
        while (r.completes < next || next < N) {
            for (int k = 0; next < N && k < (int)sim_rng_range(&rng, 0, 3); k++) {
                uint32_t n = (uint32_t)sim_rng_range(&rng, 1, 200);
                uint32_t shared = (uint32_t)sim_rng_range(&rng, 0, n);
                fill(tok, shared, 7u * (uint32_t)sim_rng_range(&rng, 0, 4) << 20);
                for (uint32_t i = shared; i < n; i++)
                    tok[i] = (uint32_t)sim_rng_next(&rng);
                uint32_t o = (uint32_t)sim_rng_range(&rng, 1, 60);
                seq_init(&s[next], next, tok, n, o);
                if (sim_engine_fits(r.e, n, o)) {
                    sim_engine_enqueue(r.e, &s[next], sim_rng_unit(&rng) < 0.1);
                    out += o;
                } else {
                    r.completes++;
                    r.firsts++;
                }
                next++;
            }
            if (sim_engine_start_step(r.e) == 0)
                continue;
            size_t n = sim_engine_finish_step(r.e, r.emit);
            struct sim_err err = { { 0 } };
            if (sim_engine_verify(r.e, &err) != 0)
                fail_msg("round %d: %s", round, err.msg);
            for (size_t k = 0; k < n; k++)
                r.completes += r.emit[k].kind == EMIT_COMPLETE;
        }
        const struct sim_engine_counters *c = sim_engine_counters(r.e);
        assert_int_equal(c->sampled_tokens, out);
        assert_int_equal(c->query_tokens, c->hit_tokens + c->prefilled_tokens +
                                              c->abandoned_tokens);
        struct sim_engine_state st;
        sim_engine_state(r.e, &st);
        assert_int_equal(st.used_blocks, 0);
        assert_true(st.cached_blocks <= st.capacity_blocks);
        assert_int_equal(st.pending_prefill, 0);
        if (round == 3)
            assert_int_equal(c->hit_tokens, 0);
        for (int i = 0; i < N; i++)
            sim_seq_free(&s[i]);
        free(s);
        sim_engine_destroy(r.e);
    }
}

/* A large engine (4096 blocks) fed one shared prefix hundreds of times:
 * the free queue is compacted while blocks that were never allocated
 * remain, and the prefix table grows from its first size to its last
 * (engine.c, "Memory"); every invariant after every step, every request
 * after the first hits the prefix through both, then unique prompts
 * evict. Twice: the second engine gets the arena the first left behind,
 * written all over, and does exactly the same. */
static void
test_lazy_memory(void **state)
{
    (void)state;
    enum { CAP = 4096, SHARED = 200, OWN = 40, N = 400, M = 100, BIG = 160 };
    struct sim_engine_counters first;
    for (int round = 0; round < 2; round++) {
        struct rig r;
        rig_init(&r, CAP * BT, 1, 8, 512);
        struct sim_seq *s = calloc(N + M, sizeof *s);
        assert_non_null(s);
        uint32_t tok[BIG * BT];
        for (uint32_t q = 0; q < N; q++) {
            fill(tok, SHARED, 1u << 24);
            fill(tok + SHARED, OWN, (q + 1) << 12);
            seq_init(&s[q], q, tok, SHARED + OWN, 2);
            sim_engine_enqueue(r.e, &s[q], 0);
            drain(&r);
            assert_int_equal(s[q].first_hit, q ? SHARED : 0);
        }
        struct sim_engine_state st;
        sim_engine_state(r.e, &st);
        assert_int_equal(st.cached_blocks, (SHARED + N * OWN) / BT);
        assert_int_equal(sim_engine_counters(r.e)->evicted_blocks, 0);
        /* unique prompts: more blocks than the cache holds */
        for (uint32_t q = N; q < N + M; q++) {
            fill(tok, BIG * BT, (q + 1) << 20);
            seq_init(&s[q], q, tok, BIG * BT, 2);
            sim_engine_enqueue(r.e, &s[q], 0);
            drain(&r);
            assert_int_equal(s[q].first_hit, 0);
        }
        sim_engine_state(r.e, &st);
        const struct sim_engine_counters *c = sim_engine_counters(r.e);
        assert_true(c->evicted_blocks > 0);
        assert_int_equal(st.used_blocks, 0);
        assert_true(st.cached_blocks <= CAP);
        if (round == 0)
            first = *c;
        else
            assert_memory_equal(&first, c, sizeof first);
        for (uint32_t q = 0; q < N + M; q++)
            sim_seq_free(&s[q]);
        free(s);
        sim_engine_destroy(r.e);
    }
}

/* ---- LoRA adapters ------------------------------------------------------------ */

#define LOAD_US 5000u

/* A sequence of adapter `a` (0: base) whose prompt is tokens base.. */
static void
lora_seq(struct sim_seq *s, uint32_t req, uint32_t a, uint32_t base,
         uint32_t n, uint32_t out, uint32_t *tok)
{
    fill(tok, n, base);
    seq_init(s, req, tok, n, out);
    s->adapter = a;
}

/* One step: its duration (0: none). */
static uint64_t
step(struct rig *r)
{
    uint64_t us = sim_engine_start_step(r->e);
    if (us == 0)
        return 0;
    size_t n = sim_engine_finish_step(r->e, r->emit);
    struct sim_err err = { { 0 } };
    if (sim_engine_verify(r->e, &err) != 0)
        fail_msg("invariant: %s", err.msg);
    for (size_t k = 0; k < n; k++) {
        if (r->emit[k].kind == EMIT_FIRST_TOKEN)
            r->firsts++;
        else
            r->completes++;
    }
    return us;
}

/* Two slots: the least recently used idle adapter is the one evicted. */
static void
test_lora_lru(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 4000, 1, 16, 64);
    sim_engine_set_lora(r.e, 2, LOAD_US);
    uint32_t tok[16], ids[4];
    struct sim_seq s[5];
    const uint32_t order[5] = { 1, 2, 1, 3, 2 };
    /* A, B, A (resident: no load), C (evicts B: A was used later),
     * B (evicts A) */
    const uint64_t loads[5] = { 1, 2, 2, 3, 4 };
    const uint32_t mru[5][2] = { { 1, 0 }, { 2, 1 }, { 1, 2 }, { 3, 1 },
                                 { 2, 3 } };
    for (int k = 0; k < 5; k++) {
        lora_seq(&s[k], (uint32_t)k, order[k], 100u * (uint32_t)k, 9, 2, tok);
        sim_engine_enqueue(r.e, &s[k], 0);
        drain(&r);
        const struct sim_engine_counters *c = sim_engine_counters(r.e);
        assert_int_equal(c->adapter_loads, loads[k]);
        uint32_t n = sim_engine_resident(r.e, ids, 4);
        assert_int_equal(n, k == 0 ? 1 : 2);
        for (uint32_t j = 0; j < n; j++)
            assert_int_equal(ids[j], mru[k][j]);
    }
    assert_int_equal(sim_engine_counters(r.e)->adapter_evictions, 2);
    for (int k = 0; k < 5; k++)
        sim_seq_free(&s[k]);
    sim_engine_destroy(r.e);
}

/* A step that loads an adapter takes LOAD_US longer than the same step
 * with the adapter resident, or on the base model. */
static void
test_lora_load_stalls(void **state)
{
    (void)state;
    struct rig r, b;
    rig_init(&r, 4000, 0, 16, 64);
    rig_init(&b, 4000, 0, 16, 64);
    sim_engine_set_lora(r.e, 4, LOAD_US);
    sim_engine_set_lora(b.e, 4, LOAD_US);
    uint32_t tok[16];
    struct sim_seq a1, a2, base;
    lora_seq(&a1, 0, 7, 10, 12, 1, tok);
    lora_seq(&base, 1, 0, 10, 12, 1, tok);
    sim_engine_enqueue(r.e, &a1, 0);
    sim_engine_enqueue(b.e, &base, 0);
    uint64_t loaded = step(&r), plain = step(&b);
    assert_true(plain > 0);
    assert_int_equal(loaded, plain + LOAD_US);
    /* the adapter stays resident: the same request again costs the same
     * as on the base model */
    lora_seq(&a2, 2, 7, 10, 12, 1, tok);
    sim_engine_enqueue(r.e, &a2, 0);
    assert_int_equal(step(&r), plain);
    assert_int_equal(sim_engine_counters(r.e)->adapter_loads, 1);
    /* no LoRA on an engine without slots */
    sim_engine_set_lora(b.e, 0, LOAD_US);
    assert_false(sim_engine_serves(b.e, 7));
    assert_true(sim_engine_serves(b.e, 0));
    assert_true(sim_engine_serves(r.e, 7));
    sim_seq_free(&a1);
    sim_seq_free(&a2);
    sim_seq_free(&base);
    sim_engine_destroy(r.e);
    sim_engine_destroy(b.e);
}

/* Two slots, requests of adapters 1, 2, 3, the base model and 1 again: the
 * batch takes 1, 2, the base one and the second 1; 3 is passed over (not
 * blocking those behind it) and runs once a slot frees. */
static void
test_lora_batch_limit(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 4000, 1, 16, 256);
    sim_engine_set_lora(r.e, 2, LOAD_US);
    uint32_t tok[16], ids[8];
    struct sim_seq s[5];
    const uint32_t ad[5] = { 1, 2, 3, 0, 1 };
    const uint32_t out[5] = { 3, 6, 2, 2, 4 };
    for (int k = 0; k < 5; k++) {
        lora_seq(&s[k], (uint32_t)k, ad[k], 50u * (uint32_t)k, 10, out[k],
                 tok);
        sim_engine_enqueue(r.e, &s[k], 0);
    }
    step(&r);
    struct sim_engine_state st;
    sim_engine_state(r.e, &st);
    assert_int_equal(st.running, 4);
    assert_int_equal(st.waiting, 1);
    assert_int_equal(s[2].state, SEQ_WAITING);
    struct sim_adapter_report rep;
    sim_engine_adapters(r.e, ids, 8, &rep);
    assert_int_equal(rep.max_loras, 2);
    assert_int_equal(rep.n_running, 2);
    assert_int_equal(rep.n_waiting, 1);
    assert_int_equal(ids[2], 3);
    assert_true((ids[0] == 1 && ids[1] == 2) || (ids[0] == 2 && ids[1] == 1));
    /* every step: at most 2 adapters among the running */
    for (int guard = 0; guard < 100 && step(&r) > 0; guard++) {
        uint32_t seen[5], n = 0;
        for (int k = 0; k < 5; k++) {
            if (s[k].state != SEQ_RUNNING || s[k].adapter == 0)
                continue;
            uint32_t j = 0;
            while (j < n && seen[j] != s[k].adapter)
                j++;
            if (j == n)
                seen[n++] = s[k].adapter;
        }
        assert_true(n <= 2);
    }
    assert_int_equal(r.completes, 5);
    /* 3 waited for 1 (its 2 requests done by then) and took its slot */
    assert_int_equal(sim_engine_counters(r.e)->adapter_loads, 3);
    assert_int_equal(sim_engine_counters(r.e)->adapter_evictions, 1);
    for (int k = 0; k < 5; k++)
        sim_seq_free(&s[k]);
    sim_engine_destroy(r.e);
}

/* Adapters 1 and 2 always have requests running (new ones every step):
 * a request of adapter 3 still runs, in bounded time. */
static void
test_lora_no_starvation(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 100000, 0, 64, 4096);
    sim_engine_set_lora(r.e, 2, LOAD_US);
    enum { N = 600 };
    struct sim_seq *s = calloc(N, sizeof *s);
    assert_non_null(s);
    uint32_t tok[16];
    uint32_t n = 0;
    struct sim_seq c;
    lora_seq(&c, 9999, 3, 7, 8, 2, tok);
    int queued = 0;
    int steps = 0;
    for (; steps < 500 && c.generated == 0; steps++) {
        for (uint32_t a = 1; a <= 2 && n < N; a++, n++) {
            lora_seq(&s[n], n, a, 100u * n, 8, 6, tok);
            sim_engine_enqueue(r.e, &s[n], 0);
        }
        if (steps == 3) {
            sim_engine_enqueue(r.e, &c, 0);
            queued = 1;
        }
        step(&r);
    }
    assert_true(queued);
    assert_true(c.generated > 0);
    assert_true(steps < 200);
    drain(&r);
    for (uint32_t k = 0; k < n; k++)
        sim_seq_free(&s[k]);
    free(s);
    sim_seq_free(&c);
    sim_engine_destroy(r.e);
}

/* The same prompt under the base model, adapter "a" and adapter "b": keyed
 * apart (lr_adapter_salt, as the router), so none hits another's KV, and
 * each hits its own. */
static void
test_lora_separate_kv(void **state)
{
    (void)state;
    struct rig r;
    rig_init(&r, 4000, 1, 16, 64);
    sim_engine_set_lora(r.e, 4, LOAD_US);
    uint32_t tok[24];
    fill(tok, 24, 500);
    const uint64_t salt[3] = {
        0, lr_adapter_salt(0, lr_name_hash("a", 1)),
        lr_adapter_salt(0, lr_name_hash("b", 1)),
    };
    const uint32_t ad[3] = { 0, 1, 2 };
    struct sim_seq s[6];
    for (int k = 0; k < 6; k++) {
        memset(&s[k], 0, sizeof s[k]);
        s[k].req = (uint32_t)k;
        s[k].prompt = 24;
        s[k].output = 2;
        s[k].adapter = ad[k % 3];
        assert_int_equal(sim_seq_set_keys(&s[k], tok, 24, BT, salt[k % 3]), 0);
        assert_int_equal(sim_seq_reserve(&s[k], 26, BT), 0);
        sim_engine_enqueue(r.e, &s[k], 0);
        drain(&r);
        /* the first of each: cold; the second: its own prefix (all but
         * the last block: at least one token is computed) */
        assert_int_equal(s[k].first_hit, k < 3 ? 0u : 20u);
    }
    for (int k = 0; k < 6; k++)
        sim_seq_free(&s[k]);
    sim_engine_destroy(r.e);
}

/* ---- CPU tier ---------------------------------------------------------------------- */

#define CPU_US 0.25 /* load time per token */

/* An engine of 12 GPU blocks (a 32-token prompt and its output take 9)
 * and a CPU tier of cpu blocks (0: none). */
static void
rig_init_cpu(struct rig *r, uint32_t cpu)
{
    rig_init(r, 48, 1, 16, 64);
    assert_int_equal(sim_engine_set_cpu_tier(r->e, cpu, CPU_US), 0);
}

/* Run prompt p (32 tokens from base) with one output token; its first
 * admission's hit. */
static uint32_t
run_prompt(struct rig *r, uint32_t req, uint32_t base)
{
    uint32_t tok[32];
    struct sim_seq s;
    fill(tok, 32, base);
    seq_init(&s, req, tok, 32, 1);
    sim_engine_enqueue(r->e, &s, 0);
    drain(r);
    uint32_t hit = s.first_hit;
    sim_seq_free(&s);
    return hit;
}

/* A prompt computed once is offloaded; two others evict it from the GPU;
 * run again, it loads 7 blocks from the CPU tier: its step costs their
 * transfer and a prefill of the last block only, not a prefill of 32
 * tokens. The loaded blocks are GPU blocks again. The same engine without
 * the tier recomputes it all. */
static void
test_cpu_offload_hit(void **state)
{
    (void)state;
    struct rig r, b;
    rig_init_cpu(&r, 64);
    rig_init_cpu(&b, 0);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(run_prompt(&r, i, 1000 * (i + 1)), 0);
        assert_int_equal(run_prompt(&b, i, 1000 * (i + 1)), 0);
    }
    const struct sim_engine_counters *c = sim_engine_counters(r.e);
    assert_int_equal(c->cpu_stored_blocks, 24);
    assert_int_equal(c->cpu_hits, 0);
    assert_true(c->evicted_blocks >= 8); /* the first prompt left the GPU */
    struct sim_engine_state st;
    sim_engine_state(r.e, &st);
    assert_int_equal(st.cpu_blocks, 24);
    /* the first prompt again: 28 tokens (7 blocks, the last token is
     * computed) from host memory */
    uint32_t tok[32];
    struct sim_seq s, t, u;
    fill(tok, 32, 1000);
    seq_init(&s, 10, tok, 32, 1);
    sim_engine_enqueue(r.e, &s, 0);
    uint64_t us = step(&r);
    double want = r.cls.overhead_us +
                  4 * r.cls.prefill_us * (1 + (28 + 2) / r.cls.ctx_double) +
                  28 * CPU_US;
    assert_int_equal(us, (uint64_t)(want + 0.5));
    assert_int_equal(s.first_hit, 28);
    assert_int_equal(c->cpu_hits, 1);
    assert_int_equal(c->cpu_hit_tokens, 28);
    assert_int_equal(c->cpu_load_us, 7);
    drain(&r);
    /* without the tier: a full prefill */
    seq_init(&t, 10, tok, 32, 1);
    sim_engine_enqueue(b.e, &t, 0);
    uint64_t full = step(&b);
    assert_int_equal(t.first_hit, 0);
    assert_int_equal(full, (uint64_t)(r.cls.overhead_us +
                                      32 * (1 + 16 / r.cls.ctx_double) + 0.5));
    assert_true(full > us);
    drain(&b);
    /* again: a GPU hit now, no load */
    seq_init(&u, 11, tok, 32, 1);
    sim_engine_enqueue(r.e, &u, 0);
    us = step(&r);
    assert_int_equal(u.first_hit, 28);
    assert_int_equal(us, (uint64_t)(r.cls.overhead_us +
                                    4 * (1 + 30 / r.cls.ctx_double) + 0.5));
    assert_int_equal(c->cpu_hits, 1);
    drain(&r);
    const struct sim_engine_counters *cb = sim_engine_counters(b.e);
    assert_int_equal(cb->cpu_stored_blocks, 0);
    assert_int_equal(c->query_tokens, c->hit_tokens + c->prefilled_tokens +
                                          c->abandoned_tokens);
    sim_seq_free(&s);
    sim_seq_free(&t);
    sim_seq_free(&u);
    sim_engine_destroy(r.e);
    sim_engine_destroy(b.e);
}

/* A tier of 24 blocks (three prompts): p0, p1, p0 again (refreshed), p2,
 * then p3 drops the least recently used, p1, not p0. */
static void
test_cpu_lru(void **state)
{
    (void)state;
    struct rig r;
    rig_init_cpu(&r, 24);
    run_prompt(&r, 0, 1000);
    run_prompt(&r, 1, 2000);
    run_prompt(&r, 2, 1000); /* p0: refreshed in the tier */
    run_prompt(&r, 3, 3000);
    const struct sim_engine_counters *c = sim_engine_counters(r.e);
    assert_int_equal(c->cpu_evicted_blocks, 0);
    run_prompt(&r, 4, 4000);
    assert_int_equal(c->cpu_evicted_blocks, 8);
    struct sim_engine_state st;
    sim_engine_state(r.e, &st);
    assert_int_equal(st.cpu_blocks, 24);
    uint64_t hits = c->cpu_hit_tokens;
    assert_int_equal(run_prompt(&r, 5, 1000), 28); /* from the tier */
    assert_true(c->cpu_hit_tokens > hits);
    hits = c->cpu_hit_tokens;
    assert_int_equal(run_prompt(&r, 6, 2000), 0); /* dropped */
    assert_int_equal(c->cpu_hit_tokens, hits);
    sim_engine_destroy(r.e);
}

/* What the engine publishes (lrsim --sync events). */
#define EV_MAX 4096
struct evlog {
    uint64_t gpu[EV_MAX];
    size_t n_gpu;
    uint64_t cpu[EV_MAX]; /* stored; removals marked by rm[] */
    int rm[EV_MAX];
    size_t n_cpu;
    size_t n_cpu_events;
};

static void
ev_stored(void *ctx, const struct sim_seq *s, uint32_t from, uint32_t to)
{
    struct evlog *l = ctx;
    for (uint32_t d = from; d < to && l->n_gpu < EV_MAX; d++)
        l->gpu[l->n_gpu++] = s->keys[d];
}

static void
ev_removed(void *ctx, uint64_t key)
{
    (void)ctx;
    (void)key;
}

static void
ev_cpu_stored(void *ctx, const uint64_t *keys, uint32_t n)
{
    struct evlog *l = ctx;
    assert_true(n > 0);
    l->n_cpu_events++;
    for (uint32_t k = 0; k < n && l->n_cpu < EV_MAX; k++) {
        /* stored on the GPU first: the router knows the hash */
        size_t g = 0;
        while (g < l->n_gpu && l->gpu[g] != keys[k])
            g++;
        assert_true(g < l->n_gpu);
        l->rm[l->n_cpu] = 0;
        l->cpu[l->n_cpu++] = keys[k];
    }
}

static void
ev_cpu_removed(void *ctx, uint64_t key)
{
    struct evlog *l = ctx;
    if (l->n_cpu < EV_MAX) {
        l->rm[l->n_cpu] = 1;
        l->cpu[l->n_cpu++] = key;
    }
}

/* Is key in the tier after the log's events? */
static int
ev_held(const struct evlog *l, uint64_t key)
{
    int held = 0;
    for (size_t k = 0; k < l->n_cpu; k++)
        if (l->cpu[k] == key) {
            assert_true(held == l->rm[k]); /* no double store or drop */
            held = !l->rm[k];
        }
    return held;
}

/* The tier's stores (engine hashes, each stored on the GPU before) and
 * drops, as vLLM's OffloadingConnector publishes them: replayed, they
 * hold what the tier holds; a load from the tier publishes the loaded
 * blocks as GPU stores again. An engine without a tier publishes none. */
static void
test_cpu_events(void **state)
{
    (void)state;
    struct rig r, b;
    rig_init_cpu(&r, 16);
    rig_init_cpu(&b, 0);
    struct evlog *l = calloc(2, sizeof *l);
    assert_non_null(l);
    struct sim_kv_sink ks = { .stored = ev_stored,
                              .removed = ev_removed,
                              .cpu_stored = ev_cpu_stored,
                              .cpu_removed = ev_cpu_removed,
                              .ctx = &l[0] };
    sim_engine_set_sink(r.e, &ks);
    ks.ctx = &l[1];
    sim_engine_set_sink(b.e, &ks);
    run_prompt(&r, 0, 1000);
    run_prompt(&r, 1, 2000);
    run_prompt(&r, 2, 3000); /* drops p0 from the tier */
    run_prompt(&r, 3, 2000); /* p1 again: refreshed */
    run_prompt(&r, 4, 4000); /* drops p2 */
    run_prompt(&r, 5, 3000); /* p2 computed again, drops p1 */
    run_prompt(&r, 6, 4000);
    size_t gpu_before = l[0].n_gpu;
    assert_int_equal(run_prompt(&r, 7, 2000), 0); /* dropped: computed */
    assert_true(l[0].n_gpu > gpu_before);
    const struct sim_engine_counters *c = sim_engine_counters(r.e);
    size_t stores = 0, drops = 0;
    for (size_t k = 0; k < l[0].n_cpu; k++) {
        stores += !l[0].rm[k];
        drops += l[0].rm[k];
    }
    assert_int_equal(stores, c->cpu_stored_blocks);
    assert_int_equal(drops, c->cpu_evicted_blocks);
    assert_true(drops > 0);
    assert_true(l[0].n_cpu_events < stores); /* runs, not one per block */
    /* the replayed log holds what the tier holds */
    struct sim_engine_state st;
    sim_engine_state(r.e, &st);
    size_t held = 0;
    for (size_t k = 0; k < l[0].n_cpu; k++) {
        int first = 1;
        for (size_t j = 0; j < k; j++)
            first &= l[0].cpu[j] != l[0].cpu[k];
        if (first)
            held += (size_t)ev_held(&l[0], l[0].cpu[k]);
    }
    assert_int_equal(held, st.cpu_blocks);
    /* a load from the tier: the loaded blocks are stored on the GPU */
    uint32_t tok[32];
    struct sim_seq s;
    fill(tok, 32, 4000);
    seq_init(&s, 8, tok, 32, 1);
    assert_true(ev_held(&l[0], s.keys[0]));
    gpu_before = l[0].n_gpu;
    uint64_t hits = c->cpu_hit_tokens;
    sim_engine_enqueue(r.e, &s, 0);
    drain(&r);
    assert_true(c->cpu_hit_tokens > hits);
    assert_true(l[0].n_gpu > gpu_before);
    assert_int_equal(l[0].gpu[gpu_before], s.keys[s.first_hit / BT -
                                               (c->cpu_hit_tokens - hits) /
                                                   BT]);
    sim_seq_free(&s);
    /* no tier, no tier events */
    run_prompt(&b, 0, 1000);
    run_prompt(&b, 1, 2000);
    assert_int_equal(l[1].n_cpu, 0);
    assert_true(l[1].n_gpu > 0);
    free(l);
    sim_engine_destroy(r.e);
    sim_engine_destroy(b.e);
}

static void
verify_ok(const struct sim_engine *e)
{
    struct sim_err err = { { 0 } };
    if (sim_engine_verify(e, &err) != 0)
        fail_msg("invariant: %s", err.msg);
}

/* Disaggregation: a prefill leg keeps its blocks pinned once its prompt
 * is computed, samples no token, and leaves them cached (evictable) when
 * released; a decode leg pulls blocks only for what its cache lacks of
 * its first prompt - 1 tokens, waits in order while memory is short,
 * keys what it received, and its next step samples the first token. */
static void
test_pd_legs(void **state)
{
    (void)state;
    struct rig p, d;
    rig_init(&p, 400, 1, 8, 64); /* 100 blocks */
    rig_init(&d, 200, 1, 8, 64); /* 50 blocks, no watermark */
    uint32_t a[40], b[120], c[120];
    fill(a, 40, 100);
    fill(b, 120, 5000);
    fill(c, 120, 9000);
    struct sim_seq pa;
    seq_init(&pa, 0, a, 40, 1);
    pa.hold = 1;
    sim_engine_enqueue(p.e, &pa, 0);
    assert_true(sim_engine_start_step(p.e) > 0);
    assert_int_equal(sim_engine_finish_step(p.e, p.emit), 1);
    assert_int_equal(p.emit[0].kind, EMIT_PREFILLED);
    assert_int_equal(pa.state, SEQ_HELD);
    verify_ok(p.e);
    struct sim_engine_state st;
    sim_engine_state(p.e, &st);
    assert_int_equal(st.used_blocks, 10);
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(sim_engine_start_step(p.e), 0);
    assert_int_equal(sim_engine_counters(p.e)->sampled_tokens, 0);
    sim_engine_release_held(p.e, &pa);
    verify_ok(p.e);
    sim_engine_state(p.e, &st);
    assert_int_equal(st.used_blocks, 0);
    assert_int_equal(st.cached_blocks, 10);
    assert_int_equal(sim_engine_counters(p.e)->handed_off, 1);

    struct sim_seq da, db, dc, da2;
    struct sim_seq *out[4];
    seq_init(&da, 0, a, 40, 3);
    seq_init(&db, 1, b, 120, 2);
    seq_init(&dc, 2, c, 120, 2);
    sim_engine_enqueue_remote(d.e, &da);
    sim_engine_enqueue_remote(d.e, &db);
    sim_engine_enqueue_remote(d.e, &dc);
    /* 10 + 30 blocks pulled; the third's 30 wait for the 10 left */
    assert_int_equal(sim_engine_pull(d.e, out, 4), 2);
    assert_ptr_equal(out[0], &da);
    assert_ptr_equal(out[1], &db);
    assert_int_equal(da.received, 39);
    assert_int_equal(db.received, 119);
    assert_int_equal(dc.state, SEQ_KVWAIT);
    verify_ok(d.e);
    sim_engine_state(d.e, &st);
    assert_int_equal(st.waiting, 3);
    assert_int_equal(st.used_blocks, 40);
    assert_int_equal(sim_engine_pull(d.e, out, 4), 0);
    sim_engine_kv_arrived(d.e, &da);
    sim_engine_kv_arrived(d.e, &db);
    verify_ok(d.e);
    sim_engine_state(d.e, &st);
    assert_int_equal(st.cached_blocks, 9 + 29); /* the full received ones */
    assert_true(sim_engine_start_step(d.e) > 0);
    size_t n = sim_engine_finish_step(d.e, d.emit);
    assert_int_equal(n, 2);
    assert_int_equal(d.emit[0].kind, EMIT_FIRST_TOKEN);
    assert_int_equal(d.emit[1].kind, EMIT_FIRST_TOKEN);
    d.firsts += 2;
    drain(&d);
    assert_int_equal(d.completes, 2);
    /* memory freed: the third pulls; then a's prompt again, cached here */
    assert_int_equal(sim_engine_pull(d.e, out, 4), 1);
    assert_ptr_equal(out[0], &dc);
    seq_init(&da2, 3, a, 40, 2);
    sim_engine_enqueue_remote(d.e, &da2);
    assert_int_equal(sim_engine_pull(d.e, out, 4), 1);
    assert_int_equal(da2.hit, 36);
    assert_int_equal(da2.received, 3);
    sim_engine_kv_arrived(d.e, &dc);
    sim_engine_kv_arrived(d.e, &da2);
    drain(&d);
    assert_int_equal(d.firsts, 4);
    assert_int_equal(d.completes, 4);
    const struct sim_engine_counters *k = sim_engine_counters(d.e);
    assert_int_equal(k->query_tokens, k->hit_tokens + k->prefilled_tokens +
                                          k->abandoned_tokens +
                                          k->received_tokens);
    assert_int_equal(k->received_tokens, 39 + 119 + 119 + 3);
    assert_int_equal(k->pulls, 4);
    assert_int_equal(k->sampled_tokens, 3 + 2 + 2 + 2);
    sim_seq_free(&pa);
    sim_seq_free(&da);
    sim_seq_free(&db);
    sim_seq_free(&dc);
    sim_seq_free(&da2);
    sim_engine_destroy(p.e);
    sim_engine_destroy(d.e);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leading_hits_only),
        cmocka_unit_test(test_caching_off),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_lora_lru),
        cmocka_unit_test(test_lora_load_stalls),
        cmocka_unit_test(test_lora_batch_limit),
        cmocka_unit_test(test_lora_no_starvation),
        cmocka_unit_test(test_lora_separate_kv),
        cmocka_unit_test(test_cpu_offload_hit),
        cmocka_unit_test(test_cpu_lru),
        cmocka_unit_test(test_cpu_events),
        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_pd_legs),
        cmocka_unit_test(test_lazy_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
