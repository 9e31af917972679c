"""Requests that wait: the gateway's side of the router's waiting queue
(include/libroute/lr_router.h, "Waiting").

A request is routed with ``may_wait``: while the fleet is saturated (or
requests at least as urgent wait already) the router holds it and answers
Reason.WAITING. Its handler thread then sleeps on the request's Event
until the router lets it out. ``Router.dispatch()`` is called whenever
capacity may have freed (a first token, a completion, a failure, a scrape,
a backend back up: Waiting.kick) and on a timer while anything waits (so
deadlines expire); each entry it returns is handed to its request:

- Status.OK: routed now, already in flight at ``instance``: send it there;
- Status.EEXPIRED: its deadline passed while it waited: answer 429;
- Status.EEXIST: dropped by the router: answer 503.

One thread, the dispatcher, runs the timer and watches the sockets of the
clients that wait: a client that hangs up while its request waits is
withdrawn from the queue (``Router.fail()``), so nothing is sent for it.

What a request asks for comes from its headers (Classifier): its priority
as the Gateway API Inference Extension gives it (an integer, higher more
important, 0 by default, negative sheddable) becomes the router's urgency
band; a tenant id, hashed, is its fair-share tenant; a TTFT SLO is its
deadline.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional

import libroute
from libroute import Dispatched, Router

# Request headers (case-insensitive).
PRIORITY_HEADER = "x-llm-priority"
OBJECTIVE_HEADER = "x-gateway-inference-objective"
TENANT_HEADERS = ("x-gateway-inference-fairness-id", "x-tenant-id")
SLO_HEADER = "x-slo-ttft-ms"

# The urgency of priority 0: RFC 9218's default urgency.
DEFAULT_URGENCY = 3
URGENCIES = 8  # LR_ROUTER_URGENCIES


def priority_urgency(priority: int) -> "tuple[int, bool]":
    """(urgency, sheddable) of a priority: urgency 3 - priority within
    0..7 (priority 3 and more: 0; -4 and less: 7), sheddable below 0."""
    return min(max(DEFAULT_URGENCY - priority, 0), URGENCIES - 1), priority < 0


def tenant_id(name: str) -> int:
    """A tenant header's value as the router's 64-bit tenant: FNV-1a of
    its UTF-8 bytes (the Go gateway hashes the same way)."""
    h = 0xcbf29ce484222325
    for c in name.encode("utf-8"):
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


class Admission(NamedTuple):
    """What a request's headers ask of the queue."""

    priority: int
    urgency: int
    sheddable: bool
    tenant: int
    slo_s: float  # its TTFT deadline, from its arrival


class Classifier:
    """Headers to an Admission. ``objectives`` maps InferenceObjective
    names (OBJECTIVE_HEADER) to their priority; ``ttft_slo_s`` maps an
    urgency to the deadline of its requests that carry no SLO_HEADER;
    ``default_slo_s`` is the deadline of those left."""

    def __init__(self, *, objectives: Optional[Mapping[str, int]] = None,
                 ttft_slo_s: Optional[Mapping[int, float]] = None,
                 default_slo_s: float = 30.0) -> None:
        self.objectives = dict(objectives or {})
        self.ttft_slo_s = dict(ttft_slo_s or {})
        self.default_slo_s = default_slo_s

    def classify(self, headers: Any) -> Admission:
        """ValueError for a header that is not a number."""
        raw = headers.get(PRIORITY_HEADER)
        if raw is not None:
            try:
                priority = int(raw.strip())
            except ValueError:
                raise ValueError(f"{PRIORITY_HEADER}: not an integer: "
                                 f"{raw!r}") from None
        else:
            priority = self.objectives.get(
                (headers.get(OBJECTIVE_HEADER) or "").strip(), 0)
        urgency, sheddable = priority_urgency(priority)
        tenant = 0
        for h in TENANT_HEADERS:
            v = headers.get(h)
            if v:
                tenant = tenant_id(v.strip())
                break
        raw = headers.get(SLO_HEADER)
        if raw is not None:
            try:
                slo_s = float(raw.strip()) / 1e3
            except ValueError:
                slo_s = -1.0
            if not 0 < slo_s < 1e9:
                raise ValueError(f"{SLO_HEADER}: not a positive number of "
                                 f"milliseconds: {raw!r}")
        else:
            slo_s = self.ttft_slo_s.get(urgency, self.default_slo_s)
        return Admission(priority, urgency, sheddable, tenant, slo_s)


def parse_slo(specs: List[str]) -> Dict[int, float]:
    """--ttft-slo values, "[URGENCY=]MS": an urgency's default deadline in
    seconds; without URGENCY, every urgency that has none of its own."""
    every: Optional[float] = None
    out: Dict[int, float] = {}
    for spec in specs:
        u, sep, ms = spec.rpartition("=")
        try:
            v = float(ms) / 1e3
            k = int(u) if sep else -1
        except ValueError:
            raise ValueError(f"--ttft-slo {spec!r}: expected [URGENCY=]MS") \
                from None
        if not v > 0 or (sep and not 0 <= k < URGENCIES):
            raise ValueError(f"--ttft-slo {spec!r}: urgency 0..7, MS > 0")
        if sep:
            out[k] = v
        else:
            every = v
    if every is not None:
        for k in range(URGENCIES):
            out.setdefault(k, every)
    return out


