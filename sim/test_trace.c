/* lrsim tests: the Mooncake trace reader, on good and malformed lines, and
 * the expansion of hash ids into token blocks. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trace.h"
#include "workload.h"

static int
parse(const char *line, struct sim_trace_rec *rec, struct sim_err *err)
{
    memset(err, 0, sizeof *err);
    return sim_trace_parse_line(line, strlen(line), SIM_TRACE_BLOCK, rec, err);
}

static void
test_good_lines(void **state)
{
    (void)state;
    struct sim_trace_rec rec = { 0 };
    struct sim_err err;
    assert_int_equal(parse("{\"timestamp\": 27482, \"input_length\": 1030, "
                           "\"output_length\": 52, \"hash_ids\": [46, 47, 9]}",
                           &rec, &err),
                     0);
    assert_true(rec.timestamp_ms == 27482.0);
    assert_int_equal(rec.input_length, 1030);
    assert_int_equal(rec.output_length, 52);
    assert_int_equal(rec.n_hash_ids, 3);
    assert_int_equal(rec.hash_ids[2], 9);
    /* any key order, unknown keys of any type, whitespace, CRLF, integral
     * numbers written with a fraction or exponent, big ids */
    assert_int_equal(
        parse(" {\"hash_ids\":[18446744073709551615],\"extra\":{\"a\":[1,"
              "{\"b\":null}],\"c\":\"x\\\"\\u00e9\"},\"output_length\":1.0e0,"
              "\"input_length\":512,\"flag\":true,\"timestamp\":1.5e3}\r\n",
              &rec, &err),
        0);
    assert_true(rec.timestamp_ms == 1500.0);
    assert_int_equal(rec.input_length, 512);
    assert_int_equal(rec.output_length, 1);
    assert_true(rec.hash_ids[0] == UINT64_MAX);
    /* an escaped key is the same key */
    assert_int_equal(parse("{\"\\u0074imestamp\": 0, \"input_length\": 1, "
                           "\"output_length\": 1, \"hash_ids\": [0]}",
                           &rec, &err),
                     0);
    assert_false(rec.has_session);
    /* a session (a conversation), passed to the router */
    assert_int_equal(parse("{\"timestamp\": 0, \"input_length\": 1, "
                           "\"output_length\": 1, \"hash_ids\": [0], "
                           "\"session_id\": 18446744073709551615}",
                           &rec, &err),
                     0);
    assert_true(rec.has_session);
    assert_true(rec.session == UINT64_MAX);
    struct sim_workload w;
    sim_workload_init(&w);
    assert_int_equal(sim_trace_add(&w, &rec, SIM_TRACE_BLOCK, &err), 0);
    assert_true(w.reqs[0].has_session && w.reqs[0].session == UINT64_MAX);
    sim_workload_free(&w);
    /* blank lines */
    assert_int_equal(parse("", &rec, &err), 1);
    assert_int_equal(parse("  \t\r\n", &rec, &err), 1);
    free(rec.hash_ids);
}

static void
test_bad_lines(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        const char *why;
    } cases[] = {
        { "[1, 2]", "one JSON object" },
        { "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}",
          "missing key \"hash_ids\"" },
        { "{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
          "missing key \"timestamp\"" },
        { "{\"timestamp\": \"1\", \"input_length\": 1, \"output_length\": 1, "
          "\"hash_ids\": [1]}",
          "timestamp must be a number" },
        { "{\"timestamp\": -5, \"input_length\": 1, \"output_length\": 1, "
          "\"hash_ids\": [1]}",
          "timestamp must not be negative" },
        { "{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1, "
          "\"hash_ids\": []}",
          "input_length out of range" },
        { "{\"timestamp\": 1, \"input_length\": 10.5, \"output_length\": 1, "
          "\"hash_ids\": [1]}",
          "input_length must be a whole number" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 0, "
          "\"hash_ids\": [1]}",
          "output_length out of range" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": -1, "
          "\"hash_ids\": [1]}",
          "output_length must not be negative" },
        { "{\"timestamp\": 1, \"input_length\": 1000, \"output_length\": 1, "
          "\"hash_ids\": [1]}",
          "needs ceil(1000/512) = 2" },
        { "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, "
          "\"hash_ids\": [1], \"session_id\": -1}",
          "session_id must not be negative" },
        { "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, "
          "\"hash_ids\": [1], \"session_id\": 1, \"session_id\": 2}",
          "key \"session_id\" appears twice" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, "
          "\"hash_ids\": [1, \"2\"]}",
          "hash_ids element must be a number" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, "
          "\"hash_ids\": 5}",
          "hash_ids must be an array" },
        { "{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 10, "
          "\"output_length\": 1, \"hash_ids\": [1]}",
          "appears twice" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, "
          "\"hash_ids\": [1]} x",
          "unexpected text after the object" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, "
          "\"hash_ids\": [1]",
          "expected '}'" },
        { "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, "
          "\"hash_ids\": [1,]}",
          "hash_ids element must be a number" },
        { "{\"timestamp\": 1, \"input_length\": 99999999999999999999999, "
          "\"output_length\": 1, \"hash_ids\": [1]}",
          "input_length too large" },
        { "{\"timestamp\": 01, \"input_length\": 1, \"output_length\": 1, "
          "\"hash_ids\": [1]}",
          "expected" },
        { "{\"a\": \"unterminated", "unterminated string" },
        { "{\"a\": \"bad \\q escape\"}", "bad escape" },
        { "{\"a\": tru}", "expected a JSON value" },
        { "{\"a\" 1}", "expected ':'" },
        { "{1: 2}", "expected a key" },
        { "{\"timestamp\": 1e999, \"input_length\": 1, \"output_length\": 1, "
          "\"hash_ids\": [1]}",
          "timestamp out of range" },
    };
    struct sim_trace_rec rec = { 0 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sim_err err;
        int rc = parse(cases[i].line, &rec, &err);
        if (rc != -1 || strstr(err.msg, cases[i].why) == NULL)
            fail_msg("line %zu <%s>: rc %d, message \"%s\", wanted \"%s\"", i,
                     cases[i].line, rc, err.msg, cases[i].why);
    }
    /* deep nesting is refused, not recursed into without bound */
    char deep[200];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{\"a\": ");
    for (int i = 0; i < 40; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    struct sim_err err;
    assert_int_equal(parse(deep, &rec, &err), -1);
    assert_non_null(strstr(err.msg, "nested too deeply"));
    /* a NUL inside the line is data, not an end */
    static const char nul[] = "{\"timestamp\": 1\0, \"input_length\": 1}";
    memset(&err, 0, sizeof err);
    assert_int_equal(sim_trace_parse_line(nul, sizeof nul - 1, 512, &rec, &err),
                     -1);
    free(rec.hash_ids);
}

