//! Policies as pure functions over a candidate table (`lr_policy.h`).

use crate::error::{check, Error, Result};
use crate::router::{Decision, Policy, Role};
use crate::{init, sys, ClassSpec, InstanceId, Mlp, INSTANCE_NONE};
use std::mem::{align_of, offset_of, size_of};
use std::ptr;

/// One row of a candidate table (`lr_candidate`): an instance as a policy
/// sees it. [`crate::Router::candidates`] records the table a route
/// decides on; [`decide`] runs any policy over any table. Start from
/// [`Candidate::new`]: the all-zero row has no class speed, which the
/// library refuses.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct Candidate {
    /// The instance's id; decisions name it.
    pub instance: InstanceId,
    /// Prompt tokens expected to hit its prefix cache.
    pub cached_tokens: u32,
    /// Requests in flight on it.
    pub inflight: u32,
    /// Of those, the ones before their first token.
    pub queued: u32,
    /// Uncached prompt tokens of its queued requests (prefill to do).
    pub prefill_tokens: u64,
    /// Whole prompt tokens of its queued requests.
    pub queued_tokens: u64,
    /// Whole prompt tokens of every request in flight on it.
    pub prompt_tokens: u64,
    /// Expected output tokens of its requests past their first token.
    pub decode_tokens: u64,
    /// Prompt + expected output tokens of its requests in flight.
    pub kv_tokens: u64,
    /// Scraped running requests; 0 when missing or stale.
    pub running: u32,
    /// Scraped waiting requests; 0 when missing or stale.
    pub waiting: u32,
    /// Scraped KV-cache use in [0, 1]; 0 when missing or stale.
    pub kv_use: f64,
    /// Round-trip time, milliseconds (0 unknown).
    pub rtt_ms: f64,
    /// Prefill throughput of its class, tokens/s (> 0).
    pub prefill_rate: f64,
    /// DualMap's decode stall, seconds (0 below 3 s).
    pub stall_s: f64,
    /// Seconds since a route went to it through its cached prefix;
    /// negative when unknown.
    pub cached_age_s: f64,
    /// Its class (GPU model).
    pub instance_class: u32,
    /// 1 if it caches prefixes, 0 if not.
    pub prefix_caching: i32,
    /// Rank among the ring's candidates for the policy's ring key (1
    /// first); 0 when not among them or no ring ([`Policy::ring_key`]).
    pub ring_rank: u32,
    /// Reserved; 0.
    pub flags: u32,
    /// Blocks the router's index holds for the instance: the radix tree
    /// size sglang-cache-aware's low-match branch minimizes. Routers fill
    /// it only for the policies that read it; 0 otherwise.
    pub tree_blocks: u64,
    /// The router's calibrated TTFT model of the instance (adaptive):
    /// seconds per queued prefill token and fixed seconds, fitted online
    /// from the first tokens it saw; 0 before the first (`prefill_rate`
    /// then stands in).
    pub ttft_s_per_token: f64,
    /// See `ttft_s_per_token`.
    pub ttft_base_s: f64,
    /// The seconds one more request decoding there adds to a first token.
    pub ttft_s_per_decoding: f64,
    /// `prefill_tokens` averaged over the last ten seconds or so of routes.
    pub prefill_tokens_avg: f64,
    /// Requests routed to it per second, averaged the same way.
    pub route_rate: f64,
    /// The share of its expected cached tokens its engine lately reported
    /// not reusing ([`crate::Router::observe_cached`]), in [0, 1];
    /// adaptive counts `cached_tokens` x (1 - this).
    pub cached_lost: f64,
    /// 1 when its engine must load the request's LoRA adapter first (not
    /// resident there); 0 when resident, or the request names none.
    pub adapter_missing: i32,
    /// Its adapter slots free to load one without waiting; `u32::MAX`
    /// when its slots are not known.
    pub adapter_free: u32,
    /// Seconds its engine is expected to spend loading the request's
    /// adapter: 0 when resident, else [`crate::Param::ADAPTER_LOAD_S`] or
    /// what adaptive learnt.
    pub adapter_load_s: f64,
    /// Adapters resident there.
    pub adapters_resident: u32,
    /// 1 when loading the request's adapter evicts another one.
    pub adapter_evicts: i32,
    /// Prompt tokens past `cached_tokens` its engine holds on a lower tier
    /// of its KV cache: in host memory ([`crate::KvStored::tier`]), loaded,
    /// not computed, on a hit. dynamo and adaptive weigh them
    /// ([`crate::Param::TIER_CPU_WEIGHT`]).
    pub cpu_tokens: u32,
    /// Prompt tokens past those on disk
    /// ([`crate::Param::TIER_DISK_WEIGHT`]).
    pub disk_tokens: u32,
    /// Its part in a disaggregated fleet. In a table with
    /// [`Role::PREFILL`] rows, every row that can decode comes before every
    /// prefill row (the router gathers them so).
    pub role: Role,
    /// Where it runs ([`crate::InstanceSpec::node`], `rack`, `region`; 0:
    /// unknown): what a KV transfer between two rows costs.
    pub node: u32,
    /// See `node`.
    pub rack: u32,
    /// See `node`.
    pub region: u32,
    /// The router's calibrated decode seconds of its class (adaptive):
    /// first token to completion, the mean of those it saw lately; 0
    /// before any. What a prefill kept on a decode instance is weighed
    /// against ([`crate::Param::ADAPTIVE_PD_STALL`]).
    pub decode_s: f64,
    /// A sibling of the request there (another prompt routed there lately
    /// through the point where this request's hit ends, and on past it):
    /// its tokens past that point, which an engine of slots (llama.cpp)
    /// overwrites.
    pub sibling_tokens: u32,
    /// Where a sibling left this request's path within its hit there
    /// since its own last route there (tokens; 0: none).
    pub sibling_fork_tokens: u32,
    /// The share of hits past such a fork the engine lately did not
    /// deliver, less that of hits without one: high for slots, near 0
    /// for a paged engine. adaptive counts a hit with a sibling x (1 -
    /// min(1, 4 x this)).
    pub sibling_lost: f64,
}

