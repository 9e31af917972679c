"""Router: instances, route and decisions, lifecycle, telemetry,
parameters, rebalancing, KV events, deltas, statistics, ownership."""

from __future__ import annotations

import array
import gc
import math
import unittest
import weakref

import libroute as L
from support import msgpack_batch, tokens

S = 10**9
NAMES = [f"10.0.0.{i}:8000" for i in range(1, 9)]


def make(policy="prefix-cache-and-load", n=8, **kw):
    r = L.Router(policy, seed=kw.pop("seed", 42), **kw)
    for name in NAMES[:n]:
        r.add_instance(name)
    return r


class Create(unittest.TestCase):

    def test_policy_spellings(self):
        for spelling in ("dualmap", "DUALMAP", L.Policy.DUALMAP,
                         int(L.Policy.DUALMAP)):
            with L.Router(spelling) as r:
                self.assertIs(r.policy, L.Policy.DUALMAP)
        with L.Router() as r:  # the library's default
            self.assertIs(r.policy, L.Policy.PREFIX_CACHE_AND_LOAD)
        with self.assertRaises(ValueError):
            L.Router("no-such-policy")

    def test_every_supported_policy_routes(self):
        for p in L.Policy:
            with self.subTest(policy=p.label):
                with make(p, n=4) as r:
                    d = r.route(tokens(300), request_id=1, now_ns=S)
                    self.assertIn(d.instance, range(4))
                    self.assertIsInstance(d.reason, L.Reason)

    def test_bad_options(self):
        with self.assertRaises(L.InvalidArgumentError):
            L.Router(max_instances=L.constants["LR_ROUTER_MAX_INSTANCES"]
                     + 1)
        with self.assertRaises(ValueError):
            L.Router(seed=-1)

    def test_switch_policy(self):
        with make() as r:
            r.policy = "round-robin"
            self.assertIs(r.policy, L.Policy.ROUND_ROBIN)
            r.set_policy(L.Policy.RANDOM)
            self.assertIs(r.policy, L.Policy.RANDOM)
            with self.assertRaises(L.LrError):
                r.set_policy(999)


class Instances(unittest.TestCase):

    def test_add_find_drain_remove(self):
        with L.Router("round-robin") as r:
            ids = [r.add_instance(n, rtt_ns=1000) for n in NAMES[:4]]
            self.assertEqual(ids, [0, 1, 2, 3])
            self.assertEqual(r.instance_count, 4)
            self.assertEqual(r.find_instance(NAMES[2]), 2)
            with self.assertRaises(L.NotFoundError):
                r.find_instance("nobody")
            with self.assertRaises(L.AlreadyExistsError):
                r.add_instance(NAMES[0])
            r.drain_instance(1)
            seen = {r.route(tokens(20, i), request_id=i, now_ns=S).instance
                    for i in range(12)}
            self.assertEqual(seen, {0, 2, 3})
            r.drain_instance(1, draining=False)
            r.remove_instance(3)
            self.assertEqual(r.instance_count, 3)
            with self.assertRaises(L.NotFoundError):
                r.remove_instance(3)

    def test_no_routable_instance(self):
        with L.Router() as r:
            with self.assertRaises(L.StateError):
                r.route(tokens(10), request_id=1, now_ns=S)
            i = r.add_instance("only")
            r.drain_instance(i)
            with self.assertRaises(L.StateError):
                r.route(tokens(10), request_id=1, now_ns=S)

    def test_requests_of_a_removed_instance_are_gone(self):
        with make(n=1) as r:
            d = r.route(tokens(10), request_id=5, now_ns=S)
            r.remove_instance(d.instance)
            with self.assertRaises(L.NotFoundError):
                r.complete(5, 1, now_ns=2 * S)

    def test_limits_and_names(self):
        with L.Router(max_instances=2) as r:
            r.add_instance("a")
            r.add_instance(b"b")
            with self.assertRaises(L.LimitError):
                r.add_instance("c")
            with self.assertRaises(ValueError):
                r.find_instance("a\0")


