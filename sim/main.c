/* lrsim: compare libroute's routing policies on a simulated cluster of LLM
 * engines. The command line, the per-policy worker threads and the output
 * files; everything else lives in the sim_* modules. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libroute.h>

#include "cluster.h"
#include "params.h"
#include "report.h"
#include "sim.h"
#include "suite.h"
#include "trace.h"
#include "version.h"
#include "workload.h"

#define MAX_POLICIES 256
#define MAX_PARAMS 64
#define EXIT_USAGE 2

struct opts {
    const char *trace;
    const char *workload;
    const char *cluster;
    const char *policies;
    const char *json;
    const char *svg;
    size_t requests;
    double rate;
    double time_scale;
    double spread_ms; /* --spread: 0 none */
    uint64_t seed;
    double slo;
    uint32_t block_tokens;
    uint32_t trace_block;
    uint64_t index_blocks;
    uint64_t marks;
    uint64_t queue_tokens; /* 0: the library's default */
    double scrape_ms;
    unsigned jobs;
    int rebalance;
    int quiet;
    int curve, reasons;
    const char *dump_samples;
    double split_s;  /* < 0: none */
    double learn_ms;
    double freeze_s; /* < 0: never */
    uint32_t lodestar_min, lodestar_every, lodestar_epochs;
    double lodestar_max_reward;
    struct sim_param params[MAX_PARAMS];
    size_t n_params;
    /* --router-rates: every policy's, and per-policy overrides */
    struct sim_rates rates;
    struct {
        int32_t policy;
        struct sim_rates rates;
    } rates_for[MAX_POLICIES];
    size_t n_rates_for;
    /* --suite */
    int suite;
    const char *suite_cells;
    uint64_t seeds[SIM_SUITE_MAX_SEEDS];
    size_t n_seeds;
    int seed_given;
    /* --replicas, --front, --sync, --gauge-ms; --replica-suite */
    struct sim_replicas rep;
    int replica_suite;
    /* --mix, --tenants, --burst; --admit */
    struct sim_mix mix;
    int admit;
    /* --adapters, --adapter-*, --models; --max-loras, --adapter-load-ms */
    struct sim_lora lora;
    uint32_t max_loras;
    double adapter_load_ms;
    /* --cpu-cache-blocks, --cpu-load-gbps, --kv-bytes-per-token */
    uint32_t cpu_blocks;
    double cpu_load_gbps, kv_bytes_per_token;
    /* --kv-gbps-node, -rack, -region, -wan; --kv-setup-ms */
    double kv_gbps[4];
    double kv_setup_ms;
};

/* Where a usage error is, for the suite's cells ("cells.txt:3: "); empty
 * on the command line. Only the main thread parses. */
static char where_prefix[96] = "";

static void
usage(FILE *f)
{
    fprintf(f,
"usage: lrsim [options]\n"
"\n"
"Replay LLM traffic through libroute's routing policies against a simulated\n"
"cluster of inference engines, and compare the policies side by side. With\n"
"no options: the 'conversation' workload on 8 x a100, every policy.\n"
"\n"
"Traffic (one of):\n"
"  --workload NAME     a built-in generator (default conversation; see\n"
"                      --list-workloads)\n"
"  --trace FILE        a Mooncake JSONL trace (timestamp ms, input_length,\n"
"                      output_length, hash_ids of 512-token blocks)\n"
"  --requests N        keep the first N requests\n"
"  --rate R            generators: mean arrival rate in requests/s\n"
"  --time-scale X      multiply arrival times by X (0.5 = twice the rate)\n"
"  --trace-block N     tokens per trace hash id (default 512)\n"
"  --spread MS         spread requests that share an arrival time over the\n"
"                      next MS ms (a trace rounded to 3 s: 3000)\n"
"  --seed N            seeds the workload, the routers and the probes (42)\n"
"  --mix LIST          request classes: NAME=SHARE[:URGENCY:SLO_S][:shed],\n"
"                      comma-separated; built in: interactive (urgency 0,\n"
"                      SLO 2 s), batch (4, 60 s). A session keeps one\n"
"                      class. E.g. interactive=0.3,batch=0.7\n"
"  --tenants N|W,W,..  N tenants of equal rates, or one per weight, its\n"
"                      rate in proportion (10,1,1,1: one sends 10x)\n"
"  --burst X[:S]       arrivals in waves: each S s (60) of traffic comes in\n"
"                      its first S/X s, at X times the mean rate\n"
"\n"
"LoRA adapters and models (any workload or trace):\n"
"  --adapters N        N LoRA adapters (lora-0001 ...); each request runs\n"
"                      under one drawn by Zipf popularity (a session keeps\n"
"                      its first turn's)\n"
"  --adapter-zipf S    popularity exponent: rank r has weight (r+1)^-S (1)\n"
"  --adapter-share F   share of requests under an adapter, the rest on the\n"
"                      base model (1)\n"
"  --adapter-shift-s T every T s the ranking rotates by a quarter of the\n"
"                      adapters: the hot set moves\n"
"  --adapter-by KEY    request (default), or prompt: every request of one\n"
"                      system prompt (first segment) runs its adapter\n"
"  --max-loras K       adapter slots per engine, vLLM's --max-loras (4);\n"
"                      0: no LoRA (adapter requests fail)\n"
"  --adapter-load-ms X time a step spends loading an adapter (100)\n"
"  --models N|W,W,..   N models of equal rates, or one per weight (70,30);\n"
"                      the instances split among them in proportion\n"
"\n");
    fprintf(f,
"Cluster:\n"
"  --cluster SPEC      instances (default: the workload's, usually 8xa100):\n"
"                        8                     8 x a100, 1 ms RTT\n"
"                        4xh100+4xa100         classes: h100 a100 l20 a30 v100\n"
"                        4xa30+4xv100-nocache  -nocache: prefix caching off\n"
"                        4xa100@279ms          RTT of a group (ms)\n"
"                        regions[:K]           3 x K a100, RTT 37/279/456 ms\n"
"                        lodestar              4xa30+4xv100-nocache\n"
"                        hetero                2xh100+4xa100+2xv100-nocache\n"
"                        1xa100:p+3xa100:d     roles: p prefill, d decode,\n"
"                                              b both (the default)\n"
"                        2xa100:p/rack2+2xa100:d  placement: /nodeN /rackN\n"
"                                              /regionN (default: a node\n"
"                                              per group, rack 1, region 1)\n"
"                      4096 instances at most\n"
"  --class-file FILE   engine classes of your own (a measured profile:\n"
"                      prefill and decode cost, step overhead, KV capacity,\n"
"                      cache = paged or slots); --list-classes shows them\n"
"  --block-tokens N    KV block of the engines and the router's index (16)\n"
"  --index-blocks N    router index capacity (default: the cluster's KV; twice\n"
"                      that with --sync events+deltas or events+learn)\n"
"  --marks N           placement marks past the index (lr_router_options\n"
"                      .marks; default 0, none)\n"
"  --scrape-ms MS      engine metrics and RTT probe period (100)\n"
"  --no-rebalance      do not carry out dualmap's rebalancing plans\n"
"  --cpu-cache-blocks N  a CPU tier per engine (vLLM's OffloadingConnector):\n"
"                      N blocks of host memory, LRU; computed blocks are\n"
"                      copied there, and a prefix the GPU lost but host\n"
"                      memory holds is loaded back, not prefilled (0: none)\n"
"  --cpu-load-gbps X   host-to-GPU bandwidth of those loads, GB/s (25)\n"
"  --kv-bytes-per-token B  KV size of a token (131072: the classes' 8B\n"
"                      model in bf16); a load takes tokens x B / bandwidth;\n"
"                      a split request's KV transfer too (below)\n"
"\n");
    fprintf(f,
"Disaggregated fleets (a cluster with :p instances; docs/simulator.md):\n"
"  --kv-gbps-node X, --kv-gbps-rack X, --kv-gbps-region X, --kv-gbps-wan X\n"
"                      the KV link between a prefill and a decode\n"
"                      instance on one node, rack, region, or regions\n"
"                      apart, GB/s (300, 50, 12.5, 1.25; the routers are\n"
"                      told the same); a transfer takes setup + the prompt\n"
"                      tokens the decode engine lacks x B / bandwidth;\n"
"                      links are not contended\n"
"  --kv-setup-ms MS    a KV transfer's setup time (1)\n"
"\n"
"Policies and measures:\n"
"  --policies LIST     all (default) or names, comma-separated; all has\n"
"                      the LoRA policies only where the traffic has adapters\n"
"  --slo-ttft S        TTFT objective in seconds (5); also the router's\n"
"  --param NAME=VALUE  set a router parameter on every policy's router\n"
"                      (repeatable; names: lodestar-epsilon,\n"
"                      lodestar-candidates, lodestar-ood, aibrix-imbalance,\n"
"                      ...: every LR_PARAM_* in kebab case)\n"
"  --split-s S         also report TTFT of requests arriving before / from S\n"
"  --admit MODE        now (default): route() sends every request at once;\n"
"                      queue: requests may wait in the router's queue\n"
"                      (their class's urgency and deadline, their tenant),\n"
"                      let out by lr_router_dispatch()\n"
"  --queue-tokens N    prompt tokens each router's queue holds at once\n"
"                      (lr_router_options.queue_tokens; default the\n"
"                      library's, 16M); a request past it fails\n"
"  --jobs N            policies simulated at once (default: CPUs)\n"
"  --router-rates MODE what every router is told of each class's prefill\n"
"                      speed: nominal (default: the true rates), none (no\n"
"                      rate: the library's default for every class),\n"
"                      scale:X (the true rates x X)\n"
"  --router-rates POLICY=MODE  that policy only (repeatable)\n"
"\n"
"Lodestar (the learned policy):\n"
"  --learn-ms MS       simulated period of lr_router_learn_step (1000); a\n"
"                      step takes no simulated time\n"
"  --lodestar-min N    samples before the first model (library: 5000)\n"
"  --lodestar-every N  new samples between training rounds (library: 1000)\n"
"  --lodestar-epochs N training passes per round (library: 30)\n"
"  --lodestar-freeze-s S  no learning step from simulated time S on\n"
"  --lodestar-max-reward S  the learner drops samples with TTFT above S\n"
"                      (library: 15); the router first clips TTFTs to\n"
"                      --param lodestar-max-ttft-s (library: 60)\n"
"  --dump-samples FILE the learner's samples at the end, as CSV\n"
"                      (20 features, then the reward -TTFT in s)\n"
"  --curve             print lodestar's learning curve (about 30 rows)\n"
"\n");
    fprintf(f,
"Gateway replicas (docs/scale.md):\n"
"  --replicas R        R routers behind a front load balancer (1)\n"
"  --front F           which replica gets a request: random (default),\n"
"                      round-robin, session (the session's, else random)\n"
"  --sync S            what the replicas share: none (default), events\n"
"                      (every engine's KV events to every router; routes\n"
"                      learn nothing), deltas:MS[:LOSS] (each publishes its\n"
"                      placements every MS ms, a share LOSS of deliveries\n"
"                      lost; a full publication every 10 s),\n"
"                      events+deltas:MS[:LOSS] (both: routes learn, the\n"
"                      engines' events correct them; no full publication),\n"
"                      events+learn (events; routes learn, shared with no\n"
"                      one)\n"
"  --gauge-ms MS       period of the replicas' load gauges when they share\n"
"                      (100; 0: none)\n"
"  --eviction E        the routers' index eviction: remote-first (the\n"
"                      library's default) or lru (the default of replicas\n"
"                      that share deltas or learn beside events)\n"
"  --replica-suite     every policy with 1 router and with --replicas (4)\n"
"                      routers for each sync: none, events, deltas:100,\n"
"                      deltas:1000; hit rate and TTFT mean side by side\n"
"\n"
"Regime suite (every policy over a grid of cells; docs/simulator.md):\n"
"  --suite             run the built-in cells and print each policy's TTFT\n"
"                      mean and p99 as a ratio to each cell's best policy\n"
"  --seeds LIST        seeds of every cell, comma-separated (default:\n"
"                      --seed); a cell's ratio is the median over them\n"
"  --suite-cells FILE  other cells (implies --suite): one line of lrsim\n"
"                      arguments each, optionally after 'NAME:'; '#'\n"
"                      comments. The command line's flags (--policies,\n"
"                      --param, --router-rates, --jobs, ...) apply to every\n"
"                      cell and win over a cell's own.\n"
"\n"
"Output:\n"
"  --json FILE         every measure, per policy and per instance\n"
"  --svg FILE          TTFT distributions and load per instance\n"
"  --reasons           print every policy's decision reasons\n"
"  --quiet             no table on stdout\n"
"  --list-workloads, --list-classes, --list-policies, --version, --help\n"
"\n"
"Files are written only when the whole run succeeded (FILE.tmp, then\n"
"renamed). Exit status: 0 ok, 1 run or file error, 2 bad usage or input.\n");
}

