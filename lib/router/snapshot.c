/* lr_router_snapshot / lr_router_restore: a router's learned state as one
 * versioned, checksummed blob, so that a gateway replica that restarts
 * resumes where it stopped instead of routing blind.
 *
 * Format, version 1, integers little-endian:
 *
 *   off  size  field
 *     0     4  magic "LRSN"
 *     4     2  version (1)
 *     6     2  flags (0)
 *     8     4  block_tokens
 *    12     4  n_sections
 *    16     8  saved_ns: the host time of the snapshot
 *    24     8  replica id of the router that wrote it (informational)
 *    32        n_sections x { u32 tag; u32 reserved (0); u64 length;
 *                             length bytes }
 *   end-8   8  XXH3_64bits_withSeed(bytes [0, end-8), "LRSNAPS1")
 *
 * Sections, each at most once, in any order; a tag this version does not
 * know is skipped (a later writer may add one without a new version):
 *
 *   INST  u32 n; n x { u32 id; u32 class; u8 flags (1 draining, 2 caches
 *         prefixes); f64 initial RTT ms; u8 has_rtt; u64 RTT EWMA ns
 *         (rounded); u16 name length; name }               (required)
 *   INDX  the prefix index (index_state.c's format)        (required)
 *   KSEQ  u32 n; n x { u32 id; u8 flags (1 a batch applied, 2 gap open);
 *         u64 next sequence number; f64 last engine timestamp }
 *   PEER  u32 n; n x { u64 replica id; u64 journal mark of its last
 *         delta applied }
 *   GORG  f64 w_rtt, f64 w_queue, f64 sigma: GORGO's tuned weights
 *   ADPT  u32 n; n x { f64 theta[6]; f64 w_mean; f64 P[6][6]; u32 count }:
 *         adaptive's calibrated TTFT model per class
 *   LODE  Lodestar's network in service (lr_mlp_save's format)
 *
 * A restore builds every part it replaces on the side (a new index, ring
 * and load tracker, the names, the source and peer tables, the network)
 * and commits only when all of them are made: nothing before the commit
 * touches the router, and nothing in it can fail. */
#include <math.h>

#include "common/lr_hash.h"
#include "common/wire.h"
#include "index/vllm.h"
#include "learn/learner.h"
#include "libroute/lr_ring.h"
#include "router/router_impl.h"

#define SNAP_MAGIC "LRSN"
#define SNAP_VERSION 1
#define SNAP_HEADER 32
#define SNAP_SUM LR__FRAME_SUM
#define SECTION_HEADER 16
#define LR_SEED_SNAP 0x4c52534e41505331ull /* "LRSNAPS1" */

#define TAG(a, b, c, d)                                     \
    ((uint32_t)(uint8_t)(a) | (uint32_t)(uint8_t)(b) << 8 | \
     (uint32_t)(uint8_t)(c) << 16 | (uint32_t)(uint8_t)(d) << 24)
#define T_INST TAG('I', 'N', 'S', 'T')
#define T_INDX TAG('I', 'N', 'D', 'X')
#define T_KSEQ TAG('K', 'S', 'E', 'Q')
#define T_PEER TAG('P', 'E', 'E', 'R')
#define T_GORG TAG('G', 'O', 'R', 'G')
#define T_ADPT TAG('A', 'D', 'P', 'T')
#define T_LODE TAG('L', 'O', 'D', 'E')

#define IF_DRAINING 1u
#define IF_CACHING 2u
#define KF_HAS 1u
#define KF_GAP 2u

/* ---- snapshot ---------------------------------------------------------------- */

/* The blobs of the parts that write their own format. */
/* What a snapshot writes: the router, the time, and the parts saved by
 * their own formats. */
struct parts {
    const lr_router *r;
    uint64_t now_ns;
    lr_blob *index, *model;
};

static void
section(struct lr__wr *w, uint32_t tag, size_t len)
{
    lr__wr_u32(w, tag);
    lr__wr_u32(w, 0);
    lr__wr_u64(w, len);
}

