"""grader/instructor/calibrate.py: the calibration report on synthetic gradings and on the stored gradings of
tests/fixtures/gradings/ (no GPU): the analysis alone, the GPU run's path with stored gradings for its gradings,
and `calibrate --from-gradings`."""
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from grader.evidence.protocol import ProbeResult
from grader.grading import load_grading
from grader.instructor.calibrate import (
    MIN_MARGIN,
    POPULATIONS,
    analyse,
    calibration_rows,
    load_populations,
    margin,
    run_calibration,
    write_report,
)
from grader.instructor.stage_limits import limit_proposals
from grader.model import ItemResult, Measured, Status
from grader.rubric.calibration import load_entries
from grader.rubric.load import load_rubric, parse_rubric, rubric_from_text
from grader.run_local import parse_args  # the legacy flags of run_local.py
from tests.gradings_helpers import FIXTURES, edited, fixture, graded_with, grader, stage_item
from tests.test_children import FAKE_CUPY

ROOT = Path(__file__).resolve().parent.parent


RUBRIC = parse_rubric(yaml.safe_load((ROOT / "rubric.yaml").read_text()))
FIXTURE_RUBRIC = rubric_from_text(graded_with())  # what tests/fixtures/gradings/ were graded under


def grading(values: dict, seconds=30.0, earned: float | None = None):
    """A Grading-like object. values: {(stage, item): (value, threshold, passed)}; ``earned``: the share
    of the points a failed item earned on its curve (default nothing)."""
    items = []
    for (sid, iid), (v, thr, ok) in values.items():
        st = RUBRIC.stage(sid)
        it = next(i for i in st.items if i.id == iid)
        key = {"ncu": "value", "fraction_of_baseline": "fraction_of_baseline",
               "fraction_of_peak": "ratio", "sass": "opcodes"}[it.kind]
        vals = {key: v} if v is not None else {}
        if it.kind == "ncu" and v is not None:
            vals["threshold"] = thr
        got = it.points if ok else it.points * (earned or 0.0)
        items.append(ItemResult(sid, iid, it.title, Status.PASSED if ok else Status.FAILED, got,
                                it.points, number=f"{st.number}.{iid}", values=Measured(**vals)))
    return SimpleNamespace(items=items, seconds=seconds, env=SimpleNamespace(device=ProbeResult(ok=True, name="NVIDIA H200")))


def row_of(rows, stage, item):
    return next(r for r in rows if r.stage == stage and r.item == item)


REUSE = ("tiled", "ncu_reuse")
COAL = ("coalesced", "ncu_coalesced")
SPEED = ("tiled", "speed")


def test_margin_uses_the_worst_repeat_in_the_direction_of_the_test():
    assert margin(">=", [512, 500, None], 128) == pytest.approx((500 - 128) / 128)
    assert margin("<=", [2.5, 3.0], 4) == pytest.approx(0.25)
    assert margin("<=", [0.0], 64.0) == 1.0
    assert margin("==", [1.0], 1.0) is None and margin(">=", [None], 1.0) is None and margin(">=", [1], 0) is None


def test_a_technique_item_is_ok_when_the_reference_and_textbook_pass_and_both_predecessors_fail():
    refs = [grading({REUSE: (512, 128, True)}), grading({REUSE: (500, 128, True)})]
    preds = [grading({REUSE: (16, 128, False)}), grading({REUSE: (16.2, 128, False)})]
    book = [grading({REUSE: (512, 128, True)})] * 2
    book_preds = [grading({REUSE: (16, 128, False)})] * 2
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=book, textbook_predecessors=book_preds), *REUSE)
    assert r.role == "technique" and (r.verdict, r.why) == ("OK", "")
    assert r.reference == [512, 500] and r.predecessor == [16, 16.2] and r.threshold == 128 and r.op == ">="
    assert r.margin == pytest.approx(372 / 128) and r.predecessor_source == "stage 2"
    assert r.textbook.values == [512, 512] and r.textbook_predecessor.passed == [False, False]


def test_a_technique_item_the_textbook_kernel_fails_is_unfair():
    refs = [grading({REUSE: (512, 128, True)})]
    preds = [grading({REUSE: (16, 128, False)})]
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=[grading({REUSE: (100, 128, False)})],
                                textbook_predecessors=preds), *REUSE)
    assert r.verdict == "UNFAIR" and "textbook kernel fails in 1 of 1" in r.why


