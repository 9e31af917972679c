//! The prefix index (`lr_index.h`).

use crate::error::{check, Error, Result};
use crate::{init, nanos, ptr_or_null, sys, Blob, InstanceId};
use std::fmt;
use std::mem::{align_of, offset_of, size_of};
use std::ops::{BitOr, BitOrAssign};
use std::ptr::{self, NonNull};
use std::time::Duration;

/// The 64-bit hash the library keys a name by (a model, a LoRA adapter, a
/// cache salt; `lr_name_hash`): 0 for `""`, never 0 otherwise.
/// [`crate::Router::adapters`] reports adapters by it, and
/// `name_hash(cache_salt)` is the `tenant_salt` of a vLLM request with that
/// cache salt.
pub fn name_hash(name: &str) -> u64 {
    // SAFETY: len bytes of a live string (no NUL needed: the length is
    // passed); never fails.
    unsafe { sys::lr_name_hash(name.as_ptr().cast(), name.len()) }
}

/// The salt a prompt's blocks are keyed with under the LoRA adapter whose
/// [`name_hash`] is `adapter_hash` (`lr_adapter_salt`): `tenant_salt`
/// itself for 0, the base model. [`block_keys`] with it gives the keys a
/// router gives a request for that adapter.
pub fn adapter_salt(tenant_salt: u64, adapter_hash: u64) -> u64 {
    // SAFETY: plain values; never fails.
    unsafe { sys::lr_adapter_salt(tenant_salt, adapter_hash) }
}

/// The key a multimodal input adds to one block (`lr_mm_key_hash`), as
/// vLLM lists it in the block's extra keys: `offset` is the input's first
/// placeholder token minus the block's first token (negative when the
/// input began in an earlier block). A block's multimodal hash, what
/// [`KvStored::mm_hashes`] holds per block, is the XOR of its keys' hashes
/// (0 with none).
pub fn mm_key_hash(identifier: &str, offset: i64) -> u64 {
    // SAFETY: len bytes of a live string (no NUL needed: the length is
    // passed); never fails.
    unsafe { sys::lr_mm_key_hash(identifier.as_ptr().cast(), identifier.len(), offset) }
}

/// Bytes in an [`MmInput::identifier`] (`LR_INDEX_MAX_MM_IDENTIFIER`).
pub const MAX_MM_IDENTIFIER: u32 = sys::LR_INDEX_MAX_MM_IDENTIFIER;

/// One multimodal input of a prompt (`lr_mm_input`): an image, an audio
/// clip. Its placeholder tokens are `offset..offset + length` of the
/// prompt; `identifier` (1..=[`MAX_MM_IDENTIFIER`] bytes, no NUL) is the
/// engine's name for its data: vLLM's `mm_feature.identifier`, the hash
/// of the data, or the uuid the client gave it. Each full block the
/// placeholder overlaps gets [`mm_key_hash`]`(identifier, offset - the
/// block's first token)`, so the same placeholder tokens with another
/// input, or the input at another place, never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MmInput<'a> {
    /// The engine's name for the input's data.
    pub identifier: &'a str,
    /// Its first placeholder token.
    pub offset: u32,
    /// Its placeholder tokens, at least 1.
    pub length: u32,
}

impl<'a> MmInput<'a> {
    /// An input whose placeholder tokens are `offset..offset + length`.
    pub fn new(identifier: &'a str, offset: u32, length: u32) -> Self {
        MmInput {
            identifier,
            offset,
            length,
        }
    }
}

/// Multimodal inputs as the C API takes them (`lr_mm_input` with
/// NUL-terminated identifiers), for one call. Each identifier is cut at
/// one byte more than the library takes, so one too long is still the
/// library's `LR_EINVAL`. Nothing is allocated for no inputs.
#[derive(Default)]
pub(crate) struct MmBuf {
    inputs: Vec<sys::lr_mm_input>,
    bytes: Vec<u8>,
}

impl MmBuf {
    pub(crate) fn new() -> MmBuf {
        MmBuf::default()
    }

