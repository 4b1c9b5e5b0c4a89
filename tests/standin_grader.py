"""A stand-in for ``python -m grader grade`` inside the service's tests: a real child process, started
by a worker exactly as the grader is (serve.yaml's ``grade_command``, ``--grade-command``), that takes
the grader's arguments and writes a real results.json after a controlled delay.

The service treats a grading as a black box (a child that writes results.json into ``--out``, or
fails, hangs or dies); its tests check the service's process, lease, kill and queue behaviour, which
this child exercises in seconds where the real grader spends them in nvcc. One end-to-end test per
path (self-check, Gradescope bridge, Redis, page) keeps the real grader.

What it does comes from ``key=value`` words, in the environment variable ``GRADER_STANDIN`` (the
whole service's default) and then in a file ``STANDIN.txt`` at the top of the submission (that
job's own, e.g. one job that hangs among others that pass)::

    until=         a file it waits for first, looking every 0.05 s (a test's go-ahead: a grading kept
                     running until the test is done with it, and its next attempt going on at once)
    delay=0.3      seconds before it writes its results (a compile's time, without the GPU's lock)
    gpu=0          seconds it then holds --gpu-lock when given (a grading's GPU steps take it in turn)
    outcome=ok     ok: results.json, summary.md, grading.json (or the files of GRADER_STANDIN_TEMPLATE)
                     and exit 0; fail: a message and exit 1, no results; hang: sleep until killed;
                     crash: SIGKILL itself (an OOM kill); garbage: a results.json that is not JSON, exit 0;
                     nothing: exit 0 and write nothing
    children=0     processes it starts in sessions of their own, each sleeping until killed, whose
                     command lines carry ``standin-child`` (a grading's tools and sandboxed steps)
    zombies=0      processes it starts that exit at once and are never waited for: when it ends, their
                     zombies pass to the worker (a subreaper), as a grading's sandboxed steps' do
    score=1        the score it gives, out of 2

``GRADER_STANDIN_TEMPLATE``: a folder of a real grading's output (results.json, summary.md,
grading.json...) copied into ``--out`` instead of the files written here, for tests that read them.

Besides its results it writes ``standin.json``: its arguments, its pid, the archive's sha256, the
words it obeyed, and when it held the GPU's lock (wall-clock times, comparable across processes).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

DEFAULTS = {"until": "", "delay": "0.3", "gpu": "0", "outcome": "ok", "children": "0", "zombies": "0", "score": "1"}
OUTCOMES = ("ok", "fail", "hang", "crash", "garbage", "nothing")
CHILD = "import sys, time\nwhile True:\n    time.sleep(60)\n"
MAX_SCORE = 2.0


def words(text: str, where: str) -> dict[str, str]:
    found = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep or key not in DEFAULTS:
            raise SystemExit(f"standin: {where}: {word!r} is not one of {', '.join(k + '=' for k in DEFAULTS)}")
        found[key] = value
    return found


def submission_words(archive: Path) -> dict[str, str]:
    """The words of the submission's STANDIN.txt (a zip or a folder), {} without one."""
    if archive.is_dir():
        f = archive / "STANDIN.txt"
        return words(f.read_text(encoding="utf-8"), str(f)) if f.is_file() else {}
    try:
        with zipfile.ZipFile(archive) as zf:
            if "STANDIN.txt" in zf.namelist():
                return words(zf.read("STANDIN.txt").decode("utf-8"), "STANDIN.txt")
    except zipfile.BadZipFile:
        pass
    return {}


def digest(archive: Path) -> str:
    if archive.is_file():
        return hashlib.sha256(archive.read_bytes()).hexdigest()
    return ""


def hold_gpu(lock: Path, seconds: float) -> tuple[float, float]:
    """Hold the GPU's lock ``seconds``, taken in turn as a grading's GPU steps take it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from grader.sandbox.lock import held_in_turn

    with held_in_turn(lock):
        start = time.time()
        time.sleep(seconds)
        return start, time.time()


def device_reason(args: argparse.Namespace) -> str:
    """Why it grades without a GPU, in the grader's words: it never has one."""
    if args.no_gpu:
        return args.no_gpu_because or "GPU use switched off (--no-gpu)"
    try:
        described = json.loads(Path(args.device).read_text(encoding="utf-8")) if args.device else {}
    except (OSError, ValueError):
        described = {}
    reason = described.get("reason") if isinstance(described, dict) else None
    return str(reason or "no CUDA device (the stand-in grader)")


