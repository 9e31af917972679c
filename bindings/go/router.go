package libroute

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"time"
	"unsafe"
)

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
	// Keys the router's hash tables against flooding; 0: a random one
	// from the operating system. Independent of Seed; set it only to
	// reproduce a table layout.
	HashSeed uint64
	// Lodestar's learner (buffers, schedule, network); nil: the library's
	// defaults. NFeatures must be 0 or LodestarFeatureCount(); Seed is ignored
	// (the router's seeds it). Copied at create; the learner is made when
	// PolicyLodestar is first chosen.
	Learner *LearnerOptions
	// This gateway replica's id, stamped on its deltas and gauges (0:
	// none); give each process incarnation its own (a random number).
	ReplicaID uint64
	// REMOTE routes (other replicas' deltas) unused this long expire; 0:
	// IndexTTL.
	RemoteTTL time.Duration
	// Other replicas' gauges count this long after they arrive.
	GaugeTTL time.Duration
	// Other replicas tracked at once (their delta marks and gauges).
	MaxPeers uint32
	// The index's eviction; EvictLRU for replicas sharing deltas.
	IndexEviction Eviction
	// The waiting queue (RouteMayWait): requests held at once (at most
	// RouterMaxWaiting), their prompt tokens held at once (at most
	// RouterMaxQueueTokens), and tenants whose fair share is kept (at
	// most RouterMaxTenants). Taken at the first request that waits.
	QueueCapacity uint32
	QueueTenants  uint32
	QueueTokens   uint64
	// How many routed prompts' instances to remember past the index
	// (0: none; at most RouterMaxMarks): about the fleet's KV blocks over
	// the blocks a request adds.
	Marks uint64
}

// Bounds of the waiting queue's options and of Request.Urgency.
const (
	RouterMaxWaiting     = C.LR_ROUTER_MAX_WAITING
	RouterMaxTenants     = C.LR_ROUTER_MAX_TENANTS
	RouterMaxQueueTokens = C.LR_ROUTER_MAX_QUEUE_TOKENS
	RouterMaxMarks       = C.LR_ROUTER_MAX_MARKS
	// Urgencies is the number of priority bands: Request.Urgency is 0
	// (the most urgent) .. Urgencies-1.
	Urgencies = C.LR_ROUTER_URGENCIES
)

// Bounds of model and adapter names (InstanceSpec.Models, Request.Model,
// Request.Adapter, AdapterStats): bytes in a name, models one instance
// serves, and adapter slots the router follows per instance.
const (
	RouterMaxName     = C.LR_ROUTER_MAX_NAME
	RouterMaxModels   = C.LR_ROUTER_MAX_MODELS
	RouterMaxAdapters = C.LR_ROUTER_MAX_ADAPTERS
)

