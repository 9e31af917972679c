/* libroute-bench: speed and memory of the library's hot paths.
 *
 * Prints one JSON object per line per case:
 *   {"name": "index_match_8k", "ns_p50": ..., "ns_p99": ..., ...}
 *
 * Index cases run against an index holding 1M block routes across 64
 * instances, shaped like a chat fleet: 16 shared system prompts of 1k
 * tokens, each conversation one of them plus its own history, prompts of
 * 1k, 8k and 32k tokens. Queries share 50-100% of a held prompt.
 *   index_match_<len>       match a prompt of that length
 *   index_learn_known_<len> learn a prompt the instance already holds
 *   index_learn_new_<len>   learn an entirely new prompt (index full, so
 *                           this includes evicting as much)
 *   block_keys_8k[_avx2|_portable]  lr_block_keys() of 8k tokens with the
 *                           fastest keys kernel, or capped at one
 *   ring_candidates_256     2 candidates from a ring of 256 instances
 *   instance_add_<n>, instance_remove_<n>
 *                           one lr_router_add_instance() / _remove_instance()
 *                           at n instances (64, 1k, 10k, 64k = 65,534; 160
 *                           vnodes each): how long route() can be held off
 *                           by churn
 *
 *   router_fill_64k         65,534 lr_router_add_instance() calls one by
 *                           one on an empty router: wall time in all
 *   router_restore_64k      lr_router_restore() of that router's snapshot
 *                           into an empty router, and the longest wait of
 *                           another thread's call meanwhile
 *                           (lock_wait_ns_max)
 *
 *   index_evict_new_8k      learn a new 8k prompt into a full index
 *
 *   route_threads_<policy>_64_t<T>  routes/s of T threads (1, 2 and 4)
 *                           calling lr_router_route() on one router (the
 *                           index, prompts and load of the route cases),
 *                           each ending its own requests; wall time
 *
 *   route_lodestar_64       lr_router_route() with LR_POLICY_LODESTAR and a
 *                           trained model (lodestar-rig.h: 64 instances,
 *                           1-4k-token prompts, 10k samples), scoring the
 *                           default candidates (8); route_lodestar_64_all
 *                           scores all 64
 *
 *   kv_ingest_new           lr_index_vllm_batch() on batches of 500 vLLM
 *                           BlockStored events of 4 new blocks each
 *                           (msgpack in, index updated), from 64 engines,
 *                           into a full index of 1M blocks: ns per batch,
 *                           ns_per_event (the batch p50 / 500), and the
 *                           precise-mode index's bytes_per_block, its
 *                           engine-hash map included
 *
 * Router cases route 8k-token prompts through a router whose index holds
 * 1M block routes, at 8, 64, 1,024 and 4,096 instances, for every policy:
 *   route_<policy>_<instances>  one lr_router_route() as a gateway calls
 *                               it: hash, match, decide, learn, dispatch.
 *                               The prompt is a held conversation with its
 *                               last 0-10% replaced (a new turn), and 2
 *                               requests per instance stay in flight.
 *                               decide_ns_*: the same call as a dry run
 *                               (hash, match, decide; nothing recorded).
 *   route_pd_<policy>_64        the same on a disaggregated fleet: 16 of
 *                               the 64 instances prefill, 48 decode, in 8
 *                               racks, for the pair rules (llm-d-pd,
 *                               dynamo-pd, adaptive) and one policy on
 *                               each leg apart (sglang-cache-aware)
 *
 * lr_policy_decide() alone on a host's table of 16k and 65,534 rows
 * (tests/policy-table.h: distinct loads in random order, hits on a sixteenth
 * of the rows, ring ranks on the first eight), for every policy:
 *   decide_<policy>_<16k|64k>   ns per call, and ns_per_row (the p50 / n);
 *                               Lodestar with a small untrained model
 *
 * Usage: libroute-bench [--quick] [--filter SUBSTRING] [--system-prompts N]
 * (--system-prompts 0: no prompt shared between conversations)
 * Medians are what to compare; the machine is shared and noisy.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "index/index.h"
#include "index/index_keys_simd.h"
#include "libroute.h"

#define MPW_CAP (1 << 20)
#include "lodestar-rig.h"
#include "mpw.h"
#include "policy-table.h"

#define B 16
#define NINST 64
#define SYS_TOK 1024

static uint64_t rs = 0x62656e63ull;
static uint32_t nsys = 16; /* shared system prompts (--system-prompts) */

static uint64_t
rnd(void)
{
    return bench_splitmix(&rs);
}

static const char *filter;

static int
wanted(const char *name)
{
    return filter == NULL || strstr(name, filter) != NULL;
}

/* A conversation: system prompt id + a unique history seed + length. */
struct conv {
    uint32_t sys;
    uint32_t seed;
    uint32_t len;
    uint32_t inst;
};

static void
make_tokens(const struct conv *c, uint32_t *t, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++) {
        if (i < SYS_TOK)
            t[i] = c->sys * 100003u + i;
        else
            t[i] = (uint32_t)(c->seed * 2654435761u) ^ (i * 40503u);
    }
}

static void
report(const char *name, uint64_t *ns, size_t n, const lr_index *ix,
       double probes)
{
    qsort(ns, n, sizeof *ns, bench_cmp_u64);
    printf("{\"name\": \"%s\", \"ns_p50\": %llu, \"ns_p99\": %llu, "
           "\"iterations\": %zu",
           name, (unsigned long long)ns[n / 2],
           (unsigned long long)ns[(n * 99) / 100], n);
    if (ix != NULL) {
        lr_index_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        lr_index_get_stats(ix, &st);
        printf(", \"bytes_per_block\": %.1f, \"blocks\": %llu, "
               "\"prefixes\": %llu",
               st.blocks ? (double)st.bytes / (double)st.blocks : 0.0,
               (unsigned long long)st.blocks, (unsigned long long)st.prefixes);
    }
    if (probes >= 0)
        printf(", \"probes_mean\": %.1f", probes);
    printf("}\n");
    fflush(stdout);
}

