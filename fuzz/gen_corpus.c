/* Writes the seed corpora: fuzz-gen-corpus DIR writes DIR/<target>/seed-*.
 * Not a test; run it by hand when an input format changes, then let
 * libFuzzer grow the corpora and trim them with -merge=1.
 *
 * The op-stream seeds are written with fuzz_dp_enc_range() in exactly the
 * order the harnesses decode them (see the comment at the top of each
 * harness); the delta seeds are real exports plus crafted and damaged
 * blobs. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../tests/mpw.h"
#include "../tests/table-model.h"
#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index/index.h"
#include "index_util.h"
#include "libroute/lr_router.h"
#include "libroute/lr_vllm.h"
#include "parts/load.h"
#include "common/lr_hash.h"
#include "learn/mlp.h"
#include "policy/policy.h"

static const char *root;
static int n_written;

/* ---- output ---------------------------------------------------------------- */

static void
mkdir_p(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void
write_seed(const char *target, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, target);
    mkdir_p(path);
    snprintf(path, sizeof path, "%s/%s/seed-%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (n > 0 && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "write %s failed\n", path);
        exit(1);
    }
    n_written++;
}

/* ---- front-stream encoder ---------------------------------------------------- */

struct enc {
    uint8_t b[16384];
    size_t n;
};

static void
put(struct enc *e, uint32_t min, uint32_t max, uint32_t v)
{
    if (e->n + 4 > sizeof e->b) {
        fprintf(stderr, "seed too long\n");
        exit(1);
    }
    e->n += fuzz_dp_enc_range(e->b + e->n, min, max, v);
}

static void
put_bytes(struct enc *e, const void *p, size_t n)
{
    if (e->n + n > sizeof e->b)
        exit(1);
    memcpy(e->b + e->n, p, n);
    e->n += n;
}

/* xorshift for the random-but-reproducible seeds: a value in [lo, hi] */
static uint32_t
xorshift(uint64_t *s, uint32_t lo, uint32_t hi)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return lo + (uint32_t)(*s % ((uint64_t)hi - lo + 1));
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t
rnd(uint32_t lo, uint32_t hi)
{
    return xorshift(&rs, lo, hi);
}

/* ---- kv_events ---------------------------------------------------------------- */

enum {
    KV_ID0,
    KV_ID1,
    KV_ID2,
    KV_ID3,
    KV_ID1000,
    KV_NONE
};

/* The allocation failure of an op-stream header, as fuzz_oom_decode()
 * reads it with max_at. oom: 0 none; n > 0 allocation n fails once; n < 0
 * allocation -n and every one after. */
static void
put_oom(struct enc *e, int oom, uint32_t max_at)
{
    if (oom == 0) {
        put(e, 0, 3, 0);
    } else {
        put(e, 0, 3, oom > 0 ? 2 : 3);
        put(e, 1, max_at, (uint32_t)(oom > 0 ? oom : -oom));
    }
}

static void
kv_header_oom(struct enc *e, int b16, uint32_t cap, uint32_t emap, uint32_t ttl,
              int oom)
{
    e->n = 0;
    put(e, 0, 1, (uint32_t)b16);
    put(e, 16, 512, cap);
    put(e, 0, 3, emap);
    put(e, 0, 3, ttl);
    put(e, 0, 255, 7);
    put_oom(e, oom, 1024);
}

static void
kv_header(struct enc *e, int b16, uint32_t cap, uint32_t emap, uint32_t ttl)
{
    kv_header_oom(e, b16, cap, emap, ttl, 0);
}

/* bs_i: 0,1 B; 2 2B; 3 3B; 4 4B; 5 zero; 6 B/2; 7 B+1.
 * hp_i: 0 none; 1,2 parent; 3 invalid. */
static void
kv_stored(struct enc *e, uint32_t inst, uint32_t nb, uint32_t bs_i,
          uint32_t hp_i, uint32_t parent, const uint32_t *hashes,
          uint32_t pattern, uint32_t start, uint32_t tweak, uint32_t salt,
          uint32_t flaw)
{
    put(e, 0, 10, 0);
    put(e, 0, 5, inst);
    put(e, 0, 8, nb);
    put(e, 0, 7, bs_i);
    put(e, 0, 3, hp_i);
    put(e, 0, 63, parent);
    for (uint32_t i = 0; i < nb; i++)
        put(e, 0, 63, hashes[i]);
    put(e, 0, 3, pattern);
    put(e, 0, 63, start);
    put(e, 0, 255, tweak);
    put(e, 0, 1, salt);
    put(e, 0, 15, flaw);
}

static void
kv_removed(struct enc *e, uint32_t inst, uint32_t nb, const uint32_t *hashes,
           uint32_t v)
{
    put(e, 0, 10, 4);
    put(e, 0, 5, inst);
    put(e, 0, 8, nb);
    for (uint32_t i = 0; i < nb; i++)
        put(e, 0, 63, hashes[i]);
    put(e, 0, 7, v);
}

static void
kv_simple(struct enc *e, uint32_t op, uint32_t arg)
{
    put(e, 0, 10, op);
    if (op == 5 || op == 9 || op == 10)
        put(e, 0, 5, arg);
    else if (op == 6)
        put(e, 0, 3, arg);
}

static void
kv_match(struct enc *e, uint32_t pattern, uint32_t start, uint32_t len,
         uint32_t salt, uint32_t no_touch, uint32_t cap)
{
    put(e, 0, 10, 8);
    put(e, 0, 3, pattern);
    put(e, 0, 63, start);
    put(e, 0, 512, len);
    put(e, 0, 255, 255);
    put(e, 0, 1, salt);
    put(e, 0, 1, no_touch);
    put(e, 0, 5, cap);
}