class Route(unittest.TestCase):

    def test_follow_up_turns_hit_the_cache(self):
        with make() as r:
            t = tokens(400)
            d1 = r.route(t, request_id=1, now_ns=S, boundaries=[400])
            r.first_token(1, now_ns=S + 10**8)
            r.complete(1, 50, now_ns=2 * S)
            t2 = t + tokens(100, 7)
            d2 = r.route(t2, request_id=2, now_ns=3 * S,
                         boundaries=[400, 500])
            self.assertEqual(d2.instance, d1.instance)
            self.assertEqual(d2.cached_tokens, 400)
            self.assertEqual(d2.best_cached_tokens, 400)
            self.assertIs(d2.reason, L.Reason.PREFIX_HIT)

    def test_dry_run_records_nothing(self):
        with make() as r:
            d = r.route(tokens(64), request_id=1, now_ns=S, dry_run=True)
            st = r.stats()
            self.assertEqual((st.routes, st.dry_runs, st.inflight), (0, 1, 0))
            # The same id may be routed for real afterwards.
            r.route(tokens(64), request_id=1, now_ns=S)
            self.assertEqual(r.stats().inflight, 1)
            self.assertIsNone(d.scores)

    def test_duplicate_request_id(self):
        with make() as r:
            r.route(tokens(64), request_id=1, now_ns=S)
            with self.assertRaises(L.AlreadyExistsError):
                r.route(tokens(64), request_id=1, now_ns=S)
            self.assertEqual(r.stats().routes, 1)

    def test_scores_for_many_instances(self):
        with L.Router("least-request") as r:
            for i in range(40):  # more than the first scores buffer
                r.add_instance(f"h{i}")
            d = r.route(tokens(64), request_id=1, now_ns=S, scores=True)
            self.assertEqual(len(d.scores), 40)
            self.assertEqual([s.instance for s in d.scores], list(range(40)))
            best = min(d.scores, key=lambda s: s.score)
            self.assertEqual(d.scores[d.instance].score, best.score)

    def test_score_stride(self):
        # lr_decision_init_sized() leaves score_size 0 (the 0.1 size), so
        # route() sets it to this build's sizeof(lr_score); the library
        # refuses a stride below LR_SCORE_SIZE_V1 (it would write past the
        # caller's entries).
        from libroute import ffi, lib
        v1 = L.constants["LR_SCORE_SIZE_V1"]
        self.assertGreaterEqual(ffi.sizeof("lr_score"), v1)
        with make("least-request", n=4) as r:
            q = ffi.new("lr_request *")
            lib.lr_request_init_sized(q, ffi.sizeof("lr_request"))
            tok = ffi.new("uint32_t[]", tokens(64))
            q.tokens, q.n_tokens, q.now_ns = tok, 64, S
            q.flags = lib.LR_ROUTE_DRY_RUN | lib.LR_ROUTE_SCORES
            d = ffi.new("lr_decision *")
            lib.lr_decision_init_sized(d, ffi.sizeof("lr_decision"))
            self.assertEqual(d.score_size, 0)
            buf = ffi.new("lr_score[]", 4)
            d.scores, d.scores_capacity = buf, 4
            with r._use() as p:
                d.score_size = v1 - 1
                self.assertEqual(lib.lr_router_route(p, q, d), lib.LR_EINVAL)
                d.score_size = 0  # LR_SCORE_SIZE_V1
                self.assertEqual(lib.lr_router_route(p, q, d), lib.LR_OK)
            self.assertEqual([s.instance for s in buf], [0, 1, 2, 3])
            self.assertEqual(r.stats().dry_runs, 1)
            w = r.route(tokens(64), request_id=1, now_ns=S, dry_run=True,
                        scores=True)
            self.assertEqual([(s.instance, s.score) for s in w.scores],
                             [(s.instance, s.score) for s in buf])

    def test_decider_and_seed(self):
        with make("min-ttft") as r:
            d = r.route(tokens(64), request_id=1, now_ns=S)
            self.assertIs(d.decider, L.Policy.MIN_TTFT)
            d2 = r.route(tokens(64), request_id=2, now_ns=S)
            self.assertNotEqual(d.seed, d2.seed)  # one draw per decision
        with make("lodestar") as r:  # cold: the fallback decides
            d = r.route(tokens(64), request_id=1, now_ns=S)
            self.assertIs(d.reason, L.Reason.COLD_START)
            self.assertIs(d.decider, L.Policy.PREFIX_CACHE_AND_LOAD)
        # Equal seeds, equal draws.
        with make("random", seed=5) as a, make("random", seed=5) as b:
            self.assertEqual(
                a.route(tokens(9), request_id=1, now_ns=S).seed,
                b.route(tokens(9), request_id=1, now_ns=S).seed)

    def test_dualmap_reports_its_alternative(self):
        with make("dualmap") as r:
            d = r.route(tokens(600), request_id=1, now_ns=S)
            self.assertIsNotNone(d.alt_instance)
            self.assertNotEqual(d.alt_instance, d.instance)
        with make("round-robin") as r:
            d = r.route(tokens(600), request_id=1, now_ns=S)
            self.assertIsNone(d.alt_instance)
            self.assertTrue(math.isnan(d.cost))

    def test_session_affinity(self):
        with make("session-affinity") as r:
            got = {r.route(tokens(50, i), request_id=i, now_ns=S,
                           session=1234).instance for i in range(10)}
            self.assertEqual(len(got), 1)

    def test_same_seed_same_decisions(self):
        def run():
            with make("random", seed=7) as r:
                return [r.route(tokens(30, i), request_id=i,
                                now_ns=S).instance for i in range(50)]
        a = run()
        self.assertEqual(a, run())
        self.assertGreater(len(set(a)), 1)

    def test_token_forms(self):
        with make() as r:
            t = tokens(200)
            r.route(array.array("I", t), request_id=1, now_ns=S,
                    boundaries=array.array("I", [100, 200]))
            d = r.route(tuple(t), request_id=2, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 192)
            with self.assertRaises(ValueError):
                r.route([-1], request_id=3, now_ns=S)
            with self.assertRaises(L.InvalidArgumentError):
                r.route(t, request_id=3, now_ns=S, boundaries=[300])
            with self.assertRaises(ValueError):
                r.route(t, request_id=-3, now_ns=S)
            with self.assertRaises(TypeError):  # never truncated
                r.route(t, request_id=3, now_ns=1.5e9)
            with self.assertRaises(TypeError):
                r.first_token(1, now_ns=float(S))
            with self.assertRaises(TypeError):
                r.route(t, request_id=3)  # now_ns is required

    def test_no_learn(self):
        with make() as r:
            t = tokens(64)
            r.route(t, request_id=1, now_ns=S, learn=False)
            d = r.route(t, request_id=2, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 0)

    def test_expected_output_tokens(self):
        with make(n=1) as r:
            r.route(tokens(100), request_id=1, now_ns=S,
                    expected_output_tokens=900)
            self.assertEqual(r.instance_load(0).kv_tokens, 1000)


