#!/usr/bin/env python3
"""What ncu's replay passes cost apart from the kernels, and whether other GPU work changes its readings (#32).

    python3 docs/measurements/scripts/ncu_overhead.py WORK OUT

WORK is a kept grading's work folder (``python -m grader grade solutions --keep-work``): its profile
child's go message names the seven kernels the grading profiled. Every run uses the grader's ncu
command (grader/profile/ncu.py: command) and metrics. Runs:

- ``timed:<app>``: ncu without ``--csv``, so that it prints one ``==PROF== Profiling "k" ... N passes``
  line per kernel; the time between two lines is what that kernel's passes cost. ``<app>`` is the
  profiled program: ``graded`` (the grader's profile child, as a grading runs it), ``lean`` (this
  script's child: only the running kernel's inputs are allocated, freed after it), ``ballast`` (the
  grader's inputs plus 8 GiB allocated and touched), ``trivial`` (one thread writing one float, launched
  seven times, 4 KiB allocated) and ``trivial-one`` (the same with one metric, one pass).
- ``values:idle`` and ``values:busy``: the grader's profile child with ``--csv``; ``busy`` with another
  process multiplying 4096 x 4096 float32 matrices on the same GPU the whole time. Every metric of
  every kernel is compared: the largest relative differences are printed.

Writes OUT/ncu_overhead.json and prints one line per run. With ``--start`` it only times a profile
child's start, step by step, under ncu and without it, three times each (OUT/ncu_start.json).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

PROFILING = re.compile(r'==PROF== Profiling "([^"]+)"')
PASSES = re.compile(r"(\d+) pass")
BUSY = """
import sys, time
import cupy as cp
a = cp.random.rand(4096, 4096, dtype=cp.float32)
end = time.time() + float(sys.argv[1])
print("busy", flush=True)
k = 0
while time.time() < end:
    a = (a @ a) * 1e-3
    k += 1
    cp.cuda.Device().synchronize()
