"""What students and TAs see is true.

1. The untouched starter scores 0, and a static verdict is the one a GPU run reaches: a point
   earned without a GPU is never taken back by the GPU run.
2. Hand-graded items are never "failed": results.json shows them neutrally, outside the
   autograder's total, as Gradescope's manual questions need.
4. Every citation or answer the grader cannot use is named, with what was expected.
5. No feedback names a file on the grading machine; plots go to the results folder.
8. The handout says what appears where and when.

GPU runs are stood in for by stage outcomes with verdicts and timings (the score step reads only
those) and by the occupancy section's own GPU measurements record; the CLI runs are static.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.compile import toolchain
from grader.compile.ptxas import parse_ptxas
from grader.compile.sass import parse_sass
from grader.deploy.gradescope.policy import apply_no_gpu_policy
from grader.evidence.compile import CompileResult, KernelResources, SassResult
from grader.evidence.limits import Peaks
from grader.grading import StageOutcome
from grader.model import Cause, Gap, ItemResult, Status, Verdict
from grader.occupancy import run as occ_run
from grader.occupancy.answers import Answers, answer_schema, parse_answers
from grader.occupancy.exercises import grade_occupancy, simulated_api
from grader.occupancy.grading import Measurements
from grader.outputs.results import build_results
from grader.profile.timing import summarize
from grader.rubric.load import load_rubric
from grader.rubric.occupancy import HAND_GRADED, OccupancyConfig
from grader.rubric.report import ReportConfig
from grader.score.hand import hand_graded_items
from grader.score.stages import score
from grader.writeup.run import grade as grade_report

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
PEAKS = Peaks(66.9, 989.0, "test")


def _sections() -> tuple[OccupancyConfig, ReportConfig]:
    assert RUBRIC.occupancy is not None and RUBRIC.report is not None  # the default rubric has both
    return RUBRIC.occupancy, RUBRIC.report


OCC, REPORT = _sections()
SCHEMA = answer_schema(OCC)
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")

# cuobjdump -sass of the starter's kernels (nvcc 13.0, sm_90a): an empty body is EXIT and padding.
STARTER_OPS = Counter({"NOP": 13, "LDC": 1, "EXIT": 1, "BRA": 1})
SOLUTION_OPS = {k: c for f in (ROOT / "tests/fixtures/sass").glob("cuobjdump13.0_sm90a_solution_*.txt")
                for k, c in parse_sass(f.read_text()).items()}


# --------------------------------------------------------------------------------------------
# 1. The starter scores 0; static verdicts do not depend on a GPU
# --------------------------------------------------------------------------------------------
def _static(stage_id: str, ops: Counter, regs: int = 40) -> StageOutcome:
    """A compiled stage as a run without a GPU leaves it."""
    st = RUBRIC.stage(stage_id)
    k = KernelResources(st.kernel, "sm_90a", registers=regs)
    o = StageOutcome(stage=st, compile=CompileResult(st.id, True, kernel=k, launch=st.launch, launch_source="default"),
                     sass=SassResult(opcodes={st.kernel: Counter(ops)}), verdict=Verdict.NOT_EVALUATED,
                     gpu_reason="no CUDA device")
    o.ncu_gap = Gap(Cause.NO_GPU, "not evaluated: no CUDA device")
    return o


def _on_gpu(o: StageOutcome, verdict: Verdict, fraction: float = 0.9) -> StageOutcome:
    """The same build after a GPU run ended in ``verdict`` (timed when correct)."""
    g = StageOutcome(stage=o.stage, compile=o.compile, sass=o.sass, verdict=verdict, correctness_message="checked")
    g.ncu_gap = Gap(Cause.STUDENT, "not profiled: not correct") if verdict is not Verdict.CORRECT else None
    g.ncu, g.profile_n = ({}, 2048) if verdict is Verdict.CORRECT else (None, 2048)
    if verdict is Verdict.CORRECT:
        g.timing = summarize(4096, [2.73 / fraction] * 5, [2.73] * 5, 66.9)
    return g


GPU_ENDINGS = [Verdict.CORRECT, Verdict.WRONG, Verdict.CRASHED, Verdict.TIMED_OUT, Verdict.RACE, Verdict.NO_VERDICT]


@pytest.mark.parametrize("stage_id", [st.id for st in RUBRIC.stages])
@pytest.mark.parametrize("which", ["starter", "solution"])
def test_static_stage_verdicts_are_what_a_gpu_run_gives(stage_id, which):
    st = RUBRIC.stage(stage_id)
    o = _static(stage_id, STARTER_OPS if which == "starter" else SOLUTION_OPS[st.kernel])
    static = {i.item: i for i in score({stage_id: o}, PEAKS)}
    judged = {k: i for k, i in static.items() if not i.needs_gpu and i.status != Status.NOT_EVALUATED}
    assert {"compiles"} <= judged.keys()
    for verdict in GPU_ENDINGS:
        gpu = {i.item: i for i in score({stage_id: _on_gpu(o, verdict)}, PEAKS)}
        for k, i in judged.items():
            assert (gpu[k].status, gpu[k].score, gpu[k].message) == (i.status, i.score, i.message), (k, verdict)
    if which == "starter":  # the untouched starter earns nothing, with or without a GPU
        assert sum(i.score for i in static.values()) == 0
        # On a GPU its kernels leave C as the NaN it was filled with: wrong, never correct.
        assert all(i.score == 0 for i in score({stage_id: _on_gpu(o, Verdict.WRONG)}, PEAKS))
        assert "never writes C" in static["compiles"].message
    else:  # the reference kernels lose no statically judged point
        assert all(i.status == Status.PASSED and i.score == i.max_score for i in judged.values())


def test_an_attempt_earns_the_static_items_and_a_stub_does_not():
    stub = {i.item: i for i in score({"blocktiling_2d": _static("blocktiling_2d", Counter({"STG": 1, "EXIT": 1}))},
                                     PEAKS)}
    assert stub["compiles"].status == Status.PASSED  # it writes C: an attempt that compiles
    # ...but does no FP32 work, so "no spills" says nothing about it yet
    assert stub["no_spills"].status == Status.FAILED and "no FFMA" in stub["no_spills"].message
    real = {i.item: i for i in score({"blocktiling_2d": _static("blocktiling_2d", Counter({"STG": 4, "FFMA": 64}))},
                                     PEAKS)}
    assert real["no_spills"].status == Status.PASSED and real["compiles"].status == Status.PASSED


def test_without_sass_the_static_items_are_not_evaluated_never_passed():
    o = _static("tiled", STARTER_OPS)
    o.sass = SassResult(reason="cuobjdump not found")
    items = {i.item: i for i in score({"tiled": o}, PEAKS)}
    assert items["compiles"].status == Status.NOT_EVALUATED and not items["compiles"].needs_gpu
    assert items["compiles"].score == 0 and "cuobjdump not found" in items["compiles"].message


def _measurements(gpu: bool, which: str = "solutions") -> Measurements:
    """The occupancy section's measured inputs with a GPU (the calculator's API results on an H200, the
    program printing nothing, as the starter's does until its TODOs are done) or without one."""
    fix = ROOT / "tests/fixtures/occupancy"
    ptxas = {cap: parse_ptxas((fix / f"ptxas_solution_cap{cap}_nvcc13.0.txt").read_text())["heavy"]
             for cap in (255, 64, 32)}
    if which == "starter":  # its heavy kernel is the light TODO version: 10 registers at every cap
        ptxas = {cap: KernelResources("heavy", "sm_90a", registers=10) for cap in (255, 64, 32)}
    src = (ROOT / which / "occupancy/occ.cu").read_text()
    if not gpu:
        return Measurements(program_source=src, ptxas=ptxas)
    return Measurements(device_available=True, program=None, program_problem="the program printed no JSON output",
                        program_source=src, api=simulated_api(OCC, "9.0", registers=32, sm_count=132), ptxas=ptxas,
                        heavy_times_ms={255: 1.0, 64: 1.6, 32: 2.4},
                        sweep_times={"smem": dict.fromkeys(OCC.ex4.smem_points, 1.0),
                                     "block": dict.fromkeys(OCC.ex4.block_points, 1.0)})


