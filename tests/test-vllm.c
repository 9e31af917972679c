/* vLLM KV-event batches: both encodings at both levels, the three hash
 * forms, the events that are skipped, malformed batches (every truncation
 * of a good one included) that change nothing, a differential test
 * against calling lr_index_kv_* directly, allocation failures, and the
 * router entry point.
 *
 * The randomized test logs its seed; replay with LR_TEST_SEED=<n>. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "index-helpers.h"
#include "index/index.h"
#include "libroute/lr_router.h"
#include "libroute/lr_vllm.h"
#include "mpw.h"
#include "router/router.h"
#include "testutil.h"

#define BS 32 /* engine block size: two index blocks of 16 */
#define INST 3

static lr_index *
mk_index(const lr_allocator *a)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.seed = OPT_SEED;
    o.allocator = a;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    return ix;
}

/* Deepest tokens INST holds for these tokens (no touch). */
static uint32_t
held(lr_index *ix, const uint32_t *t, size_t n)
{
    return held_by(ix, t, n, INST, T0);
}

static lr_status
apply(lr_index *ix, const struct mpw *w, lr_vllm_batch_info *info)
{
    assert_false(w->overflow);
    lr_vllm_batch_info_init(info);
    return lr_index_vllm_batch(ix, INST, w->buf, w->n, T0, info);
}

/* A prompt of 3 engine blocks stored as two events (1 block, then 2
 * chained on it), then its last block removed. */
static void
write_basic(struct mpw *w, bool map, enum mpw_hash form, const uint32_t *t,
            bool with_remove)
{
    /* as signed: -100 (int8), -16 (fixint), -100000 (int32) */
    static const uint64_t h[3] = { (uint64_t)-100, (uint64_t)-16,
                                   (uint64_t)-100000 };
    mpw_batch(w, with_remove ? 3 : 2, map);
    struct mpw_stored a = mpw_stored_of(h, 1, t, BS);
    struct mpw_stored b = a;
    b.hashes = h + 1;
    b.n_blocks = 2;
    b.has_parent = true;
    b.parent = h[0];
    b.tokens = t + BS;
    b.group_idx = 0;
    if (map) {
        mpw_stored_map(w, &a, form);
        mpw_stored_map(w, &b, form);
    } else {
        mpw_stored_array(w, &a, form);
        mpw_stored_array(w, &b, form);
    }
    if (with_remove)
        mpw_removed(w, h + 2, 1, map, form);
    mpw_batch_end(w, map);
}

static void
encodings_agree(void **state)
{
    (void)state;
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 7);
    uint64_t want_digest = 0;
    for (int map = 0; map < 2; map++)
        for (int form = 0; form < 3; form++)
            for (int wide = 0; wide < 2; wide++) {
                lr_index *ix = mk_index(NULL);
                struct mpw *w = calloc(1, sizeof *w);
                w->wide = wide;
                write_basic(w, map, (enum mpw_hash)form, t, false);
                lr_vllm_batch_info info;
                assert_st(apply(ix, w, &info), LR_OK);
                assert_int_equal(info.events, 2);
                assert_int_equal(info.stored, 2);
                assert_int_equal(info.done, 2);
                assert_int_equal(info.skipped + info.unplaced, 0);
                assert_true(info.timestamp == 1234.5);
                assert_int_equal(info.dp_rank, 0);
                assert_int_equal(held(ix, t, 3 * BS), 3 * BS);
                /* the removal resolves whatever form the hashes took */
                w->n = 0;
                write_basic(w, map, (enum mpw_hash)form, t, true);
                assert_st(apply(ix, w, &info), LR_OK);
                assert_int_equal(info.removed, 1);
                assert_int_equal(held(ix, t, 3 * BS), 2 * BS);
                assert_st(lr__index_verify(ix), LR_OK);
                uint64_t d = lr__index_digest(ix);
                /* the engine map is in the digest: every form and
                 * encoding must give the same 64-bit hashes */
                if (map == 0 && form == 0 && wide == 0)
                    want_digest = d;
                else if (d != want_digest)
                    fail_msg("map %d form %d wide %d: digest differs", map,
                             form, wide);
                free(w);
                lr_index_destroy(ix);
            }
}

static void
cleared_and_unplaced(void **state)
{
    (void)state;
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 8);
    lr_index *ix = mk_index(NULL);
    struct mpw *w = calloc(1, sizeof *w);
    write_basic(w, false, MPW_HASH_UINT, t, false);
    lr_vllm_batch_info info;
    assert_st(apply(ix, w, &info), LR_OK);
    /* a child of a parent never seen: unplaced, the rest applies */
    w->n = 0;
    static const uint64_t orphan[1] = { 77 };
    struct mpw_stored o = mpw_stored_of(orphan, 1, t, BS);
    o.has_parent = true;
    o.parent = 999;
    mpw_batch(w, 2, false);
    mpw_stored_array(w, &o, MPW_HASH_UINT);
    mpw_cleared(w, false);
    mpw_batch_end(w, false);
    assert_st(apply(ix, w, &info), LR_OK);
    assert_int_equal(info.unplaced, 1);
    assert_int_equal(info.cleared, 1);
    assert_int_equal(held(ix, t, 3 * BS), 0);
    /* an instance the index never saw: removal and clear are no-ops */
    w->n = 0;
    mpw_batch(w, 2, true);
    mpw_removed(w, orphan, 1, true, MPW_HASH_UINT);
    mpw_cleared(w, true);
    mpw_batch_end(w, true);
    lr_vllm_batch_info_init(&info);
    assert_st(lr_index_vllm_batch(ix, 40, w->buf, w->n, T0, &info), LR_OK);
    assert_int_equal(info.removed + info.cleared, 2);
    free(w);
    lr_index_destroy(ix);
}

/* Events the index cannot represent are counted and change nothing. */
static void
skipped_events(void **state)
{
    (void)state;
    uint32_t t[BS];
    tu_tokens(t, BS, 9);
    static const uint64_t h[1] = { 5 };
    for (int kind = 0; kind < 6; kind++)
        for (int map = 0; map < 2; map++) {
            lr_index *ix = mk_index(NULL);
            uint64_t d0 = lr__index_digest(ix);
            struct mpw *w = calloc(1, sizeof *w);
            struct mpw_stored s = mpw_stored_of(h, 1, t, BS);
            mpw_batch(w, 1, map);
            switch (kind) {
            case 0: /* a medium no tier stands for (a CPU store applies
                     * to the CPU tier since 0.3: test-tiers.c) */
                s.medium = "NVME";
                break;
            case 1:
                s.lora_id = 3;
                break;
            case 2:
                s.group_idx = 1;
                break;
            case 3: /* a string key past a prompt's first block: one
                     * there is a cache salt (cache_salt_applies) */
                s.extra_keys = true;
                s.has_parent = true;
                s.parent = 99;
                break;
            case 4: /* a lower tier's store with tokens in blocks this
                     * index could not place: skipped */
                s.medium = "CPU";
                s.block_size = 8;
                break;
            default:
                break;
            }
            if (kind == 5) {
                if (map) {
                    mpw_map(w, 2);
                    mpw_str(w, "type");
                    mpw_str(w, "BlockFrobbed");
                    mpw_str(w, "x");
                    mpw_uint(w, 1);
                } else {
                    mpw_arr(w, 2);
                    mpw_str(w, "BlockFrobbed");
                    mpw_arr(w, 0);
                }
            } else if (map) {
                mpw_stored_map(w, &s, MPW_HASH_UINT);
            } else {
                mpw_stored_array(w, &s, MPW_HASH_UINT);
            }
            mpw_batch_end(w, map);
            lr_vllm_batch_info info;
            assert_st(apply(ix, w, &info), LR_OK);
            if (info.skipped != 1)
                fail_msg("kind %d map %d: skipped %u", kind, map, info.skipped);
            assert_true(lr__index_digest(ix) == d0);
            free(w);
            lr_index_destroy(ix);
        }
}

/* An event of a type the index does not know is skipped whatever its
 * fields hold: here one value of every msgpack form, each family at each
 * of its widths, and the event after it still applies. A form read with
 * the wrong length would throw the reader off before that event. */
