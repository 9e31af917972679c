/* vLLM KV-event batches: a strict msgpack reader for the one schema, and
 * the two passes that make a malformed batch change nothing.
 *
 * Our own reader, not msgpack-c: the schema needs eight msgpack types,
 * reading in place needs no allocation, and a library with a frozen ABI
 * gains nothing from a second dependency for ~200 lines that the fuzzer
 * covers completely.
 *
 * Pass 1 decodes every event and checks it (types, sizes, block size)
 * as the batch header is read, so the events are not stepped over first;
 * it also finds the largest event, so that one scratch allocation serves
 * pass 2, and keeps each event it read. Pass 2 applies event by event,
 * copying each event's hashes and tokens out of the buffer (and decoding
 * it again only when the memory to keep the events could not be had).
 *
 * Two kinds of bad input, two answers. Bytes that are not msgpack, or a
 * batch or event that is not the schema's shape (no events array, an
 * event that is neither an array nor a map, no type tag), refuse the whole
 * batch: nothing after that point can be trusted to be where it seems.
 * An event that is well framed but whose fields do not add up (a field of
 * the wrong type, tokens that are not blocks x block size) is one bad
 * event: it is left out and counted (`invalid`), and the rest of the batch
 * applies. An event this index does not represent (a medium that is no
 * tier, a sliding-window group, an adapter known only by its engine-local
 * id, prompt-embedding keys, multimodal keys in an engine block of
 * several index blocks) is decided on the fields that say so and
 * skipped without checking the rest: vLLM sends the sliding-window store
 * with its null blocks left out of the hashes in the same batch as the
 * GPU stores. A lower tier's store (medium "CPU", "DISK": medium_tier)
 * applies to that tier; vLLM's offloading connector sends it with no
 * token ids and block size 0 or 16, naming blocks by engine hash alone
 * (event_ok), which index_kv.c resolves through the GPU's map.
 *
 * A store's LoRA adapter and cache salt become the salt of its keys, as a
 * router keys a request: lr_adapter_salt(lr_name_hash(cache salt),
 * lr_name_hash(lora_name)). vLLM writes both into extra_keys too, one
 * entry per block, each nil or a tuple:
 *
 *   extra_keys  [ [lora_name, [id, offset], ..., cache_salt], block 0
 *                 [lora_name, [id, offset], ...],             block 1
 *                 ... ]                                       (or nil)
 *
 * with the cache salt in the first block of a prompt only. So the keys
 * besides the adapter's name and the multimodal tuples may be one string
 * in block 0 of an event with no parent (the cache salt) and nothing else
 * anywhere; an event with a parent inherits its salt through the parent's
 * key. A block's tuples become its multimodal hash (the XOR of their
 * lr_mm_key_hash()), which the index XORs into the block's token hash. */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "index/index.h"
#include "index/vllm.h"
#include "libroute/lr_vllm.h"

/* ---- msgpack reader ----------------------------------------------------- */

struct mp {
    const uint8_t *p, *end;
};

enum mp_kind {
    MP_NIL,
    MP_BOOL,
    MP_UINT,
    MP_NINT,
    MP_FLOAT,
    MP_STR,
    MP_BIN,
    MP_ARRAY,
    MP_MAP,
    MP_EXT
};

/* One decoded header: scalars carry their value, strings and binaries
 * point into the buffer, containers carry their element count. */
struct mv {
    enum mp_kind kind;
    uint64_t u; /* UINT, NINT (two's complement), BOOL, counts, lengths */
    double f;
    const uint8_t *data; /* STR, BIN, EXT payload */
};

static bool
take(struct mp *m, size_t n, const uint8_t **out)
{
    if ((size_t)(m->end - m->p) < n)
        return false;
    *out = m->p;
    m->p += n;
    return true;
}

static uint64_t
be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* n big-endian bytes as an unsigned integer. */
static bool
take_be(struct mp *m, size_t n, uint64_t *u)
{
    const uint8_t *q;
    if (!take(m, n, &q))
        return false;
    *u = be(q, n);
    return true;
}

/* Containers: every element takes at least one byte (`per` for a map's
 * key and value), so a count larger than what is left is corrupt (and
 * this bounds the work a hostile count can cause). */
static bool
count_fits(const struct mp *m, uint64_t n, uint64_t per)
{
    return n <= (uint64_t)(m->end - m->p) / per;
}

/* Read a length-prefixed payload of `lenbytes` big-endian length bytes. */
static bool
payload(struct mp *m, size_t lenbytes, struct mv *v)
{
    return take_be(m, lenbytes, &v->u) && take(m, (size_t)v->u, &v->data);
}

/* A container count of `lenbytes` big-endian bytes. */
static bool
count(struct mp *m, size_t lenbytes, uint64_t per, struct mv *v)
{
    return take_be(m, lenbytes, &v->u) && count_fits(m, v->u, per);
}

/* The forms whose value or length is in the prefix byte c itself:
 * positive and negative fixint, fixmap, fixarray, fixstr. */
static bool
mp_fix(struct mp *m, uint8_t c, struct mv *v)
{
    if (c <= 0x7f) {
        v->kind = MP_UINT;
        v->u = c;
        return true;
    }
    if (c >= 0xe0) {
        v->kind = MP_NINT;
        v->u = (uint64_t)(int64_t)(int8_t)c;
        return true;
    }
    if (c <= 0x8f) {
        v->kind = MP_MAP;
        v->u = c & 0x0f;
        return count_fits(m, v->u, 2);
    }
    if (c <= 0x9f) {
        v->kind = MP_ARRAY;
        v->u = c & 0x0f;
        return count_fits(m, v->u, 1);
    }
    v->kind = MP_STR; /* 0xa0..0xbf */
    v->u = c & 0x1f;
    return take(m, (size_t)v->u, &v->data);
}

