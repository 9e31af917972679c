//! Cost: kinds and parameters, eval against the header's formulas and the
//! policies' scores, GORGO's tuner, errors.

mod common;

use common::*;
use libroute::*;
use std::time::Duration;

fn rows() -> Vec<Candidate> {
    let mut a = Candidate::new(0);
    a.cached_tokens = 100;
    a.prefill_tokens = 4000;
    a.rtt_ms = 2.0;
    a.stall_s = 0.5;
    a.prompt_tokens = 3000;
    a.queued_tokens = 1000;
    a.kv_tokens = 5000;
    let mut b = Candidate::new(1);
    b.prefill_rate = 16000.0;
    b.kv_tokens = 33;
    vec![a, b]
}

fn cost(kind: CostKind) -> Cost {
    let mut o = CostOptions::new(kind);
    o.seed = 3;
    Cost::new(&o).unwrap()
}

#[test]
fn kinds_and_parameters() {
    assert_eq!(CostKind::count(), 3);
    assert_eq!(CostParam::count() as usize, CostParam::ALL.len());
    let names: Vec<_> = CostKind::ALL.iter().map(|k| k.name().unwrap()).collect();
    assert_eq!(names, ["ttft", "gorgo", "dynamo"]);
    assert_eq!(CostKind::from_raw(3).name(), None);
    assert_eq!(CostOptions::default().kind, CostKind::TTFT);
    let want: [(CostKind, &[(CostParam, f64)]); 3] = [
        (
            CostKind::TTFT,
            &[(CostParam::W_RTT, 1.0), (CostParam::W_STALL, 1.0)],
        ),
        (
            CostKind::GORGO,
            &[
                (CostParam::W_RTT, 0.5),
                (CostParam::W_QUEUE, 0.1),
                (CostParam::QUEUE_AT_FIRST_TOKEN, 0.0),
                (CostParam::SIGMA, 0.5),
                (CostParam::W_RTT_MAX, 2.0),
                (CostParam::W_QUEUE_MIN, 0.05),
            ],
        ),
        (
            CostKind::DYNAMO,
            &[
                (CostParam::W_UNCACHED, 1.0),
                (CostParam::BLOCK_TOKENS, 16.0),
            ],
        ),
    ];
    for (kind, params) in want {
        let c = cost(kind);
        assert_eq!(c.kind(), kind);
        assert_eq!(c.params().unwrap(), params, "{kind}");
        for &k in CostParam::ALL {
            match params.iter().find(|(p, _)| *p == k) {
                Some(&(_, v)) => {
                    let b = k.bounds(kind).unwrap();
                    assert!(
                        b.lo <= v && v <= b.hi && b.default == v,
                        "{kind} {k}: {b:?}"
                    );
                }
                None => {
                    want_err(
                        k.bounds(kind),
                        ErrorKind::NotSupported,
                        "LR_ENOTSUP",
                        "lr_cost_param_bounds",
                    );
                    want_err(
                        c.param(k),
                        ErrorKind::NotSupported,
                        "LR_ENOTSUP",
                        "lr_cost_get_param",
                    );
                }
            }
        }
    }
    assert!(
        CostParam::BLOCK_TOKENS
            .bounds(CostKind::DYNAMO)
            .unwrap()
            .integer
    );
    let mut d = cost(CostKind::DYNAMO);
    want_err(
        d.set_param(CostParam::BLOCK_TOKENS, 16.5),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_cost_set_param",
    );
    want_err(
        d.set_param(CostParam::W_UNCACHED, 1e9),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_cost_set_param",
    );
    want_err(
        d.set_param(CostParam::W_RTT, 1.0),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_cost_set_param",
    );
    d.set_param(CostParam::BLOCK_TOKENS, 32.0).unwrap();
    assert_eq!(d.param(CostParam::BLOCK_TOKENS).unwrap(), 32.0);
    want_err(
        Cost::new(&CostOptions::new(CostKind::from_raw(CostKind::count()))),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_cost_create",
    );
}

