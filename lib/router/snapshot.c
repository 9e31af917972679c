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
 *   MODL  u32 n; n x { u32 id; u32 adapter slots; u32 n_models; n_models
 *         x u64 model hash }: the instances that declared either
 *   PLCE  u32 n; n x { u32 id; u8 role; u32 node; u32 rack; u32 region }:
 *         the instances with a role or a placement
 *   and one section per policy state that keeps something (each state
 *   kind's save and load: GORG GORGO's tuned weights, gorgo.c; ADPT
 *   adaptive's calibrated TTFT model per class, adaptive.c; LODE
 *   Lodestar's network in service, lodestar.c)
 *
 * A restore builds every part it replaces on the side (a new index, ring
 * and load tracker, the names, the source and peer tables, each policy
 * state a section names) without the router's lock, then takes the lock
 * to judge the time and commit: nothing before the commit touches the
 * router, nothing in it can fail, and other calls wait only for the
 * swap, not for the build. */
#include <math.h>

#include "common/lr_hash.h"
#include "common/wire.h"
#include "index/vllm.h"
#include "learn/learner.h"
#include "libroute/lr_ring.h"
#include "parts/ring.h"
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
#define T_MODL TAG('M', 'O', 'D', 'L')
#define T_PLCE TAG('P', 'L', 'C', 'E')

#define IF_DRAINING 1u
#define IF_CACHING 2u
#define KF_HAS 1u
#define KF_GAP 2u

/* ---- snapshot ---------------------------------------------------------------- */

/* What a snapshot writes: the router, the time, and the parts and states
 * saved by their own formats. */
struct parts {
    const lr_router *r;
    uint64_t now_ns;
    lr_blob *index;
    lr_blob *state[LR__STATE_MAX]; /* NULL: nothing kept */
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

/* The instances' models and adapter slots (0.3; a reader before it skips
 * the section, a snapshot before it has none: every instance then serves
 * every model, its slots unknown). Residency is not kept: the next
 * reports and routes make it again. */
static uint32_t
modl_count(const lr_router *r)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < r->max_inst; id++)
        n += r->inst[id].live &&
             (r->inst[id].n_models > 0 || r->ad.inst[id]->max > 0);
    return n;
}

static void
write_modl(struct lr__wr *w, const lr_router *r)
{
    lr__wr_u32(w, modl_count(r));
    for (uint32_t id = 0; id < r->max_inst; id++) {
        const struct lr__rinst *in = &r->inst[id];
        if (!in->live || (in->n_models == 0 && r->ad.inst[id]->max == 0))
            continue;
        lr__wr_u32(w, id);
        lr__wr_u32(w, r->ad.inst[id]->max);
        lr__wr_u32(w, in->n_models);
        for (uint32_t j = 0; j < in->n_models; j++)
            lr__wr_u64(w, in->models[j]);
    }
}

/* The instances' roles and placement (0.3; before it, every instance
 * prefills and decodes, placed nowhere in particular). */
static bool
placed(const struct lr__rinst *in)
{
    return in->live && (in->place.role != LR_ROLE_BOTH || in->place.node ||
                        in->place.rack || in->place.region);
}

static uint32_t
plce_count(const lr_router *r)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < r->max_inst; id++)
        n += placed(&r->inst[id]);
    return n;
}

