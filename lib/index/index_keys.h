/* lr_index, the block keys (index_keys.c): a prompt's chained block keys
 * and the check of a prompt, for the calls that take one. */
#ifndef LIBROUTE_LIB_INDEX_KEYS_H
#define LIBROUTE_LIB_INDEX_KEYS_H

#include "common/common.h"
#include "libroute/lr_index.h"

/* key[-1] of a tenant and the chained block keys (see lr_block_keys()). */
uint64_t lr__index_tenant_root(uint64_t salt);
void lr__index_chain_keys(uint64_t prev, const uint32_t *tok, size_t nblocks,
                          uint32_t B, uint64_t *out);
/* The same with each block's multimodal hash (lr_kv_stored.mm_hashes;
 * NULL: none) XORed into its token hash. */
void lr__index_chain_keys_mm(uint64_t prev, const uint32_t *tok, size_t nblocks,
                             uint32_t B, const uint64_t *mm, uint64_t *out);

/* Check a prompt and point *keys at its block keys (the host's, or
 * computed into the index's key scratch); *n_keys of them. LR_EINVAL,
 * LR_EVERSION, LR_ENOMEM (the scratch array; not state). */
lr_status lr__index_prompt_keys(lr_index *ix, const lr_prompt *in, lr_prompt *p,
                                const uint64_t **keys, uint32_t *n_keys);

#endif /* LIBROUTE_LIB_INDEX_KEYS_H */
