package libroute

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Multimodal inputs (tests/test-vllm.c router_multimodal_match and
// tests/test-index.c mm_keys_model have the C shapes): a request or
// prompt with an image matches the blocks the engine stored with that
// image, and only those; MMKeyHash is the documented hash.

const (
	mmBlock = 16
	imgA    = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	imgB    = "img-b"
)

// The image's placeholder tokens [19, 39) of a 48-token prompt: blocks 1
// and 2, at offsets 3 and 3-16 from their first tokens.
var img = MMInput{Identifier: imgA, Offset: mmBlock + 3, Length: 20}

// mmHashes are the per-block multimodal hashes of three blocks with img's
// placeholder filled by id.
func mmHashes(id string) []uint64 {
	return []uint64{0, MMKeyHash(id, 3), MMKeyHash(id, 3-mmBlock)}
}

func (m *msgpack) int(v int64) {
	m.raw(0xd3)
	*m = binary.BigEndian.AppendUint64(*m, uint64(v))
}

// mmKey is one (identifier, offset) pair of a block's extra_keys.
type mmKey struct {
	id  string
	off int64
}

// storedMM is a positional BlockStored event whose extra_keys give each
// block's (identifier, offset) pairs (none: nil).
func (m *msgpack) storedMM(hashes []uint64, toks []uint32, blockSize uint64, keys [][]mmKey) {
	m.arr(9)
	m.str("BlockStored")
	m.uints(hashes)
	m.nil() // parent
	m.tokens(toks)
	m.uint(blockSize)
	m.nil()      // lora_id
	m.str("GPU") // medium
	m.nil()      // lora_name
	m.arr(len(keys))
	for _, k := range keys {
		if len(k) == 0 {
			m.nil()
			continue
		}
		m.arr(len(k))
		for _, in := range k {
			m.arr(2)
			m.str(in.id)
			m.int(in.off)
		}
	}
}

// badMM are input lists the library refuses with LR_EINVAL for a prompt
// of n tokens.
func badMM(n uint32) [][]MMInput {
	return [][]MMInput{
		{{"", 0, 4}}, // empty identifier
		{{strings.Repeat("x", IndexMaxMMIdentifier+1), 0, 4}}, // too long
		{{strings.Repeat("x", 4096), 0, 4}},                   // far too long
		{{imgA, 0, 0}},                                        // no tokens
		{{imgA, n - 2, 4}},                                    // past the prompt
		{{imgA, 10, 8}, {imgB, 12, 4}},                        // overlapping
		{{imgA, 20, 4}, {imgB, 10, 4}},                        // out of order
		{{imgA, math.MaxUint32, 4}},                           // offset overflows
	}
}

func TestMMKeyHash(t *testing.T) {
	// XXH3_64bits_withSeed(lr_name_hash(id) and offset as 8 little-endian
	// bytes each, 0x4c524d4d4b455931), computed apart from the library
	// with xxHash itself.
	for _, c := range []struct {
		id   string
		off  int64
		want uint64
	}{
		{"img-a", 0, 0xe90b480053e9c1b6},
		{"img-a", 3, 0xdaae4e2a2b0c5b58},
		{"img-a", -13, 0x6567d68416faaaee},
		{"img-a", math.MinInt64, 0x5328aabe899ddcc0},
		{imgA, 3, 0x622817ecd71d32e8},
		{imgA, -13, 0xe476f936a5db635d},
		{"audio-c", 4096, 0xcbfee605fdaebbb6},
	} {
		if got := MMKeyHash(c.id, c.off); got != c.want {
			t.Errorf("MMKeyHash(%q, %d) = %#x, want %#x", c.id, c.off, got, c.want)
		}
	}
	if MMKeyHash("img-a", 3) == MMKeyHash("img-a", 4) || MMKeyHash("img-a", 3) == MMKeyHash("img-b", 3) {
		t.Error("distinct keys collide")
	}
	if IndexMaxMMIdentifier != 255 {
		t.Errorf("IndexMaxMMIdentifier = %d", IndexMaxMMIdentifier)
	}
}

func heldMM(t *testing.T, x *Index, p *Prompt, id InstanceID) uint32 {
	t.Helper()
	m, err := x.Match(p, sec, MatchNoTouch)
	if err != nil {
		t.Fatalf("Match(%+v): %v", p.MM, err)
	}
	for _, h := range m.Hits {
		if h.Instance == id {
			return h.Tokens
		}
	}
	return 0
}

func TestIndexMM(t *testing.T) {
	x := newTestIndex(t, &IndexOptions{BlockTokens: mmBlock})
	toks := prompt(48, 1)
	if err := x.Learn(&Prompt{Tokens: toks, MM: []MMInput{img}}, 1, TrustLocal, sec); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mm   []MMInput
		want uint32
	}{
		{[]MMInput{img}, 48},
		{nil, mmBlock},
		{[]MMInput{}, mmBlock},
		{[]MMInput{{imgB, mmBlock + 3, 20}}, mmBlock},
		{[]MMInput{{imgA, mmBlock + 4, 19}}, mmBlock},
	} {
		if got := heldMM(t, x, &Prompt{Tokens: toks, MM: c.mm}, 1); got != c.want {
			t.Errorf("inputs %+v: held %d, want %d", c.mm, got, c.want)
		}
	}
	// the engine's store of the same blocks keys them alike
	if err := x.KVStored(2, &KVStored{BlockHashes: []uint64{7, 8, 9}, BlockSize: mmBlock,
		TokenIDs: toks, MMHashes: mmHashes(imgA)}, sec); err != nil {
		t.Fatal(err)
	}
	if got := heldMM(t, x, &Prompt{Tokens: toks, MM: []MMInput{img}}, 2); got != 48 {
		t.Errorf("stored with the image: held %d", got)
	}
	if got := heldMM(t, x, &Prompt{Tokens: toks}, 2); got != mmBlock {
		t.Errorf("stored with the image, asked without: held %d", got)
	}

	// refusals
	toks2 := prompt(48, 2)
	for _, mm := range badMM(48) {
		err := x.Learn(&Prompt{Tokens: toks2, MM: mm}, 3, TrustLocal, sec)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_learn")
		_, err = x.Match(&Prompt{Tokens: toks2, MM: mm}, sec, 0)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_match")
	}
	err := x.Learn(&Prompt{Tokens: toks2, MM: []MMInput{{"a\x00b", 0, 4}}}, 3, TrustLocal, sec)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_learn")
	keys, _ := BlockKeys(mmBlock, toks2, 0)
	err = x.Learn(&Prompt{Tokens: toks2, Keys: keys, MM: []MMInput{img}}, 3, TrustLocal, sec)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_learn")
	for _, n := range []int{0, 2, 4} {
		err = x.KVStored(3, &KVStored{BlockHashes: []uint64{1, 2, 3}, BlockSize: mmBlock,
			TokenIDs: toks2, MMHashes: make([]uint64, n)}, sec)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_kv_stored")
	}
	err = x.KVStored(3, &KVStored{BlockHashes: []uint64{1}, BlockSize: 2 * mmBlock,
		TokenIDs: toks2[:32], MMHashes: []uint64{MMKeyHash(imgA, 3)}}, sec)
	wantStatus(t, err, ErrNotSupported, StatusNotSupported, "lr_index_kv_stored")
	if b, _ := x.InstanceBlocks(3); b != 0 {
		t.Errorf("refused calls left %d blocks", b)
	}
}

