"""Tiered KV caches: kv_stored(tier=) with and without token ids,
kv_removed(tier=) on the index and the router, match(tier=), the
candidate rows' cpu_tokens and disk_tokens, and the tier weights
(tests/test-tiers.c has the C shapes)."""

from __future__ import annotations

import unittest

import libroute as L
from support import tokens

S = 10**9
BT = 16
H = [11, 12, 13, 14]


def held(ix, t, instance, tier=L.Tier.GPU):
    """Tokens ``instance`` holds of ``t`` on ``tier`` (a dry run)."""
    m = ix.match(t, now_ns=S, touch=False, tier=tier)
    return next((h.tokens for h in m.hits if h.instance == instance), 0)


class Enums(unittest.TestCase):

    def test_values(self):
        self.assertEqual([int(t) for t in L.Tier], [0, 1, 2])
        self.assertEqual([t.name for t in L.Tier], ["GPU", "CPU", "DISK"])
        self.assertEqual(L.MatchFlag.TIER_CPU, 2)
        self.assertEqual(L.MatchFlag.TIER_DISK, 4)
        self.assertEqual(L.Param.TIER_CPU_WEIGHT, 47)
        self.assertEqual(L.Param.TIER_DISK_WEIGHT, 48)
        self.assertEqual(L.Param.TIER_CPU_WEIGHT.bounds,
                         L.Bounds(0.0, 1.0, 0.8))
        self.assertEqual(L.Param.TIER_DISK_WEIGHT.bounds,
                         L.Bounds(0.0, 1.0, 0.25))
        self.assertEqual(L.constants["LR_KV_STORED_SIZE_V2"],
                         L.ffi.offsetof("lr_kv_stored", "tier") + 4)

    def test_candidate_columns(self):
        c = L.Candidate(3)
        self.assertEqual((c.cpu_tokens, c.disk_tokens), (0, 0))
        t = L.Candidates([L.Candidate(0, cpu_tokens=32, disk_tokens=16)])
        self.assertEqual((t[0].cpu_tokens, t[0].disk_tokens), (32, 16))
        self.assertEqual(t.cdata[0].cpu_tokens, 32)


class IndexTiers(unittest.TestCase):

    def test_cpu_store_resolves_through_the_gpu(self):
        t = tokens(64, 1)
        ix = L.Index()
        ix.kv_stored(7, H, t, block_size=BT, now_ns=S)
        self.assertEqual(held(ix, t, 7, L.Tier.CPU), 0)
        # the last two blocks offloaded, hashes only: the chain goes along
        ix.kv_stored(7, H[2:], (), block_size=0, now_ns=S, tier=L.Tier.CPU)
        self.assertEqual(held(ix, t, 7), 64)
        self.assertEqual(held(ix, t, 7, L.Tier.CPU), 64)
        self.assertEqual(held(ix, t, 7, L.Tier.DISK), 0)
        # a GPU removal leaves the CPU copy
        self.assertEqual(ix.kv_removed(7, [H[1]]), 1)
        self.assertEqual(held(ix, t, 7), 16)
        self.assertEqual(held(ix, t, 7, L.Tier.CPU), 64)
        # a CPU removal takes the block and the deeper ones there only
        self.assertEqual(ix.kv_removed(7, [H[3]], tier=L.Tier.CPU), 1)
        self.assertEqual(held(ix, t, 7, L.Tier.CPU), 48)
        self.assertEqual(ix.kv_removed(7, [H[2]], tier=L.Tier.CPU), 1)
        self.assertEqual(held(ix, t, 7, L.Tier.CPU), 0)
        self.assertEqual(held(ix, t, 7), 16)
        # disk, then cleared: every tier
        ix.kv_stored(7, H[:1], (), block_size=0, now_ns=S,
                     tier=L.Tier.DISK)
        self.assertEqual(held(ix, t, 7, L.Tier.DISK), 16)
        ix.kv_cleared(7)
        self.assertEqual(held(ix, t, 7, L.Tier.DISK), 0)
        self.assertEqual(held(ix, t, 7), 0)
        ix.close()

    def test_errors(self):
        t = tokens(32, 2)
        ix = L.Index()
        ix.kv_stored(7, H[:2], t, block_size=BT, now_ns=S)
        # hashes no one stored on the GPU: nothing to place
        with self.assertRaises(L.NotFoundError):
            ix.kv_stored(7, [99, 98], (), block_size=0, now_ns=S,
                         tier=L.Tier.CPU)
        with self.assertRaises(L.NotFoundError):
            ix.kv_stored(8, H[:2], (), block_size=0, now_ns=S,
                         tier=L.Tier.CPU)
        self.assertEqual(held(ix, t, 7, L.Tier.CPU), 0)
        # a tier the library does not have
        with self.assertRaises(L.InvalidArgumentError):
            ix.kv_stored(7, H[:2], (), block_size=0, now_ns=S, tier=3)
        with self.assertRaises(L.InvalidArgumentError):
            ix.kv_removed(7, H[:1], tier=-1)
        with self.assertRaises(L.NotFoundError):
            ix.kv_removed(9, H[:1], tier=L.Tier.CPU)
        with self.assertRaises(ValueError):
            ix.kv_removed(7, H[:1], tier=2**31)
        with self.assertRaises(ValueError):
            ix.match(t, now_ns=S, tier=3)
        with self.assertRaises(TypeError):
            ix.match(t, now_ns=S, tier="cpu")
        self.assertEqual(held(ix, t, 7), 32)
        ix.close()


