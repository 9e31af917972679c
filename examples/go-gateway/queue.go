package main

// Requests that wait: the gateway's side of the router's waiting queue
// (include/libroute/lr_router.h, "Waiting"), as the Python gateway's
// waiting.py does it.
//
// A request is routed with RouteMayWait: while the fleet is saturated (or
// requests at least as urgent wait already) the router holds it and
// answers ReasonWaiting. Its handler then blocks on the request's channel
// until the router lets it out, or on its context until the client hangs
// up (the request is then withdrawn with Fail). Router.Dispatch is called
// whenever capacity may have freed (a first token, a completion, a
// failure, a scrape, a backend back up: kick) and on a timer while
// anything waits, so that deadlines expire; each entry goes to its
// request's channel:
//
//   - StatusOK: routed now, already in flight at Instance: send it there;
//   - StatusExpired: its deadline passed while it waited: answer 429;
//   - StatusExist: dropped by the router: answer 503.
//
// What a request asks for comes from its headers (classify): its priority
// as the Gateway API Inference Extension gives it (an integer, higher more
// important, 0 by default, negative sheddable) becomes the router's
// urgency band; a tenant id, hashed, is its fair-share tenant; a TTFT SLO
// is its deadline.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"libroute"
)

// Request headers.
const (
	priorityHeader  = "X-Llm-Priority"
	objectiveHeader = "X-Gateway-Inference-Objective"
	sloHeader       = "X-Slo-Ttft-Ms"
)

// tenantHeaders: the first present names the request's tenant.
var tenantHeaders = []string{"X-Gateway-Inference-Fairness-Id", "X-Tenant-Id"}

// defaultUrgency is the urgency of priority 0: RFC 9218's default.
const defaultUrgency = 3

// maxTimeNs: deadlines past the router's clock (LR_ROUTER_MAX_TIME_NS)
// are cut there.
const maxTimeNs = uint64(1) << 60

// priorityUrgency maps a priority to the router's urgency, 3 - priority
// within 0..7 (priority 3 and more: 0; -4 and less: 7), and says whether
// it is sheddable (below 0).
func priorityUrgency(p int) (uint32, bool) {
	u := defaultUrgency - p
	if p < defaultUrgency-int(libroute.Urgencies-1) {
		u = int(libroute.Urgencies - 1)
	} else if p > defaultUrgency {
		u = 0
	}
	return uint32(u), p < 0
}

// tenantID is a tenant header's value as the router's 64-bit tenant:
// FNV-1a of its bytes (the Python gateway hashes the same way).
func tenantID(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// admission is what a request's headers ask of the queue.
type admission struct {
	priority  int
	urgency   uint32
	sheddable bool
	tenant    uint64
	slo       time.Duration // its TTFT deadline, from its arrival
}

// classify reads the request's priority (priorityHeader, else its
// objective's priority from Config.Objectives, else 0), tenant and
// deadline (sloHeader, else Config.TTFTSLO for its urgency, else
// Config.Timeout). A header that is not a number is an error.
func (g *Gateway) classify(h http.Header) (admission, error) {
	var a admission
	if v := h.Get(priorityHeader); v != "" {
		p, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return a, fmt.Errorf("%s: not an integer: %q", strings.ToLower(priorityHeader), v)
		}
		a.priority = p
	} else {
		a.priority = g.cfg.Objectives[strings.TrimSpace(h.Get(objectiveHeader))]
	}
	a.urgency, a.sheddable = priorityUrgency(a.priority)
	for _, name := range tenantHeaders {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			a.tenant = tenantID(v)
			break
		}
	}
	if v := h.Get(sloHeader); v != "" {
		ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(ms > 0 && ms < 1e12) {
			return a, fmt.Errorf("%s: not a positive number of milliseconds: %q", strings.ToLower(sloHeader), v)
		}
		a.slo = time.Duration(ms * float64(time.Millisecond))
	} else if d, ok := g.cfg.TTFTSLO[a.urgency]; ok {
		a.slo = d
	} else {
		a.slo = g.cfg.Timeout
	}
	return a, nil
}

// parseSLO reads -ttft-slo values, "[URGENCY=]MS": an urgency's default
// deadline; without URGENCY, every urgency that has none of its own.
func parseSLO(specs []string) (map[uint32]time.Duration, error) {
	out := map[uint32]time.Duration{}
	every := time.Duration(0)
	for _, spec := range specs {
		u, ms, per := strings.Cut(spec, "=")
		if !per {
			u, ms = "", spec
		}
		v, err := strconv.ParseFloat(ms, 64)
		k, kerr := uint64(0), error(nil)
		if per {
			k, kerr = strconv.ParseUint(u, 10, 32)
		}
		if err != nil || kerr != nil || !(v > 0 && v < 1e12) || k >= uint64(libroute.Urgencies) {
			return nil, fmt.Errorf("-ttft-slo %q: expected [URGENCY=]MS, urgency 0..7, MS > 0", spec)
		}
		d := time.Duration(v * float64(time.Millisecond))
		if per {
			out[uint32(k)] = d
		} else {
			every = d
		}
	}
	if every > 0 {
		for k := uint32(0); k < libroute.Urgencies; k++ {
			if _, ok := out[k]; !ok {
				out[k] = every
			}
		}
	}
	return out, nil
}

