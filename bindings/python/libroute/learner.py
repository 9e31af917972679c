"""lr_learner: Lodestar's online learner (include/libroute/lr_learner.h).

The learner has two sides that may run at the same time:

- serving (the route path): add_sample(), score(), stats();
- training (a background thread): step(), samples().

step() trains a new network, which can take seconds, while score() keeps
answering with the model in service and picks up the new one on its next
call. The C contract is one thread at a time *per side*, so a Learner
object holds one lock per side: two serving calls (or two training calls)
run one after the other, a serving call and a training call run in
parallel (cffi releases the GIL for each C call). close() waits for the
calls of both sides.

A Router with the lodestar policy owns its own learner; Router.learn_step(),
Router.learner_samples() and Router.learner_stats() reach it.
"""

from __future__ import annotations

import array
import math
import threading
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple

from ._ffi import ffi, lib
from ._util import (F32_TYPECODE, _Handle, f32_in, f32_out, from_struct,
                    new_sized, set_fields, u32)
from .errors import check
from .mlp import mlp_options, options_dict

__all__ = ["Learner", "LearnerStats", "LearnerScore", "Samples",
           "LEARNER_OPTIONS"]

_BUFSIZE = 11  # LR_EBUFSIZE
_FORCE = lib.LR_LEARN_FORCE

#: The lr_learner_options fields, as Learner() keyword arguments (``mlp``
#: is a mapping of Mlp() options; the allocator is not bound).
LEARNER_OPTIONS = ("n_features", "seed", "fifo_capacity", "replay_capacity",
                   "pending_capacity", "min_samples", "retrain_every",
                   "epochs", "max_abs_reward", "mlp")


class LearnerStats(NamedTuple):
    """Learner counters (lr_learner_stats). ``model_round`` is 0 until a
    model is in service; ``online_mae`` is NaN before any sample came with
    a prediction."""

    samples: int
    dropped_full: int
    dropped_range: int
    model_round: int
    model_samples: int
    model_replay: int
    model_mse: float
    online_mae: float
    predicted: int


class LearnerScore(NamedTuple):
    """What Learner.score() returns: one predicted reward per row, and how
    many rows fell outside the ranges the model was trained on."""

    predictions: Any  # array('f'), or the caller's out buffer
    out_of_range: int


class Samples(NamedTuple):
    """The samples the next training round would use (FIFO, then replay):
    ``x`` holds ``len(y) x n_features`` floats row-major, ``y`` the
    rewards; both ``array('f')``."""

    x: "array.array[float]"
    y: "array.array[float]"
    n_features: int

    @property
    def n_samples(self) -> int:
        return len(self.y)

    def rows(self):
        """The rows of x as a list of memoryview slices (no copy)."""
        d, m = self.n_features, memoryview(self.x)
        return [m[i * d:(i + 1) * d] for i in range(len(self.y))]


def stats_from(s) -> LearnerStats:
    return from_struct(LearnerStats, s)


def new_stats():
    s = new_sized("lr_learner_stats", lib.lr_learner_stats_init_sized)
    return s


def learner_options(what: str, options: Mapping[str, Any],
                    exclude: tuple = ()):
    """``(lr_learner_options *, keep)``: initialised options with the
    given fields; ``options["mlp"]`` (a mapping of Mlp options but
    n_inputs and seed, which are the learner's) becomes a nested
    lr_mlp_options that ``keep`` holds alive. Keep ``keep`` referenced
    until the create call returns (the library copies both structs)."""
    options = dict(options)
    bad = sorted(set(options) - set(LEARNER_OPTIONS))
    if bad:
        raise TypeError(f"{what}: unknown learner option(s) {bad}; known: "
                        f"{list(LEARNER_OPTIONS)}")
    taken = sorted(k for k in set(options) & set(exclude)
                   if options[k] is not None)
    if taken:
        raise TypeError(f"{what}: {taken} cannot be set here (the owner "
                        f"sets them)")
    mlp = options.pop("mlp", None)
    opt = new_sized("lr_learner_options", lib.lr_learner_options_init_sized)
    set_fields(opt, what, **options)
    keep = None
    if mlp is not None:
        keep = mlp_options(what + " mlp", options_dict(mlp, what + " mlp"),
                           exclude=("n_inputs", "seed"))
        opt.mlp = keep
    return opt, keep


def samples_into(call, n_features: int, fn: str) -> Samples:
    """Size, allocate and fill a Samples with ``call(x, y, cap, n)``, an
    lr_*_samples function already bound to its handle. A step between the
    size query and the copy may change the count: retried until it fits."""
    n = ffi.new("size_t *")
    cap = 0
    while True:
        x = array.array(F32_TYPECODE, bytes(4 * cap * n_features))
        y = array.array(F32_TYPECODE, bytes(4 * cap))
        if cap:
            with ffi.from_buffer("float[]", x, require_writable=True) as cx, \
                    ffi.from_buffer("float[]", y,
                                    require_writable=True) as cy:
                st = call(cx, cy, cap, n)
        else:
            st = call(ffi.NULL, ffi.NULL, 0, n)
        if st == _BUFSIZE and n[0] > cap:
            cap = n[0]
            continue
        check(st, fn)
        del x[n[0] * n_features:]
        del y[n[0]:]
        return Samples(x, y, n_features)


class _Side:
    """One call on one side of a Learner: the side's lock, then the
    handle (counted, so close() waits for it)."""

    __slots__ = ("_h", "_lock")

    def __init__(self, h: "Learner", lock: threading.Lock) -> None:
        self._h = h
        self._lock = lock

    def __enter__(self):
        self._lock.acquire()
        try:
            return self._h._acquire()
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc) -> None:
        try:
            self._h._release()
        finally:
            self._lock.release()


