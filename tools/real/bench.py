"""The real-engine benchmark (tools/real-bench): routing policies in front
of real llama.cpp engines (realfleet.py), on a seeded multi-turn chat
workload with shared system prompts (workload.py).

Each run: the engines are restarted (empty caches), the machine is given
a moment to be quiet, then every conversation runs on its own thread and
each request goes through the router, either in this process through the
Python binding (`--via binding`: route(), then the engine's native
/completion, streamed, with the tokens as ids and message boundaries; the
gateway's own probe threads feed the router) or through
examples/gateway/gateway.py (`--via gateway`). The client measures the
time to the first streamed token; the engines report the prompt tokens
they reused (`timings.cache_n`) and computed (`prompt_n`). CpuWatch
measures the busy time of other processes; a run with too much of it is
marked disturbed, kept in the log, left out of the table and run again.

Every run appends one JSON line to RESULTS/runs.jsonl: the policy, the
workload, the CPU readings, and every request (conversation, turn,
engine, TTFT, prompt tokens, cache_n, prompt_n, the router's predicted
cached tokens, output tokens, failure). `report` prints the table from
it, over the clean runs only.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from array import array
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "gateway"))

import cpuwatch  # noqa: E402
import realfleet as fleet  # noqa: E402
import workload  # noqa: E402


def log(msg: str) -> None:
    print(f"real-bench: {msg}", file=sys.stderr, flush=True)


# ---- one request ---------------------------------------------------------------

class Result:
    __slots__ = ("conv", "turn", "engine", "ttft_ms", "e2e_ms", "prompt",
                 "cache_n", "prompt_n", "predicted", "n_out", "ok", "error",
                 "start_s", "prompt_ms")

    def __init__(self, conv: int, turn: int, prompt: int) -> None:
        self.conv, self.turn, self.prompt = conv, turn, prompt
        self.engine = ""
        self.ttft_ms = self.e2e_ms = -1.0
        self.cache_n = self.prompt_n = self.predicted = self.n_out = 0
        self.ok = False
        self.error = ""
        self.start_s = 0.0
        self.prompt_ms = 0.0

    def row(self) -> List[Any]:
        return [self.conv, self.turn, self.engine, round(self.ttft_ms, 2),
                round(self.e2e_ms, 2), self.prompt, self.cache_n,
                self.prompt_n, self.predicted, self.n_out, int(self.ok),
                self.error, round(self.start_s, 3), round(self.prompt_ms, 2)]


# The llama-spm vocabulary's byte tokens (<0x00>..<0xFF>, ids 3..258) are
# never sampled: a random model emits them as invalid UTF-8, which
# llama.cpp's output parser turns into an engine error.
NO_BYTE_TOKENS = [[i, False] for i in range(3, 259)]


def completion_body(prompt: List[int], n_out: int) -> Dict[str, Any]:
    """A streamed native /completion of exactly n_out tokens, returning
    them (the next turn's prompt carries them), with prompt caching."""
    return {"prompt": prompt, "n_predict": n_out, "stream": True,
            "return_tokens": True, "ignore_eos": True, "cache_prompt": True,
            "logit_bias": NO_BYTE_TOKENS}


ROW_FIELDS = ["conv", "turn", "engine", "ttft_ms", "e2e_ms", "prompt",
              "cache_n", "prompt_n", "predicted", "n_out", "ok", "error",
              "start_s", "prompt_ms"]


def stream(host: str, port: int, path: str, body: Dict[str, Any],
           timeout_s: float, on_first: Callable[[], None],
           headers: Optional[Dict[str, str]] = None
           ) -> Tuple[List[int], Dict[str, Any], Dict[str, str]]:
    """POST a streamed llama.cpp /completion: (output tokens, the final
    event's timings, response headers). Raises on an error (an HTTP
    status, an error event, a stream cut short)."""
    c = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        c.request("POST", path, json.dumps(body).encode(),
                  dict({"Content-Type": "application/json"}, **(headers or {})))
        r = c.getresponse()
        hdr = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
        out: List[int] = []
        first = True
        while True:
            line = r.readline()
            if not line:
                raise RuntimeError("stream cut short")
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(f"engine error: {ev['error']}")
            if first:
                on_first()
                first = False
            out.extend(ev.get("tokens") or [])
            if ev.get("stop"):
                return out, ev.get("timings") or {}, hdr
    finally:
        c.close()


class Direct:
    """The request path of a gateway, in this process: the binding's
    route(), then the engine. The Gateway object (examples/gateway) runs
    its probe threads, so the router gets the same telemetry as behind
    the HTTP gateway, and its on_observed() takes each engine's cache_n.
    A policy named `NAME/blind` is NAME with the router told nothing of
    what the engines reused (no lr_router_observe_cached): what that
    feedback is worth; `NAME/PARAM=VALUE` is NAME with a parameter set
    (lr_router_set_param; PARAM a name as the binding's Param spells it,
    for example adaptive/adaptive_contention=0)."""

    def __init__(self, backends: List[Tuple[str, str, int]], policy: str,
                 timeout_s: float) -> None:
        from gateway import Gateway, in_router_tokens
        base, _, variant = policy.partition("/")
        key, eq, value = variant.partition("=")
        if variant not in ("", "blind") and not (eq and key and value):
            raise SystemExit(f"real-bench: unknown variant {policy!r}")
        self.observe = variant != "blind"
        self.in_router_tokens = in_router_tokens
        self.gw = Gateway(backends, policy=base, timeout_s=timeout_s)
        if eq:
            try:
                self.gw.router.set_param(key.upper(), float(value))
            except Exception as e:
                self.gw.close()
                raise SystemExit(f"real-bench: {policy!r}: {e}")
        self.ids = itertools.count(1)
        self.timeout_s = timeout_s

    def close(self) -> None:
        self.gw.close()

    def pids(self) -> List[int]:
        return []

    def request(self, res: Result, prompt: List[int], ends: List[int],
                session: int, n_out: int) -> List[int]:
        gw = self.gw
        toks, bnd = array("I", prompt), array("I", ends)
        body = completion_body(prompt, n_out)
        for _ in range(len(gw.backends)):
            rid = next(self.ids)
            t0 = time.monotonic_ns()
            try:
                d = gw.router.route(toks, request_id=rid, now_ns=t0,
                                    boundaries=bnd, session=session,
                                    expected_output_tokens=n_out)
            except Exception as e:  # StateError: every backend drained
                res.error = f"route: {e}"
                return []
            b = gw.backends[d.instance]
            res.engine, res.predicted = b.name, d.cached_tokens
            got = []

            def first() -> None:
                t = time.monotonic_ns()
                got.append(t)
                gw.router.first_token(rid, now_ns=t)

            try:
                out, timings, _ = stream(b.host, b.port, "/completion", body,
                                         self.timeout_s, first)
            except ConnectionError as e:  # refused: retry elsewhere
                gw.fail(rid)
                gw.mark_down(b)
                res.error = str(e)
                continue
            except (OSError, RuntimeError, ValueError) as e:
                gw.fail(rid)
                res.error = str(e)
                return []
            t1 = time.monotonic_ns()
            res.cache_n = int(timings.get("cache_n", 0))
            res.prompt_n = int(timings.get("prompt_n", 0))
            res.prompt_ms = float(timings.get("prompt_ms", 0.0))
            if self.observe:
                gw.on_observed(rid, b, d, self.in_router_tokens(
                    res.cache_n, res.cache_n + res.prompt_n, len(toks)))
            gw.router.complete(rid, len(out), now_ns=t1)
            res.ttft_ms = (got[0] - t0) / 1e6
            res.e2e_ms = (t1 - t0) / 1e6
            res.n_out, res.ok, res.error = len(out), True, ""
            return out
        return []


class ViaGateway:
    """examples/gateway/gateway.py as a process; requests go through it."""

    def __init__(self, backends: List[Tuple[str, str, int]], policy: str,
                 timeout_s: float, build: str) -> None:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=":".join(
            [os.path.join(build, "bindings", "python"),
             os.path.join(ROOT, "examples", "gateway")]))
        argv = [sys.executable, os.path.join(ROOT, "examples", "gateway",
                                             "gateway.py"),
                "--port", "0", "--policy", policy,
                "--timeout", str(timeout_s)]
        for n, h, p in backends:
            argv += ["--backend", f"{n}={h}:{p}"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env,
                                     text=True)
        self.port = 0
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY "):
                self.port = json.loads(line[6:])["http"]
                break
        if not self.port:
            raise RuntimeError("the gateway did not start")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.timeout_s = timeout_s

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def pids(self) -> List[int]:
        return [self.proc.pid]

    def request(self, res: Result, prompt: List[int], ends: List[int],
                session: int, n_out: int) -> List[int]:
        body = completion_body(prompt, n_out)
        got = []
        t0 = time.monotonic_ns()
        try:
            out, timings, hdr = stream(
                "127.0.0.1", self.port, "/completion", body, self.timeout_s,
                lambda: got.append(time.monotonic_ns()))
        except (OSError, RuntimeError, ValueError) as e:
            res.error = str(e)
            return []
        t1 = time.monotonic_ns()
        res.engine = hdr.get("x-libroute-backend", "")
        res.predicted = int(hdr.get("x-libroute-cached-tokens", 0))
        res.cache_n = int(timings.get("cache_n", 0))
        res.prompt_n = int(timings.get("prompt_n", 0))
        res.prompt_ms = float(timings.get("prompt_ms", 0.0))
        res.ttft_ms = (got[0] - t0) / 1e6
        res.e2e_ms = (t1 - t0) / 1e6
        res.n_out, res.ok = len(out), True
        return out


