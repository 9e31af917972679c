"""Plumbing shared by the wrappers: borrowed arrays, handle ownership.

Arrays. The library borrows every array for the length of one call, so a
Python object that already holds machine integers of the right width
(``array.array('I')``, a ``memoryview`` cast to ``'I'``, a NumPy ``uint32``
array, or ``'Q'``/``uint64`` for keys and hashes) is passed as a pointer
into its own memory with ``ffi.from_buffer``: no copy, nothing to pay.
Anything else that iterates over ints (a list, a tuple) is copied once
into an ``array.array`` of the C type, and each item is range checked on
the way (a negative or too large value raises ValueError, it is never
truncated): 6-10 ns a token, so pass an ``array('I')`` on a hot path.
The returned cdata is a context manager: leaving the ``with`` releases the
buffer at once rather than at garbage collection.

Handles. The C handles have two threading contracts (docs/threading.md):
lr_router is internally locked, the others are one thread at a time. With
cffi releasing the GIL around every call, a Python object shared between
threads would break the second contract, and a close() racing a call would
free memory under it. ``_Handle`` closes both holes (see its docstring).
"""

from __future__ import annotations

import array
import operator
import threading
from typing import Any, Callable

from ._ffi import LITTLE_ENDIAN, ffi
from .errors import ClosedError

_NATIVE = "<" if LITTLE_ENDIAN else ">"


def _typecode(size: int) -> str:
    for code in ("I", "L", "Q"):
        if array.array(code).itemsize == size:
            return code
    raise ImportError(f"libroute: no array typecode of {size} bytes")


#: array.array typecodes of uint32_t and uint64_t items (the results of
#: text_tokens() and block_keys(); 'I' and 'Q' on every usual platform).
U32_TYPECODE = _typecode(4)
U64_TYPECODE = _typecode(8)
_TYPECODE = {"uint32_t": U32_TYPECODE, "uint64_t": U64_TYPECODE}


def _formats(code: str) -> frozenset:
    return frozenset({code, "@" + code, "=" + code, _NATIVE + code})


# Buffer formats whose items are the C type's bits as they are. 'L'/'Q'
# and 'I' differ in size between platforms, so the itemsize is checked too.
_FORMATS = {
    "uint32_t": (4, _formats("I") | _formats("L")),
    "uint64_t": (8, _formats("Q") | _formats("L")),
}


def _zero_copy(ctype: str, obj: Any, what: str) -> bool:
    """Whether obj's buffer holds ctype items as they are."""
    try:
        m = memoryview(obj)
    except TypeError:
        return False
    with m:
        size, formats = _FORMATS[ctype]
        if m.format in ("B", "b", "c"):
            raise TypeError(
                f"{what}: expected integers (a sequence of ints or a "
                f"{ctype} buffer), got bytes; for text use "
                f"libroute.text_tokens()")
        return (m.itemsize == size and m.format in formats and m.ndim == 1
                and m.c_contiguous)


def array_in(ctype: str, obj: Any, what: str):
    """A ``ctype[]`` cdata over ``obj`` for one call (see module doc).

    ``None`` gives an empty array. Use the result in a ``with``."""
    if obj is None:
        return ffi.new(ctype + "[]", 0)
    if type(obj) is array.array and obj.typecode == _TYPECODE[ctype]:
        return ffi.from_buffer(ctype + "[]", obj)  # the common fast case
    if _zero_copy(ctype, obj, what):
        return ffi.from_buffer(ctype + "[]", obj)
    if isinstance(obj, str):
        raise TypeError(f"{what}: expected integers, got str")
    try:
        iter(obj)
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of ints or a "
                        f"{ctype} buffer, got {type(obj).__name__}") \
            from None
    # A list (what tokenizers and JSON hand over), a tuple or any iterable
    # of ints: converted once into an array of the C type, whose buffer is
    # then passed like any other. array's constructor converts in one C
    # loop, range checked: 4-5x less than cffi's item by item conversion
    # of a list (docs/perf.md, "The Python binding's token lists"); an
    # array('I') passed in costs nothing at all.
    try:
        if type(obj) is list:
            buf = array.array(_TYPECODE[ctype])
            buf.fromlist(obj)  # a tenth faster than the constructor
        else:
            buf = array.array(_TYPECODE[ctype], obj)
    except OverflowError:
        bits = 8 * ffi.sizeof(ctype)
        raise ValueError(f"{what}: every item must be in 0..2**{bits}-1") \
            from None
    except TypeError:
        raise TypeError(f"{what}: every item must be an int") from None
    return ffi.from_buffer(ctype + "[]", buf)


def u32_in(obj: Any, what: str):
    """array_in() for uint32_t (tokens, boundaries)."""
    return array_in("uint32_t", obj, what)


def u64_in(obj: Any, what: str):
    """array_in() for uint64_t (keys, engine block hashes)."""
    return array_in("uint64_t", obj, what)


#: array.array typecode of float (C float, IEEE single precision).
F32_TYPECODE = "f"
_F32_FORMATS = _formats("f")


