/* lr_index, its whole logical state for a router snapshot
 * (lr__index_save, lr__index_load): every hold (instance, prefix) with its
 * trust, anchor flag and recency, the engine-hash map of precise mode and
 * the time base, so that a restored index answers, ages, evicts and
 * resolves later KV events as the saved one would.
 *
 * The format speaks of prefixes and holders, not of the layout: nodes
 * sorted by key with their parent, holds sorted by (node, instance), map
 * entries sorted by (instance, engine hash). Two indexes in the same
 * logical state at the same time base save the same bytes. A save reads
 * the holds through lr__index_holds (the view the tests use), so it never
 * sees runs or spans; a load makes the nodes and grants the holds a span
 * at a time with the primitives the delta import uses (load_nodes,
 * load_apply), cutting spans where a block stops being plain.
 *
 * Format, version 1, integers little-endian:
 *
 *   off  size  field
 *     0     4  magic "LRIS"
 *     4     2  version (1)
 *     6     2  flags: 1 = the index has a time base (epoch)
 *     8     4  block_tokens
 *    12     4  n_nodes
 *    16     4  n_holds
 *    20     4  n_emap
 *    24     8  epoch_ns: host time of tick 0
 *    32     8  saved_ns: host time of the save
 *    40        n_nodes x { u64 key (strictly ascending); varint parent }
 *                 parent: 0 = a root block, p = node p - 1
 *              n_holds x { varint node; varint instance id; u8 flags
 *                 (1 REMOTE, 2 ANCHOR); varint stamp (ticks of 2^24 ns
 *                 since the epoch) }, (node, instance) strictly ascending
 *              n_emap x { varint instance id; u64 engine hash; varint node
 *                 }, (instance, engine hash) strictly ascending
 *   end-8   8  XXH3_64bits_withSeed(bytes [0, end-8), "LRISTAT1")
 *
 * Varints are unsigned LEB128 (wire.h). A loaded state must be one an
 * index can be in: every node held, every hold's parent held by the same
 * instance, no LOCAL hold under a REMOTE one, every map entry on a block
 * its instance holds, no cycle through the parents. */
#include <stdlib.h>

#include "common/wire.h"
#include "index/index.h"
#include "index/index_emap.h"
#include "index/index_evict.h"
#include "index/index_store.h"

#define STATE_MAGIC "LRIS"
#define STATE_VERSION 1
#define STATE_HEADER 40
#define STATE_SUM LR__FRAME_SUM
#define SF_EPOCH 1u
#define HF_REMOTE 1u
#define HF_ANCHOR 2u
#define NODE_MIN 9u /* key + a 1-byte varint */
#define HOLD_MIN 4u
#define EMAP_MIN 10u
#define LR_SEED_ISTATE 0x4c52495354415431ull /* "LRISTAT1" */

struct snode {
    uint64_t key;
    uint32_t par;  /* position of the parent, LR_NIL for a root */
    uint32_t node; /* save: the index's node; load: made node */
};

struct shold {
    uint32_t node; /* position in the sorted nodes */
    uint32_t id;
    uint32_t flags;
    uint32_t stamp;
    uint32_t par;  /* load: the parent's hold (position), LR_NIL at a root */
    uint32_t nch;  /* load: children held by the same instance */
    uint32_t kid;  /* load: the only such child when nch is 1 */
    uint32_t done; /* load: granted */
};

struct semap {
    uint32_t id;
    uint32_t node;
    uint64_t ehash;
};

struct state {
    struct lr__mem *m;
    uint32_t n_nodes, n_holds, n_emap;
    struct snode *nodes;
    struct shold *holds;
    struct semap *emap;
    uint32_t *tmp; /* save: pool index -> position; load: topological order */
    size_t tmp_n;
    const lr_index *ix; /* save: the index and the time it is saved at */
    uint64_t saved_ns;
    uint32_t saved_tick; /* save: its tick; no stamp is written later */
};

