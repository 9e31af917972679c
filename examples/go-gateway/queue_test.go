package main

// The waiting queue (queue.go) end to end, as
// examples/gateway/test_queue.py does it for the Python gateway: one fake
// engine (fake_engine.py) that holds every request before its first token
// until the test releases it (POST /admin/hold, /admin/release), and a
// saturation depth of 1, so that one request held by the engine saturates
// the fleet and the next ones must wait in the gateway. Nothing sleeps
// for a set time: the tests wait for states (a request held, n waiting)
// and release the engine when they mean to.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// engineAdmin posts body to one of the fake engine's /admin/ hooks.
func engineAdmin(e *engine, path string, body any) error {
	data, _ := json.Marshal(body)
	r, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d%s", e.port, path), "application/json",
		bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		return fmt.Errorf("%s: HTTP %d", path, r.StatusCode)
	}
	return nil
}

// engineState is the fake engine's GET /admin/state: the requests'
// "user" fields in the order they arrived, and how many it holds.
type engineState struct {
	Arrivals []string `json:"arrivals"`
	Held     int      `json:"held"`
}

func stateOf(t *testing.T, e *engine) engineState {
	t.Helper()
	var st engineState
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/admin/state", e.port), &st)
	return st
}

// until waits for a state the test caused (never for a set time).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
	err  error
}

const queuePrompt = "Tell me about queues. Tell me about queues. Tell me about queues. Tell me about queues."

// ask posts a completion whose "user" field the engine records on arrival.
func ask(ctx context.Context, url, tag string, hdr map[string]string) answer {
	data, _ := json.Marshal(map[string]any{"prompt": queuePrompt, "max_tokens": 2, "user": tag})
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", bytes.NewReader(data))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	return answer{code: r.StatusCode, hdr: r.Header, body: body, err: err}
}

// askAsync is ask on its own goroutine: a client that waits for its answer.
func askAsync(url, tag string, hdr map[string]string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- ask(context.Background(), url, tag, hdr) }()
	return ch
}

func await(t *testing.T, ch <-chan answer, tag string) answer {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("%s: %v", tag, a.err)
		}
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer", tag)
	}
	return answer{}
}

type queueView struct {
	Queue *queueStatus `json:"queue"`
}

// setupQueue: the gateway over one engine that holds every request, with
// a saturation depth of 1 (unless cfg says otherwise).
func setupQueue(t *testing.T, cfg Config) (*Gateway, string, *engine) {
	t.Helper()
	cfg.Policy = "prefix-cache"
	if cfg.SaturationQueue == 0 {
		cfg.SaturationQueue = 1
	}
	cfg.DispatchEvery = 20 * time.Millisecond
	cfg.Objectives = map[string]int{"chat": 1}
	cfg.TTFTSLO = map[uint32]time.Duration{1: 50 * time.Millisecond}
	cfg.Timeout = 10 * time.Second // the default deadline
	g, url, engines := setupEngines(t, cfg, "e1")
	e := engines[0]
	if err := engineAdmin(e, "/admin/hold", map[string]bool{"on": true}); err != nil {
		t.Fatal(err)
	}
	// first of the cleanups: nothing left held, whatever failed
	t.Cleanup(func() { _ = engineAdmin(e, "/admin/hold", map[string]bool{"on": false}) })
	return g, url, e
}

func waitingNow(t *testing.T, g *Gateway, n uint64) {
	t.Helper()
	until(t, fmt.Sprintf("%d waiting in the gateway", n), func() bool {
		s, _ := g.router.Stats()
		return s.Waiting == n
	})
}

func heldNow(t *testing.T, e *engine, n int) {
	t.Helper()
	until(t, fmt.Sprintf("%d held by the engine", n), func() bool { return stateOf(t, e).Held == n })
}

