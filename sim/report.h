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
};

/* The table, one row per policy, with a header naming the set-up. */
void sim_report_table(FILE *f, const struct sim_report *rep);

/* The JSON document. with_timing = 0 leaves out every measured field
 * (route_ns_*, wall_s), so that two runs with one seed give identical
 * bytes. Returns 0, or -1 on a write error. */
int sim_report_json(FILE *f, const struct sim_report *rep, int with_timing);

/* The SVG: TTFT CDFs per policy (log time axis) and load per instance.
 * Returns 0, or -1 on a write error or out of memory. */
int sim_report_svg(FILE *f, const struct sim_report *rep);

#endif /* LRSIM_REPORT_H */
