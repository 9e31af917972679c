//! Cost models as a handle (`lr_cost.h`).

use crate::error::{check, Result};
use crate::policy::Candidate;
use crate::router::Bounds;
use crate::{init, sys};
use std::fmt;
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::time::Duration;

/// A cost model (`lr_cost_kind`); `lr_cost.h` gives the formulas.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CostKind(u32);

named_consts! { CostKind, lib sys::lr_cost_kind_name,
    /// Predicted time to first token, seconds (min-ttft, dualmap).
    TTFT = sys::LR_COST_TTFT,
    /// GORGO's cost in tokens, with its online tuner.
    GORGO = sys::LR_COST_GORGO,
    /// NVIDIA Dynamo's cost in KV blocks.
    DYNAMO = sys::LR_COST_DYNAMO,
}

impl CostKind {
    /// How many kinds the loaded library has (`lr_cost_kind_count`).
    pub fn count() -> u32 {
        // SAFETY: no arguments, never fails.
        unsafe { sys::lr_cost_kind_count() }
    }
}

/// A cost model parameter (`lr_cost_param`); each kind has a subset.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CostParam(u32);

named_consts! { CostParam, consts,
    /// Weight of the RTT (TTFT: seconds per second; GORGO: tokens per ms).
    W_RTT = sys::LR_COST_W_RTT,
    /// GORGO: weight of the queued tokens.
    W_QUEUE = sys::LR_COST_W_QUEUE,
    /// TTFT: weight of the decode-stall seconds.
    W_STALL = sys::LR_COST_W_STALL,
    /// DYNAMO: weight of the uncached prefill blocks.
    W_UNCACHED = sys::LR_COST_W_UNCACHED,
    /// DYNAMO: tokens per block.
    BLOCK_TOKENS = sys::LR_COST_BLOCK_TOKENS,
    /// GORGO: 1 counts only queued requests' prompt tokens.
    QUEUE_AT_FIRST_TOKEN = sys::LR_COST_QUEUE_AT_FIRST_TOKEN,
    /// GORGO tuner: initial step size in log space.
    SIGMA = sys::LR_COST_SIGMA,
    /// GORGO tuner: cap on W_RTT.
    W_RTT_MAX = sys::LR_COST_W_RTT_MAX,
    /// GORGO tuner: floor on W_QUEUE.
    W_QUEUE_MIN = sys::LR_COST_W_QUEUE_MIN,
}

impl CostParam {
    /// How many parameter keys the loaded library has
    /// (`lr_cost_param_count`); a kind has a subset.
    pub fn count() -> u32 {
        // SAFETY: no arguments, never fails.
        unsafe { sys::lr_cost_param_count() }
    }

    /// The parameter's range and default for a kind
    /// (`lr_cost_param_bounds`); [`crate::ErrorKind::NotSupported`] when
    /// the kind has no such key.
    pub fn bounds(self, kind: CostKind) -> Result<Bounds> {
        // SAFETY: pure function of the two values.
        let b = unsafe { sys::lr_cost_param_bounds(kind.c(), self.c()) };
        Bounds::from_c(b, "lr_cost_param_bounds")
    }
}

/// The GORGO tuner's rolling window and hop, in samples.
pub const COST_TUNE_WINDOW: u32 = sys::LR_COST_TUNE_WINDOW;
/// See [`COST_TUNE_WINDOW`].
pub const COST_TUNE_HOP: u32 = sys::LR_COST_TUNE_HOP;

/// Options fixed when a cost model is created. `default()` is the
/// library's `lr_cost_options_init`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CostOptions {
    /// The model's kind.
    pub kind: CostKind,
    /// Seeds the tuner's steps.
    pub seed: u64,
}

impl Default for CostOptions {
    fn default() -> Self {
        let o = init(sys::lr_cost_options_init_sized);
        CostOptions {
            kind: CostKind(o.kind as u32),
            seed: o.seed,
        }
    }
}

impl CostOptions {
    /// The defaults with a kind.
    pub fn new(kind: CostKind) -> Self {
        CostOptions {
            kind,
            ..CostOptions::default()
        }
    }
}

/// The tuner's state ([`CostTunerStats::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TunerState {
    /// Not tuning.
    Off,
    /// Measuring the incumbent.
    Measuring,
    /// A trial in service.
    Trial,
    /// The step size fell under 0.02.
    Converged,
    /// A state this crate does not know.
    Unknown(i32),
}

impl TunerState {
    fn from_c(v: i32) -> TunerState {
        match v {
            0 => TunerState::Off,
            1 => TunerState::Measuring,
            2 => TunerState::Trial,
            3 => TunerState::Converged,
            other => TunerState::Unknown(other),
        }
    }
}

/// The tuner's progress (`lr_cost_tuner_stats`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CostTunerStats {
    /// Where the tuner is.
    pub state: TunerState,
    /// Trials judged.
    pub trials: u64,
    /// Trials accepted.
    pub accepted: u64,
    /// Current step size.
    pub sigma: f64,
    /// The incumbent's window p95, seconds; NaN before the first judgement.
    pub incumbent_p95_s: f64,
    /// Samples observed while tuning.
    pub samples: u64,
}

/// A cost model (`lr_cost`) a host can evaluate, tune and inspect on its
/// own: the formulas the policies rank candidates by.
///
/// `Send`, not `Sync`: one thread at a time per handle (`lr_cost.h`);
/// methods that change the model take `&mut self`. Dropping it destroys
/// it.
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::Cost>();
/// ```
pub struct Cost {
    raw: NonNull<sys::lr_cost>,
}

