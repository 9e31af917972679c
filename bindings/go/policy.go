package libroute

/*
#include "shim.h"
*/
import "C"

import (
	"math"
	"runtime"
	"strconv"
	"unsafe"
)

// Policy is a routing policy (lr_policy). See docs/router.md for each rule.
type Policy int32

// The policies. PolicyLodestar learns as it routes: see Router.LearnStep.
const (
	PolicyRandom             Policy = C.LR_POLICY_RANDOM
	PolicyRoundRobin         Policy = C.LR_POLICY_ROUND_ROBIN
	PolicyLeastRequest       Policy = C.LR_POLICY_LEAST_REQUEST
	PolicyLeastLoad          Policy = C.LR_POLICY_LEAST_LOAD
	PolicySessionAffinity    Policy = C.LR_POLICY_SESSION_AFFINITY
	PolicyConsistentHash     Policy = C.LR_POLICY_CONSISTENT_HASH
	PolicyPrefixCache        Policy = C.LR_POLICY_PREFIX_CACHE
	PolicyPrefixCacheAndLoad Policy = C.LR_POLICY_PREFIX_CACHE_AND_LOAD
	PolicySGLangCacheAware   Policy = C.LR_POLICY_SGLANG_CACHE_AWARE
	PolicyPreble             Policy = C.LR_POLICY_PREBLE
	PolicyMinTTFT            Policy = C.LR_POLICY_MIN_TTFT
	PolicyDynamo             Policy = C.LR_POLICY_DYNAMO
	PolicyDualMap            Policy = C.LR_POLICY_DUALMAP
	PolicyGORGO              Policy = C.LR_POLICY_GORGO
	PolicyRanvier            Policy = C.LR_POLICY_RANVIER
	PolicyLodestar           Policy = C.LR_POLICY_LODESTAR
	PolicyAdaptive           Policy = C.LR_POLICY_ADAPTIVE
	// PolicyLoRAAffinity is the Gateway API Inference Extension's LoRA
	// scheduling: adapter resident (or a free slot), queue and KV cache.
	PolicyLoRAAffinity Policy = C.LR_POLICY_LORA_AFFINITY
	// PolicyAIBrixLoRA is AIBrix's adapter routing: the least loaded of the
	// instances where the adapter is resident, else where fewest are.
	PolicyAIBrixLoRA Policy = C.LR_POLICY_AIBRIX_LORA
	// PolicyLLMDPD is llm-d's disaggregated scheduling: the decode
	// instance first (prefix and queue), then its prefix-based decider
	// splits a request whose uncached part there is at least
	// ParamPDMinUncached, the prefill instance by the same profile.
	PolicyLLMDPD Policy = C.LR_POLICY_LLMD_PD
	// PolicyDynamoPD is Dynamo's disaggregated router: conditional
	// disaggregation, prefilling where it decodes a request whose
	// uncached part is short (ParamPDLocalMaxTokens, ParamPDLocalMaxRatio).
	PolicyDynamoPD Policy = C.LR_POLICY_DYNAMO_PD
)

// PolicyCount returns how many policies the loaded library has
// (lr_policy_count): values 0 .. PolicyCount()-1 are all valid. A newer
// library of the same series may have more than the constants above name.
func PolicyCount() int {
	return int(C.lr_policy_count())
}