// DefaultRouterOptions returns the library's defaults
// (lr_router_options_init).
func DefaultRouterOptions() RouterOptions {
	var o C.lr_router_options
	C.lr_router_options_init_sized(&o, C.sizeof_lr_router_options)
	return RouterOptions{
		Policy:              Policy(o.policy),
		Seed:                uint64(o.seed),
		MaxInstances:        uint32(o.max_instances),
		MaxRequests:         uint32(o.max_requests),
		BlockTokens:         uint32(o.block_tokens),
		IndexCapacityBlocks: uint64(o.index_capacity_blocks),
		IndexTTL:            nsDuration(o.index_ttl_ns),
		RingVnodes:          uint32(o.ring_vnodes),
		GaugeTTL:            nsDuration(o.gauge_ttl_ns),
		MaxPeers:            uint32(o.max_peers),
		QueueCapacity:       uint32(o.queue_capacity),
		QueueTenants:        uint32(o.queue_tenants),
		QueueTokens:         uint64(o.queue_tokens),
		Marks:               uint64(o.marks),
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
		C.lr_router_options_init_sized(&o, C.sizeof_lr_router_options)
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
		o.hash_seed = C.uint64_t(opt.HashSeed)
		o.replica_id = C.uint64_t(opt.ReplicaID)
		rttl, ok1 := durationNs(opt.RemoteTTL)
		gttl, ok2 := durationNs(opt.GaugeTTL)
		if !ok1 || !ok2 {
			return nil, invalid("lr_router_create")
		}
		o.remote_ttl_ns = rttl
		o.gauge_ttl_ns = gttl
		o.max_peers = C.uint32_t(opt.MaxPeers)
		o.index_eviction = C.int32_t(opt.IndexEviction)
		o.queue_capacity = C.uint32_t(opt.QueueCapacity)
		o.queue_tenants = C.uint32_t(opt.QueueTenants)
		o.queue_tokens = C.uint64_t(opt.QueueTokens)
		o.marks = C.uint64_t(opt.Marks)
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
	return check(C.lr_router_set_policy(h, C.int32_t(p)), "lr_router_set_policy")
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
	// The models it serves (vLLM's served model names: a base model and
	// its aliases; at most RouterMaxModels of 1..RouterMaxName bytes,
	// copied). A request that names a model goes only to the instances
	// that serve it. None: it serves whatever a request names.
	Models []string
	// Its LoRA adapter slots (vLLM's --max-loras), at most
	// RouterMaxAdapters (ErrRange above); 0: not known.
	MaxAdapters uint32
	// Its part in a disaggregated fleet (RoleBoth, the zero value,
	// RolePrefill or RoleDecode; another value is ErrInvalid). With
	// prefill instances routable, Route may split a request
	// (Decision.PrefillInstance).
	Role Role
	// Where it runs, as the host numbers its nodes, racks and regions (0:
	// unknown): two instances on the same nonzero node move KV at
	// ParamKVGBpsNode, in the same rack at ParamKVGBpsRack, in the same
	// region at ParamKVGBpsRegion, else at ParamKVGBpsWAN; an unknown one
	// compares as different from everything but counts as the same region.
	Node, Rack, Region uint32
}

// AddInstance adds an instance, which receives routes at once, and returns
// the id the router gave it.
func (r *Router) AddInstance(spec InstanceSpec) (InstanceID, error) {
	const op = "lr_router_add_instance"
	if spec.RTT < 0 {
		return InstanceNone, invalid(op)
	}
	if len(spec.Models) > RouterMaxModels {
		return InstanceNone, invalid(op)
	}
	name, err := cstring(spec.Name, op)
	if err != nil {
		return InstanceNone, err
	}
	defer freeCString(name)
	models, freeModels, err := cstrings(spec.Models, op)
	if err != nil {
		return InstanceNone, err
	}
	defer freeModels()
	var s C.lr_instance_spec
	C.lr_instance_spec_init_sized(&s, C.sizeof_lr_instance_spec)
	s.name = name
	s.instance_class = C.uint32_t(spec.Class)
	s.prefix_caching = cbool(!spec.NoPrefixCaching)
	s.rtt_ns = C.uint64_t(spec.RTT)
	s.models = models
	s.n_models = C.uint32_t(len(spec.Models))
	s.max_adapters = C.uint32_t(spec.MaxAdapters)
	s.role = C.int32_t(spec.Role)
	s.node = C.uint32_t(spec.Node)
	s.rack = C.uint32_t(spec.Rack)
	s.region = C.uint32_t(spec.Region)
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
	C.lr_class_spec_init_sized(&s, C.sizeof_lr_class_spec)
	return ClassSpec{PrefillTokensPerSecond: float64(s.prefill_tokens_per_s)}
}

// SetClass sets the speed of an instance class.
func (r *Router) SetClass(class uint32, spec ClassSpec) error {
	var s C.lr_class_spec
	C.lr_class_spec_init_sized(&s, C.sizeof_lr_class_spec)
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

// AdapterStats are an instance's LoRA adapters as its engine reports them:
// vLLM's vllm:lora_requests_info gauge, whose labels running_lora_adapters
// and waiting_lora_adapters list them comma-separated (one name per entry
// here) and max_lora its slots.
type AdapterStats struct {
	// Adapters with requests running there, and waiting there (to load,
	// or for a slot): all resident. 1..RouterMaxName bytes each, at most
	// RouterMaxAdapters in all.
	Running, Waiting []string
	// Its slots (max_lora); 0 keeps what the instance was added with.
	MaxAdapters uint32
	// When the gauge was read, host clock nanoseconds.
	Scraped uint64
}

// SetAdapters tells the router which LoRA adapters an instance holds
// (lr_router_set_adapters): the engine's word replaces the router's own
// guess (each route of an adapter's request makes it resident there). A
// name empty or too long, or too many names, is ErrInvalid; an unknown
// instance ErrNotFound. On failure nothing changes.
func (r *Router) SetAdapters(id InstanceID, stats AdapterStats) error {
	const op = "lr_router_set_adapters"
	if len(stats.Running)+len(stats.Waiting) > RouterMaxAdapters {
		return invalid(op)
	}
	running, freeRunning, err := cstrings(stats.Running, op)
	if err != nil {
		return err
	}
	defer freeRunning()
	waiting, freeWaiting, err := cstrings(stats.Waiting, op)
	if err != nil {
		return err
	}
	defer freeWaiting()
	var s C.lr_adapter_stats
	C.lr_adapter_stats_init_sized(&s, C.sizeof_lr_adapter_stats)
	s.running = running
	s.n_running = C.size_t(len(stats.Running))
	s.waiting = waiting
	s.n_waiting = C.size_t(len(stats.Waiting))
	s.max_adapters = C.uint32_t(stats.MaxAdapters)
	s.scraped_ns = C.uint64_t(stats.Scraped)
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_set_adapters(h, C.uint32_t(id), &s), op)
}

// Adapters returns the LoRA adapters the router believes resident on an
// instance now, most recently used first, as their name hashes (NameHash)
// (lr_router_adapters). ErrNotFound for an unknown instance.
func (r *Router) Adapters(id InstanceID) ([]uint64, error) {
	const op = "lr_router_adapters"
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	hashes := make([]uint64, 8)
	for {
		var n C.size_t
		st := C.lr_router_adapters(h, C.uint32_t(id), u64ptr(hashes), C.size_t(len(hashes)), &n)
		if st == C.LR_EBUFSIZE && int(n) > len(hashes) {
			hashes = make([]uint64, int(n))
			continue
		}
		if err := check(st, op); err != nil {
			return nil, err
		}
		return hashes[:n:n], nil
	}
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
	C.lr_load_snapshot_init_sized(&s, C.sizeof_lr_load_snapshot)
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
	// RouteMayWait lets the router hold the request in its queue when the
	// fleet is saturated or requests at least as urgent wait: Route then
	// returns InstanceNone with ReasonWaiting, and Dispatch lets it out.
	RouteMayWait RouteFlags = C.LR_ROUTE_MAY_WAIT
	// RouteSheddable refuses such a request with ErrBusy instead.
	RouteSheddable RouteFlags = C.LR_ROUTE_SHEDDABLE
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
	// The tenant whose fair share of the waiting queue the request counts
	// against (any value, 0 included); unlike TenantSalt it does not
	// separate cached prefixes.
	Tenant uint64
	// The request's TTFT deadline on the host's clock, nanoseconds (0:
	// none): still waiting then, Dispatch returns it with ErrExpired.
	// adaptive routes it where it is predicted to meet it (the policy's
	// PolicyInput.TTFTBudgetSeconds; ParamAdaptiveDeadline).
	Deadline uint64
	// Its priority band in the waiting queue, RFC 9218's urgency: 0 (the
	// most urgent) .. Urgencies-1.
	Urgency uint32
	// The model it names (at most RouterMaxName bytes; "": any): only the
	// instances that serve it (InstanceSpec.Models) are candidates, and
	// ErrNotFound when none does.
	Model string
	// The LoRA adapter it runs under (at most RouterMaxName bytes; "":
	// the base model). It enters every prefix key: an adapter's cached
	// prefixes never match the base model's or another adapter's.
	Adapter string
	// Its multimodal inputs (images, audio), as Prompt.MM: their keys
	// enter the blocks their placeholder tokens overlap, as vLLM's do, so
	// the request matches the blocks the engine's KV events stored for
	// the same inputs (KVStored.MMHashes) and no others.
	MM []MMInput
}

// names are req's model and adapter for a shim, or ok false when one holds
// a NUL.
func (req *Request) names() (m *C.char, mn C.size_t, a *C.char, an C.size_t, ok bool) {
	m, mn, ok = strBytes(req.Model)
	if !ok {
		return
	}
	a, an, ok = strBytes(req.Adapter)
	return
}

// Route chooses an instance for a request and, unless RouteDryRun, records
// the dispatch and learns the prompt there. With RouteMayWait the router
// may hold the request instead: the decision's Instance is InstanceNone and
// its Reason ReasonWaiting (its other fields zero, Cost NaN); Dispatch lets
// it out later and Fail withdraws it. With RouteSheddable too, a request
// that would wait is refused with ErrBusy.
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
	C.lr_request_init_sized(&q, C.sizeof_lr_request)
	q.id = C.uint64_t(req.ID)
	q.n_tokens = C.size_t(len(req.Tokens))
	q.n_boundaries = C.size_t(len(req.Boundaries))
	q.tenant_salt = C.uint64_t(req.TenantSalt)
	q.session = C.uint64_t(req.Session)
	q.has_session = cbool(req.HasSession)
	q.expected_output_tokens = C.uint32_t(req.ExpectedOutputTokens)
	q.flags = C.uint32_t(req.Flags)
	q.now_ns = C.uint64_t(req.Now)
	q.tenant = C.uint64_t(req.Tenant)
	q.deadline_ns = C.uint64_t(req.Deadline)
	q.urgency = C.uint32_t(req.Urgency)
	model, modelLen, adapter, adapterLen, ok := req.names()
	if !ok {
		return invalid(op)
	}
	mm, err := mmInputs(req.MM, op)
	if err != nil {
		return err
	}
	defer freeMM(mm)
	q.mm = mm
	q.n_mm = C.size_t(len(req.MM))
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
		C.lr_decision_init_sized(&dec, C.sizeof_lr_decision)
		var sp *C.lr_score
		if wantScores {
			scores = scores[:cap(scores)]
			sp = (*C.lr_score)(unsafe.Pointer(&scores[0]))
			dec.scores_capacity = C.size_t(len(scores))
			dec.score_size = C.size_t(unsafe.Sizeof(Score{}))
		}
		st := C.lrgo_router_route(h, &q, u32ptr(req.Tokens), u32ptr(req.Boundaries),
			model, modelLen, adapter, adapterLen, sp, &dec)
		if st == C.LR_EBUFSIZE && wantScores && try < 8 {
			scores = make([]Score, 0, int(dec.n_scores))
			continue
		}
		if err := check(st, op); err != nil {
			return err
		}
		break
	}
	d.fill(&dec)
	if wantScores {
		d.Scores = scores[:int(dec.n_scores)]
	} else {
		d.Scores = scores
	}
	return nil
}