def _f32_buffer(obj: Any, what: str):
    """``memoryview(obj)`` when obj holds native float32 items in one
    C-contiguous block (any number of dimensions), else None. Raw bytes
    raise TypeError: their meaning as floats would be a guess."""
    try:
        m = memoryview(obj)
    except TypeError:
        return None
    if m.format in ("B", "b", "c"):
        m.release()
        raise TypeError(f"{what}: expected floats (a sequence of numbers "
                        f"or a float32 buffer), got bytes; wrap raw float32 "
                        f"bytes in memoryview(data).cast('f')")
    if m.itemsize == 4 and m.format in _F32_FORMATS and m.c_contiguous:
        return m
    m.release()
    return None


def _flat_floats(obj: Any, width: int, what: str) -> list:
    """A flat list of the numbers in obj: a flat sequence, a sequence of
    rows of ``width`` numbers, or any buffer (float64 arrays...)."""
    if isinstance(obj, (str, bytes, bytearray)):
        raise TypeError(f"{what}: expected numbers, got "
                        f"{type(obj).__name__}")
    try:
        m = memoryview(obj)
    except TypeError:
        m = None
    if m is not None:
        with m:
            items = m.tolist()
    else:
        try:
            items = list(obj)
        except TypeError:
            raise TypeError(f"{what}: expected a sequence of numbers or a "
                            f"float32 buffer, got {type(obj).__name__}") \
                from None
    if items and not isinstance(items[0], (int, float)) and \
            not hasattr(items[0], "__float__"):
        # rows: [[x00, x01, ...], [x10, ...], ...]
        flat = []
        for i, row in enumerate(items):
            if isinstance(row, (str, bytes, bytearray)):
                raise TypeError(f"{what}: expected numbers, got "
                                f"{type(row).__name__}")
            try:
                row = list(row)
            except TypeError:
                raise TypeError(f"{what}: item {i} is neither a number nor "
                                f"a row of numbers") from None
            if len(row) != width:
                raise ValueError(f"{what}: row {i} has {len(row)} values, "
                                 f"expected {width}")
            flat.extend(row)
        return flat
    return items


def f32_in(obj: Any, width: int, what: str):
    """``(float[] cdata, rows)`` over obj for one call: rows of ``width``
    float32 values, row-major.

    A C-contiguous float32 buffer (``array('f')``, ``memoryview`` cast to
    ``'f'``, NumPy ``float32``, flat or ``(rows, width)``) is passed in
    place, with no copy. Anything else (a flat sequence of numbers, a
    sequence of rows, a float64 array) is copied once. Use the cdata in a
    ``with``."""
    m = _f32_buffer(obj, what)
    if m is not None:
        with m:
            n = m.nbytes // 4
            if m.ndim >= 2 and m.shape[-1] != width:
                raise ValueError(f"{what}: rows of {m.shape[-1]} values, "
                                 f"expected {width}")
        c = ffi.from_buffer("float[]", obj)
    else:
        flat = _flat_floats(obj, width, what)
        n = len(flat)
        try:
            c = ffi.new("float[]", flat)
        except TypeError:
            raise TypeError(f"{what}: every item must be a number") \
                from None
    if width <= 0 or n % width:
        ffi.release(c)
        raise ValueError(f"{what}: {n} values is not a whole number of "
                         f"rows of {width}")
    return c, n // width


def f32_out(out: Any, n: int, what: str):
    """``(result, float[] cdata)`` for n float32 outputs: ``out`` itself
    when given (a writable C-contiguous float32 buffer of at least n items,
    written in place), else a new ``array('f')``."""
    if out is None:
        out = array.array(F32_TYPECODE, bytes(4 * n))
    else:
        m = _f32_buffer(out, what)
        if m is None:
            raise TypeError(f"{what}: expected a writable float32 buffer "
                            f"(array('f'), ...), got {type(out).__name__}")
        with m:
            if m.readonly:
                raise TypeError(f"{what}: the buffer is read-only")
            if m.nbytes // 4 < n:
                raise ValueError(f"{what}: room for {m.nbytes // 4} "
                                 f"values, {n} needed")
    return out, ffi.from_buffer("float[]", out, require_writable=True)


def _index(value: Any, what: str) -> int:
    # operator.index: ints and int-likes (NumPy integers), never a float
    # silently truncated (a float timestamp is a bug worth hearing about).
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: expected an int, got "
                        f"{type(value).__name__}") from None


def u32(value: Any, what: str) -> int:
    """Check an int fits uint32_t (cffi would raise OverflowError with no
    name; a ValueError naming the argument is more use)."""
    v = _index(value, what)
    if not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"{what}: {value!r} is not in 0..2**32-1")
    return v


def u64(value: Any, what: str) -> int:
    """As u32(), for uint64_t."""
    v = _index(value, what)
    if not 0 <= v <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"{what}: {value!r} is not in 0..2**64-1")
    return v


def from_struct(record, cdata, **override):
    """A NamedTuple ``record`` filled from the struct fields of the same
    names; ``override`` supplies converted values."""
    return record(*[override[f] if f in override else getattr(cdata, f)
                    for f in record._fields])


