//! Disaggregated prefill and decode (tests/test-pd.c has the C shapes):
//! InstanceSpec::role and the placement, a split decision
//! (Decision::prefill_instance, prefill_reason, prefill_cached_tokens,
//! transfer_s), both legs' load, Router::prefill_done, a waiting request
//! let out with its prefill leg (Dispatched::prefill_instance), the
//! candidate rows' role and placement, and a standalone Load's prefill
//! leg.

mod common;

use common::*;
use libroute::*;

const MS: u64 = 1_000_000;
/// Param::KV_BYTES_PER_TOKEN's default.
const KVB: f64 = 131072.0;

fn spec(name: &str, role: Role, node: u32, rack: u32, region: u32) -> InstanceSpec<'_> {
    let mut s = InstanceSpec::new(name);
    s.role = role;
    s.node = node;
    s.rack = rack;
    s.region = region;
    s
}

/// Two decode instances (ids 0 and 2) and a prefill one (1), added
/// interleaved: d0 shares a rack with p1, d2 only the region.
fn pd_fleet(policy: Policy) -> Router {
    let (r, _) = router(policy, &[]);
    for (i, s) in [
        spec("d0:8000", Role::DECODE, 1, 1, 1),
        spec("p1:8000", Role::PREFILL, 2, 1, 1),
        spec("d2:8000", Role::DECODE, 3, 2, 1),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(r.add_instance(s).unwrap(), i as InstanceId, "{s:?}");
    }
    r
}

