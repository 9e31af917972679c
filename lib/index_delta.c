/* lr_index, deltas between gateway replicas: the journal position
 * (lr_index_mark), the wire codec (lr_index_export_delta,
 * lr_index_import_delta, lr__index_import_delta_if) and its varints. The
 * index layout is pictured at the top of index.c. */
#include "index_impl.h"

uint64_t
lr_index_mark(const lr_index *idx)
{
    return idx == NULL ? 0 : idx->j_seq;
}

/* ------------------------------------------------------------------------ */
/* deltas                                                                    */
/* ------------------------------------------------------------------------ */
/*
 * Wire format, version 1, all integers little-endian:
 *
 *   off  size  field
 *     0     4  magic "LRDX"
 *     4     2  version (1)
 *     6     2  flags (0)
 *     8     4  block_tokens of the exporting index
 *    12     4  n_nodes
 *    16     4  n_routes
 *    20     4  reserved (0)
 *    24     8  since mark
 *    32     8  mark at export
 *    40        n_nodes x { u64 key; varint parent }   parent: 0 = a root
 *              block, p = node p - 1 of this blob (always an earlier one)
 *              n_routes x { u32 instance id; varint node }
 *   end-8   8  XXH3_64bits_withSeed(bytes [0, end-8), "LRDELTA1")
 *
 * Every route's whole chain is in the blob, so an importer that never saw
 * the prefix can still place it; chains shared by several routes are sent
 * once. Varints are unsigned LEB128 of at most 5 bytes.
 */
#define DELTA_MAGIC "LRDX"
#define DELTA_VERSION 1
#define DELTA_HEADER 40

struct vec32 {
    uint32_t *v;
    size_t n, cap;
};

static lr_status
vec_push(struct lr__mem *m, struct vec32 *v, uint32_t x)
{
    if (v->n == v->cap) {
        size_t want = v->cap ? v->cap * 2 : 64;
        size_t ob, nb;
        if (!lr__mul_size(v->cap, 4, &ob) || !lr__mul_size(want, 4, &nb))
            return LR_ENOMEM;
        uint32_t *p = lr__realloc(m, v->v, ob, nb);
        if (p == NULL)
            return LR_ENOMEM;
        v->v = p;
        v->cap = want;
    }
    v->v[v->n++] = x;
    return LR_OK;
}

static void
vec_free(struct lr__mem *m, struct vec32 *v)
{
    lr__free(m, v->v, v->cap * 4);
    v->v = NULL;
    v->n = v->cap = 0;
}

/* Temporary open-addressing map u64 -> u32 for export/import. */
struct tmap {
    uint64_t *k;
    uint32_t *v;
    size_t size, count;
};

static lr_status
tmap_init(struct lr__mem *m, struct tmap *t, size_t expect)
{
    size_t size = 64;
    while (size < expect * 2)
        size *= 2;
    t->k = lr__calloc(m, size, sizeof(uint64_t));
    t->v = lr__calloc(m, size, sizeof(uint32_t));
    t->size = size;
    t->count = 0;
    if (t->k == NULL || t->v == NULL)
        return LR_ENOMEM;
    return LR_OK;
}

static void
tmap_free(struct lr__mem *m, struct tmap *t)
{
    lr__free(m, t->k, t->size * sizeof(uint64_t));
    lr__free(m, t->v, t->size * sizeof(uint32_t));
    t->k = NULL;
    t->v = NULL;
}

/* Keys are stored + 1 so that 0 marks an empty slot. */
static uint32_t *
tmap_slot(const struct tmap *t, uint64_t key, bool *found)
{
    size_t i = (size_t)lr__mix64(key, 0x746d6170) & (t->size - 1);
    for (;;) {
        if (t->k[i] == 0) {
            *found = false;
            return &t->v[i];
        }
        if (t->k[i] == key + 1) {
            *found = true;
            return &t->v[i];
        }
        i = (i + 1) & (t->size - 1);
    }
}