func newMMRouter(t *testing.T) (*Router, []InstanceID) {
	t.Helper()
	o := DefaultRouterOptions()
	o.Policy = PolicyPrefixCache
	o.Seed = 3
	o.BlockTokens = mmBlock
	r, err := NewRouter(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	// a third of the prompt cached is a prefix hit (default: half)
	if err := r.SetParam(ParamPrefixMinRatio, 0.25); err != nil {
		t.Fatal(err)
	}
	ids := make([]InstanceID, 3)
	for i, n := range instanceNames(3) {
		if ids[i], err = r.AddInstance(InstanceSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	return r, ids
}

func TestRouterMM(t *testing.T) {
	r, ids := newMMRouter(t)
	toks := prompt(48, 29)
	// ids[2] stored the prompt with the image (a vLLM batch, extra_keys
	// per block), ids[1] its text block alone
	payload := batch(1.5, 1, func(m *msgpack) {
		m.storedMM([]uint64{97, 98, 99}, toks, mmBlock, [][]mmKey{
			nil, {{imgA, 3}}, {{imgA, 3 - mmBlock}}})
	})
	if info, err := r.VLLMBatch(ids[2], payload, sec); err != nil || info.Stored != 1 {
		t.Fatalf("batch: %+v, %v", info, err)
	}
	if err := r.KVStored(ids[1], &KVStored{BlockHashes: []uint64{100}, BlockSize: mmBlock,
		TokenIDs: toks[:mmBlock]}, sec); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{ID: 1, Tokens: toks, Flags: RouteDryRun, Now: sec, MM: []MMInput{img}})
	if err != nil || d.Instance != ids[2] || d.CachedTokens != 48 {
		t.Fatalf("with the image: %+v, %v", d, err)
	}
	for _, mm := range [][]MMInput{{{imgB, mmBlock + 3, 20}}, nil} {
		d, err := r.Route(&Request{ID: 1, Tokens: toks, Flags: RouteDryRun, Now: sec, MM: mm})
		if err != nil || d.CachedTokens != mmBlock {
			t.Errorf("inputs %+v: %+v, %v", mm, d, err)
		}
	}
	rows, err := r.Candidates(&Request{Tokens: toks, Now: sec, MM: []MMInput{img}})
	if err != nil || len(rows) != 3 || rows[0].CachedTokens != 0 ||
		rows[1].CachedTokens != mmBlock || rows[2].CachedTokens != 48 {
		t.Errorf("candidates with the image: %+v, %v", rows, err)
	}
	rows, err = r.Candidates(&Request{Tokens: toks, Now: sec})
	if err != nil || len(rows) != 3 || rows[2].CachedTokens != mmBlock {
		t.Errorf("candidates without: %+v, %v", rows, err)
	}
	if in, err := r.PolicyInput(&Request{Tokens: toks, Now: sec, MM: []MMInput{img}}); err != nil || in.PromptTokens != 48 {
		t.Errorf("policy input: %+v, %v", in, err)
	}
	// a routed request is learned with its inputs
	other := []MMInput{{imgB, mmBlock + 3, 20}}
	d, err = r.Route(&Request{ID: 2, Tokens: toks, Now: sec, MM: other})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := r.Route(&Request{ID: 3, Tokens: toks, Flags: RouteDryRun, Now: sec, MM: other})
	if err != nil || d2.Instance != d.Instance || d2.CachedTokens != 48 {
		t.Errorf("after the route to %d: %+v, %v", d.Instance, d2, err)
	}
	// the engine's hashes through the router
	toks3 := prompt(48, 30)
	if err := r.KVStored(ids[0], &KVStored{BlockHashes: []uint64{1, 2, 3}, BlockSize: mmBlock,
		TokenIDs: toks3, MMHashes: mmHashes(imgA)}, sec); err != nil {
		t.Fatal(err)
	}
	d, err = r.Route(&Request{ID: 4, Tokens: toks3, Flags: RouteDryRun, Now: sec, MM: []MMInput{img}})
	if err != nil || d.Instance != ids[0] || d.CachedTokens != 48 {
		t.Errorf("router KVStored with hashes: %+v, %v", d, err)
	}
	err = r.KVStored(ids[0], &KVStored{BlockHashes: []uint64{4}, BlockSize: mmBlock,
		TokenIDs: toks3[:mmBlock], MMHashes: []uint64{}}, sec)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_kv_stored")
}

func TestRouterMMRefusals(t *testing.T) {
	r, _ := newMMRouter(t)
	toks := prompt(48, 31)
	before, err := r.Stats()
	if err != nil {
		t.Fatal(err)
	}
	bad := append(badMM(48), []MMInput{{"a\x00b", 0, 4}})
	for _, mm := range bad {
		_, err := r.Route(&Request{ID: 2, Tokens: toks, Now: sec, MM: mm})
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_route")
		_, err = r.Candidates(&Request{Tokens: toks, Now: sec, MM: mm})
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_candidates")
		_, err = r.PolicyInput(&Request{Tokens: toks, Now: sec, MM: mm})
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_policy_input")
	}
	after, err := r.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("refused routes changed the stats: %+v -> %+v", before, after)
	}
}
