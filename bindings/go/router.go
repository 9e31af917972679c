package libroute

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"strconv"
	"sync"
	"time"
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
)

// policyCount is LR_POLICY_COUNT of the headers.
const policyCount = C.LR_POLICY_COUNT

// String returns the policy's name ("dualmap", "prefix-cache-and-load",
// ...), or "Policy(n)" outside the enum.
func (p Policy) String() string {
	if s := C.lr_policy_name(C.lr_policy(p)); s != nil {
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
	var p C.lr_policy
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
)

// String returns the reason's name ("prefix-hit", ...), or "Reason(n)"
// outside the enum.
func (r Reason) String() string {
	if s := C.lr_reason_name(C.lr_reason(r)); s != nil {
		return C.GoString(s)
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Param is a run-time router parameter (lr_param); lr_router.h documents
// each one and its default.
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
)

// paramCount is LR_PARAM_COUNT of the headers.
const paramCount = C.LR_PARAM_COUNT

// Bounds returns the parameter's range and default; ErrNotSupported for
// an unknown key.
func (p Param) Bounds() (Bounds, error) {
	b := C.lr_router_param_bounds(C.lr_param(p))
	if err := check(b.status, "lr_router_param_bounds"); err != nil {
		return Bounds{}, err
	}
	return Bounds{Lo: float64(b.lo), Hi: float64(b.hi), Default: float64(b.def)}, nil
}

// RouterOptions are fixed when the router is created. Start from
// DefaultRouterOptions. A zero numeric field other than Policy and Seed
// also means the library's default.
type RouterOptions struct {
	// Initial policy.
	Policy Policy
	// Seeds every random choice: equal seeds and inputs, equal decisions.
	Seed uint64
	// Instances at once, requests in flight at once.
	MaxInstances uint32
	MaxRequests  uint32
	// Prefix index: tokens per block, capacity in block routes, and the
	// time an unused route lives (NoExpiry: for ever).
	BlockTokens         uint32
	IndexCapacityBlocks uint64
	IndexTTL            time.Duration
	// Virtual nodes per instance on the ring.
	RingVnodes uint32
	// Lodestar's learner (buffers, schedule, network); nil: the library's
	// defaults. NFeatures must be 0 or LodestarFeatures; Seed is ignored
	// (the router's seeds it). Copied at create; the learner is made when
	// PolicyLodestar is first chosen.
	Learner *LearnerOptions
}

// DefaultRouterOptions returns the library's defaults
// (lr_router_options_init).
func DefaultRouterOptions() RouterOptions {
	var o C.lr_router_options
	C.lr_router_options_init(&o)
	return RouterOptions{
		Policy:              Policy(o.policy),
		Seed:                uint64(o.seed),
		MaxInstances:        uint32(o.max_instances),
		MaxRequests:         uint32(o.max_requests),
		BlockTokens:         uint32(o.block_tokens),
		IndexCapacityBlocks: uint64(o.index_capacity_blocks),
		IndexTTL:            nsDuration(o.index_ttl_ns),
		RingVnodes:          uint32(o.ring_vnodes),
	}
}

// Router chooses an engine instance for each request (lr_router). It is
// safe for concurrent use; the library serializes calls with one mutex.
type Router struct {
	// mu is held shared by every call and exclusively by Close, so that
	// Close never frees the router under a call in progress.
	mu sync.RWMutex
	p  *C.lr_router
}

// NewRouter creates a router. nil options mean DefaultRouterOptions().
func NewRouter(opt *RouterOptions) (*Router, error) {
	var co *C.lr_router_options
	if opt != nil {
		var o C.lr_router_options
		C.lr_router_options_init(&o)
		ttl, ok := durationNs(opt.IndexTTL)
		if !ok {
			return nil, invalid("lr_router_create")
		}
		o.policy = C.int32_t(opt.Policy)
		o.seed = C.uint64_t(opt.Seed)
		o.max_instances = C.uint32_t(opt.MaxInstances)
		o.max_requests = C.uint32_t(opt.MaxRequests)
		o.block_tokens = C.uint32_t(opt.BlockTokens)
		o.index_capacity_blocks = C.uint64_t(opt.IndexCapacityBlocks)
		o.index_ttl_ns = ttl
		o.ring_vnodes = C.uint32_t(opt.RingVnodes)
		co = &o
	}
	var p *C.lr_router
	var st C.lr_status
	if opt != nil && opt.Learner != nil {
		lo, mo := opt.Learner.c()
		st = C.lrgo_router_create(co, &lo, mo, &p)
	} else {
		st = C.lr_router_create(co, &p)
	}
	if err := check(st, "lr_router_create"); err != nil {
		return nil, err
	}
	r := &Router{p: p}
	runtime.SetFinalizer(r, (*Router).Close)
	return r, nil
}

// Close destroys the router. It waits for calls in progress; later calls
// return ErrClosed. Closing twice is a no-op.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil {
		C.lr_router_destroy(r.p)
		r.p = nil
		runtime.SetFinalizer(r, nil)
	}
	return nil
}

