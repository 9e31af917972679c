"""lr_cost: the cost models the policies rank candidates by, as a handle
(include/libroute/lr_cost.h).

    with libroute.Cost("gorgo", seed=1) as c:
        costs = c.eval(rows, prompt_tokens=8192)   # one per row, lower wins
        c.tune()                                   # GORGO's online tuner
        for ttft in observed_ttfts:
            c.observe(ttft)
        c.tuner_stats(), c.params()

Three kinds (CostKind): TTFT (seconds), GORGO (tokens, with its (1+1)-ES
tuner over W_RTT and W_QUEUE) and DYNAMO (blocks). Each has a subset of
the CostParam keys; Cost.params() lists them with their values.

Thread safety: one thread at a time per handle (the object serializes its
calls with a lock); give each thread its own Cost for parallelism.
"""

from __future__ import annotations

import array
from typing import Any, Dict, NamedTuple, Optional, Union

from ._ffi import ffi, lib
from ._util import _Handle, new_sized, set_fields, u32
from .enums import Bounds, CostKind, CostParam, as_enum, bounds_from
from .errors import check
from .policy import ROW_SIZE, as_table

__all__ = ["Cost", "CostTunerStats", "cost_param_bounds", "TUNER_OFF",
           "TUNER_MEASURING", "TUNER_TRIAL", "TUNER_CONVERGED"]

CostKindLike = Union[CostKind, int, str]
CostParamLike = Union[CostParam, int, str]

#: CostTunerStats.state values (lr_cost_tuner_stats.state).
TUNER_OFF, TUNER_MEASURING, TUNER_TRIAL, TUNER_CONVERGED = 0, 1, 2, 3



class CostTunerStats(NamedTuple):
    """The GORGO tuner's progress (lr_cost_tuner_stats). ``state`` is one
    of TUNER_OFF, TUNER_MEASURING, TUNER_TRIAL, TUNER_CONVERGED;
    ``incumbent_p95_s`` is NaN before the first judgement."""

    state: int
    trials: int
    accepted: int
    sigma: float
    incumbent_p95_s: float
    samples: int


def _kind_value(kind: CostKindLike) -> int:
    if isinstance(kind, str):
        for k in CostKind:
            if kind in (k.label, k.name, k.name.lower()):
                return int(k)
        raise ValueError(f"unknown cost model kind {kind!r}")
    return int(kind)


def _key_value(key: CostParamLike) -> int:
    if isinstance(key, str):
        try:
            return CostParam[key.upper()]
        except KeyError:
            raise ValueError(f"unknown cost parameter {key!r}") from None
    return int(key)


def cost_param_bounds(kind: CostKindLike, key: CostParamLike) -> Bounds:
    """lr_cost_param_bounds(): bounds and default of a parameter for a
    kind; NotSupportedError when the kind has no such key."""
    b = lib.lr_cost_param_bounds(_kind_value(kind), _key_value(key))
    return bounds_from(b, "lr_cost_param_bounds")


class Cost(_Handle):
    """A cost model (lr_cost) with its kind's default parameters, not
    tuning. ``kind`` takes a CostKind, its label ("gorgo") or name;
    ``seed`` seeds the tuner's steps. Use it as a context manager or call
    close(); otherwise the garbage collector destroys it."""

    __slots__ = ()
    _kind = "Cost"

    def __init__(self, kind: CostKindLike = CostKind.TTFT, *,
                 seed: Optional[int] = None) -> None:
        opt = new_sized("lr_cost_options", lib.lr_cost_options_init_sized)
        set_fields(opt, "Cost", kind=_kind_value(kind), seed=seed)
        out = ffi.new("lr_cost **")
        check(lib.lr_cost_create(opt, out), "lr_cost_create")
        self._own(out[0], lib.lr_cost_destroy, exclusive=True)

    @property
    def kind(self) -> CostKind:
        """lr_cost_kind_of(): the model's kind."""
        with self._use() as p:
            return as_enum(CostKind, lib.lr_cost_kind_of(p))

    def set_param(self, key: CostParamLike, value: float) -> None:
        """lr_cost_set_param(): NotSupportedError for a key the kind does
        not have, OutOfRangeError out of bounds. Setting W_RTT or W_QUEUE
        while tuning ends the trial: the value becomes the incumbent."""
        k, v = _key_value(key), float(value)
        with self._use() as p:
            st = lib.lr_cost_set_param(p, k, v)
        check(st, "lr_cost_set_param")

    def get_param(self, key: CostParamLike) -> float:
        """lr_cost_get_param(): for the tuned weights, the incumbent."""
        k = _key_value(key)
        out = ffi.new("double *")
        with self._use() as p:
            st = lib.lr_cost_get_param(p, k, out)
        check(st, "lr_cost_get_param")
        return out[0]

    def param_bounds(self, key: CostParamLike) -> Bounds:
        """cost_param_bounds() for this model's kind."""
        return cost_param_bounds(self.kind, key)

    def params(self) -> Dict[Any, float]:
        """Every parameter this model's kind has, with its value."""
        kind = int(self.kind)
        out = {}
        for k in range(lib.lr_cost_param_count()):
            if lib.lr_cost_param_bounds(kind, k).status == 0:
                out[as_enum(CostParam, k)] = self.get_param(k)
        return out

    def eval(self, rows, *, prompt_tokens: int) -> "array.array[float]":
        """lr_cost_eval(): each row's cost (lower is better) with the
        weights in service, as an ``array('d')`` in the rows' order.
        ``rows`` as policy.decide() takes them. A row whose cached_tokens
        exceeds prompt_tokens, or (TTFT) whose prefill_rate is not
        positive, raises InvalidArgumentError."""
        table = as_table(rows)
        n = len(table)
        pt = u32(prompt_tokens, "prompt_tokens")
        out = array.array("d", bytes(8 * n))
        if n == 0:
            return out
        with ffi.from_buffer("double[]", out, require_writable=True) as co, \
                self._use() as p:
            st = lib.lr_cost_eval(p, pt, table.cdata, n, ROW_SIZE, co)
        check(st, "lr_cost_eval")
        return out

    def tune(self, on: bool = True) -> None:
        """lr_cost_tune(): start (or stop, with on=False) GORGO's tuner;
        NotSupportedError for the other kinds."""
        with self._use() as p:
            st = lib.lr_cost_tune(p, 1 if on else 0)
        check(st, "lr_cost_tune")

    def observe(self, ttft_s: float) -> None:
        """lr_cost_observe(): one observed TTFT in seconds for the tuner
        (ignored while not tuning); negative or non-finite raises
        InvalidArgumentError."""
        v = float(ttft_s)
        with self._use() as p:
            st = lib.lr_cost_observe(p, v)
        check(st, "lr_cost_observe")

    def tuner_stats(self) -> CostTunerStats:
        """lr_cost_tuner_get_stats()."""
        s = new_sized("lr_cost_tuner_stats",
                      lib.lr_cost_tuner_stats_init_sized)
        with self._use() as p:
            st = lib.lr_cost_tuner_get_stats(p, s)
        check(st, "lr_cost_tuner_get_stats")
        return CostTunerStats(s.state, s.trials, s.accepted, s.sigma,
                              s.incumbent_p95_s, s.samples)

    @staticmethod
    def kinds() -> Dict[Any, str]:
        """Every kind the loaded library has (lr_cost_kind_count) with its
        name (lr_cost_kind_name)."""
        out = {}
        for k in range(lib.lr_cost_kind_count()):
            name = lib.lr_cost_kind_name(k)
            if name != ffi.NULL:
                out[as_enum(CostKind, k)] = ffi.string(name).decode("ascii")
        return out
