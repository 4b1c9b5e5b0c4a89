"""What people read: the ladder table (terminal and markdown) and the summary.

Pure formatting over a :class:`grader.grading.Grading`; rows come from the rubric's
stage table. Speeds appear only for stages that passed correctness.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grader.evidence.sandbox import Confinement
from grader.grading import Grading
from grader.model import Bonus, ItemResult, Status

if TYPE_CHECKING:
    from grader.outputs.profile_page import ProfileReport

# Plots are files next to results.json. Gradescope shows no files, so the text says where they are.
PLOTS_WHERE = ("Plots (files in the results folder, next to results.json; Gradescope does not show files: when the "
               "course's GPU service graded this submission, its job page shows them): ")

COLUMNS = ["stage", "correct", "ms", "GFLOP/s", "% peak", "% of cuBLAS", "vs first", "regs", "spills", "points"]


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
    d = env.gpu
    if d is not None:
        gpu = (f"{d.name} (CC {d.cc[0]}.{d.cc[1]}, {d.sms} SMs), CUDA runtime "
               f"{d.runtime_version}, CuPy {d.cupy_version}")
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


def hand_graded(items: list[ItemResult]) -> list[ItemResult]:
    """The hand-graded items: their points are course staff's, outside the autograder's total."""
    return [i for i in items if i.status == Status.MANUAL]


def automatic_max(items: list[ItemResult]) -> float:
    """The autograder's total: every item's points but the hand-graded and bonus ones (results.json's
    sum of max_score)."""
    return sum(i.counted_max for i in items if i.status != Status.MANUAL)


def bonus_line(grading: Grading) -> str:
    """How the bonus stages went, and how their points count ("" without bonus items)."""
    earned, possible = grading.bonus
    if not possible:
        return ""
    modes = {i.bonus for i in grading.items if i.bonus is not Bonus.NONE}
    how = ("added to the score above" if modes == {Bonus.EXTRA} else "a total of their own, not in the score above")
    return f"**Bonus: {earned:g} / {possible:g} points** ({how})"


def summary_markdown(grading: Grading, profile: ProfileReport | None = None) -> str:
    """The top-level output shown on Gradescope and written to summary.md.

    ``profile`` is the ProfileReport (plots and per-stage diagnoses), when one was written.
    The score is out of the automatic points, as on Gradescope; the hand-graded items are listed
    apart, under "Graded by hand".
    """
    hand = hand_graded(grading.items)
    parts = [f"**Score: {grading.score:g} / {automatic_max(grading.items):g} automatic points**"
             + (f" (and {sum(i.max_score for i in hand):g} points graded by hand, below)" if hand else ""), ""]
    if bonus := bonus_line(grading):
        parts += [bonus, ""]
    parts += [f"- {line}" for line in environment_lines(grading)]
    parts += ["", markdown_table(ladder_rows(grading))]
    for stage, label in (("occupancy", "Occupancy exercises"), ("report", "Report")):
        part = [i for i in grading.items if i.stage == stage]
        if part:
            by_hand = sum(i.max_score for i in hand_graded(part))
            parts.append(f"{label}: {sum(i.score for i in part):g} / {automatic_max(part):g} automatic points"
                         + (f", and {by_hand:g} points graded by hand" if by_hand else "") + "\n")
    if hand:
        parts += ["**Graded by hand** (course staff grade these after the deadline; their points are not "
                  "in the score above):", ""]
        parts += [f"- {i.number} {i.title}: {i.max_score:g} point{'' if i.max_score == 1 else 's'}" for i in hand]
        parts.append("")
    parts.append("`% peak` is against the stage's own ceiling (FP32 CUDA cores for stages 1-4b, FP16/BF16 "
                 "Tensor Cores for WMMA and Hopper); `% of cuBLAS` is against the stage's cuBLAS baseline on the same inputs, timed "
                 "interleaved. Speeds are shown only for kernels that passed every correctness check.")
    diagnoses = profile.diagnoses if profile else {}
    if diagnoses:
        parts += ["", "### What Nsight Compute says about each kernel", ""]
        for sid, o in grading.outcomes.items():
            if sid in diagnoses:
                parts += [f"**{o.stage.number} {o.stage.title}**: " + diagnoses[sid].markdown(), ""]
    images = {k: v for k, v in (profile.images if profile else {}).items() if v}
    if images:
        parts += ["", PLOTS_WHERE + ", ".join(f"`{Path(v).name}`" for v in images.values())]
    if timed := time_line(grading):
        parts += ["", timed]
    return "\n".join(parts)


def time_line(grading: Grading) -> str:
    """One line on where the grading's time went: each step of half a second or more (the whole list,
    with each stage's compile and run, is grading.json's "phases"; tools/phase_times.py prints it)."""
    # The outputs' own phase is timed after this text is written: left out, so the summary comes out the
    # same when rebuilt from grading.json.
    steps = [p for p in grading.phases if not p.detail and p.seconds >= 0.5 and p.name != "outputs"]
    if not steps:
        return ""
    return (f"Grading time: {grading.seconds:.1f} s (" + ", ".join(f"{p.name} {p.seconds:.1f} s" for p in steps)
            + "; every phase: grading.json)")


def waiting_for_gpu(grading: Grading) -> list[ItemResult]:
    """The items not evaluated only because this run had no GPU: flagged so (``needs_gpu``), or, in a run
    without a device, saying so in their message (the report's and occupancy's GPU-measured items)."""
    reason = "" if grading.env.has_gpu else (grading.env.device_reason or "no CUDA device")
    return [i for i in grading.items if i.status == Status.NOT_EVALUATED
            and (i.needs_gpu or (reason and reason in i.message))]


def render_terminal(grading: Grading, console) -> None:
    """Rich table for a TA's terminal."""
    from rich.table import Table

    hand = sum(i.max_score for i in hand_graded(grading.items))
    table = Table(title=f"{grading.submission}: {grading.score:g} / {automatic_max(grading.items):g} automatic points"
                  + (f" (+ {hand:g} graded by hand)" if hand else ""))
    rows = ladder_rows(grading)
    # The stage names and the points are never cut, whatever the terminal's width: the other columns give way.
    whole = {"stage": 0, "points": COLUMNS.index("points")} if "points" in COLUMNS else {"stage": 0}
    for col in COLUMNS:
        at = whole.get(col)
        table.add_column(col, justify="left" if col == "stage" else "right", no_wrap=at is not None,
                         min_width=max((len(str(r[at])) for r in rows), default=len(col)) if at is not None else None)
    for row in rows:
        style = {"NO": "red", "no build": "red", "yes": ""}.get(row[1], "yellow")
        table.add_row(*row, style=style or None)
    console.print(table)
    if bonus := bonus_line(grading):
        console.print(f"  {bonus.replace('**', '')}", highlight=False)
    waiting = waiting_for_gpu(grading)
    for line in environment_lines(grading):
        if waiting and line.startswith("GPU: none"):  # one line for the GPU and every item that waits on it
            line = (f"GPU: none ({grading.env.device_reason or 'no CUDA device'}): {len(waiting)} items wait for a "
                    "GPU run and are not evaluated here")
        console.print(f"  {line}", highlight=False)
    marks = {Status.PASSED: "[green]pass[/]", Status.FAILED: "[red]FAIL[/]", Status.NOT_EVALUATED: "[yellow]n/e[/]",
             Status.MANUAL: "[cyan]by hand[/]", Status.REVIEW: "[yellow]review[/]"}
    for item in grading.items:
        if item.status != Status.PASSED and item not in waiting:
            first = item.message.splitlines()[0] if item.message else ""
            console.print(f"  {marks.get(item.status, item.status)} {item.number} {item.title}: {first}",
                          highlight=False)
