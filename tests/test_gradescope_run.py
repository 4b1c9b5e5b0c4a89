"""The Gradescope run (grader/deploy/gradescope/run.py) grades in a real ``python -m grader grade`` child
and writes results.json once, whatever the child does.

Every test starts ``python -m grader.deploy.gradescope run`` as run_autograder does. A
``sitecustomize`` put on PYTHONPATH (so it loads in the run and in its child alike) records, through an
audit hook, each process's pid and command line, and every open for writing and every rename that
touches the results folder; in the child it can also make the grader crash, exit without writing, or
hang with a grandchild in a session of its own, as a broken grader would. Nothing is mocked: the child
is the real grader process, only made to misbehave before its own code runs.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_gradescope_package import PACKAGE_VARS, check_results

ROOT = Path(__file__).resolve().parent.parent

SITECUSTOMIZE = r'''
import atexit, json, os, signal, subprocess, sys, time

_log = os.environ.get("GS_TEST_LOG")
_watch = os.environ.get("GS_TEST_WATCH", "")
_fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _log else None


def _say(**record):
    if _fd is not None:
        record["pid"] = os.getpid()
        os.write(_fd, (json.dumps(record) + "\n").encode())


def _hook(event, args):
    try:
        if event == "open" and _watch and str(args[0]).startswith(_watch):
            mode, flags = args[1], args[2]
            writes = (mode is not None and any(c in mode for c in "wax+")) or bool(flags & (os.O_WRONLY | os.O_RDWR))
            if writes:
                _say(event="write", path=str(args[0]))
        elif event == "os.rename" and _watch and str(args[1]).startswith(_watch):
            _say(event="rename", src=str(args[0]), path=str(args[1]))
    except Exception:
        pass


_say(event="start", argv=sys.orig_argv)
atexit.register(lambda: _say(event="exit", in_process=sorted(m for m in ("grader.cli", "grader.pipeline")
                                                             if m in sys.modules)))
sys.addaudithook(_hook)

_grader = sys.orig_argv[1:4] == ["-m", "grader", "grade"]
_mode = os.environ.get("GS_TEST_CHILD", "")
if _grader and _mode == "abort":
    os.abort()
if _grader and _mode == "exit0":  # "graded", and wrote nothing
    os._exit(0)
if _grader and _mode == "broken":  # grades, then its grading.json is cut short
    _out = sys.orig_argv[sys.orig_argv.index("--out") + 1]
    atexit.register(lambda: open(os.path.join(_out, "grading.json"), "w").write('{"format": 2, "items": ['))
if _grader and _mode == "hang":
    stray = subprocess.Popen(["sleep", "300"], start_new_session=True)  # outside the child's session
    _say(event="grandchild", grandchild=stray.pid)
    time.sleep(300)
'''


def _source(tmp: Path) -> Path:
    source = tmp / "source"
    source.mkdir()
    shutil.copy(ROOT / "rubric.yaml", source / "rubric.yaml")
    return source


def _run(tmp: Path, child: str = "", wait: bool = True, **extra: str):
    """Start the run on an empty submission, the naive stage only, without a GPU."""
    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    sub, results = tmp / "submission", tmp / "results"
    sub.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in PACKAGE_VARS and k != "GRADER_RUN_DEADLINE"}
    env.update(PYTHONPATH=f"{hook}{os.pathsep}{ROOT}", GS_TEST_LOG=str(tmp / "events.jsonl"),
               GS_TEST_WATCH=str(results), GS_TEST_CHILD=child, GRADER_USE_GPU="0", GRADER_STAGES="naive")
    env.update(extra)
    cmd = [sys.executable, "-m", "grader.deploy.gradescope", "run", "--submission", str(sub),
           "--results", str(results), "--source", str(_source(tmp))]
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    out, _ = proc.communicate(timeout=300)
    return proc, out


def _events(tmp: Path) -> list[dict]:
    path = tmp / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _grader_children(events: list[dict]) -> list[int]:
    return [e["pid"] for e in events if e["event"] == "start" and e["argv"][1:4] == ["-m", "grader", "grade"]]


def _alive(pid: int) -> bool:
    """``pid`` runs (not a zombie nobody reaped: a zombie runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _results_writes(events: list[dict], results: Path) -> list[dict]:
    """Every write that made (or could make) the results folder's results.json: renames onto it, opens of
    it or of a temp file for it there (the child's own results.json, in its private folder, is not it)."""
    target = str(results / "results.json")
    return [e for e in events if e["event"] in ("write", "rename") and (
        e["path"] == target or (Path(e["path"]).parent == results and Path(e["path"]).name.startswith(".results.json.")))]


def test_a_real_run_writes_results_json_once_from_a_real_grader_child(tmp_path):
    proc, out = _run(tmp_path)
    assert proc.returncode == 0, out
    results = tmp_path / "results"
    res = check_results(results / "results.json")
    assert "file missing" in {t["number"]: t for t in res["tests"]}["1.compiles"]["output"]
    events = _events(tmp_path)
    # (b) the grading ran in a child: its own pid, the real command, and gone once the run has ended
    children = _grader_children(events)
    assert len(children) == 1, events
    assert children[0] != proc.pid and not _alive(children[0])
    parent_exit = [e for e in events if e["event"] == "exit" and e["pid"] == proc.pid]
    assert parent_exit and parent_exit[0]["in_process"] == [], "the run imported the grader's pipeline itself"
    # (a) one write of results.json, by the run, at its end: one temp file renamed onto it, no other write
    writes = _results_writes(events, results)
    renames = [e for e in writes if e["event"] == "rename"]
    assert len(renames) == 1 and renames[0]["pid"] == proc.pid, writes
    assert [e["path"] for e in writes if e["event"] == "write"] == [renames[0]["src"]], writes
    assert (results / "summary.md").is_file() and (results / "grading.json").is_file()
    assert sorted(p.name for p in results.iterdir() if p.is_dir()) == [], "the child's private folder was left"


def _error_item(res: dict) -> str:
    assert res["score"] == 0 and [t["tags"] for t in res["tests"]] == [["autograder_error"]] * 2, res
    assert res["tests"][0]["name"].startswith("Autograder error")
    text = res["tests"][1]["output"]
    assert res["tests"][1]["visibility"] == "hidden" and "Traceback" not in text
    return text


def _one_write(tmp: Path, pid: int) -> None:
    renames = [e for e in _results_writes(_events(tmp), tmp / "results") if e["event"] == "rename"]
    assert [e["pid"] for e in renames] == [pid], renames


@pytest.mark.parametrize(("child", "said"), [
    ("abort", ("was killed by signal 6 (SIGABRT)",)),
    ("exit0", ("finished but its grading.json cannot be used: grading.json: cannot read it",)),
    ("broken", ("finished but its grading.json cannot be used: ", "grading.json: not JSON")),
])
def test_a_child_that_crashes_or_writes_no_usable_grading_still_gets_one_results_json(tmp_path, child, said):
    proc, out = _run(tmp_path, child)
    assert proc.returncode != 0 or child != "abort", out
    text = _error_item(check_results(tmp_path / "results" / "results.json"))
    assert all(part in text for part in said), (text, out)
    _one_write(tmp_path, proc.pid)
    assert all(not _alive(pid) for pid in _grader_children(_events(tmp_path)))


def _grandchild(tmp: Path, deadline: float) -> int:
    while time.monotonic() < deadline:
        found = [e["grandchild"] for e in _events(tmp) if e["event"] == "grandchild"]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("the hanging child never started its grandchild")


def test_a_hanging_child_is_stopped_at_its_limit_with_its_whole_tree(tmp_path):
    proc, out = _run(tmp_path, "hang", GRADER_TIME_LIMIT_S="3")  # _run's own timeout is the net against a hang
    text = _error_item(check_results(tmp_path / "results" / "results.json"))
    assert "did not finish within its time limit of 3 seconds" in text, out
    _one_write(tmp_path, proc.pid)
    events = _events(tmp_path)
    stray = [e["grandchild"] for e in events if e["event"] == "grandchild"]
    assert stray and not _alive(stray[0]), "the child's grandchild (its own session) outlived the run"
    assert all(not _alive(pid) for pid in _grader_children(events))


def test_sigterm_stops_the_child_and_its_tree_and_still_writes_results_json(tmp_path):
    proc = _run(tmp_path, "hang", wait=False)
    try:
        stray = _grandchild(tmp_path, time.monotonic() + 120)
        os.kill(proc.pid, signal.SIGTERM)  # what run_autograder's timeout sends first
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = _error_item(check_results(tmp_path / "results" / "results.json"))
    assert "got SIGTERM" in text, out
    _one_write(tmp_path, proc.pid)
    assert not _alive(stray)
    assert all(not _alive(pid) for pid in _grader_children(_events(tmp_path)))
