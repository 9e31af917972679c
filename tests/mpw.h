/* A small msgpack writer for tests and corpus generation: vLLM KV-event
 * batches in both encodings. `wide` picks the longest form of every
 * header and integer, so a test can cover every length encoding. */
#ifndef LIBROUTE_TESTS_MPW_H
#define LIBROUTE_TESTS_MPW_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bytes a writer holds; a user writing larger batches (the bench)
 * defines it first. */
#ifndef MPW_CAP
#define MPW_CAP (1 << 16)
#endif

struct mpw {
    uint8_t buf[MPW_CAP];
    size_t n;
    bool wide;
    bool overflow;
};

static inline void
mpw_bytes(struct mpw *w, const void *p, size_t n)
{
    if (w->n + n > sizeof w->buf) {
        w->overflow = true;
        return;
    }
    memcpy(w->buf + w->n, p, n);
    w->n += n;
}

static inline void
mpw_byte(struct mpw *w, uint8_t b)
{
    mpw_bytes(w, &b, 1);
}

static inline void
mpw_be(struct mpw *w, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--)
        mpw_byte(w, (uint8_t)(v >> (8 * i)));
}

static inline void
mpw_uint(struct mpw *w, uint64_t v)
{
    if (w->wide) {
        mpw_byte(w, 0xcf);
        mpw_be(w, v, 8);
    } else if (v <= 0x7f) {
        mpw_byte(w, (uint8_t)v);
    } else if (v <= 0xff) {
        mpw_byte(w, 0xcc);
        mpw_be(w, v, 1);
    } else if (v <= 0xffff) {
        mpw_byte(w, 0xcd);
        mpw_be(w, v, 2);
    } else if (v <= 0xffffffffu) {
        mpw_byte(w, 0xce);
        mpw_be(w, v, 4);
    } else {
        mpw_byte(w, 0xcf);
        mpw_be(w, v, 8);
    }
}

static inline void
mpw_int(struct mpw *w, int64_t v)
{
    if (v >= 0) {
        mpw_uint(w, (uint64_t)v);
    } else if (!w->wide && v >= -32) {
        mpw_byte(w, (uint8_t)(int8_t)v);
    } else if (!w->wide && v >= INT8_MIN) {
        mpw_byte(w, 0xd0);
        mpw_be(w, (uint64_t)v, 1);
    } else if (!w->wide && v >= INT32_MIN) {
        mpw_byte(w, 0xd2);
        mpw_be(w, (uint64_t)v, 4);
    } else {
        mpw_byte(w, 0xd3);
        mpw_be(w, (uint64_t)v, 8);
    }
}

static inline void
mpw_nil(struct mpw *w)
{
    mpw_byte(w, 0xc0);
}

static inline void
mpw_f64(struct mpw *w, double d)
{
    uint64_t b;
    memcpy(&b, &d, 8);
    mpw_byte(w, 0xcb);
    mpw_be(w, b, 8);
}

static inline void
mpw_strn(struct mpw *w, const char *s, size_t n)
{
    if (w->wide) {
        mpw_byte(w, 0xdb);
        mpw_be(w, n, 4);
    } else if (n <= 31) {
        mpw_byte(w, (uint8_t)(0xa0 | n));
    } else if (n <= 0xff) {
        mpw_byte(w, 0xd9);
        mpw_be(w, n, 1);
    } else {
        mpw_byte(w, 0xda);
        mpw_be(w, n, 2);
    }
    mpw_bytes(w, s, n);
}

static inline void
mpw_str(struct mpw *w, const char *s)
{
    mpw_strn(w, s, strlen(s));
}

static inline void
mpw_bin(struct mpw *w, const void *p, size_t n)
{
    if (w->wide) {
        mpw_byte(w, 0xc6);
        mpw_be(w, n, 4);
    } else {
        mpw_byte(w, 0xc4);
        mpw_be(w, n, 1);
    }
    mpw_bytes(w, p, n);
}

static inline void
mpw_arr(struct mpw *w, uint32_t n)
{
    if (w->wide) {
        mpw_byte(w, 0xdd);
        mpw_be(w, n, 4);
    } else if (n <= 15) {
        mpw_byte(w, (uint8_t)(0x90 | n));
    } else {
        mpw_byte(w, 0xdc);
        mpw_be(w, n, 2);
    }
}

