/* Precise mode: engine KV-cache events applied to one small index.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header  B {4,16}; capacity 16..512; engine-map capacity choice;
 *           TTL choice; seed 0..255; allocation failure: mode (none,
 *           none, once, from then on) and which allocation 1..1024
 *   op 0-3  lr_index_kv_stored: instance, n_blocks 0..8, engine block size
 *           (multiples of B and invalid ones), has_parent (0, 1, invalid),
 *           parent and block hashes from a pool of 64, tokens from a
 *           pattern (prefixes collide), salt, an optional flaw (wrong
 *           n_tokens, short struct_size, NULL arrays) or a lower tier
 *           (flaw 12-13: a CPU store of hashes alone, as vLLM's
 *           offloading connector sends; 14: a CPU store with tokens; 15:
 *           a disk store of hashes alone)
 *   op 4    lr_index_kv_removed: instance, 0..8 pool hashes, NULL variants;
 *           variants 6 and 7 name the CPU and disk tiers
 *           (lr_index_kv_removed_tier)
 *   op 5    lr_index_kv_cleared
 *   op 6    time moves forward (0, 1 tick, 16 ticks, past the TTL)
 *   op 7    lr_index_expire
 *   op 8    lr_index_match of a pattern prompt, checked against
 *           lr__index_depth_of for every instance id (and, with
 *           LR_MATCH_NO_TOUCH, against lr__index_peek)
 *   op 9    lr_index_remove_instance
 *   op 10   lr_index_get_stats and lr_index_instance_blocks
 * Instance ids come from a table of six: five valid ones against
 * max_instances 4 (LR_ELIMIT) and LR_INSTANCE_NONE.
 *
 * After every call: lr__index_verify() == LR_OK; a failed call leaves the
 * digest unchanged; the status is a documented one. A stored event with
 * no parent leaves the instance holding its whole chain. The same input
 * replayed on fresh indexes (same seed, then another seed) ends in the
 * same digest and the same transcript of results (B24). */
#include <stdlib.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index/index.h"
#include "index_util.h"

#define MAX_OPS 200
#define MAX_EBLOCKS 8
#define POOL 64

static const uint32_t ids[6] = { 0, 1, 2, 3, 1000, LR_INSTANCE_NONE };
#define N_VALID_IDS 5

static uint64_t
pool_hash(uint32_t i)
{
    if (i == POOL - 1)
        return 0;
    if (i == POOL - 2)
        return UINT64_MAX;
    return 0x1000 + i;
}

