package libroute

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
)

// newFleet has two instances of "llama" and one of "qwen" (with an alias).
func newFleet(t *testing.T, policy Policy, maxAdapters uint32) *Router {
	t.Helper()
	r, _ := newTestRouter(t, policy)
	for _, s := range []InstanceSpec{
		{Name: "a:8000", Models: []string{"llama"}, MaxAdapters: maxAdapters},
		{Name: "b:8000", Models: []string{"llama"}, MaxAdapters: maxAdapters},
		{Name: "c:8000", Models: []string{"qwen", "qwen-latest"}, MaxAdapters: maxAdapters},
	} {
		if _, err := r.AddInstance(s); err != nil {
			t.Fatalf("AddInstance(%+v): %v", s, err)
		}
	}
	return r
}

func TestNameHashAndAdapterSalt(t *testing.T) {
	if NameHash("") != 0 {
		t.Error(`NameHash("") != 0`)
	}
	h := NameHash("sql-lora")
	if h == 0 || h == NameHash("sql-lora2") || h != NameHash("sql-lora") {
		t.Errorf("NameHash(sql-lora) = %#x", h)
	}
	if NameHash("a\x00b") == NameHash("a") {
		t.Error("a NUL cut the name short")
	}
	if AdapterSalt(1234, 0) != 1234 {
		t.Error("AdapterSalt(s, 0) != s")
	}
	s := AdapterSalt(1234, h)
	if s == 1234 || s == 0 || s != AdapterSalt(1234, h) || s == AdapterSalt(1235, h) {
		t.Errorf("AdapterSalt(1234, h) = %#x", s)
	}
	p := prompt(64, 1)
	a, _ := BlockKeys(16, p, s)
	b, _ := BlockKeys(16, p, 1234)
	if len(a) != 4 || a[0] == b[0] {
		t.Errorf("an adapter's keys %v equal the base model's %v", a, b)
	}
}

