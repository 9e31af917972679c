//! Lodestar's online learner (`lr_learner.h`).

use crate::error::{check, Error, Result};
use crate::mlp::{rows, MlpOptions};
use crate::{init, ptr_or_null, sys};
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{BitOr, BitOrAssign};
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// Options fixed when a learner is created. Start from
/// [`LearnerOptions::new`] (or `default()` and set `n_features`), which is
/// the library's `lr_learner_options_init`: every field is passed as it is.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LearnerOptions {
    /// Seeds every network and every random choice (ignored in
    /// [`crate::RouterOptions::learner`]: the router's seed is used).
    pub seed: u64,
    /// Features per sample, 1..=`LR_MLP_MAX_INPUTS`; no default. For a
    /// router's learner, 0 or [`crate::lodestar_feature_count`].
    pub n_features: u32,
    /// The newest samples kept (default 5000).
    pub fifo_capacity: u32,
    /// Older samples kept for diversity (default 5000).
    pub replay_capacity: u32,
    /// Samples queued between steps before new ones are dropped (default
    /// 8192).
    pub pending_capacity: u32,
    /// Samples before the first model (default 5000).
    pub min_samples: u32,
    /// New samples between training rounds (default 1000).
    pub retrain_every: u32,
    /// Training passes per round, 1..=10000 (default 30).
    pub epochs: u32,
    /// Samples with |reward| above this are dropped; > 0 (default 15).
    pub max_abs_reward: f64,
    /// The networks' shape and training options; `None`: the library's
    /// defaults. `n_inputs` and `seed` are ignored (they are the
    /// learner's).
    pub mlp: Option<MlpOptions>,
}

impl Default for LearnerOptions {
    fn default() -> Self {
        let o = init(sys::lr_learner_options_init_sized);
        LearnerOptions {
            seed: o.seed,
            n_features: o.n_features,
            fifo_capacity: o.fifo_capacity,
            replay_capacity: o.replay_capacity,
            pending_capacity: o.pending_capacity,
            min_samples: o.min_samples,
            retrain_every: o.retrain_every,
            epochs: o.epochs,
            max_abs_reward: o.max_abs_reward,
            mlp: None,
        }
    }
}

impl LearnerOptions {
    /// The library's defaults for samples of `n_features` features.
    pub fn new(n_features: u32) -> Self {
        LearnerOptions {
            n_features,
            ..LearnerOptions::default()
        }
    }

    /// Calls `f` with these options as C structs; the nested network
    /// options live on this stack frame for the length of the call.
    pub(crate) fn with_c<R>(&self, f: impl FnOnce(&sys::lr_learner_options) -> R) -> R {
        let mlp = self.mlp.as_ref().map(MlpOptions::to_c);
        let mut o = init(sys::lr_learner_options_init_sized);
        o.seed = self.seed;
        o.n_features = self.n_features;
        o.fifo_capacity = self.fifo_capacity;
        o.replay_capacity = self.replay_capacity;
        o.pending_capacity = self.pending_capacity;
        o.min_samples = self.min_samples;
        o.retrain_every = self.retrain_every;
        o.epochs = self.epochs;
        o.max_abs_reward = self.max_abs_reward;
        o.mlp = mlp
            .as_ref()
            .map_or(ptr::null(), |m| m as *const sys::lr_mlp_options);
        f(&o)
    }
}

/// Flags of [`LearnerTrainer::step`] and [`crate::Router::learn_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LearnFlags(u32);

impl LearnFlags {
    /// No flags: train when the schedule says so.
    pub const NONE: LearnFlags = LearnFlags(0);
    /// Train now if there is any sample, whatever the counts.
    pub const FORCE: LearnFlags = LearnFlags(sys::LR_LEARN_FORCE);

    /// The raw C value.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Flags from a raw C value (which need not be known).
    pub const fn from_raw(v: u32) -> LearnFlags {
        LearnFlags(v)
    }
}

