/* A trivial model of lr__table (lib/common/table.h) and an operation driver that
 * checks the table against it, shared by the randomized differential test
 * (tests/test-table.c) and the fuzzer (fuzz/fuzz_table.c) (STYLE B34).
 *
 * The owner's array is key[]: value v stands for key[v], and in[v] says
 * whether v is in the table. The model's answer to "which value holds key
 * k" is a linear scan of in[]. Hashes are crafted so that collisions are
 * the rule: a key's tag comes from a small set (with the edges 0 and
 * 0xffffffff that start and wrap probe runs), and keys sharing a tag
 * differ only in bits the table never looks at, so only the equality
 * callback tells them apart. One key in three gets a real mixed hash.
 *
 * Every operation returns NULL when the table agrees with the model, or a
 * message saying what went wrong. */
#ifndef LIBROUTE_TESTS_TABLE_MODEL_H
#define LIBROUTE_TESTS_TABLE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/lr_hash.h"
#include "common/table.h"

#define TM_CAP 256u   /* values 0..TM_CAP-1 */
#define TM_KEYS 1024u /* keys 0..TM_KEYS-1 */
#define TM_TAGS 6u

struct tm {
    struct lr__mem *mem;
    struct lr__table t;
    uint64_t key[TM_CAP];
    bool in[TM_CAP];
    uint32_t n_in;
    uint32_t tags[TM_TAGS];
    uint32_t reserved; /* inserts the last reserve made room for */
};

enum {
    TM_INSERT,
    TM_REMOVE,
    TM_FIND,
    TM_RESERVE,
    TM_REINIT,
    TM_N_OPS
};

static inline uint64_t
tm_hash(const struct tm *m, uint64_t key)
{
    if (key % 3 == 0)
        return lr__mix64(key, 0x746573747461626cull);
    return ((uint64_t)m->tags[key % TM_TAGS] << 32) | (uint32_t)(key * 977);
}

static inline bool
tm_eq(const void *ctx, uint64_t key, uint32_t v)
{
    const struct tm *m = ctx;
    return v < TM_CAP && m->key[v] == key;
}

static inline uint32_t
tm_table_find(const struct tm *m, uint64_t key)
{
    return lr__table_find(&m->t, tm_hash(m, key), key, tm_eq, m);
}

static inline uint32_t
tm_model_find(const struct tm *m, uint64_t key)
{
    for (uint32_t v = 0; v < TM_CAP; v++)
        if (m->in[v] && m->key[v] == key)
            return v;
    return LR_NIL;
}

/* Tags: the edges, a cluster at one home, and whatever `seed` adds. */
static inline lr_status
tm_init(struct tm *m, struct lr__mem *mem, uint32_t expect, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->mem = mem;
    m->tags[0] = 0;
    m->tags[1] = UINT32_MAX;
    m->tags[2] = UINT32_MAX - 1;
    m->tags[3] = 0x80000000u;
    m->tags[4] = 0x80000001u;
    m->tags[5] = (uint32_t)(seed >> 32) ^ (uint32_t)seed;
    return lr__table_init(&m->t, mem, expect);
}

static inline void
tm_free(struct tm *m)
{
    lr__table_free(&m->t, m->mem);
    m->n_in = 0;
    memset(m->in, 0, sizeof m->in);
}

/* The table's invariants, its count, and every model value found. */
static inline const char *
tm_check(const struct tm *m, bool full)
{
    if (lr__table_verify(&m->t) != LR_OK)
        return "lr__table_verify failed";
    if (m->t.count != m->n_in)
        return "count differs from the model";
    for (uint32_t v = 0; full && v < TM_CAP; v++)
        if (m->in[v] && tm_table_find(m, m->key[v]) != v)
            return "a value of the model is not found under its key";
    return NULL;
}

static inline uint64_t
tm_slots_sum(const struct lr__table *t)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < t->size; i++)
        h = lr__mix64(h ^ t->slots[i], i);
    return h;
}

/* One operation on key `key` (mod TM_KEYS) with argument `arg`. */
static inline const char *
tm_step(struct tm *m, uint32_t op, uint32_t key, uint32_t arg)
{
    key %= TM_KEYS;
    uint32_t got = tm_table_find(m, key), want = tm_model_find(m, key);
    if (got != want)
        return "find disagrees with the model";
    switch (op) {
    case TM_INSERT: {
        if (want != LR_NIL || m->n_in == TM_CAP)
            break;
        uint32_t v = arg % TM_CAP;
        while (m->in[v])
            v = (v + 1) % TM_CAP;
        if (m->reserved == 0) {
            lr_status st = lr__table_reserve(&m->t, m->mem, 1);
            if (st == LR_ENOMEM)
                break; /* the reserve step checks what a failure leaves */
            if (st != LR_OK)
                return "reserve(1) returned neither LR_OK nor LR_ENOMEM";
        } else {
            m->reserved--;
        }
        m->key[v] = key;
        m->in[v] = true;
        m->n_in++;
        lr__table_insert(&m->t, tm_hash(m, key), v);
        break;
    }
    case TM_REMOVE:
        if (want == LR_NIL)
            break;
        lr__table_remove(&m->t, tm_hash(m, key), want);
        m->in[want] = false;
        m->n_in--;
        if (tm_table_find(m, key) != LR_NIL)
            return "a removed key is still found";
        break;
    case TM_FIND:
        break;
    case TM_RESERVE: {
        struct lr__table before = m->t;
        uint64_t sum = tm_slots_sum(&m->t);
        uint32_t more = arg % (TM_CAP + 1);
        lr_status st = lr__table_reserve(&m->t, m->mem, more);
        if (st == LR_ENOMEM) {
            if (m->t.slots != before.slots || m->t.size != before.size ||
                m->t.count != before.count || tm_slots_sum(&m->t) != sum)
                return "a failed reserve changed the table";
            m->reserved = 0;
            break;
        }
        if (st != LR_OK)
            return "reserve returned neither LR_OK nor LR_ENOMEM";
        if (((uint64_t)m->t.count + more) * 4 > (uint64_t)m->t.size * 3)
            return "reserve left less room than asked";
        m->reserved = more;
        break;
    }
    case TM_REINIT: {
        tm_free(m);
        m->reserved = 0;
        lr_status st = lr__table_init(&m->t, m->mem, arg % (TM_CAP + 1));
        if (st != LR_OK && st != LR_ENOMEM)
            return "init returned neither LR_OK nor LR_ENOMEM";
        break;
    }
    default:
        break;
    }
    return tm_check(m, op != TM_FIND);
}

#endif /* LIBROUTE_TESTS_TABLE_MODEL_H */