// acquire returns the C handle with r.mu held shared; the caller releases
// it with r.mu.RUnlock. Holding r also keeps the finalizer away.
func (r *Router) acquire() (*C.lr_router, error) {
	r.mu.RLock()
	if r.p == nil {
		r.mu.RUnlock()
		return nil, ErrClosed
	}
	return r.p, nil
}

// SetPolicy switches the policy; state shared by the policies is kept.
func (r *Router) SetPolicy(p Policy) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_set_policy(h, C.lr_policy(p)), "lr_router_set_policy")
}

// Policy returns the policy in use (-1 after Close).
func (r *Router) Policy() Policy {
	h, err := r.acquire()
	if err != nil {
		return -1
	}
	defer r.mu.RUnlock()
	return Policy(C.lr_router_policy(h))
}

// InstanceSpec describes an instance to add. The zero value plus a Name is
// the library's default spec.
type InstanceSpec struct {
	// Host name, for example "10.0.0.5:8000" (1..255 bytes). It places the
	// instance on the ring, so every gateway replica agrees on candidates.
	Name string
	// GPU class, see SetClass.
	Class uint32
	// NoPrefixCaching says the engine does not cache prefixes.
	NoPrefixCaching bool
	// Initial RTT until probes arrive; 0 if unknown.
	RTT time.Duration
}

// AddInstance adds an instance, which receives routes at once, and returns
// the id the router gave it.
func (r *Router) AddInstance(spec InstanceSpec) (InstanceID, error) {
	const op = "lr_router_add_instance"
	if spec.RTT < 0 {
		return InstanceNone, invalid(op)
	}
	name, err := cstring(spec.Name, op)
	if err != nil {
		return InstanceNone, err
	}
	defer freeCString(name)
	var s C.lr_instance_spec
	C.lr_instance_spec_init(&s)
	s.name = name
	s.instance_class = C.uint32_t(spec.Class)
	s.prefix_caching = cbool(!spec.NoPrefixCaching)
	s.rtt_ns = C.uint64_t(spec.RTT)
	h, err := r.acquire()
	if err != nil {
		return InstanceNone, err
	}
	defer r.mu.RUnlock()
	var id C.uint32_t
	if err := check(C.lr_router_add_instance(h, &s, &id), op); err != nil {
		return InstanceNone, err
	}
	return InstanceID(id), nil
}

// FindInstance returns the id of an instance by name (ErrNotFound if none).
func (r *Router) FindInstance(name string) (InstanceID, error) {
	const op = "lr_router_find_instance"
	cs, err := cstring(name, op)
	if err != nil {
		return InstanceNone, err
	}
	defer freeCString(cs)
	h, err := r.acquire()
	if err != nil {
		return InstanceNone, err
	}
	defer r.mu.RUnlock()
	var id C.uint32_t
	if err := check(C.lr_router_find_instance(h, cs, &id), op); err != nil {
		return InstanceNone, err
	}
	return InstanceID(id), nil
}

// DrainInstance stops (true) or resumes (false) new routes to an instance;
// its requests in flight and cached prefixes stay.
func (r *Router) DrainInstance(id InstanceID, draining bool) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_drain_instance(h, C.uint32_t(id), cbool(draining)),
		"lr_router_drain_instance")
}

// RemoveInstance removes an instance with its routes, load and requests in
// flight (their later events get ErrNotFound).
func (r *Router) RemoveInstance(id InstanceID) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_remove_instance(h, C.uint32_t(id)), "lr_router_remove_instance")
}

