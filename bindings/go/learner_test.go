package libroute

import (
	"errors"
	"math"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lrow is a feature row whose reward is -(f0 + f1) / 10.
func lrow(i int) []float32 {
	return []float32{float32(i % 7), float32(i % 5), 1}
}

func lreward(r []float32) float64 {
	return -float64(r[0]+r[1]) / 10
}

func smallNet() *MlpOptions {
	o := DefaultMlpOptions()
	o.HiddenLayers = 1
	o.Width = 16
	o.BatchSize = 32
	o.Dropout = 0
	o.LearningRate = 0.01
	return &o
}

func newTestLearner(t *testing.T, edit func(*LearnerOptions)) *Learner {
	t.Helper()
	o := DefaultLearnerOptions()
	o.NFeatures = 3
	o.Seed = 9
	o.MinSamples = 20
	o.RetrainEvery = 10
	o.Epochs = 20
	o.Mlp = smallNet()
	if edit != nil {
		edit(&o)
	}
	l, err := NewLearner(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func addSamples(t *testing.T, l *Learner, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := l.AddSample(lrow(i), lreward(lrow(i)), math.NaN()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLearnerSchedule(t *testing.T) {
	l := newTestLearner(t, nil)
	if l.NFeatures() != 3 {
		t.Fatal(l.NFeatures())
	}
	addSamples(t, l, 0, 19)
	if ok, err := l.Step(0); ok || err != nil {
		t.Fatalf("19 samples: Step = %v, %v", ok, err)
	}
	_, _, err := l.Score(lrow(0))
	wantStatus(t, err, ErrState, StatusState, "lr_learner_score")
	_, _, err = l.ScoreRows(lrow(0))
	wantStatus(t, err, ErrState, StatusState, "lr_learner_score_rows")
	addSamples(t, l, 19, 20)
	if ok, err := l.Step(0); !ok || err != nil {
		t.Fatalf("20 samples: Step = %v, %v", ok, err)
	}
	if ok, _ := l.Step(0); ok {
		t.Fatal("a step with nothing new trained")
	}
	pred, ood, err := l.Score(append(lrow(1), lrow(2)...))
	if err != nil || len(pred) != 2 || ood != 0 {
		t.Fatalf("Score = %v, %d, %v", pred, ood, err)
	}
	far := []float32{50, 0, 1}
	pred2, flags, err := l.ScoreRows(append(lrow(1), far...))
	if err != nil || len(pred2) != 2 || pred2[0] != pred[0] || len(flags) != 2 || flags[0] || !flags[1] {
		t.Fatalf("ScoreRows = %v, %v, %v", pred2, flags, err)
	}
	st, err := l.Stats()
	if err != nil || st.ModelRound != 1 || st.ModelSamples != 20 || st.Samples != 20 ||
		math.IsNaN(st.ModelMSE) || !math.IsNaN(st.OnlineMAE) {
		t.Fatalf("stats %+v, %v", st, err)
	}
	addSamples(t, l, 0, 9)
	if ok, _ := l.Step(0); ok {
		t.Fatal("9 < RetrainEvery trained")
	}
	addSamples(t, l, 9, 10)
	if ok, _ := l.Step(0); !ok {
		t.Fatal("RetrainEvery did not train")
	}
	if _, _, err := l.Score(lrow(0)); err != nil {
		t.Fatal(err)
	}
	if st, _ := l.Stats(); st.ModelRound != 2 || st.ModelSamples != 30 {
		t.Fatalf("stats %+v", st)
	}
	s, err := l.Samples()
	if err != nil || len(s.Y) != 30 || len(s.X) != 90 || s.NFeatures != 3 {
		t.Fatalf("Samples %d %d %v", len(s.Y), len(s.X), err)
	}
	if r := s.Row(29); len(r) != 3 {
		t.Fatal(r)
	}
}

func TestLearnerForceAndScore(t *testing.T) {
	l := newTestLearner(t, func(o *LearnerOptions) { o.MinSamples = 1000; o.Epochs = 200 })
	if ok, err := l.Step(LearnForce); ok || err != nil {
		t.Fatalf("no samples: %v %v", ok, err)
	}
	addSamples(t, l, 0, 200)
	if ok, _ := l.Step(0); ok {
		t.Fatal("200 < MinSamples trained")
	}
	if ok, _ := l.Step(LearnForce); !ok {
		t.Fatal("LearnForce did not train")
	}
	var x []float32
	for i := 0; i < 35; i++ {
		x = append(x, lrow(i)...)
	}
	out := make([]float32, 35)
	ood, err := l.ScoreInto(x, out)
	if err != nil || ood != 0 {
		t.Fatal(ood, err)
	}
	for i := range out {
		if d := math.Abs(float64(out[i]) - lreward(lrow(i))); d > 0.15 {
			t.Errorf("row %d: %v, want %v", i, out[i], lreward(lrow(i)))
		}
	}
	if ood, _ := l.ScoreInto([]float32{50, 0, 1}, make([]float32, 1)); ood != 1 {
		t.Errorf("out of range: %d", ood)
	}
	for i := 0; i < 5; i++ {
		if err := l.AddSample(lrow(i), lreward(lrow(i)), float64(out[i])); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := l.Stats(); st.Predicted != 5 || !(st.OnlineMAE < 0.15) {
		t.Errorf("stats %+v", st)
	}
}

func TestLearnerDrops(t *testing.T) {
	l := newTestLearner(t, func(o *LearnerOptions) { o.PendingCapacity = 4; o.MaxAbsReward = 2 })
	wantStatus(t, l.AddSample(lrow(0), -3, math.NaN()), ErrRange, StatusRange, "lr_learner_add_sample")
	wantStatus(t, l.AddSample(lrow(0), math.Inf(-1), math.NaN()), ErrInvalid, StatusInvalid, "lr_learner_add_sample")
	wantStatus(t, l.AddSample([]float32{1, 2}, -1, math.NaN()), ErrInvalid, StatusInvalid, "lr_learner_add_sample")
	wantStatus(t, l.AddSample([]float32{1, float32(math.NaN()), 0}, -1, math.NaN()), ErrInvalid, StatusInvalid, "lr_learner_add_sample")
	addSamples(t, l, 0, 4)
	wantStatus(t, l.AddSample(lrow(4), -0.1, math.NaN()), ErrLimit, StatusLimit, "lr_learner_add_sample")
	if st, _ := l.Stats(); st.Samples != 4 || st.DroppedFull != 1 || st.DroppedRange != 1 {
		t.Errorf("stats %+v", st)
	}
	if _, err := l.Step(0); err != nil { // drains the queue
		t.Fatal(err)
	}
	addSamples(t, l, 4, 5)
	_, err := l.ScoreInto(lrow(0), nil)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_learner_score")

	o := DefaultLearnerOptions()
	_, err = NewLearner(&o) // NFeatures has no default
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_learner_create")
	_, err = NewLearner(nil)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_learner_create")
	o.NFeatures = 3
	o.Mlp = smallNet()
	o.Mlp.Width = 0
	_, err = NewLearner(&o)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_learner_create")
}

func TestLearnerClose(t *testing.T) {
	l := newTestLearner(t, nil)
	l.Close()
	l.Close()
	for _, err := range []error{
		l.AddSample(lrow(0), 0, math.NaN()),
		func() error { _, err := l.Step(0); return err }(),
		func() error { _, err := l.Stats(); return err }(),
		func() error { _, err := l.Samples(); return err }(),
		func() error { _, _, err := l.Score(lrow(0)); return err }(),
		func() error { _, _, err := l.ScoreRows(lrow(0)); return err }(),
	} {
		if err != ErrClosed {
			t.Errorf("after Close: %v", err)
		}
	}
}

// The serving side (Score, AddSample) runs in this goroutine while Step
// trains in another: the wrapper's per-side locks let them overlap, and
// the race detector (run-tests.sh runs -race) watches the Go side.
func TestLearnerServingWhileTraining(t *testing.T) {
	l := newTestLearner(t, func(o *LearnerOptions) {
		o.MinSamples = 50
		o.RetrainEvery = 50
		o.Epochs = 300
		o.Mlp.Width = 64
	})
	addSamples(t, l, 0, 50)
	if ok, _ := l.Step(0); !ok {
		t.Fatal("no first model")
	}
	addSamples(t, l, 0, 400)
	var running, done atomic.Bool
	started := make(chan struct{})
	go func() {
		defer done.Store(true)
		running.Store(true)
		close(started)
		if ok, err := l.Step(0); !ok || err != nil {
			t.Errorf("Step = %v, %v", ok, err)
		}
		running.Store(false)
	}()
	<-started
	during, n := 0, 0
	for !done.Load() {
		if _, _, err := l.Score(lrow(n)); err != nil {
			t.Fatal(err)
		}
		if n%10 == 0 {
			_ = l.AddSample(lrow(n), lreward(lrow(n)), math.NaN())
		}
		if running.Load() {
			during++
		}
		n++
	}
	if during == 0 {
		t.Error("Score waited for Step")
	}
	if _, _, err := l.Score(lrow(0)); err != nil {
		t.Fatal(err)
	}
	if st, _ := l.Stats(); st.ModelRound != 2 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d scores, %d during the step", n, during)
}

// Many goroutines on both sides and a Close racing them: calls either
// complete or get ErrClosed.
func TestLearnerConcurrentClose(t *testing.T) {
	l := newTestLearner(t, func(o *LearnerOptions) { o.MinSamples = 10 })
	addSamples(t, l, 0, 10)
	if _, err := l.Step(0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(2)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				err := l.AddSample(lrow(i), -0.1, 0)
				if err == nil {
					_, _, err = l.Score(lrow(i))
				}
				if err != nil && err != ErrClosed && !errors.Is(err, ErrLimit) {
					t.Error(err)
				}
			}
		}(g)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := l.Step(LearnForce); err != nil && err != ErrClosed {
					t.Error(err)
				}
				if _, err := l.Samples(); err != nil && err != ErrClosed {
					t.Error(err)
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	l.Close()
	wg.Wait()
}

// ---- the lodestar router -----------------------------------------------------

func lodestarOptions(edit func(*LearnerOptions)) RouterOptions {
	lo := DefaultLearnerOptions()
	lo.MinSamples = 64
	lo.RetrainEvery = 64
	lo.Epochs = 50
	lo.Mlp = smallNet()
	lo.Mlp.HiddenLayers = 2
	lo.Mlp.Width = 32
	if edit != nil {
		edit(&lo)
	}
	o := DefaultRouterOptions()
	o.Policy = PolicyLodestar
	o.Seed = 11
	o.Learner = &lo
	return o
}

func newLodestar(t *testing.T, edit func(*LearnerOptions)) *Router {
	t.Helper()
	o := lodestarOptions(edit)
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, n := range instanceNames(4) {
		if _, err := r.AddInstance(InstanceSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// workload routes requests whose TTFT grows with the instance id.
type workload struct {
	r   *Router
	rng *rand.Rand
	id  uint64
	now uint64
}

func (w *workload) one(t *testing.T) Decision {
	w.id++
	w.now += 1_000_000
	toks := make([]uint32, 32+w.rng.Intn(368))
	for i := range toks {
		toks[i] = uint32(w.rng.Intn(50000))
	}
	d, err := w.r.Route(&Request{ID: w.id, Tokens: toks, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	ttft := uint64(d.Instance+1) * 20_000_000
	if err := w.r.FirstToken(w.id, w.now+ttft); err != nil {
		t.Fatal(err)
	}
	if err := w.r.Complete(w.id, 16, w.now+100_000_000); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLodestarRouter(t *testing.T) {
	r := newLodestar(t, nil)
	st, err := r.LearnerStats()
	if err != nil || st.Samples != 0 || st.ModelRound != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	w := &workload{r: r, rng: rand.New(rand.NewSource(4)), now: sec}
	for i := 0; i < 80; i++ {
		if d := w.one(t); d.Reason != ReasonColdStart {
			t.Fatalf("route %d before any model: %v", i, d.Reason)
		}
	}
	s, err := r.LearnerSamples()
	if r.LearnerFeatureCount() != LodestarFeatureCount() {
		t.Fatalf("learner rows of %d, Lodestar's features %d", r.LearnerFeatureCount(),
			LodestarFeatureCount())
	}
	if err != nil || len(s.Y) != 0 || s.NFeatures != LodestarFeatureCount() {
		t.Fatalf("%+v %v", s, err)
	}
	if ok, err := r.LearnStep(0); !ok || err != nil {
		t.Fatalf("LearnStep = %v, %v", ok, err)
	}
	s, err = r.LearnerSamples()
	if err != nil || len(s.Y) != 80 || len(s.X) != 80*LodestarFeatureCount() {
		t.Fatalf("%d samples, %v", len(s.Y), err)
	}
	for _, y := range s.Y { // rewards are -TTFT in seconds: 20..80 ms
		if y > -0.019 || y < -0.081 {
			t.Fatalf("reward %v", y)
		}
	}
	for i := 0; i < 50; i++ {
		if d := w.one(t); d.Reason == ReasonColdStart {
			t.Fatal("cold start after a model")
		}
	}
	st, _ = r.LearnerStats()
	if st.ModelRound != 1 || st.ModelSamples != 80 || st.Samples != 130 || st.Predicted == 0 {
		t.Errorf("stats %+v", st)
	}
	rs, _ := r.Stats()
	if rs.ByReason[ReasonColdStart] != 80 {
		t.Errorf("by reason %v", rs.ByReason)
	}
	if b, _ := ParamLodestarFallback.Bounds(); b.Default != float64(PolicyPrefixCacheAndLoad) {
		t.Errorf("fallback bounds %+v", b)
	}
}

func TestLodestarErrors(t *testing.T) {
	r, _ := newTestRouter(t, PolicyRandom, "a:1")
	_, err := r.LearnStep(0)
	wantStatus(t, err, ErrState, StatusState, "lr_router_learn_step")
	_, err = r.LearnerStats()
	wantStatus(t, err, ErrState, StatusState, "lr_router_learner_stats")
	_, err = r.LearnerSamples()
	wantStatus(t, err, ErrState, StatusState, "lr_router_learner_samples")
	if err := r.SetPolicy(PolicyLodestar); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LearnerStats(); err != nil {
		t.Fatal(err)
	}
	_, err = r.LearnStep(LearnFlags(8))
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_learn_step")

	o := lodestarOptions(func(l *LearnerOptions) { l.NFeatures = 3 })
	_, err = NewRouter(&o)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_create")
	o = lodestarOptions(func(l *LearnerOptions) { l.Mlp.Width = 0 })
	_, err = NewRouter(&o)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_create")
	o = lodestarOptions(func(l *LearnerOptions) { l.NFeatures = uint32(LodestarFeatureCount()); l.Mlp = nil })
	r2, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	r2.Close()
}

// The host's pattern: route on the serving goroutine, LearnStep on a
// background one. The step trains outside the router's mutex and the
// binding's lock is shared, so routes keep flowing while it runs.
func TestLodestarLearnStepWhileRouting(t *testing.T) {
	r := newLodestar(t, func(l *LearnerOptions) {
		l.MinSamples = 200
		l.Epochs = 400
		l.Mlp.Width = 64
	})
	w := &workload{r: r, rng: rand.New(rand.NewSource(5)), now: sec}
	for i := 0; i < 200; i++ {
		w.one(t)
	}
	var running, done atomic.Bool
	var steps atomic.Int32
	go func() {
		defer done.Store(true)
		for steps.Load() < 1000 {
			running.Store(true)
			ok, err := r.LearnStep(0)
			running.Store(false)
			steps.Add(1)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Error("no model after 1000 steps")
	}()
	during, n := 0, 0
	for !done.Load() {
		w.one(t)
		n++
		if running.Load() {
			during++
		}
	}
	if during == 0 {
		t.Error("Route waited for LearnStep")
	}
	for i := 0; i < 30; i++ {
		if d := w.one(t); d.Reason == ReasonColdStart {
			t.Fatal("cold start after the step")
		}
	}
	if st, _ := r.LearnerStats(); st.ModelRound != 1 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d routes, %d during %d steps", n, during, steps.Load())
}

// Steps racing on one router: the library lets one run and answers the
// others ErrState; Close waits for the one running.
func TestLodestarConcurrentSteps(t *testing.T) {
	o := lodestarOptions(func(l *LearnerOptions) { l.MinSamples = 100; l.Epochs = 100 })
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range instanceNames(4) {
		if _, err := r.AddInstance(InstanceSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	w := &workload{r: r, rng: rand.New(rand.NewSource(6)), now: sec}
	for i := 0; i < 300; i++ {
		w.one(t)
	}
	var wg sync.WaitGroup
	var trained, busy atomic.Int32
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := r.LearnStep(LearnForce)
			switch {
			case err == nil && ok:
				trained.Add(1)
			case errors.Is(err, ErrState):
				busy.Add(1)
			case err != nil:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if trained.Load() == 0 || trained.Load()+busy.Load() != 4 {
		t.Errorf("%d trained, %d busy", trained.Load(), busy.Load())
	}
	go func() { _, _ = r.LearnStep(LearnForce) }()
	time.Sleep(time.Millisecond)
	r.Close() // waits for a step in progress
	if _, err := r.LearnStep(0); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
}
