/* lrsim: the Mooncake trace reader (see trace.h).
 *
 * A small strict JSON scanner for one flat object per line: it knows the
 * four fields, skips any other value (nested up to MAX_DEPTH), checks
 * string syntax (escapes, no raw control characters) and number syntax
 * (RFC 8259 grammar) itself, and never reads past `len`, so a line may
 * hold NUL bytes or end without a terminator (the fuzz harness relies on
 * it). */
#define _POSIX_C_SOURCE 200809L
#include "trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32
#define MAX_NUM_CHARS 64
#define KEY_MAX 32

struct scan {
    const char *p, *end;
    struct sim_err *err;
};

static int
fail(struct scan *s, const char *what)
{
    return sim_errf(s->err, "%s", what);
}

static void
skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' ||
                             *s->p == '\r'))
        s->p++;
}

/* Expect one character (after whitespace). */
static int
expect(struct scan *s, char c, const char *ctx)
{
    skip_ws(s);
    if (s->p >= s->end)
        return sim_errf(s->err, "line ends %s (expected '%c')", ctx, c);
    if (*s->p != c)
        return sim_errf(s->err, "expected '%c' %s, got '%c'", c, ctx,
                        (*s->p >= 0x20 && *s->p < 0x7f) ? *s->p : '?');
    s->p++;
    return 0;
}

static int
hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Scan a string (the opening quote is next). If out is non-NULL, the
 * decoded ASCII text goes there (at most KEY_MAX bytes + NUL); *ascii is
 * cleared when the text does not fit or holds non-ASCII, so that it cannot
 * equal any known key. */
static int
scan_string(struct scan *s, char *out, int *ascii)
{
    if (expect(s, '"', "before a string") != 0)
        return -1;
    size_t n = 0;
    if (ascii)
        *ascii = 1;
    for (;;) {
        if (s->p >= s->end)
            return fail(s, "unterminated string");
        unsigned char c = (unsigned char)*s->p++;
        unsigned code = c;
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(s, "control character inside a string");
        if (c == '\\') {
            if (s->p >= s->end)
                return fail(s, "unterminated string");
            char e = *s->p++;
            switch (e) {
            case '"': code = '"'; break;
            case '\\': code = '\\'; break;
            case '/': code = '/'; break;
            case 'b': code = '\b'; break;
            case 'f': code = '\f'; break;
            case 'n': code = '\n'; break;
            case 'r': code = '\r'; break;
            case 't': code = '\t'; break;
            case 'u':
                code = 0;
                for (int i = 0; i < 4; i++) {
                    int h = s->p < s->end ? hexval(*s->p) : -1;
                    if (h < 0)
                        return fail(s, "bad \\u escape in a string");
                    code = code * 16 + (unsigned)h;
                    s->p++;
                }
                break;
            default:
                return fail(s, "bad escape in a string");
            }
        }
        if (out != NULL) {
            if (code >= 0x80 || code == 0 || n >= KEY_MAX)
                *ascii = 0;
            else
                out[n++] = (char)code;
        }
    }
    if (out != NULL)
        out[n] = '\0';
    return 0;
}

/* A JSON number token; its text (NUL-terminated) goes to buf. *integral is
 * set when it has neither fraction nor exponent. */
static int
scan_number(struct scan *s, char *buf, int *integral)
{
    const char *start = s->p;
    const char *q = s->p;
    *integral = 1;
    if (q < s->end && *q == '-')
        q++;
    if (q >= s->end || *q < '0' || *q > '9')
        return fail(s, "expected a number");
    if (*q == '0')
        q++;
    else
        while (q < s->end && *q >= '0' && *q <= '9')
            q++;
    if (q < s->end && *q == '.') {
        *integral = 0;
        q++;
        if (q >= s->end || *q < '0' || *q > '9')
            return fail(s, "bad number: digits must follow '.'");
        while (q < s->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        *integral = 0;
        q++;
        if (q < s->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= s->end || *q < '0' || *q > '9')
            return fail(s, "bad number: digits must follow the exponent");
        while (q < s->end && *q >= '0' && *q <= '9')
            q++;
    }
    size_t n = (size_t)(q - start);
    if (n >= MAX_NUM_CHARS)
        return fail(s, "number too long");
    memcpy(buf, start, n);
    buf[n] = '\0';
    s->p = q;
    return 0;
}

static int scan_skip_value(struct scan *s, int depth);

static int
scan_literal(struct scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return fail(s, "expected a JSON value");
    s->p += n;
    return 0;
}

/* Skip the elements of an array or the members of an object whose opening
 * bracket was consumed. */
static int
scan_skip_members(struct scan *s, int depth, char close, int object)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        if (object) {
            if (scan_string(s, NULL, NULL) != 0 ||
                expect(s, ':', "after a key") != 0)
                return -1;
        }
        if (scan_skip_value(s, depth + 1) != 0)
            return -1;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        return expect(s, close, object ? "to close an object"
                                        : "to close an array");
    }
}