static void
gen_kv(void)
{
    struct enc e;
    const char *T = "kv_events";
    static const uint32_t h012[] = { 0, 1, 2 }, h34[] = { 3, 4 },
                          h567[] = { 5, 6, 7 }, h3[] = { 3 }, h0[] = { 0 },
                          hbig[] = { 8, 9, 10, 11, 12, 13 };

    /* store a chain, extend it by parent, match, remove, clear */
    kv_header(&e, 0, 128, 0, 0);
    kv_stored(&e, KV_ID1, 3, 0, 0, 0, h012, 0, 0, 255, 0, 15);
    kv_stored(&e, KV_ID1, 2, 0, 1, 2, h34, 0, 3, 255, 0, 15);
    kv_match(&e, 0, 0, 40, 0, 1, 4);
    kv_removed(&e, KV_ID1, 1, h3, 7);
    kv_match(&e, 0, 0, 40, 0, 0, 4);
    kv_simple(&e, 5, KV_ID1);
    kv_match(&e, 0, 0, 40, 0, 0, 4);
    write_seed(T, "chain-extend-remove-clear", e.b, e.n);

    /* two instances sharing a prefix, forks, EBUFSIZE, remove_instance */
    kv_header(&e, 0, 256, 0, 0);
    kv_stored(&e, KV_ID0, 3, 2, 0, 0, h012, 2, 0, 255, 0, 15);
    kv_stored(&e, KV_ID2, 3, 2, 0, 0, h567, 2, 0, 13, 0, 15);
    kv_stored(&e, KV_ID3, 2, 1, 0, 0, h34, 2, 0, 255, 0, 15);
    kv_match(&e, 2, 0, 24, 0, 1, 1);
    kv_match(&e, 2, 0, 24, 0, 0, 3);
    kv_simple(&e, 9, KV_ID2);
    kv_match(&e, 2, 0, 24, 0, 0, 3);
    kv_removed(&e, KV_ID0, 3, h012, 0);
    kv_removed(&e, KV_ID0, 3, h012, 1);
    write_seed(T, "shared-prefix-fork", e.b, e.n);

    /* five instance ids against max_instances 4, and LR_INSTANCE_NONE */
    kv_header(&e, 0, 128, 0, 0);
    for (uint32_t i = 0; i < 6; i++)
        kv_stored(&e, i, 1, 0, 0, 0, h0, 1, 0, 255, 0, 15);
    kv_simple(&e, 5, KV_NONE);
    kv_simple(&e, 9, KV_ID1000);
    kv_simple(&e, 9, KV_ID0);
    kv_stored(&e, KV_ID1000, 1, 0, 0, 0, h0, 1, 0, 255, 0, 15);
    write_seed(T, "instance-limit", e.b, e.n);

    /* engine map of 8 entries: LR_ELIMIT, then stale sweeps */
    kv_header(&e, 0, 64, 1, 0);
    kv_stored(&e, KV_ID1, 6, 0, 0, 0, hbig, 3, 0, 255, 0, 15);
    kv_stored(&e, KV_ID2, 3, 0, 0, 0, h567, 3, 1, 255, 0, 15);
    kv_stored(&e, KV_ID1, 3, 0, 0, 0, h012, 3, 2, 255, 0, 15);
    kv_simple(&e, 5, KV_ID1);
    kv_stored(&e, KV_ID2, 3, 0, 1, 7, h012, 3, 3, 255, 0, 15);
    write_seed(T, "engine-map-limit", e.b, e.n);

    /* TTL of 4 ticks: time moves, routes expire, parents go stale */
    kv_header(&e, 0, 128, 0, 1);
    kv_stored(&e, KV_ID1, 3, 0, 0, 0, h012, 0, 0, 255, 0, 15);
    kv_simple(&e, 6, 1);
    kv_stored(&e, KV_ID2, 2, 0, 0, 0, h34, 1, 0, 255, 1, 15);
    kv_simple(&e, 6, 2);
    kv_simple(&e, 7, 0);
    kv_stored(&e, KV_ID1, 2, 0, 1, 2, h34, 0, 3, 255, 0, 15);
    kv_match(&e, 1, 0, 16, 1, 0, 4);
    kv_simple(&e, 6, 3);
    kv_match(&e, 0, 0, 20, 0, 0, 4);
    write_seed(T, "ttl-expiry", e.b, e.n);

    /* every invalid shape once */
    kv_header(&e, 0, 128, 0, 0);
    kv_stored(&e, KV_ID1, 2, 5, 0, 0, h34, 0, 0, 255, 0, 15); /* bs 0 */
    kv_stored(&e, KV_ID1, 2, 6, 0, 0, h34, 0, 0, 255, 0, 15); /* B/2 */
    kv_stored(&e, KV_ID1, 2, 7, 0, 0, h34, 0, 0, 255, 0, 15); /* B+1 */
    kv_stored(&e, KV_ID1, 2, 0, 3, 0, h34, 0, 0, 255, 0, 15); /* hp 2 */
    kv_stored(&e, KV_ID1, 2, 0, 1, 9, h34, 0, 0, 255, 0, 15); /* ENOENT */
    for (uint32_t f = 0; f < 4; f++)
        kv_stored(&e, KV_ID1, 2, 0, 0, 0, h34, 0, 0, 255, 0, f);
    kv_stored(&e, KV_NONE, 2, 0, 0, 0, h34, 0, 0, 255, 0, 15);
    kv_stored(&e, KV_ID1, 0, 0, 0, 0, h34, 0, 0, 255, 0, 15);
    kv_removed(&e, KV_ID2, 2, h34, 7);
    kv_simple(&e, 5, KV_ID2);
    kv_removed(&e, KV_ID1, 2, h34, 0);
    write_seed(T, "invalid-events", e.b, e.n);

    /* capacity pressure: block 4, 64 routes, long events */
    kv_header(&e, 0, 64, 0, 0);
    for (uint32_t i = 0; i < 8; i++)
        kv_stored(&e, i % 4, 6, 4, 0, 0, hbig, i % 4, i, 255, 0, 15);
    kv_match(&e, 3, 3, 200, 0, 0, 4);
    write_seed(T, "eviction", e.b, e.n);

    /* block 16, engine blocks of 32 and 48 */
    kv_header(&e, 1, 200, 0, 0);
    kv_stored(&e, KV_ID0, 3, 2, 0, 0, h012, 2, 0, 255, 0, 15);
    kv_stored(&e, KV_ID0, 2, 3, 1, 2, h34, 2, 6, 255, 0, 15);
    kv_stored(&e, KV_ID1, 3, 4, 0, 0, h567, 2, 0, 100, 0, 15);
    kv_match(&e, 2, 0, 384, 0, 1, 2);
    kv_removed(&e, KV_ID0, 1, h012 + 1, 7);
    kv_match(&e, 2, 0, 384, 0, 0, 2);
    write_seed(T, "block16", e.b, e.n);

    /* capacity 16 truncates a 24-block event; stats */
    kv_header(&e, 0, 16, 0, 0);
    kv_stored(&e, KV_ID1, 6, 4, 0, 0, hbig, 1, 0, 255, 0, 15);
    kv_simple(&e, 10, KV_ID1);
    kv_stored(&e, KV_ID2, 6, 4, 1, 13, hbig, 1, 24, 255, 0, 15);
    kv_simple(&e, 10, KV_ID2);
    write_seed(T, "capacity-truncation", e.b, e.n);

    /* enough live engine hashes to grow the engine map */
    kv_header(&e, 0, 512, 0, 0);
    for (uint32_t i = 0; i < 4; i++) {
        static const uint32_t lo[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
        static const uint32_t hi[8] = { 8, 9, 10, 11, 12, 13, 14, 15 };
        kv_stored(&e, i, 8, 0, 0, 0, lo, 3, i, 255, 0, 15);
        kv_stored(&e, i, 8, 0, 1, 7, hi, 3, i + 8, 255, 0, 15);
    }
    kv_simple(&e, 10, KV_ID3);
    kv_removed(&e, KV_ID0, 8, (const uint32_t[8]){ 7, 6, 5, 4, 3, 2, 1, 0 }, 7);
    kv_simple(&e, 10, KV_ID0);
    write_seed(T, "engine-map-growth", e.b, e.n);

    /* Regression: hashes whose entries went stale (TTL) come back in an
     * event with new ones; the engine map of 8 must not end up holding
     * 12 live entries (fixed in 89009f8: stale-entry hashes count as new). */
    kv_header(&e, 0, 64, 1, 1);
    kv_stored(&e, KV_ID1, 4, 0, 0, 0, (const uint32_t[4]){ 0, 1, 2, 3 }, 0, 0,
              255, 0, 15);
    kv_simple(&e, 6, 2);
    kv_stored(&e, KV_ID2, 4, 0, 0, 0, (const uint32_t[4]){ 4, 5, 6, 7 }, 1, 0,
              255, 0, 15);
    kv_stored(&e, KV_ID1, 8, 0, 0, 0,
              (const uint32_t[8]){ 0, 1, 2, 3, 8, 9, 10, 11 }, 2, 0, 255, 0,
              15);
    kv_simple(&e, 10, KV_ID1);
    write_seed(T, "engine-map-stale-revival", e.b, e.n);

    /* allocation failures: once early, once late, from then on */
    static const int ooms[4] = { 1, 3, 6, -4 };
    for (int k = 0; k < 4; k++) {
        char name[32];
        kv_header_oom(&e, 0, 128, 0, 0, ooms[k]);
        kv_stored(&e, KV_ID1, 3, 0, 0, 0, h012, 0, 0, 255, 0, 15);
        kv_stored(&e, KV_ID1, 2, 0, 1, 2, h34, 0, 3, 255, 0, 15);
        kv_stored(&e, KV_ID2, 6, 1, 0, 0, hbig, 2, 0, 255, 1, 15);
        kv_match(&e, 0, 0, 40, 0, 0, 4);
        kv_stored(&e, KV_ID3, 3, 2, 0, 0, h567, 0, 0, 9, 0, 15);
        kv_simple(&e, 10, KV_ID1);
        snprintf(name, sizeof name, "oom-%d", ooms[k]);
        write_seed(T, name, e.b, e.n);
    }

    /* pseudo-random streams of well-formed-ish ops */
    for (int s = 0; s < 16; s++) {
        char name[32];
        kv_header_oom(&e, (int)rnd(0, 1), rnd(16, 512), rnd(0, 3), rnd(0, 3),
                      s % 4 == 3 ? (int)rnd(1, 40) : 0);
        int ops = (int)rnd(8, 40);
        for (int i = 0; i < ops; i++) {
            uint32_t op = rnd(0, 10);
            if (op <= 3) {
                uint32_t hs[8];
                uint32_t nb = rnd(1, 8);
                for (uint32_t j = 0; j < nb; j++)
                    hs[j] = rnd(0, 20);
                kv_stored(&e, rnd(0, 4), nb, rnd(0, 4), rnd(0, 2), rnd(0, 20),
                          hs, rnd(0, 3), rnd(0, 3), rnd(0, 255), rnd(0, 1),
                          rnd(4, 15));
            } else if (op == 4) {
                uint32_t hs[8];
                uint32_t nb = rnd(0, 8);
                for (uint32_t j = 0; j < nb; j++)
                    hs[j] = rnd(0, 20);
                kv_removed(&e, rnd(0, 4), nb, hs, rnd(1, 7));
            } else if (op == 8) {
                kv_match(&e, rnd(0, 3), rnd(0, 3), rnd(0, 512), rnd(0, 1),
                         rnd(0, 1), rnd(0, 5));
            } else {
                kv_simple(&e, op, op == 6 ? rnd(0, 3) : rnd(0, 4));
            }
        }
        snprintf(name, sizeof name, "random-%02d", s);
        write_seed(T, name, e.b, e.n);
    }
}

/* ---- index_ops ------------------------------------------------------------------ */

static void
io_header_oom(struct enc *e, uint32_t Bi, uint32_t cap, uint32_t max_inst,
              uint32_t journal, uint32_t ttl, int oom)
{
    e->n = 0;
    put(e, 0, 3, Bi);
    put(e, 8, 512, cap);
    put(e, 1, 8, max_inst);
    put(e, 0, 3, journal);
    put(e, 0, 3, ttl);
    put(e, 0, 255, 3);
    put_oom(e, oom, 1024);
}

static void
io_header(struct enc *e, uint32_t Bi, uint32_t cap, uint32_t max_inst,
          uint32_t journal, uint32_t ttl)
{
    io_header_oom(e, Bi, cap, max_inst, journal, ttl, 0);
}

struct iop {
    uint32_t pattern, start, len, tweak, salt, nb, b[3], variant;
};

static void
io_prompt(struct enc *e, const struct iop *p, int with_bounds)
{
    put(e, 0, 3, p->pattern);
    put(e, 0, 3, p->start);
    put(e, 0, 160, p->len);
    put(e, 0, 255, p->tweak);
    put(e, 0, 1, p->salt);
    if (with_bounds) {
        put(e, 0, 3, p->nb);
        for (uint32_t i = 0; i < p->nb; i++)
            put(e, 0, p->len + 1, p->b[i]);
    }
    put(e, 0, 7, p->variant);
}

/* trust_i: 0,1 LOCAL; 2 REMOTE; 3 invalid */
static void
io_learn(struct enc *e, uint32_t t, uint32_t inst, uint32_t trust_i,
         const struct iop *p)
{
    put(e, 0, 11, 0);
    put(e, 0, 1, t);
    put(e, 0, 9, inst);
    put(e, 0, 3, trust_i);
    io_prompt(e, p, 1);
}

/* flags_i: 0 none; 1,2 NO_TOUCH; 3 invalid */
static void
io_match(struct enc *e, uint32_t t, uint32_t flags_i, uint32_t capv,
         const struct iop *p)
{
    put(e, 0, 11, 3);
    put(e, 0, 1, t);
    put(e, 0, 3, flags_i);
    put(e, 0, 5, capv);
    io_prompt(e, p, 0);
}

static void
io_dry(struct enc *e, uint32_t t, uint32_t capv, const struct iop *p)
{
    put(e, 0, 11, 5);
    put(e, 0, 1, t);
    put(e, 0, 5, capv);
    io_prompt(e, p, 0);
}

/* dst_i: 0 self, else the other; since_i: 0 zero, 1,2 last mark, 3 future */
static void
io_transfer(struct enc *e, uint32_t src, uint32_t dst_i, uint32_t since_i,
            uint32_t corrupt_i, uint32_t pos, uint32_t xor)
{
    put(e, 0, 11, 8);
    put(e, 0, 1, src);
    put(e, 0, 3, dst_i);
    put(e, 0, 3, since_i);
    put(e, 0, 3, corrupt_i);
    put(e, 0, 0xffff, pos);
    put(e, 1, 255, xor);
}

static void
io_simple(struct enc *e, uint32_t op, uint32_t t, uint32_t arg)
{
    put(e, 0, 11, op);
    if (op == 6) {
        put(e, 0, 1, t);
    } else if (op == 7 || op == 11) {
        put(e, 0, 1, t);
        put(e, 0, 9, arg);
    } else if (op == 10) {
        put(e, 0, 3, arg);
    }
}

static struct iop
P(uint32_t pattern, uint32_t len, uint32_t tweak) {
    struct iop p = {
        .pattern = pattern, .len = len, .tweak = tweak, .variant = 7
    };
    return p;
}

static void
gen_index_ops(void)
{
    struct enc e;
    const char *T = "index_ops";
    struct iop p;

    /* the worked example of index_store.c: two instances, a fork, a match */
    io_header(&e, 3, 8, 4, 0, 0);
    p = P(0, 96, 255);
    p.nb = 1;
    p.b[0] = 64;
    io_learn(&e, 0, 1, 0, &p);
    io_learn(
        &e, 0, 2, 0,
        &(struct iop){ .pattern = 0, .len = 48, .tweak = 40, .variant = 7 });
    io_match(
        &e, 0, 0, 4,
        &(struct iop){ .pattern = 0, .len = 96, .tweak = 80, .variant = 7 });
    io_learn(
        &e, 0, 3, 0,
        &(struct iop){ .pattern = 3, .len = 32, .tweak = 255, .variant = 7 });
    io_simple(&e, 11, 0, 2);
    io_match(
        &e, 0, 1, 4,
        &(struct iop){ .pattern = 0, .len = 96, .tweak = 255, .variant = 7 });
    write_seed(T, "worked-example", e.b, e.n);

    /* LOCAL and REMOTE, upgrade, eviction under a small capacity */
    io_header(&e, 2, 16, 8, 0, 0);
    for (uint32_t i = 0; i < 6; i++) {
        p = P(i % 4, 40 + 8 * i, i * 7);
        io_learn(&e, 0, i, i % 2 ? 2 : 0, &p);
    }
    p = P(1, 60, 255);
    io_learn(&e, 0, 1, 0, &p);
    io_match(&e, 0, 1, 2, &p);
    io_simple(&e, 11, 0, 1);
    write_seed(T, "trust-eviction", e.b, e.n);

    /* export / import both ways, incremental marks, a corrupt blob */
    io_header(&e, 1, 64, 4, 0, 0);
    p = P(2, 32, 255);
    io_learn(&e, 0, 0, 0, &p);
    io_transfer(&e, 0, 1, 0, 1, 0, 1);
    p = P(2, 48, 20);
    io_learn(&e, 0, 1, 0, &p);
    io_transfer(&e, 0, 1, 1, 1, 0, 1);
    io_transfer(&e, 0, 1, 3, 1, 0, 1);
    io_transfer(&e, 1, 0, 0, 1, 0, 1);
    io_transfer(&e, 0, 0, 0, 1, 0, 1);
    io_transfer(&e, 0, 1, 0, 0, 45, 0x10);
    io_match(&e, 1, 1, 4, &p);
    io_dry(&e, 1, 4, &p);
    write_seed(T, "export-import", e.b, e.n);

    /* journal of 1 entry: incremental exports fall back to full */
    io_header(&e, 2, 128, 4, 1, 0);
    for (uint32_t i = 0; i < 3; i++) {
        p = P(3, 24 + 8 * i, 255);
        io_learn(&e, 0, i, 0, &p);
        io_transfer(&e, 0, 1, 1, 1, 0, 1);
    }
    io_simple(&e, 11, 1, 0);
    write_seed(T, "journal-overflow", e.b, e.n);

    /* journal disabled */
    io_header(&e, 2, 128, 4, 3, 0);
    p = P(1, 40, 255);
    io_learn(&e, 0, 0, 0, &p);
    io_transfer(&e, 0, 1, 1, 1, 0, 1);
    io_transfer(&e, 0, 1, 3, 1, 0, 1);
    write_seed(T, "journal-disabled", e.b, e.n);

    /* TTL 4 ticks: time moves, expire, dry match */
    io_header(&e, 2, 64, 4, 0, 1);
    p = P(0, 32, 255);
    io_learn(&e, 0, 0, 0, &p);
    io_simple(&e, 10, 0, 1);
    p = P(0, 48, 255);
    io_learn(&e, 0, 1, 2, &p);
    io_simple(&e, 10, 0, 2);
    io_dry(&e, 0, 4, &p);
    io_simple(&e, 6, 0, 0);
    io_match(&e, 0, 0, 4, &p);
    io_simple(&e, 10, 0, 3);
    io_match(&e, 0, 0, 4, &p);
    write_seed(T, "ttl", e.b, e.n);

    /* invalid arguments of every kind */
    io_header(&e, 2, 64, 2, 0, 0);
    p = P(0, 40, 255);
    io_learn(&e, 0, 9, 0, &p); /* LR_INSTANCE_NONE */
    io_learn(&e, 0, 0, 3, &p); /* bad trust */
    p.nb = 2;
    p.b[0] = 30;
    p.b[1] = 10; /* unsorted */
    io_learn(&e, 0, 0, 0, &p);
    p.b[0] = 41; /* past the end */
    p.nb = 1;
    io_learn(&e, 0, 0, 0, &p);
    for (uint32_t v = 0; v < 4; v++) {
        p = P(0, 40, 255);
        p.nb = 1;
        p.b[0] = 8;
        p.variant = v;
        io_learn(&e, 0, 1, 0, &p);
        io_match(&e, 0, 0, 4, &p);
    }
    p = P(0, 40, 255);
    io_learn(&e, 0, 2, 0, &p);
    io_learn(&e, 0, 3, 0, &p); /* instance limit */
    io_match(&e, 0, 3, 4, &p); /* bad flags */
    io_match(&e, 0, 0, 5, &p); /* NULL hits with a capacity */
    io_match(&e, 0, 0, 0, &p); /* EBUFSIZE */
    io_simple(&e, 7, 0, 9);
    io_simple(&e, 7, 0, 4);
    io_simple(&e, 7, 0, 1);
    io_simple(&e, 11, 0, 9);
    write_seed(T, "invalid-args", e.b, e.n);

    /* block 1, long prompts over two tokens: deep trees, many forks */
    io_header(&e, 0, 512, 8, 0, 3);
    for (uint32_t i = 0; i < 8; i++) {
        p = P(1, 160, 20 * i);
        p.nb = 2;
        p.b[0] = 10 * i;
        p.b[1] = 100 + i;
        io_learn(&e, i % 2, i, i % 3 == 2 ? 2 : 0, &p);
    }
    p = P(1, 160, 255);
    io_match(&e, 0, 0, 4, &p);
    io_match(&e, 1, 0, 4, &p);
    io_transfer(&e, 0, 1, 0, 1, 0, 1);
    io_match(&e, 1, 1, 4, &p);
    io_simple(&e, 7, 1, 3);
    io_simple(&e, 11, 1, 3);
    write_seed(T, "block1-deep", e.b, e.n);

    /* allocation failures across learn, match, export and import */
    static const int ooms[5] = { 1, 2, 5, 9, -6 };
    for (int k = 0; k < 5; k++) {
        char name[32];
        io_header_oom(&e, 2, 64, 4, 0, 0, ooms[k]);
        p = P(2, 32, 255);
        p.nb = 1;
        p.b[0] = 16;
        io_learn(&e, 0, 0, 0, &p);
        io_match(&e, 0, 0, 4, &p);
        io_transfer(&e, 0, 1, 0, 1, 0, 1);
        p = P(2, 64, 40);
        io_learn(&e, 1, 1, 0, &p);
        io_learn(&e, 0, 2, 2, &p);
        io_transfer(&e, 1, 1, 0, 1, 0, 1);
        io_match(&e, 0, 0, 4, &p);
        io_simple(&e, 11, 0, 2);
        snprintf(name, sizeof name, "oom-%d", ooms[k]);
        write_seed(T, name, e.b, e.n);
    }

    for (int s = 0; s < 16; s++) {
        char name[32];
        io_header_oom(&e, rnd(0, 3), rnd(8, 512), rnd(1, 8), rnd(0, 3),
                      rnd(0, 3), s % 4 == 3 ? -(int)rnd(1, 60) : 0);
        int ops = (int)rnd(8, 40);
        for (int i = 0; i < ops; i++) {
            uint32_t op = rnd(0, 11);
            struct iop q = P(rnd(0, 3), rnd(0, 160), rnd(0, 255));
            q.start = rnd(0, 3) == 0 ? rnd(0, 3) : 0;
            q.salt = rnd(0, 7) == 0;
            q.variant = rnd(0, 15) == 0 ? rnd(0, 3) : 7;
            if (op <= 2) {
                q.nb = rnd(0, 2);
                for (uint32_t j = 0; j < q.nb; j++)
                    q.b[j] = rnd(0, q.len);
                if (q.nb == 2 && q.b[0] > q.b[1]) {
                    uint32_t t = q.b[0];
                    q.b[0] = q.b[1];
                    q.b[1] = t;
                }
                io_learn(&e, rnd(0, 1), rnd(0, 8), rnd(0, 2), &q);
            } else if (op <= 4) {
                io_match(&e, rnd(0, 1), rnd(0, 2), rnd(0, 4), &q);
            } else if (op == 5) {
                io_dry(&e, rnd(0, 1), rnd(0, 4), &q);
            } else if (op == 8 || op == 9) {
                io_transfer(&e, rnd(0, 1), rnd(0, 3), rnd(0, 2),
                            rnd(0, 7) == 0 ? 0 : 1, rnd(0, 0xffff),
                            rnd(1, 255));
            } else {
                io_simple(&e, op, rnd(0, 1), op == 10 ? rnd(0, 2) : rnd(0, 8));
            }
        }
        snprintf(name, sizeof name, "random-%02d", s);
        write_seed(T, name, e.b, e.n);
    }
}

/* ---- delta_apply ---------------------------------------------------------------- */

static lr_index *
mk(uint32_t B, uint64_t cap, uint32_t max_inst)
{
    lr_index_options o = LR_INDEX_OPTIONS_INIT;
    o.block_tokens = B;
    o.capacity_blocks = cap;
    o.max_instances = max_inst;
    lr_index *ix;
    if (lr_index_create(&o, &ix) != LR_OK)
        exit(1);
    return ix;
}

static void
lrn(lr_index *ix, uint32_t inst, int32_t trust, uint64_t salt, uint32_t pattern,
    uint32_t len, uint32_t tweak, uint32_t bound)
{
    if (fuzz_learn_pattern(ix, inst, trust, salt, pattern, 0, len, tweak,
                           bound ? &bound : NULL, bound ? 1 : 0,
                           FUZZ_T0) != LR_OK)
        exit(1);
}

static void delta_seed(const char *name, uint8_t mode, const uint8_t *p,
                       size_t n);

/* The same blob with allocation failures: once at 1..4, from 1 on. */
static void
delta_oom_seeds(const char *name, const uint8_t *p, size_t n)
{
    static const uint8_t sel[5] = { 1, 2, 3, 4, 32 };
    char nm[128];
    for (int i = 0; i < 5; i++) {
        snprintf(nm, sizeof nm, "%s-oom%u", name, sel[i]);
        delta_seed(nm, (uint8_t)(sel[i] << 2), p, n);
    }
}

static void
delta_seed(const char *name, uint8_t mode, const uint8_t *p, size_t n)
{
    uint8_t *b = malloc(n + 1);
    b[0] = mode;
    if (n > 0)
        memcpy(b + 1, p, n);
    write_seed("delta_apply", name, b, n + 1);
    free(b);
}

static void
export_seed(const char *name, lr_index *ix, uint64_t since, int variants)
{
    lr_blob *b;
    if (lr_index_export_delta(ix, since, &b, NULL) != LR_OK)
        exit(1);
    const uint8_t *p = lr_blob_data(b);
    size_t n = lr_blob_size(b);
    char nm[128];
    delta_seed(name, 0, p, n);
    if (variants)
        delta_oom_seeds(name, p, n);
    if (variants) {
        snprintf(nm, sizeof nm, "%s-fix", name);
        delta_seed(nm, 1, p, n);
        /* truncated: the fixed-up checksum then covers the short body */
        snprintf(nm, sizeof nm, "%s-trunc1", name);
        delta_seed(nm, 1, p, n - 1);
        snprintf(nm, sizeof nm, "%s-trunc9", name);
        delta_seed(nm, 0, p, n - 9);
        snprintf(nm, sizeof nm, "%s-trunchdr", name);
        delta_seed(nm, 1, p, 40);
        /* bit flips in the header and the body */
        static const size_t offs[] = { 0, 4, 6, 8, 12, 16, 20, 24, 40, 48 };
        uint8_t *c = malloc(n);
        if (c == NULL)
            exit(1);
        for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
            if (offs[i] + 8 >= n)
                continue;
            memcpy(c, p, n);
            c[offs[i]] ^= offs[i] == 24 ? 0xff : 0x01;
            snprintf(nm, sizeof nm, "%s-flip%zu", name, offs[i]);
            delta_seed(nm, 1, c, n);
        }
        memcpy(c, p, n);
        c[n - 20 > 40 ? n - 20 : 40] ^= 0x80;
        snprintf(nm, sizeof nm, "%s-flipbody-raw", name);
        delta_seed(nm, 0, c, n);
        free(c);
    }
    lr_blob_destroy(b);
}

/* A crafted delta: nodes (key, parent+1 or 0), routes (id, node). */
struct craft {
    uint8_t b[4096];
    size_t n;
};

static void
craft_begin(struct craft *c, uint32_t B, uint32_t nn, uint32_t nr)
{
    memset(c->b, 0, FUZZ_DELTA_HEADER);
    memcpy(c->b, "LRDX", 4);
    lr__put_u16(c->b + 4, 2);
    lr__put_u32(c->b + 8, B);
    lr__put_u32(c->b + 12, nn);
    lr__put_u32(c->b + 16, nr);
    lr__put_u64(c->b + 32, 1);
    c->n = FUZZ_DELTA_HEADER;
}