// Held requests go out by urgency (the priority header, an objective's
// priority), then by fair share between tenants, one at a time as first
// tokens free the engine; a sheddable request gets 429 at once; /status
// and /metrics count it all.
func TestQueueUrgencyFairShareShed(t *testing.T) {
	g, url, e := setupQueue(t, Config{})
	first := askAsync(url, "a", nil) // routed at once; the engine holds it
	heldNow(t, e, 1)
	var v queueView
	getJSON(t, url+"/status", &v)
	if v.Queue == nil || !v.Queue.Saturated {
		t.Fatalf("status %+v", v.Queue)
	}
	// the fleet is saturated: these wait, in this order of arrival
	var calls []<-chan answer
	tags := []string{"b1", "b2", "c", "d", "e"}
	for i, h := range []map[string]string{
		{"X-Tenant-Id": "x"},
		{"X-Tenant-Id": "x"},
		{"X-Gateway-Inference-Fairness-Id": "y"},
		{"X-Llm-Priority": "3"},                   // urgency 0
		{"X-Gateway-Inference-Objective": "chat"}, // priority 1: urgency 2
	} {
		calls = append(calls, askAsync(url, tags[i], h))
		waitingNow(t, g, uint64(i+1))
	}
	// a sheddable request is refused at once, and waits not
	shed := ask(context.Background(), url, "f", map[string]string{"X-Llm-Priority": "-1"})
	if shed.err != nil || shed.code != 429 || shed.hdr.Get("X-Libroute-Dropped") != "shed" ||
		shed.hdr.Get("Retry-After") != "1" {
		t.Fatalf("sheddable: %d %v %s %v", shed.code, shed.hdr, shed.body, shed.err)
	}
	getJSON(t, url+"/status", &v)
	if q := v.Queue; q.Waiting != 5 || q.Waited != 5 || q.Shed != 1 {
		t.Fatalf("status %+v", q)
	}

	// every first token frees the engine for exactly one more
	if err := engineAdmin(e, "/admin/release", map[string]int{"n": 100}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range append([]<-chan answer{first}, calls...) {
		a := await(t, ch, fmt.Sprint(i))
		if a.code != 200 || a.hdr.Get("X-Libroute-Backend") != "e1" ||
			a.hdr.Get("X-Libroute-Decider") != "prefix-cache" || a.hdr.Get("X-Libroute-Reason") == "waiting" ||
			a.hdr.Get("X-Libroute-Reason") == "" {
			t.Fatalf("request %d: %d %v %s", i, a.code, a.hdr, a.body)
		}
	}
	// urgency 0, 2, then band 3 by fair share: x, y, x (not b1, b2, c)
	if got, want := stateOf(t, e).Arrivals, []string{"a", "d", "e", "b1", "c", "b2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("arrivals %v, want %v", got, want)
	}
	s, _ := g.router.Stats()
	if s.Waiting != 0 || s.Waited != 5 || s.WaitedDispatched != 5 || s.Shed != 1 {
		t.Fatalf("stats %+v", s)
	}
	until(t, "every request ended", func() bool { s, _ := g.router.Stats(); return s.Inflight == 0 })

	fams := scrape(t, url)
	checkSet(t, fams, "gateway", "router", "queue")
	for name, want := range map[string]float64{
		"libroute_queue_waiting":          0,
		"libroute_queue_saturated":        0,
		"libroute_queue_waited_total":     5,
		"libroute_queue_dispatched_total": 5,
		"libroute_queue_shed_total":       1,
		"libroute_queue_expired_total":    0,
		"libroute_queue_cancelled_total":  0,
		"libroute_queue_wait_seconds":     5, // observations
		// one decision per request sent (5 of them from the queue), one
		// Route call timed per request (6 routed, 5 held, 1 shed)
		"libroute_decisions_total":        6,
		"libroute_route_duration_seconds": 7,
		"libroute_gateway_ttft_seconds":   6,
	} {
		if v := value(fams, name); v != want {
			t.Errorf("%s %v, want %v", name, v, want)
		}
	}
	if v := value(fams, "libroute_decisions_total"); v != float64(s.Routes) {
		t.Errorf("decisions %v, library routes %d", v, s.Routes)
	}
	if s := fams["libroute_queue_wait_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); !(s > 0) {
		t.Errorf("wait sum %v", s)
	}
	if value(fams, "libroute_gateway_responses_total", "code", "200") != 6 ||
		value(fams, "libroute_gateway_responses_total", "code", "429") != 1 {
		t.Error("responses by code")
	}
}

// A request still waiting at its deadline (the SLO header, or its
// urgency's default) gets 429 and never reaches the engine; headers that
// are not numbers are 400s.
func TestQueueDeadlines(t *testing.T) {
	g, url, e := setupQueue(t, Config{})
	first := askAsync(url, "a", nil)
	heldNow(t, e, 1)
	late := []<-chan answer{
		askAsync(url, "g", map[string]string{"X-Slo-Ttft-Ms": "30"}),
		askAsync(url, "h", map[string]string{"X-Llm-Priority": "2"}), // urgency 1: 50 ms
	}
	for i, ch := range late {
		a := await(t, ch, fmt.Sprint("late ", i))
		if a.code != 429 || a.hdr.Get("X-Libroute-Dropped") != "expired" || a.hdr.Get("Retry-After") != "1" {
			t.Fatalf("late %d: %d %v %s", i, a.code, a.hdr, a.body)
		}
	}
	if s, _ := g.router.Stats(); s.Waiting != 0 || s.Waited != 2 || s.WaitedExpired != 2 {
		t.Fatalf("stats %+v", s)
	}
	for _, h := range []map[string]string{{"X-Slo-Ttft-Ms": "soon"}, {"X-Slo-Ttft-Ms": "0"},
		{"X-Llm-Priority": "high"}} {
		if a := ask(context.Background(), url, "bad", h); a.code != 400 {
			t.Errorf("%v: HTTP %d %s", h, a.code, a.body)
		}
	}
	if err := engineAdmin(e, "/admin/release", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if a := await(t, first, "a"); a.code != 200 {
		t.Fatalf("a: %d %s", a.code, a.body)
	}
	if got := stateOf(t, e).Arrivals; !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("arrivals %v: an expired request was sent", got)
	}
	fams := scrape(t, url)
	if value(fams, "libroute_queue_expired_total") != 2 || value(fams, "libroute_queue_wait_seconds") != 0 {
		t.Error("expired counters")
	}
}

// A client that hangs up while its request waits withdraws it: never
// sent, counted as cancelled.
func TestQueueHangUp(t *testing.T) {
	g, url, e := setupQueue(t, Config{})
	first := askAsync(url, "a", nil)
	heldNow(t, e, 1)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan answer, 1)
	go func() { gone <- ask(ctx, url, "gone", nil) }()
	waitingNow(t, g, 1)
	cancel()
	if a := <-gone; a.err == nil {
		t.Fatalf("the cancelled client got an answer: %d", a.code)
	}
	until(t, "the hung-up request withdrawn", func() bool {
		s, _ := g.router.Stats()
		return s.WaitedCancelled == 1 && s.Waiting == 0
	})
	if err := engineAdmin(e, "/admin/release", map[string]int{"n": 10}); err != nil {
		t.Fatal(err)
	}
	if a := await(t, first, "a"); a.code != 200 {
		t.Fatalf("a: %d", a.code)
	}
	if a := ask(context.Background(), url, "z", nil); a.code != 200 {
		t.Fatalf("z: %d %s", a.code, a.body)
	}
	if got := stateOf(t, e).Arrivals; !reflect.DeepEqual(got, []string{"a", "z"}) {
		t.Fatalf("arrivals %v: the withdrawn request was sent", got)
	}
	var v queueView
	getJSON(t, url+"/status", &v)
	if v.Queue == nil || v.Queue.Cancelled != 1 {
		t.Fatalf("status %+v", v.Queue)
	}
	fams := scrape(t, url)
	if value(fams, "libroute_queue_cancelled_total") != 1 || value(fams, "libroute_queue_waiting") != 0 {
		t.Error("cancelled counters")
	}
}