// InstanceCount returns the instances added and not removed, draining
// ones included (0 after Close).
func (r *Router) InstanceCount() int {
	h, err := r.acquire()
	if err != nil {
		return 0
	}
	defer r.mu.RUnlock()
	return int(C.lr_router_instance_count(h))
}

// ClassSpec is the speed of a class of engines (GPU model), used by the
// policies that predict time.
type ClassSpec struct {
	// Prefill throughput in tokens per second, in [1, 1e9].
	PrefillTokensPerSecond float64
}

// DefaultClassSpec returns the library's default class (lr_class_spec_init).
func DefaultClassSpec() ClassSpec {
	var s C.lr_class_spec
	C.lr_class_spec_init(&s)
	return ClassSpec{PrefillTokensPerSecond: float64(s.prefill_tokens_per_s)}
}

// SetClass sets the speed of an instance class.
func (r *Router) SetClass(class uint32, spec ClassSpec) error {
	var s C.lr_class_spec
	C.lr_class_spec_init(&s)
	s.prefill_tokens_per_s = C.double(spec.PrefillTokensPerSecond)
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_set_class(h, C.uint32_t(class), &s), "lr_router_set_class")
}

// SetStats feeds an instance's scraped engine metrics. A scrape older than
// the one held is ignored.
func (r *Router) SetStats(id InstanceID, stats EngineStats) error {
	s := stats.c()
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_set_stats(h, C.uint32_t(id), &s), "lr_router_set_stats")
}

// ObserveRTT folds an RTT probe into the instance's moving average.
func (r *Router) ObserveRTT(id InstanceID, rtt time.Duration) error {
	const op = "lr_router_observe_rtt"
	if rtt < 0 {
		return invalid(op)
	}
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_observe_rtt(h, C.uint32_t(id), C.uint64_t(rtt)), op)
}

// InstanceLoad returns an instance's load as the router sees it.
func (r *Router) InstanceLoad(id InstanceID) (LoadSnapshot, error) {
	h, err := r.acquire()
	if err != nil {
		return LoadSnapshot{}, err
	}
	defer r.mu.RUnlock()
	var s C.lr_load_snapshot
	C.lr_load_snapshot_init(&s)
	if err := check(C.lr_router_instance_load(h, C.uint32_t(id), &s),
		"lr_router_instance_load"); err != nil {
		return LoadSnapshot{}, err
	}
	return loadSnapshot(&s), nil
}

// RouteFlags modify Route.
type RouteFlags uint32

// The route flags.
const (
	// RouteDryRun only asks: nothing is recorded or learned.
	RouteDryRun RouteFlags = C.LR_ROUTE_DRY_RUN
	// RouteScores fills Decision.Scores with every routable instance's
	// score.
	RouteScores RouteFlags = C.LR_ROUTE_SCORES
	// RouteNoLearn records the dispatch but does not learn the prompt (for
	// hosts that feed engine KV events instead).
	RouteNoLearn RouteFlags = C.LR_ROUTE_NO_LEARN
)

// Request is a request to route. Its slices are borrowed for the call.
type Request struct {
	// The host's id, unique among requests in flight.
	ID uint64
	// Prompt tokens.
	Tokens []uint32
	// Message ends as token offsets, ascending; learned as routes.
	Boundaries []uint32
	// Enters every prefix key: tenants never share cached prefixes.
	TenantSalt uint64
	// Session id for session affinity, used when HasSession.
	Session    uint64
	HasSession bool
	// Expected output tokens; 0 if unknown.
	ExpectedOutputTokens uint32
	Flags                RouteFlags
	// Host time now, nanoseconds.
	Now uint64
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
	// The other candidate (dualmap, consistent-hash), or InstanceNone.
	AltInstance InstanceID
	// With RouteScores: one entry per routable instance, in id order.
	Scores []Score
}

// Route chooses an instance for a request and, unless RouteDryRun, records
// the dispatch and learns the prompt there.
func (r *Router) Route(req *Request) (Decision, error) {
	var d Decision
	err := r.RouteInto(req, &d)
	return d, err
}

