"""Reading the launch array from a real cubin (no GPU)."""
from pathlib import Path

import pytest

from grader.compile.cubin import CubinFormatError, read_int_array, symbol_bytes

CUBIN = Path(__file__).parent / "fixtures" / "multi_sm90a.cubin"


def test_reads_initialised_constant_array():
    # tests/fixtures/ptxas_multi_source.cu declares mmA_launch = {256, 1, 128, 128, 0}
    assert read_int_array(CUBIN.read_bytes(), "mmA_launch") == [256, 1, 128, 128, 0]


def test_missing_symbol_is_none():
    assert read_int_array(CUBIN.read_bytes(), "mmNope_launch") is None
    assert symbol_bytes(CUBIN.read_bytes(), "") is None  # the null symbol: in no section


def test_not_an_elf_file():
    with pytest.raises(CubinFormatError):
        read_int_array(b"#include <stdio.h>\n" * 10, "x")
