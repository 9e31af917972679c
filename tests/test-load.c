/* Unit tests of lr_load: option bounds, statuses of every call, the request
 * lifecycle in every order, exact snapshot numbers for hand-built cases,
 * moves, instance removal and the telemetry the host feeds in. Every failed
 * call is checked to leave lr__load_digest() unchanged. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "load-helpers.h"
#include "parts/load.h"
#include "testutil.h"

/* ---- options and create ---------------------------------------------------- */

static void
inits_set_defaults(void **state)
{
    (void)state;
    lr_load_options_init_sized(NULL, sizeof(lr_load_options));
    lr_dispatch_init_sized(NULL, sizeof(lr_dispatch));
    lr_engine_stats_init_sized(NULL, sizeof(lr_engine_stats));
    lr_load_snapshot_init_sized(NULL, sizeof(lr_load_snapshot));

    lr_load_options o;
    memset(&o, 0xa5, sizeof o);
    lr_load_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_null(o.allocator);
    assert_int_equal(o.max_instances, 1024);
    assert_int_equal(o.max_requests, 65536);
    assert_true(o.rtt_alpha == 0.3);

    lr_dispatch d;
    memset(&d, 0xa5, sizeof d);
    lr_dispatch_init(&d);
    assert_int_equal(d.struct_size, sizeof d);
    assert_int_equal(d.request_id, 0);
    assert_int_equal(d.instance, 0);
    assert_int_equal(d.prompt_tokens, 0);
    assert_int_equal(d.cached_tokens, 0);
    assert_int_equal(d.expected_output_tokens, 0);
    assert_int_equal(d.alt_instance, LR_INSTANCE_NONE);
    assert_int_equal(d.alt_cached_tokens, 0);
    assert_int_equal(d.now_ns, 0);
    assert_int_equal(d.prefill_instance, LR_INSTANCE_NONE);
    assert_int_equal(d.prefill_cached_tokens, 0);

    lr_engine_stats s;
    memset(&s, 0xa5, sizeof s);
    lr_engine_stats_init(&s);
    assert_int_equal(s.struct_size, sizeof s);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.waiting, 0);
    assert_true(s.kv_use == 0.0);
    assert_int_equal(s.scraped_ns, 0);

    lr_load_snapshot sn;
    memset(&sn, 0xa5, sizeof sn);
    lr_load_snapshot_init(&sn);
    assert_int_equal(sn.struct_size, sizeof sn);
    assert_int_equal(sn.inflight, 0);
    assert_int_equal(sn.kv_tokens, 0);
    assert_int_equal(sn.queue_since_ns, 0);

    assert_int_equal(LR_LOAD_OPTIONS_SIZE_V1, sizeof(lr_load_options));
    assert_int_equal(LR_DISPATCH_SIZE_V2, sizeof(lr_dispatch));
    assert_int_equal(LR_ENGINE_STATS_SIZE_V1, sizeof(lr_engine_stats));
    assert_int_equal(LR_LOAD_SNAPSHOT_SIZE_V1, sizeof(lr_load_snapshot));
}

static lr_status
create_with(const lr_load_options *o)
{
    lr_load *ld = (lr_load *)&ld; /* must be set to NULL on failure */
    lr_status st = lr_load_create(o, &ld);
    if (st == LR_OK) {
        assert_non_null(ld);
        assert_load_ok(ld);
        lr_load_destroy(ld);
    } else {
        assert_null(ld);
    }
    return st;
}

static void
create_bounds(void **state)
{
    (void)state;
    lr_load_options o;
    assert_st(lr_load_create(NULL, NULL), LR_EINVAL);
    lr_load_options_init(&o);
    assert_st(lr_load_create(&o, NULL), LR_EINVAL);
    assert_st(create_with(NULL), LR_OK);
    assert_st(create_with(&o), LR_OK);

    /* zeros mean the defaults */
    lr_load_options_init(&o);
    o.max_instances = 0;
    o.max_requests = 0;
    o.rtt_alpha = 0.0;
    assert_st(create_with(&o), LR_OK);
    o.rtt_alpha = -0.0;
    assert_st(create_with(&o), LR_OK);

    /* sizes */
    lr_load_options_init(&o);
    o.max_instances = LR_LOAD_MAX_INSTANCES + 1;
    assert_st(create_with(&o), LR_EINVAL);
    o.max_instances = UINT32_MAX;
    assert_st(create_with(&o), LR_EINVAL);
    o.max_instances = LR_LOAD_MAX_INSTANCES;
    o.max_requests = 4;
    assert_st(create_with(&o), LR_OK);
    lr_load_options_init(&o);
    o.max_requests = LR_LOAD_MAX_REQUESTS + 1;
    assert_st(create_with(&o), LR_EINVAL);
    o.max_requests = UINT32_MAX;
    assert_st(create_with(&o), LR_EINVAL);
    o.max_requests = 1;
    o.max_instances = 1;
    assert_st(create_with(&o), LR_OK);

    /* rtt_alpha in (0, 1] */
    static const double bad_alpha[] = { -0.1, -1e-300,  1.0000001, 2.0,
                                        NAN,  INFINITY, -INFINITY };
    for (size_t i = 0; i < sizeof bad_alpha / sizeof bad_alpha[0]; i++) {
        lr_load_options_init(&o);
        o.rtt_alpha = bad_alpha[i];
        assert_st(create_with(&o), LR_EINVAL);
    }
    static const double good_alpha[] = { 1e-300, 0.01, 0.5, 1.0 };
    for (size_t i = 0; i < sizeof good_alpha / sizeof good_alpha[0]; i++) {
        lr_load_options_init(&o);
        o.rtt_alpha = good_alpha[i];
        assert_st(create_with(&o), LR_OK);
    }

    /* struct_size */
    lr_load_options_init(&o);
    o.struct_size = 0;
    assert_st(create_with(&o), LR_EVERSION);
    o.struct_size = LR_LOAD_OPTIONS_SIZE_V1 - 1;
    assert_st(create_with(&o), LR_EVERSION);
    o.struct_size = LR_LOAD_OPTIONS_SIZE_V1;
    assert_st(create_with(&o), LR_OK);
    /* a newer, larger struct: the library reads what it knows */
    struct {
        lr_load_options o;
        uint64_t future[4];
    } big;
    memset(&big, 0xff, sizeof big);
    lr_load_options_init(&big.o);
    big.o.struct_size = sizeof big;
    assert_st(create_with(&big.o), LR_OK);

    /* a partly-set allocator */
    lr_allocator a;
    struct tu_alloc t;
    tu_alloc_init(&t);
    a = t.a;
    a.realloc = NULL;
    lr_load_options_init(&o);
    o.allocator = &a;
    assert_st(create_with(&o), LR_EINVAL);
    assert_int_equal(t.live_bytes, 0);
}

