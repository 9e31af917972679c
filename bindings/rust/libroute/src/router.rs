//! The router (`lr_router.h`).

use crate::error::{check, Error, Result};
use crate::index::{IndexStats, KvStored, MmBuf, MmInput, Tier};
use crate::learner::{fill_samples, LearnFlags, LearnerOptions, LearnerSamples, LearnerStats};
use crate::load::{EngineStats, LoadSnapshot};
use crate::policy::{Candidate, PolicyInput};
use crate::{c_name, init, nanos, ptr_or_null, sys, Blob, InstanceId, INSTANCE_NONE};
use std::ffi::{c_char, CString};
use std::fmt;
use std::mem::{align_of, offset_of, size_of};
use std::ops::{BitOr, BitOrAssign};
use std::ptr::{self, NonNull};
use std::str::FromStr;
use std::time::Duration;

/// A routing policy (`lr_policy`); docs/router.md gives each rule.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy(u32);

named_consts! { Policy, lib sys::lr_policy_name,
    /// `"random"`.
    RANDOM = sys::LR_POLICY_RANDOM,
    /// `"round-robin"`.
    ROUND_ROBIN = sys::LR_POLICY_ROUND_ROBIN,
    /// `"least-request"`.
    LEAST_REQUEST = sys::LR_POLICY_LEAST_REQUEST,
    /// `"least-load"`.
    LEAST_LOAD = sys::LR_POLICY_LEAST_LOAD,
    /// `"session-affinity"`.
    SESSION_AFFINITY = sys::LR_POLICY_SESSION_AFFINITY,
    /// `"consistent-hash"` (bounded load).
    CONSISTENT_HASH = sys::LR_POLICY_CONSISTENT_HASH,
    /// `"prefix-cache"`.
    PREFIX_CACHE = sys::LR_POLICY_PREFIX_CACHE,
    /// `"prefix-cache-and-load"` (AIBrix); the default.
    PREFIX_CACHE_AND_LOAD = sys::LR_POLICY_PREFIX_CACHE_AND_LOAD,
    /// `"sglang-cache-aware"`.
    SGLANG_CACHE_AWARE = sys::LR_POLICY_SGLANG_CACHE_AWARE,
    /// `"preble"`.
    PREBLE = sys::LR_POLICY_PREBLE,
    /// `"min-ttft"` (Mooncake).
    MIN_TTFT = sys::LR_POLICY_MIN_TTFT,
    /// `"dynamo"`.
    DYNAMO = sys::LR_POLICY_DYNAMO,
    /// `"dualmap"`.
    DUALMAP = sys::LR_POLICY_DUALMAP,
    /// `"gorgo"`.
    GORGO = sys::LR_POLICY_GORGO,
    /// `"ranvier"`.
    RANVIER = sys::LR_POLICY_RANVIER,
    /// `"lodestar"`: a learned policy; see [`Router::learn_step`].
    LODESTAR = sys::LR_POLICY_LODESTAR,
    /// `"adaptive"`: self-calibrating predicted TTFT with a load
    /// externality; see docs/router.md.
    ADAPTIVE = sys::LR_POLICY_ADAPTIVE,
    /// `"lora-affinity"`: the Gateway API Inference Extension's LoRA
    /// scheduling (adapter resident or a free slot, queue, KV cache).
    LORA_AFFINITY = sys::LR_POLICY_LORA_AFFINITY,
    /// `"aibrix-lora"`: AIBrix's adapter routing (the least loaded of the
    /// instances holding the adapter, else where fewest are).
    AIBRIX_LORA = sys::LR_POLICY_AIBRIX_LORA,
    /// `"llm-d-pd"`: llm-d's disaggregated scheduling: the decode instance
    /// first (prefix and queue), then its prefix-based decider splits a
    /// request whose uncached part there is at least
    /// [`Param::PD_MIN_UNCACHED`], the prefill instance by the same profile.
    LLMD_PD = sys::LR_POLICY_LLMD_PD,
    /// `"dynamo-pd"`: Dynamo's disaggregated router, conditional: a request
    /// whose uncached part is short ([`Param::PD_LOCAL_MAX_TOKENS`],
    /// [`Param::PD_LOCAL_MAX_RATIO`]) is prefilled where it decodes.
    DYNAMO_PD = sys::LR_POLICY_DYNAMO_PD,
}

impl Policy {
    /// The policy of a name as [`Policy::name`] gives it
    /// ([`crate::ErrorKind::NotFound`] for an unknown one).
    pub fn from_name(name: &str) -> Result<Policy> {
        const OP: &str = "lr_policy_from_name";
        let name = c_name(name, OP)?;
        let mut p: i32 = 0;
        // SAFETY: a NUL-terminated name and an out pointer, both live.
        check(
            unsafe { sys::lr_policy_from_name(name.as_ptr(), &mut p) },
            OP,
        )?;
        Ok(Policy(p as u32))
    }

    /// How many policies the loaded library has (`lr_policy_count`):
    /// values `0..count` are all valid, maybe more than [`Policy::ALL`].
    pub fn count() -> u32 {
        // SAFETY: no arguments, never fails.
        unsafe { sys::lr_policy_count() }
    }
}

impl FromStr for Policy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Policy> {
        Policy::from_name(s)
    }
}

/// Why an instance was chosen (`lr_reason`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(u32);

named_consts! { Reason, lib sys::lr_reason_name,
    /// No decision.
    NONE = sys::LR_REASON_NONE,
    /// A uniform draw.
    RANDOM = sys::LR_REASON_RANDOM,
    /// Next in turn.
    ROUND_ROBIN = sys::LR_REASON_ROUND_ROBIN,
    /// The policy's load rule.
    LEAST_LOADED = sys::LR_REASON_LEAST_LOADED,
    /// Session or first-tokens hash.
    SESSION = sys::LR_REASON_SESSION,
    /// Consistent hash within the load bound.
    HASH = sys::LR_REASON_HASH,
    /// The best cached prefix.
    PREFIX_HIT = sys::LR_REASON_PREFIX_HIT,
    /// A cache choice overridden for load.
    LOAD_OVERRIDE = sys::LR_REASON_LOAD_OVERRIDE,
    /// The cache choice would break the TTFT SLO.
    SLO_SWITCH = sys::LR_REASON_SLO_SWITCH,
    /// No usable prefix: the fallback rule.
    FALLBACK = sys::LR_REASON_FALLBACK,
    /// The lowest predicted cost.
    MIN_COST = sys::LR_REASON_MIN_COST,
    /// Drawn from a softmax over costs.
    SAMPLED = sys::LR_REASON_SAMPLED,
    /// Restricted to hash candidates (Lodestar).
    K_FILTER = sys::LR_REASON_K_FILTER,
    /// An exploration draw (Lodestar).
    EXPLORE = sys::LR_REASON_EXPLORE,
    /// No trained model yet (Lodestar).
    COLD_START = sys::LR_REASON_COLD_START,
    /// Input out of the model's range (Lodestar).
    OOD = sys::LR_REASON_OOD,
    /// Held in the router's queue, no instance yet
    /// ([`RouteFlags::MAY_WAIT`]; see [`Router::dispatch`]).
    WAITING = sys::LR_REASON_WAITING,
    /// Its LoRA adapter is resident there, or a slot is free
    /// ([`Policy::LORA_AFFINITY`], [`Policy::AIBRIX_LORA`]).
    ADAPTER = sys::LR_REASON_ADAPTER,
    /// Kept whole where it decodes although prefill instances exist
    /// ([`Decision::prefill_reason`] only).
    WHOLE = sys::LR_REASON_WHOLE,
}

/// An instance's part in a disaggregated fleet (`lr_role`):
/// [`InstanceSpec::role`], [`Candidate::role`]. A fleet whose instances are
/// all [`Role::BOTH`] is aggregated: every decision keeps a request whole.
/// With [`Role::PREFILL`] instances a decision may split a request: the
/// prefill instance computes its KV, which moves to the decode instance
/// ([`Decision::prefill_instance`]).
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Role(u32);

named_consts! { Role, consts,
    /// Prefills and decodes its requests (every instance before 0.3; the
    /// default).
    BOTH = sys::LR_ROLE_BOTH,
    /// Prefills for decode instances; decodes none.
    PREFILL = sys::LR_ROLE_PREFILL,
    /// Decodes; prefills a request kept whole.
    DECODE = sys::LR_ROLE_DECODE,
}

impl Reason {
    /// How many reasons the loaded library has (`lr_reason_count`).
    pub fn count() -> u32 {
        // SAFETY: no arguments, never fails.
        unsafe { sys::lr_reason_count() }
    }
}

/// A policy parameter (`lr_param`): a router's run-time tunable and a key
/// of [`crate::PolicyInput::params`]. `lr_policy.h` documents each and
/// [`Param::bounds`] gives its range and default.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Param(u32);

