//! Raw declarations of libroute's public C API (`<libroute.h>`, 0.2).
//!
//! Written by hand from `include/libroute/*.h`, which remain the reference:
//! every type, constant and function there, in the same order, with the
//! same names. `tests/abi.rs` compiles a C program against the real headers
//! and checks every struct's size, alignment and field offsets, every
//! constant, and every function's signature against these declarations.
//!
//! Conventions:
//! - C enums (`lr_status`, `lr_policy`, ...) are `c_uint` type aliases with
//!   one constant per value, never Rust enums: a newer library may return a
//!   value this crate does not know.
//! - Enum-typed parameters and keys are `i32` in the functions (the C API
//!   takes `int32_t` since 0.2); the enum types and their constants keep
//!   the C enum's own type (`c_uint`).
//! - Size-prefixed structs (a leading `struct_size`) must be initialised
//!   with their `lr_*_init_sized()` function and this crate's
//!   `size_of::<T>()` (in C, `lr_*_init()` is a macro passing `sizeof`),
//!   which sets the size and the defaults. `lr_index_stats` has none: set
//!   `struct_size` to `size_of::<lr_index_stats>()` and zero the rest.
//!   Arrays of structs are passed with this crate's element size
//!   (`lr_decision.score_size`, `row_size`, `move_size`).
//! - The counts of policies, parameters, reasons and Lodestar features are
//!   the loaded library's (`lr_policy_count()`, ...), never constants.
//! - Functions the headers mark deprecated carry `#[deprecated]`.
//! - Opaque handles are zero-sized `#[repr(C)]` structs used only behind
//!   pointers.
//!
//! Use the `libroute` crate for a safe interface.
#![no_std]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::marker::{PhantomData, PhantomPinned};
use core::mem::{offset_of, size_of};

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    )*};
}

// ---- lr_version.h ------------------------------------------------------------

/// The release series these declarations follow (patch releases never
/// change the ABI). The build script refuses a libroute of another series;
/// compare `lr_version_number() / 100` with `LR_VERSION_MAJOR * 100 +
/// LR_VERSION_MINOR` at run time to detect a swapped shared library.
pub const LR_VERSION_MAJOR: c_uint = 0;
pub const LR_VERSION_MINOR: c_uint = 3;

// ---- lr_common.h ---------------------------------------------------------------

pub type lr_status = c_uint;
pub const LR_OK: lr_status = 0;
pub const LR_EINVAL: lr_status = 1;
pub const LR_ENOMEM: lr_status = 2;
pub const LR_ERANGE: lr_status = 3;
pub const LR_ENOENT: lr_status = 4;
pub const LR_EEXIST: lr_status = 5;
pub const LR_ELIMIT: lr_status = 6;
pub const LR_ECORRUPT: lr_status = 7;
pub const LR_EVERSION: lr_status = 8;
pub const LR_ENOTSUP: lr_status = 9;
pub const LR_ESTATE: lr_status = 10;
pub const LR_EBUFSIZE: lr_status = 11;
pub const LR_EGAP: lr_status = 12;
pub const LR_EBUSY: lr_status = 13;
pub const LR_EEXPIRED: lr_status = 14;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_allocator {
    pub alloc: Option<unsafe extern "C" fn(ud: *mut c_void, size: usize) -> *mut c_void>,
    pub realloc: Option<
        unsafe extern "C" fn(
            ud: *mut c_void,
            ptr: *mut c_void,
            old_size: usize,
            new_size: usize,
        ) -> *mut c_void,
    >,
    pub free: Option<unsafe extern "C" fn(ud: *mut c_void, ptr: *mut c_void, size: usize)>,
    pub ud: *mut c_void,
}

pub const LR_INSTANCE_NONE: u32 = u32::MAX;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_bounds {
    /// An lr_status (int32_t since 0.2).
    pub status: i32,
    /// `LR_BOUNDS_INTEGER` (0.2; padding in 0.1).
    pub flags: i32,
    pub lo: f64,
    pub hi: f64,
    pub def: f64,
}

pub const LR_BOUNDS_INTEGER: c_int = 1;

opaque! {
    /// Bytes the library allocated for the caller; free with lr_blob_destroy.
    lr_blob;
}

// ---- lr_index.h ----------------------------------------------------------------

opaque! {
    /// The prefix index. One thread at a time.
    lr_index;
}

pub type lr_trust = c_uint;
pub const LR_TRUST_LOCAL: lr_trust = 0;
pub const LR_TRUST_REMOTE: lr_trust = 1;

pub const LR_INDEX_MAX_TOKENS: c_uint = 1 << 26;
pub const LR_INDEX_MAX_BLOCK_TOKENS: c_uint = 4096;
pub const LR_INDEX_MAX_CAPACITY: u64 = 1 << 31;
pub const LR_INDEX_MAX_INSTANCES: c_uint = 65534;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_index_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub seed: u64,
    pub capacity_blocks: u64,
    pub ttl_ns: u64,
    pub block_tokens: u32,
    pub max_instances: u32,
    pub journal_capacity: u32,
    pub engine_map_capacity: u64,
    pub replica_id: u64,
    pub remote_ttl_ns: u64,
    pub eviction: i32,
    pub clock_skew_ns: u64,
}
/// lr_eviction: what a full index drops first.
pub type lr_eviction = c_uint;
pub const LR_EVICT_REMOTE_FIRST: lr_eviction = 0;
pub const LR_EVICT_LRU: lr_eviction = 1;
/// lr_tier: the memory tier of an engine's KV cache a block is on (0.3).
pub type lr_tier = c_uint;
pub const LR_TIER_GPU: lr_tier = 0;
pub const LR_TIER_CPU: lr_tier = 1;
pub const LR_TIER_DISK: lr_tier = 2;
pub const LR_INDEX_OPTIONS_SIZE_V1: usize =
    offset_of!(lr_index_options, engine_map_capacity) + size_of::<u64>();
pub const LR_INDEX_OPTIONS_SIZE_V2: usize = offset_of!(lr_index_options, eviction) + 4;
pub const LR_INDEX_OPTIONS_SIZE_V3: usize =
    offset_of!(lr_index_options, clock_skew_ns) + size_of::<u64>();

/// Largest lr_mm_input.identifier, in bytes (0.3).
pub const LR_INDEX_MAX_MM_IDENTIFIER: c_uint = 255;

