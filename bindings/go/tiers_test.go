package libroute

import (
	"testing"
)

// Tiered KV caches (tests/test-tiers.c has the C shapes): a lower tier's
// store with no token ids resolves through the GPU's engine hashes; a
// removal leaves the other tiers alone; Match asks one tier.

func heldOn(t *testing.T, x *Index, toks []uint32, id InstanceID, flags MatchFlags) uint32 {
	t.Helper()
	m, err := x.Match(&Prompt{Tokens: toks}, sec, MatchNoTouch|flags)
	if err != nil {
		t.Fatalf("Match(%#x): %v", flags, err)
	}
	for _, h := range m.Hits {
		if h.Instance == id {
			return h.Tokens
		}
	}
	return 0
}

func TestTierConstants(t *testing.T) {
	if TierGPU != 0 || TierCPU != 1 || TierDisk != 2 {
		t.Errorf("tiers %d %d %d", TierGPU, TierCPU, TierDisk)
	}
	if MatchTierCPU != 2 || MatchTierDisk != 4 {
		t.Errorf("match flags %d %d", MatchTierCPU, MatchTierDisk)
	}
	for _, c := range []struct {
		p   Param
		def float64
	}{{ParamTierCPUWeight, 0.8}, {ParamTierDiskWeight, 0.25}} {
		if b, err := c.p.Bounds(); err != nil || b.Lo != 0 || b.Hi != 1 || b.Default != c.def {
			t.Errorf("Param(%d).Bounds() = %+v, %v", c.p, b, err)
		}
	}
}

func TestIndexTiers(t *testing.T) {
	x, err := NewIndex(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const id = InstanceID(7)
	toks := prompt(64, 1)
	h := []uint64{11, 12, 13, 14}
	if err := x.KVStored(id, &KVStored{BlockHashes: h, BlockSize: 16, TokenIDs: toks}, sec); err != nil {
		t.Fatal(err)
	}
	if n := heldOn(t, x, toks, id, MatchTierCPU); n != 0 {
		t.Errorf("CPU before its first event: %d", n)
	}
	// the last two blocks offloaded, hashes only: the chain goes along
	if err := x.KVStored(id, &KVStored{BlockHashes: h[2:], Tier: TierCPU}, sec); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags MatchFlags
		want  uint32
	}{{0, 64}, {MatchTierCPU, 64}, {MatchTierDisk, 0}} {
		if n := heldOn(t, x, toks, id, c.flags); n != c.want {
			t.Errorf("tier flags %#x: %d tokens, want %d", c.flags, n, c.want)
		}
	}
	// a GPU removal leaves the CPU copy
	if n, err := x.KVRemovedTier(id, TierGPU, h[1:2]); n != 1 || err != nil {
		t.Fatalf("KVRemovedTier(GPU) = %d, %v", n, err)
	}
	if g, c := heldOn(t, x, toks, id, 0), heldOn(t, x, toks, id, MatchTierCPU); g != 16 || c != 64 {
		t.Errorf("after a GPU removal: GPU %d, CPU %d", g, c)
	}
	// a CPU removal takes the block and the deeper ones, there only
	if n, err := x.KVRemovedTier(id, TierCPU, h[3:]); n != 1 || err != nil {
		t.Fatalf("KVRemovedTier(CPU) = %d, %v", n, err)
	}
	if c := heldOn(t, x, toks, id, MatchTierCPU); c != 48 {
		t.Errorf("after a CPU removal: CPU %d", c)
	}
	// unknown hashes, instances and tiers
	err = x.KVStored(id, &KVStored{BlockHashes: []uint64{99}, Tier: TierDisk}, sec)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_index_kv_stored")
	err = x.KVStored(id, &KVStored{BlockHashes: h[:1], Tier: 3}, sec)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_kv_stored")
	_, err = x.KVRemovedTier(id, -1, h[:1])
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_kv_removed_tier")
	_, err = x.KVRemovedTier(9, TierCPU, h[:1])
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_index_kv_removed_tier")
	_, err = x.Match(&Prompt{Tokens: toks}, sec, MatchTierCPU|MatchTierDisk)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_index_match")
	// cleared: every tier
	if err := x.KVCleared(id); err != nil {
		t.Fatal(err)
	}
	if c := heldOn(t, x, toks, id, MatchTierCPU); c != 0 {
		t.Errorf("after clearing: CPU %d", c)
	}
}

