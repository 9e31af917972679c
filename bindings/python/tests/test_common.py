"""Version, statuses and exceptions, enums and constants, and the
reentrant helpers (block_keys, text_tokens), including how token
arguments are converted."""

from __future__ import annotations

import array
import pickle
import unittest

import libroute as L
from libroute import ffi, lib
from support import tokens


class Version(unittest.TestCase):

    def test_runtime_and_header_agree(self):
        self.assertEqual(L.version_string(), L.HEADER_VERSION)
        self.assertEqual(L.version_number(), L.HEADER_VERSION_NUMBER)
        major, minor, patch = map(int, L.version_string().split("."))
        self.assertEqual(L.version_number(),
                         major * 10000 + minor * 100 + patch)
        self.assertEqual(L.__version__, L.version_string())


class Errors(unittest.TestCase):

    def test_every_status_but_ok_has_its_class(self):
        for st in L.Status:
            if st == L.Status.OK:
                continue
            with self.subTest(status=st.name):
                cls = type(L.errors.error_for(st))
                self.assertIsNot(cls, L.LrError, "no class for " + st.name)
                self.assertTrue(issubclass(cls, L.LrError))

    def test_classes_are_distinct(self):
        classes = [type(L.errors.error_for(st)) for st in L.Status if st]
        self.assertEqual(len(classes), len(set(classes)))

    def test_error_carries_status_name_and_message(self):
        e = L.errors.error_for(L.Status.EINVAL, "lr_x")
        self.assertIsInstance(e, L.InvalidArgumentError)
        self.assertIsInstance(e, ValueError)
        self.assertIs(e.status, L.Status.EINVAL)
        self.assertEqual(e.name, "LR_EINVAL")
        self.assertEqual(e.message, L.strerror(L.Status.EINVAL))
        self.assertEqual(e.function, "lr_x")
        self.assertIn("LR_EINVAL", str(e))
        self.assertIn("lr_x", str(e))

    def test_unknown_status_is_a_plain_lrerror(self):
        e = L.errors.error_for(9999)
        self.assertIs(type(e), L.LrError)
        self.assertEqual(e.status, 9999)
        self.assertEqual(e.name, "LR_UNKNOWN")
        self.assertEqual(e.message, "unknown status")

    def test_builtin_bases(self):
        self.assertTrue(issubclass(L.NotFoundError, LookupError))
        self.assertTrue(issubclass(L.OutOfMemoryError, MemoryError))
        self.assertTrue(issubclass(L.OutOfRangeError, ValueError))
        self.assertTrue(issubclass(L.CorruptError, ValueError))
        self.assertTrue(issubclass(L.BusyError, L.LrError))
        self.assertTrue(issubclass(L.ExpiredError, L.LrError))

    def test_errors_pickle(self):
        e = L.errors.error_for(L.Status.ENOENT, "lr_router_complete")
        e2 = pickle.loads(pickle.dumps(e))
        self.assertIs(type(e2), L.NotFoundError)
        self.assertEqual(str(e2), str(e))

    def test_strerror_and_name_come_from_the_library(self):
        self.assertEqual(L.status_name(L.Status.EBUFSIZE), "LR_EBUFSIZE")
        self.assertEqual(L.status_name(L.Status.EBUSY), "LR_EBUSY")
        self.assertIs(type(L.errors.error_for(L.Status.EBUSY)), L.BusyError)
        self.assertIs(type(L.errors.error_for(L.Status.EEXPIRED)),
                      L.ExpiredError)
        self.assertEqual(L.strerror(0),
                         ffi.string(lib.lr_strerror(0)).decode())

    def test_a_failing_call_raises_its_class(self):
        with self.assertRaises(L.InvalidArgumentError) as cm:
            L.block_keys([1, 2, 3], block_tokens=0)
        self.assertEqual(cm.exception.function, "lr_block_keys")