    /// The inputs in this buffer, as (pointer, count) (NULL for none),
    /// valid while it lives unchanged; a NUL inside an identifier is
    /// `LR_EINVAL`.
    pub(crate) fn c(
        &mut self,
        mm: &[MmInput<'_>],
        op: &'static str,
    ) -> Result<(*const sys::lr_mm_input, usize)> {
        if mm.is_empty() {
            return Ok((ptr::null(), 0));
        }
        let cut = |id: &str| id.len().min(MAX_MM_IDENTIFIER as usize + 1);
        self.bytes.clear();
        for m in mm {
            if m.identifier.as_bytes().contains(&0) {
                return Err(Error::new(sys::LR_EINVAL, op));
            }
            self.bytes
                .extend_from_slice(&m.identifier.as_bytes()[..cut(m.identifier)]);
            self.bytes.push(0);
        }
        // The bytes no longer move: point into them.
        let mut at = self.bytes.as_ptr();
        self.inputs.clear();
        for m in mm {
            self.inputs.push(sys::lr_mm_input {
                identifier: at.cast(),
                offset: m.offset,
                length: m.length,
            });
            // SAFETY: the identifier and its NUL are within bytes; the
            // last step lands one past its end.
            at = unsafe { at.add(cut(m.identifier) + 1) };
        }
        Ok((self.inputs.as_ptr(), self.inputs.len()))
    }
}

/// The chained block keys of a token sequence: key `d` names the prefix
/// made of blocks `0..=d`. Only complete blocks get a key. The keys are the
/// same in every process and release (`lr_index.h` gives the formula).
pub fn block_keys(block_tokens: u32, tokens: &[u32], tenant_salt: u64) -> Result<Vec<u64>> {
    const OP: &str = "lr_block_keys";
    let mut n = 0usize;
    // SAFETY: NULL keys asks the size only.
    let st = unsafe {
        sys::lr_block_keys(
            block_tokens,
            ptr_or_null(tokens),
            tokens.len(),
            tenant_salt,
            ptr::null_mut(),
            0,
            &mut n,
        )
    };
    if st != sys::LR_OK && st != sys::LR_EBUFSIZE {
        check(st, OP)?;
    }
    let mut keys = Vec::<u64>::with_capacity(n);
    // SAFETY: the buffer has n slots.
    check(
        unsafe {
            sys::lr_block_keys(
                block_tokens,
                ptr_or_null(tokens),
                tokens.len(),
                tenant_salt,
                keys.as_mut_ptr(),
                n,
                &mut n,
            )
        },
        OP,
    )?;
    assert!(n <= keys.capacity());
    // SAFETY: the library wrote n keys.
    unsafe { keys.set_len(n) };
    Ok(keys)
}

/// Where a route came from. Under memory pressure REMOTE routes go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trust {
    /// What this gateway routed itself.
    Local,
    /// What a peer replica reported.
    Remote,
}

impl Trust {
    fn raw(self) -> i32 {
        (match self {
            Trust::Local => sys::LR_TRUST_LOCAL,
            Trust::Remote => sys::LR_TRUST_REMOTE,
        }) as i32
    }
}

/// Options fixed when an [`Index`] is created; `default()` is the library's
/// `lr_index_options_init`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexOptions {
    /// Seed of the in-process hash tables (block keys do not depend on it).
    pub seed: u64,
    /// Most block routes held at once.
    pub capacity_blocks: u64,
    /// Routes unused this long expire; `Duration::MAX`: never.
    pub ttl: Duration,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Distinct instance ids tracked.
    pub max_instances: u32,
    /// Local learns remembered for [`Index::export_delta`]; `u32::MAX`
    /// disables the journal.
    pub journal_capacity: u32,
    /// Engine-hash entries kept for KV events, over all instances; 0 (the
    /// default): twice `capacity_blocks`.
    pub engine_map_capacity: u64,
    /// This replica's id, stamped on exported deltas (0: none); a delta
    /// carrying it is the index's own echo and changes nothing.
    pub replica_id: u64,
    /// REMOTE routes unused this long expire; zero: `ttl`.
    pub remote_ttl: Duration,
    /// What a full index drops first.
    pub eviction: Eviction,
    /// How far ahead of the newest time the index has taken a call's time
    /// may be; a call further ahead is `Error::Range` and changes nothing
    /// (a clock that really moved is taken at the next call that agrees).
    /// `Duration::MAX`: only the `LR_MAX_TIME_NS` bound.
    pub clock_skew: Duration,
}