static void
unknown_event_of_every_form(void **state)
{
    (void)state;
/* clang-format off */
#define FORM(s) { (const uint8_t *)(s), sizeof(s) - 1 }
    /* clang-format on */
    static const struct {
        const uint8_t *b;
        size_t n;
    } forms[] = {
        FORM("\xc0"),                                     /* nil */
        FORM("\xc2"),                                     /* false */
        FORM("\xc3"),                                     /* true */
        FORM("\xc4\x01\x78"),                             /* bin 8 */
        FORM("\xc5\x00\x02\x78\x79"),                     /* bin 16 */
        FORM("\xc6\x00\x00\x00\x03\x78\x79\x7a"),         /* bin 32 */
        FORM("\xc7\x01\x05\x78"),                         /* ext 8 */
        FORM("\xc8\x00\x02\x05\x78\x79"),                 /* ext 16 */
        FORM("\xc9\x00\x00\x00\x01\x05\x78"),             /* ext 32 */
        FORM("\xca\x3f\xc0\x00\x00"),                     /* float 32: 1.5 */
        FORM("\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00"),     /* float 64: 1.5 */
        FORM("\xcc\x01"),                                 /* uint 8 */
        FORM("\xcd\x00\x01"),                             /* uint 16 */
        FORM("\xce\x00\x00\x00\x01"),                     /* uint 32 */
        FORM("\xcf\x00\x00\x00\x00\x00\x00\x00\x01"),     /* uint 64 */
        FORM("\xd0\xff"),                                 /* int 8 */
        FORM("\xd1\xff\xff"),                             /* int 16 */
        FORM("\xd2\xff\xff\xff\xff"),                     /* int 32 */
        FORM("\xd3\xff\xff\xff\xff\xff\xff\xff\xff"),     /* int 64 */
        FORM("\xd4\x05\x61"),                             /* fixext 1 */
        FORM("\xd5\x05\x61\x62"),                         /* fixext 2 */
        FORM("\xd6\x05\x61\x62\x63\x64"),                 /* fixext 4 */
        FORM("\xd7\x05\x61\x62\x63\x64\x65\x66\x67\x68"), /* fixext 8 */
        FORM("\xd8\x05\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e"
             "\x6f\x70"),                             /* fixext 16 */
        FORM("\xd9\x01\x61"),                         /* str 8 */
        FORM("\xda\x00\x01\x61"),                     /* str 16 */
        FORM("\xdb\x00\x00\x00\x02\x61\x62"),         /* str 32 */
        FORM("\xdc\x00\x02\xc0\x07"),                 /* array 16 */
        FORM("\xdd\x00\x00\x00\x01\xc3"),             /* array 32 */
        FORM("\xde\x00\x01\xa1\x6b\xc0"),             /* map 16 */
        FORM("\xdf\x00\x00\x00\x01\x01\xd9\x01\x76"), /* map 32 */
        FORM("\x05"),                                 /* positive fixint */
        FORM("\xff"),                                 /* negative fixint */
        FORM("\xa2\x68\x69"),                         /* fixstr */
        FORM("\x91\xc0"),                             /* fixarray */
        FORM("\x81\xc0\xc2"),                         /* fixmap */
    };
#undef FORM
    const uint32_t n_forms = (uint32_t)(sizeof forms / sizeof forms[0]);
    uint32_t t[BS];
    tu_tokens(t, BS, 11);
    static const uint64_t h[1] = { 7 };
    lr_index *ix = mk_index(NULL);
    struct mpw *w = calloc(1, sizeof *w);
    mpw_batch(w, 2, false);
    mpw_arr(w, 1 + n_forms);
    mpw_str(w, "BlockFrobbed");
    for (uint32_t k = 0; k < n_forms; k++)
        mpw_bytes(w, forms[k].b, forms[k].n);
    struct mpw_stored st = mpw_stored_of(h, 1, t, BS);
    mpw_stored_array(w, &st, MPW_HASH_UINT);
    mpw_batch_end(w, false);
    lr_vllm_batch_info info;
    assert_st(apply(ix, w, &info), LR_OK);
    assert_int_equal(info.skipped, 1);
    assert_int_equal(info.stored, 1);
    assert_int_equal(held(ix, t, BS), BS);
    free(w);
    lr_index_destroy(ix);
}

static void
extra_keys_all_nil_apply(void **state)
{
    (void)state;
    uint32_t t[2 * BS];
    tu_tokens(t, 2 * BS, 10);
    static const uint64_t h[2] = { 5, 6 };
    lr_index *ix = mk_index(NULL);
    struct mpw *w = calloc(1, sizeof *w);
    mpw_batch(w, 1, false);
    /* written by hand: extra_keys [nil, nil] */
    mpw_arr(w, 9);
    mpw_str(w, "BlockStored");
    mpw_hashes(w, h, 2, MPW_HASH_UINT);
    mpw_nil(w);
    mpw_tokens(w, t, 2 * BS);
    mpw_uint(w, BS);
    mpw_nil(w);
    mpw_str(w, "GPU");
    mpw_nil(w);
    mpw_arr(w, 2);
    mpw_nil(w);
    mpw_nil(w);
    mpw_batch_end(w, false);
    lr_vllm_batch_info info;
    assert_st(apply(ix, w, &info), LR_OK);
    assert_int_equal(info.stored, 1);
    assert_int_equal(held(ix, t, 2 * BS), 2 * BS);
    free(w);
    lr_index_destroy(ix);
}

/* Every proper prefix of a good batch is corrupt and changes nothing; so
 * are the hand-made bad batches below. */
