//! `lr_status` as a Rust error.

use crate::sys;
use std::fmt;

/// The result of a libroute call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed libroute call: the `lr_status` it returned and the C function
/// that returned it. A call that fails leaves its handle as it was.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Error {
    status: sys::lr_status,
    op: &'static str,
}

/// The kinds of [`Error`], one per `lr_status` value.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `LR_EINVAL`: a bad argument (NULL, NaN, out of domain, absurd size).
    Invalid,
    /// `LR_ENOMEM`: an allocation failed.
    NoMem,
    /// `LR_ERANGE`: a parameter outside its bounds (never clamped).
    Range,
    /// `LR_ENOENT`: an unknown instance, request or engine block.
    NotFound,
    /// `LR_EEXIST`: a duplicate instance id, name or request id.
    Exists,
    /// `LR_ELIMIT`: a capacity set at creation was reached.
    Limit,
    /// `LR_ECORRUPT`: a malformed delta, KV event or batch.
    Corrupt,
    /// `LR_EVERSION`: an unsupported struct size or format version.
    Version,
    /// `LR_ENOTSUP`: an unknown parameter or unsupported combination.
    NotSupported,
    /// `LR_ESTATE`: the call is not valid in the handle's current state.
    State,
    /// `LR_EBUFSIZE`: a caller buffer was too small. The bindings size
    /// their buffers, so this is rare.
    BufSize,
    /// `LR_EGAP`: KV-event batches are missing before this one; replay
    /// from the batch info's `next_seq`.
    Gap,
    /// `LR_EBUSY`: the fleet is saturated and a sheddable request
    /// ([`crate::RouteFlags::SHEDDABLE`]) was refused rather than held;
    /// nothing was recorded.
    Busy,
    /// `LR_EEXPIRED`: a waiting request's deadline passed before it could
    /// be sent (a [`crate::Dispatched`] result).
    Expired,
    /// A status this crate does not know (from a newer library).
    Unknown,
}

impl Error {
    pub(crate) fn new(status: sys::lr_status, op: &'static str) -> Error {
        debug_assert_ne!(status, sys::LR_OK);
        Error { status, op }
    }

    /// The raw `lr_status` value.
    pub fn status(&self) -> u32 {
        self.status
    }

    /// The status as a kind to match on.
    pub fn kind(&self) -> ErrorKind {
        match self.status {
            sys::LR_EINVAL => ErrorKind::Invalid,
            sys::LR_ENOMEM => ErrorKind::NoMem,
            sys::LR_ERANGE => ErrorKind::Range,
            sys::LR_ENOENT => ErrorKind::NotFound,
            sys::LR_EEXIST => ErrorKind::Exists,
            sys::LR_ELIMIT => ErrorKind::Limit,
            sys::LR_ECORRUPT => ErrorKind::Corrupt,
            sys::LR_EVERSION => ErrorKind::Version,
            sys::LR_ENOTSUP => ErrorKind::NotSupported,
            sys::LR_ESTATE => ErrorKind::State,
            sys::LR_EBUFSIZE => ErrorKind::BufSize,
            sys::LR_EGAP => ErrorKind::Gap,
            sys::LR_EBUSY => ErrorKind::Busy,
            sys::LR_EEXPIRED => ErrorKind::Expired,
            _ => ErrorKind::Unknown,
        }
    }

    /// The status's symbol name, for example `"LR_ENOENT"` (`lr_status_name`).
    pub fn name(&self) -> &'static str {
        // SAFETY: returns a static string for any value, never NULL.
        unsafe { crate::static_str(sys::lr_status_name(self.status)) }
    }

    /// The library's English description of the status (`lr_strerror`).
    pub fn message(&self) -> &'static str {
        // SAFETY: as above.
        unsafe { crate::static_str(sys::lr_strerror(self.status)) }
    }

    /// The C function that failed, for example `"lr_router_route"`.
    pub fn op(&self) -> &'static str {
        self.op
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("op", &self.op)
            .field("status", &format_args!("{}", self.name()))
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.op, self.message(), self.name())
    }
}

impl std::error::Error for Error {}

/// Turns a status into a `Result`.
pub(crate) fn check(status: sys::lr_status, op: &'static str) -> Result<()> {
    if status == sys::LR_OK {
        Ok(())
    } else {
        Err(Error::new(status, op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_kind_and_name() {
        let want = [
            (sys::LR_EINVAL, ErrorKind::Invalid, "LR_EINVAL"),
            (sys::LR_ENOMEM, ErrorKind::NoMem, "LR_ENOMEM"),
            (sys::LR_ERANGE, ErrorKind::Range, "LR_ERANGE"),
            (sys::LR_ENOENT, ErrorKind::NotFound, "LR_ENOENT"),
            (sys::LR_EEXIST, ErrorKind::Exists, "LR_EEXIST"),
            (sys::LR_ELIMIT, ErrorKind::Limit, "LR_ELIMIT"),
            (sys::LR_ECORRUPT, ErrorKind::Corrupt, "LR_ECORRUPT"),
            (sys::LR_EVERSION, ErrorKind::Version, "LR_EVERSION"),
            (sys::LR_ENOTSUP, ErrorKind::NotSupported, "LR_ENOTSUP"),
            (sys::LR_ESTATE, ErrorKind::State, "LR_ESTATE"),
            (sys::LR_EBUFSIZE, ErrorKind::BufSize, "LR_EBUFSIZE"),
            (sys::LR_EGAP, ErrorKind::Gap, "LR_EGAP"),
            (sys::LR_EBUSY, ErrorKind::Busy, "LR_EBUSY"),
            (sys::LR_EEXPIRED, ErrorKind::Expired, "LR_EEXPIRED"),
        ];
        for (i, &(status, kind, name)) in want.iter().enumerate() {
            assert_eq!(status, i as u32 + 1);
            let e = Error::new(status, "lr_op");
            assert_eq!((e.kind(), e.name()), (kind, name));
            assert!(!e.message().is_empty() && e.message() != "unknown status");
            assert_eq!(e.to_string(), format!("lr_op: {} ({name})", e.message()));
        }
        // A status the library names and this crate does not know would
        // fail here: the binding must follow appended codes.
        let next = Error::new(want.len() as u32 + 1, "lr_op");
        assert_eq!(
            next.name(),
            "LR_UNKNOWN",
            "the library has a status the binding lacks"
        );
        assert_eq!(next.kind(), ErrorKind::Unknown);
        assert_eq!(
            format!("{next:?}"),
            r#"Error { op: "lr_op", status: LR_UNKNOWN }"#
        );
    }
}
