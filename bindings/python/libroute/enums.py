"""The library's enums and constants, as Python ints.

The enums are built from the compiled module's own enum types, which come
from the preprocessed header (see _build.py): a value added to the header
appears here on the next build, with no Python to edit.

- ``Status``  lr_status without the ``LR_`` prefix (``Status.EINVAL``)
- ``Trust``   lr_trust (``Trust.LOCAL``, ``Trust.REMOTE``)
- ``Eviction`` lr_eviction (``Eviction.REMOTE_FIRST``, ``Eviction.LRU``)
- ``Tier``    lr_tier, a KV cache's memory tier (``Tier.GPU``, ``Tier.CPU``,
  ``Tier.DISK``)
- ``Role``    lr_role, an instance's part in a disaggregated fleet
  (``Role.BOTH``, ``Role.PREFILL``, ``Role.DECODE``)
- ``Policy``  lr_policy (``Policy.DUALMAP``); ``.label`` is the library's
  name for it (``"dualmap"``), ``Policy.from_label()`` the reverse
- ``Reason``  lr_reason (``Reason.PREFIX_HIT``); ``.label`` as for Policy
- ``Param``   lr_param (``Param.TTFT_SLO_S``); ``.bounds`` gives the
  library's ``Bounds(lo, hi, default, integer)``
- ``CostKind`` lr_cost_kind (``CostKind.GORGO``); ``.label`` as for Policy
- ``CostParam`` lr_cost_param (``CostParam.W_RTT``)
- ``RingKey`` the ``LR_RING_KEY_*`` kinds (lr_policy_ring_key)
- ``RouteFlag`` the ``LR_ROUTE_*`` bits, ``MatchFlag`` ``LR_MATCH_*``

The enums name the values of the header the module was compiled against.
How many values the loaded library has is a run-time fact: policy_count(),
param_count(), reason_count(), cost_kind_count(), cost_param_count() (a
newer library of the same series may have appended values; as_enum() gives
those back as plain ints).

Every other ``LR_*`` integer constant of the header (limits such as
``LR_RING_MAX_K``, ``LR_INSTANCE_NONE``, the ``LR_*_SIZE_V1`` sizes, the
version macros) is an attribute of this module under its C name.
"""

from __future__ import annotations

import enum
from typing import Dict, NamedTuple, Union

from ._ffi import ffi, lib

__all__ = ["Status", "Trust", "Eviction", "Tier", "Role", "Policy", "Reason", "Param", "CostKind",
           "CostParam", "RingKey", "RouteFlag", "MatchFlag", "Bounds",
           "constants", "policy_count", "param_count", "reason_count",
           "cost_kind_count", "cost_param_count", "lodestar_feature_count"]


def _members(ctype: str, prefix: str):
    rel: Dict[str, int] = ffi.typeof(ctype).relements
    out = []
    for name, value in sorted(rel.items(), key=lambda kv: (kv[1], kv[0])):
        if not name.startswith(prefix):
            raise RuntimeError(f"{ctype}: {name} lacks the prefix {prefix}")
        out.append((name[len(prefix):], value))
    return out


class _Labelled(enum.IntEnum):
    """An IntEnum whose members have a library-given name (``label``)."""

    @property
    def label(self) -> str:
        p = self._label_fn(int(self))
        if p == ffi.NULL:  # pragma: no cover - every member has one
            raise ValueError(f"{self!r} has no name in the library")
        return ffi.string(p).decode("ascii")


class _PolicyBase(_Labelled):
    @staticmethod
    def _label_fn(v):
        return lib.lr_policy_name(v)

    @classmethod
    def from_label(cls, label: str) -> "Policy":
        """The policy the library calls ``label`` (``"dualmap"``)."""
        from .errors import check  # errors imports this module

        if "\0" in label:
            raise ValueError("a policy label cannot contain NUL")
        out = ffi.new("int32_t *")
        check(lib.lr_policy_from_name(label.encode("utf-8"), out),
              "lr_policy_from_name")
        return cls(out[0])


class _ReasonBase(_Labelled):
    @staticmethod
    def _label_fn(v):
        return lib.lr_reason_name(v)


class _CostKindBase(_Labelled):
    @staticmethod
    def _label_fn(v):
        return lib.lr_cost_kind_name(v)


class Bounds(NamedTuple):
    """Bounds of a run-time parameter (lr_bounds): values outside [lo, hi]
    are refused with OutOfRangeError, never clamped; ``integer`` keys
    (LR_BOUNDS_INTEGER) refuse a fraction with InvalidArgumentError."""

    lo: float
    hi: float
    default: float
    integer: bool = False


def bounds_from(b, function: str) -> Bounds:
    """An lr_bounds as Bounds; its status (LR_ENOTSUP for an unknown key)
    raised."""
    from .errors import check

    check(b.status, function)
    # The C field is named `def`, a Python keyword.
    return Bounds(b.lo, b.hi, getattr(b, "def"),
                  bool(b.flags & lib.LR_BOUNDS_INTEGER))


