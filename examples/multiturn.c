/* multiturn: drive a generated multi-turn chat workload through libroute's
 * prefix index and dual hash ring, and print what was learned, matched and
 * where it went.
 *
 * This example routes by hand on the parts (lr_index_*, lr_ring_*), for a
 * host that wants its own rule; examples/route.c is the example of the
 * router, which does all of this (and the load, the lifecycle and the
 * policies) in lr_router_route().
 *
 * Each conversation starts from one of a few shared system prompts and
 * grows by a user message and an assistant reply per turn; every turn's
 * prompt is the whole history. For each request the example:
 *   1. matches the prompt in the index (which instance caches how much);
 *   2. routes it: to the instance with the longest cached prefix that
 *      covers at least half the prompt, unless that instance is already
 *      busier than 1.25x the average (bounded load); else to the less busy
 *      of the two ring candidates of the conversation's first message;
 *   3. learns the prompt for the chosen instance, with a boundary at every
 *      message end.
 *
 * Usage: multiturn [--conversations N] [--turns N] [--instances N]
 *                  [--seed N] [--quiet]
 * Public API only (<libroute.h>), as a gateway would use it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

#define BLOCK 16
#define SYS_PROMPTS 4
#define MAX_INST 64

static uint64_t rng_state;

static uint64_t
rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct conv {
    uint32_t *tok; /* history so far */
    size_t n, cap;
    uint32_t *bnd; /* message ends */
    size_t nb, bcap;
    uint32_t last_inst;
};

static void
push_msg(struct conv *c, uint32_t len, uint32_t salt)
{
    if (c->n + len > c->cap) {
        c->cap = (c->n + len) * 2;
        c->tok = realloc(c->tok, c->cap * sizeof *c->tok);
    }
    for (uint32_t i = 0; i < len; i++)
        c->tok[c->n + i] = (uint32_t)(rnd() % 50000) ^ salt;
    c->n += len;
    if (c->nb == c->bcap) {
        c->bcap = c->bcap ? c->bcap * 2 : 16;
        c->bnd = realloc(c->bnd, c->bcap * sizeof *c->bnd);
    }
    c->bnd[c->nb++] = (uint32_t)c->n;
}

static int
die(const char *what, lr_status st)
{
    fprintf(stderr, "multiturn: %s: %s (%s)\n", what, lr_strerror(st),
            lr_status_name(st));
    return 1;
}

