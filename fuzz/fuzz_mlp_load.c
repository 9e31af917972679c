/* lr_mlp_load() on untrusted bytes.
 *
 * The first byte is a control byte, the rest the blob:
 *   bit 0     recompute the trailing checksum, so that mutations reach the
 *             shape and value checks instead of dying on the checksum;
 *   bit 1     also write the magic and format version, so the fuzzer need
 *             not find them;
 *   bits 2-7  an allocation failure inside the load: 0 none, 1..31 that
 *             allocation only, 32..63 allocation n - 31 and every one
 *             after.
 *
 * Properties: the status is a documented one (LR_ENOMEM only when a
 * failure was injected, and then nothing is returned); a refused blob is
 * refused the same way again; a loaded network predicts (no crash, the
 * same bits twice, nothing written on a non-finite input), saves to
 * exactly the bytes it was loaded from, and that blob loads again to a
 * network predicting the same bits; predictions are finite with LR_OK;
 * a clone of it trains, and either what it leaves loads again or the
 * training diverged (LR_ERANGE) and left it byte for byte as it was. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_helpers.h"
#include "index_util.h"
#include "common/lr_hash.h"
#include "learn/mlp.h"

#define SEAL_SEED 0x4c524d4c50303031ull /* lib/learn/mlp.c MLP_HASH_SEED */
#define ROWS 5

static bool
documented(lr_status st)
{
    return st == LR_OK || st == LR_ECORRUPT || st == LR_EVERSION ||
           st == LR_ENOMEM;
}

/* ROWS rows of features: zeros, small, large and mixed values. */
static float *
rows_for(uint32_t d, const uint8_t *data, size_t size)
{
    static const float vals[] = { 0.0f,   1.0f,   -1.0f, 0.5f,    3.0f,
                                  -7.0f,  1e6f,   -1e6f, 1e30f,   -3e38f,
                                  2e-38f, 123.0f, 0.25f, -0.125f, 42.0f };
    float *x = malloc((size_t)ROWS * d * sizeof *x);
    FUZZ_ASSERT(x != NULL);
    for (size_t i = 0; i < (size_t)ROWS * d; i++) {
        uint8_t b = size > 0 ? data[(i * 7) % size] : 0;
        x[i] = vals[(b + i) % (sizeof vals / sizeof vals[0])];
    }
    return x;
}

/* Predictions are finite with LR_OK; an extreme network may overflow on
 * rows past its probe (LR_ERANGE, out all zero); either way the same
 * twice. */
static void
predict_checked(lr_mlp *m, const float *x, float *out)
{
    lr_status st = lr_mlp_predict(m, x, ROWS, out);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ERANGE);
    for (int r = 0; r < ROWS; r++)
        FUZZ_ASSERT(isfinite(out[r]) && (st == LR_OK || out[r] == 0.0f));
    float again[ROWS];
    lr_status st2 = lr_mlp_predict(m, x, ROWS, again);
    FUZZ_ASSERT_STATUS(st2, st2 == st);
    FUZZ_ASSERT(memcmp(out, again, sizeof again) == 0);
}

/* The bytes lr_mlp_save() writes for m (caller frees). */
static lr_blob *
saved(const lr_mlp *m)
{
    lr_blob *b = NULL;
    lr_status st = lr_mlp_save(m, &b);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && b != NULL);
    return b;
}

