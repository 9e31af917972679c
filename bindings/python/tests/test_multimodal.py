"""Multimodal inputs: route()/candidates()/policy_input() and
Index.learn()/match() with mm=, kv_stored(mm_hashes=) on the index and
the router, vLLM batches whose extra_keys carry (identifier, offset),
mm_key_hash() and the refusals (tests/test-vllm.c
router_multimodal_match and tests/test-index.c mm_keys_model have the C
shapes)."""

from __future__ import annotations

import array
import unittest

import libroute as L
from support import msgpack_batch, tokens

S = 10**9
BT = 16
IMG_A = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
IMG_B = "img-b"
MAX_ID = L.constants["LR_INDEX_MAX_MM_IDENTIFIER"]
# The image's placeholder tokens [19, 39) of a 48-token prompt: blocks 1
# and 2, at offsets 3 and 3 - 16 from their first tokens.
IMG = L.MmInput(IMG_A, BT + 3, 20)


def mm_hashes(identifier):
    """The per-block multimodal hashes of the three blocks with IMG's
    placeholder filled by ``identifier``."""
    return [0, L.mm_key_hash(identifier, 3),
            L.mm_key_hash(identifier, 3 - BT)]


def fleet():
    r = L.Router("prefix-cache", seed=3, block_tokens=BT)
    # a third of the prompt cached is a prefix hit (default: half)
    r.set_param(L.Param.PREFIX_MIN_RATIO, 0.25)
    ids = [r.add_instance(f"e{i}:8000") for i in range(3)]
    return r, ids


class KeyHash(unittest.TestCase):

    def test_documented_formula(self):
        # XXH3_64bits_withSeed(lr_name_hash(id) and offset as 8
        # little-endian bytes each, 0x4c524d4d4b455931), computed apart
        # from the library with xxHash itself.
        golden = {
            ("img-a", 0): 0xe90b480053e9c1b6,
            ("img-a", 3): 0xdaae4e2a2b0c5b58,
            ("img-a", -13): 0x6567d68416faaaee,
            ("img-a", -2**63): 0x5328aabe899ddcc0,
            (IMG_A, 3): 0x622817ecd71d32e8,
            (IMG_A, -13): 0xe476f936a5db635d,
            ("audio-c", 4096): 0xcbfee605fdaebbb6,
        }
        for (ident, off), want in golden.items():
            with self.subTest(identifier=ident, offset=off):
                self.assertEqual(L.mm_key_hash(ident, off), want)
                self.assertEqual(L.mm_key_hash(ident.encode(), off), want)

    def test_arguments(self):
        self.assertNotEqual(L.mm_key_hash("img-a", 3),
                            L.mm_key_hash("img-a", 4))
        self.assertNotEqual(L.mm_key_hash("img-a", 3),
                            L.mm_key_hash("img-b", 3))
        L.mm_key_hash("img-a", 2**63 - 1)
        with self.assertRaises(ValueError):
            L.mm_key_hash("img-a", 2**63)
        with self.assertRaises(ValueError):
            L.mm_key_hash("img-a", -2**63 - 1)
        with self.assertRaises(TypeError):
            L.mm_key_hash(5, 0)
        with self.assertRaises(TypeError):
            L.mm_key_hash("img-a", 1.0)

    def test_constants(self):
        self.assertEqual(MAX_ID, 255)
        self.assertEqual(L.constants["LR_PROMPT_SIZE_V2"],
                         L.ffi.offsetof("lr_prompt", "n_mm") +
                         L.ffi.sizeof("size_t"))
        self.assertEqual(L.constants["LR_REQUEST_SIZE_V4"],
                         L.ffi.offsetof("lr_request", "n_mm") +
                         L.ffi.sizeof("size_t"))
        self.assertEqual(L.constants["LR_KV_STORED_SIZE_V3"],
                         L.ffi.offsetof("lr_kv_stored", "mm_hashes") +
                         L.ffi.sizeof("void *"))


