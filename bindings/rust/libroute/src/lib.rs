//! Safe Rust bindings to libroute, the C library that picks, for each LLM
//! inference request, the engine instance (a vLLM or SGLang replica) that
//! should serve it.
//!
//! The wrapper is thin: each method is one call into the C API (the headers
//! under `include/libroute/` remain the reference manual), with `lr_status`
//! turned into [`Error`] and each handle owned by one value whose `Drop`
//! destroys it.
//!
//! | handle | C type | threads |
//! | --- | --- | --- |
//! | [`Router`] | `lr_router` | `Send + Sync`: internally locked; every method takes `&self` |
//! | [`Index`] | `lr_index` | `Send`, not `Sync`: one thread at a time |
//! | [`Ring`] | `lr_ring` | `Send + Sync`: queries (`&self`) may run concurrently, mutators take `&mut self` |
//! | [`Load`] | `lr_load` | `Send`, not `Sync`: one thread at a time |
//! | [`Mlp`] | `lr_mlp` | `Send`, not `Sync`: one thread at a time, queries included |
//! | [`LearnerServer`], [`LearnerTrainer`] | `lr_learner` | each `Send`, not `Sync`: the two sides of one [`Learner`], which may run on two threads at once |
//! | [`Cost`] | `lr_cost` | `Send`, not `Sync`: one thread at a time |
//!
//! [`decide`] runs any policy over a candidate table ([`Candidate`] rows),
//! the one [`Router::candidates`] records; with a route's
//! [`Decision::seed`] it replays the route.
//!
//! Timestamps (`now_ns`, ...) are the host's monotonic clock in
//! nanoseconds, as the C API takes them; durations (RTT, TTL) are
//! [`std::time::Duration`]. Slices passed in are borrowed for the call.
//! Handles use libc's allocator (the C API's `lr_allocator` hook is
//! available through [`sys`]).
//!
//! ```no_run
//! use libroute::{Policy, Request, Router, RouterOptions, InstanceSpec};
//!
//! let mut opt = RouterOptions::default();
//! opt.policy = Policy::PREFIX_CACHE_AND_LOAD;
//! let router = Router::new(&opt)?;
//! let a = router.add_instance(&InstanceSpec::new("10.0.0.5:8000"))?;
//! # let (tokens, now_ns) = (vec![1u32; 300], 1u64);
//! let d = router.route(&Request::new(42, &tokens, now_ns))?;
//! // ... send the request to d.instance ...
//! router.first_token(42, now_ns + 80_000_000)?;
//! router.complete(42, 120, now_ns + 900_000_000)?;
//! # let _ = a;
//! # Ok::<(), libroute::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub use libroute_sys as sys;

