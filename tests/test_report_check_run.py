"""grader/writeup/run.py: the report items against the grader's measurements of THIS submission.

Outcomes come from the grader's own H200 run (live ncu fixture, run-5 timings), so the reference
report must get every automatic point, and a report quoting numbers its kernels do not produce
must not."""
import dataclasses

import pytest

from grader.model import Cause, Gap, Status, Verdict
from grader.writeup.run import grade_report_submission
from tests.report_check_helpers import (
    CFG,
    RUBRIC,
    SOLUTION,
    STARTER,
    by_id,
    gpu_outcomes,
    no_gpu_outcomes,
    write_report,
)

TRANSITIONS = [t.id for t in CFG.transitions]


def _grade(tmp_path, text, outcomes=None):
    sub = write_report(tmp_path, text)
    return by_id(grade_report_submission(sub, RUBRIC, gpu_outcomes() if outcomes is None else outcomes))


def test_the_reference_report_gets_every_automatic_point(tmp_path):
    items = _grade(tmp_path, SOLUTION)
    assert set(items) == {i.id for i in CFG.items()}
    for item_id, it in items.items():
        expected = Status.MANUAL if item_id == "reasoning" else Status.PASSED
        assert it.status == expected, (item_id, it.message)
        assert it.stage == "report" and it.number.startswith("R.")
    auto = sum(i.points for i in CFG.items() if i.id != "reasoning")
    assert sum(i.score for i in items.values()) == auto
    assert items["naive_to_coalesced.values"].values.matched >= 5


def test_the_starter_template_scores_zero(tmp_path):
    items = _grade(tmp_path, STARTER)
    assert all(i.score == 0 for i in items.values())
    auto = [i for i in items.values() if i.item != "reasoning"]
    assert all(i.status == Status.FAILED for i in auto), [i.item for i in auto if i.status != Status.FAILED]
    assert items["reasoning"].status == Status.MANUAL  # hand-graded: course staff's, never "failed"
    assert "is empty" in items["naive_to_coalesced.cites"].message
    assert "every cell is empty" in items["table.cuda_cores"].message


def test_quoting_another_kernels_numbers_is_flagged(tmp_path):
    # the 1D paragraph quotes the tiled kernel's FMA pipe and shared-load ratio as its own
    text = SOLUTION.replace("busy `fma_pipe_pct = 34.3`", "busy `fma_pipe_pct = 15.1`")
    text = text.replace("as `shared_loads_per_warp_ffma = 0.3125`", "as `shared_loads_per_warp_ffma = 1.25`")
    items = _grade(tmp_path, text)
    it = items["tiled_to_blocktiling_1d.values"]
    assert it.status == Status.FAILED and it.score == 0
    assert "`fma_pipe_pct = 15.1` does not match your blocktiling_1d kernel: you cite 15.1%, the grader measured " \
           "34.34%" in it.message
    assert "That is what your tiled kernel measured" in it.message
    assert "`shared_loads_per_warp_ffma = 1.25`" in it.message
    assert items["tiled_to_blocktiling_1d.cites"].status == Status.PASSED  # citing is fine; the values are wrong


def test_values_are_checked_against_this_students_kernels(tmp_path):
    outs = gpu_outcomes()
    outs["coalesced"].ncu["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"] = 16.5
    items = _grade(tmp_path, SOLUTION, outs)
    msg = items["naive_to_coalesced.values"].message
    assert items["naive_to_coalesced.values"].status == Status.FAILED
    assert "`sectors_per_request = 2.5` does not match your coalesced kernel: you cite 2.5, the grader measured " \
           "16.5" in msg


def test_a_count_at_another_size_gets_a_hint(tmp_path):
    items = _grade(tmp_path, SOLUTION.replace("`global_load_requests = 1.68e7`", "`global_load_requests = 1.34e8`"))
    assert "off by about 8x" in items["coalesced_to_tiled.values"].message