#[test]
fn constants() {
    assert_eq!(
        Role::ALL.iter().map(|r| r.raw()).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(Role::default(), Role::BOTH);
    assert_eq!(Role::PREFILL.to_string(), "PREFILL");
    assert_eq!(format!("{:?}", Role::from_raw(7)), "Role(7)");
    assert_eq!(Policy::LLMD_PD.raw(), 19);
    assert_eq!(Policy::LLMD_PD.name(), Some("llm-d-pd"));
    assert_eq!(Policy::DYNAMO_PD.raw(), 20);
    assert_eq!("dynamo-pd".parse::<Policy>().unwrap(), Policy::DYNAMO_PD);
    assert_eq!(Reason::WHOLE.raw(), 18);
    assert_eq!(Reason::WHOLE.name(), Some("whole"));
    for (p, key, def) in [
        (Param::KV_BYTES_PER_TOKEN, 49, KVB),
        (Param::KV_GBPS_NODE, 50, 300.0),
        (Param::KV_GBPS_RACK, 51, 50.0),
        (Param::KV_GBPS_REGION, 52, 12.5),
        (Param::KV_GBPS_WAN, 53, 1.25),
        (Param::PD_PREFILL_POLICY, 54, -1.0),
        (Param::PD_MIN_UNCACHED, 55, 16.0),
        (Param::PD_LOCAL_MAX_TOKENS, 56, 2048.0),
        (Param::PD_LOCAL_MAX_RATIO, 57, 0.7),
        (Param::ADAPTIVE_PD_STALL, 58, 0.1),
    ] {
        assert_eq!(p.raw(), key, "{p}");
        assert_eq!(p.bounds().unwrap().default, def, "{p}");
    }
    let c = Candidate::new(3);
    assert_eq!((c.role, c.node, c.rack, c.region), (Role::BOTH, 0, 0, 0));
    let s = InstanceSpec::new("x");
    assert_eq!((s.role, s.node, s.rack, s.region), (Role::BOTH, 0, 0, 0));
    assert_eq!(Dispatch::new(1, 0, 10, SEC).prefill, None);
}

/// A split decision on two decode instances and a prefill one; the legs'
/// load; prefill_done and its NotFound; the next turn kept whole.
#[test]
fn split_route() {
    let r = pd_fleet(Policy::LLMD_PD);
    let mut t = prompt(2000, 1);
    let d = r.route(&Request::new(1, &t, SEC)).unwrap();
    assert!(d.instance == 0 || d.instance == 2, "{d:?}");
    assert_eq!(d.prefill_instance, Some(1), "{d:?}");
    assert!(d.prefill_reason.is_some(), "{d:?}");
    assert_eq!(d.prefill_cached_tokens, 0);
    assert_eq!(d.decider, Some(Policy::LLMD_PD));
    // the placement priced it: the rack's bandwidth from d0, the region's
    // from d2, for the prompt the decode instance lacks
    let gbps = if d.instance == 0 { 50.0 } else { 12.5 };
    let want = f64::from(2000 - d.cached_tokens) * KVB / (gbps * 1e9);
    assert!(d.transfer_s > 0.0, "{d:?}");
    assert!(
        (d.transfer_s - want).abs() < 1e-12,
        "{} != {want}",
        d.transfer_s
    );
    let pre = r.instance_load(1).unwrap();
    assert_eq!(pre.inflight, 1);
    assert!(pre.prefill_tokens >= 2000 - 16, "{pre:?}");
    let dec = r.instance_load(d.instance).unwrap();
    assert_eq!((dec.inflight, dec.prefill_tokens), (1, 0));
    r.prefill_done(1, SEC + 100 * MS).unwrap();
    assert_eq!(r.instance_load(1).unwrap().inflight, 0);
    assert_eq!(r.instance_load(d.instance).unwrap().inflight, 1);
    r.prefill_done(1, SEC + 101 * MS).unwrap(); // a no-op
    want_err(
        r.prefill_done(77, SEC + 101 * MS),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_prefill_done",
    );
    r.first_token(1, SEC + 120 * MS).unwrap();
    r.complete(1, 50, 2 * SEC).unwrap();
    // the next turn: 8 new tokens stay whole where they decode
    t.extend(prompt(8, 2));
    let d2 = r.route(&Request::new(2, &t, 3 * SEC)).unwrap();
    assert_ne!(d2.instance, 1);
    assert!(d2.cached_tokens >= 2000 - 16, "{d2:?}");
    assert_eq!(d2.prefill_instance, None);
    assert_eq!(d2.prefill_reason, Some(Reason::WHOLE));
    assert_eq!(d2.transfer_s, 0.0);
}

/// A request let out of the waiting queue keeps its prefill leg: two
/// decode instances (0, 2) and two prefill ones (1, 3); the fleet is
/// saturated when both decode instances are, the idle prefill ones aside.
#[test]
fn waiting_pair() {
    let (r, _) = router(Policy::LLMD_PD, &[]);
    for (i, s) in [
        spec("d0", Role::DECODE, 0, 1, 1),
        spec("p1", Role::PREFILL, 0, 1, 1),
        spec("d2", Role::DECODE, 0, 2, 1),
        spec("p3", Role::PREFILL, 0, 2, 1),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(r.add_instance(s).unwrap(), i as InstanceId, "{s:?}");
    }
    let is_prefill = |id: InstanceId| id == 1 || id == 3;
    r.set_param(Param::SATURATION_QUEUE, 1.0).unwrap();
    for i in 0..2u64 {
        let t = prompt(1024, 40 + i);
        let mut q = Request::new(1 + i, &t, SEC + i * MS);
        q.flags = RouteFlags::MAY_WAIT;
        let d = r.route(&q).unwrap();
        assert!(
            d.instance != INSTANCE_NONE && !is_prefill(d.instance),
            "{d:?}"
        );
        assert!(d.prefill_instance.is_some_and(is_prefill), "{d:?}");
    }
    assert!(r.saturated(SEC + 2 * MS).unwrap());
    let t = prompt(1024, 50);
    let mut q = Request::new(3, &t, SEC + 3 * MS);
    q.flags = RouteFlags::MAY_WAIT;
    let d = r.route(&q).unwrap();
    assert_eq!((d.instance, d.reason), (INSTANCE_NONE, Reason::WAITING));
    assert_eq!(d.prefill_instance, None);
    r.first_token(1, SEC + 4 * MS).unwrap();
    let out = r.dispatch(SEC + 5 * MS).unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    let e = out[0];
    assert_eq!(e.request_id, 3);
    let dec = e.result.unwrap();
    assert!(!is_prefill(dec), "{e:?}");
    let pre = e.prefill_instance.expect("a prefill leg");
    assert!(is_prefill(pre), "{e:?}");
    assert_eq!(e.prefill_reason, Some(Reason::LEAST_LOADED));
    assert_eq!(e.prefill_cached_tokens, 0);
    assert!(e.transfer_s > 0.0, "{e:?}");
    assert_eq!(e.waited, std::time::Duration::from_millis(2));
    // both legs in flight until the prefill leg ends
    assert_eq!(r.instance_load(pre).unwrap().inflight, 1);
    r.prefill_done(3, SEC + 6 * MS).unwrap();
    assert_eq!(r.instance_load(pre).unwrap().inflight, 0);
}

/// An aggregated fleet keeps every request whole and says it could not
/// split; prefill_done on a request not split is a no-op.
#[test]
fn aggregated_fleet() {
    let (r, _) = router(Policy::LLMD_PD, &names(1));
    r.add_instance(&spec("b:1", Role::DECODE, 0, 0, 0)).unwrap();
    let d = r.route(&Request::new(1, &prompt(2000, 3), SEC)).unwrap();
    assert_eq!(
        (
            d.prefill_instance,
            d.prefill_reason,
            d.prefill_cached_tokens,
            d.transfer_s
        ),
        (None, None, 0, 0.0)
    );
    r.prefill_done(1, SEC + MS).unwrap();
    assert_eq!(r.stats().unwrap().inflight, 1);
}

/// The rows that decode come first, with their roles and placements;
/// decide over them replays the pair.
#[test]
fn roles_in_candidates() {
    let r = pd_fleet(Policy::LLMD_PD);
    let t = prompt(256, 5);
    let mut req = Request::new(1, &t, SEC);
    let mut rows = r.candidates(&req).unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|c| (c.instance, c.role, c.node, c.rack, c.region))
        .collect();
    assert_eq!(
        got,
        [
            (0, Role::DECODE, 1, 1, 1),
            (2, Role::DECODE, 3, 2, 1),
            (1, Role::PREFILL, 2, 1, 1)
        ]
    );
    let mut params = Vec::new();
    let mut input = r.policy_input(&req, &mut params).unwrap();
    req.flags = RouteFlags::DRY_RUN;
    let mut scores = Vec::new();
    let d = r.route_with_scores(&req, &mut scores).unwrap();
    assert_eq!(d.prefill_instance, Some(1), "{d:?}");
    // scores in the table's order
    let order: Vec<_> = scores.iter().map(|s| s.instance).collect();
    assert_eq!(order, [0, 2, 1]);
    input.seed = d.seed;
    let again = decide(r.policy(), &input, &rows).unwrap();
    assert_eq!(again, d);
    // a prefill row before a decode row is refused
    rows.swap(0, 2);
    want_err(
        decide(r.policy(), &input, &rows),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_policy_decide",
    );
}

