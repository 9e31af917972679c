package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"libroute"
)

// Config is what the gateway is started with.
type Config struct {
	// Backends as name and host:port; the name places the instance on the
	// router's ring.
	Backends []BackendSpec
	// A libroute policy name (Policy.String), unless NoLibroute.
	Policy string
	// NoLibroute routes with the gateway's own round-robin and never calls
	// the library: the load test's baseline (docs/perf.md).
	NoLibroute bool
	// Prefix index capacity in blocks; 0: the library's default.
	IndexCapacityBlocks uint64
	// Lodestar trains after LearnEvery samples and every LearnEvery more;
	// 0: the library's schedule.
	LearnEvery uint32
	// How often each backend is probed (/health, then its metrics), how
	// often a drained backend's /health is tried, and the limit on the
	// wait for an answer to start (llama.cpp streams its headers only
	// with the first token).
	ScrapeEvery, HealthEvery, Timeout time.Duration
	// The limit on one probe, and how long a backend may leave /health
	// unanswered before it is drained (a refused connection drains at
	// once): an engine whose HTTP threads are all busy answers late.
	ProbeTimeout, DeadAfter time.Duration
	// Text prompts are tokenized by a backend's /tokenize (llama.cpp's;
	// chat messages rendered by its /apply-template first), so the router
	// sees the model's own tokens.
	EngineTokenizer bool
	// NoQueue routes every request at once, even to a saturated fleet:
	// no waiting, no shedding, the priority, tenant and SLO headers
	// ignored. Otherwise a request may wait in the router's queue while
	// the fleet is saturated (queue.go).
	NoQueue bool
	// The library's saturation thresholds (ParamSaturationQueue,
	// ParamSaturationKV; 0: its defaults) and the requests waiting at
	// once (0: its default).
	SaturationQueue uint32
	SaturationKV    float64
	QueueCapacity   uint32
	// The deadline of each urgency's requests that carry no SLO header;
	// an urgency without one: Timeout.
	TTFTSLO map[uint32]time.Duration
	// The priority of each InferenceObjective name (objectiveHeader).
	Objectives map[string]int
	// The dispatch timer's period while requests wait.
	DispatchEvery time.Duration
	// Each LoRA adapter's base model (-adapter NAME=BASE), over what the
	// engines' GET /v1/models list: its requests go only to the backends
	// serving BASE (lora.go). Every BASE is one of the fleet's base
	// models, no NAME is.
	Adapters map[string]string
}

// BackendSpec names one engine.
type BackendSpec struct {
	Name, Addr string
	// The model names it serves (vLLM's served model names; none: any)
	// and its LoRA adapter slots (vLLM's --max-loras; 0: not declared).
	// See lora.go.
	Models   []string
	MaxLoRAs uint32
}

// Backend is one engine behind the gateway.
type Backend struct {
	Name string
	Addr string
	ID   libroute.InstanceID
	up   atomic.Bool
	// Proxies to this backend, sharing the gateway's transport.
	proxy *httputil.ReverseProxy
	// Where its load comes from: "vllm", "llamacpp" or "sglang"
	// (/metrics), "slots" (llama.cpp's /slots), "none", or "" before the
	// first scrape. Written by its probe goroutine only.
	metrics atomic.Value
	// When it last answered anything (UnixNano).
	lastAnswer atomic.Int64
	// Cached prompt tokens over the requests whose engine reported them:
	// what the router predicted, what the engine reused.
	predicted, observed, reports atomic.Uint64
	// The models it serves, its adapter slots (declared, or its scrape's
	// max_lora) and whether a scrape has reported its adapters.
	Models      []string
	maxLoRAs    atomic.Uint32
	adapterSeen atomic.Bool
	// The adapters its last GET /v1/models listed, with their base model
	// (nil while it has listed none); under the gateway's parentsMu.
	parents map[string]string
}

func (b *Backend) metricsKind() string {
	s, _ := b.metrics.Load().(string)
	return s
}

