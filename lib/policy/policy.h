/* The policies: one table, one decide function each, and for a policy
 * that keeps state, its operations.
 *
 * A policy's decide sees a struct lr__pctx and nothing else: the candidate
 * rows (public lr_candidate), the request's facts, the parameter values, a
 * random generator and, for Lodestar, a model. It writes a score per row
 * and returns a struct lr__choice; lr_policy_decide() (the public entry)
 * builds the same context from a host's table.
 *
 * A policy that learns from what it routes (round-robin's cursor,
 * DualMap's hotness window, GORGO's tuner, Lodestar's samples and
 * network, adaptive's TTFT fit) owns that state behind a table of
 * operations (struct lr__pstate_ops, after SQLite's io methods): the
 * router holds one opaque pointer per state kind, made on first use and
 * kept, and calls the operations at each step of a route and of the
 * feedback path without knowing which policy it is. So does the recency
 * table that the policies reading prefix ages share (a state kind of its
 * own, LR__STATE_RECENCY). Adding a stateful policy is its file and one
 * row of the table. docs/architecture.md draws where each operation runs.
 */
#ifndef LIBROUTE_LIB_POLICY_H
#define LIBROUTE_LIB_POLICY_H

#include <math.h>

#include "common/common.h"
#include "libroute/lr_learner.h"
#include "libroute/lr_policy.h"
#include "libroute/lr_router.h"

/* How many of each enum this build has (the public headers name none of
 * these counts: hosts ask lr_policy_count() and friends). */
#define LR__POLICY_COUNT 21
#define LR__PARAM_COUNT 61
#define LR__REASON_COUNT 19

/* The seed of session and short-prefix keys (lr__prefix_key): "LRSESSIO". */
#define LR__SEED_SESSION 0x4c5253455353494full

/* "No policy chose": a choice's decider before a policy has made it. */
#define LR__POLICY_NONE (-1)

/* The rows a policy reads besides the counters every row has. */
#define LR__NEEDS_MATCH 1u /* cached_tokens from the index */
#define LR__NEEDS_AGE 2u   /* cached_age_s (Lodestar's decayed hit ratio) */
#define LR__NEEDS_TREE 4u  /* tree_blocks (SGLang's smallest tree) */
#define LR__NEEDS_CALIB 8u /* ttft_s_per_token, ttft_base_s (adaptive) */

/* The candidates a policy's rule can pick when a route weighs only a few
 * of a large fleet (LR_PARAM_NARROW_ABOVE; docs/router.md, "Large
 * fleets"): a bit per source. 0: the rule needs every routable
 * instance. */
#define LR__NARROW_HITS 1u     /* the instances holding the longest prefix */
#define LR__NARROW_RING 2u     /* the ring's candidates for its key */
#define LR__NARROW_INFLIGHT 4u /* the fewest requests in flight */
#define LR__NARROW_LOAD 8u     /* the least in flight + running + waiting */
#define LR__NARROW_BACKLOG 16u /* the least uncached prompt queued */
#define LR__NARROW_SAMPLE 32u  /* a uniform sample of the fleet */
#define LR__NARROW_STATE 64u   /* what its state names (pstate narrow) */
#define LR__NARROW_QUEUE 128u  /* the shortest queue (waiting or queued) */
#define LR__NARROW_KV 256u     /* the least KV use */
/* the ring's candidates, only when no routable instance holds any of the
 * prompt (a rule that hashes only on a miss) */
#define LR__NARROW_RING_MISS 512u
/* LR_PARAM_NARROW_WIDTH's bound: the candidates a source gives at most */
#define LR__NARROW_WIDTH_MAX 256u

/* The in-flight counts of every routable instance when the rows are a
 * narrowed few of them (what a rule over the fleet's load reads). */
struct lr__fleet_stats {
    uint32_t n;             /* routable instances */
    uint32_t min, max;      /* requests in flight, least and most */
    double sum, sq, median; /* their sum, sum of squares, median */
    /* the queue the queue scorers read (the engine's waiting or the
     * router's queued, the more), least and most */
    uint32_t qmin, qmax;
};

/* DualMap's decode bottleneck: a queue that saw no first token for this
 * long is stuck behind decoding (the router's gather computes stall_s). */
