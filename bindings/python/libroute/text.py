"""lr_text: fixed-width pseudo-tokens for hosts without a tokenizer
(include/libroute/lr_text.h). Reentrant."""

from __future__ import annotations

import array
from typing import Union

from ._ffi import ffi, lib
from ._util import U32_TYPECODE, u32
from .errors import check

__all__ = ["text_tokens"]


def text_tokens(text: Union[str, bytes, bytearray, memoryview],
                width: int = 4) -> "array.array[int]":
    """lr_text_tokens(): cut text into ``width``-byte chunks, one 32-bit
    token each. ``str`` is encoded as UTF-8; bytes-like objects are read in
    place. Returns ``array('I')``, which every tokens argument takes
    without a copy."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    w = u32(width, "width")
    needed = ffi.new("size_t *")
    try:
        src = ffi.from_buffer("char[]", text)
    except TypeError:
        raise TypeError("text: expected str or a bytes-like object, got "
                        f"{type(text).__name__}") from None
    with src:
        check(lib.lr_text_tokens(src, len(src), w, ffi.NULL, 0, needed),
              "lr_text_tokens")
        toks = array.array(U32_TYPECODE, bytes(4 * needed[0]))
        if needed[0]:
            with ffi.from_buffer("uint32_t[]", toks,
                                 require_writable=True) as out:
                check(lib.lr_text_tokens(src, len(src), w, out, len(toks),
                                         needed), "lr_text_tokens")
    return toks
