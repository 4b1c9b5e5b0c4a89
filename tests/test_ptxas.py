"""ptxas -v parser, on real captured compiler output (tests/fixtures)."""
from pathlib import Path

from grader.compile.ptxas import entry_names, parse_ptxas

FIX = Path(__file__).parent / "fixtures"


def test_nvcc13_report_per_kernel():
    ks = parse_ptxas((FIX / "ptxas_nvcc13.0_sm90a_multi.txt").read_text())
    assert set(ks) == {"mmA", "mmW", "heavy", "_Z11cxx_mangledPf"}
    assert ks["mmA"].registers == 12 and ks["mmA"].shared_bytes == 4096 and ks["mmA"].barriers == 1
    assert ks["mmW"].registers == 32 and ks["mmW"].arch == "sm_90a"
    assert ks["heavy"].registers == 72 and not ks["heavy"].spills


def test_spills_under_register_cap():
    ks = parse_ptxas((FIX / "ptxas_nvcc13.0_sm90a_maxrreg32.txt").read_text())
    heavy = ks["heavy"]
    assert (heavy.registers, heavy.stack_frame, heavy.spill_stores, heavy.spill_loads) == (32, 248, 400, 280)
    assert heavy.spills
    # the "Overriding maximum register limit" notes do not become kernels
    assert set(ks) == {"mmA", "mmW", "heavy", "_Z11cxx_mangledPf"}


def test_entry_names_in_report_order():
    names = entry_names((FIX / "ptxas_nvcc13.0_sm90a_multi.txt").read_text())
    assert names == ["_Z11cxx_mangledPf", "mmW", "heavy", "mmA"]


def test_nvrtc_prefix_and_older_cmem_format():
    # NVRTC writes "ptxas ." where nvcc writes "ptxas info    :"; nvcc 12 added cmem banks.
    text = (
        "ptxas . Compiling entry function 'mm2DBlocktiling' for 'sm_90a'\n"
        "ptxas . Function properties for mm2DBlocktiling\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas . Used 120 registers, used 1 barriers, 8192 bytes smem, 380 bytes cmem[0], 8 bytes cmem[2]\n"
    )
    k = parse_ptxas(text)["mm2DBlocktiling"]
    assert (k.registers, k.shared_bytes, k.const_bytes, k.barriers) == (120, 8192, 388, 1)


def test_compile_error_output_has_no_kernels():
    assert parse_ptxas((FIX / "nvcc13.0_syntax_error.txt").read_text()) == {}


def test_a_missing_kernel_gets_the_hint_that_fits_what_was_found():
    from grader.compile.ptxas import name_hint

    mangled = name_hint("mmNaive", ["_Z7mmNaivePKfS0_Pfi"])
    assert 'declare it extern "C"' in mangled and "_Z7mmNaivePKfS0_Pfi" in mangled
    renamed = name_hint("mmTiled", ["mmTiledKernel"])  # already extern "C": only the name is off
    assert "mangled" not in renamed and "rename `mmTiledKernel` to `mmTiled`" in renamed
    assert "rename `mmTilde` to `mmTiled`" in name_hint("mmTiled", ["mmTilde"])
    assert name_hint("mmTiled", ["work", "heavy"]) == ""
    # a mangled name of another kernel that merely contains the expected one is not called mangled
    assert "mangled" not in name_hint("mmTiled", ["_Z13mmTiledKernelv"])
