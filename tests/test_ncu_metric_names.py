"""Metric names are checked against the list ncu itself reports (grader/rubric/metric_names.py), read
from real captures of ncu 2025.3.1 (tests/fixtures/ncu/): a misspelt metric stops check-rubric with
exit 2 instead of failing a GPU grading, and a metric this GPU's chip lacks is named per item."""
import copy
import dataclasses
import gzip
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from grader.evidence.compile import CompileResult
from grader.evidence.protocol import ProbeResult
from grader.gpu.ncu_run import profile_stages
from grader.grading import StageOutcome
from grader.model import Status, Verdict
from grader.profile.diagnosis import METRICS as DIAGNOSIS_METRICS
from grader.profile.ncu import metrics_needed
from grader.rubric import metric_names
from grader.rubric.errors import RubricError
from grader.rubric.expr import METRIC_RE, check_expression
from grader.rubric.kinds import judge_ncu
from grader.rubric.load import load_rubric, parse_rubric
from grader.rubric.metric_names import SUFFIXES, chip_for_cc, chips_with, missing_on, problem, shipped
from grader.rubric.ncu_list import (
    MetricType,
    NcuListError,
    parse_list_chips,
    parse_query_metrics,
    parse_version,
    raw_page_metrics,
)
from grader.rubric.types import Profile

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "fixtures" / "ncu"
CHIPS = ("ad102", "ga100", "gb100", "gb202", "gh100", "tu102")
RAW = yaml.safe_load((ROOT / "rubric.yaml").read_text())
GB202_ONLY = "sm__pipe_fma_cycles_active_realtime.sum"  # a counter only gb202's ncu lists


def capture(name: str) -> str:
    return gzip.decompress((CAPTURES / name).read_bytes()).decode()


# --------------------------------------------------------------------------------------------
# the parsers, on the real captures
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chip", CHIPS)
def test_every_captured_table_parses(chip):
    table = parse_query_metrics(capture(f"ncu2025.3.1_query_metrics_{chip}.txt.gz"))
    assert table.chip == chip
    assert len(table.metrics) > 1500
    assert table.metrics["gpu__time_duration"] is MetricType.COUNTER
    assert table.metrics["sm__throughput"] is MetricType.THROUGHPUT
    assert set(table.metrics.values()) == {MetricType.COUNTER, MetricType.RATIO, MetricType.THROUGHPUT}
    # A wrapped description ("(non-exclusively)") is never taken for a name.
    assert not any(n.startswith("(") for n in table.metrics)


def test_the_h200_table_in_detail():
    table = parse_query_metrics(capture("ncu2025.3.1_query_metrics_gh100.txt.gz"))
    assert len(table.metrics) == 3523
    # PM-sampling names (a namespace before the unit) are kept apart: --metrics of a kernel does not take them.
    assert len(table.namespaced) == 127 and "CTC.TriageCompute.ctc__rx_bytes" in table.namespaced
    assert "TriageCompute.sm__throughput" in table.namespaced
    assert table.metrics["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld"] is MetricType.RATIO
    assert table.metrics["smsp__warp_issue_stalled_long_scoreboard_per_warp_active"] is MetricType.RATIO
    assert table.metrics["gpu__time_duration"] is MetricType.COUNTER


def test_list_chips_and_version():
    chips = parse_list_chips(capture("ncu2025.3.1_list_chips.txt.gz"))
    assert len(chips) == 28 and set(CHIPS) <= set(chips)
    assert parse_version(capture("ncu2025.3.1_version.txt.gz")) == "2025.3.1.0 (build 36398880)"


