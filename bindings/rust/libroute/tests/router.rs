mod common;

use common::*;
use libroute::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn version_matches_the_declared_series() {
    let n = version_number();
    assert_eq!(n / 100, sys::LR_VERSION_MAJOR * 100 + sys::LR_VERSION_MINOR);
    let want = format!("{}.{}.{}", n / 10000, n / 100 % 100, n % 100);
    assert_eq!(version(), want);
}

struct Conversation {
    tokens: Vec<u32>,
    boundaries: Vec<u32>,
}

impl Conversation {
    fn push(&mut self, rng: &mut Rng, n: u64, salt: u32) {
        for _ in 0..n {
            self.tokens.push(rng.below(50_000) as u32 ^ salt);
        }
        self.boundaries.push(self.tokens.len() as u32);
    }
}

/// Follow-up turns carry the whole history, so they must go back to the
/// instance that served the previous turn and cached it. Messages are short
/// next to the shared system prompts so that even the second turn passes
/// prefix-cache's 0.5 cached-share threshold. DualMap is left out: its hash
/// key grows with the prompt, so a turn may land on other candidates.
#[test]
fn multi_turn_follow_ups_stick() {
    for policy in [
        Policy::PREFIX_CACHE,
        Policy::PREFIX_CACHE_AND_LOAD,
        Policy::SGLANG_CACHE_AWARE,
        Policy::PREBLE,
        Policy::RANVIER,
    ] {
        let (r, _) = router(policy, &names(4));
        let mut rng = Rng(1);
        let systems: Vec<Vec<u32>> = (0..3)
            .map(|s| prompt(200 + 100 * s, 1000 + s as u64))
            .collect();
        let mut convs: Vec<Conversation> = (0..12)
            .map(|_| {
                let s = &systems[rng.below(3) as usize];
                Conversation {
                    tokens: s.clone(),
                    boundaries: vec![s.len() as u32],
                }
            })
            .collect();
        let mut last = vec![INSTANCE_NONE; convs.len()];
        let mut prev_len = vec![0usize; convs.len()];
        let mut used = HashSet::new();
        let (mut now, mut id) = (SEC, 0u64);
        for turn in 0..5 {
            for (c, cv) in convs.iter_mut().enumerate() {
                let n = 10 + rng.below(50);
                cv.push(&mut rng, n, c as u32 + 1); // user
                now += SEC / 20;
                id += 1;
                let mut q = Request::new(id, &cv.tokens, now);
                q.boundaries = &cv.boundaries;
                let d = r
                    .route(&q)
                    .unwrap_or_else(|e| panic!("{policy} turn {turn} conv {c}: {e}"));
                used.insert(d.instance);
                if turn > 0 {
                    assert_eq!(
                        d.instance, last[c],
                        "{policy} turn {turn} conv {c}: went to {} ({}), previous turn on {}",
                        d.instance, d.reason, last[c]
                    );
                    let want = (prev_len[c] / 16 * 16) as u32;
                    assert!(
                        d.cached_tokens >= want,
                        "{policy}: cached {} < {want}",
                        d.cached_tokens
                    );
                }
                last[c] = d.instance;
                prev_len[c] = cv.tokens.len();
                r.first_token(id, now + SEC / 10).unwrap();
                r.complete(id, 50, now + SEC / 5).unwrap();
                let n = 20 + rng.below(80);
                cv.push(&mut rng, n, c as u32 * 7 + 1); // reply
            }
        }
        assert!(
            used.len() >= 2,
            "{policy}: every conversation on one instance"
        );
        let s = r.stats().unwrap();
        assert_eq!(s.routes, id);
        assert_eq!(s.inflight, 0);
        assert!(s.cached_tokens > 0);
        assert!(
            s.by_reason(Reason::PREFIX_HIT) + s.by_reason(Reason::MIN_COST) > 0,
            "{s:?}"
        );
    }
}