static void
malformed(void **state)
{
    (void)state;
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 11);
    lr_index *ix = mk_index(NULL);
    struct mpw *good = calloc(1, sizeof *good);
    write_basic(good, false, MPW_HASH_UINT, t, false);
    lr_vllm_batch_info info;
    assert_st(apply(ix, good, &info), LR_OK);
    uint64_t d0 = lr__index_digest(ix);
    struct mpw *w = calloc(1, sizeof *w);
    for (int map = 0; map < 2; map++) {
        w->n = 0;
        write_basic(w, map, MPW_HASH_BYTES, t, true);
        size_t full = w->n;
        for (size_t n = 0; n < full; n++) {
            lr_vllm_batch_info_init(&info);
            lr_status st = lr_index_vllm_batch(ix, INST, w->buf, n, T0, &info);
            if (st != LR_ECORRUPT)
                fail_msg("prefix %zu/%zu (map %d): %s", n, full, map,
                         lr_status_name(st));
            assert_true(lr__index_digest(ix) == d0);
        }
        /* trailing garbage */
        w->buf[full] = 0xc0;
        assert_st(lr_index_vllm_batch(ix, INST, w->buf, full + 1, T0, &info),
                  LR_ECORRUPT);
        assert_true(lr__index_digest(ix) == d0);
    }

    static const uint64_t h[1] = { 5 };
    /* Bad events in a good frame: cases 0-3, 6 and 7 are well-framed
     * events whose fields do not add up (left out, counted invalid; the
     * good event before them applies); the others break the frame (the
     * whole batch refused, nothing applied). */
    for (int bad = 0; bad < 10; bad++) {
        w->n = 0;
        mpw_batch(w, 2, false);
        mpw_cleared(w, false);
        switch (bad) {
        case 0: /* token count != blocks x block size */
            mpw_arr(w, 5);
            mpw_str(w, "BlockStored");
            mpw_hashes(w, h, 1, MPW_HASH_UINT);
            mpw_nil(w);
            mpw_tokens(w, t, BS - 1);
            mpw_uint(w, BS);
            break;
        case 1: /* block size 0 */
            mpw_arr(w, 5);
            mpw_str(w, "BlockStored");
            mpw_hashes(w, h, 0, MPW_HASH_UINT);
            mpw_nil(w);
            mpw_tokens(w, t, 0);
            mpw_uint(w, 0);
            break;
        case 2: /* hashes not an array */
            mpw_arr(w, 2);
            mpw_str(w, "BlockRemoved");
            mpw_uint(w, 5);
            break;
        case 3: /* a token above 2^32 - 1 */
            mpw_arr(w, 5);
            mpw_str(w, "BlockStored");
            mpw_hashes(w, h, 1, MPW_HASH_UINT);
            mpw_nil(w);
            mpw_arr(w, BS);
            for (int i = 0; i < BS; i++)
                mpw_uint(w, i == 3 ? (1ull << 32) : 1);
            mpw_uint(w, BS);
            break;
        case 4: /* the never-used byte 0xc1 */
            mpw_byte(w, 0xc1);
            break;
        case 5: /* a map event with no type */
            mpw_map(w, 1);
            mpw_str(w, "block_hashes");
            mpw_hashes(w, h, 1, MPW_HASH_UINT);
            break;
        case 6: /* a BlockStored missing its tokens */
            mpw_map(w, 3);
            mpw_str(w, "type");
            mpw_str(w, "BlockStored");
            mpw_str(w, "block_hashes");
            mpw_hashes(w, h, 1, MPW_HASH_UINT);
            mpw_str(w, "block_size");
            mpw_uint(w, BS);
            break;
        case 7: /* an empty byte-string hash */
            mpw_arr(w, 2);
            mpw_str(w, "BlockRemoved");
            mpw_arr(w, 1);
            mpw_bin(w, "", 0);
            break;
        case 8: /* an event that is a number */
            mpw_uint(w, 4);
            break;
        default: /* an array count far beyond the bytes left */
            mpw_byte(w, 0xdd);
            mpw_be(w, 0x7fffffff, 4);
            break;
        }
        mpw_batch_end(w, false);
        bool framed = bad <= 3 || bad == 6 || bad == 7;
        lr_index *cp = mk_index(NULL);
        assert_st(apply(cp, good, &info), LR_OK);
        lr_vllm_batch_info_init(&info);
        lr_status st = lr_index_vllm_batch(cp, INST, w->buf, w->n, T0, &info);
        if (st != (framed ? LR_OK : LR_ECORRUPT))
            fail_msg("bad batch %d: %s", bad, lr_status_name(st));
        if (framed) {
            assert_int_equal(info.invalid, 1);
            assert_int_equal(info.cleared, 1);
            assert_int_equal(info.done, 2);
            assert_int_equal(held(cp, t, 3 * BS), 0); /* the clear applied */
        } else {
            assert_true(lr__index_digest(cp) == d0);
        }
        lr_index_destroy(cp);
    }
    /* the batch itself: too short, wrong type, events not an array */
    static const uint8_t tiny[][4] = { { 0x91, 0x00 },
                                       { 0x05 },
                                       { 0x92, 0x00, 0x05 } };
    static const size_t tiny_n[] = { 2, 1, 3 };
    for (size_t i = 0; i < 3; i++)
        assert_st(lr_index_vllm_batch(ix, INST, tiny[i], tiny_n[i], T0, NULL),
                  LR_ECORRUPT);
    assert_st(lr_index_vllm_batch(ix, INST, NULL, 0, T0, NULL), LR_ECORRUPT);
    assert_st(lr_index_vllm_batch(NULL, INST, good->buf, good->n, T0, NULL),
              LR_EINVAL);
    assert_st(
        lr_index_vllm_batch(ix, LR_INSTANCE_NONE, good->buf, good->n, T0, NULL),
        LR_EINVAL);
    lr_vllm_batch_info small;
    lr_vllm_batch_info_init(&small);
    small.struct_size = 8;
    assert_st(lr_index_vllm_batch(ix, INST, good->buf, good->n, T0, &small),
              LR_EVERSION);
    assert_true(lr__index_digest(ix) == d0);

    /* a block size the index cannot place: LR_ENOTSUP, nothing applied */
    w->n = 0;
    struct mpw_stored s = mpw_stored_of(h, 1, t, 8);
    mpw_batch(w, 2, false);
    mpw_cleared(w, false);
    mpw_stored_array(w, &s, MPW_HASH_UINT);
    mpw_batch_end(w, false);
    assert_st(apply(ix, w, &info), LR_ENOTSUP);
    assert_true(lr__index_digest(ix) == d0);

    /* The first event that cannot apply decides, in order; pass 1 steps
     * over the events after it, and bytes broken further on still refuse
     * the batch as corrupt. An event that is the integer 5 is msgpack but
     * not an event; 0xc1 is no msgpack at all. */
    static const struct {
        int first, second; /* 0: block size 8, 1: the integer 5, 2: 0xc1 */
        lr_status want;
    } order[] = { { 0, 1, LR_ENOTSUP },
                  { 1, 0, LR_ECORRUPT },
                  { 0, 2, LR_ECORRUPT },
                  { 1, 2, LR_ECORRUPT } };
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        w->n = 0;
        mpw_batch(w, 2, false);
        for (int k = 0; k < 2; k++) {
            int e = k == 0 ? order[i].first : order[i].second;
            if (e == 0)
                mpw_stored_array(w, &s, MPW_HASH_UINT);
            else
                mpw_byte(w, e == 1 ? 0x05 : 0xc1);
        }
        mpw_batch_end(w, false);
        lr_status st = apply(ix, w, &info);
        if (st != order[i].want)
            fail_msg("order %zu: %s, want %s", i, lr_status_name(st),
                     lr_status_name(order[i].want));
        assert_int_equal(info.done, 0);
        assert_true(lr__index_digest(ix) == d0);
    }
    free(w);
    free(good);
    lr_index_destroy(ix);
}

/* ---- differential: the adapter against direct lr_index_kv_* calls ---- */

#define DMAX 48 /* engine blocks in the model's prompt space */

struct dev {
    int type; /* 0 stored, 1 removed, 2 cleared */
    uint32_t inst;
    uint64_t hashes[4];
    uint32_t n;
    bool has_parent;
    uint64_t parent;
    uint32_t tokens[4 * BS];
};

/* Random events over a few chains of engine blocks whose hashes are a
 * function of (chain, depth), so parents are often known. */
static void
random_event(uint64_t *rs, struct dev *e)
{
    memset(e, 0, sizeof *e);
    e->inst = (uint32_t)tu_below(rs, 2);
    uint32_t chain = (uint32_t)tu_below(rs, 4);
    uint32_t depth = (uint32_t)tu_below(rs, 6);
    uint32_t r = (uint32_t)tu_below(rs, 10);
    e->type = r < 7 ? 0 : r < 9 ? 1 : 2;
    e->n = 1 + (uint32_t)tu_below(rs, 4);
    for (uint32_t i = 0; i < e->n; i++)
        e->hashes[i] = ((uint64_t)chain << 32) | (depth + i + 1);
    e->has_parent = depth > 0;
    e->parent = ((uint64_t)chain << 32) | depth;
    for (uint32_t i = 0; i < e->n * BS; i++) {
        uint64_t s = ((uint64_t)chain << 20) + (depth * BS + i);
        e->tokens[i] = (uint32_t)tu_rand(&s);
    }
}

static lr_status
direct(lr_index *ix, const struct dev *e)
{
    if (e->type == 0) {
        lr_kv_stored k;
        lr_kv_stored_init(&k);
        k.block_hashes = e->hashes;
        k.n_blocks = e->n;
        k.has_parent = e->has_parent;
        k.parent_hash = e->parent;
        k.block_size = BS;
        k.token_ids = e->tokens;
        k.n_tokens = (size_t)e->n * BS;
        lr_status st = lr_index_kv_stored(ix, e->inst, &k, T0);
        return st == LR_ENOENT ? LR_OK : st;
    }
    if (e->type == 1)
        (void)lr_index_kv_removed(ix, e->inst, e->hashes, e->n, NULL);
    else
        (void)lr_index_kv_cleared(ix, e->inst);
    return LR_OK;
}

static void
encode(struct mpw *w, const struct dev *e, bool map, enum mpw_hash form)
{
    if (e->type == 0) {
        struct mpw_stored s = mpw_stored_of(e->hashes, e->n, e->tokens, BS);
        s.has_parent = e->has_parent;
        s.parent = e->parent;
        s.medium = map ? "GPU" : NULL;
        s.group_idx = map ? 0 : -1;
        if (map)
            mpw_stored_map(w, &s, form);
        else
            mpw_stored_array(w, &s, form);
    } else if (e->type == 1) {
        mpw_removed(w, e->hashes, e->n, map, form);
    } else {
        mpw_cleared(w, map);
    }
}

/* One instance per batch (a batch comes from one engine). */
static void
differential(void **state)
{
    (void)state;
    uint64_t seed = tu_seed("vllm differential", 0x766c6c6d64696666ull);
    uint64_t rs = seed;
    for (int round = 0; round < 40; round++) {
        lr_index *a = mk_index(NULL), *b = mk_index(NULL);
        for (int batch = 0; batch < 30; batch++) {
            uint32_t n = (uint32_t)tu_below(&rs, 6);
            struct dev ev[6];
            uint32_t inst = (uint32_t)tu_below(&rs, 2);
            bool map = tu_below(&rs, 2);
            enum mpw_hash form = (enum mpw_hash)tu_below(&rs, 3);
            struct mpw *w = calloc(1, sizeof *w);
            w->wide = tu_below(&rs, 4) == 0;
            mpw_batch(w, n, map);
            for (uint32_t i = 0; i < n; i++) {
                random_event(&rs, &ev[i]);
                ev[i].inst = inst;
                encode(w, &ev[i], map ^ (i & 1), form);
            }
            mpw_batch_end(w, map);
            lr_vllm_batch_info info;
            lr_vllm_batch_info_init(&info);
            assert_st(lr_index_vllm_batch(a, inst, w->buf, w->n, T0, &info),
                      LR_OK);
            for (uint32_t i = 0; i < n; i++)
                assert_st(direct(b, &ev[i]), LR_OK);
            if (lr__index_digest(a) != lr__index_digest(b))
                fail_msg("seed %llu round %d batch %d: digests differ",
                         (unsigned long long)seed, round, batch);
            assert_int_equal(info.events, n);
            assert_int_equal(info.done, n);
            assert_int_equal(info.stored + info.unplaced + info.removed +
                                 info.cleared + info.skipped,
                             n);
            free(w);
        }
        assert_st(lr__index_verify(a), LR_OK);
        lr_index_destroy(a);
        lr_index_destroy(b);
    }
}

