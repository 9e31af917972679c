"""cffi builder for libroute (API mode, out-of-line).

The cdef is not written by hand: it is the public header itself, run
through the C preprocessor, so it cannot drift from the library it is
compiled against. ``build_ffi.py`` (a build tree) and ``setup.py`` (an
installed libroute found with pkg-config) both build through
``make_ffibuilder()``.

How the header becomes a cdef:

1. ``cc -E -dD`` expands ``<libroute.h>`` with the visibility and
   deprecation macros turned off through the header's own switches
   (``LR_API``, ``LR_EXPERIMENTAL`` predefined empty,
   ``LR_DISABLE_DEPRECATE_WARNINGS``), so no ``__attribute__`` is left.
   The module itself is compiled with ``LR_DISABLE_DEPRECATE_WARNINGS``
   too: it declares the deprecated functions as well, without a warning.
2. Of the output, only lines that come from libroute's own headers
   (``libroute.h``, ``lr_*.h``, ``libroute/*``) under the given include
   directories are kept; the line markers say which file each line comes
   from. cffi knows ``size_t`` and the ``<stdint.h>`` types itself, so the
   system headers are not needed.
3. ``#define`` lines (kept by ``-dD``) become cffi constants: integer
   expressions as ``#define LR_X ...`` (the C compiler computes the value,
   ``offsetof`` included), string literals as
   ``static const char *const LR_X;``, floating literals as
   ``static const double LR_X;``. Function-like macros, empty macros,
   include guards and the ``*_INIT`` brace initialisers (C only, by design)
   are left out. So are the ``lr_X_init(p)`` macros (function-like): the
   wrappers call the exported ``lr_X_init_sized(p, ffi.sizeof(...))``
   they expand to, passing this build's size themselves.

Structs are declared in full. In API mode cffi checks every field offset
and the size against the C compiler when it compiles the module, so a
layout mismatch is a build error, never a silent one.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from typing import Iterable, List, Optional, Sequence, Tuple

MODULE_NAME = "libroute._lr"
UMBRELLA = "libroute.h"

# The header's own switches: no visibility or deprecation attributes.
_PP_DEFINES = (
    "-DLR_API=",
    "-DLR_EXPERIMENTAL=",
    "-DLR_DISABLE_DEPRECATE_WARNINGS",
)

_LINEMARK = re.compile(r'^#\s*(?:line\s+)?\d+\s+"((?:[^"\\]|\\.)*)"')
_DEFINE = re.compile(r"^#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)(\(?)(.*)$")
_FLOAT = re.compile(r"(?<![\w.])(\d+\.\d*|\.\d+|\d+[eE][+-]?\d+)")


class BuildError(RuntimeError):
    """The header could not be turned into a cdef or module."""


def default_cc() -> List[str]:
    """The C compiler command: $CC, else the one Python was built with."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def _is_libroute_header(path: str, roots: Sequence[str]) -> bool:
    """A header of libroute's own: under an include root, and named
    libroute.h or lr_*.h or inside a libroute/ directory. The name test
    matters when a root is a system directory (an install in /usr)."""
    if path.startswith("<"):  # <built-in>, <command-line>, <stdin>
        return False
    real = os.path.realpath(path)
    for r in roots:
        if not real.startswith(r + os.sep):
            continue
        rel = real[len(r) + 1:]
        name = os.path.basename(rel)
        if name == UMBRELLA or name.startswith("lr_") or \
                rel.startswith("libroute" + os.sep):
            return True
    return False


def preprocess(include_dirs: Sequence[str],
               cc: Optional[Sequence[str]] = None) -> Tuple[str, List[str]]:
    """Run the preprocessor over <libroute.h> with -dD and line markers.

    Returns the output and every file it read (for a depfile)."""
    cmd = list(cc or default_cc())
    cmd += ["-E", "-dD", "-std=c11", *_PP_DEFINES]
    for d in include_dirs:
        cmd += ["-I", d]
    cmd += ["-x", "c", "-"]
    try:
        proc = subprocess.run(cmd, input=f"#include <{UMBRELLA}>\n",
                              capture_output=True, text=True, check=False)
    except OSError as e:
        raise BuildError(f"cannot run the C preprocessor {cmd[0]!r}: {e}")
    if proc.returncode != 0:
        raise BuildError("preprocessing <%s> failed:\n$ %s\n%s" % (
            UMBRELLA, " ".join(shlex.quote(c) for c in cmd), proc.stderr))
    files = []
    for line in proc.stdout.splitlines():
        m = _LINEMARK.match(line)
        if m and not m.group(1).startswith("<") and m.group(1) not in files:
            files.append(m.group(1))
    return proc.stdout, files