// Gateway is an http.Handler that routes OpenAI-style requests.
type Gateway struct {
	cfg      Config
	backends []*Backend
	byID     map[libroute.InstanceID]*Backend
	// The fleet's base models: every backend's served names (lora.go).
	baseModels map[string]bool
	// Each adapter's base model: Config.Adapters, else the one every
	// backend listing it names (lora.go); replaced whole under
	// parentsMu, read by modelOf without a lock.
	adapterBases atomic.Pointer[map[string]string]
	parentsMu    sync.Mutex
	// nil with NoLibroute.
	router *libroute.Router
	// nil with NoQueue or NoLibroute.
	queue *waitQueue
	// The names of the library's policies and reasons, by value, so that
	// a request's labels cost no call into C.
	policyNames, reasonNames []string
	metrics                  *Metrics
	handler                  http.Handler

	transport *http.Transport // to the backends, kept alive
	probe     *http.Client    // scrapes and health checks

	ids      atomic.Uint64
	rr       atomic.Uint64
	retries  atomic.Uint64
	failures atomic.Uint64
	tokTurn  atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// epoch anchors now(): the router wants a monotonic clock in nanoseconds.
var epoch = time.Now()

func now() uint64 { return uint64(time.Since(epoch)) + 1 }

// NewGateway creates the router (unless NoLibroute), adds the backends and
// starts the scrape and learner goroutines. Close stops them.
func NewGateway(cfg Config) (*Gateway, error) {
	if len(cfg.Backends) == 0 {
		return nil, errors.New("no backends")
	}
	if cfg.ScrapeEvery <= 0 {
		cfg.ScrapeEvery = 100 * time.Millisecond
	}
	if cfg.HealthEvery <= 0 {
		cfg.HealthEvery = 250 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = time.Second
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = 5 * time.Second
	}
	if cfg.DispatchEvery <= 0 {
		cfg.DispatchEvery = 100 * time.Millisecond
	}
	g := &Gateway{
		cfg:        cfg,
		byID:       make(map[libroute.InstanceID]*Backend),
		baseModels: make(map[string]bool),
		transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			// Answers are read as they come (SSE); no transparent gzip.
			DisableCompression:    true,
			ResponseHeaderTimeout: cfg.Timeout,
		},
		stop: make(chan struct{}),
	}
	g.probe = &http.Client{Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: 4, DisableCompression: true,
	}}
	if !cfg.NoLibroute {
		if err := g.newRouter(); err != nil {
			return nil, err
		}
	}
	for _, s := range cfg.Backends {
		b := &Backend{Name: s.Name, Addr: s.Addr, ID: libroute.InstanceID(len(g.backends)), Models: s.Models}
		b.maxLoRAs.Store(s.MaxLoRAs)
		for _, m := range s.Models {
			g.baseModels[m] = true
		}
		if g.router != nil {
			id, err := g.router.AddInstance(libroute.InstanceSpec{Name: s.Name, Models: s.Models,
				MaxAdapters: min32(s.MaxLoRAs, libroute.RouterMaxAdapters)})
			if err != nil {
				g.router.Close()
				return nil, fmt.Errorf("backend %s: %w", s.Name, err)
			}
			b.ID = id
		}
		u, err := url.Parse("http://" + s.Addr)
		if err != nil || u.Host != s.Addr {
			if g.router != nil {
				g.router.Close()
			}
			return nil, fmt.Errorf("backend %s: bad address %q", s.Name, s.Addr)
		}
		b.proxy = g.newProxy(u)
		b.up.Store(true)
		b.metrics.Store("")
		b.lastAnswer.Store(time.Now().UnixNano())
		g.backends = append(g.backends, b)
		g.byID[b.ID] = b
	}
	if err := g.checkAdapters(); err != nil {
		if g.router != nil {
			g.router.Close()
		}
		return nil, err
	}
	g.metrics = NewMetrics(g.router, g.backendRows, g.policyNames, g.reasonNames)
	if g.router != nil && !cfg.NoQueue {
		g.queue = newWaitQueue(g)
		g.metrics.EnableQueue(func() bool {
			s, _ := g.router.Saturated(now())
			return s
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", g.serveCompletion)
	mux.HandleFunc("/v1/chat/completions", g.serveCompletion)
	// llama.cpp's native completion endpoint, routed alike
	mux.HandleFunc("/completion", g.serveCompletion)
	mux.HandleFunc("/completions", g.serveCompletion)
	mux.HandleFunc("/status", g.serveStatus)
	mux.Handle("/metrics", g.metrics.Handler())
	g.handler = mux
	for _, b := range g.backends {
		g.wg.Add(1)
		go g.watch(b)
	}
	if g.router != nil {
		g.wg.Add(1)
		go g.learnLoop()
	}
	if g.queue != nil {
		g.wg.Add(1)
		go g.queue.loop()
	}
	return g, nil
}

func (g *Gateway) newRouter() error {
	p, err := libroute.ParsePolicy(g.cfg.Policy)
	if err != nil {
		return fmt.Errorf("policy %q: %w", g.cfg.Policy, err)
	}
	o := libroute.DefaultRouterOptions()
	o.Policy = p
	o.Seed = 1
	if g.cfg.IndexCapacityBlocks > 0 {
		o.IndexCapacityBlocks = g.cfg.IndexCapacityBlocks
	}
	if g.cfg.LearnEvery > 0 {
		lo := libroute.DefaultLearnerOptions()
		lo.MinSamples, lo.RetrainEvery = g.cfg.LearnEvery, g.cfg.LearnEvery
		o.Learner = &lo
	}
	if g.cfg.QueueCapacity > 0 {
		o.QueueCapacity = g.cfg.QueueCapacity
	}
	if g.router, err = libroute.NewRouter(&o); err != nil {
		return err
	}
	for _, p := range []struct {
		key   libroute.Param
		name  string
		value float64
	}{
		{libroute.ParamSaturationQueue, "saturation queue", float64(g.cfg.SaturationQueue)},
		{libroute.ParamSaturationKV, "saturation KV", g.cfg.SaturationKV},
	} {
		if p.value == 0 {
			continue
		}
		if err := g.router.SetParam(p.key, p.value); err != nil {
			g.router.Close()
			g.router = nil
			return fmt.Errorf("%s %v: %w", p.name, p.value, err)
		}
	}
	for i := 0; i < libroute.PolicyCount(); i++ {
		g.policyNames = append(g.policyNames, libroute.Policy(i).String())
	}
	for i := 0; i < libroute.ReasonCount(); i++ {
		g.reasonNames = append(g.reasonNames, libroute.Reason(i).String())
	}
	return nil
}

// Close stops the background goroutines and destroys the router.
func (g *Gateway) Close() {
	close(g.stop)
	g.wg.Wait()
	if g.router != nil {
		g.router.Close()
	}
	g.transport.CloseIdleConnections()
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.handler.ServeHTTP(w, r)
}

func (g *Gateway) backendRows() []backendRow {
	rows := make([]backendRow, len(g.backends))
	for i, b := range g.backends {
		rows[i] = backendRow{ID: b.ID, Name: b.Name, Up: b.up.Load()}
	}
	return rows
}

// ---- backend health and telemetry ------------------------------------------

func (g *Gateway) markDown(b *Backend) {
	if b.up.CompareAndSwap(true, false) && g.router != nil {
		_ = g.router.DrainInstance(b.ID, true)
	}
}

func (g *Gateway) markUp(b *Backend) {
	if b.up.CompareAndSwap(false, true) && g.router != nil {
		_ = g.router.DrainInstance(b.ID, false)
		g.kick()
	}
}

// fetch does one request to b within timeout: its status and body (at
// most 4 MB).
func (g *Gateway) fetch(b *Backend, method, path string, body []byte, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+b.Addr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.probe.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, data, err
}

// timedOut says whether err is a probe that got no answer in time (the
// engine may be busy), rather than a refused or reset connection.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// Running and waiting requests and KV use, by the names vLLM, llama.cpp
// and SGLang give them: the first present wins. llama.cpp has no KV-use
// gauge.
var (
	engineMetric = regexp.MustCompile(`^((?:vllm|llamacpp|sglang):[a-z_]+)(?:\{[^}]*\})?\s+([0-9.eE+-]+|NaN)\s*$`)
	runningNames = []string{"vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs"}
	waitingNames = []string{"vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs"}
	kvUseNames   = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
)

// parseEngineStats reads an engine's running, waiting and KV-use gauges.
func parseEngineStats(text []byte) libroute.EngineStats {
	st, _ := readEngineStats(text)
	return st
}

// readEngineStats is parseEngineStats with the family whose names it
// found ("vllm", "llamacpp", "sglang"), "" when none.
func readEngineStats(text []byte) (libroute.EngineStats, string) {
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if g := engineMetric.FindSubmatch(sc.Bytes()); g != nil {
			if v, err := strconv.ParseFloat(string(g[2]), 64); err == nil && v == v {
				m[string(g[1])] = v
			}
		}
	}
	first := func(names []string) (float64, string) {
		for _, n := range names {
			if v, ok := m[n]; ok {
				return v, n
			}
		}
		return 0, ""
	}
	running, name := first(runningNames)
	waiting, _ := first(waitingNames)
	kv, _ := first(kvUseNames)
	if !(kv >= 0) {
		kv = 0
	} else if kv > 1 {
		kv = 1
	}
	family := ""
	if i := strings.IndexByte(name, ':'); i > 0 {
		family = name[:i]
	}
	return libroute.EngineStats{
		Running: clampU32(running),
		Waiting: clampU32(waiting),
		KVUse:   kv,
	}, family
}

func clampU32(v float64) uint32 {
	if !(v > 0) {
		return 0
	}
	if v > 1<<31 {
		return 1 << 31
	}
	return uint32(v)
}

// watch probes one backend every ScrapeEvery (HealthEvery while drained):
// GET /health, timed, is the RTT and says whether it is up (a refused
// connection or a status other than 200, such as llama.cpp's 503 while it
// loads, drains it at once; silence only after DeadAfter); then its load
// from /metrics, or /slots for an engine without metrics (llama.cpp
// without --metrics answers 501), and the adapters its /v1/models lists
// (scrapeModels). A late or failed load answer is skipped, never a reason
// to drain.
func (g *Gateway) watch(b *Backend) {
	defer g.wg.Done()
	for {
		wait := g.cfg.ScrapeEvery
		if !b.up.Load() {
			wait = g.cfg.HealthEvery
		}
		select {
		case <-g.stop:
			return
		case <-time.After(wait):
		}
		t0 := now()
		code, _, err := g.fetch(b, http.MethodGet, "/health", nil, g.cfg.ProbeTimeout)
		t1 := now()
		if err != nil {
			if !timedOut(err) || time.Since(time.Unix(0, b.lastAnswer.Load())) > g.cfg.DeadAfter {
				g.markDown(b)
			}
			continue
		}
		b.lastAnswer.Store(time.Now().UnixNano())
		if code != http.StatusOK {
			g.markDown(b)
			continue
		}
		g.markUp(b)
		if g.router == nil {
			continue
		}
		_ = g.router.ObserveRTT(b.ID, time.Duration(t1-t0))
		if st, ok := g.load(b); ok {
			st.ScrapedAt = now()
			_ = g.router.SetStats(b.ID, st)
			g.kick()
		}
		g.scrapeModels(b)
	}
}

// load reads b's running, waiting and KV use from /metrics, or /slots.
func (g *Gateway) load(b *Backend) (libroute.EngineStats, bool) {
	kind := b.metricsKind()
	if kind != "slots" && kind != "none" {
		code, text, err := g.fetch(b, http.MethodGet, "/metrics", nil, 2*g.cfg.ProbeTimeout)
		switch {
		case err != nil:
			return libroute.EngineStats{}, false
		case code == http.StatusNotFound || code == http.StatusNotImplemented:
			b.metrics.Store("slots")
		case code != http.StatusOK:
			return libroute.EngineStats{}, false
		default:
			st, family := readEngineStats(text)
			if family == "" {
				return st, false
			}
			b.metrics.Store(family)
			if family == "vllm" {
				g.scrapeAdapters(b, text)
			}
			return st, true
		}
	}
	code, data, err := g.fetch(b, http.MethodGet, "/slots", nil, 2*g.cfg.ProbeTimeout)
	if err != nil {
		return libroute.EngineStats{}, false
	}
	if code == http.StatusNotFound || code == http.StatusNotImplemented {
		b.metrics.Store("none")
		return libroute.EngineStats{}, false
	}
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if code != http.StatusOK || json.Unmarshal(data, &slots) != nil {
		return libroute.EngineStats{}, false
	}
	b.metrics.Store("slots")
	var st libroute.EngineStats
	for _, s := range slots {
		if s.IsProcessing {
			st.Running++
		}
	}
	return st, true
}

// learnLoop runs Lodestar's learner step every 200 ms, off the request
// path (Route never waits for it). Other policies have no learner
// (ErrState), and the loop keeps asking, so a switch to lodestar trains.
func (g *Gateway) learnLoop() {
	defer g.wg.Done()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
			_, _ = g.router.LearnStep(0)
		}
	}
}

