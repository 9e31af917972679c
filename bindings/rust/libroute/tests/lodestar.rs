//! The network, the learner (its two halves on two threads) and the
//! lodestar router (learn_step on a background thread while routing).

mod common;
use common::*;
use libroute::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// n rows of (x0, x1) in [-1, 1]^2 and y = x0 + x1.
fn plane(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut r = Rng(seed);
    let mut u = || (r.below(1 << 20) as f32 / (1 << 19) as f32) - 1.0;
    let x: Vec<f32> = (0..2 * n).map(|_| u()).collect();
    let y = x.chunks_exact(2).map(|p| p[0] + p[1]).collect();
    (x, y)
}

fn small_net(n_inputs: u32) -> MlpOptions {
    let mut o = MlpOptions::new(n_inputs);
    o.seed = 1;
    o.hidden_layers = 2;
    o.width = 16;
    o.batch_size = 32;
    o.dropout = 0.0;
    o.learning_rate = 0.01;
    o
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn mlp_options() {
    let d = MlpOptions::default();
    assert_eq!((d.n_inputs, d.hidden_layers, d.width), (0, 3, 128));
    assert_eq!((d.batch_size, d.dropout, d.grad_clip), (256, 0.1, 1.0));
    want_err(
        Mlp::new(&d),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_create",
    );
    for edit in [
        |o: &mut MlpOptions| o.width = 0,
        |o: &mut MlpOptions| o.hidden_layers = sys::LR_MLP_MAX_LAYERS + 1,
        |o: &mut MlpOptions| o.n_inputs = sys::LR_MLP_MAX_INPUTS + 1,
        |o: &mut MlpOptions| o.dropout = 0.95,
        |o: &mut MlpOptions| o.learning_rate = 0.0,
        |o: &mut MlpOptions| o.batch_size = 0,
    ] {
        let mut o = small_net(2);
        edit(&mut o);
        want_err(
            Mlp::new(&o),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_mlp_create",
        );
    }
    assert_eq!(Mlp::new(&small_net(5)).unwrap().n_inputs(), 5);
}

#[test]
fn mlp_learns_a_sum() {
    let (x, y) = plane(512, 1);
    let mut m = Mlp::new(&small_net(2)).unwrap();
    m.fit_normalization(&x, Some(&y)).unwrap();
    let before = m.loss(&x, &y).unwrap();
    let mut last = 0.0;
    for _ in 0..4 {
        last = m.train(&x, &y, 5).unwrap();
    }
    let after = m.loss(&x, &y).unwrap();
    assert!(
        before > 0.1 && after < before / 20.0 && last < before / 20.0,
        "loss {before} -> {after} (last epoch {last})"
    );
    let (tx, ty) = plane(64, 2);
    let pred = m.predict(&tx).unwrap();
    for (p, t) in pred.iter().zip(&ty) {
        assert!((p - t).abs() < 0.3, "predicted {p}, want {t}");
    }
    let mut out = [7.0f32; 70];
    m.predict_into(&tx, &mut out).unwrap();
    assert_eq!(bits(&out[..64]), bits(&pred));
    assert_eq!(out[64], 7.0);
    assert!(m.predict(&[]).unwrap().is_empty());
}

#[test]
fn mlp_clone_ranges_and_errors() {
    let (x, y) = plane(256, 3);
    let mut o = small_net(2);
    o.dropout = 0.2;
    let mut m = Mlp::new(&o).unwrap();
    assert_eq!(m.out_of_range(&[50.0, 50.0]).unwrap(), 0); // no fit yet
    m.fit_normalization(&x, None).unwrap();
    assert_eq!(
        m.out_of_range(&[0.0, 0.0, 5.0, 0.0, 0.0, -5.0, f32::NAN, 0.0])
            .unwrap(),
        3
    );
    assert_eq!(
        m.out_of_range_rows(&[0.0, 0.0, 5.0, 0.0, 0.0, -5.0, f32::NAN, 0.0])
            .unwrap(),
        vec![false, true, true, true]
    );
    assert!(m.out_of_range_rows(&[]).unwrap().is_empty());
    m.train(&x, &y, 2).unwrap();
    let mut c = m.try_clone().unwrap();
    assert_eq!(m.train(&x, &y, 2).unwrap(), c.train(&x, &y, 2).unwrap());
    assert_eq!(bits(&m.predict(&x).unwrap()), bits(&c.predict(&x).unwrap()));

    let want = m.predict(&x).unwrap();
    want_err(
        m.predict(&[1.0, 2.0, 3.0]),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_predict",
    );
    want_err(
        m.predict(&[0.0, f32::INFINITY]),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_predict",
    );
    want_err(
        m.predict_into(&x, &mut [0.0; 3]),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_predict",
    );
    want_err(
        m.train(&x, &y[..10], 1),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_train",
    );
    let mut nan = y.clone();
    nan[3] = f32::NAN;
    want_err(
        m.train(&x, &nan, 1),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_train",
    );
    want_err(
        m.loss(&x, &y[..1]),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_loss",
    );
    want_err(
        m.fit_normalization(&x, Some(&y[..3])),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_mlp_fit_normalization",
    );
    assert_eq!(
        bits(&m.predict(&x).unwrap()),
        bits(&want),
        "a failed call changed it"
    );
}

#[test]
fn mlp_save_load() {
    let (x, y) = plane(256, 4);
    let mut m = Mlp::new(&small_net(2)).unwrap();
    m.fit_normalization(&x, Some(&y)).unwrap();
    m.train(&x, &y, 5).unwrap();
    let data = m.save().unwrap();
    let mut m2 = Mlp::load(&data).unwrap();
    assert_eq!(m2.n_inputs(), 2);
    assert_eq!(
        bits(&m2.predict(&x).unwrap()),
        bits(&m.predict(&x).unwrap())
    );
    assert_eq!(&*m2.save().unwrap(), &*data);
    m2.train(&x, &y, 1).unwrap(); // a loaded network trains

    let mid = data.len() / 2;
    let mut flipped = data.to_vec();
    flipped[mid] ^= 0x40;
    let zeros = vec![0u8; data.len()];
    for bad in [
        &[][..],
        &data[..data.len() - 1],
        &data[..12],
        &flipped,
        &zeros,
    ] {
        want_err(
            Mlp::load(bad),
            ErrorKind::Corrupt,
            "LR_ECORRUPT",
            "lr_mlp_load",
        );
    }
    // A network moves to another thread (Send).
    let h = std::thread::spawn(move || m.predict(&[0.5, 0.25]).unwrap());
    assert_eq!(h.join().unwrap().len(), 1);
}

// ---- the learner -----------------------------------------------------------------

/// A feature row whose reward is -(f0 + f1) / 10.
fn lrow(i: usize) -> [f32; 3] {
    [(i % 7) as f32, (i % 5) as f32, 1.0]
}

fn lreward(r: &[f32]) -> f64 {
    -f64::from(r[0] + r[1]) / 10.0
}

fn learner_options(edit: impl FnOnce(&mut LearnerOptions)) -> LearnerOptions {
    let mut o = LearnerOptions::new(3);
    o.seed = 9;
    o.min_samples = 20;
    o.retrain_every = 10;
    o.epochs = 20;
    let mut net = small_net(0);
    net.hidden_layers = 1;
    o.mlp = Some(net);
    edit(&mut o);
    o
}

fn add(s: &mut LearnerServer, range: std::ops::Range<usize>) {
    for i in range {
        s.add_sample(&lrow(i), lreward(&lrow(i)), None).unwrap();
    }
}

#[test]
fn learner_schedule() {
    let mut l = Learner::new(&learner_options(|_| {})).unwrap();
    assert_eq!(l.n_features(), 3);
    let (s, t) = l.split_mut();
    add(s, 0..19);
    assert!(!t.step(LearnFlags::NONE).unwrap(), "19 < min_samples");
    want_err(
        s.score(&lrow(0)),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_learner_score",
    );
    want_err(
        s.score_rows(&lrow(0)),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_learner_score_rows",
    );
    add(s, 19..20);
    assert!(t.step(LearnFlags::NONE).unwrap());
    assert!(!t.step(LearnFlags::NONE).unwrap(), "nothing new");
    let x: Vec<f32> = [lrow(1), lrow(2)].concat();
    let (pred, ood) = s.score(&x).unwrap();
    assert_eq!((pred.len(), ood), (2, 0));
    let st = s.stats().unwrap();
    assert_eq!((st.model_round, st.model_samples, st.samples), (1, 20, 20));
    assert!(st.model_mse.is_finite() && st.online_mae.is_nan());
    add(s, 0..9);
    assert!(!t.step(LearnFlags::NONE).unwrap(), "9 < retrain_every");
    add(s, 9..10);
    assert!(t.step(LearnFlags::NONE).unwrap());
    s.score(&lrow(0)).unwrap();
    let st = s.stats().unwrap();
    assert_eq!((st.model_round, st.model_samples), (2, 30));
    let samples = t.samples().unwrap();
    assert_eq!((samples.len(), samples.x.len()), (30, 90));
    assert_eq!(samples.rows().count(), 30);
    assert!(samples.rows().all(|r| r.len() == 3));
}

#[test]
fn learner_force_score_and_drops() {
    let (mut s, mut t) = Learner::new(&learner_options(|o| {
        o.min_samples = 1000;
        o.epochs = 200;
        o.pending_capacity = 256;
        o.max_abs_reward = 2.0;
    }))
    .unwrap()
    .split();
    assert!(!t.step(LearnFlags::FORCE).unwrap(), "no samples");
    add(&mut s, 0..200);
    assert!(!t.step(LearnFlags::NONE).unwrap());
    assert!(t.step(LearnFlags::FORCE | LearnFlags::NONE).unwrap());
    let x: Vec<f32> = (0..35).flat_map(lrow).collect();
    let mut out = vec![0.0f32; 35];
    assert_eq!(s.score_into(&x, &mut out).unwrap(), 0);
    for (i, p) in out.iter().enumerate() {
        let want = lreward(&lrow(i));
        assert!(
            (f64::from(*p) - want).abs() < 0.15,
            "row {i}: {p} vs {want}"
        );
    }
    assert_eq!(s.score(&[50.0, 0.0, 1.0]).unwrap().1, 1);
    let far: Vec<f32> = [lrow(1), [50.0, 0.0, 1.0]].concat();
    let (pred, flags) = s.score_rows(&far).unwrap();
    assert_eq!(flags, vec![false, true]);
    assert_eq!(pred[0].to_bits(), out[1].to_bits());
    assert!(s.score_rows(&[]).unwrap().1.is_empty());
    for (i, p) in out.iter().enumerate().take(5) {
        s.add_sample(&lrow(i), lreward(&lrow(i)), Some(f64::from(*p)))
            .unwrap();
    }
    let st = s.stats().unwrap();
    assert!(st.predicted == 5 && st.online_mae < 0.15, "{st:?}");

    want_err(
        s.add_sample(&lrow(0), -3.0, None),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_learner_add_sample",
    );
    want_err(
        s.add_sample(&[1.0, 2.0], -1.0, None),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_learner_add_sample",
    );
    want_err(
        s.add_sample(&[1.0, f32::NAN, 0.0], -1.0, None),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_learner_add_sample",
    );
    t.step(LearnFlags::NONE).unwrap(); // drain the queue
    add(&mut s, 0..256);
    want_err(
        s.add_sample(&lrow(0), -0.1, None),
        ErrorKind::Limit,
        "LR_ELIMIT",
        "lr_learner_add_sample",
    );
    let st = s.stats().unwrap();
    assert_eq!((st.dropped_full, st.dropped_range), (1, 1));
    want_err(
        Learner::new(&LearnerOptions::default()),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_learner_create",
    );
    want_err(
        Learner::new(&learner_options(|o| o.mlp.as_mut().unwrap().width = 0)),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_learner_create",
    );
}

/// The two halves on two threads: the trainer's step trains while the
/// server keeps scoring. The C learner is freed with the last half.
#[test]
fn learner_halves_on_two_threads() {
    let (mut s, mut t) = Learner::new(&learner_options(|o| {
        o.min_samples = 50;
        o.retrain_every = 50;
        o.epochs = 300;
        o.mlp.as_mut().unwrap().width = 64;
    }))
    .unwrap()
    .split();
    add(&mut s, 0..50);
    assert!(t.step(LearnFlags::NONE).unwrap());
    add(&mut s, 0..400);
    let running = Arc::new(AtomicBool::new(true));
    let r2 = running.clone();
    let trainer = std::thread::spawn(move || {
        let trained = t.step(LearnFlags::NONE).unwrap();
        r2.store(false, Ordering::SeqCst);
        (trained, t)
    });
    let (mut n, mut during) = (0usize, 0usize);
    while running.load(Ordering::SeqCst) {
        s.score(&lrow(n)).unwrap();
        n += 1;
        during += 1;
    }
    let (trained, t) = trainer.join().unwrap();
    assert!(trained);
    assert!(during > 0, "score waited for step");
    s.score(&lrow(0)).unwrap();
    assert_eq!(s.stats().unwrap().model_round, 2);
    drop(s); // the trainer still holds the learner
    assert_eq!(t.samples().unwrap().len(), 450);
}

// ---- the lodestar router ---------------------------------------------------------

fn lodestar(edit: impl FnOnce(&mut LearnerOptions)) -> Router {
    let mut lo = LearnerOptions::default();
    lo.min_samples = 64;
    lo.retrain_every = 64;
    lo.epochs = 50;
    let mut net = small_net(0);
    net.width = 32;
    lo.mlp = Some(net);
    edit(&mut lo);
    let mut o = RouterOptions::default();
    o.policy = Policy::LODESTAR;
    o.seed = 11;
    o.learner = Some(lo);
    let r = Router::new(&o).unwrap();
    for n in names(4) {
        r.add_instance(&InstanceSpec::new(&n)).unwrap();
    }
    r
}

/// Routes requests whose TTFT grows with the instance id.
struct Workload<'a> {
    r: &'a Router,
    rng: Rng,
    id: u64,
    now: u64,
}