static void
write_inst(struct lr__wr *w, const lr_router *r)
{
    lr__wr_u32(w, r->n_inst);
    for (uint32_t id = 0; id < r->max_inst; id++) {
        const struct lr__rinst *in = &r->inst[id];
        if (!in->live)
            continue;
        lr_candidate v;
        memset(&v, 0, sizeof v);
        (void)LR_NEVER(lr__load_fill(r->ld, id, 0, 0, UINT64_MAX, 0, &v) !=
                       LR_OK);
        double rtt_ns = 0;
        bool has_rtt = lr__load_rtt(r->ld, id, &rtt_ns);
        lr__wr_u32(w, id);
        lr__wr_u32(w, v.instance_class);
        lr__wr_u8(w, (uint8_t)((in->draining ? IF_DRAINING : 0) |
                               (v.prefix_caching ? IF_CACHING : 0)));
        lr__wr_f64(w, r->init_rtt_ms[id]);
        lr__wr_u8(w, has_rtt);
        lr__wr_u64(w, has_rtt ? (uint64_t)llround(rtt_ns) : 0);
        lr__wr_u16(w, (uint16_t)in->name_len);
        lr__wr_bytes(w, in->name, in->name_len);
    }
}

static uint32_t
kseq_count(const lr_router *r)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < r->max_inst; id++)
        n += r->inst[id].live && r->src[id].has;
    return n;
}

static void
write_kseq(struct lr__wr *w, const lr_router *r)
{
    lr__wr_u32(w, kseq_count(r));
    for (uint32_t id = 0; id < r->max_inst; id++) {
        const struct lr__kvsrc *k = &r->src[id];
        if (!r->inst[id].live || !k->has)
            continue;
        lr__wr_u32(w, id);
        lr__wr_u8(w, (uint8_t)(KF_HAS | (k->gap ? KF_GAP : 0)));
        lr__wr_u64(w, k->next);
        lr__wr_f64(w, k->last_ts);
    }
}

static void
write_peers(struct lr__wr *w, const lr_router *r)
{
    uint32_t n = lr__peers_marks(&r->peers, NULL, NULL, 0);
    lr__wr_u32(w, n);
    for (uint32_t i = 0; i < r->peers.max; i++) {
        const struct lr__peer *p = &r->peers.p[i];
        if (p->id == 0 || !p->has_mark)
            continue;
        lr__wr_u64(w, p->id);
        lr__wr_u64(w, p->mark);
    }
}

static void
write_adaptive(struct lr__wr *w, const lr_router *r)
{
    lr__wr_u32(w, LR_LOAD_MAX_CLASSES);
    for (uint32_t c = 0; c < LR_LOAD_MAX_CLASSES; c++) {
        const struct lr__calib *k = &r->ad.cls[c];
        for (int i = 0; i < LR__CALIB_DIM; i++) {
            lr__wr_f64(w, k->theta[i]);
            lr__wr_f64(w, k->bv[i]);
            lr__wr_f64(w, k->prior[i]);
            lr__wr_f64(w, k->ridge[i]);
            for (int j = 0; j < LR__CALIB_DIM; j++)
                lr__wr_f64(w, k->A[i][j]);
        }
        lr__wr_f64(w, k->w_mean);
        lr__wr_u32(w, k->n);
    }
}

/* One section, measured first (w->p NULL) for its length. */
static void
put_section(struct lr__wr *w, uint32_t tag, const lr_router *r,
            void (*fn)(struct lr__wr *, const lr_router *))
{
    struct lr__wr m = { NULL, 0 };
    fn(&m, r);
    section(w, tag, m.n);
    struct lr__wr sub = { w->p != NULL ? w->p + w->n : NULL, 0 };
    fn(&sub, r);
    w->n += sub.n;
}

static void
put_blob(struct lr__wr *w, uint32_t tag, const lr_blob *b)
{
    section(w, tag, lr_blob_size(b));
    lr__wr_bytes(w, lr_blob_data(b), lr_blob_size(b));
}

static void
write_gorgo(struct lr__wr *w, const lr_router *r)
{
    double v[3] = { 0, 0, 0 };
    (void)lr_cost_get_param(r->gorgo, LR_COST_W_RTT, &v[0]);
    (void)lr_cost_get_param(r->gorgo, LR_COST_W_QUEUE, &v[1]);
    (void)lr_cost_get_param(r->gorgo, LR_COST_SIGMA, &v[2]);
    for (int i = 0; i < 3; i++)
        lr__wr_f64(w, v[i]);
}

