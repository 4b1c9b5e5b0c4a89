"""Where one GPU attack case's grading spends its time (speed round 5, #32): the case graded as the GPU
suite grades it (tests/attack_helpers.py: fenced grader/run_local.py, --gpu-lock), then by plain
``python -m grader grade --gpu-lock``, each with its phases and its schedule's timeline.

    python3 docs/measurements/scripts/attack_timeline.py CASE WORK_DIR
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.attack_helpers import grade as fenced_grade  # noqa: E402
from tests.gpu_jobs import EXPECTED, SUBS, attack_rubric  # noqa: E402


def show(label: str, out: Path, wall: float) -> None:
    try:
        g = json.loads((out / "grading.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"{label}: no grading.json ({exc})")
        return
    first = g["phases"][0]
    start = first["ended"] - first["seconds"]
    print(f"{label}: wall {wall:.2f} s, grading {g.get('seconds')} s, score {g.get('score')}")
    print("  steps: " + ", ".join(f"{p['name']} {p['seconds']:.2f} (ends {p['ended'] - start:.2f})"
                                  for p in g["phases"] if not p.get("detail") and not p.get("stage")))
    print("  details: " + ", ".join(f"{p.get('stage') or '-'}:{p['name']} {p['seconds']:.2f}"
                                    for p in g["phases"] if p.get("detail") and p["seconds"] >= 0.2))
    for p in g.get("timeline", []):
        print(f"  {p['party']:26} " + " ".join(f"{e[1]}@{e[0] - start:.2f}" for e in p["events"]))
    for n in g.get("notes", [])[:8]:
        print("  note:", str(n)[:300])


def main() -> int:
    case, work = sys.argv[1], Path(sys.argv[2]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rubric = attack_rubric(work / "rubric_attacks.yaml")
    lock = work / "gpu.lock"
    stages = EXPECTED[case]["stages"]
    t0 = time.monotonic()
    g = fenced_grade(SUBS / case, work / "fenced", stages, "--gpu-lock", str(lock), rubric=rubric, gpu=True, limit_s=300)
    show(f"{case} fenced (run_local)", g.out, time.monotonic() - t0)
    print("  stderr tail:", g.stderr[-600:].replace("\n", " | "))
    out = work / "plain" / "out"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "grader", "grade", str(SUBS / case), "--out", str(out), "--quiet",
                    "--rubric", str(rubric), "--stages", ",".join(stages), "--gpu-lock", str(lock)],
                   cwd=ROOT, capture_output=True, timeout=300)
    show(f"{case} plain (python -m grader)", out, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
