"""Grade the written report against what the grader measured for this submission.

``grade_report_submission(root, rubric, outcomes, gradings)`` is called by grader/pipeline.py when
rubric.yaml has a ``report:`` section. Values are compared with a grading on the GPU the report's
``GPU:`` line names (grader/writeup/gpu.py): this one, or a stored one (:class:`Gradings`); without
either, only what holds on any GPU is checked and the rest is left to a TA. It never raises: a missing or malformed report fails its items with
a message that says what was expected, what was found and what to look at next; values the
grader could not measure (no GPU, no ncu, no timing) make their items ``not_evaluated``.
"""
from __future__ import annotations

import difflib
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.compile.locate import locate
from grader.evidence.protocol import ProbeResult
from grader.evidence.rubric import Item
from grader.grading import Grading, StageOutcome
from grader.model import Cause, Gap, ItemResult, Measured, Status
from grader.rubric.expr import ExprError, MissingMetric, evaluate_expr, fmt
from grader.rubric.report import STAGE, ReportConfig, Transition, metric_unit
from grader.rubric.types import Rubric
from grader.untrusted.quote import quote_code
from grader.writeup.gpu import ReportGpu, card_words, names_device, report_gpu
from grader.writeup.hints import known_metrics, some, spelling, value_hint
from grader.writeup.parse import (
    Citation,
    Paragraph,
    Quantity,
    heading_transition,
    paragraph,
    sections,
    strip_comments,
    tables,
)
from grader.writeup.tables import TableCheck, check_table, check_times, describe, find_tables

MAX_BYTES = 64 * 1024  # a report is a few pages (the reference one is 7 KB); parsed in well under a second


def _result(spec: Item, status: Status, fraction: float, message: str, *, needs_gpu: bool = False,
            values: Measured | None = None) -> ItemResult:
    score = round(spec.points * fraction, 4) if status in (Status.PASSED, Status.FAILED) else 0.0
    return ItemResult(stage=STAGE, item=spec.id, title=spec.title, status=status, score=score,
                      max_score=spec.points, message=message, visibility=spec.visibility, number=spec.number,
                      values=values or Measured(), needs_gpu=needs_gpu)


def _status_unless_hand_graded(spec: Item, status: Status) -> Status:
    """``status``, except for the hand-graded reasoning item, which is course staff's whatever happened."""
    return Status.MANUAL if spec.kind == "reasoning" else status


@dataclass(frozen=True)
class Gradings:
    """What a report's values may be compared with: this grading's device (its probe's report; None or
    not ok: no GPU) and other gradings of the student's kernels (``grade --citations-from``: the
    student's self-checks the course's GPU service stored), each on the device its grading.json names."""

    device: ProbeResult | None = None
    stored: Sequence[Grading] = ()


@dataclass(frozen=True)
class Evidence:
    """The measurements a report's values are compared with. ``outcomes`` None: no grading on the GPU the
    report names, so only what holds on any GPU is checked and the rest is left to a TA (``why``)."""

    outcomes: Mapping[str, StageOutcome] | None
    source: str = ""  # "" for this grading; else which stored grading, said in the messages
    why: str = ""  # when ``outcomes`` is None: the GPUs involved, in words
    note: str = ""  # said under the values items (a report that names no GPU)


def _device_name(device: ProbeResult | None) -> str | None:
    return device.name or None if device is not None and device.ok else None