func TestRouteByModel(t *testing.T) {
	r := newFleet(t, PolicyLeastRequest, 0)
	for i := uint64(0); i < 12; i++ {
		d, err := r.Route(&Request{ID: i, Tokens: prompt(40, int64(i)), Now: sec, Model: "llama"})
		if err != nil || d.Instance > 1 {
			t.Fatalf("llama route %d: %+v, %v", i, d, err)
		}
	}
	for i, m := range []string{"qwen", "qwen-latest"} {
		d, err := r.Route(&Request{ID: uint64(100 + i), Tokens: prompt(40, 1), Now: sec, Model: m})
		if err != nil || d.Instance != 2 {
			t.Fatalf("%s: %+v, %v", m, d, err)
		}
	}
	seen := map[InstanceID]bool{}
	for i := uint64(200); i < 230; i++ {
		d, err := r.Route(&Request{ID: i, Tokens: prompt(40, int64(i)), Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Instance] = true
	}
	if len(seen) != 3 {
		t.Errorf("no model reached %v, want all three", seen)
	}
	rows, err := r.Candidates(&Request{Tokens: prompt(40, 1), Now: sec, Model: "llama"})
	if err != nil || len(rows) != 2 || rows[0].Instance != 0 || rows[1].Instance != 1 {
		t.Errorf("llama's candidates %+v, %v", rows, err)
	}
	if in, err := r.PolicyInput(&Request{Tokens: prompt(40, 1), Model: "qwen", Adapter: "x"}); err != nil ||
		in.PromptTokens != 40 {
		t.Errorf("PolicyInput: %+v, %v", in, err)
	}
}

func TestRouteModelErrors(t *testing.T) {
	r := newFleet(t, PolicyLeastRequest, 0)
	req := &Request{ID: 1, Tokens: prompt(40, 1), Now: sec, Model: "gpt-9"}
	_, err := r.Route(req)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_route")
	_, err = r.Candidates(req)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_candidates")
	long := strings.Repeat("m", RouterMaxName+1)
	for _, q := range []Request{{Model: long}, {Adapter: long}, {Adapter: strings.Repeat("a", 4000)}} {
		q.ID, q.Tokens, q.Now = 1, prompt(40, 1), sec
		_, err := r.Route(&q)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_route")
		_, err = r.Candidates(&q)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_candidates")
		_, err = r.PolicyInput(&q)
		wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_policy_input")
	}
	// The longest name is taken (and names no model here).
	_, err = r.Route(&Request{ID: 1, Tokens: prompt(40, 1), Now: sec, Model: strings.Repeat("m", RouterMaxName)})
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_route")
	_, err = r.Route(&Request{ID: 1, Tokens: prompt(40, 1), Now: sec, Model: "a\x00b"})
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_router_route")
	// Draining every instance of a model: ErrState, not ErrNotFound.
	if err := r.DrainInstance(2, true); err != nil {
		t.Fatal(err)
	}
	_, err = r.Route(&Request{ID: 1, Tokens: prompt(40, 1), Now: sec, Model: "qwen"})
	wantStatus(t, err, ErrState, StatusState, "lr_router_route")
	if st, _ := r.Stats(); st.Routes != 0 || st.Inflight != 0 {
		t.Errorf("failed routes recorded: %+v", st)
	}

	const add = "lr_router_add_instance"
	for _, s := range []InstanceSpec{
		{Name: "x", Models: []string{long}},
		{Name: "x", Models: []string{""}},
		{Name: "x", Models: []string{"a\x00b"}},
		{Name: "x", Models: make([]string, RouterMaxModels+1)},
	} {
		_, err := r.AddInstance(s)
		wantStatus(t, err, ErrInvalid, StatusInvalid, add)
	}
	_, err = r.AddInstance(InstanceSpec{Name: "x", MaxAdapters: RouterMaxAdapters + 1})
	wantStatus(t, err, ErrRange, StatusRange, add)
	if r.InstanceCount() != 3 {
		t.Errorf("%d instances after failed adds", r.InstanceCount())
	}
	models := make([]string, RouterMaxModels)
	for i := range models {
		models[i] = fmt.Sprintf("m%d", i)
	}
	if _, err := r.AddInstance(InstanceSpec{Name: "x", Models: models, MaxAdapters: RouterMaxAdapters}); err != nil {
		t.Error(err)
	}
}

func TestAdapters(t *testing.T) {
	r := newFleet(t, PolicyAIBrixLoRA, 2)
	req := Request{ID: 1, Tokens: prompt(40, 1), Now: sec, Model: "llama", Adapter: "sql"}
	d, err := r.Route(&req)
	if err != nil || d.Instance > 1 {
		t.Fatalf("first sql route: %+v, %v", d, err)
	}
	if got, err := r.Adapters(d.Instance); err != nil || len(got) != 1 || got[0] != NameHash("sql") {
		t.Errorf("Adapters(%d) = %v, %v", d.Instance, got, err)
	}
	if got, err := r.Adapters(2); err != nil || len(got) != 0 {
		t.Errorf("Adapters(2) = %v, %v", got, err)
	}
	req.ID, req.Tokens = 2, prompt(40, 2)
	d2, err := r.Route(&req)
	if err != nil || d2.Instance != d.Instance || d2.Reason != ReasonAdapter {
		t.Errorf("second sql route: %+v, %v; first went to %d", d2, err, d.Instance)
	}
	if st, _ := r.Stats(); st.AdapterRoutes != 2 || st.AdapterLoads != 1 {
		t.Errorf("adapter routes %d loads %d, want 2 1", st.AdapterRoutes, st.AdapterLoads)
	}

	r = newFleet(t, PolicyAIBrixLoRA, 4)
	if err := r.SetAdapters(1, AdapterStats{Running: []string{"sql", "chat"}, Waiting: []string{"code"},
		Scraped: sec}); err != nil {
		t.Fatal(err)
	}
	got, _ := r.Adapters(1)
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	want := []uint64{NameHash("sql"), NameHash("chat"), NameHash("code")}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Adapters(1) = %v, want %v", got, want)
	}
	rows, err := r.Candidates(&Request{Tokens: prompt(40, 1), Now: sec, Model: "llama", Adapter: "code"})
	if err != nil || len(rows) != 2 {
		t.Fatalf("Candidates: %+v, %v", rows, err)
	}
	load, _ := r.Param(ParamAdapterLoadSeconds)
	if c := rows[1]; c.AdapterMissing != 0 || c.AdapterLoadSeconds != 0 || c.AdaptersResident != 3 {
		t.Errorf("resident row %+v", c)
	}
	if c := rows[0]; c.AdapterMissing != 1 || c.AdapterFree != 4 || c.AdapterLoadSeconds != load ||
		c.AdapterEvicts != 0 {
		t.Errorf("missing row %+v (load %g)", c, load)
	}
	if d, err := r.Route(&Request{ID: 1, Tokens: prompt(40, 1), Now: sec, Model: "llama", Adapter: "code"}); err != nil ||
		d.Instance != 1 {
		t.Errorf("code route: %+v, %v", d, err)
	}
	if err := r.SetAdapters(1, AdapterStats{Running: []string{"chat"}, MaxAdapters: 1, Scraped: 2 * sec}); err != nil {
		t.Error(err)
	}
	if got, _ := r.Adapters(1); len(got) == 0 || got[0] != NameHash("chat") {
		t.Errorf("after a report, Adapters(1) = %v", got)
	}

	const op = "lr_router_set_adapters"
	long := strings.Repeat("x", RouterMaxName+1)
	tooMany := make([]string, RouterMaxAdapters+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("a%d", i)
	}
	for _, s := range []AdapterStats{
		{Running: []string{""}}, {Waiting: []string{long}}, {Running: []string{"a\x00"}},
		{Running: tooMany},
	} {
		wantStatus(t, r.SetAdapters(0, s), ErrInvalid, StatusInvalid, op)
	}
	wantStatus(t, r.SetAdapters(0, AdapterStats{MaxAdapters: RouterMaxAdapters + 1}), ErrRange, StatusRange, op)
	wantStatus(t, r.SetAdapters(9, AdapterStats{Running: []string{"a"}}), ErrNotFound, StatusNotFound, op)
	_, err = r.Adapters(9)
	wantStatus(t, err, ErrNotFound, StatusNotFound, "lr_router_adapters")
	if got, _ := r.Adapters(0); len(got) != 0 {
		t.Errorf("failed reports changed instance 0: %v", got)
	}

	// More resident than the first buffer holds.
	r, _ = newTestRouter(t, PolicyLeastRequest)
	if _, err := r.AddInstance(InstanceSpec{Name: "a", MaxAdapters: 64}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("lora-%d", i)
	}
	if err := r.SetAdapters(0, AdapterStats{Running: names, Scraped: sec}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Adapters(0); err != nil || len(got) != 40 {
		t.Errorf("Adapters(0): %d, %v", len(got), err)
	}
}

func TestAdapterPrefixesApart(t *testing.T) {
	r, _ := newTestRouter(t, PolicyPrefixCacheAndLoad, "a", "b", "c", "d")
	p := prompt(256, 3)
	d, err := r.Route(&Request{ID: 1, Tokens: p, Now: sec, Adapter: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(1, 1, sec+1); err != nil {
		t.Fatal(err)
	}
	hit, _ := r.Route(&Request{ID: 2, Tokens: p, Now: 2 * sec, Adapter: "sql", Flags: RouteDryRun})
	if hit.Instance != d.Instance || hit.CachedTokens == 0 {
		t.Errorf("same adapter: %+v, first %+v", hit, d)
	}
	for _, a := range []string{"", "chat"} {
		o, _ := r.Route(&Request{ID: 3, Tokens: p, Now: 2 * sec, Adapter: a, Flags: RouteDryRun})
		if o.CachedTokens != 0 {
			t.Errorf("adapter %q hit the sql adapter's prefix: %+v", a, o)
		}
	}
}

func TestDecideLoRAAffinity(t *testing.T) {
	rows := []Candidate{NewCandidate(0), NewCandidate(1), NewCandidate(2)}
	rows[0].AdapterMissing, rows[0].AdapterFree, rows[0].AdapterLoadSeconds = 1, 0, 0.1
	rows[2].AdapterMissing, rows[2].AdapterFree, rows[2].AdapterLoadSeconds = 1, 2, 0.1
	if rows[1].AdapterFree != math.MaxUint32 {
		t.Errorf("NewCandidate's AdapterFree = %d", rows[1].AdapterFree)
	}
	in := DefaultPolicyInput()
	in.PromptTokens = 10
	d, err := Decide(PolicyLoRAAffinity, &in, rows)
	if err != nil || d.Instance != 1 || d.Reason != ReasonAdapter {
		t.Errorf("Decide: %+v, %v", d, err)
	}
	rows[1].AdapterMissing = 2
	_, err = Decide(PolicyLoRAAffinity, &in, rows)
	wantStatus(t, err, ErrInvalid, StatusInvalid, "lr_policy_decide")
	if PolicyLoRAAffinity.String() != "lora-affinity" || PolicyAIBrixLoRA.String() != "aibrix-lora" ||
		ReasonAdapter.String() != "adapter" {
		t.Errorf("names %v %v %v", PolicyLoRAAffinity, PolicyAIBrixLoRA, ReasonAdapter)
	}
	if b, err := ParamAdapterLoadSeconds.Bounds(); err != nil || b.Default != 0.1 {
		t.Errorf("ParamAdapterLoadSeconds.Bounds() = %+v, %v", b, err)
	}
}
