"""policy: candidate tables (Candidates, Router.candidates()), decide()
over them, ring_key(), and the promise that ties them together: a route's
table plus its Decision.seed replays its choice."""

from __future__ import annotations

import inspect
import math
import unittest

import libroute as L
from libroute import ffi
from support import tokens

S = 10**9


def row(instance, **kw):
    return L.Candidate(instance, **kw)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def same_decision(a: L.Decision, b: L.Decision) -> bool:
    """Equal, with NaN costs and scores equal to each other."""
    def key(d):
        return d._replace(cost=None, scores=None)
    return (key(a) == key(b) and same(a.cost, b.cost)
            and len(a.scores) == len(b.scores)
            and all(x.instance == y.instance and same(x.score, y.score)
                    for x, y in zip(a.scores, b.scores)))


class Table(unittest.TestCase):

    def test_build_read_edit(self):
        t = L.Candidates([row(0), {"instance": 4, "inflight": 3},
                          row(7, kv_use=0.5, prefix_caching=False)])
        self.assertEqual(len(t), 3)
        self.assertEqual([c.instance for c in t], [0, 4, 7])
        self.assertEqual(t[1].inflight, 3)
        self.assertEqual(t[-1].prefix_caching, 0)
        self.assertEqual(t[2].prefill_rate, 8000.0)  # Candidate's default
        t[0] = row(9, queued=2)
        self.assertEqual(t[0], row(9, queued=2))
        t.cdata[1].kv_use = 0.25  # in place
        self.assertEqual(t[1].kv_use, 0.25)
        self.assertEqual(t[0:2], [row(9, queued=2),
                                  row(4, inflight=3, kv_use=0.25)])
        c = t.copy()
        self.assertEqual(c, t)
        c.cdata[0].queued = 5
        self.assertNotEqual(c, t)
        self.assertEqual(L.Candidates.row_size, ffi.sizeof("lr_candidate"))
        self.assertGreaterEqual(L.Candidates.row_size,
                                L.constants["LR_CANDIDATE_SIZE_V1"])
        z = L.Candidates.zeros(2)
        self.assertEqual(list(z), [L.Candidate(0, prefill_rate=0.0,
                                               cached_age_s=0.0,
                                               prefix_caching=0,
                                               adapter_free=0)] * 2)

    def test_bad_rows(self):
        with self.assertRaises(IndexError):
            L.Candidates([row(0)])[1]
        with self.assertRaises(TypeError):
            L.Candidates([{"instance": 0, "no_such_field": 1}])
        with self.assertRaises(TypeError):
            L.Candidates([{"inflight": 1}])  # no instance
        with self.assertRaises(TypeError):
            L.Candidates([(0, 1)])  # a plain tuple is ambiguous
        with self.assertRaises(ValueError):
            L.Candidates([row(-1)])
        with self.assertRaises(ValueError):
            L.Candidates([row(0, queued=2**32)])
        with self.assertRaises(ValueError):
            L.Candidates.zeros(-1)