// RouteInto is Route writing into d, reusing the capacity of d.Scores, so a
// host that asks for scores on every request need not allocate.
func (r *Router) RouteInto(req *Request, d *Decision) error {
	const op = "lr_router_route"
	var q C.lr_request
	C.lr_request_init(&q)
	q.id = C.uint64_t(req.ID)
	q.n_tokens = C.size_t(len(req.Tokens))
	q.n_boundaries = C.size_t(len(req.Boundaries))
	q.tenant_salt = C.uint64_t(req.TenantSalt)
	q.session = C.uint64_t(req.Session)
	q.has_session = cbool(req.HasSession)
	q.expected_output_tokens = C.uint32_t(req.ExpectedOutputTokens)
	q.flags = C.uint32_t(req.Flags)
	q.now_ns = C.uint64_t(req.Now)
	scores := d.Scores[:0]
	wantScores := req.Flags&RouteScores != 0

	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	if wantScores && cap(scores) == 0 {
		n := int(C.lr_router_instance_count(h))
		if n == 0 {
			n = 1
		}
		scores = make([]Score, 0, n)
	}
	var dec C.lr_decision
	// Instances added by other goroutines between a short call and its
	// retry can make the retry short too; a few rounds settle it.
	for try := 0; ; try++ {
		C.lr_decision_init(&dec)
		var sp *C.lr_score
		if wantScores {
			scores = scores[:cap(scores)]
			sp = (*C.lr_score)(unsafe.Pointer(&scores[0]))
			dec.scores_capacity = C.size_t(len(scores))
		}
		st := C.lrgo_router_route(h, &q, u32ptr(req.Tokens), u32ptr(req.Boundaries), sp, &dec)
		if st == C.LR_EBUFSIZE && wantScores && try < 8 {
			scores = make([]Score, 0, int(dec.n_scores))
			continue
		}
		if err := check(st, op); err != nil {
			return err
		}
		break
	}
	d.Instance = InstanceID(dec.instance)
	d.Reason = Reason(dec.reason)
	d.CachedTokens = uint32(dec.cached_tokens)
	d.BestCachedTokens = uint32(dec.best_cached_tokens)
	d.Cost = float64(dec.cost)
	d.AltInstance = InstanceID(dec.alt_instance)
	if wantScores {
		d.Scores = scores[:int(dec.n_scores)]
	} else {
		d.Scores = scores
	}
	return nil
}

// FirstToken reports a request's first token: it leaves the queue. A
// repeat is a no-op; an unknown or ended request is ErrNotFound.
func (r *Router) FirstToken(requestID, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_first_token(h, C.uint64_t(requestID), C.uint64_t(now)),
		"lr_router_first_token")
}

// Complete reports that a request finished with outputTokens generated.
func (r *Router) Complete(requestID uint64, outputTokens uint32, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_complete(h, C.uint64_t(requestID), C.uint32_t(outputTokens),
		C.uint64_t(now)), "lr_router_complete")
}

// Fail reports that a request failed or was cancelled.
func (r *Router) Fail(requestID, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_fail(h, C.uint64_t(requestID), C.uint64_t(now)), "lr_router_fail")
}

// Move is one proposed move of a queued request to its other candidate.
type Move struct {
	RequestID uint64
	From, To  InstanceID
	// Expected TTFT saved, in seconds.
	BenefitSeconds float64
}

// Move is passed to C as an lr_move array: the layouts must agree.
var (
	_ [unsafe.Sizeof(Move{}) - C.sizeof_lr_move]struct{}
	_ [C.sizeof_lr_move - unsafe.Sizeof(Move{})]struct{}
	_ [unsafe.Offsetof(Move{}.From) - unsafe.Offsetof(C.lr_move{}.from)]struct{}
	_ [unsafe.Offsetof(C.lr_move{}.from) - unsafe.Offsetof(Move{}.From)]struct{}
	_ [unsafe.Offsetof(Move{}.To) - unsafe.Offsetof(C.lr_move{}.to)]struct{}
	_ [unsafe.Offsetof(C.lr_move{}.to) - unsafe.Offsetof(Move{}.To)]struct{}
	_ [unsafe.Offsetof(Move{}.BenefitSeconds) - unsafe.Offsetof(C.lr_move{}.benefit_s)]struct{}
	_ [unsafe.Offsetof(C.lr_move{}.benefit_s) - unsafe.Offsetof(Move{}.BenefitSeconds)]struct{}
)

