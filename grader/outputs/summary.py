"""What people read: the ladder table (terminal and markdown) and the summary.

Pure formatting over a :class:`grader.grading.Grading`; rows come from the rubric's
stage table. Speeds appear only for stages that passed correctness.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grader.grading import Grading
from grader.model import ItemResult, Status
from grader.run.sandbox import Confinement

if TYPE_CHECKING:
    from grader.outputs.profile_page import ProfileReport

COLUMNS = ["stage", "correct", "ms", "GFLOP/s", "% peak", "% baseline", "vs first", "regs", "spills", "points"]


def ladder_rows(grading: Grading) -> list[list[str]]:
    """One row per stage; the speed-up column is relative to the first stage of the table."""
    outcomes = list(grading.outcomes.values())
    first = outcomes[0].timing if outcomes else None
    by_stage: dict[str | None, list[ItemResult]] = {}
    for item in grading.items:
        by_stage.setdefault(item.stage, []).append(item)
    rows = []
    for o in outcomes:
        t, k = o.timing, (o.compile.kernel if o.compile and o.compile.ok else None)
        items = by_stage.get(o.stage.id, [])
        got = sum(i.score for i in items)
        top = sum(i.max_score for i in items)
        correct = {True: "yes", False: "NO", None: "n/e"}[o.correct]
        if o.compile is None or not o.compile.ok:
            correct = "no build"
        rows.append([
            f"{o.stage.number} {o.stage.id}",
            correct,
            f"{t.median_ms:.3f}" if t else "-",
            f"{t.tflops * 1e3:,.0f}" if t else "-",
            f"{100 * t.fraction_of_peak:.1f}" if t and t.fraction_of_peak is not None else "-",
            f"{100 * t.fraction_of_baseline:.1f}" if t else "-",
            f"{first.median_ms / t.median_ms:.1f}x" if t and first else "-",
            str(k.registers) if k else "-",
            (f"{k.spill_stores}/{k.spill_loads}" if k else "-"),
            f"{got:g}/{top:g}",
        ])
    return rows


def markdown_table(rows: list[list[str]]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(r) + " |\n" for r in rows)


def environment_lines(grading: Grading) -> list[str]:
    env = grading.env
    if env.has_gpu:
        d = env.device or {}
        gpu = (f"{d['name']} (CC {d['cc'][0]}.{d['cc'][1]}, {d['sms']} SMs), CUDA runtime "
               f"{d.get('runtime_version')}, CuPy {d.get('cupy_version')}")
    else:
        gpu = f"none ({env.device_reason or 'no CUDA device'}): GPU items are not evaluated"
    nvcc = env.nvcc
    lines = [f"GPU: {gpu}",
             f"Compiler: {(nvcc.path if nvcc else None) or 'not found'} {(nvcc.version if nvcc else '') or ''} "
             f"({' '.join(env.arch_flags)})",
             f"Peaks: FP32 {env.peaks.fp32 or '-'} / FP16 Tensor {env.peaks.fp16_tensor or '-'} TFLOP/s "
             f"({env.peaks.source})"]
    if env.sandbox is not None:
        lines.append(f"Sandbox: {env.sandbox.describe()}")
        if env.sandbox.confinement is Confinement.WEAK:
            lines.append("Warning: students' code ran WITHOUT the bubblewrap sandbox (the weak fence: time, output "
                         "and memory limits, session kill); it could read this machine's files and a detached "
                         "process could outlive its step. See docs/deployment.md, 'What is fenced'.")
    return lines + list(grading.notes)


def summary_markdown(grading: Grading, profile: ProfileReport | None = None) -> str:
    """The top-level output shown on Gradescope and written to summary.md.

    ``profile`` is the ProfileReport (plots and per-stage diagnoses), when one was written.
    """
    parts = [f"**Score: {grading.score:g} / {grading.max_score:g}**", ""]
    parts += [f"- {line}" for line in environment_lines(grading)]
    parts += ["", markdown_table(ladder_rows(grading))]
    for stage, label in (("occupancy", "Occupancy exercises"), ("report", "Report")):
        part = [i for i in grading.items if i.stage == stage]
        if part:
            manual = sum(i.max_score for i in part if i.status == Status.MANUAL)
            parts.append(f"{label}: {sum(i.score for i in part):g} / {sum(i.max_score for i in part):g} points"
                         + (f" ({manual:g} of them graded by hand later)" if manual else "") + "\n")
    parts.append("`% peak` is against the stage's own ceiling (FP32 CUDA cores for stages 1-4b, FP16 "
                 "Tensor Cores for WMMA); `% baseline` is against cuBLAS on the same inputs, timed "
                 "interleaved. Speeds are shown only for kernels that passed every correctness check.")
    diagnoses = profile.diagnoses if profile else {}
    if diagnoses:
        parts += ["", "### What Nsight Compute says about each kernel", ""]
        for sid, o in grading.outcomes.items():
            if sid in diagnoses:
                parts += [f"**{o.stage.number} {o.stage.title}**: " + diagnoses[sid].markdown(), ""]
    images = {k: v for k, v in (profile.images if profile else {}).items() if v}
    if images:
        parts += ["", "Plots in the output folder: " + ", ".join(f"`{Path(v).name}`" for v in images.values())]
    return "\n".join(parts)


def render_terminal(grading: Grading, console) -> None:
    """Rich table for a TA's terminal."""
    from rich.table import Table

    table = Table(title=f"{grading.submission}: {grading.score:g} / {grading.max_score:g} points")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col == "stage" else "right")
    for row in ladder_rows(grading):
        style = {"NO": "red", "no build": "red", "yes": ""}.get(row[1], "yellow")
        table.add_row(*row, style=style or None)
    console.print(table)
    for line in environment_lines(grading):
        console.print(f"  {line}", highlight=False)
    marks = {Status.PASSED: "[green]pass[/]", Status.FAILED: "[red]FAIL[/]", Status.NOT_EVALUATED: "[yellow]n/e[/]"}
    for item in grading.items:
        if item.status != Status.PASSED:
            first = item.message.splitlines()[0] if item.message else ""
            console.print(f"  {marks.get(item.status, item.status)} {item.number} {item.title}: {first}",
                          highlight=False)