// Candidate is handed to C as lr_candidate arrays, row_size
// size_of::<Candidate>().
const _: () = {
    assert!(size_of::<Candidate>() == size_of::<sys::lr_candidate>());
    assert!(align_of::<Candidate>() == align_of::<sys::lr_candidate>());
    macro_rules! same_offsets {
        ($($f:ident),*) => {$(
            assert!(offset_of!(Candidate, $f) == offset_of!(sys::lr_candidate, $f));
        )*};
    }
    same_offsets!(
        instance,
        cached_tokens,
        inflight,
        queued,
        prefill_tokens,
        queued_tokens,
        prompt_tokens,
        decode_tokens,
        kv_tokens,
        running,
        waiting,
        kv_use,
        rtt_ms,
        prefill_rate,
        stall_s,
        cached_age_s,
        instance_class,
        prefix_caching,
        ring_rank,
        flags,
        tree_blocks,
        ttft_s_per_token,
        ttft_base_s,
        ttft_s_per_decoding,
        prefill_tokens_avg,
        route_rate,
        cached_lost,
        adapter_missing,
        adapter_free,
        adapter_load_s,
        adapters_resident,
        adapter_evicts,
        cpu_tokens,
        disk_tokens,
        role,
        node,
        rack,
        region,
        decode_s,
        sibling_tokens,
        sibling_fork_tokens,
        sibling_lost
    );
};

impl Candidate {
    /// An idle instance that caches prefixes, with the library's default
    /// class speed, an unknown cache age and no LoRA adapter in slots not
    /// known.
    pub fn new(instance: InstanceId) -> Candidate {
        Candidate {
            instance,
            prefill_rate: ClassSpec::default().prefill_tokens_per_s,
            cached_age_s: -1.0,
            prefix_caching: 1,
            adapter_free: u32::MAX,
            ..Candidate::default()
        }
    }
}

/// The width of Lodestar's feature rows in the loaded library
/// (`lr_lodestar_feature_count`): the inputs of a model [`decide_into`]
/// takes and of a router's learner rows.
pub fn lodestar_feature_count() -> usize {
    // SAFETY: no arguments, never fails.
    unsafe { sys::lr_lodestar_feature_count() as usize }
}

/// A request's facts and a policy's knobs for [`decide`]
/// (`lr_policy_input`). Start from [`PolicyInput::new`], or from
/// [`crate::Router::policy_input`] for what a router's route uses.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct PolicyInput<'a> {
    /// Parameter values indexed by [`crate::Param::raw`]; keys past the
    /// end take their defaults ([`crate::Param::defaults`]).
    pub params: &'a [f64],
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Expected output tokens; 0: the `DEFAULT_OUTPUT_TOKENS` parameter.
    pub expected_output_tokens: u32,
    /// Tokens per KV block (dynamo counts blocks); 0: 16.
    pub block_tokens: u32,
    /// Round-robin: the instance served last.
    pub last_instance: Option<InstanceId>,
    /// Seeds every draw the policy makes.
    pub seed: u64,
    /// The request's TTFT budget: seconds left until its deadline (1e-9
    /// once it has passed); 0: no deadline. Finite, >= 0. adaptive prefers
    /// an instance predicted to meet it ([`crate::Param::ADAPTIVE_DEADLINE`]).
    pub ttft_budget_s: f64,
}

