"""End to end: models and LoRA adapters, fake vLLM engines behind the
gateway on loopback.

- a request naming a base model goes only to the backends that serve it;
- a request naming an adapter goes to the backends with adapter slots,
  and, once the adapter is resident on one (aibrix-lora), to that one:
  loaded once, not on every engine;
- the adapters an engine reports in vllm:lora_requests_info reach the
  router: a request for an adapter running there goes there;
- an unknown model gets 404 (the gateway's own where no backend has
  adapter slots, else the engine's, as vLLM answers an unknown adapter);
- /metrics counts adapter routes and loads;
- in precise mode an engine's KV events of an adapter's blocks (vLLM's
  lora_name and extra keys) reach the router keyed as the adapter's
  requests: the same prompt under that adapter finds them, under another
  adapter it does not.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import unittest
from typing import Any, Dict, List

import libroute
import fleet
from fake_engine import Engine, EngineServer, KvEngine
from gateway import Gateway, GatewayServer, lora_info, parse_backend
from test_gateway import get, post, serve


def complete(port: int, model: str, prompt: str,
             user: str = "") -> Dict[str, Any]:
    status, hdr, data = post(port, "/v1/completions",
                             {"model": model, "prompt": prompt,
                              "max_tokens": 2, "user": user})
    if status != 200:
        raise AssertionError(f"{model}: HTTP {status}: {data[:300]!r}")
    out = json.loads(data)
    assert out["backend"] == hdr["x-libroute-backend"]
    return out


class Parsing(unittest.TestCase):

    def test_parse_backend(self) -> None:
        self.assertEqual(parse_backend("e1=127.0.0.1:8101"),
                         ("e1", "127.0.0.1", 8101, (), 0))
        self.assertEqual(parse_backend("e1=h:1", "llama,alias", 2),
                         ("e1", "h", 1, ("llama", "alias"), 2))
        self.assertEqual(
            parse_backend("e1=h:1,models=qwen+qwen-7b,max_loras=4", "x", 1),
            ("e1", "h", 1, ("qwen", "qwen-7b"), 4))
        for bad in ("e1", "e1=h:1,loras=2", "e1=h:1,max_loras=x",
                    "e1=h:1,max_loras=-1"):
            with self.subTest(spec=bad):
                with self.assertRaises(ValueError):
                    parse_backend(bad)

    def test_lora_info(self) -> None:
        text = (
            "vllm:num_requests_running 1\n"
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters='
            '"sql,chat",waiting_lora_adapters=""} 1.7e9\n'
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters='
            '"code",waiting_lora_adapters="sql"} 1.8e9\n'
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters='
            '"old",waiting_lora_adapters=""} 1.6e9\n')
        info = lora_info(text)
        self.assertEqual((info.running, info.waiting, info.max_lora),
                         (["code"], ["sql"], 4))
        self.assertIsNone(lora_info("vllm:num_requests_running 1\n"))


class LoraEndToEnd(unittest.TestCase):

    def start(self, engines: List[Engine], backends: List[tuple],
              policy: str = "aibrix-lora", learn: bool = True) -> None:
        self.engines = []
        for e in engines:
            srv = EngineServer(("127.0.0.1", 0), e)
            serve(srv)
            self.engines.append(srv)
        specs = [(name, "127.0.0.1", s.server_address[1], *rest)
                 for (name, *rest), s in zip(backends, self.engines)]
        self.gw = Gateway(specs, policy=policy, scrape_s=0.05, learn=learn)
        self.sub = None
        self.gsrv = GatewayServer(("127.0.0.1", 0), self.gw)
        serve(self.gsrv)
        self.port = self.gsrv.server_address[1]

    def tearDown(self) -> None:
        if self.sub is not None:
            self.sub.close()
        for s in self.engines:
            if isinstance(s.engine, KvEngine):
                s.engine.kv.close()
        self.gsrv.shutdown()
        self.gsrv.server_close()
        self.gw.close()
        for s in self.engines:
            s.shutdown()
            s.server_close()

    def fleet(self) -> None:
        """e1, e2: llama with 2 adapter slots; e3: qwen, no adapters."""
        def llama(n: str) -> Engine:
            return Engine(n, models=("llama",), max_loras=2,
                          loras=("sql", "chat", "code"))
        self.start([llama("e1"), llama("e2"),
                    Engine("e3", models=("qwen", "qwen-7b"))],
                   [("e1", ("llama",), 2), ("e2", ("llama",), 2),
                    ("e3", ("qwen", "qwen-7b"), 0)])

    def test_base_models_and_adapters(self) -> None:
        self.fleet()
        for i in range(6):
            out = complete(self.port, "llama", f"llama prompt {i} " * 8)
            self.assertIn(out["backend"], ("e1", "e2"))
            self.assertIsNone(out["usage"]["lora"])
        for i, m in enumerate(("qwen", "qwen-7b")):
            out = complete(self.port, m, f"qwen prompt {i} " * 8)
            self.assertEqual(out["backend"], "e3")
        # An adapter: loaded on one llama engine, then kept there.
        first = complete(self.port, "sql", "select " * 40)
        home = first["backend"]
        self.assertIn(home, ("e1", "e2"))
        self.assertTrue(first["usage"]["lora_loaded"])
        for i in range(8):
            out = complete(self.port, "sql", f"select {i} " * 20)
            self.assertEqual(out["backend"], home, f"request {i}")
            self.assertEqual(out["usage"]["lora"], "sql")
            self.assertFalse(out["usage"]["lora_loaded"])
        # Another adapter, resident nowhere: the engine holding fewer.
        other = complete(self.port, "chat", "hello " * 40)["backend"]
        self.assertNotEqual(other, home)
        for i in range(4):
            self.assertEqual(
                complete(self.port, "chat", f"hi {i} " * 20)["backend"],
                other)
        loads = {s.engine.name: s.engine.lora_loads for s in self.engines}
        self.assertEqual(loads, {home: 1, other: 1, "e3": 0})
        st = self.gw.router.stats()
        self.assertEqual((st.adapter_routes, st.adapter_loads), (14, 2))
        status = get(self.port, "/status")
        self.assertEqual(status["adapter_routes"], 14)
        by = {b["name"]: b for b in status["backends"]}
        self.assertEqual(by["e3"]["models"], ["qwen", "qwen-7b"])
        self.assertEqual(by[home]["adapters"], 1)

        # /metrics: the router's adapter counters.
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics")
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        if r.status == 200:  # 503 without prometheus_client
            self.assertIn("libroute_adapter_routes_total 14.0", text)
            self.assertIn("libroute_adapter_loads_total 2.0", text)

    def test_unknown_model(self) -> None:
        self.fleet()
        # An adapter the engines do not know: the engine's 404, relayed.
        status, _, data = post(self.port, "/v1/completions",
                               {"model": "gpt-9", "prompt": "x" * 64})
        self.assertEqual(status, 404, data)
        self.assertIn("does not exist", json.loads(data)["message"])
        self.assertEqual(self.gw.router.stats().inflight, 0)
        # A name too long for the router: 400, nothing routed.
        status, _, _ = post(self.port, "/v1/completions",
                            {"model": "m" * 300, "prompt": "x"})
        self.assertEqual(status, 400)

    def test_unknown_model_without_adapters(self) -> None:
        self.start([Engine("e1", models=("llama",)),
                    Engine("e2", models=("qwen",))],
                   [("e1", ("llama",)), ("e2", ("qwen",))],
                   policy="least-request")
        self.assertEqual(complete(self.port, "qwen", "q " * 30)["backend"],
                         "e2")
        status, _, data = post(self.port, "/v1/completions",
                               {"model": "gpt-9", "prompt": "x" * 64})
        self.assertEqual(status, 404, data)
        err = json.loads(data)["error"]
        self.assertEqual((err["type"], err["code"]), ("NotFoundError", 404))
        self.assertIn("gpt-9", err["message"])
        self.assertEqual(self.gw.router.stats().routes, 1)

    def test_scraped_adapters_reach_the_router(self) -> None:
        self.fleet()
        e2 = self.engines[1]
        e2_id = self.gw.router.find_instance("e2")
        # A request for "code" held on e2, sent there past the gateway:
        # e2 reports the adapter waiting, then running.
        e2.engine.set_hold(True)
        done = threading.Event()

        def direct() -> None:
            post(e2.server_address[1], "/v1/completions",
                 {"model": "code", "prompt": "def f(): " * 10,
                  "max_tokens": 1})
            done.set()

        threading.Thread(target=direct, daemon=True).start()
        want = libroute.name_hash("code")
        deadline = time.monotonic() + 10
        while want not in self.gw.router.adapters(e2_id):
            self.assertLess(time.monotonic(), deadline,
                            "the scrape never reported the adapter")
            time.sleep(0.02)
        e2.engine.set_hold(False)
        self.assertTrue(done.wait(10))
        out = complete(self.port, "code", "def g(): " * 20)
        self.assertEqual(out["backend"], "e2")
        self.assertFalse(out["usage"]["lora_loaded"])

    def test_adapter_kv_events(self) -> None:
        try:
            import msgpack  # noqa: F401  (Debian python3-msgpack)
            import zmq  # noqa: F401  (Debian python3-zmq)
        except ImportError as e:
            self.skipTest(f"needs {e.name} (tools/deps.sh installs it)")

        def kv(n: str) -> KvEngine:
            return KvEngine(n, models=("llama",), max_loras=2,
                            loras=("sql", "chat"), cache_blocks=100000)
        # precise mode: the router learns only from the engines' events
        self.start([kv("k1"), kv("k2")],
                   [("k1", ("llama",), 2), ("k2", ("llama",), 2)],
                   policy="prefix-cache", learn=False)
        eps = {b.id: (self.engines[i].engine.kv.pub_endpoint,
                      self.engines[i].engine.kv.replay_endpoint)
               for i, b in enumerate(sorted(self.gw.backends.values(),
                                            key=lambda b: b.name))}
        self.sub = fleet.KvEventSubscriber(self.gw.router, eps)
        prompt = "select count(*) from orders where " * 12

        def send(model: str) -> tuple:
            status, hdr, data = post(self.port, "/v1/completions",
                                     {"model": model, "prompt": prompt,
                                      "max_tokens": 1})
            self.assertEqual(status, 200, data[:300])
            return (hdr["x-libroute-backend"],
                    int(hdr["x-libroute-cached-tokens"]))

        home, cached = send("sql")
        self.assertEqual(cached, 0)
        deadline = time.monotonic() + 10
        while True:  # until the store's batch is applied
            backend, cached = send("sql")
            if cached > 0:
                break
            self.assertLess(time.monotonic(), deadline,
                            "the adapter's blocks never reached the router")
            time.sleep(0.05)
        self.assertEqual(backend, home)
        # the same tokens under another adapter are another cache
        _, cached = send("chat")
        self.assertEqual(cached, 0)


if __name__ == "__main__":
    unittest.main()
