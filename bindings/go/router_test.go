package libroute

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	if VersionNumber() != HeaderVersionNumber {
		t.Fatalf("loaded library %d, headers %d", VersionNumber(), HeaderVersionNumber)
	}
	want := fmt.Sprintf("%d.%d.%d", HeaderVersionMajor, HeaderVersionMinor, HeaderVersionPatch)
	if Version() != want {
		t.Fatalf("Version() = %q, want %q", Version(), want)
	}
}

// Follow-up turns of a conversation carry the whole history, so they must
// go back to the instance that served the previous turn and cached it.
// The cache-affine policies are checked; messages are short next to the
// system prompts so that even the second turn's cached share passes
// prefix-cache's 0.5 threshold. DualMap is left out on purpose: its hash
// key grows with the prompt, so a turn may land on other candidates.
func TestMultiTurnFollowUpsStick(t *testing.T) {
	for _, policy := range []Policy{
		PolicyPrefixCache, PolicyPrefixCacheAndLoad, PolicySGLangCacheAware,
		PolicyPreble, PolicyRanvier,
	} {
		t.Run(policy.String(), func(t *testing.T) {
			r, _ := newTestRouter(t, policy, instanceNames(4)...)
			rng := rand.New(rand.NewSource(1))
			convs := newConversations(rng, 12)
			last := make([]InstanceID, len(convs))
			prevLen := make([]int, len(convs))
			now, id := sec, uint64(0)
			used := map[InstanceID]bool{}
			for turn := 0; turn < 5; turn++ {
				for c, cv := range convs {
					cv.push(rng, 10+rng.Intn(50), uint32(c+1)) // user
					now += sec / 20
					id++
					d, err := r.Route(&Request{
						ID: id, Tokens: cv.tokens, Boundaries: cv.boundaries,
						Now: now,
					})
					if err != nil {
						t.Fatalf("turn %d conv %d: %v", turn, c, err)
					}
					used[d.Instance] = true
					if turn > 0 {
						if d.Instance != last[c] {
							t.Errorf("turn %d conv %d: went to %d (%v), previous turn on %d",
								turn, c, d.Instance, d.Reason, last[c])
						}
						if want := uint32(prevLen[c] / 16 * 16); d.CachedTokens < want {
							t.Errorf("turn %d conv %d: cached %d, want >= %d",
								turn, c, d.CachedTokens, want)
						}
					}
					last[c], prevLen[c] = d.Instance, len(cv.tokens)
					if err := r.FirstToken(id, now+sec/10); err != nil {
						t.Fatal(err)
					}
					if err := r.Complete(id, 50, now+sec/5); err != nil {
						t.Fatal(err)
					}
					cv.push(rng, 20+rng.Intn(80), uint32(c*7+1)) // reply
				}
			}
			if len(used) < 2 {
				t.Errorf("every conversation on one instance: %v", used)
			}
			s, err := r.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.Routes != id || s.Inflight != 0 || s.CachedTokens == 0 ||
				s.ByReason[ReasonPrefixHit] == 0 && s.ByReason[ReasonMinCost] == 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func zeroLoad(s LoadSnapshot) bool {
	return s.Inflight == 0 && s.Queued == 0 && s.PrefillTokens == 0 &&
		s.QueuedTokens == 0 && s.DecodeTokens == 0 && s.KVTokens == 0 &&
		s.PromptTokens == 0
}

// Whatever order the events arrive in, each request's counters come off
// exactly once.
func TestLifecycleReturnsCountersToZero(t *testing.T) {
	r, ids := newTestRouter(t, PolicyLeastRequest, instanceNames(3)...)
	rng := rand.New(rand.NewSource(2))
	const n = 60
	for i := uint64(1); i <= n; i++ {
		toks := make([]uint32, 100+rng.Intn(400))
		for j := range toks {
			toks[j] = rng.Uint32()
		}
		if _, err := r.Route(&Request{ID: i, Tokens: toks, ExpectedOutputTokens: 64, Now: i}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := r.Stats()
	if s.Inflight != n {
		t.Fatalf("in flight %d, want %d", s.Inflight, n)
	}
	var inflight, queued uint32
	for _, id := range ids {
		l, err := r.InstanceLoad(id)
		if err != nil {
			t.Fatal(err)
		}
		inflight += l.Inflight
		queued += l.Queued
		if l.Inflight == 0 || l.PrefillTokens == 0 || l.KVTokens == 0 {
			t.Errorf("instance %d idle after least-request routing: %+v", id, l)
		}
	}
	if inflight != n || queued != n {
		t.Fatalf("in flight %d queued %d, want %d", inflight, queued, n)
	}
	// A third complete after a first token, a third fail while queued,
	// a third complete straight from the queue; repeats are harmless.
	for i := uint64(1); i <= n; i++ {
		now := 1000 + i
		var err error
		switch i % 3 {
		case 0:
			if err = r.FirstToken(i, now); err == nil {
				if err = r.FirstToken(i, now+1); err == nil {
					err = r.Complete(i, 10, now+2)
				}
			}
		case 1:
			err = r.Fail(i, now)
		case 2:
			err = r.Complete(i, 0, now)
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	for _, id := range ids {
		l, err := r.InstanceLoad(id)
		if err != nil {
			t.Fatal(err)
		}
		if !zeroLoad(l) {
			t.Errorf("instance %d not back to zero: %+v", id, l)
		}
	}
	if s, _ := r.Stats(); s.Inflight != 0 || s.Routes != n {
		t.Errorf("stats after the lifecycle: %+v", s)
	}
	// Every request has ended: any further event is for an unknown id.
	wantStatus(t, r.FirstToken(1, 5000), ErrNotFound, StatusNotFound, "lr_router_first_token")
	wantStatus(t, r.Complete(2, 1, 5000), ErrNotFound, StatusNotFound, "lr_router_complete")
	wantStatus(t, r.Fail(3, 5000), ErrNotFound, StatusNotFound, "lr_router_fail")
}

func TestObserveCached(t *testing.T) {
	const sec = uint64(1e9)
	r, _ := newTestRouter(t, PolicyAdaptive, instanceNames(2)...)
	toks := make([]uint32, 512)
	for j := range toks {
		toks[j] = uint32(j*7919 + 1)
	}
	if _, err := r.Route(&Request{ID: 1, Tokens: toks, Now: 1 * sec}); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(1, 1, 2*sec); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{ID: 2, Tokens: toks, Now: 3 * sec})
	if err != nil || d.CachedTokens == 0 {
		t.Fatalf("second route: %+v, %v", d, err)
	}
	if err := r.ObserveCached(2, 0, 4*sec); err != nil { // nothing reused
		t.Fatal(err)
	}
	wantStatus(t, r.ObserveCached(2, 513, 4*sec), ErrInvalid, StatusInvalid, "lr_router_observe_cached")
	wantStatus(t, r.ObserveCached(9, 0, 4*sec), ErrNotFound, StatusNotFound, "lr_router_observe_cached")
	rows, err := r.Candidates(&Request{ID: 3, Tokens: toks, Now: 5 * sec})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		want := 0.0
		if row.Instance == d.Instance {
			want = 1.0 / 3 // one report of all lost, over 1 + a prior of 2
		}
		if math.Abs(row.CachedLost-want) > 1e-12 {
			t.Errorf("instance %d: CachedLost %g, want %g", row.Instance, row.CachedLost, want)
		}
	}
	s, _ := r.Stats()
	if s.ObservedReports != 1 || s.ObservedExpectedTokens != uint64(d.CachedTokens) || s.ObservedCachedTokens != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestErrorsCarryStatus(t *testing.T) {
	r, ids := newTestRouter(t, PolicyPrefixCache)
	toks := []uint32{1, 2, 3, 4}

	_, err := r.Route(&Request{ID: 1, Tokens: toks})
	wantStatus(t, err, ErrState, StatusState, "lr_router_route")

	ids = append(ids, 0)
	if ids[0], err = r.AddInstance(InstanceSpec{Name: "a:1"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.AddInstance(InstanceSpec{Name: "a:1"})
	wantStatus(t, err, ErrExist, StatusExist, "lr_router_add_instance")
	_, err = r.AddInstance(InstanceSpec{Name: "a\x00b"})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_add_instance")
	_, err = r.AddInstance(InstanceSpec{Name: ""})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_add_instance")
	_, err = r.AddInstance(InstanceSpec{Name: "b:1", RTT: 2 * time.Minute})
	wantStatus(t, err, ErrRange, StatusRange, "lr_router_add_instance")
	_, err = r.FindInstance("nope")
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_find_instance")

	if _, err := r.Route(&Request{ID: 1, Tokens: toks}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Route(&Request{ID: 1, Tokens: toks})
	wantStatus(t, err, ErrExist, StatusExist, "lr_router_route")
	_, err = r.Route(&Request{ID: 2, Tokens: toks, Boundaries: []uint32{3, 2}})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_route")

	wantStatus(t, r.FirstToken(99, 1), ErrNotFound, StatusNotFound, "lr_router_first_token")
	wantStatus(t, r.Complete(99, 1, 1), ErrNotFound, StatusNotFound, "lr_router_complete")
	wantStatus(t, r.Fail(99, 1), ErrNotFound, StatusNotFound, "lr_router_fail")
	wantStatus(t, r.Move(99, ids[0]), ErrNotFound, StatusNotFound, "lr_router_move")
	wantStatus(t, r.RemoveInstance(77), ErrNotFound, StatusNotFound, "lr_router_remove_instance")
	wantStatus(t, r.DrainInstance(77, true), ErrNotFound, StatusNotFound, "lr_router_drain_instance")
	wantStatus(t, r.ObserveRTT(77, time.Millisecond), ErrNotFound, StatusNotFound, "lr_router_observe_rtt")
	wantStatus(t, r.ObserveRTT(ids[0], -time.Millisecond), ErrInvalid, StatusInvalid, "lr_router_observe_rtt")
	wantStatus(t, r.ObserveRTT(ids[0], time.Hour), ErrRange, StatusRange, "lr_router_observe_rtt")
	_, err = r.InstanceLoad(77)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_instance_load")
	wantStatus(t, r.SetStats(ids[0], EngineStats{KVUse: 2}), ErrInvalid, StatusInvalid, "lr_router_set_stats")
	wantStatus(t, r.SetStats(ids[0], EngineStats{KVUse: math.NaN()}), ErrInvalid, StatusInvalid, "lr_router_set_stats")
	wantStatus(t, r.SetClass(0, ClassSpec{PrefillTokensPerSecond: 0}), ErrRange, StatusRange, "lr_router_set_class")
	wantStatus(t, r.SetPolicy(Policy(PolicyCount())), ErrInvalid, StatusInvalid, "lr_router_set_policy")
	wantStatus(t, r.SetParam(ParamPrefixMinRatio, 2), ErrRange, StatusRange, "lr_router_set_param")
	wantStatus(t, r.SetParam(ParamPrefixMinRatio, math.NaN()), ErrInvalid, StatusInvalid, "lr_router_set_param")
	wantStatus(t, r.SetParam(Param(ParamCount()), 1), ErrNotSupported, StatusNotSupported, "lr_router_set_param")
	_, err = r.Param(Param(-1))
	wantStatus(t, err, ErrNotSupported, StatusNotSupported, "lr_router_get_param")
	wantStatus(t, r.ImportDelta([]byte("not a delta"), 1), ErrCorrupt, StatusCorrupt, "lr_router_import_delta")
	_, err = r.KVRemoved(77, []uint64{1})
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_kv_removed")
	_, err = ParsePolicy("no-such-policy")
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_policy_from_name")

	o := DefaultRouterOptions()
	o.Policy = Policy(PolicyCount())
	_, err = NewRouter(&o)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_create")
	o = DefaultRouterOptions()
	o.IndexTTL = -time.Second
	_, err = NewRouter(&o)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_create")

	// The message names the call, the library's text and the status.
	err = r.FirstToken(99, 1)
	msg := err.Error()
	if !strings.Contains(msg, "lr_router_first_token") || !strings.Contains(msg, "LR_ENOENT") ||
		!strings.Contains(msg, StatusNotFound.Message()) {
		t.Errorf("message %q", msg)
	}
	// A wrapped error still matches.
	if !errors.Is(fmt.Errorf("routing: %w", err), ErrNotFound) {
		t.Error("wrapped error does not match")
	}
	// A sentinel with an Op matches that call only.
	if !errors.Is(err, &Error{Status: StatusNotFound, Op: "lr_router_first_token"}) ||
		errors.Is(err, &Error{Status: StatusNotFound, Op: "lr_router_fail"}) {
		t.Error("Op matching")
	}
}

func TestStatusNames(t *testing.T) {
	all := []Status{
		StatusOK, StatusInvalid, StatusNoMem, StatusRange, StatusNotFound,
		StatusExist, StatusLimit, StatusCorrupt, StatusVersion,
		StatusNotSupported, StatusState, StatusBufSize, StatusGap,
		StatusBusy, StatusExpired,
	}
	for i, s := range all {
		if int(s) != i {
			t.Errorf("%v = %d, want %d", s, s, i)
		}
		if !strings.HasPrefix(s.String(), "LR_") || s.String() == "LR_UNKNOWN" ||
			s.Message() == "" || s.Message() == "unknown status" {
			t.Errorf("status %d: %q %q", i, s, s.Message())
		}
		if i > 0 {
			if e := allSentinels[i-1].(*Error); e.Status != s {
				t.Errorf("sentinel %d has %v", i-1, e.Status)
			}
		}
	}
	// A status the library knows and the binding does not would show here.
	next := Status(len(all))
	if next.String() != "LR_UNKNOWN" {
		t.Errorf("the library has a status %d (%v) the binding lacks", next, next)
	}
	if next.Message() != "unknown status" {
		t.Errorf("Message(%d) = %q", next, next.Message())
	}
}

var allPolicies = []Policy{
	PolicyRandom, PolicyRoundRobin, PolicyLeastRequest, PolicyLeastLoad,
	PolicySessionAffinity, PolicyConsistentHash, PolicyPrefixCache,
	PolicyPrefixCacheAndLoad, PolicySGLangCacheAware, PolicyPreble,
	PolicyMinTTFT, PolicyDynamo, PolicyDualMap, PolicyGORGO, PolicyRanvier,
	PolicyLodestar, PolicyAdaptive, PolicyLoRAAffinity, PolicyAIBrixLoRA,
	PolicyLLMDPD, PolicyDynamoPD,
}

func TestPolicies(t *testing.T) {
	if len(allPolicies) != PolicyCount() {
		t.Fatalf("%d policies bound, lr_policy_count() is %d", len(allPolicies), PolicyCount())
	}
	r, ids := newTestRouter(t, PolicyRandom, instanceNames(3)...)
	for i, p := range allPolicies {
		if int(p) != i {
			t.Errorf("%v = %d, want %d", p, p, i)
		}
		q, err := ParsePolicy(p.String())
		if err != nil || q != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), q, err)
		}
		if err := r.SetPolicy(p); err != nil {
			t.Fatalf("SetPolicy(%v): %v", p, err)
		}
		if r.Policy() != p {
			t.Errorf("Policy() = %v, want %v", r.Policy(), p)
		}
		d, err := r.Route(&Request{ID: uint64(i + 1), Tokens: make([]uint32, 64),
			Flags: RouteDryRun, Now: sec})
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		if d.Instance > ids[len(ids)-1] || d.Reason.String() == "" ||
			strings.HasPrefix(d.Reason.String(), "Reason(") {
			t.Errorf("%v: decision %+v", p, d)
		}
	}
	if s := Policy(PolicyCount()).String(); s != fmt.Sprintf("Policy(%d)", PolicyCount()) {
		t.Errorf("out-of-range policy prints %q", s)
	}
	for reason := ReasonNone; reason <= ReasonWhole; reason++ {
		if strings.HasPrefix(reason.String(), "Reason(") {
			t.Errorf("reason %d has no name", reason)
		}
	}
	if s := (ReasonWhole + 1).String(); !strings.HasPrefix(s, "Reason(") {
		t.Errorf("the library names reason %d %q; the binding lacks it", ReasonWhole+1, s)
	}
	if ReasonCount() != int(ReasonWhole)+1 {
		t.Errorf("lr_reason_count() = %d, the binding names %d", ReasonCount(), ReasonWhole+1)
	}
}

var allParams = []Param{
	ParamPrefixMinRatio, ParamBoundedLoad, ParamAIBrixImbalance, ParamAIBrixStddev,
	ParamSGLangAbs, ParamSGLangRel, ParamSGLangMinRatio, ParamPrebleHit,
	ParamDynamoOverlap, ParamDynamoTemperature, ParamTTFTSLOSeconds,
	ParamDualMapKeyTokens, ParamDualMapMaxKeyBlocks, ParamDualMapWindow,
	ParamGORGOWeightRTT, ParamGORGOWeightQueue, ParamGORGOSigma, ParamGORGOFrozen,
	ParamGORGOWeightRTTMax, ParamGORGOWeightQueueMin, ParamRanvierPressure,
	ParamSessionTokens, ParamStatsMaxAgeSeconds, ParamDefaultOutputTokens,
	ParamGORGOReleaseAtFirstToken, ParamLodestarEpsilon, ParamLodestarTie,
	ParamLodestarKVThreshold, ParamLodestarKFilterTokens, ParamLodestarOOD,
	ParamLodestarFallback, ParamLodestarCandidates, ParamLodestarMaxTTFTSeconds,
	ParamAdaptiveWorkWeight, ParamAdaptiveContention, ParamAdaptiveTieSeconds,
	ParamAdaptiveFreshSeconds, ParamAdaptiveRTTWeight, ParamAdaptiveCalibrate,
	ParamClockSkewSeconds, ParamSaturationQueue, ParamSaturationKV,
	ParamFairInputWeight, ParamFairOutputWeight, ParamAdaptiveDeadline,
	ParamSaturationPrefillSeconds, ParamAdapterLoadSeconds,
	ParamTierCPUWeight, ParamTierDiskWeight,
	ParamKVBytesPerToken, ParamKVGBpsNode, ParamKVGBpsRack, ParamKVGBpsRegion,
	ParamKVGBpsWAN, ParamPDPrefillPolicy, ParamPDMinUncached,
	ParamPDLocalMaxTokens, ParamPDLocalMaxRatio, ParamAdaptivePDStall,
	ParamNarrowAbove, ParamNarrowWidth,
}

func TestParams(t *testing.T) {
	if len(allParams) != ParamCount() {
		t.Fatalf("%d params bound, lr_param_count() is %d", len(allParams), ParamCount())
	}
	r, _ := newTestRouter(t, PolicyGORGO, "a:1")
	for i, p := range allParams {
		if int(p) != i {
			t.Errorf("param %d = %d", i, p)
		}
		b, err := p.Bounds()
		if err != nil {
			t.Fatalf("Bounds(%d): %v", p, err)
		}
		if !(b.Lo <= b.Default && b.Default <= b.Hi) {
			t.Errorf("param %d: bounds %+v", p, b)
		}
		if b.Integer && b.Default != math.Floor(b.Default) {
			t.Errorf("param %d: integer with default %v", p, b.Default)
		}
		v, err := r.Param(p)
		if err != nil || v != b.Default {
			t.Errorf("param %d = %v, %v; default %v", p, v, err, b.Default)
		}
		if err := r.SetParam(p, b.Hi); err != nil {
			t.Errorf("SetParam(%d, hi %v): %v", p, b.Hi, err)
		}
		if v, _ := r.Param(p); v != b.Hi {
			t.Errorf("param %d = %v after setting %v", p, v, b.Hi)
		}
		if !math.IsInf(b.Hi, 1) {
			wantStatus(t, r.SetParam(p, b.Hi*2+1), ErrRange, StatusRange, "lr_router_set_param")
		}
		if err := r.SetParam(p, b.Default); err != nil {
			t.Errorf("SetParam(%d, default): %v", p, err)
		}
	}
	_, err := Param(ParamCount()).Bounds()
	wantStatus(t, err, ErrNotSupported, StatusNotSupported, "lr_param_bounds")
	// LR_BOUNDS_INTEGER: a fraction is refused, a whole number taken.
	if b, _ := ParamSessionTokens.Bounds(); !b.Integer {
		t.Error("session tokens is not an integer key")
	}
	if b, _ := ParamTTFTSLOSeconds.Bounds(); b.Integer {
		t.Error("the TTFT SLO is an integer key")
	}
	wantStatus(t, r.SetParam(ParamSessionTokens, 12.5), ErrInvalid, StatusInvalid, "lr_router_set_param")
	if err := r.SetParam(ParamSessionTokens, 12); err != nil {
		t.Error(err)
	}
	if err := r.SetParam(ParamDynamoTemperature, 0.5); err != nil {
		t.Fatal(err)
	}
	all, err := r.Params()
	if err != nil || len(all) != ParamCount() || all[ParamSessionTokens] != 12 ||
		all[ParamDynamoTemperature] != 0.5 {
		t.Errorf("Params() = %v, %v", all, err)
	}
	def := DefaultParams()
	if len(def) != ParamCount() || def[ParamTTFTSLOSeconds] != 5 {
		t.Errorf("DefaultParams() = %v", def)
	}
}

func TestScores(t *testing.T) {
	r, ids := newTestRouter(t, PolicyPrefixCache, instanceNames(5)...)
	toks := make([]uint32, 256)
	for i := range toks {
		toks[i] = uint32(i * 7)
	}
	if _, err := r.Route(&Request{ID: 1, Tokens: toks, Now: sec}); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{ID: 2, Tokens: toks, Flags: RouteScores | RouteDryRun, Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Scores) != len(ids) {
		t.Fatalf("%d scores for %d instances", len(d.Scores), len(ids))
	}
	for i, s := range d.Scores {
		if s.Instance != ids[i] {
			t.Errorf("score %d for instance %d, want %d", i, s.Instance, ids[i])
		}
		if (s.Instance == d.Instance) != (s.CachedTokens == 256) {
			t.Errorf("score %+v, decision %+v", s, d)
		}
	}
	// A short buffer is grown, a big one reused.
	d = Decision{Scores: make([]Score, 0, 1)}
	if err := r.RouteInto(&Request{ID: 3, Tokens: toks, Flags: RouteScores | RouteDryRun}, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Scores) != len(ids) {
		t.Fatalf("%d scores after growing", len(d.Scores))
	}
	buf := make([]Score, 0, 64)
	d = Decision{Scores: buf}
	if err := r.RouteInto(&Request{ID: 4, Tokens: toks, Flags: RouteScores | RouteDryRun}, &d); err != nil {
		t.Fatal(err)
	}
	if &d.Scores[0] != &buf[:1][0] {
		t.Error("a large enough buffer was not reused")
	}
	// Without RouteScores, none.
	if err := r.RouteInto(&Request{ID: 5, Tokens: toks, Flags: RouteDryRun}, &d); err != nil || len(d.Scores) != 0 {
		t.Errorf("scores without RouteScores: %v %v", d.Scores, err)
	}
	if s, _ := r.Stats(); s.Routes != 1 || s.DryRuns != 4 || s.Inflight != 1 {
		t.Errorf("dry runs recorded something: %+v", s)
	}
}

func TestInstances(t *testing.T) {
	r, ids := newTestRouter(t, PolicyRoundRobin, instanceNames(3)...)
	if r.InstanceCount() != 3 {
		t.Fatalf("InstanceCount() = %d", r.InstanceCount())
	}
	for i, n := range instanceNames(3) {
		if id, err := r.FindInstance(n); err != nil || id != ids[i] {
			t.Errorf("FindInstance(%q) = %d, %v", n, id, err)
		}
	}
	if err := r.DrainInstance(ids[0], true); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 6; i++ {
		d, err := r.Route(&Request{ID: i, Tokens: []uint32{1, 2, 3}, Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		if d.Instance == ids[0] {
			t.Fatal("routed to a draining instance")
		}
	}
	if s, _ := r.Stats(); s.Instances != 3 || s.Routable != 2 {
		t.Errorf("stats %+v", s)
	}
	if err := r.DrainInstance(ids[0], false); err != nil {
		t.Fatal(err)
	}
	// Removing an instance drops its requests: their events are unknown.
	l, _ := r.InstanceLoad(ids[1])
	if l.Inflight == 0 {
		t.Fatal("round robin skipped an instance")
	}
	if err := r.RemoveInstance(ids[1]); err != nil {
		t.Fatal(err)
	}
	var lost int
	for i := uint64(1); i <= 6; i++ {
		if err := r.Complete(i, 1, 2*sec); errors.Is(err, ErrNotFound) {
			lost++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if lost != int(l.Inflight) {
		t.Errorf("%d events unknown, %d requests were on the removed instance", lost, l.Inflight)
	}
	if _, err := r.FindInstance(instanceNames(3)[1]); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed instance still found: %v", err)
	}
	if r.InstanceCount() != 2 {
		t.Errorf("InstanceCount() = %d", r.InstanceCount())
	}
}

func TestTelemetry(t *testing.T) {
	r, ids := newTestRouter(t, PolicyMinTTFT, "a:1", "b:1")
	if _, err := r.AddInstance(InstanceSpec{Name: "c:1", Class: 2, NoPrefixCaching: true,
		RTT: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	c, _ := r.FindInstance("c:1")
	l, err := r.InstanceLoad(c)
	if err != nil {
		t.Fatal(err)
	}
	// The RTT given at add time stands in until a probe; the snapshot
	// shows probes only.
	if l.Class != 2 || l.PrefixCaching || l.HasRTT || l.HasStats {
		t.Errorf("load of c: %+v", l)
	}
	if err := r.SetStats(ids[0], EngineStats{Running: 3, Waiting: 4, KVUse: 0.5, ScrapedAt: 10 * sec}); err != nil {
		t.Fatal(err)
	}
	// An older scrape is ignored.
	if err := r.SetStats(ids[0], EngineStats{Running: 9, ScrapedAt: 9 * sec}); err != nil {
		t.Fatal(err)
	}
	l, _ = r.InstanceLoad(ids[0])
	if !l.HasStats || l.Running != 3 || l.Waiting != 4 || l.KVUse != 0.5 || l.ScrapedAt != 10*sec {
		t.Errorf("scrape not kept: %+v", l)
	}
	if err := r.ObserveRTT(ids[1], 2*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if l, _ = r.InstanceLoad(ids[1]); !l.HasRTT || l.RTT != 2*time.Millisecond {
		t.Errorf("rtt: %+v", l)
	}
	if DefaultClassSpec().PrefillTokensPerSecond <= 0 {
		t.Error("default class speed")
	}
	// A slow class makes min-ttft avoid the instance of that class.
	if err := r.SetClass(0, ClassSpec{PrefillTokensPerSecond: 100}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetClass(2, ClassSpec{PrefillTokensPerSecond: 1e6}); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{ID: 1, Tokens: make([]uint32, 1000), Flags: RouteDryRun, Now: 11 * sec})
	if err != nil {
		t.Fatal(err)
	}
	if d.Instance != c || d.Reason != ReasonMinCost || math.IsNaN(d.Cost) {
		t.Errorf("min-ttft chose %+v, want the fast class on %d", d, c)
	}
}

func prompt(n int, seed int64) []uint32 {
	rng := rand.New(rand.NewSource(seed))
	t := make([]uint32, n)
	for i := range t {
		t[i] = rng.Uint32()
	}
	return t
}

func TestKVEvents(t *testing.T) {
	r, ids := newTestRouter(t, PolicyPrefixCache, instanceNames(3)...)
	toks := prompt(128, 3)
	ev := &KVStored{BlockHashes: []uint64{0xa1, 0xa2}, BlockSize: 64, TokenIDs: toks}
	if err := r.KVStored(ids[2], ev, sec); err != nil {
		t.Fatal(err)
	}
	// The engine-reported prefix decides, with learning off.
	d, err := r.Route(&Request{ID: 1, Tokens: toks, Flags: RouteNoLearn, Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	if d.Instance != ids[2] || d.CachedTokens != 128 || d.Reason != ReasonPrefixHit {
		t.Fatalf("decision %+v", d)
	}
	n, err := r.KVRemoved(ids[2], []uint64{0xa2, 0xdead})
	if err != nil || n != 1 {
		t.Fatalf("KVRemoved = %d, %v", n, err)
	}
	d, _ = r.Route(&Request{ID: 2, Tokens: toks, Flags: RouteDryRun, Now: sec})
	if d.CachedTokens != 64 {
		t.Errorf("after removing block 2, cached %d", d.CachedTokens)
	}
	// Unknown parent: the event cannot be placed.
	orphan := &KVStored{BlockHashes: []uint64{0xb2}, ParentHash: 0xb1, HasParent: true,
		BlockSize: 64, TokenIDs: toks[64:]}
	wantStatus(t, r.KVStored(ids[2], orphan, sec), ErrNotFound, StatusNotFound, "lr_router_kv_stored")
	bad := &KVStored{BlockHashes: []uint64{1}, BlockSize: 64, TokenIDs: toks[:10]}
	wantStatus(t, r.KVStored(ids[2], bad, sec), ErrInvalid, StatusInvalid, "lr_router_kv_stored")
	if err := r.KVCleared(ids[2]); err != nil {
		t.Fatal(err)
	}
	d, _ = r.Route(&Request{ID: 3, Tokens: toks, Flags: RouteDryRun, Now: sec})
	if d.CachedTokens != 0 {
		t.Errorf("after clearing, cached %d", d.CachedTokens)
	}
}

// Two gateway replicas with the same instance names agree through deltas.
func TestDeltas(t *testing.T) {
	a, _ := newTestRouter(t, PolicyPrefixCache, instanceNames(4)...)
	b, _ := newTestRouter(t, PolicyPrefixCache, instanceNames(4)...)
	m0 := a.Mark()
	var where []InstanceID
	for i := 0; i < 8; i++ {
		d, err := a.Route(&Request{ID: uint64(i + 1), Tokens: prompt(200, int64(i)), Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		where = append(where, d.Instance)
	}
	full, m1, err := a.ExportDelta(0)
	if err != nil || len(full) == 0 || m1 <= m0 {
		t.Fatalf("ExportDelta(0) = %d bytes, mark %d (was %d), %v", len(full), m1, m0, err)
	}
	if err := b.ImportDelta(full, sec); err != nil {
		t.Fatal(err)
	}
	for i, want := range where {
		d, err := b.Route(&Request{ID: uint64(i + 1), Tokens: prompt(200, int64(i)), Flags: RouteDryRun, Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		if d.Instance != want || d.CachedTokens != 192 {
			t.Errorf("prompt %d: replica b chose %d with %d cached, a chose %d", i, d.Instance, d.CachedTokens, want)
		}
	}
	// An incremental export carries only what came after the mark.
	if _, err := a.Route(&Request{ID: 100, Tokens: prompt(64, 100), Now: sec}); err != nil {
		t.Fatal(err)
	}
	inc, m2, err := a.ExportDelta(m1)
	if err != nil || len(inc) == 0 || len(inc) >= len(full) || m2 <= m1 {
		t.Fatalf("incremental export: %d bytes (full %d), mark %d, %v", len(inc), len(full), m2, err)
	}
	if err := b.ImportDelta(inc, sec); err != nil {
		t.Fatal(err)
	}
	if err := b.ImportDelta(nil, sec); err == nil {
		t.Error("an empty delta was accepted")
	}
}

func TestExpire(t *testing.T) {
	o := DefaultRouterOptions()
	o.Policy = PolicyPrefixCache
	o.IndexTTL = time.Second
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.AddInstance(InstanceSpec{Name: "a:1"}); err != nil {
		t.Fatal(err)
	}
	toks := prompt(64, 1)
	if _, err := r.Route(&Request{ID: 1, Tokens: toks, Now: sec}); err != nil {
		t.Fatal(err)
	}
	if d, _ := r.Route(&Request{ID: 2, Tokens: toks, Flags: RouteDryRun, Now: sec}); d.CachedTokens != 64 {
		t.Fatalf("cached %d before expiry", d.CachedTokens)
	}
	if err := r.Expire(10 * sec); err != nil {
		t.Fatal(err)
	}
	full, _, _ := r.ExportDelta(0)
	if d, _ := r.Route(&Request{ID: 2, Tokens: toks, Flags: RouteDryRun, Now: 10 * sec}); d.CachedTokens != 0 {
		t.Errorf("cached %d after expiry (delta %d bytes)", d.CachedTokens, len(full))
	}
	if got := DefaultRouterOptions().IndexTTL; got != time.Hour {
		t.Errorf("default TTL %v", got)
	}
}

// IndexStats counts what the router's index learned, evicted for capacity
// and expired.
func TestIndexStats(t *testing.T) {
	o := DefaultRouterOptions()
	o.Policy = PolicyRoundRobin
	o.IndexCapacityBlocks = 64
	o.IndexTTL = time.Second
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range instanceNames(2) {
		if _, err := r.AddInstance(InstanceSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	// 40 distinct prompts of 4 blocks: 160 learned, 64 held.
	for i := 0; i < 40; i++ {
		if _, err := r.Route(&Request{ID: uint64(i), Tokens: prompt(64, int64(100+i)), Now: sec}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := r.IndexStats()
	if err != nil || s.LearnedBlocks != 160 || s.Blocks != 64 || s.EvictedBlocks != 96 ||
		s.ExpiredBlocks != 0 || s.RemoteBlocks != 0 {
		t.Fatalf("%+v %v", s, err)
	}
	if err := r.Expire(10 * sec); err != nil {
		t.Fatal(err)
	}
	if s, err = r.IndexStats(); err != nil || s.Blocks != 0 || s.ExpiredBlocks != 64 {
		t.Errorf("after expiry: %+v %v", s, err)
	}
	r.Close()
	if _, err := r.IndexStats(); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
}

// One slow and one fast instance under DualMap: the slow one's queue breaks
// the SLO, and the plan moves requests to their other candidate.
func TestRebalance(t *testing.T) {
	r, _ := newTestRouter(t, PolicyDualMap)
	slow, err := r.AddInstance(InstanceSpec{Name: "slow:1", Class: 0})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := r.AddInstance(InstanceSpec{Name: "fast:1", Class: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetClass(0, ClassSpec{PrefillTokensPerSecond: 100}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetClass(1, ClassSpec{PrefillTokensPerSecond: 1e6}); err != nil {
		t.Fatal(err)
	}
	onSlow := 0
	for i := uint64(1); i <= 40; i++ {
		d, err := r.Route(&Request{ID: i, Tokens: prompt(300, int64(i)), Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		if d.AltInstance == InstanceNone {
			t.Fatalf("dualmap gave no alternative: %+v", d)
		}
		if d.Instance == slow {
			onSlow++
		}
	}
	if onSlow == 0 {
		t.Fatal("nothing on the slow instance")
	}
	moves, err := r.RebalancePlan(sec)
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) == 0 {
		t.Fatalf("no moves with %d requests queued on the slow instance", onSlow)
	}
	before, _ := r.InstanceLoad(fast)
	seen := map[uint64]bool{}
	for _, m := range moves {
		if m.From != slow || m.To != fast || m.BenefitSeconds <= 0 || seen[m.RequestID] {
			t.Fatalf("move %+v", m)
		}
		seen[m.RequestID] = true
		if err := r.Move(m.RequestID, m.To); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := r.InstanceLoad(fast)
	if after.Queued != before.Queued+uint32(len(moves)) {
		t.Errorf("queued on fast %d -> %d after %d moves", before.Queued, after.Queued, len(moves))
	}
	// A request past its first token cannot move.
	id := moves[0].RequestID
	if err := r.FirstToken(id, 2*sec); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, r.Move(id, slow), ErrState, StatusState, "lr_router_move")
}

// The router is shared by goroutines; Close waits for the calls in flight
// and later calls fail cleanly. Run with -race.
func TestConcurrentUseAndClose(t *testing.T) {
	r, _ := newTestRouter(t, PolicyPrefixCacheAndLoad, instanceNames(4)...)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				id := uint64(g*1000 + i + 1)
				now := uint64(i+1) * sec / 100
				d, err := r.Route(&Request{ID: id, Tokens: prompt(64, int64(i%10)),
					Flags: RouteScores, Now: now})
				if err != nil {
					t.Error(err)
					return
				}
				if len(d.Scores) != 4 {
					t.Errorf("%d scores", len(d.Scores))
				}
				if err := r.Complete(id, 1, now); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if s, _ := r.Stats(); s.Routes != 1600 || s.Inflight != 0 {
		t.Errorf("stats %+v", s)
	}

	stop := make(chan struct{})
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := uint64(1); ; i++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				_, err := r.Route(&Request{ID: uint64(g)<<32 | i, Tokens: []uint32{1, 2, 3}, Flags: RouteDryRun})
				if errors.Is(err, ErrClosed) {
					done <- nil
					return
				}
				if err != nil {
					done <- err
					return
				}
			}
		}(g)
	}
	time.Sleep(10 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Error("second Close:", err)
	}
	if _, err := r.Route(&Request{ID: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Route after Close: %v", err)
	}
	if r.Policy() != -1 || r.InstanceCount() != 0 || r.Mark() != 0 {
		t.Error("queries after Close")
	}
}

func TestNilOptions(t *testing.T) {
	r, err := NewRouter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Policy() != DefaultRouterOptions().Policy {
		t.Errorf("policy %v", r.Policy())
	}
}

// Handles dropped without Close are freed by their finalizers (the safety
// net); this must not crash or double-free next to explicit Closes.
func TestFinalizers(t *testing.T) {
	for i := 0; i < 50; i++ {
		r, err := NewRouter(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := NewIndex(nil)
		g, _ := NewRing(nil)
		l, _ := NewLoad(nil)
		if i%2 == 0 {
			r.Close()
			x.Close()
			g.Close()
			l.Close()
		}
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
