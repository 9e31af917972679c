/* lrsim: class profiles and cluster specs (see cluster.h; the figures and
 * how they were derived are in docs/simulator.md, "Engine classes"). */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A 7-8B dense model in bf16: 16 GB of weights, ~16 GFLOP per token,
 * 128 KiB of KV per token (32 layers x 8 KV heads x 128 x 2 x 2 bytes).
 * overhead  = weights / memory bandwidth (a decode step reads them once);
 * prefill   = 16 GFLOP / (peak x achieved MFU);
 * decode_ctx = 128 KiB / memory bandwidth;
 * kv_tokens = (0.9 x memory - weights - activations) / 128 KiB. */
struct sim_class sim_classes[SIM_MAX_CLASSES + 1] = {
    { "h100", "H100-80GB-like: 989 TF bf16, 3.35 TB/s", 5000, 35, 24000, 30,
      0.04, 256, 8192, 400000, 131072,
      SIM_CACHE_PAGED, 0, 0 },
    { "a100", "A100-80GB-like: 312 TF bf16, 2.0 TB/s", 8000, 90, 24000, 80,
      0.07, 256, 8192, 400000, 131072,
      SIM_CACHE_PAGED, 0, 0 },
    { "l20", "L20-48GB-like: 120 TF fp16, 0.86 TB/s", 18500, 160, 24000, 130,
      0.15, 256, 8192, 180000, 131072,
      SIM_CACHE_PAGED, 0, 0 },
    { "a30", "A30-24GB-like: 165 TF bf16, 0.93 TB/s", 17000, 170, 24000, 160,
      0.14, 128, 4096, 32000, 32000,
      SIM_CACHE_PAGED, 0, 0 },
    { "v100", "V100-32GB-like: 125 TF fp16, 0.9 TB/s, no FlashAttention-2",
      18000, 280, 12000, 200, 0.15, 128, 4096, 80000, 80000,
      SIM_CACHE_PAGED, 0, 0 },
    /* then the classes of class files, then a NULL name */
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
    int32_t role;
    uint32_t node, rack, region; /* 0: the default */
};

/* Auto-numbered nodes start here, above any a spec names. */
#define AUTO_NODE 100000u

int
sim_placement_level(const struct sim_instance *a, const struct sim_instance *b)
{
    if (a->node == b->node)
        return 0;
    if (a->rack == b->rack)
        return 1;
    if (a->region == b->region)
        return 2;
    return 3;
}

