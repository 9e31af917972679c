//! The waiting queue: `RouteFlags::MAY_WAIT` holds a request while the
//! fleet is saturated, `dispatch` lets it out, deadlines expire it, `fail`
//! withdraws it, sheddable requests are refused; urgency bands, fair share
//! between tenants, the queue's bounds, `saturated` and the counters.
mod common;

use common::*;
use libroute::*;
use std::time::Duration;

/// A router with one instance, saturated once `saturation_queue` of its
/// requests wait for their first token.
fn one_instance(saturation_queue: f64, opt: impl FnOnce(&mut RouterOptions)) -> Router {
    let mut o = RouterOptions::default();
    o.policy = Policy::LEAST_REQUEST;
    o.seed = 1;
    opt(&mut o);
    let r = Router::new(&o).unwrap();
    r.add_instance(&InstanceSpec::new("10.0.0.1:8000")).unwrap();
    r.set_param(Param::SATURATION_QUEUE, saturation_queue)
        .unwrap();
    r
}

/// Routes request `id` (64 tokens of its own) with `flags`, `urgency` and
/// `tenant`.
fn route(
    r: &Router,
    id: u64,
    now_ns: u64,
    flags: RouteFlags,
    urgency: u32,
    tenant: u64,
) -> Decision {
    try_route(r, id, now_ns, flags, urgency, tenant).unwrap_or_else(|e| panic!("route {id}: {e}"))
}

fn try_route(
    r: &Router,
    id: u64,
    now_ns: u64,
    flags: RouteFlags,
    urgency: u32,
    tenant: u64,
) -> Result<Decision> {
    let toks = prompt(64, id);
    let mut q = Request::new(id, &toks, now_ns);
    q.flags = flags;
    q.urgency = urgency;
    q.tenant = tenant;
    r.route(&q)
}

const WAIT: RouteFlags = RouteFlags::MAY_WAIT;
const NONE: RouteFlags = RouteFlags::NONE;

#[test]
fn waits_while_saturated_then_dispatches() {
    let r = one_instance(1.0, |_| {});
    assert!(!r.saturated(SEC).unwrap());
    assert_eq!(route(&r, 1, SEC, WAIT, 0, 0).instance, 0);
    assert!(r.saturated(SEC).unwrap());
    let toks = prompt(48, 2);
    let mut q = Request::new(2, &toks, SEC);
    q.flags = WAIT;
    q.tenant = 7;
    q.urgency = 2;
    let d = r.route(&q).unwrap();
    assert_eq!((d.instance, d.reason), (INSTANCE_NONE, Reason::WAITING));
    assert_eq!((d.cached_tokens, d.cost, d.alt_instance), (0, None, None));
    let st = r.stats().unwrap();
    assert_eq!(
        (st.waiting, st.waiting_tokens, st.waited, st.inflight),
        (1, 48, 1, 1)
    );
    assert_eq!(r.dispatch(SEC + 1).unwrap(), []);
    r.first_token(1, 2 * SEC).unwrap();
    assert!(!r.saturated(2 * SEC).unwrap());
    let out = r.dispatch(3 * SEC).unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    let e = out[0];
    assert_eq!((e.request_id, e.result), (2, Ok(0)));
    assert_ne!(e.reason, Reason::WAITING);
    assert_eq!(
        (e.waited, e.urgency, e.tenant),
        (Duration::from_secs(2), 2, 7)
    );
    assert!(r.saturated(3 * SEC).unwrap()); // recorded in flight
    let st = r.stats().unwrap();
    assert_eq!(
        (
            st.waiting,
            st.waiting_tokens,
            st.inflight,
            st.waited_dispatched
        ),
        (0, 0, 2, 1)
    );
    assert_eq!(st.wait_ns, 2 * SEC);
    r.first_token(2, 4 * SEC).unwrap();
    r.complete(1, 10, 5 * SEC).unwrap();
    r.complete(2, 10, 5 * SEC).unwrap();
    assert_eq!(r.stats().unwrap().inflight, 0);
}