/* float 32 (0xca) or float 64 (0xcb), widened to double. */
static bool
mp_float(struct mp *m, uint8_t c, struct mv *v)
{
    uint64_t b;
    if (!take_be(m, c == 0xca ? 4 : 8, &b))
        return false;
    if (c == 0xca) {
        uint32_t b32 = (uint32_t)b;
        float f;
        memcpy(&f, &b32, 4);
        v->f = f;
    } else {
        memcpy(&v->f, &b, 8);
    }
    v->kind = MP_FLOAT;
    return true;
}

/* uint 8..64 (0xcc..0xcf) and int 8..64 (0xd0..0xd3). A negative int is
 * MP_NINT with its two's complement in u; any other value is MP_UINT. */
static bool
mp_int(struct mp *m, uint8_t c, struct mv *v)
{
    const bool is_signed = c >= 0xd0;
    size_t n = (size_t)1 << (c - (is_signed ? 0xd0 : 0xcc));
    uint64_t u;
    if (!take_be(m, n, &u))
        return false;
    if (is_signed && n < 8 && (u >> (8 * n - 1)) != 0) /* sign-extend */
        u |= ~(uint64_t)0 << (8 * n);
    v->u = u;
    v->kind = is_signed && (u >> 63) ? MP_NINT : MP_UINT;
    return true;
}

/* ext 8/16/32 (0xc7..0xc9: length, then a type byte) and fixext 1..16
 * (0xd4..0xd8: a type byte): the payload is kept, the type ignored. */
static bool
mp_ext(struct mp *m, uint8_t c, struct mv *v)
{
    const uint8_t *type;
    v->kind = MP_EXT;
    if (c >= 0xd4)
        v->u = (uint64_t)1 << (c - 0xd4);
    else if (!take_be(m, (size_t)1 << (c - 0xc7), &v->u))
        return false;
    return take(m, 1, &type) && take(m, (size_t)v->u, &v->data);
}

/* One value's header from m; a string, binary or extension brings its
 * payload, a container only its count. */
static bool
mp_next(struct mp *m, struct mv *v)
{
    const uint8_t *q;
    if (!take(m, 1, &q))
        return false;
    uint8_t c = q[0];
    v->data = NULL;
    v->f = 0;
    if (c < 0xc0 || c >= 0xe0)
        return mp_fix(m, c, v);
    if (c >= 0xcc && c <= 0xd3) /* uint 8..64, int 8..64 */
        return mp_int(m, c, v);
    if (c == 0xca || c == 0xcb) /* float 32, 64 */
        return mp_float(m, c, v);
    if ((c >= 0xc7 && c <= 0xc9) || (c >= 0xd4 && c <= 0xd8))
        return mp_ext(m, c, v); /* ext 8..32, fixext 1..16 */
    /* the sized forms: 1, 2 or 4 bytes of length (bin, str) or count */
    if (c >= 0xc4 && c <= 0xc6) {
        v->kind = MP_BIN;
        return payload(m, (size_t)1 << (c - 0xc4), v);
    }
    if (c >= 0xd9 && c <= 0xdb) {
        v->kind = MP_STR;
        return payload(m, (size_t)1 << (c - 0xd9), v);
    }
    if (c == 0xdc || c == 0xdd) {
        v->kind = MP_ARRAY;
        return count(m, (size_t)2 << (c - 0xdc), 1, v);
    }
    if (c == 0xde || c == 0xdf) {
        v->kind = MP_MAP;
        return count(m, (size_t)2 << (c - 0xde), 2, v);
    }
    switch (c) {
    case 0xc0:
        v->kind = MP_NIL;
        return true;
    case 0xc2:
    case 0xc3:
        v->kind = MP_BOOL;
        v->u = c & 1;
        return true;
    default: /* 0xc1 is never used */
        return false;
    }
}

static inline uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* The fast path of the integer forms (positive fixint, uint 8..64, int
 * 8..64 holding a non-negative value), which is what token arrays are
 * made of: *u and true, m past it; false when the next value is not one
 * of them (or is truncated), with m unmoved, for the general reader to
 * judge. The same values mp_next() reads as MP_UINT. */
static inline bool
mp_fast_uint(struct mp *m, uint64_t *u)
{
    const uint8_t *p = m->p;
    if (p >= m->end)
        return false;
    uint8_t c = p[0];
    if (c <= 0x7f) {
        *u = c;
        m->p = p + 1;
        return true;
    }
    if (c < 0xcc || c > 0xd3)
        return false;
    size_t n = (size_t)1 << ((c - 0xcc) & 3);
    if ((size_t)(m->end - p) < n + 1)
        return false;
    uint64_t v;
    switch (n) {
    case 1:
        v = p[1];
        break;
    case 2:
        v = (uint64_t)p[1] << 8 | p[2];
        break;
    case 4:
        v = be32(p + 1);
        break;
    default:
        v = (uint64_t)be32(p + 1) << 32 | be32(p + 5);
        break;
    }
    if (c >= 0xd0 && (v >> (8 * n - 1)) != 0)
        return false; /* negative: the general reader says MP_NINT */
    *u = v;
    m->p = p + 1 + n;
    return true;
}

/* A token id of the forms a packer writes for 0..2^32-1 (positive
 * fixint, uint 8, 16, 32) at p, with at least 5 bytes from p: *u and the
 * length, or 0 for any other form (the general reader's to judge). */
static inline size_t
mp_token_at(const uint8_t *p, uint32_t *u)
{
    /* Without a branch on the width: token ids of a real vocabulary mix
     * uint 16 and uint 32 about evenly, and a switch on the tag
     * mispredicted at every other token. uint 8, 16, 32 (0xcc + k, k =
     * 0..2) carry 1 << k bytes: the big-endian word after the tag shifted
     * right by 32 - 8 (1 << k). (The compiler may still branch on "a
     * fixint or not", which a vocabulary's ids answer the same way
     * nearly every time.) kv_ingest_new: 1044 -> 934 ns per event
     * against the switch, ten alternating pairs. */
    uint8_t c = p[0];
    unsigned k = (unsigned)c - 0xccu;
    bool fix = c <= 0x7f, uint = k < 3;
    unsigned kk = uint ? k : 0;
    uint64_t w = be32(p + 1);
    uint32_t v = (uint32_t)(w >> (32u - (8u << kk)));
    *u = fix ? c : v;
    return fix ? 1 : uint ? 1 + ((size_t)1 << kk) : 0;
}

