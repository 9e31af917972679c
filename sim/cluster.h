/* lrsim: instance classes (engine speed profiles) and cluster specs.
 *
 *   SPEC   := PRESET | GROUP { "+" GROUP }
 *   GROUP  := [COUNT "x"] CLASS { "-nocache" } [ ":" ROLE ]
 *             [ "@" RTT [ "ms" ] ] { "/" PLACE }
 *           | COUNT                         (COUNT instances of a100)
 *   ROLE   := "p" | "prefill" | "d" | "decode" | "b" | "both"
 *   PLACE  := "node" N | "rack" N | "region" N      (N >= 1)
 *   PRESET := "regions" | "regions:K" | "lodestar" | "hetero"
 *
 *   8                  8 x a100, 1 ms RTT
 *   4xh100+4xa100      a fast and a slower class
 *   4xa30+4xv100-nocache  Lodestar's mix: the V100s cache nothing
 *   2xa100@279ms       two instances in another region
 *   regions            3 regions x 4 a100: RTT 37 / 279 / 456 ms (GORGO)
 *   1xa100:p+3xa100:d  disaggregated: one prefill, three decode instances
 *   2xa100:p/rack2+2xa100:d/rack1  ... their KV crossing racks
 *
 * Roles (lr_role; default both): a prefill instance prefills for decode
 * instances; a decode instance decodes, and prefills a request kept whole.
 * Placement (lr_instance_spec.node, rack, region): by default each group
 * is a node of its own (8 GPUs a node: a larger group takes several), in
 * rack 1 of region 1 (in another region: a rack of that region's own);
 * "/nodeN" puts a group on node N (groups naming the
 * same node share it; node and rack numbers are the fleet's, not the
 * rack's), "/rackN" in rack N, "/regionN" in region N. A split request's
 * KV moves at the bandwidth of the closest level two instances share
 * (sim_config.kv_gbps).
 *
 * Class figures are documented in docs/simulator.md with their sources. */
#ifndef LRSIM_CLUSTER_H
#define LRSIM_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* How an engine keeps prompts for reuse. */
enum {
    /* vLLM's (and SGLang's): a paged KV cache whose full prompt blocks
     * stay findable by key until their memory is taken (engine.h) */
    SIM_CACHE_PAGED = 0,
    /* llama.cpp's llama-server: max_batch slots, each keeping the prompt
     * of its last request; a request takes the idle slot whose prompt
     * shares the longest prefix with its own (more than slot_similarity
     * of it), else the least recently used one, and reuses the shared
     * prefix; a slot about to lose most of what it holds saves it to a
     * host-memory prompt cache (host_cache_tokens), from which a request
     * loads a better prefix (engine.c, "Slots") */
    SIM_CACHE_SLOTS = 1,
};

/* An engine speed profile: a 7-8B dense model (Llama-3-8B-like, bf16, 128
 * KiB of KV per token) on one GPU of a kind, as vLLM would run it; or one
 * measured by an operator (--class-file: sim_class_file_load). */
struct sim_class {
    const char *name;
    const char *what;
    /* step time = overhead
     *   + sum over prefill chunks: tokens * prefill_us * (1 + ctx / ctx_double)
     *   + decode seqs * decode_seq_us + their context tokens * decode_ctx_us */
    double overhead_us;
    double prefill_us;    /* per prompt token, short context */
    double ctx_double;    /* context at which a token's prefill cost doubles */
    double decode_seq_us; /* per sequence in a decode step */
    double decode_ctx_us; /* per context token of a decoding sequence */
    uint32_t max_batch;    /* running sequences (vLLM max_num_seqs) */
    uint32_t token_budget; /* tokens per step (max_num_batched_tokens) */
    uint64_t kv_tokens;    /* KV cache capacity in tokens */
    uint32_t max_model_len;
    int cache_kind;             /* SIM_CACHE_* (built-in classes: paged) */
    uint64_t host_cache_tokens; /* slots: host prompt cache (0: none) */
    double slot_similarity;     /* slots: share of the prompt that picks a
                                 * slot by its prefix (llama.cpp's 0.1) */
};

/* The built-in classes, then those loaded from class files, then an entry
 * whose name is NULL. A class's index is its class id (the router's
 * instance class). */
#define SIM_BUILTIN_CLASSES 5u
#define SIM_MAX_CLASSES 32u
extern struct sim_class sim_classes[SIM_MAX_CLASSES + 1];
const struct sim_class *sim_class_find(const char *name);

/* Add the classes a class file describes (docs/simulator.md, "Engine
 * classes of your own"): one or more blocks of `key = value` lines, each
 * starting with `name = NAME`; `#` starts a comment. Keys: what,
 * overhead_us, prefill_us, ctx_double, decode_seq_us, decode_ctx_us,
 * max_batch, token_budget, kv_tokens, max_model_len, cache (paged or
 * slots), host_cache_tokens, slot_similarity. A name must be new (or
 * define the same class again). Not thread-safe: load before any run.
 * 0, or -1 with "PATH:LINE: reason" in err. */
int sim_class_file_load(const char *path, struct sim_err *err);

#define SIM_DEFAULT_CLASS "a100"
#define SIM_DEFAULT_RTT_US 1000u
/* Instances in a cluster at most (the library allows
 * LR_ROUTER_MAX_INSTANCES per router): a fleet of thousands of engines */
#define SIM_MAX_INSTANCES 4096u

struct sim_instance {
    char name[48];
    const struct sim_class *cls;
    uint32_t class_id; /* index in sim_classes */
    int prefix_caching;
    uint64_t rtt_us; /* gateway <-> engine round trip */
    uint32_t group;  /* which GROUP of the spec (a region, say) */
    int32_t role;    /* lr_role: LR_ROLE_BOTH (0), _PREFILL (1), _DECODE (2) */
    uint32_t node, rack, region; /* placement, all >= 1 */
};

/* Distance of two instances' placements: 0 one node, 1 one rack, 2 one
 * region, 3 regions apart (the library's levels). */
int sim_placement_level(const struct sim_instance *a,
                        const struct sim_instance *b);

struct sim_cluster {
    char spec[128];
    struct sim_instance *inst;
    uint32_t n;
    uint32_t n_groups;
    uint32_t n_prefill, n_decode; /* instances of those roles */
};

/* Parse a spec (see above). 0, or -1 with the reason in err. */
int sim_cluster_parse(const char *spec, struct sim_cluster *c,
                      struct sim_err *err);
void sim_cluster_free(struct sim_cluster *c);

/* A one-line description ("4 x a100 (1 ms) + 4 x v100 no-cache (1 ms)"). */
void sim_cluster_describe(const struct sim_cluster *c, char *buf, size_t len);

#endif /* LRSIM_CLUSTER_H */
