"""Which GPU a report's numbers come from: its ``GPU:`` line, and whether a grading's device is that GPU.

A report cites values a student measured on one GPU; a grading may run on another (a course's service
with H100s and H200s, a course that changes GPUs, a student's own card). The grader compares citations
with a grading on the GPU the report names (grader/writeup/run.py), so the report says which one:

    GPU: NVIDIA H200 (CC 9.0, 132 SMs), nvcc 13.0.88, ...

The name is what comes after ``GPU:`` up to the first ``(``, ``,`` or ``;``. It names a device when
each of its words (ignoring the vendor's "NVIDIA", "GeForce", "Tesla") is a word of the device's name as
its probe reports it: ``H100`` and ``NVIDIA H100`` both name "NVIDIA H100 80GB HBM3"; ``H100`` does not
name "NVIDIA H200". Pure: no file, no GPU.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# A line of its own, as the starter's template has it; list markers and bold around the label allowed.
_LINE = re.compile(r"^[ \t]*(?:[-*][ \t]+)?(?:\*\*|__)?GPU(?:\*\*|__)?[ \t]*:(?:\*\*|__)?[ \t]*(.*)$",
                   re.IGNORECASE | re.MULTILINE)
_CUT = re.compile(r"[(,;]")
_VENDOR = frozenset({"nvidia", "geforce", "tesla", "quadro"})
MAX_NAME = 80  # characters of a GPU name kept (the longest probe names are about 40)


@dataclass(frozen=True)
class ReportGpu:
    """The GPU a report's ``GPU:`` line names (``name`` as written, trimmed) and the line it is on."""

    name: str
    line: int

    @property
    def words(self) -> frozenset[str]:
        return card_words(self.name)


def card_words(name: str) -> frozenset[str]:
    """The words that tell one card from another: lower case, without the vendor's words."""
    return frozenset(w for w in re.findall(r"[a-z0-9]+", name.lower()) if w not in _VENDOR)


def report_gpu(text: str) -> ReportGpu | None:
    """The first ``GPU:`` line's GPU, or None when there is none or it names nothing (the starter's
    empty ``GPU:`` line). ``text``: the report with its comments stripped."""
    for m in _LINE.finditer(text):
        name = _CUT.split(m.group(1), 1)[0].strip().strip("`*_ \t.")[:MAX_NAME].strip()
        if card_words(name):
            return ReportGpu(name, text.count("\n", 0, m.start()) + 1)
    return None


def names_device(gpu: ReportGpu, device_name: str | None) -> bool:
    """Whether the report's GPU is the device a probe called ``device_name`` (see the module docstring)."""
    words = gpu.words
    return bool(words and device_name) and words <= card_words(device_name or "")
