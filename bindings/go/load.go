package libroute

/*
#include <libroute.h>
*/
import "C"

import (
	"runtime"
	"time"
)

// EngineStats are an instance's scraped engine metrics.
type EngineStats struct {
	Running uint32  // vllm:num_requests_running
	Waiting uint32  // vllm:num_requests_waiting
	KVUse   float64 // vllm:kv_cache_usage_perc, in [0, 1]
	// Host time of the scrape, nanoseconds.
	ScrapedAt uint64
}

func (s *EngineStats) c() C.lr_engine_stats {
	var e C.lr_engine_stats
	C.lr_engine_stats_init_sized(&e, C.sizeof_lr_engine_stats)
	e.running = C.uint32_t(s.Running)
	e.waiting = C.uint32_t(s.Waiting)
	e.kv_use = C.double(s.KVUse)
	e.scraped_ns = C.uint64_t(s.ScrapedAt)
	return e
}

// LoadSnapshot is an instance's load at one moment.
type LoadSnapshot struct {
	Class         uint32
	PrefixCaching bool
	// Requests dispatched and not ended, and of those the ones with no
	// first token yet.
	Inflight uint32
	Queued   uint32
	// Uncached and whole prompt tokens of the queued requests.
	PrefillTokens uint64
	QueuedTokens  uint64
	// Expected output tokens of the requests past their first token.
	DecodeTokens uint64
	// Prompt + expected output tokens of every request in flight.
	KVTokens uint64
	// The latest scrape, when HasStats.
	HasStats  bool
	Running   uint32
	Waiting   uint32
	KVUse     float64
	ScrapedAt uint64
	// The RTT moving average, when HasRTT.
	HasRTT bool
	RTT    time.Duration
	// Host time of the latest first token here (0: none), and of the queue
	// last going from empty to non-empty.
	LastFirstTokenAt uint64
	QueueSince       uint64
	// Whole prompt tokens of every request in flight.
	PromptTokens uint64
}

func loadSnapshot(s *C.lr_load_snapshot) LoadSnapshot {
	return LoadSnapshot{
		Class:            uint32(s.instance_class),
		PrefixCaching:    s.prefix_caching != 0,
		Inflight:         uint32(s.inflight),
		Queued:           uint32(s.queued),
		PrefillTokens:    uint64(s.prefill_tokens),
		QueuedTokens:     uint64(s.queued_tokens),
		DecodeTokens:     uint64(s.decode_tokens),
		KVTokens:         uint64(s.kv_tokens),
		HasStats:         s.has_stats != 0,
		Running:          uint32(s.running),
		Waiting:          uint32(s.waiting),
		KVUse:            float64(s.kv_use),
		ScrapedAt:        uint64(s.scraped_ns),
		HasRTT:           s.has_rtt != 0,
		RTT:              nsDuration(s.rtt_ns),
		LastFirstTokenAt: uint64(s.last_first_token_ns),
		QueueSince:       uint64(s.queue_since_ns),
		PromptTokens:     uint64(s.prompt_tokens),
	}
}

// LoadOptions are fixed when a Load is created. Zero fields mean the
// library's defaults.
type LoadOptions struct {
	// Instance ids are 0..MaxInstances-1.
	MaxInstances uint32
	// Requests in flight at once.
	MaxRequests uint32
	// Weight of a new RTT sample in the moving average, in (0, 1].
	RTTAlpha float64
}

// Load is a standalone load tracker (lr_load): per-instance counters kept
// exactly from dispatches and lifecycle events. The router has its own;
// this one is for hosts that route by themselves. Not safe for concurrent
// use.
type Load struct {
	p *C.lr_load
}

