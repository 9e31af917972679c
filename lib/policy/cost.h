/* Internal view of lr_cost: the cost formulas every policy uses, once,
 * and the tuner's hooks for the router. */
#ifndef LIBROUTE_LIB_COST_H
#define LIBROUTE_LIB_COST_H

#include <math.h>

#include "common/common.h"
#include "libroute/lr_cost.h"

/* Predicted TTFT in seconds of `pending` prefill tokens on row c:
 * pending / prefill_rate + w_rtt x rtt + w_stall x stall. */
static inline double
lr__ttft_s(const lr_candidate *c, double pending, double w_rtt, double w_stall)
{
    return pending / c->prefill_rate + w_rtt * (c->rtt_ms / 1e3) +
           w_stall * c->stall_s;
}

/* The TTFT model for a request of `prompt` tokens: its uncached tokens
 * queue behind the instance's pending prefill. */
static inline double
lr__cost_ttft(const lr_candidate *c, uint32_t prompt, double w_rtt,
              double w_stall)
{
    double pending =
        (double)c->prefill_tokens + (double)(prompt - c->cached_tokens);
    return lr__ttft_s(c, pending, w_rtt, w_stall);
}

/* GORGO: w_rtt x RTT ms + uncached tokens + w_queue x queued tokens. */
static inline double
lr__cost_gorgo(const lr_candidate *c, uint32_t prompt, double w_rtt,
               double w_queue, bool at_first_token)
{
    double queued =
        (double)(at_first_token ? c->queued_tokens : c->prompt_tokens);
    return w_rtt * c->rtt_ms + (double)(prompt - c->cached_tokens) +
           w_queue * queued;
}

/* Dynamo: w x uncached prefill blocks + decode blocks. */
static inline double
lr__cost_dynamo(const lr_candidate *c, uint32_t prompt, double block_tokens,
                double w_uncached)
{
    double uncached = ceil((double)(prompt - c->cached_tokens) / block_tokens);
    double decode = ceil((double)c->kv_tokens / block_tokens);
    return w_uncached * uncached + decode;
}

/* Dynamo with lower tiers: w x max(0, uncached prefill blocks - credit)
 * + decode blocks, credit the weighted lower-tier overlap blocks (Dynamo's
 * adjusted_prefill_blocks); lr__cost_dynamo exactly when credit is 0. */
static inline double
lr__cost_dynamo_tiered(const lr_candidate *c, uint32_t prompt,
                       double block_tokens, double w_uncached, double credit)
{
    if (!(credit > 0))
        return lr__cost_dynamo(c, prompt, block_tokens, w_uncached);
    double uncached = ceil((double)(prompt - c->cached_tokens) / block_tokens);
    double decode = ceil((double)c->kv_tokens / block_tokens);
    double left = uncached - credit;
    return w_uncached * (left > 0 ? left : 0) + decode;
}

/* The weight in service (a trial's during a trial), for the router's
 * GORGO policy; lr_cost_get_param() reads the incumbent. */
double lr__cost_in_service(const lr_cost *cost, int32_t key);

/* Whether the tuner is running (not off, not converged). */
bool lr__cost_tuning(const lr_cost *cost);

/* Checksum of the logical state (kind, parameters, tuner); equal before
 * and after a failed call. */
uint64_t lr__cost_digest(const lr_cost *cost);

/* Bytes allocated through the model's allocator. */
size_t lr__cost_mem_live(const lr_cost *cost);

/* Check a row table a host passed: row_size, an instance (not NONE),
 * cached <= prompt, positive finite rates, non-negative finite times and loads,
 * kv_use in [0, 1]. LR_OK or LR_EINVAL. */
lr_status lr__rows_check(const lr_candidate *rows, size_t n, size_t row_size,
                         uint32_t prompt);

#endif /* LIBROUTE_LIB_COST_H */