def test_a_technique_item_the_previous_textbook_kernel_passes_is_weak():
    refs = [grading({REUSE: (512, 128, True)})] * 2
    preds = [grading({REUSE: (16, 128, False)})] * 2
    book_preds = [grading({REUSE: (16, 128, False)}), grading({REUSE: (200, 128, True)})]
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=refs, textbook_predecessors=book_preds), *REUSE)
    assert r.verdict == "WEAK" and r.why == "the previous stage's textbook kernel passes in 1 of 2 repeats"


def test_without_a_textbook_population_technique_and_speed_items_are_unchecked():
    refs = [grading({REUSE: (512, 128, True), SPEED: (0.18, None, True)})]
    preds = [grading({REUSE: (16, 128, False), SPEED: (0.12, None, False)})]
    rows = calibration_rows(RUBRIC, refs, preds)
    assert row_of(rows, *REUSE).verdict == row_of(rows, *SPEED).verdict == "UNCHECKED"


def test_tight_margin_is_flagged():
    refs = [grading({COAL: (3.8, 4, True)})]
    preds = [grading({COAL: (16.5, 4, False)})]
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=refs), *COAL)
    assert r.verdict == "TIGHT" and r.margin == pytest.approx(0.05) and "5.0% < 10%" in r.why


def test_a_speed_item_needs_half_its_points_on_the_textbook_kernel_not_a_failing_predecessor():
    refs = [grading({SPEED: (0.18, None, True)})] * 3
    preds = [grading({SPEED: (0.16, None, True)})] * 3  # the previous stage's speed is gated, not judged here
    fair = [grading({SPEED: (0.14, None, False)}, earned=0.875)] * 3
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=fair), *SPEED)
    assert r.kind == "fraction_of_baseline" and r.role == "speed" and r.threshold == 0.15
    assert r.verdict == "OK" and r.margin == pytest.approx((0.18 - 0.15) / 0.15)
    unfair = [grading({SPEED: (0.14, None, False)}, earned=0.875), grading({SPEED: (0.09, None, False)}, earned=0.25),
              grading({SPEED: (0.14, None, False)}, earned=0.875)]
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=unfair), *SPEED)
    assert r.verdict == "UNFAIR" and "earns 25% of the points" in r.why


def test_reference_failing_any_repeat_fails():
    refs = [grading({REUSE: (512, 128, True)}), grading({REUSE: (None, None, False)})]
    preds = [grading({REUSE: (16, 128, False)})] * 2
    r = row_of(calibration_rows(RUBRIC, refs, preds), *REUSE)
    assert r.verdict == "FAIL" and "1 of 2" in r.why


def test_unmeasured_predecessor_is_unchecked():
    refs = [grading({REUSE: (512, 128, True)})]
    preds = [grading({})]
    r = row_of(calibration_rows(RUBRIC, refs, preds, textbook=refs), *REUSE)
    assert r.verdict == "UNCHECKED" and r.predecessor == [None]


def test_integrity_items_need_only_the_reference():
    key = ("tiled", "ffma_count")
    n3 = 2048.0**3
    refs = [grading({key: (n3, n3, True)})]
    preds = [grading({key: (n3, n3, True)})]
    r = row_of(calibration_rows(RUBRIC, refs, preds), *key)
    assert r.integrity and r.role == "integrity" and r.op == "==" and r.margin is None and r.verdict == "OK"


def test_first_stage_has_no_predecessor():
    key = ("naive", "ffma_count")
    n3 = 2048.0**3
    r = row_of(calibration_rows(RUBRIC, [grading({key: (n3, n3, True)})], [grading({})]), *key)
    assert r.predecessor == [] and r.predecessor_source == "none (first stage)" and r.verdict == "OK"


def test_a_stage_that_kept_its_reference_has_no_predecessor():
    key = ("wmma", "ncu_tensor_pipe")
    notes = {"wmma": "its own reference kernel mmWMMA (the predecessor has other input types)"}
    ref = [grading({key: (42.0, 2, True)})]
    r = row_of(calibration_rows(RUBRIC, ref, [grading({})], notes, textbook=ref), *key)
    assert r.predecessor == [] and r.verdict == "OK" and r.why == "no predecessor to fail"


