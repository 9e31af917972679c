/* lrsim: the regime suite's cells, ratios, table and JSON (see suite.h). */
#define _POSIX_C_SOURCE 200809L
#include "suite.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

#include "version.h"

/* ---- cells -------------------------------------------------------------------- */

/* The grid: where the policies' published claims and failure modes live.
 * Each cell also gets the learner settings the experiments use (harmless
 * to every other policy). A cell may start with "NAME:". */
static const char *const builtin[] = {
    "--workload conversation --cluster 8",
    "--workload conversation --cluster hetero",
    "--workload conversation --cluster regions:3",
    "--workload share-mixed --cluster 8",
    "--workload share-mixed --cluster hetero --rate 10",
    "--workload wildchat --cluster 8",
    "--workload tools-zipf --cluster 8",
    "--workload system-prompts --cluster 8",
    "--workload rate-shift --cluster 8",
    /* LoRA adapters (8 engines of 4 slots) and a fleet of two models */
    "lora-zipf100: --workload conversation --cluster 8 --rate 8 "
    "--adapters 100 --adapter-zipf 1 --max-loras 4",
    "lora-hot: --workload tools-zipf --cluster 8 --adapters 8 "
    "--adapter-by prompt --max-loras 4",
    "lora-shift: --workload wildchat --cluster 8 --rate 12 --adapters 100 "
    "--adapter-zipf 1 --adapter-shift-s 30 --max-loras 4",
    "models-70-30: --workload conversation --cluster 8 --models 70,30",
    /* a CPU tier (vLLM's OffloadingConnector) under a GPU cache that
     * holds a few conversations: 8 x a30 (32k KV tokens each) with 1M
     * tokens of host memory each, the routers fed the engines' KV events
     * of both tiers; and the same fleet without the tier */
    "cpu-offload: --workload conversation --cluster 8xa30 --rate 3 "
    "--sync events --cpu-cache-blocks 65536",
    "cpu-offload-none: --workload conversation --cluster 8xa30 --rate 3 "
    "--sync events",
};
#define BUILTIN_LEARNER "--lodestar-min 1000 --lodestar-every 500"

void
sim_suite_words_free(char **argv, int argc)
{
    for (int k = 0; argv != NULL && k < argc; k++)
        free(argv[k]);
    free(argv);
}

int
sim_suite_split(const char *line, char ***argv_out, int *argc_out,
                struct sim_err *err)
{
    char **argv = NULL;
    size_t cap = 0;
    int argc = 0;
    size_t len = strlen(line);
    char *word = malloc(len + 1);
    if (word == NULL)
        return sim_errf(err, "out of memory");
    const char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (*p == '\0' || *p == '#')
            break;
        size_t n = 0;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r' &&
               *p != '\n') {
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p != '\0' && *p != q)
                    word[n++] = *p++;
                if (*p != q) {
                    free(word);
                    sim_suite_words_free(argv, argc);
                    return sim_errf(err, "unterminated %c quote", q);
                }
                p++;
            } else {
                word[n++] = *p++;
            }
        }
        word[n] = '\0';
        if (sim_grow((void **)&argv, &cap, (size_t)argc + 1,
                     sizeof *argv) != 0 ||
            (argv[argc] = strdup(word)) == NULL) {
            free(word);
            sim_suite_words_free(argv, argc);
            return sim_errf(err, "out of memory");
        }
        argc++;
    }
    free(word);
    *argv_out = argv;
    *argc_out = argc;
    return 0;
}

