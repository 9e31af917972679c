/* lrsim: class profiles and cluster specs (see cluster.h; the figures and
 * how they were derived are in docs/simulator.md, "Engine classes"). */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A 7-8B dense model in bf16: 16 GB of weights, ~16 GFLOP per token,
 * 128 KiB of KV per token (32 layers x 8 KV heads x 128 x 2 x 2 bytes).
 * overhead  = weights / memory bandwidth (a decode step reads them once);
 * prefill   = 16 GFLOP / (peak x achieved MFU);
 * decode_ctx = 128 KiB / memory bandwidth;
 * kv_tokens = (0.9 x memory - weights - activations) / 128 KiB. */
const struct sim_class sim_classes[] = {
    { "h100", "H100-80GB-like: 989 TF bf16, 3.35 TB/s", 5000, 35, 24000, 30,
      0.04, 256, 8192, 400000, 131072 },
    { "a100", "A100-80GB-like: 312 TF bf16, 2.0 TB/s", 8000, 90, 24000, 80,
      0.07, 256, 8192, 400000, 131072 },
    { "l20", "L20-48GB-like: 120 TF fp16, 0.86 TB/s", 18500, 160, 24000, 130,
      0.15, 256, 8192, 180000, 131072 },
    { "a30", "A30-24GB-like: 165 TF bf16, 0.93 TB/s", 17000, 170, 24000, 160,
      0.14, 128, 4096, 32000, 32000 },
    { "v100", "V100-32GB-like: 125 TF fp16, 0.9 TB/s, no FlashAttention-2",
      18000, 280, 12000, 200, 0.15, 128, 4096, 80000, 80000 },
    { NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
};

const struct sim_class *
sim_class_find(const char *name)
{
    for (const struct sim_class *c = sim_classes; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

void
sim_cluster_free(struct sim_cluster *c)
{
    if (c == NULL)
        return;
    free(c->inst);
    memset(c, 0, sizeof *c);
}

/* Expand a preset into its spec; NULL if `spec` is not a preset. */
static const char *
preset(const char *spec, char *buf, size_t len, struct sim_err *err, int *bad)
{
    *bad = 0;
    if (strcmp(spec, "lodestar") == 0)
        return "4xa30+4xv100-nocache";
    if (strcmp(spec, "hetero") == 0)
        return "2xh100+4xa100+2xv100-nocache";
    if (strcmp(spec, "regions") == 0)
        spec = "regions:4";
    if (strncmp(spec, "regions:", 8) == 0) {
        char *end;
        errno = 0;
        unsigned long k = strtoul(spec + 8, &end, 10);
        if (spec[8] < '0' || spec[8] > '9' || *end != '\0' || k == 0 ||
            k > SIM_MAX_INSTANCES / 3 || errno != 0) {
            *bad = 1;
            sim_errf(err, "bad cluster \"%s\": regions:K needs K in 1..%u",
                     spec, SIM_MAX_INSTANCES / 3);
            return NULL;
        }
        snprintf(buf, len, "%lux%s@37ms+%lux%s@279ms+%lux%s@456ms", k,
                 SIM_DEFAULT_CLASS, k, SIM_DEFAULT_CLASS, k,
                 SIM_DEFAULT_CLASS);
        return buf;
    }
    return NULL;
}

struct group {
    unsigned long count;
    const struct sim_class *cls;
    int cache;
    uint64_t rtt_us;
};

static int
parse_count(const char **p, unsigned long *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0)
        return -1;
    *out = v;
    *p = end;
    return 1;
}

static int
parse_group(const char *spec, const char *g, size_t len, struct group *out,
            struct sim_err *err)
{
    char buf[96];
    if (len == 0 || len >= sizeof buf)
        return sim_errf(err, "bad cluster \"%s\": empty or overlong group",
                        spec);
    memcpy(buf, g, len);
    buf[len] = '\0';
    const char *p = buf;
    out->count = 1;
    out->cls = sim_class_find(SIM_DEFAULT_CLASS);
    out->cache = 1;
    out->rtt_us = SIM_DEFAULT_RTT_US;
    unsigned long n;
    int r = parse_count(&p, &n);
    if (r < 0)
        return sim_errf(err, "bad cluster \"%s\": count too large", spec);
    if (r > 0) {
        if (n == 0 || n > SIM_MAX_INSTANCES)
            return sim_errf(err, "bad cluster \"%s\": count must be 1..%u",
                            spec, SIM_MAX_INSTANCES);
        out->count = n;
        if (*p == '\0')
            return 0;
        if (*p != 'x')
            return sim_errf(err,
                            "bad cluster \"%s\": expected 'x' after %lu in "
                            "\"%s\"",
                            spec, n, buf);
        p++;
    }
    char name[32];
    size_t k = 0;
    while (*p && (islower((unsigned char)*p) || isdigit((unsigned char)*p)) &&
           k + 1 < sizeof name)
        name[k++] = *p++;
    name[k] = '\0';
    out->cls = sim_class_find(name);
    if (out->cls == NULL)
        return sim_errf(err,
                        "bad cluster \"%s\": unknown class \"%s\" (classes: "
                        "h100, a100, l20, a30, v100)",
                        spec, name);
    while (strncmp(p, "-nocache", 8) == 0) {
        out->cache = 0;
        p += 8;
    }
    if (*p == '@') {
        p++;
        char *end;
        errno = 0;
        double ms = strtod(p, &end);
        if (end == p || errno != 0 || !(ms >= 0) || ms > 60000)
            return sim_errf(err,
                            "bad cluster \"%s\": RTT after '@' must be "
                            "0..60000 ms",
                            spec);
        p = end;
        if (strcmp(p, "ms") == 0)
            p += 2;
        out->rtt_us = (uint64_t)llround(ms * 1000.0);
    }
    if (*p != '\0')
        return sim_errf(err, "bad cluster \"%s\": unexpected \"%s\"", spec, p);
    return 0;
}

int
sim_cluster_parse(const char *spec, struct sim_cluster *c, struct sim_err *err)
{
    memset(c, 0, sizeof *c);
    if (spec == NULL || *spec == '\0')
        return sim_errf(err, "empty cluster spec");
    if (strlen(spec) >= sizeof c->spec)
        return sim_errf(err, "cluster spec too long");
    snprintf(c->spec, sizeof c->spec, "%s", spec);
    char pbuf[160];
    int bad;
    const char *expanded = preset(spec, pbuf, sizeof pbuf, err, &bad);
    if (bad)
        return -1;
    const char *s = expanded ? expanded : spec;
    struct group gs[64];
    uint32_t ng = 0;
    unsigned long total = 0;
    for (const char *g = s;;) {
        const char *plus = strchr(g, '+');
        size_t len = plus ? (size_t)(plus - g) : strlen(g);
        if (ng == 64)
            return sim_errf(err, "bad cluster \"%s\": more than 64 groups",
                            spec);
        if (parse_group(spec, g, len, &gs[ng], err) != 0)
            return -1;
        total += gs[ng].count;
        if (total > SIM_MAX_INSTANCES)
            return sim_errf(err, "bad cluster \"%s\": more than %u instances",
                            spec, SIM_MAX_INSTANCES);
        ng++;
        if (plus == NULL)
            break;
        g = plus + 1;
    }
    c->inst = sim_calloc(total, sizeof *c->inst);
    if (c->inst == NULL)
        return sim_errf(err, "out of memory");
    for (uint32_t gi = 0; gi < ng; gi++) {
        for (unsigned long k = 0; k < gs[gi].count; k++) {
            struct sim_instance *in = &c->inst[c->n];
            in->cls = gs[gi].cls;
            in->class_id = (uint32_t)(gs[gi].cls - sim_classes);
            in->prefix_caching = gs[gi].cache;
            in->rtt_us = gs[gi].rtt_us;
            in->group = gi;
            snprintf(in->name, sizeof in->name, "%s-%02u", in->cls->name,
                     c->n);
            c->n++;
        }
    }
    c->n_groups = ng;
    return 0;
}

void
sim_cluster_describe(const struct sim_cluster *c, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < c->n;) {
        uint32_t j = i;
        while (j < c->n && c->inst[j].group == c->inst[i].group)
            j++;
        const struct sim_instance *in = &c->inst[i];
        int w = snprintf(buf + at, len - at, "%s%u x %s%s (%.0f ms)",
                         i ? " + " : "", j - i, in->cls->name,
                         in->prefix_caching ? "" : " no-cache",
                         (double)in->rtt_us / 1000.0);
        if (w < 0 || (size_t)w >= len - at)
            return;
        at += (size_t)w;
        i = j;
    }
}