class Decide(unittest.TestCase):

    def test_least_request_and_scores(self):
        rows = [row(0, inflight=4), row(1, inflight=1), row(2, inflight=3)]
        d = L.decide("least-request", rows, prompt_tokens=100, seed=3)
        self.assertEqual(d.instance, 1)
        self.assertIs(d.reason, L.Reason.LEAST_LOADED)
        self.assertIs(d.decider, L.Policy.LEAST_REQUEST)
        self.assertEqual(d.seed, 3)
        self.assertIsNone(d.alt_instance)
        # One score per row, in the table's order.
        self.assertEqual([s.instance for s in d.scores], [0, 1, 2])
        best = min(d.scores, key=lambda s: s.score)
        self.assertEqual(best.instance, d.instance)

    def test_min_ttft_cost(self):
        rows = [row(0, prefill_tokens=16000), row(1, cached_tokens=512,
                                                  prefill_tokens=800)]
        d = L.decide(L.Policy.MIN_TTFT, rows, prompt_tokens=1024)
        self.assertEqual(d.instance, 1)
        self.assertEqual(d.cached_tokens, 512)
        self.assertEqual(d.best_cached_tokens, 512)
        self.assertAlmostEqual(d.cost, (800 + 1024 - 512) / 8000.0)
        self.assertAlmostEqual(d.scores[0].score, (16000 + 1024) / 8000.0)

    def test_deterministic_for_a_seed(self):
        rows = L.Candidates(row(i) for i in range(16))
        picks = {s: L.decide("random", rows, prompt_tokens=10,
                             seed=s).instance for s in range(64)}
        for s, inst in picks.items():
            self.assertEqual(L.decide("random", rows, prompt_tokens=10,
                                      seed=s).instance, inst)
        self.assertGreater(len(set(picks.values())), 4)

    def test_round_robin_follows_last_instance(self):
        rows = [row(2), row(5), row(9)]
        self.assertEqual(L.decide("round-robin", rows, prompt_tokens=1,
                                  last_instance=5).instance, 9)
        self.assertEqual(L.decide("round-robin", rows, prompt_tokens=1,
                                  last_instance=9).instance, 2)

    def test_params_mapping_and_sequence(self):
        # prefix-cache follows a hit of at least PREFIX_MIN_RATIO.
        rows = [row(0, cached_tokens=300, inflight=5), row(1)]
        d = L.decide("prefix-cache", rows, prompt_tokens=1000)
        self.assertEqual(d.instance, 1)  # 0.3 < 0.5: no cache choice
        for params in ({"prefix_min_ratio": 0.2},
                       {L.Param.PREFIX_MIN_RATIO: 0.2},
                       [0.2]):
            with self.subTest(params=params):
                d = L.decide("prefix-cache", rows, prompt_tokens=1000,
                             params=params)
                self.assertEqual(d.instance, 0)
                self.assertIs(d.reason, L.Reason.PREFIX_HIT)
        # Keys a mapping leaves out take their defaults.
        ranked = [row(0, cached_tokens=300, ring_rank=2),
                  row(1, prefill_tokens=9000, ring_rank=1)]
        defaults = {p: p.bounds.default for p in L.Param}
        self.assertTrue(same_decision(
            L.decide("dualmap", ranked, prompt_tokens=1000, params=defaults),
            L.decide("dualmap", ranked, prompt_tokens=1000,
                     params={L.Param.LODESTAR_MAX_TTFT_S: 15})))

    def test_bad_input(self):
        good = [row(0), row(1)]
        cases = {
            "no rows": (L.InvalidArgumentError, "random", [], {}),
            "cached above prompt": (L.InvalidArgumentError, "random",
                                    [row(0, cached_tokens=11)], {}),
            "zero prefill rate": (L.InvalidArgumentError, "min-ttft",
                                  [row(0, prefill_rate=0.0)], {}),
            "NaN rtt": (L.InvalidArgumentError, "gorgo",
                        [row(0, rtt_ms=math.nan)], {}),
            "kv_use above 1": (L.InvalidArgumentError, "random",
                               [row(0, kv_use=1.5)], {}),
            "unknown policy": (L.NotSupportedError, L.policy_count(),
                               good, {}),
            "param out of bounds": (L.OutOfRangeError, "prefix-cache", good,
                                    {"params": {"prefix_min_ratio": 2.0}}),
            "NaN param": (L.InvalidArgumentError, "prefix-cache", good,
                          {"params": [math.nan]}),
            # LR_EINVAL, as for lr_router_set_param().
            "fraction for an integer key": (
                L.InvalidArgumentError, "lodestar", good,
                {"params": {"lodestar_candidates": 1.5}}),
            "unknown param": (L.NotSupportedError, "random", good,
                              {"params": {10**6: 1.0}}),
            "model of the wrong width": (
                L.InvalidArgumentError, "lodestar", good,
                {"model": L.Mlp(3)}),
        }
        for name, (exc, policy, rows, kw) in cases.items():
            with self.subTest(case=name):
                with self.assertRaises(exc):
                    L.decide(policy, rows, prompt_tokens=10, **kw)
        with self.assertRaises(ValueError):
            L.decide("no-such-policy", good, prompt_tokens=10)
        with self.assertRaises(ValueError):
            L.decide("random", good, prompt_tokens=-1)
        with self.assertRaises(ValueError):
            L.decide("random", good, prompt_tokens=10, params={"nope": 1})
        with self.assertRaises(TypeError):
            L.decide("lodestar", good, prompt_tokens=10, model="a model")
        with self.assertRaises(TypeError):
            L.decide("random", "rows", prompt_tokens=10)

    def test_adaptive_meets_a_ttft_budget(self):
        # Row 0 queues 2 s of prefill and decodes nothing; row 1 queues
        # nothing but decodes 100 requests at 0.1 s each to a first token:
        # its cost is far above row 0's, its predicted TTFT far below.
        rows = [row(0, prefill_tokens=16000, prefill_rate=8000.0),
                row(1, instance_class=1, prefill_rate=8000.0, inflight=100,
                    ttft_s_per_decoding=0.1, ttft_s_per_token=1 / 8000)]
        cases = [  # budget, ADAPTIVE_DEADLINE, instance, reason
            (0.0, 1, 0, L.Reason.MIN_COST),     # no deadline
            (5.0, 1, 0, L.Reason.MIN_COST),     # row 0 meets 5 s
            (1.0, 1, 1, L.Reason.SLO_SWITCH),   # only row 1 meets 1 s
            (0.01, 1, 1, L.Reason.SLO_SWITCH),  # none does: the fastest
            (1.0, 0, 0, L.Reason.MIN_COST),     # switched off
        ]
        for budget, on, want, reason in cases:
            with self.subTest(budget=budget, on=on):
                d = L.decide("adaptive", rows, prompt_tokens=800, seed=3,
                             ttft_budget_s=budget,
                             params={L.Param.ADAPTIVE_DEADLINE: on})
                self.assertEqual((d.instance, d.reason), (want, reason))
        # The parameter is on by default; no budget is decide()'s default.
        self.assertEqual(L.Param.ADAPTIVE_DEADLINE.bounds.default, 1)
        self.assertEqual(L.decide("adaptive", rows, prompt_tokens=800,
                                  seed=3).instance, 0)
        self.assertEqual(L.decide("adaptive", rows, prompt_tokens=800,
                                  seed=3, ttft_budget_s=1).instance, 1)
        for bad in (-1.0, math.nan, math.inf):
            with self.subTest(budget=bad):
                with self.assertRaises(L.InvalidArgumentError):
                    L.decide("adaptive", rows, prompt_tokens=800,
                             ttft_budget_s=bad)
        with self.assertRaises(TypeError):
            L.decide("adaptive", rows, prompt_tokens=800,
                     ttft_budget_s="1")

    def test_lodestar_model_and_cold_start(self):
        rows = [row(i, inflight=i) for i in range(4)]
        cold = L.decide("lodestar", rows, prompt_tokens=100, seed=1)
        self.assertIs(cold.reason, L.Reason.COLD_START)
        self.assertIs(cold.decider, L.Policy.PREFIX_CACHE_AND_LOAD)
        fb = L.decide("lodestar", rows, prompt_tokens=100, seed=1,
                      params={"lodestar_fallback": L.Policy.LEAST_REQUEST})
        self.assertIs(fb.decider, L.Policy.LEAST_REQUEST)
        with L.Mlp(L.lodestar_feature_count(), seed=5) as m:
            d = L.decide("lodestar", rows, prompt_tokens=100, seed=1,
                         model=m, params={"lodestar_epsilon": 0})
            self.assertIs(d.decider, L.Policy.LODESTAR)
            self.assertNotIn(d.reason, (L.Reason.COLD_START,
                                        L.Reason.OOD))
            self.assertTrue(same_decision(
                L.decide("lodestar", rows, prompt_tokens=100, seed=1,
                         model=m, params={"lodestar_epsilon": 0}), d))
            m.close()
            with self.assertRaises(L.ClosedError):
                L.decide("lodestar", rows, prompt_tokens=100, model=m)


