package libroute

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"
)

func sameFloat(a, b float64) bool {
	return a == b || (math.IsNaN(a) && math.IsNaN(b))
}

func candidates(ids ...InstanceID) []Candidate {
	out := make([]Candidate, len(ids))
	for i, id := range ids {
		out[i] = NewCandidate(id)
	}
	return out
}

func TestDecide(t *testing.T) {
	rs := candidates(0, 1, 2)
	rs[0].Inflight, rs[1].Inflight, rs[2].Inflight = 4, 1, 3
	in := DefaultPolicyInput()
	in.PromptTokens = 100
	in.Seed = 3
	d, err := Decide(PolicyLeastRequest, &in, rs)
	if err != nil {
		t.Fatal(err)
	}
	if d.Instance != 1 || d.Reason != ReasonLeastLoaded || d.Decider != PolicyLeastRequest ||
		d.Seed != 3 || d.AltInstance != InstanceNone || len(d.Scores) != 3 {
		t.Fatalf("decision %+v", d)
	}
	for i, s := range d.Scores {
		if s.Instance != rs[i].Instance || s.Score < d.Scores[1].Score {
			t.Errorf("score %d: %+v", i, s)
		}
	}

	// min-ttft: the TTFT cost, (prefill + prompt - cached) / rate.
	rs = candidates(0, 1)
	rs[0].PrefillTokens = 16000
	rs[1].CachedTokens, rs[1].PrefillTokens = 512, 800
	in.PromptTokens = 1024
	d, err = Decide(PolicyMinTTFT, &in, rs)
	if err != nil {
		t.Fatal(err)
	}
	if d.Instance != 1 || d.CachedTokens != 512 || d.BestCachedTokens != 512 ||
		math.Abs(d.Cost-(800+1024-512)/8000.0) > 1e-12 {
		t.Fatalf("min-ttft decision %+v", d)
	}

	// Round-robin follows LastInstance.
	in = DefaultPolicyInput()
	in.LastInstance = 5
	rs = candidates(2, 5, 9)
	if d, _ := Decide(PolicyRoundRobin, &in, rs); d.Instance != 9 {
		t.Errorf("after 5: %v", d.Instance)
	}
	in.LastInstance = 9
	if d, _ := Decide(PolicyRoundRobin, &in, rs); d.Instance != 2 {
		t.Errorf("after 9: %v", d.Instance)
	}

	// Deterministic for a seed, and the seed matters.
	rs = candidates(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	seen := map[InstanceID]bool{}
	for seed := uint64(0); seed < 64; seed++ {
		in := PolicyInput{Seed: seed, LastInstance: InstanceNone}
		a, err := Decide(PolicyRandom, &in, rs)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Decide(PolicyRandom, &in, rs)
		if a.Instance != b.Instance {
			t.Fatalf("seed %d: %v then %v", seed, a.Instance, b.Instance)
		}
		seen[a.Instance] = true
	}
	if len(seen) < 5 {
		t.Errorf("64 seeds chose %d instances", len(seen))
	}

	// Parameters: prefix-cache follows a hit of PREFIX_MIN_RATIO or more.
	rs = candidates(0, 1)
	rs[0].CachedTokens, rs[0].Inflight = 300, 5
	in = DefaultPolicyInput()
	in.PromptTokens = 1000
	if d, _ := Decide(PolicyPrefixCache, &in, rs); d.Instance != 1 {
		t.Errorf("0.3 < 0.5 followed the cache: %+v", d)
	}
	in.Params = DefaultParams()
	in.Params[ParamPrefixMinRatio] = 0.2
	if d, _ := Decide(PolicyPrefixCache, &in, rs); d.Instance != 0 || d.Reason != ReasonPrefixHit {
		t.Errorf("0.3 >= 0.2 did not follow the cache: %+v", d)
	}
	in.Params = []float64{0.2} // shorter: the rest take their defaults
	if d, _ := Decide(PolicyPrefixCache, &in, rs); d.Instance != 0 {
		t.Errorf("short params: %+v", d)
	}
	// nil input: the defaults (prompt 0).
	if _, err := Decide(PolicyRandom, nil, candidates(4)); err != nil {
		t.Error(err)
	}
}

func TestDecideErrors(t *testing.T) {
	const op = "lr_policy_decide"
	good := candidates(0, 1)
	in := DefaultPolicyInput()
	in.PromptTokens = 10
	bad := func(mod func(rs []Candidate)) []Candidate {
		rs := candidates(0, 1)
		mod(rs)
		return rs
	}
	_, err := Decide(PolicyRandom, &in, nil)
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	_, err = Decide(PolicyRandom, &in, bad(func(rs []Candidate) { rs[1].CachedTokens = 11 }))
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	_, err = Decide(PolicyMinTTFT, &in, bad(func(rs []Candidate) { rs[0].PrefillRate = 0 }))
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	_, err = Decide(PolicyRandom, &in, bad(func(rs []Candidate) { rs[0].KVUse = 1.5 }))
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	_, err = Decide(PolicyGORGO, &in, bad(func(rs []Candidate) { rs[0].RTTMs = math.NaN() }))
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	_, err = Decide(Policy(PolicyCount()), &in, good)
	wantStatus(t, err, ErrNotSupported, StatusNotSupported, op)
	_, err = Decide(Policy(-1), &in, good)
	wantStatus(t, err, ErrNotSupported, StatusNotSupported, op)

	in.Params = DefaultParams()
	in.Params[ParamPrefixMinRatio] = 2
	_, err = Decide(PolicyPrefixCache, &in, good)
	wantStatus(t, err, ErrRange, StatusRange, op)
	in.Params[ParamPrefixMinRatio] = math.NaN()
	_, err = Decide(PolicyPrefixCache, &in, good)
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	// A fraction for an integer key is LR_EINVAL, as for SetParam.
	in.Params = DefaultParams()
	in.Params[ParamLodestarCandidates] = 1.5
	_, err = Decide(PolicyLodestar, &in, good)
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)

	in = DefaultPolicyInput()
	mo := DefaultMlpOptions()
	mo.NInputs = 3
	m, err := NewMlp(&mo)
	if err != nil {
		t.Fatal(err)
	}
	in.Model = m
	_, err = Decide(PolicyLodestar, &in, good)
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	m.Close()
	if _, err := Decide(PolicyLodestar, &in, good); err != ErrClosed {
		t.Errorf("closed model: %v", err)
	}
}

