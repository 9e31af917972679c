"""Exceptions: one class per lr_status, all under LrError.

Each carries the status (``.status``, a Status or, for a code newer than
this build, a plain int), the library's symbol for it (``.name``,
lr_status_name), the library's own message (``.message``, lr_strerror) and
the C function that returned it (``.function``). Where a builtin exception
means the same thing the class derives from it too, so ``except
ValueError`` catches bad arguments from libroute as from anything else.

    LrError
     +-- InvalidArgumentError  (ValueError)    LR_EINVAL
     +-- OutOfMemoryError      (MemoryError)   LR_ENOMEM
     +-- OutOfRangeError       (ValueError)    LR_ERANGE
     +-- NotFoundError         (LookupError)   LR_ENOENT
     +-- AlreadyExistsError                    LR_EEXIST
     +-- LimitError                            LR_ELIMIT
     +-- CorruptError          (ValueError)    LR_ECORRUPT
     +-- VersionError                          LR_EVERSION
     +-- NotSupportedError                     LR_ENOTSUP
     +-- StateError                            LR_ESTATE
     +-- BufferSizeError                       LR_EBUFSIZE
     +-- GapError                              LR_EGAP
     +-- BusyError                             LR_EBUSY
     +-- ExpiredError                          LR_EEXPIRED
"""

from __future__ import annotations

from typing import Dict, Optional, Type

from ._ffi import ffi, lib
from .enums import Status, as_enum

__all__ = [
    "LrError", "InvalidArgumentError", "OutOfMemoryError", "OutOfRangeError",
    "NotFoundError", "AlreadyExistsError", "LimitError", "CorruptError",
    "VersionError", "NotSupportedError", "StateError", "BufferSizeError",
    "GapError", "BusyError", "ExpiredError", "ClosedError", "strerror",
    "status_name", "check",
]


def strerror(status: int) -> str:
    """lr_strerror(): the library's description of a status."""
    return ffi.string(lib.lr_strerror(int(status))).decode("utf-8")


def status_name(status: int) -> str:
    """lr_status_name(): the symbol of a status ("LR_EINVAL")."""
    return ffi.string(lib.lr_status_name(int(status))).decode("ascii")


class LrError(Exception):
    """A libroute call returned a status other than LR_OK. The call left
    its handle as it was (the library guarantees it)."""

    def __init__(self, status: int, function: Optional[str] = None,
                 detail: Optional[str] = None) -> None:
        self.status = as_enum(Status, status)
        self.name = status_name(status)
        self.message = strerror(status)
        self.function = function
        self.detail = detail
        text = f"{self.message} ({self.name})"
        if detail:
            text = f"{text}: {detail}"
        if function:
            text = f"{function}: {text}"
        super().__init__(text)

    def __reduce__(self):
        return (error_for, (int(self.status), self.function, self.detail))


class InvalidArgumentError(LrError, ValueError):
    """LR_EINVAL: a bad argument (NULL, NaN, out of domain, absurd size)."""


class OutOfMemoryError(LrError, MemoryError):
    """LR_ENOMEM: an allocation failed; nothing changed."""


class OutOfRangeError(LrError, ValueError):
    """LR_ERANGE: a value outside its bounds (never clamped)."""


class NotFoundError(LrError, LookupError):
    """LR_ENOENT: an unknown instance, request or engine block."""


class AlreadyExistsError(LrError):
    """LR_EEXIST: a duplicate instance name or id, or request id."""


class LimitError(LrError):
    """LR_ELIMIT: a capacity set at creation was reached."""


class CorruptError(LrError, ValueError):
    """LR_ECORRUPT: a malformed delta, snapshot or KV event."""


class VersionError(LrError):
    """LR_EVERSION: struct size or serialized format version unsupported."""


class NotSupportedError(LrError):
    """LR_ENOTSUP: an unknown parameter or an unsupported combination."""


class StateError(LrError):
    """LR_ESTATE: not valid in the handle's current state (for example no
    routable instance)."""


class BufferSizeError(LrError):
    """LR_EBUFSIZE: a caller buffer was too small. The wrappers size their
    buffers themselves, so this reaches Python code only through ``check``."""


class GapError(LrError):
    """LR_EGAP: KV-event batches are missing before this one (a sequence
    gap); nothing was applied. Replay from ``.info.next_seq``
    (Router.vllm_batch_seq() attaches the VllmBatchInfo as ``.info``)."""


class BusyError(LrError):
    """LR_EBUSY: the fleet is saturated and the request, routed
    sheddable, was refused rather than held in the router's queue; nothing
    was recorded (answer it 429 or 503)."""


class ExpiredError(LrError):
    """LR_EEXPIRED: a waiting request's deadline passed before it could
    be sent. Router.dispatch() reports it as a Dispatched entry's status;
    this class is what error_for() gives for it."""


class ClosedError(ValueError):
    """A method was called on a handle after close()."""


_BY_STATUS: Dict[int, Type[LrError]] = {
    Status.EINVAL: InvalidArgumentError,
    Status.ENOMEM: OutOfMemoryError,
    Status.ERANGE: OutOfRangeError,
    Status.ENOENT: NotFoundError,
    Status.EEXIST: AlreadyExistsError,
    Status.ELIMIT: LimitError,
    Status.ECORRUPT: CorruptError,
    Status.EVERSION: VersionError,
    Status.ENOTSUP: NotSupportedError,
    Status.ESTATE: StateError,
    Status.EBUFSIZE: BufferSizeError,
    Status.EGAP: GapError,
    Status.EBUSY: BusyError,
    Status.EEXPIRED: ExpiredError,
}


def error_for(status: int, function: Optional[str] = None,
              detail: Optional[str] = None) -> LrError:
    """The exception for a status: its class, or LrError for a code this
    build does not know."""
    return _BY_STATUS.get(int(status), LrError)(status, function, detail)


def check(status: int, function: str) -> None:
    """Raise the exception for ``status`` unless it is LR_OK."""
    if status != 0:
        raise error_for(status, function)
