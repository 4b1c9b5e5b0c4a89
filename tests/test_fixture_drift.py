"""The demo class (tests/fixtures/gradings/) reflects the rubric.yaml it ships with.

Each stored grading is re-scored under the shipped rubric (grader/instructor/rescore.py, from the rubric it kept):
every item must be re-scorable from what was measured (no edit of what is measured since), and come out as stored
(no threshold, point or curve edit that changes a verdict or a score since). When this fails, the fixtures are
graded again on a GPU from this code: ``fixtures`` of docs/measurements/scripts/2026-12-06-every-gpu.sh, whose
tarball replaces tests/fixtures/gradings/."""
from __future__ import annotations

from grader.instructor.rescore import measured_under, rescore_grading
from grader.rubric.load import load_rubric
from tests.gradings_helpers import NAMES, ROOT, fixture

REGRADE_HOW = ("tests/fixtures/gradings/ no longer reflect rubric.yaml: grade them again on a GPU "
               "(bash docs/measurements/scripts/2026-12-06-every-gpu.sh fixtures) and commit the result")


def drift(rubric_path=ROOT / "rubric.yaml") -> list[str]:
    """One line per stored item the rubric at ``rubric_path`` would grade otherwise, or cannot re-score."""
    rubric = load_rubric(rubric_path)
    lines = []
    for name in NAMES:
        g = fixture(name)
        again, refused = rescore_grading(g, rubric, measured_under(g, []))
        lines += [f"{name}: {r.number}: needs a real re-grade ({r.why})" for r in refused]
        refused_numbers = {r.number for r in refused}
        stored = {i.number: (i.status.value, i.score, i.max_score) for i in g.items}
        now = {i.number: (i.status.value, i.score, i.max_score) for i in again.items}
        for number in sorted(set(stored) | set(now)):
            if number not in refused_numbers and stored.get(number) != now.get(number):
                lines.append(f"{name}: {number}: stored {stored.get(number)}, under rubric.yaml {now.get(number)}")
    return lines


def test_the_stored_gradings_reflect_the_shipped_rubric():
    lines = drift()
    assert not lines, REGRADE_HOW + ":\n" + "\n".join(lines[:40]) + (f"\n... {len(lines) - 40} more" if len(lines) > 40 else "")


def test_the_drift_check_sees_an_edit_of_what_is_measured_and_of_a_threshold(tmp_path):
    """The check itself: under the rubric the fixtures kept it finds nothing; a moved threshold and a changed
    benchmark are each found."""
    import yaml

    from tests.gradings_helpers import graded_with, stage_item

    kept = tmp_path / "kept.yaml"
    kept.write_text(graded_with())
    assert drift(kept) == []
    raw = yaml.safe_load(graded_with())
    stage_item(raw, "tiled", "ncu_reuse")["value"] = 1e6
    next(s for s in raw["stages"] if s["id"] == "naive")["bench"] = {"reps": 6, "min_reps": 3}
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(raw, sort_keys=False))
    lines = drift(edited)
    assert any(ln.startswith("reference: 3.ncu_reuse: stored ('passed'") for ln in lines), lines
    assert any(ln.startswith("reference: 1.") and "needs a real re-grade" in ln for ln in lines), lines