// adaptive with a TTFT budget: it keeps its least-cost row when that is
// predicted to meet the budget, takes the one predicted to meet it when it
// would not (ReasonSLOSwitch), and the fastest when none would. Row 0
// queues 2 s of prefill and decodes nothing; row 1 queues nothing but
// decodes 100 requests at 0.1 s each to a first token: its cost is far
// above row 0's, its predicted TTFT far below.
func TestDecideAdaptiveDeadline(t *testing.T) {
	const op = "lr_policy_decide"
	rs := candidates(0, 1)
	rs[0].PrefillTokens = 16000
	rs[1].Class, rs[1].Inflight = 1, 100
	rs[1].TTFTSecondsPerDecoding, rs[1].TTFTSecondsPerToken = 0.1, 1.0/8000
	for i := range rs {
		rs[i].PrefillRate = 8000
	}
	if b, err := ParamAdaptiveDeadline.Bounds(); err != nil || b.Default != 1 || !b.Integer {
		t.Fatalf("ParamAdaptiveDeadline bounds %+v, %v", b, err)
	}
	cases := []struct {
		budget float64
		on     float64
		want   InstanceID
		reason Reason
	}{
		{0, 1, 0, ReasonMinCost},      // no deadline
		{5, 1, 0, ReasonMinCost},      // row 0 meets 5 s
		{1, 1, 1, ReasonSLOSwitch},    // only row 1 meets 1 s
		{0.01, 1, 1, ReasonSLOSwitch}, // none does: the fastest
		{1, 0, 0, ReasonMinCost},      // switched off
	}
	for _, c := range cases {
		in := DefaultPolicyInput()
		in.PromptTokens, in.Seed = 800, 3
		in.Params = DefaultParams()
		in.Params[ParamAdaptiveDeadline] = c.on
		in.TTFTBudgetSeconds = c.budget
		d, err := Decide(PolicyAdaptive, &in, rs)
		if err != nil {
			t.Fatalf("budget %v on %v: %v", c.budget, c.on, err)
		}
		if d.Instance != c.want || d.Reason != c.reason {
			t.Errorf("budget %v on %v: instance %v reason %v, want %v %v",
				c.budget, c.on, d.Instance, d.Reason, c.want, c.reason)
		}
	}
	// On by default: a budget alone switches.
	in := DefaultPolicyInput()
	in.PromptTokens, in.Seed, in.TTFTBudgetSeconds = 800, 3, 1
	if d, err := Decide(PolicyAdaptive, &in, rs); err != nil || d.Instance != 1 {
		t.Errorf("default params, budget 1 s: %+v, %v", d, err)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		in.TTFTBudgetSeconds = bad
		_, err := Decide(PolicyAdaptive, &in, rs)
		wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	}
}

