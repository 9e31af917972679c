"""vLLM KV-cache event batches (include/libroute/lr_vllm.h).

Index.vllm_batch() and Router.vllm_batch() take one msgpack payload frame
as the engine published it (the host owns the ZMQ socket) and return a
VllmBatchInfo. A batch that fails half-way with LimitError or
OutOfMemoryError has applied its first ``info.done`` events; the
exception carries that VllmBatchInfo as ``.info``, and applying the whole
batch again is safe.
"""

from __future__ import annotations

from typing import NamedTuple

from ._ffi import lib
from ._util import from_struct, new_sized
from .errors import error_for

__all__ = ["VllmBatchInfo"]


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


def new_info():
    info = new_sized("lr_vllm_batch_info", lib.lr_vllm_batch_info_init_sized)
    return info


def finish(status: int, info, function: str) -> VllmBatchInfo:
    """The info as a record; raise, with it attached, on failure."""
    rec = from_struct(VllmBatchInfo, info)
    if status != 0:
        err = error_for(status, function)
        err.info = rec  # type: ignore[attr-defined]
        raise err
    return rec
