/* lrsim: the engine model (see engine.h for the picture).
 *
 * Worked example, block_tokens = 4, capacity 8 blocks, one sequence
 * "AAAA BBBB CC" (10 tokens, keys kA, kAB; the partial block has none):
 *
 *   admit:  no hit; chunk of 10 tokens needs 3 blocks: 0 1 2 (ref 1)
 *   step:   computed 10 = target; blocks 0, 1 get keys kA, kAB (table);
 *           the step samples the first token
 *   ...     decode steps; at 12 tokens block 2 is full (no key: output)
 *   done:   release 2, 1, 0: block 2 (no key) to the head of the free
 *           queue, then 1 and 0 to the tail: eviction order 2, <older>, 1, 0
 *   next "AAAA BBBB DDDD": hits kA, kAB -> 8 tokens cached, pins 0 and 1
 */
#include "engine.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define NIL UINT32_MAX
_Static_assert(offsetof(struct sim_seq, decoding) < 64,
               "a sequence's per-step fields fit one cache line");
#define TABLE_MIN 1024u /* the prefix table's first size, in slots */
#define SEED_SALT 0x6c7273696d6b7631ull /* "lrsimkv1" */
#define SEED_BLOCK 0x6c7273696d626c6bull

/* 16 bytes. qpos keeps a position's low 32 bits: the ring's positions in
 * use span less than its size (at most 2^32 entries), so they tell the
 * positions in use apart. */
struct blk {
    uint64_t key;
    uint32_t qpos; /* position of its live free-queue entry (ref == 0) */
    uint32_t ref : 31; /* at most one per running sequence */
    uint32_t hashed : 1;
};
_Static_assert(sizeof(struct blk) == 16, "a block is 16 bytes");

struct slot {
    uint64_t key;
    uint32_t id; /* block id + 1; 0: empty */
};

struct queue {
    struct sim_seq *head, *tail;
    uint32_t n;
};

/* A block of the CPU tier ("CPU tier"): its key, on the LRU list. */
struct cblk {
    uint64_t key;
    uint32_t prev, next; /* NIL at the ends */
};

/* A LoRA adapter slot ("Adapters"). */
struct lora {
    uint32_t id;      /* the adapter it holds; 0: empty */
    uint32_t running; /* running sequences of that adapter */
    uint64_t stamp;   /* last use: an admission or a release */
};

/* A slot of a slots engine, or an entry of its host prompt cache: the
 * chained keys of a prompt's full blocks (max_keys at most). */
struct kept {
    uint64_t *keys;
    uint32_t n;
    uint32_t busy;  /* a slot: a running sequence holds it */
    uint64_t stamp; /* a slot: last use; an entry: when it was saved */
};

struct sim_engine {
    const struct sim_class *cls;
    int caching;
    uint32_t bt; /* tokens per block */
    uint32_t cap;
    uint32_t n_free;
    uint32_t n_hashed;
    uint32_t watermark;
    /* blk, table and fq: one arena (sim_arena_get), whose contents are
     * whatever its last user left ("Memory") */
    char *arena;
    size_t arena_bytes;
    struct blk *blk;
    /* the free queue: a ring of block ids, head first; an entry is live
     * when its block has ref 0 and qpos names it (pinning a free block
     * leaves a stale entry behind, skipped when reached) */
    uint32_t *fq;
    uint64_t fq_mask, fq_head, fq_tail;
    /* blocks [fresh, cap) were never allocated: free, without a key, and
     * in the free queue at positions fq_base + id, where nothing is
     * written (see "Memory") */
    uint64_t fq_base;
    uint32_t fresh;
    /* the prefix table: slots [0, mask] in use, at most half full; it
     * doubles up to mask_max + 1 slots (twice the blocks, rounded up) */
    struct slot *table;
    uint64_t mask, mask_max;
    /* admission memo: the waiting head that did not fit and the free
     * blocks then; it is not retried until one of them changes */
    const struct sim_seq *stuck;
    uint32_t stuck_free;
    struct queue waiting, running;
    /* disaggregation: prefill legs holding their KV; decode legs waiting
     * for blocks, and receiving their KV */
    struct queue held, kvwait, recv;
    struct sim_seq **sched;
    uint32_t n_sched;
    uint32_t n_last; /* sched[0..n_last): the last step's, for prefetch */
    int busy;
    uint64_t pending;
    struct sim_engine_counters c;
    struct sim_kv_sink sink; /* KV events; hooks NULL: none */
    /* slots (SIM_CACHE_SLOTS): max_batch slots and the host prompt cache
     * (host[0..n_host) in the order they were saved, oldest first), all
     * keys in one pool made at create */
    int slots_mode, slot_reuse;
    struct kept *slot;
    struct kept *host;
    uint32_t n_host, cap_host;
    uint64_t host_blocks, host_cap_blocks;
    uint32_t max_keys;
    uint64_t clock;
    uint64_t *pool;
    /* LoRA (max_loras 0: none) */
    uint32_t max_loras;
    uint64_t load_us;
    struct lora lora[SIM_MAX_LORAS];
    /* CPU tier (cpu_cap 0: none): cpu[0..cpu_n) on an LRU list (head:
     * least recently used), found by key in cpu_table */
    uint32_t cpu_cap, cpu_n;
    uint32_t cpu_head, cpu_tail;
    struct cblk *cpu;
    struct slot *cpu_table;
    uint64_t cpu_mask;
    double cpu_us_per_token;
};

/* ---- sequences -------------------------------------------------------------- */

int
sim_seq_set_keys(struct sim_seq *s, const uint32_t *tokens, uint32_t n,
                 uint32_t bt, uint64_t salt)
{
    uint32_t nk = n / bt;
    if (nk > s->cap_keys) {
        uint64_t *k = sim_reallocarray(s->keys, nk, sizeof *k);
        if (k == NULL)
            return -1;
        s->keys = k;
        s->cap_keys = nk;
    }
    uint64_t prev = XXH3_64bits_withSeed(&salt, sizeof salt, SEED_SALT);
    for (uint32_t d = 0; d < nk; d++) {
        prev = XXH3_64bits_withSeed(tokens + (size_t)d * bt,
                                    (size_t)bt * sizeof *tokens,
                                    prev ^ SEED_BLOCK);
        s->keys[d] = prev;
    }
    s->n_keys = nk;
    return 0;
}

int
sim_seq_reserve(struct sim_seq *s, uint32_t tokens, uint32_t bt)
{
    uint32_t need = (uint32_t)(((uint64_t)tokens + bt - 1) / bt);
    if (need <= s->cap_blocks)
        return 0;
    uint32_t *b = sim_reallocarray(s->blocks, need, sizeof *b);
    if (b == NULL)
        return -1;
    s->blocks = b;
    s->cap_blocks = need;
    return 0;
}

void
sim_seq_free(struct sim_seq *s)
{
    free(s->keys);
    free(s->blocks);
    s->keys = NULL;
    s->blocks = NULL;
    s->cap_keys = s->cap_blocks = 0;
}

static void
q_push(struct queue *q, struct sim_seq *s, int front)
{
    s->prev = s->next = NULL;
    if (q->head == NULL) {
        q->head = q->tail = s;
    } else if (front) {
        s->next = q->head;
        q->head->prev = s;
        q->head = s;
    } else {
        s->prev = q->tail;
        q->tail->next = s;
        q->tail = s;
    }
    q->n++;
}

static void
q_remove(struct queue *q, struct sim_seq *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        q->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        q->tail = s->prev;
    s->prev = s->next = NULL;
    q->n--;
}

/* ---- the prefix table: open addressing, backward-shift deletion -----------------
 *
 * Each slot holds the key beside the block id, so a probe never touches the
 * block array (the table is the hot structure of admission). */

static uint32_t
t_find(const struct sim_engine *e, uint64_t key)
{
    for (uint64_t i = key & e->mask;; i = (i + 1) & e->mask) {
        const struct slot *sl = &e->table[i];
        if (sl->id == 0)
            return NIL;
        if (sl->key == key)
            return sl->id - 1;
    }
}