/* Skip any JSON value (for keys lrsim does not use). */
static int
scan_skip_value(struct scan *s, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(s, "value nested too deeply");
    skip_ws(s);
    if (s->p >= s->end)
        return fail(s, "line ends where a value should be");
    char c = *s->p;
    char num[MAX_NUM_CHARS];
    int integral;
    switch (c) {
    case '"':
        return scan_string(s, NULL, NULL);
    case '{':
        s->p++;
        return scan_skip_members(s, depth, '}', 1);
    case '[':
        s->p++;
        return scan_skip_members(s, depth, ']', 0);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    default:
        return scan_number(s, num, &integral);
    }
}

static int
starts_number(const struct scan *s)
{
    return s->p < s->end &&
           (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'));
}

/* A whole number in [lo, hi]. Plain integers are read exactly; a number
 * with a fraction or exponent is accepted only when it is integral and at
 * most 2^53 (6758.0 is 6758; 6758.5 is an error). */
static int
scan_uint(struct scan *s, const char *field, uint64_t lo, uint64_t hi,
          uint64_t *out)
{
    char num[MAX_NUM_CHARS];
    int integral;
    skip_ws(s);
    if (!starts_number(s))
        return sim_errf(s->err, "%s must be a number", field);
    if (scan_number(s, num, &integral) != 0)
        return -1;
    if (num[0] == '-') {
        /* "-0" (in any spelling) is zero; anything else is negative */
        if (strtod(num, NULL) != 0)
            return sim_errf(s->err, "%s must not be negative (%s)", field,
                            num);
        num[0] = '0';
    }
    uint64_t v = 0;
    if (integral) {
        for (const char *q = num; *q; q++) {
            uint64_t d = (uint64_t)(*q - '0');
            if (v > (UINT64_MAX - d) / 10)
                return sim_errf(s->err, "%s too large (%s)", field, num);
            v = v * 10 + d;
        }
    } else {
        errno = 0;
        double x = strtod(num, NULL);
        if (errno == ERANGE || !isfinite(x) || x > 9007199254740992.0)
            return sim_errf(s->err, "%s too large (%s)", field, num);
        if (x != floor(x))
            return sim_errf(s->err, "%s must be a whole number (%s)", field,
                            num);
        v = x < 0 ? 0 : (uint64_t)x;
    }
    if (v < lo || v > hi)
        return sim_errf(s->err, "%s out of range (%s; must be %llu..%llu)",
                        field, num, (unsigned long long)lo,
                        (unsigned long long)hi);
    *out = v;
    return 0;
}

static int
scan_timestamp(struct scan *s, double *out)
{
    char num[MAX_NUM_CHARS];
    int integral;
    skip_ws(s);
    if (!starts_number(s))
        return sim_errf(s->err, "timestamp must be a number");
    if (scan_number(s, num, &integral) != 0)
        return -1;
    errno = 0;
    double x = strtod(num, NULL);
    if (x == 0)
        x = 0; /* -0 */
    if (errno == ERANGE && x != 0)
        return sim_errf(s->err, "timestamp out of range (%s)", num);
    if (!(x >= 0))
        return sim_errf(s->err, "timestamp must not be negative (%s)", num);
    if (x > SIM_TRACE_MAX_TS_MS)
        return sim_errf(s->err, "timestamp out of range (%s ms)", num);
    *out = x;
    return 0;
}

static int
scan_hash_ids(struct scan *s, struct sim_trace_rec *rec)
{
    skip_ws(s);
    if (s->p >= s->end || *s->p != '[')
        return sim_errf(s->err, "hash_ids must be an array of integers");
    s->p++;
    rec->n_hash_ids = 0;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        uint64_t v;
        if (scan_uint(s, "hash_ids element", 0, UINT64_MAX, &v) != 0)
            return -1;
        /* input_length bounds the count; stop absurd arrays early */
        if (rec->n_hash_ids >= SIM_TRACE_MAX_INPUT)
            return sim_errf(s->err, "hash_ids has more than %u elements",
                            SIM_TRACE_MAX_INPUT);
        if (sim_grow((void **)&rec->hash_ids, &rec->cap_hash_ids,
                     rec->n_hash_ids + 1, sizeof *rec->hash_ids) != 0)
            return sim_errf(s->err, "out of memory");
        rec->hash_ids[rec->n_hash_ids++] = v;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        return expect(s, ']', "to close hash_ids");
    }
}

