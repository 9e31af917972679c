//! The network (`lr_mlp.h`).

use crate::error::{check, Error, Result};
use crate::{init, ptr_or_null, sys, Blob};
use std::fmt;
use std::ptr::{self, NonNull};

/// Options fixed when a network is created. Start from
/// [`MlpOptions::new`] (or `default()` and set `n_inputs`), which is the
/// library's `lr_mlp_options_init`: every field is passed as it is, so a
/// zero `dropout` means no dropout.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MlpOptions {
    /// Seeds the initial weights, dropout and shuffling.
    pub seed: u64,
    /// Features per row, 1..=`LR_MLP_MAX_INPUTS`; no default (0 is
    /// invalid).
    pub n_inputs: u32,
    /// Hidden layers, 1..=`LR_MLP_MAX_LAYERS` (default 3).
    pub hidden_layers: u32,
    /// Units per hidden layer, 1..=`LR_MLP_MAX_WIDTH` (default 128).
    pub width: u32,
    /// Rows per Adam step, 1..=`LR_MLP_MAX_BATCH` (default 256).
    pub batch_size: u32,
    /// Dropout probability in training, [0, 0.9] (default 0.1).
    pub dropout: f64,
    /// Adam step size, (0, 1] (default 1e-3).
    pub learning_rate: f64,
    /// L2 weight decay added to the gradient, [0, 1) (default 1e-5).
    pub weight_decay: f64,
    /// Global gradient-norm clip, >= 0, 0 off (default 1).
    pub grad_clip: f64,
}

impl Default for MlpOptions {
    fn default() -> Self {
        let o = init(sys::lr_mlp_options_init_sized);
        MlpOptions {
            seed: o.seed,
            n_inputs: o.n_inputs,
            hidden_layers: o.hidden_layers,
            width: o.width,
            batch_size: o.batch_size,
            dropout: o.dropout,
            learning_rate: o.learning_rate,
            weight_decay: o.weight_decay,
            grad_clip: o.grad_clip,
        }
    }
}

impl MlpOptions {
    /// The library's defaults for rows of `n_inputs` features.
    pub fn new(n_inputs: u32) -> Self {
        MlpOptions {
            n_inputs,
            ..MlpOptions::default()
        }
    }

    pub(crate) fn to_c(&self) -> sys::lr_mlp_options {
        let mut o = init(sys::lr_mlp_options_init_sized);
        o.seed = self.seed;
        o.n_inputs = self.n_inputs;
        o.hidden_layers = self.hidden_layers;
        o.width = self.width;
        o.batch_size = self.batch_size;
        o.dropout = self.dropout;
        o.learning_rate = self.learning_rate;
        o.weight_decay = self.weight_decay;
        o.grad_clip = self.grad_clip;
        o
    }
}

/// The rows in `x` of `width` values each; `EINVAL` (as `op`) when `x` is
/// not whole rows.
pub(crate) fn rows(x: &[f32], width: usize, op: &'static str) -> Result<usize> {
    if width == 0 || x.len() % width != 0 {
        return Err(Error::new(sys::LR_EINVAL, op));
    }
    Ok(x.len() / width)
}

/// A small fully connected network that predicts one number per row of
/// features (`lr_mlp`), Lodestar's scorer. Rows are `f32`, row-major: a
/// slice of `n` rows holds `n * n_inputs()` values.
///
/// `Send`, not `Sync`: the C network is one thread at a time, queries
/// included (scoring uses scratch memory inside it), so the methods that
/// run the network take `&mut self`. For parallel scoring give each thread
/// its own [`Mlp::try_clone`].
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::Mlp>();
/// ```
pub struct Mlp {
    raw: NonNull<sys::lr_mlp>,
    n_inputs: usize,
}

// SAFETY: lr_mlp.h: "one thread at a time per network"; the handle holds no
// thread-affine state, so it may move between threads. Not Sync: even the
// const calls must not overlap the others.
unsafe impl Send for Mlp {}

impl fmt::Debug for Mlp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlp")
            .field("raw", &self.raw)
            .field("n_inputs", &self.n_inputs)
            .finish()
    }
}

