"""Disaggregated prefill and decode: add_instance(role=, node=, rack=,
region=), a split decision (Decision.prefill_instance, prefill_reason,
prefill_cached_tokens, transfer_s), the same leg on a request let out of
the waiting queue (Dispatched), Router.prefill_done(), the candidate
rows' role and placement columns, Load.dispatch(prefill_instance=) and
Load.prefill_done(), and the policies, reason and parameters that came
with them (tests/test-pd.c has the C shapes)."""

from __future__ import annotations

import unittest

import libroute as L
from libroute import ffi
from support import tokens

S = 10**9
MS = 10**6
KVB = 131072  # Param.KV_BYTES_PER_TOKEN's default


def pd_fleet(policy="llm-d-pd"):
    """Two decode instances (ids 0 and 2) and a prefill one (1), added
    interleaved: d0 shares a rack with p1, d2 only the region."""
    r = L.Router(policy, seed=7)
    ids = [r.add_instance("d0:8000", role=L.Role.DECODE, node=1, rack=1,
                          region=1),
           r.add_instance("p1:8000", role="prefill", node=2, rack=1,
                          region=1),
           r.add_instance("d2:8000", role=L.Role.DECODE, node=3, rack=2,
                          region=1)]
    assert ids == [0, 1, 2], ids
    return r


class Enums(unittest.TestCase):

    def test_values(self):
        self.assertEqual([int(x) for x in L.Role], [0, 1, 2])
        self.assertEqual([x.name for x in L.Role],
                         ["BOTH", "PREFILL", "DECODE"])
        self.assertEqual(L.Policy.LLMD_PD, 19)
        self.assertEqual(L.Policy.DYNAMO_PD, 20)
        self.assertEqual(L.Policy.LLMD_PD.label, "llm-d-pd")
        self.assertEqual(L.Policy.DYNAMO_PD.label, "dynamo-pd")
        self.assertIs(L.Policy.from_label("dynamo-pd"), L.Policy.DYNAMO_PD)
        self.assertEqual(L.Reason.WHOLE, 18)
        self.assertEqual(L.Reason.WHOLE.label, "whole")

    def test_params(self):
        want = [("KV_BYTES_PER_TOKEN", 49, KVB), ("KV_GBPS_NODE", 50, 300),
                ("KV_GBPS_RACK", 51, 50), ("KV_GBPS_REGION", 52, 12.5),
                ("KV_GBPS_WAN", 53, 1.25), ("PD_PREFILL_POLICY", 54, -1),
                ("PD_MIN_UNCACHED", 55, 16),
                ("PD_LOCAL_MAX_TOKENS", 56, 2048),
                ("PD_LOCAL_MAX_RATIO", 57, 0.7),
                ("ADAPTIVE_PD_STALL", 58, 0.1)]
        for name, key, default in want:
            with self.subTest(param=name):
                p = L.Param[name]
                self.assertEqual(p, key)
                self.assertEqual(p.bounds.default, default)
        self.assertGreaterEqual(L.param_count(), 59)

    def test_sizes(self):
        c = L.constants
        for macro, struct, field, size in (
                ("LR_DISPATCH_SIZE_V2", "lr_dispatch",
                 "prefill_cached_tokens", 4),
                ("LR_CANDIDATE_SIZE_V4", "lr_candidate", "region", 4),
                ("LR_CANDIDATE_SIZE_V5", "lr_candidate", "decode_s", 8),
                ("LR_CANDIDATE_SIZE_V6", "lr_candidate", "sibling_lost", 8),
                ("LR_DECISION_SIZE_V3", "lr_decision", "transfer_s", 8),
                ("LR_DISPATCHED_SIZE_V2", "lr_dispatched", "transfer_s", 8),
                ("LR_INSTANCE_SPEC_SIZE_V3", "lr_instance_spec", "region",
                 4)):
            with self.subTest(macro=macro):
                self.assertEqual(c[macro], ffi.offsetof(struct, field) + size)
                self.assertLessEqual(c[macro], ffi.sizeof(struct))

    def test_candidate_columns(self):
        c = L.Candidate(3)
        self.assertEqual((c.role, c.node, c.rack, c.region), (0, 0, 0, 0))
        t = L.Candidates([L.Candidate(0, role=L.Role.DECODE, node=4, rack=5,
                                      region=6),
                          {"instance": 1, "role": L.Role.PREFILL}])
        self.assertEqual((t[0].role, t[0].node, t[0].rack, t[0].region),
                         (L.Role.DECODE, 4, 5, 6))
        self.assertEqual(t[1].role, L.Role.PREFILL)
        self.assertEqual(t.cdata[0].rack, 5)
        with self.assertRaises(ValueError):
            L.Candidates([L.Candidate(0, node=-1)])
        self.assertEqual(c.decode_s, 0.0)
        t[0] = t[0]._replace(decode_s=2.5)
        self.assertEqual(t.cdata[0].decode_s, 2.5)


