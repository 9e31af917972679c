"""lr_index: the block-aligned prefix index (include/libroute/lr_index.h).

Thread safety: the C index is one thread at a time. An Index object
serializes its calls with a lock, so sharing one between threads is safe
but runs them one by one; for parallel work give each thread its own
Index and exchange what they learn with export_delta()/import_delta()
(docs/threading.md). block_keys() is reentrant.
"""

from __future__ import annotations

import array
from typing import Any, NamedTuple, Optional, Sequence, Tuple, Union

from ._ffi import ffi, lib
from ._util import (U64_TYPECODE, _Handle, _index, bytes_in, from_struct,
                    name_bytes, name_in, new_sized, set_fields, take_blob,
                    u32, u32_in, u64, u64_in)
from .enums import Tier, Trust
from .errors import check
from .vllm import VllmBatchInfo, finish, new_info

__all__ = ["Index", "IndexStats", "Hit", "Match", "Delta", "MmInput",
           "block_keys", "name_hash", "adapter_salt", "mm_key_hash"]

_BUFSIZE = 11  # LR_EBUFSIZE, the one status the wrappers handle themselves
_MATCH_SIZE = ffi.sizeof("lr_index_match_result")
_HIT_SIZE = ffi.sizeof("lr_index_hit")


class Hit(NamedTuple):
    """One instance's cached prefix of a prompt (lr_index_hit)."""

    instance: int
    tokens: int


class Match(NamedTuple):
    """Result of Index.match() (lr_index_match_result)."""

    hits: Tuple[Hit, ...]  # deepest first, then by instance
    deepest_tokens: int
    prompt_blocks: int


class IndexStats(NamedTuple):
    """Index counters (lr_index_stats); the *_blocks ending in -ed are
    cumulative."""

    blocks: int
    remote_blocks: int
    prefixes: int
    instances: int
    engine_hashes: int
    bytes: int
    evicted_blocks: int
    expired_blocks: int
    learned_blocks: int


class MmInput(NamedTuple):
    """One multimodal input of a prompt (lr_mm_input): an image, an audio
    clip. Its placeholder tokens are ``[offset, offset + length)`` of the
    prompt; ``identifier`` (str, taken as UTF-8, or bytes; 1 to
    LR_INDEX_MAX_MM_IDENTIFIER bytes, no NUL) is the engine's name for its
    data: vLLM's mm_feature.identifier, the hash of the data, or the uuid
    the client gave it. Every ``mm=`` argument takes a sequence of these
    or of plain ``(identifier, offset, length)`` tuples, by ascending
    offset, none overlapping another, each inside the prompt (else
    InvalidArgumentError)."""

    identifier: Union[str, bytes]
    offset: int
    length: int


MmLike = Optional[Sequence[Union[MmInput, Tuple[Any, int, int]]]]


class Delta(NamedTuple):
    """An exported delta and the mark to pass to the next export."""

    data: bytes
    mark: int


def block_keys(tokens: Any, block_tokens: int = 16,
               tenant_salt: int = 0) -> "array.array[int]":
    """lr_block_keys(): the chained 64-bit key of every complete block.

    Returns ``array('Q')`` (one key per complete block), which Index.match()
    and Index.learn() take back as ``keys=`` without a copy."""
    with u32_in(tokens, "tokens") as tok:
        n = ffi.new("size_t *")
        bt = u32(block_tokens, "block_tokens")
        salt = u64(tenant_salt, "tenant_salt")
        check(lib.lr_block_keys(bt, tok, len(tok), salt, ffi.NULL, 0, n),
              "lr_block_keys")
        keys = array.array(U64_TYPECODE, bytes(8 * n[0]))
        if n[0]:
            with ffi.from_buffer("uint64_t[]", keys,
                                 require_writable=True) as out:
                check(lib.lr_block_keys(bt, tok, len(tok), salt, out,
                                        len(keys), n), "lr_block_keys")
        return keys


def name_hash(name: Union[str, bytes]) -> int:
    """lr_name_hash(): the 64-bit hash the library keys a name by (a
    model, a LoRA adapter, a cache salt; str is taken as UTF-8): 0 for the
    empty name, never 0 otherwise. Router.adapters() reports adapters by
    it; ``name_hash(cache_salt)`` is the ``tenant_salt`` of a vLLM request
    with that cache salt."""
    b = name_bytes(name, "name")
    return lib.lr_name_hash(b, len(b))


