"""End to end: disaggregated prefill and decode, fake vLLM engines
behind the gateway on loopback (one prefill engine, two decode engines,
policy llm-d-pd).

- a long prompt is split: the prefill leg reaches the prefill engine with
  `kv_transfer_params.do_remote_decode`, unstreamed, one token, without
  stream_options and min_tokens; the decode engine gets the client's
  request with the params the prefill engine answered, verbatim, reads
  the blocks from it (computes none) and streams the answer the client
  gets; while the decode leg waits for its first token the router counts
  it at the decode instance only (prefill_done was called); the
  counters agree;
- the next short turn stays whole on that decode instance, whose cache
  now holds the transferred prompt;
- an aggregated fleet under the same policy never splits: the engines
  see the client's requests, no kv_transfer_params, no X-Request-Id;
- a request let out of the router's queue while the decode instances are
  saturated (the idle prefill instance aside) goes through both legs, as
  the router split it (the dispatched entry's prefill instance);
- a prefill engine that answers no kv_transfer_params (no KV connector)
  gets the decode leg as the client's request, prefilled there;
- a prefill leg that fails fails the request in the router and the
  client gets the engine's error; the decode engines never see it; a
  prefill engine that is gone refuses the leg, is drained, and the
  request is routed again, whole on a decode instance;
- the backend option's role and placement, and the two legs' bodies.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import unittest
from typing import Any, Dict, List, Optional

import libroute
from fake_engine import Engine, EngineServer, LlamaEngine
from gateway import (Gateway, GatewayServer, decode_body, now_ns,
                     parse_backend, prefill_body, role_name)
from test_gateway import get, post, serve

# 64 blocks of 64 bytes: 1024 of the router's tokens.
LONG = "".join(f"line {i:03d} of a long document, padded to 64 bytes: "
               f"{'x' * 14}\n" for i in range(64))
assert len(LONG) == 64 * 64, len(LONG)

PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False,
                  "remote_engine_id": None, "remote_block_ids": None,
                  "remote_host": None, "remote_port": None}


def events(data: bytes) -> List[Any]:
    out = []
    for ln in data.split(b"\n"):
        if ln.startswith(b"data: "):
            out.append("[DONE]" if ln == b"data: [DONE]"
                       else json.loads(ln[6:]))
    return out


def admin(port: int, path: str, body: Dict[str, Any]) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", path, json.dumps(body).encode(),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    assert r.status == 200, (path, r.status)


class Parsing(unittest.TestCase):

    def test_backend_role_and_placement(self) -> None:
        self.assertEqual(parse_backend("e1=h:1"),
                         ("e1", "h", 1, (), 0, "both", 0, 0, 0))
        self.assertEqual(
            parse_backend("p=h:2,role=prefill,node=3,rack=2,region=1"),
            ("p", "h", 2, (), 0, "prefill", 3, 2, 1))
        self.assertEqual(
            parse_backend("d=h:3,models=llama,role=DECODE,rack=7", "", 0,
                          "prefill"),
            ("d", "h", 3, ("llama",), 0, "decode", 0, 7, 0))
        # --role is the default the option overrides
        self.assertEqual(parse_backend("d=h:3", "", 0, "decode")[5],
                         "decode")
        for bad in ("e=h:1,role=neither", "e=h:1,role", "e=h:1,node=x",
                    "e=h:1,rack=-1", f"e=h:1,region={2**32}",
                    "e=h:1,zone=1"):
            with self.subTest(spec=bad):
                with self.assertRaises(ValueError):
                    parse_backend(bad)
        self.assertEqual(role_name(libroute.Role.PREFILL), "prefill")
        self.assertEqual(role_name(2), "decode")
        for bad in (3, "x", None, True):
            with self.assertRaises(ValueError):
                role_name(bad)

    def test_leg_bodies(self) -> None:
        body = {"model": "m", "prompt": "hi", "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": 9,
                "max_completion_tokens": 9, "min_tokens": 2,
                "min_completion_tokens": 2, "temperature": 0.5}
        p = prefill_body(body)
        self.assertEqual(p, {"model": "m", "prompt": "hi", "stream": False,
                             "max_tokens": 1, "max_completion_tokens": 1,
                             "temperature": 0.5,
                             "kv_transfer_params": PREFILL_PARAMS})
        self.assertNotIn("max_completion_tokens",
                         prefill_body({"prompt": "hi"}))
        self.assertEqual(body["max_tokens"], 9)  # the client's: untouched
        params = {"do_remote_prefill": True, "remote_block_ids": [1, 2],
                  "extra": {"any": "thing"}}
        d = decode_body(body, params)
        self.assertEqual(d, {**body, "kv_transfer_params": params})
        self.assertIs(d["kv_transfer_params"], params)
        self.assertEqual(decode_body(body, None), body)


class PdEndToEnd(unittest.TestCase):

    def setUp(self) -> None:
        self.servers: List[EngineServer] = []
        self.gsrv: Optional[GatewayServer] = None

    def start(self, specs: List[tuple], policy: str = "llm-d-pd",
              scrape_s: float = 0.05,
              engines: Optional[Dict[str, Any]] = None,
              **kw: Any) -> None:
        """specs: (name, role, node, rack, region) per engine; engines:
        the engine of a name, where not an Engine."""
        for name, *_ in specs:
            srv = EngineServer(("127.0.0.1", 0),
                               (engines or {}).get(name) or Engine(name))
            serve(srv)
            self.servers.append(srv)
        backends = [(name, "127.0.0.1", s.server_address[1], (), 0, role,
                     *place)
                    for (name, role, *place), s in zip(specs, self.servers)]
        self.gw = Gateway(backends, policy=policy, scrape_s=scrape_s, **kw)
        self.gsrv = GatewayServer(("127.0.0.1", 0), self.gw)
        serve(self.gsrv)
        self.port = self.gsrv.server_address[1]
        self.ids = {b.name: b.id for b in self.gw.backends.values()}

    def tearDown(self) -> None:
        if self.gsrv is not None:
            self.gsrv.shutdown()
            self.gsrv.server_close()
            self.gw.close()
        for s in self.servers:
            s.shutdown()
            s.server_close()

    def engine(self, name: str) -> Any:
        return next(s.engine for s in self.servers if s.engine.name == name)

    def port_of(self, name: str) -> int:
        return next(s.server_address[1] for s in self.servers
                    if s.engine.name == name)

    def pd_fleet(self, scrape_s: float = 0.05, **kw: Any) -> None:
        # p1 shares a rack with d1; d2 is in the next rack
        self.start([("p1", "prefill", 1, 1, 1), ("d1", "decode", 2, 1, 1),
                    ("d2", "decode", 3, 2, 1)], scrape_s=scrape_s, **kw)

    def load(self, name: str) -> Any:
        return self.gw.router.instance_load(self.ids[name])

    def wait_for(self, what: str, fn: Any, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while not fn():
            if time.monotonic() > end:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.01)

    def test_split_then_whole(self) -> None:
        self.pd_fleet()
        st = get(self.port, "/status")
        self.assertEqual({b["name"]: (b["role"], b["placement"]["rack"])
                          for b in st["backends"]},
                         {"p1": ("prefill", 1), "d1": ("decode", 1),
                          "d2": ("decode", 2)})
        # Hold the decode engines before their first token, to see the
        # router's loads between the two legs' ends.
        for d in ("d1", "d2"):
            admin(self.port_of(d), "/admin/hold", {"on": True})
        body = {"model": "m", "prompt": LONG, "stream": True,
                "stream_options": {"include_usage": True},
                "max_tokens": 5, "min_tokens": 2, "user": "turn1"}
        got: Dict[str, Any] = {}

        def client() -> None:
            got["r"] = post(self.port, "/v1/completions", body)
        t = threading.Thread(target=client)
        t.start()
        try:
            self.wait_for("the decode leg held",
                          lambda: any(self.engine(d).state()["held"]
                                      for d in ("d1", "d2")))
            dec = next(d for d in ("d1", "d2")
                       if self.engine(d).state()["held"])
            # the prefill leg ended (prefill_done), the decode leg waits
            # for its first token: counted at the decode instance only
            self.assertEqual(self.load("p1").inflight, 0)
            self.assertEqual(self.load(dec).inflight, 1)
            self.assertEqual(self.load(dec).prefill_tokens, 0)
            self.assertEqual(self.gw.pd["prefill_done"], 1)
        finally:
            for d in ("d1", "d2"):
                admin(self.port_of(d), "/admin/hold", {"on": False})
            t.join(30)
        status, hdr, data = got["r"]
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(hdr["x-libroute-backend"], dec)
        self.assertEqual(hdr["x-libroute-prefill-backend"], "p1")
        self.assertIn(hdr["x-libroute-prefill-reason"],
                      ("prefix-hit", "least-loaded"))
        self.assertGreater(float(hdr["x-libroute-transfer-s"]), 0)
        self.assertEqual(hdr["x-libroute-decider"], "llm-d-pd")
        # the client got the decode engine's stream
        ev = events(data)
        self.assertEqual(ev[-1], "[DONE]")
        toks = [e for e in ev[:-1] if e["choices"]]
        self.assertEqual(len(toks), 5)
        self.assertTrue(all(e["backend"] == dec for e in ev[:-1]))
        usage = ev[-2]["usage"]
        self.assertEqual((usage["kv_leg"], usage["computed_blocks"],
                          usage["received_blocks"], usage["cached_blocks"]),
                         ("decode", 0, 64, 0))

        # The prefill engine saw the prefill leg, the decode engine the
        # params it answered, verbatim, under the same X-Request-Id.
        p1 = self.engine("p1").state()
        (pre,) = p1["requests"]
        self.assertEqual(pre["kind"], "prefill")
        self.assertEqual(pre["kv_transfer_params"], PREFILL_PARAMS)
        self.assertEqual((pre["stream"], pre["max_tokens"]), (False, 1))
        for k in ("stream_options", "min_tokens"):
            self.assertNotIn(k, pre["fields"])
        self.assertTrue(pre["x_request_id"].startswith("libroute-"))
        ret = pre["returned"]
        self.assertEqual(
            (ret["do_remote_prefill"], ret["do_remote_decode"],
             ret["remote_engine_id"], ret["remote_port"],
             ret["remote_request_id"], ret["tp_size"],
             len(ret["remote_block_ids"])),
            (True, False, "fake-p1", self.port_of("p1"),
             pre["x_request_id"], 1, 64))
        (dreq,) = self.engine(dec).state()["requests"]
        self.assertEqual(dreq["kind"], "decode")
        self.assertEqual(dreq["kv_transfer_params"], ret)
        self.assertEqual(dreq["x_request_id"], pre["x_request_id"])
        self.assertEqual((dreq["stream"], dreq["max_tokens"]), (True, 5))
        self.assertIn("min_tokens", dreq["fields"])
        self.assertIn("stream_options", dreq["fields"])
        other = "d2" if dec == "d1" else "d1"
        self.assertEqual(self.engine(other).state()["requests"], [])
        # the blocks moved: read once, freed at the prefill engine
        self.assertEqual((p1["legs"]["prefill"], p1["pulls"], p1["kv_held"],
                          p1["blocks"]["computed"], p1["blocks"]["sent"]),
                         (1, 1, {}, 64, 64))
        ds = self.engine(dec).state()
        self.assertEqual((ds["legs"]["decode"], ds["blocks"]["received"],
                          ds["blocks"]["computed"], ds["pull_failures"]),
                         (1, 64, 0, 0))

        # The router's counters and loads agree.
        rs = self.gw.router.stats()
        self.assertEqual((rs.routes, rs.inflight), (1, 0))
        for n in ("p1", "d1", "d2"):
            self.assertEqual(self.load(n).inflight, 0, n)
        st = get(self.port, "/status")
        self.assertEqual(st["pd"], {"prefill_legs": 1, "prefill_done": 1,
                                    "prefill_failures": 0,
                                    "without_params": 0})
        self.assertEqual((st["failures"], st["retries"]), (0, 0))

        # The next turn adds a few tokens: kept whole where it decoded,
        # whose cache holds the transferred prompt.
        status, hdr, data = post(self.port, "/v1/completions",
                                 {"model": "m", "prompt": LONG + "And?",
                                  "max_tokens": 3, "user": "turn2"})
        self.assertEqual(status, 200, data[:300])
        out = json.loads(data)
        self.assertEqual(hdr["x-libroute-backend"], dec)
        self.assertEqual(out["backend"], dec)
        self.assertNotIn("x-libroute-prefill-backend", hdr)
        self.assertEqual(hdr["x-libroute-prefill-reason"], "whole")
        self.assertGreaterEqual(int(hdr["x-libroute-cached-tokens"]), 1008)
        self.assertEqual((out["usage"]["kv_leg"],
                          out["usage"]["cached_blocks"],
                          out["usage"]["computed_blocks"]),
                         ("whole", 64, 1))
        self.assertIsNone(out["kv_transfer_params"])
        self.assertEqual(len(self.engine("p1").state()["requests"]), 1)
        last = self.engine(dec).state()["requests"][-1]
        self.assertEqual((last["kind"], last["kv_transfer_params"],
                          last["x_request_id"]), ("whole", None, None))
        self.assertEqual(self.gw.pd["prefill_legs"], 1)
        rs = self.gw.router.stats()
        self.assertEqual((rs.routes, rs.inflight), (2, 0))

    def test_aggregated_fleet_unchanged(self) -> None:
        self.start([("e1", "both", 0, 0, 0), ("e2", "both", 0, 0, 0),
                    ("e3", "both", 0, 0, 0)])
        for i in range(4):
            status, hdr, data = post(
                self.port, "/v1/completions",
                {"model": "m", "prompt": f"{i} " + LONG, "max_tokens": 2,
                 "stream": i % 2 == 1})
            self.assertEqual(status, 200, data[:300])
            self.assertNotIn("x-libroute-prefill-backend", hdr)
            self.assertNotIn("x-libroute-prefill-reason", hdr)
            self.assertEqual(hdr["x-libroute-decider"], "llm-d-pd")
        reqs = [r for s in self.servers for r in s.engine.state()["requests"]]
        self.assertEqual(len(reqs), 4)
        for r in reqs:
            self.assertEqual((r["kind"], r["kv_transfer_params"],
                              r["x_request_id"]), ("whole", None, None))
            self.assertNotIn("kv_transfer_params", r["fields"])
        self.assertEqual(self.gw.pd["prefill_legs"], 0)
        self.assertEqual(self.gw.router.stats().inflight, 0)

    def test_prefill_leg_fails(self) -> None:
        self.pd_fleet()
        admin(self.port_of("p1"), "/admin/fail_next", {"n": 1})
        status, hdr, data = post(self.port, "/v1/chat/completions",
                                 {"model": "m", "stream": True,
                                  "messages": [{"role": "user",
                                                "content": LONG}]})
        # the engine's error, as it answered it
        self.assertEqual(status, 500, data[:300])
        self.assertEqual(json.loads(data)["message"], "injected failure")
        self.assertEqual(hdr["x-libroute-prefill-backend"], "p1")
        for d in ("d1", "d2"):
            self.assertEqual(self.engine(d).state()["requests"], [])
        self.assertEqual((self.gw.pd["prefill_legs"],
                          self.gw.pd["prefill_failures"],
                          self.gw.pd["prefill_done"]), (1, 1, 0))
        self.assertEqual(self.gw.failures, 1)
        self.assertEqual(self.gw.router.stats().inflight, 0)
        for n in ("p1", "d1", "d2"):
            self.assertEqual(self.load(n).inflight, 0, n)
        self.assertTrue(all(b.up for b in self.gw.backends.values()))
        # the next one goes through both legs (another prompt: the
        # router learnt the failed one's at its decode instance)
        status, hdr, data = post(self.port, "/v1/chat/completions",
                                 {"model": "m", "max_tokens": 2,
                                  "messages": [{"role": "user",
                                                "content": "2 " + LONG}]})
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(hdr["x-libroute-prefill-backend"], "p1")
        self.assertEqual(json.loads(data)["usage"]["kv_leg"], "decode")
        self.assertEqual(self.gw.pd["prefill_done"], 1)

    def test_let_out_of_the_queue_split(self) -> None:
        # One request before its first token saturates an instance; the
        # fleet is saturated when both decode instances are (the prefill
        # one aside). Two split requests held at the decode engines
        # saturate it; a third waits, and is let out at a first token,
        # split as the router routed it: its prefill leg, then its
        # decode leg.
        self.pd_fleet(saturation_queue=1)
        for n in ("d1", "d2"):
            admin(self.port_of(n), "/admin/hold", {"on": True})
        got: Dict[int, Any] = {}

        def held() -> int:
            return self.engine("d1").held + self.engine("d2").held

        def client(i: int) -> None:
            got[i] = post(self.port, "/v1/completions",
                          {"model": "m", "prompt": f"{i} " + LONG,
                           "max_tokens": 2, "user": f"q{i}"})
        ts = []
        try:
            for i, cond in ((0, lambda: held() == 1),
                            (1, lambda: held() == 2),
                            (2, lambda: self.gw.router.stats().waiting
                             == 1)):
                ts.append(threading.Thread(target=client, args=(i,)))
                ts[-1].start()
                self.wait_for(f"request {i}", cond)
            # one on each decode engine; the idle prefill one has room
            self.assertEqual((self.engine("d1").held,
                              self.engine("d2").held), (1, 1))
            self.assertTrue(self.gw.router.saturated(now_ns()))
            self.assertEqual(self.gw.pd["prefill_legs"], 2)
            # hold the prefill leg of the one let out, then free the
            # decode engines: their first tokens let it out
            admin(self.port_of("p1"), "/admin/hold", {"on": True})
            for n in ("d1", "d2"):
                admin(self.port_of(n), "/admin/hold", {"on": False})
            self.wait_for("its prefill leg held",
                          lambda: self.engine("p1").held == 1)
            # let out split: its prefill leg is counted at the prefill
            # instance until it returns
            self.assertEqual(self.gw.router.stats().waiting, 0)
            self.assertEqual(self.load("p1").inflight, 1)
            self.assertEqual(self.gw.pd["prefill_legs"], 3)
        finally:
            for n in ("p1", "d1", "d2"):
                admin(self.port_of(n), "/admin/hold", {"on": False})
            for t in ts:
                t.join(30)
        for i in range(3):
            self.assertEqual(got[i][0], 200, got[i][2][:300])
        legs = [json.loads(got[i][2])["usage"]["kv_leg"] for i in range(3)]
        self.assertEqual(legs, ["decode", "decode", "decode"])
        hdr = got[2][1]
        self.assertEqual(hdr["x-libroute-prefill-backend"], "p1")
        self.assertIn(hdr["x-libroute-backend"], ("d1", "d2"))
        self.assertIn(hdr["x-libroute-prefill-reason"],
                      ("prefix-hit", "least-loaded"))
        self.assertGreater(float(hdr["x-libroute-transfer-s"]), 0)
        self.assertEqual(hdr["x-libroute-decider"], "llm-d-pd")
        # the decode engine read its blocks from the prefill engine, under
        # the prefill leg's X-Request-Id
        p1 = self.engine("p1").state()
        self.assertEqual((p1["legs"]["prefill"], p1["pulls"],
                          p1["kv_held"]), (3, 3, {}))
        dreq = next(r for n in ("d1", "d2")
                    for r in self.engine(n).state()["requests"]
                    if r["user"] == "q2")
        pre = next(r for r in p1["requests"] if r["user"] == "q2")
        self.assertEqual((dreq["kind"], dreq["kv_transfer_params"],
                          dreq["x_request_id"]),
                         ("decode", pre["returned"], pre["x_request_id"]))
        self.assertEqual(self.gw.pd, {"prefill_legs": 3, "prefill_done": 3,
                                      "prefill_failures": 0,
                                      "without_params": 0})
        rs = self.gw.router.stats()
        self.assertEqual((rs.waited, rs.waited_dispatched, rs.inflight),
                         (1, 1, 0))
        for n in ("p1", "d1", "d2"):
            self.assertEqual(self.load(n).inflight, 0, n)

    def test_prefill_without_params(self) -> None:
        # an engine without a KV connector (llama.cpp's server here)
        # answers the prefill leg with no kv_transfer_params: the decode
        # leg is the client's request as it came, prefilled there
        self.start([("p1", "prefill", 0, 0, 0), ("d1", "decode", 0, 0, 0)],
                   engines={"p1": LlamaEngine("p1")})
        status, hdr, data = post(self.port, "/v1/completions",
                                 {"model": "m", "prompt": LONG,
                                  "max_tokens": 2})
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(hdr["x-libroute-prefill-backend"], "p1")
        self.assertEqual(self.engine("p1").served, 1)
        (req,) = self.engine("d1").state()["requests"]
        self.assertEqual((req["kind"], req["kv_transfer_params"]),
                         ("whole", None))
        self.assertTrue(req["x_request_id"].startswith("libroute-"))
        self.assertEqual(json.loads(data)["usage"]["computed_blocks"], 64)
        self.assertEqual((self.gw.pd["prefill_done"],
                          self.gw.pd["without_params"]), (1, 1))
        self.assertEqual(self.gw.router.stats().inflight, 0)

    def test_prefill_engine_gone(self) -> None:
        # no probes within the test: the refusal is what drains it
        self.pd_fleet(scrape_s=60.0)
        srv = next(s for s in self.servers if s.engine.name == "p1")
        srv.shutdown()
        srv.server_close()
        self.servers.remove(srv)
        status, hdr, data = post(self.port, "/v1/completions",
                                 {"model": "m", "prompt": LONG,
                                  "max_tokens": 2})
        # refused, drained, routed again: whole on a decode engine
        self.assertEqual(status, 200, data[:300])
        self.assertNotIn("x-libroute-prefill-backend", hdr)
        self.assertIn(hdr["x-libroute-backend"], ("d1", "d2"))
        self.assertEqual(json.loads(data)["usage"]["kv_leg"], "whole")
        self.assertFalse(self.gw.backends[self.ids["p1"]].up)
        self.assertEqual((self.gw.retries, self.gw.pd["prefill_legs"],
                          self.gw.pd["prefill_failures"]), (1, 1, 0))
        rs = self.gw.router.stats()
        self.assertEqual((rs.routes, rs.inflight), (2, 0))


if __name__ == "__main__":
    unittest.main()
