"""Multi-model fleets and LoRA adapters: add_instance(models=,
max_adapters=), route()/candidates()/policy_input() with model= and
adapter=, set_adapters(), adapters(), name_hash(), adapter_salt(), the
adapter columns of a candidate row and the adapter counters."""

from __future__ import annotations

import unittest

import libroute as L
from support import tokens

S = 10**9
MAX_NAME = L.constants["LR_ROUTER_MAX_NAME"]


def fleet(policy="least-request", **kw):
    """Two instances of "llama", one of "qwen" (with an alias)."""
    r = L.Router(policy, seed=7)
    r.add_instance("a:8000", models=["llama"], **kw)
    r.add_instance("b:8000", models=["llama"], **kw)
    r.add_instance("c:8000", models=["qwen", "qwen-latest"], **kw)
    return r


class Names(unittest.TestCase):

    def test_name_hash(self):
        self.assertEqual(L.name_hash(""), 0)
        self.assertEqual(L.name_hash(b""), 0)
        h = L.name_hash("sql-lora")
        self.assertNotEqual(h, 0)
        self.assertEqual(h, L.name_hash(b"sql-lora"))
        self.assertNotEqual(h, L.name_hash("sql-lora2"))
        self.assertLess(h, 2**64)
        # Bytes with a NUL are a name of their own (the length is passed).
        self.assertNotEqual(L.name_hash(b"a\0b"), L.name_hash(b"a"))
        with self.assertRaises(TypeError):
            L.name_hash(5)

    def test_adapter_salt(self):
        self.assertEqual(L.adapter_salt(1234, 0), 1234)
        h = L.name_hash("sql-lora")
        s = L.adapter_salt(1234, h)
        self.assertNotIn(s, (0, 1234))
        self.assertEqual(s, L.adapter_salt(1234, h))
        self.assertNotEqual(s, L.adapter_salt(1235, h))
        # An adapter's keys differ from the base model's.
        t = tokens(64)
        self.assertNotEqual(list(L.block_keys(t, tenant_salt=s)),
                            list(L.block_keys(t, tenant_salt=1234)))
        with self.assertRaises(ValueError):
            L.adapter_salt(-1, h)
        with self.assertRaises(ValueError):
            L.adapter_salt(0, 2**64)


