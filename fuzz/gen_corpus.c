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

#include "data_producer.h"
#include "index.h"
#include "index_util.h"
#include "lr_hash.h"

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

/* xorshift for the random-but-reproducible seeds */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t
rnd(uint32_t lo, uint32_t hi)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return lo + (uint32_t)(rs % ((uint64_t)hi - lo + 1));
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

/* oom: 0 none; n > 0 allocation n fails once; n < 0 allocation -n and
 * every one after */
static void
put_oom(struct enc *e, int oom)
{
    if (oom == 0) {
        put(e, 0, 3, 0);
    } else {
        put(e, 0, 3, oom > 0 ? 2 : 3);
        put(e, 1, 1024, (uint32_t)(oom > 0 ? oom : -oom));
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
    put_oom(e, oom);
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
    put_oom(e, oom);
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

    /* the worked example of index.c: two instances, a fork, a match */
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
    uint32_t tok[512];
    fuzz_pattern_fill(tok, len, pattern, 0, tweak);
    lr_prompt p = LR_PROMPT_INIT;
    p.tokens = tok;
    p.n_tokens = len;
    p.tenant_salt = salt;
    p.boundaries = bound ? &bound : NULL;
    p.n_boundaries = bound ? 1 : 0;
    if (lr_index_learn(ix, &p, inst, trust, 5000000000ull) != LR_OK)
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
        for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
            if (offs[i] >= n - 8)
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
    memset(c->b, 0, 40);
    memcpy(c->b, "LRDX", 4);
    lr__put_u16(c->b + 4, 1);
    lr__put_u32(c->b + 8, B);
    lr__put_u32(c->b + 12, nn);
    lr__put_u32(c->b + 16, nr);
    lr__put_u64(c->b + 32, 1);
    c->n = 40;
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
}

static void
craft_end(struct craft *c, const char *name)
{
    lr__put_u64(c->b + c->n, lr__hash(c->b, c->n, LR_SEED_DELTA));
    c->n += 8;
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
    printf("wrote %d seeds under %s\n", n_written, root);
    return 0;
}