# ---- one run -------------------------------------------------------------------

def run_workload(client: Any, convs: List["workload.Conversation"]
                 ) -> List[Result]:
    results: List[Result] = []
    lock = threading.Lock()
    t_start = time.monotonic() + 0.5

    def talk(c: "workload.Conversation") -> None:
        delay = t_start + c.start_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        prompt = list(c.system)
        ends = [len(prompt)]
        for k, t in enumerate(c.turns):
            prompt += t.user
            ends.append(len(prompt))
            res = Result(c.id, k, len(prompt))
            res.start_s = time.monotonic() - t_start
            out = client.request(res, prompt, ends, c.id + 1, t.n_out)
            with lock:
                results.append(res)
            if out:
                prompt += out
                ends.append(len(prompt))
            time.sleep(t.think_s)

    ts = [threading.Thread(target=talk, args=(c,)) for c in convs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def one_run(fl: "fleet.Fleet", policy: str, spec: "workload.Spec",
            via: str, build: str, timeout_s: float, quiet: float,
            quiet_wait_s: float) -> Dict[str, Any]:
    """Fresh engines, a quiet machine, the workload through `policy`."""
    fl.restart()
    me = os.getpid()
    before = cpuwatch.wait_quiet(lambda: [me] + fl.pids(), quiet,
                                 quiet_wait_s, log)
    convs = workload.generate(spec)
    client: Any = (Direct(fl.backends(), policy, timeout_s)
                   if via == "binding"
                   else ViaGateway(fl.backends(), policy, timeout_s, build))
    t0 = time.time()
    try:
        with cpuwatch.CpuWatch(lambda: [me] + fl.pids() + client.pids()) as w:
            results = run_workload(client, convs)
    finally:
        client.close()
    return {"policy": policy, "via": via, "started": t0,
            "wall_s": round(time.time() - t0, 2), "spec": spec.to_json(),
            "quiet_before": round(before, 3), "cpu": w.summary(),
            "fields": ROW_FIELDS,
            "rows": [r.row() for r in sorted(results,
                                             key=lambda r: (r.conv, r.turn))]}


# ---- statistics ----------------------------------------------------------------

def percentile(xs: List[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats(rows: List[Dict[str, Any]]) -> Dict[str, float]:
    ok = [r for r in rows if r["ok"]]
    ttft = [r["ttft_ms"] for r in ok]
    reused = sum(r["cache_n"] for r in ok)
    prompt = sum(r["cache_n"] + r["prompt_n"] for r in ok)
    pred = sum(r["predicted"] for r in ok)
    # the engines' own prompt time per computed token: how fast they ran
    # (rows from before the field have none)
    timed = [r for r in ok if r.get("prompt_ms", 0) > 0]
    computed = sum(r["prompt_n"] for r in timed)
    return {"engine_ms_per_token": (sum(r["prompt_ms"] for r in timed)
                                    / computed if computed else float("nan")),
            "n": len(rows), "failed": len(rows) - len(ok),
            "ttft_mean": sum(ttft) / len(ttft) if ttft else float("nan"),
            "ttft_p50": percentile(ttft, 50), "ttft_p90": percentile(ttft, 90),
            "ttft_p99": percentile(ttft, 99),
            "hit": reused / prompt if prompt else float("nan"),
            "predicted_hit": pred / prompt if prompt else float("nan"),
            "delivered": reused / pred if pred else float("nan")}


def rows_of(run: Dict[str, Any]) -> List[Dict[str, Any]]:
    f = run["fields"]
    return [dict(zip(f, r)) for r in run["rows"]]


def disturbed(run: Dict[str, Any], mean_limit: float,
              max5_limit: float) -> bool:
    c = run["cpu"]
    return c["foreign_mean"] > mean_limit or c["foreign_max5"] > max5_limit
