package main

// End to end, as examples/gateway/test_gateway.py and test_metrics.py do
// for the Python gateway: fake engines (examples/gateway/fake_engine.py,
// real python3 processes on loopback) behind the gateway, driven over
// HTTP.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"libroute"
)

const (
	conversations = 8
	turns         = 4
)

// ---- fake engines -------------------------------------------------------------

type engine struct {
	name   string
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEngine runs fake_engine.py on port (0: a free one), with args
// (--llamacpp, ...), and waits until it answers /health.
func startEngine(t *testing.T, name string, port int, args ...string) *engine {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed for the fake engines: %v", err)
	}
	if port == 0 {
		port = freePort(t)
	}
	script := filepath.Join("..", "gateway", "fake_engine.py")
	e := &engine{name: name, port: port}
	for try := 0; ; try++ {
		e.cmd = exec.Command(py, append([]string{script, "--port", fmt.Sprint(port), "--name", name}, args...)...)
		e.cmd.Stderr = os.Stderr
		if err := e.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		e.exited = exited
		go func(c *exec.Cmd) { _ = c.Wait(); close(exited) }(e.cmd)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited: // the port was taken meanwhile: try again
				deadline = time.Time{}
				continue
			default:
			}
			if r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port)); err == nil {
				r.Body.Close()
				t.Cleanup(func() { e.stop() })
				return e
			}
			time.Sleep(20 * time.Millisecond)
		}
		e.stop()
		if try == 3 {
			t.Fatalf("engine %s on port %d did not start", name, port)
		}
	}
}

func (e *engine) stop() {
	_ = e.cmd.Process.Kill()
	select {
	case <-e.exited: // reaped by the Wait goroutine
	case <-time.After(5 * time.Second):
	}
}

// setup starts three engines and a gateway over them.
func setup(t *testing.T, cfg Config) (*Gateway, string, []*engine) {
	t.Helper()
	return setupEngines(t, cfg, "e1", "e2", "e3")
}

