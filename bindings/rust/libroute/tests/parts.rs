//! The standalone handles: index, ring, load tracker, text tokens, vLLM
//! batches.
mod common;

use common::*;
use libroute::*;
use std::time::Duration;

fn index() -> Index {
    Index::new(&IndexOptions::default()).unwrap()
}

#[test]
fn block_keys_chain() {
    let toks = prompt(100, 1);
    let keys = block_keys(16, &toks, 0).unwrap();
    assert_eq!(keys.len(), 6);
    assert_eq!(block_keys(16, &toks[..40], 0).unwrap(), keys[..2]);
    assert_ne!(
        block_keys(16, &toks, 1).unwrap()[0],
        keys[0],
        "the salt does not enter the keys"
    );
    assert!(block_keys(16, &[], 0).unwrap().is_empty());
    want_err(
        block_keys(0, &toks, 0),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_block_keys",
    );
}

#[test]
fn index_learn_match() {
    let mut o = IndexOptions::default();
    o.capacity_blocks = 1 << 12;
    let mut x = Index::new(&o).unwrap();
    assert_eq!(x.block_tokens(), 16);
    let toks = prompt(200, 2);
    let mut p = Prompt::new(&toks[..100]);
    p.boundaries = &[40];
    x.learn(&p, 7, Trust::Local, SEC).unwrap();
    x.learn(&Prompt::new(&toks), 9, Trust::Remote, SEC).unwrap();
    let m = x
        .match_prompt(&Prompt::new(&toks), SEC, MatchFlags::NONE)
        .unwrap();
    let want = [
        Hit {
            instance: 9,
            tokens: 192,
        },
        Hit {
            instance: 7,
            tokens: 96,
        },
    ];
    assert_eq!(m.hits, want);
    assert_eq!((m.deepest_tokens, m.prompt_blocks), (192, 12));
    let keys = block_keys(16, &toks, 0).unwrap();
    let mut pk = Prompt::new(&toks);
    pk.keys = Some(&keys);
    assert_eq!(
        x.match_prompt(&pk, SEC, MatchFlags::NO_TOUCH).unwrap().hits,
        want
    );
    pk.keys = Some(&keys[..3]);
    want_err(
        x.learn(&pk, 1, Trust::Local, SEC),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_index_learn",
    );
    want_err(
        x.learn(&p, INSTANCE_NONE, Trust::Local, SEC),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_index_learn",
    );
    let s = x.stats().unwrap();
    assert_eq!(
        (s.blocks, s.remote_blocks, s.instances, s.learned_blocks),
        (18, 12, 2, 18)
    );
    assert!(s.bytes > 0);
    assert_eq!(x.instance_blocks(7).unwrap(), 6);
    want_err(
        x.instance_blocks(8),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_index_instance_blocks",
    );
    x.remove_instance(9).unwrap();
    want_err(
        x.remove_instance(9),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_index_remove_instance",
    );
    assert_eq!(
        x.match_prompt(&Prompt::new(&toks), SEC, MatchFlags::NONE)
            .unwrap()
            .hits
            .len(),
        1
    );
}

#[test]
fn index_match_grows_its_buffer() {
    let mut x = index();
    let toks = prompt(64, 3);
    for i in 0..40u32 {
        x.learn(
            &Prompt::new(&toks[..16 + (i as usize % 4) * 16]),
            i,
            Trust::Local,
            SEC,
        )
        .unwrap();
    }
    let mut m = MatchResult::default();
    m.hits.reserve_exact(3);
    x.match_into(&Prompt::new(&toks), SEC, MatchFlags::NONE, &mut m)
        .unwrap();
    assert_eq!(m.hits.len(), 40);
    assert!(m
        .hits
        .windows(2)
        .all(|w| (w[0].tokens, std::cmp::Reverse(w[0].instance))
            >= (w[1].tokens, std::cmp::Reverse(w[1].instance))));
}