// NewLoad creates a load tracker; nil options mean the defaults. All its
// memory is reserved here, so no later call fails with ErrNoMem.
func NewLoad(opt *LoadOptions) (*Load, error) {
	var co *C.lr_load_options
	if opt != nil {
		var o C.lr_load_options
		C.lr_load_options_init_sized(&o, C.sizeof_lr_load_options)
		if opt.MaxInstances != 0 {
			o.max_instances = C.uint32_t(opt.MaxInstances)
		}
		if opt.MaxRequests != 0 {
			o.max_requests = C.uint32_t(opt.MaxRequests)
		}
		if opt.RTTAlpha != 0 {
			o.rtt_alpha = C.double(opt.RTTAlpha)
		}
		co = &o
	}
	var p *C.lr_load
	if err := check(C.lr_load_create(co, &p), "lr_load_create"); err != nil {
		return nil, err
	}
	l := &Load{p: p}
	runtime.SetFinalizer(l, (*Load).Close)
	return l, nil
}

// Close destroys the tracker. Closing twice is a no-op.
func (l *Load) Close() error {
	if l.p != nil {
		C.lr_load_destroy(l.p)
		l.p = nil
		runtime.SetFinalizer(l, nil)
	}
	return nil
}

// AddInstance starts tracking an instance.
func (l *Load) AddInstance(id InstanceID, class uint32, prefixCaching bool) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_add_instance(l.p, C.uint32_t(id), C.uint32_t(class), cbool(prefixCaching))
	runtime.KeepAlive(l)
	return check(st, "lr_load_add_instance")
}

// RemoveInstance stops tracking an instance and drops its requests.
func (l *Load) RemoveInstance(id InstanceID) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_remove_instance(l.p, C.uint32_t(id))
	runtime.KeepAlive(l)
	return check(st, "lr_load_remove_instance")
}

// Dispatch is a request handed to an instance.
type Dispatch struct {
	RequestID uint64
	Instance  InstanceID
	// Prompt length, and the tokens expected to hit the cache (<= prompt).
	PromptTokens uint32
	CachedTokens uint32
	// Expected output length; 0 if unknown.
	ExpectedOutputTokens uint32
	// Another instance that could serve it (DualMap's second candidate)
	// and its expected cached tokens, for rebalancing; used when HasAlt.
	HasAlt          bool
	AltInstance     InstanceID
	AltCachedTokens uint32
	// Host time of the dispatch, nanoseconds.
	Now uint64
	// In a disaggregated fleet, the instance that prefills the request
	// before Instance decodes it, its KV moving over, and the tokens
	// expected to hit its cache (<= PromptTokens); used when HasPrefill.
	// Until PrefillDone (or the first token) the prefill instance counts
	// the request in flight and queued, its uncached tokens as prefill and
	// its prompt's KV; Instance counts it in flight and queued, with its
	// KV and decode but no prefill.
	HasPrefill          bool
	PrefillInstance     InstanceID
	PrefillCachedTokens uint32
}

// Dispatch records a dispatch: the request is in flight and queued.
func (l *Load) Dispatch(d *Dispatch) error {
	if l.p == nil {
		return ErrClosed
	}
	var c C.lr_dispatch
	C.lr_dispatch_init_sized(&c, C.sizeof_lr_dispatch)
	c.request_id = C.uint64_t(d.RequestID)
	c.instance = C.uint32_t(d.Instance)
	c.prompt_tokens = C.uint32_t(d.PromptTokens)
	c.cached_tokens = C.uint32_t(d.CachedTokens)
	c.expected_output_tokens = C.uint32_t(d.ExpectedOutputTokens)
	if d.HasAlt {
		c.alt_instance = C.uint32_t(d.AltInstance)
		c.alt_cached_tokens = C.uint32_t(d.AltCachedTokens)
	}
	c.now_ns = C.uint64_t(d.Now)
	if d.HasPrefill {
		c.prefill_instance = C.uint32_t(d.PrefillInstance)
		c.prefill_cached_tokens = C.uint32_t(d.PrefillCachedTokens)
	}
	st := C.lr_load_dispatch(l.p, &c)
	runtime.KeepAlive(l)
	return check(st, "lr_load_dispatch")
}