/* The frame's body (lr__frame_blob writes its head and sum). */
static void
write_snapshot(struct lr__wr *w, const void *arg)
{
    const struct parts *pt = arg;
    const lr_router *r = pt->r;
    uint32_t n_sec = 5 + (r->ad.rq != NULL) + (pt->model != NULL);
    lr__wr_u16(w, 0);
    lr__wr_u32(w, r->block_tokens);
    lr__wr_u32(w, n_sec);
    lr__wr_u64(w, pt->now_ns);
    lr__wr_u64(w, r->opt.replica_id);
    put_section(w, T_INST, r, write_inst);
    put_blob(w, T_INDX, pt->index);
    put_section(w, T_KSEQ, r, write_kseq);
    put_section(w, T_PEER, r, write_peers);
    put_section(w, T_GORG, r, write_gorgo);
    if (r->ad.rq != NULL)
        put_section(w, T_ADPT, r, write_adaptive);
    if (pt->model != NULL)
        put_blob(w, T_LODE, pt->model);
}

static lr_status
snapshot_locked(lr_router *r, uint64_t now_ns, lr_blob **out)
{
    struct parts pt = { .r = r, .now_ns = now_ns };
    lr_status st = lr__index_save(r->ix, now_ns, &pt.index);
    lr_mlp *net = st == LR_OK ? lr__lodestar_model(&r->ls) : NULL;
    if (net != NULL)
        st = lr_mlp_save(net, &pt.model);
    if (st == LR_OK)
        st = lr__frame_blob(&r->mem, SNAP_MAGIC, SNAP_VERSION, LR_SEED_SNAP,
                            write_snapshot, &pt, out);
    lr_blob_destroy(pt.index);
    lr_blob_destroy(pt.model);
    return st;
}

lr_status
lr_router_snapshot(lr_router *r, uint64_t now_ns, lr_blob **out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    lr__router_lock(r);
    lr_status st = lr__router_clock(r, now_ns, false); /* changes nothing */
    if (st == LR_OK)
        st = snapshot_locked(r, now_ns, out);
    return lr__router_release(r, st);
}

/* ---- restore ----------------------------------------------------------------- */

struct sec {
    const uint8_t *p;
    size_t n;
    bool has;
};

struct rinst {
    uint32_t id, cls;
    uint8_t flags, has_rtt;
    double init_rtt_ms;
    uint64_t rtt_ns;
    const uint8_t *name;
    uint16_t len;
    char *copy; /* the name, allocated for the commit */
};

/* Everything a restore builds before it commits. */
struct restore {
    struct lr__mem *m;
    uint32_t max_inst;
    struct sec s[7];
    uint32_t n_inst;
    struct rinst *inst;
    lr_index *ix;
    lr_ring *ring;
    lr_load *ld;
    struct lr__kvsrc *src;
    struct lr__peers peers;
    bool has_gorgo;
    double gorgo[3];
    bool has_calib;
    struct lr__calib calib[LR_LOAD_MAX_CLASSES];
    struct lr__adaptive ad; /* made here when the router has none */
    lr_mlp *net;
};

enum {
    S_INST,
    S_INDX,
    S_KSEQ,
    S_PEER,
    S_GORG,
    S_ADPT,
    S_LODE
};

static int
section_index(uint32_t tag)
{
    static const uint32_t tags[] = { T_INST, T_INDX, T_KSEQ, T_PEER,
                                     T_GORG, T_ADPT, T_LODE };
    for (int i = 0; i < 7; i++)
        if (tags[i] == tag)
            return i;
    return -1;
}

static void
restore_free(struct restore *rs)
{
    if (rs->inst != NULL)
        for (uint32_t i = 0; i < rs->n_inst; i++)
            if (rs->inst[i].copy != NULL)
                lr__free(rs->m, rs->inst[i].copy, rs->inst[i].len + 1u);
    lr__free(rs->m, rs->inst, (size_t)rs->n_inst * sizeof *rs->inst);
    lr__free(rs->m, rs->src, (size_t)rs->max_inst * sizeof *rs->src);
    lr__peers_free(&rs->peers, rs->m);
    lr__adaptive_free(&rs->ad, rs->m);
    lr_index_destroy(rs->ix);
    lr_ring_destroy(rs->ring);
    lr_load_destroy(rs->ld);
    lr_mlp_destroy(rs->net);
}

