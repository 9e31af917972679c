/* Internal: the vLLM batch decoder shared by the index and the router. */
#ifndef LIBROUTE_LIB_VLLM_H
#define LIBROUTE_LIB_VLLM_H

#include "common/common.h"
#include "libroute/lr_vllm.h"

/* The engine timestamps a batch may carry, seconds (vLLM: time.time()):
 * finite, >= 0 and at most this (the year 5138); any other makes the batch
 * corrupt (LR_ECORRUPT). */
#define LR__KV_TS_MAX 1e11

/* Decode and apply one batch to ix; scratch from mem. info must have been
 * initialised (lr_vllm_batch_info_init) and is filled in. */
lr_status lr__vllm_apply(lr_index *ix, struct lr__mem *mem, uint32_t instance,
                         const uint8_t *buf, size_t len, uint64_t now_ns,
                         lr_vllm_batch_info *info);

/* The batch's timestamp (0 when absent), its framing and timestamp
 * checked (not its events): LR_OK or LR_ECORRUPT. */
lr_status lr__vllm_peek(const uint8_t *buf, size_t len, double *ts);

/* Copy `in` out to a caller's struct of any size >= v1 (NULL: nothing). */
lr_status lr__vllm_info_out(lr_vllm_batch_info *out,
                            const lr_vllm_batch_info *in);

#endif
