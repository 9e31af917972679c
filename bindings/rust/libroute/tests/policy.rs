//! Policies over candidate tables: decide(), ring keys, Router::candidates,
//! reason counts, and the replay of routes from their table and seed.

mod common;

use common::*;
use libroute::*;
use std::time::Duration;

fn rows(ids: &[InstanceId]) -> Vec<Candidate> {
    ids.iter().map(|&i| Candidate::new(i)).collect()
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

#[test]
fn decide_follows_each_rule() {
    let mut rs = rows(&[0, 1, 2]);
    rs[0].inflight = 4;
    rs[1].inflight = 1;
    rs[2].inflight = 3;
    let mut input = PolicyInput::new(100);
    input.seed = 3;
    let mut scores = Vec::new();
    let d = decide_into(Policy::LEAST_REQUEST, &input, &rs, None, &mut scores).unwrap();
    assert_eq!(
        (d.instance, d.reason, d.decider, d.seed, d.alt_instance),
        (
            1,
            Reason::LEAST_LOADED,
            Some(Policy::LEAST_REQUEST),
            3,
            None
        )
    );
    assert_eq!(scores.len(), 3);
    assert!(scores.iter().all(|&s| s >= scores[1]), "{scores:?}");
    assert_eq!(decide(Policy::LEAST_REQUEST, &input, &rs).unwrap(), d);

    // min-ttft: (prefill + prompt - cached) / rate.
    let mut rs = rows(&[0, 1]);
    rs[0].prefill_tokens = 16000;
    rs[1].cached_tokens = 512;
    rs[1].prefill_tokens = 800;
    let d = decide(Policy::MIN_TTFT, &PolicyInput::new(1024), &rs).unwrap();
    assert_eq!(
        (d.instance, d.cached_tokens, d.best_cached_tokens),
        (1, 512, 512)
    );
    assert!((d.cost.unwrap() - (800.0 + 1024.0 - 512.0) / 8000.0).abs() < 1e-12);

    // Round-robin follows last_instance.
    let rs = rows(&[2, 5, 9]);
    let mut input = PolicyInput::new(1);
    input.last_instance = Some(5);
    assert_eq!(
        decide(Policy::ROUND_ROBIN, &input, &rs).unwrap().instance,
        9
    );
    input.last_instance = Some(9);
    assert_eq!(
        decide(Policy::ROUND_ROBIN, &input, &rs).unwrap().instance,
        2
    );

    // Deterministic for a seed, and the seed matters.
    let rs = rows(&(0..16).collect::<Vec<_>>());
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut input = PolicyInput::new(10);
        input.seed = seed;
        let a = decide(Policy::RANDOM, &input, &rs).unwrap();
        assert_eq!(
            decide(Policy::RANDOM, &input, &rs).unwrap().instance,
            a.instance
        );
        seen.insert(a.instance);
    }
    assert!(seen.len() > 4, "{seen:?}");

    // Parameters: prefix-cache follows a hit of PREFIX_MIN_RATIO or more.
    let mut rs = rows(&[0, 1]);
    rs[0].cached_tokens = 300;
    rs[0].inflight = 5;
    let mut input = PolicyInput::new(1000);
    assert_eq!(
        decide(Policy::PREFIX_CACHE, &input, &rs).unwrap().instance,
        1
    );
    let mut params = Param::defaults();
    params[Param::PREFIX_MIN_RATIO.raw() as usize] = 0.2;
    input.params = &params;
    let d = decide(Policy::PREFIX_CACHE, &input, &rs).unwrap();
    assert_eq!((d.instance, d.reason), (0, Reason::PREFIX_HIT));
    input.params = &params[..1]; // shorter: the rest take their defaults
    assert_eq!(
        decide(Policy::PREFIX_CACHE, &input, &rs).unwrap().instance,
        0
    );
}

