"""GET /metrics of the gateway: the documented metric set (metrics.py,
docs/gateway.md), and counters that move with the traffic.

Three fake engines and the gateway on loopback, as in test_gateway. The
index is small, so evictions happen; a Lodestar gateway that trains
every 16 samples shows the learner's families.
"""

from __future__ import annotations

import http.client
import math
import os
import sys
import time
import unittest
from typing import Dict, FrozenSet, Tuple

from fake_engine import Engine, EngineServer
import libroute
from gateway import Gateway, GatewayMetrics, GatewayServer
from test_gateway import Chat, post, serve

Samples = Dict[Tuple[str, FrozenSet[Tuple[str, str]]], float]

if GatewayMetrics is not None:
    import metrics as M


def scrape(port: int) -> Tuple[str, Samples]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    if r.status != 200:
        raise AssertionError(f"/metrics: HTTP {r.status}: {text[:200]}")
    return text, M.parse_exposition(text)


def total(s: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in s.items() if n == name and want <= ls)


SET_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "metric-set.txt")


def check_set(t: unittest.TestCase, text: str, groups: set) -> None:
    """The families of `groups` in examples/metric-set.txt, with their
    types, and no other libroute_* family."""
    want = {n: k for n, (k, g) in M.metric_set(SET_FILE).items()
            if g in groups}
    got = {n: k for n, k in M.families(text).items()
           if n.startswith("libroute_")}
    t.assertEqual(got, want)


@unittest.skipIf(GatewayMetrics is None,
                 f"{sys.executable} cannot import prometheus_client: "
                 "apt-get install python3-prometheus-client (tools/deps.sh "
                 "does) and run with that python3")
