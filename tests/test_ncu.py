"""grader/profile/ncu.py: the CSV parser on real captured output, and collect() against fake ncu programs."""
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.evidence.protocol import Kernel
from grader.model import Cause, Gap
from grader.profile import ncu
from grader.profile.ncu import (
    NCU_MISSING,
    collect,
    metric_names,
    metrics_needed,
    parse_raw_csv,
    parse_value,
    rubric_metrics,
)
from grader.records import from_jsonable
from grader.rubric.load import load_rubric, parse_rubric

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "ncu" / "ncu2025.3.1_raw_solutions_h200_n2048.csv"
KERNELS = ["mmNaive", "mmCoalesced", "mmTiled", "mm1DBlocktiling", "mm2DBlocktiling", "mmWMMA"]
FFMA = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
SPR = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"


@pytest.fixture(scope="module")
def table():
    return parse_raw_csv(FIXTURE.read_text())


def test_fixture_has_one_row_per_kernel_in_launch_order(table):
    assert list(table) == KERNELS
    assert table.problem == "" and table.notes == []


def test_numbers_lose_their_thousands_separators(table):
    assert [table[k][FFMA] for k in KERNELS] == [2048.0**3] * 5 + [0.0]
    assert [table[k][SPR] for k in KERNELS] == pytest.approx([16.5, 2.5, 4, 16, 16, 18.67])
    assert table["mmTiled"]["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 16_777_216.0
    assert table["mmTiled"]["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.avg"] == pytest.approx(1423.49)


def test_text_cells_stay_text_and_units_come_from_the_second_row(table):
    assert table["mmTiled"]["Block Size"] == "(32, 32, 1)"
    assert table["mmWMMA"]["launch__func_cache_config"] == "CachePreferNone"
    assert table.unit("gpu__time_duration.sum") == "ns"
    assert table.unit("dram__bytes_read.sum") == "byte"
    assert table.unit(FFMA) == "inst"
    assert table.unit("no__such_metric") == ""


def test_parse_value_cases():
    assert parse_value("1,234,567.5") == 1234567.5
    assert parse_value(" 42 ") == 42.0
    assert parse_value("1.5e+03") == 1500.0
    assert parse_value("n/a") is None and parse_value("") is None
    assert parse_value("(32, 1, 1)") == "(32, 1, 1)"
    assert parse_value("12,34") == "12,34"  # not a thousands-grouped number


def test_noise_before_and_after_the_table_is_skipped():
    text = FIXTURE.read_text()
    noisy = "hello from the kernel\n==PROF== something\n" + text + "\n==PROF== Report: done\n"
    assert list(parse_raw_csv(noisy)) == KERNELS


def test_a_kernel_profiled_twice_keeps_the_first_launch_and_says_so():
    lines = FIXTURE.read_text().splitlines()
    first_row = next(k for k, ln in enumerate(lines) if ln.startswith('"0",'))
    again = lines[first_row].replace('"0",', '"6",', 1).replace("16.50", "99")
    t = parse_raw_csv("\n".join(lines + [again]))
    assert t["mmNaive"][SPR] == 16.5
    assert any("mmNaive was profiled more than once" in n for n in t.notes)


def test_ncu_error_output_gives_an_empty_table_with_the_error():
    t = parse_raw_csv("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                      "permission to access NVIDIA GPU Performance Counters\n")
    assert len(t) == 0 and "ERR_NVGPUCTRPERM" in t.problem
    assert parse_raw_csv("==PROF== No kernels were profiled.\n").problem == "ncu profiled no kernel"
    assert parse_raw_csv("").problem.startswith("no CSV table")


def test_demangled_names_match_the_plain_kernel_name():
    t = ncu.NcuTable()
    t["mmTiled(const float *, const float *, float *, int)"] = {"x": 1.0}
    assert t.row("mmTiled") == {"x": 1.0} and t.row("mmTile") is None


def test_metric_names_finds_names_but_not_n_or_numbers():
    expr = "smsp__inst_executed_op_shared_ld.sum / (sm__sass_thread_inst_executed_op_ffma_pred_on.sum / 32) * N**3"
    assert metric_names(expr) == ["smsp__inst_executed_op_shared_ld.sum", FFMA]
    assert metric_names("launch__registers_per_thread + 1e6") == ["launch__registers_per_thread"]


def _rubric_with_ncu_items():
    import yaml

    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    raw["stages"][2]["items"].append({"id": "reuse", "kind": "ncu", "title": "t", "points": 1,
                                      "expr": f"{FFMA} / l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                                      "op": ">=", "value": 128})
    raw["stages"][0]["items"].append({"id": "count", "kind": "ncu", "title": "t", "points": 1,
                                      "expr": FFMA, "op": "==", "value": "N**3 + launch__grid_size * 0"})
    return parse_rubric(raw)


def test_metrics_needed_is_the_union_of_items_and_diagnosis():
    from grader.profile.diagnosis import METRICS

    needed = metrics_needed(_rubric_with_ncu_items())
    assert {FFMA, "launch__grid_size", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"} <= set(needed)
    assert set(METRICS) <= set(needed) and len(needed) == len(set(needed))
    shipped = load_rubric(ROOT / "rubric.yaml")
    item_metrics = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
                    "smsp__inst_executed_op_shared_ld.sum", FFMA}
    assert set(metrics_needed(shipped)) == set(METRICS) | item_metrics | (set(metrics_needed(shipped)) - set(METRICS))
    assert item_metrics <= set(metrics_needed(shipped))


def test_rubric_metrics_are_the_items_names_only_and_lead_metrics_needed():
    rubric = _rubric_with_ncu_items()
    items = rubric_metrics(rubric)
    # the added items' names, their value's too (launch__grid_size), once each; nothing of the diagnosis'
    assert {FFMA, "launch__grid_size", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"} <= set(items)
    assert len(items) == len(set(items))
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" not in items
    needed = metrics_needed(rubric)
    assert needed[:len(items)] == items  # the run collects the items' metrics first, then the diagnosis'


# --- collect() with fake ncu programs (no GPU needed) -------------------------------------------

STAGES = [from_jsonable(Kernel, {"id": "naive", "cubin": "/x/naive.cubin", "kernel": "mmNaive", "inputs": "fp32",
                                 "launch": {"block": [32, 32], "tile": [32, 32], "smem": 0}}),
          from_jsonable(Kernel, {"id": "tiled", "cubin": "/x/tiled.cubin", "kernel": "mmTiled", "inputs": "fp32",
                                 "launch": {"block": [32, 32], "tile": [32, 32], "smem": 0}})]


def _fake_ncu(tmp_path: Path, script: str) -> SimpleNamespace:
    path = tmp_path / "fake-ncu"
    path.write_text(f"#!{sys.executable}\nimport sys, time\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return SimpleNamespace(path=str(path), reason="")


def _collect(tmp_path, tool, stages=STAGES, timeout_s=30.0):
    return collect(stages, 2048, 7, [FFMA, SPR], tool, "none", timeout_s, tmp_path / "work")


def test_collect_runs_one_ncu_over_the_profile_child_and_parses_its_csv(tmp_path):
    tool = _fake_ncu(tmp_path, f"open({str(tmp_path / 'argv.txt')!r}, 'w').write(repr(sys.argv))\n"
                               f"print(open({str(FIXTURE)!r}).read())")
    run = _collect(tmp_path, tool)
    assert run.reason == "" and run.stage_reasons == {}
    metrics, why = run.for_stage("tiled")
    assert why is None and metrics[SPR] == 4.0
    argv = eval((tmp_path / "argv.txt").read_text())
    assert argv[argv.index("--metrics") + 1] == f"{FFMA},{SPR}"
    assert argv[argv.index("-k") + 1] == "regex:^(mmNaive|mmTiled)$"
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--page") + 1] == "raw" and "--csv" in argv
    assert argv[-5:-2] == ["-m", "grader.children", "profile"]
    spec = (tmp_path / "work" / "profile_spec.json").read_text()
    assert '"n": 2048' in spec and '"seed": 7' in spec and "mmTiled" in spec


def test_collect_without_ncu_says_not_evaluated(tmp_path):
    run = _collect(tmp_path, SimpleNamespace(path=None, reason="not found"))
    assert run.reason == NCU_MISSING
    assert run.for_stage("naive") == (None, Gap(Cause.GRADER, NCU_MISSING))


@pytest.mark.parametrize("output,needle", [
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters",
     "ERR_NVGPUCTRPERM"),
    ("==ERROR== Failed to initialize the profiler", "Failed to initialize the profiler"),
    ("==ERROR== LibraryNotLoaded: could not load libnvperf", "LibraryNotLoaded"),
])
def test_counter_permission_errors_are_not_the_students_fault(tmp_path, output, needle):
    run = _collect(tmp_path, _fake_ncu(tmp_path, f"print({output!r}); sys.exit(1)"))
    assert run.reason.startswith("not evaluated: ncu cannot read the GPU's performance counters here (")
    assert needle in run.reason


def test_a_hanging_ncu_times_out(tmp_path):
    run = _collect(tmp_path, _fake_ncu(tmp_path, "time.sleep(30)"), timeout_s=1.0)
    assert run.reason == "not evaluated: the ncu run did not finish within 1 s"


def test_a_kernel_that_crashed_in_the_profile_child_is_not_profiled(tmp_path):
    lines = FIXTURE.read_text().splitlines()
    keep = [ln for ln in lines if "mmTiled" not in ln and not ln.startswith('{"failures"')]
    keep.insert(0, '{"failures": {"tiled": "CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS"}}')
    data = tmp_path / "out.csv"
    data.write_text("\n".join(keep))
    run = _collect(tmp_path, _fake_ncu(tmp_path, f"print(open({str(data)!r}).read())"))
    assert run.reason == "" and run.for_stage("naive")[0] is not None
    metrics, why = run.for_stage("tiled")
    assert metrics is None and why.cause is Cause.STUDENT
    assert why.message.startswith("not profiled: the kernel failed") and "ILLEGAL_ADDRESS" in why.message


def test_a_kernel_with_no_row_and_no_failure_is_not_evaluated(tmp_path):
    keep = [ln for ln in FIXTURE.read_text().splitlines() if "mmTiled" not in ln]
    data = tmp_path / "out.csv"
    data.write_text("\n".join(keep))
    run = _collect(tmp_path, _fake_ncu(tmp_path, f"print(open({str(data)!r}).read())"))
    assert run.for_stage("tiled") == (None, Gap(Cause.GRADER, "not evaluated: ncu reported no metrics for mmTiled"))


def test_an_unknown_metric_is_dropped_and_the_run_repeated(tmp_path):
    script = (f"args = sys.argv[sys.argv.index('--metrics') + 1]\n"
              f"if '{SPR}' in args:\n"
              f"    print('==ERROR== Failed to find metric {SPR}'); sys.exit(1)\n"
              f"print(open({str(FIXTURE)!r}).read())")
    run = _collect(tmp_path, _fake_ncu(tmp_path, script))
    assert run.reason == "" and run.dropped_metrics == [SPR]
    assert run.command[run.command.index("--metrics") + 1] == FFMA


def test_garbage_output_is_not_evaluated_with_the_error_line(tmp_path):
    run = _collect(tmp_path, _fake_ncu(tmp_path, "print('==ERROR== The application returned an error code (1)');"
                                                 "sys.exit(1)"))
    assert run.reason.startswith("not evaluated: ncu produced no metrics (exit code 1")
    assert "The application returned an error code" in run.reason


def test_collect_with_no_stages_does_nothing(tmp_path):
    run = collect([], 2048, 1, [FFMA], SimpleNamespace(path="/nonexistent"), "none", 5, tmp_path)
    assert run.proc is None and run.reason == ""


def test_a_failed_launch_is_not_profiled_even_if_ncu_has_a_row(tmp_path):
    text = FIXTURE.read_text().replace('{"failures": {}}', '{"failures": {"naive": "CUDARuntimeError: boom"}}')
    data = tmp_path / "out.csv"
    data.write_text(text)
    run = _collect(tmp_path, _fake_ncu(tmp_path, f"print(open({str(data)!r}).read())"))
    assert run.for_stage("naive") == (None, Gap(Cause.STUDENT, "not profiled: the kernel failed when it was "
                                                "launched for profiling: CUDARuntimeError: boom"))
    assert run.for_stage("tiled")[0] is not None


def test_relative_work_dirs_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tool = _fake_ncu(tmp_path, f"open('argv.txt', 'w').write(repr(sys.argv))\nprint(open({str(FIXTURE)!r}).read())")
    run = collect(STAGES, 2048, 7, [FFMA], tool, "none", 30.0, Path("rel") / "ncu")
    argv = eval((tmp_path / "rel" / "ncu" / "argv.txt").read_text())
    assert run.reason == "" and Path(argv[-2]).is_absolute() and Path(argv[-2]).is_file()  # the spec


def test_a_fake_table_printed_by_a_kernel_is_ignored():
    real = FIXTURE.read_text()
    header = next(ln for ln in real.splitlines() if ln.startswith('"ID"'))
    fake_row = ",".join(['"0"', '"1"', '"python3.12"', '"h"', '"mmTiled"'] + ['"99"'] * (header.count(",") - 4))
    forged = header + "\n" + fake_row + "\nunterminated printf"  # no newline before ncu's own table
    t = parse_raw_csv(forged + real)
    assert list(t) == KERNELS and t["mmTiled"][SPR] == 4.0
