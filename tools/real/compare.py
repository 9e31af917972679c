"""lrsim against the real-engine benchmark: the same workload replayed in
the simulator with an engine class profiled from the real engines
(engprofile.py), policy by policy.

For each policy, the requests of its first clean run become a
Mooncake-format trace for lrsim (`--trace-block 1`: one hash id per
token, so every prompt has exactly the real one's prefix structure):
the arrival is when the client sent it (the benchmark is a closed loop,
so each policy's arrivals are its own), the input its prompt length, the
output the tokens the engine generated, the session its conversation.
System prompts and user messages are the workload's tokens; each answer
gets ids of its own, which the conversation's next turn carries, as the
real answers are. lrsim then runs that policy alone on `engines`
instances of the profiled class, with the router told no class rates
(as in the benchmark, which tells it nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any, Dict, List, Tuple

import bench
import workload

SYS_BASE = 1 << 40
USER_BASE = 2 << 40
REPLY_BASE = 3 << 40


def trace_lines(run: Dict[str, Any]) -> List[str]:
    """The run's requests as lrsim trace lines (see the module doc)."""
    spec = workload.spec_from(run["spec"])
    convs = {c.id: c for c in workload.generate(spec)}
    rows = sorted(bench.rows_of(run), key=lambda r: (r["conv"], r["turn"]))
    out = []
    history: Dict[int, List[int]] = {}
    for r in rows:
        c = convs[r["conv"]]
        ids = history.setdefault(c.id, [SYS_BASE + (c.system_id << 20) + i
                                        for i in range(len(c.system))])
        t = c.turns[r["turn"]]
        base = USER_BASE + (c.id << 24) + (r["turn"] << 16)
        ids += [base + i for i in range(len(t.user))]
        if len(ids) != r["prompt"]:
            raise ValueError(f"conversation {c.id} turn {r['turn']}: "
                             f"{len(ids)} tokens rebuilt, {r['prompt']} "
                             f"sent")
        n_out = r["n_out"] if r["ok"] else 0
        out.append((r["start_s"], json.dumps({
            "timestamp": round(r["start_s"] * 1000.0, 3),
            "input_length": len(ids), "output_length": max(n_out, 1),
            "hash_ids": ids, "session_id": c.id + 1})))
        rbase = REPLY_BASE + (c.id << 24) + (r["turn"] << 16)
        ids += [rbase + i for i in range(n_out)]
    out.sort(key=lambda x: x[0])
    return [line for _, line in out]


def simulate(lrsim: str, class_file: str, cls: str, engines: int,
             run: Dict[str, Any], policy: str,
             workdir: str) -> Dict[str, Any]:
    trace = os.path.join(workdir, f"{policy}.jsonl")
    with open(trace, "w") as f:
        f.write("\n".join(trace_lines(run)) + "\n")
    js = os.path.join(workdir, f"{policy}.json")
    cmd = [lrsim, "--trace", trace, "--trace-block", "1",
           "--class-file", class_file, "--cluster", f"{engines}x{cls}",
           "--policies", policy, "--router-rates", "none",
           "--slo-ttft", "600", "--json", js, "--quiet"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(js) as f:
        return json.load(f)["runs"][0]


def spearman(a: List[float], b: List[float]) -> float:
    def ranks(v: List[float]) -> List[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def compare(runs: List[Dict[str, Any]], lrsim: str,
            classes: List[Tuple[str, str]], engines: int,
            mean_limit: float, max5_limit: float) -> str:
    """The side-by-side table for one workload's runs, for each profiled
    class (name, class file)."""
    clean: Dict[str, List[Dict[str, Any]]] = {}
    for r in runs:
        # a variant of the benchmark's own (NAME/blind) has no lrsim twin
        if "/" in r["policy"]:
            continue
        if not bench.disturbed(r, mean_limit, max5_limit):
            clean.setdefault(r["policy"], []).append(r)
    if not clean:
        return "no clean runs"
    real = {p: bench.stats([x for r in rs for x in bench.rows_of(r)])
            for p, rs in clean.items()}
    pols = sorted(clean, key=lambda p: real[p]["ttft_mean"])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for cls, path in classes:
            sims = {p: simulate(lrsim, path, cls, engines, clean[p][0], p,
                                tmp) for p in pols}
            out.append(f"\nclass {cls} ({path}), {engines} engines\n")
            out.append("| policy | real TTFT mean ms | sim | error | real "
                       "p99 | sim p99 | error | real hit | sim hit | "
                       "sim delivered / predicted |")
            out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | "
                       "---: | ---: | ---: |")
            rm, sm, rp, sp = [], [], [], []
            for p in pols:
                s = sims[p]
                a, b = real[p]["ttft_mean"], s["ttft_mean_s"] * 1e3
                c, d = real[p]["ttft_p99"], s["ttft_p99_s"] * 1e3
                rm.append(a)
                sm.append(b)
                rp.append(c)
                sp.append(d)
                dpp = s.get("delivered_per_predicted")
                out.append(
                    f"| {p} | {a:.0f} | {b:.0f} | {b / a - 1:+.0%} | "
                    f"{c:.0f} | {d:.0f} | {d / c - 1:+.0%} | "
                    f"{real[p]['hit']:.3f} | {s['cache_hit_rate']:.3f} | "
                    f"{'-' if dpp is None else f'{dpp:.2f}'} |")
            out.append(f"\nSpearman rank correlation of the policies: TTFT "
                       f"mean {spearman(rm, sm):.2f}, p99 "
                       f"{spearman(rp, sp):.2f}")
    return "\n".join(out)