def choose_evidence(gpu: ReportGpu | None, outcomes: dict, gradings: Gradings | None) -> Evidence:
    """Which grading the report's values are compared with: this one when it ran on the GPU the report
    names (or the report names none, or the caller knows no device); else a stored grading on that
    GPU; else none (see :class:`Evidence`). Without a GPU here and none stored, this grading's gaps
    say why nothing is compared."""
    if gradings is None:
        return Evidence(outcomes)
    here = _device_name(gradings.device)
    if gpu is None:
        return Evidence(outcomes, note=(f"Your report names no GPU (a `GPU:` line near its top): its values were "
                                        f"compared with this grading's {here}." if here else ""))
    if here and names_device(gpu, here):
        return Evidence(outcomes)
    for g in gradings.stored:
        there = _device_name(g.env.device)
        if there and names_device(gpu, there):
            return Evidence(g.outcomes, source=f"your stored grading on {there}")
    if here is None:
        return Evidence(outcomes)
    # A name that shares a word with this GPU's ("H100 SXM" for "NVIDIA H100 80GB HBM3") may mean this GPU.
    hint = (f" (if your numbers come from this GPU, name it as the grading does: `GPU: {here}`)"
            if gpu.words & card_words(here) else "")
    return Evidence(None, why=(f"your report's numbers come from {quote_code(gpu.name, 60)} (its `GPU:` line, line "
                               f"{gpu.line}), this grading ran on {here}{hint}, and the grader has no grading of "
                               f"your kernels on {quote_code(gpu.name, 60)}"))


def find_report(root: Path, rel: str) -> tuple[Path | None, str]:
    """The report in the submission (also found directly under it or one folder down), or why not."""
    found = locate(root, rel, nearby=True, limit=MAX_BYTES)
    return found.path, found.message


def read_report(root: Path, rel: str) -> tuple[str | None, str]:
    path, problem = find_report(root, rel)
    if path is None:
        return None, problem
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        return None, f"{rel} cannot be read ({exc.strerror or exc})"
    except UnicodeDecodeError as exc:
        return None, f"{rel} is not UTF-8 text (byte {exc.start})"
    if not text.strip():
        return None, f"{rel} is empty"
    return text, ""


def stage_names(rubric: Rubric, cfg: ReportConfig) -> dict[str, tuple[str, ...]]:
    """Every name a heading, a table row or a citation prefix may use for each stage."""
    out = {}
    for st in rubric.stages:
        out[st.id] = tuple(dict.fromkeys((st.id, st.kernel.lower(), st.title.lower(), *cfg.stage_names.get(st.id, ()))))
    return out




def _measured(cit: Citation, cfg: ReportConfig, o) -> tuple[float | None, str]:
    """(value the grader measured for this citation on outcome ``o``, '') or (None, why it cannot be had)."""
    if cit.derived:
        d = cfg.derived[cit.name]
        try:
            return evaluate_expr(d.expr, o.ncu, o.profile_n), ""
        except MissingMetric as exc:
            return None, f"the grader did not collect {exc.args[0]}, which `{cit.name}` needs"
        except (ExprError, ZeroDivisionError) as exc:
            return None, f"`{cit.name}` cannot be computed for this kernel ({exc.__class__.__name__})"
    value = o.ncu.get(cit.name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), ""
    close = difflib.get_close_matches(cit.name, [k for k, v in o.ncu.items() if isinstance(v, (int, float))], 2, 0.8)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return None, f"the grader does not collect `{cit.name}`{hint}"


@dataclass(frozen=True)
class _Cited:
    """What a citation cites, read in its metric's unit (the one reading of a cited value)."""

    value: float | None  # None: it cannot be read, and ``unreadable`` says why
    unit: str = ""
    resolution: float = 0.0  # the cited number's last digit
    unreadable: str = ""


def _cited(cit: Citation, cfg: ReportConfig) -> _Cited:
    q = cit.quantity
    if cit.problem or q is None:
        return _Cited(None, unreadable=f"line {cit.line}: {cit.problem}")
    unit = cfg.derived[cit.name].unit if cit.derived else metric_unit(cit.name)
    value, why = _unit_value(cit, q, unit)
    return _Cited(value, unit, q.resolution, "" if value is not None else f"line {cit.line}: {quote_code(cit.text)}: {why}")


def _unit_value(cit: Citation, q: Quantity, unit: str) -> tuple[float | None, str]:
    """The cited value ``q`` in the metric's own unit, or (None, why the units do not fit)."""
    if q.unit == "time" and unit != "ns":
        return None, f"`{cit.name}` is not a time, but the value has a time unit"
    if q.unit == "byte" and unit != "byte":
        return None, f"`{cit.name}` is not a number of bytes, but the value has a byte unit"
    return q.value, ""