static int bad(const char *fmt, ...) SIM_PRINTF(1, 2);

/* A usage error: one line on stderr; returns -1. */
static int
bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lrsim: %s", where_prefix);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see lrsim --help)\n");
    va_end(ap);
    return -1;
}

static int
parse_u64(const char *flag, const char *v, uint64_t lo, uint64_t hi,
          uint64_t *out)
{
    char *end;
    errno = 0;
    if (v[0] < '0' || v[0] > '9')
        return bad("%s: expected a whole number, got '%s'", flag, v);
    unsigned long long x = strtoull(v, &end, 10);
    if (*end != '\0' || errno != 0)
        return bad("%s: expected a whole number, got '%s'", flag, v);
    if (x < lo || x > hi) {
        fprintf(stderr, "lrsim: %s%s: %s is out of range (%llu..%llu)\n",
                where_prefix, flag, v, (unsigned long long)lo,
                (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int
parse_pos(const char *flag, const char *v, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(x > 0) || !(x <= hi))
        return bad("%s: expected a positive number, got '%s'", flag, v);
    *out = x;
    return 0;
}

static int
parse_nonneg(const char *flag, const char *v, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(x >= 0) || !(x <= hi))
        return bad("%s: expected a number >= 0, got '%s'", flag, v);
    *out = x;
    return 0;
}

static int
parse_u32(const char *flag, const char *v, uint64_t lo, uint64_t hi,
          uint32_t *out)
{
    uint64_t u;
    if (parse_u64(flag, v, lo, hi, &u) != 0)
        return -1;
    *out = (uint32_t)u;
    return 0;
}

static const char *const value_flags[] = {
    "--trace",        "--workload",     "--cluster",        "--policies",
    "--json",         "--svg",          "--requests",       "--rate",
    "--time-scale",   "--slo-ttft",     "--scrape-ms",      "--seed",
    "--block-tokens", "--trace-block",  "--index-blocks",   "--jobs",
    "--marks",        "--queue-tokens",
    "--param",        "--split-s",      "--learn-ms",       "--lodestar-min",
    "--lodestar-every", "--lodestar-epochs", "--lodestar-freeze-s",
    "--dump-samples", "--lodestar-max-reward", "--router-rates",
    "--seeds", "--suite-cells", "--replicas", "--front", "--sync",
    "--gauge-ms", "--eviction", "--spread", "--class-file",
    "--mix", "--tenants", "--burst", "--admit", "--adapters",
    "--adapter-zipf", "--adapter-share", "--adapter-shift-s", "--adapter-by",
    "--max-loras", "--adapter-load-ms", "--models", "--cpu-cache-blocks",
    "--cpu-load-gbps", "--kv-bytes-per-token", "--kv-gbps-node",
    "--kv-gbps-rack", "--kv-gbps-region", "--kv-gbps-wan", "--kv-setup-ms",
};

/* What a suite cell may not say: the suite's own settings, and what
 * applies to the whole run. */
static const char *const not_in_cell[] = {
    "--seed",  "--seeds", "--suite-cells", "--policies",     "--jobs",
    "--json",  "--svg",   "--dump-samples", "--suite",      "--quiet",
    "--curve", "--reasons", "--replica-suite",
};

static int
is_not_in_cell(const char *flag)
{
    for (size_t k = 0; k < sizeof not_in_cell / sizeof not_in_cell[0]; k++)
        if (strcmp(flag, not_in_cell[k]) == 0)
            return 1;
    return 0;
}

/* --seeds 1,2,3: distinct whole numbers. */
static int
take_seeds(struct opts *o, const char *v)
{
    char buf[1024];
    if (strlen(v) >= sizeof buf)
        return bad("--seeds: list too long");
    strcpy(buf, v);
    o->n_seeds = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        uint64_t x;
        if (parse_u64("--seeds", t, 0, UINT64_MAX, &x) != 0)
            return -1;
        for (size_t k = 0; k < o->n_seeds; k++)
            if (o->seeds[k] == x)
                return bad("--seeds: %s given twice", t);
        if (o->n_seeds == SIM_SUITE_MAX_SEEDS)
            return bad("--seeds: more than %d", SIM_SUITE_MAX_SEEDS);
        o->seeds[o->n_seeds++] = x;
    }
    if (o->n_seeds == 0)
        return bad("--seeds: empty list");
    return 0;
}

static int
is_value_flag(const char *flag)
{
    for (size_t k = 0; k < sizeof value_flags / sizeof value_flags[0]; k++)
        if (strcmp(flag, value_flags[k]) == 0)
            return 1;
    return 0;
}

/* --router-rates MODE, or POLICY=MODE for one policy; a later setting
 * for the same target replaces an earlier one. */
static int
take_rates(struct opts *o, const char *v)
{
    struct sim_err err = { { 0 } };
    struct sim_rates r;
    const char *eq = strchr(v, '=');
    if (eq == NULL) {
        if (sim_rates_parse(v, &r, &err) != 0)
            return bad("--router-rates: %s", err.msg);
        o->rates = r;
        return 0;
    }
    char name[64];
    size_t n = (size_t)(eq - v);
    int32_t p = -1;
    if (n < sizeof name) {
        memcpy(name, v, n);
        name[n] = '\0';
    }
    if (n >= sizeof name || lr_policy_from_name(name, &p) != LR_OK) {
        char known[1024] = "";
        size_t used = 0;
        for (int k = 0; lr_policy_name(k) && used < sizeof known; k++) {
            int w = snprintf(known + used, sizeof known - used, " %s",
                             lr_policy_name(k));
            if (w > 0)
                used += (size_t)w;
        }
        return bad("--router-rates: unknown policy '%.*s' in '%s'; known:%s",
                   (int)n, v, v, known);
    }
    if (sim_rates_parse(eq + 1, &r, &err) != 0)
        return bad("--router-rates: %s: %s", name, err.msg);
    size_t k = 0;
    while (k < o->n_rates_for && o->rates_for[k].policy != p)
        k++;
    if (k == MAX_POLICIES)
        return bad("--router-rates: too many policies");
    o->rates_for[k].policy = p;
    o->rates_for[k].rates = r;
    if (k == o->n_rates_for)
        o->n_rates_for++;
    return 0;
}

/* The class rates policy p's router is told. */
static struct sim_rates
rates_of(const struct opts *o, int32_t p)
{
    for (size_t k = 0; k < o->n_rates_for; k++)
        if (o->rates_for[k].policy == p)
            return o->rates_for[k].rates;
    return o->rates;
}

enum { A_NONE, A_HELP, A_VERSION, A_LIST_W, A_LIST_C, A_LIST_P };

/* One option with a value. 0, or -1 (message printed). */
static int
take(struct opts *o, const char *flag, const char *v)
{
    uint64_t u;
    if (strcmp(flag, "--trace") == 0)
        o->trace = v;
    else if (strcmp(flag, "--workload") == 0)
        o->workload = v;
    else if (strcmp(flag, "--cluster") == 0)
        o->cluster = v;
    else if (strcmp(flag, "--policies") == 0)
        o->policies = v;
    else if (strcmp(flag, "--json") == 0)
        o->json = v;
    else if (strcmp(flag, "--svg") == 0)
        o->svg = v;
    else if (strcmp(flag, "--requests") == 0) {
        if (parse_u64(flag, v, 1, SIZE_MAX / 64, &u) != 0)
            return -1;
        o->requests = (size_t)u;
    } else if (strcmp(flag, "--rate") == 0)
        return parse_pos(flag, v, 1e6, &o->rate);
    else if (strcmp(flag, "--time-scale") == 0)
        return parse_pos(flag, v, 1e6, &o->time_scale);
    else if (strcmp(flag, "--slo-ttft") == 0)
        return parse_pos(flag, v, 3600, &o->slo);
    else if (strcmp(flag, "--scrape-ms") == 0)
        return parse_pos(flag, v, 600000, &o->scrape_ms);
    else if (strcmp(flag, "--seed") == 0) {
        o->seed_given = 1;
        return parse_u64(flag, v, 0, UINT64_MAX, &o->seed);
    } else if (strcmp(flag, "--seeds") == 0)
        return take_seeds(o, v);
    else if (strcmp(flag, "--suite-cells") == 0) {
        o->suite_cells = v;
        o->suite = 1;
    } else if (strcmp(flag, "--block-tokens") == 0) {
        if (parse_u64(flag, v, 1, 4096, &u) != 0)
            return -1;
        o->block_tokens = (uint32_t)u;
    } else if (strcmp(flag, "--trace-block") == 0) {
        if (parse_u64(flag, v, 1, 1u << 20, &u) != 0)
            return -1;
        o->trace_block = (uint32_t)u;
    } else if (strcmp(flag, "--index-blocks") == 0)
        return parse_u64(flag, v, 1, LR_INDEX_MAX_CAPACITY, &o->index_blocks);
    else if (strcmp(flag, "--marks") == 0)
        return parse_u64(flag, v, 0, LR_ROUTER_MAX_MARKS, &o->marks);
    else if (strcmp(flag, "--queue-tokens") == 0)
        return parse_u64(flag, v, 1, LR_ROUTER_MAX_QUEUE_TOKENS,
                         &o->queue_tokens);
    else if (strcmp(flag, "--jobs") == 0) {
        if (parse_u64(flag, v, 1, 256, &u) != 0)
            return -1;
        o->jobs = (unsigned)u;
    } else if (strcmp(flag, "--param") == 0) {
        if (o->n_params == MAX_PARAMS)
            return bad("--param: more than %d", MAX_PARAMS);
        struct sim_err err = { { 0 } };
        if (sim_param_parse(v, &o->params[o->n_params], &err) != 0)
            return bad("--param: %s", err.msg);
        o->n_params++;
    } else if (strcmp(flag, "--router-rates") == 0)
        return take_rates(o, v);
    else if (strcmp(flag, "--split-s") == 0)
        return parse_nonneg(flag, v, 1e9, &o->split_s);
    else if (strcmp(flag, "--learn-ms") == 0)
        return parse_pos(flag, v, 3.6e6, &o->learn_ms);
    else if (strcmp(flag, "--lodestar-freeze-s") == 0)
        return parse_nonneg(flag, v, 1e9, &o->freeze_s);
    else if (strcmp(flag, "--lodestar-min") == 0)
        return parse_u32(flag, v, 1, UINT32_MAX, &o->lodestar_min);
    else if (strcmp(flag, "--lodestar-every") == 0)
        return parse_u32(flag, v, 1, UINT32_MAX, &o->lodestar_every);
    else if (strcmp(flag, "--lodestar-epochs") == 0)
        return parse_u32(flag, v, 1, 10000, &o->lodestar_epochs);
    else if (strcmp(flag, "--dump-samples") == 0)
        o->dump_samples = v;
    else if (strcmp(flag, "--lodestar-max-reward") == 0)
        return parse_pos(flag, v, 1e9, &o->lodestar_max_reward);
    else if (strcmp(flag, "--replicas") == 0)
        return parse_u32(flag, v, 1, SIM_MAX_REPLICAS, &o->rep.n);
    else if (strcmp(flag, "--front") == 0 || strcmp(flag, "--sync") == 0) {
        struct sim_err err = { { 0 } };
        int rc = flag[2] == 'f' ? sim_front_parse(v, &o->rep, &err)
                                : sim_sync_parse(v, &o->rep, &err);
        if (rc != 0)
            return bad("%s: %s", flag, err.msg);
    } else if (strcmp(flag, "--spread") == 0) {
        return parse_nonneg(flag, v, 3.6e6, &o->spread_ms);
    } else if (strcmp(flag, "--eviction") == 0) {
        if (strcmp(v, "remote-first") == 0)
            o->rep.eviction = LR_EVICT_REMOTE_FIRST;
        else if (strcmp(v, "lru") == 0)
            o->rep.eviction = LR_EVICT_LRU;
        else
            return bad("--eviction: remote-first or lru, got '%s'", v);
    } else if (strcmp(flag, "--class-file") == 0) {
        struct sim_err err = { { 0 } };
        if (sim_class_file_load(v, &err) != 0)
            return bad("--class-file: %s", err.msg);
    } else if (strcmp(flag, "--mix") == 0 || strcmp(flag, "--tenants") == 0 ||
               strcmp(flag, "--burst") == 0) {
        struct sim_err err = { { 0 } };
        int rc = flag[2] == 'm'   ? sim_mix_parse_classes(v, &o->mix, &err)
                 : flag[2] == 't' ? sim_mix_parse_tenants(v, &o->mix, &err)
                                  : sim_mix_parse_burst(v, &o->mix, &err);
        if (rc != 0)
            return bad("%s: %s", flag, err.msg);
    } else if (strcmp(flag, "--admit") == 0) {
        if (strcmp(v, "now") == 0)
            o->admit = SIM_ADMIT_NOW;
        else if (strcmp(v, "queue") == 0)
            o->admit = SIM_ADMIT_QUEUE;
        else
            return bad("--admit: now or queue, got '%s'", v);
    } else if (strcmp(flag, "--adapters") == 0) {
        return parse_u32(flag, v, 0, SIM_MAX_ADAPTERS, &o->lora.n_adapters);
    } else if (strcmp(flag, "--adapter-zipf") == 0) {
        return parse_nonneg(flag, v, 10, &o->lora.zipf);
    } else if (strcmp(flag, "--adapter-share") == 0) {
        return parse_nonneg(flag, v, 1, &o->lora.share);
    } else if (strcmp(flag, "--adapter-shift-s") == 0) {
        return parse_pos(flag, v, 1e9, &o->lora.shift_s);
    } else if (strcmp(flag, "--adapter-by") == 0) {
        if (strcmp(v, "request") == 0)
            o->lora.by = SIM_ADAPTER_BY_REQUEST;
        else if (strcmp(v, "prompt") == 0)
            o->lora.by = SIM_ADAPTER_BY_PROMPT;
        else
            return bad("--adapter-by: request or prompt, got '%s'", v);
    } else if (strcmp(flag, "--max-loras") == 0) {
        return parse_u32(flag, v, 0, SIM_MAX_LORAS, &o->max_loras);
    } else if (strcmp(flag, "--adapter-load-ms") == 0) {
        return parse_nonneg(flag, v, 3.6e6, &o->adapter_load_ms);
    } else if (strcmp(flag, "--models") == 0) {
        struct sim_err err = { { 0 } };
        if (sim_lora_parse_models(v, &o->lora, &err) != 0)
            return bad("--models: %s", err.msg);
    } else if (strcmp(flag, "--cpu-cache-blocks") == 0) {
        return parse_u32(flag, v, 0, UINT32_MAX / 8, &o->cpu_blocks);
    } else if (strcmp(flag, "--cpu-load-gbps") == 0) {
        return parse_pos(flag, v, 1e6, &o->cpu_load_gbps);
    } else if (strcmp(flag, "--kv-bytes-per-token") == 0) {
        return parse_pos(flag, v, 1e9, &o->kv_bytes_per_token);
    } else if (strncmp(flag, "--kv-gbps-", 10) == 0) {
        static const char *const lv[4] = { "node", "rack", "region", "wan" };
        for (int k = 0; k < 4; k++)
            if (strcmp(flag + 10, lv[k]) == 0)
                return parse_pos(flag, v, 1e5, &o->kv_gbps[k]);
        return bad("unknown option '%s'", flag);
    } else if (strcmp(flag, "--kv-setup-ms") == 0) {
        return parse_nonneg(flag, v, 3.6e6, &o->kv_setup_ms);
    } else if (strcmp(flag, "--gauge-ms") == 0) {
        double ms;
        if (parse_nonneg(flag, v, 3.6e6, &ms) != 0)
            return -1;
        o->rep.gauge_us = (uint64_t)llround(ms * 1000.0);
    } else
        return bad("unknown option '%s'", flag);
    return 0;
}

/* Options argv[start, argc) into o, over what it holds. In a suite cell
 * (in_cell), the suite's and the whole run's flags are refused. */
static int
parse_words(int argc, char **argv, int start, int in_cell, struct opts *o,
            int *action)
{
    for (int i = start; i < argc; i++) {
        const char *a = argv[i];
        static const struct {
            const char *flag;
            int action;
        } acts[] = { { "--help", A_HELP },           { "-h", A_HELP },
                     { "--version", A_VERSION },     { "--list-workloads", A_LIST_W },
                     { "--list-classes", A_LIST_C }, { "--list-policies", A_LIST_P } };
        int found = 0;
        for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++)
            if (strcmp(a, acts[k].flag) == 0) {
                *action = acts[k].action;
                found = 1;
            }
        if (found && in_cell)
            return bad("%s has no place in a suite cell", a);
        if (found)
            continue;
        if (strncmp(a, "--", 2) != 0)
            return bad("unexpected argument '%s'", a);
        const char *eq = strchr(a, '=');
        char flag[64];
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (n >= sizeof flag)
            return bad("unknown option '%s'", a);
        memcpy(flag, a, n);
        flag[n] = '\0';
        if (in_cell && is_not_in_cell(flag))
            return bad("%s has no place in a suite cell: it applies to the "
                       "whole suite",
                       flag);
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--no-rebalance") == 0) {
            o->rebalance = 0;
            continue;
        }
        if (strcmp(a, "--curve") == 0) {
            o->curve = 1;
            continue;
        }
        if (strcmp(a, "--reasons") == 0) {
            o->reasons = 1;
            continue;
        }
        if (strcmp(a, "--suite") == 0) {
            o->suite = 1;
            continue;
        }
        if (strcmp(a, "--replica-suite") == 0) {
            o->replica_suite = 1;
            continue;
        }
        const char *v;
        if (eq != NULL) {
            v = eq + 1;
        } else {
            if (!is_value_flag(a))
                return bad("unknown option '%s'", a);
            if (i + 1 >= argc)
                return bad("%s needs a value", a);
            v = argv[++i];
        }
        if (take(o, flag, v) != 0)
            return -1;
    }
    return 0;
}