/* Past up to n integers (any msgpack integer form) at m, while at least 9
 * bytes remain: how many. A token array is skipped here in one loop. */
static inline uint64_t
mp_skip_ints(struct mp *m, uint64_t n)
{
    const uint8_t *p = m->p, *end = m->end;
    uint64_t k = 0;
    while (k < n && end - p >= 9) {
        uint8_t c = p[0];
        if (c <= 0x7f || c >= 0xe0)
            p += 1;
        else if (c >= 0xcc && c <= 0xd3)
            p += 1 + ((size_t)1 << ((c - 0xcc) & 3));
        else
            break;
        k++;
    }
    m->p = p;
    return k;
}

/* Skip one whole value, nested containers included, without recursion. */
static bool
mp_skip(struct mp *m)
{
    uint64_t pending = 1;
    while (pending > 0) {
        uint64_t u;
        if (mp_fast_uint(m, &u)) {
            pending--;
            continue;
        }
        struct mv v;
        if (!mp_next(m, &v))
            return false;
        pending--;
        if (v.kind == MP_ARRAY)
            pending += v.u - mp_skip_ints(m, v.u); /* its leading integers */
        else if (v.kind == MP_MAP)
            pending += 2 * v.u;
    }
    return true;
}

/* One value where only scalars matter: v is its header, and a container
 * is skipped whole (v then says only its kind and count). */
static bool
mp_scalar(struct mp *m, struct mv *v)
{
    struct mp save = *m;
    if (!mp_next(m, v))
        return false;
    if (v->kind == MP_ARRAY || v->kind == MP_MAP) {
        *m = save;
        return mp_skip(m);
    }
    return true;
}

static bool
str_is(const struct mv *v, const char *s)
{
    size_t n = strlen(s);
    return v->kind == MP_STR && v->u == n && memcmp(v->data, s, n) == 0;
}

/* ---- the schema ---------------------------------------------------------- */

enum ev_type {
    EV_UNKNOWN,
    EV_STORED,
    EV_REMOVED,
    EV_CLEARED
};

/* One event as decoded: hashes and tokens stay in the buffer (an array of
 * msgpack integers each) until pass 2 copies them out. `skip`: not
 * representable here; `bad`: well framed, but its fields do not add up. */
struct event {
    enum ev_type type;
    bool skip;
    bool bad;
    struct mp hashes; /* positioned at the array's first element */
    uint64_t n_hashes;
    bool has_parent;
    uint64_t parent;
    struct mp tokens;
    uint64_t n_tokens;
    uint64_t tok_kept; /* its tokens in pass 1's buffer, or TOK_NONE */
    uint64_t block_size;
    /* BlockStored's adapter and extra keys, judged by stored_salt() once
     * the whole event is read (a map's fields come in any order) */
    bool has_lora_id; /* lora_id not nil */
    struct mv lora;   /* lora_name as read (MP_NIL: none) */
    bool extra_odd;   /* extra_keys neither nil nor an array */
    bool has_extra;   /* extra_keys an array: */
    struct mp extra;  /* at its first entry */
    uint64_t n_extra; /* its entries */
    uint64_t salt;    /* the keys' salt (lr_kv_stored.tenant_salt) */
    bool mm;          /* some block has multimodal keys */
    int32_t tier;     /* its medium's lr_tier (nil: the GPU) */
};

/* A field value of interest, or "absent / nil". */
static bool
is_nil(const struct mv *v)
{
    return v->kind == MP_NIL;
}

static bool
hash_of(const struct mv *v, uint64_t *h)
{
    switch (v->kind) {
    case MP_UINT:
    case MP_NINT:
        *h = v->u;
        return true;
    case MP_BIN:
    case MP_STR:
        if (v->u == 0)
            return false;
        *h = be(v->data + (v->u > 8 ? v->u - 8 : 0), v->u > 8 ? 8 : v->u);
        return true;
    default:
        return false;
    }
}

static bool
is_hash(const struct mv *v)
{
    uint64_t h;
    return hash_of(v, &h);
}

static bool
is_token(const struct mv *v)
{
    return v->kind == MP_UINT && v->u <= UINT32_MAX;
}

/* The head of an array field: true with *at (its first element) and *n
 * set when it is one; else false with *done what the reader returns (a
 * field that is not an array is marked bad and skipped). */
static inline bool
array_head(struct mp *m, struct mp *at, uint64_t *n, bool *bad, bool *done)
{
    struct mp start = *m;
    struct mv v;
    *done = false;
    if (!mp_next(m, &v))
        return false;
    if (v.kind != MP_ARRAY) {
        *bad = true;
        *m = start;
        *done = mp_skip(m);
        return false;
    }
    *at = *m;
    *n = v.u;
    return true;
}

/* An array whose elements all pass ok(): *n its length, `at` left at its
 * first element (pass 2 reads them again from there). Another value, or
 * an element that fails ok(), sets *bad; false only when the bytes are
 * not msgpack. Integers take the fast path; anything else, the general
 * reader. */
static bool
read_array(struct mp *m, bool (*ok)(const struct mv *), struct mp *at,
           uint64_t *n, bool *bad)
{
    bool done;
    if (!array_head(m, at, n, bad, &done))
        return done;
    for (uint64_t i = 0; i < *n; i++) {
        struct mv e;
        if (mp_fast_uint(m, &e.u)) {
            e.kind = MP_UINT;
            e.data = NULL;
        } else if (!mp_scalar(m, &e)) {
            return false;
        }
        *bad |= !ok(&e);
    }
    return true;
}

/* The token ids pass 1 decodes, kept for pass 2 so that it does not
 * decode them again: every event's in one buffer, grown as it goes. An
 * event whose tokens could not be kept (no memory) has TOK_NONE, and
 * pass 2 decodes its tokens from the batch as before. */
struct tokbuf {
    struct lr__mem *mem;
    uint32_t *v;
    size_t n, cap;
};