impl BitOr for LearnFlags {
    type Output = LearnFlags;
    fn bitor(self, rhs: LearnFlags) -> LearnFlags {
        LearnFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for LearnFlags {
    fn bitor_assign(&mut self, rhs: LearnFlags) {
        self.0 |= rhs.0;
    }
}

/// A learner's counters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct LearnerStats {
    /// Samples queued.
    pub samples: u64,
    /// Samples dropped for a full queue.
    pub dropped_full: u64,
    /// Samples dropped for a reward out of range.
    pub dropped_range: u64,
    /// Training round of the model in service (0: none yet).
    pub model_round: u64,
    /// Samples that model trained on (FIFO + replay).
    pub model_samples: u64,
    /// Of which from the replay buffer.
    pub model_replay: u64,
    /// Its training mean squared error (reward units squared).
    pub model_mse: f64,
    /// Mean |predicted - reward| over the last 256 samples added with a
    /// prediction; NaN before any.
    pub online_mae: f64,
    /// Samples added with a prediction, over the learner's life.
    pub predicted: u64,
}

impl LearnerStats {
    pub(crate) fn from_c(s: &sys::lr_learner_stats) -> LearnerStats {
        LearnerStats {
            samples: s.samples,
            dropped_full: s.dropped_full,
            dropped_range: s.dropped_range,
            model_round: s.model_round,
            model_samples: s.model_samples,
            model_replay: s.model_replay,
            model_mse: s.model_mse,
            online_mae: s.online_mae,
            predicted: s.predicted,
        }
    }
}

/// The samples a learner's next round would train on: the FIFO, then the
/// replay buffer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LearnerSamples {
    /// `len()` rows of `n_features` values, row-major.
    pub x: Vec<f32>,
    /// The rewards, one per row.
    pub y: Vec<f32>,
    /// Values per row of `x`.
    pub n_features: usize,
}

impl LearnerSamples {
    /// The number of samples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// The rows of `x`.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.x.chunks_exact(self.n_features.max(1))
    }
}

/// Sizes, allocates and fills LearnerSamples with `get`, an
/// `lr_*_samples` call bound to its handle. A step between the size query
/// and the copy may change the count: retried until it fits.
pub(crate) fn fill_samples(
    n_features: usize,
    op: &'static str,
    mut get: impl FnMut(*mut f32, *mut f32, usize, &mut usize) -> sys::lr_status,
) -> Result<LearnerSamples> {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    loop {
        let mut n = 0;
        let cap = y.len();
        let (xp, yp) = if cap == 0 {
            (ptr::null_mut(), ptr::null_mut())
        } else {
            (x.as_mut_ptr(), y.as_mut_ptr())
        };
        let st = get(xp, yp, cap, &mut n);
        if st == sys::LR_EBUFSIZE && n > cap {
            x = vec![0.0; n * n_features];
            y = vec![0.0; n];
            continue;
        }
        check(st, op)?;
        x.truncate(n * n_features);
        y.truncate(n);
        return Ok(LearnerSamples { x, y, n_features });
    }
}

/// The C learner, owned jointly by its two halves and destroyed with the
/// last of them.
struct Shared {
    raw: NonNull<sys::lr_learner>,
    n_features: usize,
}

// SAFETY: Shared itself makes no call but lr_learner_destroy, in Drop, which
// runs once, after both halves are gone (the last Arc), so it overlaps
// nothing. The halves carry the per-side rules (see Learner).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once, no call in progress (no half left).
        unsafe { sys::lr_learner_destroy(self.raw.as_ptr()) }
    }
}

/// Makes a half `!Sync` while keeping it `Send`.
type NotSync = PhantomData<Cell<()>>;