/// adaptive with a TTFT budget keeps its least-cost row when that is
/// predicted to meet it, takes the one predicted to meet it when it would
/// not (SLO_SWITCH), and the fastest when none would. Row 0 queues 2 s of
/// prefill and decodes nothing; row 1 queues nothing but decodes 100
/// requests at 0.1 s each to a first token: its cost is far above row 0's,
/// its predicted TTFT far below.
#[test]
fn adaptive_meets_a_ttft_budget() {
    let mut rs = rows(&[0, 1]);
    rs[0].prefill_tokens = 16000;
    rs[1].instance_class = 1;
    rs[1].inflight = 100;
    rs[1].ttft_s_per_decoding = 0.1;
    rs[1].ttft_s_per_token = 1.0 / 8000.0;
    for r in &mut rs {
        r.prefill_rate = 8000.0;
    }
    let b = Param::ADAPTIVE_DEADLINE.bounds().unwrap();
    assert_eq!((b.default, b.integer), (1.0, true));
    let cases = [
        (0.0, 1.0, 0, Reason::MIN_COST),    // no deadline
        (5.0, 1.0, 0, Reason::MIN_COST),    // row 0 meets 5 s
        (1.0, 1.0, 1, Reason::SLO_SWITCH),  // only row 1 meets 1 s
        (0.01, 1.0, 1, Reason::SLO_SWITCH), // none does: the fastest
        (1.0, 0.0, 0, Reason::MIN_COST),    // switched off
    ];
    for (budget, on, want, reason) in cases {
        let mut params = Param::defaults();
        params[Param::ADAPTIVE_DEADLINE.raw() as usize] = on;
        let mut input = PolicyInput::new(800);
        input.seed = 3;
        input.params = &params;
        input.ttft_budget_s = budget;
        let d = decide(Policy::ADAPTIVE, &input, &rs).unwrap();
        assert_eq!(
            (d.instance, d.reason),
            (want, reason),
            "budget {budget} on {on}"
        );
    }
    // No budget by default; the parameter is on by default.
    let mut input = PolicyInput::new(800);
    input.seed = 3;
    assert_eq!(input.ttft_budget_s, 0.0);
    assert_eq!(decide(Policy::ADAPTIVE, &input, &rs).unwrap().instance, 0);
    input.ttft_budget_s = 1.0;
    assert_eq!(decide(Policy::ADAPTIVE, &input, &rs).unwrap().instance, 1);
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        input.ttft_budget_s = bad;
        want_err(
            decide(Policy::ADAPTIVE, &input, &rs),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_policy_decide",
        );
    }
}

#[test]
fn decide_refuses_bad_input() {
    const OP: &str = "lr_policy_decide";
    let good = rows(&[0, 1]);
    let input = PolicyInput::new(10);
    let bad = |f: &dyn Fn(&mut Vec<Candidate>)| {
        let mut rs = rows(&[0, 1]);
        f(&mut rs);
        rs
    };
    let invalid = |r| want_err(r, ErrorKind::Invalid, "LR_EINVAL", OP);
    invalid(decide(Policy::RANDOM, &input, &[]));
    invalid(decide(
        Policy::RANDOM,
        &input,
        &bad(&|r| r[1].cached_tokens = 11),
    ));
    invalid(decide(
        Policy::MIN_TTFT,
        &input,
        &bad(&|r| r[0].prefill_rate = 0.0),
    ));
    invalid(decide(Policy::RANDOM, &input, &bad(&|r| r[0].kv_use = 1.5)));
    invalid(decide(
        Policy::GORGO,
        &input,
        &bad(&|r| r[0].rtt_ms = f64::NAN),
    ));
    want_err(
        decide(Policy::from_raw(Policy::count()), &input, &good),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        OP,
    );
    let mut params = Param::defaults();
    params[Param::PREFIX_MIN_RATIO.raw() as usize] = 2.0;
    let mut input = PolicyInput::new(10);
    input.params = &params;
    want_err(
        decide(Policy::PREFIX_CACHE, &input, &good),
        ErrorKind::Range,
        "LR_ERANGE",
        OP,
    );
    // A fraction for an integer key is LR_EINVAL, as for set_param.
    let mut params = Param::defaults();
    params[Param::LODESTAR_CANDIDATES.raw() as usize] = 1.5;
    input.params = &params;
    invalid(decide(Policy::LODESTAR, &input, &good));

    let mut small = Mlp::new(&MlpOptions::new(3)).unwrap();
    let mut scores = Vec::new();
    invalid(decide_into(
        Policy::LODESTAR,
        &PolicyInput::new(10),
        &good,
        Some(&mut small),
        &mut scores,
    ));
}