static void
craft_varint(struct craft *c, uint32_t v)
{
    while (v >= 0x80) {
        c->b[c->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    c->b[c->n++] = (uint8_t)v;
}

static void
craft_node(struct craft *c, uint64_t key, uint32_t parent1)
{
    lr__put_u64(c->b + c->n, key);
    c->n += 8;
    craft_varint(c, parent1);
}

static void
craft_route(struct craft *c, uint32_t id, uint32_t node)
{
    lr__put_u32(c->b + c->n, id);
    c->n += 4;
    craft_varint(c, node);
    craft_varint(c, 3); /* age, ticks (version 2) */
}

static void
craft_end(struct craft *c, const char *name)
{
    c->n += 8;
    fuzz_delta_reseal(c->b, c->n);
    delta_seed(name, 0, c->b, c->n);
}

static void
gen_delta(void)
{
    /* the base index of the harness learned pattern 0 (24 tokens, block 4)
     * for instance 1: these keys are held there */
    uint32_t tok[64];
    uint64_t k0[16];
    fuzz_pattern_fill(tok, 40, 0, 0, ~0u);
    fuzz_keys(4, tok, 40, 0, k0, 16);

    lr_index *a = mk(4, 256, 16);
    lrn(a, 1, LR_TRUST_LOCAL, 0, 0, 24, ~0u, 8);
    lrn(a, 3, LR_TRUST_LOCAL, 0, 2, 32, ~0u, 0);
    export_seed("same-keys", a, 0, 1);
    uint64_t mark = lr_index_mark(a);
    lrn(a, 2, LR_TRUST_LOCAL, 0, 0, 40, 20, 12);
    lrn(a, 2, LR_TRUST_REMOTE, 0, 1, 40, ~0u, 0);
    export_seed("incremental", a, mark, 0);
    lr_index_destroy(a);

    a = mk(4, 256, 16);
    for (uint32_t i = 0; i < 6; i++)
        lrn(a, 10 + i, LR_TRUST_LOCAL, i & 1, i % 4, 16, ~0u, 0);
    export_seed("many-instances", a, 0, 0);
    lr_index_destroy(a);

    a = mk(4, 256, 16);
    lrn(a, 1, LR_TRUST_LOCAL, 0, 3, 280, ~0u, 100);
    export_seed("over-capacity", a, 0, 0);
    lr_index_destroy(a);

    a = mk(16, 256, 16);
    lrn(a, 1, LR_TRUST_LOCAL, 0, 0, 64, ~0u, 0);
    export_seed("block16", a, 0, 0);
    lr_index_destroy(a);

    a = mk(4, 256, 16);
    export_seed("empty-export", a, 0, 0);
    lrn(a, 7, LR_TRUST_LOCAL, 7, 3, 12, ~0u, 0);
    lrn(a, 2, LR_TRUST_LOCAL, 0, 2, 32, ~0u, 16);
    lrn(a, 1, LR_TRUST_LOCAL, 0, 1, 20, ~0u, 0);
    export_seed("base-like", a, 0, 1);
    lr_index_destroy(a);

    delta_seed("empty", 0, NULL, 0);
    delta_seed("empty-fix", 1, NULL, 0);

    struct craft c;
    /* a held key hung from another parent: contradiction */
    craft_begin(&c, 4, 2, 1);
    craft_node(&c, k0[3], 0);
    craft_node(&c, k0[4], 1);
    craft_route(&c, 1, 1);
    craft_end(&c, "craft-contradiction");
    /* the same key twice */
    craft_begin(&c, 4, 2, 1);
    craft_node(&c, 0x1234, 0);
    craft_node(&c, 0x1234, 1);
    craft_route(&c, 1, 1);
    craft_end(&c, "craft-duplicate-key");
    /* a parent that comes later */
    craft_begin(&c, 4, 2, 1);
    craft_node(&c, 0x1234, 2);
    craft_node(&c, 0x5678, 0);
    craft_route(&c, 1, 0);
    craft_end(&c, "craft-forward-parent");
    /* route to a node out of range, and to LR_INSTANCE_NONE */
    craft_begin(&c, 4, 1, 1);
    craft_node(&c, 0x1234, 0);
    craft_route(&c, 1, 1);
    craft_end(&c, "craft-route-range");
    craft_begin(&c, 4, 1, 1);
    craft_node(&c, 0x1234, 0);
    craft_route(&c, LR_INSTANCE_NONE, 0);
    craft_end(&c, "craft-route-none");
    /* an overlong varint */
    craft_begin(&c, 4, 1, 1);
    craft_node(&c, 0x1234, 0);
    lr__put_u32(c.b + c.n, 1);
    c.n += 4;
    c.b[c.n++] = 0x80;
    c.b[c.n++] = 0x00;
    craft_end(&c, "craft-overlong-varint");
    /* version 2, flags, reserved, since > mark */
    craft_begin(&c, 4, 0, 0);
    lr__put_u16(c.b + 4, 2);
    craft_end(&c, "craft-version2");
    craft_begin(&c, 4, 0, 0);
    lr__put_u16(c.b + 6, 1);
    craft_end(&c, "craft-flags");
    craft_begin(&c, 4, 0, 0);
    lr__put_u32(c.b + 20, 1);
    craft_end(&c, "craft-reserved");
    craft_begin(&c, 4, 0, 0);
    lr__put_u64(c.b + 24, 5);
    craft_end(&c, "craft-since-after-mark");
    /* counts larger than the body */
    craft_begin(&c, 4, 1000, 1000);
    craft_end(&c, "craft-huge-counts");
    /* a valid chain extending a held key, several instances, one route
     * per depth (trailing bytes check too) */
    craft_begin(&c, 4, 4, 5);
    craft_node(&c, k0[0], 0);
    craft_node(&c, k0[1], 1);
    craft_node(&c, k0[2], 2);
    craft_node(&c, 0xabcdef, 3);
    craft_route(&c, 2, 3);
    craft_route(&c, 5, 1);
    craft_route(&c, 5, 3);
    craft_route(&c, 1, 2);
    craft_route(&c, 2, 0);
    craft_end(&c, "craft-valid-extend");
    c.n -= 8;
    c.b[c.n++] = 0;
    craft_end(&c, "craft-trailing-byte");

    /* round-trip halves: mode, B index, capacity, count, [split], prompts */
    for (int s = 0; s < 12; s++) {
        struct enc e = { .n = 0 };
        uint8_t mode = (uint8_t)(2 + (s & 1));
        put_bytes(&e, &mode, 1);
        put(&e, 0, 3, rnd(0, 3));
        put(&e, 1, 256, s < 4 ? 256 : rnd(4, 128));
        uint32_t n = rnd(1, 12);
        put(&e, 1, 12, n);
        if (mode == 3)
            put(&e, 0, n, rnd(0, n));
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len = rnd(0, 96);
            put(&e, 0, 7, rnd(0, 7));
            put(&e, 0, 2, rnd(0, 4) == 0 ? rnd(1, 2) : 0);
            put(&e, 0, 3, rnd(0, 3));
            put(&e, 0, 15, rnd(0, 3) == 0 ? rnd(0, 15) : 0);
            put(&e, 0, 96, len);
            put(&e, 0, 127, rnd(0, 127));
            uint32_t nb = rnd(0, 2);
            put(&e, 0, 2, nb);
            for (uint32_t j = 0; j < nb; j++)
                put(&e, 0, len, rnd(0, len));
        }
        char name[32];
        snprintf(name, sizeof name, "roundtrip-%02d", s);
        write_seed("delta_apply", name, e.b, e.n);
    }
}

/* ---- policy_decide ------------------------------------------------------------------ */

/* The back of the input, written in take order: each value's least
 * significant byte ends up last (fuzz_dp_take_*()). */
struct back {
    uint8_t b[64];
    size_t n;
};

static void
put_back(struct back *k, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        k->b[k->n++] = (uint8_t)(v >> (8 * i));
}

static void
policy_seed(const char *name, int32_t policy, const lr_candidate *rows,
            uint32_t n, uint32_t prompt, const double *param, uint32_t np,
            int with_model)
{
    struct back k = { { 0 }, 0 };
    put_back(&k, (uint32_t)policy, 1);
    put_back(&k, n, 1);
    put_back(&k, prompt, 3);
    put_back(&k, 0x5eed0000u + (uint32_t)policy, 8);
    put_back(&k, 11, 4); /* round-robin cursor */
    put_back(&k, 16, 1);
    put_back(&k, 0, 2);
    put_back(&k, np, 1);
    put_back(&k, (uint64_t)with_model, 1);
    struct enc e = { { 0 }, 0 };
    put_bytes(&e, rows, n * sizeof rows[0]);
    put_bytes(&e, param, np * sizeof param[0]);
    for (size_t i = k.n; i-- > 0;)
        e.b[e.n++] = k.b[i];
    write_seed("policy_decide", name, e.b, e.n);
}

static void
gen_policy(void)
{
    lr_candidate rows[6];
    memset(rows, 0, sizeof rows);
    for (uint32_t i = 0; i < 6; i++) {
        lr_candidate *c = &rows[i];
        c->instance = 10 + i;
        c->cached_tokens = (i % 3) * 256;
        c->inflight = (i * 7) % 5;
        c->queued = c->inflight / 2;
        c->prefill_tokens = 1000u * i;
        c->queued_tokens = 1500u * i;
        c->prompt_tokens = 3000u * i;
        c->decode_tokens = 100u * i;
        c->kv_tokens = 4000u * i;
        c->running = i;
        c->waiting = i % 2;
        c->kv_use = 0.15 * i;
        c->rtt_ms = 37.0 * (i % 3);
        c->prefill_rate = i % 2 ? 8000 : 20000;
        c->stall_s = i == 4 ? 3.5 : 0;
        c->cached_age_s = i == 1 ? 2.0 : -1;
        c->instance_class = i % 3;
        c->prefix_caching = i != 5;
        c->ring_rank = (i + 2) % 6 < 3 ? (i + 2) % 6 + 1 : 0;
        c->tree_blocks = 64u * ((i * 5) % 6);
        /* calibrated rows but two (adaptive falls back to prefill_rate) */
        c->ttft_s_per_token = i < 4 ? 1.0 / (8000.0 + 2000.0 * i) : 0;
        c->ttft_base_s = i < 4 ? 0.01 * i : 0;
        c->ttft_s_per_decoding = 0.002 * (i % 3);
        c->prefill_tokens_avg = 800.0 * i;
        c->route_rate = 0.5 * (i + 1);
    }
    double param[LR__PARAM_COUNT];
    for (int k = 0; k < LR__PARAM_COUNT; k++)
        param[k] = lr_param_bounds(k).def;
    char name[64];
    for (int32_t p = 0; p < LR__POLICY_COUNT; p++) {
        snprintf(name, sizeof name, "%s", lr_policy_name(p));
        policy_seed(name, p, rows, 6, 512, NULL, 0, p == LR_POLICY_LODESTAR);
        snprintf(name, sizeof name, "%s-params", lr_policy_name(p));
        policy_seed(name, p, rows, 6, 768, param, LR__PARAM_COUNT, 1);
    }
    param[LR_PARAM_LODESTAR_CANDIDATES] = 2;
    param[LR_PARAM_LODESTAR_OOD] = 0;
    param[LR_PARAM_DYNAMO_TEMPERATURE] = 1;
    policy_seed("lodestar-pod", LR_POLICY_LODESTAR, rows, 6, 512, param,
                LR__PARAM_COUNT, 1);
    policy_seed("dynamo-sampled", LR_POLICY_DYNAMO, rows, 6, 512, param,
                LR__PARAM_COUNT, 0);
    param[LR_PARAM_ADAPTIVE_TIE_S] = 0.5; /* a wide band: the draw */
    param[LR_PARAM_ADAPTIVE_WORK_WEIGHT] = 100;
    policy_seed("adaptive-tie-band", LR_POLICY_ADAPTIVE, rows, 6, 512, param,
                LR__PARAM_COUNT, 0);
    param[LR_PARAM_ADAPTIVE_TIE_S] = 0.002;
    param[LR_PARAM_ADAPTIVE_WORK_WEIGHT] = 3;
    policy_seed("one-row", LR_POLICY_PREFIX_CACHE_AND_LOAD, rows, 1, 512, NULL,
                0, 0);
    /* bad tables and parameters: clear statuses */
    policy_seed("cached-past-prompt", LR_POLICY_MIN_TTFT, rows, 6, 100, NULL, 0,
                0);
    param[LR_PARAM_BOUNDED_LOAD] = 0.5;
    policy_seed("param-out-of-range", LR_POLICY_CONSISTENT_HASH, rows, 6, 512,
                param, LR__PARAM_COUNT, 0);
    rows[2].prefill_rate = 0;
    policy_seed("zero-rate", LR_POLICY_PREBLE, rows, 6, 512, NULL, 0, 0);
    policy_seed("adaptive-zero-rate", LR_POLICY_ADAPTIVE, rows, 6, 512, NULL, 0,
                0);
    rows[2].prefill_rate = 8000;
    rows[3].ttft_s_per_token = -1; /* a bad calibration: LR_EINVAL */
    policy_seed("adaptive-bad-calibration", LR_POLICY_ADAPTIVE, rows, 6, 512,
                NULL, 0, 0);
    policy_seed("unknown-policy", LR__POLICY_COUNT, rows, 6, 512, NULL, 0, 0);
    rows[3].ttft_s_per_token = 0;
    /* a disaggregated fleet: three rows that decode, three prefill rows
     * in two racks and two regions; every policy on it, and an order the
     * library refuses */
    for (uint32_t i = 0; i < 6; i++) {
        rows[i].role = i < 3 ? (i == 0 ? LR_ROLE_BOTH : LR_ROLE_DECODE)
                             : LR_ROLE_PREFILL;
        rows[i].node = i;
        rows[i].rack = 1 + i % 2;
        rows[i].region = 1 + (i == 5);
    }
    for (int32_t p = 0; p < LR__POLICY_COUNT; p++) {
        snprintf(name, sizeof name, "pd-%s", lr_policy_name(p));
        policy_seed(name, p, rows, 6, 768, NULL, 0, p == LR_POLICY_LODESTAR);
    }
    for (int k = 0; k < LR__PARAM_COUNT; k++)
        param[k] = lr_param_bounds(k).def;
    param[LR_PARAM_PD_PREFILL_POLICY] = LR_POLICY_SGLANG_CACHE_AWARE;
    param[LR_PARAM_PD_MIN_UNCACHED] = 0;
    param[LR_PARAM_PD_LOCAL_MAX_TOKENS] = 0;
    policy_seed("pd-prefill-policy", LR_POLICY_LEAST_LOAD, rows, 6, 768, param,
                LR__PARAM_COUNT, 0);
    rows[1].role = LR_ROLE_PREFILL; /* a prefill row among the decoders */
    policy_seed("pd-out-of-order", LR_POLICY_ADAPTIVE, rows, 6, 768, NULL, 0,
                0);
    write_seed("policy_decide", "empty", NULL, 0);
}

/* ---- text_tokens ------------------------------------------------------------------- */

static void
text_seed(const char *name, const char *text, size_t len, uint32_t width,
          uint32_t cut)
{
    uint8_t b[512];
    memcpy(b, text, len);
    /* parameters from the back: width is the last byte, then cut */
    b[len] = (uint8_t)(cut >> 8);
    b[len + 1] = (uint8_t)cut;
    b[len + 2] = (uint8_t)width;
    write_seed("text_tokens", name, b, len + 3);
}

static void
gen_text(void)
{
    static const char en[] =
        "The quick brown fox jumps over the lazy dog. System: you are a "
        "helpful assistant. User: summarise the following document.";
    text_seed("empty", "", 0, 4, 0);
    text_seed("english-w4", en, sizeof en - 1, 4, 7);
    text_seed("english-w1", en, sizeof en - 1, 1, 100);
    text_seed("english-w3-cut", en, sizeof en - 1, 3, 17);
    text_seed("english-w64", en, sizeof en - 1, 64, 1);
    text_seed("english-w0", en, sizeof en - 1, 0, 1);
    text_seed("english-w65", en, sizeof en - 1, 65, 1);
    text_seed("short-last-chunk", "abcdefghij", 10, 4, 3);
    text_seed("binary", "\0\xff\0\xff\x01\x02\x03", 7, 2, 0xffff);
    write_seed("text_tokens", "no-params", NULL, 0);
}

/* ---- load_ops -------------------------------------------------------------------- */

/* Encoders in the order fuzz_load_ops.c decodes. Instance choices index
 * {0..7, 1000, LR_INSTANCE_NONE}; LD_ALT_SAME is "the instance itself",
 * LD_ALT_NONE no alternative. */
enum {
    LD_I1000 = 8,
    LD_INONE = 9,
    LD_ALT_SAME = 10,
    LD_ALT_NONE = 11
};

/* oom: 0 none; n > 0 allocation n fails once; n < 0 allocation -n and
 * every one after */
static void
ld_header(struct enc *e, uint32_t max_inst, uint32_t max_req, uint32_t alpha,
          int oom, uint32_t mask)
{
    e->n = 0;
    put(e, 1, 8, max_inst);
    put(e, 1, 64, max_req);
    put(e, 0, 3, alpha);
    put_oom(e, oom, 8);
    put(e, 0, 255, mask);
}

/* id: 0..11 the pool, 12 UINT64_MAX, 13 2^63, 14 the k-th in flight */
static void
ld_id(struct enc *e, uint32_t c, uint32_t k)
{
    put(e, 0, 15, c);
    if (c == 14)
        put(e, 0, 63, k);
    else if (c == 15) {
        put(e, 0, UINT32_MAX, k);
        put(e, 0, UINT32_MAX, k ^ 0x5a5a5a5au);
    }
}

/* tokens: kind 0 zero, 1 v in 0..255, 2 v in 0..65535, 3 UINT32_MAX - v */
static void
ld_tokens(struct enc *e, uint32_t kind, uint32_t v)
{
    put(e, 0, 3, kind);
    if (kind == 1)
        put(e, 0, 255, v);
    else if (kind == 2)
        put(e, 0, 65535, v);
    else if (kind == 3)
        put(e, 0, 1, v);
}

static uint32_t
ld_tok_value(uint32_t kind, uint32_t v)
{
    return kind == 0 ? 0 : kind == 3 ? UINT32_MAX - v : v;
}

/* cached: kind 0 none, 1 all, 2 one too many, 3 v in 0..prompt */
static void
ld_cached(struct enc *e, uint32_t kind, uint32_t v, uint32_t prompt)
{
    put(e, 0, 3, kind);
    if (kind == 3)
        put(e, 0, prompt, v);
}

/* time: 0 now, 1 now - dt, 2-3 now += dt */
static void
ld_time(struct enc *e, uint32_t c, uint32_t dt)
{
    put(e, 0, 3, c);
    if (c != 0)
        put(e, 0, 1000000, dt);
}

struct ld_disp {
    uint32_t id, k, inst, alt, pkind, pv, ckind, cv, akind, av, okind, ov, tc,
        dt, size;
};

static void
ld_dispatch(struct enc *e, const struct ld_disp *d)
{
    put(e, 0, 12, 0);
    ld_id(e, d->id, d->k);
    put(e, 0, 9, d->inst);
    put(e, 0, 11, d->alt);
    ld_tokens(e, d->pkind, d->pv);
    uint32_t prompt = ld_tok_value(d->pkind, d->pv);
    ld_cached(e, d->ckind, d->cv, prompt);
    ld_cached(e, d->akind, d->av, prompt);
    ld_tokens(e, d->okind, d->ov);
    ld_time(e, d->tc, d->dt);
    put(e, 0, 7, d->size);
}

/* a plain dispatch: prompt p (< 65536), cached c, output o */
static void
ld_disp(struct enc *e, uint32_t id, uint32_t inst, uint32_t alt, uint32_t p,
        uint32_t c, uint32_t o)
{
    struct ld_disp d = { .id = id,
                         .inst = inst,
                         .alt = alt,
                         .pkind = 2,
                         .pv = p,
                         .ckind = 3,
                         .cv = c,
                         .akind = 0,
                         .okind = 2,
                         .ov = o,
                         .tc = 2,
                         .dt = 1000 };
    ld_dispatch(e, &d);
}

static void
ld_first(struct enc *e, uint32_t id, uint32_t tc, uint32_t dt)
{
    put(e, 0, 12, 3);
    ld_id(e, id, 0);
    ld_time(e, tc, dt);
}

static void
ld_complete(struct enc *e, uint32_t id, uint32_t out)
{
    put(e, 0, 12, 4);
    ld_id(e, id, 0);
    ld_tokens(e, 1, out);
}

static void
ld_fail(struct enc *e, uint32_t id)
{
    put(e, 0, 12, 5);
    ld_id(e, id, 0);
}

static void
ld_move(struct enc *e, uint32_t id, uint32_t to, uint32_t ckind, uint32_t cv,
        uint32_t prompt)
{
    put(e, 0, 12, 6);
    ld_id(e, id, 0);
    put(e, 0, 9, to);
    ld_cached(e, ckind, cv, prompt);
}

static void
ld_add(struct enc *e, uint32_t inst, uint32_t cls, uint32_t pc)
{
    put(e, 0, 12, 7);
    put(e, 0, 9, inst);
    put(e, 0, LR_LOAD_MAX_CLASSES + 1, cls);
    put(e, 0, 3, pc);
}

static void
ld_remove(struct enc *e, uint32_t inst)
{
    put(e, 0, 12, 8);
    put(e, 0, 9, inst);
}

/* kv: index into {0, .5, 1, -.1, 1.5, NaN, inf, 1e-9}; size 1 v1, 2 short */
static void
ld_stats(struct enc *e, uint32_t inst, uint32_t running, uint32_t kv,
         uint32_t tc, uint32_t dt, uint32_t size)
{
    put(e, 0, 12, 9);
    put(e, 0, 9, inst);
    put(e, 0, 255, running);
    put(e, 0, 255, running / 2);
    put(e, 0, 7, kv);
    ld_time(e, tc, dt);
    put(e, 0, 7, size);
}

/* kind: 0 zero, 1 v, 3 max, 4 max + 1, 5 UINT64_MAX */
static void
ld_rtt(struct enc *e, uint32_t inst, uint32_t kind, uint32_t v)
{
    put(e, 0, 12, 10);
    put(e, 0, 9, inst);
    put(e, 0, 5, kind);
    if (kind == 1)
        put(e, 0, 0xffffff, v);
    else if (kind == 2) {
        put(e, 0, UINT32_MAX, v);
        put(e, 0, UINT32_MAX, 0);
    }
}

static void
ld_time_op(struct enc *e, uint32_t dt)
{
    put(e, 0, 12, 11);
    put(e, 0, 0xffffff, dt);
}

/* size: 0 zero, 1 short, 2 v1, 3 larger */
static void
ld_query(struct enc *e, uint32_t inst, uint32_t id, uint32_t size,
         uint32_t stop)
{
    put(e, 0, 12, 12);
    put(e, 0, 9, inst);
    ld_id(e, id, 0);
    put(e, 0, 3, size);
    put(e, 0, 4, stop);
}

static void
gen_load(void)
{
    struct enc e;
    const char *T = "load_ops";

    /* every lifecycle: first token then complete, complete without first
     * token, fail queued, fail decoding, repeated first token, events
     * after the end */
    ld_header(&e, 4, 16, 0, 0, 0x0f);
    ld_disp(&e, 0, 0, LD_ALT_NONE, 900, 512, 130);
    ld_query(&e, 0, 0, 2, 0);
    ld_first(&e, 0, 2, 500);
    ld_first(&e, 0, 2, 500);
    ld_query(&e, 0, 0, 3, 0);
    ld_complete(&e, 0, 130);
    ld_first(&e, 0, 0, 0);
    ld_complete(&e, 0, 1);
    ld_disp(&e, 1, 1, LD_ALT_NONE, 300, 100, 50);
    ld_disp(&e, 2, 1, LD_ALT_NONE, 200, 0, 20);
    ld_complete(&e, 1, 50);
    ld_fail(&e, 2);
    ld_disp(&e, 3, 2, 0, 64, 32, 16);
    ld_disp(&e, 4, 2, 1, 10, 0, 4);
    ld_first(&e, 3, 1, 5);
    ld_fail(&e, 3);
    ld_fail(&e, 3);
    ld_query(&e, 2, 4, 2, 1);
    ld_disp(&e, 3, 2, LD_ALT_NONE, 1, 1, 0);
    /* first tokens out of order: the latest stays */
    ld_disp(&e, 5, 3, LD_ALT_NONE, 50, 0, 5);
    ld_disp(&e, 6, 3, LD_ALT_NONE, 60, 0, 6);
    ld_first(&e, 6, 2, 700);
    ld_first(&e, 5, 1, 300);
    ld_query(&e, 3, 5, 3, 0);
    write_seed(T, "lifecycle", e.b, e.n);

    /* moves: queued only, the old instance becomes the alternative */
    ld_header(&e, 4, 8, 2, 0, 0x07);
    ld_disp(&e, 5, 0, 1, 1000, 400, 100);
    ld_disp(&e, 6, 0, LD_ALT_NONE, 300, 0, 30);
    ld_move(&e, 5, 1, 3, 900, 1000);
    ld_query(&e, 1, 5, 2, 0);
    ld_move(&e, 5, 1, 0, 0, 1000); /* same instance */
    ld_move(&e, 5, 3, 0, 0, 1000); /* not added */
    ld_move(&e, 5, 0, 2, 0, 1000); /* cached > prompt */
    ld_move(&e, 5, 0, 0, 0, 1000);
    ld_move(&e, 5, 2, 1, 0, 1000);
    ld_first(&e, 5, 2, 10);
    ld_move(&e, 5, 0, 0, 0, 1000); /* ESTATE */
    ld_query(&e, 2, 5, 2, 0);
    ld_remove(&e, 0);
    ld_query(&e, 2, 5, 2, 0);
    ld_move(&e, 6, 1, 0, 0, 300); /* dropped with instance 0 */
    write_seed(T, "move", e.b, e.n);

    /* every refusal of dispatch */
    ld_header(&e, 3, 2, 0, 0, 0x03);
    struct ld_disp d = { .id = 7,
                         .inst = 0,
                         .alt = LD_ALT_NONE,
                         .pkind = 1,
                         .pv = 100,
                         .ckind = 2,
                         .okind = 1,
                         .ov = 5,
                         .tc = 2,
                         .dt = 1 };
    ld_dispatch(&e, &d); /* cached > prompt */
    d.ckind = 0;
    d.alt = LD_ALT_SAME;
    ld_dispatch(&e, &d); /* alt == instance */
    d.alt = 1;
    d.akind = 2;
    ld_dispatch(&e, &d); /* alt cached > prompt */
    d.akind = 1;
    d.alt = 2;
    ld_dispatch(&e, &d); /* alt not added */
    d.alt = LD_ALT_NONE;
    d.inst = 2;
    ld_dispatch(&e, &d); /* instance not added */
    d.inst = LD_I1000;
    ld_dispatch(&e, &d);
    d.inst = LD_INONE;
    ld_dispatch(&e, &d);
    d.inst = 0;
    d.size = 2;
    ld_dispatch(&e, &d); /* struct too small */
    d.size = 1;
    ld_dispatch(&e, &d); /* v1: fine */
    ld_dispatch(&e, &d); /* duplicate */
    d.id = 12;
    d.size = 0;
    d.pkind = 3;
    d.pv = 0;
    d.okind = 3;
    d.ov = 1;
    d.ckind = 1;
    ld_dispatch(&e, &d); /* UINT32_MAX prompt and output */
    d.id = 13;
    ld_dispatch(&e, &d); /* ELIMIT */
    ld_query(&e, 0, 12, 2, 0);
    ld_first(&e, 12, 3, 7);
    ld_query(&e, 0, 12, 2, 0);
    ld_complete(&e, 7, 0);
    ld_dispatch(&e, &d);
    write_seed(T, "dispatch-refusals", e.b, e.n);

    /* instances: bounds, duplicates, removal with requests, re-adding */
    ld_header(&e, 5, 32, 0, 0, 0x01);
    ld_add(&e, 1, 3, 1);
    ld_add(&e, 1, 3, 1);                       /* EEXIST */
    ld_add(&e, 2, LR_LOAD_MAX_CLASSES, 0);     /* bad class */
    ld_add(&e, 2, LR_LOAD_MAX_CLASSES + 1, 0); /* UINT32_MAX */
    ld_add(&e, 2, 0, 2);                       /* bad prefix_caching */
    ld_add(&e, 2, 0, 3);                       /* -1 */
    ld_add(&e, 5, 0, 0);                       /* ELIMIT */
    ld_add(&e, LD_I1000, 0, 0);
    ld_add(&e, LD_INONE, 0, 0);
    ld_add(&e, 4, 63, 0);
    for (uint32_t i = 0; i < 10; i++)
        ld_disp(&e, i,
                i % 3 == 0   ? 0
                : i % 3 == 1 ? 1
                             : 4,
                i % 2 ? LD_ALT_NONE : (i % 3 == 0 ? 1 : 0), 100 + i, i, i);
    ld_first(&e, 0, 2, 3);
    ld_first(&e, 1, 2, 3);
    ld_remove(&e, 1);
    ld_remove(&e, 1);
    ld_first(&e, 1, 2, 3);
    ld_complete(&e, 4, 0);
    ld_query(&e, 0, 0, 2, 0);
    ld_query(&e, 4, 2, 2, 2);
    ld_add(&e, 1, 5, 0);
    ld_query(&e, 1, 1, 3, 0);
    ld_remove(&e, 0);
    ld_remove(&e, 4);
    ld_remove(&e, LD_INONE);
    write_seed(T, "instances", e.b, e.n);

    /* Regression: a removed instance added again under its id is a new
     * one; it must not come back as the alternative (with the old cached
     * tokens) of requests dispatched before the removal. */
    ld_header(&e, 4, 8, 0, 0, 0x07);
    d = (struct ld_disp){ .id = 0,
                          .inst = 0,
                          .alt = 1,
                          .pkind = 1,
                          .pv = 200,
                          .ckind = 0,
                          .akind = 1,
                          .okind = 1,
                          .ov = 10,
                          .tc = 2,
                          .dt = 1 };
    ld_dispatch(&e, &d);
    ld_disp(&e, 1, 2, LD_ALT_NONE, 100, 0, 1);
    ld_move(&e, 1, 1, 0, 0, 100); /* 1 on instance 1, alternative 2 */
    ld_remove(&e, 1);
    ld_remove(&e, 2);
    ld_add(&e, 1, 0, 1);
    ld_add(&e, 2, 0, 1);
    ld_query(&e, 0, 0, 2, 0);
    ld_disp(&e, 2, 1, LD_ALT_NONE, 100, 0, 1);
    ld_move(&e, 2, 2, 0, 0, 100);
    ld_query(&e, 2, 2, 2, 0);
    write_seed(T, "readded-alternative", e.b, e.n);

    /* telemetry: stats in and out of order, bad values, RTT EWMA */
    ld_header(&e, 2, 4, 2, 0, 0x03);
    ld_stats(&e, 0, 10, 1, 2, 1000, 0);
    ld_stats(&e, 0, 11, 2, 1, 500, 0);   /* older: ignored */
    ld_stats(&e, 0, 12, 0, 0, 0, 1);     /* same time, v1 */
    ld_stats(&e, 0, 13, 5, 2, 10, 0);    /* NaN */
    ld_stats(&e, 0, 14, 3, 2, 10, 0);    /* negative */
    ld_stats(&e, 0, 15, 4, 2, 10, 0);    /* > 1 */
    ld_stats(&e, 0, 16, 6, 2, 10, 0);    /* inf */
    ld_stats(&e, 0, 17, 7, 2, 10, 2);    /* short struct */
    ld_stats(&e, 2, 18, 1, 2, 10, 0);    /* not tracked */
    ld_stats(&e, 1, 19, 7, 1, 99999, 0); /* first scrape, in the past */
    ld_rtt(&e, 0, 1, 1000);
    ld_rtt(&e, 0, 1, 2000);
    ld_rtt(&e, 0, 0, 0);
    ld_rtt(&e, 0, 3, 0);
    ld_rtt(&e, 0, 4, 0);
    ld_rtt(&e, 0, 5, 0);
    ld_rtt(&e, 1, 2, 123456789);
    ld_rtt(&e, LD_I1000, 1, 5);
    ld_query(&e, 0, 0, 0, 0);
    ld_query(&e, 0, 0, 1, 0);
    ld_query(&e, 0, 0, 2, 0);
    ld_query(&e, 1, 0, 3, 0);
    ld_remove(&e, 0);
    ld_add(&e, 0, 1, 1);
    ld_query(&e, 0, 0, 3, 0);
    write_seed(T, "telemetry", e.b, e.n);

    /* allocation failures at create, once and from then on */
    static const int ooms[6] = { 1, 2, 3, 4, -1, -3 };
    for (int k = 0; k < 6; k++) {
        char name[32];
        ld_header(&e, 2, 4, 0, ooms[k], 0x03);
        ld_disp(&e, 0, 0, 1, 10, 5, 1);
        ld_first(&e, 0, 2, 1);
        ld_disp(&e, 1, 1, LD_ALT_NONE, 10, 5, 1);
        ld_query(&e, 0, 0, 2, 0);
        snprintf(name, sizeof name, "oom-%d", ooms[k]);
        write_seed(T, name, e.b, e.n);
    }

    /* pseudo-random streams, mostly well-formed */
    for (int s = 0; s < 16; s++) {
        char name[32];
        ld_header(&e, rnd(1, 8), rnd(1, 64), rnd(0, 3), 0, rnd(0, 255));
        int ops = (int)rnd(16, 120);
        for (int i = 0; i < ops; i++) {
            uint32_t op = rnd(0, 12);
            uint32_t id = rnd(0, 14);
            switch (op) {
            case 0:
            case 1:
            case 2: {
                uint32_t p = rnd(0, 5000);
                ld_disp(&e, rnd(0, 11), rnd(0, 9),
                        rnd(0, 3) ? LD_ALT_NONE : rnd(0, 11), p, rnd(0, p),
                        rnd(0, 500));
                break;
            }
            case 3:
                ld_first(&e, id, rnd(0, 3), rnd(0, 1000000));
                break;
            case 4:
                ld_complete(&e, id, rnd(0, 255));
                break;
            case 5:
                ld_fail(&e, id);
                break;
            case 6:
                ld_move(&e, rnd(0, 11), rnd(0, 9), rnd(0, 2), 0, 0);
                break;
            case 7:
                ld_add(&e, rnd(0, 9), rnd(0, 65), rnd(0, 3));
                break;
            case 8:
                ld_remove(&e, rnd(0, 9));
                break;
            case 9:
                ld_stats(&e, rnd(0, 9), rnd(0, 255), rnd(0, 7), rnd(0, 3),
                         rnd(0, 1000000), rnd(0, 7));
                break;
            case 10:
                ld_rtt(&e, rnd(0, 9), rnd(0, 5), rnd(0, 0xffffff));
                break;
            case 11:
                ld_time_op(&e, rnd(0, 0xffffff));
                break;
            default:
                ld_query(&e, rnd(0, 9), id, rnd(0, 3), rnd(0, 4));
                break;
            }
        }
        snprintf(name, sizeof name, "random-%02d", s);
        write_seed(T, name, e.b, e.n);
    }
}

/* ---- router_ops ------------------------------------------------------------------ */

/* Encoders in the order fuzz_router_ops.c decodes (see its header). */
enum {
    RO_ADD = 0,
    RO_DRAIN = 1,
    RO_REMOVE = 2,
    RO_ROUTE = 3,
    RO_POLICY = 7,
    RO_PARAM = 8,
    RO_STATS = 9,
    RO_RTT = 10,
    RO_FIRST = 11,
    RO_COMPLETE = 12,
    RO_FAIL = 13,
    RO_PLAN = 14,
    RO_MOVE = 15,
    RO_KV = 16,
    RO_DELTA = 17,
    RO_TIME = 18,
    RO_OBSERVE = 19,
    RO_LEARN = 20,
    RO_ADAPTERS = 21,
    RO_PREFILL_DONE = 22,
    RO_QUERY = 23,
    RO_LAST = RO_QUERY /* ops are 0 .. RO_LAST */
};
/* add_instance's role choices (fuzz_router_ops.c's roles[]) */
#define RO_BOTH 0u
#define RO_PREFILL 6u
#define RO_DECODE 11u
#define RO_ROLE3 14u   /* 3: LR_EINVAL */
#define RO_ROLE_M1 15u /* -1: LR_EINVAL */
/* instance choices index {0..7, 1000, LR_INSTANCE_NONE} */
#define RO_I1000 8u
#define RO_INONE 9u
/* request id choices: 0..7 the pool (ids 1..8), 8 zero, 9 UINT64_MAX,
 * RO_INFL the k-th in flight, RO_FRESH a new id */
#define RO_INFL 10u
#define RO_FRESH 14u

struct ro {
    struct enc e;
    bool blob; /* an export succeeded: delta kinds 1..3 do not export */
};

/* oom: 0 none; n > 0 allocation n fails once; n < 0 allocation -n and
 * every one after; policy: any but lodestar; fleet: the initial
 * instances' roles (0, 1 all both; 2 the odd ones prefill; 3 the odd ones
 * prefill, the even ones decode, placed) */
static void
ro_header_fleet(struct ro *s, uint32_t seed, uint32_t max_inst,
                uint32_t max_req, uint32_t bidx, uint32_t cap, uint32_t ttl,
                uint32_t policy, uint32_t vnodes, int oom, uint32_t names,
                uint32_t fleet)
{
    struct enc *e = &s->e;
    e->n = 0;
    s->blob = false;
    put(e, 0, 255, seed);
    put(e, 1, 8, max_inst);
    put(e, 1, 48, max_req);
    put(e, 0, 3, bidx);
    put(e, 8, 512, cap);
    put(e, 0, 3, ttl);
    if (policy == LR_POLICY_LODESTAR) {
        fprintf(stderr, "router_ops: no lodestar in the header\n");
        exit(1);
    }
    put(e, 0, LR__POLICY_COUNT - 2,
        policy > LR_POLICY_LODESTAR ? policy - 1 : policy);
    put(e, 1, 64, vnodes);
    put_oom(e, oom, 256);
    put(e, 0, 255, names);
    put(e, 0, 3, fleet);
}

static void
ro_header(struct ro *s, uint32_t seed, uint32_t max_inst, uint32_t max_req,
          uint32_t bidx, uint32_t cap, uint32_t ttl, uint32_t policy,
          uint32_t vnodes, int oom, uint32_t names)
{
    ro_header_fleet(s, seed, max_inst, max_req, bidx, cap, ttl, policy, vnodes,
                    oom, names, 0);
}

static void
ro_op(struct ro *s, uint32_t op)
{
    put(&s->e, 0, RO_LAST, op);
}

static void
ro_id(struct ro *s, uint32_t c, uint32_t k)
{
    put(&s->e, 0, 15, c);
    if (c >= RO_INFL && c < RO_FRESH)
        put(&s->e, 0, 63, k);
}

/* The whole of add_instance: cls {0,1,3,63,64}; pc {1,1,0,2}; rtt {0,
 * 1 ms, max, max+1}; size 0 too small, 1 0.2's (no role), else current;
 * models mv (0 none, 4 {m0}, 5 {m1}, 6 {m0, m1}, 7 {m2}); slots sv {0, 1,
 * max, max + 1}; role RO_BOTH, RO_PREFILL, RO_DECODE, RO_ROLE3,
 * RO_ROLE_M1; placement node | rack << 2 | region << 4 (0..3 each). */
static void
ro_add_full(struct ro *s, uint32_t name, uint32_t cls, uint32_t pc,
            uint32_t rtt, uint32_t size, uint32_t mv, uint32_t sv,
            uint32_t role, uint32_t place)
{
    ro_op(s, RO_ADD);
    put(&s->e, 0, 9, name);
    put(&s->e, 0, 4, cls);
    put(&s->e, 0, 3, pc);
    put(&s->e, 0, 3, rtt);
    put(&s->e, 0, 15, size);
    put(&s->e, 0, 9, mv);
    put(&s->e, 0, 3, sv);
    put(&s->e, 0, 15, role);
    put(&s->e, 0, 63, place);
}

static void
ro_add(struct ro *s, uint32_t name, uint32_t cls, uint32_t pc, uint32_t rtt,
       bool small)
{
    ro_add_full(s, name, cls, pc, rtt, small ? 0 : 5, 0, 0, RO_BOTH, 0);
}

/* An instance serving models mv (4 {m0}, 5 {m1}, 6 {m0, m1}, 7 {m2}) with
 * slots sv ({0, 1, max, max + 1}). */
static void
ro_add_models(struct ro *s, uint32_t name, uint32_t mv, uint32_t sv)
{
    ro_add_full(s, name, 0, 0, 1, 5, mv, sv, RO_BOTH, 0);
}

/* An instance of a role, at a placement, serving models mv. */
static void
ro_add_role(struct ro *s, uint32_t name, uint32_t role, uint32_t place,
            uint32_t mv)
{
    ro_add_full(s, name, 0, 0, 1, 5, mv, 0, role, place);
}

/* dv: {0, 1, 1, 2} */
static void
ro_drain(struct ro *s, uint32_t inst, uint32_t dv)
{
    ro_op(s, RO_DRAIN);
    put(&s->e, 0, 9, inst);
    put(&s->e, 0, 3, dv);
}

static void
ro_remove(struct ro *s, uint32_t inst)
{
    ro_op(s, RO_REMOVE);
    put(&s->e, 0, 9, inst);
}

struct ro_req {
    uint32_t idc, k;
    uint32_t pattern, start, len, tweak, salt;
    uint32_t nb, b[2];
    uint32_t flags; /* LR_ROUTE_* | 8 (invalid) */
    uint32_t sess;  /* 0,1: none; 2: has_session; 3: invalid */
    uint32_t session;
    uint32_t outc, outv; /* {0, outv, 65535, UINT32_MAX} */
    uint32_t capv;       /* scores: {none, 1, enough, NULL with enough} */
    uint32_t variant;    /* 0 NULL tokens, 1/2 small struct, 3 a 0.2
                            decision, else plain */
    uint32_t model;      /* 0 none, 5..8 m0..m3, 9 too long */
    uint32_t adapter;    /* 0 none, 4 a0, 5 a1, 6 "", 7 too long */
    uint32_t mm, mo, ml; /* multimodal inputs: 0 none, 5 one, 6 two, 7
                            two overlapping; at offset mo, ml tokens */
};

static struct ro_req
ro_rq(uint32_t pattern, uint32_t len, uint32_t tweak)
{
    struct ro_req q = { .idc = RO_FRESH,
                        .pattern = pattern,
                        .len = len,
                        .tweak = tweak,
                        .capv = 2,
                        .variant = 7,
                        .outc = 1,
                        .outv = 32 };
    return q;
}

static void
ro_route(struct ro *s, const struct ro_req *q)
{
    struct enc *e = &s->e;
    ro_op(s, RO_ROUTE);
    ro_id(s, q->idc, q->k);
    put(e, 0, 3, q->pattern);
    put(e, 0, 3, q->start);
    put(e, 0, 96, q->len);
    put(e, 0, 255, q->tweak);
    put(e, 0, 1, q->salt);
    put(e, 0, 2, q->nb);
    for (uint32_t i = 0; i < q->nb; i++)
        put(e, 0, q->len + 1, q->b[i]);
    put(e, 0, 15, q->flags);
    put(e, 0, 3, q->sess);
    put(e, 0, 7, q->session);
    put(e, 0, 3, q->outc);
    if (q->outc == 1)
        put(e, 0, 255, q->outv);
    put(e, 0, 3, q->capv);
    put(e, 0, 15, q->variant);
    put(e, 0, 9, q->model);
    put(e, 0, 7, q->adapter);
    put(e, 0, 7, q->mm);
    put(e, 0, 96, q->mo);
    put(e, 0, 33, q->ml); /* 0 .. 2 x block + 1: one byte */
}

/* c: any policy id, LR__POLICY_COUNT out of range */
static void
ro_policy(struct ro *s, uint32_t c)
{
    ro_op(s, RO_POLICY);
    put(&s->e, 0, LR__POLICY_COUNT, c);
}

/* vc: 0 lo, 1 hi, 2 default, 3 below, 4 above, 5 NaN, 6 inf, 7 -inf,
 * 8 -0, 9 lo + 0.5, 10 lo + frac % 64, 11 lo + (hi - lo) x frac / 255 */
static void
ro_param(struct ro *s, uint32_t key, uint32_t vc, uint32_t frac)
{
    ro_op(s, RO_PARAM);
    put(&s->e, 0, LR__PARAM_COUNT + 1, key);
    put(&s->e, 0, 11, vc);
    put(&s->e, 0, 255, frac);
}

/* counts {0,3,1000,max}; kv {0,.5,1,-0,-.1,1+,NaN,inf}; time {0, now,
 * now-1s, now+1s, max} */
static void
ro_stats(struct ro *s, uint32_t inst, uint32_t run, uint32_t wait, uint32_t kv,
         uint32_t tc, bool small)
{
    ro_op(s, RO_STATS);
    put(&s->e, 0, 9, inst);
    put(&s->e, 0, 3, run);
    put(&s->e, 0, 3, wait);
    put(&s->e, 0, 7, kv);
    put(&s->e, 0, 4, tc);
    put(&s->e, 0, 15, small ? 0 : 3);
}

/* rc: {0, 1, 1 ms, max, max+1, UINT64_MAX} */
static void
ro_rtt(struct ro *s, uint32_t inst, uint32_t rc)
{
    ro_op(s, RO_RTT);
    put(&s->e, 0, 9, inst);
    put(&s->e, 0, 5, rc);
}

/* kind: 0 first_token, 1 complete, 2 fail */
static void
ro_event(struct ro *s, uint32_t kind, uint32_t idc, uint32_t k)
{
    ro_op(s, RO_FIRST + kind);
    ro_id(s, idc, k);
    put(&s->e, 0, 255, 40);
}

/* cap 0..8, 9: NULL with a capacity; mask: the moves carried out */
static void
ro_plan(struct ro *s, uint32_t cap, uint32_t mask)
{
    ro_op(s, RO_PLAN);
    put(&s->e, 0, 9, cap);
    put(&s->e, 0, 255, mask);
}

static void
ro_move(struct ro *s, uint32_t idc, uint32_t k, uint32_t inst)
{
    ro_op(s, RO_MOVE);
    ro_id(s, idc, k);
    put(&s->e, 0, 9, inst);
}

/* kind 0,1 stored, 2 removed, 3 cleared; hashes 0x1000 + h[i];
 * mult 0: B+1, else B x mult */
static void
ro_kv(struct ro *s, uint32_t kind, uint32_t inst, uint32_t nbk,
      const uint32_t *h, uint32_t mult, uint32_t pattern, bool parent,
      uint32_t ph, bool wrong)
{
    struct enc *e = &s->e;
    ro_op(s, RO_KV);
    put(e, 0, 3, kind);
    put(e, 0, 9, inst);
    put(e, 0, 4, nbk);
    for (uint32_t i = 0; i < nbk; i++)
        put(e, 0, 15, h[i]);
    if (kind <= 1) {
        put(e, 0, 3, mult);
        put(e, 0, 3, pattern);
        put(e, 0, 3, 0);
        put(e, 0, 1, parent);
        put(e, 0, 15, ph);
        put(e, 0, 7, wrong ? 0 : 1);
    }
}

/* export: since 0 (sv 0), the last mark (1), a future mark (2) */
static void
ro_export(struct ro *s, uint32_t sv)
{
    ro_op(s, RO_DELTA);
    put(&s->e, 0, 3, 0);
    put(&s->e, 0, 2, sv);
    s->blob |= sv != 2;
}

/* kind 1: own export; 2: retargeted to instance choice `to`; 3: raw */
static void
ro_import(struct ro *s, uint32_t kind, uint32_t to, const uint8_t *raw,
          uint32_t n, bool fix)
{
    if (!s->blob)
        ro_export(s, 0);
    ro_op(s, RO_DELTA);
    put(&s->e, 0, 3, kind);
    if (kind == 2) {
        put(&s->e, 0, 8, to);
    } else if (kind == 3) {
        put(&s->e, 0, 255, n);
        put(&s->e, 0, 1, fix);
        put_bytes(&s->e, raw, n);
    }
}

/* c: {0, 1 ms, 20 ms, 1 s, 4 s, 11 s, past the TTL} */
static void
ro_time(struct ro *s, uint32_t c)
{
    ro_op(s, RO_TIME);
    put(&s->e, 0, 6, c);
}

/* sz: stats/load struct {too small, v1, current, larger}; name; key
 * (24: unknown); cls {0,1,3,63,64}; rate {NaN,.5,1,8000,1e9,2e9,inf,-1} */
static void
ro_query(struct ro *s, uint32_t inst, uint32_t sz, uint32_t name, uint32_t key,
         uint32_t cls, uint32_t rate)
{
    struct enc *e = &s->e;
    ro_op(s, RO_QUERY);
    put(e, 0, 9, inst);
    put(e, 0, 3, sz);
    put(e, 0, 9, name);
    put(e, 0, LR__PARAM_COUNT, key);
    put(e, 0, 4, cls);
    put(e, 0, 7, rate);
}

static void
ro_policy_any(struct ro *s, uint32_t c)
{
    ro_policy(s, c);
}

/* The end of a request's prefill leg (its KV moved). */
static void
ro_prefill_done(struct ro *s, uint32_t idc, uint32_t k)
{
    ro_op(s, RO_PREFILL_DONE);
    ro_id(s, idc, k);
}
/* An engine's LoRA report: nr running and nw waiting names (each 0..3
 * a0..a3, 4 "", 5 NULL, 6 a0, 7 too long); variant 0 small struct, 1
 * too many, 2 NULL names, else plain; slots {0, 2, max, max + 1}; the
 * scrape {now, +1 ms, +20 s, + the clock's bound}. */
static void
ro_set_adapters(struct ro *s, uint32_t inst, uint32_t nr, uint32_t nw,
                const uint32_t *names, uint32_t variant, uint32_t sv,
                uint32_t tv)
{
    struct enc *e = &s->e;
    ro_op(s, RO_ADAPTERS);
    put(e, 0, 9, inst);
    put(e, 0, 3, nr);
    put(e, 0, 2, nw);
    for (uint32_t k = 0; k < nr + nw; k++)
        put(e, 0, 7, names[k]);
    put(e, 0, 15, variant);
    put(e, 0, 3, sv);
    put(e, 0, 3, tv);
}

static void
ro_write(struct ro *s, const char *name)
{
    write_seed("router_ops", name, s->e.b, s->e.n);
}

/* A workload: n prompts over a few shared prefixes, with lifecycle events
 * interleaved (first tokens and ends of earlier requests). */
static void
ro_workload(struct ro *s, uint32_t n, uint32_t out_of)
{
    for (uint32_t i = 0; i < n; i++) {
        struct ro_req q = ro_rq(2 + (i & 1), 24 + 8 * (i % 4), 16 + i * 3);
        if (i % 3 == 0) {
            q.nb = 1;
            q.b[0] = 8;
        }
        if (i % 5 == 4)
            q.flags = LR_ROUTE_SCORES;
        ro_route(s, &q);
        if (i % 3 == 2)
            ro_event(s, 0, RO_INFL, i);
        if (out_of && i % out_of == out_of - 1)
            ro_event(s, 1 + (i & 1), RO_INFL, 0);
    }
}

/* A disaggregated workload: n prompts over shared prefixes, some with
 * scores, a 0.2 decision or a dry run, the prefill legs ending by
 * prefill_done or a first token, some requests ending. */
static void
ro_pd_workload(struct ro *s, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct ro_req q = ro_rq(2 + (i & 1), 16 + 16 * (i % 5), 16 + i * 5);
        if (i % 3 == 1)
            q.flags = LR_ROUTE_SCORES;
        if (i % 4 == 2)
            q.variant = 3; /* a 0.2 decision */
        if (i % 7 == 6)
            q.flags |= LR_ROUTE_DRY_RUN;
        if (i % 6 == 5) { /* an image */
            q.mm = 5;
            q.mo = 4;
            q.ml = 3;
        }
        ro_route(s, &q);
        if (i % 3 == 0)
            ro_prefill_done(s, RO_INFL, i);
        if (i % 4 == 3)
            ro_event(s, 0, RO_INFL, i + 1);
        if (i % 5 == 4)
            ro_event(s, 1 + (i & 1), RO_INFL, i);
    }
}

