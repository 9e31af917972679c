/* lrsim --suite: every policy over a grid of cells (regimes), each policy's
 * TTFT reported as a ratio to the best policy of each cell.
 *
 *   cell  = one line of lrsim arguments (a workload or trace, a cluster,
 *           a rate, ...), run for every seed and every policy
 *   ratio = a policy's TTFT / the lowest TTFT of any policy run in that
 *           cell with that seed; with several seeds, the median of the
 *           per-seed ratios (a paired comparison: every policy of a seed
 *           saw the same requests)
 *
 * This module holds the cells (the built-in grid, a --suite-cells file),
 * the ratio arithmetic, and the suite's table and JSON; main.c runs the
 * cells. */
#ifndef LRSIM_SUITE_H
#define LRSIM_SUITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "report.h"
#include "util.h"

#define SIM_SUITE_NAME 48
#define SIM_SUITE_MAX_CELLS 256
#define SIM_SUITE_MAX_SEEDS 64

struct sim_suite_cell {
    char name[SIM_SUITE_NAME];
    char where[64]; /* "FILE:LINE", or "built-in" */
    char *args;     /* the arguments, as one line (for the table) */
    char **argv;    /* the arguments, word by word */
    int argc;
};

struct sim_suite_cells {
    struct sim_suite_cell *v;
    size_t n;
};

/* The built-in grid (docs/simulator.md, "The regime suite"). 0 or -1. */
int sim_suite_builtin(struct sim_suite_cells *out, struct sim_err *err);

/* Cells from a file: one line of lrsim arguments each, optionally after
 * "NAME:"; '#' starts a comment where a word could start; blank lines are
 * skipped; '...' and "..." quote a word. A cell without a name is named
 * WORKLOAD[/CLUSTER][@RATE] (a trace by its file name without .jsonl).
 * Names must differ. 0 or -1 (err names FILE:LINE). */
int sim_suite_read(const char *path, struct sim_suite_cells *out,
                   struct sim_err *err);

void sim_suite_cells_free(struct sim_suite_cells *c);

/* Split a line into words (quotes as above; '#' ends the line). *argv and
 * each word are allocated; free with sim_suite_words_free. 0 or -1. */
int sim_suite_split(const char *line, char ***argv, int *argc,
                    struct sim_err *err);
void sim_suite_words_free(char **argv, int argc);

/* ---- ratios ------------------------------------------------------------------ */

/* v[(cell * n_seeds + seed) * n_pol + pol]: a measure (lower is better):
 * NAN where the policy did not run, INFINITY where it ran but has no value
 * (no request completed). */
struct sim_suite_ratios {
    size_t n_cells, n_seeds, n_pol;
    double *per_seed; /* same layout as v: v / the best v of its cell and
                       * seed; NAN: did not run (or nothing to compare) */
    double *cell;     /* [cell * n_pol + pol]: median over the seeds the
                       * policy ran; NAN if none */
    double *worst;    /* [pol]: the largest cell ratio (NAN: never ran) */
    size_t *worst_cell;
    double *geomean; /* [pol]: geometric mean of its cell ratios */
    double *best;    /* [cell]: the best value of each seed, median over
                      * the seeds (the unit of the cell's ratios) */
};

int sim_suite_ratios(const double *v, size_t n_cells, size_t n_seeds,
                     size_t n_pol, struct sim_suite_ratios *out);
void sim_suite_ratios_free(struct sim_suite_ratios *r);

/* ---- the whole suite's results ---------------------------------------------- */

struct sim_suite {
    const struct sim_suite_cell *cells;
    size_t n_cells;
    const uint64_t *seeds;
    size_t n_seeds;
    const int32_t *policies; /* the selected ones, in order */
    size_t n_pol;
    /* [cell * n_seeds + seed]: that cell and seed's runs (the policies that
     * ran, in policy order), skipped policies, workload, cluster, config */
    const struct sim_report *reps;
    const char *rates; /* --router-rates, described */
    double wall_s;
    unsigned jobs;
};

/* The ratio tables (TTFT mean and p99) and the cell legend. */
int sim_suite_table(FILE *f, const struct sim_suite *s);

/* Every run (cell x seed x policy, the per-run fields of the normal JSON,
 * tagged with cell and seed), the cells, and the ratio tables.
 * with_timing as in sim_report_json. 0, or -1 on a write error. */
int sim_suite_json(FILE *f, const struct sim_suite *s, int with_timing);

#endif /* LRSIM_SUITE_H */