#define TOK_NONE UINT64_MAX
#define TOK_MIN 1024u /* first size of the buffer, in tokens */

/* Room for `more` tokens after the n kept; false when it cannot be had
 * (the buffer stays as it was). */
static bool
tok_room(struct tokbuf *tb, uint64_t more)
{
    return more <= SIZE_MAX - tb->n &&
           lr__grow(tb->mem, (void **)&tb->v, &tb->cap, tb->n + (size_t)more,
                    sizeof *tb->v, TOK_MIN) == LR_OK;
}

/* read_array(m, is_token, ...) with the test inlined: a token array is
 * the bulk of every BlockStored event. With tb (pass 1), the ids go to
 * the buffer as they are read (*kept: where, or TOK_NONE). */
static bool
read_tokens(struct mp *m, struct mp *at, uint64_t *n, bool *bad,
            struct tokbuf *tb, uint64_t *kept)
{
    bool done;
    if (!array_head(m, at, n, bad, &done))
        return done;
    uint32_t *out = NULL;
    *kept = TOK_NONE;
    if (tb != NULL && *n > 0 && tok_room(tb, *n)) {
        out = tb->v + tb->n;
        *kept = tb->n;
        tb->n += (size_t)*n;
    }
    for (uint64_t i = 0; i < *n; i++) {
        uint32_t t;
        size_t k = m->end - m->p >= 5 ? mp_token_at(m->p, &t) : 0;
        if (k > 0) {
            m->p += k;
        } else {
            struct mv e;
            if (!mp_scalar(m, &e))
                return false;
            *bad |= !is_token(&e);
            t = (uint32_t)e.u;
        }
        if (out != NULL)
            out[i] = t;
    }
    return true;
}

enum field {
    F_HASHES,
    F_PARENT,
    F_TOKENS,
    F_BLOCK_SIZE,
    F_LORA_ID,
    F_MEDIUM,
    F_LORA_NAME,
    F_EXTRA_KEYS,
    F_GROUP,
    F_SPEC_KIND,
    F_OTHER
};

/* Positional layouts (msgspec array_like, tag first). */
static const enum field stored_pos[] = { F_HASHES,     F_PARENT,     F_TOKENS,
                                         F_BLOCK_SIZE, F_LORA_ID,    F_MEDIUM,
                                         F_LORA_NAME,  F_EXTRA_KEYS, F_GROUP,
                                         F_SPEC_KIND };
static const enum field removed_pos[] = { F_HASHES, F_MEDIUM, F_GROUP };