static lr_status
read_sections(const lr_router *r, const uint8_t *buf, size_t len,
              struct restore *rs)
{
    LR_TRY(lr__frame_check(buf, len, SNAP_HEADER, SNAP_MAGIC, SNAP_VERSION,
                           LR_SEED_SNAP, NULL));
    LR_RETURN_IF(lr__get_u16(buf + 6) != 0, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u32(buf + 8) != r->block_tokens, LR_ENOTSUP);
    uint32_t n = lr__get_u32(buf + 12);
    struct lr__rd rd = { buf + SNAP_HEADER, buf + len - SNAP_SUM, false };
    for (uint32_t i = 0; i < n; i++) {
        uint32_t tag = lr__rd_u32(&rd);
        uint32_t reserved = lr__rd_u32(&rd);
        uint64_t n_bytes = lr__rd_u64(&rd);
        LR_RETURN_IF(rd.bad || reserved != 0, LR_ECORRUPT);
        LR_RETURN_IF(n_bytes > (uint64_t)(rd.end - rd.p), LR_ECORRUPT);
        const uint8_t *p;
        (void)lr__rd_take(&rd, (size_t)n_bytes, &p);
        int k = section_index(tag);
        if (k < 0)
            continue; /* a later writer's section */
        LR_RETURN_IF(rs->s[k].has, LR_ECORRUPT);
        rs->s[k] = (struct sec){ p, (size_t)n_bytes, true };
    }
    LR_RETURN_IF(rd.p != rd.end, LR_ECORRUPT);
    LR_RETURN_IF(!rs->s[S_INST].has || !rs->s[S_INDX].has, LR_ECORRUPT);
    return LR_OK;
}

static struct rinst *
inst_by_id(const struct restore *rs, uint32_t id)
{
    for (uint32_t i = 0; i < rs->n_inst; i++)
        if (rs->inst[i].id == id)
            return &rs->inst[i];
    return NULL;
}

/* INST: checked record by record (ids and names distinct). */
static lr_status
read_inst(struct restore *rs)
{
    struct lr__rd rd = { rs->s[S_INST].p, rs->s[S_INST].p + rs->s[S_INST].n,
                         false };
    uint32_t n = lr__rd_u32(&rd);
    LR_RETURN_IF(rd.bad, LR_ECORRUPT);
    LR_RETURN_IF(n > (size_t)(rd.end - rd.p) / 28, LR_ECORRUPT);
    LR_RETURN_IF(n > rs->max_inst, LR_ELIMIT);
    rs->inst = lr__calloc(rs->m, n, sizeof *rs->inst);
    LR_RETURN_IF(n > 0 && rs->inst == NULL, LR_ENOMEM);
    rs->n_inst = n;
    for (uint32_t i = 0; i < n; i++) {
        struct rinst *x = &rs->inst[i];
        x->id = lr__rd_u32(&rd);
        x->cls = lr__rd_u32(&rd);
        x->flags = lr__rd_u8(&rd);
        x->init_rtt_ms = lr__rd_f64(&rd);
        x->has_rtt = lr__rd_u8(&rd);
        x->rtt_ns = lr__rd_u64(&rd);
        x->len = lr__rd_u16(&rd);
        LR_RETURN_IF(!lr__rd_take(&rd, x->len, &x->name), LR_ECORRUPT);
        LR_RETURN_IF(x->id >= rs->max_inst, LR_ELIMIT);
        LR_RETURN_IF(x->cls >= LR_LOAD_MAX_CLASSES || x->flags > 3 ||
                         x->has_rtt > 1,
                     LR_ECORRUPT);
        LR_RETURN_IF(!(x->init_rtt_ms >= 0 &&
                       x->init_rtt_ms <= LR_LOAD_MAX_RTT_NS / 1e6),
                     LR_ECORRUPT);
        LR_RETURN_IF(x->rtt_ns > LR_LOAD_MAX_RTT_NS, LR_ECORRUPT);
        LR_RETURN_IF(!lr__router_name_ok((const char *)x->name, x->len),
                     LR_ECORRUPT);
        for (uint32_t j = 0; j < i; j++)
            LR_RETURN_IF(rs->inst[j].id == x->id ||
                             (rs->inst[j].len == x->len &&
                              memcmp(rs->inst[j].name, x->name, x->len) == 0),
                         LR_ECORRUPT);
    }
    LR_RETURN_IF(rd.p != rd.end, LR_ECORRUPT);
    return LR_OK;
}