impl Workload<'_> {
    fn one(&mut self) -> Decision {
        self.id += 1;
        self.now += 1_000_000;
        let n = 32 + self.rng.below(368) as usize;
        let toks = prompt(n, self.id);
        let d = self
            .r
            .route(&Request::new(self.id, &toks, self.now))
            .unwrap();
        let ttft = u64::from(d.instance + 1) * 20_000_000;
        self.r.first_token(self.id, self.now + ttft).unwrap();
        self.r
            .complete(self.id, 16, self.now + 100_000_000)
            .unwrap();
        d
    }
}

#[test]
fn lodestar_router() {
    let r = lodestar(|_| {});
    let st = r.learner_stats().unwrap();
    assert_eq!((st.samples, st.model_round), (0, 0));
    let mut w = Workload {
        r: &r,
        rng: Rng(4),
        id: 0,
        now: SEC,
    };
    for _ in 0..80 {
        assert_eq!(w.one().reason, Reason::COLD_START);
    }
    let s = r.learner_samples().unwrap();
    assert!(s.is_empty() && s.n_features == lodestar_feature_count());
    assert!(r.learn_step(LearnFlags::NONE).unwrap());
    let s = r.learner_samples().unwrap();
    assert_eq!((s.len(), s.x.len()), (80, 80 * lodestar_feature_count()));
    // Rewards are -TTFT in seconds: 20..80 ms here.
    assert!(
        s.y.iter().all(|&y| (-0.081..-0.019).contains(&y)),
        "{:?}",
        s.y
    );
    for _ in 0..50 {
        assert_ne!(w.one().reason, Reason::COLD_START);
    }
    let st = r.learner_stats().unwrap();
    assert_eq!((st.model_round, st.model_samples, st.samples), (1, 80, 130));
    assert!(st.predicted > 0);
    assert_eq!(r.stats().unwrap().by_reason(Reason::COLD_START), 80);
    assert_eq!(
        Param::LODESTAR_FALLBACK.bounds().unwrap().default,
        f64::from(Policy::PREFIX_CACHE_AND_LOAD.raw())
    );
}

