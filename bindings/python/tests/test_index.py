"""Index: learn and match, keys, capacity, TTL, KV events, deltas, and
handle ownership."""

from __future__ import annotations

import array
import gc
import unittest
import weakref

import libroute as L
from support import msgpack_batch, tokens

S = 10**9  # one second in ns


class IndexBasics(unittest.TestCase):

    def setUp(self):
        self.idx = L.Index(capacity_blocks=4096, block_tokens=16)
        self.addCleanup(self.idx.close)

    def test_learn_then_match(self):
        t = tokens(100)
        self.idx.learn(t, 3, now_ns=S)
        m = self.idx.match(t, now_ns=S)
        self.assertEqual(m, L.Match((L.Hit(3, 96),), 96, 6))
        # A longer prompt with the same start matches its cached prefix.
        m = self.idx.match(t + tokens(50, seed=9), now_ns=S)
        self.assertEqual(m.hits, (L.Hit(3, 96),))
        self.assertEqual(self.idx.match(tokens(100, 5), now_ns=S).hits, ())

    def test_hits_deepest_first(self):
        t = tokens(160)
        self.idx.learn(t[:64], 1, now_ns=S)
        self.idx.learn(t, 2, now_ns=S)
        self.assertEqual(self.idx.match(t, now_ns=S).hits,
                         (L.Hit(2, 160), L.Hit(1, 64)))

    def test_many_hits_grow_the_buffer(self):
        # More hits than the wrapper's first buffer: LR_EBUFSIZE, retried.
        t = tokens(48)
        for inst in range(100):
            self.idx.learn(t, inst, now_ns=S)
        m = self.idx.match(t, now_ns=S)
        self.assertEqual(len(m.hits), 100)
        self.assertEqual(sorted(h.instance for h in m.hits), list(range(100)))

    def test_tenant_salt_isolates(self):
        t = tokens(64)
        self.idx.learn(t, 1, now_ns=S, tenant_salt=7)
        self.assertEqual(self.idx.match(t, now_ns=S).hits, ())
        self.assertEqual(len(self.idx.match(t, now_ns=S,
                                            tenant_salt=7).hits), 1)

    def test_keys_instead_of_tokens(self):
        t = tokens(100)
        keys = L.block_keys(t, 16)
        self.idx.learn(None, 4, now_ns=S, keys=keys, n_tokens=len(t))
        self.assertEqual(self.idx.match(t, now_ns=S).hits, (L.Hit(4, 96),))
        self.assertEqual(self.idx.match(None, now_ns=S, keys=keys,
                                        n_tokens=100).hits, (L.Hit(4, 96),))
        with self.assertRaises(TypeError):
            self.idx.match(None, now_ns=S, keys=keys)
        with self.assertRaises(TypeError):
            self.idx.match(None, now_ns=S)
        with self.assertRaises(L.InvalidArgumentError):
            self.idx.match(None, now_ns=S, keys=keys, n_tokens=10)

    def test_boundaries(self):
        t = tokens(200)
        self.idx.learn(t, 1, now_ns=S, boundaries=[40, 120])
        self.assertEqual(self.idx.instance_blocks(1), 12)
        with self.assertRaises(L.InvalidArgumentError):
            self.idx.learn(t, 1, now_ns=S, boundaries=[120, 40])

    def test_stats_and_instance_blocks(self):
        self.idx.learn(tokens(64), 1, now_ns=S)
        self.idx.learn(tokens(32), 2, now_ns=S, trust=L.Trust.REMOTE)
        st = self.idx.stats()
        self.assertIsInstance(st, L.IndexStats)
        self.assertEqual(st.blocks, 6)
        self.assertEqual(st.remote_blocks, 2)
        self.assertEqual(st.instances, 2)
        self.assertEqual(st.learned_blocks, 6)
        self.assertGreater(st.bytes, 0)
        self.assertEqual(self.idx.instance_blocks(1), 4)
        with self.assertRaises(L.NotFoundError):
            self.idx.instance_blocks(99)
        self.assertEqual(self.idx.block_tokens, 16)

    def test_remove_instance(self):
        self.idx.learn(tokens(64), 1, now_ns=S)
        self.idx.remove_instance(1)
        self.assertEqual(self.idx.stats().blocks, 0)
        with self.assertRaises(L.NotFoundError):
            self.idx.remove_instance(1)

    def test_bad_arguments(self):
        with self.assertRaises(L.InvalidArgumentError):
            self.idx.learn(tokens(32), L.INSTANCE_NONE, now_ns=S)
        with self.assertRaises(L.InvalidArgumentError):
            self.idx.learn(tokens(32), 1, now_ns=S, trust=5)
        with self.assertRaises(ValueError):
            self.idx.learn(tokens(32), -1, now_ns=S)
        with self.assertRaises(ValueError):
            self.idx.learn(tokens(32), 1, now_ns=-5)

    def test_zero_copy_tokens_stay_usable(self):
        a = array.array("I", tokens(64))
        self.idx.learn(a, 1, now_ns=S, boundaries=array.array("I", [32]))
        self.assertEqual(self.idx.match(a, now_ns=S).hits, (L.Hit(1, 64),))
        a.append(1)  # no view is left behind