named_consts! { Param, consts,
    /// prefix-cache: least match ratio to follow the cache.
    PREFIX_MIN_RATIO = sys::LR_PARAM_PREFIX_MIN_RATIO,
    /// consistent-hash: load bound c.
    BOUNDED_LOAD = sys::LR_PARAM_BOUNDED_LOAD,
    /// prefix-cache-and-load: in-flight spread above which the least loaded wins.
    AIBRIX_IMBALANCE = sys::LR_PARAM_AIBRIX_IMBALANCE,
    /// prefix-cache-and-load: k in mean + k x stddev.
    AIBRIX_STDDEV = sys::LR_PARAM_AIBRIX_STDDEV,
    /// sglang-cache-aware: absolute imbalance.
    SGLANG_ABS = sys::LR_PARAM_SGLANG_ABS,
    /// sglang-cache-aware: relative imbalance.
    SGLANG_REL = sys::LR_PARAM_SGLANG_REL,
    /// sglang-cache-aware: least match ratio for the cache.
    SGLANG_MIN_RATIO = sys::LR_PARAM_SGLANG_MIN_RATIO,
    /// preble: hit ratio above which the best hit wins.
    PREBLE_HIT = sys::LR_PARAM_PREBLE_HIT,
    /// dynamo: weight of uncached prefill blocks.
    DYNAMO_OVERLAP = sys::LR_PARAM_DYNAMO_OVERLAP,
    /// dynamo: softmax temperature (0: argmin).
    DYNAMO_TEMPERATURE = sys::LR_PARAM_DYNAMO_TEMPERATURE,
    /// dualmap and rebalancing: TTFT SLO, seconds.
    TTFT_SLO_S = sys::LR_PARAM_TTFT_SLO_S,
    /// dualmap: tokens per hash-key block.
    DUALMAP_KEY_TOKENS = sys::LR_PARAM_DUALMAP_KEY_TOKENS,
    /// dualmap: most key blocks of a hot prefix.
    DUALMAP_MAX_KEY_BLOCKS = sys::LR_PARAM_DUALMAP_MAX_KEY_BLOCKS,
    /// dualmap: requests in the hotness window.
    DUALMAP_WINDOW = sys::LR_PARAM_DUALMAP_WINDOW,
    /// gorgo: RTT weight.
    GORGO_W_RTT = sys::LR_PARAM_GORGO_W_RTT,
    /// gorgo: queue weight.
    GORGO_W_QUEUE = sys::LR_PARAM_GORGO_W_QUEUE,
    /// gorgo: the tuner's step size.
    GORGO_SIGMA = sys::LR_PARAM_GORGO_SIGMA,
    /// gorgo: 1 freezes the tuner.
    GORGO_FROZEN = sys::LR_PARAM_GORGO_FROZEN,
    /// gorgo: cap on the RTT weight.
    GORGO_W_RTT_MAX = sys::LR_PARAM_GORGO_W_RTT_MAX,
    /// gorgo: floor on the queue weight.
    GORGO_W_QUEUE_MIN = sys::LR_PARAM_GORGO_W_QUEUE_MIN,
    /// ranvier: in flight above this x median goes to the least loaded.
    RANVIER_PRESSURE = sys::LR_PARAM_RANVIER_PRESSURE,
    /// session-affinity: leading tokens hashed without a session.
    SESSION_TOKENS = sys::LR_PARAM_SESSION_TOKENS,
    /// Scrapes older than this are ignored, seconds.
    STATS_MAX_AGE_S = sys::LR_PARAM_STATS_MAX_AGE_S,
    /// Output tokens assumed when a request does not say.
    DEFAULT_OUTPUT_TOKENS = sys::LR_PARAM_DEFAULT_OUTPUT_TOKENS,
    /// gorgo: 1 releases a request's queued tokens at its first token.
    GORGO_RELEASE_AT_FIRST_TOKEN = sys::LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN,
    /// lodestar: probability of a uniform exploration draw.
    LODESTAR_EPSILON = sys::LR_PARAM_LODESTAR_EPSILON,
    /// lodestar: candidates within this fraction of the best tie.
    LODESTAR_TIE = sys::LR_PARAM_LODESTAR_TIE,
    /// lodestar: mean KV use above which the K-filter may apply.
    LODESTAR_KV_THRESHOLD = sys::LR_PARAM_LODESTAR_KV_THRESHOLD,
    /// lodestar: cached tokens above which the K-filter may apply.
    LODESTAR_KFILTER_TOKENS = sys::LR_PARAM_LODESTAR_KFILTER_TOKENS,
    /// lodestar: 1 falls back when features leave the training range.
    LODESTAR_OOD = sys::LR_PARAM_LODESTAR_OOD,
    /// lodestar: the policy used on cold start and out of range.
    LODESTAR_FALLBACK = sys::LR_PARAM_LODESTAR_FALLBACK,
    /// lodestar: most candidates scored (0: every routable instance).
    LODESTAR_CANDIDATES = sys::LR_PARAM_LODESTAR_CANDIDATES,
    /// lodestar: first tokens later than this (seconds) give no sample.
    LODESTAR_MAX_TTFT_S = sys::LR_PARAM_LODESTAR_MAX_TTFT_S,
    /// adaptive: weight of the prefill work a placement adds for others.
    ADAPTIVE_WORK_WEIGHT = sys::LR_PARAM_ADAPTIVE_WORK_WEIGHT,
    /// adaptive: weight of the decode contention a placement adds.
    ADAPTIVE_CONTENTION = sys::LR_PARAM_ADAPTIVE_CONTENTION,
    /// adaptive: scores within this many seconds of the best tie.
    ADAPTIVE_TIE_S = sys::LR_PARAM_ADAPTIVE_TIE_S,
    /// adaptive: a prefix routed less than this ago is not cached yet.
    ADAPTIVE_FRESH_S = sys::LR_PARAM_ADAPTIVE_FRESH_S,
    /// adaptive: weight of the RTT in the predicted TTFT.
    ADAPTIVE_RTT_WEIGHT = sys::LR_PARAM_ADAPTIVE_RTT_WEIGHT,
    /// adaptive: 1 fits each class's TTFT model online, 0 freezes it.
    ADAPTIVE_CALIBRATE = sys::LR_PARAM_ADAPTIVE_CALIBRATE,
    /// The router's clock: a timestamp more than this many seconds ahead
    /// of the newest one taken is refused ([`crate::ErrorKind::Range`]).
    CLOCK_SKEW_S = sys::LR_PARAM_CLOCK_SKEW_S,
    /// The waiting queue: an instance is saturated when this many of the
    /// router's requests there wait for their first token, or its fresh
    /// scrape reports this many waiting.
    SATURATION_QUEUE = sys::LR_PARAM_SATURATION_QUEUE,
    /// The waiting queue: ... or at least this share of its KV cache in use.
    SATURATION_KV = sys::LR_PARAM_SATURATION_KV,
    /// The waiting queue's fair share: a request let out charges its
    /// tenant this weight x its prompt tokens ...
    FAIR_INPUT_WEIGHT = sys::LR_PARAM_FAIR_INPUT_WEIGHT,
    /// ... plus this weight x its expected output tokens.
    FAIR_OUTPUT_WEIGHT = sys::LR_PARAM_FAIR_OUTPUT_WEIGHT,
    /// adaptive: 1 chooses, for a request with a deadline, among the
    /// instances predicted to meet it when its least-cost choice would
    /// not, and the one predicted fastest when none would
    /// ([`Reason::SLO_SWITCH`]); 0 ignores deadlines.
    ADAPTIVE_DEADLINE = sys::LR_PARAM_ADAPTIVE_DEADLINE,
    /// Saturation: an instance is also saturated when the prefill the
    /// router queued there would take this many seconds at its class's
    /// rate (0.15).
    SATURATION_PREFILL_S = sys::LR_PARAM_SATURATION_PREFILL_S,
    /// Seconds an engine takes to load a LoRA adapter that is not
    /// resident (0.1): what every policy's rows say
    /// ([`Candidate::adapter_load_s`]) until adaptive has learnt it.
    ADAPTER_LOAD_S = sys::LR_PARAM_ADAPTER_LOAD_S,
    /// What a prompt token an instance holds in host memory
    /// ([`Candidate::cpu_tokens`]) is worth against one on its GPU (0.8,
    /// llm-d's tier weight); 0..=1. dynamo and adaptive weigh it.
    TIER_CPU_WEIGHT = sys::LR_PARAM_TIER_CPU_WEIGHT,
    /// As [`Param::TIER_CPU_WEIGHT`], for a token on disk
    /// ([`Candidate::disk_tokens`]; 0.25, Dynamo's).
    TIER_DISK_WEIGHT = sys::LR_PARAM_TIER_DISK_WEIGHT,
    /// Bytes of KV cache a prompt token takes (131072: Llama-3-8B in
    /// bf16): what a split request moves from its prefill to its decode
    /// instance, for the prompt tokens the decode instance does not hold.
    KV_BYTES_PER_TOKEN = sys::LR_PARAM_KV_BYTES_PER_TOKEN,
    /// KV transfer bandwidth in GB/s between two instances on one node
    /// (300: NVLink), by [`InstanceSpec::node`].
    KV_GBPS_NODE = sys::LR_PARAM_KV_GBPS_NODE,
    /// ... in one rack (50), by [`InstanceSpec::rack`].
    KV_GBPS_RACK = sys::LR_PARAM_KV_GBPS_RACK,
    /// ... in one region (12.5), by [`InstanceSpec::region`].
    KV_GBPS_REGION = sys::LR_PARAM_KV_GBPS_REGION,
    /// ... across regions (1.25).
    KV_GBPS_WAN = sys::LR_PARAM_KV_GBPS_WAN,
    /// The policy that picks a split request's prefill instance when the
    /// router's policy has no pair rule of its own (SGLang's
    /// `--prefill-policy`): -1 (the default) the router's policy, else a
    /// policy that keeps no state and reads no ring, or round-robin.
    PD_PREFILL_POLICY = sys::LR_PARAM_PD_PREFILL_POLICY,
    /// [`Policy::LLMD_PD`]'s decider: split when the decode instance
    /// would prefill at least this many uncached tokens itself (16; 0
    /// splits always).
    PD_MIN_UNCACHED = sys::LR_PARAM_PD_MIN_UNCACHED,
    /// [`Policy::DYNAMO_PD`]: prefill where it decodes when its uncached
    /// tokens there are fewer than this (2048) ...
    PD_LOCAL_MAX_TOKENS = sys::LR_PARAM_PD_LOCAL_MAX_TOKENS,
    /// ... and a share of the prompt below this (0.7).
    PD_LOCAL_MAX_RATIO = sys::LR_PARAM_PD_LOCAL_MAX_RATIO,
    /// adaptive keeps a request whole on a decode instance where requests
    /// are in flight only when its prefill's seconds there are at most
    /// this x the decode seconds of a request there
    /// ([`crate::Candidate::decode_s`]) and the wait it would have at the
    /// prefill instance is at least twice what it stalls them all
    /// together (0.1; 0: only on an idle decode instance).
    ADAPTIVE_PD_STALL = sys::LR_PARAM_ADAPTIVE_PD_STALL,
    /// A route in a fleet of more than this many routable instances (256)
    /// weighs only the candidates its policy can pick: the instances
    /// holding the prompt's longest prefixes, the ring's, the least loaded
    /// and a uniform sample, [`Param::NARROW_WIDTH`] (16) of each.
    NARROW_ABOVE = sys::LR_PARAM_NARROW_ABOVE,
    /// How many instances each source of a narrowed route gives (16).
    NARROW_WIDTH = sys::LR_PARAM_NARROW_WIDTH,
}

/// The range and default of a parameter: values in `lo..=hi` are accepted
/// (others are [`crate::ErrorKind::Range`], never clamped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Least value accepted.
    pub lo: f64,
    /// Greatest value accepted.
    pub hi: f64,
    /// The default.
    pub default: f64,
    /// Whole numbers only (`LR_BOUNDS_INTEGER`): a fraction is
    /// [`crate::ErrorKind::Invalid`].
    pub integer: bool,
}

impl Bounds {
    pub(crate) fn from_c(b: sys::lr_bounds, op: &'static str) -> Result<Bounds> {
        check(b.status as sys::lr_status, op)?;
        Ok(Bounds {
            lo: b.lo,
            hi: b.hi,
            default: b.def,
            integer: b.flags & sys::LR_BOUNDS_INTEGER != 0,
        })
    }
}