// 256 tokens, 16 blocks: a holds the first 128 on its GPU; b held all 256,
// offloaded them to its CPU, then its GPU dropped the first block (and
// with it the chain). Rows: a 128 + 0, b 0 + 256. dynamo and adaptive
// choose b at the CPU weight 0.8 and a at 0.25.
func TestRouterTiers(t *testing.T) {
	toks := prompt(256, 5)
	h := make([]uint64, 16)
	for i := range h {
		h[i] = 100 + uint64(i)
	}
	for _, pol := range []Policy{PolicyDynamo, PolicyAdaptive} {
		r, ids := newTestRouter(t, pol, "10.0.0.1", "10.0.0.2")
		a, b := ids[0], ids[1]
		for _, s := range []struct {
			id InstanceID
			ev KVStored
		}{
			{a, KVStored{BlockHashes: h[:8], BlockSize: 16, TokenIDs: toks[:128]}},
			{b, KVStored{BlockHashes: h, BlockSize: 16, TokenIDs: toks}},
			{b, KVStored{BlockHashes: h, Tier: TierCPU}},
		} {
			if err := r.KVStored(s.id, &s.ev, sec); err != nil {
				t.Fatalf("%v: KVStored(%d, tier %d): %v", pol, s.id, s.ev.Tier, err)
			}
		}
		if n, err := r.KVRemovedTier(b, TierGPU, h[:1]); n != 1 || err != nil {
			t.Fatalf("%v: KVRemovedTier = %d, %v", pol, n, err)
		}
		_, err := r.KVRemovedTier(99, TierCPU, h[:1])
		wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_kv_removed_tier")
		rows := func() map[InstanceID]Candidate {
			cs, err := r.Candidates(&Request{Tokens: toks, Now: sec})
			if err != nil {
				t.Fatalf("%v: Candidates: %v", pol, err)
			}
			m := map[InstanceID]Candidate{}
			for _, c := range cs {
				m[c.Instance] = c
			}
			return m
		}
		m := rows()
		if c := m[a]; c.CachedTokens != 128 || c.CPUTokens != 0 {
			t.Errorf("%v: row a %d + %d", pol, c.CachedTokens, c.CPUTokens)
		}
		if c := m[b]; c.CachedTokens != 0 || c.CPUTokens != 256 || c.DiskTokens != 0 {
			t.Errorf("%v: row b %d + %d + %d", pol, c.CachedTokens, c.CPUTokens, c.DiskTokens)
		}
		d, err := r.Route(&Request{ID: 1, Tokens: toks, Now: sec, Flags: RouteDryRun})
		if err != nil || d.Instance != b {
			t.Errorf("%v at CPU weight 0.8: %+v, %v", pol, d, err)
		}
		if err := r.SetParam(ParamTierCPUWeight, 0.25); err != nil {
			t.Fatal(err)
		}
		d, err = r.Route(&Request{ID: 2, Tokens: toks, Now: sec, Flags: RouteDryRun})
		if err != nil || d.Instance != a {
			t.Errorf("%v at CPU weight 0.25: %+v, %v", pol, d, err)
		}
		wantStatus(t, r.SetParam(ParamTierCPUWeight, 1.5), ErrRange, StatusRange, "lr_router_set_param")
		// a block on both tiers counts on the GPU
		if err := r.KVStored(b, &KVStored{BlockHashes: h[:4], BlockSize: 16, TokenIDs: toks[:64]}, sec); err != nil {
			t.Fatal(err)
		}
		if c := rows()[b]; c.CachedTokens != 64 || c.CPUTokens != 192 {
			t.Errorf("%v: row b %d + %d after its GPU store", pol, c.CachedTokens, c.CPUTokens)
		}
	}
}

// Decide reads the columns from a table.
func TestDecideTiers(t *testing.T) {
	rows := []Candidate{NewCandidate(0), NewCandidate(1)}
	rows[0].CachedTokens = 128
	rows[1].CPUTokens = 256
	in := DefaultPolicyInput()
	in.PromptTokens = 256
	if d, err := Decide(PolicyDynamo, &in, rows); err != nil || d.Instance != 1 {
		t.Errorf("Decide: %+v, %v", d, err)
	}
	rows[0].CPUTokens = 256 // past the prompt
	_, err := Decide(PolicyDynamo, &in, rows)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_policy_decide")
}