/* "/nodeN", "/rackN", "/regionN" after the RTT; 0, or -1 (err). */
static int
parse_place(const char *spec, const char **pp, struct group *out,
            struct sim_err *err)
{
    const char *p = *pp;
    while (*p == '/') {
        p++;
        static const char *const kw[3] = { "node", "rack", "region" };
        uint32_t *dst[3] = { &out->node, &out->rack, &out->region };
        int k = 0;
        while (k < 3 && strncmp(p, kw[k], strlen(kw[k])) != 0)
            k++;
        if (k == 3)
            return sim_errf(err, "bad cluster \"%s\": after '/' expected "
                                 "nodeN, rackN or regionN",
                            spec);
        p += strlen(kw[k]);
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || *p < '0' || *p > '9' || errno != 0 || v == 0 ||
            v >= AUTO_NODE)
            return sim_errf(err, "bad cluster \"%s\": %s needs a number "
                                 "1..%u",
                            spec, kw[k], AUTO_NODE - 1);
        *dst[k] = (uint32_t)v;
        p = end;
    }
    *pp = p;
    return 0;
}

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
    out->role = 0;
    out->node = out->rack = out->region = 0;
    unsigned long n;
    int r = parse_count(&p, &n);
    if (r < 0)
        return sim_errf(err, "bad cluster \"%s\": count too large", spec);
    if (r > 0) {
        if (n == 0 || n > SIM_MAX_INSTANCES)
            return sim_errf(err, "bad cluster \"%s\": count must be 1..%u "
                                 "(lrsim's limit of instances)",
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
    if (*p == ':') {
        static const struct {
            const char *name;
            int32_t role;
        } roles[] = { { "prefill", 1 }, { "decode", 2 }, { "both", 0 },
                      { "p", 1 },       { "d", 2 },      { "b", 0 } };
        p++;
        size_t j = 0, m = sizeof roles / sizeof roles[0];
        for (; j < m; j++) {
            size_t l = strlen(roles[j].name);
            if (strncmp(p, roles[j].name, l) == 0 &&
                (p[l] == '\0' || p[l] == '@' || p[l] == '/'))
                break;
        }
        if (j == m)
            return sim_errf(err, "bad cluster \"%s\": after ':' expected a "
                                 "role: p (prefill), d (decode) or b (both)",
                            spec);
        out->role = roles[j].role;
        p += strlen(roles[j].name);
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
        if (strncmp(p, "ms", 2) == 0)
            p += 2;
        out->rtt_us = (uint64_t)llround(ms * 1000.0);
    }
    if (parse_place(spec, &p, out, err) != 0)
        return -1;
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
            return sim_errf(err, "bad cluster \"%s\": more than %u instances "
                                 "(lrsim's limit)",
                            spec, SIM_MAX_INSTANCES);
        ng++;
        if (plus == NULL)
            break;
        g = plus + 1;
    }
    c->inst = sim_calloc(total, sizeof *c->inst);
    if (c->inst == NULL)
        return sim_errf(err, "out of memory");
    uint32_t auto_node = AUTO_NODE;
    for (uint32_t gi = 0; gi < ng; gi++) {
        for (unsigned long k = 0; k < gs[gi].count; k++) {
            struct sim_instance *in = &c->inst[c->n];
            in->role = gs[gi].role;
            c->n_prefill += in->role == 1;
            c->n_decode += in->role == 2;
            in->region = gs[gi].region ? gs[gi].region : 1;
            /* a region's own rack unless named: racks are the fleet's */
            in->rack = gs[gi].rack           ? gs[gi].rack
                       : in->region == 1 ? 1
                                         : AUTO_NODE + in->region;
            if (gs[gi].node)
                in->node = gs[gi].node;
            else if (k % 8 == 0)
                in->node = ++auto_node; /* 8 GPUs a node */
            else
                in->node = auto_node;
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
        static const char *const role[3] = { "", " prefill", " decode" };
        char place[48] = "";
        if (in->rack != 1 && in->rack < AUTO_NODE)
            snprintf(place, sizeof place, " rack %u", in->rack);
        if (in->region != 1)
            snprintf(place + strlen(place), sizeof place - strlen(place),
                     " region %u", in->region);
        int w = snprintf(buf + at, len - at, "%s%u x %s%s%s (%.0f ms%s)",
                         i ? " + " : "", j - i, in->cls->name,
                         in->prefix_caching ? "" : " no-cache",
                         role[in->role], (double)in->rtt_us / 1000.0, place);
        if (w < 0 || (size_t)w >= len - at)
            return;
        at += (size_t)w;
        i = j;
    }
}

/* ---- class files ---------------------------------------------------------------
 *
 *   # llama.cpp, 1 CPU thread, an 8 x 512 model (tools/real/profile.py)
 *   name = llamacpp
 *   prefill_us = 950
 *   decode_seq_us = 9000
 *   max_batch = 4
 *   cache = slots
 *
 * Unset keys take a100's figures, except cache (paged), host_cache_tokens
 * (0) and slot_similarity (0.1). */

static int
class_valid(const struct sim_class *k, struct sim_err *err)
{
    if (!(k->overhead_us >= 0 && k->overhead_us < 1e9) ||
        !(k->prefill_us > 0 && k->prefill_us < 1e9) ||
        !(k->ctx_double > 0 && k->ctx_double < 1e12) ||
        !(k->decode_seq_us >= 0 && k->decode_seq_us < 1e9) ||
        !(k->decode_ctx_us >= 0 && k->decode_ctx_us < 1e9) ||
        !(k->slot_similarity >= 0 && k->slot_similarity < 1))
        return sim_errf(err, "class %s: a time out of range (prefill_us > 0, "
                             "ctx_double > 0, the others >= 0; "
                             "slot_similarity in [0, 1))",
                        k->name);
    if (k->max_batch == 0 || k->max_batch > 65536 || k->token_budget == 0 ||
        k->kv_tokens == 0 || k->kv_tokens > (1ull << 40) ||
        k->max_model_len == 0)
        return sim_errf(err, "class %s: max_batch, token_budget, kv_tokens "
                             "and max_model_len must be >= 1",
                        k->name);
    return 0;
}

static int
class_equal(const struct sim_class *a, const struct sim_class *b)
{
    return strcmp(a->name, b->name) == 0 &&
           strcmp(a->what ? a->what : "", b->what ? b->what : "") == 0 &&
           a->overhead_us == b->overhead_us && a->prefill_us == b->prefill_us &&
           a->ctx_double == b->ctx_double &&
           a->decode_seq_us == b->decode_seq_us &&
           a->decode_ctx_us == b->decode_ctx_us &&
           a->max_batch == b->max_batch && a->token_budget == b->token_budget &&
           a->kv_tokens == b->kv_tokens &&
           a->max_model_len == b->max_model_len &&
           a->cache_kind == b->cache_kind &&
           a->host_cache_tokens == b->host_cache_tokens &&
           a->slot_similarity == b->slot_similarity;
}

/* Add the class being read; 0, or -1 (err). Its strings move into the
 * table (or are freed). */
static int
class_commit(struct sim_class *k, const char *path, struct sim_err *err)
{
    int rc = 0;
    size_t n = 0;
    if (k->what == NULL) {
        size_t len = strlen(path) + 6;
        char *w = malloc(len);
        if (w != NULL)
            snprintf(w, len, "from %s", path);
        k->what = w;
    }
    if (k->what == NULL)
        rc = sim_errf(err, "out of memory");
    else if (class_valid(k, err) != 0)
        rc = -1;
    for (; rc == 0 && sim_classes[n].name != NULL; n++) {
        if (strcmp(sim_classes[n].name, k->name) != 0)
            continue;
        if (n < SIM_BUILTIN_CLASSES || !class_equal(&sim_classes[n], k))
            rc = sim_errf(err, "class %s is defined already", k->name);
        else
            rc = 1; /* the same class read again */
    }
    if (rc == 0 && n >= SIM_MAX_CLASSES)
        rc = sim_errf(err, "more than %u classes", SIM_MAX_CLASSES);
    if (rc == 0) {
        sim_classes[n] = *k;
        return 0;
    }
    free((char *)k->name);
    free((char *)k->what);
    return rc < 0 ? -1 : 0;
}

static int
parse_num(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(x >= lo && x <= hi))
        return -1;
    *out = x;
    return 0;
}

