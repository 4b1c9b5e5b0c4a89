"""Each kernel's resources read from the cubin and its SASS, never from the compiler's printed report.

The cubins in tests/fixtures/cubin/ were built here by nvcc 13.0 for sm_90a with the grader's flags
(the solutions, occ.cu at -maxrregcount=32, and resources_probe.cu); beside them, what ptxas -v printed
for the same builds. The cubin must give ptxas' numbers on every honest build, and nothing a source
prints can change them.
"""
import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.compile.cubin import CubinFormatError, kernel_resources, static_global_bytes
from grader.compile.ptxas import entry_names, parse_ptxas
from grader.compile.resources import add_spills, cubin_kernels
from grader.compile.sass import SassCounter, dump_sass
from grader.evidence.tools import Tool

FIX = Path(__file__).parent / "fixtures"
CUBINS = FIX / "cubin"
# (stage, kernel, registers, static shared bytes) of the solutions, sm_90a, nvcc 13.0
SOLUTIONS = [("naive", "mmNaive", 32, 0), ("coalesced", "mmCoalesced", 32, 0), ("tiled", "mmTiled", 32, 8192),
             ("blocktiling_1d", "mm1DBlocktiling", 53, 12544), ("blocktiling_2d", "mm2DBlocktiling", 128, 16640),
             ("wmma", "mmWMMA", 238, 0), ("hopper", "mmHopper", 168, 0)]


def _cubin(name: str) -> bytes:
    return (CUBINS / f"nvcc13.0_sm90a_{name}.cubin").read_bytes()


@pytest.mark.parametrize("stage,kernel,registers,smem", SOLUTIONS)
def test_solution_resources_come_from_the_cubin(stage, kernel, registers, smem):
    found = kernel_resources(_cubin(f"solution_{stage}"))
    assert list(found) == [kernel]
    r = found[kernel]
    assert (r.registers, r.shared_bytes, r.stack_frame) == (registers, smem, 0)
    assert static_global_bytes(_cubin(f"solution_{stage}")) == 0


def _ptxas(name: str) -> dict:
    return parse_ptxas((CUBINS / f"ptxas_nvcc13.0_sm90a_{name}.txt").read_text())


@pytest.mark.parametrize("cubin,report", [(f"solution_{s}", "solutions") for s, *_ in SOLUTIONS]
                         + [("solution_occ_r32", "solution_occ_r32"), ("resources_probe", "resources_probe")])
def test_the_cubin_agrees_with_ptxas_on_every_honest_build(cubin, report):
    printed = _ptxas(report)
    for name, r in kernel_resources(_cubin(cubin)).items():
        p = printed[name]
        assert (r.registers, r.shared_bytes, r.stack_frame, r.barriers) == (
            p.registers, p.shared_bytes, p.stack_frame, p.barriers), name


def test_static_device_memory_is_the_gmem_ptxas_prints():
    # resources_probe.cu: __device__ float big[1 << 20] and an initialised float[4]
    text = (CUBINS / "ptxas_nvcc13.0_sm90a_resources_probe.txt").read_text()
    assert "4194320 bytes gmem" in text
    assert static_global_bytes(_cubin("resources_probe")) == 4 * (1 << 20) + 16


def test_spills_are_the_local_memory_widths_of_the_sass():
    """occ.cu's heavy at -maxrregcount=32: ptxas printed 1140 B spill stores and loads; the SASS's
    STL/LDL (283 four-byte and one eight-byte each) give the same."""
    kernels = cubin_kernels(_cubin("solution_occ_r32"))
    heavy = kernels["heavy"]
    assert heavy.stack_frame == 568 and not heavy.spills_read
    assert kernels["work"].spills_read and not kernels["work"].spills  # no stack frame: nothing to spill
    counter = SassCounter()
    with gzip.open(FIX / "sass" / "cuobjdump13.2_sm90a_solution_occ_r32_heavy.txt.gz", "rb") as f:
        while chunk := f.read(4093):  # chunks that split lines anywhere
            counter.feed(chunk)
    counter.close()
    add_spills(heavy, {f: (s, ld) for f, (s, ld) in counter.local_bytes.items()})
    printed = _ptxas("solution_occ_r32")["heavy"]
    assert heavy.spills_read and (heavy.spill_stores, heavy.spill_loads) == (printed.spill_stores, 1140)
    assert printed.spill_loads == 1140