/// One multimodal input of a prompt (0.3): placeholder tokens
/// [offset, offset + length), `identifier` NUL-terminated, 1 to
/// LR_INDEX_MAX_MM_IDENTIFIER bytes. Not size-prefixed.
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_mm_input {
    pub identifier: *const c_char,
    pub offset: u32,
    pub length: u32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_prompt {
    pub struct_size: usize,
    pub tokens: *const u32,
    pub n_tokens: usize,
    pub boundaries: *const u32,
    pub n_boundaries: usize,
    pub tenant_salt: u64,
    pub keys: *const u64,
    pub n_keys: usize,
    /// Its multimodal inputs, by ascending offset (0.3).
    pub mm: *const lr_mm_input,
    pub n_mm: usize,
}
pub const LR_PROMPT_SIZE_V1: usize = offset_of!(lr_prompt, n_keys) + size_of::<usize>();
pub const LR_PROMPT_SIZE_V2: usize = offset_of!(lr_prompt, n_mm) + size_of::<usize>();

#[repr(C)]
#[derive(Debug, Copy, Clone, Default, PartialEq, Eq)]
pub struct lr_index_hit {
    pub instance: u32,
    pub tokens: u32,
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_index_match_result {
    pub struct_size: usize,
    pub hits: *mut lr_index_hit,
    pub hits_capacity: usize,
    pub n_hits: usize,
    pub deepest_tokens: u64,
    pub prompt_blocks: u64,
    /// Bytes from one hit to the next (0.2); 0 means the 0.1 size.
    pub hit_size: usize,
}
pub const LR_INDEX_MATCH_RESULT_SIZE_V1: usize =
    offset_of!(lr_index_match_result, prompt_blocks) + size_of::<u64>();
pub const LR_INDEX_MATCH_RESULT_SIZE_V2: usize =
    offset_of!(lr_index_match_result, hit_size) + size_of::<usize>();
pub const LR_INDEX_HIT_SIZE_V1: usize = offset_of!(lr_index_hit, tokens) + size_of::<u32>();

pub const LR_MATCH_NO_TOUCH: c_uint = 1;
/// lr_index_match() flags: answer for a lower tier's routes (0.3).
pub const LR_MATCH_TIER_CPU: c_uint = 2;
pub const LR_MATCH_TIER_DISK: c_uint = 4;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_kv_stored {
    pub struct_size: usize,
    pub block_hashes: *const u64,
    pub n_blocks: usize,
    pub parent_hash: u64,
    pub has_parent: i32,
    pub block_size: u32,
    pub token_ids: *const u32,
    pub n_tokens: usize,
    pub tenant_salt: u64,
    /// An lr_tier: the tier the engine stored the blocks on (0.3).
    pub tier: i32,
    /// NULL, or n_blocks multimodal hashes, one per block (0.3).
    pub mm_hashes: *const u64,
}
pub const LR_KV_STORED_SIZE_V1: usize = offset_of!(lr_kv_stored, tenant_salt) + 8;
pub const LR_KV_STORED_SIZE_V2: usize = offset_of!(lr_kv_stored, tier) + 4;
pub const LR_KV_STORED_SIZE_V3: usize =
    offset_of!(lr_kv_stored, mm_hashes) + size_of::<*const u64>();

#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct lr_index_stats {
    pub struct_size: usize,
    pub blocks: u64,
    pub remote_blocks: u64,
    pub prefixes: u64,
    pub instances: u64,
    pub engine_hashes: u64,
    pub bytes: u64,
    pub evicted_blocks: u64,
    pub expired_blocks: u64,
    pub learned_blocks: u64,
}
pub const LR_INDEX_STATS_SIZE_V1: usize =
    offset_of!(lr_index_stats, learned_blocks) + size_of::<u64>();

// ---- lr_ring.h -----------------------------------------------------------------

opaque! {
    /// The dual consistent-hash ring. Mutators one thread at a time; the
    /// const queries may run concurrently with each other.
    lr_ring;
}

pub const LR_RING_MAX_K: c_uint = 8;
pub const LR_RING_MAX_NAME: c_uint = 255;
pub const LR_RING_MAX_VNODES: c_uint = 4096;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_ring_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub vnodes: u32,
    pub max_instances: u32,
}
pub const LR_RING_OPTIONS_SIZE_V1: usize =
    offset_of!(lr_ring_options, max_instances) + size_of::<u32>();

// ---- lr_text.h -----------------------------------------------------------------

pub const LR_TEXT_MAX_WIDTH: c_uint = 64;
pub const LR_TEXT_MAX_BYTES: u64 = 1 << 30;

// ---- lr_load.h -----------------------------------------------------------------

opaque! {
    /// The load tracker. One thread at a time.
    lr_load;
}

pub const LR_LOAD_MAX_INSTANCES: c_uint = 65534;
pub const LR_LOAD_MAX_REQUESTS: c_uint = 1 << 24;
pub const LR_LOAD_MAX_CLASSES: c_uint = 64;
pub const LR_LOAD_MAX_RTT_NS: u64 = 60_000_000_000;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_load_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub max_instances: u32,
    pub max_requests: u32,
    pub rtt_alpha: f64,
}
pub const LR_LOAD_OPTIONS_SIZE_V1: usize = offset_of!(lr_load_options, rtt_alpha) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_dispatch {
    pub struct_size: usize,
    pub request_id: u64,
    pub instance: u32,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub expected_output_tokens: u32,
    pub alt_instance: u32,
    pub alt_cached_tokens: u32,
    pub now_ns: u64,
    /// The instance that prefills the request before `instance` decodes
    /// it (LR_INSTANCE_NONE: none), and its expected hit (0.3).
    pub prefill_instance: u32,
    pub prefill_cached_tokens: u32,
}
pub const LR_DISPATCH_SIZE_V1: usize = offset_of!(lr_dispatch, now_ns) + 8;
pub const LR_DISPATCH_SIZE_V2: usize = offset_of!(lr_dispatch, prefill_cached_tokens) + 4;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_engine_stats {
    pub struct_size: usize,
    pub running: u32,
    pub waiting: u32,
    pub kv_use: f64,
    pub scraped_ns: u64,
}
pub const LR_ENGINE_STATS_SIZE_V1: usize = offset_of!(lr_engine_stats, scraped_ns) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_load_snapshot {
    pub struct_size: usize,
    pub instance_class: u32,
    pub prefix_caching: i32,
    pub inflight: u32,
    pub queued: u32,
    pub prefill_tokens: u64,
    pub queued_tokens: u64,
    pub decode_tokens: u64,
    pub kv_tokens: u64,
    pub has_stats: i32,
    pub running: u32,
    pub waiting: u32,
    pub kv_use: f64,
    pub scraped_ns: u64,
    pub has_rtt: i32,
    pub rtt_ns: u64,
    pub last_first_token_ns: u64,
    pub queue_since_ns: u64,
    pub prompt_tokens: u64,
}
pub const LR_LOAD_SNAPSHOT_SIZE_V1: usize = offset_of!(lr_load_snapshot, prompt_tokens) + 8;

// ---- lr_mlp.h ------------------------------------------------------------------

opaque! {
    /// A small fully connected network. One thread at a time.
    lr_mlp;
}

pub const LR_MLP_MAX_INPUTS: c_uint = 256;
pub const LR_MLP_MAX_LAYERS: c_uint = 8;
pub const LR_MLP_MAX_WIDTH: c_uint = 1024;
pub const LR_MLP_MAX_BATCH: c_uint = 65536;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_mlp_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub seed: u64,
    pub n_inputs: u32,
    pub hidden_layers: u32,
    pub width: u32,
    pub batch_size: u32,
    pub dropout: f64,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub grad_clip: f64,
}
pub const LR_MLP_OPTIONS_SIZE_V1: usize = offset_of!(lr_mlp_options, grad_clip) + 8;

// ---- lr_learner.h --------------------------------------------------------------

opaque! {
    /// Lodestar's online learner. Serving calls one thread at a time,
    /// training calls one thread at a time; one of each may overlap.
    lr_learner;
}

pub const LR_LEARNER_MAX_SAMPLES: c_uint = 1 << 22;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_learner_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub seed: u64,
    pub n_features: u32,
    pub fifo_capacity: u32,
    pub replay_capacity: u32,
    pub pending_capacity: u32,
    pub min_samples: u32,
    pub retrain_every: u32,
    pub epochs: u32,
    pub max_abs_reward: f64,
    pub mlp: *const lr_mlp_options,
}
pub const LR_LEARNER_OPTIONS_SIZE_V1: usize =
    offset_of!(lr_learner_options, mlp) + size_of::<*const c_void>();

pub const LR_LEARN_FORCE: c_uint = 1;

#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct lr_learner_stats {
    pub struct_size: usize,
    pub samples: u64,
    pub dropped_full: u64,
    pub dropped_range: u64,
    pub model_round: u64,
    pub model_samples: u64,
    pub model_replay: u64,
    pub model_mse: f64,
    pub online_mae: f64,
    pub predicted: u64,
}
pub const LR_LEARNER_STATS_SIZE_V1: usize = offset_of!(lr_learner_stats, predicted) + 8;

// ---- lr_policy.h ---------------------------------------------------------------