class _Handle:
    """Owns one C handle: destroyed by close(), by ``with``, or by the
    garbage collector (``ffi.gc``), whichever comes first, exactly once.

    ``exclusive=True`` (index, ring, load tracker): calls are serialized
    with a lock, so the C contract "one thread at a time" holds even when
    Python threads share the object. That buys safety, not parallelism:
    give each thread its own handle to run in parallel.

    ``exclusive=False`` (router, locked inside the library): calls run
    concurrently; the object only counts them so that close() waits for
    the running ones instead of freeing the router under them.

    In both cases a call after close() raises ClosedError.
    """

    __slots__ = ("_ptr", "_exclusive", "_lock", "_cond", "_busy",
                 "_closing", "__weakref__")
    _kind = "handle"

    def _own(self, ptr, destroy: Callable, exclusive: bool) -> None:
        self._ptr = ffi.gc(ptr, destroy)
        self._exclusive = exclusive
        # Calls take the bare lock (C speed); close() waits on a condition
        # over the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._busy = 0
        self._closing = False

    def _acquire(self):
        """Start a call: the C pointer, valid until _release()."""
        lock = self._lock
        if self._exclusive:
            lock.acquire()
            p = self._ptr
            if p is None:
                lock.release()
                raise ClosedError(f"{self._kind} is closed")
            return p
        with lock:
            p = self._ptr
            if p is None:
                raise ClosedError(f"{self._kind} is closed")
            self._busy += 1
        return p

    def _release(self) -> None:
        """End a call started by _acquire()."""
        if self._exclusive:
            self._lock.release()
            return
        with self._lock:
            self._busy -= 1
            if self._closing and not self._busy:
                self._cond.notify_all()

    # Methods use ``with self._use() as p: lib.lr_x_call(p, ...)``.
    def _use(self):
        return _Use(self)

    @property
    def closed(self) -> bool:
        return getattr(self, "_ptr", None) is None

    def close(self) -> None:
        """Destroy the C handle now. Waits for calls running in other
        threads; later calls raise ClosedError. Idempotent."""
        cond = getattr(self, "_cond", None)
        if cond is None:  # __init__ failed before owning anything
            return
        with cond:
            self._closing = True
            while self._busy:
                cond.wait()
            ptr, self._ptr = self._ptr, None
        if ptr is not None:
            ffi.release(ptr)  # runs the ffi.gc destructor now

    def __enter__(self):
        if self.closed:
            raise ClosedError(f"{self._kind} is closed")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<libroute.{type(self).__name__} {state}>"


class _Use:
    """Context manager for one call on a _Handle."""

    __slots__ = ("_h",)

    def __init__(self, h: _Handle) -> None:
        self._h = h

    def __enter__(self):
        return self._h._acquire()

    def __exit__(self, *exc) -> None:
        self._h._release()


def new_sized(ctype: str, init: Callable):
    """``ffi.new(ctype + " *")`` initialised by its ``lr_*_init_sized()``
    function ``init`` with this build's sizeof(ctype): the struct_size the
    library reads and writes up to, and the defaults."""
    p = ffi.new(ctype + " *")
    init(p, ffi.sizeof(ctype))
    return p


def set_fields(cdata, what: str, **fields) -> None:
    """Assign the fields that are not None, naming the field on a bad
    value instead of cffi's bare OverflowError."""
    for name, value in fields.items():
        if value is None:
            continue
        try:
            setattr(cdata, name, value)
        except OverflowError:
            raise ValueError(f"{what}: {name}={value!r} is out of range "
                             f"for its C type") from None
        except TypeError:
            raise TypeError(f"{what}: {name}={value!r} has the wrong type "
                            f"({type(value).__name__})") from None


def take_blob(out) -> bytes:
    """The bytes of the lr_blob in ``out[0]`` (an ``lr_blob **``), which is
    destroyed; the caller owns nothing afterwards."""
    from ._ffi import lib

    blob = out[0]
    try:
        n = lib.lr_blob_size(blob)
        return bytes(ffi.buffer(lib.lr_blob_data(blob), n)) if n else b""
    finally:
        lib.lr_blob_destroy(blob)


def bytes_in(data, what: str):
    """A read-only ``uint8_t[]`` view of a bytes-like object, no copy."""
    try:
        return ffi.from_buffer("uint8_t[]", data)
    except TypeError:
        raise TypeError(f"{what}: expected a bytes-like object, got "
                        f"{type(data).__name__}") from None


def name_bytes(name, what: str) -> bytes:
    """A name's bytes: a str as UTF-8, bytes-likes as they are."""
    if isinstance(name, str):
        return name.encode("utf-8")
    if isinstance(name, (bytes, bytearray)):
        return bytes(name)
    raise TypeError(f"{what}: expected str or bytes, got "
                    f"{type(name).__name__}")


def name_in(name, what: str) -> bytes:
    """A name as the NUL-terminated bytes the library copies."""
    b = name_bytes(name, what)
    if b"\0" in b:
        raise ValueError(f"{what}: a name cannot contain NUL")
    return b