// RebalancePlan proposes moves of queued requests off instances whose
// expected TTFT breaks the SLO. It changes nothing: the host carries out
// the moves it wants and reports each with Move.
func (r *Router) RebalancePlan(now uint64) ([]Move, error) {
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	// A plan moves each request at most once, so the requests in flight
	// bound it. The C call cannot say that it ran out of room, so a full
	// buffer is retried with a larger one (requests may arrive meanwhile).
	var s C.lr_router_stats
	C.lr_router_stats_init(&s)
	if err := check(C.lr_router_get_stats(h, &s), "lr_router_get_stats"); err != nil {
		return nil, err
	}
	moves := make([]Move, int(s.inflight)+1)
	for {
		var n C.size_t
		if err := check(C.lr_router_rebalance_plan(h, C.uint64_t(now),
			(*C.lr_move)(unsafe.Pointer(&moves[0])), C.size_t(len(moves)), &n),
			"lr_router_rebalance_plan"); err != nil {
			return nil, err
		}
		if int(n) < len(moves) {
			return moves[:n:n], nil
		}
		moves = make([]Move, 2*len(moves))
	}
}

// Move records that the host moved a queued request to instance to.
func (r *Router) Move(requestID uint64, to InstanceID) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_move(h, C.uint64_t(requestID), C.uint32_t(to)), "lr_router_move")
}

// SetParam sets a parameter. Out of bounds is ErrRange (never clamped),
// NaN ErrInvalid, an unknown key ErrNotSupported.
func (r *Router) SetParam(key Param, value float64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_set_param(h, C.lr_param(key), C.double(value)),
		"lr_router_set_param")
}

// Param reads a parameter (for the GORGO weights, the tuned value).
func (r *Router) Param(key Param) (float64, error) {
	h, err := r.acquire()
	if err != nil {
		return 0, err
	}
	defer r.mu.RUnlock()
	var v C.double
	if err := check(C.lr_router_get_param(h, C.lr_param(key), &v), "lr_router_get_param"); err != nil {
		return 0, err
	}
	return float64(v), nil
}

// KVStored applies an engine's BlockStored event for instance id.
func (r *Router) KVStored(id InstanceID, ev *KVStored, now uint64) error {
	e := ev.c()
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	st := C.lrgo_router_kv_stored(h, C.uint32_t(id), &e, u64ptr(ev.BlockHashes),
		u32ptr(ev.TokenIDs), C.uint64_t(now))
	return check(st, "lr_router_kv_stored")
}

// KVRemoved applies an engine's BlockRemoved event and returns how many of
// the hashes were known.
func (r *Router) KVRemoved(id InstanceID, blockHashes []uint64) (resolved int, err error) {
	h, err := r.acquire()
	if err != nil {
		return 0, err
	}
	defer r.mu.RUnlock()
	var n C.size_t
	st := C.lr_router_kv_removed(h, C.uint32_t(id), u64ptr(blockHashes),
		C.size_t(len(blockHashes)), &n)
	if err := check(st, "lr_router_kv_removed"); err != nil {
		return 0, err
	}
	return int(n), nil
}

// KVCleared applies an engine's AllBlocksCleared event.
func (r *Router) KVCleared(id InstanceID) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_kv_cleared(h, C.uint32_t(id)), "lr_router_kv_cleared")
}

// Mark returns the position of the router index's learn journal, for a
// later ExportDelta (0 after Close).
func (r *Router) Mark() uint64 {
	h, err := r.acquire()
	if err != nil {
		return 0
	}
	defer r.mu.RUnlock()
	return uint64(C.lr_router_mark(h))
}

// ExportDelta returns what was learned locally since the mark sinceMark (0:
// everything) as bytes for other gateway replicas, and the mark to pass
// next time.
func (r *Router) ExportDelta(sinceMark uint64) (delta []byte, mark uint64, err error) {
	h, err := r.acquire()
	if err != nil {
		return nil, 0, err
	}
	defer r.mu.RUnlock()
	var b *C.lr_blob
	var m C.uint64_t
	if err := check(C.lr_router_export_delta(h, C.uint64_t(sinceMark), &b, &m),
		"lr_router_export_delta"); err != nil {
		return nil, 0, err
	}
	return blobBytes(b), uint64(m), nil
}