#[test]
fn lodestar_with_and_without_a_model() {
    let mut rs = rows(&[0, 1, 2, 3]);
    for (i, r) in rs.iter_mut().enumerate() {
        r.inflight = i as u32;
    }
    let mut input = PolicyInput::new(100);
    input.seed = 1;
    let cold = decide(Policy::LODESTAR, &input, &rs).unwrap();
    assert_eq!(
        (cold.reason, cold.decider),
        (Reason::COLD_START, Some(Policy::PREFIX_CACHE_AND_LOAD))
    );
    let mut params = Param::defaults();
    params[Param::LODESTAR_EPSILON.raw() as usize] = 0.0;
    input.params = &params;
    let mut o = MlpOptions::new(lodestar_feature_count() as u32);
    o.seed = 5;
    let mut m = Mlp::new(&o).unwrap();
    let mut scores = Vec::new();
    let d = decide_into(Policy::LODESTAR, &input, &rs, Some(&mut m), &mut scores).unwrap();
    assert_eq!(d.decider, Some(Policy::LODESTAR));
    assert!(
        d.reason != Reason::COLD_START && d.reason != Reason::OOD,
        "{d:?}"
    );
    let again = decide_into(Policy::LODESTAR, &input, &rs, Some(&mut m), &mut scores).unwrap();
    assert_eq!(again, d);
}

/// DualMap over a table with no ring rank 1 (0: not among the ring's
/// candidates, or no ring) has no ring candidates and decides by load.
#[test]
fn dualmap_without_ring_ranks_decides_by_load() {
    let mut input = PolicyInput::new(10);
    input.seed = 5;
    let mut rs = rows(&[0, 1, 2]);
    for (r, n) in rs.iter_mut().zip([3, 1, 2]) {
        r.inflight = n;
    }
    let d = decide(Policy::DUALMAP, &input, &rs).unwrap();
    assert_eq!(
        (d.instance, d.reason, d.decider),
        (1, Reason::LEAST_LOADED, Some(Policy::DUALMAP))
    );
    // Ranks other than 1 are no help either.
    for (r, (n, rank)) in rs.iter_mut().zip([(2, 2), (4, 0), (0, 3)]) {
        r.inflight = n;
        r.ring_rank = rank;
    }
    let d = decide(Policy::DUALMAP, &input, &rs).unwrap();
    assert_eq!((d.instance, d.reason), (2, Reason::LEAST_LOADED));
}

/// A table may name one instance twice: the policies rank rows.
#[test]
fn duplicate_instance_ids_are_ranked_as_rows() {
    let mut input = PolicyInput::new(10);
    input.seed = 9;
    let mut rs = rows(&[3, 3, 4]);
    for (r, n) in rs.iter_mut().zip([5, 1, 2]) {
        r.inflight = n;
    }
    let mut scores = Vec::new();
    let d = decide_into(Policy::LEAST_REQUEST, &input, &rs, None, &mut scores).unwrap();
    assert_eq!(d.instance, 3);
    assert!(scores[1] < scores[0] && scores[1] < scores[2], "{scores:?}");
    for p in [Policy::RANDOM, Policy::MIN_TTFT, Policy::GORGO] {
        let d = decide(p, &input, &rs).unwrap();
        assert!(d.instance == 3 || d.instance == 4, "{p}: {d:?}");
    }
}

#[test]
fn ring_keys() {
    for &p in Policy::ALL {
        let (key, ranks) = p.ring_key().unwrap();
        assert!(ranks <= sys::LR_RING_MAX_K, "{p}");
        assert_eq!(key == RingKey::NONE, ranks == 0, "{p}: {key} {ranks}");
    }
    assert_eq!(Policy::RANDOM.ring_key().unwrap(), (RingKey::NONE, 0));
    assert_eq!(
        Policy::SESSION_AFFINITY.ring_key().unwrap().0,
        RingKey::SESSION
    );
    assert_eq!(Policy::DUALMAP.ring_key().unwrap().0, RingKey::HOTNESS);
    want_err(
        Policy::from_raw(Policy::count()).ring_key(),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_policy_ring_key",
    );
}

