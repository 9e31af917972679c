"""Many gateway replicas: KV-event batches in sequence, deltas between
replicas, load gauges, snapshot and restore, through the binding."""

from __future__ import annotations

import struct
import unittest
from pathlib import Path

import libroute as L

SEC = 1_000_000_000
T0 = 1000 * SEC
FLEET = Path(__file__).resolve().parents[3] / "tests" / "data" / "kv-events"


def batch(ts: float, events: bytes = b"\x90") -> bytes:
    """An array-form vLLM batch [ts, events, 0] (events: a msgpack array)."""
    return b"\x93\xcb" + struct.pack(">d", ts) + events + b"\x00"


def stored(hashes, tokens, parent=None) -> bytes:
    """A positional BlockStored event, 16-token blocks."""
    def uint(v: int) -> bytes:
        return b"\xcf" + struct.pack(">Q", v)

    out = b"\x9b" + b"\xabBlockStored"
    out += bytes([0x90 | len(hashes)]) + b"".join(uint(h) for h in hashes)
    out += b"\xc0" if parent is None else uint(parent)
    out += b"\xdc" + struct.pack(">H", len(tokens))
    out += b"".join(b"\xce" + struct.pack(">I", t) for t in tokens)
    out += b"\x10\xc0\xa3GPU\xc0\xc0\x00\xaefull_attention"
    return out


def toks(n: int, seed: int):
    return [(seed * 7919 + i * 104729) % 50000 for i in range(n)]


def fleet(router: L.Router, n: int = 3):
    for i in range(n):
        router.add_instance(f"e{i}")


class FleetBatches(unittest.TestCase):
    """The real vLLM batches of tests/data/kv-events (its README)."""

    def test_every_file(self):
        files = sorted(FLEET.glob("*.msgpack"))
        self.assertEqual(len(files), 10)
        tokens = list(range(1000, 1064))
        for f in files:
            with self.subTest(file=f.name):
                ix = L.Index()
                info = ix.vllm_batch(7, f.read_bytes(), now_ns=T0)
                self.assertEqual(info.stored, 1)
                self.assertEqual(info.done, info.events)
                skipped = 1 if ("group" in f.name
                                and "mla" not in f.name
                                and "no_group" not in f.name) else 0
                self.assertEqual(info.skipped, skipped)
                # The CPU-offload connector's store is taken since 0.3
                # (lower tiers), but its hashes are none the GPU stored:
                # unplaced, as tests/test-vllm.c fleet_files has it.
                self.assertEqual(info.unplaced,
                                 1 if "offload" in f.name else 0)
                self.assertEqual(info.invalid,
                                 1 if "no_group_idx" in f.name else 0)
                m = ix.match(tokens, now_ns=T0)
                self.assertEqual(m.hits[0].tokens, 64)


class Sequence(unittest.TestCase):
    def test_gap_replay_restart_reset(self):
        with L.Router("prefix-cache") as r:
            fleet(r)
            b = [batch(10.0 + k, b"\x91" + stored([100 + k], toks(16, k)))
                 for k in range(4)]
            info = r.vllm_batch_seq(1, 0, b[0], now_ns=T0)
            self.assertEqual(info.seq_state, L.KvSeq.FIRST)
            self.assertEqual(info.next_seq, 1)
            self.assertEqual(r.vllm_batch_seq(1, 0, b[0], now_ns=T0).seq_state,
                             L.KvSeq.DUPLICATE)
            with self.assertRaises(L.GapError) as cm:
                r.vllm_batch_seq(1, 2, b[2], now_ns=T0)
            self.assertEqual(cm.exception.info.next_seq, 1)
            self.assertEqual(cm.exception.info.seq_state, L.KvSeq.GAP)
            src = r.kv_source(1)
            self.assertTrue(src.gap)
            self.assertEqual(src.next_seq, 1)
            for k in (1, 2, 3):  # the replay
                r.vllm_batch_seq(1, k, b[k], now_ns=T0)
            self.assertFalse(r.kv_source(1).gap)
            self.assertEqual(r.stats().kv_gaps, 1)
            self.assertEqual(r.stats().kv_duplicates, 1)
            # the engine restarts: number 0 again, a later time
            info = r.vllm_batch_seq(1, 0, batch(50.0), now_ns=T0)
            self.assertEqual(info.seq_state, L.KvSeq.RESTART)
            self.assertEqual(r.kv_source(1).restarts, 1)
            self.assertEqual(r.candidates(toks(16, 0), now_ns=T0)[1]
                             .cached_tokens, 0)
            r.kv_reset(1)
            self.assertFalse(r.kv_source(1).has_seq)
            with self.assertRaises(L.NotFoundError):
                r.kv_reset(9)
            with self.assertRaises(L.NotFoundError):
                r.kv_source(9)


