package libroute

import (
	"math"
	"testing"
	"time"
)

// Disaggregated prefill and decode (tests/test-pd.c has the C shapes):
// roles and placement at AddInstance, a split decision, both legs' load,
// PrefillDone, a waiting request let out with its prefill leg, the rows'
// role and placement, and a standalone Load's prefill leg.

const (
	ms  = uint64(1_000_000)
	kvb = 131072.0 // ParamKVBytesPerToken's default
)

// newPDFleet returns a router with two decode instances (ids 0 and 2) and
// a prefill one (1), added interleaved: d0 shares a rack with p1, d2 only
// the region.
func newPDFleet(t *testing.T, policy Policy) *Router {
	t.Helper()
	r, _ := newTestRouter(t, policy)
	for i, s := range []InstanceSpec{
		{Name: "d0:8000", Role: RoleDecode, Node: 1, Rack: 1, Region: 1},
		{Name: "p1:8000", Role: RolePrefill, Node: 2, Rack: 1, Region: 1},
		{Name: "d2:8000", Role: RoleDecode, Node: 3, Rack: 2, Region: 1},
	} {
		id, err := r.AddInstance(s)
		if err != nil || id != InstanceID(i) {
			t.Fatalf("AddInstance(%+v) = %d, %v", s, id, err)
		}
	}
	return r
}

func TestPDConstants(t *testing.T) {
	if RoleBoth != 0 || RolePrefill != 1 || RoleDecode != 2 {
		t.Errorf("roles %d %d %d", RoleBoth, RolePrefill, RoleDecode)
	}
	if RolePrefill.String() != "prefill" || Role(7).String() != "Role(7)" {
		t.Errorf("role names %q %q", RolePrefill, Role(7))
	}
	if PolicyLLMDPD != 19 || PolicyLLMDPD.String() != "llm-d-pd" ||
		PolicyDynamoPD != 20 || PolicyDynamoPD.String() != "dynamo-pd" {
		t.Errorf("policies %d %q %d %q", PolicyLLMDPD, PolicyLLMDPD, PolicyDynamoPD, PolicyDynamoPD)
	}
	if ReasonWhole != 18 || ReasonWhole.String() != "whole" {
		t.Errorf("reason %d %q", ReasonWhole, ReasonWhole)
	}
	for _, c := range []struct {
		p   Param
		key int
		def float64
	}{
		{ParamKVBytesPerToken, 49, kvb}, {ParamKVGBpsNode, 50, 300},
		{ParamKVGBpsRack, 51, 50}, {ParamKVGBpsRegion, 52, 12.5},
		{ParamKVGBpsWAN, 53, 1.25}, {ParamPDPrefillPolicy, 54, -1},
		{ParamPDMinUncached, 55, 16}, {ParamPDLocalMaxTokens, 56, 2048},
		{ParamPDLocalMaxRatio, 57, 0.7}, {ParamAdaptivePDStall, 58, 0.1},
	} {
		if b, err := c.p.Bounds(); int(c.p) != c.key || err != nil || b.Default != c.def {
			t.Errorf("Param(%d).Bounds() = %+v, %v; want key %d default %v", c.p, b, err, c.key, c.def)
		}
	}
	var row Candidate
	if row.Role != RoleBoth || NewCandidate(3).Role != RoleBoth {
		t.Error("a row's zero role is not RoleBoth")
	}
}