/// What a full index drops first (`lr_eviction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Eviction {
    /// REMOTE routes before any LOCAL one (the default).
    #[default]
    RemoteFirst,
    /// The least recently used route, REMOTE or LOCAL (replicas sharing
    /// deltas).
    Lru,
}

impl Eviction {
    pub(crate) fn c(self) -> i32 {
        match self {
            Eviction::RemoteFirst => sys::LR_EVICT_REMOTE_FIRST as i32,
            Eviction::Lru => sys::LR_EVICT_LRU as i32,
        }
    }

    pub(crate) fn from_c(v: i32) -> Eviction {
        if v == sys::LR_EVICT_LRU as i32 {
            Eviction::Lru
        } else {
            Eviction::RemoteFirst
        }
    }
}

/// The memory tier of an engine's KV cache a block is on (`lr_tier`, vLLM's
/// `medium`): the GPU's own, or a lower tier an offloading connector copied
/// it to. A hit on a lower tier costs the engine a transfer, not a
/// recompute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tier {
    /// The GPU's own cache (the default).
    #[default]
    Gpu,
    /// Host memory (vLLM's OffloadingConnector, LMCache: `"CPU"`).
    Cpu,
    /// A disk tier (`"DISK"`).
    Disk,
}

impl Tier {
    /// The value as the C API's `int32_t`.
    pub(crate) fn c(self) -> i32 {
        match self {
            Tier::Gpu => sys::LR_TIER_GPU as i32,
            Tier::Cpu => sys::LR_TIER_CPU as i32,
            Tier::Disk => sys::LR_TIER_DISK as i32,
        }
    }

    /// The [`MatchFlags`] that ask [`Index::match_prompt`] for this tier
    /// ([`MatchFlags::NONE`] for the GPU).
    pub fn match_flag(self) -> MatchFlags {
        match self {
            Tier::Gpu => MatchFlags::NONE,
            Tier::Cpu => MatchFlags::TIER_CPU,
            Tier::Disk => MatchFlags::TIER_DISK,
        }
    }
}

impl Default for IndexOptions {
    fn default() -> Self {
        let o = init(sys::lr_index_options_init_sized);
        IndexOptions {
            seed: o.seed,
            capacity_blocks: o.capacity_blocks,
            ttl: Duration::from_nanos(o.ttl_ns),
            block_tokens: o.block_tokens,
            max_instances: o.max_instances,
            journal_capacity: o.journal_capacity,
            engine_map_capacity: o.engine_map_capacity,
            replica_id: o.replica_id,
            remote_ttl: Duration::from_nanos(o.remote_ttl_ns),
            eviction: Eviction::from_c(o.eviction),
            clock_skew: Duration::from_nanos(o.clock_skew_ns),
        }
    }
}

/// A prompt as the index sees it; its slices are borrowed for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prompt<'a> {
    /// Token ids; their count is the prompt's length.
    pub tokens: &'a [u32],
    /// Message ends as token offsets, ascending; used by [`Index::learn`].
    pub boundaries: &'a [u32],
    /// Enters every key: prefixes of different tenants never match.
    pub tenant_salt: u64,
    /// Keys from [`block_keys`] (same block size and salt), so that a
    /// prompt matched then learned is hashed once. When set, the token
    /// values are not read, and there must be one key per complete block.
    pub keys: Option<&'a [u64]>,
    /// Its multimodal inputs, by ascending offset, none overlapping
    /// another, each inside the prompt (else
    /// [`crate::ErrorKind::Invalid`]): their keys enter the blocks they
    /// overlap, as vLLM's do. Not with `keys` (`Invalid`).
    pub mm: &'a [MmInput<'a>],
}

impl<'a> Prompt<'a> {
    /// A prompt of these tokens, with no boundaries, salt or keys.
    pub fn new(tokens: &'a [u32]) -> Self {
        Prompt {
            tokens,
            boundaries: &[],
            tenant_salt: 0,
            keys: None,
            mm: &[],
        }
    }

