package main

// The gateway in front of llama.cpp's API (examples/gateway/fake_engine.py
// --llamacpp), as examples/gateway/test_llamacpp.py does for the Python
// gateway: token-id prompts on the native /completion, llama.cpp's
// metrics or none (501) or late, engine errors as failures, and the
// engine's tokenizer.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// setupLlama starts one fake llama.cpp engine per argument list and a
// gateway over them.
func setupLlama(t *testing.T, cfg Config, engineArgs ...[]string) (*Gateway, string, []*engine) {
	t.Helper()
	var engines []*engine
	for i, args := range engineArgs {
		name := fmt.Sprintf("e%d", i+1)
		e := startEngine(t, name, 0, append([]string{"--llamacpp"}, args...)...)
		engines = append(engines, e)
		cfg.Backends = append(cfg.Backends, BackendSpec{Name: name, Addr: fmt.Sprintf("127.0.0.1:%d", e.port)})
	}
	g, err := NewGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	return g, srv.URL, engines
}

type llamaStatus struct {
	Backends []struct {
		Name    string `json:"name"`
		Up      bool   `json:"up"`
		Metrics string `json:"metrics"`
		Cached  struct {
			Predicted, Observed, Requests uint64
		} `json:"cached_tokens"`
	} `json:"backends"`
	Inflight uint64 `json:"inflight"`
	Failures uint64 `json:"failures"`
}

type sseEvent struct {
	Content string   `json:"content"`
	Tokens  []uint32 `json:"tokens"`
	Stop    bool     `json:"stop"`
	Error   any      `json:"error"`
	Timings struct {
		CacheN int `json:"cache_n"`
	} `json:"timings"`
}

func events(body []byte) []sseEvent {
	var out []sseEvent
	for _, ln := range bytes.Split(body, []byte("\n")) {
		if bytes.HasPrefix(ln, []byte("data: ")) && !bytes.HasPrefix(ln, []byte("data: [DONE]")) {
			var ev sseEvent
			_ = json.Unmarshal(ln[6:], &ev)
			out = append(out, ev)
		}
	}
	return out
}

// Conversations of token ids stick to their engine; no healthy backend is
// ever drained, whether its metrics are llama.cpp's, missing (501) or late;
// every request's predicted and observed cached tokens are reported.
func TestLlamaCppTokenIDs(t *testing.T) {
	g, url, _ := setupLlama(t, Config{Policy: "prefix-cache", ProbeTimeout: 50 * time.Millisecond},
		[]string{"--slots", "2"}, []string{"--slots", "2", "--no-metrics"},
		[]string{"--slots", "2", "--metrics-wait"})
	rng := rand.New(rand.NewSource(7))
	var systems [2][]uint32
	for i := range systems {
		for k := 0; k < 160; k++ {
			systems[i] = append(systems[i], uint32(3+rng.Intn(31997)))
		}
	}
	stop := make(chan struct{})
	drained := make(chan string, 100)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var st llamaStatus
			getJSON(t, url+"/status", &st)
			for _, b := range st.Backends {
				if !b.Up {
					drained <- b.Name
				}
			}
		}
	}()
	errs := make(chan error, 6)
	var convs sync.WaitGroup
	for i := 0; i < 6; i++ {
		convs.Add(1)
		go func(i int) {
			defer convs.Done()
			r := rand.New(rand.NewSource(int64(i)))
			prompt := append([]uint32(nil), systems[i%2]...)
			backend := ""
			for k := 0; k < 4; k++ {
				for j := 0; j < 40; j++ {
					prompt = append(prompt, uint32(3+r.Intn(31997)))
				}
				data, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": 4,
					"stream": true, "return_tokens": true})
				resp, err := httpPost(url+"/completion", data)
				if err != nil {
					errs <- err
					return
				}
				evs := events(resp.body)
				if resp.code != 200 || len(evs) != 5 || !evs[4].Stop {
					errs <- fmt.Errorf("conversation %d turn %d: HTTP %d %.200s", i, k, resp.code, resp.body)
					return
				}
				for _, ev := range evs[:4] {
					prompt = append(prompt, ev.Tokens...)
				}
				b := resp.header.Get("X-Libroute-Backend")
				if backend != "" && b != backend {
					errs <- fmt.Errorf("conversation %d moved from %s to %s", i, backend, b)
					return
				}
				backend = b
				if k > 0 && evs[4].Timings.CacheN < 160 {
					errs <- fmt.Errorf("conversation %d turn %d: cache_n %d", i, k, evs[4].Timings.CacheN)
					return
				}
			}
		}(i)
	}
	convs.Wait()
	time.Sleep(300 * time.Millisecond) // a few more probes
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(drained)
	for name := range drained {
		t.Fatalf("healthy backend %s was drained", name)
	}
	var st llamaStatus
	getJSON(t, url+"/status", &st)
	kinds := map[string]string{}
	var reports, observed uint64
	for _, b := range st.Backends {
		kinds[b.Name] = b.Metrics
		reports += b.Cached.Requests
		observed += b.Cached.Observed
	}
	if kinds["e1"] != "llamacpp" || kinds["e2"] != "slots" || kinds["e3"] != "llamacpp" {
		t.Fatalf("metrics kinds %v", kinds)
	}
	if reports != 24 || observed == 0 || st.Inflight != 0 || st.Failures != 0 || g.failures.Load() != 0 {
		t.Fatalf("status %+v", st)
	}
}