static void
t_insert(struct sim_engine *e, uint32_t id)
{
    uint64_t key = e->blk[id].key;
    uint64_t i = key & e->mask;
    while (e->table[i].id != 0)
        i = (i + 1) & e->mask;
    e->table[i].key = key;
    e->table[i].id = id + 1;
}

static void
t_delete(struct sim_engine *e, uint32_t id)
{
    uint64_t i = e->blk[id].key & e->mask;
    while (e->table[i].id != id + 1)
        i = (i + 1) & e->mask;
    /* shift later members of the cluster back over the hole */
    for (uint64_t j = (i + 1) & e->mask;; j = (j + 1) & e->mask) {
        if (e->table[j].id == 0)
            break;
        uint64_t home = e->table[j].key & e->mask;
        /* the entry at j may move to i if its home is not in (i, j] */
        if (((j - home) & e->mask) >= ((j - i) & e->mask)) {
            e->table[i] = e->table[j];
            i = j;
        }
    }
    e->table[i].id = 0;
    e->table[i].key = 0;
}

/* ---- blocks and the free queue ------------------------------------------------------
 *
 * A ring instead of a linked list: allocation reads consecutive ids, so
 * the block and table accesses of one chunk's allocations overlap instead
 * of chasing pointers. Live entries never exceed cap and the ring holds
 * 2 x cap, so a full ring is compacted in place and never grows.
 *
 * Memory. An engine's arrays are sized by its KV capacity (an a100's
 * 25,000 blocks: 1.6 MiB in all), and a fleet of thousands may touch
 * little of them in a short run. So they live in one arena
 * (sim_arena_get): mapped from the system the first time, where a page
 * costs memory only once written, then reused by the next engine of the
 * same size, with whatever that one left in it. The engine writes every
 * part before it reads it, and writes nothing at create but the table's
 * first slots:
 *   - blocks: those never allocated, [fresh, cap), are the free queue's
 *     entries at positions fq_base + id, as if pushed in id order at
 *     create, but neither their ring slots nor their blk entries are
 *     written: fq_id() reads the id from the position (allocation takes
 *     them in that order, one by one, so fresh only grows and the head
 *     never passes fq_base + fresh), and a block's entry is written when
 *     it is first allocated (or by a compaction, which writes the queue
 *     out);
 *   - the table starts at TABLE_MIN slots and doubles at half full
 *     (t_grow, which clears the new size), so its pages are touched as
 *     keys arrive, not by the first few keys' scatter over all of it.
 * None of this changes what the engine does: the queue's order and the
 * table's answers are the same. */

static int
fq_fresh(const struct sim_engine *e, uint64_t pos)
{
    /* below fq_base the difference wraps past cap */
    return pos - e->fq_base >= e->fresh && pos - e->fq_base < e->cap;
}

static uint32_t
fq_id(const struct sim_engine *e, uint64_t pos)
{
    return fq_fresh(e, pos) ? (uint32_t)(pos - e->fq_base)
                            : e->fq[pos & e->fq_mask];
}

static int
fq_live(const struct sim_engine *e, uint64_t pos)
{
    if (fq_fresh(e, pos))
        return 1;
    const struct blk *b = &e->blk[e->fq[pos & e->fq_mask]];
    return b->ref == 0 && b->qpos == (uint32_t)pos;
}

static void
fq_compact(struct sim_engine *e)
{
    uint64_t w = e->fq_head;
    for (uint64_t r = e->fq_head; r != e->fq_tail; r++) {
        if (!fq_live(e, r))
            continue;
        uint32_t id = fq_id(e, r);
        if (fq_fresh(e, r)) /* its entry, first written */
            e->blk[id] = (struct blk){ 0 };
        e->fq[w & e->fq_mask] = id;
        e->blk[id].qpos = (uint32_t)w++;
    }
    e->fq_tail = w;
    e->fresh = e->cap; /* every entry is written now */
}

static void
fq_push(struct sim_engine *e, uint32_t id, int front)
{
    if (e->fq_tail - e->fq_head > e->fq_mask)
        fq_compact(e);
    uint64_t pos = front ? --e->fq_head : e->fq_tail++;
    e->fq[pos & e->fq_mask] = id;
    e->blk[id].qpos = (uint32_t)pos;
}

/* Take the free queue's first live block; evict its key. Caller checked
 * n_free > 0. */
static uint32_t
blk_alloc(struct sim_engine *e)
{
    while (!fq_live(e, e->fq_head))
        e->fq_head++;
    uint64_t pos = e->fq_head++;
    uint32_t id;
    if (fq_fresh(e, pos)) { /* pos is fq_base + fresh */
        e->fresh = (id = (uint32_t)(pos - e->fq_base)) + 1;
        e->blk[id] = (struct blk){ 0 }; /* its entry, first written */
    } else {
        id = e->fq[pos & e->fq_mask];
    }
    struct blk *b = &e->blk[id];
    if (b->hashed) {
        t_delete(e, id);
        b->hashed = 0;
        e->n_hashed--;
        e->c.evicted_blocks++;
        if (e->sink.removed != NULL)
            e->sink.removed(e->sink.ctx, b->key);
    }
    b->ref = 1;
    e->n_free--;
    uint64_t used = e->cap - e->n_free;
    if (used > e->c.peak_used_blocks)
        e->c.peak_used_blocks = used;
    return id;
}

/* n blocks into out, as n calls of blk_alloc, in stretches of ALLOC_WARM:
 * first prefetch the blocks of the queue's next entries, then the table
 * slot every allocation of the stretch deletes a key from (prefetches:
 * their misses overlap and nothing waits for them), then allocate, so the
 * backward-shift deletes find their slots in cache. Caller checked
 * n_free >= n (the live queue entries are the free blocks). */
#define ALLOC_WARM 64u

static void
blk_alloc_n(struct sim_engine *e, uint32_t *out, uint32_t n)
{
    while (n > 0) {
        uint32_t m = n < ALLOC_WARM ? n : ALLOC_WARM;
        /* the blocks first (prefetches: nothing waits for them), then the
         * table slots their keys name */
        for (uint64_t pos = e->fq_head, k = 0;
             k < 2 * m && pos != e->fq_tail; pos++, k++)
            __builtin_prefetch(&e->blk[fq_id(e, pos)]);
        for (uint64_t pos = e->fq_head, k = 0; k < m; pos++) {
            if (!fq_live(e, pos))
                continue;
            k++;
            if (fq_fresh(e, pos))
                continue; /* no key: its entry is not written yet */
            const struct blk *b = &e->blk[e->fq[pos & e->fq_mask]];
            if (b->hashed)
                __builtin_prefetch(&e->table[b->key & e->mask]);
        }
        for (uint32_t k = 0; k < m; k++)
            *out++ = blk_alloc(e);
        n -= m;
    }
}

/* A free block found by a prefix hit comes back into use; its queue entry
 * goes stale. */
static void
blk_pin(struct sim_engine *e, uint32_t id)
{
    if (e->blk[id].ref++ == 0)
        e->n_free--;
}

/* Drop one reference. A block with a key goes to the tail (kept longest);
 * one without goes to the head (reused first). */
static void
blk_release(struct sim_engine *e, uint32_t id)
{
    struct blk *b = &e->blk[id];
    if (--b->ref > 0)
        return;
    e->n_free++;
    fq_push(e, id, !b->hashed);
}

/* Twice the table's slots, cleared: the keys are inserted again from the
 * blocks (only blocks below fresh were ever keyed). */
static void
t_grow(struct sim_engine *e)
{
    e->mask = 2 * e->mask + 1;
    memset(e->table, 0, (e->mask + 1) * sizeof *e->table);
    for (uint32_t id = 0; id < e->fresh; id++)
        if (e->blk[id].hashed)
            t_insert(e, id);
}

/* Give a computed prompt block its key, unless another block already
 * holds that key (two sequences computed the same prefix at once).
 * Returns whether the key is new in the cache. */