#[test]
fn index_ttl() {
    let mut o = IndexOptions::default();
    o.ttl = Duration::from_secs(1);
    let mut x = Index::new(&o).unwrap();
    let toks = prompt(32, 4);
    x.learn(&Prompt::new(&toks), 1, Trust::Local, SEC).unwrap();
    x.expire(5 * SEC).unwrap();
    assert!(x
        .match_prompt(&Prompt::new(&toks), 5 * SEC, MatchFlags::NONE)
        .unwrap()
        .hits
        .is_empty());
    assert_eq!(x.stats().unwrap().expired_blocks, 2);
    o.ttl = Duration::MAX; // never
    let mut never = Index::new(&o).unwrap();
    never
        .learn(&Prompt::new(&toks), 1, Trust::Local, SEC)
        .unwrap();
    // years on: past the clock's skew, refused once, taken at the retry
    assert!(never.expire(1 << 59).is_err());
    never.expire(1 << 59).unwrap();
    assert_eq!(
        never
            .match_prompt(&Prompt::new(&toks), 1 << 59, MatchFlags::NONE)
            .unwrap()
            .hits
            .len(),
        1
    );
    o.block_tokens = 1 << 20;
    want_err(
        Index::new(&o),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_index_create",
    );
}

#[test]
fn index_kv_events() {
    let mut x = index();
    let toks = prompt(128, 5);
    x.kv_stored(3, &KvStored::new(&[11, 12], 64, &toks), SEC)
        .unwrap();
    let next = prompt(64, 6);
    let mut child = KvStored::new(&[13], 64, &next);
    child.parent_hash = Some(12);
    x.kv_stored(3, &child, SEC).unwrap();
    assert_eq!(x.instance_blocks(3).unwrap(), 12);
    let odd = prompt(24, 1);
    want_err(
        x.kv_stored(3, &KvStored::new(&[1], 24, &odd), SEC),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_index_kv_stored",
    );
    assert_eq!(x.kv_removed(3, &[12, 99]).unwrap(), 1);
    assert_eq!(x.instance_blocks(3).unwrap(), 4);
    x.kv_cleared(3).unwrap();
    assert_eq!(x.instance_blocks(3).unwrap(), 0);
    want_err(
        x.kv_cleared(4),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_index_kv_cleared",
    );
    want_err(
        x.kv_removed(4, &[]),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_index_kv_removed",
    );
}

#[test]
fn index_deltas() {
    let (mut a, mut b) = (index(), index());
    let toks = prompt(96, 7);
    let m0 = a.mark();
    a.learn(&Prompt::new(&toks), 2, Trust::Local, SEC).unwrap();
    let (d, m1) = a.export_delta(m0).unwrap();
    assert!(!d.is_empty() && m1 != m0 && a.mark() == m1);
    b.import_delta(&d, SEC).unwrap();
    let s = b.stats().unwrap();
    assert_eq!((s.blocks, s.remote_blocks), (6, 6));
    let mut bad = d.to_vec();
    *bad.last_mut().unwrap() ^= 1;
    want_err(
        b.import_delta(&bad, SEC),
        ErrorKind::Corrupt,
        "LR_ECORRUPT",
        "lr_index_import_delta",
    );
    want_err(
        a.export_delta(m1 + 100),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_index_export_delta",
    );
    // An index moves between threads.
    let moved = std::thread::spawn(move || a.mark()).join().unwrap();
    assert_eq!(moved, m1);
}

#[test]
fn ring() {
    let mut o = RingOptions::default();
    o.vnodes = 64;
    let mut r = Ring::new(&o).unwrap();
    want_err(
        r.candidates(1, 2),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_ring_candidates",
    );
    for i in 0..8u32 {
        r.add(&format!("10.0.0.{i}:8000"), 100 + i).unwrap();
    }
    want_err(
        r.add("10.0.0.1:8000", 1),
        ErrorKind::Exists,
        "LR_EEXIST",
        "lr_ring_add",
    );
    want_err(
        r.add("x", 100),
        ErrorKind::Exists,
        "LR_EEXIST",
        "lr_ring_add",
    );
    want_err(
        r.add("a\0b", 1),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_ring_add",
    );
    want_err(
        r.remove(1),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_ring_remove",
    );
    assert!(r.count() == 8 && r.contains(103) && !r.contains(3));
    for key in 0..100u64 {
        let c = r
            .candidates(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), Ring::MAX_K)
            .unwrap();
        let mut ids = c.to_vec();
        ids.sort();
        ids.dedup();
        assert!(
            ids.len() == 8 && ids.iter().all(|&i| (100..108).contains(&i)),
            "{c:?}"
        );
    }
    want_err(
        r.candidates(1, 0),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_ring_candidates",
    );
    want_err(
        r.candidates(1, Ring::MAX_K + 1),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_ring_candidates",
    );

    // Placement depends on names only, not on the order of adds.
    let mut r2 = Ring::new(&o).unwrap();
    for i in (0..8u32).rev() {
        r2.add(&format!("10.0.0.{i}:8000"), 100 + i).unwrap();
    }
    for key in 0..100 {
        assert_eq!(
            *r.candidates(key, 2).unwrap(),
            *r2.candidates(key, 2).unwrap()
        );
    }
    // Queries from several threads at once (Ring is Sync).
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let r = &r;
            s.spawn(move || {
                for key in 0..1000 {
                    assert_eq!(r.candidates(key + (t << 40), 2).unwrap().len(), 2);
                    assert!(r.contains(100) && r.count() == 8);
                }
            });
        }
    });
    r.remove(103).unwrap();
    assert!(r.count() == 7 && !r.contains(103));
}