def adapter_salt(tenant_salt: int, adapter_hash: int) -> int:
    """lr_adapter_salt(): the salt a prompt's blocks are keyed with under
    the LoRA adapter whose name_hash() is ``adapter_hash`` (``tenant_salt``
    itself for 0, the base model): block_keys(tokens, tenant_salt=
    adapter_salt(salt, name_hash(adapter))) gives the keys a router gives
    a request for that adapter."""
    return lib.lr_adapter_salt(u64(tenant_salt, "tenant_salt"),
                               u64(adapter_hash, "adapter_hash"))


def mm_key_hash(identifier: Union[str, bytes], offset: int) -> int:
    """lr_mm_key_hash(): the key a multimodal input adds to one block, as
    vLLM lists it in the block's extra keys: ``offset`` is the input's
    first placeholder token minus the block's first token (negative when
    the input began in an earlier block). A block's multimodal hash, what
    Index.kv_stored(mm_hashes=) takes per block, is the XOR of its keys'
    hashes (0 with none). str is taken as UTF-8."""
    b = name_bytes(identifier, "identifier")
    off = _index(offset, "offset")
    if not -2**63 <= off < 2**63:
        raise ValueError(f"offset: {offset!r} is not in -2**63..2**63-1")
    return lib.lr_mm_key_hash(b, len(b), off)


def mm_in(mm: Any, what: str = "mm"):
    """``(lr_mm_input[] cdata, keep, n)`` for a sequence of multimodal
    inputs (MmInput or ``(identifier, offset, length)``), or ``(NULL,
    None, 0)`` for None and none. Hold ``keep`` (the array and the
    identifiers' C strings) until the call returns: the library borrows
    them."""
    if mm is None:
        return ffi.NULL, None, 0
    if isinstance(mm, (str, bytes, bytearray, MmInput)) or (
            isinstance(mm, tuple) and len(mm) == 3 and
            isinstance(mm[0], (str, bytes, bytearray))):
        raise TypeError(f"{what}: expected a sequence of inputs, got one "
                        f"input ({mm!r}); wrap it in a list")
    try:
        items = list(mm)
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of (identifier, "
                        f"offset, length), got {type(mm).__name__}") \
            from None
    if not items:
        return ffi.NULL, None, 0
    arr = ffi.new("lr_mm_input[]", len(items))
    keep = [arr]
    for i, item in enumerate(items):
        try:
            ident, off, length = item
        except (TypeError, ValueError):
            raise TypeError(f"{what}[{i}]: expected (identifier, offset, "
                            f"length), got {item!r}") from None
        s = ffi.new("char[]", name_in(ident, f"{what}[{i}].identifier"))
        keep.append(s)
        arr[i].identifier = s
        arr[i].offset = u32(off, f"{what}[{i}].offset")
        arr[i].length = u32(length, f"{what}[{i}].length")
    return arr, keep, len(items)


def tier_in(tier: Any) -> int:
    """A tier argument as the int32_t the library takes; the library says
    LR_EINVAL for a value that is no lr_tier."""
    t = _index(tier, "tier")
    if not -2**31 <= t < 2**31:
        raise ValueError(f"tier: {tier!r} is not an lr_tier")
    return t


_TIER_FLAGS = {Tier.GPU: 0, Tier.CPU: lib.LR_MATCH_TIER_CPU,
               Tier.DISK: lib.LR_MATCH_TIER_DISK}


def _tier_flag(tier: Any) -> int:
    """The lr_index_match() flag that asks a tier (0 for the GPU)."""
    flag = _TIER_FLAGS.get(tier_in(tier))
    if flag is None:
        raise ValueError(f"tier: {tier!r} is not an lr_tier")
    return flag