def _check_any_gpu(cits: list[Citation], cfg: ReportConfig, why: str) -> tuple[Status, float, str, Measured, bool]:
    """A values item without a grading on the report's GPU: what holds on any GPU is checked (the value
    reads as a number in the metric's unit, and lies in the metric's range: no count, ratio, time or size
    below 0, no percentage above 100); a value that fails that fails the item, and the rest is left to a
    TA, not evaluated (never failed: an honest number of another GPU is no mistake)."""
    unreadable: list[str] = []
    implausible: list[str] = []
    plausible = 0
    for cit in cits:
        c = _cited(cit, cfg)
        if c.value is None:
            unreadable.append(c.unreadable)
        elif c.value < 0:
            implausible.append(f"line {cit.line}: {quote_code(cit.text)}: below 0, which no GPU measures for `{cit.name}`")
        elif c.unit == "%" and c.value > 100 + max(cfg.abs_tol, c.resolution):
            implausible.append(f"line {cit.line}: {quote_code(cit.text)}: above 100%, which no GPU measures")
        else:
            plausible += 1
    values = Measured(matched=0, mismatched=len(implausible), unreadable=len(unreadable), unchecked=plausible)
    if implausible or unreadable:
        parts = (["Values no GPU measures:", *some(implausible)] if implausible else []) + (
            ["Values the grader cannot read:", *some(unreadable)] if unreadable else [])
        return Status.FAILED, 0.0, "\n".join(parts) + "\nNext: copy each value from grading.json of a grader run " \
            "on your current kernels and write it as `name = number`.", values, False
    if not plausible:
        return Status.FAILED, 0.0, "nothing to compare: the section cites no metric as `name = value`", values, False
    return Status.NOT_EVALUATED, 0.0, (
        f"not evaluated, left for a TA: {why}. The {plausible} cited value(s) read as numbers in their metrics' "
        "units and ranges (what holds on any GPU); a TA compares them with your measurements on that GPU. To have "
        "them checked automatically, grade your current kernels on that GPU with the course's GPU service "
        "(python -m grader submit) before you hand in, or cite the numbers of the GPU that grades you."), values, False


