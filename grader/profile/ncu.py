"""Nsight Compute: one profiling run per submission, and a pure parser for its output.

:func:`collect` runs ncu once over ``python -m grader.children profile SPEC RESULT``: every
stage kernel is launched once and ncu records the union of the metrics the rubric
names (:func:`metrics_needed`) as ``--csv --page raw``. :func:`parse_raw_csv` turns
that text into ``{kernel name: {metric: value}}``.

Nothing here raises for a missing tool, a GPU whose counters are locked, a time-out
or a kernel that crashed: the run comes back as an :class:`NcuRun` whose ``reason``
(or per-stage :class:`~grader.model.Gap`) says why: ``Cause.GRADER`` when the grader could
not look (worded ``not evaluated: ...``), ``Cause.STUDENT`` when the student's kernel gave
nothing to look at (``not profiled: ...``). grader/rubric/kinds.py (the ncu kind's judge) reads the cause.
"""
from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader.children.protocol import PROFILE
from grader.evidence.protocol import Kernel, LaunchResult, ProbeResult, ProfileSpec
from grader.model import Cause, Gap, NcuMetrics, ProcRecord
from grader.rubric.expr import METRIC_RE  # the metric-name grammar belongs to the rubric's expressions
from grader.rubric.kinds import REGISTRY
from grader.rubric.metric_names import NOT_PROFILED_PREFIX, chip_for_cc, missing_on
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult, launch
from grader.untrusted.quote import quote_code

if TYPE_CHECKING:
    from grader.evidence.tools import Tool

_NUMBER_RE = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_HEADER_RE = re.compile(r'^"?ID"?,')
_HEADER = '"ID","Process ID","Process Name"'
OUTPUT_LIMIT = 8_000_000  # bytes kept per stream; the CSV is at the end, in the kept tail

# Wording of the reasons people read; an item's status follows the reason's Cause, never this text.
NOT_EVALUATED_PREFIX = "not evaluated:"
NCU_MISSING = "not evaluated: Nsight Compute (ncu) not found"
_COUNTERS = "not evaluated: ncu cannot read the GPU's performance counters here"


class NcuTable(dict):
    """``{kernel name: {metric: value}}`` plus the units row and what went wrong.

    Values are floats where ncu printed a number (thousands separators removed),
    ``None`` for "n/a" or an empty cell, otherwise the text (e.g. "(32, 32, 1)").
    """

    def __init__(self) -> None:
        super().__init__()
        self.units: dict[str, str] = {}
        self.problem = ""  # why there is no table ("" when there is one)
        self.notes: list[str] = []

    def unit(self, metric: str) -> str:
        return self.units.get(metric, "")

    def row(self, kernel: str) -> NcuMetrics | None:
        """The row of ``kernel``; also matches a demangled name such as ``mmNaive(float const*, ...)``."""
        if kernel in self:
            return self[kernel]
        for name, row in self.items():
            if re.split(r"[(<\s]", name, maxsplit=1)[0] == kernel:
                return row
        return None


def parse_value(text: str) -> float | str | None:
    t = text.strip()
    if t == "" or t.lower() == "n/a":
        return None
    if _NUMBER_RE.match(t) and any(c.isdigit() for c in t):
        return float(t.replace(",", ""))
    return t


def parse_raw_csv(text: str) -> NcuTable:
    """Parse the stdout of ``ncu --csv --page raw``. Never raises.

    Everything before ncu's header row (``==PROF==`` messages, the profiled program's
    own output, even a fake table printed by a kernel) is skipped; the row after the
    header is the units row; rows whose length does not match the header are skipped
    with a note.
    """
    table = NcuTable()
    # ncu prints its table after the profiled process has exited, so the LAST header is ncu's:
    # a kernel's printf can write a fake table before it, or leave a line unterminated.
    at = text.rfind(_HEADER)
    if at >= 0:
        text = text[at:]
    lines = text.splitlines()
    start = max((k for k, line in enumerate(lines) if _HEADER_RE.match(line)), default=None)
    if start is None:
        errors = [line.strip() for line in lines if line.startswith("==ERROR==")]
        if any("No kernels were profiled" in line for line in lines):
            table.problem = "ncu profiled no kernel"
        else:
            table.problem = "no CSV table in ncu's output" + (f" ({errors[0]})" if errors else "")
        return table
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(body))
    header = rows[0]
    try:
        name_col = header.index("Kernel Name")
    except ValueError:
        table.problem = "ncu's CSV has no 'Kernel Name' column"
        return table
    data = rows[1:]
    if data and not data[0][0].strip().isdigit():  # the units row has no ID
        table.units = {h: u for h, u in zip(header, data[0]) if u}
        data = data[1:]
    for row in data:
        if len(row) != len(header):
            table.notes.append(f"skipped a CSV row with {len(row)} fields (header has {len(header)})")
            continue
        name = row[name_col]
        if name in table:
            table.notes.append(f"{name} was profiled more than once; the first launch is used")
            continue
        table[name] = {h: parse_value(v) for h, v in zip(header, row)}
    if not table:
        table.problem = "ncu's CSV has a header but no kernel rows"
    return table


