"""Per-GPU calibration entries: ``calibration/<gpu-slug>.yaml`` beside rubric.yaml, typed and validated.

``python -m grader calibrate`` measures, on the GPU it runs on, how far each threshold sits from what the
reference, the textbook kernels and their one-stage-shifted predecessors measure, and how long each stage's
reference benchmark takes. It writes what it proposes for that GPU as one entry (grader/instructor/entry.py);
an instructor reads it and commits it beside rubric.yaml. An entry holds:

- ``gpu``: the device name as the probe reports it (``NVIDIA H100 80GB HBM3``); the file is
  ``calibration/<slug of gpu>.yaml`` (:func:`slug`);
- ``stages.<id>.reference_s``: the stage's measured reference benchmark, from which its time limit derives
  (grader/rubric/limits.py), in place of the rubric's;
- ``stages.<id>.thresholds.<item>``: the level this GPU grades the item at (under the item kind's level key,
  ``min`` or ``value``), with ``rubric``: the rubric's level when it was calibrated, and the measured
  ``margin`` and ``verdict`` for people. A level applies only while the rubric still says ``rubric``: an
  instructor who edits the threshold in rubric.yaml is not overridden by an older measurement.

:func:`for_device` gives the rubric a grading on a device uses, with the one line that names the entry, or
that says there is none (the rubric's defaults then grade, and speed items are an estimate).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from grader.evidence.protocol import ProbeResult
from grader.rubric.errors import RubricError
from grader.rubric.kinds import REGISTRY
from grader.rubric.reader import Reader
from grader.rubric.where import SAFE_LOADER

if TYPE_CHECKING:
    from grader.rubric.types import Rubric

FOLDER = "calibration"  # beside rubric.yaml
NUMBER = (int, float)


def slug(gpu: str) -> str:
    """The entry's file stem for a device name: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "unnamed-gpu"


@dataclass(frozen=True)
class Threshold:
    stage: str
    item: str
    key: str  # the item's level key (its kind's level_param): "min", "value"
    value: float  # the level on this GPU
    rubric: float  # the rubric's level when it was calibrated
    margin: float | None = None  # the reference's worst-repeat margin at ``value``, for people
    verdict: str = ""  # the calibration's verdict at the rubric's level, for people


@dataclass(frozen=True)
class Entry:
    gpu: str
    source: str  # the file it was read from ("calibration/nvidia-h100-80gb-hbm3.yaml")
    calibrated: str = ""  # when (UTC), as calibrate wrote it
    repeats: int = 0
    rubric_sha256: str = ""  # the rubric it was calibrated against
    reference_s: dict[str, float] = field(default_factory=dict)  # stage id -> measured reference benchmark (s)
    thresholds: tuple[Threshold, ...] = ()
    text: str = ""  # the file's text, kept in each grading it graded (rescore applies it again)


def parse_entry(raw: Any, source: str, rubric: Rubric) -> Entry:
    """Validate one entry against ``rubric`` (every stage and item it names exists, levels are numbers under
    the item kind's level key). Raises RubricError naming the key."""
    r = Reader(raw, source)
    gpu = r.get("gpu", str)
    calibrated = str(r.get("calibrated", (str, _dt_type()), ""))
    repeats = r.get("repeats", int, 0)
    sha = r.get("rubric_sha256", str, "")
    r.get("record", str, "")  # where the measurement is written up (docs/measurements/), for people
    stages = r.get("stages", dict, {})
    r.done()
    ids = {st.id: st for st in rubric.stages}
    reference_s: dict[str, float] = {}
    thresholds: list[Threshold] = []
    for sid, body in stages.items():
        where = f"{source}.stages.{sid}"
        if sid not in ids:
            raise RubricError(where, "is not a stage of the rubric", "one of " + ", ".join(ids))
        sr = Reader(body, where)
        ref = sr.get("reference_s", NUMBER, None)
        if ref is not None:
            if ref <= 0:
                raise RubricError(sr.path("reference_s"), f"is {ref}", "a positive number of seconds")
            reference_s[sid] = float(ref)
        items = sr.get("thresholds", dict, {})
        sr.done()
        known = {it.id: it for it in ids[sid].items}
        for iid, spec in items.items():
            iwhere = f"{where}.thresholds.{iid}"
            it = known.get(iid)
            if it is None:
                raise RubricError(iwhere, f"is not an item of stage {sid}", "one of " + ", ".join(known))
            kind = REGISTRY.get(it.kind)
            key = kind.level_param if kind is not None else None
            if key is None:
                raise RubricError(iwhere, f"item kind {it.kind!r} has no level to calibrate",
                                  "an item graded by a number against a level")
            tr = Reader(spec, iwhere)
            value = tr.get(key, NUMBER)
            was = tr.get("rubric", NUMBER)
            margin = tr.get("margin", NUMBER + (type(None),), None)
            verdict = tr.get("verdict", str, "")
            tr.get("note", str, "")  # why calibrate kept the rubric's level, for people
            tr.done()
            thresholds.append(Threshold(sid, iid, key, float(value), float(was),
                                        None if margin is None else float(margin), verdict))
    return Entry(gpu, source, calibrated, repeats, sha, reference_s, tuple(thresholds))