pub type lr_policy = c_uint;
pub const LR_POLICY_RANDOM: lr_policy = 0;
pub const LR_POLICY_ROUND_ROBIN: lr_policy = 1;
pub const LR_POLICY_LEAST_REQUEST: lr_policy = 2;
pub const LR_POLICY_LEAST_LOAD: lr_policy = 3;
pub const LR_POLICY_SESSION_AFFINITY: lr_policy = 4;
pub const LR_POLICY_CONSISTENT_HASH: lr_policy = 5;
pub const LR_POLICY_PREFIX_CACHE: lr_policy = 6;
pub const LR_POLICY_PREFIX_CACHE_AND_LOAD: lr_policy = 7;
pub const LR_POLICY_SGLANG_CACHE_AWARE: lr_policy = 8;
pub const LR_POLICY_PREBLE: lr_policy = 9;
pub const LR_POLICY_MIN_TTFT: lr_policy = 10;
pub const LR_POLICY_DYNAMO: lr_policy = 11;
pub const LR_POLICY_DUALMAP: lr_policy = 12;
pub const LR_POLICY_GORGO: lr_policy = 13;
pub const LR_POLICY_RANVIER: lr_policy = 14;
pub const LR_POLICY_LODESTAR: lr_policy = 15;
pub const LR_POLICY_ADAPTIVE: lr_policy = 16;
pub const LR_POLICY_LORA_AFFINITY: lr_policy = 17;
pub const LR_POLICY_AIBRIX_LORA: lr_policy = 18;
pub const LR_POLICY_LLMD_PD: lr_policy = 19;
pub const LR_POLICY_DYNAMO_PD: lr_policy = 20;

/// lr_role: an instance's part in a disaggregated fleet (0.3).
pub type lr_role = c_uint;
pub const LR_ROLE_BOTH: lr_role = 0;
pub const LR_ROLE_PREFILL: lr_role = 1;
pub const LR_ROLE_DECODE: lr_role = 2;

pub type lr_reason = c_uint;
pub const LR_REASON_NONE: lr_reason = 0;
pub const LR_REASON_RANDOM: lr_reason = 1;
pub const LR_REASON_ROUND_ROBIN: lr_reason = 2;
pub const LR_REASON_LEAST_LOADED: lr_reason = 3;
pub const LR_REASON_SESSION: lr_reason = 4;
pub const LR_REASON_HASH: lr_reason = 5;
pub const LR_REASON_PREFIX_HIT: lr_reason = 6;
pub const LR_REASON_LOAD_OVERRIDE: lr_reason = 7;
pub const LR_REASON_SLO_SWITCH: lr_reason = 8;
pub const LR_REASON_FALLBACK: lr_reason = 9;
pub const LR_REASON_MIN_COST: lr_reason = 10;
pub const LR_REASON_SAMPLED: lr_reason = 11;
pub const LR_REASON_K_FILTER: lr_reason = 12;
pub const LR_REASON_EXPLORE: lr_reason = 13;
pub const LR_REASON_COLD_START: lr_reason = 14;
pub const LR_REASON_OOD: lr_reason = 15;
pub const LR_REASON_WAITING: lr_reason = 16;
pub const LR_REASON_ADAPTER: lr_reason = 17;
pub const LR_REASON_WHOLE: lr_reason = 18;

pub type lr_param = c_uint;
pub const LR_PARAM_PREFIX_MIN_RATIO: lr_param = 0;
pub const LR_PARAM_BOUNDED_LOAD: lr_param = 1;
pub const LR_PARAM_AIBRIX_IMBALANCE: lr_param = 2;
pub const LR_PARAM_AIBRIX_STDDEV: lr_param = 3;
pub const LR_PARAM_SGLANG_ABS: lr_param = 4;
pub const LR_PARAM_SGLANG_REL: lr_param = 5;
pub const LR_PARAM_SGLANG_MIN_RATIO: lr_param = 6;
pub const LR_PARAM_PREBLE_HIT: lr_param = 7;
pub const LR_PARAM_DYNAMO_OVERLAP: lr_param = 8;
pub const LR_PARAM_DYNAMO_TEMPERATURE: lr_param = 9;
pub const LR_PARAM_TTFT_SLO_S: lr_param = 10;
pub const LR_PARAM_DUALMAP_KEY_TOKENS: lr_param = 11;
pub const LR_PARAM_DUALMAP_MAX_KEY_BLOCKS: lr_param = 12;
pub const LR_PARAM_DUALMAP_WINDOW: lr_param = 13;
pub const LR_PARAM_GORGO_W_RTT: lr_param = 14;
pub const LR_PARAM_GORGO_W_QUEUE: lr_param = 15;
pub const LR_PARAM_GORGO_SIGMA: lr_param = 16;
pub const LR_PARAM_GORGO_FROZEN: lr_param = 17;
pub const LR_PARAM_GORGO_W_RTT_MAX: lr_param = 18;
pub const LR_PARAM_GORGO_W_QUEUE_MIN: lr_param = 19;
pub const LR_PARAM_RANVIER_PRESSURE: lr_param = 20;
pub const LR_PARAM_SESSION_TOKENS: lr_param = 21;
pub const LR_PARAM_STATS_MAX_AGE_S: lr_param = 22;
pub const LR_PARAM_DEFAULT_OUTPUT_TOKENS: lr_param = 23;
pub const LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN: lr_param = 24;
pub const LR_PARAM_LODESTAR_EPSILON: lr_param = 25;
pub const LR_PARAM_LODESTAR_TIE: lr_param = 26;
pub const LR_PARAM_LODESTAR_KV_THRESHOLD: lr_param = 27;
pub const LR_PARAM_LODESTAR_KFILTER_TOKENS: lr_param = 28;
pub const LR_PARAM_LODESTAR_OOD: lr_param = 29;
pub const LR_PARAM_LODESTAR_FALLBACK: lr_param = 30;
pub const LR_PARAM_LODESTAR_CANDIDATES: lr_param = 31;
pub const LR_PARAM_LODESTAR_MAX_TTFT_S: lr_param = 32;
pub const LR_PARAM_ADAPTIVE_WORK_WEIGHT: lr_param = 33;
pub const LR_PARAM_ADAPTIVE_CONTENTION: lr_param = 34;
pub const LR_PARAM_ADAPTIVE_TIE_S: lr_param = 35;
pub const LR_PARAM_ADAPTIVE_FRESH_S: lr_param = 36;
pub const LR_PARAM_ADAPTIVE_RTT_WEIGHT: lr_param = 37;
pub const LR_PARAM_ADAPTIVE_CALIBRATE: lr_param = 38;
pub const LR_PARAM_CLOCK_SKEW_S: lr_param = 39;
pub const LR_PARAM_SATURATION_QUEUE: lr_param = 40;
pub const LR_PARAM_SATURATION_KV: lr_param = 41;
pub const LR_PARAM_FAIR_INPUT_WEIGHT: lr_param = 42;
pub const LR_PARAM_FAIR_OUTPUT_WEIGHT: lr_param = 43;
pub const LR_PARAM_ADAPTIVE_DEADLINE: lr_param = 44;
pub const LR_PARAM_SATURATION_PREFILL_S: lr_param = 45;
pub const LR_PARAM_ADAPTER_LOAD_S: lr_param = 46;
pub const LR_PARAM_TIER_CPU_WEIGHT: lr_param = 47;
pub const LR_PARAM_TIER_DISK_WEIGHT: lr_param = 48;
pub const LR_PARAM_KV_BYTES_PER_TOKEN: lr_param = 49;
pub const LR_PARAM_KV_GBPS_NODE: lr_param = 50;
pub const LR_PARAM_KV_GBPS_RACK: lr_param = 51;
pub const LR_PARAM_KV_GBPS_REGION: lr_param = 52;
pub const LR_PARAM_KV_GBPS_WAN: lr_param = 53;
pub const LR_PARAM_PD_PREFILL_POLICY: lr_param = 54;
pub const LR_PARAM_PD_MIN_UNCACHED: lr_param = 55;
pub const LR_PARAM_PD_LOCAL_MAX_TOKENS: lr_param = 56;
pub const LR_PARAM_PD_LOCAL_MAX_RATIO: lr_param = 57;
pub const LR_PARAM_ADAPTIVE_PD_STALL: lr_param = 58;
pub const LR_PARAM_NARROW_ABOVE: lr_param = 59;
pub const LR_PARAM_NARROW_WIDTH: lr_param = 60;
pub const LR_MAX_TIME_NS: u64 = 1 << 60;
pub const LR_ROUTER_MAX_TIME_NS: u64 = LR_MAX_TIME_NS;