def test_threshold_and_technique_items_get_rows():
    rows = calibration_rows(RUBRIC, [grading({})], [grading({})])
    kinds = {r.kind for r in rows}
    assert kinds <= {"ncu", "sass", "fraction_of_baseline", "fraction_of_peak", "speedup_over_stage"}
    keys = {(r.stage, r.item) for r in rows}
    assert ("wmma", "beats_fp32") in keys and ("wmma", "tensor_cores") in keys  # the SASS technique item
    assert not any(r.item in ("compiles", "correct", "fp32_only", "no_spills") for r in rows)


def test_markdown_and_json_report(tmp_path):
    refs = [grading({REUSE: (512, 128, True), COAL: (2.5, 4, True)})]
    preds = [grading({REUSE: (16, 128, False), COAL: (16.5, 4, False)})]
    rows = calibration_rows(RUBRIC, refs, preds, textbook=refs, textbook_predecessors=preds)
    meta = {"device": "NVIDIA H200", "repeats": 1, "profile_n": 2048, "seconds_reference": "31.0 (max 31.0)"}
    md_path, js_path = write_report(rows, meta, tmp_path)
    md = md_path.read_text()
    assert "- GPU: NVIDIA H200" in md and "31.0 (max 31.0)" in md
    assert "| 3.ncu_reuse reuse through shared memory" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| 3.ncu_reuse"))
    assert ("| technique | >= 128 | 512 / 512 / 512 (passes 1/1) | 512 / 512 / 512 (passes 1/1) | "
            "16 / 16 / 16 (passes 0/1) | 16 / 16 / 16 (passes 0/1) | 300% | OK |") in line
    data = json.loads(js_path.read_text())
    assert data["min_margin"] == MIN_MARGIN and data["meta"]["device"] == "NVIDIA H200"
    assert {r["item"] for r in data["rows"]} >= {"ncu_reuse", "ncu_coalesced"}


def test_run_calibration_interleaves_the_populations_and_reuses_the_environment(tmp_path, monkeypatch):
    """The GPU run's whole path (grade, write each grading's files, analyse, write the report and the entry)
    on the CPU: each "grading" is a real stored one (tests/fixtures/gradings/), typed as the pipeline returns it.
    The stored gradings repeat (the 8 gradings are 3 sets of measurements), so a grading whose plots were drawn
    from the same measurements already has them copied (write_outputs' ``drawn``, as rescore does); every
    grading's files are still written by write_outputs."""
    from grader.outputs import write
    from grader.outputs.profile_page import plot_inputs

    written: list[tuple[tuple, Path]] = []  # (plot inputs, the folder they were drawn into)
    write_outputs = write.write_outputs

    def write_once(g, out, drawn=None):
        inputs = plot_inputs(g)
        drawn = drawn or next((folder for seen, folder in written if seen == inputs), None)
        if drawn is None:
            written.append((inputs, Path(out)))
        return write_outputs(g, out, drawn=drawn)

    monkeypatch.setattr(write, "write_outputs", write_once)
    calls = []
    textbook = tmp_path / "course"
    shutil.copytree(ROOT / "solutions", textbook)  # any complete submission stands in for the textbook one
    stored = {"solutions": "reference", "shifted_submission": "shifted", "course": "textbook",
              "textbook_shifted_submission": "shifted"}

    def fake_grade(sub, rubric, out_dir, *, stages, progress, env):
        assert stages == [s.id for s in rubric.stages]  # occupancy is not graded while calibrating
        calls.append((Path(sub).name, Path(out_dir).name, env))
        g = fixture(stored[Path(sub).name])
        g.env = env or g.env
        return g

    cal = run_calibration(FIXTURE_RUBRIC, ROOT / "solutions", tmp_path / "out", repeats=2, grade_fn=fake_grade,
                          progress=lambda _m: None, textbook_dir=textbook)
    assert [c[:2] for c in calls] == [
        ("solutions", "reference_0"), ("shifted_submission", "shifted_0"),
        ("course", "textbook_0"), ("textbook_shifted_submission", "textbook_shifted_0"),
        ("solutions", "reference_1"), ("shifted_submission", "shifted_1"),
        ("course", "textbook_1"), ("textbook_shifted_submission", "textbook_shifted_1")]
    assert calls[0][2] is None and all(c[2] is calls[1][2] for c in calls[1:]) and calls[1][2] is not None
    assert len(written) == 3  # the reference's, the shifted one's, the textbook's plots drawn
    out = tmp_path / "out"
    assert (out / "shifted_submission" / "SHIFTED.md").is_file()
    assert (out / "textbook_shifted_submission" / "SHIFTED.md").is_file()
    assert all((out / f"{p}_{k}" / "grading.json").is_file() for p in POPULATIONS for k in (0, 1))
    assert "- GPU: NVIDIA H200" in (out / "calibration.md").read_text()
    assert json.loads((out / "calibration.json").read_text())["meta"]["repeats"] == 2
    # The stage limits read each reference's typed benchmark record: every stage measured, none cut short.
    assert all(p.proposed is not None and len(p.measured) == 2 and not p.note for p in cal.limits)
    entry = out / "calibration" / "nvidia-h200.yaml"
    assert cal.files[-1] == entry and load_entries(entry.parent, FIXTURE_RUBRIC)[0].gpu == "NVIDIA H200"
    # What it wrote is what the analysis alone reads back, with the same verdicts.
    again = analyse(FIXTURE_RUBRIC, load_populations(out), tmp_path / "again")
    assert [(r.number, r.item, r.verdict) for r in again.rows] == [(r.number, r.item, r.verdict) for r in cal.rows]