#[test]
fn only_requests_that_may_wait_wait() {
    let r = one_instance(1.0, |_| {});
    route(&r, 1, SEC, NONE, 0, 0);
    assert_eq!(route(&r, 2, SEC, NONE, 0, 0).instance, 0);
    let dry = route(&r, 3, SEC, WAIT | RouteFlags::DRY_RUN, 0, 0);
    assert_eq!(dry.instance, 0, "a dry run waited");
    let st = r.stats().unwrap();
    assert_eq!((st.waited, st.inflight), (0, 2));
}

#[test]
fn sheddable_is_refused() {
    let r = one_instance(1.0, |_| {});
    route(&r, 1, SEC, NONE, 0, 0);
    want_err(
        try_route(&r, 2, SEC, WAIT | RouteFlags::SHEDDABLE, 0, 0),
        ErrorKind::Busy,
        "LR_EBUSY",
        "lr_router_route",
    );
    let st = r.stats().unwrap();
    assert_eq!((st.shed, st.waiting, st.inflight), (1, 0, 1));
    r.first_token(1, 2 * SEC).unwrap();
    // Nothing was recorded: the id is free.
    let d = route(&r, 2, 2 * SEC, WAIT | RouteFlags::SHEDDABLE, 0, 0);
    assert_eq!(d.instance, 0);
}

#[test]
fn deadlines_expire_and_fail_withdraws() {
    let r = one_instance(1.0, |_| {});
    route(&r, 1, SEC, NONE, 0, 0);
    let toks = prompt(64, 2);
    let mut q = Request::new(2, &toks, SEC);
    q.flags = WAIT;
    q.deadline_ns = 3 * SEC;
    q.tenant = 5;
    assert_eq!(r.route(&q).unwrap().reason, Reason::WAITING);
    route(&r, 3, SEC, WAIT, 0, 0);
    assert_eq!(r.dispatch(2 * SEC).unwrap(), []);
    let out = r.dispatch(3 * SEC).unwrap(); // at the deadline
    assert_eq!(out.len(), 1, "{out:?}");
    let e = out[0];
    assert_eq!((e.request_id, e.tenant), (2, 5));
    assert_eq!(e.waited, Duration::from_secs(2));
    want_err(
        e.result,
        ErrorKind::Expired,
        "LR_EEXPIRED",
        "lr_router_dispatch",
    );

    r.fail(3, 3 * SEC).unwrap();
    r.first_token(1, 4 * SEC).unwrap();
    assert_eq!(r.dispatch(4 * SEC).unwrap(), [], "a cancelled request went");
    want_err(
        r.fail(3, 4 * SEC),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_fail",
    );
    let st = r.stats().unwrap();
    assert_eq!(
        (
            st.waited_expired,
            st.waited_cancelled,
            st.waited_dispatched,
            st.waiting
        ),
        (1, 1, 0, 0)
    );
}

#[test]
fn urgency_then_fair_share_then_arrival() {
    let r = one_instance(1.0, |_| {});
    route(&r, 1, SEC, NONE, 0, 0);
    for id in [10, 11, 12] {
        route(&r, id, SEC, WAIT, 5, 1);
    }
    route(&r, 20, SEC, WAIT, 5, 2);
    route(&r, 30, SEC, WAIT, 0, 1);
    let mut order = Vec::new();
    let mut prev = 1;
    for t in 2..=6 {
        r.first_token(prev, t * SEC).unwrap();
        let out = r.dispatch(t * SEC).unwrap();
        assert_eq!(out.len(), 1, "{out:?}");
        prev = out[0].request_id;
        order.push(prev);
    }
    assert_eq!(order[0], 30, "{order:?}");
    assert!(order[1..3].contains(&20), "{order:?}");
    let tenant1: Vec<u64> = order
        .iter()
        .copied()
        .filter(|id| (10..20).contains(id))
        .collect();
    assert_eq!(tenant1, [10, 11, 12]);
}

