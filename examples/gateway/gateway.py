"""A small OpenAI-compatible HTTP gateway that routes with libroute.

For each POST /v1/completions or /v1/chat/completions it tokenizes the
prompt with libroute's text helper (one token per 4 bytes over the messages
joined, so that a conversation's history is a token prefix of its next
turn; message ends are the boundaries), asks the router, proxies the request to the chosen backend, streams
the answer back as it comes, and reports the first token and the end (or
the failure) to the router. Behind it:

- a scraper thread reads each backend's vLLM-named metrics every 100 ms
  (running, waiting, KV use) and feeds them to the router with the probe
  time as the RTT;
- a backend that refuses a connection or fails a scrape is drained, the
  request is retried on the router's next choice, and a health thread
  undrains the backend once GET /health answers again.

GET /status shows the backends and the router's counters; GET /metrics
the Prometheus metric set of docs/gateway.md (metrics.py).

    python3 gateway.py --port 8100 --backend e1=127.0.0.1:8101 \\
        --backend e2=127.0.0.1:8102 --policy prefix-cache

Needs the libroute Python package on PYTHONPATH (bindings/python).
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import itertools
import json
import re
import threading
import time
from array import array
from typing import Any, Dict, List, Optional, Tuple

import libroute
from libroute import Router, text_tokens

from fake_engine import prompt_text

try:
    from metrics import GatewayMetrics
    _NO_METRICS = ""
except ImportError as _e:  # python3-prometheus-client is not installed
    GatewayMetrics = None  # type: ignore[assignment,misc]
    _NO_METRICS = str(_e)

_METRIC = re.compile(r"^(vllm:[a-z_]+)(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$")


def now_ns() -> int:
    return time.monotonic_ns()


class _NoMetrics:
    """Stands in for GatewayMetrics without prometheus_client: every
    event is dropped, and /metrics says what is missing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class Backend:
    def __init__(self, name: str, host: str, port: int, ident: int) -> None:
        self.name, self.host, self.port, self.id = name, host, port, ident
        self.up = True