    /// The C prompt, its multimodal inputs in `mm` (which must outlive its
    /// use).
    fn to_c(self, mm: &mut MmBuf, op: &'static str) -> Result<sys::lr_prompt> {
        let mut p = init(sys::lr_prompt_init_sized);
        p.tokens = ptr_or_null(self.tokens);
        p.n_tokens = self.tokens.len();
        p.boundaries = ptr_or_null(self.boundaries);
        p.n_boundaries = self.boundaries.len();
        p.tenant_salt = self.tenant_salt;
        if let Some(k) = self.keys {
            p.keys = ptr_or_null(k);
            p.n_keys = k.len();
        }
        (p.mm, p.n_mm) = mm.c(self.mm, op)?;
        Ok(p)
    }
}

/// One instance's cached prefix of a prompt.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hit {
    /// The instance.
    pub instance: InstanceId,
    /// Leading tokens cached there, a multiple of the block size.
    pub tokens: u32,
}

// Hit is handed to C as an lr_index_hit array.
const _: () = {
    assert!(size_of::<Hit>() == size_of::<sys::lr_index_hit>());
    assert!(align_of::<Hit>() == align_of::<sys::lr_index_hit>());
    assert!(offset_of!(Hit, instance) == offset_of!(sys::lr_index_hit, instance));
    assert!(offset_of!(Hit, tokens) == offset_of!(sys::lr_index_hit, tokens));
};

/// Flags of [`Index::match_prompt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MatchFlags(u32);

impl MatchFlags {
    /// No flags: matched routes are refreshed.
    pub const NONE: MatchFlags = MatchFlags(0);
    /// Leave the matched routes' recency alone (a dry run).
    pub const NO_TOUCH: MatchFlags = MatchFlags(sys::LR_MATCH_NO_TOUCH);
    /// Answer for the blocks the instances hold on their CPU tier
    /// ([`KvStored::tier`]) instead of the GPU's; no hit before the tier's
    /// first event. At most one tier flag.
    pub const TIER_CPU: MatchFlags = MatchFlags(sys::LR_MATCH_TIER_CPU);
    /// As [`MatchFlags::TIER_CPU`], for the disk tier.
    pub const TIER_DISK: MatchFlags = MatchFlags(sys::LR_MATCH_TIER_DISK);

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: MatchFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for MatchFlags {
    type Output = MatchFlags;
    fn bitor(self, rhs: MatchFlags) -> MatchFlags {
        MatchFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for MatchFlags {
    fn bitor_assign(&mut self, rhs: MatchFlags) {
        self.0 |= rhs.0;
    }
}

/// The outcome of a match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MatchResult {
    /// Instances with a non-empty match, deepest first, then by id.
    pub hits: Vec<Hit>,
    /// The deepest match over all instances, in tokens.
    pub deepest_tokens: u64,
    /// Complete blocks in the prompt.
    pub prompt_blocks: u64,
}

/// An engine's BlockStored event (vLLM's schema); borrowed for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KvStored<'a> {
    /// Engine hashes of the stored blocks.
    pub block_hashes: &'a [u64],
    /// Engine hash of the block before the first, if any.
    pub parent_hash: Option<u64>,
    /// Engine tokens per block: a multiple of the index's block size.
    pub block_size: u32,
    /// `block_hashes.len() * block_size` token ids.
    pub token_ids: &'a [u32],
    /// As [`Prompt::tenant_salt`] (a LoRA, say).
    pub tenant_salt: u64,
    /// The tier the engine stored the blocks on ([`Tier::Gpu`] by
    /// default). A lower tier's store goes to that tier's routes: with no
    /// `token_ids` (`block_size` 0, as vLLM's offloading connector sends)
    /// each hash names a block the instance stored on the GPU before,
    /// whose chain the tier takes ([`crate::ErrorKind::NotFound`] when none
    /// is known); with token ids it is keyed as on the GPU.
    pub tier: Tier,
    /// `None`, or one per block hash: block `j`'s multimodal hash, the XOR
    /// of [`mm_key_hash`] over the (identifier, offset) pairs vLLM's
    /// `extra_keys` list for it (0: none). Another length is
    /// [`crate::ErrorKind::Invalid`]. A nonzero one needs `block_size`
    /// equal to the index's block size ([`crate::ErrorKind::NotSupported`]
    /// else).
    pub mm_hashes: Option<&'a [u64]>,
}

impl<'a> KvStored<'a> {
    /// An event with no parent and no salt.
    pub fn new(block_hashes: &'a [u64], block_size: u32, token_ids: &'a [u32]) -> Self {
        KvStored {
            block_hashes,
            parent_hash: None,
            block_size,
            token_ids,
            tenant_salt: 0,
            tier: Tier::Gpu,
            mm_hashes: None,
        }
    }

