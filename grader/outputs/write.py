"""Everything a grading writes into its output folder, in one place.

results.json (Gradescope), summary.md (the table, the diagnoses, links to the plots),
grading.json (every record, for TAs and for debugging; :func:`grader.grading.load_grading`
reads it back into the same Grading), and the profile report (ladder.png, roofline.png,
profile.md/.html) when there were timings or ncu metrics.
"""
from __future__ import annotations

import time
from pathlib import Path

from grader.clock import Phase
from grader.evidence.results import Results, ResultsExtra
from grader.grading import Grading
from grader.outputs.leaderboard import leaderboard_entries
from grader.outputs.results import build_results, write_results
from grader.outputs.summary import summary_markdown


def build_outputs(grading: Grading, out: Path, drawn: Path | None = None) -> Results:
    """Write the profile report into ``out``; return results.json's record (summary.md is its output).
    ``drawn``: where this grading's plots were drawn already (grader/outputs/profile_page.py: write_profile_report)."""
    from grader.outputs.profile_page import write_profile_report

    profile = write_profile_report(grading, Path(out), drawn=drawn)
    return results_for(grading, summary_markdown(grading, profile))


def results_for(grading: Grading, summary: str) -> Results:
    """results.json's record for ``grading`` under the markdown ``summary`` (summary.md's text): what a
    grading's folder holds, rebuilt by whoever has only its grading.json and summary.md (the Gradescope run)."""
    return build_results(grading.items, execution_time=grading.seconds, output=summary,
                         extra=ResultsExtra(device=grading.env.device, peaks=grading.env.peaks),
                         leaderboard=leaderboard_entries(grading))


def write_outputs(grading: Grading, out: Path, drawn: Path | None = None) -> Results:
    """Write every output file; return results.json's record. ``drawn``: see :func:`build_outputs`."""
    out = Path(out)
    t0 = time.monotonic()
    results = build_outputs(grading, out, drawn)
    write_results(out / "results.json", results)
    (out / "summary.md").write_text(results.output + "\n")
    # The outputs' own time goes into grading.json (written last), not into summary.md or results.json.
    # Outputs rebuilt from a loaded grading.json keep the first time, so the file comes out the same.
    if not any(p.name == "outputs" for p in grading.phases):
        grading.phases.append(Phase("outputs", round(time.monotonic() - t0, 3)))
    grading.write(out / "grading.json")
    return results