class RouterTiers(unittest.TestCase):
    """256 tokens, 16 blocks: a holds the first 128 on its GPU; b held
    all 256, offloaded them to its CPU, then its GPU evicted the first
    block (and with it the chain). Rows: a 128 + 0, b 0 + 256."""

    def setUp(self):
        self.t = tokens(256, 5)
        self.h = [100 + i for i in range(16)]

    def fleet(self, policy):
        r = L.Router(policy, seed=7)
        a, b = r.add_instance("10.0.0.1"), r.add_instance("10.0.0.2")
        r.kv_stored(a, self.h[:8], self.t[:128], block_size=BT, now_ns=S)
        r.kv_stored(b, self.h, self.t, block_size=BT, now_ns=S)
        r.kv_stored(b, self.h, [], block_size=0, now_ns=S,
                    tier=L.Tier.CPU)
        self.assertEqual(r.kv_removed(b, self.h[:1], tier=L.Tier.GPU), 1)
        return r, a, b

    def rows(self, r):
        return {c.instance: c for c in r.candidates(self.t, now_ns=S)}

    def test_rows_carry_cpu_tokens(self):
        for policy in ("dynamo", "adaptive"):
            with self.subTest(policy=policy):
                r, a, b = self.fleet(policy)
                rows = self.rows(r)
                self.assertEqual((rows[a].cached_tokens, rows[a].cpu_tokens),
                                 (128, 0))
                self.assertEqual((rows[b].cached_tokens, rows[b].cpu_tokens,
                                  rows[b].disk_tokens), (0, 256, 0))
                # CPU weight 0.8: b's 256 tokens are worth loading
                d = r.route(self.t, request_id=1, now_ns=S, dry_run=True)
                self.assertEqual(d.instance, b)
                self.assertEqual(r.get_param(L.Param.TIER_CPU_WEIGHT), 0.8)
                r.set_param(L.Param.TIER_CPU_WEIGHT, 0.25)
                d = r.route(self.t, request_id=2, now_ns=S, dry_run=True)
                self.assertEqual(d.instance, a)
                with self.assertRaises(L.OutOfRangeError):
                    r.set_param(L.Param.TIER_CPU_WEIGHT, 1.5)
                # a block on both tiers counts on the GPU
                r.kv_stored(b, self.h[:4], self.t[:64], block_size=BT,
                            now_ns=S)
                rows = self.rows(r)
                self.assertEqual((rows[b].cached_tokens, rows[b].cpu_tokens),
                                 (64, 192))
                # the CPU tier drops its last 4 blocks
                self.assertEqual(r.kv_removed(b, self.h[12:13],
                                              tier=L.Tier.CPU), 1)
                self.assertEqual(self.rows(r)[b].cpu_tokens, 128)
                with self.assertRaises(L.NotFoundError):
                    r.kv_removed(99, self.h[:1], tier=L.Tier.CPU)
                with self.assertRaises(L.NotFoundError):
                    r.kv_stored(a, self.h[11:12], [], block_size=0,
                                now_ns=S, tier=L.Tier.DISK)
                r.close()

    def test_decide_reads_the_columns(self):
        rows = L.Candidates([L.Candidate(0, cached_tokens=128),
                             L.Candidate(1, cpu_tokens=256)])
        self.assertEqual(L.decide("dynamo", rows, prompt_tokens=256)
                         .instance, 1)
        params = {L.Param.TIER_CPU_WEIGHT: 0.25}
        self.assertEqual(L.decide("dynamo", rows, prompt_tokens=256,
                                  params=params).instance, 0)
        # tiers past the prompt
        bad = L.Candidates([L.Candidate(0, cached_tokens=128,
                                        cpu_tokens=256)])
        with self.assertRaises(L.InvalidArgumentError):
            L.decide("dynamo", bad, prompt_tokens=256)


if __name__ == "__main__":
    unittest.main()