#[test]
fn router_candidates_and_reason_counts() {
    let (r, _) = router(Policy::PREFIX_CACHE, &names(40));
    let mut class = ClassSpec::default();
    class.prefill_tokens_per_s = 20000.0;
    r.set_class(1, &class).unwrap();
    for i in (0..40).step_by(3) {
        r.observe_rtt(i, Duration::from_millis(2)).unwrap();
    }
    r.drain_instance(7, true).unwrap();
    let toks: Vec<u32> = (0..256).map(|i| i * 7).collect();
    let d = r.route(&Request::new(1, &toks, SEC)).unwrap();
    let req = Request::new(0, &toks, SEC);
    let rs = r.candidates(&req).unwrap();
    let ids: Vec<InstanceId> = rs.iter().map(|c| c.instance).collect();
    assert_eq!(ids, (0..40).filter(|&i| i != 7).collect::<Vec<_>>());
    for c in &rs {
        assert_eq!((c.prefill_rate, c.prefix_caching), (8000.0, 1), "{c:?}");
        if c.instance == d.instance {
            assert_eq!((c.cached_tokens, c.inflight), (256, 1));
        }
        if c.instance % 3 == 0 {
            assert_eq!(c.rtt_ms, 2.0);
        }
    }
    assert_eq!(r.candidates(&req).unwrap(), rs); // changes nothing
    let s = r.stats().unwrap();
    assert_eq!((s.routes, s.dry_runs), (1, 0));

    let counts = r.reason_counts().unwrap();
    assert_eq!(counts.len(), Reason::count() as usize);
    assert_eq!(counts.iter().sum::<u64>(), 1);
    assert_eq!(counts[d.reason.raw() as usize], 1);
    for (i, &n) in s.by_reason.iter().enumerate() {
        assert_eq!(counts[i], n);
    }

    let (empty, _) = router(Policy::RANDOM, &[]);
    want_err(
        empty.candidates(&req),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_candidates",
    );
}

/// Six instances of two classes, one without prefix caching, one with
/// scraped stats.
fn replay_fleet(p: Policy, learner: Option<LearnerOptions>) -> Router {
    let mut o = RouterOptions::default();
    o.policy = p;
    o.seed = 11;
    o.learner = learner;
    let r = Router::new(&o).unwrap_or_else(|e| panic!("Router::new({p}): {e}"));
    for i in 0..6u32 {
        let name = format!("10.1.0.{i}:8000");
        let mut s = InstanceSpec::new(&name);
        s.class = i % 2;
        s.rtt = Duration::from_micros(250 * (i as u64 + 1));
        s.prefix_caching = i != 5;
        r.add_instance(&s).unwrap();
    }
    let mut class = ClassSpec::default();
    class.prefill_tokens_per_s = 30000.0;
    r.set_class(1, &class).unwrap();
    let st = EngineStats {
        running: 7,
        waiting: 3,
        kv_use: 0.6,
        scraped_ns: SEC,
    };
    r.set_stats(2, &st).unwrap();
    r
}

/// Routes `req` as a dry run and, unless `dry_only`, for real, and replays
/// each through Router::candidates + Router::policy_input (both taken
/// before the routes) + decide_into with the route's seed and `model`:
/// instance, reason, cost, cached tokens, alternative, decider and every
/// score must agree. Returns the last decision.
#[track_caller]
fn replay(
    what: &str,
    r: &Router,
    mut req: Request<'_>,
    mut model: Option<&mut Mlp>,
    dry_only: bool,
) -> Decision {
    let rs = r.candidates(&req).unwrap();
    let mut params = Vec::new();
    let mut input = r.policy_input(&req, &mut params).unwrap();
    let (mut scores, mut replayed) = (Vec::new(), Vec::new());
    let flags: &[RouteFlags] = if dry_only {
        &[RouteFlags::DRY_RUN]
    } else {
        &[RouteFlags::DRY_RUN, RouteFlags::NONE]
    };
    let mut last = None;
    for &flags in flags {
        req.flags = flags;
        let d = r.route_with_scores(&req, &mut scores).unwrap();
        input.seed = d.seed;
        let e = decide_into(r.policy(), &input, &rs, model.as_deref_mut(), &mut replayed)
            .unwrap_or_else(|e| panic!("{what}: replay: {e}"));
        assert_eq!(
            (e.instance, e.reason, e.cached_tokens, e.best_cached_tokens),
            (d.instance, d.reason, d.cached_tokens, d.best_cached_tokens),
            "{what} flags {flags:?}"
        );
        assert_eq!(
            (e.alt_instance, e.decider, e.seed, e.cost.is_some()),
            (d.alt_instance, d.decider, d.seed, d.cost.is_some()),
            "{what} flags {flags:?}"
        );
        assert!(same(e.cost.unwrap_or(0.0), d.cost.unwrap_or(0.0)), "{what}");
        assert_eq!(replayed.len(), scores.len(), "{what}");
        for (k, s) in scores.iter().enumerate() {
            assert_eq!(rs[k].instance, s.instance);
            assert!(same(replayed[k], s.score), "{what} row {k}");
        }
        last = Some(d);
    }
    last.unwrap()
}