static int
blk_register(struct sim_engine *e, uint32_t id, uint64_t key)
{
    struct blk *b = &e->blk[id];
    if (!e->caching || b->hashed || t_find(e, key) != NIL)
        return 0;
    b->key = key;
    b->hashed = 1;
    e->n_hashed++;
    if (2ull * e->n_hashed > e->mask + 1 && e->mask < e->mask_max)
        t_grow(e); /* inserts this key too */
    else
        t_insert(e, id);
    return 1;
}

/* blk_register for s's blocks [from, to), in stretches of ALLOC_WARM
 * whose table slots and blocks are prefetched first (see blk_alloc_n). */
static void
blk_register_n(struct sim_engine *e, const struct sim_seq *s, uint32_t from,
               uint32_t to)
{
    if (!e->caching)
        return;
    uint32_t run_from = NIL;
    for (uint32_t d0 = from; d0 < to; d0 += ALLOC_WARM) {
        uint32_t d1 = to - d0 < ALLOC_WARM ? to : d0 + ALLOC_WARM;
        for (uint32_t d = d0; d < d1; d++) {
            __builtin_prefetch(&e->table[s->keys[d] & e->mask]);
            __builtin_prefetch(&e->blk[s->blocks[d]]);
        }
        for (uint32_t d = d0; d < d1; d++) {
            int fresh = blk_register(e, s->blocks[d], s->keys[d]);
            if (e->sink.stored == NULL)
                continue;
            /* one event per run of newly stored blocks */
            if (fresh && run_from == NIL)
                run_from = d;
            if (!fresh && run_from != NIL) {
                e->sink.stored(e->sink.ctx, s, run_from, d);
                run_from = NIL;
            }
        }
    }
    if (run_from != NIL)
        e->sink.stored(e->sink.ctx, s, run_from, to);
}

void
sim_engine_set_sink(struct sim_engine *e, const struct sim_kv_sink *sink)
{
    e->sink = *sink;
}

static void
seq_release_blocks(struct sim_engine *e, struct sim_seq *s)
{
    /* deepest first: the prefix's deep end goes nearer the queue head */
    for (uint32_t i = s->n_blocks; i-- > 0;)
        blk_release(e, s->blocks[i]);
    s->n_blocks = 0;
}

/* ---- Slots (llama.cpp's llama-server) -----------------------------------------------
 *
 * A slots engine runs at most max_batch sequences, one per slot. Each slot
 * keeps the prompt of its last request (its full blocks' keys: the
 * engine does not know the output's tokens, so a conversation's next turn
 * reuses the previous prompt, not the reply, as in the paged model).
 * Admission, as llama-server's get_available_slot() and its prompt cache:
 *
 *   slot   = the idle slot whose prompt shares the longest prefix with
 *            the new one, if that is more than slot_similarity of it;
 *            else the least recently used idle slot
 *   if the slot was taken by recency, or keeps under half of what it
 *   held (shared / its length < 0.5), and there is a host cache:
 *     save its prompt to the host cache (unless an entry holds it all),
 *       dropping entries it holds all of, then the oldest for room
 *     load the entry that beats the slot on both the share of itself it
 *       keeps and the share of the new prompt it covers (entries that
 *       would keep under a quarter of themselves are passed over); the
 *       entry leaves the cache for the slot
 *   hit    = the prefix the slot's prompt shares with the new one, at
 *            most all but the last token (in whole blocks)
 *
 * Idle slots' KV is not counted against kv_tokens: the blocks count only
 * what running sequences hold. */

