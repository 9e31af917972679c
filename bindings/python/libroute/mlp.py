"""lr_mlp: Lodestar's scorer, a small fully connected network that
predicts one number per row of features (include/libroute/lr_mlp.h).

Rows are float32, row-major: ``n_rows x n_inputs`` values. Every ``x``
argument takes an ``array('f')``, a ``memoryview`` cast to ``'f'`` or a
NumPy ``float32`` array (flat or ``(rows, n_inputs)``, C-contiguous)
without a copy; a flat sequence of numbers or a sequence of rows is copied
once. ``y`` (one target per row) is the same with width 1. Predictions
come back as ``array('f')``, or are written into a float32 buffer passed
as ``out=``.

Thread safety: the C network is one thread at a time (scoring uses scratch
memory inside it). An Mlp object serializes its calls with a lock; for
parallel scoring give each thread its own clone().
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ._ffi import ffi, lib
from ._util import (_Handle, bytes_in, f32_in, f32_out, new_sized,
                    set_fields, take_blob, u32)
from .errors import check

__all__ = ["Mlp", "MLP_OPTIONS"]

#: The lr_mlp_options fields a caller may set, as Mlp() keyword arguments
#: (the allocator is not bound: every handle uses libc).
MLP_OPTIONS = ("n_inputs", "seed", "hidden_layers", "width", "batch_size",
               "dropout", "learning_rate", "weight_decay", "grad_clip")


def mlp_options(what: str, options: Mapping[str, Any],
                exclude: tuple = ()):
    """An initialised ``lr_mlp_options *`` with ``options`` (None values
    keep the defaults). Unknown keys, and the ``exclude``d ones that the
    caller's owner sets itself, raise TypeError naming them."""
    opt = new_sized("lr_mlp_options", lib.lr_mlp_options_init_sized)
    bad = sorted(set(options) - set(MLP_OPTIONS))
    if bad:
        raise TypeError(f"{what}: unknown network option(s) {bad}; known: "
                        f"{list(MLP_OPTIONS)}")
    taken = sorted(k for k in set(options) & set(exclude)
                   if options[k] is not None)
    if taken:
        raise TypeError(f"{what}: {taken} cannot be set here (the owner "
                        f"sets them)")
    set_fields(opt, what, **dict(options))
    return opt


