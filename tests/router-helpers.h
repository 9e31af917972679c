/* Helpers shared by the lr_router test programs. Self-contained. */
#ifndef LIBROUTE_TESTS_ROUTER_HELPERS_H
#define LIBROUTE_TESTS_ROUTER_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "libroute/lr_router.h"
#include "router/router.h"
#include "testutil.h"

/* Fail with both reason names when a decision gives the wrong reason. */
#define assert_reason(d, want)                                     \
    do {                                                           \
        int32_t r_got_ = (d).reason;                               \
        int32_t r_want_ = (want);                                  \
        if (r_got_ != r_want_)                                     \
            fail_msg("reason %s, want %s", lr_reason_name(r_got_), \
                     lr_reason_name(r_want_));                     \
    } while (0)

#define assert_router_ok(r) assert_st(lr__router_verify(r), LR_OK)

/* Every policy but LR_POLICY_LODESTAR (which also needs a learner), in
 * enum order: an initializer list for a policy array. */
#define POLICIES_WITHOUT_LEARNER                                       \
    LR_POLICY_RANDOM, LR_POLICY_ROUND_ROBIN, LR_POLICY_LEAST_REQUEST,  \
        LR_POLICY_LEAST_LOAD, LR_POLICY_SESSION_AFFINITY,              \
        LR_POLICY_CONSISTENT_HASH, LR_POLICY_PREFIX_CACHE,             \
        LR_POLICY_PREFIX_CACHE_AND_LOAD, LR_POLICY_SGLANG_CACHE_AWARE, \
        LR_POLICY_PREBLE, LR_POLICY_MIN_TTFT, LR_POLICY_DYNAMO,        \
        LR_POLICY_DUALMAP, LR_POLICY_GORGO, LR_POLICY_RANVIER,         \
        LR_POLICY_ADAPTIVE

/* n pseudo-random tokens, a pure function of seed. */
static inline void
toks(uint32_t *t, size_t n, uint64_t seed)
{
    tu_tokens(t, n, seed * 0x2545f4914f6cdd1dull + 0x1234567);
}

/* Add instance number i, named "<net>.<i / 200>.<i % 200>:8000" (net is
 * "10.0" or the like), of class cls with an initial RTT (0: none); the add
 * must succeed. Returns the id the router gave it. */
static inline uint32_t
add_instance(lr_router *r, const char *net, uint32_t i, uint32_t cls,
             uint64_t rtt_ns)
{
    char name[32];
    snprintf(name, sizeof name, "%s.%u.%u:8000", net, i / 200, i % 200);
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = name;
    s.instance_class = cls;
    s.rtt_ns = rtt_ns;
    uint32_t id = LR_INSTANCE_NONE;
    assert_st(lr_router_add_instance(r, &s, &id), LR_OK);
    return id;
}

/* Route one request for the tokens t[0..n) with the given flags at host
 * time now. *d (NULL: a throwaway) is initialized and gets the decision. */
static inline lr_status
route_one(lr_router *r, uint64_t id, const uint32_t *t, size_t n,
          uint32_t flags, uint64_t now, lr_decision *d)
{
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = t;
    q.n_tokens = n;
    q.flags = flags;
    q.now_ns = now;
    lr_decision local;
    if (d == NULL)
        d = &local;
    lr_decision_init(d);
    return lr_router_route(r, &q, d);
}

/* The candidate rows lr_router_candidates() gives for n tokens of t at
 * now (request id 999) into rows[cap]; the row count, failing the test
 * on any status but LR_OK. */
static inline size_t
candidates_of(lr_router *r, const uint32_t *t, size_t n, uint64_t now,
              lr_candidate *rows, size_t cap)
{
    lr_request q;
    lr_request_init(&q);
    q.id = 999;
    q.tokens = t;
    q.n_tokens = n;
    q.now_ns = now;
    size_t got = 0;
    assert_st(lr_router_candidates(r, &q, rows, cap, sizeof rows[0], &got),
              LR_OK);
    return got;
}

#endif
