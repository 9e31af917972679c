package libroute

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
)

// LearnerMaxSamples is the largest capacity of each sample buffer.
const LearnerMaxSamples = C.LR_LEARNER_MAX_SAMPLES

// LearnFlags modify Learner.Step and Router.LearnStep.
type LearnFlags uint32

// LearnForce trains now if there is any sample, whatever the counts.
const LearnForce LearnFlags = C.LR_LEARN_FORCE

// LearnerOptions are fixed when a learner is created. Start from
// DefaultLearnerOptions: every field is passed as it is.
type LearnerOptions struct {
	// Seeds every network and every random choice.
	Seed uint64
	// Features per sample, 1..MlpMaxInputs; no default. For a router's
	// learner, 0 or LodestarFeatureCount().
	NFeatures uint32
	// The newest samples kept (FIFO), and older ones kept for diversity
	// (replay), 1..LearnerMaxSamples and 0..LearnerMaxSamples.
	FIFOCapacity   uint32
	ReplayCapacity uint32
	// Samples queued between steps before new ones are dropped.
	PendingCapacity uint32
	// Samples before the first model, and new samples between rounds.
	MinSamples   uint32
	RetrainEvery uint32
	// Training passes per round, 1..10000.
	Epochs uint32
	// Samples with |reward| above this are dropped; > 0.
	MaxAbsReward float64
	// The networks' shape and training options; nil: DefaultMlpOptions.
	// NInputs and Seed are ignored (they are the learner's).
	Mlp *MlpOptions
}

// DefaultLearnerOptions returns the library's defaults
// (lr_learner_options_init): FIFO and replay of 5000, a pending queue of
// 8192, the first model after 5000 samples and a new one every 1000, 30
// epochs, rewards within ±15. NFeatures is 0.
func DefaultLearnerOptions() LearnerOptions {
	var o C.lr_learner_options
	C.lr_learner_options_init_sized(&o, C.sizeof_lr_learner_options)
	return LearnerOptions{
		Seed:            uint64(o.seed),
		NFeatures:       uint32(o.n_features),
		FIFOCapacity:    uint32(o.fifo_capacity),
		ReplayCapacity:  uint32(o.replay_capacity),
		PendingCapacity: uint32(o.pending_capacity),
		MinSamples:      uint32(o.min_samples),
		RetrainEvery:    uint32(o.retrain_every),
		Epochs:          uint32(o.epochs),
		MaxAbsReward:    float64(o.max_abs_reward),
	}
}

// c returns the options as C structs. The nested network options come back
// separately (nil for none): the shims link them, because cgo may not pass
// Go memory that holds a Go pointer.
func (l *LearnerOptions) c() (C.lr_learner_options, *C.lr_mlp_options) {
	var o C.lr_learner_options
	C.lr_learner_options_init_sized(&o, C.sizeof_lr_learner_options)
	o.seed = C.uint64_t(l.Seed)
	o.n_features = C.uint32_t(l.NFeatures)
	o.fifo_capacity = C.uint32_t(l.FIFOCapacity)
	o.replay_capacity = C.uint32_t(l.ReplayCapacity)
	o.pending_capacity = C.uint32_t(l.PendingCapacity)
	o.min_samples = C.uint32_t(l.MinSamples)
	o.retrain_every = C.uint32_t(l.RetrainEvery)
	o.epochs = C.uint32_t(l.Epochs)
	o.max_abs_reward = C.double(l.MaxAbsReward)
	if l.Mlp == nil {
		return o, nil
	}
	m := l.Mlp.c()
	return o, &m
}

// LearnerStats are a learner's counters.
type LearnerStats struct {
	// Samples queued, and dropped for a full queue or a reward out of
	// range.
	Samples      uint64
	DroppedFull  uint64
	DroppedRange uint64
	// The model in service: its training round (0: none yet), the samples
	// it trained on and how many of those came from the replay buffer, and
	// its training mean squared error (reward units squared).
	ModelRound   uint64
	ModelSamples uint64
	ModelReplay  uint64
	ModelMSE     float64
	// Mean |predicted - reward| over the last 256 samples added with a
	// prediction; NaN before any.
	OnlineMAE float64
	// Samples added with a prediction, over the learner's life.
	Predicted uint64
}