// ---- requests ---------------------------------------------------------------

// attempt is one try of a request on one backend; the proxy's hooks find
// it in the request's context.
type attempt struct {
	g        *Gateway
	id       uint64
	b        *Backend
	reason   string
	decider  string
	cached   uint32
	prompt   uint32 // tokens routed (the router's)
	routedAt time.Time
	model    string // the router's model and adapter (lora.go)
	adapter  string
	err      error // set by the proxy's ErrorHandler: nothing was sent
	observed bool  // the engine's cached tokens were taken
}

type attemptKey struct{}

// copyBuffers lends the proxies the buffers they copy answers through
// (boxing the slice header to pool it costs 24 bytes, not 32 KB).
var copyBuffers = &bufferPool{sync.Pool{New: func() any { return make([]byte, 32<<10) }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return b.p.Get().([]byte) }
func (b *bufferPool) Put(x []byte) { b.p.Put(x) }

func (g *Gateway) newProxy(target *url.URL) *httputil.ReverseProxy {
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport = g.transport
	p.BufferPool = copyBuffers // not 32 KB of garbage per answer
	p.FlushInterval = -1       // stream every write of the engine at once
	p.ErrorLog = nil
	p.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode == http.StatusServiceUnavailable {
			return errUnavailable // the proxy closes the body
		}
		a := resp.Request.Context().Value(attemptKey{}).(*attempt)
		a.relay(resp)
		return nil
	}
	p.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		// Only reached before anything was written to the client: the
		// backend refused the request, died or answered 503 (the handler
		// retries on the router's next choice), or did not answer in
		// time (a 504).
		r.Context().Value(attemptKey{}).(*attempt).err = err
	}
	return p
}

