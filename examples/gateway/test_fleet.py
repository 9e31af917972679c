"""End to end: gateway replicas as real processes (docs/scale.md).

Redis, four fake engines publishing vLLM KV events over ZeroMQ, and one or
three gateway processes behind a client that picks a gateway at random for
every request (and, like a load balancer, tries another when the one it
picked refuses the connection or drops it). 32 conversations of several
turns each; the engines report how much of every prompt they had cached.

1. Sharing: the engines' cache hit rate with one gateway, with three that
   share nothing, three that apply the engines' KV events, and three that
   exchange placement deltas over Redis. Both ways of sharing reach 95% of
   the single gateway's hit rate; sharing nothing does worse.
2. Faults, with three gateways on Redis and KV events and the traffic
   running: kill -9 one gateway and restart it (it restores its router
   from the snapshot in Redis); stop Redis for a few seconds and start it
   again (the gateways route on, then reconnect and catch up); drop a KV
   event batch on the wire (every gateway finds the gap and replays it).
   No client request fails.

Nothing here waits for a fixed time to pass on the machine's speed: every
wait is for a condition, with a generous deadline, so a loaded machine is
slower, not flaky. Needs redis-server, python3-redis, python3-zmq and
python3-msgpack (tools/deps.sh installs them); skipped, saying which is
missing, where they are not.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN_DIST = "/usr/lib/python3/dist-packages"
CONVERSATIONS = 32
TURNS = 4
THINK_S = 0.8  # between a conversation's turns: what sharing has to beat
POLICY = "prefix-cache"


def _need_modules() -> Optional[str]:
    """None when redis, zmq and msgpack import (from Debian's packages if
    this python is not Debian's); else what is missing."""
    missing = []
    for mod in ("redis", "zmq", "msgpack"):
        try:
            __import__(mod)
        except ImportError:
            if os.path.isdir(DEBIAN_DIST) and DEBIAN_DIST not in sys.path:
                sys.path.append(DEBIAN_DIST)  # python3-* for another python
                try:
                    __import__(mod)
                    continue
                except ImportError:
                    pass
            missing.append(mod)
    return ", ".join(f"python3-{m}" for m in missing) or None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(":") if p]
    for p in (HERE, DEBIAN_DIST):
        if p not in paths and (p == HERE or p in sys.path):
            paths.append(p)
    env["PYTHONPATH"] = ":".join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class Proc:
    """A child process that prints one 'READY {json}' line when it serves."""

    def __init__(self, args: List[str], ready_s: float = 30.0) -> None:
        self.args = args
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=child_env(),
                                  text=True)
        self.info: Dict[str, Any] = {}
        deadline = time.monotonic() + ready_s
        lines = []
        while time.monotonic() < deadline:
            line = self.p.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            lines.append(line)
            if line.startswith("READY "):
                self.info = json.loads(line[6:])
                break
        if not self.info:
            self.kill()
            self.p.stdout.close()  # type: ignore[union-attr]
            raise RuntimeError(f"{args[1:3]} did not start:\n" + "".join(lines))
        # keep draining its output so it never blocks on a full pipe
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        out = self.p.stdout
        assert out is not None
        for _ in out:
            pass
        out.close()

    def kill(self, sig: int = signal.SIGTERM) -> None:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class Redis:
    def __init__(self, port: int) -> None:
        self.port = port
        self.p: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        self.p = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._answers, 10, "redis-server to answer")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.p is not None:
            self.p.terminate()
            self.p.wait(timeout=10)
            self.p = None