class Mlp(_Handle):
    """A network (lr_mlp). ``n_inputs`` is required; the other keyword
    arguments are lr_mlp_options fields, None keeping the library's default
    (3 hidden layers of 128, batch 256, dropout 0.1, Adam at 1e-3, weight
    decay 1e-5, gradient clip 1.0).

    A new network has fresh weights, identity normalization and no range
    limits: call fit_normalization() with the training data first.
    """

    __slots__ = ("_n_inputs",)
    _kind = "Mlp"

    def __init__(self, n_inputs: int, *, seed: Optional[int] = None,
                 hidden_layers: Optional[int] = None,
                 width: Optional[int] = None,
                 batch_size: Optional[int] = None,
                 dropout: Optional[float] = None,
                 learning_rate: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 grad_clip: Optional[float] = None) -> None:
        opt = mlp_options("Mlp", dict(
            n_inputs=u32(n_inputs, "n_inputs"), seed=seed,
            hidden_layers=hidden_layers, width=width, batch_size=batch_size,
            dropout=dropout, learning_rate=learning_rate,
            weight_decay=weight_decay, grad_clip=grad_clip))
        out = ffi.new("lr_mlp **")
        check(lib.lr_mlp_create(opt, out), "lr_mlp_create")
        self._adopt(out[0])

    def _adopt(self, ptr) -> None:
        self._own(ptr, lib.lr_mlp_destroy, exclusive=True)
        self._n_inputs = lib.lr_mlp_n_inputs(ptr)

    @classmethod
    def _from_ptr(cls, ptr) -> "Mlp":
        m = cls.__new__(cls)
        m._adopt(ptr)
        return m

    @classmethod
    def load(cls, data: Any) -> "Mlp":
        """lr_mlp_load(): a network from save()'s bytes (any bytes-like
        object, read in place). It predicts exactly as the saved one;
        training restarts the optimizer. Raises CorruptError for damaged
        or truncated bytes, VersionError for a format this library does not
        read."""
        out = ffi.new("lr_mlp **")
        with bytes_in(data, "data") as buf:
            st = lib.lr_mlp_load(buf, len(buf), ffi.NULL, out)
        check(st, "lr_mlp_load")
        return cls._from_ptr(out[0])

    def save(self) -> bytes:
        """lr_mlp_save(): shape, options, normalization, ranges and weights
        (not the optimizer state), versioned and checksummed."""
        out = ffi.new("lr_blob **")
        with self._use() as p:
            st = lib.lr_mlp_save(p, out)
        check(st, "lr_mlp_save")
        return take_blob(out)

    def clone(self) -> "Mlp":
        """lr_mlp_clone(): an independent copy that continues identically
        (weights, statistics, optimizer and random state)."""
        out = ffi.new("lr_mlp **")
        with self._use() as p:
            st = lib.lr_mlp_clone(p, out)
        check(st, "lr_mlp_clone")
        return Mlp._from_ptr(out[0])

    @property
    def n_inputs(self) -> int:
        """Features per row (lr_mlp_n_inputs)."""
        return self._n_inputs

    def _rows(self, x: Any, what: str = "x"):
        return f32_in(x, self._n_inputs, what)

    def _targets(self, y: Any, n: int):
        c, m = f32_in(y, 1, "y")
        if m != n:
            ffi.release(c)
            raise ValueError(f"y: {m} targets for {n} rows")
        return c

    def fit_normalization(self, x: Any, y: Any = None) -> None:
        """lr_mlp_fit_normalization(): per-feature mean, deviation and
        range from ``x``, and with ``y`` the target's mean and deviation.
        The weights are kept."""
        cx, n = self._rows(x)
        cy = None
        try:
            if y is not None:
                cy = self._targets(y, n)
            with self._use() as p:
                st = lib.lr_mlp_fit_normalization(
                    p, cx, n, ffi.NULL if cy is None else cy)
        finally:
            ffi.release(cx)
            if cy is not None:
                ffi.release(cy)
        check(st, "lr_mlp_fit_normalization")

    def predict(self, x: Any, out: Any = None):
        """lr_mlp_predict(): one value per row (no dropout). Returns an
        ``array('f')``, or ``out`` (a writable float32 buffer with room
        for a value per row), written in place."""
        cx, n = self._rows(x)
        try:
            res, co = f32_out(out, n, "out")
            try:
                with self._use() as p:
                    st = lib.lr_mlp_predict(p, cx, n, co)
            finally:
                ffi.release(co)
        finally:
            ffi.release(cx)
        check(st, "lr_mlp_predict")
        return res

    def out_of_range(self, x: Any) -> int:
        """lr_mlp_out_of_range(): the rows with a feature outside the
        range fit_normalization() saw (NaN counts as outside)."""
        cx, n = self._rows(x)
        nout = ffi.new("size_t *")
        try:
            with self._use() as p:
                st = lib.lr_mlp_out_of_range(p, cx, n, nout)
        finally:
            ffi.release(cx)
        check(st, "lr_mlp_out_of_range")
        return nout[0]

    def out_of_range_rows(self, x: Any) -> List[bool]:
        """lr_mlp_out_of_range_rows(): each row judged alone, True where
        it has a feature outside the range fit_normalization() saw (NaN
        counts as outside)."""
        cx, n = self._rows(x)
        flags = ffi.new("uint8_t[]", max(n, 1))
        try:
            with self._use() as p:
                st = lib.lr_mlp_out_of_range_rows(p, cx, n, flags, ffi.NULL)
        finally:
            ffi.release(cx)
        check(st, "lr_mlp_out_of_range_rows")
        return [bool(flags[i]) for i in range(n)]

    def train(self, x: Any, y: Any, epochs: int = 1) -> float:
        """lr_mlp_train(): ``epochs`` shuffled passes of mini-batch Adam
        with dropout. Returns the mean squared error over the last epoch's
        batches, in the target's units squared."""
        ep = u32(epochs, "epochs")
        cx, n = self._rows(x)
        loss = ffi.new("double *")
        try:
            cy = self._targets(y, n)
            try:
                with self._use() as p:
                    st = lib.lr_mlp_train(p, cx, cy, n, ep, loss)
            finally:
                ffi.release(cy)
        finally:
            ffi.release(cx)
        check(st, "lr_mlp_train")
        return loss[0]

    def loss(self, x: Any, y: Any) -> float:
        """lr_mlp_loss(): mean squared error of the predictions."""
        cx, n = self._rows(x)
        mse = ffi.new("double *")
        try:
            cy = self._targets(y, n)
            try:
                with self._use() as p:
                    st = lib.lr_mlp_loss(p, cx, cy, n, mse)
            finally:
                ffi.release(cy)
        finally:
            ffi.release(cx)
        check(st, "lr_mlp_loss")
        return mse[0]


def options_dict(options: Optional[Mapping[str, Any]], what: str
                 ) -> Dict[str, Any]:
    """A copy of a mapping of options (None: empty), type-checked."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{what}: expected a mapping of options (a dict), "
                        f"got {type(options).__name__}")
    return dict(options)
