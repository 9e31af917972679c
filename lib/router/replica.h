/* What a router keeps about the other sources of its state: the engines
 * whose KV-event batches it applies in sequence (one watermark per
 * instance), and the other gateway replicas (the last delta applied from
 * each, and their load gauges). The router owns one lr__kvsrc per
 * instance id and one lr__peers; everything here runs under the router's
 * mutex. See replica.c for the rules and the gauge wire format. */
#ifndef LIBROUTE_LIB_REPLICA_H
#define LIBROUTE_LIB_REPLICA_H

#include "common/common.h"
#include "libroute/lr_policy.h"
#include "libroute/lr_router.h"
#include "parts/load.h"

/* ---- KV-event sources ------------------------------------------------------ */

/* One engine's event stream as the router has applied it. `next` is the
 * sequence number expected next (valid when `has`); `gap` says the
 * batches from `next` on are missing and later ones are refused until a
 * replay fills it; `last_ts` is the engine timestamp of the last batch
 * applied (a later batch that goes back in sequence but forward in time
 * is a restarted engine) and `last_at_ns` the router's time then.
 * `ahead_ts` (when `has_ahead`) is the last timestamp refused as too far
 * ahead, for the pair rule (lr__kvsrc_window). */
struct lr__kvsrc {
    uint64_t next;
    double last_ts;
    uint64_t last_at_ns;
    double ahead_ts;
    uint8_t has;
    uint8_t gap;
    uint8_t has_ahead;
    uint64_t batches, dups, gaps, restarts;
};

/* What to do with batch `seq` (timestamp ts, NaN when the batch is too
 * corrupt to read it) from source k: an lr_kv_seq value. A
 * LR_KV_SEQ_DUPLICATE or _GAP changes k's counters only; the caller
 * applies the others and then calls lr__kvsrc_applied(). LR_KV_SEQ_NONE:
 * the sequence went back and the batch has no timestamp to tell a replay
 * from a restart (a corrupt batch): refuse it, nothing counted. */
int32_t lr__kvsrc_judge(struct lr__kvsrc *k, uint64_t seq, double ts);

/* The engine's clock judged by the router's: ts (finite) may be at most
 * skew_s ahead of the last batch applied plus the router's time since
 * (now_ns). A source with nothing applied takes any. As the router's
 * clock (common.h): a refusal is remembered, and the next timestamp that
 * agrees with it (not earlier, within the skew) is taken, so a real step
 * of the engine's clock costs one refused batch (a retry passes) while a
 * stray value never moves it. Changes only that bookkeeping. */
bool lr__kvsrc_window(struct lr__kvsrc *k, double ts, uint64_t now_ns,
                      double skew_s);

/* Batch seq (timestamp ts, NaN: unknown) was applied at router time now_ns
 * (or consumed: a corrupt batch is not replayed). */
void lr__kvsrc_applied(struct lr__kvsrc *k, uint64_t seq, double ts,
                       uint64_t now_ns);

/* Forget the stream (an explicit reset, a restart): keep the counters. */
void lr__kvsrc_forget(struct lr__kvsrc *k);

/* ---- peers: deltas and gauges ------------------------------------------------ */

/* One instance's load as a peer reported it (the router's own counters of
 * that peer: lr_load's view), or the sum over live peers. */
struct lr__gauge {
    uint32_t id;
    uint32_t inflight, queued;
    uint64_t prefill, queued_tokens, prompt, decode, kv;
};

struct lr__peer {
    uint64_t id;   /* its replica id; 0: a free slot */
    uint64_t mark; /* the latest journal mark applied (gap detection) */
    uint64_t last_since, last_mark; /* the last delta applied */
    uint64_t seen_ns;               /* host time of its last message */
    uint64_t first_ns;              /* host time it took its slot */
    uint8_t has_mark;
    uint8_t has_last;
    uint8_t has_delta; /* it sent a delta that applied (evidence) */
    uint8_t delta_gap; /* a delta was lost since the last full one */
    uint8_t has_gauge;
    uint64_t gseq;
    uint64_t gexpire_ns;
    struct lr__gauge *g; /* n_g entries, ascending ids */
    uint32_t n_g, cap_g;
};

struct lr__peers {
    uint8_t key[16]; /* the peer key (lr__peers_key), when keyed */
    bool keyed;
    uint64_t self;   /* this router's replica id */
    uint64_t ttl_ns; /* of a gauge */
    uint32_t max, max_inst;
    struct lr__peer *p;    /* max slots */
    struct lr__gauge *sum; /* max_inst: the live gauges, summed; kept
                            * by adding and subtracting each gauge's
                            * entries, rebuilt once a sum saturates */
    bool sum_sat;          /* a sum saturated: rebuild, not subtract */
    struct lr__gauge *tmp; /* the next gauge of a peer, parsed */
    uint32_t cap_tmp;
    /* Called with each instance id whose sum changed, once it has its
     * new value (LR_INSTANCE_NONE: any may have); NULL: none. */
    void (*moved)(void *ctx, uint32_t id);
    void *moved_ctx;
    uint64_t next_expire; /* earliest gexpire_ns of a live gauge */
    uint64_t gseq_out;    /* gauges this router exported */
    uint64_t imported, skipped, expired; /* gauges */
    uint64_t delta_gaps; /* deltas found lost (a later one's since) */
};

