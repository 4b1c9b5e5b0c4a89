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


@dataclass(frozen=True)
class _Section:
    """One section header: where its bytes are and how to read them."""

    name_offset: int  # into the section name table
    type: int
    offset: int
    size: int
    link: int
    entsize: int


def _sections(data: bytes) -> list[_Section]:
    """Every section header, from the ELF header's table (the one parse of the header)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinFormatError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if base + 64 > len(data):
            raise CubinFormatError("section header table runs past the end of the file")
        name, sh_type, _flags, _addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, base
        )
        out.append(_Section(name, sh_type, off, size, link, entsize))
    return out


def _c_string(table: bytes, start: int) -> str:
    """The NUL-ended name at ``start`` of a string table."""
    end = table.find(b"\0", start)
    return table[start : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _section_names(data: bytes, sections: list[_Section]) -> list[str]:
    """Each section's name, in the order of ``sections``."""
    shstrndx = struct.unpack_from("<H", data, 0x3E)[0]
    if not 0 <= shstrndx < len(sections):
        raise CubinFormatError("no section name table")
    table = sections[shstrndx]
    names = data[table.offset : table.offset + table.size]
    return [_c_string(names, sec.name_offset) for sec in sections]


@dataclass(frozen=True)
class _Symbol:
    name: str
    section: int  # the index of the section it lies in (st_shndx)
    value: int  # its offset in that section
    size: int


def _symbols(data: bytes, sections: list[_Section]) -> list[_Symbol]:
    """Every symbol of the symbol table, by its index in it (the one walker of the table)."""
    for sec in sections:
        if sec.type != _SHT_SYMTAB or sec.entsize == 0:
            continue
        if not 0 <= sec.link < len(sections):
            raise CubinFormatError("the symbol table names no string table")
        strings = sections[sec.link]
        strtab = data[strings.offset : strings.offset + strings.size]
        out = []
        for j in range(sec.size // sec.entsize):
            st_name, _info, _other, shndx, value, size = struct.unpack_from(
                "<IBBHQQ", data, sec.offset + j * sec.entsize
            )
            out.append(_Symbol(_c_string(strtab, st_name), shndx, value, size))
        return out
    return []


def symbol_bytes(data: bytes, name: str) -> bytes | None:
    """The initial contents of data symbol ``name``, or None if there is no such symbol."""
    sections = _sections(data)
    sym = next((s for s in _symbols(data, sections) if s.name == name), None)
    if sym is None or not 0 < sym.section < len(sections):
        return None
    sec = sections[sym.section]
    if sec.type == _SHT_NOBITS:
        return bytes(sym.size)
    if sym.value + sym.size > sec.size:
        raise CubinFormatError(f"symbol {name} lies outside its section")
    return data[sec.offset + sym.value : sec.offset + sym.value + sym.size]


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
    sections = _sections(data)
    wanted = ".nv.info." + kernel
    for sec, name in zip(sections, _section_names(data, sections)):
        if name != wanted:
            continue
        params: dict[int, int] = {}
        for attr, body in _attributes(data, sec.offset, sec.size, name):
            if attr == _EIATTR_KPARAM_INFO and len(body) >= 12:
                _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", body)
                params[ordinal] = (flags >> 18) & 0x3FFF
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
    names = _section_names(data, sections)
    symbols = [sym.name for sym in _symbols(data, sections)]
    regs: dict[str, int] = {}
    frames: dict[str, int] = {}
    for sec, name in zip(sections, names):
        if name != ".nv.info":
            continue
        for attr, body in _attributes(data, sec.offset, sec.size, name):
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(body) >= 8:
                index, value = struct.unpack_from("<II", body)
                fn = symbols[index] if index < len(symbols) else ""
                (regs if attr == _EIATTR_REGCOUNT else frames)[fn] = value
    reserved = RESERVED_SMEM if sm_version(data) >= 80 else 0
    shared = {n[len(".nv.shared."):]: sec.size for sec, n in zip(sections, names) if n.startswith(".nv.shared.")}
    out: dict[str, CubinResources] = {}
    for sec, name in zip(sections, names):
        if not name.startswith(".nv.info."):
            continue
        kernel = name[len(".nv.info."):]
        barriers = 0
        for attr, body in _attributes(data, sec.offset, sec.size, name):
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
    return sum(sec.size for sec, n in zip(sections, _section_names(data, sections)) if n in _GLOBAL_SECTIONS)