def _constant_decl(name: str, value: str) -> Optional[str]:
    value = value.strip()
    if not name.startswith("LR_") or not value or value.startswith("{"):
        return None
    if value.startswith('"'):
        return f"static const char *const {name};"
    if _FLOAT.search(value):
        return f"static const double {name};"
    return f"#define {name} ..."


def cdef_from_preprocessed(text: str, include_dirs: Sequence[str]) -> str:
    """Keep the declarations and constants that come from libroute's own
    headers; drop everything the system headers contributed."""
    roots = [os.path.realpath(d) for d in include_dirs]
    decls: List[str] = []
    consts: List[str] = []
    ours = False
    for line in text.splitlines():
        m = _LINEMARK.match(line)
        if m:
            ours = _is_libroute_header(m.group(1), roots)
            continue
        if not ours:
            continue
        if line.lstrip().startswith("#"):
            d = _DEFINE.match(line.strip())
            if d and not d.group(2):  # object-like macros only
                decl = _constant_decl(d.group(1), d.group(3))
                if decl is not None and decl not in consts:
                    consts.append(decl)
            continue  # #undef, #pragma, function-like macros
        if line.strip():
            decls.append(line.rstrip())
    if not any("lr_strerror" in d for d in decls):
        raise BuildError("no libroute declarations found under %s; is the "
                         "include path right?" % ", ".join(include_dirs))
    return "\n".join(decls + [""] + consts) + "\n"


def generate_cdef(include_dirs: Sequence[str],
                  cc: Optional[Sequence[str]] = None) -> Tuple[str, List[str]]:
    """The cdef for the headers found in include_dirs, and the files read."""
    text, files = preprocess(include_dirs, cc)
    return cdef_from_preprocessed(text, include_dirs), files


def make_ffibuilder(include_dirs: Sequence[str],
                    library_dirs: Sequence[str] = (),
                    rpath: Iterable[str] = (),
                    cc: Optional[Sequence[str]] = None,
                    extra_compile_args: Sequence[str] = (),
                    extra_link_args: Sequence[str] = (),
                    cdef: Optional[str] = None):
    """An FFI builder whose module, libroute._lr, links libroute.so.

    ``cdef`` defaults to generate_cdef(include_dirs, cc). Returns
    (ffibuilder, the cdef, the files read to generate it)."""
    import cffi

    files: List[str] = []
    if cdef is None:
        cdef, files = generate_cdef(include_dirs, cc)
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(cdef)
    link_args = list(extra_link_args)
    for d in rpath:
        link_args.append("-Wl,-rpath," + d)
    ffibuilder.set_source(
        MODULE_NAME,
        # The module declares every function, the deprecated ones too (so
        # that each exported symbol stays reachable); the cdef was made with
        # the same switch.
        f"#define LR_DISABLE_DEPRECATE_WARNINGS 1\n#include <{UMBRELLA}>\n",
        include_dirs=list(include_dirs),
        library_dirs=list(library_dirs),
        libraries=["route"],
        extra_compile_args=list(extra_compile_args),
        extra_link_args=link_args,
    )
    return ffibuilder, cdef, files


def _pkg_config(*args: str) -> List[str]:
    try:
        out = subprocess.run(["pkg-config", *args, "libroute"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError("pkg-config cannot find libroute (set "
                         "PKG_CONFIG_PATH to its lib/pkgconfig): %s" % e)
    return shlex.split(out)


def ffibuilder_from_pkgconfig():
    """Entry point for setup.py's cffi_modules: an installed libroute."""
    inc = [a[2:] for a in _pkg_config("--cflags-only-I") if a.startswith("-I")]
    libdirs = [a[2:] for a in _pkg_config("--libs-only-L")
               if a.startswith("-L")]
    if not inc:
        inc = [d for d in _pkg_config("--variable=includedir") if d]
    ffibuilder, _, _ = make_ffibuilder(inc, libdirs, rpath=libdirs)
    return ffibuilder


if __name__ == "__main__":
    # Print the generated cdef: python3 _build.py INCLUDE_DIR...
    sys.stdout.write(generate_cdef(sys.argv[1:])[0])
