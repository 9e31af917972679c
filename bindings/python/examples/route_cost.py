#!/usr/bin/env python3
"""What Router.route() costs from Python, by the type the tokens come in.

Routes an 8k-token prompt (the default) of random token ids with
dry_run=True (nothing recorded, so every call sees the same router) on a
router of 8 instances that learned 64 such prompts, and prints the median
wall time of one call for each way of passing the tokens:

- `array('I')`: the binding passes a pointer into the array (no copy);
  the library's own time plus cffi's;
- `list`, `tuple` of ints: converted on each call;
- `array('I', list)`: the same list converted by the caller first (what
  a gateway does once per request when it keeps the array);
- `extend`: a conversation's array('I') extended by the turn's new
  tokens (a 512-token turn), as a gateway that keeps each conversation's
  tokens in one array pays per turn.

    PYTHONPATH=BUILDDIR/bindings/python \\
        python3 bindings/python/examples/route_cost.py [--tokens 8192] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from array import array

import libroute


CLOCK = time.perf_counter_ns


def median_us(fn, n: int) -> float:
    xs = []
    for _ in range(n):
        t0 = CLOCK()
        fn()
        xs.append(CLOCK() - t0)
    return statistics.median(xs) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--policy", default="prefix-cache-and-load")
    ap.add_argument("--cpu", action="store_true",
                    help="time with this thread's CPU clock, not the wall "
                         "clock: what the call costs, whatever else the "
                         "machine runs")
    a = ap.parse_args()
    global CLOCK
    if a.cpu:
        CLOCK = time.thread_time_ns
    rng = random.Random(1)
    r = libroute.Router(a.policy, seed=1)
    ids = [r.add_instance(f"10.0.0.{i}:8000") for i in range(8)]
    now = 10**9
    for k in range(64):  # a warm index: 64 prompts learned
        p = array("I", (rng.randrange(259, 32000) for _ in range(a.tokens)))
        d = r.route(p, request_id=k + 1, now_ns=now + k)
        r.first_token(k + 1, now_ns=now + k)
        r.complete(k + 1, 1, now_ns=now + k)
    del ids
    lst = [rng.randrange(259, 32000) for _ in range(a.tokens)]
    tup = tuple(lst)
    arr = array("I", lst)
    turn = lst[-512:]
    rid = [10**6]

    def route(tokens) -> None:
        rid[0] += 1
        r.route(tokens, request_id=rid[0], now_ns=now + 10**6,
                dry_run=True)

    conv = array("I", lst[:-512])

    def extend() -> None:
        c = array("I", conv)  # a copy stands for the conversation so far
        t0 = CLOCK()
        c.extend(turn)
        route(c)
        return CLOCK() - t0

    out = {"tokens": a.tokens, "policy": a.policy,
           "clock": "thread cpu" if a.cpu else "wall",
           "libroute": libroute.version_string()}
    for name, fn in (("array", lambda: route(arr)),
                     ("list", lambda: route(lst)),
                     ("tuple", lambda: route(tup)),
                     ("array_from_list", lambda: route(array("I", lst)))):
        route(arr)  # warm
        out[name + "_us"] = round(median_us(fn, a.calls), 2)
    xs = [extend() for _ in range(a.calls)]
    out["extend_512_us"] = round(statistics.median(xs) / 1e3, 2)
    print(json.dumps(out))
    del d


if __name__ == "__main__":
    main()