static const uint32_t lens[3] = { 1024, 8192, 32768 };
static const char *const lname[3] = { "1k", "8k", "32k" };

static void
bench_index(int quick)
{
    /* 1M routes held; headroom so that learn_new measures insertion, not
     * eviction (index_evict_new_8k measures a full index). */
    uint64_t held = quick ? (1u << 16) : (1u << 20);
    size_t iters = quick ? 200 : 4000;
    size_t new_iters = quick ? 50 : 500;
    uint64_t cap = held; /* a full index, as in production */
    lr_index_options o;
    lr_index_options_init(&o);
    o.capacity_blocks = cap;
    o.block_tokens = B;
    o.ttl_ns = UINT64_MAX;
    o.max_instances = NINST;
    lr_index *ix;
    if (lr_index_create(&o, &ix) != LR_OK) {
        fprintf(stderr, "libroute-bench: cannot create index\n");
        exit(1);
    }
    /* populate until full: conversations cycle through the lengths */
    size_t nconv_cap = 4096, nconv = 0;
    struct conv *convs = calloc(nconv_cap, sizeof *convs);
    uint32_t *tok = malloc(32768 * 2 * sizeof *tok);
    uint64_t t = 1;
    lr_index_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    for (uint32_t i = 0;; i++) {
        lr_index_get_stats(ix, &st);
        if (st.blocks + 2048 > held)
            break;
        if (nconv == nconv_cap) {
            nconv_cap *= 2;
            convs = realloc(convs, nconv_cap * sizeof *convs);
        }
        struct conv *c = &convs[nconv++];
        c->sys = nsys ? (uint32_t)(rnd() % nsys) : 1000000u + i;
        c->seed = i + 1;
        c->len = lens[i % 3];
        c->inst = (uint32_t)(rnd() % NINST);
        make_tokens(c, tok, c->len);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = tok;
        p.n_tokens = c->len;
        uint32_t bnd[1] = { SYS_TOK };
        p.boundaries = bnd;
        p.n_boundaries = 1;
        lr_index_learn(ix, &p, c->inst, LR_TRUST_LOCAL, t++);
    }
    uint64_t *ns = malloc(iters * sizeof *ns);
    lr_index_hit hits[NINST];
    char name[64];

    for (int L = 0; L < 3; L++) {
        snprintf(name, sizeof name, "index_match_%s", lname[L]);
        if (!wanted(name))
            continue;
        uint64_t probes = 0;
        for (size_t k = 0; k < iters; k++) {
            /* a held conversation of this length, 50-100% shared */
            struct conv *c;
            do
                c = &convs[rnd() % nconv];
            while (c->len != lens[L]);
            make_tokens(c, tok, c->len);
            uint32_t keep = c->len / 2 + (uint32_t)(rnd() % (c->len / 2));
            for (uint32_t i = keep; i < c->len; i++)
                tok[i] = (uint32_t)rnd();
            lr_prompt p;
            lr_prompt_init(&p);
            p.tokens = tok;
            p.n_tokens = c->len;
            lr_index_match_result r;
            lr_index_match_result_init(&r);
            r.hits = hits;
            r.hits_capacity = NINST;
            uint64_t t0 = bench_now_ns();
            lr_index_match(ix, &p, t++, 0, &r);
            ns[k] = bench_now_ns() - t0;
            probes += lr__index_last_probes(ix);
        }
        report(name, ns, iters, ix, (double)probes / (double)iters);
    }
    for (int L = 0; L < 3; L++) {
        snprintf(name, sizeof name, "index_learn_known_%s", lname[L]);
        if (!wanted(name))
            continue;
        for (size_t k = 0; k < iters; k++) {
            struct conv *c;
            do
                c = &convs[rnd() % nconv];
            while (c->len != lens[L]);
            make_tokens(c, tok, c->len);
            lr_prompt p;
            lr_prompt_init(&p);
            p.tokens = tok;
            p.n_tokens = c->len;
            uint64_t t0 = bench_now_ns();
            lr_index_learn(ix, &p, c->inst, LR_TRUST_LOCAL, t++);
            ns[k] = bench_now_ns() - t0;
        }
        report(name, ns, iters, ix, -1);
    }
    /* a full index: each new 8k prompt first evicts 512 routes */
    if (wanted("index_evict_new_8k")) {
        for (size_t k = 0; k < new_iters; k++) {
            struct conv c = { .sys = 2000000 + (uint32_t)k,
                              .seed = (uint32_t)rnd(),
                              .len = 8192,
                              .inst = (uint32_t)(rnd() % NINST) };
            make_tokens(&c, tok, c.len);
            lr_prompt p;
            lr_prompt_init(&p);
            p.tokens = tok;
            p.n_tokens = c.len;
            uint64_t t0 = bench_now_ns();
            lr_index_learn(ix, &p, c.inst, LR_TRUST_LOCAL, t++);
            ns[k] = bench_now_ns() - t0;
        }
        report("index_evict_new_8k", ns, new_iters, ix, -1);
    }
    /* learn_new: the same 1M routes in an index with room to spare, so
     * that the case measures insertion, not eviction */
    lr_index_destroy(ix);
    o.capacity_blocks = held + (uint64_t)new_iters * (1024 + 8192 + 32768) / B;
    if (lr_index_create(&o, &ix) != LR_OK)
        exit(1);
    for (size_t i = 0; i < nconv; i++) {
        make_tokens(&convs[i], tok, convs[i].len);
        lr_prompt p;
        lr_prompt_init(&p);
        p.tokens = tok;
        p.n_tokens = convs[i].len;
        lr_index_learn(ix, &p, convs[i].inst, LR_TRUST_LOCAL, t++);
    }
    for (int L = 0; L < 3; L++) {
        snprintf(name, sizeof name, "index_learn_new_%s", lname[L]);
        if (!wanted(name))
            continue;
        for (size_t k = 0; k < new_iters; k++) {
            struct conv c = { .sys = 1000 + (uint32_t)(rnd() % 1000000),
                              .seed = (uint32_t)rnd(),
                              .len = lens[L],
                              .inst = (uint32_t)(rnd() % NINST) };
            make_tokens(&c, tok, c.len);
            lr_prompt p;
            lr_prompt_init(&p);
            p.tokens = tok;
            p.n_tokens = c.len;
            uint64_t t0 = bench_now_ns();
            lr_index_learn(ix, &p, c.inst, LR_TRUST_LOCAL, t++);
            ns[k] = bench_now_ns() - t0;
        }
        report(name, ns, new_iters, ix, -1);
    }
    /* hashing alone, for the floor: 512 chained blocks, with the kernel
     * the CPU allows, then capped at AVX2 and at the portable loop (the
     * same kernel again where the CPU has no more) */
    static const struct {
        const char *name;
        enum lr__keys_isa cap;
    } kern[] = { { "block_keys_8k", LR__KEYS_AVX512 },
                 { "block_keys_8k_avx2", LR__KEYS_AVX2 },
                 { "block_keys_8k_portable", LR__KEYS_PORTABLE } };
    for (size_t v = 0; v < sizeof kern / sizeof kern[0]; v++) {
        if (!wanted(kern[v].name))
            continue;
        uint64_t *keys = malloc(2048 * sizeof *keys);
        lr__index_keys_cap(kern[v].cap);
        for (size_t k = 0; k < iters; k++) {
            size_t nk;
            uint64_t t0 = bench_now_ns();
            lr_block_keys(B, tok, 8192, 0, keys, 2048, &nk);
            ns[k] = bench_now_ns() - t0;
        }
        lr__index_keys_cap(LR__KEYS_AVX512);
        report(kern[v].name, ns, iters, NULL, -1);
        free(keys);
    }
    free(ns);
    free(tok);
    free(convs);
    lr_index_destroy(ix);
}

