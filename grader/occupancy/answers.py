"""The student's answers file (YAML): its schema, and a parser that never raises.

Each field has a form (:mod:`grader.occupancy.answer_forms`: integer, number,
percentage, size, time, choice, free text). :func:`parse_answers` returns every
well-formed value, normalised, and for every other field one message naming the
field and the form expected, e.g.
``ex1.blocks_by_registers: expected an integer, got `about 200` ``. A bad field
only affects the items that read it, a number too large (``0xfff...``, ``1e999``)
included. A file that is not valid YAML, or that the bounded loader refuses
(:mod:`grader.untrusted.yaml_load`: aliases, deep nesting, too many values, too
large), gives one message with its line number, and every item that reads
answers fails with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.occupancy.answer_forms import (
    CC,
    CHOICE,
    INT,
    NUMBER,
    PERCENT,
    SIZE,
    TEXT,
    TIME,
    Field,
    describe,
    parse_value,
)
from grader.occupancy.calculator import KIB
from grader.rubric.occupancy import OccupancyConfig
from grader.untrusted.quote import quote_code
from grader.untrusted.yaml_load import Limits, load_yaml

__all__ = ["CC", "CHOICE", "INT", "NUMBER", "PERCENT", "SIZE", "TEXT", "TIME", "Field", "parse_value",
           "Answers", "answer_schema", "parse_answers", "run_key", "cap_key"]

RESOURCES: dict[str, tuple[str, ...]] = {
    "registers": ("registers", "register", "regs", "reg"),
    "shared_mem": ("shared_mem", "shared_memory", "shared", "smem", "shared_mem_size"),
    "warps": ("warps", "warp", "threads", "max_warps"),
    "blocks": ("blocks", "block", "sm", "hardware", "max_blocks", "block_limit_sm", "hw"),
}
YES_NO: dict[str, tuple[str, ...]] = {"yes": ("yes", "y", "true"), "no": ("no", "n", "false")}
STALLS: dict[str, tuple[str, ...]] = {
    "long_scoreboard": ("long_scoreboard", "stall_long_scoreboard", "long_sb", "lg_scoreboard"),
    "short_scoreboard": ("short_scoreboard", "stall_short_scoreboard", "short_sb"),
    "wait": ("wait", "stall_wait"),
    "barrier": ("barrier", "stall_barrier"),
    "mio_throttle": ("mio_throttle",),
    "lg_throttle": ("lg_throttle",),
    "math_pipe_throttle": ("math_pipe_throttle", "math_throttle"),
    "not_selected": ("not_selected",),
    "no_instruction": ("no_instruction",),
    "branch_resolving": ("branch_resolving",),
}
MEMORY_LEVELS: dict[str, tuple[str, ...]] = {
    "global": ("global", "global_memory", "device", "device_memory", "dram", "hbm", "l1tex",
               "local", "local_memory", "global_local", "global_or_local"),
    "shared": ("shared", "shared_memory", "smem", "mio"),
    "l2": ("l2", "l2_cache"),
    "constant": ("constant", "constant_memory", "cmem"),
    "registers": ("registers", "register_file"),
}
CAUSES: dict[str, tuple[str, ...]] = {
    "reserved_shared_memory": ("reserved_shared_memory", "reserved_smem", "reserved",
                               "reserved_shared_mem", "driver_reserved_shared_memory"),
    "allocation_granularity": ("allocation_granularity", "granularity", "rounding"),
    "registers": ("registers", "register_count", "real_register_count"),
    "none": ("none", "no_difference", "same"),
}


def run_key(smem_bytes: int) -> str:
    kib = smem_bytes / KIB
    return f"run_{kib:g}kib".replace(".", "_")


def cap_key(cap: int) -> str:
    return f"cap_{cap}"


def answer_schema(cfg: OccupancyConfig) -> dict[str, Field]:
    """Every field of the answers file, by dotted path. Depends on the rubric (runs, caps)."""
    s: dict[str, Field] = {
        "gpu.name": Field(TEXT), "gpu.compute_capability": Field(CC), "gpu.sm_count": Field(INT),
    }
    for k in ("warps_per_block", "blocks_by_registers", "blocks_by_shared_mem",
              "blocks_by_warps", "blocks_by_hardware", "max_blocks"):
        s[f"ex1.{k}"] = Field(INT)
    s["ex1.bottleneck"] = Field(CHOICE, RESOURCES, many=True)
    s["ex1.occupancy_pct"] = Field(PERCENT)
    s["ex1.fix.threads_per_block"] = Field(INT)
    s["ex1.fix.regs_per_thread"] = Field(INT)
    s["ex1.fix.shared_mem_kib"] = Field(SIZE)
    s["ex1.fix.max_blocks"] = Field(INT)
    s["ex1.fix.bottleneck"] = Field(CHOICE, RESOURCES, many=True)
    s["ex1.fix.occupancy_pct"] = Field(PERCENT)

    for k in ("work_registers", "api_blocks", "hand_blocks", "best_block", "min_grid"):
        s[f"ex2.{k}"] = Field(INT)
    s["ex2.api_occupancy_pct"] = Field(PERCENT)
    s["ex2.difference_cause"] = Field(CHOICE, CAUSES, many=True)
    s["ex2.explanation"] = Field(TEXT)

    s["ex3.registers_per_thread"] = Field(INT)
    for smem in cfg.ex3.runs:
        run = f"ex3.{run_key(smem)}"
        for k in ("block_limit_sm", "block_limit_registers", "block_limit_shared_mem",
                  "block_limit_warps"):
            s[f"{run}.{k}"] = Field(INT)
        s[f"{run}.limiter"] = Field(CHOICE, RESOURCES, many=True)
        s[f"{run}.theoretical_occupancy_pct"] = Field(PERCENT)
        s[f"{run}.achieved_occupancy_pct"] = Field(PERCENT)
    s["ex3.explanation"] = Field(TEXT)

    s["ex4.smem_sweep.peak_occupancy_kib"] = Field(SIZE, many=True)
    s["ex4.smem_sweep.fastest_kib"] = Field(SIZE, many=True)
    s["ex4.smem_sweep.same_point"] = Field(CHOICE, YES_NO)
    s["ex4.block_sweep.peak_occupancy_block"] = Field(INT, many=True)
    s["ex4.block_sweep.fastest_block"] = Field(INT, many=True)
    s["ex4.block_sweep.same_point"] = Field(CHOICE, YES_NO)
    s["ex4.block_sweep.api_best_block"] = Field(INT)
    s["ex4.discussion"] = Field(TEXT)

    for k in ("active_warps_per_scheduler", "active_warps_per_sm",
              "eligible_warps_per_scheduler", "issued_warps_per_scheduler"):
        s[f"ex5.{k}"] = Field(NUMBER)
    s["ex5.occupancy_pct"] = Field(PERCENT)
    s["ex5.issued_le_eligible"] = Field(CHOICE, YES_NO)
    s["ex5.dominant_stall"] = Field(CHOICE, STALLS)
    s["ex5.dominant_stall_share_pct"] = Field(PERCENT)
    s["ex5.memory_level"] = Field(CHOICE, MEMORY_LEVELS)
    for k in ("why_issued_le_eligible", "no_eligible_meaning", "diagnosis"):
        s[f"ex5.{k}"] = Field(TEXT)

    caps: dict[str, tuple[str, ...]] = {str(c): (str(c), cap_key(c)) for c in cfg.ex6.register_caps}
    for cap in cfg.ex6.register_caps:
        base = f"ex6.{cap_key(cap)}"
        for k in ("registers", "spill_stores_bytes", "spill_loads_bytes"):
            s[f"{base}.{k}"] = Field(INT)
        s[f"{base}.occupancy_pct"] = Field(PERCENT)
        s[f"{base}.time_ms"] = Field(TIME)
    s["ex6.fastest_cap"] = Field(CHOICE, caps)
    s["ex6.highest_occupancy_cap"] = Field(CHOICE, caps)
    s["ex6.explanation"] = Field(TEXT)
    return s


@dataclass
class Answers:
    """Parsed answers: ``values`` for good fields, ``problems`` for the rest."""

    values: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the whole file is unusable (bad YAML, not a mapping)
    unanswered: list[str] = field(default_factory=list)  # fields left empty (among ``problems``)
    notes: list[str] = field(default_factory=list)  # keys the schema does not know

    def get(self, path: str) -> Any:
        return self.values.get(path)

    def problem(self, path: str) -> str | None:
        """Why ``path`` has no usable value, or None when it has one."""
        if self.error:
            return self.error
        return self.problems.get(path)


MAX_NOTES = 20  # unknown keys listed; the rest are counted


def parse_answers(text: str, schema: dict[str, Field], filename: str = "answers.yaml",
                  limits: Limits = Limits()) -> Answers:
    """Parse and validate the answers file's text against ``schema``. Never raises."""
    out = Answers()
    data, problem = load_yaml(text, filename, limits)
    if problem:
        out.error = f"{problem}; no answer in the file could be read"
        return out
    if data is None:
        data = {}
    if not isinstance(data, dict):
        out.error = (f"{filename}: expected a mapping of exercise sections (ex1:, ex2:, ...), "
                     f"got {describe(data)}; no answer in the file could be read")
        return out

    for path, f in schema.items():
        node: Any = data
        parts = path.split(".")
        for depth, part in enumerate(parts):
            if node is None:
                break
            if not isinstance(node, dict):
                prefix = ".".join(parts[:depth])
                out.problems[path] = f"{prefix}: expected a mapping with {part}:, got {describe(node)}"
                break
            node = node.get(part)
        else:
            value, problem = parse_value(path, f, node)
            if problem:
                out.problems[path] = problem
                if node is None or node == [] or (isinstance(node, str) and not node.strip()):
                    out.unanswered.append(path)
            else:
                out.values[path] = value
            continue
        if path not in out.problems:
            out.problems[path] = f"{path}: no answer (expected {f.expected()})"
            out.unanswered.append(path)

    prefixes = {".".join(p.split(".")[:i]) for p in schema for i in range(1, p.count(".") + 1)}
    unknown: list[str] = []
    _note_unknown(data, "", schema, prefixes, unknown)
    out.notes = [f"{quote_code(p)}: not a known field; ignored ({_did_you_mean(p, schema, prefixes)})"
                 for p in unknown[:MAX_NOTES]]
    if len(unknown) > MAX_NOTES:
        out.notes.append(f"... and {len(unknown) - MAX_NOTES} more unknown fields")
    return out


def _did_you_mean(path: str, schema: dict[str, Field], prefixes: set[str]) -> str:
    """The closest known field beside an unknown one (a typo), or the general hint."""
    import difflib

    parent, _, key = path.rpartition(".")
    head = parent + "." if parent else ""
    siblings = sorted({k[len(head):].split(".")[0] for k in (*schema, *prefixes) if k.startswith(head) and k != parent})
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    return f"did you mean {quote_code(head + close[0])}?" if close else "check its spelling and indentation"


def _note_unknown(node: Any, prefix: str, schema: dict[str, Field], prefixes: set[str], found: list[str]) -> None:
    """The dotted paths in ``node`` that the schema does not know (the loader bounds their number)."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        path = f"{prefix}{key}"
        if path in schema:
            continue
        if path in prefixes:
            _note_unknown(value, path + ".", schema, prefixes, found)
        else:
            found.append(path)