impl Param {
    /// The parameter's range and default (`lr_param_bounds`;
    /// [`crate::ErrorKind::NotSupported`] for an unknown key).
    pub fn bounds(self) -> Result<Bounds> {
        // SAFETY: pure function of the key.
        Bounds::from_c(unsafe { sys::lr_param_bounds(self.c()) }, "lr_param_bounds")
    }

    /// How many parameters the loaded library has (`lr_param_count`): keys
    /// `0..count` are all valid.
    pub fn count() -> u32 {
        // SAFETY: no arguments, never fails.
        unsafe { sys::lr_param_count() }
    }

    /// Every parameter's default, indexed by key: a
    /// [`crate::PolicyInput::params`] to start from.
    pub fn defaults() -> Vec<f64> {
        (0..Param::count())
            .map(|k| Param(k).bounds().map_or(f64::NAN, |b| b.default))
            .collect()
    }
}

/// Options fixed when a router is created. Start from `default()`, which is
/// the library's `lr_router_options_init`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RouterOptions {
    /// The initial policy.
    pub policy: Policy,
    /// Seeds every random choice: equal seeds and inputs, equal decisions.
    pub seed: u64,
    /// Instances at once (0: the default).
    pub max_instances: u32,
    /// Requests in flight at once (0: the default).
    pub max_requests: u32,
    /// Prefix index block size, tokens (0: the default).
    pub block_tokens: u32,
    /// Prefix index capacity, block routes (0: the default).
    pub index_capacity_blocks: u64,
    /// Time an unused route lives; zero: the default; `Duration::MAX`: for
    /// ever.
    pub index_ttl: Duration,
    /// Virtual nodes per instance on the ring (0: the default).
    pub ring_vnodes: u32,
    /// Keys the router's hash tables against flooding; 0: a random one
    /// from the operating system. Independent of `seed`; set it only to
    /// reproduce a table layout.
    pub hash_seed: u64,
    /// Lodestar's learner (buffers, schedule, network); `None`: the
    /// library's defaults. `n_features` must be 0 or
    /// [`crate::lodestar_feature_count`]; `seed` is ignored (the router's seeds
    /// it). Copied at creation; the learner is made when
    /// [`Policy::LODESTAR`] is first chosen.
    pub learner: Option<LearnerOptions>,
    /// This gateway replica's id, stamped on its deltas and gauges (0:
    /// none); give each process incarnation its own (a random number).
    pub replica_id: u64,
    /// REMOTE routes (other replicas' deltas) unused this long expire;
    /// zero: `index_ttl`.
    pub remote_ttl: Duration,
    /// Other replicas' gauges count this long after they arrive (zero:
    /// the default, 2 s).
    pub gauge_ttl: Duration,
    /// Other replicas tracked at once (0: the default).
    pub max_peers: u32,
    /// The index's eviction; [`crate::Eviction::Lru`] for replicas
    /// sharing deltas.
    pub index_eviction: crate::Eviction,
    /// The waiting queue ([`RouteFlags::MAY_WAIT`]): requests held at once,
    /// at most `sys::LR_ROUTER_MAX_WAITING` (0: the default). Taken at the
    /// first request that waits.
    pub queue_capacity: u32,
    /// Tenants whose fair share is kept at once, at most
    /// `sys::LR_ROUTER_MAX_TENANTS` (0: the default).
    pub queue_tenants: u32,
    /// Prompt tokens of the waiting requests held at once, at most
    /// `sys::LR_ROUTER_MAX_QUEUE_TOKENS` (0: the default).
    pub queue_tokens: u64,
    /// How many routed prompts' instances to remember past the index (0:
    /// none; at most `sys::LR_ROUTER_MAX_MARKS`): about the fleet's KV
    /// blocks over the blocks a request adds.
    pub marks: u64,
}

impl Default for RouterOptions {
    fn default() -> Self {
        let o = init(sys::lr_router_options_init_sized);
        RouterOptions {
            policy: Policy(o.policy as u32),
            seed: o.seed,
            max_instances: o.max_instances,
            max_requests: o.max_requests,
            block_tokens: o.block_tokens,
            index_capacity_blocks: o.index_capacity_blocks,
            index_ttl: Duration::from_nanos(o.index_ttl_ns),
            ring_vnodes: o.ring_vnodes,
            hash_seed: o.hash_seed,
            learner: None,
            replica_id: o.replica_id,
            remote_ttl: Duration::from_nanos(o.remote_ttl_ns),
            gauge_ttl: Duration::from_nanos(o.gauge_ttl_ns),
            max_peers: o.max_peers,
            index_eviction: crate::Eviction::from_c(o.index_eviction),
            queue_capacity: o.queue_capacity,
            queue_tenants: o.queue_tenants,
            queue_tokens: o.queue_tokens,
            marks: o.marks,
        }
    }
}

/// An instance to add.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InstanceSpec<'a> {
    /// Host name, for example `"10.0.0.5:8000"` (1..255 bytes). It places
    /// the instance on the ring, so every gateway replica agrees.
    pub name: &'a str,
    /// GPU class, see [`Router::set_class`].
    pub class: u32,
    /// Whether the engine caches prefixes (default true).
    pub prefix_caching: bool,
    /// Initial RTT until probes arrive; zero if unknown.
    pub rtt: Duration,
    /// The models it serves (vLLM's served model names: a base model and
    /// its aliases; at most [`MAX_MODELS`] of 1..=[`MAX_NAME`] bytes,
    /// copied). A request that names a model goes only to the instances
    /// that serve it. Empty: it serves whatever a request names.
    pub models: &'a [&'a str],
    /// Its LoRA adapter slots (vLLM's `--max-loras`), at most
    /// [`MAX_ADAPTERS`] ([`crate::ErrorKind::Range`] above); 0: not known.
    pub max_adapters: u32,
    /// Its part in a disaggregated fleet ([`Role::BOTH`] by default;
    /// another value than the three is [`crate::ErrorKind::Invalid`]).
    /// With prefill instances routable, [`Router::route`] may split a
    /// request ([`Decision::prefill_instance`]).
    pub role: Role,
    /// Where it runs, as the host numbers its nodes, racks and regions (0:
    /// unknown): two instances on the same nonzero node move KV at
    /// [`Param::KV_GBPS_NODE`], in the same rack at
    /// [`Param::KV_GBPS_RACK`], in the same region at
    /// [`Param::KV_GBPS_REGION`], else at [`Param::KV_GBPS_WAN`]; an
    /// unknown one compares as different from everything but counts as
    /// the same region.
    pub node: u32,
    /// See [`InstanceSpec::node`].
    pub rack: u32,
    /// See [`InstanceSpec::node`].
    pub region: u32,
}

/// Bytes in a model or adapter name (`LR_ROUTER_MAX_NAME`).
pub const MAX_NAME: u32 = sys::LR_ROUTER_MAX_NAME;
/// Models one instance serves (`LR_ROUTER_MAX_MODELS`).
pub const MAX_MODELS: u32 = sys::LR_ROUTER_MAX_MODELS;
/// Adapter slots the router follows per instance, and names one
/// [`AdapterStats`] holds (`LR_ROUTER_MAX_ADAPTERS`).
pub const MAX_ADAPTERS: u32 = sys::LR_ROUTER_MAX_ADAPTERS;

impl<'a> InstanceSpec<'a> {
    /// The library's default spec (`lr_instance_spec_init`) with a name.
    pub fn new(name: &'a str) -> Self {
        let s = init(sys::lr_instance_spec_init_sized);
        InstanceSpec {
            name,
            class: s.instance_class,
            prefix_caching: s.prefix_caching != 0,
            rtt: Duration::from_nanos(s.rtt_ns),
            models: &[],
            max_adapters: s.max_adapters,
            role: Role(s.role as u32),
            node: s.node,
            rack: s.rack,
            region: s.region,
        }
    }
}

/// Names as C strings, and an array of pointers to them, for a call
/// (`lr_instance_spec.models`, `lr_adapter_stats.running`): the pointers
/// are valid while this lives. A name with a NUL is
/// [`crate::ErrorKind::Invalid`].
struct CNames {
    _names: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CNames {
    fn new(names: &[&str], op: &'static str) -> Result<CNames> {
        let names = names
            .iter()
            .map(|n| c_name(n, op))
            .collect::<Result<Vec<_>>>()?;
        let ptrs = names.iter().map(|n| n.as_ptr()).collect();
        Ok(CNames {
            _names: names,
            ptrs,
        })
    }

    fn ptr(&self) -> *const *const c_char {
        ptr_or_null(&self.ptrs)
    }
}

/// An instance's LoRA adapters as its engine reports them: vLLM's
/// `vllm:lora_requests_info` gauge, whose labels `running_lora_adapters`
/// and `waiting_lora_adapters` list them comma-separated (one name per
/// entry here) and `max_lora` its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct AdapterStats<'a> {
    /// Adapters with requests running there (resident); 1..=[`MAX_NAME`]
    /// bytes each, at most [`MAX_ADAPTERS`] with `waiting`.
    pub running: &'a [&'a str],
    /// Adapters with requests waiting there (to load, or for a slot).
    pub waiting: &'a [&'a str],
    /// Its slots (`max_lora`); 0 keeps what the instance was added with.
    pub max_adapters: u32,
    /// Host time of the scrape, nanoseconds.
    pub scraped_ns: u64,
}

impl<'a> AdapterStats<'a> {
    /// A report of the adapters running and waiting, read at `scraped_ns`.
    pub fn new(running: &'a [&'a str], waiting: &'a [&'a str], scraped_ns: u64) -> Self {
        AdapterStats {
            running,
            waiting,
            max_adapters: 0,
            scraped_ns,
        }
    }
}

/// The speed of a class of engines (GPU model).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClassSpec {
    /// Prefill throughput, tokens per second, in [1, 1e9].
    pub prefill_tokens_per_s: f64,
}

impl Default for ClassSpec {
    fn default() -> Self {
        let s = init(sys::lr_class_spec_init_sized);
        ClassSpec {
            prefill_tokens_per_s: s.prefill_tokens_per_s,
        }
    }
}

/// Flags of a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RouteFlags(u32);

