#!/usr/bin/env python3
"""What racecheck costs and what it still catches: each shared-memory stage under compute-sanitizer
racecheck, over the whole size-n grid, over the corner of it that Sanitizer.racecheck_blocks
launches and over its first block alone, for the reference kernels and for kernels with a barrier removed.

    OUT=/dir python3 docs/measurements/scripts/racecheck_probe.py      # on a GPU machine, from the repository root

The race cases: tests/submissions/race_missing_sync (stage 3), and the references of stages 4, 5 and
6 with the barrier that protects a shared tile from being overwritten while others read it taken out
(made here, in a scratch folder). Each run is the grader's own sanitizer child through
grader/gpu/sanitize.py: run_tool, at the rubric's sanitizer size. Prints one JSON object (and writes it
to $OUT/racecheck_probe.json): per kernel and grid, the seconds and how many hazards were reported
(-1: no verdict), and the wall time of the references' runs side by side, as a grading runs them.

``TOGETHER=1`` measures instead one child for every shared-memory stage (the launcher child takes a
list of stages; one compute-sanitizer, one context) against one child per stage side by side, at the
rubric's corner grid, for the references and for the references with stage 3 replaced by its race
case: the seconds, and each kernel's hazards as the findings name it (the kernel names differ by
stage, so a report's function names say which stage raced).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from grader.children.protocol import launch_grid  # noqa: E402
from grader.compile import toolchain  # noqa: E402
from grader.compile.stage import compile_stage  # noqa: E402
from grader.gpu.sanitize import OUTPUT_LIMIT, SEED, _wrap, parse_sanitizer, run_tool  # noqa: E402
from grader.grading import StageOutcome  # noqa: E402
from grader.rubric.load import load_rubric  # noqa: E402
from grader.sandbox.launch import launch  # noqa: E402

SHARED = ("tiled", "blocktiling_1d", "blocktiling_2d", "wmma", "hopper")
# Stage -> (the reference file's line to drop, which occurrence): the barrier after the tile is read
# (stage 4), the one per k-step of the double-buffered loop (stage 5), the one before a pipeline
# slot is refilled (stage 6). Stage 3's case is a submission of its own.
BARRIER_CUTS = {"blocktiling_1d": ("__syncthreads();  // everyone done reading", 1),
                "blocktiling_2d": ("__syncthreads();", 2), "wmma": ("__syncthreads();", 1)}


def race_case(stage, work: Path) -> Path:
    """A submission folder holding the stage's reference with one barrier taken out."""
    if stage.id == "tiled":
        return ROOT / "tests" / "submissions" / "race_missing_sync"
    needle, nth = BARRIER_CUTS[stage.id]
    lines = (ROOT / "solutions" / stage.file).read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip().startswith(needle)]
    assert len(hits) >= nth, f"{stage.file}: barrier {needle!r} #{nth} not found"
    del lines[hits[nth - 1]]
    folder = work / "race" / stage.id
    shutil.rmtree(folder, ignore_errors=True)
    (folder / stage.file).parent.mkdir(parents=True)
    (folder / stage.file).write_text("".join(lines))
    return folder