/// Whatever order the events arrive in, each request's counters come off
/// exactly once.
#[test]
fn lifecycle_returns_counters_to_zero() {
    let (r, ids) = router(Policy::LEAST_REQUEST, &names(3));
    const N: u64 = 60;
    for i in 1..=N {
        let toks = prompt(100 + (i as usize * 37) % 400, i);
        let mut q = Request::new(i, &toks, i);
        q.expected_output_tokens = 64;
        r.route(&q).unwrap();
    }
    assert_eq!(r.stats().unwrap().inflight, N);
    let (mut inflight, mut queued) = (0, 0);
    for &id in &ids {
        let l = r.instance_load(id).unwrap();
        assert!(
            l.inflight > 0 && l.prefill_tokens > 0 && l.kv_tokens > 0,
            "{l:?}"
        );
        inflight += l.inflight;
        queued += l.queued;
    }
    assert_eq!((inflight as u64, queued as u64), (N, N));
    for i in 1..=N {
        let now = 1000 + i;
        match i % 3 {
            0 => {
                r.first_token(i, now).unwrap();
                r.first_token(i, now + 1).unwrap(); // a repeat is a no-op
                r.complete(i, 10, now + 2).unwrap();
            }
            1 => r.fail(i, now).unwrap(),
            _ => r.complete(i, 0, now).unwrap(),
        }
    }
    for &id in &ids {
        let l = r.instance_load(id).unwrap();
        assert!(l.is_idle(), "instance {id} not back to zero: {l:?}");
    }
    let s = r.stats().unwrap();
    assert_eq!((s.inflight, s.routes), (0, N));
    want_err(
        r.first_token(1, 5000),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_first_token",
    );
    want_err(
        r.complete(2, 1, 5000),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_complete",
    );
    want_err(
        r.fail(3, 5000),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_fail",
    );
}

#[test]
fn observe_cached_calibrates_the_instance() {
    const S: u64 = 1_000_000_000;
    let (r, _) = router(Policy::ADAPTIVE, &names(2));
    let toks = prompt(512, 7);
    r.route(&Request::new(1, &toks, S)).unwrap();
    r.complete(1, 1, S + 1).unwrap();
    let d = r.route(&Request::new(2, &toks, 2 * S)).unwrap();
    assert!(d.cached_tokens > 0, "{d:?}");
    r.observe_cached(2, 0, 2 * S).unwrap(); // none of the hit delivered
    r.observe_cached(2, 512, 2 * S).unwrap(); // a repeat: no change
    want_err(
        r.observe_cached(2, 513, 2 * S),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_observe_cached",
    );
    want_err(
        r.observe_cached(9, 0, 2 * S),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_observe_cached",
    );
    for row in r.candidates(&Request::new(3, &toks, 2 * S)).unwrap() {
        // one report of all lost, over 1 + a prior of 2 reports
        let want = if row.instance == d.instance {
            1.0 / 3.0
        } else {
            0.0
        };
        assert!((row.cached_lost - want).abs() < 1e-12, "{row:?}");
    }
    let s = r.stats().unwrap();
    assert_eq!(
        (
            s.observed_reports,
            s.observed_expected_tokens,
            s.observed_cached_tokens
        ),
        (1, d.cached_tokens as u64, 0)
    );
}

