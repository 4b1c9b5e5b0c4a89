"""python -m grader rescore: stored gradings re-scored under an edited rubric, without a GPU.

A score-only edit gives exactly what a full grading computes from the same measurements: for the GPU gradings
of tests/fixtures/gradings/ (grader/pipeline.py's own scoring over a Job holding their measurements, the report
graded again from the submission's files) and for a static grading made twice by the real pipeline. An edit that
changes what is measured names each item it reaches and refuses it; the others are re-scored."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from grader.compile import toolchain
from grader.gpu.job import Job
from grader.gpu.session import GpuSession
from grader.grading import Grading, load_grading
from grader.instructor.rescore import REGRADE, rescore_grading
from grader.model import ItemResult, Status
from grader.outputs.profile_page import plot_inputs
from grader.outputs.write import write_outputs
from grader.rubric.load import load_rubric, rubric_from_text
from grader.rubric.peaks import device_peaks
from grader.rubric.types import Rubric
from tests.gradings_helpers import FIXTURES, NAMES, ROOT, edited, fixture, graded_with, grader, score_only, stage_item

# The submission folder each fixture's report.md comes from (the others are made from solutions/).
REPORT_SOURCE = {"starter": "starter"}


def full_grade(g: Grading, rubric: Rubric, submission: Path, work: Path) -> Grading:
    """What pipeline.grade computes from ``g``'s measurements under ``rubric``: its scoring steps over a Job holding
    them (the report graded again from ``submission``'s files; the occupancy program cannot run here, so its items
    keep the fraction they earned)."""
    from grader import pipeline

    env = replace(g.env, peaks=device_peaks(rubric.peak_overrides, rubric.peak_per_sm_clock, g.env.device))
    job = Job(rubric, submission, work, env, None, False, lambda _msg: None)
    job.outcomes = {st.id: replace(g.outcomes[st.id], stage=st) for st in rubric.stages}
    job = pipeline.score_stages(job, GpuSession())
    assert rubric.occupancy is not None
    for r in (r for r in g.items if r.stage == "occupancy"):
        spec = rubric.occupancy.items[r.item]
        fraction = r.score / r.max_score if r.max_score else 0.0
        job.items.append(replace(r, score=round(spec.points * fraction, 4), max_score=spec.points, title=spec.title))
    job = pipeline.grade_report(job, GpuSession())
    return replace(g, env=env, outcomes=job.outcomes, items=job.items, rubric_sha256=rubric.sha256,
                   rubric_text=rubric.text)


def _tests(results_path: Path) -> list[dict]:
    return json.loads(results_path.read_text())["tests"]


@pytest.fixture(scope="module")
def as_graded(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``rescore`` of the stored gradings (grading.json alone, so it draws every plot) under the rubric they were
    graded with, run once for the module: the command and its output folder."""
    base = tmp_path_factory.mktemp("as-graded")
    (base / "rubric.yaml").write_text(graded_with())
    return grader("rescore", str(FIXTURES), "--rubric", str(base / "rubric.yaml"), "--out", str(base / "o")), base / "o"


@pytest.fixture(scope="module")
def drawn(tmp_path_factory, as_graded) -> Path:
    """Each stored grading's outputs, as the re-score under its own rubric wrote them (every item and output file
    given back as stored: :func:`test_rescore_under_the_grading_rubric_gives_back_every_stored_item`): the folder
    whose ladder.png and roofline.png the tests' own writes of the same measurements copy (write_outputs'
    ``drawn``, as rescore copies a stored grading's plots), where each would draw them again, and the gradings the
    other ``rescore`` runs re-score (their pictures copied where the edit leaves the plots' inputs as they were;
    ``as_graded`` is the run that draws every plot from grading.json alone)."""
    proc, out = as_graded
    assert proc.returncode == 0, proc.stderr
    base = tmp_path_factory.mktemp("drawn")
    for name in NAMES:
        shutil.copytree(out / name, base / name)
    return base


def _drawn_for(new: Grading, stored: Grading, folder: Path) -> Path | None:
    """``folder`` where ``new``'s plots are drawn from what ``stored``'s were (the same pictures), else None."""
    return folder if plot_inputs(new) == plot_inputs(stored) else None