class Deltas(unittest.TestCase):
    def test_peer_key(self):
        key = bytes(range(16))
        a = L.Router("prefix-cache", replica_id=11)
        b = L.Router("prefix-cache", replica_id=12)
        fleet(a)
        fleet(b)
        a.set_peer_key(key)
        a.route(toks(64, 1), request_id=1, now_ns=T0)
        d = a.export_delta().data
        g = a.export_gauges()
        with self.assertRaises(L.CorruptError):  # b has no key
            b.import_delta(d, now_ns=T0)
        b.set_peer_key(bytes(16))  # another key
        with self.assertRaises(L.CorruptError):
            b.import_gauges(g, now_ns=T0)
        b.set_peer_key(key)
        b.import_delta(d, now_ns=T0)
        b.import_gauges(g, now_ns=T0)
        self.assertEqual(b.stats().deltas_imported, 1)
        with self.assertRaises(L.InvalidArgumentError):
            b.set_peer_key(b"short")
        b.set_peer_key(None)
        with self.assertRaises(L.CorruptError):
            b.import_delta(d, now_ns=T0)

    def test_once_and_no_echo(self):
        a = L.Router("prefix-cache", replica_id=11)
        b = L.Router("prefix-cache", replica_id=12, remote_ttl_ns=60 * SEC)
        fleet(a)
        fleet(b)
        for i in range(3):
            a.route(toks(64, i), request_id=i + 1, now_ns=T0)
        d = a.export_delta()
        b.import_delta(d.data, now_ns=T0)
        b.import_delta(d.data, now_ns=T0 + SEC)  # the same: nothing new
        a.import_delta(d.data, now_ns=T0)  # its own echo
        self.assertEqual(b.stats().deltas_imported, 1)
        self.assertEqual(b.stats().deltas_skipped, 1)
        self.assertEqual(a.stats().deltas_skipped, 1)
        self.assertEqual(a.stats().deltas_exported, 1)
        # B exports none of what it imported
        self.assertEqual(len(b.export_delta().data), len(
            L.Router(replica_id=12).export_delta().data))


class Gauges(unittest.TestCase):
    def test_shared_load(self):
        a = L.Router("round-robin", replica_id=1)
        b = L.Router("least-request", replica_id=2)
        fleet(a)
        fleet(b)
        for i in range(1, 5):  # four in flight on A: 2, 1, 1
            a.route(toks(16, i), request_id=i, now_ns=T0,
                    learn=False)
        b.import_gauges(a.export_gauges(), now_ns=T0)
        rows = b.candidates(toks(16, 9), now_ns=T0)
        self.assertEqual(sum(c.inflight for c in rows), 4)
        d = b.route(toks(16, 9), request_id=1, now_ns=T0)
        self.assertEqual(rows[d.instance].inflight, 1)
        self.assertEqual(b.stats().gauges_imported, 1)
        rows = b.candidates(toks(16, 9), now_ns=T0 + 3 * SEC)
        self.assertEqual(sum(c.inflight for c in rows), 1)  # its own
        with self.assertRaises(L.StateError):
            L.Router().export_gauges()  # no replica id
        with self.assertRaises(L.CorruptError):
            b.import_gauges(b"LRGA\x01\x00" + bytes(34), now_ns=T0)


class Snapshot(unittest.TestCase):
    def test_roundtrip(self):
        a = L.Router("prefix-cache", replica_id=5)
        fleet(a, 4)
        a.drain_instance(3, True)
        for i in range(6):
            a.route(toks(96, i), request_id=i + 1, now_ns=T0)
        a.vllm_batch_seq(2, 40, batch(1.0, b"\x91" + stored([7], toks(16, 99))),
                         now_ns=T0)
        snap = a.snapshot(now_ns=T0 + SEC)
        b = L.Router("prefix-cache", replica_id=6)
        b.restore(snap, now_ns=T0 + 2 * SEC)
        self.assertEqual(b.instance_count, 4)
        self.assertEqual(b.find_instance("e2"), 2)
        self.assertEqual(b.kv_source(2).next_seq, 41)
        self.assertEqual(b.stats().routable, 3)
        for i in range(6):
            ra = a.candidates(toks(96, i), now_ns=T0 + 2 * SEC)
            rb = b.candidates(toks(96, i), now_ns=T0 + 2 * SEC)
            self.assertEqual([c.cached_tokens for c in ra],
                             [c.cached_tokens for c in rb])
        # the same bytes but for the writer's id in the header (and so the
        # checksum)
        self.assertEqual(b.snapshot(now_ns=T0 + SEC)[32:-8], snap[32:-8])
        with self.assertRaises(L.StateError):
            b.restore(snap, now_ns=T0)
        with self.assertRaises(L.CorruptError):
            L.Router().restore(snap[:-1], now_ns=T0)
        bad = bytearray(snap)
        bad[4] = 9
        with self.assertRaises((L.VersionError, L.CorruptError)):
            L.Router().restore(bytes(bad), now_ns=T0)


if __name__ == "__main__":
    unittest.main()