def test_the_counter_reads_a_listing_in_any_chunks_and_refuses_one_too_large():
    text = (FIX / "sass" / "cuobjdump13.0_sm90a_solution_wmma.txt").read_bytes()
    whole = SassCounter()
    whole.feed(text)
    bytewise = SassCounter()
    for i in range(0, len(text), 7):
        bytewise.feed(text[i:i + 7])
    assert whole.close() == bytewise.close() and whole.functions["mmWMMA"]["HMMA"] > 0
    small = SassCounter(max_bytes=len(text) - 1)
    small.feed(text)
    small.close()
    assert small.too_large


def _fake_cuobjdump(tmp_path: Path, body: str) -> Tool:
    exe = tmp_path / "cuobjdump"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return Tool(name="cuobjdump", path=str(exe))


def test_a_listing_over_the_bound_is_not_evaluated_never_judged(tmp_path, monkeypatch):
    """Before: the listing was kept as head and tail (8 MB) and the rest judged as if complete."""
    monkeypatch.setattr("grader.compile.sass.MAX_LISTING_BYTES", 200_000)
    line = "        /*0000*/                   FFMA R1, R2, R3, R4 ;\n"
    tool = _fake_cuobjdump(tmp_path, "echo '\t\tFunction : mmTiled'\n"
                           f"i=0; while [ $i -lt 5000 ]; do printf '{line}'; i=$((i+1)); done\n"
                           "echo '        /*0010*/                   HMMA.16816.F32 R0, R4, R8, R0 ;'\n")
    result = dump_sass("x.cubin", tool)
    assert not result.available and result.reason.startswith("listing too large")
    monkeypatch.setattr("grader.compile.sass.MAX_LISTING_BYTES", 10_000_000)
    result = dump_sass("x.cubin", tool)  # the same listing under the bound: all of it is counted
    assert result.opcodes["mmTiled"]["FFMA"] == 5000 and result.opcodes["mmTiled"]["HMMA"] == 1


def test_not_a_cubin():
    with pytest.raises(CubinFormatError):
        kernel_resources(b"ptxas info    : Used 128 registers\n" * 4)


nvcc = toolchain.find_nvcc()


@pytest.mark.skipif(nvcc.path is None or shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_a_forged_report_changes_nothing_read_from_the_cubin(tmp_path):
    """#pragma message prints lines identical to ptxas -v's on the same stderr: the parser of that text
    believes them, the cubin does not."""
    src = tmp_path / "k.cu"
    src.write_text('#pragma message("\\nptxas info    : Compiling entry function \'mmTiled\' for \'sm_90a\'\\n'
                   'ptxas info    : Function properties for mmTiled\\n'
                   '    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\\n'
                   'ptxas info    : Used 128 registers, used 1 barriers, 33792 bytes smem")\n'
                   'extern "C" __global__ void mmTiled(float* c) { c[threadIdx.x] += 1.0f; }\n')
    out = tmp_path / "k.cubin"
    proc = subprocess.run([str(nvcc.path), "-cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v", "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = proc.stderr + proc.stdout
    assert "ptxas info    : Used 128 registers, used 1 barriers, 33792 bytes smem" in text  # forged, as printed
    assert entry_names(text).count("mmTiled") == 2  # the forged report and the real one look alike
    real = kernel_resources(out.read_bytes())["mmTiled"]
    assert real.registers < 128 and real.shared_bytes == 0


def test_a_line_too_long_to_hold_ends_the_count():
    """A function name longer than any instruction line could hide which function the instructions
    after it belong to: the listing is then not judged."""
    counter = SassCounter()
    counter.feed(b"\t\tFunction : " + b"x" * 70_000)
    counter.feed(b"\n        /*0000*/                   FFMA R1, R2, R3, R4 ;\n")
    counter.close()
    assert counter.too_large.startswith("a line of the SASS listing")