/* The key deltas and gauges are sealed with, or NULL (the plain sum). */
static inline const uint8_t *
lr__peers_key(const struct lr__peers *ps)
{
    return ps->keyed ? ps->key : NULL;
}

lr_status lr__peers_init(struct lr__peers *ps, struct lr__mem *m,
                         uint32_t max_peers, uint32_t max_inst, uint64_t self,
                         uint64_t ttl_ns);
void lr__peers_free(struct lr__peers *ps, struct lr__mem *m);

/* Who hears of the instances whose summed gauges changed. */
static inline void
lr__peers_on_moved(struct lr__peers *ps, void (*fn)(void *, uint32_t),
                   void *ctx)
{
    ps->moved = fn;
    ps->moved_ctx = ctx;
}

/* Add what the live gauges say about row c's instance (at now_ns) to its
 * counters. Reads only. */
void lr__peers_add(const struct lr__peers *ps, uint64_t now_ns,
                   lr_candidate *c);

/* Whether any gauge is held: while none is, lr__peers_add adds nothing
 * (a route checks this before it calls that for each row). */
static inline bool
lr__peers_held(const struct lr__peers *ps)
{
    return ps->p != NULL && ps->next_expire != UINT64_MAX;
}

/* Drop the gauges expired at now_ns (moved() hears of their
 * instances). */
void lr__peers_expire(struct lr__peers *ps, uint64_t now_ns);

/* Whether lr__peers_expire(now_ns) would drop anything. Reads only. */
static inline bool
lr__peers_expiry_due(const struct lr__peers *ps, uint64_t now_ns)
{
    return ps->p != NULL && now_ns >= ps->next_expire;
}

/* Peers whose gauge is live at now_ns. */
uint64_t lr__peers_live(const struct lr__peers *ps, uint64_t now_ns);

/* A delta from replica `origin` covering journal marks (since, mark]:
 * LR_OK with *apply true unless it is this router's own echo or the very
 * delta of that peer applied last (the bus delivered it twice); then
 * call lr__peers_delta_done after applying it. LR_ELIMIT: no slot for a
 * new peer (lr__peers_delta_done's). Origin 0 (a 0.1 delta, or a replica
 * with no id) is never judged a duplicate.
 *
 * Marks are the peer's, unchecked: a delta re-applied is harmless (its
 * routes keep their ages), so nothing a delta says about its marks can
 * make later deltas be skipped. They serve to find losses: an
 * incremental delta (since > 0) whose since is past the latest mark
 * applied shows the deltas between were lost (delta_gap) until a full
 * delta (since 0) heals it; a full delta resets the mark (a restarted
 * peer counts from 0 again). */
lr_status lr__peers_delta_check(struct lr__peers *ps, uint64_t origin,
                                uint64_t since, uint64_t mark, uint64_t now_ns,
                                bool *apply);
void lr__peers_delta_done(struct lr__peers *ps, uint64_t origin, uint64_t since,
                          uint64_t mark, uint64_t now_ns);

/* Restore a peer's watermark (from a snapshot). LR_ECORRUPT (id 0 or our
 * own), LR_ELIMIT. */
lr_status lr__peers_set_mark(struct lr__peers *ps, uint64_t id, uint64_t mark);

/* The gauge message of this router's own counters: every instance with a
 * request in flight. */
lr_status lr__gauges_export(struct lr__peers *ps, const struct lr__mem *m,
                            const lr_load *ld, const uint32_t *ids, uint32_t n,
                            lr_blob **out);

/* Take a peer's gauge message (untrusted bytes). Entries of ids `known`
 * rejects are left out. LR_OK (also for a stale one or our own echo,
 * counted as skipped); LR_ECORRUPT; LR_EVERSION; LR_ELIMIT (no slot for a
 * new peer); LR_ENOMEM. On failure nothing changes. moved() hears of the
 * instances in the peer's previous gauge and in this one (and of those
 * of the gauges that expired meanwhile): O(their entries), not O(peers x
 * fleet). */
lr_status lr__gauges_import(struct lr__peers *ps, struct lr__mem *m,
                            const uint8_t *buf, size_t len, uint64_t now_ns,
                            bool (*known)(const void *, uint32_t),
                            const void *ctx);

/* The peers' delta marks, for a snapshot: n_out entries of (id, mark). */
uint32_t lr__peers_marks(const struct lr__peers *ps, uint64_t *ids,
                         uint64_t *marks, uint32_t cap);

/* Checksum of the logical state (marks, gauges, counters). */
uint64_t lr__peers_digest(const struct lr__peers *ps, uint64_t d);

#endif /* LIBROUTE_LIB_REPLICA_H */