// SAFETY: lr_cost.h: "one thread at a time per handle"; no thread-affine
// state, so it may move between threads. Not Sync: the const calls must not
// overlap the others either (only lr_cost_eval is documented reentrant).
unsafe impl Send for Cost {}

impl fmt::Debug for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cost")
            .field("raw", &self.raw)
            .field("kind", &self.kind())
            .finish()
    }
}

impl Drop for Cost {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once, no call in progress (&mut self).
        unsafe { sys::lr_cost_destroy(self.raw.as_ptr()) }
    }
}

impl Cost {
    /// Creates a model with its kind's default parameters, not tuning.
    pub fn new(opt: &CostOptions) -> Result<Cost> {
        let mut o = init(sys::lr_cost_options_init_sized);
        o.kind = opt.kind.c();
        o.seed = opt.seed;
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options and an out pointer.
        check(
            unsafe { sys::lr_cost_create(&o, &mut raw) },
            "lr_cost_create",
        )?;
        let raw = NonNull::new(raw).expect("lr_cost_create returned LR_OK and NULL");
        Ok(Cost { raw })
    }

    fn ptr(&self) -> *mut sys::lr_cost {
        self.raw.as_ptr()
    }

    /// The model's kind.
    pub fn kind(&self) -> CostKind {
        // SAFETY: live handle (here and in every method below).
        CostKind(unsafe { sys::lr_cost_kind_of(self.ptr()) } as u32)
    }

    /// Sets a parameter: [`crate::ErrorKind::NotSupported`] for a key the
    /// kind does not have, [`crate::ErrorKind::Range`] out of bounds,
    /// [`crate::ErrorKind::Invalid`] for NaN or a fraction for an integer
    /// key. Setting the GORGO weights while tuning ends the trial.
    pub fn set_param(&mut self, key: CostParam, value: f64) -> Result<()> {
        // SAFETY: plain values; exclusive access (&mut self).
        check(
            unsafe { sys::lr_cost_set_param(self.ptr(), key.c(), value) },
            "lr_cost_set_param",
        )
    }

    /// Reads a parameter; for the tuned weights, the incumbent.
    pub fn param(&self, key: CostParam) -> Result<f64> {
        let mut v = 0.0;
        // SAFETY: out pointer.
        check(
            unsafe { sys::lr_cost_get_param(self.ptr(), key.c(), &mut v) },
            "lr_cost_get_param",
        )?;
        Ok(v)
    }

    /// Every parameter this model's kind has, with its value.
    pub fn params(&self) -> Result<Vec<(CostParam, f64)>> {
        let kind = self.kind();
        (0..CostParam::count())
            .map(CostParam)
            .filter(|k| k.bounds(kind).is_ok())
            .map(|k| Ok((k, self.param(k)?)))
            .collect()
    }

    /// Each row's cost (lower is better) for a prompt of `prompt_tokens`,
    /// with the weights in service. A row with more cached tokens than the
    /// prompt, or (TTFT) a prefill rate that is not positive, is
    /// [`crate::ErrorKind::Invalid`].
    pub fn eval(&self, prompt_tokens: u32, rows: &[Candidate]) -> Result<Vec<f64>> {
        let mut out = vec![0.0; rows.len()];
        self.eval_into(prompt_tokens, rows, &mut out)?;
        Ok(out)
    }

    /// [`Cost::eval`] into `out[..rows.len()]` (`out` must be that long:
    /// [`crate::ErrorKind::Invalid`] otherwise).
    pub fn eval_into(&self, prompt_tokens: u32, rows: &[Candidate], out: &mut [f64]) -> Result<()> {
        const OP: &str = "lr_cost_eval";
        if out.len() < rows.len() {
            return Err(crate::Error::new(sys::LR_EINVAL, OP));
        }
        if rows.is_empty() {
            return Ok(());
        }
        // SAFETY: rows.len() rows of lr_candidate's layout and room for as
        // many costs.
        check(
            unsafe {
                sys::lr_cost_eval(
                    self.ptr(),
                    prompt_tokens,
                    rows.as_ptr().cast::<sys::lr_candidate>(),
                    rows.len(),
                    size_of::<Candidate>(),
                    out.as_mut_ptr(),
                )
            },
            OP,
        )
    }

    /// Starts (`true`) or stops (`false`) GORGO's tuner;
    /// [`crate::ErrorKind::NotSupported`] for the other kinds.
    pub fn tune(&mut self, on: bool) -> Result<()> {
        // SAFETY: plain values; exclusive access (&mut self).
        check(
            unsafe { sys::lr_cost_tune(self.ptr(), on as i32) },
            "lr_cost_tune",
        )
    }

    /// Feeds one observed time to first token to the tuner (ignored while
    /// not tuning).
    pub fn observe(&mut self, ttft: Duration) -> Result<()> {
        // SAFETY: plain values; exclusive access (&mut self).
        check(
            unsafe { sys::lr_cost_observe(self.ptr(), ttft.as_secs_f64()) },
            "lr_cost_observe",
        )
    }

    /// The tuner's progress.
    pub fn tuner_stats(&self) -> Result<CostTunerStats> {
        let mut s = init(sys::lr_cost_tuner_stats_init_sized);
        // SAFETY: initialized out struct.
        // SAFETY: plain values; exclusive access (&mut self).
        check(
            unsafe { sys::lr_cost_tuner_get_stats(self.ptr(), &mut s) },
            "lr_cost_tuner_get_stats",
        )?;
        Ok(CostTunerStats {
            state: TunerState::from_c(s.state),
            trials: s.trials,
            accepted: s.accepted,
            sigma: s.sigma,
            incumbent_p95_s: s.incumbent_p95_s,
            samples: s.samples,
        })
    }
}
