/* lrsim: table, JSON and SVG output (see report.h). */
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

#include "version.h"

/* ---- table ---------------------------------------------------------------------------- */

enum { BEST_MIN, BEST_MAX };

struct col {
    const char *head;
    int width, prec;
    int best; /* BEST_MIN / BEST_MAX */
    double scale;
    size_t off; /* offset of a double in sim_result */
};

#define COL(h, w, p, b, s, field) \
    { h, w, p, b, s, offsetof(struct sim_result, field) }

static const struct col cols[] = {
    COL("mean", 7, 3, BEST_MIN, 1, ttft_mean_s),
    COL("p50", 7, 3, BEST_MIN, 1, ttft_p50_s),
    COL("p95", 7, 3, BEST_MIN, 1, ttft_p95_s),
    COL("p99", 7, 3, BEST_MIN, 1, ttft_p99_s),
    COL("mean", 7, 4, BEST_MIN, 1, tpot_mean_s),
    COL("p99", 7, 4, BEST_MIN, 1, tpot_p99_s),
    COL("p50", 7, 2, BEST_MIN, 1, e2e_p50_s),
    COL("p95", 7, 2, BEST_MIN, 1, e2e_p95_s),
    COL("hit%", 6, 1, BEST_MAX, 100, cache_hit_rate),
    COL("loadCV", 6, 2, BEST_MIN, 1, load_cv),
    COL("SLO%", 6, 1, BEST_MAX, 100, slo_attainment),
    COL("good/s", 7, 2, BEST_MAX, 1, goodput_rps),
};
#define NCOLS (sizeof cols / sizeof cols[0])

/* The columns' groups, left to right: a heading over each and a '|' after
 * each; the columns after the last group have neither (route() follows
 * them). */
static const struct group {
    const char *head;
    size_t n;
} groups[] = {
    { "TTFT (s)", 4 },
    { "TPOT (s)", 2 },
    { "E2E (s)", 2 },
};
#define NGROUPS (sizeof groups / sizeof groups[0])

/* Does column c end a group? */
static int
group_end(size_t c)
{
    size_t end = 0;
    for (size_t g = 0; g < NGROUPS; g++) {
        end += groups[g].n;
        if (c + 1 == end)
            return 1;
    }
    return 0;
}

/* The line of group headings over the columns (each over its group's
 * first column), and route()'s over its column. */
static void
group_heads(FILE *f)
{
    fprintf(f, "%-22s", "");
    size_t c = 0;
    for (size_t g = 0; g < NGROUPS; g++) {
        int width = 0; /* its columns (with the space before, its '|') */
        for (size_t k = 0; k < groups[g].n; k++, c++)
            width += cols[c].width + 2;
        fprintf(f, " %-*s", width, groups[g].head);
    }
    int rest = 0;
    for (; c < NCOLS; c++)
        rest += cols[c].width + 2;
    fprintf(f, "%*s  %9s\n", rest, "", "route()");
}

static double
field(const struct sim_result *r, const struct col *c)
{
    double v;
    memcpy(&v, (const char *)r + c->off, sizeof v);
    return v * c->scale;
}

/* Is run k the best in column c (ties: every one of them)? */
static int
is_best(const struct sim_report *rep, size_t k, const struct col *c)
{
    if (rep->n_runs < 2)
        return 0;
    double mine = field(&rep->runs[k], c);
    if (isnan(mine))
        return 0;
    /* compare at the printed precision, so equal-looking values tie */
    double q = pow(10.0, c->prec);
    mine = round(mine * q);
    for (size_t j = 0; j < rep->n_runs; j++) {
        double v = round(field(&rep->runs[j], c) * q);
        if (isnan(v))
            continue;
        if (c->best == BEST_MIN ? v < mine : v > mine)
            return 0;
    }
    return 1;
}

static void
fmt_ns(char *buf, size_t len, double ns)
{
    if (ns < 1000)
        snprintf(buf, len, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, len, "%.1f us", ns / 1e3);
    else
        snprintf(buf, len, "%.2f ms", ns / 1e6);
}

/* The class rates the routers were told, when not the true ones: one
 * mode for all, or each policy's. */
static void
table_rates(FILE *f, const struct sim_report *rep)
{
    int same = 1, nominal = 1;
    for (size_t k = 0; k < rep->n_runs; k++) {
        same &=
            strcmp(rep->runs[k].router_rates, rep->runs[0].router_rates) == 0;
        nominal &= strcmp(rep->runs[k].router_rates, "nominal") == 0;
    }
    if (rep->n_runs == 0 || nominal)
        return;
    fprintf(f, "  class rates told to the router (--router-rates): ");
    if (same)
        fprintf(f, "%s\n", rep->runs[0].router_rates);
    else
        for (size_t k = 0; k < rep->n_runs; k++)
            fprintf(f, "%s %s%s", rep->runs[k].policy_name,
                    rep->runs[k].router_rates,
                    k + 1 < rep->n_runs ? ", " : "\n");
}

/* Gateway replicas, when there are several: the setting and what they
 * exchanged (the first run's; every run has the same setting). */
static void
table_replicas(FILE *f, const struct sim_report *rep)
{
    if (rep->n_runs == 0 || rep->runs[0].replicas <= 1)
        return;
    const struct sim_result *r = &rep->runs[0];
    fprintf(f, "  gateway replicas: %s", r->replicas_desc);
    if (r->deltas_sent)
        fprintf(f, "; deltas of %.0f B on average",
                (double)r->delta_bytes / (double)r->deltas_sent);
    if (r->gauges_sent)
        fprintf(f, "; gauges of %.0f B", (double)r->gauge_bytes /
                                             (double)r->gauges_sent);
    fprintf(f, "\n");
}

static const char *
admit_name(int admit)
{
    return admit == SIM_ADMIT_QUEUE ? "queue" : "now";
}

/* Request classes, tenants, bursts and the admission mode, when any. */
static void
table_mix(FILE *f, const struct sim_report *rep)
{
    const struct sim_mix *m = &rep->w->mix;
    if (!sim_mix_any(m) && !(m->burst > 1) &&
        rep->cfg->admit != SIM_ADMIT_QUEUE)
        return;
    char buf[1024];
    sim_mix_describe(m, buf, sizeof buf);
    if (buf[0])
        fprintf(f, "  %s\n", buf);
    fprintf(f, "  admission (--admit): %s\n",
            rep->cfg->admit == SIM_ADMIT_QUEUE
                ? "queue: requests may wait in the router's queue "
                  "(LR_ROUTE_MAY_WAIT), let out by lr_router_dispatch()"
                : "now: route() sends every request at once");
}

/* LoRA adapters and models, when the traffic names any. */
static void
table_lora(FILE *f, const struct sim_report *rep)
{
    const struct sim_lora *l = &rep->w->lora;
    if (l->n_adapters == 0 && l->n_models == 0)
        return;
    char buf[512];
    sim_lora_describe(l, buf, sizeof buf);
    fprintf(f, "  %s\n", buf);
    if (l->n_adapters > 0)
        fprintf(f, "  adapter slots per engine (--max-loras) %u, %g ms per "
                   "adapter load\n",
                rep->cfg->max_loras,
                (double)rep->cfg->adapter_load_us / 1000.0);
}

/* The engines' CPU tier, when they have one. */
static void
table_cpu_tier(FILE *f, const struct sim_report *rep)
{
    const struct sim_config *cfg = rep->cfg;
    if (cfg->cpu_blocks == 0)
        return;
    fprintf(f, "  CPU tier per engine (--cpu-cache-blocks) %u blocks (%llu "
               "tokens), loads at %g GB/s x %g KV bytes per token (%.2f us "
               "a token)\n",
            cfg->cpu_blocks,
            (unsigned long long)cfg->cpu_blocks * cfg->block_tokens,
            cfg->cpu_load_gbps, cfg->kv_bytes_per_token,
            cfg->kv_bytes_per_token / (cfg->cpu_load_gbps * 1e3));
}

