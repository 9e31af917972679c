"""The gateway in front of llama.cpp's API (fake_engine.LlamaEngine; the
real llama-server in tools/real/test_real.py):

- token-id prompts on the native /completion, streamed: conversations
  stick to their engine, whose slots reuse their history, and the cached
  tokens the router predicted match what the engines report
  (`timings.cache_n`);
- metrics by llama.cpp's names, none at all (501: /slots instead), and a
  /metrics that answers only between prompts: no healthy backend is ever
  drained;
- an engine's error, as an HTTP status or inside a stream, reaches the
  router as a failure, never as a first token and a completion;
- --tokenize: chat messages and text prompts are tokenized by the
  engine, so the router's predicted cache hits are in the engine's
  tokens;
- a dead engine is drained and its request retried.
"""

from __future__ import annotations

import json
import random
import threading
import time
import unittest
from typing import Any, Dict, List, Tuple

from fake_engine import EngineServer, LlamaEngine
from gateway import Gateway, GatewayServer
from test_gateway import get, post, serve


class Recorder:
    """The router, with every lifecycle call a request makes recorded."""

    def __init__(self, router: Any) -> None:
        self._r = router
        self.calls: Dict[int, List[str]] = {}
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)

    def _rec(self, rid: int, what: str) -> None:
        with self.lock:
            self.calls.setdefault(rid, []).append(what)

    def route(self, *a: Any, **kw: Any) -> Any:
        self._rec(kw["request_id"], "route")
        return self._r.route(*a, **kw)

    def first_token(self, rid: int, **kw: Any) -> Any:
        self._rec(rid, "first")
        return self._r.first_token(rid, **kw)

    def complete(self, rid: int, n: int, **kw: Any) -> Any:
        self._rec(rid, "complete")
        return self._r.complete(rid, n, **kw)

    def fail(self, rid: int, **kw: Any) -> Any:
        self._rec(rid, "fail")
        return self._r.fail(rid, **kw)

    def last(self) -> List[str]:
        with self.lock:
            return self.calls[max(self.calls)]


def sse(data: bytes) -> List[Dict[str, Any]]:
    return [json.loads(ln[6:]) for ln in data.split(b"\n")
            if ln.startswith(b"data: ") and ln != b"data: [DONE]"]


