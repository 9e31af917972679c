package libroute

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func newReplica(t *testing.T, policy Policy, replica uint64, n int) *Router {
	t.Helper()
	o := DefaultRouterOptions()
	o.Policy = policy
	o.Seed = 7
	o.ReplicaID = replica
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, name := range instanceNames(n) {
		if _, err := r.AddInstance(InstanceSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func oneStore(ts float64, hash uint64, toks []uint32) []byte {
	return batch(ts, 1, func(m *msgpack) { m.stored([]uint64{hash}, 0, toks, 16) })
}

func TestVLLMBatchSeq(t *testing.T) {
	r := newReplica(t, PolicyPrefixCache, 0, 2)
	toks := prompt(64, 3)
	info, err := r.VLLMBatchSeq(1, 10, oneStore(1, 50, toks[:16]), sec)
	if err != nil || info.SeqState != KVSeqFirst || info.NextSeq != 11 {
		t.Fatalf("first: %+v %v", info, err)
	}
	if info, err = r.VLLMBatchSeq(1, 10, oneStore(1, 50, toks[:16]), sec); err != nil || info.SeqState != KVSeqDuplicate {
		t.Fatalf("duplicate: %+v %v", info, err)
	}
	info, err = r.VLLMBatchSeq(1, 12, oneStore(3, 52, toks[32:48]), sec)
	wantStatus(t, err, ErrGap, StatusGap, "lr_router_vllm_batch_seq")
	if info.SeqState != KVSeqGap || info.NextSeq != 11 {
		t.Fatalf("gap: %+v", info)
	}
	src, err := r.KVSource(1)
	if err != nil || !src.Gap || src.NextSeq != 11 || src.Gaps != 1 {
		t.Fatalf("source: %+v %v", src, err)
	}
	for s := uint64(11); s <= 12; s++ {
		if _, err := r.VLLMBatchSeq(1, s, oneStore(float64(s), 40+s, toks[(s-10)*16:(s-9)*16]), sec); err != nil {
			t.Fatalf("replay %d: %v", s, err)
		}
	}
	info, err = r.VLLMBatchSeq(1, 0, oneStore(50, 60, toks[:16]), sec)
	if err != nil || info.SeqState != KVSeqRestart {
		t.Fatalf("restart: %+v %v", info, err)
	}
	if err := r.KVReset(1); err != nil {
		t.Fatal(err)
	}
	if src, _ := r.KVSource(1); src.HasSeq || src.Restarts != 2 {
		t.Fatalf("after reset: %+v", src)
	}
	st, err := r.Stats()
	if err != nil || st.KVGaps != 1 || st.KVDuplicates != 1 || st.KVRestarts != 2 || st.KVBatches != 4 {
		t.Fatalf("stats %+v %v", st, err)
	}
	wantStatus(t, r.KVReset(9), ErrNotFound, StatusNotFound, "lr_router_kv_reset")
}

// The real fleet batches of tests/data/kv-events: none refused whole.
func TestVLLMFleetFiles(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "tests", "data", "kv-events", "*.msgpack"))
	if len(files) != 10 {
		t.Fatalf("%d fleet files", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		x := newTestIndex(t, nil)
		info, err := x.VLLMBatch(7, data, sec)
		if err != nil || info.Stored != 1 || info.Done != info.Events {
			t.Errorf("%s: %+v %v", filepath.Base(f), info, err)
		}
	}
}

func TestDeltasOnceGaugesAndSnapshot(t *testing.T) {
	a := newReplica(t, PolicyRoundRobin, 1, 3)
	b := newReplica(t, PolicyLeastRequest, 2, 3)
	for i := uint64(1); i <= 4; i++ {
		if _, err := a.Route(&Request{ID: i, Tokens: prompt(64, int64(i)), Now: sec}); err != nil {
			t.Fatal(err)
		}
	}
	d, _, err := a.ExportDelta(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := b.ImportDelta(d, sec); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.ImportDelta(d, sec); err != nil { // its own echo
		t.Fatal(err)
	}
	if s, _ := b.Stats(); s.DeltasImported != 1 || s.DeltasSkipped != 1 {
		t.Fatalf("b: %+v", s)
	}
	g, err := a.ExportGauges()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ImportGauges(g, sec); err != nil {
		t.Fatal(err)
	}
	rows, err := b.Candidates(&Request{Tokens: prompt(16, 9), Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint32
	for _, c := range rows {
		sum += c.Inflight
	}
	if sum != 4 {
		t.Fatalf("gauged inflight %d, want 4", sum)
	}
	wantStatus(t, b.ImportGauges(g[:len(g)-1], sec), ErrCorrupt, StatusCorrupt, "lr_router_import_gauges")
	anon := newReplica(t, PolicyRoundRobin, 0, 1)
	if _, err := anon.ExportGauges(); !errors.Is(err, ErrState) {
		t.Fatalf("gauges without a replica id: %v", err)
	}

	snap, err := b.Snapshot(2 * sec)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultRouterOptions()
	o.ReplicaID = 3
	o.GaugeTTL = time.Second
	c, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Restore(snap, 2*sec); err != nil {
		t.Fatal(err)
	}
	if c.InstanceCount() != 3 {
		t.Fatalf("restored %d instances", c.InstanceCount())
	}
	again, err := c.Snapshot(2 * sec)
	if err != nil || !bytes.Equal(again[32:len(again)-8], snap[32:len(snap)-8]) {
		t.Fatalf("the restored router snapshots differently (%v)", err)
	}
	wantStatus(t, c.Restore(snap, 2*sec), ErrState, StatusState, "lr_router_restore")
	e := newReplica(t, PolicyRoundRobin, 4, 0)
	wantStatus(t, e.Restore(snap[:40], sec), ErrCorrupt, StatusCorrupt, "lr_router_restore")
}