class RouterPd(unittest.TestCase):

    def test_split_decision_and_prefill_done(self):
        t = tokens(2000, 1)
        with pd_fleet() as r:
            d = r.route(t, request_id=1, now_ns=S)
            self.assertIn(d.instance, (0, 2))
            self.assertEqual(d.prefill_instance, 1)
            self.assertIsInstance(d.prefill_reason, L.Reason)
            self.assertEqual(d.prefill_cached_tokens, 0)
            self.assertIs(d.decider, L.Policy.LLMD_PD)
            self.assertGreater(d.transfer_s, 0)
            # the placement priced it: the rack's bandwidth from d0, the
            # region's from d2, for the prompt the decode instance lacks
            gbps = 50 if d.instance == 0 else 12.5
            self.assertAlmostEqual(d.transfer_s,
                                   (2000 - d.cached_tokens) * KVB
                                   / (gbps * 1e9))
            # both legs counted until the prefill leg ends
            self.assertEqual(r.instance_load(1).inflight, 1)
            self.assertGreaterEqual(r.instance_load(1).prefill_tokens,
                                    2000 - 16)
            dec = r.instance_load(d.instance)
            self.assertEqual((dec.inflight, dec.prefill_tokens), (1, 0))
            r.prefill_done(1, now_ns=S + 100 * MS)
            self.assertEqual(r.instance_load(1).inflight, 0)
            self.assertEqual(r.instance_load(d.instance).inflight, 1)
            r.prefill_done(1, now_ns=S + 101 * MS)  # a no-op
            with self.assertRaises(L.NotFoundError) as cm:
                r.prefill_done(77, now_ns=S + 101 * MS)
            self.assertEqual(cm.exception.status, L.Status.ENOENT)
            with self.assertRaises(ValueError):
                r.prefill_done(-1, now_ns=S)
            r.first_token(1, now_ns=S + 120 * MS)
            r.complete(1, 50, now_ns=2 * S)
            # the next turn: 8 new tokens stay whole where they decode
            t2 = t + tokens(8, 2)
            d2 = r.route(t2, request_id=2, now_ns=3 * S)
            self.assertIn(d2.instance, (0, 2))
            self.assertGreaterEqual(d2.cached_tokens, 2000 - 16)
            self.assertIsNone(d2.prefill_instance)
            self.assertIs(d2.prefill_reason, L.Reason.WHOLE)
            self.assertEqual(d2.transfer_s, 0.0)
            r.complete(2, 10, now_ns=4 * S)

    def test_aggregated_fleet_keeps_requests_whole(self):
        with L.Router("llm-d-pd", seed=7) as r:
            r.add_instance("a:8000")
            r.add_instance("b:8000", role=L.Role.DECODE)
            d = r.route(tokens(2000, 3), request_id=1, now_ns=S,
                        dry_run=True)
            self.assertIsNone(d.prefill_instance)
            self.assertIsNone(d.prefill_reason)
            self.assertEqual((d.prefill_cached_tokens, d.transfer_s),
                             (0, 0.0))
            # not split: prefill_done is a no-op on a request in flight
            r.route(tokens(64, 4), request_id=2, now_ns=S)
            r.prefill_done(2, now_ns=S + MS)
            self.assertEqual(r.stats().inflight, 1)

    def test_roles_and_placement_in_candidates(self):
        t = tokens(256, 5)
        with pd_fleet() as r:
            rows = r.candidates(t, now_ns=S)
            # the rows that decode first, each part in id order
            self.assertEqual([c.instance for c in rows], [0, 2, 1])
            self.assertEqual([c.role for c in rows],
                             [L.Role.DECODE, L.Role.DECODE, L.Role.PREFILL])
            self.assertEqual([(c.node, c.rack, c.region) for c in rows],
                             [(1, 1, 1), (3, 2, 1), (2, 1, 1)])
            # the table and the seed replay the pair
            inp = r.policy_input(t)
            d = r.route(t, request_id=1, now_ns=S, dry_run=True,
                        scores=True)
            self.assertEqual([s.instance for s in d.scores], [0, 2, 1])
            again = L.decide(r.policy, rows, seed=d.seed, **inp._asdict())
            self.assertEqual((again.instance, again.prefill_instance,
                              again.prefill_reason),
                             (d.instance, d.prefill_instance,
                              d.prefill_reason))
            self.assertAlmostEqual(again.transfer_s, d.transfer_s)
            self.assertEqual([s.instance for s in again.scores], [0, 2, 1])

    def test_bad_roles(self):
        with L.Router("llm-d-pd") as r:
            for role in (3, -1):
                with self.assertRaises(L.InvalidArgumentError):
                    r.add_instance("x:1", role=role)
            with self.assertRaises(ValueError):
                r.add_instance("x:1", role="neither")
            with self.assertRaises(ValueError):
                r.add_instance("x:1", role=2**31)
            with self.assertRaises(TypeError):
                r.add_instance("x:1", role=1.0)
            with self.assertRaises(ValueError):
                r.add_instance("x:1", rack=-1)
            self.assertEqual(r.instance_count, 0)
            # prefill instances alone cannot decode
            r.add_instance("p:1", role=L.Role.PREFILL)
            with self.assertRaises(L.StateError):
                r.route(tokens(64), request_id=1, now_ns=S)

    def test_waiting_request_keeps_its_prefill_leg(self):
        # two decode instances (0, 2) and two prefill ones (1, 3): the
        # fleet is saturated when both decode instances are, the idle
        # prefill ones aside
        with L.Router("llm-d-pd", seed=7) as r:
            for i, (name, role) in enumerate((("d0", L.Role.DECODE),
                                              ("p1", L.Role.PREFILL),
                                              ("d2", L.Role.DECODE),
                                              ("p3", L.Role.PREFILL))):
                self.assertEqual(r.add_instance(name, role=role,
                                                rack=1 + i % 2, region=1),
                                 i)
            prefill = (1, 3)
            r.set_param(L.Param.SATURATION_QUEUE, 1)
            for i in range(2):
                d = r.route(tokens(1024, 40 + i), request_id=1 + i,
                            now_ns=S + i * MS, may_wait=True)
                self.assertNotIn(d.instance, prefill)
                self.assertIn(d.prefill_instance, prefill)
            self.assertTrue(r.saturated(S + 2 * MS))
            d = r.route(tokens(1024, 50), request_id=3, now_ns=S + 3 * MS,
                        may_wait=True)
            self.assertIs(d.reason, L.Reason.WAITING)
            self.assertIsNone(d.prefill_instance)
            r.first_token(1, now_ns=S + 4 * MS)
            out = r.dispatch(S + 5 * MS)
            self.assertEqual(len(out), 1)
            e = out[0]
            self.assertEqual((e.request_id, e.status), (3, L.Status.OK))
            self.assertNotIn(e.instance, prefill)
            self.assertIn(e.prefill_instance, prefill)
            self.assertIs(e.prefill_reason, L.Reason.LEAST_LOADED)
            self.assertGreater(e.transfer_s, 0)
            self.assertEqual(e.prefill_cached_tokens, 0)
            self.assertEqual(e.waited_ns, 2 * MS)
            # both legs in flight until the prefill leg ends
            self.assertEqual(r.instance_load(e.prefill_instance).inflight,
                             1)
            r.prefill_done(3, now_ns=S + 6 * MS)
            self.assertEqual(r.instance_load(e.prefill_instance).inflight,
                             0)

    def test_pd_params(self):
        with pd_fleet("least-request") as r:
            with self.assertRaises(L.InvalidArgumentError):
                r.set_param(L.Param.PD_PREFILL_POLICY, L.Policy.ADAPTIVE)
            r.set_param(L.Param.PD_PREFILL_POLICY, L.Policy.ROUND_ROBIN)
            r.set_param("KV_GBPS_REGION", 25.0)
            # a policy without a pair rule always splits
            d = r.route(tokens(64, 6), request_id=1, now_ns=S)
            self.assertIn(d.instance, (0, 2))
            self.assertEqual(d.prefill_instance, 1)
            self.assertIs(d.prefill_reason, L.Reason.ROUND_ROBIN)


