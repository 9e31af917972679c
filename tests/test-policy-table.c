/* A stateful policy added through the policy table alone.
 *
 * "sticky" is defined here, in a test, as one more row of a copy of the
 * library's table: a decide function and the operations of its state (the
 * instance it chose last, the placements, first tokens and endings it was
 * told of, a snapshot section of its own). The router is given the longer
 * table (lr__router_set_policies) and then runs it like any policy:
 * nothing in lib/router/ names it. The test checks that the router makes
 * its state on first use, feeds its decision through prepare, tells it of
 * placements, first tokens and endings, snapshots and restores it, and
 * that a router without the row skips its section. */
#include "common/wire.h"
#include "policy/policy.h"
#include "router-helpers.h"
#include "router/router.h"
#include "router/router_impl.h"

#define STICKY LR__POLICY_COUNT
#define TAG_STICKY 0x59434954u /* "TICY" little-endian */

struct sticky {
    uint32_t last; /* the instance chosen last; NONE before */
    uint64_t placed, first_tokens, ended;
    double ttft_sum;
};

/* The instance chosen last while it is routable, else the least loaded. */
static struct lr__choice
sticky_decide(const struct lr__pctx *c)
{
    for (uint32_t k = 0; k < c->n; k++)
        if (lr__row(c, k)->instance == c->last) {
            c->score[k] = 0;
            return lr__choose(c, k, LR_REASON_SESSION, STICKY);
        }
    return lr__choose(c, lr__least_inflight(c), LR_REASON_LEAST_LOADED, STICKY);
}

static lr_status
sticky_create(const struct lr__penv *env, void **out)
{
    struct sticky *s = lr__calloc(env->mem, 1, sizeof *s);
    LR_RETURN_IF(s == NULL, LR_ENOMEM);
    s->last = LR_INSTANCE_NONE;
    *out = s;
    return LR_OK;
}

static void
sticky_destroy(void *st, struct lr__mem *m)
{
    lr__free(m, st, sizeof(struct sticky));
}

static void
sticky_prepare(const void *st, struct lr__pctx *c)
{
    c->last = ((const struct sticky *)st)->last;
}

static void
sticky_record(void *st, const struct lr__placed *p, uint64_t now_ns)
{
    (void)now_ns;
    struct sticky *s = st;
    if (p->ch.decider != STICKY)
        return;
    s->last = p->rows[p->k].instance;
    s->placed++;
}

static void
sticky_first_token(void *st, uint32_t slot, double ttft_s, uint64_t now_ns,
                   int32_t policy, const double *param)
{
    (void)slot;
    (void)now_ns;
    (void)param;
    struct sticky *s = st;
    if (policy == STICKY && ttft_s >= 0) {
        s->first_tokens++;
        s->ttft_sum += ttft_s;
    }
}

static void
sticky_ended(void *st, uint32_t slot, uint64_t now_ns, bool completed)
{
    (void)slot;
    (void)now_ns;
    (void)completed;
    ((struct sticky *)st)->ended++;
}

static lr_status
sticky_save(const void *st, struct lr__mem *m, lr_blob **out)
{
    const struct sticky *s = st;
    uint8_t *buf;
    LR_TRY(lr__blob_new(m, 4 + 8 * 3, out, &buf));
    struct lr__wr w = { buf, 0 };
    lr__wr_u32(&w, s->last);
    lr__wr_u64(&w, s->placed);
    lr__wr_u64(&w, s->first_tokens);
    lr__wr_f64(&w, s->ttft_sum);
    return LR_OK;
}

static lr_status
sticky_load(const struct lr__penv *env, const uint8_t *p, size_t n, void **out)
{
    struct lr__rd rd = { p, p + n, false };
    struct sticky v = { 0 };
    v.last = lr__rd_u32(&rd);
    v.placed = lr__rd_u64(&rd);
    v.first_tokens = lr__rd_u64(&rd);
    v.ttft_sum = lr__rd_f64(&rd);
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    LR_TRY(sticky_create(env, out));
    *(struct sticky *)*out = v;
    return LR_OK;
}

static uint64_t
sticky_digest(const void *st, uint64_t d)
{
    const struct sticky *s = st;
    d = lr__digest_mix(d, s->last);
    d = lr__digest_mix(d,
                       s->placed ^ (s->first_tokens << 20) ^ (s->ended << 40));
    return lr__digest_mix(d, lr__double_bits(s->ttft_sum));
}