class LlamaCpp(unittest.TestCase):
    def start(self, engines: List[LlamaEngine], **kw: Any) -> None:
        self.engines = []
        for e in engines:
            srv = EngineServer(("127.0.0.1", 0), e)
            serve(srv)
            self.engines.append(srv)
        backends = [(s.engine.name, "127.0.0.1", s.server_address[1])
                    for s in self.engines]
        self.gw = Gateway(backends, **kw)
        self.rec = Recorder(self.gw.router)
        self.gw.router = self.rec
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

    def completion(self, prompt: List[int], n: int = 4
                   ) -> Tuple[str, int, List[int], Dict[str, Any]]:
        """(backend, predicted cached tokens, output tokens, timings) of
        one streamed native completion."""
        status, hdr, data = post(self.port, "/completion", {
            "prompt": prompt, "n_predict": n, "stream": True,
            "return_tokens": True})
        self.assertEqual(status, 200, data[:200])
        events = sse(data)
        self.assertTrue(events[-1]["stop"])
        out = [t for ev in events[:-1] for t in ev["tokens"]]
        self.assertEqual(len(out), n)
        return (hdr["x-libroute-backend"],
                int(hdr["x-libroute-cached-tokens"]), out,
                events[-1]["timings"])

    def test_token_ids_metrics_kinds_and_no_drain(self) -> None:
        # e1 has llama.cpp's metrics, e2 none (501), e3's /metrics answers
        # only between prompts; prompts are slow enough to make it late
        self.start([LlamaEngine("e1", slots=2, per_token_s=0.002),
                    LlamaEngine("e2", slots=2, per_token_s=0.002,
                                metrics=False),
                    LlamaEngine("e3", slots=2, per_token_s=0.002,
                                metrics_wait=True)],
                    policy="prefix-cache", probe_timeout_s=0.05)
        rng = random.Random(7)
        systems = [[rng.randrange(3, 32000) for _ in range(160)]
                   for _ in range(2)]
        convs = [list(systems[i % 2]) for i in range(6)]
        drained: List[str] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.02):
                for b in get(self.port, "/status")["backends"]:
                    if not b["up"]:
                        drained.append(b["name"])

        w = threading.Thread(target=watch)
        w.start()
        seen: Dict[int, List[str]] = {}
        cached: Dict[int, List[Tuple[int, int]]] = {}
        errors: List[BaseException] = []

        def talk(i: int) -> None:
            try:
                for _ in range(4):
                    convs[i] += [rng.randrange(3, 32000) for _ in range(40)]
                    name, pred, out, tim = self.completion(convs[i])
                    convs[i] += out
                    seen.setdefault(i, []).append(name)
                    cached.setdefault(i, []).append((pred, tim["cache_n"]))
            except BaseException as e:  # reported below
                errors.append(e)

        ts = [threading.Thread(target=talk, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        time.sleep(0.3)  # a few more scrapes
        stop.set()
        w.join()
        if errors:
            raise errors[0]
        self.assertEqual(drained, [], "a healthy backend was drained")
        for i, names in seen.items():
            self.assertEqual(len(set(names)), 1, f"conversation {i} moved")
        # from the second turn, the router expects the history; the
        # engine delivers at least the shared system prompt (another
        # conversation with the same one may have taken the slot that
        # held the rest: llama.cpp's slots keep one prompt each)
        for i, rows in cached.items():
            for pred, obs in rows[1:]:
                self.assertGreater(pred, 160 - 16, f"conversation {i}: {rows}")
                self.assertGreaterEqual(obs, 160, f"conversation {i}: {rows}")
        st = get(self.port, "/status")
        kinds = {b["name"]: b["metrics"] for b in st["backends"]}
        self.assertEqual(kinds, {"e1": "llamacpp", "e2": "slots",
                                 "e3": "llamacpp"})
        rep = [b["cached_tokens"] for b in st["backends"]]
        self.assertEqual(sum(r["requests"] for r in rep), 24)
        self.assertGreater(sum(r["observed"] for r in rep), 0)
        self.assertEqual(st["inflight"], 0)
        for rid, calls in self.rec.calls.items():
            self.assertEqual(calls, ["route", "first", "complete"], rid)

    def test_engine_errors_are_failures(self) -> None:
        self.start([LlamaEngine("e1", slots=1)], policy="round-robin")
        port = self.engines[0].server_address[1]
        prompt = list(range(100, 150))

        # before the first token: HTTP 500, as llama.cpp answers it
        for stream in (False, True):
            post(port, "/admin/fail_next", {"after": 0})
            status, _, _ = post(self.port, "/completion", {
                "prompt": prompt, "n_predict": 3, "stream": stream})
            self.assertEqual(status, 500)
            self.assertEqual(self.rec.last(), ["route", "fail"])
        # inside a stream, after two tokens: the client sees the error
        # event, the router a failure
        for path, body in (("/completion", {"prompt": prompt}),
                           ("/v1/completions", {"prompt": "a b c"}),
                           ("/v1/chat/completions",
                            {"messages": [{"role": "user",
                                           "content": "hi"}]})):
            post(port, "/admin/fail_next", {"after": 2})
            status, _, data = post(self.port, path, dict(
                body, stream=True, n_predict=5, max_tokens=5))
            self.assertEqual(status, 200)
            self.assertIn("error", sse(data)[-1])
            self.assertEqual(self.rec.last(), ["route", "first", "fail"],
                             path)
        # and a good one completes
        status, _, data = post(self.port, "/v1/completions", {
            "prompt": prompt, "max_tokens": 3})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(data)["usage"]["completion_tokens"], 3)
        self.assertEqual(self.rec.last(), ["route", "first", "complete"])
        st = get(self.port, "/status")
        self.assertEqual((st["inflight"], st["failures"]), (0, 5))
        self.assertTrue(all(b["up"] for b in
                            get(self.port, "/status")["backends"]))

    def test_engine_tokenizer(self) -> None:
        self.start([LlamaEngine("e1"), LlamaEngine("e2")],
                   policy="prefix-cache", engine_tokenizer=True)
        msgs = [{"role": "system", "content": "You are brief. " * 40}]
        rows = []
        for k in range(3):
            msgs.append({"role": "user",
                         "content": f"question {k}: " + "why? " * 30})
            status, hdr, data = post(self.port, "/v1/chat/completions", {
                "messages": msgs, "max_tokens": 4})
            self.assertEqual(status, 200, data[:200])
            ans = json.loads(data)
            rows.append((hdr["x-libroute-backend"],
                         int(hdr["x-libroute-cached-tokens"]),
                         ans["timings"]["cache_n"],
                         ans["usage"]["prompt_tokens"]))
            msgs.append(ans["choices"][0]["message"])
        self.assertEqual(len({r[0] for r in rows}), 1, rows)
        for _, pred, obs, n in rows[1:]:
            # the router's tokens are the engine's: its block-aligned
            # prediction is within a block of what the slot reused
            self.assertGreater(pred, 0, rows)
            self.assertLessEqual(pred, obs, rows)
            self.assertLess(obs - pred, 16 + 8, rows)
        # a text completion too, and its engine-token prompt length
        status, hdr, data = post(self.port, "/v1/completions", {
            "prompt": "one two three four", "max_tokens": 2})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(data)["usage"]["prompt_tokens"], 5)
        # bad token ids are the client's error
        status, _, _ = post(self.port, "/completion", {"prompt": [1, -2]})
        self.assertEqual(status, 400)

    def test_dead_engine_drained_and_retried(self) -> None:
        self.start([LlamaEngine("e1"), LlamaEngine("e2")],
                   policy="prefix-cache-and-load")
        prompt = list(range(1000, 1200))
        name, _, _, _ = self.completion(prompt)
        srv = next(s for s in self.engines if s.engine.name == name)
        srv.shutdown()
        srv.server_close()
        other, _, _, _ = self.completion(prompt + [5, 6, 7])
        self.assertNotEqual(other, name)
        st = get(self.port, "/status")
        self.assertEqual([b["name"] for b in st["backends"] if not b["up"]],
                         [name])
        self.assertEqual(st["inflight"], 0)


if __name__ == "__main__":
    unittest.main()
