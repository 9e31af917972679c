"""Mlp: options, training on a known function, float32 buffers in place,
save/load, errors."""

from __future__ import annotations

import array
import math
import random
import unittest

import libroute as L


def plane(n: int, seed: int = 1):
    """n rows of (x0, x1) in [-1, 1]^2 and y = x0 + x1, as array('f')."""
    rng = random.Random(seed)
    x = array.array("f", [rng.uniform(-1.0, 1.0) for _ in range(2 * n)])
    y = array.array("f", [x[2 * i] + x[2 * i + 1] for i in range(n)])
    return x, y


def small(**kw):
    opt = dict(seed=1, hidden_layers=2, width=16, batch_size=32,
               dropout=0.0, learning_rate=0.01)
    opt.update(kw)
    return L.Mlp(2, **opt)


class Options(unittest.TestCase):

    def test_create(self):
        with L.Mlp(4) as m:
            self.assertEqual(m.n_inputs, 4)
        self.assertEqual(small().n_inputs, 2)

    def test_bad_options(self):
        with self.assertRaises(L.InvalidArgumentError) as cm:
            L.Mlp(0)
        self.assertEqual(cm.exception.status, L.Status.EINVAL)
        self.assertEqual(cm.exception.function, "lr_mlp_create")
        for kw in (dict(width=0), dict(hidden_layers=0),
                   dict(hidden_layers=L.constants["LR_MLP_MAX_LAYERS"] + 1),
                   dict(dropout=0.95), dict(learning_rate=0.0),
                   dict(batch_size=0), dict(weight_decay=1.0),
                   dict(grad_clip=-1.0)):
            with self.subTest(**kw), self.assertRaises(
                    L.InvalidArgumentError):
                L.Mlp(2, **kw)
        with self.assertRaises(L.InvalidArgumentError):
            L.Mlp(L.constants["LR_MLP_MAX_INPUTS"] + 1)
        with self.assertRaises(ValueError):
            L.Mlp(-1)
        with self.assertRaises(ValueError):
            L.Mlp(2, seed=-1)
        with self.assertRaises(TypeError):
            L.Mlp(2, no_such_option=1)


class Training(unittest.TestCase):

    def test_learns_a_sum(self):
        x, y = plane(512)
        with small() as m:
            m.fit_normalization(x, y)
            before = m.loss(x, y)
            losses = [m.train(x, y, epochs=5) for _ in range(4)]
            after = m.loss(x, y)
            self.assertGreater(before, 0.1)
            self.assertLess(after, before / 20)
            self.assertLess(losses[-1], losses[0] * 1.5)
            self.assertTrue(all(math.isfinite(v) for v in losses))
            # Unseen points of the same plane.
            tx, ty = plane(64, seed=2)
            pred = m.predict(tx)
            self.assertIsInstance(pred, array.array)
            self.assertEqual(pred.typecode, "f")
            err = max(abs(p - t) for p, t in zip(pred, ty))
            self.assertLess(err, 0.3)

    def test_training_is_deterministic(self):
        x, y = plane(256)
        a, b = small(), small()
        for m in (a, b):
            m.fit_normalization(x, y)
            m.train(x, y, epochs=3)
        self.assertEqual(a.predict(x), b.predict(x))

    def test_clone_continues_identically(self):
        x, y = plane(256)
        with small(dropout=0.2) as m:
            m.fit_normalization(x, y)
            m.train(x, y, epochs=2)
            c = m.clone()
            self.assertEqual(c.n_inputs, 2)
            # Same optimizer and random state: the same next epochs.
            self.assertEqual(m.train(x, y, 2), c.train(x, y, 2))
            self.assertEqual(m.predict(x), c.predict(x))
            m.train(x, y, 1)  # independent from here
            self.assertNotEqual(m.predict(x), c.predict(x))
            c.close()

    def test_out_of_range(self):
        x, y = plane(128)
        with small() as m:
            self.assertEqual(m.out_of_range([[50.0, 50.0]]), 0)  # no fit
            m.fit_normalization(x)
            self.assertEqual(m.out_of_range(x), 0)
            self.assertEqual(m.out_of_range(
                [[0.0, 0.0], [5.0, 0.0], [0.0, -5.0], [math.nan, 0.0]]), 3)

    def test_out_of_range_rows(self):
        x, y = plane(128)
        with small() as m:
            self.assertEqual(m.out_of_range_rows([[50.0, 50.0]]), [False])
            m.fit_normalization(x)
            self.assertEqual(m.out_of_range_rows(
                [[0.0, 0.0], [5.0, 0.0], [0.0, -5.0], [math.nan, 0.0]]),
                [False, True, True, True])
            self.assertEqual(m.out_of_range_rows([]), [])


