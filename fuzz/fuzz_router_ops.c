/* lr_router as a sequence of API calls on one router, checked against a
 * shadow of its instances and of the requests in flight.
 *
 * Input (front stream, fuzz_dp_next_*): a header, then operations until
 * the input runs out (at most MAX_OPS):
 *   header   seed 0..255; max_instances 1..8; max_requests 1..48; block
 *            size {1,2,4,16}; index capacity 8..512 blocks; TTL choice
 *            (default, 1 s, 60 s, never); policy (every one but lodestar,
 *            the PD ones included); ring vnodes 1..64; allocation
 *            failure: mode (none, none, once, from then on) and which
 *            allocation 1..256 after the initial instances; a mask of the
 *            names added at start; their roles (all LR_ROLE_BOTH twice in
 *            four; the odd ones prefill; the odd ones prefill and the even
 *            ones decode, placed two to a node, four to a rack). The router
 *            starts with the smallest DualMap window (16 requests)
 *   op 0     add_instance: name (8 valid, "" and 256 bytes invalid), class
 *            (64 invalid), prefix_caching (2 invalid), initial RTT (up to
 *            past LR_LOAD_MAX_RTT_NS), struct_size (too small; 0.2's,
 *            which has no role: LR_ROLE_BOTH), models, adapter slots, role
 *            (both, prefill, decode; 3 and -1 invalid), placement (node,
 *            rack, region 0..3 each)
 *   op 1     drain_instance: instance, draining (2 invalid)
 *   op 2     remove_instance: instance
 *   op 3-6   route: request id (a pool of 8, 0, UINT64_MAX, one in
 *            flight, a fresh one), a pattern prompt over a tiny alphabet
 *            (prefixes collide), 0..2 boundaries (possibly unsorted or past
 *            the end), flags (DRY_RUN, SCORES, NO_LEARN, an invalid bit),
 *            session (has_session 2 invalid), expected output tokens,
 *            scores buffer (none, 1 entry, enough, NULL with a capacity),
 *            variant (NULL tokens, struct_size too small on the request or
 *            on the decision, a 0.2 decision without the prefill fields),
 *            model, adapter, multimodal inputs
 *   op 7     set_policy (and an out-of-range value)
 *   op 8     set_param: key (two unknown), value (bounds, default, just
 *            outside, NaN, +-inf, -0, in between, a fraction for an
 *            integer key); the DualMap window x key blocks stays <= 4096;
 *            LR_PARAM_PD_PREFILL_POLICY refuses a policy with a ring key
 *            or a state of its own (round-robin's excepted)
 *   op 9     set_stats: instance, running, waiting, kv_use (NaN, inf, out
 *            of [0,1] among them), scrape time, struct_size
 *   op 10    observe_rtt: instance, RTT
 *   op 11-13 first_token / complete / fail: request id
 *   op 14    rebalance_plan: capacity 0..8 or NULL with a capacity; then a
 *            mask of the planned moves to carry out with lr_router_move
 *   op 15    move: request id, instance
 *   op 16    KV events: stored (blocks, engine block size, parent,
 *            token count), removed, cleared
 *   op 17    deltas: export (since 0, the last mark, a future mark);
 *            import its own last export, the same with every route's
 *            instance id rewritten (checksum fixed up), or raw input bytes
 *            (checksum maybe fixed up)
 *   op 18    time moves forward (up to past the TTL and the stats age)
 *   op 19    observe_cached: request id, tokens (up to past the prompt)
 *   op 20    learn_step (Lodestar's learner)
 *   op 21    set_adapters: an engine's LoRA report
 *   op 22    prefill_done: request id (the same pools as first_token)
 *   op 23    queries: get_stats and instance_load (struct sizes),
 *            find_instance, instance_count, policy, get_param,
 *            param_bounds, set_class, mark
 * Instance ids are 0..7 (some past max_instances), 1000 and
 * LR_INSTANCE_NONE.
 *
 * After every call: lr__router_verify() == LR_OK; the status is one the
 * header documents and, where the shadow can tell, exactly the one it
 * predicts (only LR_ENOMEM may replace LR_OK, and only once an allocation
 * failed); a failed call leaves lr__router_digest() unchanged; every
 * decision names a routable instance that can decode (not
 * LR_ROLE_PREFILL), an alternative that is routable and can decode too,
 * cached tokens that are block-aligned, at most the prompt and at most the
 * best, and with LR_ROUTE_SCORES one score per row: the routable
 * instances that decode in id order, then the routable prefill instances
 * in id order. With routable prefill rows for the request, a policy
 * without a pair rule (all but llm-d-pd, dynamo-pd, adaptive) always
 * splits; a split names a routable prefill instance with a hit like the
 * decode one's and the transfer time their placements give for the
 * tokens the decode instance does not hold, a request kept whole names
 * none, LR_REASON_WHOLE where it could have split, else -1; a table
 * whose rows are all prefill instances is LR_ESTATE (a 0.2 decision, which
 * has no prefill fields, keeps them untouched; the shadow reads the
 * prefill leg off the load instead). A plan moves only queued requests
 * from where they are to their recorded alternative, and changes nothing.
 * Every instance's load equals the sums over the shadow's requests (any
 * counter above 2^40 is reported as wrapped first): a request counts at
 * its decode instance (in flight, its KV; queued, its prompt and prefill
 * unless it was split; else its decode) and, while its prefill leg is open
 * (until prefill_done, its first token, or its prefill instance's removal;
 * a move keeps it, a move onto it is LR_EINVAL and onto any prefill
 * instance LR_ESTATE), at its prefill
 * instance (in flight and queued, its prompt as queued tokens and KV, the
 * tokens not cached there as prefill); the router stats equal the
 * shadow's counts. At the end every request still in flight is completed
 * and every counter must be zero. Then the same input runs again: the
 * transcript of results and the final digest must be the same (B24).
 *
 *   LR_FUZZ_TRACE=1 ./build/fuzz/router_ops-replay FILE   # decoded calls */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/lr_hash.h"
#include "data_producer.h"
#include "fuzz_helpers.h"
#include "index_util.h"
#include "policy/policy.h"
#include "router/router.h"

#define MAX_OPS 192
#define MAX_INST 8
#define MAX_REQ 48
#define MAX_LEN 96
#define N_IDS 10
#define NONE LR_INSTANCE_NONE
#define WRAPPED (1ull << 40)
/* The DualMap window the router starts with (LR_PARAM_DUALMAP_WINDOW's
 * least value; the default 1024 x 16 key blocks made every call walk
 * 16384 entries twice and held the fuzzer to ~50 inputs/s) and the most
 * window x key blocks entries a set_param may make. */
#define START_WINDOW 16
#define MAX_WINDOW 4096

static const uint32_t inst_ids[N_IDS] = { 0, 1, 2, 3, 4, 5, 6, 7, 1000, NONE };

/* names 0..7 are valid, 8 is empty, 9 is 256 bytes */
#define N_NAMES 10
static const char *const short_names[8] = {
    "a", "b", "10.0.0.5:8000", "10.0.0.6:8000", "x", "y", "gpu-7", "h",
};

static const char *
name_of(uint32_t k)
{
    static char long_name[257];
    if (k < 8)
        return short_names[k];
    if (k == 8)
        return "";
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    return long_name;
}

struct sinst {
    bool live, draining;
    uint32_t name;
    int32_t pc;
    uint32_t models; /* bit k: serves model_names[k]; 0: every model */
    int32_t role;    /* lr_role */
    uint32_t node, rack, region;
};

/* Models an instance may serve (a request may also name "m3", which none
 * serves, or a name too long); adapters a request may run under. */
static const char *const model_names[4] = { "m0", "m1", "m2", "m3" };

struct sreq {
    uint64_t id;
    int model; /* index into model_names, -1: none */
    uint32_t inst, alt;
    bool queued;
    uint32_t prompt, out;
    /* expected cached tokens here and at the alternative, when known (a
     * move onto the alternative takes the alternative's figure, which the
     * host only sees through LR_ROUTE_SCORES) */
    uint32_t cached, alt_cached;
    bool cached_known, alt_cached_known;
    /* split: dispatched with a prefill leg (its decode leg then queues no
     * prefill, wherever it moves); pinst: the prefill leg's instance while
     * that leg is open, else NONE; pcached: the hit expected there */
    bool split;
    uint32_t pinst, pcached;
};

struct run {
    bool check;
    struct fuzz_oom oom;
    uint64_t transcript;
    uint64_t final_digest;
    lr_router *r;
    uint32_t max_inst, max_req, B;
    struct sinst in[MAX_INST];
    struct sreq rq[MAX_REQ];
    uint32_t n_rq;
    double param[LR__PARAM_COUNT];
    int32_t policy;
    uint64_t now, next_id;
    uint64_t clock, ahead; /* the router's clock, as lr_router.h says */
    uint64_t routes, dry_runs, prompt_tokens, cached_tokens;
    uint64_t last_mark;
    uint8_t *blob;
    size_t blob_n;
};

/* ---- small helpers --------------------------------------------------------- */

/* The router's clock ("Clock" in lr_router.h): the status the clock gives
 * a call stamped t (LR_OK or LR_ERANGE), keeping the bookkeeping of a
 * refused pair as the router does; call it exactly when the router
 * reaches its clock check (after the argument checks that come first). */
static int
clock_judge(struct run *r, uint64_t t, bool mutates)
{
    if (t > LR_ROUTER_MAX_TIME_NS)
        return LR_ERANGE;
    uint64_t skew = (uint64_t)(r->param[LR_PARAM_CLOCK_SKEW_S] * 1e9);
    if (r->clock == 0 || t <= r->clock + skew) {
        if (mutates)
            r->ahead = 0;
        return LR_OK;
    }
    if (!mutates)
        return LR_ERANGE;
    if (r->ahead != 0 && t >= r->ahead && t - r->ahead <= skew)
        return LR_OK; /* two in a row agree: the host's clock moved */
    r->ahead = t;
    return LR_ERANGE;
}

/* A call stamped t succeeded: the clock takes it. */
static void
clock_took(struct run *r, uint64_t t)
{
    if (t > r->clock)
        r->clock = t;
    r->ahead = 0;
}

static bool
oom_hit(const struct run *r)
{
    return r->oom.failures > 0;
}

static uint64_t
digest(struct run *r)
{
    if (!r->check)
        return 0;
    fuzz_oom_pause();
    uint64_t d = lr__router_digest(r->r);
    fuzz_oom_resume();
    return d;
}

static bool
s_live(const struct run *r, uint32_t id)
{
    return id < r->max_inst && r->in[id].live;
}

static bool
s_routable(const struct run *r, uint32_t id)
{
    return s_live(r, id) && !r->in[id].draining;
}

/* Whether instance id serves model m (-1: any). */
static bool
s_serves(const struct run *r, uint32_t id, int m)
{
    return id < r->max_inst && r->in[id].live &&
           (m < 0 || r->in[id].models == 0 || (r->in[id].models >> m & 1));
}

/* Routable instances serving model m: the rows of its route. */
static uint32_t
s_rows(const struct run *r, int m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->max_inst; i++)
        n += s_serves(r, i, m) && !r->in[i].draining;
    return n;
}

static bool
s_prefill(const struct run *r, uint32_t id)
{
    return id < r->max_inst && r->in[id].live &&
           r->in[id].role == LR_ROLE_PREFILL;
}

/* Of those, the rows that can decode (LR_ROLE_BOTH, LR_ROLE_DECODE): the
 * first part of the table when there are prefill rows. */
static uint32_t
s_decode_rows(const struct run *r, int m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->max_inst; i++)
        n += s_serves(r, i, m) && !r->in[i].draining && !s_prefill(r, i);
    return n;
}