/// Router::candidates plus Router::policy_input plus decide with the
/// route's seed reproduce the route: instance, reason, cost, cached
/// tokens, alternative, decider and every score, for every policy
/// (Lodestar cold here; trained below), dry runs and recorded routes
/// alike.
#[test]
fn replay_agrees_with_route() {
    let shared = prompt(600, 99);
    for &p in Policy::ALL {
        let r = replay_fleet(p, None);
        let mut rng = Rng(p.raw() as u64 + 1);
        let mut last = None;
        let mut now = SEC;
        for i in 0..24u64 {
            now += 37_000_000;
            let toks: Vec<u32> = if i % 3 == 0 {
                shared.clone()
            } else {
                let mut t = shared[..64 * (i as usize % 6)].to_vec();
                t.extend((0..200 + 13 * i).map(|_| rng.below(50000) as u32));
                t
            };
            let mut req = Request::new(i, &toks, now);
            req.tenant_salt = i % 2;
            req.expected_output_tokens = (i % 4) as u32 * 50;
            if i % 5 == 0 {
                req.session = Some(1000 + i % 2);
            }
            // The cursor is the last instance round-robin chose.
            let mut params = Vec::new();
            let input = r.policy_input(&req, &mut params).unwrap();
            assert_eq!(input.last_instance, last, "{p} request {i}");
            let d = replay(&format!("{p} request {i}"), &r, req, None, false);
            if d.decider == Some(Policy::ROUND_ROBIN) {
                last = Some(d.instance);
            }
            if i % 4 == 3 {
                r.first_token(i - 1, now).unwrap();
            }
            if i % 6 == 5 {
                r.complete(i - 4, 20, now).unwrap();
            }
        }
        assert_eq!(r.stats().unwrap().routes, 24);
    }
}

/// A trained Lodestar router replays with the model learner_save exports.
#[test]
fn replay_trained_lodestar() {
    let mut lo = LearnerOptions::default();
    lo.min_samples = 64;
    lo.retrain_every = 64;
    lo.epochs = 5;
    let mut net = MlpOptions::default();
    net.hidden_layers = 2;
    net.width = 16;
    lo.mlp = Some(net);
    let r = replay_fleet(Policy::LODESTAR, Some(lo));
    want_err(
        r.learner_save(),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_learner_save",
    );
    // The model decides wherever it can (no out-of-range fallback).
    r.set_param(Param::LODESTAR_OOD, 0.0).unwrap();
    let mut now = SEC;
    for i in 0..160u64 {
        now += 5_000_000;
        let toks = prompt(150 + (i % 40) as usize, i % 24);
        r.route(&Request::new(i, &toks, now)).unwrap();
        r.first_token(i, now + (1 + i % 7) * 1_000_000).unwrap();
        if i % 3 == 0 {
            r.complete(i, 10, now + 9_000_000).unwrap();
        }
    }
    assert!(r.learn_step(LearnFlags::FORCE).unwrap());
    let blob = r.learner_save().unwrap();
    let mut m = Mlp::load(&blob).unwrap();
    assert_eq!(m.n_inputs(), lodestar_feature_count());
    for k in 0..24u64 {
        now += 1_000_000;
        let toks = prompt(150 + 7 * k as usize, k % 24);
        let mut req = Request::new(1000 + k, &toks, now);
        req.session = Some(k % 3);
        let d = replay(
            &format!("lodestar request {k}"),
            &r,
            req,
            Some(&mut m),
            false,
        );
        assert_eq!(d.decider, Some(Policy::LODESTAR), "request {k}");
    }
    // The model in service is still the one exported.
    assert_eq!(&*r.learner_save().unwrap(), &*blob);
}

