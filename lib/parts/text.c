/* Fixed-width pseudo-tokens for hosts without a tokenizer. */
#include "common/common.h"
#include "common/lr_hash.h"
#include "libroute/lr_text.h"

lr_status
lr_text_tokens(const void *text, size_t len, uint32_t width, uint32_t *out,
               size_t capacity, size_t *needed)
{
    LR_RETURN_IF(needed == NULL, LR_EINVAL);
    LR_RETURN_IF(width == 0 || width > LR_TEXT_MAX_WIDTH, LR_EINVAL);
    LR_RETURN_IF(len > LR_TEXT_MAX_BYTES, LR_EINVAL);
    LR_RETURN_IF(text == NULL && len != 0, LR_EINVAL);
    size_t n = len / width + (len % width != 0);
    *needed = n;
    if (out == NULL)
        return LR_OK;
    LR_RETURN_IF(capacity < n, LR_EBUFSIZE);
    const uint8_t *p = text;
    for (size_t i = 0; i < n; i++) {
        size_t off = i * width;
        size_t w = len - off < width ? len - off : width;
        out[i] = (uint32_t)lr__hash(p + off, w, LR_SEED_TEXT);
    }
    return LR_OK;
}
