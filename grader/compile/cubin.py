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
    return [sec[1:] for sec in _named_sections(data)]


def _named_sections(data: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """(name offset, type, offset, size, link, entsize) for each section header."""
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
        out.append((_name, sh_type, off, size, link, entsize))
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


_EIATTR_KPARAM_INFO = 0x17
_EIFMT_SVAL, _EIFMT_HVAL, _EIFMT_BVAL, _EIFMT_NVAL = 4, 3, 2, 1


def kernel_param_sizes(data: bytes, kernel: str) -> list[int] | None:
    """Byte size of each parameter of ``kernel``, in declaration order, from ``.nv.info.<kernel>``.

    None when the cubin has no such section. A pointer is 8 bytes and an ``int`` 4, so
    ``(const float*, const float*, float*, int)`` reads ``[8, 8, 8, 4]``.
    """
    secs = _named_sections(data)
    shstrndx = struct.unpack_from("<H", data, 0x3E)[0]
    _n, _t, str_off, str_size, _l, _e = secs[shstrndx]
    names = data[str_off : str_off + str_size]
    for name_off, _type, off, size, _link, _ent in secs:
        end = names.find(b"\0", name_off)
        if names[name_off:end] != b".nv.info." + kernel.encode():
            continue
        params: dict[int, int] = {}
        pos, stop = off, off + size
        while pos + 2 <= stop:
            fmt, attr = data[pos], data[pos + 1]
            pos += 2
            if fmt == _EIFMT_SVAL:
                length = struct.unpack_from("<H", data, pos)[0]
                body = data[pos + 2 : pos + 2 + length]
                pos += 2 + length
                if attr == _EIATTR_KPARAM_INFO and len(body) >= 12:
                    _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", body)
                    params[ordinal] = (flags >> 18) & 0x3FFF
            elif fmt in (_EIFMT_HVAL, _EIFMT_BVAL, _EIFMT_NVAL):
                pos += 2  # records are 4-byte aligned: a value (or padding) follows the attribute
            else:
                raise CubinFormatError(f"unknown attribute format {fmt} in .nv.info.{kernel}")
        return [params[k] for k in sorted(params)]
    return None
