"""The ``occupancy:`` section of rubric.yaml -> a typed, validated :class:`OccupancyConfig`.

The exercise parameters (Ex 1's SM and kernel, Ex 5's report, the sweeps, the
register caps), file names, and every item's points and visibility live in the
rubric so an instructor can change them without touching code. Unknown keys and
wrong types raise :class:`grader.errors.RubricError` naming the key path.
The default section is ``rubric_section.yaml`` beside this file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grader.errors import RubricError
from grader.occupancy.calculator import KIB, LIMITS
from grader.spec.items import ItemSpec

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
DEFAULT_SECTION = Path(__file__).with_name("rubric_section.yaml")

# Every item the exercises grade, in report order. The rubric must give each one.
ITEM_IDS = (
    "host.checked_calls",
    "ex1.warps_per_block", "ex1.blocks_by_registers", "ex1.blocks_by_shared_mem",
    "ex1.blocks_by_warps", "ex1.blocks_by_hardware", "ex1.max_blocks", "ex1.bottleneck",
    "ex1.occupancy", "ex1.fix", "ex1.fix_numbers",
    "ex2.device_props", "ex2.program_api_blocks", "ex2.program_occupancy",
    "ex2.program_best_block", "ex2.answers", "ex2.difference_cause", "ex2.explanation",
    "ex3.block_limits", "ex3.occupancy", "ex3.explanation",
    "ex4.smem_sweep_occupancy", "ex4.block_sweep_occupancy", "ex4.equal_work",
    "ex4.smem_conclusion", "ex4.block_conclusion", "ex4.discussion",
    "ex5.active_warps", "ex5.occupancy", "ex5.eligible_issued", "ex5.stall_share",
    "ex5.dominant_stall", "ex5.memory_level", "ex5.reasoning",
    "ex6.ptxas_match", "ex6.register_pressure", "ex6.occupancy", "ex6.fastest_claim",
    "ex6.explanation",
)


@dataclass(frozen=True)
class Device:
    name: str
    compute_capability: str
    sm_count: int


@dataclass(frozen=True)
class Program:
    work_kernel: str
    heavy_kernel: str
    check_macros: tuple[str, ...]
    launch_check_calls: tuple[str, ...]
    exempt_calls: tuple[str, ...]
    required_calls: tuple[str, ...]


@dataclass(frozen=True)
class Tolerance:
    rel: float
    abs: float
    pct_points: float
    time_tie_pct: float


@dataclass(frozen=True)
class Ex1:
    max_warps: int
    max_blocks: int
    registers: int
    smem_per_sm: int  # bytes
    threads_per_block: int
    regs_per_thread: int
    smem_per_block: int  # bytes
    target_occupancy_pct: float


@dataclass(frozen=True)
class Ex2:
    block_size: int
    dynamic_smem: int  # bytes
    work_registers: int


@dataclass(frozen=True)
class Ex3:
    block_size: int
    runs: tuple[int, ...]  # dynamic shared memory per run, bytes


@dataclass(frozen=True)
class Ex4:
    smem_block_size: int
    smem_points: tuple[int, ...]  # bytes
    block_smem: int  # bytes
    block_points: tuple[int, ...]


@dataclass(frozen=True)
class Ex5:
    schedulers_per_sm: int
    max_warps_per_sm: int
    active_per_scheduler: float
    eligible_per_scheduler: float
    issued_per_scheduler: float
    no_eligible_pct: float
    one_or_more_eligible_pct: float
    cycles_per_issue: float
    stalls: dict[str, float]


@dataclass(frozen=True)
class Ex6:
    register_caps: tuple[int, ...]
    block_size: int
    min_registers_uncapped: int


@dataclass(frozen=True)
class OccupancyConfig:
    program_file: str
    answers_file: str
    reference: Device
    program: Program
    tolerance: Tolerance
    ex1: Ex1
    ex2: Ex2
    ex3: Ex3
    ex4: Ex4
    ex5: Ex5
    ex6: Ex6
    items: dict[str, ItemSpec]

    @property
    def max_points(self) -> float:
        return sum(i.points for i in self.items.values())


_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}


class _Section:
    """One mapping of the rubric; remembers its key path and rejects unknown keys."""

    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, dict):
            raise RubricError(where, f"is {raw!r}", "a mapping of keys to values")
        self.raw, self.where, self.seen = raw, where, set()

    def _take(self, key: str, expected: str) -> tuple[Any, str]:
        self.seen.add(key)
        path = f"{self.where}.{key}"
        if key not in self.raw:
            raise RubricError(path, "is missing", expected)
        return self.raw[key], path

    def sub(self, key: str) -> _Section:
        value, path = self._take(key, "a mapping")
        return _Section(value, path)

    def int(self, key: str, minimum: int = 1) -> int:
        value, path = self._take(key, "an integer")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise RubricError(path, f"is {value!r}", f"an integer >= {minimum}")
        return value

    def num(self, key: str, minimum: float = 0.0) -> float:
        value, path = self._take(key, "a number")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise RubricError(path, f"is {value!r}", f"a number >= {minimum:g}")
        return float(value)

    def kib(self, key: str) -> int:
        return int(round(self.num(key) * KIB))

    def str(self, key: str, choices: tuple[str, ...] | None = None, default: Any = None) -> str:
        if default is not None and key not in self.raw:
            self.seen.add(key)
            return default
        value, path = self._take(key, "a string")
        if not isinstance(value, str) or not value.strip():
            raise RubricError(path, f"is {value!r}", "a non-empty string")
        if choices and value not in choices:
            raise RubricError(path, f"is {value!r}", "one of: " + ", ".join(choices))
        return value

    def list(self, key: str, kind: type | tuple[type, ...], minimum: float = 0) -> tuple:
        what = "numbers" if isinstance(kind, tuple) else _NAMES[kind][2:] + "s"
        value, path = self._take(key, f"a list of {what}")
        ok = isinstance(value, list) and value and all(
            isinstance(v, kind) and not isinstance(v, bool) and v >= minimum
            if kind is not str else isinstance(v, str) and v for v in value)
        if not ok:
            raise RubricError(path, f"is {value!r}", f"a non-empty list of {what}")
        return tuple(value)

    def done(self) -> None:
        unknown = [k for k in self.raw if k not in self.seen]
        if unknown:
            raise RubricError(f"{self.where}.{unknown[0]}", "is not a known key",
                              "one of: " + ", ".join(sorted(self.seen)))


def _items(sec: _Section) -> dict[str, ItemSpec]:
    raw_items = sec.raw
    for key in raw_items:
        if key not in ITEM_IDS:
            raise RubricError(f"{sec.where}.{key}", "is not a known item", "one of: " + ", ".join(ITEM_IDS))
    items = {}
    for n, item_id in enumerate(ITEM_IDS, 1):
        s = sec.sub(item_id)
        points = s.num("points")
        visibility = s.str("visibility", VISIBILITIES, default="visible")
        number = s.raw.get("number", f"O.{n}")
        s.seen.add("number")
        if not isinstance(number, (str, int, float)):
            raise RubricError(f"{s.where}.number", f"is {number!r}", "a string")
        items[item_id] = ItemSpec(item_id, s.str("title"), points, visibility, str(number))
        s.done()
    return items


def load_occupancy_config(raw: dict, where: str = "rubric.yaml: occupancy") -> OccupancyConfig:
    """Validate the section's mapping (as yaml.safe_load gives it) and build the config."""
    top = _Section(raw, where)
    files = top.sub("files")
    program_file, answers_file = files.str("program"), files.str("answers")
    files.done()

    ref = top.sub("reference_device")
    reference = Device(ref.str("name"), ref.str("compute_capability", tuple(LIMITS)),
                       ref.int("sm_count"))
    ref.done()

    prog = top.sub("program")
    program = Program(prog.str("work_kernel"), prog.str("heavy_kernel"),
                      prog.list("check_macros", str), prog.list("launch_check_calls", str),
                      prog.list("exempt_calls", str), prog.list("required_calls", str))
    prog.done()

    tol = top.sub("tolerance")
    tolerance = Tolerance(tol.num("rel"), tol.num("abs"), tol.num("pct_points"),
                          tol.num("time_tie_pct"))
    tol.done()

    e1 = top.sub("ex1")
    sm, kern = e1.sub("sm"), e1.sub("kernel")
    ex1 = Ex1(sm.int("max_warps"), sm.int("max_blocks"), sm.int("registers"),
              sm.kib("shared_mem_kib"), kern.int("threads_per_block"),
              kern.int("regs_per_thread", 0), kern.kib("shared_mem_kib"),
              e1.num("target_occupancy_pct"))
    for s in (sm, kern, e1):
        s.done()

    e2 = top.sub("ex2")
    ex2 = Ex2(e2.int("block_size"), e2.kib("dynamic_smem_kib"), e2.int("work_registers"))
    e2.done()

    e3 = top.sub("ex3")
    ex3 = Ex3(e3.int("block_size"), tuple(int(round(k * KIB)) for k in e3.list("runs_kib", (int, float))))
    e3.done()

    e4 = top.sub("ex4")
    ss, bs = e4.sub("smem_sweep"), e4.sub("block_sweep")
    ex4 = Ex4(ss.int("block_size"), tuple(int(round(k * KIB)) for k in ss.list("smem_kib", (int, float))),
              bs.kib("smem_kib"), bs.list("block_sizes", int, 1))
    for s in (ss, bs, e4):
        s.done()

    e5 = top.sub("ex5")
    rep = e5.sub("report")
    stalls_sec = rep.sub("stalls")
    stalls = {}
    for name in list(stalls_sec.raw):
        stalls[str(name)] = stalls_sec.num(name)
    if not stalls:
        raise RubricError(stalls_sec.where, "is empty", "stall reasons with their cycles")
    ex5 = Ex5(e5.int("schedulers_per_sm"), e5.int("max_warps_per_sm"),
              rep.num("active_warps_per_scheduler"), rep.num("eligible_warps_per_scheduler"),
              rep.num("issued_warp_per_scheduler"), rep.num("no_eligible_pct"),
              rep.num("one_or_more_eligible_pct"),
              rep.num("warp_cycles_per_issued_instruction"), stalls)
    for s in (stalls_sec, rep, e5):
        s.done()

    e6 = top.sub("ex6")
    ex6 = Ex6(e6.list("register_caps", int, 1), e6.int("block_size"),
              e6.int("min_registers_uncapped"))
    e6.done()

    items = _items(top.sub("items"))
    top.done()
    return OccupancyConfig(program_file, answers_file, reference, program, tolerance,
                           ex1, ex2, ex3, ex4, ex5, ex6, items)


def load_default_config() -> OccupancyConfig:
    """The section shipped beside this module (what rubric.yaml starts from)."""
    raw = yaml.safe_load(DEFAULT_SECTION.read_text(encoding="utf-8"))
    return load_occupancy_config(raw, where=f"{DEFAULT_SECTION.name}")
