"""Everything a grading writes into its output folder, in one place.

results.json (Gradescope), summary.md (the table, the diagnoses, links to the plots),
grading.json (every record, for TAs and for debugging), and the profile report
(ladder.png, roofline.png, profile.md/.html) when there were timings or ncu metrics.
"""
from __future__ import annotations

import json
from pathlib import Path

from grader.outputs.leaderboard import leaderboard_entries
from grader.model import to_jsonable
from grader.outputs.summary import summary_markdown
from grader.outputs.results import build_results, write_results


def _detail(grading) -> dict:
    run = grading.ncu_run
    return {
        "submission": grading.submission, "device": grading.env.device,
        "device_reason": grading.env.device_reason, "arch_flags": grading.env.arch_flags,
        "compiler": getattr(grading.env.nvcc, "to_json", lambda: None)(),
        "peaks": grading.env.peaks, "seconds": grading.seconds, "notes": grading.notes,
        "ncu": None if run is None else {"command": getattr(run, "command", None),
                                         "reason": getattr(run, "reason", ""),
                                         "wall_s": getattr(getattr(run, "proc", None), "wall_s", None),
                                         "notes": getattr(run, "notes", [])},
        "stages": {sid: {"compile": o.compile, "correct": o.correct, "correctness": o.correctness_message,
                         "cases": o.cases, "timing": o.timing, "raw_timings": o.bench,
                         "sass_reason": o.sass.reason if o.sass else None,
                         "ncu": o.ncu, "ncu_reason": o.ncu_reason, "profile_n": o.profile_n,
                         "run_output": o.run_output[-4000:]}
                   for sid, o in grading.outcomes.items()},
        "items": grading.items,
    }


def write_outputs(grading, out: Path) -> dict:
    """Write every output file; return the results.json dict."""
    from grader.outputs.profile_page import write_profile_report

    out = Path(out)
    profile = write_profile_report(grading, out)
    summary = summary_markdown(grading, profile)
    results = build_results(grading.items, execution_time=grading.seconds, output=summary,
                            extra={"device": grading.env.device, "peaks": grading.env.peaks},
                            leaderboard=leaderboard_entries(grading))
    write_results(out / "results.json", results)
    (out / "summary.md").write_text(summary + "\n")
    (out / "grading.json").write_text(json.dumps(to_jsonable(_detail(grading)), indent=1, default=str) + "\n")
    return results
