"""End to end: three fake engines and the gateway on loopback.

- a conversation's turns stick to one backend, whose prefix cache then
  serves the history (the engine reports cached blocks);
- load spreads: the conversations land on more than one backend;
- a backend that dies is routed around: its conversations move, no
  request fails, and the gateway drains it; once it is back, it is
  undrained.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, Dict, List, Tuple

from fake_engine import Engine, EngineServer
from gateway import Gateway, GatewayServer

CONVERSATIONS = 8
TURNS = 4


def serve(srv: Any) -> threading.Thread:
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return t


def post(port: int, path: str, body: Dict[str, Any]) -> Tuple[int, Dict[str, str], bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, json.dumps(body).encode(),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    hdr = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdr, data


def get(port: int, path: str) -> Dict[str, Any]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    return data


class Chat:
    """One conversation: a growing list of messages."""

    def __init__(self, i: int) -> None:
        self.i = i
        self.messages: List[Dict[str, str]] = [
            {"role": "system",
             "content": f"You are assistant number {i}. " + "Be brief. " * 20}]
        self.backends: List[str] = []
        self.cached: List[int] = []

    def turn(self, port: int, k: int) -> None:
        self.messages.append({"role": "user",
                              "content": f"Question {k} of chat {self.i}: "
                                         + "why? " * (10 + k)})
        stream = k % 2 == 1
        body = {"model": "m", "messages": self.messages, "max_tokens": 6,
                "stream": stream}
        status, hdr, data = post(port, "/v1/chat/completions", body)
        if status != 200:
            raise AssertionError(f"chat {self.i} turn {k}: HTTP {status}: "
                                 f"{data[:200]!r}")
        if stream:
            lines = [ln for ln in data.split(b"\n") if ln.startswith(b"data: ")]
            assert lines[-1] == b"data: [DONE]", lines[-3:]
            final = json.loads(lines[-2][6:])
            answer = "".join(json.loads(ln[6:])["choices"][0]["delta"]
                             ["content"] for ln in lines[:-2])
        else:
            final = json.loads(data)
            answer = final["choices"][0]["message"]["content"]
        assert final["backend"] == hdr["x-libroute-backend"]
        self.backends.append(final["backend"])
        self.cached.append(final["usage"]["cached_blocks"])
        self.messages.append({"role": "assistant", "content": answer})


class GatewayEndToEnd(unittest.TestCase):
    def setUp(self) -> None:
        self.engines = []
        for name in ("e1", "e2", "e3"):
            srv = EngineServer(("127.0.0.1", 0), Engine(name))
            serve(srv)
            self.engines.append(srv)
        backends = [(s.engine.name, "127.0.0.1", s.server_address[1])
                    for s in self.engines]
        self.gw = Gateway(backends, policy="prefix-cache")
        self.gsrv = GatewayServer(("127.0.0.1", 0), self.gw)
        serve(self.gsrv)
        self.port = self.gsrv.server_address[1]

    def tearDown(self) -> None:
        self.gsrv.shutdown()
        self.gsrv.server_close()
        self.gw.close()
        for s in self.engines:
            s.shutdown()
            s.server_close()

    def round(self, chats: List[Chat], k: int) -> None:
        errors: List[BaseException] = []

        def run(c: Chat) -> None:
            try:
                c.turn(self.port, k)
            except BaseException as e:  # reported below
                errors.append(e)

        ts = [threading.Thread(target=run, args=(c,)) for c in chats]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]

    def test_sticky_spread_and_failover(self) -> None:
        chats = [Chat(i) for i in range(CONVERSATIONS)]
        for k in range(TURNS):
            self.round(chats, k)
        for c in chats:
            self.assertEqual(len(set(c.backends)), 1,
                             f"chat {c.i} moved: {c.backends}")
            # from the second turn on, the engine had the history cached
            self.assertTrue(all(x > 0 for x in c.cached[1:]),
                            f"chat {c.i}: cached blocks {c.cached}")
        used = {c.backends[0] for c in chats}
        self.assertGreaterEqual(len(used), 2, f"all chats on {used}")

        # kill the busiest backend
        victim = max(used, key=lambda n: sum(c.backends[0] == n
                                             for c in chats))
        srv = next(s for s in self.engines if s.engine.name == victim)
        port = srv.server_address[1]
        srv.shutdown()
        srv.server_close()
        self.round(chats, TURNS)
        for c in chats:
            self.assertNotEqual(c.backends[-1], victim)
        st = get(self.port, "/status")
        down = [b for b in st["backends"] if not b["up"]]
        self.assertEqual([b["name"] for b in down], [victim])
        self.assertEqual(st["inflight"], 0)
        moved = [c for c in chats if c.backends[0] == victim]
        self.assertTrue(moved)
        # the moved chats stick to their new backend
        self.round(chats, TURNS + 1)
        for c in moved:
            self.assertEqual(c.backends[-1], c.backends[-2])

        # the backend comes back on its port: undrained by the health loop
        back = EngineServer(("127.0.0.1", port), Engine(victim))
        serve(back)
        self.engines.append(back)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(b["up"] for b in get(self.port, "/status")["backends"]):
                break
            time.sleep(0.05)
        self.assertTrue(all(b["up"] for b in
                            get(self.port, "/status")["backends"]))

    def test_bad_gauge_period(self) -> None:
        """A negative or NaN --gauge-ms is a usage error (exit 2)."""
        here = os.path.dirname(os.path.abspath(__file__))
        for v in ("-1", "nan"):
            p = subprocess.run(
                [sys.executable, os.path.join(here, "gateway.py"),
                 "--backend", "e1=127.0.0.1:1", "--gauge-ms", v],
                capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--gauge-ms", p.stderr)

    def test_bad_requests(self) -> None:
        status, _, _ = post(self.port, "/v1/completions", {"prompt": 5})
        self.assertEqual(status, 400)
        status, _, _ = post(self.port, "/v1/nothing", {})
        self.assertEqual(status, 404)
        status, hdr, data = post(self.port, "/v1/completions",
                                 {"prompt": "hello " * 40, "max_tokens": 3})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(data)["usage"]["completion_tokens"], 3)
        self.assertIn(hdr["x-libroute-backend"], ("e1", "e2", "e3"))
        self.assertEqual(hdr["x-libroute-decider"], "prefix-cache")
        st = get(self.port, "/status")
        self.assertEqual(st["inflight"], 0)
        self.assertEqual(sum(st["reasons"].values()), st["routes"])
        self.assertIn(hdr["x-libroute-reason"], st["reasons"])


if __name__ == "__main__":
    unittest.main()
