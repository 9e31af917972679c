"""Learner (schedule, scoring, drops, samples, the serving/training split)
and the lodestar router (cold start, learner options, learn_step from a
background thread while the main thread routes)."""

from __future__ import annotations

import array
import math
import random
import threading
import time
import unittest

import libroute as L
from support import tokens

S = 10**9
MS = 10**6
NF = L.lodestar_feature_count()  # the loaded library's width (0.2)
SMALL_NET = dict(hidden_layers=1, width=16, batch_size=32, dropout=0.0,
                 learning_rate=0.01)


def row(i: int, d: int = 3):
    """A feature row whose reward is -(f0 + f1) / 10."""
    return [float(i % 7), float(i % 5)] + [1.0] * (d - 2)


def reward(r) -> float:
    return -(r[0] + r[1]) / 10.0


def learner(**kw):
    opt = dict(seed=9, min_samples=20, retrain_every=10, epochs=20,
               mlp=SMALL_NET)
    opt.update(kw)
    return L.Learner(3, **opt)


class Schedule(unittest.TestCase):

    def test_min_samples_then_retrain_every(self):
        with learner() as lr:
            self.assertEqual(lr.n_features, 3)
            for i in range(19):
                lr.add_sample(row(i), reward(row(i)))
            self.assertFalse(lr.step())          # 19 < min_samples
            with self.assertRaises(L.StateError) as cm:
                lr.score([row(0)])               # cold: no model
            self.assertEqual(cm.exception.function, "lr_learner_score")
            self.assertEqual(lr.stats().model_round, 0)
            lr.add_sample(row(19), reward(row(19)))
            self.assertTrue(lr.step())           # the 20th: first round
            self.assertFalse(lr.step())          # nothing new
            # The serving side takes the model over at its next score().
            res = lr.score([row(1), row(2)])
            self.assertEqual(len(res.predictions), 2)
            self.assertEqual(res.out_of_range, 0)
            st = lr.stats()
            self.assertEqual((st.model_round, st.model_samples), (1, 20))
            self.assertEqual(st.samples, 20)
            self.assertTrue(math.isfinite(st.model_mse))
            for i in range(9):
                lr.add_sample(row(i), reward(row(i)))
            self.assertFalse(lr.step())          # 9 < retrain_every
            lr.add_sample(row(9), reward(row(9)))
            self.assertTrue(lr.step())           # the 10th: second round
            lr.score([row(0)])
            st = lr.stats()
            self.assertEqual((st.model_round, st.model_samples), (2, 30))

    def test_force(self):
        with learner(min_samples=1000) as lr:
            self.assertFalse(lr.step(force=True))  # no sample at all
            lr.add_sample(row(1), -0.3)
            self.assertFalse(lr.step())
            self.assertTrue(lr.step(force=True))
            self.assertEqual(len(lr.score([row(1)]).predictions), 1)

    def test_score_after_step_learns(self):
        with learner(min_samples=200, epochs=200) as lr:
            for i in range(200):
                lr.add_sample(row(i), reward(row(i)))
            self.assertTrue(lr.step())
            rows = [row(i) for i in range(35)]
            out = array.array("f", [0.0] * 35)
            res = lr.score(rows, out=out)
            self.assertIs(res.predictions, out)
            err = max(abs(p - reward(r)) for p, r in zip(out, rows))
            self.assertLess(err, 0.15)
            # Outside the trained ranges, and the serving error feeds the
            # stats once predictions come with the samples.
            self.assertEqual(lr.score([[50.0, 0.0, 1.0]]).out_of_range, 1)
            # ... judged per row, with the same predictions
            pred, flags = lr.score_rows([row(1), [50.0, 0.0, 1.0]])
            self.assertEqual(flags, [False, True])
            self.assertEqual(list(pred),
                             list(lr.score([row(1), [50.0, 0.0, 1.0]])
                                  .predictions))
            for i in range(5):
                lr.add_sample(row(i), reward(row(i)), predicted=out[i])
            st = lr.stats()
            self.assertEqual(st.predicted, 5)
            self.assertLess(st.online_mae, 0.15)