#define LR__DECODE_STALL_NS 3000000000ull

/* Everything a policy sees for one decision. */
struct lr__pctx {
    const lr_candidate *rows; /* n rows, `stride` bytes apart */
    size_t n;
    size_t stride;
    const double *param; /* LR__PARAM_COUNT values, in bounds */
    uint32_t prompt;     /* prompt tokens */
    uint32_t output;     /* expected output tokens (default applied) */
    uint32_t block_tokens;
    uint32_t last; /* round-robin cursor: instance served last, or NONE */
    uint32_t last_prefill; /* ... and prefilled last (split requests) */
    lr_mlp *model;         /* lodestar's scorer, or NULL */
    /* lr__mlp_scratch_floats(model) floats the decision may write, so
     * that threads share the model; NULL: the model's own (one thread) */
    float *model_scratch;
    const struct lr__ptable *pt; /* the table p is a row of (a fallback's) */
    struct lr__rng *rng;
    double *score;   /* n: out, NaN on entry */
    double budget_s; /* TTFT budget (lr_policy_input.ttft_budget_s), 0: none */
    uint64_t rows_model; /* the model whose instances the rows are, or 0 */
    /* the whole fleet's in flight when the rows are a narrowed few of
     * it; NULL: the rows are every routable instance */
    const struct lr__fleet_stats *fleet;
};

/* A policy's pick. */
struct lr__choice {
    uint32_t k;      /* row index */
    int32_t reason;  /* lr_reason */
    double cost;     /* the policy's figure for the choice, or NaN */
    uint32_t alt;    /* the other candidate's instance id, or NONE */
    int32_t decider; /* the policy that chose */
    /* A pair decision (lr__pair_decide) only: the prefill leg's row, or
     * LR_NIL when the request stays whole; its lr_reason (-1: the fleet
     * cannot split); the KV transfer's expected seconds. */
    uint32_t kp;
    int32_t preason;
    double transfer_s;
};

struct lr__pstate_ops;

struct lr__policy_def {
    const char *name;
    uint32_t needs;   /* LR__NEEDS_* */
    int32_t ring_key; /* LR_RING_KEY_* */
    uint32_t ring_k;  /* ranks it reads */
    struct lr__choice (*decide)(const struct lr__pctx *c);
    const struct lr__pstate_ops *ops; /* its state, or NULL */
    /* The parameter naming the policy it falls back to (Lodestar's), plus
     * one; 0: none. The router gathers and keeps state for both. */
    int32_t fallback_param;
    /* Its rule for a table with prefill rows (lr__pair_decide), whose
     * first `nd` rows can decode; NULL: each leg decided apart. */
    struct lr__choice (*decide_pd)(const struct lr__pctx *c, size_t nd);
    /* The candidates its rule can pick in a large fleet (LR__NARROW_*;
     * 0: every routable instance). */
    uint32_t narrow;
};

/* The table of policies, indexed by lr_policy. */
extern const struct lr__policy_def lr__policies[LR__POLICY_COUNT];

/* Decide with policy p (a row of c->pt) on a context whose scores are
 * NaN; fills c->score and returns the choice. Never fails. */
struct lr__choice lr__policy_decide(int32_t p, const struct lr__pctx *c);

/* Decide with policy p on a table whose first nd rows can decode and the
 * rest are prefill rows (the caller knows nd: the router from its
 * gather, lr_policy_decide from its check): a pair, or the request whole
 * (kp LR_NIL; preason -1 when no row is a prefill row, LR_REASON_WHOLE
 * when the rule kept it whole). Never fails; a table without a row that
 * can decode is the caller's to refuse. */
struct lr__choice lr__pair_decide(int32_t p, const struct lr__pctx *c,
                                  size_t nd);

/* Rows of c that can decode: those before the first LR_ROLE_PREFILL row
 * (every row of a table narrower than LR_CANDIDATE_SIZE_V4). */
size_t lr__decode_rows(const struct lr__pctx *c);

/* Seconds to move `tokens` tokens of KV from row a's instance to row b's,
 * by their placement (LR_PARAM_KV_BYTES_PER_TOKEN, LR_PARAM_KV_GBPS_*). */
