/** @file
 * lr_text: pseudo-tokens for hosts with no tokenizer. The bytes of a text
 * are cut into chunks of `width` bytes and each chunk becomes one 32-bit
 * token (XXH3_64bits_withSeed(chunk, n, 0x4c52544558543031), low 32 bits);
 * the last chunk may be shorter. Equal text prefixes give equal token
 * prefixes, which is all the prefix index needs. Two different chunks give
 * the same token with probability about 2^-32.
 *
 * Example:
 *   size_t n;
 *   lr_text_tokens(text, len, 4, NULL, 0, &n);      // ask the size
 *   uint32_t *toks = malloc(n * sizeof *toks);
 *   lr_text_tokens(text, len, 4, toks, n, &n);
 *
 * Thread safety: reentrant.
 */
#ifndef LIBROUTE_LR_TEXT_H
#define LIBROUTE_LR_TEXT_H

#include "lr_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Widest chunk, in bytes. @since 0.1 */
#define LR_TEXT_MAX_WIDTH 64u
/** Longest text accepted, in bytes (1 GiB). @since 0.1 */
#define LR_TEXT_MAX_BYTES (1ull << 30)

/** Cut text into fixed-width pseudo-tokens.
 * @param text      borrowed; may be NULL when len is 0.
 * @param width     bytes per token, 1..LR_TEXT_MAX_WIDTH (4 is close to a
 *                  real tokenizer's average on English text).
 * @param out       out: capacity tokens; NULL asks the size.
 * @param needed    out: ceil(len / width).
 * @return LR_OK; LR_EINVAL; LR_EBUFSIZE when capacity < *needed (nothing
 *   written). @since 0.1 */
LR_API lr_status lr_text_tokens(const void *text, size_t len, uint32_t width,
                                uint32_t *out, size_t capacity, size_t *needed);

#ifdef __cplusplus
}
#endif

#endif /* LIBROUTE_LR_TEXT_H */