static enum field
field_named(const struct mv *k)
{
    static const struct {
        const char *name;
        enum field f;
    } names[] = {
        { "block_hashes", F_HASHES }, { "parent_block_hash", F_PARENT },
        { "token_ids", F_TOKENS },    { "block_size", F_BLOCK_SIZE },
        { "lora_id", F_LORA_ID },     { "medium", F_MEDIUM },
        { "lora_name", F_LORA_NAME }, { "extra_keys", F_EXTRA_KEYS },
        { "group_idx", F_GROUP },     { "kv_cache_spec_kind", F_SPEC_KIND },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (str_is(k, names[i].name))
            return names[i].f;
    return F_OTHER;
}

static enum ev_type
type_named(const struct mv *v)
{
    if (str_is(v, "BlockStored"))
        return EV_STORED;
    if (str_is(v, "BlockRemoved"))
        return EV_REMOVED;
    if (str_is(v, "AllBlocksCleared"))
        return EV_CLEARED;
    return EV_UNKNOWN;
}

/* extra_keys: nil, or an array of one entry per block. Only where it is
 * is kept here; stored_salt() reads the entries once the adapter's name
 * and the parent are known. */
static bool
read_extra(struct mp *m, struct event *ev)
{
    struct mp save = *m;
    struct mv v;
    if (!mp_next(m, &v))
        return false;
    ev->has_extra = false;
    if (v.kind == MP_NIL)
        return true;
    if (v.kind != MP_ARRAY) {
        ev->extra_odd = true;
        *m = save;
        return mp_skip(m);
    }
    ev->has_extra = true;
    ev->extra = *m;
    ev->n_extra = v.u;
    for (uint64_t i = 0; i < v.u; i++)
        if (!mp_skip(m))
            return false;
    return true;
}

/* A multimodal key, at m: [identifier, offset], the identifier a
 * non-empty string and the offset an integer (negative when the input
 * began in an earlier block). True with *h its lr_mm_key_hash() and m
 * after it; false when the value is anything else (m then anywhere). */
static bool
mm_key(struct mp *m, uint64_t *h)
{
    struct mv v, id, off;
    if (!mp_next(m, &v) || v.kind != MP_ARRAY || v.u != 2)
        return false;
    if (!mp_next(m, &id) || id.kind != MP_STR || id.u == 0)
        return false;
    if (!mp_next(m, &off) || (off.kind != MP_UINT && off.kind != MP_NINT) ||
        (off.kind == MP_UINT && off.u > INT64_MAX))
        return false;
    *h = lr_mm_key_hash((const char *)id.data, (size_t)id.u, (int64_t)off.u);
    return true;
}

/* One block's entry of extra_keys, at m, as vLLM writes it: the
 * adapter's name, the multimodal keys, then the other keys (a cache
 * salt, a prompt embedding's hash). *some when it is not nil; *mm the
 * XOR of its multimodal keys' hashes (0: none); *n_rest the other keys
 * and *rest the first of them. An entry that is neither nil nor an array
 * holds keys of an unknown kind (*n_rest UINT64_MAX). */
static bool
extra_entry(struct mp *m, const struct event *ev, bool *some, uint64_t *mm,
            uint64_t *n_rest, struct mv *rest)
{
    struct mp save = *m;
    struct mv v;
    *n_rest = 0;
    *mm = 0;
    if (!mp_next(m, &v))
        return false;
    *some = v.kind != MP_NIL;
    if (v.kind == MP_NIL)
        return true;
    if (v.kind != MP_ARRAY) {
        *n_rest = UINT64_MAX;
        *m = save;
        return mp_skip(m);
    }
    for (uint64_t i = 0; i < v.u; i++) {
        struct mp at = *m;
        uint64_t h;
        if (mm_key(m, &h)) {
            *mm ^= h;
            continue;
        }
        *m = at;
        struct mv e;
        if (!mp_scalar(m, &e))
            return false;
        if (i == 0 && ev->lora.kind == MP_STR && e.kind == MP_STR &&
            e.u == ev->lora.u && memcmp(e.data, ev->lora.data, e.u) == 0)
            continue; /* the adapter's name */
        if ((*n_rest)++ == 0)
            *rest = e;
    }
    return true;
}

/* A BlockStored's adapter and cache salt into ev->salt, whether it has
 * multimodal keys into ev->mm, or the event skipped when its keys cannot
 * be those of any request: an adapter known only by lora_id
 * (engine-local, never in a request), a lora_name that is empty or not a
 * string, extra keys beyond the adapter's name, the multimodal keys and
 * a first block's cache salt (a prompt embedding's hash, a multimodal
 * key in a form older vLLM wrote: the identifier alone). An extra_keys
 * array that says something but not one entry per block is bad. False
 * only when the bytes are not msgpack. */
static bool
stored_salt(struct event *ev)
{
    const struct mv *lora = &ev->lora;
    bool named = lora->kind == MP_STR && lora->u > 0;
    if ((ev->has_lora_id && !named) || (lora->kind != MP_NIL && !named) ||
        ev->extra_odd) {
        ev->skip = true;
        return true;
    }
    struct mv salt = { .kind = MP_NIL };
    bool some = false;
    struct mp m = ev->extra;
    for (uint64_t i = 0; ev->has_extra && i < ev->n_extra; i++) {
        bool s;
        uint64_t n, mm;
        struct mv rest;
        if (!extra_entry(&m, ev, &s, &mm, &n, &rest))
            return false;
        some |= s;
        ev->mm |= mm != 0;
        if (n == 0)
            continue;
        if (i == 0 && !ev->has_parent && n == 1 && rest.kind == MP_STR &&
            rest.u > 0) {
            salt = rest; /* the request's cache_salt */
            continue;
        }
        ev->skip = true;
        return true;
    }
    ev->bad |= some && ev->n_extra != ev->n_hashes;
    uint64_t tenant = 0, adapter = 0;
    if (salt.kind == MP_STR)
        tenant = lr_name_hash((const char *)salt.data, (size_t)salt.u);
    if (named)
        adapter = lr_name_hash((const char *)lora->data, (size_t)lora->u);
    ev->salt = lr_adapter_salt(tenant, adapter);
    return true;
}

/* Each block's multimodal hash (lr_kv_stored.mm_hashes) into out, one
 * per block hash, for an event stored_salt() found some in. */
static void
stored_mm(const struct event *ev, uint64_t *out)
{
    struct mp m = ev->extra;
    for (uint64_t i = 0; i < ev->n_hashes; i++) {
        bool s;
        uint64_t n;
        struct mv rest;
        out[i] = 0;
        if (i < ev->n_extra)
            (void)extra_entry(&m, ev, &s, &out[i], &n, &rest); /* read once */
    }
}

/* The kinds of KV-cache group whose blocks hold the whole prefix: full
 * attention, and multi-head latent attention (DeepSeek-style models; in
 * vLLM a kind of full attention). A sliding window, a Mamba state or a
 * chunked local attention keeps only part of it. */
static bool
full_prefix_kind(const struct mv *v)
{
    return str_is(v, "full_attention") || str_is(v, "mla_attention");
}

/* The lr_tier of a medium: nil or "GPU" the GPU's own cache; "CPU" host
 * memory (vLLM's OffloadingConnector and LMCache write "CPU", vLLM's
 * Mooncake store and Ascend connectors "cpu"); "DISK" or "disk" a disk
 * tier (as KV-event relays and Dynamo's own tests name it); -1 for any
 * other medium (skipped). */
static int32_t
medium_tier(const struct mv *v)
{
    if (v->kind != MP_STR || str_is(v, "GPU"))
        return LR_TIER_GPU;
    if (str_is(v, "CPU") || str_is(v, "cpu"))
        return LR_TIER_CPU;
    if (str_is(v, "DISK") || str_is(v, "disk"))
        return LR_TIER_DISK;
    return -1;
}

/* One field's value into ev. Fields the schema does not know are skipped
 * whatever their type; a known one of the wrong type makes the event bad.
 * False only when the bytes are not msgpack. */
static bool
read_field(struct mp *m, enum field f, struct event *ev, bool *have,
           struct tokbuf *tb)
{
    struct mv v;
    switch (f) {
    case F_HASHES:
        have[F_HASHES] = true;
        return read_array(m, is_hash, &ev->hashes, &ev->n_hashes, &ev->bad);
    case F_TOKENS:
        have[F_TOKENS] = true;
        return read_tokens(m, &ev->tokens, &ev->n_tokens, &ev->bad, tb,
                           &ev->tok_kept);
    case F_EXTRA_KEYS:
        return read_extra(m, ev);
    case F_OTHER:
        return mp_skip(m);
    default:
        break;
    }
    if (!mp_scalar(m, &v))
        return false;
    bool ok = true;
    switch (f) {
    case F_PARENT:
        ev->has_parent = !is_nil(&v);
        ok = !ev->has_parent || hash_of(&v, &ev->parent);
        break;
    case F_BLOCK_SIZE:
        have[F_BLOCK_SIZE] = true;
        ev->block_size = v.u;
        ok = v.kind == MP_UINT;
        break;
    case F_LORA_ID: /* deprecated; what it says is judged by stored_salt() */
        ev->has_lora_id = !is_nil(&v);
        break;
    case F_LORA_NAME:
        ev->lora = v;
        break;
    case F_MEDIUM:
        ev->tier = medium_tier(&v);
        ev->skip |= ev->tier < 0;
        ok = v.kind == MP_NIL || v.kind == MP_STR;
        break;
    case F_GROUP:
        ev->skip |= v.kind == MP_UINT && v.u != 0;
        ok = v.kind == MP_NIL || v.kind == MP_UINT;
        break;
    default: /* F_SPEC_KIND */
        ev->skip |= v.kind == MP_STR && !full_prefix_kind(&v);
        ok = v.kind == MP_NIL || v.kind == MP_STR;
        break;
    }
    ev->bad |= !ok;
    return true;
}

/* The fields of an event to apply add up. */
static bool
event_ok(const struct event *ev, const bool *have)
{
    switch (ev->type) {
    case EV_STORED:
        /* a lower tier's store without token ids (vLLM's offloading
         * connector: block size 0 or the offloaded block's) names blocks
         * by their engine hashes alone */
        if (have[F_HASHES] && ev->tier != LR_TIER_GPU && ev->n_tokens == 0)
            return true;
        if (!have[F_HASHES] || !have[F_TOKENS] || !have[F_BLOCK_SIZE])
            return false;
        if (ev->block_size == 0 || ev->block_size > LR_INDEX_MAX_BLOCK_TOKENS)
            return false;
        return ev->n_tokens == ev->n_hashes * ev->block_size &&
               ev->n_tokens <= LR_INDEX_MAX_TOKENS;
    case EV_REMOVED:
        return have[F_HASHES];
    default:
        return true;
    }
}

/* One event, positional or map form. */
static bool
read_event(struct mp *m, struct event *ev, struct tokbuf *tb)
{
    memset(ev, 0, sizeof *ev);
    ev->tok_kept = TOK_NONE;
    bool have[F_OTHER + 1] = { false };
    struct mv v, t;
    if (!mp_next(m, &v))
        return false;
    if (v.kind == MP_ARRAY) {
        if (v.u == 0 || !mp_next(m, &t) || t.kind != MP_STR)
            return false;
        ev->type = type_named(&t);
        const enum field *pos = NULL;
        size_t npos = 0;
        if (ev->type == EV_STORED) {
            pos = stored_pos;
            npos = sizeof stored_pos / sizeof stored_pos[0];
        } else if (ev->type == EV_REMOVED) {
            pos = removed_pos;
            npos = sizeof removed_pos / sizeof removed_pos[0];
        }
        for (uint64_t i = 1; i < v.u; i++)
            if (!read_field(m, i - 1 < npos ? pos[i - 1] : F_OTHER, ev, have,
                            tb))
                return false;
    } else if (v.kind == MP_MAP) {
        bool typed = false;
        for (uint64_t i = 0; i < v.u; i++) {
            struct mv k;
            if (!mp_next(m, &k) || k.kind != MP_STR)
                return false;
            if (str_is(&k, "type")) {
                if (typed || !mp_next(m, &t) || t.kind != MP_STR)
                    return false;
                typed = true;
                ev->type = type_named(&t);
                continue;
            }
            if (!read_field(m, field_named(&k), ev, have, tb))
                return false;
        }
        if (!typed)
            return false;
    } else {
        return false;
    }
    /* A skipped event is not checked beyond what decided the skip. */
    if (ev->type == EV_UNKNOWN)
        ev->skip = true;
    if (ev->type == EV_STORED && !ev->skip && !stored_salt(ev))
        return false;
    if (ev->skip)
        ev->bad = false;
    else
        ev->bad |= !event_ok(ev, have);
    return true;
}

/* What reads the events array for read_batch(): given m at the first of
 * n events, it leaves m after the last and returns true, or false when
 * the bytes are not a batch. */
struct events_reader {
    bool (*read)(struct events_reader *er, struct mp *m, uint64_t n);
};

/* The events array: *events at its first element, m after the last. */
static bool
read_events(struct mp *m, struct events_reader *er, struct mp *events,
            uint64_t *n_events)
{
    struct mv v;
    if (!mp_next(m, &v) || v.kind != MP_ARRAY)
        return false;
    *events = *m;
    *n_events = v.u;
    return er->read(er, m, v.u);
}

/* The reader that only steps over the events (lr__vllm_peek). */
static bool
skip_events(struct events_reader *er, struct mp *m, uint64_t n)
{
    (void)er;
    for (uint64_t i = 0; i < n; i++)
        if (!mp_skip(m))
            return false;
    return true;
}

/* The batch's timestamp (a float or an integer) and data-parallel rank
 * are informational: of another type, they are ignored. A timestamp that
 * is not a time (NaN, infinite, negative, past LR__KV_TS_MAX) makes the
 * batch corrupt: a router orders an engine's batches by it. */
static bool
batch_ts(lr_vllm_batch_info *info, const struct mv *v)
{
    double t;
    if (v->kind == MP_FLOAT)
        t = v->f;
    else if (v->kind == MP_UINT)
        t = v->u > (uint64_t)LR__KV_TS_MAX ? INFINITY : (double)v->u;
    else
        return true;
    if (!(t >= 0 && t <= LR__KV_TS_MAX)) /* NaN fails too */
        return false;
    info->timestamp = t;
    return true;
}

static void
batch_dp_rank(lr_vllm_batch_info *info, const struct mv *v)
{
    if (v->kind == MP_UINT && v->u <= INT64_MAX)
        info->dp_rank = (int64_t)v->u;
}

/* The batch header: leaves m at the first event and says how many.
 * Positional form [ts, events, dp_rank, ...] or a map with the keys "ts",
 * "events" and "data_parallel_rank"; other entries are skipped. */
static bool
read_batch(struct mp *m, lr_vllm_batch_info *info, struct events_reader *er,
           struct mp *events, uint64_t *n_events)
{
    struct mv v, e;
    bool have_events = false;
    if (!mp_next(m, &v))
        return false;
    if (v.kind == MP_ARRAY) {
        if (v.u < 2)
            return false;
        for (uint64_t i = 0; i < v.u; i++) {
            if (i == 1) {
                if (!read_events(m, er, events, n_events))
                    return false;
                have_events = true;
            } else if (!mp_scalar(m, &e)) {
                return false;
            } else if (i == 0) {
                if (!batch_ts(info, &e))
                    return false;
            } else if (i == 2) {
                batch_dp_rank(info, &e);
            }
        }
    } else if (v.kind == MP_MAP) {
        for (uint64_t i = 0; i < v.u; i++) {
            struct mv k;
            if (!mp_next(m, &k) || k.kind != MP_STR)
                return false;
            if (str_is(&k, "events")) {
                if (have_events || !read_events(m, er, events, n_events))
                    return false;
                have_events = true;
            } else if (!mp_scalar(m, &e)) {
                return false;
            } else if (str_is(&k, "ts")) {
                if (!batch_ts(info, &e))
                    return false;
            } else if (str_is(&k, "data_parallel_rank")) {
                batch_dp_rank(info, &e);
            }
        }
    } else {
        return false;
    }
    return have_events && m->p == m->end;
}

/* ---- the two passes ------------------------------------------------------ */

static void
copy_hashes(struct mp at, uint64_t n, uint64_t *out)
{
    for (uint64_t i = 0; i < n; i++) {
        struct mv v;
        (void)mp_next(&at, &v); /* checked in pass 1 */
        (void)hash_of(&v, &out[i]);
    }
}

static void
copy_tokens(struct mp at, uint64_t n, uint32_t *out)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t t;
        size_t k = at.end - at.p >= 5 ? mp_token_at(at.p, &t) : 0;
        if (k > 0) {
            at.p += k;
        } else {
            struct mv v;
            (void)mp_next(&at, &v); /* checked in pass 1 */
            t = (uint32_t)v.u;
        }
        out[i] = t;
    }
}

