package libroute

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

func costRows() []Candidate {
	rs := candidates(0, 1)
	rs[0].CachedTokens, rs[0].PrefillTokens, rs[0].RTTMs = 100, 4000, 2
	rs[0].StallSeconds, rs[0].PromptTokens, rs[0].QueuedTokens = 0.5, 3000, 1000
	rs[0].KVTokens = 5000
	rs[1].PrefillRate, rs[1].KVTokens = 16000, 33
	return rs
}

func newTestCost(t *testing.T, kind CostKind) *Cost {
	t.Helper()
	c, err := NewCost(&CostOptions{Kind: kind, Seed: 3})
	if err != nil {
		t.Fatalf("NewCost(%v): %v", kind, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCostKindsAndParams(t *testing.T) {
	if CostKindCount() != 3 || CostParamCount() != int(CostWeightQueueMin)+1 {
		t.Fatalf("%d kinds, %d params", CostKindCount(), CostParamCount())
	}
	names := []string{"ttft", "gorgo", "dynamo"}
	for k, name := range names {
		if CostKind(k).String() != name {
			t.Errorf("kind %d is %q", k, CostKind(k))
		}
	}
	if s := CostKind(3).String(); s != "CostKind(3)" {
		t.Errorf("out of range: %q", s)
	}
	want := map[CostKind]map[CostParam]float64{
		CostTTFT: {CostWeightRTT: 1, CostWeightStall: 1},
		CostGORGO: {CostWeightRTT: 0.5, CostWeightQueue: 0.1, CostQueueAtFirstToken: 0,
			CostSigma: 0.5, CostWeightRTTMax: 2, CostWeightQueueMin: 0.05},
		CostDynamo: {CostWeightUncached: 1, CostBlockTokens: 16},
	}
	for kind, params := range want {
		c := newTestCost(t, kind)
		if c.Kind() != kind {
			t.Errorf("Kind() = %v, want %v", c.Kind(), kind)
		}
		for key := CostParam(0); int(key) < CostParamCount(); key++ {
			def, has := params[key]
			b, err := CostParamBounds(kind, key)
			v, gerr := c.Param(key)
			if !has {
				wantStatus(t, err, ErrNotSupported, StatusNotSupported, "lr_cost_param_bounds")
				wantStatus(t, gerr, ErrNotSupported, StatusNotSupported, "lr_cost_get_param")
				wantStatus(t, c.SetParam(key, 1), ErrNotSupported, StatusNotSupported,
					"lr_cost_set_param")
				continue
			}
			if err != nil || gerr != nil || b.Default != def || v != def || b.Lo > def || def > b.Hi {
				t.Errorf("%v %d: bounds %+v %v, value %v %v, want %v", kind, key, b, err, v, gerr, def)
			}
		}
	}
	if b, _ := CostParamBounds(CostDynamo, CostBlockTokens); !b.Integer {
		t.Error("block tokens is not an integer key")
	}
	d := newTestCost(t, CostDynamo)
	wantStatus(t, d.SetParam(CostBlockTokens, 16.5), ErrInvalid, StatusInvalid, "lr_cost_set_param")
	wantStatus(t, d.SetParam(CostWeightUncached, math.NaN()), ErrInvalid, StatusInvalid, "lr_cost_set_param")
	wantStatus(t, d.SetParam(CostWeightUncached, 1e9), ErrRange, StatusRange, "lr_cost_set_param")
	if err := d.SetParam(CostBlockTokens, 32); err != nil {
		t.Error(err)
	}
	if v, _ := d.Param(CostBlockTokens); v != 32 {
		t.Errorf("block tokens %v", v)
	}
	_, err := NewCost(&CostOptions{Kind: CostKind(CostKindCount())})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_cost_create")
	c, err := NewCost(nil)
	if err != nil || c.Kind() != CostTTFT {
		t.Fatalf("NewCost(nil): %v %v", c, err)
	}
	c.Close()
	c.Close()
	if c.Kind() != -1 || c.SetParam(CostWeightRTT, 1) != ErrClosed || c.Tune(true) != ErrClosed {
		t.Error("calls after Close")
	}
	if _, err := c.Eval(10, costRows(), nil); err != ErrClosed {
		t.Errorf("Eval after Close: %v", err)
	}
}

func TestCostEval(t *testing.T) {
	rs := costRows()
	got, err := newTestCost(t, CostTTFT).Eval(1000, rs, nil)
	if err != nil || math.Abs(got[0]-(4900.0/8000+0.002+0.5)) > 1e-12 ||
		math.Abs(got[1]-1000.0/16000) > 1e-12 {
		t.Errorf("ttft: %v %v", got, err)
	}
	g := newTestCost(t, CostGORGO)
	buf := make([]float64, 0, 8)
	got, err = g.Eval(1000, rs, buf)
	if err != nil || got[0] != 0.5*2+900+0.1*3000 || got[1] != 1000 || &got[0] != &buf[:1][0] {
		t.Errorf("gorgo: %v %v", got, err)
	}
	if err := g.SetParam(CostQueueAtFirstToken, 1); err != nil {
		t.Fatal(err)
	}
	if got, _ = g.Eval(1000, rs, nil); got[0] != 0.5*2+900+0.1*1000 {
		t.Errorf("gorgo at first token: %v", got)
	}
	got, err = newTestCost(t, CostDynamo).Eval(1000, rs, nil)
	if err != nil || got[0] != 57+313 || got[1] != 63+3 {
		t.Errorf("dynamo: %v %v", got, err)
	}

	// The policies rank by the same models.
	in := DefaultPolicyInput()
	in.PromptTokens = 1000
	minTTFT := newTestCost(t, CostTTFT)
	minTTFT.SetParam(CostWeightRTT, 0)
	minTTFT.SetParam(CostWeightStall, 0)
	for p, c := range map[Policy]*Cost{PolicyMinTTFT: minTTFT,
		PolicyGORGO: newTestCost(t, CostGORGO), PolicyDynamo: newTestCost(t, CostDynamo)} {
		want, _ := c.Eval(1000, rs, nil)
		d, err := Decide(p, &in, rs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rs {
			if d.Scores[i].Score != want[i] {
				t.Errorf("%v row %d: score %v, cost %v", p, i, d.Scores[i].Score, want[i])
			}
		}
	}

	c := newTestCost(t, CostTTFT)
	if got, err := c.Eval(10, nil, nil); err != nil || len(got) != 0 {
		t.Errorf("no rows: %v %v", got, err)
	}
	_, err = c.Eval(50, rs, nil)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_cost_eval")
	bad := candidates(0)
	bad[0].PrefillRate = math.Inf(1)
	_, err = c.Eval(10, bad, nil)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_cost_eval")
}

func TestCostTuner(t *testing.T) {
	c := newTestCost(t, CostGORGO)
	if s, err := c.TunerStats(); err != nil || s.State != TunerOff || s.Samples != 0 {
		t.Fatalf("%+v %v", s, err)
	}
	if err := c.Observe(time.Second); err != nil { // ignored: not tuning
		t.Fatal(err)
	}
	if err := c.Tune(true); err != nil {
		t.Fatal(err)
	}
	if s, _ := c.TunerStats(); s.State != TunerMeasuring || !math.IsNaN(s.IncumbentP95Seconds) {
		t.Fatalf("%+v", s)
	}
	rng := rand.New(rand.NewSource(1))
	n := CostTuneWindow + 10*CostTuneHop
	for i := 0; i < n; i++ {
		if err := c.Observe(time.Duration(100+rng.Intn(900)) * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := c.TunerStats()
	if s.Samples != uint64(n) || s.Trials == 0 || s.Accepted > s.Trials ||
		math.IsNaN(s.IncumbentP95Seconds) || s.State == TunerOff {
		t.Errorf("after %d samples: %+v", n, s)
	}
	wRTT, _ := c.Param(CostWeightRTT)
	wQueue, _ := c.Param(CostWeightQueue)
	rttMax, _ := c.Param(CostWeightRTTMax)
	queueMin, _ := c.Param(CostWeightQueueMin)
	if wRTT < 0.05 || wRTT > rttMax || wQueue < queueMin || wQueue > 0.5 {
		t.Errorf("weights %v %v out of the guard rails", wRTT, wQueue)
	}
	if err := c.Tune(false); err != nil {
		t.Fatal(err)
	}
	if s, _ := c.TunerStats(); s.State != TunerOff {
		t.Errorf("stopped: %+v", s)
	}
	wantStatus(t, c.Observe(-time.Second), ErrInvalid, StatusInvalid, "lr_cost_observe")
	for _, k := range []CostKind{CostTTFT, CostDynamo} {
		wantStatus(t, newTestCost(t, k).Tune(true), ErrNotSupported, StatusNotSupported, "lr_cost_tune")
	}
}