/// Lodestar's online learner (`lr_learner`): it collects (features,
/// reward) samples on the serving side and trains a new network on the
/// training side, then hands it to the serving side without a lock.
///
/// The C contract is one thread at a time *per side*, and a serving call
/// may overlap a training call. The binding makes that a type rule:
///
/// - [`LearnerServer`] (the route path: `add_sample`, `score`, `stats`)
///   and [`LearnerTrainer`] (a background thread: `step`, `samples`) are
///   each `Send` but not `Sync`, so each half is used by one thread at a
///   time, and the two halves may live on different threads;
/// - [`Learner::split`] hands out the two halves (the C learner is freed
///   when both are dropped); [`Learner::split_mut`] borrows them, for
///   `std::thread::scope` or single-threaded use.
///
/// ```no_run
/// # use libroute::{Learner, LearnerOptions, LearnFlags};
/// let (mut server, mut trainer) = Learner::new(&LearnerOptions::new(3))?.split();
/// std::thread::spawn(move || loop {
///     trainer.step(LearnFlags::NONE).unwrap();
///     std::thread::sleep(std::time::Duration::from_millis(200));
/// });
/// server.add_sample(&[1.0, 2.0, 3.0], -0.25, None)?;
/// # Ok::<(), libroute::Error>(())
/// ```
///
/// `Learner` itself is `Send` but not `Sync`:
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::Learner>();
/// ```
#[derive(Debug)]
pub struct Learner {
    server: LearnerServer,
    trainer: LearnerTrainer,
}

impl Learner {
    /// Creates a learner with no model (cold).
    pub fn new(opt: &LearnerOptions) -> Result<Learner> {
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options (and nested network options, alive
        // for the call) and an out pointer.
        check(
            opt.with_c(|o| unsafe { sys::lr_learner_create(o, &mut raw) }),
            "lr_learner_create",
        )?;
        let raw = NonNull::new(raw).expect("lr_learner_create returned LR_OK and NULL");
        let shared = Arc::new(Shared {
            raw,
            n_features: opt.n_features as usize,
        });
        Ok(Learner {
            server: LearnerServer {
                shared: shared.clone(),
                _not_sync: PhantomData,
            },
            trainer: LearnerTrainer {
                shared,
                _not_sync: PhantomData,
            },
        })
    }

    /// Features per sample.
    pub fn n_features(&self) -> usize {
        self.server.shared.n_features
    }

    /// The two halves, to move to different threads.
    pub fn split(self) -> (LearnerServer, LearnerTrainer) {
        (self.server, self.trainer)
    }

    /// The two halves, borrowed.
    pub fn split_mut(&mut self) -> (&mut LearnerServer, &mut LearnerTrainer) {
        (&mut self.server, &mut self.trainer)
    }
}

/// The serving side of a [`Learner`]: `Send`, not `Sync`.
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::LearnerServer>();
/// ```
pub struct LearnerServer {
    shared: Arc<Shared>,
    _not_sync: NotSync,
}

impl fmt::Debug for LearnerServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnerServer")
            .field("raw", &self.shared.raw)
            .finish()
    }
}

impl LearnerServer {
    fn ptr(&self) -> *mut sys::lr_learner {
        self.shared.raw.as_ptr()
    }

    /// Features per sample.
    pub fn n_features(&self) -> usize {
        self.shared.n_features
    }

