"""cost: the Cost handle (lr_cost): kinds and their parameters, eval()
against the header's formulas and against the policies that use them,
GORGO's tuner, errors and ownership."""

from __future__ import annotations

import array
import gc
import math
import random
import unittest
import weakref

import libroute as L

K, P = L.CostKind, L.CostParam

ROWS = [L.Candidate(0, cached_tokens=100, prefill_tokens=4000, rtt_ms=2.0,
                    stall_s=0.5, prompt_tokens=3000, queued_tokens=1000,
                    kv_tokens=5000),
        L.Candidate(1, prefill_rate=16000.0, kv_tokens=33)]


class Kinds(unittest.TestCase):

    def test_kinds_and_names(self):
        self.assertEqual(L.Cost.kinds(),
                         {K.TTFT: "ttft", K.GORGO: "gorgo",
                          K.DYNAMO: "dynamo"})
        self.assertEqual(K.GORGO.label, "gorgo")
        for spelling in ("gorgo", "GORGO", K.GORGO, 1):
            with L.Cost(spelling) as c:
                self.assertIs(c.kind, K.GORGO)
        with L.Cost() as c:
            self.assertIs(c.kind, K.TTFT)  # the library's default
        with self.assertRaises(ValueError):
            L.Cost("no-such-kind")
        with self.assertRaises(L.InvalidArgumentError):
            L.Cost(L.cost_kind_count())
        with self.assertRaises(ValueError):
            L.Cost(seed=-1)

    def test_each_kind_has_its_parameters(self):
        want = {
            K.TTFT: {P.W_RTT: 1.0, P.W_STALL: 1.0},
            K.GORGO: {P.W_RTT: 0.5, P.W_QUEUE: 0.1,
                      P.QUEUE_AT_FIRST_TOKEN: 0.0, P.SIGMA: 0.5,
                      P.W_RTT_MAX: 2.0, P.W_QUEUE_MIN: 0.05},
            K.DYNAMO: {P.W_UNCACHED: 1.0, P.BLOCK_TOKENS: 16.0},
        }
        for kind, params in want.items():
            with self.subTest(kind=kind.label), L.Cost(kind) as c:
                self.assertEqual(c.params(), params)
                for key, value in params.items():
                    b = c.param_bounds(key)
                    self.assertEqual(b, L.cost_param_bounds(kind, key))
                    self.assertEqual(b.default, value)
                    self.assertLessEqual(b.lo, value)
                    self.assertLessEqual(value, b.hi)
                for key in set(P) - set(params):
                    with self.assertRaises(L.NotSupportedError):
                        c.get_param(key)
                    with self.assertRaises(L.NotSupportedError):
                        c.param_bounds(key)
        self.assertTrue(L.cost_param_bounds("dynamo", "block_tokens").integer)
        self.assertFalse(L.cost_param_bounds("ttft", "w_rtt").integer)

    def test_set_and_get(self):
        with L.Cost("dynamo") as c:
            c.set_param("block_tokens", 32)
            self.assertEqual(c.get_param(P.BLOCK_TOKENS), 32)
            with self.assertRaises(L.InvalidArgumentError):
                c.set_param(P.BLOCK_TOKENS, 16.5)  # LR_BOUNDS_INTEGER
            with self.assertRaises(L.InvalidArgumentError):
                c.set_param(P.W_UNCACHED, math.nan)
            hi = c.param_bounds(P.W_UNCACHED).hi
            with self.assertRaises(L.OutOfRangeError):
                c.set_param(P.W_UNCACHED, hi * 2)
            with self.assertRaises(L.NotSupportedError):
                c.set_param(P.W_RTT, 1.0)  # not a Dynamo key
            with self.assertRaises(ValueError):
                c.set_param("no_such_key", 1.0)
            self.assertEqual(c.get_param(P.BLOCK_TOKENS), 32)