/* One batch of kv_ingest_new: KV_EVENTS BlockStored events of 4 new
 * blocks each. Each request's blocks form a chain of KV_CHAIN events (a
 * prompt of 16 x 4 blocks being prefilled), the first with no parent. */
#define KV_EVENTS 500u
#define KV_BLOCKS 4u
#define KV_CHAIN 16u

static void
kv_batch(struct mpw *w, uint64_t *next_hash, uint32_t *chain_pos,
         uint64_t *last)
{
    uint64_t h[KV_BLOCKS];
    uint32_t t[KV_BLOCKS * B];
    w->n = 0;
    mpw_batch(w, KV_EVENTS, false);
    for (uint32_t e = 0; e < KV_EVENTS; e++) {
        for (uint32_t i = 0; i < KV_BLOCKS; i++)
            h[i] = ++*next_hash;
        for (uint32_t i = 0; i < KV_BLOCKS * B; i++)
            t[i] = (uint32_t)(rnd() % 151936); /* a Qwen-sized vocabulary */
        struct mpw_stored st = mpw_stored_of(h, KV_BLOCKS, t, B);
        st.has_parent = *chain_pos > 0;
        st.parent = *last;
        mpw_stored_array(w, &st, MPW_HASH_UINT);
        *last = h[KV_BLOCKS - 1];
        *chain_pos = (*chain_pos + 1) % KV_CHAIN;
    }
    mpw_batch_end(w, false);
}

static void
bench_kv(int quick)
{
    if (!wanted("kv_ingest_new"))
        return;
    uint64_t held = quick ? (1u << 16) : (1u << 20);
    size_t iters = quick ? 20 : 200;
    lr_index_options o;
    lr_index_options_init(&o);
    o.capacity_blocks = held;
    o.block_tokens = B;
    o.ttl_ns = UINT64_MAX;
    o.max_instances = NINST;
    lr_index *ix;
    if (lr_index_create(&o, &ix) != LR_OK)
        exit(1);
    struct mpw *w = malloc(sizeof *w);
    uint64_t *ns = malloc(iters * sizeof *ns);
    memset(w, 0, sizeof *w);
    uint64_t next_hash = 1, last[NINST] = { 0 };
    uint32_t pos[NINST] = { 0 };
    uint64_t t = 1;
    /* fill until full, then measure: every batch also evicts as much */
    size_t fill = (size_t)(held / (KV_EVENTS * KV_BLOCKS)) + 1;
    for (size_t k = 0; k < fill + iters; k++) {
        uint32_t inst = (uint32_t)(k % NINST);
        kv_batch(w, &next_hash, &pos[inst], &last[inst]);
        if (w->overflow) {
            fprintf(stderr, "libroute-bench: kv batch too large\n");
            exit(1);
        }
        lr_vllm_batch_info info;
        lr_vllm_batch_info_init(&info);
        uint64_t t0 = bench_now_ns();
        lr_status st = lr_index_vllm_batch(ix, inst, w->buf, w->n, t++, &info);
        uint64_t dt = bench_now_ns() - t0;
        if (st != LR_OK || info.stored != KV_EVENTS) {
            fprintf(stderr, "libroute-bench: kv batch: %s, %u stored\n",
                    lr_strerror(st), info.stored);
            exit(1);
        }
        if (k >= fill)
            ns[k - fill] = dt;
    }
    qsort(ns, iters, sizeof *ns, bench_cmp_u64);
    lr_index_stats stt;
    memset(&stt, 0, sizeof stt);
    stt.struct_size = sizeof stt;
    lr_index_get_stats(ix, &stt);
    printf(
        "{\"name\": \"kv_ingest_new\", \"ns_p50\": %llu, \"ns_p99\": %llu, "
        "\"iterations\": %zu, \"ns_per_event\": %.0f, "
        "\"events_per_s\": %.0f, \"blocks\": %llu, \"bytes_per_batch\": %zu, "
        "\"bytes_per_block\": %.1f, \"engine_hashes\": %llu}\n",
        (unsigned long long)ns[iters / 2],
        (unsigned long long)ns[(iters * 99) / 100], iters,
        (double)ns[iters / 2] / KV_EVENTS,
        ns[iters / 2] ? 1e9 * KV_EVENTS / (double)ns[iters / 2] : 0.0,
        (unsigned long long)stt.blocks, w->n,
        stt.blocks ? (double)stt.bytes / (double)stt.blocks : 0.0,
        (unsigned long long)stt.engine_hashes);
    fflush(stdout);
    free(ns);
    free(w);
    lr_index_destroy(ix);
}

