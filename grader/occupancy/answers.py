"""The student's answers file (YAML): its schema, and a parser that never raises.

Each field has a kind (integer, number, percentage, size, time, choice, free
text). :func:`parse_answers` returns every well-formed value, normalised, and for
every other field one message naming the field and the form expected, e.g.
``ex1.blocks_by_registers: expected an integer, got 'about 200'``. A bad field
only affects the items that read it. A file that is not valid YAML gives one
message with its line number, and every item that reads answers fails with it.

Units: percentages are in percent (``29.7`` or ``"29.7%"``); sizes are in KiB
(``7``, ``"7 KiB"``, ``"7 KB"``, ``"7168 B"``; KB means KiB here) and are stored
in bytes; times are in ms (``1.2``, ``"1.2 ms"``, ``"1200 us"``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from grader.occupancy.calculator import KIB, LIMITS
from grader.occupancy.config import OccupancyConfig

INT, NUMBER, PERCENT, SIZE, TIME, CHOICE, TEXT, CC = (
    "int", "number", "percent", "size", "time", "choice", "text", "cc")

_EXPECTED = {
    INT: "an integer",
    NUMBER: "a number",
    PERCENT: "a percentage such as 29.7 or '29.7%'",
    SIZE: "a size in KiB such as 7 or '7 KiB' (or '7168 B')",
    TIME: "a time in ms such as 1.25 or '1.25 ms' (or '1250 us')",
    TEXT: "a sentence or more of text",
    CC: "a compute capability: " + ", ".join(LIMITS),
}

RESOURCES = {
    "registers": ("registers", "register", "regs", "reg"),
    "shared_mem": ("shared_mem", "shared_memory", "shared", "smem", "shared_mem_size"),
    "warps": ("warps", "warp", "threads", "max_warps"),
    "blocks": ("blocks", "block", "sm", "hardware", "max_blocks", "block_limit_sm", "hw"),
}
YES_NO = {"yes": ("yes", "y", "true"), "no": ("no", "n", "false")}
STALLS = {
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
MEMORY_LEVELS = {
    "global": ("global", "global_memory", "device", "device_memory", "dram", "hbm", "l1tex",
               "local", "local_memory", "global_local", "global_or_local"),
    "shared": ("shared", "shared_memory", "smem", "mio"),
    "l2": ("l2", "l2_cache"),
    "constant": ("constant", "constant_memory", "cmem"),
    "registers": ("registers", "register_file"),
}
CAUSES = {
    "reserved_shared_memory": ("reserved_shared_memory", "reserved_smem", "reserved",
                               "reserved_shared_mem", "driver_reserved_shared_memory"),
    "allocation_granularity": ("allocation_granularity", "granularity", "rounding"),
    "registers": ("registers", "register_count", "real_register_count"),
    "none": ("none", "no_difference", "same"),
}


@dataclass(frozen=True)
class Field:
    kind: str
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # canonical -> aliases
    many: bool = False  # a single value or a list of them; parsed to a tuple

    def expected(self) -> str:
        if self.kind == CHOICE:
            text = "one of: " + ", ".join(self.choices)
        else:
            text = _EXPECTED[self.kind]
        return text + (", or a list of them" if self.many else "")


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

    caps = {str(c): (str(c), cap_key(c)) for c in cfg.ex6.register_caps}
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
    notes: list[str] = field(default_factory=list)  # keys the schema does not know

    def get(self, path: str) -> Any:
        return self.values.get(path)

    def problem(self, path: str) -> str | None:
        """Why ``path`` has no usable value, or None when it has one."""
        if self.error:
            return self.error
        return self.problems.get(path)


class _Bad(ValueError):
    pass


_NUM = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d+)?|[+-]?\.\d+(?:[eE][+-]?\d+)?"
_WITH_UNIT = re.compile(rf"^\s*({_NUM})\s*([A-Za-zµ%]*)\s*$")
_SIZE_UNITS = {"": 1.0, "k": 1.0, "kb": 1.0, "kib": 1.0, "b": 1 / KIB, "byte": 1 / KIB,
               "bytes": 1 / KIB, "mb": KIB, "mib": KIB}
_TIME_UNITS = {"": 1.0, "ms": 1.0, "us": 1e-3, "µs": 1e-3, "usec": 1e-3, "s": 1e3,
               "sec": 1e3, "ns": 1e-6}


def _number_and_unit(raw: Any) -> tuple[float, str]:
    if isinstance(raw, bool):
        raise _Bad
    value, unit = None, ""
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        m = _WITH_UNIT.match(raw)
        if m:
            value, unit = float(m.group(1).replace(",", "")), m.group(2).lower()
    if value is None or not math.isfinite(value):
        raise _Bad
    return value, unit


def _norm_word(raw: Any) -> str:
    return re.sub(r"[\s\-/.]+", "_", str(raw).strip().lower()).strip("_")


def _parse_one(f: Field, raw: Any) -> Any:
    if f.kind == INT:
        value, unit = _number_and_unit(raw)
        if unit or not value.is_integer():
            raise _Bad
        return int(value)
    if f.kind == NUMBER:
        value, unit = _number_and_unit(raw)
        if unit:
            raise _Bad
        return value
    if f.kind == PERCENT:
        value, unit = _number_and_unit(raw)
        if unit not in ("", "%"):
            raise _Bad
        return value
    if f.kind == SIZE:
        value, unit = _number_and_unit(raw)
        if unit not in _SIZE_UNITS:
            raise _Bad
        return int(round(value * _SIZE_UNITS[unit] * KIB))
    if f.kind == TIME:
        value, unit = _number_and_unit(raw)
        if unit not in _TIME_UNITS:
            raise _Bad
        return value * _TIME_UNITS[unit]
    if f.kind == TEXT:
        if isinstance(raw, (dict, list)) or not str(raw).strip():
            raise _Bad
        return str(raw).strip()
    if f.kind == CC:
        if isinstance(raw, bool):
            raise _Bad
        text = f"{raw:.1f}" if isinstance(raw, (int, float)) else str(raw).strip().lower()
        m = re.fullmatch(r"(?:sm_|compute_)?(\d)(\d)a?", text)
        key = f"{m.group(1)}.{m.group(2)}" if m else text
        if key not in LIMITS:
            raise _Bad
        return key
    # CHOICE: YAML reads yes/no/true as booleans.
    word = ("yes" if raw else "no") if isinstance(raw, bool) else _norm_word(raw)
    for canonical, aliases in f.choices.items():
        if word == canonical or word in aliases:
            return canonical
    raise _Bad


def _describe(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_value(path: str, f: Field, raw: Any) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, message naming the field and the expected form)``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()) or raw == []:
        return None, f"{path}: no answer (expected {f.expected()})"
    items = raw if (f.many and isinstance(raw, list)) else [raw]
    if isinstance(raw, list) and not f.many:
        return None, f"{path}: expected {f.expected()}, got a list {_describe(raw)}"
    out = []
    for one in items:
        try:
            out.append(_parse_one(f, one))
        except _Bad:
            hint = ""
            if f.kind in (INT, NUMBER, PERCENT) and isinstance(one, str) and re.search(r"\d", one):
                hint = " (write the number alone)"
            return None, f"{path}: expected {f.expected()}, got {_describe(one)}{hint}"
    return (tuple(out) if f.many else out[0]), None


def _line_of(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def parse_answers(text: str, schema: dict[str, Field], filename: str = "answers.yaml") -> Answers:
    """Parse and validate the answers file's text against ``schema``. Never raises."""
    out = Answers()
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        line = _line_of(exc)
        where = f"{filename} line {line}" if line else filename
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        out.error = f"{where}: not valid YAML ({problem}); no answer in the file could be read"
        return out
    if data is None:
        data = {}
    if not isinstance(data, dict):
        out.error = (f"{filename}: expected a mapping of exercise sections (ex1:, ex2:, ...), "
                     f"got {type(data).__name__}; no answer in the file could be read")
        return out

    for path, f in schema.items():
        node: Any = data
        parts = path.split(".")
        for depth, part in enumerate(parts):
            if node is None:
                break
            if not isinstance(node, dict):
                prefix = ".".join(parts[:depth])
                out.problems[path] = f"{prefix}: expected a mapping with {part}:, got {_describe(node)}"
                break
            node = node.get(part)
        else:
            value, problem = parse_value(path, f, node)
            if problem:
                out.problems[path] = problem
            else:
                out.values[path] = value
            continue
        if path not in out.problems:
            out.problems[path] = f"{path}: no answer (expected {f.expected()})"

    prefixes = {".".join(p.split(".")[:i]) for p in schema for i in range(1, p.count(".") + 1)}
    _note_unknown(data, "", schema, prefixes, out.notes)
    return out


def _note_unknown(node: Any, prefix: str, schema: dict, prefixes: set, notes: list) -> None:
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        path = f"{prefix}{key}"
        if path in schema:
            continue
        if path in prefixes:
            _note_unknown(value, path + ".", schema, prefixes, notes)
        else:
            notes.append(f"{path}: not a known field; ignored (check its spelling and indentation)")