/* What no set of flags may combine. */
static int
check_opts(const struct opts *o)
{
    if (o->trace && o->workload)
        return bad("give --trace or --workload, not both");
    if (o->trace && o->rate > 0)
        return bad("--rate applies to generated workloads; scale a trace "
                   "with --time-scale");
    if (o->replica_suite && (o->suite || o->svg || o->dump_samples))
        return bad("--replica-suite makes its own runs: not with --suite, "
                   "--svg or --dump-samples");
    return 0;
}

static int
parse_args(int argc, char **argv, struct opts *o, int *action)
{
    *action = A_NONE;
    if (parse_words(argc, argv, 1, 0, o, action) != 0 || check_opts(o) != 0)
        return -1;
    if (!o->suite && o->n_seeds > 0)
        return bad("--seeds is for --suite; a single run takes --seed");
    if (o->suite) {
        /* the cells give the traffic and the cluster; a picture, samples
         * and a curve are of one run */
        const char *traffic = "the cells give the traffic and the cluster; "
                              "--suite-cells FILE takes your own";
        const char *single = "it is of a single run";
        const struct {
            const char *flag;
            int given;
            const char *why;
        } no[] = { { "--workload", o->workload != NULL, traffic },
                   { "--trace", o->trace != NULL, traffic },
                   { "--cluster", o->cluster != NULL, traffic },
                   { "--svg", o->svg != NULL, single },
                   { "--dump-samples", o->dump_samples != NULL, single },
                   { "--curve", o->curve, single },
                   { "--reasons", o->reasons, single } };
        for (size_t k = 0; k < sizeof no / sizeof no[0]; k++)
            if (no[k].given)
                return bad("--suite: %s has no place here: %s", no[k].flag,
                           no[k].why);
        if (o->seed_given && o->n_seeds > 0)
            return bad("--suite: give --seed or --seeds, not both");
    }
    return 0;
}