class Tables(unittest.TestCase):
    """Tables the library once mishandled (recorded in 0.2's first binding
    pass as expected failures)."""

    def test_dualmap_without_ring_ranks_decides_by_load(self):
        # No row has ring rank 1 (0: "not among them or no ring"): DualMap
        # has no ring candidates and takes the least loaded instance.
        rows = [row(0, inflight=3), row(1, inflight=1), row(2, inflight=2)]
        d = L.decide("dualmap", rows, prompt_tokens=10, seed=5)
        self.assertEqual(d.instance, 1)
        self.assertIs(d.reason, L.Reason.LEAST_LOADED)
        self.assertIs(d.decider, L.Policy.DUALMAP)
        # Ranks other than 1 are no help either.
        rows = [row(0, inflight=2, ring_rank=2), row(1, inflight=4),
                row(2, inflight=0, ring_rank=3)]
        d = L.decide("dualmap", rows, prompt_tokens=10, seed=5)
        self.assertEqual((d.instance, d.reason),
                         (2, L.Reason.LEAST_LOADED))

    def test_duplicate_instance_ids_are_ranked_as_rows(self):
        # lr_policy_decide() ranks rows, not instances: a table may name an
        # instance twice, and each row gets its own score.
        rows = [row(3, inflight=5), row(3, inflight=1), row(4, inflight=2)]
        d = L.decide("least-request", rows, prompt_tokens=10)
        self.assertEqual(d.instance, 3)
        self.assertEqual([s.instance for s in d.scores], [3, 3, 4])
        self.assertNotEqual(d.scores[0].score, d.scores[1].score)
        self.assertEqual(min(d.scores, key=lambda s: s.score),
                         d.scores[1])
        for policy in ("random", "min-ttft", "gorgo"):
            with self.subTest(policy=policy):
                e = L.decide(policy, rows, prompt_tokens=10, seed=9)
                self.assertIn(e.instance, (3, 4))