static void
table_header(FILE *f, const struct sim_report *rep)
{
    struct sim_workload_info wi;
    sim_workload_info(rep->w, &wi);
    char cl[512];
    sim_cluster_describe(rep->c, cl, sizeof cl);
    fprintf(f, "lrsim %s (libroute %s): %s\n", LRSIM_VERSION,
            lr_version_string(), rep->source);
    if (rep->w->desc[0])
        fprintf(f, "  %s\n", rep->w->desc);
    fprintf(f,
            "  %zu requests over %.1f s (%.2f req/s), prompt mean %.0f "
            "tokens (max %u), output mean %.0f",
            wi.requests, wi.duration_s,
            wi.duration_s > 0 ? (double)wi.requests / wi.duration_s : 0.0,
            wi.requests ? (double)wi.input_tokens / (double)wi.requests : 0.0,
            wi.max_input,
            wi.requests ? (double)wi.output_tokens / (double)wi.requests : 0.0);
    if (rep->time_scale != 1.0)
        fprintf(f, ", time scale %g", rep->time_scale);
    fprintf(f, "\n  cluster %s: %s\n", rep->c->spec, cl);
    fprintf(f,
            "  seed %llu, TTFT SLO %g s, metrics every %.0f ms, block %u "
            "tokens\n",
            (unsigned long long)rep->cfg->seed, rep->cfg->slo_ttft_s,
            (double)rep->cfg->scrape_us / 1000.0, rep->cfg->block_tokens);
    table_rates(f, rep);
    table_replicas(f, rep);
    table_mix(f, rep);
    table_lora(f, rep);
    table_cpu_tier(f, rep);
    fprintf(f, "\n");
}

/* The learner settings a lodestar run used (the library's defaults where
 * lrsim left them). */
static void
learner_settings(const struct sim_config *cfg, uint32_t *min, uint32_t *every,
                 uint32_t *epochs)
{
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    *min = cfg->lodestar_min ? cfg->lodestar_min : lo.min_samples;
    *every = cfg->lodestar_every ? cfg->lodestar_every : lo.retrain_every;
    *epochs = cfg->lodestar_epochs ? cfg->lodestar_epochs : lo.epochs;
}

/* "min-cost 61.2%, explore 6.8%, ..." of the non-zero reasons. */
static void
reason_shares(FILE *f, const uint64_t *by, uint64_t total)
{
    int first = 1;
    for (int k = 0; k < SIM_REASONS; k++) {
        const char *name = lr_reason_name(k);
        if (by[k] == 0 || name == NULL)
            continue;
        fprintf(f, "%s%s %.1f%%", first ? "" : ", ", name,
                total ? 100.0 * (double)by[k] / (double)total : 0.0);
        first = 0;
    }
    if (first)
        fprintf(f, "none");
}

static uint64_t
sum_reasons(const uint64_t *by)
{
    uint64_t t = 0;
    for (int k = 0; k < SIM_REASONS; k++)
        t += by[k];
    return t;
}

static void
table_lodestar(FILE *f, const struct sim_report *rep,
               const struct sim_result *r)
{
    uint32_t min, every, epochs;
    learner_settings(rep->cfg, &min, &every, &epochs);
    const struct sim_learn_point *first = NULL, *last = NULL;
    for (size_t k = 0; k < r->n_curve; k++) {
        if (first == NULL && r->curve[k].model_round > 0)
            first = &r->curve[k];
        last = &r->curve[k];
    }
    fprintf(f, "  %s: min %u, every %u, epochs %u, a learn step every %.0f ms",
            r->policy_name, min, every, epochs,
            (double)rep->cfg->learn_us / 1000.0);
    if (rep->cfg->freeze_us != SIM_NEVER)
        fprintf(f, " until %.1f s", (double)rep->cfg->freeze_us / 1e6);
    fprintf(f, "\n    %llu model rounds from %llu samples",
            (unsigned long long)r->learn_rounds,
            (unsigned long long)r->learn_samples);
    if (r->learn_dropped_full + r->learn_dropped_range > 0)
        fprintf(f, " (+%llu dropped: queue full %llu, TTFT over the limit "
                   "%llu)",
                (unsigned long long)(r->learn_dropped_full +
                                     r->learn_dropped_range),
                (unsigned long long)r->learn_dropped_full,
                (unsigned long long)r->learn_dropped_range);
    if (first != NULL) {
        fprintf(f, "; first model at %.1f s", first->t_s);
        if (isnan(last->online_mae))
            fprintf(f, "; no prediction made (every decision fell back)");
        else
            fprintf(f, "; online MAE %.3f s at the end", last->online_mae);
    } else {
        fprintf(f, "; no model yet (cold start throughout)");
    }
    if (!isnan(r->pred_mae))
        fprintf(f, "\n    |predicted - TTFT| %.3f s over the %llu "
                   "requests the model chose",
                r->pred_mae, (unsigned long long)r->pred_n);
    fprintf(f, "\n    decisions: ");
    reason_shares(f, r->by_reason, sum_reasons(r->by_reason));
    fprintf(f, "\n");
    if (!rep->show_curve)
        return;
    fprintf(f, "    learning curve (onlineMAE: the learner's, last 256 "
               "samples; lrsimMAE and the shares:\n    since the previous "
               "row; --json has every point)\n");
    fprintf(f, "    %8s %7s %5s %9s %9s %9s %6s %6s %6s %6s\n", "t (s)",
            "samples", "round", "onlineMAE", "lrsimMAE", "trainMSE", "cold%",
            "ood%", "expl%", "model%");
    /* about 30 rows: every training point and evenly spaced ones; each
     * row's shares and error cover the time since the previous row */
    size_t every_k = (r->n_curve + 29) / 30;
    uint64_t by[SIM_REASONS] = { 0 }, dec = 0, pn = 0;
    double psum = 0;
    for (size_t k = 0; k < r->n_curve; k++) {
        const struct sim_learn_point *p = &r->curve[k];
        for (int j = 0; j < SIM_REASONS; j++)
            by[j] += p->by_reason[j];
        dec += p->decisions;
        if (p->pred_n > 0) {
            psum += p->pred_mae * (double)p->pred_n;
            pn += p->pred_n;
        }
        if (!p->trained && k % every_k != 0 && k + 1 != r->n_curve)
            continue;
        double d = dec ? (double)dec : 1;
        double model = (double)(by[LR_REASON_MIN_COST] +
                                by[LR_REASON_K_FILTER]);
        fprintf(f, "    %8.1f %7llu %5llu %9.4f %9.4f %9.4f %6.1f %6.1f %6.1f "
                   "%6.1f%s\n",
                p->t_s, (unsigned long long)p->samples,
                (unsigned long long)p->model_round, p->online_mae,
                pn ? psum / (double)pn : NAN,
                p->model_round ? p->model_mse : NAN,
                100.0 * (double)by[LR_REASON_COLD_START] / d,
                100.0 * (double)by[LR_REASON_OOD] / d,
                100.0 * (double)by[LR_REASON_EXPLORE] / d,
                100.0 * model / d, p->trained ? "  trained" : "");
        memset(by, 0, sizeof by);
        dec = pn = 0;
        psum = 0;
    }
}

static void
table_split(FILE *f, const struct sim_report *rep)
{
    double at = (double)rep->cfg->split_us / 1e6;
    fprintf(f, "\n  requests arriving before %g s | from %g s: TTFT mean, "
               "p50, p99 (s); |predicted - TTFT| (lodestar)\n",
            at, at);
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        if (!r->has_split)
            continue;
        const struct sim_window *b = &r->before, *a = &r->after;
        fprintf(f, "  %-22s %7.3f %7.3f %7.3f | %7.3f %7.3f %7.3f", r->policy_name,
                b->ttft_mean_s, b->ttft_p50_s, b->ttft_p99_s, a->ttft_mean_s,
                a->ttft_p50_s, a->ttft_p99_s);
        if (b->pred_n + a->pred_n > 0)
            fprintf(f, " | MAE %.3f (%llu) | %.3f (%llu)", b->pred_mae,
                    (unsigned long long)b->pred_n, a->pred_mae,
                    (unsigned long long)a->pred_n);
        fprintf(f, "\n");
    }
}