// setupEngines starts an engine of each name and a gateway over them.
func setupEngines(t *testing.T, cfg Config, names ...string) (*Gateway, string, []*engine) {
	t.Helper()
	var engines []*engine
	for _, name := range names {
		e := startEngine(t, name, 0)
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

// ---- clients ------------------------------------------------------------------

func post(t *testing.T, url string, body any) (int, http.Header, []byte) {
	t.Helper()
	data, _ := json.Marshal(body)
	r, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	out, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return r.StatusCode, r.Header, out
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

type status struct {
	Backends []struct {
		Name string `json:"name"`
		Up   bool   `json:"up"`
	} `json:"backends"`
	Routes   uint64            `json:"routes"`
	Reasons  map[string]uint64 `json:"reasons"`
	Inflight uint64            `json:"inflight"`
}

// chat is one conversation: a growing list of messages.
type chat struct {
	i        int
	messages []map[string]string
	backends []string
	cached   []int
}

func newChat(i int) *chat {
	return &chat{i: i, messages: []map[string]string{{"role": "system",
		"content": fmt.Sprintf("You are assistant number %d. ", i) + strings.Repeat("Be brief. ", 20)}}}
}

type usage struct {
	CachedBlocks int `json:"cached_blocks"`
}

// turn asks the next question (odd turns streamed) and records where it
// went and what the engine had cached. Safe to call from a goroutine: it
// returns an error rather than failing the test.
func (c *chat) turn(url string, k int) error {
	c.messages = append(c.messages, map[string]string{"role": "user",
		"content": fmt.Sprintf("Question %d of chat %d: ", k, c.i) + strings.Repeat("why? ", 10+k)})
	stream := k%2 == 1
	data, _ := json.Marshal(map[string]any{"model": "m", "messages": c.messages,
		"max_tokens": 6, "stream": stream})
	r, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return err
	}
	if r.StatusCode != 200 {
		return fmt.Errorf("chat %d turn %d: HTTP %d: %.200s", c.i, k, r.StatusCode, body)
	}
	var final struct {
		Backend string `json:"backend"`
		Usage   usage  `json:"usage"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	answer := ""
	if stream {
		var lines [][]byte
		for _, ln := range bytes.Split(body, []byte("\n")) {
			if bytes.HasPrefix(ln, []byte("data: ")) {
				lines = append(lines, ln[6:])
			}
		}
		if len(lines) < 2 || string(lines[len(lines)-1]) != "[DONE]" {
			return fmt.Errorf("chat %d turn %d: stream %q", c.i, k, body)
		}
		if err := json.Unmarshal(lines[len(lines)-2], &final); err != nil {
			return err
		}
		for _, ln := range lines[:len(lines)-2] {
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(ln, &chunk); err != nil || len(chunk.Choices) != 1 {
				return fmt.Errorf("chunk %q: %v", ln, err)
			}
			answer += chunk.Choices[0].Delta.Content
		}
	} else {
		if err := json.Unmarshal(body, &final); err != nil || len(final.Choices) != 1 {
			return fmt.Errorf("answer %q: %v", body, err)
		}
		answer = final.Choices[0].Message.Content
	}
	if h := r.Header.Get("X-Libroute-Backend"); final.Backend != h {
		return fmt.Errorf("chat %d: served by %q, header says %q", c.i, final.Backend, h)
	}
	for _, h := range []string{"X-Libroute-Reason", "X-Libroute-Decider", "X-Libroute-Cached-Tokens"} {
		if r.Header.Get(h) == "" {
			return fmt.Errorf("chat %d: no %s header", c.i, h)
		}
	}
	c.backends = append(c.backends, final.Backend)
	c.cached = append(c.cached, final.Usage.CachedBlocks)
	c.messages = append(c.messages, map[string]string{"role": "assistant", "content": answer})
	return nil
}

// round runs turn k of every chat at once.
func round(t *testing.T, url string, chats []*chat, k int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(chats))
	for _, c := range chats {
		wg.Add(1)
		go func(c *chat) {
			defer wg.Done()
			if err := c.turn(url, k); err != nil {
				errs <- err
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func last(s []string) string { return s[len(s)-1] }

// ---- routing --------------------------------------------------------------------

// A conversation's turns stick to one backend, whose cache then serves the
// history; conversations spread; a backend that dies is routed around (no
// request fails, its conversations move and stay), drained, and undrained
// once it is back.
func TestStickySpreadAndFailover(t *testing.T) {
	// Probes once a second, so that the round after the kill usually
	// meets the dead engine on the request path (a refused connection,
	// retried elsewhere) before a probe drains it.
	g, url, engines := setup(t, Config{Policy: "prefix-cache", ScrapeEvery: time.Second})
	chats := make([]*chat, conversations)
	for i := range chats {
		chats[i] = newChat(i)
	}
	for k := 0; k < turns; k++ {
		round(t, url, chats, k)
	}
	used := map[string]int{}
	for _, c := range chats {
		for _, b := range c.backends {
			if b != c.backends[0] {
				t.Fatalf("chat %d moved: %v", c.i, c.backends)
			}
		}
		for _, n := range c.cached[1:] {
			if n == 0 {
				t.Fatalf("chat %d: cached blocks %v", c.i, c.cached)
			}
		}
		used[c.backends[0]]++
	}
	if len(used) < 2 {
		t.Fatalf("all chats on %v", used)
	}

	victim := ""
	for b, n := range used {
		if victim == "" || n > used[victim] || (n == used[victim] && b < victim) {
			victim = b
		}
	}
	var dead *engine
	for _, e := range engines {
		if e.name == victim {
			dead = e
		}
	}
	dead.stop()
	var st status
	getJSON(t, url+"/status", &st)
	probed := false // a probe drained it first: no request meets it
	for _, b := range st.Backends {
		probed = probed || (b.Name == victim && !b.Up)
	}
	round(t, url, chats, turns)
	for _, c := range chats {
		if last(c.backends) == victim {
			t.Fatalf("chat %d still on %s", c.i, victim)
		}
	}
	getJSON(t, url+"/status", &st)
	for _, b := range st.Backends {
		if b.Up != (b.Name != victim) {
			t.Fatalf("after %s died: %+v", victim, st.Backends)
		}
	}
	if st.Inflight != 0 {
		t.Fatalf("in flight: %d", st.Inflight)
	}
	if g.retries.Load() == 0 && !probed {
		t.Fatal("no retry counted")
	}
	round(t, url, chats, turns+1)
	moved := 0
	for _, c := range chats {
		if c.backends[0] == victim {
			moved++
			if n := len(c.backends); c.backends[n-1] != c.backends[n-2] {
				t.Fatalf("moved chat %d did not stick: %v", c.i, c.backends)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no chat moved")
	}

	startEngine(t, victim, dead.port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		getJSON(t, url+"/status", &st)
		up := 0
		for _, b := range st.Backends {
			if b.Up {
				up++
			}
		}
		if up == len(st.Backends) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not undrained: %+v", victim, st.Backends)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBadRequests(t *testing.T) {
	_, url, _ := setup(t, Config{Policy: "prefix-cache"})
	if code, _, _ := post(t, url+"/v1/completions", map[string]any{"prompt": 5}); code != 400 {
		t.Errorf("prompt 5: HTTP %d", code)
	}
	if code, _, _ := post(t, url+"/v1/nothing", map[string]any{}); code != 404 {
		t.Errorf("/v1/nothing: HTTP %d", code)
	}
	r, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader("[1, 2"))
	if err != nil || r.StatusCode != 400 {
		t.Errorf("broken JSON: %v %v", r, err)
	}
	r.Body.Close()
	code, hdr, data := post(t, url+"/v1/completions", map[string]any{"prompt": strings.Repeat("hello ", 40), "max_tokens": 3})
	if code != 200 {
		t.Fatalf("HTTP %d: %s", code, data)
	}
	var out struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Usage.CompletionTokens != 3 {
		t.Errorf("%s: %v", data, err)
	}
	if d := hdr.Get("X-Libroute-Decider"); d != "prefix-cache" {
		t.Errorf("decider %q", d)
	}
	var st status
	getJSON(t, url+"/status", &st)
	var sum uint64
	for _, n := range st.Reasons {
		sum += n
	}
	if st.Inflight != 0 || sum != st.Routes || st.Reasons[hdr.Get("X-Libroute-Reason")] == 0 {
		t.Errorf("status %+v, reason %q", st, hdr.Get("X-Libroute-Reason"))
	}
}

// Without libroute: the same proxy, round-robin, headers still set, and
// the library never called.
func TestNoLibroute(t *testing.T) {
	g, url, _ := setup(t, Config{NoLibroute: true})
	if g.router != nil {
		t.Fatal("a router without libroute")
	}
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		code, hdr, data := post(t, url+"/v1/completions", map[string]any{"prompt": "same prompt " + strings.Repeat("x", 100), "max_tokens": 2})
		if code != 200 {
			t.Fatalf("HTTP %d: %s", code, data)
		}
		if hdr.Get("X-Libroute-Reason") != "host-round-robin" || hdr.Get("X-Libroute-Decider") != "none" {
			t.Errorf("headers %v", hdr)
		}
		seen[hdr.Get("X-Libroute-Backend")]++
	}
	if len(seen) != 3 || seen["e1"] != 2 || seen["e2"] != 2 {
		t.Errorf("round-robin gave %v", seen)
	}
	fams := scrape(t, url)
	set := metricSet(t)
	for name := range fams {
		if strings.HasPrefix(name, "libroute_") && set[name].group != "gateway" {
			t.Errorf("%s without libroute", name)
		}
	}
	if got := value(fams, "libroute_gateway_responses_total", "code", "200"); got != 6 {
		t.Errorf("responses %v", got)
	}
	if _, ok := fams["libroute_decisions_total"]; ok {
		t.Error("decisions without libroute")
	}
}

// ---- metrics ------------------------------------------------------------------

type setEntry struct{ kind, group string }

// metricSet reads examples/metric-set.txt.
func metricSet(t *testing.T) map[string]setEntry {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "metric-set.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]setEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if fs := strings.Fields(line); len(fs) == 3 {
			out[fs[0]] = setEntry{fs[1], fs[2]}
		} else if len(fs) != 0 {
			t.Fatalf("metric-set.txt: %q", sc.Text())
		}
	}
	return out
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	r, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("/metrics: HTTP %d", r.StatusCode)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// checkSet: the families of groups in metric-set.txt, with their types,
// and no other libroute_* family.
func checkSet(t *testing.T, fams map[string]*dto.MetricFamily, groups ...string) {
	t.Helper()
	want := map[string]string{}
	for name, e := range metricSet(t) {
		for _, g := range groups {
			if e.group == g {
				want[name] = e.kind
			}
		}
	}
	got := map[string]string{}
	for name, f := range fams {
		if strings.HasPrefix(name, "libroute_") {
			got[name] = strings.ToLower(f.GetType().String())
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("families:\n got %v\nwant %v", got, want)
	}
}

// value sums the samples of family name whose labels include the pairs.
func value(fams map[string]*dto.MetricFamily, name string, pairs ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return math.NaN()
	}
	sum := 0.0
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(pairs); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func TestMetricSetAndCountersMove(t *testing.T) {
	g, url, engines := setup(t, Config{Policy: "prefix-cache", IndexCapacityBlocks: 48})
	// Labelled families (decisions, responses) show once they have a
	// sample: before any request, no decision.
	if _, ok := scrape(t, url)["libroute_decisions_total"]; ok {
		t.Fatal("decisions before any request")
	}
	chats := make([]*chat, 6)
	for i := range chats {
		chats[i] = newChat(i)
	}
	for k := 0; k < 3; k++ {
		for _, c := range chats {
			if err := c.turn(url, k); err != nil { // odd turns stream
				t.Fatal(err)
			}
		}
	}
	if code, _, _ := post(t, url+"/v1/completions", map[string]any{"prompt": 5}); code != 400 {
		t.Fatalf("HTTP %d", code)
	}
	n := float64(len(chats) * 3)
	fams := scrape(t, url)
	// no learner, no KV events, no deltas in this gateway: not shown;
	// requests may wait (the default): the queue's families are
	checkSet(t, fams, "gateway", "router", "queue")
	st, _ := g.router.Stats()
	counts, _ := g.router.ReasonCounts()
	if v := value(fams, "libroute_decisions_total"); v != n || float64(st.Routes) != n {
		t.Errorf("decisions %v, routes %d, want %v", v, st.Routes, n)
	}
	if v := value(fams, "libroute_decisions_total", "policy", "prefix-cache"); v != n {
		t.Errorf("decisions by prefix-cache: %v", v)
	}
	for reason, c := range counts {
		if v := value(fams, "libroute_decisions_total", "reason", label(g.reasonNames, reason)); v != float64(c) {
			t.Errorf("reason %s: %v, library %d", label(g.reasonNames, reason), v, c)
		}
	}
	for _, h := range []string{"libroute_route_duration_seconds", "libroute_gateway_ttft_seconds"} {
		if v := value(fams, h); v != n {
			t.Errorf("%s: %v observations, want %v", h, v, n)
		}
		if s := fams[h].GetMetric()[0].GetHistogram().GetSampleSum(); !(s > 0) {
			t.Errorf("%s: sum %v", h, s)
		}
	}
	if v := value(fams, "libroute_gateway_responses_total", "code", "200"); v != n {
		t.Errorf("200s: %v", v)
	}
	if v := value(fams, "libroute_gateway_responses_total", "code", "400"); v != 1 {
		t.Errorf("400s: %v", v)
	}
	if v := value(fams, "libroute_prompt_tokens_total"); v != float64(st.PromptTokens) {
		t.Errorf("prompt tokens %v, library %d", v, st.PromptTokens)
	}
	pred := value(fams, "libroute_predicted_cached_tokens_total")
	obs := value(fams, "libroute_observed_cached_tokens_total")
	if !(pred > 0 && obs > 0 && math.Abs(obs-pred) < 0.5*pred) {
		t.Errorf("cached tokens: predicted %v, observed %v", pred, obs)
	}
	ix, _ := g.router.IndexStats()
	if ix.EvictedBlocks == 0 || ix.Blocks > 48 {
		t.Errorf("a 48-block index: %+v", ix)
	}
	for name, want := range map[string]uint64{
		"libroute_index_evicted_blocks_total": ix.EvictedBlocks,
		"libroute_index_learned_blocks_total": ix.LearnedBlocks,
		"libroute_index_blocks":               ix.Blocks,
	} {
		if v := value(fams, name); v != float64(want) {
			t.Errorf("%s %v, library %d", name, v, want)
		}
	}
	for _, e := range []string{"e1", "e2", "e3"} {
		if value(fams, "libroute_instance_up", "instance", e) != 1 ||
			value(fams, "libroute_instance_inflight", "instance", e) != 0 ||
			value(fams, "libroute_instance_queued_tokens", "instance", e) != 0 {
			t.Errorf("instance %s", e)
		}
	}

	// a dead backend: drained, and its gauge says so
	engines[0].stop()
	for _, c := range chats {
		if err := c.turn(url, 3); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for value(scrape(t, url), "libroute_instance_up", "instance", "e1") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("e1 still up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLearnerFamilies(t *testing.T) {
	_, url, _ := setup(t, Config{Policy: "lodestar", LearnEvery: 16})
	chats := make([]*chat, 8)
	for i := range chats {
		chats[i] = newChat(i)
	}
	for k := 0; k < 3; k++ {
		round(t, url, chats, k)
	}
	deadline := time.Now().Add(20 * time.Second)
	fams := scrape(t, url)
	for value(fams, "libroute_learner_rounds_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no training round")
		}
		time.Sleep(100 * time.Millisecond)
		fams = scrape(t, url)
	}
	checkSet(t, fams, "gateway", "router", "queue", "learner")
	if v := value(fams, "libroute_learner_samples_total"); v < 16 {
		t.Errorf("samples %v", v)
	}
	if v := value(fams, "libroute_learner_online_error_seconds"); !(math.IsNaN(v) || v >= 0) {
		t.Errorf("online error %v", v)
	}
}

func TestKVEventAndDeltaFamilies(t *testing.T) {
	g, url, _ := setup(t, Config{Policy: "prefix-cache"})
	g.metrics.EnableKVEvents()
	g.metrics.EnableDeltas()
	if code, _, _ := post(t, url+"/v1/completions", map[string]any{"prompt": "p"}); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	fams := scrape(t, url)
	checkSet(t, fams, "gateway", "router", "queue", "kv-events", "deltas")
	g.metrics.KVBatches.Inc()
	g.metrics.DeltasImported.Add(2)
	fams = scrape(t, url)
	if value(fams, "libroute_kv_event_batches_total") != 1 ||
		value(fams, "libroute_deltas_imported_total") != 2 ||
		value(fams, "libroute_kv_event_gaps_total") != 0 {
		t.Error("KV-event and delta counters")
	}
}

// ---- pieces ---------------------------------------------------------------------

func TestParseCompletion(t *testing.T) {
	c, err := parseCompletion([]byte(`{"messages": [{"role": "system", "content": "a"},
		{"content": "b"}], "max_tokens": 7, "stream": true}`))
	if err != nil || len(c.parts) != 2 || c.parts[0] != (part{"<|system|>", "a"}) ||
		c.parts[1] != (part{"<|user|>", "b"}) || c.maxTokens != 7 || !c.stream {
		t.Fatalf("%+v %v", c, err)
	}
	toks, ends, err := c.tokens(new(cut))
	// "<|system|>a<|user|>b" is 20 bytes: 5 tokens of 4; the first
	// message ends inside the third
	if err != nil || len(toks) != 5 || len(ends) != 2 || ends[0] != 2 || ends[1] != 5 {
		t.Fatalf("%v %v %v", toks, ends, err)
	}
	whole, _ := libroute.TextTokens([]byte("<|system|>a<|user|>b"), 4)
	for i := range whole {
		if toks[i] != whole[i] {
			t.Fatalf("token %d: not the joined prompt's", i)
		}
	}
	// the next turn starts with this one's whole tokens
	next, _ := parseCompletion([]byte(`{"messages": [{"role": "system", "content": "a"},
		{"content": "b"}, {"role": "assistant", "content": "c"}]}`))
	nt, ne, _ := next.tokens(new(cut))
	for i := range toks { // 20 bytes: all five whole
		if nt[i] != toks[i] {
			t.Fatalf("next turn: token %d differs", i)
		}
	}
	if ne[0] != 2 || ne[1] != 5 || ne[2] != uint32(len(nt)) || len(nt) != 9 {
		t.Fatalf("next turn ends %v", ne)
	}
	// the generic path: content parts, a numeric role, a string stream
	c, err = parseCompletion([]byte(`{"messages": [{"role": 7, "content": [{"type": "text"}]}],
		"stream": "yes"}`))
	if err != nil || len(c.parts) != 1 || c.parts[0] != (part{"<|7|>", "[map[type:text]]"}) || c.stream ||
		c.maxTokens != 16 {
		t.Fatalf("generic: %+v %v", c, err)
	}
	c, err = parseEnvelope([]byte(`{"messages": 5, "max_tokens": 3, "stream": true}`))
	if err != nil || len(c.parts) != 0 || c.maxTokens != 3 || !c.stream {
		t.Fatalf("envelope: %+v %v", c, err)
	}
	for _, bad := range []string{`[]`, `{"max_tokens": "a"}`, `{"max_tokens": -2}`, `{`} {
		if _, err := parseEnvelope([]byte(bad)); err == nil {
			t.Errorf("envelope %s: accepted", bad)
		}
	}
	c, err = parseCompletion(nil)
	if err != nil || len(c.parts) != 1 || c.parts[0] != (part{}) || c.maxTokens != 16 || c.stream {
		t.Fatalf("empty body: %+v %v", c, err)
	}
	for _, bad := range []string{`[]`, `{"prompt": 5}`, `{"messages": [1]}`,
		`{"prompt": "x", "max_tokens": -1}`, `{"prompt": "x", "max_tokens": "a"}`, `{`} {
		if _, err := parseCompletion([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestParseEngineStats(t *testing.T) {
	s := parseEngineStats([]byte("# HELP x\nvllm:num_requests_running{model_name=\"m\"} 3\n" +
		"vllm:num_requests_waiting 2.0\nvllm:gpu_cache_usage_perc 0.25\nother 9\n"))
	if s.Running != 3 || s.Waiting != 2 || s.KVUse != 0.25 {
		t.Fatalf("%+v", s)
	}
	s = parseEngineStats([]byte("vllm:kv_cache_usage_perc 7\nvllm:gpu_cache_usage_perc 0.1\nvllm:num_requests_running -4\n"))
	if s.Running != 0 || s.KVUse != 1 {
		t.Fatalf("%+v", s)
	}
	if s = parseEngineStats([]byte("vllm:kv_cache_usage_perc NaN\n")); s.KVUse != 0 {
		t.Fatalf("%+v", s)
	}
}

// An engine's reused tokens reach the router in the router's tokens:
// scaled by routed / the engine's prompt when the two counts differ,
// never past the prompt routed.
func TestObservedInRouterTokens(t *testing.T) {
	for _, c := range []struct {
		json         string
		routed, want uint32
	}{
		{`{"timings":{"cache_n":300,"prompt_n":100}}`, 400, 300}, // same tokens
		{`{"timings":{"cache_n":300,"prompt_n":100}}`, 100, 75},  // text pieces
		{`{"usage":{"prompt_tokens":200,"prompt_tokens_details":{"cached_tokens":50}}}`, 800, 200},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":50}}}`, 40, 40}, // size unknown: capped
	} {
		raw := []byte(c.json)
		n, ok := observedCached(raw)
		if !ok {
			t.Fatalf("%s: no cached tokens found", c.json)
		}
		if got := inRouterTokens(n, enginePrompt(raw), c.routed); got != c.want {
			t.Errorf("%s routed %d: %d, want %d", c.json, c.routed, got, c.want)
		}
	}
}

// The usage counts are read by key after the last "usage" key, however
// the JSON is spaced, and never from an answer's text.
func TestUsage(t *testing.T) {
	m := NewMetrics(nil, nil, nil, nil)
	a := &attempt{g: &Gateway{metrics: m}}
	for _, c := range []struct {
		json string
		out  uint32
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":9,"completion_tokens":7}}`, 7, true},
		{`{"choices": [], "usage" : { "completion_tokens" :  12 , "x": 1}}`, 12, true},
		{"{\"usage\":\n{\"completion_tokens\":\n\t3}}", 3, true},
		{`{"choices":[{"text":"\"usage\": {\"completion_tokens\": 99}"}]}`, 0, false},
		{`{"choices":[{"text":"\"completion_tokens\": 99"}],"usage":{"prompt_tokens":1}}`, 0, false},
		{`{"usage":{"completion_tokens":null}}`, 0, false},
		{`{"usage":{"completion_tokens":-4}}`, 0, false},
		{`{"usage":{"completion_tokens":99999999999}}`, 1 << 31, true},
		{`{"usage"`, 0, false},
		{``, 0, false},
	} {
		if out, ok := a.usage([]byte(c.json)); out != c.out || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.json, out, ok, c.out, c.ok)
		}
	}
}

// A stream cut anywhere between reads gives the same events: one first
// token, the output tokens counted, the end at [DONE] before EOF.
func TestRelayBodySplitsAnywhere(t *testing.T) {
	stream := "data: {\"choices\": [{\"delta\": {\"content\": \" a\"}}]}\n\n" +
		"data: {\"choices\": [{\"delta\": {\"content\": \" b\"}}]}\n\n" +
		"data: {\"choices\": [], \"usage\": {\"completion_tokens\": 2}}\n\ndata: [DONE]\n\n"
	m := NewMetrics(nil, nil, nil, nil)
	for cut := 1; cut < len(stream); cut++ {
		g := &Gateway{metrics: m}
		a := &attempt{g: g, routedAt: time.Now()}
		b := &relayBody{rc: io.NopCloser(strings.NewReader(stream)), a: a, stream: true, left: -1}
		var out []byte
		buf := make([]byte, cut)
		for {
			n, err := b.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
			if b.done && !strings.Contains(string(out), "data: [DONE]\n") {
				t.Fatalf("cut %d: ended before [DONE]", cut)
			}
		}
		if string(out) != stream || !b.first || !b.done || b.out != 2 {
			t.Fatalf("cut %d: first %v done %v out %d", cut, b.first, b.done, b.out)
		}
		b.Close()
	}
}

// ---- the libroute part of a request, alone ----------------------------------------

// loadPrompts are the chat bodies of tools/load-test.lua's shape: 64
// conversations of 8 turns, a shared 2 KB system prompt, each turn with
// its history.
func loadPrompts() [][]byte {
	words := func(seed uint64, n int) string {
		var sb strings.Builder
		x := seed
		for i := 0; i < n; i++ {
			x = (x*1103515245 + 12345) % 2147483648
			if i > 0 {
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "w%d", x%5000)
		}
		return sb.String()
	}
	system := "You are a helpful assistant. " + words(1, 330)
	var bodies [][]byte
	for t := 0; t < 8; t++ {
		for c := 0; c < 64; c++ {
			msgs := []map[string]string{{"role": "system", "content": system}}
			for k := 0; k <= t; k++ {
				msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf(
					"Conversation %d, question %d: %s", c, k, words(uint64(1000*c+k+7), 60))})
				if k < t {
					msgs = append(msgs, map[string]string{"role": "assistant", "content": " tok0 tok1"})
				}
			}
			b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 2, "messages": msgs})
			bodies = append(bodies, b)
		}
	}
	return bodies
}