/* Pass 1, run as read_batch()'s events reader, so that the events are
 * read once before pass 2 and not stepped over first: every event well
 * formed, its block size placeable, and the largest hash and token counts
 * among the events to apply, which size the scratch of pass 2. Each
 * event as read goes to evs when that memory could be had, so that pass 2
 * does not read it again. The first event that cannot be applied decides
 * the status (LR_ECORRUPT: not an event; LR_ENOTSUP: a block size the
 * index cannot place); from there on the events are only stepped over,
 * so that bytes broken further on still refuse the batch as corrupt. */
struct pass1 {
    struct events_reader er; /* first: the reader is handed &er */
    const lr_index *ix;
    struct lr__mem *mem;
    struct event *evs;
    size_t evbytes;
    struct tokbuf tb; /* used only when evs could be had */
    uint64_t max_hashes, max_tokens;
    bool mm; /* an event to apply has multimodal keys */
    lr_status st;
};

static bool
check_events(struct events_reader *er, struct mp *m, uint64_t n)
{
    struct pass1 *p = (struct pass1 *)(void *)er;
    if (n > UINT32_MAX)
        return false;
    if (lr__mul_size((size_t)n, sizeof *p->evs, &p->evbytes) && p->evbytes > 0)
        p->evs = lr__alloc(p->mem, p->evbytes);
    uint32_t B = lr_index_block_tokens(p->ix);
    for (uint64_t i = 0; i < n; i++) {
        struct mp start = *m;
        struct event ev;
        if (p->st == LR_OK &&
            !read_event(m, &ev, p->evs != NULL ? &p->tb : NULL))
            p->st = LR_ECORRUPT;
        if (p->st != LR_OK) {
            *m = start;
            if (!mp_skip(m))
                return false;
            continue;
        }
        /* a lower tier's store with tokens in blocks the index cannot
         * place is skipped (it never refused a batch before tiers) */
        bool placeable = ev.n_tokens == 0 || ev.block_size % B == 0;
        if (ev.type == EV_STORED && ev.tier != LR_TIER_GPU && !ev.skip &&
            !placeable) {
            ev.skip = true;
            ev.bad = false;
        }
        /* a store with multimodal keys in engine blocks of several index
         * blocks does not say which of them an input overlaps */
        if (ev.type == EV_STORED && ev.mm && !ev.skip && ev.block_size != B) {
            ev.skip = true;
            ev.bad = false;
        }
        if (p->evs != NULL)
            p->evs[i] = ev;
        if (ev.skip || ev.bad)
            continue;
        p->mm |= ev.type == EV_STORED && ev.mm;
        if (ev.type == EV_STORED && ev.tier == LR_TIER_GPU &&
            ev.block_size % B != 0) {
            p->st = LR_ENOTSUP;
            continue;
        }
        if (ev.n_hashes > p->max_hashes)
            p->max_hashes = ev.n_hashes;
        if (ev.n_tokens > p->max_tokens)
            p->max_tokens = ev.n_tokens;
    }
    return true;
}