void
sim_report_table(FILE *f, const struct sim_report *rep)
{
    table_header(f, rep);
    group_heads(f);
    fprintf(f, "%-22s", "policy");
    for (size_t c = 0; c < NCOLS; c++) {
        fprintf(f, " %*s ", cols[c].width, cols[c].head);
        if (group_end(c))
            fprintf(f, "|");
    }
    int lora = rep->n_runs > 0 && rep->runs[0].has_adapters;
    uint64_t least = UINT64_MAX;
    for (size_t k = 0; lora && k < rep->n_runs; k++)
        if (rep->runs[k].adapter_loads < least)
            least = rep->runs[k].adapter_loads;
    int cpu = rep->n_runs > 0 && rep->runs[0].has_cpu_tier;
    int pd = rep->n_runs > 0 && rep->runs[0].has_pd;
    fprintf(f, "| %9s", "p50");
    if (lora)
        fprintf(f, " | %7s", "loads");
    if (cpu)
        fprintf(f, " | %8s", "cpu hit%");
    if (pd)
        fprintf(f, " | %6s %8s", "split%", "xfer ms");
    fprintf(f, "\n");
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        fprintf(f, "%-22s", r->policy_name);
        for (size_t c = 0; c < NCOLS; c++) {
            /* keep the column width: fewer decimals for large values */
            double v = field(r, &cols[c]);
            int prec = cols[c].prec;
            if (fabs(v) >= 1000)
                prec = 0;
            else if (fabs(v) >= 100 && prec > 1)
                prec = 1;
            fprintf(f, " %*.*f%c", cols[c].width, prec, v,
                    is_best(rep, k, &cols[c]) ? '*' : ' ');
            if (group_end(c))
                fprintf(f, "|");
        }
        char ns[32];
        fmt_ns(ns, sizeof ns, r->route_ns_p50);
        fprintf(f, "| %9s", ns);
        if (lora)
            fprintf(f, " | %7llu%c", (unsigned long long)r->adapter_loads,
                    rep->n_runs > 1 && r->adapter_loads == least ? '*' : ' ');
        if (cpu)
            fprintf(f, " | %8.1f",
                    r->query_tokens ? 100.0 * (double)r->cpu_hit_tokens /
                                          (double)r->query_tokens
                                    : 0.0);
        if (pd)
            fprintf(f, " | %6.1f %8.2f",
                    r->n_reqs ? 100.0 * (double)r->n_split / (double)r->n_reqs
                              : 0.0,
                    isnan(r->transfer_mean_s) ? 0.0
                                              : r->transfer_mean_s * 1e3);
        fprintf(f, "\n");
    }
    fprintf(f, "\n* best in its column.  hit%% = prompt tokens the engines "
               "found cached; loadCV = spread of pending\n  prefill tokens "
               "across instances; SLO%% = TTFT < %g s; good/s = requests "
               "within the SLO per second.\n  TPOT = time per output token "
               "after the first, of the requests with 2 or more.\n",
            rep->cfg->slo_ttft_s);
    if (lora)
        fprintf(f, "  loads = LoRA adapters the engines loaded (each "
                   "stalls its engine's step).\n");
    if (cpu)
        fprintf(f, "  cpu hit%% = prompt tokens loaded from the engines' CPU "
                   "tier (a share of hit%%: a transfer, not a prefill).\n");
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        if (r->failed > 0)
            fprintf(f, "  %s: %llu requests failed (%llu could not be "
                       "routed; the rest never fit their instance)\n",
                    r->policy_name, (unsigned long long)r->failed,
                    (unsigned long long)r->route_errors);
    }
    for (size_t k = 0; k < rep->n_skipped; k++)
        fprintf(f, "  skipped %s: %s\n", rep->skipped[k].policy,
                rep->skipped[k].why);
    if (rep->n_runs > 0 && rep->runs[0].has_split)
        table_split(f, rep);
    int head = 0;
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        if (r->policy == LR_POLICY_LODESTAR) {
            fprintf(f, "\n");
            table_lodestar(f, rep, r);
        }
    }
    for (size_t k = 0; rep->show_reasons && k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        if (!head)
            fprintf(f, "\n  decision reasons\n");
        head = 1;
        fprintf(f, "  %-22s ", r->policy_name);
        reason_shares(f, r->by_reason, sum_reasons(r->by_reason));
        fprintf(f, "\n");
    }
    if (rep->n_runs > 0 && rep->runs[0].has_admission)
        sim_report_admission(f, rep);
}

/* ---- admission -------------------------------------------------------------------- */

#define TABLE_TENANTS 8 /* tenants shown in the table (the JSON has all) */

void
sim_report_admission(FILE *f, const struct sim_report *rep)
{
    const struct sim_mix *m = &rep->w->mix;
    const struct sim_result *r0 = &rep->runs[0];
    fprintf(f, "\n  admission (%s): ", admit_name(r0->admit));
    fprintf(f, "waited = requests held in the router's queue; expired = "
               "their deadline passed there;\n  shed = refused at once "
               "(sheddable); failed = refused by route() (a full queue: "
               "LR_ELIMIT) or by\n  the engine; wait = mean time in the "
               "queue of those sent (s)\n");
    fprintf(f, "  %-22s %8s %8s %8s %8s %8s %8s\n", "policy", "served",
            "waited", "wait", "expired", "shed", "failed");
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        fprintf(f, "  %-22s %8llu %8llu %8.2f %8llu %8llu %8llu\n",
                r->policy_name, (unsigned long long)r->completed,
                (unsigned long long)r->n_waited, r->wait_mean_s,
                (unsigned long long)r->expired, (unsigned long long)r->shed,
                (unsigned long long)r->failed);
    }
    if (m->n_cls > 0) {
        fprintf(f, "\n  per class: SLO%% = TTFT <= the class's SLO, of all "
                   "its requests (expired, shed and failed\n  ones miss); "
                   "done%% = served; TTFT mean / p99 of those served (s); "
                   "good/s = SLO-meeting\n  requests per second of the "
                   "arrival window (%.1f s)\n",
                r0->arrival_span_s);
        fprintf(f, "  %-22s", "");
        for (uint32_t c = 0; c < m->n_cls; c++) {
            char h[64];
            snprintf(h, sizeof h, "%s (%g s)", m->cls[c].name,
                     m->cls[c].slo_s);
            fprintf(f, " | %-38s", h);
        }
        fprintf(f, "\n  %-22s", "policy");
        for (uint32_t c = 0; c < m->n_cls; c++)
            fprintf(f, " | %6s %6s %7s %7s %7s", "SLO%", "done%", "mean",
                    "p99", "good/s");
        fprintf(f, "\n");
        for (size_t k = 0; k < rep->n_runs; k++) {
            const struct sim_result *r = &rep->runs[k];
            fprintf(f, "  %-22s", r->policy_name);
            for (uint32_t c = 0; c < r->n_rclasses; c++) {
                const struct sim_rclass_result *cr = &r->rclass[c];
                fprintf(f, " | %6.1f %6.1f %7.2f %7.2f %7.2f",
                        100 * cr->slo_attainment,
                        cr->requests ? 100.0 * (double)cr->completed /
                                           (double)cr->requests
                                     : NAN,
                        cr->ttft_mean_s, cr->ttft_p99_s, cr->goodput_rps);
            }
            fprintf(f, "\n");
        }
    }
    if (m->n_tenants > 0) {
        uint32_t nt = m->n_tenants < TABLE_TENANTS ? m->n_tenants
                                                   : TABLE_TENANTS;
        fprintf(f, "\n  per tenant (its share of the tokens that arrived in "
                   "brackets): served%% = its share of the\n  tokens served "
                   "while requests arrived; SLO%%; TTFT mean (s). jain = "
                   "Jain's index of each\n  tenant's service over its "
                   "max-min fair share, mean over windows of %.0f s\n",
                r0->jain_window_s);
        fprintf(f, "  %-22s %6s", "", "");
        for (uint32_t i = 0; i < nt; i++) {
            char h[64];
            snprintf(h, sizeof h, "tenant %u (%.1f%%)", i,
                     100 * r0->tenant[i].demand_share);
            fprintf(f, " | %-22s", h);
        }
        fprintf(f, "\n  %-22s %6s", "policy", "jain");
        for (uint32_t i = 0; i < nt; i++)
            fprintf(f, " | %7s %6s %7s", "served%", "SLO%", "mean");
        fprintf(f, "\n");
        for (size_t k = 0; k < rep->n_runs; k++) {
            const struct sim_result *r = &rep->runs[k];
            fprintf(f, "  %-22s %6.3f", r->policy_name, r->jain);
            for (uint32_t i = 0; i < nt && i < r->n_tenants; i++) {
                const struct sim_tenant_result *t = &r->tenant[i];
                fprintf(f, " | %7.1f %6.1f %7.2f", 100 * t->service_share,
                        100 * t->slo_attainment, t->ttft_mean_s);
            }
            fprintf(f, "\n");
        }
        if (m->n_tenants > nt)
            fprintf(f, "  (%u more tenants in the JSON)\n",
                    m->n_tenants - nt);
    }
}