def test_missing_sections_and_text_values_give_clear_messages(tmp_path):
    start = SOLUTION.index("## 2D blocktiling -> Tensor Cores")
    text = SOLUTION[:start] + SOLUTION[SOLUTION.index("## Results: CUDA-core"):]
    text = text.replace("`naive: sectors_per_request = 16.5`", "`naive: sectors_per_request = high`")
    items = _grade(tmp_path, text)
    cites = items["blocktiling_2d_to_wmma.cites"]
    assert cites.status == Status.FAILED and "no section for blocktiling_2d -> wmma" in cites.message
    assert "found headings:" in cites.message
    assert items["blocktiling_2d_to_wmma.values"].status == Status.FAILED
    vals = items["naive_to_coalesced.values"]
    assert vals.status == Status.FAILED and "`high` is not a number" in vals.message and "cannot read" in vals.message
    assert items["naive_to_coalesced.cites"].status == Status.PASSED  # other citations in it are fine
    assert items["reasoning"].status == Status.MANUAL and "blocktiling_2d -> wmma" not in items["reasoning"].message


def test_a_paragraph_without_citations_or_words(tmp_path):
    text = SOLUTION.replace("## naive -> coalesced\n", "## naive -> coalesced\nToo short, `threadIdx.x` only.\n"
                            "\n## unrelated\n")
    items = _grade(tmp_path, text)
    msg = items["naive_to_coalesced.cites"].message
    assert "the paragraph has 3 words of prose; at least 40 are expected" in msg
    assert "cites no Nsight Compute metric with a value" in msg
    assert items["naive_to_coalesced.values"].status == Status.FAILED


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00garbage", "# just a title\n", "| | |\n|-|-|\n| x |\n" * 50,
                                     "```\n## naive -> coalesced\n`sectors_per_request = 2.5`\n", "<!--" * 1000])
def test_malformed_reports_never_crash(tmp_path, content):
    items = _grade(tmp_path, content)
    assert len(items) == len(CFG.items())
    assert all(i.status in (Status.FAILED, Status.MANUAL, Status.NOT_EVALUATED) and i.score == 0 for i in items.values())
    assert not any("grader failed" in i.message for i in items.values())