def _check_values(cits: list[Citation], t: Transition, cfg: ReportConfig,
                  outcomes: Mapping[str, StageOutcome], source: str = "") -> tuple[Status, float, str, Measured, bool]:
    """(status, fraction, message, values, needs_gpu) of a transition's values item; the causes of the
    stages' missing metrics decide between failed and not evaluated (``needs_gpu``: for want of a GPU).
    ``source``: which stored grading ``outcomes`` come from ("" for this one), said in the message."""
    ok: list[str] = []
    bad: list[str] = []
    unreadable: list[str] = []
    unchecked: list[str] = []
    skipped: dict[Gap, list[str]] = {}
    for cit in cits:
        q = cit.quantity
        if cit.problem or q is None:  # unreadable (_cited says why) before anything is looked up
            unreadable.append(_cited(cit, cfg).unreadable)
            continue
        sid = cit.stage or t.after
        o = outcomes.get(sid)
        if o is None or o.ncu is None:
            gap = Gap(Cause.GRADER, "not evaluated: the stage was not graded in this run") if o is None else (
                o.ncu_gap or Gap(Cause.GRADER, "not evaluated: no Nsight Compute metrics for this stage"))
            skipped.setdefault(gap, []).append(sid)
            continue
        measured, why = _measured(cit, cfg, o)
        if measured is None:
            unchecked.append(f"line {cit.line}: {quote_code(cit.text)}: {why}")
            continue
        c = _cited(cit, cfg)
        cited, unit = c.value, c.unit
        if cited is None:
            unreadable.append(c.unreadable)
            continue
        tol = max(cfg.rel_tol * abs(measured), cfg.abs_tol, q.resolution)
        suffix = "%" if unit == "%" else (" " + unit if unit else "")
        shown = f"{fmt(measured)}{suffix}"
        if abs(cited - measured) <= tol:
            ok.append(f"`{cit.name}` ({sid}) = {shown}")
            continue
        others = {}
        for osid, oo in outcomes.items():
            if osid != sid and oo.ncu:
                v, _ = _measured(cit, cfg, oo)
                if v is not None:
                    others[osid] = v
        bad.append(f"line {cit.line}: {quote_code(cit.text)} does not match your {sid} kernel: you cite {fmt(cited)}{suffix}, "
                   "the grader "
                   f"measured {shown} (Nsight Compute, one launch at N={o.profile_n}{', ' + source if source else ''}; allowed difference "
                   f"{100 * cfg.rel_tol:g}%).{value_hint(cited, measured, q.resolution, others)}")
    values = Measured(matched=len(ok), mismatched=len(bad), unreadable=len(unreadable), unchecked=len(unchecked))
    tail = ("\nNot checked:\n" + "\n".join(some(unchecked))) if unchecked else ""
    if bad or unreadable:
        parts = (["Values your own kernels do not produce:", *some(bad)] if bad else []) + (
            ["Values the grader cannot read:", *some(unreadable)] if unreadable else [])
        return Status.FAILED, 0.0, ("\n".join(parts) + tail + "\nNext: copy each value from grading.json "
                             "(`stages.<id>.ncu`) of a grader run on your current kernels, at the grader's profile "
                             "size, and write it as `name = number`."), values, False
    no_metrics = "; ".join(f"your {', '.join(dict.fromkeys(sids))} kernel{'s' if len(set(sids)) > 1 else ''} ({gap.message})"
                           for gap, sids in skipped.items())
    if ok:
        tail += f"\nNot compared, no metrics for {no_metrics}" if skipped else ""
        where = f" ({source})" if source else ""
        return (Status.PASSED, 1.0, f"every checked value matches your kernels{where}: " + "; ".join(some(ok)) + tail,
                values, False)
    if skipped:
        if all(g.cause is Cause.STUDENT for g in skipped):  # the student's stage gave nothing to profile
            return Status.FAILED, 0.0, (f"no credit: the grader has no Nsight Compute metrics for {no_metrics}; make the "
                                 "stage compile and pass its correctness check first" + tail), values, False
        no_gpu = any(g.cause is Cause.NO_GPU for g in skipped)
        return Status.NOT_EVALUATED, 0.0, (f"not evaluated: the grader has no Nsight Compute metrics for {no_metrics}, so "
                                    f"{len(cits)} cited value(s) were not compared" + tail), values, no_gpu
    if unchecked:
        return Status.FAILED, 0.0, ("none of the cited metrics is one the grader measures, so none could be checked:" + tail
                             + "\nCite at least one metric from grading.json (`stages.<id>.ncu`) or a derived name "
                             "listed in assignment/README.md."), values, False
    return Status.FAILED, 0.0, (f"nothing to compare: the section on {t.label} cites no metric as `name = value` (its "
                         "cites item says how)"), values, False


def _check_cites(par: Paragraph | None, t: Transition, cfg: ReportConfig,
                 heading_hint: str, known_metrics: frozenset[str] = frozenset()) -> tuple[Status, float, str]:
    if par is None:
        return Status.FAILED, 0.0, (f"no section for {t.label}: expected a heading such as `## {t.label}` "
                             f"(found headings: {heading_hint or 'none'})")
    usable = [c for c in par.citations if not c.problem and c.quantity is not None]
    problems = some([f"line {c.line}: {c.problem}" for c in par.citations if c.problem])
    msgs = []
    if par.words == 0 and not par.citations:
        return Status.FAILED, 0.0, (f"the section {quote_code(par.heading)} is empty: write a paragraph of at least {cfg.min_words} "
                             "words (what limited the kernel before, what changed, what the metric shows) citing at "
                             "least one metric as `name = value`, e.g. `sectors_per_request = 2.5`")
    if par.words < cfg.min_words:
        msgs.append(f"the paragraph has {par.words} words of prose; at least {cfg.min_words} are expected "
                    "(what limited the kernel before, what changed, what the metric shows)")
    if not usable:
        msgs.append("it cites no Nsight Compute metric with a value; write e.g. "
                    "`l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio = 2.5` or "
                    "`shared_loads_per_warp_ffma = 0.31` (a metric name or derived name, `=`, a number)")
    # Every span the grader cannot use is named, whether or not the paragraph has usable citations
    # (a misspelt name next to valid ones would otherwise vanish without a word).
    notes = ([f"Not read, these citations cannot be used ({len(problems)}):", *problems] if problems else [])
    if par.ignored:
        notes.append("Not citations, these `x = y` spans name no Nsight Compute metric and no derived name: "
                     + ", ".join(quote_code(x) for x in par.ignored[:5])
                     + (f" and {len(par.ignored) - 5} more" if len(par.ignored) > 5 else "")
                     + " (a metric as the grader collects it, `unit__counter.rollup`, or a derived name from "
                     "assignment/README.md, 'The report')")
    notes += spelling(usable, known_metrics)
    if msgs:
        return Status.FAILED, 0.0, "\n".join(msgs + notes)
    cited = ", ".join(dict.fromkeys(c.name for c in usable))
    return Status.PASSED, 1.0, f"{par.words} words; cites {cited}" + ("\n" + "\n".join(notes) if notes else "")