/* The bounds that zero options default to are the documented ones. */
static void
create_defaults_apply(void **state)
{
    (void)state;
    lr_load_options o;
    lr_load_options_init(&o);
    o.max_instances = 0;
    o.max_requests = 0;
    o.rtt_alpha = 0.0;
    lr_load *ld;
    assert_st(lr_load_create(&o, &ld), LR_OK);
    assert_st(lr_load_add_instance(ld, 1023, 0, 0), LR_OK);
    assert_st(lr_load_add_instance(ld, 1024, 0, 0), LR_ELIMIT);
    for (uint64_t id = 0; id < 65536; id++)
        assert_st(load_dispatch(ld, id, 1023, 10, 0, 0, id), LR_OK);
    assert_fails_unchanged(ld, load_dispatch(ld, 65536, 1023, 10, 0, 0, 0),
                           LR_ELIMIT);
    assert_int_equal(lr_load_inflight(ld), 65536);
    /* alpha 0.3 */
    assert_st(lr_load_observe_rtt(ld, 1023, 1000), LR_OK);
    assert_st(lr_load_observe_rtt(ld, 1023, 2000), LR_OK);
    assert_int_equal(snap(ld, 1023).rtt_ns, 1300);
    lr_load_destroy(ld);

    /* the largest instance table */
    lr_load_options_init(&o);
    o.max_instances = LR_LOAD_MAX_INSTANCES;
    o.max_requests = 8;
    assert_st(lr_load_create(&o, &ld), LR_OK);
    assert_st(lr_load_add_instance(ld, LR_LOAD_MAX_INSTANCES - 1, 0, 0), LR_OK);
    assert_st(lr_load_add_instance(ld, LR_LOAD_MAX_INSTANCES, 0, 0), LR_ELIMIT);
    assert_st(lr_load_add_instance(ld, LR_INSTANCE_NONE, 0, 0), LR_EINVAL);
    assert_load_ok(ld);
    lr_load_destroy(ld);
    lr_load_destroy(NULL);
}

/* ---- instances --------------------------------------------------------------- */

static void
add_remove_instance(void **state)
{
    (void)state;
    lr_load *ld = load_mk(8, 16, 0);
    assert_st(lr_load_add_instance(NULL, 0, 0, 0), LR_EINVAL);
    assert_st(lr_load_remove_instance(NULL, 0), LR_EINVAL);

    assert_st(lr_load_add_instance(ld, 3, 7, 1), LR_OK);
    lr_load_snapshot s = snap(ld, 3);
    assert_int_equal(s.instance_class, 7);
    assert_int_equal(s.prefix_caching, 1);
    assert_int_equal(s.has_stats, 0);
    assert_int_equal(s.has_rtt, 0);
    assert_int_equal(s.rtt_ns, 0);
    assert_int_equal(s.last_first_token_ns, 0);
    assert_idle(ld, 3);
    assert_true(lr__load_has(ld, 3));
    assert_false(lr__load_has(ld, 2));
    assert_false(lr__load_has(NULL, 3));

    assert_fails_unchanged(ld, lr_load_add_instance(ld, 3, 7, 1), LR_EEXIST);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, 3, 0, 0), LR_EEXIST);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, 8, 0, 0), LR_ELIMIT);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, 1000, 0, 0), LR_ELIMIT);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, LR_INSTANCE_NONE, 0, 0),
                           LR_EINVAL);
    assert_fails_unchanged(
        ld, lr_load_add_instance(ld, 4, LR_LOAD_MAX_CLASSES, 0), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, 4, UINT32_MAX, 0),
                           LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, 4, 0, 2), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_add_instance(ld, 4, 0, -1), LR_EINVAL);
    assert_false(lr__load_has(ld, 4));
    assert_st(lr_load_add_instance(ld, 4, LR_LOAD_MAX_CLASSES - 1, 0), LR_OK);
    s = snap(ld, 4);
    assert_int_equal(s.instance_class, LR_LOAD_MAX_CLASSES - 1);
    assert_int_equal(s.prefix_caching, 0);
    assert_st(lr_load_add_instance(ld, 0, 0, 0), LR_OK);
    assert_st(lr_load_add_instance(ld, 7, 0, 0), LR_OK);

    assert_fails_unchanged(ld, lr_load_remove_instance(ld, 5), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_remove_instance(ld, 8), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_remove_instance(ld, LR_INSTANCE_NONE),
                           LR_ENOENT);
    assert_st(lr_load_remove_instance(ld, 3), LR_OK);
    assert_load_ok(ld);
    assert_false(lr__load_has(ld, 3));
    assert_fails_unchanged(ld, lr_load_remove_instance(ld, 3), LR_ENOENT);

    lr_load_snapshot_init(&s);
    assert_st(lr_load_get(ld, 3, &s), LR_ENOENT);
    assert_st(lr_load_get(ld, 8, &s), LR_ENOENT);
    assert_st(lr_load_get(ld, LR_INSTANCE_NONE, &s), LR_ENOENT);
    assert_st(lr_load_get(NULL, 4, &s), LR_EINVAL);
    assert_st(lr_load_get(ld, 4, NULL), LR_EINVAL);
    s.struct_size = LR_LOAD_SNAPSHOT_SIZE_V1 - 1;
    assert_st(lr_load_get(ld, 4, &s), LR_EVERSION);
    s.struct_size = 0;
    assert_st(lr_load_get(ld, 4, &s), LR_EVERSION);

    /* a re-added instance starts from scratch, with its new class */
    lr_engine_stats es;
    lr_engine_stats_init(&es);
    es.running = 3;
    es.kv_use = 0.5;
    es.scraped_ns = 100;
    assert_st(lr_load_set_stats(ld, 4, &es), LR_OK);
    assert_st(lr_load_observe_rtt(ld, 4, 5000), LR_OK);
    assert_st(load_dispatch(ld, 1, 4, 100, 10, 5, 7), LR_OK);
    assert_st(lr_load_first_token(ld, 1, 9), LR_OK);
    assert_st(lr_load_remove_instance(ld, 4), LR_OK);
    assert_st(lr_load_add_instance(ld, 4, 2, 1), LR_OK);
    s = snap(ld, 4);
    assert_int_equal(s.instance_class, 2);
    assert_int_equal(s.prefix_caching, 1);
    assert_int_equal(s.has_stats, 0);
    assert_int_equal(s.running, 0);
    assert_true(s.kv_use == 0.0);
    assert_int_equal(s.scraped_ns, 0);
    assert_int_equal(s.has_rtt, 0);
    assert_int_equal(s.rtt_ns, 0);
    assert_int_equal(s.last_first_token_ns, 0);
    assert_idle(ld, 4);
    assert_int_equal(lr_load_inflight(ld), 0);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

/* ---- dispatch ------------------------------------------------------------------ */