type hdr map[string][]string

func (h hdr) Get(k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

type response struct {
	code   int
	header hdr
	body   []byte
}

func httpPost(url string, data []byte) (response, error) {
	r, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		return response{}, err
	}
	defer r.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(r.Body)
	return response{r.StatusCode, hdr(r.Header), buf.Bytes()}, err
}

// Errors before the first token (an HTTP 500) and inside a stream (a
// data: {"error": ...} event) reach the router as failures, never as a
// first token and a completion.
func TestLlamaCppErrorsAreFailures(t *testing.T) {
	g, url, engines := setupLlama(t, Config{Policy: "round-robin"}, []string{"--slots", "1"})
	eng := fmt.Sprintf("http://127.0.0.1:%d", engines[0].port)
	prompt := []int{100, 101, 102, 103, 104, 105}
	ttfts := func() float64 { return value(scrape(t, url), "libroute_gateway_ttft_seconds") }
	for _, stream := range []bool{false, true} {
		post(t, eng+"/admin/fail_next", map[string]any{"after": 0})
		before := ttfts()
		code, _, _ := post(t, url+"/completion", map[string]any{"prompt": prompt, "n_predict": 3, "stream": stream})
		if code != 500 {
			t.Fatalf("stream %v: HTTP %d", stream, code)
		}
		if ttfts() != before {
			t.Fatalf("stream %v: an error counted as a first token", stream)
		}
	}
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/completion", map[string]any{"prompt": prompt}},
		{"/v1/completions", map[string]any{"prompt": "a b c"}},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}}},
	} {
		post(t, eng+"/admin/fail_next", map[string]any{"after": 2})
		c.body["stream"], c.body["n_predict"], c.body["max_tokens"] = true, 5, 5
		code, _, data := post(t, url+c.path, c.body)
		evs := events(data)
		if code != 200 || len(evs) == 0 || evs[len(evs)-1].Error == nil {
			t.Fatalf("%s: HTTP %d %s", c.path, code, data)
		}
	}
	if n := g.failures.Load(); n != 5 {
		t.Fatalf("%d failures, want 5", n)
	}
	code, _, _ := post(t, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 3})
	var st llamaStatus
	getJSON(t, url+"/status", &st)
	if code != 200 || st.Failures != 5 || st.Inflight != 0 || !st.Backends[0].Up {
		t.Fatalf("HTTP %d, status %+v", code, st)
	}
}