/* A prefix-cache router of block_tokens with n instances "e0".., their
 * ids in ids. */
static lr_router *
mk_router(uint32_t block_tokens, uint32_t *ids, uint32_t n)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = LR_POLICY_PREFIX_CACHE;
    o.block_tokens = block_tokens;
    lr_router *r = NULL;
    assert_st(lr_router_create(&o, &r), LR_OK);
    for (uint32_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "e%u", i);
        lr_instance_spec sp;
        lr_instance_spec_init(&sp);
        sp.name = name;
        assert_st(lr_router_add_instance(r, &sp, &ids[i]), LR_OK);
    }
    return r;
}

/* ---- allocation failures ---------------------------------------------- */

struct oom_ctx {
    struct mpw *w;
    struct dev ev[8];
    uint32_t n;
    uint64_t full_digest; /* one uninterrupted call */
};

static bool
sc_batch(struct tu_alloc *t, void *vctx)
{
    struct oom_ctx *c = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_index *ix = mk_index(&t->a);
    /* some state first, so the batch has parents to find */
    for (uint32_t i = 0; i < 2; i++)
        assert_st(direct(ix, &c->ev[i]), LR_OK);
    tu_alloc_resume(t, arm);
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    lr_status st = lr_index_vllm_batch(ix, INST, c->w->buf, c->w->n, T0, &info);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        /* exactly the events before the failing one are applied */
        lr_index *ref = mk_index(NULL);
        for (uint32_t i = 0; i < 2; i++)
            assert_st(direct(ref, &c->ev[i]), LR_OK);
        for (uint32_t i = 0; i < info.done; i++)
            assert_st(direct(ref, &c->ev[2 + i]), LR_OK);
        if (lr__index_digest(ref) != lr__index_digest(ix))
            fail_msg("allocation %llu%s: state is not the first %u events",
                     (unsigned long long)arm.fail_at, arm.forever ? " on" : "",
                     info.done);
        lr_index_destroy(ref);
        /* applying the whole batch again ends where one call would */
        assert_st(lr_index_vllm_batch(ix, INST, c->w->buf, c->w->n, T0, NULL),
                  LR_OK);
    } else {
        assert_st(st, LR_OK);
    }
    assert_true(lr__index_digest(ix) == c->full_digest);
    assert_st(lr__index_verify(ix), LR_OK);
    lr_index_destroy(ix);
    return !failed;
}

static void
oom(void **state)
{
    (void)state;
    struct oom_ctx c;
    memset(&c, 0, sizeof c);
    c.w = calloc(1, sizeof *c.w);
    uint64_t rs = 99;
    for (uint32_t i = 0; i < 8; i++) {
        random_event(&rs, &c.ev[i]);
        c.ev[i].inst = INST;
        c.ev[i].type = i == 5 ? 1 : 0;
    }
    c.n = 6;
    mpw_batch(c.w, c.n, true);
    for (uint32_t i = 0; i < c.n; i++)
        encode(c.w, &c.ev[2 + i], i & 1, MPW_HASH_BYTES);
    mpw_batch_end(c.w, true);
    lr_index *ix = mk_index(NULL);
    for (uint32_t i = 0; i < 2 + c.n; i++)
        assert_st(direct(ix, &c.ev[i]), LR_OK);
    c.full_digest = lr__index_digest(ix);
    lr_index_destroy(ix);
    tu_oom_loop(sc_batch, &c, 10000);
    free(c.w);
}

/* ---- what a real fleet sends (tests/data/kv-events) ---------------------- */

static uint8_t *
read_file(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/kv-events/%s", LR_TEST_DATA, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    uint8_t *buf = malloc(4096);
    assert_non_null(buf);
    *len = fread(buf, 1, 4096, f);
    assert_true(*len > 0 && *len < 4096);
    fclose(f);
    return buf;
}

/* Each batch of tests/data/kv-events (see its README): the GPU store of
 * tokens 1000..1063 always applies, under its engine hashes (a removal of
 * hash 13 then drops blocks 3 and 4); what rides along is skipped or left
 * out as invalid, never a reason to refuse the batch. The CPU-offload
 * connector's store (no token ids) applies to the CPU tier since 0.3
 * (skipped before): its hash, 31, names no block the GPU stored, so it is
 * unplaced (test-tiers.c feeds the same shape with hashes that resolve). */
static void
fleet_files(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        uint32_t skipped, invalid, unplaced;
    } cases[] = {
        { "P011_control_gpu_only.msgpack", 0, 0, 0 },
        { "PNEW_control_gpu_only.msgpack", 0, 0, 0 },
        { "P011_offload_cpu_bs16.msgpack", 0, 0, 1 },
        { "P011_offload_cpu_bs0.msgpack", 0, 0, 1 },
        { "PNEW_offload_cpu_bs16.msgpack", 0, 0, 1 },
        { "PNEW_offload_cpu_bs0.msgpack", 0, 0, 1 },
        { "P011_hybrid_swa_group.msgpack", 1, 0, 0 },
        { "PNEW_hybrid_swa_group.msgpack", 1, 0, 0 },
        { "P010_hybrid_swa_no_group_idx.msgpack", 0, 1, 0 },
        { "PNEW_mla_group0.msgpack", 0, 0, 0 },
    };
    uint32_t t[64];
    for (uint32_t i = 0; i < 64; i++)
        t[i] = 1000 + i;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len;
        uint8_t *buf = read_file(cases[c].file, &len);
        lr_index_options o;
        lr_index_options_init(&o);
        o.seed = OPT_SEED;
        lr_index *ix = NULL;
        assert_st(lr_index_create(&o, &ix), LR_OK);
        lr_vllm_batch_info info;
        lr_vllm_batch_info_init(&info);
        lr_status st = lr_index_vllm_batch(ix, INST, buf, len, T0, &info);
        if (st != LR_OK || info.stored != 1 ||
            info.skipped != cases[c].skipped ||
            info.invalid != cases[c].invalid ||
            info.unplaced != cases[c].unplaced || info.done != info.events)
            fail_msg("%s: %s, stored %u skipped %u invalid %u unplaced %u "
                     "done %u/%u",
                     cases[c].file, lr_status_name(st), info.stored,
                     info.skipped, info.invalid, info.unplaced, info.done,
                     info.events);
        assert_true(info.timestamp == 1761000000.5);
        assert_int_equal(info.dp_rank, 0);
        assert_int_equal(held_by(ix, t, 64, INST, T0), 64);
        /* the engine hashes resolve: hash 13 is the third block */
        static const uint64_t h13[1] = { 13 };
        size_t resolved = 0;
        assert_st(lr_index_kv_removed(ix, INST, h13, 1, &resolved), LR_OK);
        assert_int_equal(resolved, 1);
        assert_int_equal(held_by(ix, t, 64, INST, T0), 32);
        assert_st(lr__index_verify(ix), LR_OK);
        lr_index_destroy(ix);
        free(buf);
    }
}

/* ---- LoRA adapters and cache salts ---------------------------------------- */

/* A BlockStored as vLLM's msgspec encoder writes it, with an adapter and
 * extra keys. Era P011: array_like, [tag, block_hashes, parent_block_hash,
 * token_ids, block_size, lora_id, medium, lora_name, extra_keys,
 * group_idx]. Era PNEW: a map in the struct's field order with "type"
 * first, extra_keys left out when nil (omit_defaults), then group_idx and
 * kv_cache_spec_kind. extra_keys as vLLM's generate_block_hash_extra_keys
 * builds them: per block the tuple (lora_name, multimodal keys...,
 * cache_salt on a prompt's first block only), nil for a block with none;
 * nil for the whole field when no block has any. */
