/* lr_router_vllm_batch_seq(), lr_router_kv_reset() and
 * lr_router_kv_source() as an op stream on a router with three instances,
 * against a model of the sequencing rules (lr_vllm.h).
 *
 * Each op (front of the input): a byte op, a byte instance (0..3; 3 is no
 * instance), a byte for the sequence number (relative to the model's
 * expected one, or absolute), a byte for the engine time step (-64 ..
 * +191 s); then
 *   op % 4 == 0..1  an empty batch [ts, [], 0]
 *   op % 4 == 2     a batch [ts, [AllBlocksCleared], 0]
 *   op % 4 == 3     lr_router_kv_reset()
 * (The batches' bytes are the vllm_batch harness's business: here they
 * are well formed but for their timestamp, which goes negative, and so
 * corrupt, as it likes.) The host's clock stands still: the engine's may
 * run at most the skew ahead of the last batch applied (the router's
 * clock has its own harness, router_ops).
 *
 * Properties: the status and seq_state are exactly the ones the model
 * predicts, the engine's timestamps judged by the host's clock as
 * lr__kvsrc_window() says; next_seq and lr_router_kv_source() agree with
 * it; the router verifies (every 16 ops and at the end); the counters in
 * the stats equal the model's. */
#include <math.h>
#include <string.h>

#include "data_producer.h"
#include "fuzz_helpers.h"
#include "libroute/lr_vllm.h"
#include "router/router.h"

#define N_INST 3u

#define SKEW_S 60.0 /* LR_PARAM_CLOCK_SKEW_S's default */

struct src {
    bool has, gap, has_ahead;
    uint64_t next, at_ns;
    double last_ts, ahead_ts;
    uint64_t batches, dups, gaps, restarts;
};

/* The engine's clock judged by the host's (replica.h). */
static bool
window(struct src *s, double ts, uint64_t now_ns)
{
    if (!s->has)
        return true;
    double since = now_ns > s->at_ns ? (double)(now_ns - s->at_ns) / 1e9 : 0;
    if (ts <= s->last_ts + since + SKEW_S) {
        s->has_ahead = false;
        return true;
    }
    if (s->has_ahead && ts >= s->ahead_ts && ts - s->ahead_ts <= SKEW_S) {
        s->has_ahead = false;
        return true;
    }
    s->ahead_ts = ts;
    s->has_ahead = true;
    return false;
}

static size_t
batch(uint8_t *b, double ts, bool clear)
{
    size_t n = 0;
    b[n++] = 0x93;
    b[n++] = 0xcb;
    uint64_t u;
    memcpy(&u, &ts, 8);
    for (int i = 7; i >= 0; i--)
        b[n++] = (uint8_t)(u >> (8 * i));
    if (clear) {
        static const char tag[] = "AllBlocksCleared";
        b[n++] = 0x91;
        b[n++] = 0x91;
        b[n++] = (uint8_t)(0xa0 | (sizeof tag - 1));
        memcpy(b + n, tag, sizeof tag - 1);
        n += sizeof tag - 1;
    } else {
        b[n++] = 0x90;
    }
    b[n++] = 0x00;
    return n;
}

/* What the router must do with batch seq at engine time ts (see
 * lr_router_vllm_batch_seq) and host time now_ns, and the model updated
 * as it does. A negative timestamp makes the batch corrupt: consumed
 * where it is expected, refused where the sequence went back. */
