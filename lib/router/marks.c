/* Where each prompt went (marks.h). */
#include "router/marks.h"
#include "common/lr_hash.h"

lr_status
lr__marks_init(struct lr__marks *t, struct lr__mem *mem, uint64_t entries,
               uint64_t seed)
{
    memset(t, 0, sizeof *t);
    uint64_t sets = 1;
    while (sets * LR__MARK_WAYS < entries && sets < (1ull << 40))
        sets <<= 1;
    t->m = lr__calloc(mem, sets * LR__MARK_WAYS, sizeof *t->m);
    LR_RETURN_IF(t->m == NULL, LR_ENOMEM);
    t->mask = sets - 1;
    t->seed = seed;
    return LR_OK;
}

void
lr__marks_free(struct lr__marks *t, struct lr__mem *mem)
{
    if (t->m != NULL)
        lr__free(mem, t->m, (t->mask + 1) * LR__MARK_WAYS * sizeof *t->m);
    memset(t, 0, sizeof *t);
}

static struct lr__mark *
set_of(const struct lr__marks *t, uint64_t key)
{
    return &t->m[(lr__mix64(key, t->seed) & t->mask) * LR__MARK_WAYS];
}

void
lr__marks_put(struct lr__marks *t, const uint64_t *keys, size_t n,
              uint32_t inst, uint32_t gen, uint64_t now_ns)
{
    size_t d = n / LR__MARK_STRIDE * LR__MARK_STRIDE;
    if (t->m == NULL || d == 0)
        return;
    uint64_t key = keys[d - 1] | 1; /* never 0, the empty slot's */
    struct lr__mark *s = set_of(t, key), *put = &s[0];
    for (uint32_t w = 0; w < LR__MARK_WAYS; w++) {
        if (s[w].key == key) {
            put = &s[w];
            break;
        }
        if (s[w].key == 0 || s[w].at_ns < put->at_ns)
            put = &s[w];
        if (s[w].key == 0)
            break;
    }
    *put = (struct lr__mark){ key, now_ns, inst, gen };
}

void
lr__marks_find(const struct lr__marks *t, const uint64_t *keys, size_t n,
               uint64_t now_ns, uint64_t ttl_ns,
               void (*fn)(void *ctx, uint32_t inst, uint32_t gen, size_t depth),
               void *ctx)
{
    if (t->m == NULL)
        return;
    for (size_t d = n / LR__MARK_STRIDE * LR__MARK_STRIDE; d > 0;
         d -= LR__MARK_STRIDE) {
        uint64_t key = keys[d - 1] | 1;
        const struct lr__mark *s = set_of(t, key);
        for (uint32_t w = 0; w < LR__MARK_WAYS; w++)
            if (s[w].key == key &&
                (now_ns < s[w].at_ns || now_ns - s[w].at_ns <= ttl_ns))
                fn(ctx, s[w].inst, s[w].gen, d);
    }
}

uint64_t
lr__marks_count(const struct lr__marks *t)
{
    uint64_t c = 0;
    for (uint64_t i = 0; t->m != NULL && i < (t->mask + 1) * LR__MARK_WAYS; i++)
        c += t->m[i].key != 0;
    return c;
}
