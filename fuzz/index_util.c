#include "index_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_helpers.h"
#include "index/index.h"
#include "common/lr_hash.h"

uint32_t
fuzz_pattern_token(uint32_t pattern, uint32_t pos)
{
    uint64_t x = (uint64_t)pos * 0x9e3779b97f4a7c15ull + pattern;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    switch (pattern % FUZZ_N_PATTERNS) {
    case 0:
        return 0;
    case 1:
        return pos & 1;
    case 2:
        return (uint32_t)(x % 3);
    default:
        return (uint32_t)(x % 1000);
    }
}

void
fuzz_pattern_fill(uint32_t *out, size_t n, uint32_t pattern, uint32_t start,
                  uint32_t tweak)
{
    for (size_t i = 0; i < n; i++)
        out[i] = fuzz_pattern_token(pattern, start + (uint32_t)i);
    if (tweak < n)
        out[tweak] ^= 1;
}

lr_status
fuzz_learn_pattern(lr_index *ix, uint32_t inst, int32_t trust, uint64_t salt,
                   uint32_t pattern, uint32_t start, uint32_t len,
                   uint32_t tweak, const uint32_t *bounds, size_t n_bounds,
                   uint64_t now)
{
    uint32_t tok[FUZZ_LEARN_MAX];
    FUZZ_ASSERT(len <= FUZZ_LEARN_MAX);
    fuzz_pattern_fill(tok, len, pattern, start, tweak);
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = tok;
    p.n_tokens = len;
    p.tenant_salt = salt;
    p.boundaries = bounds;
    p.n_boundaries = n_bounds;
    return lr_index_learn(ix, &p, inst, trust, now);
}

bool
fuzz_trace_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("LR_FUZZ_TRACE");
        on = e != NULL && *e != '\0' && *e != '0';
    }
    return on != 0;
}

