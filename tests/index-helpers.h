/* Helpers shared by the lr_index test programs. Self-contained. */
#ifndef LIBROUTE_TESTS_INDEX_HELPERS_H
#define LIBROUTE_TESTS_INDEX_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "index/index.h"
#include "testutil.h"

#define assert_verified(ix) assert_st(lr__index_verify(ix), LR_OK)

/* k seconds of host time. */
#define T(k) ((uint64_t)(k)*SEC)

/* In an OOM scenario: verify without letting verify's own allocations
 * count or fail; the allocator is left as it was. */
static inline void
verify_quiet(struct tu_alloc *t, const lr_index *ix)
{
    uint64_t calls = t->calls, fail_at = t->fail_at;
    bool forever = t->fail_forever, failed = t->failed;
    t->fail_at = 0;
    assert_verified(ix);
    t->calls = calls;
    t->fail_at = fail_at;
    t->fail_forever = forever;
    t->failed = failed;
}

/* After an index call that may fail (its status st; before, the digest
 * from before it): verify, and a failed call must have left the index as
 * it was. Returns st. */
static inline lr_status
checked(const lr_index *ix, const char *call, uint64_t before, lr_status st)
{
    assert_verified(ix);
    if (st != LR_OK && lr__index_digest(ix) != before)
        fail_msg("%s failed with %s but changed the index", call,
                 lr_status_name(st));
    return st;
}

/* OOM scenarios that retry a failed call: a call under test that failed
 * must have returned LR_ENOMEM and left the index as it was (before);
 * `what` names the call in the messages. */
static inline void
assert_enomem_unchanged(const lr_index *ix, const char *what, lr_status st,
                        uint64_t before, uint64_t fail_at)
{
    if (st != LR_ENOMEM)
        fail_msg("%s with allocation %llu failing returned %s", what,
                 (unsigned long long)fail_at, lr_status_name(st));
    if (lr__index_digest(ix) != before)
        fail_msg("%s: LR_ENOMEM at allocation %llu changed the index", what,
                 (unsigned long long)fail_at);
}

/* ... and after the retry the index must end where a run with no failure
 * ends: the first run records its final digest, every later run must
 * match it. */
struct clean_end {
    bool have;
    uint64_t digest;
};

static inline void
assert_clean_end(struct clean_end *ref, const lr_index *ix, uint64_t fail_at)
{
    uint64_t d = lr__index_digest(ix);
    if (!ref->have) {
        ref->have = true;
        ref->digest = d;
    } else if (d != ref->digest) {
        fail_msg("after a failure at allocation %llu and a retry the index "
                 "differs from a clean run",
                 (unsigned long long)fail_at);
    }
}

/* n pseudo-random tokens, a pure function of seed. */
static inline void
toks(uint32_t *t, size_t n, uint64_t seed)
{
    tu_tokens(t, n, seed * 0x2545f4914f6cdd1dull + 1);
}

/* Tokens instance `inst` holds for the prompt t[0..n), by a match with
 * LR_MATCH_NO_TOUCH at host time now (0 if it holds none). */
static inline uint32_t
held_by(lr_index *ix, const uint32_t *t, size_t n, uint32_t inst, uint64_t now)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = n;
    lr_index_hit h[8];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 8;
    assert_st(lr_index_match(ix, &p, now, LR_MATCH_NO_TOUCH, &r), LR_OK);
    for (size_t i = 0; i < r.n_hits; i++)
        if (h[i].instance == inst)
            return h[i].tokens;
    return 0;
}

static inline lr_index_stats
stats(const lr_index *ix)
{
    lr_index_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    assert_st(lr_index_get_stats(ix, &s), LR_OK);
    return s;
}

#endif