def main() -> int:
    rubric = load_rubric(ROOT / "rubric.yaml")
    out = Path(os.environ.get("OUT", "/tmp/racecheck-probe"))
    work = Path("/tmp/racecheck-probe-work")
    shutil.rmtree(work, ignore_errors=True)
    nvcc, tool = toolchain.find_nvcc(), toolchain.find_compute_sanitizer()
    n, limit, corner = rubric.sanitizer.n, rubric.sanitizer.timeout_s, rubric.sanitizer.racecheck_blocks or (2, 2)

    def spec_of(stage, folder: Path, where: str) -> dict:
        c = compile_stage(stage, folder, work / where / stage.id, nvcc, ["-arch=sm_90a"], rubric,
                          [*rubric.correctness_sizes, stage.bench.n])
        assert c.ok, f"{where} {stage.id}: {c.problem}"
        return {"id": stage.id, **StageOutcome(stage=stage, compile=c).launch_spec()}

    stages = [st for st in rubric.stages if st.id in SHARED]
    cases = {"reference": [spec_of(st, ROOT / "solutions", "ref") for st in stages],
             "race": [spec_of(st, race_case(st, work), "race-build") for st in stages if st.id != "hopper"]}

    def one(spec: dict, where: str, blocks) -> dict:
        t0 = time.monotonic()
        r = run_tool("racecheck", tool, spec, n, work / where / spec["id"], limit, blocks=blocks)
        grid = list(launch_grid(n, spec["launch"]["tile"])[:2])
        return {"stage": spec["id"], "grid": grid, "blocks": list(blocks) if blocks else grid,
                "seconds": round(time.monotonic() - t0, 2),
                "hazards": len(r.findings) if not r.reason else -1, "reason": r.reason,
                "first": r.findings[0].brief() if r.findings else ""}

    if os.environ.get("TOGETHER") == "1":
        return together(cases, tool, n, limit, corner, work, out)
    report: dict = {"n": n, "corner": list(corner), "runs": []}
    grids = [(None, "whole grid"), (corner, "corner"), ((1, 1), "one block")]
    for kind, specs in cases.items():
        for blocks, label in grids:
            for spec in specs:
                report["runs"].append({"case": kind, "grid": label, **one(spec, f"{kind}-{label[:5]}", blocks)})
    for blocks, label in grids:
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(cases["reference"])) as pool:
            list(pool.map(one, cases["reference"], [f"side-{label[:5]}"] * len(cases["reference"]), [blocks] * len(cases["reference"])))
        report[f"side_by_side_s ({label})"] = round(time.monotonic() - t0, 2)
    out.mkdir(parents=True, exist_ok=True)
    (out / "racecheck_probe.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


def together(cases: dict, tool, n: int, limit: float, corner, work: Path, out: Path) -> int:
    """One sanitizer child for all shared-memory stages against one per stage side by side (TOGETHER=1)."""
    refs = cases["reference"]
    raced = [cases["race"][0], *refs[1:]]  # stage 3's race case, the other stages' references
    report: dict = {"n": n, "corner": list(corner), "runs": []}

    def one_child(specs: list[dict], where: str) -> dict:
        t0 = time.monotonic()
        # No --kernel-name filter: it takes one name; the child loads the stages' cubins and nothing else.
        child = launch("sanitize", {"n": n, "seed": SEED, "stages": specs, "blocks": list(corner)},
                       work / where, limit * len(specs), OUTPUT_LIMIT, wrap=_wrap("racecheck", tool),
                       name="racecheck")
        text = child.proc.stdout + "\n" + child.proc.stderr
        findings = parse_sanitizer(text)
        per_kernel = {s["kernel"]: sum(1 for f in findings if any(fn == s["kernel"] for fn, _f, _l in f.locations))
                      for s in specs}
        return {"seconds": round(time.monotonic() - t0, 2), "rc": child.proc.returncode,
                "failures": (child.result or {}).get("failures"), "hazards_by_kernel": per_kernel,
                "unattributed": sum(1 for f in findings if not any(fn in per_kernel for fn, _f, _l in f.locations)),
                "first": findings[0].brief() if findings else ""}

    def side_by_side(specs: list[dict], where: str) -> dict:
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(specs)) as pool:
            runs = list(pool.map(lambda s: run_tool("racecheck", tool, s, n, work / where / s["id"], limit,
                                                    blocks=corner), specs))
        return {"seconds": round(time.monotonic() - t0, 2),
                "hazards_by_stage": {r.stage: (len(r.findings) if not r.reason else -1) for r in runs}}

    for k in range(2):  # the two ways take turns
        for label, specs in (("reference", refs), ("race in stage 3", raced)):
            report["runs"].append({"case": label, "way": "one child", "turn": k + 1,
                                   **one_child(specs, f"one-{k}-{label[:4]}")})
            report["runs"].append({"case": label, "way": "side by side", "turn": k + 1,
                                   **side_by_side(specs, f"side-{k}-{label[:4]}")})
    out.mkdir(parents=True, exist_ok=True)
    (out / "racecheck_together.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