def test_the_raw_page_names_what_ncu_reports_itself():
    names = raw_page_metrics((CAPTURES / "ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
    assert "launch__waves_per_multiprocessor" in names and "device__attribute_max_threads_per_block" in names
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in names and "Kernel Name" not in names


@pytest.mark.parametrize("text, where", [
    ("hello", "Chip <name>"),
    ("Chip gh100\nno table here\n", "line 2"),
    ("Chip gh100\n---- ----\nMetric Name Metric Type\n---- ----\nfoo__bar Widget byte x\n", "line 5"),
])
def test_other_text_is_refused_naming_the_line(text, where):
    with pytest.raises(NcuListError, match=where):
        parse_query_metrics(text)
    with pytest.raises(NcuListError):
        parse_version("not ncu")
    with pytest.raises(NcuListError):
        raw_page_metrics("==PROF== nothing")


def test_the_counter_grammar_is_exactly_ncus_suffix_listing():
    sample = parse_query_metrics(capture("ncu2025.3.1_query_metrics_suffix_sample_gh100.txt.gz"))
    bases = {n.split(".", 1)[0] for n in sample.metrics}
    assert bases == {"dram__bytes_read", "sm__inst_executed_pipe_fma"}
    assert set(sample.metrics) == {b + s for b in bases for s in SUFFIXES[MetricType.COUNTER]}


# --------------------------------------------------------------------------------------------
# the shipped list
# --------------------------------------------------------------------------------------------
def test_the_shipped_list_is_what_the_captures_give():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_metric_list.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    known = shipped()
    assert known.version == "2025.3.1.0 (build 36398880)" and known.chips == CHIPS
    assert known.on["gpu__time_duration"] == frozenset(CHIPS)
    # A real difference: gb202's ncu counts DRAM reads as dram__bytes_op_read.
    assert known.on["dram__bytes_read"] == frozenset(CHIPS) - {"gb202"} and "gb202" in known.on["dram__bytes_op_read"]
    assert known.types["launch__registers_per_thread"] is MetricType.ATTRIBUTE


def test_a_stale_list_is_reported(tmp_path, monkeypatch):
    stale = tmp_path / "ncu_metrics.txt.gz"
    stale.write_bytes(gzip.compress(b"# nothing\nversion 0\nchips gh100\n"))
    monkeypatch.setattr(metric_names, "DATA", stale)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import ncu_metric_list
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert ncu_metric_list.main(["--check"]) == 1


def test_every_metric_the_grader_asks_for_exists_on_the_h200():
    rubric = load_rubric(ROOT / "rubric.yaml")
    assert rubric.report is not None
    names = metrics_needed(rubric) + [m for d in rubric.report.derived.values() for m in METRIC_RE.findall(d.expr)]
    names += list(DIAGNOSIS_METRICS)
    assert [problem(n) for n in names if problem(n)] == []
    assert missing_on(names, "gh100") == []
    # On an RTX 50 (gb202) ncu names DRAM traffic otherwise: the diagnosis's two DRAM counters are left out there.
    assert missing_on(metrics_needed(rubric), "gb202") == ["dram__bytes_read.sum", "dram__bytes_write.sum"]


@pytest.mark.parametrize("name, words", [
    ("smsp__inst_executed_op_shared_ldd.sum", ["is not a metric of ncu 2025.3.1.0 on ad102, ga100, gb100, gb202, "
                                               "gh100, tu102", "closest: smsp__inst_executed_op_shared_ld.sum"]),
    ("sm__throughput.avg.pct", ["throughput metric", "closest: sm__throughput.avg.pct_of_peak_sustained_elapsed"]),
    ("dram__bytes_read", ["counter metric, which needs a rollup", "closest: dram__bytes_read.sum"]),
    ("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.sum", ["ratio metric", ".ratio"]),
    ("launch__registers_per_thread.sum", ["takes no suffix: write launch__registers_per_thread"]),
    ("nosuch__thing.sum", ["is not a metric"]),
])
def test_bad_names_are_explained(name, words):
    text = problem(name)
    for w in words:
        assert w in text


@pytest.mark.parametrize("name", [
    "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum.per_second",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct", "launch__waves_per_multiprocessor",
    "l1tex__m_l1tex2xbar_read_requests_mem_global_op_tma_ld_dest_multicast_size_32B.sum",  # capitals (gh100)
    GB202_ONLY,
])
def test_good_names_pass(name):
    assert problem(name) == "" and check_expression(f"{name} / N") == ""


def test_chips():
    assert chip_for_cc([9, 0]) == chip_for_cc(9.0) == chip_for_cc("9.0") == "gh100"
    assert chip_for_cc(12.0) == "gb202" and chip_for_cc([8, 6]) is None and chip_for_cc(None) is None
    assert chips_with(GB202_ONLY) == {"gb202"} and chips_with("nosuch__thing.sum") == frozenset()
    assert missing_on([GB202_ONLY, "dram__bytes_read.sum"], "gh100") == [GB202_ONLY]
    assert missing_on([GB202_ONLY], "ga102") == []  # a chip the grader has no list for: nothing left out


# --------------------------------------------------------------------------------------------
# the rubric: load, check-rubric, and a grading on a chip that lacks a metric
# --------------------------------------------------------------------------------------------
def _bad_rubric(tmp_path: Path, edit) -> Path:
    raw = copy.deepcopy(RAW)
    edit(raw)
    path = tmp_path / "rubric.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _first_ncu_item(raw) -> tuple[int, int, dict]:
    return next((k, j, it) for k, st in enumerate(raw["stages"]) for j, it in enumerate(st["items"])
                if it["kind"] == "ncu")


def test_a_misspelt_metric_in_an_item_stops_check_rubric(tmp_path):
    k, j, it = _first_ncu_item(RAW)

    def edit(raw):
        raw["stages"][k]["items"][j]["expr"] = it["expr"].replace("ffma_pred_on", "ffma_pred_onn")

    path = _bad_rubric(tmp_path, edit)
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "ffma_pred_onn" in text)
    assert exc.value.where == f"rubric.yaml line {line}: stage {RAW['stages'][k]['id']}, item {it['id']}: expr"
    proc = subprocess.run([sys.executable, "-m", "grader", "check-rubric", "--rubric", str(path),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert exc.value.where in proc.stderr
    assert "sm__sass_thread_inst_executed_op_ffma_pred_onn.sum is not a metric" in proc.stderr
    assert "closest: sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_suffix_in_a_derived_name_stops_the_loader():
    raw = copy.deepcopy(RAW)
    raw["report"]["derived"]["sm_throughput_pct"]["expr"] = "sm__throughput.avg.pct"
    with pytest.raises(RubricError) as exc:
        parse_rubric(raw)
    assert exc.value.where == "rubric.yaml.report.derived.sm_throughput_pct.expr"
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in exc.value.problem


def test_a_metric_in_the_value_is_checked_too():
    raw = copy.deepcopy(RAW)
    k, j, _ = _first_ncu_item(raw)
    raw["stages"][k]["items"][j]["value"] = "dram__bytes_reed.sum / 2"
    with pytest.raises(RubricError) as exc:
        parse_rubric(raw)
    assert exc.value.where == f"rubric.yaml.stages[{k}].items[{j}].value" and "dram__bytes_read.sum" in str(exc.value)


def _fake_ncu(tmp_path: Path) -> SimpleNamespace:
    path = tmp_path / "fake-ncu"
    fixture = CAPTURES / "ncu2025.3.1_raw_solutions_h200_n2048.csv"
    path.write_text(f"#!{sys.executable}\nimport sys\nopen({str(tmp_path / 'argv')!r}, 'w').write(repr(sys.argv))\n"
                    f"print(open({str(fixture)!r}).read())\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return SimpleNamespace(path=str(path))


def test_on_the_h200_a_metric_only_another_chip_has_is_left_out_and_named(tmp_path):
    raw = copy.deepcopy(RAW)
    tiled = next(st for st in raw["stages"] if st["id"] == "tiled")
    tiled["items"].append({"id": "realtime", "kind": "ncu", "title": "FMA pipe (realtime)", "points": 1,
                           "expr": GB202_ONLY, "op": ">=", "value": 1})
    rubric = dataclasses.replace(parse_rubric(raw), profile=Profile(n=2048, timeout_s=30.0))
    outs = {}
    for st in rubric.stages:
        c = CompileResult(st.id, True, cubin=f"w/{st.id}.cubin", launch=st.launch)
        outs[st.id] = StageOutcome(stage=st, compile=c, verdict=Verdict.CORRECT)
    run = profile_stages(outs, rubric, has_gpu=True, gpu_reason="", work_dir=tmp_path / "ncu", seed=1,
                         ncu_tool=_fake_ncu(tmp_path), device=ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0]))
    assert run is not None
    argv = eval((tmp_path / "argv").read_text())
    asked = argv[argv.index("--metrics") + 1].split(",")
    assert GB202_ONLY not in asked and "sm__throughput.avg.pct_of_peak_sustained_elapsed" in asked
    assert run.dropped_metrics == [GB202_ONLY] and f"ncu on gh100 has no metric {GB202_ONLY}" in run.notes[0]
    r = judge_ncu(next(i for i in rubric.stage("tiled").items if i.id == "realtime"), outs["tiled"])
    assert r.status == Status.NOT_EVALUATED
    assert r.message == (f"not evaluated: ncu on gh100 has no metric {GB202_ONLY} (it exists on gb202); "
                         "not your kernel's fault")


def test_the_installed_ncu_lists_what_the_captures_hold():
    """Where Nsight Compute is installed (the GPU machine): its listing for gh100 is the captured one,
    when it is the captured version; another version says so (recapture: tools/ncu_metric_list.py)."""
    from grader.compile import toolchain
    ncu = toolchain.find_ncu()
    if ncu.path is None:
        pytest.skip("Nsight Compute (ncu) is not installed here; the captures in tests/fixtures/ncu stand for it")
    version = parse_version(subprocess.run([ncu.path, "--version"], capture_output=True, text=True,
                                           timeout=120).stdout)
    if version != shipped().version:
        pytest.skip(f"ncu here is {version}, the captures are of {shipped().version}: recapture to compare")
    live = subprocess.run([ncu.path, "--query-metrics", "--chip", "gh100"], capture_output=True, text=True,
                          timeout=300)
    assert parse_query_metrics(live.stdout).metrics == parse_query_metrics(
        capture("ncu2025.3.1_query_metrics_gh100.txt.gz")).metrics
