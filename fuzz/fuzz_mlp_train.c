/* lr_mlp training on hostile numbers: targets and features as raw float
 * bit patterns (NaN, infinities, 3e38, denormals), learning rates and
 * clips that make training diverge, allocation failures.
 *
 * Input: parameters off the back (fuzz_dp_take_*), then the rows off the
 * front as little-endian float bit patterns:
 *   shape    n_inputs 1..6, hidden layers 1..3, width 1..12, batch 1..8
 *   options  learning rate (1e-4 .. 1 and 1), gradient clip (off, 0.1, 1,
 *            1e6), dropout (0, 0.1, 0.5), weight decay (0, 1e-5, 0.5)
 *   run      rows 1..24, epochs 0..4, fit the normalization first
 *            (none, features, features and targets), an allocation
 *            failure (fuzz_oom_select), a value scale (as read, or
 *            squashed into [-8, 8] so that most inputs train)
 *   rows     rows x n_inputs features, then rows targets
 *
 * Properties: every status is one the header documents (LR_ENOMEM only
 * when a failure was injected); a fit or a train that fails leaves the
 * saved bytes of the network exactly as they were (B11); a train that
 * succeeds reports a finite loss and leaves a network whose saved bytes
 * load again (LR_OK: no non-finite or out-of-bound weight, and it passes
 * the load's probe) and predict the same bits; every prediction returned
 * with LR_OK is finite, and an LR_ERANGE one leaves zeros; the same input
 * twice gives the same bytes (B24). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index_util.h"
#include "common/lr_hash.h"
#include "learn/mlp.h"

#define MAX_ROWS 24
#define MAX_D 6

static lr_blob *
saved(const lr_mlp *m)
{
    lr_blob *b = NULL;
    fuzz_oom_pause();
    lr_status st = lr_mlp_save(m, &b);
    fuzz_oom_resume();
    FUZZ_ASSERT_STATUS(st, st == LR_OK && b != NULL);
    return b;
}

static bool
same_blob(const lr_blob *a, const lr_blob *b)
{
    return lr_blob_size(a) == lr_blob_size(b) &&
           memcmp(lr_blob_data(a), lr_blob_data(b), lr_blob_size(a)) == 0;
}

/* Predictions are finite with LR_OK and zero with LR_ERANGE. */
static lr_status
predict_checked(lr_mlp *m, const float *x, size_t rows, float *out)
{
    lr_status st = lr_mlp_predict(m, x, rows, out);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ERANGE || st == LR_EINVAL);
    if (st != LR_EINVAL)
        for (size_t r = 0; r < rows; r++)
            FUZZ_ASSERT(isfinite(out[r]) && (st == LR_OK || out[r] == 0.0f));
    return st;
}

static float
read_f32(fuzz_dp *dp, bool squash)
{
    uint32_t u = fuzz_dp_next_u32(dp);
    float v;
    memcpy(&v, &u, sizeof v);
    if (squash)
        v = (float)((double)(u % 4096u) / 256.0 - 8.0);
    return v;
}

