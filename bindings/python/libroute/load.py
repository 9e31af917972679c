"""lr_load: per-instance load from the host's own traffic, engine scrapes
and RTT probes (include/libroute/lr_load.h).

Routers keep their own tracker; a standalone Load is for hosts (and
simulators) that do their own routing.

Thread safety: the C tracker is one thread at a time. A Load object
serializes its calls with a lock, so sharing it is safe but not parallel.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ._ffi import ffi, lib
from ._util import _Handle, from_struct, new_sized, set_fields, u32, u64
from .errors import check

__all__ = ["Load", "LoadSnapshot", "RequestState"]


class LoadSnapshot(NamedTuple):
    """One instance's load at one moment (lr_load_snapshot). The scrape
    fields (running, waiting, kv_use, scraped_ns) mean something only when
    has_stats, rtt_ns only when has_rtt."""

    instance_class: int
    prefix_caching: bool
    inflight: int
    queued: int
    prefill_tokens: int
    queued_tokens: int
    decode_tokens: int
    kv_tokens: int
    has_stats: bool
    running: int
    waiting: int
    kv_use: float
    scraped_ns: int
    has_rtt: bool
    rtt_ns: int
    last_first_token_ns: int
    queue_since_ns: int
    prompt_tokens: int


def snapshot_from(s) -> LoadSnapshot:
    return from_struct(LoadSnapshot, s,
                       prefix_caching=bool(s.prefix_caching),
                       has_stats=bool(s.has_stats), has_rtt=bool(s.has_rtt))


def engine_stats(running: int, waiting: int, kv_use: float,
                 scraped_ns: int, what: str):
    """An initialised lr_engine_stats."""
    s = new_sized("lr_engine_stats", lib.lr_engine_stats_init_sized)
    set_fields(s, what, running=running, waiting=waiting, kv_use=kv_use,
               scraped_ns=scraped_ns)
    return s


class RequestState(NamedTuple):
    """Where a request in flight is (lr_load_request)."""

    instance: int
    queued: bool


class Load(_Handle):
    """A load tracker (lr_load). Keyword arguments are lr_load_options
    fields; None keeps the default. Instance ids are 0..max_instances-1."""

    __slots__ = ()
    _kind = "Load"

    def __init__(self, *, max_instances: Optional[int] = None,
                 max_requests: Optional[int] = None,
                 rtt_alpha: Optional[float] = None) -> None:
        opt = new_sized("lr_load_options", lib.lr_load_options_init_sized)
        set_fields(opt, "Load", max_instances=max_instances,
                   max_requests=max_requests, rtt_alpha=rtt_alpha)
        out = ffi.new("lr_load **")
        check(lib.lr_load_create(opt, out), "lr_load_create")
        self._own(out[0], lib.lr_load_destroy, exclusive=True)

    def add_instance(self, instance: int, *, instance_class: int = 0,
                     prefix_caching: bool = True) -> None:
        """lr_load_add_instance()."""
        inst = u32(instance, "instance")
        cls = u32(instance_class, "instance_class")
        with self._use() as p:
            st = lib.lr_load_add_instance(p, inst, cls,
                                          1 if prefix_caching else 0)
        check(st, "lr_load_add_instance")

    def remove_instance(self, instance: int) -> None:
        """lr_load_remove_instance(): its requests in flight are dropped."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_load_remove_instance(p, inst)
        check(st, "lr_load_remove_instance")

    def dispatch(self, request_id: int, instance: int, *, prompt_tokens: int,
                 now_ns: int, cached_tokens: int = 0,
                 expected_output_tokens: int = 0,
                 alt_instance: Optional[int] = None,
                 alt_cached_tokens: int = 0,
                 prefill_instance: Optional[int] = None,
                 prefill_cached_tokens: int = 0) -> None:
        """lr_load_dispatch(): the request is in flight on ``instance``,
        queued until its first token. ``alt_instance`` is the other
        candidate it could move to (None: none).

        ``prefill_instance`` splits it (a disaggregated fleet): that
        instance prefills it, ``prefill_cached_tokens`` of its prompt
        expected to hit there, and ``instance`` decodes it once its KV has
        moved over. Until prefill_done() or its first token the prefill
        instance counts it in flight and queued, with its uncached tokens
        as prefill and its prompt's KV; ``instance`` counts it in flight
        and queued with its KV and decode but no prefill. None: ``instance``
        does both."""
        d = new_sized("lr_dispatch", lib.lr_dispatch_init_sized)
        set_fields(d, "dispatch", request_id=request_id, instance=instance,
                   prompt_tokens=prompt_tokens, cached_tokens=cached_tokens,
                   expected_output_tokens=expected_output_tokens,
                   alt_instance=alt_instance,
                   alt_cached_tokens=alt_cached_tokens, now_ns=now_ns,
                   prefill_instance=prefill_instance,
                   prefill_cached_tokens=prefill_cached_tokens)
        with self._use() as p:
            st = lib.lr_load_dispatch(p, d)
        check(st, "lr_load_dispatch")

    def prefill_done(self, request_id: int, *, now_ns: int) -> None:
        """lr_load_prefill_done(): the prefill leg of a request dispatched
        with a ``prefill_instance`` ended (its KV has moved to the decode
        instance): the prefill instance stops counting it. A request
        without a prefill leg, or whose leg ended before: a no-op.
        NotFoundError when no such request is in flight."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_load_prefill_done(p, rid, now)
        check(st, "lr_load_prefill_done")

    def first_token(self, request_id: int, *, now_ns: int) -> None:
        """lr_load_first_token(): the request leaves the queue (a prefill
        leg still open ends with it)."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_load_first_token(p, rid, now)
        check(st, "lr_load_first_token")

    def complete(self, request_id: int, output_tokens: int, *,
                 now_ns: int) -> None:
        """lr_load_complete(): the request ended; its record is freed."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        out = u32(output_tokens, "output_tokens")
        with self._use() as p:
            st = lib.lr_load_complete(p, rid, out, now)
        check(st, "lr_load_complete")

    def fail(self, request_id: int) -> None:
        """lr_load_fail(): the request failed or was cancelled."""
        rid = u64(request_id, "request_id")
        with self._use() as p:
            st = lib.lr_load_fail(p, rid)
        check(st, "lr_load_fail")

    def move(self, request_id: int, instance: int,
             cached_tokens: int = 0) -> None:
        """lr_load_move(): a queued request now runs on ``instance``."""
        rid = u64(request_id, "request_id")
        inst = u32(instance, "instance")
        cached = u32(cached_tokens, "cached_tokens")
        with self._use() as p:
            st = lib.lr_load_move(p, rid, inst, cached)
        check(st, "lr_load_move")

    def set_stats(self, instance: int, *, running: int, waiting: int,
                  kv_use: float, scraped_ns: int) -> None:
        """lr_load_set_stats(): the engine's scraped metrics; an older
        scrape than the one held is ignored."""
        s = engine_stats(running, waiting, kv_use, scraped_ns, "set_stats")
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_load_set_stats(p, inst, s)
        check(st, "lr_load_set_stats")

    def observe_rtt(self, instance: int, rtt_ns: int) -> None:
        """lr_load_observe_rtt(): fold an RTT probe into the EWMA."""
        inst, rtt = u32(instance, "instance"), u64(rtt_ns, "rtt_ns")
        with self._use() as p:
            st = lib.lr_load_observe_rtt(p, inst, rtt)
        check(st, "lr_load_observe_rtt")

    def get(self, instance: int) -> LoadSnapshot:
        """lr_load_get(): one instance's load."""
        s = new_sized("lr_load_snapshot", lib.lr_load_snapshot_init_sized)
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_load_get(p, inst, s)
        check(st, "lr_load_get")
        return snapshot_from(s)

    @property
    def inflight(self) -> int:
        """lr_load_inflight(): requests in flight over all instances."""
        with self._use() as p:
            return lib.lr_load_inflight(p)

    def request(self, request_id: int) -> RequestState:
        """lr_load_request(): where a request in flight is."""
        inst = ffi.new("uint32_t *")
        queued = ffi.new("int32_t *")
        rid = u64(request_id, "request_id")
        with self._use() as p:
            st = lib.lr_load_request(p, rid, inst, queued)
        check(st, "lr_load_request")
        return RequestState(inst[0], bool(queued[0]))