def grade(cfg: ReportConfig, text: str | None, problem: str, rubric: Rubric, outcomes: dict,
          gradings: Gradings | None = None) -> list[ItemResult]:
    """Every report item for one report text (None: the report is missing, ``problem`` says why); a
    bonus transition's items count as its stage's (ReportConfig.bonus_of). ``gradings``: this grading's
    device and stored gradings, for a report measured on another GPU (None: compare with ``outcomes``)."""
    return _counted(cfg, _grade(cfg, text, problem, rubric, outcomes, gradings))


def _counted(cfg: ReportConfig, results: list[ItemResult]) -> list[ItemResult]:
    """``results``, each marked with how its points count (a bonus transition's: its stage's)."""
    for r in results:
        r.bonus = cfg.bonus_of(r.item)
    return results


def _grade(cfg: ReportConfig, text: str | None, problem: str, rubric: Rubric, outcomes: dict,
           gradings: Gradings | None) -> list[ItemResult]:
    items = {i.id: i for i in cfg.items()}
    if text is None:
        msg = (f"{problem}. Expected: {cfg.file} at the top of the submission, next to gemm/. Next: start from "
               "starter/report.md; assignment/README.md, section 'The report', says what goes in it")
        return [_result(spec, _status_unless_hand_graded(spec, Status.FAILED), 0.0, msg) for spec in items.values()]
    text = strip_comments(text)
    ev = choose_evidence(report_gpu(text), outcomes, gradings)
    names = stage_names(rubric, cfg)
    secs = sections(text)
    found: dict[str, Paragraph] = {}
    for sec in secs:
        pair = heading_transition(sec.heading, names)
        tid = next((t.id for t in cfg.transitions if (t.before, t.after) == pair), None)
        if tid and tid not in found:
            found[tid] = paragraph(sec, cfg.derived, names)
    heading_hint = "; ".join(quote_code(s.heading, 60) for s in secs[:8])
    known = known_metrics(rubric, cfg)
    out: list[ItemResult] = []
    for t in cfg.transitions:
        par = found.get(t.id)
        status, frac, msg = _check_cites(par, t, cfg, heading_hint, known)
        out.append(_result(items[f"{t.id}.cites"], status, frac, msg))
        vspec = items[f"{t.id}.values"]
        if par is None:
            out.append(_result(vspec, Status.FAILED, 0.0, f"no section for {t.label}, so no cited value to check"))
        else:
            if ev.outcomes is None:
                status, frac, msg, vals, needs_gpu = _check_any_gpu(par.citations, cfg, ev.why)
            else:
                status, frac, msg, vals, needs_gpu = _check_values(par.citations, t, cfg, ev.outcomes, ev.source)
            compared = (vals.matched or 0) + (vals.mismatched or 0) > 0  # the note concerns compared values only
            out.append(_result(vspec, status, frac, msg + (f"\n{ev.note}" if ev.note and compared else ""),
                               needs_gpu=needs_gpu, values=vals))
    checks = check_tables(cfg, text, rubric)
    for spec, chk in zip(cfg.tables, checks):
        need = len(chk.required)
        good = 0 if chk.problems else chk.good_rows()
        problems = describe(chk)
        if not problems:
            out.append(_result(items[f"table.{spec.id}"], Status.PASSED, 1.0, f"all {need} rows complete and consistent "
                               f"(implied peak {chk.peak_gflops:,.0f} GFLOP/s)"))
        else:
            head = "" if chk.problems else f"{good} of {need} rows complete and consistent.\n"
            out.append(_result(items[f"table.{spec.id}"], Status.FAILED, good / need, head + problems))
    if ev.outcomes is None:  # times depend on the GPU as much as the metrics do
        status, frac, msg, needs_gpu = (Status.NOT_EVALUATED, 0.0, f"not evaluated, left for a TA: {ev.why}; a TA "
                                        "compares the table's times with your measurements on that GPU (the "
                                        "tables' arithmetic is checked by the table items)", False)
    else:
        status, frac, msg, needs_gpu = check_times(checks, ev.outcomes, cfg.time_rel)
        msg += f" ({ev.source})" if ev.source and status is not Status.NOT_EVALUATED else ""
    out.append(_result(items["table.times"], status, frac, msg, needs_gpu=needs_gpu))
    out.append(_reasoning(items["reasoning"], cfg, found))
    return out


