"""The compiled cffi module and the checks that make calling it safe.

Every other module gets ``ffi`` and ``lib`` from here, together with the
helpers that turn statuses into exceptions and Python values into the
borrowed C arrays the library reads.
"""

from __future__ import annotations

import sys

try:
    from ._lr import ffi, lib
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "libroute: the compiled extension libroute._lr is missing or cannot "
        "load libroute.so (%s). Build it with bindings/python/build_ffi.py "
        "(see bindings/python/README.md) and put its --out directory on "
        "PYTHONPATH." % e) from e

# The module was compiled against one header version; a 0.x minor release
# may change the ABI (docs/abi.md), so refuse another minor at run time
# rather than call into it with the wrong layouts.
HEADER_VERSION_NUMBER: int = lib.LR_VERSION_NUMBER
HEADER_VERSION: str = ffi.string(lib.LR_VERSION_STRING).decode("ascii")

if lib.lr_version_number() // 100 != HEADER_VERSION_NUMBER // 100:
    raise ImportError(
        "libroute: the extension was built against libroute %s but the "
        "loaded libroute.so is %s; rebuild the binding against it"
        % (HEADER_VERSION, ffi.string(lib.lr_version_string()).decode()))

LITTLE_ENDIAN = sys.byteorder == "little"