#[test]
fn errors_carry_the_status() {
    let (r, _) = router(Policy::PREFIX_CACHE, &[]);
    let toks = [1u32, 2, 3, 4];
    want_err(
        r.route(&Request::new(1, &toks, 0)),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_route",
    );
    let a = r.add_instance(&InstanceSpec::new("a:1")).unwrap();
    want_err(
        r.add_instance(&InstanceSpec::new("a:1")),
        ErrorKind::Exists,
        "LR_EEXIST",
        "lr_router_add_instance",
    );
    want_err(
        r.add_instance(&InstanceSpec::new("a\0b")),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_add_instance",
    );
    want_err(
        r.add_instance(&InstanceSpec::new("")),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_add_instance",
    );
    let mut slow = InstanceSpec::new("b:1");
    slow.rtt = Duration::from_secs(120);
    want_err(
        r.add_instance(&slow),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_router_add_instance",
    );
    want_err(
        r.find_instance("nope"),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_find_instance",
    );

    r.route(&Request::new(1, &toks, 0)).unwrap();
    want_err(
        r.route(&Request::new(1, &toks, 0)),
        ErrorKind::Exists,
        "LR_EEXIST",
        "lr_router_route",
    );
    let mut bad = Request::new(2, &toks, 0);
    bad.boundaries = &[3, 2];
    want_err(
        r.route(&bad),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_route",
    );

    want_err(
        r.first_token(99, 1),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_first_token",
    );
    want_err(
        r.move_request(99, a),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_move",
    );
    want_err(
        r.remove_instance(77),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_remove_instance",
    );
    want_err(
        r.drain_instance(77, true),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_drain_instance",
    );
    want_err(
        r.observe_rtt(77, Duration::from_millis(1)),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_observe_rtt",
    );
    want_err(
        r.observe_rtt(a, Duration::from_secs(3600)),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_router_observe_rtt",
    );
    want_err(
        r.instance_load(77),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_instance_load",
    );
    let st = EngineStats {
        kv_use: f64::NAN,
        ..Default::default()
    };
    want_err(
        r.set_stats(a, &st),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_set_stats",
    );
    let mut cls = ClassSpec::default();
    cls.prefill_tokens_per_s = 0.0;
    want_err(
        r.set_class(0, &cls),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_router_set_class",
    );
    want_err(
        r.set_policy(Policy::from_raw(Policy::count())),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_set_policy",
    );
    want_err(
        r.set_param(Param::PREFIX_MIN_RATIO, 2.0),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_router_set_param",
    );
    want_err(
        r.set_param(Param::PREFIX_MIN_RATIO, f64::NAN),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_set_param",
    );
    let unknown = Param::from_raw(Param::count());
    want_err(
        r.set_param(unknown, 1.0),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_router_set_param",
    );
    want_err(
        r.param(unknown),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_router_get_param",
    );
    want_err(
        unknown.bounds(),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_param_bounds",
    );
    want_err(
        r.import_delta(b"not a delta", 1),
        ErrorKind::Corrupt,
        "LR_ECORRUPT",
        "lr_router_import_delta",
    );
    want_err(
        r.kv_removed(77, &[1]),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_kv_removed",
    );
    want_err(
        Policy::from_name("no-such-policy"),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_policy_from_name",
    );

    let mut o = RouterOptions::default();
    o.policy = Policy::from_raw(Policy::count());
    want_err(
        Router::new(&o),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_create",
    );

    // Display names the call, the library's text and the status.
    let e = r.first_token(99, 1).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("lr_router_first_token: "), "{msg}");
    assert!(
        msg.contains(e.message()) && msg.ends_with("(LR_ENOENT)"),
        "{msg}"
    );
    assert_eq!(e.status(), sys::LR_ENOENT);
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    assert!(boxed.to_string().contains("LR_ENOENT"));
}

#[test]
fn policies_reasons_params() {
    assert_eq!(Policy::ALL.len(), Policy::count() as usize);
    let (r, ids) = router(Policy::RANDOM, &names(3));
    for (i, &p) in Policy::ALL.iter().enumerate() {
        assert_eq!(p.raw(), i as u32);
        let name = p.name().unwrap();
        assert_eq!(name.parse::<Policy>().unwrap(), p);
        assert_eq!(p.to_string(), name);
        r.set_policy(p).unwrap();
        assert_eq!(r.policy(), p);
        let toks = [0u32; 64];
        let mut q = Request::new(i as u64 + 1, &toks, SEC);
        q.flags = RouteFlags::DRY_RUN;
        let d = r.route(&q).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(
            ids.contains(&d.instance) && d.reason.name().is_some(),
            "{p}: {d:?}"
        );
    }
    assert_eq!(Policy::from_raw(Policy::count()).name(), None);
    assert_eq!(format!("{:?}", Policy::from_raw(99)), "Policy(99)");
    for &reason in Reason::ALL {
        assert!(reason.name().is_some(), "{reason:?}");
    }
    assert_eq!(Reason::ALL.len(), Reason::count() as usize);
    let past = Reason::from_raw(Reason::ALL.len() as u32);
    assert_eq!(
        past.name(),
        None,
        "the library names reason {past:?}; the binding lacks it"
    );

    assert_eq!(Param::ALL.len(), Param::count() as usize);
    r.set_policy(Policy::GORGO).unwrap();
    for (i, &p) in Param::ALL.iter().enumerate() {
        assert_eq!(p.raw(), i as u32);
        let b = p.bounds().unwrap();
        assert!(b.lo <= b.default && b.default <= b.hi, "{p}: {b:?}");
        assert!(!b.integer || b.default == b.default.floor(), "{p}: {b:?}");
        assert_eq!(r.param(p).unwrap(), b.default, "{p}");
        r.set_param(p, b.hi).unwrap();
        assert_eq!(r.param(p).unwrap(), b.hi);
        if b.hi.is_finite() {
            want_err(
                r.set_param(p, b.hi * 2.0 + 1.0),
                ErrorKind::Range,
                "LR_ERANGE",
                "lr_router_set_param",
            );
        }
        r.set_param(p, b.default).unwrap();
    }
}