class Lifecycle(unittest.TestCase):

    def test_counters_return_to_zero(self):
        with make() as r:
            for i in range(20):
                r.route(tokens(100, i), request_id=i, now_ns=S)
            for i in range(0, 20, 2):
                r.first_token(i, now_ns=2 * S)
                r.complete(i, 10, now_ns=3 * S)
            for i in range(1, 20, 2):
                r.fail(i, now_ns=3 * S)
            self.assertEqual(r.stats().inflight, 0)
            for inst in range(8):
                s = r.instance_load(inst)
                self.assertEqual((s.inflight, s.queued, s.prefill_tokens,
                                  s.kv_tokens), (0, 0, 0, 0))
            with self.assertRaises(L.NotFoundError):
                r.first_token(0, now_ns=4 * S)
            with self.assertRaises(L.NotFoundError):
                r.fail(99, now_ns=4 * S)

    def test_observed_cached_tokens(self):
        with make("adaptive", n=2) as r:
            t = tokens(512, 7)
            r.route(t, request_id=1, now_ns=S)
            r.complete(1, 1, now_ns=S + 1)
            d = r.route(t, request_id=2, now_ns=2 * S)
            self.assertGreater(d.cached_tokens, 0)
            # the engine reused none of the expected hit
            r.observe_cached(2, 0, now_ns=2 * S)
            r.observe_cached(2, 512, now_ns=2 * S)  # a repeat: no change
            with self.assertRaises(L.InvalidArgumentError):
                r.observe_cached(2, 513, now_ns=2 * S)
            with self.assertRaises(L.NotFoundError):
                r.observe_cached(99, 0, now_ns=2 * S)
            rows = r.candidates(t, now_ns=2 * S)
            lost = {row.instance: row.cached_lost for row in rows}
            self.assertAlmostEqual(lost[d.instance], 1 / 3)  # 1 / (1 + 2)
            self.assertEqual(lost[1 - d.instance], 0)
            s = r.stats()
            self.assertEqual((s.observed_reports, s.observed_expected_tokens,
                              s.observed_cached_tokens),
                             (1, d.cached_tokens, 0))
            r.complete(2, 1, now_ns=3 * S)
            with self.assertRaises(L.NotFoundError):
                r.observe_cached(2, 0, now_ns=3 * S)