static void
write_plce(struct lr__wr *w, const lr_router *r)
{
    lr__wr_u32(w, plce_count(r));
    for (uint32_t id = 0; id < r->max_inst; id++) {
        const struct lr__rinst *in = &r->inst[id];
        if (!placed(in))
            continue;
        lr__wr_u32(w, id);
        lr__wr_u8(w, (uint8_t)in->place.role);
        lr__wr_u32(w, in->place.node);
        lr__wr_u32(w, in->place.rack);
        lr__wr_u32(w, in->place.region);
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

/* The frame's body (lr__frame_blob writes its head and sum). */
static void
write_snapshot(struct lr__wr *w, const void *arg)
{
    const struct parts *pt = arg;
    const lr_router *r = pt->r;
    bool modl = modl_count(r) > 0, plce = plce_count(r) > 0;
    uint32_t n_sec = 4 + modl + plce;
    for (uint32_t k = 0; k < LR__STATE_MAX; k++)
        n_sec += pt->state[k] != NULL;
    lr__wr_u16(w, 0);
    lr__wr_u32(w, r->block_tokens);
    lr__wr_u32(w, n_sec);
    lr__wr_u64(w, pt->now_ns);
    lr__wr_u64(w, r->opt.replica_id);
    put_section(w, T_INST, r, write_inst);
    put_blob(w, T_INDX, pt->index);
    put_section(w, T_KSEQ, r, write_kseq);
    put_section(w, T_PEER, r, write_peers);
    if (modl)
        put_section(w, T_MODL, r, write_modl);
    if (plce)
        put_section(w, T_PLCE, r, write_plce);
    for (uint32_t k = 0; k < LR__STATE_MAX; k++)
        if (pt->state[k] != NULL)
            put_blob(w, lr__pstate_ops_of(r->pt, k)->tag, pt->state[k]);
}

static lr_status
snapshot_locked(lr_router *r, uint64_t now_ns, lr_blob **out)
{
    struct parts pt = { .r = r, .now_ns = now_ns };
    lr__router_ix_lock(r);
    lr_status st = lr__index_save(r->ix, now_ns, &pt.index);
    lr__router_ix_unlock(r);
    LR__ROUTER_EACH_PSTATE(r, kind, ops, x)
    {
        if (st == LR_OK && ops->save != NULL)
            st = ops->save(x, &r->mem, &pt.state[kind]);
    }
    if (st == LR_OK)
        st = lr__frame_blob(&r->mem, SNAP_MAGIC, SNAP_VERSION, LR_SEED_SNAP,
                            write_snapshot, &pt, out);
    lr_blob_destroy(pt.index);
    for (uint32_t k = 0; k < LR__STATE_MAX; k++)
        lr_blob_destroy(pt.state[k]);
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
    uint32_t max_adapters, n_models;
    uint64_t *models; /* n_models, allocated for the commit */
    struct lr__rplace place;
    bool has_place;
};

enum {
    S_INST,
    S_INDX,
    S_KSEQ,
    S_PEER,
    S_MODL,
    S_PLCE,
    S_FIXED
};

/* Everything a restore builds before it commits. Its allocations go
 * through `am`, a copy of the router's allocator with a count of its own
 * (the build runs without the lock): the commit adds that count to the
 * router's. */
struct restore {
    struct lr__mem am;
    uint32_t max_inst;
    struct sec s[S_FIXED];
    struct sec ss[LR__STATE_MAX]; /* the policy states' sections */
    uint32_t n_inst;
    struct rinst *inst;
    uint32_t *at; /* max_inst: index in inst + 1 of each id, 0 none */
    lr_index *ix;
    lr_ring *ring;
    lr_load *ld;
    struct lr__kvsrc *src;
    struct lr__peers peers;
    struct lr__adapters ad;
    double param[LR__PARAM_COUNT]; /* the router's, when the build began */
    void *aside[LR__STATE_MAX];    /* states made from their sections */
};

static uint32_t
fixed_index(uint32_t tag)
{
    static const uint32_t tags[S_FIXED] = { T_INST, T_INDX, T_KSEQ,
                                            T_PEER, T_MODL, T_PLCE };
    for (uint32_t i = 0; i < S_FIXED; i++)
        if (tags[i] == tag)
            return i;
    return S_FIXED;
}

/* The state kind whose section `tag` is, or LR__STATE_MAX. */
static uint32_t
state_index(const lr_router *r, uint32_t tag)
{
    for (uint32_t k = 0; k < LR__STATE_MAX; k++) {
        const struct lr__pstate_ops *ops = lr__pstate_ops_of(r->pt, k);
        if (ops != NULL && ops->load != NULL && ops->tag == tag)
            return k;
    }
    return LR__STATE_MAX;
}

/* Free what the build made and the commit did not take (mem: the
 * allocator it was made with). */
static void
restore_free(const lr_router *r, struct restore *rs, struct lr__mem *mem)
{
    if (rs->inst != NULL)
        for (uint32_t i = 0; i < rs->n_inst; i++) {
            if (rs->inst[i].copy != NULL)
                lr__free(mem, rs->inst[i].copy, rs->inst[i].len + 1u);
            lr__free(mem, rs->inst[i].models,
                     rs->inst[i].n_models * sizeof(uint64_t));
        }
    lr__free(mem, rs->inst, (size_t)rs->n_inst * sizeof *rs->inst);
    lr__free(mem, rs->at, (size_t)rs->max_inst * sizeof *rs->at);
    lr__free(mem, rs->src, (size_t)rs->max_inst * sizeof *rs->src);
    lr__peers_free(&rs->peers, mem);
    lr__adapters_free(&rs->ad, mem);
    for (uint32_t k = 0; k < LR__STATE_MAX; k++)
        if (rs->aside[k] != NULL)
            lr__pstate_ops_of(r->pt, k)->destroy(rs->aside[k], mem);
    lr_index_destroy(rs->ix);
    lr_ring_destroy(rs->ring);
    lr_load_destroy(rs->ld);
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
        uint32_t f = fixed_index(tag), k = state_index(r, tag);
        struct sec *sp = f < S_FIXED         ? &rs->s[f]
                         : k < LR__STATE_MAX ? &rs->ss[k]
                                             : NULL;
        if (sp == NULL)
            continue; /* a later writer's section */
        LR_RETURN_IF(sp->has, LR_ECORRUPT);
        *sp = (struct sec){ p, (size_t)n_bytes, true };
    }
    LR_RETURN_IF(rd.p != rd.end, LR_ECORRUPT);
    LR_RETURN_IF(!rs->s[S_INST].has || !rs->s[S_INDX].has, LR_ECORRUPT);
    return LR_OK;
}

/* Two instances of a snapshot with one name: sorted by a hash of the
 * name, equal names are neighbours (O(n log n), not a pair-wise scan). */
struct name_key {
    uint64_t h;
    uint32_t i;
};

static int
cmp_name_key(const void *a, const void *b)
{
    const struct name_key *x = a, *y = b;
    return (x->h > y->h) - (x->h < y->h);
}

static lr_status
names_distinct(struct restore *rs)
{
    if (rs->n_inst < 2)
        return LR_OK;
    size_t bytes = (size_t)rs->n_inst * sizeof(struct name_key);
    struct name_key *k = lr__alloc(&rs->am, bytes);
    LR_RETURN_IF(k == NULL, LR_ENOMEM);
    for (uint32_t i = 0; i < rs->n_inst; i++)
        k[i] =
            (struct name_key){ lr__hash(rs->inst[i].name, rs->inst[i].len, 0),
                               i };
    qsort(k, rs->n_inst, sizeof *k, cmp_name_key);
    lr_status st = LR_OK;
    for (uint32_t i = 1; i < rs->n_inst && st == LR_OK; i++)
        for (uint32_t j = i; j-- > 0 && k[j].h == k[i].h;) {
            const struct rinst *a = &rs->inst[k[i].i], *b = &rs->inst[k[j].i];
            if (a->len == b->len && memcmp(a->name, b->name, a->len) == 0)
                st = LR_ECORRUPT;
        }
    lr__free(&rs->am, k, bytes);
    return st;
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
    rs->inst = lr__calloc(&rs->am, n, sizeof *rs->inst);
    LR_RETURN_IF(n > 0 && rs->inst == NULL, LR_ENOMEM);
    rs->n_inst = n;
    rs->at = lr__calloc(&rs->am, rs->max_inst, sizeof *rs->at);
    LR_RETURN_IF(rs->at == NULL, LR_ENOMEM);
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
        LR_RETURN_IF(rs->at[x->id] != 0, LR_ECORRUPT);
        rs->at[x->id] = i + 1;
    }
    LR_RETURN_IF(rd.p != rd.end, LR_ECORRUPT);
    return names_distinct(rs);
}