void
sim_suite_cells_free(struct sim_suite_cells *c)
{
    if (c == NULL)
        return;
    for (size_t k = 0; k < c->n; k++) {
        free(c->v[k].args);
        sim_suite_words_free(c->v[k].argv, c->v[k].argc);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* The value of --FLAG in argv (either "--FLAG V" or "--FLAG=V"); the last
 * one wins, as on the command line. NULL if absent. */
static const char *
flag_value(char **argv, int argc, const char *flag)
{
    const char *v = NULL;
    size_t n = strlen(flag);
    for (int k = 0; k < argc; k++) {
        if (strncmp(argv[k], flag, n) != 0)
            continue;
        if (argv[k][n] == '=')
            v = argv[k] + n + 1;
        else if (argv[k][n] == '\0' && k + 1 < argc)
            v = argv[++k];
    }
    return v;
}

/* WORKLOAD[/CLUSTER][@RATE]; a trace by its file name without .jsonl. */
static void
derive_name(struct sim_suite_cell *c)
{
    const char *w = flag_value(c->argv, c->argc, "--workload");
    const char *t = flag_value(c->argv, c->argc, "--trace");
    const char *cl = flag_value(c->argv, c->argc, "--cluster");
    const char *rate = flag_value(c->argv, c->argc, "--rate");
    char base[SIM_SUITE_NAME] = "conversation";
    if (t != NULL) {
        const char *slash = strrchr(t, '/');
        snprintf(base, sizeof base, "%s", slash ? slash + 1 : t);
        size_t n = strlen(base);
        if (n > 6 && strcmp(base + n - 6, ".jsonl") == 0)
            base[n - 6] = '\0';
        else if (n > 5 && strcmp(base + n - 5, ".json") == 0)
            base[n - 5] = '\0';
    } else if (w != NULL) {
        snprintf(base, sizeof base, "%s", w);
    }
    snprintf(c->name, sizeof c->name, "%s%s%s%s%s", base, cl ? "/" : "",
             cl ? cl : "", rate ? "@" : "", rate ? rate : "");
}

/* The words joined by spaces (a word with a space or a quote is quoted). */
static char *
join(char **argv, int argc)
{
    size_t len = 1;
    for (int k = 0; k < argc; k++)
        len += strlen(argv[k]) + 3;
    char *s = malloc(len), *p = s;
    if (s == NULL)
        return NULL;
    *p = '\0';
    for (int k = 0; k < argc; k++) {
        int q = strpbrk(argv[k], " \t'#") != NULL || argv[k][0] == '\0';
        const char *quote = strchr(argv[k], '"') ? "'" : "\"";
        if (!q && strchr(argv[k], '"'))
            q = 1;
        p += sprintf(p, "%s%s%s%s", k ? " " : "", q ? quote : "", argv[k],
                     q ? quote : "");
    }
    return s;
}

/* Add a cell from its words (taken over: freed on failure too). */
static int
add_cell(struct sim_suite_cells *out, size_t *cap, const char *name,
         const char *where, char **argv, int argc, struct sim_err *err)
{
    if (out->n == SIM_SUITE_MAX_CELLS) {
        sim_suite_words_free(argv, argc);
        return sim_errf(err, "%s: more than %d cells", where,
                        SIM_SUITE_MAX_CELLS);
    }
    if (sim_grow((void **)&out->v, cap, out->n + 1, sizeof *out->v) != 0) {
        sim_suite_words_free(argv, argc);
        return sim_errf(err, "out of memory");
    }
    struct sim_suite_cell *c = &out->v[out->n];
    memset(c, 0, sizeof *c);
    c->argv = argv;
    c->argc = argc;
    snprintf(c->where, sizeof c->where, "%s", where);
    c->args = join(argv, argc);
    out->n++;
    if (c->args == NULL)
        return sim_errf(err, "out of memory");
    if (name != NULL) {
        if (strlen(name) >= sizeof c->name)
            return sim_errf(err, "%s: cell name '%s' is longer than %d "
                                 "characters",
                            where, name, SIM_SUITE_NAME - 1);
        snprintf(c->name, sizeof c->name, "%s", name);
    } else {
        derive_name(c);
    }
    for (size_t k = 0; k + 1 < out->n; k++)
        if (strcmp(out->v[k].name, c->name) == 0)
            return sim_errf(err, "%s: cell name '%s' is taken by %s%s", where,
                            c->name, out->v[k].where,
                            name ? "" : " (give this one a NAME: prefix)");
    return 0;
}

int
sim_suite_builtin(struct sim_suite_cells *out, struct sim_err *err)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    for (size_t k = 0; k < sizeof builtin / sizeof builtin[0]; k++) {
        char line[256];
        snprintf(line, sizeof line, "%s %s", builtin[k], BUILTIN_LEARNER);
        char **argv;
        int argc;
        if (sim_suite_split(line, &argv, &argc, err) != 0) {
            sim_suite_cells_free(out);
            return -1;
        }
        /* "NAME:" first: the cell's name, not an argument */
        char name[SIM_SUITE_NAME] = "";
        size_t n0 = argc > 0 ? strlen(argv[0]) : 0;
        if (n0 > 1 && n0 <= sizeof name && argv[0][n0 - 1] == ':') {
            memcpy(name, argv[0], n0 - 1);
            name[n0 - 1] = '\0';
            free(argv[0]);
            memmove(argv, argv + 1, (size_t)(argc - 1) * sizeof *argv);
            argc--;
        }
        if (add_cell(out, &cap, name[0] ? name : NULL, "built-in", argv, argc,
                     err) != 0) {
            sim_suite_cells_free(out);
            return -1;
        }
    }
    return 0;
}

int
sim_suite_read(const char *path, struct sim_suite_cells *out,
               struct sim_err *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return sim_errf(err, "%s: %s", path, strerror(errno));
    size_t cap = 0, lcap = 0;
    char *line = NULL;
    int rc = 0;
    for (unsigned long no = 1; rc == 0 && getline(&line, &lcap, f) >= 0; no++) {
        char where[64];
        const char *slash = strrchr(path, '/');
        snprintf(where, sizeof where, "%s:%lu", slash ? slash + 1 : path, no);
        char **argv;
        int argc;
        struct sim_err e = { { 0 } };
        if (sim_suite_split(line, &argv, &argc, &e) != 0) {
            rc = sim_errf(err, "%s: %s", where, e.msg);
            break;
        }
        if (argc == 0) {
            sim_suite_words_free(argv, argc);
            continue;
        }
        const char *name = NULL;
        char nbuf[256];
        int first = 0;
        size_t n0 = strlen(argv[0]);
        if (argv[0][0] != '-') {
            if (n0 < 2 || argv[0][n0 - 1] != ':') {
                rc = sim_errf(err, "%s: expected 'NAME:' or an option, got "
                                   "'%s'",
                              where, argv[0]);
                sim_suite_words_free(argv, argc);
                break;
            }
            snprintf(nbuf, sizeof nbuf, "%.*s", (int)(n0 - 1), argv[0]);
            name = nbuf;
            first = 1;
        }
        /* the cell's words: the arguments after the name */
        char **args = NULL;
        size_t acap = 0;
        int nargs = argc - first;
        if (nargs > 0 &&
            sim_grow((void **)&args, &acap, (size_t)nargs, sizeof *args) != 0) {
            sim_suite_words_free(argv, argc);
            rc = sim_errf(err, "out of memory");
            break;
        }
        for (int k = 0; k < nargs; k++)
            args[k] = argv[first + k];
        if (first)
            free(argv[0]);
        free(argv);
        rc = add_cell(out, &cap, name, where, args, nargs, err);
    }
    if (rc == 0 && ferror(f))
        rc = sim_errf(err, "%s: read error", path);
    free(line);
    fclose(f);
    if (rc == 0 && out->n == 0)
        rc = sim_errf(err, "%s: no cells (one line of lrsim arguments each)",
                      path);
    if (rc != 0)
        sim_suite_cells_free(out);
    return rc;
}

/* ---- ratios ---------------------------------------------------------------------- */

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0, n), which it sorts; NAN for n == 0. */
static double
median(double *v, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void
sim_suite_ratios_free(struct sim_suite_ratios *r)
{
    if (r == NULL)
        return;
    free(r->per_seed);
    free(r->cell);
    free(r->worst);
    free(r->worst_cell);
    free(r->geomean);
    free(r->best);
    memset(r, 0, sizeof *r);
}

int
sim_suite_ratios(const double *v, size_t n_cells, size_t n_seeds, size_t n_pol,
                 struct sim_suite_ratios *out)
{
    memset(out, 0, sizeof *out);
    out->n_cells = n_cells;
    out->n_seeds = n_seeds;
    out->n_pol = n_pol;
    size_t n = n_cells * n_seeds * n_pol;
    out->per_seed = sim_calloc(n ? n : 1, sizeof *out->per_seed);
    out->cell = sim_calloc(n_cells * n_pol + 1, sizeof *out->cell);
    out->worst = sim_calloc(n_pol + 1, sizeof *out->worst);
    out->worst_cell = sim_calloc(n_pol + 1, sizeof *out->worst_cell);
    out->geomean = sim_calloc(n_pol + 1, sizeof *out->geomean);
    out->best = sim_calloc(n_cells + 1, sizeof *out->best);
    double *tmp = sim_calloc(n_seeds + 1, sizeof *tmp);
    /* [cell * n_seeds + seed]: the lowest value of any policy */
    double *best_of = sim_calloc(n_cells * n_seeds + 1, sizeof *best_of);
    if (!out->per_seed || !out->cell || !out->worst || !out->worst_cell ||
        !out->geomean || !out->best || !tmp || !best_of) {
        free(best_of);
        free(tmp);
        sim_suite_ratios_free(out);
        return -1;
    }
    for (size_t cs = 0; cs < n_cells * n_seeds; cs++) {
        const double *row = v + cs * n_pol;
        double best = INFINITY;
        for (size_t p = 0; p < n_pol; p++)
            if (row[p] < best) /* false for NAN */
                best = row[p];
        best_of[cs] = best;
        for (size_t p = 0; p < n_pol; p++)
            out->per_seed[cs * n_pol + p] =
                isnan(row[p]) || !isfinite(best) || !(best > 0)
                    ? NAN
                    : row[p] / best;
    }
    for (size_t c = 0; c < n_cells; c++)
        for (size_t p = 0; p < n_pol; p++) {
            size_t k = 0;
            for (size_t s = 0; s < n_seeds; s++) {
                double x = out->per_seed[(c * n_seeds + s) * n_pol + p];
                if (!isnan(x))
                    tmp[k++] = x;
            }
            out->cell[c * n_pol + p] = median(tmp, k);
        }
    for (size_t c = 0; c < n_cells; c++) {
        size_t k = 0;
        for (size_t s = 0; s < n_seeds; s++)
            if (isfinite(best_of[c * n_seeds + s]))
                tmp[k++] = best_of[c * n_seeds + s];
        out->best[c] = median(tmp, k);
    }
    for (size_t p = 0; p < n_pol; p++) {
        double worst = NAN, logs = 0;
        size_t at = 0, k = 0;
        for (size_t c = 0; c < n_cells; c++) {
            double x = out->cell[c * n_pol + p];
            if (isnan(x))
                continue;
            if (isnan(worst) || x > worst) {
                worst = x;
                at = c;
            }
            logs += log(x);
            k++;
        }
        out->worst[p] = worst;
        out->worst_cell[p] = at;
        out->geomean[p] = k ? exp(logs / (double)k) : NAN;
    }
    free(tmp);
    free(best_of);
    return 0;
}

/* ---- the suite's results ------------------------------------------------------------ */

enum { M_MEAN, M_P99, M_TPOT_P99 };

static const struct sim_result *
run_of(const struct sim_suite *s, size_t c, size_t seed, size_t p)
{
    const struct sim_report *rep = &s->reps[c * s->n_seeds + seed];
    for (size_t k = 0; k < rep->n_runs; k++)
        if (rep->runs[k].policy == s->policies[p])
            return &rep->runs[k];
    return NULL;
}

static int
compute(const struct sim_suite *s, int measure, struct sim_suite_ratios *out)
{
    size_t n = s->n_cells * s->n_seeds * s->n_pol;
    double *v = sim_calloc(n ? n : 1, sizeof *v);
    if (v == NULL)
        return -1;
    for (size_t c = 0; c < s->n_cells; c++)
        for (size_t seed = 0; seed < s->n_seeds; seed++)
            for (size_t p = 0; p < s->n_pol; p++) {
                const struct sim_result *r = run_of(s, c, seed, p);
                double x = r == NULL              ? NAN
                           : measure == M_MEAN    ? r->ttft_mean_s
                           : measure == M_P99     ? r->ttft_p99_s
                                                  : r->tpot_p99_s;
                if (r != NULL && isnan(x))
                    x = INFINITY; /* it ran, and no request completed */
                v[(c * s->n_seeds + seed) * s->n_pol + p] = x;
            }
    int rc = sim_suite_ratios(v, s->n_cells, s->n_seeds, s->n_pol, out);
    free(v);
    return rc;
}

/* Did policy p run in any cell? */
static int
ran(const struct sim_suite_ratios *r, size_t p)
{
    return !isnan(r->worst[p]);
}

/* ---- table ----------------------------------------------------------------------- */

#define RW 7 /* a ratio column */

static void
fmt_ratio(char *buf, size_t len, double x)
{
    if (isnan(x))
        snprintf(buf, len, "-");
    else if (isinf(x))
        snprintf(buf, len, "inf");
    else if (x < 100)
        snprintf(buf, len, "%.3f", x);
    else if (x < 10000)
        snprintf(buf, len, "%.1f", x);
    else
        snprintf(buf, len, "%.0f", x);
}

/* Is x the lowest (as printed) of xs[0, n) at stride? */
static int
lowest(double x, const double *xs, size_t n, size_t stride)
{
    char a[32], b[32];
    if (isnan(x))
        return 0;
    fmt_ratio(a, sizeof a, x);
    for (size_t k = 0; k < n; k++) {
        double y = xs[k * stride];
        if (isnan(y))
            continue;
        fmt_ratio(b, sizeof b, y);
        if (y < x && strcmp(a, b) != 0)
            return 0;
    }
    return 1;
}

static void
seeds_list(FILE *f, const struct sim_suite *s)
{
    for (size_t k = 0; k < s->n_seeds; k++)
        fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)s->seeds[k]);
}

