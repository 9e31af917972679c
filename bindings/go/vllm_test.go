package libroute

import (
	"encoding/binary"
	"math"
	"testing"
)

// msgpack writes the little of msgpack that a vLLM KV-event batch needs.
type msgpack []byte

func (m *msgpack) raw(b ...byte) { *m = append(*m, b...) }

func (m *msgpack) arr(n int) {
	if n > 15 {
		panic("short arrays only")
	}
	m.raw(0x90 | byte(n))
}

func (m *msgpack) uint(v uint64) {
	m.raw(0xcf)
	*m = binary.BigEndian.AppendUint64(*m, v)
}

func (m *msgpack) f64(v float64) {
	m.raw(0xcb)
	*m = binary.BigEndian.AppendUint64(*m, math.Float64bits(v))
}

func (m *msgpack) str(s string) {
	m.raw(0xd9, byte(len(s)))
	*m = append(*m, s...)
}

func (m *msgpack) nil() { m.raw(0xc0) }

func (m *msgpack) uints(v []uint64) {
	m.raw(0xdd)
	*m = binary.BigEndian.AppendUint32(*m, uint32(len(v)))
	for _, x := range v {
		m.uint(x)
	}
}

func (m *msgpack) tokens(v []uint32) {
	w := make([]uint64, len(v))
	for i, t := range v {
		w[i] = uint64(t)
	}
	m.uints(w)
}

// stored is a positional BlockStored event; parent 0 means none.
func (m *msgpack) stored(hashes []uint64, parent uint64, toks []uint32, blockSize uint64) {
	m.arr(9)
	m.str("BlockStored")
	m.uints(hashes)
	if parent != 0 {
		m.uint(parent)
	} else {
		m.nil()
	}
	m.tokens(toks)
	m.uint(blockSize)
	m.nil()      // lora_id
	m.str("GPU") // medium
	m.nil()      // lora_name
	m.nil()      // extra_keys
}

func (m *msgpack) removed(hashes []uint64) {
	m.arr(3)
	m.str("BlockRemoved")
	m.uints(hashes)
	m.str("GPU")
}

func batch(ts float64, events int, body func(m *msgpack)) []byte {
	var m msgpack
	m.arr(3)
	m.f64(ts)
	m.arr(events)
	body(&m)
	m.uint(0) // data-parallel rank
	return m
}

func TestVLLMBatch(t *testing.T) {
	toks := prompt(96, 9)
	payload := batch(12.5, 3, func(m *msgpack) {
		m.stored([]uint64{101}, 0, toks[:32], 32)
		m.stored([]uint64{102, 103}, 101, toks[32:], 32)
		m.removed([]uint64{103, 999})
	})

	x := newTestIndex(t, nil)
	info, err := x.VLLMBatch(4, payload, sec)
	if err != nil {
		t.Fatal(err)
	}
	want := VLLMBatchInfo{Timestamp: 12.5, DPRank: 0, Events: 3, Stored: 2, Removed: 1, Done: 3}
	if info != want {
		t.Fatalf("info %+v, want %+v", info, want)
	}
	if m, _ := x.Match(&Prompt{Tokens: toks}, sec, MatchNoTouch); len(m.Hits) != 1 || m.Hits[0] != (Hit{4, 64}) {
		t.Fatalf("match after the batch: %+v", m)
	}
	info, err = x.VLLMBatch(4, payload[:len(payload)-1], sec)
	wantStatus(t, err, ErrCorrupt, StatusCorrupt, "lr_index_vllm_batch")
	if info.Done != 0 {
		t.Errorf("a corrupt batch was applied in part: %+v", info)
	}
	_, err = x.VLLMBatch(InstanceNone, payload, sec)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_vllm_batch")

	// Through the router, with learning off: the engine's blocks decide.
	r, ids := newTestRouter(t, PolicyPrefixCache, instanceNames(3)...)
	if info, err := r.VLLMBatch(ids[1], payload, sec); err != nil || info != want {
		t.Fatalf("router batch: %+v, %v", info, err)
	}
	d, err := r.Route(&Request{ID: 1, Tokens: toks, Flags: RouteNoLearn, Now: sec})
	if err != nil {
		t.Fatal(err)
	}
	if d.Instance != ids[1] || d.CachedTokens != 64 {
		t.Errorf("decision %+v", d)
	}
	_, err = r.VLLMBatch(77, payload, sec)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_vllm_batch")
}
