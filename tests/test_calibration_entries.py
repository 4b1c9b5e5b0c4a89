"""Per-GPU calibration entries (grader/rubric/calibration.py, written by grader/instructor/entry.py): validated
like the rubric, used by a grading on their GPU and named in its summary; on a GPU without one the rubric's
defaults grade and one line says the speed items are an estimate. No GPU: the device is a probe's description
(the names of real course and student cards), the gradings are the stored ones of tests/fixtures/gradings/."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.grading import Environment
from grader.instructor.calibrate import analyse, load_populations
from grader.instructor.entry import propose
from grader.instructor.rescore import rescore_grading
from grader.outputs.summary import summary_markdown
from grader.pipeline import grade
from grader.rubric.calibration import FOLDER, apply, for_device, load_entries, slug
from grader.rubric.errors import RubricError
from grader.rubric.load import load_rubric, rubric_from_text
from tests.gradings_helpers import FIXTURES, ROOT, fixture, graded_with

H200 = ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0], sms=132, runtime_version=13000, cupy_version="x")
H100 = dataclasses.replace(H200, name="NVIDIA H100 80GB HBM3")
L4 = dataclasses.replace(H200, name="NVIDIA L4", cc=[8, 9], sms=58)


def entry_text(rubric, **stages) -> str:
    return yaml.safe_dump({"gpu": "NVIDIA H100 80GB HBM3", "calibrated": "2026-12-06 19:00 UTC", "repeats": 3,
                           "rubric_sha256": rubric.sha256, "stages": stages}, sort_keys=False)


@pytest.fixture
def rubric_dir(tmp_path):
    """A copy of rubric.yaml with a calibration/ folder beside it."""
    shutil.copyfile(ROOT / "rubric.yaml", tmp_path / "rubric.yaml")
    (tmp_path / FOLDER).mkdir()
    return tmp_path


def test_an_entry_is_named_by_its_gpus_slug():
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3" and slug("NVIDIA H200") == "nvidia-h200"
    assert slug("Tesla T4") == "tesla-t4" and slug("  ") == "unnamed-gpu"


def test_a_committed_entry_is_loaded_with_the_rubric_and_applied_on_its_gpu(rubric_dir):
    base = load_rubric(rubric_dir / "rubric.yaml")
    speed = next(i for i in base.stage("tiled").items if i.id == "speed")
    (rubric_dir / FOLDER / "nvidia-h100-80gb-hbm3.yaml").write_text(entry_text(
        base, naive={"reference_s": 2.5},
        tiled={"thresholds": {"speed": {"min": 0.12, "rubric": speed.params.min, "margin": 0.3, "verdict": "OK"}}}))
    rubric = load_rubric(rubric_dir / "rubric.yaml")
    assert [e.gpu for e in rubric.calibrations] == ["NVIDIA H100 80GB HBM3"]
    used, entry, line = for_device(rubric, H100)
    assert entry is rubric.calibrations[0]
    assert used.stage("naive").limits.reference_s == 2.5
    assert next(i for i in used.stage("tiled").items if i.id == "speed").params.min == 0.12
    assert used.stage("coalesced") == rubric.stage("coalesced")  # what the entry does not name stays the rubric's
    assert line == ("thresholds and stage time limits: calibrated for this GPU "
                    "(calibration/nvidia-h100-80gb-hbm3.yaml, 2026-12-06 19:00 UTC)")
    # Another GPU: the rubric's defaults, and one line naming where they were calibrated.
    same, none, line = for_device(rubric, L4)
    assert same is rubric and none is None
    assert line == ("thresholds: the rubric's defaults (calibrated on NVIDIA H100 80GB HBM3; no entry for NVIDIA L4): "
                    "read the speed items as an estimate")
    assert for_device(rubric, None) == (rubric, None, "")  # no GPU: nothing is timed, nothing to say
    assert for_device(rubric, ProbeResult(ok=False, name="NVIDIA H200"))[2] == ""


def test_a_level_the_rubric_changed_since_is_left_at_the_rubrics(rubric_dir):
    base = load_rubric(rubric_dir / "rubric.yaml")
    (rubric_dir / FOLDER / "nvidia-h100-80gb-hbm3.yaml").write_text(entry_text(
        base, tiled={"thresholds": {"speed": {"min": 0.12, "rubric": 0.9}}}))
    rubric = load_rubric(rubric_dir / "rubric.yaml")
    used, _, line = for_device(rubric, H100)
    assert used.stage("tiled") == rubric.stage("tiled")
    assert "left at the rubric's (changed since): 3.speed: rubric.yaml's min is" in line and "against 0.9" in line


@pytest.mark.parametrize("stages, where, expected", [
    ({"nosuch": {"reference_s": 1}}, "calibration/nvidia-h100-80gb-hbm3.yaml.stages.nosuch", "one of naive"),
    ({"naive": {"reference_s": -1}}, "stages.naive.reference_s", "a positive number"),
    ({"naive": {"reference_s": 1, "run_s": 3}}, "stages.naive", "run_s"),
    ({"tiled": {"thresholds": {"nosuch": {"min": 1, "rubric": 1}}}}, "stages.tiled.thresholds.nosuch", "one of"),
    ({"tiled": {"thresholds": {"speed": {"min": "fast", "rubric": 0.15}}}}, "thresholds.speed.min", "a number"),
    ({"tiled": {"thresholds": {"compiles": {"min": 1, "rubric": 1}}}}, "thresholds.compiles", "no level"),
])
def test_a_bad_entry_is_refused_naming_its_key(rubric_dir, stages, where, expected):
    base = load_rubric(rubric_dir / "rubric.yaml")
    (rubric_dir / FOLDER / "nvidia-h100-80gb-hbm3.yaml").write_text(entry_text(base, **stages))
    with pytest.raises(RubricError) as exc:
        load_rubric(rubric_dir / "rubric.yaml")
    assert where in str(exc.value) and expected in str(exc.value)


def test_an_entry_in_another_gpus_file_is_refused(rubric_dir):
    base = load_rubric(rubric_dir / "rubric.yaml")
    (rubric_dir / FOLDER / "nvidia-h200.yaml").write_text(entry_text(base))
    with pytest.raises(RubricError, match="holds the entry of 'NVIDIA H100 80GB HBM3'.*nvidia-h100-80gb-hbm3.yaml"):
        load_rubric(rubric_dir / "rubric.yaml")


def test_the_shipped_rubric_and_its_entries_load():
    """What the repository commits beside rubric.yaml validates against it (none is fine)."""
    rubric = load_rubric(ROOT / "rubric.yaml")
    assert all(slug(e.gpu) + ".yaml" == Path(e.source).name for e in rubric.calibrations)


def test_what_calibrate_writes_is_an_entry_the_grader_reads(tmp_path):
    """The analysis of the stored H200 gradings writes the H200's entry; committed beside that rubric it loads,
    validates and grades the H200 with the measured stage times."""
    fixture_rubric = rubric_from_text(graded_with())
    cal = analyse(fixture_rubric, load_populations(FIXTURES), tmp_path / "cal")
    written = tmp_path / "cal" / FOLDER / "nvidia-h200.yaml"
    assert written in cal.files
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "rubric.yaml").write_text(graded_with())
    shutil.copytree(written.parent, tmp_path / "r" / FOLDER)
    rubric = load_rubric(tmp_path / "r" / "rubric.yaml")
    used, entry, line = for_device(rubric, H200)
    assert entry is not None and "calibration/nvidia-h200.yaml" in line
    for p in cal.limits:
        assert used.stage(p.stage).limits.reference_s == p.proposed
    # Every threshold it lists was measured, and one the rules hold at keeps the rubric's level.
    for t in entry.thresholds:
        row = next(r for r in cal.rows if (r.stage, r.item) == (t.stage, t.item))
        assert t.margin is not None and t.verdict == row.verdict
        if row.verdict == "OK":
            assert t.value == t.rubric


def test_a_short_margin_is_moved_so_the_reference_passes_and_the_predecessors_fail():
    from grader.instructor.calibrate import MIN_MARGIN, Measured, Row

    row = Row("tiled", "3", "ncu_reuse", "t", "ncu", ">=", 128.0, role="technique", reference=[135.0, 140.0],
              reference_passed=[True, True], predecessor=[16.0, 16.0], predecessor_passed=[False, False],
              textbook=Measured([150.0, 150.0], [True, True], [1, 1]), verdict="TIGHT", why="short")
    value, why = propose(row, 128.0)
    assert why == "" and 16.0 < value <= 135.0 / (1 + MIN_MARGIN)
    # No level fits: a predecessor measures as much as the reference.
    row.predecessor = [130.0, 130.0]
    value, why = propose(row, 128.0)
    assert value == 128.0 and "no level passes the reference" in why


def test_a_grading_on_a_gpu_names_its_entry_in_the_summary(rubric_dir, tmp_path):
    """The pipeline on a probed (stand-in) H100 with the report section only (no GPU step runs)."""
    base = load_rubric(rubric_dir / "rubric.yaml")
    (rubric_dir / FOLDER / "nvidia-h100-80gb-hbm3.yaml").write_text(entry_text(base, naive={"reference_s": 2.5}))
    rubric = load_rubric(rubric_dir / "rubric.yaml")
    env = Environment(H100, "", None, None, ["-arch=sm_90a"], Peaks(None, None, "test"))
    g = grade(ROOT / "solutions", rubric, tmp_path / "h100", stages=["report"], env=env)
    assert "calibrated for this GPU (calibration/nvidia-h100-80gb-hbm3.yaml" in " ".join(g.notes)
    assert g.calibration == rubric.calibrations[0].text
    assert "- thresholds and stage time limits: calibrated for this GPU" in summary_markdown(g)
    env_l4 = dataclasses.replace(env, device=L4)
    g4 = grade(ROOT / "solutions", rubric, tmp_path / "l4", stages=["report"], env=env_l4)
    assert any(n.startswith("thresholds: the rubric's defaults (calibrated on NVIDIA H100 80GB HBM3; no entry for "
                            "NVIDIA L4)") for n in g4.notes) and g4.calibration == ""


def test_a_rescore_reads_a_grading_with_the_entry_it_was_graded_with(tmp_path):
    """A stored grading made with an entry (its stage limits, kept in grading.json) re-scored under the rubric it
    kept: the entry is applied again, so the stage's measurements are not taken for changed."""
    kept = rubric_from_text(graded_with())
    text = entry_text(kept, naive={"reference_s": 2.5})
    (tmp_path / "rubric.yaml").write_text(graded_with())
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / "nvidia-h100-80gb-hbm3.yaml").write_text(text)
    with_entry = apply(kept, load_entries(tmp_path / FOLDER, kept)[0])[0]
    stored = fixture("reference")
    stored.outcomes["naive"] = dataclasses.replace(stored.outcomes["naive"], stage=with_entry.stage("naive"))
    _, refused = rescore_grading(stored, kept, kept)  # not knowing the entry: naive's limits changed
    assert any(r.number.startswith("1.") and "limits" in r.why for r in refused)
    _, refused = rescore_grading(dataclasses.replace(stored, calibration=text), kept, kept)
    assert not [r for r in refused if r.number.startswith("1.")]