// parseObjectives reads -objective values, "NAME=PRIORITY".
func parseObjectives(specs []string) (map[string]int, error) {
	out := map[string]int{}
	for _, spec := range specs {
		i := strings.LastIndexByte(spec, '=')
		if i <= 0 {
			return nil, fmt.Errorf("-objective %q: expected NAME=PRIORITY", spec)
		}
		p, err := strconv.Atoi(spec[i+1:])
		if err != nil {
			return nil, fmt.Errorf("-objective %q: expected NAME=PRIORITY (an integer)", spec)
		}
		out[spec[:i]] = p
	}
	return out, nil
}

// stringsFlag is a flag that may be given many times.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// waiter is one request that may wait: its channel gets the entry
// Dispatch lets out for it.
type waiter struct {
	id uint64
	ch chan libroute.Dispatched // buffered: a send never blocks
}

// waitQueue holds the requests that wait, by id.
type waitQueue struct {
	g       *Gateway
	mu      sync.Mutex
	waiters map[uint64]*waiter
	n       atomic.Int64 // len(waiters), read without the lock
}

func newWaitQueue(g *Gateway) *waitQueue {
	return &waitQueue{g: g, waiters: map[uint64]*waiter{}}
}

// expect registers request id before it is routed with RouteMayWait, so
// that a Dispatch racing the route finds it.
func (q *waitQueue) expect(id uint64) *waiter {
	w := &waiter{id: id, ch: make(chan libroute.Dispatched, 1)}
	q.mu.Lock()
	q.waiters[id] = w
	q.mu.Unlock()
	q.n.Add(1)
	return w
}

// take removes w if it is still registered, and says so: whoever takes it
// owns its end (a Dispatch entry, or the withdrawal).
func (q *waitQueue) take(w *waiter) bool {
	q.mu.Lock()
	mine := q.waiters[w.id] == w
	if mine {
		delete(q.waiters, w.id)
	}
	q.mu.Unlock()
	if mine {
		q.n.Add(-1)
	}
	return mine
}

// forget: the route did not hold the request (it went at once, or failed).
func (q *waitQueue) forget(w *waiter) { q.take(w) }

// wait blocks until the router lets the request out, or its client hangs
// up: then it is withdrawn (Fail) and wait returns false.
func (q *waitQueue) wait(ctx context.Context, w *waiter) (libroute.Dispatched, bool) {
	select {
	case e := <-w.ch:
		return e, true
	case <-ctx.Done():
	}
	if q.take(w) {
		// Withdrawn; if Dispatch let it out meanwhile, Fail ends it in
		// flight and that Dispatch drops its entry.
		_ = q.g.router.Fail(w.id, now())
		q.g.kick()
		return libroute.Dispatched{}, false
	}
	// let out as the client left: it was routed for nobody
	if e := <-w.ch; e.Status == libroute.StatusOK {
		q.g.fail(w.id)
	}
	return libroute.Dispatched{}, false
}

// dispatch lets out what may go now, each entry to its request.
func (q *waitQueue) dispatch() {
	// On an error (ErrNoMem: that request stays waiting) the entries
	// returned have left the queue all the same; a closed router returns
	// none.
	entries, _ := q.g.router.Dispatch(now())
	for _, e := range entries {
		q.mu.Lock()
		w := q.waiters[e.RequestID]
		if w != nil {
			delete(q.waiters, e.RequestID)
		}
		q.mu.Unlock()
		if w == nil {
			continue // withdrawn as it was let out: see wait
		}
		q.n.Add(-1)
		w.ch <- e
	}
}

// loop is the dispatch timer: every DispatchEvery while anything waits,
// so that deadlines expire.
func (q *waitQueue) loop() {
	defer q.g.wg.Done()
	tick := time.NewTicker(q.g.cfg.DispatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-q.g.stop:
			return
		case <-tick.C:
			if q.n.Load() > 0 {
				q.dispatch()
			}
		}
	}
}

// kick: capacity may have freed (a first token, a completion, a failure,
// a scrape, a backend back up); let waiting requests out, on the calling
// goroutine. Nothing to do while nothing waits.
func (g *Gateway) kick() {
	if g.queue != nil && g.queue.n.Load() > 0 {
		g.queue.dispatch()
	}
}

func (g *Gateway) anyUp() bool {
	for _, b := range g.backends {
		if b.up.Load() {
			return true
		}
	}
	return false
}

// pickResult is what pick made of a request's try.
type pickResult int