/* ---- JSON --------------------------------------------------------------------------- */

static void
jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void
jnum(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

static void
jkey(FILE *f, const char *indent, const char *k)
{
    fprintf(f, ",\n%s\"%s\": ", indent, k);
}

static void
json_workload(FILE *f, const struct sim_report *rep)
{
    struct sim_workload_info wi;
    sim_workload_info(rep->w, &wi);
    fprintf(f, "  \"workload\": {\n    \"name\": ");
    jstr(f, rep->w->name);
    jkey(f, "    ", "source");
    jstr(f, rep->source);
    jkey(f, "    ", "description");
    jstr(f, rep->w->desc);
    jkey(f, "    ", "requests");
    fprintf(f, "%zu", wi.requests);
    jkey(f, "    ", "duration_s");
    jnum(f, wi.duration_s);
    jkey(f, "    ", "input_tokens");
    fprintf(f, "%llu", (unsigned long long)wi.input_tokens);
    jkey(f, "    ", "output_tokens");
    fprintf(f, "%llu", (unsigned long long)wi.output_tokens);
    jkey(f, "    ", "max_input_tokens");
    fprintf(f, "%u", wi.max_input);
    jkey(f, "    ", "time_scale");
    jnum(f, rep->time_scale);
    const struct sim_mix *m = &rep->w->mix;
    if (sim_mix_any(m) || m->burst > 1) {
        char buf[1024];
        sim_mix_describe(m, buf, sizeof buf);
        jkey(f, "    ", "mix");
        jstr(f, buf);
    }
    const struct sim_lora *l = &rep->w->lora;
    if (l->n_adapters > 0 || l->n_models > 0) {
        char buf[512];
        sim_lora_describe(l, buf, sizeof buf);
        jkey(f, "    ", "lora");
        fprintf(f, "{\"description\": ");
        jstr(f, buf);
        fprintf(f, ", \"adapters\": %u, \"zipf\": ", l->n_adapters);
        jnum(f, l->zipf);
        fprintf(f, ", \"share\": ");
        jnum(f, l->share);
        fprintf(f, ", \"shift_s\": ");
        jnum(f, l->shift_s > 0 ? l->shift_s : NAN);
        fprintf(f, ", \"by\": ");
        jstr(f, l->by == SIM_ADAPTER_BY_PROMPT ? "prompt" : "request");
        fprintf(f, ", \"max_loras\": %u, \"adapter_load_ms\": ",
                rep->cfg->max_loras);
        jnum(f, (double)rep->cfg->adapter_load_us / 1000.0);
        fprintf(f, ", \"models\": [");
        for (uint32_t k = 0; k < l->n_models; k++) {
            fprintf(f, "%s{\"name\": ", k ? ", " : "");
            jstr(f, sim_model_name(k));
            fprintf(f, ", \"weight\": ");
            jnum(f, l->model_w[k]);
            fputc('}', f);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n  },\n");
}

static void
json_cluster(FILE *f, const struct sim_report *rep)
{
    char cl[512];
    sim_cluster_describe(rep->c, cl, sizeof cl);
    fprintf(f, "  \"cluster\": {\n    \"spec\": ");
    jstr(f, rep->c->spec);
    jkey(f, "    ", "description");
    jstr(f, cl);
    fprintf(f, ",\n    \"instances\": [");
    for (uint32_t i = 0; i < rep->c->n; i++) {
        const struct sim_instance *in = &rep->c->inst[i];
        fprintf(f, "%s\n      {\"name\": ", i ? "," : "");
        jstr(f, in->name);
        fprintf(f, ", \"class\": ");
        jstr(f, in->cls->name);
        fprintf(f,
                ", \"prefix_caching\": %s, \"rtt_ms\": %.3f, \"group\": %u, "
                "\"kv_tokens\": %llu}",
                in->prefix_caching ? "true" : "false",
                (double)in->rtt_us / 1000.0, in->group,
                (unsigned long long)in->cls->kv_tokens);
    }
    fprintf(f, "\n    ]");
    if (rep->cfg->cpu_blocks > 0) {
        jkey(f, "    ", "cpu_tier");
        fprintf(f, "{\"blocks\": %u, \"load_gbps\": ", rep->cfg->cpu_blocks);
        jnum(f, rep->cfg->cpu_load_gbps);
        fprintf(f, ", \"kv_bytes_per_token\": ");
        jnum(f, rep->cfg->kv_bytes_per_token);
        fputc('}', f);
    }
    fprintf(f, "\n  },\n");
}

#define JD(name, v)                  \
    do {                             \
        jkey(f, "      ", name);     \
        jnum(f, v);                  \
    } while (0)
#define JU(name, v)                                            \
    do {                                                       \
        jkey(f, "      ", name);                               \
        fprintf(f, "%llu", (unsigned long long)(v));           \
    } while (0)

static void
json_per_inst(FILE *f, const struct sim_result *r)
{
    fprintf(f, ",\n      \"instances\": [");
    for (uint32_t i = 0; i < r->n_inst; i++) {
        const struct sim_inst_result *p = &r->per_inst[i];
        fprintf(f,
                "%s\n        {\"requests\": %llu, \"cache_hit_rate\": ",
                i ? "," : "", (unsigned long long)p->requests);
        jnum(f, p->query_tokens ? (double)p->hit_tokens /
                                      (double)p->query_tokens
                                : 0);
        fprintf(f, ", \"mean_pending_prefill\": ");
        jnum(f, p->mean_pending);
        fprintf(f, ", \"busy\": ");
        jnum(f, p->busy_frac);
        fprintf(f,
                ", \"preemptions\": %llu, \"evicted_blocks\": %llu, "
                "\"peak_kv_use\": ",
                (unsigned long long)p->preemptions,
                (unsigned long long)p->evicted_blocks);
        jnum(f, p->capacity_blocks ? (double)p->peak_used_blocks /
                                         (double)p->capacity_blocks
                                   : 0);
        if (r->has_adapters)
            fprintf(f, ", \"adapter_loads\": %llu",
                    (unsigned long long)p->adapter_loads);
        if (r->has_cpu_tier)
            fprintf(f, ", \"cpu_hit_tokens\": %llu",
                    (unsigned long long)p->cpu_hit_tokens);
        if (r->has_models) {
            fprintf(f, ", \"model\": ");
            jstr(f, sim_model_name(p->model));
        }
        fputc('}', f);
    }
    fprintf(f, "\n      ]");
}

static void
json_reason_shares(FILE *f, const uint64_t *by, uint64_t total)
{
    fputc('{', f);
    int first = 1;
    for (int k = 0; k < SIM_REASONS; k++) {
        const char *name = lr_reason_name(k);
        if (by[k] == 0 || name == NULL)
            continue;
        fprintf(f, "%s", first ? "" : ", ");
        jstr(f, name);
        fputs(": ", f);
        jnum(f, total ? (double)by[k] / (double)total : 0);
        first = 0;
    }
    fputc('}', f);
}

static void
json_window(FILE *f, const char *name, const struct sim_window *w)
{
    fprintf(f, "\"%s\": {\"requests\": %llu, \"completed\": %llu, "
               "\"ttft_mean_s\": ",
            name, (unsigned long long)w->requests,
            (unsigned long long)w->completed);
    jnum(f, w->ttft_mean_s);
    fputs(", \"ttft_p50_s\": ", f);
    jnum(f, w->ttft_p50_s);
    fputs(", \"ttft_p99_s\": ", f);
    jnum(f, w->ttft_p99_s);
    fputs(", \"tpot_mean_s\": ", f);
    jnum(f, w->tpot_mean_s);
    fputs(", \"tpot_p50_s\": ", f);
    jnum(f, w->tpot_p50_s);
    fputs(", \"tpot_p99_s\": ", f);
    jnum(f, w->tpot_p99_s);
    fputs(", \"prediction_mae_s\": ", f);
    jnum(f, w->pred_mae);
    fprintf(f, ", \"predicted\": %llu}", (unsigned long long)w->pred_n);
}

static void
json_lodestar(FILE *f, const struct sim_report *rep, const struct sim_result *r,
              int with_timing)
{
    uint32_t min, every, epochs;
    learner_settings(rep->cfg, &min, &every, &epochs);
    fprintf(f, ",\n      \"lodestar\": {\n        \"min_samples\": %u, "
               "\"retrain_every\": %u, \"epochs\": %u, \"learn_ms\": ",
            min, every, epochs);
    jnum(f, (double)rep->cfg->learn_us / 1000.0);
    fputs(", \"freeze_s\": ", f);
    jnum(f, rep->cfg->freeze_us == SIM_NEVER
                ? NAN
                : (double)rep->cfg->freeze_us / 1e6);
    fprintf(f, ",\n        \"learn_steps\": %llu, \"model_rounds\": %llu, "
               "\"samples\": %llu, \"dropped_full\": %llu, "
               "\"dropped_range\": %llu, \"samples_kept\": %zu,\n"
               "        \"prediction_mae_s\": ",
            (unsigned long long)r->learn_steps,
            (unsigned long long)r->learn_rounds,
            (unsigned long long)r->learn_samples,
            (unsigned long long)r->learn_dropped_full,
            (unsigned long long)r->learn_dropped_range, r->n_samples);
    jnum(f, r->pred_mae);
    fprintf(f, ", \"predicted\": %llu", (unsigned long long)r->pred_n);
    if (with_timing) {
        fputs(", \"learn_wall_s\": ", f);
        jnum(f, r->learn_wall_s);
    }
    fputs(",\n        \"curve\": [", f);
    for (size_t k = 0; k < r->n_curve; k++) {
        const struct sim_learn_point *p = &r->curve[k];
        fprintf(f, "%s\n          {\"t_s\": ", k ? "," : "");
        jnum(f, p->t_s);
        fprintf(f, ", \"stepped\": %s, \"trained\": %s, \"samples\": %llu, "
                   "\"model_round\": %llu, \"model_samples\": %llu, "
                   "\"model_mse\": ",
                p->stepped ? "true" : "false", p->trained ? "true" : "false",
                (unsigned long long)p->samples,
                (unsigned long long)p->model_round,
                (unsigned long long)p->model_samples);
        jnum(f, p->model_mse);
        fputs(", \"online_mae_s\": ", f);
        jnum(f, p->online_mae);
        fputs(", \"prediction_mae_s\": ", f);
        jnum(f, p->pred_mae);
        fprintf(f, ", \"predicted\": %llu, \"decisions\": %llu, "
                   "\"reasons\": ",
                (unsigned long long)p->pred_n,
                (unsigned long long)p->decisions);
        json_reason_shares(f, p->by_reason, p->decisions);
        if (with_timing) {
            fputs(", \"step_wall_s\": ", f);
            jnum(f, p->step_wall_s);
        }
        fputc('}', f);
    }
    fputs("\n        ]\n      }", f);
}

static void
json_admission(FILE *f, const struct sim_report *rep,
               const struct sim_result *r)
{
    const struct sim_mix *m = &rep->w->mix;
    fprintf(f, ",\n      \"admission\": {\n        \"admit\": ");
    jstr(f, admit_name(r->admit));
    fprintf(f, ", \"arrival_span_s\": ");
    jnum(f, r->arrival_span_s);
    fprintf(f, ", \"served\": %llu, \"waited\": %llu, \"wait_mean_s\": ",
            (unsigned long long)r->completed,
            (unsigned long long)r->n_waited);
    jnum(f, r->wait_mean_s);
    fprintf(f, ", \"expired\": %llu, \"shed\": %llu, \"failed\": %llu,\n"
               "        \"router\": {\"waited\": %llu, \"dispatched\": "
               "%llu, \"expired\": %llu, \"shed\": %llu}",
            (unsigned long long)r->expired, (unsigned long long)r->shed,
            (unsigned long long)r->failed,
            (unsigned long long)r->router_waited,
            (unsigned long long)r->router_dispatched,
            (unsigned long long)r->router_expired,
            (unsigned long long)r->router_shed);
    fprintf(f, ",\n        \"classes\": [");
    for (uint32_t c = 0; c < r->n_rclasses; c++) {
        const struct sim_rclass *k = &m->cls[c];
        const struct sim_rclass_result *cr = &r->rclass[c];
        fprintf(f, "%s\n          {\"name\": ", c ? "," : "");
        jstr(f, k->name);
        fprintf(f, ", \"urgency\": %u, \"slo_s\": ", k->urgency);
        jnum(f, k->slo_s);
        fprintf(f, ", \"sheddable\": %s, \"share\": ",
                k->sheddable ? "true" : "false");
        jnum(f, k->share);
        fprintf(f, ", \"requests\": %llu, \"met\": %llu, \"served\": %llu, "
                   "\"expired\": %llu, \"shed\": %llu, \"failed\": %llu, "
                   "\"waited\": %llu,\n           \"slo_attainment\": ",
                (unsigned long long)cr->requests, (unsigned long long)cr->met,
                (unsigned long long)cr->completed,
                (unsigned long long)cr->expired, (unsigned long long)cr->shed,
                (unsigned long long)cr->failed,
                (unsigned long long)cr->waited);
        jnum(f, cr->slo_attainment);
        fprintf(f, ", \"goodput_rps\": ");
        jnum(f, cr->goodput_rps);
        fprintf(f, ", \"ttft_mean_s\": ");
        jnum(f, cr->ttft_mean_s);
        fprintf(f, ", \"ttft_p99_s\": ");
        jnum(f, cr->ttft_p99_s);
        fprintf(f, ", \"tpot_mean_s\": ");
        jnum(f, cr->tpot_mean_s);
        fprintf(f, ", \"tpot_p99_s\": ");
        jnum(f, cr->tpot_p99_s);
        fprintf(f, ", \"wait_mean_s\": ");
        jnum(f, cr->wait_mean_s);
        fputc('}', f);
    }
    fprintf(f, "%s],\n        \"tenants\": [", r->n_rclasses ? "\n        "
                                                                 : "");
    for (uint32_t i = 0; i < r->n_tenants; i++) {
        const struct sim_tenant_result *t = &r->tenant[i];
        fprintf(f, "%s\n          {\"tenant\": %u, \"weight\": ",
                i ? "," : "", i);
        jnum(f, m->tenant_w[i]);
        fprintf(f, ", \"requests\": %llu, \"met\": %llu, \"served\": %llu, "
                   "\"expired\": %llu, \"shed\": %llu, \"failed\": %llu,\n"
                   "           \"demand_share\": ",
                (unsigned long long)t->requests, (unsigned long long)t->met,
                (unsigned long long)t->completed,
                (unsigned long long)t->expired, (unsigned long long)t->shed,
                (unsigned long long)t->failed);
        jnum(f, t->demand_share);
        fprintf(f, ", \"service_share\": ");
        jnum(f, t->service_share);
        fprintf(f, ", \"backlogged\": ");
        jnum(f, t->backlogged);
        fprintf(f, ", \"slo_attainment\": ");
        jnum(f, t->slo_attainment);
        fprintf(f, ", \"ttft_mean_s\": ");
        jnum(f, t->ttft_mean_s);
        fprintf(f, ", \"tpot_mean_s\": ");
        jnum(f, t->tpot_mean_s);
        fputc('}', f);
    }
    fprintf(f, "%s],\n        \"jain\": ", r->n_tenants ? "\n        " : "");
    jnum(f, r->jain);
    fprintf(f, ", \"jain_windows\": %u, \"jain_window_s\": ",
            r->jain_windows);
    jnum(f, r->n_tenants ? r->jain_window_s : NAN);
    fprintf(f, "\n      }");
}

static void
json_run(FILE *f, const struct sim_report *rep, const struct sim_result *r,
         int with_timing)
{
    fprintf(f, "    {\n      \"policy\": ");
    jstr(f, r->policy_name);
    if (rep->cell != NULL) {
        jkey(f, "      ", "cell");
        jstr(f, rep->cell);
        jkey(f, "      ", "seed");
        fprintf(f, "%llu", (unsigned long long)rep->cfg->seed);
    }
    jkey(f, "      ", "router_rates");
    jstr(f, r->router_rates);
    if (r->replicas > 1) {
        jkey(f, "      ", "replicas");
        jstr(f, r->replicas_desc);
        jkey(f, "      ", "exchanged");
        fprintf(f,
                "{\"deltas\": %llu, \"delta_bytes\": %llu, "
                "\"deltas_dropped\": %llu, \"gauges\": %llu, "
                "\"gauge_bytes\": %llu, \"kv_events\": %llu, "
                "\"kv_unplaced\": %llu}",
                (unsigned long long)r->deltas_sent,
                (unsigned long long)r->delta_bytes,
                (unsigned long long)r->deltas_dropped,
                (unsigned long long)r->gauges_sent,
                (unsigned long long)r->gauge_bytes,
                (unsigned long long)r->kv_events,
                (unsigned long long)r->kv_unplaced);
    }
    JD("ttft_mean_s", r->ttft_mean_s);
    JD("ttft_p50_s", r->ttft_p50_s);
    JD("ttft_p95_s", r->ttft_p95_s);
    JD("ttft_p99_s", r->ttft_p99_s);
    JD("tpot_mean_s", r->tpot_mean_s);
    JD("tpot_p50_s", r->tpot_p50_s);
    JD("tpot_p99_s", r->tpot_p99_s);
    JD("e2e_p50_s", r->e2e_p50_s);
    JD("e2e_p95_s", r->e2e_p95_s);
    JD("cache_hit_rate", r->cache_hit_rate);
    JD("router_expected_hit_rate", r->router_hit_belief);
    JD("load_cv", r->load_cv);
    JD("slo_attainment", r->slo_attainment);
    JD("goodput_rps", r->goodput_rps);
    if (with_timing) {
        JD("route_ns_p50", r->route_ns_p50);
        JD("route_ns_p99", r->route_ns_p99);
        JD("route_ns_mean", r->route_ns_mean);
        JD("wall_s", r->wall_s);
    }
    JU("requests", r->n_reqs);
    JU("completed", r->completed);
    JU("failed", r->failed);
    JU("route_errors", r->route_errors);
    JD("makespan_s", r->makespan_s);
    JU("preemptions", r->preemptions);
    JU("moves", r->moves);
    JU("engine_steps", r->steps);
    JU("events", r->events);
    JU("prompt_tokens", r->input_tokens);
    JU("cached_tokens", r->hit_tokens);
    JU("prefilled_tokens", r->prefilled_tokens);
    JU("output_tokens", r->sampled_tokens);
    if (!isnan(r->param_w_rtt)) {
        JD("gorgo_w_rtt", r->param_w_rtt);
        JD("gorgo_w_queue", r->param_w_queue);
    }
    if (r->has_adapters) {
        JU("adapter_loads", r->adapter_loads);
        JU("adapter_evictions", r->adapter_evictions);
    }
    if (r->has_pd) {
        /* disaggregation: requests split, the KV they moved */
        JU("split", r->n_split);
        JU("kv_transfer_bytes", r->kv_transfer_bytes);
        JD("kv_transfer_mean_s", r->transfer_mean_s);
        JU("received_tokens", r->received_tokens);
    }
    if (r->has_cpu_tier) {
        /* the engines' CPU tier (docs/simulator.md, "CPU tier") */
        JU("cpu_hits", r->cpu_hits);
        JU("cpu_hit_tokens", r->cpu_hit_tokens);
        JD("cpu_load_s", r->cpu_load_s);
        JU("cpu_stored_blocks", r->cpu_stored_blocks);
        JU("cpu_evicted_blocks", r->cpu_evicted_blocks);
        JU("kv_cpu_events", r->kv_cpu_events);
        JU("kv_cpu_unplaced", r->kv_cpu_unplaced);
    }
    if (r->has_slots) {
        /* llama.cpp-like engines: what they delivered of what the router
         * predicted, and how (docs/simulator.md, "Slots") */
        JU("predicted_tokens", r->predicted_tokens);
        JD("delivered_per_predicted",
           r->predicted_tokens ? (double)r->hit_tokens /
                                     (double)r->predicted_tokens
                               : NAN);
        JU("slot_hits", r->slot_hits);
        JU("host_cache_hits", r->host_hits);
        JU("host_cache_saves", r->host_saves);
        JU("host_cache_drops", r->host_drops);
    }
    fprintf(f, ",\n      \"reasons\": {");
    int first = 1;
    for (int k = 0; k < SIM_REASONS; k++) {
        const char *name = lr_reason_name(k);
        if (r->by_reason[k] == 0 || name == NULL)
            continue;
        fprintf(f, "%s", first ? "" : ", ");
        jstr(f, name);
        fprintf(f, ": %llu", (unsigned long long)r->by_reason[k]);
        first = 0;
    }
    fputc('}', f);
    if (r->has_split) {
        fprintf(f, ",\n      \"split\": {\"at_s\": ");
        jnum(f, (double)rep->cfg->split_us / 1e6);
        fputs(", ", f);
        json_window(f, "before", &r->before);
        fputs(", ", f);
        json_window(f, "after", &r->after);
        fputc('}', f);
    }
    if (r->policy == LR_POLICY_LODESTAR)
        json_lodestar(f, rep, r, with_timing);
    if (r->has_admission)
        json_admission(f, rep, r);
    json_per_inst(f, r);
    fprintf(f, "\n    }");
}

void
sim_report_json_run(FILE *f, const struct sim_report *rep,
                    const struct sim_result *r, int with_timing)
{
    json_run(f, rep, r, with_timing);
}

void
sim_json_str(FILE *f, const char *s)
{
    jstr(f, s);
}

void
sim_json_num(FILE *f, double v)
{
    jnum(f, v);
}

int
sim_report_json(FILE *f, const struct sim_report *rep, int with_timing)
{
    fprintf(f, "{\n  \"lrsim\": ");
    jstr(f, LRSIM_VERSION);
    fprintf(f, ",\n  \"libroute\": ");
    jstr(f, lr_version_string());
    fprintf(f, ",\n  \"seed\": %llu,\n", (unsigned long long)rep->cfg->seed);
    fprintf(f, "  \"slo_ttft_s\": ");
    jnum(f, rep->cfg->slo_ttft_s);
    fprintf(f, ",\n  \"block_tokens\": %u,\n  \"scrape_ms\": ",
            rep->cfg->block_tokens);
    jnum(f, (double)rep->cfg->scrape_us / 1000.0);
    fprintf(f, ",\n  \"rebalance\": %s,\n",
            rep->cfg->rebalance ? "true" : "false");
    if (with_timing) {
        fprintf(f, "  \"wall_s\": ");
        jnum(f, rep->wall_s);
        fprintf(f, ",\n  \"jobs\": %u,\n", rep->jobs);
    }
    json_workload(f, rep);
    json_cluster(f, rep);
    fprintf(f, "  \"runs\": [\n");
    for (size_t k = 0; k < rep->n_runs; k++) {
        json_run(f, rep, &rep->runs[k], with_timing);
        fprintf(f, "%s\n", k + 1 < rep->n_runs ? "," : "");
    }
    fprintf(f, "  ],\n  \"skipped\": [");
    for (size_t k = 0; k < rep->n_skipped; k++) {
        fprintf(f, "%s{\"policy\": ", k ? ", " : "");
        jstr(f, rep->skipped[k].policy);
        fprintf(f, ", \"reason\": ");
        jstr(f, rep->skipped[k].why);
        fputc('}', f);
    }
    fprintf(f, "]\n}\n");
    return ferror(f) ? -1 : 0;
}

/* ---- samples -------------------------------------------------------------------------- */

/* lr_router.h's LR_LODESTAR_FEATURES, in order. */
const char *const sim_sample_columns[] = {
    "prompt_tokens", "output_tokens", "hit_ratio", "hit_ratio_decayed",
    "inflight",      "queued",        "prefill_tokens", "decode_tokens",
    "running",       "waiting",       "kv_use",    "rtt_ms",
    "class0",        "class1",        "class2",    "class3",
    "class4",        "class5",        "class6",    "class7",
    "reward",
};
_Static_assert(sizeof sim_sample_columns / sizeof sim_sample_columns[0] ==
                   LR_LODESTAR_FEATURES + 1,
               "one column per Lodestar feature, then the reward");

int
sim_report_samples_csv(FILE *f, const struct sim_report *rep)
{
    const size_t w = LR_LODESTAR_FEATURES + 1;
    for (size_t c = 0; c < w; c++)
        fprintf(f, "%s%s", c ? "," : "", sim_sample_columns[c]);
    fputc('\n', f);
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        if (r->policy != LR_POLICY_LODESTAR)
            continue;
        for (size_t i = 0; i < r->n_samples; i++) {
            const float *row = r->samples + i * w;
            for (size_t c = 0; c < w; c++)
                fprintf(f, "%s%.9g", c ? "," : "", (double)row[c]);
            fputc('\n', f);
        }
    }
    return ferror(f) ? -1 : 0;
}

/* ---- SVG ------------------------------------------------------------------------------- */

static const char *const palette[] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a",
    "#637939", "#843c39", "#7b4173", "#3182bd",
};
#define NPAL (sizeof palette / sizeof palette[0])