def test_load_populations_reads_a_calibrations_folders_in_repeat_order(tmp_path):
    for name in ("reference_1", "reference_0", "shifted_0", "textbook", "unrelated"):
        (tmp_path / name).mkdir()
        src = "shifted" if name.startswith("shifted") else "textbook" if name == "textbook" else "reference"
        shutil.copyfile(FIXTURES / src / "grading.json", tmp_path / name / "grading.json")
    (tmp_path / "reference_0" / "grading.json").write_text(
        (FIXTURES / "reference" / "grading.json").read_text().replace('"submission": ', '"submission": "zero", "x": ', 1))
    (tmp_path / "textbook_shifted_0").mkdir()
    (tmp_path / "textbook_shifted_0" / "grading.json").write_text("{}")
    pops = load_populations(tmp_path)
    assert [g.submission for g in pops.reference][0] == "zero" and len(pops.reference) == 2
    assert len(pops.shifted) == len(pops.textbook) == 1 and pops.textbook_shifted == []
    assert pops.problems and pops.problems[0].startswith("textbook_shifted_0: grading.json: format")


# ---- the analysis alone, on the stored gradings of the demo class ---------------------------------------------
def test_the_analysis_of_the_stored_gradings_gives_every_verdict_and_stage_limit(tmp_path):
    cal = analyse(FIXTURE_RUBRIC, load_populations(FIXTURES), tmp_path)
    rows = {(r.stage, r.item): r for r in cal.rows}
    assert set(rows) >= {REUSE, COAL, SPEED, ("wmma", "tensor_cores")}
    for r in cal.rows:  # every row was read from a real grading: the reference measured what it is graded on
        assert len(r.reference_passed) == 1 and r.verdict in ("OK", "TIGHT", "UNFAIR", "WEAK", "FAIL", "UNCHECKED")
        if r.op != "sass":
            assert r.reference[0] is not None, (r.stage, r.item)
    assert rows[REUSE].textbook.measured and rows[REUSE].predecessor_passed == [False]
    assert [p.stage for p in cal.limits] == [s.id for s in FIXTURE_RUBRIC.stages]
    assert all(p.proposed is not None and p.limit_s is not None and not p.note for p in cal.limits)
    md = (tmp_path / "calibration.md").read_text()
    assert f"verdicts: {sum(r.verdict == 'OK' for r in cal.rows)} OK of {len(cal.rows)}" in md
    assert "## Stage time limits" in md


def test_a_reference_stopped_before_its_reps_is_told_in_the_stage_limits():
    g = fixture("reference")
    bench = g.outcomes["naive"].bench
    assert bench is not None and bench.student_ms
    st = FIXTURE_RUBRIC.stage("naive")
    bench.student_ms = bench.student_ms[: max(1, st.bench.reps - 1)] if st.bench.reps > 1 else []
    p = next(p for p in limit_proposals(FIXTURE_RUBRIC, [g]) if p.stage == "naive")
    if st.bench.reps > 1:
        assert p.note.startswith(f"the reference stopped after {len(bench.student_ms)} of {st.bench.reps} reps")
    g.outcomes["naive"].bench = None  # no benchmark record: not counted as stopped early
    assert not next(p for p in limit_proposals(FIXTURE_RUBRIC, [g]) if p.stage == "naive").note.startswith("the ref")