struct vstore {
    const uint64_t *hashes;
    uint32_t n;
    bool has_parent;
    uint64_t parent;
    const uint32_t *tokens;
    int64_t lora_id;        /* < 0: nil */
    const char *lora_name;  /* NULL: nil */
    const char *name_key;   /* the adapter's key in extra keys (vLLM: its
                               name; older: none, NULL) */
    int64_t id_key;         /* >= 0: the adapter's key is this integer
                               (vLLM before lora_name: lora_int_id) */
    const char *cache_salt; /* NULL: none (written only without a parent) */
    /* a multimodal key in block mm_block (< 0: none): 0 vLLM's
     * (identifier, offset) tuple, 1 a bare hash string (older vLLM), 2
     * prompt-embeddings bytes, 3 a tuple whose offset is a string, 4 a
     * tuple of three */
    int mm_block, mm_form;
    /* vLLM's multimodal keys, each in its block, after the adapter's
     * name and before the cache salt */
    const struct vmm *mmk;
    uint32_t n_mmk;
};

/* One (identifier, offset) tuple in block `block` of a store. */
struct vmm {
    uint32_t block;
    const char *id;
    int64_t off;
};

static struct vstore
vstore_of(const uint64_t *h, uint32_t n, const uint32_t *t)
{
    struct vstore s = { .hashes = h,
                        .n = n,
                        .tokens = t,
                        .lora_id = -1,
                        .id_key = -1,
                        .mm_block = -1 };
    return s;
}

/* An adapter as vLLM names it in an event: lora_id (the engine's int),
 * lora_name, and the name first in every block's extra keys. */
static void
vstore_adapter(struct vstore *s, const char *name, int64_t id)
{
    s->lora_name = name;
    s->lora_id = id;
    s->name_key = name;
}

static uint32_t
vstore_nkeys(const struct vstore *s, uint32_t i)
{
    uint32_t mm = 0;
    for (uint32_t k = 0; k < s->n_mmk; k++)
        mm += s->mmk[k].block == i;
    return (s->name_key != NULL || s->id_key >= 0) + ((int)i == s->mm_block) +
           mm + (i == 0 && !s->has_parent && s->cache_salt != NULL);
}

static void
vstore_extra(struct mpw *w, const struct vstore *s)
{
    mpw_arr(w, s->n);
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t k = vstore_nkeys(s, i);
        if (k == 0) {
            mpw_nil(w);
            continue;
        }
        mpw_arr(w, k);
        if (s->name_key != NULL)
            mpw_str(w, s->name_key);
        else if (s->id_key >= 0)
            mpw_int(w, s->id_key);
        if ((int)i == s->mm_block) {
            if (s->mm_form == 0) {
                mpw_arr(w, 2);
                mpw_str(w, "9f86d081884c7d659a2feaa0c55ad015");
                mpw_uint(w, 3);
            } else if (s->mm_form == 1) {
                mpw_str(w, "9f86d081884c7d659a2feaa0c55ad015");
            } else if (s->mm_form == 2) {
                mpw_bin(w, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
            } else {
                mpw_arr(w, s->mm_form == 3 ? 2 : 3);
                mpw_str(w, "9f86d081884c7d659a2feaa0c55ad015");
                mpw_str(w, "3");
                if (s->mm_form == 4)
                    mpw_uint(w, 3);
            }
        }
        for (uint32_t k = 0; k < s->n_mmk; k++)
            if (s->mmk[k].block == i) {
                mpw_arr(w, 2);
                mpw_str(w, s->mmk[k].id);
                mpw_int(w, s->mmk[k].off);
            }
        if (i == 0 && !s->has_parent && s->cache_salt != NULL)
            mpw_str(w, s->cache_salt);
    }
}

static bool
vstore_has_extra(const struct vstore *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (vstore_nkeys(s, i) > 0)
            return true;
    return false;
}

static void
vstore_write(struct mpw *w, const struct vstore *s, bool map)
{
    bool extra = vstore_has_extra(s);
    if (map) {
        mpw_map(w, extra ? 11 : 10);
        mpw_str(w, "type");
        mpw_str(w, "BlockStored");
        mpw_str(w, "block_hashes");
    } else {
        mpw_arr(w, 10);
        mpw_str(w, "BlockStored");
    }
    mpw_hashes(w, s->hashes, s->n, MPW_HASH_UINT);
    if (map)
        mpw_str(w, "parent_block_hash");
    if (s->has_parent)
        mpw_hash(w, s->parent, MPW_HASH_UINT);
    else
        mpw_nil(w);
    if (map)
        mpw_str(w, "token_ids");
    mpw_tokens(w, s->tokens, s->n * BS);
    if (map)
        mpw_str(w, "block_size");
    mpw_uint(w, BS);
    if (map)
        mpw_str(w, "lora_id");
    if (s->lora_id >= 0)
        mpw_int(w, s->lora_id);
    else
        mpw_nil(w);
    if (map)
        mpw_str(w, "medium");
    mpw_str(w, "GPU");
    if (map)
        mpw_str(w, "lora_name");
    if (s->lora_name != NULL)
        mpw_str(w, s->lora_name);
    else
        mpw_nil(w);
    if (extra) {
        if (map)
            mpw_str(w, "extra_keys");
        vstore_extra(w, s);
    } else if (!map) {
        mpw_nil(w);
    }
    if (map)
        mpw_str(w, "group_idx");
    mpw_uint(w, 0);
    if (map) {
        mpw_str(w, "kv_cache_spec_kind");
        mpw_str(w, "full_attention");
    }
}

/* A batch of these events, as vLLM sends it: [ts, [events], dp_rank]. */
static lr_status
apply_stores(lr_index *ix, const struct vstore *ev, size_t n, bool map,
             lr_vllm_batch_info *info)
{
    struct mpw *w = calloc(1, sizeof *w);
    mpw_batch(w, (uint32_t)n, false);
    for (size_t i = 0; i < n; i++)
        vstore_write(w, &ev[i], map);
    mpw_batch_end(w, false);
    lr_status st = apply(ix, w, info);
    free(w);
    return st;
}

/* The salt a route request for `adapter` (NULL: the base model) under
 * cache salt `cs` (NULL: none) keys its blocks with. */
static uint64_t
salt_of(const char *cs, const char *adapter)
{
    uint64_t tenant = cs != NULL ? lr_name_hash(cs, strlen(cs)) : 0;
    uint64_t a = adapter != NULL ? lr_name_hash(adapter, strlen(adapter)) : 0;
    return lr_adapter_salt(tenant, a);
}

/* Tokens INST holds for t[0..n) keyed as a router keys a request with
 * this salt: lr_block_keys() into the prompt's keys. */
static uint32_t
held_salted(lr_index *ix, const uint32_t *t, size_t n, uint64_t salt)
{
    uint64_t keys[8 * BS];
    size_t nk = 0;
    assert_st(lr_block_keys(lr_index_block_tokens(ix), t, n, salt, keys,
                            sizeof keys / sizeof keys[0], &nk),
              LR_OK);
    lr_prompt p;
    lr_prompt_init(&p);
    p.n_tokens = n;
    p.tenant_salt = salt;
    p.keys = keys;
    p.n_keys = nk;
    lr_index_hit h[8];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 8;
    assert_st(lr_index_match(ix, &p, T0, LR_MATCH_NO_TOUCH, &r), LR_OK);
    for (size_t i = 0; i < r.n_hits; i++)
        if (h[i].instance == INST)
            return h[i].tokens;
    return 0;
}

/* A LoRA adapter's stores (vLLM: lora_name, lora_id and the name in each
 * block's extra keys) apply under the adapter's salt: a request for that
 * adapter hits them, the base model and other adapters do not. A chained
 * store inherits the adapter through its parent, and a removal resolves
 * the adapter's engine hashes. Both eras, with and without lora_id. */
static void
lora_adapter_applies(void **state)
{
    (void)state;
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 21);
    static const uint64_t h[3] = { 41, 42, 43 };
    const uint64_t a = salt_of(NULL, "sql-lora");
    for (int map = 0; map < 2; map++)
        for (int with_id = 0; with_id < 2; with_id++) {
            lr_index *ix = mk_index(NULL);
            struct vstore ev[2] = { vstore_of(h, 2, t),
                                    vstore_of(h + 2, 1, t + 2 * BS) };
            for (int i = 0; i < 2; i++)
                vstore_adapter(&ev[i], "sql-lora", with_id ? 1 : -1);
            ev[1].has_parent = true;
            ev[1].parent = h[1];
            lr_vllm_batch_info info;
            assert_st(apply_stores(ix, ev, 2, map, &info), LR_OK);
            if (info.stored != 2 || info.skipped + info.invalid != 0)
                fail_msg("map %d id %d: stored %u skipped %u invalid %u", map,
                         with_id, info.stored, info.skipped, info.invalid);
            assert_int_equal(held_salted(ix, t, 3 * BS, a), 3 * BS);
            assert_int_equal(held(ix, t, 3 * BS), 0); /* the base model */
            assert_int_equal(
                held_salted(ix, t, 3 * BS, salt_of(NULL, "other-lora")), 0);
            /* the adapter's engine hash resolves: block 2 and after go */
            static const uint64_t rm[1] = { 42 };
            size_t resolved = 0;
            assert_st(lr_index_kv_removed(ix, INST, rm, 1, &resolved), LR_OK);
            assert_int_equal(resolved, 1);
            assert_int_equal(held_salted(ix, t, 3 * BS, a), BS);
            assert_st(lr__index_verify(ix), LR_OK);
            lr_index_destroy(ix);
        }
}