static char *
write_temp(const char *text)
{
    char *path = strdup("/tmp/lrsim-test-trace-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

static void
test_load_file(void **state)
{
    (void)state;
    char *path = write_temp(
        "{\"timestamp\": 3000, \"input_length\": 600, \"output_length\": 5, "
        "\"hash_ids\": [0, 1]}\n"
        "\n"
        "{\"timestamp\": 1000, \"input_length\": 520, \"output_length\": 7, "
        "\"hash_ids\": [0, 2]}\n");
    struct sim_workload w;
    sim_workload_init(&w);
    struct sim_err err = { { 0 } };
    assert_int_equal(sim_trace_load(path, SIM_TRACE_BLOCK, &w, &err), 0);
    assert_int_equal(w.n_reqs, 2);
    /* sorted by arrival */
    assert_int_equal(w.reqs[0].arrival_us, 1000000);
    assert_int_equal(w.reqs[0].input_tokens, 520);
    assert_int_equal(w.reqs[1].output_tokens, 5);
    /* equal ids give equal blocks; the last block is cut */
    uint32_t a[600], b[520];
    sim_workload_tokens(&w, 1, a, NULL, NULL);
    sim_workload_tokens(&w, 0, b, NULL, NULL);
    assert_memory_equal(a, b, 512 * sizeof *a);
    assert_int_equal(w.segs[w.reqs[0].seg_first + 1].len, 8);
    assert_int_equal(w.segs[w.reqs[1].seg_first + 1].len, 88);
    assert_memory_not_equal(a + 512, b + 512, 8 * sizeof *a);
    uint32_t c[8];
    sim_tokens(sim_trace_block_seed(1), 0, 8, c);
    assert_memory_equal(a + 512, c, sizeof c);
    sim_workload_free(&w);
    unlink(path);
    free(path);

    /* a malformed line names file and line */
    path = write_temp(
        "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
        "\"hash_ids\": [0]}\n"
        "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
        "\"hash_ids\": [0, 1]}\n");
    sim_workload_init(&w);
    memset(&err, 0, sizeof err);
    assert_int_equal(sim_trace_load(path, SIM_TRACE_BLOCK, &w, &err), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:2: hash_ids has 2 ids", path);
    if (strstr(err.msg, want) == NULL)
        fail_msg("got \"%s\", wanted \"%s\"", err.msg, want);
    sim_workload_free(&w);
    unlink(path);
    free(path);

    /* empty and missing files */
    path = write_temp("\n\n");
    sim_workload_init(&w);
    memset(&err, 0, sizeof err);
    assert_int_equal(sim_trace_load(path, SIM_TRACE_BLOCK, &w, &err), -1);
    assert_non_null(strstr(err.msg, "no requests"));
    sim_workload_free(&w);
    unlink(path);
    free(path);
    memset(&err, 0, sizeof err);
    assert_int_equal(sim_trace_load("/nonexistent/x.jsonl", 512, &w, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/x.jsonl: "));
}

static void
test_scale_and_limit(void **state)
{
    (void)state;
    struct sim_workload w;
    sim_workload_init(&w);
    struct sim_seg s = { 7, 100, 0 };
    struct sim_err err = { { 0 } };
    for (int i = 0; i < 10; i++)
        assert_int_equal(sim_workload_add(&w, (uint64_t)i * 1000, 3, &s, 1, 0,
                                          0, &err),
                         0);
    sim_workload_scale_time(&w, 0.5);
    assert_int_equal(w.reqs[9].arrival_us, 4500);
    sim_workload_truncate(&w, 4);
    assert_int_equal(w.n_reqs, 4);
    /* zero-length and zero-output requests are refused */
    struct sim_seg z = { 7, 0, 0 };
    assert_int_equal(sim_workload_add(&w, 0, 3, &z, 1, 0, 0, &err), -1);
    sim_workload_free(&w);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_lines),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_scale_and_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
