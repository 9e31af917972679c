"""End to end on real engines: two llama.cpp llama-servers (realfleet.py,
random weights, 1 thread each) behind the Python gateway
(examples/gateway), driven with multi-turn conversations of token ids on
llama.cpp's native /completion, streamed.

- every request succeeds;
- the engines' own hit rate (sum of timings.cache_n over the prompt
  tokens) is higher behind the cache-aware policy (prefix-cache-and-load)
  than behind round-robin, on the same conversations and fresh engines;
- an engine killed with SIGKILL while conversations run is drained, and
  its requests are retried on the other: still no request fails.

    python3 tools/real/test_real.py BUILD_DIR

BUILD_DIR is a meson build of libroute with the Python binding
(build-ci under tools/run-tests). The llama-server build and the model
are taken from the cache (realfleet.py) or made there: about 10 minutes on 2
cores the first time. Skips (exit 77) when the binding is not built.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import unittest
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gateway"))

import realfleet as fleet  # noqa: E402
from bench import completion_body, stream  # noqa: E402

BUILD = ""
PORT_BASE = 8391


class Traffic:
    """Conversations of token ids through a gateway: 2 system prompts,
    turns of fresh user tokens, the answers carried into the next turn."""

    def __init__(self, n_conv: int = 7, seed: int = 3) -> None:
        rng = random.Random(seed)
        systems = [[rng.randrange(259, 32000) for _ in range(160)]
                   for _ in range(2)]
        self.rng = rng
        self.prompts = [list(systems[i % 2]) for i in range(n_conv)]
        self.rows: List[Tuple[int, int, str, int, int]] = []
        self.errors: List[str] = []
        self.lock = threading.Lock()

    def turn(self, port: int, i: int, user: List[int]) -> None:
        self.prompts[i] += user
        body = completion_body(self.prompts[i], 8)
        try:
            out, timings, hdr = stream("127.0.0.1", port, "/completion",
                                       body, 120.0, lambda: None)
        except Exception as e:  # any failure is the test's finding
            with self.lock:
                self.errors.append(f"conversation {i}: {e}")
            return
        self.prompts[i] += out
        with self.lock:
            self.rows.append((i, len(self.prompts[i]),
                              hdr.get("x-libroute-backend", ""),
                              int(timings.get("cache_n", 0)),
                              int(timings.get("prompt_n", 0))))

    def round(self, port: int, users: List[List[int]]) -> None:
        ts = [threading.Thread(target=self.turn, args=(port, i, u))
              for i, u in enumerate(users)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def users(self, n: int) -> List[List[int]]:
        return [[self.rng.randrange(259, 32000) for _ in range(60)]
                for _ in range(n)]

    def hit_rate(self) -> float:
        reused = sum(r[3] for r in self.rows)
        return reused / max(1, sum(r[3] + r[4] for r in self.rows))


def settled(gw: Any) -> Dict[str, Any]:
    """The gateway's status once nothing is in flight (a relay thread may
    still be closing its request when the client has its answer)."""
    deadline = time.monotonic() + 5
    st = gw.status()
    while st["inflight"] and time.monotonic() < deadline:
        time.sleep(0.02)
        st = gw.status()
    return st


class RealEngines(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        sys.path.insert(0, os.path.join(BUILD, "bindings", "python"))
        cls.fleet = fleet.Fleet(2, base_port=PORT_BASE,
                                engine=fleet.EngineSpec(parallel=4))

    @classmethod
    def tearDownClass(cls) -> None:
        cls.fleet.stop()

    def gateway(self, policy: str,
                scrape_s: float = 0.1) -> Tuple[Any, Any, int]:
        from gateway import Gateway, GatewayServer
        gw = Gateway(self.fleet.backends(), policy=policy, timeout_s=120.0,
                     scrape_s=scrape_s)
        srv = GatewayServer(("127.0.0.1", 0), gw)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return gw, srv, srv.server_address[1]

    def close(self, gw: Any, srv: Any) -> None:
        srv.shutdown()
        srv.server_close()
        gw.close()

    def run_policy(self, policy: str, turns: int = 4) -> Traffic:
        self.fleet.restart()
        gw, srv, port = self.gateway(policy)
        tr = Traffic()
        try:
            for _ in range(turns):
                tr.round(port, tr.users(len(tr.prompts)))
            st = settled(gw)
        finally:
            self.close(gw, srv)
        self.assertEqual(tr.errors, [], policy)
        self.assertEqual(st["inflight"], 0)
        self.assertEqual(st["failures"], 0)
        return tr

    def test_cache_aware_beats_round_robin(self) -> None:
        ca = self.run_policy("prefix-cache-and-load")
        rr = self.run_policy("round-robin")
        print(f"\nengines' hit rate: prefix-cache-and-load "
              f"{ca.hit_rate():.3f}, round-robin {rr.hit_rate():.3f}",
              file=sys.stderr)
        self.assertEqual(len(ca.rows), 28)
        self.assertEqual(len(rr.rows), 28)
        self.assertGreater(ca.hit_rate(), rr.hit_rate() + 0.05)

    def test_killed_engine_drained_and_retried(self) -> None:
        self.fleet.restart()
        # probes every 2 s: the requests find the dead engine first
        gw, srv, port = self.gateway("prefix-cache-and-load", scrape_s=2.0)
        tr = Traffic(seed=5)
        try:
            tr.round(port, tr.users(len(tr.prompts)))
            busiest: Dict[str, int] = {}
            for r in tr.rows:
                busiest[r[2]] = busiest.get(r[2], 0) + 1
            victim = max(busiest, key=busiest.get)
            eng = next(e for e in self.fleet.engines if e.name == victim)
            users = tr.users(len(tr.prompts))
            # killed just before the next round: its conversations are
            # routed to it, refused, retried on the other engine, and
            # the engine is drained
            eng.kill()
            tr.round(port, users)
            tr.round(port, tr.users(len(tr.prompts)))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(
                    b["up"] for b in gw.status()["backends"]
                    if b["name"] == victim):
                time.sleep(0.05)
            st = settled(gw)
        finally:
            self.close(gw, srv)
        self.assertEqual(tr.errors, [])
        self.assertEqual(len(tr.rows), 21)
        self.assertEqual([b["name"] for b in st["backends"] if not b["up"]],
                         [victim])
        self.assertTrue(all(r[2] != victim for r in tr.rows[-7:]))
        self.assertGreaterEqual(st["retries"], 1)
        self.assertEqual(st["inflight"], 0)


def main() -> int:
    global BUILD
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    BUILD = os.path.abspath(sys.argv.pop(1))
    if not os.path.isdir(os.path.join(BUILD, "bindings", "python",
                                      "libroute")):
        print(f"test_real: skipped: no Python binding in {BUILD}")
        return 77
    t0 = time.monotonic()
    fleet.ensure_server()
    fleet.ensure_model()
    print(f"test_real: llama-server and model ready "
          f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    prog = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