static int
slots_create(struct sim_engine *e)
{
    uint32_t n = e->cls->max_batch;
    e->max_keys = e->cls->max_model_len / e->bt + 1;
    uint64_t host = e->cls->host_cache_tokens / e->bt;
    e->host_cap_blocks = host;
    /* entries: as many prompts of a quarter of max_model_len as fit, at
     * least 4, at most 256 (llama.cpp counts only their size) */
    uint64_t per = e->max_keys / 4 + 1;
    uint64_t cap = host ? host / per + 4 : 0;
    e->cap_host = (uint32_t)(cap > 256 ? 256 : cap);
    e->slot = sim_calloc(n, sizeof *e->slot);
    e->host = sim_calloc(e->cap_host ? e->cap_host : 1, sizeof *e->host);
    e->pool =
        sim_calloc((uint64_t)(n + e->cap_host) * e->max_keys, sizeof *e->pool);
    if (e->slot == NULL || e->host == NULL || e->pool == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        e->slot[i].keys = e->pool + (uint64_t)i * e->max_keys;
    for (uint32_t i = 0; i < e->cap_host; i++)
        e->host[i].keys = e->pool + (uint64_t)(n + i) * e->max_keys;
    return 0;
}

static uint32_t
lcp_keys(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb)
{
    uint32_t n = na < nb ? na : nb, d = 0;
    while (d < n && a[d] == b[d])
        d++;
    return d;
}

/* Drop host entry i (the others keep their order). */
static void
host_drop(struct sim_engine *e, uint32_t i)
{
    struct kept gone = e->host[i];
    e->host_blocks -= gone.n;
    memmove(&e->host[i], &e->host[i + 1],
            (e->n_host - i - 1) * sizeof *e->host);
    e->host[--e->n_host] = gone; /* its buffer waits past the end */
    e->host[e->n_host].n = 0;
}

/* llama-server's prompt cache alloc(): keep a slot's prompt. */
static void
host_save(struct sim_engine *e, const struct kept *k)
{
    if (k->n == 0 || k->n > e->host_cap_blocks)
        return;
    for (uint32_t i = 0; i < e->n_host; i++)
        if (lcp_keys(e->host[i].keys, e->host[i].n, k->keys, k->n) == k->n)
            return; /* held already */
    for (uint32_t i = e->n_host; i-- > 0;)
        if (lcp_keys(e->host[i].keys, e->host[i].n, k->keys, k->n) ==
            e->host[i].n)
            host_drop(e, i); /* it holds it all */
    while (e->n_host > 0 && (e->host_blocks + k->n > e->host_cap_blocks ||
                             e->n_host == e->cap_host)) {
        host_drop(e, 0); /* the oldest */
        e->c.host_drops++;
    }
    struct kept *h = &e->host[e->n_host++];
    memcpy(h->keys, k->keys, (size_t)k->n * sizeof *k->keys);
    h->n = k->n;
    h->stamp = ++e->clock;
    e->host_blocks += k->n;
    e->c.host_saves++;
}

/* Give s a slot (one is idle: running.n < max_batch) and return the
 * blocks of its prompt the slot then holds (see "Slots" above). */
static uint32_t
slot_admit(struct sim_engine *e, struct sim_seq *s)
{
    uint32_t nk = s->n_keys;
    double total = (double)(nk ? nk : 1);
    uint32_t pick = UINT32_MAX, lcp = 0;
    double best = 0;
    for (uint32_t i = 0; e->slot_reuse && i < e->cls->max_batch; i++) {
        const struct kept *k = &e->slot[i];
        if (k->busy || k->n == 0)
            continue;
        uint32_t l = lcp_keys(k->keys, k->n, s->keys, nk);
        double sim = (double)l / total;
        if (sim > best && sim > e->cls->slot_similarity) {
            pick = i;
            best = sim;
            lcp = l;
        }
    }
    int save;
    if (pick != UINT32_MAX) {
        save = (double)lcp / (double)e->slot[pick].n < 0.5;
    } else {
        for (uint32_t i = 0; i < e->cls->max_batch; i++)
            if (!e->slot[i].busy &&
                (pick == UINT32_MAX || e->slot[i].stamp < e->slot[pick].stamp))
                pick = i;
        save = 1;
        lcp = e->slot_reuse
                  ? lcp_keys(e->slot[pick].keys, e->slot[pick].n, s->keys, nk)
                  : 0;
    }
    struct kept *k = &e->slot[pick];
    int from_host = 0;
    if (save && e->cap_host > 0 && e->slot_reuse) {
        host_save(e, k);
        /* prompt_load(): an entry that keeps more of itself and covers
         * more of the new prompt than the slot does */
        double keep = k->n ? (double)lcp / (double)k->n : -1.0;
        double sim = (double)lcp / total;
        int32_t load = -1;
        for (uint32_t i = 0; i < e->n_host; i++) {
            const struct kept *h = &e->host[i];
            uint32_t l = lcp_keys(h->keys, h->n, s->keys, nk);
            double kc = (double)l / (double)h->n, sc = (double)l / total;
            if (kc >= 0.25 && keep < kc && sim < sc) {
                keep = kc;
                sim = sc;
                load = (int32_t)i;
                lcp = l;
            }
        }
        if (load >= 0) {
            memcpy(k->keys, e->host[load].keys,
                   (size_t)e->host[load].n * sizeof *k->keys);
            k->n = e->host[load].n;
            host_drop(e, (uint32_t)load);
            from_host = 1;
        }
    }
    uint32_t max_hit = (s->prompt + s->generated - 1) / e->bt;
    uint32_t hit = lcp < max_hit ? lcp : max_hit;
    if (hit > 0) {
        if (from_host)
            e->c.host_hits++;
        else
            e->c.slot_hits++;
    }
    k->busy = 1;
    s->slot = pick;
    return hit;
}

/* s leaves its slot: the slot keeps its prompt's first `blocks` blocks. */
static void
slot_leave(struct sim_engine *e, const struct sim_seq *s, uint32_t blocks)
{
    struct kept *k = &e->slot[s->slot];
    uint32_t n = blocks < s->n_keys ? blocks : s->n_keys;
    if (n > e->max_keys)
        n = e->max_keys;
    memcpy(k->keys, s->keys, (size_t)n * sizeof *k->keys);
    k->n = n;
    k->busy = 0;
    k->stamp = ++e->clock;
}

/* ---- Adapters (LoRA) -------------------------------------------------------------
 *
 * As vLLM's V1 scheduler with --max-loras K: K slots hold adapters on the
 * GPU. A running sequence's adapter is resident, and its slot busy. A
 * waiting sequence of an adapter that is not resident needs a slot: an
 * empty one, else the least recently used resident adapter that has no
 * running sequence is evicted. The step that admits it loads the adapter
 * and takes load_us longer (vLLM loads adapters in the model runner,
 * synchronously, before the forward pass). When every slot is busy the
 * sequence is passed over and those behind it may be admitted, as vLLM
 * skips it, so a batch holds at most K distinct adapters. vLLM bounds
 * nothing about how long a request may be passed over; here, once one
 * has been passed over in LORA_PATIENCE steps in a row, nothing behind
 * it is admitted until it is: running sequences drain and a slot frees.
 * Base-model sequences (adapter 0) need no slot. */

#define LORA_PATIENCE 64u

static struct lora *
lora_find(struct sim_engine *e, uint32_t id)
{
    for (uint32_t k = 0; k < e->max_loras; k++)
        if (e->lora[k].id == id)
            return &e->lora[k];
    return NULL;
}

/* The slot a sequence of adapter `id` would take: the adapter's own, else
 * an empty one, else the least recently used idle one; NULL when every
 * slot is busy. */
static struct lora *
lora_slot(struct sim_engine *e, uint32_t id)
{
    struct lora *empty = NULL, *lru = NULL;
    for (uint32_t k = 0; k < e->max_loras; k++) {
        struct lora *l = &e->lora[k];
        if (l->id == id)
            return l;
        if (l->id == 0) {
            if (empty == NULL)
                empty = l;
        } else if (l->running == 0 && (lru == NULL || l->stamp < lru->stamp)) {
            lru = l;
        }
    }
    return empty != NULL ? empty : lru;
}

/* s, being admitted, takes its adapter's slot (lora_slot found one):
 * loading the adapter adds load_us to the step. */
static void
lora_take(struct sim_engine *e, struct sim_seq *s, double *t)
{
    s->passed = 0;
    if (s->adapter == 0)
        return;
    struct lora *l = lora_slot(e, s->adapter);
    if (l->id != s->adapter) {
        if (l->id != 0)
            e->c.adapter_evictions++;
        l->id = s->adapter;
        l->running = 0;
        e->c.adapter_loads++;
        *t += (double)e->load_us;
    }
    l->running++;
    l->stamp = ++e->clock;
}

/* s stops running (finished or preempted): its adapter stays resident. */
static void
lora_leave(struct sim_engine *e, const struct sim_seq *s)
{
    if (s->adapter == 0)
        return;
    struct lora *l = lora_find(e, s->adapter);
    l->running--;
    l->stamp = ++e->clock;
}

void
sim_engine_set_lora(struct sim_engine *e, uint32_t max_loras, uint64_t load_us)
{
    e->max_loras = max_loras < SIM_MAX_LORAS ? max_loras : SIM_MAX_LORAS;
    e->load_us = load_us;
}

int
sim_engine_serves(const struct sim_engine *e, uint32_t adapter)
{
    return adapter == 0 || e->max_loras > 0;
}

static int
has_id(const uint32_t *ids, uint32_t n, uint32_t id)
{
    for (uint32_t k = 0; k < n; k++)
        if (ids[k] == id)
            return 1;
    return 0;
}

void
sim_engine_adapters(const struct sim_engine *e, uint32_t *ids, uint32_t cap,
                    struct sim_adapter_report *out)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < e->max_loras && n < cap; k++)
        if (e->lora[k].running > 0)
            ids[n++] = e->lora[k].id;
    out->max_loras = e->max_loras;
    out->n_running = n;
    for (const struct sim_seq *s = e->waiting.head; s != NULL && n < cap;
         s = s->next)
        if (s->adapter != 0 && !has_id(ids, n, s->adapter))
            ids[n++] = s->adapter;
    out->n_waiting = n - out->n_running;
}

uint32_t
sim_engine_resident(const struct sim_engine *e, uint32_t *ids, uint32_t cap)
{
    /* most recent first: a selection by stamp (max_loras is small) */
    uint32_t n = 0;
    uint64_t below = UINT64_MAX;
    for (;;) {
        const struct lora *best = NULL;
        for (uint32_t k = 0; k < e->max_loras; k++) {
            const struct lora *l = &e->lora[k];
            if (l->id != 0 && l->stamp < below &&
                (best == NULL || l->stamp > best->stamp))
                best = l;
        }
        if (best == NULL)
            return n;
        if (n < cap)
            ids[n] = best->id;
        n++;
        below = best->stamp;
    }
}

/* ---- CPU tier (vLLM's OffloadingConnector) ----------------------------------------
 *
 * Host memory holds cpu_cap blocks, least recently used first out, as the
 * connector's CPU backend with its LRU manager:
 *
 *   GPU  [k0 k1 k2 k3]            a step computes k2 k3 (keyed on the GPU)
 *          │ store: each computed prompt block the tier lacks is copied
 *          ▼ (vLLM: asynchronously, after the step that computed it)
 *   CPU  head ─ k9 ─ k0 ─ k1 ─ k2 ─ k3 ─ tail   (room: the head is dropped)
 *
 *   admission: the GPU's leading hit h, then the blocks h, h+1, ... the
 *   tier holds (c of them) are loaded into new GPU blocks: the step takes
 *   c x block x load_us_per_token longer (vLLM loads asynchronously and
 *   the request waits for it; here its step carries the transfer), and
 *   the loaded blocks are keyed on the GPU when that step ends.
 *
 * A sequence's blocks the tier holds already (its GPU hit's, its loaded
 * ones) are refreshed instead of copied, deepest first. The hit is capped
 * as on the GPU: at least the prompt's last token is computed. */

static uint32_t
tab_find(const struct slot *tab, uint64_t mask, uint64_t key)
{
    for (uint64_t i = key & mask;; i = (i + 1) & mask) {
        if (tab[i].id == 0)
            return NIL;
        if (tab[i].key == key)
            return tab[i].id - 1;
    }
}

static void
tab_insert(struct slot *tab, uint64_t mask, uint64_t key, uint32_t id)
{
    uint64_t i = key & mask;
    while (tab[i].id != 0)
        i = (i + 1) & mask;
    tab[i].key = key;
    tab[i].id = id + 1;
}