static uint64_t ro_rs = 0x726f757465726f70ull; /* "routerop" */
static uint32_t
ro_rnd(uint32_t lo, uint32_t hi)
{
    return xorshift(&ro_rs, lo, hi);
}

static void
gen_router(void)
{
    struct ro s;
    char name[64];

    /* every policy on the same workload: routes, events, a plan, queries */
    for (uint32_t p = 0; p < LR__POLICY_COUNT; p++) {
        if (p == LR_POLICY_LODESTAR)
            continue;
        ro_header(&s, p, 4, 32, 2, 256, 0, p, 16, 0, 0x0f);
        ro_workload(&s, 10, 4);
        ro_stats(&s, 1, 1, 2, 1, 1, false);
        ro_rtt(&s, 2, 2);
        ro_workload(&s, 4, 0);
        ro_plan(&s, 8, 0xff);
        ro_query(&s, 0, 2, 0, 10, 0, 3);
        snprintf(name, sizeof name, "policy-%02u", p);
        ro_write(&s, name);
    }

    /* models and adapters: instances serving models (one, two, every
     * one), routes naming them, one none serves and a long name, adapters
     * and the engines' reports, under the LoRA policies and adaptive */
    static const int32_t lora_policies[3] = { LR_POLICY_LORA_AFFINITY,
                                              LR_POLICY_AIBRIX_LORA,
                                              LR_POLICY_ADAPTIVE };
    for (uint32_t p = 0; p < 3; p++) {
        ro_header(&s, 40 + p, 6, 32, 2, 256, 0, LR_POLICY_RANDOM, 8, 0, 0);
        ro_add_models(&s, 0, 4, 1);
        ro_add_models(&s, 1, 5, 1);
        ro_add_models(&s, 2, 6, 2);
        ro_add(&s, 3, 0, 0, 1, false);
        ro_policy_any(&s, (uint32_t)lora_policies[p]);
        static const uint32_t run[3] = { 0, 1, 4 };
        for (uint32_t i = 0; i < 14; i++) {
            struct ro_req q = ro_rq(2 + (i & 1), 32, 16 + i);
            q.model = i % 7 < 5 ? 5 + i % 5 : 0;
            q.adapter = i % 4 == 3 ? 0 : 4 + i % 4;
            if (i % 5 == 4)
                q.flags = LR_ROUTE_SCORES;
            ro_route(&s, &q);
            if (i % 3 == 2)
                ro_event(&s, 1, RO_INFL, 0);
            if (i % 6 == 5)
                ro_set_adapters(&s, i % 4, 2, 1, run, 7, i % 3, 0);
        }
        ro_drain(&s, 0, 1);
        struct ro_req q = ro_rq(2, 32, 9);
        q.model = 5; /* m0: its only instance drains */
        ro_route(&s, &q);
        ro_move(&s, RO_INFL, 0, 1);
        snprintf(name, sizeof name, "models-%u", p);
        ro_write(&s, name);
    }

    /* fleet changes with requests in flight: drain, undrain, remove, add
     * the name again, events for the dropped requests */
    ro_header(&s, 7, 4, 32, 2, 128, 0, LR_POLICY_LEAST_REQUEST, 8, 0, 0x07);
    ro_workload(&s, 6, 0);
    ro_drain(&s, 1, 1);
    ro_workload(&s, 3, 0);
    ro_drain(&s, 1, 0);
    ro_remove(&s, 0);
    ro_event(&s, 1, RO_INFL, 0);
    ro_event(&s, 0, 1, 0);
    ro_add(&s, 0, 1, 0, 1, false);
    ro_add(&s, 0, 1, 0, 1, false); /* LR_EEXIST */
    ro_drain(&s, 0, 1);
    ro_drain(&s, 1, 1);
    ro_drain(&s, 2, 1);
    ro_drain(&s, 3, 1);
    ro_workload(&s, 2, 0); /* LR_ESTATE: nothing routable */
    ro_drain(&s, 3, 0);
    ro_remove(&s, 3);
    ro_workload(&s, 2, 0);
    ro_query(&s, 3, 1, 3, 23, 1, 2);
    ro_write(&s, "fleet");

    /* invalid arguments of every kind */
    ro_header(&s, 9, 2, 4, 1, 64, 0, LR_POLICY_PREFIX_CACHE, 4, 0, 0x01);
    ro_add(&s, 8, 0, 0, 0, false); /* empty name */
    ro_add(&s, 9, 0, 0, 0, false); /* 256 bytes */
    ro_add(&s, 1, 4, 0, 0, false); /* class 64 */
    ro_add(&s, 1, 0, 3, 0, false); /* prefix_caching 2 */
    ro_add(&s, 1, 0, 0, 0, true);  /* small struct */
    ro_add(&s, 1, 0, 0, 1, false);
    ro_add(&s, 2, 0, 0, 0, false); /* LR_ELIMIT */
    ro_drain(&s, 0, 3);
    ro_drain(&s, RO_INONE, 1);
    ro_remove(&s, RO_I1000);
    struct ro_req q = ro_rq(1, 20, 255);
    for (uint32_t v = 0; v < 3; v++) {
        q.variant = v;
        ro_route(&s, &q);
    }
    q = ro_rq(1, 20, 255);
    q.nb = 2;
    q.b[0] = 12;
    q.b[1] = 4; /* unsorted */
    ro_route(&s, &q);
    q.b[1] = 21; /* past the end */
    ro_route(&s, &q);
    q = ro_rq(1, 0, 255);
    q.nb = 2; /* more boundaries than tokens + 1 */
    ro_route(&s, &q);
    q = ro_rq(1, 20, 255);
    q.flags = 8;
    ro_route(&s, &q);
    q.flags = LR_ROUTE_SCORES;
    q.capv = 1; /* LR_EBUFSIZE */
    ro_route(&s, &q);
    q.capv = 3; /* NULL scores */
    ro_route(&s, &q);
    q.capv = 0;
    ro_route(&s, &q);
    q = ro_rq(1, 20, 255);
    q.sess = 3;
    ro_route(&s, &q);
    q = ro_rq(1, 20, 255);
    q.idc = 0;
    ro_route(&s, &q);
    ro_route(&s, &q); /* LR_EEXIST */
    q.idc = 9;
    ro_route(&s, &q);
    q.idc = 8;
    ro_route(&s, &q);
    q.idc = RO_FRESH;
    q.flags = LR_ROUTE_DRY_RUN;
    ro_route(&s, &q);
    q.flags = 0;
    ro_route(&s, &q);
    ro_route(&s, &q); /* LR_ELIMIT at 4 */
    ro_route(&s, &q);
    ro_policy(&s, LR__POLICY_COUNT);
    for (uint32_t vc = 3; vc <= 9; vc++)
        ro_param(&s, LR_PARAM_DUALMAP_WINDOW, vc, 0);
    ro_param(&s, LR__PARAM_COUNT, 0, 0);
    ro_param(&s, LR__PARAM_COUNT + 1, 5, 0);
    ro_param(&s, LR_PARAM_TTFT_SLO_S, 8, 0);
    ro_param(&s, LR_PARAM_PREFIX_MIN_RATIO, 8, 0);
    ro_stats(&s, 0, 3, 3, 6, 4, false);
    ro_stats(&s, 0, 0, 0, 4, 1, false);
    ro_stats(&s, 0, 0, 0, 5, 1, false);
    ro_stats(&s, 0, 0, 0, 1, 1, true);
    ro_stats(&s, RO_I1000, 0, 0, 1, 1, false);
    ro_rtt(&s, 0, 4);
    ro_rtt(&s, 0, 5);
    ro_rtt(&s, 5, 2);
    ro_event(&s, 0, 9, 0);
    ro_event(&s, 1, 8, 0);
    ro_event(&s, 2, 3, 0);
    ro_plan(&s, 9, 0);
    ro_move(&s, RO_INFL, 0, 0);
    ro_move(&s, RO_INFL, 0, RO_INONE);
    ro_move(&s, 4, 0, 0);
    ro_export(&s, 2);
    for (uint32_t sz = 0; sz < 4; sz++)
        ro_query(&s, sz % 2 ? 0 : RO_I1000, sz, 8 + sz % 2, 24, 4, sz);
    ro_query(&s, 0, 1, 0, 16, 3, 0);
    ro_query(&s, 0, 1, 0, 16, 3, 5);
    ro_query(&s, 0, 1, 0, 16, 3, 7);
    ro_write(&s, "invalid-args");

    /* max_requests reached, ids reused after their end */
    ro_header(&s, 11, 3, 3, 0, 32, 0, LR_POLICY_ROUND_ROBIN, 2, 0, 0x07);
    for (uint32_t i = 0; i < 5; i++) {
        q = ro_rq(0, 8 + i, 255);
        q.idc = i % 4;
        ro_route(&s, &q);
    }
    ro_event(&s, 1, 0, 0);
    ro_event(&s, 1, 0, 0);
    q = ro_rq(0, 8, 255);
    q.idc = 0;
    ro_route(&s, &q);
    ro_event(&s, 0, 1, 0);
    ro_event(&s, 0, 1, 0);
    ro_event(&s, 2, 1, 0);
    ro_write(&s, "limits");

    /* rebalancing: a slow class, a tight SLO, dualmap and consistent-hash
     * queues, every planned move carried out, then moves by hand */
    for (uint32_t v = 0; v < 4; v++) {
        uint32_t pol = v % 2 ? LR_POLICY_CONSISTENT_HASH : LR_POLICY_DUALMAP;
        ro_header(&s, 20 + v, 4, 40, v % 3, 512, 0, pol, 32, 0, 0x0f);
        ro_query(&s, 0, 1, 0, 0, 1, 2); /* class 1: 1 token/s */
        ro_query(&s, 0, 1, 0, 0, 0, 2);
        ro_param(&s, LR_PARAM_TTFT_SLO_S, 0, 0);
        if (v >= 2)
            ro_param(&s, LR_PARAM_DUALMAP_KEY_TOKENS, 10, 8);
        for (uint32_t i = 0; i < 16; i++) {
            q = ro_rq(3, 16 + (i % 8) * 8, i);
            q.flags = i % 2 ? LR_ROUTE_SCORES : 0;
            ro_route(&s, &q);
        }
        ro_plan(&s, 8, 0xff);
        ro_time(&s, 4);
        ro_plan(&s, 8, 0x55);
        ro_move(&s, RO_INFL, 3, 1);
        ro_move(&s, RO_INFL, 4, 2);
        ro_event(&s, 0, RO_INFL, 5);
        ro_move(&s, RO_INFL, 5, 3);
        ro_drain(&s, 2, 1);
        ro_plan(&s, 4, 0xff);
        ro_remove(&s, 1);
        ro_plan(&s, 8, 0xff);
        snprintf(name, sizeof name, "rebalance-%u", v);
        ro_write(&s, name);
    }

    /* parameters: every key at its bounds, the DualMap window resized */
    ro_header(&s, 30, 3, 16, 2, 128, 0, LR_POLICY_DUALMAP, 8, 0, 0x07);
    for (uint32_t k = 0; k < LR__PARAM_COUNT; k++) {
        ro_param(&s, k, k % 2 ? 1 : 0, 0);
        q = ro_rq(k % 4, 40, 255);
        ro_route(&s, &q);
        ro_param(&s, k, 2, 0);
    }
    ro_param(&s, LR_PARAM_DUALMAP_WINDOW, 0, 0);
    ro_param(&s, LR_PARAM_DUALMAP_MAX_KEY_BLOCKS, 1, 0);
    ro_workload(&s, 8, 3);
    ro_param(&s, LR_PARAM_DUALMAP_MAX_KEY_BLOCKS, 11, 77);
    ro_workload(&s, 6, 2);
    ro_write(&s, "params");

    /* GORGO with its tuner running: many first tokens */
    ro_header(&s, 31, 3, 48, 2, 256, 0, LR_POLICY_GORGO, 8, 0, 0x07);
    ro_param(&s, LR_PARAM_GORGO_SIGMA, 1, 0);
    for (uint32_t i = 0; i < 40; i++) {
        q = ro_rq(2, 16 + i % 5 * 8, i);
        ro_route(&s, &q);
        ro_event(&s, 0, RO_INFL, i);
        ro_event(&s, 1, RO_INFL, i + 1);
        if (i % 8 == 7)
            ro_time(&s, 2);
    }
    ro_param(&s, LR_PARAM_GORGO_FROZEN, 1, 0);
    ro_query(&s, 0, 2, 0, LR_PARAM_GORGO_W_RTT, 0, 3);
    ro_write(&s, "gorgo");

    /* KV events: stored chains with parents, removals, clears */
    ro_header(&s, 40, 3, 16, 2, 128, 0, LR_POLICY_PREFIX_CACHE, 8, 0, 0x07);
    {
        static const uint32_t h1[4] = { 1, 2, 3, 4 }, h2[2] = { 5, 6 },
                              h3[3] = { 2, 9, 1 };
        ro_kv(&s, 0, 0, 4, h1, 1, 2, false, 0, false);
        ro_kv(&s, 0, 0, 2, h2, 2, 2, true, 4, false);
        ro_kv(&s, 1, 1, 2, h2, 1, 2, true, 7, false);  /* unknown parent */
        ro_kv(&s, 0, 1, 2, h2, 0, 2, false, 0, false); /* B+1 */
        ro_kv(&s, 0, 1, 2, h2, 1, 2, false, 0, true);  /* wrong count */
        ro_kv(&s, 0, RO_I1000, 2, h2, 1, 2, false, 0, false);
        q = ro_rq(2, 48, 255);
        ro_route(&s, &q);
        ro_kv(&s, 2, 0, 3, h3, 0, 0, false, 0, false);
        ro_kv(&s, 2, 2, 3, h3, 0, 0, false, 0, false);
        ro_route(&s, &q);
        ro_kv(&s, 3, 0, 0, NULL, 0, 0, false, 0, false);
        ro_kv(&s, 3, RO_INONE, 0, NULL, 0, 0, false, 0, false);
        ro_route(&s, &q);
    }
    ro_write(&s, "kv-events");

    /* deltas: export, import our own, the same naming other instances
     * (one never added, one past max_instances, one added later), raw */
    for (uint32_t v = 0; v < 4; v++) {
        ro_header(&s, 50 + v, 2 + v, 16, 2, 128, 0,
                  v % 2 ? LR_POLICY_ROUND_ROBIN : LR_POLICY_PREFIX_CACHE, 8, 0,
                  0x01);
        ro_workload(&s, 4, 0);
        ro_export(&s, 0);
        ro_import(&s, 1, 0, NULL, 0, false);
        ro_import(&s, 2, v == 0 ? RO_I1000 : v, NULL, 0, false);
        ro_add(&s, 1, 0, 0, 1, false);
        ro_add(&s, 2, 0, 0, 1, false);
        ro_workload(&s, 6, 2);
        ro_export(&s, 1);
        ro_import(&s, 1, 0, NULL, 0, false);
        ro_remove(&s, 1);
        ro_import(&s, 2, 1, NULL, 0, false);
        ro_add(&s, 3, 0, 0, 1, false);
        ro_workload(&s, 4, 0);
        static const uint8_t junk[12] = "LRDX\1\0\0\0\4\0\0";
        ro_import(&s, 3, 0, junk, sizeof junk, v % 2 == 0);
        snprintf(name, sizeof name, "delta-%u", v);
        ro_write(&s, name);
    }

    /* a delta naming an instance this router never added takes an index
     * slot: the instances added afterwards must still be routable */
    ro_header(&s, 55, 2, 16, 2, 128, 0, LR_POLICY_ROUND_ROBIN, 8, 0, 0x01);
    q = ro_rq(2, 24, 255);
    ro_route(&s, &q);
    ro_export(&s, 0);
    ro_import(&s, 2, RO_I1000, NULL, 0, false);
    ro_add(&s, 1, 0, 0, 1, false);
    for (uint32_t i = 0; i < 4; i++) {
        q = ro_rq(3, 24 + 4 * i, 255);
        ro_route(&s, &q);
    }
    ro_write(&s, "delta-foreign-id");

    /* time: scrapes going stale, routes expiring, decode stalls */
    ro_header(&s, 60, 3, 16, 2, 128, 1, LR_POLICY_LEAST_LOAD, 8, 0, 0x07);
    ro_stats(&s, 0, 2, 2, 1, 1, false);
    ro_stats(&s, 1, 0, 1, 1, 3, false);
    ro_workload(&s, 4, 0);
    ro_time(&s, 5); /* stats stale */
    ro_workload(&s, 4, 0);
    ro_policy(&s, LR_POLICY_DUALMAP);
    ro_time(&s, 4); /* queues stalled */
    ro_workload(&s, 4, 0);
    ro_plan(&s, 8, 0xff);
    ro_time(&s, 6); /* past the TTL */
    ro_policy(&s, LR_POLICY_PREFIX_CACHE);
    ro_workload(&s, 4, 2);
    ro_write(&s, "time");

    /* allocation failures in routes, adds, undrains, parameters, plans,
     * KV events and deltas */
    static const int ooms[6] = { 1, 2, 3, 5, 8, -4 };
    for (int k = 0; k < 6; k++) {
        ro_header(&s, 70, 4, 16, 2, 64, 0, LR_POLICY_DUALMAP, 8, ooms[k], 0x03);
        ro_workload(&s, 3, 0);
        ro_add(&s, 2, 0, 0, 1, false);
        ro_drain(&s, 0, 1);
        ro_drain(&s, 0, 0);
        ro_param(&s, LR_PARAM_DUALMAP_WINDOW, 0, 0);
        ro_plan(&s, 4, 0xff);
        static const uint32_t h[2] = { 1, 2 };
        ro_kv(&s, 0, 1, 2, h, 1, 1, false, 0, false);
        ro_export(&s, 0);
        ro_import(&s, 1, 0, NULL, 0, false);
        ro_workload(&s, 3, 0);
        snprintf(name, sizeof name, "oom-%d", ooms[k]);
        ro_write(&s, name);
    }

    /* disaggregated fleets (the odd instances prefill, the even ones
     * decode, two to a node), every policy but lodestar's header: splits,
     * prefill legs ending, 0.2 decisions, plans */
    for (uint32_t p = 0; p < LR__POLICY_COUNT; p++) {
        if (p == LR_POLICY_LODESTAR)
            continue;
        ro_header_fleet(&s, 80 + p, 6, 32, 2, 256, 0, p, 16, 0, 0x3f, 3);
        ro_pd_workload(&s, 14);
        ro_plan(&s, 8, 0xff);
        ro_query(&s, 1, 2, 1, LR_PARAM_PD_PREFILL_POLICY, 0, 3);
        ro_pd_workload(&s, 6);
        snprintf(name, sizeof name, "pd-policy-%02u", p);
        ro_write(&s, name);
    }
    /* the same, where the even ones do both; lodestar by set_policy */
    static const uint32_t pd_mixed[4] = { LR_POLICY_ROUND_ROBIN,
                                          LR_POLICY_LLMD_PD,
                                          LR_POLICY_DYNAMO_PD,
                                          LR_POLICY_ADAPTIVE };
    for (uint32_t v = 0; v < 5; v++) {
        ro_header_fleet(&s, 110 + v, 8, 40, v % 4, 256, 0,
                        v < 4 ? pd_mixed[v] : LR_POLICY_RANDOM, 8, 0, 0xff, 2);
        if (v == 4)
            ro_policy(&s, LR_POLICY_LODESTAR);
        if (v == 1) /* llm-d-pd splits every request */
            ro_param(&s, LR_PARAM_PD_MIN_UNCACHED, 0, 0);
        if (v == 2) /* dynamo-pd prefills locally under 16 tokens */
            ro_param(&s, LR_PARAM_PD_LOCAL_MAX_TOKENS, 10, 16);
        ro_pd_workload(&s, 16);
        ro_time(&s, 3);
        ro_pd_workload(&s, 8);
        snprintf(name, sizeof name, "pd-mixed-%u", v);
        ro_write(&s, name);
    }

    /* the prefill leg's policy: every id, -1 .. the last (those with a
     * ring key or a state of their own refused), routes after each */
    ro_header_fleet(&s, 120, 6, 48, 2, 256, 0, LR_POLICY_ROUND_ROBIN, 8, 0,
                    0x3f, 2);
    for (uint32_t v = 0; v <= LR__POLICY_COUNT; v++) {
        ro_param(&s, LR_PARAM_PD_PREFILL_POLICY, 10, v); /* v - 1 */
        struct ro_req q = ro_rq(2, 32 + 8 * (v % 4), v);
        q.flags = LR_ROUTE_SCORES;
        ro_route(&s, &q);
        ro_event(&s, 1, RO_INFL, 0);
    }
    ro_param(&s, LR_PARAM_PD_PREFILL_POLICY, 9, 0);  /* -0.5 */
    ro_param(&s, LR_PARAM_PD_PREFILL_POLICY, 4, 0);  /* past the last */
    ro_param(&s, LR_PARAM_PD_PREFILL_POLICY, 10, 2); /* round-robin */
    ro_policy(&s, LR_POLICY_PREFIX_CACHE);
    ro_pd_workload(&s, 10);
    ro_write(&s, "pd-prefill-policy");

    /* roles and placements by add_instance: invalid roles, 0.2's struct
     * (both, whatever it says), a prefill instance alone (LR_ESTATE),
     * moves of a split request (onto its prefill instance: LR_EINVAL),
     * prefill_done repeated and for no request, the prefill instance
     * removed with legs open, a new one in its place, the decode
     * instances drained */
    ro_header_fleet(&s, 121, 5, 16, 2, 128, 0, LR_POLICY_LEAST_REQUEST, 8, 0, 0,
                    0);
    ro_add_role(&s, 0, RO_ROLE3, 0, 0);
    ro_add_role(&s, 0, RO_ROLE_M1, 0, 0);
    ro_add_role(&s, 0, RO_PREFILL, 1 | 1 << 2 | 1 << 4, 0); /* id 0 */
    {
        struct ro_req q = ro_rq(2, 40, 1);
        ro_route(&s, &q); /* only a prefill instance: LR_ESTATE */
        q.flags = LR_ROUTE_DRY_RUN;
        ro_route(&s, &q);
        ro_add_role(&s, 1, RO_DECODE, 1 | 1 << 2 | 1 << 4, 0); /* id 1 */
        ro_add_full(&s, 2, 0, 0, 1, 1, 0, 0, RO_PREFILL, 2 | 2 << 2);
        ro_add_role(&s, 3, RO_PREFILL, 3 | 3 << 2 | 2 << 4, 0); /* id 3 */
        for (uint32_t i = 0; i < 6; i++) {
            q = ro_rq(2 + (i & 1), 24 + 8 * i, i);
            q.flags = i % 2 ? LR_ROUTE_SCORES : 0;
            ro_route(&s, &q);
        }
        ro_move(&s, RO_INFL, 0, 0); /* onto a prefill leg, or not */
        ro_move(&s, RO_INFL, 0, 3);
        ro_move(&s, RO_INFL, 1, 2);
        ro_move(&s, RO_INFL, 1, 1);
        ro_prefill_done(&s, RO_INFL, 2);
        ro_prefill_done(&s, RO_INFL, 2); /* a no-op */
        ro_prefill_done(&s, 9, 0);       /* LR_ENOENT */
        ro_event(&s, 0, RO_INFL, 3);
        ro_prefill_done(&s, RO_INFL, 3);
        ro_remove(&s, 0); /* its open legs end */
        ro_pd_workload(&s, 4);
        ro_add_role(&s, 4, RO_PREFILL, 0, 0); /* id 0 again */
        ro_pd_workload(&s, 4);
        ro_drain(&s, 1, 1);
        ro_drain(&s, 2, 1);
        ro_route(&s, &q); /* the prefill instances alone: LR_ESTATE */
        ro_drain(&s, 2, 0);
        ro_remove(&s, 3);
        ro_pd_workload(&s, 4);
    }
    ro_write(&s, "pd-roles");

    /* models in a disaggregated fleet: a model only a prefill instance
     * serves (LR_ESTATE), one no instance serves (LR_ENOENT), one with
     * prefill and decode rows, one with decode rows alone */
    ro_header_fleet(&s, 122, 6, 32, 2, 256, 0, LR_POLICY_PREFIX_CACHE, 8, 0, 0,
                    0);
    ro_add_role(&s, 0, RO_PREFILL, 1, 4); /* m0 */
    ro_add_role(&s, 1, RO_DECODE, 1, 5);  /* m1 */
    ro_add_role(&s, 2, RO_BOTH, 2, 6);    /* m0, m1 */
    ro_add_role(&s, 3, RO_PREFILL, 2, 7); /* m2 */
    ro_add_role(&s, 4, RO_DECODE, 1, 0);  /* every model */
    for (uint32_t i = 0; i < 16; i++) {
        struct ro_req q = ro_rq(2 + (i & 1), 32, 7 + i);
        q.model = i % 5 == 4 ? 0 : 5 + i % 5; /* m0..m3, none */
        q.flags = i % 3 == 0 ? LR_ROUTE_SCORES : 0;
        ro_route(&s, &q);
        if (i % 4 == 1)
            ro_prefill_done(&s, RO_INFL, i);
    }
    ro_remove(&s, 4); /* m2: its prefill instance alone */
    {
        struct ro_req q = ro_rq(2, 32, 3);
        q.model = 7;
        ro_route(&s, &q);
    }
    ro_move(&s, RO_INFL, 0, 3);
    ro_move(&s, RO_INFL, 1, 2);
    ro_write(&s, "pd-models");

    /* rebalancing split requests: a slow class, a tight SLO, dualmap and
     * consistent-hash recording alternatives */
    for (uint32_t v = 0; v < 2; v++) {
        uint32_t pol = v ? LR_POLICY_CONSISTENT_HASH : LR_POLICY_DUALMAP;
        ro_header_fleet(&s, 123 + v, 6, 40, 2, 512, 0, pol, 32, 0, 0x3f, 3);
        ro_query(&s, 0, 1, 0, 0, 1, 2); /* class 1: 1 token/s */
        ro_param(&s, LR_PARAM_TTFT_SLO_S, 0, 0);
        for (uint32_t i = 0; i < 16; i++) {
            struct ro_req q = ro_rq(3, 16 + (i % 8) * 8, i);
            q.flags = i % 2 ? LR_ROUTE_SCORES : 0;
            ro_route(&s, &q);
        }
        ro_plan(&s, 8, 0xff);
        ro_time(&s, 4);
        ro_plan(&s, 8, 0x55);
        ro_prefill_done(&s, RO_INFL, 2);
        ro_move(&s, RO_INFL, 3, 1);
        ro_move(&s, RO_INFL, 4, 4);
        ro_remove(&s, 1);
        ro_plan(&s, 8, 0xff);
        snprintf(name, sizeof name, "pd-rebalance-%u", v);
        ro_write(&s, name);
    }

    /* allocation failures in a disaggregated fleet */
    static const int pd_ooms[4] = { 1, 2, 4, -3 };
    for (int k = 0; k < 4; k++) {
        ro_header_fleet(&s, 125, 6, 16, 2, 64, 0, LR_POLICY_DYNAMO_PD, 8,
                        pd_ooms[k], 0x0f, 3);
        ro_pd_workload(&s, 4);
        ro_param(&s, LR_PARAM_PD_PREFILL_POLICY, 10, 2);
        ro_add_role(&s, 5, RO_PREFILL, 0, 0);
        ro_pd_workload(&s, 4);
        snprintf(name, sizeof name, "pd-oom-%d", pd_ooms[k]);
        ro_write(&s, name);
    }

    /* random sequences over every op (the learner's aside), in every kind
     * of fleet */
    for (int n = 0; n < 12; n++) {
        uint32_t pol = ro_rnd(0, LR__POLICY_COUNT - 2);
        ro_header_fleet(&s, ro_rnd(0, 255), ro_rnd(1, 8), ro_rnd(1, 48),
                        ro_rnd(0, 3), ro_rnd(8, 512), ro_rnd(0, 3),
                        pol >= LR_POLICY_LODESTAR ? pol + 1 : pol,
                        ro_rnd(1, 64), n % 4 == 3 ? (int)ro_rnd(1, 40) : 0,
                        ro_rnd(0, 255), n % 4);
        int ops = (int)ro_rnd(10, 60);
        for (int i = 0; i < ops; i++) {
            uint32_t op = ro_rnd(0, RO_LAST), inst = ro_rnd(0, 9);
            uint32_t idc = ro_rnd(0, 15), k = ro_rnd(0, 63);
            uint32_t h[4] = { ro_rnd(0, 15), ro_rnd(0, 15), ro_rnd(0, 15),
                              ro_rnd(0, 15) };
            switch (op) {
            case RO_ADD:
                ro_add_full(&s, ro_rnd(0, 9), ro_rnd(0, 4), ro_rnd(0, 3),
                            ro_rnd(0, 3), ro_rnd(0, 15), ro_rnd(0, 9),
                            ro_rnd(0, 3), ro_rnd(0, 15), ro_rnd(0, 63));
                break;
            case RO_OBSERVE:
                ro_op(&s, RO_OBSERVE);
                ro_id(&s, idc, k);
                put(&s.e, 0, 255, ro_rnd(0, 98));
                break;
            case RO_LEARN:
                break;
            case RO_ADAPTERS: {
                static const uint32_t names[3] = { 0, 1, 4 };
                ro_set_adapters(&s, inst, 2, 1, names, 7, ro_rnd(0, 3), 0);
                break;
            }
            case RO_PREFILL_DONE:
                ro_prefill_done(&s, idc, k);
                break;
            case RO_DRAIN:
                ro_drain(&s, inst, ro_rnd(0, 3));
                break;
            case RO_REMOVE:
                ro_remove(&s, inst);
                break;
            case RO_POLICY:
                ro_policy(&s, ro_rnd(0, LR__POLICY_COUNT));
                break;
            case RO_PARAM:
                ro_param(&s, ro_rnd(0, LR__PARAM_COUNT + 1), ro_rnd(0, 11),
                         ro_rnd(0, 255));
                break;
            case RO_STATS:
                ro_stats(&s, inst, ro_rnd(0, 3), ro_rnd(0, 3), ro_rnd(0, 7),
                         ro_rnd(0, 4), ro_rnd(0, 15) == 0);
                break;
            case RO_RTT:
                ro_rtt(&s, inst, ro_rnd(0, 5));
                break;
            case RO_FIRST:
            case RO_COMPLETE:
            case RO_FAIL:
                ro_event(&s, op - RO_FIRST, idc, k);
                break;
            case RO_PLAN:
                ro_plan(&s, ro_rnd(0, 9), ro_rnd(0, 255));
                break;
            case RO_MOVE:
                ro_move(&s, idc, k, inst);
                break;
            case RO_KV:
                ro_kv(&s, ro_rnd(0, 3), inst, ro_rnd(0, 4), h, ro_rnd(0, 3),
                      ro_rnd(0, 3), ro_rnd(0, 1), ro_rnd(0, 15),
                      ro_rnd(0, 7) == 0);
                break;
            case RO_DELTA:
                if (ro_rnd(0, 1))
                    ro_export(&s, ro_rnd(0, 2));
                else
                    ro_import(&s, ro_rnd(1, 2), ro_rnd(0, 8), NULL, 0, false);
                break;
            case RO_TIME:
                ro_time(&s, ro_rnd(0, 5));
                break;
            case RO_QUERY:
                ro_query(&s, inst, ro_rnd(0, 3), ro_rnd(0, 9),
                         ro_rnd(0, LR__PARAM_COUNT), ro_rnd(0, 4),
                         ro_rnd(0, 7));
                break;
            default: {
                struct ro_req r =
                    ro_rq(ro_rnd(0, 3), ro_rnd(0, 96), ro_rnd(0, 255));
                r.idc = idc;
                r.k = k;
                r.start = ro_rnd(0, 3);
                r.salt = ro_rnd(0, 7) == 0;
                r.nb = ro_rnd(0, 2);
                for (uint32_t j = 0; j < r.nb; j++)
                    r.b[j] = ro_rnd(0, r.len);
                if (r.nb == 2 && r.b[0] > r.b[1]) {
                    uint32_t t = r.b[0];
                    r.b[0] = r.b[1];
                    r.b[1] = t;
                }
                r.flags = ro_rnd(0, 7);
                r.sess = ro_rnd(0, 2);
                r.session = ro_rnd(0, 7);
                r.outc = ro_rnd(0, 3);
                r.outv = ro_rnd(0, 255);
                r.capv = ro_rnd(0, 2) ? 2 : ro_rnd(0, 3);
                r.variant = ro_rnd(0, 15) == 0 ? ro_rnd(0, 3) : 7;
                r.model = ro_rnd(0, 9);
                r.adapter = ro_rnd(0, 7);
                if (ro_rnd(0, 3) == 0) {
                    r.mm = ro_rnd(5, 7);
                    r.mo = ro_rnd(0, r.len);
                    r.ml = ro_rnd(0, 9);
                }
                ro_route(&s, &r);
                break;
            }
            }
        }
        snprintf(name, sizeof name, "random-%02d", n);
        ro_write(&s, name);
    }
}