// DualMap over a table with no ring rank 1 (0: not among the ring's
// candidates, or no ring) has no ring candidates and decides by load.
func TestDecideDualMapWithoutRingRanks(t *testing.T) {
	in := DefaultPolicyInput()
	in.PromptTokens, in.Seed = 10, 5
	rs := candidates(0, 1, 2)
	rs[0].Inflight, rs[1].Inflight, rs[2].Inflight = 3, 1, 2
	d, err := Decide(PolicyDualMap, &in, rs)
	if err != nil || d.Instance != 1 || d.Reason != ReasonLeastLoaded || d.Decider != PolicyDualMap {
		t.Fatalf("no ranks: %+v %v", d, err)
	}
	// Ranks other than 1 are no help either.
	rs[0].RingRank, rs[2].RingRank = 2, 3
	rs[0].Inflight, rs[1].Inflight, rs[2].Inflight = 2, 4, 0
	d, err = Decide(PolicyDualMap, &in, rs)
	if err != nil || d.Instance != 2 || d.Reason != ReasonLeastLoaded {
		t.Fatalf("ranks 2 and 3: %+v %v", d, err)
	}
}

// A table may name one instance twice: the policies rank rows.
func TestDecideDuplicateInstances(t *testing.T) {
	in := DefaultPolicyInput()
	in.PromptTokens, in.Seed = 10, 9
	rs := candidates(3, 3, 4)
	rs[0].Inflight, rs[1].Inflight, rs[2].Inflight = 5, 1, 2
	d, err := Decide(PolicyLeastRequest, &in, rs)
	if err != nil || d.Instance != 3 || len(d.Scores) != 3 {
		t.Fatalf("%+v %v", d, err)
	}
	if d.Scores[0].Instance != 3 || d.Scores[1].Instance != 3 || d.Scores[2].Instance != 4 ||
		!(d.Scores[1].Score < d.Scores[0].Score) || !(d.Scores[1].Score < d.Scores[2].Score) {
		t.Errorf("scores %+v", d.Scores)
	}
	for _, p := range []Policy{PolicyRandom, PolicyMinTTFT, PolicyGORGO} {
		if d, err := Decide(p, &in, rs); err != nil || (d.Instance != 3 && d.Instance != 4) {
			t.Errorf("%v: %+v %v", p, d, err)
		}
	}
}