/* Backward-shift deletion, as t_delete. */
static void
tab_delete(struct slot *tab, uint64_t mask, uint64_t key)
{
    uint64_t i = key & mask;
    while (tab[i].key != key || tab[i].id == 0)
        i = (i + 1) & mask;
    for (uint64_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (tab[j].id == 0)
            break;
        uint64_t home = tab[j].key & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            tab[i] = tab[j];
            i = j;
        }
    }
    tab[i].id = 0;
    tab[i].key = 0;
}

static void
cpu_unlink(struct sim_engine *e, uint32_t id)
{
    struct cblk *b = &e->cpu[id];
    if (b->prev != NIL)
        e->cpu[b->prev].next = b->next;
    else
        e->cpu_head = b->next;
    if (b->next != NIL)
        e->cpu[b->next].prev = b->prev;
    else
        e->cpu_tail = b->prev;
    b->prev = b->next = NIL;
}

static void
cpu_link_tail(struct sim_engine *e, uint32_t id)
{
    struct cblk *b = &e->cpu[id];
    b->prev = e->cpu_tail;
    b->next = NIL;
    if (e->cpu_tail != NIL)
        e->cpu[e->cpu_tail].next = id;
    else
        e->cpu_head = id;
    e->cpu_tail = id;
}

/* The blocks of s from `from` on that the tier holds in a row, up to
 * `max` at most. */
static uint32_t
cpu_hits(const struct sim_engine *e, const struct sim_seq *s, uint32_t from,
         uint32_t max)
{
    if (e->cpu_cap == 0)
        return 0;
    uint32_t n = s->n_keys < max ? s->n_keys : max, d = from;
    while (d < n && tab_find(e->cpu_table, e->cpu_mask, s->keys[d]) != NIL)
        d++;
    return d > from ? d - from : 0;
}

/* Copy s's computed blocks [from, to) to the tier: one CPU BlockStored
 * per run of new blocks (sent before a drop for room could name one of
 * its own blocks). Then the range is refreshed deepest first, as vLLM's
 * LRU manager touches a request's blocks, so a prefix leaves the tier
 * from its deep end. */
static void
cpu_store_n(struct sim_engine *e, const struct sim_seq *s, uint32_t from,
            uint32_t to)
{
    uint32_t run_from = NIL;
    for (uint32_t d = from; d < to; d++) {
        uint64_t key = s->keys[d];
        uint32_t id = tab_find(e->cpu_table, e->cpu_mask, key);
        if (run_from != NIL && (id != NIL || d - run_from >= e->cpu_cap)) {
            if (e->sink.cpu_stored != NULL)
                e->sink.cpu_stored(e->sink.ctx, s->keys + run_from,
                                   d - run_from);
            run_from = NIL;
        }
        if (id != NIL)
            continue;
        if (e->cpu_n < e->cpu_cap) {
            id = e->cpu_n++;
        } else {
            id = e->cpu_head; /* the least recently used goes */
            cpu_unlink(e, id);
            tab_delete(e->cpu_table, e->cpu_mask, e->cpu[id].key);
            e->c.cpu_evicted_blocks++;
            if (e->sink.cpu_removed != NULL)
                e->sink.cpu_removed(e->sink.ctx, e->cpu[id].key);
        }
        e->cpu[id].key = key;
        tab_insert(e->cpu_table, e->cpu_mask, key, id);
        cpu_link_tail(e, id);
        e->c.cpu_stored_blocks++;
        if (run_from == NIL)
            run_from = d;
    }
    if (run_from != NIL && e->sink.cpu_stored != NULL)
        e->sink.cpu_stored(e->sink.ctx, s->keys + run_from, to - run_from);
    for (uint32_t d = to; d-- > from;) {
        uint32_t id = tab_find(e->cpu_table, e->cpu_mask, s->keys[d]);
        if (id != NIL && id != e->cpu_tail) {
            cpu_unlink(e, id);
            cpu_link_tail(e, id);
        }
    }
}

int
sim_engine_set_cpu_tier(struct sim_engine *e, uint32_t blocks,
                        double load_us_per_token)
{
    if (blocks == 0 || !e->caching) {
        e->cpu_cap = 0;
        return 0;
    }
    if (blocks >= NIL / 4)
        return -1;
    uint64_t slots = 16;
    while (slots < 2ull * blocks)
        slots *= 2;
    struct cblk *cpu = sim_calloc(blocks, sizeof *cpu);
    struct slot *tab = sim_calloc(slots, sizeof *tab);
    if (cpu == NULL || tab == NULL) {
        free(cpu);
        free(tab);
        return -1;
    }
    free(e->cpu);
    free(e->cpu_table);
    e->cpu = cpu;
    e->cpu_table = tab;
    e->cpu_mask = slots - 1;
    e->cpu_cap = blocks;
    e->cpu_n = 0;
    e->cpu_head = e->cpu_tail = NIL;
    e->cpu_us_per_token = load_us_per_token;
    return 0;
}

/* ---- create ------------------------------------------------------------------- */

struct sim_engine *
sim_engine_create(const struct sim_instance *inst, uint32_t bt)
{
    if (bt == 0 || inst->cls->kv_tokens / bt == 0 ||
        inst->cls->kv_tokens / bt >= NIL / 4) /* the ring: 2^31 at most */
        return NULL;
    struct sim_engine *e = sim_calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->cls = inst->cls;
    e->slots_mode = inst->cls->cache_kind == SIM_CACHE_SLOTS;
    e->caching = inst->prefix_caching && !e->slots_mode;
    e->slot_reuse = inst->prefix_caching && e->slots_mode;
    e->bt = bt;
    e->cap = (uint32_t)(inst->cls->kv_tokens / bt);
    e->watermark = e->cap / 100; /* vLLM's 1% admission watermark */
    uint64_t slots = 16;
    while (slots < 2ull * e->cap)
        slots *= 2;
    e->mask_max = slots - 1;
    e->mask = (slots < TABLE_MIN ? slots : TABLE_MIN) - 1;
    uint64_t ring = 16;
    while (ring < 2ull * e->cap)
        ring *= 2;
    e->fq_mask = ring - 1;
    /* the blocks, the table and the ring in one piece, written only as
     * they are used ("Memory") */
    size_t at_table = ((size_t)e->cap * sizeof *e->blk + 63) / 64 * 64;
    size_t at_fq = at_table + (size_t)slots * sizeof *e->table;
    e->arena_bytes = at_fq + (size_t)ring * sizeof *e->fq;
    e->arena = sim_arena_get(e->arena_bytes);
    e->sched = sim_calloc(inst->cls->max_batch, sizeof *e->sched);
    if (e->arena != NULL) {
        e->blk = (struct blk *)(void *)e->arena;
        e->table = (struct slot *)(void *)(e->arena + at_table);
        e->fq = (uint32_t *)(void *)(e->arena + at_fq);
        memset(e->table, 0, (e->mask + 1) * sizeof *e->table);
    }
    if (e->arena == NULL || e->sched == NULL ||
        (e->slots_mode && slots_create(e) != 0)) {
        sim_engine_destroy(e);
        return NULL;
    }
    /* every block free, in id order, as fresh blocks; positions start
     * mid-range so that pushes at the front never wrap below zero */
    e->fq_base = e->fq_head = 1ull << 62;
    e->fq_tail = e->fq_base + e->cap;
    e->fresh = 0;
    e->n_free = e->cap;
    return e;
}

void
sim_engine_destroy(struct sim_engine *e)
{
    if (e == NULL)
        return;
    sim_arena_put(e->arena, e->arena_bytes);
    free(e->sched);
    free(e->slot);
    free(e->host);
    free(e->pool);
    free(e->cpu);
    free(e->cpu_table);
    free(e);
}

static uint32_t
blocks_for(const struct sim_engine *e, uint64_t tokens)
{
    return (uint32_t)((tokens + e->bt - 1) / e->bt);
}

int
sim_engine_fits(const struct sim_engine *e, uint32_t prompt, uint32_t output)
{
    uint64_t total = (uint64_t)prompt + output;
    return total <= e->cls->max_model_len &&
           blocks_for(e, total) + e->watermark <= e->cap;
}