static void
state_free(struct state *st)
{
    lr__free(st->m, st->nodes, (size_t)st->n_nodes * sizeof *st->nodes);
    lr__free(st->m, st->holds, (size_t)st->n_holds * sizeof *st->holds);
    lr__free(st->m, st->emap, (size_t)st->n_emap * sizeof *st->emap);
    lr__free(st->m, st->tmp, st->tmp_n * sizeof *st->tmp);
}

static lr_status
state_alloc(struct state *st)
{
    st->nodes = lr__calloc(st->m, st->n_nodes, sizeof *st->nodes);
    st->holds = lr__calloc(st->m, st->n_holds, sizeof *st->holds);
    st->emap = lr__calloc(st->m, st->n_emap, sizeof *st->emap);
    st->tmp = lr__calloc(st->m, st->tmp_n, sizeof *st->tmp);
    if ((st->n_nodes && st->nodes == NULL) ||
        (st->n_holds && st->holds == NULL) ||
        (st->n_emap && st->emap == NULL) || (st->tmp_n && st->tmp == NULL))
        return LR_ENOMEM;
    return LR_OK;
}

/* `static int name(const void *, const void *)`, a qsort order of struct
 * T's: ascending by field f, ties by field g. */
#define CMP_BY(name, T, f, g)                     \
    static int name(const void *a, const void *b) \
    {                                             \
        const T *x = a, *y = b;                   \
        if (x->f != y->f)                         \
            return x->f < y->f ? -1 : 1;          \
        return x->g < y->g ? -1 : x->g > y->g;    \
    }

CMP_BY(cmp_hold, struct shold, node, id)
CMP_BY(cmp_emap, struct semap, id, ehash)

/* ---- save ------------------------------------------------------------------ */

/* A hold as lr__index_holds shows it: its key and its parent's, and
 * whether it is at the root. */
struct kp {
    uint64_t key, pkey;
    uint32_t root;
    uint32_t pad;
};

struct save_visit {
    struct state *st;
    struct kp *kp;
    uint32_t k;
};

static void
save_hold(void *ctx, const struct lr__hold_view *h)
{
    struct save_visit *v = ctx;
    if (v->k >= v->st->n_holds)
        return; /* cannot be: the counts agree (checked by the caller) */
    uint32_t f = ((h->flags & LR__HOLD_REMOTE) ? HF_REMOTE : 0) |
                 ((h->flags & LR__HOLD_ANCHOR) ? HF_ANCHOR : 0);
    v->kp[v->k] = (struct kp){ h->key, h->parent_key, h->depth == 1, 0 };
    v->st->holds[v->k++] =
        (struct shold){ .id = h->instance, .flags = f, .stamp = h->stamp };
}

static void
save_listed(void *ctx, int list, uint64_t key, uint32_t instance)
{
    (void)ctx;
    (void)list;
    (void)key;
    (void)instance;
}

static int
cmp_kp(const void *a, const void *b)
{
    uint64_t x = ((const struct kp *)a)->key, y = ((const struct kp *)b)->key;
    return x < y ? -1 : x > y;
}