#define SVG_W 1100
#define PLOT_X 70
#define PLOT_W 700
#define PLOT_Y 60
#define PLOT_H 360
#define LEGEND_X (PLOT_X + PLOT_W + 30)

static void
svg_text(FILE *f, double x, double y, const char *anchor, const char *style,
         const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s>", x, y,
            anchor, style[0] ? " " : "", style);
    for (const char *p = s; *p; p++) {
        if (*p == '<')
            fputs("&lt;", f);
        else if (*p == '>')
            fputs("&gt;", f);
        else if (*p == '&')
            fputs("&amp;", f);
        else
            fputc(*p, f);
    }
    fputs("</text>\n", f);
}

/* Sorted TTFTs of a run's completed requests (seconds). */
static double *
sorted_ttft(const struct sim_result *r, size_t *n)
{
    double *v = sim_calloc(r->n_reqs, sizeof *v);
    if (v == NULL)
        return NULL;
    size_t k = 0;
    for (size_t q = 0; q < r->n_reqs; q++)
        if (r->state[q] == REQ_DONE)
            v[k++] = (double)r->ttft_us[q] / 1e6;
    *n = k;
    return v;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
xlog(double t, double lo, double hi)
{
    if (t < lo)
        t = lo;
    return PLOT_X + PLOT_W * (log10(t) - log10(lo)) / (log10(hi) - log10(lo));
}

static void
cdf_axes(FILE *f, double lo, double hi, double slo)
{
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
               "fill=\"#fafafa\" stroke=\"#999\"/>\n",
            PLOT_X, PLOT_Y, PLOT_W, PLOT_H);
    for (double d = lo; d <= hi * 1.0001; d *= 10) {
        for (int m = 1; m < 10; m++) {
            double t = d * m;
            if (t > hi * 1.0001)
                break;
            double x = xlog(t, lo, hi);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                       "stroke=\"%s\"/>\n",
                    x, PLOT_Y, x, PLOT_Y + PLOT_H, m == 1 ? "#ccc" : "#eee");
            if (m == 1 || m == 2 || m == 5) {
                char lab[32];
                if (t < 1)
                    snprintf(lab, sizeof lab, "%g ms", t * 1000);
                else
                    snprintf(lab, sizeof lab, "%g s", t);
                svg_text(f, x, PLOT_Y + PLOT_H + 16, "middle",
                         "font-size=\"11\"", lab);
            }
        }
    }
    for (int k = 0; k <= 10; k++) {
        double y = PLOT_Y + PLOT_H - PLOT_H * k / 10.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                   "stroke=\"%s\"/>\n",
                PLOT_X, y, PLOT_X + PLOT_W, y, k % 5 ? "#eee" : "#ccc");
        char lab[16];
        snprintf(lab, sizeof lab, "%d%%", k * 10);
        svg_text(f, PLOT_X - 6, y + 4, "end", "font-size=\"11\"", lab);
    }
    if (slo > lo && slo < hi) {
        double x = xlog(slo, lo, hi);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                   "stroke=\"#d00\" stroke-dasharray=\"6,4\"/>\n",
                x, PLOT_Y, x, PLOT_Y + PLOT_H);
        char lab[32];
        snprintf(lab, sizeof lab, "SLO %g s", slo);
        svg_text(f, x + 4, PLOT_Y + 14, "start",
                 "font-size=\"11\" fill=\"#d00\"", lab);
    }
    svg_text(f, PLOT_X + PLOT_W / 2.0, PLOT_Y + PLOT_H + 36, "middle",
             "font-size=\"12\"", "time to first token (log scale)");
    svg_text(f, PLOT_X, PLOT_Y - 12, "start",
             "font-size=\"15\" font-weight=\"bold\"",
             "TTFT distribution per policy (share of requests with TTFT <= x)");
}

