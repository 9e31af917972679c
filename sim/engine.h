/* lrsim: one engine instance (a vLLM-like replica) as a discrete-event
 * model: continuous batching with a token budget and chunked prefill, a
 * paged KV cache with a prefix cache, recompute preemption.
 *
 *   waiting (FIFO) ──admit──► running (admission order, <= max_batch)
 *        ▲                        │ each step: every running sequence gets
 *        └──── preempt (front) ───┘ 1 decode token or a prefill chunk,
 *                                   within token_budget
 *
 * KV blocks (block_tokens each, kv_tokens / block_tokens of them):
 *
 *   blk[]  key | ref | hashed      table: key -> block (open addressing)
 *   free queue: ref == 0 blocks, eviction order (head first)
 *     head ◄─ unhashed ─ ... ─ hashed, least recently freed ─ ... ─► tail
 *
 * A full prompt block gets its key (a chained hash of the prompt's tokens,
 * sim_seq_set_keys) once computed, and stays findable while it sits in the
 * free queue; allocation takes the free queue's head and evicts its key.
 * A sequence releases its blocks deepest first, so a prefix is evicted
 * from its deep end. Admission pins the longest run of leading blocks found
 * in the table (at most target - 1 tokens: the last token is always
 * computed, as in vLLM).
 *
 * An engine of a SIM_CACHE_SLOTS class (llama.cpp) finds hits its own
 * way instead (engine.c, "Slots"): in the prompt its slot kept, or in the
 * host prompt cache; its blocks then only count KV memory, and no block
 * gets a key.
 *
 * LoRA adapters (sim_engine_set_lora; engine.c, "Adapters"): max_loras
 * slots hold adapters, least recently used first out; a batch runs
 * requests of at most max_loras distinct adapters, and a step that loads
 * one takes load_us longer. An adapter's blocks are keyed under its own
 * salt (sim_seq_set_keys), so they never match another's.
 *
 * A CPU tier (sim_engine_set_cpu_tier; engine.c, "CPU tier"), as vLLM's
 * OffloadingConnector: every computed prompt block is also copied to
 * host memory (LRU over cpu blocks); admission continues the GPU's
 * leading hit with the blocks the CPU tier holds, which are loaded back
 * (a transfer, not a prefill) into new GPU blocks and keyed there again.
 *
 * The engine never allocates after create (and set-up) and never fails
 * after it: requests that could never fit are refused at enqueue time. */
#ifndef LRSIM_ENGINE_H
#define LRSIM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "util.h"

/* SEQ_HELD: a prefill leg whose prompt is computed, its KV kept for the
 * decode instance to pull (sim_engine_release_held); SEQ_KVWAIT: a decode
 * leg waiting for the blocks its transferred KV needs; SEQ_RECEIVING: a
 * decode leg holding them while the KV moves ("Disaggregated prefill and
 * decode" below). */
enum {
    SEQ_IDLE = 0,
    SEQ_WAITING = 1,
    SEQ_RUNNING = 2,
    SEQ_HELD = 3,
    SEQ_KVWAIT = 4,
    SEQ_RECEIVING = 5
};

/* One request on an engine. The simulator owns it; the engine links it
 * into its queues. The fields every step reads and writes come first, in
 * one cache line: a fleet's steps visit thousands of sequences between
 * two steps of one engine, so each visit is a miss, and one line is one
 * miss (the simulator allocates sequences 64-byte aligned). */
struct sim_seq {
    struct sim_seq *prev, *next;
    uint32_t *blocks; /* block ids held, in token order */
    uint64_t pending; /* share of the engine's pending prefill tokens */
    uint32_t computed;  /* tokens whose KV exists */
    uint32_t target;    /* tokens to prefill in this admission */
    uint32_t generated; /* output tokens sampled so far */
    uint32_t output;
    uint32_t sched; /* tokens scheduled in the running step */
    uint32_t n_blocks;
    uint32_t loading; /* CPU tier: blocks this admission loads from it */
    uint8_t state;
    uint8_t decoding;
    /* the rest */
    uint32_t req; /* workload index */
    uint32_t prompt;
    uint32_t hit;       /* tokens the cache supplied in this admission */
    uint32_t first_hit; /* ... in the first admission */
    uint32_t admissions;
    uint32_t preemptions;
    uint32_t inst; /* the engine it was sent to (the simulator's index) */
    uint32_t slot; /* slots engines: the slot it holds while running */
    uint32_t adapter; /* its LoRA adapter (any id but 0); 0: base model */
    uint32_t passed;  /* steps it waited for an adapter slot, in a row */
    uint32_t offloaded; /* CPU tier: leading blocks it has copied there */
    uint8_t hold;       /* a prefill leg: keep its KV once computed */
    uint32_t received;  /* a decode leg: prompt tokens whose KV it pulls */
    uint64_t *keys; /* full prompt blocks' chained keys */
    uint32_t n_keys, cap_keys;
    uint32_t cap_blocks;
};

