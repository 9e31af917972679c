package main

// The gateway's Prometheus metrics, served on GET /metrics with
// client_golang from Debian (golang-github-prometheus-client-golang-dev,
// built from /usr/share/gocode in GOPATH mode: see env.sh). The set and
// its names are the Python gateway's (examples/gateway/metrics.py), listed
// in examples/metric-set.txt and explained in docs/gateway.md:
//
//   - what the gateway sees as requests pass: decisions by policy and
//     reason, the time Route took (the library reads no clock, so the
//     host times the call), predicted against engine-reported cached
//     tokens, TTFT, responses and retries;
//   - what the library counts, read from the router at each scrape:
//     prompt tokens, the index (blocks, evictions, expiries), the learner
//     (rounds, samples, online error), each instance's load and the
//     waiting queue (requests waiting now; waited, dispatched, expired,
//     cancelled, shed).
//
// The waiting-queue, KV-event and delta families appear once EnableQueue
// / EnableKVEvents / EnableDeltas is called by a gateway that queues or
// has those feeds. Without libroute (Config.NoLibroute) only the
// gateway_* families exist.

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"libroute"
)

var (
	// Route takes microseconds: buckets from 5 us to 10 ms.
	routeBuckets = []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
		2.5e-3, 5e-3, 1e-2}
	// Time to first token as the gateway sees it: 5 ms to 30 s.
	ttftBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
		10, 30}
	// Time a request waited in the router's queue: 1 ms to 60 s.
	waitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
		2.5, 5, 10, 30, 60}
)

// backendRow is one backend as the metrics see it at a scrape.
type backendRow struct {
	ID   libroute.InstanceID
	Name string
	Up   bool
}

// Metrics is the gateway's metric set. Every method is safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	decisions    *prometheus.CounterVec // nil without libroute, as the next three
	routeSeconds prometheus.Histogram
	predicted    prometheus.Counter
	observed     prometheus.Counter
	ttft         prometheus.Histogram
	responses    *prometheus.CounterVec
	retries      prometheus.Counter
	queueWait    prometheus.Histogram // set by EnableQueue
	collector    *routerCollector     // nil without libroute

	// Set by EnableKVEvents and EnableDeltas.
	KVBatches, KVGaps, KVReplays   prometheus.Counter
	DeltasExported, DeltasImported prometheus.Counter
}

// NewMetrics registers the set; router nil means a gateway without
// libroute. backends lists the backends at each scrape.
func NewMetrics(router *libroute.Router, backends func() []backendRow,
	policyNames, reasonNames []string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "libroute_gateway_ttft_seconds", Buckets: ttftBuckets,
		Help: "From route() to the engine's first token.",
	})
	m.responses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "libroute_gateway_responses_total",
		Help: "Responses by HTTP status.",
	}, []string{"code"})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "libroute_gateway_retries_total",
		Help: "Requests re-routed after their backend refused them.",
	})
	m.reg.MustRegister(m.ttft, m.responses, m.retries)
	if router == nil {
		return m
	}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "libroute_decisions_total",
		Help: "Decisions by the policy that chose and the reason.",
	}, []string{"policy", "reason"})
	m.routeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "libroute_route_duration_seconds", Buckets: routeBuckets,
		Help: "Time one route() call took, timed by the gateway.",
	})
	m.predicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "libroute_predicted_cached_tokens_total",
		Help: "Tokens the router expected the engine to have cached, for " +
			"the requests whose engine reported cached tokens.",
	})
	m.observed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "libroute_observed_cached_tokens_total",
		Help: "Cached prompt tokens the engine reported for those requests.",
	})
	m.collector = &routerCollector{r: router, backends: backends}
	m.reg.MustRegister(m.decisions, m.routeSeconds, m.predicted, m.observed, m.collector)
	return m
}

// Handler serves the text exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// OnRoute counts a decision and the time Route took.
func (m *Metrics) OnRoute(policy, reason string, took time.Duration) {
	m.decisions.WithLabelValues(policy, reason).Inc()
	m.routeSeconds.Observe(took.Seconds())
}

