#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "libroute/lr_load.h"

/* Every block carries its size in a header, so the counters can check that
 * the library hands back the size it asked for (lr_allocator contract). */
struct hdr {
    size_t size;
    size_t magic;
};
#define TU_MAGIC ((size_t)0x7e57a11c)

static bool
should_fail(struct tu_alloc *t)
{
    t->calls++;
    if (t->fail_at == 0)
        return false;
    if (t->calls == t->fail_at || (t->fail_forever && t->calls > t->fail_at)) {
        t->failed = true;
        return true;
    }
    return false;
}

static void *
tu_alloc_fn(void *ud, size_t n)
{
    struct tu_alloc *t = ud;
    if (should_fail(t))
        return NULL;
    struct hdr *h = malloc(sizeof *h + n);
    if (h == NULL)
        return NULL;
    h->size = n;
    h->magic = TU_MAGIC;
    t->live_bytes += n;
    t->live_blocks++;
    return h + 1;
}

static void
tu_free_fn(void *ud, void *p, size_t n)
{
    struct tu_alloc *t = ud;
    if (p == NULL)
        return;
    struct hdr *h = (struct hdr *)p - 1;
    assert_int_equal(h->magic, TU_MAGIC);
    assert_int_equal(h->size, n); /* the library must pass the right size */
    h->magic = 0;
    t->live_bytes -= n;
    t->live_blocks--;
    free(h);
}

static void *
tu_realloc_fn(void *ud, void *p, size_t old_n, size_t new_n)
{
    struct tu_alloc *t = ud;
    if (p == NULL)
        return tu_alloc_fn(ud, new_n);
    struct hdr *h = (struct hdr *)p - 1;
    assert_int_equal(h->magic, TU_MAGIC);
    assert_int_equal(h->size, old_n);
    if (should_fail(t))
        return NULL;
    struct hdr *nh = realloc(h, sizeof *nh + new_n);
    if (nh == NULL)
        return NULL;
    nh->size = new_n;
    t->live_bytes = t->live_bytes - old_n + new_n;
    return nh + 1;
}

void
tu_alloc_init(struct tu_alloc *t)
{
    memset(t, 0, sizeof *t);
    t->a.alloc = tu_alloc_fn;
    t->a.realloc = tu_realloc_fn;
    t->a.free = tu_free_fn;
    t->a.ud = t;
}

void
tu_alloc_arm(struct tu_alloc *t, uint64_t fail_at, bool forever)
{
    t->calls = 0;
    t->fail_at = fail_at;
    t->fail_forever = forever;
    t->failed = false;
}

void
tu_alloc_disarm(struct tu_alloc *t)
{
    t->fail_at = 0;
    t->fail_forever = false;
}

struct tu_arming
tu_alloc_pause(struct tu_alloc *t)
{
    struct tu_arming arm = { t->fail_at, t->fail_forever };
    tu_alloc_disarm(t);
    return arm;
}

void
tu_alloc_resume(struct tu_alloc *t, struct tu_arming arm)
{
    tu_alloc_arm(t, arm.fail_at, arm.forever);
}

uint64_t
tu_seed(const char *what, uint64_t fallback)
{
    const char *e = getenv("LR_TEST_SEED");
    uint64_t s = fallback;
    if (e != NULL && *e != '\0')
        s = strtoull(e, NULL, 0);
    fprintf(stderr, "# %s: seed %llu (replay with LR_TEST_SEED=%llu)\n", what,
            (unsigned long long)s, (unsigned long long)s);
    return s;
}

void
tu_oom_loop(tu_scenario scenario, void *ctx, uint64_t max_n)
{
    for (int mode = 0; mode < 2; mode++) {
        bool done = false;
        uint64_t injected = 0;
        for (uint64_t n = 1; n <= max_n && !done; n++) {
            struct tu_alloc t;
            tu_alloc_init(&t);
            tu_alloc_arm(&t, n, mode == 1);
            done = scenario(&t, ctx);
            if (t.live_bytes != 0 || t.live_blocks != 0)
                fail_msg("leak after OOM at allocation %llu (mode %d): "
                         "%zu bytes in %zu blocks",
                         (unsigned long long)n, mode, t.live_bytes,
                         t.live_blocks);
            if (!t.failed)
                done = true;
            else
                injected++;
        }
        /* A scenario that never allocates proves nothing about OOM. */
        if (injected == 0)
            fail_msg("OOM loop: the scenario never reached an allocation");
        if (!done)
            fail_msg("OOM loop did not finish within %llu allocations",
                     (unsigned long long)max_n);
    }
}

bool
tu_same_load(const lr_load_snapshot *a, const lr_load_snapshot *b)
{
    return a->struct_size == b->struct_size &&
           a->instance_class == b->instance_class &&
           a->prefix_caching == b->prefix_caching &&
           a->inflight == b->inflight && a->queued == b->queued &&
           a->prefill_tokens == b->prefill_tokens &&
           a->queued_tokens == b->queued_tokens &&
           a->decode_tokens == b->decode_tokens &&
           a->kv_tokens == b->kv_tokens && a->has_stats == b->has_stats &&
           a->running == b->running && a->waiting == b->waiting &&
           memcmp(&a->kv_use, &b->kv_use, sizeof a->kv_use) == 0 &&
           a->scraped_ns == b->scraped_ns && a->has_rtt == b->has_rtt &&
           a->rtt_ns == b->rtt_ns &&
           a->last_first_token_ns == b->last_first_token_ns &&
           a->queue_since_ns == b->queue_since_ns &&
           a->prompt_tokens == b->prompt_tokens;
}