static void
op_stored(struct fuzz_index_run *r, fuzz_dp *dp, lr_index *ix, uint32_t B,
          uint64_t capacity, uint64_t now)
{
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 5)];
    uint32_t nb = fuzz_dp_next_range(dp, 0, MAX_EBLOCKS);
    uint32_t bss[8] = { B, B, 2 * B, 3 * B, 4 * B, 0, B / 2, B + 1 };
    uint32_t bs = bss[fuzz_dp_next_range(dp, 0, 7)];
    static const int32_t hp[4] = { 0, 1, 1, 2 };
    int32_t has_parent = hp[fuzz_dp_next_range(dp, 0, 3)];
    uint64_t parent = pool_hash(fuzz_dp_next_range(dp, 0, POOL - 1));
    uint64_t hashes[MAX_EBLOCKS];
    for (uint32_t i = 0; i < nb; i++)
        hashes[i] = pool_hash(fuzz_dp_next_range(dp, 0, POOL - 1));
    uint32_t pattern = fuzz_dp_next_range(dp, 0, FUZZ_N_PATTERNS - 1);
    uint32_t start = fuzz_dp_next_range(dp, 0, 63);
    uint32_t tweak = fuzz_dp_next_range(dp, 0, 255);
    uint64_t salt = fuzz_dp_next_range(dp, 0, 1);
    uint32_t flaw = fuzz_dp_next_range(dp, 0, 15);
    /* multimodal hashes: none (0, 1), drawn (2: 0..3 a block), all zero */
    uint32_t mmv = fuzz_dp_next_range(dp, 0, 3);
    uint64_t mmh[MAX_EBLOCKS] = { 0 };
    bool any_mm = false;
    for (uint32_t i = 0; mmv == 2 && i < nb; i++) {
        mmh[i] = fuzz_dp_next_range(dp, 0, 3);
        any_mm |= mmh[i] != 0;
    }

    size_t n_tokens = (size_t)nb * bs;
    uint32_t *tok = malloc((n_tokens + 1) * sizeof *tok);
    FUZZ_ASSERT(tok != NULL);
    fuzz_pattern_fill(tok, n_tokens, pattern, start * B, tweak);

    lr_kv_stored ev;
    if (flaw & 1) {
        lr_kv_stored_init(&ev);
    } else {
        lr_kv_stored e0 = LR_KV_STORED_INIT;
        ev = e0;
    }
    ev.block_hashes = hashes;
    ev.n_blocks = nb;
    ev.parent_hash = parent;
    ev.has_parent = has_parent;
    ev.block_size = bs;
    ev.token_ids = tok;
    ev.n_tokens = n_tokens;
    ev.tenant_salt = salt;
    ev.mm_hashes = mmv >= 2 ? mmh : NULL;
    switch (flaw) {
    case 0:
        ev.n_tokens++;
        break;
    case 1:
        ev.struct_size = LR_KV_STORED_SIZE_V1 - 1;
        break;
    case 2:
        ev.block_hashes = NULL;
        break;
    case 3:
        ev.token_ids = NULL;
        break;
    case 12:
    case 13:
    case 15:
        ev.tier = flaw == 15 ? LR_TIER_DISK : LR_TIER_CPU;
        ev.token_ids = NULL;
        ev.n_tokens = 0;
        break;
    case 14:
        ev.tier = LR_TIER_CPU;
        break;
    default:
        break;
    }
    fuzz_trace("kv_stored(inst=%u, n_blocks=%u, block_size=%u, "
               "has_parent=%d, parent=%#llx, pattern=%u, start=%u, "
               "tweak=%u, salt=%llu, flaw=%u, mm=%u, now=%llu)",
               inst, nb, bs, has_parent, (unsigned long long)parent, pattern,
               start * B, tweak, (unsigned long long)salt, flaw, mmv,
               (unsigned long long)now);
    for (uint32_t i = 0; i < nb; i++)
        fuzz_trace("  hash[%u] = %#llx", i, (unsigned long long)hashes[i]);

    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st = lr_index_kv_stored(ix, inst, &ev, now);
    fuzz_trace("  = %s", lr_status_name(st));
    /* multimodal hashes need engine blocks of one index block (a lower
     * tier's store without tokens reads none) */
    if (r->check && st == LR_OK && any_mm && flaw != 1 && ev.n_tokens > 0)
        FUZZ_ASSERT(bs == B);
    if (r->check)
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_EINVAL ||
                                   st == LR_ENOTSUP || st == LR_ENOENT ||
                                   st == LR_ELIMIT || st == LR_ENOMEM ||
                                   /* short struct_size (B13) */
                                   (st == LR_EVERSION && flaw == 1));
    /* a lower tier's store without tokens whose hashes lie on several
     * chains keeps the chains it applied before an LR_ENOMEM or LR_ELIMIT
     * (lr_index.h): the index is still checked, its digest may move */
    bool partial = ev.tier != LR_TIER_GPU && ev.n_tokens == 0 &&
                   (st == LR_ENOMEM || st == LR_ELIMIT);
    fuzz_index_after(r, ix, st, d0, st != LR_OK && !partial);

    /* Without a parent the chain starts at the tenant root, so the index
     * keys are the prompt keys of the tokens: the instance holds them all
     * (up to capacity), however full the index was. */
    if (r->check && st == LR_OK && has_parent == 0 && nb > 0 && flaw > 3 &&
        flaw < 12 && !any_mm) {
        uint32_t m = bs / B;
        uint64_t eb = nb;
        if ((uint64_t)nb * m > capacity)
            eb = capacity / m;
        uint32_t n = (uint32_t)(eb * m);
        uint64_t *keys = malloc(((size_t)nb * m + 1) * sizeof *keys);
        FUZZ_ASSERT(keys != NULL);
        size_t nk = fuzz_keys(B, tok, n_tokens, salt, keys, (size_t)nb * m);
        FUZZ_ASSERT(nk == (size_t)nb * m);
        FUZZ_ASSERT(lr__index_depth_of(ix, inst, keys, n) == n);
        free(keys);
    }
    free(tok);
}

