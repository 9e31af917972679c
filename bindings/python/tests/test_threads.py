"""Threads: a shared Router from many threads, close() racing calls, and
a shared Index (serialized by the binding). cffi releases the GIL in every
call, so these run the C code truly concurrently; a broken contract shows
up as a crash or a wrong count, not as a polite failure."""

from __future__ import annotations

import threading
import unittest

import libroute as L
from support import tokens

S = 10**9
THREADS = 4


def run_threads(target, n=THREADS):
    errors = []

    def wrap(k):
        try:
            target(k)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return errors


class SharedRouter(unittest.TestCase):

    def test_many_threads_one_router(self):
        per = 300
        prompts = [tokens(256, i) for i in range(16)]
        with L.Router("prefix-cache-and-load", seed=3) as r:
            for i in range(8):
                r.add_instance(f"h{i}")

            def work(k):
                for i in range(per):
                    rid = k * per + i
                    r.route(prompts[rid % 16], request_id=rid, now_ns=S + i)
                    r.first_token(rid, now_ns=S + i + 1)
                    r.complete(rid, 8, now_ns=S + i + 2)
                    if i % 50 == 0:
                        r.stats()
                        r.set_stats(k, running=1, waiting=0, kv_use=0.1,
                                    scraped_ns=S + i)

            self.assertEqual(run_threads(work), [])
            st = r.stats()
            self.assertEqual(st.routes, THREADS * per)
            self.assertEqual(st.inflight, 0)

    def test_close_while_calls_run(self):
        r = L.Router("least-request")
        for i in range(4):
            r.add_instance(f"h{i}")
        started = threading.Barrier(THREADS + 1)

        def work(k):
            started.wait()
            i = 0
            while True:
                rid = k * 10**9 + i
                try:
                    r.route(tokens(64, i), request_id=rid, now_ns=S)
                    r.complete(rid, 1, now_ns=S)
                except L.ClosedError:
                    return
                i += 1

        ts = [threading.Thread(target=work, args=(k,))
              for k in range(THREADS)]
        for t in ts:
            t.start()
        started.wait()
        r.close()  # waits for the calls in progress, then destroys
        for t in ts:
            t.join(60)
            self.assertFalse(t.is_alive())
        self.assertTrue(r.closed)


class SharedIndex(unittest.TestCase):

    def test_threads_share_one_index_safely(self):
        per = 200
        with L.Index(capacity_blocks=1 << 12) as idx:
            def work(k):
                for i in range(per):
                    t = tokens(128, k * per + i)
                    idx.learn(t, k, now_ns=S + i)
                    m = idx.match(t, now_ns=S + i)
                    assert m.hits and m.hits[0].tokens == 128, m

            self.assertEqual(run_threads(work), [])
            self.assertEqual(idx.stats().instances, THREADS)

    def test_close_racing_an_index(self):
        idx = L.Index()
        go = threading.Event()

        def work(k):
            go.wait()
            try:
                while True:
                    idx.learn(tokens(64, k), k, now_ns=S)
                    idx.stats()
            except L.ClosedError:
                pass

        ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        go.set()
        idx.close()
        for t in ts:
            t.join(60)
        self.assertTrue(idx.closed)


if __name__ == "__main__":
    unittest.main()
