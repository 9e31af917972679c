#!/usr/bin/env python3
"""Route a generated multi-turn chat workload through libroute from Python.

Conversations start from one of a few shared system prompts and grow by a
user message and an assistant reply per turn; every turn's prompt is the
whole history, with a boundary at each message end. Each conversation's
next turn arrives some think time after its previous reply finished, so
requests overlap and load matters. A toy engine per instance turns the
router's decisions into timings: prefill of the uncached tokens at a fixed
rate behind the instance's queue, then a fixed time per output token. What
each engine really caches is modelled by a separate libroute.Index (the
engines' ground truth, fed after each dispatch), so cache-blind policies
are measured the same way as cache-aware ones. The router sees the whole
lifecycle (route, first_token, complete) in time order, as a gateway
would report it.

For each policy the example prints the cache hit rate (prompt tokens found
in the chosen engine's cache), how often follow-up turns stayed on their
instance, how evenly requests spread (coefficient of variation of requests
per instance, and max/mean), the toy TTFT, and why the router decided
what it did.

From a build tree (see bindings/python/README.md):

    PYTHONPATH=BUILDDIR/bindings/python \\
        python3 bindings/python/examples/route_workload.py
"""

from __future__ import annotations

import argparse
import array
import heapq
import random
import statistics
import sys

try:
    import libroute
except ImportError as e:
    sys.exit(f"route_workload: cannot import libroute ({e}); put the "
             "build_ffi.py --out directory on PYTHONPATH")

MS = 1_000_000           # ns
PREFILL_TOKENS_PER_S = 8000
DECODE_NS_PER_TOKEN = 20 * MS


class Conversation:
    def __init__(self, system: array.array) -> None:
        self.tokens = array.array("I", system)     # zero-copy to the router
        self.bounds = array.array("I", [len(system)])
        self.turn = 0
        self.last_instance = None

    def add_message(self, rng: random.Random, n: int) -> None:
        self.tokens.extend(rng.randrange(50000) for _ in range(n))
        self.bounds.append(len(self.tokens))