static lr_status
tmap_put(struct lr__mem *m, struct tmap *t, uint64_t key, uint32_t val)
{
    if ((t->count + 1) * 2 > t->size) {
        struct tmap nt;
        lr_status st = tmap_init(m, &nt, t->size);
        if (st != LR_OK) {
            tmap_free(m, &nt);
            return st;
        }
        for (size_t i = 0; i < t->size; i++) {
            if (t->k[i] == 0)
                continue;
            bool f;
            *tmap_slot(&nt, t->k[i] - 1, &f) = t->v[i];
            nt.k[(size_t)(tmap_slot(&nt, t->k[i] - 1, &f) - nt.v)] = t->k[i];
            nt.count++;
        }
        tmap_free(m, t);
        *t = nt;
    }
    bool f;
    uint32_t *v = tmap_slot(t, key, &f);
    if (!f) {
        t->k[(size_t)(v - t->v)] = key + 1;
        t->count++;
    }
    *v = val;
    return LR_OK;
}

static size_t
varint_len(uint32_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *
varint_put(uint8_t *p, uint32_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static bool
varint_get(const uint8_t **p, const uint8_t *end, uint32_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*p >= end)
            return false;
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (v > UINT32_MAX || (i > 0 && b == 0))
                return false; /* overlong or too large */
            *out = (uint32_t)v;
            return true;
        }
    }
    return false;
}

static lr_status
collect_routes(const lr_index *ix, struct lr__mem *m, uint64_t since,
               struct vec32 *rn, struct vec32 *rs)
{
    uint64_t oldest = ix->j_seq > ix->j_cap ? ix->j_seq - ix->j_cap : 0;
    if (since == 0 || since < oldest) {
        for (uint32_t n = 0; n < ix->n_top; n++) {
            const struct node *nd = &ix->nodes[n];
            if (nd->h.inst == INST_FREE)
                continue;
            for (uint32_t x = LR_NIL;;) {
                const struct hold *h = x == LR_NIL ? &nd->h : &ix->xh[x].h;
                if (!(h->bits & HB_REMOTE) &&
                    ((h->bits & HB_ANCHOR) || nchild(h) == 0)) {
                    LR_TRY(vec_push(m, rn, n));
                    LR_TRY(vec_push(m, rs, h->inst));
                }
                x = x == LR_NIL ? nd->more : ix->xh[x].next;
                if (x == LR_NIL)
                    break;
            }
        }
        return LR_OK;
    }
    for (uint64_t q = since; q < ix->j_seq; q++) {
        const struct jent *e = &ix->journal[q % ix->j_cap];
        uint32_t n = node_find(ix, e->key);
        uint32_t s = lr__index_inst_lookup(ix, e->inst_id);
        if (n == LR_NIL || s == LR_NIL)
            continue;
        uint32_t ref = hold_find(ix, n, s);
        if (ref == LR_NIL || (H(ix, ref)->bits & HB_REMOTE))
            continue;
        LR_TRY(vec_push(m, rn, n));
        LR_TRY(vec_push(m, rs, s));
    }
    return LR_OK;
}

