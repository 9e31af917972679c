//! The load tracker (`lr_load.h`).

use crate::error::{check, Result};
use crate::{init, nanos, sys, InstanceId, INSTANCE_NONE};
use std::fmt;
use std::ptr::{self, NonNull};
use std::time::Duration;

/// An instance's scraped engine metrics.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineStats {
    /// Requests running on the engine (`vllm:num_requests_running`).
    pub running: u32,
    /// Requests waiting (`vllm:num_requests_waiting`).
    pub waiting: u32,
    /// KV cache use in [0, 1] (`vllm:kv_cache_usage_perc`).
    pub kv_use: f64,
    /// Host time of the scrape, nanoseconds.
    pub scraped_ns: u64,
}

impl EngineStats {
    pub(crate) fn to_c(self) -> sys::lr_engine_stats {
        let mut s = init(sys::lr_engine_stats_init_sized);
        s.running = self.running;
        s.waiting = self.waiting;
        s.kv_use = self.kv_use;
        s.scraped_ns = self.scraped_ns;
        s
    }
}

/// An instance's load at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LoadSnapshot {
    /// The instance's class.
    pub class: u32,
    /// Whether its engine caches prefixes.
    pub prefix_caching: bool,
    /// Requests dispatched and not ended.
    pub inflight: u32,
    /// Of which queued: no first token yet.
    pub queued: u32,
    /// Uncached prompt tokens of the queued requests.
    pub prefill_tokens: u64,
    /// Whole prompt tokens of the queued requests.
    pub queued_tokens: u64,
    /// Expected output tokens of the requests past their first token.
    pub decode_tokens: u64,
    /// Prompt + expected output tokens of every request in flight.
    pub kv_tokens: u64,
    /// The latest scrape, if any.
    pub stats: Option<EngineStats>,
    /// The RTT moving average, once a probe arrived.
    pub rtt: Option<Duration>,
    /// Host time of the latest first token here; 0: none.
    pub last_first_token_ns: u64,
    /// Host time the queue last went from empty to non-empty.
    pub queue_since_ns: u64,
    /// Whole prompt tokens of every request in flight.
    pub prompt_tokens: u64,
}

impl LoadSnapshot {
    /// Whether every counter kept from the router's own traffic is zero.
    pub fn is_idle(&self) -> bool {
        self.inflight == 0
            && self.queued == 0
            && self.prefill_tokens == 0
            && self.queued_tokens == 0
            && self.decode_tokens == 0
            && self.kv_tokens == 0
            && self.prompt_tokens == 0
    }

    pub(crate) fn from_c(s: &sys::lr_load_snapshot) -> LoadSnapshot {
        LoadSnapshot {
            class: s.instance_class,
            prefix_caching: s.prefix_caching != 0,
            inflight: s.inflight,
            queued: s.queued,
            prefill_tokens: s.prefill_tokens,
            queued_tokens: s.queued_tokens,
            decode_tokens: s.decode_tokens,
            kv_tokens: s.kv_tokens,
            stats: (s.has_stats != 0).then_some(EngineStats {
                running: s.running,
                waiting: s.waiting,
                kv_use: s.kv_use,
                scraped_ns: s.scraped_ns,
            }),
            rtt: (s.has_rtt != 0).then(|| Duration::from_nanos(s.rtt_ns)),
            last_first_token_ns: s.last_first_token_ns,
            queue_since_ns: s.queue_since_ns,
            prompt_tokens: s.prompt_tokens,
        }
    }
}

/// Options fixed when a [`Load`] is created; `default()` is the library's
/// `lr_load_options_init`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Instance ids are `0..max_instances`.
    pub max_instances: u32,
    /// Requests in flight at once.
    pub max_requests: u32,
    /// Weight of a new RTT sample in the moving average, in (0, 1].
    pub rtt_alpha: f64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        let o = init(sys::lr_load_options_init_sized);
        LoadOptions {
            max_instances: o.max_instances,
            max_requests: o.max_requests,
            rtt_alpha: o.rtt_alpha,
        }
    }
}