impl<'a> PolicyInput<'a> {
    /// The library's defaults (`lr_policy_input_init`) for a prompt of
    /// `prompt_tokens`.
    pub fn new(prompt_tokens: u32) -> PolicyInput<'a> {
        let i = init(sys::lr_policy_input_init_sized);
        PolicyInput {
            params: &[],
            prompt_tokens,
            expected_output_tokens: i.expected_output_tokens,
            block_tokens: i.block_tokens,
            last_instance: (i.last_instance != INSTANCE_NONE).then_some(i.last_instance),
            seed: i.seed,
            ttft_budget_s: i.ttft_budget_s,
        }
    }
}

/// Chooses one row of a candidate table with a policy
/// (`lr_policy_decide`), the code [`crate::Router::route`] runs after it has
/// gathered its own table; Lodestar without a model (cold start: its
/// fallback decides). Deterministic for `input.seed`; allocates nothing in
/// the library. Bad rows (none, cached tokens above the prompt, a prefill
/// rate that is not positive, KV use outside [0, 1], a negative or
/// non-finite RTT or stall) and a negative or non-finite `ttft_budget_s`
/// are [`crate::ErrorKind::Invalid`], an unknown
/// policy [`crate::ErrorKind::NotSupported`], a parameter out of bounds
/// [`crate::ErrorKind::Range`]. Rows may name one instance twice: the
/// policy ranks rows, not instances. A table with [`Role::PREFILL`] rows,
/// after every row that can decode, gets a pair decision
/// ([`Decision::prefill_instance`]).
pub fn decide(policy: Policy, input: &PolicyInput<'_>, rows: &[Candidate]) -> Result<Decision> {
    let mut scores = Vec::new();
    decide_into(policy, input, rows, None, &mut scores)
}

/// [`decide`] with every row's score written to `scores` (resized to the
/// rows, in their order; NaN where the policy did not rank a row) and,
/// for Lodestar, the `model` that scores the candidates (with
/// [`lodestar_feature_count`] inputs, used as [`Mlp::predict`] uses it).
pub fn decide_into(
    policy: Policy,
    input: &PolicyInput<'_>,
    rows: &[Candidate],
    model: Option<&mut Mlp>,
    scores: &mut Vec<f64>,
) -> Result<Decision> {
    const OP: &str = "lr_policy_decide";
    let mut i = init(sys::lr_policy_input_init_sized);
    i.params = if input.params.is_empty() {
        ptr::null()
    } else {
        input.params.as_ptr()
    };
    i.n_params = input.params.len();
    i.prompt_tokens = input.prompt_tokens;
    i.expected_output_tokens = input.expected_output_tokens;
    i.block_tokens = input.block_tokens;
    i.last_instance = input.last_instance.unwrap_or(INSTANCE_NONE);
    i.seed = input.seed;
    i.ttft_budget_s = input.ttft_budget_s;
    i.model = model.map_or(ptr::null_mut(), |m| m.raw_ptr());
    scores.clear();
    scores.resize(rows.len(), f64::NAN);
    let mut d = init(sys::lr_decision_init_sized);
    // SAFETY: the input borrows params (and the model, exclusively through
    // &mut) for the call; rows has rows.len() rows of lr_candidate's layout,
    // scores as many doubles; d is an initialized decision with no buffer.
    check(
        unsafe {
            sys::lr_policy_decide(
                policy.c(),
                &i,
                rows.as_ptr().cast::<sys::lr_candidate>(),
                rows.len(),
                size_of::<Candidate>(),
                scores.as_mut_ptr(),
                &mut d,
            )
        },
        OP,
    )?;
    Ok(Decision::from_c(&d))
}

/// The ring key a policy ranks its rows by (`LR_RING_KEY_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RingKey(u32);

named_consts! { RingKey, consts,
    /// The policy uses no ring.
    NONE = sys::LR_RING_KEY_NONE as u32,
    /// The session, or the prompt's first `SESSION_TOKENS` tokens.
    SESSION = sys::LR_RING_KEY_SESSION as u32,
    /// The prompt's first `SESSION_TOKENS` tokens.
    PREFIX = sys::LR_RING_KEY_PREFIX as u32,
    /// DualMap's hotness-adapted prefix key.
    HOTNESS = sys::LR_RING_KEY_HOTNESS as u32,
}

impl Policy {
    /// The ring key the router ranks this policy's rows by
    /// ([`Candidate::ring_rank`]) and how many ranks it reads
    /// (`lr_policy_ring_key`); [`crate::ErrorKind::NotSupported`] for an
    /// unknown policy.
    pub fn ring_key(self) -> Result<(RingKey, u32)> {
        let mut ranks = 0u32;
        // SAFETY: a plain value and an out pointer.
        let key = unsafe { sys::lr_policy_ring_key(self.c(), &mut ranks) };
        match u32::try_from(key) {
            Ok(k) => Ok((RingKey(k), ranks)),
            Err(_) => Err(Error::new(sys::LR_ENOTSUP, "lr_policy_ring_key")),
        }
    }
}