static char *
trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* One `key = value` into k; 0, or -1 (err, without the file:line). */
static int
class_set(struct sim_class *k, const char *key, const char *v,
          struct sim_err *err)
{
    static const struct {
        const char *key;
        size_t off;
        int kind; /* 0 double, 1 uint32, 2 uint64 */
    } keys[] = {
        { "overhead_us", offsetof(struct sim_class, overhead_us), 0 },
        { "prefill_us", offsetof(struct sim_class, prefill_us), 0 },
        { "ctx_double", offsetof(struct sim_class, ctx_double), 0 },
        { "decode_seq_us", offsetof(struct sim_class, decode_seq_us), 0 },
        { "decode_ctx_us", offsetof(struct sim_class, decode_ctx_us), 0 },
        { "slot_similarity", offsetof(struct sim_class, slot_similarity), 0 },
        { "max_batch", offsetof(struct sim_class, max_batch), 1 },
        { "token_budget", offsetof(struct sim_class, token_budget), 1 },
        { "max_model_len", offsetof(struct sim_class, max_model_len), 1 },
        { "kv_tokens", offsetof(struct sim_class, kv_tokens), 2 },
        { "host_cache_tokens", offsetof(struct sim_class, host_cache_tokens),
          2 },
    };
    if (strcmp(key, "what") == 0) {
        free((char *)k->what);
        k->what = strdup(v);
        return k->what ? 0 : sim_errf(err, "out of memory");
    }
    if (strcmp(key, "cache") == 0) {
        if (strcmp(v, "paged") == 0)
            k->cache_kind = SIM_CACHE_PAGED;
        else if (strcmp(v, "slots") == 0)
            k->cache_kind = SIM_CACHE_SLOTS;
        else
            return sim_errf(err, "cache: paged or slots, got \"%s\"", v);
        return 0;
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(key, keys[i].key) != 0)
            continue;
        double x;
        double hi = keys[i].kind == 1 ? 4294967295.0 : 1e15;
        if (parse_num(v, 0, hi, &x) != 0 ||
            (keys[i].kind != 0 && x != floor(x)))
            return sim_errf(err, "%s: expected a %s, got \"%s\"", key,
                            keys[i].kind ? "whole number" : "number >= 0",
                            v);
        char *p = (char *)k + keys[i].off;
        if (keys[i].kind == 0)
            *(double *)(void *)p = x;
        else if (keys[i].kind == 1)
            *(uint32_t *)(void *)p = (uint32_t)x;
        else
            *(uint64_t *)(void *)p = (uint64_t)x;
        return 0;
    }
    return sim_errf(err, "unknown key \"%s\"", key);
}

