"""Load: exact counters through a request's lifecycle, moves, scrapes."""

from __future__ import annotations

import math
import unittest

import libroute as L

S = 10**9


class LoadTest(unittest.TestCase):

    def setUp(self):
        self.ld = L.Load(max_instances=8, max_requests=64)
        self.addCleanup(self.ld.close)
        self.ld.add_instance(0)
        self.ld.add_instance(1, instance_class=2, prefix_caching=False)

    def test_lifecycle_returns_to_zero(self):
        ld = self.ld
        ld.dispatch(7, 0, prompt_tokens=900, cached_tokens=512,
                    expected_output_tokens=100, now_ns=S)
        s = ld.get(0)
        self.assertEqual((s.inflight, s.queued), (1, 1))
        self.assertEqual(s.prefill_tokens, 388)
        self.assertEqual(s.queued_tokens, 900)
        self.assertEqual(ld.inflight, 1)
        self.assertEqual(ld.request(7), L.RequestState(0, True))
        ld.first_token(7, now_ns=2 * S)
        ld.first_token(7, now_ns=2 * S)  # a repeat is a no-op
        self.assertEqual(ld.request(7), L.RequestState(0, False))
        s = ld.get(0)
        self.assertEqual((s.inflight, s.queued), (1, 0))
        self.assertEqual(s.last_first_token_ns, 2 * S)
        ld.complete(7, 120, now_ns=3 * S)
        s = ld.get(0)
        self.assertEqual((s.inflight, s.queued, s.prefill_tokens,
                          s.kv_tokens, s.decode_tokens), (0, 0, 0, 0, 0))
        with self.assertRaises(L.NotFoundError):
            ld.complete(7, 1, now_ns=4 * S)
        with self.assertRaises(L.NotFoundError):
            ld.request(7)

    def test_fail_and_duplicates(self):
        ld = self.ld
        ld.dispatch(1, 0, prompt_tokens=10, now_ns=S)
        with self.assertRaises(L.AlreadyExistsError):
            ld.dispatch(1, 1, prompt_tokens=10, now_ns=S)
        ld.fail(1)
        self.assertEqual(ld.inflight, 0)
        with self.assertRaises(L.InvalidArgumentError):
            ld.dispatch(2, 0, prompt_tokens=10, cached_tokens=11, now_ns=S)
        with self.assertRaises(L.NotFoundError):
            ld.dispatch(2, 5, prompt_tokens=10, now_ns=S)

    def test_move(self):
        ld = self.ld
        ld.dispatch(1, 0, prompt_tokens=100, alt_instance=1,
                    alt_cached_tokens=50, now_ns=S)
        ld.move(1, 1, cached_tokens=50)
        self.assertEqual(ld.request(1).instance, 1)
        self.assertEqual(ld.get(1).prefill_tokens, 50)
        self.assertEqual(ld.get(0).inflight, 0)
        ld.first_token(1, now_ns=2 * S)
        with self.assertRaises(L.StateError):
            ld.move(1, 0)

    def test_instances(self):
        s = self.ld.get(1)
        self.assertEqual(s.instance_class, 2)
        self.assertIs(s.prefix_caching, False)
        with self.assertRaises(L.AlreadyExistsError):
            self.ld.add_instance(1)
        with self.assertRaises(L.LimitError):
            self.ld.add_instance(8)
        self.ld.remove_instance(1)
        with self.assertRaises(L.NotFoundError):
            self.ld.get(1)

    def test_scrapes_and_rtt(self):
        ld = self.ld
        self.assertFalse(ld.get(0).has_stats)
        ld.set_stats(0, running=3, waiting=2, kv_use=0.5, scraped_ns=5 * S)
        ld.set_stats(0, running=9, waiting=9, kv_use=0.9, scraped_ns=4 * S)
        s = ld.get(0)
        self.assertTrue(s.has_stats)
        self.assertEqual((s.running, s.waiting, s.kv_use, s.scraped_ns),
                         (3, 2, 0.5, 5 * S))
        with self.assertRaises(L.InvalidArgumentError):
            ld.set_stats(0, running=1, waiting=1, kv_use=1.5, scraped_ns=S)
        with self.assertRaises(L.InvalidArgumentError):
            ld.set_stats(0, running=1, waiting=1, kv_use=math.nan,
                         scraped_ns=S)
        ld.observe_rtt(0, 1_000_000)
        s = ld.get(0)
        self.assertTrue(s.has_rtt)
        self.assertEqual(s.rtt_ns, 1_000_000)
        with self.assertRaises(L.OutOfRangeError):
            ld.observe_rtt(0, L.constants["LR_LOAD_MAX_RTT_NS"] + 1)

    def test_options(self):
        with self.assertRaises(L.InvalidArgumentError):
            L.Load(rtt_alpha=2.0)
        with L.Load(max_requests=1) as ld:
            ld.add_instance(0)
            ld.dispatch(1, 0, prompt_tokens=1, now_ns=S)
            with self.assertRaises(L.LimitError):
                ld.dispatch(2, 0, prompt_tokens=1, now_ns=S)


if __name__ == "__main__":
    unittest.main()