double lr__transfer_s(const struct lr__pctx *c, const lr_candidate *a,
                      const lr_candidate *b, double tokens);

/* The policy that picks a split request's prefill leg for policy p:
 * LR_PARAM_PD_PREFILL_POLICY, or p itself when that is -1. */
int32_t lr__prefill_policy(int32_t p, const double *param);

/* The ring key a router ranks rows by for policy p, and how many ranks;
 * Lodestar's is its fallback's when that one has a key. */
int32_t lr__policy_ring(const struct lr__ptable *t, int32_t p,
                        const double *param, uint32_t *ranks);

/* What policy p needs gathered (LR__NEEDS_*), Lodestar's fallback's
 * and the prefill leg's policy's (LR_PARAM_PD_PREFILL_POLICY) included. */
uint32_t lr__policy_needs(const struct lr__ptable *t, int32_t p,
                          const double *param);

/* The candidates policy p can pick in a large fleet (LR__NARROW_*), its
 * fallback's and its prefill leg's policy's included; 0 when any of them
 * needs every routable instance. */
uint32_t lr__policy_narrow(const struct lr__ptable *t, int32_t p,
                           const double *param);

/* ---- state behind operations ---------------------------------------------- */

/* State kinds: one per policy of the router's table (the kind is the
 * policy's id), and the shared ones from the top. */
#define LR__STATE_MAX 24u
#define LR__STATE_RECENCY (LR__STATE_MAX - 1) /* prefix ages (NEEDS_AGE) */

/* A table of policies: the library's own (lr__builtin_policies), or, in
 * tests, a longer one (lr__router_set_policies): a policy is its row, and
 * its id the row's index. At most LR__STATE_MAX - 1 rows. */
struct lr__ptable {
    const struct lr__policy_def *def;
    uint32_t n;
};
extern const struct lr__ptable lr__builtin_policies;

/* What a state is made with: the router's allocator and sizes, its
 * seeds, its parameters, and the options a host gave for a policy. */
struct lr__penv {
    struct lr__mem *mem;
    uint32_t max_inst, max_req;
    uint64_t seed;       /* the routing seed (lr_router_options.seed) */
    uint64_t hash_seed;  /* keys in-process tables (never the routing seed) */
    const double *param; /* LR__PARAM_COUNT values, in bounds */
    /* lr_router_options.learner as given at create, copied (NULL: none) */
    const lr_learner_options *learner;
};

struct lr__adapters;

/* One route as the request path's steps see it. The read-side operations
 * get it const but for `scratch`: what the policy whose ring key it is
 * leaves for its record (DualMap's hot keys), per route, so that routes
 * on several threads never share it. */
#define LR__ROUTE_SCRATCH 64u
struct lr__route_view {
    const struct lr__ptable *pt; /* the router's policies */
    const lr_request *q;
    const uint64_t *keys; /* the prompt's block keys, n_keys of them */
    size_t n_keys;
    uint32_t block_tokens;
    uint32_t routable; /* rows: the routable instances (of its model),
                          or a narrowed route's candidates among them */
    uint32_t fleet;    /* the routable instances (of its model) */
    int32_t policy;    /* the router's policy */
    uint32_t needs;    /* what it needs gathered (lr__policy_needs) */
    const double *param;
    /* the request's model and adapter (lr_name_hash; 0: none), and the
     * salt its keys are made with (lr_adapter_salt); rows_model: the model
     * whose instances the rows are (0: every routable instance) */
    uint64_t model, adapter, salt, rows_model;
    /* the router's adapter residency (parts/adapters.h), as the rows'
     * adapter columns were filled from it */
    const struct lr__adapters *adapters;
    uint64_t scratch[LR__ROUTE_SCRATCH];
    uint32_t n_scratch;
};

/* A placement, as the record operation is told of it (every state the
 * router has is told of every placement, whoever decided it). */
struct lr__placed {
    const struct lr__route_view *v;
    const lr_candidate *rows; /* the table decided on */
    uint32_t n;
    uint32_t k;           /* the chosen row (the decode leg's, when split) */
    struct lr__choice ch; /* ch.kp: the prefill leg's row, or LR_NIL */
    uint32_t slot;        /* the load tracker's slot for the request (LR_NIL) */
    uint32_t output;      /* expected output tokens */
};

