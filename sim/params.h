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
 * unknown name, a value that is not a number (or, for lodestar-fallback,
 * a policy name), a fraction for an integer key or a value outside
 * lr_router_param_bounds() is an error (err says which). 0 or -1. */
int sim_param_parse(const char *arg, struct sim_param *out,
                    struct sim_err *err);

#endif /* LRSIM_PARAMS_H */
