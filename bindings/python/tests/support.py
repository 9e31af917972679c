"""Paths and helpers shared by the tests."""

from __future__ import annotations

import os
import re
import struct
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
BINDING_DIR = os.path.dirname(HERE)                  # bindings/python
SOURCE_ROOT = os.path.dirname(os.path.dirname(BINDING_DIR))
SYMBOL_FILE = os.path.join(SOURCE_ROOT, "lib", "libroute.sym")
HEADER_DIR = os.path.join(SOURCE_ROOT, "include", "libroute")
EXAMPLE = os.path.join(BINDING_DIR, "examples", "route_workload.py")

import libroute  # noqa: E402  (PYTHONPATH points at the built package)

PACKAGE_DIR = os.path.dirname(os.path.abspath(libroute.__file__))


def loaded_libroute() -> Optional[str]:
    """Path of the libroute.so this process actually mapped (Linux)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libroute.so"):
                    return path
    except OSError:
        pass
    return None


def symbol_file_names() -> set:
    """The `global:` names of every node of lib/libroute.sym."""
    names = set()
    with open(SYMBOL_FILE) as f:
        section = None
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if line in ("global:", "local:"):
                section = line
            elif line.startswith("}"):
                section = None
            elif section == "global:" and line.endswith(";"):
                names.add(line[:-1].strip())
    return names


_DEPRECATED = re.compile(r"LR_DEPRECATED\s*\([^)]*\)[^;(]*?\b(lr_\w+)\s*\(")


def deprecated_functions() -> Optional[set]:
    """The functions the public headers mark LR_DEPRECATED, or None when
    the headers are not there (not a source tree)."""
    if not os.path.isdir(HEADER_DIR):
        return None
    names = set()
    for name in sorted(os.listdir(HEADER_DIR)):
        if name.endswith(".h"):
            with open(os.path.join(HEADER_DIR, name)) as f:
                text = f.read()
            # Not the macro's own definition (#define LR_DEPRECATED(msg)).
            text = re.sub(r"#\s*define\s+LR_DEPRECATED[^\n]*", "", text)
            names.update(_DEPRECATED.findall(text))
    return names


def binding_functions() -> set:
    """Functions the compiled module declares (its cdef)."""
    lib = libroute.lib
    return {n for n in dir(lib) if n.startswith("lr_")
            and callable(getattr(lib, n))}


def package_sources() -> str:
    """The text of the wrapper modules (not the builder)."""
    text = []
    for name in sorted(os.listdir(PACKAGE_DIR)):
        if name.endswith(".py") and name != "_build.py":
            with open(os.path.join(PACKAGE_DIR, name)) as f:
                text.append(f.read())
    return "\n".join(text)


def tokens(n: int, seed: int = 0) -> list:
    """n deterministic pseudo-random token ids."""
    out, x = [], seed * 2654435761 + 12345
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append((x >> 33) % 50000)
    return out


def msgpack_batch(events, ts=1.5):
    """A minimal msgpack encoder for the vLLM event-batch schema."""
    def enc(v):
        if isinstance(v, bool):
            return b"\xc3" if v else b"\xc2"
        if v is None:
            return b"\xc0"
        if isinstance(v, int):
            if 0 <= v < 128:
                return bytes([v])
            if v >= 0:
                return b"\xcf" + v.to_bytes(8, "big")
            return b"\xd3" + v.to_bytes(8, "big", signed=True)
        if isinstance(v, float):
            return b"\xcb" + struct.pack(">d", v)
        if isinstance(v, str):
            b = v.encode()
            return bytes([0xA0 | len(b)]) + b if len(b) < 32 else \
                b"\xd9" + bytes([len(b)]) + b
        if isinstance(v, (list, tuple)):
            head = bytes([0x90 | len(v)]) if len(v) < 16 else \
                b"\xdc" + len(v).to_bytes(2, "big")
            return head + b"".join(enc(x) for x in v)
        raise TypeError(type(v))
    return enc([ts, events, 0])
