/* lr_router's learner calls: the host's side of Lodestar's online
 * training (lr_router.h, "Lodestar"). They reach the learner of the
 * router's Lodestar state, when it has one (LR_ESTATE otherwise). Training
 * runs on the host's thread and outside the router's lock, so that
 * route() never waits for it: the state and its learner are read through
 * atomic pointers, and neither goes while the router lives. */
#include "learn/learner.h"
#include "policy/lodestar.h"
#include "router/router_impl.h"

static lr_learner *
learner_of(const lr_router *r)
{
    return lr__lodestar_learner(lr__router_pstate(r, LR_POLICY_LODESTAR));
}

lr_status
lr_router_learn_step(lr_router *r, uint32_t flags, int32_t *trained)
{
    LR_RETURN_IF(r == NULL || (flags & ~LR_LEARN_FORCE) != 0, LR_EINVAL);
    lr_learner *l = learner_of(r);
    LR_RETURN_IF(l == NULL, LR_ESTATE);
    return lr_learner_step(l, flags, trained);
}

/* Deprecated: lr_lodestar_feature_count() says the same. */
uint32_t
lr_router_learner_feature_count(const lr_router *r)
{
    (void)r;
    return LR_LODESTAR_FEATURES;
}

/* Rows of F floats packed at the start of x spread out to row_width,
 * last row first (row_width >= F, so nothing is overwritten early). */
static void
spread_rows(float *x, size_t n, size_t row_width)
{
    const size_t f = LR_LODESTAR_FEATURES;
    for (size_t i = n; i-- > 0;) {
        memmove(x + i * row_width, x + i * f, f * sizeof *x);
        memset(x + i * row_width + f, 0, (row_width - f) * sizeof *x);
    }
}

lr_status
lr_router_learner_samples(lr_router *r, float *x, size_t row_width, float *y,
                          size_t capacity, size_t *n_samples)
{
    LR_RETURN_IF(r == NULL || n_samples == NULL, LR_EINVAL);
    LR_RETURN_IF(row_width < LR_LODESTAR_FEATURES, LR_EINVAL);
    lr_learner *l = learner_of(r);
    LR_RETURN_IF(l == NULL, LR_ESTATE);
    LR_TRY(lr_learner_samples(l, x, y, capacity, n_samples));
    if (x != NULL && row_width > LR_LODESTAR_FEATURES)
        spread_rows(x, *n_samples, row_width);
    return LR_OK;
}

lr_status
lr_router_learner_save(lr_router *r, lr_blob **out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    lr__router_lock(r);
    lr_learner *l = learner_of(r);
    lr_mlp *net = l != NULL ? lr__learner_model(l) : NULL;
    lr_status st = net != NULL ? lr_mlp_save(net, out) : LR_ESTATE;
    return lr__router_release(r, st);
}

lr_status
lr_router_learner_stats(const lr_router *r, lr_learner_stats *out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr_learner *l = learner_of(r);
    lr_status st = l != NULL ? lr_learner_get_stats(l, out) : LR_ESTATE;
    return lr__router_release(r, st);
}