#[test]
fn scores() {
    let (r, ids) = router(Policy::PREFIX_CACHE, &names(5));
    let toks: Vec<u32> = (0..256).map(|i| i * 7).collect();
    r.route(&Request::new(1, &toks, SEC)).unwrap();
    let mut q = Request::new(2, &toks, SEC);
    q.flags = RouteFlags::DRY_RUN;
    let mut scores = Vec::new();
    let d = r.route_with_scores(&q, &mut scores).unwrap();
    assert_eq!(scores.len(), ids.len());
    for (s, &id) in scores.iter().zip(&ids) {
        assert_eq!(s.instance, id);
        assert_eq!(
            s.instance == d.instance,
            s.cached_tokens == 256,
            "{s:?} {d:?}"
        );
    }
    // A short buffer grows; a large one is reused.
    let mut short = Vec::with_capacity(1);
    r.route_with_scores(&q, &mut short).unwrap();
    assert_eq!(short.len(), ids.len());
    let mut big = Vec::with_capacity(64);
    let before = big.as_ptr();
    r.route_with_scores(&q, &mut big).unwrap();
    assert_eq!((big.len(), big.as_ptr()), (ids.len(), before));
    let s = r.stats().unwrap();
    assert_eq!((s.routes, s.dry_runs, s.inflight), (1, 3, 1));
}

/// `lr_decision.score_size` through the raw API: `lr_decision_init_sized`
/// leaves it 0 (the 0.1 size, `LR_SCORE_SIZE_V1`), which is why
/// `route_with_scores` sets it to `size_of::<Score>()`; a stride below
/// `LR_SCORE_SIZE_V1` is `LR_EINVAL` (it would write past the caller's
/// entries).
#[test]
fn score_stride() {
    use std::mem::{size_of, MaybeUninit};
    use std::ptr;
    fn init<T>(f: unsafe extern "C" fn(*mut T, usize)) -> T {
        let mut v = MaybeUninit::<T>::uninit();
        // SAFETY: the function fills size_of::<T>() bytes.
        unsafe {
            f(v.as_mut_ptr(), size_of::<T>());
            v.assume_init()
        }
    }
    assert!(size_of::<sys::lr_score>() >= sys::LR_SCORE_SIZE_V1);
    assert_eq!(size_of::<Score>(), size_of::<sys::lr_score>());
    let opt = init(sys::lr_router_options_init_sized);
    let mut r = ptr::null_mut();
    // SAFETY: initialised options, out pointer.
    assert_eq!(unsafe { sys::lr_router_create(&opt, &mut r) }, sys::LR_OK);
    for i in 0..4u8 {
        let name = [b'h', b'0' + i, 0];
        let mut spec = init(sys::lr_instance_spec_init_sized);
        spec.name = name.as_ptr().cast();
        let mut id = 0;
        // SAFETY: live router, NUL-terminated name, out pointer.
        assert_eq!(
            unsafe { sys::lr_router_add_instance(r, &spec, &mut id) },
            sys::LR_OK
        );
    }
    let toks: Vec<u32> = (0..64).collect();
    let mut q = init(sys::lr_request_init_sized);
    q.tokens = toks.as_ptr();
    q.n_tokens = toks.len();
    q.now_ns = SEC;
    q.flags = sys::LR_ROUTE_DRY_RUN | sys::LR_ROUTE_SCORES;
    let mut buf = [sys::lr_score::default(); 4];
    let mut d = init(sys::lr_decision_init_sized);
    assert_eq!(d.score_size, 0);
    d.scores = buf.as_mut_ptr();
    d.scores_capacity = buf.len();
    d.score_size = sys::LR_SCORE_SIZE_V1 - 1;
    // SAFETY: live router; the request borrows toks and the decision buf
    // for the call.
    assert_eq!(
        unsafe { sys::lr_router_route(r, &q, &mut d) },
        sys::LR_EINVAL
    );
    d.score_size = 0;
    // SAFETY: as above.
    assert_eq!(unsafe { sys::lr_router_route(r, &q, &mut d) }, sys::LR_OK);
    assert_eq!(d.n_scores, 4);
    let ids: Vec<u32> = buf.iter().map(|s| s.instance).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    // SAFETY: owned, destroyed once.
    unsafe { sys::lr_router_destroy(r) };
}