/* Position of `key` among the sorted nodes (it is there). */
static uint32_t
node_pos(const struct state *st, uint64_t key)
{
    uint32_t lo = 0, hi = st->n_nodes;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (st->nodes[mid].key <= key)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Every node (key, parent) and every hold, into st (sized by the caller):
 * the nodes are the distinct keys of the holds (every node is held). kp
 * has room for every hold. */
static lr_status
save_holds(const lr_index *ix, struct state *st, struct kp *kp)
{
    if (st->n_holds == 0) /* and so no nodes: nothing to sort */
        return st->n_nodes == 0 ? LR_OK : LR_ECORRUPT;
    struct save_visit v = { st, kp, 0 };
    lr__index_holds(ix, save_hold, save_listed, &v);
    if (LR_NEVER(v.k != st->n_holds))
        return LR_ECORRUPT;
    /* the hold keys, before kp is sorted */
    uint64_t *hkey = (uint64_t *)(void *)st->tmp;
    for (uint32_t k = 0; k < st->n_holds; k++)
        hkey[k] = kp[k].key;
    qsort(kp, st->n_holds, sizeof *kp, cmp_kp);
    uint32_t u = 0;
    for (uint32_t k = 0; k < st->n_holds; k++)
        if (u == 0 || kp[k].key != kp[u - 1].key)
            kp[u++] = kp[k];
    if (LR_NEVER(u != st->n_nodes))
        return LR_ECORRUPT;
    for (uint32_t i = 0; i < u; i++)
        st->nodes[i] = (struct snode){ kp[i].key, LR_NIL, LR_NIL };
    for (uint32_t i = 0; i < u; i++)
        if (!kp[i].root)
            st->nodes[i].par = node_pos(st, kp[i].pkey);
    for (uint32_t k = 0; k < st->n_holds; k++)
        st->holds[k].node = node_pos(st, hkey[k]);
    qsort(st->holds, st->n_holds, sizeof *st->holds, cmp_hold);
    return LR_OK;
}

struct emap_visit {
    const lr_index *ix;
    struct state *st;
    uint32_t k;
};

static void
count_emap(void *ctx, uint32_t s, uint64_t ehash, uint32_t node)
{
    (void)s;
    (void)ehash;
    (void)node;
    ((struct emap_visit *)ctx)->k++;
}

static void
take_emap(void *ctx, uint32_t s, uint64_t ehash, uint32_t node)
{
    struct emap_visit *v = ctx;
    v->st->emap[v->k++] =
        (struct semap){ v->ix->insts[s].id, node_pos(v->st, v->ix->keys[node]),
                        ehash };
}

/* The frame's body (lr__frame_blob writes its head and sum) for the
 * index st->ix. */
static void
write_state(struct lr__wr *w, const void *arg)
{
    const struct state *st = arg;
    const lr_index *ix = st->ix;
    lr__wr_u16(w, ix->has_epoch ? SF_EPOCH : 0);
    lr__wr_u32(w, ix->B);
    lr__wr_u32(w, st->n_nodes);
    lr__wr_u32(w, st->n_holds);
    lr__wr_u32(w, st->n_emap);
    lr__wr_u64(w, ix->has_epoch ? ix->epoch_ns : 0);
    lr__wr_u64(w, st->saved_ns);
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        lr__wr_u64(w, st->nodes[i].key);
        lr__wr_var(w, st->nodes[i].par == LR_NIL ? 0 : st->nodes[i].par + 1ull);
    }
    for (uint32_t i = 0; i < st->n_holds; i++) {
        const struct shold *h = &st->holds[i];
        lr__wr_var(w, h->node);
        lr__wr_var(w, h->id);
        lr__wr_u8(w, (uint8_t)h->flags);
        /* a use after the save's time (a call of another thread, whose
         * time was ahead of the save's) is written as at the save: a
         * restore refuses stamps past it (read_records) */
        lr__wr_var(w, h->stamp < st->saved_tick ? h->stamp : st->saved_tick);
    }
    for (uint32_t i = 0; i < st->n_emap; i++) {
        lr__wr_var(w, st->emap[i].id);
        lr__wr_u64(w, st->emap[i].ehash);
        lr__wr_var(w, st->emap[i].node);
    }
}

/* The tick of time t on the index's time base (lr__index_tick, without
 * taking it). */
static uint32_t
saved_tick(const lr_index *ix, uint64_t t)
{
    return ix->has_epoch ? lr__index_tick_at(ix, t) : 0;
}