/* The ring's instances (those not draining) placed in one bulk build,
 * which makes the ring that adding them one by one makes. */
static lr_status
build_ring(struct restore *rs)
{
    size_t n = rs->n_inst;
    const char **names = lr__calloc(&rs->am, n, sizeof *names);
    uint32_t *ids = lr__calloc(&rs->am, n, sizeof *ids);
    lr_status st = n > 0 && (names == NULL || ids == NULL) ? LR_ENOMEM : LR_OK;
    size_t k = 0;
    for (uint32_t i = 0; i < rs->n_inst && st == LR_OK; i++) {
        const struct rinst *x = &rs->inst[i];
        if (x->flags & IF_DRAINING)
            continue;
        names[k] = x->copy;
        ids[k++] = x->id;
    }
    if (st == LR_OK)
        st = lr__ring_add_many(rs->ring, names, ids, k);
    lr__free(&rs->am, names, n * sizeof *names);
    lr__free(&rs->am, ids, n * sizeof *ids);
    return st;
}

/* New index, ring and load tracker holding the snapshot's instances; the
 * names copied for the commit. */
/* MODL: each record an instance's of the snapshot, once; its models
 * distinct hashes. */
static lr_status
read_modl(const lr_router *r, struct restore *rs)
{
    (void)r;
    if (!rs->s[S_MODL].has)
        return LR_OK;
    struct lr__rd rd = { rs->s[S_MODL].p, rs->s[S_MODL].p + rs->s[S_MODL].n,
                         false };
    uint32_t n = lr__rd_u32(&rd);
    LR_RETURN_IF(rd.bad || n > rs->n_inst, LR_ECORRUPT);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = lr__rd_u32(&rd);
        uint32_t max = lr__rd_u32(&rd);
        uint32_t nm = lr__rd_u32(&rd);
        LR_RETURN_IF(rd.bad || id >= rs->max_inst || rs->at[id] == 0,
                     LR_ECORRUPT);
        LR_RETURN_IF(max > LR_ROUTER_MAX_ADAPTERS || nm > LR_ROUTER_MAX_MODELS,
                     LR_ECORRUPT);
        struct rinst *x = &rs->inst[rs->at[id] - 1];
        LR_RETURN_IF(x->models != NULL || x->max_adapters != 0, LR_ECORRUPT);
        LR_RETURN_IF(nm == 0 && max == 0, LR_ECORRUPT);
        x->max_adapters = max;
        if (nm == 0)
            continue;
        x->models = lr__alloc(&rs->am, nm * sizeof *x->models);
        LR_RETURN_IF(x->models == NULL, LR_ENOMEM);
        x->n_models = nm;
        for (uint32_t j = 0; j < nm; j++) {
            x->models[j] = lr__rd_u64(&rd);
            LR_RETURN_IF(x->models[j] == 0, LR_ECORRUPT);
            for (uint32_t k = 0; k < j; k++)
                LR_RETURN_IF(x->models[k] == x->models[j], LR_ECORRUPT);
        }
    }
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    return LR_OK;
}