int
main(int argc, char **argv)
{
    uint32_t n_conv = 24, turns = 6, n_inst = 8;
    uint64_t seed = 42;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "multiturn: %s needs a value (see --help)\n", a);
            return 2;
        }
        char *end;
        unsigned long long x = strtoull(v, &end, 10);
        if (*end != '\0' || x == 0) {
            fprintf(stderr, "multiturn: bad value for %s: %s\n", a, v);
            return 2;
        }
        if (strcmp(a, "--conversations") == 0 && x <= 100000)
            n_conv = (uint32_t)x;
        else if (strcmp(a, "--turns") == 0 && x <= 100)
            turns = (uint32_t)x;
        else if (strcmp(a, "--instances") == 0 && x <= MAX_INST)
            n_inst = (uint32_t)x;
        else if (strcmp(a, "--seed") == 0)
            seed = x;
        else {
            fprintf(stderr,
                    "usage: multiturn [--conversations N] [--turns N] "
                    "[--instances N<=%d] [--seed N] [--quiet]\n",
                    MAX_INST);
            return 2;
        }
        i++;
    }
    rng_state = seed;
    printf("libroute %s: %" PRIu32 " conversations x %" PRIu32
           " turns over %" PRIu32 " instances (seed %" PRIu64 ")\n\n",
           lr_version_string(), n_conv, turns, n_inst, seed);

    lr_index_options io;
    lr_index_options_init(&io);
    io.block_tokens = BLOCK;
    io.capacity_blocks = 1u << 18;
    lr_index *idx;
    lr_status st = lr_index_create(&io, &idx);
    if (st != LR_OK)
        return die("index", st);
    lr_ring *ring;
    st = lr_ring_create(NULL, &ring);
    if (st != LR_OK)
        return die("ring", st);
    char names[MAX_INST][32];
    for (uint32_t i = 0; i < n_inst; i++) {
        snprintf(names[i], sizeof names[i], "10.0.0.%u:8000", i + 1);
        if ((st = lr_ring_add(ring, names[i], i)) != LR_OK)
            return die("ring add", st);
    }

    /* shared system prompts, then conversations */
    struct conv *cv = calloc(n_conv, sizeof *cv);
    uint32_t sys_len[SYS_PROMPTS];
    for (uint32_t s = 0; s < SYS_PROMPTS; s++)
        sys_len[s] = 200 + (uint32_t)(rnd() % 600);
    for (uint32_t c = 0; c < n_conv; c++) {
        uint32_t s = (uint32_t)(rnd() % SYS_PROMPTS);
        uint64_t saved = rng_state;
        rng_state = 1000 + s; /* the same tokens for the same prompt */
        push_msg(&cv[c], sys_len[s], 0);
        rng_state = saved ^ c;
        cv[c].last_inst = UINT32_MAX;
    }

    uint64_t requests = 0, prompt_tokens = 0, hit_tokens = 0;
    uint64_t by_prefix = 0, by_ring = 0, sticky = 0, followups = 0;
    uint64_t load[MAX_INST] = {0};
    lr_index_hit hits[MAX_INST];
    uint64_t now = 1000000000ull;

    for (uint32_t t = 0; t < turns; t++) {
        for (uint32_t c = 0; c < n_conv; c++) {
            struct conv *v = &cv[c];
            push_msg(v, 20 + (uint32_t)(rnd() % 200), c); /* user */
            now += 50000000ull;
            lr_prompt p;
            lr_prompt_init(&p);
            p.tokens = v->tok;
            p.n_tokens = v->n;
            p.boundaries = v->bnd;
            p.n_boundaries = v->nb;

            lr_index_match_result m;
            lr_index_match_result_init(&m);
            m.hits = hits;
            m.hits_capacity = MAX_INST;
            if ((st = lr_index_match(idx, &p, now, 0, &m)) != LR_OK)
                return die("match", st);

            /* bounded load: a cache hit only counts on an instance that
             * is not already far busier than average */
            double cap = 1.25 * (double)requests / n_inst + 1.0;
            uint32_t inst = UINT32_MAX, cached = 0;
            const char *why = "ring";
            for (size_t h = 0; h < m.n_hits && inst == UINT32_MAX; h++)
                if (2 * (uint64_t)hits[h].tokens >= v->n &&
                    (double)load[hits[h].instance] <= cap) {
                    inst = hits[h].instance;
                    cached = hits[h].tokens;
                    why = "prefix hit";
                }
            if (inst == UINT32_MAX) {
                /* the conversation's first user message names it on the
                 * ring: two candidates, take the less busy */
                uint64_t key[4096];
                size_t nk;
                uint32_t first_user = v->nb > 1 ? v->bnd[1] : (uint32_t)v->n;
                lr_block_keys(BLOCK, v->tok, first_user, 0, key, 4096, &nk);
                uint32_t cand[2], nc;
                if ((st = lr_ring_candidates(ring, nk ? key[nk - 1] : 0, 2,
                                             cand, &nc)) != LR_OK)
                    return die("candidates", st);
                inst = cand[0];
                if (nc > 1 && load[cand[1]] < load[cand[0]])
                    inst = cand[1];
                for (size_t h = 0; h < m.n_hits; h++)
                    if (hits[h].instance == inst)
                        cached = hits[h].tokens;
                by_ring++;
            } else {
                by_prefix++;
            }
            if ((st = lr_index_learn(idx, &p, inst, LR_TRUST_LOCAL, now)) !=
                LR_OK)
                return die("learn", st);
            if (!quiet && c < 2)
                printf("conv %2u turn %u: %5zu tokens -> %-14s %-10s "
                       "cached %5u (%3.0f%%)\n",
                       c, t + 1, v->n, names[inst], why, cached,
                       100.0 * cached / (double)v->n);
            if (v->last_inst != UINT32_MAX) {
                followups++;
                sticky += v->last_inst == inst;
            }
            v->last_inst = inst;
            requests++;
            prompt_tokens += v->n;
            hit_tokens += cached;
            load[inst]++;
            push_msg(v, 30 + (uint32_t)(rnd() % 300), c * 7 + 1); /* reply */
        }
    }

    lr_index_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    lr_index_get_stats(idx, &s);
    printf("\nrequests %" PRIu64 ", prompt tokens %" PRIu64
           ", served from cache %" PRIu64 " (%.1f%%)\n",
           requests, prompt_tokens, hit_tokens,
           100.0 * (double)hit_tokens / (double)prompt_tokens);
    printf("routed by prefix %" PRIu64 ", by ring %" PRIu64
           "; follow-up turns on the same instance %.1f%%\n",
           by_prefix, by_ring,
           followups ? 100.0 * (double)sticky / (double)followups : 0.0);
    printf("index: %" PRIu64 " block routes, %" PRIu64
           " distinct prefixes, %.1f bytes per route\n\n",
           s.blocks, s.prefixes,
           s.blocks ? (double)s.bytes / (double)s.blocks : 0.0);
    printf("%-16s %9s %12s\n", "instance", "requests", "blocks held");
    for (uint32_t i = 0; i < n_inst; i++) {
        uint64_t b = 0;
        lr_index_instance_blocks(idx, i, &b);
        printf("%-16s %9" PRIu64 " %12" PRIu64 "\n", names[i], load[i], b);
    }
    for (uint32_t c = 0; c < n_conv; c++) {
        free(cv[c].tok);
        free(cv[c].bnd);
    }
    free(cv);
    lr_ring_destroy(ring);
    lr_index_destroy(idx);
    return 0;
}
