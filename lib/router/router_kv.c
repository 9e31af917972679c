/* lr_router, what the parts hear from outside the request path: the
 * engines' KV events (one at a time, vLLM batches, and sequenced batches
 * under the KV-event sequence rules of replica.c), the index's deltas
 * between gateway replicas, the replicas' load gauges, and expiry. Each
 * call takes the router's mutex and hands the bytes to the part that
 * owns them (index, vllm.c, the peers table). */
#include "common/wire.h"
#include "index/vllm.h"
#include "router/router_impl.h"

/* ---- index pass-through ------------------------------------------------------------------------ */

lr_status
lr_router_kv_stored(lr_router *r, uint32_t id, const lr_kv_stored *ev,
                    uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr_status st = lr__router_enter_inst(r, id, now_ns);
    if (st == LR_OK) {
        lr__router_ix_lock(r);
        st = lr_index_kv_stored(r->ix, id, ev, now_ns);
        lr__router_ix_unlock(r);
    }
    return lr__router_leave(r, st, now_ns);
}

lr_status
lr_router_kv_removed(lr_router *r, uint32_t id, const uint64_t *block_hashes,
                     size_t n_blocks, size_t *n_resolved)
{
    return lr_router_kv_removed_tier(r, id, LR_TIER_GPU, block_hashes, n_blocks,
                                     n_resolved);
}

lr_status
lr_router_kv_removed_tier(lr_router *r, uint32_t id, int32_t tier,
                          const uint64_t *block_hashes, size_t n_blocks,
                          size_t *n_resolved)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr__router_ix_lock(r);
    lr_status st = lr__router_inst(r, id) == NULL
                       ? LR_ENOENT
                       : lr_index_kv_removed_tier(r->ix, id, tier, block_hashes,
                                                  n_blocks, n_resolved);
    lr__router_ix_unlock(r);
    return lr__router_release(r, st);
}

lr_status
lr_router_kv_cleared(lr_router *r, uint32_t id)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr__router_ix_lock(r);
    lr_status st = lr__router_inst(r, id) == NULL
                       ? LR_ENOENT
                       : lr_index_kv_cleared(r->ix, id);
    if (lr__router_inst(r, id) != NULL) /* held or not, the cache is gone */
        lr__router_marks_forget(r, id);
    lr__router_ix_unlock(r);
    return lr__router_release(r, st);
}

uint64_t
lr_router_mark(lr_router *r)
{
    if (r == NULL)
        return 0;
    lr__router_lock(r);
    lr__router_ix_lock(r);
    uint64_t m = lr_index_mark(r->ix);
    lr__router_ix_unlock(r);
    lr__router_unlock(r);
    return m;
}

lr_status
lr_router_export_delta(lr_router *r, uint64_t since_mark, lr_blob **out,
                       uint64_t *mark_out)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr__router_ix_lock(r);
    lr_status st = lr_index_export_delta(r->ix, since_mark, out, mark_out);
    lr__router_ix_unlock(r);
    if (st == LR_OK) {
        lr__frame_seal(lr__blob_bytes(*out), lr_blob_size(*out),
                       lr__peers_key(&r->peers));
        r->st.deltas_exported++;
    }
    return lr__router_release(r, st);
}

/* Routes of instances this router does not have are not imported: they
 * could never be chosen, and they would take the index's instance slots. */
static bool
known_id(void *ctx, uint32_t id)
{
    return lr__router_inst(ctx, id) != NULL;
}

static bool
known_id_const(const void *ctx, uint32_t id)
{
    return lr__router_inst(ctx, id) != NULL;
}

/* A delta is judged by its header (origin, marks) against the peer's
 * watermark before it is applied, and the watermark moves only once it
 * applied: a failed import changes nothing. */
static lr_status
import_delta_locked(lr_router *r, const uint8_t *buf, size_t len,
                    uint64_t now_ns)
{
    uint64_t origin, since, mark;
    size_t hdr;
    bool apply = true;
    const uint8_t *key = lr__peers_key(&r->peers);
    if (lr__index_delta_peek(buf, len, key, &origin, &since, &mark, &hdr) ==
        LR_OK)
        LR_TRY(lr__peers_delta_check(&r->peers, origin, since, mark, now_ns,
                                     &apply));
    else
        origin = 0; /* the import says what is wrong with it */
    if (!apply) {
        r->st.deltas_skipped++;
        return LR_OK;
    }
    lr__router_ix_lock(r);
    lr_status st =
        lr__index_import_delta_if(r->ix, buf, len, now_ns, known_id, r, key);
    lr__router_ix_unlock(r);
    LR_TRY(st);
    uint64_t lost = r->peers.delta_gaps;
    lr__peers_delta_done(&r->peers, origin, since, mark, now_ns);
    r->st.deltas_lost += r->peers.delta_gaps - lost;
    r->st.deltas_imported++;
    return LR_OK;
}

