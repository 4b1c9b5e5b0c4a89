"""grader/outputs/profile_page.py: PNGs + markdown/HTML summary from a synthetic Grading (no GPU)."""
from pathlib import Path

import pytest

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.grading import Environment, Grading, StageOutcome
from grader.model import Cause, Gap, Verdict
from grader.outputs.profile_page import hbm_bandwidth, ladder_inputs, report_markdown, write_profile_report
from grader.profile.ncu import parse_raw_csv
from grader.profile.timing import summarize
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
TABLE["mmHopper"] = parse_raw_csv(  # the Hopper stage's reference, captured later on the same GPU
    (ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_with_hopper_h200_n2048.csv").read_text())["mmHopper"]
MS = {"naive": 275.7, "coalesced": 21.8, "tiled": 15.34, "blocktiling_1d": 6.17, "blocktiling_2d": 2.855,
      "wmma": 0.505, "hopper": 0.194}
BASE_MS = {"cublas_sgemm": 2.68, "cublas_gemmex_fp16": 0.187, "cublas_gemmex_bf16": 0.186}
PEAKS = Peaks(66.9, 989.0, "test")


def make_grading(timed=True, profiled=True, reason="not evaluated: Nsight Compute (ncu) not found"):
    outcomes = {}
    for st in RUBRIC.stages:
        o = StageOutcome(stage=st, verdict=Verdict.CORRECT, profile_n=2048)
        if timed:
            o.timing = summarize(4096, [MS[st.id]] * 5, [BASE_MS[st.baseline]] * 5, PEAKS.get(st.peak))
        if profiled:
            o.ncu = dict(TABLE[st.kernel])
        else:
            o.ncu_gap = Gap(Cause.GRADER, reason)
        outcomes[st.id] = o
    env = Environment(ProbeResult(ok=True, name="NVIDIA H200"), "", None, None, ["-arch=sm_90a"], PEAKS)
    return Grading("solutions", env, outcomes, [], 30.0)


def test_ladder_inputs_come_from_timings_and_peaks():
    rows, baselines, peaks = ladder_inputs(make_grading())
    assert [r["label"] for r in rows][:2] == ["1 Naive", "2 Coalesced"]
    assert rows[0]["tflops"] == pytest.approx(0.4985, rel=1e-3) and rows[5]["ceiling"] == "fp16_tensor"
    assert {b["label"]: round(b["tflops"], 1) for b in baselines} == {"cuBLAS SGEMM": 51.3,
                                                                      "cublasGemmEx (FP16)": 735.0,
                                                                      "cublasGemmEx (BF16)": 738.9}
    assert peaks == {"FP32 CUDA cores": 66.9, "FP16 Tensor Cores": 989.0}


def test_hbm_bandwidth_by_device_name():
    assert hbm_bandwidth(ProbeResult(ok=True, name="NVIDIA H200")) == {"HBM": 4.8}
    assert hbm_bandwidth(ProbeResult(ok=True, name="Some other GPU")) == {} and hbm_bandwidth(None) == {}


def test_full_report_links_both_pngs_and_diagnoses_every_stage(tmp_path):
    pytest.importorskip("matplotlib")
    rep = write_profile_report(make_grading(), tmp_path)
    assert rep.reasons == {}
    assert Path(rep.images["ladder"]).name == "ladder.png" and (tmp_path / "ladder.png").stat().st_size > 10_000
    assert (tmp_path / "roofline.png").is_file()
    md = (tmp_path / "profile.md").read_text()
    assert "![ladder](ladder.png)" in md and "![roofline](roofline.png)" in md
    for st in RUBRIC.stages:
        assert f"## {st.number} {st.title}" in md
    assert "**compute-bound on the FP32 FMA pipe**" in md and "Tensor Cores (stage 5)" in md
    page = (tmp_path / "profile.html").read_text()
    assert '<img src="ladder.png"' in page and '<img src="roofline.png"' in page
    assert "<li>evidence: shared loads per warp FFMA = 1.25" in page and "<script" not in page
    assert set(rep.diagnoses) == set(MS)


def test_without_a_profile_the_report_says_why_per_stage(tmp_path):
    pytest.importorskip("matplotlib")
    rep = write_profile_report(make_grading(profiled=False), tmp_path)
    assert rep.images["roofline"] is None and "ncu) not found" in rep.reasons["roofline"]
    md = (tmp_path / "profile.md").read_text()
    assert "*No roofline plot: no stage was profiled" in md
    assert md.count("not evaluated: Nsight Compute (ncu) not found") >= 6


def test_without_timings_there_is_no_ladder(tmp_path):
    rep = write_profile_report(make_grading(timed=False, profiled=False), tmp_path)
    assert rep.images["ladder"] is None and "no stage was timed" in rep.reasons["ladder"]
    assert not (tmp_path / "ladder.png").exists()


def test_html_escapes_student_visible_text():
    from grader.outputs.profile_page import report_html

    page = report_html([("<b>x</b>", "not profiled: <script>alert(1)</script>")], {}, {"ladder": "a & b"})
    assert "<script>" not in page and "&lt;script&gt;" in page and "a &amp; b" in page
    assert report_markdown([("s", "t")], {}, {}).startswith("# Profile of your kernels")


def test_a_ladder_drawn_ahead_is_used_once_and_redrawn_when_its_inputs_changed(tmp_path, monkeypatch):
    """grader/pipeline.py draws the ladder while ncu runs (plots.draw_ahead); the report then takes that
    drawing for the same inputs and file, however the folder is written, and draws again otherwise."""
    import os

    from grader.outputs import plots
    from grader.outputs.profile_page import ladder_plot

    pytest.importorskip("matplotlib")
    calls = []
    real = plots.ladder_png.draw
    monkeypatch.setattr(plots.ladder_png, "draw", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    g = make_grading()
    plots.draw_ahead(plots.ladder_png, *ladder_plot(g.outcomes, g.env.peaks, tmp_path))
    monkeypatch.chdir(tmp_path.parent)
    rep = write_profile_report(g, Path(tmp_path.name))  # the same folder, written relative
    assert len(calls) == 1 and Path(rep.images["ladder"]).resolve() == tmp_path / "ladder.png"
    assert (tmp_path / "ladder.png").stat().st_size > 1000
    # Drawn ahead, then a timing changed (e.g. a stage failed racecheck): the report draws it anew.
    plots.draw_ahead(plots.ladder_png, *ladder_plot(g.outcomes, g.env.peaks, tmp_path))
    g.outcomes["naive"].timing = None
    before = os.stat(tmp_path / "ladder.png").st_mtime_ns
    write_profile_report(g, tmp_path)
    assert len(calls) == 3  # the stale drawing ended before the new one began
    assert not any(path == str(tmp_path / "ladder.png") for _plot, path in plots._AHEAD)
    assert os.stat(tmp_path / "ladder.png").st_mtime_ns >= before