/* The operations of a state kind; any may be NULL (nothing to do).
 * Read-side ones run under the router's read lock, from several threads
 * at once: they read the state and write only their arguments. Write-side
 * ones run under its write lock. A failed operation changes nothing. */
struct lr__pstate_ops {
    /* At router create, before any state exists: refuse bad options. */
    lr_status (*check)(const struct lr__penv *env);
    lr_status (*create)(const struct lr__penv *env, void **out);
    void (*destroy)(void *st, struct lr__mem *m);
    /* Parameter `key` is set to `value` (env->param still holds the old
     * one): rebuild what depends on it (LR_ENOMEM: nothing changed). */
    lr_status (*set_param)(void *st, const struct lr__penv *env, int32_t key,
                           double value);
    /* The values of the parameters the state owns (GORGO's tuned weights)
     * over `param`, which the policies read; and a parameter's value as
     * lr_router_get_param() reports it when the state owns it (true). */
    void (*sync)(const void *st, double *param);
    bool (*get)(const void *st, int32_t key, double *value);

    /* Work the state must do before a decision reads it (Lodestar: take
     * the network its learner published): due is asked under the read
     * lock, refresh runs under the write lock. */
    bool (*refresh_due)(const void *st);
    void (*refresh)(void *st);

    /* read side */
    void (*gather)(const void *st, lr_candidate *rows, uint32_t n,
                   struct lr__route_view *v, uint64_t now_ns);
    uint64_t (*ring_key)(const void *st, struct lr__route_view *v);
    void (*prepare)(const void *st, struct lr__pctx *c);
    /* For a narrowed route (LR__NARROW_STATE): the routable instances
     * (act, n_act of them, ascending) its rule picks among, up to cap,
     * into ids; how many. */
    uint32_t (*narrow)(const void *st, const struct lr__route_view *v,
                       const uint32_t *act, uint32_t n_act, uint32_t *ids,
                       uint32_t cap);

    /* write side */
    void (*record)(void *st, const struct lr__placed *p, uint64_t now_ns);
    /* A request of load slot `slot` saw its first token at now_ns, ttft_s
     * after its dispatch (finite, >= 0; -1: before it, no sample). */
    void (*first_token)(void *st, uint32_t slot, double ttft_s, uint64_t now_ns,
                        int32_t policy, const double *param);
    /* It ended at now_ns (completed, or failed or moved: false): what
     * waits on it goes. */
    void (*ended)(void *st, uint32_t slot, uint64_t now_ns, bool completed);

    /* Snapshot: a section of this tag, when the state has something to
     * keep (save: *out NULL for nothing); load builds a whole state aside
     * from a section (the router swaps it in once everything is made). */
    uint32_t tag;
    lr_status (*save)(const void *st, struct lr__mem *m, lr_blob **out);
    lr_status (*load)(const struct lr__penv *env, const uint8_t *p, size_t n,
                      void **out);

    uint64_t (*digest)(const void *st, uint64_t d);
    lr_status (*verify)(const void *st);
};

/* The operations of state kind `kind` (0 .. LR__STATE_MAX - 1) with
 * table t, or NULL for a policy without state or no such kind. */
const struct lr__pstate_ops *lr__pstate_ops_of(const struct lr__ptable *t,
                                               uint32_t kind);

/* The state kinds policy p uses with parameters `param`: its own, its
 * fallback's (Lodestar), the recency table when it reads prefix ages. A
 * bit per kind. */
uint32_t lr__policy_states(const struct lr__ptable *t, int32_t p,
                           const double *param);

/* The policy whose ring key policy p ranks by (p, or Lodestar's
 * fallback); LR__POLICY_NONE for none. */
int32_t lr__policy_ring_owner(const struct lr__ptable *t, int32_t p,
                              const double *param);

/* Key of the prompt's first `tokens` tokens (session and consistent hash,
 * and DualMap's short prompts): the chained block key when those tokens
 * are whole blocks, else a hash of the tokens (a block key of fewer
 * tokens would ignore the tail). */
uint64_t lr__prefix_key(const struct lr__route_view *v, uint32_t tokens);

/* ---- parameters ---------------------------------------------------------- */