class SampleBuffers(unittest.TestCase):

    def test_samples_copy(self):
        with learner(fifo_capacity=8, replay_capacity=4) as lr:
            s = lr.samples()
            self.assertEqual((s.n_samples, len(s.x)), (0, 0))
            for i in range(5):
                lr.add_sample(row(i), float(-i) / 10)
            self.assertEqual(lr.samples().n_samples, 0)  # still pending
            lr.step()
            s = lr.samples()
            self.assertIsInstance(s, L.Samples)
            self.assertEqual(s.n_samples, 5)
            self.assertEqual(s.n_features, 3)
            self.assertEqual(s.x.typecode, "f")
            self.assertEqual(len(s.x), 15)
            self.assertEqual(sorted(s.y), sorted(
                array.array("f", [-i / 10 for i in range(5)])))
            self.assertEqual(sorted(list(r) for r in s.rows()),
                             sorted(row(i) for i in range(5)))
            # Past the FIFO, older samples move to the replay buffer.
            for i in range(30):
                lr.add_sample(row(i), -0.5)
            lr.step(force=True)
            self.assertLessEqual(lr.samples().n_samples, 12)


class Drops(unittest.TestCase):

    def test_reward_out_of_range(self):
        with learner(max_abs_reward=2.0) as lr:
            with self.assertRaises(L.OutOfRangeError) as cm:
                lr.add_sample(row(0), -3.0)
            self.assertEqual(cm.exception.status, L.Status.ERANGE)
            lr.add_sample(row(0), -2.0)
            st = lr.stats()
            self.assertEqual((st.samples, st.dropped_range), (1, 1))

    def test_pending_full(self):
        with learner(pending_capacity=4) as lr:
            for i in range(4):
                lr.add_sample(row(i), -0.1)
            with self.assertRaises(L.LimitError):
                lr.add_sample(row(4), -0.1)
            self.assertEqual(lr.stats().dropped_full, 1)
            lr.step()                            # drains the queue
            lr.add_sample(row(4), -0.1)
            self.assertEqual(lr.stats().samples, 5)

    def test_bad_samples(self):
        with learner() as lr:
            with self.assertRaises(ValueError):
                lr.add_sample([1.0, 2.0], -0.1)  # width
            with self.assertRaises(ValueError):
                lr.add_sample([row(0), row(1)], -0.1)  # two rows
            with self.assertRaises(L.InvalidArgumentError):
                lr.add_sample([1.0, math.nan, 0.0], -0.1)
            with self.assertRaises(L.InvalidArgumentError):
                lr.add_sample(row(0), math.inf)
            with self.assertRaises(ValueError):
                lr.score([1.0, 2.0])
            self.assertEqual(lr.stats().samples, 0)


class Options(unittest.TestCase):

    def test_bad_options(self):
        for kw in (dict(fifo_capacity=0), dict(min_samples=0),
                   dict(retrain_every=0), dict(epochs=0),
                   dict(max_abs_reward=0.0), dict(mlp=dict(width=0))):
            with self.subTest(**{k: str(v) for k, v in kw.items()}), \
                    self.assertRaises(L.InvalidArgumentError) as cm:
                learner(**kw)
            self.assertEqual(cm.exception.function, "lr_learner_create")
        with self.assertRaises(L.InvalidArgumentError):
            L.Learner(0)
        with self.assertRaises(TypeError):
            learner(mlp=dict(n_inputs=3))  # the learner's own
        with self.assertRaises(TypeError):
            learner(mlp=dict(seed=3))
        with self.assertRaises(TypeError):
            learner(mlp=dict(depth=3))     # unknown
        with self.assertRaises(TypeError):
            learner(mlp=[("width", 3)])    # not a mapping

    def test_closed(self):
        lr = learner()
        lr.close()
        lr.close()
        for call in (lambda: lr.add_sample(row(0), 0.0), lr.step,
                     lr.stats, lr.samples, lambda: lr.score([row(0)])):
            with self.assertRaises(L.ClosedError):
                call()


