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
//     (rounds, samples, online error) and each instance's load.
//
// The KV-event and delta families appear once EnableKVEvents /
// EnableDeltas is called by a gateway that has those feeds. Without
// libroute (Config.NoLibroute) only the gateway_* families exist.

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
	m.reg.MustRegister(m.decisions, m.routeSeconds, m.predicted, m.observed,
		&routerCollector{r: router, backends: backends})
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
}

func (c *routerCollector) Describe(chan<- *prometheus.Desc) {}

var instanceLabel = []string{"instance"}

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dPromptTokens = desc("libroute_prompt_tokens_total", "Prompt tokens routed.", nil)
	dBlocks       = desc("libroute_index_blocks", "Block routes the index holds.", nil)
	dRemote       = desc("libroute_index_remote_blocks", "Of which REMOTE (from other replicas).", nil)
	dBytes        = desc("libroute_index_bytes", "Bytes the index has allocated.", nil)
	dLearned      = desc("libroute_index_learned_blocks_total", "Block routes the index learned.", nil)
	dEvicted      = desc("libroute_index_evicted_blocks_total", "Block routes evicted for capacity.", nil)
	dExpired      = desc("libroute_index_expired_blocks_total", "Block routes dropped by the TTL.", nil)
	dRounds       = desc("libroute_learner_rounds_total", "Training rounds of the model in service.", nil)
	dSamples      = desc("libroute_learner_samples_total", "Samples the learner took.", nil)
	dOnlineError  = desc("libroute_learner_online_error_seconds",
		"Mean |predicted - observed| TTFT of the last 256 predictions (NaN before any).", nil)
	dUp       = desc("libroute_instance_up", "1: receives routes; 0: drained.", instanceLabel)
	dInflight = desc("libroute_instance_inflight", "Requests dispatched and not ended.", instanceLabel)
	dQueued   = desc("libroute_instance_queued", "Of which before their first token.", instanceLabel)
	dQTokens  = desc("libroute_instance_queued_tokens",
		"Prompt tokens of the requests before their first token.", instanceLabel)
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
	gauge(dBlocks, float64(ix.Blocks))
	gauge(dRemote, float64(ix.RemoteBlocks))
	gauge(dBytes, float64(ix.Bytes))
	counter(dLearned, float64(ix.LearnedBlocks))
	counter(dEvicted, float64(ix.EvictedBlocks))
	counter(dExpired, float64(ix.ExpiredBlocks))
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