class Metrics(unittest.TestCase):
    def start(self, policy: str, **kw) -> int:
        self.engines = []
        for name in ("e1", "e2", "e3"):
            srv = EngineServer(("127.0.0.1", 0), Engine(name, base_s=0.002))
            serve(srv)
            self.engines.append(srv)
        backends = [(s.engine.name, "127.0.0.1", s.server_address[1])
                    for s in self.engines]
        self.gw = Gateway(backends, policy=policy, **kw)
        self.gsrv = GatewayServer(("127.0.0.1", 0), self.gw)
        serve(self.gsrv)
        return self.gsrv.server_address[1]

    def tearDown(self) -> None:
        self.gsrv.shutdown()
        self.gsrv.server_close()
        self.gw.close()
        for s in self.engines:
            s.shutdown()
            s.server_close()

    def test_metric_set_and_counters_move(self) -> None:
        port = self.start("prefix-cache", index_capacity_blocks=48)
        text, before = scrape(port)
        # no learner, no KV events, no deltas in this gateway: not shown;
        # requests may wait (the default): the queue's families are
        check_set(self, text, {"gateway", "router", "queue"})
        self.assertEqual(total(before, "libroute_decisions_total"), 0)

        chats = [Chat(i) for i in range(6)]
        for k in range(3):
            for c in chats:
                c.turn(port, k)  # odd turns stream
        status, _, _ = post(port, "/v1/completions", {"prompt": 5})
        self.assertEqual(status, 400)
        n = len(chats) * 3

        _, after = scrape(port)
        st = self.gw.router.stats()
        self.assertEqual(total(after, "libroute_decisions_total"), n)
        self.assertEqual(st.routes, n)
        self.assertEqual(total(after, "libroute_decisions_total",
                               policy="prefix-cache"), n)
        for reason, count in self.gw.router.reason_counts().items():
            self.assertEqual(total(after, "libroute_decisions_total",
                                   reason=reason.label), count)
        self.assertEqual(
            total(after, "libroute_route_duration_seconds_count"), n)
        self.assertGreater(
            total(after, "libroute_route_duration_seconds_sum"), 0)
        self.assertEqual(
            total(after, "libroute_route_duration_seconds_bucket", le="+Inf"),
            n)
        self.assertEqual(total(after, "libroute_gateway_ttft_seconds_count"),
                         n)
        self.assertEqual(total(after, "libroute_gateway_responses_total",
                               code="200"), n)
        self.assertEqual(total(after, "libroute_gateway_responses_total",
                               code="400"), 1)
        self.assertEqual(total(after, "libroute_prompt_tokens_total"),
                         st.prompt_tokens)
        # turns 2 and 3 of each chat hit the cache both ways
        pred = total(after, "libroute_predicted_cached_tokens_total")
        obs = total(after, "libroute_observed_cached_tokens_total")
        self.assertGreater(pred, 0)
        self.assertGreater(obs, 0)
        self.assertLess(abs(obs - pred), 0.5 * pred, (obs, pred))
        # ... and the router was told the same figures
        self.assertEqual(st.observed_cached_tokens, obs)
        self.assertEqual(st.observed_expected_tokens, pred)
        self.assertEqual(st.observed_reports, n)
        ix = self.gw.router.index_stats()
        self.assertGreater(ix.evicted_blocks, 0)  # 48 blocks: it overflowed
        self.assertEqual(total(after, "libroute_index_evicted_blocks_total"),
                         ix.evicted_blocks)
        self.assertEqual(total(after, "libroute_index_learned_blocks_total"),
                         ix.learned_blocks)
        self.assertEqual(total(after, "libroute_index_blocks"), ix.blocks)
        self.assertLessEqual(ix.blocks, 48)
        for e in ("e1", "e2", "e3"):
            self.assertEqual(total(after, "libroute_instance_up",
                                   instance=e), 1)
            self.assertEqual(total(after, "libroute_instance_inflight",
                                   instance=e), 0)
            self.assertIn(("libroute_instance_queued_tokens",
                           frozenset({("instance", e)})), after)

        # a dead backend: a retry, and its gauge says so once drained
        victim = self.engines[0]
        victim.shutdown()
        victim.server_close()
        for c in chats:
            c.turn(port, 3)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            _, last = scrape(port)
            if total(last, "libroute_instance_up", instance="e1") == 0:
                break
            time.sleep(0.05)
        self.assertEqual(total(last, "libroute_instance_up", instance="e1"),
                         0)
        self.assertGreaterEqual(total(last, "libroute_gateway_retries_total"),
                                total(after, "libroute_gateway_retries_total"))

    def test_learner_families(self) -> None:
        port = self.start("lodestar", learn_every=16)
        chats = [Chat(i) for i in range(8)]
        for k in range(3):
            for c in chats:
                c.turn(port, k)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            text, s = scrape(port)
            if total(s, "libroute_learner_rounds_total") >= 1:
                break
            time.sleep(0.1)
        check_set(self, text, {"gateway", "router", "queue", "learner"})
        self.assertGreaterEqual(total(s, "libroute_learner_rounds_total"), 1)
        self.assertGreaterEqual(total(s, "libroute_learner_samples_total"),
                                16)
        err = total(s, "libroute_learner_online_error_seconds")
        self.assertTrue(math.isnan(err) or err >= 0, err)
        # cold start decides with the fallback: the decider label says so
        deciders = {dict(ls).get("policy") for (n, ls) in s
                    if n == "libroute_decisions_total"}
        self.assertTrue(deciders, s)

    def test_kv_event_and_delta_families(self) -> None:
        port = self.start("prefix-cache")
        m = self.gw.metrics
        m.enable_kv_events()
        m.enable_deltas()
        text, s = scrape(port)
        check_set(self, text, {"gateway", "router", "queue", "kv-events",
                               "deltas"})
        for f in ("libroute_kv_event_batches_total",
                  "libroute_kv_event_gaps_total",
                  "libroute_kv_event_replays_total",
                  "libroute_deltas_exported_total",
                  "libroute_deltas_imported_total"):
            self.assertEqual(total(s, f), 0)
        # the router's counts: a peer's two deltas in, one out; replays
        # are the host's
        peer = libroute.Router("prefix-cache", seed=2, replica_id=7)
        for e in self.engines:
            peer.add_instance(e.engine.name)
        for k in range(2):
            peer.route(list(range(64 * (k + 1))), request_id=k + 1,
                       now_ns=1_000_000 * (k + 1))
            m_ = peer.export_delta(0)
            self.gw.router.import_delta(m_.data, now_ns=1_000_000 * (k + 1))
        self.gw.router.export_delta(0)
        m.enable_kv_events(lambda: 3)
        _, s = scrape(port)
        self.assertEqual(total(s, "libroute_deltas_imported_total"), 2)
        self.assertEqual(total(s, "libroute_deltas_exported_total"), 1)
        self.assertEqual(total(s, "libroute_kv_event_replays_total"), 3)
        self.assertEqual(total(s, "libroute_kv_event_batches_total"), 0)
        peer.close()


@unittest.skipIf(GatewayMetrics is not None, "prometheus_client is here")
class NoMetrics(unittest.TestCase):
    def test_metrics_says_what_is_missing(self) -> None:
        gw = Gateway([("e1", "127.0.0.1", 9)], policy="prefix-cache")
        srv = GatewayServer(("127.0.0.1", 0), gw)
        serve(srv)
        try:
            c = http.client.HTTPConnection("127.0.0.1",
                                           srv.server_address[1], timeout=30)
            c.request("GET", "/metrics")
            r = c.getresponse()
            self.assertEqual(r.status, 503)
            self.assertIn(b"python3-prometheus-client", r.read())
            c.close()
        finally:
            srv.shutdown()
            srv.server_close()
            gw.close()


if __name__ == "__main__":
    unittest.main()