class Learner(_Handle):
    """An online learner (lr_learner). ``n_features`` is required; the
    other keyword arguments are lr_learner_options fields, None keeping the
    library's default (FIFO and replay of 5000, pending queue of 8192,
    first model after 5000 samples, then every 1000, 30 epochs, rewards
    within +-15). ``mlp`` is a mapping of Mlp() options for its networks,
    n_inputs and seed excepted (they are the learner's).

    The learner starts cold: score() raises StateError until a step() has
    published a model.
    """

    __slots__ = ("_n_features", "_serve_lock", "_train_lock")
    _kind = "Learner"

    def __init__(self, n_features: int, *, seed: Optional[int] = None,
                 fifo_capacity: Optional[int] = None,
                 replay_capacity: Optional[int] = None,
                 pending_capacity: Optional[int] = None,
                 min_samples: Optional[int] = None,
                 retrain_every: Optional[int] = None,
                 epochs: Optional[int] = None,
                 max_abs_reward: Optional[float] = None,
                 mlp: Optional[Mapping[str, Any]] = None) -> None:
        opt, keep = learner_options("Learner", dict(
            n_features=u32(n_features, "n_features"), seed=seed,
            fifo_capacity=fifo_capacity, replay_capacity=replay_capacity,
            pending_capacity=pending_capacity, min_samples=min_samples,
            retrain_every=retrain_every, epochs=epochs,
            max_abs_reward=max_abs_reward, mlp=mlp))
        out = ffi.new("lr_learner **")
        st = lib.lr_learner_create(opt, out)
        del keep  # copied by the library
        check(st, "lr_learner_create")
        self._own(out[0], lib.lr_learner_destroy, exclusive=False)
        self._n_features = opt.n_features
        self._serve_lock = threading.Lock()
        self._train_lock = threading.Lock()

    def _serving(self) -> _Side:
        return _Side(self, self._serve_lock)

    def _training(self) -> _Side:
        return _Side(self, self._train_lock)

    @property
    def n_features(self) -> int:
        """Features per sample."""
        return self._n_features

    # ---- serving side ---------------------------------------------------

    def add_sample(self, features: Any, reward: float,
                   predicted: Optional[float] = None) -> None:
        """lr_learner_add_sample(): queue one sample for the next step.
        ``predicted`` is what the model in service predicted for it (None:
        no prediction); it feeds LearnerStats.online_mae. A sample with
        |reward| above max_abs_reward raises OutOfRangeError, one that
        finds the pending queue full raises LimitError; both are dropped
        and counted."""
        pred = math.nan if predicted is None else float(predicted)
        rew = float(reward)
        cx, n = f32_in(features, self._n_features, "features")
        try:
            if n != 1:
                raise ValueError(f"features: {n} rows, expected one row of "
                                 f"{self._n_features}")
            with self._serving() as p:
                st = lib.lr_learner_add_sample(p, cx, rew, pred)
        finally:
            ffi.release(cx)
        check(st, "lr_learner_add_sample")

    def score(self, x: Any, out: Any = None) -> LearnerScore:
        """lr_learner_score(): the predicted reward of each row with the
        model in service (taking over a newly trained one first), and the
        rows out of its training range. StateError before the first
        model."""
        cx, n = f32_in(x, self._n_features, "x")
        nood = ffi.new("size_t *")
        try:
            res, co = f32_out(out, n, "out")
            try:
                with self._serving() as p:
                    st = lib.lr_learner_score(p, cx, n, co, nood)
            finally:
                ffi.release(co)
        finally:
            ffi.release(cx)
        check(st, "lr_learner_score")
        return LearnerScore(res, nood[0])

    def score_rows(self, x: Any, out: Any = None
                   ) -> Tuple[Any, List[bool]]:
        """lr_learner_score_rows(): as score(), with each row judged alone:
        the predicted rewards, and per row True where it is outside the
        ranges the model in service was trained on. StateError before the
        first model."""
        cx, n = f32_in(x, self._n_features, "x")
        flags = ffi.new("uint8_t[]", max(n, 1))
        try:
            res, co = f32_out(out, n, "out")
            try:
                with self._serving() as p:
                    st = lib.lr_learner_score_rows(p, cx, n, co, flags,
                                                   ffi.NULL)
            finally:
                ffi.release(co)
        finally:
            ffi.release(cx)
        check(st, "lr_learner_score_rows")
        return res, [bool(flags[i]) for i in range(n)]

    def stats(self) -> LearnerStats:
        """lr_learner_get_stats() (a serving-side call)."""
        s = new_stats()
        with self._serving() as p:
            st = lib.lr_learner_get_stats(p, s)
        check(st, "lr_learner_get_stats")
        return stats_from(s)

    # ---- training side --------------------------------------------------

    def step(self, force: bool = False) -> bool:
        """lr_learner_step(): take the queued samples and, once
        min_samples (first round) or retrain_every (later rounds) new ones
        have arrived, or with ``force`` whenever there is any sample, train
        and publish a new model. Returns whether one was published. The
        slow call: run it off the serving thread."""
        trained = ffi.new("int32_t *")
        with self._training() as p:
            st = lib.lr_learner_step(p, _FORCE if force else 0, trained)
        check(st, "lr_learner_step")
        return bool(trained[0])

    def samples(self) -> Samples:
        """lr_learner_samples(): a copy of the samples the next round
        would train on (FIFO, then replay)."""
        with self._training() as p:
            return samples_into(
                lambda x, y, cap, n: lib.lr_learner_samples(p, x, y, cap, n),
                self._n_features, "lr_learner_samples")
