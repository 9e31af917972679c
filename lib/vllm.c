/* vLLM KV-event batches: a strict msgpack reader for the one schema, and
 * the two passes that make a malformed batch change nothing.
 *
 * Our own reader, not msgpack-c: the schema needs eight msgpack types,
 * reading in place needs no allocation, and a library with a frozen ABI
 * gains nothing from a second dependency for ~200 lines that the fuzzer
 * covers completely.
 *
 * Pass 1 decodes every event and checks it (types, sizes, block size);
 * it also finds the largest event, so that one scratch allocation serves
 * pass 2. Pass 2 decodes again and applies event by event. */
#include <string.h>

#include "common.h"
#include "index.h"
#include "libroute/lr_vllm.h"
#include "vllm.h"

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

/* Read a length-prefixed payload of `lenbytes` big-endian length bytes. */
static bool
payload(struct mp *m, size_t lenbytes, struct mv *v)
{
    const uint8_t *q;
    if (!take(m, lenbytes, &q))
        return false;
    v->u = be(q, lenbytes);
    return take(m, (size_t)v->u, &v->data);
}

/* Containers: every element takes at least one byte, so a count larger
 * than what is left is corrupt (and bounds the work a hostile count can
 * cause). */
static bool
count(struct mp *m, size_t lenbytes, uint64_t per, struct mv *v)
{
    const uint8_t *q;
    if (!take(m, lenbytes, &q))
        return false;
    v->u = be(q, lenbytes);
    return v->u <= (uint64_t)(m->end - m->p) / per;
}

static bool
mp_next(struct mp *m, struct mv *v)
{
    const uint8_t *q;
    if (!take(m, 1, &q))
        return false;
    uint8_t c = q[0];
    v->data = NULL;
    v->f = 0;
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
    if (c >= 0x80 && c <= 0x8f) {
        v->kind = MP_MAP;
        v->u = c & 0x0f;
        return v->u <= (uint64_t)(m->end - m->p) / 2;
    }
    if (c >= 0x90 && c <= 0x9f) {
        v->kind = MP_ARRAY;
        v->u = c & 0x0f;
        return v->u <= (uint64_t)(m->end - m->p);
    }
    if (c >= 0xa0 && c <= 0xbf) {
        v->kind = MP_STR;
        v->u = c & 0x1f;
        return take(m, (size_t)v->u, &v->data);
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
    case 0xc4:
    case 0xc5:
    case 0xc6:
        v->kind = MP_BIN;
        return payload(m, (size_t)1 << (c - 0xc4), v);
    case 0xc7:
    case 0xc8:
    case 0xc9:
        v->kind = MP_EXT;
        if (!take(m, (size_t)1 << (c - 0xc7), &q))
            return false;
        v->u = be(q, (size_t)1 << (c - 0xc7));
        return take(m, 1, &q) && take(m, (size_t)v->u, &v->data);
    case 0xca: {
        if (!take(m, 4, &q))
            return false;
        uint32_t b = (uint32_t)be(q, 4);
        float f;
        memcpy(&f, &b, 4);
        v->kind = MP_FLOAT;
        v->f = f;
        return true;
    }
    case 0xcb: {
        if (!take(m, 8, &q))
            return false;
        uint64_t b = be(q, 8);
        memcpy(&v->f, &b, 8);
        v->kind = MP_FLOAT;
        return true;
    }
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        v->kind = MP_UINT;
        if (!take(m, (size_t)1 << (c - 0xcc), &q))
            return false;
        v->u = be(q, (size_t)1 << (c - 0xcc));
        return true;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        size_t n = (size_t)1 << (c - 0xd0);
        if (!take(m, n, &q))
            return false;
        uint64_t u = be(q, n);
        if (n < 8 && (u >> (8 * n - 1)) != 0) /* sign-extend */
            u |= ~(uint64_t)0 << (8 * n);
        v->u = u;
        v->kind = (u >> 63) ? MP_NINT : MP_UINT;
        return true;
    }
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        v->kind = MP_EXT;
        v->u = (uint64_t)1 << (c - 0xd4);
        return take(m, 1, &q) && take(m, (size_t)v->u, &v->data);
    case 0xd9:
    case 0xda:
    case 0xdb:
        v->kind = MP_STR;
        return payload(m, (size_t)1 << (c - 0xd9), v);
    case 0xdc:
    case 0xdd:
        v->kind = MP_ARRAY;
        return count(m, (size_t)2 << (c - 0xdc), 1, v);
    case 0xde:
    case 0xdf:
        v->kind = MP_MAP;
        return count(m, (size_t)2 << (c - 0xde), 2, v);
    default: /* 0xc1 is never used */
        return false;
    }
}

