"""Python binding of libroute, the routing brain of LLM inference gateways.

    import libroute

    with libroute.Router("dualmap", seed=42) as r:
        ids = [r.add_instance(f"10.0.0.{i}:8000") for i in range(8)]
        d = r.route(tokens, request_id=1, now_ns=time.monotonic_ns())
        ...                                   # send to d.instance
        r.first_token(1, now_ns=time.monotonic_ns())
        r.complete(1, output_tokens=120, now_ns=time.monotonic_ns())

One class per handle (Router, Index, Ring, Load, Mlp, Learner, Cost),
each owning its C handle (close(), ``with``, or the garbage collector),
plus the reentrant helpers block_keys(), name_hash(), adapter_salt(),
mm_key_hash(), text_tokens() and
policy.decide() (any policy over a candidate table, the one
Router.candidates() records). Failures raise LrError subclasses that
carry the library's status and message (libroute.errors). Enums and
constants come from the header the module was compiled against
(libroute.enums). The C API reference is include/libroute/*.h.

Threads: Router may be shared freely (Router.learn_step() from a
background thread trains while other threads route). Index, Ring, Load
and Mlp serialize their calls with a per-object lock (the C handles are
one thread at a time); give each thread its own for parallelism. Learner
has one lock per side: its serving calls (add_sample, score, stats) and
its training calls (step, samples) run in parallel. cffi releases the GIL
during every C call.
"""

from __future__ import annotations

from ._ffi import HEADER_VERSION, HEADER_VERSION_NUMBER, ffi, lib
from .enums import (Bounds, CostKind, CostParam, Eviction, MatchFlag, Param,
                    Policy,
                    Reason, RingKey, Role, RouteFlag, Status, Tier, Trust,
                    constants,
                    cost_kind_count, cost_param_count, lodestar_feature_count,
                    param_count, policy_count, reason_count)
from .errors import (AlreadyExistsError, BufferSizeError, BusyError,
                     ClosedError, CorruptError, ExpiredError, GapError,
                     InvalidArgumentError, LimitError, LrError,
                     NotFoundError, NotSupportedError, OutOfMemoryError,
                     OutOfRangeError, StateError, VersionError, status_name,
                     strerror)
from . import cost, policy
from .cost import Cost, CostTunerStats, cost_param_bounds
from .index import (Delta, Hit, Index, IndexStats, Match, MmInput,
                    adapter_salt, block_keys, mm_key_hash, name_hash)
from .learner import Learner, LearnerScore, LearnerStats, Samples
from .load import Load, LoadSnapshot, RequestState
from .mlp import Mlp
from .ring import Ring
from .policy import (Candidate, Candidates, Decision, PolicyInput, Score,
                     decide, ring_key)
from .router import Dispatched, Move, Router, RouterStats, param_bounds
from .text import text_tokens
from .vllm import KvSeq, KvSource, VllmBatchInfo

#: Marks "no instance" (LR_INSTANCE_NONE).
INSTANCE_NONE: int = lib.LR_INSTANCE_NONE


def version_number() -> int:
    """lr_version_number() of the loaded library (0.2.0 is 200)."""
    return lib.lr_version_number()


def version_string() -> str:
    """lr_version_string() of the loaded library ("0.2.0")."""
    return ffi.string(lib.lr_version_string()).decode("ascii")


def policy_name(policy: int) -> str:
    """lr_policy_name(): the library's name of a policy value."""
    p = lib.lr_policy_name(int(policy))
    if p == ffi.NULL:
        raise ValueError(f"no policy has the value {policy!r}")
    return ffi.string(p).decode("ascii")


def policy_from_name(name: str) -> Policy:
    """lr_policy_from_name(): the policy the library calls ``name``."""
    return Policy.from_label(name)


def reason_name(reason: int) -> str:
    """lr_reason_name(): the library's name of a reason value."""
    p = lib.lr_reason_name(int(reason))
    if p == ffi.NULL:
        raise ValueError(f"no reason has the value {reason!r}")
    return ffi.string(p).decode("ascii")


__version__ = version_string()

__all__ = [
    "Router", "Index", "Ring", "Load", "Mlp", "Learner", "Cost",
    "CostTunerStats", "Candidate", "Candidates", "PolicyInput", "decide",
    "ring_key",
    "policy", "cost", "cost_param_bounds", "policy_count", "param_count",
    "reason_count", "cost_kind_count", "cost_param_count",
    "lodestar_feature_count",
    "LearnerStats", "LearnerScore", "Samples",
    "Decision", "Score", "Move", "Dispatched", "RouterStats", "LoadSnapshot",
    "RequestState", "Hit", "Match", "IndexStats", "Delta", "MmInput",
    "Bounds",
    "VllmBatchInfo", "KvSeq", "KvSource",
    "Status", "Trust", "Eviction", "Tier", "Role", "Policy", "Reason", "Param", "RouteFlag", "MatchFlag",
    "CostKind", "CostParam", "RingKey",
    "LrError", "InvalidArgumentError", "OutOfMemoryError", "OutOfRangeError",
    "NotFoundError", "AlreadyExistsError", "LimitError", "CorruptError",
    "VersionError", "NotSupportedError", "StateError", "BufferSizeError",
    "GapError", "BusyError", "ExpiredError", "ClosedError",
    "block_keys", "name_hash", "adapter_salt", "mm_key_hash", "text_tokens", "param_bounds", "strerror", "status_name",
    "policy_name", "policy_from_name", "reason_name", "version_number",
    "version_string", "constants", "INSTANCE_NONE", "HEADER_VERSION",
    "HEADER_VERSION_NUMBER", "ffi", "lib",
]
