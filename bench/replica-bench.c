/* replica-bench: what gateway replicas exchange (docs/scale.md), in bytes
 * and time, through the public API.
 *
 * Router A (replica 1) holds 1M block routes across 64 instances: 8k-token
 * conversations on 16 shared system prompts of 1k tokens, as in
 * libroute-bench. Router B (replica 2) has the same instances.
 *
 *   delta_full          A's full export (since 0): bytes, bytes per route,
 *                       export time; its import into an empty B: time and
 *                       ns per route (an (instance, prefix block) pair)
 *   delta_full_again    the next full export imported into B, which holds
 *                       every route already (the periodic full publication
 *                       that heals lost deltas)
 *   delta_incr_<n>      one publication period: n new turns routed on A
 *                       (prefix-cache: a turn stays on its conversation's
 *                       instance and adds its new blocks), A exports since
 *                       its last mark, B imports: median bytes, routes and
 *                       ns per delta, ns per route imported
 *   gauges_64           A's gauge message with 2 requests in flight on each
 *                       of 64 instances: bytes, export and import time
 *   gauges_<E>x<G>      a router on a fleet of E instances that holds the
 *                       gauges of G - 1 peers, each with a request in
 *                       flight on every instance, imports the next gauge
 *                       of one of them: import time (what a gauge costs
 *                       at fleet scale, G gateways gauging each other)
 *   snapshot / restore  A's snapshot: bytes, bytes per route, time; its
 *                       restore into a fresh router: time
 *
 * Usage: replica-bench [--quick]. One JSON object per line. The machine
 * is shared and noisy: medians are what to compare.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "libroute.h"

#define B 16
#define NINST 64
#define SYS_TOK 1024
#define CONV_TOK 8192
#define NSYS 16
#define TURN_TOK 256 /* a new turn: question and answer, 16 blocks */
#define SEC 1000000000ull

static uint64_t rs = 0x7265706cull;

static uint64_t
rnd(void)
{
    return bench_splitmix(&rs);
}

static uint32_t
rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint32_t
rd_varint(const uint8_t **p)
{
    uint32_t v = 0;
    for (int sh = 0;; sh += 7) {
        uint8_t c = *(*p)++;
        v |= (uint32_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return v;
    }
}

/* The block routes ((instance, prefix block) pairs) a delta carries: its
 * route records name the deepest block of a chain each, so the chains are
 * walked (wire format in docs/index.md; a blob this library just made). */
static uint64_t
delta_blocks(const lr_blob *b)
{
    const uint8_t *p = lr_blob_data(b);
    uint32_t n_nodes = rd_u32(p + 12), n_routes = rd_u32(p + 16);
    uint32_t *parent = malloc(((size_t)n_nodes + 1) * sizeof *parent);
    uint64_t *held = calloc((size_t)n_nodes + 1, sizeof *held);
    if (parent == NULL || held == NULL)
        exit(1);
    p += 48; /* the version 2 header */
    for (uint32_t i = 0; i < n_nodes; i++) {
        p += 8;
        parent[i + 1] = rd_varint(&p); /* 0: a first block */
    }
    uint64_t blocks = 0;
    for (uint32_t r = 0; r < n_routes; r++) {
        uint32_t inst = rd_u32(p);
        p += 4;
        uint32_t node = rd_varint(&p) + 1;
        (void)rd_varint(&p); /* age */
        for (; node != 0 && !(held[node] >> inst & 1); node = parent[node]) {
            held[node] |= 1ull << inst;
            blocks++;
        }
    }
    free(parent);
    free(held);
    return blocks;
}

static lr_router *
make_router(uint64_t replica, uint32_t capacity, int32_t policy)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = policy;
    o.max_instances = NINST;
    o.index_capacity_blocks = capacity;
    o.index_ttl_ns = UINT64_MAX;
    o.seed = 42;
    o.replica_id = replica;
    o.index_eviction = LR_EVICT_LRU;
    lr_router *r;
    bench_check(lr_router_create(&o, &r), "create");
    return r;
}

static void
add_instances(lr_router *r)
{
    for (uint32_t i = 0; i < NINST; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "10.0.0.%u:8000", i);
        lr_instance_spec sp;
        lr_instance_spec_init(&sp);
        sp.name = nm;
        uint32_t id;
        bench_check(lr_router_add_instance(r, &sp, &id), "add_instance");
    }
}

/* A conversation: its system prompt, a seed for its history, its length. */
struct conv {
    uint32_t sys, seed, len;
};