@pytest.mark.parametrize("which", ["starter", "solutions"])
def test_static_occupancy_verdicts_are_what_a_gpu_run_gives(which):
    answers = parse_answers((ROOT / which / "occupancy/answers.yaml").read_text(), SCHEMA)
    static = {r.item: r for r in grade_occupancy(OCC, answers, _measurements(False, which))}
    gpu = {r.item: r for r in grade_occupancy(OCC, answers, _measurements(True, which))}
    judged = [k for k, r in static.items() if not r.needs_gpu]
    assert len(judged) > 20
    for k in judged:
        assert (gpu[k].status, gpu[k].score) == (static[k].status, static[k].score), k
    if which == "starter":
        assert sum(r.score for r in static.values()) == sum(r.score for r in gpu.values()) == 0


def test_the_starter_report_scores_zero_with_and_without_metrics():
    from tests.report_check_helpers import STARTER, gpu_outcomes, no_gpu_outcomes

    for outcomes in (no_gpu_outcomes(), gpu_outcomes()):
        assert sum(i.score for i in grade_report(REPORT, STARTER, "", RUBRIC, outcomes)) == 0


# --------------------------------------------------------------------------------------------
# The CLI on the starter and the solutions, statically (1, 2, 5)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graded(static_graded) -> dict[str, tuple[dict, str, Path]]:
    """The session's static gradings of the starter and the solutions (tests/conftest.py: static_graded,
    ``python -m grader grade --no-gpu --quiet``)."""
    out = {}
    for which in ("starter", "solutions"):
        folder = static_graded(which)
        out[which] = (json.loads((folder / "results.json").read_text()), (folder / "summary.md").read_text(), folder)
    return out