/* Leading blocks of s found in the table, at most max; their ids go to
 * ids[] when it is not NULL. */
static uint32_t
leading_hits(const struct sim_engine *e, const struct sim_seq *s, uint32_t max,
             uint32_t *ids)
{
    if (!e->caching)
        return 0;
    uint32_t n = s->n_keys < max ? s->n_keys : max;
    uint32_t d = 0;
    for (; d < n; d++) {
        uint32_t id = t_find(e, s->keys[d]);
        if (id == NIL)
            break;
        if (ids != NULL)
            ids[d] = id;
    }
    return d;
}

static uint32_t
target_of(const struct sim_seq *s)
{
    /* after a preemption the output so far is recomputed with the prompt */
    return s->prompt + s->generated;
}

void
sim_engine_enqueue(struct sim_engine *e, struct sim_seq *s, int front)
{
    uint32_t target = target_of(s);
    uint32_t max = (target - 1) / e->bt;
    uint32_t h = leading_hits(e, s, max, NULL);
    uint32_t est = (h + cpu_hits(e, s, h, max)) * e->bt;
    s->pending = target - est;
    e->pending += s->pending;
    s->state = SEQ_WAITING;
    s->decoding = 0;
    s->computed = 0;
    s->n_blocks = 0;
    s->loading = 0;
    q_push(&e->waiting, s, front);
}

int
sim_engine_remove_waiting(struct sim_engine *e, struct sim_seq *s)
{
    if (s->state != SEQ_WAITING)
        return -1;
    q_remove(&e->waiting, s);
    e->pending -= s->pending;
    s->pending = 0;
    s->state = SEQ_IDLE;
    return 0;
}

/* ---- scheduling --------------------------------------------------------------- */

static void
preempt(struct sim_engine *e, struct sim_seq *s)
{
    if (!s->decoding)
        e->c.abandoned_tokens += s->target - s->computed;
    e->pending -= s->pending;
    s->pending = 0;
    if (e->slots_mode)
        slot_leave(e, s, s->computed / e->bt);
    lora_leave(e, s);
    seq_release_blocks(e, s);
    q_remove(&e->running, s);
    s->preemptions++;
    e->c.preemptions++;
    sim_engine_enqueue(e, s, 1);
}

/* Blocks so that s holds `tokens` tokens of KV; preempts from the tail of
 * the running queue while memory is short. 0, or -1 if s itself was
 * preempted. */
static int
grow_to(struct sim_engine *e, struct sim_seq *s, uint32_t tokens)
{
    if (tokens <= (uint64_t)s->n_blocks * e->bt)
        return 0; /* it holds them: most decode steps */
    uint32_t need = blocks_for(e, tokens);
    while (need > s->n_blocks + e->n_free) {
        struct sim_seq *victim = e->running.tail;
        preempt(e, victim);
        if (victim == s)
            return -1;
    }
    if (s->n_blocks < need) {
        blk_alloc_n(e, s->blocks + s->n_blocks, need - s->n_blocks);
        s->n_blocks = need;
    }
    return 0;
}

static double
chunk_cost(const struct sim_class *c, uint32_t ctx0, uint32_t n)
{
    double mid = (double)ctx0 + (double)n / 2.0;
    return (double)n * c->prefill_us * (1.0 + mid / c->ctx_double);
}

static void
schedule(struct sim_engine *e, struct sim_seq *s, uint32_t n, double *t)
{
    s->sched = n;
    e->sched[e->n_sched++] = s;
    if (s->decoding)
        *t +=
            e->cls->decode_seq_us + (double)s->computed * e->cls->decode_ctx_us;
    else
        *t += chunk_cost(e->cls, s->computed, n);
}

/* Admit waiting sequence s (the first the scheduler may take: the head
 * unless adapters were passed over) with up to `budget` prefill tokens.
 * 0, or -1 if memory (with the watermark) does not allow it now. */
static int
admit(struct sim_engine *e, struct sim_seq *s, uint32_t budget, double *t)
{
    if (s == e->stuck && e->n_free <= e->stuck_free)
        return -1; /* nothing freed since it did not fit */
    e->stuck = NULL;
    uint32_t target = target_of(s);
    uint32_t h, c = 0, hit, n, need;
    if (e->slots_mode) {
        /* the hit is known once a slot is taken, and a slot's KV is the
         * sequence's own blocks: memory is checked for the whole target,
         * more than any chunk of it needs */
        if ((uint64_t)blocks_for(e, target) + e->watermark > e->n_free) {
            e->stuck = s;
            e->stuck_free = e->n_free;
            return -1;
        }
        q_remove(&e->waiting, s);
        hit = slot_admit(e, s) * e->bt;
        n = target - hit < budget ? target - hit : budget;
        need = blocks_for(e, (uint64_t)hit + n);
        s->n_blocks = 0;
    } else {
        /* the hit blocks' ids land in s->blocks, empty while waiting;
         * the CPU tier's continue them ("CPU tier") */
        uint32_t max = (target - 1) / e->bt;
        h = leading_hits(e, s, max, s->blocks);
        c = cpu_hits(e, s, h, max);
        hit = (h + c) * e->bt;
        n = target - hit < budget ? target - hit : budget;
        need = blocks_for(e, (uint64_t)hit + n) - h;
        uint32_t revived = 0; /* hit blocks now in the free queue */
        for (uint32_t d = 0; d < h; d++)
            revived += e->blk[s->blocks[d]].ref == 0;
        if ((uint64_t)need + e->watermark + revived > e->n_free) {
            e->stuck = s;
            e->stuck_free = e->n_free;
            return -1;
        }
        q_remove(&e->waiting, s);
        for (uint32_t d = 0; d < h; d++)
            blk_pin(e, s->blocks[d]);
        s->n_blocks = h;
    }
    blk_alloc_n(e, s->blocks + s->n_blocks, need);
    s->n_blocks += need;
    e->pending -= s->pending;
    s->pending = target - hit;
    e->pending += s->pending;
    s->target = target;
    s->hit = hit;
    s->computed = hit;
    s->loading = c;
    s->offloaded = 0;
    if (c > 0) {
        /* the transfer from host memory, in this step */
        double us = (double)c * e->bt * e->cpu_us_per_token;
        *t += us;
        e->c.cpu_hits++;
        e->c.cpu_hit_tokens += (uint64_t)c * e->bt;
        e->c.cpu_load_us += (uint64_t)(us + 0.5);
    }
    if (s->admissions++ == 0)
        s->first_hit = hit;
    s->state = SEQ_RUNNING;
    q_push(&e->running, s, 0);
    lora_take(e, s, t);
    e->c.admissions++;
    e->c.query_tokens += target;
    e->c.hit_tokens += hit;
    schedule(e, s, n, t);
    return 0;
}

uint64_t
sim_engine_start_step(struct sim_engine *e)
{
    if (e->busy || (e->running.n == 0 && e->waiting.n == 0))
        return 0;
    uint32_t budget = e->cls->token_budget;
    double t = e->cls->overhead_us;
    int preempted = 0;
    /* the last step's sequences are (mostly) this one's running ones:
     * fetch them at once rather than one by one down the list */
    for (uint32_t i = 0; i < e->n_last; i++)
        __builtin_prefetch(e->sched[i]);
    e->n_sched = 0;
    /* running sequences first, in admission order */
    for (struct sim_seq *s = e->running.head; s != NULL && budget > 0;
         s = s->next) {
        uint32_t n = s->decoding ? 1 : s->target - s->computed;
        if (n > budget)
            n = budget;
        uint64_t before = e->c.preemptions;
        int self = grow_to(e, s, s->computed + n);
        preempted |= e->c.preemptions != before;
        if (self != 0)
            break; /* s was the tail: nothing follows it */
        schedule(e, s, n, &t);
        budget -= n;
    }
    /* then new admissions in queue order, unless memory was short this
     * step; a sequence whose adapter finds no slot is passed over
     * ("Adapters") */
    struct sim_seq *w = e->waiting.head;
    while (!preempted && budget > 0 && w != NULL &&
           e->running.n + e->recv.n < e->cls->max_batch) {
        struct sim_seq *next = w->next;
        if (w->adapter != 0 && lora_slot(e, w->adapter) == NULL) {
            if (++w->passed >= LORA_PATIENCE)
                break; /* nothing passes it any longer */
            w = next;
            continue;
        }
        uint32_t before = e->n_sched;
        if (admit(e, w, budget, &t) != 0)
            break;
        budget -= e->sched[before]->sched;
        w = next;
    }
    if (e->n_sched == 0)
        return 0; /* waiting for memory that only a finishing step frees */
    e->busy = 1;
    e->c.steps++;
    uint64_t us = (uint64_t)(t + 0.5);
    if (us == 0)
        us = 1;
    e->c.busy_us += us;
    return us;
}