impl RouteFlags {
    /// No flags.
    pub const NONE: RouteFlags = RouteFlags(0);
    /// Only ask: nothing is recorded or learned.
    pub const DRY_RUN: RouteFlags = RouteFlags(sys::LR_ROUTE_DRY_RUN);
    /// Record the dispatch but do not learn the prompt (hosts that feed
    /// engine KV events instead).
    pub const NO_LEARN: RouteFlags = RouteFlags(sys::LR_ROUTE_NO_LEARN);
    /// The router may hold the request in its queue when the fleet is
    /// saturated or requests at least as urgent wait: the decision is then
    /// [`Reason::WAITING`] with no instance, and [`Router::dispatch`] lets
    /// it out later.
    pub const MAY_WAIT: RouteFlags = RouteFlags(sys::LR_ROUTE_MAY_WAIT);
    /// Refuse such a request with [`crate::ErrorKind::Busy`] instead.
    pub const SHEDDABLE: RouteFlags = RouteFlags(sys::LR_ROUTE_SHEDDABLE);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: RouteFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for RouteFlags {
    type Output = RouteFlags;
    fn bitor(self, rhs: RouteFlags) -> RouteFlags {
        RouteFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for RouteFlags {
    fn bitor_assign(&mut self, rhs: RouteFlags) {
        self.0 |= rhs.0;
    }
}

/// A request to route; its slices are borrowed for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request<'a> {
    /// The host's id, unique among requests in flight.
    pub id: u64,
    /// The prompt's tokens.
    pub tokens: &'a [u32],
    /// Message ends as token offsets, ascending; learned as routes.
    pub boundaries: &'a [u32],
    /// Enters every prefix key: tenants never share cached prefixes.
    pub tenant_salt: u64,
    /// Session id, for session affinity.
    pub session: Option<u64>,
    /// Expected output tokens; 0 if unknown.
    pub expected_output_tokens: u32,
    /// Route flags.
    pub flags: RouteFlags,
    /// Host time now, nanoseconds.
    pub now_ns: u64,
    /// The tenant whose fair share of the waiting queue the request counts
    /// against (any value, 0 included); unlike `tenant_salt` it does not
    /// separate cached prefixes.
    pub tenant: u64,
    /// Its TTFT deadline on the host's clock, nanoseconds (0: none): still
    /// waiting then, [`Router::dispatch`] returns it expired. adaptive
    /// routes it where it is predicted to meet it
    /// ([`PolicyInput::ttft_budget_s`], [`Param::ADAPTIVE_DEADLINE`]).
    pub deadline_ns: u64,
    /// Its priority band in the waiting queue, RFC 9218's urgency: 0 (the
    /// most urgent) .. [`URGENCIES`] - 1.
    pub urgency: u32,
    /// The model it names (at most [`MAX_NAME`] bytes; `None` or `""`:
    /// any): only the instances that serve it
    /// ([`InstanceSpec::models`]) are candidates, and
    /// [`crate::ErrorKind::NotFound`] when none does.
    pub model: Option<&'a str>,
    /// The LoRA adapter it runs under (at most [`MAX_NAME`] bytes; `None`
    /// or `""`: the base model). It enters every prefix key: an adapter's
    /// cached prefixes never match the base model's or another adapter's.
    pub adapter: Option<&'a str>,
    /// Its multimodal inputs (images, audio), as [`crate::Prompt::mm`]:
    /// their keys enter the blocks their placeholder tokens overlap, as
    /// vLLM's do, so the request matches the blocks the engine's KV events
    /// stored for the same inputs ([`KvStored::mm_hashes`]) and no others.
    pub mm: &'a [MmInput<'a>],
}

/// A request's name (model, adapter) NUL-terminated on the stack for a
/// call: one byte more than the library takes fits, so a longer name is
/// still the library's `LR_EINVAL`, and routing allocates nothing.
struct NameBuf([u8; MAX_NAME as usize + 2]);

impl NameBuf {
    fn new() -> NameBuf {
        NameBuf([0; MAX_NAME as usize + 2])
    }

    /// The name as a C string in this buffer, NULL for none; a NUL inside
    /// is `LR_EINVAL`.
    fn c(&mut self, name: Option<&str>, op: &'static str) -> Result<*const c_char> {
        let b = match name {
            None | Some("") => return Ok(ptr::null()),
            Some(s) => s.as_bytes(),
        };
        if b.contains(&0) {
            return Err(Error::new(sys::LR_EINVAL, op));
        }
        let n = b.len().min(MAX_NAME as usize + 1);
        self.0[..n].copy_from_slice(&b[..n]);
        self.0[n] = 0;
        Ok(self.0.as_ptr().cast())
    }
}

/// Priority bands of the waiting queue: [`Request::urgency`] is
/// `0..URGENCIES`.
pub const URGENCIES: u32 = sys::LR_ROUTER_URGENCIES;

impl<'a> Request<'a> {
    /// A request with no boundaries, salt, session, flags, tenant,
    /// deadline or urgency.
    pub fn new(id: u64, tokens: &'a [u32], now_ns: u64) -> Self {
        Request {
            id,
            tokens,
            boundaries: &[],
            tenant_salt: 0,
            session: None,
            expected_output_tokens: 0,
            flags: RouteFlags::NONE,
            now_ns,
            tenant: 0,
            deadline_ns: 0,
            urgency: 0,
            model: None,
            adapter: None,
            mm: &[],
        }
    }

    /// The C request, its names in `names` and its multimodal inputs in
    /// `mm` (which must outlive its use).
    fn to_c(
        self,
        names: &mut [NameBuf; 2],
        mm: &mut MmBuf,
        op: &'static str,
    ) -> Result<sys::lr_request> {
        let [m, a] = names;
        let mut q = self.to_c_scalars();
        q.model = m.c(self.model, op)?;
        q.adapter = a.c(self.adapter, op)?;
        (q.mm, q.n_mm) = mm.c(self.mm, op)?;
        Ok(q)
    }

    fn to_c_scalars(self) -> sys::lr_request {
        let mut q = init(sys::lr_request_init_sized);
        q.id = self.id;
        q.tokens = ptr_or_null(self.tokens);
        q.n_tokens = self.tokens.len();
        q.boundaries = ptr_or_null(self.boundaries);
        q.n_boundaries = self.boundaries.len();
        q.tenant_salt = self.tenant_salt;
        q.session = self.session.unwrap_or(0);
        q.has_session = self.session.is_some() as i32;
        q.expected_output_tokens = self.expected_output_tokens;
        q.flags = self.flags.0;
        q.now_ns = self.now_ns;
        q.tenant = self.tenant;
        q.deadline_ns = self.deadline_ns;
        q.urgency = self.urgency;
        q
    }
}

/// Where a request goes and why.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Decision {
    /// The chosen instance.
    pub instance: InstanceId,
    /// Why.
    pub reason: Reason,
    /// Tokens expected to hit the cache there.
    pub cached_tokens: u32,
    /// The deepest cached prefix on any routable instance.
    pub best_cached_tokens: u32,
    /// The policy's predicted cost of the choice, if it predicts one.
    pub cost: Option<f64>,
    /// The other candidate (dualmap, consistent-hash, Lodestar's K-filter).
    pub alt_instance: Option<InstanceId>,
    /// The policy that chose: the router's, or Lodestar's fallback on cold
    /// start and out of range.
    pub decider: Option<Policy>,
    /// The seed the policy drew with: [`crate::decide`] with the same rows,
    /// parameters and seed makes the same choice.
    pub seed: u64,
    /// The instance that prefills the request when the decision splits it
    /// (a fleet with [`Role::PREFILL`] instances): `instance` then decodes
    /// it, its KV moving over. None: `instance` does both.
    pub prefill_instance: Option<InstanceId>,
    /// Why that prefill instance; [`Reason::WHOLE`] when a fleet that
    /// could split kept the request whole; None when no candidate was a
    /// prefill instance.
    pub prefill_reason: Option<Reason>,
    /// Tokens expected to hit the cache at `prefill_instance`.
    pub prefill_cached_tokens: u32,
    /// The KV transfer's expected seconds (0 when not split), from the
    /// placements ([`InstanceSpec::node`], ...) and [`Param::KV_GBPS_NODE`]
    /// .. [`Param::KV_GBPS_WAN`].
    pub transfer_s: f64,
}

impl Decision {
    pub(crate) fn from_c(d: &sys::lr_decision) -> Decision {
        Decision {
            instance: d.instance,
            reason: Reason(d.reason as u32),
            cached_tokens: d.cached_tokens,
            best_cached_tokens: d.best_cached_tokens,
            cost: if d.cost.is_nan() { None } else { Some(d.cost) },
            alt_instance: if d.alt_instance == INSTANCE_NONE {
                None
            } else {
                Some(d.alt_instance)
            },
            decider: u32::try_from(d.decider).ok().map(Policy),
            seed: d.seed,
            prefill_instance: if d.prefill_instance == INSTANCE_NONE {
                None
            } else {
                Some(d.prefill_instance)
            },
            prefill_reason: u32::try_from(d.prefill_reason).ok().map(Reason),
            prefill_cached_tokens: d.prefill_cached_tokens,
            transfer_s: d.transfer_s,
        }
    }
}

/// One instance's score in a decision.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Score {
    /// The instance.
    pub instance: InstanceId,
    /// Tokens expected to hit its prefix cache.
    pub cached_tokens: u32,
    /// What the policy ranks by, lower is better; NaN where the policy did
    /// not rank this instance.
    pub score: f64,
}

/// One proposed move of a queued request to its other candidate.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Move {
    /// The request.
    pub request_id: u64,
    /// Where it is queued.
    pub from: InstanceId,
    /// Where it would go.
    pub to: InstanceId,
    /// Expected TTFT saved, seconds.
    pub benefit_s: f64,
}

// Score and Move are handed to C as lr_score / lr_move arrays.
const _: () = {
    assert!(size_of::<Score>() == size_of::<sys::lr_score>());
    assert!(align_of::<Score>() == align_of::<sys::lr_score>());
    assert!(offset_of!(Score, instance) == offset_of!(sys::lr_score, instance));
    assert!(offset_of!(Score, cached_tokens) == offset_of!(sys::lr_score, cached_tokens));
    assert!(offset_of!(Score, score) == offset_of!(sys::lr_score, score));
    assert!(size_of::<Move>() == size_of::<sys::lr_move>());
    assert!(align_of::<Move>() == align_of::<sys::lr_move>());
    assert!(offset_of!(Move, request_id) == offset_of!(sys::lr_move, request_id));
    assert!(offset_of!(Move, from) == offset_of!(sys::lr_move, from));
    assert!(offset_of!(Move, to) == offset_of!(sys::lr_move, to));
    assert!(offset_of!(Move, benefit_s) == offset_of!(sys::lr_move, benefit_s));
};

/// Entries asked of `lr_router_dispatch` per call.
const DISPATCH_CHUNK: usize = 32;

