"""Many gateway replicas, one view of the caches (docs/scale.md).

Two ways, each a class the gateway starts beside its HTTP server; the
library owns no socket, these classes are the host's wiring:

- KvEventSubscriber: every engine's vLLM KV-cache events over ZeroMQ
  (precise mode). One SUB socket per engine; each message is [topic,
  sequence number (8 bytes big endian), msgpack payload] and goes to
  Router.vllm_batch_seq(). A gap (GapError) is replayed from the engine's
  replay socket (vLLM's: send the first sequence number wanted, receive
  every batch kept from there, then -1); a replay that cannot be had
  resets the engine's routes (Router.kv_reset). The gateway routes with
  learn=False: the engines' events are the truth.
- RedisSync: placement deltas and load gauges over one Redis pub/sub
  channel per fleet, and snapshots of the router in Redis every few
  seconds, read back at start. Publishing fails open: while Redis is down
  the gateway routes on what it knows, keeps its delta mark where it was
  (the next delta that gets through covers the outage) and publishes a
  full delta once Redis is back, so that the others catch up.

Both need Debian's python3-zmq / python3-redis (tools/deps.sh installs
them); msgpack only the fake engine.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import libroute

END_SEQ = -1


def now_ns() -> int:
    return time.monotonic_ns()


def new_replica_id() -> int:
    """A replica id for this process incarnation (docs/scale.md)."""
    return int.from_bytes(os.urandom(8), "little") or 1


# ---- KV events over ZeroMQ ---------------------------------------------------


class KvEventSubscriber:
    """Applies every engine's KV-event batches to the router, in order and
    once, replaying gaps (see the module comment). ``endpoints`` maps a
    router instance id to (PUB endpoint, replay endpoint)."""

    def __init__(self, router: libroute.Router,
                 endpoints: Dict[int, Tuple[str, str]],
                 replay_timeout_s: float = 2.0) -> None:
        import zmq  # Debian python3-zmq
        self.zmq = zmq
        self.router = router
        self.endpoints = dict(endpoints)
        self.replay_timeout_s = replay_timeout_s
        self.ctx = zmq.Context.instance()
        self.lock = threading.Lock()
        self.counts = {"batches": 0, "duplicates": 0, "gaps": 0,
                       "replays": 0, "replayed": 0, "resets": 0,
                       "corrupt": 0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="kv-events")
        self.thread.start()

    def _count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def status(self) -> Dict[str, Any]:
        with self.lock:
            return dict(self.counts)

    def _apply(self, inst: int, seq: int, payload: bytes) -> Optional[int]:
        """One batch; the sequence number to replay from on a gap."""
        try:
            info = self.router.vllm_batch_seq(inst, seq, payload,
                                              now_ns=now_ns())
        except libroute.GapError as e:
            return e.info.next_seq  # type: ignore[attr-defined]
        except libroute.CorruptError:
            self._count("corrupt")
            return None
        except libroute.NotFoundError:
            return None  # the instance went away
        if info.seq_state == libroute.KvSeq.DUPLICATE:
            self._count("duplicates")
        else:
            self._count("batches")
        return None

    def _replay(self, inst: int, start: int) -> None:
        """Ask the engine for every batch from ``start`` and apply them; if
        it cannot say, what it cached here is dropped."""
        zmq = self.zmq
        self._count("gaps")
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoints[inst][1])
        ok = False
        try:
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            deadline = time.monotonic() + self.replay_timeout_s
            while time.monotonic() < deadline and not self.stop.is_set():
                if not sock.poll(100):
                    continue
                frames = sock.recv_multipart()
                if len(frames) != 3:
                    continue
                seq = int.from_bytes(frames[1], "big", signed=True)
                if seq == END_SEQ:
                    ok = True
                    break
                # a gap inside the replay: the engine no longer has it
                if self._apply(inst, seq, frames[2]) is not None:
                    break
                self._count("replayed")
        finally:
            sock.close()
        if ok:
            self._count("replays")
        # not replayed (timeout, or the engine no longer keeps it): what
        # this router knows of the engine cannot be trusted
        if not ok or self.router.kv_source(inst).gap:
            self.router.kv_reset(inst)
            self._count("resets")

    def _run(self) -> None:
        zmq = self.zmq
        poller = zmq.Poller()
        socks: Dict[Any, int] = {}
        for inst, (pub, _) in self.endpoints.items():
            s = self.ctx.socket(zmq.SUB)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVHWM, 100000)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect(pub)
            poller.register(s, zmq.POLLIN)
            socks[s] = inst
        try:
            while not self.stop.is_set():
                for s, _ in poller.poll(100):
                    frames = s.recv_multipart()
                    if len(frames) != 3:  # [topic, seq, payload]
                        self._count("corrupt")
                        continue
                    inst = socks[s]
                    seq = int.from_bytes(frames[1], "big")
                    gap = self._apply(inst, seq, frames[2])
                    if gap is not None:
                        self._replay(inst, gap)
        finally:
            for s in socks:
                s.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


# ---- deltas, gauges and snapshots over Redis ----------------------------------


class RedisSync:
    """Deltas and gauges on the fleet's channel, snapshots in a hash (see
    the module comment). ``name`` identifies this gateway's snapshot;
    ``backends`` (the configured names, in order) must match the stored
    one for a snapshot to be restored."""

    FULL_EVERY_S = 10.0  # a full delta this often: heals lost ones

    def __init__(self, router: libroute.Router, host: str, port: int, *,
                 fleet: str, name: str, backends: List[str],
                 sync_s: float = 0.05, gauge_s: float = 0.2,
                 snapshot_s: float = 2.0) -> None:
        import redis  # Debian python3-redis
        self.redis_mod = redis
        self.router = router
        self.channel = f"libroute:{fleet}:sync"
        self.key = f"libroute:{fleet}:snapshot:{name}"
        self.backends = json.dumps(backends)
        self.sync_s, self.gauge_s, self.snapshot_s = sync_s, gauge_s, snapshot_s
        self.conn = redis.Redis(host=host, port=port, socket_timeout=1.0,
                                socket_connect_timeout=1.0)
        self.lock = threading.Lock()
        self.counts = {"deltas_out": 0, "gauges_out": 0, "snapshots": 0,
                       "received": 0, "publish_errors": 0, "reconnects": 0,
                       "full_after_outage": 0}
        self.up = False
        self.mark = 0
        self.stop = threading.Event()
        self.threads: List[threading.Thread] = []

    def _count(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    def status(self) -> Dict[str, Any]:
        with self.lock:
            out: Dict[str, Any] = dict(self.counts)
        out["connected"] = self.up
        return out

    # -- start: the snapshot -------------------------------------------------

    def restore(self) -> bool:
        """Load this gateway's last snapshot, if Redis has one for the same
        backends; False when there is none (or Redis is down: start cold)."""
        try:
            got = self.conn.hgetall(self.key)
        except self.redis_mod.RedisError:
            return False
        blob = got.get(b"snapshot")
        if not blob or got.get(b"backends", b"").decode() != self.backends:
            return False
        try:
            self.router.restore(blob, now_ns=now_ns())
        except libroute.LrError:
            return False  # another version, or corrupt: start cold
        return True

    def start(self) -> None:
        for target in (self._publish_loop, self._subscribe_loop):
            t = threading.Thread(target=target, daemon=True,
                                 name=target.__name__)
            t.start()
            self.threads.append(t)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    # -- publishing ------------------------------------------------------------

    @staticmethod
    def _routes(delta: bytes) -> int:
        return int.from_bytes(delta[16:20], "little") if len(delta) >= 20 else 0

    def _publish_once(self, full: bool) -> None:
        d = self.router.export_delta(0 if full else self.mark)
        if full or self._routes(d.data) > 0:
            self.conn.publish(self.channel, b"D" + d.data)
            self._count("deltas_out")
        self.mark = d.mark  # only once it went out (or had nothing)

    def _publish_loop(self) -> None:
        last_full = last_gauge = last_snap = 0.0
        was_up = True
        while not self.stop.wait(self.sync_s):
            t = time.monotonic()
            try:
                full = t - last_full >= self.FULL_EVERY_S or not was_up
                self._publish_once(full)
                if not was_up:  # the others catch up on what they missed
                    self._count("full_after_outage")
                if full:
                    last_full = t
                if self.gauge_s > 0 and t - last_gauge >= self.gauge_s:
                    self.conn.publish(self.channel,
                                      b"G" + self.router.export_gauges())
                    self._count("gauges_out")
                    last_gauge = t
                if t - last_snap >= self.snapshot_s:
                    snap = self.router.snapshot(now_ns=now_ns())
                    self.conn.hset(self.key, mapping={
                        "snapshot": snap, "backends": self.backends})
                    self._count("snapshots")
                    last_snap = t
                was_up = True
            except self.redis_mod.RedisError:
                # fail open: route on what we know; the mark stays, so the
                # next delta that goes out covers the outage
                self._count("publish_errors")
                was_up = False
                self.stop.wait(0.2)

    # -- receiving ---------------------------------------------------------------

    def _take(self, data: bytes) -> None:
        kind, body = data[:1], data[1:]
        try:
            if kind == b"D":
                self.router.import_delta(body, now_ns=now_ns())
            elif kind == b"G":
                self.router.import_gauges(body, now_ns=now_ns())
            self._count("received")
        except libroute.LrError:
            pass  # a peer of another version, or a corrupt message

    def _subscribe_loop(self) -> None:
        while not self.stop.is_set():
            pubsub = None
            try:
                pubsub = self.conn.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.channel)
                if not self.up:
                    self._count("reconnects")
                self.up = True
                while not self.stop.is_set():
                    msg = pubsub.get_message(timeout=0.1)
                    if msg is not None and msg.get("type") == "message":
                        self._take(msg["data"])
            except self.redis_mod.RedisError:
                self.up = False
                self.stop.wait(0.2)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except self.redis_mod.RedisError:
                        pass


def kv_endpoints(specs: List[str]) -> Dict[str, Tuple[str, str]]:
    """--kv-endpoint NAME=PUB,REPLAY (repeatable) as a map by name."""
    out: Dict[str, Tuple[str, str]] = {}
    for spec in specs:
        name, _, eps = spec.partition("=")
        pub, _, replay = eps.partition(",")
        if not name or not pub or not replay:
            raise ValueError(f"--kv-endpoint {spec!r}: expected "
                             "NAME=tcp://HOST:PORT,tcp://HOST:PORT")
        out[name] = (pub, replay)
    return out