/* ---- listings ------------------------------------------------------------------------ */

static void
list_workloads(void)
{
    printf("%-16s %-10s %s\n", "workload", "cluster", "what");
    for (const struct sim_generator *g = sim_generators; g->name; g++)
        printf("%-16s %-10s %s\n", g->name, g->cluster, g->summary);
}

static void
list_classes(void)
{
    printf("%-6s %9s %9s %8s %9s %9s %6s %7s %9s  %s\n", "class", "step_ms",
           "prefill", "ctx2x", "dec_seq", "dec_ctx", "batch", "budget",
           "kv_tok", "what");
    for (const struct sim_class *c = sim_classes; c->name; c++) {
        printf("%-6s %9.1f %6.0fus %8.0f %7.0fus %7.3fus %6u %7u %9llu  %s",
               c->name, c->overhead_us / 1000, c->prefill_us, c->ctx_double,
               c->decode_seq_us, c->decode_ctx_us, c->max_batch,
               c->token_budget, (unsigned long long)c->kv_tokens, c->what);
        if (c->cache_kind == SIM_CACHE_SLOTS)
            printf(" [slots, host cache %llu tokens, similarity %g]",
                   (unsigned long long)c->host_cache_tokens,
                   c->slot_similarity);
        printf("\n");
    }
}

static int
supported(int32_t p)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.policy = p;
    lr_router *r;
    lr_status st = lr_router_create(&o, &r);
    lr_router_destroy(st == LR_OK ? r : NULL);
    return st == LR_OK;
}

static void
list_policies(void)
{
    for (int p = 0; p < MAX_POLICIES; p++) {
        const char *n = lr_policy_name(p);
        if (n == NULL)
            break;
        printf("%-24s%s\n", n, supported(p) ? "" : "(not supported)");
    }
}

/* ---- policies ------------------------------------------------------------------------- */

/* The policies made for LoRA traffic: "all" has them only where the
 * traffic names adapters (elsewhere they would add rows that only repeat
 * what the others show, and change the tables of every run before them);
 * --policies names them anywhere. */
static const int32_t lora_policies[] = { LR_POLICY_LORA_AFFINITY,
                                         LR_POLICY_AIBRIX_LORA };

static int
is_lora_policy(int32_t p)
{
    for (size_t k = 0; k < sizeof lora_policies / sizeof lora_policies[0]; k++)
        if (lora_policies[k] == p)
            return 1;
    return 0;
}

static int
all_policies(const char *spec)
{
    return spec == NULL || strcmp(spec, "all") == 0;
}

/* --policies into out; lora: the traffic names adapters (see
 * lora_policies). */