// String returns the policy's name ("dualmap", "prefix-cache-and-load",
// ...), or "Policy(n)" outside the enum.
func (p Policy) String() string {
	if s := C.lr_policy_name(C.int32_t(p)); s != nil {
		return C.GoString(s)
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// ParsePolicy returns the policy of a name as Policy.String gives it.
// An unknown name is ErrNotFound.
func ParsePolicy(name string) (Policy, error) {
	const op = "lr_policy_from_name"
	cs, err := cstring(name, op)
	if err != nil {
		return 0, err
	}
	defer freeCString(cs)
	var p C.int32_t
	if err := check(C.lr_policy_from_name(cs, &p), op); err != nil {
		return 0, err
	}
	return Policy(p), nil
}

// Reason says why an instance was chosen (lr_reason).
type Reason int32

// The reasons.
const (
	ReasonNone         Reason = C.LR_REASON_NONE
	ReasonRandom       Reason = C.LR_REASON_RANDOM
	ReasonRoundRobin   Reason = C.LR_REASON_ROUND_ROBIN
	ReasonLeastLoaded  Reason = C.LR_REASON_LEAST_LOADED
	ReasonSession      Reason = C.LR_REASON_SESSION
	ReasonHash         Reason = C.LR_REASON_HASH
	ReasonPrefixHit    Reason = C.LR_REASON_PREFIX_HIT
	ReasonLoadOverride Reason = C.LR_REASON_LOAD_OVERRIDE
	ReasonSLOSwitch    Reason = C.LR_REASON_SLO_SWITCH
	ReasonFallback     Reason = C.LR_REASON_FALLBACK
	ReasonMinCost      Reason = C.LR_REASON_MIN_COST
	ReasonSampled      Reason = C.LR_REASON_SAMPLED
	ReasonKFilter      Reason = C.LR_REASON_K_FILTER
	ReasonExplore      Reason = C.LR_REASON_EXPLORE
	ReasonColdStart    Reason = C.LR_REASON_COLD_START
	ReasonOOD          Reason = C.LR_REASON_OOD
	// ReasonWaiting: held in the router's queue, no instance yet
	// (RouteMayWait; see Router.Dispatch).
	ReasonWaiting Reason = C.LR_REASON_WAITING
	// ReasonAdapter: its LoRA adapter is resident there, or a slot is free
	// (PolicyLoRAAffinity, PolicyAIBrixLoRA).
	ReasonAdapter Reason = C.LR_REASON_ADAPTER
	// ReasonWhole: kept whole where it decodes although prefill instances
	// exist (Decision.PrefillReason only).
	ReasonWhole Reason = C.LR_REASON_WHOLE
)

// ReasonCount returns how many reasons the loaded library has
// (lr_reason_count).
func ReasonCount() int {
	return int(C.lr_reason_count())
}

// String returns the reason's name ("prefix-hit", ...), or "Reason(n)"
// outside the enum.
func (r Reason) String() string {
	if s := C.lr_reason_name(C.int32_t(r)); s != nil {
		return C.GoString(s)
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Param is a policy parameter (lr_param): one of the router's run-time
// tunables, and a key of PolicyInput.Params. lr_policy.h documents each one
// and its default.
type Param int32

// The parameters.
const (
	ParamPrefixMinRatio           Param = C.LR_PARAM_PREFIX_MIN_RATIO
	ParamBoundedLoad              Param = C.LR_PARAM_BOUNDED_LOAD
	ParamAIBrixImbalance          Param = C.LR_PARAM_AIBRIX_IMBALANCE
	ParamAIBrixStddev             Param = C.LR_PARAM_AIBRIX_STDDEV
	ParamSGLangAbs                Param = C.LR_PARAM_SGLANG_ABS
	ParamSGLangRel                Param = C.LR_PARAM_SGLANG_REL
	ParamSGLangMinRatio           Param = C.LR_PARAM_SGLANG_MIN_RATIO
	ParamPrebleHit                Param = C.LR_PARAM_PREBLE_HIT
	ParamDynamoOverlap            Param = C.LR_PARAM_DYNAMO_OVERLAP
	ParamDynamoTemperature        Param = C.LR_PARAM_DYNAMO_TEMPERATURE
	ParamTTFTSLOSeconds           Param = C.LR_PARAM_TTFT_SLO_S
	ParamDualMapKeyTokens         Param = C.LR_PARAM_DUALMAP_KEY_TOKENS
	ParamDualMapMaxKeyBlocks      Param = C.LR_PARAM_DUALMAP_MAX_KEY_BLOCKS
	ParamDualMapWindow            Param = C.LR_PARAM_DUALMAP_WINDOW
	ParamGORGOWeightRTT           Param = C.LR_PARAM_GORGO_W_RTT
	ParamGORGOWeightQueue         Param = C.LR_PARAM_GORGO_W_QUEUE
	ParamGORGOSigma               Param = C.LR_PARAM_GORGO_SIGMA
	ParamGORGOFrozen              Param = C.LR_PARAM_GORGO_FROZEN
	ParamGORGOWeightRTTMax        Param = C.LR_PARAM_GORGO_W_RTT_MAX
	ParamGORGOWeightQueueMin      Param = C.LR_PARAM_GORGO_W_QUEUE_MIN
	ParamRanvierPressure          Param = C.LR_PARAM_RANVIER_PRESSURE
	ParamSessionTokens            Param = C.LR_PARAM_SESSION_TOKENS
	ParamStatsMaxAgeSeconds       Param = C.LR_PARAM_STATS_MAX_AGE_S
	ParamDefaultOutputTokens      Param = C.LR_PARAM_DEFAULT_OUTPUT_TOKENS
	ParamGORGOReleaseAtFirstToken Param = C.LR_PARAM_GORGO_RELEASE_AT_FIRST_TOKEN
	ParamLodestarEpsilon          Param = C.LR_PARAM_LODESTAR_EPSILON
	ParamLodestarTie              Param = C.LR_PARAM_LODESTAR_TIE
	ParamLodestarKVThreshold      Param = C.LR_PARAM_LODESTAR_KV_THRESHOLD
	ParamLodestarKFilterTokens    Param = C.LR_PARAM_LODESTAR_KFILTER_TOKENS
	ParamLodestarOOD              Param = C.LR_PARAM_LODESTAR_OOD
	ParamLodestarFallback         Param = C.LR_PARAM_LODESTAR_FALLBACK
	ParamLodestarCandidates       Param = C.LR_PARAM_LODESTAR_CANDIDATES
	ParamLodestarMaxTTFTSeconds   Param = C.LR_PARAM_LODESTAR_MAX_TTFT_S
	ParamAdaptiveWorkWeight       Param = C.LR_PARAM_ADAPTIVE_WORK_WEIGHT
	ParamAdaptiveContention       Param = C.LR_PARAM_ADAPTIVE_CONTENTION
	ParamAdaptiveTieSeconds       Param = C.LR_PARAM_ADAPTIVE_TIE_S
	ParamAdaptiveFreshSeconds     Param = C.LR_PARAM_ADAPTIVE_FRESH_S
	ParamAdaptiveRTTWeight        Param = C.LR_PARAM_ADAPTIVE_RTT_WEIGHT
	ParamAdaptiveCalibrate        Param = C.LR_PARAM_ADAPTIVE_CALIBRATE
	// The router's clock: a timestamp more than this many seconds ahead
	// of the newest one taken is refused (StatusRange).
	ParamClockSkewSeconds Param = C.LR_PARAM_CLOCK_SKEW_S
	// The waiting queue (Router.Dispatch): an instance is saturated when
	// this many of the router's requests there wait for their first
	// token, or its fresh scrape reports this many waiting or at least
	// ParamSaturationKV of its KV cache in use.
	ParamSaturationQueue Param = C.LR_PARAM_SATURATION_QUEUE
	ParamSaturationKV    Param = C.LR_PARAM_SATURATION_KV
	// The waiting queue's fair share between tenants: a request let out
	// charges its tenant input weight x prompt tokens + output weight x
	// expected output tokens.
	ParamFairInputWeight  Param = C.LR_PARAM_FAIR_INPUT_WEIGHT
	ParamFairOutputWeight Param = C.LR_PARAM_FAIR_OUTPUT_WEIGHT
	// adaptive: 1 (the default) chooses, for a request with a TTFT budget
	// (PolicyInput.TTFTBudgetSeconds, Request.Deadline), among the
	// instances predicted to meet it when its least-cost choice would not,
	// and the one predicted fastest when none would (ReasonSLOSwitch); 0
	// ignores deadlines.
	ParamAdaptiveDeadline Param = C.LR_PARAM_ADAPTIVE_DEADLINE
	// Saturation: an instance is also saturated when the prefill the
	// router queued there (uncached prompt tokens before their first
	// token) would take this many seconds at its class's rate (0.15).
	ParamSaturationPrefillSeconds Param = C.LR_PARAM_SATURATION_PREFILL_S
	// Seconds an engine takes to load a LoRA adapter that is not resident
	// (0.1): what every policy's rows say (Candidate.AdapterLoadSeconds)
	// until adaptive has learnt the figure from first tokens.
	ParamAdapterLoadSeconds Param = C.LR_PARAM_ADAPTER_LOAD_S
	// What a prompt token an instance holds on a lower tier of its KV
	// cache (Candidate.CPUTokens, DiskTokens) is worth against one on its
	// GPU: host memory 0.8 (llm-d), disk 0.25 (Dynamo); 0..1 each. dynamo
	// and adaptive weigh the lower tiers by them; other policies ignore
	// lower tiers.
	ParamTierCPUWeight  Param = C.LR_PARAM_TIER_CPU_WEIGHT
	ParamTierDiskWeight Param = C.LR_PARAM_TIER_DISK_WEIGHT
	// Bytes of KV cache a prompt token takes (131072: Llama-3-8B in bf16):
	// what a split request moves from its prefill to its decode instance,
	// for the prompt tokens the decode instance does not hold.
	ParamKVBytesPerToken Param = C.LR_PARAM_KV_BYTES_PER_TOKEN
	// KV transfer bandwidth in GB/s between two instances on one node
	// (300), in one rack (50), in one region (12.5) and across regions
	// (1.25), by InstanceSpec.Node, Rack and Region.
	ParamKVGBpsNode   Param = C.LR_PARAM_KV_GBPS_NODE
	ParamKVGBpsRack   Param = C.LR_PARAM_KV_GBPS_RACK
	ParamKVGBpsRegion Param = C.LR_PARAM_KV_GBPS_REGION
	ParamKVGBpsWAN    Param = C.LR_PARAM_KV_GBPS_WAN
	// The policy that picks a split request's prefill instance when the
	// router's policy has no pair rule of its own (SGLang's
	// --prefill-policy): -1 (the default) the router's policy, else a
	// policy that keeps no state and reads no ring, or round-robin.
	ParamPDPrefillPolicy Param = C.LR_PARAM_PD_PREFILL_POLICY
	// PolicyLLMDPD's decider: split when the decode instance would prefill
	// at least this many uncached tokens itself (16; 0 splits always).
	ParamPDMinUncached Param = C.LR_PARAM_PD_MIN_UNCACHED
	// PolicyDynamoPD: prefill where it decodes when its uncached tokens
	// there are fewer than this (2048) and a share of the prompt below
	// ParamPDLocalMaxRatio (0.7).
	ParamPDLocalMaxTokens Param = C.LR_PARAM_PD_LOCAL_MAX_TOKENS
	ParamPDLocalMaxRatio  Param = C.LR_PARAM_PD_LOCAL_MAX_RATIO
	// adaptive keeps a request whole on a decode instance where requests
	// are in flight only when its prefill's seconds there are at most this
	// x the decode seconds of a request there (Candidate.DecodeSeconds),
	// and the wait it would have at the prefill instance is at least twice
	// what it stalls them all together (0.1; 0: only on an idle decode
	// instance).
	ParamAdaptivePDStall Param = C.LR_PARAM_ADAPTIVE_PD_STALL
	// A route in a fleet of more than this many routable instances (256)
	// weighs only the candidates its policy can pick: the instances
	// holding the prompt's longest prefixes, the ring's, the least loaded
	// and a uniform sample, ParamNarrowWidth (16) of each.
	ParamNarrowAbove Param = C.LR_PARAM_NARROW_ABOVE
	// How many instances each source of a narrowed route gives (16).
	ParamNarrowWidth Param = C.LR_PARAM_NARROW_WIDTH
)

// Role is an instance's part in a disaggregated fleet (lr_role):
// InstanceSpec.Role, Candidate.Role. A fleet whose instances are all
// RoleBoth is aggregated: every decision keeps a request whole. With
// RolePrefill instances a decision may split a request: the prefill
// instance computes its KV, which moves to the decode instance
// (Decision.PrefillInstance).
type Role int32

// The roles.
const (
	// RoleBoth prefills and decodes its requests (every instance before
	// 0.3).
	RoleBoth Role = C.LR_ROLE_BOTH
	// RolePrefill prefills for decode instances; it decodes none.
	RolePrefill Role = C.LR_ROLE_PREFILL
	// RoleDecode decodes; it prefills a request kept whole.
	RoleDecode Role = C.LR_ROLE_DECODE
)

// String returns "both", "prefill" or "decode", or "Role(n)" outside the
// enum.
func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// ParamCount returns how many parameters the loaded library has
// (lr_param_count): keys 0 .. ParamCount()-1 are all valid.
func ParamCount() int {
	return int(C.lr_param_count())
}

// Bounds returns the parameter's range, default and whether it takes whole
// numbers only (lr_param_bounds); ErrNotSupported for an unknown key.
func (p Param) Bounds() (Bounds, error) {
	return bounds(C.lr_param_bounds(C.int32_t(p)), "lr_param_bounds")
}

// DefaultParams returns every parameter's default, indexed by Param: a
// PolicyInput.Params to start from.
func DefaultParams() []float64 {
	out := make([]float64, ParamCount())
	for k := range out {
		if b, err := Param(k).Bounds(); err == nil {
			out[k] = b.Default
		}
	}
	return out
}

// Score is one instance's score in a decision.
type Score struct {
	Instance InstanceID
	// Tokens expected to hit the instance's prefix cache.
	CachedTokens uint32
	// What the policy ranks by, lower is better; NaN where the policy did
	// not rank the instance.
	Score float64
}

// Score is passed to C as an lr_score array: the layouts must agree. Each
// line fails to compile (negative array length) if they do not.
var (
	_ [unsafe.Sizeof(Score{}) - C.sizeof_lr_score]struct{}
	_ [C.sizeof_lr_score - unsafe.Sizeof(Score{})]struct{}
	_ [unsafe.Offsetof(Score{}.CachedTokens) - unsafe.Offsetof(C.lr_score{}.cached_tokens)]struct{}
	_ [unsafe.Offsetof(C.lr_score{}.cached_tokens) - unsafe.Offsetof(Score{}.CachedTokens)]struct{}
	_ [unsafe.Offsetof(Score{}.Score) - unsafe.Offsetof(C.lr_score{}.score)]struct{}
	_ [unsafe.Offsetof(C.lr_score{}.score) - unsafe.Offsetof(Score{}.Score)]struct{}
)

// Decision is where a request goes and why.
type Decision struct {
	Instance InstanceID
	Reason   Reason
	// Tokens expected to hit the cache on Instance.
	CachedTokens uint32
	// The deepest cached prefix on any routable instance.
	BestCachedTokens uint32
	// The policy's predicted cost of the choice; NaN if it predicts none.
	Cost float64
	// The other candidate (dualmap, consistent-hash, Lodestar's K-filter),
	// or InstanceNone.
	AltInstance InstanceID
	// From Route with RouteScores: one entry per routable instance, in id
	// order (with prefill instances routable, the ones that decode first,
	// as Router.Candidates). From Decide: one per row, in the rows' order.
	Scores []Score
	// The policy that chose: the router's, or Lodestar's fallback on cold
	// start and out of range (-1 if none did).
	Decider Policy
	// The seed the policy drew with: Decide with the same rows, parameters
	// and seed chooses the same.
	Seed uint64
	// The instance that prefills the request when the decision splits it
	// (a fleet with RolePrefill instances): Instance then decodes it, its
	// KV moving over. InstanceNone: Instance does both.
	PrefillInstance InstanceID
	// Why that prefill instance; ReasonWhole when a fleet that could split
	// kept the request whole; -1 when no candidate was a prefill instance.
	PrefillReason Reason
	// Tokens expected to hit the cache on PrefillInstance.
	PrefillCachedTokens uint32
	// The KV transfer's expected seconds (0 when not split), from the
	// placements (InstanceSpec.Node, Rack, Region) and ParamKVGBpsNode ...
	// ParamKVGBpsWAN.
	TransferSeconds float64
}

// fill copies a decision's results (not its scores) into d.
func (d *Decision) fill(dec *C.lr_decision) {
	d.Instance = InstanceID(dec.instance)
	d.Reason = Reason(dec.reason)
	d.CachedTokens = uint32(dec.cached_tokens)
	d.BestCachedTokens = uint32(dec.best_cached_tokens)
	d.Cost = float64(dec.cost)
	d.AltInstance = InstanceID(dec.alt_instance)
	d.Decider = Policy(dec.decider)
	d.Seed = uint64(dec.seed)
	d.PrefillInstance = InstanceID(dec.prefill_instance)
	d.PrefillReason = Reason(dec.prefill_reason)
	d.PrefillCachedTokens = uint32(dec.prefill_cached_tokens)
	d.TransferSeconds = float64(dec.transfer_s)
}

// Candidate is one row of a candidate table (lr_candidate): an instance as
// a policy sees it. Router.Candidates records the table Route decides on;
// Decide runs any policy over any table. The zero value is an idle
// instance 0 with no prefix caching and no class speed (PrefillRate must
// be > 0): start from NewCandidate.
type Candidate struct {
	Instance InstanceID
	// Prompt tokens expected to hit its prefix cache.
	CachedTokens uint32
	// Requests in flight on it, and of those the ones before their first
	// token.
	Inflight uint32
	Queued   uint32
	// Uncached prompt tokens of its queued requests (prefill to do).
	PrefillTokens uint64
	// Whole prompt tokens of its queued requests, and of all in flight.
	QueuedTokens uint64
	PromptTokens uint64
	// Expected output tokens of its requests past their first token.
	DecodeTokens uint64
	// Prompt + expected output tokens of its requests in flight.
	KVTokens uint64
	// Scraped engine stats; 0 when missing or stale.
	Running uint32
	Waiting uint32
	KVUse   float64
	// Round-trip time, milliseconds (0 unknown).
	RTTMs float64
	// Prefill throughput of its class, tokens/s (> 0).
	PrefillRate float64
	// DualMap's decode stall, seconds (0 below 3 s).
	StallSeconds float64
	// Seconds since a route went to it through its cached prefix; negative
	// when unknown.
	CachedAgeSeconds float64
	// Its class (GPU model).
	Class uint32
	// 1 if it caches prefixes, 0 if not.
	PrefixCaching int32
	// Rank among the ring's candidates for the policy's ring key (1 first),
	// 0 when not among them or no ring (see Policy.RingKey).
	RingRank uint32
	// Reserved; 0.
	Flags uint32
	// Blocks the router's index holds for the instance: the radix tree
	// size sglang-cache-aware's low-match branch minimizes. Routers fill
	// it only for the policies that read it; 0 otherwise.
	TreeBlocks uint64
	// The router's calibrated TTFT model of the instance (adaptive):
	// seconds per queued prefill token and fixed seconds, fitted online
	// from the first tokens it saw; 0 before the first (PrefillRate then
	// stands in).
	TTFTSecondsPerToken float64
	TTFTBaseSeconds     float64
	// The seconds one more request decoding there adds to a first token.
	TTFTSecondsPerDecoding float64
	// PrefillTokens averaged over the last ten seconds or so of routes.
	PrefillTokensAvg float64
	// Requests routed to it per second, averaged the same way.
	RouteRate float64
	// The share of its expected cached tokens its engine lately reported
	// not reusing (Router.ObserveCached), in [0, 1]; adaptive counts
	// CachedTokens x (1 - CachedLost).
	CachedLost float64
	// 1 when its engine must load the request's LoRA adapter first (not
	// resident there); 0 when resident, or the request names none.
	AdapterMissing int32
	// Its adapter slots free to load one without waiting; math.MaxUint32
	// when its slots are not known.
	AdapterFree uint32
	// Seconds its engine is expected to spend loading the request's
	// adapter: 0 when resident, else ParamAdapterLoadSeconds or what
	// adaptive learnt.
	AdapterLoadSeconds float64
	// Adapters resident there.
	AdaptersResident uint32
	// 1 when loading the request's adapter evicts another one.
	AdapterEvicts int32
	// Prompt tokens past CachedTokens its engine holds on a lower tier of
	// its KV cache (blocks offloaded to host memory, as KVStored.Tier
	// said), and past those on disk: loaded, not computed, on a hit.
	CPUTokens, DiskTokens uint32
	// Its part in a disaggregated fleet. In a table with RolePrefill rows,
	// every row that can decode comes before every RolePrefill row (the
	// router gathers them so).
	Role Role
	// Where it runs (InstanceSpec.Node, Rack, Region; 0: unknown): what a
	// KV transfer between two rows costs.
	Node, Rack, Region uint32
	// The router's calibrated decode seconds of its class (adaptive): first
	// token to completion, the mean of those it saw lately; 0 before any.
	DecodeSeconds float64
	// A sibling of the request there (another prompt routed there lately
	// through the point where this request's hit ends, and on past it):
	// its tokens past that point, which an engine of slots (llama.cpp)
	// overwrites; where a sibling left this request's path within its hit
	// since its own last route there; and the share of such hits past a
	// fork the engine lately did not deliver, less that of hits without
	// one (high for slots, near 0 for a paged engine). adaptive counts a
	// hit with a sibling x (1 - min(1, 4 x SiblingLost)).
	SiblingTokens, SiblingForkTokens uint32
	SiblingLost                      float64
}

// NewCandidate returns an idle instance that caches prefixes, with the
// library's default class speed (8000 tokens/s), an unknown cache age and
// no LoRA adapter in slots not known.
func NewCandidate(id InstanceID) Candidate {
	var s C.lr_class_spec
	C.lr_class_spec_init_sized(&s, C.sizeof_lr_class_spec)
	return Candidate{Instance: id, PrefillRate: float64(s.prefill_tokens_per_s),
		CachedAgeSeconds: -1, PrefixCaching: 1, AdapterFree: math.MaxUint32}
}

// Candidate is passed to C as an lr_candidate array, row_size
// unsafe.Sizeof(Candidate{}): the layouts must agree. Each line fails to
// compile if they do not (an index out of range, or a negative constant).
var (
	_ = [1]int{}[unsafe.Sizeof(Candidate{})-C.sizeof_lr_candidate]
	_ = [1]int{}[C.sizeof_lr_candidate-unsafe.Sizeof(Candidate{})]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.CachedTokens)-unsafe.Offsetof(C.lr_candidate{}.cached_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Inflight)-unsafe.Offsetof(C.lr_candidate{}.inflight)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Queued)-unsafe.Offsetof(C.lr_candidate{}.queued)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.PrefillTokens)-unsafe.Offsetof(C.lr_candidate{}.prefill_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.QueuedTokens)-unsafe.Offsetof(C.lr_candidate{}.queued_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.PromptTokens)-unsafe.Offsetof(C.lr_candidate{}.prompt_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.DecodeTokens)-unsafe.Offsetof(C.lr_candidate{}.decode_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.KVTokens)-unsafe.Offsetof(C.lr_candidate{}.kv_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Running)-unsafe.Offsetof(C.lr_candidate{}.running)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Waiting)-unsafe.Offsetof(C.lr_candidate{}.waiting)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.KVUse)-unsafe.Offsetof(C.lr_candidate{}.kv_use)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.RTTMs)-unsafe.Offsetof(C.lr_candidate{}.rtt_ms)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.PrefillRate)-unsafe.Offsetof(C.lr_candidate{}.prefill_rate)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.StallSeconds)-unsafe.Offsetof(C.lr_candidate{}.stall_s)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.CachedAgeSeconds)-unsafe.Offsetof(C.lr_candidate{}.cached_age_s)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Class)-unsafe.Offsetof(C.lr_candidate{}.instance_class)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.PrefixCaching)-unsafe.Offsetof(C.lr_candidate{}.prefix_caching)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.RingRank)-unsafe.Offsetof(C.lr_candidate{}.ring_rank)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Flags)-unsafe.Offsetof(C.lr_candidate{}.flags)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.TreeBlocks)-unsafe.Offsetof(C.lr_candidate{}.tree_blocks)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.TTFTSecondsPerToken)-unsafe.Offsetof(C.lr_candidate{}.ttft_s_per_token)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.TTFTBaseSeconds)-unsafe.Offsetof(C.lr_candidate{}.ttft_base_s)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.TTFTSecondsPerDecoding)-unsafe.Offsetof(C.lr_candidate{}.ttft_s_per_decoding)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.PrefillTokensAvg)-unsafe.Offsetof(C.lr_candidate{}.prefill_tokens_avg)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.RouteRate)-unsafe.Offsetof(C.lr_candidate{}.route_rate)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.CachedLost)-unsafe.Offsetof(C.lr_candidate{}.cached_lost)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.AdapterMissing)-unsafe.Offsetof(C.lr_candidate{}.adapter_missing)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.AdapterFree)-unsafe.Offsetof(C.lr_candidate{}.adapter_free)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.AdapterLoadSeconds)-unsafe.Offsetof(C.lr_candidate{}.adapter_load_s)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.AdaptersResident)-unsafe.Offsetof(C.lr_candidate{}.adapters_resident)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.AdapterEvicts)-unsafe.Offsetof(C.lr_candidate{}.adapter_evicts)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.CPUTokens)-unsafe.Offsetof(C.lr_candidate{}.cpu_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.DiskTokens)-unsafe.Offsetof(C.lr_candidate{}.disk_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Role)-unsafe.Offsetof(C.lr_candidate{}.role)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Node)-unsafe.Offsetof(C.lr_candidate{}.node)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Rack)-unsafe.Offsetof(C.lr_candidate{}.rack)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.Region)-unsafe.Offsetof(C.lr_candidate{}.region)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.DecodeSeconds)-unsafe.Offsetof(C.lr_candidate{}.decode_s)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.SiblingTokens)-unsafe.Offsetof(C.lr_candidate{}.sibling_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.SiblingForkTokens)-unsafe.Offsetof(C.lr_candidate{}.sibling_fork_tokens)]
	_ = [1]int{}[unsafe.Offsetof(Candidate{}.SiblingLost)-unsafe.Offsetof(C.lr_candidate{}.sibling_lost)]
)

