"""The bounded JSON reader (grader/files.py: read_json, read_json_file) that the batch's grades.csv, its pool and
the instructor's commands read the grader's records with: a file over the bound is said to be, never read."""
from __future__ import annotations

import json
import os
import sys

from grader.deploy.batch import pool
from grader.files import MAX_JSON_BYTES, read_json, read_json_file
from grader.outputs.grades_csv import RowStatus, csv_rows
from grader.untrusted.export import Submission


def _oversized(path) -> None:
    """A sparse file one byte over the bound: its size is real, its blocks are not written."""
    with open(path, "wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)


def test_read_json_file_reads_a_record_and_says_what_kept_any_other_file_from_being_read(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"score": 2.5}))
    assert read_json_file(good).data == {"score": 2.5} and read_json_file(good).problem == ""
    assert read_json(good) == {"score": 2.5}

    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "latin1.json").write_bytes(b'{"name": "\xe9"}')
    os.mkfifo(tmp_path / "fifo.json")  # read, it would block
    cases = {"missing.json": "is missing", "bad.json": "is not JSON", "latin1.json": "is not JSON",
             "fifo.json": "is not a regular file", ".": "is not a regular file"}
    for name, problem in cases.items():
        read = read_json_file(tmp_path / name)
        assert (read.data, read.problem, read.too_big) == (None, problem, False), name
        assert read_json(tmp_path / name) is None

    small = read_json_file(good, limit=5)  # a bound below the file's size: refused by its size
    assert small.data is None and small.too_big and small.problem == f"is over 5 bytes ({good.stat().st_size})"


def test_a_results_json_over_the_bound_is_a_row_that_says_so_not_a_grading_not_done(tmp_path):
    subs = tmp_path / "subs"
    (subs / "submission_1").mkdir(parents=True)
    _oversized(subs / "submission_1" / "results.json")
    (subs / "submission_2").mkdir()  # no results.json: a grading the batch has not done yet
    rows = csv_rows([Submission("submission_1", tmp_path, None), Submission("submission_2", tmp_path, None)],
                    subs, max_total=10.0)[1]
    assert rows[0]["status"] == RowStatus.GRADER_ERROR and rows[0].get("total") is None
    assert rows[0]["note"] == (f"not graded: its results.json is over {MAX_JSON_BYTES} bytes ({MAX_JSON_BYTES + 1}), "
                               "more than a grading writes, and was not read")
    assert rows[1]["status"] == RowStatus.NOT_GRADED


def test_a_grading_that_wrote_a_results_json_over_the_bound_is_the_graders_error_saying_so(tmp_path):
    sub = Submission("submission_1", tmp_path, None)
    write = f"f = open(sys.argv[1] + '/results.json', 'wb'); f.truncate({MAX_JSON_BYTES + 1})"
    record = pool.grade_one(sub, tmp_path / "subs", None, pool.Options(use_gpu=False),
                            make_cmd=lambda s, out, o: [sys.executable, "-c", f"import sys; {write}", str(out)])
    assert record["status"] == RowStatus.GRADER_ERROR and record["returncode"] == 0
    results = read_json(tmp_path / "subs" / "submission_1" / "results.json")
    assert isinstance(results, dict)  # the error results written over it
    message = results["tests"][-1]["output"]
    assert f"the grader ended with exit code 0 and wrote a results.json that is over {MAX_JSON_BYTES} bytes" in message