static void
ratio_table(FILE *f, const struct sim_suite *s,
            const struct sim_suite_ratios *r, const char *what,
            const char *unit)
{
    fprintf(f, "\n%s / the best policy's in each cell", what);
    if (s->n_seeds > 1) {
        fprintf(f, ": the median over seeds ");
        seeds_list(f, s);
        fprintf(f, " of the per-seed ratio");
    }
    fprintf(f, "\n%-22s", "policy");
    for (size_t c = 0; c < s->n_cells; c++)
        fprintf(f, " %*zu ", RW, c + 1);
    fprintf(f, "| %*s  %*s   %s\n", RW, "geo", RW, "worst", "worst cell");
    for (size_t p = 0; p < s->n_pol; p++) {
        if (!ran(r, p))
            continue;
        fprintf(f, "%-22s", lr_policy_name(s->policies[p]));
        char b[32];
        for (size_t c = 0; c < s->n_cells; c++) {
            double x = r->cell[c * s->n_pol + p];
            fmt_ratio(b, sizeof b, x);
            fprintf(f, " %*s%c", RW, b,
                    lowest(x, r->cell + c * s->n_pol, s->n_pol, 1) ? '*' : ' ');
        }
        fmt_ratio(b, sizeof b, r->geomean[p]);
        fprintf(f, "| %*s%c", RW, b,
                lowest(r->geomean[p], r->geomean, s->n_pol, 1) ? '*' : ' ');
        fmt_ratio(b, sizeof b, r->worst[p]);
        fprintf(f, " %*s%c  %s\n", RW, b,
                lowest(r->worst[p], r->worst, s->n_pol, 1) ? '*' : ' ',
                s->cells[r->worst_cell[p]].name);
    }
    /* the unit: what 1.000 stands for, in seconds */
    fprintf(f, "= best %-15s", unit);
    for (size_t c = 0; c < s->n_cells; c++) {
        char b[32] = "-";
        if (!isnan(r->best[c]))
            snprintf(b, sizeof b, "%.*f",
                     r->best[c] < 0.1 ? 4 : r->best[c] < 10 ? 3 : 2,
                     r->best[c]);
        fprintf(f, " %*s ", RW, b);
    }
    fprintf(f, "|\n");
}