static int
svg_cdfs(FILE *f, const struct sim_report *rep)
{
    double lo = INFINITY, hi = 0;
    double **v = sim_calloc(rep->n_runs, sizeof *v);
    size_t *n = sim_calloc(rep->n_runs, sizeof *n);
    int rc = 0;
    if (v == NULL || n == NULL)
        rc = -1;
    for (size_t k = 0; k < rep->n_runs && rc == 0; k++) {
        v[k] = sorted_ttft(&rep->runs[k], &n[k]);
        if (v[k] == NULL) {
            rc = -1;
            break;
        }
        qsort(v[k], n[k], sizeof *v[k], cmp_double);
        if (n[k] > 0) {
            lo = fmin(lo, v[k][0]);
            hi = fmax(hi, v[k][n[k] - 1]);
        }
    }
    if (rc == 0) {
        if (!(lo < INFINITY) || lo <= 0)
            lo = 0.01;
        if (hi <= lo)
            hi = lo * 10;
        lo = pow(10, floor(log10(lo)));
        hi = pow(10, ceil(log10(hi)));
        cdf_axes(f, lo, hi, rep->cfg->slo_ttft_s);
        for (size_t k = 0; k < rep->n_runs; k++) {
            if (n[k] == 0)
                continue;
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" "
                       "stroke-width=\"1.8\" points=\"",
                    palette[k % NPAL]);
            size_t steps = n[k] < 400 ? n[k] : 400;
            for (size_t s = 0; s <= steps; s++) {
                size_t i = s * (n[k] - 1) / steps;
                double y = PLOT_Y + PLOT_H -
                           PLOT_H * (double)(i + 1) / (double)rep->runs[k].n_reqs;
                fprintf(f, "%.1f,%.1f ", xlog(v[k][i], lo, hi), y);
            }
            fprintf(f, "\"/>\n");
            double ly = PLOT_Y + 8 + 20.0 * (double)k;
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                       "stroke=\"%s\" stroke-width=\"3\"/>\n",
                    LEGEND_X, ly, LEGEND_X + 22, ly, palette[k % NPAL]);
            char lab[96];
            snprintf(lab, sizeof lab, "%s  p50 %.3g s  p99 %.3g s",
                     rep->runs[k].policy_name, rep->runs[k].ttft_p50_s,
                     rep->runs[k].ttft_p99_s);
            svg_text(f, LEGEND_X + 28, ly + 4, "start", "font-size=\"12\"",
                     lab);
        }
    }
    for (size_t k = 0; v != NULL && k < rep->n_runs; k++)
        free(v[k]);
    free(v);
    free(n);
    return rc;
}