/// One routable instance as a policy sees it. Arrays of rows are passed
/// with `size_of::<lr_candidate>()` as `row_size`.
#[repr(C)]
#[derive(Debug, Copy, Clone, Default, PartialEq)]
pub struct lr_candidate {
    pub instance: u32,
    pub cached_tokens: u32,
    pub inflight: u32,
    pub queued: u32,
    pub prefill_tokens: u64,
    pub queued_tokens: u64,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
    pub kv_tokens: u64,
    pub running: u32,
    pub waiting: u32,
    pub kv_use: f64,
    pub rtt_ms: f64,
    pub prefill_rate: f64,
    pub stall_s: f64,
    pub cached_age_s: f64,
    pub instance_class: u32,
    pub prefix_caching: i32,
    pub ring_rank: u32,
    pub flags: u32,
    pub tree_blocks: u64,
    pub ttft_s_per_token: f64,
    pub ttft_base_s: f64,
    pub ttft_s_per_decoding: f64,
    pub prefill_tokens_avg: f64,
    pub route_rate: f64,
    pub cached_lost: f64,
    /// The request's LoRA adapter there (0.3): 1 when it must be loaded,
    /// the free slots (u32::MAX unknown), the expected load time, the
    /// adapters resident, 1 when loading evicts one.
    pub adapter_missing: i32,
    pub adapter_free: u32,
    pub adapter_load_s: f64,
    pub adapters_resident: u32,
    pub adapter_evicts: i32,
    /// Prompt tokens past cached_tokens its engine holds on a lower tier
    /// of its KV cache: host memory, then disk (0.3).
    pub cpu_tokens: u32,
    pub disk_tokens: u32,
    /// Its lr_role, and where it runs (node, rack, region; 0 unknown)
    /// (0.3).
    pub role: i32,
    pub node: u32,
    pub rack: u32,
    pub region: u32,
    /// The router's calibrated decode seconds of its class, adaptive's
    /// (0.3).
    pub decode_s: f64,
    /// A sibling's tokens past this row's hit, where a sibling left its
    /// path within the hit, and the engine's share of such hits lost
    /// (0.3).
    pub sibling_tokens: u32,
    pub sibling_fork_tokens: u32,
    pub sibling_lost: f64,
}
pub const LR_CANDIDATE_SIZE_V1: usize = offset_of!(lr_candidate, route_rate) + 8;
pub const LR_CANDIDATE_SIZE_V2: usize = offset_of!(lr_candidate, cached_lost) + 8;
pub const LR_CANDIDATE_SIZE_V3: usize = offset_of!(lr_candidate, disk_tokens) + 4;
pub const LR_CANDIDATE_SIZE_V4: usize = offset_of!(lr_candidate, region) + 4;
pub const LR_CANDIDATE_SIZE_V5: usize = offset_of!(lr_candidate, decode_s) + 8;
pub const LR_CANDIDATE_SIZE_V6: usize = offset_of!(lr_candidate, sibling_lost) + 8;

pub const LR_RING_KEY_NONE: c_int = 0;
pub const LR_RING_KEY_SESSION: c_int = 1;
pub const LR_RING_KEY_PREFIX: c_int = 2;
pub const LR_RING_KEY_HOTNESS: c_int = 3;

#[repr(C)]
#[derive(Debug, Copy, Clone, Default, PartialEq)]
pub struct lr_score {
    pub instance: u32,
    pub cached_tokens: u32,
    pub score: f64,
}
/// The 0.1 `lr_score` size: the least `lr_decision.score_size` (0 means
/// this size).
pub const LR_SCORE_SIZE_V1: usize = offset_of!(lr_score, score) + size_of::<f64>();

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_decision {
    pub struct_size: usize,
    pub instance: u32,
    pub reason: i32,
    pub cached_tokens: u32,
    pub best_cached_tokens: u32,
    pub cost: f64,
    pub alt_instance: u32,
    pub scores: *mut lr_score,
    pub scores_capacity: usize,
    pub n_scores: usize,
    // v1 ends here
    pub decider: i32,
    pub seed: u64,
    pub score_size: usize,
    // v2 ends here
    /// The prefill leg of a split request (0.3): its instance
    /// (LR_INSTANCE_NONE: not split), its lr_reason (-1: no prefill
    /// candidate), its expected hit, and the KV transfer's seconds.
    pub prefill_instance: u32,
    pub prefill_reason: i32,
    pub prefill_cached_tokens: u32,
    pub reserved: u32,
    pub transfer_s: f64,
}
pub const LR_DECISION_SIZE_V1: usize = offset_of!(lr_decision, n_scores) + size_of::<usize>();
pub const LR_DECISION_SIZE_V2: usize = offset_of!(lr_decision, score_size) + size_of::<usize>();
pub const LR_DECISION_SIZE_V3: usize = offset_of!(lr_decision, transfer_s) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_policy_input {
    pub struct_size: usize,
    pub params: *const f64,
    pub n_params: usize,
    pub prompt_tokens: u32,
    pub expected_output_tokens: u32,
    pub block_tokens: u32,
    pub last_instance: u32,
    pub seed: u64,
    pub model: *mut lr_mlp,
    // v1 ends here
    /// The request's TTFT budget in seconds (0: no deadline) (0.3).
    pub ttft_budget_s: f64,
}
pub const LR_POLICY_INPUT_SIZE_V1: usize =
    offset_of!(lr_policy_input, model) + size_of::<*const c_void>();
pub const LR_POLICY_INPUT_SIZE_V2: usize = offset_of!(lr_policy_input, ttft_budget_s) + 8;

/// Lodestar's features in the headers this crate declares; the loaded
/// library's count is `lr_lodestar_feature_count()`.
pub const LR_LODESTAR_FEATURES: c_uint = 20;

// ---- lr_cost.h -----------------------------------------------------------------

opaque! {
    /// A cost model. One thread at a time; lr_cost_eval() on a handle
    /// nobody is changing is reentrant.
    lr_cost;
}

pub type lr_cost_kind = c_uint;
pub const LR_COST_TTFT: lr_cost_kind = 0;
pub const LR_COST_GORGO: lr_cost_kind = 1;
pub const LR_COST_DYNAMO: lr_cost_kind = 2;

pub type lr_cost_param = c_uint;
pub const LR_COST_W_RTT: lr_cost_param = 0;
pub const LR_COST_W_QUEUE: lr_cost_param = 1;
pub const LR_COST_W_STALL: lr_cost_param = 2;
pub const LR_COST_W_UNCACHED: lr_cost_param = 3;
pub const LR_COST_BLOCK_TOKENS: lr_cost_param = 4;
pub const LR_COST_QUEUE_AT_FIRST_TOKEN: lr_cost_param = 5;
pub const LR_COST_SIGMA: lr_cost_param = 6;
pub const LR_COST_W_RTT_MAX: lr_cost_param = 7;
pub const LR_COST_W_QUEUE_MIN: lr_cost_param = 8;

pub const LR_COST_TUNE_WINDOW: c_uint = 128;
pub const LR_COST_TUNE_HOP: c_uint = 32;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_cost_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub kind: i32,
    pub seed: u64,
}
pub const LR_COST_OPTIONS_SIZE_V1: usize = offset_of!(lr_cost_options, seed) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct lr_cost_tuner_stats {
    pub struct_size: usize,
    pub state: i32,
    pub trials: u64,
    pub accepted: u64,
    pub sigma: f64,
    pub incumbent_p95_s: f64,
    pub samples: u64,
}
pub const LR_COST_TUNER_STATS_SIZE_V1: usize = offset_of!(lr_cost_tuner_stats, samples) + 8;

// ---- lr_router.h ---------------------------------------------------------------

