/* lrsim: Mooncake-format traces (JSON lines).
 *
 *   {"timestamp": 27482, "input_length": 6955, "output_length": 52,
 *    "hash_ids": [46, 47, 3717, 3718, 3719, 3720, 3721, 3722, 3723, 3724,
 *                 3725, 3726, 3727, 3728]}
 *
 * timestamp: arrival in ms (a non-negative number); input_length and
 * output_length: whole numbers >= 1; hash_ids: one non-negative integer per
 * block of `block` (512) prompt tokens, the last partial block included;
 * optionally session_id, a whole number: the request's session (a
 * conversation), which the router gets (session-affinity hashes it).
 * Other keys are ignored; a known key twice, a wrong type, a number out of
 * range, a hash_ids count that does not match input_length or anything
 * after the object is an error. Blank lines are skipped.
 *
 * Each hash id becomes one segment of `block` tokens named by the id (util.h
 * sim_token), the last one cut to input_length, so equal ids give equal
 * token blocks and the trace's prefix structure survives at any block size
 * the router or the engines use. */
#ifndef LRSIM_TRACE_H
#define LRSIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"
#include "workload.h"

/* Largest accepted values. */
#define SIM_TRACE_MAX_INPUT (1u << 22)  /* 4M tokens */
#define SIM_TRACE_MAX_OUTPUT (1u << 20) /* 1M tokens */
#define SIM_TRACE_MAX_TS_MS 1e12        /* about 31 years */
#define SIM_TRACE_BLOCK 512u

/* One parsed line. hash_ids is a buffer the parser grows and the caller
 * frees (free(rec->hash_ids)); reuse one record for every line. */
struct sim_trace_rec {
    double timestamp_ms;
    uint32_t input_length;
    uint32_t output_length;
    uint64_t *hash_ids;
    size_t n_hash_ids;
    size_t cap_hash_ids;
    int has_session;
    uint64_t session;
};

/* Parse one line (no newline needed; a trailing "\r" or "\n" is
 * whitespace; NUL bytes are data, not terminators). `block` is the tokens
 * per hash id (SIM_TRACE_BLOCK for Mooncake).
 * @return 0 for a record, 1 for a blank line, -1 for a malformed line with
 *   the reason in err (without file:line; the loader adds it). */
int sim_trace_parse_line(const char *line, size_t len, uint32_t block,
                         struct sim_trace_rec *rec, struct sim_err *err);

/* Segment seed of a hash id (the tokens of that block). */
uint64_t sim_trace_block_seed(uint64_t hash_id);

/* Append one parsed record to a workload (arrival = timestamp_ms * 1000
 * microseconds, rounded). 0 or -1 (out of memory, err set). */
int sim_trace_add(struct sim_workload *w, const struct sim_trace_rec *rec,
                  uint32_t block, struct sim_err *err);

/* Read a whole trace file into w (initialized, empty), then sort it by
 * arrival (stable). Errors are "PATH:LINE: reason", or "PATH: reason".
 * @return 0 or -1. On failure w holds whatever was read; free it. */
int sim_trace_load(const char *path, uint32_t block, struct sim_workload *w,
                   struct sim_err *err);

#endif /* LRSIM_TRACE_H */
