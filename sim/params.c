/* lrsim: router parameters by name (see params.h). */
#include "params.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

#include "cluster.h"

/* Indexed by lr_param. A new key must get a name here: the assertion
 * fails until it does. */
static const char *const names[] = {
    [LR_PARAM_PREFIX_MIN_RATIO] = "prefix-min-ratio",
    [LR_PARAM_BOUNDED_LOAD] = "bounded-load",
    [LR_PARAM_AIBRIX_IMBALANCE] = "aibrix-imbalance",
    [LR_PARAM_AIBRIX_STDDEV] = "aibrix-stddev",
    [LR_PARAM_SGLANG_ABS] = "sglang-abs",
    [LR_PARAM_SGLANG_REL] = "sglang-rel",
    [LR_PARAM_SGLANG_MIN_RATIO] = "sglang-min-ratio",
    [LR_PARAM_PREBLE_HIT] = "preble-hit",
    [LR_PARAM_DYNAMO_OVERLAP] = "dynamo-overlap",
    [LR_PARAM_DYNAMO_TEMPERATURE] = "dynamo-temperature",
    [LR_PARAM_TTFT_SLO_S] = "ttft-slo-s",
    [LR_PARAM_DUALMAP_KEY_TOKENS] = "dualmap-key-tokens",
    [LR_PARAM_DUALMAP_MAX_KEY_BLOCKS] = "dualmap-max-key-blocks",
    [LR_PARAM_DUALMAP_WINDOW] = "dualmap-window",
    [LR_PARAM_GORGO_W_RTT] = "gorgo-w-rtt",
    [LR_PARAM_GORGO_W_QUEUE] = "gorgo-w-queue",
    [LR_PARAM_GORGO_SIGMA] = "gorgo-sigma",
    [LR_PARAM_GORGO_FROZEN] = "gorgo-frozen",
    [LR_PARAM_GORGO_W_RTT_MAX] = "gorgo-w-rtt-max",
    [LR_PARAM_GORGO_W_QUEUE_MIN] = "gorgo-w-queue-min",
    [LR_PARAM_RANVIER_PRESSURE] = "ranvier-pressure",
    [LR_PARAM_SESSION_TOKENS] = "session-tokens",
    [LR_PARAM_STATS_MAX_AGE_S] = "stats-max-age-s",
    [LR_PARAM_DEFAULT_OUTPUT_TOKENS] = "default-output-tokens",
    [LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN] = "gorgo-release-at-first-token",
    [LR_PARAM_LODESTAR_EPSILON] = "lodestar-epsilon",
    [LR_PARAM_LODESTAR_TIE] = "lodestar-tie",
    [LR_PARAM_LODESTAR_KV_THRESHOLD] = "lodestar-kv-threshold",
    [LR_PARAM_LODESTAR_KFILTER_TOKENS] = "lodestar-kfilter-tokens",
    [LR_PARAM_LODESTAR_OOD] = "lodestar-ood",
    [LR_PARAM_LODESTAR_FALLBACK] = "lodestar-fallback",
    [LR_PARAM_LODESTAR_CANDIDATES] = "lodestar-candidates",
    [LR_PARAM_LODESTAR_MAX_TTFT_S] = "lodestar-max-ttft-s",
    [LR_PARAM_ADAPTIVE_WORK_WEIGHT] = "adaptive-work-weight",
    [LR_PARAM_ADAPTIVE_CONTENTION] = "adaptive-contention",
    [LR_PARAM_ADAPTIVE_TIE_S] = "adaptive-tie-s",
    [LR_PARAM_ADAPTIVE_FRESH_S] = "adaptive-fresh-s",
    [LR_PARAM_ADAPTIVE_RTT_WEIGHT] = "adaptive-rtt-weight",
    [LR_PARAM_ADAPTIVE_CALIBRATE] = "adaptive-calibrate",
    [LR_PARAM_CLOCK_SKEW_S] = "clock-skew-s",
    [LR_PARAM_SATURATION_QUEUE] = "saturation-queue",
    [LR_PARAM_SATURATION_KV] = "saturation-kv",
    [LR_PARAM_FAIR_INPUT_WEIGHT] = "fair-input-weight",
    [LR_PARAM_FAIR_OUTPUT_WEIGHT] = "fair-output-weight",
    [LR_PARAM_ADAPTIVE_DEADLINE] = "adaptive-deadline",
    [LR_PARAM_SATURATION_PREFILL_S] = "saturation-prefill-s",
    [LR_PARAM_ADAPTER_LOAD_S] = "adapter-load-s",
    [LR_PARAM_TIER_CPU_WEIGHT] = "tier-cpu-weight",
    [LR_PARAM_TIER_DISK_WEIGHT] = "tier-disk-weight",
    [LR_PARAM_KV_BYTES_PER_TOKEN] = "kv-bytes-per-token",
    [LR_PARAM_KV_GBPS_NODE] = "kv-gbps-node",
    [LR_PARAM_KV_GBPS_RACK] = "kv-gbps-rack",
    [LR_PARAM_KV_GBPS_REGION] = "kv-gbps-region",
    [LR_PARAM_KV_GBPS_WAN] = "kv-gbps-wan",
    [LR_PARAM_PD_PREFILL_POLICY] = "pd-prefill-policy",
    [LR_PARAM_PD_MIN_UNCACHED] = "pd-min-uncached",
    [LR_PARAM_PD_LOCAL_MAX_TOKENS] = "pd-local-max-tokens",
    [LR_PARAM_PD_LOCAL_MAX_RATIO] = "pd-local-max-ratio",
    [LR_PARAM_ADAPTIVE_PD_STALL] = "adaptive-pd-stall",
    [LR_PARAM_NARROW_ABOVE] = "narrow-above",
    [LR_PARAM_NARROW_WIDTH] = "narrow-width",
};
#define N_NAMES ((int32_t)(sizeof names / sizeof names[0]))