/// One request [`Router::dispatch`] let out of the waiting queue
/// (`lr_dispatched`). Whatever its result, it has left the queue.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Dispatched {
    /// The request.
    pub request_id: u64,
    /// `Ok(instance)`: routed now and recorded in flight there; send it.
    /// [`crate::ErrorKind::Expired`]: its deadline passed while it waited;
    /// answer it (429, 504). [`crate::ErrorKind::Exists`]: its id came in
    /// flight meanwhile; it is dropped.
    pub result: Result<InstanceId>,
    /// The decision's reason.
    pub reason: Reason,
    /// Tokens expected to hit the cache on its instance.
    pub cached_tokens: u32,
    /// The policy's predicted cost, if it predicts one.
    pub cost: Option<f64>,
    /// How long it waited: dispatch's `now_ns` minus its route's.
    pub waited: Duration,
    /// Its [`Request::urgency`].
    pub urgency: u32,
    /// Its [`Request::tenant`].
    pub tenant: u64,
    /// The decision's prefill leg, as [`Decision::prefill_instance`]: the
    /// instance that prefills the request when the router split it (send
    /// it there first, then to the decode instance, and call
    /// [`Router::prefill_done`] when the first leg returns). None: the
    /// decode instance does both.
    pub prefill_instance: Option<InstanceId>,
    /// Why that prefill instance, as [`Decision::prefill_reason`].
    pub prefill_reason: Option<Reason>,
    /// Tokens expected to hit the cache at `prefill_instance`.
    pub prefill_cached_tokens: u32,
    /// The KV transfer's expected seconds (0 when not split).
    pub transfer_s: f64,
}

impl Dispatched {
    fn from_c(e: &sys::lr_dispatched) -> Dispatched {
        Dispatched {
            request_id: e.request_id,
            result: check(e.status as sys::lr_status, "lr_router_dispatch").map(|()| e.instance),
            reason: Reason(e.reason as u32),
            cached_tokens: e.cached_tokens,
            cost: if e.cost.is_nan() { None } else { Some(e.cost) },
            waited: Duration::from_nanos(e.waited_ns),
            urgency: e.urgency,
            tenant: e.tenant,
            prefill_instance: if e.prefill_instance == INSTANCE_NONE {
                None
            } else {
                Some(e.prefill_instance)
            },
            prefill_reason: u32::try_from(e.prefill_reason).ok().map(Reason),
            prefill_cached_tokens: e.prefill_cached_tokens,
            transfer_s: e.transfer_s,
        }
    }
}

/// A failed [`Router::dispatch`]: the status, and the requests let out
/// before it, which have left the queue and must be handled. Converts into
/// [`Error`] for `?`.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchError {
    /// The status.
    pub error: Error,
    /// The requests let out before the failure.
    pub dispatched: Vec<Dispatched>,
}

impl fmt::Display for DispatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} requests let out before it)",
            self.error,
            self.dispatched.len()
        )
    }
}

impl std::error::Error for DispatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<DispatchError> for Error {
    fn from(e: DispatchError) -> Error {
        e.error
    }
}

/// The router's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouterStats {
    /// Decisions recorded.
    pub routes: u64,
    /// Decisions only asked for.
    pub dry_runs: u64,
    /// Requests in flight now.
    pub inflight: u64,
    /// Instances now, draining ones included.
    pub instances: u64,
    /// Of which not draining.
    pub routable: u64,
    /// Decisions by [`Reason`] (index: `Reason::raw`), for reasons 0..16
    /// only; [`Router::reason_counts`] has every reason the library has.
    pub by_reason: [u64; 16],
    /// Prompt tokens routed.
    pub prompt_tokens: u64,
    /// Tokens expected to hit the cache.
    pub cached_tokens: u64,
    /// KV-event batches with sequence numbers applied.
    pub kv_batches: u64,
    /// Batches ignored as applied before (replays).
    pub kv_duplicates: u64,
    /// Gaps found.
    pub kv_gaps: u64,
    /// Engine restarts, found or reset.
    pub kv_restarts: u64,
    /// Sources with a gap open now.
    pub kv_gaps_open: u64,
    /// Deltas exported.
    pub deltas_exported: u64,
    /// Deltas imported.
    pub deltas_imported: u64,
    /// Deltas skipped on import (applied before, or this router's own).
    pub deltas_skipped: u64,
    /// Deltas found lost (a later one started past the last applied).
    pub deltas_lost: u64,
    /// Gauges exported.
    pub gauges_exported: u64,
    /// Gauges imported.
    pub gauges_imported: u64,
    /// Gauges skipped (older, repeated or this router's own).
    pub gauges_skipped: u64,
    /// Gauges expired.
    pub gauges_expired: u64,
    /// Replicas whose gauge counts now.
    pub peers_live: u64,
    /// Requests whose engine reported the tokens it reused
    /// ([`Router::observe_cached`]).
    pub observed_reports: u64,
    /// The tokens the router expected to hit for them.
    pub observed_expected_tokens: u64,
    /// The tokens their engines reported reusing.
    pub observed_cached_tokens: u64,
    /// Requests waiting in the queue now.
    pub waiting: u64,
    /// The prompt tokens of those.
    pub waiting_tokens: u64,
    /// Requests that have waited (`route` answered [`Reason::WAITING`]).
    pub waited: u64,
    /// Of those, dispatched.
    pub waited_dispatched: u64,
    /// Of those, expired.
    pub waited_expired: u64,
    /// Of those, cancelled ([`Router::fail`]).
    pub waited_cancelled: u64,
    /// Of those, dropped at dispatch (their id came in flight meanwhile).
    pub waited_dropped: u64,
    /// Sheddable requests refused ([`crate::ErrorKind::Busy`]).
    pub shed: u64,
    /// The total time the dispatched ones waited, nanoseconds.
    pub wait_ns: u64,
    /// Routes of requests naming a LoRA adapter.
    pub adapter_routes: u64,
    /// Of those, the ones sent where the adapter was not resident (a load
    /// caused).
    pub adapter_loads: u64,
}

impl RouterStats {
    /// Decisions made for one reason.
    pub fn by_reason(&self, reason: Reason) -> u64 {
        self.by_reason
            .get(reason.raw() as usize)
            .copied()
            .unwrap_or(0)
    }
}

/// Chooses an engine instance for each request (`lr_router`).
///
/// `Send + Sync`: the library serializes calls on one router with a mutex,
/// so every method takes `&self` and a router can be shared through an
/// `Arc`. Dropping it destroys it.
pub struct Router {
    raw: NonNull<sys::lr_router>,
}

// SAFETY: lr_router.h: "every lr_router_* call on one router may be made
// from many threads at once"; only lr_router_destroy must not overlap other
// calls, and Drop has exclusive access.
unsafe impl Send for Router {}
unsafe impl Sync for Router {}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router").field("raw", &self.raw).finish()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        // SAFETY: owned; no other call can be running (&mut self).
        unsafe { sys::lr_router_destroy(self.raw.as_ptr()) }
    }
}