// PrefillDone records that the prefill leg of a request dispatched with
// HasPrefill ended (its KV has moved to the decode instance): the prefill
// instance stops counting it. A request without a prefill leg, or whose
// leg ended before, is a no-op; one not in flight ErrNotFound.
func (l *Load) PrefillDone(requestID, now uint64) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_prefill_done(l.p, C.uint64_t(requestID), C.uint64_t(now))
	runtime.KeepAlive(l)
	return check(st, "lr_load_prefill_done")
}

// FirstToken records a request's first token (an open prefill leg ends
// with it); a repeat is a no-op.
func (l *Load) FirstToken(requestID, now uint64) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_first_token(l.p, C.uint64_t(requestID), C.uint64_t(now))
	runtime.KeepAlive(l)
	return check(st, "lr_load_first_token")
}

// Complete records that a request ended with outputTokens generated.
func (l *Load) Complete(requestID uint64, outputTokens uint32, now uint64) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_complete(l.p, C.uint64_t(requestID), C.uint32_t(outputTokens), C.uint64_t(now))
	runtime.KeepAlive(l)
	return check(st, "lr_load_complete")
}

// Fail records that a request failed or was cancelled.
func (l *Load) Fail(requestID uint64) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_fail(l.p, C.uint64_t(requestID))
	runtime.KeepAlive(l)
	return check(st, "lr_load_fail")
}

// Move moves a queued request to another instance, with the tokens
// expected to hit the cache there.
func (l *Load) Move(requestID uint64, to InstanceID, cachedTokens uint32) error {
	if l.p == nil {
		return ErrClosed
	}
	st := C.lr_load_move(l.p, C.uint64_t(requestID), C.uint32_t(to), C.uint32_t(cachedTokens))
	runtime.KeepAlive(l)
	return check(st, "lr_load_move")
}

// SetStats replaces an instance's scraped stats (an older scrape than the
// one held is ignored).
func (l *Load) SetStats(id InstanceID, stats EngineStats) error {
	if l.p == nil {
		return ErrClosed
	}
	s := stats.c()
	st := C.lr_load_set_stats(l.p, C.uint32_t(id), &s)
	runtime.KeepAlive(l)
	return check(st, "lr_load_set_stats")
}

// ObserveRTT folds an RTT probe into the instance's moving average.
func (l *Load) ObserveRTT(id InstanceID, rtt time.Duration) error {
	const op = "lr_load_observe_rtt"
	if l.p == nil {
		return ErrClosed
	}
	if rtt < 0 {
		return invalid(op)
	}
	st := C.lr_load_observe_rtt(l.p, C.uint32_t(id), C.uint64_t(rtt))
	runtime.KeepAlive(l)
	return check(st, op)
}

// Get returns an instance's load.
func (l *Load) Get(id InstanceID) (LoadSnapshot, error) {
	if l.p == nil {
		return LoadSnapshot{}, ErrClosed
	}
	var s C.lr_load_snapshot
	C.lr_load_snapshot_init_sized(&s, C.sizeof_lr_load_snapshot)
	st := C.lr_load_get(l.p, C.uint32_t(id), &s)
	runtime.KeepAlive(l)
	if err := check(st, "lr_load_get"); err != nil {
		return LoadSnapshot{}, err
	}
	return loadSnapshot(&s), nil
}

// Inflight returns the requests in flight over all instances.
func (l *Load) Inflight() uint64 {
	if l.p == nil {
		return 0
	}
	n := C.lr_load_inflight(l.p)
	runtime.KeepAlive(l)
	return uint64(n)
}

// Request returns where a request in flight is, and whether it is still
// queued (true) or decoding (false).
func (l *Load) Request(requestID uint64) (id InstanceID, queued bool, err error) {
	if l.p == nil {
		return InstanceNone, false, ErrClosed
	}
	var inst C.uint32_t
	var q C.int32_t
	st := C.lr_load_request(l.p, C.uint64_t(requestID), &inst, &q)
	runtime.KeepAlive(l)
	if err := check(st, "lr_load_request"); err != nil {
		return InstanceNone, false, err
	}
	return InstanceID(inst), q != 0, nil
}
