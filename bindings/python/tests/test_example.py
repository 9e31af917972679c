"""The example runs (B40: examples are tests, so they never rot)."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

from support import EXAMPLE


class Example(unittest.TestCase):

    def run_example(self, *args):
        return subprocess.run([sys.executable, EXAMPLE, *args],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ))

    def test_route_workload(self):
        p = self.run_example("--conversations", "16", "--turns", "3",
                             "--policy", "prefix-cache-and-load",
                             "--policy", "dualmap", "--verbose")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("hit rate", p.stdout)
        rows = [line for line in p.stdout.splitlines()
                if line.startswith(("prefix-cache-and-load ", "dualmap "))]
        self.assertEqual(len(rows), 2, p.stdout)
        for row in rows:
            self.assertEqual(row.split()[1], "48")  # 16 x 3 requests

    def test_bad_arguments(self):
        p = self.run_example("--policy", "no-such-policy")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown policy", p.stderr)
        p = self.run_example("--turns", "0")
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