/* One run; returns a hash of everything observable. */
static uint64_t
run_once(const uint8_t *data, size_t size)
{
    static const double lrs[4] = { 1e-4, 1e-3, 0.1, 1.0 };
    static const double clips[4] = { 0.0, 0.1, 1.0, 1e6 };
    static const double drops[3] = { 0.0, 0.1, 0.5 };
    static const double decays[3] = { 0.0, 1e-5, 0.5 };
    uint64_t h = FUZZ_FNV_INIT;
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = fuzz_dp_take_range(&dp, 1, MAX_D);
    o.hidden_layers = fuzz_dp_take_range(&dp, 1, 3);
    o.width = fuzz_dp_take_range(&dp, 1, 12);
    o.batch_size = fuzz_dp_take_range(&dp, 1, 8);
    o.learning_rate = lrs[fuzz_dp_take_range(&dp, 0, 3)];
    o.grad_clip = clips[fuzz_dp_take_range(&dp, 0, 3)];
    o.dropout = drops[fuzz_dp_take_range(&dp, 0, 2)];
    o.weight_decay = decays[fuzz_dp_take_range(&dp, 0, 2)];
    o.seed = fuzz_dp_take_range(&dp, 0, 255);
    size_t rows = fuzz_dp_take_range(&dp, 1, MAX_ROWS);
    uint32_t epochs = fuzz_dp_take_range(&dp, 0, 4);
    uint32_t fit = fuzz_dp_take_range(&dp, 0, 2);
    unsigned sel = fuzz_dp_take_range(&dp, 0, 63);
    bool squash = fuzz_dp_take_bool(&dp);
    const size_t d = o.n_inputs;
    float x[MAX_ROWS * MAX_D], y[MAX_ROWS], out[MAX_ROWS];
    for (size_t i = 0; i < rows * d; i++)
        x[i] = read_f32(&dp, squash);
    for (size_t r = 0; r < rows; r++)
        y[r] = read_f32(&dp, squash);
    fuzz_trace("mlp(d=%zu, L=%u, W=%u, batch=%u, lr=%g, clip=%g, drop=%g, "
               "decay=%g); %zu rows, %u epochs, fit %u, oom %u, squash %d",
               d, o.hidden_layers, o.width, o.batch_size, o.learning_rate,
               o.grad_clip, o.dropout, o.weight_decay, rows, epochs, fit, sel,
               squash);

    lr_mlp *m = NULL;
    lr_status st = lr_mlp_create(&o, &m);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    struct fuzz_oom oom;
    fuzz_oom_select(&oom, sel);
    lr_allocator alloc;
    fuzz_oom_allocator(&oom, &alloc);
    /* the network keeps its own allocator: train through a clone made
     * with the failing one (lr_mlp_clone keeps the original's), so load
     * a copy through it instead */
    lr_blob *b0 = saved(m);
    lr_mlp_destroy(m);
    m = NULL;
    st = lr_mlp_load(lr_blob_data(b0), lr_blob_size(b0), &alloc, &m);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    oom.armed = true;

    if (fit > 0) {
        st = lr_mlp_fit_normalization(m, x, rows, fit == 2 ? y : NULL);
        fuzz_trace("fit_normalization = %s", lr_status_name(st));
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EINVAL || st == LR_ERANGE);
        if (st != LR_OK) {
            lr_blob *b = saved(m);
            FUZZ_ASSERT(same_blob(b, b0));
            lr_blob_destroy(b);
        }
        h = fuzz_fnv_u64(h, (uint64_t)st);
    }
    lr_blob *before = saved(m);
    double loss = -1.0;
    st = lr_mlp_train(m, x, y, rows, epochs, &loss);
    fuzz_trace("train = %s, loss %g", lr_status_name(st), loss);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EINVAL || st == LR_ERANGE ||
                               st == LR_ENOMEM);
    if (oom.failures == 0)
        FUZZ_ASSERT_STATUS(st, st != LR_ENOMEM);
    oom.armed = false;
    h = fuzz_fnv_u64(h, (uint64_t)st);
    lr_blob *after = saved(m);
    if (st != LR_OK) {
        FUZZ_ASSERT(same_blob(before, after));
    } else {
        FUZZ_ASSERT(isfinite(loss) && loss >= 0.0);
        /* what training leaves loads again and predicts the same */
        lr_mlp *m2 = NULL;
        st = lr_mlp_load(lr_blob_data(after), lr_blob_size(after), NULL, &m2);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        float out2[MAX_ROWS];
        lr_status p1 = predict_checked(m, x, rows, out);
        lr_status p2 = predict_checked(m2, x, rows, out2);
        FUZZ_ASSERT(p1 == p2);
        if (p1 != LR_EINVAL)
            FUZZ_ASSERT(memcmp(out, out2, rows * sizeof *out) == 0);
        lr_mlp_destroy(m2);
        double mse = -1.0;
        st = lr_mlp_loss(m, x, y, rows, &mse);
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EINVAL || st == LR_ERANGE);
        FUZZ_ASSERT(st != LR_OK || (isfinite(mse) && mse >= 0.0));
    }
    h = fuzz_fnv(h, lr_blob_data(after), lr_blob_size(after));
    lr_status p = predict_checked(m, x, rows, out);
    h = fuzz_fnv_u64(h, (uint64_t)p);
    if (p != LR_EINVAL)
        h = fuzz_fnv(h, out, rows * sizeof *out);
    lr_blob_destroy(before);
    lr_blob_destroy(after);
    lr_blob_destroy(b0);
    lr_mlp_destroy(m);
    return h;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t a = run_once(data, size);
    if (!fuzz_trace_on())
        FUZZ_ASSERT(run_once(data, size) == a); /* B24 */
    return 0;
}
