/* lrsim: what a run prints and writes: the table, the JSON document and
 * the SVG picture. */
#ifndef LRSIM_REPORT_H
#define LRSIM_REPORT_H

#include <stdio.h>

#include "cluster.h"
#include "sim.h"
#include "workload.h"

struct sim_skip {
    char policy[32];
    char why[160];
};

struct sim_report {
    const char *source; /* "workload conversation" or "trace FILE" */
    const struct sim_workload *w;
    const struct sim_cluster *c;
    const struct sim_config *cfg; /* shared settings (seed, SLO, ...) */
    double time_scale;
    const struct sim_result *runs;
    size_t n_runs;
    const struct sim_skip *skipped;
    size_t n_skipped;
    double wall_s; /* whole tool run, measured */
    unsigned jobs;
    int show_reasons; /* the table: decision reasons of every policy */
    int show_curve;   /* the table: lodestar's whole learning curve */
    const char *cell; /* the suite's: each JSON run names its cell and seed */
};

/* The table, one row per policy, with a header naming the set-up. */
void sim_report_table(FILE *f, const struct sim_report *rep);

/* The admission figures under the table (with request classes, tenants
 * or --admit queue): how requests ended, per class SLO attainment and
 * goodput, per tenant service and Jain's index. */
void sim_report_admission(FILE *f, const struct sim_report *rep);

/* The JSON document. with_timing = 0 leaves out every measured field
 * (route_ns_*, wall_s), so that two runs with one seed give identical
 * bytes. Returns 0, or -1 on a write error. */
int sim_report_json(FILE *f, const struct sim_report *rep, int with_timing);

/* One element of the JSON document's "runs" (no trailing comma or
 * newline); the suite writes its runs with it. */
void sim_report_json_run(FILE *f, const struct sim_report *rep,
                         const struct sim_result *r, int with_timing);

/* A JSON string (escaped) and a number (null if not finite). */
void sim_json_str(FILE *f, const char *s);
void sim_json_num(FILE *f, double v);

/* The SVG: TTFT CDFs per policy (log time axis) and load per instance.
 * Returns 0, or -1 on a write error or out of memory. */
int sim_report_svg(FILE *f, const struct sim_report *rep);

/* Lodestar's samples (sim_result.samples of the lodestar run) as CSV: a
 * header naming the LR_LODESTAR_FEATURES features and "reward", then one
 * row per sample (floats printed to round-trip). 0, or -1 on a write
 * error. */
int sim_report_samples_csv(FILE *f, const struct sim_report *rep);

/* Column names of that CSV, LR_LODESTAR_FEATURES + 1 of them. */
extern const char *const sim_sample_columns[];

#endif /* LRSIM_REPORT_H */