static void
finish(struct sim_engine *e, struct sim_seq *s)
{
    q_remove(&e->running, s);
    if (e->slots_mode)
        slot_leave(e, s, s->n_keys);
    lora_leave(e, s);
    seq_release_blocks(e, s);
    s->state = SEQ_IDLE;
    e->c.completed++;
}

size_t
sim_engine_finish_step(struct sim_engine *e, struct sim_emit *out)
{
    size_t n_out = 0;
    for (uint32_t i = 0; i < e->n_sched; i++)
        __builtin_prefetch(e->sched[i], 1);
    for (uint32_t i = 0; i < e->n_sched; i++) {
        struct sim_seq *s = e->sched[i];
        uint32_t n = s->sched;
        s->sched = 0;
        if (s->decoding) {
            s->computed++;
            s->generated++;
            e->c.decoded_tokens++;
            e->c.sampled_tokens++;
        } else {
            uint32_t old = s->computed;
            s->computed += n;
            s->pending -= n;
            e->pending -= n;
            e->c.prefilled_tokens += n;
            uint32_t last = s->computed / e->bt;
            if (last > s->n_keys)
                last = s->n_keys;
            /* blocks loaded from the CPU tier are GPU blocks again */
            blk_register_n(e, s, old / e->bt - s->loading, last);
            s->loading = 0;
            if (e->cpu_cap > 0 && last > s->offloaded) {
                cpu_store_n(e, s, s->offloaded, last);
                s->offloaded = last;
            }
            if (s->computed < s->target)
                continue;
            if (s->hold) {
                /* a prefill leg: its KV waits for the decode instance */
                q_remove(&e->running, s);
                lora_leave(e, s);
                s->state = SEQ_HELD;
                q_push(&e->held, s, 0);
                out[n_out++] = (struct sim_emit){ s, EMIT_PREFILLED };
                continue;
            }
            s->decoding = 1;
            s->generated++;
            e->c.sampled_tokens++;
            if (s->generated == 1)
                out[n_out++] = (struct sim_emit){ s, EMIT_FIRST_TOKEN };
        }
        if (s->generated == s->output) {
            finish(e, s);
            out[n_out++] = (struct sim_emit){ s, EMIT_COMPLETE };
        }
    }
    e->n_last = e->n_sched;
    e->n_sched = 0;
    e->busy = 0;
    return n_out;
}

/* ---- disaggregated prefill and decode (engine.h) -------------------------------- */

void
sim_engine_enqueue_remote(struct sim_engine *e, struct sim_seq *s)
{
    s->state = SEQ_KVWAIT;
    s->decoding = 0;
    s->computed = 0;
    s->n_blocks = 0;
    s->loading = 0;
    s->pending = 0;
    q_push(&e->kvwait, s, 0);
}

size_t
sim_engine_pull(struct sim_engine *e, struct sim_seq **out, size_t cap)
{
    size_t n_out = 0;
    while (n_out < cap && e->kvwait.head != NULL &&
           e->running.n + e->recv.n < e->cls->max_batch) {
        struct sim_seq *s = e->kvwait.head;
        uint32_t have = s->prompt - 1; /* the last one is computed here */
        uint32_t max = have / e->bt;
        uint32_t h = leading_hits(e, s, max, s->blocks);
        uint32_t need = blocks_for(e, have) - h;
        uint32_t revived = 0;
        for (uint32_t d = 0; d < h; d++)
            revived += e->blk[s->blocks[d]].ref == 0;
        if ((uint64_t)need + e->watermark + revived > e->n_free)
            break; /* waits for memory, in order */
        q_remove(&e->kvwait, s);
        for (uint32_t d = 0; d < h; d++)
            blk_pin(e, s->blocks[d]);
        s->n_blocks = h;
        blk_alloc_n(e, s->blocks + h, need);
        s->n_blocks += need;
        s->hit = h * e->bt;
        s->received = have - s->hit;
        s->target = s->prompt;
        if (s->admissions++ == 0)
            s->first_hit = s->hit;
        s->state = SEQ_RECEIVING;
        q_push(&e->recv, s, 0);
        e->c.pulls++;
        out[n_out++] = s;
    }
    return n_out;
}

void
sim_engine_kv_arrived(struct sim_engine *e, struct sim_seq *s)
{
    q_remove(&e->recv, s);
    uint32_t have = s->prompt - 1;
    uint32_t last = have / e->bt;
    if (last > s->n_keys)
        last = s->n_keys;
    s->computed = have;
    blk_register_n(e, s, s->hit / e->bt, last);
    s->pending = 1;
    e->pending += 1;
    s->state = SEQ_RUNNING;
    q_push(&e->running, s, 0);
    e->c.query_tokens += s->prompt;
    e->c.hit_tokens += s->hit;
    e->c.received_tokens += s->received;
}

void
sim_engine_release_held(struct sim_engine *e, struct sim_seq *s)
{
    q_remove(&e->held, s);
    seq_release_blocks(e, s);
    s->state = SEQ_IDLE;
    e->c.handed_off++;
}

/* ---- queries ------------------------------------------------------------------ */

void
sim_engine_state(const struct sim_engine *e, struct sim_engine_state *s)
{
    /* as vLLM counts them: a decode leg waiting for its KV waits */
    s->running = e->running.n;
    s->waiting = e->waiting.n + e->kvwait.n + e->recv.n;
    s->used_blocks = e->cap - e->n_free;
    s->capacity_blocks = e->cap;
    s->kv_use = (double)s->used_blocks / (double)e->cap;
    s->pending_prefill = e->pending;
    s->cached_blocks = e->n_hashed;
    s->cpu_blocks = e->cpu_n;
}

const struct sim_engine_counters *
sim_engine_counters(const struct sim_engine *e)
{
    return &e->c;
}

int
sim_engine_busy(const struct sim_engine *e)
{
    return e->busy;
}

uint32_t
sim_engine_max_batch(const struct sim_engine *e)
{
    return e->cls->max_batch;
}

static int
verify_queue(const struct queue *q, int state, uint64_t *pending,
             struct sim_err *err)
{
    uint32_t n = 0;
    const struct sim_seq *prev = NULL;
    for (const struct sim_seq *s = q->head; s != NULL; s = s->next) {
        if (s->prev != prev || s->state != state)
            return sim_errf(err, "queue links or state broken at req %u",
                            s->req);
        *pending += s->pending;
        prev = s;
        n++;
    }
    if (prev != q->tail || n != q->n)
        return sim_errf(err, "queue count %u, walked %u", q->n, n);
    return 0;
}

