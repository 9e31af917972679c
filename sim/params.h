/* lrsim: router parameters by name (--param NAME=VALUE). Every lr_param
 * has a kebab-case name here: LR_PARAM_AIBRIX_IMBALANCE is
 * "aibrix-imbalance", LR_PARAM_LODESTAR_EPSILON "lodestar-epsilon". */
#ifndef LRSIM_PARAMS_H
#define LRSIM_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* One parameter setting, applied to every policy's router. */
struct sim_param {
    int32_t key; /* an lr_param value */
    double value;
};

/* Name of an lr_param, or NULL outside the enum. */
const char *sim_param_name(int32_t key);

/* Parse "NAME=VALUE" and check the value the way the library will: an
 * unknown name, a value that is not a number (or, for lodestar-fallback
 * and pd-prefill-policy,
 * a policy name), a fraction for an integer key or a value outside
 * lr_router_param_bounds() is an error (err says which). 0 or -1. */
int sim_param_parse(const char *arg, struct sim_param *out,
                    struct sim_err *err);

/* What a router is told of each class's prefill speed
 * (lr_router_set_class), --router-rates MODE:
 *
 *   nominal   the class's true rate, 1 / prefill_us (what lrsim always did)
 *   none      nothing: every class keeps the library's default rate
 *   scale:X   the true rate x X (X > 0): a router misinformed by a factor */
enum { SIM_RATES_NOMINAL = 0, SIM_RATES_NONE, SIM_RATES_SCALE };

struct sim_rates {
    int mode;     /* SIM_RATES_* */
    double scale; /* SIM_RATES_SCALE only */
};

/* Parse a MODE. A scale the library would refuse for some class (a rate
 * outside what lr_router_set_class takes) is an error too. 0 or -1 (err). */
int sim_rates_parse(const char *v, struct sim_rates *out, struct sim_err *err);

/* "nominal", "none" or "scale:X" (X printed to round-trip). */
void sim_rates_describe(const struct sim_rates *r, char *buf, size_t len);

#endif /* LRSIM_PARAMS_H */
