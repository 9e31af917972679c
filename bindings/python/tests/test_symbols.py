"""Symbol coverage: the binding must wrap every function the library
exports. A function added to libroute.so (or lib/libroute.sym) and not to
the binding fails here, naming it. Functions the headers mark
LR_DEPRECATED are the exception: declared (the cdef has every function),
and used by no wrapper, which call their replacements."""

from __future__ import annotations

import os
import re
import unittest

import libroute
from elfsyms import dynamic_functions
from support import (SYMBOL_FILE, binding_functions, deprecated_functions,
                     loaded_libroute, package_sources, symbol_file_names)


class SymbolCoverage(unittest.TestCase):

    def exported(self) -> set:
        path = loaded_libroute()
        if path is None:
            self.skipTest("cannot find the mapped libroute.so "
                          "(/proc/self/maps unavailable)")
        return {n for n in dynamic_functions(path) if n.startswith("lr_")}

    def test_loaded_library_exports_something(self):
        # Guards the tests below against passing on an empty set.
        exported = self.exported()
        self.assertIn("lr_router_route", exported)
        self.assertGreater(len(exported), 50)

    def test_every_export_is_declared_in_the_binding(self):
        missing = self.exported() - binding_functions()
        self.assertFalse(missing, "exported by %s but not in the binding's "
                         "cdef: %s" % (loaded_libroute(), sorted(missing)))

    def test_every_symbol_file_name_is_declared_in_the_binding(self):
        if not os.path.exists(SYMBOL_FILE):
            self.skipTest(f"{SYMBOL_FILE} not found (not a source tree)")
        names = symbol_file_names()
        self.assertIn("lr_strerror", names)
        missing = names - binding_functions()
        self.assertFalse(missing, "in lib/libroute.sym but not in the "
                         "binding's cdef: %s" % sorted(missing))

    def test_every_export_is_used_by_a_wrapper(self):
        # Declared is not enough: some Python code must use it. The
        # wrappers reach the library only as `lib.lr_name` (a call, or a
        # destructor handed to ffi.gc).
        names = self.exported()
        if os.path.exists(SYMBOL_FILE):
            names |= symbol_file_names()
        used = set(re.findall(r"\blib\.(lr_\w+)\b", package_sources()))
        unwrapped = names - used - self.deprecated()
        self.assertFalse(unwrapped, "no wrapper uses: %s"
                         % sorted(unwrapped))

    def deprecated(self) -> set:
        names = deprecated_functions()
        if names is None:
            self.skipTest("include/libroute not found (not a source tree)")
        return names

    def test_deprecated_functions_are_declared_and_not_used(self):
        deprecated = self.deprecated()
        # lr_router_param_bounds (0.1) gave way to lr_param_bounds (0.2).
        self.assertIn("lr_router_param_bounds", deprecated)
        self.assertLessEqual(deprecated, self.exported())
        self.assertLessEqual(deprecated, binding_functions())
        used = set(re.findall(r"\blib\.(lr_\w+)\b", package_sources()))
        self.assertFalse(deprecated & used, "wrappers still call deprecated "
                         "functions: %s" % sorted(deprecated & used))

    def test_sized_init_functions_replace_the_init_macros(self):
        # Since 0.2 every lr_X_init() is a C macro over lr_X_init_sized():
        # the cdef has only the functions, and the wrappers pass their own
        # sizeof to them.
        funcs = binding_functions()
        sized = {n for n in funcs if n.endswith("_init_sized")}
        self.assertGreaterEqual(len(sized), 20)
        self.assertFalse({n[:-len("_sized")] for n in sized} & funcs)

    def test_lib_is_the_header_version(self):
        self.assertEqual(libroute.version_number() // 100,
                         libroute.HEADER_VERSION_NUMBER // 100)


if __name__ == "__main__":
    unittest.main()