@needs_nvcc
def test_the_starter_scores_zero_statically(graded):
    res, summary, _ = graded["starter"]
    assert res["score"] == 0 and all(t.get("score", 0) == 0 for t in res["tests"])
    assert summary.startswith("**Score: 0 / ")


@needs_nvcc
def test_solutions_lose_no_statically_judged_point(graded):
    res, _, _ = graded["solutions"]
    for t in res["tests"]:
        extra = t["extra_data"]
        if extra["status"] in ("manual", "not_evaluated") and (extra["status"] == "manual" or extra["needs_gpu"]):
            continue  # a person's, or a GPU's to grade
        earned, possible = ((extra["bonus_points"], extra["bonus_max"]) if "bonus" in extra
                            else (t["score"], t["max_score"]))
        assert earned == possible, (t["number"], t["output"][:300])


@needs_nvcc
def test_hand_graded_items_are_neutral_and_outside_the_autograders_total(graded):
    hand = {i.number: i.points for i in hand_graded_items(RUBRIC)}
    assert set(hand) == {"O.18", "O.21", "O.27", "O.34", "O.39", "R.14"} and sum(hand.values()) == 20
    for which in ("starter", "solutions"):
        res, summary, _ = graded[which]
        tests = {t["number"]: t for t in res["tests"]}
        for number, points in hand.items():
            t = tests[number]
            assert not {"score", "max_score", "status"} & t.keys(), t  # neither passed nor failed
            assert t["extra_data"]["status"] == "manual" and t["extra_data"]["hand_graded_points"] == points
            assert t["output"].startswith("**Graded by hand.**")
        assert not [t["number"] for t in res["tests"] if t.get("status") == "failed"
                    and t["extra_data"]["status"] == "manual"]
        total = sum(t.get("max_score", 0) for t in res["tests"])  # what Gradescope sums as the autograder's
        assert total == RUBRIC.max_points - 20 == 179  # the bonus items have max_score 0 (outside the total)
        assert sum(i.points for i in _all_items()) == RUBRIC.max_points + RUBRIC.bonus_points
        assert res["extra_data"]["hand_graded_points"] == 20
        assert f"/ {total:g} automatic points" in summary and "**Graded by hand**" in summary
    sol = {t["number"]: t for t in graded["solutions"][0]["tests"]}
    assert "your answer was recorded for course staff" in sol["O.18"]["output"]
    assert "no answer" in {t["number"]: t for t in graded["starter"][0]["tests"]}["O.18"]["output"]


def _all_items():
    items = [i for st in RUBRIC.stages for i in st.items]
    return items + list(OCC.items.values()) + REPORT.items()