int
sim_class_file_load(const char *path, struct sim_err *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return sim_errf(err, "%s: %s", path, strerror(errno));
    const struct sim_class *base = sim_class_find(SIM_DEFAULT_CLASS);
    struct sim_class k;
    int have = 0, rc = 0, classes = 0;
    unsigned long lineno = 0;
    char line[512];
    struct sim_err e;
    while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            rc = sim_errf(err, "%s:%lu: line too long", path, lineno);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            rc = sim_errf(err, "%s:%lu: expected key = value", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        e.msg[0] = '\0';
        if (strcmp(key, "name") == 0) {
            if (have && class_commit(&k, path, &e) != 0) {
                rc = sim_errf(err, "%s:%lu: %s", path, lineno, e.msg);
                have = 0;
                break;
            }
            classes += have;
            size_t n = strlen(val);
            int ok = n > 0 && n < 24;
            for (size_t i = 0; ok && i < n; i++)
                ok = islower((unsigned char)val[i]) ||
                     isdigit((unsigned char)val[i]);
            if (!ok) {
                rc = sim_errf(err,
                              "%s:%lu: a class name is 1-23 lowercase "
                              "letters and digits, got \"%s\"",
                              path, lineno, val);
                have = 0;
                break;
            }
            k = *base;
            k.what = NULL;
            k.cache_kind = SIM_CACHE_PAGED;
            k.host_cache_tokens = 0;
            k.slot_similarity = 0.1;
            k.name = strdup(val);
            if (k.name == NULL) {
                rc = sim_errf(err, "out of memory");
                break;
            }
            have = 1;
        } else if (!have) {
            rc = sim_errf(err, "%s:%lu: name = NAME must come first", path,
                          lineno);
        } else if (class_set(&k, key, val, &e) != 0) {
            rc = sim_errf(err, "%s:%lu: %s", path, lineno, e.msg);
        }
    }
    if (rc == 0 && have) {
        e.msg[0] = '\0';
        if (class_commit(&k, path, &e) != 0)
            rc = sim_errf(err, "%s: %s", path, e.msg);
        have = 0;
        classes++;
    } else if (rc == 0 && classes == 0)
        rc = sim_errf(err, "%s: no class in the file", path);
    if (have) {
        free((char *)k.name);
        free((char *)k.what);
    }
    fclose(f);
    return rc;
}
