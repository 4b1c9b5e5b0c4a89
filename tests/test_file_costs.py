"""The workers get the costliest test files first (tests/file_costs.py): the order, the table's refresh, and
pytest-xdist really handing the files out in that order."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.file_costs import costliest_first, costs, refresh

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class _Item:
    nodeid: str


def test_costliest_files_first_unknown_ones_as_the_average_each_file_kept_together_in_its_order():
    items = [_Item(n) for n in ("t/a.py::x", "t/b.py::x", "t/a.py::y", "t/new.py::x", "t/c.py::x", "t/b.py::y",
                                "t/other.py::x")]
    table = {"t/a.py": 1.0, "t/b.py": 50.0, "t/c.py": 30.0}  # the average, 27, for new.py and other.py
    order = [i.nodeid for i in costliest_first(items, table)]
    assert order == ["t/b.py::x", "t/b.py::y", "t/c.py::x", "t/new.py::x", "t/other.py::x", "t/a.py::x", "t/a.py::y"]
    assert [i.nodeid for i in costliest_first(items, {})] == [  # no table: the files in their first-seen order
        "t/a.py::x", "t/a.py::y", "t/b.py::x", "t/b.py::y", "t/new.py::x", "t/c.py::x", "t/other.py::x"]


def test_refresh_sums_the_plugins_records_per_file(tmp_path):
    records = [{"nodeid": "tests/test_a.py::t1", "self": 1.0, "child": 2.0, "wall": 5.0},
               {"nodeid": "tests/test_b.py::t1", "self": 0.5, "child": 0.0, "wall": 1.0},
               {"nodeid": "tests/test_a.py::t2", "self": 0.25, "child": 0.25, "wall": 2.0},
               {"nodeid": "<finish>", "self": 9.0, "child": 9.0, "wall": 9.0}]
    for worker, part in (("gw0", records[:2]), ("gw1", records[2:])):
        (tmp_path / f"run-{worker}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    table = tmp_path / "costs.json"
    refresh(str(tmp_path), "run", table)
    written = json.loads(table.read_text())
    assert written["files"] == {"tests/test_a.py": {"wall": 7.0, "cpu": 3.5}, "tests/test_b.py": {"wall": 1.0, "cpu": 0.5}}
    assert costs(table) == {"tests/test_a.py": 7.0, "tests/test_b.py": 1.0}
    assert costs(tmp_path / "none.json") == {}


def test_the_checked_in_table_is_keyed_as_the_node_ids_are():
    # keys as a test's node id begins (from the repository root), or no file would be found in it; a file gone
    # since the table was written costs nothing (it is never looked up)
    table = costs()
    assert table, "tests/file_costs.json is missing or empty"
    assert all(name.startswith("tests/test_") and name.endswith(".py") and seconds >= 0 for name, seconds in table.items())
    assert "tests/test_dockerfile_build.py" in table and (ROOT / "tests" / "test_dockerfile_build.py").is_file()


CONFTEST = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.file_costs import CostliestFirst

def pytest_configure(config):
    if {register}:
        CostliestFirst.register(config, Path(__file__).parent / "costs.json")
"""
TEST = """
import os

def _log(request):
    with open(os.environ["FILE_ORDER_LOG"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + " " + request.path.name + "\\n")
""" + "".join(f"\ndef test_{i}(request):\n    _log(request)\n" for i in range(8))


def _first_file_per_worker(tmp_path: Path, register: bool, counts: dict[str, int]) -> set[str]:
    project = tmp_path / ("with" if register else "without")
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST.format(root=str(ROOT), register=register))
    for name, count in counts.items():  # each file keeps its first `count` tests
        lines = TEST.split("\ndef test_")
        (project / name).write_text("\ndef test_".join(lines[:count + 1]))
    (project / "costs.json").write_text(json.dumps({"files": {"test_a.py": {"wall": 1}, "test_b.py": {"wall": 50},
                                                              "test_c.py": {"wall": 10}}}))
    log = project / "order.log"
    env = {**os.environ, "FILE_ORDER_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadfile", "--rootdir", str(project), "-c", os.devnull, str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [line.split() for line in log.read_text().splitlines()]
    assert len(ran) == sum(counts.values())
    return {next(name for w, name in ran if w == worker) for worker in ("gw0", "gw1")}


def test_pytest_xdist_hands_the_costliest_files_out_first(tmp_path):
    # test_d.py is not in the table: the average of the others (20.3), between test_b.py and test_c.py
    counts = {"test_a.py": 8, "test_b.py": 3, "test_c.py": 3, "test_d.py": 3}
    assert _first_file_per_worker(tmp_path, True, counts) == {"test_b.py", "test_d.py"}
    # without the plugin pytest-xdist starts with the files that have the most tests (the cheapest one here)
    assert "test_a.py" in _first_file_per_worker(tmp_path, False, counts)