static void
bench_ring(int quick)
{
    if (!wanted("ring_candidates_256"))
        return;
    lr_ring *ring;
    if (lr_ring_create(NULL, &ring) != LR_OK)
        exit(1);
    char nm[64];
    for (uint32_t i = 0; i < 256; i++) {
        snprintf(nm, sizeof nm, "10.0.%u.%u:8000", i / 250, i % 250);
        lr_ring_add(ring, nm, i);
    }
    size_t iters = quick ? 200 : 20000;
    enum {
        BATCH = 64
    };
    uint64_t *ns = malloc(iters * sizeof *ns);
    uint64_t keys[BATCH];
    uint32_t out[2], n, sink = 0;
    for (size_t k = 0; k < iters; k++) {
        for (int j = 0; j < BATCH; j++)
            keys[j] = rnd();
        uint64_t t0 = bench_now_ns();
        for (int j = 0; j < BATCH; j++) {
            lr_ring_candidates(ring, keys[j], 2, out, &n);
            sink += out[0] + out[1];
        }
        ns[k] = (bench_now_ns() - t0) / BATCH;
    }
    report("ring_candidates_256", ns, iters, NULL, -1);
    if (sink == 42)
        fprintf(stderr, " ");
    free(ns);
    lr_ring_destroy(ring);
}

/* Instance churn: a router holding n instances (160 vnodes
 * each, the default) removes one and adds it back, iters times; each
 * call's time under the router's lock, which is how long a route() on
 * another thread can be held off. */
static void
bench_churn(int quick, uint32_t n, const char *tag)
{
    char add_name[64], rm_name[64];
    snprintf(add_name, sizeof add_name, "instance_add_%s", tag);
    snprintf(rm_name, sizeof rm_name, "instance_remove_%s", tag);
    if (!wanted(add_name) && !wanted(rm_name))
        return;
    lr_router_options o;
    lr_router_options_init(&o);
    /* churn removes before it adds: n would do; the cases before 64k
     * kept one spare, which the largest router has no room for */
    o.max_instances = n < LR_ROUTER_MAX_INSTANCES ? n + 1 : n;
    o.index_capacity_blocks = 1u << 12;
    lr_router *r;
    if (lr_router_create(&o, &r) != LR_OK) {
        fprintf(stderr, "libroute-bench: cannot create router\n");
        exit(1);
    }
    char nm[64];
    uint32_t *ids = malloc(n * sizeof *ids);
    for (uint32_t i = 0; i < n; i++) {
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        snprintf(nm, sizeof nm, "10.%u.%u.%u:8000", i / 62500, i / 250 % 250,
                 i % 250);
        s.name = nm;
        if (lr_router_add_instance(r, &s, &ids[i]) != LR_OK) {
            fprintf(stderr, "libroute-bench: add_instance failed\n");
            exit(1);
        }
    }
    size_t iters = quick ? 20 : 1000;
    uint64_t *ta = malloc(iters * sizeof *ta), *tr = malloc(iters * sizeof *tr);
    for (size_t k = 0; k < iters; k++) {
        uint32_t i = (uint32_t)(rnd() % n);
        uint64_t t0 = bench_now_ns();
        lr_status st = lr_router_remove_instance(r, ids[i]);
        uint64_t t1 = bench_now_ns();
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        snprintf(nm, sizeof nm, "10.%u.%u.%u:8000", i / 62500, i / 250 % 250,
                 i % 250);
        s.name = nm;
        uint64_t t2 = bench_now_ns();
        if (st == LR_OK)
            st = lr_router_add_instance(r, &s, &ids[i]);
        uint64_t t3 = bench_now_ns();
        if (st != LR_OK) {
            fprintf(stderr, "libroute-bench: churn: %s\n", lr_strerror(st));
            exit(1);
        }
        tr[k] = t1 - t0;
        ta[k] = t3 - t2;
    }
    report(rm_name, tr, iters, NULL, -1);
    report(add_name, ta, iters, NULL, -1);
    free(ta);
    free(tr);
    free(ids);
    lr_router_destroy(r);
}

/* A router filled to the maximum, and restored from its snapshot: the
 * fill's wall time (65,534 lr_router_add_instance() calls, one by one, on
 * an empty router), and the restore's into an empty router while another
 * thread calls lr_router_instance_count() back to back; lock_wait_ns_max
 * is the longest of those calls, which is how long the restore held the
 * router's lock at most. */
struct probe {
    lr_router *r;
    _Atomic int stop;
    uint64_t max_ns;
};

static void *
probe_lock(void *arg)
{
    struct probe *p = arg;
    while (!atomic_load(&p->stop)) {
        uint64_t t0 = bench_now_ns();
        (void)lr_router_instance_count(p->r);
        uint64_t d = bench_now_ns() - t0;
        if (d > p->max_ns)
            p->max_ns = d;
    }
    return NULL;
}