func (g *Gateway) jsonError(w http.ResponseWriter, code int, msg string) {
	g.metrics.OnResponse(code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	data, _ := json.Marshal(map[string]string{"error": msg})
	_, _ = w.Write(data)
}

func (g *Gateway) serveCompletion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		g.jsonError(w, http.StatusNotFound, "not found")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		g.jsonError(w, http.StatusBadRequest, "bad request: "+err.Error())
		return
	}
	// Without libroute the prompt is not needed: only the envelope is
	// read, so the baseline does not pay for what only routing uses.
	parse := parseCompletion
	if g.router == nil {
		parse = parseEnvelope
	}
	c, err := parse(raw)
	if err != nil {
		g.jsonError(w, http.StatusBadRequest, "bad request: "+err.Error())
		return
	}
	var adm admission
	if g.queue != nil {
		if adm, err = g.classify(r.Header); err != nil {
			g.jsonError(w, http.StatusBadRequest, "bad request: "+err.Error())
			return
		}
	}
	var toks, ends []uint32
	if g.router != nil && g.cfg.EngineTokenizer && c.ids == nil {
		if toks, ends, err = g.engineTokens(raw, &c); err != nil {
			g.jsonError(w, http.StatusServiceUnavailable, "no tokenizer: "+err.Error())
			return
		}
	} else if g.router != nil {
		k := getCut()
		defer putCut(k)
		if toks, ends, err = c.tokens(k); err != nil {
			g.jsonError(w, http.StatusBadRequest, "bad request: "+err.Error())
			return
		}
	}
	var model, adapter string
	if g.router != nil {
		if model, adapter, err = g.modelOf(c.model); err != nil {
			g.unknownModel(w, c.model)
			return
		}
	}
	id := g.ids.Add(1)
	// the TTFT deadline counts from the request's arrival, across tries
	deadline := deadlineOf(now(), adm)
	for try := 0; try < len(g.backends); try++ {
		a := &attempt{g: g, id: id, prompt: uint32(len(toks)), model: model, adapter: adapter}
		res := picked
		if g.queue != nil {
			res = g.pickWaiting(w, r, a, toks, ends, c.maxTokens, adm, deadline)
		} else {
			res = g.pick(w, a, toks, ends, c.maxTokens)
		}
		if res == noBackend {
			break // every backend drained
		}
		if res != picked {
			return // refused, or the client hung up while it waited
		}
		out := r.Clone(context.WithValue(r.Context(), attemptKey{}, a))
		out.Body = io.NopCloser(bytes.NewReader(raw))
		out.ContentLength = int64(len(raw))
		out.Header.Del("Accept-Encoding")
		a.b.proxy.ServeHTTP(w, out)
		if a.err == nil {
			return
		}
		g.fail(id)
		if r.Context().Err() != nil {
			return // the client went away, not the backend
		}
		if timedOut(a.err) && !errors.Is(a.err, errUnavailable) {
			// no answer in time: the engine is busy, not gone
			g.jsonError(w, http.StatusGatewayTimeout, fmt.Sprintf("backend %s: %v", a.b.Name, a.err))
			return
		}
		g.markDown(a.b)
		g.retries.Add(1)
		g.metrics.OnRetry()
	}
	g.jsonError(w, http.StatusServiceUnavailable, "no backend available")
}