// benchRequestPath times what libroute adds to one request of the load
// test in the gateway: cutting the prompt, Route, FirstToken and Complete
// (parsing the body, which the gateway does without libroute too, is not
// counted). docs/perf.md quotes it next to the load test.
func benchRequestPath(b *testing.B, policy string, withTokens bool) {
	g := &Gateway{cfg: Config{Policy: policy}}
	if err := g.newRouter(); err != nil {
		b.Fatal(err)
	}
	defer g.router.Close()
	for i := 1; i <= 4; i++ {
		if _, err := g.router.AddInstance(libroute.InstanceSpec{Name: fmt.Sprintf("e%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	var cs []completion
	for _, body := range loadPrompts() {
		c, err := parseCompletion(body)
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	type cutOf struct{ toks, ends []uint32 }
	pre := make([]cutOf, len(cs))
	for i := range cs {
		pre[i].toks, pre[i].ends, _ = cs[i].tokens(new(cut))
	}
	k := new(cut)
	b.ReportAllocs()
	runtime.GC()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
	for i := 0; i < b.N; i++ {
		j := i % len(cs)
		toks, ends := pre[j].toks, pre[j].ends
		if withTokens {
			var err error
			if toks, ends, err = cs[j].tokens(k); err != nil {
				b.Fatal(err)
			}
		}
		id := uint64(i + 1)
		if _, err := g.router.Route(&libroute.Request{ID: id, Tokens: toks, Boundaries: ends,
			ExpectedOutputTokens: 2, Now: now()}); err != nil {
			b.Fatal(err)
		}
		_ = g.router.FirstToken(id, now())
		_ = g.router.Complete(id, 2, now())
	}
}

func BenchmarkRequestPathPrefixCacheAndLoad(b *testing.B) {
	benchRequestPath(b, "prefix-cache-and-load", true)
}
func BenchmarkRequestPathAdaptive(b *testing.B) { benchRequestPath(b, "adaptive", true) }
func BenchmarkRouteOnlyPrefixCacheAndLoad(b *testing.B) {
	benchRequestPath(b, "prefix-cache-and-load", false)
}
func BenchmarkRouteOnlyAdaptive(b *testing.B) { benchRequestPath(b, "adaptive", false) }

// BenchmarkParse is the body parsing with libroute (the messages too),
// BenchmarkParseEnvelope without: the difference is libroute's.
func BenchmarkParse(b *testing.B)         { benchParse(b, parseCompletion) }
func BenchmarkParseEnvelope(b *testing.B) { benchParse(b, parseEnvelope) }

func benchParse(b *testing.B, parse func([]byte) (completion, error)) {
	bodies := loadPrompts()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := parse(bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
	}
}

// cannedEngine answers every request at once, in process: what the
// gateway does per request, without the network.
type cannedEngine struct{}

func (cannedEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	body := `{"choices":[{"message":{"role":"assistant","content":" tok0 tok1"}}],` +
		`"usage":{"prompt_tokens":1000,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}`
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r,
	}, nil
}

// benchServe times the gateway's whole handling of the load test's
// requests against in-process engines: with libroute (policy) or without
// (""). The difference is what libroute costs a request in the gateway.
func benchServe(b *testing.B, policy string) {
	cfg := Config{Policy: policy, NoLibroute: policy == "", ScrapeEvery: time.Hour, HealthEvery: time.Hour}
	for i := 1; i <= 4; i++ {
		cfg.Backends = append(cfg.Backends, BackendSpec{Name: fmt.Sprintf("e%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 9+i)})
	}
	g, err := NewGateway(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for _, be := range g.backends {
		be.proxy.Transport = cannedEngine{}
	}
	bodies := loadPrompts()
	b.ReportAllocs()
	runtime.GC()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(bodies[i%len(bodies)]))
		w := httptest.NewRecorder()
		g.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user + system CPU time: on a shared machine
// it moves less with the neighbours' load than the wall clock does, and
// it counts the garbage collector's work on the other cores too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkServeNoLibroute(b *testing.B)         { benchServe(b, "") }
func BenchmarkServePrefixCacheAndLoad(b *testing.B) { benchServe(b, "prefix-cache-and-load") }
func BenchmarkServeAdaptive(b *testing.B)           { benchServe(b, "adaptive") }