static void
bench_fill_restore(int quick)
{
    if (!wanted("router_fill_64k") && !wanted("router_restore_64k"))
        return;
    uint32_t n = quick ? 4096 : LR_ROUTER_MAX_INSTANCES;
    lr_router_options o;
    lr_router_options_init(&o);
    o.max_instances = n;
    o.index_capacity_blocks = 1u << 12;
    lr_router *r;
    bench_check(lr_router_create(&o, &r), "router_create");
    char nm[64];
    uint64_t t0 = bench_now_ns();
    for (uint32_t i = 0; i < n; i++) {
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        snprintf(nm, sizeof nm, "10.%u.%u.%u:8000", i / 62500, i / 250 % 250,
                 i % 250);
        s.name = nm;
        uint32_t id;
        bench_check(lr_router_add_instance(r, &s, &id), "add_instance");
    }
    uint64_t fill = bench_now_ns() - t0;
    printf("{\"name\": \"router_fill_64k\", \"instances\": %u, \"ns\": "
           "%llu, \"ns_per_add\": %.1f}\n",
           n, (unsigned long long)fill, (double)fill / n);
    fflush(stdout);
    lr_blob *b;
    bench_check(lr_router_snapshot(r, 1, &b), "snapshot");
    lr_router_destroy(r);
    size_t iters = quick ? 1 : 3;
    uint64_t ns[3], wait[3];
    for (size_t k = 0; k < iters; k++) {
        bench_check(lr_router_create(&o, &r), "router_create");
        struct probe p = { .r = r };
        pthread_t th;
        pthread_create(&th, NULL, probe_lock, &p);
        t0 = bench_now_ns();
        bench_check(lr_router_restore(r, lr_blob_data(b), lr_blob_size(b), 2),
                    "restore");
        ns[k] = bench_now_ns() - t0;
        atomic_store(&p.stop, 1);
        pthread_join(th, NULL);
        wait[k] = p.max_ns;
        lr_router_destroy(r);
    }
    qsort(ns, iters, sizeof *ns, bench_cmp_u64);
    qsort(wait, iters, sizeof *wait, bench_cmp_u64);
    printf("{\"name\": \"router_restore_64k\", \"instances\": %u, "
           "\"ns_p50\": %llu, \"iterations\": %zu, \"lock_wait_ns_max\": "
           "%llu, \"snapshot_bytes\": %zu}\n",
           n, (unsigned long long)ns[iters / 2], iters,
           (unsigned long long)wait[iters - 1], lr_blob_size(b));
    fflush(stdout);
    lr_blob_destroy(b);
}

/* route_threads: T threads on one router, each with its own prompts
 * (the route cases' held conversations, their last 0-10% new), request
 * ids and generator, each ending its requests after 2 are in flight.
 * With no router (r NULL) a thread does the same work but the route: its
 * prompts and their block keys, the part of a route that takes no lock:
 * the control, what T threads get on this machine with nothing shared. */
struct tjob {
    lr_router *r;
    const struct conv *convs;
    size_t nconv, n;
    uint64_t rid0, t0, seed;
    uint64_t sink;
};

static void *
thread_routes(void *arg)
{
    struct tjob *j = arg;
    uint32_t *tok = malloc(8192 * sizeof *tok);
    uint64_t *kb = malloc(512 * sizeof *kb);
    uint64_t z = j->seed, live[2] = { 0, 0 };
    for (size_t k = 0; k < j->n; k++) {
        z += 0x9e3779b97f4a7c15ull;
        uint64_t x = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
        const struct conv *c = &j->convs[(x >> 16) % j->nconv];
        make_tokens(c, tok, 8192);
        uint32_t keep = 8192 - (uint32_t)(x % 820);
        for (uint32_t i = keep; i < 8192; i++)
            tok[i] = (uint32_t)(x * (i + 1));
        if (j->r == NULL) {
            size_t nk;
            lr_block_keys(B, tok, 8192, 0, kb, 512, &nk);
            j->sink += kb[nk - 1];
            continue;
        }
        lr_request q;
        lr_request_init(&q);
        q.id = j->rid0 + k;
        q.tokens = tok;
        q.n_tokens = 8192;
        q.now_ns = j->t0 + k * 1000000;
        lr_decision d;
        lr_decision_init(&d);
        if (lr_router_route(j->r, &q, &d) != LR_OK)
            exit(1);
        if (live[k % 2] != 0)
            lr_router_complete(j->r, live[k % 2], 100, q.now_ns);
        live[k % 2] = q.id;
    }
    for (int i = 0; i < 2; i++)
        if (live[i] != 0)
            lr_router_complete(j->r, live[i], 100, j->t0);
    free(kb);
    free(tok);
    return NULL;
}