class _ParamBase(enum.IntEnum):
    @property
    def bounds(self) -> Bounds:
        """The library's bounds and default for this parameter
        (lr_param_bounds)."""
        return bounds_from(lib.lr_param_bounds(int(self)), "lr_param_bounds")


def _make(base, name: str, ctype: str, prefix: str, doc: str):
    e = base(name, _members(ctype, prefix), module=__name__, qualname=name)
    e.__doc__ = doc
    return e


Status = _make(enum.IntEnum, "Status", "lr_status", "LR_",
               "lr_status: the result of every fallible call.")
Trust = _make(enum.IntEnum, "Trust", "lr_trust", "LR_TRUST_",
              "lr_trust: LOCAL routes were seen by this gateway, REMOTE "
              "ones told by a peer.")
Eviction = _make(enum.IntEnum, "Eviction", "lr_eviction", "LR_EVICT_",
                 "lr_eviction: what a full index drops first (REMOTE_FIRST, "
                 "or LRU for replicas sharing deltas).")
Tier = _make(enum.IntEnum, "Tier", "lr_tier", "LR_TIER_",
             "lr_tier: the memory tier of an engine's KV cache a block is "
             "on: the GPU's own, or a lower tier an offloading connector "
             "copied it to (CPU: host memory; DISK).")
Role = _make(enum.IntEnum, "Role", "lr_role", "LR_ROLE_",
             "lr_role: an instance's part in a disaggregated fleet: BOTH "
             "(prefills and decodes), PREFILL (prefills for decode "
             "instances, decodes none) or DECODE (decodes; prefills a "
             "request kept whole).")
Policy = _make(_PolicyBase, "Policy", "lr_policy", "LR_POLICY_",
               "lr_policy: the router's routing rules (docs/router.md).")
Reason = _make(_ReasonBase, "Reason", "lr_reason", "LR_REASON_",
               "lr_reason: why a decision chose its instance.")
Param = _make(_ParamBase, "Param", "lr_param", "LR_PARAM_",
              "lr_param: the policies' parameters (the router's run-time "
              "tunables, and policy.decide()'s params).")
CostKind = _make(_CostKindBase, "CostKind", "lr_cost_kind", "LR_COST_",
                 "lr_cost_kind: the cost models of libroute.cost.")
CostParam = _make(enum.IntEnum, "CostParam", "lr_cost_param", "LR_COST_",
                  "lr_cost_param: a cost model's parameters (a kind has a "
                  "subset; see Cost.params()).")


def policy_count() -> int:
    """lr_policy_count(): policies the loaded library has (0 .. n-1)."""
    return lib.lr_policy_count()


def param_count() -> int:
    """lr_param_count(): parameter keys the loaded library has."""
    return lib.lr_param_count()


def reason_count() -> int:
    """lr_reason_count(): reasons the loaded library has."""
    return lib.lr_reason_count()


def cost_kind_count() -> int:
    """lr_cost_kind_count(): cost model kinds the loaded library has."""
    return lib.lr_cost_kind_count()


def cost_param_count() -> int:
    """lr_cost_param_count(): cost parameter keys the loaded library has."""
    return lib.lr_cost_param_count()


def lodestar_feature_count() -> int:
    """lr_lodestar_feature_count(): width of Lodestar's feature rows in the
    loaded library (the n_inputs of a model policy.decide() takes)."""
    return lib.lr_lodestar_feature_count()


def _flags(name: str, prefix: str, doc: str, base=enum.IntFlag):
    members = sorted([(n[len(prefix):], getattr(lib, n)) for n in dir(lib)
                      if n.startswith(prefix)], key=lambda kv: kv[1])
    f = base(name, members, module=__name__, qualname=name)
    f.__doc__ = doc
    return f


RouteFlag = _flags("RouteFlag", "LR_ROUTE_", "lr_request.flags bits.")
RingKey = _flags("RingKey", "LR_RING_KEY_",
                 "LR_RING_KEY_*: the ring key a policy ranks its candidate "
                 "rows by (policy.ring_key()).", base=enum.IntEnum)
MatchFlag = _flags("MatchFlag", "LR_MATCH_", "lr_index_match() flag bits.")


def _constants() -> Dict[str, Union[int, float]]:
    enum_names = set()
    for t in ("lr_status", "lr_trust", "lr_policy", "lr_reason", "lr_param",
              "lr_cost_kind", "lr_cost_param"):
        enum_names.update(ffi.typeof(t).relements)
    out = {}
    for n in dir(lib):
        if n.startswith("LR_") and n not in enum_names:
            v = getattr(lib, n)
            if isinstance(v, (int, float)):
                out[n] = v
    return out


#: Every integer or floating ``LR_*`` macro of the header, by C name.
constants: Dict[str, Union[int, float]] = _constants()
globals().update(constants)
__all__ += sorted(constants)


_BY_VALUE: Dict[type, Dict[int, enum.IntEnum]] = {}


def as_enum(cls, value: int):
    """``cls(value)``, or the plain int for a value this build does not name
    (a newer library may return one). A dict lookup: it runs per route."""
    table = _BY_VALUE.get(cls)
    if table is None:
        table = _BY_VALUE[cls] = {int(m): m for m in cls}
    return table.get(value, value)
