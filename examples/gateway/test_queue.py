"""The waiting queue (waiting.py) end to end: one fake engine behind the
gateway, holding every request before its first token until the test
releases it, and a saturation depth of 1, so that one request held by the
engine saturates the fleet and the next ones must wait in the gateway.
Nothing here sleeps for a set time: the test waits for states (a request
held, n waiting) and releases the engine when it means to.

- held requests go out by urgency (x-llm-priority, an objective's
  priority), then by fair share between tenants, one at a time as first
  tokens free the engine;
- a sheddable request (negative priority) gets 429 at once;
- a request still waiting at its deadline (x-slo-ttft-ms, or its
  urgency's default) gets 429 and never reaches the engine;
- a client that hangs up while its request waits withdraws it;
- /metrics and /status count all of it; without the queue, none of it
  exists and every request goes at once.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import unittest
from typing import Any, Callable, Dict, Optional, Tuple

from fake_engine import Engine, EngineServer
from gateway import Gateway, GatewayMetrics, GatewayServer
from test_gateway import get, serve
from waiting import (Classifier, parse_objectives, parse_slo,
                     priority_urgency, tenant_id)

if GatewayMetrics is not None:
    from test_metrics import check_set, scrape, total

PROMPT = "Tell me about queues. " * 8


def post(port: int, tag: str, headers: Optional[Dict[str, str]] = None
         ) -> Tuple[int, Dict[str, str], bytes]:
    """A completion whose `user` field the engine records on arrival."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {"prompt": PROMPT, "max_tokens": 2, "user": tag}
    c.request("POST", "/v1/completions", json.dumps(body).encode(),
              {"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    data = r.read()
    hdr = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdr, data


class Call(threading.Thread):
    """post() on its own thread: a client that waits for its answer."""

    def __init__(self, port: int, tag: str,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(daemon=True)
        self.port, self.tag, self.headers = port, tag, headers
        self.result: Optional[Tuple[int, Dict[str, str], bytes]] = None
        self.start()

    def run(self) -> None:
        self.result = post(self.port, self.tag, self.headers)

    def answer(self) -> Tuple[int, Dict[str, str], bytes]:
        self.join(30)
        assert self.result is not None, f"{self.tag}: no answer"
        return self.result


class Queue(unittest.TestCase):
    def start(self, **kw: Any) -> None:
        # no prefill or decode time: only the hold decides when a first
        # token comes
        self.engine = Engine("e1", base_s=0.001, per_block_s=0.0,
                             per_token_s=0.0)
        self.engine.set_hold(True)
        self.esrv = EngineServer(("127.0.0.1", 0), self.engine)
        serve(self.esrv)
        opts: Dict[str, Any] = dict(saturation_queue=1, dispatch_s=0.02,
                                    objectives={"chat": 1},
                                    ttft_slo_s={1: 0.05})
        opts.update(kw)
        self.gw = Gateway([("e1", "127.0.0.1", self.esrv.server_address[1])],
                          policy="prefix-cache", **opts)
        self.gsrv = GatewayServer(("127.0.0.1", 0), self.gw)
        serve(self.gsrv)
        self.port = self.gsrv.server_address[1]

    def tearDown(self) -> None:
        self.engine.set_hold(False)  # nothing left held, whatever failed
        self.gsrv.shutdown()
        self.gsrv.server_close()
        self.gw.close()
        self.esrv.shutdown()
        self.esrv.server_close()

    def until(self, cond: Callable[[], bool], what: str) -> None:
        """Wait for a state the test caused (never for a set time)."""
        deadline = time.monotonic() + 10
        while not cond():
            if time.monotonic() > deadline:
                self.fail(f"never: {what}")
            time.sleep(0.005)

    def held(self, n: int) -> None:
        self.until(lambda: self.engine.state()["held"] == n,
                   f"{n} held by the engine")

    def waiting(self, n: int) -> None:
        self.until(lambda: self.gw.router.stats().waiting == n,
                   f"{n} waiting in the gateway")

    def test_urgency_then_fair_share_and_shed(self) -> None:
        self.start()
        first = Call(self.port, "a")  # routed at once; the engine holds it
        self.held(1)
        self.assertTrue(get(self.port, "/status")["queue"]["saturated"])
        # the fleet is saturated: these wait, in this order of arrival
        calls = []
        for i, (tag, h) in enumerate([
                ("b1", {"x-tenant-id": "x"}),
                ("b2", {"x-tenant-id": "x"}),
                ("c", {"x-gateway-inference-fairness-id": "y"}),
                ("d", {"x-llm-priority": "3"}),                   # urgency 0
                ("e", {"x-gateway-inference-objective": "chat"}),  # 2
        ]):
            calls.append(Call(self.port, tag, h))
            self.waiting(i + 1)
        # a sheddable request is refused at once, and waits not
        status, hdr, body = post(self.port, "f", {"x-llm-priority": "-1"})
        self.assertEqual(status, 429, body)
        self.assertEqual(hdr["x-libroute-dropped"], "shed")
        self.assertEqual(hdr["retry-after"], "1")
        st = get(self.port, "/status")["queue"]
        self.assertEqual((st["waiting"], st["waited"], st["shed"]), (5, 5, 1))

        # every first token frees the engine for exactly one more
        self.engine.release(100)
        for c in [first] + calls:
            status, hdr, body = c.answer()
            self.assertEqual(status, 200, body)
            self.assertEqual(hdr["x-libroute-backend"], "e1")
            self.assertEqual(hdr["x-libroute-decider"], "prefix-cache")
            self.assertNotEqual(hdr["x-libroute-reason"], "waiting")
        # urgency 0, 2, then band 3 by fair share: x, y, x (not b1, b2, c)
        self.assertEqual(self.engine.state()["arrivals"],
                         ["a", "d", "e", "b1", "c", "b2"])
        s = self.gw.router.stats()
        self.assertEqual((s.waiting, s.waited, s.waited_dispatched, s.shed),
                         (0, 5, 5, 1))
        self.until(lambda: self.gw.router.stats().inflight == 0,
                   "every request ended")

        if GatewayMetrics is None:
            return
        text, m = scrape(self.port)
        check_set(self, text, {"gateway", "router", "queue"})
        for name, want in (("libroute_queue_waiting", 0),
                           ("libroute_queue_saturated", 0),
                           ("libroute_queue_waited_total", 5),
                           ("libroute_queue_dispatched_total", 5),
                           ("libroute_queue_shed_total", 1),
                           ("libroute_queue_expired_total", 0),
                           ("libroute_queue_cancelled_total", 0),
                           ("libroute_queue_wait_seconds_count", 5)):
            self.assertEqual(total(m, name), want, name)
        self.assertGreater(total(m, "libroute_queue_wait_seconds_sum"), 0)
        # one decision per request sent (5 of them from the queue), one
        # route() call timed per request (6 routed, 5 held, 1 shed)
        self.assertEqual(total(m, "libroute_decisions_total"), 6)
        self.assertEqual(total(m, "libroute_decisions_total"), s.routes)
        self.assertEqual(total(m, "libroute_route_duration_seconds_count"),
                         7)
        self.assertEqual(total(m, "libroute_gateway_ttft_seconds_count"), 6)
        self.assertEqual(total(m, "libroute_gateway_responses_total",
                               code="200"), 6)
        self.assertEqual(total(m, "libroute_gateway_responses_total",
                               code="429"), 1)

    def test_deadlines_expire(self) -> None:
        self.start()
        first = Call(self.port, "a")
        self.held(1)
        # a deadline from the header; one from the urgency's default (an
        # objective's priority 2 is urgency 1: 50 ms)
        late = [Call(self.port, "g", {"x-slo-ttft-ms": "30"}),
                Call(self.port, "h", {"x-llm-priority": "2"})]
        for c in late:
            status, hdr, body = c.answer()
            self.assertEqual(status, 429, body)
            self.assertEqual(hdr["x-libroute-dropped"], "expired")
            self.assertEqual(hdr["retry-after"], "1")
        s = self.gw.router.stats()
        self.assertEqual((s.waiting, s.waited, s.waited_expired), (0, 2, 2))
        for h in ({"x-slo-ttft-ms": "soon"}, {"x-slo-ttft-ms": "0"},
                  {"x-llm-priority": "high"}):
            status, _, body = post(self.port, "bad", h)
            self.assertEqual(status, 400, (h, body))
        self.engine.release(1)
        self.assertEqual(first.answer()[0], 200)
        # the expired ones never reached the engine
        self.assertEqual(self.engine.state()["arrivals"], ["a"])
        if GatewayMetrics is not None:
            _, m = scrape(self.port)
            self.assertEqual(total(m, "libroute_queue_expired_total"), 2)
            self.assertEqual(total(m, "libroute_queue_wait_seconds_count"),
                             0)

    def test_hang_up_withdraws(self) -> None:
        self.start()
        first = Call(self.port, "a")
        self.held(1)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 2,
                           "user": "gone"}).encode()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.waiting(1)
        s.close()
        self.until(lambda: self.gw.router.stats().waited_cancelled == 1,
                   "the hung-up request withdrawn")
        self.waiting(0)
        self.engine.release(10)
        self.assertEqual(first.answer()[0], 200)
        self.assertEqual(post(self.port, "z")[0], 200)
        # the withdrawn one was never sent
        self.assertEqual(self.engine.state()["arrivals"], ["a", "z"])
        self.assertEqual(get(self.port, "/status")["queue"]["cancelled"], 1)
        if GatewayMetrics is not None:
            _, m = scrape(self.port)
            self.assertEqual(total(m, "libroute_queue_cancelled_total"), 1)
            self.assertEqual(total(m, "libroute_queue_waiting"), 0)

    def test_without_the_queue(self) -> None:
        self.start(queue=False)
        calls = [Call(self.port, "a"), Call(self.port, "b"),
                 Call(self.port, "f", {"x-llm-priority": "-1"})]
        self.held(3)  # all sent at once, the sheddable one too
        self.assertNotIn("queue", get(self.port, "/status"))
        self.engine.set_hold(False)
        for c in calls:
            self.assertEqual(c.answer()[0], 200)
        # nor are the headers read
        self.assertEqual(post(self.port, "x", {"x-llm-priority": "high"})[0],
                         200)
        s = self.gw.router.stats()
        self.assertEqual((s.waited, s.shed), (0, 0))
        if GatewayMetrics is not None:
            text, _ = scrape(self.port)
            check_set(self, text, {"gateway", "router"})


class Mappings(unittest.TestCase):
    """The header mappings, the same as the Go gateway's (queue.go: the
    same urgencies, the same tenant hash)."""

    def test_priority_tenant_slo(self) -> None:
        for p, u in ((-100, 7), (-5, 7), (-4, 7), (-1, 4), (0, 3), (1, 2),
                     (2, 1), (3, 0), (4, 0), (100, 0)):
            self.assertEqual(priority_urgency(p), (u, p < 0), p)
        self.assertEqual(tenant_id(""), 0xcbf29ce484222325)
        self.assertEqual(tenant_id("tenant-a"), 0xc2ef8128e3eb9efb)
        slo = parse_slo(["2=50", "1000"])
        self.assertEqual(len(slo), 8)
        self.assertEqual((slo[2], slo[7]), (0.05, 1.0))
        for bad in ("8=10", "x=10", "2=", "-5", "0"):
            with self.assertRaises(ValueError, msg=bad):
                parse_slo([bad])
        self.assertEqual(parse_objectives(["chat=2", "a=b=-1"]),
                         {"chat": 2, "a=b": -1})
        for bad in ("chat", "=1", "chat=high"):
            with self.assertRaises(ValueError, msg=bad):
                parse_objectives([bad])
        c = Classifier(objectives={"batch": -2}, ttft_slo_s={5: 1.0},
                       default_slo_s=30.0)
        h = {"x-gateway-inference-objective": "batch",
             "x-tenant-id": "tenant-a"}
        self.assertEqual(c.classify(h), (-2, 5, True, tenant_id("tenant-a"),
                                         1.0))
        # the number wins over the objective
        h.update({"x-llm-priority": " 1 ", "x-slo-ttft-ms": "250"})
        a = c.classify(h)
        self.assertEqual((a.urgency, a.sheddable, a.slo_s), (2, False, 0.25))
        self.assertEqual(c.classify({}), (0, 3, False, 0, 30.0))
        for bad in ({"x-slo-ttft-ms": "inf"}, {"x-slo-ttft-ms": "-1"},
                    {"x-llm-priority": "1.5"}):
            with self.assertRaises(ValueError, msg=str(bad)):
                c.classify(bad)


if __name__ == "__main__":
    unittest.main()