static void
conv_tokens(const struct conv *c, uint32_t *t)
{
    for (uint32_t i = 0; i < c->len; i++)
        t[i] = i < SYS_TOK ? c->sys * 100003u + i
                           : (c->seed * 2654435761u) ^ (i * 40503u);
}

static uint64_t rid = 1;

/* Route one prompt on r at host time t and end it at once. */
static void
route_conv(lr_router *r, const struct conv *c, uint32_t *tok, uint64_t t)
{
    conv_tokens(c, tok);
    uint32_t bnd[1] = { SYS_TOK };
    lr_request q;
    lr_request_init(&q);
    q.id = rid++;
    q.tokens = tok;
    q.n_tokens = c->len;
    q.boundaries = bnd;
    q.n_boundaries = 1;
    q.now_ns = t;
    lr_decision d;
    lr_decision_init(&d);
    bench_check(lr_router_route(r, &q, &d), "route");
    bench_check(lr_router_complete(r, q.id, 100, t), "complete");
}

static void
print_delta_case(const char *name, uint64_t bytes, uint64_t routes,
                 uint64_t export_ns, uint64_t import_ns)
{
    printf("{\"name\": \"%s\", \"bytes\": %llu, \"routes\": %llu, "
           "\"bytes_per_route\": %.2f, \"export_ns\": %llu, "
           "\"import_ns\": %llu, \"import_ns_per_route\": %.1f}\n",
           name, (unsigned long long)bytes, (unsigned long long)routes,
           routes ? (double)bytes / (double)routes : 0.0,
           (unsigned long long)export_ns, (unsigned long long)import_ns,
           routes ? (double)import_ns / (double)routes : 0.0);
    fflush(stdout);
}

/* A's full export into B; returns the mark. */
static uint64_t
full_delta(lr_router *a, lr_router *b, const char *name, uint64_t t)
{
    lr_blob *d = NULL;
    uint64_t mark = 0;
    uint64_t t0 = bench_now_ns();
    bench_check(lr_router_export_delta(a, 0, &d, &mark), "export_delta");
    uint64_t t1 = bench_now_ns();
    bench_check(lr_router_import_delta(b, lr_blob_data(d), lr_blob_size(d), t),
                "import_delta");
    uint64_t t2 = bench_now_ns();
    print_delta_case(name, lr_blob_size(d), delta_blocks(d), t1 - t0, t2 - t1);
    lr_blob_destroy(d);
    return mark;
}

/* gauges_<E>x<G>: the receiving router's import of one more gauge when
 * it holds g - 1 peers' gauges of e instances each. */
static void
gauges_fleet(uint32_t e, uint32_t g, size_t iters)
{
    lr_router **r = calloc(g, sizeof *r);
    uint64_t *ns = calloc(iters, sizeof *ns);
    if (r == NULL || ns == NULL)
        exit(1);
    uint64_t t = SEC;
    for (uint32_t k = 0; k < g; k++) {
        lr_router_options o;
        lr_router_options_init(&o);
        o.policy = LR_POLICY_ROUND_ROBIN;
        o.max_instances = e;
        o.max_peers = g;
        o.seed = 42 + k;
        o.replica_id = k + 1;
        bench_check(lr_router_create(&o, &r[k]), "create");
        for (uint32_t i = 0; i < e; i++) {
            char nm[32];
            snprintf(nm, sizeof nm, "10.1.%u.%u:8000", i >> 8, i & 255);
            lr_instance_spec sp;
            lr_instance_spec_init(&sp);
            sp.name = nm;
            uint32_t id;
            bench_check(lr_router_add_instance(r[k], &sp, &id), "add");
        }
        if (k == 0)
            continue; /* the receiver */
        uint32_t tok[16];
        for (uint32_t i = 0; i < e; i++) { /* one in flight on each */
            for (uint32_t x = 0; x < 16; x++)
                tok[x] = (uint32_t)rnd();
            lr_request q;
            lr_request_init(&q);
            q.id = i + 1;
            q.tokens = tok;
            q.n_tokens = 16;
            q.now_ns = t;
            lr_decision d;
            lr_decision_init(&d);
            bench_check(lr_router_route(r[k], &q, &d), "route");
        }
        lr_blob *b = NULL;
        bench_check(lr_router_export_gauges(r[k], &b), "export_gauges");
        bench_check(
            lr_router_import_gauges(r[0], lr_blob_data(b), lr_blob_size(b), t),
            "import_gauges");
        lr_blob_destroy(b);
    }
    for (size_t i = 0; i < iters; i++) {
        lr_router *from = r[1 + i % (g - 1)];
        lr_blob *b = NULL;
        bench_check(lr_router_export_gauges(from, &b), "export_gauges");
        uint64_t t0 = bench_now_ns();
        bench_check(
            lr_router_import_gauges(r[0], lr_blob_data(b), lr_blob_size(b), t),
            "import_gauges");
        ns[i] = bench_now_ns() - t0;
        lr_blob_destroy(b);
    }
    printf("{\"name\": \"gauges_%ux%u\", \"import_ns_p50\": %llu}\n", e, g,
           (unsigned long long)bench_median(ns, iters));
    fflush(stdout);
    for (uint32_t k = 0; k < g; k++)
        lr_router_destroy(r[k]);
    free(r);
    free(ns);
}

