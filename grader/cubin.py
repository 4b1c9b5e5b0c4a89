"""Read initialised data symbols out of a cubin (an ELF file) without a GPU.

The grader learns each kernel's launch shape from an ``extern "C" __constant__
int <kernel>_launch[5]`` array in the student's file. Reading it from the ELF
symbol table means the shape is known (and checked) before anything runs, and
on machines with no GPU at all. Pure: bytes in, values out.
"""
from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_SHT_NOBITS = 8


class CubinFormatError(ValueError):
    """The bytes are not a 64-bit little-endian ELF file we can read."""


def _sections(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, offset, size, link, entsize) for each section header."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinFormatError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if base + 64 > len(data):
            raise CubinFormatError("section header table runs past the end of the file")
        _name, sh_type, _flags, _addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, base
        )
        out.append((sh_type, off, size, link, entsize))
    return out


def symbol_bytes(data: bytes, name: str) -> bytes | None:
    """The initial contents of data symbol ``name``, or None if there is no such symbol."""
    sections = _sections(data)
    for sh_type, off, size, link, entsize in sections:
        if sh_type != _SHT_SYMTAB or entsize == 0:
            continue
        _t, str_off, str_size, _l, _e = sections[link]
        strtab = data[str_off : str_off + str_size]
        for j in range(size // entsize):
            st_name, _info, _other, shndx, value, sym_size = struct.unpack_from(
                "<IBBHQQ", data, off + j * entsize
            )
            end = strtab.find(b"\0", st_name)
            if strtab[st_name:end].decode("utf-8", "replace") != name:
                continue
            if not 0 < shndx < len(sections):
                return None
            sec_type, sec_off, sec_size, _l2, _e2 = sections[shndx]
            if sec_type == _SHT_NOBITS:
                return bytes(sym_size)
            if value + sym_size > sec_size:
                raise CubinFormatError(f"symbol {name} lies outside its section")
            return data[sec_off + value : sec_off + value + sym_size]
    return None


def read_int_array(data: bytes, name: str) -> list[int] | None:
    """A symbol's contents as little-endian int32 values (None when absent)."""
    raw = symbol_bytes(data, name)
    if raw is None:
        return None
    return list(struct.unpack(f"<{len(raw) // 4}i", raw[: len(raw) // 4 * 4]))