@needs_nvcc
def test_no_feedback_names_the_grading_machines_folders(graded):
    for which in ("starter", "solutions"):
        res, summary, folder = graded[which]
        text = json.dumps(res) + summary
        for path in (folder, folder / "work", folder.resolve()):
            assert str(path) not in text, which


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["starter", "solutions"])
def test_on_a_gpu_no_static_verdict_changes_and_the_starter_scores_zero(graded, solutions_graded, starter_graded,
                                                                       which):
    """The real thing on a GPU machine: the GPU run keeps every statically judged verdict. The GPU
    gradings are the suite's shared ones (tests/gpu_jobs.py: the same ``python -m grader grade``)."""
    static, _, _ = graded[which]
    shared = {"solutions": solutions_graded, "starter": starter_graded}[which]
    assert shared.rc == 0, shared.stderr[-2000:]
    res, summary = shared.results, (shared.out / "summary.md").read_text()
    on_gpu = {t["number"]: t for t in res["tests"]}
    for t in static["tests"]:
        if t["extra_data"]["status"] in ("passed", "failed"):  # judged without a GPU
            g = on_gpu[t["number"]]
            assert (g["extra_data"]["status"], g.get("score")) == (t["extra_data"]["status"], t["score"]), t["number"]
    if which == "starter":
        assert res["score"] == 0, [(t["number"], t["score"]) for t in res["tests"] if t.get("score")]
    else:  # every automatic point on the GPU
        lost = [(t["number"], t["output"][:200]) for t in res["tests"] if "max_score" in t and t["score"] < t["max_score"]]
        lost += [(t["number"], t["output"][:200]) for t in res["tests"]  # the bonus too: solutions earn all of it
                 if "bonus" in t["extra_data"] and t["extra_data"]["bonus_points"] < t["extra_data"]["bonus_max"]]
        assert not lost, lost
    assert str(shared.out) not in json.dumps(res) + summary


def test_the_occupancy_plot_goes_to_the_results_folder_named_by_its_file(tmp_path):
    pytest.importorskip("matplotlib")
    answers = parse_answers((ROOT / "solutions/occupancy/answers.yaml").read_text(), SCHEMA)
    meas = _measurements(True)
    results = grade_occupancy(OCC, answers, meas)
    out = tmp_path / "results"
    log: dict[str, Any] = {}
    results = occ_run._attach_plot(results, OCC, meas, out, log)
    assert (out / occ_run.PLOT_FILE).is_file()
    shown = [r for r in results if occ_run.PLOT_FILE in r.message]
    assert {r.item for r in shown} == {"ex4.smem_conclusion", "ex4.block_conclusion"}
    assert all(r.values.plot == occ_run.PLOT_FILE and "results folder" in r.message for r in shown)
    text = json.dumps(build_results(results, execution_time=1, output="").to_json())
    assert str(tmp_path) not in text and log["plot"] == occ_run.PLOT_FILE


def test_the_no_gpu_policy_leaves_hand_graded_items_alone():
    items = [ItemResult("naive", "correct", "correct", Status.NOT_EVALUATED, 0, 6, "not evaluated: no CUDA device",
                        number="1.correct", needs_gpu=True),
             ItemResult("occupancy", "ex2.explanation", "Ex 2: explanation", Status.MANUAL, 0, 2, "recorded",
                        number="O.18")]
    res = apply_no_gpu_policy(build_results(items, execution_time=1, output=""), {}, "pending").to_json()
    manual = res["tests"][1]
    assert not {"score", "max_score", "status"} & manual.keys() and "pending_gpu" not in manual["extra_data"]
    assert res["extra_data"]["pending_gpu_points"] == 6 and res["score"] == 0