opaque! {
    /// The router. Every lr_router_* call may come from any thread; only
    /// lr_router_destroy must not overlap other calls.
    lr_router;
}

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_router_options {
    pub struct_size: usize,
    pub allocator: *const lr_allocator,
    pub seed: u64,
    pub policy: i32,
    pub max_instances: u32,
    pub max_requests: u32,
    pub block_tokens: u32,
    pub index_capacity_blocks: u64,
    pub index_ttl_ns: u64,
    pub ring_vnodes: u32,
    pub flags: u32,
    pub learner: *const lr_learner_options,
    pub hash_seed: u64,
    pub replica_id: u64,
    pub remote_ttl_ns: u64,
    pub gauge_ttl_ns: u64,
    pub max_peers: u32,
    pub index_eviction: i32,
    /// The waiting queue's bounds (0.3).
    pub queue_capacity: u32,
    pub queue_tenants: u32,
    pub queue_tokens: u64,
    /// Placement marks past the index (0.3).
    pub marks: u64,
}
pub const LR_ROUTER_OPTIONS_SIZE_V1: usize =
    offset_of!(lr_router_options, learner) + size_of::<*const c_void>();
pub const LR_ROUTER_OPTIONS_SIZE_V2: usize = offset_of!(lr_router_options, index_eviction) + 4;
pub const LR_ROUTER_OPTIONS_SIZE_V3: usize =
    offset_of!(lr_router_options, queue_tokens) + size_of::<u64>();
pub const LR_ROUTER_OPTIONS_SIZE_V4: usize =
    offset_of!(lr_router_options, marks) + size_of::<u64>();
pub const LR_ROUTER_MAX_MARKS: u64 = 1 << 32;
pub const LR_ROUTER_MAX_WAITING: c_uint = 1 << 24;
pub const LR_ROUTER_MAX_TENANTS: c_uint = 1 << 20;
pub const LR_ROUTER_MAX_QUEUE_TOKENS: u64 = 1 << 40;
pub const LR_ROUTER_URGENCIES: c_uint = 8;
pub const LR_ROUTER_MAX_INSTANCES: c_uint = 65534;
pub const LR_ROUTER_MAX_PEERS: c_uint = 4096;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_instance_spec {
    pub struct_size: usize,
    pub name: *const c_char,
    pub instance_class: u32,
    pub prefix_caching: i32,
    pub rtt_ns: u64,
    /// The models it serves and its LoRA adapter slots (0.3).
    pub models: *const *const c_char,
    pub n_models: u32,
    pub max_adapters: u32,
    /// Its lr_role, and where it runs (node, rack, region; 0 unknown)
    /// (0.3).
    pub role: i32,
    pub node: u32,
    pub rack: u32,
    pub region: u32,
}
pub const LR_INSTANCE_SPEC_SIZE_V1: usize = offset_of!(lr_instance_spec, rtt_ns) + 8;
pub const LR_INSTANCE_SPEC_SIZE_V2: usize = offset_of!(lr_instance_spec, max_adapters) + 4;
pub const LR_INSTANCE_SPEC_SIZE_V3: usize = offset_of!(lr_instance_spec, region) + 4;
pub const LR_ROUTER_MAX_NAME: c_uint = 255;
pub const LR_ROUTER_MAX_MODELS: c_uint = 16;
pub const LR_ROUTER_MAX_ADAPTERS: c_uint = 64;

/// An instance's LoRA adapters as its engine reports them (0.3).
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_adapter_stats {
    pub struct_size: usize,
    pub running: *const *const c_char,
    pub n_running: usize,
    pub waiting: *const *const c_char,
    pub n_waiting: usize,
    pub max_adapters: u32,
    pub scraped_ns: u64,
}
pub const LR_ADAPTER_STATS_SIZE_V1: usize = offset_of!(lr_adapter_stats, scraped_ns) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_class_spec {
    pub struct_size: usize,
    pub prefill_tokens_per_s: f64,
}
pub const LR_CLASS_SPEC_SIZE_V1: usize = offset_of!(lr_class_spec, prefill_tokens_per_s) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct lr_request {
    pub struct_size: usize,
    pub id: u64,
    pub tokens: *const u32,
    pub n_tokens: usize,
    pub boundaries: *const u32,
    pub n_boundaries: usize,
    pub tenant_salt: u64,
    pub session: u64,
    pub has_session: i32,
    pub expected_output_tokens: u32,
    pub flags: u32,
    pub now_ns: u64,
    /// The waiting queue's tenant, deadline and urgency (0.3).
    pub tenant: u64,
    pub deadline_ns: u64,
    pub urgency: u32,
    /// The model it names and its LoRA adapter, NUL-terminated; NULL: any
    /// model, the base model (0.3).
    pub model: *const c_char,
    pub adapter: *const c_char,
    /// Its multimodal inputs, as lr_prompt.mm (0.3).
    pub mm: *const lr_mm_input,
    pub n_mm: usize,
}
pub const LR_REQUEST_SIZE_V1: usize = offset_of!(lr_request, now_ns) + 8;
pub const LR_REQUEST_SIZE_V2: usize = offset_of!(lr_request, urgency) + 4;
pub const LR_REQUEST_SIZE_V3: usize = offset_of!(lr_request, adapter) + size_of::<*const c_char>();
pub const LR_REQUEST_SIZE_V4: usize = offset_of!(lr_request, n_mm) + size_of::<usize>();

pub const LR_ROUTE_DRY_RUN: c_uint = 1;
pub const LR_ROUTE_SCORES: c_uint = 2;
pub const LR_ROUTE_NO_LEARN: c_uint = 4;
pub const LR_ROUTE_MAY_WAIT: c_uint = 8;
pub const LR_ROUTE_SHEDDABLE: c_uint = 16;

/// One request lr_router_dispatch() let out of the waiting queue (0.3).
/// Arrays are passed with `size_of::<lr_dispatched>()` as `item_size`.
#[repr(C)]
#[derive(Debug, Copy, Clone, Default, PartialEq)]
pub struct lr_dispatched {
    pub request_id: u64,
    /// An lr_status: LR_OK, LR_EEXPIRED or LR_EEXIST.
    pub status: i32,
    pub instance: u32,
    pub reason: i32,
    pub cached_tokens: u32,
    pub cost: f64,
    pub waited_ns: u64,
    pub urgency: u32,
    pub tenant: u64,
    // v1 ends here
    /// The decision's prefill leg, as lr_decision's (0.3): its instance
    /// (LR_INSTANCE_NONE: not split), its lr_reason (-1: no prefill
    /// candidate), its expected hit, and the KV transfer's seconds.
    pub prefill_instance: u32,
    pub prefill_reason: i32,
    pub prefill_cached_tokens: u32,
    pub reserved: u32,
    pub transfer_s: f64,
}
pub const LR_DISPATCHED_SIZE_V1: usize = offset_of!(lr_dispatched, tenant) + 8;
pub const LR_DISPATCHED_SIZE_V2: usize = offset_of!(lr_dispatched, transfer_s) + 8;

#[repr(C)]
#[derive(Debug, Copy, Clone, Default, PartialEq)]
pub struct lr_move {
    pub request_id: u64,
    pub from: u32,
    pub to: u32,
    pub benefit_s: f64,
}

#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct lr_router_stats {
    pub struct_size: usize,
    pub routes: u64,
    pub dry_runs: u64,
    pub inflight: u64,
    pub instances: u64,
    pub routable: u64,
    pub by_reason: [u64; 16],
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub kv_batches: u64,
    pub kv_duplicates: u64,
    pub kv_gaps: u64,
    pub kv_restarts: u64,
    pub kv_gaps_open: u64,
    pub deltas_exported: u64,
    pub deltas_imported: u64,
    pub deltas_skipped: u64,
    pub deltas_lost: u64,
    pub gauges_exported: u64,
    pub gauges_imported: u64,
    pub gauges_skipped: u64,
    pub gauges_expired: u64,
    pub peers_live: u64,
    pub observed_reports: u64,
    pub observed_expected_tokens: u64,
    pub observed_cached_tokens: u64,
    pub waiting: u64,
    pub waiting_tokens: u64,
    pub waited: u64,
    pub waited_dispatched: u64,
    pub waited_expired: u64,
    pub waited_cancelled: u64,
    pub waited_dropped: u64,
    pub shed: u64,
    pub wait_ns: u64,
    /// Routes naming a LoRA adapter, and of those the ones that caused a
    /// load (0.3).
    pub adapter_routes: u64,
    pub adapter_loads: u64,
}
pub const LR_ROUTER_STATS_SIZE_V1: usize = offset_of!(lr_router_stats, cached_tokens) + 8;
pub const LR_ROUTER_STATS_SIZE_V2: usize = offset_of!(lr_router_stats, peers_live) + 8;
pub const LR_ROUTER_STATS_SIZE_V3: usize = offset_of!(lr_router_stats, wait_ns) + 8;
pub const LR_ROUTER_STATS_SIZE_V4: usize = offset_of!(lr_router_stats, adapter_loads) + 8;