static void
dispatch_statuses(void **state)
{
    (void)state;
    lr_load *ld = load_mk(8, 3, 3);
    lr_dispatch d = disp(1, 0, 100, 40, 10, 1000);
    assert_st(lr_load_dispatch(NULL, &d), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_dispatch(ld, NULL), LR_EINVAL);

    d.struct_size = 0;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EVERSION);
    d.struct_size = LR_DISPATCH_SIZE_V1 - 1;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EVERSION);

    d = disp(1, 0, 100, 101, 10, 1000);
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);
    d = disp(1, 0, 0, 1, 10, 1000);
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);
    d = disp(1, 0, 100, 40, 10, 1000);
    d.alt_instance = 0;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);
    d.alt_instance = 1;
    d.alt_cached_tokens = 101;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);

    d = disp(1, 5, 100, 40, 10, 1000); /* not added */
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_ENOENT);
    d = disp(1, 8, 100, 40, 10, 1000); /* >= max_instances */
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_ENOENT);
    d = disp(1, LR_INSTANCE_NONE, 100, 40, 10, 1000);
    d.alt_instance = 0;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_ENOENT);
    d = disp(1, 0, 100, 40, 10, 1000);
    d.alt_instance = 5;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_ENOENT);
    d.alt_instance = 8;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_ENOENT);

    /* nothing above left a trace */
    assert_int_equal(lr_load_inflight(ld), 0);
    assert_st(lr_load_request(ld, 1, NULL, NULL), LR_ENOENT);
    for (uint32_t i = 0; i < 3; i++)
        assert_idle(ld, i);

    /* a dispatch of exactly the v1 size is read in full */
    d = disp(1, 0, 100, 40, 10, 1000);
    d.alt_instance = 1;
    d.alt_cached_tokens = 60;
    d.struct_size = LR_DISPATCH_SIZE_V1;
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    struct lr__req_view v;
    assert_st(lr__load_req(ld, 1, &v), LR_OK);
    assert_int_equal(v.id, 1);
    assert_int_equal(v.instance, 0);
    assert_int_equal(v.alt_instance, 1);
    assert_int_equal(v.alt_cached_tokens, 60);
    assert_int_equal(v.prompt_tokens, 100);
    assert_int_equal(v.cached_tokens, 40);
    assert_int_equal(v.expected_output_tokens, 10);
    assert_int_equal(v.dispatch_ns, 1000);
    assert_int_equal(v.queued, 1);
    assert_st(lr__load_req(ld, 2, &v), LR_ENOENT);
    assert_st(lr__load_req(NULL, 1, &v), LR_EINVAL);
    assert_st(lr__load_req(ld, 1, NULL), LR_EINVAL);

    /* duplicate id, wherever it is sent */
    for (uint32_t i = 0; i < 3; i++) {
        d = disp(1, i, 5, 0, 0, 2000);
        assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EEXIST);
    }
    /* an id after an invalid request: the invalid one wins */
    d = disp(1, 0, 5, 6, 0, 2000);
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);

    /* max_requests 3 */
    assert_st(load_dispatch(ld, 2, 1, 10, 0, 0, 2000), LR_OK);
    assert_st(load_dispatch(ld, 3, 2, 10, 0, 0, 2000), LR_OK);
    assert_fails_unchanged(ld, load_dispatch(ld, 4, 2, 10, 0, 0, 2000),
                           LR_ELIMIT);
    /* a duplicate is still a duplicate when full */
    assert_fails_unchanged(ld, load_dispatch(ld, 3, 2, 10, 0, 0, 2000),
                           LR_EEXIST);
    assert_int_equal(lr_load_inflight(ld), 3);
    assert_st(lr_load_first_token(ld, 2, 2100), LR_OK);
    assert_fails_unchanged(ld, load_dispatch(ld, 4, 2, 10, 0, 0, 2000),
                           LR_ELIMIT);
    assert_st(lr_load_complete(ld, 2, 3, 2200), LR_OK);
    assert_st(load_dispatch(ld, 4, 2, 10, 0, 0, 2300), LR_OK);
    assert_fails_unchanged(ld, load_dispatch(ld, 5, 2, 10, 0, 0, 2000),
                           LR_ELIMIT);
    assert_load_ok(ld);

    /* id 0 and the largest id are ordinary ids */
    assert_st(lr_load_fail(ld, 1), LR_OK);
    assert_st(lr_load_fail(ld, 3), LR_OK);
    assert_st(load_dispatch(ld, 0, 0, 1, 0, 0, 1), LR_OK);
    assert_st(load_dispatch(ld, UINT64_MAX, 1, 1, 1, 0, 1), LR_OK);
    assert_st(lr_load_request(ld, 0, NULL, NULL), LR_OK);
    assert_st(lr_load_request(ld, UINT64_MAX, NULL, NULL), LR_OK);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void
lifecycle_first_then_complete(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 2);
    assert_st(load_dispatch(ld, 42, 0, 900, 512, 130, 1000), LR_OK);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 388);
    assert_int_equal(s.queued_tokens, 900);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 1030);
    assert_int_equal(s.prompt_tokens, 900);
    assert_int_equal(s.queue_since_ns, 1000);
    assert_int_equal(s.last_first_token_ns, 0);
    assert_int_equal(lr_load_inflight(ld), 1);
    uint32_t inst = 99;
    int32_t queued = -1;
    assert_st(lr_load_request(ld, 42, &inst, &queued), LR_OK);
    assert_int_equal(inst, 0);
    assert_int_equal(queued, 1);
    assert_idle(ld, 1);

    assert_st(lr_load_first_token(ld, 42, 1500), LR_OK);
    assert_load_ok(ld);
    s = snap(ld, 0);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 0);
    assert_int_equal(s.prefill_tokens, 0);
    assert_int_equal(s.queued_tokens, 0);
    assert_int_equal(s.decode_tokens, 130);
    assert_int_equal(s.kv_tokens, 1030);
    assert_int_equal(s.prompt_tokens, 900);
    assert_int_equal(s.queue_since_ns, 0);
    assert_int_equal(s.last_first_token_ns, 1500);
    assert_st(lr_load_request(ld, 42, &inst, &queued), LR_OK);
    assert_int_equal(inst, 0);
    assert_int_equal(queued, 0);

    /* the reported output length does not matter: what dispatch added is
     * what is subtracted */
    assert_st(lr_load_complete(ld, 42, 7, 2000), LR_OK);
    assert_load_ok(ld);
    assert_idle(ld, 0);
    assert_int_equal(snap(ld, 0).last_first_token_ns, 1500);
    assert_int_equal(lr_load_inflight(ld), 0);
    assert_st(lr_load_request(ld, 42, &inst, &queued), LR_ENOENT);
    lr_load_destroy(ld);
}

/* A split request: the prefill instance (1) carries its prefill until
 * prefill_done, the decode instance (0) its KV and decode from the
 * dispatch on; then the first token and the end as for any request. The
 * first token ends a prefill leg the host did not report, and a removed
 * prefill instance ends its legs only. Bad splits change nothing. */
