package main

// Models and LoRA adapters end to end, as examples/gateway/test_lora.py:
// fake vLLM engines (fake_engine.py --models, --max-loras,
// --lora-modules, --hide-adapters) behind the gateway.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"libroute"
)

// loraFleet: e1 and e2 serve llama with 2 adapter slots, e3 qwen without
// adapters.
func loraFleet(t *testing.T, cfg Config) (*Gateway, string, []*engine) {
	t.Helper()
	lora := []string{"--models", "llama", "--max-loras", "2", "--lora-modules", "sql,chat,code"}
	engines := []*engine{
		startEngine(t, "e1", 0, lora...),
		startEngine(t, "e2", 0, lora...),
		startEngine(t, "e3", 0, "--models", "qwen,qwen-7b"),
	}
	for i, e := range engines {
		s := BackendSpec{Name: e.name, Addr: fmt.Sprintf("127.0.0.1:%d", e.port),
			Models: []string{"llama"}, MaxLoRAs: 2}
		if i == 2 {
			s.Models, s.MaxLoRAs = []string{"qwen", "qwen-7b"}, 0
		}
		cfg.Backends = append(cfg.Backends, s)
	}
	if cfg.ScrapeEvery == 0 {
		cfg.ScrapeEvery = 50 * time.Millisecond
	}
	g, err := NewGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	return g, srv.URL, engines
}

type loraAnswer struct {
	Backend string `json:"backend"`
	Usage   struct {
		LoRA   *string `json:"lora"`
		Loaded bool    `json:"lora_loaded"`
	} `json:"usage"`
}

func complete(t *testing.T, url, model, prompt string) loraAnswer {
	t.Helper()
	code, hdr, data := post(t, url+"/v1/completions",
		map[string]any{"model": model, "prompt": prompt, "max_tokens": 2})
	if code != 200 {
		t.Fatalf("%s: HTTP %d: %s", model, code, data)
	}
	var a loraAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatal(err)
	}
	if a.Backend != hdr.Get("X-Libroute-Backend") {
		t.Fatalf("answered by %s, header says %s", a.Backend, hdr.Get("X-Libroute-Backend"))
	}
	return a
}

func TestLoRABaseModelsAndAdapters(t *testing.T) {
	g, url, _ := loraFleet(t, Config{Policy: "aibrix-lora"})
	for i := 0; i < 6; i++ {
		a := complete(t, url, "llama", strings.Repeat(fmt.Sprintf("llama prompt %d ", i), 8))
		if a.Backend != "e1" && a.Backend != "e2" || a.Usage.LoRA != nil {
			t.Fatalf("llama request %d: %+v", i, a)
		}
	}
	for _, m := range []string{"qwen", "qwen-7b"} {
		if a := complete(t, url, m, strings.Repeat("qwen ", 20)); a.Backend != "e3" {
			t.Fatalf("%s went to %s", m, a.Backend)
		}
	}
	first := complete(t, url, "sql", strings.Repeat("select ", 40))
	home := first.Backend
	if home != "e1" && home != "e2" || !first.Usage.Loaded {
		t.Fatalf("first sql request: %+v", first)
	}
	for i := 0; i < 8; i++ {
		a := complete(t, url, "sql", strings.Repeat(fmt.Sprintf("select %d ", i), 20))
		if a.Backend != home || a.Usage.Loaded || a.Usage.LoRA == nil || *a.Usage.LoRA != "sql" {
			t.Fatalf("sql request %d: %+v (home %s)", i, a, home)
		}
	}
	other := complete(t, url, "chat", strings.Repeat("hello ", 40)).Backend
	if other == home || other == "e3" {
		t.Fatalf("chat went to %s, sql's home %s", other, home)
	}
	for i := 0; i < 4; i++ {
		if a := complete(t, url, "chat", strings.Repeat(fmt.Sprintf("hi %d ", i), 20)); a.Backend != other {
			t.Fatalf("chat request %d went to %s, not %s", i, a.Backend, other)
		}
	}
	st, _ := g.router.Stats()
	if st.AdapterRoutes != 14 || st.AdapterLoads != 2 {
		t.Errorf("adapter routes %d loads %d, want 14 2", st.AdapterRoutes, st.AdapterLoads)
	}
	fams := scrape(t, url)
	if v := value(fams, "libroute_adapter_routes_total"); v != 14 {
		t.Errorf("libroute_adapter_routes_total %v", v)
	}
	if v := value(fams, "libroute_adapter_loads_total"); v != 2 {
		t.Errorf("libroute_adapter_loads_total %v", v)
	}
	var status struct {
		AdapterRoutes uint64 `json:"adapter_routes"`
		Backends      []struct {
			Name     string   `json:"name"`
			Models   []string `json:"models"`
			Adapters int      `json:"adapters"`
		} `json:"backends"`
	}
	getJSON(t, url+"/status", &status)
	if status.AdapterRoutes != 14 || !reflect.DeepEqual(status.Backends[2].Models, []string{"qwen", "qwen-7b"}) {
		t.Errorf("status %+v", status)
	}
}

