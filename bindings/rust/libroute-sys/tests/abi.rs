//! Checks every declaration in src/lib.rs against the real C headers: a C
//! program is generated from this crate's view of the API, compiled against
//! `<libroute.h>` (flags from pkg-config, via build.rs) with -Werror, run,
//! and its output compared with what Rust computes.
//!
//! - structs: size, alignment, and each field's offset and size;
//! - enum types: size and signedness;
//! - constants: value;
//! - deprecation: the functions marked `#[deprecated]` here are exactly
//!   those the headers mark `LR_DEPRECATED`;
//! - functions: each extern "C" declaration, translated to a C function
//!   pointer type, must initialise from the real function without an
//!   incompatible-pointer warning, so argument and return types (widths,
//!   pointer levels, const) all agree.
//!
//! Needs a C compiler: $CC, else `cc`.

use libroute_sys::*;
use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// (C expression key, Rust value) pairs; the C side prints the same keys.
struct Expect {
    c: String,
    rust: BTreeMap<String, String>,
}

impl Expect {
    fn line(&mut self, key: String, c_fmt: &str, c_args: &str, rust: String) {
        self.c
            .push_str(&format!("    printf(\"{key} {c_fmt}\\n\", {c_args});\n"));
        self.rust.insert(key, rust);
    }
}

macro_rules! structs {
    ($e:expr; $($s:ident { $($f:ident),* $(,)? })*) => {$(
        $e.line(
            stringify!($s).to_string(),
            "%zu %zu",
            &format!("sizeof({0}), _Alignof({0})", stringify!($s)),
            format!("{} {}", size_of::<$s>(), align_of::<$s>()),
        );
        $(
            $e.line(
                format!("{}.{}", stringify!($s), stringify!($f)),
                "%zu %zu",
                &format!("offsetof({0}, {1}), sizeof((({0} *)0)->{1})",
                         stringify!($s), stringify!($f)),
                format!("{} {}", offset_of!($s, $f), field_size(|x: &$s| &x.$f)),
            );
        )*
    )*};
}

macro_rules! enums {
    ($e:expr; $($t:ident),* $(,)?) => {$(
        $e.line(
            stringify!($t).to_string(),
            "%zu %d",
            &format!("sizeof({0}), !(({0})-1 > ({0})0)", stringify!($t)),
            format!("{} {}", size_of::<$t>(), (<$t>::MIN != 0) as i32),
        );
    )*};
}

macro_rules! constants {
    ($e:expr; $($c:ident),* $(,)?) => {$(
        $e.line(
            stringify!($c).to_string(),
            "%lld",
            &format!("(long long)({})", stringify!($c)),
            format!("{}", $c as i128),
        );
    )*};
}

/// Rust type (as written in src/lib.rs) -> C type.
fn c_type(rust: &str) -> String {
    let t = rust.trim();
    if let Some(rest) = t.strip_prefix("*const ") {
        return format!("{} const *", c_type(rest));
    }
    if let Some(rest) = t.strip_prefix("*mut ") {
        return format!("{} *", c_type(rest));
    }
    match t {
        "u8" => "uint8_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "usize" => "size_t",
        "f32" => "float",
        "f64" => "double",
        "c_int" => "int",
        "c_uint" => "unsigned",
        "c_char" => "char",
        "c_void" => "void",
        lr if lr.starts_with("lr_") => lr,
        other => panic!("no C type for Rust type `{other}`"),
    }
    .to_string()
}