class Eval(unittest.TestCase):

    def test_formulas(self):
        with L.Cost("ttft") as c:
            got = c.eval(ROWS, prompt_tokens=1000)
            self.assertIsInstance(got, array.array)
            # (prefill + prompt - cached) / rate + W_RTT rtt/1000
            # + W_STALL stall
            self.assertAlmostEqual(got[0], 4900 / 8000 + 0.002 + 0.5)
            self.assertAlmostEqual(got[1], 1000 / 16000)
        with L.Cost("gorgo") as c:
            # W_RTT rtt_ms + (prompt - cached) + W_QUEUE prompt_tokens
            self.assertEqual(list(c.eval(ROWS, prompt_tokens=1000)),
                             [0.5 * 2 + 900 + 0.1 * 3000, 1000])
            c.set_param(P.QUEUE_AT_FIRST_TOKEN, 1)  # queued_tokens instead
            self.assertEqual(c.eval(ROWS, prompt_tokens=1000)[0],
                             0.5 * 2 + 900 + 0.1 * 1000)
        with L.Cost("dynamo") as c:
            # W_UNCACHED ceil((prompt - cached) / B) + ceil(kv / B)
            self.assertEqual(list(c.eval(ROWS, prompt_tokens=1000)),
                             [57 + 313, 63 + 3])

    def test_the_policies_use_the_same_models(self):
        table = L.Candidates(ROWS)
        with L.Cost("ttft") as c:
            c.set_param(P.W_RTT, 0)   # min-ttft's weights
            c.set_param(P.W_STALL, 0)
            want = list(c.eval(table, prompt_tokens=1000))
        d = L.decide("min-ttft", table, prompt_tokens=1000)
        self.assertEqual([s.score for s in d.scores], want)
        for kind, policy in ((K.GORGO, "gorgo"), (K.DYNAMO, "dynamo")):
            with self.subTest(policy=policy), L.Cost(kind) as c:
                d = L.decide(policy, table, prompt_tokens=1000)
                self.assertEqual([s.score for s in d.scores],
                                 list(c.eval(table, prompt_tokens=1000)))

    def test_bad_rows(self):
        with L.Cost("ttft") as c:
            self.assertEqual(len(c.eval([], prompt_tokens=10)), 0)
            with self.assertRaises(L.InvalidArgumentError):
                c.eval(ROWS, prompt_tokens=50)  # cached above the prompt
            with self.assertRaises(L.InvalidArgumentError):
                c.eval([L.Candidate(0, prefill_rate=0.0)], prompt_tokens=10)
            with self.assertRaises(L.InvalidArgumentError):
                c.eval([L.Candidate(0, prefill_rate=math.inf)],
                       prompt_tokens=10)
            with self.assertRaises(ValueError):
                c.eval(ROWS, prompt_tokens=-1)
            with self.assertRaises(TypeError):
                c.eval(["not a row"], prompt_tokens=10)


class Tuner(unittest.TestCase):

    def test_gorgo_tunes(self):
        with L.Cost("gorgo", seed=3) as c:
            s = c.tuner_stats()
            self.assertEqual((s.state, s.trials, s.samples),
                             (L.cost.TUNER_OFF, 0, 0))
            c.observe(0.5)  # ignored while not tuning
            self.assertEqual(c.tuner_stats().samples, 0)
            c.tune()
            self.assertEqual(c.tuner_stats().state, L.cost.TUNER_MEASURING)
            self.assertTrue(math.isnan(c.tuner_stats().incumbent_p95_s))
            rnd = random.Random(1)
            window = L.constants["LR_COST_TUNE_WINDOW"]
            hop = L.constants["LR_COST_TUNE_HOP"]
            n = window + 10 * hop
            for _ in range(n):
                c.observe(rnd.uniform(0.1, 1.0))
            s = c.tuner_stats()
            self.assertEqual(s.samples, n)
            self.assertGreater(s.trials, 0)
            self.assertLessEqual(s.accepted, s.trials)
            self.assertFalse(math.isnan(s.incumbent_p95_s))
            self.assertIn(s.state, (L.cost.TUNER_MEASURING,
                                    L.cost.TUNER_TRIAL,
                                    L.cost.TUNER_CONVERGED))
            # The tuned weights stay in GORGO's guard rails.
            w_rtt, w_queue = c.get_param(P.W_RTT), c.get_param(P.W_QUEUE)
            self.assertTrue(0.05 <= w_rtt <= c.get_param(P.W_RTT_MAX))
            self.assertTrue(c.get_param(P.W_QUEUE_MIN) <= w_queue <= 0.5)
            c.tune(False)
            self.assertEqual(c.tuner_stats().state, L.cost.TUNER_OFF)
            with self.assertRaises(L.InvalidArgumentError):
                c.observe(-1.0)
            with self.assertRaises(L.InvalidArgumentError):
                c.observe(math.inf)

    def test_only_gorgo_tunes(self):
        for kind in (K.TTFT, K.DYNAMO):
            with self.subTest(kind=kind.label), L.Cost(kind) as c:
                with self.assertRaises(L.NotSupportedError):
                    c.tune()
                self.assertEqual(c.tuner_stats().state, L.cost.TUNER_OFF)


class Ownership(unittest.TestCase):

    def test_close_and_gc(self):
        c = L.Cost("gorgo")
        c.close()
        c.close()
        for call in (lambda: c.kind, c.tune, c.tuner_stats, c.params,
                     lambda: c.eval(ROWS, prompt_tokens=1000)):
            with self.assertRaises(L.ClosedError):
                call()
        with self.assertRaises(L.ClosedError):
            with c:
                pass
        c = L.Cost()
        ref = weakref.ref(c)
        del c
        gc.collect()
        self.assertIsNone(ref())


if __name__ == "__main__":
    unittest.main()