/* One run of T threads; routes (or control iterations) per second. */
static double
threads_run(lr_router *r, const struct conv *convs, size_t nconv,
            uint32_t threads, size_t per, uint64_t *rid, uint64_t *t)
{
    struct tjob job[4];
    pthread_t th[4];
    uint64_t t0 = bench_now_ns();
    for (uint32_t i = 0; i < threads; i++) {
        job[i] = (struct tjob){ .r = r,
                                .convs = convs,
                                .nconv = nconv,
                                .n = per,
                                .rid0 = *rid,
                                .t0 = *t,
                                .seed = 0x7468726561647300ull + i };
        *rid += per;
        pthread_create(&th[i], NULL, thread_routes, &job[i]);
    }
    for (uint32_t i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    uint64_t wall = bench_now_ns() - t0;
    *t += per * 1000000ull;
    return (double)(per * threads) * 1e9 / (double)wall;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define THREAD_ROUNDS 5

/* A cache line's round trip between two threads: one writes a counter,
 * the other answers, PINGS times; nanoseconds a round trip. What each
 * shared line a route writes costs the other thread's next read: about
 * 100 ns where the two cores share a die, several hundred where the
 * machine (a VM's vCPUs placed by its host) puts them on two. */
#define PINGS 20000

static _Atomic uint64_t ping_line;

static void *
ping_answer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < PINGS; i++) {
        while (atomic_load_explicit(&ping_line, memory_order_acquire) !=
               2 * i + 1)
            ;
        atomic_store_explicit(&ping_line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static double
line_roundtrip_ns(void)
{
    pthread_t th;
    atomic_store(&ping_line, 0);
    pthread_create(&th, NULL, ping_answer, NULL);
    uint64_t t0 = 0;
    for (uint64_t i = 0; i < PINGS; i++) {
        while (atomic_load_explicit(&ping_line, memory_order_acquire) != 2 * i)
            ;
        if (i == PINGS / 2) /* the first half: both threads running */
            t0 = bench_now_ns();
        atomic_store_explicit(&ping_line, 2 * i + 1, memory_order_release);
    }
    pthread_join(th, NULL);
    return (double)(bench_now_ns() - t0) / (PINGS - PINGS / 2);
}

/* route_threads_<policy>_64_t<T> for T = 1, 2, 4, in THREAD_ROUNDS
 * rounds that each run every T and the control once, interleaved, so
 * that the machine's drift falls on all alike; medians. ratio_t1 is the
 * median of each round's T-thread rate over its one-thread rate, and
 * control_ratio_t1 the same of the control: what T threads get here with
 * nothing shared. */
static void
bench_threads(lr_router *r, const struct conv *convs, size_t nconv,
              lr_policy pol, int quick, uint64_t *rid, uint64_t *t)
{
    char name[96];
    static const uint32_t tn[3] = { 1, 2, 4 };
    bool want[3], any = false;
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "route_threads_%s_64_t%u",
                 lr_policy_name(pol), tn[k]);
        any |= want[k] = wanted(name);
    }
    if (!any || lr_router_set_policy(r, pol) != LR_OK)
        return;
    size_t per = quick ? 200 : 20000, rounds = quick ? 1 : THREAD_ROUNDS;
    double rate[3][THREAD_ROUNDS], ctl[3][THREAD_ROUNDS];
    double ratio[3][THREAD_ROUNDS], cratio[3][THREAD_ROUNDS];
    double trip[THREAD_ROUNDS];
    for (size_t i = 0; i < rounds; i++) {
        trip[i] = line_roundtrip_ns();
        for (int k = 0; k < 3; k++) {
            if (k > 0 && !want[k])
                continue; /* one thread: every ratio's base */
            rate[k][i] = threads_run(r, convs, nconv, tn[k], per, rid, t);
            ctl[k][i] = threads_run(NULL, convs, nconv, tn[k], per, rid, t);
        }
        for (int k = 0; k < 3; k++) {
            ratio[k][i] = rate[k][i] / rate[0][i];
            cratio[k][i] = ctl[k][i] / ctl[0][i];
        }
    }
    /* each round's line trip and two-thread ratio, in round order: the
     * medians below mix rounds of both placements when the host moved
     * the vCPUs during the run */
    char each[THREAD_ROUNDS * 24] = "";
    for (size_t i = 0; i < rounds && want[1]; i++)
        snprintf(each + strlen(each), sizeof each - strlen(each),
                 "%s[%.0f, %.2f]", i > 0 ? ", " : "", trip[i], ratio[1][i]);
    qsort(trip, rounds, sizeof(double), cmp_double);
    for (int k = 0; k < 3; k++) {
        if (!want[k])
            continue;
        qsort(rate[k], rounds, sizeof(double), cmp_double);
        qsort(ctl[k], rounds, sizeof(double), cmp_double);
        qsort(ratio[k], rounds, sizeof(double), cmp_double);
        qsort(cratio[k], rounds, sizeof(double), cmp_double);
        snprintf(name, sizeof name, "route_threads_%s_64_t%u",
                 lr_policy_name(pol), tn[k]);
        printf("{\"name\": \"%s\", \"threads\": %u, \"rounds\": %zu, "
               "\"routes\": %zu, \"routes_per_s\": %.0f, "
               "\"ratio_t1\": %.2f, \"control_ratio_t1\": %.2f, "
               "\"line_trip_ns\": %.0f%s%s%s}\n",
               name, tn[k], rounds, per * tn[k], rate[k][rounds / 2],
               ratio[k][rounds / 2], cratio[k][rounds / 2], trip[rounds / 2],
               k == 1 ? ", \"rounds_trip_ratio\": [" : "", k == 1 ? each : "",
               k == 1 ? "]" : "");
    }
    fflush(stdout);
}

/* The route loop of bench_router on one policy: `iters` decisions (a dry
 * run, then the recorded route with `flags`) over the filled index,
 * 2 requests per instance kept in flight; prints one line as `name`. */
static void
route_loop(lr_router *r, const struct conv *convs, size_t nconv, uint32_t *tok,
           size_t iters, uint32_t flags, const char *name, uint32_t ninst,
           uint64_t *ns, uint64_t *dry, uint64_t *ring, uint64_t *rid_io,
           uint64_t *t_io)
{
    uint64_t rid = *rid_io, t = *t_io;
    size_t head = 0, live = 0;
    uint64_t total = 0;
    for (size_t k = 0; k < iters; k++) {
        const struct conv *c = &convs[rnd() % nconv];
        make_tokens(c, tok, 8192);
        uint32_t keep = 8192 - (uint32_t)(rnd() % 820);
        for (uint32_t i = keep; i < 8192; i++)
            tok[i] = (uint32_t)rnd();
        lr_request q;
        lr_request_init(&q);
        q.id = rid++;
        q.tokens = tok;
        q.n_tokens = 8192;
        q.now_ns = t;
        t += 1000000;
        lr_decision d;
        lr_decision_init(&d);
        /* the decision alone (a dry run) on a request of its own, so
         * that it does not warm the caches for the real call */
        q.flags = LR_ROUTE_DRY_RUN;
        uint64_t t0 = bench_now_ns();
        lr_router_route(r, &q, &d);
        dry[k] = bench_now_ns() - t0;
        q.flags = flags;
        c = &convs[rnd() % nconv];
        make_tokens(c, tok, 8192);
        keep = 8192 - (uint32_t)(rnd() % 820);
        for (uint32_t i = keep; i < 8192; i++)
            tok[i] = (uint32_t)rnd();
        t0 = bench_now_ns();
        lr_status st = lr_router_route(r, &q, &d);
        ns[k] = bench_now_ns() - t0;
        total += ns[k];
        if (st != LR_OK) {
            fprintf(stderr, "libroute-bench: route: %s\n", lr_strerror(st));
            exit(1);
        }
        /* keep 2 requests per instance in flight: end the oldest */
        size_t cap = 2 * (size_t)ninst;
        if (live == cap) {
            lr_router_first_token(r, ring[head], t);
            lr_router_complete(r, ring[head], 100, t);
            head = (head + 1) % cap;
            live--;
        }
        ring[(head + live) % cap] = q.id;
        live++;
    }
    /* drain what is left so the next policy starts from idle */
    for (size_t i = 0; i < live; i++) {
        uint64_t id = ring[(head + i) % (2 * ninst)];
        lr_router_first_token(r, id, t);
        lr_router_complete(r, id, 100, t);
    }
    qsort(ns, iters, sizeof *ns, bench_cmp_u64);
    qsort(dry, iters, sizeof *dry, bench_cmp_u64);
    printf("{\"name\": \"%s\", \"ns_p50\": %llu, \"ns_p99\": %llu, "
           "\"iterations\": %zu, \"routes_per_s\": %.0f, "
           "\"decide_ns_p50\": %llu, \"decide_ns_p99\": %llu}\n",
           name, (unsigned long long)ns[iters / 2],
           (unsigned long long)ns[(iters * 99) / 100], iters,
           total ? (double)iters * 1e9 / (double)total : 0.0,
           (unsigned long long)dry[iters / 2],
           (unsigned long long)dry[(iters * 99) / 100]);
    fflush(stdout);
    *rid_io = rid;
    *t_io = t;
}

/* The policies a disaggregated fleet's cases run. */
static int
pd_case(int pol)
{
    return pol == LR_POLICY_LLMD_PD || pol == LR_POLICY_DYNAMO_PD ||
           pol == LR_POLICY_ADAPTIVE || pol == LR_POLICY_SGLANG_CACHE_AWARE;
}

/* pd: every fourth instance prefills, the others decode, eight to a
 * rack (the route_pd_ cases). */
static void
bench_router(int quick, uint32_t ninst, int pd)
{
    char name[64];
    const char *kind = pd ? "route_pd" : "route";
    int any = 0;
    for (int pol = 0; pol < (int)lr_policy_count(); pol++) {
        const char *pn = lr_policy_name((lr_policy)pol);
        snprintf(name, sizeof name, "%s_%s_%u", kind, pn, ninst);
        any |=
            pol != LR_POLICY_LODESTAR && (!pd || pd_case(pol)) && wanted(name);
        snprintf(name, sizeof name, "route_threads_%s_%u_t1", pn, ninst);
        any |= !pd && wanted(name);
    }
    snprintf(name, sizeof name, "route_wait_adaptive_%u", ninst);
    any |= !pd && wanted(name);
    if (!any)
        return;
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_ROUND_ROBIN;
    o.max_instances = ninst;
    o.index_capacity_blocks = quick ? (1u << 16) : (1u << 20);
    o.index_ttl_ns = UINT64_MAX;
    o.seed = 42;
    lr_router *r;
    if (lr_router_create(&o, &r) != LR_OK) {
        fprintf(stderr, "libroute-bench: cannot create router\n");
        exit(1);
    }
    for (uint32_t i = 0; i < ninst; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "10.0.%u.%u:8000", i / 250, i % 250);
        lr_instance_spec sp;
        lr_instance_spec_init(&sp);
        sp.name = nm;
        sp.rtt_ns = (uint64_t)(1 + i % 4) * 1000000;
        if (pd) {
            sp.role = i % 4 == 0 ? LR_ROLE_PREFILL : LR_ROLE_DECODE;
            sp.node = 1 + i / 4;
            sp.rack = 1 + i / 8;
            sp.region = 1;
        }
        uint32_t id;
        if (lr_router_add_instance(r, &sp, &id) != LR_OK)
            exit(1);
    }
    /* fill: 8k conversations placed round-robin, each learned at its
     * system prompt's end and at its full length */
    size_t nconv = (size_t)(o.index_capacity_blocks / ((8192 - SYS_TOK) / B));
    struct conv *convs = calloc(nconv, sizeof *convs);
    uint32_t *tok = malloc(8192 * sizeof *tok);
    uint64_t rid = 1, t = 1;
    uint32_t bnd[1] = { SYS_TOK };
    for (size_t i = 0; i < nconv; i++) {
        convs[i].sys = nsys ? (uint32_t)(rnd() % nsys) : 1000 + (uint32_t)i;
        convs[i].seed = (uint32_t)rnd();
        convs[i].len = 8192;
        make_tokens(&convs[i], tok, 8192);
        lr_request q;
        lr_request_init(&q);
        q.id = rid++;
        q.tokens = tok;
        q.n_tokens = 8192;
        q.boundaries = bnd;
        q.n_boundaries = 1;
        q.now_ns = t++;
        lr_decision d;
        lr_decision_init(&d);
        if (lr_router_route(r, &q, &d) != LR_OK)
            exit(1);
        lr_router_complete(r, q.id, 100, t++);
    }
    size_t iters = quick ? 100 : 2000;
    uint64_t *ns = malloc(iters * sizeof *ns);
    uint64_t *dry = malloc(iters * sizeof *dry);
    uint64_t *ring = calloc(2 * ninst, sizeof *ring);
    for (int pol = 0; pol < (int)lr_policy_count(); pol++) {
        const char *pn = lr_policy_name((lr_policy)pol);
        snprintf(name, sizeof name, "%s_%s_%u", kind, pn, ninst);
        if (pol == LR_POLICY_LODESTAR || (pd && !pd_case(pol)) || !wanted(name))
            continue;
        if (lr_router_set_policy(r, (lr_policy)pol) != LR_OK)
            exit(1);
        route_loop(r, convs, nconv, tok, iters, 0, name, ninst, ns, dry, ring,
                   &rid, &t);
    }
    /* the same with LR_ROUTE_MAY_WAIT below saturation: what the waiting
     * queue's check (its lock, the saturation scan) adds to a route */
    snprintf(name, sizeof name, "route_wait_adaptive_%u", ninst);
    if (!pd && wanted(name)) {
        if (lr_router_set_policy(r, LR_POLICY_ADAPTIVE) != LR_OK)
            exit(1);
        route_loop(r, convs, nconv, tok, iters, LR_ROUTE_MAY_WAIT, name, ninst,
                   ns, dry, ring, &rid, &t);
    }
    if (ninst == 64 && !pd) {
        static const lr_policy tp[] = { LR_POLICY_PREFIX_CACHE_AND_LOAD,
                                        LR_POLICY_MIN_TTFT, LR_POLICY_ADAPTIVE,
                                        LR_POLICY_RANDOM };
        for (size_t i = 0; i < sizeof tp / sizeof tp[0]; i++)
            bench_threads(r, convs, nconv, tp[i], quick, &rid, &t);
    }
    free(ring);
    free(dry);
    free(ns);
    free(tok);
    free(convs);
    lr_router_destroy(r);
}