class Gateway:
    """The routing state shared by the handler threads."""

    def __init__(self, backends: List[Tuple[str, str, int]], *,
                 policy: str = "prefix-cache", scrape_s: float = 0.1,
                 health_s: float = 0.25, timeout_s: float = 30.0,
                 router_options: Optional[Dict[str, Any]] = None,
                 prepare: Optional[Any] = None,
                 learn: bool = True,
                 index_capacity_blocks: Optional[int] = None,
                 learn_every: Optional[int] = None) -> None:
        # learn_every: Lodestar trains on its first `learn_every` samples
        # and again after each `learn_every` more (None: the library's
        # schedule).
        opts = dict(router_options or {})
        if index_capacity_blocks is not None:
            opts["index_capacity_blocks"] = index_capacity_blocks
        if learn_every is not None:
            opts["learner"] = {"min_samples": learn_every,
                               "retrain_every": learn_every}
        self.router = Router(policy, seed=1, **opts)
        # A replica restarting restores its router first (fleet.py), then
        # finds the backends the snapshot names.
        self.restored = bool(prepare(self.router)) if prepare else False
        self.learn = learn  # False: the engines' KV events are the truth
        self.on_backend_up: List[Any] = []  # callbacks (Backend)
        self.status_parts: Dict[str, Any] = {}  # name -> () -> dict
        self.backends: Dict[int, Backend] = {}
        for name, host, port in backends:
            try:
                ident = self.router.find_instance(name)
                # drained when the snapshot was taken: the health checks
                # below drain it again if it still is down
                self.router.drain_instance(ident, False)
            except libroute.NotFoundError:
                ident = self.router.add_instance(name)
            self.backends[ident] = Backend(name, host, port, ident)
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.scrape_s, self.health_s, self.timeout_s = (scrape_s, health_s,
                                                         timeout_s)
        self.stop = threading.Event()
        self.retries = 0
        self.metrics: Any = (_NoMetrics() if GatewayMetrics is None else
                             GatewayMetrics(self.router, self._backend_rows))
        self.threads = [threading.Thread(target=self._scrape_loop,
                                         daemon=True),
                        threading.Thread(target=self._learn_loop,
                                         daemon=True)]
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        self.router.close()

    # ---- backend health -------------------------------------------------

    def mark_down(self, b: Backend) -> None:
        with self.lock:
            if not b.up:
                return
            b.up = False
        try:
            self.router.drain_instance(b.id, True)
        except libroute.LrError:
            pass

    def _mark_up(self, b: Backend) -> None:
        with self.lock:
            if b.up:
                return
            b.up = True
        self.router.drain_instance(b.id, False)
        for fn in self.on_backend_up:  # it restarted: its cache is empty
            fn(b)

    def _get(self, b: Backend, path: str) -> Optional[str]:
        try:
            c = http.client.HTTPConnection(b.host, b.port, timeout=1.0)
            c.request("GET", path)
            r = c.getresponse()
            data = r.read().decode("utf-8", "replace")
            c.close()
            return data if r.status == 200 else None
        except OSError:
            return None

    def _scrape_loop(self) -> None:
        next_health = 0.0
        while not self.stop.wait(self.scrape_s):
            for b in list(self.backends.values()):
                if not b.up:
                    if time.monotonic() >= next_health and \
                            self._get(b, "/health") is not None:
                        self._mark_up(b)
                    continue
                t0 = now_ns()
                text = self._get(b, "/metrics")
                t1 = now_ns()
                if text is None:
                    self.mark_down(b)
                    continue
                m = {}
                for line in text.splitlines():
                    g = _METRIC.match(line)
                    if g:
                        m[g.group(1)] = float(g.group(2))
                kv = m.get("vllm:kv_cache_usage_perc",
                           m.get("vllm:gpu_cache_usage_perc", 0.0))
                self.router.set_stats(
                    b.id, running=int(m.get("vllm:num_requests_running", 0)),
                    waiting=int(m.get("vllm:num_requests_waiting", 0)),
                    kv_use=min(max(kv, 0.0), 1.0), scraped_ns=t1)
                self.router.observe_rtt(b.id, t1 - t0)
            if time.monotonic() >= next_health:
                next_health = time.monotonic() + self.health_s

    def _learn_loop(self) -> None:
        """Lodestar's training, off the request path: route() never waits
        for it. Other policies have no learner (StateError): the loop
        keeps asking, so a switch to lodestar starts training."""
        while not self.stop.wait(0.2):
            try:
                self.router.learn_step()
            except libroute.StateError:
                pass
            except libroute.ClosedError:
                return

    def _backend_rows(self) -> List[Tuple[int, str, bool]]:
        return [(b.id, b.name, b.up) for b in self.backends.values()]

    # ---- requests -------------------------------------------------------

    @staticmethod
    def tokenize(body: Dict[str, Any]) -> Tuple[array, array]:
        """Tokens and message ends: the messages joined as the engine reads
        them, cut once; each message's end rounded down to a whole token,
        the last one the whole prompt. A conversation's history is a byte
        prefix of its next turn, so its whole tokens start the next turn's
        (examples/go-gateway cuts the same way)."""
        parts, text = prompt_text(body)
        toks = text_tokens(text)
        ends = array("I")
        end = 0
        for p in parts:
            end += len(p.encode("utf-8"))
            ends.append(end // 4)
        if ends:
            ends[-1] = len(toks)
        return toks, ends

    def status(self) -> Dict[str, Any]:
        s = self.router.stats()
        return {
            "policy": self.router.policy.label,
            "backends": [{"name": b.name, "id": b.id, "up": b.up,
                          "inflight": self.router.instance_load(b.id).inflight}
                         for b in self.backends.values()],
            "routes": s.routes,
            # Decisions by reason, every reason the library has.
            "reasons": {r.label: n for r, n in
                        self.router.reason_counts().items() if n},
            "inflight": s.inflight,
            "retries": self.retries,
            "restored": self.restored,
            "replicas": {
                "kv_batches": s.kv_batches, "kv_duplicates": s.kv_duplicates,
                "kv_gaps": s.kv_gaps, "kv_restarts": s.kv_restarts,
                "deltas_exported": s.deltas_exported,
                "deltas_imported": s.deltas_imported,
                "deltas_skipped": s.deltas_skipped,
                "gauges_imported": s.gauges_imported,
                "peers_live": s.peers_live,
                **{k: fn() for k, fn in self.status_parts.items()},
            },
        }


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "libroute-gateway/0.1"
    protocol_version = "HTTP/1.0"

    @property
    def gw(self) -> Gateway:
        return self.server.gateway  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any,
              extra: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/status":
            self._json(200, self.gw.status())
        elif self.path == "/metrics":
            self._metrics()
        else:
            self._json(404, {"error": "not found"})

    def _metrics(self) -> None:
        m = self.gw.metrics
        if isinstance(m, _NoMetrics):
            self._json(503, {"error": "no metrics: python3-prometheus-client "
                                      f"is missing ({_NO_METRICS})"})
            return
        data, ctype = m.exposition()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": "not found"})
            return
        gw = self.gw
        try:
            n = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(n)
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            toks, ends = gw.tokenize(body)
            max_tokens = int(body.get("max_tokens", 16))
        except (ValueError, TypeError) as e:
            gw.metrics.on_response(400)
            self._json(400, {"error": f"bad request: {e}"})
            return
        rid = next(gw.ids)
        for _ in range(len(gw.backends)):
            t0 = now_ns()
            try:
                d = gw.router.route(toks, request_id=rid, now_ns=t0,
                                    boundaries=ends, learn=gw.learn,
                                    expected_output_tokens=max_tokens)
            except libroute.StateError:
                break  # every backend drained
            gw.metrics.on_route(d, (now_ns() - t0) / 1e9)
            b = gw.backends[d.instance]
            try:
                conn = http.client.HTTPConnection(b.host, b.port,
                                                  timeout=gw.timeout_s)
                conn.request("POST", self.path, raw,
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
            except OSError:
                gw.router.fail(rid, now_ns=now_ns())
                gw.mark_down(b)
                with gw.lock:
                    gw.retries += 1
                gw.metrics.on_retry()
                continue
            self._relay(rid, b, d, conn, resp, bool(body.get("stream")), t0)
            return
        gw.metrics.on_response(503)
        self._json(503, {"error": "no backend available"})

    def _relay(self, rid: int, b: Backend, d: "libroute.Decision",
               conn: http.client.HTTPConnection,
               resp: http.client.HTTPResponse, stream: bool,
               routed_ns: int) -> None:
        gw = self.gw
        gw.metrics.on_response(resp.status)

        def first_token() -> None:
            t = now_ns()
            gw.router.first_token(rid, now_ns=t)
            gw.metrics.on_first_token((t - routed_ns) / 1e9)

        def usage(u: Any) -> None:
            # The engine's cached prompt tokens (vLLM's and OpenAI's
            # usage.prompt_tokens_details.cached_tokens) against the
            # router's expectation.
            try:
                cached = int(u["prompt_tokens_details"]["cached_tokens"])
            except (KeyError, TypeError, ValueError):
                return
            gw.metrics.on_cached(d.cached_tokens, cached)

        hdr = {"X-Libroute-Backend": b.name,
               "X-Libroute-Reason": d.reason.label,
               # The policy that chose: the gateway's, or Lodestar's
               # fallback while it has no model.
               "X-Libroute-Decider": d.decider.label,
               "X-Libroute-Cached-Tokens": str(d.cached_tokens)}
        out_tokens = 0
        completed = False
        try:
            if not stream or resp.status != 200:
                data = resp.read()
                first_token()
                try:
                    u = json.loads(data)["usage"]
                    out_tokens = int(u["completion_tokens"])
                    usage(u)
                except (ValueError, KeyError, TypeError):
                    out_tokens = 0
                # The engine has answered in full: the request ends here,
                # before the client can see the answer (and, say, read the
                # gateway's /status) and whether or not it reads it.
                gw.router.complete(rid, out_tokens, now_ns=now_ns())
                completed = True
                self.send_response(resp.status)
                self.send_header("Content-Type",
                                 resp.getheader("Content-Type",
                                                "application/json"))
                self.send_header("Content-Length", str(len(data)))
                for k, v in hdr.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                for k, v in hdr.items():
                    self.send_header(k, v)
                self.end_headers()
                first = True
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    if line.startswith(b"data: ") and \
                            not line.startswith(b"data: [DONE]"):
                        if first:
                            first_token()
                            first = False
                        if b'"delta"' in line or b'"text"' in line:
                            out_tokens += 1
                        elif b'"usage"' in line:
                            try:
                                usage(json.loads(line[6:])["usage"])
                            except (ValueError, KeyError, TypeError):
                                pass
                    self.wfile.write(line)
                    self.wfile.flush()
            if not completed:
                gw.router.complete(rid, out_tokens, now_ns=now_ns())
        except OSError:
            # the backend or the client went away mid-answer
            if not completed:
                gw.router.fail(rid, now_ns=now_ns())
        finally:
            conn.close()


class GatewayServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # bursts of clients: the default 5 resets them

    def __init__(self, addr: Tuple[str, int], gateway: Gateway) -> None:
        super().__init__(addr, Handler)
        self.gateway = gateway


def add_fleet_args(ap: argparse.ArgumentParser) -> None:
    """The replica options (fleet.py, docs/scale.md)."""
    g = ap.add_argument_group("replicas")
    g.add_argument("--name", default="gateway",
                   help="this gateway's name (its snapshot's key)")
    g.add_argument("--redis", metavar="HOST:PORT",
                   help="share placements and load with the other gateways "
                        "over Redis pub/sub; snapshots in Redis")
    g.add_argument("--fleet", default="default",
                   help="the fleet: its gateways share one Redis channel")
    g.add_argument("--kv-events", action="store_true",
                   help="apply the engines' vLLM KV events (ZeroMQ)")
    g.add_argument("--kv-endpoint", action="append", default=[],
                   metavar="NAME=PUB,REPLAY",
                   help="an engine's ZMQ event and replay endpoints")
    g.add_argument("--sync-ms", type=float, default=50.0,
                   help="delta publication period (default 50)")
    g.add_argument("--snapshot-s", type=float, default=2.0,
                   help="snapshot period (default 2)")


def start_fleet(a: argparse.Namespace, backends: List[Tuple[str, str, int]],
                policy: str) -> Tuple[Gateway, List[Any]]:
    """The gateway with its replica wiring: Redis sync and KV events."""
    import fleet
    sync = None
    opts: Dict[str, Any] = {"replica_id": fleet.new_replica_id()}
    if a.redis:
        host, _, port = a.redis.rpartition(":")
        opts["index_eviction"] = libroute.Eviction.LRU
        sync = fleet.RedisSync(None, host or "127.0.0.1", int(port),
                               fleet=a.fleet, name=a.name,
                               backends=[b[0] for b in backends],
                               sync_s=a.sync_ms / 1e3,
                               snapshot_s=a.snapshot_s)

    def prepare(router: Router) -> bool:
        if sync is None:
            return False
        sync.router = router
        return sync.restore()

    if a.index_capacity_blocks is not None:
        opts["index_capacity_blocks"] = a.index_capacity_blocks
    gw = Gateway(backends, policy=policy, router_options=opts,
                 prepare=prepare, learn=not a.kv_events,
                 learn_every=a.learn_every)
    stoppers: List[Any] = []
    if sync is not None:
        sync.start()
        gw.status_parts["redis"] = sync.status
        gw.metrics.enable_deltas()
        stoppers.append(sync.close)
    if a.kv_events:
        eps = fleet.kv_endpoints(a.kv_endpoint)
        missing = [b.name for b in gw.backends.values() if b.name not in eps]
        if missing:
            raise SystemExit(f"--kv-events: no --kv-endpoint for {missing}")
        sub = fleet.KvEventSubscriber(
            gw.router, {b.id: eps[b.name] for b in gw.backends.values()})
        gw.status_parts["kv"] = sub.status
        gw.metrics.enable_kv_events(lambda: sub.counts["replays"])
        gw.on_backend_up.append(lambda b: gw.router.kv_reset(b.id))
        stoppers.append(sub.close)
    return gw, stoppers


def main() -> None:
    ap = argparse.ArgumentParser(
        description="OpenAI-style gateway routing with libroute.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--policy", default="prefix-cache",
                    help="a libroute policy name (default prefix-cache)")
    ap.add_argument("--backend", action="append", required=True,
                    metavar="NAME=HOST:PORT")
    add_fleet_args(ap)
    ap.add_argument("--index-capacity-blocks", type=int, default=None,
                    help="prefix index capacity in blocks (library default)")
    ap.add_argument("--learn-every", type=int, default=None, metavar="N",
                    help="lodestar: train after N samples and every N more")
    a = ap.parse_args()
    backends = []
    for spec in a.backend:
        m = re.fullmatch(r"([^=]+)=([^:]+):(\d+)", spec)
        if not m:
            ap.error(f"--backend {spec!r}: expected NAME=HOST:PORT")
        backends.append((m.group(1), m.group(2), int(m.group(3))))
    stoppers: List[Any] = []
    if a.redis or a.kv_events:
        gw, stoppers = start_fleet(a, backends, a.policy)
    else:
        gw = Gateway(backends, policy=a.policy,
                     index_capacity_blocks=a.index_capacity_blocks,
                     learn_every=a.learn_every)
    srv = GatewayServer((a.host, a.port), gw)
    print(f"gateway on http://{a.host}:{srv.server_address[1]} ({a.policy}), "
          f"{len(backends)} backends", flush=True)
    print("READY " + json.dumps({"http": srv.server_address[1],
                                 "restored": gw.restored}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        for stop in stoppers:
            stop()
        gw.close()


if __name__ == "__main__":
    main()
