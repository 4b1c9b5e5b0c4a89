"""Hostile student files are read in bounded time and memory, and each fails only what it touches.

Every case runs in a child Python under ``resource.setrlimit`` (address space and CPU time), so a
regression (a regex that backtracks for minutes, a YAML alias bomb that expands to gigabytes)
fails its test instead of taking the machine down. The input is built before the clock starts;
the bound is on the CPU time of the case's parse, so other work on the machine does not make it flaky.
The cases run one after another in one child, once for the file; a case that child did not finish
(a limit ended it) runs again in a child of its own, whose exit its test reports.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU_BOUND_S = 1.0
MEMORY_CAP = 512 * 1024 * 1024  # the grader's modules need about 30 MB

_CHILD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))  # minutes of backtracking end here
from tests.test_parsers_bounded import CASES
for case in sys.argv[1:]:
    run = CASES[case]()  # builds the input; not timed
    start = time.process_time()
    summary = run()
    print(json.dumps({{"case": case, "cpu_s": time.process_time() - start, "summary": summary}}), flush=True)
"""


def _child(cases: list[str], cpu_limit_s: int) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """Run ``cases`` one after another in one child; (the child, {case: its line} for each case it finished)."""
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(mem=MEMORY_CAP, cpu=cpu_limit_s), *cases], cwd=ROOT,
                          capture_output=True, text=True, timeout=120 * len(cases))
    done = {}
    for line in proc.stdout.splitlines():
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict) and out.get("case") in cases:
            done[out["case"]] = out
    return proc, done


@functools.cache
def _every_case() -> dict[str, dict]:
    """Every case, in one child (one interpreter start for all, read by every test of this file). A case the child
    did not finish (it hit a limit, or a case before it did) is missing here and runs in a child of its own."""
    return _child(list(CASES), cpu_limit_s=60)[1]


def _bounded(case: str) -> dict:
    out = _every_case().get(case)
    if out is None:  # alone, so that its own child's exit says what went wrong
        proc, done = _child([case], cpu_limit_s=20)
        assert case in done and proc.returncode == 0, f"{case}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        out = done[case]
    assert out["cpu_s"] < CPU_BOUND_S, f"{case} took {out['cpu_s']:.2f} s of CPU"
    return out["summary"]


# ---------------------------------------------------------------------------------------
# The cases, run in the child: each returns a function that parses and returns a summary.
# ---------------------------------------------------------------------------------------
def _report_grader(text: str):
    from grader.model import Status
    from grader.writeup.run import grade
    from tests.report_check_helpers import CFG, RUBRIC, gpu_outcomes

    outcomes = gpu_outcomes()

    def run() -> dict:
        items = grade(CFG, text, "", RUBRIC, outcomes)
        return {"items": {i.item: [str(i.status), i.message] for i in items},
                "grader_failed": [i.item for i in items if "grader failed" in i.message],
                "longest": max(len(i.message) for i in items),
                "passed": [i.item for i in items if i.status == Status.PASSED]}
    return run


def _report_file(text: str):
    """The whole path from the file: a report over the size limit is refused before parsing."""
    import tempfile

    from grader.writeup.run import grade_report_submission
    from tests.report_check_helpers import RUBRIC, gpu_outcomes, write_report

    sub = write_report(Path(tempfile.mkdtemp()), text)
    outcomes = gpu_outcomes()

    def run() -> dict:
        items = grade_report_submission(sub, RUBRIC, outcomes)
        return {"messages": sorted({i.message for i in items})}
    return run


def _answers(text: str):
    from grader.occupancy.answers import answer_schema, parse_answers
    from grader.occupancy.exercises import grade_occupancy
    from grader.occupancy.grading import Measurements
    from grader.rubric.load import load_default_occupancy

    cfg = load_default_occupancy()
    schema = answer_schema(cfg)

    def run() -> dict:
        parsed = parse_answers(text, schema)
        items = grade_occupancy(cfg, parsed, Measurements())
        return {"error": parsed.error, "problems": parsed.problems, "values": len(parsed.values),
                "items": {i.item: [str(i.status), i.message] for i in items}}
    return run


def _solution_answers_with(field_line: str, value: str) -> str:
    """The solution's answers.yaml with the value on the line ``  field_line:`` replaced."""
    lines = (ROOT / "solutions/occupancy/answers.yaml").read_text(encoding="utf-8").splitlines()
    key = f"{field_line}:"
    k = next(i for i, ln in enumerate(lines) if ln.strip().startswith(key))
    indent = lines[k][:len(lines[k]) - len(lines[k].lstrip())]
    lines[k] = f"{indent}{key} {value}"
    return "\n".join(lines) + "\n"