/* Hashes and tokens of one event copied out of the buffer, and its
 * blocks' multimodal hashes when a store has some, in one allocation
 * sized by pass 1. */
struct scratch {
    uint64_t *hashes;
    uint64_t *mm; /* NULL when no event has multimodal keys */
    uint32_t *tokens;
    void *raw;
    size_t bytes;
};

static lr_status
scratch_alloc(struct lr__mem *mem, uint64_t max_hashes, uint64_t max_tokens,
              bool mm, struct scratch *sc)
{
    size_t hbytes = (size_t)max_hashes * sizeof(uint64_t);
    size_t mbytes = mm ? hbytes : 0;
    size_t tbytes = (size_t)max_tokens * sizeof(uint32_t);
    uint8_t *raw = NULL;
    if (hbytes + mbytes + tbytes > 0) {
        raw = lr__alloc(mem, hbytes + mbytes + tbytes);
        if (raw == NULL)
            return LR_ENOMEM;
    }
    sc->raw = raw;
    sc->bytes = hbytes + mbytes + tbytes;
    sc->hashes = (uint64_t *)(void *)raw;
    sc->mm = mm && raw != NULL ? (uint64_t *)(void *)(raw + hbytes) : NULL;
    sc->tokens =
        raw != NULL ? (uint32_t *)(void *)(raw + hbytes + mbytes) : NULL;
    return LR_OK;
}

/* A BlockStored event into the index. LR_ENOENT (the parent is not
 * there) counts as unplaced; any other failure stops the batch. */