static void
lifecycle_split(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 3);
    lr_dispatch d = disp(7, 0, 900, 600, 130, 1000);
    d.prefill_instance = 1;
    d.prefill_cached_tokens = 512;
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_load_ok(ld);
    lr_load_snapshot p = snap(ld, 1), q = snap(ld, 0);
    assert_int_equal(p.inflight, 1);
    assert_int_equal(p.queued, 1);
    assert_int_equal(p.prefill_tokens, 388);
    assert_int_equal(p.queued_tokens, 900);
    assert_int_equal(p.kv_tokens, 900);
    assert_int_equal(p.prompt_tokens, 900);
    assert_int_equal(p.decode_tokens, 0);
    assert_int_equal(p.queue_since_ns, 1000);
    assert_int_equal(q.inflight, 1);
    assert_int_equal(q.queued, 1);
    assert_int_equal(q.prefill_tokens, 0);
    assert_int_equal(q.queued_tokens, 0);
    assert_int_equal(q.kv_tokens, 1030);
    assert_int_equal(q.prompt_tokens, 900);
    assert_int_equal(lr_load_inflight(ld), 1);
    struct lr__req_view v;
    assert_st(lr__load_req(ld, 7, &v), LR_OK);
    assert_int_equal(v.instance, 0);
    assert_int_equal(v.prefill_instance, 1);

    assert_st(lr_load_prefill_done(ld, 7, 1200), LR_OK);
    assert_load_ok(ld);
    assert_idle(ld, 1);
    assert_int_equal(snap(ld, 0).queued, 1);
    uint64_t d0 = lr__load_digest(ld);
    assert_st(lr_load_prefill_done(ld, 7, 1300), LR_OK); /* again: no-op */
    assert_int_equal(lr__load_digest(ld), d0);
    assert_st(lr_load_first_token(ld, 7, 1500), LR_OK);
    q = snap(ld, 0);
    assert_int_equal(q.queued, 0);
    assert_int_equal(q.decode_tokens, 130);
    assert_st(lr_load_complete(ld, 7, 130, 2000), LR_OK);
    assert_idle(ld, 0);

    /* the first token ends a leg nobody reported; so does the end */
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_st(lr_load_first_token(ld, 7, 2500), LR_OK);
    assert_idle(ld, 1);
    assert_st(lr_load_fail(ld, 7), LR_OK);
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_st(lr_load_fail(ld, 7), LR_OK);
    assert_idle(ld, 0);
    assert_idle(ld, 1);

    /* removing the prefill instance ends the leg; the request stays */
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_st(lr_load_remove_instance(ld, 1), LR_OK);
    assert_load_ok(ld);
    assert_st(lr__load_req(ld, 7, &v), LR_OK);
    assert_int_equal(v.prefill_instance, LR_INSTANCE_NONE);
    assert_int_equal(snap(ld, 0).inflight, 1);
    assert_st(lr_load_add_instance(ld, 1, 0, 1), LR_OK);
    assert_st(lr_load_fail(ld, 7), LR_OK);

    /* a decode leg moves, never onto its prefill instance */
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_fails_unchanged(ld, lr_load_move(ld, 7, 1, 0), LR_EINVAL);
    assert_st(lr_load_move(ld, 7, 2, 100), LR_OK);
    assert_load_ok(ld);
    assert_idle(ld, 0);
    assert_int_equal(snap(ld, 2).prefill_tokens, 0);
    assert_int_equal(snap(ld, 1).prefill_tokens, 388);
    assert_st(lr_load_fail(ld, 7), LR_OK);

    /* bad splits */
    d.prefill_instance = 0; /* the decode instance itself */
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);
    d.prefill_instance = 3; /* not tracked */
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_ENOENT);
    d.prefill_instance = 1;
    d.prefill_cached_tokens = 901;
    assert_fails_unchanged(ld, lr_load_dispatch(ld, &d), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_prefill_done(ld, 8, 0), LR_ENOENT);
    assert_st(lr_load_prefill_done(NULL, 7, 0), LR_EINVAL);
    d.prefill_cached_tokens = 0;
    d.struct_size = LR_DISPATCH_SIZE_V1; /* a 0.2 caller: no split */
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_st(lr__load_req(ld, 7, &v), LR_OK);
    assert_int_equal(v.prefill_instance, LR_INSTANCE_NONE);
    assert_int_equal(snap(ld, 0).prefill_tokens, 300);
    assert_idle(ld, 1);
    lr_load_destroy(ld);
}

static void
lifecycle_complete_without_first_token(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 1);
    assert_st(load_dispatch(ld, 7, 0, 300, 100, 50, 10), LR_OK);
    assert_st(load_dispatch(ld, 8, 0, 200, 0, 20, 20), LR_OK);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.inflight, 2);
    assert_int_equal(s.queued, 2);
    assert_int_equal(s.prefill_tokens, 400);
    assert_int_equal(s.queued_tokens, 500);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 570);
    assert_int_equal(s.queue_since_ns, 10);

    assert_st(lr_load_complete(ld, 7, 50, 30), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 200);
    assert_int_equal(s.queued_tokens, 200);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 220);
    assert_int_equal(s.queue_since_ns, 10); /* never went empty */
    assert_int_equal(s.last_first_token_ns, 0);

    assert_st(lr_load_complete(ld, 8, 0, 40), LR_OK);
    assert_idle(ld, 0);
    assert_int_equal(snap(ld, 0).last_first_token_ns, 0);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

static void
lifecycle_fail(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 1);
    /* fail while queued */
    assert_st(load_dispatch(ld, 1, 0, 64, 32, 16, 5), LR_OK);
    assert_st(lr_load_fail(ld, 1), LR_OK);
    assert_idle(ld, 0);
    /* fail while decoding */
    assert_st(load_dispatch(ld, 1, 0, 64, 32, 16, 6), LR_OK);
    assert_st(load_dispatch(ld, 2, 0, 10, 0, 4, 7), LR_OK);
    assert_st(lr_load_first_token(ld, 1, 8), LR_OK);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.inflight, 2);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 10);
    assert_int_equal(s.queued_tokens, 10);
    assert_int_equal(s.decode_tokens, 16);
    assert_int_equal(s.kv_tokens, 94);
    assert_st(lr_load_fail(ld, 1), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 14);
    assert_st(lr_load_fail(ld, 2), LR_OK);
    assert_idle(ld, 0);
    assert_int_equal(lr_load_inflight(ld), 0);
    assert_load_ok(ld);
    assert_st(lr_load_fail(NULL, 2), LR_EINVAL);
    lr_load_destroy(ld);
}

static void
lifecycle_repeat_first_token(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 1);
    assert_st(load_dispatch(ld, 1, 0, 100, 0, 10, 5), LR_OK);
    assert_st(lr_load_first_token(ld, 1, 50), LR_OK);
    uint64_t d0 = lr__load_digest(ld);
    /* a second first token, later or earlier, changes nothing */
    assert_st(lr_load_first_token(ld, 1, 90), LR_OK);
    assert_int_equal(lr__load_digest(ld), d0);
    assert_st(lr_load_first_token(ld, 1, 10), LR_OK);
    assert_int_equal(lr__load_digest(ld), d0);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.decode_tokens, 10);
    assert_int_equal(s.last_first_token_ns, 50);
    assert_int_equal(s.queued, 0);
    assert_st(lr_load_complete(ld, 1, 10, 99), LR_OK);
    assert_idle(ld, 0);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

