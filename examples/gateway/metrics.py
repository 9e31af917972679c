"""The gateway's Prometheus metrics, served on GET /metrics.

The set is the one docs/gateway.md lists, with the same names as the Go
gateway (examples/go-gateway/metrics.go), so one dashboard reads either.
Two kinds:

- what the gateway itself sees, counted as it happens: decisions by
  policy and reason, the time route() took (the library reads no clock,
  so the host times the call), the cached tokens the router predicted
  against those the engine reported, the gateway's TTFT, responses and
  retries;
- what the library counts, read from the router when Prometheus scrapes
  (a collector): prompt tokens, the index (blocks, evictions, expiries),
  the learner (rounds, samples, online error), each instance's load, the
  waiting queue (requests waiting now; waited, dispatched, expired,
  cancelled, shed), and the replica counters (KV-event batches and gaps,
  deltas exported and imported).

Waiting-queue, KV-event and delta families exist once a gateway that
queues, consumes events or exchanges deltas calls enable_queue() /
enable_kv_events() / enable_deltas(), so a gateway that does none of it
does not show counters stuck at zero. Replays are the
host's doing (it asks the engine), so the KV-event subscriber's count is
passed in.

Uses Debian's python3-prometheus-client (tools/deps.sh installs it).
"""

from __future__ import annotations

import math
import os
from typing import (Callable, Dict, Iterable, Iterator, List, Optional,
                    Tuple)

# Counters without the extra *_created series, so both gateways expose the
# same names (client_golang has none). Read when prometheus_client is
# first imported.
os.environ.setdefault("PROMETHEUS_DISABLE_CREATED_SERIES", "True")

from prometheus_client import (CONTENT_TYPE_LATEST,  # noqa: E402
                               CollectorRegistry, Counter, Histogram,
                               generate_latest)
from prometheus_client.core import (CounterMetricFamily,  # noqa: E402
                                    GaugeMetricFamily, Metric)

import libroute  # noqa: E402

# route() takes microseconds: buckets from 5 us to 10 ms.
ROUTE_BUCKETS = (5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                 5e-3, 1e-2)
# Time to first token as the gateway sees it: 5 ms to 30 s.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0)
# Time a request waited in the router's queue: 1 ms to 60 s.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                5.0, 10.0, 30.0, 60.0)

# (instance id, name, up) of each backend, read at scrape time.
Backends = Callable[[], Iterable[Tuple[int, str, bool]]]


