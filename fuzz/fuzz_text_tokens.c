/* lr_text_tokens(): sizes, EBUFSIZE writes nothing, each token is the
 * documented hash of its chunk, and the tokens of a prefix cut at a
 * multiple of width are the first tokens of the whole text.
 *
 * Input: parameters from the back (width 0..LR_TEXT_MAX_WIDTH + 1, so
 * invalid widths too; a cut point), text from the front. */
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "libroute/lr_text.h"
#include "common/lr_hash.h"

#define SENTINEL 0xa5a5a5a5u

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    uint32_t width = fuzz_dp_take_range(&dp, 0, LR_TEXT_MAX_WIDTH + 1);
    uint32_t cut = fuzz_dp_take_range(&dp, 0, 0xffff);
    size_t len;
    const uint8_t *text = fuzz_dp_rest(&dp, &len);

    size_t n = 12345;
    lr_status st = lr_text_tokens(text, len, width, NULL, 0, &n);
    if (width == 0 || width > LR_TEXT_MAX_WIDTH) {
        FUZZ_ASSERT_STATUS(st, st == LR_EINVAL);
        return 0;
    }
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_ASSERT(n == (len + width - 1) / width);
    /* NULL text is only fine when empty */
    if (len > 0) {
        size_t m = 0;
        st = lr_text_tokens(NULL, len, width, NULL, 0, &m);
        FUZZ_ASSERT_STATUS(st, st == LR_EINVAL);
    }
    FUZZ_ASSERT(lr_text_tokens(text, len, width, NULL, 0, NULL) == LR_EINVAL);

    uint32_t *tok = malloc((n + 1) * sizeof *tok);
    FUZZ_ASSERT(tok != NULL);
    for (size_t i = 0; i <= n; i++)
        tok[i] = SENTINEL;
    if (n > 0) {
        size_t need = 0;
        st = lr_text_tokens(text, len, width, tok, n - 1, &need);
        FUZZ_ASSERT_STATUS(st, st == LR_EBUFSIZE);
        FUZZ_ASSERT(need == n);
        for (size_t i = 0; i <= n; i++)
            FUZZ_ASSERT(tok[i] == SENTINEL);
    }
    size_t got = 0;
    st = lr_text_tokens(text, len, width, tok, n, &got);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_ASSERT(got == n);
    FUZZ_ASSERT(tok[n] == SENTINEL);
    for (size_t i = 0; i < n; i++) {
        size_t off = i * width;
        size_t w = len - off < width ? len - off : width;
        FUZZ_ASSERT(w > 0);
        FUZZ_ASSERT(tok[i] == (uint32_t)lr__hash(text + off, w, LR_SEED_TEXT));
    }

    /* Prefix property: k whole chunks give the first k tokens. */
    size_t k = n ? cut % (n + 1) : 0;
    size_t plen = k * width < len ? k * width : len;
    uint32_t *ptok = malloc((k + 1) * sizeof *ptok);
    FUZZ_ASSERT(ptok != NULL);
    size_t pn = 0;
    st = lr_text_tokens(text, plen, width, ptok, k + 1, &pn);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_ASSERT(pn == k);
    FUZZ_ASSERT(k == 0 || memcmp(ptok, tok, k * sizeof *tok) == 0);

    /* Any cut: every whole chunk before it agrees too. */
    size_t alen = len ? cut % (len + 1) : 0;
    size_t an = 0;
    st = lr_text_tokens(text, alen, width, NULL, 0, &an);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    uint32_t *atok = malloc((an + 1) * sizeof *atok);
    FUZZ_ASSERT(atok != NULL);
    st = lr_text_tokens(text, alen, width, atok, an, &an);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    size_t whole = alen / width;
    FUZZ_ASSERT(whole == 0 || memcmp(atok, tok, whole * sizeof *tok) == 0);

    free(atok);
    free(ptok);
    free(tok);
    return 0;
}
