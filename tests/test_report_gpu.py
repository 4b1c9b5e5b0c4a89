"""A report measured on one GPU and graded on another: the report's `GPU:` line
(grader/writeup/gpu.py), and which grading its values are compared with (grader/writeup/run.py).

The measurements are a real stored grading: tests/fixtures/gradings/reference, the solutions graded on an
H200, whose report is solutions/report.md. "On an H100" is that grading's outcomes with this grading's
device said to be an H100 and its metrics changed, as another GPU measures other numbers."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.evidence.protocol import ProbeResult
from grader.grading import load_grading
from grader.model import Cause, Gap, Status
from grader.rubric.load import load_rubric
from grader.writeup.gpu import ReportGpu, names_device, report_gpu
from grader.writeup.parse import strip_comments
from grader.writeup.run import Gradings, grade

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
assert RUBRIC.report is not None
REPORT_CFG = RUBRIC.report
STORED = load_grading(ROOT / "tests/fixtures/gradings/reference/grading.json")
SOLUTIONS = (ROOT / "solutions/report.md").read_text()
H100 = ProbeResult(ok=True, name="NVIDIA H100 80GB HBM3", cc=[9, 0], sms=132)


def test_the_stored_grading_is_on_the_gpu_the_solutions_report_names():
    """What every test here stands on (and the GPU suite's grading of solutions/, tests/gpu_jobs.py: CITED): the
    report cites an H200's numbers, so the stored grading it is compared with must be an H200's."""
    gpu = report_gpu(strip_comments(SOLUTIONS))
    assert gpu is not None and names_device(gpu, STORED.env.device.name), (gpu, STORED.env.device)


def _values_items(items) -> dict:
    return {i.item: i for i in items if i.item.endswith(".values") or i.item == "table.times"}


def _on_another_gpu() -> dict:
    """The reference outcomes as another GPU would measure them: every metric and time off by half."""
    outcomes = copy.deepcopy(STORED.outcomes)
    for o in outcomes.values():
        if o.ncu:
            o.ncu = {k: v * 1.5 if isinstance(v, float) and not isinstance(v, bool) else v for k, v in o.ncu.items()}
        if o.timing is not None:
            o.timing.median_ms *= 1.6
            o.timing.baseline_median_ms = (o.timing.baseline_median_ms or 0) * 1.6 or None
    return outcomes


# ---- the GPU: line --------------------------------------------------------------------------------
def test_the_solutions_report_names_the_h200_and_the_starters_empty_line_names_nothing():
    assert report_gpu(strip_comments(SOLUTIONS)) == ReportGpu("NVIDIA H200", 3)
    assert report_gpu(strip_comments((ROOT / "starter/report.md").read_text())) is None


@pytest.mark.parametrize("line,name", [
    ("GPU: H100", "H100"),
    ("- **GPU:** NVIDIA GeForce RTX 4090, driver 560", "NVIDIA GeForce RTX 4090"),
    ("gpu: `Tesla T4` (Colab)", "Tesla T4"),
    ("GPU: NVIDIA", None),  # the vendor alone names no card
    ("The GPU: an H100", None),  # prose that mentions a GPU is no `GPU:` line
])
def test_a_gpu_line_gives_the_name_before_its_details(line, name):
    found = report_gpu(f"# Report\n\n{line}\n\n## naive -> coalesced\n")
    if name is None or not line.lstrip("- *").lower().startswith("gpu"):
        assert found is None
    else:
        assert found is not None and found.name == name and found.line == 3


@pytest.mark.parametrize("name,device,same", [
    ("H100", "NVIDIA H100 80GB HBM3", True),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", True),
    ("NVIDIA H200", "NVIDIA H100 80GB HBM3", False),
    ("H100", "NVIDIA H200", False),
    ("RTX 4090", "NVIDIA GeForce RTX 4090", True),
    ("Tesla T4", "Tesla T4", True),
    ("A100", "NVIDIA A100-SXM4-40GB", True),
    ("A100 80GB", "NVIDIA A100-SXM4-40GB", False),
])
def test_a_report_gpu_names_a_device_when_each_of_its_words_is_the_devices(name, device, same):
    assert names_device(ReportGpu(name, 1), device) is same
    assert not names_device(ReportGpu(name, 1), None)


# ---- which grading the values are compared with -----------------------------------------------------
def test_on_the_gpu_the_report_names_every_value_is_checked_against_this_grading():
    items = _values_items(grade(REPORT_CFG, SOLUTIONS, "", RUBRIC, STORED.outcomes, Gradings(STORED.env.device)))
    assert items and all(i.status is Status.PASSED and i.score == i.max_score for i in items.values()), \
        [(k, i.message[:300]) for k, i in items.items() if i.status is not Status.PASSED]


def test_on_another_gpu_a_stored_grading_on_the_reports_gpu_is_used():
    items = _values_items(grade(REPORT_CFG, SOLUTIONS, "", RUBRIC, _on_another_gpu(), Gradings(H100, (STORED,))))
    assert all(i.status is Status.PASSED and i.score == i.max_score for i in items.values()), \
        [(k, i.message[:300]) for k, i in items.items() if i.status is not Status.PASSED]
    assert all("your stored grading on NVIDIA H200" in i.message for i in items.values())


def test_on_another_gpu_without_a_grading_on_the_reports_gpu_the_values_are_left_to_a_ta():
    items = _values_items(grade(REPORT_CFG, SOLUTIONS, "", RUBRIC, _on_another_gpu(), Gradings(H100)))
    for k, i in items.items():
        assert i.status is Status.NOT_EVALUATED and not i.needs_gpu, (k, i.message[:300])
        assert "left for a TA" in i.message and "NVIDIA H200" in i.message and "NVIDIA H100 80GB HBM3" in i.message
    assert not any("name it as the grading does" in i.message for i in items.values())  # no word in common
    near = grade(REPORT_CFG, SOLUTIONS.replace("GPU: NVIDIA H200", "GPU: H100 SXM5", 1), "", RUBRIC,
                 _on_another_gpu(), Gradings(H100))
    assert all("name it as the grading does: `GPU: NVIDIA H100 80GB HBM3`" in i.message
               for i in _values_items(near).values())
    # ...whereas comparing the H200's numbers with the H100's own would have failed them
    old = _values_items(grade(REPORT_CFG, SOLUTIONS, "", RUBRIC, _on_another_gpu()))
    assert any(i.status is Status.FAILED for i in old.values())


FABRICATED = SOLUTIONS.replace("`sectors_per_request = 2.5`", "`sectors_per_request = 7.5`", 1)


@pytest.mark.parametrize("where", ["this grading", "a stored grading"])
def test_a_fabricated_citation_loses_its_point(where):
    assert FABRICATED != SOLUTIONS
    if where == "this grading":
        items = grade(REPORT_CFG, FABRICATED, "", RUBRIC, STORED.outcomes, Gradings(STORED.env.device))
    else:
        items = grade(REPORT_CFG, FABRICATED, "", RUBRIC, _on_another_gpu(), Gradings(H100, (STORED,)))
    r = _values_items(items)["naive_to_coalesced.values"]  # R.2: the section FABRICATED changed
    assert r.status is Status.FAILED and r.score == 0 and "you cite 7.5" in r.message, r.message[:400]


def test_without_a_grading_on_the_reports_gpu_a_value_no_gpu_measures_still_fails():
    bad = SOLUTIONS.replace("`naive: l1_throughput_pct = 99.0`", "`naive: l1_throughput_pct = 250`", 1)
    bad = bad.replace("`global_load_requests = 536870912`", "`global_load_requests = -3`", 1)
    assert bad.count("= 250`") == 1 and bad.count("= -3`") == 1
    r = next(i for i in grade(REPORT_CFG, bad, "", RUBRIC, _on_another_gpu(), Gradings(H100)) if i.number == "R.2")
    assert r.status is Status.FAILED and r.score == 0
    assert "above 100%" in r.message and "below 0" in r.message


def test_a_report_without_a_gpu_line_is_compared_with_this_grading_and_told_so():
    text = SOLUTIONS.replace("GPU: NVIDIA H200", "Card used: NVIDIA H200", 1)
    items = _values_items(grade(REPORT_CFG, text, "", RUBRIC, STORED.outcomes, Gradings(STORED.env.device)))
    r = items[next(k for k in items if k.endswith(".values"))]
    assert r.status is Status.PASSED and "names no GPU" in r.message and "NVIDIA H200" in r.message


def test_without_a_gpu_here_and_none_stored_the_values_wait_for_a_gpu():
    """A grading without a GPU (CI, Gradescope's static part) keeps saying why: not evaluated, for want of a GPU."""
    no_gpu = ProbeResult(ok=False)
    outcomes = copy.deepcopy(STORED.outcomes)
    for o in outcomes.values():  # as the pipeline leaves a stage without a GPU
        o.ncu, o.timing, o.gpu_reason = None, None, "no CUDA device"
        o.ncu_gap = Gap(Cause.NO_GPU, "not evaluated: no CUDA device")
    items = _values_items(grade(REPORT_CFG, SOLUTIONS, "", RUBRIC, outcomes, Gradings(no_gpu)))
    assert all(i.status is Status.NOT_EVALUATED and i.needs_gpu for i in items.values()), \
        [(k, i.status, i.message[:200]) for k, i in items.items()]


def test_grade_citations_from_a_file_that_is_no_grading_is_a_usage_error(tmp_path):
    bad = tmp_path / "grading.json"
    bad.write_text(json.dumps({"format": 1}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "starter"), "--out", str(out),
                           "--no-gpu", "--quiet", "--citations-from", str(bad)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert f"--citations-from {bad}" in json.dumps(res) and "format 1" in json.dumps(res)


# ---- the service hands a grading the student's stored self-check of the same files ------------------
def test_the_service_passes_a_gpu_graded_self_check_of_the_same_files(tmp_path):
    import time

    from grader.serve import results
    from grader.serve.settings import Settings
    from grader.serve.store import Job, Kind, State
    from grader.serve.store_sqlite import SqliteStore
    from grader.serve.worker import grade_command, stored_self_check

    def job(id: str, kind: Kind, sha: str, **kw) -> Job:
        return Job(id=id, kind=kind, owner="token:a" if kind is Kind.SELFCHECK else "gradescope:1",
                   label="calm-otter-01", archive_sha=sha, key="k", created=time.time(), **kw)

    blob, _ = results.pack(ROOT / "tests/fixtures/gradings/reference", ["grading.json"])
    store = SqliteStore(tmp_path / "jobs.sqlite")
    try:
        store.add(job("self", Kind.SELFCHECK, "s1", state=State.DONE, finished=time.time()), b"zip", blob)
        store.add(job("nogpu", Kind.SELFCHECK, "s2", state=State.DONE, finished=time.time(),
                      without_gpu="no CUDA device"), b"zip", blob)
        folder = tmp_path / "w"
        folder.mkdir()
        path = stored_self_check(store, job("gs", Kind.GRADESCOPE, "s1"), folder)
        assert path is not None and load_grading(path).env.device == STORED.env.device
        cmd = grade_command(Settings(), folder / "submission.zip", folder / "out", None, None, path)
        assert cmd[cmd.index("--citations-from") + 1] == str(path)
        assert stored_self_check(store, job("other", Kind.GRADESCOPE, "s3"), folder) is None  # other files
        assert stored_self_check(store, job("gs2", Kind.GRADESCOPE, "s2"), folder) is None  # graded without a GPU
        assert "--citations-from" not in grade_command(Settings(), folder / "submission.zip", folder / "out", None)
    finally:
        store.close()


def test_grade_citations_from_checks_the_report_against_the_stored_grading(tmp_path):
    """As the service runs it: this grading has no GPU of the report's (here none at all), the stored
    grading of the same files on the report's H200 gives the values to compare with."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "solutions"), "--out", str(out),
                           "--no-gpu", "--quiet", "--stages", "report", "--citations-from",
                           str(ROOT / "tests/fixtures/gradings/reference/grading.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tests = {t["number"]: t for t in json.loads((out / "results.json").read_text())["tests"]}
    values = [t for t in tests.values() if t["extra_data"]["item"].endswith(".values")]
    assert values and all(t["extra_data"]["status"] == "passed" and "your stored grading on NVIDIA H200" in t["output"]
                          for t in values), [(t["number"], t["output"][:200]) for t in values]