/* The mean of a run figure over the seeds that ran (NAN: none did). */
static double
seed_mean(const struct sim_suite *s, size_t c, size_t p,
          double (*get)(const struct sim_result *, size_t), size_t arg)
{
    double sum = 0;
    size_t n = 0;
    for (size_t seed = 0; seed < s->n_seeds; seed++) {
        const struct sim_result *r = run_of(s, c, seed, p);
        if (r == NULL)
            continue;
        double x = get(r, arg);
        if (isnan(x))
            continue;
        sum += x;
        n++;
    }
    return n ? sum / (double)n : NAN;
}

static double
get_cls_slo(const struct sim_result *r, size_t c)
{
    return c < r->n_rclasses ? 100 * r->rclass[c].slo_attainment : NAN;
}

static double
get_cls_done(const struct sim_result *r, size_t c)
{
    const struct sim_rclass_result *cr = &r->rclass[c];
    return c < r->n_rclasses && cr->requests
               ? 100.0 * (double)cr->completed / (double)cr->requests
               : NAN;
}

static double
get_goodput(const struct sim_result *r, size_t unused)
{
    (void)unused;
    double g = 0;
    for (uint32_t c = 0; c < r->n_rclasses; c++)
        g += r->rclass[c].goodput_rps;
    return r->n_rclasses ? g : NAN;
}

