"""lr_router: route() over live state (include/libroute/lr_router.h,
docs/router.md).

Thread safety: every call on one Router may come from any thread at any
time; the library locks the router itself, and cffi releases the GIL for
the length of each call, so Python threads do not serialize on the GIL
while the library works. close() waits for the calls still running.
"""

from __future__ import annotations

from typing import (Any, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Union)

from ._ffi import ffi, lib
from ._util import (_Handle, _index, bytes_in, from_struct, name_in,
                    new_sized, set_fields, take_blob, u32, u32_in, u64,
                    u64_in)
from .enums import (Bounds, Param, Policy, Reason, Role, Status, Tier,
                    as_enum, bounds_from)
from .errors import check, error_for
from .index import Delta, IndexStats, MmLike, _kv_stored, mm_in, tier_in
from .learner import (LearnerStats, Samples, learner_options, new_stats,
                      samples_into, stats_from)
from .load import LoadSnapshot, engine_stats, snapshot_from
from .mlp import options_dict
from .policy import (ROW_SIZE, Candidates, Decision, PolicyInput, Score,
                     decision_from, param_key, policy_input_from,
                     policy_value)
from .vllm import KvSeq, KvSource, VllmBatchInfo, finish, new_info

__all__ = ["Router", "Decision", "Score", "Move", "Dispatched", "RouterStats",
           "param_bounds", "KvSeq", "KvSource"]

_BUFSIZE = 11  # LR_EBUFSIZE
_NONE = lib.LR_INSTANCE_NONE
_DRY_RUN = lib.LR_ROUTE_DRY_RUN
_NO_LEARN = lib.LR_ROUTE_NO_LEARN
_SCORES = lib.LR_ROUTE_SCORES
_MAY_WAIT = lib.LR_ROUTE_MAY_WAIT
_SHEDDABLE = lib.LR_ROUTE_SHEDDABLE
_FORCE = lib.LR_LEARN_FORCE
# This build's struct sizes, passed to the library with each struct or
# array (the lr_*_init_sized() functions, score_size, move_size).
_DECISION_SIZE = ffi.sizeof("lr_decision")
_SCORE_SIZE = ffi.sizeof("lr_score")
_MOVE_SIZE = ffi.sizeof("lr_move")
_DISPATCHED_SIZE = ffi.sizeof("lr_dispatched")
# Entries asked of lr_router_dispatch() per call when the caller sets no
# capacity (it is called again while it fills them all).
_DISPATCH_CHUNK = 64

PolicyLike = Union[Policy, int, str]
ParamLike = Union[Param, int, str]


class Move(NamedTuple):
    """A proposed move of a queued request (lr_move). ``from_`` because
    ``from`` is a Python keyword."""

    request_id: int
    from_: int
    to: int
    benefit_s: float


class Dispatched(NamedTuple):
    """One request Router.dispatch() let out of the waiting queue
    (lr_dispatched); it has left the queue whatever its status.

    ``status`` is Status.OK: routed now and recorded in flight at
    ``instance``, send it; Status.EEXPIRED: its ``deadline_ns`` passed
    while it waited, answer it (429, 504); Status.EEXIST: its id came in
    flight meanwhile, it is dropped. ``instance`` is LR_INSTANCE_NONE
    unless the status is OK; ``reason``, ``cached_tokens`` and ``cost``
    are the decision's (``cost`` NaN when the policy predicts none).
    ``waited_ns`` is how long it waited; ``urgency`` and ``tenant`` are
    the request's. ``prefill_instance``, ``prefill_reason``,
    ``prefill_cached_tokens`` and ``transfer_s`` are the decision's
    prefill leg, as Decision's: a request split between a prefill and a
    decode instance is sent to ``prefill_instance`` first, then to
    ``instance`` (prefill_done() when the first leg returns); None: kept
    whole.
    """

    request_id: int
    status: Status
    instance: int
    reason: Reason
    cached_tokens: int
    cost: float
    waited_ns: int
    urgency: int
    tenant: int
    prefill_instance: Optional[int] = None
    prefill_reason: Optional[Reason] = None
    prefill_cached_tokens: int = 0
    transfer_s: float = 0.0


def _dispatched(e) -> Dispatched:
    pre = e.prefill_instance
    return Dispatched(e.request_id, as_enum(Status, e.status), e.instance,
                      as_enum(Reason, e.reason), e.cached_tokens, e.cost,
                      e.waited_ns, e.urgency, e.tenant,
                      None if pre == _NONE else pre,
                      None if e.prefill_reason < 0
                      else as_enum(Reason, e.prefill_reason),
                      e.prefill_cached_tokens, e.transfer_s)


class RouterStats(NamedTuple):
    """Router counters (lr_router_stats). ``by_reason`` maps each Reason
    to the decisions it explains. The waiting queue's: ``waiting`` and
    ``waiting_tokens`` now; ``waited`` (routes answered Reason.WAITING)
    and of those ``waited_dispatched``, ``waited_expired``,
    ``waited_cancelled`` and ``waited_dropped``; ``shed`` (sheddable
    requests refused with BusyError); ``wait_ns``, the total time the
    dispatched ones waited. ``adapter_routes``: routes of requests
    naming a LoRA adapter; ``adapter_loads``: those of them sent where
    the adapter was not resident (a load caused)."""

    routes: int
    dry_runs: int
    inflight: int
    instances: int
    routable: int
    by_reason: Dict[Reason, int]
    prompt_tokens: int
    cached_tokens: int
    kv_batches: int = 0
    kv_duplicates: int = 0
    kv_gaps: int = 0
    kv_restarts: int = 0
    kv_gaps_open: int = 0
    deltas_exported: int = 0
    deltas_imported: int = 0
    deltas_skipped: int = 0
    deltas_lost: int = 0
    gauges_exported: int = 0
    gauges_imported: int = 0
    gauges_skipped: int = 0
    gauges_expired: int = 0
    peers_live: int = 0
    observed_reports: int = 0
    observed_expected_tokens: int = 0
    observed_cached_tokens: int = 0
    waiting: int = 0
    waiting_tokens: int = 0
    waited: int = 0
    waited_dispatched: int = 0
    waited_expired: int = 0
    waited_cancelled: int = 0
    waited_dropped: int = 0
    shed: int = 0
    wait_ns: int = 0
    adapter_routes: int = 0
    adapter_loads: int = 0


