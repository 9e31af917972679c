package libroute

/*
#include <libroute.h>
*/
import "C"

import (
	"runtime"
	"strconv"
	"time"
)

// CostKind is a cost model (lr_cost_kind): the formulas the policies rank
// candidates by (lr_cost.h gives them).
type CostKind int32

// The cost model kinds.
const (
	// Predicted time to first token, seconds (min-ttft, dualmap).
	CostTTFT CostKind = C.LR_COST_TTFT
	// GORGO's cost in tokens, with its online tuner.
	CostGORGO CostKind = C.LR_COST_GORGO
	// NVIDIA Dynamo's cost in KV blocks.
	CostDynamo CostKind = C.LR_COST_DYNAMO
)

// CostKindCount returns how many kinds the loaded library has
// (lr_cost_kind_count).
func CostKindCount() int {
	return int(C.lr_cost_kind_count())
}

// String returns the kind's name ("ttft", "gorgo", "dynamo"), or
// "CostKind(n)" outside the enum.
func (k CostKind) String() string {
	if s := C.lr_cost_kind_name(C.int32_t(k)); s != nil {
		return C.GoString(s)
	}
	return "CostKind(" + strconv.Itoa(int(k)) + ")"
}

// CostParam is a cost model parameter (lr_cost_param); each kind has a
// subset (CostParamBounds is ErrNotSupported for the others).
type CostParam int32

// The cost model parameters.
const (
	CostWeightRTT         CostParam = C.LR_COST_W_RTT
	CostWeightQueue       CostParam = C.LR_COST_W_QUEUE
	CostWeightStall       CostParam = C.LR_COST_W_STALL
	CostWeightUncached    CostParam = C.LR_COST_W_UNCACHED
	CostBlockTokens       CostParam = C.LR_COST_BLOCK_TOKENS
	CostQueueAtFirstToken CostParam = C.LR_COST_QUEUE_AT_FIRST_TOKEN
	CostSigma             CostParam = C.LR_COST_SIGMA
	CostWeightRTTMax      CostParam = C.LR_COST_W_RTT_MAX
	CostWeightQueueMin    CostParam = C.LR_COST_W_QUEUE_MIN
)

// The GORGO tuner's rolling window and hop, in samples: once the window is
// full, every hop judges the weights in service.
const (
	CostTuneWindow = C.LR_COST_TUNE_WINDOW
	CostTuneHop    = C.LR_COST_TUNE_HOP
)

// CostParamCount returns how many parameter keys the loaded library has
// (lr_cost_param_count); a kind has a subset.
func CostParamCount() int {
	return int(C.lr_cost_param_count())
}

// CostParamBounds returns a parameter's range and default for a kind
// (lr_cost_param_bounds); ErrNotSupported when the kind has no such key.
func CostParamBounds(kind CostKind, key CostParam) (Bounds, error) {
	return bounds(C.lr_cost_param_bounds(C.int32_t(kind), C.int32_t(key)),
		"lr_cost_param_bounds")
}

// CostOptions are fixed when a cost model is created.
type CostOptions struct {
	Kind CostKind
	// Seeds the tuner's steps.
	Seed uint64
}

// TunerState is the GORGO tuner's state (CostTunerStats.State).
type TunerState int32

// The tuner states.
const (
	TunerOff       TunerState = 0 // not tuning
	TunerMeasuring TunerState = 1 // measuring the incumbent
	TunerTrial     TunerState = 2 // a trial in service
	TunerConverged TunerState = 3 // the step size fell under 0.02
)

// CostTunerStats is the tuner's progress (lr_cost_tuner_stats).
type CostTunerStats struct {
	State TunerState
	// Trials judged and trials accepted.
	Trials   uint64
	Accepted uint64
	// Current step size, and the incumbent's window p95 in seconds (NaN
	// before the first judgement).
	Sigma               float64
	IncumbentP95Seconds float64
	// Samples observed while tuning.
	Samples uint64
}

// Cost is a cost model (lr_cost) a host can evaluate, tune and inspect on
// its own. Not safe for concurrent use: one goroutine at a time (Eval on a
// model nobody changes may run concurrently with other Evals).
type Cost struct {
	p *C.lr_cost
}