// PrefillDone reports that the prefill leg of a split request
// (Decision.PrefillInstance) ended: its KV has moved to the decode
// instance (vLLM: the prefill request returned its kv_transfer_params).
// The prefill instance's load drops it, and the prefill's time feeds the
// policies that learn from it. A request that was not split, or whose leg
// ended before, is a no-op; an unknown or ended request is ErrNotFound. A
// first token ends the leg too.
func (r *Router) PrefillDone(requestID, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_prefill_done(h, C.uint64_t(requestID), C.uint64_t(now)),
		"lr_router_prefill_done")
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

// ObserveCached reports how many prompt tokens the request's engine
// reused from its cache (llama.cpp's timings.cache_n, vLLM's
// usage.prompt_tokens_details.cached_tokens), in the router's tokens.
// Once per request, before Complete or Fail; a repeat changes nothing.
// The router keeps, per instance, the share of its expected hits the
// engine did not deliver (Candidate.CachedLost), which adaptive discounts.
func (r *Router) ObserveCached(requestID uint64, cachedTokens uint32, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_observe_cached(h, C.uint64_t(requestID), C.uint32_t(cachedTokens),
		C.uint64_t(now)), "lr_router_observe_cached")
}

// Fail reports that a request failed or was cancelled. A request waiting
// in the router's queue (RouteMayWait) is withdrawn: it is never
// dispatched.
func (r *Router) Fail(requestID, now uint64) error {
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return check(C.lr_router_fail(h, C.uint64_t(requestID), C.uint64_t(now)), "lr_router_fail")
}