/* Blue (below an even share) - white - red (above), for log2 ratios in
 * [-2, 2]. */
static void
diverging(double ratio, char *buf, size_t len)
{
    double t = ratio > 0 ? log2(ratio) / 2.0 : -1.0;
    if (t > 1)
        t = 1;
    if (t < -1)
        t = -1;
    int r, g, b;
    if (t >= 0) {
        r = 255;
        g = (int)lround(255 * (1 - 0.8 * t));
        b = (int)lround(255 * (1 - 0.85 * t));
    } else {
        r = (int)lround(255 * (1 + 0.85 * t));
        g = (int)lround(255 * (1 + 0.6 * t));
        b = 255;
    }
    snprintf(buf, len, "#%02x%02x%02x", r, g, b);
}

static void
sequential(double t, char *buf, size_t len)
{
    if (t < 0)
        t = 0;
    if (t > 1)
        t = 1;
    int r = (int)lround(255 - 40 * t), g = (int)lround(255 - 170 * t),
        b = (int)lround(255 - 235 * t);
    snprintf(buf, len, "#%02x%02x%02x", r, g, b);
}

struct heat {
    const char *title;
    const char *note;
    int kind; /* 0: request share, 1: pending prefill */
};

static double
heat_value(const struct sim_result *r, uint32_t i, int kind)
{
    if (kind == 0) {
        double even = (double)r->completed / (double)r->n_inst;
        return even > 0 ? (double)r->per_inst[i].requests / even : 0;
    }
    return r->per_inst[i].mean_pending;
}

