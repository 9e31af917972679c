package libroute

import (
	"bytes"
	"math"
	"math/rand"
	"testing"
)

// plane returns n rows of (x0, x1) in [-1, 1]^2 and y = x0 + x1.
func plane(n int, seed int64) (x, y []float32) {
	rng := rand.New(rand.NewSource(seed))
	x = make([]float32, 2*n)
	y = make([]float32, n)
	for i := 0; i < n; i++ {
		x[2*i] = rng.Float32()*2 - 1
		x[2*i+1] = rng.Float32()*2 - 1
		y[i] = x[2*i] + x[2*i+1]
	}
	return x, y
}

func smallMlpOptions(nIn uint32) MlpOptions {
	o := DefaultMlpOptions()
	o.NInputs = nIn
	o.Seed = 1
	o.HiddenLayers = 2
	o.Width = 16
	o.BatchSize = 32
	o.Dropout = 0
	o.LearningRate = 0.01
	return o
}

func newSmallMlp(t *testing.T) *Mlp {
	t.Helper()
	o := smallMlpOptions(2)
	m, err := NewMlp(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestMlpDefaults(t *testing.T) {
	o := DefaultMlpOptions()
	if o.NInputs != 0 || o.HiddenLayers != 3 || o.Width != 128 || o.BatchSize != 256 ||
		o.Dropout != 0.1 || o.LearningRate != 1e-3 || o.GradClip != 1 {
		t.Errorf("defaults %+v", o)
	}
	_, err := NewMlp(&o) // NInputs has no default
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_create")
	_, err = NewMlp(nil)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_create")
	for _, bad := range []func(*MlpOptions){
		func(o *MlpOptions) { o.Width = 0 },
		func(o *MlpOptions) { o.Width = MlpMaxWidth + 1 },
		func(o *MlpOptions) { o.HiddenLayers = MlpMaxLayers + 1 },
		func(o *MlpOptions) { o.NInputs = MlpMaxInputs + 1 },
		func(o *MlpOptions) { o.Dropout = 0.95 },
		func(o *MlpOptions) { o.LearningRate = 0 },
		func(o *MlpOptions) { o.BatchSize = 0 },
		func(o *MlpOptions) { o.GradClip = math.NaN() },
	} {
		o := smallMlpOptions(2)
		bad(&o)
		_, err := NewMlp(&o)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_create")
	}
	m := newSmallMlp(t)
	if m.NInputs() != 2 {
		t.Errorf("NInputs %d", m.NInputs())
	}
}

func TestMlpLearnsASum(t *testing.T) {
	x, y := plane(512, 1)
	m := newSmallMlp(t)
	if err := m.FitNormalization(x, y); err != nil {
		t.Fatal(err)
	}
	before, err := m.Loss(x, y)
	if err != nil {
		t.Fatal(err)
	}
	var last float64
	for i := 0; i < 4; i++ {
		if last, err = m.Train(x, y, 5); err != nil {
			t.Fatal(err)
		}
	}
	after, err := m.Loss(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if !(before > 0.1 && after < before/20 && last < before/20) {
		t.Fatalf("loss %v -> %v (last epoch %v)", before, after, last)
	}
	tx, ty := plane(64, 2)
	pred, err := m.Predict(tx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pred {
		if d := math.Abs(float64(pred[i] - ty[i])); d > 0.3 {
			t.Errorf("row %d: predicted %v, want %v", i, pred[i], ty[i])
		}
	}
	// PredictInto writes in place.
	out := make([]float32, 70)
	for i := range out {
		out[i] = 7
	}
	if err := m.PredictInto(tx, out); err != nil {
		t.Fatal(err)
	}
	if !equalF32(out[:64], pred) || out[64] != 7 {
		t.Error("PredictInto")
	}
	if got, err := m.Predict(nil); err != nil || len(got) != 0 {
		t.Errorf("Predict(nil) = %v, %v", got, err)
	}
}

func TestMlpCloneAndRanges(t *testing.T) {
	x, y := plane(256, 3)
	o := smallMlpOptions(2)
	o.Dropout = 0.2
	m, err := NewMlp(&o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n, err := m.OutOfRange([]float32{50, 50}); err != nil || n != 0 {
		t.Errorf("before any fit: %d, %v", n, err)
	}
	if err := m.FitNormalization(x, nil); err != nil {
		t.Fatal(err)
	}
	n, err := m.OutOfRange([]float32{0, 0, 5, 0, 0, -5, float32(math.NaN()), 0})
	if err != nil || n != 3 {
		t.Errorf("OutOfRange = %d, %v; want 3", n, err)
	}
	flags, err := m.OutOfRangeRows([]float32{0, 0, 5, 0, 0, -5, float32(math.NaN()), 0})
	if err != nil || len(flags) != 4 || flags[0] || !flags[1] || !flags[2] || !flags[3] {
		t.Errorf("OutOfRangeRows = %v, %v; want [false true true true]", flags, err)
	}
	if flags, err := m.OutOfRangeRows(nil); err != nil || len(flags) != 0 {
		t.Errorf("OutOfRangeRows(nil) = %v, %v", flags, err)
	}
	if _, err := m.OutOfRangeRows([]float32{1}); err == nil {
		t.Error("OutOfRangeRows took a partial row")
	}
	if _, err := m.Train(x, y, 2); err != nil {
		t.Fatal(err)
	}
	c, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l1, _ := m.Train(x, y, 2)
	l2, _ := c.Train(x, y, 2)
	p1, _ := m.Predict(x)
	p2, _ := c.Predict(x)
	if l1 != l2 || !equalF32(p1, p2) {
		t.Errorf("a clone continues differently: %v vs %v", l1, l2)
	}
}

func TestMlpSaveLoad(t *testing.T) {
	x, y := plane(256, 4)
	m := newSmallMlp(t)
	if err := m.FitNormalization(x, y); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Train(x, y, 5); err != nil {
		t.Fatal(err)
	}
	data, err := m.Save()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := LoadMlp(data)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	p1, _ := m.Predict(x)
	p2, _ := m2.Predict(x)
	if m2.NInputs() != 2 || !equalF32(p1, p2) {
		t.Error("the loaded network predicts differently")
	}
	again, err := m2.Save()
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("save(load(b)) != b: %v", err)
	}
	mid := len(data) / 2
	flipped := append([]byte(nil), data...)
	flipped[mid] ^= 0x40
	for name, bad := range map[string][]byte{
		"empty": nil, "truncated": data[:len(data)-1], "header": data[:12],
		"flipped": flipped, "zeros": make([]byte, len(data)),
	} {
		_, err := LoadMlp(bad)
		if err == nil {
			t.Errorf("%s: loaded", name)
			continue
		}
		wantStatus(t, err, ErrCorrupt, StatusCorrupt, "lr_mlp_load")
	}
}

func TestMlpErrors(t *testing.T) {
	m := newSmallMlp(t)
	x, y := plane(16, 5)
	if err := m.FitNormalization(x, y); err != nil {
		t.Fatal(err)
	}
	want, _ := m.Predict(x)
	_, err := m.Predict([]float32{1, 2, 3}) // not whole rows
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_predict")
	_, err = m.Predict([]float32{0, float32(math.Inf(1))})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_predict")
	wantStatus(t, m.PredictInto(x, make([]float32, 15)), ErrInvalid, StatusInvalid, "lr_mlp_predict")
	_, err = m.Train(x, y[:10], 1)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_train")
	nan := append([]float32(nil), y...)
	nan[3] = float32(math.NaN())
	_, err = m.Train(x, nan, 1)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_train")
	_, err = m.Loss(x, y[:1])
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_mlp_loss")
	wantStatus(t, m.FitNormalization(x, y[:3]), ErrInvalid, StatusInvalid, "lr_mlp_fit_normalization")
	wantStatus(t, m.FitNormalization(nil, nil), ErrInvalid, StatusInvalid, "lr_mlp_fit_normalization")
	if got, _ := m.Predict(x); !equalF32(got, want) {
		t.Error("a failed call changed the network")
	}

	m.Close()
	m.Close()
	for _, err := range []error{
		func() error { _, err := m.Predict(x); return err }(),
		func() error { _, err := m.Save(); return err }(),
		func() error { _, err := m.Clone(); return err }(),
		func() error { _, err := m.Train(x, y, 1); return err }(),
		func() error { _, err := m.Loss(x, y); return err }(),
		func() error { _, err := m.OutOfRange(x); return err }(),
		func() error { _, err := m.OutOfRangeRows(x); return err }(),
		m.FitNormalization(x, y),
	} {
		if err != ErrClosed {
			t.Errorf("after Close: %v", err)
		}
	}
	if m.NInputs() != 0 {
		t.Error("NInputs after Close")
	}
}