const char *
sim_param_name(int32_t key)
{
    if (key < 0 || key >= N_NAMES)
        return NULL;
    return names[key];
}

int
sim_param_parse(const char *arg, struct sim_param *out, struct sim_err *err)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return sim_errf(err, "expected NAME=VALUE, got '%s'", arg);
    size_t n = (size_t)(eq - arg);
    int32_t key = -1;
    for (int32_t k = 0; k < N_NAMES; k++)
        if (names[k] != NULL && strlen(names[k]) == n &&
            memcmp(names[k], arg, n) == 0)
            key = k;
    if (key < 0) {
        char known[2048] = "";
        size_t used = 0;
        for (int32_t k = 0; k < N_NAMES && used < sizeof known; k++) {
            int w =
                snprintf(known + used, sizeof known - used, " %s", names[k]);
            if (w > 0)
                used += (size_t)w;
        }
        return sim_errf(err, "unknown parameter '%.*s'; known:%s", (int)n, arg,
                        known);
    }
    const char *v = eq + 1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || isnan(x)) {
        int32_t p;
        if ((key == LR_PARAM_LODESTAR_FALLBACK ||
             key == LR_PARAM_PD_PREFILL_POLICY) &&
            *v != '\0' &&
            lr_policy_from_name(v, &p) == LR_OK)
            x = (double)p;
        else
            return sim_errf(err, "%s: expected a number, got '%s'", names[key],
                            v);
    }
    /* the library is the judge: a scratch router says whether it takes it */
    lr_router *r = NULL;
    lr_status st = lr_router_create(NULL, &r);
    if (st == LR_OK)
        st = lr_router_set_param(r, key, x);
    lr_router_destroy(r);
    if (st == LR_ERANGE) {
        lr_bounds b = lr_param_bounds(key);
        return sim_errf(err, "%s: %s is out of range (%g..%g)", names[key], v,
                        b.lo, b.hi);
    }
    if (st == LR_EINVAL)
        return sim_errf(err, "%s: %s is not a valid value (a whole number?)",
                        names[key], v);
    if (st != LR_OK)
        return sim_errf(err, "%s=%s: %s", names[key], v, lr_strerror(st));
    out->key = key;
    out->value = x;
    return 0;
}

int
sim_rates_parse(const char *v, struct sim_rates *out, struct sim_err *err)
{
    if (strcmp(v, "nominal") == 0) {
        out->mode = SIM_RATES_NOMINAL;
        out->scale = 1;
        return 0;
    }
    if (strcmp(v, "none") == 0) {
        out->mode = SIM_RATES_NONE;
        out->scale = 1;
        return 0;
    }
    if (strncmp(v, "scale:", 6) != 0)
        return sim_errf(err, "expected nominal, none or scale:X, got '%s'", v);
    const char *num = v + 6;
    char *end;
    errno = 0;
    double x = strtod(num, &end);
    if (end == num || *end != '\0' || errno != 0 || !(x > 0) || isinf(x))
        return sim_errf(err, "scale:X needs a number X > 0, got '%s'", num);
    /* the library is the judge of every rate it would be told */
    lr_router *r = NULL;
    lr_status st = lr_router_create(NULL, &r);
    const struct sim_class *k = sim_classes;
    for (; st == LR_OK && k->name; k++) {
        lr_class_spec cs;
        lr_class_spec_init(&cs);
        cs.prefill_tokens_per_s = 1e6 / k->prefill_us * x;
        st = lr_router_set_class(r, (uint32_t)(k - sim_classes), &cs);
        if (st != LR_OK)
            break;
    }
    lr_router_destroy(r);
    if (st != LR_OK)
        return sim_errf(err,
                        "scale:%s: the router refuses class %s's rate "
                        "%.6g tokens/s (%s)",
                        num, k->name ? k->name : "?",
                        k->name ? 1e6 / k->prefill_us * x : 0.0,
                        lr_strerror(st));
    out->mode = SIM_RATES_SCALE;
    out->scale = x;
    return 0;
}

void
sim_rates_describe(const struct sim_rates *r, char *buf, size_t len)
{
    if (r->mode == SIM_RATES_NONE)
        snprintf(buf, len, "none");
    else if (r->mode == SIM_RATES_SCALE) {
        /* the shortest of %g and %.17g that reads back as the same X */
        snprintf(buf, len, "scale:%g", r->scale);
        if (strtod(buf + 6, NULL) != r->scale)
            snprintf(buf, len, "scale:%.17g", r->scale);
    } else
        snprintf(buf, len, "nominal");
}
