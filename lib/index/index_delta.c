/* lr_index, deltas between gateway replicas: the journal position
 * (lr_index_mark), the wire codec (lr_index_export_delta,
 * lr_index_import_delta, lr__index_import_delta_if) and its varints. An
 * export reads the journal of LOCAL learns (index_learn.c), or every LOCAL
 * anchor and leaf; an import is a mutator of its own, in the three phases
 * a learn has: check and reserve, make nodes and grant holds, settle. */
#include "common/wire.h"
#include "index/index.h"
#include "index/index_evict.h"
#include "index/index_find.h"
#include "index/index_learn.h"
#include "index/index_store.h"

uint64_t
lr_index_mark(const lr_index *idx)
{
    return idx == NULL ? 0 : idx->j_seq;
}

/* ------------------------------------------------------------------------ */
/* deltas                                                                    */
/* ------------------------------------------------------------------------ */
/*
 * Wire format, version 3, all integers little-endian (version 2 had no
 * origin and no ages: still imported; version 1 carried the block keys of
 * format 1: an importer refuses it, LR_EVERSION):
 *
 *   off  size  field
 *     0     4  magic "LRDX"
 *     4     2  version (3)
 *     6     2  flags: 0x8000 the sum is a MAC (wire.h, a peer key)
 *     8     4  block_tokens of the exporting index
 *    12     4  n_nodes
 *    16     4  n_routes
 *    20     4  reserved (0)
 *    24     8  since mark
 *    32     8  mark at export
 *    40     8  origin: the exporter's replica id (0: none)  [version 3]
 *    48        n_nodes x { u64 key; varint parent }   parent: 0 = a root
 *              block, p = node p - 1 of this blob (always an earlier one)
 *              n_routes x { u32 instance id; varint node; varint age }
 *              age [version 3]: ticks of 2^24 ns since the route was last
 *              used, at the exporter's latest time; the importer stamps
 *              the route as used that long ago (never newer than it
 *              had), so that a full export does not make old routes look
 *              fresh
 *   end-8   8  XXH3_64bits_withSeed(bytes [0, end-8), "LRDELTA1"), or
 *              with a peer key SipHash-2-4(key, bytes [0, end-8))
 *
 * Every route's whole chain is in the blob, so an importer that never saw
 * the prefix can still place it; chains shared by several routes are sent
 * once. Varints are unsigned LEB128 of at most 5 bytes.
 */
#define DELTA_MAGIC "LRDX"
#define MAGIC_LEN 4
#define DELTA_VERSION 3
#define DELTA_VERSION_NOAGE 2 /* no origin, no ages: still imported */
#define OFF_VERSION 4         /* header field offsets, as in the table above */
#define OFF_FLAGS 6
#define OFF_BLOCK 8
#define OFF_NODES 12
#define OFF_ROUTES 16
#define OFF_RESERVED 20
#define OFF_SINCE 24
#define OFF_MARK 32
#define OFF_ORIGIN 40
#define DELTA_HEADER_NOAGE 40
#define DELTA_HEADER 48
#define DELTA_SUM 8              /* the trailing checksum */
#define KEY_BYTES 8              /* a node record's key */
#define ID_BYTES 4               /* a route record's instance id */
#define NODE_MIN (KEY_BYTES + 1) /* a record with a 1-byte varint */
#define ROUTE_MIN (ID_BYTES + 1)
#define ROUTE_MIN_AGE (ID_BYTES + 2)
#define VARINT_MAX 5 /* bytes of a 32-bit LEB128 */

struct vec32 {
    uint32_t *v;
    uint32_t n, cap;
};

/* Lengths stay below LR_NIL, so positions in a vec32 fit a table. */
static lr_status
vec_reserve(struct lr__mem *m, struct vec32 *v, uint64_t need)
{
    if (need >= LR_NIL)
        return LR_ENOMEM;
    return lr__index_grow(m, (void **)&v->v, &v->cap, (uint32_t)need,
                          sizeof *v->v, LR_NIL - 1);
}

static lr_status
vec_push(struct lr__mem *m, struct vec32 *v, uint32_t x)
{
    LR_TRY(vec_reserve(m, v, (uint64_t)v->n + 1));
    v->v[v->n++] = x;
    return LR_OK;
}