lr_status
lr__index_save(const lr_index *idx, uint64_t now_ns, lr_blob **out)
{
    LR_RETURN_IF(idx == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    struct lr__mem m = idx->mem; /* temporaries only */
    struct emap_visit v = { idx, NULL, 0 };
    lr__index_emap_each(idx, count_emap, &v);
    LR_RETURN_IF(idx->holds > UINT32_MAX / 2, LR_ELIMIT);
    /* tmp: the holds' keys (2 words a hold) */
    struct state st = { .m = &m,
                        .n_nodes = (uint32_t)idx->nodes,
                        .n_holds = (uint32_t)idx->holds,
                        .n_emap = v.k,
                        .tmp_n = 2 * (size_t)idx->holds,
                        .ix = idx,
                        .saved_ns = now_ns,
                        .saved_tick = saved_tick(idx, now_ns) };
    lr_status s = state_alloc(&st);
    struct kp *kp = NULL;
    if (s == LR_OK && st.n_holds > 0) {
        kp = lr__calloc(&m, st.n_holds, sizeof *kp);
        if (kp == NULL)
            s = LR_ENOMEM;
    }
    if (s == LR_OK)
        s = save_holds(idx, &st, kp);
    lr__free(&m, kp, (size_t)st.n_holds * sizeof *kp);
    if (s == LR_OK) {
        v.st = &st;
        v.k = 0;
        lr__index_emap_each(idx, take_emap, &v);
        if (st.n_emap > 1)
            qsort(st.emap, st.n_emap, sizeof *st.emap, cmp_emap);
        s = lr__frame_blob(&idx->mem, STATE_MAGIC, STATE_VERSION,
                           LR_SEED_ISTATE, write_state, &st, out);
    }
    state_free(&st);
    return s;
}

/* ---- load ------------------------------------------------------------------ */

struct header {
    uint32_t flags, n_nodes, n_holds, n_emap;
    uint64_t epoch_ns, saved_ns;
    uint32_t saved_tick; /* the latest stamp a hold may carry */
};

static lr_status
read_header(const lr_index *ix, const uint8_t *buf, size_t len,
            struct header *h)
{
    LR_TRY(lr__frame_check(buf, len, STATE_HEADER, STATE_MAGIC, STATE_VERSION,
                           LR_SEED_ISTATE, NULL));
    h->flags = lr__get_u16(buf + 6);
    LR_RETURN_IF(h->flags & ~SF_EPOCH, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u32(buf + 8) != ix->B, LR_ENOTSUP);
    h->n_nodes = lr__get_u32(buf + 12);
    h->n_holds = lr__get_u32(buf + 16);
    h->n_emap = lr__get_u32(buf + 20);
    h->epoch_ns = lr__get_u64(buf + 24);
    h->saved_ns = lr__get_u64(buf + 32);
    /* the time base is judged as a call's now_ns is: an epoch after the
     * save, or a save past LR_MAX_TIME_NS, would make the restored routes
     * (and every route learned after them) never expire */
    LR_RETURN_IF(h->saved_ns > LR_MAX_TIME_NS, LR_ECORRUPT);
    LR_RETURN_IF((h->flags & SF_EPOCH) && h->epoch_ns > h->saved_ns,
                 LR_ECORRUPT);
    uint64_t t =
        (h->saved_ns - ((h->flags & SF_EPOCH) ? h->epoch_ns : 0)) >> TICK_SHIFT;
    h->saved_tick = t >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)t;
    size_t body = len - STATE_HEADER - STATE_SUM;
    LR_RETURN_IF(h->n_nodes > body / NODE_MIN || h->n_holds > body / HOLD_MIN ||
                     h->n_emap > body / EMAP_MIN,
                 LR_ECORRUPT);
    LR_RETURN_IF(h->n_holds < h->n_nodes, LR_ECORRUPT); /* nodes are held */
    LR_RETURN_IF(h->n_holds > ix->capacity, LR_ELIMIT);
    LR_RETURN_IF(h->n_emap > ix->emap_cap, LR_ELIMIT);
    return LR_OK;
}