// candidateSize is the row_size passed with every table: this package's
// sizeof(lr_candidate).
const candidateSize = C.size_t(unsafe.Sizeof(Candidate{}))

func candidatePtr(rows []Candidate) *C.lr_candidate {
	if len(rows) == 0 {
		return nil
	}
	return (*C.lr_candidate)(unsafe.Pointer(&rows[0]))
}

// PolicyInput is a request's facts and a policy's knobs for Decide
// (lr_policy_input). Start from DefaultPolicyInput, or from
// Router.PolicyInput for what a router's Route would use: the zero value
// names instance 0 as round-robin's last.
type PolicyInput struct {
	// Parameter values indexed by Param (Params[k] is key k); keys past
	// its end take their defaults. Router.PolicyInput gives the ones a
	// router's routes use.
	Params []float64
	// Prompt length in tokens.
	PromptTokens uint32
	// Expected output tokens; 0: ParamDefaultOutputTokens.
	ExpectedOutputTokens uint32
	// Tokens per KV block (dynamo counts blocks); 0: 16.
	BlockTokens uint32
	// Round-robin: the instance served last, or InstanceNone.
	LastInstance InstanceID
	// Seeds every draw the policy makes.
	Seed uint64
	// Lodestar: the network that scores the candidates, with
	// LodestarFeatureCount() inputs; nil: cold start, its fallback decides.
	// Used as Mlp.Predict uses it: not concurrently with other calls on it.
	Model *Mlp
	// The request's TTFT budget: seconds left until its deadline (1e-9
	// once it has passed); 0: no deadline. Finite, >= 0. adaptive prefers
	// an instance predicted to meet it (ParamAdaptiveDeadline).
	TTFTBudgetSeconds float64
}

