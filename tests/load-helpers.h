/* Helpers shared by the lr_load test programs. Self-contained. */
#ifndef LIBROUTE_TESTS_LOAD_HELPERS_H
#define LIBROUTE_TESTS_LOAD_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "parts/load.h"
#include "testutil.h"

#define assert_load_ok(ld) assert_st(lr__load_verify(ld), LR_OK)

/* A failing call must leave the tracker exactly as it was. */
#define assert_fails_unchanged(ld, expr, want)      \
    do {                                            \
        uint64_t d0_ = lr__load_digest(ld);         \
        assert_st(expr, want);                      \
        assert_int_equal(lr__load_digest(ld), d0_); \
        assert_st(lr__load_verify(ld), LR_OK);      \
    } while (0)

/* A tracker with small bounds and the given instances, all class 0 with
 * prefix caching. */
static inline lr_load *
load_mk(uint32_t max_instances, uint32_t max_requests, uint32_t n_inst)
{
    lr_load_options o;
    lr_load_options_init(&o);
    o.max_instances = max_instances;
    o.max_requests = max_requests;
    lr_load *ld = NULL;
    assert_st(lr_load_create(&o, &ld), LR_OK);
    assert_non_null(ld);
    for (uint32_t i = 0; i < n_inst; i++)
        assert_st(lr_load_add_instance(ld, i, 0, 1), LR_OK);
    return ld;
}

static inline lr_dispatch
disp(uint64_t id, uint32_t inst, uint32_t prompt, uint32_t cached, uint32_t out,
     uint64_t now)
{
    lr_dispatch d;
    lr_dispatch_init(&d);
    d.request_id = id;
    d.instance = inst;
    d.prompt_tokens = prompt;
    d.cached_tokens = cached;
    d.expected_output_tokens = out;
    d.now_ns = now;
    return d;
}

static inline lr_status
load_dispatch(lr_load *ld, uint64_t id, uint32_t inst, uint32_t prompt,
              uint32_t cached, uint32_t out, uint64_t now)
{
    lr_dispatch d = disp(id, inst, prompt, cached, out, now);
    return lr_load_dispatch(ld, &d);
}

static inline lr_load_snapshot
snap(const lr_load *ld, uint32_t inst)
{
    lr_load_snapshot s;
    lr_load_snapshot_init(&s);
    assert_st(lr_load_get(ld, inst, &s), LR_OK);
    return s;
}

/* Every counter of an instance with nothing in flight is zero. */
static inline void
assert_idle(const lr_load *ld, uint32_t inst)
{
    lr_load_snapshot s = snap(ld, inst);
    assert_int_equal(s.inflight, 0);
    assert_int_equal(s.queued, 0);
    assert_int_equal(s.prefill_tokens, 0);
    assert_int_equal(s.queued_tokens, 0);
    assert_int_equal(s.decode_tokens, 0);
    assert_int_equal(s.kv_tokens, 0);
    assert_int_equal(s.queue_since_ns, 0);
}

#endif
