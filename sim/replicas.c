/* lrsim: the replica options (--front, --sync) and their description.
 * The replicas themselves run in sim.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

int
sim_front_parse(const char *v, struct sim_replicas *r, struct sim_err *err)
{
    if (strcmp(v, "random") == 0)
        r->front = SIM_FRONT_RANDOM;
    else if (strcmp(v, "round-robin") == 0)
        r->front = SIM_FRONT_ROUND_ROBIN;
    else if (strcmp(v, "session") == 0)
        r->front = SIM_FRONT_SESSION;
    else
        return sim_errf(err,
                        "unknown front '%s' (random, round-robin, "
                        "session)",
                        v);
    return 0;
}

/* none | events | events+learn | deltas:MS[:LOSS] |
 * events+deltas:MS[:LOSS] */
int
sim_sync_parse(const char *v, struct sim_replicas *r, struct sim_err *err)
{
    if (strcmp(v, "none") == 0) {
        r->sync = SIM_SYNC_NONE;
        return 0;
    }
    if (strcmp(v, "events") == 0) {
        r->sync = SIM_SYNC_EVENTS;
        return 0;
    }
    if (strcmp(v, "events+learn") == 0) {
        r->sync = SIM_SYNC_EVENTS_LEARN;
        return 0;
    }
    int sync = SIM_SYNC_DELTAS;
    if (strncmp(v, "events+", 7) == 0) {
        sync = SIM_SYNC_EVENTS_DELTAS;
        v += 7;
    }
    if (strncmp(v, "deltas:", 7) != 0)
        return sim_errf(err,
                        "unknown sync '%s' (none, events, events+learn, "
                        "deltas:MS[:LOSS], events+deltas:MS[:LOSS])",
                        v);
    char *end;
    double ms = strtod(v + 7, &end);
    if (end == v + 7 || !(ms > 0) || ms > 3600e3)
        return sim_errf(err, "deltas:MS: a period in ms > 0, got '%s'", v);
    double loss = 0;
    if (*end == ':') {
        const char *l = end + 1;
        loss = strtod(l, &end);
        if (end == l || !(loss >= 0 && loss < 1))
            return sim_errf(err,
                            "deltas:MS:LOSS: a share in [0, 1), got "
                            "'%s'",
                            v);
    }
    if (*end != '\0')
        return sim_errf(err, "deltas:MS[:LOSS]: trailing '%s'", end);
    r->sync = sync;
    r->delta_us = (uint64_t)(ms * 1000.0 + 0.5);
    if (r->delta_us == 0)
        r->delta_us = 1;
    r->loss = loss;
    return 0;
}

void
sim_replicas_describe(const struct sim_replicas *r, char *buf, size_t len)
{
    static const char *const front[] = { "random", "round-robin", "session" };
    if (r->n <= 1) {
        snprintf(buf, len, "1 router");
        return;
    }
    char sync[64];
    const char *ev = r->sync == SIM_SYNC_EVENTS_DELTAS ? "events+" : "";
    if (r->sync == SIM_SYNC_NONE)
        snprintf(sync, sizeof sync, "none");
    else if (r->sync == SIM_SYNC_EVENTS)
        snprintf(sync, sizeof sync, "events");
    else if (r->sync == SIM_SYNC_EVENTS_LEARN)
        snprintf(sync, sizeof sync, "events+learn");
    else if (r->loss > 0)
        snprintf(sync, sizeof sync, "%sdeltas:%g:%g", ev,
                 (double)r->delta_us / 1e3, r->loss);
    else
        snprintf(sync, sizeof sync, "%sdeltas:%g", ev,
                 (double)r->delta_us / 1e3);
    snprintf(buf, len, "%u x %s, %s", r->n, front[r->front], sync);
}