// Dispatched is one request Dispatch let out of the waiting queue
// (lr_dispatched). Whatever its Status, it has left the queue.
type Dispatched struct {
	RequestID uint64
	// StatusOK: routed now and recorded in flight at Instance; send it.
	// StatusExpired: its Deadline passed while it waited; answer it (429,
	// 504). StatusExist: its id came in flight meanwhile; it is dropped.
	// Err gives the same as an error.
	Status Status
	// The instance; InstanceNone unless Status is StatusOK.
	Instance InstanceID
	// The decision's reason, cached tokens and predicted cost (NaN if
	// the policy predicts none), as Decision's.
	Reason       Reason
	CachedTokens uint32
	Cost         float64
	// How long it waited: Dispatch's now minus its Route's Request.Now.
	Waited time.Duration
	// Its Request.Urgency and Request.Tenant.
	Urgency uint32
	Tenant  uint64
	// The decision's prefill leg, as Decision's: the instance that
	// prefills it when the router split it (InstanceNone: Instance does
	// both; send it there first, then to Instance, and call PrefillDone
	// when the first leg returns), why that one (ReasonWhole when a fleet
	// that could split kept it whole, -1 when no candidate was a prefill
	// instance), its expected hit there and the KV transfer's expected
	// seconds (0 when not split).
	PrefillInstance     InstanceID
	PrefillReason       Reason
	PrefillCachedTokens uint32
	_                   uint32 // reserved
	TransferSeconds     float64
}

// Err returns nil if the request was routed (StatusOK), else an *Error
// matching ErrExpired or ErrExist.
func (d *Dispatched) Err() error {
	return check(C.lr_status(d.Status), "lr_router_dispatch")
}

