"""A stand-in for ``python -m grader grade`` in the service's tests and soak run: a real child process
that reads the archive, waits ``STANDIN_GRADE_DELAY_S`` seconds (default 0.3) and writes a real
results.json, summary.md and grading.json into ``--out``. The service treats a grading as a black
box (grader/serve/worker.py: grade_command), so its process, lease, queue and HTTP behaviour is
what these tests exercise. Like the real grader, it leaves children behind that exited unreaped
(a grading's sandboxed steps do): their zombies pass to the worker, which must reap them.

    GRADER_SERVE_GRADE_COMMAND="python tests/standin_grade.py" python -m grader serve ...
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LEFT_BEHIND = 3  # children that exit at once and are never waited for here


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("archive", nargs="+")
    args = p.parse_args(argv)
    archive = Path(args.archive[-1])
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    for _ in range(LEFT_BEHIND):
        subprocess.Popen(["true"])  # never waited for: a zombie until its parent's parent reaps it
    time.sleep(float(os.environ.get("STANDIN_GRADE_DELAY_S", "0.3")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Numbered as the rubric's first stage's GPU items, so the Gradescope bridge merges them.
    results = {"score": 10.0, "output": f"stand-in grading of {sha[:12]}",
               "tests": [{"number": "1.correct", "name": "stand-in: correct", "score": 6.0, "max_score": 6.0,
                          "status": "passed", "output": sha},
                         {"number": "1.speed", "name": "stand-in: speed", "score": 4.0, "max_score": 4.0,
                          "status": "passed", "output": sha}]}
    (out / "results.json").write_text(json.dumps(results), encoding="utf-8")
    (out / "summary.md").write_text(f"# Stand-in grading\n\narchive sha256 `{sha}`\n", encoding="utf-8")
    (out / "grading.json").write_text(json.dumps({"gpu_graded": True}), encoding="utf-8")
    sys.stdout.flush()
    os._exit(0)  # at once: the children above stay unreaped


if __name__ == "__main__":
    sys.exit(main())
