"""Read initialised data symbols out of a cubin (an ELF file) without a GPU.

The grader learns each kernel's launch shape from an ``extern "C" __constant__
int <kernel>_launch[5]`` array in the student's file. Reading it from the ELF
symbol table means the shape is known (and checked) before anything runs, and
on machines with no GPU at all. Pure: bytes in, values out.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

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


# The resources of each kernel, as the cubin itself records them. The compiler's printed report
# (ptxas -v) shares stderr with `#pragma message`, so a source can print lines identical to it; the
# cubin is the artifact the GPU runs, which the source can shape only by what it compiles to.
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIATTR_NUM_BARRIERS = 0x4C
# From compute capability 8.0 on, the CUDA runtime reserves 1 KiB of shared memory per block for
# system use; a kernel's `.nv.shared.<kernel>` section holds it ahead of the kernel's own arrays
# (9,216 B for the 8,192 B of the tiled solution), and ptxas -v reports the kernel's own part.
RESERVED_SMEM = 1024
_GLOBAL_SECTIONS = (".nv.global", ".nv.global.init")


def _section_names(data: bytes) -> list[str]:
    secs = _named_sections(data)
    shstrndx = struct.unpack_from("<H", data, 0x3E)[0]
    if not 0 <= shstrndx < len(secs):
        raise CubinFormatError("no section name table")
    _n, _t, str_off, str_size, _l, _e = secs[shstrndx]
    names = data[str_off : str_off + str_size]
    out = []
    for name_off, *_rest in secs:
        end = names.find(b"\0", name_off)
        out.append(names[name_off : end if end >= 0 else len(names)].decode("utf-8", "replace"))
    return out


def _attributes(data: bytes, off: int, size: int, where: str) -> list[tuple[int, bytes]]:
    """(attribute, value bytes) of each record of a ``.nv.info`` section."""
    out: list[tuple[int, bytes]] = []
    pos, stop = off, off + size
    if stop > len(data):
        raise CubinFormatError(f"{where} runs past the end of the file")
    while pos + 2 <= stop:
        fmt, attr = data[pos], data[pos + 1]
        pos += 2
        if fmt == _EIFMT_SVAL:
            length = struct.unpack_from("<H", data, pos)[0]
            out.append((attr, data[pos + 2 : pos + 2 + length]))
            pos += 2 + length
        elif fmt in (_EIFMT_HVAL, _EIFMT_BVAL, _EIFMT_NVAL):
            out.append((attr, data[pos : pos + 2]))
            pos += 2
        else:
            raise CubinFormatError(f"unknown attribute format {fmt} in {where}")
    return out


def _symbol_names(data: bytes, sections: list[tuple[int, int, int, int, int]]) -> list[str]:
    """Every symbol's name, by its index in the symbol table."""
    for sh_type, off, size, link, entsize in sections:
        if sh_type != _SHT_SYMTAB or entsize == 0:
            continue
        if not 0 <= link < len(sections):
            raise CubinFormatError("the symbol table names no string table")
        _t, str_off, str_size, _l, _e = sections[link]
        strtab = data[str_off : str_off + str_size]
        names = []
        for j in range(size // entsize):
            st_name = struct.unpack_from("<I", data, off + j * entsize)[0]
            end = strtab.find(b"\0", st_name)
            names.append(strtab[st_name : end if end >= 0 else len(strtab)].decode("utf-8", "replace"))
        return names
    return []


def sm_version(data: bytes) -> int:
    """The SM the cubin was built for (90 for sm_90 and sm_90a), from the ELF header's flags."""
    if data[:4] != b"\x7fELF":
        raise CubinFormatError("not an ELF file")
    return (struct.unpack_from("<I", data, 0x30)[0] >> 8) & 0xFF


@dataclass(frozen=True)
class CubinResources:
    """What the cubin records of one kernel (the same quantities ptxas -v prints)."""

    name: str
    registers: int
    stack_frame: int  # bytes of local memory per thread (spills and local arrays)
    shared_bytes: int  # the kernel's own static shared memory (the reserved 1 KiB left out)
    barriers: int


def kernel_resources(data: bytes) -> dict[str, CubinResources]:
    """``{kernel: CubinResources}`` for every entry function of the cubin (one with a
    ``.nv.info.<kernel>`` section), in the cubin's order."""
    sections = _sections(data)
    names = _section_names(data)
    symbols = _symbol_names(data, sections)
    regs: dict[str, int] = {}
    frames: dict[str, int] = {}
    for (_sh_type, off, size, _l, _e), name in zip(sections, names):
        if name != ".nv.info":
            continue
        for attr, body in _attributes(data, off, size, name):
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(body) >= 8:
                index, value = struct.unpack_from("<II", body)
                fn = symbols[index] if index < len(symbols) else ""
                (regs if attr == _EIATTR_REGCOUNT else frames)[fn] = value
    reserved = RESERVED_SMEM if sm_version(data) >= 80 else 0
    shared = {n[len(".nv.shared."):]: sec[2] for sec, n in zip(sections, names) if n.startswith(".nv.shared.")}
    out: dict[str, CubinResources] = {}
    for (_t, off, size, _l, _e), name in zip(sections, names):
        if not name.startswith(".nv.info."):
            continue
        kernel = name[len(".nv.info."):]
        barriers = 0
        for attr, body in _attributes(data, off, size, name):
            if attr == _EIATTR_NUM_BARRIERS and body:
                barriers = body[0]
        if kernel not in regs:
            raise CubinFormatError(f"the cubin records no register count for {kernel}")
        smem = shared.get(kernel, 0)
        out[kernel] = CubinResources(kernel, regs[kernel], frames.get(kernel, 0),
                                     max(0, smem - reserved) if smem else 0, barriers)
    return out


def static_global_bytes(data: bytes) -> int:
    """Bytes of static ``__device__`` (and ``__managed__``) memory the cubin declares: the sizes of
    its ``.nv.global`` (zero-initialised) and ``.nv.global.init`` sections, what ptxas calls gmem."""
    sections = _sections(data)
    names = _section_names(data)
    return sum(sec[2] for sec, n in zip(sections, names) if n in _GLOBAL_SECTIONS)
