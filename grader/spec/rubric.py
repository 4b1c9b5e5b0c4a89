"""rubric.yaml -> typed, validated objects. The one stage table.

Everything the grader does per stage (compile, run, check, time, score, the
handout's tables) iterates over ``Rubric.stages``; no other module lists stages.
A bad rubric raises :class:`RubricError` naming the key path and what was
expected; the CLI prints it and exits with code 2.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grader.errors import RubricError

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
INPUTS = ("fp32", "fp16")
BASELINES = ("cublas_sgemm", "cublas_gemmex_fp16")
PEAKS = ("fp32", "fp16_tensor")
KINDS = (
    "compiles", "correct", "no_spills", "sass",
    "fraction_of_baseline", "speedup_over_stage", "fraction_of_peak", "ncu",
)
NCU_OPS = (">=", "<=", "==", ">", "<")
# Parameters each item kind takes: name -> (type, required).
_KIND_PARAMS: dict[str, dict[str, tuple[type | tuple[type, ...], bool]]] = {
    "compiles": {},
    "correct": {},
    "no_spills": {},
    "sass": {"forbid": (list, False), "require": (list, False)},
    "fraction_of_baseline": {"min": ((int, float), True), "partial_from": ((int, float), False)},
    "speedup_over_stage": {"stage": (str, True), "min": ((int, float), True),
                           "partial_from": ((int, float), False)},
    "fraction_of_peak": {"peak": (str, True), "min": ((int, float), True),
                         "partial_from": ((int, float), False)},
    # An Nsight Compute criterion: `expr` over metric names (and N, the profile size),
    # compared with `value` (a number or an expression in N). See grader/profile/criteria.py.
    "ncu": {"expr": (str, True), "op": (str, True), "value": ((int, float, str), True),
            "explain": (str, False), "unit": (str, False)},
}


@dataclass(frozen=True)
class Item:
    id: str
    kind: str
    title: str
    points: float
    visibility: str = "visible"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    block: tuple[int, int]
    tile: tuple[int, int]  # (BM rows, BN cols) of C per block
    smem: int = 0


@dataclass(frozen=True)
class Bench:
    n: int = 4096
    warmup: int = 2
    reps: int = 20
    min_reps: int = 5
    max_seconds: float = 20.0
    flush_l2: bool = True


@dataclass(frozen=True)
class Stage:
    id: str
    number: str
    title: str
    file: str
    kernel: str
    inputs: str
    baseline: str
    peak: str
    launch: Launch
    rtol: float
    bench: Bench
    items: tuple[Item, ...]
    summary: str = ""
    # A result this many times faster than the cuBLAS baseline is implausible: its speed items
    # go to a person for review instead of scoring (settings.plausible_max_fraction_of_baseline).
    plausible_max: float = 1.2

    @property
    def launch_symbol(self) -> str:
        return f"{self.kernel}_launch"

    @property
    def max_points(self) -> float:
        return sum(i.points for i in self.items)


@dataclass(frozen=True)
class Profile:
    """One Nsight Compute run per submission: every stage kernel, one launch each."""
    enabled: bool = True
    n: int = 2048
    clock_control: str = "none"  # ncu --clock-control; "none" leaves the GPU's clocks alone
    timeout_s: float = 300.0


@dataclass(frozen=True)
class Sanitizer:
    """compute-sanitizer runs: racecheck on shared-memory stages, memcheck on failed ones."""
    racecheck: bool = True
    memcheck_on_failure: bool = True
    n: int = 256
    timeout_s: float = 120.0


@dataclass(frozen=True)
class Timeouts:
    probe_s: float = 60.0
    compile_s: float = 120.0
    stage_run_s: float = 240.0
    checker_s: float = 300.0
    submission_s: float = 1500.0  # all stages' runs together; later stages are skipped past it


@dataclass(frozen=True)
class PeakOverride:
    match: str
    fp32: float
    fp16_tensor: float


@dataclass(frozen=True)
class Rubric:
    title: str
    arch_without_device: str
    correctness_sizes: tuple[int, ...]
    timeouts: Timeouts
    output_limit_bytes: int
    peak_overrides: tuple[PeakOverride, ...]
    peak_per_sm_clock: dict[str, dict[str, float]]
    stages: tuple[Stage, ...]
    source: str = "rubric.yaml"
    profile: Profile = Profile()
    sanitizer: Sanitizer = Sanitizer()
    extra: dict[str, Any] = field(default_factory=dict)  # other top-level sections, e.g. occupancy

    def stage(self, stage_id: str) -> Stage:
        for s in self.stages:
            if s.id == stage_id:
                return s
        raise KeyError(stage_id)

    @property
    def max_points(self) -> float:
        sections = [self.extra.get(k) for k in ("occupancy_config", "report_config")]
        return sum(s.max_points for s in self.stages) + sum(c.max_points for c in sections if c)


class _Reader:
    """Reads one mapping, remembering where it is, and rejects unknown keys."""

    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, dict):
            raise RubricError(where, f"is a {type(raw).__name__}", "a mapping of keys to values")
        self.raw, self.where, self.used = raw, where, set()

    def get(self, key: str, typ: type | tuple[type, ...], default: Any = dataclasses.MISSING) -> Any:
        self.used.add(key)
        path = f"{self.where}.{key}"
        if key not in self.raw:
            if default is dataclasses.MISSING:
                raise RubricError(path, "is missing", _type_name(typ))
            return default
        value = self.raw[key]
        if isinstance(value, bool) and typ is not bool and bool not in _as_tuple(typ):
            raise RubricError(path, f"is {value!r}", _type_name(typ))
        if not isinstance(value, typ):
            raise RubricError(path, f"is {value!r} ({type(value).__name__})", _type_name(typ))
        return value

    def done(self) -> None:
        # Keys starting with "x-" are free for YAML anchors (shared lists of values).
        unknown = sorted((k for k in set(self.raw) - self.used if not str(k).startswith("x-")), key=str)
        if unknown:
            raise RubricError(f"{self.where}.{unknown[0]}", "is not a known key",
                              "one of: " + ", ".join(sorted(self.used)))


def _as_tuple(typ: type | tuple[type, ...]) -> tuple[type, ...]:
    return typ if isinstance(typ, tuple) else (typ,)


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             list: "a list", dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in _as_tuple(typ)))


def _positive(value: float, where: str, what: str = "a positive number") -> float:
    if value <= 0:
        raise RubricError(where, f"is {value!r}", what)
    return value


def _pair(raw: Any, where: str) -> tuple[int, int]:
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(v, int) and v > 0 for v in raw)):
        raise RubricError(where, f"is {raw!r}", "a list of two positive integers")
    return (raw[0], raw[1])


def _choice(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise RubricError(where, f"is {value!r}", "one of: " + ", ".join(allowed))
    return value


def _item(raw: Any, where: str) -> Item:
    r = _Reader(raw, where)
    item_id = r.get("id", str)
    kind = _choice(r.get("kind", str), KINDS, f"{where}.kind")
    title = r.get("title", str)
    points = float(r.get("points", (int, float)))
    if points < 0:
        raise RubricError(f"{where}.points", f"is {points:g}", "zero or more points")
    visibility = _choice(r.get("visibility", str, "visible"), VISIBILITIES, f"{where}.visibility")
    params = {}
    for name, (typ, required) in _KIND_PARAMS[kind].items():
        value = r.get(name, typ) if required else r.get(name, typ, None)
        if value is not None:
            params[name] = value
    r.done()
    if kind == "fraction_of_peak":
        _choice(params["peak"], PEAKS, f"{where}.peak")
    if kind == "ncu":
        _choice(params["op"], NCU_OPS, f"{where}.op")
    if kind == "sass" and not (params.get("forbid") or params.get("require")):
        raise RubricError(where, "has neither forbid nor require", "a list of SASS opcodes in one of them")
    if "partial_from" in params and not 0 <= params["partial_from"] < params["min"]:
        raise RubricError(f"{where}.partial_from", f"is {params['partial_from']!r}",
                          f"a number from 0 up to (not including) min = {params['min']}")
    return Item(item_id, kind, title, points, visibility, params)


def _bench(raw: Any, where: str, base: Bench) -> Bench:
    r = _Reader(raw, where)
    kw = {}
    for f in dataclasses.fields(Bench):
        typ = bool if f.name == "flush_l2" else ((int, float) if f.name == "max_seconds" else int)
        value = r.get(f.name, typ, getattr(base, f.name))
        if f.name != "flush_l2":
            _positive(value, f"{where}.{f.name}")
        kw[f.name] = value
    r.done()
    if kw["min_reps"] > kw["reps"]:
        raise RubricError(f"{where}.min_reps", f"is {kw['min_reps']}", f"at most reps = {kw['reps']}")
    return Bench(**kw)


def _stage(raw: Any, where: str, bench: Bench, sizes: tuple[int, ...]) -> Stage:
    r = _Reader(raw, where)
    sid = r.get("id", str)
    number = str(r.get("number", (str, int)))
    title = r.get("title", str)
    file = r.get("file", str)
    if not file.strip() or file.startswith("/") or ".." in Path(file).parts:
        raise RubricError(f"{where}.file", f"is {file!r}", "a relative path inside the submission")
    kernel = r.get("kernel", str)
    if not kernel.isidentifier():
        raise RubricError(f"{where}.kernel", f"is {kernel!r}", "a C identifier")
    inputs = _choice(r.get("inputs", str), INPUTS, f"{where}.inputs")
    baseline = _choice(r.get("baseline", str), BASELINES, f"{where}.baseline")
    peak = _choice(r.get("peak", str), PEAKS, f"{where}.peak")
    lr = _Reader(r.get("launch", dict), f"{where}.launch")
    launch = Launch(_pair(lr.get("block", list), f"{where}.launch.block"),
                    _pair(lr.get("tile", list), f"{where}.launch.tile"),
                    lr.get("smem", int, 0))
    lr.done()
    tol = _Reader(r.get("tolerance", dict), f"{where}.tolerance")
    rtol = float(_positive(tol.get("rtol", (int, float)), f"{where}.tolerance.rtol"))
    tol.done()
    stage_bench = _bench(r.get("bench", dict, {}), f"{where}.bench", bench)
    summary = r.get("summary", str, "")
    raw_items = r.get("items", list)
    items = tuple(_item(it, f"{where}.items[{k}]") for k, it in enumerate(raw_items))
    r.done()
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise RubricError(f"{where}.items", "has duplicate item ids", "each item id once per stage")
    for n in sizes + (stage_bench.n,):
        if n % launch.tile[0] or n % launch.tile[1]:
            raise RubricError(f"{where}.launch.tile", f"{list(launch.tile)} does not divide N = {n}",
                              "tile sizes that divide every correctness and benchmark size")
    return Stage(sid, number, title, file, kernel, inputs, baseline, peak, launch, rtol,
                 stage_bench, items, summary)


def parse_rubric(raw: Any, source: str = "rubric.yaml") -> Rubric:
    """Validate a parsed YAML document and build the Rubric."""
    r = _Reader(raw, source)
    version = r.get("version", int)
    if version != 1:
        raise RubricError(f"{source}.version", f"is {version}", "1")
    title = r.get("title", str)
    s = _Reader(r.get("settings", dict), f"{source}.settings")
    arch = s.get("arch_without_device", str, "sm_90a")
    if not arch.startswith("sm_"):
        raise RubricError(f"{source}.settings.arch_without_device", f"is {arch!r}", "e.g. sm_90a")
    sizes = s.get("correctness_sizes", list)
    if not sizes or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
        raise RubricError(f"{source}.settings.correctness_sizes", f"is {sizes!r}",
                          "a non-empty list of positive integers")
    if len(sizes) < 2:
        raise RubricError(f"{source}.settings.correctness_sizes", f"has {len(sizes)} size",
                          "at least two sizes (one size can hide indexing bugs)")
    tr = _Reader(s.get("timeouts", dict, {}), f"{source}.settings.timeouts")
    timeouts = Timeouts(**{f.name: float(_positive(tr.get(f.name, (int, float), f.default),
                                                   f"{source}.settings.timeouts.{f.name}"))
                           for f in dataclasses.fields(Timeouts)})
    tr.done()
    out_limit = int(_positive(s.get("output_limit_bytes", int, 20000), f"{source}.settings.output_limit_bytes"))
    bench = _bench(s.get("bench", dict, {}), f"{source}.settings.bench", Bench())
    plausible = float(_positive(s.get("plausible_max_fraction_of_baseline", (int, float), 1.2),
                                f"{source}.settings.plausible_max_fraction_of_baseline"))
    pr = _Reader(s.get("profile", dict, {}), f"{source}.settings.profile")
    profile = Profile(
        enabled=pr.get("enabled", bool, True),
        n=int(_positive(pr.get("n", int, 2048), f"{source}.settings.profile.n")),
        clock_control=_choice(pr.get("clock_control", str, "none"), ("none", "base"),
                              f"{source}.settings.profile.clock_control"),
        timeout_s=float(_positive(pr.get("timeout_s", (int, float), 300), f"{source}.settings.profile.timeout_s")))
    pr.done()
    sr = _Reader(s.get("sanitizer", dict, {}), f"{source}.settings.sanitizer")
    sanitizer = Sanitizer(
        racecheck=sr.get("racecheck", bool, True), memcheck_on_failure=sr.get("memcheck_on_failure", bool, True),
        n=int(_positive(sr.get("n", int, 256), f"{source}.settings.sanitizer.n")),
        timeout_s=float(_positive(sr.get("timeout_s", (int, float), 120), f"{source}.settings.sanitizer.timeout_s")))
    sr.done()
    s.done()

    p = _Reader(r.get("peaks", dict), f"{source}.peaks")
    overrides = []
    for k, o in enumerate(p.get("overrides", list, [])):
        orr = _Reader(o, f"{source}.peaks.overrides[{k}]")
        overrides.append(PeakOverride(
            orr.get("match", str),
            float(_positive(orr.get("fp32", (int, float)), f"{orr.where}.fp32")),
            float(_positive(orr.get("fp16_tensor", (int, float)), f"{orr.where}.fp16_tensor"))))
        orr.done()
    per_sm: dict[str, dict[str, float]] = {}
    for cc, rates in p.get("per_sm_per_clock", dict, {}).items():
        rr = _Reader(rates, f"{source}.peaks.per_sm_per_clock.{cc}")
        per_sm[str(cc)] = {k: float(_positive(rr.get(k, (int, float)), f"{rr.where}.{k}")) for k in PEAKS}
        rr.done()
    p.done()

    raw_stages = r.get("stages", list)
    if not raw_stages:
        raise RubricError(f"{source}.stages", "is empty", "at least one stage")
    stages = tuple(dataclasses.replace(_stage(st, f"{source}.stages[{k}]", bench, tuple(sizes)),
                                       plausible_max=plausible)
                   for k, st in enumerate(raw_stages))
    ids = [st.id for st in stages]
    for k, st in enumerate(stages):
        if ids.count(st.id) > 1:
            raise RubricError(f"{source}.stages[{k}].id", f"{st.id!r} appears twice", "unique stage ids")
        for j, it in enumerate(st.items):
            other = it.params.get("stage")
            if other is not None and other not in ids:
                raise RubricError(f"{source}.stages[{k}].items[{j}].stage", f"is {other!r}",
                                  "the id of another stage: " + ", ".join(ids))
    extra: dict[str, Any] = {key: r.get(key, dict) for key in ("occupancy", "report") if key in r.raw}
    # The non-GEMM sections are validated now, so a bad section stops here with its key path.
    if "occupancy" in extra:
        from grader.occupancy.config import load_occupancy_config

        extra["occupancy_config"] = load_occupancy_config(extra["occupancy"], f"{source}.occupancy")
    if "report" in extra:
        from grader.writeup.config import load_report_config

        extra["report_config"] = load_report_config(extra["report"], f"{source}.report",
                                                    [st.id for st in stages])
    r.done()
    for k, st in enumerate(stages):
        if any(i.kind == "ncu" for i in st.items) and (profile.n % st.launch.tile[0] or profile.n % st.launch.tile[1]):
            raise RubricError(f"{source}.settings.profile.n", f"{profile.n} is not a multiple of stage "
                              f"{st.id}'s default tile {list(st.launch.tile)}", "a size every tile divides")
    return Rubric(title, arch, tuple(sizes), timeouts, out_limit, tuple(overrides), per_sm,
                  stages, source=source, profile=profile, sanitizer=sanitizer, extra=extra)


def load_rubric(path: str | Path) -> Rubric:
    """Read and validate a rubric file. Raises RubricError with the line for YAML syntax errors."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricError(str(path), f"cannot be read ({exc.strerror or exc})", "a readable YAML file") from None
    except UnicodeDecodeError:
        raise RubricError(str(path), "is not UTF-8 text", "a UTF-8 YAML file") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RubricError(f"{path.name}{line}", f"is not valid YAML: {problem}", "valid YAML") from None
    return parse_rubric(raw, path.name)