class IndexInputs(unittest.TestCase):

    def held(self, ix, t, instance, **kw):
        m = ix.match(t, now_ns=S, touch=False, **kw)
        return next((h.tokens for h in m.hits if h.instance == instance), 0)

    def test_learn_and_match(self):
        t = tokens(48, 1)
        with L.Index(block_tokens=BT) as ix:
            ix.learn(t, 1, now_ns=S, mm=[IMG])
            self.assertEqual(self.held(ix, t, 1, mm=[IMG]), 48)
            # plain tuples and bytes are the same input
            self.assertEqual(
                self.held(ix, t, 1, mm=[(IMG_A.encode(), BT + 3, 20)]), 48)
            # the text before the image only: without it, with another
            # one, with it elsewhere
            self.assertEqual(self.held(ix, t, 1), BT)
            self.assertEqual(self.held(ix, t, 1, mm=[]), BT)
            self.assertEqual(
                self.held(ix, t, 1, mm=[(IMG_B, BT + 3, 20)]), BT)
            self.assertEqual(
                self.held(ix, t, 1, mm=[(IMG_A, BT + 4, 19)]), BT)
            # the engine's store of the same blocks keys them alike
            ix.kv_stored(2, [7, 8, 9], t, block_size=BT, now_ns=S,
                         mm_hashes=mm_hashes(IMG_A))
            self.assertEqual(self.held(ix, t, 2, mm=[IMG]), 48)
            self.assertEqual(self.held(ix, t, 2), BT)
            # all-zero hashes: the text's keys
            ix.kv_stored(3, [17, 18, 19], t, block_size=BT, now_ns=S,
                         mm_hashes=array.array("Q", [0, 0, 0]))
            self.assertEqual(self.held(ix, t, 3), 48)
            self.assertEqual(self.held(ix, t, 3, mm=[IMG]), BT)

    def test_refusals(self):
        t = tokens(48, 2)
        with L.Index(block_tokens=BT) as ix:
            for mm in bad_inputs(len(t)):
                with self.subTest(mm=mm):
                    with self.assertRaises(L.InvalidArgumentError):
                        ix.learn(t, 1, now_ns=S, mm=mm)
                    with self.assertRaises(L.InvalidArgumentError):
                        ix.match(t, now_ns=S, mm=mm)
            self.assertEqual(ix.stats().blocks, 0)
            # not with keys
            keys = L.block_keys(t, BT)
            with self.assertRaises(L.InvalidArgumentError):
                ix.learn(None, 1, now_ns=S, keys=keys, n_tokens=48,
                         mm=[IMG])
            # one hash per block, no other count
            for n in (2, 4):
                with self.assertRaises(ValueError):
                    ix.kv_stored(1, [1, 2, 3], t, block_size=BT, now_ns=S,
                                 mm_hashes=[0] * n)
            # a nonzero hash needs the engine's blocks to be the index's
            with self.assertRaises(L.NotSupportedError):
                ix.kv_stored(1, [1], t[:32], block_size=32, now_ns=S,
                             mm_hashes=[L.mm_key_hash(IMG_A, 3)])
            self.assertEqual(ix.stats().blocks, 0)


def bad_inputs(n_tokens):
    """Input lists the library refuses with LR_EINVAL."""
    return [
        [("", 0, 4)],                                   # empty identifier
        [("x" * (MAX_ID + 1), 0, 4)],                   # too long
        [(IMG_A, 0, 0)],                                # no tokens
        [(IMG_A, n_tokens - 2, 4)],                     # past the prompt
        [(IMG_A, 10, 8), (IMG_B, 12, 4)],               # overlapping
        [(IMG_A, 20, 4), (IMG_B, 10, 4)],               # out of order
    ]


class BindingChecks(unittest.TestCase):
    """What the binding refuses before the library sees it."""

    def test_shapes(self):
        t = tokens(48, 3)
        with L.Index(block_tokens=BT) as ix:
            ix.learn(t, 1, now_ns=S, mm=[("x" * MAX_ID, 0, 4)])
            with self.assertRaises(TypeError):   # one input, not a list
                ix.learn(t, 1, now_ns=S, mm=IMG)
            with self.assertRaises(TypeError):
                ix.learn(t, 1, now_ns=S, mm=(IMG_A, 0, 4))
            with self.assertRaises(TypeError):
                ix.learn(t, 1, now_ns=S, mm=[(IMG_A, 0)])
            with self.assertRaises(TypeError):
                ix.learn(t, 1, now_ns=S, mm=[(None, 0, 4)])
            with self.assertRaises(TypeError):
                ix.learn(t, 1, now_ns=S, mm=5)
            with self.assertRaises(ValueError):  # NUL in the identifier
                ix.learn(t, 1, now_ns=S, mm=[("a\0b", 0, 4)])
            with self.assertRaises(ValueError):
                ix.learn(t, 1, now_ns=S, mm=[(IMG_A, -1, 4)])
            with self.assertRaises(ValueError):
                ix.learn(t, 1, now_ns=S, mm=[(IMG_A, 0, 2**32)])