/* ---- vllm_batch: msgpack payloads ------------------------------------------ */

static void
vllm_seed(const char *name, struct mpw *w)
{
    if (w->overflow) {
        fprintf(stderr, "vllm seed %s overflows\n", name);
        exit(1);
    }
    write_seed("vllm_batch", name, w->buf, w->n);
    w->n = 0;
}

static void
gen_vllm(void)
{
    /* the harness's index holds hashes 1..4, tokens i * 7 + 1 */
    uint32_t tok[64];
    for (uint32_t i = 0; i < 64; i++)
        tok[i] = i * 7 + 1;
    static const uint64_t h[4] = { 1, 2, 3, 4 };
    static const uint64_t nh[2] = { 10, 11 };
    static struct mpw w;
    for (int map = 0; map < 2; map++) {
        struct mpw_stored s = mpw_stored_of(nh, 2, tok, 16);
        s.has_parent = true;
        s.parent = 2;
        mpw_batch(&w, 3, map);
        if (map)
            mpw_stored_map(&w, &s, MPW_HASH_UINT);
        else
            mpw_stored_array(&w, &s, MPW_HASH_UINT);
        mpw_removed(&w, h + 3, 1, map, MPW_HASH_UINT);
        mpw_cleared(&w, map);
        mpw_batch_end(&w, map);
        vllm_seed(map ? "map" : "array", &w);
        w.wide = true;
        mpw_batch(&w, 2, map);
        s.has_parent = false;
        s.block_size = 32;
        s.n_blocks = 2;
        if (map)
            mpw_stored_map(&w, &s, MPW_HASH_BYTES);
        else
            mpw_stored_array(&w, &s, MPW_HASH_INT);
        mpw_removed(&w, nh, 2, map, MPW_HASH_BYTES);
        mpw_batch_end(&w, map);
        vllm_seed(map ? "map-wide" : "array-wide", &w);
        w.wide = false;
        /* skipped kinds */
        mpw_batch(&w, 3, map);
        s.block_size = 16;
        s.medium = "CPU";
        mpw_stored_array(&w, &s, MPW_HASH_UINT);
        s.medium = NULL;
        s.extra_keys = true;
        mpw_stored_map(&w, &s, MPW_HASH_UINT);
        s.extra_keys = false;
        s.lora_id = 2;
        s.group_idx = 1;
        mpw_stored_array(&w, &s, MPW_HASH_UINT);
        mpw_batch_end(&w, map);
        vllm_seed(map ? "skipped-map" : "skipped-array", &w);
    }
    /* multimodal keys: applied where the engine's block is the index's,
     * skipped in blocks of two */
    for (int map = 0; map < 2; map++) {
        struct mpw_stored s = mpw_stored_of(nh, 2, tok, 16);
        s.mm_keys = true;
        mpw_batch(&w, 2, map);
        if (map)
            mpw_stored_map(&w, &s, MPW_HASH_UINT);
        else
            mpw_stored_array(&w, &s, MPW_HASH_UINT);
        s.block_size = 32;
        s.n_blocks = 1;
        mpw_stored_map(&w, &s, MPW_HASH_UINT);
        mpw_batch_end(&w, map);
        vllm_seed(map ? "mm-map" : "mm-array", &w);
    }
    /* a block size the index cannot place */
    struct mpw_stored b = mpw_stored_of(nh, 1, tok, 8);
    mpw_batch(&w, 1, false);
    mpw_stored_array(&w, &b, MPW_HASH_UINT);
    mpw_batch_end(&w, false);
    vllm_seed("enotsup", &w);
    /* an empty batch, and a truncated one */
    mpw_batch(&w, 0, false);
    mpw_batch_end(&w, false);
    vllm_seed("empty", &w);
    mpw_batch(&w, 1, true);
    mpw_removed(&w, h, 4, true, MPW_HASH_INT);
    w.n -= 3;
    vllm_seed("truncated", &w);
}