func learnerStats(s *C.lr_learner_stats) LearnerStats {
	return LearnerStats{
		Samples:      uint64(s.samples),
		DroppedFull:  uint64(s.dropped_full),
		DroppedRange: uint64(s.dropped_range),
		ModelRound:   uint64(s.model_round),
		ModelSamples: uint64(s.model_samples),
		ModelReplay:  uint64(s.model_replay),
		ModelMSE:     float64(s.model_mse),
		OnlineMAE:    float64(s.online_mae),
		Predicted:    uint64(s.predicted),
	}
}

// LearnerSamples are the samples a learner's next round would train on:
// the FIFO, then the replay buffer.
type LearnerSamples struct {
	// X holds len(Y) rows of NFeatures values, row-major.
	X []float32
	// Y holds the rewards.
	Y         []float32
	NFeatures int
}

// Row returns sample i's features (a view into X).
func (s *LearnerSamples) Row(i int) []float32 {
	return s.X[i*s.NFeatures : (i+1)*s.NFeatures : (i+1)*s.NFeatures]
}

// samples sizes, allocates and fills LearnerSamples with get, a
// lr_*_samples call on its handle. A step between the size query and the
// copy may change the count: retried until it fits.
func samples(nf int, op string, get func(x, y *C.float, capacity C.size_t, n *C.size_t) C.lr_status) (LearnerSamples, error) {
	var x, y []float32
	for {
		var n C.size_t
		st := get(f32ptr(x), f32ptr(y), C.size_t(len(y)), &n)
		if st == C.LR_EBUFSIZE && int(n) > len(y) {
			x = make([]float32, int(n)*nf)
			y = make([]float32, int(n))
			continue
		}
		if err := check(st, op); err != nil {
			return LearnerSamples{}, err
		}
		return LearnerSamples{X: x[:int(n)*nf], Y: y[:n], NFeatures: nf}, nil
	}
}

// Learner is Lodestar's online learner (lr_learner): it collects
// (features, reward) samples on the serving side and trains a new network
// on the training side, then hands it to the serving side without a lock.
//
// It has two sides that may run at the same time:
//
//   - serving (the route path): AddSample, Score, Stats;
//   - training (a background goroutine): Step, Samples.
//
// The C contract is one thread at a time per side. The wrapper guards it
// with one mutex per side, so calls of one side from several goroutines
// run one after the other, while a serving call and a training call run in
// parallel: Score never waits for a Step that trains for seconds. A third,
// read-write lock is held shared by every call and exclusively by Close, so
// Close waits for the calls in progress of both sides; later calls return
// ErrClosed. A Learner is therefore safe for concurrent use.
type Learner struct {
	serve sync.Mutex   // serving calls, one at a time
	train sync.Mutex   // training calls, one at a time
	life  sync.RWMutex // shared by every call, exclusive by Close
	p     *C.lr_learner
	nf    int
}

// NewLearner creates a learner with no model (cold). opt must set
// NFeatures (nil options are ErrInvalid).
func NewLearner(opt *LearnerOptions) (*Learner, error) {
	const op = "lr_learner_create"
	if opt == nil {
		return nil, invalid(op)
	}
	o, m := opt.c()
	var p *C.lr_learner
	if err := check(C.lrgo_learner_create(&o, m, &p), op); err != nil {
		return nil, err
	}
	l := &Learner{p: p, nf: int(opt.NFeatures)}
	runtime.SetFinalizer(l, (*Learner).Close)
	return l, nil
}

// Close destroys the learner and its models. It waits for the calls in
// progress on either side; later calls return ErrClosed. Closing twice is
// a no-op.
func (l *Learner) Close() error {
	l.life.Lock()
	defer l.life.Unlock()
	if l.p != nil {
		C.lr_learner_destroy(l.p)
		l.p = nil
		runtime.SetFinalizer(l, nil)
	}
	return nil
}

// NFeatures returns the features per sample.
func (l *Learner) NFeatures() int {
	return l.nf
}

// side takes one side's mutex and the shared lifetime lock; release undoes
// both.
func (l *Learner) side(mu *sync.Mutex) (*C.lr_learner, error) {
	mu.Lock()
	l.life.RLock()
	if l.p == nil {
		l.life.RUnlock()
		mu.Unlock()
		return nil, ErrClosed
	}
	return l.p, nil
}

func (l *Learner) release(mu *sync.Mutex) {
	l.life.RUnlock()
	mu.Unlock()
}