static void
use_loaded(lr_mlp *m, const uint8_t *blob, size_t len)
{
    uint32_t d = lr_mlp_n_inputs(m);
    FUZZ_ASSERT(d >= 1 && d <= LR_MLP_MAX_INPUTS);
    float *x = rows_for(d, blob, len);
    float out[ROWS], out2[ROWS];
    predict_checked(m, x, out);

    /* a non-finite input is refused and nothing is written */
    float keep = x[d - 1];
    x[d - 1] = NAN;
    float sentinel[ROWS];
    memset(sentinel, 0x5a, sizeof sentinel);
    memcpy(out2, sentinel, sizeof out2);
    lr_status st = lr_mlp_predict(m, x, ROWS, out2);
    FUZZ_ASSERT_STATUS(st, st == LR_EINVAL);
    FUZZ_ASSERT(memcmp(out2, sentinel, sizeof out2) == 0);
    x[d - 1] = keep;

    size_t n_out = 0;
    st = lr_mlp_out_of_range(m, x, ROWS, &n_out);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && n_out <= ROWS);

    /* save gives back exactly the bytes loaded */
    lr_blob *b = NULL;
    st = lr_mlp_save(m, &b);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && b != NULL);
    FUZZ_ASSERT(lr_blob_size(b) == len);
    FUZZ_ASSERT(memcmp(lr_blob_data(b), blob, len) == 0);

    /* and they load again to the same predictions */
    lr_mlp *m2 = NULL;
    st = lr_mlp_load(lr_blob_data(b), lr_blob_size(b), NULL, &m2);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && m2 != NULL);
    predict_checked(m2, x, out2);
    FUZZ_ASSERT(memcmp(out, out2, sizeof out) == 0);
    lr_blob_destroy(b);
    lr_mlp_destroy(m2);

    /* a small network trains (any result, no crash), as does its clone */
    if (lr__mlp_n_params(m) <= 20000) {
        lr_mlp *c = NULL;
        st = lr_mlp_clone(m, &c);
        FUZZ_ASSERT_STATUS(st, st == LR_OK && c != NULL);
        float y[ROWS] = { 1.0f, -2.0f, 0.5f, 100.0f, 0.0f };
        double loss = 0.0;
        lr_blob *before = saved(c);
        st = lr_mlp_train(c, x, y, ROWS, 2, &loss);
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ERANGE);
        lr_blob *after = saved(c);
        if (st == LR_ERANGE) { /* diverged: undone */
            FUZZ_ASSERT(lr_blob_size(after) == lr_blob_size(before));
            FUZZ_ASSERT(memcmp(lr_blob_data(after), lr_blob_data(before),
                               lr_blob_size(after)) == 0);
        } else { /* what training leaves loads again */
            lr_mlp *m3 = NULL;
            st = lr_mlp_load(lr_blob_data(after), lr_blob_size(after), NULL,
                             &m3);
            FUZZ_ASSERT_STATUS(st, st == LR_OK);
            lr_mlp_destroy(m3);
        }
        lr_blob_destroy(before);
        lr_blob_destroy(after);
        st = lr_mlp_loss(c, x, y, ROWS, &loss);
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ERANGE);
        FUZZ_ASSERT(st != LR_OK || isfinite(loss));
        lr_mlp_destroy(c);
    }
    free(x);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t ctl = data[0];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1); /* exact size for ASan */
    FUZZ_ASSERT(buf != NULL);
    if (len > 0)
        memcpy(buf, data + 1, len);
    if ((ctl & 2) && len >= 12) {
        memcpy(buf, "LRMLP\0\0\0", 8);
        lr__put_u32(buf + 8, 1);
    }
    if ((ctl & 1) && len >= 8)
        lr__put_u64(buf + len - 8, lr__hash(buf, len - 8, SEAL_SEED));

    struct fuzz_oom oom;
    fuzz_oom_select(&oom, ctl >> 2);
    lr_allocator alloc;
    fuzz_oom_allocator(&oom, &alloc);
    lr_mlp *m = (lr_mlp *)&m;
    oom.armed = true;
    lr_status st = lr_mlp_load(len ? buf : NULL, len, &alloc, &m);
    oom.armed = false;
    fuzz_trace("lr_mlp_load(%zu bytes, ctl 0x%02x) = %s", len, ctl,
               lr_status_name(st));
    FUZZ_ASSERT_STATUS(st, documented(st));
    if (oom.failures == 0)
        FUZZ_ASSERT_STATUS(st, st != LR_ENOMEM);
    if (st != LR_OK) {
        FUZZ_ASSERT(m == NULL);
        /* refused the same way again; refused for memory, not again */
        lr_mlp *m2 = NULL;
        lr_status st2 = lr_mlp_load(len ? buf : NULL, len, NULL, &m2);
        if (st != LR_ENOMEM)
            FUZZ_ASSERT_STATUS(st2, st2 == st && m2 == NULL);
        else
            FUZZ_ASSERT_STATUS(st2, st2 != LR_ENOMEM);
        lr_mlp_destroy(m2);
    } else {
        FUZZ_ASSERT(m != NULL);
        use_loaded(m, buf, len);
        lr_mlp_destroy(m);
    }
    free(buf);
    return 0;
}
