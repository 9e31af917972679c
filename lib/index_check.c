/* lr_index, checks for tests, fuzzers and debug builds: lr__index_verify
 * walks every invariant listed at the top of index.c, lr__index_digest
 * checksums the logical state (equal before and after a failed call), and
 * two probes for differential tests. They only read the index. */
#include "index_impl.h"

#define CHECK(c)                \
    do {                        \
        if (!(c))               \
            return LR_ECORRUPT; \
    } while (0)

static lr_status
verify_hold(const lr_index *ix, uint32_t n, const struct hold *h,
            uint64_t *per_inst)
{
    const struct node *nd = &ix->nodes[n];
    CHECK(h->inst < ix->max_inst && ix->insts[h->inst].used);
    per_inst[h->inst]++;
    if (nd->parent != LR_NIL) {
        uint32_t pref = hold_find(ix, nd->parent, h->inst);
        CHECK(pref != LR_NIL); /* invariant 1 */
        CHECK(!(H(ix, pref)->bits & HB_REMOTE) || (h->bits & HB_REMOTE));
    }
    uint32_t kids = 0;
    for (uint32_t c = nd->child; c != LR_NIL; c = ix->nodes[c].sib_next)
        if (hold_find(ix, c, h->inst) != LR_NIL)
            kids++;
    CHECK(kids == nchild(h));
    if (kids == 0)
        CHECK(h->bits & HB_LISTED); /* invariant 3 */
    return LR_OK;
}

static lr_status
verify_nodes(const lr_index *ix, uint64_t *per_inst, uint64_t *holds,
             uint64_t *remote)
{
    uint32_t live = 0;
    for (uint32_t n = 0; n < ix->npool.top; n++) {
        const struct node *nd = &ix->nodes[n];
        if (nd->h.inst == INST_FREE)
            continue;
        CHECK(nd->h.inst != PENDING);
        live++;
        CHECK(node_find(ix, nd->key) == n);
        if (nd->parent != LR_NIL) {
            CHECK(nd->parent < ix->npool.top);
            CHECK(ix->nodes[nd->parent].h.inst != INST_FREE);
        }
        uint32_t prev = LR_NIL;
        for (uint32_t c = nd->child; c != LR_NIL; c = ix->nodes[c].sib_next) {
            CHECK(ix->nodes[c].parent == n);
            CHECK(ix->nodes[c].sib_prev == prev);
            prev = c;
        }
        uint32_t nh = 0;
        for (uint32_t x = nd->more; x != LR_NIL; x = ix->xh[x].next)
            nh++;
        CHECK(nd->h.aux == nh + 1);
        /* holders: distinct instances */
        for (uint32_t x = LR_NIL;;) {
            const struct hold *h = x == LR_NIL ? &nd->h : &ix->xh[x].h;
            if (x != LR_NIL)
                CHECK(ix->xh[x].node == n);
            LR_TRY(verify_hold(ix, n, h, per_inst));
            CHECK(hold_find(ix, n, h->inst) == (x == LR_NIL ? n : (x | REF_X)));
            (*holds)++;
            if (h->bits & HB_REMOTE)
                (*remote)++;
            x = x == LR_NIL ? nd->more : ix->xh[x].next;
            if (x == LR_NIL)
                break;
        }
    }
    CHECK(live == pool_live(&ix->npool));
    return LR_OK;
}

static lr_status
verify_lists(const lr_index *ix)
{
    for (int l = 0; l < N_LISTS; l++) {
        uint32_t prev = LR_NIL;
        uint64_t count = 0;
        for (uint32_t r = ix->head[l]; r != LR_NIL; r = H(ix, r)->next) {
            const struct hold *h = H(ix, r);
            CHECK(++count <= ix->holds);
            CHECK(h->bits & HB_LISTED);
            CHECK(list_of(h) == l);
            CHECK(h->prev == prev);
            prev = r;
        }
        CHECK(ix->tail[l] == prev);
    }
    return LR_OK;
}

