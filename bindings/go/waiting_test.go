package libroute

import (
	"errors"
	"math"
	"testing"
	"time"
)

// newWaitRouter is a router with one instance, saturated once
// saturationQueue of its requests wait for their first token.
func newWaitRouter(t *testing.T, saturationQueue float64, opt func(*RouterOptions)) *Router {
	t.Helper()
	o := DefaultRouterOptions()
	o.Policy = PolicyLeastRequest
	o.Seed = 1
	if opt != nil {
		opt(&o)
	}
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatalf("NewRouter: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := r.AddInstance(InstanceSpec{Name: "10.0.0.1:8000"}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetParam(ParamSaturationQueue, saturationQueue); err != nil {
		t.Fatal(err)
	}
	return r
}

func waitRoute(t *testing.T, r *Router, req Request) Decision {
	t.Helper()
	if req.Tokens == nil {
		req.Tokens = make([]uint32, 64)
		for i := range req.Tokens {
			req.Tokens[i] = uint32(req.ID*1000) + uint32(i)
		}
	}
	d, err := r.Route(&req)
	if err != nil {
		t.Fatalf("Route(%d): %v", req.ID, err)
	}
	return d
}

func mustDispatch(t *testing.T, r *Router, now uint64) []Dispatched {
	t.Helper()
	out, err := r.Dispatch(now)
	if err != nil {
		t.Fatalf("Dispatch(%d): %v", now, err)
	}
	return out
}

func mustSaturated(t *testing.T, r *Router, now uint64, want bool) {
	t.Helper()
	got, err := r.Saturated(now)
	if err != nil || got != want {
		t.Fatalf("Saturated(%d) = %v, %v; want %v", now, got, err, want)
	}
}