    pub(crate) fn to_c(self, op: &'static str) -> Result<sys::lr_kv_stored> {
        let mut e = init(sys::lr_kv_stored_init_sized);
        e.block_hashes = ptr_or_null(self.block_hashes);
        e.n_blocks = self.block_hashes.len();
        e.parent_hash = self.parent_hash.unwrap_or(0);
        e.has_parent = self.parent_hash.is_some() as i32;
        e.block_size = self.block_size;
        e.token_ids = ptr_or_null(self.token_ids);
        e.n_tokens = self.token_ids.len();
        e.tenant_salt = self.tenant_salt;
        e.tier = self.tier.c();
        if let Some(h) = self.mm_hashes {
            // The library reads one per block: no other count.
            if h.len() != self.block_hashes.len() {
                return Err(Error::new(sys::LR_EINVAL, op));
            }
            e.mm_hashes = ptr_or_null(h);
        }
        Ok(e)
    }
}

/// An index's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexStats {
    /// Block routes held now.
    pub blocks: u64,
    /// Of which REMOTE.
    pub remote_blocks: u64,
    /// Distinct prefix keys held by anyone.
    pub prefixes: u64,
    /// Instance ids tracked.
    pub instances: u64,
    /// Live engine hashes.
    pub engine_hashes: u64,
    /// Bytes the index has allocated.
    pub bytes: u64,
    /// Cumulative: routes dropped for capacity.
    pub evicted_blocks: u64,
    /// Cumulative: routes dropped by TTL.
    pub expired_blocks: u64,
    /// Cumulative: routes added.
    pub learned_blocks: u64,
}

impl IndexStats {
    pub(crate) fn from_c(s: &sys::lr_index_stats) -> Self {
        IndexStats {
            blocks: s.blocks,
            remote_blocks: s.remote_blocks,
            prefixes: s.prefixes,
            instances: s.instances,
            engine_hashes: s.engine_hashes,
            bytes: s.bytes,
            evicted_blocks: s.evicted_blocks,
            expired_blocks: s.expired_blocks,
            learned_blocks: s.learned_blocks,
        }
    }
}

/// A standalone prefix index (`lr_index`): which instance caches which
/// token prefix. The router has its own; this one is for hosts that route
/// by themselves.
///
/// `Send` but not `Sync`: every call, queries included, must be made by
/// one thread at a time.
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::Index>();
/// ```
pub struct Index {
    raw: NonNull<sys::lr_index>,
}

// SAFETY: lr_index.h: "one thread at a time per index. Callers may move an
// index between threads but must not share it without a lock." Not Sync.
unsafe impl Send for Index {}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index").field("raw", &self.raw).finish()
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::lr_index_destroy(self.raw.as_ptr()) }
    }
}

impl Index {
    /// Creates an index.
    pub fn new(opt: &IndexOptions) -> Result<Index> {
        let mut o = init(sys::lr_index_options_init_sized);
        o.seed = opt.seed;
        o.capacity_blocks = opt.capacity_blocks;
        o.ttl_ns = nanos(opt.ttl);
        o.block_tokens = opt.block_tokens;
        o.max_instances = opt.max_instances;
        o.journal_capacity = opt.journal_capacity;
        o.engine_map_capacity = opt.engine_map_capacity;
        o.replica_id = opt.replica_id;
        o.remote_ttl_ns = nanos(opt.remote_ttl);
        o.eviction = opt.eviction.c();
        o.clock_skew_ns = nanos(opt.clock_skew);
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options, out pointer.
        check(
            unsafe { sys::lr_index_create(&o, &mut raw) },
            "lr_index_create",
        )?;
        Ok(Index {
            raw: NonNull::new(raw).expect("lr_index_create returned LR_OK and NULL"),
        })
    }

    fn ptr(&self) -> *mut sys::lr_index {
        self.raw.as_ptr()
    }