class RingKey(unittest.TestCase):

    def test_every_policy_has_one(self):
        for p in L.Policy:
            with self.subTest(policy=p.label):
                key, ranks = L.ring_key(p)
                self.assertIsInstance(key, L.RingKey)
                self.assertLessEqual(ranks, L.constants["LR_RING_MAX_K"])
                self.assertEqual(key == L.RingKey.NONE, ranks == 0)
        self.assertEqual(L.ring_key("random"), (L.RingKey.NONE, 0))
        self.assertEqual(L.ring_key("session-affinity")[0],
                         L.RingKey.SESSION)
        self.assertEqual(L.ring_key("dualmap")[0], L.RingKey.HOTNESS)
        with self.assertRaises(L.NotSupportedError):
            L.ring_key(L.policy_count())
        with self.assertRaises(L.NotSupportedError):
            L.ring_key(-1)


class RouterTable(unittest.TestCase):

    def test_rows_are_the_routable_instances(self):
        with L.Router("prefix-cache", seed=1) as r:
            for i in range(40):  # more than the first buffer
                r.add_instance(f"h{i}", instance_class=i % 3,
                               rtt_ns=(i + 1) * 100_000)
            r.set_class(1, prefill_tokens_per_s=20000)
            r.drain_instance(7)
            t = tokens(256)
            d = r.route(t, request_id=1, now_ns=S)
            rows = r.candidates(t, now_ns=S)
            self.assertIsInstance(rows, L.Candidates)
            self.assertEqual([c.instance for c in rows],
                             [i for i in range(40) if i != 7])
            by_id = {c.instance: c for c in rows}
            self.assertEqual(by_id[d.instance].cached_tokens, 256)
            self.assertEqual(by_id[d.instance].inflight, 1)
            self.assertEqual(by_id[4].instance_class, 1)
            self.assertEqual(by_id[4].prefill_rate, 20000)
            self.assertAlmostEqual(by_id[4].rtt_ms, 0.5)
            # Changes nothing: asking again gives the same table.
            self.assertEqual(r.candidates(t, now_ns=S), rows)
            self.assertEqual(r.stats().dry_runs, 0)

    def test_errors(self):
        with L.Router() as r:
            with self.assertRaises(L.StateError):
                r.candidates(tokens(10), now_ns=S)
            r.add_instance("a")
            with self.assertRaises(ValueError):
                r.candidates([-1], now_ns=S)
            with self.assertRaises(TypeError):
                r.candidates(tokens(10))  # now_ns is required
            r.close()
            with self.assertRaises(L.ClosedError):
                r.candidates(tokens(10), now_ns=S)