#[test]
fn bad_roles() {
    let (r, _) = router(Policy::LLMD_PD, &[]);
    for role in [3, u32::MAX] {
        want_err(
            r.add_instance(&spec("x:1", Role::from_raw(role), 0, 0, 0)),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_router_add_instance",
        );
    }
    assert_eq!(r.instance_count(), 0);
    // prefill instances alone cannot decode
    r.add_instance(&spec("p:1", Role::PREFILL, 0, 0, 0))
        .unwrap();
    want_err(
        r.route(&Request::new(1, &prompt(64, 1), SEC)),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_route",
    );
}

/// A policy without a pair rule always splits, its prefill leg by
/// Param::PD_PREFILL_POLICY.
#[test]
fn prefill_policy() {
    let r = pd_fleet(Policy::LEAST_REQUEST);
    want_err(
        r.set_param(Param::PD_PREFILL_POLICY, f64::from(Policy::ADAPTIVE.raw())),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_set_param",
    );
    r.set_param(
        Param::PD_PREFILL_POLICY,
        f64::from(Policy::ROUND_ROBIN.raw()),
    )
    .unwrap();
    let d = r.route(&Request::new(1, &prompt(64, 6), SEC)).unwrap();
    assert_ne!(d.instance, 1);
    assert_eq!(d.prefill_instance, Some(1));
    assert_eq!(d.prefill_reason, Some(Reason::ROUND_ROBIN));
}

/// A standalone Load: the prefill leg counted at its instance until
/// prefill_done or the first token.
#[test]
fn load_prefill_leg() {
    let mut o = LoadOptions::default();
    o.max_instances = 4;
    let mut l = Load::new(&o).unwrap();
    for i in 0..3 {
        l.add_instance(i, 0, true).unwrap();
    }
    let mut d = Dispatch::new(1, 0, 2000, SEC);
    d.prefill = Some((2, 500));
    l.dispatch(&d).unwrap();
    let (pre, dec) = (l.get(2).unwrap(), l.get(0).unwrap());
    assert_eq!((pre.inflight, pre.queued, pre.prefill_tokens), (1, 1, 1500));
    assert_eq!((dec.inflight, dec.queued, dec.prefill_tokens), (1, 1, 0));
    let at = l.request(1).unwrap();
    assert_eq!((at.instance, at.queued), (0, true));
    l.prefill_done(1, SEC + MS).unwrap();
    assert_eq!(l.get(2).unwrap().inflight, 0);
    assert_eq!(l.get(0).unwrap().inflight, 1);
    l.prefill_done(1, SEC + MS).unwrap(); // a no-op
    want_err(
        l.prefill_done(9, SEC),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_load_prefill_done",
    );
    // the first token ends an open prefill leg too
    let mut d = Dispatch::new(2, 1, 100, SEC);
    d.prefill = Some((2, 0));
    l.dispatch(&d).unwrap();
    assert_eq!(l.get(2).unwrap().inflight, 1);
    l.first_token(2, SEC + MS).unwrap();
    assert_eq!(l.get(2).unwrap().inflight, 0);
    // bad legs
    for (prefill, kind, name) in [
        ((0, 0), ErrorKind::Invalid, "LR_EINVAL"),
        ((2, 101), ErrorKind::Invalid, "LR_EINVAL"),
        ((3, 0), ErrorKind::NotFound, "LR_ENOENT"),
    ] {
        let mut d = Dispatch::new(3, 0, 100, SEC);
        d.prefill = Some(prefill);
        want_err(l.dispatch(&d), kind, name, "lr_load_dispatch");
    }
    assert_eq!(l.inflight(), 2);
}