static void
op_removed(struct fuzz_index_run *r, fuzz_dp *dp, lr_index *ix)
{
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 5)];
    uint32_t nb = fuzz_dp_next_range(dp, 0, MAX_EBLOCKS);
    uint64_t hashes[MAX_EBLOCKS];
    for (uint32_t i = 0; i < nb; i++)
        hashes[i] = pool_hash(fuzz_dp_next_range(dp, 0, POOL - 1));
    uint32_t v = fuzz_dp_next_range(dp, 0, 7);
    const uint64_t *hp = v == 0 ? NULL : hashes;
    size_t resolved = 999;
    fuzz_trace("kv_removed(inst=%u, n=%u%s)", inst, nb,
               hp ? "" : ", hashes=NULL");
    for (uint32_t i = 0; i < nb; i++)
        fuzz_trace("  hash[%u] = %#llx", i, (unsigned long long)hashes[i]);
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st =
        v >= 6 ? lr_index_kv_removed_tier(ix, inst,
                                          v == 6 ? LR_TIER_CPU : LR_TIER_DISK,
                                          hp, nb, &resolved)
               : lr_index_kv_removed(ix, inst, hp, nb,
                                     v == 1 ? NULL : &resolved);
    fuzz_trace("  = %s (resolved %zu)", lr_status_name(st), resolved);
    if (r->check) {
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EINVAL || st == LR_ENOENT);
        if (st == LR_OK && v != 1)
            FUZZ_ASSERT(resolved <= nb);
    }
    if (st == LR_OK && v != 1)
        fuzz_note(&r->transcript, resolved);
    fuzz_index_after(r, ix, st, d0, st != LR_OK);
}

static void
op_cleared(struct fuzz_index_run *r, fuzz_dp *dp, lr_index *ix)
{
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 5)];
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st = lr_index_kv_cleared(ix, inst);
    fuzz_trace("kv_cleared(inst=%u) = %s", inst, lr_status_name(st));
    if (r->check) {
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EINVAL || st == LR_ENOENT);
        if (st == LR_OK) {
            /* an instance known on a lower tier alone is cleared there */
            uint64_t blocks = 0;
            lr_status b = lr_index_instance_blocks(ix, inst, &blocks);
            FUZZ_ASSERT(b == LR_OK || b == LR_ENOENT);
            FUZZ_ASSERT(blocks == 0);
        }
    }
    fuzz_index_after(r, ix, st, d0, st != LR_OK);
}

static void
op_remove_instance(struct fuzz_index_run *r, fuzz_dp *dp, lr_index *ix)
{
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 5)];
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st = lr_index_remove_instance(ix, inst);
    fuzz_trace("remove_instance(inst=%u) = %s", inst, lr_status_name(st));
    if (r->check) {
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EINVAL || st == LR_ENOENT);
        uint64_t blocks;
        if (st == LR_OK)
            FUZZ_ASSERT(lr_index_instance_blocks(ix, inst, &blocks) ==
                        LR_ENOENT);
    }
    fuzz_index_after(r, ix, st, d0, st != LR_OK);
}

static void
op_match(struct fuzz_index_run *r, fuzz_dp *dp, lr_index *ix, uint32_t B,
         uint64_t now)
{
    uint32_t pattern = fuzz_dp_next_range(dp, 0, FUZZ_N_PATTERNS - 1);
    uint32_t start = fuzz_dp_next_range(dp, 0, 63);
    uint32_t len = fuzz_dp_next_range(dp, 0, 4 * MAX_EBLOCKS * 16);
    uint32_t tweak = fuzz_dp_next_range(dp, 0, 255);
    uint64_t salt = fuzz_dp_next_range(dp, 0, 1);
    uint32_t flags = fuzz_dp_next_range(dp, 0, 1) ? LR_MATCH_NO_TOUCH : 0;
    uint32_t cap = fuzz_dp_next_range(dp, 0, 5);
    uint32_t *tok = malloc((len + 1) * sizeof *tok);
    uint64_t *keys = malloc((len / B + 1) * sizeof *keys);
    FUZZ_ASSERT(tok != NULL && keys != NULL);
    fuzz_pattern_fill(tok, len, pattern, start * B, tweak);
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = tok;
    p.n_tokens = len;
    p.tenant_salt = salt;
    lr_index_hit hits[8], before[8];
    memset(hits, 0x5a, sizeof hits);
    memcpy(before, hits, sizeof hits);
    lr_index_match_result res = LR_INDEX_MATCH_RESULT_INIT;
    res.hits = cap ? hits : NULL;
    res.hits_capacity = cap;
    uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
    lr_status st = lr_index_match(ix, &p, now, flags, &res);
    fuzz_trace("match(pattern=%u, start=%u, len=%u, tweak=%u, salt=%llu, "
               "flags=%u, cap=%u, now=%llu) = %s, n_hits=%zu deepest=%llu",
               pattern, start * B, len, tweak, (unsigned long long)salt, flags,
               cap, (unsigned long long)now, lr_status_name(st), res.n_hits,
               (unsigned long long)res.deepest_tokens);
    fuzz_note(&r->transcript, (uint64_t)st);
    fuzz_note(&r->transcript, res.n_hits);
    fuzz_note(&r->transcript, res.deepest_tokens);
    if (st == LR_OK)
        r->transcript =
            fuzz_fnv(r->transcript, hits, res.n_hits * sizeof *hits);
    if (r->check) {
        FUZZ_VERIFY(ix);
        FUZZ_ASSERT_STATUS(st,
                           st == LR_OK || st == LR_EBUFSIZE || st == LR_ENOMEM);
        if (st == LR_ENOMEM) {
            FUZZ_ASSERT_STATUS(st, lr__index_digest(ix) == d0);
        } else {
            size_t nk = fuzz_keys(B, tok, len, salt, keys, len / B + 1);
            fuzz_check_match(ix, st, keys, nk, &res, before, ids, N_VALID_IDS);
            if (flags == LR_MATCH_NO_TOUCH)
                fuzz_check_peek(ix, st, keys, nk, now, &res);
        }
    }
    free(keys);
    free(tok);
}