#[test]
fn lodestar_errors() {
    let (r, _) = router(Policy::RANDOM, &names(1));
    want_err(
        r.learn_step(LearnFlags::NONE),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_learn_step",
    );
    want_err(
        r.learner_stats(),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_learner_stats",
    );
    want_err(
        r.learner_samples(),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_learner_samples",
    );
    r.set_policy(Policy::LODESTAR).unwrap(); // makes the learner
    assert_eq!(r.learner_stats().unwrap().samples, 0);
    want_err(
        r.learn_step(LearnFlags::from_raw(8)),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_learn_step",
    );

    let mut o = RouterOptions::default();
    o.policy = Policy::LODESTAR;
    o.learner = Some(LearnerOptions::new(3)); // n_features is the router's
    want_err(
        Router::new(&o),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_create",
    );
    let mut net = MlpOptions::default();
    net.width = 0;
    let mut lo = LearnerOptions::new(lodestar_feature_count() as u32);
    lo.mlp = Some(net);
    o.learner = Some(lo);
    want_err(
        Router::new(&o),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_create",
    );
    o.learner = Some(LearnerOptions::new(lodestar_feature_count() as u32));
    Router::new(&o).unwrap();
}

/// The host's pattern: route on the serving thread, learn_step on a
/// background one (the router is Sync). The step trains outside the
/// router's mutex, so routes keep flowing while it runs.
#[test]
fn lodestar_learn_step_while_routing() {
    let r = lodestar(|lo| {
        lo.min_samples = 200;
        lo.epochs = 400;
        lo.mlp.as_mut().unwrap().width = 64;
    });
    let mut w = Workload {
        r: &r,
        rng: Rng(5),
        id: 0,
        now: SEC,
    };
    for _ in 0..200 {
        w.one();
    }
    let running = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let steps = AtomicUsize::new(0);
    let (mut n, mut during) = (0usize, 0usize);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while steps.load(Ordering::SeqCst) < 1000 {
                running.store(true, Ordering::SeqCst);
                let trained = r.learn_step(LearnFlags::NONE).unwrap();
                running.store(false, Ordering::SeqCst);
                steps.fetch_add(1, Ordering::SeqCst);
                if trained {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            done.store(true, Ordering::SeqCst);
        });
        while !done.load(Ordering::SeqCst) {
            w.one();
            n += 1;
            during += usize::from(running.load(Ordering::SeqCst));
        }
    });
    assert!(steps.load(Ordering::SeqCst) < 1000, "no model");
    assert!(during > 0, "route waited for learn_step ({n} routes)");
    for _ in 0..30 {
        assert_ne!(w.one().reason, Reason::COLD_START);
    }
    assert_eq!(r.learner_stats().unwrap().model_round, 1);
}

/// Steps racing on one router: one runs, the others get State.
#[test]
fn lodestar_concurrent_steps() {
    let r = lodestar(|lo| {
        lo.min_samples = 100;
        lo.epochs = 100;
    });
    let mut w = Workload {
        r: &r,
        rng: Rng(6),
        id: 0,
        now: SEC,
    };
    for _ in 0..300 {
        w.one();
    }
    let results: Vec<Result<bool>> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| r.learn_step(LearnFlags::FORCE)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().any(|x| matches!(x, Ok(true))), "{results:?}");
    for x in &results {
        if let Err(e) = x {
            assert_eq!(e.kind(), ErrorKind::State, "{e}");
        }
    }
}