int
main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: replica-bench [--quick]\n");
            return 2;
        }
    }
    uint32_t cap = quick ? 1u << 16 : 1u << 20;
    lr_router *a = make_router(1, cap, LR_POLICY_ROUND_ROBIN);
    lr_router *b = make_router(2, cap, LR_POLICY_ROUND_ROBIN);
    add_instances(a);
    add_instances(b);

    /* fill A to its capacity, round-robin: each conversation on its own
     * instance */
    size_t nconv = cap / ((CONV_TOK - SYS_TOK) / B);
    struct conv *convs = calloc(nconv, sizeof *convs);
    uint32_t *tok = malloc((CONV_TOK + 64 * TURN_TOK) * sizeof *tok);
    if (convs == NULL || tok == NULL)
        return 1;
    uint64_t t = SEC;
    for (size_t i = 0; i < nconv; i++) {
        convs[i] = (struct conv){ (uint32_t)(rnd() % NSYS), (uint32_t)rnd(),
                                  CONV_TOK - 4 * TURN_TOK };
        route_conv(a, &convs[i], tok, t += 1000);
    }

    uint64_t mark = full_delta(a, b, "delta_full", t);
    (void)mark;

    /* publication periods: n turns each, prefix-cache keeps them home */
    bench_check(lr_router_set_policy(a, LR_POLICY_PREFIX_CACHE), "set_policy");
    const uint32_t per[3] = { 1, 16, 128 };
    size_t periods = quick ? 10 : 100;
    uint64_t *bytes = malloc(periods * sizeof *bytes);
    uint64_t *routes = malloc(periods * sizeof *routes);
    uint64_t *exp_ns = malloc(periods * sizeof *exp_ns);
    uint64_t *imp_ns = malloc(periods * sizeof *imp_ns);
    uint64_t *per_route = malloc(periods * sizeof *per_route);
    if (!bytes || !routes || !exp_ns || !imp_ns || !per_route)
        return 1;
    mark = lr_router_mark(a);
    for (int k = 0; k < 3; k++) {
        for (size_t p = 0; p < periods; p++) {
            for (uint32_t n = 0; n < per[k]; n++) {
                struct conv *c = &convs[rnd() % nconv];
                if (c->len + TURN_TOK > CONV_TOK + 64 * TURN_TOK)
                    c->len = CONV_TOK - 4 * TURN_TOK;
                c->len += TURN_TOK;
                route_conv(a, c, tok, t += 1000);
            }
            lr_blob *d = NULL;
            uint64_t t0 = bench_now_ns();
            bench_check(lr_router_export_delta(a, mark, &d, &mark),
                        "export_delta");
            uint64_t t1 = bench_now_ns();
            bench_check(
                lr_router_import_delta(b, lr_blob_data(d), lr_blob_size(d), t),
                "import_delta");
            uint64_t t2 = bench_now_ns();
            bytes[p] = lr_blob_size(d);
            routes[p] = delta_blocks(d);
            exp_ns[p] = t1 - t0;
            imp_ns[p] = t2 - t1;
            /* ns per route in tenths, for the median */
            per_route[p] = routes[p] ? 10 * imp_ns[p] / routes[p] : 0;
            lr_blob_destroy(d);
        }
        char name[32];
        snprintf(name, sizeof name, "delta_incr_%u", per[k]);
        uint64_t pr = bench_median(per_route, periods);
        printf("{\"name\": \"%s\", \"periods\": %zu, \"bytes_p50\": %llu, "
               "\"routes_p50\": %llu, \"export_ns_p50\": %llu, "
               "\"import_ns_p50\": %llu, \"import_ns_per_route_p50\": %.1f}\n",
               name, periods, (unsigned long long)bench_median(bytes, periods),
               (unsigned long long)bench_median(routes, periods),
               (unsigned long long)bench_median(exp_ns, periods),
               (unsigned long long)bench_median(imp_ns, periods),
               (double)pr / 10);
        fflush(stdout);
    }
    /* the periodic full publication, into a B that holds it all but the
     * last turn (B applies a full export only past the mark it has) */
    route_conv(a, &convs[0], tok, t += 1000);
    (void)full_delta(a, b, "delta_full_again", t);

    /* gauges: 2 requests in flight on every instance */
    bench_check(lr_router_set_policy(a, LR_POLICY_ROUND_ROBIN), "set_policy");
    uint64_t first = rid;
    for (uint32_t i = 0; i < 2 * NINST; i++) {
        struct conv c = { 0, (uint32_t)rnd(), 2048 };
        conv_tokens(&c, tok);
        lr_request q;
        lr_request_init(&q);
        q.id = rid++;
        q.tokens = tok;
        q.n_tokens = c.len;
        q.now_ns = t;
        lr_decision d;
        lr_decision_init(&d);
        bench_check(lr_router_route(a, &q, &d), "route");
    }
    size_t gi = quick ? 100 : 2000;
    uint64_t *g_exp = malloc(gi * sizeof *g_exp);
    uint64_t *g_imp = malloc(gi * sizeof *g_imp);
    if (!g_exp || !g_imp)
        return 1;
    size_t g_bytes = 0;
    for (size_t i = 0; i < gi; i++) {
        lr_blob *g = NULL;
        uint64_t t0 = bench_now_ns();
        bench_check(lr_router_export_gauges(a, &g), "export_gauges");
        uint64_t t1 = bench_now_ns();
        bench_check(
            lr_router_import_gauges(b, lr_blob_data(g), lr_blob_size(g), t),
            "import_gauges");
        uint64_t t2 = bench_now_ns();
        g_exp[i] = t1 - t0;
        g_imp[i] = t2 - t1;
        g_bytes = lr_blob_size(g);
        lr_blob_destroy(g);
    }
    printf("{\"name\": \"gauges_%u\", \"bytes\": %zu, \"export_ns_p50\": "
           "%llu, \"import_ns_p50\": %llu}\n",
           NINST, g_bytes, (unsigned long long)bench_median(g_exp, gi),
           (unsigned long long)bench_median(g_imp, gi));
    fflush(stdout);
    for (uint64_t id = first; id < rid; id++)
        bench_check(lr_router_complete(a, id, 100, t), "complete");

    gauges_fleet(1024, 16, quick ? 50 : 500);
    gauges_fleet(1024, 64, quick ? 50 : 500);
    if (!quick)
        gauges_fleet(4096, 64, 200);

    /* snapshot and restore */
    lr_blob *full = NULL, *sn = NULL;
    bench_check(lr_router_export_delta(a, 0, &full, NULL), "export_delta");
    uint64_t n_routes = delta_blocks(full);
    lr_blob_destroy(full);
    uint64_t t0 = bench_now_ns();
    bench_check(lr_router_snapshot(a, t, &sn), "snapshot");
    uint64_t t1 = bench_now_ns();
    lr_router *c = make_router(3, cap, LR_POLICY_ROUND_ROBIN);
    uint64_t t2 = bench_now_ns();
    bench_check(lr_router_restore(c, lr_blob_data(sn), lr_blob_size(sn), t),
                "restore");
    uint64_t t3 = bench_now_ns();
    printf("{\"name\": \"snapshot\", \"bytes\": %zu, \"routes\": %llu, "
           "\"bytes_per_route\": %.2f, \"snapshot_ms\": %.1f, "
           "\"restore_ms\": %.1f}\n",
           lr_blob_size(sn), (unsigned long long)n_routes,
           (double)lr_blob_size(sn) / (double)n_routes, (double)(t1 - t0) / 1e6,
           (double)(t3 - t2) / 1e6);
    lr_blob_destroy(sn);
    lr_router_destroy(c);
    free(g_exp);
    free(g_imp);
    free(bytes);
    free(routes);
    free(exp_ns);
    free(imp_ns);
    free(per_route);
    free(tok);
    free(convs);
    lr_router_destroy(b);
    lr_router_destroy(a);
    return 0;
}