    pub(crate) fn raw_ptr(&mut self) -> *mut sys::lr_index {
        self.ptr()
    }

    /// Records that `instance` now holds the prompt, at each boundary and
    /// at its full length (aligned down to blocks).
    pub fn learn(
        &mut self,
        p: &Prompt<'_>,
        instance: InstanceId,
        trust: Trust,
        now_ns: u64,
    ) -> Result<()> {
        const OP: &str = "lr_index_learn";
        let mut mm = MmBuf::new();
        let c = p.to_c(&mut mm, OP)?;
        // SAFETY: exclusive access; c borrows p's slices and mm for the
        // call.
        check(
            unsafe { sys::lr_index_learn(self.ptr(), &c, instance, trust.raw(), now_ns) },
            OP,
        )
    }

    /// For every instance, the longest prefix of the prompt it holds.
    /// Expired routes are dropped first. (`match` is a Rust keyword.)
    pub fn match_prompt(
        &mut self,
        p: &Prompt<'_>,
        now_ns: u64,
        flags: MatchFlags,
    ) -> Result<MatchResult> {
        let mut m = MatchResult::default();
        self.match_into(p, now_ns, flags, &mut m)?;
        Ok(m)
    }

    /// [`Index::match_prompt`] into `m`, reusing the capacity of `m.hits`.
    pub fn match_into(
        &mut self,
        p: &Prompt<'_>,
        now_ns: u64,
        flags: MatchFlags,
        m: &mut MatchResult,
    ) -> Result<()> {
        const OP: &str = "lr_index_match";
        let mut mm = MmBuf::new();
        let c = p.to_c(&mut mm, OP)?;
        m.hits.clear();
        if m.hits.capacity() == 0 {
            m.hits.reserve(16);
        }
        loop {
            let mut r = init(sys::lr_index_match_result_init_sized);
            r.hits = m.hits.as_mut_ptr().cast::<sys::lr_index_hit>();
            r.hits_capacity = m.hits.capacity();
            r.hit_size = size_of::<sys::lr_index_hit>();
            // SAFETY: exclusive access; the hits buffer has hits_capacity
            // slots of lr_index_hit's layout.
            let st = unsafe { sys::lr_index_match(self.ptr(), &c, now_ns, flags.0, &mut r) };
            // A short buffer changes nothing but expiry, and no one else may
            // use the index meanwhile: a retry at the size asked for fits.
            if st == sys::LR_EBUFSIZE && r.n_hits > m.hits.capacity() {
                m.hits.reserve(r.n_hits);
                continue;
            }
            check(st, OP)?;
            assert!(
                r.n_hits <= m.hits.capacity(),
                "lr_index_match overran its buffer"
            );
            // SAFETY: the library wrote n_hits hits.
            unsafe { m.hits.set_len(r.n_hits) };
            m.deepest_tokens = r.deepest_tokens;
            m.prompt_blocks = r.prompt_blocks;
            return Ok(());
        }
    }

    /// Drops every route of an instance and forgets its id.
    pub fn remove_instance(&mut self, instance: InstanceId) -> Result<()> {
        // SAFETY: exclusive access.
        check(
            unsafe { sys::lr_index_remove_instance(self.ptr(), instance) },
            "lr_index_remove_instance",
        )
    }

    /// Drops every route unused for longer than the TTL.
    pub fn expire(&mut self, now_ns: u64) -> Result<()> {
        // SAFETY: owned index, exclusive access.
        check(
            unsafe { sys::lr_index_expire(self.ptr(), now_ns) },
            "lr_index_expire",
        )
    }

    /// Applies an engine's BlockStored event for `instance`.
    pub fn kv_stored(
        &mut self,
        instance: InstanceId,
        ev: &KvStored<'_>,
        now_ns: u64,
    ) -> Result<()> {
        const OP: &str = "lr_index_kv_stored";
        let e = ev.to_c(OP)?;
        // SAFETY: exclusive access; e borrows ev's slices for the call.
        check(
            unsafe { sys::lr_index_kv_stored(self.ptr(), instance, &e, now_ns) },
            OP,
        )
    }