def metric_names(text: str) -> list[str]:
    """Metric names in an expression, in order of appearance, without repeats."""
    return list(dict.fromkeys(METRIC_RE.findall(text)))


def rubric_metrics(rubric) -> list[str]:
    """Every metric the rubric's ncu items name (their expressions and their values), in order."""
    names: list[str] = []
    for stage in rubric.stages:
        for item in stage.items:
            for key in REGISTRY.of(item).expression_params:
                text = item.params.get(key)
                if isinstance(text, str):
                    names += metric_names(text)
    return list(dict.fromkeys(names))


def metrics_needed(rubric) -> list[str]:
    """What one ncu run must collect: every metric the rubric's ncu items name, then
    what the bottleneck diagnosis and the roofline plot read."""
    from grader.profile.diagnosis import METRICS as DIAGNOSIS_METRICS

    return list(dict.fromkeys(rubric_metrics(rubric) + list(DIAGNOSIS_METRICS)))


@dataclass
class NcuRun:
    """One ncu run: the process, the parsed table and why something is missing."""

    proc: ProcRecord | None = None
    table: NcuTable = field(default_factory=NcuTable)
    reason: str = ""  # for the whole run; "" on success
    stage_reasons: dict[str, Gap] = field(default_factory=dict)  # stage id -> why it has no row
    kernels: dict[str, str] = field(default_factory=dict)  # stage id -> kernel name
    command: list[str] = field(default_factory=list)
    dropped_metrics: list[str] = field(default_factory=list)  # ncu did not know them here
    notes: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> dict[str, dict]:
        """Per kernel name, the metrics of its one profiled launch."""
        return dict(self.table)

    def for_stage(self, stage_id: str) -> tuple[NcuMetrics | None, Gap | None]:
        """(metrics, None) for a profiled stage, else (None, why not)."""
        if self.reason:  # the whole run gave nothing: the grader could not look
            return None, Gap(Cause.GRADER, self.reason)
        if stage_id in self.stage_reasons:
            return None, self.stage_reasons[stage_id]
        row = self.table.row(self.kernels.get(stage_id, ""))
        if row is None:
            return None, Gap(Cause.GRADER, f"not evaluated: ncu reported no metrics for stage {stage_id}")
        return row, None


def wanted_metrics(rubric, device: ProbeResult | None) -> tuple[list[str], list[str], str | None]:
    """(the metrics to ask ncu for on ``device``, those this chip's ncu lacks, the chip)."""
    wanted = metrics_needed(rubric)
    chip = chip_for_cc(device.cc if device is not None else None)
    absent = missing_on(wanted, chip)
    return [m for m in wanted if m not in absent], absent, chip


def counter_problem(output: str) -> str:
    """The reason to give when ncu's output says it cannot use the counters, else ''."""
    if "ERR_NVGPUCTRPERM" in output:
        return (f"{_COUNTERS} (ERR_NVGPUCTRPERM: this user may not access the GPU performance counters; "
                "an administrator can allow it with the nvidia driver option NVreg_RestrictProfilingToAdminUsers=0)")
    for marker in ("LibraryNotLoaded", "Failed to initialize the profiler"):
        if marker in output:
            line = next((ln.strip() for ln in output.splitlines() if marker in ln), marker)
            return f"{_COUNTERS} ({line[:300]})"
    return ""


def _unknown_metrics(output: str, requested: list[str]) -> list[str]:
    """Requested metrics that an ncu error line names (this GPU or ncu version lacks them)."""
    bad: list[str] = []
    for line in output.splitlines():
        if line.startswith("==ERROR==") and "metric" in line.lower():
            bad += [m for m in METRIC_RE.findall(line) if m in requested]
    return list(dict.fromkeys(bad))


def _child_failures(stdout: str) -> dict[str, str]:
    """The profile child's last line ({"failures": ...}); the last one is the child's own."""
    at = stdout.rfind('{"failures"')
    if at < 0:
        return {}
    try:
        return dict(json.loads(stdout[at:].splitlines()[0]).get("failures") or {})
    except (ValueError, AttributeError, TypeError):
        return {}


