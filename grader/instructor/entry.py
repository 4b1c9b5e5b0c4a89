"""The calibration entry a calibration proposes for its GPU (read by grader/rubric/calibration.py).

From the calibration's rows (grader/instructor/calibrate.py) and stage-limit proposals
(grader/instructor/stage_limits.py), :func:`write_entry` writes ``<out>/calibration/<gpu-slug>.yaml``: each
stage's measured ``reference_s``, and for every item graded by a number against a plain numeric level, the
level it proposes with the margin it measured there:

- the rubric's own level when the calibration's rules hold at it (verdict OK), or when the measurements leave
  no level at which they would (:func:`propose` says why in the entry's comment);
- else, for a technique item, the level halfway (geometrically) between the worst reference value with its
  margin (and the worst textbook value) and the best predecessor value, so that the reference passes with
  MIN_MARGIN, the textbook kernel passes and both predecessors fail;
- for a speed item whose reference margin is short, the level that gives the reference MIN_MARGIN.

An instructor reads it (and calibration.md beside it) and commits it as ``calibration/<gpu-slug>.yaml``
beside rubric.yaml; the grader then uses it on that GPU.
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from grader.instructor.calibrate import MIN_MARGIN, Row, margin
from grader.instructor.stage_limits import LimitProposal
from grader.rubric.calibration import FOLDER, slug
from grader.rubric.kinds import REGISTRY
from grader.rubric.types import Rubric


def _round(x: float) -> float:
    """Three significant digits: a level is a criterion, not a measurement."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.3g}")


def _values(*lists: list[float | None]) -> list[float]:
    return [v for vs in lists for v in vs if v is not None]


def propose(row: Row, level: float) -> tuple[float, str]:
    """(the level to grade ``row``'s item at on this GPU, why when it is not the measured one)."""
    if row.verdict == "OK":
        return level, ""
    refs = _values(row.reference)
    if not refs or row.op not in (">=", ">", "<=", "<") or len(refs) < len(row.reference_passed):
        return level, f"kept the rubric's: {row.verdict} ({row.why}) and no level can be measured"
    up = row.op in (">=", ">")
    preds = _values(row.predecessor, row.textbook_predecessor.values) if row.role == "technique" else []
    books = _values(row.textbook.values) if row.role == "technique" else []
    # The side the reference (and the textbook kernel) must stay on, with the reference's margin.
    if up:
        bound = min([min(refs) / (1 + MIN_MARGIN)] + books)
        other = max(preds) if preds else None
        fits = other is None or other < bound
    else:
        bound = max([max(refs) / (1 - MIN_MARGIN)] + books)
        other = min(preds) if preds else None
        fits = other is None or other > bound
    if not fits or bound <= 0:
        return level, (f"kept the rubric's: {row.verdict} ({row.why}); no level passes the reference with "
                       f"{100 * MIN_MARGIN:.0f}% margin and fails its predecessors")
    if other is None or other <= 0:
        new = bound if (level > bound if up else level < bound) else level
    else:
        new = math.sqrt(bound * other)
    new = _round(new)
    if new == level:  # the margins hold at the rubric's level: what failed is not the level (an unfair curve, ...)
        return level, f"kept the rubric's: {row.verdict} ({row.why}), which no other level mends"
    return new, ""


def entry_dict(rubric: Rubric, gpu: str, rows: list[Row], limits: list[LimitProposal], meta: dict) -> dict:
    stages: dict[str, dict] = {}
    for p in limits:
        if p.proposed is not None:
            stages.setdefault(p.stage, {})["reference_s"] = p.proposed
    for row in rows:
        st = rubric.stage(row.stage)
        it = next(i for i in st.items if i.id == row.item)
        kind = REGISTRY.get(it.kind)
        key = kind.level_param if kind is not None else None
        level = it.params.get(key) if key else None
        if key is None or not isinstance(level, (int, float)) or isinstance(level, bool):
            continue  # an expression, or no level: graded as the rubric says on every GPU
        if not _values(row.reference):
            continue  # the reference measured nothing here: nothing to say for this GPU
        new, why = propose(row, float(level))
        at = margin(row.op, row.reference, new)
        spec: dict = {key: new, "rubric": level, "margin": None if at is None else round(at, 3),
                      "verdict": row.verdict}
        if why:
            spec["note"] = why
        stages.setdefault(row.stage, {}).setdefault("thresholds", {})[row.item] = spec
    return {"gpu": gpu, "calibrated": str(meta.get("date", "")), "repeats": int(meta.get("repeats") or 0),
            "rubric_sha256": rubric.sha256, "stages": stages}


HEADER = """\
# The calibration entry of {gpu}, proposed by `python -m grader calibrate` ({date}, {repeats} repeats).
# Read calibration.md beside it; to use it, commit it as calibration/{slug}.yaml beside rubric.yaml.
# The grader then grades on this GPU with these stage reference times and levels (a level applies only while
# rubric.yaml still says `rubric:`); `margin` is the reference's worst repeat at the level, `verdict` the
# calibration's at the rubric's level (grader/rubric/calibration.py).
"""


def write_entry(rubric: Rubric, gpu: str, rows: list[Row], limits: list[LimitProposal], meta: dict,
                out_dir: Path) -> Path | None:
    """Write the entry into ``out_dir/calibration/<slug>.yaml`` and return its path; None (nothing written) when
    the reference measured nothing on this GPU."""
    data = entry_dict(rubric, gpu, rows, limits, meta)
    if not data["stages"]:
        return None
    path = Path(out_dir) / FOLDER / f"{slug(gpu)}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = HEADER.format(gpu=gpu, date=data["calibrated"], repeats=data["repeats"], slug=slug(gpu))
    path.write_text(text + yaml.safe_dump(data, sort_keys=False, width=120), encoding="utf-8")
    return path