/* ---- mlp_load --------------------------------------------------------------- */

/* Seeds are a control byte (see fuzz_mlp_load.c: bit 0 reseal, bit 1 set
 * magic and version, bits 2-7 an allocation failure) and a blob: saved
 * networks of a few shapes, fitted and trained or fresh, then damaged
 * copies. */
static void
mlp_seed(const char *name, uint8_t ctl, const uint8_t *p, size_t n)
{
    uint8_t *b = malloc(n + 1);
    if (b == NULL)
        exit(1);
    b[0] = ctl;
    memcpy(b + 1, p, n);
    write_seed("mlp_load", name, b, n + 1);
    free(b);
}

static lr_blob *
mlp_blob(uint32_t d, uint32_t L, uint32_t W, double dropout, int train)
{
    lr_mlp_options o;
    lr_mlp_options_init(&o);
    o.n_inputs = d;
    o.hidden_layers = L;
    o.width = W;
    o.batch_size = 8;
    o.dropout = dropout;
    o.seed = d * 100u + L * 10u + W;
    lr_mlp *m;
    if (lr_mlp_create(&o, &m) != LR_OK)
        exit(1);
    if (train) {
        float x[40 * 8], y[40];
        for (size_t i = 0; i < 40 * (size_t)d; i++)
            x[i] = (float)rnd(0, 1999) / 100.0f - 10.0f;
        for (size_t r = 0; r < 40; r++)
            y[r] = x[r * d] * 2.0f + (float)rnd(0, 99) / 10.0f;
        if (lr_mlp_fit_normalization(m, x, 40, y) != LR_OK ||
            lr_mlp_train(m, x, y, 40, 3, NULL) != LR_OK)
            exit(1);
    }
    lr_blob *b;
    if (lr_mlp_save(m, &b) != LR_OK)
        exit(1);
    lr_mlp_destroy(m);
    return b;
}