/* A request's cache_salt sits in its first block's extra keys (after the
 * adapter's name, if any): the store applies under lr_name_hash(salt) as
 * the tenant salt, which is what a request routed with tenant_salt =
 * lr_name_hash(cache_salt) (and its adapter) keys with. */
static void
cache_salt_applies(void **state)
{
    (void)state;
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 22);
    static const uint64_t h[3] = { 51, 52, 53 };
    for (int map = 0; map < 2; map++)
        for (int lora = 0; lora < 2; lora++) {
            const char *name = lora ? "sql-lora" : NULL;
            lr_index *ix = mk_index(NULL);
            struct vstore ev[2] = { vstore_of(h, 2, t),
                                    vstore_of(h + 2, 1, t + 2 * BS) };
            for (int i = 0; i < 2; i++) {
                if (lora)
                    vstore_adapter(&ev[i], name, 2);
                ev[i].cache_salt = "tenant-7f3a"; /* block 0 of ev[0] only */
            }
            ev[1].has_parent = true;
            ev[1].parent = h[1];
            lr_vllm_batch_info info;
            assert_st(apply_stores(ix, ev, 2, map, &info), LR_OK);
            if (info.stored != 2 || info.skipped + info.invalid != 0)
                fail_msg("map %d lora %d: stored %u skipped %u invalid %u", map,
                         lora, info.stored, info.skipped, info.invalid);
            assert_int_equal(
                held_salted(ix, t, 3 * BS, salt_of("tenant-7f3a", name)),
                3 * BS);
            assert_int_equal(held_salted(ix, t, 3 * BS, salt_of(NULL, name)),
                             0);
            assert_int_equal(
                held_salted(ix, t, 3 * BS, salt_of("tenant-other", name)), 0);
            if (lora) /* the salt without the adapter: the base model's */
                assert_int_equal(
                    held_salted(ix, t, 3 * BS, salt_of("tenant-7f3a", NULL)),
                    0);
            assert_st(lr__index_verify(ix), LR_OK);
            lr_index_destroy(ix);
        }
}

/* What is still skipped (counted, nothing changes): an adapter known
 * only by its engine-local lora_id (with or without the id in the extra
 * keys, as vLLM before lora_name sent it), a lora_name that is empty or
 * not a string, multimodal keys in engine blocks of two index blocks
 * (vLLM's (identifier, offset) tuple: which of the two an input overlaps
 * is not said), a tuple that is not (string, integer), a bare hash
 * string past the first block (older vLLM's multimodal key),
 * prompt-embedding bytes, a string key in a store that continues a chain
 * (a cache salt is only ever in a prompt's first block), two strings in
 * the first block, and keys whose first entry is not the event's adapter.
 * Extra keys that say something but not one entry per block make the
 * event invalid. */
static void
extra_keys_skipped(void **state)
{
    (void)state;
    uint32_t t[2 * BS];
    tu_tokens(t, 2 * BS, 23);
    static const uint64_t h[2] = { 61, 62 };
    enum {
        N_CASES = 15
    };
    for (int c = 0; c < N_CASES; c++)
        for (int map = 0; map < 2; map++) {
            lr_index *ix = mk_index(NULL);
            /* a parent for the chained cases */
            static const uint64_t ph[1] = { 60 };
            uint32_t pt[BS];
            tu_tokens(pt, BS, 24);
            struct vstore parent = vstore_of(ph, 1, pt);
            lr_vllm_batch_info info;
            assert_st(apply_stores(ix, &parent, 1, map, &info), LR_OK);
            assert_int_equal(info.stored, 1);
            uint64_t d0 = lr__index_digest(ix);
            struct vstore s = vstore_of(h, 2, t);
            struct mpw *w = NULL;
            bool invalid = false;
            switch (c) {
            case 0: /* lora_id alone */
                s.lora_id = 3;
                break;
            case 1: /* lora_id alone, the id in the keys (older vLLM) */
                s.lora_id = 3;
                s.id_key = 3;
                break;
            case 2: /* an empty lora_name */
                vstore_adapter(&s, "", 3);
                break;
            case 3: /* a multimodal tuple in block 0 */
                s.mm_block = 0;
                break;
            case 4: /* a multimodal tuple in block 1, with an adapter */
                vstore_adapter(&s, "sql-lora", 3);
                s.mm_block = 1;
                break;
            case 5: /* a bare multimodal hash in block 1 */
                s.mm_block = 1;
                s.mm_form = 1;
                break;
            case 6: /* prompt embeddings in block 0 */
                s.mm_block = 0;
                s.mm_form = 2;
                break;
            case 7: /* a string key in a chained store */
                s.has_parent = true;
                s.parent = ph[0];
                s.mm_block = 0;
                s.mm_form = 1;
                break;
            case 8: /* a cache salt and a bare multimodal hash in block 0 */
                s.cache_salt = "tenant-7f3a";
                s.mm_block = 0;
                s.mm_form = 1;
                break;
            case 9: /* keys of another adapter than the event's */
                vstore_adapter(&s, "sql-lora", 3);
                s.name_key = "chat-lora";
                break;
            case 10: /* a multimodal tuple whose offset is a string */
                s.mm_block = 1;
                s.mm_form = 3;
                break;
            case 11: /* a multimodal tuple of three */
                s.mm_block = 0;
                s.mm_form = 4;
                break;
            case 12: /* a lora_name that is not a string */
            case 13: /* extra_keys that is not a list */
            default: /* keys for one block of two: invalid */
                w = calloc(1, sizeof *w);
                mpw_batch(w, 1, false);
                mpw_arr(w, 10);
                mpw_str(w, "BlockStored");
                mpw_hashes(w, h, 2, MPW_HASH_UINT);
                mpw_nil(w);
                mpw_tokens(w, t, 2 * BS);
                mpw_uint(w, BS);
                mpw_nil(w);
                mpw_str(w, "GPU");
                if (c == 12)
                    mpw_uint(w, 4);
                else
                    mpw_str(w, "sql-lora");
                if (c == 13) {
                    mpw_str(w, "sql-lora");
                } else {
                    mpw_arr(w, 1);
                    mpw_arr(w, 1);
                    mpw_str(w, "sql-lora");
                }
                mpw_uint(w, 0);
                mpw_batch_end(w, false);
                invalid = c == N_CASES - 1;
                break;
            }
            lr_status st = w != NULL ? apply(ix, w, &info)
                                     : apply_stores(ix, &s, 1, map, &info);
            assert_st(st, LR_OK);
            if (info.skipped != (invalid ? 0u : 1u) ||
                info.invalid != (invalid ? 1u : 0u) || info.stored != 0)
                fail_msg("case %d map %d: skipped %u invalid %u stored %u", c,
                         map, info.skipped, info.invalid, info.stored);
            assert_true(lr__index_digest(ix) == d0);
            free(w);
            lr_index_destroy(ix);
        }
}

/* ---- multimodal inputs ----------------------------------------------------- */

/* An index whose blocks are the engine's (BS tokens): where vLLM's
 * multimodal keys apply. */
static lr_index *
mk_index_bs(void)
{
    lr_index_options o;
    lr_index_options_init(&o);
    o.seed = OPT_SEED;
    o.block_tokens = BS;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    return ix;
}

/* Tokens INST holds for t[0..n) with multimodal inputs mm (n_mm), keyed
 * as a request is under salt. */