static void
lifecycle_events_after_end(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 2);
    assert_st(lr_load_first_token(NULL, 1, 0), LR_EINVAL);
    assert_st(lr_load_complete(NULL, 1, 0, 0), LR_EINVAL);
    assert_st(lr_load_move(NULL, 1, 1, 0), LR_EINVAL);
    assert_st(lr_load_request(NULL, 1, NULL, NULL), LR_EINVAL);

    /* never dispatched */
    assert_fails_unchanged(ld, lr_load_first_token(ld, 1, 0), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_complete(ld, 1, 0, 0), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_fail(ld, 1), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 1, 0), LR_ENOENT);

    /* ended by complete, by fail, after a first token or not */
    for (int how = 0; how < 4; how++) {
        assert_st(load_dispatch(ld, 9, 0, 100, 20, 10, 5), LR_OK);
        assert_st(load_dispatch(ld, 10, 0, 30, 0, 3, 6), LR_OK);
        if (how & 1)
            assert_st(lr_load_first_token(ld, 9, 7), LR_OK);
        if (how & 2)
            assert_st(lr_load_fail(ld, 9), LR_OK);
        else
            assert_st(lr_load_complete(ld, 9, 10, 8), LR_OK);
        assert_fails_unchanged(ld, lr_load_first_token(ld, 9, 9), LR_ENOENT);
        assert_fails_unchanged(ld, lr_load_complete(ld, 9, 10, 9), LR_ENOENT);
        assert_fails_unchanged(ld, lr_load_fail(ld, 9), LR_ENOENT);
        assert_fails_unchanged(ld, lr_load_move(ld, 9, 1, 0), LR_ENOENT);
        assert_st(lr_load_request(ld, 9, NULL, NULL), LR_ENOENT);
        lr_load_snapshot s = snap(ld, 0);
        assert_int_equal(s.inflight, 1);
        assert_int_equal(s.queued, 1);
        assert_int_equal(s.kv_tokens, 33);
        assert_int_equal(s.prefill_tokens, 30);
        assert_int_equal(s.decode_tokens, 0);
        assert_st(lr_load_fail(ld, 10), LR_OK);
        assert_idle(ld, 0);
    }
    /* an ended id can be dispatched again, as a new request */
    assert_st(load_dispatch(ld, 9, 1, 1, 0, 1, 100), LR_OK);
    uint32_t inst;
    int32_t queued;
    assert_st(lr_load_request(ld, 9, &inst, &queued), LR_OK);
    assert_int_equal(inst, 1);
    assert_int_equal(queued, 1);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

/* ---- exact snapshot numbers -------------------------------------------------------- */

static void
snapshot_hand_built(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 16, 3);
    /* instance 0: A (queued), B (decoding), C (queued, fully cached) */
    assert_st(load_dispatch(ld, 0xA, 0, 1000, 600, 200, 100 * MS), LR_OK);
    assert_st(load_dispatch(ld, 0xB, 0, 500, 0, 50, 110 * MS), LR_OK);
    assert_st(load_dispatch(ld, 0xC, 0, 80, 80, 0, 120 * MS), LR_OK);
    /* instance 1: D decoding, expected output unknown */
    assert_st(load_dispatch(ld, 0xD, 1, 4000, 1000, 0, 130 * MS), LR_OK);
    assert_st(lr_load_first_token(ld, 0xB, 140 * MS), LR_OK);
    assert_st(lr_load_first_token(ld, 0xD, 135 * MS), LR_OK);
    assert_load_ok(ld);

    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.inflight, 3);
    assert_int_equal(s.queued, 2);
    assert_int_equal(s.prefill_tokens, (1000 - 600) + (80 - 80));
    assert_int_equal(s.queued_tokens, 1000 + 80);
    assert_int_equal(s.decode_tokens, 50);
    assert_int_equal(s.kv_tokens, (1000 + 200) + (500 + 50) + (80 + 0));
    assert_int_equal(s.queue_since_ns, 100 * MS);
    assert_int_equal(s.last_first_token_ns, 140 * MS);

    s = snap(ld, 1);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 0);
    assert_int_equal(s.prefill_tokens, 0);
    assert_int_equal(s.queued_tokens, 0);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 4000);
    assert_int_equal(s.queue_since_ns, 0);
    assert_int_equal(s.last_first_token_ns, 135 * MS);
    assert_idle(ld, 2);
    assert_int_equal(lr_load_inflight(ld), 4);

    /* A's first token: the queue still holds C since 100 ms */
    assert_st(lr_load_first_token(ld, 0xA, 150 * MS), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 0);
    assert_int_equal(s.queued_tokens, 80);
    assert_int_equal(s.decode_tokens, 250);
    assert_int_equal(s.kv_tokens, 1200 + 550 + 80);
    assert_int_equal(s.queue_since_ns, 100 * MS);
    assert_int_equal(s.last_first_token_ns, 150 * MS);

    /* C fails: the queue is empty; a later dispatch restarts it */
    assert_st(lr_load_fail(ld, 0xC), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.queued, 0);
    assert_int_equal(s.queued_tokens, 0);
    assert_int_equal(s.queue_since_ns, 0);
    assert_int_equal(s.kv_tokens, 1200 + 550);
    assert_st(load_dispatch(ld, 0xE, 0, 10, 3, 1, 200 * MS), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 7);
    assert_int_equal(s.queue_since_ns, 200 * MS);

    /* an earlier first token than the latest does not move the latest */
    assert_st(lr_load_first_token(ld, 0xE, 145 * MS), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.last_first_token_ns, 150 * MS);
    assert_int_equal(s.decode_tokens, 251);

    /* the huge end: every field of a request at UINT32_MAX */
    assert_st(load_dispatch(ld, 0xF, 2, UINT32_MAX, 0, UINT32_MAX, 1), LR_OK);
    assert_st(load_dispatch(ld, 0x10, 2, UINT32_MAX, 1, UINT32_MAX, 1), LR_OK);
    s = snap(ld, 2);
    assert_int_equal(s.prefill_tokens, 2ull * UINT32_MAX - 1);
    assert_int_equal(s.queued_tokens, 2ull * UINT32_MAX);
    assert_int_equal(s.kv_tokens, 4ull * UINT32_MAX);
    assert_st(lr_load_first_token(ld, 0xF, 2), LR_OK);
    assert_st(lr_load_first_token(ld, 0x10, 2), LR_OK);
    s = snap(ld, 2);
    assert_int_equal(s.decode_tokens, 2ull * UINT32_MAX);
    assert_int_equal(s.prefill_tokens, 0);
    assert_st(lr_load_complete(ld, 0xF, 0, 3), LR_OK);
    assert_st(lr_load_fail(ld, 0x10), LR_OK);
    assert_idle(ld, 2);
    assert_load_ok(ld);

    /* a snapshot struct of exactly v1 size, and a larger one */
    lr_load_snapshot v1;
    memset(&v1, 0xee, sizeof v1);
    v1.struct_size = LR_LOAD_SNAPSHOT_SIZE_V1;
    assert_st(lr_load_get(ld, 0, &v1), LR_OK);
    assert_int_equal(v1.struct_size, LR_LOAD_SNAPSHOT_SIZE_V1);
    assert_int_equal(v1.inflight, 3);
    assert_int_equal(v1.queue_since_ns, 0);
    struct {
        lr_load_snapshot s;
        uint64_t future;
    } big;
    memset(&big, 0xee, sizeof big);
    big.s.struct_size = sizeof big;
    assert_st(lr_load_get(ld, 0, &big.s), LR_OK);
    assert_int_equal(big.s.struct_size, sizeof big);
    assert_int_equal(big.s.inflight, 3);
    assert_int_equal(big.future, 0xeeeeeeeeeeeeeeeeull);

    /* end everything: all counters are zero */
    assert_st(lr_load_complete(ld, 0xA, 200, 300 * MS), LR_OK);
    assert_st(lr_load_complete(ld, 0xB, 50, 300 * MS), LR_OK);
    assert_st(lr_load_fail(ld, 0xD), LR_OK);
    assert_st(lr_load_complete(ld, 0xE, 1, 300 * MS), LR_OK);
    for (uint32_t i = 0; i < 3; i++)
        assert_idle(ld, i);
    assert_int_equal(lr_load_inflight(ld), 0);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

