/* route: a gateway's side of the router, end to end.
 *
 * Three engine instances are added by name; three conversations that
 * share one system prompt talk for four turns each, and every turn's
 * prompt is the whole history so far. For each request the example does
 * what a gateway does:
 *
 *   1. cuts the prompt into pseudo-tokens (lr_text_tokens: no tokenizer
 *      needed), with a boundary at every message end;
 *   2. routes it (lr_router_route) and prints the decision: the
 *      instance's name, the reason and the tokens expected to be cached
 *      there;
 *   3. reports the engine's first token (lr_router_first_token), the
 *      prompt tokens the engine says it reused (lr_router_observe_cached)
 *      and the end of the request (lr_router_complete);
 *
 * and after each round it passes on what it scraped from the engines
 * (lr_router_set_stats) and the round trips it measured
 * (lr_router_observe_rtt). Time is the example's own clock, fixed steps
 * from 0, and the router's seed is fixed: the output is the same on
 * every run.
 *
 * It checks what the router is for: from the second turn on, each
 * conversation goes back to the instance that served its previous turn
 * and finds its history cached there. It exits 1 when not (as it does
 * with a policy that ignores the cache, such as random).
 *
 * Usage: route [--policy NAME] [--quiet]     (default policy: adaptive)
 * Public API only (<libroute.h>). examples/multiturn.c shows the prefix
 * index and the ring without the router.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libroute.h>

#define N_INST 3
#define N_CONV 3
#define N_TURNS 4
#define WIDTH 4        /* bytes per pseudo-token */
#define TEXT_MAX 16384 /* bytes of one conversation */
#define MSG_MAX (2 * N_TURNS + 1)
#define MS 1000000ull /* ns */

static const char *const names[N_INST] = { "10.0.0.1:8000", "10.0.0.2:8000",
                                           "10.0.0.3:8000" };

struct conv {
    char text[TEXT_MAX]; /* the history: system prompt, then the turns */
    size_t len;
    uint32_t ends[MSG_MAX]; /* each message's end, in bytes */
    size_t n_ends;
    uint32_t last; /* which of names[] served the previous turn */
};

/* Append one message (its text `reps` times) and mark its end. */
static void
say(struct conv *c, const char *line, int reps)
{
    for (int i = 0; i < reps; i++) {
        size_t n = strlen(line);
        if (c->len + n >= TEXT_MAX)
            break;
        memcpy(c->text + c->len, line, n);
        c->len += n;
    }
    if (c->n_ends < MSG_MAX)
        c->ends[c->n_ends++] = (uint32_t)c->len;
}

/* Which of ours an instance id is (the router assigns the ids). */
static int
inst_of(const uint32_t *id, uint32_t instance)
{
    for (int i = 0; i < N_INST; i++)
        if (id[i] == instance)
            return i;
    return 0; /* not reached: the router routes only to its instances */
}

static int
die(const char *what, lr_status st)
{
    fprintf(stderr, "route: %s: %s (%s)\n", what, lr_strerror(st),
            lr_status_name(st));
    return 1;
}