static uint32_t
held_mm(lr_index *ix, const uint32_t *t, size_t n, uint64_t salt,
        const lr_mm_input *mm, size_t n_mm)
{
    lr_prompt p;
    lr_prompt_init(&p);
    p.tokens = t;
    p.n_tokens = n;
    p.tenant_salt = salt;
    p.mm = mm;
    p.n_mm = n_mm;
    lr_index_hit h[8];
    lr_index_match_result r;
    lr_index_match_result_init(&r);
    r.hits = h;
    r.hits_capacity = 8;
    assert_st(lr_index_match(ix, &p, T0, LR_MATCH_NO_TOUCH, &r), LR_OK);
    for (size_t i = 0; i < r.n_hits; i++)
        if (h[i].instance == INST)
            return h[i].tokens;
    return 0;
}

#define IMG_A "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define IMG_B "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"

/* vLLM's multimodal keys apply: an image whose placeholder runs from
 * token BS + 3 for 40 tokens puts (id, 3) in block 1's extra keys and
 * (id, 3 - BS) in block 2's, here in a store of two blocks and a chained
 * store of one, with an adapter's name first in every block or none, and
 * a cache salt after the keys. A request with the same image at the same
 * place holds all three blocks; without it, with another image, or with
 * the image one token later, only block 0 (the text before the image).
 * Both eras; and a second image in block 2 after the first. */
static void
multimodal_applies(void **state)
{
    (void)state;
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 27);
    static const uint64_t h[3] = { 91, 92, 93 };
    for (int map = 0; map < 2; map++)
        for (int lora = 0; lora < 2; lora++)
            for (int two = 0; two < 2; two++) {
                const char *name = lora ? "vision-lora" : NULL;
                const struct vmm k0[1] = { { 1, IMG_A, 3 } };
                const struct vmm k1[2] = { { 0, IMG_A, 3 - (int64_t)BS },
                                           { 0, IMG_B, 80 - 2 * (int64_t)BS } };
                lr_index *ix = mk_index_bs();
                struct vstore ev[2] = { vstore_of(h, 2, t),
                                        vstore_of(h + 2, 1, t + 2 * BS) };
                for (int i = 0; i < 2; i++) {
                    if (lora)
                        vstore_adapter(&ev[i], name, 4);
                    ev[i].cache_salt = "tenant-7f3a";
                }
                ev[0].mmk = k0;
                ev[0].n_mmk = 1;
                ev[1].mmk = k1;
                ev[1].n_mmk = two ? 2 : 1;
                ev[1].has_parent = true;
                ev[1].parent = h[1];
                lr_vllm_batch_info info;
                assert_st(apply_stores(ix, ev, 2, map, &info), LR_OK);
                if (info.stored != 2 || info.skipped + info.invalid != 0)
                    fail_msg("map %d lora %d: stored %u skipped %u invalid %u",
                             map, lora, info.stored, info.skipped,
                             info.invalid);
                uint64_t salt = salt_of("tenant-7f3a", name);
                lr_mm_input in[2] = { { IMG_A, BS + 3, 40 }, { IMG_B, 80, 4 } };
                size_t n_in = two ? 2 : 1;
                assert_int_equal(held_mm(ix, t, 3 * BS, salt, in, n_in),
                                 3 * BS);
                assert_int_equal(held_mm(ix, t, 3 * BS, salt, NULL, 0), BS);
                if (two) /* the first image alone: not block 2 */
                    assert_int_equal(held_mm(ix, t, 3 * BS, salt, in, 1),
                                     2 * BS);
                lr_mm_input other = { IMG_B, BS + 3, 40 };
                assert_int_equal(held_mm(ix, t, 3 * BS, salt, &other, 1), BS);
                lr_mm_input later = { IMG_A, BS + 4, 40 };
                assert_int_equal(held_mm(ix, t, 3 * BS, salt, &later, 1), BS);
                /* the adapter and the salt still rule */
                assert_int_equal(
                    held_mm(ix, t, 3 * BS, salt_of(NULL, name), in, n_in), 0);
                assert_st(lr__index_verify(ix), LR_OK);
                lr_index_destroy(ix);
            }
}

/* A store whose multimodal keys sit in engine blocks of two index blocks
 * is skipped (which of the two an input overlaps is not said), and the
 * same through lr_index_kv_stored() with mm_hashes is LR_ENOTSUP; zero
 * hashes there are no keys at all and apply. */
static void
multimodal_needs_index_blocks(void **state)
{
    (void)state;
    uint32_t t[2 * BS];
    tu_tokens(t, 2 * BS, 28);
    static const uint64_t h[2] = { 95, 96 };
    lr_index *ix = mk_index(NULL); /* blocks of BS / 2 */
    const struct vmm k[1] = { { 1, IMG_A, 3 } };
    struct vstore ev = vstore_of(h, 2, t);
    ev.mmk = k;
    ev.n_mmk = 1;
    lr_vllm_batch_info info;
    assert_st(apply_stores(ix, &ev, 1, true, &info), LR_OK);
    assert_int_equal(info.skipped, 1);
    assert_int_equal(info.stored, 0);
    uint64_t d0 = lr__index_digest(ix);
    uint64_t mmh[2] = { 0, lr_mm_key_hash(IMG_A, strlen(IMG_A), 3) };
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    e.block_hashes = h;
    e.n_blocks = 2;
    e.block_size = BS;
    e.token_ids = t;
    e.n_tokens = 2 * BS;
    e.mm_hashes = mmh;
    assert_st(lr_index_kv_stored(ix, INST, &e, T0), LR_ENOTSUP);
    assert_true(lr__index_digest(ix) == d0);
    mmh[1] = 0;
    assert_st(lr_index_kv_stored(ix, INST, &e, T0), LR_OK);
    assert_int_equal(held(ix, t, 2 * BS), 2 * BS);
    lr_index_destroy(ix);
}

/* A batch with multimodal keys under allocation failure: a store that
 * could not apply changed nothing (the scratch for its blocks' hashes is
 * the batch's), and delivering it again ends where one call does. */
struct mm_oom {
    struct mpw *w;
    uint64_t empty, full;
};

static bool
sc_mm_batch(struct tu_alloc *t, void *vctx)
{
    struct mm_oom *c = vctx;
    struct tu_arming arm = tu_alloc_pause(t);
    lr_index_options o;
    lr_index_options_init(&o);
    o.seed = OPT_SEED;
    o.block_tokens = BS;
    o.allocator = &t->a;
    lr_index *ix = NULL;
    assert_st(lr_index_create(&o, &ix), LR_OK);
    tu_alloc_resume(t, arm);
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    lr_status st = lr_index_vllm_batch(ix, INST, c->w->buf, c->w->n, T0, &info);
    bool failed = t->failed;
    tu_alloc_disarm(t);
    if (st == LR_ENOMEM) {
        assert_true(failed);
        assert_int_equal(info.done, 0);
        assert_true(lr__index_digest(ix) == c->empty);
        assert_st(lr_index_vllm_batch(ix, INST, c->w->buf, c->w->n, T0, NULL),
                  LR_OK);
    } else {
        assert_st(st, LR_OK);
    }
    assert_true(lr__index_digest(ix) == c->full);
    assert_st(lr__index_verify(ix), LR_OK);
    lr_index_destroy(ix);
    return failed;
}

static void
multimodal_oom(void **state)
{
    (void)state;
    uint32_t t[2 * BS];
    tu_tokens(t, 2 * BS, 30);
    static const uint64_t h[2] = { 101, 102 };
    const struct vmm k[2] = { { 0, IMG_A, 5 }, { 1, IMG_A, 5 - (int64_t)BS } };
    struct vstore s = vstore_of(h, 2, t);
    s.mmk = k;
    s.n_mmk = 2;
    struct mm_oom c;
    c.w = calloc(1, sizeof *c.w);
    mpw_batch(c.w, 1, false);
    vstore_write(c.w, &s, true);
    mpw_batch_end(c.w, false);
    lr_index *ix = mk_index_bs();
    c.empty = lr__index_digest(ix);
    assert_st(lr_index_vllm_batch(ix, INST, c.w->buf, c.w->n, T0, NULL), LR_OK);
    c.full = lr__index_digest(ix);
    const lr_mm_input in = { IMG_A, 5, 40 };
    assert_int_equal(held_mm(ix, t, 2 * BS, 0, &in, 1), 2 * BS);
    lr_index_destroy(ix);
    tu_oom_loop(sc_mm_batch, &c, 10000);
    free(c.w);
}

/* The router keys a request's multimodal inputs (lr_request.mm) as the
 * events key the blocks: with the image the request goes to the
 * instance that holds it, and a waiting request keeps its inputs. */