static void
op_stats(struct fuzz_index_run *r, fuzz_dp *dp, lr_index *ix, uint64_t capacity,
         uint64_t emap_cap)
{
    uint32_t inst = ids[fuzz_dp_next_range(dp, 0, 5)];
    lr_index_stats s;
    uint64_t blocks;
    lr_status st2 = fuzz_index_query(r, ix, inst, capacity, &s, &blocks);
    fuzz_trace("stats: blocks=%llu engine_hashes=%llu instances=%llu; "
               "instance_blocks(%u) = %s %llu",
               (unsigned long long)s.blocks,
               (unsigned long long)s.engine_hashes,
               (unsigned long long)s.instances, inst, lr_status_name(st2),
               (unsigned long long)blocks);
    fuzz_note(&r->transcript, s.engine_hashes);
    if (r->check) {
        FUZZ_ASSERT(s.remote_blocks == 0); /* precise mode is all LOCAL */
        FUZZ_ASSERT(s.instances <= 4);
        /* the default engine map holds 2 x capacity_blocks entries */
        FUZZ_ASSERT(s.engine_hashes <= (emap_cap ? emap_cap : 2 * capacity));
    }
}

static void
run_once(struct fuzz_index_run *r, const uint8_t *data, size_t size)
{
    static const uint64_t emaps[4] = { 0, 8, 32, 1024 };
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    uint32_t B = fuzz_dp_next_range(&dp, 0, 1) ? 16 : 4;
    uint64_t capacity = fuzz_dp_next_range(&dp, 16, 512);
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.block_tokens = B;
    o.capacity_blocks = capacity;
    o.engine_map_capacity = emaps[fuzz_dp_next_range(&dp, 0, 3)];
    o.ttl_ns = fuzz_index_ttl(&dp);
    o.max_instances = 4;
    o.seed = fuzz_dp_next_range(&dp, 0, 255) ^ r->seed_xor;
    fuzz_oom_decode(&dp, 1024, &r->oom.fail_at, &r->oom.sticky);
    lr_allocator alloc;
    fuzz_oom_allocator(&r->oom, &alloc);
    o.allocator = &alloc;
    fuzz_trace("index(B=%u, capacity=%llu, engine_map=%llu, ttl=%llu, "
               "max_instances=4); allocation %llu fails%s",
               B, (unsigned long long)capacity,
               (unsigned long long)o.engine_map_capacity,
               (unsigned long long)o.ttl_ns, (unsigned long long)r->oom.fail_at,
               r->oom.sticky ? " and every one after" : "");
    lr_index *ix = NULL;
    lr_status st = lr_index_create(&o, &ix);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    r->oom.armed = true;

    uint64_t now = FUZZ_SEC;
    for (int i = 0; i < MAX_OPS && !fuzz_dp_empty(&dp); i++) {
        switch (fuzz_dp_next_range(&dp, 0, 10)) {
        case 0:
        case 1:
        case 2:
        case 3:
            op_stored(r, &dp, ix, B, capacity, now);
            break;
        case 4:
            op_removed(r, &dp, ix);
            break;
        case 5:
            op_cleared(r, &dp, ix);
            break;
        case 6: {
            now += fuzz_index_dt(&dp);
            fuzz_trace("now = %llu", (unsigned long long)now);
            fuzz_index_clock(ix, now);
            break;
        }
        case 7: {
            uint64_t d0 = r->check ? lr__index_digest(ix) : 0;
            lr_index_expire(ix, now);
            fuzz_trace("expire(now=%llu)", (unsigned long long)now);
            fuzz_index_after(r, ix, LR_OK, d0, false);
            break;
        }
        case 8:
            op_match(r, &dp, ix, B, now);
            break;
        case 9:
            op_remove_instance(r, &dp, ix);
            break;
        default:
            op_stats(r, &dp, ix, capacity, o.engine_map_capacity);
            break;
        }
    }
    r->digest[0] = lr__index_digest(ix);
    lr_index_destroy(ix);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_index_replays(run_once, data, size);
    return 0;
}
