"""Shared pieces of the occupancy grading: the measured inputs, item verdicts, comparisons.

Every exercise grader returns :class:`grader.model.ItemResult` records built
here. A part whose answer field is malformed counts as wrong with the parser's
message; an item whose measurement is missing because there is no GPU (or no
compiler) is ``not_evaluated`` with 0 points and says why. Which of the two it is follows the
cause of a typed :class:`grader.model.Gap`, never the wording of a message.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from grader.model import Cause, Gap, ItemResult, Measured, Status
from grader.occupancy.answers import Answers
from grader.occupancy.calculator import KIB, SMLimits, limits_for
from grader.rubric.occupancy import OccupancyConfig
from grader.untrusted.quote import show_value
from grader.untrusted.yaml_load import MAX_MAGNITUDE

K = TypeVar("K", bound=Hashable)

STAGE = "occupancy"
NO_DEVICE = "not evaluated: no CUDA device"


@dataclass
class Measurements:
    """What the grader measured or compiled; ``None`` where it could not.

    - ``device_available``: a CUDA device was there to run on. When False, every
      item that needs a run is ``not_evaluated`` (never failed), saying ``no_device``
      (``Cause.NO_GPU``; ``Cause.GRADER`` when there is a GPU but no compiler to build for it).
    - ``program``: the student's program's JSON output (see starter/occupancy/occ.cu);
      ``program_problem`` says why there is none when the device was there
      (did not compile, crashed, printed no JSON): those items fail with it.
    - ``program_source``: occ.cu's text, for the static host check.
    - ``api``: the grader's own Occupancy API results on the student's compiled ``work``
      (format: :func:`grader.occupancy.exercises.simulated_api`).
    - ``ptxas``: the heavy kernel's ptxas report per register cap
      (``{cap: grader.compile.ptxas.KernelResources}``); ``ptxas_problem`` when compiling failed.
    - ``heavy_times_ms``: the grader's timing of heavy per cap.
    - ``sweep_times``: the grader's re-run of the Ex 4 sweeps,
      ``{"smem": {bytes: ms}, "block": {block_size: ms}}``.
    - ``gpu_problems``: why a part of the grader's own GPU measurements is missing, by part
      (``"api"``, ``"sweeps"``, ``"heavy"``). A ``Cause.GRADER`` gap (the grader's own
      measurement failed) makes the items that need that part ``not_evaluated``; a
      ``Cause.STUDENT`` gap (the submission's kernel failed, hung or is missing) fails them.
    """

    device_available: bool = False
    no_device: Gap = Gap(Cause.NO_GPU, NO_DEVICE)
    program: dict | None = None
    program_problem: str | None = None
    program_source: str | None = None
    api: dict | None = None
    ptxas: dict[int, Any] | None = None
    ptxas_problem: str | None = None
    no_compiler_reason: str = "not evaluated: the CUDA compiler was not available"
    heavy_times_ms: dict[int, float] | None = None
    sweep_times: dict | None = None
    gpu_problems: dict[str, Gap] = field(default_factory=dict)


@dataclass(frozen=True)
class ProgramSection:
    """One section of the program's JSON output and the grader's own API results to compare it with."""

    data: dict
    api: dict  # Measurements.api, present whenever a section is handed out


class Ctx:
    """What every exercise grader needs: config, answers, measurements, result builders."""

    def __init__(self, cfg: OccupancyConfig, answers: Answers, meas: Measurements):
        self.cfg, self.answers, self.meas = cfg, answers, meas

    # -- the GPU the answers are about -------------------------------------------------
    def device(self) -> tuple[SMLimits, int | None, str]:
        """(limits, SM count or None, description) for the GPU the answers name."""
        ref = self.cfg.reference
        cc = self.answers.get("gpu.compute_capability") or ref.compute_capability
        sms = self.answers.get("gpu.sm_count")
        if sms is None and cc == ref.compute_capability:
            sms = ref.sm_count
        name = self.answers.get("gpu.name") or (ref.name if cc == ref.compute_capability else "")
        return limits_for(cc), sms, f"{name or 'GPU'} (compute capability {cc})"

    # -- verdicts ------------------------------------------------------------------------
    def result(self, item: str, status: Status, fraction: float, message: str,
               values: Measured | None = None) -> ItemResult:
        spec = self.cfg.items[item]
        score = round(spec.points * fraction, 4) if status in (Status.PASSED, Status.FAILED) else 0.0
        return ItemResult(stage=STAGE, item=item, title=spec.title, status=status, score=score,
                          max_score=spec.points, message=message, visibility=spec.visibility,
                          number=spec.number, values=values or Measured())

    def not_evaluated(self, item: str, reason: str) -> ItemResult:
        """Not evaluated for a reason of the grader's (not the lack of a GPU: see :meth:`gap`)."""
        return self.result(item, Status.NOT_EVALUATED, 0.0, reason)

    def gap(self, item: str, gap: Gap) -> ItemResult:
        """The verdict for an item that has nothing to grade: the gap's cause decides the status."""
        res = self.result(item, gap.cause.status, 0.0, gap.message)
        res.needs_gpu = gap.cause is Cause.NO_GPU
        return res

    def same_as(self, item: str, other: ItemResult) -> ItemResult:
        """``other``'s verdict (0 points) for ``item``, which waits on the same missing input."""
        res = self.result(item, other.status, 0.0, other.message)
        res.needs_gpu = other.needs_gpu
        return res

    def missing(self, item: str, part: str, default: str) -> ItemResult:
        """The verdict for an item whose GPU measurement ``part`` is missing (see
        :attr:`Measurements.gpu_problems`); ``default`` (the grader's doing) says why when nothing else does."""
        return self.gap(item, self.meas.gpu_problems.get(part) or Gap(Cause.GRADER, default))

    def parts(self, item: str, parts: list[tuple[bool, str]], ok_message: str = "",
              reads_answers: bool = True, values: Measured | None = None) -> ItemResult:
        """Score an item from (correct, message) parts: full marks only when all are right,
        otherwise the fraction of parts that are right."""
        if reads_answers and self.answers.error:
            return self.result(item, Status.FAILED, 0.0, self.answers.error)
        good = sum(1 for ok, _ in parts if ok)
        if parts and good == len(parts):
            return self.result(item, Status.PASSED, 1.0, ok_message or "correct", values)
        wrong = [m for ok, m in parts if not ok]
        frac = good / len(parts) if parts else 0.0
        return self.result(item, Status.FAILED, frac, "\n".join(wrong), values)

    def manual(self, item: str, fields: list[str]) -> ItemResult:
        """A free-text item: always ``manual``. Course staff grade it (a manual question on Gradescope),
        so the autograder gives no verdict either way; the message says what was recorded for them,
        and names any field that is missing or unreadable, with the form expected, so it can be fixed."""
        if self.answers.error:
            return self.result(item, Status.MANUAL, 0.0, "nothing recorded for course staff: " + self.answers.error)
        missing = [p for f in fields if (p := self.answers.problem(f))]
        answered = [f for f in fields if self.answers.get(f) is not None]
        head = ("your answer was recorded for course staff (" + ", ".join(answered) + ")" if answered
                else "nothing recorded for course staff")
        return self.result(item, Status.MANUAL, 0.0, "\n".join([head + ("; fix the field(s) below, or they see no "
                                                                        "answer there" if missing else "")] + missing),
                           Measured(answers={f: self.answers.get(f) for f in fields}))

    def program_section(self, item: str, key: str) -> ProgramSection | ItemResult:
        """The program's JSON section ``key``, or the verdict to give when it cannot be had."""
        m = self.meas
        if not m.device_available:
            return self.gap(item, m.no_device)
        if m.program is None:
            return self.result(item, Status.FAILED, 0.0, m.program_problem or "the program printed no JSON output")
        if not isinstance(m.program, dict):
            return self.result(item, Status.FAILED, 0.0, "the program's output is not a JSON object")
        section = m.program.get(key)
        if not isinstance(section, dict):
            return self.result(item, Status.FAILED, 0.0, f"the program's output has no \"{key}\" section")
        if m.api is None:
            return self.missing(item, "api", "not evaluated: the grader's own Occupancy API results are missing")
        return ProgramSection(section, m.api)

    # -- comparisons against answer fields -----------------------------------------------
    def expect_int(self, path: str, expected: int | None, what: str = "") -> tuple[bool, str]:
        got = self.answers.get(path)
        if got is None:
            return False, self.answers.problem(path) or f"{path}: no answer"
        if expected is None:
            return False, f"{path}: {got} given, but this resource sets no limit here"
        if got == expected:
            return True, ""
        return False, f"{path}: {got} is not right{(' (' + what + ')') if what else ''}"

    def expect_num(self, path: str, expected: float, *, pct: bool = False,
                   abs_tol: float | None = None, what: str = "") -> tuple[bool, str]:
        got = self.answers.get(path)
        if got is None:
            return False, self.answers.problem(path) or f"{path}: no answer"
        tol = self.cfg.tolerance
        if abs_tol is None:
            abs_tol = tol.abs
        if math.isclose(got, expected, rel_tol=tol.rel, abs_tol=abs_tol):
            return True, ""
        hint = f" ({what})" if what else ""
        if pct and math.isclose(got * 100, expected, rel_tol=tol.rel, abs_tol=abs_tol):
            hint += " (it looks like a fraction; this field is in percent)"
        return False, f"{path}: {got:g} is not right{hint}"

    def expect_choice(self, path: str, accepted: set | tuple, what: str = "",
                      fmt=str) -> tuple[bool, str]:
        """The answer (or every value of a list answer) must be one of ``accepted``."""
        got = self.answers.get(path)
        if got is None:
            return False, self.answers.problem(path) or f"{path}: no answer"
        picks = got if isinstance(got, tuple) else (got,)
        if picks and all(p in accepted for p in picks):
            return True, ""
        shown = ", ".join(fmt(p) for p in picks)
        return False, f"{path}: {shown} is not right{(' (' + what + ')') if what else ''}"


def size_hint(path: str, size_bytes: float, per_sm_bytes: int) -> str:
    """A hint when a size answered in KiB looks like a number of bytes: more than one SM holds, while
    that many bytes would fit ("7168 KiB" meant as 7168 B = 7 KiB). "" otherwise."""
    written = size_bytes / KIB  # the number the student wrote, read as KiB
    if size_bytes <= per_sm_bytes or written > per_sm_bytes:
        return ""
    return (f"{path} is in KiB: {written:g} KiB is more shared memory than one SM has ({per_sm_bytes / KIB:g} KiB). "
            f"If you meant {written:g} bytes, write {written / KIB:g} (KiB) or '{written:g} B'")


FIX_KERNEL = ("ex1.fix.threads_per_block", "ex1.fix.regs_per_thread", "ex1.fix.shared_mem_kib")


def implausible(answers: Answers, cfg: OccupancyConfig) -> dict[str, str]:
    """The answers that are well-formed but cannot be what the student meant, by field (``ex1.fix``
    for the changed kernel as a whole): what grading says of them, and what ``python -m grader check``
    says before grading. Needs no GPU and no expected value."""
    out: dict[str, str] = {}
    threads, regs, smem = (answers.get(f) for f in FIX_KERNEL)
    if None in (threads, regs, smem):
        return out
    if threads <= 0 or threads > 1024 or regs < 0 or smem < 0:
        out["ex1.fix"] = "ex1.fix: the changed kernel is not a valid launch (1-1024 threads, no negative sizes)"
    elif hint := size_hint(FIX_KERNEL[2], smem, cfg.ex1.smem_per_sm):
        out[FIX_KERNEL[2]] = hint
    return out


def as_number(value: object) -> float | None:
    """``value`` as a float when it is a finite number of sane size, else None. The student's
    program may print 1e400 or a 400-digit integer, which float() and math.isclose cannot take."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= MAX_MAGNITUDE:
        return None  # an int compared with a float is exact in Python: no overflow; NaN fails <=
    return float(value)


def program_value(value: object) -> str:
    """A value the student's program printed, for a message: a sane number as it is, anything else
    (text, a list, 1e400) as short inline code, never rendered as Markdown."""
    if value is None or isinstance(value, bool) or as_number(value) is not None:
        return repr(value)
    return show_value(value)


def api_lookup(api: dict, block: int, smem: int) -> int | None:
    """Blocks per SM for (block, smem) in the grader's API results, or None."""
    for row in api.get("occupancy", []):
        if row.get("block") == block and row.get("smem") == smem:
            return row.get("blocks")
    return None


def near_min(times: Mapping[K, float], tie_pct: float) -> set[K]:
    """Keys whose time is within ``tie_pct`` percent of the fastest (the fastest included)."""
    valid = {k: v for k, v in times.items() if isinstance(v, (int, float)) and v > 0}
    if not valid:
        return set()
    best = min(valid.values())
    return {k for k, v in valid.items() if v <= best * (1 + tie_pct / 100.0)}


def argmax_set(values: Mapping[K, float]) -> set[K]:
    if not values:
        return set()
    top = max(values.values())
    return {k for k, v in values.items() if math.isclose(v, top, rel_tol=1e-9, abs_tol=1e-12)}