// OnRouteCall observes the time of a Route call that made no decision:
// the router held the request (ReasonWaiting) or refused it (shed, queue
// full).
func (m *Metrics) OnRouteCall(took time.Duration) { m.routeSeconds.Observe(took.Seconds()) }

// OnDispatched counts the decision of a request the router let out of its
// queue, and observes how long it waited.
func (m *Metrics) OnDispatched(policy, reason string, waited time.Duration) {
	m.decisions.WithLabelValues(policy, reason).Inc()
	if m.queueWait != nil {
		m.queueWait.Observe(waited.Seconds())
	}
}

// OnCached adds a request's predicted and engine-reported cached tokens.
func (m *Metrics) OnCached(predicted, observed uint32) {
	m.predicted.Add(float64(predicted))
	m.observed.Add(float64(observed))
}

// OnFirstToken observes the time from routing to the first token.
func (m *Metrics) OnFirstToken(ttft time.Duration) { m.ttft.Observe(ttft.Seconds()) }

// OnResponse counts a response by status.
func (m *Metrics) OnResponse(code int) { m.responses.WithLabelValues(strconv.Itoa(code)).Inc() }

// OnRetry counts a request re-routed after its backend refused it.
func (m *Metrics) OnRetry() { m.retries.Inc() }

// EnableQueue registers the waiting queue's families for a gateway whose
// requests may wait: the router's counts, saturated() (Router.Saturated
// now) as a gauge, and the wait histogram (OnDispatched). Call once,
// before serving.
func (m *Metrics) EnableQueue(saturated func() bool) {
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "libroute_queue_wait_seconds", Buckets: waitBuckets,
		Help: "Time a request waited in the router's queue before it was sent.",
	})
	m.reg.MustRegister(m.queueWait)
	m.collector.saturated = saturated
}

// EnableKVEvents registers the KV-event families (batches applied, gaps
// found, replays asked for) for a gateway that applies engine KV events.
// Call once, before counting.
func (m *Metrics) EnableKVEvents() {
	m.KVBatches = m.counter("libroute_kv_event_batches_total",
		"Engine KV-event batches applied to the router.")
	m.KVGaps = m.counter("libroute_kv_event_gaps_total",
		"Gaps found in an engine's KV-event sequence.")
	m.KVReplays = m.counter("libroute_kv_event_replays_total",
		"Replays asked of an engine after a gap.")
}

// EnableDeltas registers the delta families (index deltas exported to and
// imported from other gateway replicas). Call once, before counting.
func (m *Metrics) EnableDeltas() {
	m.DeltasExported = m.counter("libroute_deltas_exported_total",
		"Index deltas exported to other replicas.")
	m.DeltasImported = m.counter("libroute_deltas_imported_total",
		"Index deltas imported from other replicas.")
}

func (m *Metrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	m.reg.MustRegister(c)
	return c
}

// routerCollector reads the library's counters at each scrape. It is
// unchecked (Describe sends nothing): the learner's families exist only
// once the router has a learner.
type routerCollector struct {
	r        *libroute.Router
	backends func() []backendRow
	// Set by EnableQueue: the queue's families, and whether the fleet is
	// saturated now.
	saturated func() bool
}

func (c *routerCollector) Describe(chan<- *prometheus.Desc) {}