#[test]
fn never_overtakes_requests_as_urgent() {
    let r = one_instance(1.0, |_| {});
    route(&r, 1, SEC, NONE, 0, 0);
    route(&r, 2, SEC, WAIT, 4, 0);
    r.first_token(1, 2 * SEC).unwrap();
    assert!(!r.saturated(2 * SEC).unwrap());
    assert_eq!(route(&r, 3, 2 * SEC, WAIT, 4, 0).reason, Reason::WAITING);
    assert_eq!(route(&r, 4, 2 * SEC, WAIT, 1, 0).instance, 0);
}

#[test]
fn dispatch_into_and_many_at_once() {
    let r = one_instance(1.0, |_| {});
    route(&r, 1, SEC, NONE, 0, 0);
    let ids: Vec<u64> = (100..300).collect();
    for &id in &ids {
        route(&r, id, SEC, WAIT, 0, 0);
    }
    for p in [Param::SATURATION_QUEUE, Param::SATURATION_PREFILL_S] {
        let hi = p.bounds().unwrap().hi;
        r.set_param(p, hi).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(r.dispatch_into(2 * SEC, 0, &mut out), Ok(0));
    assert_eq!(r.dispatch_into(2 * SEC, 1, &mut out), Ok(1));
    assert_eq!(out[0].request_id, ids[0]);
    // More than one chunk at a time.
    assert_eq!(r.dispatch_into(2 * SEC, 150, &mut out), Ok(150));
    let rest = r.dispatch(2 * SEC).unwrap();
    out.extend(rest);
    let got: Vec<u64> = out.iter().map(|e| e.request_id).collect();
    assert_eq!(got, ids);
    assert!(out.iter().all(|e| e.result == Ok(0)));
    let st = r.stats().unwrap();
    assert_eq!(
        (st.waiting, st.waited_dispatched, st.inflight),
        (0, ids.len() as u64, ids.len() as u64 + 1)
    );
}

#[test]
fn bounds_and_errors() {
    let d = RouterOptions::default();
    assert!(d.queue_capacity > 0 && d.queue_tenants > 0 && d.queue_tokens > 0);
    for set in [
        |o: &mut RouterOptions| o.queue_capacity = sys::LR_ROUTER_MAX_WAITING + 1,
        |o: &mut RouterOptions| o.queue_tenants = sys::LR_ROUTER_MAX_TENANTS + 1,
        |o: &mut RouterOptions| o.queue_tokens = sys::LR_ROUTER_MAX_QUEUE_TOKENS + 1,
    ] {
        let mut o = RouterOptions::default();
        set(&mut o);
        want_err(
            Router::new(&o),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_router_create",
        );
    }

    let r = one_instance(1.0, |o| o.queue_capacity = 2);
    route(&r, 1, SEC, NONE, 0, 0);
    route(&r, 2, SEC, WAIT, 0, 0);
    route(&r, 3, SEC, WAIT, 0, 0);
    want_err(
        try_route(&r, 4, SEC, WAIT, 0, 0),
        ErrorKind::Limit,
        "LR_ELIMIT",
        "lr_router_route",
    );
    want_err(
        try_route(&r, 5, SEC, WAIT, URGENCIES, 0),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_route",
    );
    want_err(
        r.saturated(1_000_000 * SEC),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_router_saturated",
    );
    let e = r.dispatch(1_000_000 * SEC).unwrap_err();
    assert!(e.dispatched.is_empty());
    want_err(
        Err::<(), Error>(e.into()),
        ErrorKind::Range,
        "LR_ERANGE",
        "lr_router_dispatch",
    );

    // Saturation from a scrape, and with no routable instance.
    let r = one_instance(8.0, |_| {});
    assert!(!r.saturated(SEC).unwrap());
    let kv = r.param(Param::SATURATION_KV).unwrap();
    let s = EngineStats {
        running: 1,
        waiting: 0,
        kv_use: kv,
        scraped_ns: SEC,
    };
    r.set_stats(0, &s).unwrap();
    assert!(r.saturated(SEC).unwrap());
    r.remove_instance(0).unwrap();
    assert!(r.saturated(SEC).unwrap());
}
