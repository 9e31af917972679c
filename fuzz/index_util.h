/* Pieces shared by the lr_index harnesses: token patterns that make
 * prefixes collide, a tracer for reproductions, and the checks every
 * index harness runs after a call. */
#ifndef LIBROUTE_FUZZ_INDEX_UTIL_H
#define LIBROUTE_FUZZ_INDEX_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data_producer.h"
#include "libroute/lr_index.h"

/* Token patterns. Pattern 0 is all zeros, 1 alternates 0 1, 2 and 3 are
 * pseudo-random over {0,1,2} and {0..999}; every pattern is a pure
 * function of the position, so two prompts that start at the same offset
 * of a pattern share their prefix up to the shorter length. */
#define FUZZ_N_PATTERNS 4u
uint32_t fuzz_pattern_token(uint32_t pattern, uint32_t pos);
/* out[i] = pattern token at start + i; then, when tweak < n, the token at
 * `tweak` is flipped, forking the prompt from its pattern there. */
void fuzz_pattern_fill(uint32_t *out, size_t n, uint32_t pattern,
                       uint32_t start, uint32_t tweak);

/* Learn the prompt of fuzz_pattern_fill(len, pattern, start, tweak)
 * (len <= FUZZ_LEARN_MAX) with the given tenant salt and boundaries for
 * `inst`; returns what lr_index_learn() returned. */
#define FUZZ_LEARN_MAX 512u
lr_status fuzz_learn_pattern(lr_index *ix, uint32_t inst, int32_t trust,
                             uint64_t salt, uint32_t pattern, uint32_t start,
                             uint32_t len, uint32_t tweak,
                             const uint32_t *bounds, size_t n_bounds,
                             uint64_t now);

/* Trace of decoded calls (set LR_FUZZ_TRACE=1 in the environment): what a
 * bug report's reproduction is made of. */