def test_the_deployment_doc_lists_every_hand_graded_item_with_its_points():
    doc = (ROOT / "docs/deployment.md").read_text()
    section = doc.split("### The hand-graded part", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = dict(re.findall(r"^\| `?(O\.\d+|R\.\d+)`? \|.*?\| (\d+(?:\.\d+)?) \|$", section, re.M))
    assert {k: float(v) for k, v in rows.items()} == {i.number: i.points for i in hand_graded_items(RUBRIC)}


# --------------------------------------------------------------------------------------------
# 4. Every citation or answer the grader cannot use is named, with what was expected
# --------------------------------------------------------------------------------------------
def _paragraph(extra: str) -> str:
    words = " ".join(["word"] * 45)
    return (f"# Report\n\n## naive -> coalesced\n{words}. The loads now take `sectors_per_request = 4` "
            f"sectors per request. {extra}\n")


@pytest.mark.parametrize("span,named,expected", [
    ("`sectors_per_reqest = 2.5`", "`sectors_per_reqest`", "did you mean `sectors_per_request`?"),
    ("`fma_pipe_pct: 45%`", "`fma_pipe_pct: 45%`", "write `fma_pipe_pct = 45%`"),
    ("`launch__registers_per_thread: 40`", "launch__registers_per_thread", "= 40`"),
    ("`TM = 8`", "`TM`", "no Nsight Compute metric and no derived name"),
    ("`sm__pipe_fma_cycles_actve.avg.pct_of_peak_sustained_active = 3`", "sm__pipe_fma_cycles_actve",
     "the grader collects `sm__pipe_fma_cycles_active`"),
])
def test_a_citation_the_grader_cannot_use_is_named_next_to_valid_ones(span, named, expected):
    from tests.report_check_helpers import no_gpu_outcomes

    items = {i.item: i for i in grade_report(REPORT, _paragraph(span), "", RUBRIC, no_gpu_outcomes())}
    cites = items["naive_to_coalesced.cites"]
    assert cites.status == Status.PASSED  # the valid citation still counts
    assert named in cites.message and expected in cites.message, cites.message


def _answers(**fix) -> Answers:
    data = yaml.safe_load((ROOT / "solutions/occupancy/answers.yaml").read_text())
    data["ex1"]["fix"].update(fix)
    return parse_answers(yaml.safe_dump(data), SCHEMA)


def test_a_size_in_bytes_where_kib_is_asked_gets_a_hint_and_the_knock_on_item_says_what_was_expected():
    res = {r.item: r for r in grade_occupancy(OCC, _answers(shared_mem_kib=7168, max_blocks=32))}
    assert res["ex1.fix"].status == Status.FAILED
    assert "7168 KiB is more shared memory than one SM has (228 KiB)" in res["ex1.fix"].message
    assert "write 7 (KiB) or '7168 B'" in res["ex1.fix"].message
    knock_on = res["ex1.fix_numbers"].message
    assert "ex1.fix.max_blocks: 32 is not right (expected for your changed kernel (ex1.fix), by the hand model: " \
           "0 blocks per SM)" in knock_on
    assert "0.0%" in knock_on and "shared_mem" in knock_on


def test_the_knock_on_item_never_reveals_the_handouts_own_answers():
    e = OCC.ex1
    res = {r.item: r for r in grade_occupancy(OCC, _answers(threads_per_block=e.threads_per_block,
                                                            regs_per_thread=e.regs_per_thread,
                                                            shared_mem_kib=e.smem_per_block // 1024))}
    for item in ("ex1.fix", "ex1.fix_numbers"):
        assert res[item].status == Status.FAILED and "unchanged" in res[item].message
        assert "%" not in res[item].message and "expected" not in res[item].message


def test_hand_graded_occupancy_items_are_manual_whatever_the_answer():
    assert set(HAND_GRADED) == {i.id for i in hand_graded_items(RUBRIC) if i.number.startswith("O.")}
    blank = parse_answers("gpu: {}\n", SCHEMA)
    broken = parse_answers("ex1:\n  max_blocks: 19\n bottleneck: x\n", SCHEMA)
    for answers in (blank, broken):
        res = {r.item: r for r in grade_occupancy(OCC, answers)}
        for item in HAND_GRADED:
            assert res[item].status == Status.MANUAL and res[item].score == 0, (item, res[item].message)
            assert "nothing recorded for course staff" in res[item].message


# --------------------------------------------------------------------------------------------
# 8. The handout says what appears where and when
# --------------------------------------------------------------------------------------------
def test_the_handout_says_what_gradescope_shows_and_when():
    text = (ROOT / "assignment/README.md").read_text()
    assert "the same file Gradescope shows" not in text
    assert "(`visible`: right away)" not in text
    flat = " ".join(text.split())
    for needed in ("pending GPU grading", "about 10 s of grading", "about 25 s on an H200", "time limit", "graded by hand",
                   "after the deadline", "not part of the autograder's score", "python -m grader submit"):
        assert needed in flat, needed
