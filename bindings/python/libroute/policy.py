"""lr_policy: every routing policy as a pure function over a candidate
table (include/libroute/lr_policy.h).

A table has one row (lr_candidate) per routable instance: what the policy
sees of it (cached tokens, load, scraped stats, RTT, class speed, ring
rank). Router.candidates() records the table a route() would decide on;
decide() runs a policy over any table, the same code route() runs after
gathering its own. With the same table, parameters and seed it makes the
same choice, so a route can be replayed from Decision.seed, with the
rest of what route() hands the policy from Router.policy_input() (and, for
Lodestar, the model from Router.learner_save()):

    rows = router.candidates(tokens, now_ns=now)
    inp = router.policy_input(tokens)
    d = router.route(tokens, request_id=1, now_ns=now, dry_run=True)
    again = libroute.policy.decide(router.policy, rows, seed=d.seed,
                                   **inp._asdict())
    assert (again.instance, again.reason) == (d.instance, d.reason)

decide() allocates nothing in the library and is reentrant; a Lodestar
model passed to it is used under the Mlp's lock.
"""

from __future__ import annotations

from typing import (Any, Iterable, Iterator, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from ._ffi import ffi, lib
from ._util import new_sized, set_fields, u32, u64
from .enums import Param, Policy, Reason, RingKey, as_enum
from .errors import check, error_for
from .mlp import Mlp

__all__ = ["Candidate", "Candidates", "Decision", "PolicyInput", "Score",
           "decide", "ring_key", "policy_value", "param_key",
           "params_array"]

_NONE = lib.LR_INSTANCE_NONE
ROW_SIZE: int = ffi.sizeof("lr_candidate")
"""The row stride passed to the library: this build's sizeof(lr_candidate)."""

PolicyLike = Union[Policy, int, str]
ParamLike = Union[Param, int, str]


class Score(NamedTuple):
    """One instance's score in a decision (lr_score); lower is better,
    NaN where the policy did not rank the instance."""

    instance: int
    cached_tokens: int
    score: float


class Decision(NamedTuple):
    """A routing decision (lr_decision).

    ``alt_instance`` is None when the policy has no second candidate;
    ``cost`` is NaN when the policy predicts none. ``scores``: from
    Router.route(), None unless it was asked for them (scores=True), then
    one per routable instance in the order of Router.candidates()' rows
    (id order; with prefill instances, those that decode first); from
    decide(), one per row in the table's order. ``decider`` is the policy that chose (the router's,
    or Lodestar's fallback on cold start and out of range) and ``seed`` the
    seed it drew with: decide() with the same table, parameters and seed
    chooses the same.

    In a fleet with prefill instances (Role.PREFILL) a decision may split
    the request: ``prefill_instance`` prefills it and ``instance`` then
    decodes it, its KV moving over in ``transfer_s`` seconds (expected,
    from the placements and Param.KV_GBPS_*); ``prefill_cached_tokens``
    are expected to hit at the prefill instance and ``prefill_reason`` says
    why it was chosen. Kept whole: ``prefill_instance`` None,
    ``transfer_s`` 0, and ``prefill_reason`` Reason.WHOLE when the fleet
    could have split it, None when no candidate was a prefill instance.
    """

    instance: int
    reason: Reason
    cached_tokens: int
    best_cached_tokens: int
    cost: float
    alt_instance: Optional[int]
    scores: Optional[Tuple[Score, ...]]
    decider: Optional[Policy] = None
    seed: int = 0
    prefill_instance: Optional[int] = None
    prefill_reason: Optional[Reason] = None
    prefill_cached_tokens: int = 0
    transfer_s: float = 0.0


class PolicyInput(NamedTuple):
    """What route() hands the policy for a request besides the table, the
    seed and Lodestar's model (lr_policy_input, from
    Router.policy_input()). The field names are decide()'s keywords, so
    ``decide(policy, rows, seed=d.seed, **inp._asdict())`` replays a
    route.

    ``params`` holds every parameter in service, indexed by Param (for
    GORGO's weights during a tuner trial, the trial's, which differ from
    Router.get_param()'s incumbent); ``expected_output_tokens`` has the
    router's default applied; ``last_instance`` is round-robin's cursor,
    None before its first route; ``ttft_budget_s`` is the request's TTFT
    budget, the seconds from its ``now_ns`` to its ``deadline_ns`` (1e-9
    once that has passed, 0.0 without a deadline), which adaptive tries to
    meet (Param.ADAPTIVE_DEADLINE).
    """

    prompt_tokens: int
    expected_output_tokens: int
    block_tokens: int
    last_instance: Optional[int]
    params: Tuple[float, ...]
    ttft_budget_s: float = 0.0


def policy_input_from(inp, params) -> PolicyInput:
    """A PolicyInput from an lr_policy_input whose params are ``params``."""
    last = inp.last_instance
    return PolicyInput(inp.prompt_tokens, inp.expected_output_tokens,
                       inp.block_tokens, None if last == _NONE else last,
                       tuple(params[0:inp.n_params]), inp.ttft_budget_s)


def decision_from(d, scores) -> Decision:
    """A Decision from an lr_decision (v3) and the scores tuple."""
    alt = d.alt_instance
    pre = d.prefill_instance
    return Decision(d.instance, as_enum(Reason, d.reason), d.cached_tokens,
                    d.best_cached_tokens, d.cost,
                    None if alt == _NONE else alt, scores,
                    None if d.decider < 0 else as_enum(Policy, d.decider),
                    d.seed, None if pre == _NONE else pre,
                    None if d.prefill_reason < 0
                    else as_enum(Reason, d.prefill_reason),
                    d.prefill_cached_tokens, d.transfer_s)


def policy_value(value: PolicyLike) -> int:
    """A policy as its int: a Policy, an int, the library's label
    ("prefix-cache-and-load") or the enum name ("PREFIX_CACHE_AND_LOAD")."""
    if isinstance(value, str):
        try:
            return Policy.from_label(value)
        except LookupError:
            try:
                return Policy[value.upper().replace("-", "_")]
            except KeyError:
                raise ValueError(f"unknown policy {value!r}") from None
    return int(value)


def param_key(key: ParamLike) -> int:
    """A parameter key as its int: a Param, an int, or its name
    ("TTFT_SLO_S", case-insensitive)."""
    if isinstance(key, str):
        try:
            return Param[key.upper()]
        except KeyError:
            raise ValueError(f"unknown parameter {key!r}") from None
    return int(key)


class Candidate(NamedTuple):
    """One row of a candidate table (lr_candidate), as a policy sees an
    instance. The defaults are an idle instance that caches prefixes,
    with the library's default class speed and no ring rank, holding no
    LoRA adapter in slots not known (``adapter_free`` UINT32_MAX).

    The adapter columns are the request's LoRA adapter's there:
    ``adapter_missing`` 1 when it must be loaded first, ``adapter_free``
    the slots free to load one without waiting, ``adapter_load_s`` the
    expected load time (0 when resident), ``adapters_resident`` the
    adapters it holds, ``adapter_evicts`` 1 when loading evicts one.

    The lower-tier columns are the prompt tokens past ``cached_tokens``
    its engine holds on a lower tier of its KV cache (blocks offloaded to
    host memory, ``cpu_tokens``, and beyond those on disk,
    ``disk_tokens``; Index.kv_stored(tier=)): loaded, not computed, on a
    hit. dynamo and adaptive weigh them (Param.TIER_CPU_WEIGHT,
    Param.TIER_DISK_WEIGHT).

    ``role`` is its lr_role in a disaggregated fleet (a Role; 0,
    Role.BOTH, by default): in a table with Role.PREFILL rows every row
    that can decode comes first. ``node``, ``rack`` and ``region`` are
    where it runs (0: unknown), which prices a KV transfer between two
    rows (Param.KV_GBPS_NODE .. KV_GBPS_WAN). ``decode_s`` is the router's
    calibrated decode seconds of its class for adaptive (first token to
    completion, 0 before any), what a prefill kept there is weighed
    against (Param.ADAPTIVE_PD_STALL).

    ``sibling_tokens``: a sibling of the request there (another prompt
    routed there in the last 30 s through the point where this request's
    hit ends, and on past it): its tokens past that point, which an
    engine of slots (llama.cpp) overwrites. ``sibling_fork_tokens``:
    where a sibling left this request's path within its hit there since
    its own last route there. ``sibling_lost``: the share of hits past
    such a fork the engine lately did not deliver, less that of hits
    without one (high for slots, near 0 for a paged engine); adaptive
    counts a hit with a sibling x (1 - min(1, 4 x sibling_lost))."""

    instance: int
    cached_tokens: int = 0
    inflight: int = 0
    queued: int = 0
    prefill_tokens: int = 0
    queued_tokens: int = 0
    prompt_tokens: int = 0
    decode_tokens: int = 0
    kv_tokens: int = 0
    running: int = 0
    waiting: int = 0
    kv_use: float = 0.0
    rtt_ms: float = 0.0
    prefill_rate: float = 8000.0
    stall_s: float = 0.0
    cached_age_s: float = -1.0
    instance_class: int = 0
    prefix_caching: int = 1
    ring_rank: int = 0
    flags: int = 0
    tree_blocks: int = 0
    ttft_s_per_token: float = 0.0
    ttft_base_s: float = 0.0
    ttft_s_per_decoding: float = 0.0
    prefill_tokens_avg: float = 0.0
    route_rate: float = 0.0
    cached_lost: float = 0.0
    adapter_missing: int = 0
    adapter_free: int = 0xFFFFFFFF
    adapter_load_s: float = 0.0
    adapters_resident: int = 0
    adapter_evicts: int = 0
    cpu_tokens: int = 0
    disk_tokens: int = 0
    role: int = 0
    node: int = 0
    rack: int = 0
    region: int = 0
    decode_s: float = 0.0
    sibling_tokens: int = 0
    sibling_fork_tokens: int = 0
    sibling_lost: float = 0.0


_FIELDS = Candidate._fields


class Candidates(Sequence):
    """A candidate table: an ``lr_candidate[]`` array in C memory, which
    decide() and Cost.eval() read in place.

    Build one from rows (Candidate tuples or mappings of its fields,
    unnamed fields taking Candidate's defaults), get one from
    Router.candidates(), or ``Candidates.zeros(n)``. Indexing gives a
    Candidate (a copy); assigning a Candidate or a mapping replaces a row;
    ``table.cdata[i].kv_use = 0.9`` edits one field in place.
    """

    __slots__ = ("_c", "_n")

    def __init__(self, rows: Iterable[Union[Candidate, Mapping[str, Any]]]
                 = ()) -> None:
        rows = list(rows)
        self._c = ffi.new("lr_candidate[]", max(len(rows), 1))
        self._n = len(rows)
        for i, row in enumerate(rows):
            self[i] = row

    @classmethod
    def zeros(cls, n: int) -> "Candidates":
        """n rows of zeros (prefill_rate 0 is invalid: fill them in)."""
        t = cls.__new__(cls)
        n = int(n)
        if n < 0:
            raise ValueError("n must be >= 0")
        t._c = ffi.new("lr_candidate[]", max(n, 1))
        t._n = n
        return t

    @classmethod
    def _wrap(cls, cdata, n: int) -> "Candidates":
        t = cls.__new__(cls)
        t._c = cdata
        t._n = n
        return t

    @property
    def cdata(self):
        """The ``lr_candidate[]`` array (at least len(self) rows)."""
        return self._c

    row_size = ROW_SIZE

    def __len__(self) -> int:
        return self._n

    def _index(self, i: int) -> int:
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("candidate row out of range")
        return i

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        c = self._c[self._index(i)]
        return Candidate(*[getattr(c, f) for f in _FIELDS])

    def __setitem__(self, i: int, row) -> None:
        k = self._index(i)
        if isinstance(row, Candidate):
            fields = row._asdict()
        elif isinstance(row, Mapping):
            bad = sorted(set(row) - set(_FIELDS))
            if bad:
                raise TypeError(f"candidate row {k}: unknown field(s) {bad}")
            if "instance" not in row:
                raise TypeError(f"candidate row {k}: needs an instance")
            fields = Candidate(**row)._asdict()
        else:
            raise TypeError(f"candidate row {k}: expected a Candidate or a "
                            f"mapping, got {type(row).__name__}")
        fields["prefix_caching"] = int(fields["prefix_caching"])
        set_fields(self._c[k], f"candidate row {k}", **fields)

    def __iter__(self) -> Iterator[Candidate]:
        for i in range(self._n):
            yield self[i]

    def __eq__(self, other) -> bool:
        if isinstance(other, Candidates):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> "Candidates":
        """An independent copy of the table."""
        t = Candidates.zeros(self._n)
        ffi.memmove(t._c, self._c, ROW_SIZE * self._n)
        return t

    def __repr__(self) -> str:
        return f"<libroute.Candidates of {self._n} rows>"


def as_table(rows) -> Candidates:
    """rows as a Candidates (itself when it is one)."""
    if isinstance(rows, Candidates):
        return rows
    if isinstance(rows, (str, bytes)):
        raise TypeError("rows: expected candidate rows")
    return Candidates(rows)


def params_array(params) -> Tuple[Any, int]:
    """``(double[] cdata or NULL, n)`` for lr_policy_input.params: None (all
    defaults), a sequence of values indexed by key, or a mapping of keys
    (Param, int or name) to values, the keys it leaves out taking their
    defaults (lr_param_bounds)."""
    if params is None:
        return ffi.NULL, 0
    if isinstance(params, Mapping):
        given = {param_key(k): float(v) for k, v in params.items()}
        if not given:
            return ffi.NULL, 0
        if min(given) < 0:
            raise error_for(lib.LR_ENOTSUP, "lr_param_bounds",
                            f"no parameter {min(given)}")
        n = max(given) + 1
        values = []
        for k in range(n):
            if k in given:
                values.append(given[k])
                continue
            b = lib.lr_param_bounds(k)
            check(b.status, "lr_param_bounds")
            values.append(getattr(b, "def"))
        return ffi.new("double[]", values), n
    if isinstance(params, (str, bytes)):
        raise TypeError("params: expected a mapping or a sequence of numbers")
    try:
        values = [float(v) for v in params]
    except TypeError:
        raise TypeError("params: expected a mapping or a sequence of "
                        "numbers") from None
    if not values:
        return ffi.NULL, 0
    return ffi.new("double[]", values), len(values)


def decide(policy: PolicyLike, rows, *, prompt_tokens: int, seed: int = 0,
           params=None, model=None, expected_output_tokens: int = 0,
           block_tokens: int = 16,
           last_instance: Optional[int] = None,
           ttft_budget_s: float = 0.0) -> Decision:
    """lr_policy_decide(): choose one row of a candidate table.

    ``rows`` is a Candidates (read in place) or an iterable of Candidate
    rows or mappings. ``params`` as params_array() takes them (keys out of
    bounds raise OutOfRangeError, unknown keys NotSupportedError).
    ``model`` is an Mlp with lodestar_feature_count() inputs that scores
    Lodestar's candidates (None: cold start, its fallback decides).
    ``last_instance`` is the instance round-robin served last.
    ``ttft_budget_s`` is the request's TTFT budget in seconds (0.0: no
    deadline); adaptive, with Param.ADAPTIVE_DEADLINE on, prefers a row
    predicted to meet it (reason Reason.SLO_SWITCH when that changes its
    choice). A Router.policy_input() supplies all but ``seed`` and
    ``model``.

    Returns a Decision whose ``scores`` has one Score per row, in the
    table's order. A table with Role.PREFILL rows (after every row that
    can decode) gets a pair decision: see Decision.prefill_instance. Bad rows (cached_tokens above prompt_tokens, a
    prefill_rate that is not positive, kv_use outside [0, 1], a negative
    or non-finite rtt_ms or stall_s, no rows) and a negative or
    non-finite ``ttft_budget_s`` raise InvalidArgumentError;
    an unknown policy NotSupportedError. Rows may name one instance twice:
    the policy ranks rows, not instances.
    """
    pol = policy_value(policy)
    table = as_table(rows)
    n = len(table)
    inp = new_sized("lr_policy_input", lib.lr_policy_input_init_sized)
    set_fields(inp, "decide", prompt_tokens=u32(prompt_tokens,
                                                "prompt_tokens"),
               seed=u64(seed, "seed"),
               expected_output_tokens=u32(expected_output_tokens,
                                          "expected_output_tokens"),
               block_tokens=u32(block_tokens, "block_tokens"),
               last_instance=_NONE if last_instance is None
               else u32(last_instance, "last_instance"),
               ttft_budget_s=ttft_budget_s)
    pa, npa = params_array(params)
    inp.params = pa
    inp.n_params = npa
    scores = ffi.new("double[]", max(n, 1))
    d = new_sized("lr_decision", lib.lr_decision_init_sized)
    if model is None:
        st = lib.lr_policy_decide(pol, inp, table.cdata, n, ROW_SIZE, scores,
                                  d)
    else:
        if not isinstance(model, Mlp):
            raise TypeError(f"model: expected a libroute.Mlp, got "
                            f"{type(model).__name__}")
        with model._use() as mp:
            inp.model = mp
            st = lib.lr_policy_decide(pol, inp, table.cdata, n, ROW_SIZE,
                                      scores, d)
            inp.model = ffi.NULL
    check(st, "lr_policy_decide")
    c = table.cdata
    sc = tuple([Score(c[i].instance, c[i].cached_tokens, scores[i])
                for i in range(n)])
    return decision_from(d, sc)


def ring_key(policy: PolicyLike) -> Tuple[Union[RingKey, int], int]:
    """lr_policy_ring_key(): the ring key a policy ranks its rows by
    (RingKey.NONE when it uses no ring) and how many ranks it reads.
    An unknown policy raises NotSupportedError."""
    pol = policy_value(policy)
    ranks = ffi.new("uint32_t *")
    key = lib.lr_policy_ring_key(pol, ranks)
    if key < 0:
        raise error_for(lib.LR_ENOTSUP, "lr_policy_ring_key",
                        f"no policy {policy!r}")
    return as_enum(RingKey, key), ranks[0]
