package libroute

import (
	"errors"
	"testing"
	"time"
)

func newTestIndex(t *testing.T, opt *IndexOptions) *Index {
	t.Helper()
	x, err := NewIndex(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func TestBlockKeys(t *testing.T) {
	toks := prompt(100, 1)
	keys, err := BlockKeys(16, toks, 0)
	if err != nil || len(keys) != 6 {
		t.Fatalf("BlockKeys = %d keys, %v", len(keys), err)
	}
	// Chained: a prefix's keys are a prefix of the keys.
	short, _ := BlockKeys(16, toks[:40], 0)
	if len(short) != 2 || short[0] != keys[0] || short[1] != keys[1] {
		t.Errorf("prefix keys %x vs %x", short, keys[:2])
	}
	salted, _ := BlockKeys(16, toks, 1)
	if salted[0] == keys[0] {
		t.Error("the tenant salt does not enter the keys")
	}
	if k, err := BlockKeys(16, nil, 0); err != nil || len(k) != 0 {
		t.Errorf("no tokens: %v, %v", k, err)
	}
	_, err = BlockKeys(0, toks, 0)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_block_keys")
}

func TestIndexLearnMatch(t *testing.T) {
	x := newTestIndex(t, &IndexOptions{BlockTokens: 16, CapacityBlocks: 1 << 12})
	if x.BlockTokens() != 16 {
		t.Fatalf("BlockTokens() = %d", x.BlockTokens())
	}
	toks := prompt(200, 2)
	p := &Prompt{Tokens: toks[:100], Boundaries: []uint32{40}}
	if err := x.Learn(p, 7, TrustLocal, sec); err != nil {
		t.Fatal(err)
	}
	if err := x.Learn(&Prompt{Tokens: toks}, 9, TrustRemote, sec); err != nil {
		t.Fatal(err)
	}
	m, err := x.Match(&Prompt{Tokens: toks}, sec, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Hit{{9, 192}, {7, 96}}
	if len(m.Hits) != 2 || m.Hits[0] != want[0] || m.Hits[1] != want[1] ||
		m.DeepestTokens != 192 || m.PromptBlocks != 12 {
		t.Fatalf("match %+v, want hits %v", m, want)
	}
	// The same with precomputed keys.
	keys, _ := BlockKeys(16, toks, 0)
	mk, err := x.Match(&Prompt{Tokens: toks, Keys: keys}, sec, MatchNoTouch)
	if err != nil || len(mk.Hits) != 2 || mk.Hits[0] != want[0] || mk.Hits[1] != want[1] {
		t.Fatalf("match with keys %+v, %v", mk, err)
	}
	wantStatus(t, x.Learn(&Prompt{Tokens: toks, Keys: keys[:3]}, 1, TrustLocal, sec),
		ErrInvalid, StatusInvalid, "lr_index_learn")
	wantStatus(t, x.Learn(p, InstanceNone, TrustLocal, sec),
		ErrInvalid, StatusInvalid, "lr_index_learn")

	s, err := x.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Blocks != 12+6 || s.RemoteBlocks != 12 || s.Instances != 2 || s.LearnedBlocks != 18 || s.Bytes == 0 {
		t.Errorf("stats %+v", s)
	}
	if n, err := x.InstanceBlocks(7); err != nil || n != 6 {
		t.Errorf("InstanceBlocks(7) = %d, %v", n, err)
	}
	_, err = x.InstanceBlocks(8)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_index_instance_blocks")
	if err := x.RemoveInstance(9); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, x.RemoveInstance(9), ErrNotFound, StatusNotFound, "lr_index_remove_instance")
	if m, _ := x.Match(&Prompt{Tokens: toks}, sec, 0); len(m.Hits) != 1 || m.Hits[0].Instance != 7 {
		t.Errorf("after removal: %+v", m)
	}
}

// More instances hit than the hits buffer holds: MatchInto grows it.
func TestIndexMatchGrowsBuffer(t *testing.T) {
	x := newTestIndex(t, nil)
	toks := prompt(64, 3)
	for i := InstanceID(0); i < 40; i++ {
		if err := x.Learn(&Prompt{Tokens: toks[:16+int(i%4)*16]}, i, TrustLocal, sec); err != nil {
			t.Fatal(err)
		}
	}
	m := MatchResult{Hits: make([]Hit, 0, 3)}
	if err := x.MatchInto(&Prompt{Tokens: toks}, sec, 0, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Hits) != 40 || m.Hits[0].Tokens != 64 || m.Hits[39].Tokens != 16 {
		t.Fatalf("%d hits: %v", len(m.Hits), m.Hits)
	}
	for i := 1; i < len(m.Hits); i++ {
		a, b := m.Hits[i-1], m.Hits[i]
		if a.Tokens < b.Tokens || a.Tokens == b.Tokens && a.Instance > b.Instance {
			t.Fatalf("hits out of order at %d: %v", i, m.Hits)
		}
	}
}

func TestIndexTTL(t *testing.T) {
	x := newTestIndex(t, &IndexOptions{TTL: time.Second})
	toks := prompt(32, 4)
	if err := x.Learn(&Prompt{Tokens: toks}, 1, TrustLocal, sec); err != nil {
		t.Fatal(err)
	}
	if err := x.Expire(5 * sec); err != nil {
		t.Fatal(err)
	}
	if m, _ := x.Match(&Prompt{Tokens: toks}, 5*sec, 0); len(m.Hits) != 0 {
		t.Errorf("expired route still matches: %+v", m)
	}
	if s, _ := x.Stats(); s.ExpiredBlocks != 2 {
		t.Errorf("stats %+v", s)
	}
	never := newTestIndex(t, &IndexOptions{TTL: NoExpiry})
	if err := never.Learn(&Prompt{Tokens: toks}, 1, TrustLocal, sec); err != nil {
		t.Fatal(err)
	}
	// years on: past the clock's skew, refused once, taken at the retry
	if err := never.Expire(1 << 59); !errors.Is(err, ErrRange) {
		t.Fatalf("a jump past the skew: %v", err)
	}
	if err := never.Expire(1 << 59); err != nil {
		t.Fatal(err)
	}
	if m, _ := never.Match(&Prompt{Tokens: toks}, 1<<59, 0); len(m.Hits) != 1 {
		t.Errorf("NoExpiry expired: %+v", m)
	}
	if err := never.Expire(MaxTime + 1); !errors.Is(err, ErrRange) {
		t.Errorf("past MaxTime: %v", err)
	}
	if _, err := NewIndex(&IndexOptions{TTL: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative TTL: %v", err)
	}
	if _, err := NewIndex(&IndexOptions{BlockTokens: 1 << 20}); !errors.Is(err, ErrInvalid) {
		t.Errorf("huge blocks: %v", err)
	}
}

func TestIndexKVEvents(t *testing.T) {
	x := newTestIndex(t, nil)
	toks := prompt(128, 5)
	ev := &KVStored{BlockHashes: []uint64{11, 12}, BlockSize: 64, TokenIDs: toks}
	if err := x.KVStored(3, ev, sec); err != nil {
		t.Fatal(err)
	}
	child := &KVStored{BlockHashes: []uint64{13}, ParentHash: 12, HasParent: true,
		BlockSize: 64, TokenIDs: prompt(64, 6)}
	if err := x.KVStored(3, child, sec); err != nil {
		t.Fatal(err)
	}
	if n, _ := x.InstanceBlocks(3); n != 12 {
		t.Fatalf("%d blocks after two events", n)
	}
	wantStatus(t, x.KVStored(3, &KVStored{BlockHashes: []uint64{1}, BlockSize: 24,
		TokenIDs: prompt(24, 1)}, sec), ErrNotSupported, StatusNotSupported, "lr_index_kv_stored")
	n, err := x.KVRemoved(3, []uint64{12, 99})
	if err != nil || n != 1 {
		t.Fatalf("KVRemoved = %d, %v", n, err)
	}
	if b, _ := x.InstanceBlocks(3); b != 4 {
		t.Errorf("%d blocks after removing the middle block", b)
	}
	if err := x.KVCleared(3); err != nil {
		t.Fatal(err)
	}
	if b, err := x.InstanceBlocks(3); err != nil || b != 0 {
		t.Errorf("after clear: %d, %v", b, err)
	}
	wantStatus(t, x.KVCleared(4), ErrNotFound, StatusNotFound, "lr_index_kv_cleared")
	_, err = x.KVRemoved(4, nil)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_index_kv_removed")
}

func TestIndexDeltas(t *testing.T) {
	a := newTestIndex(t, nil)
	b := newTestIndex(t, nil)
	toks := prompt(96, 7)
	m0 := a.Mark()
	if err := a.Learn(&Prompt{Tokens: toks}, 2, TrustLocal, sec); err != nil {
		t.Fatal(err)
	}
	d, m1, err := a.ExportDelta(m0)
	if err != nil || len(d) == 0 || m1 == m0 || a.Mark() != m1 {
		t.Fatalf("export: %d bytes, marks %d %d %d, %v", len(d), m0, m1, a.Mark(), err)
	}
	if err := b.ImportDelta(d, sec); err != nil {
		t.Fatal(err)
	}
	s, _ := b.Stats()
	if s.Blocks != 6 || s.RemoteBlocks != 6 {
		t.Errorf("imported %+v", s)
	}
	d[len(d)-1] ^= 1
	wantStatus(t, b.ImportDelta(d, sec), ErrCorrupt, StatusCorrupt, "lr_index_import_delta")
	_, _, err = a.ExportDelta(m1 + 100)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_export_delta")
}

func TestIndexClosed(t *testing.T) {
	x, err := NewIndex(nil)
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
	x.Close()
	if err := x.Learn(&Prompt{}, 1, TrustLocal, 0); err != ErrClosed {
		t.Errorf("Learn after Close: %v", err)
	}
	if _, err := x.Match(&Prompt{}, 0, 0); err != ErrClosed {
		t.Errorf("Match after Close: %v", err)
	}
	if x.Mark() != 0 || x.BlockTokens() != 0 {
		t.Error("queries after Close")
	}
	if err := x.Expire(1); err != ErrClosed {
		t.Errorf("Expire after Close: %v", err)
	}
}