// Without the queue every request goes at once (the sheddable one too),
// the headers are not read, and none of the queue's families exist.
func TestQueueOff(t *testing.T) {
	g, url, e := setupQueue(t, Config{NoQueue: true})
	calls := []<-chan answer{askAsync(url, "a", nil), askAsync(url, "b", nil),
		askAsync(url, "f", map[string]string{"X-Llm-Priority": "-1"})}
	heldNow(t, e, 3)
	var v queueView
	getJSON(t, url+"/status", &v)
	if v.Queue != nil {
		t.Fatalf("a queue in /status: %+v", v.Queue)
	}
	if err := engineAdmin(e, "/admin/hold", map[string]bool{"on": false}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range calls {
		if a := await(t, ch, fmt.Sprint(i)); a.code != 200 {
			t.Fatalf("request %d: %d", i, a.code)
		}
	}
	if a := ask(context.Background(), url, "x", map[string]string{"X-Llm-Priority": "high"}); a.code != 200 {
		t.Fatalf("a header read without the queue: %d %s", a.code, a.body)
	}
	if s, _ := g.router.Stats(); s.Waited != 0 || s.Shed != 0 {
		t.Fatalf("stats %+v", s)
	}
	checkSet(t, scrape(t, url), "gateway", "router")
}

// The header mappings, and that they are the Python gateway's
// (examples/gateway/waiting.py: the same urgencies, the same tenant hash).
func TestQueueMappings(t *testing.T) {
	for p, want := range map[int]uint32{math.MinInt: 7, -100: 7, -5: 7, -4: 7, -1: 4, 0: 3, 1: 2, 2: 1,
		3: 0, 4: 0, math.MaxInt: 0} {
		if u, shed := priorityUrgency(p); u != want || shed != (p < 0) {
			t.Errorf("priority %d: urgency %d sheddable %v", p, u, shed)
		}
	}
	if tenantID("") != 0xcbf29ce484222325 || tenantID("tenant-a") != 0xc2ef8128e3eb9efb {
		t.Errorf("tenant hash: %x %x", tenantID(""), tenantID("tenant-a"))
	}
	slo, err := parseSLO([]string{"2=50", "1000"})
	if err != nil || len(slo) != 8 || slo[2] != 50*time.Millisecond || slo[7] != time.Second {
		t.Errorf("ttft-slo %v %v", slo, err)
	}
	for _, bad := range []string{"8=10", "x=10", "2=", "-5", "0"} {
		if _, err := parseSLO([]string{bad}); err == nil {
			t.Errorf("ttft-slo %q accepted", bad)
		}
	}
	obj, err := parseObjectives([]string{"chat=2", "a=b=-1"})
	if err != nil || obj["chat"] != 2 || obj["a=b"] != -1 {
		t.Errorf("objectives %v %v", obj, err)
	}
	for _, bad := range []string{"chat", "=1", "chat=high"} {
		if _, err := parseObjectives([]string{bad}); err == nil {
			t.Errorf("objective %q accepted", bad)
		}
	}
	g := &Gateway{cfg: Config{Timeout: 30 * time.Second, Objectives: map[string]int{"batch": -2},
		TTFTSLO: map[uint32]time.Duration{5: time.Second}}}
	h := http.Header{}
	h.Set("X-Gateway-Inference-Objective", "batch")
	h.Set("X-Tenant-Id", "tenant-a")
	a, err := g.classify(h)
	if err != nil || a.priority != -2 || a.urgency != 5 || !a.sheddable || a.tenant != 0xc2ef8128e3eb9efb ||
		a.slo != time.Second {
		t.Errorf("objective batch: %+v %v", a, err)
	}
	h.Set("X-Llm-Priority", " 1 ") // the number wins over the objective
	h.Set("X-Slo-Ttft-Ms", "250")
	if a, err := g.classify(h); err != nil || a.urgency != 2 || a.sheddable || a.slo != 250*time.Millisecond {
		t.Errorf("priority 1: %+v %v", a, err)
	}
	if a, err := g.classify(http.Header{}); err != nil || a.urgency != 3 || a.tenant != 0 || a.slo != 30*time.Second {
		t.Errorf("no headers: %+v %v", a, err)
	}
	if d := deadlineOf(math.MaxUint64-5, admission{slo: time.Hour}); d != maxTimeNs {
		t.Errorf("deadline %d", d)
	}
}