class IndexTimeAndCapacity(unittest.TestCase):

    def test_ttl_expiry(self):
        with L.Index(ttl_ns=10 * S) as idx:
            idx.learn(tokens(64), 1, now_ns=S)
            idx.expire(5 * S)
            self.assertEqual(idx.stats().blocks, 4)
            # 95 s on, past the clock's 60 s skew: refused once (a stray
            # timestamp never moves the clock), taken at the retry
            with self.assertRaises(L.OutOfRangeError):
                idx.expire(100 * S)
            self.assertEqual(idx.stats().blocks, 4)
            idx.expire(100 * S)
            st = idx.stats()
            self.assertEqual(st.blocks, 0)
            self.assertEqual(st.expired_blocks, 4)

    def test_dry_run_match_does_not_refresh(self):
        with L.Index(ttl_ns=10 * S) as idx:
            t = tokens(64)
            idx.learn(t, 1, now_ns=S)
            idx.match(t, now_ns=8 * S, touch=False)
            idx.expire(12 * S)
            self.assertEqual(idx.stats().blocks, 0)
            idx.learn(t, 1, now_ns=S)
            idx.match(t, now_ns=8 * S)
            idx.expire(12 * S)
            self.assertEqual(idx.stats().blocks, 4)

    def test_capacity_evicts(self):
        with L.Index(capacity_blocks=8) as idx:
            for i in range(10):
                idx.learn(tokens(64, seed=i), i % 3, now_ns=S + i)
            st = idx.stats()
            self.assertLessEqual(st.blocks, 8)
            self.assertGreater(st.evicted_blocks, 0)

    def test_bad_options(self):
        with self.assertRaises(L.InvalidArgumentError):
            L.Index(block_tokens=10**6)
        with self.assertRaises(ValueError):
            L.Index(capacity_blocks=-1)
        with self.assertRaises(TypeError):
            L.Index(seed="x")


class IndexKvEvents(unittest.TestCase):

    def setUp(self):
        self.idx = L.Index(block_tokens=16)
        self.addCleanup(self.idx.close)

    def test_stored_removed_cleared(self):
        t = tokens(64)
        # Two engine blocks of 32 tokens, then one more chained on them.
        self.idx.kv_stored(1, [101, 102], t, block_size=32, now_ns=S)
        self.assertEqual(self.idx.match(t, now_ns=S).hits, (L.Hit(1, 64),))
        more = tokens(32, seed=4)
        self.idx.kv_stored(1, [103], more, block_size=32, now_ns=S,
                           parent_hash=102)
        self.assertEqual(self.idx.match(t + more, now_ns=S).hits,
                         (L.Hit(1, 96),))
        self.assertEqual(self.idx.stats().engine_hashes, 3)
        # Removing block 102 takes its descendant 103 with it.
        self.assertEqual(self.idx.kv_removed(1, [102, 999]), 1)
        self.assertEqual(self.idx.match(t + more, now_ns=S).hits,
                         (L.Hit(1, 32),))
        self.idx.kv_cleared(1)
        self.assertEqual(self.idx.match(t, now_ns=S).hits, ())

    def test_unknown_parent_and_bad_sizes(self):
        t = tokens(32)
        with self.assertRaises(L.NotFoundError):
            self.idx.kv_stored(1, [5], t, block_size=32, now_ns=S,
                               parent_hash=4)
        with self.assertRaises(L.NotSupportedError):
            self.idx.kv_stored(1, [5], t[:24], block_size=24, now_ns=S)
        with self.assertRaises(L.InvalidArgumentError):
            self.idx.kv_stored(1, [5, 6], t, block_size=32, now_ns=S)
        with self.assertRaises(L.NotFoundError):
            self.idx.kv_cleared(42)

    def test_vllm_batch_rejects_garbage(self):
        with self.assertRaises(L.CorruptError) as cm:
            self.idx.vllm_batch(1, b"\xc1not msgpack", now_ns=S)
        self.assertIsInstance(cm.exception.info, L.VllmBatchInfo)
        with self.assertRaises(TypeError):
            self.idx.vllm_batch(1, "a str", now_ns=S)