bool fuzz_trace_on(void);
void fuzz_trace(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* A failing allocator (B33 in fuzz form): once armed it counts
 * allocations and fails number fail_at (1-based), only that one or, when
 * sticky, every one from then on. fail_at == 0 never fails. The checks in
 * this file pause it, so that pass-one verification does not shift the
 * count and the replays of an input fail at the same call. */
struct fuzz_oom {
    uint64_t count;
    uint64_t fail_at;
    bool sticky;
    bool armed;
    uint64_t failures;
};
/* Fill *a with hooks backed by *o (which must outlive the index). */
void fuzz_oom_allocator(struct fuzz_oom *o, lr_allocator *a);
/* The allocation failure an op-stream header asks for: a mode 0..3 (none,
 * none, once, from then on) and, for the last two, which allocation
 * 1..max_at fails. Sets *fail_at (0: none) and *sticky. */
void fuzz_oom_decode(fuzz_dp *dp, uint32_t max_at, uint64_t *fail_at,
                     bool *sticky);
/* The allocation failure a control value 0..63 asks for: 0 none, 1..31
 * that allocation only, 32..63 allocation sel - 31 and every one after.
 * Resets *o. */
void fuzz_oom_select(struct fuzz_oom *o, unsigned sel);
/* Pause/resume failure injection around checks (nests). */
void fuzz_oom_pause(void);
void fuzz_oom_resume(void);

/* lr__index_verify() == LR_OK, else abort with the call site. */
void fuzz_index_verify_at(const lr_index *ix, const char *file, int line);
#define FUZZ_VERIFY(ix) fuzz_index_verify_at((ix), __FILE__, __LINE__)

/* Check a match result against the prompt's keys with lr__index_depth_of()
 * for every id in ids[] (all ids the index may know; n_ids == 0 skips the
 * "nobody else matched" part). hits_before is a copy of the hits buffer
 * made before the call, to check that LR_EBUFSIZE wrote nothing. */
void fuzz_check_match(const lr_index *ix, lr_status st, const uint64_t *keys,
                      size_t n_keys, const lr_index_match_result *r,
                      const lr_index_hit *hits_before, const uint32_t *ids,
                      size_t n_ids);

/* After lr_index_match(LR_MATCH_NO_TOUCH) at now returned st (LR_OK or
 * LR_EBUFSIZE) and *r for these keys: the match left expiry settled, so
 * lr__index_peek() (with a scratch of its own and a buffer of the same
 * capacity) must give the same status, counts and hits, and change neither
 * the digest nor any byte of the index's struct. The scratch comes from
 * the index's allocator with failure injection paused. */
void fuzz_check_peek(lr_index *ix, lr_status st, const uint64_t *keys,
                     size_t n_keys, uint64_t now,
                     const lr_index_match_result *r);

/* ---- the op-stream harnesses on lr_index (index_ops, kv_events) ---- */

/* Host time: a run starts at FUZZ_SEC and moves on in ticks. */
#define FUZZ_TICK (1ull << 24)
/* The header's TTL choice 0..3: the default, 4 ticks, 64 ticks, never. */
uint64_t fuzz_index_ttl(fuzz_dp *dp);
/* A time step 0..3: none, 1 tick, 16 ticks, past an hour. */
uint64_t fuzz_index_dt(fuzz_dp *dp);

/* The host's clock moved to now (after fuzz_index_dt): a jump past the
 * index's skew is refused once and taken at the retry, as lr_index.h
 * documents; the harness tells each index so with lr_index_expire(). */
void fuzz_index_clock(lr_index *ix, uint64_t now);

/* One run of an input. The first checks every property; the replays only
 * compare what they saw with it (B24). */
struct fuzz_index_run {
    struct fuzz_oom oom;
    bool check;          /* check the properties (the first run) */
    uint64_t seed_xor;   /* xored into the index seed */
    uint64_t transcript; /* every observable result (fuzz_note) */
    uint64_t digest[2];  /* each index's digest at the end */
};

/* After an index call: note its status; when checking, verify the index
 * and, for a failed call, require the digest from before the call (d0). */
void fuzz_index_after(struct fuzz_index_run *r, lr_index *ix, lr_status st,
                      uint64_t d0, bool failed);

/* The queries both harnesses make, which must change nothing:
 * lr_index_get_stats() succeeds, with at most `capacity` blocks, and
 * lr_index_instance_blocks(inst) gives LR_OK (at most the index's blocks),
 * LR_ENOENT, or LR_EINVAL for LR_INSTANCE_NONE. The counters both
 * harnesses report go into the transcript. Fills *s and *blocks; returns
 * the status of lr_index_instance_blocks(). */
lr_status fuzz_index_query(struct fuzz_index_run *r, const lr_index *ix,
                           uint32_t inst, uint64_t capacity, lr_index_stats *s,
                           uint64_t *blocks);

/* Run the input through run_once three times: checking, then again, then
 * with another index seed; the digests and transcripts must agree. With
 * LR_FUZZ_TRACE set, only the first run (one trace is enough). */
void fuzz_index_replays(void (*run_once)(struct fuzz_index_run *r,
                                         const uint8_t *data, size_t size),
                        const uint8_t *data, size_t size);

/* The delta wire format (lib/index/index_delta.c): a header of FUZZ_DELTA_HEADER
 * bytes (version 2; 0.1's version 1 had 40), the tables, then an 8-byte
 * checksum of everything before it. */
#define FUZZ_DELTA_HEADER 48
/* Rewrite the trailing checksum of the n bytes at b to match what comes
 * before it, so that a mutated delta reaches the parser (n < 8: left as
 * is). */
void fuzz_delta_reseal(uint8_t *b, size_t n);

/* Block keys of tokens (capacity >= n / B), as lr_block_keys() computes
 * them; returns the count. */
size_t fuzz_keys(uint32_t B, const uint32_t *tokens, size_t n, uint64_t salt,
                 uint64_t *keys, size_t capacity);

#endif /* LIBROUTE_FUZZ_INDEX_UTIL_H */