static uint32_t
s_count(const struct run *r, bool routable_only)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->max_inst; i++)
        n += routable_only ? s_routable(r, i) : s_live(r, i);
    return n;
}

static int
s_find(const struct run *r, uint64_t id)
{
    for (uint32_t i = 0; i < r->n_rq; i++)
        if (r->rq[i].id == id)
            return (int)i;
    return -1;
}

static void
s_drop(struct run *r, int i)
{
    r->rq[i] = r->rq[--r->n_rq];
}

static bool
policy_matches(int32_t p)
{
    return p == LR_POLICY_PREFIX_CACHE ||
           p == LR_POLICY_PREFIX_CACHE_AND_LOAD ||
           p == LR_POLICY_SGLANG_CACHE_AWARE || p == LR_POLICY_PREBLE ||
           p == LR_POLICY_MIN_TTFT || p == LR_POLICY_DYNAMO ||
           p == LR_POLICY_DUALMAP || p == LR_POLICY_GORGO ||
           p == LR_POLICY_RANVIER || p == LR_POLICY_LODESTAR ||
           p == LR_POLICY_ADAPTIVE || p == LR_POLICY_LLMD_PD ||
           p == LR_POLICY_DYNAMO_PD;
}

/* The policy of a split request's prefill leg (LR_PARAM_PD_PREFILL_POLICY,
 * -1: the router's own). */
static int32_t
prefill_policy(const struct run *r)
{
    double pp = r->param[LR_PARAM_PD_PREFILL_POLICY];
    return pp < 0 ? r->policy : (int32_t)pp;
}

/* Whether the rows carry the index's hits: the router matches for its
 * policy and for the prefill leg's, whether or not a request splits. */
static bool
route_matches(const struct run *r)
{
    return policy_matches(r->policy) || policy_matches(prefill_policy(r));
}

/* Policies with a pair rule of their own: they may keep a request whole
 * where others always split it. */
static bool
policy_pairs(int32_t p)
{
    return p == LR_POLICY_LLMD_PD || p == LR_POLICY_DYNAMO_PD ||
           p == LR_POLICY_ADAPTIVE;
}

/* What LR_PARAM_PD_PREFILL_POLICY refuses (lr_policy.h): a policy that
 * ranks by a ring key or keeps a state of its own, but round-robin. */
static bool
prefill_policy_refused(int32_t p)
{
    return p == LR_POLICY_SESSION_AFFINITY || p == LR_POLICY_CONSISTENT_HASH ||
           p == LR_POLICY_DUALMAP || p == LR_POLICY_GORGO ||
           p == LR_POLICY_RANVIER || p == LR_POLICY_LODESTAR ||
           p == LR_POLICY_ADAPTIVE;
}

/* A decision's reason, by the policy that gave it (lodestar adds its own
 * reasons to its fallback's). */
static bool
reason_ok(int32_t reason, int32_t p)
{
    return (reason >= LR_REASON_RANDOM &&
            reason <= (p == LR_POLICY_LODESTAR ? LR_REASON_OOD
                                               : LR_REASON_SAMPLED)) ||
           reason == LR_REASON_ADAPTER;
}

/* The reasons a pair rule gives on a table with prefill rows
 * (docs/router.md): the decode leg's, and the prefill leg's
 * (LR_REASON_WHOLE: kept whole). */
static bool
pair_reasons_ok(int32_t p, int32_t reason, int32_t preason)
{
    switch (p) {
    case LR_POLICY_LLMD_PD:
        return (reason == LR_REASON_PREFIX_HIT ||
                reason == LR_REASON_LEAST_LOADED) &&
               (preason == LR_REASON_PREFIX_HIT ||
                preason == LR_REASON_LEAST_LOADED ||
                preason == LR_REASON_WHOLE);
    case LR_POLICY_DYNAMO_PD:
        return (reason == LR_REASON_MIN_COST ||
                reason == LR_REASON_LEAST_LOADED) &&
               (preason == LR_REASON_MIN_COST || preason == LR_REASON_WHOLE);
    case LR_POLICY_ADAPTIVE:
        return reason == LR_REASON_MIN_COST &&
               (preason == LR_REASON_MIN_COST || preason == LR_REASON_WHOLE);
    default:
        return true;
    }
}

/* The statuses each call's documentation lists. */
enum call {
    C_ADD,
    C_DRAIN,
    C_REMOVE,
    C_ROUTE,
    C_POLICY,
    C_SET_PARAM,
    C_GET_PARAM,
    C_SET_STATS,
    C_RTT,
    C_LOAD,
    C_EVENT, /* first_token, complete, fail */
    C_OBSERVE,
    C_PLAN,
    C_MOVE,
    C_KV_STORED,
    C_KV_REMOVED,
    C_KV_CLEARED,
    C_EXPORT,
    C_IMPORT,
    C_STATS,
    C_FIND,
    C_CLASS,
    C_LEARN,
    C_SET_ADAPTERS,
    C_PREFILL_DONE,
    C_COUNT_
};

static const char *const call_names[C_COUNT_] = {
    "add_instance",   "drain_instance", "remove_instance", "route",
    "set_policy",     "set_param",      "get_param",       "set_stats",
    "observe_rtt",    "instance_load",  "lifecycle event", "observe_cached",
    "rebalance_plan", "move",           "kv_stored",       "kv_removed",
    "kv_cleared",     "export_delta",   "import_delta",    "get_stats",
    "find_instance",  "set_class",      "learn_step",      "set_adapters",
    "prefill_done",
};

#define B_(s) (1u << (s))
static const uint32_t documented[C_COUNT_] = {
    [C_ADD] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) | B_(LR_EEXIST) |
              B_(LR_ELIMIT) | B_(LR_ENOMEM) | B_(LR_ERANGE),
    [C_DRAIN] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT) | B_(LR_ENOMEM),
    [C_REMOVE] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT),
    [C_ROUTE] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) | B_(LR_ESTATE) |
                B_(LR_EEXIST) | B_(LR_ELIMIT) | B_(LR_EBUFSIZE) |
                B_(LR_ENOMEM) | B_(LR_ERANGE) | B_(LR_ENOENT),
    [C_POLICY] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOTSUP) | B_(LR_ENOMEM),
    [C_SET_PARAM] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOTSUP) | B_(LR_ERANGE) |
                    B_(LR_ENOMEM),
    [C_GET_PARAM] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOTSUP),
    /* lr_load_set_stats, and the clock */
    [C_SET_STATS] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) |
                    B_(LR_ENOENT) | B_(LR_ERANGE),
    /* lr_load_observe_rtt */
    [C_RTT] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ERANGE) | B_(LR_ENOENT),
    /* lr_load_get */
    [C_LOAD] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) | B_(LR_ENOENT),
    [C_EVENT] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT) | B_(LR_ERANGE),
    [C_OBSERVE] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT) | B_(LR_ERANGE),
    [C_PLAN] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ERANGE),
    [C_MOVE] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT) | B_(LR_ESTATE),
    /* lr_index_kv_* */
    [C_KV_STORED] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) |
                    B_(LR_ENOTSUP) | B_(LR_ENOENT) | B_(LR_ELIMIT) |
                    B_(LR_ENOMEM) | B_(LR_ERANGE),
    [C_KV_REMOVED] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT),
    [C_KV_CLEARED] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT),
    [C_EXPORT] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOMEM),
    [C_IMPORT] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ECORRUPT) | B_(LR_EVERSION) |
                 B_(LR_ENOTSUP) | B_(LR_ELIMIT) | B_(LR_ENOMEM) | B_(LR_ERANGE),
    [C_STATS] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION),
    [C_FIND] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT),
    [C_CLASS] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) | B_(LR_ERANGE),
    [C_LEARN] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ESTATE) | B_(LR_ENOMEM),
    [C_SET_ADAPTERS] = B_(LR_OK) | B_(LR_EINVAL) | B_(LR_EVERSION) |
                       B_(LR_ENOENT) | B_(LR_ERANGE) | B_(LR_ENOMEM),
    [C_PREFILL_DONE] =
        B_(LR_OK) | B_(LR_EINVAL) | B_(LR_ENOENT) | B_(LR_ERANGE),
};

static void
fail_status(enum call c, lr_status got, lr_status want, const char *why)
{
    fprintf(stderr, "router_ops: %s returned %s, %s %s\n", call_names[c],
            lr_status_name(got), why, lr_status_name(want));
    abort();
}

/* After a call: note the status; check it is documented and, when `want`
 * is not -1, that it is `want` (LR_ENOMEM may stand for LR_OK once an
 * allocation failed); a failed call must leave the digest as it was. */
static void
after(struct run *r, enum call c, lr_status st, int want, uint64_t d0)
{
    fuzz_note(&r->transcript, ((uint64_t)c << 8) | (uint64_t)st);
    if (!r->check)
        return;
    if ((unsigned)st >= 32 || !(documented[c] & B_(st)))
        fail_status(c, st, st, "which its documentation does not list; got");
    if (want >= 0 && st != (lr_status)want &&
        !(want == LR_OK && st == LR_ENOMEM && oom_hit(r)))
        fail_status(c, st, (lr_status)want, "the shadow expected");
    if (st != LR_OK && digest(r) != d0) {
        fprintf(stderr,
                "router_ops: %s failed with %s and changed the "
                "router (digest)\n",
                call_names[c], lr_status_name(st));
        abort();
    }
}

/* ---- the invariants after every operation ---------------------------------- */

