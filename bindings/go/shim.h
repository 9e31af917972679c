/* C side of the Go binding.
 *
 * cgo lets Go pass a Go pointer to C only if the memory it points to holds
 * no Go pointers. The request-path structs (lr_request, lr_prompt,
 * lr_decision, lr_index_match_result, lr_kv_stored, lr_policy_input) carry
 * pointers to the caller's token, key, parameter and output buffers, so Go
 * cannot build them in its own memory with those pointers set. Go fills
 * them with the library's lr_*_init_sized() and the scalar fields, leaves
 * the pointers into Go memory NULL (pointers into C memory, such as
 * lr_request.mm, it sets itself), and hands the buffers to these shims as
 * separate arguments; each shim copies the struct
 * to its own stack, sets the pointers, makes the call and copies the
 * outputs back with the pointers cleared again. Nothing here allocates and
 * nothing keeps a pointer after it returns.
 *
 * The same holds for options that point to nested options
 * (lr_router_options.learner -> lr_learner_options.mlp): Go passes each
 * struct separately (NULL for "none") and the shim links copies of them on
 * its stack for the create call, which copies them in turn.
 */
#ifndef LIBROUTE_GO_SHIM_H
#define LIBROUTE_GO_SHIM_H

#include <libroute.h>

/* lr_text_tokens into out[0..capacity), the count being the caller's:
 * TextTokensAppend's out-parameter would otherwise be a Go variable that
 * escapes to the heap on every call. */
lr_status lrgo_text_tokens(const void *text, size_t len, uint32_t width,
                           uint32_t *out, size_t capacity);

/* The request's model and adapter names come as (bytes, length) pairs,
 * a Go string's bytes with no NUL (NULL with 0: none): each shim copies
 * them NUL-terminated into buffers on its stack, at most one byte more
 * than the library takes, so a name too long is still the library's
 * LR_EINVAL. */
lr_status lrgo_router_route(lr_router *r, const lr_request *q,
                            const uint32_t *tokens, const uint32_t *boundaries,
                            const char *model, size_t model_len,
                            const char *adapter, size_t adapter_len,
                            lr_score *scores, lr_decision *d);

/* The multimodal inputs of a request or prompt (lr_request.mm,
 * lr_prompt.mm) hold pointers, so Go copies them to C memory and sets them
 * in the struct itself. An event's mm_hashes are a Go slice, passed as the
 * other arrays are. */
lr_status lrgo_router_kv_stored(lr_router *r, uint32_t id,
                                const lr_kv_stored *ev,
                                const uint64_t *block_hashes,
                                const uint32_t *token_ids,
                                const uint64_t *mm_hashes, uint64_t now_ns);

lr_status lrgo_index_learn(lr_index *idx, const lr_prompt *p,
                           const uint32_t *tokens, const uint32_t *boundaries,
                           const uint64_t *keys, uint32_t instance,
                           int32_t trust, uint64_t now_ns);

lr_status lrgo_index_match(lr_index *idx, const lr_prompt *p,
                           const uint32_t *tokens, const uint64_t *keys,
                           uint64_t now_ns, uint32_t flags,
                           lr_index_hit *hits, lr_index_match_result *m);

lr_status lrgo_index_kv_stored(lr_index *idx, uint32_t instance,
                               const lr_kv_stored *ev,
                               const uint64_t *block_hashes,
                               const uint32_t *token_ids,
                               const uint64_t *mm_hashes, uint64_t now_ns);

lr_status lrgo_router_candidates(lr_router *r, const lr_request *q,
                                 const uint32_t *tokens, const char *model,
                                 size_t model_len, const char *adapter,
                                 size_t adapter_len, lr_candidate *rows,
                                 size_t capacity, size_t row_size,
                                 size_t *n_rows);

lr_status lrgo_router_policy_input(lr_router *r, const lr_request *q,
                                   const uint32_t *tokens,
                                   const uint32_t *boundaries,
                                   const char *model, size_t model_len,
                                   const char *adapter, size_t adapter_len,
                                   lr_policy_input *in, double *params,
                                   size_t capacity);

lr_status lrgo_policy_decide(int32_t policy, const lr_policy_input *in,
                             const double *params, lr_mlp *model,
                             const lr_candidate *rows, size_t n_rows,
                             size_t row_size, double *scores, lr_decision *d);

lr_status lrgo_learner_create(const lr_learner_options *o,
                              const lr_mlp_options *mlp, lr_learner **out);

lr_status lrgo_router_create(const lr_router_options *o,
                             const lr_learner_options *learner,
                             const lr_mlp_options *mlp, lr_router **out);

#endif