class Models(unittest.TestCase):

    def test_route_goes_to_the_model_instances(self):
        with fleet() as r:
            for i in range(12):
                d = r.route(tokens(40, i), request_id=i, now_ns=S,
                            model="llama")
                self.assertIn(d.instance, (0, 1))
            for i, m in enumerate(("qwen", b"qwen-latest"), 100):
                d = r.route(tokens(40, i), request_id=i, now_ns=S, model=m)
                self.assertEqual(d.instance, 2)
            # No model (None or ""): any instance.
            seen = {r.route(tokens(40, i), request_id=i, now_ns=S,
                            model=m).instance
                    for i, m in zip(range(200, 230), [None, ""] * 15)}
            self.assertEqual(seen, {0, 1, 2})

    def test_unknown_model_is_not_found(self):
        with fleet() as r:
            with self.assertRaises(L.NotFoundError) as cm:
                r.route(tokens(40), request_id=1, now_ns=S, model="gpt-9")
            self.assertEqual(cm.exception.status, L.Status.ENOENT)
            with self.assertRaises(L.NotFoundError):
                r.candidates(tokens(40), now_ns=S, model="gpt-9")
            self.assertEqual(r.stats().inflight, 0)

    def test_draining_model_is_a_state_error(self):
        with fleet() as r:
            r.drain_instance(2)
            with self.assertRaises(L.StateError):
                r.route(tokens(40), request_id=1, now_ns=S, model="qwen")
            r.drain_instance(2, draining=False)
            self.assertEqual(r.route(tokens(40), request_id=1, now_ns=S,
                                     model="qwen").instance, 2)

    def test_candidates_and_policy_input_filter(self):
        with fleet() as r:
            rows = r.candidates(tokens(40), now_ns=S, model="llama")
            self.assertEqual([c.instance for c in rows], [0, 1])
            rows = r.candidates(tokens(40), now_ns=S)
            self.assertEqual([c.instance for c in rows], [0, 1, 2])
            inp = r.policy_input(tokens(40), model="qwen", adapter="x")
            self.assertEqual(inp.prompt_tokens, 40)
            with self.assertRaises(L.InvalidArgumentError):
                r.policy_input(tokens(40), model="m" * (MAX_NAME + 1))

    def test_bad_names(self):
        with fleet() as r:
            long = "m" * (MAX_NAME + 1)
            for kw in ({"model": long}, {"adapter": long}):
                with self.subTest(**{k: "long" for k in kw}):
                    with self.assertRaises(L.InvalidArgumentError) as cm:
                        r.route(tokens(40), request_id=1, now_ns=S, **kw)
                    self.assertEqual(cm.exception.status, L.Status.EINVAL)
            # The longest name is fine (and names no model here).
            with self.assertRaises(L.NotFoundError):
                r.route(tokens(40), request_id=1, now_ns=S,
                        model="m" * MAX_NAME)
            with self.assertRaises(ValueError):
                r.route(tokens(40), request_id=1, now_ns=S, model="a\0b")
            with self.assertRaises(TypeError):
                r.route(tokens(40), request_id=1, now_ns=S, model=3)
            self.assertEqual(r.stats().routes, 0)

    def test_bad_instances(self):
        with L.Router("least-request") as r:
            max_models = L.constants["LR_ROUTER_MAX_MODELS"]
            max_adapters = L.constants["LR_ROUTER_MAX_ADAPTERS"]
            with self.assertRaises(L.InvalidArgumentError):
                r.add_instance("a", models=["m" * (MAX_NAME + 1)])
            with self.assertRaises(L.InvalidArgumentError):
                r.add_instance("a", models=[""])
            with self.assertRaises(L.InvalidArgumentError):
                r.add_instance("a", models=[f"m{i}" for i in
                                            range(max_models + 1)])
            with self.assertRaises(L.OutOfRangeError):
                r.add_instance("a", max_adapters=max_adapters + 1)
            with self.assertRaises(TypeError):
                r.add_instance("a", models="llama")  # one name, not a list
            with self.assertRaises(ValueError):
                r.add_instance("a", max_adapters=-1)
            self.assertEqual(r.instance_count, 0)
            r.add_instance("a", models=[f"m{i}" for i in range(max_models)],
                           max_adapters=max_adapters)
            r.add_instance("b", models=[])  # any model
            self.assertEqual(r.instance_count, 2)