/// Newtypes over C enum values: named constants, `ALL`, `raw`/`from_raw`,
/// `Debug`/`Display` by name, and the value as an `int32_t` argument.
macro_rules! named_consts {
    // Names from the library (lr_policy_name, lr_reason_name).
    ($ty:ident, lib $name_fn:path, $( $(#[$m:meta])* $c:ident = $v:expr, )*) => {
        named_consts!(@common $ty, $( $(#[$m])* $c = $v, )*);
        impl $ty {
            /// The library's name for the value, or None outside the enum.
            pub fn name(self) -> Option<&'static str> {
                // SAFETY: returns a static string or NULL for any value
                // (one past i32::MAX wraps to a negative value: NULL).
                unsafe { $crate::static_name($name_fn(self.0 as i32)) }
            }
        }
    };
    // Names from the constants (the C API names no lr_param).
    ($ty:ident, consts, $( $(#[$m:meta])* $c:ident = $v:expr, )*) => {
        named_consts!(@common $ty, $( $(#[$m])* $c = $v, )*);
        impl $ty {
            /// The constant's name, or None for a value this crate does not
            /// know.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( $ty::$c => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }
    };
    (@common $ty:ident, $( $(#[$m:meta])* $c:ident = $v:expr, )*) => {
        impl $ty {
            /// The value as the C API's `int32_t` argument.
            #[allow(dead_code)] // not every type is passed to C
            pub(crate) const fn c(self) -> i32 {
                self.0 as i32
            }
        }

        impl $ty {
            $( $(#[$m])* pub const $c: $ty = $ty($v); )*

            /// Every value this crate names, in order.
            pub const ALL: &'static [$ty] = &[$($ty::$c),*];

            /// The raw C value.
            pub const fn raw(self) -> u32 {
                self.0
            }

            /// A value from its raw C value (which need not be known).
            pub const fn from_raw(v: u32) -> $ty {
                $ty(v)
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({})", stringify!($ty), self.0),
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(self, f)
            }
        }
    };
}

mod blob;
mod cost;
mod error;
mod index;
mod learner;
mod load;
mod mlp;
mod policy;
mod ring;
mod router;
mod text;
mod vllm;

pub use blob::Blob;
pub use cost::{
    Cost, CostKind, CostOptions, CostParam, CostTunerStats, TunerState, COST_TUNE_HOP,
    COST_TUNE_WINDOW,
};
pub use error::{Error, ErrorKind, Result};
pub use index::{
    adapter_salt, block_keys, mm_key_hash, name_hash, Eviction, Hit, Index, IndexOptions,
    IndexStats, KvStored, MatchFlags, MatchResult, MmInput, Prompt, Tier, Trust, MAX_MM_IDENTIFIER,
};
pub use learner::{
    LearnFlags, Learner, LearnerOptions, LearnerSamples, LearnerServer, LearnerStats,
    LearnerTrainer,
};
pub use load::{Dispatch, EngineStats, InFlight, Load, LoadOptions, LoadSnapshot};
pub use mlp::{Mlp, MlpOptions};
pub use policy::{decide, decide_into, lodestar_feature_count, Candidate, PolicyInput, RingKey};
pub use ring::{Candidates, Ring, RingOptions};
pub use router::{
    AdapterStats, Bounds, ClassSpec, Decision, DispatchError, Dispatched, InstanceSpec, Move,
    Param, Policy, Reason, Request, Role, RouteFlags, Router, RouterOptions, RouterStats, Score,
    MAX_ADAPTERS, MAX_MODELS, MAX_NAME, URGENCIES,
};
pub use text::text_tokens;
pub use vllm::{KvSeq, KvSource, VllmBatchError, VllmBatchInfo};

use std::ffi::{c_char, CStr, CString};
use std::mem::MaybeUninit;
use std::time::Duration;

/// An engine instance's id: assigned by the router, or chosen by the host
/// for a standalone [`Index`], [`Ring`] or [`Load`].
pub type InstanceId = u32;

/// Never a valid instance id (`LR_INSTANCE_NONE`).
pub const INSTANCE_NONE: InstanceId = sys::LR_INSTANCE_NONE;

/// Version string of the libroute actually loaded.
pub fn version() -> &'static str {
    // SAFETY: returns a static NUL-terminated string, never NULL.
    unsafe { static_str(sys::lr_version_string()) }
}

/// `LR_VERSION_NUMBER` of the libroute actually loaded (major * 10000 +
/// minor * 100 + patch).
pub fn version_number() -> u32 {
    // SAFETY: no arguments, never fails.
    unsafe { sys::lr_version_number() }
}

/// Reads one of the library's static strings.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that lives for ever.
unsafe fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: per the contract above. The library's names are ASCII.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}

/// Like [`static_str`], but `None` for NULL.
unsafe fn static_name(p: *const c_char) -> Option<&'static str> {
    if p.is_null() {
        None
    } else {
        // SAFETY: forwarded contract.
        Some(unsafe { static_str(p) })
    }
}

/// A size-prefixed struct filled by its `lr_*_init_sized` function with
/// this crate's `size_of::<T>()`: it zeroes that many bytes and sets
/// `struct_size` and the defaults, as the C API requires (in C,
/// `lr_*_init()` is a macro passing `sizeof`).
fn init<T>(f: unsafe extern "C" fn(*mut T, usize)) -> T {
    let mut v = MaybeUninit::<T>::uninit();
    // SAFETY: every lr_*_init_sized zeroes the `size` bytes it is given and
    // then sets fields within them, so the value is initialized afterwards;
    // all-zero is a valid value of each of these plain-data structs. The
    // declarations match the headers (libroute-sys tests/abi.rs).
    unsafe {
        f(v.as_mut_ptr(), std::mem::size_of::<T>());
        v.assume_init()
    }
}

/// A name for the C API: `EINVAL` if it holds a NUL, which C would take as
/// its end.
fn c_name(name: &str, op: &'static str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::new(sys::LR_EINVAL, op))
}

/// Nanoseconds of a duration, saturating at `u64::MAX` (which the TTL
/// options read as "never").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A slice as a C pointer: NULL when empty, which the API accepts together
/// with a zero count.
fn ptr_or_null<T>(s: &[T]) -> *const T {
    if s.is_empty() {
        std::ptr::null()
    } else {
        s.as_ptr()
    }
}