def write_results(out: Path, score: float, stages: str, reason: str) -> None:
    template = os.environ.get("GRADER_STANDIN_TEMPLATE")
    if template:
        for f in sorted(Path(template).iterdir()):
            if f.is_file():
                shutil.copyfile(f, out / f.name)
        return
    results = {"score": score, "output": "Graded by the test suite's stand-in grader.",
               "tests": [{"name": f"stand-in: {stages or 'every stage'}", "number": "1", "score": score,
                          "max_score": MAX_SCORE, "output": "the stand-in's fixed verdict"}],
               "leaderboard": [{"name": "stand-in", "value": score}]}
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    (out / "summary.md").write_text(f"# Stand-in grading\n\nstages: {stages or 'all'}\n\nscore: {score} of "
                                    f"{MAX_SCORE}\n", encoding="utf-8")
    # A grading.json the service reads through the record (grader/grading.py), as it reads the grader's: written
    # here as JSON, so the child imports nothing of the grader (test_serve_grade_command checks that it is the
    # one grader.grading.Grading writes for a grading of no stage, and that it reads back).
    (out / "grading.json").write_text(json.dumps(empty_grading(reason), indent=1), encoding="utf-8")


def empty_grading(reason: str) -> dict:
    """grading.json of a grading of no stage without a device, as grader.grading.Grading writes it."""
    return {"format": 2, "submission": "stand-in", "seconds": 0.0, "rubric_sha256": "", "grader_version": "",
            "gpu_graded": False, "phases": [], "score": 0, "max_score": 0, "bonus": {"score": 0, "max_score": 0},
            "notes": ["the stand-in grader"], "device": None, "device_reason": reason, "arch_flags": [],
            "compiler": None, "cuobjdump": None, "peaks": {"fp32": None, "fp16_tensor": None, "source": "no device"},
            "sandbox": None, "ncu": None, "stages": {}, "items": [], "timeline": [], "cpu_seconds": None,
            "cpu_seconds_grader": None, "rubric": "", "calibration": ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="standin_grader")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--rubric")
    p.add_argument("--no-gpu", action="store_true")
    p.add_argument("--no-gpu-because")  # the grader's: why there is no GPU (a service's words)
    p.add_argument("--device")
    p.add_argument("--gpu-lock")
    p.add_argument("--stages", default="")
    p.add_argument("--citations-from", action="append", default=[])
    p.add_argument("--student")
    p.add_argument("submission", nargs=1)
    args = p.parse_args(argv)
    archive = Path(args.submission[0])
    chosen = {**DEFAULTS, **words(os.environ.get("GRADER_STANDIN", ""), "GRADER_STANDIN"),
              **submission_words(archive)}
    if chosen["outcome"] not in OUTCOMES:
        raise SystemExit(f"standin: outcome={chosen['outcome']!r} is not one of {', '.join(OUTCOMES)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"standin: grading {archive.name} ({' '.join(f'{k}={v}' for k, v in chosen.items())})", flush=True)
    record: dict = {"argv": sys.argv[1:] if argv is None else argv, "pid": os.getpid(), "sha256": digest(archive),
                    "words": chosen, "children": [], "gpu_held": None}

    for _ in range(int(chosen["children"])):
        child = subprocess.Popen([sys.executable, "-c", CHILD, "standin-child"], start_new_session=True,
                                 stdin=subprocess.DEVNULL)
        record["children"].append(child.pid)
    # Held, so no Popen finaliser reaps them; never waited for here.
    left = [subprocess.Popen(["true"], stdin=subprocess.DEVNULL) for _ in range(int(chosen["zombies"]))]
    while chosen["until"] and not Path(chosen["until"]).exists():
        time.sleep(0.05)
    time.sleep(float(chosen["delay"]))
    if args.gpu_lock and float(chosen["gpu"]) > 0 and not args.no_gpu:
        record["gpu_held"] = hold_gpu(Path(args.gpu_lock), float(chosen["gpu"]))
    (out / "standin.json").write_text(json.dumps(record), encoding="utf-8")

    outcome = chosen["outcome"]
    if outcome == "hang":
        print("standin: hanging until killed", flush=True)
        while True:
            time.sleep(60)
    if outcome == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if outcome == "fail":
        print("standin: failing as told (outcome=fail)", flush=True)
        return 1
    if outcome == "garbage":
        (out / "results.json").write_text("{ not json", encoding="utf-8")
        return 0
    if outcome == "ok":
        write_results(out, float(chosen["score"]), args.stages, device_reason(args))
    if left:
        os._exit(0)  # at once, before any finaliser could reap them: their zombies pass to the worker
    return 0


if __name__ == "__main__":
    sys.exit(main())