impl Drop for Mlp {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once, no call in progress (&mut self).
        unsafe { sys::lr_mlp_destroy(self.raw.as_ptr()) }
    }
}

impl Mlp {
    /// The handle, for a call that uses the network exclusively (as
    /// `lr_mlp_predict` does): hence `&mut self`.
    pub(crate) fn raw_ptr(&mut self) -> *mut sys::lr_mlp {
        self.raw.as_ptr()
    }

    fn from_raw(raw: *mut sys::lr_mlp, op: &str) -> Mlp {
        let raw = NonNull::new(raw).unwrap_or_else(|| panic!("{op} returned LR_OK and NULL"));
        // SAFETY: a live network.
        let n_inputs = unsafe { sys::lr_mlp_n_inputs(raw.as_ptr()) } as usize;
        Mlp { raw, n_inputs }
    }

    /// Creates a network with fresh weights, identity normalization and no
    /// range limits; call [`Mlp::fit_normalization`] with the training data
    /// first.
    pub fn new(opt: &MlpOptions) -> Result<Mlp> {
        let o = opt.to_c();
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options and an out pointer.
        check(unsafe { sys::lr_mlp_create(&o, &mut raw) }, "lr_mlp_create")?;
        Ok(Mlp::from_raw(raw, "lr_mlp_create"))
    }

    /// Reads a network [`Mlp::save`] wrote. It predicts exactly as the saved
    /// one; training restarts the optimizer. Damaged or truncated bytes are
    /// [`crate::ErrorKind::Corrupt`], a format this library does not read
    /// [`crate::ErrorKind::Version`].
    pub fn load(data: &[u8]) -> Result<Mlp> {
        let mut raw = ptr::null_mut();
        // SAFETY: slice pointer and length; NULL allocator (libc).
        check(
            unsafe { sys::lr_mlp_load(ptr_or_null(data), data.len(), ptr::null(), &mut raw) },
            "lr_mlp_load",
        )?;
        Ok(Mlp::from_raw(raw, "lr_mlp_load"))
    }

    /// An independent copy with the same weights, statistics, ranges,
    /// optimizer and random state: both continue identically.
    pub fn try_clone(&self) -> Result<Mlp> {
        let mut raw = ptr::null_mut();
        // SAFETY: live network (not shared: !Sync), out pointer.
        check(
            unsafe { sys::lr_mlp_clone(self.raw.as_ptr(), &mut raw) },
            "lr_mlp_clone",
        )?;
        Ok(Mlp::from_raw(raw, "lr_mlp_clone"))
    }

    /// Features per row.
    pub fn n_inputs(&self) -> usize {
        self.n_inputs
    }

    /// Serializes the shape, options, normalization, ranges and weights
    /// (not the optimizer state), versioned and checksummed.
    pub fn save(&self) -> Result<Blob> {
        let mut b = ptr::null_mut();
        // SAFETY: live network, out pointer.
        check(
            unsafe { sys::lr_mlp_save(self.raw.as_ptr(), &mut b) },
            "lr_mlp_save",
        )?;
        Ok(Blob::from_raw(b).expect("lr_mlp_save returned LR_OK and no blob"))
    }