#[test]
fn load_tracker() {
    let mut o = LoadOptions::default();
    o.max_instances = 8;
    o.max_requests = 16;
    let mut l = Load::new(&o).unwrap();
    for i in 0..3 {
        l.add_instance(i, i, i != 2).unwrap();
    }
    want_err(
        l.add_instance(1, 0, true),
        ErrorKind::Exists,
        "LR_EEXIST",
        "lr_load_add_instance",
    );
    want_err(
        l.add_instance(8, 0, true),
        ErrorKind::Limit,
        "LR_ELIMIT",
        "lr_load_add_instance",
    );
    let mut d = Dispatch::new(1, 0, 900, SEC);
    d.cached_tokens = 512;
    d.expected_output_tokens = 100;
    d.alt = Some((1, 0));
    l.dispatch(&d).unwrap();
    want_err(
        l.dispatch(&d),
        ErrorKind::Exists,
        "LR_EEXIST",
        "lr_load_dispatch",
    );
    l.dispatch(&Dispatch::new(2, 2, 100, SEC)).unwrap();
    let mut bad = Dispatch::new(3, 2, 10, SEC);
    bad.cached_tokens = 11;
    want_err(
        l.dispatch(&bad),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_load_dispatch",
    );
    let s = l.get(0).unwrap();
    assert_eq!(
        (
            s.inflight,
            s.queued,
            s.prefill_tokens,
            s.queued_tokens,
            s.kv_tokens,
            s.prompt_tokens
        ),
        (1, 1, 388, 900, 1000, 900)
    );
    assert!(s.prefix_caching && s.queue_since_ns == SEC);
    assert_eq!(l.inflight(), 2);
    assert_eq!(
        l.request(1).unwrap(),
        InFlight {
            instance: 0,
            queued: true
        }
    );
    l.move_request(1, 1, 256).unwrap();
    assert_eq!(l.request(1).unwrap().instance, 1);
    l.first_token(1, 2 * SEC).unwrap();
    want_err(
        l.move_request(1, 0, 0),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_load_move",
    );
    assert!(!l.request(1).unwrap().queued);
    let s = l.get(1).unwrap();
    assert_eq!(
        (s.decode_tokens, s.queued, s.last_first_token_ns),
        (100, 0, 2 * SEC)
    );
    let scrape = EngineStats {
        running: 1,
        waiting: 0,
        kv_use: 0.25,
        scraped_ns: 3 * SEC,
    };
    l.set_stats(1, &scrape).unwrap();
    l.observe_rtt(1, Duration::from_millis(4)).unwrap();
    let s = l.get(1).unwrap();
    assert_eq!(
        (s.stats, s.rtt),
        (Some(scrape), Some(Duration::from_millis(4)))
    );
    want_err(
        l.observe_rtt(1, Duration::from_secs(120)),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_load_observe_rtt",
    );
    l.complete(1, 90, 4 * SEC).unwrap();
    l.fail(2).unwrap();
    want_err(l.fail(2), ErrorKind::NotFound, "LR_ENOENT", "lr_load_fail");
    want_err(
        l.first_token(1, 5 * SEC),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_load_first_token",
    );
    want_err(
        l.complete(7, 0, 0),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_load_complete",
    );
    want_err(
        l.request(1),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_load_request",
    );
    for i in 0..3 {
        assert!(l.get(i).unwrap().is_idle(), "instance {i}");
    }
    assert_eq!(l.inflight(), 0);
    l.remove_instance(2).unwrap();
    want_err(l.get(2), ErrorKind::NotFound, "LR_ENOENT", "lr_load_get");
}