/// GORGO during a tuner trial: the weights in service are not the
/// incumbent Router::params reports, and policy_input has the ones in
/// service.
#[test]
fn replay_gorgo_during_a_trial() {
    let r = replay_fleet(Policy::GORGO, None);
    let mut now = SEC;
    for i in 0..200u64 {
        // a trial runs after the first window
        now += 2_000_000;
        let toks = prompt(150 + (i % 40) as usize, i % 24);
        r.route(&Request::new(i, &toks, now)).unwrap();
        r.first_token(i, now + (1 + i % 5) * 1_000_000).unwrap();
        r.complete(i, 4, now + 9_000_000).unwrap();
    }
    let probe = vec![0u32; 256];
    let mut served = Vec::new();
    r.policy_input(&Request::new(0, &probe, 0), &mut served)
        .unwrap();
    let incumbent = r.params().unwrap();
    let w = [
        Param::GORGO_W_RTT.raw() as usize,
        Param::GORGO_W_QUEUE.raw() as usize,
    ];
    assert_ne!(
        w.map(|k| served[k]),
        w.map(|k| incumbent[k]),
        "no trial running"
    );
    for k in 0..12u64 {
        now += 1_000_000;
        let toks = prompt(150 + 11 * k as usize, k % 24);
        replay(
            &format!("gorgo request {k}"),
            &r,
            Request::new(1000 + k, &toks, now),
            None,
            false,
        );
    }
    // No first token since: the trial goes on.
    let mut again = Vec::new();
    r.policy_input(&Request::new(0, &probe, 0), &mut again)
        .unwrap();
    assert_eq!(again, served);
}

#[test]
fn router_policy_input() {
    const OP: &str = "lr_router_policy_input";
    let (r, _) = router(Policy::ROUND_ROBIN, &names(4));
    let toks = vec![0u32; 100];
    let mut req = Request::new(0, &toks, 0);
    req.expected_output_tokens = 7;
    let mut params = vec![1.0; 3]; // reused and resized
    let input = r.policy_input(&req, &mut params).unwrap();
    assert_eq!(
        (
            input.prompt_tokens,
            input.expected_output_tokens,
            input.block_tokens,
            input.last_instance,
            input.seed,
            input.params.len(),
            input.ttft_budget_s
        ),
        (100, 7, 16, None, 0, Param::count() as usize, 0.0)
    );
    assert_eq!(
        input.params[Param::PREFIX_MIN_RATIO.raw() as usize],
        r.param(Param::PREFIX_MIN_RATIO).unwrap()
    );
    // A deadline reaches the policy as the seconds left at now_ns.
    let mut p = Vec::new();
    for (deadline, budget) in [
        (3 * SEC, 2.0),
        (SEC + SEC / 4, 0.25),
        (SEC, 1e-9),
        (SEC - 1, 1e-9),
        (0, 0.0),
    ] {
        let mut q = Request::new(0, &toks, SEC);
        q.deadline_ns = deadline;
        let input = r.policy_input(&q, &mut p).unwrap();
        assert_eq!(input.ttft_budget_s, budget, "deadline {deadline}");
    }
    // The router's default output applies to 0, as in route().
    r.set_param(Param::DEFAULT_OUTPUT_TOKENS, 300.0).unwrap();
    req.expected_output_tokens = 0;
    let input = r.policy_input(&req, &mut params).unwrap();
    assert_eq!(input.expected_output_tokens, 300);
    let d = r.route(&Request::new(1, &toks, SEC)).unwrap();
    let input = r.policy_input(&req, &mut params).unwrap();
    assert_eq!(input.last_instance, Some(d.instance));
    // Checked as route() checks a request; nothing changes.
    let mut bad = Request::new(0, &toks, 0);
    bad.boundaries = &[50, 10];
    want_err(
        r.policy_input(&bad, &mut params),
        ErrorKind::Invalid,
        "LR_EINVAL",
        OP,
    );
    let s = r.stats().unwrap();
    assert_eq!((s.routes, s.dry_runs), (1, 0));
    // No learner: nothing to save.
    want_err(
        r.learner_save(),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_learner_save",
    );
}