/// A request handed to an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dispatch {
    /// The host's id, unique among requests in flight.
    pub request_id: u64,
    /// Where it went.
    pub instance: InstanceId,
    /// Prompt length.
    pub prompt_tokens: u32,
    /// Tokens expected to hit the cache there, at most the prompt.
    pub cached_tokens: u32,
    /// Expected output length; 0 if unknown.
    pub expected_output_tokens: u32,
    /// Another instance that could serve it and the tokens expected to hit
    /// there, for rebalancing.
    pub alt: Option<(InstanceId, u32)>,
    /// Host time of the dispatch.
    pub now_ns: u64,
    /// In a disaggregated fleet, the instance that prefills the request
    /// before `instance` decodes it, its KV moving over, and the tokens
    /// expected to hit its cache (at most the prompt). Until
    /// [`Load::prefill_done`] (or the first token) the prefill instance
    /// counts the request in flight and queued, its uncached tokens as
    /// prefill and its prompt's KV; `instance` counts it in flight and
    /// queued, with its KV and decode but no prefill.
    pub prefill: Option<(InstanceId, u32)>,
}

impl Dispatch {
    /// A dispatch with no cached tokens, output estimate or alternative.
    pub fn new(request_id: u64, instance: InstanceId, prompt_tokens: u32, now_ns: u64) -> Self {
        Dispatch {
            request_id,
            instance,
            prompt_tokens,
            cached_tokens: 0,
            expected_output_tokens: 0,
            alt: None,
            now_ns,
            prefill: None,
        }
    }
}

/// Where a request in flight is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Its instance.
    pub instance: InstanceId,
    /// Still queued (no first token yet).
    pub queued: bool,
}

/// A standalone load tracker (`lr_load`): per-instance counters kept exactly
/// from dispatches and lifecycle events. The router has its own; this one
/// is for hosts that route by themselves. All memory is reserved at
/// creation, so no later call fails with [`crate::ErrorKind::NoMem`].
///
/// `Send` but not `Sync` (one thread at a time):
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<libroute::Load>();
/// ```
pub struct Load {
    raw: NonNull<sys::lr_load>,
}

// SAFETY: lr_load.h: "one thread at a time per tracker"; it keeps no
// thread-local state, so it may move between threads. Not Sync.
unsafe impl Send for Load {}

impl fmt::Debug for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Load").field("raw", &self.raw).finish()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::lr_load_destroy(self.raw.as_ptr()) }
    }
}

impl Load {
    /// Creates a tracker.
    pub fn new(opt: &LoadOptions) -> Result<Load> {
        let mut o = init(sys::lr_load_options_init_sized);
        o.max_instances = opt.max_instances;
        o.max_requests = opt.max_requests;
        o.rtt_alpha = opt.rtt_alpha;
        let mut raw = ptr::null_mut();
        // SAFETY: initialized options, out pointer.
        check(
            unsafe { sys::lr_load_create(&o, &mut raw) },
            "lr_load_create",
        )?;
        Ok(Load {
            raw: NonNull::new(raw).expect("lr_load_create returned LR_OK and NULL"),
        })
    }

    fn ptr(&self) -> *mut sys::lr_load {
        self.raw.as_ptr()
    }

    /// Starts tracking an instance.
    pub fn add_instance(&mut self, id: InstanceId, class: u32, prefix_caching: bool) -> Result<()> {
        // SAFETY: live handle, exclusive (&mut); plain values.
        check(
            unsafe { sys::lr_load_add_instance(self.ptr(), id, class, prefix_caching as i32) },
            "lr_load_add_instance",
        )
    }

    /// Stops tracking an instance and drops its requests.
    pub fn remove_instance(&mut self, id: InstanceId) -> Result<()> {
        // SAFETY: as above.
        check(
            unsafe { sys::lr_load_remove_instance(self.ptr(), id) },
            "lr_load_remove_instance",
        )
    }

