"""The cdef generator (libroute/_build.py) on synthetic preprocessor
output: what it keeps, what it drops, how it declares constants."""

from __future__ import annotations

import importlib.util
import os
import unittest

from support import BINDING_DIR, PACKAGE_DIR


def load_builder():
    spec = importlib.util.spec_from_file_location(
        "_libroute_build", os.path.join(BINDING_DIR, "libroute", "_build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


B = load_builder()
INC = "/src/include"

PREPROCESSED = '''\
# 1 "<stdin>"
# 1 "<built-in>"
#define __STDC__ 1
# 1 "<command-line>"
#define LR_API
# 1 "/usr/include/stdint.h" 1 3 4
typedef unsigned int uint32_t;
#define UINT32_MAX (4294967295U)
# 1 "/src/include/stdint_shim.h" 1
typedef unsigned long shim_t;
#define LR_NOT_OURS 1
# 1 "/src/include/lr_version.h" 1
#define LR_VERSION_MAJOR 0
# 2 "/src/include/libroute/lr_common.h" 2
#define LIBROUTE_LR_COMMON_H
#define LR_API
#define LR_DEPRECATED(msg)
#define LR_INSTANCE_NONE UINT32_MAX
#define LR_VERSION_STRING "0.1.0"
#define LR_X_INIT { .struct_size = sizeof(lr_x) }
#define LR_X_SIZE_V1 (offsetof(lr_x, b) + 4)
#define LR_HALF 0.5
#define LR_SHIFT (1ull << 31)
#undef LR_SHIFT
typedef struct lr_x { size_t struct_size; uint32_t b; } lr_x;
 const char *lr_strerror(int status);
'''


class CdefGenerator(unittest.TestCase):

    def setUp(self):
        self.cdef = B.cdef_from_preprocessed(PREPROCESSED, [INC])

    def test_keeps_only_libroute_declarations(self):
        self.assertIn("typedef struct lr_x", self.cdef)
        self.assertIn("lr_strerror", self.cdef)
        self.assertNotIn("typedef unsigned int uint32_t", self.cdef)
        self.assertNotIn("__STDC__", self.cdef)
        self.assertNotIn("UINT32_MAX", self.cdef.replace(
            "LR_INSTANCE_NONE", ""))

    def test_other_headers_under_an_include_root_are_not_ours(self):
        # An install in /usr puts libroute.h next to every system header.
        self.assertNotIn("shim_t", self.cdef)
        self.assertNotIn("LR_NOT_OURS", self.cdef)
        self.assertIn("#define LR_VERSION_MAJOR ...", self.cdef)

    def test_constants(self):
        lines = set(self.cdef.splitlines())
        self.assertIn("#define LR_INSTANCE_NONE ...", lines)
        self.assertIn("#define LR_X_SIZE_V1 ...", lines)
        self.assertIn("#define LR_SHIFT ...", lines)
        self.assertIn("static const char *const LR_VERSION_STRING;", lines)
        self.assertIn("static const double LR_HALF;", lines)

    def test_drops_what_cffi_cannot_use(self):
        for gone in ("LR_X_INIT", "LR_DEPRECATED", "LIBROUTE_LR_COMMON_H",
                     "#define LR_API", "#undef"):
            self.assertNotIn(gone, self.cdef)

    def test_no_declarations_is_an_error(self):
        with self.assertRaises(B.BuildError):
            B.cdef_from_preprocessed(PREPROCESSED, ["/elsewhere"])

    def test_the_module_was_built_from_a_clean_cdef(self):
        # build_ffi.py leaves the cdef it compiled next to the module.
        path = os.path.join(PACKAGE_DIR, "_cdef.h")
        if not os.path.exists(path):
            self.skipTest("no _cdef.h (package not built by build_ffi.py)")
        with open(path) as f:
            cdef = f.read()
        for bad in ("__attribute__", "__declspec", "__extension__",
                    "#include", "#if"):
            self.assertNotIn(bad, cdef)
        self.assertIn("lr_router_route(", cdef)


if __name__ == "__main__":
    unittest.main()