lr_status
lr_index_export_delta(const lr_index *idx, uint64_t since_mark, lr_blob **out,
                      uint64_t *mark_out)
{
    LR_RETURN_IF(idx == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    LR_RETURN_IF(since_mark > idx->j_seq, LR_EINVAL);
    const lr_index *ix = idx;
    struct lr__mem m = ix->mem; /* temporaries only; the index is const */
    struct vec32 rn = { 0 }, rs = { 0 }, order = { 0 }, chain = { 0 };
    struct tmap seen = { 0 }, rseen = { 0 };
    lr_status st = collect_routes(ix, &m, since_mark, &rn, &rs);
    if (st == LR_OK)
        st = tmap_init(&m, &seen, rn.n);
    if (st == LR_OK)
        st = tmap_init(&m, &rseen, rn.n);
    /* Emit each chain root-first, skipping nodes already emitted. */
    size_t n_routes = 0;
    for (size_t r = 0; st == LR_OK && r < rn.n; r++) {
        bool f;
        uint64_t rk = ((uint64_t)rn.v[r] << 32) | rs.v[r];
        tmap_slot(&rseen, rk, &f);
        if (f) {
            rs.v[r] = LR_NIL; /* duplicate route */
            continue;
        }
        st = tmap_put(&m, &rseen, rk, 0);
        n_routes++;
        chain.n = 0;
        for (uint32_t c = rn.v[r]; st == LR_OK && c != LR_NIL;
             c = ix->nodes[c].parent) {
            tmap_slot(&seen, c, &f);
            if (f)
                break;
            st = vec_push(&m, &chain, c);
        }
        while (st == LR_OK && chain.n > 0) {
            uint32_t c = chain.v[--chain.n];
            st = tmap_put(&m, &seen, c, (uint32_t)order.n);
            if (st == LR_OK)
                st = vec_push(&m, &order, c);
        }
    }
    size_t size = DELTA_HEADER + 8;
    if (st == LR_OK) {
        for (size_t i = 0; i < order.n; i++) {
            uint32_t p = ix->nodes[order.v[i]].parent;
            bool f = false;
            uint32_t pi = p == LR_NIL ? 0 : *tmap_slot(&seen, p, &f) + 1;
            size += 8 + varint_len(pi);
        }
        for (size_t r = 0; r < rn.n; r++) {
            if (rs.v[r] == LR_NIL)
                continue;
            bool f;
            size += 4 + varint_len(*tmap_slot(&seen, rn.v[r], &f));
        }
    }
    if (st == LR_OK && (order.n > UINT32_MAX || n_routes > UINT32_MAX))
        st = LR_ENOMEM;
    uint8_t *buf = NULL;
    lr_blob *blob = NULL;
    if (st == LR_OK)
        st = lr__blob_new(&ix->mem, size, &blob, &buf);
    if (st == LR_OK) {
        memcpy(buf, DELTA_MAGIC, 4);
        lr__put_u16(buf + 4, DELTA_VERSION);
        lr__put_u16(buf + 6, 0);
        lr__put_u32(buf + 8, ix->B);
        lr__put_u32(buf + 12, (uint32_t)order.n);
        lr__put_u32(buf + 16, (uint32_t)n_routes);
        lr__put_u32(buf + 20, 0);
        lr__put_u64(buf + 24, since_mark);
        lr__put_u64(buf + 32, ix->j_seq);
        uint8_t *p = buf + DELTA_HEADER;
        for (size_t i = 0; i < order.n; i++) {
            const struct node *nd = &ix->nodes[order.v[i]];
            bool f = false;
            uint32_t pi = nd->parent == LR_NIL
                              ? 0
                              : *tmap_slot(&seen, nd->parent, &f) + 1;
            lr__put_u64(p, nd->key);
            p = varint_put(p + 8, pi);
        }
        for (size_t r = 0; r < rn.n; r++) {
            if (rs.v[r] == LR_NIL)
                continue;
            bool f;
            lr__put_u32(p, ix->insts[rs.v[r]].id);
            p = varint_put(p + 4, *tmap_slot(&seen, rn.v[r], &f));
        }
        lr__put_u64(p, lr__hash(buf, size - 8, LR_SEED_DELTA));
        assert(p + 8 == buf + size);
        *out = blob;
        if (mark_out != NULL)
            *mark_out = ix->j_seq;
    }
    vec_free(&m, &rn);
    vec_free(&m, &rs);
    vec_free(&m, &order);
    vec_free(&m, &chain);
    tmap_free(&m, &seen);
    tmap_free(&m, &rseen);
    return st;
}

struct delta {
    uint32_t n_nodes, n_routes;
    uint64_t *keys;
    uint32_t *par;
    uint32_t *rid, *rnode;
    uint32_t *node_of; /* index node per blob node, LR_NIL if absent */
};

static void
delta_free(struct lr__mem *m, struct delta *d)
{
    lr__free(m, d->keys, (size_t)d->n_nodes * 8);
    lr__free(m, d->par, (size_t)d->n_nodes * 4);
    lr__free(m, d->node_of, (size_t)d->n_nodes * 4);
    lr__free(m, d->rid, (size_t)d->n_routes * 4);
    lr__free(m, d->rnode, (size_t)d->n_routes * 4);
}

static lr_status
delta_parse(const lr_index *ix, struct lr__mem *m, const uint8_t *buf,
            size_t len, struct delta *d)
{
    LR_RETURN_IF(len < DELTA_HEADER + 8, LR_ECORRUPT);
    LR_RETURN_IF(memcmp(buf, DELTA_MAGIC, 4) != 0, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u16(buf + 4) != DELTA_VERSION, LR_EVERSION);
    LR_RETURN_IF(lr__hash(buf, len - 8, LR_SEED_DELTA) !=
                     lr__get_u64(buf + len - 8),
                 LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u16(buf + 6) != 0 || lr__get_u32(buf + 20) != 0,
                 LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u32(buf + 8) != ix->B, LR_ENOTSUP);
    uint32_t nn = lr__get_u32(buf + 12), nr = lr__get_u32(buf + 16);
    size_t body = len - DELTA_HEADER - 8;
    LR_RETURN_IF(nn > body / 9 || nr > body / 5, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u64(buf + 24) > lr__get_u64(buf + 32), LR_ECORRUPT);
    d->n_nodes = nn;
    d->n_routes = nr;
    d->keys = lr__calloc(m, nn, 8);
    d->par = lr__calloc(m, nn, 4);
    d->node_of = lr__calloc(m, nn, 4);
    d->rid = lr__calloc(m, nr, 4);
    d->rnode = lr__calloc(m, nr, 4);
    if (d->keys == NULL || d->par == NULL || d->node_of == NULL ||
        d->rid == NULL || d->rnode == NULL)
        return LR_ENOMEM;
    const uint8_t *p = buf + DELTA_HEADER, *end = buf + len - 8;
    for (uint32_t i = 0; i < nn; i++) {
        uint32_t v;
        LR_RETURN_IF(end - p < 9, LR_ECORRUPT);
        d->keys[i] = lr__get_u64(p);
        p += 8;
        LR_RETURN_IF(!varint_get(&p, end, &v) || v > i, LR_ECORRUPT);
        d->par[i] = v == 0 ? LR_NIL : v - 1;
    }
    for (uint32_t r = 0; r < nr; r++) {
        LR_RETURN_IF(end - p < 5, LR_ECORRUPT);
        d->rid[r] = lr__get_u32(p);
        p += 4;
        LR_RETURN_IF(d->rid[r] == LR_INSTANCE_NONE, LR_ECORRUPT);
        LR_RETURN_IF(!varint_get(&p, end, &d->rnode[r]) || d->rnode[r] >= nn,
                     LR_ECORRUPT);
    }
    LR_RETURN_IF(p != end, LR_ECORRUPT);
    return LR_OK;
}

/* Check the blob against itself and the index before anything changes:
 * no key twice, and a key we already hold hangs from the same parent. */
static lr_status
delta_check(const lr_index *ix, struct lr__mem *m, struct delta *d)
{
    struct tmap keys = { 0 };
    lr_status st = tmap_init(m, &keys, d->n_nodes);
    for (uint32_t i = 0; st == LR_OK && i < d->n_nodes; i++) {
        bool f;
        tmap_slot(&keys, d->keys[i], &f);
        if (f) {
            st = LR_ECORRUPT;
            break;
        }
        st = tmap_put(m, &keys, d->keys[i], i);
        uint32_t n = node_find(ix, d->keys[i]);
        d->node_of[i] = n;
        if (st != LR_OK || n == LR_NIL)
            continue;
        uint32_t ip = ix->nodes[n].parent;
        uint32_t bp = d->par[i];
        if ((ip == LR_NIL) != (bp == LR_NIL) ||
            (ip != LR_NIL && ix->nodes[ip].key != d->keys[bp]))
            st = LR_ECORRUPT;
    }
    tmap_free(m, &keys);
    return st;
}

lr_status
lr_index_import_delta(lr_index *idx, const uint8_t *buf, size_t len,
                      uint64_t now_ns)
{
    return lr__index_import_delta_if(idx, buf, len, now_ns, NULL, NULL);
}

lr_status
lr__index_import_delta_if(lr_index *idx, const uint8_t *buf, size_t len,
                          uint64_t now_ns, bool (*keep)(void *, uint32_t),
                          void *ctx)
{
    LR_RETURN_IF(idx == NULL || (buf == NULL && len != 0), LR_EINVAL);
    lr_index *ix = idx;
    struct lr__mem *m = &ix->mem;
    struct delta d = { 0 };
    struct tmap pairs = { 0 }, ids = { 0 };
    struct vec32 chain = { 0 };
    lr_status st = delta_parse(ix, m, buf, len, &d);
    if (st == LR_OK)
        st = delta_check(ix, m, &d);
    if (st == LR_OK)
        st = tmap_init(m, &pairs, 64);
    if (st == LR_OK)
        st = tmap_init(m, &ids, 16);
    /* Count what could be new: distinct (instance, node) pairs on the
     * routes' chains, and blob nodes the index lacks. */
    uint64_t new_nodes = 0, new_ids = 0;
    for (uint32_t r = 0; st == LR_OK && r < d.n_routes; r++) {
        bool f;
        if (keep != NULL && !keep(ctx, d.rid[r]))
            continue;
        tmap_slot(&ids, d.rid[r], &f);
        if (!f) {
            st = tmap_put(m, &ids, d.rid[r], 0);
            if (lr__index_inst_lookup(ix, d.rid[r]) == LR_NIL)
                new_ids++;
        }
        for (uint32_t j = d.rnode[r]; st == LR_OK && j != LR_NIL;
             j = d.par[j]) {
            uint64_t pk = ((uint64_t)d.rid[r] << 32) | j;
            tmap_slot(&pairs, pk, &f);
            if (f)
                break;
            if (pairs.count >= ix->capacity) {
                st = LR_ELIMIT;
                break;
            }
            st = tmap_put(m, &pairs, pk, 0);
            if (d.node_of[j] == LR_NIL) {
                d.node_of[j] = LR_NIL - 1; /* counted */
                new_nodes++;
            }
        }
    }
    if (st == LR_OK && new_ids > ix->n_ifree)
        st = LR_ELIMIT;
    if (st == LR_OK)
        st = lr__index_reserve(ix, new_nodes, pairs.count);
    /* room for the longest chain a route can climb */
    for (uint32_t i = 0; st == LR_OK && i < d.n_nodes && chain.cap < d.n_nodes;
         i++)
        st = vec_push(m, &chain, 0);
    if (st != LR_OK)
        goto out;

    /* phase 2: cannot fail from here on */
    for (uint32_t i = 0; i < d.n_nodes; i++)
        if (d.node_of[i] == LR_NIL - 1)
            d.node_of[i] = LR_NIL;
    uint32_t tick = lr__index_tick(ix, now_ns);
    for (uint32_t r = 0; r < d.n_routes; r++) {
        if (keep != NULL && !keep(ctx, d.rid[r]))
            continue;
        uint32_t s = lr__index_inst_lookup(ix, d.rid[r]);
        if (s == LR_NIL)
            s = lr__index_inst_add(ix, d.rid[r]);
        /* climb to the first blob node s already holds, then create
         * holds downward, parents first */
        chain.n = 0;
        for (uint32_t j = d.rnode[r];
             j != LR_NIL && (d.node_of[j] == LR_NIL ||
                             hold_find(ix, d.node_of[j], s) == LR_NIL);
             j = d.par[j])
            chain.v[chain.n++] = j;
        while (chain.n > 0) {
            uint32_t j = chain.v[--chain.n];
            uint32_t pj = d.par[j];
            uint32_t pn = pj == LR_NIL ? LR_NIL : d.node_of[pj];
            if (d.node_of[j] == LR_NIL)
                d.node_of[j] = lr__index_node_new(ix, d.keys[j], pn);
            lr__index_hold_new(ix, d.node_of[j], s, HB_REMOTE, tick);
            if (pn != LR_NIL)
                H(ix, hold_find(ix, pn, s))->bits++;
        }
        uint32_t ref = hold_find(ix, d.node_of[d.rnode[r]], s);
        H(ix, ref)->bits |= HB_ANCHOR;
        lr__index_touch(ix, ref, tick);
    }
    /* Holds created as parents got their child in the same pass; the
     * route ends were touched, so every leaf is listed (invariant 3). */
    lr__index_expire_all(ix, tick);
    lr__index_evict_to_capacity(ix);
out:
    vec_free(m, &chain);
    tmap_free(m, &pairs);
    tmap_free(m, &ids);
    delta_free(m, &d);
    return st;
}