/* The records, checked one by one: order, ranges, flags. */
static lr_status
read_records(struct lr__rd *r, const struct header *h, struct state *st)
{
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        struct snode *n = &st->nodes[i];
        n->key = lr__rd_u64(r);
        uint32_t p = lr__rd_var32(r);
        LR_RETURN_IF(r->bad || p > st->n_nodes || p == i + 1, LR_ECORRUPT);
        LR_RETURN_IF(i > 0 && n->key <= st->nodes[i - 1].key, LR_ECORRUPT);
        n->par = p == 0 ? LR_NIL : p - 1;
        n->node = LR_NIL;
    }
    for (uint32_t i = 0; i < st->n_holds; i++) {
        struct shold *x = &st->holds[i];
        x->node = lr__rd_var32(r);
        x->id = lr__rd_var32(r);
        x->flags = lr__rd_u8(r);
        x->stamp = lr__rd_var32(r);
        LR_RETURN_IF(r->bad || x->node >= st->n_nodes, LR_ECORRUPT);
        LR_RETURN_IF(x->id == LR_INSTANCE_NONE, LR_ECORRUPT);
        LR_RETURN_IF(x->flags & ~(HF_REMOTE | HF_ANCHOR), LR_ECORRUPT);
        LR_RETURN_IF(!(h->flags & SF_EPOCH) && x->stamp != 0, LR_ECORRUPT);
        LR_RETURN_IF(x->stamp > h->saved_tick, LR_ECORRUPT); /* used later */
        LR_RETURN_IF(i > 0 && cmp_hold(&st->holds[i - 1], x) >= 0, LR_ECORRUPT);
    }
    for (uint32_t i = 0; i < st->n_emap; i++) {
        struct semap *e = &st->emap[i];
        e->id = lr__rd_var32(r);
        e->ehash = lr__rd_u64(r);
        e->node = lr__rd_var32(r);
        LR_RETURN_IF(r->bad || e->node >= st->n_nodes, LR_ECORRUPT);
        LR_RETURN_IF(i > 0 && cmp_emap(&st->emap[i - 1], e) >= 0, LR_ECORRUPT);
    }
    LR_RETURN_IF(r->p != r->end, LR_ECORRUPT);
    return LR_OK;
}

/* The hold of `id` on node position j, or LR_NIL (first[] indexes each
 * node's run of holds). */
static uint32_t
hold_at(const struct state *st, const uint32_t *first, uint32_t j, uint32_t id)
{
    uint32_t lo = LR__LOWER_BOUND(struct shold, id, st->holds, first[j],
                                  first[j + 1], id);
    return lo < first[j + 1] && st->holds[lo].id == id ? lo : LR_NIL;
}

/* Parents first: a depth per node (cycles are corrupt), then the node
 * positions sorted by depth into order[]. depth[] is scratch of n. */
static lr_status
topo_order(struct state *st, uint32_t *depth, uint32_t *order)
{
    uint32_t n = st->n_nodes;
    for (uint32_t i = 0; i < n; i++)
        depth[i] = LR_NIL;
    for (uint32_t i = 0; i < n; i++) {
        /* climb to a node of known depth (or a root), at most n steps */
        uint32_t j = i, steps = 0;
        while (depth[j] == LR_NIL && st->nodes[j].par != LR_NIL) {
            j = st->nodes[j].par;
            LR_RETURN_IF(++steps > n, LR_ECORRUPT); /* a cycle */
        }
        uint32_t d = depth[j] != LR_NIL ? depth[j] : 0;
        depth[j] = d;
        /* and down again, numbering the path */
        uint32_t len = steps;
        for (uint32_t k = i; k != j; k = st->nodes[k].par)
            depth[k] = d + len--;
    }
    /* counting sort by depth: depths are below n */
    uint32_t *count = order; /* reuse order[] as the histogram first */
    memset(count, 0, (size_t)n * sizeof *count);
    for (uint32_t i = 0; i < n; i++)
        count[depth[i]]++;
    for (uint32_t d = 0, acc = 0; d < n; d++) {
        uint32_t c = count[d];
        count[d] = acc;
        acc += c;
    }
    /* depth[] becomes each node's slot, then order[] is filled from it */
    for (uint32_t i = 0; i < n; i++)
        depth[i] = count[depth[i]]++;
    for (uint32_t i = 0; i < n; i++)
        order[depth[i]] = i;
    return LR_OK;
}