enum { F_TS = 1, F_IN = 2, F_OUT = 4, F_IDS = 8, F_ALL = 15, F_SESSION = 16 };

static int
scan_member(struct scan *s, struct sim_trace_rec *rec, unsigned *seen)
{
    char key[KEY_MAX + 1];
    int ascii;
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"')
        return fail(s, "expected a key (a string)");
    if (scan_string(s, key, &ascii) != 0 ||
        expect(s, ':', "after a key") != 0)
        return -1;
    unsigned f = 0;
    if (ascii) {
        if (strcmp(key, "timestamp") == 0)
            f = F_TS;
        else if (strcmp(key, "input_length") == 0)
            f = F_IN;
        else if (strcmp(key, "output_length") == 0)
            f = F_OUT;
        else if (strcmp(key, "hash_ids") == 0)
            f = F_IDS;
        else if (strcmp(key, "session_id") == 0)
            f = F_SESSION;
    }
    if (f == 0)
        return scan_skip_value(s, 1);
    if (*seen & f)
        return sim_errf(s->err, "key \"%s\" appears twice", key);
    *seen |= f;
    uint64_t v;
    switch (f) {
    case F_TS:
        return scan_timestamp(s, &rec->timestamp_ms);
    case F_IN:
        if (scan_uint(s, "input_length", 1, SIM_TRACE_MAX_INPUT, &v) != 0)
            return -1;
        rec->input_length = (uint32_t)v;
        return 0;
    case F_OUT:
        if (scan_uint(s, "output_length", 1, SIM_TRACE_MAX_OUTPUT, &v) != 0)
            return -1;
        rec->output_length = (uint32_t)v;
        return 0;
    case F_SESSION:
        if (scan_uint(s, "session_id", 0, UINT64_MAX, &rec->session) != 0)
            return -1;
        rec->has_session = 1;
        return 0;
    default:
        return scan_hash_ids(s, rec);
    }
}

static int
check_record(const struct sim_trace_rec *rec, unsigned seen, uint32_t block,
             struct sim_err *err)
{
    static const char *names[4] = { "timestamp", "input_length",
                                    "output_length", "hash_ids" };
    for (unsigned i = 0; i < 4; i++)
        if (!(seen & (1u << i)))
            return sim_errf(err, "missing key \"%s\"", names[i]);
    uint64_t want = ((uint64_t)rec->input_length + block - 1) / block;
    if (rec->n_hash_ids != want)
        return sim_errf(err,
                        "hash_ids has %zu ids but input_length %u needs "
                        "ceil(%u/%u) = %llu",
                        rec->n_hash_ids, rec->input_length, rec->input_length,
                        block, (unsigned long long)want);
    return 0;
}

