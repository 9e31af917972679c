//! vLLM KV-event batches (`lr_vllm.h`).

use crate::error::Error;
use crate::{init, ptr_or_null, sys, Index, InstanceId, Router};
use std::fmt;

/// What a vLLM KV-event batch held and what was done with it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct VllmBatchInfo {
    /// The batch's timestamp (engine clock, seconds); the C API reports a
    /// missing one as 0, read here as None.
    pub timestamp: Option<f64>,
    /// Its data-parallel rank, if present.
    pub dp_rank: Option<i64>,
    /// Events in the batch.
    pub events: u32,
    /// BlockStored events applied.
    pub stored: u32,
    /// BlockRemoved events applied.
    pub removed: u32,
    /// AllBlocksCleared events applied.
    pub cleared: u32,
    /// BlockStored events whose parent block is unknown here: left out.
    pub unplaced: u32,
    /// Events this index cannot represent (another medium, a LoRA, extra
    /// keys, other KV groups, unknown types): skipped.
    pub skipped: u32,
    /// Events processed, in order: all on success; after a mid-batch
    /// `Limit` or `NoMem` error, those applied before it.
    pub done: u32,
}

impl VllmBatchInfo {
    fn from_c(i: &sys::lr_vllm_batch_info) -> Self {
        VllmBatchInfo {
            timestamp: (i.timestamp != 0.0).then_some(i.timestamp),
            dp_rank: (i.dp_rank >= 0).then_some(i.dp_rank),
            events: i.events,
            stored: i.stored,
            removed: i.removed,
            cleared: i.cleared,
            unplaced: i.unplaced,
            skipped: i.skipped,
            done: i.done,
        }
    }
}

/// A failed batch, with what was applied before the failure. A `Corrupt`
/// or `NotSupported` batch applied nothing; after `Limit` or `NoMem`,
/// `info.done` events were applied, and applying the whole batch again is
/// safe. Converts into [`Error`] for `?`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VllmBatchError {
    /// The status.
    pub error: Error,
    /// What the library reported.
    pub info: VllmBatchInfo,
}

impl fmt::Display for VllmBatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} of {} events applied)",
            self.error, self.info.done, self.info.events
        )
    }
}

impl std::error::Error for VllmBatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<VllmBatchError> for Error {
    fn from(e: VllmBatchError) -> Error {
        e.error
    }
}

fn outcome(
    st: sys::lr_status,
    info: &sys::lr_vllm_batch_info,
    op: &'static str,
) -> Result<VllmBatchInfo, VllmBatchError> {
    let info = VllmBatchInfo::from_c(info);
    if st == sys::LR_OK {
        Ok(info)
    } else {
        Err(VllmBatchError {
            error: Error::new(st, op),
            info,
        })
    }
}

impl Index {
    /// Applies one vLLM KV-event batch (the msgpack payload of one ZMQ
    /// frame) published by `instance`. The payload is decoded and checked
    /// whole before anything is applied.
    pub fn vllm_batch(
        &mut self,
        instance: InstanceId,
        payload: &[u8],
        now_ns: u64,
    ) -> Result<VllmBatchInfo, VllmBatchError> {
        let mut info = init(sys::lr_vllm_batch_info_init_sized);
        // SAFETY: exclusive access; payload slice; initialized info.
        let st = unsafe {
            sys::lr_index_vllm_batch(
                self.raw_ptr(),
                instance,
                ptr_or_null(payload),
                payload.len(),
                now_ns,
                &mut info,
            )
        };
        outcome(st, &info, "lr_index_vllm_batch")
    }
}

impl Router {
    /// Applies one vLLM KV-event batch from instance `id` to the router's
    /// index (see [`Index::vllm_batch`]). Route with
    /// [`crate::RouteFlags::NO_LEARN`] when the engines' events are the
    /// source of truth.
    pub fn vllm_batch(
        &self,
        id: InstanceId,
        payload: &[u8],
        now_ns: u64,
    ) -> Result<VllmBatchInfo, VllmBatchError> {
        let mut info = init(sys::lr_vllm_batch_info_init_sized);
        // SAFETY: live router; payload slice; initialized info.
        let st = unsafe {
            sys::lr_router_vllm_batch(
                self.raw_ptr(),
                id,
                ptr_or_null(payload),
                payload.len(),
                now_ns,
                &mut info,
            )
        };
        outcome(st, &info, "lr_router_vllm_batch")
    }
}