def _billion_laughs() -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\nex1:\n  max_blocks: *a9\n  bottleneck: *a9\n"


def _solution() -> str:
    return (ROOT / "solutions/report.md").read_text(encoding="utf-8")


KB = 1000
CASES = {
    # report: headings that make a backtracking line regex run for minutes
    # a lazy (.*?) before \s*#*\s*$ is cubic in a run of spaces: 1,000 took 2.5 s, 8,000 minutes
    "heading_8kb_spaces": lambda: _report_grader("# a" + " " * 8 * KB + "x\n" + _solution()),
    "heading_8kb_hashes": lambda: _report_grader("## naive " + " #" * 4 * KB + " -> x\n" + _solution()),
    "arrow_heading_50kb": lambda: _report_grader("## naive " + "-> " * (50 * KB // 3) + "\ntext\n"),
    "arrow_heading_50kb_dashes": lambda: _report_grader("## naive " + "-" * 50 * KB + " coalesced\n"),
    "arrow_heading_50kb_to": lambda: _report_grader("## " + "naive to " * (50 * KB // 9) + "\n"),
    "arrow_heading_200kb": lambda: _report_grader("## naive " + "=> " * (200 * KB // 3) + "coalesced\n"),
    "code_spans_50kb_pairs": lambda: _report_grader("## naive -> coalesced\n" + "` " * (50 * KB // 2)),
    "code_spans_50kb_growing": lambda: _report_grader(
        "## naive -> coalesced\n" + "".join("`" * i + " x " for i in range(1, 300))),
    # a lazy (.*?) before \s*= is quadratic in a run of spaces inside one code span
    "code_spans_50kb_spaces": lambda: _report_grader(
        "## naive -> coalesced\n`sectors_per_request" + " " * 50 * KB + "x`\n"),
    "code_spans_200kb_unclosed": lambda: _report_grader("## naive -> coalesced\n" + "``a` " * (200 * KB // 5)),
    "code_spans_200kb_file": lambda: _report_file("## naive -> coalesced\n" + "` " * (200 * KB // 2)),
    "table_rows_60kb": lambda: _report_grader("| N | kernel | ms |\n|---|---|---|\n" + "| 1 | naive | 2 |\n" * 3500),
    "citations_60kb": lambda: _report_grader(
        "## naive -> coalesced\n" + "`sectors_per_request = 9.5` w " * (60 * KB // 33)),
    "citation_1e999": lambda: _report_grader(
        _solution().replace("`sectors_per_request = 2.5`", "`sectors_per_request = 1e999`")),
    "table_cell_1e999": lambda: _report_grader(_solution().replace("| 4096 | tiled | 15.349 |", "| 1e999 | tiled | 1e-300 |")),
    # answers.yaml
    "answer_value_250kb": lambda: _answers(_solution_answers_with("max_blocks", "'" + "1" * 250 * KB + " x'")),
    "answer_value_250kb_spaces": lambda: _answers(_solution_answers_with("max_blocks", "'1" + " " * 250 * KB + "x'")),
    "answer_text_60kb": lambda: _answers(_solution_answers_with("max_blocks", "'1" + " " * 60 * KB + "x'")),
    "answer_billion_laughs": lambda: _answers(_billion_laughs()),
    "answer_deep_flow": lambda: _answers("ex1: " + "[" * 200 * KB),
    "answer_deep_mapping": lambda: _answers("ex1: " + "{a: " * 50 * KB),
    "answer_many_values": lambda: _answers("ex1: [" + "1, " * (80 * KB) + "]\n"),
    "answer_huge_hex": lambda: _answers(_solution_answers_with("max_blocks", "0x" + "f" * 5000)),
    "answer_huge_decimal": lambda: _answers(_solution_answers_with("occupancy_pct", "9" * 5000)),
}


# ---------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [c for c in CASES if c.startswith(("heading", "arrow", "code_spans", "table_rows",
                                                                    "citations_"))])
def test_hostile_report_structure_is_graded_in_bounded_time(case):
    summary = _bounded(case)
    if "messages" in summary:  # from the file: over the size limit, one message on every item
        assert len(summary["messages"]) == 1 and "the limit is 65,536" in summary["messages"][0]
        return
    assert summary["grader_failed"] == []
    assert summary["longest"] < 5000


def test_a_long_heading_does_not_hide_the_reports_sections():
    summary = _bounded("heading_8kb_spaces")
    assert "naive_to_coalesced.values" in summary["passed"] and "table.cuda_cores" in summary["passed"]


def test_a_citation_of_1e999_fails_only_its_values_item():
    items = _bounded("citation_1e999")["items"]
    status, message = items["naive_to_coalesced.values"]
    assert status == "failed" and "`1e999` is not a number the grader can use" in message
    assert "line " in message and "sectors_per_request" in message
    assert not any("grader failed" in m for _, m in items.values())
    others = {k: s for k, (s, _) in items.items() if k not in ("naive_to_coalesced.values", "reasoning")}
    assert set(others.values()) == {"passed"}, others


def test_a_table_cell_of_1e999_fails_only_its_row():
    items = _bounded("table_cell_1e999")["items"]
    status, message = items["table.cuda_cores"]
    assert status == "failed" and "row tiled:" in message and "`1e999` is not a number the grader can use" in message
    assert "5 of 6 rows" in message
    assert items["table.tensor_cores"][0] == "passed"


@pytest.mark.parametrize("case", ["answer_value_250kb", "answer_value_250kb_spaces", "answer_text_60kb"])
def test_a_huge_answer_value_fails_only_its_field(case):
    summary = _bounded(case)
    assert summary["error"] is None
    problem = summary["problems"]["ex1.max_blocks"]
    assert problem.startswith("ex1.max_blocks: expected an integer, got `")
    assert len(problem) < 400 and ("characters" in problem)
    assert summary["items"]["ex1.max_blocks"][0] == "failed"
    assert summary["items"]["ex1.warps_per_block"][0] == "passed"


@pytest.mark.parametrize("case, expected", [
    ("answer_billion_laughs", "line 1: anchors and aliases (&name, *name) are not allowed"),
    ("answer_deep_flow", "answers.yaml line 1:"),
    ("answer_deep_mapping", "nested more than 20 levels deep"),
    ("answer_many_values", "more than 10,000 values"),
])
def test_a_hostile_yaml_structure_is_one_file_level_message(case, expected):
    summary = _bounded(case)
    assert expected in summary["error"] and summary["values"] == 0
    assert summary["error"].endswith("no answer in the file could be read")
    ex1 = [v for item, v in summary["items"].items() if item.startswith("ex1.")]
    assert ex1 and all(status == "failed" and summary["error"] in message for status, message in ex1)


@pytest.mark.parametrize("case, field, item", [("answer_huge_hex", "ex1.max_blocks", "ex1.max_blocks"),
                                               ("answer_huge_decimal", "ex1.occupancy_pct", "ex1.occupancy")])
def test_a_huge_number_fails_only_its_answer(case, field, item):
    summary = _bounded(case)
    assert summary["error"] is None
    assert "a number too large" in summary["problems"][field]
    assert summary["problems"][field].startswith(f"{field}: expected ")
    assert summary["items"][item][0] == "failed"
    assert not any("grader failed" in m for _, m in summary["items"].values())
    assert summary["items"]["ex1.warps_per_block"][0] == "passed"


# ---------------------------------------------------------------------------------------
# Student text in Markdown feedback is shown, never rendered
# ---------------------------------------------------------------------------------------
HOSTILE_TEXT = ["[click](http://evil.example) ![x](http://evil.example/i.png)", "<img src=x onerror=alert(1)>",
                "`` ` ``` `", "ends with `", "two\n\nparagraphs\n# heading", "\u202eevil\u0000", " x ", "*bold* _i_"]


def _render(markdown: str) -> str:
    from markdown_it import MarkdownIt  # full CommonMark with raw HTML, as a feedback page may render it

    return MarkdownIt("commonmark", {"html": True}).render(markdown)


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_quote_code_is_one_code_span_showing_the_text(text):
    from grader.untrusted.quote import quote_code

    html = _render(f"got {quote_code(text)} here")
    assert html.count("<code>") == 1 and "<a " not in html and "<img" not in html and "<h1>" not in html
    shown = html.split("<code>")[1].split("</code>")[0]
    expected = text.replace("\n", " ").replace("\u202e", "\ufffd").replace("\u0000", "\ufffd")
    assert shown == expected.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def test_quote_code_trims_long_text_and_says_how_long_it_was():
    from grader.untrusted.quote import quote_code

    quoted = quote_code("x" * 250_000)
    assert quoted == "`" + "x" * 80 + "`… (250,000 characters)"


def test_student_markdown_in_report_and_answers_feedback_is_not_rendered():
    from grader.occupancy.answers import answer_schema, parse_answers
    from grader.rubric.load import load_default_occupancy
    from grader.writeup.run import grade
    from tests.report_check_helpers import CFG, RUBRIC, gpu_outcomes

    evil = "[click](http://evil.example) <img src=x>"
    text = f"## {evil}\n\n## naive -> coalesced\nshort `{evil} = 3` and `stage{evil}: sectors_per_request = x`\n"
    messages = [i.message for i in grade(CFG, text, "", RUBRIC, gpu_outcomes())]
    schema = answer_schema(load_default_occupancy())
    parsed = parse_answers(f"ex1:\n  max_blocks: '{evil}'\n  bottleneck: '{evil}'\n'{evil}': 1\n", schema)
    messages += list(parsed.problems.values()) + parsed.notes
    quoted = [m for m in messages if "evil.example" in m]
    assert len(quoted) >= 4
    for message in quoted:
        html = _render(message)
        assert "<a " not in html and "<img" not in html, message


@pytest.mark.parametrize("text", HOSTILE_TEXT + ["```\n<h1>x</h1>\n```", "````` and ``` lines\n```\n<img src=x>"])
def test_fence_block_is_one_code_block_showing_the_text(text):
    from grader.untrusted.quote import fence_block

    html = _render("the compiler said:" + fence_block(text) + "and more after it")
    assert html.count("<pre>") == 1 and "<a " not in html and "<img" not in html and "<h1>" not in html
    shown = html.split("<code class=\"language-text\">")[1].split("</code>")[0]
    expected = text.replace("\u202e", "\ufffd").replace("\u0000", "\ufffd").strip("\n")
    assert shown == expected.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") + "\n"
    assert html.rstrip().endswith("<p>and more after it</p>")


def test_fence_block_keeps_the_end_of_long_output_and_says_so():
    from grader.untrusted.quote import fence_block

    block = fence_block("head\n" + "x" * 10_000 + "\nerror: the last line", limit=100)
    assert "(its last 100 of 10,026 characters)" in block and block.rstrip().endswith("error: the last line\n```")
    assert "head" not in block


def test_markdown_safe_shows_raw_html_or_an_image_as_code_and_keeps_the_graders_markdown():
    from grader.untrusted.quote import markdown_safe, show_name

    ours = "**compiled**; `naive.cu` at 1.5x, see `stages.<id>.ncu`\n\n- a list\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert markdown_safe(ours) == ours
    for hostile in ("passed <img src=x onerror=alert(1)>", "<h1>Score: 179 / 179</h1>", "![x](http://e.example/p.png)"):
        html = _render(markdown_safe("note: " + hostile))
        assert "<img" not in html and "<h1>" not in html and html.startswith("<pre><code"), hostile
    assert show_name("gemm/naive.cu") == "gemm/naive.cu" and show_name("<img src=x>.cu") == "`<img src=x>.cu`"


def test_every_test_output_and_the_summary_pass_the_last_guard_whatever_item_carries_the_text():
    """A message no quoting reached (any item, manual ones too) and the summary are shown, not rendered;
    the occupancy host check quotes the student's source line it names."""
    from grader.model import ItemResult, Status
    from grader.occupancy.hostcheck import Unchecked
    from grader.outputs.results import build_results

    raw = "the kernel said <img src=x onerror=alert(1)> <h1>Score: 179 / 179</h1>"
    items = [ItemResult("tiled", "correct", "correct", Status.FAILED, 0, 1, raw),
             ItemResult("occupancy", "ex1.why", "why", Status.MANUAL, 0, 1, raw),
             ItemResult("report", "r", "r", Status.FAILED, 0, 1, "**bold** and `code <b>`")]
    res = build_results(items, execution_time=1, output="**Score** " + raw).to_json()
    for text in [res["output"], *(t["output"] for t in res["tests"])]:
        html = _render(text)
        assert "<img" not in html and "<h1>" not in html, text
    assert res["tests"][2]["output"] == "**bold** and `code <b>`"  # the grader's own Markdown is kept
    line = Unchecked(12, "cudaMalloc", "call", "cudaMalloc(&p, n); // <img src=x onerror=alert(1)>")
    assert "<img" not in _render(line.describe())