// pick chooses the backend for a without the waiting queue: the router's
// decision, or the next live backend in turn without libroute. noBackend
// when none is left; refused when the request was answered (a model no
// backend serves: 404; a name too long: 400). With the queue, pickWaiting
// does it (queue.go).
func (g *Gateway) pick(w http.ResponseWriter, a *attempt, toks, ends []uint32, maxTokens uint32) pickResult {
	if g.router == nil {
		n := uint64(len(g.backends))
		start := g.rr.Add(1)
		for k := uint64(0); k < n; k++ {
			if b := g.backends[(start+k)%n]; b.up.Load() {
				a.b, a.reason, a.decider, a.routedAt = b, "host-round-robin", "none", time.Now()
				return picked
			}
		}
		return noBackend
	}
	t0 := time.Now()
	d, err := g.router.Route(&libroute.Request{
		ID: a.id, Tokens: toks, Boundaries: ends,
		ExpectedOutputTokens: maxTokens, Now: now(),
		Model: a.model, Adapter: a.adapter,
	})
	took := time.Since(t0)
	if g.nameRefused(w, a, err) {
		return refused
	}
	if err != nil {
		return noBackend // ErrState: nothing routable
	}
	a.b, a.cached, a.routedAt = g.byID[d.Instance], d.CachedTokens, t0
	a.reason = label(g.reasonNames, int(d.Reason))
	a.decider = label(g.policyNames, int(d.Decider))
	g.metrics.OnRoute(a.decider, a.reason, took)
	return picked
}

// nameRefused answers a route refused for the request's model or adapter:
// ErrNotFound (no backend serves the model) 404, ErrInvalid (a name too
// long) 400. False for any other outcome.
func (g *Gateway) nameRefused(w http.ResponseWriter, a *attempt, err error) bool {
	switch {
	case errors.Is(err, libroute.ErrNotFound):
		g.unknownModel(w, a.model)
		return true
	case errors.Is(err, libroute.ErrInvalid):
		g.jsonError(w, http.StatusBadRequest, "bad request: model: "+err.Error())
		return true
	}
	return false
}