class Adapters(unittest.TestCase):

    def test_routes_make_adapters_resident(self):
        with fleet("aibrix-lora", max_adapters=2) as r:
            d = r.route(tokens(40), request_id=1, now_ns=S, model="llama",
                        adapter="sql")
            self.assertIn(d.instance, (0, 1))
            self.assertEqual(r.adapters(d.instance), [L.name_hash("sql")])
            self.assertEqual(r.adapters(2), [])
            st = r.stats()
            self.assertEqual((st.adapter_routes, st.adapter_loads), (1, 1))
            # It is resident there now: the next goes there, no load.
            d2 = r.route(tokens(40, 1), request_id=2, now_ns=S,
                         model="llama", adapter="sql")
            self.assertEqual(d2.instance, d.instance)
            self.assertIs(d2.reason, L.Reason.ADAPTER)
            st = r.stats()
            self.assertEqual((st.adapter_routes, st.adapter_loads), (2, 1))
            # A base-model route counts neither.
            r.route(tokens(40, 2), request_id=3, now_ns=S, model="llama")
            self.assertEqual(r.stats().adapter_routes, 2)

    def test_set_adapters_and_candidate_columns(self):
        with fleet("aibrix-lora", max_adapters=4) as r:
            r.set_adapters(1, running=["sql", b"chat"], waiting=["code"],
                           scraped_ns=S)
            got = set(r.adapters(1))
            self.assertEqual(got, {L.name_hash(n)
                                   for n in ("sql", "chat", "code")})
            rows = r.candidates(tokens(40), now_ns=S, model="llama",
                                adapter="code")
            by = {c.instance: c for c in rows}
            self.assertEqual(by[1].adapter_missing, 0)
            self.assertEqual(by[1].adapter_load_s, 0.0)
            self.assertEqual(by[1].adapters_resident, 3)
            self.assertEqual(by[0].adapter_missing, 1)
            self.assertEqual(by[0].adapter_free, 4)
            self.assertAlmostEqual(by[0].adapter_load_s,
                                   r.get_param(L.Param.ADAPTER_LOAD_S))
            self.assertEqual(by[0].adapter_evicts, 0)
            d = r.route(tokens(40), request_id=1, now_ns=S, model="llama",
                        adapter="code")
            self.assertEqual(d.instance, 1)
            self.assertEqual(r.stats().adapter_loads, 0)
            # A report replaces the router's guess; max_adapters narrows.
            r.set_adapters(1, running=["chat"], max_adapters=1,
                           scraped_ns=2 * S)
            self.assertEqual(r.adapters(1)[0], L.name_hash("chat"))

    def test_set_adapters_errors(self):
        with fleet() as r:
            for bad in ([""], ["x" * (MAX_NAME + 1)]):
                with self.assertRaises(L.InvalidArgumentError):
                    r.set_adapters(0, running=bad, scraped_ns=S)
                with self.assertRaises(L.InvalidArgumentError):
                    r.set_adapters(0, waiting=bad, scraped_ns=S)
            too_many = [f"a{i}" for i in
                        range(L.constants["LR_ROUTER_MAX_ADAPTERS"] + 1)]
            with self.assertRaises(L.InvalidArgumentError):
                r.set_adapters(0, running=too_many, scraped_ns=S)
            with self.assertRaises(L.OutOfRangeError):
                r.set_adapters(0, max_adapters=65, scraped_ns=S)
            with self.assertRaises(L.NotFoundError):
                r.set_adapters(9, running=["a"], scraped_ns=S)
            with self.assertRaises(L.NotFoundError):
                r.adapters(9)
            with self.assertRaises(TypeError):
                r.set_adapters(0, running="sql", scraped_ns=S)
            with self.assertRaises(TypeError):
                r.set_adapters(0, running=["sql"])  # scraped_ns required
            self.assertEqual(r.adapters(0), [])  # nothing changed
            r.set_adapters(0, scraped_ns=S)  # an engine with none

    def test_many_resident_adapters_are_all_returned(self):
        with L.Router("least-request") as r:
            r.add_instance("a", max_adapters=64)
            names = [f"lora-{i}" for i in range(40)]
            r.set_adapters(0, running=names, scraped_ns=S)
            self.assertEqual(set(r.adapters(0)),
                             {L.name_hash(n) for n in names})

    def test_adapter_keys_prefixes_apart(self):
        with L.Router("prefix-cache-and-load", seed=1) as r:
            for n in ("a", "b", "c", "d"):
                r.add_instance(n)
            t = tokens(256)
            d = r.route(t, request_id=1, now_ns=S, adapter="sql")
            r.complete(1, 1, now_ns=S + 1)
            hit = r.route(t, request_id=2, now_ns=2 * S, adapter="sql",
                          dry_run=True)
            self.assertEqual(hit.instance, d.instance)
            self.assertGreater(hit.cached_tokens, 0)
            base = r.route(t, request_id=3, now_ns=2 * S, dry_run=True)
            self.assertEqual(base.cached_tokens, 0)
            other = r.route(t, request_id=4, now_ns=2 * S, adapter="chat",
                            dry_run=True)
            self.assertEqual(other.cached_tokens, 0)

    def test_param_and_policies(self):
        b = L.Param.ADAPTER_LOAD_S.bounds
        self.assertEqual(b.default, 0.1)
        self.assertEqual(L.Policy.from_label("lora-affinity"),
                         L.Policy.LORA_AFFINITY)
        self.assertEqual(L.Policy.AIBRIX_LORA.label, "aibrix-lora")
        self.assertEqual(L.Reason.ADAPTER.label, "adapter")

    def test_decide_lora_affinity_prefers_resident(self):
        rows = [L.Candidate(0, adapter_missing=1, adapter_free=0,
                            adapter_load_s=0.1),
                L.Candidate(1),  # resident
                L.Candidate(2, adapter_missing=1, adapter_free=2,
                            adapter_load_s=0.1)]
        d = L.policy.decide("lora-affinity", rows, prompt_tokens=10)
        self.assertEqual(d.instance, 1)
        self.assertIs(d.reason, L.Reason.ADAPTER)
        with self.assertRaises(L.InvalidArgumentError):
            L.policy.decide("lora-affinity",
                            [L.Candidate(0, adapter_missing=2)],
                            prompt_tokens=10)


if __name__ == "__main__":
    unittest.main()