static int
select_policies(const char *spec, int lora, int32_t *out, size_t *n)
{
    *n = 0;
    if (all_policies(spec)) {
        for (int p = 0; p < MAX_POLICIES; p++) {
            if (lr_policy_name(p) == NULL)
                break;
            if (lora || !is_lora_policy(p))
                out[(*n)++] = p;
        }
        return 0;
    }
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return bad("--policies: list too long");
    strcpy(buf, spec);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int32_t p;
        if (lr_policy_from_name(t, &p) != LR_OK) {
            fprintf(stderr, "lrsim: --policies: unknown policy '%s'; known:",
                    t);
            for (int k = 0; lr_policy_name(k); k++)
                fprintf(stderr, " %s", lr_policy_name(k));
            fprintf(stderr, "\n");
            return -1;
        }
        for (size_t k = 0; k < *n; k++)
            if (out[k] == p)
                return bad("--policies: '%s' given twice", t);
        if (*n == MAX_POLICIES)
            return bad("--policies: too many");
        out[(*n)++] = (int32_t)p;
    }
    if (*n == 0)
        return bad("--policies: empty list");
    return 0;
}

/* ---- worker threads -------------------------------------------------------------------- */

struct job {
    struct sim_config cfg;
    struct sim_result res;
    struct sim_err err;
    int rc;
    int idle; /* the suite: a policy that has no place in its cell (rc 2) */
};

struct pool {
    struct job *jobs;
    size_t n;
    size_t *order; /* the jobs in the order they start (NULL: in order) */
    atomic_size_t next;
    atomic_size_t finished;
    int progress;
    /* the suite: jobs come in cells of `per_cell`; a line on stderr when a
     * cell's last one ends, and each result keeps only its aggregates */
    size_t per_cell;
    atomic_size_t *cell_left;
    atomic_size_t cells_done;
    const struct sim_suite_cells *cells;
    double t0;
};

static double mono_s(void);

/* The last job of suite cell c has ended. */
static void
cell_done(struct pool *p, size_t c)
{
    size_t done = atomic_fetch_add(&p->cells_done, 1) + 1;
    double busy = 0;
    size_t runs = 0;
    for (size_t k = c * p->per_cell; k < (c + 1) * p->per_cell; k++) {
        busy += p->jobs[k].res.wall_s;
        runs += !p->jobs[k].idle;
    }
    fprintf(stderr, "lrsim: suite [%zu/%zu] %-24s %zu runs, %.1f s of "
                    "simulation, %.1f s elapsed\n",
            done, p->cells->n, p->cells->v[c].name, runs, busy,
            mono_s() - p->t0);
}

static void *
worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->n)
            return NULL;
        if (p->order != NULL)
            k = p->order[k];
        struct job *j = &p->jobs[k];
        j->rc = j->idle ? 2 : sim_run(&j->cfg, &j->res, &j->err);
        if (p->per_cell) {
            sim_result_drop_requests(&j->res);
            size_t c = k / p->per_cell;
            if (atomic_fetch_sub(&p->cell_left[c], 1) == 1)
                cell_done(p, c);
        }
        size_t done = atomic_fetch_add(&p->finished, 1) + 1;
        if (p->progress)
            fprintf(stderr, "lrsim: [%2zu/%zu] %-22s %6.1f s\n", done, p->n,
                    j->res.policy_name, j->res.wall_s);
    }
}

