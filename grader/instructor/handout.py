"""The handout's rubric tables, generated from rubric.yaml so the handout and the grader agree.

``python -m grader handout --write`` rewrites every generated block of assignment/README.md;
``python -m grader.instructor.handout --check`` exits 1 (naming the stale blocks) when the handout differs
from what the rubric gives, and 2 (with the rubric's error) when the rubric is invalid. A block is the
text between

    <!-- BEGIN GENERATED: name -->
    <!-- END GENERATED: name -->

and is never edited by hand. tests/test_handout.py runs the check.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from grader import REPO_ROOT as ROOT  # noqa: E402
from grader.compile.stage import ELEMENT_TYPES, SIGNATURES
from grader.evidence.rubric import Item, Stage
from grader.model import Bonus
from grader.rubric.errors import ConfigError
from grader.rubric.items import is_technique
from grader.rubric.kinds import REGISTRY, Registry, sizes_words
from grader.rubric.load import load_rubric
from grader.rubric.types import Rubric

HANDOUT = ROOT / "assignment" / "README.md"
RUBRIC = ROOT / "rubric.yaml"
BLOCK_RE = re.compile(r"(<!-- BEGIN GENERATED: ([\w-]+) -->\n)(.*?)(<!-- END GENERATED: \2 -->)", re.S)

VISIBILITY_WORDS = {"visible": "visible", "hidden": "hidden", "after_due_date": "after the due date",
                    "after_published": "when grades are published"}


def signature(stage: Stage) -> str:
    """The kernel's parameter list, as grader/compile/stage.py checks it."""
    return SIGNATURES[stage.operands].format(t=ELEMENT_TYPES[stage.inputs])


def _points(stage: Stage) -> str:
    return f"{_pts(stage.max_points)} {'bonus points' if stage.bonus is not Bonus.NONE else 'points'}"


def _pts(x: float) -> str:
    return f"{x:g}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def threshold(item: Item, stage: Stage, rubric: Rubric, registry: Registry = REGISTRY) -> str:
    """What an item needs, in words: its kind's wording, and for a speed kind the technique gate."""
    kind = registry.of(item)
    gate = ""
    if kind.speed and any(is_technique(it) for it in stage.items):
        gate = "; counts once the stage's technique items (marked *technique*) pass"
    return kind.handout_text(item, stage, rubric) + gate


def block_stages(rubric: Rubric) -> str:
    lines = ["| # | stage id | file | kernel | signature | default launch (block, BM x BN tile, dynamic smem) "
             "| rtol |", "|---|---|---|---|---|---|---|"]
    for st in rubric.stages:
        lc = st.launch
        lines.append(f"| {st.number} | `{st.id}` | `{st.file}` | `{st.kernel}` | `{signature(st)}` | "
                     f"{lc.block[0]} x {lc.block[1]} threads, {lc.tile[0]} x {lc.tile[1]}, {lc.smem} B | "
                     f"{st.rtol:g} |")
    lines += ["", f"Correctness sizes: N = {sizes_words(rubric)}, then the benchmark size again after timing. "
              f"Benchmark size: N = {rubric.stages[0].bench.n}. Nsight Compute profile size: N = {rubric.profile.n}."]
    san = rubric.sanitizer
    if san.racecheck:
        lines.append(f"Stages that use shared memory also run once under `compute-sanitizer --tool racecheck` at "
                     f"N = {san.n}: a reported hazard fails the stage's correctness item.")
    plausible = rubric.stages[0].plausible_max
    if plausible:
        lines.append(f"A kernel timed faster than {plausible:g} x its cuBLAS baseline is not scored automatically: "
                     "its speed items go to a person for review.")
    st0, prof = rubric.stages[0], rubric.profile
    ncu_time = (f"with Nsight Compute's (more than {prof.duration_agreement:g} x either way) or "
                if prof.clock_control == "none" else "")
    lines.append(f"Every warm-up and timed launch gets fresh inputs; a warm-up launch more than "
                 f"{st0.bench.warmup_review_multiple:g} x the timed launches' median sends the speed items to a "
                 f"person too. The kernel profiled must be the kernel timed: after timing, it is launched again at "
                 f"N = {prof.n}, and when those launches' times disagree {ncu_time}with the rate at "
                 f"N = {st0.bench.n} (more than {prof.rate_agreement:g} x either way), the stage's Nsight Compute "
                 "items fail.")
    return "\n".join(lines)


def block_grading(rubric: Rubric) -> str:
    out = []
    for st in rubric.stages:
        out += [f"**{st.number} {st.title}** (`{st.file}`, `{st.kernel}`, {_points(st)})", "",
                "| item | kind | passes when | points | visibility |", "|---|---|---|---|---|"]
        for it in st.items:
            out.append(f"| {st.number}.{it.id}: {_cell(it.title)} | {it.kind} | {_cell(threshold(it, st, rubric))} | "
                       f"{_pts(it.points)} | {VISIBILITY_WORDS[it.visibility]} |")
        out.append("")
    return "\n".join(out).rstrip()


