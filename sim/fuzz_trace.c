/* libFuzzer harness for lrsim's trace line parser (sim/trace.c).
 *
 * The input is one line. Properties checked beyond "no crash":
 * - the parser returns 0 (a record), 1 (blank) or -1 (with a message);
 * - a record obeys the documented limits, and its hash_ids count matches
 *   input_length;
 * - a record written back as canonical JSON parses to the same record;
 * - turned into a workload request, its segments cover input_length.
 *
 *   ./build-fuzz/sim/fuzz_sim_trace -max_total_time=60 sim/corpus/trace
 *   ./build/sim/sim_trace-replay sim/corpus/trace        (every build) */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_helpers.h"
#include "trace.h"
#include "workload.h"

static char *
canonical(const struct sim_trace_rec *r, size_t *len)
{
    size_t cap = 128 + 24 * r->n_hash_ids;
    char *buf = malloc(cap);
    FUZZ_ASSERT(buf != NULL);
    size_t n = (size_t)snprintf(buf, cap,
                                "{\"timestamp\": %.17g, \"input_length\": %u, "
                                "\"output_length\": %u, \"hash_ids\": [",
                                r->timestamp_ms, r->input_length,
                                r->output_length);
    for (size_t i = 0; i < r->n_hash_ids; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, i ? ", " : "",
                              r->hash_ids[i]);
    n += (size_t)snprintf(buf + n, cap - n, "]");
    if (r->has_session)
        n += (size_t)snprintf(buf + n, cap - n, ", \"session_id\": %" PRIu64,
                              r->session);
    n += (size_t)snprintf(buf + n, cap - n, "}");
    FUZZ_ASSERT(n < cap);
    *len = n;
    return buf;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sim_trace_rec rec = { 0 };
    struct sim_err err = { { 0 } };
    int rc = sim_trace_parse_line((const char *)data, size, SIM_TRACE_BLOCK,
                                  &rec, &err);
    FUZZ_ASSERT(rc == 0 || rc == 1 || rc == -1);
    if (rc == -1)
        FUZZ_ASSERT(err.msg[0] != '\0');
    if (rc == 0) {
        FUZZ_ASSERT(err.msg[0] == '\0');
        FUZZ_ASSERT(rec.input_length >= 1 &&
                    rec.input_length <= SIM_TRACE_MAX_INPUT);
        FUZZ_ASSERT(rec.output_length >= 1 &&
                    rec.output_length <= SIM_TRACE_MAX_OUTPUT);
        FUZZ_ASSERT(rec.timestamp_ms >= 0 &&
                    rec.timestamp_ms <= SIM_TRACE_MAX_TS_MS);
        FUZZ_ASSERT(rec.n_hash_ids ==
                    (rec.input_length + SIM_TRACE_BLOCK - 1) / SIM_TRACE_BLOCK);
        size_t len;
        char *line = canonical(&rec, &len);
        struct sim_trace_rec again = { 0 };
        struct sim_err e2 = { { 0 } };
        FUZZ_ASSERT(sim_trace_parse_line(line, len, SIM_TRACE_BLOCK, &again,
                                         &e2) == 0);
        FUZZ_ASSERT(again.timestamp_ms == rec.timestamp_ms);
        FUZZ_ASSERT(again.input_length == rec.input_length);
        FUZZ_ASSERT(again.output_length == rec.output_length);
        FUZZ_ASSERT(again.n_hash_ids == rec.n_hash_ids);
        FUZZ_ASSERT(again.has_session == rec.has_session &&
                    again.session == rec.session);
        FUZZ_ASSERT(memcmp(again.hash_ids, rec.hash_ids,
                           rec.n_hash_ids * sizeof *rec.hash_ids) == 0);
        free(again.hash_ids);
        free(line);
        struct sim_workload w;
        sim_workload_init(&w);
        FUZZ_ASSERT(sim_trace_add(&w, &rec, SIM_TRACE_BLOCK, &e2) == 0);
        uint64_t total = 0;
        for (uint32_t i = 0; i < w.reqs[0].n_segs; i++)
            total += w.segs[w.reqs[0].seg_first + i].len;
        FUZZ_ASSERT(total == rec.input_length);
        sim_workload_free(&w);
    }
    free(rec.hash_ids);
    return 0;
}