/* The state is one an index can be in (see the file comment); each hold
 * learns its parent hold. first[] (n_nodes + 1) indexes the holds by
 * node. */
static lr_status
check_state(struct state *st, uint32_t *first)
{
    memset(first, 0, ((size_t)st->n_nodes + 1) * sizeof *first);
    for (uint32_t i = 0; i < st->n_holds; i++)
        first[st->holds[i].node + 1]++;
    for (uint32_t j = 0; j < st->n_nodes; j++) {
        LR_RETURN_IF(first[j + 1] == 0, LR_ECORRUPT); /* a node nobody holds */
        first[j + 1] += first[j];
    }
    for (uint32_t i = 0; i < st->n_holds; i++) {
        struct shold *x = &st->holds[i];
        uint32_t p = st->nodes[x->node].par;
        x->par = p == LR_NIL ? LR_NIL : hold_at(st, first, p, x->id);
        LR_RETURN_IF(p != LR_NIL && x->par == LR_NIL, LR_ECORRUPT);
        LR_RETURN_IF(x->par != LR_NIL && !(x->flags & HF_REMOTE) &&
                         (st->holds[x->par].flags & HF_REMOTE),
                     LR_ECORRUPT);
        if (x->par != LR_NIL) {
            st->holds[x->par].nch++;
            st->holds[x->par].kid = i;
        }
    }
    for (uint32_t i = 0; i < st->n_emap; i++)
        LR_RETURN_IF(hold_at(st, first, st->emap[i].node, st->emap[i].id) ==
                         LR_NIL,
                     LR_ECORRUPT);
    return LR_OK;
}

/* Instance ids the state brings that the index has no slot for. */
static uint32_t
new_ids(const lr_index *ix, const struct state *st, uint32_t *scratch)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < st->n_holds; i++)
        scratch[n++] = st->holds[i].id;
    qsort(scratch, n, sizeof *scratch, lr__index_cmp_u32);
    uint32_t fresh = 0;
    for (uint32_t i = 0; i < n; i++)
        if ((i == 0 || scratch[i] != scratch[i - 1]) &&
            lr__index_inst_lookup(ix, scratch[i]) == LR_NIL)
            fresh++;
    return fresh;
}

/* Stamps of the leaves, for the LRU lists (ascending, ties by position). */
struct leaf {
    uint32_t stamp, k;
};

CMP_BY(cmp_leaf, struct leaf, stamp, k)

/* Phase 2a, undone by unmake_nodes: the nodes, parents first, and room in
 * each run's holder array for the instances holding its first node (who
 * holds a run holds its first node). LR_ENOMEM: the holder rooms. */
static lr_status
load_nodes(lr_index *ix, struct state *st, const uint32_t *order,
           const uint32_t *first, uint32_t *made)
{
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        struct snode *n = &st->nodes[order[i]];
        uint32_t parent = n->par == LR_NIL ? LR_NIL : st->nodes[n->par].node;
        n->node = lr__index_node_new(ix, n->key, parent);
        made[i] = n->node;
    }
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        uint32_t j = order[i], n = st->nodes[j].node;
        if (node_off(ix, n) == 0)
            LR_TRY(lr__index_hent_room(ix, node_run(ix, n),
                                       first[j + 1] - first[j]));
    }
    return LR_OK;
}

static void
unmake_nodes(lr_index *ix, const uint32_t *made, uint32_t n)
{
    while (n > 0) /* newest first: each is then the last of its run */
        lr__index_node_pop(ix, made[--n]);
}

/* Whether hold c (the only child of the hold above it) can lie in the
 * same span as that hold, below it: next in the same run, the same trust,
 * and not older than the span's upper blocks. */