// DefaultPolicyInput returns the library's defaults
// (lr_policy_input_init): block tokens 16, no last instance.
func DefaultPolicyInput() PolicyInput {
	var in C.lr_policy_input
	C.lr_policy_input_init_sized(&in, C.sizeof_lr_policy_input)
	return PolicyInput{BlockTokens: uint32(in.block_tokens),
		LastInstance: InstanceID(in.last_instance)}
}

// LodestarFeatureCount returns the width of Lodestar's feature rows in the
// loaded library (lr_lodestar_feature_count): the inputs of a
// PolicyInput.Model and of a router's learner rows.
func LodestarFeatureCount() int {
	return int(C.lr_lodestar_feature_count())
}

// Decide chooses one row of a candidate table with a policy
// (lr_policy_decide): the code Route runs after gathering its own table.
// It is deterministic for in.Seed and allocates nothing in the library;
// the returned Decision has one Score per row. A table with RolePrefill
// rows, after every row that can decode, gets a pair decision
// (Decision.PrefillInstance). nil in means
// DefaultPolicyInput(). Bad rows (none, cached tokens above the prompt, a
// prefill rate that is not positive, KV use outside [0, 1], a negative or
// non-finite RTT or stall) and a negative or non-finite TTFTBudgetSeconds
// are ErrInvalid, an unknown policy
// ErrNotSupported, a parameter out of bounds ErrRange, a closed Model
// ErrClosed. Rows may name one instance twice: the policy ranks rows, not
// instances.
func Decide(p Policy, in *PolicyInput, rows []Candidate) (Decision, error) {
	const op = "lr_policy_decide"
	if in == nil {
		def := DefaultPolicyInput()
		in = &def
	}
	var ci C.lr_policy_input
	C.lr_policy_input_init_sized(&ci, C.sizeof_lr_policy_input)
	ci.n_params = C.size_t(len(in.Params))
	ci.prompt_tokens = C.uint32_t(in.PromptTokens)
	ci.expected_output_tokens = C.uint32_t(in.ExpectedOutputTokens)
	ci.block_tokens = C.uint32_t(in.BlockTokens)
	ci.last_instance = C.uint32_t(in.LastInstance)
	ci.seed = C.uint64_t(in.Seed)
	ci.ttft_budget_s = C.double(in.TTFTBudgetSeconds)
	var model *C.lr_mlp
	if in.Model != nil {
		if in.Model.p == nil {
			return Decision{}, ErrClosed
		}
		model = in.Model.p
	}
	scores := make([]float64, len(rows))
	var dec C.lr_decision
	C.lr_decision_init_sized(&dec, C.sizeof_lr_decision)
	st := C.lrgo_policy_decide(C.int32_t(p), &ci, f64ptr(in.Params), model,
		candidatePtr(rows), C.size_t(len(rows)), candidateSize, f64ptr(scores), &dec)
	runtime.KeepAlive(in.Model)
	if err := check(st, op); err != nil {
		return Decision{}, err
	}
	d := Decision{Scores: make([]Score, len(rows))}
	d.fill(&dec)
	for i := range rows {
		d.Scores[i] = Score{Instance: rows[i].Instance, CachedTokens: rows[i].CachedTokens,
			Score: scores[i]}
	}
	return d, nil
}

// RingKey is the ring key a policy ranks its rows by (LR_RING_KEY_*).
type RingKey int32

// The ring keys.
const (
	RingKeyNone    RingKey = C.LR_RING_KEY_NONE
	RingKeySession RingKey = C.LR_RING_KEY_SESSION
	RingKeyPrefix  RingKey = C.LR_RING_KEY_PREFIX
	RingKeyHotness RingKey = C.LR_RING_KEY_HOTNESS
)

// RingKey returns the ring key the router ranks this policy's rows by
// (Candidate.RingRank) and how many ranks it reads (lr_policy_ring_key);
// ErrNotSupported for an unknown policy.
func (p Policy) RingKey() (key RingKey, ranks int, err error) {
	var k C.uint32_t
	v := C.lr_policy_ring_key(C.int32_t(p), &k)
	if v < 0 {
		return RingKeyNone, 0, &Error{Status: StatusNotSupported, Op: "lr_policy_ring_key"}
	}
	return RingKey(v), int(k), nil
}
