//! The dual consistent-hash ring (`lr_ring.h`).

use crate::error::{check, Error, Result};
use crate::{c_name, init, sys, InstanceId};
use std::fmt;
use std::ops::Deref;
use std::ptr::{self, NonNull};

/// Options fixed when a [`Ring`] is created; `default()` is the library's
/// `lr_ring_options_init`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingOptions {
    /// Virtual nodes per instance.
    pub vnodes: u32,
    /// Most instances on the ring.
    pub max_instances: u32,
}

impl Default for RingOptions {
    fn default() -> Self {
        let o = init(sys::lr_ring_options_init_sized);
        RingOptions {
            vnodes: o.vnodes,
            max_instances: o.max_instances,
        }
    }
}

/// Up to [`Ring::MAX_K`] distinct candidates, in hash-function order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Candidates {
    ids: [InstanceId; sys::LR_RING_MAX_K as usize],
    n: usize,
}

impl Deref for Candidates {
    type Target = [InstanceId];
    fn deref(&self) -> &[InstanceId] {
        &self.ids[..self.n]
    }
}

impl fmt::Debug for Candidates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A standalone dual consistent-hash ring (`lr_ring`): instances placed by
/// name, so every process that knows the same names computes the same
/// candidates.
///
/// `Send + Sync`: the C API lets the const queries ([`Ring::candidates`],
/// [`Ring::count`], [`Ring::contains`]) run concurrently with each other
/// but not with a mutator, which is exactly what `&self` and `&mut self`
/// enforce.
pub struct Ring {
    raw: NonNull<sys::lr_ring>,
}

// SAFETY: lr_ring.h: mutators one thread at a time (they take &mut self);
// "the const queries may run concurrently with each other" (they take
// &self). No thread-local state.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("raw", &self.raw)
            .field("count", &self.count())
            .finish()
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::lr_ring_destroy(self.raw.as_ptr()) }
    }
}

impl Ring {
    /// Most candidates one query returns.
    pub const MAX_K: u32 = sys::LR_RING_MAX_K;

    /// Creates an empty ring.
    pub fn new(opt: &RingOptions) -> Result<Ring> {
        let mut o = init(sys::lr_ring_options_init_sized);
        o.vnodes = opt.vnodes;
        o.max_instances = opt.max_instances;
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options, out pointer.
        check(
            unsafe { sys::lr_ring_create(&o, &mut raw) },
            "lr_ring_create",
        )?;
        Ok(Ring {
            raw: NonNull::new(raw).expect("lr_ring_create returned LR_OK and NULL"),
        })
    }

    fn ptr(&self) -> *mut sys::lr_ring {
        self.raw.as_ptr()
    }

    /// Places an instance on the ring under a name (1..255 bytes, copied).
    pub fn add(&mut self, name: &str, id: InstanceId) -> Result<()> {
        const OP: &str = "lr_ring_add";
        let name = c_name(name, OP)?;
        // SAFETY: exclusive access; NUL-terminated name.
        check(
            unsafe { sys::lr_ring_add(self.ptr(), name.as_ptr(), id) },
            OP,
        )
    }

    /// Takes an instance off the ring.
    pub fn remove(&mut self, id: InstanceId) -> Result<()> {
        // SAFETY: exclusive access.
        check(
            unsafe { sys::lr_ring_remove(self.ptr(), id) },
            "lr_ring_remove",
        )
    }

    /// Instances on the ring.
    pub fn count(&self) -> u32 {
        // SAFETY: const query.
        unsafe { sys::lr_ring_count(self.ptr()) }
    }

    /// Whether an id is on the ring.
    pub fn contains(&self, id: InstanceId) -> bool {
        // SAFETY: const query.
        unsafe { sys::lr_ring_contains(self.ptr(), id) != 0 }
    }

    /// The `k` (1..=[`Ring::MAX_K`]) distinct candidates for a key, fewer
    /// when fewer instances are on the ring; [`crate::ErrorKind::State`]
    /// when it is empty.
    pub fn candidates(&self, key: u64, k: u32) -> Result<Candidates> {
        const OP: &str = "lr_ring_candidates";
        if k > Self::MAX_K {
            // The C contract wants an out buffer of k entries.
            return Err(Error::new(sys::LR_EINVAL, OP));
        }
        let mut c = Candidates {
            ids: [0; sys::LR_RING_MAX_K as usize],
            n: 0,
        };
        let mut n = 0u32;
        // SAFETY: const query; out has LR_RING_MAX_K >= k entries.
        check(
            unsafe { sys::lr_ring_candidates(self.ptr(), key, k, c.ids.as_mut_ptr(), &mut n) },
            OP,
        )?;
        c.n = (n as usize).min(c.ids.len());
        Ok(c)
    }
}