static bool
joins(const lr_index *ix, const struct state *st, uint32_t k, uint32_t c,
      uint32_t top_stamp)
{
    const struct shold *x = &st->holds[k], *y = &st->holds[c];
    uint32_t nx = st->nodes[x->node].node, ny = st->nodes[y->node].node;
    return node_run(ix, nx) == node_run(ix, ny) &&
           node_off(ix, ny) == node_off(ix, nx) + 1 &&
           (x->flags & HF_REMOTE) == (y->flags & HF_REMOTE) &&
           y->stamp >= top_stamp;
}

/* The holds of one span, from hold k down: while a hold has one child,
 * which joins, and is plain in the span's way (not an anchor, or, when
 * the span's first two are anchors, an anchor: precise mode's spans), the
 * span goes on. Returns the bottom; *len its length, *every the mode. */
static uint32_t
span_end(const lr_index *ix, const struct state *st, uint32_t k, uint32_t *len,
         bool *every)
{
    const struct shold *h = st->holds;
    uint32_t top_stamp = h[k].stamp;
    bool anchor = (h[k].flags & HF_ANCHOR) != 0;
    *len = 1;
    *every = false;
    if (anchor && !(h[k].nch == 1 && joins(ix, st, k, h[k].kid, top_stamp) &&
                    (h[h[k].kid].flags & HF_ANCHOR)))
        return k; /* an anchor that ends its span */
    *every = anchor;
    while (h[k].nch == 1 && joins(ix, st, k, h[k].kid, top_stamp)) {
        uint32_t c = h[k].kid;
        (*len)++;
        k = c;
        /* c is the bottom unless it is plain in the span's way too */
        if (h[c].stamp != top_stamp ||
            ((h[c].flags & HF_ANCHOR) != 0) != anchor)
            break;
    }
    return k;
}

/* Phase 2b (cannot fail: room was reserved): the instances, then the
 * holds a span at a time, parents first; child counts, stamps, the
 * leaves listed by recency, the engine-hash map. `leaves` has room for
 * every hold. */
static void
load_apply(lr_index *ix, struct state *st, const uint32_t *order,
           const uint32_t *first, struct leaf *leaves)
{
    for (uint32_t k = 0; k < st->n_holds; k++)
        if (lr__index_inst_lookup(ix, st->holds[k].id) == LR_NIL)
            (void)lr__index_inst_add(ix, st->holds[k].id);
    uint64_t learned = ix->learned; /* a load learns nothing */
    uint32_t n_leaves = 0;
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        uint32_t j = order[i];
        for (uint32_t k = first[j]; k < first[j + 1]; k++) {
            struct shold *x = &st->holds[k];
            if (x->done)
                continue;
            uint32_t len;
            bool every;
            uint32_t b = span_end(ix, st, k, &len, &every);
            uint32_t n = st->nodes[j].node;
            uint32_t r = node_run(ix, n), lo = node_off(ix, n);
            uint32_t depth0 = ix->runs[r].top + lo;
            uint32_t anchor = depth0 + len;
            const struct shold *y = &st->holds[b];
            bool banchor = (y->flags & HF_ANCHOR) != 0;
            struct seg seg = { r, lo, lo + len - 1 };
            uint32_t sp = lr__index_grant(
                ix, lr__index_inst_lookup(ix, x->id), &seg, 1,
                (x->flags & HF_REMOTE) ? HB_REMOTE : 0, x->stamp, &anchor,
                every     ? LR_NIL
                : banchor ? 1u
                          : 0u,
                depth0);
            struct span *S = &ix->sp[sp];
            S->bits = (S->bits & ~(HB_NCHILD | HB_ANCHOR)) | y->nch |
                      (banchor ? HB_ANCHOR : 0);
            S->stamp = y->stamp;
            for (uint32_t c = k, m = 0; m < len; m++, c = st->holds[c].kid)
                st->holds[c].done = 1;
            if (y->nch == 0)
                leaves[n_leaves++] = (struct leaf){ y->stamp, sp };
        }
    }
    ix->learned = learned;
    qsort(leaves, n_leaves, sizeof *leaves, cmp_leaf);
    for (uint32_t i = 0; i < n_leaves; i++) /* oldest first: newest at head */
        lr__index_touch(ix, leaves[i].k, leaves[i].stamp);
    for (uint32_t i = 0; i < st->n_emap; i++) {
        const struct semap *e = &st->emap[i];
        lr__index_emap_put(ix, lr__index_inst_lookup(ix, e->id), e->ehash,
                           st->nodes[e->node].node);
    }
}