_policy = policy_value
_param = param_key


def param_bounds(key: ParamLike) -> Bounds:
    """lr_param_bounds(): bounds and default of a parameter, and whether
    it takes whole numbers only. An unknown key raises NotSupportedError.
    (The deprecated lr_router_param_bounds() is the same call.)"""
    return bounds_from(lib.lr_param_bounds(_param(key)), "lr_param_bounds")


def role_in(role: Any) -> int:
    """A role argument as the int32_t the library takes: a Role, an int or
    a Role's name ("prefill", case-insensitive); the library says
    InvalidArgumentError for an int that is no lr_role."""
    if isinstance(role, str):
        try:
            return int(Role[role.upper()])
        except KeyError:
            raise ValueError(f"role: unknown role {role!r}") from None
    r = _index(role, "role")
    if not -2**31 <= r < 2**31:
        raise ValueError(f"role: {role!r} is not an lr_role")
    return r


def _opt_name(name, what: str):
    """A ``char[]`` for an optional request name (model, adapter), or
    None for None and the empty name (the library's NULL)."""
    if name is None:
        return None
    b = name_in(name, what)
    return ffi.new("char[]", b) if b else None


def _names_in(names, what: str):
    """``(const char *[] cdata, [char[] ...], n)`` for a list of names
    (lr_instance_spec.models, lr_adapter_stats.running), or
    ``(NULL, [], 0)`` for none. Keep the list alive for the call."""
    if names is None:
        return ffi.NULL, [], 0
    if isinstance(names, (str, bytes, bytearray)):
        raise TypeError(f"{what}: expected a sequence of names, got one "
                        f"name ({names!r}); wrap it in a list")
    keep = [ffi.new("char[]", name_in(n, what)) for n in names]
    if not keep:
        return ffi.NULL, [], 0
    return ffi.new("const char *[]", keep), keep, len(keep)


def _request(request_id, now_ns, tenant_salt, session,
             expected_output_tokens, flags, tenant=0, deadline_ns=0,
             urgency=0, model=None, adapter=None, mm=None):
    """An lr_request with the scalar fields, the model and adapter names
    and the multimodal inputs (the token arrays are the caller's).
    Returns ``(request, keep)``: hold ``keep`` (the names' C strings, the
    inputs' array and identifiers) until the call returns."""
    q = new_sized("lr_request", lib.lr_request_init_sized)
    try:  # the hot path: plain assignments, checked by cffi
        q.id = request_id
        q.tenant_salt = tenant_salt
        q.expected_output_tokens = expected_output_tokens
        q.flags = flags
        q.now_ns = now_ns
        if session is not None:
            q.session = session
            q.has_session = 1
        if tenant or deadline_ns or urgency:
            q.tenant = tenant
            q.deadline_ns = deadline_ns
            q.urgency = urgency
    except (OverflowError, TypeError):
        # Again, slowly, for an error that names the argument.
        set_fields(q, "route", id=request_id, tenant_salt=tenant_salt,
                   expected_output_tokens=expected_output_tokens,
                   now_ns=now_ns, session=session, tenant=tenant,
                   deadline_ns=deadline_ns, urgency=urgency)
        raise  # pragma: no cover - set_fields raised already
    keep = None
    if model is not None or adapter is not None:
        m, a = _opt_name(model, "model"), _opt_name(adapter, "adapter")
        if m is not None:
            q.model = m
        if a is not None:
            q.adapter = a
        keep = (m, a)
    if mm is not None:
        arr, mkeep, n = mm_in(mm)
        if n:
            q.mm = arr
            q.n_mm = n
            keep = (keep, mkeep)
    return q, keep