/* ---- move ------------------------------------------------------------------------ */

static void
move_queued_only(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 3);
    lr_dispatch d = disp(1, 0, 1000, 400, 100, 50);
    d.alt_instance = 1;
    d.alt_cached_tokens = 700;
    assert_st(lr_load_dispatch(ld, &d), LR_OK);
    assert_st(load_dispatch(ld, 2, 0, 300, 0, 30, 60), LR_OK);

    assert_fails_unchanged(ld, lr_load_move(ld, 3, 1, 0), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 3, 0), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 4, 0), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, LR_INSTANCE_NONE, 0),
                           LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 1, 1001), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 0, 0), LR_EINVAL);

    /* the move: counters go from 0 to 1, the old instance is the alt */
    assert_st(lr_load_move(ld, 1, 1, 900), LR_OK);
    assert_load_ok(ld);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 300);
    assert_int_equal(s.queued_tokens, 300);
    assert_int_equal(s.kv_tokens, 330);
    assert_int_equal(s.queue_since_ns, 50); /* never went empty */
    s = snap(ld, 1);
    assert_int_equal(s.inflight, 1);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.prefill_tokens, 100);
    assert_int_equal(s.queued_tokens, 1000);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 1100);
    assert_int_equal(s.queue_since_ns, 50); /* the request's dispatch time */
    assert_int_equal(lr_load_inflight(ld), 2);
    struct lr__req_view v;
    assert_st(lr__load_req(ld, 1, &v), LR_OK);
    assert_int_equal(v.instance, 1);
    assert_int_equal(v.cached_tokens, 900);
    assert_int_equal(v.alt_instance, 0);
    assert_int_equal(v.alt_cached_tokens, 400);
    assert_int_equal(v.prompt_tokens, 1000);
    assert_int_equal(v.expected_output_tokens, 100);
    assert_int_equal(v.dispatch_ns, 50);
    assert_int_equal(v.queued, 1);
    uint32_t inst;
    int32_t queued;
    assert_st(lr_load_request(ld, 1, &inst, &queued), LR_OK);
    assert_int_equal(inst, 1);
    assert_int_equal(queued, 1);

    /* and back, with no cache at all */
    assert_st(lr_load_move(ld, 1, 0, 0), LR_OK);
    assert_st(lr__load_req(ld, 1, &v), LR_OK);
    assert_int_equal(v.instance, 0);
    assert_int_equal(v.cached_tokens, 0);
    assert_int_equal(v.alt_instance, 1);
    assert_int_equal(v.alt_cached_tokens, 900);
    s = snap(ld, 0);
    assert_int_equal(s.prefill_tokens, 1300);
    assert_int_equal(s.kv_tokens, 1430);
    assert_idle(ld, 1);
    assert_st(lr_load_move(ld, 1, 2, 1000), LR_OK);
    s = snap(ld, 2);
    assert_int_equal(s.prefill_tokens, 0);
    assert_int_equal(s.queued_tokens, 1000);

    /* past the first token a request stays where it is */
    assert_st(lr_load_first_token(ld, 1, 70), LR_OK);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 0, 0), LR_ESTATE);
    assert_fails_unchanged(ld, lr_load_move(ld, 1, 1, 0), LR_ESTATE);
    s = snap(ld, 2);
    assert_int_equal(s.decode_tokens, 100);
    assert_int_equal(s.last_first_token_ns, 70);
    assert_int_equal(snap(ld, 0).last_first_token_ns, 0);
    assert_st(lr_load_complete(ld, 1, 100, 80), LR_OK);
    assert_idle(ld, 2);
    assert_idle(ld, 1);
    assert_int_equal(snap(ld, 0).inflight, 1);
    assert_st(lr_load_fail(ld, 2), LR_OK);
    assert_idle(ld, 0);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

/* ---- remove_instance with requests ----------------------------------------------- */

static int
count_cb(void *ctx, const struct lr__req_view *v)
{
    (void)v;
    (*(int *)ctx)++;
    return 0;
}