/* The time base: on the same host clock (now at or past the save) the
 * epoch stays, so the downtime counts as age; on a clock that is behind
 * (another machine), the saved ages are kept from now. */
static void
load_epoch(lr_index *ix, const struct header *h, uint64_t now_ns)
{
    ix->has_epoch = (h->flags & SF_EPOCH) != 0;
    if (!ix->has_epoch) {
        ix->epoch_ns = 0;
        return;
    }
    uint64_t age = h->saved_ns > h->epoch_ns ? h->saved_ns - h->epoch_ns : 0;
    if (now_ns >= h->saved_ns)
        ix->epoch_ns = h->epoch_ns;
    else
        ix->epoch_ns = now_ns >= age ? now_ns - age : 0;
}

lr_status
lr__index_load(lr_index *idx, const uint8_t *buf, size_t len, uint64_t now_ns)
{
    LR_RETURN_IF(idx == NULL || (buf == NULL && len != 0), LR_EINVAL);
    LR_RETURN_IF(idx->holds != 0 || lr__index_emap_live(idx) != 0, LR_ESTATE);
    LR_TRY(lr__index_judge(idx, now_ns));
    struct header h;
    LR_TRY(read_header(idx, buf, len, &h));
    struct lr__mem m = idx->mem;
    /* tmp: depth and order (2 n), first (n + 1), made (n), ids or leaves
     * (2 holds) */
    struct state st = { .m = &m,
                        .n_nodes = h.n_nodes,
                        .n_holds = h.n_holds,
                        .n_emap = h.n_emap,
                        .tmp_n =
                            4 * (size_t)h.n_nodes + 1 + 2 * (size_t)h.n_holds };
    lr_status s = state_alloc(&st);
    struct lr__rd r = { buf + STATE_HEADER, buf + len - STATE_SUM, false };
    /* carved only once tmp exists: no arithmetic on a null pointer */
    uint32_t *depth = NULL, *order = NULL, *first = NULL, *made = NULL;
    uint32_t *scratch = NULL;
    if (s == LR_OK) {
        depth = st.tmp;
        order = depth + h.n_nodes;
        first = order + h.n_nodes;
        made = first + h.n_nodes + 1;
        scratch = made + h.n_nodes;
    }
    if (s == LR_OK)
        s = read_records(&r, &h, &st);
    if (s == LR_OK)
        s = topo_order(&st, depth, order);
    if (s == LR_OK)
        s = check_state(&st, first);
    if (s == LR_OK && new_ids(idx, &st, scratch) > idx->n_ifree)
        s = LR_ELIMIT;
    /* at worst a run a node and a span a hold */
    if (s == LR_OK)
        s = lr__index_reserve(idx, h.n_nodes, h.n_nodes, h.n_holds);
    if (s == LR_OK)
        s = lr__index_hent_room(idx, LR_NIL, h.n_nodes);
    if (s == LR_OK && h.n_emap > 0)
        s = lr__index_emap_reserve(idx, h.n_emap);
    if (s == LR_OK) {
        s = load_nodes(idx, &st, order, first, made);
        if (s != LR_OK)
            unmake_nodes(idx, made, h.n_nodes);
    }
    if (s == LR_OK) {
        load_epoch(idx, &h, now_ns);
        load_apply(idx, &st, order, first, (struct leaf *)(void *)scratch);
        lr__index_settle(idx, lr__index_tick(idx, now_ns));
    }
    state_free(&st);
    return s;
}