/* New index, ring and load tracker holding the snapshot's instances; the
 * names copied for the commit. */
static lr_status
build_parts(const lr_router *r, struct restore *rs, uint64_t now_ns)
{
    LR_TRY(lr__router_make_parts(r, &rs->ix, &rs->ring, &rs->ld));
    for (uint32_t i = 0; i < rs->n_inst; i++) {
        struct rinst *x = &rs->inst[i];
        x->copy = lr__alloc(rs->m, x->len + 1u);
        LR_RETURN_IF(x->copy == NULL, LR_ENOMEM);
        memcpy(x->copy, x->name, x->len);
        x->copy[x->len] = '\0';
        if (!(x->flags & IF_DRAINING))
            LR_TRY(lr_ring_add(rs->ring, x->copy, x->id));
        LR_TRY(lr_load_add_instance(rs->ld, x->id, x->cls,
                                    (x->flags & IF_CACHING) != 0));
        if (x->has_rtt)
            LR_TRY(lr_load_observe_rtt(rs->ld, x->id, x->rtt_ns));
    }
    LR_TRY(lr__index_load(rs->ix, rs->s[S_INDX].p, rs->s[S_INDX].n, now_ns));
    /* every route is an instance's of the snapshot */
    lr_index_stats is;
    memset(&is, 0, sizeof is);
    is.struct_size = sizeof is;
    LR_TRY(lr_index_get_stats(rs->ix, &is));
    uint64_t known = 0, blocks;
    for (uint32_t i = 0; i < rs->n_inst; i++)
        known +=
            lr_index_instance_blocks(rs->ix, rs->inst[i].id, &blocks) == LR_OK;
    LR_RETURN_IF(is.instances != known, LR_ECORRUPT);
    return LR_OK;
}

/* The engines' timestamps are judged as a batch's are (vllm.h's bound);
 * the router's time of each is the restore's: the engine's clock is
 * judged from there on (lr__kvsrc_window). */
static lr_status
read_kseq(struct restore *rs, uint64_t now_ns)
{
    rs->src = lr__calloc(rs->m, rs->max_inst, sizeof *rs->src);
    LR_RETURN_IF(rs->src == NULL, LR_ENOMEM);
    if (!rs->s[S_KSEQ].has)
        return LR_OK;
    struct lr__rd rd = { rs->s[S_KSEQ].p, rs->s[S_KSEQ].p + rs->s[S_KSEQ].n,
                         false };
    uint32_t n = lr__rd_u32(&rd);
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
        uint32_t id = lr__rd_u32(&rd);
        uint8_t f = lr__rd_u8(&rd);
        uint64_t next = lr__rd_u64(&rd);
        double ts = lr__rd_f64(&rd);
        LR_RETURN_IF(rd.bad || inst_by_id(rs, id) == NULL, LR_ECORRUPT);
        LR_RETURN_IF(!(f & KF_HAS) || (f & ~(KF_HAS | KF_GAP)), LR_ECORRUPT);
        LR_RETURN_IF(!(ts >= 0 && ts <= LR__KV_TS_MAX) || rs->src[id].has,
                     LR_ECORRUPT);
        rs->src[id].has = 1;
        rs->src[id].gap = (f & KF_GAP) != 0;
        rs->src[id].next = next;
        rs->src[id].last_ts = ts;
        rs->src[id].last_at_ns = now_ns;
    }
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    return LR_OK;
}

