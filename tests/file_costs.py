"""The order in which pytest-xdist's workers get the test files: the costliest first (longest processing time
first), so that the run does not end with one worker on a long file while the other has nothing left.

``--dist loadfile`` hands out whole files, one at a time to whichever worker is nearly done, in the order the
workers collected them, unless it reorders them itself (by their number of tests, the default,
``--loadscope-reorder``). tests/conftest.py therefore turns that reordering off and sorts the collection by
tests/file_costs.json: each file's seconds on a worker (wall) and its CPU, measured by the
docs/measurements/scripts/cpu_per_test.py plugin. A file the table does not know counts as the average one.

Refresh the table after a whole-suite run with the plugin (as `bash grader/bootstrap.sh test` runs it):

    PYTHONPATH=docs/measurements/scripts CPU_PER_TEST=/tmp/cpu CPU_PER_TEST_TAG=run \\
        .venv/bin/python -m pytest tests -n 2 --dist loadfile -p no:cacheprovider -p cpu_per_test
    .venv/bin/python tests/file_costs.py /tmp/cpu run
"""
from __future__ import annotations

import glob
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import pytest

TABLE = Path(__file__).resolve().parent / "file_costs.json"
ABOUT = ("Seconds each test file keeps a pytest-xdist worker busy (wall) and the CPU it uses (its worker and its "
         "children), from a whole-suite run with docs/measurements/scripts/cpu_per_test.py; written by "
         "tests/file_costs.py, read by tests/conftest.py to hand out the costliest files first.")


class _Item(Protocol):
    nodeid: str


def costs(table: Path = TABLE) -> dict[str, float]:
    """{file's path from the repository root, as in a test's node id: its wall seconds}; empty without a table."""
    try:
        files = json.loads(table.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {name: float(entry["wall"]) for name, entry in files.items()}


def costliest_first(items: Sequence[_Item], table: dict[str, float]) -> list[_Item]:
    """``items`` with their files ordered by cost, highest first (a file the table lacks: the average of those
    it has), each file's tests together and in their own order; ties keep the collection's order."""
    default = sum(table.values()) / len(table) if table else 0.0
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.nodeid.split("::", 1)[0], len(first_seen))

    def key(item: _Item) -> tuple[float, int]:
        path = item.nodeid.split("::", 1)[0]
        return -table.get(path, default), first_seen[path]

    return sorted(items, key=key)


class CostliestFirst:
    """A pytest plugin: under ``--dist loadfile``, the controller keeps its workers' collection order (instead of
    sorting the files by their number of tests) and each worker collects the costliest files first."""

    NAME = "costliest-files-first"

    def __init__(self, table: Path) -> None:
        self.table = table

    @classmethod
    def register(cls, config: pytest.Config, table: Path = TABLE) -> None:
        """From pytest_configure: in the controller of a ``--dist loadfile`` run, and in its workers (a worker's
        own options say ``--dist no``; the controller names the table in the worker's ``workerinput``)."""
        told = getattr(config, "workerinput", {}).get(cls.NAME)
        if told:
            config.pluginmanager.register(cls(Path(told)), cls.NAME)
        elif config.getoption("dist", "no") == "loadfile":
            config.option.loadscopereorder = False
            config.pluginmanager.register(cls(table), cls.NAME)

    def pytest_configure_node(self, node) -> None:  # pytest-xdist's hook, in the controller, for each worker
        node.workerinput[self.NAME] = str(self.table)

    @pytest.hookimpl(trylast=True)  # after the selection (-m, -k): what is left is what the workers get
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = costliest_first(items, costs(self.table))


def refresh(folder: str, tag: str, table: Path = TABLE) -> dict[str, dict[str, float]]:
    """Sum cpu_per_test.py's records (``folder``/``tag``-gw*.jsonl, else ``tag``-main.jsonl) per file and write
    the table. A worker's first test carries that worker's collection (a few seconds), as the plugin says."""
    names = glob.glob(os.path.join(folder, f"{tag}-gw*.jsonl")) or glob.glob(os.path.join(folder, f"{tag}-main.jsonl"))
    if not names:
        raise SystemExit(f"no {tag}-gw*.jsonl or {tag}-main.jsonl in {folder}")
    files: dict[str, dict[str, float]] = {}
    for name in names:
        with open(name, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record["nodeid"].startswith("<"):
                    continue
                entry = files.setdefault(record["nodeid"].split("::", 1)[0], {"wall": 0.0, "cpu": 0.0})
                entry["wall"] += record["wall"]
                entry["cpu"] += record["self"] + record["child"]
    rounded = {path: {k: round(v, 1) for k, v in entry.items()}
               for path, entry in sorted(files.items(), key=lambda kv: -kv[1]["wall"])}
    table.write_text(json.dumps({"about": ABOUT, "files": rounded}, indent=1) + "\n", encoding="utf-8")
    return rounded


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python tests/file_costs.py CPU_PER_TEST_FOLDER TAG")
    written = refresh(sys.argv[1], sys.argv[2])
    print(f"wrote {TABLE}: {len(written)} files, {sum(e['wall'] for e in written.values()):.0f} s of worker time")
