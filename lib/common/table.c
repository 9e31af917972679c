/* lr__table: backward-shift delete, growth and the verify walk of the
 * one open-addressing table (the layout and the contract are in table.h,
 * with the inline lookup and insert). */
#include "common/table.h"

#define TAG_MASK LR__TABLE_TAG
#define LOAD_NUM LR__TABLE_LOAD_NUM
#define LOAD_DEN LR__TABLE_LOAD_DEN

/* What an empty table's slots point at: one empty slot, never written
 * (every insert is preceded by a reserve, which replaces it). */
static const uint64_t no_slots[1] = { 0 };

static void
set_empty(struct lr__table *t)
{
    t->slots = (uint64_t *)(uintptr_t)no_slots;
    t->size = 1;
    t->count = 0;
    t->worst = 0;
    t->since = 0;
}

static bool
holds_memory(const struct lr__table *t)
{
    return t->slots != NULL && t->slots != no_slots;
}

/* Slots needed to hold `need` values at most 3/4 full; 0 if too many. */
static uint64_t
size_for(uint64_t need)
{
    uint64_t size = (need * LOAD_DEN + LOAD_NUM - 1) / LOAD_NUM;
    if (size < LR__TABLE_MIN_SIZE)
        size = LR__TABLE_MIN_SIZE;
    return size > UINT32_MAX ? 0 : size;
}

/* Move to `size` slots under `salt` (the caller checked the load). */
static lr_status
rehash(struct lr__table *t, struct lr__mem *m, uint64_t size, uint64_t salt)
{
    uint64_t *ns = lr__calloc(m, (size_t)size, sizeof(uint64_t));
    if (ns == NULL)
        return LR_ENOMEM;
    uint32_t worst = 0;
    for (uint32_t i = 0; i < t->size; i++) {
        if (t->slots[i] != 0) {
            uint32_t d = lr__table_place(ns, (uint32_t)size, salt, t->slots[i]);
            worst = d > worst ? d : worst;
        }
    }
    uint32_t count = t->count;
    lr__table_free(t, m);
    t->slots = ns;
    t->size = (uint32_t)size;
    t->count = count;
    t->salt = salt;
    t->worst = worst;
    return LR_OK;
}

lr_status
lr__table_init(struct lr__table *t, struct lr__mem *m, uint32_t expect)
{
    set_empty(t);
    t->salt = 0;
    t->resalts = 0;
    if (expect == 0)
        return LR_OK;
    uint64_t size = size_for(expect);
    return size == 0 ? LR_ENOMEM : rehash(t, m, size, 0);
}

void
lr__table_free(struct lr__table *t, struct lr__mem *m)
{
    if (holds_memory(t))
        lr__free(m, t->slots, (size_t)t->size * sizeof(uint64_t));
    set_empty(t);
}

lr_status
lr__table_reserve(struct lr__table *t, struct lr__mem *m, uint32_t more)
{
    uint64_t need = (uint64_t)t->count + more;
    bool fits = need * LOAD_DEN <= (uint64_t)t->size * LOAD_NUM;
    /* A probe past the bound, with size / 8 inserts since the last
     * rebuild to pay for this one: re-salt (at the size it needs). */
    bool flood =
        t->worst > LR__TABLE_PROBE_BOUND(t->size) && t->since >= t->size / 8;
    if (fits && !flood)
        return LR_OK;
    uint64_t size = t->size;
    if (!fits) {
        size = (uint64_t)t->size + t->size / 2;
        uint64_t fit = size_for(need);
        if (fit == 0)
            return LR_ENOMEM;
        if (size < fit)
            size = fit;
        if (size > UINT32_MAX)
            size = UINT32_MAX;
    }
    uint64_t salt = flood ? lr__hash_seed(0, t) : t->salt;
    LR_TRY(rehash(t, m, size, salt));
    t->since = 0;
    t->resalts += flood;
    return LR_OK;
}

void
lr__table_probe_stats(const struct lr__table *t, uint32_t *max, uint64_t *sum)
{
    uint32_t size = t->size, mx = 0;
    uint64_t s = 0;
    for (uint32_t j = 0; j < size; j++) {
        uint64_t w = t->slots[j];
        if (w == 0)
            continue;
        uint32_t home = lr__table_home(w, size, t->salt);
        uint32_t d = (uint32_t)(((uint64_t)j + size - home) % size);
        mx = d > mx ? d : mx;
        s += d;
    }
    *max = mx;
    *sum = s;
}

/* Slot i may take slot j's word when j's home does not lie cyclically in
 * (i, j]: a lookup from that home still reaches it. */
static inline bool
can_move(uint32_t i, uint32_t j, uint32_t home)
{
    return (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
}

void
lr__table_remove(struct lr__table *t, uint64_t hv, uint32_t value)
{
    uint32_t size = t->size;
    uint64_t want = (hv & TAG_MASK) | ((uint64_t)value + 1);
    uint32_t i = lr__table_home(hv, size, t->salt);
    while (t->slots[i] != want) {
        if (LR_NEVER(t->slots[i] == 0))
            return;
        if (++i == size)
            i = 0;
    }
    /* Backward shift: pull later words of the probe run into the hole
     * until an empty slot ends the run, so no chain is ever broken. */
    uint32_t j = i;
    for (;;) {
        if (++j == size)
            j = 0;
        uint64_t s = t->slots[j];
        if (s == 0)
            break;
        if (can_move(i, j, lr__table_home(s, size, t->salt))) {
            t->slots[i] = s;
            i = j;
        }
    }
    t->slots[i] = 0;
    t->count--;
}

lr_status
lr__table_verify(const struct lr__table *t)
{
    uint32_t size = t->size;
    if (t->slots == NULL || size == 0 ||
        (uint64_t)t->count * LOAD_DEN > (uint64_t)size * LOAD_NUM)
        return LR_ECORRUPT;
    uint32_t empty = 0;
    while (empty < size && t->slots[empty] != 0)
        empty++;
    if (empty == size)
        return LR_ECORRUPT;
    /* One pass from an empty slot round the table: each filled slot's
     * home must lie in the run of filled slots that ends at it. */
    uint32_t filled = 0, run_start = 1; /* k of the run's first slot */
    for (uint32_t k = 1; k <= size; k++) {
        uint32_t j = (uint32_t)(((uint64_t)empty + k) % size);
        uint64_t s = t->slots[j];
        if (s == 0) {
            run_start = k + 1;
            continue;
        }
        filled++;
        uint32_t home = lr__table_home(s, size, t->salt);
        uint64_t back = ((uint64_t)j + size - home) % size; /* home -> j */
        if (back > (uint64_t)(k - run_start))
            return LR_ECORRUPT;
    }
    return filled == t->count ? LR_OK : LR_ECORRUPT;
}