func TestWaitThenDispatch(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	mustSaturated(t, r, sec, false)
	if d := waitRoute(t, r, Request{ID: 1, Now: sec, Flags: RouteMayWait}); d.Instance != 0 {
		t.Fatalf("not saturated, yet %+v", d)
	}
	mustSaturated(t, r, sec, true)
	d := waitRoute(t, r, Request{ID: 2, Now: sec, Flags: RouteMayWait, Tenant: 7, Urgency: 2,
		Tokens: make([]uint32, 48)})
	if d.Instance != InstanceNone || d.Reason != ReasonWaiting || d.CachedTokens != 0 ||
		!math.IsNaN(d.Cost) {
		t.Fatalf("waiting decision %+v", d)
	}
	st, _ := r.Stats()
	if st.Waiting != 1 || st.WaitingTokens != 48 || st.Waited != 1 || st.Inflight != 1 {
		t.Fatalf("stats %+v", st)
	}
	if out := mustDispatch(t, r, sec+1); len(out) != 0 {
		t.Fatalf("saturated, yet dispatched %+v", out)
	}
	if err := r.FirstToken(1, 2*sec); err != nil {
		t.Fatal(err)
	}
	mustSaturated(t, r, 2*sec, false)
	out := mustDispatch(t, r, 3*sec)
	if len(out) != 1 {
		t.Fatalf("dispatched %+v", out)
	}
	e := out[0]
	if e.RequestID != 2 || e.Status != StatusOK || e.Err() != nil || e.Instance != 0 ||
		e.Reason == ReasonWaiting || e.Waited != 2*time.Second || e.Urgency != 2 || e.Tenant != 7 {
		t.Fatalf("entry %+v", e)
	}
	mustSaturated(t, r, 3*sec, true) // recorded in flight, as Route records
	st, _ = r.Stats()
	if st.Waiting != 0 || st.WaitingTokens != 0 || st.Inflight != 2 || st.WaitedDispatched != 1 ||
		st.WaitNs != uint64(2*time.Second) {
		t.Fatalf("stats %+v", st)
	}
	if err := r.FirstToken(2, 4*sec); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2} {
		if err := r.Complete(id, 10, 5*sec); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaitOnlyWhenAsked(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	waitRoute(t, r, Request{ID: 1, Now: sec})
	if d := waitRoute(t, r, Request{ID: 2, Now: sec}); d.Instance != 0 {
		t.Errorf("without RouteMayWait: %+v", d)
	}
	if d := waitRoute(t, r, Request{ID: 3, Now: sec, Flags: RouteMayWait | RouteDryRun}); d.Instance != 0 {
		t.Errorf("a dry run waited: %+v", d)
	}
	if st, _ := r.Stats(); st.Waited != 0 || st.Inflight != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestWaitShed(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	waitRoute(t, r, Request{ID: 1, Now: sec})
	_, err := r.Route(&Request{ID: 2, Tokens: make([]uint32, 64), Now: sec,
		Flags: RouteMayWait | RouteSheddable})
	wantStatus(t, err, ErrBusy, StatusBusy, "lr_router_route")
	if st, _ := r.Stats(); st.Shed != 1 || st.Waiting != 0 || st.Inflight != 1 {
		t.Errorf("stats %+v", st)
	}
	if err := r.FirstToken(1, 2*sec); err != nil {
		t.Fatal(err)
	}
	// Nothing was recorded: the id is free.
	if d := waitRoute(t, r, Request{ID: 2, Now: 2 * sec, Flags: RouteMayWait | RouteSheddable}); d.Instance != 0 {
		t.Errorf("%+v", d)
	}
}

func TestWaitDeadlineAndCancel(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	waitRoute(t, r, Request{ID: 1, Now: sec})
	waitRoute(t, r, Request{ID: 2, Now: sec, Flags: RouteMayWait, Deadline: 3 * sec, Tenant: 5})
	waitRoute(t, r, Request{ID: 3, Now: sec, Flags: RouteMayWait})
	if out := mustDispatch(t, r, 2*sec); len(out) != 0 {
		t.Fatalf("%+v", out)
	}
	out := mustDispatch(t, r, 3*sec) // at the deadline
	if len(out) != 1 || out[0].RequestID != 2 || out[0].Status != StatusExpired ||
		out[0].Instance != InstanceNone || out[0].Tenant != 5 || out[0].Waited != 2*time.Second {
		t.Fatalf("%+v", out)
	}
	err := out[0].Err()
	if !errors.Is(err, ErrExpired) {
		t.Errorf("Err() = %v", err)
	}
	wantStatus(t, err, ErrExpired, StatusExpired, "lr_router_dispatch")
	// Fail withdraws a waiting request.
	if err := r.Fail(3, 3*sec); err != nil {
		t.Fatal(err)
	}
	if err := r.FirstToken(1, 4*sec); err != nil {
		t.Fatal(err)
	}
	if out := mustDispatch(t, r, 4*sec); len(out) != 0 {
		t.Fatalf("a cancelled request went: %+v", out)
	}
	wantStatus(t, r.Fail(3, 4*sec), ErrNotFound, StatusNotFound, "lr_router_fail")
	st, _ := r.Stats()
	if st.WaitedExpired != 1 || st.WaitedCancelled != 1 || st.WaitedDispatched != 0 || st.Waiting != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestWaitOrder(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	waitRoute(t, r, Request{ID: 1, Now: sec})
	// Urgency first; within a band, fair share between tenants (tenant 2's
	// one request does not wait behind all of tenant 1's), then arrival.
	waitRoute(t, r, Request{ID: 10, Now: sec, Flags: RouteMayWait, Urgency: 5, Tenant: 1})
	waitRoute(t, r, Request{ID: 11, Now: sec, Flags: RouteMayWait, Urgency: 5, Tenant: 1})
	waitRoute(t, r, Request{ID: 12, Now: sec, Flags: RouteMayWait, Urgency: 5, Tenant: 1})
	waitRoute(t, r, Request{ID: 20, Now: sec, Flags: RouteMayWait, Urgency: 5, Tenant: 2})
	waitRoute(t, r, Request{ID: 30, Now: sec, Flags: RouteMayWait, Urgency: 0, Tenant: 1})
	var order []uint64
	prev := uint64(1)
	for i := uint64(2); i <= 6; i++ {
		if err := r.FirstToken(prev, i*sec); err != nil {
			t.Fatal(err)
		}
		out := mustDispatch(t, r, i*sec)
		if len(out) != 1 {
			t.Fatalf("dispatched %+v", out)
		}
		prev = out[0].RequestID
		order = append(order, prev)
	}
	if order[0] != 30 || (order[1] != 20 && order[2] != 20) {
		t.Errorf("order %v", order)
	}
	var tenant1 []uint64
	for _, id := range order {
		if id >= 10 && id < 20 {
			tenant1 = append(tenant1, id)
		}
	}
	if len(tenant1) != 3 || tenant1[0] != 10 || tenant1[1] != 11 || tenant1[2] != 12 {
		t.Errorf("tenant 1's order %v", tenant1)
	}
}

func TestWaitNeverOvertakes(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	waitRoute(t, r, Request{ID: 1, Now: sec})
	waitRoute(t, r, Request{ID: 2, Now: sec, Flags: RouteMayWait, Urgency: 4})
	if err := r.FirstToken(1, 2*sec); err != nil {
		t.Fatal(err)
	}
	mustSaturated(t, r, 2*sec, false)
	if d := waitRoute(t, r, Request{ID: 3, Now: 2 * sec, Flags: RouteMayWait, Urgency: 4}); d.Reason != ReasonWaiting {
		t.Errorf("overtook a request as urgent: %+v", d)
	}
	if d := waitRoute(t, r, Request{ID: 4, Now: 2 * sec, Flags: RouteMayWait, Urgency: 1}); d.Instance != 0 {
		t.Errorf("more urgent than every waiting one, with room: %+v", d)
	}
}

func TestDispatchInto(t *testing.T) {
	r := newWaitRouter(t, 1, nil)
	waitRoute(t, r, Request{ID: 1, Now: sec, Tokens: make([]uint32, 16)})
	var ids []uint64
	for id := uint64(100); id < 300; id++ {
		waitRoute(t, r, Request{ID: id, Now: sec, Flags: RouteMayWait, Tokens: make([]uint32, 16)})
		ids = append(ids, id)
	}
	for _, p := range []Param{ParamSaturationQueue, ParamSaturationPrefillSeconds} {
		b, _ := p.Bounds()
		if err := r.SetParam(p, b.Hi); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := r.DispatchInto(2*sec, nil); n != 0 || err != nil {
		t.Fatalf("DispatchInto(nil) = %d, %v", n, err)
	}
	one := make([]Dispatched, 1)
	if n, err := r.DispatchInto(2*sec, one); n != 1 || err != nil || one[0].RequestID != ids[0] {
		t.Fatalf("DispatchInto(1) = %d, %v, %+v", n, err, one)
	}
	rest := mustDispatch(t, r, 2*sec) // more than one chunk
	if len(rest) != len(ids)-1 {
		t.Fatalf("%d dispatched, want %d", len(rest), len(ids)-1)
	}
	for i, e := range rest {
		if e.RequestID != ids[i+1] || e.Status != StatusOK || e.Instance != 0 {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if st, _ := r.Stats(); st.Waiting != 0 || st.WaitedDispatched != uint64(len(ids)) ||
		st.Inflight != uint64(len(ids))+1 {
		t.Errorf("stats %+v", st)
	}
}

func TestWaitBoundsAndErrors(t *testing.T) {
	def := DefaultRouterOptions()
	if def.QueueCapacity == 0 || def.QueueTenants == 0 || def.QueueTokens == 0 {
		t.Errorf("defaults %+v", def)
	}
	for _, set := range []func(*RouterOptions){
		func(o *RouterOptions) { o.QueueCapacity = RouterMaxWaiting + 1 },
		func(o *RouterOptions) { o.QueueTenants = RouterMaxTenants + 1 },
		func(o *RouterOptions) { o.QueueTokens = RouterMaxQueueTokens + 1 },
	} {
		o := DefaultRouterOptions()
		set(&o)
		_, err := NewRouter(&o)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_create")
	}

	r := newWaitRouter(t, 1, func(o *RouterOptions) { o.QueueCapacity = 2 })
	waitRoute(t, r, Request{ID: 1, Now: sec})
	waitRoute(t, r, Request{ID: 2, Now: sec, Flags: RouteMayWait})
	waitRoute(t, r, Request{ID: 3, Now: sec, Flags: RouteMayWait})
	_, err := r.Route(&Request{ID: 4, Tokens: make([]uint32, 8), Now: sec, Flags: RouteMayWait})
	wantStatus(t, err, ErrLimit, StatusLimit, "lr_router_route")
	_, err = r.Route(&Request{ID: 5, Tokens: make([]uint32, 8), Now: sec, Flags: RouteMayWait,
		Urgency: Urgencies})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_route")

	_, err = r.Saturated(1e6 * sec) // ahead of the clock
	wantStatus(t, err, ErrRange, StatusRange, "lr_router_saturated")
	_, err = r.Dispatch(1e6 * sec)
	wantStatus(t, err, ErrRange, StatusRange, "lr_router_dispatch")

	// Saturation from a scrape, and with no routable instance.
	r2 := newWaitRouter(t, 8, nil)
	mustSaturated(t, r2, sec, false)
	kv, _ := r2.Param(ParamSaturationKV)
	if err := r2.SetStats(0, EngineStats{Running: 1, KVUse: kv, ScrapedAt: sec}); err != nil {
		t.Fatal(err)
	}
	mustSaturated(t, r2, sec, true)
	if err := r2.RemoveInstance(0); err != nil {
		t.Fatal(err)
	}
	mustSaturated(t, r2, sec, true)

	r2.Close()
	if _, err := r2.Saturated(sec); err != ErrClosed {
		t.Errorf("Saturated after Close: %v", err)
	}
	if _, err := r2.Dispatch(sec); err != ErrClosed {
		t.Errorf("Dispatch after Close: %v", err)
	}
}
