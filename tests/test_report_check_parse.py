"""grader/writeup/parse.py: pure parsing of report text; nothing raises on student text."""
import pytest

from grader.writeup.parse import (
    heading_transition,
    paragraph,
    parse_quantity,
    read_citation,
    row_stage,
    sections,
    strip_comments,
    tables,
)
from grader.writeup.run import stage_names
from tests.report_check_helpers import CFG, RUBRIC, SOLUTION, STARTER

NAMES = stage_names(RUBRIC, CFG)


@pytest.mark.parametrize("text,value,unit", [
    ("2.5", 2.5, ""), ("  16.5 sectors/request", 16.5, "sectors"), ("8,589,934,592", 8589934592, ""),
    ("8.59e9", 8.59e9, ""), ("8.59 x 10^9", 8.59e9, ""), ("8.59×10^9 FFMA", 8.59e9, "ffma"),
    ("16.8 M", 16.8e6, ""), ("8.59 G", 8.59e9, ""), ("8.59 billion", 8.59e9, ""), ("~34.3%", 34.3, "%"),
    ("≈ 0.31", 0.31, ""), ("0.375 ms", 375000, "time"), ("52 us", 52000, "time"), ("33.8 MB", 33.8e6, "byte"),
    ("1 KiB", 1024, "byte"), ("12.6x", 12.6, "x"), ("-3", -3, ""), (".5", 0.5, ""),
])
def test_quantities(text, value, unit):
    q, why = parse_quantity(text)
    assert why == "" and q.value == pytest.approx(value) and q.unit == unit


@pytest.mark.parametrize("text", ["high", "", "n/a", "about half", "—", "x"])
def test_text_where_a_number_belongs(text):
    q, why = parse_quantity(text)
    assert q is None and ("not a number" in why or "missing" in why)


def test_resolution_is_half_the_last_digit():
    assert parse_quantity("0.7")[0].resolution == pytest.approx(0.05)
    assert parse_quantity("499")[0].resolution == pytest.approx(0.5)
    assert parse_quantity("8.59e9")[0].resolution == pytest.approx(0.005e9)


def test_comments_are_removed_but_lines_kept():
    text = "a\n<!-- x\n`sectors_per_request = 3`\n-->\nb"
    out = strip_comments(text)
    assert "sectors" not in out and out.count("\n") == text.count("\n")
    assert strip_comments("x <!-- never closed\n`a__b.sum = 1`") == "x \n"


@pytest.mark.parametrize("heading,pair", [
    ("naive -> coalesced", ("naive", "coalesced")),
    ("1. Naive → Coalesced", ("naive", "coalesced")),
    ("From coalesced to shared-memory tiling", ("coalesced", "tiled")),
    ("tiled -> 1D blocktiling", ("tiled", "blocktiling_1d")),
    ("mm1DBlocktiling => mm2DBlocktiling", ("blocktiling_1d", "blocktiling_2d")),
    ("2D blocktiling -> Tensor Cores (WMMA)", ("blocktiling_2d", "wmma")),
    ("blocktiling_2d -> wmma", ("blocktiling_2d", "wmma")),
])
def test_transition_headings(heading, pair):
    assert heading_transition(heading, NAMES) == pair


@pytest.mark.parametrize("heading", ["Results: CUDA-core ladder", "How to read this", "naive -> nothing", ""])
def test_other_headings(heading):
    assert heading_transition(heading, NAMES) is None


def test_sections_skip_fenced_code_and_include_subsections():
    text = "# R\n## a -> b\ntext\n```\n## not a heading\n```\n### sub\nmore\n## next\n"
    secs = sections(text)
    assert [s.heading for s in secs] == ["R", "a -> b", "sub", "next"]
    assert "more" in secs[1].body and "not a heading" in secs[1].body and secs[1].line == 2


def _cite(span):
    return read_citation(span, 7, CFG.derived, NAMES)


def test_citations():
    c = _cite("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active = 34.3")
    assert not c.derived and c.quantity.value == 34.3 and c.stage is None and not c.problem
    c = _cite("naive: Shared loads per warp FFMA ≈ 1.25")
    assert c.derived and c.name == "shared_loads_per_warp_ffma" and c.stage == "naive"
    assert _cite("mmTiled: sectors_per_request = 4").stage == "tiled"
    assert _cite("Shared-memory tiling: sectors_per_request = 4").stage == "tiled"


def test_citation_problems_are_data():
    c = _cite("fma_pipe_pct = high")
    assert "`high` is not a number" in c.problem
    c = _cite("tilde: fma_pipe_pct = 3")
    assert "names no stage" in c.problem
    c = _cite("sm__pipe_fma_cycles_active = 3")  # no rollup: still a valid metric name form
    assert not c.problem
    c = _cite("sm__ = 3")
    assert "looks like an Nsight Compute metric" in c.problem


def test_ordinary_code_is_not_a_citation():
    assert _cite("threadIdx.x") is None
    assert _cite("a == b") is None
    assert _cite("TM = 8") == "TM"
    assert _cite("shared loads = 2") == "shared loads"


def test_paragraph_counts_prose_words_only():
    sec = sections("## naive -> coalesced\nThe load `sectors_per_request = 2.5` is cheap now.\n"
                   "| a | b |\n|---|---|\n| words in a table | do not count |\n")[0]
    par = paragraph(sec, CFG.derived, NAMES)
    assert par.words == 5 and len(par.citations) == 1 and par.citations[0].line == 2
    assert par.heading == "naive -> coalesced"


def test_tables():
    text = "# T\n| N | kernel | a\\|b |\n|:--|--:|---|\n| 1 | x | y |\n| 2 | z |\n\n```\n| q |\n|---|\n```\n"
    (t,) = tables(text)
    # GFM pads a short row to the header's cells
    assert t.header == ["N", "kernel", "a|b"] and t.rows == [["1", "x", "y"], ["2", "z", ""]]
    assert t.line == 2 and t.heading == "T"
    assert len(tables(SOLUTION)) == 2 and len(tables(STARTER)) == 2


def test_row_stage():
    assert row_stage("1D blocktiling", NAMES) == ("blocktiling_1d", [])
    assert row_stage("tiled (shared)", NAMES) == ("tiled", [])
    assert row_stage("mm2DBlocktiling", NAMES) == ("blocktiling_2d", [])
    assert row_stage("cuBLAS", NAMES) == (None, [])
