"""The waiting queue: route(may_wait=True) holds a request while the fleet
is saturated, dispatch() lets it out, deadlines expire it, fail()
withdraws it, sheddable requests are refused; urgency bands, fair share
between tenants, the queue's bounds, saturated() and the counters."""

from __future__ import annotations

import math
import unittest

import libroute as L
from support import tokens

S = 10**9
NONE = L.INSTANCE_NONE


def one_instance(saturation_queue=1, **kw):
    """A router with one instance, saturated once `saturation_queue` of its
    requests wait for their first token."""
    r = L.Router("least-request", seed=1, **kw)
    r.add_instance("10.0.0.1:8000")
    r.set_param(L.Param.SATURATION_QUEUE, saturation_queue)
    return r


class Waiting(unittest.TestCase):

    def test_waits_while_saturated_then_dispatches(self):
        with one_instance() as r:
            self.assertFalse(r.saturated(S))
            d = r.route(tokens(64, 1), request_id=1, now_ns=S,
                        may_wait=True)
            self.assertEqual(d.instance, 0)   # not saturated: at once
            self.assertTrue(r.saturated(S))
            d = r.route(tokens(48, 2), request_id=2, now_ns=S,
                        may_wait=True, tenant=7, urgency=2)
            self.assertEqual(d.instance, NONE)
            self.assertIs(d.reason, L.Reason.WAITING)
            self.assertEqual((d.cached_tokens, d.alt_instance), (0, None))
            self.assertTrue(math.isnan(d.cost))
            st = r.stats()
            self.assertEqual((st.waiting, st.waiting_tokens, st.waited),
                             (1, 48, 1))
            self.assertEqual(st.inflight, 1)
            # Still saturated: nothing goes.
            self.assertEqual(r.dispatch(S + 1), [])
            r.first_token(1, now_ns=2 * S)
            self.assertFalse(r.saturated(2 * S))
            out = r.dispatch(3 * S)
            self.assertEqual(len(out), 1)
            e = out[0]
            self.assertIsInstance(e, L.Dispatched)
            self.assertEqual((e.request_id, e.status, e.instance),
                             (2, L.Status.OK, 0))
            self.assertIsInstance(e.reason, L.Reason)
            self.assertIsNot(e.reason, L.Reason.WAITING)
            self.assertEqual((e.waited_ns, e.urgency, e.tenant),
                             (2 * S, 2, 7))
            # Routed and recorded in flight, as route() records.
            self.assertTrue(r.saturated(3 * S))
            st = r.stats()
            self.assertEqual((st.waiting, st.waiting_tokens, st.inflight),
                             (0, 0, 2))
            self.assertEqual((st.waited_dispatched, st.wait_ns), (1, 2 * S))
            self.assertEqual(r.dispatch(3 * S), [])
            r.first_token(2, now_ns=4 * S)
            r.complete(2, 10, now_ns=5 * S)
            r.complete(1, 10, now_ns=5 * S)
            self.assertEqual(r.stats().inflight, 0)

    def test_without_the_flag_a_request_goes_at_once(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            self.assertTrue(r.saturated(S))
            d = r.route(tokens(64, 2), request_id=2, now_ns=S)
            self.assertEqual(d.instance, 0)
            self.assertEqual(r.stats().waited, 0)

    def test_dry_run_never_waits(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            d = r.route(tokens(64, 2), request_id=2, now_ns=S,
                        may_wait=True, dry_run=True)
            self.assertEqual(d.instance, 0)
            st = r.stats()
            self.assertEqual((st.waiting, st.waited, st.inflight), (0, 0, 1))

    def test_sheddable_is_refused(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            with self.assertRaises(L.BusyError) as cm:
                r.route(tokens(64, 2), request_id=2, now_ns=S,
                        may_wait=True, sheddable=True)
            self.assertIs(cm.exception.status, L.Status.EBUSY)
            self.assertEqual(cm.exception.function, "lr_router_route")
            st = r.stats()
            self.assertEqual((st.shed, st.waiting, st.waited, st.inflight),
                             (1, 0, 0, 1))
            # Nothing was recorded: the id is free.
            r.first_token(1, now_ns=2 * S)
            d = r.route(tokens(64, 2), request_id=2, now_ns=2 * S,
                        may_wait=True, sheddable=True)
            self.assertEqual(d.instance, 0)

    def test_deadline_expires(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            d = r.route(tokens(64, 2), request_id=2, now_ns=S,
                        may_wait=True, deadline_ns=3 * S, tenant=5)
            self.assertIs(d.reason, L.Reason.WAITING)
            self.assertEqual(r.dispatch(2 * S), [])
            out = r.dispatch(3 * S)  # at the deadline
            self.assertEqual(len(out), 1)
            e = out[0]
            self.assertEqual((e.request_id, e.status, e.instance, e.tenant),
                             (2, L.Status.EEXPIRED, NONE, 5))
            self.assertEqual(e.waited_ns, 2 * S)
            st = r.stats()
            self.assertEqual((st.waiting, st.waited_expired,
                              st.waited_dispatched), (0, 1, 0))
            # Expired even once the fleet has room.
            r.route(tokens(64, 3), request_id=3, now_ns=3 * S,
                    may_wait=True, deadline_ns=4 * S)
            r.first_token(1, now_ns=5 * S)
            out = r.dispatch(5 * S)
            self.assertEqual([(e.request_id, e.status) for e in out],
                             [(3, L.Status.EEXPIRED)])
            with self.assertRaises(L.NotFoundError):
                r.first_token(3, now_ns=5 * S)

    def test_fail_withdraws_a_waiting_request(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            r.route(tokens(64, 2), request_id=2, now_ns=S, may_wait=True)
            r.fail(2, now_ns=2 * S)
            st = r.stats()
            self.assertEqual((st.waiting, st.waited_cancelled), (0, 1))
            r.first_token(1, now_ns=2 * S)
            self.assertEqual(r.dispatch(3 * S), [])
            with self.assertRaises(L.NotFoundError):
                r.fail(2, now_ns=3 * S)

    def test_most_urgent_first(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            r.route(tokens(64, 2), request_id=2, now_ns=S, may_wait=True,
                    urgency=5)
            r.route(tokens(64, 3), request_id=3, now_ns=S, may_wait=True,
                    urgency=0)
            r.route(tokens(64, 4), request_id=4, now_ns=S, may_wait=True,
                    urgency=5)
            order, prev = [], 1
            for t in range(2, 5):
                r.first_token(prev, now_ns=t * S)
                out = r.dispatch(t * S)
                self.assertEqual(len(out), 1)   # saturated again after one
                prev = out[0].request_id
                order.append((prev, out[0].urgency))
            self.assertEqual(order, [(3, 0), (2, 5), (4, 5)])

    def test_never_overtakes_requests_as_urgent(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            r.route(tokens(64, 2), request_id=2, now_ns=S, may_wait=True,
                    urgency=4)
            r.first_token(1, now_ns=2 * S)   # room, but 2 has not gone yet
            self.assertFalse(r.saturated(2 * S))
            d = r.route(tokens(64, 3), request_id=3, now_ns=2 * S,
                        may_wait=True, urgency=4)
            self.assertIs(d.reason, L.Reason.WAITING)
            # Less urgent ones would wait too: a sheddable one is refused.
            with self.assertRaises(L.BusyError):
                r.route(tokens(64, 4), request_id=4, now_ns=2 * S,
                        may_wait=True, sheddable=True, urgency=6)
            # More urgent than every waiting one, and room: at once.
            d = r.route(tokens(64, 5), request_id=5, now_ns=2 * S,
                        may_wait=True, urgency=1)
            self.assertEqual(d.instance, 0)

    def test_fair_share_between_tenants(self):
        with one_instance() as r:
            r.route(tokens(64, 1), request_id=1, now_ns=S)
            for rid in (10, 11, 12):            # tenant 1 first, three
                r.route(tokens(64, rid), request_id=rid, now_ns=S,
                        may_wait=True, tenant=1)
            r.route(tokens(64, 20), request_id=20, now_ns=S, may_wait=True,
                    tenant=2)                   # tenant 2 later, one
            order, prev = [], 1
            for t in range(2, 6):
                r.first_token(prev, now_ns=t * S)
                out = r.dispatch(t * S)
                self.assertEqual(len(out), 1)
                prev = out[0].request_id
                order.append((out[0].tenant, prev))
            # Tenant 2's one request does not wait behind all of tenant
            # 1's; within a tenant, arrival order.
            self.assertIn((2, 20), order[:2])
            self.assertEqual([rid for tenant, rid in order if tenant == 1],
                             [10, 11, 12])

    def test_capacity_and_many_at_once(self):
        with one_instance() as r:
            r.route(tokens(16, 1), request_id=1, now_ns=S)
            ids = list(range(100, 300))
            for rid in ids:
                r.route(tokens(16, rid), request_id=rid, now_ns=S,
                        may_wait=True)
            self.assertEqual(r.stats().waiting, len(ids))
            for p in (L.Param.SATURATION_QUEUE, L.Param.SATURATION_PREFILL_S):
                r.set_param(p, p.bounds.hi)
            self.assertEqual(r.dispatch(2 * S, capacity=0), [])
            one = r.dispatch(2 * S, capacity=1)
            self.assertEqual([e.request_id for e in one], ids[:1])
            # Without a capacity: every one that may go (several calls).
            rest = r.dispatch(2 * S)
            self.assertEqual([e.request_id for e in rest], ids[1:])
            self.assertTrue(all(e.status is L.Status.OK and e.instance == 0
                                for e in rest))
            st = r.stats()
            self.assertEqual((st.waiting, st.waited_dispatched, st.inflight),
                             (0, len(ids), len(ids) + 1))
            with self.assertRaises(ValueError):
                r.dispatch(2 * S, capacity=-1)

    def test_queue_bounds(self):
        with one_instance(queue_capacity=2) as r:
            r.route(tokens(16, 1), request_id=1, now_ns=S)
            r.route(tokens(16, 2), request_id=2, now_ns=S, may_wait=True)
            r.route(tokens(16, 3), request_id=3, now_ns=S, may_wait=True)
            with self.assertRaises(L.LimitError):
                r.route(tokens(16, 4), request_id=4, now_ns=S,
                        may_wait=True)
            self.assertEqual(r.stats().waiting, 2)
        with one_instance(queue_tokens=100) as r:
            r.route(tokens(16, 1), request_id=1, now_ns=S)
            r.route(tokens(64, 2), request_id=2, now_ns=S, may_wait=True)
            with self.assertRaises(L.LimitError):
                r.route(tokens(64, 3), request_id=3, now_ns=S,
                        may_wait=True)
            self.assertEqual(r.stats().waiting_tokens, 64)
        for key, limit in (("queue_capacity", "LR_ROUTER_MAX_WAITING"),
                           ("queue_tenants", "LR_ROUTER_MAX_TENANTS"),
                           ("queue_tokens", "LR_ROUTER_MAX_QUEUE_TOKENS")):
            with self.subTest(option=key):
                with self.assertRaises(L.InvalidArgumentError):
                    L.Router(**{key: L.constants[limit] + 1})
                L.Router(**{key: L.constants[limit]}).close()
        with one_instance() as r:
            urgencies = L.constants["LR_ROUTER_URGENCIES"]
            with self.assertRaises(L.InvalidArgumentError):
                r.route(tokens(16, 1), request_id=1, now_ns=S,
                        may_wait=True, urgency=urgencies)
            with self.assertRaises(ValueError):
                r.route(tokens(16, 1), request_id=1, now_ns=S,
                        may_wait=True, tenant=-1)

    def test_saturation(self):
        with L.Router("least-request") as r:
            self.assertTrue(r.saturated(S))     # no routable instance
            r.add_instance("10.0.0.1:8000")
            n = int(r.get_param(L.Param.SATURATION_QUEUE))
            self.assertEqual(n, L.Param.SATURATION_QUEUE.bounds.default)
            for i in range(n - 1):
                r.route(tokens(16, i), request_id=i, now_ns=S)
            self.assertFalse(r.saturated(S))
            r.route(tokens(16, n), request_id=n, now_ns=S)
            self.assertTrue(r.saturated(S))
            r.first_token(n, now_ns=S)
            self.assertFalse(r.saturated(S))
            # A fresh scrape that says the KV cache is full.
            kv = r.get_param(L.Param.SATURATION_KV)
            r.set_stats(0, running=1, waiting=0, kv_use=kv, scraped_ns=S)
            self.assertTrue(r.saturated(S))
            r.drain_instance(0)
            self.assertTrue(r.saturated(S))
            with self.assertRaises(L.OutOfRangeError):
                r.saturated(10**6 * S)          # ahead of the clock
            with self.assertRaises(L.OutOfRangeError):
                r.dispatch(10**6 * S)
            r.close()
            with self.assertRaises(L.ClosedError):
                r.saturated(S)
            with self.assertRaises(L.ClosedError):
                r.dispatch(S)


if __name__ == "__main__":
    unittest.main()