static double
get_jain(const struct sim_result *r, size_t unused)
{
    (void)unused;
    return r->jain;
}

static double
get_count(const struct sim_result *r, size_t which)
{
    return (double)(which == 0   ? r->n_waited
                    : which == 1 ? r->expired
                    : which == 2 ? r->shed
                                 : r->failed);
}

static double
get_wait(const struct sim_result *r, size_t unused)
{
    (void)unused;
    return r->wait_mean_s;
}

static double
get_tpot_p99(const struct sim_result *r, size_t unused)
{
    (void)unused;
    return r->tpot_p99_s;
}

/* Each policy's TPOT p99 in each cell, in seconds (the mean over the
 * seeds): what its TTFT came with. No ratios and no best: the suite ranks
 * by TTFT. */
static void
tpot_table(FILE *f, const struct sim_suite *s, const struct sim_suite_ratios *r)
{
    fprintf(f, "\nTPOT p99 (s) in each cell");
    if (s->n_seeds > 1) {
        fprintf(f, ", the mean over seeds ");
        seeds_list(f, s);
    }
    fprintf(f, "\n%-22s", "policy");
    for (size_t c = 0; c < s->n_cells; c++)
        fprintf(f, " %*zu ", RW, c + 1);
    fprintf(f, "|\n");
    for (size_t p = 0; p < s->n_pol; p++) {
        if (!ran(r, p))
            continue;
        fprintf(f, "%-22s", lr_policy_name(s->policies[p]));
        for (size_t c = 0; c < s->n_cells; c++) {
            double x = seed_mean(s, c, p, get_tpot_p99, 0);
            char b[32] = "-";
            if (!isnan(x))
                snprintf(b, sizeof b, "%.*f", x < 10 ? 4 : 2, x);
            fprintf(f, " %*s ", RW, b);
        }
        fprintf(f, "|\n");
    }
    fprintf(f, "TPOT = time per output token after the first, of the "
               "completed requests with 2 or more\noutput tokens. Not "
               "ranked: the ratios above rank the policies by TTFT.\n");
}

/* TPOT p99 as the TTFT tables' ratios: not a ranking (the suite ranks
 * by TTFT), but a rule judged on both, as the P/D cells are, is read off
 * the three tables alike. */
static int
tpot_ratios(FILE *f, const struct sim_suite *s)
{
    struct sim_suite_ratios r;
    if (compute(s, M_TPOT_P99, &r) != 0)
        return -1;
    ratio_table(f, s, &r, "TPOT p99", "TPOT (s)");
    fprintf(f, "Not a ranking either: what each policy's TTFT came with, "
               "as ratios.\n");
    sim_suite_ratios_free(&r);
    return 0;
}