// ImportDelta applies a delta from another replica as REMOTE routes.
// Routes naming ids this router does not have are skipped.
func (r *Router) ImportDelta(delta []byte, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_import_delta(h, bytesPtr(delta), C.size_t(len(delta)), C.uint64_t(now)),
		"lr_router_import_delta")
}

// Expire drops the routes unused for longer than the index TTL. Route does
// this too; an idle host may call it from a timer.
func (r *Router) Expire(now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_expire(h, C.uint64_t(now)), "lr_router_expire")
}

// LearnStep runs one step of Lodestar's learner on the calling goroutine
// (Learner.Step): it takes the samples routes produced and, when enough
// have arrived (or with LearnForce, whenever there is any), trains and
// publishes a new model. Call it from a background goroutine every few
// hundred milliseconds. It trains outside the router's mutex, so Route on
// other goroutines never waits for it (the binding's lock is shared, too);
// only Close waits for it. A step racing another step on the same router
// gets ErrState, as does a router that never chose PolicyLodestar.
func (r *Router) LearnStep(flags LearnFlags) (trained bool, err error) {
	h, err := r.acquire()
	if err != nil {
		return false, err
	}
	defer r.mu.RUnlock()
	var t C.int32_t
	if err := check(C.lr_router_learn_step(h, C.uint32_t(flags), &t),
		"lr_router_learn_step"); err != nil {
		return false, err
	}
	return t != 0, nil
}

// LearnerSamples copies the samples the learner's next round would train
// on, LodestarFeatures values per row. ErrState with no learner or while a
// step runs.
func (r *Router) LearnerSamples() (LearnerSamples, error) {
	h, err := r.acquire()
	if err != nil {
		return LearnerSamples{}, err
	}
	defer r.mu.RUnlock()
	return samples(LodestarFeatures, "lr_router_learner_samples",
		func(x, y *C.float, capacity C.size_t, n *C.size_t) C.lr_status {
			return C.lr_router_learner_samples(h, x, y, capacity, n)
		})
}

// LearnerStats returns the counters of Lodestar's learner; ErrState until
// PolicyLodestar has been chosen once.
func (r *Router) LearnerStats() (LearnerStats, error) {
	h, err := r.acquire()
	if err != nil {
		return LearnerStats{}, err
	}
	defer r.mu.RUnlock()
	var s C.lr_learner_stats
	C.lr_learner_stats_init(&s)
	if err := check(C.lr_router_learner_stats(h, &s), "lr_router_learner_stats"); err != nil {
		return LearnerStats{}, err
	}
	return learnerStats(&s), nil
}

// RouterStats.ByReason copies lr_router_stats.by_reason: the lengths must
// agree (each line fails to compile otherwise).
var (
	_ [len(RouterStats{}.ByReason) - len(C.lr_router_stats{}.by_reason)]struct{}
	_ [len(C.lr_router_stats{}.by_reason) - len(RouterStats{}.ByReason)]struct{}
)

// RouterStats are the router's counters.
type RouterStats struct {
	Routes    uint64 // decisions recorded
	DryRuns   uint64 // decisions only asked for
	Inflight  uint64 // requests in flight now
	Instances uint64 // instances now, draining included
	Routable  uint64 // of which not draining
	// Decisions by Reason (indexed by its value).
	ByReason [16]uint64
	// Prompt tokens routed and tokens expected to hit the cache.
	PromptTokens uint64
	CachedTokens uint64
}

// Stats returns the router's counters.
func (r *Router) Stats() (RouterStats, error) {
	h, err := r.acquire()
	if err != nil {
		return RouterStats{}, err
	}
	defer r.mu.RUnlock()
	var s C.lr_router_stats
	C.lr_router_stats_init(&s)
	if err := check(C.lr_router_get_stats(h, &s), "lr_router_get_stats"); err != nil {
		return RouterStats{}, err
	}
	out := RouterStats{
		Routes:       uint64(s.routes),
		DryRuns:      uint64(s.dry_runs),
		Inflight:     uint64(s.inflight),
		Instances:    uint64(s.instances),
		Routable:     uint64(s.routable),
		PromptTokens: uint64(s.prompt_tokens),
		CachedTokens: uint64(s.cached_tokens),
	}
	for i := range out.ByReason {
		out.ByReason[i] = uint64(s.by_reason[i])
	}
	return out, nil
}