/* Bounds of parameter `key` (0 .. LR__PARAM_COUNT - 1). */
const struct lr__range *lr__param_def(int32_t key);

/* Fill `param` with every default. */
void lr__param_defaults(double *param);

/* LR_OK if `value` may be set for `key`, else LR_EINVAL (NaN, fraction for
 * an integer key) or LR_ERANGE. */
lr_status lr__param_check(int32_t key, double value);

/* ---- helpers the policy files share (rows.c) ------------------------------- */

static inline const lr_candidate *
lr__row(const struct lr__pctx *c, size_t k)
{
    return (const lr_candidate *)((const char *)c->rows + k * c->stride);
}

#define LR__P(c, key) ((c)->param[LR_PARAM_##key])

/* A context over rows [from, from + n) of c, its scores theirs. */
static inline struct lr__pctx
lr__sub_table(const struct lr__pctx *c, size_t from, size_t n)
{
    struct lr__pctx s = *c;
    s.rows = (const lr_candidate *)(const void *)((const char *)c->rows +
                                                  from * c->stride);
    s.n = n;
    s.score = c->score + from;
    return s;
}

/* A pair choice's other fields: the prefill leg's row kp (LR_NIL: the
 * request stays whole at ch->k) and reason, and the KV transfer's time
 * for what ch->k does not hold. */
void lr__set_leg(const struct lr__pctx *c, struct lr__choice *ch, uint32_t kp,
                 int32_t preason);

/* Index of the least score among the rows (ties drawn uniformly). */
uint32_t lr__pick_min(const struct lr__pctx *c);

/* A row's adapter columns (rows shorter than LR_CANDIDATE_SIZE_V3 have
 * none: the adapter is resident, nothing to load). */
static inline bool
lr__row_adapter_resident(const struct lr__pctx *c, const lr_candidate *r)
{
    return c->stride < LR_CANDIDATE_SIZE_V3 || r->adapter_missing == 0;
}

static inline double
lr__row_adapter_load_s(const struct lr__pctx *c, const lr_candidate *r)
{
    return c->stride < LR_CANDIDATE_SIZE_V3 ? 0 : r->adapter_load_s;
}

/* Deepest cached prefix over the rows. */
uint32_t lr__best_cached(const struct lr__pctx *c);

/* The row holding `best` cached tokens with the fewest requests in flight
 * (ties drawn); every score becomes the row's negated hit. */
uint32_t lr__least_among_best(const struct lr__pctx *c, uint32_t best);

/* Least in flight (ties drawn); scores are the in-flight counts. */
uint32_t lr__least_inflight(const struct lr__pctx *c);

/* Row of ring rank `rank` (1-based), or LR_NIL. */
uint32_t lr__row_of_rank(const struct lr__pctx *c, uint32_t rank);

/* A choice of row k by `policy` for `reason`, its cost the row's score. */
struct lr__choice lr__choose(const struct lr__pctx *c, uint32_t k,
                             int32_t reason, int32_t policy);

/* Write a choice into a decision as route() and lr_policy_decide() report
 * it (instance, reason, cached, best cached, cost, alt, decider, seed). */
void lr__decision_fill(lr_decision *d, const struct lr__pctx *c,
                       const struct lr__choice *ch, uint64_t seed);

/* The policies with files of their own: their decide and, for those that
 * keep state, their operations. */
struct lr__choice lr__dualmap_decide(const struct lr__pctx *c);
struct lr__choice lr__gorgo_decide(const struct lr__pctx *c);
struct lr__choice lr__lodestar_decide(const struct lr__pctx *c);
struct lr__choice lr__adaptive_decide(const struct lr__pctx *c);
struct lr__choice lr__adaptive_decide_pd(const struct lr__pctx *c, size_t nd);
extern const struct lr__pstate_ops lr__round_robin_ops;
extern const struct lr__pstate_ops lr__dualmap_ops;
extern const struct lr__pstate_ops lr__gorgo_ops;
extern const struct lr__pstate_ops lr__lodestar_ops;
extern const struct lr__pstate_ops lr__adaptive_ops;
extern const struct lr__pstate_ops lr__recency_ops;

#endif /* LIBROUTE_LIB_POLICY_H */