/* PLCE: each record an instance's of the snapshot, once, a role it may
 * have. */
static lr_status
read_plce(struct restore *rs)
{
    if (!rs->s[S_PLCE].has)
        return LR_OK;
    struct lr__rd rd = { rs->s[S_PLCE].p, rs->s[S_PLCE].p + rs->s[S_PLCE].n,
                         false };
    uint32_t n = lr__rd_u32(&rd);
    LR_RETURN_IF(rd.bad || n > rs->n_inst, LR_ECORRUPT);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = lr__rd_u32(&rd);
        uint8_t role = lr__rd_u8(&rd);
        struct lr__rplace pl = { .role = role };
        pl.node = lr__rd_u32(&rd);
        pl.rack = lr__rd_u32(&rd);
        pl.region = lr__rd_u32(&rd);
        LR_RETURN_IF(rd.bad || id >= rs->max_inst || rs->at[id] == 0 ||
                         role > LR_ROLE_DECODE,
                     LR_ECORRUPT);
        struct rinst *x = &rs->inst[rs->at[id] - 1];
        LR_RETURN_IF(x->has_place, LR_ECORRUPT);
        x->place = pl;
        x->has_place = true;
    }
    LR_RETURN_IF(rd.bad || rd.p != rd.end, LR_ECORRUPT);
    return LR_OK;
}

