"""python -m grader whatif over the demo class (tests/fixtures/gradings/): each threshold item's measured values
against the current and a proposed threshold, the pass counts, the score distributions, valid PNGs and a report
that links them."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from grader.instructor.rescore import rescore_grading
from grader.rubric.load import load_rubric, rubric_from_text
from tests.gradings_helpers import FIXTURES, NAMES, ROOT, edited, fixture, grader, score_only

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _valid_png(path: Path) -> bool:
    import matplotlib.image

    data = path.read_bytes()
    return data.startswith(PNG_SIGNATURE) and matplotlib.image.imread(path).shape[0] > 100


# What the tests of the report's words and whatif.json skip (their numbers are the same either way; the first test
# draws every plot and checks each PNG): every plot, as where matplotlib cannot be imported (grader/pyplot.py:
# pyplot() is None, and the report says why in each plot's place), or the items' histograms alone.
NO_PLOTS = "plots.pyplot = lambda: None"
NO_ITEM_PLOTS = ("draw = plots.threshold_histogram_png; plots.threshold_histogram_png = lambda series, lines, path, *a, "
                 "**k: draw(series, lines, path, *a, **k) if path.name == 'scores.png' else (None, 'not drawn in this "
                 "test')")


def _skipping(patch: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m grader ARGS`` (its own entry point, in its own process) with ``patch`` made to
    grader/outputs/plots.py first."""
    code = (f"import runpy, grader.outputs.plots as plots; {patch}; "
            "runpy.run_module('grader', run_name='__main__', alter_sys=True)")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _fraction(name: str, stage: str) -> float | None:
    t = fixture(name).outcomes[stage].timing
    return t.fraction_of_baseline if t is not None else None


def test_whatif_counts_each_threshold_item_and_draws_it(tmp_path):
    proposed = edited(tmp_path / "proposed.yaml", score_only)
    proc = grader("whatif", str(FIXTURES), "--rubric", str(proposed), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "o" / "whatif.json").read_text())
    items = {f"{i['stage']}.{i['item']}": i for i in data["items"]}
    assert data["gradings"] == len(NAMES) and not data["problems"]
    # 4a.speed: the measured fractions of cuBLAS, counted here from the stored timings themselves.
    fractions = [f for n in NAMES if (f := _fraction(n, "blocktiling_1d")) is not None]
    one_d = items["blocktiling_1d.speed"]
    assert (one_d["current"], one_d["proposed"]) == (0.36, 0.30)
    assert one_d["passing"] == {"current": sum(f >= 0.36 for f in fractions), "proposed": sum(f >= 0.30 for f in fractions)}
    assert one_d["passing"]["proposed"] > one_d["passing"]["current"]  # the textbook kernel's 33.2 % now passes
    assert sorted(r["current"]["value"] for r in one_d["rows"] if r["current"]["value"] is not None) == sorted(fractions)
    # ncu items: their value is the one the stored item measured.
    coalesced = items["coalesced.ncu_coalesced"]
    assert (coalesced["current"], coalesced["proposed"]) == (4, 3.5)
    ref = next(r for r in coalesced["rows"] if r["name"] == "reference")
    stored = next(r for r in fixture("reference").items if r.number == "2.ncu_coalesced")
    assert ref["current"]["value"] == stored.values.value and ref["current"]["status"] == stored.status.value
    assert "coalesced.speed" in items and "wmma.beats_fp32" in items and "naive.compiles" not in items
    # Scores: the stored ones and the re-scored ones under the proposal, over the items neither it nor rubric.yaml
    # (the base) needs a real re-grade for.
    new = load_rubric(proposed)
    scores = {s["grading"]: (s["current"], s["proposed"]) for s in data["scores"]}
    for name in NAMES:
        g = fixture(name)
        left = set(next(s["left_out"] for s in data["scores"] if s["grading"] == name))
        again = rescore_grading(g, new, rubric_from_text(g.rubric_text))[0]
        assert scores[name] == tuple(round(sum(i.counted_score for i in x.items if i.number not in left), 4)
                                     for x in (g, again))
    report = (tmp_path / "o" / "report.md").read_text()
    assert "| [4a.speed](#" in report and f"| >= 0.36 | {one_d['passing']['current']} of 5 | >= 0.3 | " \
        f"{one_d['passing']['proposed']} of 5 | 0 |" in report
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert "scores.png" in linked and len(linked) == len(items) + 1
    for name in linked:
        assert _valid_png(tmp_path / "o" / name), name


def test_whatif_without_a_proposal_shows_the_current_rubric(tmp_path):
    proc = _skipping(NO_ITEM_PLOTS, "whatif", str(FIXTURES), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "o" / "whatif.json").read_text())
    assert all(not i["png"] and i["png_problem"] == "not drawn in this test" for i in data["items"])
    speed = next(i for i in data["items"] if (i["stage"], i["item"]) == ("blocktiling_2d", "speed"))
    assert speed["current"] == speed["proposed"] == 0.8
    assert speed["passing"]["current"] == sum((f := _fraction(n, "blocktiling_2d")) is not None and f >= 0.8
                                              for n in NAMES)
    # No edit: the proposal's column is the base's (rubric.yaml); what it grades otherwise than each grading's own
    # rubric is told apart.
    assert all(s["proposed"] == s["base"] and s["changed_by_the_edit"] == 0 for s in data["scores"])
    assert all(s["differs_from_its_rubric"] == round(s["base"] - s["current"], 4) for s in data["scores"])
    assert _valid_png(tmp_path / "o" / "scores.png")
    assert "no proposed rubric" in (tmp_path / "o" / "report.md").read_text()