/* Skip one whole value, nested containers included, without recursion. */
static bool
mp_skip(struct mp *m)
{
    uint64_t pending = 1;
    while (pending > 0) {
        struct mv v;
        if (!mp_next(m, &v))
            return false;
        pending--;
        if (v.kind == MP_ARRAY)
            pending += v.u;
        else if (v.kind == MP_MAP)
            pending += 2 * v.u;
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
 * msgpack integers each) until pass 2 copies them out. */
struct event {
    enum ev_type type;
    bool skip;
    struct mp hashes; /* positioned at the array's first element */
    uint64_t n_hashes;
    bool has_parent;
    uint64_t parent;
    struct mp tokens;
    uint64_t n_tokens;
    uint64_t block_size;
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

/* An array of hashes: check each, leave `at` at its first element. */
static bool
read_hashes(struct mp *m, struct mp *at, uint64_t *n)
{
    struct mv v;
    if (!mp_next(m, &v) || v.kind != MP_ARRAY)
        return false;
    *at = *m;
    *n = v.u;
    for (uint64_t i = 0; i < v.u; i++) {
        struct mv e;
        uint64_t h;
        if (!mp_next(m, &e) || !hash_of(&e, &h))
            return false;
    }
    return true;
}

static bool
read_tokens(struct mp *m, struct mp *at, uint64_t *n)
{
    struct mv v;
    if (!mp_next(m, &v) || v.kind != MP_ARRAY)
        return false;
    *at = *m;
    *n = v.u;
    for (uint64_t i = 0; i < v.u; i++) {
        struct mv e;
        if (!mp_next(m, &e) || e.kind != MP_UINT || e.u > UINT32_MAX)
            return false;
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

/* extra_keys: nil, or a list whose entries are all nil. Anything else
 * (multimodal hashes, a cache salt) makes the tokens alone the wrong key. */
static bool
read_extra(struct mp *m, bool *skip)
{
    struct mp save = *m;
    struct mv v;
    if (!mp_next(m, &v))
        return false;
    if (v.kind == MP_NIL)
        return true;
    if (v.kind != MP_ARRAY) {
        *skip = true;
        *m = save;
        return mp_skip(m);
    }
    for (uint64_t i = 0; i < v.u; i++) {
        struct mp s = *m;
        struct mv e;
        if (!mp_next(m, &e))
            return false;
        if (e.kind != MP_NIL) {
            *skip = true;
            *m = s;
            if (!mp_skip(m))
                return false;
        }
    }
    return true;
}

/* One field's value into ev. Fields the schema does not know are skipped
 * whatever their type; known ones must have their type. */
static bool
read_field(struct mp *m, enum field f, struct event *ev, bool *have)
{
    struct mv v;
    struct mp save = *m;
    switch (f) {
    case F_HASHES:
        have[F_HASHES] = true;
        return read_hashes(m, &ev->hashes, &ev->n_hashes);
    case F_TOKENS:
        have[F_TOKENS] = true;
        return read_tokens(m, &ev->tokens, &ev->n_tokens);
    case F_EXTRA_KEYS:
        return read_extra(m, &ev->skip);
    case F_OTHER:
        return mp_skip(m);
    default:
        break;
    }
    if (!mp_next(m, &v))
        return false;
    if (v.kind == MP_ARRAY || v.kind == MP_MAP) {
        *m = save;
        if (!mp_skip(m))
            return false;
    }
    switch (f) {
    case F_PARENT:
        ev->has_parent = !is_nil(&v);
        return !ev->has_parent || hash_of(&v, &ev->parent);
    case F_BLOCK_SIZE:
        have[F_BLOCK_SIZE] = true;
        ev->block_size = v.u;
        return v.kind == MP_UINT;
    case F_LORA_ID:
    case F_LORA_NAME:
        ev->skip |= !is_nil(&v);
        return true;
    case F_MEDIUM:
        ev->skip |= !is_nil(&v) && !str_is(&v, "GPU");
        return v.kind == MP_NIL || v.kind == MP_STR;
    case F_GROUP:
        ev->skip |= !is_nil(&v) && !(v.kind == MP_UINT && v.u == 0);
        return v.kind == MP_NIL || v.kind == MP_UINT;
    case F_SPEC_KIND:
        ev->skip |= !is_nil(&v) && !str_is(&v, "full_attention");
        return true;
    default:
        return false;
    }
}

static bool
check_event(struct event *ev, const bool *have)
{
    switch (ev->type) {
    case EV_STORED:
        if (!have[F_HASHES] || !have[F_TOKENS] || !have[F_BLOCK_SIZE])
            return false;
        if (ev->block_size == 0 || ev->block_size > LR_INDEX_MAX_BLOCK_TOKENS)
            return false;
        return ev->n_tokens == ev->n_hashes * ev->block_size;
    case EV_REMOVED:
        return have[F_HASHES];
    default:
        return true;
    }
}

/* One event, positional or map form. */
static bool
read_event(struct mp *m, struct event *ev)
{
    memset(ev, 0, sizeof *ev);
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
            if (!read_field(m, i - 1 < npos ? pos[i - 1] : F_OTHER, ev, have))
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
            if (!read_field(m, field_named(&k), ev, have))
                return false;
        }
        if (!typed)
            return false;
    } else {
        return false;
    }
    if (ev->type == EV_UNKNOWN)
        ev->skip = true;
    return check_event(ev, have);
}

/* The batch header: leaves m at the first event and says how many. */
static bool
read_batch(struct mp *m, lr_vllm_batch_info *info, struct mp *events,
           uint64_t *n_events)
{
    struct mv v;
    bool have_events = false;
    if (!mp_next(m, &v))
        return false;
    if (v.kind == MP_ARRAY) {
        if (v.u < 2)
            return false;
        for (uint64_t i = 0; i < v.u; i++) {
            struct mp save = *m;
            struct mv e;
            if (i == 1) {
                if (!mp_next(m, &e) || e.kind != MP_ARRAY)
                    return false;
                *events = *m;
                *n_events = e.u;
                for (uint64_t j = 0; j < e.u; j++)
                    if (!mp_skip(m))
                        return false;
                have_events = true;
                continue;
            }
            if (!mp_next(m, &e))
                return false;
            if (e.kind == MP_ARRAY || e.kind == MP_MAP) {
                *m = save;
                if (!mp_skip(m))
                    return false;
            }
            if (i == 0 && e.kind == MP_FLOAT)
                info->timestamp = e.f;
            else if (i == 0 && e.kind == MP_UINT)
                info->timestamp = (double)e.u;
            else if (i == 2 && e.kind == MP_UINT && e.u <= INT64_MAX)
                info->dp_rank = (int64_t)e.u;
        }
    } else if (v.kind == MP_MAP) {
        for (uint64_t i = 0; i < v.u; i++) {
            struct mv k, e;
            if (!mp_next(m, &k) || k.kind != MP_STR)
                return false;
            struct mp save = *m;
            if (str_is(&k, "events")) {
                if (have_events || !mp_next(m, &e) || e.kind != MP_ARRAY)
                    return false;
                *events = *m;
                *n_events = e.u;
                for (uint64_t j = 0; j < e.u; j++)
                    if (!mp_skip(m))
                        return false;
                have_events = true;
                continue;
            }
            if (!mp_next(m, &e))
                return false;
            if (e.kind == MP_ARRAY || e.kind == MP_MAP) {
                *m = save;
                if (!mp_skip(m))
                    return false;
            }
            if (str_is(&k, "ts") && e.kind == MP_FLOAT)
                info->timestamp = e.f;
            else if (str_is(&k, "ts") && e.kind == MP_UINT)
                info->timestamp = (double)e.u;
            else if (str_is(&k, "data_parallel_rank") && e.kind == MP_UINT &&
                     e.u <= INT64_MAX)
                info->dp_rank = (int64_t)e.u;
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
        struct mv v;
        (void)mp_next(&at, &v);
        out[i] = (uint32_t)v.u;
    }
}

lr_status
lr__vllm_apply(lr_index *ix, struct lr__mem *mem, uint32_t instance,
               const uint8_t *buf, size_t len, uint64_t now_ns,
               lr_vllm_batch_info *info)
{
    struct mp m = { buf, buf + len };
    struct mp events;
    uint64_t n_events = 0;
    if (len == 0 || !read_batch(&m, info, &events, &n_events) ||
        n_events > UINT32_MAX)
        return LR_ECORRUPT;
    info->events = (uint32_t)n_events;

    /* pass 1: every event well formed, placeable block sizes, scratch size */
    uint32_t B = lr_index_block_tokens(ix);
    uint64_t max_hashes = 0, max_tokens = 0;
    struct mp at = events;
    for (uint64_t i = 0; i < n_events; i++) {
        struct event ev;
        if (!read_event(&at, &ev))
            return LR_ECORRUPT;
        if (ev.skip)
            continue;
        if (ev.type == EV_STORED && ev.block_size % B != 0)
            return LR_ENOTSUP;
        if (ev.n_tokens > LR_INDEX_MAX_TOKENS)
            return LR_ECORRUPT;
        if (ev.n_hashes > max_hashes)
            max_hashes = ev.n_hashes;
        if (ev.n_tokens > max_tokens)
            max_tokens = ev.n_tokens;
    }
    size_t hbytes = (size_t)max_hashes * sizeof(uint64_t);
    size_t tbytes = (size_t)max_tokens * sizeof(uint32_t);
    uint8_t *scratch = NULL;
    if (hbytes + tbytes > 0) {
        scratch = lr__alloc(mem, hbytes + tbytes);
        if (scratch == NULL)
            return LR_ENOMEM;
    }
    uint64_t *hashes = (uint64_t *)(void *)scratch;
    uint32_t *tokens =
        scratch != NULL ? (uint32_t *)(void *)(scratch + hbytes) : NULL;

    /* pass 2: apply in order */
    lr_status st = LR_OK;
    at = events;
    uint32_t i;
    for (i = 0; i < n_events; i++) {
        struct event ev;
        (void)read_event(&at, &ev);
        if (ev.skip) {
            info->skipped++;
            continue;
        }
        if (ev.type == EV_STORED) {
            copy_hashes(ev.hashes, ev.n_hashes, hashes);
            copy_tokens(ev.tokens, ev.n_tokens, tokens);
            lr_kv_stored k;
            lr_kv_stored_init(&k);
            k.block_hashes = hashes;
            k.n_blocks = (size_t)ev.n_hashes;
            k.has_parent = ev.has_parent;
            k.parent_hash = ev.parent;
            k.block_size = (uint32_t)ev.block_size;
            k.token_ids = tokens;
            k.n_tokens = (size_t)ev.n_tokens;
            lr_status s = lr_index_kv_stored(ix, instance, &k, now_ns);
            if (s == LR_ENOENT) {
                info->unplaced++;
            } else if (s != LR_OK) {
                st = s;
                break;
            } else {
                info->stored++;
            }
        } else if (ev.type == EV_REMOVED) {
            copy_hashes(ev.hashes, ev.n_hashes, hashes);
            /* LR_ENOENT: the index never saw the instance, nothing to drop */
            (void)lr_index_kv_removed(ix, instance, hashes, (size_t)ev.n_hashes,
                                      NULL);
            info->removed++;
        } else {
            (void)lr_index_kv_cleared(ix, instance);
            info->cleared++;
        }
    }
    info->done = i;
    lr__free(mem, scratch, hbytes + tbytes);
    return st;
}

static const lr_vllm_batch_info info_defaults = {
    .struct_size = sizeof(lr_vllm_batch_info),
    .dp_rank = -1,
};

void
lr_vllm_batch_info_init_sized(lr_vllm_batch_info *info, size_t size)
{
    lr__init_sized(info, size, &info_defaults, sizeof info_defaults);
}

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
    lr_status st = lr__vllm_apply(idx, lr__index_mem(idx), instance, buf, len,
                                  now_ns, &in);
    lr__vllm_info_out(info, &in);
    return st;
}