int
sim_trace_parse_line(const char *line, size_t len, uint32_t block,
                     struct sim_trace_rec *rec, struct sim_err *err)
{
    struct scan s = { line, line + len, err };
    if (block == 0)
        return sim_errf(err, "trace block size must be >= 1");
    skip_ws(&s);
    if (s.p == s.end)
        return 1;
    rec->timestamp_ms = 0;
    rec->input_length = rec->output_length = 0;
    rec->n_hash_ids = 0;
    rec->has_session = 0;
    rec->session = 0;
    if (*s.p != '{')
        return fail(&s, "a line must be one JSON object ('{' ... '}')");
    s.p++;
    unsigned seen = 0;
    skip_ws(&s);
    if (s.p < s.end && *s.p == '}') {
        s.p++;
    } else {
        for (;;) {
            if (scan_member(&s, rec, &seen) != 0)
                return -1;
            skip_ws(&s);
            if (s.p < s.end && *s.p == ',') {
                s.p++;
                continue;
            }
            if (expect(&s, '}', "to close the object") != 0)
                return -1;
            break;
        }
    }
    skip_ws(&s);
    if (s.p != s.end)
        return fail(&s, "unexpected text after the object");
    return check_record(rec, seen, block, err);
}

uint64_t
sim_trace_block_seed(uint64_t hash_id)
{
    return sim_mix64(hash_id ^ 0x6d6f6f6e63616b65ull); /* "mooncake" */
}

int
sim_trace_add(struct sim_workload *w, const struct sim_trace_rec *rec,
              uint32_t block, struct sim_err *err)
{
    /* segments go straight into the workload: no per-line buffer */
    size_t n = rec->n_hash_ids;
    if (n == 0 || n > UINT32_MAX)
        return sim_errf(err, "record without blocks");
    if (sim_grow((void **)&w->segs, &w->cap_segs, w->n_segs + n,
                 sizeof *w->segs) != 0)
        return sim_errf(err, "out of memory");
    struct sim_seg *s = w->segs + w->n_segs;
    uint32_t left = rec->input_length;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = left < block ? left : block;
        s[i] = (struct sim_seg){ sim_trace_block_seed(rec->hash_ids[i]), len,
                                 0 };
        left -= len;
    }
    size_t first = w->n_segs;
    w->n_segs += n;
    if (sim_grow((void **)&w->reqs, &w->cap_reqs, w->n_reqs + 1,
                 sizeof *w->reqs) != 0) {
        w->n_segs = first;
        return sim_errf(err, "out of memory");
    }
    struct sim_req *q = &w->reqs[w->n_reqs++];
    memset(q, 0, sizeof *q);
    q->arrival_us = (uint64_t)llround(rec->timestamp_ms * 1000.0);
    q->input_tokens = rec->input_length;
    q->output_tokens = rec->output_length;
    q->seg_first = first;
    q->n_segs = (uint32_t)n;
    q->has_session = (uint32_t)rec->has_session;
    q->session = rec->session;
    return 0;
}

int
sim_trace_load(const char *path, uint32_t block, struct sim_workload *w,
               struct sim_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sim_errf(err, "%s: %s", path, strerror(errno));
    struct sim_trace_rec rec = { 0 };
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    unsigned long long lineno = 0;
    int rc = 0;
    errno = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        struct sim_err e = { { 0 } };
        int r = sim_trace_parse_line(line, (size_t)n, block, &rec, &e);
        if (r < 0) {
            rc = sim_errf(err, "%s:%llu: %s", path, lineno, e.msg);
            break;
        }
        if (r == 0 && sim_trace_add(w, &rec, block, &e) != 0) {
            rc = sim_errf(err, "%s:%llu: %s", path, lineno, e.msg);
            break;
        }
    }
    if (rc == 0 && ferror(f))
        rc = sim_errf(err, "%s: read error: %s", path, strerror(errno));
    fclose(f);
    free(line);
    free(rec.hash_ids);
    if (rc == 0 && w->n_reqs == 0)
        rc = sim_errf(err, "%s: no requests in the trace", path);
    if (rc == 0)
        rc = sim_workload_sort(w, err);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        snprintf(w->name, sizeof w->name, "%s", base ? base + 1 : path);
        snprintf(w->desc, sizeof w->desc, "Mooncake-format trace %s", path);
        snprintf(w->cluster, sizeof w->cluster, "8xa100");
    }
    return rc;
}