#[test]
fn instances_drain_and_remove() {
    let (r, ids) = router(Policy::ROUND_ROBIN, &names(3));
    assert_eq!(r.instance_count(), 3);
    for (n, &id) in names(3).iter().zip(&ids) {
        assert_eq!(r.find_instance(n).unwrap(), id);
    }
    r.drain_instance(ids[0], true).unwrap();
    for i in 1..=6 {
        let d = r.route(&Request::new(i, &[1, 2, 3], SEC)).unwrap();
        assert_ne!(d.instance, ids[0], "routed to a draining instance");
    }
    let s = r.stats().unwrap();
    assert_eq!((s.instances, s.routable), (3, 2));
    r.drain_instance(ids[0], false).unwrap();
    let on_removed = r.instance_load(ids[1]).unwrap().inflight;
    assert!(on_removed > 0);
    r.remove_instance(ids[1]).unwrap();
    let lost = (1..=6)
        .filter(|&i| match r.complete(i, 1, 2 * SEC) {
            Ok(()) => false,
            Err(e) if e.kind() == ErrorKind::NotFound => true,
            Err(e) => panic!("{e}"),
        })
        .count();
    assert_eq!(lost as u32, on_removed);
    assert_eq!(
        r.find_instance(&names(3)[1]).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(r.instance_count(), 2);
}

#[test]
fn telemetry() {
    let (r, ids) = router(Policy::MIN_TTFT, &names(2));
    let mut spec = InstanceSpec::new("c:1");
    spec.class = 2;
    spec.prefix_caching = false;
    spec.rtt = Duration::from_millis(3);
    let c = r.add_instance(&spec).unwrap();
    let l = r.instance_load(c).unwrap();
    // The RTT given at add time stands in until a probe; the snapshot
    // shows probes only.
    assert!(
        l.class == 2 && !l.prefix_caching && l.rtt.is_none() && l.stats.is_none(),
        "{l:?}"
    );
    let scrape = EngineStats {
        running: 3,
        waiting: 4,
        kv_use: 0.5,
        scraped_ns: 10 * SEC,
    };
    r.set_stats(ids[0], &scrape).unwrap();
    r.set_stats(
        ids[0],
        &EngineStats {
            running: 9,
            scraped_ns: 9 * SEC,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        r.instance_load(ids[0]).unwrap().stats,
        Some(scrape),
        "an older scrape replaced a newer one"
    );
    r.observe_rtt(ids[1], Duration::from_millis(2)).unwrap();
    assert_eq!(
        r.instance_load(ids[1]).unwrap().rtt,
        Some(Duration::from_millis(2))
    );
    assert!(ClassSpec::default().prefill_tokens_per_s > 0.0);
    let mut slow = ClassSpec::default();
    slow.prefill_tokens_per_s = 100.0;
    r.set_class(0, &slow).unwrap();
    let mut fast = ClassSpec::default();
    fast.prefill_tokens_per_s = 1e6;
    r.set_class(2, &fast).unwrap();
    let toks = vec![0u32; 1000];
    let mut q = Request::new(1, &toks, 11 * SEC);
    q.flags = RouteFlags::DRY_RUN;
    let d = r.route(&q).unwrap();
    assert_eq!((d.instance, d.reason), (c, Reason::MIN_COST), "{d:?}");
    assert!(d.cost.is_some());
}

#[test]
fn kv_events() {
    let (r, ids) = router(Policy::PREFIX_CACHE, &names(3));
    let toks = prompt(128, 3);
    r.kv_stored(ids[2], &KvStored::new(&[0xa1, 0xa2], 64, &toks), SEC)
        .unwrap();
    let mut q = Request::new(1, &toks, SEC);
    q.flags = RouteFlags::NO_LEARN;
    let d = r.route(&q).unwrap();
    assert_eq!(
        (d.instance, d.cached_tokens, d.reason),
        (ids[2], 128, Reason::PREFIX_HIT)
    );
    assert_eq!(r.kv_removed(ids[2], &[0xa2, 0xdead]).unwrap(), 1);
    q.id = 2;
    q.flags = RouteFlags::DRY_RUN;
    assert_eq!(r.route(&q).unwrap().cached_tokens, 64);
    let mut orphan = KvStored::new(&[0xb2], 64, &toks[64..]);
    orphan.parent_hash = Some(0xb1);
    want_err(
        r.kv_stored(ids[2], &orphan, SEC),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_kv_stored",
    );
    let short = KvStored::new(&[1], 64, &toks[..10]);
    want_err(
        r.kv_stored(ids[2], &short, SEC),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_kv_stored",
    );
    r.kv_cleared(ids[2]).unwrap();
    assert_eq!(r.route(&q).unwrap().cached_tokens, 0);
}

/// Two gateway replicas with the same instance names agree through deltas.
#[test]
fn deltas_between_replicas() {
    let (a, _) = router(Policy::PREFIX_CACHE, &names(4));
    let (b, _) = router(Policy::PREFIX_CACHE, &names(4));
    let m0 = a.mark();
    let prompts: Vec<Vec<u32>> = (0..8).map(|i| prompt(200, i)).collect();
    let mut q;
    let mut where_ = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        q = Request::new(i as u64 + 1, p, SEC);
        where_.push(a.route(&q).unwrap().instance);
    }
    let (full, m1) = a.export_delta(0).unwrap();
    assert!(!full.is_empty() && m1 > m0);
    b.import_delta(&full, SEC).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        q = Request::new(i as u64 + 1, p, SEC);
        q.flags = RouteFlags::DRY_RUN;
        let d = b.route(&q).unwrap();
        assert_eq!(
            (d.instance, d.cached_tokens),
            (where_[i], 192),
            "prompt {i}"
        );
    }
    let extra = prompt(64, 100);
    a.route(&Request::new(100, &extra, SEC)).unwrap();
    let (inc, m2) = a.export_delta(m1).unwrap();
    assert!(
        !inc.is_empty() && inc.len() < full.len() && m2 > m1,
        "{} vs {}",
        inc.len(),
        full.len()
    );
    b.import_delta(&inc, SEC).unwrap();
    assert!(b.import_delta(&[], SEC).is_err());
    // A blob outlives the router that made it and can move threads.
    drop(a);
    let n = std::thread::spawn(move || full.len()).join().unwrap();
    assert!(n > 0);
}