// Dispatched is passed to C as an lr_dispatched array: the layouts must
// agree (each line fails to compile otherwise).
var (
	_ [unsafe.Sizeof(Dispatched{}) - C.sizeof_lr_dispatched]struct{}
	_ [C.sizeof_lr_dispatched - unsafe.Sizeof(Dispatched{})]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Status) - unsafe.Offsetof(C.lr_dispatched{}.status)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.status) - unsafe.Offsetof(Dispatched{}.Status)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Instance) - unsafe.Offsetof(C.lr_dispatched{}.instance)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.instance) - unsafe.Offsetof(Dispatched{}.Instance)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Reason) - unsafe.Offsetof(C.lr_dispatched{}.reason)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.reason) - unsafe.Offsetof(Dispatched{}.Reason)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.CachedTokens) - unsafe.Offsetof(C.lr_dispatched{}.cached_tokens)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.cached_tokens) - unsafe.Offsetof(Dispatched{}.CachedTokens)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Cost) - unsafe.Offsetof(C.lr_dispatched{}.cost)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.cost) - unsafe.Offsetof(Dispatched{}.Cost)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Waited) - unsafe.Offsetof(C.lr_dispatched{}.waited_ns)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.waited_ns) - unsafe.Offsetof(Dispatched{}.Waited)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Urgency) - unsafe.Offsetof(C.lr_dispatched{}.urgency)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.urgency) - unsafe.Offsetof(Dispatched{}.Urgency)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.Tenant) - unsafe.Offsetof(C.lr_dispatched{}.tenant)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.tenant) - unsafe.Offsetof(Dispatched{}.Tenant)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.PrefillInstance) - unsafe.Offsetof(C.lr_dispatched{}.prefill_instance)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.prefill_instance) - unsafe.Offsetof(Dispatched{}.PrefillInstance)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.PrefillReason) - unsafe.Offsetof(C.lr_dispatched{}.prefill_reason)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.prefill_reason) - unsafe.Offsetof(Dispatched{}.PrefillReason)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.PrefillCachedTokens) - unsafe.Offsetof(C.lr_dispatched{}.prefill_cached_tokens)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.prefill_cached_tokens) - unsafe.Offsetof(Dispatched{}.PrefillCachedTokens)]struct{}
	_ [unsafe.Offsetof(Dispatched{}.TransferSeconds) - unsafe.Offsetof(C.lr_dispatched{}.transfer_s)]struct{}
	_ [unsafe.Offsetof(C.lr_dispatched{}.transfer_s) - unsafe.Offsetof(Dispatched{}.TransferSeconds)]struct{}
)

// dispatchChunk is how many entries Dispatch asks for per C call.
const dispatchChunk = 64

// Dispatch lets waiting requests out of the queue (lr_router_dispatch):
// call it whenever capacity may have freed (a first token, a completion, a
// scrape, a timer). First come those whose deadline is at or before now
// (StatusExpired, earliest first), then, while the fleet is not saturated,
// the next by urgency, fair share between tenants and arrival, each routed
// now as Route would route it (StatusOK: send it to its Instance, through
// its PrefillInstance first when the router split it). It
// returns every request that may go now. On an error (ErrNoMem: that
// request stays waiting) the entries returned with it have left the queue
// too and must be handled.
func (r *Router) Dispatch(now uint64) ([]Dispatched, error) {
	var out []Dispatched
	buf := make([]Dispatched, dispatchChunk)
	for {
		n, err := r.DispatchInto(now, buf)
		out = append(out, buf[:n]...)
		if err != nil || n < len(buf) {
			return out, err
		}
	}
}

// DispatchInto is Dispatch letting at most len(out) requests out, into
// out; it returns how many it wrote. While it fills out, more may be
// waiting to go: call it again. On an error, the n entries written have
// left the queue and must be handled.
func (r *Router) DispatchInto(now uint64, out []Dispatched) (int, error) {
	h, err := r.acquire()
	if err != nil {
		return 0, err
	}
	defer r.mu.RUnlock()
	var p *C.lr_dispatched
	if len(out) > 0 {
		p = (*C.lr_dispatched)(unsafe.Pointer(&out[0]))
	}
	var n C.size_t
	st := C.lr_router_dispatch(h, C.uint64_t(now), p, C.size_t(len(out)),
		C.size_t(unsafe.Sizeof(Dispatched{})), &n)
	return int(n), check(st, "lr_router_dispatch")
}