class _RouterCollector:
    """The library's counters, read from the router at each scrape."""

    def __init__(self, router: libroute.Router, backends: Backends) -> None:
        self.router = router
        self.backends = backends
        self.kv_events = False
        self.replays: Callable[[], int] = lambda: 0
        self.deltas = False
        self.saturated: Optional[Callable[[], bool]] = None  # queueing

    def describe(self) -> List[Metric]:
        return []  # the families depend on the policy: no registry check

    def collect(self) -> Iterator[Metric]:
        r = self.router
        try:
            st = r.stats()
            ix = r.index_stats()
        except (libroute.LrError, libroute.ClosedError):
            return
        yield CounterMetricFamily(
            "libroute_prompt_tokens", "Prompt tokens routed.",
            value=st.prompt_tokens)
        for name, doc, v in (
                ("libroute_adapter_routes",
                 "Routes of requests naming a LoRA adapter.",
                 st.adapter_routes),
                ("libroute_adapter_loads",
                 "Of which sent where the adapter was not resident "
                 "(a load caused).", st.adapter_loads)):
            yield CounterMetricFamily(name, doc, value=v)
        for name, doc, v in (
                ("libroute_index_blocks", "Block routes the index holds.",
                 ix.blocks),
                ("libroute_index_remote_blocks",
                 "Of which REMOTE (from other replicas).", ix.remote_blocks),
                ("libroute_index_bytes", "Bytes the index has allocated.",
                 ix.bytes)):
            yield GaugeMetricFamily(name, doc, value=v)
        for name, doc, v in (
                ("libroute_index_learned_blocks",
                 "Block routes the index learned.", ix.learned_blocks),
                ("libroute_index_evicted_blocks",
                 "Block routes evicted for capacity.", ix.evicted_blocks),
                ("libroute_index_expired_blocks",
                 "Block routes dropped by the TTL.", ix.expired_blocks)):
            yield CounterMetricFamily(name, doc, value=v)
        if self.saturated is not None:
            yield from self._queue(st)
        if self.kv_events:
            yield from self._kv_events(st)
        if self.deltas:
            for name, doc, v in (
                    ("libroute_deltas_exported",
                     "Index deltas exported to other replicas.",
                     st.deltas_exported),
                    ("libroute_deltas_imported",
                     "Index deltas imported from other replicas.",
                     st.deltas_imported)):
                yield CounterMetricFamily(name, doc, value=v)
        yield from self._learner()
        yield from self._instances()

    def _queue(self, st: libroute.RouterStats) -> Iterator[Metric]:
        try:
            sat = self.saturated() if self.saturated else False
        except (libroute.LrError, libroute.ClosedError):
            sat = False
        for name, doc, v in (
                ("libroute_queue_waiting",
                 "Requests waiting in the router's queue now.", st.waiting),
                ("libroute_queue_waiting_tokens",
                 "Prompt tokens of the requests waiting now.",
                 st.waiting_tokens),
                ("libroute_queue_saturated",
                 "1: every routable instance is saturated (new requests "
                 "wait); 0: not.", 1.0 if sat else 0.0)):
            yield GaugeMetricFamily(name, doc, value=v)
        for name, doc, v in (
                ("libroute_queue_waited",
                 "Requests that waited (route() held them).", st.waited),
                ("libroute_queue_dispatched",
                 "Of those, let out and sent.", st.waited_dispatched),
                ("libroute_queue_expired",
                 "Of those, whose deadline passed while they waited.",
                 st.waited_expired),
                ("libroute_queue_cancelled",
                 "Of those, withdrawn (the client went away).",
                 st.waited_cancelled),
                ("libroute_queue_dropped",
                 "Of those, dropped at dispatch (their id in flight).",
                 st.waited_dropped),
                ("libroute_queue_shed",
                 "Sheddable requests refused while the fleet was "
                 "saturated.", st.shed)):
            yield CounterMetricFamily(name, doc, value=v)

    def _kv_events(self, st: libroute.RouterStats) -> Iterator[Metric]:
        for name, doc, v in (
                ("libroute_kv_event_batches",
                 "Engine KV-event batches applied to the router.",
                 st.kv_batches),
                ("libroute_kv_event_gaps",
                 "Gaps found in an engine's KV-event sequence.", st.kv_gaps),
                ("libroute_kv_event_replays",
                 "Replays asked of an engine after a gap.", self.replays())):
            yield CounterMetricFamily(name, doc, value=v)

    def _learner(self) -> Iterator[Metric]:
        try:
            ls = self.router.learner_stats()
        except (libroute.LrError, libroute.ClosedError):
            return  # lodestar never chosen: no learner
        yield CounterMetricFamily(
            "libroute_learner_rounds",
            "Training rounds of the model in service.",
            value=ls.model_round)
        yield CounterMetricFamily(
            "libroute_learner_samples", "Samples the learner took.",
            value=ls.samples)
        yield GaugeMetricFamily(
            "libroute_learner_online_error_seconds",
            "Mean |predicted - observed| TTFT of the last 256 predictions "
            "(NaN before any).", value=ls.online_mae)

    def _instances(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("libroute_instance_up",
                               "1: receives routes; 0: drained.",
                               labels=["instance"])
        inflight = GaugeMetricFamily(
            "libroute_instance_inflight",
            "Requests dispatched and not ended.", labels=["instance"])
        queued = GaugeMetricFamily(
            "libroute_instance_queued",
            "Of which before their first token.", labels=["instance"])
        qtok = GaugeMetricFamily(
            "libroute_instance_queued_tokens",
            "Prompt tokens of the requests before their first token.",
            labels=["instance"])
        for ident, name, is_up in self.backends():
            try:
                ld = self.router.instance_load(ident)
            except (libroute.LrError, libroute.ClosedError):
                continue
            up.add_metric([name], 1.0 if is_up else 0.0)
            inflight.add_metric([name], ld.inflight)
            queued.add_metric([name], ld.queued)
            qtok.add_metric([name], ld.queued_tokens)
        yield from (up, inflight, queued, qtok)


class GatewayMetrics:
    """The gateway's metric set: its own counters plus the router's,
    exported by exposition(). Every method is safe from any thread."""

    def __init__(self, router: libroute.Router, backends: Backends) -> None:
        reg = self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter(
            "libroute_decisions",
            "Decisions by the policy that chose and the reason.",
            ["policy", "reason"], registry=reg)
        self.route_seconds = Histogram(
            "libroute_route_duration_seconds",
            "Time one route() call took, timed by the gateway.",
            buckets=ROUTE_BUCKETS, registry=reg)
        self.predicted = Counter(
            "libroute_predicted_cached_tokens",
            "Tokens the router expected the engine to have cached, for the "
            "requests whose engine reported cached tokens.", registry=reg)
        self.observed = Counter(
            "libroute_observed_cached_tokens",
            "Cached prompt tokens the engine reported for those requests.",
            registry=reg)
        self.ttft = Histogram(
            "libroute_gateway_ttft_seconds",
            "From route() to the engine's first token.",
            buckets=TTFT_BUCKETS, registry=reg)
        self.responses = Counter(
            "libroute_gateway_responses", "Responses by HTTP status.",
            ["code"], registry=reg)
        self.retries = Counter(
            "libroute_gateway_retries",
            "Requests re-routed after their backend refused them.",
            registry=reg)
        self.queue_wait: Optional[Histogram] = None  # enable_queue()
        self.collector = _RouterCollector(router, backends)
        reg.register(self.collector)

    # ---- the gateway's own events -------------------------------------

    def on_route(self, d: libroute.Decision, seconds: float) -> None:
        """A decision recorded, and the time route() took."""
        decider = d.decider.label if d.decider is not None else ""
        self.decisions.labels(decider, d.reason.label).inc()
        self.route_seconds.observe(seconds)

    def on_route_call(self, seconds: float) -> None:
        """A route() call that made no decision: the router held the
        request (Reason.WAITING) or refused it (shed, queue full). Its
        time, and no decision."""
        self.route_seconds.observe(seconds)

    def on_dispatched(self, policy: str, reason: str,
                      waited_s: float) -> None:
        """A request the router let out of its queue: its decision, and
        how long it waited."""
        self.decisions.labels(policy, reason).inc()
        if self.queue_wait is not None:
            self.queue_wait.observe(waited_s)

    def on_cached(self, predicted: int, observed: int) -> None:
        """The engine reported `observed` cached prompt tokens for a
        request the router expected `predicted` on."""
        self.predicted.inc(predicted)
        self.observed.inc(observed)

    def on_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def on_response(self, code: int) -> None:
        self.responses.labels(str(code)).inc()

    def on_retry(self) -> None:
        self.retries.inc()

    # ---- the waiting queue, KV events and deltas (gateways that have them)

    def enable_queue(self, saturated: Callable[[], bool]) -> None:
        """Export the waiting queue's families: the router's counts, and
        ``saturated()`` (Router.saturated now) as a gauge; the wait
        histogram is the gateway's (on_dispatched)."""
        if self.queue_wait is None:
            self.queue_wait = Histogram(
                "libroute_queue_wait_seconds",
                "Time a request waited in the router's queue before it was "
                "sent.", buckets=WAIT_BUCKETS, registry=self.registry)
        self.collector.saturated = saturated

    def enable_kv_events(self,
                         replays: Optional[Callable[[], int]] = None) -> None:
        """Export the KV-event families: batches applied and sequence gaps
        found (the router's counts), replays asked for (``replays()``, the
        subscriber's count; none when not given)."""
        self.collector.kv_events = True
        if replays is not None:
            self.collector.replays = replays

    def enable_deltas(self) -> None:
        """Export the delta families: index deltas sent to and applied
        from other gateway replicas (the router's counts)."""
        self.collector.deltas = True

    # ---- exposition -----------------------------------------------------

    def exposition(self) -> Tuple[bytes, str]:
        """The text exposition format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def metric_set(path: str) -> Dict[str, Tuple[str, str]]:
    """examples/metric-set.txt: {family: (type, group)}."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if fields:
                name, kind, group = fields
                out[name] = (kind, group)
    return out


def families(text: str) -> Dict[str, str]:
    """{family: type} of the "# TYPE" lines of a text exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            out[name] = kind
    return out


def parse_exposition(text: str) -> dict:
    """{(name, frozenset(labels.items())): value} of a text exposition,
    for tests and tools (the subset both clients write: no escapes in
    label values, no timestamps)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = {}
        for kv in filter(None, rest.rstrip("}").split(",")):
            k, _, v = kv.partition("=")
            labels[k] = v.strip('"')
        out[(name, frozenset(labels.items()))] = (
            math.nan if value == "NaN" else float(value))
    return out