// NewCost creates a cost model with its kind's default parameters, not
// tuning. nil options mean a TTFT model.
func NewCost(opt *CostOptions) (*Cost, error) {
	var o C.lr_cost_options
	C.lr_cost_options_init_sized(&o, C.sizeof_lr_cost_options)
	if opt != nil {
		o.kind = C.int32_t(opt.Kind)
		o.seed = C.uint64_t(opt.Seed)
	}
	var p *C.lr_cost
	if err := check(C.lr_cost_create(&o, &p), "lr_cost_create"); err != nil {
		return nil, err
	}
	c := &Cost{p: p}
	runtime.SetFinalizer(c, (*Cost).Close)
	return c, nil
}

// Close destroys the model. Closing twice is a no-op.
func (c *Cost) Close() error {
	if c.p != nil {
		C.lr_cost_destroy(c.p)
		c.p = nil
		runtime.SetFinalizer(c, nil)
	}
	return nil
}

// Kind returns the model's kind (-1 after Close).
func (c *Cost) Kind() CostKind {
	if c.p == nil {
		return -1
	}
	k := C.lr_cost_kind_of(c.p)
	runtime.KeepAlive(c)
	return CostKind(k)
}

// SetParam sets a parameter: ErrNotSupported for a key the kind does not
// have, ErrRange out of bounds, ErrInvalid for NaN or a fraction for an
// Integer key. Setting the GORGO weights while tuning ends the trial.
func (c *Cost) SetParam(key CostParam, value float64) error {
	if c.p == nil {
		return ErrClosed
	}
	st := C.lr_cost_set_param(c.p, C.int32_t(key), C.double(value))
	runtime.KeepAlive(c)
	return check(st, "lr_cost_set_param")
}

// Param reads a parameter; for the tuned weights, the incumbent.
func (c *Cost) Param(key CostParam) (float64, error) {
	if c.p == nil {
		return 0, ErrClosed
	}
	var v C.double
	st := C.lr_cost_get_param(c.p, C.int32_t(key), &v)
	runtime.KeepAlive(c)
	if err := check(st, "lr_cost_get_param"); err != nil {
		return 0, err
	}
	return float64(v), nil
}

// Eval returns each row's cost (lower is better) for a prompt of
// promptTokens, with the weights in service, appended to out[:0] (which may
// be nil). A row with more cached tokens than the prompt, or (TTFT) a
// prefill rate that is not positive, is ErrInvalid.
func (c *Cost) Eval(promptTokens uint32, rows []Candidate, out []float64) ([]float64, error) {
	if c.p == nil {
		return nil, ErrClosed
	}
	if cap(out) < len(rows) {
		out = make([]float64, len(rows))
	}
	out = out[:len(rows)]
	if len(rows) == 0 {
		return out, nil
	}
	st := C.lr_cost_eval(c.p, C.uint32_t(promptTokens), candidatePtr(rows),
		C.size_t(len(rows)), candidateSize, f64ptr(out))
	runtime.KeepAlive(c)
	if err := check(st, "lr_cost_eval"); err != nil {
		return nil, err
	}
	return out, nil
}

// Tune starts (true) or stops (false) GORGO's tuner; ErrNotSupported for
// the other kinds.
func (c *Cost) Tune(on bool) error {
	if c.p == nil {
		return ErrClosed
	}
	st := C.lr_cost_tune(c.p, cbool(on))
	runtime.KeepAlive(c)
	return check(st, "lr_cost_tune")
}

// Observe feeds one observed time to first token to the tuner (ignored
// while not tuning). A negative one is ErrInvalid.
func (c *Cost) Observe(ttft time.Duration) error {
	if c.p == nil {
		return ErrClosed
	}
	st := C.lr_cost_observe(c.p, C.double(ttft.Seconds()))
	runtime.KeepAlive(c)
	return check(st, "lr_cost_observe")
}

// TunerStats returns the tuner's progress.
func (c *Cost) TunerStats() (CostTunerStats, error) {
	if c.p == nil {
		return CostTunerStats{}, ErrClosed
	}
	var s C.lr_cost_tuner_stats
	C.lr_cost_tuner_stats_init_sized(&s, C.sizeof_lr_cost_tuner_stats)
	st := C.lr_cost_tuner_get_stats(c.p, &s)
	runtime.KeepAlive(c)
	if err := check(st, "lr_cost_tuner_get_stats"); err != nil {
		return CostTunerStats{}, err
	}
	return CostTunerStats{
		State:               TunerState(s.state),
		Trials:              uint64(s.trials),
		Accepted:            uint64(s.accepted),
		Sigma:               float64(s.sigma),
		IncumbentP95Seconds: float64(s.incumbent_p95_s),
		Samples:             uint64(s.samples),
	}, nil
}