/// The functions of the extern "C" block: (name, C return type, C params).
fn declarations() -> Vec<(String, String, Vec<String>)> {
    let src = include_str!("../src/lib.rs");
    let start = src.find("extern \"C\" {").expect("no extern block");
    let body = &src[start..];
    let mut out = Vec::new();
    for decl in body.split("pub fn ").skip(1) {
        let decl = &decl[..decl.find(';').expect("unterminated declaration")];
        let decl: String = decl
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        let open = decl.find('(').unwrap();
        let close = decl.rfind(')').unwrap();
        let name = decl[..open].trim().to_string();
        let params: Vec<String> = decl[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| c_type(p.split_once(':').expect("unnamed parameter").1))
            .collect();
        let ret = match decl[close + 1..].trim().strip_prefix("->") {
            Some(r) => c_type(r),
            None => "void".to_string(),
        };
        out.push((name, ret, params));
    }
    out
}

#[test]
fn declarations_match_the_c_headers() {
    let mut e = Expect {
        c: String::new(),
        rust: BTreeMap::new(),
    };
    structs!(e;
        lr_allocator { alloc, realloc, free, ud }
        lr_bounds { status, flags, lo, hi, def }
        lr_index_options { struct_size, allocator, seed, capacity_blocks, ttl_ns,
            block_tokens, max_instances, journal_capacity, engine_map_capacity,
            replica_id, remote_ttl_ns, eviction, clock_skew_ns }
        lr_mm_input { identifier, offset, length }
        lr_prompt { struct_size, tokens, n_tokens, boundaries, n_boundaries,
            tenant_salt, keys, n_keys, mm, n_mm }
        lr_index_hit { instance, tokens }
        lr_index_match_result { struct_size, hits, hits_capacity, n_hits,
            deepest_tokens, prompt_blocks, hit_size }
        lr_kv_stored { struct_size, block_hashes, n_blocks, parent_hash, has_parent,
            block_size, token_ids, n_tokens, tenant_salt, tier, mm_hashes }
        lr_index_stats { struct_size, blocks, remote_blocks, prefixes, instances,
            engine_hashes, bytes, evicted_blocks, expired_blocks, learned_blocks }
        lr_ring_options { struct_size, allocator, vnodes, max_instances }
        lr_load_options { struct_size, allocator, max_instances, max_requests, rtt_alpha }
        lr_dispatch { struct_size, request_id, instance, prompt_tokens, cached_tokens,
            expected_output_tokens, alt_instance, alt_cached_tokens, now_ns,
            prefill_instance, prefill_cached_tokens }
        lr_engine_stats { struct_size, running, waiting, kv_use, scraped_ns }
        lr_load_snapshot { struct_size, instance_class, prefix_caching, inflight, queued,
            prefill_tokens, queued_tokens, decode_tokens, kv_tokens, has_stats, running,
            waiting, kv_use, scraped_ns, has_rtt, rtt_ns, last_first_token_ns,
            queue_since_ns, prompt_tokens }
        lr_mlp_options { struct_size, allocator, seed, n_inputs, hidden_layers, width,
            batch_size, dropout, learning_rate, weight_decay, grad_clip }
        lr_learner_options { struct_size, allocator, seed, n_features, fifo_capacity,
            replay_capacity, pending_capacity, min_samples, retrain_every, epochs,
            max_abs_reward, mlp }
        lr_learner_stats { struct_size, samples, dropped_full, dropped_range, model_round,
            model_samples, model_replay, model_mse, online_mae, predicted }
        lr_candidate { instance, cached_tokens, inflight, queued, prefill_tokens,
            queued_tokens, prompt_tokens, decode_tokens, kv_tokens, running, waiting,
            kv_use, rtt_ms, prefill_rate, stall_s, cached_age_s, instance_class,
            prefix_caching, ring_rank, flags, tree_blocks, ttft_s_per_token, ttft_base_s,
            ttft_s_per_decoding, prefill_tokens_avg, route_rate, cached_lost,
            adapter_missing, adapter_free, adapter_load_s, adapters_resident,
            adapter_evicts, cpu_tokens, disk_tokens, role, node, rack, region, decode_s,
            sibling_tokens, sibling_fork_tokens, sibling_lost }
        lr_policy_input { struct_size, params, n_params, prompt_tokens,
            expected_output_tokens, block_tokens, last_instance, seed, model,
            ttft_budget_s }
        lr_cost_options { struct_size, allocator, kind, seed }
        lr_cost_tuner_stats { struct_size, state, trials, accepted, sigma,
            incumbent_p95_s, samples }
        lr_router_options { struct_size, allocator, seed, policy, max_instances,
            max_requests, block_tokens, index_capacity_blocks, index_ttl_ns, ring_vnodes,
            flags, learner, hash_seed, replica_id, remote_ttl_ns, gauge_ttl_ns,
            max_peers, index_eviction, queue_capacity, queue_tenants, queue_tokens, marks }
        lr_instance_spec { struct_size, name, instance_class, prefix_caching, rtt_ns,
            models, n_models, max_adapters, role, node, rack, region }
        lr_adapter_stats { struct_size, running, n_running, waiting, n_waiting,
            max_adapters, scraped_ns }
        lr_class_spec { struct_size, prefill_tokens_per_s }
        lr_request { struct_size, id, tokens, n_tokens, boundaries, n_boundaries,
            tenant_salt, session, has_session, expected_output_tokens, flags, now_ns,
            tenant, deadline_ns, urgency, model, adapter, mm, n_mm }
        lr_score { instance, cached_tokens, score }
        lr_decision { struct_size, instance, reason, cached_tokens, best_cached_tokens,
            cost, alt_instance, scores, scores_capacity, n_scores, decider, seed,
            score_size, prefill_instance, prefill_reason, prefill_cached_tokens, reserved,
            transfer_s }
        lr_move { request_id, from, to, benefit_s }
        lr_dispatched { request_id, status, instance, reason, cached_tokens, cost,
            waited_ns, urgency, tenant, prefill_instance, prefill_reason,
            prefill_cached_tokens, reserved, transfer_s }
        lr_router_stats { struct_size, routes, dry_runs, inflight, instances, routable,
            by_reason, prompt_tokens, cached_tokens, kv_batches, kv_duplicates, kv_gaps,
            kv_restarts, kv_gaps_open, deltas_exported, deltas_imported, deltas_skipped,
            deltas_lost, gauges_exported, gauges_imported, gauges_skipped, gauges_expired,
            peers_live, observed_reports, observed_expected_tokens, observed_cached_tokens,
            waiting, waiting_tokens, waited, waited_dispatched, waited_expired,
            waited_cancelled, waited_dropped, shed, wait_ns, adapter_routes,
            adapter_loads }
        lr_vllm_batch_info { struct_size, timestamp, dp_rank, events, stored, removed,
            cleared, unplaced, skipped, done, invalid, seq_state, next_seq }
        lr_kv_source { struct_size, has_seq, gap, next_seq, batches, duplicates, gaps,
            restarts }
    );
    enums!(e; lr_status, lr_trust, lr_policy, lr_reason, lr_param, lr_cost_kind,
        lr_cost_param, lr_kv_seq, lr_eviction, lr_tier, lr_role);
    constants!(e;
        LR_VERSION_MAJOR, LR_VERSION_MINOR,
        LR_OK, LR_EINVAL, LR_ENOMEM, LR_ERANGE, LR_ENOENT, LR_EEXIST, LR_ELIMIT,
        LR_ECORRUPT, LR_EVERSION, LR_ENOTSUP, LR_ESTATE, LR_EBUFSIZE, LR_EGAP,
        LR_EBUSY, LR_EEXPIRED,
        LR_KV_SEQ_NONE, LR_KV_SEQ_APPLIED, LR_KV_SEQ_FIRST, LR_KV_SEQ_DUPLICATE,
        LR_KV_SEQ_GAP, LR_KV_SEQ_RESTART, LR_KV_SOURCE_SIZE_V1, LR_ROUTER_MAX_PEERS,
        LR_ROUTER_OPTIONS_SIZE_V2, LR_ROUTER_STATS_SIZE_V2, LR_INDEX_OPTIONS_SIZE_V2,
        LR_VLLM_BATCH_INFO_SIZE_V2, LR_EVICT_REMOTE_FIRST, LR_EVICT_LRU,
        LR_INSTANCE_NONE, LR_BOUNDS_INTEGER,
        LR_TRUST_LOCAL, LR_TRUST_REMOTE,
        LR_INDEX_MAX_TOKENS, LR_INDEX_MAX_BLOCK_TOKENS, LR_INDEX_MAX_CAPACITY,
        LR_INDEX_MAX_INSTANCES, LR_MATCH_NO_TOUCH,
        LR_INDEX_OPTIONS_SIZE_V1, LR_PROMPT_SIZE_V1, LR_INDEX_MATCH_RESULT_SIZE_V1,
        LR_INDEX_MATCH_RESULT_SIZE_V2, LR_INDEX_HIT_SIZE_V1,
        LR_KV_STORED_SIZE_V1, LR_INDEX_STATS_SIZE_V1,
        LR_RING_MAX_K, LR_RING_MAX_NAME, LR_RING_MAX_VNODES, LR_RING_OPTIONS_SIZE_V1,
        LR_TEXT_MAX_WIDTH, LR_TEXT_MAX_BYTES,
        LR_LOAD_MAX_INSTANCES, LR_LOAD_MAX_REQUESTS, LR_LOAD_MAX_CLASSES,
        LR_LOAD_MAX_RTT_NS, LR_LOAD_OPTIONS_SIZE_V1, LR_DISPATCH_SIZE_V1,
        LR_ENGINE_STATS_SIZE_V1, LR_LOAD_SNAPSHOT_SIZE_V1,
        LR_MLP_MAX_INPUTS, LR_MLP_MAX_LAYERS, LR_MLP_MAX_WIDTH, LR_MLP_MAX_BATCH,
        LR_MLP_OPTIONS_SIZE_V1,
        LR_LEARNER_MAX_SAMPLES, LR_LEARNER_OPTIONS_SIZE_V1, LR_LEARN_FORCE,
        LR_LEARNER_STATS_SIZE_V1,
        LR_POLICY_RANDOM, LR_POLICY_ROUND_ROBIN, LR_POLICY_LEAST_REQUEST,
        LR_POLICY_LEAST_LOAD, LR_POLICY_SESSION_AFFINITY, LR_POLICY_CONSISTENT_HASH,
        LR_POLICY_PREFIX_CACHE, LR_POLICY_PREFIX_CACHE_AND_LOAD,
        LR_POLICY_SGLANG_CACHE_AWARE, LR_POLICY_PREBLE, LR_POLICY_MIN_TTFT,
        LR_POLICY_DYNAMO, LR_POLICY_DUALMAP, LR_POLICY_GORGO, LR_POLICY_RANVIER,
        LR_POLICY_LODESTAR, LR_POLICY_ADAPTIVE, LR_CANDIDATE_SIZE_V1, LR_RING_KEY_NONE, LR_RING_KEY_SESSION,
        LR_RING_KEY_PREFIX, LR_RING_KEY_HOTNESS, LR_SCORE_SIZE_V1, LR_DECISION_SIZE_V2,
        LR_POLICY_INPUT_SIZE_V1,
        LR_COST_TTFT, LR_COST_GORGO, LR_COST_DYNAMO, LR_COST_W_RTT, LR_COST_W_QUEUE,
        LR_COST_W_STALL, LR_COST_W_UNCACHED, LR_COST_BLOCK_TOKENS,
        LR_COST_QUEUE_AT_FIRST_TOKEN, LR_COST_SIGMA, LR_COST_W_RTT_MAX,
        LR_COST_W_QUEUE_MIN, LR_COST_TUNE_WINDOW, LR_COST_TUNE_HOP,
        LR_COST_OPTIONS_SIZE_V1, LR_COST_TUNER_STATS_SIZE_V1,
        LR_ROUTER_OPTIONS_SIZE_V1, LR_ROUTER_MAX_INSTANCES, LR_INSTANCE_SPEC_SIZE_V1,
        LR_CLASS_SPEC_SIZE_V1, LR_REQUEST_SIZE_V1,
        LR_ROUTE_DRY_RUN, LR_ROUTE_SCORES, LR_ROUTE_NO_LEARN,
        LR_REASON_NONE, LR_REASON_RANDOM, LR_REASON_ROUND_ROBIN, LR_REASON_LEAST_LOADED,
        LR_REASON_SESSION, LR_REASON_HASH, LR_REASON_PREFIX_HIT, LR_REASON_LOAD_OVERRIDE,
        LR_REASON_SLO_SWITCH, LR_REASON_FALLBACK, LR_REASON_MIN_COST, LR_REASON_SAMPLED,
        LR_REASON_K_FILTER, LR_REASON_EXPLORE, LR_REASON_COLD_START, LR_REASON_OOD,
        LR_DECISION_SIZE_V1,
        LR_PARAM_PREFIX_MIN_RATIO, LR_PARAM_BOUNDED_LOAD, LR_PARAM_AIBRIX_IMBALANCE,
        LR_PARAM_AIBRIX_STDDEV, LR_PARAM_SGLANG_ABS, LR_PARAM_SGLANG_REL,
        LR_PARAM_SGLANG_MIN_RATIO, LR_PARAM_PREBLE_HIT, LR_PARAM_DYNAMO_OVERLAP,
        LR_PARAM_DYNAMO_TEMPERATURE, LR_PARAM_TTFT_SLO_S, LR_PARAM_DUALMAP_KEY_TOKENS,
        LR_PARAM_DUALMAP_MAX_KEY_BLOCKS, LR_PARAM_DUALMAP_WINDOW, LR_PARAM_GORGO_W_RTT,
        LR_PARAM_GORGO_W_QUEUE, LR_PARAM_GORGO_SIGMA, LR_PARAM_GORGO_FROZEN,
        LR_PARAM_GORGO_W_RTT_MAX, LR_PARAM_GORGO_W_QUEUE_MIN, LR_PARAM_RANVIER_PRESSURE,
        LR_PARAM_SESSION_TOKENS, LR_PARAM_STATS_MAX_AGE_S, LR_PARAM_DEFAULT_OUTPUT_TOKENS,
        LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN, LR_PARAM_LODESTAR_EPSILON,
        LR_PARAM_LODESTAR_TIE, LR_PARAM_LODESTAR_KV_THRESHOLD,
        LR_PARAM_LODESTAR_KFILTER_TOKENS, LR_PARAM_LODESTAR_OOD, LR_PARAM_LODESTAR_FALLBACK,
        LR_PARAM_LODESTAR_CANDIDATES, LR_PARAM_LODESTAR_MAX_TTFT_S,
        LR_PARAM_ADAPTIVE_WORK_WEIGHT, LR_PARAM_ADAPTIVE_CONTENTION, LR_PARAM_ADAPTIVE_TIE_S,
        LR_PARAM_ADAPTIVE_FRESH_S, LR_PARAM_ADAPTIVE_RTT_WEIGHT, LR_PARAM_ADAPTIVE_CALIBRATE,
        LR_PARAM_CLOCK_SKEW_S, LR_ROUTER_MAX_TIME_NS, LR_MAX_TIME_NS,
        LR_INDEX_OPTIONS_SIZE_V3,
        LR_ROUTER_STATS_SIZE_V1, LR_LODESTAR_FEATURES, LR_VLLM_BATCH_INFO_SIZE_V1,
        LR_ROUTER_STATS_SIZE_V3, LR_ROUTER_OPTIONS_SIZE_V3, LR_REQUEST_SIZE_V2,
        LR_ROUTER_MAX_WAITING, LR_ROUTER_MAX_TENANTS, LR_ROUTER_MAX_QUEUE_TOKENS,
        LR_ROUTER_URGENCIES, LR_ROUTE_MAY_WAIT, LR_ROUTE_SHEDDABLE, LR_DISPATCHED_SIZE_V1,
        LR_REASON_WAITING, LR_PARAM_SATURATION_QUEUE, LR_PARAM_SATURATION_KV,
        LR_PARAM_FAIR_INPUT_WEIGHT, LR_PARAM_FAIR_OUTPUT_WEIGHT,
        LR_PARAM_ADAPTIVE_DEADLINE, LR_PARAM_SATURATION_PREFILL_S, LR_POLICY_INPUT_SIZE_V2,
        LR_CANDIDATE_SIZE_V2,
        LR_POLICY_LORA_AFFINITY, LR_POLICY_AIBRIX_LORA, LR_REASON_ADAPTER,
        LR_PARAM_ADAPTER_LOAD_S, LR_CANDIDATE_SIZE_V3, LR_INSTANCE_SPEC_SIZE_V2,
        LR_ROUTER_MAX_NAME, LR_ROUTER_MAX_MODELS, LR_ROUTER_MAX_ADAPTERS,
        LR_ADAPTER_STATS_SIZE_V1, LR_REQUEST_SIZE_V3, LR_ROUTER_STATS_SIZE_V4,
        LR_TIER_GPU, LR_TIER_CPU, LR_TIER_DISK, LR_MATCH_TIER_CPU, LR_MATCH_TIER_DISK,
        LR_KV_STORED_SIZE_V2, LR_PARAM_TIER_CPU_WEIGHT, LR_PARAM_TIER_DISK_WEIGHT,
        LR_INDEX_MAX_MM_IDENTIFIER, LR_PROMPT_SIZE_V2, LR_REQUEST_SIZE_V4,
        LR_KV_STORED_SIZE_V3,
        LR_POLICY_LLMD_PD, LR_POLICY_DYNAMO_PD, LR_ROLE_BOTH, LR_ROLE_PREFILL,
        LR_ROLE_DECODE, LR_REASON_WHOLE, LR_PARAM_KV_BYTES_PER_TOKEN, LR_PARAM_KV_GBPS_NODE,
        LR_PARAM_KV_GBPS_RACK, LR_PARAM_KV_GBPS_REGION, LR_PARAM_KV_GBPS_WAN,
        LR_PARAM_PD_PREFILL_POLICY, LR_PARAM_PD_MIN_UNCACHED, LR_PARAM_PD_LOCAL_MAX_TOKENS,
        LR_PARAM_PD_LOCAL_MAX_RATIO, LR_PARAM_ADAPTIVE_PD_STALL, LR_DISPATCH_SIZE_V2,
        LR_CANDIDATE_SIZE_V4, LR_DECISION_SIZE_V3, LR_INSTANCE_SPEC_SIZE_V3,
        LR_DISPATCHED_SIZE_V2, LR_PARAM_NARROW_ABOVE, LR_PARAM_NARROW_WIDTH,
        LR_ROUTER_OPTIONS_SIZE_V4, LR_ROUTER_MAX_MARKS, LR_CANDIDATE_SIZE_V5,
        LR_CANDIDATE_SIZE_V6,
    );

    let decls = declarations();
    assert!(decls.len() > 90, "parsed only {} declarations", decls.len());
    let mut checks = String::new();
    let mut uses = String::new();
    for (name, ret, params) in &decls {
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        checks.push_str(&format!(
            "static {ret} (*const chk_{name})({params}) = {name};\n"
        ));
        uses.push_str(&format!("    n += chk_{name} != 0;\n"));
    }
    e.line("functions".into(), "%d", "n", decls.len().to_string());

    // The deprecated functions are declared too; taking their address
    // must not fail the -Werror build (the header's attribute stays on).
    let program = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <libroute.h>\n\n\
         #pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"\n{checks}\n\
         int main(void)\n{{\n    int n = 0;\n{uses}{}    return 0;\n}}\n",
        e.c
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libroute-sys-abi");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, &program).unwrap();

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let compile = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .args(env!("LIBROUTE_SYS_CFLAGS").split_whitespace())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(env!("LIBROUTE_SYS_LIBS").split_whitespace())
        .output()
        .unwrap_or_else(|err| panic!("cannot run the C compiler `{cc}`: {err}"));
    assert!(
        compile.status.success(),
        "the declarations do not match the headers ({}):\n{}",
        src.display(),
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = Command::new(&exe).output().expect("run the ABI probe");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let c: BTreeMap<String, String> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();

    let mut bad = Vec::new();
    for (key, rust) in &e.rust {
        match c.get(key) {
            Some(cv) if cv == rust => {}
            Some(cv) => bad.push(format!("{key}: C {cv}, Rust {rust}")),
            None => bad.push(format!("{key}: missing from the C output")),
        }
    }
    assert!(bad.is_empty(), "ABI mismatches:\n  {}", bad.join("\n  "));
}

/// The translation the signature check relies on.
#[test]
fn c_type_translation() {
    assert_eq!(c_type("*mut *mut lr_blob"), "lr_blob * *");
    assert_eq!(c_type("*const lr_router"), "lr_router const *");
    assert_eq!(c_type("*const c_char"), "char const *");
    assert_eq!(c_type("usize"), "size_t");
    let d = declarations();
    let route = d.iter().find(|(n, _, _)| n == "lr_router_route").unwrap();
    assert_eq!(route.1, "lr_status");
    assert_eq!(
        route.2,
        ["lr_router *", "lr_request const *", "lr_decision *"]
    );
}

/// Names of the functions marked `#[deprecated]` in src/lib.rs: an
/// attribute line, then the function it applies to.
fn rust_deprecated() -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut pending = false;
    for line in include_str!("../src/lib.rs").lines().map(str::trim_start) {
        if line.starts_with("#[deprecated") {
            pending = true;
        } else if let Some(decl) = line.strip_prefix("pub fn ").filter(|_| pending) {
            out.insert(decl[..decl.find('(').unwrap()].to_string());
            pending = false;
        }
    }
    out
}