class _Prompt:
    """An lr_prompt over borrowed arrays, valid inside ``with``."""

    __slots__ = ("c", "_arrays", "_mm")

    def __init__(self, tokens, boundaries=None, tenant_salt=0, keys=None,
                 n_tokens=None, mm=None):
        c = new_sized("lr_prompt", lib.lr_prompt_init_sized)
        self._arrays = []
        self._mm = None
        if tokens is not None:
            tok = self._keep(u32_in(tokens, "tokens"))
            c.tokens = tok
            c.n_tokens = len(tok)
        elif keys is None:
            raise TypeError("give tokens, or keys= and n_tokens=")
        if keys is not None:
            k = self._keep(u64_in(keys, "keys"))
            c.keys = k
            c.n_keys = len(k)
            if tokens is None:
                if n_tokens is None:
                    raise TypeError("keys= without tokens needs n_tokens=")
                set_fields(c, "prompt", n_tokens=n_tokens)
        if boundaries is not None:
            b = self._keep(u32_in(boundaries, "boundaries"))
            c.boundaries = b
            c.n_boundaries = len(b)
        set_fields(c, "prompt", tenant_salt=tenant_salt)
        if mm is not None:
            arr, self._mm, n = mm_in(mm)
            c.mm = arr
            c.n_mm = n
        self.c = c

    def _keep(self, arr):
        self._arrays.append(arr)
        return arr

    def __enter__(self):
        return self.c

    def __exit__(self, *exc):
        for a in self._arrays:
            ffi.release(a)
        self._mm = None  # the inputs, borrowed for the call