static void
router_multimodal_match(void **state)
{
    (void)state;
    uint32_t ids[3];
    lr_router *r = mk_router(BS, ids, 3);
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 29);
    static const uint64_t h[3] = { 97, 98, 99 };
    const struct vmm k[2] = { { 1, IMG_A, 3 }, { 2, IMG_A, 3 - (int64_t)BS } };
    struct vstore s = vstore_of(h, 3, t);
    s.mmk = k;
    s.n_mmk = 2;
    struct mpw *w = calloc(1, sizeof *w);
    mpw_batch(w, 1, false);
    vstore_write(w, &s, true);
    mpw_batch_end(w, false);
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    assert_st(lr_router_vllm_batch(r, ids[2], w->buf, w->n, T0, &info), LR_OK);
    assert_int_equal(info.stored, 1);
    /* the text alone, on another instance: block 0 */
    lr_kv_stored e;
    lr_kv_stored_init(&e);
    static const uint64_t h1[1] = { 100 };
    e.block_hashes = h1;
    e.n_blocks = 1;
    e.block_size = BS;
    e.token_ids = t;
    e.n_tokens = BS;
    assert_st(lr_router_kv_stored(r, ids[1], &e, T0), LR_OK);
    const lr_mm_input img = { IMG_A, BS + 3, 40 };
    const lr_mm_input other = { IMG_B, BS + 3, 40 };
    for (int c = 0; c < 3; c++) {
        lr_request q;
        lr_request_init(&q);
        q.id = 1;
        q.tokens = t;
        q.n_tokens = 3 * BS;
        q.flags = LR_ROUTE_DRY_RUN;
        q.now_ns = T0;
        q.mm = c == 0 ? &img : c == 1 ? &other : NULL;
        q.n_mm = c < 2 ? 1 : 0;
        lr_decision d;
        lr_decision_init(&d);
        assert_st(lr_router_route(r, &q, &d), LR_OK);
        if (c == 0) {
            assert_int_equal(d.instance, ids[2]);
            assert_int_equal(d.cached_tokens, 3 * BS);
        } else { /* the text before the image, held by both */
            assert_int_equal(d.cached_tokens, BS);
        }
    }
    /* bad inputs: the request is refused, nothing changes */
    uint64_t d0 = lr__router_digest(r);
    const lr_mm_input bad[5][2] = {
        { { NULL, 0, 4 } },
        { { "", 0, 4 } },
        { { IMG_A, 0, 0 } },
        { { IMG_A, 3 * BS - 2, 4 } },
        { { IMG_A, 10, 8 }, { IMG_B, 12, 4 } },
    };
    for (int c = 0; c < 6; c++) {
        lr_request q;
        lr_request_init(&q);
        q.id = 2;
        q.tokens = t;
        q.n_tokens = 3 * BS;
        q.now_ns = T0;
        q.mm = c < 5 ? bad[c] : NULL;
        q.n_mm = c == 4 ? 2 : 1;
        lr_decision d;
        lr_decision_init(&d);
        assert_st(lr_router_route(r, &q, &d), LR_EINVAL);
    }
    assert_true(lr__router_digest(r) == d0);
    free(w);
    lr_router_destroy(r);
}

/* The batch's data-parallel rank is reported, never a reason to skip:
 * each rank publishes on its own port and is its own instance. */
static void
dp_rank_applies(void **state)
{
    (void)state;
    uint32_t t[BS];
    tu_tokens(t, BS, 25);
    static const uint64_t h[1] = { 71 };
    lr_index *ix = mk_index(NULL);
    struct mpw *w = calloc(1, sizeof *w);
    struct vstore s = vstore_of(h, 1, t);
    vstore_adapter(&s, "sql-lora", 1);
    mpw_arr(w, 3);
    mpw_f64(w, 1234.5);
    mpw_arr(w, 1);
    vstore_write(w, &s, true);
    mpw_uint(w, 3); /* dp rank 3 */
    lr_vllm_batch_info info;
    assert_st(apply(ix, w, &info), LR_OK);
    assert_int_equal(info.dp_rank, 3);
    assert_int_equal(info.stored, 1);
    assert_int_equal(info.skipped, 0);
    assert_int_equal(held_salted(ix, t, BS, salt_of(NULL, "sql-lora")), BS);
    free(w);
    lr_index_destroy(ix);
}

/* The router keys a request as the events key its blocks: a request
 * that names the adapter (lr_request.adapter) with tenant_salt =
 * lr_name_hash(cache_salt) finds the adapter's salted stores, as does one
 * that carries the combined salt itself; without the adapter or the cache
 * salt it finds nothing. */
static void
router_adapter_match(void **state)
{
    (void)state;
    uint32_t ids[2];
    lr_router *r = mk_router(16, ids, 2);
    uint32_t t[2 * BS];
    tu_tokens(t, 2 * BS, 26);
    static const uint64_t h[2] = { 81, 82 };
    struct vstore s = vstore_of(h, 2, t);
    vstore_adapter(&s, "sql-lora", 1);
    s.cache_salt = "tenant-7f3a";
    struct mpw *w = calloc(1, sizeof *w);
    mpw_batch(w, 1, false);
    vstore_write(w, &s, true);
    mpw_batch_end(w, false);
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    assert_st(lr_router_vllm_batch(r, ids[1], w->buf, w->n, T0, &info), LR_OK);
    assert_int_equal(info.stored, 1);
    for (int k = 0; k < 4; k++) {
        lr_request q;
        lr_request_init(&q);
        q.id = 1;
        q.tokens = t;
        q.n_tokens = 2 * BS;
        q.flags = LR_ROUTE_DRY_RUN;
        q.now_ns = T0;
        q.tenant_salt = k == 0   ? salt_of("tenant-7f3a", NULL)
                        : k == 1 ? salt_of("tenant-7f3a", "sql-lora")
                        : k == 2 ? salt_of(NULL, "sql-lora")
                                 : salt_of("tenant-7f3a", NULL);
        q.adapter = k == 0 ? "sql-lora" : NULL;
        lr_decision d;
        lr_decision_init(&d);
        assert_st(lr_router_route(r, &q, &d), LR_OK);
        if (k <= 1) {
            assert_int_equal(d.instance, ids[1]);
            assert_int_equal(d.cached_tokens, 2 * BS);
        } else {
            assert_int_equal(d.cached_tokens, 0);
        }
    }
    free(w);
    lr_router_destroy(r);
}

/* ---- the router --------------------------------------------------------- */

static void
router_entry(void **state)
{
    (void)state;
    uint32_t ids[4];
    lr_router *r = mk_router(16, ids, 4);
    uint32_t t[3 * BS];
    tu_tokens(t, 3 * BS, 12);
    struct mpw *w = calloc(1, sizeof *w);
    write_basic(w, true, MPW_HASH_INT, t, false);
    lr_vllm_batch_info info;
    lr_vllm_batch_info_init(&info);
    assert_st(lr_router_vllm_batch(r, 9, w->buf, w->n, T0, &info), LR_ENOENT);
    assert_st(lr_router_vllm_batch(r, ids[2], w->buf, w->n, T0, &info), LR_OK);
    assert_int_equal(info.stored, 2);
    lr_request q;
    lr_request_init(&q);
    q.id = 1;
    q.tokens = t;
    q.n_tokens = 3 * BS;
    q.flags = LR_ROUTE_DRY_RUN;
    q.now_ns = T0;
    lr_decision d;
    lr_decision_init(&d);
    assert_st(lr_router_route(r, &q, &d), LR_OK);
    assert_int_equal(d.instance, ids[2]);
    assert_int_equal(d.cached_tokens, 3 * BS);
    assert_st(lr_router_vllm_batch(NULL, 0, w->buf, w->n, T0, NULL), LR_EINVAL);
    assert_st(lr_router_vllm_batch(r, ids[2], w->buf, 3, T0, NULL),
              LR_ECORRUPT);
    free(w);
    lr_router_destroy(r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encodings_agree),
        cmocka_unit_test(cleared_and_unplaced),
        cmocka_unit_test(skipped_events),
        cmocka_unit_test(unknown_event_of_every_form),
        cmocka_unit_test(extra_keys_all_nil_apply),
        cmocka_unit_test(malformed),
        cmocka_unit_test(differential),
        cmocka_unit_test(oom),
        cmocka_unit_test(router_entry),
        cmocka_unit_test(fleet_files),
        cmocka_unit_test(lora_adapter_applies),
        cmocka_unit_test(cache_salt_applies),
        cmocka_unit_test(extra_keys_skipped),
        cmocka_unit_test(dp_rank_applies),
        cmocka_unit_test(router_adapter_match),
        cmocka_unit_test(multimodal_applies),
        cmocka_unit_test(multimodal_needs_index_blocks),
        cmocka_unit_test(multimodal_oom),
        cmocka_unit_test(router_multimodal_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
