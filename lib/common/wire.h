/* A bounded little-endian reader and writer for the router's own wire
 * formats (gauges, snapshots): fixed-width integers and unsigned LEB128
 * varints of up to 64 bits. The reader never reads past its end: a short
 * or malformed input sets `bad` and every later read returns 0, so a
 * parser checks once at the end (or wherever a value steers it). The
 * writer's first pass may run with `p == NULL` to measure. */
#ifndef LIBROUTE_LIB_WIRE_H
#define LIBROUTE_LIB_WIRE_H

#include "common/common.h"
#include "common/lr_hash.h"

#define LR__VARINT64_MAX 10

struct lr__rd {
    const uint8_t *p, *end;
    bool bad;
};

struct lr__wr {
    uint8_t *p; /* NULL: measure only */
    size_t n;   /* bytes written (or measured) */
};

static inline bool
lr__rd_take(struct lr__rd *r, size_t n, const uint8_t **out)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return false;
    }
    *out = r->p;
    r->p += n;
    return true;
}

static inline uint8_t
lr__rd_u8(struct lr__rd *r)
{
    const uint8_t *q;
    return lr__rd_take(r, 1, &q) ? q[0] : 0;
}

/* A varint in canonical form (no trailing zero groups, at most 64 bits). */
static inline uint64_t
lr__rd_var(struct lr__rd *r)
{
    uint64_t v = 0;
    for (int i = 0; i < LR__VARINT64_MAX; i++) {
        const uint8_t *q;
        if (!lr__rd_take(r, 1, &q))
            return 0;
        uint8_t b = q[0];
        if (i == 9 && b > 1)
            break; /* beyond 64 bits */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (i > 0 && b == 0)
                break; /* overlong */
            return v;
        }
    }
    r->bad = true;
    return 0;
}

/* A varint that must fit 32 bits. */
static inline uint32_t
lr__rd_var32(struct lr__rd *r)
{
    uint64_t v = lr__rd_var(r);
    if (v > UINT32_MAX) {
        r->bad = true;
        return 0;
    }
    return (uint32_t)v;
}

static inline void
lr__wr_bytes(struct lr__wr *w, const void *src, size_t n)
{
    if (w->p != NULL && n > 0)
        memcpy(w->p + w->n, src, n);
    w->n += n;
}

static inline void
lr__wr_u8(struct lr__wr *w, uint8_t v)
{
    lr__wr_bytes(w, &v, 1);
}

/* The fixed widths, little-endian: a read takes them whole or not at all. */
#define LR__WIRE_LE(T, X, N)                               \
    static inline T lr__rd_##X(struct lr__rd *r)           \
    {                                                      \
        const uint8_t *q;                                  \
        return lr__rd_take(r, N, &q) ? lr__get_##X(q) : 0; \
    }                                                      \
    static inline void lr__wr_##X(struct lr__wr *w, T v)   \
    {                                                      \
        uint8_t b[N];                                      \
        lr__put_##X(b, v);                                 \
        lr__wr_bytes(w, b, N);                             \
    }
LR__WIRE_LE(uint16_t, u16, 2)
LR__WIRE_LE(uint32_t, u32, 4)
LR__WIRE_LE(uint64_t, u64, 8)
LR__WIRE_LE(double, f64, 8)
#undef LR__WIRE_LE

static inline void
lr__wr_var(struct lr__wr *w, uint64_t v)
{
    uint8_t b[LR__VARINT64_MAX];
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    lr__wr_bytes(w, b, n);
}

/* The frame of the router's own formats (index state, snapshot, gauge):
 * 4 magic bytes and a u16 version first, the u64 lr__hash (seeded `seed`)
 * of everything before it last. */
#define LR__FRAME_SUM 8

static inline void
lr__wr_frame(struct lr__wr *w, const char magic[4], uint16_t version)
{
    lr__wr_bytes(w, magic, 4);
    lr__wr_u16(w, version);
}

/* A new blob (from m's allocator) holding one frame: the head, what
 * `write` writes of `ctx`, the sum. `write` runs twice, first with w->p
 * NULL to measure, and writes the same bytes both times. */
static inline lr_status
lr__frame_blob(const struct lr__mem *m, const char magic[4], uint16_t version,
               uint64_t seed, void (*write)(struct lr__wr *, const void *),
               const void *ctx, lr_blob **out)
{
    struct lr__wr w = { NULL, 0 };
    lr__wr_frame(&w, magic, version);
    write(&w, ctx);
    uint8_t *buf;
    LR_TRY(lr__blob_new(m, w.n + LR__FRAME_SUM, out, &buf));
    w = (struct lr__wr){ buf, 0 };
    lr__wr_frame(&w, magic, version);
    write(&w, ctx);
    lr__put_u64(buf + w.n, lr__hash(buf, w.n, seed));
    return LR_OK;
}

/* Frames that replicas exchange (deltas, gauges) carry a u16 of flags
 * after the version. With a peer key (lr_router_set_peer_key) the sum is
 * the frame's SipHash-2-4 under the key instead, and this flag says so: a
 * router with a key takes only frames sealed with it, one without a key
 * only frames with the plain sum. */
#define LR__FRAME_OFF_FLAGS 6
#define LR__FRAME_KEYED 0x8000u

/* Whether the frame's sum is right: the plain sum (seeded `seed`) when
 * key is NULL, else the MAC under key; the KEYED flag must agree. The
 * frame is at least LR__FRAME_OFF_FLAGS + 2 + LR__FRAME_SUM bytes. */
static inline bool
lr__frame_sum_ok(const uint8_t *buf, size_t len, uint64_t seed,
                 const uint8_t *key)
{
    bool keyed = (lr__get_u16(buf + LR__FRAME_OFF_FLAGS) & LR__FRAME_KEYED);
    uint64_t sum = lr__get_u64(buf + len - LR__FRAME_SUM);
    if (key == NULL)
        return !keyed && lr__hash(buf, len - LR__FRAME_SUM, seed) == sum;
    return keyed && lr__siphash(key, buf, len - LR__FRAME_SUM) == sum;
}

/* Seal a frame of ours (its flags' KEYED bit clear) with key: set the
 * bit and write the MAC over the plain sum. key NULL: leave it. */
static inline void
lr__frame_seal(uint8_t *buf, size_t len, const uint8_t *key)
{
    if (key == NULL)
        return;
    uint16_t f = lr__get_u16(buf + LR__FRAME_OFF_FLAGS);
    lr__put_u16(buf + LR__FRAME_OFF_FLAGS, (uint16_t)(f | LR__FRAME_KEYED));
    lr__put_u64(buf + len - LR__FRAME_SUM,
                lr__siphash(key, buf, len - LR__FRAME_SUM));
}

/* A frame of `len` bytes with room for a `header` at least: LR_ECORRUPT
 * when it is shorter, has another magic or a wrong sum (under key, when
 * not NULL: lr__frame_sum_ok), LR_EVERSION for another version (checked
 * in that order). */
static inline lr_status
lr__frame_check(const uint8_t *buf, size_t len, size_t header,
                const char magic[4], uint16_t version, uint64_t seed,
                const uint8_t *key)
{
    LR_RETURN_IF(len < header + LR__FRAME_SUM, LR_ECORRUPT);
    LR_RETURN_IF(memcmp(buf, magic, 4) != 0, LR_ECORRUPT);
    LR_RETURN_IF(lr__get_u16(buf + 4) != version, LR_EVERSION);
    LR_RETURN_IF(!lr__frame_sum_ok(buf, len, seed, key), LR_ECORRUPT);
    return LR_OK;
}

#endif /* LIBROUTE_LIB_WIRE_H */