def run(policy: str, args) -> dict:
    rng = random.Random(args.seed)
    systems = [array.array("I", (rng.randrange(50000)
                                 for _ in range(rng.randrange(200, 800))))
               for _ in range(4)]
    convs = [Conversation(rng.choice(systems))
             for _ in range(args.conversations)]

    served = [0] * args.instances
    busy_until = [0] * args.instances        # toy engine: prefill queue
    prompt_tokens = hit_tokens = sticky = followups = 0
    ttfts = []
    events = []                               # (time, seq, kind, payload)
    seq = 0

    def push(t, kind, payload):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    for c in range(args.conversations):  # first turns spread over 2 s
        push(rng.randrange(0, 2000) * MS, "arrive", c)

    with libroute.Router(policy, seed=args.seed) as router, \
            libroute.Index(capacity_blocks=1 << 20) as engines:
        for i in range(args.instances):
            router.add_instance(f"10.0.0.{i + 1}:8000")
        request_id = 0
        while events:
            now, _, kind, payload = heapq.heappop(events)
            if kind == "first_token":
                router.first_token(payload, now_ns=now)
            elif kind == "complete":
                rid, c, out = payload
                router.complete(rid, out, now_ns=now)
                conv = convs[c]
                conv.add_message(rng, out)                 # the reply
                if conv.turn < args.turns:
                    push(now + rng.randrange(500, 3000) * MS, "arrive", c)
            else:                                          # a user turn
                conv = convs[payload]
                conv.add_message(rng, rng.randrange(20, 200))
                conv.turn += 1
                request_id += 1
                out = rng.randrange(30, 300)
                d = router.route(conv.tokens, request_id=request_id,
                                 now_ns=now, boundaries=conv.bounds,
                                 expected_output_tokens=out)
                inst = d.instance
                n = len(conv.tokens)
                # The engine's side: hash the prompt once, look up what the
                # chosen engine holds, then it holds the whole prompt.
                keys = libroute.block_keys(conv.tokens)
                held = engines.match(None, keys=keys, n_tokens=n, now_ns=now)
                cached = next((h.tokens for h in held.hits
                               if h.instance == inst), 0)
                engines.learn(None, inst, keys=keys, n_tokens=n,
                              boundaries=conv.bounds, now_ns=now)
                start = max(now, busy_until[inst])
                prefill = (n - cached) * 10**9 // PREFILL_TOKENS_PER_S
                busy_until[inst] = start + prefill
                first = start + prefill
                ttfts.append((first - now) / MS)
                push(first, "first_token", request_id)
                push(first + out * DECODE_NS_PER_TOKEN, "complete",
                     (request_id, payload, out))
                served[inst] += 1
                prompt_tokens += n
                hit_tokens += cached
                if conv.last_instance is not None:
                    followups += 1
                    sticky += conv.last_instance == inst
                conv.last_instance = inst
                if args.verbose and payload < 2:
                    print(f"  {policy}: conv {payload} turn {conv.turn}: "
                          f"{n:5d} tokens -> instance {inst} "
                          f"({d.reason.label}), cached {cached}")
        stats = router.stats()
        assert stats.inflight == 0, stats

    mean = statistics.fmean(served)
    return {
        "requests": sum(served),
        "hit_rate": hit_tokens / prompt_tokens if prompt_tokens else 0.0,
        "sticky": sticky / followups if followups else 0.0,
        "cv": statistics.pstdev(served) / mean if mean else 0.0,
        "max_mean": max(served) / mean if mean else 0.0,
        "ttft_mean": statistics.fmean(ttfts),
        "ttft_p95": sorted(ttfts)[int(0.95 * (len(ttfts) - 1))],
        "served": served,
        "reasons": {r.label: n for r, n in stats.by_reason.items()
                    if n and isinstance(r, libroute.Reason)},
    }


def positive(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Route a generated multi-turn workload with libroute.")
    ap.add_argument("--conversations", type=positive, default=64)
    ap.add_argument("--turns", type=positive, default=6)
    ap.add_argument("--instances", type=positive, default=8)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--policy", action="append", metavar="NAME",
                    help="a policy label (repeatable; default: "
                    "round-robin, prefix-cache-and-load, dualmap)")
    ap.add_argument("--verbose", action="store_true",
                    help="print the first two conversations' turns")
    args = ap.parse_args(argv)
    policies = args.policy or ["round-robin", "prefix-cache-and-load",
                               "dualmap"]
    for p in policies:
        try:
            libroute.Policy.from_label(p)
        except libroute.NotFoundError:
            ap.error(f"unknown policy {p!r}; one of: " +
                     ", ".join(q.label for q in libroute.Policy))

    print(f"libroute {libroute.version_string()} from Python: "
          f"{args.conversations} conversations x {args.turns} turns over "
          f"{args.instances} instances (seed {args.seed})\n")
    results = {p: run(p, args) for p in policies}
    if args.verbose:
        print()
    head = (f"{'policy':<24}{'requests':>9}{'hit rate':>10}{'sticky':>8}"
            f"{'CV':>7}{'max/mean':>10}{'TTFT mean':>11}{'p95':>9}")
    print(head)
    print("-" * len(head))
    for p, r in results.items():
        print(f"{p:<24}{r['requests']:>9}{100 * r['hit_rate']:>9.1f}%"
              f"{100 * r['sticky']:>7.1f}%{r['cv']:>7.2f}"
              f"{r['max_mean']:>10.2f}{r['ttft_mean']:>8.0f} ms"
              f"{r['ttft_p95']:>6.0f} ms")
    print()
    for p, r in results.items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(
            r["reasons"].items(), key=lambda kv: -kv[1]))
        print(f"{p}: requests per instance {r['served']}; {reasons}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