/* Compute seq->keys from the prompt's tokens (block_tokens per block,
 * salt folded into the first: the tenant's, or under a LoRA adapter
 * lr_adapter_salt(tenant, lr_name_hash(adapter)), as the router keys
 * it). -1 on out of memory. */
int sim_seq_set_keys(struct sim_seq *s, const uint32_t *tokens, uint32_t n,
                     uint32_t block_tokens, uint64_t salt);
/* Make room for the blocks a sequence of `tokens` tokens needs. */
int sim_seq_reserve(struct sim_seq *s, uint32_t tokens, uint32_t block_tokens);
void sim_seq_free(struct sim_seq *s);

/* What a finished step produced, for the simulator to report. */
enum { EMIT_FIRST_TOKEN = 1, EMIT_COMPLETE = 2, EMIT_PREFILLED = 3 };
struct sim_emit {
    struct sim_seq *seq;
    int kind;
};

/* Cumulative counters; the conservation tests check
 *   query == hit + prefilled + abandoned + received
 * (abandoned: prefill work lost to a preemption mid-prefill; received:
 * prompt KV a decode leg got from its prefill instance). */
struct sim_engine_counters {
    uint64_t query_tokens;     /* targets at admission (vLLM's queries) */
    uint64_t hit_tokens;       /* of which the prefix cache supplied */
    uint64_t prefilled_tokens; /* prefill tokens computed */
    uint64_t abandoned_tokens; /* targets left unfinished by preemption */
    uint64_t decoded_tokens;   /* decode steps' tokens */
    uint64_t sampled_tokens;   /* output tokens sampled (prefill ends too) */
    uint64_t admissions;
    uint64_t preemptions;
    uint64_t completed;
    uint64_t evicted_blocks;
    uint64_t steps;
    uint64_t busy_us;
    uint64_t peak_used_blocks;
    /* slots engines: admissions that found their prefix in the slot they
     * took, and in the host prompt cache; prompts saved to it, and
     * dropped from it for room */
    uint64_t slot_hits, host_hits, host_saves, host_drops;
    /* LoRA: adapters loaded into a slot, and of those, loads that evicted
     * a resident adapter */
    uint64_t adapter_loads, adapter_evictions;
    /* CPU tier: admissions that loaded blocks from it, the tokens they
     * loaded (a share of hit_tokens), the time those loads added to
     * steps; blocks copied to it, and dropped from it for room */
    uint64_t cpu_hits, cpu_hit_tokens, cpu_load_us;
    uint64_t cpu_stored_blocks, cpu_evicted_blocks;
    /* disaggregation: prompt tokens whose KV decode legs received;
     * prefill legs whose KV was pulled (released), decode legs that
     * pulled theirs */
    uint64_t received_tokens, handed_off, pulls;
};

struct sim_engine;

/* Create an engine for an instance. block_tokens >= 1. NULL on out of
 * memory or a class with no room for one block. */
struct sim_engine *sim_engine_create(const struct sim_instance *inst,
                                     uint32_t block_tokens);
void sim_engine_destroy(struct sim_engine *e);

/* Could a sequence of prompt + output tokens ever run here? */
int sim_engine_fits(const struct sim_engine *e, uint32_t prompt,
                    uint32_t output);

/* LoRA (engine.c, "Adapters"): max_loras adapter slots (vLLM's
 * --max-loras, at most SIM_MAX_LORAS; 0: no LoRA, the default), and the
 * time a step spends loading each adapter it brings in. Call before
 * anything is queued. */
#define SIM_MAX_LORAS 256u
void sim_engine_set_lora(struct sim_engine *e, uint32_t max_loras,
                         uint64_t load_us);
/* Can a request of this adapter (0: none) ever run here? */
int sim_engine_serves(const struct sim_engine *e, uint32_t adapter);

/* What vLLM's vllm:lora_requests_info reports: the adapters with requests
 * running (resident ones), then those with requests waiting, each once,
 * in queue order, at most cap ids in all. */
struct sim_adapter_report {
    uint32_t max_loras;
    uint32_t n_running, n_waiting;
};
void sim_engine_adapters(const struct sim_engine *e, uint32_t *ids,
                         uint32_t cap, struct sim_adapter_report *out);
/* The adapters resident now (running or idle), most recently used first,
 * at most cap; returns how many there are. */
uint32_t sim_engine_resident(const struct sim_engine *e, uint32_t *ids,
                             uint32_t cap);

/* CPU tier (engine.c, "CPU tier"): room for `blocks` blocks in host
 * memory (0: none, the default), and the time a step spends loading one
 * token's KV from it (KV bytes per token / the link's bandwidth). No
 * tier on a slots engine or one with caching off. Call before anything
 * is queued. 0, or -1 on out of memory (the engine is unchanged). */
int sim_engine_set_cpu_tier(struct sim_engine *e, uint32_t blocks,
                            double load_us_per_token);