/// lr_kv_seq: what a KV-event batch's sequence number made of it.
pub type lr_kv_seq = c_uint;
pub const LR_KV_SEQ_NONE: lr_kv_seq = 0;
pub const LR_KV_SEQ_APPLIED: lr_kv_seq = 1;
pub const LR_KV_SEQ_FIRST: lr_kv_seq = 2;
pub const LR_KV_SEQ_DUPLICATE: lr_kv_seq = 3;
pub const LR_KV_SEQ_GAP: lr_kv_seq = 4;
pub const LR_KV_SEQ_RESTART: lr_kv_seq = 5;

#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct lr_kv_source {
    pub struct_size: usize,
    pub has_seq: i32,
    pub gap: i32,
    pub next_seq: u64,
    pub batches: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub restarts: u64,
}
pub const LR_KV_SOURCE_SIZE_V1: usize = offset_of!(lr_kv_source, restarts) + 8;

// ---- lr_vllm.h -----------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Copy, Clone, Default)]
pub struct lr_vllm_batch_info {
    pub struct_size: usize,
    pub timestamp: f64,
    pub dp_rank: i64,
    pub events: u32,
    pub stored: u32,
    pub removed: u32,
    pub cleared: u32,
    pub unplaced: u32,
    pub skipped: u32,
    pub done: u32,
    pub invalid: u32,
    pub seq_state: i32,
    pub next_seq: u64,
}
pub const LR_VLLM_BATCH_INFO_SIZE_V1: usize = offset_of!(lr_vllm_batch_info, done) + 4;
pub const LR_VLLM_BATCH_INFO_SIZE_V2: usize = offset_of!(lr_vllm_batch_info, next_seq) + 8;

// ---- functions -----------------------------------------------------------------