int
sim_engine_verify(const struct sim_engine *e, struct sim_err *err)
{
    uint64_t pending = 0;
    if (verify_queue(&e->waiting, SEQ_WAITING, &pending, err) != 0 ||
        verify_queue(&e->running, SEQ_RUNNING, &pending, err) != 0 ||
        verify_queue(&e->held, SEQ_HELD, &pending, err) != 0 ||
        verify_queue(&e->kvwait, SEQ_KVWAIT, &pending, err) != 0 ||
        verify_queue(&e->recv, SEQ_RECEIVING, &pending, err) != 0)
        return -1;
    if (pending != e->pending)
        return sim_errf(err, "pending prefill %llu, sequences hold %llu",
                        (unsigned long long)e->pending,
                        (unsigned long long)pending);
    if (e->running.n + e->recv.n > e->cls->max_batch)
        return sim_errf(err, "%u running + %u receiving > max batch %u",
                        e->running.n, e->recv.n, e->cls->max_batch);
    for (const struct sim_seq *s = e->kvwait.head; s; s = s->next)
        if (s->n_blocks != 0 || s->pending != 0)
            return sim_errf(err, "req %u waits for KV holding blocks", s->req);
    if (e->slots_mode) {
        uint32_t busy = 0;
        uint64_t held = 0;
        for (uint32_t i = 0; i < e->cls->max_batch; i++)
            busy += e->slot[i].busy;
        for (const struct sim_seq *s = e->running.head; s; s = s->next)
            if (s->slot >= e->cls->max_batch || !e->slot[s->slot].busy)
                return sim_errf(err, "req %u runs without its slot", s->req);
        for (uint32_t i = 0; i < e->n_host; i++)
            held += e->host[i].n;
        if (busy != e->running.n)
            return sim_errf(err, "%u slots busy, %u running", busy,
                            e->running.n);
        if (held != e->host_blocks || e->host_blocks > e->host_cap_blocks ||
            e->n_host > e->cap_host)
            return sim_errf(err, "host cache holds %llu blocks, counted %llu",
                            (unsigned long long)held,
                            (unsigned long long)e->host_blocks);
    }
    /* adapters: each slot's running count is its running sequences' */
    for (uint32_t k = 0; k < e->max_loras; k++) {
        const struct lora *l = &e->lora[k];
        uint32_t n = 0;
        for (const struct sim_seq *s = e->running.head; s; s = s->next)
            n += l->id != 0 && s->adapter == l->id;
        if (n != l->running || (l->id == 0 && l->running != 0))
            return sim_errf(err, "adapter slot %u holds %u with %u running, "
                                 "counted %u",
                            k, l->id, l->running, n);
        for (uint32_t j = 0; j < k; j++)
            if (l->id != 0 && e->lora[j].id == l->id)
                return sim_errf(err, "adapter %u in two slots", l->id);
    }
    for (const struct sim_seq *s = e->running.head; s; s = s->next) {
        uint32_t k = 0;
        while (k < e->max_loras && e->lora[k].id != s->adapter)
            k++;
        if (s->adapter != 0 && k == e->max_loras)
            return sim_errf(err, "req %u runs without its adapter %u", s->req,
                            s->adapter);
    }
    /* references: exactly the running sequences' block lists */
    uint32_t *refs = sim_calloc(e->cap, sizeof *refs);
    if (refs == NULL)
        return sim_errf(err, "out of memory");
    int rc = 0;
    for (const struct sim_seq *s = e->running.head; s && rc == 0; s = s->next) {
        if (s->n_blocks != blocks_for(e, (uint64_t)s->computed + s->sched))
            rc = sim_errf(err, "req %u holds %u blocks for %u tokens", s->req,
                          s->n_blocks, s->computed);
        for (uint32_t i = 0; i < s->n_blocks && rc == 0; i++)
            if (s->blocks[i] >= e->cap)
                rc = sim_errf(err, "req %u holds bad block %u", s->req,
                              s->blocks[i]);
            else
                refs[s->blocks[i]]++;
    }
    /* ... and those of prefill legs held and decode legs receiving */
    const struct queue *others[2] = { &e->held, &e->recv };
    for (int k = 0; k < 2 && rc == 0; k++)
        for (const struct sim_seq *s = others[k]->head; s && rc == 0;
             s = s->next) {
            uint32_t tok = k == 0 ? s->computed : s->prompt - 1;
            if (s->n_blocks != blocks_for(e, tok) || s->pending != 0 ||
                (k == 0 && s->computed != s->target))
                rc = sim_errf(err, "req %u %s holds %u blocks for %u tokens",
                              s->req, k == 0 ? "held" : "receiving",
                              s->n_blocks, tok);
            for (uint32_t i = 0; i < s->n_blocks && rc == 0; i++)
                if (s->blocks[i] >= e->cap)
                    rc = sim_errf(err, "req %u holds bad block %u", s->req,
                                  s->blocks[i]);
                else
                    refs[s->blocks[i]]++;
        }
    /* fresh blocks are free and unkeyed; their entries are not written */
    uint32_t free_n = e->cap - e->fresh, hashed = 0;
    for (uint32_t i = e->fresh; i < e->cap && rc == 0; i++)
        if (refs[i] != 0)
            rc = sim_errf(err, "fresh block %u held by a sequence", i);
    for (uint32_t i = 0; i < e->fresh && rc == 0; i++) {
        const struct blk *b = &e->blk[i];
        if (b->ref != refs[i])
            rc = sim_errf(err, "block %u ref %u, sequences hold %u", i, b->ref,
                          refs[i]);
        free_n += b->ref == 0;
        if (b->hashed) {
            hashed++;
            if (!e->caching)
                rc = sim_errf(err, "block %u cached with caching off", i);
            else if (t_find(e, b->key) != i)
                rc = sim_errf(err, "block %u not found by its key", i);
        }
    }
    free(refs);
    if (rc != 0)
        return rc;
    if (free_n != e->n_free || hashed != e->n_hashed)
        return sim_errf(err, "free %u/%u hashed %u/%u", free_n, e->n_free,
                        hashed, e->n_hashed);
    uint32_t live = 0;
    for (uint64_t pos = e->fq_head; pos != e->fq_tail; pos++)
        live += fq_live(e, pos);
    if (live != e->n_free || e->fq_tail - e->fq_head > e->fq_mask + 1)
        return sim_errf(err, "free queue holds %u live entries, expected %u",
                        live, e->n_free);
    if (e->fresh > e->cap ||
        (e->fresh < e->cap && e->fq_head > e->fq_base + e->fresh))
        return sim_errf(err, "fresh blocks from %u of %u, queue head past "
                             "them",
                        e->fresh, e->cap);
    for (uint32_t i = 0; i < e->cap; i++) {
        const struct blk *b = &e->blk[i];
        int fresh = i >= e->fresh;
        /* its queue position: a fresh one's, or from the low 32 bits kept */
        uint64_t pos = fresh ? e->fq_base + i
                             : e->fq_head + (uint32_t)(b->qpos -
                                                       (uint32_t)e->fq_head);
        if ((fresh || b->ref == 0) &&
            (pos < e->fq_head || pos >= e->fq_tail || fq_id(e, pos) != i))
            return sim_errf(err, "free block %u has no queue entry", i);
    }
    /* the CPU tier: a list of cpu_n blocks, each found by its key */
    if (e->cpu_cap > 0) {
        uint32_t listed = 0, prev = NIL, keyed = 0;
        for (uint32_t id = e->cpu_head; id != NIL && listed <= e->cpu_n;
             id = e->cpu[id].next) {
            if (id >= e->cpu_n || e->cpu[id].prev != prev ||
                tab_find(e->cpu_table, e->cpu_mask, e->cpu[id].key) != id)
                return sim_errf(err, "CPU tier block %u unlinked or lost", id);
            prev = id;
            listed++;
        }
        for (uint64_t i = 0; i <= e->cpu_mask; i++)
            keyed += e->cpu_table[i].id != 0;
        if (listed != e->cpu_n || prev != e->cpu_tail || keyed != e->cpu_n ||
            e->cpu_n > e->cpu_cap)
            return sim_errf(err, "CPU tier lists %u blocks, keys %u, holds %u "
                                 "of %u",
                            listed, keyed, e->cpu_n, e->cpu_cap);
    }
    uint32_t in_table = 0;
    for (uint64_t i = 0; i <= e->mask; i++)
        if (e->table[i].id != 0) {
            in_table++;
            if (!e->blk[e->table[i].id - 1].hashed ||
                e->blk[e->table[i].id - 1].key != e->table[i].key)
                return sim_errf(err, "table slot for an unkeyed block");
        }
    if (in_table != e->n_hashed || e->n_hashed > e->cap ||
        2ull * e->n_hashed > e->mask + 1 || e->mask > e->mask_max)
        return sim_errf(err, "table holds %u keys, %u blocks keyed", in_table,
                        e->n_hashed);
    return 0;
}
