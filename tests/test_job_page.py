"""The job page's server renderer (grader/serve/job_page.py), on a stored grading: whole without
JavaScript, every student value escaped, an item's code spans rendered as code."""
import re
from argparse import Namespace
from pathlib import Path

import pytest

from grader.grading import load_grading
from grader.model import ItemResult, Status
from grader.serve.job_page import item_list, render, stage_rows
from grader.serve.settings import Settings, SettingsError, load

ROOT = Path(__file__).resolve().parent.parent
GRADING = load_grading(ROOT / "tests" / "fixtures" / "gradings" / "starter" / "grading.json")
VIEW = {"id": "abc123", "state": "done", "kind": "student", "score": 0.0, "max_score": 179.0,
        "files": ["grading.json", "summary.md", "results.json"], "created": None}


def _failed(title: str, message: str) -> ItemResult:
    return ItemResult("naive", "compiles", title, Status.FAILED, 0.0, 1.0, message, number="1.1")


def test_a_done_job_is_rendered_whole():
    page = render(VIEW, GRADING, "<p>the summary</p>", 0.0)
    assert '<span id="state" class="state done">done</span>' in page
    assert "<strong>0 / 179 points</strong>" in page and "<p>the summary</p>" in page
    assert '<div id="results">' in page and "<table>" in page
    assert [r[0] for r in stage_rows(GRADING)][:2] == ["1 naive", "2 coalesced"]
    assert 'href="/jobs/abc123/summary">the full summary (summary.md)' in page


def test_code_spans_are_code_and_markup_is_text():
    hostile = [_failed("t <b>", "rename `mmTile` to `mmTiled` <img src=x onerror=alert(1)>\nline 2 <script>")]
    out = item_list(hostile, "notPassed")
    assert "<code>mmTile</code>" in out and "<code>mmTiled</code>" in out and "`" not in out
    assert "<img" not in out and "<script" not in out and "&lt;img src=x" in out and "&lt;script&gt;" in out
    assert "t &lt;b&gt;" in out


def test_a_queued_job_has_no_results_yet_and_says_its_place():
    view = {"id": "q1", "state": "queued", "position": 2, "estimate_s": 30.0, "files": []}
    page = render(view, None, None, 0.0)
    assert "position 2 · ~30 s to go" in page and '<div id="results" hidden>' in page
    assert re.search(r'<body data-state="queued" data-refresh-ms="3000">', page)  # job.js looks again every 3 s
    assert '<body data-state="queued" data-refresh-ms="500">' in render(view, None, None, 0.0, refresh_s=0.5)


def test_a_fenced_compile_error_is_a_block_of_code_not_backticks():
    message = "nvcc failed (exit code 1):\n```text\nnaive.cu(3): error: <expected> an expression\n```\n"
    out = item_list([_failed("compiles", message)], "notPassed")
    assert '<pre class="message"><code class="language-text">naive.cu(3): error: &lt;expected&gt;' in out
    assert "```" not in out


def test_the_pages_refresh_is_a_setting_of_at_least_a_tenth_of_a_second(tmp_path):
    assert Settings().page_refresh_s == 3.0
    (tmp_path / "serve.yaml").write_text("page_refresh_s: 0.5\n")
    assert load(Namespace(data=str(tmp_path))).page_refresh_s == 0.5
    (tmp_path / "serve.yaml").write_text("page_refresh_s: 0.01\n")
    with pytest.raises(SettingsError, match="page_refresh_s must be at least 0.1 seconds"):
        load(Namespace(data=str(tmp_path)))