def _item_row(spec) -> str:
    return f"| {spec.number} | {_cell(spec.title)} | {_pts(spec.points)} | {VISIBILITY_WORDS[spec.visibility]} |"


def block_occupancy(rubric: Rubric) -> str:
    cfg = rubric.occupancy
    if cfg is None:
        return "_This rubric has no occupancy section._"
    lines = [f"Files: `{cfg.program_file}` and `{cfg.answers_file}`. Numeric answers pass within "
             f"{100 * cfg.tolerance.rel:g}% (or {cfg.tolerance.abs:g}); percentages read off a report within "
             f"{cfg.tolerance.pct_points:g} points; run times within {cfg.tolerance.time_tie_pct:g}% of the fastest "
             "count as the fastest. Text answers are graded by hand.", "",
             "| # | item | points | visibility |", "|---|---|---|---|"]
    for spec in cfg.items.values():
        lines.append(_item_row(spec))
    return "\n".join(lines)


def block_occupancy_params(rubric: Rubric) -> str:
    cfg = rubric.occupancy
    if cfg is None:
        return "_This rubric has no occupancy section._"
    e1, e2, e3, e4, e5, e6 = cfg.ex1, cfg.ex2, cfg.ex3, cfg.ex4, cfg.ex5, cfg.ex6

    def kib(b: int) -> str:
        return f"{b / 1024:g}"

    stalls = ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in e5.stalls.items())
    return "\n".join([
        "| exercise | parameters |", "|---|---|",
        f"| Ex 1 | SM: {e1.max_warps} warps, {e1.max_blocks} blocks, {e1.registers:,} registers, "
        f"{kib(e1.smem_per_sm)} KiB shared memory; kernel: {e1.threads_per_block} threads/block, "
        f"{e1.regs_per_thread} registers/thread, {kib(e1.smem_per_block)} KiB shared memory/block; target "
        f"occupancy {e1.target_occupancy_pct:g}% |",
        f"| Ex 2 | block {e2.block_size}, {kib(e2.dynamic_smem)} KiB dynamic shared memory |",
        f"| Ex 3 | block {e3.block_size}; runs with " + " and ".join(f"{kib(b)} KiB" for b in e3.runs)
        + " of dynamic shared memory |",
        f"| Ex 4 | shared-memory sweep: block {e4.smem_block_size}, " + ", ".join(kib(b) for b in e4.smem_points)
        + f" KiB; block-size sweep: {kib(e4.block_smem)} KiB, blocks " + ", ".join(str(b) for b in e4.block_points)
        + " |",
        f"| Ex 5 | {e5.schedulers_per_sm} schedulers per SM, {e5.max_warps_per_sm} warps per SM at most; report: "
        f"active {e5.active_per_scheduler:g}, eligible {e5.eligible_per_scheduler:g}, issued "
        f"{e5.issued_per_scheduler:g} warps per scheduler; No Eligible {e5.no_eligible_pct:g}%, One or More "
        f"Eligible {e5.one_or_more_eligible_pct:g}%; {e5.cycles_per_issue:g} warp cycles per issued instruction; "
        f"stall cycles: {stalls} |",
        "| Ex 6 | `heavy` built with -maxrregcount " + ", ".join(str(c) for c in e6.register_caps)
        + f"; block {e6.block_size}; at least {e6.min_registers_uncapped} registers uncapped |",
    ] + ([] if not cfg.variants else [
        "", "This course gives each student their own Ex 1 kernel and Ex 2 launch (the table shows the defaults): "
        "`python -m grader variant --student ID` prints yours, with ID your student ID as Gradescope has it "
        "(your email if the course has none). Your answers and your program are graded with your numbers."]))