impl Router {
    /// Creates a router.
    pub fn new(opt: &RouterOptions) -> Result<Router> {
        let mut o = init(sys::lr_router_options_init_sized);
        o.policy = opt.policy.raw() as i32;
        o.seed = opt.seed;
        o.max_instances = opt.max_instances;
        o.max_requests = opt.max_requests;
        o.block_tokens = opt.block_tokens;
        o.index_capacity_blocks = opt.index_capacity_blocks;
        o.index_ttl_ns = nanos(opt.index_ttl);
        o.ring_vnodes = opt.ring_vnodes;
        o.hash_seed = opt.hash_seed;
        o.replica_id = opt.replica_id;
        o.remote_ttl_ns = nanos(opt.remote_ttl);
        o.gauge_ttl_ns = nanos(opt.gauge_ttl);
        o.max_peers = opt.max_peers;
        o.index_eviction = opt.index_eviction.c();
        o.queue_capacity = opt.queue_capacity;
        o.queue_tenants = opt.queue_tenants;
        o.queue_tokens = opt.queue_tokens;
        o.marks = opt.marks;
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options (the nested learner and network
        // options live for the call; the library copies them) and an out
        // pointer.
        let st = match &opt.learner {
            None => unsafe { sys::lr_router_create(&o, &mut raw) },
            Some(l) => l.with_c(|lo| {
                o.learner = lo;
                unsafe { sys::lr_router_create(&o, &mut raw) }
            }),
        };
        check(st, "lr_router_create")?;
        let raw = NonNull::new(raw).expect("lr_router_create returned LR_OK and NULL");
        Ok(Router { raw })
    }

    fn ptr(&self) -> *mut sys::lr_router {
        self.raw.as_ptr()
    }

    /// Switches the policy; state the policies share is kept.
    pub fn set_policy(&self, policy: Policy) -> Result<()> {
        // SAFETY: live router (here and in every method below).
        check(
            unsafe { sys::lr_router_set_policy(self.ptr(), policy.c()) },
            "lr_router_set_policy",
        )
    }

    /// The policy in use.
    pub fn policy(&self) -> Policy {
        // SAFETY: live router; -1 only for NULL.
        Policy(unsafe { sys::lr_router_policy(self.ptr()) } as u32)
    }

    /// Adds an instance, which receives routes at once; returns its id.
    pub fn add_instance(&self, spec: &InstanceSpec<'_>) -> Result<InstanceId> {
        const OP: &str = "lr_router_add_instance";
        let name = c_name(spec.name, OP)?;
        let n_models =
            u32::try_from(spec.models.len()).map_err(|_| Error::new(sys::LR_EINVAL, OP))?;
        let models = CNames::new(spec.models, OP)?;
        let mut s = init(sys::lr_instance_spec_init_sized);
        s.name = name.as_ptr();
        s.instance_class = spec.class;
        s.prefix_caching = spec.prefix_caching as i32;
        s.rtt_ns = nanos(spec.rtt);
        s.models = models.ptr();
        s.n_models = n_models;
        s.max_adapters = spec.max_adapters;
        s.role = spec.role.c();
        s.node = spec.node;
        s.rack = spec.rack;
        s.region = spec.region;
        let mut id = INSTANCE_NONE;
        // SAFETY: the spec, its name and its models outlive the call (all
        // copied); id is an out pointer.
        check(
            unsafe { sys::lr_router_add_instance(self.ptr(), &s, &mut id) },
            OP,
        )?;
        Ok(id)
    }

    /// The id of an instance by name ([`crate::ErrorKind::NotFound`] if none).
    pub fn find_instance(&self, name: &str) -> Result<InstanceId> {
        const OP: &str = "lr_router_find_instance";
        let name = c_name(name, OP)?;
        let mut id = INSTANCE_NONE;
        // SAFETY: NUL-terminated name and an out pointer.
        check(
            unsafe { sys::lr_router_find_instance(self.ptr(), name.as_ptr(), &mut id) },
            OP,
        )?;
        Ok(id)
    }

    /// Stops (`true`) or resumes (`false`) new routes to an instance; its
    /// requests in flight and cached prefixes stay.
    pub fn drain_instance(&self, id: InstanceId, draining: bool) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_drain_instance(self.ptr(), id, draining as i32) },
            "lr_router_drain_instance",
        )
    }

    /// Removes an instance with its routes, load and requests in flight
    /// (their later events fail with [`crate::ErrorKind::NotFound`]).
    pub fn remove_instance(&self, id: InstanceId) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_remove_instance(self.ptr(), id) },
            "lr_router_remove_instance",
        )
    }

    /// Instances added and not removed, draining ones included.
    pub fn instance_count(&self) -> u32 {
        // SAFETY: live router.
        unsafe { sys::lr_router_instance_count(self.ptr()) }
    }

    /// Sets the speed of an instance class.
    pub fn set_class(&self, class: u32, spec: &ClassSpec) -> Result<()> {
        let mut s = init(sys::lr_class_spec_init_sized);
        s.prefill_tokens_per_s = spec.prefill_tokens_per_s;
        // SAFETY: initialized spec.
        check(
            unsafe { sys::lr_router_set_class(self.ptr(), class, &s) },
            "lr_router_set_class",
        )
    }

    /// Feeds an instance's scraped engine metrics (an older scrape than the
    /// one held is ignored).
    pub fn set_stats(&self, id: InstanceId, stats: &EngineStats) -> Result<()> {
        let s = stats.to_c();
        // SAFETY: initialized stats.
        check(
            unsafe { sys::lr_router_set_stats(self.ptr(), id, &s) },
            "lr_router_set_stats",
        )
    }

    /// Tells the router which LoRA adapters an instance holds
    /// (`lr_router_set_adapters`): the engine's word replaces the router's
    /// own guess (each route of an adapter's request makes it resident
    /// there). A name empty, too long or with a NUL, or more than
    /// [`MAX_ADAPTERS`] names, is [`crate::ErrorKind::Invalid`]; an unknown
    /// instance [`crate::ErrorKind::NotFound`]. On failure nothing changes.
    pub fn set_adapters(&self, id: InstanceId, stats: &AdapterStats<'_>) -> Result<()> {
        const OP: &str = "lr_router_set_adapters";
        let running = CNames::new(stats.running, OP)?;
        let waiting = CNames::new(stats.waiting, OP)?;
        let mut s = init(sys::lr_adapter_stats_init_sized);
        s.running = running.ptr();
        s.n_running = stats.running.len();
        s.waiting = waiting.ptr();
        s.n_waiting = stats.waiting.len();
        s.max_adapters = stats.max_adapters;
        s.scraped_ns = stats.scraped_ns;
        // SAFETY: the names outlive the call (borrowed for it).
        check(
            unsafe { sys::lr_router_set_adapters(self.ptr(), id, &s) },
            OP,
        )
    }

    /// The LoRA adapters the router believes resident on an instance now,
    /// most recently used first, as their name hashes
    /// ([`crate::name_hash`]) (`lr_router_adapters`).
    pub fn adapters(&self, id: InstanceId) -> Result<Vec<u64>> {
        const OP: &str = "lr_router_adapters";
        let mut hashes = vec![0u64; 8];
        loop {
            let mut n = 0usize;
            // SAFETY: a buffer of hashes.len() entries and an out pointer.
            let st = unsafe {
                sys::lr_router_adapters(self.ptr(), id, hashes.as_mut_ptr(), hashes.len(), &mut n)
            };
            if st == sys::LR_EBUFSIZE && n > hashes.len() {
                hashes.resize(n, 0);
                continue;
            }
            check(st, OP)?;
            hashes.truncate(n);
            return Ok(hashes);
        }
    }

    /// Folds an RTT probe into the instance's moving average.
    pub fn observe_rtt(&self, id: InstanceId, rtt: Duration) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_observe_rtt(self.ptr(), id, nanos(rtt)) },
            "lr_router_observe_rtt",
        )
    }

    /// An instance's load as the router sees it.
    pub fn instance_load(&self, id: InstanceId) -> Result<LoadSnapshot> {
        let mut s = init(sys::lr_load_snapshot_init_sized);
        // SAFETY: initialized out struct.
        check(
            unsafe { sys::lr_router_instance_load(self.ptr(), id, &mut s) },
            "lr_router_instance_load",
        )?;
        Ok(LoadSnapshot::from_c(&s))
    }

    /// Chooses an instance for a request and, unless
    /// [`RouteFlags::DRY_RUN`], records the dispatch and learns the prompt
    /// there. With [`RouteFlags::MAY_WAIT`] the router may hold the request
    /// instead: the decision's `instance` is [`INSTANCE_NONE`] and its
    /// `reason` [`Reason::WAITING`] (its other fields zero);
    /// [`Router::dispatch`] lets it out later and [`Router::fail`]
    /// withdraws it. With [`RouteFlags::SHEDDABLE`] too, a request that
    /// would wait is refused with [`crate::ErrorKind::Busy`].
    pub fn route(&self, req: &Request<'_>) -> Result<Decision> {
        const OP: &str = "lr_router_route";
        let mut names = [NameBuf::new(), NameBuf::new()];
        let mut mm = MmBuf::new();
        let q = req.to_c(&mut names, &mut mm, OP)?;
        let mut d = init(sys::lr_decision_init_sized);
        // SAFETY: q borrows req's slices and names for the call; d has no
        // buffer.
        check(unsafe { sys::lr_router_route(self.ptr(), &q, &mut d) }, OP)?;
        Ok(Decision::from_c(&d))
    }

    /// [`Router::route`], also filling `scores` with every routable
    /// instance's score in id order (with prefill instances routable, the
    /// ones that decode first, as [`Router::candidates`]). The vector's
    /// capacity is reused and grown as needed.
    pub fn route_with_scores(
        &self,
        req: &Request<'_>,
        scores: &mut Vec<Score>,
    ) -> Result<Decision> {
        const OP: &str = "lr_router_route";
        let mut names = [NameBuf::new(), NameBuf::new()];
        let mut mm = MmBuf::new();
        let mut q = req.to_c(&mut names, &mut mm, OP)?;
        q.flags |= sys::LR_ROUTE_SCORES;
        scores.clear();
        if scores.capacity() == 0 {
            scores.reserve(self.instance_count().max(1) as usize);
        }
        // Instances added by other threads between a short call and its
        // retry can make the retry short too; a few rounds settle it.
        for _ in 0..8 {
            let mut d = init(sys::lr_decision_init_sized);
            d.scores = scores.as_mut_ptr().cast::<sys::lr_score>();
            d.scores_capacity = scores.capacity();
            d.score_size = size_of::<Score>();
            // SAFETY: the scores buffer has scores_capacity slots (Score
            // has lr_score's layout, checked above); q borrows req.
            let st = unsafe { sys::lr_router_route(self.ptr(), &q, &mut d) };
            if st == sys::LR_EBUFSIZE {
                scores.reserve(d.n_scores);
                continue;
            }
            check(st, OP)?;
            assert!(
                d.n_scores <= scores.capacity(),
                "lr_router_route overran the scores buffer"
            );
            // SAFETY: the library wrote n_scores entries.
            unsafe { scores.set_len(d.n_scores) };
            return Ok(Decision::from_c(&d));
        }
        Err(Error::new(sys::LR_EBUFSIZE, OP))
    }

    /// The prefill leg of a split request ([`Decision::prefill_instance`])
    /// ended: its KV has moved to the decode instance (vLLM: the prefill
    /// request returned its `kv_transfer_params`). The prefill instance's
    /// load drops it, and the prefill's time feeds the policies that learn
    /// from it. A request that was not split, or whose leg ended before, is
    /// a no-op; an unknown or ended request is
    /// [`crate::ErrorKind::NotFound`]. A first token ends the leg too.
    pub fn prefill_done(&self, request_id: u64, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_prefill_done(self.ptr(), request_id, now_ns) },
            "lr_router_prefill_done",
        )
    }

    /// A request's first token: it leaves its instance's queue. A repeat is
    /// a no-op; an unknown or ended request is
    /// [`crate::ErrorKind::NotFound`].
    pub fn first_token(&self, request_id: u64, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_first_token(self.ptr(), request_id, now_ns) },
            "lr_router_first_token",
        )
    }

    /// A request finished with `output_tokens` generated.
    pub fn complete(&self, request_id: u64, output_tokens: u32, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_complete(self.ptr(), request_id, output_tokens, now_ns) },
            "lr_router_complete",
        )
    }

    /// The request's engine reused `cached_tokens` of its prompt
    /// (llama.cpp's `timings.cache_n`, vLLM's
    /// `usage.prompt_tokens_details.cached_tokens`), in the router's
    /// tokens. Once per request, before [`Router::complete`] or
    /// [`Router::fail`]; a repeat changes nothing. The router keeps, per
    /// instance, the share of its expected hits the engine did not
    /// deliver (`Candidate::cached_lost`), which adaptive discounts.
    pub fn observe_cached(&self, request_id: u64, cached_tokens: u32, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_observe_cached(self.ptr(), request_id, cached_tokens, now_ns) },
            "lr_router_observe_cached",
        )
    }

    /// A request failed or was cancelled. A request waiting in the queue
    /// ([`RouteFlags::MAY_WAIT`]) is withdrawn: it is never dispatched.
    pub fn fail(&self, request_id: u64, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_fail(self.ptr(), request_id, now_ns) },
            "lr_router_fail",
        )
    }

    /// Lets waiting requests out of the queue (`lr_router_dispatch`): call
    /// it whenever capacity may have freed (a first token, a completion, a
    /// scrape, a timer). First come those whose deadline is at or before
    /// `now_ns` ([`crate::ErrorKind::Expired`], earliest first), then,
    /// while the fleet is not saturated, the next by urgency, fair share
    /// between tenants and arrival, each routed now as [`Router::route`]
    /// would route it (`Ok(instance)`: send it there). Returns every
    /// request that may go now; each has left the queue.
    ///
    /// On a failure ([`crate::ErrorKind::NoMem`]: that request stays
    /// waiting) the [`DispatchError`] carries the requests let out before
    /// it, which have left the queue too and must be handled.
    pub fn dispatch(&self, now_ns: u64) -> Result<Vec<Dispatched>, DispatchError> {
        let mut out = Vec::new();
        match self.dispatch_into(now_ns, usize::MAX, &mut out) {
            Ok(_) => Ok(out),
            Err(error) => Err(DispatchError {
                error,
                dispatched: out,
            }),
        }
    }

    /// [`Router::dispatch`] letting at most `max` requests out, appended to
    /// `out` (its allocation reused); returns how many. Those appended
    /// before an error stay in `out`: they have left the queue.
    pub fn dispatch_into(
        &self,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> Result<usize> {
        const OP: &str = "lr_router_dispatch";
        let mut buf = [sys::lr_dispatched::default(); DISPATCH_CHUNK];
        let mut total = 0usize;
        loop {
            let cap = (max - total).min(DISPATCH_CHUNK);
            let mut n = 0usize;
            // SAFETY: the buffer has `cap` entries of lr_dispatched.
            let st = unsafe {
                sys::lr_router_dispatch(
                    self.ptr(),
                    now_ns,
                    buf.as_mut_ptr(),
                    cap,
                    size_of::<sys::lr_dispatched>(),
                    &mut n,
                )
            };
            assert!(n <= cap, "lr_router_dispatch overran its buffer");
            out.extend(buf[..n].iter().map(Dispatched::from_c));
            total += n;
            check(st, OP)?;
            // A full buffer may have stopped it: ask again.
            if n < cap || total == max {
                return Ok(total);
            }
        }
    }

    /// Whether the fleet is saturated now, as `route` and `dispatch` judge
    /// it (`true` with no routable instance): every routable instance has
    /// [`Param::SATURATION_QUEUE`] of the router's requests waiting for
    /// their first token, or a fresh scrape reporting that many waiting or
    /// [`Param::SATURATION_KV`] of its KV cache in use. Changes nothing.
    pub fn saturated(&self, now_ns: u64) -> Result<bool> {
        let mut s = 0;
        // SAFETY: out pointer.
        check(
            unsafe { sys::lr_router_saturated(self.ptr(), now_ns, &mut s) },
            "lr_router_saturated",
        )?;
        Ok(s != 0)
    }

    /// Proposes moves of queued requests off instances whose expected TTFT
    /// breaks the SLO. Changes nothing: the host carries out the moves it
    /// wants and reports each with [`Router::move_request`].
    pub fn rebalance_plan(&self, now_ns: u64) -> Result<Vec<Move>> {
        const OP: &str = "lr_router_rebalance_plan";
        // A plan moves each request at most once, so the requests in flight
        // bound it. The C call cannot say that it ran out of room, so a
        // full buffer is retried with a larger one.
        let mut cap = self.stats()?.inflight as usize + 1;
        loop {
            let mut moves: Vec<Move> = Vec::with_capacity(cap);
            let mut n = 0usize;
            // SAFETY: the buffer has `cap` slots of lr_move's layout.
            check(
                unsafe {
                    sys::lr_router_rebalance_plan(
                        self.ptr(),
                        now_ns,
                        moves.as_mut_ptr().cast::<sys::lr_move>(),
                        cap,
                        size_of::<Move>(),
                        &mut n,
                    )
                },
                OP,
            )?;
            assert!(n <= cap, "lr_router_rebalance_plan overran its buffer");
            if n < cap {
                // SAFETY: the library wrote n moves.
                unsafe { moves.set_len(n) };
                return Ok(moves);
            }
            cap *= 2;
        }
    }

    /// Records that the host moved a queued request to instance `to`.
    /// (`move` is a Rust keyword.)
    pub fn move_request(&self, request_id: u64, to: InstanceId) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_move(self.ptr(), request_id, to) },
            "lr_router_move",
        )
    }

    /// Sets a parameter. Out of bounds is [`crate::ErrorKind::Range`]
    /// (never clamped), NaN [`crate::ErrorKind::Invalid`].
    pub fn set_param(&self, key: Param, value: f64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_set_param(self.ptr(), key.c(), value) },
            "lr_router_set_param",
        )
    }

    /// Reads a parameter (for the GORGO weights, the tuned value).
    pub fn param(&self, key: Param) -> Result<f64> {
        let mut v = 0.0;
        // SAFETY: out pointer.
        check(
            unsafe { sys::lr_router_get_param(self.ptr(), key.c(), &mut v) },
            "lr_router_get_param",
        )?;
        Ok(v)
    }

    /// Every parameter's value, indexed by key ([`Param::count`] of them),
    /// as [`Router::param`] reads them. For the GORGO weights it is the
    /// incumbent, which during a tuner trial differs from the weights in
    /// service: replay routes with [`Router::policy_input`].
    pub fn params(&self) -> Result<Vec<f64>> {
        (0..Param::count()).map(|k| self.param(Param(k))).collect()
    }

    /// Applies an engine's BlockStored event for instance `id`.
    pub fn kv_stored(&self, id: InstanceId, ev: &KvStored<'_>, now_ns: u64) -> Result<()> {
        const OP: &str = "lr_router_kv_stored";
        let e = ev.to_c(OP)?;
        // SAFETY: e borrows ev's slices for the call.
        check(
            unsafe { sys::lr_router_kv_stored(self.ptr(), id, &e, now_ns) },
            OP,
        )
    }

    /// Applies an engine's BlockRemoved event; returns how many hashes were
    /// known.
    pub fn kv_removed(&self, id: InstanceId, block_hashes: &[u64]) -> Result<usize> {
        let mut n = 0;
        // SAFETY: slice pointer and length; out pointer.
        check(
            unsafe {
                sys::lr_router_kv_removed(
                    self.ptr(),
                    id,
                    ptr_or_null(block_hashes),
                    block_hashes.len(),
                    &mut n,
                )
            },
            "lr_router_kv_removed",
        )?;
        Ok(n)
    }

    /// Applies an engine's BlockRemoved event on one tier
    /// (`lr_router_kv_removed_tier`); see [`crate::Index::kv_removed_tier`].
    /// [`crate::ErrorKind::NotFound`] for an instance the router does not
    /// have.
    pub fn kv_removed_tier(
        &self,
        id: InstanceId,
        tier: Tier,
        block_hashes: &[u64],
    ) -> Result<usize> {
        let mut n = 0;
        // SAFETY: slice pointer and length; out pointer.
        check(
            unsafe {
                sys::lr_router_kv_removed_tier(
                    self.ptr(),
                    id,
                    tier.c(),
                    ptr_or_null(block_hashes),
                    block_hashes.len(),
                    &mut n,
                )
            },
            "lr_router_kv_removed_tier",
        )?;
        Ok(n)
    }

    /// Applies an engine's AllBlocksCleared event.
    pub fn kv_cleared(&self, id: InstanceId) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_kv_cleared(self.ptr(), id) },
            "lr_router_kv_cleared",
        )
    }

    /// The position of the index's learn journal, for a later
    /// [`Router::export_delta`].
    pub fn mark(&self) -> u64 {
        // SAFETY: live router.
        unsafe { sys::lr_router_mark(self.ptr()) }
    }

    /// What was learned locally since `since_mark` (0: everything), as
    /// bytes for other gateway replicas, and the mark to pass next time.
    pub fn export_delta(&self, since_mark: u64) -> Result<(Blob, u64)> {
        let mut b = ptr::null_mut();
        let mut mark = 0;
        // SAFETY: out pointers.
        check(
            unsafe { sys::lr_router_export_delta(self.ptr(), since_mark, &mut b, &mut mark) },
            "lr_router_export_delta",
        )?;
        let blob = Blob::from_raw(b).expect("lr_router_export_delta returned LR_OK and no blob");
        Ok((blob, mark))
    }

    /// Applies a delta from another replica as REMOTE routes; routes naming
    /// ids this router does not have are skipped. A delta applied before,
    /// or this router's own (an echo), changes nothing.
    pub fn import_delta(&self, delta: &[u8], now_ns: u64) -> Result<()> {
        // SAFETY: slice pointer and length.
        check(
            unsafe {
                sys::lr_router_import_delta(self.ptr(), ptr_or_null(delta), delta.len(), now_ns)
            },
            "lr_router_import_delta",
        )
    }

    /// This replica's in-flight counters per instance as a gauge message
    /// for the other replicas (`State` without a replica id).
    pub fn export_gauges(&self) -> Result<Blob> {
        let mut b = ptr::null_mut();
        // SAFETY: out pointer.
        check(
            unsafe { sys::lr_router_export_gauges(self.ptr(), &mut b) },
            "lr_router_export_gauges",
        )?;
        Ok(Blob::from_raw(b).expect("lr_router_export_gauges returned LR_OK and no blob"))
    }

    /// Sets the 16-byte key every replica shares: exported deltas and
    /// gauges are then sealed with it (SipHash-2-4) and only those sealed
    /// with it are imported (`Error::Corrupt` otherwise). `None` clears it.
    pub fn set_peer_key(&self, key: Option<&[u8; 16]>) -> Result<()> {
        let (p, n) = match key {
            Some(k) => (k.as_ptr(), k.len()),
            None => (ptr::null(), 0),
        };
        // SAFETY: a 16-byte array or NULL with 0.
        check(
            unsafe { sys::lr_router_set_peer_key(self.ptr(), p, n) },
            "lr_router_set_peer_key",
        )
    }

    /// Takes another replica's gauge message: its counts add to this
    /// router's own in every candidate row until they expire (`gauge_ttl`)
    /// or a newer message replaces them.
    pub fn import_gauges(&self, gauges: &[u8], now_ns: u64) -> Result<()> {
        // SAFETY: slice pointer and length.
        check(
            unsafe {
                sys::lr_router_import_gauges(self.ptr(), ptr_or_null(gauges), gauges.len(), now_ns)
            },
            "lr_router_import_gauges",
        )
    }

    /// The router's learned state (instances, routes with trust and ages,
    /// engine hashes, sequence and delta watermarks, tuned weights,
    /// Lodestar's network) as one versioned, checksummed blob.
    pub fn snapshot(&self, now_ns: u64) -> Result<Blob> {
        let mut b = ptr::null_mut();
        // SAFETY: out pointer.
        check(
            unsafe { sys::lr_router_snapshot(self.ptr(), now_ns, &mut b) },
            "lr_router_snapshot",
        )?;
        Ok(Blob::from_raw(b).expect("lr_router_snapshot returned LR_OK and no blob"))
    }

    /// Loads a snapshot into a router that has no instance yet, all or
    /// nothing (`Corrupt`, `Version`, `State`, ...).
    pub fn restore(&self, snapshot: &[u8], now_ns: u64) -> Result<()> {
        // SAFETY: slice pointer and length.
        check(
            unsafe {
                sys::lr_router_restore(self.ptr(), ptr_or_null(snapshot), snapshot.len(), now_ns)
            },
            "lr_router_restore",
        )
    }

    /// Drops the routes unused for longer than the index TTL. Routing does
    /// this too; an idle host may call it from a timer.
    pub fn expire(&self, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_router_expire(self.ptr(), now_ns) },
            "lr_router_expire",
        )
    }

    /// Runs one step of Lodestar's learner on the calling thread
    /// ([`crate::LearnerTrainer::step`]): takes the samples routes produced
    /// and, when enough have arrived (or with [`LearnFlags::FORCE`], whenever
    /// there is any), trains and publishes a new model; returns whether it
    /// published one. Call it from a background thread every few hundred
    /// milliseconds: it trains outside the router's mutex, so `route` on
    /// other threads never waits for it. A step racing another one on the
    /// same router gets [`crate::ErrorKind::State`], as does a router that
    /// never chose [`Policy::LODESTAR`].
    pub fn learn_step(&self, flags: LearnFlags) -> Result<bool> {
        let mut trained = 0;
        // SAFETY: live router, out pointer; any thread (lr_router.h).
        check(
            unsafe { sys::lr_router_learn_step(self.ptr(), flags.raw(), &mut trained) },
            "lr_router_learn_step",
        )?;
        Ok(trained != 0)
    }

    /// The width of the learner's rows (`lr_lodestar_feature_count`).
    pub fn learner_feature_count(&self) -> usize {
        // SAFETY: live router; never fails.
        unsafe { sys::lr_lodestar_feature_count() as usize }
    }

    /// A copy of the samples the learner's next round would train on,
    /// [`Router::learner_feature_count`] values per row.
    /// [`crate::ErrorKind::State`] with no learner or while a step runs.
    pub fn learner_samples(&self) -> Result<LearnerSamples> {
        let p = self.ptr();
        let width = self.learner_feature_count();
        fill_samples(width, "lr_router_learner_samples", |x, y, cap, n| {
            // SAFETY: live router; x has room for cap rows of width floats
            // and y for cap rewards (or both are NULL with 0).
            unsafe { sys::lr_router_learner_samples(p, x, width, y, cap, n) }
        })
    }

    /// The counters of Lodestar's learner; [`crate::ErrorKind::State`] until
    /// [`Policy::LODESTAR`] has been chosen once.
    pub fn learner_stats(&self) -> Result<LearnerStats> {
        let mut s = init(sys::lr_learner_stats_init_sized);
        // SAFETY: initialized out struct.
        check(
            unsafe { sys::lr_router_learner_stats(self.ptr(), &mut s) },
            "lr_router_learner_stats",
        )?;
        Ok(LearnerStats::from_c(&s))
    }

    /// The router's counters.
    pub fn stats(&self) -> Result<RouterStats> {
        let mut s = init(sys::lr_router_stats_init_sized);
        // SAFETY: initialized out struct.
        check(
            unsafe { sys::lr_router_get_stats(self.ptr(), &mut s) },
            "lr_router_get_stats",
        )?;
        Ok(RouterStats {
            routes: s.routes,
            dry_runs: s.dry_runs,
            inflight: s.inflight,
            instances: s.instances,
            routable: s.routable,
            by_reason: s.by_reason,
            prompt_tokens: s.prompt_tokens,
            cached_tokens: s.cached_tokens,
            kv_batches: s.kv_batches,
            kv_duplicates: s.kv_duplicates,
            kv_gaps: s.kv_gaps,
            kv_restarts: s.kv_restarts,
            kv_gaps_open: s.kv_gaps_open,
            deltas_exported: s.deltas_exported,
            deltas_imported: s.deltas_imported,
            deltas_skipped: s.deltas_skipped,
            deltas_lost: s.deltas_lost,
            gauges_exported: s.gauges_exported,
            gauges_imported: s.gauges_imported,
            gauges_skipped: s.gauges_skipped,
            gauges_expired: s.gauges_expired,
            peers_live: s.peers_live,
            observed_reports: s.observed_reports,
            observed_expected_tokens: s.observed_expected_tokens,
            observed_cached_tokens: s.observed_cached_tokens,
            waiting: s.waiting,
            waiting_tokens: s.waiting_tokens,
            waited: s.waited,
            waited_dispatched: s.waited_dispatched,
            waited_expired: s.waited_expired,
            waited_cancelled: s.waited_cancelled,
            waited_dropped: s.waited_dropped,
            shed: s.shed,
            wait_ns: s.wait_ns,
            adapter_routes: s.adapter_routes,
            adapter_loads: s.adapter_loads,
        })
    }

    /// The counters of the router's prefix index
    /// (`lr_router_index_stats`): blocks held, evicted, expired and
    /// learned. It holds the router's lock while counting engine hashes:
    /// call it from a metrics scrape, not per request.
    pub fn index_stats(&self) -> Result<IndexStats> {
        // lr_index_stats has no init function: stamp the size as
        // LR_*_INIT would and zero the rest.
        let mut s = sys::lr_index_stats {
            struct_size: size_of::<sys::lr_index_stats>(),
            ..Default::default()
        };
        // SAFETY: initialized out struct.
        check(
            unsafe { sys::lr_router_index_stats(self.ptr(), &mut s) },
            "lr_router_index_stats",
        )?;
        Ok(IndexStats::from_c(&s))
    }

    /// Decisions recorded by reason, indexed by [`Reason::raw`], for every
    /// reason the library has (`lr_router_reason_counts`).
    pub fn reason_counts(&self) -> Result<Vec<u64>> {
        const OP: &str = "lr_router_reason_counts";
        let mut counts = vec![0u64; Reason::count() as usize];
        loop {
            let mut n = 0usize;
            // SAFETY: a buffer of counts.len() entries and an out pointer.
            let st = unsafe {
                sys::lr_router_reason_counts(self.ptr(), counts.as_mut_ptr(), counts.len(), &mut n)
            };
            if st == sys::LR_EBUFSIZE && n > counts.len() {
                counts.resize(n, 0);
                continue;
            }
            check(st, OP)?;
            counts.truncate(n);
            return Ok(counts);
        }
    }

    /// The candidate table [`Router::route`] would decide on for `req` now
    /// (`lr_router_candidates`): one row per routable instance, in id
    /// order (with prefill instances routable, the rows that can decode
    /// first, then the [`Role::PREFILL`] ones, each part in id order), with
    /// the cached tokens its policy would see, the ring ranks of its key
    /// and each instance's role and placement. Only the prompt and the request's facts are read
    /// (not its boundaries or flags); nothing changes in the router.
    /// [`crate::decide`] over it with the router's policy,
    /// [`Router::policy_input`] and a route's [`Decision::seed`] makes that
    /// route's choice. [`crate::ErrorKind::State`] with no routable
    /// instance.
    pub fn candidates(&self, req: &Request<'_>) -> Result<Vec<Candidate>> {
        const OP: &str = "lr_router_candidates";
        let mut names = [NameBuf::new(), NameBuf::new()];
        let mut mm = MmBuf::new();
        let q = req.to_c(&mut names, &mut mm, OP)?;
        let mut rows: Vec<Candidate> = Vec::new();
        let mut cap = self.instance_count().max(1) as usize;
        loop {
            rows.reserve(cap);
            let mut n = 0usize;
            // SAFETY: the buffer has room for rows.capacity() rows of
            // Candidate's layout (lr_candidate's, checked in policy.rs);
            // q borrows req's slices for the call.
            let st = unsafe {
                sys::lr_router_candidates(
                    self.ptr(),
                    &q,
                    rows.as_mut_ptr().cast::<sys::lr_candidate>(),
                    rows.capacity(),
                    size_of::<Candidate>(),
                    &mut n,
                )
            };
            if st == sys::LR_EBUFSIZE && n > rows.capacity() {
                cap = n;
                continue;
            }
            check(st, OP)?;
            assert!(
                n <= rows.capacity(),
                "lr_router_candidates overran its buffer"
            );
            // SAFETY: the library wrote n rows (plain data).
            unsafe { rows.set_len(n) };
            return Ok(rows);
        }
    }

    /// The rest of what [`Router::route`] hands the policy for `req` now
    /// (`lr_router_policy_input`), besides the table
    /// ([`Router::candidates`]), the seed ([`Decision::seed`]) and
    /// Lodestar's model ([`Router::learner_save`]): the prompt length, the
    /// expected output tokens with the router's default applied, the block
    /// size, round-robin's cursor, every parameter in service and the TTFT
    /// budget (`deadline_ns` less `now_ns` in seconds, 1e-9 once it has
    /// passed, 0 without a deadline). During a GORGO tuner trial its
    /// weights are the trial's, not the incumbent [`Router::params`]
    /// reports.
    ///
    /// The parameters go to `params` (resized to [`Param::count`], its
    /// allocation reused), which the returned input borrows; its `seed` is
    /// 0. Set the route's seed and [`crate::decide`] replays the route
    /// (with the model, [`crate::decide_into`]). `req` is checked as
    /// `route` checks it ([`crate::ErrorKind::Invalid`]); nothing in the
    /// router changes.
    pub fn policy_input<'p>(
        &self,
        req: &Request<'_>,
        params: &'p mut Vec<f64>,
    ) -> Result<PolicyInput<'p>> {
        const OP: &str = "lr_router_policy_input";
        let mut names = [NameBuf::new(), NameBuf::new()];
        let mut mm = MmBuf::new();
        let q = req.to_c(&mut names, &mut mm, OP)?;
        params.clear();
        params.resize(Param::count() as usize, 0.0);
        loop {
            let mut i = init(sys::lr_policy_input_init_sized);
            // SAFETY: q borrows req's slices for the call; params has room
            // for params.len() doubles; the library points i.params at
            // them, which is not read after the call.
            let st = unsafe {
                sys::lr_router_policy_input(
                    self.ptr(),
                    &q,
                    &mut i,
                    params.as_mut_ptr(),
                    params.len(),
                )
            };
            if st == sys::LR_EBUFSIZE && i.n_params > params.len() {
                params.resize(i.n_params, 0.0);
                continue;
            }
            check(st, OP)?;
            params.truncate(i.n_params);
            return Ok(PolicyInput {
                params,
                prompt_tokens: i.prompt_tokens,
                expected_output_tokens: i.expected_output_tokens,
                block_tokens: i.block_tokens,
                last_instance: (i.last_instance != INSTANCE_NONE).then_some(i.last_instance),
                seed: i.seed,
                ttft_budget_s: i.ttft_budget_s,
            });
        }
    }

    /// Lodestar's model in service, serialized as [`crate::Mlp::save`]
    /// does (`lr_router_learner_save`), taking over a newly trained one
    /// first as `route` would. [`crate::Mlp::load`] of it scores
    /// candidates exactly as `route` does: the model to replay a trained
    /// Lodestar router's routes with [`crate::decide_into`].
    /// [`crate::ErrorKind::State`] with no learner or no model yet.
    pub fn learner_save(&self) -> Result<Blob> {
        let mut b = ptr::null_mut();
        // SAFETY: live router, out pointer.
        check(
            unsafe { sys::lr_router_learner_save(self.ptr(), &mut b) },
            "lr_router_learner_save",
        )?;
        Ok(Blob::from_raw(b).expect("lr_router_learner_save returned LR_OK and no blob"))
    }

    pub(crate) fn raw_ptr(&self) -> *mut sys::lr_router {
        self.ptr()
    }
}