static int
run_all(struct pool *p, unsigned jobs)
{
    atomic_init(&p->next, 0);
    atomic_init(&p->finished, 0);
    if (jobs > p->n)
        jobs = (unsigned)p->n;
    /* Lodestar's runs first: a learned policy trains all along and takes
     * several times as long as any other, so started last it would run
     * alone at the end. Which thread runs a job changes no result. */
    p->order = jobs > 1 ? sim_calloc(p->n, sizeof *p->order) : NULL;
    if (p->order != NULL) {
        size_t w = 0;
        for (int heavy = 1; heavy >= 0; heavy--)
            for (size_t k = 0; k < p->n; k++)
                if ((p->jobs[k].cfg.policy == LR_POLICY_LODESTAR) == heavy)
                    p->order[w++] = k;
    }
    pthread_t th[256];
    unsigned started = 0;
    for (unsigned t = 1; t < jobs; t++) {
        if (pthread_create(&th[started], NULL, worker, p) != 0)
            break; /* fewer threads is only slower */
        started++;
    }
    worker(p);
    for (unsigned t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    free(p->order);
    p->order = NULL;
    return 0;
}

/* ---- output files ------------------------------------------------------------------------ */

enum { OUT_JSON, OUT_SVG, OUT_CSV };

static int
write_tmp(const char *path, int kind, const struct sim_report *rep,
          char *tmp, size_t len)
{
    if ((size_t)snprintf(tmp, len, "%s.tmp", path) >= len) {
        fprintf(stderr, "lrsim: %s: path too long\n", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "lrsim: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    int rc = kind == OUT_JSON  ? sim_report_json(f, rep, 1)
             : kind == OUT_SVG ? sim_report_svg(f, rep)
                               : sim_report_samples_csv(f, rep);
    if (fflush(f) != 0)
        rc = -1;
    if (fclose(f) != 0)
        rc = -1;
    if (rc != 0) {
        fprintf(stderr, "lrsim: %s: write failed\n", tmp);
        remove(tmp);
    }
    return rc;
}

/* Every output file is written to FILE.tmp first; they are renamed only
 * when all of them were written. */
static int
write_outputs(const struct opts *o, const struct sim_report *rep)
{
    const char *path[3] = { o->json, o->svg, o->dump_samples };
    char tmp[3][PATH_MAX + 8];
    int have[3] = { 0, 0, 0 }, rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++)
        if (path[k] != NULL &&
            (rc = write_tmp(path[k], k, rep, tmp[k], sizeof tmp[k])) == 0)
            have[k] = 1;
    for (int k = 0; k < 3 && rc == 0; k++)
        if (have[k] && rename(tmp[k], path[k]) != 0) {
            fprintf(stderr, "lrsim: %s: %s\n", path[k], strerror(errno));
            rc = -1;
        } else {
            have[k] = 0;
        }
    for (int k = 0; k < 3; k++)
        if (rc != 0 && have[k])
            remove(tmp[k]);
    return rc;
}

/* ---- main ----------------------------------------------------------------------------------- */

static int
load_workload(const struct opts *o, struct sim_workload *w, char *source,
              size_t len)
{
    struct sim_err err = { { 0 } };
    if (o->trace) {
        snprintf(source, len, "trace %s", o->trace);
        if (sim_trace_load(o->trace, o->trace_block, w, &err) != 0) {
            fprintf(stderr, "lrsim: %s%s\n", where_prefix, err.msg);
            return -1;
        }
        w->seed = o->seed;
    } else {
        const char *name = o->workload ? o->workload : SIM_DEFAULT_WORKLOAD;
        const struct sim_generator *g = sim_generator_find(name);
        if (g == NULL) {
            fprintf(stderr,
                    "lrsim: %s--workload: unknown workload '%s'; known:",
                    where_prefix, name);
            for (const struct sim_generator *k = sim_generators; k->name; k++)
                fprintf(stderr, " %s", k->name);
            fprintf(stderr, "\n");
            return -1;
        }
        snprintf(source, len, "workload %s", name);
        struct sim_gen_opts go = { o->seed, o->requests, o->rate };
        if (g->build(&go, w, &err) != 0) {
            fprintf(stderr, "lrsim: %sworkload %s: %s\n", where_prefix, name,
                    err.msg);
            return -1;
        }
    }
    if (o->requests)
        sim_workload_truncate(w, o->requests);
    if (o->time_scale != 1.0)
        sim_workload_scale_time(w, o->time_scale);
    struct sim_err err2 = { { 0 } };
    if (o->spread_ms > 0 &&
        sim_workload_spread(w, (uint64_t)llround(o->spread_ms * 1000.0),
                            o->seed, &err2) != 0) {
        fprintf(stderr, "lrsim: %s--spread: %s\n", where_prefix, err2.msg);
        return -1;
    }
    if (sim_mix_any(&o->mix) || o->mix.burst > 1)
        sim_workload_mix(w, &o->mix, o->seed);
    if ((o->lora.n_adapters > 0 || o->lora.n_models > 0) &&
        sim_workload_lora(w, &o->lora, o->seed, &err2) != 0) {
        fprintf(stderr, "lrsim: %s%s\n", where_prefix, err2.msg);
        return -1;
    }
    return 0;
}

static unsigned
default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : n > 64 ? 64u : (unsigned)n;
}

static double
mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
opts_init(struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 42;
    o->slo = 5.0;
    o->time_scale = 1.0;
    o->block_tokens = 16;
    o->trace_block = SIM_TRACE_BLOCK;
    o->scrape_ms = 100;
    o->rebalance = 1;
    o->split_s = -1;
    o->learn_ms = 1000;
    o->freeze_s = -1;
    struct sim_config d;
    sim_config_init(&d);
    o->rep = d.rep;
    sim_lora_init(&o->lora);
    o->max_loras = d.max_loras;
    o->adapter_load_ms = (double)d.adapter_load_us / 1000.0;
    o->cpu_load_gbps = d.cpu_load_gbps;
    o->kv_bytes_per_token = d.kv_bytes_per_token;
    for (int k = 0; k < 4; k++)
        o->kv_gbps[k] = d.kv_gbps[k];
    o->kv_setup_ms = (double)d.kv_setup_us / 1000.0;
}

/* The run's settings from the options (everything but the policy and its
 * class rates). */
static void
make_config(const struct opts *o, const struct sim_workload *w,
            const struct sim_cluster *c, struct sim_config *cfg)
{
    sim_config_init(cfg);
    cfg->w = w;
    cfg->c = c;
    cfg->seed = o->seed;
    cfg->slo_ttft_s = o->slo;
    cfg->block_tokens = o->block_tokens;
    cfg->index_blocks = o->index_blocks;
    cfg->marks = o->marks;
    cfg->queue_tokens = o->queue_tokens;
    cfg->scrape_us = (uint64_t)llround(o->scrape_ms * 1000.0);
    cfg->rebalance = o->rebalance;
    if (cfg->scrape_us == 0)
        cfg->scrape_us = 1;
    cfg->params = o->params;
    cfg->n_params = o->n_params;
    if (o->split_s >= 0)
        cfg->split_us = (uint64_t)llround(o->split_s * 1e6);
    cfg->learn_us = (uint64_t)llround(o->learn_ms * 1000.0);
    if (cfg->learn_us == 0)
        cfg->learn_us = 1;
    if (o->freeze_s >= 0)
        cfg->freeze_us = (uint64_t)llround(o->freeze_s * 1e6);
    cfg->lodestar_min = o->lodestar_min;
    cfg->lodestar_every = o->lodestar_every;
    cfg->lodestar_epochs = o->lodestar_epochs;
    cfg->lodestar_max_reward = o->lodestar_max_reward;
    cfg->keep_samples = o->dump_samples != NULL;
    cfg->rep = o->rep;
    cfg->admit = o->admit;
    cfg->max_loras = o->max_loras;
    cfg->adapter_load_us = (uint64_t)llround(o->adapter_load_ms * 1000.0);
    cfg->cpu_blocks = o->cpu_blocks;
    cfg->cpu_load_gbps = o->cpu_load_gbps;
    cfg->kv_bytes_per_token = o->kv_bytes_per_token;
    for (int k = 0; k < 4; k++)
        cfg->kv_gbps[k] = o->kv_gbps[k];
    cfg->kv_setup_us = (uint64_t)llround(o->kv_setup_ms * 1000.0);
}

/* Run every selected policy; fill rep's runs and skipped lists. */
static int
simulate(const struct opts *o, const struct sim_config *base, struct pool *p,
         struct sim_result **runs, struct sim_skip **skips,
         struct sim_report *rep)
{
    int32_t pol[MAX_POLICIES];
    size_t n_pol;
    if (select_policies(o->policies, base->w->lora.n_adapters > 0, pol,
                        &n_pol) != 0)
        return EXIT_USAGE;
    int has_lodestar = 0;
    for (size_t k = 0; k < n_pol; k++)
        has_lodestar |= pol[k] == LR_POLICY_LODESTAR;
    if (o->dump_samples && !has_lodestar) {
        bad("--dump-samples needs lodestar among --policies");
        return EXIT_USAGE;
    }
    p->jobs = sim_calloc(n_pol, sizeof *p->jobs);
    *runs = sim_calloc(n_pol, sizeof **runs);
    *skips = sim_calloc(n_pol, sizeof **skips);
    if (p->jobs == NULL || *runs == NULL || *skips == NULL) {
        fprintf(stderr, "lrsim: out of memory\n");
        return 1;
    }
    p->n = n_pol;
    p->progress = isatty(STDERR_FILENO) && !o->quiet;
    for (size_t k = 0; k < n_pol; k++) {
        p->jobs[k].cfg = *base;
        p->jobs[k].cfg.policy = pol[k];
        p->jobs[k].cfg.rates = rates_of(o, pol[k]);
    }
    run_all(p, o->jobs ? o->jobs : default_jobs());
    int failed = 0;
    for (size_t k = 0; k < n_pol; k++) {
        struct job *j = &p->jobs[k];
        if (j->rc == 1) {
            struct sim_skip *s = &(*skips)[rep->n_skipped++];
            snprintf(s->policy, sizeof s->policy, "%s", j->res.policy_name);
            snprintf(s->why, sizeof s->why, "%s", "not supported by this "
                                                  "libroute (LR_ENOTSUP)");
            fprintf(stderr, "lrsim: skipping %s: not supported by this "
                            "libroute (LR_ENOTSUP)\n",
                    j->res.policy_name);
        } else if (j->rc != 0) {
            fprintf(stderr, "lrsim: %s\n", j->err.msg);
            failed = 1;
        } else {
            (*runs)[rep->n_runs++] = j->res;
            memset(&j->res, 0, sizeof j->res); /* moved */
        }
    }
    if (failed)
        return 1;
    if (rep->n_runs == 0) {
        fprintf(stderr, "lrsim: no policy could run\n");
        return 1;
    }
    if (o->dump_samples) {
        int ran = 0;
        for (size_t k = 0; k < rep->n_runs; k++)
            ran |= (*runs)[k].policy == LR_POLICY_LODESTAR;
        if (!ran) {
            fprintf(stderr, "lrsim: --dump-samples: lodestar did not run\n");
            return 1;
        }
    }
    return 0;
}

static int write_file(const char *path, int (*fn)(FILE *, const void *),
                      const void *arg);

/* ---- the replica preset ------------------------------------------------------------------ */

/* The replica settings --replica-suite compares: one router, then R with
 * each way of sharing (R from --replicas, 4 by default). */
#define REPLICA_CONFIGS 5

static void
replica_configs(const struct opts *o, struct sim_replicas *out)
{
    static const char *const sync[REPLICA_CONFIGS] = {
        "none", "none", "events", "deltas:100", "deltas:1000"
    };
    for (int k = 0; k < REPLICA_CONFIGS; k++) {
        out[k] = o->rep;
        out[k].n = k == 0 ? 1 : (o->rep.n > 1 ? o->rep.n : 4);
        struct sim_err err = { { 0 } };
        (void)sim_sync_parse(sync[k], &out[k], &err); /* valid */
    }
}

static int
replica_json(FILE *f, const void *arg)
{
    const struct sim_report *rep = arg;
    fprintf(f, "{\n  \"lrsim\": ");
    sim_json_str(f, LRSIM_VERSION);
    fprintf(f, ",\n  \"source\": ");
    sim_json_str(f, rep->source);
    fprintf(f, ",\n  \"seed\": %llu,\n  \"runs\": [\n",
            (unsigned long long)rep->cfg->seed);
    for (size_t k = 0; k < rep->n_runs; k++) {
        sim_report_json_run(f, rep, &rep->runs[k], 0);
        fprintf(f, "%s\n", k + 1 < rep->n_runs ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return ferror(f) ? -1 : 0;
}

/* One row per policy: hit rate and TTFT mean for each setting, the
 * shared ones also as a ratio to the single router's. */
static void
replica_table(FILE *f, const struct sim_report *rep, size_t n_pol)
{
    fprintf(f, "lrsim %s, libroute %s: %s, %u requests, seed %llu\n",
            LRSIM_VERSION, lr_version_string(), rep->source,
            (unsigned)rep->w->n_reqs, (unsigned long long)rep->cfg->seed);
    char cl[256];
    sim_cluster_describe(rep->c, cl, sizeof cl);
    fprintf(f, "cluster: %s\n", cl);
    fprintf(f, "hit%%: engine-measured prefix cache hit rate; TTFT: mean, "
               "s; (x): ratio to 1 router\n\n");
    fprintf(f, "%-22s", "policy");
    for (int k = 0; k < REPLICA_CONFIGS; k++)
        fprintf(f, " | %-25s", rep->runs[k].replicas_desc);
    fprintf(f, "\n");
    for (size_t p = 0; p < n_pol; p++) {
        const struct sim_result *one = &rep->runs[p * REPLICA_CONFIGS];
        fprintf(f, "%-22s", one->policy_name);
        for (int k = 0; k < REPLICA_CONFIGS; k++) {
            const struct sim_result *r = &rep->runs[p * REPLICA_CONFIGS + k];
            if (k == 0)
                fprintf(f, " | %5.1f %7.3f %11s", 100 * r->cache_hit_rate,
                        r->ttft_mean_s, "");
            else
                fprintf(f, " | %5.1f (%.2f) %6.3f (%.2f)",
                        100 * r->cache_hit_rate,
                        one->cache_hit_rate > 0
                            ? r->cache_hit_rate / one->cache_hit_rate
                            : NAN,
                        r->ttft_mean_s, r->ttft_mean_s / one->ttft_mean_s);
        }
        fprintf(f, "\n");
    }
    /* the means are over the requests served: say where some were not
     * (a full queue fails them), so that unequal sets are not compared
     * unawares */
    int any = 0;
    for (size_t k = 0; k < rep->n_runs; k++)
        any |= rep->runs[k].failed + rep->runs[k].expired +
                   rep->runs[k].shed >
               0;
    if (!any)
        return;
    fprintf(f, "\nnot served (failed, expired, shed; the means are of "
               "the others):\n");
    for (size_t p = 0; p < n_pol; p++) {
        fprintf(f, "%-22s", rep->runs[p * REPLICA_CONFIGS].policy_name);
        for (int k = 0; k < REPLICA_CONFIGS; k++) {
            const struct sim_result *r = &rep->runs[p * REPLICA_CONFIGS + k];
            char b[64];
            snprintf(b, sizeof b, "%llu, %llu, %llu",
                     (unsigned long long)r->failed,
                     (unsigned long long)r->expired,
                     (unsigned long long)r->shed);
            fprintf(f, " | %-25s", b);
        }
        fprintf(f, "\n");
    }
}

/* lrsim --replica-suite: every selected policy, each replica setting. */
static int
run_replica_suite(const struct opts *o, const struct sim_config *base,
                  struct sim_report *rep, double t0)
{
    int32_t pol[MAX_POLICIES];
    size_t n_pol;
    if (select_policies(o->policies, base->w->lora.n_adapters > 0, pol,
                        &n_pol) != 0)
        return EXIT_USAGE;
    struct sim_replicas rc_of[REPLICA_CONFIGS];
    replica_configs(o, rc_of);
    struct pool p = { 0 };
    p.n = n_pol * REPLICA_CONFIGS;
    p.jobs = sim_calloc(p.n, sizeof *p.jobs);
    struct sim_result *runs = sim_calloc(p.n, sizeof *runs);
    int rc = 1;
    if (p.jobs == NULL || runs == NULL) {
        fprintf(stderr, "lrsim: out of memory\n");
        goto out;
    }
    p.progress = isatty(STDERR_FILENO) && !o->quiet;
    for (size_t k = 0; k < p.n; k++) {
        p.jobs[k].cfg = *base;
        p.jobs[k].cfg.policy = pol[k / REPLICA_CONFIGS];
        p.jobs[k].cfg.rates = rates_of(o, pol[k / REPLICA_CONFIGS]);
        p.jobs[k].cfg.rep = rc_of[k % REPLICA_CONFIGS];
    }
    run_all(&p, o->jobs ? o->jobs : default_jobs());
    for (size_t k = 0; k < p.n; k++) {
        struct job *j = &p.jobs[k];
        if (j->rc != 0) {
            fprintf(stderr, "lrsim: %s (%s)\n", j->err.msg,
                    j->res.replicas_desc);
            goto out;
        }
        sim_result_drop_requests(&j->res);
        runs[k] = j->res;
        memset(&j->res, 0, sizeof j->res);
    }
    rep->runs = runs;
    rep->n_runs = p.n;
    rep->wall_s = mono_s() - t0;
    rc = 0;
    if (!o->quiet)
        replica_table(stdout, rep, n_pol);
    if (fflush(stdout) != 0)
        rc = 1;
    if (rc == 0 && o->json != NULL && write_file(o->json, replica_json, rep))
        rc = 1;
    fprintf(stderr, "lrsim: replica suite: %zu runs in %.1f s\n", p.n,
            mono_s() - t0);
out:
    for (size_t k = 0; k < p.n; k++) {
        sim_result_free(&p.jobs[k].res);
        if (runs != NULL)
            sim_result_free(&runs[k]);
    }
    free(p.jobs);
    free(runs);
    rep->runs = NULL;
    rep->n_runs = 0;
    return rc;
}

/* ---- the regime suite ------------------------------------------------------------------ */

/* One cell with one seed: its options, traffic, cluster and runs. */
struct cell_seed {
    struct opts o;
    struct sim_workload w;
    struct sim_cluster c;
    struct sim_config cfg;
    char source[512];
    struct sim_result *runs;
    struct sim_skip *skips;
};

/* FILE to FILE.tmp, renamed once written; nothing left on failure. */
static int
write_file(const char *path, int (*fn)(FILE *, const void *), const void *arg)
{
    char tmp[PATH_MAX + 8];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        fprintf(stderr, "lrsim: %s: path too long\n", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "lrsim: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    int rc = fn(f, arg);
    if (fflush(f) != 0)
        rc = -1;
    if (fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "lrsim: %s: write failed\n", tmp);
    else if (rename(tmp, path) != 0) {
        fprintf(stderr, "lrsim: %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    if (rc != 0)
        remove(tmp);
    return rc;
}

static int
suite_json(FILE *f, const void *s)
{
    return sim_suite_json(f, s, 1);
}

/* --router-rates as the suite ran it: the command line's mode, then each
 * policy told otherwise ("nominal; adaptive: none"); "varies by cell" if
 * some cell set its own. */
static void
describe_rates(const struct opts *o, const struct cell_seed *cs, size_t n_cs,
               const int32_t *pol, size_t n_pol, char *buf, size_t len)
{
    char base[40];
    sim_rates_describe(&o->rates, base, sizeof base);
    size_t used = (size_t)snprintf(buf, len, "%s", base);
    for (size_t p = 0; p < n_pol && used < len; p++) {
        char first[40], m[40];
        struct sim_rates r = rates_of(&cs[0].o, pol[p]);
        sim_rates_describe(&r, first, sizeof first);
        for (size_t k = 1; k < n_cs; k++) {
            r = rates_of(&cs[k].o, pol[p]);
            sim_rates_describe(&r, m, sizeof m);
            if (strcmp(m, first) != 0) {
                snprintf(buf, len, "varies by cell (router_rates of each run "
                                   "in the JSON)");
                return;
            }
        }
        if (strcmp(first, base) != 0)
            used += (size_t)snprintf(buf + used, len - used, "%s%s: %s",
                                     strchr(buf, ';') ? ", " : "; ",
                                     lr_policy_name(pol[p]), first);
    }
}

/* Every cell's options over the command line's, each seed's traffic and
 * cluster. A bad cell is a usage error (2), found before any run. */
static int
prepare_cells(int argc, char **argv, const struct sim_suite_cells *cells,
              const uint64_t *seeds, size_t n_seeds, struct cell_seed *cs)
{
    for (size_t c = 0; c < cells->n; c++) {
        const struct sim_suite_cell *cell = &cells->v[c];
        if (strcmp(cell->where, "built-in") == 0)
            snprintf(where_prefix, sizeof where_prefix, "cell %s: ",
                     cell->name);
        else
            snprintf(where_prefix, sizeof where_prefix, "%s: ", cell->where);
        struct opts oc;
        opts_init(&oc);
        int action = A_NONE;
        /* the cell's words, then the command line's: its flags win */
        if (parse_words(cell->argc, cell->argv, 0, 1, &oc, &action) != 0 ||
            parse_words(argc, argv, 1, 0, &oc, &action) != 0 ||
            check_opts(&oc) != 0)
            return -1;
        for (size_t k = 0; k < n_seeds; k++) {
            struct cell_seed *x = &cs[c * n_seeds + k];
            x->o = oc;
            x->o.seed = seeds[k];
            if (load_workload(&x->o, &x->w, x->source, sizeof x->source) != 0)
                return -1;
            struct sim_err err = { { 0 } };
            if (sim_cluster_parse(x->o.cluster ? x->o.cluster : x->w.cluster,
                                  &x->c, &err) != 0) {
                fprintf(stderr, "lrsim: %s--cluster: %s\n", where_prefix,
                        err.msg);
                return -1;
            }
            make_config(&x->o, &x->w, &x->c, &x->cfg);
        }
    }
    where_prefix[0] = '\0';
    return 0;
}

/* lrsim --suite: every selected policy on every cell with every seed. */
static int
run_suite(const struct opts *o, int argc, char **argv, double t0)
{
    struct sim_suite_cells cells = { 0 };
    struct sim_err err = { { 0 } };
    int32_t pol[MAX_POLICIES];
    size_t n_pol = 0, n_cs = 0, n_idle = 0;
    struct cell_seed *cs = NULL;
    struct sim_report *reps = NULL;
    struct pool p = { 0 };
    int rc = EXIT_USAGE;
    if (o->suite_cells ? sim_suite_read(o->suite_cells, &cells, &err)
                       : sim_suite_builtin(&cells, &err)) {
        fprintf(stderr, "lrsim: --suite-cells: %s\n", err.msg);
        goto out;
    }
    if (select_policies(o->policies, 1, pol, &n_pol) != 0)
        goto out;
    const uint64_t *seeds = o->n_seeds ? o->seeds : &o->seed;
    size_t n_seeds = o->n_seeds ? o->n_seeds : 1;
    n_cs = cells.n * n_seeds;
    cs = sim_calloc(n_cs, sizeof *cs);
    reps = sim_calloc(n_cs, sizeof *reps);
    p.cell_left = sim_calloc(cells.n, sizeof *p.cell_left);
    if (cs == NULL || reps == NULL || p.cell_left == NULL) {
        fprintf(stderr, "lrsim: out of memory\n");
        rc = 1;
        goto out;
    }
    for (size_t k = 0; k < n_cs; k++)
        sim_workload_init(&cs[k].w);
    if (prepare_cells(argc, argv, &cells, seeds, n_seeds, cs) != 0)
        goto out;
    rc = 1;
    /* "all": the LoRA policies only if some cell's traffic names adapters,
     * and then only in those cells (lora_policies) */
    int any_lora = 0;
    for (size_t k = 0; k < n_cs; k++)
        any_lora |= cs[k].w.lora.n_adapters > 0;
    if (all_policies(o->policies) && !any_lora) {
        size_t m = 0;
        for (size_t q = 0; q < n_pol; q++)
            if (!is_lora_policy(pol[q]))
                pol[m++] = pol[q];
        n_pol = m;
    }
    p.jobs = sim_calloc(n_cs * n_pol, sizeof *p.jobs);
    if (p.jobs == NULL) {
        fprintf(stderr, "lrsim: out of memory\n");
        goto out;
    }
    for (size_t k = 0; k < n_cs; k++) {
        cs[k].runs = sim_calloc(n_pol, sizeof *cs[k].runs);
        cs[k].skips = sim_calloc(n_pol, sizeof *cs[k].skips);
        if (cs[k].runs == NULL || cs[k].skips == NULL) {
            fprintf(stderr, "lrsim: out of memory\n");
            goto out;
        }
        for (size_t q = 0; q < n_pol; q++) {
            struct job *j = &p.jobs[k * n_pol + q];
            j->cfg = cs[k].cfg;
            j->cfg.policy = pol[q];
            j->cfg.rates = rates_of(&cs[k].o, pol[q]);
            j->idle = all_policies(o->policies) && is_lora_policy(pol[q]) &&
                      cs[k].w.lora.n_adapters == 0;
            n_idle += (size_t)j->idle;
        }
    }
    /* cell-major order: cells finish roughly one after the other */
    p.n = n_cs * n_pol;
    p.per_cell = n_seeds * n_pol;
    for (size_t c = 0; c < cells.n; c++)
        atomic_init(&p.cell_left[c], p.per_cell);
    atomic_init(&p.cells_done, 0);
    p.cells = &cells;
    p.t0 = t0;
    unsigned jobs = o->jobs ? o->jobs : default_jobs();
    fprintf(stderr, "lrsim: suite: %zu cells x %zu seed%s x %zu policies = "
                    "%zu runs, %u at a time\n",
            cells.n, n_seeds, n_seeds == 1 ? "" : "s", n_pol, p.n - n_idle,
            jobs);
    if (n_idle > 0)
        fprintf(stderr, "lrsim: suite: the LoRA policies run only in the "
                        "cells with adapters\n");
    run_all(&p, jobs);
    int failed = 0;
    for (size_t k = 0; k < n_cs; k++) {
        struct sim_report *rep = &reps[k];
        for (size_t q = 0; q < n_pol; q++) {
            struct job *j = &p.jobs[k * n_pol + q];
            if (j->rc == 2) {
                continue; /* no place in this cell */
            } else if (j->rc == 1) {
                struct sim_skip *sk = &cs[k].skips[rep->n_skipped++];
                snprintf(sk->policy, sizeof sk->policy, "%s",
                         j->res.policy_name);
                snprintf(sk->why, sizeof sk->why, "%s",
                         "not supported by this libroute (LR_ENOTSUP)");
                if (k == 0)
                    fprintf(stderr, "lrsim: skipping %s: not supported by "
                                    "this libroute (LR_ENOTSUP)\n",
                            j->res.policy_name);
            } else if (j->rc != 0) {
                fprintf(stderr, "lrsim: %s, seed %llu: %s\n",
                        cells.v[k / n_seeds].name,
                        (unsigned long long)cs[k].o.seed, j->err.msg);
                failed = 1;
            } else {
                cs[k].runs[rep->n_runs++] = j->res;
                memset(&j->res, 0, sizeof j->res); /* moved */
            }
        }
        rep->source = cs[k].source;
        rep->w = &cs[k].w;
        rep->c = &cs[k].c;
        rep->cfg = &cs[k].cfg;
        rep->time_scale = cs[k].o.time_scale;
        rep->runs = cs[k].runs;
        rep->skipped = cs[k].skips;
        rep->jobs = jobs;
        rep->cell = cells.v[k / n_seeds].name;
    }
    if (failed)
        goto out;
    char rates[1024];
    describe_rates(o, cs, n_cs, pol, n_pol, rates, sizeof rates);
    struct sim_suite s = { .cells = cells.v,
                           .n_cells = cells.n,
                           .seeds = seeds,
                           .n_seeds = n_seeds,
                           .policies = pol,
                           .n_pol = n_pol,
                           .reps = reps,
                           .rates = rates,
                           .jobs = jobs };
    s.wall_s = mono_s() - t0;
    rc = 0;
    if (!o->quiet && sim_suite_table(stdout, &s) != 0)
        rc = 1;
    if (fflush(stdout) != 0)
        rc = 1;
    if (rc == 0 && o->json != NULL && write_file(o->json, suite_json, &s) != 0)
        rc = 1;
    fprintf(stderr, "lrsim: suite: %zu runs in %.1f s, %u at a time\n",
            p.n - n_idle, mono_s() - t0, jobs);
out:
    for (size_t k = 0; cs != NULL && k < n_cs; k++) {
        for (size_t q = 0; q < reps[k].n_runs; q++)
            sim_result_free(&cs[k].runs[q]);
        free(cs[k].runs);
        free(cs[k].skips);
        sim_cluster_free(&cs[k].c);
        sim_workload_free(&cs[k].w);
    }
    for (size_t k = 0; k < p.n; k++)
        sim_result_free(&p.jobs[k].res);
    free(p.jobs);
    free(p.cell_left);
    free(cs);
    free(reps);
    sim_suite_cells_free(&cells);
    return rc;
}

int
main(int argc, char **argv)
{
    double t0 = mono_s();
    struct opts o;
    opts_init(&o);
    int action;
    if (parse_args(argc, argv, &o, &action) != 0)
        return EXIT_USAGE;
    switch (action) {
    case A_HELP:
        usage(stdout);
        return 0;
    case A_VERSION:
        printf("lrsim %s (libroute %s)\n", LRSIM_VERSION, lr_version_string());
        return 0;
    case A_LIST_W:
        list_workloads();
        return 0;
    case A_LIST_C:
        list_classes();
        return 0;
    case A_LIST_P:
        list_policies();
        return 0;
    default:
        break;
    }
    if (o.suite)
        return run_suite(&o, argc, argv, t0);

    struct sim_workload w;
    sim_workload_init(&w);
    char source[512];
    struct sim_cluster c;
    memset(&c, 0, sizeof c);
    struct sim_err err = { { 0 } };
    int rc = EXIT_USAGE;
    struct pool p = { 0 };
    struct sim_result *runs = NULL;
    struct sim_skip *skips = NULL;
    struct sim_report rep = { 0 };
    if (load_workload(&o, &w, source, sizeof source) != 0)
        goto out;
    if (sim_cluster_parse(o.cluster ? o.cluster : w.cluster, &c, &err) != 0) {
        fprintf(stderr, "lrsim: --cluster: %s\n", err.msg);
        goto out;
    }
    struct sim_config cfg;
    make_config(&o, &w, &c, &cfg);
    rep.source = source;
    rep.w = &w;
    rep.c = &c;
    rep.cfg = &cfg;
    rep.time_scale = o.time_scale;
    if (o.replica_suite) {
        rc = run_replica_suite(&o, &cfg, &rep, t0);
        goto out;
    }
    rc = simulate(&o, &cfg, &p, &runs, &skips, &rep);
    if (rc != 0)
        goto out;
    rep.runs = runs;
    rep.skipped = skips;
    rep.jobs = o.jobs ? o.jobs : default_jobs();
    rep.show_curve = o.curve;
    rep.show_reasons = o.reasons;
    rep.wall_s = mono_s() - t0;
    if (!o.quiet)
        sim_report_table(stdout, &rep);
    if (fflush(stdout) != 0)
        rc = 1;
    if (rc == 0 && write_outputs(&o, &rep) != 0)
        rc = 1;
out:
    for (size_t k = 0; k < rep.n_runs; k++)
        sim_result_free(&runs[k]);
    for (size_t k = 0; k < p.n; k++)
        sim_result_free(&p.jobs[k].res);
    free(p.jobs);
    free(runs);
    free(skips);
    sim_cluster_free(&c);
    sim_workload_free(&w);
    return rc;
}