static void
gen_mlp(void)
{
    static const struct {
        const char *name;
        uint32_t d, L, W;
        double dropout;
        int train;
    } shapes[] = {
        { "tiny", 1, 1, 1, 0.0, 0 },  { "small", 3, 2, 5, 0.25, 1 },
        { "deep", 2, 4, 3, 0.5, 1 },  { "wide", 8, 1, 24, 0.1, 1 },
        { "fresh", 4, 3, 8, 0.9, 0 },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        lr_blob *b = mlp_blob(shapes[i].d, shapes[i].L, shapes[i].W,
                              shapes[i].dropout, shapes[i].train);
        const uint8_t *p = lr_blob_data(b);
        size_t n = lr_blob_size(b);
        char name[64];
        snprintf(name, sizeof name, "%s", shapes[i].name);
        mlp_seed(name, 0x00, p, n);
        snprintf(name, sizeof name, "%s-resealed", shapes[i].name);
        mlp_seed(name, 0x03, p, n);
        if (i == 1) {
            /* allocation failures: the first once, then all */
            mlp_seed("small-oom1", 1 << 2, p, n);
            mlp_seed("small-oom-all", 32 << 2, p, n);
            /* damaged: truncated, a flipped bit, a NaN weight and an
             * absurd width (both resealed by the harness), a future
             * version, a min above the max */
            uint8_t *c = malloc(n);
            if (c == NULL)
                exit(1);
            mlp_seed("small-truncated", 0x00, p, n / 2);
            memcpy(c, p, n);
            c[n / 2] ^= 0x10;
            mlp_seed("small-flipped", 0x00, c, n);
            memcpy(c, p, n);
            lr__put_u32(c + n - 12, 0x7fc00000u);
            mlp_seed("small-nan", 0x01, c, n);
            memcpy(c, p, n);
            lr__put_u32(c + 20, 1u << 30);
            mlp_seed("small-width", 0x01, c, n);
            memcpy(c, p, n);
            lr__put_u32(c + 8, 2);
            mlp_seed("small-version", 0x01, c, n);
            memcpy(c, p, n);
            lr__put_u32(c + 84 + 4 * 3 * 2, 0x7f000000u); /* min[0] */
            mlp_seed("small-minmax", 0x01, c, n);
            free(c);
        }
        lr_blob_destroy(b);
    }
    mlp_seed("empty", 0x00, NULL, 0);
    mlp_seed("magic-only", 0x02, (const uint8_t *)"LRMLP\0\0\0\1\0\0\0", 12);
}

