//! Library-allocated bytes.

use crate::sys;
use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

/// Bytes the library allocated (an index delta), freed on drop with
/// `lr_blob_destroy`. Dereferences to `[u8]` without copying.
pub struct Blob {
    raw: NonNull<sys::lr_blob>,
}

// SAFETY: lr_blob_data and lr_blob_size are reentrant on a blob that is not
// being destroyed, and destruction needs ownership (docs/threading.md).
unsafe impl Send for Blob {}
unsafe impl Sync for Blob {}

impl Blob {
    /// Takes ownership of a blob the library returned; None for NULL.
    pub(crate) fn from_raw(raw: *mut sys::lr_blob) -> Option<Blob> {
        NonNull::new(raw).map(|raw| Blob { raw })
    }
}

impl Deref for Blob {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the blob is alive for &self; data points to size bytes
        // that do not change until lr_blob_destroy.
        unsafe {
            let n = sys::lr_blob_size(self.raw.as_ptr());
            let p = sys::lr_blob_data(self.raw.as_ptr());
            if n == 0 || p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p, n)
            }
        }
    }
}

impl AsRef<[u8]> for Blob {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes)", self.len())
    }
}

impl Drop for Blob {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::lr_blob_destroy(self.raw.as_ptr()) }
    }
}