// -tokenize: the router's tokens are the engine's, so its block-aligned
// prediction is within a block of what the engine's slot reused.
func TestLlamaCppEngineTokenizer(t *testing.T) {
	_, url, _ := setupLlama(t, Config{Policy: "prefix-cache", EngineTokenizer: true}, nil, nil)
	msgs := []map[string]string{{"role": "system", "content": "You are brief. "}}
	for i := 0; i < 5; i++ {
		msgs[0]["content"] += msgs[0]["content"]
	}
	backend := ""
	for k := 0; k < 3; k++ {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("question %d: why? why? why? why?", k)})
		code, h, data := post(t, url+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4})
		var ans struct {
			Choices []struct {
				Message map[string]string `json:"message"`
			} `json:"choices"`
			Timings struct {
				CacheN int `json:"cache_n"`
			} `json:"timings"`
		}
		if code != 200 || json.Unmarshal(data, &ans) != nil || len(ans.Choices) != 1 {
			t.Fatalf("HTTP %d %s", code, data)
		}
		if b := h.Get("X-Libroute-Backend"); backend != "" && b != backend {
			t.Fatalf("moved from %s to %s", backend, b)
		} else {
			backend = b
		}
		var pred int
		fmt.Sscan(h.Get("X-Libroute-Cached-Tokens"), &pred)
		if obs := ans.Timings.CacheN; k > 0 && (pred == 0 || pred > obs || obs-pred >= 24) {
			t.Fatalf("turn %d: predicted %d, engine reused %d", k, pred, obs)
		}
		msgs = append(msgs, ans.Choices[0].Message)
	}
	code, _, data := post(t, url+"/v1/completions", map[string]any{"prompt": "one two three four", "max_tokens": 2})
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if code != 200 || json.Unmarshal(data, &out) != nil || out.Usage.PromptTokens != 5 {
		t.Fatalf("HTTP %d %s", code, data)
	}
	if code, _, _ := post(t, url+"/completion", map[string]any{"prompt": []int{1, -2}}); code != 400 {
		t.Fatalf("bad token ids: HTTP %d", code)
	}
}

func TestObservedCachedAndPieceEnds(t *testing.T) {
	for _, c := range []struct {
		json string
		n    uint32
		ok   bool
	}{
		{`{"timings":{"cache_n":42,"prompt_n":3},"usage":{"prompt_tokens_details":{"cached_tokens":40}}}`, 42, true},
		{`{"usage": {"prompt_tokens_details": {"cached_tokens": 40}}}`, 40, true},
		{`{"content":"\"timings\": {\"cache_n\": 9}"}`, 0, false},
		{`{"timings":{"prompt_n":3}}`, 0, false},
	} {
		if n, ok := observedCached([]byte(c.json)); n != c.n || ok != c.ok {
			t.Errorf("%s: %d %v", c.json, n, ok)
		}
	}
	// "<s>" (BOS) is not in the text; " world" has a leading space the
	// text has too; the second message ends after "b".
	text := "<|u|>\nhello world<|e|>\n<|u|>\nb<|e|>\n"
	pieces := [][]byte{[]byte("<s>"), []byte("<|u|>\n"), []byte("hello"), []byte(" world"),
		[]byte("<|e|>\n<|u|>\n"), []byte("b"), []byte("<|e|>\n")}
	if got := pieceEnds(text, pieces, []string{"hello world", "b"}); len(got) != 2 || got[0] != 4 || got[1] != 7 {
		t.Fatalf("pieceEnds %v", got)
	}
	got := pieceEnds(text, pieces, []string{"hello world", "b", "c"})
	if got[1] != 6 || got[2] != 7 {
		t.Fatalf("pieceEnds %v", got)
	}
}

// llama.cpp's native stream ends with a "stop": true event and no [DONE];
// one cut before it is a failure.
func TestRelayNativeStream(t *testing.T) {
	full := "data: {\"content\":\" a\",\"stop\":false}\n\n" +
		"data: {\"content\":\" b\",\"stop\":false}\n\n" +
		"data: {\"content\":\"\",\"stop\":true,\"tokens_predicted\":2,\"timings\":{\"cache_n\":7}}\n\n"
	m := NewMetrics(nil, nil, nil, nil)
	for _, c := range []struct {
		stream string
		fails  uint64
	}{{full, 0}, {full[:40], 1}} {
		g := &Gateway{metrics: m}
		a := &attempt{g: g, routedAt: time.Now()}
		b := &relayBody{rc: io.NopCloser(strings.NewReader(c.stream)), a: a, stream: true, left: -1}
		_, _ = io.ReadAll(b)
		if !b.done || !b.first || g.failures.Load() != c.fails || (c.fails == 0 && b.out != 2) {
			t.Fatalf("%q: done %v first %v out %d failures %d", c.stream, b.done, b.first, b.out, g.failures.Load())
		}
	}
}