class Router(_Handle):
    """A router (lr_router): picks an instance for each request.

    Keyword arguments are lr_router_options fields; None keeps the
    library's default. ``policy`` takes a Policy, its label
    ("prefix-cache-and-load") or its name ("PREFIX_CACHE_AND_LOAD").
    ``learner`` is a mapping of Learner() options for Lodestar's learner
    (min_samples, retrain_every, ..., and ``mlp``, a mapping of Mlp()
    options); its seed is the router's and n_features is
    lodestar_feature_count(), so neither is taken. The library copies them at
    create; the learner itself is made when lodestar is first chosen.
    ``queue_capacity``, ``queue_tenants`` and ``queue_tokens`` bound the
    waiting queue (route(may_wait=True)): requests and their prompt
    tokens held at once, tenants whose fair share is kept. ``marks``:
    how many routed prompts' instances to remember past the index (0:
    none; about the fleet's KV blocks over the blocks a request adds).
    Use it as a context manager or call close(); otherwise the garbage
    collector destroys it.
    """

    __slots__ = ("_score_cap",)
    _kind = "Router"

    def __init__(self, policy: Optional[PolicyLike] = None, *,
                 seed: Optional[int] = None,
                 max_instances: Optional[int] = None,
                 max_requests: Optional[int] = None,
                 block_tokens: Optional[int] = None,
                 index_capacity_blocks: Optional[int] = None,
                 index_ttl_ns: Optional[int] = None,
                 ring_vnodes: Optional[int] = None,
                 learner: Optional[Mapping[str, Any]] = None,
                 hash_seed: Optional[int] = None,
                 replica_id: Optional[int] = None,
                 remote_ttl_ns: Optional[int] = None,
                 gauge_ttl_ns: Optional[int] = None,
                 max_peers: Optional[int] = None,
                 index_eviction: Optional[int] = None,
                 queue_capacity: Optional[int] = None,
                 queue_tenants: Optional[int] = None,
                 queue_tokens: Optional[int] = None,
                 marks: Optional[int] = None) -> None:
        opt = new_sized("lr_router_options", lib.lr_router_options_init_sized)
        set_fields(opt, "Router",
                   policy=None if policy is None else _policy(policy),
                   seed=seed, max_instances=max_instances,
                   max_requests=max_requests, block_tokens=block_tokens,
                   index_capacity_blocks=index_capacity_blocks,
                   index_ttl_ns=index_ttl_ns, ring_vnodes=ring_vnodes,
                   hash_seed=hash_seed,
                   replica_id=replica_id, remote_ttl_ns=remote_ttl_ns,
                   gauge_ttl_ns=gauge_ttl_ns, max_peers=max_peers,
                   index_eviction=index_eviction,
                   queue_capacity=queue_capacity,
                   queue_tenants=queue_tenants, queue_tokens=queue_tokens,
                   marks=marks)
        keep = None
        if learner is not None:
            lopt, keep = learner_options(
                "Router learner", options_dict(learner, "learner"),
                exclude=("seed",))
            opt.learner = lopt
            keep = (lopt, keep)  # the nested structs live until create
        out = ffi.new("lr_router **")
        st = lib.lr_router_create(opt, out)
        del keep  # copied by the library
        check(st, "lr_router_create")
        self._own(out[0], lib.lr_router_destroy, exclusive=False)
        self._score_cap = 16

    # ---- policy ---------------------------------------------------------

    @property
    def policy(self) -> Policy:
        """The policy in use (lr_router_policy); assignable."""
        with self._use() as p:
            v = lib.lr_router_policy(p)
        return as_enum(Policy, v)

    @policy.setter
    def policy(self, value: PolicyLike) -> None:
        self.set_policy(value)

    def set_policy(self, policy: PolicyLike) -> None:
        """lr_router_set_policy(): per-policy state is kept."""
        v = _policy(policy)
        with self._use() as p:
            st = lib.lr_router_set_policy(p, v)
        check(st, "lr_router_set_policy")

    # ---- instances ------------------------------------------------------

    def add_instance(self, name: Union[str, bytes], *,
                     instance_class: int = 0, prefix_caching: bool = True,
                     rtt_ns: int = 0,
                     models: Optional[Sequence[Union[str, bytes]]] = None,
                     max_adapters: int = 0,
                     role: Union[Role, int, str] = Role.BOTH,
                     node: int = 0, rack: int = 0, region: int = 0) -> int:
        """lr_router_add_instance(): returns the id the router assigned.
        ``name`` (copied) places the instance on the ring.

        ``models`` are the model names it serves (vLLM's served model
        names; at most LR_ROUTER_MAX_MODELS of 1..LR_ROUTER_MAX_NAME
        bytes, copied): a request naming a model goes only to the
        instances that serve it. None or empty: it serves any model.
        ``max_adapters`` is its LoRA adapter slots (vLLM's --max-loras;
        0 unknown, above LR_ROUTER_MAX_ADAPTERS OutOfRangeError).

        ``role`` is its part in a disaggregated fleet (a Role, or its name:
        "both", the default, "prefill" or "decode"; another value
        InvalidArgumentError). With prefill instances routable, route()
        may split a request between a prefill and a decode instance
        (Decision.prefill_instance). ``node``, ``rack`` and ``region`` say
        where it runs, as the host numbers them (0: unknown): a KV
        transfer between two instances on one node moves at
        Param.KV_GBPS_NODE, in one rack at KV_GBPS_RACK, in one region at
        KV_GBPS_REGION, else at KV_GBPS_WAN."""
        spec = new_sized("lr_instance_spec", lib.lr_instance_spec_init_sized)
        b = name_in(name, "name")
        keep = ffi.new("char[]", b)
        spec.name = keep
        set_fields(spec, "add_instance", instance_class=instance_class,
                   prefix_caching=1 if prefix_caching else 0, rtt_ns=rtt_ns,
                   max_adapters=max_adapters, role=role_in(role), node=node,
                   rack=rack, region=region)
        arr, names, n = _names_in(models, "models")
        spec.models = arr
        spec.n_models = n
        out = ffi.new("uint32_t *")
        with self._use() as p:
            st = lib.lr_router_add_instance(p, spec, out)
        del names  # copied by the library
        check(st, "lr_router_add_instance")
        return out[0]

    def find_instance(self, name: Union[str, bytes]) -> int:
        """lr_router_find_instance(): the id of a name (NotFoundError if
        there is none)."""
        b = name_in(name, "name")
        out = ffi.new("uint32_t *")
        with self._use() as p:
            st = lib.lr_router_find_instance(p, b, out)
        check(st, "lr_router_find_instance")
        return out[0]

    def drain_instance(self, instance: int, draining: bool = True) -> None:
        """lr_router_drain_instance(): stop (or, with draining=False,
        resume) new routes to it; its requests and prefixes stay."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_drain_instance(p, inst, 1 if draining else 0)
        check(st, "lr_router_drain_instance")

    def remove_instance(self, instance: int) -> None:
        """lr_router_remove_instance(): routes, load and requests go."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_remove_instance(p, inst)
        check(st, "lr_router_remove_instance")

    @property
    def instance_count(self) -> int:
        """lr_router_instance_count(): draining instances included."""
        with self._use() as p:
            return lib.lr_router_instance_count(p)

    def set_class(self, instance_class: int, *,
                  prefill_tokens_per_s: float) -> None:
        """lr_router_set_class(): a GPU class's prefill speed."""
        spec = new_sized("lr_class_spec", lib.lr_class_spec_init_sized)
        set_fields(spec, "set_class",
                   prefill_tokens_per_s=prefill_tokens_per_s)
        cls = u32(instance_class, "instance_class")
        with self._use() as p:
            st = lib.lr_router_set_class(p, cls, spec)
        check(st, "lr_router_set_class")

    # ---- telemetry ------------------------------------------------------

    def set_stats(self, instance: int, *, running: int, waiting: int,
                  kv_use: float, scraped_ns: int) -> None:
        """lr_router_set_stats(): the engine's scraped metrics."""
        s = engine_stats(running, waiting, kv_use, scraped_ns, "set_stats")
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_set_stats(p, inst, s)
        check(st, "lr_router_set_stats")

    def set_adapters(self, instance: int, *,
                     running: Sequence[Union[str, bytes]] = (),
                     waiting: Sequence[Union[str, bytes]] = (),
                     max_adapters: int = 0, scraped_ns: int) -> None:
        """lr_router_set_adapters(): the LoRA adapters the instance's
        engine reports (vLLM's ``vllm:lora_requests_info`` gauge: its
        running_lora_adapters and waiting_lora_adapters labels split at
        the commas, max_lora). They replace the router's own guess of
        what is resident there; ``max_adapters`` 0 keeps the instance's
        slots. A name empty or longer than LR_ROUTER_MAX_NAME, or more
        than LR_ROUTER_MAX_ADAPTERS names, raise InvalidArgumentError;
        nothing changes then."""
        s = new_sized("lr_adapter_stats", lib.lr_adapter_stats_init_sized)
        run, run_keep, n_run = _names_in(running, "running")
        wait, wait_keep, n_wait = _names_in(waiting, "waiting")
        s.running = run
        s.n_running = n_run
        s.waiting = wait
        s.n_waiting = n_wait
        set_fields(s, "set_adapters", max_adapters=max_adapters,
                   scraped_ns=scraped_ns)
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_set_adapters(p, inst, s)
        del run_keep, wait_keep  # borrowed for the call
        check(st, "lr_router_set_adapters")

    def adapters(self, instance: int) -> List[int]:
        """lr_router_adapters(): the LoRA adapters the router believes
        resident on the instance now, most recently used first, as their
        name hashes (libroute.name_hash())."""
        inst = u32(instance, "instance")
        n = ffi.new("size_t *")
        cap = 16
        while True:
            buf = ffi.new("uint64_t[]", cap)
            with self._use() as p:
                st = lib.lr_router_adapters(p, inst, buf, cap, n)
            if st == _BUFSIZE and n[0] > cap:
                cap = n[0]
                continue
            check(st, "lr_router_adapters")
            return list(buf[0:n[0]])

    def observe_rtt(self, instance: int, rtt_ns: int) -> None:
        """lr_router_observe_rtt(): an RTT probe."""
        inst, rtt = u32(instance, "instance"), u64(rtt_ns, "rtt_ns")
        with self._use() as p:
            st = lib.lr_router_observe_rtt(p, inst, rtt)
        check(st, "lr_router_observe_rtt")

    def instance_load(self, instance: int) -> LoadSnapshot:
        """lr_router_instance_load(): one instance's load."""
        s = new_sized("lr_load_snapshot", lib.lr_load_snapshot_init_sized)
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_instance_load(p, inst, s)
        check(st, "lr_router_instance_load")
        return snapshot_from(s)

    # ---- route ----------------------------------------------------------

    def route(self, tokens: Any, *, request_id: int, now_ns: int,
              boundaries: Any = None, tenant_salt: int = 0,
              session: Optional[int] = None,
              expected_output_tokens: int = 0, dry_run: bool = False,
              learn: bool = True, scores: bool = False,
              may_wait: bool = False, sheddable: bool = False,
              tenant: int = 0, deadline_ns: int = 0,
              urgency: int = 0, model: Optional[Union[str, bytes]] = None,
              adapter: Optional[Union[str, bytes]] = None,
              mm: MmLike = None) -> Decision:
        """lr_router_route(): choose an instance and, unless ``dry_run``,
        record the dispatch (the request is then in flight until
        complete() or fail()).

        ``tokens`` and ``boundaries`` (message ends, token offsets) take
        an ``array('I')`` (or any uint32 buffer) without a copy: pass
        that. Any other sequence of ints (a list, a tuple) is converted on
        every call, 6-10 ns a token (55-97 us for 8k tokens against 10-16
        us for the array); a gateway converts once, or keeps each
        conversation's tokens in one ``array('I')`` and extends it. ``learn=False`` records the dispatch but learns nothing
        (hosts that feed KV events). ``scores=True`` fills
        Decision.scores. A failed call records nothing and raises.

        ``may_wait=True``: when the fleet is saturated, or requests at
        least as urgent already wait, the router holds the request instead
        of sending it: the Decision's ``instance`` is LR_INSTANCE_NONE and
        its ``reason`` Reason.WAITING (its other fields zero, ``cost``
        NaN). dispatch() lets it out later; fail() withdraws it.
        ``sheddable=True`` refuses such a request with BusyError instead.
        ``urgency`` is its priority band (0, the most urgent, ..
        LR_ROUTER_URGENCIES - 1), ``tenant`` the tenant whose fair share
        it counts against (unlike ``tenant_salt`` it does not separate
        cached prefixes), ``deadline_ns`` its TTFT deadline on the host's
        clock (0: none), past which dispatch() reports it expired.

        ``model`` names the model it asks for (None or "": any): only the
        instances that serve it (add_instance(models=...)) are candidates,
        and NotFoundError when none does. ``adapter`` names its LoRA
        adapter (None or "": the base model), which keys its prefixes
        apart from the base model's and other adapters'. Names longer than
        LR_ROUTER_MAX_NAME bytes raise InvalidArgumentError.

        ``mm`` lists the prompt's multimodal inputs (images, audio), each
        an MmInput or an ``(identifier, offset, length)`` tuple, by
        ascending offset: their keys enter the blocks their placeholder
        tokens overlap, as vLLM's do, so the request matches the blocks
        the engine's KV events stored for the same inputs and no others.
        Inputs out of order, overlapping, outside the prompt, empty, or
        with an empty or too long identifier raise InvalidArgumentError.
        """
        flags = ((_DRY_RUN if dry_run else 0) |
                 (0 if learn else _NO_LEARN) |
                 (_SCORES if scores else 0) |
                 (_MAY_WAIT if may_wait else 0) |
                 (_SHEDDABLE if sheddable else 0))
        q, names = _request(request_id, now_ns, tenant_salt, session,
                            expected_output_tokens, flags, tenant,
                            deadline_ns, urgency, model, adapter, mm)
        tok = u32_in(tokens, "tokens")
        bnd = None
        d = ffi.new("lr_decision *")
        buf = None
        try:
            if boundaries is not None:
                bnd = u32_in(boundaries, "boundaries")
            q.tokens = tok
            q.n_tokens = len(tok)
            if bnd is not None:
                q.boundaries = bnd
                q.n_boundaries = len(bnd)
            while True:
                lib.lr_decision_init_sized(d, _DECISION_SIZE)
                if scores:
                    cap = self._score_cap
                    buf = ffi.new("lr_score[]", cap)
                    d.scores = buf
                    d.scores_capacity = cap
                    d.score_size = _SCORE_SIZE
                p = self._acquire()
                try:
                    st = lib.lr_router_route(p, q, d)
                finally:
                    self._release()
                # LR_EBUFSIZE is found before anything is computed or
                # recorded: retry with the size it reports.
                if st == _BUFSIZE and scores and d.n_scores > cap:
                    self._score_cap = d.n_scores
                    continue
                check(st, "lr_router_route")
                break
        finally:
            ffi.release(tok)
            if bnd is not None:
                ffi.release(bnd)
            del names  # the request's strings, borrowed for the call
        sc = None
        if scores:
            sc = tuple([Score(s.instance, s.cached_tokens, s.score)
                        for s in buf[0:d.n_scores]])
        return decision_from(d, sc)

    def candidates(self, tokens: Any, *, now_ns: int,
                   request_id: int = 0, tenant_salt: int = 0,
                   session: Optional[int] = None,
                   expected_output_tokens: int = 0,
                   model: Optional[Union[str, bytes]] = None,
                   adapter: Optional[Union[str, bytes]] = None,
                   mm: MmLike = None) -> Candidates:
        """lr_router_candidates(): the candidate table route() would decide
        on for this request now, one row per routable instance in id
        order (with prefill instances routable, the rows that can decode
        first, then the Role.PREFILL ones, each part in id order), with
        the cached tokens the policy would see, the ring ranks of its key
        and each instance's role and placement. Changes nothing (no
        expiry, recency or draw).

        policy.decide() over it with the router's policy, policy_input()
        and a route's Decision.seed makes that route's choice. StateError
        with no routable instance. ``model`` and ``adapter`` as route():
        only the model's instances have rows, and the adapter columns
        (adapter_missing, adapter_free, adapter_load_s, ...) are the
        adapter's. ``mm`` as route(): the cached tokens are those of the
        prompt with its multimodal inputs."""
        q, names = _request(request_id, now_ns, tenant_salt, session,
                            expected_output_tokens, 0, model=model,
                            adapter=adapter, mm=mm)
        n = ffi.new("size_t *")
        with u32_in(tokens, "tokens") as tok:
            q.tokens = tok
            q.n_tokens = len(tok)
            cap = max(self.instance_count, 1)  # routable ones and fewer
            while True:
                rows = ffi.new("lr_candidate[]", cap)
                with self._use() as p:
                    st = lib.lr_router_candidates(p, q, rows, cap, ROW_SIZE,
                                                  n)
                # Instances added meanwhile may make it short again.
                if st == _BUFSIZE and n[0] > cap:
                    cap = n[0]
                    continue
                check(st, "lr_router_candidates")
                del names  # borrowed for the call
                return Candidates._wrap(rows, n[0])

    def policy_input(self, tokens: Any, *, now_ns: int = 0,
                     request_id: int = 0, tenant_salt: int = 0,
                     session: Optional[int] = None,
                     expected_output_tokens: int = 0,
                     boundaries: Any = None,
                     deadline_ns: int = 0,
                     model: Optional[Union[str, bytes]] = None,
                     adapter: Optional[Union[str, bytes]] = None,
                     mm: MmLike = None) -> PolicyInput:
        """lr_router_policy_input(): the rest of what route() hands the
        policy for this request now, besides the table (candidates()), the
        seed (Decision.seed) and Lodestar's model (learner_save()): the
        request's prompt and expected output tokens (the router's default
        applied), the block size, round-robin's cursor, the parameters
        in service (for GORGO during a tuner trial, the trial's weights,
        not params()' incumbent) and the TTFT budget, ``deadline_ns`` less
        ``now_ns`` in seconds (1e-9 once it has passed; 0.0 without a
        deadline). Changes nothing. The request is checked as route()
        checks it (InvalidArgumentError); ``now_ns`` is read only for the
        budget. ``model``, ``adapter`` and ``mm`` as route(). See
        PolicyInput for replaying a route with it."""
        q, names = _request(request_id, now_ns, tenant_salt, session,
                            expected_output_tokens, 0,
                            deadline_ns=deadline_ns, model=model,
                            adapter=adapter, mm=mm)
        inp = new_sized("lr_policy_input", lib.lr_policy_input_init_sized)
        cap = lib.lr_param_count()
        with u32_in(tokens, "tokens") as tok, \
                u32_in(boundaries, "boundaries") as bnd:
            q.tokens = tok
            q.n_tokens = len(tok)
            if boundaries is not None:
                q.boundaries = bnd
                q.n_boundaries = len(bnd)
            while True:
                params = ffi.new("double[]", max(cap, 1))
                with self._use() as p:
                    st = lib.lr_router_policy_input(p, q, inp, params, cap)
                if st == _BUFSIZE and inp.n_params > cap:
                    cap = inp.n_params
                    continue
                check(st, "lr_router_policy_input")
                del names  # borrowed for the call
                return policy_input_from(inp, params)

    # ---- lifecycle ------------------------------------------------------

    def prefill_done(self, request_id: int, *, now_ns: int) -> None:
        """lr_router_prefill_done(): the prefill leg of a split request
        (Decision.prefill_instance) ended: its KV has moved to the decode
        instance (vLLM: the prefill request returned its
        kv_transfer_params). The prefill instance's load drops it, and the
        prefill's time feeds the policies that learn from it. A request
        that was not split, or whose leg ended before: a no-op; a first
        token ends the leg too. NotFoundError for a request not in
        flight."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_router_prefill_done(p, rid, now)
        check(st, "lr_router_prefill_done")

    def first_token(self, request_id: int, *, now_ns: int) -> None:
        """lr_router_first_token(): TTFT = now_ns - route time."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_router_first_token(p, rid, now)
        check(st, "lr_router_first_token")

    def complete(self, request_id: int, output_tokens: int, *,
                 now_ns: int) -> None:
        """lr_router_complete(): the request finished."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        out = u32(output_tokens, "output_tokens")
        with self._use() as p:
            st = lib.lr_router_complete(p, rid, out, now)
        check(st, "lr_router_complete")

    def observe_cached(self, request_id: int, cached_tokens: int, *,
                       now_ns: int) -> None:
        """lr_router_observe_cached(): the engine reused ``cached_tokens``
        of the request's prompt (llama.cpp's ``timings.cache_n``, vLLM's
        ``usage.prompt_tokens_details.cached_tokens``), in the router's
        tokens. Once per request, before complete() or fail(); a repeat
        changes nothing. The router keeps, per instance, the share of its
        expected hits the engine did not deliver (Candidate.cached_lost),
        which adaptive discounts."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        n = u32(cached_tokens, "cached_tokens")
        with self._use() as p:
            st = lib.lr_router_observe_cached(p, rid, n, now)
        check(st, "lr_router_observe_cached")

    def fail(self, request_id: int, *, now_ns: int) -> None:
        """lr_router_fail(): the request failed or was cancelled. A
        request waiting in the queue is withdrawn: never dispatched."""
        rid, now = u64(request_id, "request_id"), u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_router_fail(p, rid, now)
        check(st, "lr_router_fail")

    # ---- waiting --------------------------------------------------------

    def dispatch(self, now_ns: int, *,
                 capacity: Optional[int] = None) -> List[Dispatched]:
        """lr_router_dispatch(): let waiting requests out of the queue.
        Call it whenever capacity may have freed (a first token, a
        completion, a scrape, a timer). First come those whose deadline is
        at or before ``now_ns`` (Status.EEXPIRED, earliest first), then,
        while the fleet is not saturated, the next by urgency, fair share
        between tenants and arrival, each routed now as route() would
        route it (Status.OK: send it to its ``instance``). Every entry has
        left the queue.

        ``capacity`` lets at most that many out (one call); by default
        every one that may go now is returned. A failure (OutOfMemoryError:
        that request stays waiting) raises with the entries let out before
        it attached as ``.dispatched``: they have left the queue too."""
        now = u64(now_ns, "now_ns")
        if capacity is None:
            cap = _DISPATCH_CHUNK
        else:
            cap = int(capacity)
            if cap < 0:
                raise ValueError("capacity must be >= 0")
        buf = ffi.new("lr_dispatched[]", cap) if cap else ffi.NULL
        n = ffi.new("size_t *")
        out: List[Dispatched] = []
        while True:
            with self._use() as p:
                st = lib.lr_router_dispatch(p, now, buf, cap,
                                            _DISPATCHED_SIZE, n)
            if n[0]:
                out.extend([_dispatched(e) for e in buf[0:n[0]]])
            if st != 0:
                err = error_for(st, "lr_router_dispatch")
                err.dispatched = out  # type: ignore[attr-defined]
                raise err
            # A full buffer may have stopped it: ask again.
            if capacity is not None or n[0] < cap:
                return out

    def saturated(self, now_ns: int) -> bool:
        """lr_router_saturated(): whether every routable instance is
        saturated now (True with none routable), as route() and dispatch()
        judge it: Param.SATURATION_QUEUE of the router's requests waiting
        for their first token there, or a fresh scrape reporting that many
        waiting or Param.SATURATION_KV of its KV cache in use. A query:
        changes nothing."""
        now = u64(now_ns, "now_ns")
        out = ffi.new("int32_t *")
        with self._use() as p:
            st = lib.lr_router_saturated(p, now, out)
        check(st, "lr_router_saturated")
        return bool(out[0])

    # ---- rebalancing ----------------------------------------------------

    def rebalance_plan(self, now_ns: int,
                       max_moves: Optional[int] = None) -> List[Move]:
        """lr_router_rebalance_plan(): moves of queued requests off
        overloaded instances; changes nothing. Carry a move out, then
        report it with move(). ``max_moves`` stops the plan early; by
        default the whole plan is returned."""
        now = u64(now_ns, "now_ns")
        n = ffi.new("size_t *")
        if max_moves is not None:
            cap = int(max_moves)
            if cap < 0:
                raise ValueError("max_moves must be >= 0")
        else:
            # Each request moves at most once: in flight bounds the plan.
            cap = max(self.stats().inflight, 16)
        while True:
            moves = ffi.new("lr_move[]", max(cap, 1))
            with self._use() as p:
                st = lib.lr_router_rebalance_plan(p, now, moves, cap,
                                                  _MOVE_SIZE, n)
            check(st, "lr_router_rebalance_plan")
            # The C call cannot say it stopped at capacity (no *needed);
            # a full buffer may be a cut plan, so ask again with room.
            if max_moves is not None or n[0] < cap:
                break
            cap *= 2
        return [Move(m.request_id, getattr(m, "from"), m.to, m.benefit_s)
                for m in moves[0:n[0]]]

    def move(self, request_id: int, to: int) -> None:
        """lr_router_move(): a queued request now runs on ``to``."""
        rid, dst = u64(request_id, "request_id"), u32(to, "to")
        with self._use() as p:
            st = lib.lr_router_move(p, rid, dst)
        check(st, "lr_router_move")

    # ---- parameters -----------------------------------------------------

    def set_param(self, key: ParamLike, value: float) -> None:
        """lr_router_set_param(): out of bounds raises OutOfRangeError
        (never clamped); see Param.X.bounds."""
        k, v = _param(key), float(value)
        with self._use() as p:
            st = lib.lr_router_set_param(p, k, v)
        check(st, "lr_router_set_param")

    def get_param(self, key: ParamLike) -> float:
        """lr_router_get_param() (the tuned value for GORGO's weights)."""
        k = _param(key)
        out = ffi.new("double *")
        with self._use() as p:
            st = lib.lr_router_get_param(p, k, out)
        check(st, "lr_router_get_param")
        return out[0]

    def params(self) -> Dict[Param, float]:
        """Every parameter the library has (lr_param_count()) with its
        value here (get_param()). For GORGO's weights this is the
        incumbent, which during a tuner trial differs from the weights in
        service: replay routes with policy_input()'s params."""
        return {as_enum(Param, k): self.get_param(k)
                for k in range(lib.lr_param_count())}

    # ---- precise mode and replicas --------------------------------------

    def kv_stored(self, instance: int, block_hashes: Any, token_ids: Any, *,
                  block_size: int, now_ns: int,
                  parent_hash: Optional[int] = None,
                  tenant_salt: int = 0, tier: int = Tier.GPU,
                  mm_hashes: Any = None) -> None:
        """lr_router_kv_stored(): see Index.kv_stored(). A lower ``tier``'s
        blocks show in the candidate rows as ``cpu_tokens`` and
        ``disk_tokens``. ``mm_hashes``, the blocks' multimodal hashes, as
        Index.kv_stored(): a request's ``mm`` inputs match them."""
        inst = u32(instance, "instance")
        now = u64(now_ns, "now_ns")
        with _kv_stored(block_hashes, token_ids, block_size, parent_hash,
                        tenant_salt, tier, mm_hashes) as ev, \
                self._use() as p:
            st = lib.lr_router_kv_stored(p, inst, ev, now)
        check(st, "lr_router_kv_stored")

    def kv_removed(self, instance: int, block_hashes: Any, *,
                   tier: int = Tier.GPU) -> int:
        """lr_router_kv_removed(): returns how many hashes were known.
        With a lower ``tier``, lr_router_kv_removed_tier(): see
        Index.kv_removed()."""
        inst, t = u32(instance, "instance"), tier_in(tier)
        n = ffi.new("size_t *")
        with u64_in(block_hashes, "block_hashes") as h, self._use() as p:
            if t == Tier.GPU:
                st = lib.lr_router_kv_removed(p, inst, h, len(h), n)
            else:
                st = lib.lr_router_kv_removed_tier(p, inst, t, h, len(h), n)
        check(st, "lr_router_kv_removed" if t == Tier.GPU
              else "lr_router_kv_removed_tier")
        return n[0]

    def kv_cleared(self, instance: int) -> None:
        """lr_router_kv_cleared()."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_kv_cleared(p, inst)
        check(st, "lr_router_kv_cleared")

    def vllm_batch(self, instance: int, payload: Any, *,
                   now_ns: int) -> VllmBatchInfo:
        """lr_router_vllm_batch(): Index.vllm_batch() on the router's
        index, under its lock."""
        inst, now = u32(instance, "instance"), u64(now_ns, "now_ns")
        info = new_info()
        with bytes_in(payload, "payload") as buf, self._use() as p:
            st = lib.lr_router_vllm_batch(p, inst, buf, len(buf), now, info)
        return finish(st, info, "lr_router_vllm_batch")

    def vllm_batch_seq(self, instance: int, seq: int, payload: Any, *,
                       now_ns: int) -> VllmBatchInfo:
        """lr_router_vllm_batch_seq(): vllm_batch() for batch number
        ``seq`` of the instance's engine, applied in order and once
        (``info.seq_state`` says what the number made of it: a replayed
        batch is a DUPLICATE, an engine restart drops its routes first). A
        gap raises GapError: nothing applied; replay from
        ``err.info.next_seq``."""
        inst, now = u32(instance, "instance"), u64(now_ns, "now_ns")
        sq = u64(seq, "seq")
        info = new_info()
        with bytes_in(payload, "payload") as buf, self._use() as p:
            st = lib.lr_router_vllm_batch_seq(p, inst, sq, buf, len(buf), now,
                                              info)
        return finish(st, info, "lr_router_vllm_batch_seq")

    def kv_source(self, instance: int) -> KvSource:
        """lr_router_kv_source(): the instance's event stream: whether a
        gap is open, and the sequence number to replay from."""
        inst = u32(instance, "instance")
        s = new_sized("lr_kv_source", lib.lr_kv_source_init_sized)
        with self._use() as p:
            st = lib.lr_router_kv_source(p, inst, s)
        check(st, "lr_router_kv_source")
        return from_struct(KvSource, s, has_seq=bool(s.has_seq),
                           gap=bool(s.gap))

    def kv_reset(self, instance: int) -> None:
        """lr_router_kv_reset(): the engine restarted, or its events cannot
        be replayed: drop its routes; its next batch starts it anew."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_router_kv_reset(p, inst)
        check(st, "lr_router_kv_reset")

    def export_gauges(self) -> bytes:
        """lr_router_export_gauges(): this replica's in-flight counters per
        instance, for the other replicas (StateError without a
        replica_id)."""
        out = ffi.new("lr_blob **")
        with self._use() as p:
            st = lib.lr_router_export_gauges(p, out)
        check(st, "lr_router_export_gauges")
        return take_blob(out)

    def import_gauges(self, data: Any, *, now_ns: int) -> None:
        """lr_router_import_gauges(): another replica's gauge; its counts
        add to this router's own in every candidate row until it expires
        (gauge_ttl_ns) or a newer one replaces it."""
        now = u64(now_ns, "now_ns")
        with bytes_in(data, "data") as buf, self._use() as p:
            st = lib.lr_router_import_gauges(p, buf, len(buf), now)
        check(st, "lr_router_import_gauges")

    def set_peer_key(self, key: Optional[bytes]) -> None:
        """lr_router_set_peer_key(): a 16-byte key shared by every replica;
        deltas and gauges are then sealed with it and only those sealed
        with it are taken. None clears it."""
        if key is None:
            with self._use() as p:
                st = lib.lr_router_set_peer_key(p, ffi.NULL, 0)
        else:
            with bytes_in(key, "key") as buf, self._use() as p:
                st = lib.lr_router_set_peer_key(p, buf, len(buf))
        check(st, "lr_router_set_peer_key")

    def snapshot(self, *, now_ns: int) -> bytes:
        """lr_router_snapshot(): the router's learned state (instances,
        routes with trust and ages, engine hashes, sequence and delta
        watermarks, tuned weights, Lodestar's network) as bytes."""
        now = u64(now_ns, "now_ns")
        out = ffi.new("lr_blob **")
        with self._use() as p:
            st = lib.lr_router_snapshot(p, now, out)
        check(st, "lr_router_snapshot")
        return take_blob(out)

    def restore(self, data: Any, *, now_ns: int) -> None:
        """lr_router_restore(): a snapshot into this router, which has no
        instance yet; all or nothing (CorruptError, VersionError,
        StateError, ...)."""
        now = u64(now_ns, "now_ns")
        with bytes_in(data, "data") as buf, self._use() as p:
            st = lib.lr_router_restore(p, buf, len(buf), now)
        check(st, "lr_router_restore")

    def mark(self) -> int:
        """lr_router_mark(): the journal position for export_delta()."""
        with self._use() as p:
            return lib.lr_router_mark(p)

    def export_delta(self, since_mark: int = 0) -> Delta:
        """lr_router_export_delta(): bytes for other gateway replicas and
        the mark to pass next time."""
        out = ffi.new("lr_blob **")
        mark = ffi.new("uint64_t *")
        since = u64(since_mark, "since_mark")
        with self._use() as p:
            st = lib.lr_router_export_delta(p, since, out, mark)
        check(st, "lr_router_export_delta")
        return Delta(take_blob(out), mark[0])

    def import_delta(self, data: Any, *, now_ns: int) -> None:
        """lr_router_import_delta(): a peer's delta (bytes-like, read in
        place); its routes become REMOTE routes here. A delta applied
        before, or this router's own (an echo), changes nothing."""
        now = u64(now_ns, "now_ns")
        with bytes_in(data, "data") as buf, self._use() as p:
            st = lib.lr_router_import_delta(p, buf, len(buf), now)
        check(st, "lr_router_import_delta")

    def expire(self, now_ns: int) -> None:
        """lr_router_expire(): drop routes unused for longer than the TTL
        (route() does this too; for hosts with idle periods)."""
        now = u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_router_expire(p, now)
        check(st, "lr_router_expire")

    # ---- Lodestar ---------------------------------------------------------

    def learn_step(self, force: bool = False) -> bool:
        """lr_router_learn_step(): take the samples routes produced and,
        when enough have arrived (or with ``force``, whenever there is
        any), train and publish a new model; returns whether one was
        published. Call it from a background thread: it trains outside the
        router's lock, so route() on other threads never waits for it. A
        step racing another step raises StateError, as does a router that
        never chose lodestar."""
        trained = ffi.new("int32_t *")
        with self._use() as p:
            st = lib.lr_router_learn_step(p, _FORCE if force else 0,
                                          trained)
        check(st, "lr_router_learn_step")
        return bool(trained[0])

    @property
    def learner_feature_count(self) -> int:
        """lr_lodestar_feature_count(): floats per learner row
        (lodestar_feature_count())."""
        with self._use():
            return lib.lr_lodestar_feature_count()

    def learner_samples(self) -> Samples:
        """lr_router_learner_samples(): the samples the learner's next
        round would train on, learner_feature_count floats per row.
        StateError with no learner or during a step."""
        with self._use() as p:
            width = lib.lr_lodestar_feature_count()
            return samples_into(
                lambda x, y, cap, n: lib.lr_router_learner_samples(
                    p, x, width, y, cap, n),
                width, "lr_router_learner_samples")

    def learner_save(self) -> bytes:
        """lr_router_learner_save(): Lodestar's model in service as
        Mlp.save() bytes (taking over a newly trained one first, as
        route() would). ``Mlp.load()`` of them scores candidates exactly
        as route() does: the ``model`` to replay a trained Lodestar
        router's routes with policy.decide(). StateError with no learner
        or no model yet."""
        out = ffi.new("lr_blob **")
        with self._use() as p:
            st = lib.lr_router_learner_save(p, out)
        check(st, "lr_router_learner_save")
        return take_blob(out)

    def learner_stats(self) -> LearnerStats:
        """lr_router_learner_stats(): the learner's counters (StateError
        until lodestar has been chosen once)."""
        s = new_stats()
        with self._use() as p:
            st = lib.lr_router_learner_stats(p, s)
        check(st, "lr_router_learner_stats")
        return stats_from(s)

    # ---- statistics -----------------------------------------------------

    def stats(self) -> RouterStats:
        """lr_router_get_stats()."""
        s = new_sized("lr_router_stats", lib.lr_router_stats_init_sized)
        with self._use() as p:
            st = lib.lr_router_get_stats(p, s)
        check(st, "lr_router_get_stats")
        # The struct holds reasons 0..15 only; reason_counts() has all.
        by_reason = {as_enum(Reason, i): s.by_reason[i]
                     for i in range(min(len(s.by_reason),
                                        lib.lr_reason_count()))}
        return from_struct(RouterStats, s, by_reason=by_reason)

    def index_stats(self) -> IndexStats:
        """lr_router_index_stats(): the counters of the router's prefix
        index (blocks held, evicted, expired, learned). For a metrics
        scrape, not per request: it holds the router's lock while it
        counts."""
        s = ffi.new("lr_index_stats *")
        # No lr_index_stats_init() exists: stamp the size as the header says.
        s.struct_size = ffi.sizeof("lr_index_stats")
        with self._use() as p:
            st = lib.lr_router_index_stats(p, s)
        check(st, "lr_router_index_stats")
        return from_struct(IndexStats, s)

    def reason_counts(self) -> Dict[Reason, int]:
        """lr_router_reason_counts(): decisions recorded by reason, for
        every reason the library has (lr_reason_count())."""
        n = ffi.new("size_t *")
        cap = lib.lr_reason_count()
        while True:
            counts = ffi.new("uint64_t[]", max(cap, 1))
            with self._use() as p:
                st = lib.lr_router_reason_counts(p, counts, cap, n)
            if st == _BUFSIZE and n[0] > cap:
                cap = n[0]
                continue
            check(st, "lr_router_reason_counts")
            return {as_enum(Reason, i): counts[i] for i in range(n[0])}