print("products", k, flush=True)
"""


def stamps(spec_path: Path) -> int:
    """The ``start`` runs' program: seconds since the parent spawned it (``T0``, wall clock) at each step
    of a profile child's start: Python up, NumPy and CuPy imported, the driver initialised, the context
    made, the inputs of every kind made, the seven modules loaded."""
    import os

    t0 = float(os.environ["T0"])
    marks = [("python", time.time() - t0)]
    import cupy as cp
    import numpy  # noqa: F401
    marks.append(("imports", time.time() - t0))
    cp.cuda.runtime.getDeviceCount()
    marks.append(("driver", time.time() - t0))
    cp.zeros(1).sum()
    cp.cuda.Device().synchronize()
    marks.append(("context", time.time() - t0))
    from grader.children.inputs import make_inputs_xp

    spec = json.loads(spec_path.read_text())
    kept = [make_inputs_xp(cp, spec["n"], spec["seed"], kind) for kind in dict.fromkeys(s["inputs"] for s in spec["stages"])]
    cp.cuda.Device().synchronize()
    marks.append(("inputs", time.time() - t0))
    for st in spec["stages"]:
        cp.RawModule(path=st["cubin"]).get_function(st["kernel"])
    marks.append(("modules", time.time() - t0))
    del kept
    print("STAMPS " + json.dumps(marks), flush=True)
    return 0


def child(spec_path: Path, mode: str) -> int:
    """The profiled program of the ``lean``, ``ballast`` and ``trivial`` runs."""
    import cupy as cp
    import numpy as np

    from grader.children.inputs import make_inputs_xp
    from grader.children.protocol import launch_grid

    spec = json.loads(spec_path.read_text())
    n, seed = spec["n"], spec["seed"]
    if mode == "trivial":
        k = cp.RawKernel(r'extern "C" __global__ void trivial(float* x) { x[threadIdx.x] = 1.0f; }', "trivial")
        x = cp.zeros(1024, dtype=cp.float32)
        for _ in range(7):
            k((1,), (1,), (x,))
            cp.cuda.Device().synchronize()
        return 0
    ballast = None
    if mode == "ballast":
        ballast = cp.ones(2 * 1024**3, dtype=cp.float32)  # 8 GiB, written
        cp.cuda.Device().synchronize()
    kept: dict[str, tuple] = {}
    for st in spec["stages"]:
        kernel = cp.RawModule(path=st["cubin"]).get_function(st["kernel"])
        lp = st["launch"]
        if lp["smem"] > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = lp["smem"]
        if mode == "lean" or st["inputs"] not in kept:
            kept[st["inputs"]] = make_inputs_xp(cp, n, seed, st["inputs"])
        a, b = kept[st["inputs"]]
        c = cp.full((n, n), cp.nan, dtype=cp.float32)
        if mode == "lean":
            cp.get_default_memory_pool().free_all_blocks()
        if st.get("operands") == "tensor_maps":
            from grader.children.tma import MapLauncher
            from grader.evidence.protocol import Kernel
            from grader.records import from_jsonable

            MapLauncher(from_jsonable(Kernel, st))(kernel, a, b, c, n)
        else:
            kernel(launch_grid(n, lp["tile"]), (lp["block"][0], lp["block"][1], 1), (a, b, c, np.int32(n)),
                   shared_mem=lp["smem"])
        cp.cuda.Device().synchronize()
        del c
        if mode == "lean":
            kept.clear()
            del a, b
            cp.get_default_memory_pool().free_all_blocks()
    del ballast
    return 0


def main() -> int:
    if sys.argv[1] == "child":
        return child(Path(sys.argv[2]), sys.argv[3])
    if sys.argv[1] == "stamps":
        return stamps(Path(sys.argv[2]))
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    only_start = "--start" in sys.argv[3:]
    from grader.compile import toolchain
    from grader.gpu.ncu_run import wanted_metrics
    from grader.profile.ncu import command, parse_raw_csv
    from grader.rubric.load import load_rubric
    from grader.sandbox.launch import child_env

    gated = json.loads((work / "ncu" / "profile_spec.json").read_text())
    stages = json.loads((work / "ncu" / "profile_result.json.launch.go").read_text())["stages"]
    exp = out / "ncu-overhead"
    exp.mkdir(parents=True, exist_ok=True)
    spec_path = exp / "spec.json"
    spec_path.write_text(json.dumps({"n": gated["n"], "seed": gated["seed"], "stages": stages}))
    metrics, _absent, _chip = wanted_metrics(load_rubric(ROOT / "rubric.yaml"), {"cc": [9, 0]})
    tool = str(toolchain.find_ncu().path)
    env = child_env(exp / "cupy-cache")
    kernels = [s["kernel"] for s in stages]

    def run(name: str, app: str, csv: bool, chosen: list[str]) -> dict:
        wrap = command(tool, ["trivial"] if app == "trivial" else kernels, chosen, "none")
        if not csv:
            wrap = [w for w in wrap if w != "--csv"]
        if app == "trivial":
            wrap[wrap.index("--launch-count") + 1] = "7"
        prog = ([sys.executable, "-m", "grader.children", "profile", str(spec_path), str(exp / f"r-{name}.json")]
                if app == "graded" else [sys.executable, __file__, "child", str(spec_path), app])
        lines: list[tuple[float, str]] = []
        t0 = time.monotonic()
        p = subprocess.Popen([*wrap, *prog], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             cwd=ROOT)
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(p.stderr.read()))  # type: ignore[union-attr]
        reader.start()
        text = []
        for line in p.stdout:  # type: ignore[union-attr]
            lines.append((time.monotonic() - t0, line.rstrip()))
            text.append(line)
        p.wait()
        reader.join()
        wall = time.monotonic() - t0
        marks = [(t, m.group(1), int(pm.group(1)) if (pm := PASSES.search(s)) else None)
                 for t, s in lines if (m := PROFILING.search(s))]
        per = [{"kernel": k[:40], "passes": np_, "at_s": round(t, 3),
                "seconds": round(t - marks[i - 1][0], 3) if i else None} for i, (t, k, np_) in enumerate(marks)]
        row = {"run": name, "wall_s": round(wall, 3), "rc": p.returncode, "per_kernel": per,
               "first_at_s": round(marks[0][0], 3) if marks else None,
               "last_at_s": round(marks[-1][0], 3) if marks else None,
               "tail": "".join(err)[-600:] if p.returncode else ""}
        if csv:
            row["table"] = parse_raw_csv("".join(text))
        return row

    def start(under_ncu: bool) -> dict:
        wrap = command(tool, kernels, metrics, "none") if under_ncu else []
        t0 = time.time()
        p = subprocess.run([*wrap, sys.executable, __file__, "stamps", str(spec_path)], capture_output=True, text=True,
                           env={**env, "T0": repr(t0)}, cwd=ROOT)
        wall = time.time() - t0
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("STAMPS ")), "")
        marks = dict(json.loads(line[7:])) if line else {}
        row = {"under_ncu": under_ncu, "wall_s": round(wall, 3), "rc": p.returncode,
               "marks": {k: round(v, 3) for k, v in marks.items()}, "tail": p.stderr[-300:] if not marks else ""}
        print(f"start {'under ncu' if under_ncu else 'plain    '}: " + ", ".join(f"{k} {v:.3f}" for k, v in marks.items())
              + f"; exit {wall:.3f} s, rc {p.returncode} {row['tail']}", flush=True)
        return row

    if only_start:
        starts = [start(u) for _ in range(3) for u in (True, False)]
        (out / "ncu_start.json").write_text(json.dumps(starts, indent=1))
        return 0
    rows = []
    one = ["gpu__time_duration.sum"]
    warm = run("warm", "graded", True, one)
    print(f"warm-up: {warm['wall_s']} s rc {warm['rc']}", flush=True)
    for rep in (1, 2):
        for label, app, chosen in (("graded", "graded", metrics), ("lean", "lean", metrics),
                                   ("ballast", "ballast", metrics), ("trivial", "trivial", metrics),
                                   ("trivial-one", "trivial", one), ("graded-one", "graded", one)):
            r = run(f"timed:{label}:{rep}", app, False, chosen)
            rows.append(r)
            span = (r["last_at_s"] or 0) - (r["first_at_s"] or 0)
            print(f"{r['run']:22s} wall {r['wall_s']:6.2f} s, first kernel done {r['first_at_s']}, first->last "
                  f"{span:.2f} s, rc {r['rc']}: " + " ".join(f"{k['kernel'][:10]}={k['seconds']}({k['passes']})"
                                                           for k in r["per_kernel"]) + r["tail"][-300:], flush=True)
    idle = run("values:idle", "graded", True, metrics)
    busy_proc = subprocess.Popen([sys.executable, "-c", BUSY, "60"], stdout=subprocess.PIPE, text=True, env=env)
    assert busy_proc.stdout is not None
    busy_proc.stdout.readline()
    time.sleep(1.0)
    busy = run("values:busy", "graded", True, metrics)
    busy_proc.terminate()
    products = busy_proc.communicate(timeout=30)[0].strip()
    idle2 = run("values:idle2", "graded", True, metrics)
    compare = []
    for other_name, other in (("busy", busy), ("idle2", idle2)):
        worst: list[tuple[float, str, str, object, object]] = []
        for kern, vals in idle["table"].items():
            orow = other["table"].get(kern) or {}
            for m in metrics:
                a, b = vals.get(m), orow.get(m)
                if isinstance(a, float) and isinstance(b, float):
                    rel = abs(a - b) / max(abs(a), abs(b), 1e-12)
                    worst.append((rel, kern[:24], m, a, b))
        worst.sort(reverse=True)
        compare.append({"against": other_name, "worst": [list(w) for w in worst[:25]],
                        "wall_s": other["wall_s"], "kernels": len(other["table"])})
        print(f"values idle vs {other_name} (wall {other['wall_s']} s, {len(other['table'])} kernels; idle "
              f"{idle['wall_s']} s, {len(idle['table'])} kernels): largest relative differences", flush=True)
        for rel, kern, m, a, b in worst[:12]:
            print(f"  {rel:8.4f} {kern:24s} {m}: {a} vs {b}", flush=True)
    print(f"the busy process: {products}", flush=True)
    for r in (idle, busy, idle2):
        r["table"] = {k: dict(v) for k, v in r["table"].items()}
    (out / "ncu_overhead.json").write_text(json.dumps({"timed": rows, "values": [idle, busy, idle2],
                                                       "compare": compare}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