class ServingAndTraining(unittest.TestCase):

    def test_score_while_stepping(self):
        # The training side (step) runs in a thread while this thread
        # scores and adds samples: the object's two locks let them
        # overlap, as the C contract allows.
        with learner(min_samples=50, retrain_every=50, epochs=300,
                     mlp=dict(SMALL_NET, width=64)) as lr:
            for i in range(50):
                lr.add_sample(row(i), reward(row(i)))
            self.assertTrue(lr.step())
            lr.score([row(0)])
            for i in range(400):
                lr.add_sample(row(i), reward(row(i)))
            stepping = threading.Event()
            done = threading.Event()
            errors = []

            def train():
                try:
                    stepping.set()
                    lr.step()
                except BaseException as e:  # reported below
                    errors.append(e)
                finally:
                    done.set()

            t = threading.Thread(target=train)
            t.start()
            stepping.wait(10)
            scored = during = 0
            while not done.is_set() or scored == 0:
                lr.score([row(scored)])
                scored += 1
                during += not done.is_set()
                if scored > 1000000:
                    break
            t.join(60)
            self.assertEqual(errors, [])
            self.assertGreater(during, 0, "score() waited for step()")
            lr.score([row(0)])
            self.assertEqual(lr.stats().model_round, 2)


# ---- the lodestar router ----------------------------------------------------


def lodestar(**learner_opt):
    opt = dict(min_samples=64, retrain_every=64, epochs=50,
               mlp=dict(SMALL_NET, hidden_layers=2, width=32))
    opt.update(learner_opt)
    r = L.Router("lodestar", seed=11, learner=opt)
    for i in range(4):
        r.add_instance(f"10.0.0.{i + 1}:8000")
    return r


class Workload:
    """Routes with a TTFT that grows with the instance's id: something
    for the learner to learn."""

    def __init__(self, router) -> None:
        self.r = router
        self.rng = random.Random(4)
        self.rid = 0
        self.now = S

    def one(self):
        self.rid += 1
        self.now += MS
        n = self.rng.randrange(32, 400)
        d = self.r.route(tokens(n, self.rid), request_id=self.rid,
                         now_ns=self.now)
        self.r.first_token(self.rid,
                           now_ns=self.now + (d.instance + 1) * 20 * MS)
        self.r.complete(self.rid, 16, now_ns=self.now + 100 * MS)
        return d