def command(ncu_path: str, kernels: list[str], metrics: list[str], clock_control: str) -> list[str]:
    """ncu's part of the command; the profile child (grader.sandbox.launch) follows it."""
    regex = "regex:^(" + "|".join(re.escape(k) for k in kernels) + ")$"
    return [ncu_path, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", clock_control,
            "--metrics", ",".join(metrics), "-k", regex, "--launch-count", str(len(kernels))]


def collect(stages: list[Kernel], n: int, seed: int, metrics: list[str], ncu_tool: Tool | None, clock_control: str,
            timeout_s: float, work_dir: Path, *, fence: Fence | None = None,
            first: Callable[[], ChildResult[LaunchResult]] | None = None) -> NcuRun:
    """Profile every stage kernel once in one ncu process. Never raises.

    ``stages``: the kernels to launch, each with its stage's id.
    ``ncu_tool``: a toolchain.Tool (``.path`` None when ncu is missing). ``first``: the first run,
    already started with these metrics (grader/gpu/session.py: early_profile); ncu is started
    here only if it refused metrics.
    """
    run = NcuRun(kernels={s.id: s.kernel for s in stages})
    if not stages:
        return run
    if ncu_tool is None or ncu_tool.path is None:
        run.reason = NCU_MISSING
        return run
    work_dir = Path(work_dir).resolve()  # ncu runs in it, so every path handed over is absolute
    spec = ProfileSpec(n=n, seed=seed, stages=stages)
    wanted = list(metrics)
    for attempt in range(2):
        wrap = command(ncu_tool.path, [s.kernel for s in stages], wanted, clock_control)
        try:
            child = (first() if first is not None and attempt == 0 else
                     launch(PROFILE, spec, work_dir, timeout_s, OUTPUT_LIMIT, wrap=wrap, fence=fence))
        except OSError as exc:
            run.reason = f"not evaluated: could not write the profile spec ({exc})"
            return run
        proc = run.proc = child.proc
        run.command = list(proc.command)
        output = proc.stdout + "\n" + proc.stderr
        bad = _unknown_metrics(output, wanted)
        if bad and not proc.timed_out and len(bad) < len(wanted):
            run.dropped_metrics += bad
            run.notes.append("ncu does not know " + ", ".join(bad) + " here; profiled again without them")
            wanted = [m for m in wanted if m not in bad]
            continue
        break
    return _finish(run, proc, stages, timeout_s, work_dir, child.result.failures if child.result else None)


def _finish(run: NcuRun, proc: ProcRecord, stages: list[Kernel], timeout_s: float,
            work_dir: Path | None = None, failures: Mapping[str, str] | None = None) -> NcuRun:
    """``failures``: the profile child's RESULT.json; None reads them from stdout, where the
    children printed them before the one protocol (the captured fixtures in tests/ hold that)."""
    output = proc.stdout + "\n" + proc.stderr
    if work_dir is not None:  # keep the raw output: evidence for TAs and fixtures for tests
        try:
            (work_dir / "ncu_raw.csv.txt").write_text(proc.stdout)
        except OSError:
            pass
    if proc.returncode is None:
        run.reason = f"not evaluated: ncu could not be started ({quote_code(proc.stderr.strip(), 300)})"
        return run
    if proc.timed_out:
        run.reason = f"not evaluated: the ncu run did not finish within {timeout_s:g} s"
        return run
    problem = counter_problem(output)
    if problem:
        run.reason = problem
        return run
    run.table = parse_raw_csv(proc.stdout)
    run.notes += run.table.notes
    failures = _child_failures(proc.stdout) if failures is None else dict(failures)
    if run.table.problem and not failures:
        errors = [ln.strip() for ln in output.splitlines() if ln.startswith("==ERROR==")]
        detail = errors[0] if errors else (proc.stderr.strip().splitlines() or [""])[-1]
        run.reason = (f"not evaluated: ncu produced no metrics ({proc.brief()}; {run.table.problem})"
                      + (f": {quote_code(detail, 300)}" if detail else ""))
        return run
    for st in stages:
        if st.id not in failures and run.table.row(st.kernel) is not None:
            continue
        if st.id in failures:  # even with a row: the launch failed, its counters mean nothing
            run.stage_reasons[st.id] = Gap(Cause.STUDENT, f"{NOT_PROFILED_PREFIX} the kernel failed when it "
                                           f"was launched for profiling: {failures[st.id][:300]}")
        elif failures:
            first = next(iter(failures))
            run.stage_reasons[st.id] = Gap(Cause.GRADER, f"{NOT_EVALUATED_PREFIX} not reached: stage {first}'s "
                                              "kernel broke the GPU context before this kernel was launched")
        else:
            run.stage_reasons[st.id] = Gap(Cause.GRADER,
                                              f"{NOT_EVALUATED_PREFIX} ncu reported no metrics for {st.kernel}")
    return run