def block_report(rubric: Rubric) -> str:
    cfg = rubric.report
    if cfg is None:
        return "_This rubric has no report section._"
    lines = [f"File: `{cfg.file}`. A paragraph counts as written with at least {cfg.min_words} words of prose. A "
             f"cited value matches when it is within {100 * cfg.rel_tol:g}% of the grader's measurement (or within "
             f"{cfg.abs_tol:g} in the metric's unit, for values near zero). Table cells must agree with the other "
             f"cells of their row within {100 * cfg.arithmetic_rel:g}% (or half their last digit); table times "
             f"within {100 * cfg.time_rel:g}% of the grader's own timing.", "",
             "**Which GPU's numbers to cite.** Cite the numbers of one grading of your final kernels on the course's "
             "GPU service (`python -m grader submit`), and copy that grading's GPU, as its summary.md names it, to "
             "the report's `GPU:` line (`GPU: NVIDIA H100 80GB HBM3`). Cited values and table times are compared "
             "with a grading on the GPU that line names: the grading itself when it runs on that GPU, or else your "
             "own GPU-graded self-check of the same files that the service keeps (so submit your final files, "
             "report included, once more before you hand them in). A report that names no GPU is compared with "
             "the grading's own GPU. Without a grading on the GPU it names (numbers from your own card) only "
             "what holds on any GPU is checked: every value reads as a number in its metric's unit, none below "
             "0, no percentage above 100; the rest is left for a TA (not evaluated, never failed).", "",
             "| # | item | points | visibility |", "|---|---|---|---|"]
    for spec in cfg.items():
        lines.append(_item_row(spec))
    lines += ["", "Transitions and the kernel their cited values are compared with (unless a citation names "
              "another stage):", "", "| section heading | values compared with |", "|---|---|"]
    for t in cfg.transitions:
        kernel = rubric.stage(t.after).kernel if t.after in [s.id for s in rubric.stages] else t.after
        lines.append(f"| `## {t.before} -> {t.after}` | `{t.after}` (`{kernel}`) |")
    lines += ["", "Derived names a report may cite (besides any metric name the grader collects):", "",
              "| name | what it is | computed as |", "|---|---|---|"]
    for d in cfg.derived.values():
        lines.append(f"| `{d.name}` | {_cell(d.title)} | `{d.expr}` |")
    return "\n".join(lines)


def block_totals(rubric: Rubric) -> str:
    lines = ["| part | points |", "|---|---|"]
    for st in rubric.stages:
        if st.bonus is Bonus.NONE:
            lines.append(f"| {st.number} {st.title} | {_pts(st.max_points)} |")
    for label, section in (("Occupancy exercises", rubric.occupancy), ("Report", rubric.report)):
        if section is not None:
            lines.append(f"| {label} | {_pts(section.max_points)} |")
    lines.append(f"| **total** | **{_pts(rubric.max_points)}** |")
    how = {Bonus.EXTRA: "on top of the total", Bonus.SEPARATE: "a separate total, not added to the score"}
    for st in rubric.stages:
        if st.bonus is not Bonus.NONE:
            lines.append(f"| {st.number} {st.title}: bonus, {how[st.bonus]} | {_pts(st.max_points)} |")
    if rubric.report is not None:
        for t in rubric.report.transitions:
            if t.bonus is not Bonus.NONE:
                points = sum(i.points for i in rubric.report.items() if i.id.startswith(f"{t.id}."))
                lines.append(f"| Report, {t.label}: bonus, {how[t.bonus]} | {_pts(points)} |")
    return "\n".join(lines)


BLOCKS = {"stages": block_stages, "grading": block_grading, "occupancy-params": block_occupancy_params,
          "occupancy": block_occupancy,
          "report": block_report, "totals": block_totals}


def render_blocks(rubric: Rubric) -> dict[str, str]:
    return {name: fn(rubric) for name, fn in BLOCKS.items()}


def apply(text: str, blocks: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """(new text, names of blocks that changed, names of blocks missing from the text)."""
    changed: list[str] = []
    seen: set[str] = set()

    def sub(m: re.Match) -> str:
        name = m.group(2)
        seen.add(name)
        if name not in blocks:
            return m.group(0)
        body = blocks[name].rstrip("\n") + "\n"
        if m.group(3) != body:
            changed.append(name)
        return m.group(1) + body + m.group(4)

    new = BLOCK_RE.sub(sub, text)
    return new, changed, [n for n in blocks if n not in seen]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader.instructor.handout", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks of the handout")
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated block is stale")
    ap.add_argument("--rubric", help=f"rubric file (default: {RUBRIC})")
    ap.add_argument("--handout", help=f"the handout (default: {HANDOUT})")
    args = ap.parse_args(argv)
    path = Path(args.handout or HANDOUT)
    rubric_path = args.rubric or str(RUBRIC)
    # The command that rewrites the blocks, with the files this one was given, so the hint can be pasted.
    write = " ".join(["python -m grader handout --write"]
                     + [f"--{k} {shlex.quote(v)}" for k, v in (("rubric", args.rubric), ("handout", args.handout)) if v])
    try:  # an invalid rubric or an unreadable handout is the caller's input: exit 2, as the grader's CLI does
        rubric = load_rubric(rubric_path)
        text = path.read_text(encoding="utf-8")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})", file=sys.stderr)
        return 2
    new, changed, missing = apply(text, render_blocks(rubric))
    if missing:
        print(f"{path}: no block for {', '.join(missing)}; add <!-- BEGIN GENERATED: name --> / "
              "<!-- END GENERATED: name --> markers", file=sys.stderr)
        return 1
    if args.check:
        if changed:
            print(f"{path}: stale generated blocks: {', '.join(changed)}; run {write}", file=sys.stderr)
            return 1
        print(f"{path}: every generated block matches {rubric_path}")
        return 0
    if changed:
        path.write_text(new, encoding="utf-8")
        print(f"{path}: rewrote {', '.join(changed)}")
    else:
        print(f"{path}: already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