// Saturated reports whether the fleet is saturated now, as Route and
// Dispatch judge it (true with no routable instance): every routable
// instance has ParamSaturationQueue of the router's requests waiting for
// their first token, or a fresh scrape reporting that many waiting or
// ParamSaturationKV of its KV cache in use. It changes nothing.
func (r *Router) Saturated(now uint64) (bool, error) {
	h, err := r.acquire()
	if err != nil {
		return false, err
	}
	defer r.mu.RUnlock()
	var s C.int32_t
	if err := check(C.lr_router_saturated(h, C.uint64_t(now), &s), "lr_router_saturated"); err != nil {
		return false, err
	}
	return s != 0, nil
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
	C.lr_router_stats_init_sized(&s, C.sizeof_lr_router_stats)
	if err := check(C.lr_router_get_stats(h, &s), "lr_router_get_stats"); err != nil {
		return nil, err
	}
	moves := make([]Move, int(s.inflight)+1)
	for {
		var n C.size_t
		if err := check(C.lr_router_rebalance_plan(h, C.uint64_t(now),
			(*C.lr_move)(unsafe.Pointer(&moves[0])), C.size_t(len(moves)),
			C.size_t(unsafe.Sizeof(Move{})), &n),
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
	return check(C.lr_router_set_param(h, C.int32_t(key), C.double(value)),
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
	if err := check(C.lr_router_get_param(h, C.int32_t(key), &v), "lr_router_get_param"); err != nil {
		return 0, err
	}
	return float64(v), nil
}

// Params returns every parameter's value, indexed by Param (ParamCount()
// of them), as Param reads them. For the GORGO weights it is the
// incumbent, which during a tuner trial differs from the weights in
// service: replay routes with PolicyInput's Params.
func (r *Router) Params() ([]float64, error) {
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	out := make([]float64, int(C.lr_param_count()))
	for k := range out {
		var v C.double
		if err := check(C.lr_router_get_param(h, C.int32_t(k), &v),
			"lr_router_get_param"); err != nil {
			return nil, err
		}
		out[k] = float64(v)
	}
	return out, nil
}

// KVStored applies an engine's BlockStored event for instance id.
func (r *Router) KVStored(id InstanceID, ev *KVStored, now uint64) error {
	const op = "lr_router_kv_stored"
	e := ev.c()
	mm, ok := ev.mmHashes()
	if !ok {
		return invalid(op)
	}
	h, err := r.acquire()
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	st := C.lrgo_router_kv_stored(h, C.uint32_t(id), &e, u64ptr(ev.BlockHashes),
		u32ptr(ev.TokenIDs), mm, C.uint64_t(now))
	return check(st, op)
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

// KVRemovedTier applies an engine's BlockRemoved event on one tier
// (lr_router_kv_removed_tier); see Index.KVRemovedTier. ErrNotFound for an
// instance the router does not have.
func (r *Router) KVRemovedTier(id InstanceID, tier Tier, blockHashes []uint64) (resolved int, err error) {
	h, err := r.acquire()
	if err != nil {
		return 0, err
	}
	defer r.mu.RUnlock()
	var n C.size_t
	st := C.lr_router_kv_removed_tier(h, C.uint32_t(id), C.int32_t(tier), u64ptr(blockHashes),
		C.size_t(len(blockHashes)), &n)
	if err := check(st, "lr_router_kv_removed_tier"); err != nil {
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

// LearnerFeatureCount returns the width of the router's learner rows
// (lr_lodestar_feature_count; 0 after Close).
func (r *Router) LearnerFeatureCount() int {
	_, err := r.acquire()
	if err != nil {
		return 0
	}
	defer r.mu.RUnlock()
	return int(C.lr_lodestar_feature_count())
}

// LearnerSamples copies the samples the learner's next round would train
// on, LearnerFeatureCount values per row. ErrState with no learner or while
// a step runs.
func (r *Router) LearnerSamples() (LearnerSamples, error) {
	h, err := r.acquire()
	if err != nil {
		return LearnerSamples{}, err
	}
	defer r.mu.RUnlock()
	width := C.lr_lodestar_feature_count()
	return samples(int(width), "lr_router_learner_samples",
		func(x, y *C.float, capacity C.size_t, n *C.size_t) C.lr_status {
			return C.lr_router_learner_samples(h, x, C.size_t(width), y, capacity, n)
		})
}

// LearnerSave returns Lodestar's model in service, serialized as Mlp.Save
// does (lr_router_learner_save), taking over a newly trained one first as
// Route would. LoadMlp of it scores candidates exactly as Route does: the
// PolicyInput.Model to replay a trained Lodestar router's routes with
// Decide. ErrState with no learner or no model yet.
func (r *Router) LearnerSave() ([]byte, error) {
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	var b *C.lr_blob
	if err := check(C.lr_router_learner_save(h, &b), "lr_router_learner_save"); err != nil {
		return nil, err
	}
	return blobBytes(b), nil
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
	C.lr_learner_stats_init_sized(&s, C.sizeof_lr_learner_stats)
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
	// Decisions by Reason (indexed by its value), for reasons 0..15 only;
	// ReasonCounts has every reason the library has.
	ByReason [16]uint64
	// Prompt tokens routed and tokens expected to hit the cache.
	PromptTokens uint64
	CachedTokens uint64
	// KV-event batches with sequence numbers: applied, ignored as
	// applied before, gaps found, engine restarts, gaps open now.
	KVBatches, KVDuplicates, KVGaps, KVRestarts, KVGapsOpen uint64
	// Deltas exported, imported, skipped on import (applied before, or
	// this router's own), and found lost.
	DeltasExported, DeltasImported, DeltasSkipped, DeltasLost uint64
	// Gauges exported, imported, skipped (older, repeated, own), expired;
	// replicas whose gauge counts now.
	GaugesExported, GaugesImported, GaugesSkipped, GaugesExpired uint64
	PeersLive                                                    uint64
	// ObserveCached reports: requests reported, the tokens the router
	// expected to hit for them, and the tokens their engines reused.
	ObservedReports, ObservedExpectedTokens, ObservedCachedTokens uint64
	// The waiting queue: requests waiting now and their prompt tokens.
	Waiting, WaitingTokens uint64
	// Requests that have waited (Route answered ReasonWaiting), and of
	// those: dispatched, expired, cancelled (Fail), and dropped at
	// dispatch (their id came in flight meanwhile).
	Waited, WaitedDispatched, WaitedExpired, WaitedCancelled uint64
	WaitedDropped                                            uint64
	// Sheddable requests refused (ErrBusy).
	Shed uint64
	// The total time the dispatched ones waited, nanoseconds.
	WaitNs uint64
	// Routes of requests naming a LoRA adapter, and of those the ones sent
	// where the adapter was not resident (a load caused).
	AdapterRoutes, AdapterLoads uint64
}

// Stats returns the router's counters.
func (r *Router) Stats() (RouterStats, error) {
	h, err := r.acquire()
	if err != nil {
		return RouterStats{}, err
	}
	defer r.mu.RUnlock()
	var s C.lr_router_stats
	C.lr_router_stats_init_sized(&s, C.sizeof_lr_router_stats)
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

		KVBatches:      uint64(s.kv_batches),
		KVDuplicates:   uint64(s.kv_duplicates),
		KVGaps:         uint64(s.kv_gaps),
		KVRestarts:     uint64(s.kv_restarts),
		KVGapsOpen:     uint64(s.kv_gaps_open),
		DeltasExported: uint64(s.deltas_exported),
		DeltasImported: uint64(s.deltas_imported),
		DeltasSkipped:  uint64(s.deltas_skipped),
		DeltasLost:     uint64(s.deltas_lost),
		GaugesExported: uint64(s.gauges_exported),
		GaugesImported: uint64(s.gauges_imported),
		GaugesSkipped:  uint64(s.gauges_skipped),
		GaugesExpired:  uint64(s.gauges_expired),
		PeersLive:      uint64(s.peers_live),

		ObservedReports:        uint64(s.observed_reports),
		ObservedExpectedTokens: uint64(s.observed_expected_tokens),
		ObservedCachedTokens:   uint64(s.observed_cached_tokens),

		Waiting:          uint64(s.waiting),
		WaitingTokens:    uint64(s.waiting_tokens),
		Waited:           uint64(s.waited),
		WaitedDispatched: uint64(s.waited_dispatched),
		WaitedExpired:    uint64(s.waited_expired),
		WaitedCancelled:  uint64(s.waited_cancelled),
		WaitedDropped:    uint64(s.waited_dropped),
		Shed:             uint64(s.shed),
		WaitNs:           uint64(s.wait_ns),

		AdapterRoutes: uint64(s.adapter_routes),
		AdapterLoads:  uint64(s.adapter_loads),
	}
	for i := range out.ByReason {
		out.ByReason[i] = uint64(s.by_reason[i])
	}
	return out, nil
}

// IndexStats returns the counters of the router's prefix index
// (lr_router_index_stats): blocks held, evicted, expired and learned. It
// holds the router's lock while counting engine hashes: call it from a
// metrics scrape, not per request.
func (r *Router) IndexStats() (IndexStats, error) {
	h, err := r.acquire()
	if err != nil {
		return IndexStats{}, err
	}
	defer r.mu.RUnlock()
	var s C.lr_index_stats
	s.struct_size = C.sizeof_lr_index_stats
	if err := check(C.lr_router_index_stats(h, &s), "lr_router_index_stats"); err != nil {
		return IndexStats{}, err
	}
	return indexStats(&s), nil
}

// ReasonCounts returns the decisions recorded by reason, indexed by Reason,
// for every reason the library has (lr_router_reason_counts; ReasonCount()
// entries).
func (r *Router) ReasonCounts() ([]uint64, error) {
	const op = "lr_router_reason_counts"
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	counts := make([]uint64, int(C.lr_reason_count()))
	for {
		var n C.size_t
		st := C.lr_router_reason_counts(h, u64ptr(counts), C.size_t(len(counts)), &n)
		if st == C.LR_EBUFSIZE && int(n) > len(counts) {
			counts = make([]uint64, int(n))
			continue
		}
		if err := check(st, op); err != nil {
			return nil, err
		}
		return counts[:n], nil
	}
}

// Candidates returns the candidate table Route would decide on for req now
// (lr_router_candidates): one row per routable instance, in id order (with
// prefill instances routable, the rows that can decode first, then the
// RolePrefill ones, each part in id order), with the cached tokens its
// policy would see, the ring ranks of its key and each instance's role and
// placement.
// Only the prompt and the request's facts are read (not ID, Boundaries or
// Flags); nothing in the router changes. With a Model, only its instances
// have rows; the adapter columns are the Adapter's. Decide over it with the router's
// policy, PolicyInput and a Route's Decision.Seed makes that route's
// choice. ErrState with no routable instance.
func (r *Router) Candidates(req *Request) ([]Candidate, error) {
	const op = "lr_router_candidates"
	var q C.lr_request
	C.lr_request_init_sized(&q, C.sizeof_lr_request)
	q.id = C.uint64_t(req.ID)
	q.n_tokens = C.size_t(len(req.Tokens))
	q.tenant_salt = C.uint64_t(req.TenantSalt)
	q.session = C.uint64_t(req.Session)
	q.has_session = cbool(req.HasSession)
	q.expected_output_tokens = C.uint32_t(req.ExpectedOutputTokens)
	q.now_ns = C.uint64_t(req.Now)
	model, modelLen, adapter, adapterLen, ok := req.names()
	if !ok {
		return nil, invalid(op)
	}
	mm, err := mmInputs(req.MM, op)
	if err != nil {
		return nil, err
	}
	defer freeMM(mm)
	q.mm = mm
	q.n_mm = C.size_t(len(req.MM))
	h, err := r.acquire()
	if err != nil {
		return nil, err
	}
	defer r.mu.RUnlock()
	rows := make([]Candidate, int(C.lr_router_instance_count(h)))
	for {
		var n C.size_t
		st := C.lrgo_router_candidates(h, &q, u32ptr(req.Tokens), model, modelLen,
			adapter, adapterLen, candidatePtr(rows), C.size_t(len(rows)), candidateSize, &n)
		if st == C.LR_EBUFSIZE && int(n) > len(rows) {
			rows = make([]Candidate, int(n))
			continue
		}
		if err := check(st, op); err != nil {
			return nil, err
		}
		return rows[:n:n], nil
	}
}

// PolicyInput returns the rest of what Route hands the policy for req now
// (lr_router_policy_input), besides the table (Candidates), the seed
// (Decision.Seed) and Lodestar's model (LearnerSave): the prompt length,
// the expected output tokens with the router's default applied, the block
// size, round-robin's cursor (InstanceNone before its first route), every
// parameter in service, indexed by Param, and the TTFT budget (Deadline
// less Now in seconds, 1e-9 once it has passed, 0 without a deadline).
// During a GORGO tuner trial its weights are the trial's, not the
// incumbent Param and Params report.
// Seed is 0 and Model nil: set them, and Decide replays the route. req is
// checked as Route checks it (ErrInvalid); nothing in the router changes.
func (r *Router) PolicyInput(req *Request) (PolicyInput, error) {
	const op = "lr_router_policy_input"
	var q C.lr_request
	C.lr_request_init_sized(&q, C.sizeof_lr_request)
	q.id = C.uint64_t(req.ID)
	q.n_tokens = C.size_t(len(req.Tokens))
	q.n_boundaries = C.size_t(len(req.Boundaries))
	q.tenant_salt = C.uint64_t(req.TenantSalt)
	q.session = C.uint64_t(req.Session)
	q.has_session = cbool(req.HasSession)
	q.expected_output_tokens = C.uint32_t(req.ExpectedOutputTokens)
	q.flags = C.uint32_t(req.Flags)
	q.now_ns = C.uint64_t(req.Now)
	q.tenant = C.uint64_t(req.Tenant)
	q.deadline_ns = C.uint64_t(req.Deadline)
	q.urgency = C.uint32_t(req.Urgency)
	model, modelLen, adapter, adapterLen, ok := req.names()
	if !ok {
		return PolicyInput{}, invalid(op)
	}
	mm, err := mmInputs(req.MM, op)
	if err != nil {
		return PolicyInput{}, err
	}
	defer freeMM(mm)
	q.mm = mm
	q.n_mm = C.size_t(len(req.MM))
	h, err := r.acquire()
	if err != nil {
		return PolicyInput{}, err
	}
	defer r.mu.RUnlock()
	params := make([]float64, int(C.lr_param_count()))
	for {
		var in C.lr_policy_input
		C.lr_policy_input_init_sized(&in, C.sizeof_lr_policy_input)
		st := C.lrgo_router_policy_input(h, &q, u32ptr(req.Tokens), u32ptr(req.Boundaries),
			model, modelLen, adapter, adapterLen, &in, f64ptr(params), C.size_t(len(params)))
		if st == C.LR_EBUFSIZE && int(in.n_params) > len(params) {
			params = make([]float64, int(in.n_params))
			continue
		}
		if err := check(st, op); err != nil {
			return PolicyInput{}, err
		}
		n := int(in.n_params)
		return PolicyInput{
			Params:               params[:n:n],
			PromptTokens:         uint32(in.prompt_tokens),
			ExpectedOutputTokens: uint32(in.expected_output_tokens),
			BlockTokens:          uint32(in.block_tokens),
			LastInstance:         InstanceID(in.last_instance),
			TTFTBudgetSeconds:    float64(in.ttft_budget_s),
		}, nil
	}
}