func TestDecideLodestar(t *testing.T) {
	rs := candidates(0, 1, 2, 3)
	for i := range rs {
		rs[i].Inflight = uint32(i)
	}
	in := DefaultPolicyInput()
	in.PromptTokens, in.Seed = 100, 1
	d, err := Decide(PolicyLodestar, &in, rs)
	if err != nil || d.Reason != ReasonColdStart || d.Decider != PolicyPrefixCacheAndLoad {
		t.Fatalf("cold: %+v %v", d, err)
	}
	in.Params = DefaultParams()
	in.Params[ParamLodestarFallback] = float64(PolicyLeastRequest)
	if d, _ := Decide(PolicyLodestar, &in, rs); d.Decider != PolicyLeastRequest {
		t.Errorf("fallback: %+v", d)
	}
	o := DefaultMlpOptions()
	o.NInputs, o.Seed = uint32(LodestarFeatureCount()), 5
	m, err := NewMlp(&o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in.Params = DefaultParams()
	in.Params[ParamLodestarEpsilon] = 0
	in.Model = m
	d, err = Decide(PolicyLodestar, &in, rs)
	if err != nil || d.Decider != PolicyLodestar || d.Reason == ReasonColdStart || d.Reason == ReasonOOD {
		t.Fatalf("with a model: %+v %v", d, err)
	}
}

func TestRingKeys(t *testing.T) {
	for _, p := range allPolicies {
		key, ranks, err := p.RingKey()
		if err != nil || ranks > RingMaxK || (key == RingKeyNone) != (ranks == 0) {
			t.Errorf("%v: %v %d %v", p, key, ranks, err)
		}
	}
	if k, n, _ := PolicyRandom.RingKey(); k != RingKeyNone || n != 0 {
		t.Errorf("random: %v %d", k, n)
	}
	if k, _, _ := PolicySessionAffinity.RingKey(); k != RingKeySession {
		t.Errorf("session-affinity: %v", k)
	}
	if k, _, _ := PolicyDualMap.RingKey(); k != RingKeyHotness {
		t.Errorf("dualmap: %v", k)
	}
	_, _, err := Policy(PolicyCount()).RingKey()
	wantStatus(t, err, ErrNotSupported, StatusNotSupported, "lr_policy_ring_key")
}

func TestRouterCandidates(t *testing.T) {
	r, _ := newTestRouter(t, PolicyPrefixCache, instanceNames(40)...)
	if err := r.SetClass(1, ClassSpec{PrefillTokensPerSecond: 20000}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i += 3 {
		if err := r.ObserveRTT(InstanceID(i), 2*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DrainInstance(7, true); err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 256)
	for i := range toks {
		toks[i] = uint32(i * 7)
	}
	d, err := r.Route(&Request{ID: 1, Tokens: toks, Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Tokens: toks, Now: sec}
	rs, err := r.Candidates(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 39 {
		t.Fatalf("%d rows", len(rs))
	}
	for i, c := range rs {
		want := InstanceID(i)
		if i >= 7 {
			want++
		}
		if c.Instance != want || c.PrefillRate != 8000 || c.PrefixCaching != 1 {
			t.Errorf("row %d: %+v", i, c)
		}
		if c.Instance == d.Instance && (c.CachedTokens != 256 || c.Inflight != 1) {
			t.Errorf("the routed instance: %+v", c)
		}
		if c.Instance%3 == 0 && c.RTTMs != 2 {
			t.Errorf("rtt of %d: %v", c.Instance, c.RTTMs)
		}
	}
	again, _ := r.Candidates(req)
	for i := range rs {
		if rs[i] != again[i] {
			t.Errorf("row %d changed: %+v then %+v", i, rs[i], again[i])
		}
	}
	if s, _ := r.Stats(); s.DryRuns != 0 || s.Routes != 1 {
		t.Errorf("stats %+v", s)
	}

	empty, _ := newTestRouter(t, PolicyRandom)
	_, err = empty.Candidates(req)
	wantStatus(t, err, ErrState, StatusState, "lr_router_candidates")
	empty.Close()
	if _, err := empty.Candidates(req); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
}

func TestReasonCountsAndDecider(t *testing.T) {
	r, _ := newTestRouter(t, PolicyRoundRobin, instanceNames(4)...)
	c, err := r.ReasonCounts()
	if err != nil || len(c) != ReasonCount() {
		t.Fatalf("%v %v", c, err)
	}
	var last Decision
	for i := 0; i < 7; i++ {
		d, err := r.Route(&Request{ID: uint64(i), Tokens: make([]uint32, 64), Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		if d.Decider != PolicyRoundRobin || (i > 0 && d.Seed == last.Seed) {
			t.Errorf("route %d: %+v", i, d)
		}
		last = d
	}
	if _, err := r.Route(&Request{ID: 99, Tokens: make([]uint32, 64), Now: sec,
		Flags: RouteDryRun}); err != nil {
		t.Fatal(err)
	}
	c, _ = r.ReasonCounts()
	s, _ := r.Stats()
	var sum uint64
	for reason, n := range c {
		sum += n
		if reason < len(s.ByReason) && s.ByReason[reason] != n {
			t.Errorf("reason %v: %d, stats %d", Reason(reason), n, s.ByReason[reason])
		}
	}
	if c[ReasonRoundRobin] != 7 || sum != 7 {
		t.Errorf("counts %v", c)
	}
	r.Close()
	if _, err := r.ReasonCounts(); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
}

// agree fails unless Decide's replay e matches route d: instance, reason,
// cost, cached tokens, alternative, decider, seed and every score.
func agree(t *testing.T, what string, d, e Decision) {
	t.Helper()
	if e.Instance != d.Instance || e.Reason != d.Reason || e.CachedTokens != d.CachedTokens ||
		e.BestCachedTokens != d.BestCachedTokens || e.AltInstance != d.AltInstance ||
		e.Decider != d.Decider || e.Seed != d.Seed || !sameFloat(e.Cost, d.Cost) {
		t.Fatalf("%s:\nroute  %+v\nreplay %+v", what, d, e)
	}
	if len(e.Scores) != len(d.Scores) {
		t.Fatalf("%s: %d scores, route %d", what, len(e.Scores), len(d.Scores))
	}
	for k := range e.Scores {
		if e.Scores[k].Instance != d.Scores[k].Instance ||
			!sameFloat(e.Scores[k].Score, d.Scores[k].Score) {
			t.Fatalf("%s: score %d: %+v, route %+v", what, k, e.Scores[k], d.Scores[k])
		}
	}
}

// replay routes req as a dry run and, unless dryOnly, for real, and replays
// each through Candidates + PolicyInput (taken before the routes) + Decide
// with the route's seed and model m. It returns the recorded decision (the
// dry run's with dryOnly).
func replay(t *testing.T, what string, r *Router, req Request, m *Mlp, dryOnly bool) Decision {
	t.Helper()
	rs, err := r.Candidates(&req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	in, err := r.PolicyInput(&req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	in.Model = m
	flags := []RouteFlags{RouteDryRun | RouteScores, RouteScores}
	if dryOnly {
		flags = flags[:1]
	}
	var d Decision
	for _, f := range flags {
		req.Flags = f
		if d, err = r.Route(&req); err != nil {
			t.Fatalf("%s: route: %v", what, err)
		}
		in.Seed = d.Seed
		e, err := Decide(r.Policy(), &in, rs)
		if err != nil {
			t.Fatalf("%s: replay: %v", what, err)
		}
		agree(t, fmt.Sprintf("%s flags %d", what, f), d, e)
	}
	return d
}

// replayFleet is six instances of two classes, one without prefix caching,
// one with scraped stats.
func replayFleet(t *testing.T, p Policy, lo *LearnerOptions) *Router {
	t.Helper()
	o := DefaultRouterOptions()
	o.Policy, o.Seed, o.Learner = p, 11, lo
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatalf("NewRouter(%v): %v", p, err)
	}
	t.Cleanup(func() { r.Close() })
	for i := 0; i < 6; i++ {
		id, err := r.AddInstance(InstanceSpec{Name: instanceNames(6)[i], Class: uint32(i % 2),
			RTT: time.Duration(i+1) * 250 * time.Microsecond, NoPrefixCaching: i == 5})
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if err := r.SetStats(id, EngineStats{Running: 7, Waiting: 3, KVUse: 0.6,
				ScrapedAt: sec}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.SetClass(1, ClassSpec{PrefillTokensPerSecond: 30000}); err != nil {
		t.Fatal(err)
	}
	return r
}

func randTokens(rng *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(rng.Intn(50000))
	}
	return out
}

// Router.Candidates plus Router.PolicyInput plus Decide with the route's
// seed reproduce the route: instance, reason, cost, cached tokens,
// alternative, decider and every score, for every policy (Lodestar cold
// here; trained below). Dry runs and recorded routes alike.
func TestReplayAgreesWithRoute(t *testing.T) {
	shared := randTokens(rand.New(rand.NewSource(99)), 600)
	for _, p := range allPolicies {
		r := replayFleet(t, p, nil)
		rng := rand.New(rand.NewSource(int64(p) + 1))
		last := InstanceNone
		now := sec
		for i := 0; i < 24; i++ {
			now += 37_000_000
			toks := shared
			if i%3 != 0 {
				toks = append(append([]uint32(nil), shared[:64*(i%6)]...),
					randTokens(rng, 200+13*i)...)
			}
			req := Request{ID: uint64(i), Tokens: toks, TenantSalt: uint64(i % 2),
				ExpectedOutputTokens: uint32(i%4) * 50, Now: now}
			if i%5 == 0 {
				req.Session, req.HasSession = uint64(1000+i%2), true
			}
			// The cursor is the last instance round-robin chose.
			if in, err := r.PolicyInput(&req); err != nil || in.LastInstance != last {
				t.Fatalf("%v request %d: cursor %v, want %v (%v)", p, i, in.LastInstance, last, err)
			}
			d := replay(t, fmt.Sprintf("%v request %d", p, i), r, req, nil, false)
			if d.Decider == PolicyRoundRobin {
				last = d.Instance
			}
			if i%4 == 3 {
				if err := r.FirstToken(uint64(i-1), now); err != nil {
					t.Fatal(err)
				}
			}
			if i%6 == 5 {
				if err := r.Complete(uint64(i-4), 20, now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// A trained Lodestar router replays with the model LearnerSave exports.
func TestReplayTrainedLodestar(t *testing.T) {
	lo := DefaultLearnerOptions()
	lo.MinSamples, lo.RetrainEvery, lo.Epochs = 64, 64, 5
	mo := DefaultMlpOptions()
	mo.HiddenLayers, mo.Width = 2, 16
	lo.Mlp = &mo
	r := replayFleet(t, PolicyLodestar, &lo)
	_, err := r.LearnerSave()
	wantStatus(t, err, ErrState, StatusState, "lr_router_learner_save")
	// The model decides wherever it can (no out-of-range fallback).
	if err := r.SetParam(ParamLodestarOOD, 0); err != nil {
		t.Fatal(err)
	}
	now := sec
	for i := 0; i < 160; i++ {
		now += 5_000_000
		rng := rand.New(rand.NewSource(int64(i % 24)))
		id := uint64(i)
		if _, err := r.Route(&Request{ID: id, Tokens: randTokens(rng, 150+i%40), Now: now}); err != nil {
			t.Fatal(err)
		}
		if err := r.FirstToken(id, now+uint64(1+i%7)*1_000_000); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := r.Complete(id, 10, now+9_000_000); err != nil {
				t.Fatal(err)
			}
		}
	}
	if trained, err := r.LearnStep(LearnForce); err != nil || !trained {
		t.Fatalf("LearnStep: %v %v", trained, err)
	}
	blob, err := r.LearnerSave()
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadMlp(blob)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.NInputs() != LodestarFeatureCount() {
		t.Fatalf("model of %d inputs", m.NInputs())
	}
	for k := 0; k < 24; k++ {
		now += 1_000_000
		rng := rand.New(rand.NewSource(int64(k % 24)))
		req := Request{ID: uint64(1000 + k), Tokens: randTokens(rng, 150+7*k), Now: now,
			Session: uint64(k % 3), HasSession: true}
		d := replay(t, fmt.Sprintf("lodestar request %d", k), r, req, m, false)
		if d.Decider != PolicyLodestar {
			t.Fatalf("request %d: decided by %v", k, d.Decider)
		}
	}
	// The model in service is still the one exported.
	again, err := r.LearnerSave()
	if err != nil || string(again) != string(blob) {
		t.Errorf("LearnerSave changed (%v)", err)
	}
}

// GORGO during a tuner trial: the weights in service are not the incumbent
// Params reports, and PolicyInput has the ones in service.
func TestReplayGORGOTrial(t *testing.T) {
	r := replayFleet(t, PolicyGORGO, nil)
	now := sec
	for i := 0; i < 200; i++ { // a trial runs after the first window
		now += 2_000_000
		rng := rand.New(rand.NewSource(int64(i % 24)))
		id := uint64(i)
		if _, err := r.Route(&Request{ID: id, Tokens: randTokens(rng, 150+i%40), Now: now}); err != nil {
			t.Fatal(err)
		}
		if err := r.FirstToken(id, now+uint64(1+i%5)*1_000_000); err != nil {
			t.Fatal(err)
		}
		if err := r.Complete(id, 4, now+9_000_000); err != nil {
			t.Fatal(err)
		}
	}
	probe := Request{Tokens: make([]uint32, 256)}
	served, err := r.PolicyInput(&probe)
	if err != nil {
		t.Fatal(err)
	}
	incumbent, err := r.Params()
	if err != nil {
		t.Fatal(err)
	}
	if served.Params[ParamGORGOWeightRTT] == incumbent[ParamGORGOWeightRTT] &&
		served.Params[ParamGORGOWeightQueue] == incumbent[ParamGORGOWeightQueue] {
		t.Fatalf("no trial: weights in service %v, incumbent %v",
			served.Params[ParamGORGOWeightRTT:ParamGORGOWeightQueue+1],
			incumbent[ParamGORGOWeightRTT:ParamGORGOWeightQueue+1])
	}
	for k := 0; k < 12; k++ {
		now += 1_000_000
		rng := rand.New(rand.NewSource(int64(k % 24)))
		req := Request{ID: uint64(1000 + k), Tokens: randTokens(rng, 150+11*k), Now: now}
		replay(t, fmt.Sprintf("gorgo request %d", k), r, req, nil, false)
	}
	// No first token since: the trial goes on.
	if in, _ := r.PolicyInput(&probe); in.Params[ParamGORGOWeightRTT] != served.Params[ParamGORGOWeightRTT] {
		t.Errorf("weights moved without a first token")
	}
}

func TestRouterPolicyInput(t *testing.T) {
	const op = "lr_router_policy_input"
	r, _ := newTestRouter(t, PolicyRoundRobin, instanceNames(4)...)
	req := Request{Tokens: make([]uint32, 100), ExpectedOutputTokens: 7}
	in, err := r.PolicyInput(&req)
	if err != nil {
		t.Fatal(err)
	}
	if in.PromptTokens != 100 || in.ExpectedOutputTokens != 7 || in.BlockTokens != 16 ||
		in.LastInstance != InstanceNone || in.Seed != 0 || in.Model != nil ||
		len(in.Params) != ParamCount() || in.TTFTBudgetSeconds != 0 {
		t.Fatalf("%+v", in)
	}
	// A deadline reaches the policy as the seconds left at Now.
	for _, c := range []struct {
		deadline uint64
		budget   float64
	}{{3 * sec, 2}, {sec + sec/4, 0.25}, {sec, 1e-9}, {sec - 1, 1e-9}, {0, 0}} {
		q := Request{Tokens: make([]uint32, 100), Now: sec, Deadline: c.deadline}
		if in, err := r.PolicyInput(&q); err != nil || in.TTFTBudgetSeconds != c.budget {
			t.Errorf("deadline %d at %d: budget %v, want %v (%v)",
				c.deadline, sec, in.TTFTBudgetSeconds, c.budget, err)
		}
	}
	if v, _ := r.Param(ParamPrefixMinRatio); in.Params[ParamPrefixMinRatio] != v {
		t.Errorf("prefix_min_ratio %v, router %v", in.Params[ParamPrefixMinRatio], v)
	}
	// The router's default output applies to 0, as in Route.
	if err := r.SetParam(ParamDefaultOutputTokens, 300); err != nil {
		t.Fatal(err)
	}
	req.ExpectedOutputTokens = 0
	if in, _ := r.PolicyInput(&req); in.ExpectedOutputTokens != 300 {
		t.Errorf("default output: %d", in.ExpectedOutputTokens)
	}
	req.ID, req.Now = 1, sec
	d, err := r.Route(&req)
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := r.PolicyInput(&req); in.LastInstance != d.Instance {
		t.Errorf("cursor %v after a route to %v", in.LastInstance, d.Instance)
	}
	// Checked as Route checks a request; nothing changes.
	_, err = r.PolicyInput(&Request{Tokens: make([]uint32, 10), Boundaries: []uint32{5, 2}})
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	_, err = r.PolicyInput(&Request{Tokens: make([]uint32, 10), Flags: 1 << 30})
	wantStatus(t, err, ErrInvalid, StatusInvalid, op)
	if s, _ := r.Stats(); s.Routes != 1 || s.DryRuns != 0 {
		t.Errorf("stats %+v", s)
	}
	r.Close()
	if _, err := r.PolicyInput(&req); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
	if _, err := r.LearnerSave(); err != ErrClosed {
		t.Errorf("LearnerSave after Close: %v", err)
	}
	// A router that never chose Lodestar has no learner.
	r2, _ := newTestRouter(t, PolicyRandom, instanceNames(2)...)
	_, err = r2.LearnerSave()
	wantStatus(t, err, ErrState, StatusState, "lr_router_learner_save")
}