static void
vec_free(struct lr__mem *m, struct vec32 *v)
{
    lr__free(m, v->v, (size_t)v->cap * sizeof *v->v);
    v->v = NULL;
    v->n = v->cap = 0;
}

/* ---- temporary tables ---------------------------------------------------- */

/* The codec's temporary sets and maps are lr__tables of positions into
 * arrays the codec keeps anyway (routes, emitted nodes, blob nodes), so
 * they store no keys of their own. Hashes are keyed by the handle's seed:
 * an imported blob is network input (B26). */
#define DELTA_TABLE_SALT 0x746d6170u /* "tmap" */

static inline uint64_t
thash(const lr_index *ix, uint64_t x)
{
    return lr__mix64(x, ix->seed ^ DELTA_TABLE_SALT);
}

static inline uint64_t
pair_key(uint32_t a, uint32_t b)
{
    return ((uint64_t)a << 32) | b;
}

/* Add position v under hv, growing the table first. */
static lr_status
tab_add(struct lr__mem *m, struct lr__table *t, uint64_t hv, uint32_t v)
{
    LR_TRY(lr__table_reserve(t, m, 1));
    lr__table_insert(t, hv, v);
    return LR_OK;
}

static bool
u32_eq(const void *a, uint64_t x, uint32_t i)
{
    return ((const uint32_t *)a)[i] == x;
}

/* A position i with a[i] == x, or LR_NIL. */
static uint32_t
find_u32(const lr_index *ix, const struct lr__table *t, const uint32_t *a,
         uint32_t x)
{
    return lr__table_find(t, thash(ix, x), x, u32_eq, a);
}

static bool
u64_eq(const void *a, uint64_t x, uint32_t i)
{
    return ((const uint64_t *)a)[i] == x;
}

/* Two parallel arrays of a table of pairs. */
struct pairs {
    const uint32_t *a, *b;
};

static bool
pair_eq(const void *ctx, uint64_t xy, uint32_t i)
{
    const struct pairs *p = ctx;
    return pair_key(p->a[i], p->b[i]) == xy;
}

/* A position i with a[i] == x and b[i] == y, or LR_NIL. */
static uint32_t
find_pair(const lr_index *ix, const struct lr__table *t, const uint32_t *a,
          const uint32_t *b, uint32_t x, uint32_t y)
{
    struct pairs p = { a, b };
    uint64_t xy = pair_key(x, y);
    return lr__table_find(t, thash(ix, xy), xy, pair_eq, &p);
}

