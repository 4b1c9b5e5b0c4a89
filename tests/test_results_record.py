"""results.json's record (grader/outputs/results.py: Results): the stored gradings' results.json read back
into the record write the same text, as they come from the grader, under the no-GPU policy and merged with a
service's verdicts; a file that is not the record is refused naming the key."""
from __future__ import annotations

import dataclasses
import json

import pytest

from grader.deploy.gradescope import bridge
from grader.deploy.gradescope.policy import apply_no_gpu_policy
from grader.evidence.results import Results
from grader.grading import Grading
from grader.model import Status
from grader.outputs.results import dumps, error_results, write_results
from grader.outputs.summary import summary_markdown
from grader.outputs.write import results_for
from grader.records import RecordError
from tests.gradings_helpers import NAMES, fixture


def _without_gpu(g: Grading) -> Grading:
    """``g`` as a run without a GPU leaves it: its correctness items not evaluated, for want of a GPU."""
    items = [dataclasses.replace(i, status=Status.NOT_EVALUATED, score=0.0, needs_gpu=True,
                                 message="not evaluated: no CUDA device") if i.item == "correct" else i
             for i in g.items]
    return dataclasses.replace(g, items=items)


def _service(results: Results) -> dict:
    """A service's results.json grading every test of ``results`` passed (the numbers the merge matches)."""
    return {"output": "## GPU summary", "tests": [
        {"number": t.number, "name": t.name, "score": 1.0, "max_score": 1.0, "status": "passed",
         "output": "graded on the GPU", "extra_data": {"status": "passed"}} for t in results.tests]}


def _round_trip(results: Results) -> None:
    text = dumps(results)
    back = Results.from_json(json.loads(text))
    assert back == results
    assert dumps(back) == text


@pytest.mark.parametrize("name", NAMES)
def test_each_stored_gradings_results_json_reads_back_into_the_record_that_writes_it_again(name, tmp_path):
    g = fixture(name)
    static = results_for(g, summary_markdown(g))
    write_results(tmp_path / "results.json", static)
    stored = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert dumps(Results.from_json(json.loads(stored))) == stored
    _round_trip(static)

    offline = results_for(_without_gpu(g), summary_markdown(g))
    policed = apply_no_gpu_policy(offline, {"device_reason": "no CUDA device"}, "pending")
    pending = [t for t in policed.tests if t.extra_data.pending_gpu]
    assert pending and all(t.score is None and t.status is None for t in pending)  # neutral: no keys in the file
    assert all({"score", "max_score", "status"}.isdisjoint(t.to_json()) for t in pending)
    _round_trip(policed)

    outcome = bridge.Outcome("merged", job="job1", url="https://gpu.example.edu/jobs/job1")
    merged = bridge.merge(policed, _service(policed), outcome, leaderboard=None)
    assert outcome.merged_items == len(pending) and not bridge.pending_tests(merged)
    _round_trip(merged)


def test_the_policy_and_the_merge_return_changed_copies():
    g = _without_gpu(fixture("reference"))
    offline = results_for(g, summary_markdown(g))
    before = dumps(offline)
    policed = apply_no_gpu_policy(offline, {"device_reason": "no CUDA device"}, "hide")
    assert dumps(offline) == before and dumps(policed) != before
    policed_text = dumps(policed)
    bridge.merge(policed, _service(policed), bridge.Outcome("merged", job="j"), leaderboard=None)
    assert dumps(policed) == policed_text


def test_the_error_results_round_trip():
    _round_trip(error_results("Traceback (most recent call last):\n  KeyError: 'n'", 3.2))


@pytest.mark.parametrize("change, said", [
    (lambda d: d["tests"][0].update(score="ten"), "score"),
    (lambda d: d.update(tests={"not": "a list"}), "tests"),
    (lambda d: d.update(unknown=1), "unknown"),
])
def test_a_results_json_that_is_not_the_record_is_refused_naming_the_key(change, said):
    data = error_results("x", 1).to_json()
    change(data)
    with pytest.raises(RecordError, match=said):
        Results.from_json(data)
    with pytest.raises(RecordError, match="JSON object"):
        Results.from_json([data])