int
main(int argc, char **argv)
{
    const char *policy_name = "adaptive";
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quiet") == 0)
            quiet = 1;
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc)
            policy_name = argv[++i];
        else {
            fprintf(stderr, "usage: route [--policy NAME] [--quiet]\n");
            return 2;
        }
    }

    lr_router_options o;
    lr_router_options_init(&o);
    o.seed = 42; /* every draw the router makes comes from it */
    lr_status st = lr_policy_from_name(policy_name, &o.policy);
    if (st != LR_OK)
        return die(policy_name, st);
    lr_router *r;
    if ((st = lr_router_create(&o, &r)) != LR_OK)
        return die("lr_router_create", st);

    uint32_t id[N_INST];
    for (int i = 0; i < N_INST; i++) {
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = names[i]; /* copied; places the instance on the ring */
        s.rtt_ns = (uint64_t)(i + 1) * MS;
        if ((st = lr_router_add_instance(r, &s, &id[i])) != LR_OK)
            return die("lr_router_add_instance", st);
    }

    /* One system prompt for all: about 1.9 KB, 480 pseudo-tokens. */
    static struct conv conv[N_CONV];
    for (int c = 0; c < N_CONV; c++)
        say(&conv[c],
            "You are the support assistant of a bicycle shop. Answer in "
            "plain words, cite the manual's section, never guess a price. ",
            16);

    static uint32_t tokens[TEXT_MAX / WIDTH + 1];
    uint32_t bounds[MSG_MAX];
    int bad = 0;
    if (!quiet)
        printf("route: %d instances, policy %s, %d conversations x %d "
               "turns\n%4s %4s %6s    %-14s %-14s %6s\n",
               N_INST, lr_policy_name(o.policy), N_CONV, N_TURNS, "conv",
               "turn", "tokens", "instance", "reason", "cached");
    for (int t = 0; t < N_TURNS; t++) {
        uint64_t round_ns = (uint64_t)t * 20000 * MS; /* a turn every 20 s */
        uint32_t inflight[N_INST] = { 0 };
        uint64_t req[N_CONV];
        uint32_t expected[N_CONV]; /* cached tokens the router expected */
        for (int c = 0; c < N_CONV; c++) {
            char line[160];
            snprintf(line, sizeof line,
                     "[user] Conversation %d, question %d: my gears slip "
                     "on the hill, what should I check first? ",
                     c + 1, t + 1);
            say(&conv[c], line, 2 + c);

            /* the whole history, cut once; message ends rounded down to
             * whole tokens */
            size_t n;
            st = lr_text_tokens(conv[c].text, conv[c].len, WIDTH, tokens,
                                sizeof tokens / sizeof tokens[0], &n);
            if (st != LR_OK)
                return die("lr_text_tokens", st);
            for (size_t b = 0; b < conv[c].n_ends; b++)
                bounds[b] = conv[c].ends[b] / WIDTH;

            lr_request q;
            lr_request_init(&q);
            q.id = req[c] = (uint64_t)t * 100 + (uint64_t)c + 1;
            q.tokens = tokens;
            q.n_tokens = n;
            q.boundaries = bounds;
            q.n_boundaries = conv[c].n_ends;
            q.now_ns = round_ns + (uint64_t)c * 100 * MS;
            lr_decision d;
            lr_decision_init(&d);
            if ((st = lr_router_route(r, &q, &d)) != LR_OK)
                return die("lr_router_route", st);
            int i = inst_of(id, d.instance);
            inflight[i]++;
            expected[c] = d.cached_tokens;
            if (!quiet)
                printf("%4d %4d %6zu -> %-14s %-14s %6" PRIu32 "\n", c + 1,
                       t + 1, n, names[i], lr_reason_name(d.reason),
                       d.cached_tokens);
            if (t > 0 && (i != (int)conv[c].last || d.cached_tokens == 0)) {
                fprintf(stderr,
                        "route: conversation %d, turn %d: %s with %" PRIu32
                        " tokens cached (turn %d was on %s)\n",
                        c + 1, t + 1, names[i], d.cached_tokens, t,
                        names[conv[c].last]);
                bad = 1;
            }
            conv[c].last = (uint32_t)i;
        }

        /* What a scrape of each engine and a probe would have found. */
        for (int i = 0; i < N_INST; i++) {
            lr_engine_stats es;
            lr_engine_stats_init(&es);
            es.running = inflight[i];
            es.waiting = 0;
            es.kv_use = 0.1 * inflight[i];
            es.scraped_ns = round_ns + 500 * MS;
            if ((st = lr_router_set_stats(r, id[i], &es)) != LR_OK)
                return die("lr_router_set_stats", st);
            if ((st = lr_router_observe_rtt(r, id[i],
                                            (uint64_t)(i + 1) * MS)) != LR_OK)
                return die("lr_router_observe_rtt", st);
        }

        /* The engines answer: a first token, then the whole reply. */
        for (int c = 0; c < N_CONV; c++) {
            uint64_t sent = round_ns + (uint64_t)c * 100 * MS;
            if ((st = lr_router_first_token(r, req[c], sent + 150 * MS)) !=
                LR_OK)
                return die("lr_router_first_token", st);
            /* what the engine says it reused (vLLM's usage, llama.cpp's
             * timings.cache_n): these engines keep all they were sent */
            if ((st = lr_router_observe_cached(r, req[c], expected[c],
                                               sent + 150 * MS)) != LR_OK)
                return die("lr_router_observe_cached", st);
            char line[160];
            snprintf(line, sizeof line,
                     "[assistant] For conversation %d, answer %d: check the "
                     "cable tension and the hanger (manual 4.%d). ",
                     c + 1, t + 1, t + 1);
            size_t before = conv[c].len;
            say(&conv[c], line, 3);
            uint32_t out = (uint32_t)((conv[c].len - before) / WIDTH);
            if ((st = lr_router_complete(r, req[c], out, sent + 2500 * MS)) !=
                LR_OK)
                return die("lr_router_complete", st);
        }
    }

    lr_router_stats rs;
    lr_router_stats_init(&rs);
    if ((st = lr_router_get_stats(r, &rs)) != LR_OK)
        return die("lr_router_get_stats", st);
    if (!quiet)
        printf("route: %" PRIu64 " routes, %" PRIu64 " of %" PRIu64
               " prompt tokens expected cached (%.1f%%), %" PRIu64
               " in flight\n",
               rs.routes, rs.cached_tokens, rs.prompt_tokens,
               100.0 * (double)rs.cached_tokens / (double)rs.prompt_tokens,
               rs.inflight);
    if (rs.inflight != 0)
        bad = 1; /* every request was completed */
    lr_router_destroy(r);
    if (bad) {
        fprintf(stderr, "route: FAILED: a later turn left its cache\n");
        return 1;
    }
    if (!quiet)
        printf("route: ok: every later turn went back to its "
               "conversation's instance and found its history cached\n");
    return 0;
}