def check_tables(cfg: ReportConfig, text: str, rubric: Rubric) -> list[TableCheck]:
    """Each results table of the report (``text``, comments stripped) checked for completeness and
    arithmetic, in ``cfg.tables`` order: what grading scores and ``python -m grader check`` shows."""
    names = stage_names(rubric, cfg)
    chosen = find_tables(tables(text), cfg.tables, names)
    bench_n = {st.id: st.bench.n for st in rubric.stages}
    checks: list[TableCheck] = []
    fp32_peak = None
    for spec in cfg.tables:
        chk = check_table(spec, chosen[spec.id], names, bench_n, cfg.arithmetic_rel,
                          fp32_peak if spec.last_column == "fp32_multiple" else None)
        if spec.peak == "fp32" and chk.peak_gflops:
            fp32_peak = chk.peak_gflops
        checks.append(chk)
    return checks


def _reasoning(spec: Item, cfg: ReportConfig, found: dict[str, Paragraph]) -> ItemResult:
    """The hand-graded reasoning item: always ``manual`` (course staff's question on Gradescope, never
    the autograder's verdict); the message says which paragraphs course staff will read."""
    written = [t.label for t in cfg.transitions if t.id in found and found[t.id].words >= cfg.min_words]
    short = [t.label for t in cfg.transitions if t.id in found and found[t.id].words < cfg.min_words]
    lines = [("course staff will read your paragraphs on " + ", ".join(written)) if written
             else "no transition paragraph is written yet, so course staff have no reasoning to read"]
    if short:
        lines.append(f"under {cfg.min_words} words, so not counted as written: " + ", ".join(short))
    return _result(spec, Status.MANUAL, 0.0, "\n".join(lines))


def grade_report_submission(root: Path, rubric: Rubric, outcomes: dict,
                            gradings: Gradings | None = None) -> list[ItemResult]:
    """Every report item for the submission at ``root``; never raises. ``gradings``: see :func:`grade`."""
    cfg = rubric.report  # validated when the rubric was loaded
    if cfg is None:  # the pipeline calls this only when there is a section; said, not raised
        return [ItemResult(stage=STAGE, item="config", title="Written report", status=Status.NOT_EVALUATED, score=0.0,
                           max_score=0.0, message="not evaluated: the rubric has no report section",
                           visibility="hidden")]
    try:
        text, problem = read_report(Path(root), cfg.file)
        return grade(cfg, text, problem, rubric, outcomes, gradings)
    except Exception:  # the grader's own bug: every item says so, nothing crashes
        tb = traceback.format_exc()
        return _counted(cfg, [_result(spec, _status_unless_hand_graded(spec, Status.NOT_EVALUATED), 0.0,
                                      "not evaluated: the grader failed while checking the report (not a judgement "
                                      "of your work; course staff have the details)", values=Measured(traceback=tb[-4000:]))
                              for spec in cfg.items()])