const (
	picked    pickResult = iota // a.b chosen, the request in flight there
	noBackend                   // nothing routable
	refused                     // answered already (429, 503)
	hungUp                      // the client went away while it waited
)

// refuse answers a request the queue turned away: why in
// X-Libroute-Dropped (shed, queue-full, expired, dropped), and a
// Retry-After with a 429.
func (g *Gateway) refuse(w http.ResponseWriter, code int, dropped, msg string) {
	w.Header().Set("X-Libroute-Dropped", dropped)
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	g.jsonError(w, code, msg)
}

// pickWaiting is pick with the queue: Route with RouteMayWait, and when
// the router holds the request, the entry Dispatch lets out for it.
func (g *Gateway) pickWaiting(w http.ResponseWriter, r *http.Request, a *attempt, toks, ends []uint32,
	maxTokens uint32, adm admission, deadline uint64) pickResult {
	if !g.anyUp() {
		return noBackend // the router would hold it: none to wait for
	}
	flags := libroute.RouteMayWait
	if adm.sheddable {
		flags |= libroute.RouteSheddable
	}
	wt := g.queue.expect(a.id)
	t0 := time.Now()
	d, err := g.router.Route(&libroute.Request{
		ID: a.id, Tokens: toks, Boundaries: ends,
		ExpectedOutputTokens: maxTokens, Now: now(), Flags: flags,
		Tenant: adm.tenant, Deadline: deadline, Urgency: adm.urgency,
		Model: a.model, Adapter: a.adapter,
	})
	took := time.Since(t0)
	if err != nil || d.Instance != libroute.InstanceNone {
		g.queue.forget(wt)
	}
	switch {
	case errors.Is(err, libroute.ErrBusy):
		g.metrics.OnRouteCall(took)
		g.refuse(w, http.StatusTooManyRequests, "shed",
			fmt.Sprintf("the fleet is saturated: a request of priority %d is shed", adm.priority))
		return refused
	case errors.Is(err, libroute.ErrLimit):
		g.metrics.OnRouteCall(took)
		g.refuse(w, http.StatusTooManyRequests, "queue-full", "the waiting queue is full")
		return refused
	case g.nameRefused(w, a, err):
		return refused
	case err != nil:
		return noBackend // ErrState: nothing routable
	case d.Instance != libroute.InstanceNone: // sent at once
		a.b, a.cached, a.routedAt = g.byID[d.Instance], d.CachedTokens, t0
		a.reason = label(g.reasonNames, int(d.Reason))
		a.decider = label(g.policyNames, int(d.Decider))
		g.metrics.OnRoute(a.decider, a.reason, took)
		return picked
	}
	g.metrics.OnRouteCall(took)
	e, ok := g.queue.wait(r.Context(), wt)
	if !ok {
		return hungUp
	}
	switch e.Status {
	case libroute.StatusOK:
		a.b, a.cached, a.routedAt = g.byID[e.Instance], e.CachedTokens, t0
		a.reason = label(g.reasonNames, int(e.Reason))
		a.decider = label(g.policyNames, int(g.router.Policy()))
		g.metrics.OnDispatched(a.decider, a.reason, e.Waited)
		return picked
	case libroute.StatusExpired:
		// backpressure while backends serve (429); none left: 503
		code := http.StatusTooManyRequests
		if !g.anyUp() {
			code = http.StatusServiceUnavailable
		}
		g.refuse(w, code, "expired", fmt.Sprintf("no capacity within the TTFT deadline (%.0f ms waited)",
			float64(e.Waited)/float64(time.Millisecond)))
		return refused
	}
	g.refuse(w, http.StatusServiceUnavailable, "dropped",
		fmt.Sprintf("dropped from the waiting queue (%v)", e.Status))
	return refused
}

// deadlineOf is the router's deadline of a request that arrived at
// arrival (now()) with adm.
func deadlineOf(arrival uint64, adm admission) uint64 {
	d := arrival + uint64(adm.slo)
	if d > maxTimeNs || uint64(adm.slo) > math.MaxUint64-arrival {
		return maxTimeNs
	}
	return d
}

// queueStatus is the queue's part of GET /status.
type queueStatus struct {
	Saturated  bool   `json:"saturated"`
	Waiting    uint64 `json:"waiting"`
	Waited     uint64 `json:"waited"`
	Dispatched uint64 `json:"dispatched"`
	Expired    uint64 `json:"expired"`
	Cancelled  uint64 `json:"cancelled"`
	Dropped    uint64 `json:"dropped"`
	Shed       uint64 `json:"shed"`
}

func (g *Gateway) queueStatus(s libroute.RouterStats) *queueStatus {
	sat, _ := g.router.Saturated(now())
	return &queueStatus{Saturated: sat, Waiting: s.Waiting, Waited: s.Waited,
		Dispatched: s.WaitedDispatched, Expired: s.WaitedExpired,
		Cancelled: s.WaitedCancelled, Dropped: s.WaitedDropped, Shed: s.Shed}
}