lr_status
lr__index_verify(const lr_index *ix)
{
    if (ix == NULL)
        return LR_EINVAL;
    struct lr__mem m = ix->mem;
    uint64_t *per_inst = lr__calloc(&m, ix->max_inst, sizeof(uint64_t));
    if (per_inst == NULL)
        return LR_ENOMEM;
    uint64_t holds = 0, remote = 0;
    lr_status st = verify_nodes(ix, per_inst, &holds, &remote);
    if (st == LR_OK)
        st = verify_lists(ix);
    if (st == LR_OK && (holds != ix->holds || remote != ix->remote))
        st = LR_ECORRUPT;
    if (st == LR_OK && ix->holds > ix->capacity)
        st = LR_ECORRUPT;
    uint32_t used = 0;
    for (uint32_t s = 0; st == LR_OK && s < ix->max_inst; s++) {
        if (!ix->insts[s].used)
            continue;
        used++;
        if (per_inst[s] != ix->insts[s].blocks ||
            lr__index_inst_lookup(ix, ix->insts[s].id) != s)
            st = LR_ECORRUPT;
    }
    if (st == LR_OK &&
        (used + ix->n_ifree != ix->max_inst || ix->itab.count != used ||
         lr__table_verify(&ix->itab) != LR_OK))
        st = LR_ECORRUPT;
    if (st == LR_OK && (lr__table_verify(&ix->ntab) != LR_OK ||
                        ix->ntab.count != pool_live(&ix->npool)))
        st = LR_ECORRUPT;
    if (st == LR_OK)
        st = lr__index_emap_verify(ix);
    lr__free(&m, per_inst, (size_t)ix->max_inst * sizeof(uint64_t));
    return st;
}

#define DIGEST_SEED 0x6469676573740000ull /* "digest" */

static inline uint64_t
dmix(uint64_t d, uint64_t v)
{
    return lr__mix64(d ^ v, DIGEST_SEED) + GOLDEN_GAMMA;
}

uint64_t
lr__index_digest(const lr_index *ix)
{
    uint64_t d = 0;
    for (uint32_t n = 0; n < ix->npool.top; n++) {
        const struct node *nd = &ix->nodes[n];
        if (nd->h.inst == INST_FREE)
            continue;
        d = dmix(d, nd->key);
        d = dmix(d, nd->parent == LR_NIL ? 0 : ix->nodes[nd->parent].key);
        for (uint32_t x = LR_NIL;;) {
            const struct hold *h = x == LR_NIL ? &nd->h : &ix->xh[x].h;
            d = dmix(d, ((uint64_t)ix->insts[h->inst].id << 32) | h->bits);
            d = dmix(d, h->stamp);
            x = x == LR_NIL ? nd->more : ix->xh[x].next;
            if (x == LR_NIL)
                break;
        }
    }
    for (int l = 0; l < N_LISTS; l++)
        for (uint32_t r = ix->head[l]; r != LR_NIL; r = H(ix, r)->next)
            d = dmix(d, ix->nodes[ref_node(ix, r)].key ^ H(ix, r)->inst);
    d = dmix(d, ix->holds);
    d = dmix(d, ix->remote);
    d = dmix(d, pool_live(&ix->npool));
    d = dmix(d, ix->evicted);
    d = dmix(d, ix->expired);
    d = dmix(d, ix->learned);
    d = dmix(d, ix->j_seq);
    d = dmix(d, ix->has_epoch ? ix->epoch_ns + 1 : 0);
    for (uint64_t q = ix->j_seq > ix->j_cap ? ix->j_seq - ix->j_cap : 0;
         q < ix->j_seq && ix->j_cap > 0; q++)
        d = dmix(d, ix->journal[q % ix->j_cap].key ^
                        ix->journal[q % ix->j_cap].inst_id);
    for (uint32_t s = 0; s < ix->max_inst; s++)
        if (ix->insts[s].used)
            d = dmix(d, ((uint64_t)ix->insts[s].id << 32) ^ s ^
                            (ix->insts[s].blocks << 40));
    for (uint32_t i = 0; i < ix->n_ifree; i++)
        d = dmix(d, ix->ifree[i]);
    return dmix(d, lr__index_emap_digest(ix));
}

uint32_t
lr__index_depth_of(const lr_index *idx, uint32_t instance, const uint64_t *keys,
                   uint32_t n_keys)
{
    lr_index *ix = (lr_index *)(uintptr_t)idx; /* only last_probes moves */
    uint32_t s = lr__index_inst_lookup(ix, instance);
    if (s == LR_NIL)
        return 0;
    uint32_t ref;
    return lr__index_deepest(ix, s, keys, 0, n_keys, LR_NIL, &ref);
}

uint32_t
lr__index_last_probes(const lr_index *idx)
{
    return idx->last_probes;
}

/* ---- flooding (issue 16) -------------------------------------------------- */

uint64_t
lr__index_key_hash(const lr_index *ix, uint64_t key)
{
    return hkey(ix, key);
}

void
lr__index_node_table_stats(const lr_index *ix, uint32_t *count, uint32_t *size,
                           uint32_t *max_probe, uint64_t *sum_probe,
                           uint32_t *resalts)
{
    *count = ix->ntab.count;
    *size = ix->ntab.size;
    *resalts = ix->ntab.resalts;
    lr__table_probe_stats(&ix->ntab, max_probe, sum_probe);
}