var instanceLabel = []string{"instance"}

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dPromptTokens  = desc("libroute_prompt_tokens_total", "Prompt tokens routed.", nil)
	dAdapterRoutes = desc("libroute_adapter_routes_total", "Routes of requests naming a LoRA adapter.", nil)
	dAdapterLoads  = desc("libroute_adapter_loads_total",
		"Of which sent where the adapter was not resident (a load caused).", nil)
	dBlocks      = desc("libroute_index_blocks", "Block routes the index holds.", nil)
	dRemote      = desc("libroute_index_remote_blocks", "Of which REMOTE (from other replicas).", nil)
	dBytes       = desc("libroute_index_bytes", "Bytes the index has allocated.", nil)
	dLearned     = desc("libroute_index_learned_blocks_total", "Block routes the index learned.", nil)
	dEvicted     = desc("libroute_index_evicted_blocks_total", "Block routes evicted for capacity.", nil)
	dExpired     = desc("libroute_index_expired_blocks_total", "Block routes dropped by the TTL.", nil)
	dRounds      = desc("libroute_learner_rounds_total", "Training rounds of the model in service.", nil)
	dSamples     = desc("libroute_learner_samples_total", "Samples the learner took.", nil)
	dOnlineError = desc("libroute_learner_online_error_seconds",
		"Mean |predicted - observed| TTFT of the last 256 predictions (NaN before any).", nil)
	dUp       = desc("libroute_instance_up", "1: receives routes; 0: drained.", instanceLabel)
	dInflight = desc("libroute_instance_inflight", "Requests dispatched and not ended.", instanceLabel)
	dQueued   = desc("libroute_instance_queued", "Of which before their first token.", instanceLabel)
	dQTokens  = desc("libroute_instance_queued_tokens",
		"Prompt tokens of the requests before their first token.", instanceLabel)
	dWaiting       = desc("libroute_queue_waiting", "Requests waiting in the router's queue now.", nil)
	dWaitingTokens = desc("libroute_queue_waiting_tokens", "Prompt tokens of the requests waiting now.", nil)
	dSaturated     = desc("libroute_queue_saturated",
		"1: every routable instance is saturated (new requests wait); 0: not.", nil)
	dWaited      = desc("libroute_queue_waited_total", "Requests that waited (route() held them).", nil)
	dDispatched  = desc("libroute_queue_dispatched_total", "Of those, let out and sent.", nil)
	dWaitExpired = desc("libroute_queue_expired_total", "Of those, whose deadline passed while they waited.", nil)
	dCancelled   = desc("libroute_queue_cancelled_total", "Of those, withdrawn (the client went away).", nil)
	dDropped     = desc("libroute_queue_dropped_total", "Of those, dropped at dispatch (their id in flight).", nil)
	dShed        = desc("libroute_queue_shed_total", "Sheddable requests refused while the fleet was saturated.", nil)
)

func (c *routerCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.r.Stats()
	if err != nil {
		return // closed
	}
	ix, err := c.r.IndexStats()
	if err != nil {
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(dPromptTokens, float64(st.PromptTokens))
	counter(dAdapterRoutes, float64(st.AdapterRoutes))
	counter(dAdapterLoads, float64(st.AdapterLoads))
	gauge(dBlocks, float64(ix.Blocks))
	gauge(dRemote, float64(ix.RemoteBlocks))
	gauge(dBytes, float64(ix.Bytes))
	counter(dLearned, float64(ix.LearnedBlocks))
	counter(dEvicted, float64(ix.EvictedBlocks))
	counter(dExpired, float64(ix.ExpiredBlocks))
	if c.saturated != nil {
		sat := 0.0
		if c.saturated() {
			sat = 1
		}
		gauge(dWaiting, float64(st.Waiting))
		gauge(dWaitingTokens, float64(st.WaitingTokens))
		gauge(dSaturated, sat)
		counter(dWaited, float64(st.Waited))
		counter(dDispatched, float64(st.WaitedDispatched))
		counter(dWaitExpired, float64(st.WaitedExpired))
		counter(dCancelled, float64(st.WaitedCancelled))
		counter(dDropped, float64(st.WaitedDropped))
		counter(dShed, float64(st.Shed))
	}
	if ls, err := c.r.LearnerStats(); err == nil { // ErrState: no learner
		counter(dRounds, float64(ls.ModelRound))
		counter(dSamples, float64(ls.Samples))
		gauge(dOnlineError, ls.OnlineMAE)
	}
	for _, b := range c.backends() {
		l, err := c.r.InstanceLoad(b.ID)
		if err != nil {
			continue
		}
		up := 0.0
		if b.Up {
			up = 1
		}
		gauge(dUp, up, b.Name)
		gauge(dInflight, float64(l.Inflight), b.Name)
		gauge(dQueued, float64(l.Queued), b.Name)
		gauge(dQTokens, float64(l.QueuedTokens), b.Name)
	}
}
