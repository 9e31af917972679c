"""Struct coverage: every field of every public struct is reachable from
Python. A field appended to a header struct (the cdef follows the header
by itself) fails here until a wrapper takes or returns it."""

from __future__ import annotations

import inspect
import unittest

import libroute as L
from libroute import ffi

# Fields no wrapper exposes, on purpose.
SKIP = {"struct_size"}            # set by lr_*_init() in every wrapper
NOT_BOUND = {
    # Python hooks as the C allocator would run Python code (GIL
    # re-acquired) on every allocation, from any thread that calls in.
    "lr_allocator": "per-handle allocators are not exposed; libc is used",
}


def params(fn) -> set:
    return set(inspect.signature(fn).parameters) - {"self"}


# C struct -> (names Python offers, {C field: Python name, or None when a
# Python argument implies it}).
COVER = {
    "lr_bounds": (set(L.Bounds._fields),
                  {"def": "default", "status": None,    # status -> raise
                   "flags": "integer"}),                # LR_BOUNDS_INTEGER
    "lr_index_options": (params(L.Index.__init__), {"allocator": None}),
    "lr_ring_options": (params(L.Ring.__init__), {"allocator": None}),
    "lr_load_options": (params(L.Load.__init__), {"allocator": None}),
    "lr_router_options": (params(L.Router.__init__),
                          {"allocator": None,
                           "flags": None}),  # reserved, must be 0
                          # learner: a mapping of Learner() options, see
                          # test_nested_options_are_reachable
    "lr_prompt": (params(L.Index.learn),
                  {"n_tokens": "n_tokens", "n_boundaries": None,
                   "n_keys": None, "n_mm": None}),
    "lr_mm_input": (set(L.MmInput._fields), {}),
    "lr_index_hit": (set(L.Hit._fields), {}),
    "lr_index_match_result": (set(L.Match._fields),
                              {"hits_capacity": None, "n_hits": None,
                               "hit_size": None}),  # sizeof(lr_index_hit)
    "lr_kv_stored": (params(L.Index.kv_stored)
                     & params(L.Router.kv_stored),
                     {"n_blocks": None, "n_tokens": None,
                      "has_parent": None}),   # parent_hash=None
    "lr_index_stats": (set(L.IndexStats._fields), {}),
    "lr_dispatch": (params(L.Load.dispatch), {}),
    "lr_engine_stats": (params(L.Load.set_stats)
                        & params(L.Router.set_stats), {}),
    "lr_load_snapshot": (set(L.LoadSnapshot._fields), {}),
    "lr_instance_spec": (params(L.Router.add_instance),
                         {"n_models": None}),
    "lr_class_spec": (params(L.Router.set_class), {}),
    "lr_adapter_stats": (params(L.Router.set_adapters),
                         {"n_running": None, "n_waiting": None}),
    "lr_request": (params(L.Router.route),
                   {"id": "request_id", "n_tokens": None,
                    "n_boundaries": None, "has_session": None,
                    "n_mm": None,
                    "flags": None}),  # dry_run, learn, scores,
                                      # may_wait, sheddable
    "lr_score": (set(L.Score._fields), {}),
    "lr_decision": (set(L.Decision._fields),
                    {"scores_capacity": None, "n_scores": None,
                     "score_size": None,    # this build's sizeof(lr_score)
                     "reserved": None}),    # reserved
    "lr_candidate": (set(L.Candidate._fields), {}),
    "lr_policy_input": (params(L.decide), {"n_params": None}),
    "lr_cost_options": (params(L.Cost.__init__), {"allocator": None}),
    "lr_cost_tuner_stats": (set(L.CostTunerStats._fields), {}),
    "lr_move": (set(L.Move._fields), {"from": "from_"}),
    "lr_dispatched": (set(L.Dispatched._fields),
                      {"reserved": None}),   # reserved
    "lr_router_stats": (set(L.RouterStats._fields), {}),
    "lr_vllm_batch_info": (set(L.VllmBatchInfo._fields), {}),
    "lr_kv_source": (set(L.KvSource._fields), {}),
    "lr_mlp_options": (params(L.Mlp.__init__), {"allocator": None}),
    # mlp (a mapping of Mlp() options): see
    # test_nested_options_are_reachable.
    "lr_learner_options": (params(L.Learner.__init__), {"allocator": None}),
    "lr_learner_stats": (set(L.LearnerStats._fields), {}),
}


def fields_of(cname: str):
    """The (name, field) pairs of a struct, or None when it is opaque."""
    t = ffi.typeof(cname)
    try:
        # Lays the struct out first: cffi builds the field list lazily and
        # some builds assert when .fields is read before that.
        ffi.sizeof(t)
    except ffi.error:
        return None
    return t.fields


def public_structs() -> set:
    typedefs, _structs, _unions = ffi.list_types()
    return {name for name in typedefs
            if ffi.typeof(name).kind == "struct"
            and fields_of(name) is not None}


class StructCoverage(unittest.TestCase):

    def test_every_struct_is_accounted_for(self):
        unknown = public_structs() - set(COVER) - set(NOT_BOUND)
        self.assertFalse(unknown, "public structs the binding does not "
                         "know about: %s" % sorted(unknown))

    def test_every_field_is_reachable(self):
        for cname, (offered, rename) in sorted(COVER.items()):
            with self.subTest(struct=cname):
                fields = [f for f, _ in fields_of(cname)]
                for f in fields:
                    if f in SKIP:
                        continue
                    py = rename.get(f, f)
                    if py is None:
                        continue
                    self.assertIn(py, offered, f"{cname}.{f} is not "
                                  f"reachable from Python (as {py!r})")

    def test_nested_options_are_reachable(self):
        # Router(learner={...}) and Learner(mlp={...}) take mappings whose
        # keys are the nested structs' fields, less those the owner sets.
        from libroute.learner import LEARNER_OPTIONS
        from libroute.mlp import MLP_OPTIONS
        for cname, keys in (("lr_learner_options", LEARNER_OPTIONS),
                            ("lr_mlp_options", MLP_OPTIONS)):
            fields = {f for f, _ in fields_of(cname)} - SKIP - {"allocator"}
            with self.subTest(struct=cname):
                self.assertEqual(fields, set(keys))

    def test_renames_name_real_fields(self):
        # A stale entry in COVER would hide nothing, but would rot.
        for cname, (_, rename) in COVER.items():
            fields = {f for f, _ in fields_of(cname)}
            for f in rename:
                self.assertIn(f, fields, f"{cname} has no field {f}")

    def test_size_prefixed_structs_match_their_v1_size(self):
        # The layout is the compiler's (API mode); the library accepts any
        # struct_size >= LR_<T>_SIZE_V1, and ours is sizeof.
        for cname in sorted(COVER):
            fields = fields_of(cname)
            if fields[0][0] != "struct_size":
                continue
            macro = "LR_" + cname[3:].upper() + "_SIZE_V1"
            with self.subTest(struct=cname):
                self.assertIn(macro, L.constants)
                self.assertGreaterEqual(ffi.sizeof(cname),
                                        L.constants[macro])


if __name__ == "__main__":
    unittest.main()