class RouterInputs(unittest.TestCase):

    def test_route_matches_the_engine_store(self):
        r, ids = fleet()
        t = tokens(48, 29)
        # e2 stored the prompt with the image (a vLLM batch, extra_keys
        # per block), e1 its text block alone
        ev = ["BlockStored", [97, 98, 99], None, t, BT, None, "GPU", None,
              [None, [[IMG_A, 3]], [[IMG_A, 3 - BT]]]]
        info = r.vllm_batch(ids[2], msgpack_batch([ev]), now_ns=S)
        self.assertEqual(info.stored, 1)
        r.kv_stored(ids[1], [100], t[:BT], block_size=BT, now_ns=S)
        d = r.route(t, request_id=1, now_ns=S, dry_run=True, mm=[IMG])
        self.assertEqual((d.instance, d.cached_tokens), (ids[2], 48))
        for mm in ([(IMG_B, BT + 3, 20)], None, []):
            with self.subTest(mm=mm):
                d = r.route(t, request_id=1, now_ns=S, dry_run=True, mm=mm)
                self.assertEqual(d.cached_tokens, BT)
        # the candidate table and the policy input see the same
        rows = {c.instance: c.cached_tokens
                for c in r.candidates(t, now_ns=S, mm=[IMG])}
        self.assertEqual(rows, {ids[0]: 0, ids[1]: BT, ids[2]: 48})
        rows = {c.instance: c.cached_tokens
                for c in r.candidates(t, now_ns=S)}
        self.assertEqual(rows, {ids[0]: 0, ids[1]: BT, ids[2]: BT})
        pin = r.policy_input(t, now_ns=S, mm=[IMG])
        self.assertEqual(pin.prompt_tokens, 48)
        # a routed request is learned with its inputs
        d = r.route(t, request_id=2, now_ns=S, mm=[(IMG_B, BT + 3, 20)])
        d2 = r.route(t, request_id=3, now_ns=S, dry_run=True,
                     mm=[(IMG_B, BT + 3, 20)])
        self.assertEqual((d2.instance, d2.cached_tokens), (d.instance, 48))
        r.close()

    def test_kv_stored_hashes(self):
        r, ids = fleet()
        t = tokens(48, 30)
        r.kv_stored(ids[0], [1, 2, 3], t, block_size=BT, now_ns=S,
                    mm_hashes=mm_hashes(IMG_A))
        d = r.route(t, request_id=1, now_ns=S, dry_run=True, mm=[IMG])
        self.assertEqual((d.instance, d.cached_tokens), (ids[0], 48))
        with self.assertRaises(ValueError):
            r.kv_stored(ids[0], [4], t[:BT], block_size=BT, now_ns=S,
                        mm_hashes=[])
        r.close()

    def test_refusals_change_nothing(self):
        r, ids = fleet()
        t = tokens(48, 31)
        before = r.stats()
        for mm in bad_inputs(len(t)):
            with self.subTest(mm=mm):
                with self.assertRaises(L.InvalidArgumentError):
                    r.route(t, request_id=2, now_ns=S, mm=mm)
                with self.assertRaises(L.InvalidArgumentError):
                    r.candidates(t, now_ns=S, mm=mm)
                with self.assertRaises(L.InvalidArgumentError):
                    r.policy_input(t, now_ns=S, mm=mm)
        with self.assertRaises(ValueError):
            r.route(t, request_id=2, now_ns=S, mm=[("a\0b", 0, 4)])
        with self.assertRaises(TypeError):
            r.route(t, request_id=2, now_ns=S, mm=IMG)
        self.assertEqual(r.stats(), before)
        r.close()


if __name__ == "__main__":
    unittest.main()