static void
check_counters(struct run *r)
{
    fuzz_oom_pause();
    lr_status st = lr__router_verify(r->r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    uint64_t total = 0;
    for (uint32_t id = 0; id < MAX_INST; id++) {
        lr_load_snapshot s;
        lr_load_snapshot_init(&s);
        st = lr_router_instance_load(r->r, id, &s);
        if (!s_live(r, id)) {
            FUZZ_ASSERT_STATUS(st, st == LR_ENOENT);
            continue;
        }
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        /* a counter that went below zero is huge: say so first */
        FUZZ_ASSERT(s.inflight <= r->max_req && s.queued <= s.inflight);
        FUZZ_ASSERT(s.prefill_tokens < WRAPPED);
        FUZZ_ASSERT(s.queued_tokens < WRAPPED);
        FUZZ_ASSERT(s.decode_tokens < WRAPPED);
        FUZZ_ASSERT(s.kv_tokens < WRAPPED);
        FUZZ_ASSERT(s.prompt_tokens < WRAPPED);
        uint32_t n = 0, nq = 0, legs = 0;
        uint64_t qt = 0, dec = 0, kv = 0, pt = 0, pf_lo = 0, pf_hi = 0;
        for (uint32_t i = 0; i < r->n_rq; i++) {
            const struct sreq *q = &r->rq[i];
            if (q->pinst == id) { /* its open prefill leg */
                n++;
                nq++;
                qt += q->prompt;
                kv += q->prompt;
                pt += q->prompt;
                pf_lo += q->prompt - q->pcached;
                pf_hi += q->prompt - q->pcached;
            }
            if (q->inst != id)
                continue;
            n++;
            legs++;
            kv += (uint64_t)q->prompt + q->out;
            pt += q->prompt;
            if (q->queued) {
                nq++;
                if (!q->split) { /* a decode leg queues no prefill */
                    qt += q->prompt;
                    pf_lo += q->cached_known ? q->prompt - q->cached : 0;
                    pf_hi +=
                        q->cached_known ? q->prompt - q->cached : q->prompt;
                }
            } else {
                dec += q->out;
            }
        }
        total += legs;
        FUZZ_ASSERT(s.inflight == n);
        FUZZ_ASSERT(s.queued == nq);
        FUZZ_ASSERT(s.queued_tokens == qt);
        FUZZ_ASSERT(s.decode_tokens == dec);
        FUZZ_ASSERT(s.kv_tokens == kv);
        FUZZ_ASSERT(s.prompt_tokens == pt);
        FUZZ_ASSERT(s.prefill_tokens >= pf_lo && s.prefill_tokens <= pf_hi);
        FUZZ_ASSERT(s.prefix_caching == r->in[id].pc);
    }
    FUZZ_ASSERT(total == r->n_rq);
    lr_router_stats rs;
    lr_router_stats_init(&rs);
    st = lr_router_get_stats(r->r, &rs);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    FUZZ_ASSERT(rs.inflight < WRAPPED);
    FUZZ_ASSERT(rs.inflight == r->n_rq);
    FUZZ_ASSERT(rs.instances == s_count(r, false));
    FUZZ_ASSERT(rs.routable == s_count(r, true));
    FUZZ_ASSERT(rs.routes == r->routes);
    FUZZ_ASSERT(rs.dry_runs == r->dry_runs);
    FUZZ_ASSERT(rs.prompt_tokens == r->prompt_tokens);
    FUZZ_ASSERT(rs.cached_tokens == r->cached_tokens);
    /* every reason (the stats struct holds the first 16) */
    uint64_t counts[LR__REASON_COUNT], by_reason = 0;
    size_t nc = 0;
    st = lr_router_reason_counts(r->r, counts, LR__REASON_COUNT, &nc);
    FUZZ_ASSERT_STATUS(st, st == LR_OK && nc == LR__REASON_COUNT);
    for (size_t i = 0; i < nc; i++) {
        by_reason += counts[i];
        if (i < 16)
            FUZZ_ASSERT(counts[i] == rs.by_reason[i]);
    }
    FUZZ_ASSERT(by_reason == rs.routes);
    FUZZ_ASSERT(lr_router_instance_count(r->r) == s_count(r, false));
    FUZZ_ASSERT(lr_router_policy(r->r) == r->policy);
    fuzz_oom_resume();
}

/* ---- decoding --------------------------------------------------------------- */

static uint32_t
dec_inst(fuzz_dp *dp)
{
    return inst_ids[fuzz_dp_next_range(dp, 0, N_IDS - 1)];
}

/* 0..7 a pool, 8 zero, 9 UINT64_MAX, 10..13 one in flight, 14..15 fresh */
static uint64_t
dec_req_id(struct run *r, fuzz_dp *dp)
{
    uint32_t c = fuzz_dp_next_range(dp, 0, 15);
    if (c < 8)
        return 1 + c;
    if (c == 8)
        return 0;
    if (c == 9)
        return UINT64_MAX;
    if (c < 14) {
        uint32_t k = fuzz_dp_next_range(dp, 0, 63);
        return r->n_rq > 0 ? r->rq[k % r->n_rq].id : 1;
    }
    return r->next_id++;
}

/* ---- instances ------------------------------------------------------------------- */

static void
op_add(struct run *r, fuzz_dp *dp)
{
    static const uint32_t classes[5] = { 0, 1, 3, 63, 64 };
    static const int32_t pcs[4] = { 1, 1, 0, 2 };
    static const uint64_t rtts[4] = { 0, FUZZ_MS, LR_LOAD_MAX_RTT_NS,
                                      LR_LOAD_MAX_RTT_NS + 1 };
    uint32_t nm = fuzz_dp_next_range(dp, 0, N_NAMES - 1);
    lr_instance_spec s;
    lr_instance_spec_init(&s);
    s.name = name_of(nm);
    s.instance_class = classes[fuzz_dp_next_range(dp, 0, 4)];
    s.prefix_caching = pcs[fuzz_dp_next_range(dp, 0, 3)];
    s.rtt_ns = rtts[fuzz_dp_next_range(dp, 0, 3)];
    /* 0: too small; 1: 0.2's size, without the role and placement */
    uint32_t sv = fuzz_dp_next_range(dp, 0, 15);
    bool small = sv == 0, v2 = sv == 1;
    if (small)
        s.struct_size = LR_INSTANCE_SPEC_SIZE_V1 - 1;
    if (v2)
        s.struct_size = LR_INSTANCE_SPEC_SIZE_V2;
    /* models: none (most), one, two, one twice, or a NULL name */
    static const char *const ms[6][2] = { { "m0", NULL }, { "m1", NULL },
                                          { "m0", "m1" }, { "m2", "m2" },
                                          { "m0", NULL }, { NULL, NULL } };
    static const uint32_t mn[6] = { 1, 1, 2, 2, 2, 1 };
    static const uint32_t mbits[6] = { 1, 2, 3, 4, 0, 0 };
    static const uint32_t slots[4] = { 0, 1, LR_ROUTER_MAX_ADAPTERS,
                                       LR_ROUTER_MAX_ADAPTERS + 1 };
    uint32_t mv = fuzz_dp_next_range(dp, 0, 9);
    bool bad_models = mv == 8 || mv == 9; /* a NULL among the names */
    if (mv >= 4) {
        s.models = ms[mv - 4];
        s.n_models = mn[mv - 4];
    }
    s.max_adapters = slots[fuzz_dp_next_range(dp, 0, 3)];
    /* a role: both, prefill, decode mostly; 3 and -1 rarely (LR_EINVAL);
     * a placement: node, rack, region 0..3 each (0: unknown) */
    static const int32_t roles[16] = { 0, 0, 0, 0, 0, 0, 1, 1,
                                       1, 1, 1, 2, 2, 2, 3, -1 };
    s.role = roles[fuzz_dp_next_range(dp, 0, 15)];
    uint32_t pl = fuzz_dp_next_range(dp, 0, 63);
    s.node = pl & 3;
    s.rack = pl >> 2 & 3;
    s.region = pl >> 4 & 3;
    int32_t role = v2 ? LR_ROLE_BOTH : s.role; /* as the router reads it */
    uint32_t free_id = NONE;
    bool exists = false;
    for (uint32_t i = 0; i < r->max_inst; i++) {
        if (r->in[i].live && r->in[i].name == nm)
            exists = true;
        if (!r->in[i].live && free_id == NONE)
            free_id = i;
    }
    int want;
    if (small)
        want = LR_EVERSION;
    else if (nm >= 8 || s.instance_class >= LR_LOAD_MAX_CLASSES ||
             s.prefix_caching > 1)
        want = LR_EINVAL;
    else if (s.rtt_ns > LR_LOAD_MAX_RTT_NS)
        want = LR_ERANGE;
    else if (bad_models)
        want = LR_EINVAL;
    else if (s.max_adapters > LR_ROUTER_MAX_ADAPTERS)
        want = LR_ERANGE;
    else if (role < LR_ROLE_BOTH || role > LR_ROLE_DECODE)
        want = LR_EINVAL;
    else if (exists)
        want = LR_EEXIST;
    else if (free_id == NONE)
        want = LR_ELIMIT;
    else
        want = LR_OK;
    uint64_t d0 = digest(r);
    uint32_t id = 12345;
    lr_status st = lr_router_add_instance(r->r, &s, &id);
    fuzz_trace("add_instance(name=%u, class=%u, pc=%d, rtt=%llu, models "
               "%u, slots %u, role %d, node %u, rack %u, region %u%s) = %s, "
               "id %u",
               nm, s.instance_class, s.prefix_caching,
               (unsigned long long)s.rtt_ns, mv, s.max_adapters, s.role, s.node,
               s.rack, s.region,
               small ? ", small struct"
               : v2  ? ", 0.2 struct"
                     : "",
               lr_status_name(st), st == LR_OK ? id : NONE);
    after(r, C_ADD, st, want, d0);
    if (st == LR_OK) {
        if (r->check)
            FUZZ_ASSERT(id == free_id);
        r->in[id] = (struct sinst){ true,
                                    false,
                                    nm,
                                    s.prefix_caching,
                                    mv >= 4 && !small ? mbits[mv - 4] : 0,
                                    role,
                                    v2 ? 0 : s.node,
                                    v2 ? 0 : s.rack,
                                    v2 ? 0 : s.region };
    }
}

static void
op_drain(struct run *r, fuzz_dp *dp)
{
    static const int32_t dv[4] = { 0, 1, 1, 2 };
    uint32_t id = dec_inst(dp);
    int32_t draining = dv[fuzz_dp_next_range(dp, 0, 3)];
    int want = draining > 1 ? LR_EINVAL : !s_live(r, id) ? LR_ENOENT : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_drain_instance(r->r, id, draining);
    fuzz_trace("drain_instance(%u, %d) = %s", id, draining, lr_status_name(st));
    after(r, C_DRAIN, st, want, d0);
    if (st == LR_OK)
        r->in[id].draining = draining == 1;
}

static void
op_remove(struct run *r, fuzz_dp *dp)
{
    uint32_t id = dec_inst(dp);
    int want = s_live(r, id) ? LR_OK : LR_ENOENT;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_remove_instance(r->r, id);
    fuzz_trace("remove_instance(%u) = %s", id, lr_status_name(st));
    after(r, C_REMOVE, st, want, d0);
    if (st != LR_OK)
        return;
    r->in[id].live = false;
    r->in[id].draining = false;
    /* its requests are dropped (their prefill legs elsewhere with them),
     * the prefill legs it held end (their requests decode elsewhere), and
     * it is no one's alternative any more (an instance added again under
     * its id is a new one) */
    for (int i = (int)r->n_rq - 1; i >= 0; i--) {
        struct sreq *q = &r->rq[i];
        if (q->inst == id) {
            s_drop(r, i);
            continue;
        }
        if (q->pinst == id)
            q->pinst = NONE;
        if (q->alt == id) {
            q->alt = NONE;
            q->alt_cached = 0;
            q->alt_cached_known = true;
        }
    }
}

/* ---- route ------------------------------------------------------------------------- */

/* A decision's prefill leg: its fields (known), or for a 0.2 decision
 * (which has none) what the load tracker shows of a route (seen; reason
 * and transfer unknown), or nothing (a 0.2 decision's dry run). */
struct pleg {
    bool known, seen;
    uint32_t inst, cached;
    int32_t reason;
    double transfer_s;
};

/* Each instance's in flight and prefill tokens (0 where not live). */
static void
load_columns(struct run *r, uint32_t *inflight, uint64_t *prefill)
{
    fuzz_oom_pause();
    for (uint32_t id = 0; id < MAX_INST; id++) {
        lr_load_snapshot s;
        lr_load_snapshot_init(&s);
        bool ok = lr_router_instance_load(r->r, id, &s) == LR_OK;
        inflight[id] = ok ? s.inflight : 0;
        prefill[id] = ok ? s.prefill_tokens : 0;
    }
    fuzz_oom_resume();
}

/* A route recorded: the prefill instance it split the request onto, if
 * any, is the one prefill instance with one more in flight, and its
 * prefill grew by the prompt less the hit expected there. */
static void
pleg_from_load(struct run *r, uint32_t prompt, const uint32_t *inflight0,
               const uint64_t *prefill0, struct pleg *pl)
{
    uint32_t inflight[MAX_INST];
    uint64_t prefill[MAX_INST];
    load_columns(r, inflight, prefill);
    for (uint32_t id = 0; id < MAX_INST; id++) {
        if (!s_prefill(r, id) || inflight[id] == inflight0[id])
            continue;
        FUZZ_ASSERT(pl->inst == NONE && inflight[id] == inflight0[id] + 1);
        FUZZ_ASSERT(prefill[id] >= prefill0[id] &&
                    prefill[id] - prefill0[id] <= prompt);
        pl->inst = id;
        pl->cached = prompt - (uint32_t)(prefill[id] - prefill0[id]);
    }
}

/* The seconds a split request's KV takes from its prefill instance p to
 * its decode instance d, the tokens d does not hold, as lr_instance_spec
 * says: one node, one rack, one region (or a placement unknown), else
 * across regions. */
static double
transfer_s(const struct run *r, uint32_t p, uint32_t d, double tokens)
{
    const struct sinst *a = &r->in[p], *b = &r->in[d];
    int key = a->node != 0 && a->node == b->node   ? LR_PARAM_KV_GBPS_NODE
              : a->rack != 0 && a->rack == b->rack ? LR_PARAM_KV_GBPS_RACK
              : a->region == 0 || b->region == 0 || a->region == b->region
                  ? LR_PARAM_KV_GBPS_REGION
                  : LR_PARAM_KV_GBPS_WAN;
    if (!(tokens > 0))
        return 0;
    return tokens * r->param[LR_PARAM_KV_BYTES_PER_TOKEN] /
           (r->param[key] * 1e9);
}

/* A hit as a row reports it: block-aligned, within the prompt and the
 * best, and 0 unless the route matched at an instance with a cache. */
static void
check_hit(const struct run *r, uint32_t n, const lr_decision *d, uint32_t id,
          uint32_t cached)
{
    FUZZ_ASSERT(cached <= n && cached % r->B == 0);
    FUZZ_ASSERT(cached <= d->best_cached_tokens);
    if (!route_matches(r) || r->in[id].pc == 0)
        FUZZ_ASSERT(cached == 0);
}

static void
check_decision(struct run *r, const lr_request *q, int model,
               const lr_decision *d, const struct pleg *pl,
               const lr_score *scores, bool want_scores)
{
    if (!r->check)
        return;
    uint32_t n = (uint32_t)q->n_tokens;
    uint32_t nd = s_decode_rows(r, model), nr = s_rows(r, model);
    FUZZ_ASSERT(s_routable(r, d->instance));
    FUZZ_ASSERT(s_serves(r, d->instance, model));
    FUZZ_ASSERT(!s_prefill(r, d->instance));
    /* the alternative is another row that decodes */
    FUZZ_ASSERT(d->alt_instance == NONE ||
                (s_routable(r, d->alt_instance) &&
                 s_serves(r, d->alt_instance, model) &&
                 !s_prefill(r, d->alt_instance) &&
                 d->alt_instance != d->instance));
    FUZZ_ASSERT(reason_ok(d->reason, r->policy));
    FUZZ_ASSERT(d->best_cached_tokens <= n &&
                d->best_cached_tokens % r->B == 0);
    check_hit(r, n, d, d->instance, d->cached_tokens);
    if (pl->known && nd < nr)
        FUZZ_ASSERT(pair_reasons_ok(r->policy, d->reason, pl->reason));
    if (!pl->seen) {
        /* nothing known of the leg */
    } else if (pl->inst != NONE) { /* split: a prefill row's instance */
        FUZZ_ASSERT(nd < nr);
        FUZZ_ASSERT(s_routable(r, pl->inst) && s_prefill(r, pl->inst));
        FUZZ_ASSERT(s_serves(r, pl->inst, model));
        check_hit(r, n, d, pl->inst, pl->cached);
        if (pl->known) {
            FUZZ_ASSERT(reason_ok(pl->reason, policy_pairs(r->policy)
                                                  ? r->policy
                                                  : prefill_policy(r)));
            FUZZ_ASSERT(pl->transfer_s ==
                        transfer_s(r, pl->inst, d->instance,
                                   (double)n - (double)d->cached_tokens));
        }
    } else {
        /* whole: a policy without a pair rule splits whenever it can */
        FUZZ_ASSERT(nd == nr || policy_pairs(r->policy));
        if (pl->known) {
            FUZZ_ASSERT(pl->cached == 0 && pl->transfer_s == 0);
            FUZZ_ASSERT(pl->reason == (nd < nr ? LR_REASON_WHOLE : -1));
        }
    }
    if (!want_scores) {
        FUZZ_ASSERT(d->n_scores == 0);
        return;
    }
    /* the rows that decode in id order, then the prefill rows in id
     * order; a fleet past LR_PARAM_NARROW_ABOVE without prefill rows may
     * have weighed only some of them (docs/router.md, "Large fleets") */
    bool narrowed =
        s_count(r, true) > (uint32_t)r->param[LR_PARAM_NARROW_ABOVE] &&
        nd == nr;
    FUZZ_ASSERT(narrowed ? d->n_scores >= 1 && d->n_scores <= nr
                         : d->n_scores == nr);
    bool listed = false, plisted = false;
    for (size_t k = 0; k < d->n_scores; k++) {
        uint32_t id = scores[k].instance;
        FUZZ_ASSERT(s_routable(r, id));
        FUZZ_ASSERT(s_serves(r, id, model));
        FUZZ_ASSERT(s_prefill(r, id) == (k >= nd));
        FUZZ_ASSERT(k == 0 || k == nd || scores[k - 1].instance < id);
        FUZZ_ASSERT(scores[k].cached_tokens <= d->best_cached_tokens);
        if (id == d->instance) {
            listed = true;
            FUZZ_ASSERT(scores[k].cached_tokens == d->cached_tokens);
        }
        if (id == pl->inst) {
            plisted = true;
            FUZZ_ASSERT(scores[k].cached_tokens == pl->cached);
        }
    }
    FUZZ_ASSERT(listed);
    FUZZ_ASSERT(plisted == (pl->inst != NONE) || !pl->seen);
}

static void
op_route(struct run *r, fuzz_dp *dp)
{
    static const uint32_t outs[4] = { 0, 17, 65535, UINT32_MAX };
    uint32_t tok[MAX_LEN], bounds[2];
    lr_score scores[MAX_INST + 1];
    uint64_t id = dec_req_id(r, dp);
    uint32_t pattern = fuzz_dp_next_range(dp, 0, FUZZ_N_PATTERNS - 1);
    uint32_t start = fuzz_dp_next_range(dp, 0, 3) * r->B;
    uint32_t len = fuzz_dp_next_range(dp, 0, MAX_LEN);
    uint32_t tweak = fuzz_dp_next_range(dp, 0, 255);
    uint64_t salt = fuzz_dp_next_range(dp, 0, 1);
    uint32_t nb = fuzz_dp_next_range(dp, 0, 2);
    for (uint32_t i = 0; i < nb; i++)
        bounds[i] = fuzz_dp_next_range(dp, 0, len + 1);
    uint32_t fl = fuzz_dp_next_range(dp, 0, 15);
    uint32_t sess = fuzz_dp_next_range(dp, 0, 3);
    uint32_t session = fuzz_dp_next_range(dp, 0, 7);
    uint32_t out = outs[fuzz_dp_next_range(dp, 0, 3)];
    if (out == 17)
        out = fuzz_dp_next_range(dp, 0, 255);
    uint32_t capv = fuzz_dp_next_range(dp, 0, 3);
    uint32_t variant = fuzz_dp_next_range(dp, 0, 15);
    /* a model (0-4 none; 5-8 m0..m3, "m3" no instance declares; 9 too
     * long) and an adapter (0-3 none; 4, 5 a0, a1; 6 "", the base model;
     * 7 too long) */
    uint32_t mv = fuzz_dp_next_range(dp, 0, 9);
    uint32_t av = fuzz_dp_next_range(dp, 0, 7);
    int model = mv >= 5 && mv <= 8 ? (int)mv - 5 : -1;
    /* multimodal inputs (0-4 none; 5 one; 6 two; 7 two, the second
     * overlapping the first), each at an offset and of a length drawn
     * anywhere (past the prompt, empty: LR_EINVAL) */
    uint32_t mmv = fuzz_dp_next_range(dp, 0, 7);
    uint32_t mo = fuzz_dp_next_range(dp, 0, MAX_LEN);
    uint32_t ml = fuzz_dp_next_range(dp, 0, 2 * r->B + 1);
    static const char *const images[2] = { "img-a", "img-b" };
    lr_mm_input mm[2];
    size_t n_mm = mmv == 5 ? 1 : mmv >= 6 ? 2 : 0;
    mm[0] = (lr_mm_input){ images[0], mo, ml };
    mm[1] = (lr_mm_input){ images[1], mmv == 7 ? mo : mo + ml + 1, 3 };
    bool bad_mm = false;
    for (size_t k = 0; k < n_mm; k++)
        bad_mm |= mm[k].length == 0 ||
                  (uint64_t)mm[k].offset + mm[k].length > len;
    bad_mm |= n_mm == 2 && mm[1].offset < mm[0].offset + mm[0].length;
    fuzz_pattern_fill(tok, len, pattern, start, tweak);

    lr_request q;
    lr_request_init(&q);
    q.id = id;
    q.tokens = variant == 0 && len > 0 ? NULL : tok;
    q.n_tokens = len;
    q.boundaries = nb ? bounds : NULL;
    q.n_boundaries = nb;
    q.tenant_salt = salt;
    q.has_session = sess < 2 ? 0 : (int32_t)sess - 1;
    q.session = session;
    q.expected_output_tokens = out;
    q.flags = (fl & 7u) | (fl & 8u ? 0x80u : 0u); /* 0x80: no such flag */
    q.now_ns = r->now;
    static const char *const adapters[3] = { "a0", "a1", "" };
    q.model = model >= 0 ? model_names[model] : mv == 9 ? name_of(9) : NULL;
    q.adapter = av >= 4 && av <= 6 ? adapters[av - 4]
                : av == 7          ? name_of(9)
                                   : NULL;
    bool long_name = mv == 9 || av == 7;
    q.mm = n_mm > 0 ? mm : NULL;
    q.n_mm = n_mm;
    if (variant == 1)
        q.struct_size = LR_REQUEST_SIZE_V1 - 1;
    lr_decision d;
    lr_decision_init(&d);
    if (variant == 2)
        d.struct_size = LR_DECISION_SIZE_V1 - 1;
    if (variant == 3) { /* 0.2's: the prefill fields past its end stay */
        d.struct_size = LR_DECISION_SIZE_V2;
        d.prefill_instance = 0x5eedu;
        d.prefill_reason = 77;
        d.prefill_cached_tokens = 0xcafeu;
        d.reserved = 0xa5a5u;
        d.transfer_s = -3.5;
    }
    static const size_t caps[4] = { 0, 1, MAX_INST + 1, MAX_INST + 1 };
    d.scores = capv == 0 || capv == 3 ? NULL : scores;
    d.scores_capacity = caps[capv];
    bool dry = q.flags & LR_ROUTE_DRY_RUN;
    bool want_scores = q.flags & LR_ROUTE_SCORES;
    uint32_t routable = s_count(r, true);

    bool bad_bounds = nb > len + 1;
    for (uint32_t i = 0; i < nb; i++)
        bad_bounds |= bounds[i] > len || (i > 0 && bounds[i] < bounds[i - 1]);
    int want;
    if (variant == 1 || variant == 2)
        want = LR_EVERSION;
    else if (q.tokens == NULL && len > 0)
        want = LR_EINVAL;
    else if (bad_bounds || (q.flags & 0x80u) || q.has_session > 1 ||
             long_name || bad_mm)
        want = LR_EINVAL;
    else if (clock_judge(r, q.now_ns, true) != LR_OK)
        want = LR_ERANGE;
    else if (routable == 0)
        want = LR_ESTATE;
    else if (want_scores && d.scores_capacity < routable)
        want = LR_EBUFSIZE;
    else if (want_scores && d.scores == NULL)
        want = LR_EINVAL;
    else if (!dry && s_find(r, id) >= 0)
        want = LR_EEXIST;
    else if (!dry && r->n_rq >= r->max_req)
        want = LR_ELIMIT;
    else if (s_rows(r, model) == 0) {
        want = LR_ENOENT; /* no instance serves the model ... */
        for (uint32_t i = 0; i < r->max_inst; i++)
            if (s_serves(r, i, model))
                want = LR_ESTATE; /* ... or only draining ones do */
    } else if (s_decode_rows(r, model) == 0)
        want = LR_ESTATE; /* only prefill instances: none decodes it */
    else
        want = LR_OK;

    fuzz_trace("route(id=%llu, pattern=%u, start=%u, len=%u, tweak=%u, "
               "salt=%llu, bounds=%u{%u,%u}, flags=%#x, session=%d/%u, "
               "out=%u, scores=%zu%s, variant=%u, model %u, adapter %u, "
               "mm %u at %u+%u, now=%llu)",
               (unsigned long long)id, pattern, start, len, tweak,
               (unsigned long long)salt, nb, nb > 0 ? bounds[0] : 0,
               nb > 1 ? bounds[1] : 0, q.flags, q.has_session, session, out,
               d.scores_capacity, d.scores ? "" : " (NULL)", variant, mv, av,
               mmv, mo, ml, (unsigned long long)r->now);
    /* A valid route expires first and keeps that on failure (documented):
     * do it here so the digest compares everything else (the model's
     * instances are looked for after it). */
    bool model_fails = want == LR_ENOENT ||
                       (want == LR_ESTATE && routable > 0);
    if (want == LR_OK || model_fails) {
        FUZZ_ASSERT(lr_router_expire(r->r, r->now) == LR_OK);
        clock_took(r, r->now);
    }
    /* a 0.2 decision does not say where the request prefills: the load
     * tracker does (its prefill instance counts one more in flight) */
    uint32_t inflight0[MAX_INST];
    uint64_t prefill0[MAX_INST];
    if (variant == 3)
        load_columns(r, inflight0, prefill0);
    uint64_t d0 = digest(r);
    lr_status st = lr_router_route(r->r, &q, &d);
    fuzz_trace("  = %s: instance %u, reason %s, cached %u, best %u, "
               "alt %u, n_scores %zu, prefill %u (%s, cached %u, %g s)",
               lr_status_name(st), d.instance,
               lr_reason_name((lr_reason)d.reason)
                   ? lr_reason_name((lr_reason)d.reason)
                   : "?",
               d.cached_tokens, d.best_cached_tokens, d.alt_instance,
               d.n_scores, d.prefill_instance,
               lr_reason_name((lr_reason)d.prefill_reason)
                   ? lr_reason_name((lr_reason)d.prefill_reason)
                   : "-",
               d.prefill_cached_tokens, d.transfer_s);
    /* the rows are gathered (and found missing) after the prompt's keys
     * are hashed, into a buffer that may grow: a dry run's */
    after(r, C_ROUTE, st,
          model_fails && st == LR_ENOMEM && oom_hit(r) ? LR_ENOMEM : want, d0);
    if (variant == 3 && r->check)
        FUZZ_ASSERT(d.prefill_instance == 0x5eedu && d.prefill_reason == 77 &&
                    d.prefill_cached_tokens == 0xcafeu &&
                    d.reserved == 0xa5a5u && d.transfer_s == -3.5);
    if (st == LR_OK)
        clock_took(r, q.now_ns);
    if (st == LR_EBUFSIZE && r->check)
        FUZZ_ASSERT(d.n_scores == routable);
    if (st != LR_OK)
        return;
    struct pleg pl = { true,
                       true,
                       d.prefill_instance,
                       d.prefill_cached_tokens,
                       d.prefill_reason,
                       d.transfer_s };
    if (variant == 3) {
        pl = (struct pleg){ false, !dry, NONE, 0, -1, 0 };
        if (!dry)
            pleg_from_load(r, len, inflight0, prefill0, &pl);
        fuzz_trace("  (a 0.2 decision: by the load, prefill %u, cached %u)",
                   pl.inst, pl.cached);
    }
    fuzz_note(&r->transcript, d.instance);
    fuzz_note(&r->transcript, d.cached_tokens);
    fuzz_note(&r->transcript, d.alt_instance);
    fuzz_note(&r->transcript, (uint64_t)d.reason);
    fuzz_note(&r->transcript, ((uint64_t)pl.inst << 32) | pl.cached);
    fuzz_note(&r->transcript, (uint64_t)(uint32_t)pl.reason);
    check_decision(r, &q, model, &d, &pl, scores, want_scores);
    if (dry) {
        r->dry_runs++;
        return;
    }
    r->routes++;
    r->prompt_tokens += len;
    r->cached_tokens += d.cached_tokens;
    struct sreq *s = &r->rq[r->n_rq++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->model = model;
    s->inst = d.instance;
    s->alt = d.alt_instance;
    s->queued = true;
    s->prompt = len;
    s->out = out ? out : (uint32_t)r->param[LR_PARAM_DEFAULT_OUTPUT_TOKENS];
    s->cached = d.cached_tokens;
    s->cached_known = true;
    s->split = pl.inst != NONE;
    s->pinst = pl.inst;
    s->pcached = pl.cached;
    if (s->alt != NONE && want_scores) {
        for (size_t k = 0; k < d.n_scores; k++)
            if (scores[k].instance == s->alt) {
                s->alt_cached = scores[k].cached_tokens;
                s->alt_cached_known = true;
            }
    }
}

/* ---- policy and parameters ------------------------------------------------------- */

static void
op_policy(struct run *r, fuzz_dp *dp)
{
    uint32_t c = fuzz_dp_next_range(dp, 0, LR__POLICY_COUNT);
    /* every policy; LR__POLICY_COUNT: out of range */
    int32_t p = (int32_t)c;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_set_policy(r->r, (lr_policy)p);
    fuzz_trace("set_policy(%d) = %s", p, lr_status_name(st));
    after(r, C_POLICY, st, p < LR__POLICY_COUNT ? LR_OK : LR_EINVAL, d0);
    if (st == LR_OK)
        r->policy = p;
}

/* Whole-number keys, as the bounds say (a hand-kept list missed
 * adaptive's keys: regress-adaptive-calibrate-is-an-integer). */
static bool
integer_param(uint32_t key)
{
    lr_bounds b = lr_param_bounds((int32_t)key);
    return b.status == LR_OK && (b.flags & LR_BOUNDS_INTEGER) != 0;
}

static void
op_set_param(struct run *r, fuzz_dp *dp)
{
    uint32_t kc = fuzz_dp_next_range(dp, 0, LR__PARAM_COUNT + 1);
    uint32_t key = kc < LR__PARAM_COUNT    ? kc
                   : kc == LR__PARAM_COUNT ? LR__PARAM_COUNT
                                           : 1000;
    uint32_t vc = fuzz_dp_next_range(dp, 0, 11);
    uint32_t frac = fuzz_dp_next_range(dp, 0, 255);
    lr_bounds b = lr_param_bounds((lr_param)key);
    double lo = b.status == LR_OK ? b.lo : 0, hi = b.status == LR_OK ? b.hi : 1;
    double def = b.status == LR_OK ? b.def : 0;
    double v;
    switch (vc) {
    case 0:
        v = lo;
        break;
    case 1:
        v = hi;
        break;
    case 2:
        v = def;
        break;
    case 3:
        v = lo - (lo != 0 ? fabs(lo) * 1e-9 : 1e-9);
        break;
    case 4:
        v = hi + (hi != 0 ? fabs(hi) * 1e-9 : 1e-9);
        break;
    case 5:
        v = NAN;
        break;
    case 6:
        v = INFINITY;
        break;
    case 7:
        v = -INFINITY;
        break;
    case 8:
        v = -0.0;
        break;
    case 9:
        v = lo + 0.5; /* a fraction for the integer keys */
        break;
    case 10: /* a small integer in range */
        v = lo + (double)(frac % 64);
        if (v > hi)
            v = hi;
        break;
    default:
        v = lo + (hi - lo) * (double)frac / 255.0;
        break;
    }
    /* keep the DualMap window (window x key blocks entries, walked by
     * lr__router_verify and the digest around every call) small enough
     * to stay fast */
    if (key == LR_PARAM_DUALMAP_WINDOW && v >= lo && v <= hi &&
        v * r->param[LR_PARAM_DUALMAP_MAX_KEY_BLOCKS] > MAX_WINDOW)
        v = floor(MAX_WINDOW / r->param[LR_PARAM_DUALMAP_MAX_KEY_BLOCKS]);
    if (key == LR_PARAM_DUALMAP_MAX_KEY_BLOCKS && v >= lo && v <= hi &&
        v * r->param[LR_PARAM_DUALMAP_WINDOW] > MAX_WINDOW)
        v = floor(MAX_WINDOW / r->param[LR_PARAM_DUALMAP_WINDOW]);
    int want;
    if (isnan(v))
        want = LR_EINVAL;
    else if (key >= LR__PARAM_COUNT)
        want = LR_ENOTSUP;
    else if (!(v >= lo && v <= hi))
        want = LR_ERANGE;
    else if (integer_param(key) && v != floor(v))
        want = LR_EINVAL;
    else if (key == LR_PARAM_PD_PREFILL_POLICY && v >= 0 &&
             prefill_policy_refused((int32_t)v))
        want = LR_EINVAL;
    else
        want = LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_set_param(r->r, (lr_param)key, v);
    fuzz_trace("set_param(%u, %.17g) = %s", key, v, lr_status_name(st));
    after(r, C_SET_PARAM, st, want, d0);
    if (st == LR_OK)
        r->param[key] = v;
    /* the value reads back (the GORGO weights and step are tuned) */
    if (st == LR_OK && r->check && key != LR_PARAM_GORGO_W_RTT &&
        key != LR_PARAM_GORGO_W_QUEUE && key != LR_PARAM_GORGO_SIGMA) {
        double got = -1;
        FUZZ_ASSERT(lr_router_get_param(r->r, (lr_param)key, &got) == LR_OK);
        FUZZ_ASSERT(got == v);
    }
}

/* ---- telemetry ------------------------------------------------------------------------ */

static void
op_set_stats(struct run *r, fuzz_dp *dp)
{
    static const uint32_t counts[4] = { 0, 3, 1000, UINT32_MAX };
    static const double kvs[8] = { 0,    0.5,       1,   -0.0,
                                   -0.1, 1.0000001, NAN, INFINITY };
    uint32_t id = dec_inst(dp);
    lr_engine_stats s;
    lr_engine_stats_init(&s);
    s.running = counts[fuzz_dp_next_range(dp, 0, 3)];
    s.waiting = counts[fuzz_dp_next_range(dp, 0, 3)];
    s.kv_use = kvs[fuzz_dp_next_range(dp, 0, 7)];
    uint32_t tc = fuzz_dp_next_range(dp, 0, 7);
    /* 5-7: a wall clock among monotonic ones, past the skew, past the
     * latest time the router takes */
    s.scraped_ns = tc == 0   ? 0
                   : tc == 1 ? r->now
                   : tc == 2 ? r->now - FUZZ_SEC
                   : tc == 3 ? r->now + FUZZ_SEC
                   : tc == 4 ? UINT64_MAX
                   : tc == 5 ? r->now + 1700000000ull * FUZZ_SEC
                   : tc == 6 ? r->now + 61 * FUZZ_SEC
                             : LR_ROUTER_MAX_TIME_NS + 1;
    bool small = fuzz_dp_next_range(dp, 0, 15) == 0;
    if (small)
        s.struct_size = LR_ENGINE_STATS_SIZE_V1 - 1;
    int want = small                                     ? LR_EVERSION
               : clock_judge(r, s.scraped_ns, true) != 0 ? LR_ERANGE
               : !(s.kv_use >= 0.0 && s.kv_use <= 1.0)   ? LR_EINVAL
               : !s_live(r, id)                          ? LR_ENOENT
                                                         : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_set_stats(r->r, id, &s);
    fuzz_trace("set_stats(%u, running=%u, waiting=%u, kv_use=%g, "
               "scraped=%llu%s) = %s",
               id, s.running, s.waiting, s.kv_use,
               (unsigned long long)s.scraped_ns, small ? ", small struct" : "",
               lr_status_name(st));
    after(r, C_SET_STATS, st, want, d0);
    if (st == LR_OK)
        clock_took(r, s.scraped_ns);
}

static void
op_rtt(struct run *r, fuzz_dp *dp)
{
    static const uint64_t rtts[6] = {
        0, 1, FUZZ_MS, LR_LOAD_MAX_RTT_NS, LR_LOAD_MAX_RTT_NS + 1, UINT64_MAX
    };
    uint32_t id = dec_inst(dp);
    uint64_t rtt = rtts[fuzz_dp_next_range(dp, 0, 5)];
    int want = rtt > LR_LOAD_MAX_RTT_NS ? LR_ERANGE
               : !s_live(r, id)         ? LR_ENOENT
                                        : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_observe_rtt(r->r, id, rtt);
    fuzz_trace("observe_rtt(%u, %llu) = %s", id, (unsigned long long)rtt,
               lr_status_name(st));
    after(r, C_RTT, st, want, d0);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void
op_event(struct run *r, fuzz_dp *dp, int kind)
{
    uint64_t id = dec_req_id(r, dp);
    uint32_t out = fuzz_dp_next_range(dp, 0, 255);
    int i = s_find(r, id);
    int want = clock_judge(r, r->now, true) != LR_OK ? LR_ERANGE
               : i >= 0                              ? LR_OK
                                                     : LR_ENOENT;
    uint64_t d0 = digest(r);
    lr_status st;
    if (kind == 0)
        st = lr_router_first_token(r->r, id, r->now);
    else if (kind == 1)
        st = lr_router_complete(r->r, id, out, r->now);
    else
        st = lr_router_fail(r->r, id, r->now);
    fuzz_trace("%s(%llu) = %s",
               kind == 0   ? "first_token"
               : kind == 1 ? "complete"
                           : "fail",
               (unsigned long long)id, lr_status_name(st));
    after(r, C_EVENT, st, want, d0);
    if (st != LR_OK)
        return;
    clock_took(r, r->now);
    if (kind == 0) {
        /* a first token ends the prefill leg too (a repeat: a no-op) */
        if (r->rq[i].queued)
            r->rq[i].pinst = NONE;
        r->rq[i].queued = false;
    } else {
        s_drop(r, i);
    }
}

/* The prefill leg of a request ended (its KV moved): the prefill instance
 * drops it; a request with no open leg: a no-op. */
static void
op_prefill_done(struct run *r, fuzz_dp *dp)
{
    uint64_t id = dec_req_id(r, dp);
    int i = s_find(r, id);
    int want = clock_judge(r, r->now, true) != LR_OK ? LR_ERANGE
               : i >= 0                              ? LR_OK
                                                     : LR_ENOENT;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_prefill_done(r->r, id, r->now);
    fuzz_trace("prefill_done(%llu) = %s", (unsigned long long)id,
               lr_status_name(st));
    after(r, C_PREFILL_DONE, st, want, d0);
    if (st != LR_OK)
        return;
    clock_took(r, r->now);
    r->rq[i].pinst = NONE;
}

/* An engine's report of the prompt tokens it reused: up to a little
 * past the prompt, for a request in flight or not. */
static void
op_observe(struct run *r, fuzz_dp *dp)
{
    uint64_t id = dec_req_id(r, dp);
    int i = s_find(r, id);
    uint32_t prompt = i >= 0 ? r->rq[i].prompt : 64;
    uint32_t seen = fuzz_dp_next_range(dp, 0, prompt + 2);
    int want = clock_judge(r, r->now, true) != LR_OK ? LR_ERANGE
               : i < 0                               ? LR_ENOENT
               : seen > prompt                       ? LR_EINVAL
                                                     : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_observe_cached(r->r, id, seen, r->now);
    fuzz_trace("observe_cached(%llu, %u) = %s", (unsigned long long)id, seen,
               lr_status_name(st));
    after(r, C_OBSERVE, st, want, d0);
    if (st == LR_OK)
        clock_took(r, r->now);
}

/* The shadow of a move the router accepted. */
static void
s_move(struct run *r, int i, uint32_t to)
{
    struct sreq *q = &r->rq[i];
    uint32_t from = q->inst, cached = q->cached;
    bool known = q->cached_known;
    if (to == q->alt) {
        q->cached = q->alt_cached;
        q->cached_known = q->alt_cached_known;
    } else {
        q->cached = 0;
        q->cached_known = true;
    }
    q->inst = to;
    q->alt = from;
    q->alt_cached = cached;
    q->alt_cached_known = known;
}

static void
do_move(struct run *r, uint64_t id, uint32_t to)
{
    int i = s_find(r, id);
    /* onto a prefill instance, which decodes nothing: ESTATE; onto where
     * it is, or onto its open prefill leg's instance: EINVAL */
    int want = !s_live(r, to)                                ? LR_ENOENT
               : r->in[to].draining || s_prefill(r, to)      ? LR_ESTATE
               : i < 0                                       ? LR_ENOENT
               : !r->rq[i].queued                            ? LR_ESTATE
               : !s_serves(r, to, r->rq[i].model)            ? LR_ESTATE
               : r->rq[i].inst == to || r->rq[i].pinst == to ? LR_EINVAL
                                                             : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_move(r->r, id, to);
    fuzz_trace("move(%llu, %u) = %s", (unsigned long long)id, to,
               lr_status_name(st));
    after(r, C_MOVE, st, want, d0);
    if (st == LR_OK)
        s_move(r, i, to);
}

static void
op_plan(struct run *r, fuzz_dp *dp)
{
    lr_move moves[9];
    uint32_t cap = fuzz_dp_next_range(dp, 0, 9);
    uint32_t mask = fuzz_dp_next_range(dp, 0, 255);
    /* 9: NULL with a capacity */
    lr_move *buf = cap == 9 ? NULL : moves;
    memset(moves, 0xa5, sizeof moves);
    size_t n = 777;
    int want = cap == 9                                 ? LR_EINVAL
               : clock_judge(r, r->now, false) != LR_OK ? LR_ERANGE
                                                        : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st =
        lr_router_rebalance_plan(r->r, r->now, buf, cap, sizeof moves[0], &n);
    fuzz_trace("rebalance_plan(capacity=%u%s) = %s, %zu moves", cap,
               buf ? "" : ", NULL", lr_status_name(st), st == LR_OK ? n : 0);
    after(r, C_PLAN, st, want, d0);
    if (r->check && st == LR_ENOMEM)
        FUZZ_ASSERT(n == 0);
    if (st != LR_OK)
        return;
    fuzz_note(&r->transcript, n);
    if (r->check) {
        FUZZ_ASSERT(digest(r) == d0); /* a plan changes nothing */
        FUZZ_ASSERT(n <= cap);
    }
    for (size_t k = 0; k < n && k < 9; k++) {
        const lr_move *m = &moves[k];
        fuzz_trace("  move %llu: %u -> %u, benefit %g s",
                   (unsigned long long)m->request_id, m->from, m->to,
                   m->benefit_s);
        fuzz_note(&r->transcript, m->request_id);
        fuzz_note(&r->transcript, ((uint64_t)m->from << 32) | m->to);
        if (!r->check)
            continue;
        int i = s_find(r, m->request_id);
        FUZZ_ASSERT(i >= 0);
        FUZZ_ASSERT(r->rq[i].queued);
        FUZZ_ASSERT(r->rq[i].inst == m->from);
        FUZZ_ASSERT(r->rq[i].alt == m->to);
        FUZZ_ASSERT(r->rq[i].pinst != m->to); /* a move the router takes */
        FUZZ_ASSERT(s_routable(r, m->to) && m->to != m->from);
        FUZZ_ASSERT(m->benefit_s > 0 && isfinite(m->benefit_s));
        for (size_t j = 0; j < k; j++)
            FUZZ_ASSERT(moves[j].request_id != m->request_id);
    }
    for (size_t k = 0; k < n && k < 8; k++)
        if (mask & (1u << k))
            do_move(r, moves[k].request_id, moves[k].to);
}

/* ---- KV events and deltas ---------------------------------------------------------- */

static void
op_kv(struct run *r, fuzz_dp *dp)
{
    uint32_t kind = fuzz_dp_next_range(dp, 0, 3);
    uint32_t id = dec_inst(dp);
    uint64_t hashes[4];
    uint32_t nbk = fuzz_dp_next_range(dp, 0, 4);
    for (uint32_t i = 0; i < nbk; i++)
        hashes[i] = 0x1000 + fuzz_dp_next_range(dp, 0, 15);
    uint64_t d0 = digest(r);
    lr_status st;
    if (kind <= 1) {
        uint32_t tok[4 * 32];
        uint32_t mult = fuzz_dp_next_range(dp, 0, 3);
        uint32_t bs = mult == 0 ? r->B + 1 : r->B * mult; /* B+1: ENOTSUP */
        if (bs > 32)
            bs = 32;
        uint32_t pattern = fuzz_dp_next_range(dp, 0, FUZZ_N_PATTERNS - 1);
        uint32_t start = fuzz_dp_next_range(dp, 0, 3) * r->B;
        bool parent = fuzz_dp_next_bool(dp);
        uint64_t ph = 0x1000 + fuzz_dp_next_range(dp, 0, 15);
        bool wrong_count = fuzz_dp_next_range(dp, 0, 7) == 0;
        fuzz_pattern_fill(tok, (size_t)nbk * bs, pattern, start, UINT32_MAX);
        lr_kv_stored ev;
        lr_kv_stored_init(&ev);
        ev.block_hashes = nbk ? hashes : NULL;
        ev.n_blocks = nbk;
        ev.parent_hash = ph;
        ev.has_parent = parent;
        ev.block_size = bs;
        ev.token_ids = nbk ? tok : NULL;
        ev.n_tokens = (size_t)nbk * bs + (wrong_count ? 1 : 0);
        bool late = s_live(r, id) && clock_judge(r, r->now, true) != LR_OK;
        st = lr_router_kv_stored(r->r, id, &ev, r->now);
        fuzz_trace("kv_stored(%u, blocks=%u{%#llx..}, bs=%u, pattern=%u, "
                   "start=%u, parent=%d:%#llx%s) = %s",
                   id, nbk, nbk ? (unsigned long long)hashes[0] : 0ull, bs,
                   pattern, start, parent, (unsigned long long)ph,
                   wrong_count ? ", wrong count" : "", lr_status_name(st));
        after(r, C_KV_STORED, st,
              !s_live(r, id) ? LR_ENOENT
              : late         ? LR_ERANGE
                             : -1,
              d0);
        if (st == LR_OK)
            clock_took(r, r->now);
    } else if (kind == 2) {
        size_t resolved = 999;
        st =
            lr_router_kv_removed(r->r, id, nbk ? hashes : NULL, nbk, &resolved);
        fuzz_trace("kv_removed(%u, %u hashes) = %s, resolved %zu", id, nbk,
                   lr_status_name(st), st == LR_OK ? resolved : 0);
        after(r, C_KV_REMOVED, st, s_live(r, id) ? -1 : LR_ENOENT, d0);
        if (st == LR_OK && r->check)
            FUZZ_ASSERT(resolved <= nbk);
    } else {
        st = lr_router_kv_cleared(r->r, id);
        fuzz_trace("kv_cleared(%u) = %s", id, lr_status_name(st));
        after(r, C_KV_CLEARED, st, s_live(r, id) ? -1 : LR_ENOENT, d0);
    }
}

static bool
varint_skip(const uint8_t **p, const uint8_t *end)
{
    for (int i = 0; i < 5 && *p < end; i++)
        if ((*(*p)++ & 0x80) == 0)
            return true;
    return false;
}

/* Rewrite every route's instance id of a well-formed delta to `to`. */
static bool
retarget(uint8_t *b, size_t n, uint32_t to)
{
    if (n < FUZZ_DELTA_HEADER + 8)
        return false;
    uint32_t nn = lr__get_u32(b + 12), nr = lr__get_u32(b + 16);
    const uint8_t *p = b + FUZZ_DELTA_HEADER, *end = b + n - 8;
    for (uint32_t i = 0; i < nn; i++) {
        if (end - p < 9)
            return false;
        p += 8;
        if (!varint_skip(&p, end))
            return false;
    }
    for (uint32_t i = 0; i < nr; i++) {
        if (end - p < 5)
            return false;
        lr__put_u32((uint8_t *)p, to);
        p += 4;
        if (!varint_skip(&p, end) || !varint_skip(&p, end)) /* node, age */
            return false;
    }
    fuzz_delta_reseal(b, n);
    return true;
}

static void
import(struct run *r, const uint8_t *buf, size_t n, const char *what)
{
    int want = clock_judge(r, r->now, true) != LR_OK ? LR_ERANGE : -1;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_import_delta(r->r, buf, n, r->now);
    fuzz_trace("import_delta(%s, %zu bytes) = %s", what, n, lr_status_name(st));
    after(r, C_IMPORT, st, want, d0);
    if (st == LR_OK)
        clock_took(r, r->now);
}

static void
op_delta(struct run *r, fuzz_dp *dp)
{
    uint32_t kind = fuzz_dp_next_range(dp, 0, 3);
    if (kind == 0 || r->blob == NULL) {
        uint32_t sv = fuzz_dp_next_range(dp, 0, 2);
        uint64_t cur = lr_router_mark(r->r);
        uint64_t since = sv == 0 ? 0 : sv == 1 ? r->last_mark : cur + 1;
        uint64_t d0 = digest(r);
        lr_blob *b = NULL;
        uint64_t m = 0;
        lr_status st = lr_router_export_delta(r->r, since, &b, &m);
        fuzz_trace("export_delta(since=%llu [mark %llu]) = %s, %zu bytes",
                   (unsigned long long)since, (unsigned long long)cur,
                   lr_status_name(st), b ? lr_blob_size(b) : 0);
        after(r, C_EXPORT, st, since > cur ? LR_EINVAL : LR_OK, d0);
        if (r->check) {
            FUZZ_ASSERT(digest(r) == d0); /* export changes nothing */
            FUZZ_ASSERT((st == LR_OK) == (b != NULL));
        }
        if (st != LR_OK)
            return;
        r->last_mark = m;
        free(r->blob);
        r->blob_n = lr_blob_size(b);
        r->blob = malloc(r->blob_n ? r->blob_n : 1);
        FUZZ_ASSERT(r->blob != NULL);
        memcpy(r->blob, lr_blob_data(b), r->blob_n);
        r->transcript = fuzz_fnv(r->transcript, r->blob, r->blob_n);
        lr_blob_destroy(b);
        return;
    }
    if (kind == 1) {
        import(r, r->blob, r->blob_n, "own export");
    } else if (kind == 2) {
        uint32_t to = inst_ids[fuzz_dp_next_range(dp, 0, N_IDS - 2)];
        uint8_t *c = malloc(r->blob_n);
        FUZZ_ASSERT(c != NULL);
        memcpy(c, r->blob, r->blob_n);
        if (retarget(c, r->blob_n, to)) {
            fuzz_trace("  (own export, every route now names %u)", to);
            import(r, c, r->blob_n, "retargeted");
        }
        free(c);
    } else {
        uint32_t want = fuzz_dp_next_range(dp, 0, 255);
        bool fix = fuzz_dp_next_bool(dp);
        size_t got = 0;
        const uint8_t *raw = fuzz_dp_bytes(dp, want, &got);
        uint8_t *c = malloc(got ? got : 1);
        FUZZ_ASSERT(c != NULL);
        if (got)
            memcpy(c, raw, got);
        if (fix)
            fuzz_delta_reseal(c, got);
        import(r, c, got, fix ? "raw bytes, checksum fixed" : "raw bytes");
        free(c);
    }
}

/* ---- queries ----------------------------------------------------------------------------- */

static void
op_query(struct run *r, fuzz_dp *dp)
{
    uint32_t id = dec_inst(dp);
    uint32_t sz = fuzz_dp_next_range(dp, 0, 3);
    uint32_t nm = fuzz_dp_next_range(dp, 0, N_NAMES - 1);
    uint32_t key = fuzz_dp_next_range(dp, 0, LR__PARAM_COUNT);
    uint32_t cls = fuzz_dp_next_range(dp, 0, 4);
    uint32_t rate = fuzz_dp_next_range(dp, 0, 7);
    uint64_t d0 = digest(r);
    /* get_stats with a struct too small, v1, current, larger */
    struct {
        lr_router_stats s;
        uint8_t tail[16];
    } big;
    memset(&big, 0x5a, sizeof big);
    static const size_t ssz[4] = { LR_ROUTER_STATS_SIZE_V1 - 1,
                                   LR_ROUTER_STATS_SIZE_V1,
                                   sizeof(lr_router_stats),
                                   sizeof(lr_router_stats) + 16 };
    big.s.struct_size = ssz[sz];
    lr_status st = lr_router_get_stats(r->r, &big.s);
    after(r, C_STATS, st, sz == 0 ? LR_EVERSION : LR_OK, d0);
    if (st == LR_OK && r->check) {
        FUZZ_ASSERT(big.s.inflight == r->n_rq);
        FUZZ_ASSERT(big.tail[0] == 0x5a && big.tail[15] == 0x5a);
    }
    /* instance_load with the same sizes */
    struct {
        lr_load_snapshot s;
        uint8_t tail[16];
    } lb;
    memset(&lb, 0x5a, sizeof lb);
    static const size_t lsz[4] = { LR_LOAD_SNAPSHOT_SIZE_V1 - 1,
                                   LR_LOAD_SNAPSHOT_SIZE_V1,
                                   sizeof(lr_load_snapshot),
                                   sizeof(lr_load_snapshot) + 16 };
    lb.s.struct_size = lsz[sz];
    st = lr_router_instance_load(r->r, id, &lb.s);
    after(r, C_LOAD, st,
          sz == 0         ? LR_EVERSION
          : s_live(r, id) ? LR_OK
                          : LR_ENOENT,
          d0);
    if (st == LR_OK)
        fuzz_note(&r->transcript, lb.s.inflight);
    /* find_instance */
    uint32_t fid = 999;
    st = lr_router_find_instance(r->r, name_of(nm), &fid);
    int want = nm >= 8 ? LR_EINVAL : LR_ENOENT;
    uint32_t want_id = NONE;
    for (uint32_t i = 0; nm < 8 && i < r->max_inst; i++)
        if (r->in[i].live && r->in[i].name == nm) {
            want = LR_OK;
            want_id = i;
        }
    after(r, C_FIND, st, want, d0);
    if (st == LR_OK && r->check)
        FUZZ_ASSERT(fid == want_id);
    /* get_param and bounds */
    double v = -1;
    st = lr_router_get_param(r->r, (lr_param)key, &v);
    after(r, C_GET_PARAM, st, key < LR__PARAM_COUNT ? LR_OK : LR_ENOTSUP, d0);
    lr_bounds b = lr_param_bounds((lr_param)key);
    if (r->check) {
        FUZZ_ASSERT((b.status == LR_OK) == (key < LR__PARAM_COUNT));
        if (st == LR_OK && key != LR_PARAM_GORGO_W_RTT &&
            key != LR_PARAM_GORGO_W_QUEUE && key != LR_PARAM_GORGO_SIGMA)
            FUZZ_ASSERT(v == r->param[key]);
        if (b.status == LR_OK)
            FUZZ_ASSERT(b.lo <= b.def && b.def <= b.hi);
        FUZZ_ASSERT(digest(r) == d0); /* queries change nothing */
    }
    /* set_class */
    static const uint32_t classes[5] = { 0, 1, 3, 63, 64 };
    static const double rates[8] = {
        NAN, 0.5, 1, 8000, 1e9, 2e9, INFINITY, -1
    };
    lr_class_spec cs;
    lr_class_spec_init(&cs);
    cs.prefill_tokens_per_s = rates[rate];
    uint32_t c = classes[cls];
    want = c >= LR_LOAD_MAX_CLASSES                    ? LR_EINVAL
           : isnan(rates[rate])                        ? LR_EINVAL
           : !(rates[rate] >= 1 && rates[rate] <= 1e9) ? LR_ERANGE
                                                       : LR_OK;
    st = lr_router_set_class(r->r, c, &cs);
    fuzz_trace("queries: stats size %zu, load(%u), find(%u) = %u, "
               "get_param(%u) = %g; set_class(%u, %g) = %s",
               ssz[sz], id, nm, fid, key, v, c, rates[rate],
               lr_status_name(st));
    after(r, C_CLASS, st, want, d0);
}

/* ---- Lodestar's learner ------------------------------------------------------------------------ */

/* A learner step on the fuzzing thread (a host's background thread in
 * real use): LR_ESTATE before lodestar was ever chosen; training changes
 * the learner only, never the routing state the model checks. */
static void
op_learn(struct run *r, fuzz_dp *dp)
{
    uint32_t flags = fuzz_dp_next_range(dp, 0, 2);
    int32_t tr = -1;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_learn_step(r->r, flags, &tr);
    fuzz_trace("learn_step(%u) = %s, trained %d", flags, lr_status_name(st),
               tr);
    after(r, C_LEARN, st, flags > 1 ? LR_EINVAL : -1, d0);
    FUZZ_ASSERT(st != LR_OK || tr == 0 || tr == 1);
    if (st == LR_OK && r->check) {
        float x[24 * LR_LODESTAR_FEATURES], y[24];
        size_t n = 0;
        st =
            lr_router_learner_samples(r->r, x, LR_LODESTAR_FEATURES, y, 24, &n);
        FUZZ_ASSERT_STATUS(st, st == LR_OK && n <= 24);
        for (size_t i = 0; i < n; i++)
            FUZZ_ASSERT(y[i] <= 0 && y[i] >= -15);
    }
}

/* ---- the run -------------------------------------------------------------------------------- */

/* ---- adapters ---------------------------------------------------------------------- */

/* An engine's LoRA report: names valid, empty, NULL or too long, too
 * many of them, slots out of range, a small struct, a scrape the clock
 * refuses. */
static void
op_set_adapters(struct run *r, fuzz_dp *dp)
{
    static const char *const pool6[6] = { "a0", "a1", "a2", "a3", "", NULL };
    static const uint32_t slots[4] = { 0, 2, LR_ROUTER_MAX_ADAPTERS,
                                       LR_ROUTER_MAX_ADAPTERS + 1 };
    static const uint64_t dts[4] = { 0, FUZZ_MS, 20 * FUZZ_SEC,
                                     LR_ROUTER_MAX_TIME_NS };
    const char *names[LR_ROUTER_MAX_ADAPTERS + 1];
    uint32_t id = dec_inst(dp);
    uint32_t nr = fuzz_dp_next_range(dp, 0, 3);
    uint32_t nw = fuzz_dp_next_range(dp, 0, 2);
    bool bad = false;
    for (uint32_t k = 0; k < nr + nw; k++) {
        uint32_t c = fuzz_dp_next_range(dp, 0, 7);
        names[k] = c < 6 ? pool6[c] : c == 6 ? "a0" : name_of(9);
        bad |= c == 4 || c == 5 || c == 7;
    }
    uint32_t variant = fuzz_dp_next_range(dp, 0, 15);
    lr_adapter_stats s;
    lr_adapter_stats_init(&s);
    s.running = names;
    s.n_running = nr;
    s.waiting = names + nr;
    s.n_waiting = nw;
    s.max_adapters = slots[fuzz_dp_next_range(dp, 0, 3)];
    s.scraped_ns = r->now + dts[fuzz_dp_next_range(dp, 0, 3)];
    if (variant == 0)
        s.struct_size = LR_ADAPTER_STATS_SIZE_V1 - 1;
    if (variant == 1) { /* too many: every slot and one more */
        for (uint32_t k = 0; k <= LR_ROUTER_MAX_ADAPTERS; k++)
            names[k] = "a0";
        s.n_running = LR_ROUTER_MAX_ADAPTERS + 1;
        s.n_waiting = 0;
    }
    if (variant == 2 && nr > 0) /* NULL names with a count */
        s.running = NULL;
    int want = variant == 0 ? LR_EVERSION
               : variant == 1 ? LR_EINVAL
               : s.max_adapters > LR_ROUTER_MAX_ADAPTERS ? LR_ERANGE
               : bad || s.running == NULL ? LR_EINVAL
               : !s_live(r, id) ? LR_ENOENT
               : clock_judge(r, s.scraped_ns, true) != LR_OK ? LR_ERANGE
                                                             : LR_OK;
    uint64_t d0 = digest(r);
    lr_status st = lr_router_set_adapters(r->r, id, &s);
    fuzz_trace("set_adapters(%u, running %zu, waiting %zu, slots %u, "
               "variant %u) = %s",
               id, s.n_running, s.n_waiting, s.max_adapters, variant,
               lr_status_name(st));
    after(r, C_SET_ADAPTERS, st, want, d0);
    if (st == LR_OK)
        clock_took(r, s.scraped_ns);
    if (st == LR_OK && r->check) {
        uint64_t h[LR_ROUTER_MAX_ADAPTERS];
        size_t n = 0;
        st = lr_router_adapters(r->r, id, h, LR_ROUTER_MAX_ADAPTERS, &n);
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        FUZZ_ASSERT(n >= (s.n_running + s.n_waiting > 0 ? 1u : 0u));
        for (size_t k = 0; k < n; k++)
            FUZZ_ASSERT(h[k] != 0);
    }
}

static void
run_once(struct run *r, const uint8_t *data, size_t size)
{
    static const uint32_t Bs[4] = { 1, 2, 4, 16 };
    static const uint64_t ttls[4] = { 0, FUZZ_SEC, 60 * FUZZ_SEC, UINT64_MAX };
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    lr_router_options o;
    lr_router_options_init(&o);
    o.seed = fuzz_dp_next_range(&dp, 0, 255);
    r->max_inst = fuzz_dp_next_range(&dp, 1, MAX_INST);
    r->max_req = fuzz_dp_next_range(&dp, 1, MAX_REQ);
    r->B = Bs[fuzz_dp_next_range(&dp, 0, 3)];
    o.max_instances = r->max_inst;
    o.max_requests = r->max_req;
    o.block_tokens = r->B;
    o.index_capacity_blocks = fuzz_dp_next_range(&dp, 8, 512);
    o.index_ttl_ns = ttls[fuzz_dp_next_range(&dp, 0, 3)];
    /* every policy but lodestar (set_policy reaches it) */
    o.policy = (int32_t)fuzz_dp_next_range(&dp, 0, LR__POLICY_COUNT - 2);
    if (o.policy >= LR_POLICY_LODESTAR)
        o.policy++;
    /* a tiny learner, so that rounds happen within one input */
    lr_mlp_options mo;
    lr_mlp_options_init(&mo);
    mo.hidden_layers = 1;
    mo.width = 4;
    mo.batch_size = 8;
    lr_learner_options lo;
    lr_learner_options_init(&lo);
    lo.fifo_capacity = 16;
    lo.replay_capacity = 8;
    lo.pending_capacity = 16;
    lo.min_samples = 3;
    lo.retrain_every = 3;
    lo.epochs = 1;
    lo.mlp = &mo;
    o.learner = &lo;
    o.ring_vnodes = fuzz_dp_next_range(&dp, 1, 64);
    fuzz_oom_decode(&dp, 256, &r->oom.fail_at, &r->oom.sticky);
    uint32_t mask = fuzz_dp_next_range(&dp, 0, 255);
    /* the initial instances' roles: 0, 1 all both; 2 the odd ones prefill;
     * 3 the odd ones prefill, the even ones decode, placed */
    uint32_t fleet = fuzz_dp_next_range(&dp, 0, 3);
    lr_allocator alloc;
    fuzz_oom_allocator(&r->oom, &alloc);
    o.allocator = &alloc;
    r->policy = o.policy;
    for (int k = 0; k < LR__PARAM_COUNT; k++)
        r->param[k] = lr_param_bounds(k).def;
    r->now = 1000 * FUZZ_SEC;
    r->next_id = 1000;
    fuzz_trace("router(seed=%llu, max_instances=%u, max_requests=%u, B=%u, "
               "capacity=%llu, ttl=%llu, policy=%s, vnodes=%u); allocation "
               "%llu fails%s; names %#x, fleet %u",
               (unsigned long long)o.seed, r->max_inst, r->max_req, r->B,
               (unsigned long long)o.index_capacity_blocks,
               (unsigned long long)o.index_ttl_ns,
               lr_policy_name((lr_policy)o.policy), o.ring_vnodes,
               (unsigned long long)r->oom.fail_at,
               r->oom.sticky ? " and every one after" : "", mask, fleet);
    lr_status st = lr_router_create(&o, &r->r);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    st = lr_router_set_param(r->r, LR_PARAM_DUALMAP_WINDOW, START_WINDOW);
    FUZZ_ASSERT_STATUS(st, st == LR_OK);
    r->param[LR_PARAM_DUALMAP_WINDOW] = START_WINDOW;
    for (uint32_t k = 0; k < 8; k++) {
        if (!(mask & (1u << k)))
            continue;
        lr_instance_spec s;
        lr_instance_spec_init(&s);
        s.name = name_of(k);
        s.instance_class = k % 3;
        s.prefix_caching = k != 7;
        s.rtt_ns = (k + 1) * FUZZ_MS;
        if (fleet >= 2)
            s.role = k % 2        ? LR_ROLE_PREFILL
                     : fleet == 3 ? LR_ROLE_DECODE
                                  : LR_ROLE_BOTH;
        if (fleet == 3) {
            s.node = k / 2 + 1;
            s.rack = k / 4 + 1;
            s.region = 1;
        }
        uint32_t id;
        st = lr_router_add_instance(r->r, &s, &id);
        FUZZ_ASSERT_STATUS(st, st == LR_OK || st == LR_ELIMIT);
        if (st == LR_OK)
            r->in[id] =
                (struct sinst){ true,   false,  k,      s.prefix_caching, 0,
                                s.role, s.node, s.rack, s.region };
    }
    r->oom.armed = true;
    if (r->check)
        check_counters(r);
    for (int i = 0; i < MAX_OPS && !fuzz_dp_empty(&dp); i++) {
        switch (fuzz_dp_next_range(&dp, 0, 23)) {
        case 0:
            op_add(r, &dp);
            break;
        case 1:
            op_drain(r, &dp);
            break;
        case 2:
            op_remove(r, &dp);
            break;
        case 3:
        case 4:
        case 5:
        case 6:
            op_route(r, &dp);
            break;
        case 7:
            op_policy(r, &dp);
            break;
        case 8:
            op_set_param(r, &dp);
            break;
        case 9:
            op_set_stats(r, &dp);
            break;
        case 10:
            op_rtt(r, &dp);
            break;
        case 11:
            op_event(r, &dp, 0);
            break;
        case 12:
            op_event(r, &dp, 1);
            break;
        case 13:
            op_event(r, &dp, 2);
            break;
        case 14:
            op_plan(r, &dp);
            break;
        case 15: {
            uint64_t id = dec_req_id(r, &dp);
            do_move(r, id, dec_inst(&dp));
            break;
        }
        case 16:
            op_kv(r, &dp);
            break;
        case 17:
            op_delta(r, &dp);
            break;
        case 18: {
            static const uint64_t dts[7] = { 0,
                                             FUZZ_MS,
                                             20 * FUZZ_MS,
                                             FUZZ_SEC,
                                             4 * FUZZ_SEC,
                                             11 * FUZZ_SEC,
                                             3601 * FUZZ_SEC };
            r->now += dts[fuzz_dp_next_range(&dp, 0, 6)];
            fuzz_trace("now = %llu", (unsigned long long)r->now);
            break;
        }
        case 19:
            op_observe(r, &dp);
            break;
        case 20:
            op_learn(r, &dp);
            break;
        case 21:
            op_set_adapters(r, &dp);
            break;
        case 22:
            op_prefill_done(r, &dp);
            break;
        default:
            op_query(r, &dp);
            break;
        }
        if (r->check)
            check_counters(r);
    }
    /* the end: complete everything still in flight, then nothing is left;
     * a clock a time jump left behind moves with a pair of calls */
    r->oom.armed = false;
    for (int k = 0; k < 2; k++) {
        int w = clock_judge(r, r->now, true);
        st = lr_router_expire(r->r, r->now);
        fuzz_trace("expire(%llu) = %s [end]", (unsigned long long)r->now,
                   lr_status_name(st));
        FUZZ_ASSERT_STATUS(st, st == (lr_status)w);
        if (st == LR_OK) {
            clock_took(r, r->now);
            break;
        }
    }
    while (r->n_rq > 0) {
        uint64_t id = r->rq[r->n_rq - 1].id;
        st = lr_router_complete(r->r, id, 1, r->now);
        fuzz_trace("complete(%llu) = %s [end]", (unsigned long long)id,
                   lr_status_name(st));
        FUZZ_ASSERT_STATUS(st, st == LR_OK);
        r->n_rq--;
    }
    if (r->check) {
        check_counters(r);
        for (uint32_t id = 0; id < r->max_inst; id++) {
            lr_load_snapshot s;
            lr_load_snapshot_init(&s);
            if (lr_router_instance_load(r->r, id, &s) != LR_OK)
                continue;
            FUZZ_ASSERT(s.inflight == 0 && s.queued == 0 &&
                        s.prefill_tokens == 0 && s.queued_tokens == 0 &&
                        s.decode_tokens == 0 && s.kv_tokens == 0);
        }
    }
    r->final_digest = lr__router_digest(r->r);
    lr_router_destroy(r->r);
    r->r = NULL;
    free(r->blob);
    r->blob = NULL;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run *a = calloc(1, sizeof *a);
    FUZZ_ASSERT(a != NULL);
    a->check = true;
    a->transcript = FUZZ_FNV_INIT;
    run_once(a, data, size);
    if (!fuzz_trace_on()) {
        /* the same input again: the same results (B24) */
        struct run *b = calloc(1, sizeof *b);
        FUZZ_ASSERT(b != NULL);
        b->transcript = FUZZ_FNV_INIT;
        run_once(b, data, size);
        FUZZ_ASSERT(a->final_digest == b->final_digest);
        FUZZ_ASSERT(a->transcript == b->transcript);
        free(b);
    }
    free(a);
    return 0;
}