/* A heatmap has at most this many columns: a larger fleet's instances are
 * shown `per` to a column (heat_column). */
#define HEAT_COLS 256u

/* Column c's value: the mean over its instances [c x per, (c + 1) x per)
 * (one instance's value when per is 1). */
static double
heat_column(const struct sim_result *r, uint32_t c, uint32_t per, int kind)
{
    uint32_t from = c * per, to = from + per;
    if (to > r->n_inst)
        to = r->n_inst;
    if (to - from == 1)
        return heat_value(r, from, kind);
    double sum = 0;
    for (uint32_t i = from; i < to; i++)
        sum += heat_value(r, i, kind);
    return sum / (double)(to - from);
}

static double
svg_heatmap(FILE *f, const struct sim_report *rep, double y0,
            const struct heat *h)
{
    /* ni columns, or HEAT_COLS at most of `per` instances each */
    uint32_t per = (rep->c->n + HEAT_COLS - 1) / HEAT_COLS;
    uint32_t ni = (rep->c->n + per - 1) / per;
    double cw = ni <= 16 ? 44 : (double)(SVG_W - 260) / ni, ch = 18;
    double x0 = 180;
    svg_text(f, PLOT_X, y0, "start", "font-size=\"15\" font-weight=\"bold\"",
             h->title);
    char note[192];
    if (per > 1)
        snprintf(note, sizeof note, "%s; each column: the mean of %u "
                 "instances in order", h->note, per);
    else
        snprintf(note, sizeof note, "%s", h->note);
    svg_text(f, PLOT_X, y0 + 16, "start", "font-size=\"11\" fill=\"#555\"",
             note);
    double top = y0 + 66;
    double vmax = 0;
    for (size_t k = 0; k < rep->n_runs; k++)
        for (uint32_t i = 0; i < ni; i++)
            vmax = fmax(vmax, heat_column(&rep->runs[k], i, per, h->kind));
    for (uint32_t i = 0; i < ni && ni <= 32; i++) {
        char lab[48];
        snprintf(lab, sizeof lab, "%s", rep->c->inst[i].name);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" "
                   "transform=\"rotate(-45 %.1f %.1f)\">%s</text>\n",
                x0 + cw * i + 4, top - 4, x0 + cw * i + 4, top - 4, lab);
    }
    for (size_t k = 0; k < rep->n_runs; k++) {
        const struct sim_result *r = &rep->runs[k];
        double y = top + ch * (double)k;
        svg_text(f, x0 - 8, y + 13, "end", "font-size=\"12\"", r->policy_name);
        for (uint32_t i = 0; i < ni; i++) {
            double v = heat_column(r, i, per, h->kind);
            char col[16];
            if (h->kind == 0)
                diverging(v, col, sizeof col);
            else
                sequential(vmax > 0 ? sqrt(v / vmax) : 0, col, sizeof col);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                       "height=\"%.1f\" fill=\"%s\" stroke=\"#fff\"/>\n",
                    x0 + cw * i, y, cw, ch, col);
            if (ni <= 16) {
                char lab[32];
                if (h->kind == 0)
                    snprintf(lab, sizeof lab, "%.2f", v);
                else if (v >= 1000)
                    snprintf(lab, sizeof lab, "%.0fk", v / 1000);
                else
                    snprintf(lab, sizeof lab, "%.0f", v);
                svg_text(f, x0 + cw * i + cw / 2, y + 13, "middle",
                         "font-size=\"10\"", lab);
            }
        }
        if (h->kind == 1) {
            char cv[48];
            snprintf(cv, sizeof cv, "CV %.2f", r->load_cv);
            svg_text(f, x0 + cw * ni + 8, y + 13, "start", "font-size=\"11\"",
                     cv);
        }
    }
    return top + ch * (double)rep->n_runs + 30;
}

int
sim_report_svg(FILE *f, const struct sim_report *rep)
{
    double legend_h = PLOT_Y + 8 + 20.0 * (double)rep->n_runs;
    double heat_h = 96 + 18.0 * (double)rep->n_runs;
    double h = fmax(PLOT_Y + PLOT_H + 60, legend_h) + 2 * heat_h + 40;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
               "height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
               "font-family=\"Helvetica, Arial, sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            SVG_W, h, SVG_W, h);
    char title[512], cl[256];
    sim_cluster_describe(rep->c, cl, sizeof cl);
    snprintf(title, sizeof title, "lrsim: %s on %s, %zu requests, seed %llu",
             rep->source, cl, rep->w->n_reqs,
             (unsigned long long)rep->cfg->seed);
    svg_text(f, PLOT_X, 22, "start", "font-size=\"13\" fill=\"#333\"", title);
    if (svg_cdfs(f, rep) != 0)
        return -1;
    double y = fmax(PLOT_Y + PLOT_H + 70, legend_h + 20);
    static const struct heat share = {
        "Requests per instance", "share of an even split: 1.00 = even, "
                                 "red = more, blue = fewer",
        0
    };
    static const struct heat pend = {
        "Load per instance", "pending prefill tokens, time-averaged while "
                             "requests arrive (darker = more)",
        1
    };
    y = svg_heatmap(f, rep, y, &share);
    svg_heatmap(f, rep, y, &pend);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