/* What a peer sent (a delta, gauges), judged by the clock and taken
 * under the mutex by `fn`. */
static lr_status
import_from_peer(lr_router *r, const uint8_t *buf, size_t len, uint64_t now_ns,
                 lr_status (*fn)(lr_router *r, const uint8_t *buf, size_t len,
                                 uint64_t now_ns))
{
    LR_RETURN_IF(r == NULL || (buf == NULL && len != 0), LR_EINVAL);
    lr_status st = lr__router_enter(r, now_ns);
    if (st == LR_OK)
        st = fn(r, buf, len, now_ns);
    return lr__router_leave(r, st, now_ns);
}

lr_status
lr_router_import_delta(lr_router *r, const uint8_t *buf, size_t len,
                       uint64_t now_ns)
{
    return import_from_peer(r, buf, len, now_ns, import_delta_locked);
}

/* ---- KV-event sources ------------------------------------------------------------------------ */

LR__INIT_SIZED_ZERO(lr_kv_source_init_sized, lr_kv_source)

/* An engine restarted: what it cached is gone. */
static void
source_restart(lr_router *r, uint32_t id)
{
    lr__router_ix_lock(r);
    (void)lr_index_kv_cleared(r->ix, id); /* LR_ENOENT: nothing held */
    lr__router_marks_forget(r, id);
    lr__router_ix_unlock(r);
    lr__kvsrc_forget(&r->src[id]);
}

/* A sequenced batch: its timestamp judged against the engine's clock as
 * the router has seen it run (lr__kvsrc_window: one too far ahead is
 * refused, LR_ERANGE, and changes nothing), then its sequence number
 * (replica.c's rules). A batch too corrupt to read its timestamp is
 * applied as corrupt where the sequence expects it (consumed: a replay
 * would not mend it) and refused where the sequence went back. */
static lr_status
vllm_seq_locked(lr_router *r, uint32_t id, uint64_t seq, const uint8_t *buf,
                size_t len, uint64_t now_ns, lr_vllm_batch_info *in)
{
    struct lr__kvsrc *k = &r->src[id];
    double ts;
    if (lr__vllm_peek(buf, len, &ts) != LR_OK) {
        ts = NAN;
    } else if (!lr__kvsrc_window(k, ts, now_ns,
                                 r->param[LR_PARAM_CLOCK_SKEW_S])) {
        in->next_seq = k->next;
        return LR_ERANGE;
    }
    int32_t v = lr__kvsrc_judge(k, seq, ts);
    in->seq_state = v;
    if (v == LR_KV_SEQ_NONE || v == LR_KV_SEQ_DUPLICATE || v == LR_KV_SEQ_GAP) {
        in->next_seq = k->next;
        return v == LR_KV_SEQ_NONE  ? LR_ECORRUPT
               : v == LR_KV_SEQ_GAP ? LR_EGAP
                                    : LR_OK;
    }
    if (v == LR_KV_SEQ_RESTART) {
        source_restart(r, id);
        if (seq != 0) { /* batches 0 .. seq - 1 of the new run were lost */
            k->has = 1;
            k->gap = 1;
            k->next = 0;
            k->last_ts = ts;
            k->last_at_ns = now_ns;
            k->gaps++;
            in->next_seq = 0;
            return LR_EGAP;
        }
    }
    lr__router_ix_lock(r);
    lr_status st = lr__vllm_apply(r->ix, &r->mem, id, buf, len, now_ns, in);
    if (in->cleared > 0) /* AllBlocksCleared */
        lr__router_marks_forget(r, id);
    lr__router_ix_unlock(r);
    if (st == LR_OK || st == LR_ECORRUPT || st == LR_ENOTSUP)
        lr__kvsrc_applied(k, seq, ts, now_ns); /* consumed, whatever it held */
    in->next_seq = k->has ? k->next : 0;
    return st;
}

/* One vLLM batch from instance id: with its sequence number *seq, or
 * unsequenced when seq is NULL. */