    /// Records a dispatch: the request is in flight and queued.
    pub fn dispatch(&mut self, d: &Dispatch) -> Result<()> {
        let mut c = init(sys::lr_dispatch_init_sized);
        c.request_id = d.request_id;
        c.instance = d.instance;
        c.prompt_tokens = d.prompt_tokens;
        c.cached_tokens = d.cached_tokens;
        c.expected_output_tokens = d.expected_output_tokens;
        let (alt, alt_cached) = d.alt.unwrap_or((INSTANCE_NONE, 0));
        c.alt_instance = alt;
        c.alt_cached_tokens = alt_cached;
        c.now_ns = d.now_ns;
        let (prefill, prefill_cached) = d.prefill.unwrap_or((INSTANCE_NONE, 0));
        c.prefill_instance = prefill;
        c.prefill_cached_tokens = prefill_cached;
        // SAFETY: initialized dispatch.
        check(
            unsafe { sys::lr_load_dispatch(self.ptr(), &c) },
            "lr_load_dispatch",
        )
    }

    /// The prefill leg of a request dispatched with [`Dispatch::prefill`]
    /// ended (its KV has moved to the decode instance): the prefill
    /// instance stops counting it. A request without a prefill leg, or
    /// whose leg ended before, is a no-op; one not in flight
    /// [`crate::ErrorKind::NotFound`].
    pub fn prefill_done(&mut self, request_id: u64, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_load_prefill_done(self.ptr(), request_id, now_ns) },
            "lr_load_prefill_done",
        )
    }

    /// A request's first token (a repeat is a no-op; an open prefill leg
    /// ends with it).
    pub fn first_token(&mut self, request_id: u64, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_load_first_token(self.ptr(), request_id, now_ns) },
            "lr_load_first_token",
        )
    }

    /// A request ended with `output_tokens` generated.
    pub fn complete(&mut self, request_id: u64, output_tokens: u32, now_ns: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_load_complete(self.ptr(), request_id, output_tokens, now_ns) },
            "lr_load_complete",
        )
    }

    /// A request failed or was cancelled.
    pub fn fail(&mut self, request_id: u64) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_load_fail(self.ptr(), request_id) },
            "lr_load_fail",
        )
    }

    /// Moves a queued request to another instance, with the tokens expected
    /// to hit there. (`move` is a Rust keyword.)
    pub fn move_request(
        &mut self,
        request_id: u64,
        to: InstanceId,
        cached_tokens: u32,
    ) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_load_move(self.ptr(), request_id, to, cached_tokens) },
            "lr_load_move",
        )
    }

    /// Replaces an instance's scraped stats (an older scrape is ignored).
    pub fn set_stats(&mut self, id: InstanceId, stats: &EngineStats) -> Result<()> {
        let s = stats.to_c();
        // SAFETY: initialized stats.
        check(
            unsafe { sys::lr_load_set_stats(self.ptr(), id, &s) },
            "lr_load_set_stats",
        )
    }

    /// Folds an RTT probe into the instance's moving average.
    pub fn observe_rtt(&mut self, id: InstanceId, rtt: Duration) -> Result<()> {
        // SAFETY: plain values.
        check(
            unsafe { sys::lr_load_observe_rtt(self.ptr(), id, nanos(rtt)) },
            "lr_load_observe_rtt",
        )
    }

    /// An instance's load.
    pub fn get(&self, id: InstanceId) -> Result<LoadSnapshot> {
        let mut s = init(sys::lr_load_snapshot_init_sized);
        // SAFETY: initialized out struct; &self: no concurrent mutation, and
        // Load is not Sync, so no concurrent query either.
        check(
            unsafe { sys::lr_load_get(self.ptr(), id, &mut s) },
            "lr_load_get",
        )?;
        Ok(LoadSnapshot::from_c(&s))
    }

    /// Requests in flight over all instances.
    pub fn inflight(&self) -> u64 {
        // SAFETY: live handle.
        unsafe { sys::lr_load_inflight(self.ptr()) }
    }

    /// Where a request in flight is.
    pub fn request(&self, request_id: u64) -> Result<InFlight> {
        let mut instance = INSTANCE_NONE;
        let mut queued = 0i32;
        // SAFETY: out pointers.
        check(
            unsafe { sys::lr_load_request(self.ptr(), request_id, &mut instance, &mut queued) },
            "lr_load_request",
        )?;
        Ok(InFlight {
            instance,
            queued: queued != 0,
        })
    }
}