/* ---- table ------------------------------------------------------------------ */

/* oom as in put_oom, with allocations 1..64 */
static void
tb_header(struct enc *e, uint32_t expect, uint32_t seed, int oom)
{
    e->n = 0;
    put(e, 0, TM_CAP, expect);
    put(e, 0, UINT32_MAX, seed);
    put(e, 0, 3, oom == 0 ? 0 : oom > 0 ? 2 : 3);
    put(e, 1, 64, oom == 0 ? 1 : (uint32_t)(oom > 0 ? oom : -oom));
}

static void
tb_op(struct enc *e, uint32_t op, uint32_t key, uint32_t arg)
{
    put(e, 0, TM_N_OPS - 1, op);
    put(e, 0, TM_KEYS - 1, key);
    put(e, 0, 65535, arg);
}

static void
gen_table(void)
{
    struct enc e;
    const char *T = "table";

    /* grow one insert at a time to a full model, then drain in order */
    tb_header(&e, 0, 0, 0);
    for (uint32_t k = 0; k < 200; k++)
        tb_op(&e, TM_INSERT, k, k * 7);
    for (uint32_t k = 0; k < 200; k += 9)
        tb_op(&e, TM_FIND, k + 1, 0);
    for (uint32_t k = 0; k < 200; k++)
        tb_op(&e, TM_REMOVE, k, 0);
    write_seed(T, "fill-drain", e.b, e.n);

    /* keys 6j + 1 all carry tag UINT32_MAX: one run wrapping the end */
    tb_header(&e, 8, 0, 0);
    for (uint32_t j = 0; j < 40; j++)
        tb_op(&e, TM_INSERT, 6 * j + 1, j);
    for (uint32_t j = 0; j < 40; j += 2)
        tb_op(&e, TM_REMOVE, 6 * j + 1, 0);
    tb_op(&e, TM_RESERVE, 0, 100);
    for (uint32_t j = 1; j < 40; j += 2)
        tb_op(&e, TM_REMOVE, 6 * j + 1, 0);
    write_seed(T, "wrap", e.b, e.n);

    /* reserve and init under allocation failures, once and for good */
    for (int oom = -4; oom <= 4; oom += 2) {
        if (oom == 0)
            continue;
        tb_header(&e, 4, 0x12345678u, oom);
        for (uint32_t k = 0; k < 30; k++)
            tb_op(&e, TM_INSERT, 2 + 6 * k, k);
        tb_op(&e, TM_RESERVE, 0, 200);
        for (uint32_t k = 30; k < 60; k++)
            tb_op(&e, TM_INSERT, 2 + 6 * k, k);
        tb_op(&e, TM_REINIT, 0, 100);
        tb_op(&e, TM_INSERT, 5, 0);
        char name[32];
        snprintf(name, sizeof name, "oom-%s%d", oom < 0 ? "sticky" : "once",
                 oom < 0 ? -oom : oom);
        write_seed(T, name, e.b, e.n);
    }

    /* churn: random operations on keys from a small window */
    for (uint32_t s = 0; s < 3; s++) {
        tb_header(&e, rnd(0, 64), rnd(0, UINT32_MAX), 0);
        for (uint32_t i = 0; i < 400; i++) {
            uint32_t op = rnd(0, 9);
            op = op >= 5 ? (op < 8 ? TM_INSERT : TM_REMOVE) : op;
            tb_op(&e, op, rnd(0, 150), rnd(0, op == TM_RESERVE ? 60 : 65535));
        }
        char name[32];
        snprintf(name, sizeof name, "churn-%u", s);
        write_seed(T, name, e.b, e.n);
    }
}

/* ---- replicas: snapshots, gauges, KV sequences --------------------------- */

static lr_router *
replica_router(uint64_t replica, uint32_t n_inst)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.seed = 3;
    o.max_instances = 16;
    o.max_requests = 64;
    o.index_capacity_blocks = 4096;
    o.replica_id = replica;
    o.max_peers = 8;
    lr_router *r = NULL;
    if (lr_router_create(&o, &r) != LR_OK)
        exit(1);
    for (uint32_t i = 0; i < n_inst; i++) {
        char name[16];
        snprintf(name, sizeof name, "e%u", i);
        lr_instance_spec sp;
        lr_instance_spec_init(&sp);
        sp.name = name;
        sp.instance_class = i % 2;
        uint32_t id;
        if (lr_router_add_instance(r, &sp, &id) != LR_OK)
            exit(1);
    }
    return r;
}

static void
replica_route(lr_router *r, uint64_t id, uint32_t pattern, uint32_t len)
{
    uint32_t t[256];
    for (uint32_t i = 0; i < len; i++)
        t[i] = pattern * 1000 + i / 16 + (i % 16) * 7;
    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = t;
    q.n_tokens = len;
    q.now_ns = FUZZ_T0 + id * FUZZ_MS;
    lr_decision d;
    lr_decision_init(&d);
    if (lr_router_route(r, &q, &d) != LR_OK)
        exit(1);
}

static void
snap_seed(const char *name, lr_router *r, uint8_t mode)
{
    lr_blob *b = NULL;
    if (lr_router_snapshot(r, FUZZ_T0 + 50 * FUZZ_SEC, &b) != LR_OK)
        exit(1);
    size_t n = lr_blob_size(b);
    uint8_t *p = malloc(n + 1);
    p[0] = mode;
    memcpy(p + 1, lr_blob_data(b), n);
    write_seed("snapshot_load", name, p, n + 1);
    free(p);
    lr_blob_destroy(b);
}

static void
gen_snapshot(void)
{
    lr_router *r = replica_router(1, 0);
    snap_seed("empty", r, 0);
    lr_router_destroy(r);
    r = replica_router(1, 3);
    snap_seed("instances", r, 1);
    for (uint64_t i = 1; i <= 6; i++)
        replica_route(r, i, (uint32_t)i % 3, 48 + 16 * (uint32_t)(i % 4));
    (void)lr_router_drain_instance(r, 2, 1);
    snap_seed("routes", r, 2);
    /* a peer's delta, engine events with a watermark */
    lr_router *p = replica_router(2, 3);
    replica_route(p, 1, 5, 64);
    lr_blob *d = NULL;
    if (lr_router_export_delta(p, 0, &d, NULL) != LR_OK ||
        lr_router_import_delta(r, lr_blob_data(d), lr_blob_size(d), FUZZ_T0) !=
            LR_OK)
        exit(1);
    lr_blob_destroy(d);
    lr_router_destroy(p);
    struct mpw *w = calloc(1, sizeof *w);
    uint32_t t[32];
    for (uint32_t i = 0; i < 32; i++)
        t[i] = 9000 + i;
    uint64_t h[2] = { 41, 42 };
    struct mpw_stored s = mpw_stored_of(h, 2, t, 16);
    mpw_batch_ts(w, 1, false, 77.0);
    mpw_stored_array(w, &s, MPW_HASH_UINT);
    mpw_batch_end(w, false);
    if (lr_router_vllm_batch_seq(r, 1, 12, w->buf, w->n, FUZZ_T0, NULL) !=
        LR_OK)
        exit(1);
    free(w);
    snap_seed("full", r, 2);
    snap_seed("full-oom", r, 3 | (5 << 2));
    lr_router_destroy(r);
}

static void
gen_gauges(void)
{
    lr_router *a = replica_router(7, 4);
    for (uint64_t i = 1; i <= 9; i++)
        replica_route(a, i, (uint32_t)i % 4, 32);
    lr_blob *b = NULL;
    if (lr_router_export_gauges(a, &b) != LR_OK)
        exit(1);
    size_t n = lr_blob_size(b);
    uint8_t *p = malloc(n + 1);
    memcpy(p + 1, lr_blob_data(b), n);
    p[0] = 0;
    write_seed("gauge_apply", "plain", p, n + 1);
    p[0] = 1;
    write_seed("gauge_apply", "resealed", p, n + 1);
    p[0] = 1 | (1 << 1);
    write_seed("gauge_apply", "oom", p, n + 1);
    p[1 + 12] ^= 1; /* a bit of the origin: another replica, resealed */
    p[0] = 1;
    write_seed("gauge_apply", "other-origin", p, n + 1);
    free(p);
    lr_blob_destroy(b);
    lr_router *own = replica_router(1, 4);
    replica_route(own, 1, 1, 32);
    if (lr_router_export_gauges(own, &b) != LR_OK)
        exit(1);
    n = lr_blob_size(b);
    p = malloc(n + 1);
    p[0] = 0;
    memcpy(p + 1, lr_blob_data(b), n);
    write_seed("gauge_apply", "own-echo", p, n + 1);
    free(p);
    lr_blob_destroy(b);
    lr_router_destroy(own);
    lr_router_destroy(a);
}

/* An op of fuzz_kv_seq: op, instance, sequence byte, time step. */
static void
kvs_op(struct enc *e, uint32_t op, uint32_t inst, uint32_t sb, uint32_t step)
{
    put(e, 0, 255, op);
    put(e, 0, 3, inst);
    put(e, 0, 255, sb);
    put(e, 0, 255, step);
}

static void
gen_kv_seq(void)
{
    struct enc e = { .n = 0 };
    /* in order, a duplicate, a gap and its replay, a restart, a reset */
    kvs_op(&e, 0, 0, 3, 65);   /* first */
    kvs_op(&e, 0, 0, 3, 65);   /* next */
    kvs_op(&e, 1, 0, 2, 64);   /* back, same time: duplicate */
    kvs_op(&e, 0, 0, 5, 65);   /* two ahead: gap */
    kvs_op(&e, 0, 0, 3, 65);   /* the expected one: fills it */
    kvs_op(&e, 2, 0, 3, 65);   /* a clear */
    kvs_op(&e, 0, 0, 0, 90);   /* back in number, forward in time */
    kvs_op(&e, 0, 1, 250, 65); /* another source, far */
    kvs_op(&e, 3, 1, 0, 64);   /* reset */
    kvs_op(&e, 0, 3, 3, 64);   /* no such instance */
    write_seed("kv_seq", "rules", e.b, e.n);
    e.n = 0;
    for (uint32_t i = 0; i < 40; i++)
        kvs_op(&e, i % 3, i % 3, (i * 37) % 7, 60 + i % 9);
    write_seed("kv_seq", "mix", e.b, e.n);
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_ROOT (e.g. fuzz/corpus)\n", argv[0]);
        return 2;
    }
    root = argv[1];
    mkdir_p(root);
    gen_kv();
    gen_index_ops();
    gen_delta();
    gen_text();
    gen_load();
    gen_router();
    gen_vllm();
    gen_mlp();
    gen_policy();
    gen_snapshot();
    gen_gauges();
    gen_kv_seq();
    gen_table(); /* last: its rnd() calls leave the other seeds as they were */
    printf("wrote %d seeds under %s\n", n_written, root);
    return 0;
}
