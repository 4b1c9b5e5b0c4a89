#!/usr/bin/env python3
"""How racecheck's time splits: each shared-memory reference stage under compute-sanitizer alone,
all of them side by side (as a grading runs them), and all in one sanitizer process.

    OUT=/dir python3 tools/racecheck_probe.py      # on a GPU machine, from the repository root

Each run is the grader's own sanitizer child (grader/children/sanitize.py) through
grader/run/sanitize.py: run_tool, at the rubric's sanitizer size. Prints one JSON object (and writes
it to $OUT/racecheck_probe.json): seconds per run and whether each found nothing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.build import toolchain  # noqa: E402
from grader.build.compile import compile_stage  # noqa: E402
from grader.grading import StageOutcome  # noqa: E402
from grader.run.sanitize import run_tool  # noqa: E402
from grader.spec.rubric import load_rubric  # noqa: E402


def main() -> int:
    rubric = load_rubric(ROOT / "rubric.yaml")
    out = Path(os.environ.get("OUT", "/tmp/racecheck-probe"))
    work = Path("/tmp/racecheck-probe-work")
    subprocess.run(["rm", "-rf", str(work)], check=False)
    nvcc, tool = toolchain.find_nvcc(), toolchain.find_compute_sanitizer()
    stages = [st for st in rubric.stages if st.id in ("tiled", "blocktiling_1d", "blocktiling_2d", "wmma", "hopper")]
    specs = []
    for st in stages:
        c = compile_stage(st, ROOT / "solutions", work / st.id, nvcc, ["-arch=sm_90a"], rubric,
                          [*rubric.correctness_sizes, st.bench.n])
        assert c.ok, c.problem
        specs.append({"id": st.id, **StageOutcome(stage=st, compile=c).launch_spec()})
    n, limit = rubric.sanitizer.n, rubric.sanitizer.timeout_s

    def one(spec: dict, where: str) -> tuple[str, float, int]:
        t0 = time.monotonic()
        r = run_tool("racecheck", tool, spec, n, work / where / spec["id"], limit)
        return spec["id"], round(time.monotonic() - t0, 2), len(r.findings) if not r.reason else -1

    report: dict = {"n": n, "alone": [one(s, "alone") for s in specs]}
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(specs)) as pool:
        report["side_by_side"] = list(pool.map(lambda s: one(s, "parallel"), specs))
    report["side_by_side_wall_s"] = round(time.monotonic() - t0, 2)
    # One sanitizer process, every stage: the child launches them in turn (the findings name the kernel).
    from grader.children.launch import launch
    from grader.run.sanitize import ERROR_EXIT

    t0 = time.monotonic()
    proc = launch("sanitize", {"n": n, "seed": 7, "stages": specs}, work / "one" / "all", limit * 3, 200_000,
                  wrap=[str(tool.path), "--tool", "racecheck", "--error-exitcode", str(ERROR_EXIT)],
                  name="racecheck").proc
    report["one_process_all_stages_s"] = round(time.monotonic() - t0, 2)
    report["one_process_rc"] = proc.returncode
    report["one_process_tail"] = (proc.stdout + proc.stderr)[-600:]
    out.mkdir(parents=True, exist_ok=True)
    (out / "racecheck_probe.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