/* Queue a sequence (it must fit). front: put it first (a preempted or
 * moved sequence keeps its place). */
void sim_engine_enqueue(struct sim_engine *e, struct sim_seq *s, int front);

/* Take a waiting sequence of this engine out (a rebalancing move). 0, or
 * -1 if it is not waiting (admitted, or in transit). */
int sim_engine_remove_waiting(struct sim_engine *e, struct sim_seq *s);

/* If idle and there is work, plan the next step and return its duration in
 * microseconds (>= 1); 0 if there is nothing to do or a step is running. */
uint64_t sim_engine_start_step(struct sim_engine *e);

/* Finish the running step: advance every scheduled sequence, register
 * computed prompt blocks in the prefix cache, release finished sequences.
 * Writes what happened to out (capacity: max_batch entries) and returns the
 * count. */
size_t sim_engine_finish_step(struct sim_engine *e, struct sim_emit *out);

/* Scrape-able state (vLLM's num_requests_running / waiting,
 * kv_cache_usage_perc). */
struct sim_engine_state {
    uint32_t running, waiting;
    double kv_use;
    uint64_t pending_prefill; /* uncached prompt tokens not yet computed */
    uint64_t cached_blocks;   /* blocks holding a findable prefix */
    uint64_t used_blocks;     /* blocks pinned by sequences */
    uint64_t capacity_blocks;
    uint64_t cpu_blocks; /* blocks the CPU tier holds */
};
void sim_engine_state(const struct sim_engine *e, struct sim_engine_state *s);
const struct sim_engine_counters *
sim_engine_counters(const struct sim_engine *e);
int sim_engine_busy(const struct sim_engine *e);
uint32_t sim_engine_max_batch(const struct sim_engine *e);

/* KV-cache events, as a vLLM engine publishes them (lrsim --sync
 * events): a run of blocks [from, to) of sequence s became findable in the
 * prefix cache (BlockStored; block d's engine hash is s->keys[d]), or the
 * block of engine hash `key` was evicted (BlockRemoved). With a CPU tier,
 * as vLLM's OffloadingConnector publishes them (medium "CPU"): blocks
 * keys[0..n) copied to the tier (a BlockStored with engine hashes only,
 * no token ids; each was stored on the GPU first), or one dropped from
 * it. Called from inside sim_engine_start_step (evictions) and
 * sim_engine_finish_step (stores, and the CPU tier's drops for room).
 * NULL hooks: no events (the default). */
struct sim_kv_sink {
    void (*stored)(void *ctx, const struct sim_seq *s, uint32_t from,
                   uint32_t to);
    void (*removed)(void *ctx, uint64_t key);
    void (*cpu_stored)(void *ctx, const uint64_t *keys, uint32_t n);
    void (*cpu_removed)(void *ctx, uint64_t key);
    void *ctx;
};
void sim_engine_set_sink(struct sim_engine *e, const struct sim_kv_sink *sink);

/* ---- Disaggregated prefill and decode ------------------------------------
 *
 * A prefill leg (seq->hold, output 1) is queued and batched like any
 * request (sim_engine_enqueue); when its prompt is computed it samples no
 * token: it leaves the batch with its blocks still pinned (SEQ_HELD,
 * EMIT_PREFILLED) until sim_engine_release_held, when the transfer ends;
 * its blocks then sit in the prefix cache as evictable (keyed as any
 * computed prompt block).
 *
 * A decode leg is queued with sim_engine_enqueue_remote (SEQ_KVWAIT, in
 * its own FIFO). sim_engine_pull admits the queue's head while there is
 * memory (the blocks of its first prompt - 1 tokens it lacks, with the
 * watermark) and a batch slot (max_batch counts running and receiving
 * sequences): it pins the leading blocks its prefix cache holds and takes
 * fresh ones for the rest (s->received tokens, which the caller moves);
 * those pulls come before the step's own admissions. When the KV is in,
 * sim_engine_kv_arrived keys the received blocks into the prefix cache and
 * puts the sequence at the running queue's tail with its last prompt
 * token still to compute: its next step computes it and samples the
 * request's first token (the prefill leg's token is not the client's).
 * A decode leg preempted later recomputes locally, as any other. */
void sim_engine_enqueue_remote(struct sim_engine *e, struct sim_seq *s);
/* Admit what the remote queue's order allows now, into out (at most cap);
 * returns how many. */
size_t sim_engine_pull(struct sim_engine *e, struct sim_seq **out, size_t cap);
void sim_engine_kv_arrived(struct sim_engine *e, struct sim_seq *s);
void sim_engine_release_held(struct sim_engine *e, struct sim_seq *s);

/* Check every invariant (block accounting, free queue, table, pins);
 * 0, or -1 with the first violation in err. O(capacity). */
int sim_engine_verify(const struct sim_engine *e, struct sim_err *err);

#endif /* LRSIM_ENGINE_H */