#[test]
fn eval_is_the_formula_and_the_policies_agree() {
    let rs = rows();
    let t = cost(CostKind::TTFT).eval(1000, &rs).unwrap();
    assert!(
        (t[0] - (4900.0 / 8000.0 + 0.002 + 0.5)).abs() < 1e-12,
        "{t:?}"
    );
    assert!((t[1] - 1000.0 / 16000.0).abs() < 1e-12);
    let mut g = cost(CostKind::GORGO);
    assert_eq!(
        g.eval(1000, &rs).unwrap(),
        [0.5 * 2.0 + 900.0 + 0.1 * 3000.0, 1000.0]
    );
    g.set_param(CostParam::QUEUE_AT_FIRST_TOKEN, 1.0).unwrap();
    assert_eq!(
        g.eval(1000, &rs).unwrap()[0],
        0.5 * 2.0 + 900.0 + 0.1 * 1000.0
    );
    assert_eq!(
        cost(CostKind::DYNAMO).eval(1000, &rs).unwrap(),
        [57.0 + 313.0, 63.0 + 3.0]
    );

    let mut min_ttft = cost(CostKind::TTFT);
    min_ttft.set_param(CostParam::W_RTT, 0.0).unwrap();
    min_ttft.set_param(CostParam::W_STALL, 0.0).unwrap();
    let input = PolicyInput::new(1000);
    let mut scores = Vec::new();
    for (p, c) in [
        (Policy::MIN_TTFT, min_ttft),
        (Policy::GORGO, cost(CostKind::GORGO)),
        (Policy::DYNAMO, cost(CostKind::DYNAMO)),
    ] {
        decide_into(p, &input, &rs, None, &mut scores).unwrap();
        assert_eq!(scores, c.eval(1000, &rs).unwrap(), "{p}");
    }

    let c = cost(CostKind::TTFT);
    assert!(c.eval(10, &[]).unwrap().is_empty());
    want_err(
        c.eval(50, &rs),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_cost_eval",
    );
    let mut bad = Candidate::new(0);
    bad.prefill_rate = f64::INFINITY;
    want_err(
        c.eval(10, &[bad]),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_cost_eval",
    );
    let mut short = [0.0; 1];
    want_err(
        c.eval_into(1000, &rs, &mut short),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_cost_eval",
    );
}

#[test]
fn gorgo_tunes() {
    let mut c = cost(CostKind::GORGO);
    let s = c.tuner_stats().unwrap();
    assert_eq!((s.state, s.samples), (TunerState::Off, 0));
    c.observe(Duration::from_secs(1)).unwrap(); // ignored: not tuning
    c.tune(true).unwrap();
    let s = c.tuner_stats().unwrap();
    assert_eq!(s.state, TunerState::Measuring);
    assert!(s.incumbent_p95_s.is_nan());
    let mut rng = Rng(1);
    let n = COST_TUNE_WINDOW + 10 * COST_TUNE_HOP;
    for _ in 0..n {
        c.observe(Duration::from_millis(100 + rng.below(900)))
            .unwrap();
    }
    let s = c.tuner_stats().unwrap();
    assert_eq!(s.samples, n as u64);
    assert!(s.trials > 0 && s.accepted <= s.trials, "{s:?}");
    assert!(
        !s.incumbent_p95_s.is_nan() && s.state != TunerState::Off,
        "{s:?}"
    );
    let w_rtt = c.param(CostParam::W_RTT).unwrap();
    let w_queue = c.param(CostParam::W_QUEUE).unwrap();
    assert!((0.05..=c.param(CostParam::W_RTT_MAX).unwrap()).contains(&w_rtt));
    assert!((c.param(CostParam::W_QUEUE_MIN).unwrap()..=0.5).contains(&w_queue));
    c.tune(false).unwrap();
    assert_eq!(c.tuner_stats().unwrap().state, TunerState::Off);
    for k in [CostKind::TTFT, CostKind::DYNAMO] {
        want_err(
            cost(k).tune(true),
            ErrorKind::NotSupported,
            "LR_ENOTSUP",
            "lr_cost_tune",
        );
    }
}

#[test]
fn cost_moves_between_threads() {
    let mut c = cost(CostKind::GORGO);
    c.tune(true).unwrap();
    let c = std::thread::spawn(move || {
        c.observe(Duration::from_millis(5)).unwrap();
        c
    })
    .join()
    .unwrap();
    assert_eq!(c.tuner_stats().unwrap().samples, 1);
}