// unknownModel answers 404 as vLLM answers a model it does not serve
// (OpenAI's error object).
func (g *Gateway) unknownModel(w http.ResponseWriter, name string) {
	g.metrics.OnResponse(http.StatusNotFound)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	data, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("The model `%s` does not exist.", name),
		"type":    "NotFoundError", "param": "model", "code": http.StatusNotFound,
	}})
	_, _ = w.Write(data)
}

// fail tells the router that request id ended without an answer.
func (g *Gateway) fail(id uint64) {
	g.failures.Add(1)
	if g.router != nil {
		_ = g.router.Fail(id, now())
		g.kick()
	}
}

// errUnavailable is an engine's 503 (llama.cpp's while it loads): the
// request is retried on the router's next choice, as on a refusal.
var errUnavailable = errors.New("backend answered 503")

func label(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return ""
}

// relay sets the decision headers and wraps the engine's answer so that
// the first token and the end reach the router as the answer passes.
func (a *attempt) relay(resp *http.Response) {
	h := resp.Header
	h.Set("X-Libroute-Backend", a.b.Name)
	h.Set("X-Libroute-Reason", a.reason)
	// The policy that chose: the gateway's, or Lodestar's fallback while
	// it has no model.
	h.Set("X-Libroute-Decider", a.decider)
	h.Set("X-Libroute-Cached-Tokens", strconv.FormatUint(uint64(a.cached), 10))
	a.g.metrics.OnResponse(resp.StatusCode)
	stream := resp.StatusCode == http.StatusOK &&
		mediaType(h.Get("Content-Type")) == "text/event-stream"
	a.b.lastAnswer.Store(time.Now().UnixNano())
	resp.Body = &relayBody{rc: resp.Body, a: a, stream: stream, left: resp.ContentLength,
		failed: resp.StatusCode != http.StatusOK}
}

func mediaType(ct string) string {
	for i := 0; i < len(ct); i++ {
		if ct[i] == ';' || ct[i] == ' ' {
			return ct[:i]
		}
	}
	return ct
}

func (a *attempt) firstToken() {
	t := time.Now()
	if r := a.g.router; r != nil {
		_ = r.FirstToken(a.id, now())
	}
	a.g.metrics.OnFirstToken(t.Sub(a.routedAt))
	a.g.kick()
}

// usage takes an engine's answer or one SSE event's JSON: the output
// tokens (usage.completion_tokens; llama.cpp's native tokens_predicted),
// and the cached prompt tokens the engine reports (llama.cpp's
// timings.cache_n, vLLM's and SGLang's usage.prompt_tokens_details.
// cached_tokens) against the router's expectation, once per request.
// The counts are found by key after the last "usage" (or "timings") key
// rather than by decoding the answer (a tenth of the time): in JSON text
// a quote inside a string is escaped, so "usage" and the keys after it
// can only be keys, whatever the answer's content says.
func (a *attempt) usage(raw []byte) (outTokens uint32, ok bool) {
	if !a.observed && a.g.router != nil {
		if cached, found := observedCached(raw); found {
			a.observed = true
			a.g.onObserved(a, inRouterTokens(cached, enginePrompt(raw), a.prompt))
		}
	}
	if i := bytes.LastIndex(raw, usageKey); i >= 0 {
		if n, found := countAfter(raw[i:], completionKey); found {
			return n, true
		}
		return 0, false
	}
	return countAfter(raw, predictedKey)
}

// observedCached reads the prompt tokens an engine says it reused.
func observedCached(raw []byte) (uint32, bool) {
	if i := bytes.LastIndex(raw, timingsKey); i >= 0 {
		if n, ok := countAfter(raw[i:], cacheNKey); ok {
			return n, true
		}
	}
	if i := bytes.LastIndex(raw, usageKey); i >= 0 {
		return countAfter(raw[i:], cachedKey)
	}
	return 0, false
}

// enginePrompt reads the prompt tokens in the engine's own count:
// llama.cpp's timings.prompt_n + cache_n, or usage.prompt_tokens; 0 when
// the answer does not say.
func enginePrompt(raw []byte) uint32 {
	if i := bytes.LastIndex(raw, timingsKey); i >= 0 {
		c, ok1 := countAfter(raw[i:], cacheNKey)
		p, ok2 := countAfter(raw[i:], promptNKey)
		if ok1 && ok2 {
			return c + p
		}
	}
	if i := bytes.LastIndex(raw, usageKey); i >= 0 {
		if n, ok := countAfter(raw[i:], promptTokensKey); ok {
			return n
		}
	}
	return 0
}