func TestLoRAUnknownModel(t *testing.T) {
	_, url, _ := loraFleet(t, Config{Policy: "aibrix-lora"})
	// An adapter the engines do not know: the engine's 404, relayed.
	code, _, data := post(t, url+"/v1/completions", map[string]any{"model": "gpt-9", "prompt": strings.Repeat("x", 64)})
	if code != 404 || !strings.Contains(string(data), "does not exist") {
		t.Errorf("unknown adapter: HTTP %d: %s", code, data)
	}
	code, _, data = post(t, url+"/v1/completions", map[string]any{"model": strings.Repeat("m", 300), "prompt": "x"})
	if code != 400 {
		t.Errorf("a name too long: HTTP %d: %s", code, data)
	}
	code, _, data = post(t, url+"/v1/completions", map[string]any{"model": 7, "prompt": "x"})
	if code != 400 {
		t.Errorf("a model that is not a string: HTTP %d: %s", code, data)
	}

	// No backend with adapter slots: the gateway's own 404.
	e1 := startEngine(t, "e1", 0, "--models", "llama")
	g, err := NewGateway(Config{Policy: "least-request", Backends: []BackendSpec{
		{Name: "e1", Addr: fmt.Sprintf("127.0.0.1:%d", e1.port), Models: []string{"llama"}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer func() { srv.Close(); g.Close() }()
	code, _, data = post(t, srv.URL+"/v1/completions", map[string]any{"model": "gpt-9", "prompt": "x"})
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if code != 404 || json.Unmarshal(data, &e) != nil || e.Error.Type != "NotFoundError" || e.Error.Code != 404 ||
		!strings.Contains(e.Error.Message, "gpt-9") {
		t.Errorf("unknown model: HTTP %d: %s", code, data)
	}
	if st, _ := g.router.Stats(); st.Routes != 0 {
		t.Errorf("%d routes for an unknown model", st.Routes)
	}
	if a := complete(t, srv.URL, "llama", "hello"); a.Backend != "e1" {
		t.Errorf("llama went to %s", a.Backend)
	}
}

func TestLoRAScrapedAdaptersReachTheRouter(t *testing.T) {
	g, url, engines := loraFleet(t, Config{Policy: "aibrix-lora"})
	e2 := fmt.Sprintf("http://127.0.0.1:%d", engines[1].port)
	id, err := g.router.FindInstance("e2")
	if err != nil {
		t.Fatal(err)
	}
	// A request for "code" held on e2, sent there past the gateway: e2
	// reports the adapter waiting.
	post(t, e2+"/admin/hold", map[string]any{"on": true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := strings.NewReader(`{"model": "code", "prompt": "def f(): def f():", "max_tokens": 1}`)
		if r, err := http.Post(e2+"/v1/completions", "application/json", body); err == nil {
			r.Body.Close()
		}
	}()
	want := libroute.NameHash("code")
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, _ := g.router.Adapters(id)
		if len(got) > 0 && contains(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scrape never reported the adapter")
		}
		time.Sleep(20 * time.Millisecond)
	}
	post(t, e2+"/admin/hold", map[string]any{"on": false})
	<-done
	if a := complete(t, url, "code", strings.Repeat("def g(): ", 20)); a.Backend != "e2" || a.Usage.Loaded {
		t.Errorf("code request: %+v", a)
	}
}

func contains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestParseBackendAndLoRAInfo(t *testing.T) {
	s, err := parseBackend("e1=h:1", []string{"llama"}, 2)
	if err != nil || !reflect.DeepEqual(s, BackendSpec{Name: "e1", Addr: "h:1", Models: []string{"llama"}, MaxLoRAs: 2}) {
		t.Errorf("%+v, %v", s, err)
	}
	s, err = parseBackend("e1=h:1,models=qwen+qwen-7b,max_loras=4", []string{"x"}, 1)
	if err != nil || !reflect.DeepEqual(s, BackendSpec{Name: "e1", Addr: "h:1", Models: []string{"qwen", "qwen-7b"}, MaxLoRAs: 4}) {
		t.Errorf("%+v, %v", s, err)
	}
	for _, bad := range []string{"e1", "e1=h", "e1=h:1,loras=2", "e1=h:1,max_loras=x", "e1=h:1,max_loras=-1"} {
		if _, err := parseBackend(bad, nil, 0); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	text := []byte("vllm:num_requests_running 1\n" +
		`vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7e9` + "\n" +
		`vllm:lora_requests_info{max_lora="4",running_lora_adapters="code",waiting_lora_adapters="sql"} 1.8e9` + "\n" +
		`vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters=""} 1.6e9` + "\n")
	info, ok := parseLoRAInfo(text)
	if !ok || !reflect.DeepEqual(info, loraInfo{running: []string{"code"}, waiting: []string{"sql"}, maxLoRA: 4}) {
		t.Errorf("parseLoRAInfo: %+v, %v", info, ok)
	}
	if _, ok := parseLoRAInfo([]byte("vllm:num_requests_running 1\n")); ok {
		t.Error("lora info found where there is none")
	}
}

// twoBaseFleet: e0, e1 serve llama-3-8b and e2, e3 qwen-7b, each base with
// its own adapters and every engine with adapter slots, so no model is
// common to the backends with slots; round-robin spreads every request
// over the backends its model allows. args go to every engine.
func twoBaseFleet(t *testing.T, cfg Config, args ...string) (*Gateway, string, []*engine) {
	t.Helper()
	var engines []*engine
	for i, name := range []string{"e0", "e1", "e2", "e3"} {
		base, loras := "llama-3-8b", "sql,chat"
		if i >= 2 {
			base, loras = "qwen-7b", "summarize,translate"
		}
		e := startEngine(t, name, 0, append([]string{"--models", base, "--max-loras", "2",
			"--lora-modules", loras}, args...)...)
		engines = append(engines, e)
		cfg.Backends = append(cfg.Backends, BackendSpec{Name: name,
			Addr: fmt.Sprintf("127.0.0.1:%d", e.port), Models: []string{base}, MaxLoRAs: 2})
	}
	cfg.Policy, cfg.ScrapeEvery = "round-robin", 50*time.Millisecond
	g, err := NewGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	return g, srv.URL, engines
}

// adapterBases is /status's adapter_bases.
func adapterBases(t *testing.T, url string) map[string]string {
	t.Helper()
	var st struct {
		AdapterBases map[string]string `json:"adapter_bases"`
	}
	getJSON(t, url+"/status", &st)
	return st.AdapterBases
}

// waitBases waits until the scrapes have read want (a base of "" : until
// the adapter is not known).
func waitBases(t *testing.T, url string, want map[string]string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, done := adapterBases(t, url), true
		for k, v := range want {
			if b, ok := got[k]; v == "" && ok || v != "" && b != v {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("adapter bases %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkHomes sends n requests of each adapter: each reaches only its
// base's backends, and both of them serve some.
func checkHomes(t *testing.T, url string, n int) {
	t.Helper()
	homes := map[string][2]string{"sql": {"e0", "e1"}, "chat": {"e0", "e1"},
		"summarize": {"e2", "e3"}, "translate": {"e2", "e3"}}
	for adapter, home := range homes {
		seen := map[string]bool{}
		for i := 0; i < n; i++ {
			a := complete(t, url, adapter, strings.Repeat(fmt.Sprintf("%s %d ", adapter, i), 20))
			if a.Backend != home[0] && a.Backend != home[1] || a.Usage.LoRA == nil || *a.Usage.LoRA != adapter {
				t.Fatalf("%s request %d: %+v, want %v", adapter, i, a, home)
			}
			seen[a.Backend] = true
		}
		if len(seen) != 2 {
			t.Errorf("%s served by %v only", adapter, seen)
		}
	}
}

func loraAdmin(t *testing.T, e *engine, path, name string) {
	t.Helper()
	code, _, data := post(t, fmt.Sprintf("http://127.0.0.1:%d%s", e.port, path),
		map[string]any{"lora_name": name, "lora_path": "/adapters/" + name})
	if code != 200 {
		t.Fatalf("%s %s on %s: HTTP %d: %s", path, name, e.name, code, data)
	}
}

func TestLoRATwoBasesListed(t *testing.T) {
	g, url, engines := twoBaseFleet(t, Config{})
	waitBases(t, url, map[string]string{"sql": "llama-3-8b", "chat": "llama-3-8b",
		"summarize": "qwen-7b", "translate": "qwen-7b"})
	if m, a, err := g.modelOf("chat"); m != "llama-3-8b" || a != "chat" || err != nil {
		t.Errorf("modelOf(chat) = %q %q %v", m, a, err)
	}
	checkHomes(t, url, 6)
	// An adapter nobody lists: no known base, and no model the backends
	// with slots share, so any backend (the rule of an adapter of no
	// known base).
	if m, a, err := g.modelOf("mystery"); m != "" || a != "mystery" || err != nil {
		t.Errorf("modelOf(mystery) = %q %q %v", m, a, err)
	}
	// One loaded at runtime (vLLM's /v1/load_lora_adapter) on the qwen
	// engines: known from their next scrape, and routed there.
	for _, e := range engines[2:] {
		loraAdmin(t, e, "/v1/load_lora_adapter", "poet")
	}
	waitBases(t, url, map[string]string{"poet": "qwen-7b"})
	for i := 0; i < 4; i++ {
		if a := complete(t, url, "poet", strings.Repeat(fmt.Sprintf("verse %d ", i), 20)); a.Backend != "e2" && a.Backend != "e3" {
			t.Fatalf("poet request %d went to %s", i, a.Backend)
		}
	}
	// Unloaded: forgotten at the next scrape.
	for _, e := range engines[2:] {
		loraAdmin(t, e, "/v1/unload_lora_adapter", "poet")
	}
	waitBases(t, url, map[string]string{"poet": ""})
	// Listed under both bases: ambiguous, no known base.
	loraAdmin(t, engines[0], "/v1/load_lora_adapter", "dup")
	loraAdmin(t, engines[2], "/v1/load_lora_adapter", "dup")
	for deadline := time.Now().Add(10 * time.Second); ; {
		g.parentsMu.Lock()
		both := g.backends[0].parents["dup"] != "" && g.backends[2].parents["dup"] != ""
		g.parentsMu.Unlock()
		if both {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scrapes never listed dup")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m, _, _ := g.modelOf("dup"); m != "" {
		t.Errorf("dup, listed under two bases, has base %q", m)
	}
	if _, ok := adapterBases(t, url)["dup"]; ok {
		t.Error("dup in adapter_bases")
	}
}

func TestLoRATwoBasesFlag(t *testing.T) {
	bases := map[string]string{"sql": "llama-3-8b", "chat": "llama-3-8b",
		"summarize": "qwen-7b", "translate": "qwen-7b"}
	g, url, engines := twoBaseFleet(t, Config{Adapters: bases}, "--hide-adapters")
	// the engines list no adapters: the flags alone, from the start
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/v1/models", engines[0].port), &list)
	if len(list.Data) != 1 || list.Data[0].ID != "llama-3-8b" {
		t.Errorf("e0 lists %+v", list.Data)
	}
	if got := adapterBases(t, url); !reflect.DeepEqual(got, bases) {
		t.Errorf("adapter_bases %v", got)
	}
	checkHomes(t, url, 6)
	if m, a, err := g.modelOf("mystery"); m != "" || a != "mystery" || err != nil {
		t.Errorf("modelOf(mystery) = %q %q %v", m, a, err)
	}
	for _, bad := range []map[string]string{{"sql": "qwen"}, {"llama": "llama"}} {
		_, err := NewGateway(Config{Policy: "round-robin", Adapters: bad,
			Backends: []BackendSpec{{Name: "x", Addr: "127.0.0.1:1", Models: []string{"llama"}}}})
		if err == nil {
			t.Errorf("adapters %v accepted", bad)
		}
	}
}

func TestParseModelListAndAdapters(t *testing.T) {
	// vLLM's GET /v1/models: base models (parent null), then adapters
	listing := []byte(`{"object": "list", "data": [
		{"id": "llama", "object": "model", "root": "/m/llama", "parent": null},
		{"id": "sql", "object": "model", "root": "/a/sql", "parent": "llama"},
		{"id": "alien", "root": "/a/alien", "parent": "mistral"},
		{"id": "llama", "parent": "llama"},
		{"id": "", "parent": "llama"},
		{"id": 7, "parent": "llama"},
		{"id": "chat", "parent": "llama", "root": "/a/chat"},
		"junk"]}`)
	got, ok := parseModelList(listing, map[string]bool{"llama": true})
	if !ok || !reflect.DeepEqual(got, map[string]string{"sql": "llama", "chat": "llama"}) {
		t.Errorf("parseModelList: %v, %v", got, ok)
	}
	if got, ok := parseModelList(listing, map[string]bool{"qwen": true}); !ok || len(got) != 0 {
		t.Errorf("parseModelList, qwen: %v, %v", got, ok)
	}
	for _, bad := range []string{"", "[]", `{"data": 1}`, "{"} {
		if _, ok := parseModelList([]byte(bad), map[string]bool{"llama": true}); ok {
			t.Errorf("%q read as a model list", bad)
		}
	}
	a, err := parseAdapters([]string{"sql=llama", "x=qwen"})
	if err != nil || !reflect.DeepEqual(a, map[string]string{"sql": "llama", "x": "qwen"}) {
		t.Errorf("parseAdapters: %v, %v", a, err)
	}
	for _, bad := range []string{"sql", "=llama", "sql="} {
		if _, err := parseAdapters([]string{bad}); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