/* ---- varints and the journal --------------------------------------------- */

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
    for (int i = 0; i < VARINT_MAX; i++) {
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

/* Whether slot n (remembered earlier: its node may be gone and the slot
 * used again) holds a live node under `key`. */
static inline bool
node_live(const lr_index *ix, uint32_t n, uint64_t key)
{
    if (n == LR_NIL || (n >> CHUNK_SHIFT) >= ix->cpool.top)
        return false;
    const struct chunk *c = &ix->chunks[n >> CHUNK_SHIFT];
    return c->run != LR_NIL &&
           c->base + (n & CHUNK_MASK) < ix->runs[c->run].len &&
           ix->keys[n] == key;
}

static lr_status
collect_routes(const lr_index *ix, struct lr__mem *m, uint64_t since,
               struct vec32 *rn, struct vec32 *rs)
{
    uint64_t oldest = ix->j_seq > ix->j_cap ? ix->j_seq - ix->j_cap : 0;
    if (since == 0 || since < oldest) {
        /* every LOCAL anchor or leaf: span bottoms (plain blocks are
         * neither), and every block of an all-anchor span */
        for (uint32_t x = 0; x < ix->spool.top; x++) {
            const struct span *S = &ix->sp[x];
            if (S->inst == INST_FREE || (S->bits & HB_REMOTE))
                continue;
            uint32_t from = (S->flags & SF_ANCHORS) ? S->from : S->to - 1;
            if (from == S->to - 1 && !((S->bits & HB_ANCHOR) || nchild(S) == 0))
                continue;
            uint32_t n = lr__index_node_at(ix, S->run, S->to - 1);
            for (uint32_t p = S->to; p-- > from;) {
                LR_TRY(vec_push(m, rn, n));
                LR_TRY(vec_push(m, rs, S->inst));
                if (p > from)
                    n = lr__index_node_parent(ix, n);
            }
        }
        return LR_OK;
    }
    for (uint64_t q = since; q < ix->j_seq; q++) {
        const struct jent *e = &ix->journal[q % ix->j_cap];
        uint32_t n = node_live(ix, e->node, e->key) ? e->node : LR_NIL;
        uint32_t s = lr__index_inst_lookup(ix, e->inst_id);
        if (n == LR_NIL || s == LR_NIL)
            continue;
        uint32_t x = hold_span(ix, node_run(ix, n), node_off(ix, n), s);
        if (x == LR_NIL || (ix->sp[x].bits & HB_REMOTE))
            continue;
        LR_TRY(vec_push(m, rn, n));
        LR_TRY(vec_push(m, rs, s));
    }
    return LR_OK;
}

/* ---- export -------------------------------------------------------------- */

struct export_tmp {
    struct lr__mem m;       /* the index's allocator: temporaries only */
    struct vec32 rn, rs;    /* routes: node and instance slot */
    struct vec32 order;     /* nodes to emit, parents first */
    struct vec32 chain;     /* scratch: one route's unemitted chain */
    struct lr__table seen;  /* node -> its position in order */
    struct lr__table rseen; /* (node, slot) -> its first route */
    uint32_t n_routes;      /* distinct routes */
};

/* Drop duplicate routes (rs = LR_NIL) and list every route's chain in
 * `order` root-first, each node once. */
static lr_status
export_order(const lr_index *ix, struct export_tmp *x)
{
    for (uint32_t r = 0; r < x->rn.n; r++) {
        uint32_t n = x->rn.v[r], s = x->rs.v[r];
        if (find_pair(ix, &x->rseen, x->rn.v, x->rs.v, n, s) != LR_NIL) {
            x->rs.v[r] = LR_NIL; /* duplicate route */
            continue;
        }
        LR_TRY(tab_add(&x->m, &x->rseen, thash(ix, pair_key(n, s)), r));
        x->n_routes++;
        x->chain.n = 0;
        for (uint32_t c = n; c != LR_NIL; c = lr__index_node_parent(ix, c)) {
            if (find_u32(ix, &x->seen, x->order.v, c) != LR_NIL)
                break;
            LR_TRY(vec_push(&x->m, &x->chain, c));
        }
        while (x->chain.n > 0) {
            uint32_t c = x->chain.v[--x->chain.n];
            LR_TRY(vec_push(&x->m, &x->order, c));
            LR_TRY(tab_add(&x->m, &x->seen, thash(ix, c), x->order.n - 1));
        }
    }
    return LR_OK;
}

/* Ticks since slot s last used node n, at the index's latest time. */
static uint32_t
route_age(const lr_index *ix, uint32_t n, uint32_t s)
{
    uint32_t r = node_run(ix, n), p = node_off(ix, n);
    uint32_t x = hold_span(ix, r, p, s);
    if (LR_NEVER(x == LR_NIL))
        return 0;
    const struct span *S = &ix->sp[x];
    uint32_t stamp = p == S->to - 1 ? S->stamp : S->stamp_top;
    return ix->last_tick > stamp ? ix->last_tick - stamp : 0;
}

/* Wire reference of node n: its position in order plus one. */
static uint32_t
emitted(const lr_index *ix, const struct export_tmp *x, uint32_t n)
{
    return n == LR_NIL ? 0 : find_u32(ix, &x->seen, x->order.v, n) + 1;
}

static size_t
export_size(const lr_index *ix, const struct export_tmp *x)
{
    size_t size = DELTA_HEADER + DELTA_SUM;
    for (uint32_t i = 0; i < x->order.n; i++)
        size += KEY_BYTES +
                varint_len(
                    emitted(ix, x, lr__index_node_parent(ix, x->order.v[i])));
    for (uint32_t r = 0; r < x->rn.n; r++)
        if (x->rs.v[r] != LR_NIL)
            size += ID_BYTES + varint_len(emitted(ix, x, x->rn.v[r]) - 1) +
                    varint_len(route_age(ix, x->rn.v[r], x->rs.v[r]));
    return size;
}

static void
export_write(const lr_index *ix, const struct export_tmp *x, uint64_t since,
             uint8_t *buf, size_t size)
{
    memcpy(buf, DELTA_MAGIC, MAGIC_LEN);
    lr__put_u16(buf + OFF_VERSION, DELTA_VERSION);
    lr__put_u16(buf + OFF_FLAGS, 0);
    lr__put_u32(buf + OFF_BLOCK, ix->B);
    lr__put_u32(buf + OFF_NODES, x->order.n);
    lr__put_u32(buf + OFF_ROUTES, x->n_routes);
    lr__put_u32(buf + OFF_RESERVED, 0);
    lr__put_u64(buf + OFF_SINCE, since);
    lr__put_u64(buf + OFF_MARK, ix->j_seq);
    lr__put_u64(buf + OFF_ORIGIN, ix->replica_id);
    uint8_t *p = buf + DELTA_HEADER;
    for (uint32_t i = 0; i < x->order.n; i++) {
        uint32_t n = x->order.v[i];
        lr__put_u64(p, ix->keys[n]);
        p = varint_put(p + KEY_BYTES,
                       emitted(ix, x, lr__index_node_parent(ix, n)));
    }
    for (uint32_t r = 0; r < x->rn.n; r++) {
        if (x->rs.v[r] == LR_NIL)
            continue;
        lr__put_u32(p, ix->insts[x->rs.v[r]].id);
        p = varint_put(p + ID_BYTES, emitted(ix, x, x->rn.v[r]) - 1);
        p = varint_put(p, route_age(ix, x->rn.v[r], x->rs.v[r]));
    }
    lr__put_u64(p, lr__hash(buf, size - DELTA_SUM, LR_SEED_DELTA));
    assert(p + DELTA_SUM == buf + size);
}

lr_status
lr_index_export_delta(const lr_index *idx, uint64_t since_mark, lr_blob **out,
                      uint64_t *mark_out)
{
    LR_RETURN_IF(idx == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    LR_RETURN_IF(since_mark > idx->j_seq, LR_EINVAL);
    /* zero-filled tables may be freed; each is inited before any lookup */
    struct export_tmp x = { .m = idx->mem };
    lr_status st = collect_routes(idx, &x.m, since_mark, &x.rn, &x.rs);
    if (st == LR_OK)
        st = lr__table_init(&x.rseen, &x.m, x.rn.n);
    if (st == LR_OK)
        st = lr__table_init(&x.seen, &x.m, x.rn.n);
    if (st == LR_OK)
        st = export_order(idx, &x);
    lr_blob *blob = NULL;
    uint8_t *buf = NULL;
    size_t size = st == LR_OK ? export_size(idx, &x) : 0;
    if (st == LR_OK)
        st = lr__blob_new(&idx->mem, size, &blob, &buf);
    if (st == LR_OK) {
        export_write(idx, &x, since_mark, buf, size);
        *out = blob;
        if (mark_out != NULL)
            *mark_out = idx->j_seq;
    }
    vec_free(&x.m, &x.rn);
    vec_free(&x.m, &x.rs);
    vec_free(&x.m, &x.order);
    vec_free(&x.m, &x.chain);
    lr__table_free(&x.seen, &x.m);
    lr__table_free(&x.rseen, &x.m);
    return st;
}

/* ---- import -------------------------------------------------------------- */

struct delta {
    uint32_t n_nodes, n_routes;
    uint64_t *keys;
    uint32_t *par;
    uint32_t *rid, *rnode;
    uint32_t *rage;    /* ticks since last use; 0 in a version 2 delta */
    uint32_t *node_of; /* index node per blob node, LR_NIL if absent */
};

static void
delta_free(struct lr__mem *m, struct delta *d)
{
    lr__free(m, d->keys, (size_t)d->n_nodes * sizeof *d->keys);
    lr__free(m, d->par, (size_t)d->n_nodes * sizeof *d->par);
    lr__free(m, d->node_of, (size_t)d->n_nodes * sizeof *d->node_of);
    lr__free(m, d->rid, (size_t)d->n_routes * sizeof *d->rid);
    lr__free(m, d->rnode, (size_t)d->n_routes * sizeof *d->rnode);
    lr__free(m, d->rage, (size_t)d->n_routes * sizeof *d->rage);
}

lr_status
lr__index_delta_peek(const uint8_t *buf, size_t len, const uint8_t *key,
                     uint64_t *origin, uint64_t *since, uint64_t *mark,
                     size_t *header)
{
    LR_RETURN_IF(buf == NULL || len < MAGIC_LEN + 2, LR_ECORRUPT);
    LR_RETURN_IF(memcmp(buf, DELTA_MAGIC, MAGIC_LEN) != 0, LR_ECORRUPT);
    uint16_t version = lr__get_u16(buf + OFF_VERSION);
    LR_RETURN_IF(version != DELTA_VERSION && version != DELTA_VERSION_NOAGE,
                 LR_EVERSION);
    size_t hdr = version == DELTA_VERSION ? DELTA_HEADER : DELTA_HEADER_NOAGE;
    LR_RETURN_IF(len < hdr + DELTA_SUM, LR_ECORRUPT);
    LR_RETURN_IF(!lr__frame_sum_ok(buf, len, LR_SEED_DELTA, key), LR_ECORRUPT);
    LR_RETURN_IF((lr__get_u16(buf + OFF_FLAGS) & ~LR__FRAME_KEYED) != 0 ||
                     lr__get_u32(buf + OFF_RESERVED) != 0,
                 LR_ECORRUPT);
    *since = lr__get_u64(buf + OFF_SINCE);
    *mark = lr__get_u64(buf + OFF_MARK);
    LR_RETURN_IF(*since > *mark, LR_ECORRUPT);
    *origin = version == DELTA_VERSION ? lr__get_u64(buf + OFF_ORIGIN) : 0;
    *header = hdr;
    return LR_OK;
}

static lr_status
delta_parse(const lr_index *ix, struct lr__mem *m, const uint8_t *buf,
            size_t len, const uint8_t *key, struct delta *d)
{
    uint64_t origin, since, mark;
    size_t hdr;
    LR_TRY(lr__index_delta_peek(buf, len, key, &origin, &since, &mark, &hdr));
    LR_RETURN_IF(lr__get_u32(buf + OFF_BLOCK) != ix->B, LR_ENOTSUP);
    uint32_t nn = lr__get_u32(buf + OFF_NODES);
    uint32_t nr = lr__get_u32(buf + OFF_ROUTES);
    size_t body = len - hdr - DELTA_SUM;
    bool ages = hdr == DELTA_HEADER;
    LR_RETURN_IF(nn > body / NODE_MIN ||
                     nr > body / (ages ? ROUTE_MIN_AGE : ROUTE_MIN),
                 LR_ECORRUPT);
    d->n_nodes = nn;
    d->n_routes = nr;
    d->keys = lr__calloc(m, nn, sizeof *d->keys);
    d->par = lr__calloc(m, nn, sizeof *d->par);
    d->node_of = lr__calloc(m, nn, sizeof *d->node_of);
    d->rid = lr__calloc(m, nr, sizeof *d->rid);
    d->rnode = lr__calloc(m, nr, sizeof *d->rnode);
    d->rage = lr__calloc(m, nr, sizeof *d->rage);
    if (d->keys == NULL || d->par == NULL || d->node_of == NULL ||
        d->rid == NULL || d->rnode == NULL || d->rage == NULL)
        return LR_ENOMEM;
    const uint8_t *p = buf + hdr, *end = buf + len - DELTA_SUM;
    for (uint32_t i = 0; i < nn; i++) {
        uint32_t v;
        LR_RETURN_IF(end - p < NODE_MIN, LR_ECORRUPT);
        d->keys[i] = lr__get_u64(p);
        p += KEY_BYTES;
        LR_RETURN_IF(!varint_get(&p, end, &v) || v > i, LR_ECORRUPT);
        d->par[i] = v == 0 ? LR_NIL : v - 1;
    }
    for (uint32_t r = 0; r < nr; r++) {
        LR_RETURN_IF(end - p < ROUTE_MIN, LR_ECORRUPT);
        d->rid[r] = lr__get_u32(p);
        p += ID_BYTES;
        LR_RETURN_IF(d->rid[r] == LR_INSTANCE_NONE, LR_ECORRUPT);
        LR_RETURN_IF(!varint_get(&p, end, &d->rnode[r]) || d->rnode[r] >= nn,
                     LR_ECORRUPT);
        LR_RETURN_IF(ages && !varint_get(&p, end, &d->rage[r]), LR_ECORRUPT);
    }
    LR_RETURN_IF(p != end, LR_ECORRUPT);
    return LR_OK;
}

/* Check the blob against itself and the index before anything changes:
 * no key twice, and a key we already hold hangs from the same parent. */
static lr_status
delta_check(const lr_index *ix, struct lr__mem *m, struct delta *d)
{
    struct lr__table keys; /* key -> blob node */
    LR_TRY(lr__table_init(&keys, m, d->n_nodes));
    uint32_t probes = 0; /* not counted: a delta is not a match */
    lr_status st = LR_OK;
    for (uint32_t i = 0; st == LR_OK && i < d->n_nodes; i++) {
        uint64_t hv = thash(ix, d->keys[i]);
        if (lr__table_find(&keys, hv, d->keys[i], u64_eq, d->keys) != LR_NIL) {
            st = LR_ECORRUPT;
            break;
        }
        lr__table_insert(&keys, hv, i);
        /* parents come first: the node is its parent's child, if any */
        uint32_t bp = d->par[i];
        uint32_t pn = bp == LR_NIL ? LR_NIL : d->node_of[bp];
        uint32_t n = bp == LR_NIL || pn != LR_NIL
                         ? lr__index_child_of(ix, pn, d->keys[i], &probes)
                         : LR_NIL;
        d->node_of[i] = n;
        /* a key the index holds under another parent (one the table
         * holds; the others are out of reach, and as harmless) */
        if (n == LR_NIL && node_find(ix, d->keys[i]) != LR_NIL)
            st = LR_ECORRUPT;
    }
    lr__table_free(&keys, m);
    return st;
}

/* A blob node the index lacks, counted once by import_count. */
#define NODE_COUNTED (LR_NIL - 1)

struct import_tmp {
    struct delta d;
    bool (*keep)(void *, uint32_t);
    void *ctx;
    struct lr__table ids;   /* instance id -> a route carrying it */
    struct lr__table pairs; /* (id, blob node) -> position in prid/pnode */
    struct vec32 prid, pnode;
    struct vec32 chain; /* scratch of import_nodes and import_apply */
    struct vec32 made;  /* nodes import_nodes made, in order */
    uint64_t new_nodes, new_ids;
};

static bool
import_skips(const struct import_tmp *im, uint32_t r)
{
    return im->keep != NULL && !im->keep(im->ctx, im->d.rid[r]);
}

/* Phase 1: count what could be new, distinct (instance, node) pairs on
 * the routes' chains and blob nodes the index lacks. */
static lr_status
import_count(const lr_index *ix, struct lr__mem *m, struct import_tmp *im)
{
    struct delta *d = &im->d;
    for (uint32_t r = 0; r < d->n_routes; r++) {
        uint32_t id = d->rid[r];
        if (import_skips(im, r))
            continue;
        if (find_u32(ix, &im->ids, d->rid, id) == LR_NIL) {
            LR_TRY(tab_add(m, &im->ids, thash(ix, id), r));
            if (lr__index_inst_lookup(ix, id) == LR_NIL)
                im->new_ids++;
        }
        for (uint32_t j = d->rnode[r]; j != LR_NIL; j = d->par[j]) {
            if (find_pair(ix, &im->pairs, im->prid.v, im->pnode.v, id, j) !=
                LR_NIL)
                break;
            LR_RETURN_IF(im->pairs.count >= ix->capacity, LR_ELIMIT);
            LR_TRY(vec_push(m, &im->prid, id));
            LR_TRY(vec_push(m, &im->pnode, j));
            LR_TRY(tab_add(m, &im->pairs, thash(ix, pair_key(id, j)),
                           im->prid.n - 1));
            if (d->node_of[j] == LR_NIL) {
                d->node_of[j] = NODE_COUNTED;
                im->new_nodes++;
            }
        }
    }
    return LR_OK;
}

/* Phase 2a, undone by import_undo: the nodes the index lacks, in the
 * order the routes reach them (each route's missing chain, top down), so
 * that holder rooms can be counted run by run. Their slots go into
 * im->made. */
static void
import_nodes(lr_index *ix, struct import_tmp *im)
{
    struct delta *d = &im->d;
    for (uint32_t i = 0; i < d->n_nodes; i++)
        if (d->node_of[i] == NODE_COUNTED)
            d->node_of[i] = LR_NIL;
    for (uint32_t r = 0; r < d->n_routes; r++) {
        if (import_skips(im, r))
            continue;
        uint32_t *chain = im->chain.v, depth = 0;
        for (uint32_t j = d->rnode[r]; j != LR_NIL && d->node_of[j] == LR_NIL;
             j = d->par[j])
            chain[depth++] = j;
        while (depth > 0) {
            uint32_t j = chain[--depth];
            uint32_t pj = d->par[j];
            uint32_t pn = pj == LR_NIL ? LR_NIL : d->node_of[pj];
            d->node_of[j] = lr__index_node_new(ix, d->keys[j], pn);
            im->made.v[im->made.n++] = d->node_of[j];
        }
    }
}

/* Take back what import_nodes made, newest first: each is then the last
 * node of its run. Nothing else changed, so the index is as it was. */
static void
import_undo(lr_index *ix, struct import_tmp *im)
{
    while (im->made.n > 0)
        lr__index_node_pop(ix, im->made.v[--im->made.n]);
}

/* Phase 1b, after the nodes exist: room in each run's holder array for
 * the instances a route will give a hold there (distinct (id, run)
 * pairs of instances not holding the run yet). */
static lr_status
import_rooms(lr_index *ix, struct lr__mem *m, struct import_tmp *im)
{
    struct delta *d = &im->d;
    struct vec32 rid = { 0 }, rrun = { 0 };
    struct lr__table seen; /* (id, run) -> position in rid/rrun */
    lr_status st = lr__table_init(&seen, m, im->prid.n);
    for (uint32_t i = 0; st == LR_OK && i < im->prid.n; i++) {
        uint32_t id = im->prid.v[i];
        uint32_t r = node_run(ix, d->node_of[im->pnode.v[i]]);
        uint32_t s = lr__index_inst_lookup(ix, id);
        if ((s != LR_NIL && hent_of(ix, r, s) != NULL) ||
            find_pair(ix, &seen, rid.v, rrun.v, id, r) != LR_NIL)
            continue;
        st = vec_push(m, &rid, id);
        if (st == LR_OK)
            st = vec_push(m, &rrun, r);
        if (st == LR_OK)
            lr__table_insert(&seen, thash(ix, pair_key(id, r)), rid.n - 1);
    }
    /* a run's rooms at once: sort the runs and count each */
    if (st == LR_OK && rrun.n > 0)
        qsort(rrun.v, rrun.n, sizeof *rrun.v, lr__index_cmp_u32);
    for (uint32_t i = 0, k; st == LR_OK && i < rrun.n; i = k) {
        for (k = i + 1; k < rrun.n && rrun.v[k] == rrun.v[i]; k++)
            ;
        st = lr__index_hent_room(ix, rrun.v[i], k - i);
    }
    vec_free(m, &rid);
    vec_free(m, &rrun);
    lr__table_free(&seen, m);
    return st;
}

/* Phase 2b: cannot fail. Each route climbs to the first blob node its
 * instance already holds, then gets holds downward, parents first; the
 * route's end becomes an anchor and is stamped as used `age` ticks before
 * now (never newer than it was). */
static void
import_apply(lr_index *ix, struct import_tmp *im, uint32_t tick)
{
    struct delta *d = &im->d;
    for (uint32_t r = 0; r < d->n_routes; r++) {
        if (import_skips(im, r))
            continue;
        uint32_t s = lr__index_inst_lookup(ix, d->rid[r]);
        if (s == LR_NIL)
            s = lr__index_inst_add(ix, d->rid[r]);
        uint32_t *chain = im->chain.v, depth = 0;
        uint32_t j = d->rnode[r];
        for (; j != LR_NIL && !holds_node(ix, d->node_of[j], s); j = d->par[j])
            chain[depth++] = j;
        uint32_t used = tick > d->rage[r] ? tick - d->rage[r] : 0;
        uint32_t x;
        if (depth == 0) {
            uint32_t n = d->node_of[d->rnode[r]];
            x = lr__index_cut(
                ix, hold_span(ix, node_run(ix, n), node_off(ix, n), s),
                node_off(ix, n));
        } else {
            if (j != LR_NIL) { /* the block above gains a child */
                uint32_t n = d->node_of[j];
                uint32_t pr = node_run(ix, n), po = node_off(ix, n);
                ix->sp[lr__index_cut(ix, hold_span(ix, pr, po, s), po)].bits++;
            }
            uint32_t ns = 0;
            while (depth > 0) {
                uint32_t n = d->node_of[chain[--depth]];
                uint32_t nr = node_run(ix, n), no = node_off(ix, n);
                if (ns > 0 && ix->path[ns - 1].run == nr &&
                    ix->path[ns - 1].hi + 1 == no)
                    ix->path[ns - 1].hi = no;
                else
                    ix->path[ns++] = (struct seg){ nr, no, no };
            }
            x = lr__index_grant(ix, s, ix->path, ns, HB_REMOTE, used, NULL, 0,
                                0);
        }
        ix->sp[x].bits |= HB_ANCHOR;
        lr__index_touch_at(ix, x, used);
    }
    /* Holds created as parents got their child in the same pass; the
     * route ends were touched, so every leaf is listed (invariant 3). */
}

lr_status
lr_index_import_delta(lr_index *idx, const uint8_t *buf, size_t len,
                      uint64_t now_ns)
{
    return lr__index_import_delta_if(idx, buf, len, now_ns, NULL, NULL, NULL);
}

lr_status
lr__index_import_delta_if(lr_index *idx, const uint8_t *buf, size_t len,
                          uint64_t now_ns, bool (*keep)(void *, uint32_t),
                          void *ctx, const uint8_t *key)
{
    LR_RETURN_IF(idx == NULL || (buf == NULL && len != 0), LR_EINVAL);
    LR_TRY(lr__index_judge(idx, now_ns));
    uint64_t origin, since, mark;
    size_t hdr;
    if (idx->replica_id != 0 &&
        lr__index_delta_peek(buf, len, key, &origin, &since, &mark, &hdr) ==
            LR_OK &&
        origin == idx->replica_id)
        return LR_OK; /* our own, back from the bus */
    struct lr__mem *m = &idx->mem;
    struct import_tmp im = { .keep = keep, .ctx = ctx };
    lr__table_init(&im.ids, m, 0); /* no memory yet: cannot fail */
    lr__table_init(&im.pairs, m, 0);
    lr_status st = delta_parse(idx, m, buf, len, key, &im.d);
    if (st == LR_OK)
        st = delta_check(idx, m, &im.d);
    if (st == LR_OK)
        st = import_count(idx, m, &im);
    if (st == LR_OK && im.new_ids > idx->n_ifree)
        st = LR_ELIMIT;
    /* spans: one per pair at most, and per route a cut above and at its
     * end; a new node may start a run */
    if (st == LR_OK)
        st = lr__index_reserve(idx, im.new_nodes, im.new_nodes,
                               im.pairs.count + 2ull * im.d.n_routes);
    if (st == LR_OK) /* the longest chain a route can climb */
        st = vec_reserve(m, &im.chain, im.d.n_nodes);
    if (st == LR_OK)
        st = vec_reserve(m, &im.made, im.new_nodes);
    if (st == LR_OK)
        st = lr__index_scratch_path(idx, im.d.n_nodes + 1);
    if (st == LR_OK) /* holder arrays of the runs new nodes may start */
        st = lr__index_hent_room(idx, LR_NIL, (uint32_t)im.new_nodes);
    if (st == LR_OK) /* where the routes' ages put them in the lists */
        st = lr__index_lru_hints(idx);
    if (st == LR_OK) {
        import_nodes(idx, &im);
        st = import_rooms(idx, m, &im);
        if (st != LR_OK)
            import_undo(idx, &im);
    }
    if (st == LR_OK) {
        uint32_t tick = lr__index_tick(idx, now_ns);
        import_apply(idx, &im, tick);
        lr__index_settle(idx, tick);
    }
    vec_free(m, &im.prid);
    vec_free(m, &im.pnode);
    vec_free(m, &im.chain);
    vec_free(m, &im.made);
    lr__table_free(&im.ids, m);
    lr__table_free(&im.pairs, m);
    delta_free(m, &im.d);
    return st;
}