def test_missing_report(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    items = by_id(grade_report_submission(sub, RUBRIC, gpu_outcomes()))
    assert all("report.md is not in the submission" in i.message for i in items.values())
    assert all(i.status == Status.FAILED for k, i in items.items() if k != "reasoning")
    # The hand-graded item is course staff's whatever happened: never "failed"
    assert items["reasoning"].status == Status.MANUAL and "starter/report.md" in items["reasoning"].message


def test_report_one_folder_down(tmp_path):
    (tmp_path / "wrapped").mkdir()
    (tmp_path / "wrapped" / "report.md").write_text(SOLUTION)
    items = by_id(grade_report_submission(tmp_path, RUBRIC, gpu_outcomes()))
    assert items["table.cuda_cores"].status == Status.PASSED


def test_without_a_gpu_values_and_times_are_not_evaluated(tmp_path):
    items = _grade(tmp_path, SOLUTION, no_gpu_outcomes())
    for tid in TRANSITIONS:
        assert items[f"{tid}.cites"].status == Status.PASSED
        v = items[f"{tid}.values"]
        assert v.status == Status.NOT_EVALUATED and v.score == 0 and v.message.startswith("not evaluated:")
        assert "no CUDA device" in v.message
    t = items["table.times"]
    assert t.status == Status.NOT_EVALUATED and t.message.startswith("not evaluated:") and "no CUDA device" in t.message
    assert items["table.cuda_cores"].status == Status.PASSED and items["table.tensor_cores"].status == Status.PASSED

    assert t.needs_gpu and all(items[f"{tid}.values"].needs_gpu for tid in TRANSITIONS)
    assert not items["table.cuda_cores"].needs_gpu


def test_times_item_follows_the_stages_typed_fields_not_the_words(tmp_path):
    # No GPU, its reason worded with neither "not evaluated" nor "GPU": still not evaluated, needing a GPU.
    outs = no_gpu_outcomes()
    for o in outs.values():
        o.gpu_reason = "switched off"
    t = _grade(tmp_path, SOLUTION, outs)["table.times"]
    assert (t.status, t.needs_gpu) == (Status.NOT_EVALUATED, True) and "switched off" in t.message
    # Stages that did not compile, their messages worded like the grader's: failed, the student's doing.
    outs = gpu_outcomes(timed=False)
    for o in outs.values():
        o.verdict, o.correctness_message = Verdict.NOT_COMPILED, "not evaluated: no CUDA device"
    t = _grade(tmp_path, SOLUTION, outs)["table.times"]
    assert (t.status, t.score, t.needs_gpu) == (Status.FAILED, 0.0, False)
    assert t.message.startswith("no row could be compared: ")


def test_values_item_follows_the_gaps_cause_not_the_words(tmp_path):
    for cause, status, needs_gpu in ((Cause.GRADER, Status.NOT_EVALUATED, False),
                                     (Cause.NO_GPU, Status.NOT_EVALUATED, True),
                                     (Cause.STUDENT, Status.FAILED, False)):
        outs = gpu_outcomes()
        for o in outs.values():  # every gap worded as a missing GPU, whatever its cause
            o.ncu, o.ncu_gap = None, Gap(cause, "not evaluated: no CUDA device")
        v = _grade(tmp_path, SOLUTION, outs)["naive_to_coalesced.values"]
        assert (v.status, v.score, v.needs_gpu) == (status, 0.0, needs_gpu), cause


def test_profiled_but_not_timed(tmp_path):
    items = _grade(tmp_path, SOLUTION, gpu_outcomes(timed=False))
    assert items["naive_to_coalesced.values"].status == Status.PASSED
    assert items["table.times"].status == Status.FAILED and "not timed" in items["table.times"].message


def test_a_stage_that_was_not_profiled_fails_its_values(tmp_path):
    outs = gpu_outcomes()
    for sid in ("tiled", "blocktiling_1d"):
        outs[sid].ncu, outs[sid].verdict = None, Verdict.WRONG
        outs[sid].ncu_gap = Gap(Cause.STUDENT, "not profiled: the kernel is not correct")
    items = _grade(tmp_path, SOLUTION, outs)
    it = items["tiled_to_blocktiling_1d.values"]
    assert it.status == Status.FAILED and "not profiled: the kernel is not correct" in it.message
    assert "correctness check first" in it.message


def test_times_far_from_the_graders_fail(tmp_path):
    outs = gpu_outcomes()
    outs["blocktiling_2d"].timing.median_ms = 6.0
    items = _grade(tmp_path, SOLUTION, outs)
    t = items["table.times"]
    assert t.status == Status.FAILED and "blocktiling_2d: 2.852 ms in the table, 6 ms measured by the grader" in t.message


def test_only_the_stages_graded_in_this_run(tmp_path):
    outs = {k: v for k, v in gpu_outcomes().items() if k in ("naive", "coalesced")}
    items = _grade(tmp_path, SOLUTION, outs)
    assert items["naive_to_coalesced.values"].status == Status.PASSED
    assert items["coalesced_to_tiled.values"].status == Status.PASSED  # its coalesced citations still match
    assert items["tiled_to_blocktiling_1d.values"].status == Status.NOT_EVALUATED


def test_a_rubric_without_the_section_is_one_hidden_item(tmp_path):
    # A bad section never gets here: load_rubric stops on it (tests/test_report_check_config.py).
    rub = dataclasses.replace(RUBRIC, report=None)
    (item,) = grade_report_submission(write_report(tmp_path, SOLUTION), rub, gpu_outcomes())
    assert item.status == Status.NOT_EVALUATED and item.max_score == 0 and "no report section" in item.message


def test_huge_reports_are_graded_quickly_with_short_messages(tmp_path):
    from tests.hang_guard import no_hang

    many_citations = "## naive -> coalesced\n" + "`sectors_per_request = 9.5` w " * 20_000
    for text in ["# naive -> coalesced\n" * 100_000, many_citations]:
        with no_hang("grading a huge report"):  # a quadratic scan of it would outlast the net by far
            items = _grade(tmp_path, text)
        assert max(len(i.message) for i in items.values()) < 5000
        assert items["naive_to_coalesced.values"].status == Status.FAILED