    /// Sets the per-feature mean, deviation and range from `x` and, with
    /// `y` (one target per row), the target's mean and deviation. The
    /// weights are kept.
    pub fn fit_normalization(&mut self, x: &[f32], y: Option<&[f32]>) -> Result<()> {
        const OP: &str = "lr_mlp_fit_normalization";
        let n = rows(x, self.n_inputs, OP)?;
        if y.is_some_and(|y| y.len() != n) {
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        let yp = y.map_or(ptr::null(), <[f32]>::as_ptr);
        // SAFETY: n rows in x, n values in y (or NULL).
        check(
            unsafe { sys::lr_mlp_fit_normalization(self.raw.as_ptr(), ptr_or_null(x), n, yp) },
            OP,
        )
    }

    /// One value per row of `x` (no dropout).
    pub fn predict(&mut self, x: &[f32]) -> Result<Vec<f32>> {
        let n = rows(x, self.n_inputs, "lr_mlp_predict")?;
        let mut out = vec![0.0; n];
        self.predict_into(x, &mut out)?;
        Ok(out)
    }

    /// Writes one value per row of `x` to the front of `out`, which must
    /// have room for them; allocates nothing.
    pub fn predict_into(&mut self, x: &[f32], out: &mut [f32]) -> Result<()> {
        const OP: &str = "lr_mlp_predict";
        let n = rows(x, self.n_inputs, OP)?;
        if out.len() < n {
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        if n == 0 {
            // lr_mlp_predict refuses a NULL x even for zero rows.
            return Ok(());
        }
        // SAFETY: n rows in x, room for n values in out.
        check(
            unsafe { sys::lr_mlp_predict(self.raw.as_ptr(), x.as_ptr(), n, out.as_mut_ptr()) },
            OP,
        )
    }

    /// The rows of `x` with a feature outside the range
    /// [`Mlp::fit_normalization`] saw (NaN counts as outside).
    pub fn out_of_range(&self, x: &[f32]) -> Result<usize> {
        const OP: &str = "lr_mlp_out_of_range";
        let n = rows(x, self.n_inputs, OP)?;
        let mut k = 0;
        // SAFETY: n rows in x, out pointer.
        check(
            unsafe { sys::lr_mlp_out_of_range(self.raw.as_ptr(), ptr_or_null(x), n, &mut k) },
            OP,
        )?;
        Ok(k)
    }

    /// Each row of `x` judged alone: `true` where it has a feature outside
    /// the range [`Mlp::fit_normalization`] saw (NaN counts as outside).
    pub fn out_of_range_rows(&self, x: &[f32]) -> Result<Vec<bool>> {
        const OP: &str = "lr_mlp_out_of_range_rows";
        let n = rows(x, self.n_inputs, OP)?;
        let mut flags = vec![0u8; n];
        // SAFETY: n rows in x, room for n flags.
        check(
            unsafe {
                sys::lr_mlp_out_of_range_rows(
                    self.raw.as_ptr(),
                    ptr_or_null(x),
                    n,
                    if n == 0 {
                        ptr::null_mut()
                    } else {
                        flags.as_mut_ptr()
                    },
                    ptr::null_mut(),
                )
            },
            OP,
        )?;
        Ok(flags.into_iter().map(|f| f != 0).collect())
    }

    /// Runs `epochs` shuffled passes of mini-batch Adam with dropout over
    /// the rows of `x` and their targets `y`; returns the mean squared
    /// error over the last epoch's batches (target units squared). On
    /// [`crate::ErrorKind::NoMem`] the network is unchanged.
    pub fn train(&mut self, x: &[f32], y: &[f32], epochs: u32) -> Result<f64> {
        const OP: &str = "lr_mlp_train";
        let n = rows(x, self.n_inputs, OP)?;
        if y.len() != n {
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        let mut loss = 0.0;
        // SAFETY: n rows in x, n targets in y, out pointer.
        check(
            unsafe {
                sys::lr_mlp_train(
                    self.raw.as_ptr(),
                    ptr_or_null(x),
                    ptr_or_null(y),
                    n,
                    epochs,
                    &mut loss,
                )
            },
            OP,
        )?;
        Ok(loss)
    }

    /// The mean squared error of the predictions for `x` against `y`.
    pub fn loss(&mut self, x: &[f32], y: &[f32]) -> Result<f64> {
        const OP: &str = "lr_mlp_loss";
        let n = rows(x, self.n_inputs, OP)?;
        if y.len() != n {
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        let mut mse = 0.0;
        // SAFETY: n rows in x, n targets in y, out pointer.
        check(
            unsafe {
                sys::lr_mlp_loss(
                    self.raw.as_ptr(),
                    ptr_or_null(x),
                    ptr_or_null(y),
                    n,
                    &mut mse,
                )
            },
            OP,
        )?;
        Ok(mse)
    }
}