static const struct lr__pstate_ops sticky_ops = {
    .create = sticky_create,
    .destroy = sticky_destroy,
    .prepare = sticky_prepare,
    .record = sticky_record,
    .first_token = sticky_first_token,
    .ended = sticky_ended,
    .tag = TAG_STICKY,
    .save = sticky_save,
    .load = sticky_load,
    .digest = sticky_digest,
};

static struct lr__policy_def rows[LR__POLICY_COUNT + 1];
static struct lr__ptable table = { rows, LR__POLICY_COUNT + 1 };

/* The library's rows, and sticky's. */
static void
make_table(void)
{
    for (uint32_t p = 0; p < LR__POLICY_COUNT; p++)
        rows[p] = lr__builtin_policies.def[p];
    rows[STICKY] = (struct lr__policy_def){
        .name = "sticky",
        .ring_key = LR_RING_KEY_NONE,
        .decide = sticky_decide,
        .ops = &sticky_ops,
    };
}

static lr_router *
sticky_router(uint32_t n_inst)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.seed = 5;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    assert_st(lr__router_set_policies(r, &table), LR_OK);
    assert_st(lr_router_set_policy(r, STICKY), LR_OK);
    for (uint32_t i = 0; i < n_inst; i++)
        add_instance(r, "10.9", i, 0, 0);
    return r;
}

static const struct sticky *
state_of(const lr_router *r)
{
    return lr__router_pstate(r, STICKY);
}

static void
added_through_the_table(void **state)
{
    (void)state;
    make_table();
    lr_router *r = sticky_router(3);
    assert_int_equal(lr_router_policy(r), STICKY);
    const struct sticky *s = state_of(r);
    assert_non_null(s); /* made on first use */
    uint32_t t[64];
    toks(t, 64, 1);
    lr_decision d;
    assert_st(route_one(r, 1, t, 64, 0, T0, &d), LR_OK);
    uint32_t first = d.instance;
    assert_reason(d, LR_REASON_LEAST_LOADED);
    /* loaded now, but its state keeps it there */
    assert_st(route_one(r, 2, t, 64, 0, T0 + SEC, &d), LR_OK);
    assert_int_equal(d.instance, first);
    assert_reason(d, LR_REASON_SESSION);
    assert_int_equal(s->placed, 2);
    assert_int_equal(s->last, first);
    assert_st(lr_router_first_token(r, 1, T0 + SEC + SEC / 2), LR_OK);
    assert_st(lr_router_complete(r, 1, 10, T0 + 2 * SEC), LR_OK);
    assert_st(lr_router_fail(r, 2, T0 + 2 * SEC), LR_OK);
    assert_int_equal(s->first_tokens, 1);
    assert_true(s->ttft_sum == 1.5);
    assert_int_equal(s->ended, 2);
    assert_router_ok(r);

    /* a snapshot carries its section; a router with the same table
     * restores it, one with the library's skips it */
    lr_blob *snap = NULL;
    assert_st(lr_router_snapshot(r, T0 + 3 * SEC, &snap), LR_OK);
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_LEAST_REQUEST;
    o.seed = 5;
    lr_router *b = NULL;
    assert_st(lr_router_create(&o, &b), LR_OK);
    assert_st(lr__router_set_policies(b, &table), LR_OK);
    assert_null(state_of(b)); /* not used yet */
    assert_st(lr_router_restore(b, lr_blob_data(snap), lr_blob_size(snap),
                                T0 + 3 * SEC),
              LR_OK);
    const struct sticky *sb = state_of(b);
    assert_non_null(sb);
    assert_int_equal(sb->last, first);
    assert_int_equal(sb->placed, 2);
    assert_true(sb->ttft_sum == 1.5);
    assert_st(lr_router_set_policy(b, STICKY), LR_OK);
    assert_st(route_one(b, 3, t, 64, 0, T0 + 4 * SEC, &d), LR_OK);
    assert_int_equal(d.instance, first); /* its memory came along */
    lr_router *plain = NULL;
    assert_st(lr_router_create(&o, &plain), LR_OK);
    assert_st(lr_router_restore(plain, lr_blob_data(snap), lr_blob_size(snap),
                                T0 + 3 * SEC),
              LR_OK);
    assert_int_equal(lr_router_instance_count(plain), 3);
    /* the library's table does not know the policy */
    assert_st(lr_router_set_policy(plain, STICKY), LR_EINVAL);
    assert_st(lr__router_set_policies(plain, &table), LR_ESTATE);
    lr_blob_destroy(snap);
    lr_router_destroy(plain);
    lr_router_destroy(b);
    lr_router_destroy(r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(added_through_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
