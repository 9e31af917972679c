"""Profile a llama.cpp engine into an lrsim class (lrsim --class-file).

lrsim's step time is

    overhead + prefill chunks: n x prefill_us x (1 + (c0 + n/2) / ctx_double)
             + decoding sequences: decode_seq_us + context x decode_ctx_us

and this measures each term on real engines (realfleet.py), from the
engine's own timings:

- prefill: cold prompts of 256 to 3072 tokens, one output token;
  prompt_ms = a + b L + c L^2 by least squares gives prefill_us = b and
  ctx_double = b / (2 c) (the quadratic term is attention's);
- decode: the time per output token of one sequence at two contexts
  (decode_ctx_us is the slope), and of four at once (one more sequence
  adds decode_seq_us; what is left is the step's overhead);
- KV capacity, batch (slots) and the host prompt cache from the engine's
  settings (the cache's MiB over the KV bytes of a token).

`engines` > 1 measures the prefill and the decode on that many engines at
once, each doing the same: the time of engines sharing the machine's
cores, as in the benchmark when they are all busy.
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import threading
from typing import Any, Callable, Dict, List, Tuple

import realfleet as fleet
from bench import NO_BYTE_TOKENS


def post(port: int, body: Dict[str, Any]) -> Dict[str, Any]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request("POST", "/completion", json.dumps(body).encode(),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
        return json.loads(data)
    finally:
        c.close()


def fit_quadratic(xs: List[float], ys: List[float]) -> Tuple[float, float,
                                                             float]:
    """Least squares y = a + b x + c x^2 (normal equations)."""
    s = [sum(x ** k for x in xs) for k in range(5)]
    t = [sum(y * x ** k for x, y in zip(xs, ys)) for k in range(3)]
    m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]

    def det(a: List[List[float]]) -> float:
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
                - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))

    d = det(m)
    out = []
    for col in range(3):
        mc = [row[:] for row in m]
        for r in range(3):
            mc[r][col] = t[r]
        out.append(det(mc) / d)
    return out[0], out[1], out[2]


def at_once(ports: List[int], fn: Callable[[int], Any]) -> List[Any]:
    """fn(port) on every engine at the same time."""
    res: List[Any] = [None] * len(ports)

    def run(i: int) -> None:
        res[i] = fn(ports[i])

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(ports))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return res


def profile(fl: "fleet.Fleet", model: "fleet.ModelSpec",
            reps: int = 3, log: Callable[[str], None] = print
            ) -> Dict[str, Any]:
    rng = random.Random(11)
    ports = [e.port for e in fl.engines]

    def toks(n: int) -> List[int]:
        return [rng.randrange(259, 32000) for _ in range(n)]

    def prefill(n: int) -> Callable[[int], float]:
        def f(port: int) -> float:
            t = post(port, {"prompt": toks(n), "n_predict": 1,
                            "cache_prompt": False,
                            "logit_bias": NO_BYTE_TOKENS})["timings"]
            return float(t["prompt_ms"])
        return f

    lengths = [256, 512, 1024, 2048, 3072]
    xs, ys = [], []
    for n in lengths:
        ms = statistics.median(x for _ in range(reps)
                               for x in at_once(ports, prefill(n)))
        xs.append(float(n))
        ys.append(ms)
        log(f"prefill {n} tokens: {ms:.0f} ms")
    a, b, c = fit_quadratic(xs, ys)
    prefill_us = b * 1e3
    ctx_double = b / (2 * c) if c > 0 else 1e9

    def decode(n_ctx: int, n_out: int = 48) -> Callable[[int], float]:
        def f(port: int) -> float:
            t = post(port, {"prompt": toks(n_ctx), "n_predict": n_out,
                            "ignore_eos": True, "cache_prompt": False,
                            "logit_bias": NO_BYTE_TOKENS})["timings"]
            return float(t["predicted_ms"]) / max(1, int(t["predicted_n"]))
        return f

    def decode_batch(k: int, n_ctx: int) -> float:
        """ms per output token of each of k sequences decoding at once on
        every engine."""
        def f(port: int) -> float:
            out = at_once([port] * k, decode(n_ctx, 64))
            return statistics.median(out)
        return statistics.median(x for _ in range(reps)
                                 for x in at_once(ports, f))

    d_short = decode_batch(1, 256)
    d_long = decode_batch(1, 3072)
    d_four = decode_batch(4, 256)
    log(f"decode: 1 sequence {d_short:.1f} ms/token at 256+, "
        f"{d_long:.1f} at 3072+; 4 sequences {d_four:.1f}")
    decode_ctx_us = max(0.0, (d_long - d_short) / (3072 - 256)) * 1e3
    per_seq = max(0.0, (d_four - d_short) / 3) * 1e3
    overhead = max(0.0, d_short * 1e3 - per_seq - 280 * decode_ctx_us)
    spec = fl.spec
    kv_bytes = 2 * model.layers * model.kv_heads * (model.width //
                                                    model.heads) * 2
    host = spec.cache_ram_mib * (1 << 20) // kv_bytes
    return {
        "overhead_us": round(overhead, 1),
        "prefill_us": round(prefill_us, 2),
        "ctx_double": round(min(ctx_double, 1e9), 0),
        "decode_seq_us": round(per_seq, 1),
        "decode_ctx_us": round(decode_ctx_us, 4),
        "max_batch": spec.parallel,
        "token_budget": 2048,  # llama.cpp's n_batch
        "kv_tokens": spec.ctx,
        "max_model_len": spec.ctx,
        "cache": "slots",
        "host_cache_tokens": host,
        "slot_similarity": 0.1,
        "_fit": {"a_ms": a, "b_ms": b, "c_ms": c, "lengths": lengths,
                 "prompt_ms": ys, "decode_ms": [d_short, d_long, d_four]},
    }


def class_file(name: str, what: str, prof: Dict[str, Any]) -> str:
    lines = [f"name = {name}", f"what = {what}"]
    for k, v in prof.items():
        if not k.startswith("_"):
            lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"