class Index(_Handle):
    """A prefix index (lr_index): which instance caches which prefix.

    Keyword arguments are lr_index_options fields; None keeps the
    library's default. ``ttl_ns=2**64-1`` means routes never expire.
    Instance ids are the host's (any uint32 but LR_INSTANCE_NONE). Times
    are the host's monotonic clock in nanoseconds.
    """

    __slots__ = ()
    _kind = "Index"

    def __init__(self, *, capacity_blocks: Optional[int] = None,
                 ttl_ns: Optional[int] = None,
                 block_tokens: Optional[int] = None,
                 max_instances: Optional[int] = None,
                 journal_capacity: Optional[int] = None,
                 engine_map_capacity: Optional[int] = None,
                 seed: Optional[int] = None,
                 replica_id: Optional[int] = None,
                 remote_ttl_ns: Optional[int] = None,
                 eviction: Optional[int] = None,
                 clock_skew_ns: Optional[int] = None) -> None:
        opt = new_sized("lr_index_options", lib.lr_index_options_init_sized)
        set_fields(opt, "Index", capacity_blocks=capacity_blocks,
                   ttl_ns=ttl_ns, block_tokens=block_tokens,
                   max_instances=max_instances,
                   journal_capacity=journal_capacity,
                   engine_map_capacity=engine_map_capacity, seed=seed,
                   replica_id=replica_id, remote_ttl_ns=remote_ttl_ns,
                   eviction=eviction, clock_skew_ns=clock_skew_ns)
        out = ffi.new("lr_index **")
        check(lib.lr_index_create(opt, out), "lr_index_create")
        self._own(out[0], lib.lr_index_destroy, exclusive=True)

    @property
    def block_tokens(self) -> int:
        """Tokens per block."""
        with self._use() as p:
            return lib.lr_index_block_tokens(p)

    def learn(self, tokens: Any, instance: int, *, now_ns: int,
              boundaries: Any = None, tenant_salt: int = 0,
              trust: int = Trust.LOCAL, keys: Any = None,
              n_tokens: Optional[int] = None, mm: MmLike = None) -> None:
        """lr_index_learn(): ``instance`` now holds the prompt, up to each
        boundary and its full length (block-aligned). ``keys`` (from
        block_keys()) spares the hashing; with keys, tokens may be None
        if n_tokens is given. ``mm`` lists the prompt's multimodal inputs
        (MmInput): their keys enter the blocks they overlap, as vLLM's
        do (not with ``keys``: InvalidArgumentError)."""
        inst = u32(instance, "instance")
        with _Prompt(tokens, boundaries, tenant_salt, keys, n_tokens,
                     mm) as pr, \
                self._use() as p:
            st = lib.lr_index_learn(p, pr, inst, int(trust),
                                    u64(now_ns, "now_ns"))
        check(st, "lr_index_learn")

    def match(self, tokens: Any, *, now_ns: int, tenant_salt: int = 0,
              touch: bool = True, keys: Any = None,
              n_tokens: Optional[int] = None, tier: int = Tier.GPU,
              mm: MmLike = None) -> Match:
        """lr_index_match(): each instance's longest cached prefix of the
        prompt. ``touch=False`` is a dry run (LR_MATCH_NO_TOUCH).
        ``tier`` (a Tier) answers for the blocks the instances hold on a
        lower tier of their KV cache instead of the GPU's
        (LR_MATCH_TIER_CPU, LR_MATCH_TIER_DISK); no hit before that
        tier's first event. ``mm`` as learn()."""
        flags = (0 if touch else lib.LR_MATCH_NO_TOUCH) | _tier_flag(tier)
        now = u64(now_ns, "now_ns")
        res = ffi.new("lr_index_match_result *")
        cap = 16
        with _Prompt(tokens, None, tenant_salt, keys, n_tokens, mm) as pr:
            while True:
                hits = ffi.new("lr_index_hit[]", cap)
                lib.lr_index_match_result_init_sized(res, _MATCH_SIZE)
                res.hits = hits
                res.hits_capacity = cap
                res.hit_size = _HIT_SIZE
                with self._use() as p:
                    st = lib.lr_index_match(p, pr, now, flags, res)
                # LR_EBUFSIZE touches nothing: retry with the size it gave.
                if st == _BUFSIZE and res.n_hits > cap:
                    cap = res.n_hits
                    continue
                check(st, "lr_index_match")
                return Match(
                    tuple(Hit(h.instance, h.tokens)
                          for h in hits[0:res.n_hits]),
                    res.deepest_tokens, res.prompt_blocks)

    def remove_instance(self, instance: int) -> None:
        """lr_index_remove_instance(): drop its routes and forget the id."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_index_remove_instance(p, inst)
        check(st, "lr_index_remove_instance")

    def expire(self, now_ns: int) -> None:
        """lr_index_expire(): drop routes unused for longer than the TTL."""
        now = u64(now_ns, "now_ns")
        with self._use() as p:
            st = lib.lr_index_expire(p, now)
        check(st, "lr_index_expire")

    def instance_blocks(self, instance: int) -> int:
        """lr_index_instance_blocks(): block routes held by one instance."""
        out = ffi.new("uint64_t *")
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_index_instance_blocks(p, inst, out)
        check(st, "lr_index_instance_blocks")
        return out[0]

    def stats(self) -> IndexStats:
        """lr_index_get_stats()."""
        s = ffi.new("lr_index_stats *")
        # No lr_index_stats_init() exists: stamp the size as the header says.
        s.struct_size = ffi.sizeof("lr_index_stats")
        with self._use() as p:
            st = lib.lr_index_get_stats(p, s)
        check(st, "lr_index_get_stats")
        return from_struct(IndexStats, s)

    # ---- precise mode --------------------------------------------------

    def kv_stored(self, instance: int, block_hashes: Any, token_ids: Any, *,
                  block_size: int, now_ns: int,
                  parent_hash: Optional[int] = None,
                  tenant_salt: int = 0, tier: int = Tier.GPU,
                  mm_hashes: Any = None) -> None:
        """lr_index_kv_stored(): an engine's BlockStored event.
        ``parent_hash=None`` means the first block starts the prompt.

        ``tier`` (a Tier, vLLM's medium) is the tier the engine stored
        the blocks on. A lower tier's store goes to that tier's routes:
        without token ids (``token_ids=()``, ``block_size=0``, as vLLM's
        offloading connector sends) each hash names a block the instance
        stored on the GPU before, whose chain the tier takes (NotFoundError
        when none is known); with token ids it is keyed as on the GPU.

        ``mm_hashes`` (None, or one uint64 per block hash) is each block's
        multimodal hash: the XOR of mm_key_hash() over the (identifier,
        offset) pairs vLLM's extra_keys list for it (0: none). A nonzero
        one needs ``block_size`` equal to block_tokens
        (NotSupportedError); another length than ``block_hashes``'
        raises ValueError."""
        inst = u32(instance, "instance")
        with _kv_stored(block_hashes, token_ids, block_size, parent_hash,
                        tenant_salt, tier, mm_hashes) as ev, \
                self._use() as p:
            st = lib.lr_index_kv_stored(p, inst, ev, u64(now_ns, "now_ns"))
        check(st, "lr_index_kv_stored")

    def kv_removed(self, instance: int, block_hashes: Any, *,
                   tier: int = Tier.GPU) -> int:
        """lr_index_kv_removed(): returns how many hashes were known.
        With a lower ``tier`` (lr_index_kv_removed_tier()) the blocks, and
        the deeper ones of the instance there, leave that tier only; a GPU
        removal leaves the lower tiers' copies."""
        inst, t = u32(instance, "instance"), tier_in(tier)
        n = ffi.new("size_t *")
        with u64_in(block_hashes, "block_hashes") as h, self._use() as p:
            if t == Tier.GPU:
                st = lib.lr_index_kv_removed(p, inst, h, len(h), n)
            else:
                st = lib.lr_index_kv_removed_tier(p, inst, t, h, len(h), n)
        check(st, "lr_index_kv_removed" if t == Tier.GPU
              else "lr_index_kv_removed_tier")
        return n[0]

    def kv_cleared(self, instance: int) -> None:
        """lr_index_kv_cleared(): AllBlocksCleared for one instance."""
        inst = u32(instance, "instance")
        with self._use() as p:
            st = lib.lr_index_kv_cleared(p, inst)
        check(st, "lr_index_kv_cleared")

    def vllm_batch(self, instance: int, payload: Any, *,
                   now_ns: int) -> "VllmBatchInfo":
        """lr_index_vllm_batch(): apply one vLLM KV-event batch (the
        msgpack payload, any bytes-like object, read in place) from
        ``instance``. See libroute.vllm for partial failures."""
        inst, now = u32(instance, "instance"), u64(now_ns, "now_ns")
        info = new_info()
        with bytes_in(payload, "payload") as buf, self._use() as p:
            st = lib.lr_index_vllm_batch(p, inst, buf, len(buf), now, info)
        return finish(st, info, "lr_index_vllm_batch")

    # ---- deltas ----------------------------------------------------------

    def mark(self) -> int:
        """lr_index_mark(): the journal position for a later export."""
        with self._use() as p:
            return lib.lr_index_mark(p)

    def export_delta(self, since_mark: int = 0) -> Delta:
        """lr_index_export_delta(): what was learned LOCALLY since
        ``since_mark`` (0: everything), as bytes, and the next mark."""
        out = ffi.new("lr_blob **")
        mark = ffi.new("uint64_t *")
        since = u64(since_mark, "since_mark")
        with self._use() as p:
            st = lib.lr_index_export_delta(p, since, out, mark)
        check(st, "lr_index_export_delta")
        return Delta(take_blob(out), mark[0])

    def import_delta(self, data: Any, *, now_ns: int) -> None:
        """lr_index_import_delta(): a peer's delta, learned as REMOTE.
        ``data`` is any bytes-like object (not copied)."""
        now = u64(now_ns, "now_ns")
        with bytes_in(data, "data") as buf, self._use() as p:
            st = lib.lr_index_import_delta(p, buf, len(buf), now)
        check(st, "lr_index_import_delta")


class _kv_stored:
    """An lr_kv_stored over borrowed arrays, valid inside ``with``."""

    __slots__ = ("c", "_h", "_t", "_m")

    def __init__(self, block_hashes, token_ids, block_size, parent_hash,
                 tenant_salt, tier=0, mm_hashes=None):
        c = new_sized("lr_kv_stored", lib.lr_kv_stored_init_sized)
        self._h = u64_in(block_hashes, "block_hashes")
        self._t = u32_in(token_ids, "token_ids")
        self._m = None
        if mm_hashes is not None:
            # The library reads n_blocks of them: no other length.
            self._m = u64_in(mm_hashes, "mm_hashes")
            if len(self._m) != len(self._h):
                n, nb = len(self._m), len(self._h)
                ffi.release(self._h)
                ffi.release(self._t)
                ffi.release(self._m)
                raise ValueError(f"mm_hashes: {n} given for {nb} blocks; "
                                 f"one per block hash")
            c.mm_hashes = self._m
        c.block_hashes = self._h
        c.n_blocks = len(self._h)
        c.token_ids = self._t
        c.n_tokens = len(self._t)
        set_fields(c, "kv_stored", block_size=block_size,
                   tenant_salt=tenant_salt, tier=tier)
        if parent_hash is not None:
            set_fields(c, "kv_stored", parent_hash=parent_hash, has_parent=1)
        self.c = c

    def __enter__(self):
        return self.c

    def __exit__(self, *exc):
        ffi.release(self._h)
        ffi.release(self._t)
        if self._m is not None:
            ffi.release(self._m)