class Enums(unittest.TestCase):

    def test_enums_mirror_the_header(self):
        self.assertEqual(L.Status.OK, lib.LR_OK)
        self.assertEqual(L.Status.EBUFSIZE, lib.LR_EBUFSIZE)
        self.assertEqual(L.Trust.REMOTE, lib.LR_TRUST_REMOTE)
        self.assertEqual(L.Policy.DUALMAP, lib.LR_POLICY_DUALMAP)
        self.assertEqual(L.Reason.PREFIX_HIT, lib.LR_REASON_PREFIX_HIT)
        self.assertEqual(L.CostKind.GORGO, lib.LR_COST_GORGO)
        self.assertEqual(L.CostParam.W_QUEUE_MIN, lib.LR_COST_W_QUEUE_MIN)
        self.assertEqual(L.RingKey.HOTNESS, lib.LR_RING_KEY_HOTNESS)

    def test_counts_come_from_the_library(self):
        # The header has no LR_POLICY_COUNT / LR_PARAM_COUNT since 0.2: the
        # loaded library says how many values it has. This build's enums
        # name exactly those (same series, same build).
        self.assertFalse(hasattr(lib, "LR_POLICY_COUNT"))
        self.assertFalse(hasattr(lib, "LR_PARAM_COUNT"))
        self.assertEqual(len(L.Policy), L.policy_count())
        self.assertEqual(len(L.Param), L.param_count())
        self.assertEqual(len(L.Reason), L.reason_count())
        self.assertEqual(len(L.CostKind), L.cost_kind_count())
        self.assertEqual(len(L.CostParam), L.cost_param_count())
        self.assertEqual(L.lodestar_feature_count(),
                         L.constants["LR_LODESTAR_FEATURES"])
        # A value past the enum (a newer library) comes back as an int.
        self.assertEqual(L.enums.as_enum(L.Reason, L.reason_count()),
                         L.reason_count())
        with self.assertRaises(ValueError):
            L.reason_name(L.reason_count())

    def test_policy_labels_round_trip(self):
        for p in L.Policy:
            with self.subTest(policy=p.name):
                self.assertEqual(L.Policy.from_label(p.label), p)
                self.assertEqual(L.policy_from_name(L.policy_name(p)), p)
        self.assertEqual(L.Policy.PREFIX_CACHE_AND_LOAD.label,
                         "prefix-cache-and-load")
        with self.assertRaises(L.NotFoundError):
            L.Policy.from_label("no-such-policy")
        with self.assertRaises(ValueError):
            L.policy_name(10**6)

    def test_reason_labels(self):
        self.assertEqual(L.Reason.PREFIX_HIT.label, "prefix-hit")
        for r in L.Reason:
            self.assertEqual(L.reason_name(r), r.label)

    def test_every_param_has_sane_bounds(self):
        for p in L.Param:
            with self.subTest(param=p.name):
                b = p.bounds
                self.assertLessEqual(b.lo, b.default)
                self.assertLessEqual(b.default, b.hi)
                self.assertEqual(L.param_bounds(p), b)
                if b.integer:
                    self.assertEqual(b.default, int(b.default))
        with self.assertRaises(L.NotSupportedError):
            L.param_bounds(10**6)
        with self.assertRaises(L.NotSupportedError):
            L.param_bounds(-1)
        with self.assertRaises(ValueError):
            L.param_bounds("no_such_param")

    def test_integer_flag(self):
        # lr_bounds.flags (LR_BOUNDS_INTEGER), new in 0.2.
        self.assertTrue(L.Param.LODESTAR_CANDIDATES.bounds.integer)
        self.assertTrue(L.Param.DUALMAP_WINDOW.bounds.integer)
        self.assertFalse(L.Param.TTFT_SLO_S.bounds.integer)
        lo, hi, default, integer = L.Param.TTFT_SLO_S.bounds
        self.assertEqual((default, integer), (5.0, False))
        # The 0.1 three-field construction still works.
        self.assertEqual(L.Bounds(0, 1, 0.5), L.Bounds(0, 1, 0.5, False))

    def test_flags(self):
        self.assertEqual(L.RouteFlag.DRY_RUN, lib.LR_ROUTE_DRY_RUN)
        self.assertEqual(L.RouteFlag.NO_LEARN, lib.LR_ROUTE_NO_LEARN)
        self.assertEqual(L.RouteFlag.MAY_WAIT, lib.LR_ROUTE_MAY_WAIT)
        self.assertEqual(L.RouteFlag.SHEDDABLE, lib.LR_ROUTE_SHEDDABLE)
        self.assertEqual(L.MatchFlag.NO_TOUCH, lib.LR_MATCH_NO_TOUCH)

    def test_constants(self):
        c = L.constants
        self.assertEqual(c["LR_INSTANCE_NONE"], 2**32 - 1)
        self.assertEqual(L.INSTANCE_NONE, 2**32 - 1)
        self.assertEqual(c["LR_RING_MAX_K"], lib.LR_RING_MAX_K)
        self.assertEqual(L.enums.LR_TEXT_MAX_WIDTH, lib.LR_TEXT_MAX_WIDTH)
        self.assertEqual(c["LR_VERSION_NUMBER"], L.HEADER_VERSION_NUMBER)
        # Enum values are in the enums, not duplicated as constants.
        self.assertNotIn("LR_EINVAL", c)
        self.assertTrue(all(k.startswith("LR_") for k in c))