class IndexVllm(unittest.TestCase):

    def test_block_stored_batch(self):
        t = tokens(64)
        ev = ["BlockStored", [11, 12], None, t, 32, None, "GPU"]
        payload = msgpack_batch([ev])
        with L.Index(block_tokens=16) as idx:
            info = idx.vllm_batch(1, payload, now_ns=S)
            self.assertEqual(info.events, 1)
            self.assertEqual(info.stored, 1)
            self.assertEqual(info.done, 1)
            self.assertEqual(info.timestamp, 1.5)
            self.assertEqual(idx.match(t, now_ns=S).hits, (L.Hit(1, 64),))
            # Zero-copy: a memoryview over a bytearray works too.
            rm = msgpack_batch([["BlockRemoved", [12], "GPU"]])
            info = idx.vllm_batch(1, memoryview(bytearray(rm)), now_ns=S)
            self.assertEqual(info.removed, 1)
            self.assertEqual(idx.match(t, now_ns=S).hits, (L.Hit(1, 32),))


class IndexDeltas(unittest.TestCase):

    def test_export_import_and_marks(self):
        a, b = L.Index(), L.Index()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        t1, t2 = tokens(64, 1), tokens(64, 2)
        a.learn(t1, 1, now_ns=S)
        d1 = a.export_delta()
        self.assertIsInstance(d1.data, bytes)
        self.assertEqual(d1.mark, a.mark())
        b.import_delta(d1.data, now_ns=S)
        self.assertEqual(b.match(t1, now_ns=S).hits, (L.Hit(1, 64),))
        self.assertEqual(b.stats().remote_blocks, 4)
        a.learn(t2, 2, now_ns=S)
        d2 = a.export_delta(d1.mark)
        b.import_delta(memoryview(d2.data), now_ns=S)  # any bytes-like
        self.assertEqual(b.match(t2, now_ns=S).hits, (L.Hit(2, 64),))
        self.assertLess(len(d2.data), len(a.export_delta().data))

    def test_corrupt_delta(self):
        with L.Index() as a, L.Index() as b:
            a.learn(tokens(64), 1, now_ns=S)
            data = bytearray(a.export_delta().data)
            data[len(data) // 2] ^= 0xFF
            with self.assertRaises(L.CorruptError):
                b.import_delta(data, now_ns=S)
            with self.assertRaises(L.LrError):
                b.import_delta(b"", now_ns=S)
            self.assertEqual(b.stats().blocks, 0)
            with self.assertRaises(L.InvalidArgumentError):
                a.export_delta(a.mark() + 100)


class IndexOwnership(unittest.TestCase):

    def test_close_is_idempotent_and_final(self):
        idx = L.Index()
        self.assertFalse(idx.closed)
        idx.close()
        idx.close()
        self.assertTrue(idx.closed)
        with self.assertRaises(L.ClosedError):
            idx.stats()
        with self.assertRaises(L.ClosedError):
            idx.learn(tokens(16), 1, now_ns=1)
        with self.assertRaises(L.ClosedError):
            with idx:
                pass
        self.assertIn("closed", repr(idx))

    def test_context_manager(self):
        with L.Index() as idx:
            idx.learn(tokens(16), 1, now_ns=1)
        self.assertTrue(idx.closed)

    def test_garbage_collection_frees(self):
        idx = L.Index()
        ref = weakref.ref(idx)
        del idx
        gc.collect()
        self.assertIsNone(ref())


if __name__ == "__main__":
    unittest.main()
