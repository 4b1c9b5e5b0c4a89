"""What one grading's Nsight Compute run costs, and what makes it slower (a GPU experiment for #15).

    python3 docs/measurements/scripts/ncu_cost.py WORK OUT [--repeat 2] [--loads none,contexts]

WORK is a kept grading's work folder (``grader/run_local.py solutions --keep-work``): its
``ncu/profile_spec.json`` and the kernels handed over at the profile child's gate. Each variant
runs ncu over the same kernels, the way the grader does (its metrics, its command), outside the
sandbox, and the table says its wall time, ncu's replay passes and the bytes ncu saved and restored
around each kernel, alone and beside a load on GPU 1 (LOADS: loops of CUDA processes starting
there, as docs/measurements/scripts/gpu_trust.sh's contention step; ``light`` with the driver's 8 hardware queues per
context, ``light1`` with the one queue the grader's children open). Variants (VARIANTS):

- ``asis``: the profile child as the grader runs it (one queue, CuPy's cached blocks given back
  before the first launch: grader/children/profile.py);
- ``kept``: the cached blocks kept (the grader before 5df5fbe), so ncu saves the inputs'
  temporaries too; ``eight``: 8 hardware queues; ``rubric``, ``nostall``, ``one``: fewer metrics
  (replay passes); ``nocache``: ``--cache-control none``.

One unrecorded run comes first, then the variants take turns. The script prints the largest
relative difference per metric between each variant's first run and asis's. A load named
``KIND+kept`` is KIND with a process holding a context, idle, on GPUs 0 and 1 the whole time
(docs/measurements/scripts/context_cost.py's keeper). Writes
OUT/ncu_cost.json. Runs 15-17 (docs/measurements/2026-11-30-h200-speed-run15-20.md) ran an earlier
version, where asis kept the blocks and ``lean`` gave them back.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def child(variant: str, spec_path: str, result_path: str) -> int:
    """The profile child, with ``variant`` applied (runs under ncu)."""
    import cupy as cp

    from grader.children import profile
    from grader.children.protocol import read_spec

    if variant == "kept":
        profile.release_cached_blocks = lambda cp: None
    free, total = cp.cuda.runtime.memGetInfo()
    print(f"ncu_cost child {variant}: device memory used before the inputs {(total - free) / 2**20:.0f} MiB",
          file=sys.stderr)
    return profile.run(read_spec(spec_path), Path(result_path))


LOADS = {  # kind: (one command of the loop, how many loops side by side), all on GPU 1
    "contexts": ("python3 -c 'import cupy as cp; x = cp.zeros(1 << 26, dtype=cp.float32); x.sum().item()'", 4),
    "light": ("python3 -c 'import cupy as cp; cp.cuda.runtime.memGetInfo()'", 4),
    "light1": ("CUDA_DEVICE_MAX_CONNECTIONS=1 python3 -c 'import cupy as cp; cp.cuda.runtime.memGetInfo()'", 4),
    "racecheck": (f"compute-sanitizer --tool racecheck python3 {Path(__file__).resolve().parent / 'ncu_cost_racy.py'}", 2),
}


COUNT = Path("/tmp/ncu_cost_load_count")  # one line per load process ended


def load(kind: str) -> subprocess.Popen | None:
    """Loops of CUDA processes on GPU 1 (see LOADS); None for ``none``."""
    if kind == "none":
        return None
    one, loops = LOADS[kind]
    COUNT.unlink(missing_ok=True)
    script = f"while true; do CUDA_VISIBLE_DEVICES=1 {one} >/dev/null 2>&1; echo >> {COUNT}; done"
    return subprocess.Popen(["bash", "-c", " & ".join([f"( {script} )"] * loops) + "; wait"],
                            start_new_session=True)


# variant: (the child's variant, ncu's extra options, which metrics: all, rubric, nostall, one; extra env)
VARIANTS: dict[str, tuple[str, list[str], str, dict[str, str]]] = {
    "asis": ("asis", [], "all", {}),
    "kept": ("kept", [], "all", {}),
    "eight": ("asis", [], "all", {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    "nocache": ("asis", ["--cache-control", "none"], "all", {}),
    "rubric": ("asis", [], "rubric", {}),
    "nostall": ("asis", [], "nostall", {}),
    "one": ("asis", [], "one", {}),
}


def pick(metrics: list[str], which: str, rubric) -> list[str]:
    from grader.profile.ncu import metric_names

    if which == "rubric":
        names: list[str] = []
        for stage in rubric.stages:
            for item in stage.items:
                if item.kind == "ncu":
                    names += metric_names(str(item.params["expr"])) + metric_names(str(item.params["value"]))
        return [m for m in metrics if m in names]
    if which == "nostall":
        return [m for m in metrics if "warp_issue_stalled" not in m]
    if which == "one":
        return ["gpu__time_duration.sum"]
    return metrics


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        return child(*sys.argv[2:5])
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--loads", default="none,contexts")
    ap.add_argument("--variants", default="asis,kept")
    ap.add_argument("--plan", default="", help="LOAD:VARIANT,VARIANT;LOAD:... (instead of --loads, --variants)")
    args = ap.parse_args()

    from grader.compile import toolchain
    from grader.gpu.ncu_run import _wanted_metrics
    from grader.profile.ncu import NcuTable, command, parse_raw_csv
    from grader.rubric.load import load_rubric
    from grader.sandbox.launch import child_env

    ncu_dir = args.work / "ncu"
    gated = json.loads((ncu_dir / "profile_spec.json").read_text())
    stages = json.loads((ncu_dir / "profile_result.json.launch.go").read_text())["stages"]
    spec = {"n": gated["n"], "seed": gated["seed"], "stages": stages}
    exp = args.out / "ncu-cost"
    exp.mkdir(parents=True, exist_ok=True)
    spec_path = exp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    rubric = load_rubric(ROOT / "rubric.yaml")
    metrics, _absent, _chip = _wanted_metrics(rubric, {"cc": "9.0"})
    tool = toolchain.find_ncu()
    plan = ([(part.split(":")[0], part.split(":")[1].split(",")) for part in args.plan.split(";")] if args.plan
            else [(kind, args.variants.split(",")) for kind in args.loads.split(",")])
    env = child_env(exp / "cupy-cache")
    env["CUDA_VISIBLE_DEVICES"] = "0"
    rows: list[dict] = []
    tables: dict[str, NcuTable] = {}  # each variant's first run with every metric

    def once(variant: str) -> tuple[float, subprocess.CompletedProcess, str]:
        child_variant, extra, which, more_env = VARIANTS[variant]
        wrap = command(str(tool.path), [s["kernel"] for s in stages], pick(metrics, which, rubric), "none")
        wrap[1:1] = extra
        cmd = [*wrap, sys.executable, str(Path(__file__).resolve()), "child", child_variant,
               str(spec_path), str(exp / f"result-{variant}.json")]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env={**env, **more_env}, cwd=exp, timeout=300)
        return time.monotonic() - t0, p, which

    # The first ncu run of a machine is slower (run 16: 8.1 s, then 6.6-6.8 s): one run first,
    # unrecorded, then the variants in turn (A B A B), so no variant gains from coming later.
    once(plan[0][1][0])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from context_cost import Keeper

    for kind, variants in plan:
        keepers = [Keeper("0"), Keeper("1")] if kind.endswith("+kept") else []
        background = load(kind.removesuffix("+kept"))
        if background is not None:
            time.sleep(3)
        started = time.monotonic()
        try:
            for k in range(args.repeat):
                for variant in variants:
                    wall, p, which = once(variant)
                    table = parse_raw_csv(p.stdout)
                    if which == "all":
                        tables.setdefault(variant, table)
                    used = [ln for ln in p.stderr.splitlines() if ln.startswith("ncu_cost child")]
                    row = {"load": kind, "variant": variant, "run": k + 1, "wall_s": round(wall, 2),
                           "rc": p.returncode, "kernels": len(table),
                           "passes": sorted({r.get("profiler__replayer_passes") for r in table.values()}),
                           "backed_up_mb": [round((r.get("profiler__replayer_bytes_mem_backed_up.sum") or 0) / 2**20)
                                            for r in table.values()],
                           "child": used[-1] if used else p.stderr[-300:],
                           "problem": table.problem}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            if background is not None and COUNT.exists():
                made = len(COUNT.read_text().splitlines())
                print(json.dumps({"load": kind, "processes_per_s": round(made / (time.monotonic() - started + 3), 2)}))
            if background is not None:
                os.killpg(background.pid, signal.SIGKILL)
                background.wait()
            for keeper in keepers:
                keeper.close()
    diffs: dict[str, tuple[float, str]] = {}  # "variant metric" -> (largest relative difference, where)
    base = tables.get("asis")
    for variant, tb in tables.items():
        if not base or variant == "asis":
            continue
        for kernel, ra in base.items():
            rb = tb.get(kernel) or {}
            for m in metrics:
                a, b = ra.get(m), rb.get(m)
                if isinstance(a, float) and isinstance(b, float) and max(abs(a), abs(b)) > 0:
                    d = abs(a - b) / max(abs(a), abs(b))
                    key = f"{variant} {m}"
                    if d > diffs.get(key, (0.0, ""))[0]:
                        diffs[key] = (d, f"{kernel}: {a:g} vs {b:g}")
    worst = sorted(diffs.items(), key=lambda kv: -kv[1][0])[:40]
    print("largest relative differences from asis's first run:")
    for m, (d, where) in worst:
        print(f"  {m}: {d:.3%} ({where})")
    (args.out / "ncu_cost.json").write_text(json.dumps({"rows": rows, "diffs": diffs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