class BlockKeys(unittest.TestCase):

    def test_one_key_per_complete_block(self):
        keys = L.block_keys(tokens(100), block_tokens=16)
        self.assertIsInstance(keys, array.array)
        self.assertEqual(len(keys), 6)
        self.assertEqual(len(L.block_keys([], 16)), 0)
        self.assertEqual(len(L.block_keys(tokens(15), 16)), 0)

    def test_keys_are_chained_prefix_names(self):
        a = tokens(64, seed=1)
        b = a[:32] + tokens(32, seed=2)
        ka, kb = L.block_keys(a, 16), L.block_keys(b, 16)
        self.assertEqual(ka[:2], kb[:2])
        self.assertNotEqual(ka[2], kb[2])

    def test_tenant_salt_separates(self):
        t = tokens(32)
        self.assertNotEqual(L.block_keys(t, 16, tenant_salt=1)[0],
                            L.block_keys(t, 16, tenant_salt=2)[0])

    def test_every_token_form_gives_the_same_keys(self):
        t = tokens(200, seed=3)
        want = L.block_keys(t, 16)
        forms = {
            "list": t,
            "tuple": tuple(t),
            "generator": (x for x in t),
            "range-like": iter(t),
            "array('I')": array.array("I", t),
            "array('q')": array.array("q", t),        # copied, checked
            "memoryview('I')": memoryview(array.array("I", t)),
            "bytes cast to I": memoryview(
                array.array("I", t).tobytes()).cast("I"),
        }
        for name, form in forms.items():
            with self.subTest(form=name):
                self.assertEqual(L.block_keys(form, 16), want)

    def test_bad_tokens(self):
        with self.assertRaises(ValueError):
            L.block_keys([1, -1, 3], 16)
        with self.assertRaises(ValueError):
            L.block_keys([2**32], 16)
        with self.assertRaises(TypeError):
            L.block_keys(["a"], 16)
        with self.assertRaises(TypeError):
            L.block_keys("abc", 16)
        with self.assertRaises(TypeError):
            L.block_keys(b"raw bytes are not tokens", 16)
        with self.assertRaises(TypeError):
            L.block_keys(3.5, 16)
        with self.assertRaises(ValueError):
            L.block_keys([1], 16, tenant_salt=-1)

    def test_native_buffers_are_not_copied(self):
        from libroute import _util

        def address(c):
            return int(ffi.cast("uintptr_t", c))

        a = array.array("I", tokens(8))
        base = a.buffer_info()[0]
        with _util.u32_in(a, "t") as c:
            self.assertEqual(address(c), base)
            self.assertEqual(len(c), 8)
        with _util.u32_in(memoryview(a)[2:], "t") as c:
            self.assertEqual(address(c), base + 8)
            self.assertEqual(len(c), 6)
        q = array.array("Q", [1, 2])
        with _util.u64_in(q, "k") as c:
            self.assertEqual(address(c), q.buffer_info()[0])
        with _util.u32_in(list(a), "t") as c:  # a list is copied
            self.assertNotEqual(address(c), base)
            self.assertEqual(list(c), list(a))

    def test_buffer_is_released_after_the_call(self):
        a = array.array("I", tokens(64))
        L.block_keys(a, 16)
        a.append(7)  # raises BufferError while a view is held


class TextTokens(unittest.TestCase):

    def test_width_and_count(self):
        t = L.text_tokens("hello, world", width=4)
        self.assertIsInstance(t, array.array)
        self.assertEqual(t.itemsize, 4)
        self.assertEqual(len(t), 3)
        self.assertEqual(len(L.text_tokens("", 4)), 0)
        self.assertEqual(len(L.text_tokens(b"12345", 4)), 2)

    def test_equal_prefixes_give_equal_tokens(self):
        a = L.text_tokens("You are a helpful assistant. Hi", 4)
        b = L.text_tokens("You are a helpful assistant. Bye", 4)
        self.assertEqual(a[:7], b[:7])

    def test_str_is_utf8(self):
        self.assertEqual(L.text_tokens("héllo", 2),
                         L.text_tokens("héllo".encode("utf-8"), 2))
        self.assertEqual(L.text_tokens(bytearray(b"abcdefgh"), 4),
                         L.text_tokens(memoryview(b"abcdefgh"), 4))

    def test_bad_width(self):
        with self.assertRaises(L.InvalidArgumentError):
            L.text_tokens("abc", 0)
        with self.assertRaises(L.InvalidArgumentError):
            L.text_tokens("abc", lib.LR_TEXT_MAX_WIDTH + 1)
        with self.assertRaises(TypeError):
            L.text_tokens(12, 4)

    def test_tokens_feed_block_keys_without_copy(self):
        t = L.text_tokens("x" * 640, 4)
        self.assertEqual(len(L.block_keys(t, 16)), 10)


if __name__ == "__main__":
    unittest.main()