static inline void
mpw_map(struct mpw *w, uint32_t n)
{
    if (w->wide) {
        mpw_byte(w, 0xdf);
        mpw_be(w, n, 4);
    } else if (n <= 15) {
        mpw_byte(w, (uint8_t)(0x80 | n));
    } else {
        mpw_byte(w, 0xde);
        mpw_be(w, n, 2);
    }
}

/* ---- vLLM events ---------------------------------------------------------- */

/* How an engine hash is shipped. */
enum mpw_hash {
    MPW_HASH_UINT,
    MPW_HASH_INT,
    MPW_HASH_BYTES
};

static inline void
mpw_hash(struct mpw *w, uint64_t h, enum mpw_hash form)
{
    if (form == MPW_HASH_INT) {
        mpw_int(w, (int64_t)h);
    } else if (form == MPW_HASH_BYTES) {
        /* a 32-byte digest whose low 8 bytes are h */
        uint8_t d[32];
        for (int i = 0; i < 24; i++)
            d[i] = (uint8_t)(0x5a ^ i);
        for (int i = 0; i < 8; i++)
            d[24 + i] = (uint8_t)(h >> (56 - 8 * i));
        mpw_bin(w, d, sizeof d);
    } else {
        mpw_uint(w, h);
    }
}

struct mpw_stored {
    const uint64_t *hashes;
    uint32_t n_blocks;
    bool has_parent;
    uint64_t parent;
    const uint32_t *tokens; /* n_blocks * block_size */
    uint32_t block_size;
    const char *medium; /* NULL: nil */
    int64_t lora_id;    /* < 0: nil */
    int group_idx;      /* < 0: absent / nil */
    bool extra_keys;    /* a non-nil entry */
    bool mm_keys;       /* an image over every block: vLLM's tuples */
    bool no_tokens;     /* token_ids empty whatever block_size says (an
                           offloading connector's store) */
};

/* A BlockStored of n blocks (hashes h, tokens t, block_size bs) with no
 * parent, medium, LoRA or group; a case sets what else it needs. */
static inline struct mpw_stored
mpw_stored_of(const uint64_t *h, uint32_t n, const uint32_t *t, uint32_t bs)
{
    struct mpw_stored s = { .hashes = h,
                            .n_blocks = n,
                            .tokens = t,
                            .block_size = bs,
                            .lora_id = -1,
                            .group_idx = -1 };
    return s;
}

static inline void
mpw_hashes(struct mpw *w, const uint64_t *h, uint32_t n, enum mpw_hash form)
{
    mpw_arr(w, n);
    for (uint32_t i = 0; i < n; i++)
        mpw_hash(w, h[i], form);
}

static inline void
mpw_tokens(struct mpw *w, const uint32_t *t, uint32_t n)
{
    mpw_arr(w, n);
    for (uint32_t i = 0; i < n; i++)
        mpw_uint(w, t[i]);
}

static inline void
mpw_extra(struct mpw *w, const struct mpw_stored *s)
{
    if (s->mm_keys) { /* ("img-0", 3 - the block's first token) */
        mpw_arr(w, s->n_blocks);
        for (uint32_t i = 0; i < s->n_blocks; i++) {
            mpw_arr(w, 1);
            mpw_arr(w, 2);
            mpw_str(w, "img-0");
            mpw_int(w, 3 - (int64_t)i * s->block_size);
        }
        return;
    }
    if (!s->extra_keys) {
        mpw_nil(w);
        return;
    }
    mpw_arr(w, s->n_blocks);
    for (uint32_t i = 0; i < s->n_blocks; i++) {
        if (i == 0) {
            mpw_arr(w, 1);
            mpw_str(w, "mm-hash-0123");
        } else {
            mpw_nil(w);
        }
    }
}

/* BlockStored, positional: [tag, hashes, parent, tokens, block_size,
 * lora_id, medium, lora_name, extra_keys, group_idx, spec_kind]. */
static inline void
mpw_stored_array(struct mpw *w, const struct mpw_stored *s, enum mpw_hash form)
{
    mpw_arr(w, 11);
    mpw_str(w, "BlockStored");
    mpw_hashes(w, s->hashes, s->n_blocks, form);
    if (s->has_parent)
        mpw_hash(w, s->parent, form);
    else
        mpw_nil(w);
    mpw_tokens(w, s->tokens, s->no_tokens ? 0 : s->n_blocks * s->block_size);
    mpw_uint(w, s->block_size);
    if (s->lora_id >= 0)
        mpw_int(w, s->lora_id);
    else
        mpw_nil(w);
    if (s->medium != NULL)
        mpw_str(w, s->medium);
    else
        mpw_nil(w);
    mpw_nil(w); /* lora_name */
    mpw_extra(w, s);
    if (s->group_idx >= 0)
        mpw_uint(w, (uint64_t)s->group_idx);
    else
        mpw_nil(w);
    mpw_str(w, "full_attention");
}