// inRouterTokens converts an engine's count of reused tokens to the
// router's tokens: the same when the router saw the engine's tokens
// (EngineTokenizer, token-id prompts) or the engine's prompt size is
// unknown, else scaled by routed / enginePrompt (4-byte pieces of text);
// at most the prompt routed.
func inRouterTokens(observed, enginePrompt, routed uint32) uint32 {
	v := uint64(observed)
	if enginePrompt != 0 && enginePrompt != routed {
		v = (v*uint64(routed) + uint64(enginePrompt)/2) / uint64(enginePrompt)
	}
	if v > uint64(routed) {
		v = uint64(routed)
	}
	return uint32(v)
}

// onObserved: the engine reused `observed` prompt tokens (the router's)
// of a's request, for which the router predicted a.cached. Called at
// most once per request, before it ends: the router learns from it how
// much of its predicted hits each engine delivers (ObserveCached;
// adaptive discounts the rest). An ended request has nothing to learn.
func (g *Gateway) onObserved(a *attempt, observed uint32) {
	if g.router != nil {
		_ = g.router.ObserveCached(a.id, observed, now())
	}
	g.metrics.OnCached(a.cached, observed)
	a.b.predicted.Add(uint64(a.cached))
	a.b.observed.Add(uint64(observed))
	a.b.reports.Add(1)
}

// boolAfter reads the JSON boolean that is the value of the first key in
// b; false when there is none.
func boolAfter(b, key []byte) (value, ok bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return false, false
	}
	b = bytes.TrimLeft(b[i+len(key):], " \t\r\n")
	if len(b) == 0 || b[0] != ':' {
		return false, false
	}
	b = bytes.TrimLeft(b[1:], " \t\r\n")
	switch {
	case bytes.HasPrefix(b, []byte("true")):
		return true, true
	case bytes.HasPrefix(b, []byte("false")):
		return false, true
	}
	return false, false
}

// countAfter reads the non-negative integer that is the value of the
// first key in b (spaces and the colon skipped); false if there is none.
func countAfter(b, key []byte) (uint32, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	colon := false
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r' || (b[0] == ':' && !colon)) {
		colon = colon || b[0] == ':'
		b = b[1:]
	}
	var v uint64
	n := 0
	for ; n < len(b) && b[n] >= '0' && b[n] <= '9'; n++ {
		if v = v*10 + uint64(b[n]-'0'); v > 1<<31 {
			v = 1 << 31
		}
	}
	return uint32(v), colon && n > 0
}

// relayBody passes an engine's answer through and tells the router: the
// first token at the first bytes (a whole answer) or the first SSE data
// event (a stream), the end before the client can see it (the last byte
// of a known length, a stream's [DONE], or EOF), a failure when the copy
// stops early. Used by one goroutine, the proxy's.
type relayBody struct {
	rc     io.ReadCloser
	a      *attempt
	stream bool
	failed bool  // an error status: the answer is a failure, not a token
	left   int64 // bytes still to come when the length is known, else < 0
	line   []byte
	whole  []byte // a non-streamed answer, for its usage (bounded)
	first  bool
	done   bool
	out    uint32
}

// maxKeep bounds what is kept to parse: an answer's usage, a stream's line.
const maxKeep = 1 << 20

func (b *relayBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.done {
		if b.stream {
			b.scan(p[:n])
		} else {
			if !b.first && !b.failed {
				b.first = true
				b.a.firstToken()
			}
			if b.a.g.router != nil && len(b.whole)+n <= maxKeep {
				b.whole = append(b.whole, p[:n]...) // for its usage
			}
		}
		if b.left >= 0 {
			if b.left -= int64(n); b.left <= 0 {
				b.finish()
			}
		}
	}
	if err == io.EOF && !b.stream {
		b.finish()
	} else if err != nil {
		// a stream ends at [DONE] or llama.cpp's "stop": true event;
		// one that stops before is cut short
		b.abort()
	}
	return n, err
}

// scan reads the SSE lines of a stream as they pass.
func (b *relayBody) scan(p []byte) {
	for len(p) > 0 && !b.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(b.line)+len(p) <= maxKeep {
				b.line = append(b.line, p...)
			}
			return
		}
		line := p[:i]
		if len(b.line) > 0 {
			b.line = append(b.line, line...)
			line = b.line
		}
		b.event(line)
		b.line = b.line[:0]
		p = p[i+1:]
	}
}

var (
	dataPrefix    = []byte("data: ")
	doneEvent     = []byte("data: [DONE]")
	deltaKey      = []byte(`"delta"`)
	textKey       = []byte(`"text"`)
	usageKey      = []byte(`"usage"`)
	cachedKey     = []byte(`"cached_tokens"`)
	completionKey = []byte(`"completion_tokens"`)
	// llama.cpp's: its error event, its native stream's end and counts
	errorEvent   = []byte(`{"error"`)
	stopKey      = []byte(`"stop"`)
	timingsKey   = []byte(`"timings"`)
	cacheNKey    = []byte(`"cache_n"`)
	promptNKey   = []byte(`"prompt_n"`)
	predictedKey = []byte(`"tokens_predicted"`)
	// the engine's prompt size, OpenAI's usage
	promptTokensKey = []byte(`"prompt_tokens"`)
)