static lr_status
model(struct src *s, uint64_t seq, double ts, uint64_t now_ns, int32_t *state)
{
    bool corrupt = ts < 0;
    *state = LR_KV_SEQ_NONE;
    if (!corrupt && !window(s, ts, now_ns))
        return LR_ERANGE;
    if (!s->has || seq == s->next) {
        *state = s->has ? LR_KV_SEQ_APPLIED : LR_KV_SEQ_FIRST;
        s->has = true;
        s->gap = false;
        s->next = seq + 1;
        if (!corrupt)
            s->last_ts = ts;
        s->at_ns = now_ns;
        s->batches++;
        return corrupt ? LR_ECORRUPT : LR_OK;
    }
    if (seq > s->next) {
        *state = LR_KV_SEQ_GAP;
        s->gaps += !s->gap;
        s->gap = true;
        return LR_EGAP;
    }
    if (corrupt)
        return LR_ECORRUPT; /* a replay or a restart? nothing to tell */
    if (ts > s->last_ts) {
        *state = LR_KV_SEQ_RESTART;
        s->restarts++;
        s->has = true;
        s->has_ahead = false;
        s->last_ts = ts;
        s->at_ns = now_ns;
        if (seq == 0) {
            s->gap = false;
            s->next = 1;
            s->batches++;
            return LR_OK;
        }
        s->gap = true;
        s->next = 0;
        s->gaps++;
        return LR_EGAP;
    }
    *state = LR_KV_SEQ_DUPLICATE;
    s->dups++;
    return LR_OK;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lr_router_options o;
    lr_router_options_init(&o);
    o.max_instances = 4;
    o.max_requests = 16;
    o.index_capacity_blocks = 1024;
    lr_router *r = NULL;
    FUZZ_ASSERT(lr_router_create(&o, &r) == LR_OK);
    for (uint32_t i = 0; i < N_INST; i++) {
        char name[4] = { 'e', (char)('0' + i), 0, 0 };
        lr_instance_spec sp;
        lr_instance_spec_init(&sp);
        sp.name = name;
        uint32_t id;
        FUZZ_ASSERT(lr_router_add_instance(r, &sp, &id) == LR_OK);
    }
    struct src m[N_INST];
    memset(m, 0, sizeof m);
    double ts = 1000;
    const uint64_t now = FUZZ_T0;
    uint32_t ops = 0;
    fuzz_dp dp;
    fuzz_dp_init(&dp, data, size);
    while (fuzz_dp_remaining(&dp) >= 4) {
        uint32_t op = fuzz_dp_next_range(&dp, 0, 255);
        uint32_t inst = fuzz_dp_next_range(&dp, 0, N_INST);
        uint32_t sb = fuzz_dp_next_range(&dp, 0, 255);
        int32_t step = (int32_t)fuzz_dp_next_range(&dp, 0, 255) - 64;
        ts += step;
        struct src *s = inst < N_INST ? &m[inst] : NULL;
        if (op % 4 == 3) {
            lr_status st = lr_router_kv_reset(r, inst);
            FUZZ_ASSERT(st == (s != NULL ? LR_OK : LR_ENOENT));
            if (s != NULL) {
                s->has = s->gap = s->has_ahead = false;
                s->next = 0;
                s->at_ns = 0;
                s->last_ts = 0;
                s->restarts++;
            }
        } else {
            /* small steps around the expected number, or a far one */
            uint64_t base = s != NULL && s->has ? s->next : 0;
            uint64_t seq = (uint64_t)sb * 1000;
            if (sb < 200)
                seq = base + sb % 7 >= 3 ? base + sb % 7 - 3 : 0;
            uint8_t b[64];
            size_t n = batch(b, ts, op % 4 == 2);
            lr_vllm_batch_info info;
            lr_vllm_batch_info_init(&info);
            lr_status st =
                lr_router_vllm_batch_seq(r, inst, seq, b, n, now, &info);
            if (s == NULL) {
                FUZZ_ASSERT_STATUS(st, st == LR_ENOENT);
            } else {
                int32_t want_state;
                lr_status want = model(s, seq, ts, now, &want_state);
                FUZZ_ASSERT_STATUS(st, st == want);
                FUZZ_ASSERT(info.seq_state == want_state);
                FUZZ_ASSERT(info.next_seq == (s->has ? s->next : 0));
            }
        }
        if (s != NULL) {
            lr_kv_source k;
            lr_kv_source_init(&k);
            FUZZ_ASSERT(lr_router_kv_source(r, inst, &k) == LR_OK);
            FUZZ_ASSERT(k.has_seq == s->has && k.gap == s->gap);
            FUZZ_ASSERT(!s->has || k.next_seq == s->next);
            FUZZ_ASSERT(k.batches == s->batches && k.duplicates == s->dups &&
                        k.gaps == s->gaps && k.restarts == s->restarts);
        }
        if ((++ops & 15) == 0) /* the whole router's walk is slow */
            FUZZ_ASSERT(lr__router_verify(r) == LR_OK);
    }
    FUZZ_ASSERT(lr__router_verify(r) == LR_OK);
    lr_router_stats st;
    lr_router_stats_init(&st);
    FUZZ_ASSERT(lr_router_get_stats(r, &st) == LR_OK);
    uint64_t b = 0, d = 0, g = 0, rs = 0, open = 0;
    for (uint32_t i = 0; i < N_INST; i++) {
        b += m[i].batches;
        d += m[i].dups;
        g += m[i].gaps;
        rs += m[i].restarts;
        open += m[i].gap;
    }
    FUZZ_ASSERT(st.kv_batches == b && st.kv_duplicates == d &&
                st.kv_gaps == g && st.kv_restarts == rs &&
                st.kv_gaps_open == open);
    lr_router_destroy(r);
    return 0;
}
