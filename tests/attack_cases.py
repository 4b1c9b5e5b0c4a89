"""Hostile cases the attack tests build at run time (tests/test_attacks.py says what each must get).

Built here, not committed: symbolic links, zips, a zip bomb and a batch export cannot sit in git as they
are, and the answers.yaml and report.md attacks are variants of solutions/, so that every item they do not
attack keeps the solution's verdict (the tests compare item by item with the unmodified solution).
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import zipfile
import zlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOL = ROOT / "solutions"


def answers(work: Path, field: str | None, raw: str = "") -> Path:
    """solutions/occupancy with ``field`` (dotted) of answers.yaml written as ``raw`` YAML text."""
    sub = work / "sub"
    shutil.copytree(SOL / "occupancy", sub / "occupancy")
    if field:
        path = sub / "occupancy" / "answers.yaml"
        data = yaml.safe_load(path.read_text())
        *parents, leaf = field.split(".")
        node = data
        for key in parents:
            node = node[key]
        assert leaf in node, f"solutions' answers.yaml has no {field}"
        node[leaf] = "ATTACK_VALUE_PLACEHOLDER"
        text = yaml.safe_dump(data, sort_keys=False, width=1000)
        assert text.count("ATTACK_VALUE_PLACEHOLDER") == 1
        path.write_text(text.replace("ATTACK_VALUE_PLACEHOLDER", raw))
    return sub


def laughs(depth: int = 9) -> str:
    """A YAML value of 9^(depth+1) strings built from aliases: a few hundred bytes of text."""
    level = "&l0 [" + ", ".join(["lol"] * 9) + "]"
    for k in range(1, depth + 1):
        level = f"&l{k} [{level}, " + ", ".join([f"*l{k - 1}"] * 8) + "]"
    return level


def report(work: Path, kind: str | None) -> Path:
    """A submission holding solutions/report.md with the attack ``kind`` (None: unchanged)."""
    sub = work / "sub"
    sub.mkdir(parents=True)
    text = (SOL / "report.md").read_text()
    if kind == "heading_8kb":  # a heading whose trailing-space handling can backtrack for hours
        text += "\n## x" + " " * 8190 + "y\n\nA closing note.\n"
    elif kind and kind.startswith("code_spans_"):  # one long span of spaces and many `x = y` spans, in a transition
        long, short = (40_000, 800) if kind == "code_spans_50kb" else (50_000, 4500)
        heads = [m.start() for m in re.finditer(r"^## ", text, re.M)]
        spans = "`a" + " " * long + "b`\n\n" + " ".join(["`tile = 32`"] * short) + "\n\n"
        text = text[:heads[1]] + spans + text[heads[1]:]
    elif kind == "citation_1e999":
        old = "`naive: sectors_per_request = 16.5`"
        assert text.count(old) == 1, "solutions/report.md changed: pick another citation"
        text = text.replace(old, "`naive: sectors_per_request = 1e999`")
    (sub / "report.md").write_text(text)
    return sub


def symlinked(work: Path, kind: str) -> Path:
    """A submission where a symbolic link stands for the reference's files (or for itself)."""
    sub = work / "sub"
    if kind == "gemm_folder_is_link":  # gemm/ points at the reference; the report is the student's own
        sub.mkdir(parents=True)
        os.symlink(SOL / "gemm", sub / "gemm")
        shutil.copy(SOL / "report.md", sub / "report.md")
    elif kind == "wrapped_folder_is_link":  # the one folder a zip's contents sit in is the reference
        sub.mkdir(parents=True)
        os.symlink(SOL, sub / "my-ladder")
    elif kind == "stage_file_links_to_itself":
        (sub / "gemm").mkdir(parents=True)
        os.symlink("naive.cu", sub / "gemm" / "naive.cu")
        shutil.copy(SOL / "gemm" / "coalesced.cu", sub / "gemm" / "coalesced.cu")
    elif kind == "link_at_depth_3":  # my-ladder/gemm/naive.cu -> the reference
        (sub / "my-ladder" / "gemm").mkdir(parents=True)
        os.symlink(SOL / "gemm" / "naive.cu", sub / "my-ladder" / "gemm" / "naive.cu")
        shutil.copy(SOL / "gemm" / "coalesced.cu", sub / "my-ladder" / "gemm" / "coalesced.cu")
    return sub


def zip_of(folder: Path, dest: Path) -> Path:
    """``folder``'s files in a zip, named relative to it."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder).as_posix())
    return dest


def zip_bomb(dest: Path) -> Path:
    """One entry, 1 GiB of zeros in about 4.7 MB (a ratio above 200): larger than the file-size cap.

    The entry's deflate stream is one 16 MiB chunk of zeros deflated once, ending in a full flush (which
    forgets the history, so the next piece deflates the same way), written 64 times and closed by the final
    block: what deflating the whole GiB piece by piece would write, without a second of CPU spent on it."""
    chunk = bytes(16 << 20)
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    piece = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    data = piece * 64 + deflate.flush()
    crc = 0
    for _ in range(64):
        crc = zlib.crc32(chunk, crc)
    name = b"my-ladder/gemm/naive.cu"
    # version 2.0, no flags, deflate, 1980-01-01 00:00, the CRC, the sizes, the name's length, no extra field
    fields = struct.pack("<HHHHHIIIHH", 20, 0, zipfile.ZIP_DEFLATED, 0, 0x21, crc, len(data), 64 * len(chunk),
                         len(name), 0)
    local = struct.pack("<I", 0x04034B50) + fields + name
    # made by Unix (3), a regular file 0644 (the mode a link check reads), at offset 0
    central = (struct.pack("<IH", 0x02014B50, 3 << 8 | 20) + fields
               + struct.pack("<HHHII", 0, 0, 0, 0o100644 << 16, 0) + name)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
    dest.write_bytes(local + data + central + end)
    return dest


FORMULA_NAMES = {"submission_1001": '=HYPERLINK("http://example.com","x")', "submission_1002": "+1+1",
                 "submission_1003": "-2+3", "submission_1004": "@SUM(1+1)"}
BAD_ENTRY = "submission_1002"  # the export also holds a *file* of this name, before its folder's entries


def export(dest: Path) -> Path:
    """A Gradescope export zip: four submissions named like spreadsheet formulas, one of them a bad entry."""
    meta = "".join(f"{folder}:\n  :submitters:\n  - :name: '{name}'\n    :sid: '{folder[-4:]}'\n"
                   f"    :email: s{folder[-4:]}@example.edu\n" for folder, name in FORMULA_NAMES.items())
    naive = (SOL / "gemm" / "naive.cu").read_bytes()
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("export/submission_metadata.yml", meta)
        for folder in FORMULA_NAMES:
            if folder == BAD_ENTRY:
                zf.writestr(f"export/{folder}", b"a file where the submission's folder should be\n")
            zf.writestr(f"export/{folder}/gemm/naive.cu", naive)
    return dest