class Telemetry(unittest.TestCase):

    def test_stats_rtt_and_classes(self):
        with make(n=2) as r:
            r.set_stats(0, running=4, waiting=1, kv_use=0.25,
                        scraped_ns=S)
            r.observe_rtt(1, 2_000_000)
            s0, s1 = r.instance_load(0), r.instance_load(1)
            self.assertTrue(s0.has_stats)
            self.assertEqual((s0.running, s0.waiting, s0.kv_use),
                             (4, 1, 0.25))
            self.assertEqual(s1.rtt_ns, 2_000_000)
            with self.assertRaises(L.InvalidArgumentError):
                r.set_stats(0, running=0, waiting=0, kv_use=-0.1,
                            scraped_ns=S)
            with self.assertRaises(L.NotFoundError):
                r.observe_rtt(9, 1)
            with self.assertRaises(L.NotFoundError):
                r.instance_load(9)
            r.set_class(1, prefill_tokens_per_s=20000)
            with self.assertRaises(L.OutOfRangeError):
                r.set_class(1, prefill_tokens_per_s=0.5)

    def test_instance_spec(self):
        with L.Router() as r:
            i = r.add_instance("x", instance_class=3, prefix_caching=False,
                               rtt_ns=5000)
            s = r.instance_load(i)
            self.assertEqual(s.instance_class, 3)
            self.assertFalse(s.prefix_caching)
            with self.assertRaises(L.OutOfRangeError):
                r.add_instance("y", rtt_ns=L.constants["LR_LOAD_MAX_RTT_NS"]
                               + 1)


class Params(unittest.TestCase):

    def test_set_get_bounds(self):
        with make() as r:
            for p in L.Param:
                with self.subTest(param=p.name):
                    self.assertEqual(r.get_param(p), p.bounds.default)
            r.set_param(L.Param.TTFT_SLO_S, 2.5)
            self.assertEqual(r.get_param("ttft_slo_s"), 2.5)
            b = L.Param.TTFT_SLO_S.bounds
            with self.assertRaises(L.OutOfRangeError):
                r.set_param(L.Param.TTFT_SLO_S, b.hi * 2)
            self.assertEqual(r.get_param(L.Param.TTFT_SLO_S), 2.5)
            with self.assertRaises(L.InvalidArgumentError):
                r.set_param(L.Param.TTFT_SLO_S, math.nan)
            with self.assertRaises(L.NotSupportedError):
                r.set_param(10**6, 1.0)
            with self.assertRaises(ValueError):
                r.get_param("no_such_param")

    def test_params_lists_every_key(self):
        with make() as r:
            r.set_param("dynamo_temperature", 0.5)
            p = r.params()
            self.assertEqual(len(p), L.param_count())
            self.assertEqual(set(p), set(L.Param))
            self.assertEqual(p[L.Param.DYNAMO_TEMPERATURE], 0.5)
            self.assertEqual(p[L.Param.TTFT_SLO_S],
                             L.Param.TTFT_SLO_S.bounds.default)

    def test_integer_keys_refuse_fractions(self):
        with make() as r:
            self.assertTrue(L.Param.SESSION_TOKENS.bounds.integer)
            with self.assertRaises(L.InvalidArgumentError):
                r.set_param(L.Param.SESSION_TOKENS, 12.5)
            r.set_param(L.Param.SESSION_TOKENS, 12.0)
            self.assertEqual(r.get_param(L.Param.SESSION_TOKENS), 12)