/// Names of the functions the public headers mark `LR_DEPRECATED`: the
/// declaration that follows each `LR_DEPRECATED(...)` use.
fn header_deprecated() -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut seen = 0;
    for dir in env!("LIBROUTE_SYS_CFLAGS")
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("-I"))
    {
        let Ok(entries) = std::fs::read_dir(PathBuf::from(dir).join("libroute")) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension() != Some(std::ffi::OsStr::new("h")) {
                continue;
            }
            seen += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("LR_DEPRECATED(") {
                rest = &rest[at + "LR_DEPRECATED(".len()..];
                let line_start = text.len() - rest.len();
                let before = &text[..line_start];
                let line = &before[before.rfind('\n').map_or(0, |i| i + 1)..];
                if line.trim_start().starts_with("#") {
                    continue; // the macro's own definitions
                }
                let decl = &rest[rest.find(')').unwrap() + 1..];
                let decl = &decl[..decl.find('(').unwrap()];
                let name = decl.split_whitespace().last().unwrap();
                out.insert(name.trim_start_matches('*').to_string());
            }
        }
    }
    assert!(seen > 5, "found no public headers in LIBROUTE_SYS_CFLAGS");
    out
}

#[test]
fn deprecations_match_the_headers() {
    let header = header_deprecated();
    assert!(
        header.contains("lr_router_param_bounds"),
        "header scan found {header:?}"
    );
    assert_eq!(rust_deprecated(), header);
}