# Every policy: the router and decide() run the same code given the table
# and the policy input. Lodestar is cold here; a trained one replays below
# with its model.
REPLAYED = ["random", "round-robin", "least-request", "least-load",
            "session-affinity", "consistent-hash", "prefix-cache",
            "prefix-cache-and-load", "sglang-cache-aware", "preble",
            "min-ttft", "dynamo", "dualmap", "gorgo", "ranvier", "lodestar"]


class Replay(unittest.TestCase):
    """Router.candidates() + Router.policy_input() + decide() with the
    route's seed (and, for a trained Lodestar, Router.learner_save()'s
    model) reproduces the route: instance, reason, cost and every score."""

    def cluster(self, policy, **kw):
        r = L.Router(policy, seed=11, **kw)
        for i in range(6):
            r.add_instance(f"10.1.0.{i}:8000", instance_class=i % 2,
                           rtt_ns=(i + 1) * 250_000,
                           prefix_caching=i != 5)
        r.set_class(1, prefill_tokens_per_s=30000)
        r.set_stats(2, running=7, waiting=3, kv_use=0.6, scraped_ns=S)
        return r

    def check(self, r, d, rows, inp, model=None):
        e = L.decide(r.policy, rows, seed=d.seed, model=model,
                     **inp._asdict())
        self.assertEqual(
            (e.instance, e.reason, e.cached_tokens, e.best_cached_tokens,
             e.alt_instance, e.decider, e.seed),
            (d.instance, d.reason, d.cached_tokens, d.best_cached_tokens,
             d.alt_instance, d.decider, d.seed))
        self.assertTrue(same(e.cost, d.cost), (e.cost, d.cost))
        self.assertEqual(len(e.scores), len(d.scores))
        for a, b in zip(e.scores, d.scores):
            self.assertEqual(a.instance, b.instance)
            self.assertTrue(same(a.score, b.score), (a, b))

    def replay(self, r, t, rid, now, model=None, dry_only=False, **kw):
        """A dry run and (unless dry_only) a recorded route of ``t``, each
        replayed from the table and input taken just before it."""
        rows = r.candidates(t, now_ns=now, **kw)
        inp = r.policy_input(t, now_ns=now, **kw)
        dry = r.route(t, request_id=rid, now_ns=now, dry_run=True,
                      scores=True, **kw)
        self.check(r, dry, rows, inp, model)
        if dry_only:
            return dry
        # And for real: the same table and input, the next seed.
        d = r.route(t, request_id=rid, now_ns=now, scores=True, **kw)
        self.check(r, d, rows, inp, model)
        return d

    def test_routes_replay(self):
        shared = tokens(600, 99)
        for policy in REPLAYED:
            with self.subTest(policy=policy), self.cluster(policy) as r:
                now = S
                last = None
                for i in range(24):
                    now += 37_000_000
                    t = (shared[:64 * (i % 6)] + tokens(200 + 13 * i, i)
                         if i % 3 else shared)
                    kw = dict(tenant_salt=i % 2,
                              expected_output_tokens=(i % 4) * 50)
                    if i % 5 == 0:
                        kw["session"] = 1000 + i % 2
                    # The cursor is the last instance round-robin chose.
                    self.assertEqual(r.policy_input(t, **kw).last_instance,
                                     last)
                    d = self.replay(r, t, i, now, **kw)
                    if d.decider is L.Policy.ROUND_ROBIN:
                        last = d.instance
                    if i % 4 == 3:
                        r.first_token(i - 1, now_ns=now)
                    if i % 6 == 5:
                        r.complete(i - 4, 20, now_ns=now)
                self.assertEqual(r.stats().routes, 24)

    def test_trained_lodestar_replays(self):
        learner = dict(min_samples=64, retrain_every=64, epochs=5,
                       mlp=dict(hidden_layers=2, width=16))
        with self.cluster("lodestar", learner=learner) as r:
            with self.assertRaises(L.StateError):
                r.learner_save()  # no model yet
            # The model decides wherever it can (no out-of-range fallback).
            r.set_param(L.Param.LODESTAR_OOD, 0)
            now = S
            for i in range(160):
                now += 5_000_000
                r.route(tokens(150 + i % 40, i % 24), request_id=i,
                        now_ns=now)
                r.first_token(i, now_ns=now + (1 + i % 7) * 1_000_000)
                if i % 3 == 0:
                    r.complete(i, 10, now_ns=now + 9_000_000)
            self.assertTrue(r.learn_step(force=True))
            blob = r.learner_save()
            self.assertIsInstance(blob, bytes)
            with L.Mlp.load(blob) as model:
                self.assertEqual(model.n_inputs, L.lodestar_feature_count())
                by = set()
                for k in range(24):
                    now += 1_000_000
                    d = self.replay(r, tokens(150 + 7 * k, k % 24), 1000 + k,
                                    now, model=model, session=k % 3)
                    by.add(d.decider)
                self.assertEqual(by, {L.Policy.LODESTAR})
                # The model learner_save() gives is the one in service.
                self.assertEqual(L.Mlp.load(r.learner_save()).save(), blob)

    def test_gorgo_replays_during_a_tuner_trial(self):
        with self.cluster("gorgo") as r:
            now = S
            for i in range(200):  # a trial runs after the first window
                now += 2_000_000
                r.route(tokens(150 + i % 40, i % 24), request_id=i,
                        now_ns=now)
                r.first_token(i, now_ns=now + (1 + i % 5) * 1_000_000)
                r.complete(i, 4, now_ns=now + 9_000_000)
            t = tokens(256, 3)
            served = r.policy_input(t).params
            incumbent = r.params()
            keys = (L.Param.GORGO_W_RTT, L.Param.GORGO_W_QUEUE)
            self.assertNotEqual([served[k] for k in keys],
                                [incumbent[k] for k in keys])
            for k in range(12):
                now += 1_000_000
                self.replay(r, tokens(150 + 11 * k, k % 24), 1000 + k, now)
                # The trial goes on: no first token has been seen since.
                self.assertEqual(r.policy_input(t).params, served)

    def test_policy_input(self):
        with self.cluster("round-robin") as r:
            t = tokens(100)
            inp = r.policy_input(t, expected_output_tokens=7)
            self.assertIsInstance(inp, L.PolicyInput)
            self.assertEqual((inp.prompt_tokens, inp.expected_output_tokens,
                              inp.block_tokens, inp.last_instance),
                             (100, 7, 16, None))
            self.assertEqual(len(inp.params), L.param_count())
            self.assertEqual(inp.ttft_budget_s, 0.0)  # no deadline
            self.assertEqual(inp.params[L.Param.PREFIX_MIN_RATIO],
                             r.get_param(L.Param.PREFIX_MIN_RATIO))
            # The router's default output applies to 0, as route() does.
            r.set_param(L.Param.DEFAULT_OUTPUT_TOKENS, 300)
            self.assertEqual(r.policy_input(t).expected_output_tokens, 300)
            d = r.route(t, request_id=1, now_ns=S)
            self.assertEqual(r.policy_input(t).last_instance, d.instance)
            # A deadline reaches the policy as the seconds left at now_ns.
            for deadline, budget in ((S + 2 * S, 2.0), (S, 1e-9),
                                     (S - 1, 1e-9), (0, 0.0)):
                with self.subTest(deadline_ns=deadline):
                    self.assertEqual(r.policy_input(
                        t, now_ns=S, deadline_ns=deadline).ttft_budget_s,
                        budget)
            self.assertEqual(r.policy_input(
                t, now_ns=S, deadline_ns=S + 250_000_000).ttft_budget_s,
                0.25)
            # Its fields are decide()'s keywords.
            self.assertLessEqual(set(L.PolicyInput._fields),
                                 set(inspect.signature(L.decide).parameters))
            # Checked as route() checks a request; changes nothing.
            with self.assertRaises(L.InvalidArgumentError):
                r.policy_input(t, boundaries=[50, 10])
            with self.assertRaises(ValueError):
                r.policy_input([-1])
            self.assertEqual(r.stats().routes + r.stats().dry_runs, 1)
            r.close()
            with self.assertRaises(L.ClosedError):
                r.policy_input(t)