func (b *relayBody) event(line []byte) {
	if !bytes.HasPrefix(line, dataPrefix) {
		return
	}
	if bytes.HasPrefix(line, doneEvent) {
		b.finish()
		return
	}
	payload := line[len(dataPrefix):]
	if bytes.HasPrefix(bytes.TrimLeft(payload, " "), errorEvent) {
		b.abort() // llama.cpp's error inside a stream: a failure
		return
	}
	if !b.first {
		b.first = true
		b.a.firstToken()
	}
	if b.a.g.router != nil && (bytes.Contains(payload, usageKey) || bytes.Contains(payload, timingsKey)) {
		b.a.usage(payload)
	}
	if bytes.Contains(payload, deltaKey) || bytes.Contains(payload, textKey) {
		b.out++
	} else if stop, ok := boolAfter(payload, stopKey); ok {
		if stop { // llama.cpp's native stream ends here, without [DONE]
			b.finish()
		} else {
			b.out++
		}
	}
}

// finish reports the end once: a whole answer's output tokens come from
// its usage, a stream's are the events counted.
func (b *relayBody) finish() {
	if b.done {
		return
	}
	if b.failed {
		b.abort()
		return
	}
	if !b.first {
		b.first = true
		b.a.firstToken()
	}
	b.done = true
	r := b.a.g.router
	if r == nil {
		return // no router to tell, no usage to read
	}
	out := b.out
	if !b.stream {
		out, _ = b.a.usage(b.whole)
		b.whole = nil
	}
	_ = r.Complete(b.a.id, out, now())
	b.a.g.kick()
}

// abort reports a failure once: the engine or the client went away.
func (b *relayBody) abort() {
	if b.done {
		return
	}
	b.done = true
	b.a.g.fail(b.a.id)
}

func (b *relayBody) Close() error {
	b.abort() // a no-op after the end
	return b.rc.Close()
}

// ---- status -----------------------------------------------------------------

func (g *Gateway) serveStatus(w http.ResponseWriter, r *http.Request) {
	type cachedTokens struct {
		Predicted uint64 `json:"predicted"`
		Observed  uint64 `json:"observed"`
		Requests  uint64 `json:"requests"`
	}
	type backend struct {
		Name     string       `json:"name"`
		ID       uint32       `json:"id"`
		Up       bool         `json:"up"`
		Inflight uint32       `json:"inflight"`
		Metrics  string       `json:"metrics"`
		Cached   cachedTokens `json:"cached_tokens"`
		Models   []string     `json:"models"`
		MaxLoRAs uint32       `json:"max_loras"`
		Adapters int          `json:"adapters"`
	}
	st := struct {
		Policy        string            `json:"policy"`
		Backends      []backend         `json:"backends"`
		Routes        uint64            `json:"routes"`
		Reasons       map[string]uint64 `json:"reasons"`
		Inflight      uint64            `json:"inflight"`
		AdapterRoutes uint64            `json:"adapter_routes"`
		AdapterLoads  uint64            `json:"adapter_loads"`
		AdapterBases  map[string]string `json:"adapter_bases"`
		Retries       uint64            `json:"retries"`
		Failures      uint64            `json:"failures"`
		Queue         *queueStatus      `json:"queue,omitempty"`
	}{Policy: "none (host round-robin)", Reasons: map[string]uint64{}, Retries: g.retries.Load(),
		Failures: g.failures.Load(), AdapterBases: *g.adapterBases.Load()}
	for _, b := range g.backends {
		row := backend{Name: b.Name, ID: uint32(b.ID), Up: b.up.Load(), Metrics: b.metricsKind(),
			Cached: cachedTokens{b.predicted.Load(), b.observed.Load(), b.reports.Load()},
			Models: append([]string{}, b.Models...), MaxLoRAs: b.maxLoRAs.Load()}
		if g.router != nil {
			if l, err := g.router.InstanceLoad(b.ID); err == nil {
				row.Inflight = l.Inflight
			}
			if a, err := g.router.Adapters(b.ID); err == nil {
				row.Adapters = len(a)
			}
		}
		st.Backends = append(st.Backends, row)
	}
	if g.router != nil {
		st.Policy = g.router.Policy().String()
		if s, err := g.router.Stats(); err == nil {
			st.Routes, st.Inflight = s.Routes, s.Inflight
			st.AdapterRoutes, st.AdapterLoads = s.AdapterRoutes, s.AdapterLoads
			if g.queue != nil {
				st.Queue = g.queueStatus(s)
			}
		}
		if c, err := g.router.ReasonCounts(); err == nil {
			for i, n := range c {
				if n > 0 {
					st.Reasons[label(g.reasonNames, i)] = n
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}