extern "C" {
    // lr_common.h
    pub fn lr_strerror(status: lr_status) -> *const c_char;
    pub fn lr_status_name(status: lr_status) -> *const c_char;
    pub fn lr_version_number() -> c_uint;
    pub fn lr_version_string() -> *const c_char;
    pub fn lr_blob_data(blob: *const lr_blob) -> *const u8;
    pub fn lr_blob_size(blob: *const lr_blob) -> usize;
    pub fn lr_blob_destroy(blob: *mut lr_blob);

    // lr_index.h
    pub fn lr_index_options_init_sized(opt: *mut lr_index_options, size: usize);
    pub fn lr_index_create(opt: *const lr_index_options, out: *mut *mut lr_index) -> lr_status;
    pub fn lr_index_destroy(idx: *mut lr_index);
    pub fn lr_block_keys(
        block_tokens: u32,
        tokens: *const u32,
        n_tokens: usize,
        tenant_salt: u64,
        keys: *mut u64,
        capacity: usize,
        n_keys: *mut usize,
    ) -> lr_status;
    pub fn lr_name_hash(name: *const c_char, len: usize) -> u64;
    pub fn lr_adapter_salt(tenant_salt: u64, adapter_hash: u64) -> u64;
    pub fn lr_mm_key_hash(identifier: *const c_char, len: usize, offset: i64) -> u64;
    pub fn lr_prompt_init_sized(p: *mut lr_prompt, size: usize);
    pub fn lr_index_learn(
        idx: *mut lr_index,
        prompt: *const lr_prompt,
        instance: u32,
        trust: i32,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_index_match_result_init_sized(r: *mut lr_index_match_result, size: usize);
    pub fn lr_index_match(
        idx: *mut lr_index,
        prompt: *const lr_prompt,
        now_ns: u64,
        flags: u32,
        result: *mut lr_index_match_result,
    ) -> lr_status;
    pub fn lr_index_remove_instance(idx: *mut lr_index, instance: u32) -> lr_status;
    pub fn lr_index_expire(idx: *mut lr_index, now_ns: u64) -> lr_status;
    pub fn lr_kv_stored_init_sized(ev: *mut lr_kv_stored, size: usize);
    pub fn lr_index_kv_stored(
        idx: *mut lr_index,
        instance: u32,
        ev: *const lr_kv_stored,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_index_kv_removed(
        idx: *mut lr_index,
        instance: u32,
        block_hashes: *const u64,
        n_blocks: usize,
        n_resolved: *mut usize,
    ) -> lr_status;
    pub fn lr_index_kv_removed_tier(
        idx: *mut lr_index,
        instance: u32,
        tier: i32,
        block_hashes: *const u64,
        n_blocks: usize,
        n_resolved: *mut usize,
    ) -> lr_status;
    pub fn lr_index_kv_cleared(idx: *mut lr_index, instance: u32) -> lr_status;
    pub fn lr_index_mark(idx: *const lr_index) -> u64;
    pub fn lr_index_export_delta(
        idx: *const lr_index,
        since_mark: u64,
        out: *mut *mut lr_blob,
        mark_out: *mut u64,
    ) -> lr_status;
    pub fn lr_index_import_delta(
        idx: *mut lr_index,
        buf: *const u8,
        len: usize,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_index_get_stats(idx: *const lr_index, stats: *mut lr_index_stats) -> lr_status;
    pub fn lr_index_instance_blocks(
        idx: *const lr_index,
        instance: u32,
        out: *mut u64,
    ) -> lr_status;
    pub fn lr_index_block_tokens(idx: *const lr_index) -> u32;

    // lr_ring.h
    pub fn lr_ring_options_init_sized(opt: *mut lr_ring_options, size: usize);
    pub fn lr_ring_create(opt: *const lr_ring_options, out: *mut *mut lr_ring) -> lr_status;
    pub fn lr_ring_destroy(ring: *mut lr_ring);
    pub fn lr_ring_add(ring: *mut lr_ring, name: *const c_char, id: u32) -> lr_status;
    pub fn lr_ring_remove(ring: *mut lr_ring, id: u32) -> lr_status;
    pub fn lr_ring_count(ring: *const lr_ring) -> u32;
    pub fn lr_ring_contains(ring: *const lr_ring, id: u32) -> c_int;
    pub fn lr_ring_candidates(
        ring: *const lr_ring,
        key: u64,
        k: u32,
        out: *mut u32,
        n_out: *mut u32,
    ) -> lr_status;

    // lr_text.h
    pub fn lr_text_tokens(
        text: *const c_void,
        len: usize,
        width: u32,
        out: *mut u32,
        capacity: usize,
        needed: *mut usize,
    ) -> lr_status;

    // lr_load.h
    pub fn lr_load_options_init_sized(opt: *mut lr_load_options, size: usize);
    pub fn lr_load_create(opt: *const lr_load_options, out: *mut *mut lr_load) -> lr_status;
    pub fn lr_load_destroy(load: *mut lr_load);
    pub fn lr_load_add_instance(
        load: *mut lr_load,
        instance: u32,
        instance_class: u32,
        prefix_caching: i32,
    ) -> lr_status;
    pub fn lr_load_remove_instance(load: *mut lr_load, instance: u32) -> lr_status;
    pub fn lr_dispatch_init_sized(d: *mut lr_dispatch, size: usize);
    pub fn lr_load_dispatch(load: *mut lr_load, d: *const lr_dispatch) -> lr_status;
    pub fn lr_load_prefill_done(load: *mut lr_load, request_id: u64, now_ns: u64) -> lr_status;
    pub fn lr_load_first_token(load: *mut lr_load, request_id: u64, now_ns: u64) -> lr_status;
    pub fn lr_load_complete(
        load: *mut lr_load,
        request_id: u64,
        output_tokens: u32,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_load_fail(load: *mut lr_load, request_id: u64) -> lr_status;
    pub fn lr_load_move(
        load: *mut lr_load,
        request_id: u64,
        instance: u32,
        cached_tokens: u32,
    ) -> lr_status;
    pub fn lr_engine_stats_init_sized(s: *mut lr_engine_stats, size: usize);
    pub fn lr_load_set_stats(
        load: *mut lr_load,
        instance: u32,
        stats: *const lr_engine_stats,
    ) -> lr_status;
    pub fn lr_load_observe_rtt(load: *mut lr_load, instance: u32, rtt_ns: u64) -> lr_status;
    pub fn lr_load_snapshot_init_sized(s: *mut lr_load_snapshot, size: usize);
    pub fn lr_load_get(
        load: *const lr_load,
        instance: u32,
        out: *mut lr_load_snapshot,
    ) -> lr_status;
    pub fn lr_load_inflight(load: *const lr_load) -> u64;
    pub fn lr_load_request(
        load: *const lr_load,
        request_id: u64,
        instance: *mut u32,
        queued: *mut i32,
    ) -> lr_status;

    // lr_mlp.h
    pub fn lr_mlp_options_init_sized(opt: *mut lr_mlp_options, size: usize);
    pub fn lr_mlp_create(opt: *const lr_mlp_options, out: *mut *mut lr_mlp) -> lr_status;
    pub fn lr_mlp_destroy(mlp: *mut lr_mlp);
    pub fn lr_mlp_clone(mlp: *const lr_mlp, out: *mut *mut lr_mlp) -> lr_status;
    pub fn lr_mlp_n_inputs(mlp: *const lr_mlp) -> u32;
    pub fn lr_mlp_fit_normalization(
        mlp: *mut lr_mlp,
        x: *const f32,
        n_rows: usize,
        y: *const f32,
    ) -> lr_status;
    pub fn lr_mlp_predict(
        mlp: *mut lr_mlp,
        x: *const f32,
        n_rows: usize,
        out: *mut f32,
    ) -> lr_status;
    pub fn lr_mlp_out_of_range(
        mlp: *const lr_mlp,
        x: *const f32,
        n_rows: usize,
        n_out: *mut usize,
    ) -> lr_status;
    pub fn lr_mlp_out_of_range_rows(
        mlp: *const lr_mlp,
        x: *const f32,
        n_rows: usize,
        flags: *mut u8,
        n_out: *mut usize,
    ) -> lr_status;
    pub fn lr_mlp_train(
        mlp: *mut lr_mlp,
        x: *const f32,
        y: *const f32,
        n_rows: usize,
        epochs: u32,
        loss: *mut f64,
    ) -> lr_status;
    pub fn lr_mlp_loss(
        mlp: *mut lr_mlp,
        x: *const f32,
        y: *const f32,
        n_rows: usize,
        mse: *mut f64,
    ) -> lr_status;
    pub fn lr_mlp_save(mlp: *const lr_mlp, out: *mut *mut lr_blob) -> lr_status;
    pub fn lr_mlp_load(
        buf: *const u8,
        len: usize,
        allocator: *const lr_allocator,
        out: *mut *mut lr_mlp,
    ) -> lr_status;

    // lr_learner.h
    pub fn lr_learner_options_init_sized(opt: *mut lr_learner_options, size: usize);
    pub fn lr_learner_create(
        opt: *const lr_learner_options,
        out: *mut *mut lr_learner,
    ) -> lr_status;
    pub fn lr_learner_destroy(learner: *mut lr_learner);
    pub fn lr_learner_add_sample(
        learner: *mut lr_learner,
        features: *const f32,
        reward: f64,
        predicted: f64,
    ) -> lr_status;
    pub fn lr_learner_score(
        learner: *mut lr_learner,
        x: *const f32,
        n_rows: usize,
        out: *mut f32,
        n_ood: *mut usize,
    ) -> lr_status;
    pub fn lr_learner_score_rows(
        learner: *mut lr_learner,
        x: *const f32,
        n_rows: usize,
        out: *mut f32,
        ood: *mut u8,
        n_ood: *mut usize,
    ) -> lr_status;
    pub fn lr_learner_step(learner: *mut lr_learner, flags: u32, trained: *mut i32) -> lr_status;
    pub fn lr_learner_samples(
        learner: *mut lr_learner,
        x: *mut f32,
        y: *mut f32,
        capacity: usize,
        n_samples: *mut usize,
    ) -> lr_status;
    pub fn lr_learner_stats_init_sized(s: *mut lr_learner_stats, size: usize);
    pub fn lr_learner_get_stats(learner: *mut lr_learner, out: *mut lr_learner_stats) -> lr_status;

    // lr_policy.h
    pub fn lr_policy_count() -> u32;
    pub fn lr_policy_name(policy: i32) -> *const c_char;
    pub fn lr_policy_from_name(name: *const c_char, out: *mut i32) -> lr_status;
    pub fn lr_reason_count() -> u32;
    pub fn lr_reason_name(reason: i32) -> *const c_char;
    pub fn lr_param_count() -> u32;
    pub fn lr_param_bounds(key: i32) -> lr_bounds;
    pub fn lr_policy_ring_key(policy: i32, ranks: *mut u32) -> i32;
    pub fn lr_decision_init_sized(d: *mut lr_decision, size: usize);
    pub fn lr_policy_input_init_sized(input: *mut lr_policy_input, size: usize);
    pub fn lr_lodestar_feature_count() -> u32;
    pub fn lr_policy_decide(
        policy: i32,
        input: *const lr_policy_input,
        rows: *const lr_candidate,
        n_rows: usize,
        row_size: usize,
        scores: *mut f64,
        out: *mut lr_decision,
    ) -> lr_status;

    // lr_cost.h
    pub fn lr_cost_kind_count() -> u32;
    pub fn lr_cost_kind_name(kind: i32) -> *const c_char;
    pub fn lr_cost_param_count() -> u32;
    pub fn lr_cost_param_bounds(kind: i32, key: i32) -> lr_bounds;
    pub fn lr_cost_options_init_sized(opt: *mut lr_cost_options, size: usize);
    pub fn lr_cost_create(opt: *const lr_cost_options, out: *mut *mut lr_cost) -> lr_status;
    pub fn lr_cost_destroy(cost: *mut lr_cost);
    pub fn lr_cost_kind_of(cost: *const lr_cost) -> i32;
    pub fn lr_cost_set_param(cost: *mut lr_cost, key: i32, value: f64) -> lr_status;
    pub fn lr_cost_get_param(cost: *const lr_cost, key: i32, value: *mut f64) -> lr_status;
    pub fn lr_cost_eval(
        cost: *const lr_cost,
        prompt_tokens: u32,
        rows: *const lr_candidate,
        n_rows: usize,
        row_size: usize,
        out: *mut f64,
    ) -> lr_status;
    pub fn lr_cost_tune(cost: *mut lr_cost, on: i32) -> lr_status;
    pub fn lr_cost_observe(cost: *mut lr_cost, ttft_s: f64) -> lr_status;
    pub fn lr_cost_tuner_stats_init_sized(s: *mut lr_cost_tuner_stats, size: usize);
    pub fn lr_cost_tuner_get_stats(
        cost: *const lr_cost,
        out: *mut lr_cost_tuner_stats,
    ) -> lr_status;

    // lr_router.h
    pub fn lr_router_options_init_sized(opt: *mut lr_router_options, size: usize);
    pub fn lr_router_create(opt: *const lr_router_options, out: *mut *mut lr_router) -> lr_status;
    pub fn lr_router_destroy(router: *mut lr_router);
    pub fn lr_router_set_policy(router: *mut lr_router, policy: i32) -> lr_status;
    pub fn lr_router_policy(router: *const lr_router) -> i32;
    pub fn lr_instance_spec_init_sized(s: *mut lr_instance_spec, size: usize);
    pub fn lr_router_add_instance(
        router: *mut lr_router,
        spec: *const lr_instance_spec,
        id: *mut u32,
    ) -> lr_status;
    pub fn lr_router_find_instance(
        router: *const lr_router,
        name: *const c_char,
        id: *mut u32,
    ) -> lr_status;
    pub fn lr_router_drain_instance(router: *mut lr_router, id: u32, draining: i32) -> lr_status;
    pub fn lr_router_remove_instance(router: *mut lr_router, id: u32) -> lr_status;
    pub fn lr_router_instance_count(router: *const lr_router) -> u32;
    pub fn lr_class_spec_init_sized(s: *mut lr_class_spec, size: usize);
    pub fn lr_router_set_class(
        router: *mut lr_router,
        instance_class: u32,
        spec: *const lr_class_spec,
    ) -> lr_status;
    pub fn lr_router_set_stats(
        router: *mut lr_router,
        id: u32,
        stats: *const lr_engine_stats,
    ) -> lr_status;
    pub fn lr_router_observe_rtt(router: *mut lr_router, id: u32, rtt_ns: u64) -> lr_status;
    pub fn lr_router_instance_load(
        router: *const lr_router,
        id: u32,
        out: *mut lr_load_snapshot,
    ) -> lr_status;
    pub fn lr_adapter_stats_init_sized(s: *mut lr_adapter_stats, size: usize);
    pub fn lr_router_set_adapters(
        router: *mut lr_router,
        id: u32,
        stats: *const lr_adapter_stats,
    ) -> lr_status;
    pub fn lr_router_adapters(
        router: *const lr_router,
        id: u32,
        hashes: *mut u64,
        capacity: usize,
        n: *mut usize,
    ) -> lr_status;
    pub fn lr_request_init_sized(q: *mut lr_request, size: usize);
    pub fn lr_router_route(
        router: *mut lr_router,
        request: *const lr_request,
        decision: *mut lr_decision,
    ) -> lr_status;
    pub fn lr_router_candidates(
        router: *mut lr_router,
        request: *const lr_request,
        rows: *mut lr_candidate,
        capacity: usize,
        row_size: usize,
        n_rows: *mut usize,
    ) -> lr_status;
    pub fn lr_router_policy_input(
        router: *mut lr_router,
        request: *const lr_request,
        input: *mut lr_policy_input,
        params: *mut f64,
        capacity: usize,
    ) -> lr_status;
    pub fn lr_router_prefill_done(
        router: *mut lr_router,
        request_id: u64,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_first_token(router: *mut lr_router, request_id: u64, now_ns: u64)
        -> lr_status;
    pub fn lr_router_complete(
        router: *mut lr_router,
        request_id: u64,
        output_tokens: u32,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_fail(router: *mut lr_router, request_id: u64, now_ns: u64) -> lr_status;
    pub fn lr_router_dispatch(
        router: *mut lr_router,
        now_ns: u64,
        out: *mut lr_dispatched,
        capacity: usize,
        item_size: usize,
        n_out: *mut usize,
    ) -> lr_status;
    pub fn lr_router_saturated(
        router: *mut lr_router,
        now_ns: u64,
        saturated: *mut i32,
    ) -> lr_status;
    pub fn lr_router_observe_cached(
        router: *mut lr_router,
        request_id: u64,
        cached_tokens: u32,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_rebalance_plan(
        router: *mut lr_router,
        now_ns: u64,
        moves: *mut lr_move,
        capacity: usize,
        move_size: usize,
        n_moves: *mut usize,
    ) -> lr_status;
    pub fn lr_router_move(router: *mut lr_router, request_id: u64, to: u32) -> lr_status;
    #[deprecated(note = "use lr_param_bounds")]
    pub fn lr_router_param_bounds(key: i32) -> lr_bounds;
    pub fn lr_router_set_param(router: *mut lr_router, key: i32, value: f64) -> lr_status;
    pub fn lr_router_get_param(router: *const lr_router, key: i32, value: *mut f64) -> lr_status;
    pub fn lr_router_kv_stored(
        router: *mut lr_router,
        id: u32,
        ev: *const lr_kv_stored,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_kv_removed(
        router: *mut lr_router,
        id: u32,
        block_hashes: *const u64,
        n_blocks: usize,
        n_resolved: *mut usize,
    ) -> lr_status;
    pub fn lr_router_kv_cleared(router: *mut lr_router, id: u32) -> lr_status;
    pub fn lr_router_kv_removed_tier(
        router: *mut lr_router,
        id: u32,
        tier: i32,
        block_hashes: *const u64,
        n_blocks: usize,
        n_resolved: *mut usize,
    ) -> lr_status;
    pub fn lr_router_mark(router: *mut lr_router) -> u64;
    pub fn lr_router_export_delta(
        router: *mut lr_router,
        since_mark: u64,
        out: *mut *mut lr_blob,
        mark_out: *mut u64,
    ) -> lr_status;
    pub fn lr_router_import_delta(
        router: *mut lr_router,
        buf: *const u8,
        len: usize,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_expire(router: *mut lr_router, now_ns: u64) -> lr_status;
    pub fn lr_router_learn_step(router: *mut lr_router, flags: u32, trained: *mut i32)
        -> lr_status;
    #[deprecated(note = "use lr_lodestar_feature_count")]
    pub fn lr_router_learner_feature_count(router: *const lr_router) -> u32;
    pub fn lr_router_learner_samples(
        router: *mut lr_router,
        x: *mut f32,
        row_width: usize,
        y: *mut f32,
        capacity: usize,
        n_samples: *mut usize,
    ) -> lr_status;
    pub fn lr_router_learner_save(router: *mut lr_router, out: *mut *mut lr_blob) -> lr_status;
    pub fn lr_router_learner_stats(
        router: *const lr_router,
        out: *mut lr_learner_stats,
    ) -> lr_status;
    pub fn lr_router_stats_init_sized(s: *mut lr_router_stats, size: usize);
    pub fn lr_router_get_stats(router: *const lr_router, out: *mut lr_router_stats) -> lr_status;
    pub fn lr_router_reason_counts(
        router: *const lr_router,
        counts: *mut u64,
        capacity: usize,
        n_counts: *mut usize,
    ) -> lr_status;
    pub fn lr_router_index_stats(router: *const lr_router, out: *mut lr_index_stats) -> lr_status;

    // lr_vllm.h
    pub fn lr_vllm_batch_info_init_sized(info: *mut lr_vllm_batch_info, size: usize);
    pub fn lr_index_vllm_batch(
        idx: *mut lr_index,
        instance: u32,
        buf: *const u8,
        len: usize,
        now_ns: u64,
        info: *mut lr_vllm_batch_info,
    ) -> lr_status;
    pub fn lr_router_vllm_batch_seq(
        router: *mut lr_router,
        instance: u32,
        seq: u64,
        buf: *const u8,
        len: usize,
        now_ns: u64,
        info: *mut lr_vllm_batch_info,
    ) -> lr_status;
    pub fn lr_kv_source_init_sized(s: *mut lr_kv_source, size: usize);
    pub fn lr_router_kv_source(
        router: *const lr_router,
        id: u32,
        out: *mut lr_kv_source,
    ) -> lr_status;
    pub fn lr_router_kv_reset(router: *mut lr_router, id: u32) -> lr_status;
    pub fn lr_router_export_gauges(router: *mut lr_router, out: *mut *mut lr_blob) -> lr_status;
    pub fn lr_router_import_gauges(
        router: *mut lr_router,
        buf: *const u8,
        len: usize,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_set_peer_key(router: *mut lr_router, key: *const u8, len: usize) -> lr_status;
    pub fn lr_router_snapshot(
        router: *mut lr_router,
        now_ns: u64,
        out: *mut *mut lr_blob,
    ) -> lr_status;
    pub fn lr_router_restore(
        router: *mut lr_router,
        buf: *const u8,
        len: usize,
        now_ns: u64,
    ) -> lr_status;
    pub fn lr_router_vllm_batch(
        router: *mut lr_router,
        instance: u32,
        buf: *const u8,
        len: usize,
        now_ns: u64,
        info: *mut lr_vllm_batch_info,
    ) -> lr_status;
}
