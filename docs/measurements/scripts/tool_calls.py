"""The CUDA tools a test run started: how many calls, how many identical, and the CPU they take.

    M=/tmp/tc; mkdir -p $M/store
    CI=true TOOL_CALLS_LOG=$M/calls.jsonl TOOL_CALLS_STORE=$M/store \\
        PYTHONPATH=docs/measurements/scripts/tool_calls_hook .venv/bin/python -m pytest tests -n 3 --dist loadfile ...
    python docs/measurements/scripts/tool_calls.py $M/calls.jsonl $M/store [--replay]

The hook (tool_calls_hook/sitecustomize.py) logs every nvcc, ptxas, cuobjdump, nvdisasm, cicc or fatbinary process
a Python process reaped, with a key that is the same for the same command line (build and temporary folders as
placeholders) over the same source bytes, and keeps the first call of each key's files and command. A fenced call's
own rusage holds only bwrap's CPU (the sandbox's processes are reaped by the grader as a subreaper, later), so
``--replay`` runs each kept key once more, alone and unfenced in a scratch copy of its folder, and takes that CPU
as the key's cost (its nvcc's children included). Without ``--replay`` the logged CPU is used (right for unfenced
calls only). Prints calls, distinct keys and CPU per tool, per test file, and the keys called from more than one
file.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPLAY_S = 30
# The hostile submissions' compiles are never run outside the sandbox (an include bomb, /dev/urandom spliced in):
# their fenced calls keep the logged CPU (bwrap's own), so the totals leave their compiles' CPU out.
NOT_REPLAYED = ("tests/test_hostile.py", "tests/test_attacks.py")


def replay(store: str, key: str) -> float | None:
    """CPU (user + sys) of the key's command run again alone, or None when it cannot be replayed (then the
    logged CPU is used)."""
    d = os.path.join(store, key)
    try:
        with open(os.path.join(d, "cmd.json")) as f:
            c = json.load(f)
    except OSError:
        return None
    with tempfile.TemporaryDirectory(prefix="tc-replay-") as tmp:
        build = os.path.join(tmp, "build")
        shutil.copytree(os.path.join(d, "build"), build)
        args = c["args"][:1] + [a.replace(c["folder"], build) for a in c["args"][1:]]  # the tool where it is
        for i, dest in c["named"].items():
            args[int(i)] = dest.replace("<store>", d)
        # at most REPLAY_S of wall (`timeout` waits for its child, so its rusage holds the tool's CPU)
        proc = subprocess.Popen(["timeout", "-s", "KILL", str(REPLAY_S), *args], cwd=build, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode in (124, 125, 126, 127, 137, -9):  # timed out, or the tool could not start
            return None
        return ru.ru_utime + ru.ru_stime


def main(log: str, store: str, do_replay: bool) -> None:
    calls = [json.loads(line) for line in open(log)]
    for r in calls:
        r["file"] = r["test"].split("::")[0] or "(no test: session start)"
    cost: dict[str, float] = {}
    if do_replay:
        t0 = time.monotonic()
        for key in sorted({r["key"] for r in calls if not r["file"].startswith(NOT_REPLAYED)}):
            got = replay(store, key)
            if got is not None:
                cost[key] = got
        print(f"replayed {len(cost)} keys in {time.monotonic() - t0:.0f} s")
    for r in calls:
        r["c"] = cost.get(r["key"], r["cpu"]) if not r["fenced"] or r["key"] in cost else r["cpu"]

    def table(rows, by):
        groups = collections.defaultdict(list)
        for r in rows:
            groups[by(r)].append(r)
        out = []
        for g, rs in groups.items():
            seen: set[str] = set()
            dup_cpu = 0.0
            for r in rs:
                if r["key"] in seen:
                    dup_cpu += r["c"]
                seen.add(r["key"])
            out.append((sum(r["c"] for r in rs), g, len(rs), len(seen), dup_cpu))
        for cpu, g, n, distinct, dup in sorted(out, reverse=True):
            print(f"  {g!s:60} calls {n:5}  distinct {distinct:5}  CPU {cpu:7.1f} s  repeats' CPU {dup:7.1f} s")

    total = sum(r["c"] for r in calls)
    print(f"all: {len(calls)} calls, {len({r['key'] for r in calls})} distinct, CPU {total:.1f} s")
    print("by tool (and fenced):")
    table(calls, lambda r: (r["tool"], "fenced" if r["fenced"] else "unfenced",
                            "version" if "--version" in r["cmd"] else "work"))
    print("by file:")
    table(calls, lambda r: r["file"])
    by_key = collections.defaultdict(list)
    for r in calls:
        by_key[r["key"]].append(r)
    cross = [(sum(x["c"] for x in rs[1:]), k, rs) for k, rs in by_key.items() if len({x["file"] for x in rs}) > 1]
    print(f"keys called from more than one file: {len(cross)}, their repeats' CPU {sum(c for c, _, _ in cross):.1f} s")
    for c, _k, rs in sorted(cross, key=lambda t: t[0], reverse=True)[:25]:
        files = collections.Counter(x["file"].replace("tests/", "") for x in rs)
        src = " ".join(a for a in rs[0]["cmd"] if a.endswith((".cu", ".cubin")))[:50]
        print(f"  {rs[0]['tool']:9} {src:40} x{len(rs):3} repeats {c:5.1f} s  {dict(files)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--replay" in sys.argv[3:])