static void
num_col(FILE *f, double x, int width, int prec)
{
    if (isnan(x))
        fprintf(f, " %*s", width, "-");
    else
        fprintf(f, " %*.*f", width, prec, x);
}

/* The cells with request classes, tenants or --admit queue: per policy,
 * each class's SLO attainment and share served, goodput, Jain's index
 * over the tenants, and what the router's queue did (means over the
 * seeds). */
static void
admission_tables(FILE *f, const struct sim_suite *s)
{
    int head = 0;
    for (size_t c = 0; c < s->n_cells; c++) {
        const struct sim_report *rep = &s->reps[c * s->n_seeds];
        if (rep->n_runs == 0 || !rep->runs[0].has_admission)
            continue;
        const struct sim_result *r0 = &rep->runs[0];
        const struct sim_mix *m = &rep->w->mix;
        if (!head)
            fprintf(f, "\nAdmission cells: per class SLO%% (TTFT <= its SLO, "
                       "of all its requests: expired and shed\nones miss) and "
                       "done%% (served); good/s = SLO-meeting requests per "
                       "second of the arrival\nwindow; jain = Jain's index "
                       "of the tenants' service over their max-min fair "
                       "shares;\nwaited, wait (s), expired, shed: the "
                       "router's queue; failed: refused by route() (a full "
                       "queue)\nor by the engine.%s\n",
                    s->n_seeds > 1 ? " Means over the seeds." : "");
        head = 1;
        fprintf(f, "\n  %zu %s (--admit %s)\n", c + 1, s->cells[c].name,
                r0->admit == 1 ? "queue" : "now");
        fprintf(f, "  %-22s", "policy");
        for (uint32_t k = 0; k < m->n_cls; k++) {
            char h[40];
            snprintf(h, sizeof h, "%.11s SLO%%", m->cls[k].name);
            fprintf(f, " %16s %6s", h, "done%");
        }
        if (m->n_cls)
            fprintf(f, " %7s", "good/s");
        if (m->n_tenants)
            fprintf(f, " %6s", "jain");
        fprintf(f, " %7s %6s %7s %6s %6s\n", "waited", "wait", "expired",
                "shed", "failed");
        for (size_t p = 0; p < s->n_pol; p++) {
            if (isnan(seed_mean(s, c, p, get_wait, 0)))
                continue; /* did not run */
            fprintf(f, "  %-22s", lr_policy_name(s->policies[p]));
            for (uint32_t k = 0; k < m->n_cls; k++) {
                num_col(f, seed_mean(s, c, p, get_cls_slo, k), 16, 1);
                num_col(f, seed_mean(s, c, p, get_cls_done, k), 6, 1);
            }
            if (m->n_cls)
                num_col(f, seed_mean(s, c, p, get_goodput, 0), 7, 2);
            if (m->n_tenants)
                num_col(f, seed_mean(s, c, p, get_jain, 0), 6, 3);
            num_col(f, seed_mean(s, c, p, get_count, 0), 7, 0);
            num_col(f, seed_mean(s, c, p, get_wait, 0), 6, 2);
            num_col(f, seed_mean(s, c, p, get_count, 1), 7, 0);
            num_col(f, seed_mean(s, c, p, get_count, 2), 6, 0);
            num_col(f, seed_mean(s, c, p, get_count, 3), 6, 0);
            fprintf(f, "\n");
        }
    }
}

