"""lr_ring: the dual consistent-hash ring (include/libroute/lr_ring.h).

Thread safety: in C, add/remove are one thread at a time and the queries
may run concurrently with each other. A Ring object serializes all its
calls with one lock, so sharing it between threads is safe; a ring is
rebuilt rarely and queried in microseconds, so a host that wants parallel
lookups builds a new Ring when membership changes and swaps the reference.
"""

from __future__ import annotations

from typing import List, Optional, Union

from ._ffi import ffi, lib
from ._util import _Handle, name_in, new_sized, set_fields, u32, u64
from .errors import check

__all__ = ["Ring"]


class Ring(_Handle):
    """Instances placed on a 64-bit ring by name (lr_ring). Keyword
    arguments are lr_ring_options fields; None keeps the default."""

    __slots__ = ()
    _kind = "Ring"

    def __init__(self, *, vnodes: Optional[int] = None,
                 max_instances: Optional[int] = None) -> None:
        opt = new_sized("lr_ring_options", lib.lr_ring_options_init_sized)
        set_fields(opt, "Ring", vnodes=vnodes, max_instances=max_instances)
        out = ffi.new("lr_ring **")
        check(lib.lr_ring_create(opt, out), "lr_ring_create")
        self._own(out[0], lib.lr_ring_destroy, exclusive=True)

    def add(self, name: Union[str, bytes], instance: int) -> None:
        """lr_ring_add(): place ``instance`` by ``name`` (copied)."""
        b = name_in(name, "name")
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_ring_add(p, b, inst)
        check(st, "lr_ring_add")

    def remove(self, instance: int) -> None:
        """lr_ring_remove()."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_ring_remove(p, inst)
        check(st, "lr_ring_remove")

    def __len__(self) -> int:
        """lr_ring_count(): instances on the ring."""
        with self._use() as p:
            return lib.lr_ring_count(p)

    def __contains__(self, instance: object) -> bool:
        """lr_ring_contains()."""
        if not isinstance(instance, int) or not 0 <= instance <= 0xFFFFFFFF:
            return False
        with self._use() as p:
            return bool(lib.lr_ring_contains(p, instance))

    def candidates(self, key: int, k: int = 2) -> List[int]:
        """lr_ring_candidates(): the k distinct instances for a 64-bit key,
        in hash-function order (fewer when fewer instances exist). An
        empty ring raises StateError."""
        kk = u32(k, "k")
        out = ffi.new("uint32_t[]", max(kk, 1))
        n = ffi.new("uint32_t *")
        kv = u64(key, "key")
        with self._use() as p:
            st = lib.lr_ring_candidates(p, kv, kk, out, n)
        check(st, "lr_ring_candidates")
        return list(out[0:n[0]])
