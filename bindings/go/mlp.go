package libroute

/*
#include <libroute.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Limits of the network's shape (lr_mlp.h).
const (
	MlpMaxInputs = C.LR_MLP_MAX_INPUTS
	MlpMaxLayers = C.LR_MLP_MAX_LAYERS
	MlpMaxWidth  = C.LR_MLP_MAX_WIDTH
	MlpMaxBatch  = C.LR_MLP_MAX_BATCH
)

// MlpOptions are fixed when a network is created. Start from
// DefaultMlpOptions and set NInputs: every field is passed as it is, so a
// zero Dropout means no dropout, not the default.
type MlpOptions struct {
	// Seeds the initial weights, dropout and shuffling.
	Seed uint64
	// Features per row, 1..MlpMaxInputs; no default.
	NInputs uint32
	// Hidden layers (1..MlpMaxLayers) of Width units (1..MlpMaxWidth).
	HiddenLayers uint32
	Width        uint32
	// Rows per Adam step, 1..MlpMaxBatch.
	BatchSize uint32
	// Dropout probability in training, [0, 0.9].
	Dropout float64
	// Adam step size, (0, 1].
	LearningRate float64
	// L2 weight decay added to the gradient, [0, 1).
	WeightDecay float64
	// Global gradient-norm clip, >= 0 (0: off).
	GradClip float64
}

// DefaultMlpOptions returns the library's defaults (lr_mlp_options_init):
// 3 hidden layers of 128, batches of 256, dropout 0.1, learning rate 1e-3,
// weight decay 1e-5, gradient clip 1. NInputs is 0 and must be set.
func DefaultMlpOptions() MlpOptions {
	var o C.lr_mlp_options
	C.lr_mlp_options_init_sized(&o, C.sizeof_lr_mlp_options)
	return MlpOptions{
		Seed:         uint64(o.seed),
		NInputs:      uint32(o.n_inputs),
		HiddenLayers: uint32(o.hidden_layers),
		Width:        uint32(o.width),
		BatchSize:    uint32(o.batch_size),
		Dropout:      float64(o.dropout),
		LearningRate: float64(o.learning_rate),
		WeightDecay:  float64(o.weight_decay),
		GradClip:     float64(o.grad_clip),
	}
}

func (m *MlpOptions) c() C.lr_mlp_options {
	var o C.lr_mlp_options
	C.lr_mlp_options_init_sized(&o, C.sizeof_lr_mlp_options)
	o.seed = C.uint64_t(m.Seed)
	o.n_inputs = C.uint32_t(m.NInputs)
	o.hidden_layers = C.uint32_t(m.HiddenLayers)
	o.width = C.uint32_t(m.Width)
	o.batch_size = C.uint32_t(m.BatchSize)
	o.dropout = C.double(m.Dropout)
	o.learning_rate = C.double(m.LearningRate)
	o.weight_decay = C.double(m.WeightDecay)
	o.grad_clip = C.double(m.GradClip)
	return o
}

// Mlp is a small fully connected network that predicts one number per row
// of features (lr_mlp), Lodestar's scorer. Rows are float32, row-major:
// a slice of n rows holds n*NInputs values.
//
// Not safe for concurrent use, queries included (scoring uses scratch
// memory inside the network): one goroutine at a time, or give each its
// own Clone.
type Mlp struct {
	p   *C.lr_mlp
	nIn int
}

func newMlp(p *C.lr_mlp) *Mlp {
	m := &Mlp{p: p, nIn: int(C.lr_mlp_n_inputs(p))}
	runtime.SetFinalizer(m, (*Mlp).Close)
	return m
}

// NewMlp creates a network with fresh weights, identity normalization and
// no range limits; call FitNormalization with the training data first.
// opt must set NInputs (nil options are ErrInvalid).
func NewMlp(opt *MlpOptions) (*Mlp, error) {
	var co *C.lr_mlp_options
	if opt != nil {
		o := opt.c()
		co = &o
	}
	var p *C.lr_mlp
	if err := check(C.lr_mlp_create(co, &p), "lr_mlp_create"); err != nil {
		return nil, err
	}
	return newMlp(p), nil
}

// LoadMlp reads a network Save wrote. It predicts exactly as the saved
// one; training starts with a fresh optimizer. Damaged or truncated data is
// ErrCorrupt, a format this library does not read ErrVersion.
func LoadMlp(data []byte) (*Mlp, error) {
	var p *C.lr_mlp
	if err := check(C.lr_mlp_load(bytesPtr(data), C.size_t(len(data)), nil, &p),
		"lr_mlp_load"); err != nil {
		return nil, err
	}
	return newMlp(p), nil
}

// Close destroys the network. Closing twice is a no-op.
func (m *Mlp) Close() error {
	if m.p != nil {
		C.lr_mlp_destroy(m.p)
		m.p = nil
		runtime.SetFinalizer(m, nil)
	}
	return nil
}

// NInputs returns the features per row (0 after Close).
func (m *Mlp) NInputs() int {
	if m.p == nil {
		return 0
	}
	return m.nIn
}

// Clone returns an independent copy with the same weights, statistics,
// ranges, optimizer and random state: both continue identically.
func (m *Mlp) Clone() (*Mlp, error) {
	if m.p == nil {
		return nil, ErrClosed
	}
	var p *C.lr_mlp
	st := C.lr_mlp_clone(m.p, &p)
	runtime.KeepAlive(m)
	if err := check(st, "lr_mlp_clone"); err != nil {
		return nil, err
	}
	return newMlp(p), nil
}

// Save serializes the shape, options, normalization, ranges and weights
// (not the optimizer state), versioned and checksummed.
func (m *Mlp) Save() ([]byte, error) {
	if m.p == nil {
		return nil, ErrClosed
	}
	var b *C.lr_blob
	st := C.lr_mlp_save(m.p, &b)
	runtime.KeepAlive(m)
	if err := check(st, "lr_mlp_save"); err != nil {
		return nil, err
	}
	return blobBytes(b), nil
}

// rows returns the rows in x, or false when x is not whole rows of width.
func rows(x []float32, width int) (int, bool) {
	if width <= 0 || len(x)%width != 0 {
		return 0, false
	}
	return len(x) / width, true
}

func f32ptr(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func u8ptr(s []uint8) *C.uint8_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&s[0]))
}

// boolsOf turns C's 0/1 flags into bools.
func boolsOf(flags []uint8) []bool {
	out := make([]bool, len(flags))
	for i, f := range flags {
		out[i] = f != 0
	}
	return out
}

func f64ptr(s []float64) *C.double {
	if len(s) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&s[0]))
}

// FitNormalization sets the per-feature mean, deviation and range from x
// and, with y non-nil (one target per row), the target's mean and
// deviation. The weights are kept.
func (m *Mlp) FitNormalization(x, y []float32) error {
	const op = "lr_mlp_fit_normalization"
	if m.p == nil {
		return ErrClosed
	}
	n, ok := rows(x, m.nIn)
	if !ok || (y != nil && len(y) != n) {
		return invalid(op)
	}
	var yp *C.float
	if y != nil {
		yp = f32ptr(y)
	}
	st := C.lr_mlp_fit_normalization(m.p, f32ptr(x), C.size_t(n), yp)
	runtime.KeepAlive(m)
	return check(st, op)
}

// Predict returns one value per row of x (no dropout).
func (m *Mlp) Predict(x []float32) ([]float32, error) {
	n, _ := rows(x, m.nIn)
	out := make([]float32, n)
	if err := m.PredictInto(x, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PredictInto writes one value per row of x to out, which must have room
// for them, so that a host scoring in a loop reuses one buffer.
func (m *Mlp) PredictInto(x, out []float32) error {
	const op = "lr_mlp_predict"
	if m.p == nil {
		return ErrClosed
	}
	n, ok := rows(x, m.nIn)
	if !ok || len(out) < n {
		return invalid(op)
	}
	if n == 0 {
		// lr_mlp_predict refuses a NULL x even for zero rows.
		return nil
	}
	st := C.lr_mlp_predict(m.p, f32ptr(x), C.size_t(n), f32ptr(out))
	runtime.KeepAlive(m)
	return check(st, op)
}

// OutOfRange counts the rows of x with a feature outside the range
// FitNormalization saw (NaN counts as outside).
func (m *Mlp) OutOfRange(x []float32) (int, error) {
	const op = "lr_mlp_out_of_range"
	if m.p == nil {
		return 0, ErrClosed
	}
	n, ok := rows(x, m.nIn)
	if !ok {
		return 0, invalid(op)
	}
	var k C.size_t
	st := C.lr_mlp_out_of_range(m.p, f32ptr(x), C.size_t(n), &k)
	runtime.KeepAlive(m)
	if err := check(st, op); err != nil {
		return 0, err
	}
	return int(k), nil
}

// OutOfRangeRows judges each row of x alone: true where it has a feature
// outside the range FitNormalization saw (NaN counts as outside).
func (m *Mlp) OutOfRangeRows(x []float32) ([]bool, error) {
	const op = "lr_mlp_out_of_range_rows"
	if m.p == nil {
		return nil, ErrClosed
	}
	n, ok := rows(x, m.nIn)
	if !ok {
		return nil, invalid(op)
	}
	flags := make([]uint8, n)
	st := C.lr_mlp_out_of_range_rows(m.p, f32ptr(x), C.size_t(n), u8ptr(flags), nil)
	runtime.KeepAlive(m)
	if err := check(st, op); err != nil {
		return nil, err
	}
	return boolsOf(flags), nil
}

// Train runs epochs shuffled passes of mini-batch Adam with dropout over
// the rows of x and their targets y, and returns the mean squared error
// over the last epoch's batches (target units squared). On ErrNoMem the
// network is unchanged.
func (m *Mlp) Train(x, y []float32, epochs uint32) (loss float64, err error) {
	const op = "lr_mlp_train"
	if m.p == nil {
		return 0, ErrClosed
	}
	n, ok := rows(x, m.nIn)
	if !ok || len(y) != n {
		return 0, invalid(op)
	}
	var l C.double
	st := C.lr_mlp_train(m.p, f32ptr(x), f32ptr(y), C.size_t(n), C.uint32_t(epochs), &l)
	runtime.KeepAlive(m)
	if err := check(st, op); err != nil {
		return 0, err
	}
	return float64(l), nil
}

// Loss returns the mean squared error of the predictions for x against y.
func (m *Mlp) Loss(x, y []float32) (float64, error) {
	const op = "lr_mlp_loss"
	if m.p == nil {
		return 0, ErrClosed
	}
	n, ok := rows(x, m.nIn)
	if !ok || len(y) != n {
		return 0, invalid(op)
	}
	var l C.double
	st := C.lr_mlp_loss(m.p, f32ptr(x), f32ptr(y), C.size_t(n), &l)
	runtime.KeepAlive(m)
	if err := check(st, op); err != nil {
		return 0, err
	}
	return float64(l), nil
}
