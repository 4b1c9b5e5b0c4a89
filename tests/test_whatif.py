"""python -m grader whatif over the demo class (tests/fixtures/gradings/): each threshold item's measured values
against the current and a proposed threshold, the pass counts, the score distributions, valid PNGs and a report
that links them."""
from __future__ import annotations

import json
import re
from pathlib import Path

from grader.instructor.rescore import rescore_grading
from grader.rubric.load import load_rubric, rubric_from_text
from tests.gradings_helpers import FIXTURES, NAMES, edited, fixture, grader, score_only

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _valid_png(path: Path) -> bool:
    import matplotlib.image

    data = path.read_bytes()
    return data.startswith(PNG_SIGNATURE) and matplotlib.image.imread(path).shape[0] > 100


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
    assert ref["current"]["value"] == stored.values["value"] and ref["current"]["status"] == stored.status.value
    assert "coalesced.speed" in items and "wmma.beats_fp32" in items and "naive.compiles" not in items
    # Scores: the stored ones and the re-scored ones under the proposal.
    new = load_rubric(proposed)
    scores = {s["grading"]: (s["current"], s["proposed"]) for s in data["scores"]}
    for name in NAMES:
        g = fixture(name)
        assert scores[name] == (g.score, rescore_grading(g, new, rubric_from_text(g.rubric_text))[0].score)
    report = (tmp_path / "o" / "report.md").read_text()
    assert "| [4a.speed](#" in report and f"| >= 0.36 | {one_d['passing']['current']} of 5 | >= 0.3 | " \
        f"{one_d['passing']['proposed']} of 5 | 0 |" in report
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert "scores.png" in linked and len(linked) == len(items) + 1
    for name in linked:
        assert _valid_png(tmp_path / "o" / name), name


def test_whatif_without_a_proposal_shows_the_current_rubric(tmp_path):
    proc = grader("whatif", str(FIXTURES), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "o" / "whatif.json").read_text())
    speed = next(i for i in data["items"] if (i["stage"], i["item"]) == ("blocktiling_2d", "speed"))
    assert speed["current"] == speed["proposed"] == 0.8
    assert speed["passing"]["current"] == sum((f := _fraction(n, "blocktiling_2d")) is not None and f >= 0.8
                                              for n in NAMES)
    assert all(s["current"] == s["proposed"] for s in data["scores"])
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
    proc = grader("whatif", str(tmp_path / "class"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "o" / "report.md").read_text()
    section = report[report.index("### 4a.speed"):report.index("### 4a.ffma_count")]
    assert "graded with different thresholds: >= 0.36, >= 0.5" in section
    assert "different thresholds" not in report[report.index("### 4b.speed"):]