/* The map form, fields in a different order, with an unknown field. */
static inline void
mpw_stored_map(struct mpw *w, const struct mpw_stored *s, enum mpw_hash form)
{
    mpw_map(w, s->group_idx >= 0 ? 10 : 9);
    mpw_str(w, "token_ids");
    mpw_tokens(w, s->tokens, s->no_tokens ? 0 : s->n_blocks * s->block_size);
    mpw_str(w, "type");
    mpw_str(w, "BlockStored");
    mpw_str(w, "block_hashes");
    mpw_hashes(w, s->hashes, s->n_blocks, form);
    mpw_str(w, "parent_block_hash");
    if (s->has_parent)
        mpw_hash(w, s->parent, form);
    else
        mpw_nil(w);
    mpw_str(w, "block_size");
    mpw_uint(w, s->block_size);
    mpw_str(w, "medium");
    if (s->medium != NULL)
        mpw_str(w, s->medium);
    else
        mpw_nil(w);
    mpw_str(w, "lora_id");
    if (s->lora_id >= 0)
        mpw_int(w, s->lora_id);
    else
        mpw_nil(w);
    mpw_str(w, "extra_keys");
    mpw_extra(w, s);
    mpw_str(w, "some_future_field");
    mpw_map(w, 1);
    mpw_str(w, "nested");
    mpw_arr(w, 2);
    mpw_f64(w, 1.5);
    mpw_nil(w);
    if (s->group_idx >= 0) {
        mpw_str(w, "group_idx");
        mpw_uint(w, (uint64_t)s->group_idx);
    }
}

/* BlockRemoved of the blocks on `medium` ("GPU", "CPU", ...). */
static inline void
mpw_removed_on(struct mpw *w, const uint64_t *h, uint32_t n, bool map,
               enum mpw_hash form, const char *medium)
{
    if (map) {
        mpw_map(w, 3);
        mpw_str(w, "type");
        mpw_str(w, "BlockRemoved");
        mpw_str(w, "block_hashes");
        mpw_hashes(w, h, n, form);
        mpw_str(w, "medium");
        mpw_str(w, medium);
    } else {
        mpw_arr(w, 4);
        mpw_str(w, "BlockRemoved");
        mpw_hashes(w, h, n, form);
        mpw_str(w, medium);
        mpw_uint(w, 0);
    }
}

static inline void
mpw_removed(struct mpw *w, const uint64_t *h, uint32_t n, bool map,
            enum mpw_hash form)
{
    mpw_removed_on(w, h, n, map, form, "GPU");
}

static inline void
mpw_cleared(struct mpw *w, bool map)
{
    if (map) {
        mpw_map(w, 1);
        mpw_str(w, "type");
        mpw_str(w, "AllBlocksCleared");
    } else {
        mpw_arr(w, 1);
        mpw_str(w, "AllBlocksCleared");
    }
}

/* Batch header: [ts, [events...], dp_rank] or the map form; the caller
 * writes n_events events right after. */
/* A batch header with the engine timestamp ts (seconds). */
static inline void
mpw_batch_ts(struct mpw *w, uint32_t n_events, bool map, double ts)
{
    if (map) {
        mpw_map(w, 3);
        mpw_str(w, "ts");
        mpw_f64(w, ts);
        mpw_str(w, "data_parallel_rank");
        mpw_uint(w, 0);
        mpw_str(w, "events");
        mpw_arr(w, n_events);
    } else {
        mpw_arr(w, 3);
        mpw_f64(w, ts);
        mpw_arr(w, n_events);
    }
}

static inline void
mpw_batch(struct mpw *w, uint32_t n_events, bool map)
{
    mpw_batch_ts(w, n_events, map, 1234.5);
}

/* The array form puts dp_rank after the events: call this last. */
static inline void
mpw_batch_end(struct mpw *w, bool map)
{
    if (!map)
        mpw_uint(w, 0);
}

#endif