class Rebalance(unittest.TestCase):

    def test_plan_and_move(self):
        with L.Router("dualmap", seed=1) as r:
            slow = r.add_instance("slow", instance_class=0)
            fast = r.add_instance("fast", instance_class=1)
            r.set_class(0, prefill_tokens_per_s=100)
            r.set_class(1, prefill_tokens_per_s=1e6)
            r.set_param(L.Param.TTFT_SLO_S, 1.0)
            for i in range(10):
                r.route(tokens(1000, i), request_id=i, now_ns=S)
            on_slow = r.instance_load(slow).queued
            self.assertGreater(on_slow, 0)
            plan = r.rebalance_plan(S)
            self.assertTrue(plan)
            self.assertLessEqual(len(plan), on_slow)
            for m in plan:
                self.assertEqual((m.from_, m.to), (slow, fast))
                self.assertGreater(m.benefit_s, 0)
            self.assertEqual(len(r.rebalance_plan(S, max_moves=1)), 1)
            self.assertEqual(r.rebalance_plan(S, max_moves=0), [])
            self.assertEqual(r.rebalance_plan(S), plan)  # changes nothing
            m = plan[0]
            r.move(m.request_id, m.to)
            self.assertEqual(r.instance_load(slow).queued, on_slow - 1)
            r.first_token(m.request_id, now_ns=2 * S)
            with self.assertRaises(L.StateError):
                r.move(m.request_id, slow)
            with self.assertRaises(L.NotFoundError):
                r.move(10**6, fast)


class KvEventsAndDeltas(unittest.TestCase):

    def test_kv_events_feed_the_router(self):
        with make(n=2) as r:
            t = tokens(64)
            r.kv_stored(1, [1, 2], t, block_size=32, now_ns=S)
            d = r.route(t, request_id=1, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 64)
            self.assertEqual(r.kv_removed(1, [2]), 1)
            d = r.route(t, request_id=1, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 32)
            r.kv_cleared(1)
            d = r.route(t, request_id=1, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 0)
            with self.assertRaises(L.NotFoundError):
                r.kv_cleared(7)

    def test_vllm_batch(self):
        with make(n=2) as r:
            t = tokens(64)
            info = r.vllm_batch(
                1, msgpack_batch([["BlockStored", [5, 6], None, t, 32,
                                   None, "GPU"]]), now_ns=S)
            self.assertEqual((info.stored, info.done), (1, 1))
            d = r.route(t, request_id=1, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 64)
            with self.assertRaises(L.NotFoundError):
                r.vllm_batch(9, msgpack_batch([]), now_ns=S)

    def test_deltas_between_replicas(self):
        with make() as a, make() as b:
            t = tokens(256)
            m0 = a.mark()
            a.route(t, request_id=1, now_ns=S)
            delta = a.export_delta(m0)
            self.assertEqual(delta.mark, a.mark())
            b.import_delta(delta.data, now_ns=S)
            d = b.route(t, request_id=1, now_ns=S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 256)
            with self.assertRaises(L.CorruptError):
                b.import_delta(delta.data[:-3], now_ns=S)

    def test_expire(self):
        with make(index_ttl_ns=10 * S) as r:
            t = tokens(64)
            r.route(t, request_id=1, now_ns=S)
            r.expire(50 * S)  # within the clock's skew (60 s)
            d = r.route(t, request_id=2, now_ns=50 * S, dry_run=True)
            self.assertEqual(d.best_cached_tokens, 0)

    def test_clock(self):
        # a timestamp far ahead of the newest one taken is
        # refused and changes nothing; a second that agrees moves the
        # clock (the host's clock really jumped)
        with make(index_ttl_ns=10 * S) as r:
            t = tokens(64)
            r.route(t, request_id=1, now_ns=S)
            with self.assertRaises(L.OutOfRangeError):
                r.route(t, request_id=2, now_ns=2**63)
            with self.assertRaises(L.OutOfRangeError):
                r.set_stats(0, running=1, waiting=1, kv_use=0.5,
                            scraped_ns=3600 * S)
            r.set_stats(0, running=1, waiting=2, kv_use=0.5,
                        scraped_ns=3601 * S)
            self.assertEqual(r.stats().inflight, 1)
            b = L.param_bounds(L.Param.CLOCK_SKEW_S)
            self.assertEqual(b.default, 60)
            r.set_param(L.Param.CLOCK_SKEW_S, b.hi)
            r.route(t, request_id=3, now_ns=10**18)

    def test_hash_seed(self):
        # the tables' hash seed never changes a decision
        picks = []
        for hs in (None, 1, 0xdeadbeef):
            with make("prefix-cache-and-load", seed=5, hash_seed=hs) as r:
                picks.append([r.route(tokens(64 + 16 * (i % 5), i % 3),
                                      request_id=i + 1, now_ns=S).instance
                              for i in range(20)])
        self.assertEqual(picks[0], picks[1])
        self.assertEqual(picks[0], picks[2])