class LodestarRouter(unittest.TestCase):

    def test_cold_start_then_model(self):
        with lodestar() as r:
            st = r.learner_stats()
            self.assertIsInstance(st, L.LearnerStats)
            self.assertEqual((st.samples, st.model_round), (0, 0))
            self.assertFalse(r.learn_step())
            w = Workload(r)
            reasons = {w.one().reason for _ in range(80)}
            self.assertEqual(reasons, {L.Reason.COLD_START})
            self.assertEqual(r.learner_stats().samples, 80)
            self.assertEqual(r.learner_feature_count, NF)
            s = r.learner_samples()
            self.assertEqual((s.n_samples, s.n_features), (0, NF))
            self.assertTrue(r.learn_step())
            s = r.learner_samples()
            self.assertEqual(s.n_samples, 80)
            self.assertEqual(len(s.x), 80 * NF)
            # Rewards are -TTFT in seconds: 20..80 ms here.
            self.assertTrue(all(-0.081 < y < -0.019 for y in s.y), s.y)
            reasons = {w.one().reason for _ in range(50)}
            self.assertNotIn(L.Reason.COLD_START, reasons)
            st = r.learner_stats()
            self.assertEqual((st.model_round, st.model_samples), (1, 80))
            self.assertEqual(st.samples, 130)
            self.assertGreater(st.predicted, 0)
            self.assertEqual(r.stats().by_reason[L.Reason.COLD_START], 80)

    def test_force_and_params(self):
        with lodestar(min_samples=10000) as r:
            w = Workload(r)
            for _ in range(10):
                w.one()
            self.assertFalse(r.learn_step())
            self.assertTrue(r.learn_step(force=True))
            r.set_param(L.Param.LODESTAR_EPSILON, 0.0)
            self.assertEqual(r.get_param("lodestar_epsilon"), 0.0)
            self.assertEqual(L.Param.LODESTAR_FALLBACK.bounds.default,
                             int(L.Policy.PREFIX_CACHE_AND_LOAD))
            self.assertNotEqual(w.one().reason, L.Reason.EXPLORE)

    def test_no_learner(self):
        with L.Router("random") as r:
            for call in (r.learn_step, r.learner_stats, r.learner_samples):
                with self.assertRaises(L.StateError):
                    call()
            # The learner is made at the first switch to lodestar.
            r.policy = "lodestar"
            self.assertEqual(r.learner_stats().samples, 0)
            self.assertFalse(r.learn_step())

    def test_learner_options(self):
        with self.assertRaises(TypeError):   # the router's seed is used
            L.Router("lodestar", learner=dict(seed=1))
        with self.assertRaises(TypeError):
            L.Router("lodestar", learner=dict(no_such=1))
        with self.assertRaises(TypeError):
            L.Router("lodestar", learner=dict(mlp=dict(n_inputs=3)))
        with self.assertRaises(TypeError):
            L.Router("lodestar", learner=[1, 2])
        with self.assertRaises(L.InvalidArgumentError) as cm:
            L.Router("lodestar", learner=dict(n_features=3))
        self.assertEqual(cm.exception.function, "lr_router_create")
        with self.assertRaises(L.InvalidArgumentError):
            L.Router("lodestar", learner=dict(mlp=dict(width=0)))
        L.Router("lodestar", learner=dict(n_features=NF)).close()

    def test_learn_step_in_a_thread_while_routing(self):
        # The host's pattern: route in the serving thread, learn_step()
        # in a background thread. The step trains outside the router's
        # lock (and cffi drops the GIL), so routes keep flowing while it
        # runs; the next route picks the new model up.
        with lodestar(min_samples=200, epochs=400,
                      mlp=dict(SMALL_NET, hidden_layers=2, width=64)) as r:
            w = Workload(r)
            for _ in range(200):
                self.assertEqual(w.one().reason, L.Reason.COLD_START)
            state = {"running": False, "trained": False, "steps": 0,
                     "t": 0.0}
            done = threading.Event()
            errors = []

            def background():
                try:
                    while not state["trained"]:
                        state["running"] = True
                        t0 = time.monotonic()
                        state["trained"] = r.learn_step()
                        state["t"] += time.monotonic() - t0
                        state["running"] = False
                        state["steps"] += 1
                        if state["steps"] > 1000:
                            break
                        time.sleep(0.001)
                except BaseException as e:
                    errors.append(e)
                finally:
                    state["running"] = False
                    done.set()

            t = threading.Thread(target=background)
            t.start()
            during = 0
            while not done.is_set():
                w.one()
                during += state["running"]
            t.join(60)
            self.assertEqual(errors, [])
            self.assertTrue(state["trained"])
            self.assertGreater(during, 0, "route() waited for learn_step()"
                               f"; steps took {state['t']:.3f} s")
            # The model is in service from the next route on.
            reasons = {w.one().reason for _ in range(30)}
            self.assertNotIn(L.Reason.COLD_START, reasons)
            st = r.learner_stats()
            self.assertEqual(st.model_round, 1)
            self.assertGreaterEqual(st.model_samples, 200)
            self.assertEqual(r.stats().inflight, 0)

    def test_concurrent_steps(self):
        # Steps on one router are serialized by the library: of two at
        # once, one may get StateError; neither may crash or corrupt.
        with lodestar(min_samples=100, epochs=100) as r:
            w = Workload(r)
            for _ in range(300):
                w.one()
            results = []

            def step():
                try:
                    results.append(r.learn_step(force=True))
                except L.StateError:
                    results.append("busy")

            ts = [threading.Thread(target=step) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            self.assertEqual(len(results), 4)
            self.assertIn(True, results)
            w.one()
            self.assertGreaterEqual(r.learner_stats().model_round, 1)

    def test_close_waits_for_a_step(self):
        r = lodestar(min_samples=100, epochs=300)
        w = Workload(r)
        for _ in range(150):
            w.one()
        outcome = []

        def step():
            try:
                outcome.append(r.learn_step())
            except L.ClosedError:  # close() came first: also fine
                outcome.append("closed")

        t = threading.Thread(target=step)
        t.start()
        time.sleep(0.001)
        r.close()  # waits for the step if it is running
        t.join(60)
        self.assertEqual(len(outcome), 1)
        self.assertTrue(r.closed)
        with self.assertRaises(L.ClosedError):
            r.learn_step()


if __name__ == "__main__":
    unittest.main()