int
sim_suite_table(FILE *f, const struct sim_suite *s)
{
    struct sim_suite_ratios mean, p99;
    if (compute(s, M_MEAN, &mean) != 0)
        return -1;
    if (compute(s, M_P99, &p99) != 0) {
        sim_suite_ratios_free(&mean);
        return -1;
    }
    size_t n_ran = 0;
    for (size_t p = 0; p < s->n_pol; p++)
        n_ran += ran(&mean, p);
    fprintf(f, "lrsim %s (libroute %s): the regime suite, %zu cells x %zu "
               "seed%s (",
            LRSIM_VERSION, lr_version_string(), s->n_cells, s->n_seeds,
            s->n_seeds == 1 ? "" : "s");
    seeds_list(f, s);
    fprintf(f, ") x %zu policies\n", n_ran);
    fprintf(f, "  class rates told to the router (--router-rates): %s\n",
            s->rates);
    fprintf(f, "  %3s %-24s %s\n", "", "cell",
            "lrsim arguments (then the command line's)");
    for (size_t c = 0; c < s->n_cells; c++)
        fprintf(f, "  %3zu %-24s %s\n", c + 1, s->cells[c].name,
                s->cells[c].args);
    ratio_table(f, s, &mean, "TTFT mean", "TTFT (s)");
    ratio_table(f, s, &p99, "TTFT p99", "TTFT (s)");
    fprintf(f, "\n1.000 = the cell's best policy; with several seeds, the "
               "best in more than half of them (its\nmedian ratio is 1): a "
               "column without a 1.000 had different best policies in "
               "different seeds.\n* lowest in its column. geo = the geometric "
               "mean over the cells; worst = the largest ratio,\nand its cell. "
               "TTFT counts completed requests only.\n");
    tpot_table(f, s, &mean);
    if (tpot_ratios(f, s) != 0) {
        sim_suite_ratios_free(&mean);
        sim_suite_ratios_free(&p99);
        return -1;
    }
    /* what the ratios do not show: failed requests and skipped policies */
    for (size_t p = 0; p < s->n_pol; p++) {
        int head = 0;
        for (size_t c = 0; c < s->n_cells; c++) {
            uint64_t failed = 0, total = 0;
            for (size_t seed = 0; seed < s->n_seeds; seed++) {
                const struct sim_result *r = run_of(s, c, seed, p);
                if (r != NULL) {
                    failed += r->failed;
                    total += r->n_reqs;
                }
            }
            if (failed == 0)
                continue;
            if (!head)
                fprintf(f, "  %s: requests failed (TTFT leaves them out): ",
                        lr_policy_name(s->policies[p]));
            fprintf(f, "%s%s %llu of %llu", head ? ", " : "", s->cells[c].name,
                    (unsigned long long)failed, (unsigned long long)total);
            head = 1;
        }
        if (head)
            fprintf(f, "\n");
    }
    admission_tables(f, s);
    for (size_t p = 0; p < s->n_pol; p++) {
        if (ran(&mean, p))
            continue;
        const char *why = "did not run";
        const struct sim_report *rep = &s->reps[0];
        for (size_t k = 0; k < rep->n_skipped; k++)
            if (strcmp(rep->skipped[k].policy,
                       lr_policy_name(s->policies[p])) == 0)
                why = rep->skipped[k].why;
        fprintf(f, "  skipped %s: %s\n", lr_policy_name(s->policies[p]), why);
    }
    sim_suite_ratios_free(&mean);
    sim_suite_ratios_free(&p99);
    return ferror(f) ? -1 : 0;
}

/* ---- JSON ------------------------------------------------------------------------- */

static void
json_ratios(FILE *f, const struct sim_suite *s,
            const struct sim_suite_ratios *r, const char *key)
{
    fprintf(f, "    \"%s\": {\n      \"best_s\": {", key);
    for (size_t c = 0; c < s->n_cells; c++) {
        fprintf(f, "%s", c ? ", " : "");
        sim_json_str(f, s->cells[c].name);
        fprintf(f, ": ");
        sim_json_num(f, r->best[c]);
    }
    fprintf(f, "},\n      \"policies\": [");
    int first = 1;
    for (size_t p = 0; p < s->n_pol; p++) {
        if (!ran(r, p))
            continue;
        fprintf(f, "%s\n        {\"policy\": ", first ? "" : ",");
        first = 0;
        sim_json_str(f, lr_policy_name(s->policies[p]));
        fprintf(f, ", \"geomean\": ");
        sim_json_num(f, r->geomean[p]);
        fprintf(f, ", \"worst\": ");
        sim_json_num(f, r->worst[p]);
        fprintf(f, ", \"worst_cell\": ");
        sim_json_str(f, s->cells[r->worst_cell[p]].name);
        fprintf(f, ",\n         \"cells\": {");
        for (size_t c = 0; c < s->n_cells; c++) {
            fprintf(f, "%s", c ? ", " : "");
            sim_json_str(f, s->cells[c].name);
            fprintf(f, ": ");
            sim_json_num(f, r->cell[c * s->n_pol + p]);
        }
        fprintf(f, "},\n         \"per_seed\": {");
        for (size_t c = 0; c < s->n_cells; c++) {
            fprintf(f, "%s", c ? ", " : "");
            sim_json_str(f, s->cells[c].name);
            fprintf(f, ": [");
            for (size_t seed = 0; seed < s->n_seeds; seed++) {
                fprintf(f, "%s", seed ? ", " : "");
                sim_json_num(
                    f, r->per_seed[(c * s->n_seeds + seed) * s->n_pol + p]);
            }
            fprintf(f, "]");
        }
        fprintf(f, "}}");
    }
    fprintf(f, "\n      ]\n    }");
}