def test_rescore_under_the_grading_rubric_gives_back_every_stored_item(tmp_path, as_graded):
    proc, out = as_graded
    assert proc.returncode == 0, proc.stderr
    for name in NAMES:
        g = fixture(name)
        assert load_grading(out / name / "grading.json").items == g.items, name
        # The grading's own write of every output file (its plots copied from the re-score's: the same pictures).
        assert plot_inputs(load_grading(out / name / "grading.json")) == plot_inputs(g), name
        fresh = write_outputs(g, tmp_path / "fresh" / name, drawn=out / name)
        assert json.loads((out / name / "results.json").read_text()) == fresh.to_json(), name
        assert (out / name / "summary.md").read_text() == (tmp_path / "fresh" / name / "summary.md").read_text()
    assert "0 item(s)" not in proc.stderr
    # Nothing refused under their own rubric, and every score compared as graded.
    rescored = json.loads((out / "rescore.json").read_text())["gradings"]
    assert all(r["refused"] == [] for r in rescored.values())
    assert all(r["compared"]["as_graded"] == r["compared"]["new"] for r in rescored.values())


def test_a_score_only_edit_gives_what_a_full_grade_computes_from_the_same_measurements(tmp_path, drawn):
    new_path = edited(tmp_path / "new.yaml", score_only)
    new = load_rubric(new_path)
    # The class as its gradings left it (every output beside grading.json): rescore copies their plots.
    proc = grader("rescore", str(drawn), "--rubric", str(new_path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    changed = 0
    for name in NAMES:
        g = fixture(name)
        # Each one's report is graded again for real under the new rubric (tests/fixtures/gradings/README.md).
        want = full_grade(g, new, ROOT / REPORT_SOURCE.get(name, "solutions"), tmp_path / "w" / name)
        got = load_grading(tmp_path / "o" / name / "grading.json")
        assert got.items == want.items, name
        expected = write_outputs(want, tmp_path / "e" / name, drawn=_drawn_for(want, g, drawn / name))
        assert _tests(tmp_path / "o" / name / "results.json") == expected.to_json()["tests"]
        assert (tmp_path / "o" / name / "summary.md").read_text() == (tmp_path / "e" / name / "summary.md").read_text()
        assert got.rubric_sha256 == new.sha256 and got.grader_version == g.grader_version
        changed += got.score != g.score
    textbook = {r.number: r for r in load_grading(tmp_path / "o" / "textbook" / "grading.json").items}
    assert textbook["4a.speed"].status is Status.PASSED  # 33.7 % of cuBLAS passes 30 %, not the rubric's 36 %
    assert fixture("textbook").items[[r.number for r in fixture("textbook").items].index("4a.speed")].status \
        is Status.FAILED
    assert textbook["4b.speed"].max_score == 10 and textbook["4b.speed"].title == "at least 60% of cuBLAS SGEMM"
    assert changed >= 2  # the edit moved real scores, so the equality above is not trivial
    csv = (tmp_path / "o" / "grades.csv").read_text().splitlines()
    assert len(csv) == 1 + len(NAMES) and "4b.speed" not in csv[0] and "blocktiling_2d.speed" in csv[0]


@pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")
def test_a_static_grading_rescored_equals_a_grading_under_the_new_rubric(tmp_path):
    old_path = ROOT / "rubric.yaml"

    def change(raw: dict) -> None:
        stage_item(raw, "tiled", "compiles").update(points=5, title="compiles (worth more now)")
        stage_item(raw, "blocktiling_2d", "no_spills")["points"] = 3
        stage_item(raw, "blocktiling_2d", "speed")["min"] = 0.5
        raw["report"]["items"]["cites"]["points"] = 3
        raw["occupancy"]["items"]["ex1.fix"]["points"] = 4

    new_path = edited(tmp_path / "new.yaml", change, old_path.read_text())
    parts = "tiled,blocktiling_2d,occupancy,report"
    for rubric, out in ((old_path, "old"), (new_path, "new")):
        proc = grader("grade", "solutions", "--no-gpu", "--stages", parts, "--rubric", str(rubric), "--out",
                      str(tmp_path / out), "--quiet")
        assert proc.returncode == 0, proc.stderr
    proc = grader("rescore", str(tmp_path / "old"), "--rubric", str(new_path), "--out", str(tmp_path / "re"))
    assert proc.returncode == 0, proc.stderr
    want, got = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("new", "re"))
    assert got["tests"] == want["tests"] and got["score"] == want["score"]
    assert [t["max_score"] for t in got["tests"] if t.get("number") == "3.compiles"] == [5.0]
    assert got["tests"] != json.loads((tmp_path / "old" / "results.json").read_text())["tests"]
    # Timings differ between two gradings (and a step under half a second has no time line at all), so lines
    # with seconds, and the blank lines around them, are left out of the comparison.
    lines = {d: [ln for ln in (tmp_path / d / "summary.md").read_text().splitlines() if ln.strip() and " s" not in ln]
             for d in ("new", "re")}
    assert lines["re"] == lines["new"]


def _by_number(path: Path) -> dict[str, ItemResult]:
    return {r.number: r for r in load_grading(path).items}


def test_edits_of_what_is_measured_are_refused_item_by_item_and_the_rest_rescored(tmp_path, drawn):
    def change(raw: dict) -> None:
        two_d = next(s for s in raw["stages"] if s["id"] == "blocktiling_2d")
        two_d["bench"] = {"reps": 50}
        tiled = next(s for s in raw["stages"] if s["id"] == "tiled")
        tiled["items"].append({"id": "ncu_new", "kind": "ncu", "expr": "smsp__inst_executed_op_texture.sum", "op": ">=",
                               "value": 1, "title": "a new criterion", "points": 1})
        raw["occupancy"]["tolerance"]["rel"] = 0.05
        extra = dict(next(s for s in raw["stages"] if s["id"] == "naive"), id="naive_again", number="1x")
        raw["stages"].insert(1, extra)
        stage_item(raw, "blocktiling_1d", "speed")["min"] = 0.30  # score-only: re-scored

    new_path = edited(tmp_path / "new.yaml", change)
    proc = grader("rescore", str(drawn / "textbook"), "--rubric", str(new_path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    items = _by_number(tmp_path / "o" / "grading.json")
    refused = {n for n, r in items.items() if r.message.startswith(REGRADE)}
    for n, r in items.items():
        assert (r.status is Status.NOT_EVALUATED and r.score == 0) or n not in refused
    # 4b's bench: how it is timed; what the build alone decides is re-scored, the report is not refused for it.
    built = {"4b.compiles", "4b.fp32_only", "4b.no_spills"}
    assert {n for n in refused if n.startswith("4b.")} == {n for n in items if n.startswith("4b.")} - built
    assert built <= set(items) and not [n for n in refused if n.startswith("R.")]
    assert "stage blocktiling_2d's bench changed" in items["4b.speed"].message
    assert "smsp__inst_executed_op_texture.sum was not collected" in items["3.ncu_new"].message
    assert "3.ncu_new needs one" in items["3.speed"].message  # speed items may be gated on technique items
    assert "3.compiles" not in refused and "3.ncu_reuse" not in refused
    assert {n for n in refused if n.startswith("1x.")} == {n for n in items if n.startswith("1x.")}
    assert "stage naive_again is new" in items["1x.compiles"].message
    occupancy = [r for r in items.values() if r.stage == "occupancy"]
    assert occupancy and all("occupancy.tolerance changed" in r.message for r in occupancy)
    assert items["4a.speed"].status is Status.PASSED and "4a.speed" not in refused
    assert items["5.beats_fp32"].status == _by_number(FIXTURES / "textbook" / "grading.json")["5.beats_fp32"].status
    for n in ("4b.speed", "3.ncu_new", "1x.compiles", "O.1"):
        assert f"{n}: {REGRADE}" in proc.stderr
    # Refused items: the grading keeps the rubric it was measured under, so a batch re-grades it.
    assert load_grading(tmp_path / "o" / "grading.json").rubric_sha256 == fixture("textbook").rubric_sha256


def test_a_setting_every_stage_is_measured_under_refuses_every_item(tmp_path, drawn):
    new_path = edited(tmp_path / "new.yaml", lambda raw: raw["settings"].update(correctness_sizes=[256, 768]))
    proc = grader("rescore", str(drawn / "reference"), "--rubric", str(new_path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    items = load_grading(tmp_path / "o" / "grading.json").items
    assert items and all(r.message == f"{REGRADE}: settings.correctness_sizes changed (what every stage is measured "
                         "under)" for r in items)


def test_a_stage_title_change_refuses_the_report_which_may_name_the_stage_by_it(tmp_path):
    new_path = edited(tmp_path / "new.yaml", lambda raw: raw["stages"][0].update(title="Naive, renamed"))
    g = fixture("reference")
    got, refused = rescore_grading(g, load_rubric(new_path), rubric_from_text(g.rubric_text))
    report = [r for r in got.items if r.stage == "report"]
    assert report and all("stage naive's title changed" in r.message for r in report)
    assert {f.number for f in refused} == {r.number for r in report}
    assert all(not r.message.startswith(REGRADE) for r in got.items if r.stage not in ("report",))


def test_a_grading_whose_rubric_is_not_known_is_refused_until_was_names_it(tmp_path):
    old_text = graded_with() + "\n# a rubric the repository does not hold\n"
    data = json.loads((FIXTURES / "starter" / "grading.json").read_text())
    data["rubric"] = ""  # an older grading: no copy of its rubric, only its hash
    data["rubric_sha256"] = hashlib.sha256(old_text.encode()).hexdigest()
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "grading.json").write_text(json.dumps(data))
    (tmp_path / "old.yaml").write_text(old_text)
    new_path = edited(tmp_path / "new.yaml", score_only)
    proc = grader("rescore", str(tmp_path / "g"), "--rubric", str(new_path), "--out", str(tmp_path / "o1"))
    assert proc.returncode == 0, proc.stderr
    items = load_grading(tmp_path / "o1" / "grading.json").items
    assert all("is not known; give it with --was" in r.message for r in items)
    proc = grader("rescore", str(tmp_path / "g"), "--rubric", str(new_path), "--was", str(tmp_path / "old.yaml"),
                  "--out", str(tmp_path / "o2"))
    assert proc.returncode == 0, proc.stderr
    assert not any(r.message.startswith(REGRADE) for r in load_grading(tmp_path / "o2" / "grading.json").items)


def test_bad_usage_exits_2_and_still_writes_results_json(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(graded_with().replace("version: 1", "version: 7", 1))
    cases = [
        (["rescore", str(FIXTURES), "--rubric", str(bad)], "version"),
        (["rescore", str(tmp_path / "nothing"), "--rubric", "rubric.yaml"], "does not exist"),
        (["rescore", str(tmp_path / "empty"), "--rubric", "rubric.yaml"], "holds no grading.json"),
        (["rescore", str(FIXTURES), "--rubric", "rubric.yaml", "--out", str(FIXTURES / "reference")],
         "another folder"),
        (["whatif", str(FIXTURES), "--rubric", str(bad)], "version"),
    ]
    (tmp_path / "empty").mkdir()
    (tmp_path / "not-json").mkdir()
    (tmp_path / "not-json" / "grading.json").write_text("{")
    cases.append((["rescore", str(tmp_path / "not-json"), "--rubric", "rubric.yaml"], "not JSON"))
    for k, (args, words) in enumerate(cases):
        out = tmp_path / f"out{k}"
        proc = grader(*args, *([] if "--out" in args else ["--out", str(out)]))
        assert proc.returncode == 2, (args, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
        if "--out" not in args:
            results = json.loads((out / "results.json").read_text())
            assert words in json.dumps(results) and results["score"] == 0
    # --out onto the stored gradings: said, and nothing written over them.
    assert sorted(p.name for p in (FIXTURES / "reference").iterdir()) == ["grading.json"]


@pytest.fixture(scope="module")
def batch_of_ten(tmp_path_factory, drawn) -> Path:
    """:func:`_batch_of_ten`, written once for the module (its outputs' plots copied from ``drawn``); each test
    copies it."""
    return _batch_of_ten(tmp_path_factory.mktemp("ten"), drawn)


def _batch_of_ten(tmp_path: Path, drawn: Path) -> Path:
    """A batch's output folder as ``python -m grader batch`` leaves it: ten submissions (the demo class twice), each
    with its outputs, batch_status.json and intake.json; the export's metadata; grades.csv; batch.json."""
    export = tmp_path / "export"
    export.mkdir()
    batch = tmp_path / "batch"
    meta = {}
    for k in range(10):
        name = NAMES[k % len(NAMES)]
        folder = f"submission_{1000 + k}"
        meta[folder] = {":submitters": [{":name": f"Person {k}", ":sid": f"s{k}", ":email": f"p{k}@example.edu"}],
                        ":created_at": "2026-12-01 10:00:00 +0000"}
        dst = batch / "submissions" / folder
        write_outputs(fixture(name), dst, drawn=drawn / name)
        (dst / "batch_status.json").write_text(json.dumps({"status": "graded"}))
        (dst / "intake.json").write_text(json.dumps({"refused": False, "skipped": []}))
    (export / "submission_metadata.yml").write_text(yaml.safe_dump(meta))
    (batch / "batch.json").write_text(json.dumps({"export": str(export), "graded_by": {"stages": None}}))
    return batch


def test_a_ten_submission_batch_rescores_into_grades_csv(tmp_path, batch_of_ten):
    batch = shutil.copytree(batch_of_ten, tmp_path / "batch")
    new_path = edited(tmp_path / "new.yaml", score_only)
    proc = grader("rescore", str(batch), "--rubric", str(new_path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    import csv

    with open(tmp_path / "o" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["folder"] for r in rows] == [f"submission_{1000 + k}" for k in range(10)]
    assert rows[3]["names"] == "Person 3" and rows[3]["emails"] == "p3@example.edu"
    for r in rows:
        results = json.loads((tmp_path / "o" / "submissions" / r["folder"] / "results.json").read_text())
        assert r["status"] == "graded" and float(r["total"]) == results["score"]
        assert (tmp_path / "o" / "submissions" / r["folder"] / "batch_status.json").is_file()
    textbook = rows[1]  # submission_1001 is the textbook kernel set: 4a.speed passes 30 %
    assert float(textbook["blocktiling_1d.speed"]) == stage_item(yaml.safe_load(new_path.read_text()),
                                                                 "blocktiling_1d", "speed")["points"]


def test_a_batchs_failed_grading_keeps_its_row(tmp_path, batch_of_ten):
    batch = shutil.copytree(batch_of_ten, tmp_path / "batch")
    failed = batch / "submissions" / "submission_1004"
    shutil.rmtree(failed)
    failed.mkdir()
    (failed / "batch_status.json").write_text(json.dumps({"status": "timed_out"}))
    (failed / "results.json").write_text(json.dumps({"score": 0, "tests": []}))
    proc = grader("rescore", str(batch), "--rubric", str(edited(tmp_path / "new.yaml", score_only)),
                  "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    import csv

    with open(tmp_path / "o" / "grades.csv", newline="") as f:
        rows = {r["folder"]: r for r in csv.DictReader(f)}
    assert rows["submission_1004"]["status"] == "timed_out" and rows["submission_1004"]["total"] == ""
    assert rows["submission_1003"]["status"] == "graded"


def test_a_timing_change_refuses_only_what_the_runs_feed(tmp_path):
    """naive's bench (how its kernel is timed) changed: its run-fed items need a real re-grade; what is judged from
    the build (1.compiles, 1.fp32_only) and the report (R.14, graded by hand, included) are re-scored as stored."""
    kept = rubric_from_text(graded_with())
    raw = yaml.safe_load(graded_with())
    next(s for s in raw["stages"] if s["id"] == "naive")["bench"] = {"reps": 6, "min_reps": 3}
    new = rubric_from_text(yaml.safe_dump(raw, sort_keys=False))
    g = fixture("reference")
    again, refused = rescore_grading(g, new, kept)
    numbers = {r.number for r in refused}
    assert {"1.correct", "1.ffma_count"} <= numbers
    assert not numbers & {"1.compiles", "1.fp32_only"} and not [n for n in numbers if n.startswith(("R.", "O.", "2."))]
    assert all("how its kernel is run and timed" in r.why for r in refused)
    stored = {i.number: i for i in g.items}
    for item in again.items:
        if item.number not in numbers:
            assert (item.status, item.score) == (stored[item.number].status, stored[item.number].score), item.number
    # A setting every stage's runs are made under: every stage's run-fed items, still not the build's or the report.
    raw = yaml.safe_load(graded_with())
    raw["settings"]["stage_limits"]["multiple"] = 7.0
    _, refused = rescore_grading(g, rubric_from_text(yaml.safe_dump(raw, sort_keys=False)), kept)
    numbers = {r.number for r in refused}
    assert {"1.correct", "4b.speed", "6.speed"} <= numbers and not numbers & {"1.compiles", "5.tensor_cores"}
    assert not [n for n in numbers if n.startswith(("R.", "O."))]