def wait_for(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def http_json(port: int, method: str, path: str,
              body: Optional[Dict[str, Any]] = None,
              timeout: float = 30) -> Tuple[int, Dict[str, Any]]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, data, {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        c.close()


class Client:
    """Picks a gateway at random for every request; a gateway that refuses
    the connection or drops it is skipped (a load balancer's retry). Counts
    the requests that still failed, and the engines' cached blocks."""

    def __init__(self, ports: List[int], seed: int) -> None:
        self.ports = ports
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.failed: List[str] = []
        self.cached = self.blocks = self.requests = 0

    def post(self, body: Dict[str, Any]) -> Dict[str, Any]:
        with self.lock:
            order = self.rng.sample(self.ports, len(self.ports))
        last = "no gateway"
        for port in order * 2:
            try:
                st, d = http_json(port, "POST", "/v1/chat/completions", body)
            except (OSError, http.client.HTTPException, ValueError) as e:
                last = f"{port}: {e!r}"
                continue
            if st == 200:
                u = d["usage"]
                with self.lock:
                    self.cached += u["cached_blocks"]
                    self.blocks += u["prompt_blocks"]
                    self.requests += 1
                return d
            last = f"{port}: HTTP {st} {d}"
            break
        with self.lock:
            self.failed.append(last)
        return {}

    def hit_rate(self) -> float:
        return self.cached / self.blocks if self.blocks else 0.0


def conversation(client: Client, tag: str, turns: int,
                 stop: Optional[threading.Event] = None) -> None:
    msgs = [{"role": "system",
             "content": f"[{tag}] You are a careful assistant. " * 12}]
    for k in range(turns):
        if stop is not None and stop.is_set():
            return
        msgs.append({"role": "user",
                     "content": f"[{tag}] question {k}: " + "why so? " * 14})
        d = client.post({"model": "m", "messages": msgs, "max_tokens": 4})
        if not d:
            return
        msgs.append({"role": "assistant",
                     "content": d["choices"][0]["message"]["content"]})
        time.sleep(THINK_S)


def run_conversations(client: Client, tag: str) -> None:
    ts = [threading.Thread(target=conversation,
                           args=(client, f"{tag}-{i}", TURNS))
          for i in range(CONVERSATIONS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


class FleetEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        missing = _need_modules()
        if shutil.which("redis-server") is None:
            missing = ", ".join(filter(None, [missing, "redis-server"]))
        if missing:
            raise unittest.SkipTest(
                f"needs {missing} (Debian packages; tools/deps.sh installs "
                "them)")
        cls.procs: List[Proc] = []
        cls.redis = Redis(free_port())
        cls.engines = [
            Proc([sys.executable, os.path.join(HERE, "fake_engine.py"),
                  "--port", "0", "--name", f"e{i}", "--kv-events",
                  "--cache-blocks", "100000"])
            for i in range(4)]

    @classmethod
    def tearDownClass(cls) -> None:
        for p in getattr(cls, "engines", []):
            p.kill()
        if getattr(cls, "redis", None) is not None:
            cls.redis.stop()

    # -- set-up helpers --------------------------------------------------------

    def clear_engines(self) -> None:
        for e in self.engines:
            st, _ = http_json(e.info["http"], "POST", "/admin/clear")
            self.assertEqual(st, 200)

    def gateway(self, name: str, *, redis: bool, kv: bool,
                port: int = 0, fleet: str = "f",
                gauges: bool = True) -> Proc:
        args = [sys.executable, os.path.join(HERE, "gateway.py"),
                "--port", str(port), "--name", name, "--policy", POLICY,
                "--fleet", fleet, "--snapshot-s", "0.5"]
        if not gauges:
            args += ["--gauge-ms", "0"]
        for e, eng in enumerate(self.engines):
            args += ["--backend", f"e{e}=127.0.0.1:{eng.info['http']}"]
            if kv:
                args += ["--kv-endpoint",
                         f"e{e}={eng.info['pub']},{eng.info['replay']}"]
        if redis:
            args += ["--redis", f"127.0.0.1:{self.redis.port}"]
        if kv:
            args += ["--kv-events"]
        return Proc(args)

    def scenario(self, n: int, *, redis: bool, kv: bool,
                 fleet: str, gauges: bool = True) -> float:
        """The engines' hit rate for CONVERSATIONS conversations through n
        gateways."""
        self.clear_engines()
        gws = [self.gateway(f"{fleet}-{i}", redis=redis, kv=kv, fleet=fleet,
                            gauges=gauges)
               for i in range(n)]
        try:
            if redis and n > 1 and gauges:  # every gateway hears the others
                wait_for(lambda: all(
                    status(g)["replicas"]["peers_live"] == n - 1 for g in gws),
                    30, "the gateways' gauges")
            client = Client([g.info["http"] for g in gws], seed=n)
            run_conversations(client, fleet)
            self.assertEqual(client.failed, [])
            self.assertEqual(client.requests, CONVERSATIONS * TURNS)
            if redis and n > 1:
                # the gateways learned their routes and took each other's
                # (with events too; a gateway that learns nothing exports
                # the same routes over and over, skipped as repeats)
                took = sum(status(g)["replicas"]["deltas_imported"]
                           for g in gws)
                self.assertGreater(took, 3 * n, f"{fleet}: {took} deltas")
                sent = [status(g)["replicas"]["redis"]["gauges_out"]
                        for g in gws]
                self.assertEqual(min(sent) > 0, gauges, f"{fleet}: {sent}")
            return client.hit_rate()
        finally:
            for g in gws:
                g.kill()

    # -- the test ------------------------------------------------------------------

    def test_sharing_then_faults(self) -> None:
        t0 = time.monotonic()
        one = self.scenario(1, redis=False, kv=False, fleet="one")
        none = self.scenario(3, redis=False, kv=False, fleet="none")
        events = self.scenario(3, redis=False, kv=True, fleet="events")
        deltas = self.scenario(3, redis=True, kv=False, fleet="deltas")
        # deltas without load gauges (--gauge-ms 0): none sent, the same
        # sharing of placements
        quiet = self.scenario(3, redis=True, kv=False, fleet="quiet",
                              gauges=False)
        both = self.scenario(3, redis=True, kv=True, fleet="both")
        summary = (f"engine hit rate: 1 gateway {one:.3f}; 3 sharing "
                   f"nothing {none:.3f}; 3 with KV events {events:.3f}; 3 "
                   f"with Redis deltas {deltas:.3f} ({quiet:.3f} without "
                   f"gauges); 3 with both {both:.3f}")
        print("\n" + summary, file=sys.stderr)
        self.assertGreater(one, 0.5, summary)
        self.assertGreaterEqual(events, 0.95 * one, summary)
        self.assertGreaterEqual(deltas, 0.95 * one, summary)
        self.assertGreaterEqual(quiet, 0.95 * one, summary)
        self.assertGreaterEqual(both, 0.95 * one, summary)
        self.assertLess(none, 0.9 * one, summary)
        self.faults()
        print(f"fleet end to end: {time.monotonic() - t0:.1f} s",
              file=sys.stderr)

    def faults(self) -> None:
        self.clear_engines()
        gws = [self.gateway(f"gw{i}", redis=True, kv=True, fleet="faults")
               for i in range(3)]
        ports = [g.info["http"] for g in gws]
        client = Client(ports, seed=7)
        stop = threading.Event()

        def traffic(i: int) -> None:
            k = 0
            while not stop.is_set():
                conversation(client, f"fault-{i}-{k}", TURNS, stop)
                k += 1

        threads = [threading.Thread(target=traffic, args=(i,))
                   for i in range(8)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: client.requests >= 40, 60, "traffic")
            # 1. kill -9 a gateway and restart it on its port: it restores
            #    its router from the snapshot in Redis
            wait_for(lambda: status(gws[0])["replicas"]["redis"]["snapshots"]
                     >= 2, 30, "gw0's snapshots")
            gws[0].kill(signal.SIGKILL)
            before = client.requests
            wait_for(lambda: client.requests >= before + 10, 60,
                     "traffic with gw0 dead")
            gws[0] = self.gateway("gw0", redis=True, kv=True, fleet="faults",
                                  port=ports[0])
            self.assertTrue(gws[0].info["restored"], "gw0 did not restore")
            # 2. Redis away for a few seconds: the gateways route on, then
            #    reconnect and publish a full delta for the others
            self.redis.stop()
            before = client.requests
            wait_for(lambda: client.requests >= before + 20, 60,
                     "traffic without Redis")
            time.sleep(2)
            self.redis.start()
            wait_for(lambda: all(
                r["connected"] and r["full_after_outage"] >= 1
                for r in (status(g)["replicas"]["redis"] for g in gws)),
                30, "the gateways to reconnect to Redis")
            # 3. a KV event batch lost on the wire: every gateway finds the
            #    gap and replays it from the engine
            st, _ = http_json(self.engines[1].info["http"], "POST",
                              "/admin/drop_next_batch")
            self.assertEqual(st, 200)
            wait_for(lambda: all(
                status(g)["replicas"]["kv"]["replays"] >= 1 for g in gws),
                60, "every gateway to replay the lost batch")
            for g in gws:
                kv = status(g)["replicas"]["kv"]
                self.assertGreaterEqual(kv["gaps"], 1, kv)
                self.assertEqual(kv["resets"], 0, kv)
        finally:
            stop.set()
            for t in threads:
                t.join()
            for g in gws:
                g.kill()
        self.assertEqual(client.failed, [],
                         f"{len(client.failed)} client requests failed")
        self.assertGreater(client.requests, 80)


def status(g: Proc) -> Dict[str, Any]:
    st, d = http_json(g.info["http"], "GET", "/status", timeout=10)
    assert st == 200, (st, d)
    return d


if __name__ == "__main__":
    unittest.main()
