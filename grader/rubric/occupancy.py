"""The ``occupancy:`` section of rubric.yaml -> a typed, validated :class:`OccupancyConfig`.

The exercise parameters (Ex 1's SM and kernel, Ex 5's report, the sweeps, the
register caps), file names, and every item's points and visibility live in the
rubric so an instructor can change them without touching code. The section is read
once, when the rubric is loaded (grader/rubric/load.py), with the rubric's one reader:
unknown keys and wrong types raise :class:`grader.rubric.errors.RubricError` naming the key path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grader.evidence.rubric import Item
from grader.rubric.errors import RubricError
from grader.rubric.items import read_item
from grader.rubric.reader import Reader
from grader.rubric.sm_limits import KIB, LIMITS

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
# The free-text items: graded by hand (Status.MANUAL, a manual question on Gradescope), never by the grader.
HAND_GRADED = ("ex2.explanation", "ex3.explanation", "ex4.discussion", "ex5.reasoning", "ex6.explanation")


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
    items: dict[str, Item]
    # Per-student variants (grader/occupancy/variants.py): Ex 1-3's numbers drawn from a seed derived from
    # the student's identity. Off by default: everyone gets the numbers above.
    variants: bool = False
    variant_salt: str = ""  # mixed into every seed: a new term, new variants for the same students

    @property
    def max_points(self) -> float:
        return sum(i.points for i in self.items.values())


def _kib(r: Reader, key: str) -> int:
    return int(round(r.number(key) * KIB))


def _kib_list(r: Reader, key: str) -> tuple[int, ...]:
    return tuple(int(round(k * KIB)) for k in r.list_of(key, (int, float), lo=0))


def _items(r: Reader) -> dict[str, Item]:
    for key in r.raw:
        if key not in ITEM_IDS and not str(key).startswith("x-"):
            raise RubricError(r.path(key), "is not a known item", "one of: " + ", ".join(ITEM_IDS))
    items = {}
    for n, item_id in enumerate(ITEM_IDS, 1):
        s = r.sub(item_id)
        number = str(s.get("number", (str, int, float), f"O.{n}"))
        items[item_id] = read_item(s, item_id, number=number)
        s.done()
    r.done()
    return items


def _ex1(r: Reader) -> Ex1:
    sm, kern = r.sub("sm"), r.sub("kernel")
    ex1 = Ex1(sm.integer("max_warps"), sm.integer("max_blocks"), sm.integer("registers"),
              _kib(sm, "shared_mem_kib"), kern.integer("threads_per_block"),
              kern.integer("regs_per_thread", lo=0), _kib(kern, "shared_mem_kib"),
              r.number("target_occupancy_pct"))
    for s in (sm, kern, r):
        s.done()
    return ex1


def _ex5(r: Reader) -> Ex5:
    rep = r.sub("report")
    stalls_sec = rep.sub("stalls")
    stalls = {str(name): stalls_sec.number(name) for name in stalls_sec.keys()}
    if not stalls:
        raise RubricError(stalls_sec.where, "is empty", "stall reasons with their cycles")
    ex5 = Ex5(r.integer("schedulers_per_sm"), r.integer("max_warps_per_sm"),
              rep.number("active_warps_per_scheduler"), rep.number("eligible_warps_per_scheduler"),
              rep.number("issued_warp_per_scheduler"), rep.number("no_eligible_pct"),
              rep.number("one_or_more_eligible_pct"),
              rep.number("warp_cycles_per_issued_instruction"), stalls)
    for s in (stalls_sec, rep, r):
        s.done()
    return ex5


def load_occupancy_config(raw: Any, where: str = "rubric.yaml.occupancy") -> OccupancyConfig:
    """Validate the section's mapping (as yaml.safe_load gives it) and build the config."""
    top = Reader(raw, where)
    files = top.sub("files")
    program_file, answers_file = files.text("program"), files.text("answers")
    files.done()

    ref = top.sub("reference_device")
    reference = Device(ref.text("name"), ref.choice("compute_capability", tuple(LIMITS)), ref.integer("sm_count"))
    ref.done()

    prog = top.sub("program")
    program = Program(prog.text("work_kernel"), prog.text("heavy_kernel"),
                      prog.list_of("check_macros", str), prog.list_of("launch_check_calls", str),
                      prog.list_of("exempt_calls", str), prog.list_of("required_calls", str))
    prog.done()

    tol = top.sub("tolerance")
    tolerance = Tolerance(tol.number("rel"), tol.number("abs"), tol.number("pct_points"), tol.number("time_tie_pct"))
    tol.done()

    ex1 = _ex1(top.sub("ex1"))
    e2 = top.sub("ex2")
    ex2 = Ex2(e2.integer("block_size"), _kib(e2, "dynamic_smem_kib"), e2.integer("work_registers"))
    e2.done()
    e3 = top.sub("ex3")
    ex3 = Ex3(e3.integer("block_size"), _kib_list(e3, "runs_kib"))
    e3.done()
    e4 = top.sub("ex4")
    ss, bs = e4.sub("smem_sweep"), e4.sub("block_sweep")
    ex4 = Ex4(ss.integer("block_size"), _kib_list(ss, "smem_kib"), _kib(bs, "smem_kib"),
              bs.list_of("block_sizes", int, lo=1))
    for s in (ss, bs, e4):
        s.done()
    ex5 = _ex5(top.sub("ex5"))
    e6 = top.sub("ex6")
    ex6 = Ex6(e6.list_of("register_caps", int, lo=1), e6.integer("block_size"), e6.integer("min_registers_uncapped"))
    e6.done()

    items = _items(top.sub("items"))
    variants = top.get("variants", bool, False, "true or false")
    salt = top.get("variant_salt", str, "", "a text mixed into every student's seed")
    top.done()
    return OccupancyConfig(program_file, answers_file, reference, program, tolerance,
                           ex1, ex2, ex3, ex4, ex5, ex6, items, variants, salt)