static void
bench_lodestar(int quick)
{
    if (!wanted("route_lodestar_64"))
        return;
    size_t nsamp;
    lr_router *r = lsr_trained_router(quick, &nsamp);
    size_t iters = quick ? 100 : 4000;
    uint64_t *ns = malloc(iters * sizeof *ns);
    static const struct {
        const char *name;
        double d; /* LR_PARAM_LODESTAR_CANDIDATES; < 0: the default */
    } cases[] = { { "route_lodestar_64", -1 }, { "route_lodestar_64_all", 0 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (!wanted(cases[c].name))
            continue;
        double d = cases[c].d >= 0
                       ? cases[c].d
                       : lr_param_bounds(LR_PARAM_LODESTAR_CANDIDATES).def;
        lr_router_set_param(r, LR_PARAM_LODESTAR_CANDIDATES, d);
        for (size_t k = 0; k < iters; k++)
            ns[k] = lsr_one(r, 0);
        report(cases[c].name, ns, iters, NULL, -1);
    }
    free(ns);
    free(lsr_prompt_buf);
    lr_router_destroy(r);
}

static void
bench_decide(int quick)
{
    static const struct {
        const char *name;
        size_t n;
    } sizes[] = { { "16k", 16384 }, { "64k", 65534 } };
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    mo.n_inputs = LR_LODESTAR_FEATURES;
    lr_mlp *net = NULL;
    if (lr_mlp_create(&mo, &net) != LR_OK)
        exit(1);
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t n = sizes[z].n;
        if (quick && n > 16384)
            break;
        lr_candidate *rows = malloc(n * sizeof *rows);
        double *sc = malloc(n * sizeof *sc);
        pt_fill(rows, n, 8192, 7);
        size_t iters = quick ? 3 : 21;
        uint64_t ns[21];
        char name[64];
        for (int pol = 0; pol < (int)lr_policy_count(); pol++) {
            snprintf(name, sizeof name, "decide_%s_%s", lr_policy_name(pol),
                     sizes[z].name);
            if (!wanted(name))
                continue;
            lr_policy_input in;
            lr_policy_input_init(&in);
            in.prompt_tokens = 8192;
            in.model = pol == LR_POLICY_LODESTAR ? net : NULL;
            for (size_t k = 0; k < iters; k++) {
                in.seed = k;
                lr_decision d;
                lr_decision_init(&d);
                uint64_t t0 = bench_now_ns();
                lr_status st =
                    lr_policy_decide(pol, &in, rows, n, sizeof *rows, sc, &d);
                ns[k] = bench_now_ns() - t0;
                if (st != LR_OK)
                    exit(1);
            }
            qsort(ns, iters, sizeof *ns, bench_cmp_u64);
            printf("{\"name\": \"%s\", \"ns_p50\": %llu, \"ns_max\": "
                   "%llu, \"iterations\": %zu, \"ns_per_row\": %.1f}\n",
                   name, (unsigned long long)ns[iters / 2],
                   (unsigned long long)ns[iters - 1], iters,
                   (double)ns[iters / 2] / (double)n);
            fflush(stdout);
        }
        free(sc);
        free(rows);
    }
    lr_mlp_destroy(net);
}

int
main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            filter = argv[++i];
        } else if (strcmp(argv[i], "--system-prompts") == 0 && i + 1 < argc) {
            nsys = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr,
                    "usage: libroute-bench [--quick] [--filter SUBSTRING] "
                    "[--system-prompts N (0: none shared)]\n");
            return 2;
        }
    }
    bench_ring(quick);
    bench_churn(quick, 64, "64");
    bench_churn(quick, 1000, "1k");
    if (!quick) {
        bench_churn(quick, 10000, "10k");
        /* the largest router (65,534 instances, 10.5M vnodes); its setup
         * adds them one by one, about 15 s */
        bench_churn(quick, 65534, "64k");
    }
    bench_fill_restore(quick);
    bench_index(quick);
    bench_kv(quick);
    bench_router(quick, 8, 0);
    bench_router(quick, 64, 0);
    bench_router(quick, 64, 1);
    bench_router(quick, 1024, 0);
    bench_router(quick, 4096, 0);
    bench_lodestar(quick);
    bench_decide(quick);
    return 0;
}
