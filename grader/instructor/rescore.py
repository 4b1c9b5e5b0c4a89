"""Re-score stored gradings under an edited rubric, in seconds and without a GPU.

    python -m grader rescore GRADING_OR_BATCH --rubric NEW.yaml [--out DIR] [--was OLD.yaml]

A grading's measurements are in its grading.json (grader/grading.py reads them back into the typed records):
each stage's compile, ptxas and SASS records, verdict, timing and Nsight Compute metrics. A re-score puts the
new rubric's stage records into those outcomes and calls the pipeline's own scoring (grader/score/stages.py:
``score``, as ``pipeline.score_stages`` does), so the items are what a full grading computes from the same
measurements; the outputs are written by grader/outputs/write.py, and a batch's grades.csv by
grader/outputs/grades_csv.py.

An edit that changes what is measured cannot be re-scored: every item it reaches is "not evaluated" with
"needs a real re-grade: <why>", and the others are re-scored:

- a setting every stage is measured under (correctness sizes, time-outs, output limit, sanitizer, the
  architecture without a device): every item;
- how the stages are run and timed (a stage's ``bench`` or ``limits``, ``settings.stage_limits``): what those runs
  feed, i.e. every item of the stage (each stage, for the setting) but those judged from the build alone (compiles,
  ptxas's spills, the SASS: ``Kind.from_build``), and the speedup items measured against it; not the report;
- a stage's other measured fields (file, kernel, inputs, baseline, peak, launch, tolerance, operands, required
  architecture), or a stage that is new: that stage's items, and the speedup items measured against it;
- ``settings.profile``: every ncu item and the report section; a new or edited ncu item whose metrics the
  stored profile lacks: that item, and the stage's speed items (they may be gated on its technique items);
- the occupancy and report sections are graded from the submission's files, which grading.json does not keep:
  their items are carried over, with the new points, titles and visibilities (the fraction earned is kept),
  when nothing else of the section changed; otherwise they are refused, naming the keys.

What the measurements were taken under is the rubric the grading recorded (grading.json's ``rubric``, with its
``rubric_sha256``); for an older grading that kept no text, ``--was`` files and the repository's rubric.yaml
are matched by sha256. A grading whose rubric is not known is refused whole.

A re-scored grading keeps its grader version (its measurements are that grader's) and takes the new rubric's
sha256 only when nothing was refused, so a batch run later re-grades exactly the ones that need it.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from grader.evidence.rubric import Item, Stage
from grader.files import read_json
from grader.grading import Grading, GradingFormatError, StageOutcome, load_grading
from grader.instructor.stored import GRADING_FILE, SUBMISSIONS, Collection, Layout, find_gradings
from grader.model import Bonus, ItemResult, Status
from grader.rubric.calibration import reapply
from grader.rubric.errors import ConfigError
from grader.rubric.expr import METRIC_RE
from grader.rubric.kinds import REGISTRY, Kind
from grader.rubric.peaks import device_peaks
from grader.rubric.types import Rubric

REGRADE = "needs a real re-grade"
RESCORE_FILE = "rescore.json"
# Stage fields that only score what was measured; every other field of a Stage decides what is measured.
SCORE_ONLY_STAGE_FIELDS = frozenset({"id", "number", "title", "summary", "plausible_max", "bonus", "items"})
# The rubric keys behind the measured Stage fields, for the messages.
STAGE_KEYS = {"rtol": "tolerance.rtol", "requires_arch": "requires_arch"}
# Settings every stage is measured under: Rubric attribute -> rubric key.
MEASURED_SETTINGS = {"arch_without_device": "settings.arch_without_device",
                     "correctness_sizes": "settings.correctness_sizes", "timeouts": "settings.timeouts",
                     "output_limit_bytes": "settings.output_limit_bytes", "sanitizer": "settings.sanitizer",
                     "stage_limits": "settings.stage_limits"}
# What only decides how a stage's kernel is run and timed, not how it is built: its change reaches the items the
# runs feed, and leaves those judged from the build (Kind.from_build) and the report as graded.
TIMING_STAGE_KEYS = frozenset({"bench", "limits"})
TIMING_SETTINGS = frozenset({"stage_limits"})
# What grader/outputs/write.py writes into a grading's folder; the folder's other files are copied as they are.
WRITTEN = frozenset({"results.json", "summary.md", GRADING_FILE, "profile.md", "profile.html", "ladder.png",
                     "roofline.png", RESCORE_FILE})
MAX_COPIED_BYTES = 16 * 1024 * 1024  # a side file of a grading (log.txt is capped at 200 KB by the batch)


@dataclass(frozen=True)
class Refusal:
    number: str  # "4b.speed", "R.3"
    why: str


@dataclass(frozen=True)
class Compared:
    """One grading's score three ways, over the items no re-score refused: as graded (under the rubric it
    kept), under the base rubric (the repository's rubric.yaml: what is not your edit) and under the new one."""

    graded: float
    base: float
    new: float

    @property
    def edit(self) -> float:
        """Changed by your edit."""
        return round(self.new - self.base, 4)

    @property
    def drift(self) -> float:
        """Differs from the rubric the grading used."""
        return round(self.base - self.graded, 4)


@dataclass
class Rescored:
    """One grading re-scored: the new record and the items refused; ``problem`` when it could not be read."""

    name: str
    grading: Grading | None = None
    before: float | None = None  # the stored score
    refused: list[Refusal] = field(default_factory=list)
    problem: str = ""
    compared: Compared | None = None  # over the items neither re-score refused (``left_out``)
    left_out: list[str] = field(default_factory=list)
    automatic: float = 0.0  # the automatic points

    def to_json(self) -> dict[str, object]:
        g = self.grading
        c = self.compared
        return {"before": self.before, "score": g.score if g else None, "max_score": g.max_score if g else None,
                "automatic_points": self.automatic,
                "refused": [dataclasses.asdict(r) for r in self.refused], "problem": self.problem,
                "compared": None if c is None else {
                    "as_graded": c.graded, "base": c.base, "new": c.new, "changed_by_the_edit": c.edit,
                    "differs_from_its_rubric": c.drift, "left_out": self.left_out}}


# ---------------------------------------------------------------------------------------------
# The rubric a grading was measured under
# ---------------------------------------------------------------------------------------------
def measured_under(g: Grading, known: list[Rubric]) -> Rubric | None:
    """The rubric that graded ``g``: the text it kept, else one of ``known`` with its sha256; None if unknown."""
    from grader.rubric.load import rubric_from_text

    if g.rubric_text:
        try:
            kept = rubric_from_text(g.rubric_text, "grading.json: rubric")
        except ConfigError:
            kept = None
        if kept is not None and (not g.rubric_sha256 or kept.sha256 == g.rubric_sha256):
            return kept
    return next((r for r in known if g.rubric_sha256 and r.sha256 == g.rubric_sha256), None)


# ---------------------------------------------------------------------------------------------
# One grading
# ---------------------------------------------------------------------------------------------
def _refusal_item(st: Stage, it: Item, why: str) -> ItemResult:
    return ItemResult(stage=st.id, item=it.id, title=it.title, status=Status.NOT_EVALUATED, score=0.0,
                      max_score=it.points, message=f"{REGRADE}: {why}", visibility=it.visibility,
                      number=f"{st.number}.{it.id}", bonus=st.bonus)


def _stage_changes(measured: Stage, new: Stage) -> list[str]:
    """The rubric keys of ``new`` that change what the stage measured (its stored record is ``measured``)."""
    return [STAGE_KEYS.get(f.name, f.name) for f in fields(Stage)
            if f.name not in SCORE_ONLY_STAGE_FIELDS and getattr(measured, f.name) != getattr(new, f.name)]


def _metrics(item: Item, kind: Kind) -> list[str]:
    return list(dict.fromkeys(m for key in kind.expression_params
                              for m in METRIC_RE.findall(str(item.params.get(key) or ""))))


def _ncu_problem(it: Item, kind: Kind, measured: dict[str, Item], o: StageOutcome) -> str:
    """Why this item cannot be graded from the stored profile ("" when it can)."""
    before = measured.get(it.id)
    if before is not None and before.kind == it.kind and before.params == it.params:
        return ""  # the same criterion: what the grading collected for it is there
    if o.ncu is None:
        return ""  # not profiled: the stored gap decides, as it would in a grading
    missing = [m for m in _metrics(it, kind) if m not in o.ncu]
    if missing:
        return f"Nsight Compute metric {', '.join(missing)} was not collected for {o.stage.kernel}"
    return ""


def _stage_items(g: Grading, new: Rubric, profile_changed: bool,
                 why_runs: str = "") -> tuple[dict[str, StageOutcome], dict, set[str], set[str]]:
    """(the outcomes under the new stages, {(stage, item): why refused}, the stages whose measurements changed,
    those of them where only how the kernel is run and timed changed). ``why_runs``: a setting every stage's runs
    are made under changed (TIMING_SETTINGS), and how it is said."""
    outcomes: dict[str, StageOutcome] = {}
    refused: dict[tuple[str, str], str] = {}
    changed: set[str] = set()
    for st in new.stages:
        o = g.outcomes.get(st.id)
        if o is None:
            continue  # a stage this grading did not grade (--stages), or a new one: :func:`rescore_grading` decides
        keys = _stage_changes(o.stage, st)
        runs = why_runs or (f"stage {st.id}'s {', '.join(keys)} changed (how its kernel is run and timed)"
                            if keys and set(keys) <= TIMING_STAGE_KEYS else "")
        if keys or runs:
            changed.add(st.id)
        measured = {i.id: i for i in o.stage.items}
        for it in st.items:
            # Every registered kind is graded from what grading.json keeps (ptxas, SASS, the verdict, the timing),
            # and a kind with Nsight Compute expressions from the stored profile's metrics.
            kind = REGISTRY.get(it.kind)
            if keys and not set(keys) <= TIMING_STAGE_KEYS:
                refused[st.id, it.id] = f"stage {st.id}'s {', '.join(keys)} changed (what is measured)"
            elif runs and not (kind is not None and kind.from_build):
                refused[st.id, it.id] = runs
            elif kind is None:
                refused[st.id, it.id] = f"rescore does not know what item kind {it.kind!r} measures"
            elif kind.needs_profile and profile_changed:
                refused[st.id, it.id] = "settings.profile changed (what Nsight Compute measured)"
            elif kind.needs_profile and (why := _ncu_problem(it, kind, measured, o)):
                refused[st.id, it.id] = why
        outcomes[st.id] = replace(o, stage=st)
    for st in new.stages:
        if st.id in changed:
            continue
        gate = next((f"{st.number}.{i.id}" for i in st.items if (st.id, i.id) in refused), None)
        for it in st.items:
            kind = REGISTRY.get(it.kind)
            if kind is None:
                continue  # refused above
            other = it.params.get(kind.other_stage_param) if kind.other_stage_param else None
            if other is not None and other in changed:
                refused[st.id, it.id] = f"it is measured against stage {other}, whose measurements changed"
            elif kind.speed and gate and (st.id, it.id) not in refused:
                refused[st.id, it.id] = f"it is scored with the stage's other items, and {gate} needs one"
    timing_only = {sid for sid in changed if why_runs or set(_stage_changes(g.outcomes[sid].stage,
                                                                            new.stage(sid))) <= TIMING_STAGE_KEYS}
    return outcomes, refused, changed, timing_only


def _shape(x: object) -> object:
    """A comparable form of a section's config without what only scores (points, visibility, item titles)."""
    if isinstance(x, Item):
        return ("item", x.id, x.kind, _shape(x.params))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple((f.name, _shape(getattr(x, f.name))) for f in fields(x)
                                           if f.name not in ("points", "visibility"))
    if isinstance(x, dict):
        return tuple(sorted((str(k), _shape(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_shape(v) for v in x)
    return x


def _section_specs(rubric: Rubric, section: str) -> list[tuple[Item, Bonus]]:
    cfg = getattr(rubric, section)
    if cfg is None:
        return []
    if section == "occupancy":
        return [(it, Bonus.NONE) for it in cfg.items.values()]
    return [(it, cfg.bonus_of(it.id)) for it in cfg.items()]


def _carried(r: ItemResult, it: Item, bonus: Bonus) -> ItemResult | str:
    """A section item's stored verdict under the new points, title and visibility; or why it cannot be."""
    score = 0.0
    if r.status in (Status.PASSED, Status.FAILED):
        if r.max_score > 0:
            fraction = r.score / r.max_score
        elif r.status is Status.PASSED or it.points == 0:
            fraction = 1.0 if r.status is Status.PASSED else 0.0
        else:
            return "its partial credit is not known: the grading gave it 0 points"
        score = round(it.points * fraction, 4)
    return replace(r, title=it.title, score=score, max_score=it.points, visibility=it.visibility,
                   number=it.number or r.number, bonus=bonus)


def _section_items(g: Grading, new: Rubric, old: Rubric, section: str, why_all: str) -> tuple[list[ItemResult],
                                                                                              list[Refusal]]:
    specs = _section_specs(new, section)
    stored = {r.item: r for r in g.items if r.stage == section}
    if not specs or (not stored and getattr(old, section) is not None):
        return [], []  # no such section now, or the grading did not grade it (--stages)
    why = why_all
    if not why and getattr(old, section) is None:
        why = f"the {section} section is new"
    if not why:
        keys = [f.name for f in fields(getattr(new, section))
                if _shape(getattr(getattr(old, section), f.name)) != _shape(getattr(getattr(new, section), f.name))]
        if keys:
            why = (f"{', '.join(f'{section}.{k}' for k in keys)} changed, and the section is graded from the "
                   "submission's files, which grading.json does not keep")
    if not why and set(stored) - {it.id for it, _ in _section_specs(old, section)}:
        why = f"the stored {section} section is not its items (the grader failed on it)"
    out, refused = [], []
    by_id = {it.id: (it, bonus) for it, bonus in specs}
    # In the order the section's grading gave them (the grading's own), then the new ones.
    for item_id in [i for i in stored if i in by_id] + [i for i in by_id if i not in stored]:
        it, bonus = by_id[item_id]
        r = stored.get(it.id)
        got: ItemResult | str = why or (_carried(r, it, bonus) if r is not None else f"{section} item {it.id} is new")
        if isinstance(got, str):
            got = ItemResult(stage=section, item=it.id, title=it.title, status=Status.NOT_EVALUATED, score=0.0,
                             max_score=it.points, message=f"{REGRADE}: {got}", visibility=it.visibility,
                             number=it.number, bonus=bonus)
            refused.append(Refusal(it.number or f"{section}.{it.id}", got.message[len(REGRADE) + 2:]))
        out.append(got)
    return out, refused


def under(g: Grading, rubric: Rubric, graded_with: Callable[[], Rubric | None]) -> tuple[Grading, list[Refusal]]:
    """``g`` under ``rubric``: ``g`` itself, as graded, when ``rubric`` is the one that graded it (the same
    sha256) or cannot be told from it (built from a dict, no sha256); else re-scored (:func:`rescore_grading`).
    ``graded_with``: the rubric ``g`` was measured under, asked for only when it re-scores."""
    if not rubric.sha256 or rubric.sha256 == g.rubric_sha256:
        return g, []
    return rescore_grading(g, rubric, graded_with())


def rescore_grading(g: Grading, new: Rubric, old: Rubric | None) -> tuple[Grading, list[Refusal]]:
    """``g`` re-scored under ``new``; ``old`` is the rubric it was measured under (None: not known)."""
    from grader.score.stages import score

    if g.calibration:  # graded with its GPU's calibration entry: the new rubric is read with it too
        new = reapply(new, g.calibration)
    why_all = ""
    if old is None:
        why_all = (f"the rubric that graded it (sha256 {g.rubric_sha256[:12] or 'not recorded'}) is not known; "
                   "give it with --was")
    why_runs = ""
    if old is not None:
        keys = [key for attr, key in MEASURED_SETTINGS.items()
                if attr not in TIMING_SETTINGS and getattr(old, attr) != getattr(new, attr)]
        runs = [key for attr, key in MEASURED_SETTINGS.items()
                if attr in TIMING_SETTINGS and getattr(old, attr) != getattr(new, attr)]
        if keys:
            why_all = f"{', '.join(keys + runs)} changed (what every stage is measured under)"
        elif runs:
            why_runs = f"{', '.join(runs)} changed (how every stage's kernel is run and timed)"
    profile_changed = old is not None and old.profile != new.profile
    outcomes, refused, changed, timing_only = _stage_items(g, new, profile_changed, why_runs)
    measured_changed = changed - timing_only  # the report reads what is measured, not how long the runs were
    env = replace(g.env, peaks=device_peaks(new.peak_overrides, new.peak_per_sm_clock, g.env.device))
    scored = {(r.stage, r.item): r for r in score(outcomes, env.peaks)}
    items: list[ItemResult] = []
    refusals: list[Refusal] = []
    for st in new.stages:
        if st.id not in outcomes and old is not None and any(s.id == st.id for s in old.stages):
            continue  # graded by another run (--stages)
        for it in st.items:
            why = why_all or refused.get((st.id, it.id), "" if st.id in outcomes else f"stage {st.id} is new")
            items.append(_refusal_item(st, it, why) if why else scored[st.id, it.id])
            if why:
                refusals.append(Refusal(f"{st.number}.{it.id}", why))
    titles = [s.id for s in new.stages if s.id in g.outcomes and g.outcomes[s.id].stage.title != s.title]
    report_why = why_all or ("settings.profile changed (the report's values are compared with it)" if profile_changed
                             else f"stage {', '.join(sorted(measured_changed))}'s measurements changed"
                             if measured_changed
                             else f"stage {', '.join(titles)}'s title changed (a report heading may name a stage "
                             "by its title)" if titles else "")
    for section, why in (("occupancy", why_all), ("report", report_why)):
        got, refused_here = _section_items(g, new, old or new, section, why)
        items += got
        refusals += refused_here
    clean = not refusals
    return replace(g, env=env, outcomes=outcomes, items=items,
                   rubric_sha256=new.sha256 if clean else g.rubric_sha256,
                   rubric_text=new.text if clean else g.rubric_text), refusals


# ---------------------------------------------------------------------------------------------
# A folder of them
# ---------------------------------------------------------------------------------------------
def load_one(folder: Path) -> Grading:
    return load_grading(folder / GRADING_FILE)


def _copy_side_files(src: Path, dst: Path) -> None:
    """The grading's other files (intake.json, batch_status.json, log.txt, the occupancy plot), unchanged."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name in WRITTEN or f.is_symlink() or not f.is_file() or f.stat().st_size > MAX_COPIED_BYTES:
            continue
        shutil.copyfile(f, dst / f.name)


def comparable_score(g: Grading, left_out: set[str]) -> float:
    """The score of ``g`` without the items in ``left_out`` (those that need a real re-grade)."""
    return round(sum(i.counted_score for i in g.items if i.number not in left_out), 4)


def rescore_folder(name: str, src: Path, dst: Path, new: Rubric, known: list[Rubric],
                   base: Rubric | None = None) -> Rescored:
    """Re-score the grading in ``src`` into ``dst`` (every output file, as a grading writes them). ``base``: the
    rubric ``new`` is an edit of, re-scored too (not written) to tell the edit from what differs from the grading's
    own rubric."""
    from grader.outputs.profile_page import plot_inputs
    from grader.outputs.summary import automatic_max
    from grader.outputs.write import write_outputs

    try:
        g = load_one(src)
    except GradingFormatError as exc:
        return Rescored(name, problem=str(exc))
    before = g.score
    old = measured_under(g, known)
    rescored, refused = rescore_grading(g, new, old)
    under_base, base_refused = under(g, base, lambda: old) if base is not None else (g, [])
    left = {r.number for r in refused} | {r.number for r in base_refused}
    _copy_side_files(src, dst)
    # The plots show measurements; the grading's own are reused unless the new rubric relabels them.
    write_outputs(rescored, dst, drawn=src if plot_inputs(rescored) == plot_inputs(g) else None)
    return Rescored(name, rescored, before, refused,
                    compared=Compared(comparable_score(g, left), comparable_score(under_base, left),
                                      comparable_score(rescored, left)),
                    left_out=sorted(left), automatic=automatic_max(rescored.items))


def rescore_in_place(folder: Path, new: Rubric) -> list[Refusal] | None:
    """Re-score the grading in ``folder`` under ``new`` where it is, when nothing needs a real re-grade (a batch's
    score-only rubric change): [] when re-scored, the refusals when not (nothing written), None when the grading
    cannot be read or its rubric is not known."""
    from grader.outputs.profile_page import plot_inputs
    from grader.outputs.write import write_outputs

    try:
        g = load_one(folder)
    except GradingFormatError:
        return None
    old = measured_under(g, [])
    if old is None:
        return None
    rescored, refused = rescore_grading(g, new, old)
    if refused:
        return refused
    write_outputs(rescored, folder, drawn=folder if plot_inputs(rescored) == plot_inputs(g) else None)
    return []


@dataclass
class RescoreRun:
    out: Path
    layout: str
    gradings: list[Rescored] = field(default_factory=list)
    csv: Path | None = None
    notes: list[str] = field(default_factory=list)


def _old_rows(root: Path) -> dict[str, dict[str, str]]:
    import csv

    path = root / "grades.csv"
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {r.get("folder") or "": r for r in csv.DictReader(f)}


def _submissions(col: Collection, subs_dir: Path, notes: list[str]) -> list:
    """The batch table's submissions: names from the export's metadata (batch.json names the export), else from
    the batch's grades.csv."""
    from grader.untrusted.export import METADATA_NAME, BatchError, Submission, read_metadata
    meta: dict[str, dict] = {}
    batch = read_json(col.root / "batch.json") if col.layout == Layout.BATCH else None
    export = Path(str(batch["export"])) if isinstance(batch, dict) and batch.get("export") else None
    if export is not None and (export / METADATA_NAME).is_file():
        try:
            meta = read_metadata(export / METADATA_NAME)
        except (BatchError, ValueError, OSError) as exc:
            notes.append(f"{export / METADATA_NAME} could not be read ({exc}); names from grades.csv")
    old_rows = _old_rows(col.root)
    if not meta:
        for folder, row in old_rows.items():
            people = [dict(zip((":name", ":email", ":sid"), p)) for p in
                      zip(*(str(row.get(k) or "").split("; ") for k in ("names", "emails", "sids")))]
            meta[folder] = {":submitters": people, ":created_at": row.get("created_at") or None}
    names = sorted(set(col.folders) | set(col.ungraded) | set(meta) | {n for n in old_rows if n})
    return [Submission(n, subs_dir / n if (subs_dir / n).is_dir() else None, meta.get(n)) for n in names]


def _batch_stages(col: Collection) -> list[str] | None:
    batch = read_json(col.root / "batch.json")
    by = batch.get("graded_by") if isinstance(batch, dict) else None
    stages = by.get("stages") if isinstance(by, dict) else None
    return [str(s) for s in stages] if isinstance(stages, list) else None


def rescore(source: Path, new: Rubric, out: Path, known: list[Rubric], base: Rubric | None = None) -> RescoreRun:
    """Re-score every grading under ``source`` (grader/instructor/stored.py: find_gradings) into ``out``.
    ConfigError when ``source`` holds no grading."""
    from grader.outputs.class_summary import write_class_summary
    from grader.outputs.grades_csv import automatic_points, csv_rows, write_csv
    col = find_gradings(source)
    run = RescoreRun(Path(out), col.layout)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    subs_out = out if col.layout == Layout.GRADING else (out / SUBMISSIONS if col.layout == Layout.BATCH else out)
    for name, folder in col.folders.items():
        dst = out if col.layout == Layout.GRADING else subs_out / name
        run.gradings.append(rescore_folder(name, folder, dst, new, known, base))
    if col.layout != Layout.GRADING:
        for name, folder in col.ungraded.items():  # a failed grading: its row keeps its status
            _copy_side_files(folder, subs_out / name)
            if (folder / "results.json").is_file():
                shutil.copyfile(folder / "results.json", subs_out / name / "results.json")
        subs = _submissions(col, subs_out, run.notes)
        max_total = automatic_points(new, _batch_stages(col))
        columns, rows = csv_rows(subs, subs_out, max_total)
        run.csv = out / "grades.csv"
        write_csv(run.csv, columns, rows)
        write_class_summary(out, columns, rows, max_total, graded_by=f"{new.source}, re-scored")
    (out / RESCORE_FILE).write_text(json.dumps({
        "source": str(Path(source).resolve()), "rubric": new.source, "rubric_sha256": new.sha256,
        "layout": col.layout, "notes": run.notes, "gradings": {r.name: r.to_json() for r in run.gradings},
    }, indent=1) + "\n", encoding="utf-8")
    return run
