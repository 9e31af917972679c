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
- in a fleet of two base models that both serve adapters, an adapter's
  base model comes from the engines' GET /v1/models (adapters loaded at
  runtime too) or from --adapter, and its requests reach only the
  backends of that base; an adapter nobody lists keeps the rule of an
  adapter of no known base, as does one listed under two bases;
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
from typing import Any, Dict, List, Optional

import libroute
import fleet
from fake_engine import Engine, EngineServer, KvEngine
from gateway import (Gateway, GatewayServer, adapter_parents, lora_info,
                     parse_adapters, parse_backend)
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
        # the last four: role and placement (test_pd.py)
        self.assertEqual(parse_backend("e1=127.0.0.1:8101")[:5],
                         ("e1", "127.0.0.1", 8101, (), 0))
        self.assertEqual(parse_backend("e1=h:1", "llama,alias", 2)[:5],
                         ("e1", "h", 1, ("llama", "alias"), 2))
        self.assertEqual(
            parse_backend("e1=h:1,models=qwen+qwen-7b,max_loras=4", "x",
                          1)[:5],
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

    def test_adapter_parents(self) -> None:
        # vLLM's GET /v1/models: base models (parent null), then adapters
        listing = json.dumps({"object": "list", "data": [
            {"id": "llama", "object": "model", "root": "/m/llama",
             "parent": None},
            {"id": "sql", "object": "model", "root": "/a/sql",
             "parent": "llama"},
            {"id": "alien", "root": "/a/alien", "parent": "mistral"},
            {"id": "llama", "parent": "llama"},
            {"id": "", "parent": "llama"},
            {"id": 7, "parent": "llama"},
            {"id": "chat", "parent": "llama", "root": "/a/chat"},
            "junk"]})
        self.assertEqual(adapter_parents(listing, ("llama",)),
                         {"sql": "llama", "chat": "llama"})
        self.assertEqual(adapter_parents(listing.encode(), ("qwen",)), {})
        for bad in ("", "[]", '{"data": 1}', "{"):
            self.assertIsNone(adapter_parents(bad, ("llama",)))
        self.assertEqual(parse_adapters(["sql=llama", "x=qwen"]),
                         {"sql": "llama", "x": "qwen"})
        for bad in ("sql", "=llama", "sql="):
            with self.assertRaises(ValueError):
                parse_adapters([bad])


class LoraEndToEnd(unittest.TestCase):

    def setUp(self) -> None:
        self.engines: List[EngineServer] = []
        self.sub = None
        self.gsrv = None

    def start(self, engines: List[Engine], backends: List[tuple],
              policy: str = "aibrix-lora", learn: bool = True,
              adapters: Optional[Dict[str, str]] = None) -> None:
        for e in engines:
            srv = EngineServer(("127.0.0.1", 0), e)
            serve(srv)
            self.engines.append(srv)
        specs = [(name, "127.0.0.1", s.server_address[1], *rest)
                 for (name, *rest), s in zip(backends, self.engines)]
        self.gw = Gateway(specs, policy=policy, scrape_s=0.05, learn=learn,
                          adapters=adapters)
        self.gsrv = GatewayServer(("127.0.0.1", 0), self.gw)
        serve(self.gsrv)
        self.port = self.gsrv.server_address[1]

    def tearDown(self) -> None:
        if self.sub is not None:
            self.sub.close()
        for s in self.engines:
            if isinstance(s.engine, KvEngine):
                s.engine.kv.close()
        if self.gsrv is not None:
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

    def two_bases(self, hide: bool = False, policy: str = "round-robin",
                  adapters: Optional[Dict[str, str]] = None) -> None:
        """e0, e1 serve llama-3-8b and e2, e3 qwen-7b, each base with its
        own adapters and every engine with adapter slots: no model is
        common to the backends with slots. hide: the engines' /v1/models
        list no adapters."""
        def engine(n: str, base: str, loras: tuple) -> Engine:
            return Engine(n, models=(base,), max_loras=2, loras=loras,
                          hide_adapters=hide)
        llama, qwen = ("sql", "chat"), ("summarize", "translate")
        self.start([engine("e0", "llama-3-8b", llama),
                    engine("e1", "llama-3-8b", llama),
                    engine("e2", "qwen-7b", qwen),
                    engine("e3", "qwen-7b", qwen)],
                   [("e0", ("llama-3-8b",), 2), ("e1", ("llama-3-8b",), 2),
                    ("e2", ("qwen-7b",), 2), ("e3", ("qwen-7b",), 2)],
                   policy=policy, adapters=adapters)

    def wait_bases(self, want: Dict[str, str]) -> None:
        """Until the scrapes have read `want` from the engines."""
        deadline = time.monotonic() + 10
        while True:
            got = get(self.port, "/status")["adapter_bases"]
            if all(got.get(k) == v for k, v in want.items()):
                return
            self.assertLess(time.monotonic(), deadline,
                            f"adapter bases {got}, want {want}")
            time.sleep(0.02)

    def check_homes(self, n: int = 6) -> None:
        """n requests of each adapter, each to its base's backends only,
        both of them used (round-robin)."""
        homes = {"sql": {"e0", "e1"}, "chat": {"e0", "e1"},
                 "summarize": {"e2", "e3"}, "translate": {"e2", "e3"}}
        for adapter, home in homes.items():
            seen = set()
            for i in range(n):
                out = complete(self.port, adapter, f"{adapter} {i} " * 20)
                self.assertIn(out["backend"], home, f"{adapter} {i}")
                self.assertEqual(out["usage"]["lora"], adapter)
                seen.add(out["backend"])
            self.assertEqual(seen, home, adapter)

    def test_two_bases_listed(self) -> None:
        self.two_bases()
        self.wait_bases({"sql": "llama-3-8b", "chat": "llama-3-8b",
                         "summarize": "qwen-7b", "translate": "qwen-7b"})
        self.assertEqual(self.gw.model_of({"model": "chat"}),
                         ("llama-3-8b", "chat"))
        self.check_homes()
        for m, home in (("llama-3-8b", {"e0", "e1"}),
                        ("qwen-7b", {"e2", "e3"})):
            self.assertIn(complete(self.port, m, "base " * 20)["backend"],
                          home)
        # An adapter nobody lists: no known base, and no model the
        # backends with slots share, so any backend (the rule of an
        # adapter of no known base).
        self.assertEqual(self.gw.model_of({"model": "mystery"}),
                         (None, "mystery"))
        # One loaded at runtime (vLLM's /v1/load_lora_adapter) on the
        # qwen engines: known from their next scrape, and routed there.
        for s in self.engines[2:]:
            status, _, data = post(s.server_address[1],
                                   "/v1/load_lora_adapter",
                                   {"lora_name": "poet",
                                    "lora_path": "/adapters/poet"})
            self.assertEqual(status, 200, data)
        self.wait_bases({"poet": "qwen-7b"})
        for i in range(4):
            out = complete(self.port, "poet", f"verse {i} " * 20)
            self.assertIn(out["backend"], ("e2", "e3"))
        # Unloaded everywhere: forgotten at the next scrape.
        for s in self.engines[2:]:
            status, _, _ = post(s.server_address[1],
                                "/v1/unload_lora_adapter",
                                {"lora_name": "poet"})
            self.assertEqual(status, 200)
        deadline = time.monotonic() + 10
        while "poet" in get(self.port, "/status")["adapter_bases"]:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        self.assertEqual(self.gw.model_of({"model": "poet"}), (None, "poet"))

    def test_two_bases_flag(self) -> None:
        bases = {"sql": "llama-3-8b", "chat": "llama-3-8b",
                 "summarize": "qwen-7b", "translate": "qwen-7b"}
        self.two_bases(hide=True, adapters=bases)
        # the engines list no adapters: the flags alone, from the start
        models = get(self.engines[0].server_address[1], "/v1/models")
        self.assertEqual([m["id"] for m in models["data"]], ["llama-3-8b"])
        self.assertEqual(get(self.port, "/status")["adapter_bases"], bases)
        self.check_homes()
        self.assertEqual(self.gw.model_of({"model": "mystery"}),
                         (None, "mystery"))
        with self.assertRaises(ValueError):
            Gateway([("x", "127.0.0.1", 1, ("llama",))],
                    adapters={"sql": "qwen"})
        with self.assertRaises(ValueError):
            Gateway([("x", "127.0.0.1", 1, ("llama",))],
                    adapters={"llama": "llama"})

    def test_two_bases_conflict(self) -> None:
        # "dup" listed under both bases is ambiguous: no known base, until
        # a flag names one.
        self.two_bases()
        for s in (self.engines[0], self.engines[2]):
            post(s.server_address[1], "/v1/load_lora_adapter",
                 {"lora_name": "dup", "lora_path": "/adapters/dup"})
        deadline = time.monotonic() + 10
        while not all("dup" in (b.parents or {})
                      for b in self.gw.backends.values()
                      if b.name in ("e0", "e2")):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        self.assertEqual(self.gw.model_of({"model": "dup"}), (None, "dup"))
        self.assertNotIn("dup", get(self.port, "/status")["adapter_bases"])
        self.assertEqual(self.gw.model_of({"model": "sql"}),
                         ("llama-3-8b", "sql"))

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