static lr_status
read_peers(const lr_router *r, struct restore *rs)
{
    LR_TRY(lr__peers_init(&rs->peers, rs->m, r->peers.max, r->max_inst,
                          r->peers.self, r->peers.ttl_ns));
    if (!rs->s[S_PEER].has)
        return LR_OK;
    struct lr__rd rd = { rs->s[S_PEER].p, rs->s[S_PEER].p + rs->s[S_PEER].n,
                         false };
    uint32_t n = lr__rd_u32(&rd);
    LR_RETURN_IF(n > rs->peers.max, LR_ELIMIT);
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
        uint64_t id = lr__rd_u64(&rd);
        uint64_t mark = lr__rd_u64(&rd);
        LR_RETURN_IF(rd.bad, LR_ECORRUPT);
        /* a peer twice is corrupt; our own id: a snapshot of ourselves */
        LR_RETURN_IF(id == 0, LR_ECORRUPT);
        if (id == rs->peers.self)
            continue;
        uint64_t had = lr__peers_marks(&rs->peers, NULL, NULL, 0);
        LR_TRY(lr__peers_set_mark(&rs->peers, id, mark));
        LR_RETURN_IF(lr__peers_marks(&rs->peers, NULL, NULL, 0) == had,
                     LR_ECORRUPT);
    }
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    return LR_OK;
}

static lr_status
read_gorgo(struct restore *rs)
{
    if (!rs->s[S_GORG].has)
        return LR_OK;
    static const int32_t keys[3] = { LR_COST_W_RTT, LR_COST_W_QUEUE,
                                     LR_COST_SIGMA };
    struct lr__rd rd = { rs->s[S_GORG].p, rs->s[S_GORG].p + rs->s[S_GORG].n,
                         false };
    for (int i = 0; i < 3; i++) {
        rs->gorgo[i] = lr__rd_f64(&rd);
        lr_bounds b = lr_cost_param_bounds(LR_COST_GORGO, keys[i]);
        LR_RETURN_IF(!(rs->gorgo[i] >= b.lo && rs->gorgo[i] <= b.hi),
                     LR_ECORRUPT);
    }
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    rs->has_gorgo = true;
    return LR_OK;
}

static bool
finite_calib(const struct lr__calib *k)
{
    for (int i = 0; i < LR__CALIB_DIM; i++) {
        /* every term is >= 0; the fit solves with A + diag(ridge) */
        if (!(k->theta[i] >= 0) || !isfinite(k->theta[i]) ||
            !isfinite(k->bv[i]) || !isfinite(k->prior[i]) ||
            !(k->ridge[i] >= 0) || !isfinite(k->ridge[i]))
            return false;
        for (int j = 0; j < LR__CALIB_DIM; j++)
            if (!isfinite(k->A[i][j]))
                return false;
    }
    return isfinite(k->w_mean);
}

static lr_status
read_adaptive(const lr_router *r, struct restore *rs)
{
    if (!rs->s[S_ADPT].has)
        return LR_OK;
    struct lr__rd rd = { rs->s[S_ADPT].p, rs->s[S_ADPT].p + rs->s[S_ADPT].n,
                         false };
    LR_RETURN_IF(lr__rd_u32(&rd) != LR_LOAD_MAX_CLASSES, LR_ECORRUPT);
    for (uint32_t c = 0; c < LR_LOAD_MAX_CLASSES; c++) {
        struct lr__calib *k = &rs->calib[c];
        for (int i = 0; i < LR__CALIB_DIM; i++) {
            k->theta[i] = lr__rd_f64(&rd);
            k->bv[i] = lr__rd_f64(&rd);
            k->prior[i] = lr__rd_f64(&rd);
            k->ridge[i] = lr__rd_f64(&rd);
            for (int j = 0; j < LR__CALIB_DIM; j++)
                k->A[i][j] = lr__rd_f64(&rd);
        }
        k->w_mean = lr__rd_f64(&rd);
        k->n = lr__rd_u32(&rd);
        LR_RETURN_IF(rd.bad || !finite_calib(k), LR_ECORRUPT);
    }
    LR_RETURN_IF(rd.p != rd.end, LR_ECORRUPT);
    rs->has_calib = true;
    if (r->ad.rq == NULL) /* the tables, made on the side */
        LR_TRY(lr__adaptive_setup(&rs->ad, rs->m, r->max_inst, r->ls.max_req));
    return LR_OK;
}

