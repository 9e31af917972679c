/* A large candidate table shaped for timing every policy (the bench's
 * decide_<policy>_<n> cases and test-policy.c's growth test): distinct
 * in-flight counts in a random order (a median or a quantile must really
 * select), hits on a few rows, the ring's ranks on the first rows, every
 * field valid. Header-only: the bench and the tests each include it. */
#ifndef LIBROUTE_TESTS_POLICY_TABLE_H
#define LIBROUTE_TESTS_POLICY_TABLE_H

#include <stdint.h>
#include <string.h>

#include "libroute/lr_policy.h"
#include "libroute/lr_ring.h"

static inline uint64_t
pt_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Rows for a prompt of `prompt` tokens, instances 0 .. n - 1. */
static inline void
pt_fill(lr_candidate *rows, size_t n, uint32_t prompt, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t k = 0; k < n; k++) {
        lr_candidate *r = &rows[k];
        memset(r, 0, sizeof *r);
        r->instance = (uint32_t)k;
        r->inflight = (uint32_t)k; /* shuffled below */
        r->prefill_rate = 8000;
        r->cached_age_s = -1;
        r->prefix_caching = 1;
        r->ring_rank = k < LR_RING_MAX_K ? (uint32_t)k + 1 : 0;
        r->cached_tokens = pt_next(&s) % 16 == 0 ? prompt / 2 : 0;
        r->prefill_tokens = pt_next(&s) % 100000;
        r->queued_tokens = r->prefill_tokens;
        r->prompt_tokens = r->prefill_tokens;
        r->kv_use = (double)(pt_next(&s) % 100) / 100;
        r->rtt_ms = (double)(pt_next(&s) % 50);
        r->running = (uint32_t)(pt_next(&s) % 64);
        r->tree_blocks = pt_next(&s) % 10000;
        r->ttft_s_per_token = 1e-4;
        r->ttft_base_s = 0.01;
        r->ttft_s_per_decoding = 0.001;
        r->prefill_tokens_avg = (double)(pt_next(&s) % 100000);
        r->route_rate = 1;
    }
    for (size_t k = n; k > 1; k--) { /* Fisher-Yates over the loads */
        size_t j = (size_t)(pt_next(&s) % k);
        uint32_t t = rows[k - 1].inflight;
        rows[k - 1].inflight = rows[j].inflight;
        rows[j].inflight = t;
    }
}

#endif /* LIBROUTE_TESTS_POLICY_TABLE_H */