static void
json_cell(FILE *f, const struct sim_suite *s, size_t c)
{
    const struct sim_suite_cell *cell = &s->cells[c];
    fprintf(f, "    {\"name\": ");
    sim_json_str(f, cell->name);
    fprintf(f, ", \"where\": ");
    sim_json_str(f, cell->where);
    fprintf(f, ", \"args\": ");
    sim_json_str(f, cell->args);
    const struct sim_report *rep0 = &s->reps[c * s->n_seeds];
    char cl[512];
    sim_cluster_describe(rep0->c, cl, sizeof cl);
    fprintf(f, ",\n     \"cluster\": ");
    sim_json_str(f, rep0->c->spec);
    fprintf(f, ", \"cluster_description\": ");
    sim_json_str(f, cl);
    fprintf(f, ", \"source\": ");
    sim_json_str(f, rep0->source);
    fprintf(f, ",\n     \"workloads\": [");
    for (size_t seed = 0; seed < s->n_seeds; seed++) {
        const struct sim_report *rep = &s->reps[c * s->n_seeds + seed];
        struct sim_workload_info wi;
        sim_workload_info(rep->w, &wi);
        fprintf(f, "%s\n       {\"seed\": %llu, \"name\": ", seed ? "," : "",
                (unsigned long long)s->seeds[seed]);
        sim_json_str(f, rep->w->name);
        fprintf(f, ", \"requests\": %zu, \"duration_s\": ", wi.requests);
        sim_json_num(f, wi.duration_s);
        fprintf(f, ", \"prompt_tokens\": %llu, \"output_tokens\": %llu}",
                (unsigned long long)wi.input_tokens,
                (unsigned long long)wi.output_tokens);
    }
    fprintf(f, "]}");
}

int
sim_suite_json(FILE *f, const struct sim_suite *s, int with_timing)
{
    struct sim_suite_ratios mean, p99, tpot;
    if (compute(s, M_MEAN, &mean) != 0)
        return -1;
    if (compute(s, M_P99, &p99) != 0) {
        sim_suite_ratios_free(&mean);
        return -1;
    }
    if (compute(s, M_TPOT_P99, &tpot) != 0) {
        sim_suite_ratios_free(&mean);
        sim_suite_ratios_free(&p99);
        return -1;
    }
    fprintf(f, "{\n  \"lrsim\": ");
    sim_json_str(f, LRSIM_VERSION);
    fprintf(f, ",\n  \"libroute\": ");
    sim_json_str(f, lr_version_string());
    fprintf(f, ",\n  \"suite\": true,\n  \"seeds\": [");
    for (size_t k = 0; k < s->n_seeds; k++)
        fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)s->seeds[k]);
    fprintf(f, "],\n  \"policies\": [");
    for (size_t p = 0; p < s->n_pol; p++) {
        fprintf(f, "%s", p ? ", " : "");
        sim_json_str(f, lr_policy_name(s->policies[p]));
    }
    fprintf(f, "],\n  \"router_rates\": ");
    sim_json_str(f, s->rates);
    fprintf(f, ",\n");
    if (with_timing) {
        fprintf(f, "  \"wall_s\": ");
        sim_json_num(f, s->wall_s);
        fprintf(f, ",\n  \"jobs\": %u,\n", s->jobs);
    }
    fprintf(f, "  \"cells\": [\n");
    for (size_t c = 0; c < s->n_cells; c++) {
        json_cell(f, s, c);
        fprintf(f, "%s\n", c + 1 < s->n_cells ? "," : "");
    }
    fprintf(f, "  ],\n  \"runs\": [\n");
    int first = 1;
    for (size_t cs = 0; cs < s->n_cells * s->n_seeds; cs++) {
        const struct sim_report *rep = &s->reps[cs];
        for (size_t k = 0; k < rep->n_runs; k++) {
            fprintf(f, "%s", first ? "" : ",\n");
            first = 0;
            sim_report_json_run(f, rep, &rep->runs[k], with_timing);
        }
    }
    fprintf(f, "\n  ],\n  \"skipped\": [");
    first = 1;
    for (size_t cs = 0; cs < s->n_cells * s->n_seeds; cs++) {
        const struct sim_report *rep = &s->reps[cs];
        for (size_t k = 0; k < rep->n_skipped; k++) {
            fprintf(f, "%s{\"cell\": ", first ? "" : ", ");
            first = 0;
            sim_json_str(f, rep->cell);
            fprintf(f, ", \"seed\": %llu, \"policy\": ",
                    (unsigned long long)rep->cfg->seed);
            sim_json_str(f, rep->skipped[k].policy);
            fprintf(f, ", \"reason\": ");
            sim_json_str(f, rep->skipped[k].why);
            fputc('}', f);
        }
    }
    fprintf(f, "],\n  \"ratios\": {\n    \"statistic\": ");
    sim_json_str(f, "each cell: the median over the seeds of (the policy's "
                    "figure / the lowest of any policy in that cell and "
                    "seed)");
    fprintf(f, ",\n");
    json_ratios(f, s, &mean, "ttft_mean");
    fprintf(f, ",\n");
    json_ratios(f, s, &p99, "ttft_p99");
    fprintf(f, ",\n");
    json_ratios(f, s, &tpot, "tpot_p99");
    fprintf(f, "\n  }\n}\n");
    sim_suite_ratios_free(&mean);
    sim_suite_ratios_free(&p99);
    sim_suite_ratios_free(&tpot);
    return ferror(f) ? -1 : 0;
}