static lr_status
vllm_batch(lr_router *r, uint32_t id, const uint64_t *seq, const uint8_t *buf,
           size_t len, uint64_t now_ns, lr_vllm_batch_info *info)
{
    LR_RETURN_IF(r == NULL || (buf == NULL && len != 0), LR_EINVAL);
    LR_RETURN_IF(info != NULL && info->struct_size < LR_VLLM_BATCH_INFO_SIZE_V1,
                 LR_EVERSION);
    lr_vllm_batch_info in;
    lr_vllm_batch_info_init(&in);
    lr_status st = lr__router_enter_inst(r, id, now_ns);
    if (st == LR_OK && seq == NULL) {
        lr__router_ix_lock(r);
        st = lr__vllm_apply(r->ix, &r->mem, id, buf, len, now_ns, &in);
        if (in.cleared > 0) /* AllBlocksCleared */
            lr__router_marks_forget(r, id);
        lr__router_ix_unlock(r);
    } else if (st == LR_OK)
        st = vllm_seq_locked(r, id, *seq, buf, len, now_ns, &in);
    st = lr__router_leave(r, st, now_ns);
    (void)lr__vllm_info_out(info, &in); /* NULL or checked above */
    return st;
}

lr_status
lr_router_vllm_batch(lr_router *r, uint32_t id, const uint8_t *buf, size_t len,
                     uint64_t now_ns, lr_vllm_batch_info *info)
{
    return vllm_batch(r, id, NULL, buf, len, now_ns, info);
}

lr_status
lr_router_vllm_batch_seq(lr_router *r, uint32_t id, uint64_t seq,
                         const uint8_t *buf, size_t len, uint64_t now_ns,
                         lr_vllm_batch_info *info)
{
    return vllm_batch(r, id, &seq, buf, len, now_ns, info);
}

lr_status
lr_router_kv_source(const lr_router *r, uint32_t id, lr_kv_source *out)
{
    LR_TRY(lr__out_check(r, out, LR_KV_SOURCE_SIZE_V1));
    lr__router_lock(r);
    lr_status st = LR_ENOENT;
    if (lr__router_inst(r, id) != NULL) {
        const struct lr__kvsrc *k = &r->src[id];
        lr_kv_source s = { .struct_size = sizeof s,
                           .has_seq = k->has,
                           .gap = k->gap,
                           .next_seq = k->has ? k->next : 0,
                           .batches = k->batches,
                           .duplicates = k->dups,
                           .gaps = k->gaps,
                           .restarts = k->restarts };
        st = lr__copy_out(out, &s, sizeof s);
    }
    return lr__router_release(r, st);
}

lr_status
lr_router_kv_reset(lr_router *r, uint32_t id)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr__router_lock(r);
    lr_status st = LR_ENOENT;
    if (lr__router_inst(r, id) != NULL) {
        source_restart(r, id);
        r->src[id].restarts++;
        st = LR_OK;
    }
    return lr__router_release(r, st);
}

/* ---- replicas: gauges ------------------------------------------------------------------------ */

lr_status
lr_router_set_peer_key(lr_router *r, const uint8_t *key, size_t len)
{
    LR_RETURN_IF(r == NULL || (key == NULL && len != 0), LR_EINVAL);
    LR_RETURN_IF(len != 0 && len != sizeof r->peers.key, LR_EINVAL);
    lr__router_lock(r);
    r->peers.keyed = len != 0;
    if (len != 0)
        memcpy(r->peers.key, key, len);
    else
        memset(r->peers.key, 0, sizeof r->peers.key);
    return lr__router_release(r, LR_OK);
}

lr_status
lr_router_export_gauges(lr_router *r, lr_blob **out)
{
    LR_RETURN_IF(r == NULL || out == NULL, LR_EINVAL);
    *out = NULL;
    lr__router_lock(r);
    lr_status st =
        lr__gauges_export(&r->peers, &r->mem, r->ld, r->act, r->n_act, out);
    return lr__router_release(r, st);
}

static lr_status
import_gauges_locked(lr_router *r, const uint8_t *buf, size_t len,
                     uint64_t now_ns)
{
    /* the instances whose peers' in flight moved are touched as their
     * sums change (lr__router_gauge_moved) */
    return lr__gauges_import(&r->peers, &r->mem, buf, len, now_ns,
                             known_id_const, r);
}

lr_status
lr_router_import_gauges(lr_router *r, const uint8_t *buf, size_t len,
                        uint64_t now_ns)
{
    return import_from_peer(r, buf, len, now_ns, import_gauges_locked);
}

lr_status
lr_router_expire(lr_router *r, uint64_t now_ns)
{
    LR_RETURN_IF(r == NULL, LR_EINVAL);
    lr_status st = lr__router_enter(r, now_ns);
    if (st == LR_OK) {
        lr__router_ix_lock(r);
        (void)lr_index_expire(r->ix, now_ns);
        lr__router_ix_unlock(r);
        lr__peers_expire(&r->peers, now_ns);
        lr__router_fleet_touch_all(r); /* and the scrapes that aged */
    }
    return lr__router_leave(r, st, now_ns);
}