static lr_status
read_model(struct restore *rs)
{
    if (!rs->s[S_LODE].has)
        return LR_OK;
    LR_TRY(lr_mlp_load(rs->s[S_LODE].p, rs->s[S_LODE].n, &rs->m->a, &rs->net));
    LR_RETURN_IF(lr_mlp_n_inputs(rs->net) != LR_LODESTAR_FEATURES, LR_ECORRUPT);
    return LR_OK;
}

/* The last fallible step: Lodestar's learner (made if the router has
 * none) takes the network. On failure a learner made here goes again. */
static lr_status
install_model(lr_router *r, struct restore *rs)
{
    if (rs->net == NULL)
        return LR_OK;
    bool had = atomic_load(&r->ls.learner) != NULL;
    LR_TRY(lr__lodestar_setup(&r->ls, &r->mem));
    lr_status st = lr__learner_install(atomic_load(&r->ls.learner), rs->net);
    if (st != LR_OK) {
        if (!had)
            lr__lodestar_free(&r->ls, &r->mem);
        return st;
    }
    rs->net = NULL; /* the learner's now */
    return LR_OK;
}

static void
swap_ptr(void *a, void *b)
{
    void *t;
    memcpy(&t, a, sizeof t);
    memcpy(a, b, sizeof t);
    memcpy(b, &t, sizeof t);
}

/* Cannot fail: everything was made. The old parts go to rs for freeing. */
static void
commit(lr_router *r, struct restore *rs)
{
    swap_ptr(&r->ix, &rs->ix);
    swap_ptr(&r->ring, &rs->ring);
    swap_ptr(&r->ld, &rs->ld);
    for (uint32_t i = 0; i < rs->n_inst; i++) {
        struct rinst *x = &rs->inst[i];
        lr__router_put_instance(r, x->id, x->copy, x->len,
                                (x->flags & IF_DRAINING) != 0, x->init_rtt_ms);
        x->copy = NULL;
    }
    swap_ptr(&r->src, &rs->src);
    struct lr__peers tp = r->peers;
    r->peers = rs->peers;
    rs->peers = tp;
    if (rs->has_gorgo) {
        (void)lr_cost_set_param(r->gorgo, LR_COST_W_RTT, rs->gorgo[0]);
        (void)lr_cost_set_param(r->gorgo, LR_COST_W_QUEUE, rs->gorgo[1]);
        (void)lr_cost_set_param(r->gorgo, LR_COST_SIGMA, rs->gorgo[2]);
        lr__router_sync_gorgo(r);
    }
    if (rs->has_calib) {
        if (r->ad.rq == NULL) {
            struct lr__adaptive t = r->ad;
            r->ad = rs->ad;
            rs->ad = t;
        }
        memcpy(r->ad.cls, rs->calib, sizeof rs->calib);
    }
}

lr_status
lr_router_restore(lr_router *r, const uint8_t *buf, size_t len, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL || (buf == NULL && len != 0), LR_EINVAL);
    lr__router_lock(r);
    struct restore rs;
    memset(&rs, 0, sizeof rs);
    rs.m = &r->mem;
    rs.max_inst = r->max_inst;
    lr_status st = r->n_inst != 0 ? LR_ESTATE : LR_OK;
    if (st == LR_OK)
        st = lr__router_clock(r, now_ns, true);
    if (st == LR_OK)
        st = read_sections(r, buf, len, &rs);
    if (st == LR_OK)
        st = read_inst(&rs);
    if (st == LR_OK)
        st = build_parts(r, &rs, now_ns);
    if (st == LR_OK)
        st = read_kseq(&rs, now_ns);
    if (st == LR_OK)
        st = read_peers(r, &rs);
    if (st == LR_OK)
        st = read_gorgo(&rs);
    if (st == LR_OK)
        st = read_adaptive(r, &rs);
    if (st == LR_OK)
        st = read_model(&rs);
    if (st == LR_OK)
        st = install_model(r, &rs);
    if (st == LR_OK) {
        commit(r, &rs);
        lr__router_clock_take(r, now_ns);
    }
    restore_free(&rs);
    return lr__router_release(r, st);
}