class Stats(unittest.TestCase):

    def test_counters(self):
        with make() as r:
            for i in range(5):
                r.route(tokens(64, i), request_id=i, now_ns=S)
            st = r.stats()
            self.assertEqual(st.routes, 5)
            self.assertEqual((st.instances, st.routable), (8, 8))
            self.assertEqual(st.prompt_tokens, 5 * 64)
            self.assertEqual(sum(st.by_reason.values()), 5)
            self.assertTrue(all(isinstance(k, L.Reason)
                                for k in st.by_reason))

    def test_reason_counts(self):
        with make("round-robin") as r:
            self.assertEqual(r.reason_counts(),
                             {reason: 0 for reason in L.Reason})
            for i in range(7):
                r.route(tokens(64, i), request_id=i, now_ns=S)
            r.route(tokens(64), request_id=99, now_ns=S, dry_run=True)
            counts = r.reason_counts()
            # Every reason the library has, not only the struct's 16.
            self.assertEqual(len(counts), L.reason_count())
            self.assertEqual(counts[L.Reason.ROUND_ROBIN], 7)
            self.assertEqual(sum(counts.values()), 7)  # dry runs: none
            by_reason = r.stats().by_reason
            for reason, n in by_reason.items():
                self.assertEqual(counts[reason], n)
            r.close()
            with self.assertRaises(L.ClosedError):
                r.reason_counts()

    def test_index_stats(self):
        with make("round-robin", index_capacity_blocks=64,
                  index_ttl_ns=10 * S) as r:
            self.assertEqual(r.index_stats().blocks, 0)
            # 40 distinct prompts of 4 blocks: 160 learned, 64 held
            for i in range(40):
                r.route(tokens(64, 100 + i), request_id=i, now_ns=S)
            st = r.index_stats()
            self.assertIsInstance(st, L.IndexStats)
            self.assertEqual(st.learned_blocks, 160)
            self.assertEqual(st.blocks, 64)
            self.assertEqual(st.evicted_blocks, 160 - 64)
            self.assertEqual(st.expired_blocks, 0)
            r.expire(60 * S)
            st = r.index_stats()
            self.assertEqual((st.blocks, st.expired_blocks), (0, 64))
            r.close()
            with self.assertRaises(L.ClosedError):
                r.index_stats()


class Ownership(unittest.TestCase):

    def test_close(self):
        r = make()
        r.close()
        r.close()
        with self.assertRaises(L.ClosedError):
            r.route(tokens(10), request_id=1, now_ns=S)
        with self.assertRaises(L.ClosedError):
            r.policy

    def test_gc(self):
        r = make()
        ref = weakref.ref(r)
        del r
        gc.collect()
        self.assertIsNone(ref())


if __name__ == "__main__":
    unittest.main()