def test_whatif_says_when_the_gradings_were_graded_with_different_thresholds(tmp_path):
    import shutil

    for name in NAMES:
        shutil.copytree(FIXTURES / name, tmp_path / "class" / name)
    path = tmp_path / "class" / "textbook" / "grading.json"
    data = json.loads(path.read_text())
    item = next(i for i in data["stages"]["blocktiling_1d"]["stage"]["items"] if i["id"] == "speed")
    item["params"]["min"] = 0.5  # graded under another rubric
    path.write_text(json.dumps(data))
    proc = _skipping(NO_PLOTS, "whatif", str(tmp_path / "class"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "o" / "report.md").read_text()
    assert "*No plot: matplotlib is not installed here" in report  # the plots skipped, said
    section = report[report.index("### 4a.speed"):report.index("### 4a.ffma_count")]
    assert "graded with different thresholds: >= 0.36, >= 0.5" in section
    assert "different thresholds" not in report[report.index("### 4b.speed"):]


def _graded_under_other_timing(dest: Path) -> Path:
    """A copy of the demo class whose gradings say they were graded under rubric.yaml with naive's timed benchmark
    set otherwise (3 timed launches after a warm-up): a class graded before such an edit of the rubric."""
    from grader import DEFAULT_RUBRIC

    shipped = DEFAULT_RUBRIC.read_text(encoding="utf-8")
    timing = "bench: {reps: 1, min_reps: 1, warmup: 0}"
    assert shipped.count(timing) == 1, "naive's timed benchmark, as rubric.yaml sets it"
    older = shipped.replace(timing, "bench: {reps: 3, min_reps: 3, warmup: 1}")
    for name in NAMES:
        raw = json.loads((FIXTURES / name / "grading.json").read_text())
        raw.update(rubric=older, rubric_sha256=hashlib.sha256(older.encode("utf-8")).hexdigest())
        naive = raw["stages"].get("naive")
        if naive is not None:  # the stage as it was graded, which a re-score compares with the proposal's
            naive["stage"]["bench"].update(reps=3, min_reps=3, warmup=1)
        (dest / name).mkdir(parents=True)
        (dest / name / "grading.json").write_text(json.dumps(raw))
    return dest


def test_whatif_keeps_your_edit_apart_from_what_differs_from_each_gradings_rubric(tmp_path):
    """A class graded under a rubric that timed naive otherwise. Proposing rubric.yaml unchanged is no edit:
    "changed by your edit" is 0 for every grading, and what rubric.yaml grades otherwise is "differs from the rubric
    this grading used"; the items a re-score cannot make (those naive's timed run decides) are left out of every
    column, and a line says how many."""
    from grader import DEFAULT_RUBRIC

    proc = _skipping(NO_PLOTS, "whatif", str(_graded_under_other_timing(tmp_path / "class")), "--rubric",
                               str(DEFAULT_RUBRIC), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "o" / "whatif.json").read_text())
    assert all(s["changed_by_the_edit"] == 0 and s["base"] == s["proposed"] for s in data["scores"])
    left = {s["grading"]: s["left_out"] for s in data["scores"]}
    assert left["reference"] and "1.correct" in left["reference"] and "1.compiles" not in left["reference"]
    report = (tmp_path / "o" / "report.md").read_text()
    count = sum(len(v) for v in left.values())
    assert f"{count} item(s) in {sum(bool(v) for v in left.values())} grading(s) need a real re-grade" in report
    assert "| grading | as graded | base | proposed | changed by your edit | differs from the rubric this grading " \
           "used |" in report
    # Every column is over the same items: the reference's stored score, less what is left out, is its "as graded".
    ref = next(s for s in data["scores"] if s["grading"] == "reference")
    stored = fixture("reference")
    assert ref["current"] == round(sum(i.counted_score for i in stored.items if i.number not in left["reference"]), 4)
    # "of" the automatic points, as the batch and the re-score count them (hand-graded items are outside them), and
    # the bonus a score may hold above them (the reference's 192 is 179 and the 13-point bonus).
    from grader.model import Bonus
    from grader.outputs.summary import automatic_max

    bonus = sum(i.max_score for i in stored.items if i.bonus is Bonus.EXTRA)
    assert bonus > 0 and stored.score > automatic_max(stored.items)
    assert f"(of {automatic_max(stored.items):g} automatic points, and up to {bonus:g} bonus points above them)" in report


def test_the_score_plots_axis_runs_from_zero_to_the_maximum():
    from grader.outputs.plots import _bins

    bins = _bins([40.0, 70.0], [], x_range=(0.0, 179.0))
    assert bins[0] <= 0.0 and bins[-1] >= 179.0
