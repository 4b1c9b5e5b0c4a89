"""Where a test run's CPU goes by process: how many Python processes it starts, each kind's own CPU, how much of
it is the interpreter's start and the imports, and (with strace) how often each program was started.

    PYTHONPATH=docs/measurements/scripts/process_cpu_hook PYPROC_LOG=/tmp/p.jsonl \\
        strace -f --seccomp-bpf -qq -e trace=execve -e signal=none -o /tmp/p.strace \\
        .venv/bin/python -m pytest FILES -n 0 -p no:cacheprovider
    python docs/measurements/scripts/process_cpu.py /tmp/p.jsonl [/tmp/p.strace] [N]

process_cpu_hook/sitecustomize.py writes one line per Python process at its exit (its docstring says which
processes it misses). A process's kind is its arguments up to the first path (``-m grader grade --out``,
``standin_grader.py``). strace is optional: without it the programs' starts are not counted. strace's
``--seccomp-bpf`` stops the traced processes only at execve, so the tests run at nearly their own speed; the
sandbox's bwrap runs traced as well (not setuid here).
"""
from __future__ import annotations

import collections
import json
import re
import sys


def kind(rec: dict) -> str:
    args = (rec.get("orig_argv") or rec["argv"])[1:]
    out: list[str] = []
    for a in args:
        if "/" in a:
            if out and out[-1] in ("--out", "--data"):
                out.pop()
            if len(out) < 3:
                out.append(a.rsplit("/", 1)[-1])
            break
        out.append(a[:40])
        if len(out) >= 4:
            break
    return " ".join(out)


def summary(log: str, strace: str | None = None, n: int = 25) -> None:
    recs = [json.loads(line) for line in open(log)]
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in recs:
        e = kinds[kind(r)]
        e[0] += 1
        e[1] += r["cpu"]
        e[2] += r["imp"]
        e[3] += r["start"]
    cpu, imp, start = (sum(r[k] for r in recs) for k in ("cpu", "imp", "start"))
    print(f"{len(recs)} Python processes wrote a line: own CPU {cpu:.1f} s, of which the interpreter's start "
          f"{start:.1f} s and imports {imp:.1f} s ({(start + imp) / cpu:.0%})")
    print(f"{'n':>5} {'CPU s':>7} {'imports':>8} {'start':>6}  kind")
    for name, e in sorted(kinds.items(), key=lambda kv: -kv[1][1])[:n]:
        print(f"{e[0]:5d} {e[1]:7.1f} {e[2]:8.1f} {e[3]:6.1f}  {name}")
    if strace:
        starts = collections.Counter(m.group(1).rsplit("/", 1)[-1] for line in open(strace)
                                     if "ENOENT" not in line and (m := re.search(r'execve\("([^"]*)"', line)))
        print("programs started (execve that succeeded or was not refused as missing):")
        print(", ".join(f"{name} {count}" for name, count in starts.most_common(n)))


if __name__ == "__main__":
    rest = sys.argv[2:]
    count = int(rest.pop()) if rest and rest[-1].isdigit() else 25
    summary(sys.argv[1], rest[0] if rest else None, count)