static void
remove_instance_drops_requests(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 16, 3);
    for (uint64_t id = 0; id < 6; id++) {
        lr_dispatch d = disp(id, (uint32_t)(id % 2), 100, 10, 5, id);
        d.alt_instance = id % 2 ? 0 : 2;
        d.alt_cached_tokens = 50;
        assert_st(lr_load_dispatch(ld, &d), LR_OK);
    }
    assert_st(lr_load_first_token(ld, 0, 10), LR_OK);
    assert_st(lr_load_first_token(ld, 1, 10), LR_OK);
    assert_int_equal(lr_load_inflight(ld), 6);
    lr_load_snapshot s1 = snap(ld, 1);

    assert_st(lr_load_remove_instance(ld, 0), LR_OK);
    assert_load_ok(ld);
    assert_int_equal(lr_load_inflight(ld), 3);
    for (uint64_t id = 0; id < 6; id += 2) {
        assert_fails_unchanged(ld, lr_load_first_token(ld, id, 20), LR_ENOENT);
        assert_fails_unchanged(ld, lr_load_complete(ld, id, 0, 20), LR_ENOENT);
        assert_fails_unchanged(ld, lr_load_fail(ld, id), LR_ENOENT);
        assert_fails_unchanged(ld, lr_load_move(ld, id, 1, 0), LR_ENOENT);
        assert_st(lr_load_request(ld, id, NULL, NULL), LR_ENOENT);
    }
    /* instance 1 is untouched; its requests lost their alternative */
    lr_load_snapshot s = snap(ld, 1);
    assert_true(tu_same_load(&s, &s1));
    struct lr__req_view v;
    for (uint64_t id = 1; id < 6; id += 2) {
        assert_st(lr__load_req(ld, id, &v), LR_OK);
        assert_int_equal(v.instance, 1);
        assert_int_equal(v.alt_instance, LR_INSTANCE_NONE);
        assert_int_equal(v.alt_cached_tokens, 0);
    }
    /* moves into the removed instance fail */
    assert_fails_unchanged(ld, lr_load_move(ld, 3, 0, 0), LR_ENOENT);
    /* an instance added again under the same id is a new instance, with an
     * empty cache: it must not come back as the alternative of requests
     * dispatched before it was removed */
    assert_st(lr_load_add_instance(ld, 0, 0, 1), LR_OK);
    for (uint64_t id = 1; id < 6; id += 2) {
        assert_st(lr__load_req(ld, id, &v), LR_OK);
        assert_int_equal(v.alt_instance, LR_INSTANCE_NONE);
        assert_int_equal(v.alt_cached_tokens, 0);
    }
    assert_load_ok(ld);
    assert_st(lr_load_remove_instance(ld, 0), LR_OK);
    /* the ids are free again */
    assert_st(load_dispatch(ld, 0, 2, 1, 0, 0, 30), LR_OK);
    assert_st(load_dispatch(ld, 2, 1, 1, 0, 0, 30), LR_OK);
    assert_int_equal(lr_load_inflight(ld), 5);
    int n = 0;
    lr__load_each_req(ld, 0, count_cb, &n);
    assert_int_equal(n, 0);
    lr__load_each_req(ld, 1, count_cb, &n);
    assert_int_equal(n, 4);

    /* removing the last instances frees every record */
    assert_st(lr_load_remove_instance(ld, 1), LR_OK);
    assert_st(lr_load_remove_instance(ld, 2), LR_OK);
    assert_int_equal(lr_load_inflight(ld), 0);
    assert_load_ok(ld);
    for (uint64_t id = 0; id < 16; id++)
        assert_st(lr_load_request(ld, id, NULL, NULL), LR_ENOENT);
    assert_st(lr_load_add_instance(ld, 0, 0, 0), LR_OK);
    for (uint64_t id = 100; id < 116; id++)
        assert_st(load_dispatch(ld, id, 0, 1, 0, 0, 40), LR_OK);
    assert_st(load_dispatch(ld, 116, 0, 1, 0, 0, 40), LR_ELIMIT);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

/* ---- each_req ------------------------------------------------------------------------ */

struct walk {
    uint64_t ids[16];
    int n, stop_at;
};

static int
walk_cb(void *ctx, const struct lr__req_view *v)
{
    struct walk *w = ctx;
    w->ids[w->n++] = v->id;
    return w->n == w->stop_at;
}

static void
each_req_newest_first(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 16, 2);
    for (uint64_t id = 10; id < 15; id++)
        assert_st(load_dispatch(ld, id, 0, 10, 0, 0, id), LR_OK);
    assert_st(lr_load_move(ld, 11, 1, 0), LR_OK);
    assert_st(lr_load_move(ld, 11, 0, 0), LR_OK); /* newest on 0 again */
    assert_st(lr_load_complete(ld, 13, 0, 20), LR_OK);
    struct walk w = { .stop_at = -1 };
    lr__load_each_req(ld, 0, walk_cb, &w);
    assert_int_equal(w.n, 4);
    assert_int_equal(w.ids[0], 11);
    assert_int_equal(w.ids[1], 14);
    assert_int_equal(w.ids[2], 12);
    assert_int_equal(w.ids[3], 10);
    w = (struct walk){ .stop_at = 2 };
    lr__load_each_req(ld, 0, walk_cb, &w);
    assert_int_equal(w.n, 2);
    w = (struct walk){ .stop_at = -1 };
    lr__load_each_req(ld, 1, walk_cb, &w);
    lr__load_each_req(ld, 2, walk_cb, &w);
    lr__load_each_req(ld, 99, walk_cb, &w);
    lr__load_each_req(NULL, 0, walk_cb, &w);
    assert_int_equal(w.n, 0);
    lr_load_destroy(ld);
}

/* ---- telemetry ----------------------------------------------------------------------- */

static void
set_stats_rules(void **state)
{
    (void)state;
    lr_load *ld = load_mk(4, 8, 2);
    lr_engine_stats st;
    lr_engine_stats_init(&st);
    st.running = 5;
    st.waiting = 2;
    st.kv_use = 0.25;
    st.scraped_ns = 1000;
    assert_st(lr_load_set_stats(NULL, 0, &st), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_set_stats(ld, 0, NULL), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_set_stats(ld, 2, &st), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_set_stats(ld, 4, &st), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_set_stats(ld, LR_INSTANCE_NONE, &st),
                           LR_ENOENT);
    static const double bad[] = { NAN,       -NAN,     -0.1,     -1e-300,
                                  1.0000001, INFINITY, -INFINITY };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lr_engine_stats b = st;
        b.kv_use = bad[i];
        assert_fails_unchanged(ld, lr_load_set_stats(ld, 0, &b), LR_EINVAL);
    }
    lr_engine_stats b = st;
    b.struct_size = LR_ENGINE_STATS_SIZE_V1 - 1;
    assert_fails_unchanged(ld, lr_load_set_stats(ld, 0, &b), LR_EVERSION);
    b.struct_size = 0;
    assert_fails_unchanged(ld, lr_load_set_stats(ld, 0, &b), LR_EVERSION);
    assert_int_equal(snap(ld, 0).has_stats, 0);

    assert_st(lr_load_set_stats(ld, 0, &st), LR_OK);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.has_stats, 1);
    assert_int_equal(s.running, 5);
    assert_int_equal(s.waiting, 2);
    assert_true(s.kv_use == 0.25);
    assert_int_equal(s.scraped_ns, 1000);
    assert_int_equal(snap(ld, 1).has_stats, 0);

    /* an older scrape is ignored, and says LR_OK */
    lr_engine_stats old = st;
    old.running = 99;
    old.kv_use = 0.9;
    old.scraped_ns = 999;
    uint64_t d0 = lr__load_digest(ld);
    assert_st(lr_load_set_stats(ld, 0, &old), LR_OK);
    assert_int_equal(lr__load_digest(ld), d0);
    s = snap(ld, 0);
    assert_int_equal(s.running, 5);
    assert_true(s.kv_use == 0.25);
    assert_int_equal(s.scraped_ns, 1000);

    /* the same time or newer replaces; the bounds 0 and 1 are valid */
    lr_engine_stats same = st;
    same.running = 6;
    same.kv_use = 1.0;
    assert_st(lr_load_set_stats(ld, 0, &same), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.running, 6);
    assert_true(s.kv_use == 1.0);
    lr_engine_stats newer = st;
    newer.running = 0;
    newer.waiting = 0;
    newer.kv_use = 0.0;
    newer.scraped_ns = 2000;
    assert_st(lr_load_set_stats(ld, 0, &newer), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.waiting, 0);
    assert_true(s.kv_use == 0.0);
    assert_int_equal(s.scraped_ns, 2000);
    assert_int_equal(s.has_stats, 1);

    /* the first scrape is taken whatever its time, even 0 */
    lr_engine_stats zero;
    lr_engine_stats_init(&zero);
    zero.struct_size = LR_ENGINE_STATS_SIZE_V1;
    zero.waiting = 4;
    assert_st(lr_load_set_stats(ld, 1, &zero), LR_OK);
    s = snap(ld, 1);
    assert_int_equal(s.has_stats, 1);
    assert_int_equal(s.waiting, 4);
    assert_int_equal(s.scraped_ns, 0);
    /* stats never touch the request counters */
    assert_idle(ld, 0);
    assert_idle(ld, 1);
    assert_load_ok(ld);
    lr_load_destroy(ld);
}