#[test]
fn expire() {
    let mut o = RouterOptions::default();
    o.policy = Policy::PREFIX_CACHE;
    o.index_ttl = Duration::from_secs(1);
    let r = Router::new(&o).unwrap();
    r.add_instance(&InstanceSpec::new("a:1")).unwrap();
    let toks = prompt(64, 1);
    r.route(&Request::new(1, &toks, SEC)).unwrap();
    let mut q = Request::new(2, &toks, SEC);
    q.flags = RouteFlags::DRY_RUN;
    assert_eq!(r.route(&q).unwrap().cached_tokens, 64);
    r.expire(10 * SEC).unwrap();
    q.now_ns = 10 * SEC;
    assert_eq!(r.route(&q).unwrap().cached_tokens, 0);
    assert_eq!(
        RouterOptions::default().index_ttl,
        Duration::from_secs(3600)
    );
}

/// The router's index counters: learned, evicted for capacity, expired.
#[test]
fn index_stats() {
    let mut o = RouterOptions::default();
    o.policy = Policy::ROUND_ROBIN;
    o.index_capacity_blocks = 64;
    o.index_ttl = Duration::from_secs(1);
    let r = Router::new(&o).unwrap();
    r.add_instance(&InstanceSpec::new("a:1")).unwrap();
    r.add_instance(&InstanceSpec::new("b:1")).unwrap();
    assert_eq!(r.index_stats().unwrap().blocks, 0);
    // 40 distinct prompts of 4 blocks: 160 learned, 64 held.
    for i in 0..40u64 {
        let toks = prompt(64, 100 + i);
        r.route(&Request::new(i, &toks, SEC)).unwrap();
    }
    let s = r.index_stats().unwrap();
    assert_eq!(
        (
            s.learned_blocks,
            s.blocks,
            s.evicted_blocks,
            s.expired_blocks
        ),
        (160, 64, 96, 0)
    );
    r.expire(10 * SEC).unwrap();
    let s = r.index_stats().unwrap();
    assert_eq!((s.blocks, s.expired_blocks), (0, 64));
}