// A split decision on two decode instances and a prefill one; the legs'
// load; PrefillDone and its ErrNotFound; the next turn kept whole.
func TestPDSplitRoute(t *testing.T) {
	r := newPDFleet(t, PolicyLLMDPD)
	toks := prompt(2000, 1)
	d, err := r.Route(&Request{ID: 1, Tokens: toks, Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	if (d.Instance != 0 && d.Instance != 2) || d.PrefillInstance != 1 {
		t.Fatalf("decision %+v: want decode on 0 or 2, prefill on 1", d)
	}
	if d.Decider != PolicyLLMDPD || d.PrefillReason < 0 || d.PrefillCachedTokens != 0 {
		t.Errorf("decision %+v", d)
	}
	// the placement priced it: the rack's bandwidth from d0, the region's
	// from d2, for the prompt the decode instance lacks
	gbps := 12.5
	if d.Instance == 0 {
		gbps = 50
	}
	want := float64(2000-d.CachedTokens) * kvb / (gbps * 1e9)
	if !(d.TransferSeconds > 0) || math.Abs(d.TransferSeconds-want) > 1e-12 {
		t.Errorf("TransferSeconds %v, want %v", d.TransferSeconds, want)
	}
	pre, err := r.InstanceLoad(1)
	if err != nil || pre.Inflight != 1 || pre.PrefillTokens < 2000-16 {
		t.Errorf("prefill instance's load %+v, %v", pre, err)
	}
	dec, err := r.InstanceLoad(d.Instance)
	if err != nil || dec.Inflight != 1 || dec.PrefillTokens != 0 {
		t.Errorf("decode instance's load %+v, %v", dec, err)
	}
	if err := r.PrefillDone(1, sec+100*ms); err != nil {
		t.Fatal(err)
	}
	if pre, _ := r.InstanceLoad(1); pre.Inflight != 0 {
		t.Errorf("prefill instance after PrefillDone: %+v", pre)
	}
	if dec, _ := r.InstanceLoad(d.Instance); dec.Inflight != 1 {
		t.Errorf("decode instance after PrefillDone: %+v", dec)
	}
	if err := r.PrefillDone(1, sec+101*ms); err != nil {
		t.Errorf("a repeat: %v", err)
	}
	wantStatus(t, r.PrefillDone(77, sec+101*ms), ErrNotFound, StatusNotFound, "lr_router_prefill_done")
	if err := r.FirstToken(1, sec+120*ms); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(1, 50, 2*sec); err != nil {
		t.Fatal(err)
	}
	// the next turn: 8 new tokens stay whole where they decode
	toks = append(toks, prompt(8, 2)...)
	d2, err := r.Route(&Request{ID: 2, Tokens: toks, Now: 3 * sec})
	if err != nil {
		t.Fatal(err)
	}
	if d2.Instance == 1 || d2.CachedTokens < 2000-16 || d2.PrefillInstance != InstanceNone ||
		d2.PrefillReason != ReasonWhole || d2.TransferSeconds != 0 {
		t.Errorf("next turn %+v: want whole where it decodes", d2)
	}
	// closed
	r.Close()
	if err := r.PrefillDone(2, 4*sec); err != ErrClosed {
		t.Errorf("PrefillDone after Close: %v", err)
	}
}

// A request let out of the waiting queue keeps its prefill leg: two
// decode instances (0, 2) and two prefill ones (1, 3); the fleet is
// saturated when both decode instances are, the idle prefill ones aside.
func TestPDWaitingPair(t *testing.T) {
	r, _ := newTestRouter(t, PolicyLLMDPD)
	for i, s := range []InstanceSpec{
		{Name: "d0", Role: RoleDecode, Rack: 1, Region: 1},
		{Name: "p1", Role: RolePrefill, Rack: 1, Region: 1},
		{Name: "d2", Role: RoleDecode, Rack: 2, Region: 1},
		{Name: "p3", Role: RolePrefill, Rack: 2, Region: 1},
	} {
		if id, err := r.AddInstance(s); err != nil || id != InstanceID(i) {
			t.Fatalf("AddInstance(%+v) = %d, %v", s, id, err)
		}
	}
	isPrefill := func(id InstanceID) bool { return id == 1 || id == 3 }
	if err := r.SetParam(ParamSaturationQueue, 1); err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 2; i++ {
		d, err := r.Route(&Request{ID: 1 + i, Tokens: prompt(1024, int64(40+i)), Flags: RouteMayWait,
			Now: sec + i*ms})
		if err != nil || isPrefill(d.Instance) || d.Instance == InstanceNone ||
			!isPrefill(d.PrefillInstance) {
			t.Fatalf("Route(%d) = %+v, %v: want a pair", 1+i, d, err)
		}
	}
	if sat, err := r.Saturated(sec + 2*ms); err != nil || !sat {
		t.Fatalf("Saturated = %v, %v; want true", sat, err)
	}
	d, err := r.Route(&Request{ID: 3, Tokens: prompt(1024, 50), Flags: RouteMayWait, Now: sec + 3*ms})
	if err != nil || d.Reason != ReasonWaiting || d.Instance != InstanceNone {
		t.Fatalf("Route(3) = %+v, %v: want it waiting", d, err)
	}
	if err := r.FirstToken(1, sec+4*ms); err != nil {
		t.Fatal(err)
	}
	out, err := r.Dispatch(sec + 5*ms)
	if err != nil || len(out) != 1 {
		t.Fatalf("Dispatch = %+v, %v; want one", out, err)
	}
	e := out[0]
	if e.RequestID != 3 || e.Err() != nil || isPrefill(e.Instance) || e.Instance == InstanceNone {
		t.Fatalf("dispatched %+v: want 3 on a decode instance", e)
	}
	if !isPrefill(e.PrefillInstance) || e.PrefillReason != ReasonLeastLoaded ||
		e.PrefillCachedTokens != 0 || !(e.TransferSeconds > 0) || e.Waited != 2*time.Millisecond {
		t.Errorf("dispatched %+v: want its prefill leg", e)
	}
	if pre, err := r.InstanceLoad(e.PrefillInstance); err != nil || pre.Inflight != 1 {
		t.Errorf("prefill instance's load %+v, %v", pre, err)
	}
	if err := r.PrefillDone(3, sec+6*ms); err != nil {
		t.Fatal(err)
	}
	if pre, _ := r.InstanceLoad(e.PrefillInstance); pre.Inflight != 0 {
		t.Errorf("prefill instance after PrefillDone: %+v", pre)
	}
}

// An aggregated fleet keeps every request whole, and says it could not
// split; PrefillDone on a request not split is a no-op.
func TestPDAggregated(t *testing.T) {
	r, _ := newTestRouter(t, PolicyLLMDPD, "a:1")
	if _, err := r.AddInstance(InstanceSpec{Name: "b:1", Role: RoleDecode}); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{ID: 1, Tokens: prompt(2000, 3), Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	if d.PrefillInstance != InstanceNone || d.PrefillReason != -1 || d.PrefillCachedTokens != 0 ||
		d.TransferSeconds != 0 {
		t.Errorf("decision %+v", d)
	}
	if err := r.PrefillDone(1, sec+ms); err != nil {
		t.Error(err)
	}
	if s, _ := r.Stats(); s.Inflight != 1 {
		t.Errorf("in flight %d", s.Inflight)
	}
}

// The rows that decode come first, with their roles and placements; Decide
// over them replays the pair.
func TestPDCandidates(t *testing.T) {
	r := newPDFleet(t, PolicyLLMDPD)
	req := &Request{ID: 1, Tokens: prompt(256, 5), Now: sec, Flags: RouteDryRun | RouteScores}
	rows, err := r.Candidates(req)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id                 InstanceID
		role               Role
		node, rack, region uint32
	}{{0, RoleDecode, 1, 1, 1}, {2, RoleDecode, 3, 2, 1}, {1, RolePrefill, 2, 1, 1}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows", len(rows))
	}
	for i, w := range want {
		c := rows[i]
		if c.Instance != w.id || c.Role != w.role || c.Node != w.node || c.Rack != w.rack ||
			c.Region != w.region {
			t.Errorf("row %d: %d %v %d/%d/%d, want %+v", i, c.Instance, c.Role, c.Node, c.Rack,
				c.Region, w)
		}
	}
	in, err := r.PolicyInput(req)
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	in.Seed = d.Seed
	again, err := Decide(r.Policy(), &in, rows)
	if err != nil {
		t.Fatal(err)
	}
	if again.Instance != d.Instance || again.PrefillInstance != d.PrefillInstance ||
		again.PrefillReason != d.PrefillReason || again.TransferSeconds != d.TransferSeconds {
		t.Errorf("replay %+v, route %+v", again, d)
	}
	if d.PrefillInstance != 1 {
		t.Errorf("route %+v: not split", d)
	}
	// scores in the table's order
	if len(d.Scores) != 3 || d.Scores[0].Instance != 0 || d.Scores[1].Instance != 2 ||
		d.Scores[2].Instance != 1 {
		t.Errorf("route's scores %+v", d.Scores)
	}
	// a table with a prefill row before a decode row is refused
	rows[0], rows[2] = rows[2], rows[0]
	_, err = Decide(r.Policy(), &in, rows)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_policy_decide")
}

func TestPDBadSpecs(t *testing.T) {
	r, _ := newTestRouter(t, PolicyLLMDPD)
	for _, role := range []Role{3, -1} {
		_, err := r.AddInstance(InstanceSpec{Name: "x:1", Role: role})
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_add_instance")
	}
	if n := r.InstanceCount(); n != 0 {
		t.Errorf("%d instances", n)
	}
	// prefill instances alone cannot decode
	if _, err := r.AddInstance(InstanceSpec{Name: "p:1", Role: RolePrefill}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Route(&Request{ID: 1, Tokens: prompt(64, 1), Now: sec})
	wantStatus(t, err, ErrState, StatusState, "lr_router_route")
}

// A policy without a pair rule always splits, its prefill leg by
// ParamPDPrefillPolicy.
func TestPDPrefillPolicy(t *testing.T) {
	r := newPDFleet(t, PolicyLeastRequest)
	wantStatus(t, r.SetParam(ParamPDPrefillPolicy, float64(PolicyAdaptive)), ErrInvalid, StatusInvalid,
		"lr_router_set_param")
	if err := r.SetParam(ParamPDPrefillPolicy, float64(PolicyRoundRobin)); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{ID: 1, Tokens: prompt(64, 6), Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	if d.Instance == 1 || d.PrefillInstance != 1 || d.PrefillReason != ReasonRoundRobin {
		t.Errorf("decision %+v", d)
	}
}

// A standalone Load: the prefill leg counted at its instance until
// PrefillDone or the first token.
func TestLoadPrefillLeg(t *testing.T) {
	l, err := NewLoad(&LoadOptions{MaxInstances: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := InstanceID(0); i < 3; i++ {
		if err := l.AddInstance(i, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Dispatch(&Dispatch{RequestID: 1, Instance: 0, PromptTokens: 2000, Now: sec,
		HasPrefill: true, PrefillInstance: 2, PrefillCachedTokens: 500}); err != nil {
		t.Fatal(err)
	}
	pre, _ := l.Get(2)
	dec, _ := l.Get(0)
	if pre.Inflight != 1 || pre.Queued != 1 || pre.PrefillTokens != 1500 ||
		dec.Inflight != 1 || dec.Queued != 1 || dec.PrefillTokens != 0 {
		t.Errorf("prefill %+v, decode %+v", pre, dec)
	}
	if id, queued, err := l.Request(1); id != 0 || !queued || err != nil {
		t.Errorf("Request(1) = %d, %v, %v", id, queued, err)
	}
	if err := l.PrefillDone(1, sec+ms); err != nil {
		t.Fatal(err)
	}
	if pre, _ := l.Get(2); pre.Inflight != 0 {
		t.Errorf("prefill after PrefillDone %+v", pre)
	}
	if err := l.PrefillDone(1, sec+ms); err != nil {
		t.Errorf("a repeat: %v", err)
	}
	wantStatus(t, l.PrefillDone(9, sec), ErrNotFound, StatusNotFound, "lr_load_prefill_done")
	// the first token ends an open prefill leg too
	if err := l.Dispatch(&Dispatch{RequestID: 2, Instance: 1, PromptTokens: 100, Now: sec,
		HasPrefill: true, PrefillInstance: 2}); err != nil {
		t.Fatal(err)
	}
	if pre, _ := l.Get(2); pre.Inflight != 1 {
		t.Errorf("prefill leg %+v", pre)
	}
	if err := l.FirstToken(2, sec+ms); err != nil {
		t.Fatal(err)
	}
	if pre, _ := l.Get(2); pre.Inflight != 0 {
		t.Errorf("prefill leg after the first token %+v", pre)
	}
	// bad legs
	for _, c := range []struct {
		d  Dispatch
		st Status
		e  error
	}{
		{Dispatch{RequestID: 3, PromptTokens: 100, HasPrefill: true}, StatusInvalid, ErrInvalid},
		{Dispatch{RequestID: 3, PromptTokens: 100, HasPrefill: true, PrefillInstance: 2,
			PrefillCachedTokens: 101}, StatusInvalid, ErrInvalid},
		{Dispatch{RequestID: 3, PromptTokens: 100, HasPrefill: true, PrefillInstance: 3},
			StatusNotFound, ErrNotFound},
	} {
		c.d.Now = sec
		wantStatus(t, l.Dispatch(&c.d), c.e, c.st, "lr_load_dispatch")
	}
	if n := l.Inflight(); n != 2 {
		t.Errorf("in flight %d", n)
	}
	l.Close()
	if err := l.PrefillDone(1, sec); err != ErrClosed {
		t.Errorf("PrefillDone after Close: %v", err)
	}
}
