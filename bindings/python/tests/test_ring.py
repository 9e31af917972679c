"""Ring: placement by name, candidates, membership."""

from __future__ import annotations

import unittest

import libroute as L

NAMES = [f"10.0.0.{i}:8000" for i in range(1, 9)]


def make(names=NAMES, **kw):
    r = L.Ring(**kw)
    for i, n in enumerate(names):
        r.add(n, i)
    return r


class RingTest(unittest.TestCase):

    def test_membership(self):
        with make() as r:
            self.assertEqual(len(r), 8)
            self.assertIn(3, r)
            self.assertNotIn(8, r)
            self.assertNotIn(-1, r)
            self.assertNotIn("3", r)
            r.remove(3)
            self.assertNotIn(3, r)
            self.assertEqual(len(r), 7)
            with self.assertRaises(L.NotFoundError):
                r.remove(3)

    def test_candidates_are_distinct_and_deterministic(self):
        with make() as a, make(list(reversed(NAMES))) as b:
            for key in range(0, 2**64 - 1, 2**58 + 12345):
                ca = a.candidates(key, k=3)
                self.assertEqual(len(ca), 3)
                self.assertEqual(len(set(ca)), 3)
                self.assertEqual(ca, a.candidates(key, k=3))
                # Same names in another order: same instances by name.
                self.assertEqual([NAMES[i] for i in ca],
                                 [list(reversed(NAMES))[i]
                                  for i in b.candidates(key, k=3)])

    def test_fewer_instances_than_k(self):
        with make(NAMES[:2]) as r:
            self.assertEqual(sorted(r.candidates(99, k=4)), [0, 1])

    def test_errors(self):
        with L.Ring() as r:
            with self.assertRaises(L.StateError):
                r.candidates(1)
            r.add("a", 1)
            with self.assertRaises(L.AlreadyExistsError):
                r.add("a", 2)
            with self.assertRaises(L.AlreadyExistsError):
                r.add("b", 1)
            with self.assertRaises(L.InvalidArgumentError):
                r.add("", 3)
            with self.assertRaises(L.InvalidArgumentError):
                r.add("x" * 256, 3)
            with self.assertRaises(ValueError):
                r.add("a\0b", 3)
            with self.assertRaises(TypeError):
                r.add(5, 3)
            with self.assertRaises(L.InvalidArgumentError):
                r.candidates(1, k=0)
            with self.assertRaises(L.InvalidArgumentError):
                r.candidates(1, k=L.constants["LR_RING_MAX_K"] + 1)
            with self.assertRaises(ValueError):
                r.candidates(-1)

    def test_bytes_names(self):
        with L.Ring() as r:
            r.add(b"host-a", 1)
            r.add("host-b", 2)
            self.assertEqual(len(r), 2)

    def test_limits(self):
        with L.Ring(max_instances=2, vnodes=4) as r:
            r.add("a", 1)
            r.add("b", 2)
            with self.assertRaises(L.LimitError):
                r.add("c", 3)


if __name__ == "__main__":
    unittest.main()