class Buffers(unittest.TestCase):

    def setUp(self):
        self.x, self.y = plane(64)
        self.m = small()
        self.m.fit_normalization(self.x, self.y)
        self.want = self.m.predict(self.x)

    def tearDown(self):
        self.m.close()

    def test_input_forms(self):
        rows = [[self.x[2 * i], self.x[2 * i + 1]] for i in range(64)]
        flat = list(self.x)
        for form in (self.x, memoryview(self.x),
                     memoryview(self.x.tobytes()).cast("f"),
                     memoryview(bytearray(self.x.tobytes())).cast("f"),
                     rows, flat, tuple(flat),
                     array.array("d", self.x)):  # float64: copied
            with self.subTest(form=type(form).__name__):
                self.assertEqual(self.m.predict(form), self.want)

    def test_numpy(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy not installed")
        a = np.frombuffer(self.x.tobytes(), dtype=np.float32)
        self.assertEqual(self.m.predict(a), self.want)
        self.assertEqual(self.m.predict(a.reshape(64, 2)), self.want)
        out = np.zeros(64, dtype=np.float32)
        self.assertIs(self.m.predict(a, out=out), out)
        self.assertEqual(list(out), list(self.want))
        with self.assertRaises(ValueError):
            self.m.predict(a.reshape(32, 4))

    def test_out_is_written_in_place(self):
        out = array.array("f", [7.0] * 70)
        res = self.m.predict(self.x, out=out)
        self.assertIs(res, out)
        self.assertEqual(out[:64], self.want)
        self.assertEqual(out[64:], array.array("f", [7.0] * 6))
        with self.assertRaises(ValueError):  # too small
            self.m.predict(self.x, out=array.array("f", [0.0] * 63))
        with self.assertRaises(TypeError):  # not float32
            self.m.predict(self.x, out=array.array("d", [0.0] * 64))
        with self.assertRaises(TypeError):  # read-only
            self.m.predict(self.x, out=bytes(256))

    def test_bad_inputs(self):
        with self.assertRaises(ValueError):  # not whole rows
            self.m.predict([1.0, 2.0, 3.0])
        with self.assertRaises(ValueError):
            self.m.predict([[1.0, 2.0], [3.0]])
        with self.assertRaises(TypeError):  # raw bytes are not floats
            self.m.predict(self.x.tobytes())
        with self.assertRaises(TypeError):
            self.m.predict(["a", "b"])
        with self.assertRaises(L.InvalidArgumentError) as cm:
            self.m.predict([0.0, math.inf])
        self.assertEqual(cm.exception.function, "lr_mlp_predict")
        with self.assertRaises(L.InvalidArgumentError):
            self.m.train(self.x, [math.nan] * 64)
        with self.assertRaises(ValueError):  # y of the wrong length
            self.m.train(self.x, self.y[:10])
        with self.assertRaises(ValueError):
            self.m.loss(self.x, self.y[:10])
        with self.assertRaises(ValueError):
            self.m.fit_normalization(self.x, self.y[:10])
        with self.assertRaises(ValueError):
            self.m.train(self.x, self.y, epochs=-1)
        # Nothing changed.
        self.assertEqual(self.m.predict(self.x), self.want)

    def test_empty(self):
        self.assertEqual(self.m.predict([]), array.array("f"))


class SaveLoad(unittest.TestCase):

    def test_round_trip(self):
        x, y = plane(256)
        with small() as m:
            m.fit_normalization(x, y)
            m.train(x, y, epochs=5)
            data = m.save()
            self.assertIsInstance(data, bytes)
            with L.Mlp.load(data) as m2:
                self.assertEqual(m2.n_inputs, 2)
                self.assertEqual(m2.predict(x), m.predict(x))
                self.assertEqual(m2.out_of_range([[9.0, 9.0]]), 1)
                self.assertEqual(m2.save(), data)
            # Any bytes-like object, read in place.
            with L.Mlp.load(memoryview(bytearray(data))) as m3:
                self.assertEqual(m3.predict(x), m.predict(x))
                # A loaded network trains (fresh optimizer state).
                m3.train(x, y, 1)

    def test_corrupt(self):
        with small() as m:
            data = m.save()
        for name, bad in (("empty", b""), ("truncated", data[:-1]),
                          ("header", data[:12]),
                          ("flipped", data[:len(data) // 2] +
                           bytes([data[len(data) // 2] ^ 0x40]) +
                           data[len(data) // 2 + 1:]),
                          ("garbage", bytes(len(data)))):
            with self.subTest(name), self.assertRaises(L.CorruptError) as cm:
                L.Mlp.load(bad)
            e = cm.exception
            self.assertIsInstance(e, ValueError)
            self.assertEqual(e.status, L.Status.ECORRUPT)
            self.assertEqual(e.name, "LR_ECORRUPT")
            self.assertEqual(e.function, "lr_mlp_load")
        with self.assertRaises(TypeError):
            L.Mlp.load("not bytes")


class Lifecycle(unittest.TestCase):

    def test_closed(self):
        m = small()
        m.close()
        m.close()
        self.assertTrue(m.closed)
        for call in (lambda: m.predict([0.0, 0.0]), m.save, m.clone,
                     lambda: m.train([0.0, 0.0], [0.0])):
            with self.assertRaises(L.ClosedError):
                call()
        with self.assertRaises(L.ClosedError):
            with m:
                pass

    def test_garbage_collected(self):
        import gc
        import weakref
        m = small()
        w = weakref.ref(m)
        del m
        gc.collect()
        self.assertIsNone(w())


if __name__ == "__main__":
    unittest.main()
