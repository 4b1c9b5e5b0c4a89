"""Parsers of what Nsight Compute prints about its own metrics (pure: text in, records out).

They read the captures in tests/fixtures/ncu/ (``ncu --query-metrics --chip C``, ``ncu --list-chips``,
``ncu --version``, and the header of an ``ncu --csv --page raw`` run), from which
tools/ncu_metric_list.py derives the list the grader ships (grader/rubric/metric_names.py). No
subprocess: the captures are made once on a machine with ncu and committed.

``--query-metrics`` prints one table per chip::

    Chip gh100
    ------------- --------------- --------------- ----------------------------
    Metric Name   Metric Type     Metric Unit     Metric Description
    ------------- --------------- --------------- ----------------------------
    dram__bytes_read      Counter         byte            # of bytes read from DRAM
                                                          (a description wraps onto indented lines)
    ==PROF== Note that these metrics must be appended with a valid suffix ...

A row's name and type are its first two words (ncu does not keep one column width for every row).
Names with a namespace before the unit (``TriageCompute.sm__throughput``) are the PM-sampling
metrics, which ``--metrics`` of a kernel profile does not take: they are returned apart.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum


class MetricType(str, Enum):
    """ncu's metric types (its "Metric Type" column), plus the values ncu reports of a launch itself."""

    COUNTER = "counter"
    RATIO = "ratio"
    THROUGHPUT = "throughput"
    # launch__*, device__attribute_*, ...: in every raw page, never in --query-metrics; no suffix.
    ATTRIBUTE = "attribute"


_TYPES = {"Counter": MetricType.COUNTER, "Ratio": MetricType.RATIO, "Throughput": MetricType.THROUGHPUT}
_CHIP = re.compile(r"^Chip (\w+)\s*$")
_VERSION = re.compile(r"^Version (\S+)(.*)$", re.M)
# A hardware metric's base name (unit__counter) and an ncu column that is a metric at all.
BASE_RE = re.compile(r"^[a-z][a-z0-9]*__[A-Za-z0-9_]+$")
_COLUMN_RE = re.compile(r"^[a-z][a-z0-9]*__[A-Za-z0-9_]+(?:\.[a-z0-9_]+)*$")


class NcuListError(ValueError):
    """The text is not the ncu output it should be (the message names the line)."""


@dataclass
class ChipMetrics:
    """One ``--query-metrics`` table: ``metrics`` {name: type} in ncu's order."""

    chip: str
    metrics: dict[str, MetricType] = field(default_factory=dict)
    namespaced: list[str] = field(default_factory=list)  # PM-sampling names (``X.TriageCompute.y__z``)


def parse_query_metrics(text: str) -> ChipMetrics:
    """The table of ``ncu --query-metrics --chip C`` (any ``--query-metrics-mode``). Raises NcuListError."""
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if _CHIP.match(line)), None)
    if start is None:
        raise NcuListError("no 'Chip <name>' line: not the output of ncu --query-metrics --chip")
    match = _CHIP.match(lines[start])
    assert match is not None  # found above
    out = ChipMetrics(match.group(1))
    rules = [k for k in range(start, min(start + 5, len(lines))) if lines[k].startswith("---")]
    if len(rules) < 2 or not lines[rules[0] + 1].startswith("Metric Name"):
        raise NcuListError(f"line {start + 2}: expected the table's header between two lines of dashes")
    for k in range(rules[1] + 1, len(lines)):
        line = lines[k]
        if not line.strip() or line[0].isspace():  # a wrapped description
            continue
        if line.startswith("=="):  # ==PROF== notes end the table
            break
        words = line.split()
        if len(words) < 2 or words[1] not in _TYPES:
            raise NcuListError(f"line {k + 1}: expected '<name> Counter|Ratio|Throughput ...', got {line[:80]!r}")
        name = words[0]
        if BASE_RE.match(name.split(".", 1)[0]):
            if name in out.metrics:
                raise NcuListError(f"line {k + 1}: {name} is listed twice")
            out.metrics[name] = _TYPES[words[1]]
        else:
            out.namespaced.append(name)
    return out


def parse_list_chips(text: str) -> list[str]:
    """``ncu --list-chips``: one comma-separated line of chip names."""
    chips = [c.strip() for c in text.replace("\n", ",").split(",") if c.strip()]
    bad = [c for c in chips if not re.fullmatch(r"[a-z]+[0-9a-z]+", c)]
    if not chips or bad:
        raise NcuListError(f"expected comma-separated chip names, got {(bad or [text.strip()])[0][:40]!r}")
    return chips


def parse_version(text: str) -> str:
    """``ncu --version`` -> e.g. '2025.3.1.0 (build 36398880)'."""
    m = _VERSION.search(text)
    if m is None:
        raise NcuListError("no 'Version ...' line: not the output of ncu --version")
    build = re.search(r"\(build [^)]*\)", m.group(2))
    return m.group(1) + (f" {build.group(0)}" if build else "")


def raw_page_metrics(text: str) -> list[str]:
    """The metric columns of an ``ncu --csv --page raw`` run's header row (its first line that
    starts with "ID"), in order: what ncu reports besides the metrics asked for."""
    import csv

    for line in text.splitlines():
        if line.startswith('"ID",'):
            header = next(csv.reader([line]))
            return [h for h in header if _COLUMN_RE.match(h)]
    raise NcuListError('no "ID",... header row: not the output of ncu --csv --page raw')
