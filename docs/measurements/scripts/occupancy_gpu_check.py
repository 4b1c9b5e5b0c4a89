#!/usr/bin/env python3
"""Check the occupancy grading on a GPU machine: solutions/ full marks, starter/ zero.

Run from the repository root on the H200:

    python3 docs/measurements/scripts/occupancy_gpu_check.py [--out DIR] [--no-ncu]

1. Grades the occupancy exercises of solutions/ and starter/ (only those; through
   grader.occupancy.run.grade_occupancy_submission with the repository's rubric.yaml)
   and prints every item.
2. Prints the solution program's JSON as tables (the Ex 4 sweeps with the program's
   and the grader's times, Ex 2, Ex 6) and the grader's timings of heavy per cap, to
   confirm the solution's measured answers (Ex 4 fastest points, Ex 6 fastest cap).
3. Profiles the solution's `work` kernel with Nsight Compute (Occupancy,
   SchedulerStats, WarpStateStats) at block 32 with 12 KiB and 6 KiB of dynamic
   shared memory (Ex 3's runs) and prints the numbers, to confirm Ex 3's answers.

Output is compact (it is read from the last ~12,000 characters). Everything in full
goes to DIR (--out, else $OUT/occupancy_check, else ./occupancy-check-out):
check_report.txt, each submission's work folder (occupancy_measurements.json, the
sweep plot), ncu_work_<k>kib.txt.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

# Ex 3's launch for ncu: the reference program's work per launch.
LAUNCH_TOTAL_THREADS = 1 << 20
LAUNCH_ITERS = 256
LAUNCH_N = 1 << 20
NCU_SECTIONS = ("Occupancy", "SchedulerStats", "WarpStateStats")
NCU_TIMEOUT_S = 180
# Items that need the GPU: for the starter they must fail with a clear message, not crash.
GPU_ITEMS = ("ex2.device_props", "ex2.program_api_blocks", "ex2.program_occupancy",
             "ex2.program_best_block", "ex4.smem_sweep_occupancy", "ex4.block_sweep_occupancy",
             "ex4.equal_work", "ex4.smem_conclusion", "ex4.block_conclusion", "ex6.fastest_claim")

_full: list[str] = []


def say(line: str = "", full: str | None = None) -> None:
    print(line, flush=True)
    _full.append(line if full is None else full)


def _fmt(value, digits: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.{digits}f}" if digits else f"{value:g}"


def _first(msg: str, width: int) -> str:
    text = " / ".join(x.strip() for x in (msg or "").splitlines() if x.strip())
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------------------------------
def launch(cubin: str, smem: int, block: int) -> int:
    """Child mode (under ncu): one launch of `work` from CUBIN."""
    import cupy as cp
    import numpy as np

    kern = cp.RawModule(path=cubin).get_function("work")
    if smem > 48 * 1024:
        kern.max_dynamic_shared_size_bytes = smem
    inp = cp.full(LAUNCH_N, 0.5, dtype=cp.float32)
    out = cp.zeros(LAUNCH_N, dtype=cp.float32)
    grid = -(-LAUNCH_TOTAL_THREADS // block)
    kern((grid,), (block,), (inp, out, np.int32(LAUNCH_N), np.int32(LAUNCH_ITERS)), shared_mem=smem)
    cp.cuda.Device().synchronize()
    print(f"launched work<<<{grid}, {block}, {smem}>>>")
    return 0


def load_rubric_with_occupancy():
    from grader.rubric.load import load_rubric

    rubric = load_rubric(ROOT / "rubric.yaml")
    if rubric.occupancy is None:
        raise SystemExit("rubric.yaml has no occupancy section: nothing to check")
    return rubric, "rubric.yaml's occupancy section"


def grade_one(name: str, rubric, env, out: Path) -> tuple[list, Path, float]:
    from grader.occupancy.run import grade_occupancy_submission

    work = out / name
    t0 = time.monotonic()
    items = grade_occupancy_submission(ROOT / name, rubric, env, work, lambda m: None)
    return items, work, time.monotonic() - t0


def print_items(name: str, items, seconds: float, brief: bool) -> None:
    from collections import Counter

    score, total = sum(i.score for i in items), sum(i.max_score for i in items)
    counts = Counter(i.status for i in items)
    say(f"== {name}: {score:g}/{total:g} points in {seconds:.1f} s; "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for i in items:
        full = f"  {i.status:13} {i.score:g}/{i.max_score:g} {i.item}: {i.message}"
        if brief and i.status == "failed" and i.score == 0:
            _full.append(full)
            continue
        if i.status in ("passed", "manual"):
            msg = "" if i.message in ("correct", "answered; graded by hand") else ": " + _first(i.message, 60)
            say(f"  {i.status[:6]:6} {i.score:g}/{i.max_score:g} {i.item}{msg}", full)
        else:
            say(f"  {i.status[:6]:6} {i.score:g}/{i.max_score:g} {i.item}: {_first(i.message, 400)}", full)
    if brief:
        gpu = [i for i in items if i.item in GPU_ITEMS and i.status == "failed"]
        for i in gpu:
            say(f"  (failed as expected) {i.item}: {_first(i.message, 80)}", f"  {i.item}: {i.message}")


def print_tables(work: Path) -> None:
    try:
        log = json.loads((work / "occupancy_measurements.json").read_text())
    except (OSError, ValueError) as exc:
        say(f"no measurements file in {work}: {exc}")
        return
    steps = log.get("steps", {})
    say(f"-- timings: {json.dumps(steps)}; total {log.get('seconds')} s")
    prog = log.get("program") or {}
    if log.get("program_problem"):
        say(f"-- program problem: {_first(log['program_problem'], 300)}")
    _full.append("-- program JSON:\n" + json.dumps(prog, indent=1))
    dev = prog.get("device") or {}
    say(f"-- program: {dev.get('name')} cc {dev.get('cc')}, {dev.get('sm_count')} SMs; "
        f"work {json.dumps(prog.get('work'))}")
    say(f"   ex2 {json.dumps(prog.get('ex2'))}")
    say(f"   ex6 {json.dumps(prog.get('ex6'))}")
    meas = log.get("measurements") or {}
    api = meas.get("api") or {}
    say(f"-- grader API: work {json.dumps(api.get('work'))}, potential {json.dumps(api.get('potential'))}")
    series = log.get("plot_series") or {}
    ex4 = prog.get("ex4") or {}
    for name, label in (("smem", "KiB"), ("block", "block")):
        rows = [r for r in (ex4.get(f"{name}_sweep") or []) if isinstance(r, dict)]
        s = series.get(name) or {}
        say(f"-- {name} sweep: {label:>5} | prog blocks occ% ms | grader occ% ms | grid*block*iters")
        for k, x in enumerate(s.get("x", [])):
            key = "smem" if name == "smem" else "block"
            r = next((r for r in rows if r.get(key) == x), {})
            work_total = None
            if all(isinstance(r.get(f), int) for f in ("grid", "block", "iters")):
                work_total = r["grid"] * r["block"] * r["iters"]
            occ = r.get("occupancy")
            say(f"   {_fmt(x / 1024 if name == 'smem' else x, 0):>5} | {_fmt(r.get('blocks'), 0):>4} "
                f"{_fmt(100 * occ if isinstance(occ, (int, float)) else None, 2):>6} {_fmt(r.get('time_ms'), 4):>8} | "
                f"{_fmt(s['occupancy_pct'][k], 2):>6} {_fmt(s['grader_ms'][k], 4):>8} | {work_total}")
    heavy = meas.get("heavy_times_ms") or {}
    ptxas = meas.get("ptxas") or {}
    attrs = (log.get("gpu_report") or {}).get("heavy_attributes") or {}
    say("-- heavy per cap: cap | ptxas regs spill_st spill_ld | loaded regs local | grader ms")
    for cap in sorted(set(ptxas) | set(heavy) | set(attrs), key=int, reverse=True):
        p, a = ptxas.get(cap) or {}, attrs.get(cap) or {}
        say(f"   {cap:>4} | {_fmt(p.get('registers'), 0):>4} {_fmt(p.get('spill_stores'), 0):>5} "
            f"{_fmt(p.get('spill_loads'), 0):>5} | {_fmt(a.get('registers'), 0):>4} {_fmt(a.get('local_bytes'), 0):>5} | "
            f"{_fmt(heavy.get(cap), 4)}")
    rep = log.get("gpu_report") or {}
    if rep.get("errors") or rep.get("notes"):
        say(f"-- gpu child errors {json.dumps(rep.get('errors'))[:600]} notes {json.dumps(rep.get('notes'))[:300]}")
    say(f"-- child seconds {json.dumps(rep.get('seconds'))}, rounds sweep {rep.get('sweep_rounds')} "
        f"heavy {rep.get('heavy_rounds')}; plot: {log.get('plot')}")
    if log.get("answers_notes"):
        say(f"-- answers notes: {log['answers_notes'][:5]}")


_KEEP = re.compile(r"(Block Limit|Occupancy|Active Warps|Warps Per Scheduler|Eligible|Issued|No Eligible|"
                   r"One or More|Warp Cycles|Registers Per Thread|Shared Memory|Waves|Threads|Block Size|"
                   r"Grid Size|Avg\.|Stall|Duration)", re.I)


def run_ncu(cubin: Path, out: Path, block: int, sizes_kib: list[float]) -> None:
    from grader.compile.toolchain import find_ncu

    ncu = find_ncu()
    if ncu.path is None:
        say(f"-- ncu: not found ({ncu.reason})")
        return
    say(f"-- ncu {ncu.version}: work at block {block}, grid {LAUNCH_TOTAL_THREADS // block}, iters {LAUNCH_ITERS}")
    for kib in sizes_kib:
        smem = int(kib * 1024)
        cmd = [ncu.path, "--clock-control", "none", "-k", "regex:^work$", "-c", "1"]
        for sec in NCU_SECTIONS:
            cmd += ["--section", sec]
        cmd += [sys.executable, str(Path(__file__).resolve()), "--launch", str(cubin), str(smem), str(block)]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NCU_TIMEOUT_S, cwd=ROOT)
            text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            say(f"   {kib:g} KiB: ncu timed out after {NCU_TIMEOUT_S} s")
            continue
        (out / f"ncu_work_{kib:g}kib.txt").write_text(text)
        say(f"   -- {kib:g} KiB ({time.monotonic() - t0:.1f} s, exit {proc.returncode}):")
        kept = 0
        for line in text.splitlines():
            s = line.strip()
            if not s or set(s) <= set("- ") or s.startswith(("Metric Name", "==PROF==", "OPT", "INF", "WRN")):
                continue
            if _KEEP.search(s) and re.search(r"\d\s*$", s):
                say("      " + re.sub(r"\s{2,}", " | ", s))
                kept += 1
        if not kept:
            say("      (no metric lines; tail) " + _first(text[-600:], 600))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--launch", nargs=3, metavar=("CUBIN", "SMEM", "BLOCK"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.launch:
        return launch(args.launch[0], int(args.launch[1]), int(args.launch[2]))
    out = args.out or (Path(os.environ["OUT"]) / "occupancy_check" if os.environ.get("OUT")
                       else ROOT / "occupancy-check-out")
    out.mkdir(parents=True, exist_ok=True)
    from grader.pipeline import detect_environment

    rubric, note = load_rubric_with_occupancy()
    cfg = rubric.occupancy
    env = detect_environment(rubric)
    dev = env.device or {}
    say(f"device: {dev.get('name')} cc {dev.get('cc')} ({env.device_reason or 'ok'}); nvcc "
        f"{getattr(env.nvcc, 'version', None)}; arch {env.arch_flags}; using {note}")
    sol, sol_work, sol_s = grade_one("solutions", rubric, env, out)
    print_items("solutions", sol, sol_s, brief=False)
    print_tables(sol_work)
    st, _, st_s = grade_one("starter", rubric, env, out)
    print_items("starter", st, st_s, brief=True)
    bad = [i.item for i in sol if i.status not in ("passed", "manual")
           or (i.status == "passed" and i.score != i.max_score)]
    starter_points = sum(i.score for i in st)
    if not args.no_ncu and env.has_gpu:
        cubin = sol_work / "build" / "occ_default.cubin"
        if cubin.is_file():
            run_ncu(cubin, out, cfg.ex3.block_size, [r / 1024 for r in cfg.ex3.runs])
        else:
            say(f"-- ncu skipped: {cubin} was not built")
    say(f"VERDICT: solutions {'FULL MARKS' if not bad else 'NOT full: ' + ', '.join(bad)}; "
        f"starter {starter_points:g} points{' (expected 0)' if starter_points else ''}; full report "
        f"{out / 'check_report.txt'}")
    (out / "check_report.txt").write_text("\n".join(_full) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