    /// Queues one sample for the next step. `reward` is the observed reward
    /// (for routing, -TTFT in seconds); `predicted` is what the model in
    /// service predicted for it, and feeds [`LearnerStats::online_mae`]. A
    /// reward beyond `max_abs_reward` ([`crate::ErrorKind::Range`]) or a
    /// full queue ([`crate::ErrorKind::Limit`]) drops the sample and counts
    /// it. Allocates nothing.
    pub fn add_sample(
        &mut self,
        features: &[f32],
        reward: f64,
        predicted: Option<f64>,
    ) -> Result<()> {
        const OP: &str = "lr_learner_add_sample";
        if features.len() != self.shared.n_features {
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        // SAFETY: serving side, one thread (&mut, !Sync); n_features values.
        check(
            unsafe {
                sys::lr_learner_add_sample(
                    self.ptr(),
                    features.as_ptr(),
                    reward,
                    predicted.unwrap_or(f64::NAN),
                )
            },
            OP,
        )
    }

    /// Predicts the reward of each row of `x` with the model in service,
    /// taking over a newly trained one first, and counts the rows outside
    /// the ranges it was trained on. [`crate::ErrorKind::State`] before the
    /// first model.
    pub fn score(&mut self, x: &[f32]) -> Result<(Vec<f32>, usize)> {
        let n = rows(x, self.shared.n_features, "lr_learner_score")?;
        let mut out = vec![0.0; n];
        let ood = self.score_into(x, &mut out)?;
        Ok((out, ood))
    }

    /// [`LearnerServer::score`] into the front of `out`, which must have
    /// room for a value per row; allocates nothing. Returns the rows out of
    /// range.
    pub fn score_into(&mut self, x: &[f32], out: &mut [f32]) -> Result<usize> {
        const OP: &str = "lr_learner_score";
        let n = rows(x, self.shared.n_features, OP)?;
        if out.len() < n {
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        let mut ood = 0;
        // SAFETY: serving side, one thread; n rows in x, room for n in out.
        check(
            unsafe {
                sys::lr_learner_score(
                    self.ptr(),
                    ptr_or_null(x),
                    n,
                    if n == 0 {
                        ptr::null_mut()
                    } else {
                        out.as_mut_ptr()
                    },
                    &mut ood,
                )
            },
            OP,
        )?;
        Ok(ood)
    }

    /// [`LearnerServer::score`] with each row judged alone: the predicted
    /// rewards, and per row `true` where it is outside the ranges the
    /// model in service was trained on.
    pub fn score_rows(&mut self, x: &[f32]) -> Result<(Vec<f32>, Vec<bool>)> {
        const OP: &str = "lr_learner_score_rows";
        let n = rows(x, self.shared.n_features, OP)?;
        let mut out = vec![0.0f32; n];
        let mut flags = vec![0u8; n];
        let (po, pf) = if n == 0 {
            (ptr::null_mut(), ptr::null_mut())
        } else {
            (out.as_mut_ptr(), flags.as_mut_ptr())
        };
        // SAFETY: serving side, one thread; n rows in x, room for n values
        // in out and n flags.
        check(
            unsafe {
                sys::lr_learner_score_rows(self.ptr(), ptr_or_null(x), n, po, pf, ptr::null_mut())
            },
            OP,
        )?;
        Ok((out, flags.into_iter().map(|f| f != 0).collect()))
    }

    /// The learner's counters.
    pub fn stats(&self) -> Result<LearnerStats> {
        let mut s = init(sys::lr_learner_stats_init_sized);
        // SAFETY: serving side; &self of a !Sync value cannot overlap the
        // &mut calls above.
        check(
            unsafe { sys::lr_learner_get_stats(self.ptr(), &mut s) },
            "lr_learner_get_stats",
        )?;
        Ok(LearnerStats::from_c(&s))
    }
}

/// The training side of a [`Learner`]: `Send`, not `Sync`.
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::LearnerTrainer>();
/// ```
pub struct LearnerTrainer {
    shared: Arc<Shared>,
    _not_sync: NotSync,
}

impl fmt::Debug for LearnerTrainer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnerTrainer")
            .field("raw", &self.shared.raw)
            .finish()
    }
}

impl LearnerTrainer {
    fn ptr(&self) -> *mut sys::lr_learner {
        self.shared.raw.as_ptr()
    }

    /// Features per sample.
    pub fn n_features(&self) -> usize {
        self.shared.n_features
    }

    /// Takes the queued samples and, when `min_samples` (first round) or
    /// `retrain_every` (later rounds) new ones have arrived, or with
    /// [`LearnFlags::FORCE`] whenever there is any, trains and publishes a
    /// new model. Returns whether it published one. This is the slow call:
    /// the serving side keeps scoring meanwhile. On
    /// [`crate::ErrorKind::NoMem`] the samples stay for the next step.
    pub fn step(&mut self, flags: LearnFlags) -> Result<bool> {
        let mut trained = 0;
        // SAFETY: training side, one thread (&mut, !Sync); out pointer.
        check(
            unsafe { sys::lr_learner_step(self.ptr(), flags.raw(), &mut trained) },
            "lr_learner_step",
        )?;
        Ok(trained != 0)
    }

    /// A copy of the samples the next round would train on.
    pub fn samples(&self) -> Result<LearnerSamples> {
        let p = self.ptr();
        fill_samples(
            self.shared.n_features,
            "lr_learner_samples",
            |x, y, cap, n| {
                // SAFETY: training side; &self of a !Sync value cannot overlap
                // step(); x and y have room for cap rows (or are NULL with 0).
                unsafe { sys::lr_learner_samples(p, x, y, cap, n) }
            },
        )
    }
}