def parse_objectives(specs: List[str]) -> Dict[str, int]:
    """--objective values, "NAME=PRIORITY"."""
    out = {}
    for spec in specs:
        name, sep, p = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = int(p)
        except ValueError:
            raise ValueError(f"--objective {spec!r}: expected NAME=PRIORITY "
                             "(an integer)") from None
    return out


class Waiter:
    """One request that may wait: its Event is set when the router lets it
    out (``entry``) or it is withdrawn (``entry`` None)."""

    __slots__ = ("rid", "sock", "event", "entry", "watched")

    def __init__(self, rid: int, sock: Optional[socket.socket]) -> None:
        self.rid = rid
        self.sock = sock
        self.event = threading.Event()
        self.entry: Optional[Dispatched] = None
        self.watched = False


def now_ns() -> int:
    return time.monotonic_ns()


class Waiting:
    """The requests that wait, by id, and the dispatcher thread.

    ``router`` returns the gateway's router (read at each call: a test may
    wrap it). ``tick_s`` is the timer's period while anything waits."""

    def __init__(self, router: Callable[[], Router], *,
                 tick_s: float = 0.1) -> None:
        self.router = router
        self.tick_s = tick_s
        self.lock = threading.Lock()
        self.waiters: Dict[int, Waiter] = {}
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self._wake()
        self.thread.join()
        with self.lock:
            left = list(self.waiters.values())
            self.waiters.clear()
        for w in left:  # shutting down: their handlers answer nothing
            w.event.set()
        self.sel.close()
        self._wake_r.close()
        self._wake_w.close()

    # ---- the handlers' side ---------------------------------------------

    def expect(self, rid: int, sock: Optional[socket.socket]) -> Waiter:
        """Before route(may_wait=True): the request's Waiter, so that a
        dispatch racing the route finds it."""
        w = Waiter(rid, sock)
        with self.lock:
            self.waiters[rid] = w
        return w

    def forget(self, w: Waiter) -> None:
        """route() did not hold the request: it went at once, or failed."""
        with self.lock:
            if self.waiters.get(w.rid) is w:
                del self.waiters[w.rid]

    def wait(self, w: Waiter) -> Optional[Dispatched]:
        """Sleep until the router lets the request out: its entry, or None
        when the client hung up meanwhile (already withdrawn) or the
        gateway closes. While it waits, its client's socket is watched,
        and the dispatcher's timer runs."""
        if self.stop.is_set():
            return None  # closed: nothing dispatches any more
        self._watch(w)
        self._wake()
        w.event.wait()
        return w.entry

    def kick(self) -> None:
        """Capacity may have freed: let out what may go now. Called on the
        thread that saw it happen; nothing to do while nothing waits."""
        if self.waiters:  # a racy read; the timer catches what it misses
            self.dispatch()

    # ---- dispatch -------------------------------------------------------

    def dispatch(self) -> None:
        """Router.dispatch(now), each entry to its request."""
        try:
            entries = self.router().dispatch(now_ns())
        except libroute.ClosedError:
            return
        except libroute.LrError as e:
            # OutOfMemoryError: that request stays waiting; the entries
            # let out before it have left the queue all the same.
            entries = getattr(e, "dispatched", [])
        for e in entries:
            with self.lock:
                w = self.waiters.pop(e.request_id, None)
            if w is None:
                # withdrawn as the router let it out: cancel() told the
                # router (fail() ends it in flight as well as waiting)
                continue
            w.entry = e
            self._unwatch(w)
            w.event.set()

    def cancel(self, w: Waiter) -> None:
        """The client hung up while its request waited: withdraw it."""
        with self.lock:
            if self.waiters.get(w.rid) is not w:
                return  # let out already: its handler finds out on writing
            del self.waiters[w.rid]
        self._unwatch(w)
        try:
            self.router().fail(w.rid, now_ns=now_ns())
        except libroute.LrError:
            pass  # expired meanwhile: nothing left to withdraw
        except libroute.ClosedError:
            pass
        w.event.set()

    # ---- the dispatcher thread ------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # full: a wake is pending anyway

    def _watch(self, w: Waiter) -> None:
        """Watch the client's socket while w waits (only while it is still
        registered: whoever takes it out of ``waiters`` unwatches it). The
        selector takes a registration while the dispatcher thread sleeps
        in it (epoll and poll do); a wake makes it look at once."""
        if w.sock is None:
            return
        with self.lock:
            if self.waiters.get(w.rid) is not w:
                return
            try:
                self.sel.register(w.sock, selectors.EVENT_READ, w)
                w.watched = True
            except (ValueError, KeyError, OSError, AttributeError):
                pass  # closed already: no hang-up detection

    def _unwatch(self, w: Waiter) -> None:
        with self.lock:
            if w.watched:
                w.watched = False
                try:
                    self.sel.unregister(w.sock)
                except (ValueError, KeyError, OSError):
                    pass

    def _hung_up(self, w: Waiter) -> None:
        """The client's socket is readable: an EOF or an error is a hang
        up; anything else (more bytes) is not, and the socket is no longer
        watched."""
        try:
            data = w.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._unwatch(w)
            return
        self.cancel(w)

    def _loop(self) -> None:
        while not self.stop.is_set():
            timeout = self.tick_s if self.waiters else None
            try:
                ready = self.sel.select(timeout)
            except (OSError, ValueError):
                ready = []
            for key, _ in ready:
                if key.data is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                elif key.data.event.is_set():
                    self._unwatch(key.data)
                else:
                    self._hung_up(key.data)
            if self.waiters and not self.stop.is_set():
                self.dispatch()  # the timer: deadlines expire