static lr_status
apply_stored(lr_index *ix, uint32_t instance, const struct event *ev,
             const struct scratch *sc, const struct tokbuf *tb, uint64_t now_ns,
             lr_vllm_batch_info *info)
{
    copy_hashes(ev->hashes, ev->n_hashes, sc->hashes);
    const uint32_t *tokens = sc->tokens;
    if (ev->tok_kept != TOK_NONE)
        tokens = tb->v + ev->tok_kept;
    else
        copy_tokens(ev->tokens, ev->n_tokens, sc->tokens);
    lr_kv_stored k;
    lr_kv_stored_init(&k);
    k.block_hashes = sc->hashes;
    k.n_blocks = (size_t)ev->n_hashes;
    k.has_parent = ev->has_parent;
    k.parent_hash = ev->parent;
    k.block_size = (uint32_t)ev->block_size;
    k.token_ids = ev->n_tokens > 0 ? tokens : NULL;
    k.n_tokens = (size_t)ev->n_tokens;
    k.tenant_salt = ev->salt; /* under a parent, the parent's key rules */
    k.tier = ev->tier;
    if (ev->mm && sc->mm != NULL) {
        stored_mm(ev, sc->mm);
        k.mm_hashes = sc->mm;
    }
    lr_status s = lr_index_kv_stored(ix, instance, &k, now_ns);
    if (s == LR_ENOENT) {
        info->unplaced++;
        return LR_OK;
    }
    if (s == LR_OK)
        info->stored++;
    return s;
}

/* Pass 2's step: one event checked by pass 1, counted in info. */
static lr_status
apply_event(lr_index *ix, uint32_t instance, const struct event *ev,
            const struct scratch *sc, const struct tokbuf *tb, uint64_t now_ns,
            lr_vllm_batch_info *info)
{
    if (ev->skip) {
        info->skipped++;
        return LR_OK;
    }
    if (ev->bad) {
        info->invalid++;
        return LR_OK;
    }
    switch (ev->type) {
    case EV_STORED:
        return apply_stored(ix, instance, ev, sc, tb, now_ns, info);
    case EV_REMOVED:
        copy_hashes(ev->hashes, ev->n_hashes, sc->hashes);
        /* LR_ENOENT: the index never saw the instance, nothing to drop */
        (void)lr_index_kv_removed_tier(ix, instance, ev->tier, sc->hashes,
                                       (size_t)ev->n_hashes, NULL);
        info->removed++;
        return LR_OK;
    default:
        (void)lr_index_kv_cleared(ix, instance);
        info->cleared++;
        return LR_OK;
    }
}

lr_status
lr__vllm_apply(lr_index *ix, struct lr__mem *mem, uint32_t instance,
               const uint8_t *buf, size_t len, uint64_t now_ns,
               lr_vllm_batch_info *info)
{
    struct mp m = { buf, buf + len };
    struct mp events = m;
    uint64_t n_events = 0;
    struct pass1 p1 = {
        .er = { check_events }, .ix = ix, .mem = mem, .tb = { .mem = mem }
    };
    lr_status st = LR_ECORRUPT;
    if (len > 0 && read_batch(&m, info, &p1.er, &events, &n_events)) {
        info->events = (uint32_t)n_events;
        st = p1.st;
    }
    struct event *evs = p1.evs;
    struct scratch sc = { 0 };
    if (st == LR_OK)
        st = scratch_alloc(mem, p1.max_hashes, p1.max_tokens, p1.mm, &sc);
    /* in order, up to the first failure; info->done says how far */
    struct mp at = events;
    uint32_t i = 0;
    for (; st == LR_OK && i < n_events; i++) {
        struct event ev;
        if (evs != NULL)
            ev = evs[i];
        else
            (void)read_event(&at, &ev, NULL); /* checked in pass 1 */
        st = apply_event(ix, instance, &ev, &sc, &p1.tb, now_ns, info);
        if (st != LR_OK)
            break;
    }
    info->done = i;
    lr__free(mem, sc.raw, sc.bytes);
    lr__free(mem, p1.tb.v, p1.tb.cap * sizeof *p1.tb.v);
    if (evs != NULL)
        lr__free(mem, evs, p1.evbytes);
    return st;
}

lr_status
lr__vllm_peek(const uint8_t *buf, size_t len, double *ts)
{
    struct mp m = { buf, buf + len };
    struct mp events;
    uint64_t n_events = 0;
    lr_vllm_batch_info info;
    memset(&info, 0, sizeof info);
    struct events_reader skip = { skip_events };
    if (len == 0 || !read_batch(&m, &info, &skip, &events, &n_events))
        return LR_ECORRUPT;
    *ts = info.timestamp;
    return LR_OK;
}

LR__INIT_SIZED(lr_vllm_batch_info_init_sized, lr_vllm_batch_info, info_defaults,
               .dp_rank = -1)

lr_status
lr__vllm_info_out(lr_vllm_batch_info *out, const lr_vllm_batch_info *in)
{
    if (out == NULL)
        return LR_OK;
    size_t n = out->struct_size < sizeof *in ? out->struct_size : sizeof *in;
    lr_vllm_batch_info tmp = *in;
    tmp.struct_size = out->struct_size;
    memcpy(out, &tmp, n);
    return LR_OK;
}

lr_status
lr_index_vllm_batch(lr_index *idx, uint32_t instance, const uint8_t *buf,
                    size_t len, uint64_t now_ns, lr_vllm_batch_info *info)
{
    LR_RETURN_IF(idx == NULL || (buf == NULL && len != 0), LR_EINVAL);
    LR_RETURN_IF(instance == LR_INSTANCE_NONE, LR_EINVAL);
    LR_RETURN_IF(info != NULL && info->struct_size < LR_VLLM_BATCH_INFO_SIZE_V1,
                 LR_EVERSION);
    lr_vllm_batch_info in;
    lr_vllm_batch_info_init(&in);
    lr_status st = lr__index_judge(idx, now_ns);
    if (st == LR_OK)
        st = lr__vllm_apply(idx, lr__index_mem(idx), instance, buf, len, now_ns,
                            &in);
    lr__vllm_info_out(info, &in);
    return st;
}
