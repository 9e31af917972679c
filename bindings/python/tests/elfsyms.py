"""Read the defined function symbols of an ELF shared object's dynamic
symbol table (.dynsym), in pure Python: what `nm -D --defined-only`
lists, without needing binutils on the test machine."""

from __future__ import annotations

import struct
from typing import Set

SHT_DYNSYM = 11
STT_FUNC = 2
STB_GLOBAL, STB_WEAK = 1, 2
SHN_UNDEF = 0


def dynamic_functions(path: str) -> Set[str]:
    """Names of the global or weak functions a shared object defines."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{path}: not an ELF file")
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        shdr = end + "IIQQQQIIQQ"
        sym, symsize = end + "IBBHQQ", 24
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        shdr = end + "IIIIIIIIII"
        sym, symsize = end + "IIIBBH", 16
    sections = [struct.unpack_from(shdr, data, shoff + i * shentsize)
                for i in range(shnum)]
    names: Set[str] = set()
    for sh in sections:
        if sh[1] != SHT_DYNSYM:
            continue
        offset, size, link = sh[4], sh[5], sh[6]
        stroff = sections[link][4]
        for i in range(size // symsize):
            fields = struct.unpack_from(sym, data, offset + i * symsize)
            if is64:
                st_name, st_info, _other, st_shndx = fields[:4]
            else:
                st_name, _value, _size, st_info, _other, st_shndx = fields
            bind, typ = st_info >> 4, st_info & 0xF
            if typ != STT_FUNC or bind not in (STB_GLOBAL, STB_WEAK) \
                    or st_shndx == SHN_UNDEF:
                continue
            stop = data.index(b"\0", stroff + st_name)
            names.add(data[stroff + st_name:stop].decode("ascii"))
    return names
