"""``python -m grader.deploy.gradescope run``: grade one submission the way Gradescope does.

``run_autograder`` calls this (and writes a fallback results.json if it never returns). Steps:

1. ``python -m grader grade`` (:func:`grader.cli.main`) grades the submission into the results
   folder (results.json, summary.md, grading.json; exit codes 0/2/3, results.json written in every
   case).
2. After a grading (exit 0), results.json is post-processed: the no-GPU policy
   (:mod:`.policy`) and, when the grader did not add one, the leaderboard (:mod:`grader.outputs.leaderboard`,
   from grading.json). If post-processing fails, the grader's own results.json stays.
3. When the package names a GPU grading service, the items left pending GPU grading come from it
   (:mod:`grader.deploy.gradescope.bridge`); if that fails, step 2's results.json stays.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from grader.deploy.gradescope.policy import CONFIG_FILE, apply_no_gpu_policy, read_config, resolve_policy
from grader.outputs.leaderboard import leaderboard_entries


def _env_flag(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def postprocess(results_dir: Path, source_dir: Path, rubric_path: Path, env=None) -> dict | None:
    """Policy and leaderboard on the results.json in ``results_dir``; returns it (None if absent)."""
    from grader.outputs.results import write_results

    path = results_dir / "results.json"
    results = json.loads(path.read_text(encoding="utf-8"))
    if any("autograder_error" in (t.get("tags") or []) for t in results.get("tests", [])):
        return results  # the grader's own error report: leave it exactly as it is
    try:
        detail = json.loads((results_dir / "grading.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        detail = None
    policy, where = resolve_policy(source_dir, rubric_path, env)
    from grader.deploy.gradescope.bridge import URL_KEY
    service = bool((env if env is not None else os.environ).get(URL_KEY)
                   or read_config(source_dir / CONFIG_FILE).get(URL_KEY))
    apply_no_gpu_policy(results, detail, policy, service=service)
    if "leaderboard" not in results and detail is not None:
        from grader.grading import GradingFormatError, load_grading

        try:
            results["leaderboard"] = leaderboard_entries(load_grading(results_dir / "grading.json"))
        except GradingFormatError:  # another grader version's file: no leaderboard rather than a wrong one
            pass
    extra = results.setdefault("extra_data", {})
    if isinstance(extra, dict):
        extra["no_gpu_policy_source"] = where
    write_results(path, results)
    return results


def run(submission: Path, results_dir: Path, source_dir: Path, env=None) -> int:
    env = os.environ if env is None else env
    config = read_config(source_dir / CONFIG_FILE)

    def setting(key: str) -> str | None:
        return env.get(key) if env.get(key) is not None else config.get(key)

    rubric = Path(setting("GRADER_RUBRIC") or source_dir / "rubric.yaml")
    argv = ["grade", "--out", str(results_dir), "--rubric", str(rubric)]
    if not _env_flag(setting("GRADER_USE_GPU"), True):
        argv.append("--no-gpu")
    if setting("GRADER_STAGES"):
        argv += ["--stages", str(setting("GRADER_STAGES"))]
    argv += ["--", str(submission)]
    print("grading: python -m grader " + " ".join(argv), flush=True)

    from grader import cli

    code = cli.main(argv)
    if code == cli.EXIT_OK:
        try:
            results = postprocess(results_dir, source_dir, rubric, env)
            if results is not None:
                extra = results.get("extra_data") or {}
                print(f"score {results.get('score')} (no-GPU policy {extra.get('no_gpu_policy', 'n/a')}, "
                      f"pending GPU items {extra.get('pending_gpu_items', 0)})", flush=True)
        except Exception:  # keep the grader's results.json, which is valid
            print("post-processing failed; results.json left as the grader wrote it:\n"
                  + traceback.format_exc(), file=sys.stderr, flush=True)
        try:  # the GPU items from the course's grading service, when the package names one (grader/deploy/gradescope/bridge.py)
            from grader.deploy.gradescope.bridge import bridge_if_configured
            bridge_if_configured(results_dir, submission, source_dir, env)
        except Exception:  # the static results.json stays, which is valid
            print("GPU service step failed; results.json left as the static grading wrote it:\n"
                  + traceback.format_exc(), file=sys.stderr, flush=True)
    return code
