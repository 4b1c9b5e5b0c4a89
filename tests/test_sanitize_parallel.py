"""compute-sanitizer's children all run at once: the step takes its slowest stage's time.

compute-sanitizer itself needs a GPU; a stand-in tool (a script run exactly as compute-sanitizer is,
wrapping the child) records when each run started and ended. The runs, fences and files are real.
"""
from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

from grader.evidence.protocol import Kernel, LaunchShape
from grader.gpu import sanitize

STAND_IN = """#!/bin/sh
# compute-sanitizer --tool T --error-exitcode 17 --print-limit 20 python -m grader.children sanitize SPEC RESULT
date +%s.%N > "$PWD/started"
sleep 1
date +%s.%N > "$PWD/ended"
echo "========= ERROR SUMMARY: 0 errors"
"""


def test_every_stage_runs_under_the_sanitizer_at_once(tmp_path, monkeypatch):
    tool = tmp_path / "compute-sanitizer"
    tool.write_text(STAND_IN)
    tool.chmod(0o755)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # more CPUs than stages
    specs = [Kernel(id=f"s{i}", cubin="x.cubin", kernel="k", inputs="fp32", launch=LaunchShape([16, 16], [16, 16], 0))
             for i in range(6)]
    t0 = time.monotonic()
    runs = sanitize.run_many("racecheck", SimpleNamespace(path=str(tool)), specs, 256, tmp_path / "rc", 60)
    took = time.monotonic() - t0
    assert sorted(runs) == [s.id for s in specs] and all(not r.findings and not r.reason for r in runs.values())
    spans = [tuple(float((tmp_path / "rc" / s.id / f).read_text()) for f in ("started", "ended")) for s in specs]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans  # all six at once
    print(f"six racecheck runs side by side: {took:.2f} s (one after another: six seconds and more)")


def test_how_many_run_at_once(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert [sanitize.parallel_runs(n) for n in (0, 1, 6, 40)] == [1, 1, 6, 16]
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert sanitize.parallel_runs(6) == 4  # at least four, whatever the CPUs


def test_the_sanitizer_children_need_no_cupy_cache(tmp_path):
    """The launcher child under the tool uses the CUDA driver alone (grader/children/sanitize.py):
    nothing of the warm CuPy cache is copied for it."""
    tool = tmp_path / "compute-sanitizer"
    tool.write_text(STAND_IN + 'echo "$*" > "$PWD/argv"\n')
    tool.chmod(0o755)
    spec = Kernel(id="tiled", cubin="x.cubin", kernel="k", inputs="fp32", launch=LaunchShape([16, 16], [16, 16], 0))
    sanitize.run_many("memcheck", SimpleNamespace(path=str(tool)), [spec], 256, tmp_path / "mc", 60)
    assert " -m grader.children sanitize " in (tmp_path / "mc" / "tiled" / "argv").read_text()
    assert not (tmp_path / "mc" / "tiled" / "cupy-cache").exists()


def test_steps_started_side_by_side_get_cgroups_of_their_own(tmp_path):
    """Compiles and sanitizer runs start fenced steps from many threads at once; each step's
    cgroup must still be its own (a shared name would fail the second mkdir and lose its limits)."""
    from concurrent.futures import ThreadPoolExecutor

    from grader.sandbox.cgroup import CgroupSupport, RunCgroup
    support = CgroupSupport(tmp_path, frozenset(), "a plain folder stands in for the cgroup tree")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a shared counter then collides
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            paths = list(pool.map(lambda _i: RunCgroup(support, 1 << 30, 64).path, range(2000)))
    finally:
        sys.setswitchinterval(switch)
    assert len(set(paths)) == 2000