def test_calibrate_from_gradings_on_the_command_line(tmp_path):
    proc = grader("calibrate", "--from-gradings", str(FIXTURES), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "calibration.json").read_text())
    ok = sum(r["verdict"] == "OK" for r in data["rows"])
    said = " ".join((proc.stdout + proc.stderr).split())  # the console wraps long lines
    assert f"calibration: {ok} of {len(data['rows'])} threshold and technique items OK" in said
    assert "calibration entry for this GPU:" in said and (tmp_path / "calibration" / "nvidia-h200.yaml").is_file()
    assert data["stage_limits"] and all(p["proposed"] for p in data["stage_limits"])


def test_calibrate_from_gradings_says_what_is_missing(tmp_path):
    proc = grader("calibrate", "--from-gradings", str(tmp_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "holds no reference gradings" in proc.stderr
    assert "holds no reference gradings" in (tmp_path / "out" / "results.json").read_text()


def test_calibrate_from_gradings_under_an_edited_rubric_rescores_them(tmp_path):
    """Under a rubric other than the one they kept, the gradings are re-scored: a moved threshold is read at its
    new level, and an edit of what is measured leaves the items it reaches not measured, said in a note."""
    def edit(raw):
        stage_item(raw, "tiled", "ncu_reuse")["value"] = 1e6  # no reference reaches it
        next(s for s in raw["stages"] if s["id"] == "naive")["bench"] = {"reps": 6, "min_reps": 3}  # what is measured
    path = edited(tmp_path / "edited.yaml", edit)
    cal = analyse(load_rubric(path), load_populations(FIXTURES), tmp_path / "out")
    rows = {(r.stage, r.item): r for r in cal.rows}
    assert rows[REUSE].threshold == 1e6 and rows[REUSE].verdict == "FAIL"
    assert any("need a real re-grade" in n for n in cal.meta["notes"])


def test_cli_flag():
    assert parse_args(["--calibrate"]).calibrate == 3
    assert parse_args(["--calibrate", "5"]).calibrate == 5
    assert parse_args(["solutions", "--calibrate"]).submission == "solutions"
    assert parse_args(["solutions"]).calibrate is None


def test_cli_rejects_zero_repeats(tmp_path):
    from grader.cli import EXIT_USAGE
    from grader.run_local import main

    assert main(["--calibrate", "0", "--out", str(tmp_path), "--quiet"]) == EXIT_USAGE
    assert "at least 1" in (tmp_path / "results.json").read_text()


def test_the_calibrate_command_runs_its_gpu_path_on_the_cpu_with_the_fake_device(tmp_path, monkeypatch):
    """`python -m grader calibrate` as an instructor runs it, with the real pipeline: the probe child finds the
    stand-in GPU (tests/fake_cupy), so every step of a GPU calibration runs (the grading, its files, the analysis,
    the stage limits over the typed records); the stage children, sandboxed away from the checkout, find no
    CuPy, so nothing is measured and the report and the command say so."""
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    out = tmp_path / "out"
    proc = grader("calibrate", "--repeats", "1", "--no-textbook", "--out", str(out), timeout=600)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, said
    for population in ("reference_0", "shifted_0"):
        g = load_grading(out / population / "grading.json")
        assert g.env.has_gpu and g.env.device is not None and g.env.device.name == "NVIDIA H200"
    data = json.loads((out / "calibration.json").read_text())
    assert data["meta"]["device"] == "NVIDIA H200" and data["meta"]["repeats"] == 1
    assert data["stage_limits"] and all(p["proposed"] is None for p in data["stage_limits"])
    assert "naive: not measured (the stage did not run its benchmark" in said
    assert "no calibration entry: the reference measured nothing on a GPU" in said
    assert not (out / "calibration").exists()


def test_calibrate_runs_without_the_optional_similarity_extra(tmp_path):
    """`python -m grader calibrate` builds the whole command line, the similarity command's included; a machine
    without copydetect (the optional 'similarity' extra, e.g. a GPU box set up for grading) still calibrates."""
    code = ("import sys; sys.modules['copydetect'] = sys.modules['copydetect.utils'] = None\n"
            "from grader.cli import main\n"
            f"sys.exit(main(['calibrate', '--from-gradings', {str(FIXTURES)!r}, '--out', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "calibration.md").is_file()
