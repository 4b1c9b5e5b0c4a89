"""grader/writeup/tables.py: the two results tables, found, complete and consistent."""
from grader.writeup.parse import tables
from grader.writeup.run import stage_names
from grader.writeup.tables import BASELINE, check_table, column_of, describe, find_tables
from tests.report_check_helpers import CFG, RUBRIC, SOLUTION, STARTER

NAMES = stage_names(RUBRIC, CFG)
BENCH_N = {st.id: st.bench.n for st in RUBRIC.stages}
CUDA, TC = CFG.tables


def _check(text):
    chosen = find_tables(tables(text), CFG.tables, NAMES)
    first = check_table(CUDA, chosen[CUDA.id], NAMES, BENCH_N, CFG.arithmetic_rel)
    second = check_table(TC, chosen[TC.id], NAMES, BENCH_N, CFG.arithmetic_rel, first.peak_gflops)
    return first, second


def test_solution_tables_are_complete_and_consistent():
    first, second = _check(SOLUTION)
    assert describe(first) == "" and describe(second) == ""
    assert first.good_rows() == 6 and second.good_rows() == 2
    assert abs(first.peak_gflops - 66_900) < 100 and abs(second.peak_gflops - 989_000) < 1000


def test_starter_tables_are_found_but_empty():
    first, second = _check(STARTER)
    assert first.table is not None and second.table is not None
    assert first.good_rows() == 0 and "row naive: every cell is empty" in describe(first)


def test_columns():
    assert [column_of(h) for h in ["N", "kernel", "ms", "GFLOP/s", "% of FP32 peak", "speedup over naive"]] == \
        ["n", "kernel", "ms", "gflops", "pct", "last"]
    assert column_of("x FP32 ceiling") == "last" and column_of("time (ms)") == "ms" and column_of("notes") is None


def test_wrong_gflops_is_named_once_with_the_value_it_should_be():
    first, _ = _check(SOLUTION.replace("| 4096 | tiled | 15.349 | 8,954 |", "| 4096 | tiled | 15.349 | 9,954 |"))
    msg = describe(first)
    assert msg == "row tiled: GFLOP/s is 9,954, but 2 N^3 / time with N = 4096 and 15.349 ms gives 8,954"
    assert first.good_rows() == 5


def test_tensor_core_table_against_the_fp32_peak_is_flagged():
    text = SOLUTION.replace("| 0.4170 | 329,590 | 33.33 |", "| 0.4170 | 329,590 | 492.7 |").replace(
        "| 0.1921 | 715,351 | 72.33 |", "| 0.1921 | 715,351 | 1069 |")
    _, second = _check(text)
    assert "about the FP32 CUDA-core peak" in describe(second)


def test_wrong_speedup_percent_and_n():
    text = (SOLUTION.replace("| 4096 | coalesced | 21.828 | 6,297 | 9.41 | 12.63 |",
                             "| 4096 | coalesced | 21.828 | 6,297 | 12.3 | 12.63 |")
            .replace("| 4096 | blocktiling_2d | 2.852 | 48,199 | 72.05 | 96.68 |",
                     "| 4096 | blocktiling_2d | 2.852 | 48,199 | 72.05 | 9.7 |")
            .replace("| 4096 | cuBLAS SGEMM |", "| 2048 | cuBLAS SGEMM |"))
    msg = describe(_check(text)[0])
    assert "row coalesced: % of peak is 12.3" in msg and "one peak per table" in msg
    assert "row blocktiling_2d: the last column is 9.7" in msg and "gives 96.7" in msg
    assert "row cuBLAS SGEMM: N is 2048; the table reports the benchmark size N = 4096" in msg


def test_missing_rows_columns_and_tables():
    text = SOLUTION.replace("| 4096 | tiled | 15.349 | 8,954 | 13.38 | 17.96 |\n", "")
    first, _ = _check(text)
    assert "row tiled: no row for tiled" in describe(first)
    text = SOLUTION.replace("| N | kernel | ms | GFLOP/s | % of FP32 peak |", "| N | kernel | time | GFLOPS | share |")
    first, _ = _check(text)
    assert "has no column for % of peak" in describe(first)
    only_one = SOLUTION[:SOLUTION.index("## Results: Tensor Core")]
    first, second = _check(only_one)
    assert describe(first) == "" and second.table is None
    assert "no table with rows for the stages wmma" in describe(second)
    assert BASELINE in second.required


def test_one_merged_table_serves_only_the_first_spec():
    heading = "\n## Results: Tensor Core ladder (FP16 Tensor Core peak 989,000 GFLOP/s)\n\n"
    header = "| N | kernel | ms | GFLOP/s | % of FP16 Tensor Core peak | x FP32 ceiling |\n|---|---|---|---|---|---|\n"
    assert heading + header in SOLUTION
    text = SOLUTION.replace(heading + header, "")
    _, second = _check(text)
    assert second.table is None


def test_tflops_written_where_gflops_is_asked_gets_a_unit_hint_not_the_fp32_one():
    text = SOLUTION.replace("| 0.4170 | 329,590 | 33.33 |", "| 0.4170 | 329.59 | 33.33 |").replace(
        "| 0.1921 | 715,351 | 72.33 |", "| 0.1921 | 715.351 | 72.33 |")
    _, second = _check(text)
    msg = describe(second)
    assert "about the FP32 CUDA-core peak" not in msg
    assert "below even the FP32 CUDA-core peak (66,9" in msg and "are the GFLOP/s cells in TFLOP/s?" in msg
    assert "row wmma: GFLOP/s is 329.6, but 2 N^3 / time with N = 4096 and 0.417 ms gives 329,590" in msg
    assert "a factor of 1000 apart" in msg and "TFLOP/s where it is GFLOP/s (then write 329,590)" in msg


def test_ms_written_as_seconds_gets_a_unit_hint():
    first, _ = _check(SOLUTION.replace("| 4096 | tiled | 15.349 | 8,954 |", "| 4096 | tiled | 0.015349 | 8,954 |"))
    msg = describe(first)
    assert msg.startswith("row tiled: GFLOP/s is 8,954, but 2 N^3 / time with N = 4096 and 0.015349 ms gives")
    assert "a time in seconds where the column is ms (then write 15.349)" in msg


def test_arithmetic_that_is_off_by_another_factor_gets_no_unit_hint():
    first, _ = _check(SOLUTION.replace("| 4096 | tiled | 15.349 | 8,954 |", "| 4096 | tiled | 15.349 | 9,954 |"))
    assert "factor of 1000" not in describe(first)