static lr_status
build_parts(const lr_router *r, struct restore *rs, uint64_t now_ns)
{
    LR_TRY(lr__router_make_parts(r, &rs->ix, &rs->ring, &rs->ld));
    LR_TRY(lr__adapters_setup(&rs->ad, &rs->am, rs->max_inst,
                              r->opt.max_requests));
    for (uint32_t i = 0; i < rs->n_inst; i++) {
        struct rinst *x = &rs->inst[i];
        x->copy = lr__alloc(&rs->am, x->len + 1u);
        LR_RETURN_IF(x->copy == NULL, LR_ENOMEM);
        memcpy(x->copy, x->name, x->len);
        x->copy[x->len] = '\0';
        LR_TRY(lr_load_add_instance(rs->ld, x->id, x->cls,
                                    (x->flags & IF_CACHING) != 0));
        if (x->has_rtt)
            LR_TRY(lr_load_observe_rtt(rs->ld, x->id, x->rtt_ns));
        LR_TRY(lr__adapters_add(&rs->ad, &rs->am, x->id, x->max_adapters));
    }
    LR_TRY(build_ring(rs));
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
    rs->src = lr__calloc(&rs->am, rs->max_inst, sizeof *rs->src);
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
        LR_RETURN_IF(rd.bad || id >= rs->max_inst || rs->at[id] == 0,
                     LR_ECORRUPT);
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
    LR_TRY(lr__peers_init(&rs->peers, &rs->am, r->peers.max, r->max_inst,
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

/* Each policy state a section names, made whole from it (with the
 * router's parameters as the build found them). */
static lr_status
read_states(lr_router *r, struct restore *rs)
{
    struct lr__penv env = lr__router_env(r);
    env.mem = &rs->am;
    env.param = rs->param;
    for (uint32_t k = 0; k < LR__STATE_MAX; k++)
        if (rs->ss[k].has)
            LR_TRY(lr__pstate_ops_of(r->pt, k)->load(
                &env, rs->ss[k].p, rs->ss[k].n, &rs->aside[k]));
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

/* Cannot fail: everything was made. What the router held goes to rs, to
 * be freed with the router's allocator. */
static void
commit(lr_router *r, struct restore *rs)
{
    r->mem.live += rs->am.live; /* the build's bytes are the router's now */
    lr__router_ix_lock(r);
    swap_ptr(&r->ix, &rs->ix);
    r->ixgen_all++; /* a match made on the old index is not used */
    lr__router_ix_unlock(r);
    swap_ptr(&r->ring, &rs->ring);
    swap_ptr(&r->ld, &rs->ld);
    /* in id order, whatever the snapshot's: each routable id is appended
     * to the router's ascending list */
    for (uint32_t id = 0; id < rs->max_inst; id++) {
        if (rs->at[id] == 0)
            continue;
        struct rinst *x = &rs->inst[rs->at[id] - 1];
        lr__router_put_instance(r, x->id, x->copy, x->len,
                                (x->flags & IF_DRAINING) != 0, x->init_rtt_ms,
                                x->models, x->n_models, &x->place);
        x->copy = NULL;
        x->models = NULL;
        x->n_models = 0;
    }
    struct lr__adapters ta = r->ad;
    r->ad = rs->ad;
    rs->ad = ta;
    swap_ptr(&r->src, &rs->src);
    struct lr__peers tp = r->peers;
    memcpy(rs->peers.key, tp.key, sizeof tp.key); /* the host's, kept */
    rs->peers.keyed = tp.keyed;
    lr__peers_on_moved(&rs->peers, tp.moved, tp.moved_ctx);
    r->peers = rs->peers;
    rs->peers = tp;
    for (uint32_t k = 0; k < LR__STATE_MAX; k++) {
        if (rs->aside[k] == NULL)
            continue;
        void *old = atomic_exchange(&r->pstate[k], rs->aside[k]);
        rs->aside[k] = old; /* a fresh router's: freed below */
    }
    lr__router_pstates_sync(r);
    lr__router_fleet_touch_all(
        r); /* the peers' gauges came after the instances */
}

lr_status
lr_router_restore(lr_router *r, const uint8_t *buf, size_t len, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL || (buf == NULL && len != 0), LR_EINVAL);
    struct restore rs;
    memset(&rs, 0, sizeof rs);
    rs.am = r->mem; /* the hooks; its own count */
    rs.am.live = 0;
    rs.max_inst = r->max_inst; /* fixed at create, as the rest read here */
    lr__router_lock(r);
    memcpy(rs.param, r->param, sizeof rs.param);
    lr_status st = r->n_inst != 0 ? LR_ESTATE : LR_OK;
    if (st == LR_OK) /* judged now (a query), taken at the commit */
        st = lr__router_clock(r, now_ns, false);
    lr__router_unlock(r);
    /* the build: no lock held */
    if (st == LR_OK)
        st = read_sections(r, buf, len, &rs);
    if (st == LR_OK)
        st = read_inst(&rs);
    if (st == LR_OK)
        st = read_modl(r, &rs);
    if (st == LR_OK)
        st = read_plce(&rs);
    if (st == LR_OK)
        st = build_parts(r, &rs, now_ns);
    if (st == LR_OK)
        st = read_kseq(&rs, now_ns);
    if (st == LR_OK)
        st = read_peers(r, &rs);
    if (st == LR_OK)
        st = read_states(r, &rs);
    if (st != LR_OK) {
        restore_free(r, &rs, &rs.am);
        return st;
    }
    /* the commit: the router may have changed meanwhile */
    lr__router_lock(r);
    st = r->n_inst != 0 ? LR_ESTATE : lr__router_clock(r, now_ns, true);
    if (st == LR_OK) {
        commit(r, &rs);
        lr__router_clock_take(r, now_ns);
        restore_free(r, &rs, &r->mem);
    }
    lr__router_unlock(r);
    if (st != LR_OK)
        restore_free(r, &rs, &rs.am);
    return st;
}