class LoadPd(unittest.TestCase):

    def test_prefill_leg(self):
        ld = L.Load(max_instances=4)
        for i in range(3):
            ld.add_instance(i)
        ld.dispatch(1, 0, prompt_tokens=2000, now_ns=S,
                    prefill_instance=2, prefill_cached_tokens=500)
        pre, dec = ld.get(2), ld.get(0)
        self.assertEqual((pre.inflight, pre.queued, pre.prefill_tokens),
                         (1, 1, 1500))
        self.assertEqual((dec.inflight, dec.queued, dec.prefill_tokens),
                         (1, 1, 0))
        self.assertEqual(ld.request(1), L.RequestState(0, True))
        ld.prefill_done(1, now_ns=S + MS)
        self.assertEqual(ld.get(2).inflight, 0)
        self.assertEqual(ld.get(0).inflight, 1)
        ld.prefill_done(1, now_ns=S + MS)  # a no-op
        with self.assertRaises(L.NotFoundError):
            ld.prefill_done(9, now_ns=S)
        # the first token ends an open prefill leg too
        ld.dispatch(2, 1, prompt_tokens=100, now_ns=S, prefill_instance=2)
        self.assertEqual(ld.get(2).inflight, 1)
        ld.first_token(2, now_ns=S + MS)
        self.assertEqual(ld.get(2).inflight, 0)
        # bad legs
        with self.assertRaises(L.InvalidArgumentError):
            ld.dispatch(3, 0, prompt_tokens=100, now_ns=S,
                        prefill_instance=0)
        with self.assertRaises(L.InvalidArgumentError):
            ld.dispatch(3, 0, prompt_tokens=100, now_ns=S,
                        prefill_instance=2, prefill_cached_tokens=101)
        with self.assertRaises(L.NotFoundError):
            ld.dispatch(3, 0, prompt_tokens=100, now_ns=S,
                        prefill_instance=3)
        with self.assertRaises(ValueError):
            ld.dispatch(3, 0, prompt_tokens=100, now_ns=S,
                        prefill_instance=-1)
        self.assertEqual(ld.inflight, 2)
        ld.close()


if __name__ == "__main__":
    unittest.main()
