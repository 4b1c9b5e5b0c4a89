"""grader.sandbox.limits' two ways of finding a step's processes, and the one /proc scan the watches share.

Without /proc/PID/task/TID/children (a kernel built without CONFIG_PROC_CHILDREN) each watch poll
needs the whole process table; a grading polls up to ~25 steps at once, so one scan serves every
poll made within PROCESS_TABLE_MAX_AGE_S. These start real processes; no bwrap needed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from grader.sandbox import limits

# A parent with two children and one grandchild, all asleep until killed.
FAMILY = ("import subprocess, sys, time\n"
          "kids = [subprocess.Popen(['sleep', '30']),\n"
          "        subprocess.Popen([sys.executable, '-c', 'import subprocess, time; "
          "subprocess.Popen([\"sleep\", \"30\"]); time.sleep(30)'])]\n"
          "print('ready', flush=True); time.sleep(30)\n")


@pytest.fixture
def family():
    proc = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + 10
    while len(limits._tree(proc.pid)) < 4 and time.monotonic() < deadline:  # the grandchild starts last
        time.sleep(0.02)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_the_scan_finds_the_same_tree_as_the_children_files(family, monkeypatch):
    has_files = limits._HAS_CHILDREN_FILES
    monkeypatch.setattr(limits, "_HAS_CHILDREN_FILES", False)
    time.sleep(limits.PROCESS_TABLE_MAX_AGE_S * 2)  # a table from before the family started is too old now
    scanned = sorted(limits._tree(family.pid))
    assert len(scanned) == 4 and family.pid in scanned
    if has_files:
        monkeypatch.setattr(limits, "_HAS_CHILDREN_FILES", True)
        assert sorted(limits._tree(family.pid)) == scanned


def test_watches_polling_together_share_one_scan(monkeypatch):
    scans = []
    real = limits._scan_process_table

    def counted():
        scans.append(time.monotonic())
        return real()

    monkeypatch.setattr(limits, "_scan_process_table", counted)
    monkeypatch.setattr(limits, "_table", (-float("inf"), {}))
    t0 = time.monotonic()
    for _ in range(50):  # 50 polls at once, as many steps' watches ticking together
        limits.process_table()
    if time.monotonic() - t0 < limits.PROCESS_TABLE_MAX_AGE_S:
        assert len(scans) == 1
    time.sleep(limits.PROCESS_TABLE_MAX_AGE_S * 2)
    limits.process_table()  # older than its age: read again
    assert len(scans) >= 2 and scans[-1] - scans[0] >= limits.PROCESS_TABLE_MAX_AGE_S


def test_a_new_process_is_seen_once_the_table_is_older_than_its_age(monkeypatch):
    monkeypatch.setattr(limits, "_HAS_CHILDREN_FILES", False)
    limits.process_table()
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '30'])"],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(limits._tree(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(limits.PROCESS_TABLE_MAX_AGE_S)
        assert len(limits._tree(proc.pid)) == 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