    /// Applies an engine's BlockRemoved event; returns how many hashes were
    /// known.
    pub fn kv_removed(&mut self, instance: InstanceId, block_hashes: &[u64]) -> Result<usize> {
        let mut n = 0;
        // SAFETY: exclusive access; slice and out pointer.
        check(
            unsafe {
                sys::lr_index_kv_removed(
                    self.ptr(),
                    instance,
                    ptr_or_null(block_hashes),
                    block_hashes.len(),
                    &mut n,
                )
            },
            "lr_index_kv_removed",
        )?;
        Ok(n)
    }

    /// Applies an engine's BlockRemoved event on one tier
    /// (`lr_index_kv_removed_tier`): [`Tier::Gpu`] is
    /// [`Index::kv_removed`]; a lower tier drops the blocks, and the
    /// instance's deeper ones there, from that tier only (a GPU removal
    /// leaves the lower tiers' copies). Returns how many hashes were known
    /// there.
    pub fn kv_removed_tier(
        &mut self,
        instance: InstanceId,
        tier: Tier,
        block_hashes: &[u64],
    ) -> Result<usize> {
        let mut n = 0;
        // SAFETY: exclusive access; slice and out pointer.
        check(
            unsafe {
                sys::lr_index_kv_removed_tier(
                    self.ptr(),
                    instance,
                    tier.c(),
                    ptr_or_null(block_hashes),
                    block_hashes.len(),
                    &mut n,
                )
            },
            "lr_index_kv_removed_tier",
        )?;
        Ok(n)
    }

    /// Applies an engine's AllBlocksCleared event (on every tier).
    pub fn kv_cleared(&mut self, instance: InstanceId) -> Result<()> {
        // SAFETY: exclusive access.
        check(
            unsafe { sys::lr_index_kv_cleared(self.ptr(), instance) },
            "lr_index_kv_cleared",
        )
    }

    /// The position of the local-learn journal, for a later
    /// [`Index::export_delta`].
    pub fn mark(&self) -> u64 {
        // SAFETY: const query; Index is not Sync.
        unsafe { sys::lr_index_mark(self.ptr()) }
    }

    /// What was learned locally since `since_mark` (0: every local route),
    /// as bytes for other replicas, and the mark to pass next time.
    pub fn export_delta(&self, since_mark: u64) -> Result<(Blob, u64)> {
        let mut b = ptr::null_mut();
        let mut mark = 0;
        // SAFETY: const query; out pointers.
        check(
            unsafe { sys::lr_index_export_delta(self.ptr(), since_mark, &mut b, &mut mark) },
            "lr_index_export_delta",
        )?;
        let blob = Blob::from_raw(b).expect("lr_index_export_delta returned LR_OK and no blob");
        Ok((blob, mark))
    }

    /// Applies a delta from another replica as REMOTE routes.
    pub fn import_delta(&mut self, delta: &[u8], now_ns: u64) -> Result<()> {
        // SAFETY: exclusive access; slice pointer and length.
        check(
            unsafe {
                sys::lr_index_import_delta(self.ptr(), ptr_or_null(delta), delta.len(), now_ns)
            },
            "lr_index_import_delta",
        )
    }

    /// The index's counters (counting engine hashes walks a map).
    pub fn stats(&self) -> Result<IndexStats> {
        // lr_index_stats is the one size-prefixed struct without an init
        // function: stamp the size as LR_*_INIT would and zero the rest.
        let mut s = sys::lr_index_stats {
            struct_size: size_of::<sys::lr_index_stats>(),
            ..Default::default()
        };
        // SAFETY: const query; initialized out struct.
        check(
            unsafe { sys::lr_index_get_stats(self.ptr(), &mut s) },
            "lr_index_get_stats",
        )?;
        Ok(IndexStats::from_c(&s))
    }

    /// Block routes held by one instance.
    pub fn instance_blocks(&self, instance: InstanceId) -> Result<u64> {
        let mut n = 0;
        // SAFETY: const query; out pointer.
        check(
            unsafe { sys::lr_index_instance_blocks(self.ptr(), instance, &mut n) },
            "lr_index_instance_blocks",
        )?;
        Ok(n)
    }

    /// Tokens per block of this index.
    pub fn block_tokens(&self) -> u32 {
        // SAFETY: const query.
        unsafe { sys::lr_index_block_tokens(self.ptr()) }
    }
}