static void
observe_rtt_ewma(void **state)
{
    (void)state;
    lr_load_options o;
    lr_load_options_init(&o);
    o.max_instances = 4;
    o.max_requests = 4;
    o.rtt_alpha = 0.5;
    lr_load *ld;
    assert_st(lr_load_create(&o, &ld), LR_OK);
    assert_st(lr_load_add_instance(ld, 0, 0, 0), LR_OK);
    assert_st(lr_load_add_instance(ld, 1, 0, 0), LR_OK);

    assert_st(lr_load_observe_rtt(NULL, 0, 1), LR_EINVAL);
    assert_fails_unchanged(ld, lr_load_observe_rtt(ld, 2, 100), LR_ENOENT);
    assert_fails_unchanged(ld, lr_load_observe_rtt(ld, 4, 100), LR_ENOENT);
    assert_fails_unchanged(
        ld, lr_load_observe_rtt(ld, 0, LR_LOAD_MAX_RTT_NS + 1), LR_ERANGE);
    assert_fails_unchanged(ld, lr_load_observe_rtt(ld, 0, UINT64_MAX),
                           LR_ERANGE);
    lr_load_snapshot s = snap(ld, 0);
    assert_int_equal(s.has_rtt, 0);
    assert_int_equal(s.rtt_ns, 0);

    /* the first sample sets the average, the next ones blend at alpha */
    assert_st(lr_load_observe_rtt(ld, 0, 1000), LR_OK);
    s = snap(ld, 0);
    assert_int_equal(s.has_rtt, 1);
    assert_int_equal(s.rtt_ns, 1000);
    assert_st(lr_load_observe_rtt(ld, 0, 2000), LR_OK);
    assert_int_equal(snap(ld, 0).rtt_ns, 1500);
    assert_st(lr_load_observe_rtt(ld, 0, 500), LR_OK);
    assert_int_equal(snap(ld, 0).rtt_ns, 1000);
    assert_st(lr_load_observe_rtt(ld, 0, 0), LR_OK);
    assert_int_equal(snap(ld, 0).rtt_ns, 500);
    assert_st(lr_load_observe_rtt(ld, 0, 1), LR_OK);
    assert_int_equal(snap(ld, 0).rtt_ns, 251); /* 250.5, rounded */
    assert_int_equal(snap(ld, 1).has_rtt, 0);

    /* a first sample of 0 still counts as a sample */
    assert_st(lr_load_observe_rtt(ld, 1, 0), LR_OK);
    s = snap(ld, 1);
    assert_int_equal(s.has_rtt, 1);
    assert_int_equal(s.rtt_ns, 0);
    assert_st(lr_load_observe_rtt(ld, 1, 800), LR_OK);
    assert_int_equal(snap(ld, 1).rtt_ns, 400);

    /* the largest RTT is accepted and averages without loss */
    assert_st(lr_load_remove_instance(ld, 1), LR_OK);
    assert_st(lr_load_add_instance(ld, 1, 0, 0), LR_OK);
    assert_int_equal(snap(ld, 1).has_rtt, 0);
    assert_st(lr_load_observe_rtt(ld, 1, LR_LOAD_MAX_RTT_NS), LR_OK);
    assert_int_equal(snap(ld, 1).rtt_ns, LR_LOAD_MAX_RTT_NS);
    assert_st(lr_load_observe_rtt(ld, 1, LR_LOAD_MAX_RTT_NS), LR_OK);
    assert_int_equal(snap(ld, 1).rtt_ns, LR_LOAD_MAX_RTT_NS);
    assert_st(lr_load_observe_rtt(ld, 1, 0), LR_OK);
    assert_int_equal(snap(ld, 1).rtt_ns, LR_LOAD_MAX_RTT_NS / 2);
    assert_load_ok(ld);
    lr_load_destroy(ld);

    /* alpha 1: the latest sample wins */
    o.rtt_alpha = 1.0;
    assert_st(lr_load_create(&o, &ld), LR_OK);
    assert_st(lr_load_add_instance(ld, 0, 0, 0), LR_OK);
    static const uint64_t seq[] = { 5, 900, 3, 77777 };
    for (size_t i = 0; i < 4; i++) {
        assert_st(lr_load_observe_rtt(ld, 0, seq[i]), LR_OK);
        assert_int_equal(snap(ld, 0).rtt_ns, seq[i]);
    }
    lr_load_destroy(ld);
}

static void
null_queries(void **state)
{
    (void)state;
    assert_int_equal(lr_load_inflight(NULL), 0);
    assert_st(lr__load_verify(NULL), LR_EINVAL);
    assert_int_equal(lr__load_digest(NULL), 0);
    lr_load_destroy(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inits_set_defaults),
        cmocka_unit_test(create_bounds),
        cmocka_unit_test(create_defaults_apply),
        cmocka_unit_test(add_remove_instance),
        cmocka_unit_test(dispatch_statuses),
        cmocka_unit_test(lifecycle_first_then_complete),
        cmocka_unit_test(lifecycle_split),
        cmocka_unit_test(lifecycle_complete_without_first_token),
        cmocka_unit_test(lifecycle_fail),
        cmocka_unit_test(lifecycle_repeat_first_token),
        cmocka_unit_test(lifecycle_events_after_end),
        cmocka_unit_test(snapshot_hand_built),
        cmocka_unit_test(move_queued_only),
        cmocka_unit_test(remove_instance_drops_requests),
        cmocka_unit_test(each_req_newest_first),
        cmocka_unit_test(set_stats_rules),
        cmocka_unit_test(observe_rtt_ewma),
        cmocka_unit_test(null_queries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
