"""vLLM KV-cache event batches (include/libroute/lr_vllm.h).

Index.vllm_batch() and Router.vllm_batch() take one msgpack payload frame
as the engine published it (the host owns the ZMQ socket) and return a
VllmBatchInfo. A batch that fails half-way with LimitError or
OutOfMemoryError has applied its first ``info.done`` events; the
exception carries that VllmBatchInfo as ``.info``, and applying the whole
batch again is safe.

Router.vllm_batch_seq() also takes the batch's sequence number (the ZMQ
message's second frame, ``int.from_bytes(frame, "big")``) and applies each
engine's batches in order and once; a gap raises GapError, whose
``.info.next_seq`` is where to replay from. KvSeq names what the number
made of a batch (``info.seq_state``).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from ._ffi import lib
from ._util import from_struct, new_sized
from .errors import error_for

__all__ = ["VllmBatchInfo", "KvSeq", "KvSource"]


class KvSeq(enum.IntEnum):
    """lr_kv_seq: what a batch's sequence number made of it."""

    NONE = 0
    APPLIED = 1
    FIRST = 2
    DUPLICATE = 3
    GAP = 4
    RESTART = 5


class KvSource(NamedTuple):
    """One KV-event source (an instance's engine) as the router applied it
    (lr_kv_source): whether a gap is open and the number to replay from."""

    has_seq: bool
    gap: bool
    next_seq: int
    batches: int
    duplicates: int
    gaps: int
    restarts: int


class VllmBatchInfo(NamedTuple):
    """What a batch held and what was done with it (lr_vllm_batch_info).
    ``timestamp`` is the engine's clock in seconds (0 when absent),
    ``dp_rank`` -1 when absent."""

    timestamp: float
    dp_rank: int
    events: int
    stored: int
    removed: int
    cleared: int
    unplaced: int
    skipped: int
    done: int
    invalid: int = 0
    seq_state: KvSeq = KvSeq.NONE
    next_seq: int = 0


def new_info():
    info = new_sized("lr_vllm_batch_info", lib.lr_vllm_batch_info_init_sized)
    return info


def finish(status: int, info, function: str) -> VllmBatchInfo:
    """The info as a record; raise, with it attached, on failure."""
    rec = from_struct(VllmBatchInfo, info)
    rec = rec._replace(seq_state=KvSeq(rec.seq_state)
                       if rec.seq_state in KvSeq._value2member_map_
                       else rec.seq_state)
    if status != 0:
        err = error_for(status, function)
        err.info = rec  # type: ignore[attr-defined]
        raise err
    return rec