/// One slow and one fast instance under DualMap: the slow one's queue breaks
/// the SLO, and the plan moves requests to their other candidate.
#[test]
fn rebalance() {
    let (r, _) = router(Policy::DUALMAP, &[]);
    let mut spec = InstanceSpec::new("slow:1");
    let slow = r.add_instance(&spec).unwrap();
    spec = InstanceSpec::new("fast:1");
    spec.class = 1;
    let fast = r.add_instance(&spec).unwrap();
    let mut cls = ClassSpec::default();
    cls.prefill_tokens_per_s = 100.0;
    r.set_class(0, &cls).unwrap();
    cls.prefill_tokens_per_s = 1e6;
    r.set_class(1, &cls).unwrap();
    let mut on_slow = 0;
    for i in 1..=40 {
        let toks = prompt(300, i);
        let d = r.route(&Request::new(i, &toks, SEC)).unwrap();
        assert!(d.alt_instance.is_some(), "{d:?}");
        on_slow += (d.instance == slow) as u32;
    }
    assert!(on_slow > 0);
    let moves = r.rebalance_plan(SEC).unwrap();
    assert!(
        !moves.is_empty(),
        "no moves with {on_slow} requests queued on the slow instance"
    );
    let before = r.instance_load(fast).unwrap().queued;
    let mut seen = HashSet::new();
    for m in &moves {
        assert!(
            m.from == slow && m.to == fast && m.benefit_s > 0.0 && seen.insert(m.request_id),
            "{m:?}"
        );
        r.move_request(m.request_id, m.to).unwrap();
    }
    assert_eq!(
        r.instance_load(fast).unwrap().queued,
        before + moves.len() as u32
    );
    r.first_token(moves[0].request_id, 2 * SEC).unwrap();
    want_err(
        r.move_request(moves[0].request_id, slow),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_move",
    );
}

/// The router is Send + Sync: shared by threads through an Arc.
#[test]
fn concurrent_use() {
    let (r, _) = router(Policy::PREFIX_CACHE_AND_LOAD, &names(4));
    let r = Arc::new(r);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let r = Arc::clone(&r);
            std::thread::spawn(move || {
                let mut scores = Vec::new();
                for i in 0..200u64 {
                    let id = t * 1000 + i + 1;
                    let now = (i + 1) * SEC / 100;
                    let toks = prompt(64, i % 10);
                    r.route_with_scores(&Request::new(id, &toks, now), &mut scores)
                        .unwrap();
                    assert_eq!(scores.len(), 4);
                    r.complete(id, 1, now).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = r.stats().unwrap();
    assert_eq!((s.routes, s.inflight), (1600, 0));
}

#[test]
fn handles_are_send_and_the_right_ones_sync() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Router>();
    sync::<Router>();
    send::<Ring>();
    sync::<Ring>();
    send::<Index>();
    send::<Load>();
    send::<Mlp>();
    send::<Learner>();
    send::<LearnerServer>();
    send::<LearnerTrainer>();
    send::<Blob>();
    sync::<Blob>();
    send::<Error>();
    sync::<Error>();
}