#[test]
fn text() {
    let a = text_tokens(b"You are a helpful assistant. Hello", 4).unwrap();
    let b = text_tokens(b"You are a helpful assistant. Goodbye", 4).unwrap();
    assert_eq!(a.len(), 9);
    assert_eq!(a[..7], b[..7]);
    assert_ne!(a[8], b[8]);
    assert!(text_tokens(b"", 4).unwrap().is_empty());
    want_err(
        text_tokens(b"x", 0),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_text_tokens",
    );
    want_err(
        text_tokens(b"x", 65),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_text_tokens",
    );
}

/// The little of msgpack a vLLM KV-event batch needs.
#[derive(Default)]
struct Msgpack(Vec<u8>);

impl Msgpack {
    fn arr(&mut self, n: u8) -> &mut Self {
        assert!(n <= 15);
        self.0.push(0x90 | n);
        self
    }
    fn uint(&mut self, v: u64) -> &mut Self {
        self.0.push(0xcf);
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn f64(&mut self, v: f64) -> &mut Self {
        self.0.push(0xcb);
        self.0.extend_from_slice(&v.to_bits().to_be_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.0.extend_from_slice(&[0xd9, s.len() as u8]);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn nil(&mut self) -> &mut Self {
        self.0.push(0xc0);
        self
    }
    fn uints(&mut self, v: impl ExactSizeIterator<Item = u64>) -> &mut Self {
        self.0.push(0xdd);
        self.0.extend_from_slice(&(v.len() as u32).to_be_bytes());
        for x in v {
            self.uint(x);
        }
        self
    }
    /// A positional BlockStored event.
    fn stored(
        &mut self,
        hashes: &[u64],
        parent: Option<u64>,
        toks: &[u32],
        block_size: u64,
    ) -> &mut Self {
        self.arr(9).str("BlockStored").uints(hashes.iter().copied());
        match parent {
            Some(p) => self.uint(p),
            None => self.nil(),
        };
        self.uints(toks.iter().map(|&t| t as u64)).uint(block_size);
        self.nil().str("GPU").nil().nil() // lora_id, medium, lora_name, extra_keys
    }
    fn removed(&mut self, hashes: &[u64]) -> &mut Self {
        self.arr(3)
            .str("BlockRemoved")
            .uints(hashes.iter().copied())
            .str("GPU")
    }
}

#[test]
fn vllm_batches() {
    let toks = prompt(96, 9);
    let mut m = Msgpack::default();
    m.arr(3).f64(12.5).arr(3);
    m.stored(&[101], None, &toks[..32], 32);
    m.stored(&[102, 103], Some(101), &toks[32..], 32);
    m.removed(&[103, 999]);
    m.uint(0); // data-parallel rank
    let payload = m.0;

    let mut x = index();
    let info = x.vllm_batch(4, &payload, SEC).unwrap();
    assert_eq!(info.timestamp, Some(12.5));
    assert_eq!(info.dp_rank, Some(0));
    assert_eq!(
        (info.events, info.stored, info.removed, info.cleared),
        (3, 2, 1, 0)
    );
    assert_eq!((info.unplaced, info.skipped, info.done), (0, 0, 3));
    let hits = x
        .match_prompt(&Prompt::new(&toks), SEC, MatchFlags::NO_TOUCH)
        .unwrap()
        .hits;
    assert_eq!(
        hits,
        [Hit {
            instance: 4,
            tokens: 64
        }]
    );
    let e = x
        .vllm_batch(4, &payload[..payload.len() - 1], SEC)
        .unwrap_err();
    assert_eq!(
        (e.error.kind(), e.error.op(), e.info.done),
        (ErrorKind::Corrupt, "lr_index_vllm_batch", 0)
    );
    let as_error: Error = e.into();
    assert_eq!(as_error.name(), "LR_ECORRUPT");

    let (r, ids) = router(Policy::PREFIX_CACHE, &names(3));
    assert_eq!(r.vllm_batch(ids[1], &payload, SEC).unwrap(), info);
    let mut q = Request::new(1, &toks, SEC);
    q.flags = RouteFlags::NO_LEARN;
    let d = r.route(&q).unwrap();
    assert_eq!((d.instance, d.cached_tokens), (ids[1], 64));
    let e = r.vllm_batch(77, &payload, SEC).unwrap_err();
    assert_eq!(
        (e.error.kind(), e.error.op()),
        (ErrorKind::NotFound, "lr_router_vllm_batch")
    );
}