void
fuzz_trace(const char *fmt, ...)
{
    if (!fuzz_trace_on())
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int oom_paused;

void
fuzz_oom_pause(void)
{
    oom_paused++;
}

void
fuzz_oom_resume(void)
{
    oom_paused--;
}

static bool
oom_fail(struct fuzz_oom *o)
{
    if (!o->armed || oom_paused > 0)
        return false;
    o->count++;
    bool fail = o->fail_at != 0 &&
                (o->sticky ? o->count >= o->fail_at : o->count == o->fail_at);
    o->failures += fail;
    return fail;
}

static void *
oom_alloc(void *ud, size_t n)
{
    return oom_fail(ud) ? NULL : malloc(n);
}

static void *
oom_realloc(void *ud, void *p, size_t old_n, size_t new_n)
{
    (void)old_n;
    return oom_fail(ud) ? NULL : realloc(p, new_n);
}

static void
oom_free(void *ud, void *p, size_t n)
{
    (void)ud;
    (void)n;
    free(p);
}

void
fuzz_oom_allocator(struct fuzz_oom *o, lr_allocator *a)
{
    a->alloc = oom_alloc;
    a->realloc = oom_realloc;
    a->free = oom_free;
    a->ud = o;
}

void
fuzz_oom_decode(fuzz_dp *dp, uint32_t max_at, uint64_t *fail_at, bool *sticky)
{
    uint32_t mode = fuzz_dp_next_range(dp, 0, 3);
    *fail_at = mode >= 2 ? fuzz_dp_next_range(dp, 1, max_at) : 0;
    *sticky = mode == 3;
}

void
fuzz_oom_select(struct fuzz_oom *o, unsigned sel)
{
    memset(o, 0, sizeof *o);
    if (sel > 0) {
        o->sticky = sel >= 32;
        o->fail_at = o->sticky ? sel - 31 : sel;
    }
}

void
fuzz_index_verify_at(const lr_index *ix, const char *file, int line)
{
    fuzz_oom_pause();
    lr_status st = lr__index_verify(ix);
    fuzz_oom_resume();
    if (st != LR_OK) {
        fprintf(stderr, "%s:%d: lr__index_verify() = %s\n", file, line,
                lr_status_name(st));
        abort();
    }
}

uint64_t
fuzz_index_ttl(fuzz_dp *dp)
{
    static const uint64_t ttls[4] = { 0, 4 * FUZZ_TICK, 64 * FUZZ_TICK,
                                      UINT64_MAX };
    return ttls[fuzz_dp_next_range(dp, 0, 3)];
}

uint64_t
fuzz_index_dt(fuzz_dp *dp)
{
    static const uint64_t dts[4] = { 0, FUZZ_TICK, 16 * FUZZ_TICK,
                                     3601 * FUZZ_SEC };
    return dts[fuzz_dp_next_range(dp, 0, 3)];
}

void
fuzz_index_clock(lr_index *ix, uint64_t now)
{
    lr_status st = lr_index_expire(ix, now);
    if (st == LR_ERANGE)
        st = lr_index_expire(ix, now);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
}

void
fuzz_index_after(struct fuzz_index_run *r, lr_index *ix, lr_status st,
                 uint64_t d0, bool failed)
{
    fuzz_note(&r->transcript, (uint64_t)st);
    if (!r->check)
        return;
    FUZZ_VERIFY(ix);
    if (failed)
        FUZZ_ASSERT_STATUS(st, lr__index_digest(ix) == d0);
}

lr_status
fuzz_index_query(struct fuzz_index_run *r, const lr_index *ix, uint32_t inst,
                 uint64_t capacity, lr_index_stats *s, uint64_t *blocks)
{
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    lr_status st = lr_index_get_stats(ix, s);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    *blocks = 0;
    lr_status st2 = lr_index_instance_blocks(ix, inst, blocks);
    fuzz_note(&r->transcript, s->blocks);
    fuzz_note(&r->transcript, s->instances);
    fuzz_note(&r->transcript, s->evicted_blocks);
    fuzz_note(&r->transcript, s->expired_blocks);
    fuzz_note(&r->transcript, s->learned_blocks);
    fuzz_note(&r->transcript, (uint64_t)st2);
    fuzz_note(&r->transcript, *blocks);
    if (r->check) {
        FUZZ_ASSERT(lr__index_digest(ix) == d0);
        FUZZ_ASSERT(s->blocks <= capacity);
        FUZZ_ASSERT_STATUS(st2,
                           st2 == LR_OK || st2 == LR_ENOENT ||
                               (st2 == LR_EINVAL && inst == LR_INSTANCE_NONE));
        if (st2 == LR_OK)
            FUZZ_ASSERT(*blocks <= s->blocks);
    }
    return st2;
}

void
fuzz_index_replays(void (*run_once)(struct fuzz_index_run *r,
                                    const uint8_t *data, size_t size),
                   const uint8_t *data, size_t size)
{
    struct fuzz_index_run a = { .check = true, .transcript = FUZZ_FNV_INIT };
    run_once(&a, data, size);
    if (fuzz_trace_on())
        return;
    struct fuzz_index_run b = { .transcript = FUZZ_FNV_INIT };
    run_once(&b, data, size);
    FUZZ_ASSERT(a.digest[0] == b.digest[0] && a.digest[1] == b.digest[1]);
    FUZZ_ASSERT(a.transcript == b.transcript);
    struct fuzz_index_run c = { .seed_xor = 0x5eed,
                                .transcript = FUZZ_FNV_INIT };
    run_once(&c, data, size);
    FUZZ_ASSERT(a.digest[0] == c.digest[0] && a.digest[1] == c.digest[1]);
    FUZZ_ASSERT(a.transcript == c.transcript);
}

void
fuzz_delta_reseal(uint8_t *b, size_t n)
{
    if (n >= 8)
        lr__put_u64(b + n - 8, lr__hash(b, n - 8, LR_SEED_DELTA));
}

size_t
fuzz_keys(uint32_t B, const uint32_t *tokens, size_t n, uint64_t salt,
          uint64_t *keys, size_t capacity)
{
    size_t nk = 0;
    lr_status st = lr_block_keys(B, tokens, n, salt, keys, capacity, &nk);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    return nk;
}

static bool
in_hits(const lr_index_match_result *r, uint32_t id, uint32_t *tokens)
{
    for (size_t i = 0; i < r->n_hits; i++) {
        if (r->hits[i].instance == id) {
            *tokens = r->hits[i].tokens;
            return true;
        }
    }
    return false;
}

void
fuzz_check_peek(lr_index *ix, lr_status st, const uint64_t *keys, size_t n_keys,
                uint64_t now, const lr_index_match_result *r)
{
    FUZZ_ASSERT(!lr__index_expiry_due(ix, now));
    struct lr__match_scratch *ms;
    fuzz_oom_pause();
    FUZZ_ASSERT(lr__index_scratch_new(ix, lr__index_mem(ix), &ms) == LR_OK);
    fuzz_oom_resume();
    lr_index_hit hits[16];
    memset(hits, 0, sizeof hits);
    lr_index_match_result pr;
    lr_index_match_result_init(&pr);
    pr.hits = r->hits_capacity > 0 ? hits : NULL;
    pr.hits_capacity = r->hits_capacity;
    FUZZ_ASSERT(r->hits_capacity <= 16);
    size_t size;
    const void *raw = lr__index_raw(ix, &size);
    uint8_t *before = malloc(size);
    FUZZ_ASSERT(before != NULL);
    memcpy(before, raw, size);
    uint64_t d0 = lr__index_digest(ix);
    lr_status ps = lr__index_peek(ix, keys, n_keys, now, ms, &pr);
    FUZZ_ASSERT(memcmp(lr__index_raw(ix, &size), before, size) == 0);
    FUZZ_ASSERT(lr__index_digest(ix) == d0);
    FUZZ_ASSERT_STATUS(ps, ps == st);
    FUZZ_ASSERT(pr.n_hits == r->n_hits &&
                pr.prompt_blocks == r->prompt_blocks &&
                pr.deepest_tokens == r->deepest_tokens);
    if (st == LR_OK && r->n_hits > 0)
        FUZZ_ASSERT(memcmp(hits, r->hits, r->n_hits * sizeof *hits) == 0);
    /* a cut peek (a large fleet's route): the deepest of those hits; the
     * rest, asked one by one, answer theirs */
    if (st == LR_OK && r->hits_capacity > 0) {
        lr_index_hit cut[16];
        lr_index_match_result cr;
        lr_index_match_result_init(&cr);
        cr.hits = cut;
        cr.hits_capacity = 16;
        struct lr__peek_cut c = { (uint32_t)(d0 % 4), (uint32_t)(d0 >> 8) % 4,
                                  0 };
        FUZZ_ASSERT(lr__index_peek_cut(ix, keys, n_keys, now, ms, &c, &cr) ==
                    LR_OK);
        FUZZ_ASSERT(memcmp(lr__index_raw(ix, &size), before, size) == 0);
        FUZZ_ASSERT(cr.n_hits <= r->n_hits);
        uint32_t B = lr_index_block_tokens(ix);
        for (size_t i = 0; i < r->n_hits; i++) {
            bool told = false;
            for (size_t k = 0; k < cr.n_hits; k++)
                if (cut[k].instance == hits[i].instance) {
                    FUZZ_ASSERT(cut[k].tokens == hits[i].tokens);
                    told = true;
                }
            uint64_t got =
                c.node == LR_NIL
                    ? 0
                    : (uint64_t)lr__index_depth_below(ix, ms, c.node,
                                                      hits[i].instance) *
                          B;
            FUZZ_ASSERT(got == (told ? 0 : hits[i].tokens));
            FUZZ_ASSERT(told || c.node != LR_NIL);
        }
    }
    free(before);
    fuzz_oom_pause();
    lr__index_scratch_free(lr__index_mem(ix), ms);
    fuzz_oom_resume();
}

void
fuzz_check_match(const lr_index *ix, lr_status st, const uint64_t *keys,
                 size_t n_keys, const lr_index_match_result *r,
                 const lr_index_hit *hits_before, const uint32_t *ids,
                 size_t n_ids)
{
    uint32_t B = lr_index_block_tokens(ix);
    FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EBUFSIZE);
    FUZZ_ASSERT(r->prompt_blocks == n_keys);
    FUZZ_ASSERT(r->deepest_tokens <= (uint64_t)n_keys * B);
    FUZZ_ASSERT(r->deepest_tokens % B == 0);
    uint32_t n32 = (uint32_t)n_keys;
    if (st == LR_EBUFSIZE) {
        FUZZ_ASSERT(r->n_hits > r->hits_capacity);
        FUZZ_ASSERT(r->deepest_tokens > 0);
        if (r->hits_capacity > 0)
            FUZZ_ASSERT(memcmp(r->hits, hits_before,
                               r->hits_capacity * sizeof *r->hits) == 0);
        /* the n_hits ids with a match are all in ids[] */
        if (n_ids > 0) {
            size_t count = 0;
            uint32_t deepest = 0;
            for (size_t i = 0; i < n_ids; i++) {
                uint32_t d = lr__index_depth_of(ix, ids[i], keys, n32);
                count += d > 0;
                deepest = d > deepest ? d : deepest;
            }
            FUZZ_ASSERT(count == r->n_hits);
            FUZZ_ASSERT((uint64_t)deepest * B == r->deepest_tokens);
        }
        return;
    }
    FUZZ_ASSERT(r->n_hits <= r->hits_capacity);
    FUZZ_ASSERT(r->deepest_tokens == (r->n_hits > 0 ? r->hits[0].tokens : 0));
    for (size_t i = 0; i < r->n_hits; i++) {
        const lr_index_hit *h = &r->hits[i];
        FUZZ_ASSERT(h->tokens > 0 && h->tokens % B == 0);
        FUZZ_ASSERT(h->tokens <= (uint64_t)n_keys * B);
        if (i > 0) {
            const lr_index_hit *g = &r->hits[i - 1];
            FUZZ_ASSERT(g->tokens > h->tokens ||
                        (g->tokens == h->tokens && g->instance < h->instance));
        }
        FUZZ_ASSERT(lr__index_depth_of(ix, h->instance, keys, n32) * B ==
                    h->tokens);
    }
    for (size_t i = 0; i < n_ids; i++) {
        uint32_t t;
        if (!in_hits(r, ids[i], &t))
            FUZZ_ASSERT(lr__index_depth_of(ix, ids[i], keys, n32) == 0);
    }
}
