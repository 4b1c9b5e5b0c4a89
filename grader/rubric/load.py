"""rubric.yaml -> a typed, validated :class:`~grader.rubric.types.Rubric`.

Every section (settings, peaks, stages, occupancy, report) is read with the one
:class:`~grader.rubric.reader.Reader`, once, here. A bad rubric raises :class:`RubricError`
naming the key path and what was expected; the CLI prints it and exits with code 2.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import yaml

from grader import DEFAULT_RUBRIC
from grader.evidence.compile import Launch
from grader.evidence.rubric import Bench, Stage, StageLimits
from grader.model import Bonus
from grader.rubric.errors import RubricError
from grader.rubric.kinds import REGISTRY, stage_item
from grader.rubric.occupancy import OccupancyConfig, load_occupancy_config
from grader.rubric.peaks import PEAKS, PeakOverride
from grader.rubric.reader import Reader
from grader.rubric.report import load_report_config
from grader.rubric.types import (
    BASELINES,
    BONUS_MODES,
    INPUTS,
    OPERANDS,
    Profile,
    Rubric,
    RunLimits,
    Sanitizer,
    Timeouts,
)
from grader.rubric.where import SAFE_LOADER, located


def _bench(r: Reader, base: Bench) -> Bench:
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(Bench):
        if f.name == "flush_l2":
            kw[f.name] = r.get(f.name, bool, base.flush_l2)
        elif f.name == "warmup":  # none at all is allowed: a slow kernel's first launch is as warm as its next
            kw[f.name] = r.integer(f.name, base.warmup, lo=0)
        else:
            typ = (int, float) if f.name in ("max_seconds", "warmup_review_multiple") else int
            kw[f.name] = r.positive(f.name, typ, getattr(base, f.name))
    r.done()
    if kw["min_reps"] > kw["reps"]:
        raise RubricError(r.path("min_reps"), f"is {kw['min_reps']}", f"at most reps = {kw['reps']}")
    return Bench(**kw)


def _stage(r: Reader, bench: Bench, sizes: tuple[int, ...], plausible: float, bonus_mode: Bonus) -> Stage:
    sid = r.text("id")
    number = str(r.get("number", (str, int)))
    title = r.get("title", str)
    file = r.get("file", str)
    if not file.strip() or file.startswith("/") or ".." in Path(file).parts:
        raise RubricError(r.path("file"), f"is {file!r}", "a relative path inside the submission")
    kernel = r.get("kernel", str)
    if not kernel.isidentifier():
        raise RubricError(r.path("kernel"), f"is {kernel!r}", "a C identifier")
    inputs, baseline, peak = r.choice("inputs", INPUTS), r.choice("baseline", tuple(BASELINES)), r.choice("peak", PEAKS)
    if BASELINES[baseline].inputs != inputs:
        raise RubricError(r.path("baseline"), f"is {baseline} (it multiplies {BASELINES[baseline].inputs})",
                          f"a baseline for {inputs} inputs: " + ", ".join(k for k, b in BASELINES.items()
                                                                          if b.inputs == inputs))
    operands = r.choice("operands", OPERANDS, "pointers")
    if operands == "tensor_maps" and inputs != "bf16":
        raise RubricError(r.path("operands"), f"is tensor_maps with {inputs} inputs", "bf16 inputs (K-major BF16)")
    requires_arch = r.get("requires_arch", str, "")
    if requires_arch and not requires_arch.startswith("sm_"):
        raise RubricError(r.path("requires_arch"), f"is {requires_arch!r}", "an architecture such as sm_90a")
    bonus = bonus_mode if r.get("bonus", bool, False) else Bonus.NONE
    lr = r.sub("launch")
    launch = Launch(lr.pair("block"), lr.pair("tile"), lr.get("smem", int, 0))
    lr.done()
    tol = r.sub("tolerance")
    rtol = float(tol.positive("rtol"))
    tol.done()
    stage_bench = _bench(r.sub("bench", {}), bench)
    lim = r.sub("limits", {})
    limits = StageLimits(reference_s=_optional_positive(lim, "reference_s"), run_s=_optional_positive(lim, "run_s"))
    lim.done()
    summary = r.get("summary", str, "")
    items = tuple(stage_item(it, f"{r.where}.items[{k}]") for k, it in enumerate(r.get("items", list)))
    r.done()
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise RubricError(r.path("items"), "has duplicate item ids", "each item id once per stage")
    for n in sizes + (stage_bench.n,):
        if n % launch.tile[0] or n % launch.tile[1]:
            raise RubricError(f"{r.where}.launch.tile", f"{list(launch.tile)} does not divide N = {n}",
                              "tile sizes that divide every correctness and benchmark size")
    return Stage(sid, number, title, file, kernel, inputs, baseline, peak, launch, rtol,
                 stage_bench, items, summary, plausible, limits, operands, requires_arch, bonus)


def _optional_positive(r: Reader, key: str) -> float | None:
    """A positive number at ``key``, or None when the key is absent."""
    value = r.get(key, (int, float), None)
    if value is not None and value <= 0:
        raise RubricError(r.path(key), f"is {value!r}", "a positive number of seconds")
    return None if value is None else float(value)


def _factor(r: Reader, key: str, default: float) -> float:
    """A factor at ``key`` that bounds a ratio either way: a number above 1."""
    value = float(r.positive(key, default=default))
    if value <= 1:
        raise RubricError(r.path(key), f"is {value!r}", "a factor above 1 (a ratio within it either way passes)")
    return value


def _settings(s: Reader) -> dict[str, Any]:
    """The ``settings:`` mapping, as keyword arguments of Rubric (and the stages' defaults)."""
    arch = s.get("arch_without_device", str, "sm_90a")
    if not arch.startswith("sm_"):
        raise RubricError(s.path("arch_without_device"), f"is {arch!r}", "e.g. sm_90a")
    sizes = s.list_of("correctness_sizes", int, lo=1)
    if len(sizes) < 2:
        raise RubricError(s.path("correctness_sizes"), f"has {len(sizes)} size",
                          "at least two sizes (one size can hide indexing bugs)")
    tr = s.sub("timeouts", {})
    times: dict[str, Any] = {f.name: _optional_positive(tr, f.name) if f.default is None
                             else float(tr.positive(f.name, default=f.default)) for f in dataclasses.fields(Timeouts)}
    timeouts = Timeouts(**times)
    tr.done()
    lr = s.sub("stage_limits", {})
    stage_limits = RunLimits(**{f.name: float(lr.positive(f.name, default=f.default))
                                for f in dataclasses.fields(RunLimits)})
    lr.done()
    out_limit = s.positive("output_limit_bytes", int, 20000)
    max_device = s.positive("max_static_device_bytes", int, Rubric.max_static_device_bytes)
    bench = _bench(s.sub("bench", {}), Bench())
    plausible = float(s.positive("plausible_max_fraction_of_baseline", default=1.2))
    pr = s.sub("profile", {})
    profile = Profile(enabled=pr.get("enabled", bool, True), n=pr.positive("n", int, 2048),
                      clock_control=pr.choice("clock_control", ("none", "base"), "none"),
                      timeout_s=float(pr.positive("timeout_s", default=Profile.timeout_s)),
                      duration_agreement=_factor(pr, "duration_agreement", Profile.duration_agreement),
                      rate_agreement=_factor(pr, "rate_agreement", Profile.rate_agreement))
    pr.done()
    sr = s.sub("sanitizer", {})
    sanitizer = Sanitizer(racecheck=sr.get("racecheck", bool, True),
                          memcheck_on_failure=sr.get("memcheck_on_failure", bool, True),
                          n=sr.positive("n", int, 256), timeout_s=float(sr.positive("timeout_s", default=Sanitizer.timeout_s)),
                          racecheck_blocks=sr.pair_or_none("racecheck_blocks", Sanitizer.racecheck_blocks))
    sr.done()
    bonus = Bonus(s.choice("bonus", BONUS_MODES, Bonus.EXTRA.value))
    s.done()
    return dict(arch_without_device=arch, correctness_sizes=sizes, timeouts=timeouts, output_limit_bytes=out_limit,
                profile=profile, sanitizer=sanitizer, stage_limits=stage_limits, bench=bench, plausible=plausible,
                bonus=bonus, max_static_device_bytes=max_device)


def _peaks(p: Reader) -> tuple[tuple[PeakOverride, ...], dict[str, dict[str, float]]]:
    overrides = []
    for k, o in enumerate(p.get("overrides", list, [])):
        orr = Reader(o, f"{p.where}.overrides[{k}]")
        overrides.append(PeakOverride(orr.text("match"), float(orr.positive("fp32")),
                                      float(orr.positive("fp16_tensor"))))
        orr.done()
    per_sm: dict[str, dict[str, float]] = {}
    cc_map = p.sub("per_sm_per_clock", {})
    for cc in cc_map.keys():
        rr = cc_map.sub(cc)
        per_sm[str(cc)] = {k: float(rr.positive(k)) for k in PEAKS}
        rr.done()
    p.done()
    return tuple(overrides), per_sm


def _stages(r: Reader, bench: Bench, sizes: tuple[int, ...], plausible: float,
            bonus_mode: Bonus) -> tuple[Stage, ...]:
    raw_stages = r.get("stages", list)
    if not raw_stages:
        raise RubricError(r.path("stages"), "is empty", "at least one stage")
    stages = tuple(_stage(Reader(st, f"{r.where}.stages[{k}]"), bench, sizes, plausible, bonus_mode)
                   for k, st in enumerate(raw_stages))
    ids = [st.id for st in stages]
    for k, st in enumerate(stages):
        if ids.count(st.id) > 1:
            raise RubricError(f"{r.where}.stages[{k}].id", f"{st.id!r} appears twice", "unique stage ids")
        for j, it in enumerate(st.items):
            key = REGISTRY.of(it).other_stage_param  # the param naming a stage it is measured against
            other = it.params.get(key) if key else None
            if other is not None and other not in ids:
                raise RubricError(f"{r.where}.stages[{k}].items[{j}].{key}", f"is {other!r}",
                                  "the id of another stage: " + ", ".join(ids))
    return stages


def parse_rubric(raw: Any, source: str = "rubric.yaml") -> Rubric:
    """Validate a parsed YAML document and build the Rubric."""
    r = Reader(raw, source)
    version = r.get("version", int)
    if version != 1:
        raise RubricError(r.path("version"), f"is {version}", "1")
    title = r.get("title", str)
    settings = _settings(r.sub("settings"))
    bench, plausible, bonus = settings.pop("bench"), settings.pop("plausible"), settings.pop("bonus")
    overrides, per_sm = _peaks(r.sub("peaks"))
    stages = _stages(r, bench, settings["correctness_sizes"], plausible, bonus)
    ids = tuple(st.id for st in stages)
    # The other sections are validated now too, so a bad one stops here with its key path.
    occupancy = load_occupancy_config(r.get("occupancy", dict), r.path("occupancy")) if "occupancy" in r.raw else None
    bonus_ids = {st.id: st.bonus for st in stages if st.bonus is not Bonus.NONE}
    report = (load_report_config(r.get("report", dict), r.path("report"), ids, bonus_ids) if "report" in r.raw
              else None)
    r.done()
    profile = settings["profile"]
    for st in stages:
        profiled = any(REGISTRY.of(i).needs_profile for i in st.items)
        if profiled and (profile.n % st.launch.tile[0] or profile.n % st.launch.tile[1]):
            raise RubricError(f"{source}.settings.profile.n", f"{profile.n} is not a multiple of stage "
                              f"{st.id}'s default tile {list(st.launch.tile)}", "a size every tile divides")
    return Rubric(title=title, peak_overrides=overrides, peak_per_sm_clock=per_sm, stages=stages, source=source,
                  occupancy=occupancy, report=report, **settings)


def load_rubric(path: str | Path) -> Rubric:
    """Read and validate a rubric file. Raises RubricError with the line for YAML syntax errors."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricError(str(path), f"cannot be read ({exc.strerror or exc})", "a readable YAML file") from None
    except UnicodeDecodeError:
        raise RubricError(str(path), "is not UTF-8 text", "a UTF-8 YAML file") from None
    from grader.rubric.calibration import FOLDER, load_entries

    rubric = rubric_from_text(text, path.name)
    return dataclasses.replace(rubric, calibrations=load_entries(path.parent / FOLDER, rubric))


def rubric_from_text(text: str, source: str = "rubric.yaml") -> Rubric:
    """A rubric file's text (a file's, or the one a grading.json keeps) -> the validated Rubric."""
    try:
        raw = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        # The parser notices an unclosed {...} or [...] lines after it (the next key, the next item): the
        # line an editor needs is where the construct began, its context_mark.
        context, began = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and began is not None and mark is not None and began.line < mark.line:
            what = context.removeprefix("while parsing ").removeprefix("a ").removeprefix("an ")
            raise RubricError(f"{source} line {began.line + 1}",
                              f"is not valid YAML: the {what} that starts here: {problem} (noticed at line "
                              f"{mark.line + 1})", "valid YAML") from None
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise RubricError(f"{source}{line}", f"is not valid YAML: {problem}", "valid YAML") from None
    try:
        rubric = parse_rubric(raw, source)
    except RubricError as exc:  # told by line, stage id and item id rather than by list index
        raise located(exc, text, source) from None
    return dataclasses.replace(rubric, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), text=text)


def load_default_occupancy() -> OccupancyConfig:
    """The shipped rubric.yaml's occupancy section (tests and tools/ start from it)."""
    cfg = load_rubric(DEFAULT_RUBRIC).occupancy
    if cfg is None:
        raise RubricError("rubric.yaml", "has no occupancy section", "the occupancy exercises' section")
    return cfg
