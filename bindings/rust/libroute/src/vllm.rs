//! vLLM KV-event batches (`lr_vllm.h`).

use crate::error::{check, Error, Result};
use crate::{init, ptr_or_null, sys, Index, InstanceId, Router};
use std::fmt;

/// What a batch's sequence number made of it (`lr_kv_seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KvSeq {
    /// No sequence number was involved.
    #[default]
    None,
    /// The one expected: applied.
    Applied,
    /// The first from this source (since added or reset): applied.
    First,
    /// Applied before (a replay): ignored.
    Duplicate,
    /// Batches are missing before it: not applied.
    Gap,
    /// The engine restarted: its routes were dropped, then the batch
    /// applied.
    Restart,
    /// A value this crate does not know (from a newer library).
    Unknown(i32),
}

impl KvSeq {
    fn from_c(v: i32) -> KvSeq {
        match v as u32 {
            sys::LR_KV_SEQ_NONE => KvSeq::None,
            sys::LR_KV_SEQ_APPLIED => KvSeq::Applied,
            sys::LR_KV_SEQ_FIRST => KvSeq::First,
            sys::LR_KV_SEQ_DUPLICATE => KvSeq::Duplicate,
            sys::LR_KV_SEQ_GAP => KvSeq::Gap,
            sys::LR_KV_SEQ_RESTART => KvSeq::Restart,
            _ => KvSeq::Unknown(v),
        }
    }
}

/// One instance's KV-event stream as the router applied it
/// (`lr_kv_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KvSource {
    /// A batch was applied since the instance was added or reset.
    pub has_seq: bool,
    /// Batches from `next_seq` on are missing; later ones are refused
    /// until a replay from `next_seq` arrives.
    pub gap: bool,
    /// The sequence number expected next (replay from here).
    pub next_seq: u64,
    /// Batches applied since the instance was added.
    pub batches: u64,
    /// Batches ignored as applied before.
    pub duplicates: u64,
    /// Gaps found.
    pub gaps: u64,
    /// Restarts, found or reset.
    pub restarts: u64,
}

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
    /// Events of a type the index applies left out because their fields
    /// do not add up.
    pub invalid: u32,
    /// [`Router::vllm_batch_seq`] only: what the sequence number made of
    /// the batch.
    pub seq_state: KvSeq,
    /// [`Router::vllm_batch_seq`] only: the number expected next (on a
    /// `Gap` error: replay from here).
    pub next_seq: u64,
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
            invalid: i.invalid,
            seq_state: KvSeq::from_c(i.seq_state),
            next_seq: i.next_seq,
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

    /// Applies batch number `seq` of instance `id`'s engine (the ZMQ
    /// message's sequence frame) in order and once: a replayed batch is
    /// ignored ([`KvSeq::Duplicate`]); a batch past the expected one is a
    /// `Gap` error (nothing applied; replay from `info.next_seq`); an
    /// engine restart (the number back, the engine time forward) drops its
    /// routes first.
    pub fn vllm_batch_seq(
        &self,
        id: InstanceId,
        seq: u64,
        payload: &[u8],
        now_ns: u64,
    ) -> Result<VllmBatchInfo, VllmBatchError> {
        let mut info = init(sys::lr_vllm_batch_info_init_sized);
        // SAFETY: live router; payload slice; initialized info.
        let st = unsafe {
            sys::lr_router_vllm_batch_seq(
                self.raw_ptr(),
                id,
                seq,
                ptr_or_null(payload),
                payload.len(),
                now_ns,
                &mut info,
            )
        };
        outcome(st, &info, "lr_router_vllm_batch_seq")
    }

    /// Instance `id`'s KV-event stream: whether a gap is open and the
    /// sequence number to replay from.
    pub fn kv_source(&self, id: InstanceId) -> Result<KvSource> {
        let mut s = init(sys::lr_kv_source_init_sized);
        // SAFETY: live router; initialized out struct.
        check(
            unsafe { sys::lr_router_kv_source(self.raw_ptr(), id, &mut s) },
            "lr_router_kv_source",
        )?;
        Ok(KvSource {
            has_seq: s.has_seq != 0,
            gap: s.gap != 0,
            next_seq: s.next_seq,
            batches: s.batches,
            duplicates: s.duplicates,
            gaps: s.gaps,
            restarts: s.restarts,
        })
    }

    /// Instance `id`'s engine restarted, or its events cannot be replayed:
    /// its routes are dropped and its next batch starts it anew.
    pub fn kv_reset(&self, id: InstanceId) -> Result<()> {
        // SAFETY: live router.
        check(
            unsafe { sys::lr_router_kv_reset(self.raw_ptr(), id) },
            "lr_router_kv_reset",
        )
    }
}