def _dt_type() -> type:
    import datetime

    return datetime.datetime  # YAML reads an unquoted timestamp as one


def entry_from_text(text: str, source: str, rubric: Rubric) -> Entry:
    try:
        raw = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise RubricError(f"{source}{line}", "is not valid YAML", "valid YAML") from None
    return dataclasses.replace(parse_entry(raw, source, rubric), text=text)


def load_entries(folder: Path, rubric: Rubric) -> tuple[Entry, ...]:
    """Every ``*.yaml`` entry in ``folder`` (none when it does not exist), validated; a file whose name is not
    its GPU's slug is refused, so the file a grader picks is the one an instructor sees."""
    folder = Path(folder)
    if not folder.is_dir():
        return ()
    out = []
    for path in sorted(folder.glob("*.yaml")):
        source = f"{FOLDER}/{path.name}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RubricError(source, f"cannot be read ({exc})", "a UTF-8 YAML file") from None
        entry = entry_from_text(text, source, rubric)
        if path.stem != slug(entry.gpu):
            raise RubricError(source, f"holds the entry of {entry.gpu!r}", f"the file {slug(entry.gpu)}.yaml")
        out.append(entry)
    return tuple(out)


def apply(rubric: Rubric, entry: Entry) -> tuple[Rubric, list[str]]:
    """``rubric`` with ``entry``'s stage reference times and levels; the levels left at the rubric's because
    rubric.yaml changed them since (one line each)."""
    stale: list[str] = []
    stages = []
    for st in rubric.stages:
        limits = st.limits
        if st.id in entry.reference_s:
            limits = dataclasses.replace(limits, reference_s=entry.reference_s[st.id])
        items = []
        for it in st.items:
            t = next((t for t in entry.thresholds if (t.stage, t.item) == (st.id, it.id)), None)
            now = it.params.get(t.key) if t is not None else None
            if t is not None and isinstance(now, NUMBER) and float(now) == t.rubric:
                it = dataclasses.replace(it, params=it.params.with_level(t.key, t.value))
            elif t is not None:
                stale.append(f"{st.number}.{it.id}: rubric.yaml's {t.key} is {now!r}, calibrated against {t.rubric:g}")
            items.append(it)
        stages.append(dataclasses.replace(st, limits=limits, items=tuple(items)))
    return dataclasses.replace(rubric, stages=tuple(stages)), stale


def reapply(rubric: Rubric, text: str) -> Rubric:
    """``rubric`` with the entry a grading was graded with (grading.json's ``calibration``) applied again, so a
    re-score compares like with like; unchanged when that entry no longer fits the rubric (a stage or item
    it names is gone): the re-score then says which measurements changed."""
    try:
        return apply(rubric, entry_from_text(text, "grading.json: calibration", rubric))[0]
    except RubricError:
        return rubric


def for_device(rubric: Rubric, device: ProbeResult | None) -> tuple[Rubric, Entry | None, str]:
    """The rubric to grade with on ``device`` (the probe's report), the entry used, and the one line that says
    which ("" without a GPU: nothing is timed)."""
    name = device.name if device is not None and device.ok else ""
    if not name:
        return rubric, None, ""
    entry = next((e for e in rubric.calibrations if slug(e.gpu) == slug(name)), None)
    if entry is None:
        on = " and ".join(e.gpu for e in rubric.calibrations)
        said = f"calibrated on {on}" if on else "not calibrated on any GPU listed in calibration/"
        return rubric, None, (f"thresholds: the rubric's defaults ({said}; no entry for {name}): "
                              "read the speed items as an estimate")
    applied, stale = apply(rubric, entry)
    line = f"thresholds and stage time limits: calibrated for this GPU ({entry.source}, {entry.calibrated})"
    if stale:
        line += "; left at the rubric's (changed since): " + "; ".join(stale)
    return applied, entry, line