// AddSample queues one sample for the next Step (serving side). reward is
// the observed reward (for routing, -TTFT in seconds); predicted is what
// the model in service predicted for it, or math.NaN() for none, and feeds
// LearnerStats.OnlineMAE. A reward beyond MaxAbsReward (ErrRange) or a full
// queue (ErrLimit) drops the sample and counts it.
func (l *Learner) AddSample(features []float32, reward, predicted float64) error {
	const op = "lr_learner_add_sample"
	if len(features) != l.nf {
		return invalid(op)
	}
	h, err := l.side(&l.serve)
	if err != nil {
		return err
	}
	defer l.release(&l.serve)
	return check(C.lr_learner_add_sample(h, f32ptr(features), C.double(reward),
		C.double(predicted)), op)
}

// Score predicts the reward of each row of x with the model in service,
// taking over a newly trained one first (serving side), and counts the
// rows outside the ranges it was trained on. ErrState before the first
// model.
func (l *Learner) Score(x []float32) (pred []float32, outOfRange int, err error) {
	n, _ := rows(x, l.nf)
	pred = make([]float32, n)
	if outOfRange, err = l.ScoreInto(x, pred); err != nil {
		return nil, 0, err
	}
	return pred, outOfRange, nil
}

// ScoreInto is Score writing into out, which must have room for a value
// per row, so that the route path reuses one buffer.
func (l *Learner) ScoreInto(x, out []float32) (outOfRange int, err error) {
	const op = "lr_learner_score"
	n, ok := rows(x, l.nf)
	if !ok || len(out) < n {
		return 0, invalid(op)
	}
	h, err := l.side(&l.serve)
	if err != nil {
		return 0, err
	}
	defer l.release(&l.serve)
	var ood C.size_t
	if err := check(C.lr_learner_score(h, f32ptr(x), C.size_t(n), f32ptr(out), &ood), op); err != nil {
		return 0, err
	}
	return int(ood), nil
}

// ScoreRows is Score with each row judged alone: the predicted rewards,
// and per row whether it is outside the ranges the model in service was
// trained on (serving side). ErrState before the first model.
func (l *Learner) ScoreRows(x []float32) (pred []float32, outOfRange []bool, err error) {
	const op = "lr_learner_score_rows"
	n, ok := rows(x, l.nf)
	if !ok {
		return nil, nil, invalid(op)
	}
	h, err := l.side(&l.serve)
	if err != nil {
		return nil, nil, err
	}
	defer l.release(&l.serve)
	pred = make([]float32, n)
	flags := make([]uint8, n)
	if err := check(C.lr_learner_score_rows(h, f32ptr(x), C.size_t(n), f32ptr(pred), u8ptr(flags), nil), op); err != nil {
		return nil, nil, err
	}
	return pred, boolsOf(flags), nil
}

// Stats returns the learner's counters (serving side).
func (l *Learner) Stats() (LearnerStats, error) {
	h, err := l.side(&l.serve)
	if err != nil {
		return LearnerStats{}, err
	}
	defer l.release(&l.serve)
	var s C.lr_learner_stats
	C.lr_learner_stats_init_sized(&s, C.sizeof_lr_learner_stats)
	if err := check(C.lr_learner_get_stats(h, &s), "lr_learner_get_stats"); err != nil {
		return LearnerStats{}, err
	}
	return learnerStats(&s), nil
}

// Step takes the queued samples and, when MinSamples (first round) or
// RetrainEvery (later rounds) new ones have arrived, or with LearnForce
// whenever there is any, trains and publishes a new model (training side).
// It reports whether it published one. This is the slow call; the serving
// side keeps scoring with the model in service meanwhile. On ErrNoMem the
// samples stay for the next step.
func (l *Learner) Step(flags LearnFlags) (trained bool, err error) {
	h, err := l.side(&l.train)
	if err != nil {
		return false, err
	}
	defer l.release(&l.train)
	var t C.int32_t
	if err := check(C.lr_learner_step(h, C.uint32_t(flags), &t), "lr_learner_step"); err != nil {
		return false, err
	}
	return t != 0, nil
}

// Samples copies the samples the next round would train on (training
// side).
func (l *Learner) Samples() (LearnerSamples, error) {
	h, err := l.side(&l.train)
	if err != nil {
		return LearnerSamples{}, err
	}
	defer l.release(&l.train)
	return samples(l.nf, "lr_learner_samples",
		func(x, y *C.float, capacity C.size_t, n *C.size_t) C.lr_status {
			return C.lr_learner_samples(h, x, y, capacity, n)
		})
}
