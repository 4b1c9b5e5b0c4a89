"""The sanitizer's launcher child (``grader.children sanitize``) and its driver binding, without a GPU.

The child loads the CUDA driver through ctypes (grader/children/driver.py) and no CuPy. Here the
driver is absent (GRADER_LIBCUDA names no file), a library that is no driver, or a stand-in
libcuda.so.1 built from tests/fixtures/fake_libcuda.c that logs every call it gets, so the
child's real process shows what it would ask of NVIDIA's driver: the handles, the copies, the NaN
fill, the grid and every kernel parameter's bytes. compute-sanitizer is a stand-in script run
exactly as the tool is (it records its command line and runs the child).
"""
from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.children import RUNTIME_FILES
from grader.children.driver import LIBRARY_VAR, NOT_LOADED, Driver, DriverError, KernelArg, pack_params
from grader.children.inputs import make_inputs
from grader.children.protocol import MODES
from grader.children.sanitize import NAN_BITS, gemm_args
from grader.evidence.protocol import Kernel
from grader.gpu import sanitize
from grader.records import from_jsonable
from grader.sandbox.launch import child_command
from tests.child_helpers import launch_json

ROOT = Path(__file__).resolve().parent.parent
def _k(stage: dict) -> Kernel:
    """A stage's launch record from its JSON form."""
    return from_jsonable(Kernel, stage)


STAGE = {"id": "tiled", "kernel": "mmTiled", "inputs": "fp32",
         "launch": {"block": [32, 8], "tile": [32, 64], "smem": 0}}


# ---- the argument packing -----------------------------------------------------------------------
def test_the_gemm_contract_packs_three_pointers_and_an_int():
    a, b, c = 0x7F10_0000_0000, 0x7F10_0001_0000, 0x0000_0000_DEAD_BEEF
    args = gemm_args(a, b, c, 4096)
    assert [(x.data, x.align) for x in args] == [
        (struct.pack("<Q", a), 8), (struct.pack("<Q", b), 8), (struct.pack("<Q", c), 8), (struct.pack("<i", 4096), 4)]


def test_each_parameter_is_copied_aligned_and_pointed_at():
    tensor_map = bytes(range(128))  # a CUtensorMap: 128 opaque bytes, 64-byte aligned
    args = [KernelArg.int32(-3), KernelArg.blob(tensor_map, 64), KernelArg.pointer(2**63 + 5), KernelArg.blob(b"x", 1)]
    params = pack_params(args)
    assert len(params.array) == len(args)
    for arg, address in zip(args, params.array):
        assert address is not None and address % arg.align == 0, (arg.align, address)
        assert ctypes.string_at(address, len(arg.data)) == arg.data
    assert struct.unpack("=i", ctypes.string_at(params.array[0], 4)) == (-3,)


@pytest.mark.parametrize("data, align", [(b"", 4), (b"abcd", 3), (b"abcd", 0)])
def test_an_argument_without_bytes_or_with_a_bad_alignment_is_refused(data, align):
    with pytest.raises(ValueError):
        KernelArg(data, align)


# ---- no driver --------------------------------------------------------------------------------------
def test_the_binding_imports_anywhere_and_fails_only_when_used(tmp_path):
    code = "import grader.children.driver, grader.children.sanitize; print('imported')"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), LIBRARY_VAR: str(tmp_path / "nothing.so")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "imported", out.stderr
    with pytest.raises(DriverError) as err:
        Driver(str(tmp_path / "nothing.so"))
    assert err.value.name == NOT_LOADED and "nothing.so could not be loaded" in str(err.value)
    with pytest.raises(DriverError, match="has no cuInit: not a CUDA driver library") as err:
        Driver("libc.so.6")
    assert err.value.name == NOT_LOADED


def test_the_mode_is_registered_and_a_missing_driver_is_data_not_a_traceback(tmp_path, monkeypatch):
    assert "sanitize" in MODES and "children/sanitize.py" in RUNTIME_FILES and "children/driver.py" in RUNTIME_FILES
    assert child_command("sanitize", Path("s"), Path("r"))[1:4] == ["-m", "grader.children", "sanitize"]
    monkeypatch.setenv(LIBRARY_VAR, str(tmp_path / "no-libcuda.so.1"))
    spec = {"n": 64, "seed": 7, "stages": [{**STAGE, "cubin": str(tmp_path / "x.cubin")}, {**STAGE, "id": "other", "cubin": str(tmp_path / "y.cubin")}]}
    got, res = launch_json("sanitize", spec, tmp_path / "w", 60, 20_000)
    assert got.proc.returncode == 0 and "Traceback" not in got.proc.stderr, got.proc.stderr
    failures = res["failures"]
    assert sorted(failures) == ["other", "tiled"]
    assert failures["tiled"].startswith("the CUDA driver did not start: dlopen: LIBCUDA_NOT_LOADED")
    assert "no-libcuda.so.1 could not be loaded" in failures["tiled"]
    assert not (tmp_path / "w" / "cupy-cache").exists()


# ---- a stand-in driver (the fixture fake_libcuda: tests/conftest.py) ---------------------------------
def _fnv1a(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _calls(log: Path, name: str) -> list[list[str]]:
    return [line.split()[1:] for line in log.read_text().splitlines() if line.split()[0] == name]


def _use_fake(monkeypatch, lib: Path, log: Path, **errors: int) -> None:
    """The stand-in driver for the children started now, and for Driver() in this process: a copy
    of its own (a library is loaded once per path and process, and keeps the log it opened first)."""
    own = log.with_name("libcuda.so.1")
    shutil.copyfile(lib, own)
    monkeypatch.setenv(LIBRARY_VAR, str(own))
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.setenv("FAKE_CUDA_PARAM_SIZES", "8,8,8,4")
    for name, code in errors.items():
        monkeypatch.setenv(f"FAKE_CUDA_{name.upper()}_ERROR", str(code))


def test_the_child_launches_through_the_driver_as_the_contract_says(tmp_path, monkeypatch, fake_libcuda):
    log, cubin = tmp_path / "driver.log", tmp_path / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF")
    _use_fake(monkeypatch, fake_libcuda, log)
    n = 64
    got, res = launch_json("sanitize", {"n": n, "seed": 7, "stages": [{**STAGE, "cubin": str(cubin)}]}, tmp_path / "w", 60,
                 20_000)
    assert got.proc.ok and res == {"failures": {}, "stopped": False}, got.proc.stderr
    assert _calls(log, "cuModuleLoad") == [[str(cubin)]] and _calls(log, "cuFuncSetAttribute") == []
    assert [c[0] for c in _calls(log, "cuInit")] == ["0"] and _calls(log, "cuCtxSetCurrent") == [["7f0000000100"]]
    allocs = [(int(size), ptr) for size, ptr in _calls(log, "cuMemAlloc_v2")]
    a32, b32, c32 = (ptr for _, ptr in allocs[:3])
    assert [size for size, _ in allocs[:3]] == [n * n * 4] * 3
    hashes = [(dst, int(size), h) for dst, size, h in _calls(log, "cuMemcpyHtoD_v2")]
    host_a, host_b = make_inputs(n, 7, "fp32")
    assert hashes[:2] == [(a32, n * n * 4, _fnv1a(host_a.tobytes())), (b32, n * n * 4, _fnv1a(host_b.tobytes()))]
    assert _calls(log, "cuMemsetD32_v2")[0] == [c32, f"{NAN_BITS:x}", str(n * n)]
    launch_line = _calls(log, "cuLaunchKernel")[0]
    # grid (N / BN, N / BM), block (x, y), no dynamic shared memory, the default stream, no extra
    assert launch_line[:10] == ["7f0000000300", "1", "2", "1", "32", "8", "1", "0", "0", "0"]
    assert launch_line[10:] == [struct.pack("<Q", int(a32, 16)).hex(), struct.pack("<Q", int(b32, 16)).hex(),
                                struct.pack("<Q", int(c32, 16)).hex(), struct.pack("<i", n).hex()]
    assert _calls(log, "cuCtxSynchronize") == [[]] and _calls(log, "cuMemFree_v2") == [[c32]]


def test_the_fp16_stage_gets_half_inputs_and_a_raised_shared_memory_limit(tmp_path, monkeypatch, fake_libcuda):
    log, cubin = tmp_path / "driver.log", tmp_path / "wmma.cubin"
    cubin.write_bytes(b"\x7fELF")
    _use_fake(monkeypatch, fake_libcuda, log)
    n, big = 64, 100 * 1024
    stage = {**STAGE, "id": "wmma", "kernel": "mmWMMA", "inputs": "fp16", "cubin": str(cubin),
             "launch": {"block": [128, 1], "tile": [64, 32], "smem": big}}
    got, res = launch_json("sanitize", {"n": n, "seed": 9, "stages": [stage]}, tmp_path / "w", 60, 20_000)
    assert got.proc.ok and res == {"failures": {}, "stopped": False}, got.proc.stderr
    assert _calls(log, "cuModuleLoad") == [[str(cubin)]] and _calls(log, "cuModuleGetFunction")[0][1] == "mmWMMA"
    assert _calls(log, "cuFuncSetAttribute") == [["7f0000000300", "8", str(big)]]
    host_a, host_b = make_inputs(n, 9, "fp16")
    assert [(int(s), h) for _, s, h in _calls(log, "cuMemcpyHtoD_v2")] == [
        (n * n * 2, _fnv1a(host_a.tobytes())), (n * n * 2, _fnv1a(host_b.tobytes()))]
    assert _calls(log, "cuLaunchKernel")[0][1:8] == ["2", "1", "1", "128", "1", "1", str(big)]


def test_a_failed_launch_is_named_and_a_lost_context_stops_the_rest(tmp_path, monkeypatch, fake_libcuda):
    log, cubin = tmp_path / "driver.log", tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF")
    _use_fake(monkeypatch, fake_libcuda, log, sync=700)
    stages = [{**STAGE, "id": "missing_cubin", "cubin": str(tmp_path / "gone.cubin")},
              {**STAGE, "id": "missing_kernel", "kernel": "missing", "cubin": str(cubin)},
              {**STAGE, "cubin": str(cubin)}, {**STAGE, "id": "after", "cubin": str(cubin)}]
    got, res = launch_json("sanitize", {"n": 64, "seed": 7, "stages": stages}, tmp_path / "w", 60, 20_000)
    assert got.proc.returncode == 0 and "Traceback" not in got.proc.stderr, got.proc.stderr
    failures = res["failures"]
    assert failures["missing_cubin"] == "cuModuleLoad: CUDA_ERROR_FILE_NOT_FOUND (file not found)"
    assert failures["missing_kernel"] == "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (named symbol not found)"
    assert failures["tiled"] == "cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
    assert failures["after"] == ("not launched: the CUDA context was lost at stage tiled "
                                 "(CUDA_ERROR_ILLEGAL_ADDRESS)")
    assert len(_calls(log, "cuLaunchKernel")) == 1


def test_an_unknown_error_code_still_names_itself(tmp_path, monkeypatch, fake_libcuda):
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log", init=999)
    with pytest.raises(DriverError) as err:
        Driver().start()
    assert (err.value.call, err.value.name, err.value.code) == ("cuInit", "CUresult 999", 999)
    assert not err.value.context_lost


def test_the_binding_reads_back_and_frees(tmp_path, monkeypatch, fake_libcuda):
    log = tmp_path / "driver.log"
    _use_fake(monkeypatch, fake_libcuda, log)
    cuda = Driver()
    cuda.start()
    ptr = cuda.alloc(16)
    assert ptr > 2**32  # not truncated to a C int on the way back
    cuda.upload(ptr, b"0123456789abcdef")  # a read-only buffer is copied first
    assert cuda.download(ptr, 16) == bytearray(b"\xab" * 16)
    cuda.free(ptr)
    assert _calls(log, "cuMemcpyDtoH_v2") == [[f"{ptr:x}", "16"]] and _calls(log, "cuMemFree_v2") == [[f"{ptr:x}"]]


# ---- the sanitizer runner ---------------------------------------------------------------------------
STAND_IN = """#!/bin/sh
# compute-sanitizer --tool T --error-exitcode 17 --print-limit 20 [--kernel-name kns=K] CHILD...
echo "$*" >> "$PWD/argv"
case "$* " in *"--kernel-name "*) if [ -n "$REFUSE" ]; then echo "unrecognized option '--kernel-name'"; exit 1; fi;; esac
while [ "${1#--}" != "$1" ]; do shift 2; done
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
"""


def _stand_in(tmp_path: Path) -> SimpleNamespace:
    tool = tmp_path / "compute-sanitizer"
    tool.write_text(STAND_IN)
    tool.chmod(0o755)
    return SimpleNamespace(path=str(tool))


@pytest.mark.parametrize("tool", ["racecheck", "memcheck"])
def test_the_runner_wraps_the_launcher_child(tmp_path, monkeypatch, fake_libcuda, tool):
    cubin = tmp_path / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF")
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    run = sanitize.run_tool(tool, _stand_in(tmp_path), _k({**STAGE, "cubin": str(cubin)}), 64, tmp_path / "w", 60)
    argv = (tmp_path / "w" / "argv").read_text().split()
    assert argv[:8] == ["--tool", tool, "--error-exitcode", "17", "--print-limit", "20", "--kernel-name", "kns=mmTiled"]
    assert argv[8:11] == [sys.executable, "-m", "grader.children"] and argv[11] == "sanitize"
    assert run.reason == "" and run.findings == [] and run.proc.returncode == 0
    assert _calls(tmp_path / "driver.log", "cuLaunchKernel")
    assert not (tmp_path / "w" / "cupy-cache").exists()


def test_racecheck_launches_a_corner_of_the_grid_and_the_whole_grid_if_the_corner_fails(
        tmp_path, monkeypatch, fake_libcuda):
    """Sanitizer.racecheck_blocks: at most 2 x 2 blocks of the size-n grid (the whole K loop each);
    a kernel that cannot launch on that corner (a cluster shape it does not divide) is checked on the
    whole grid instead, not left without a verdict. memcheck is never cut."""
    cubin = tmp_path / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF")
    log = tmp_path / "driver.log"
    _use_fake(monkeypatch, fake_libcuda, log)
    spec = {**STAGE, "cubin": str(cubin)}  # tile 32 x 64: at N = 256 the grid is 4 x 8
    run = sanitize.run_tool("racecheck", _stand_in(tmp_path), _k(spec), 256, tmp_path / "w", 60, blocks=(2, 2))
    assert run.reason == "" and [c[1:3] for c in _calls(log, "cuLaunchKernel")] == [["2", "2"]]
    log.unlink()
    monkeypatch.setenv("FAKE_CUDA_MIN_BLOCKS", "8")
    run = sanitize.run_tool("racecheck", _stand_in(tmp_path), _k(spec), 256, tmp_path / "w2", 60, blocks=(2, 2))
    assert run.reason == "" and not run.launch_failed
    assert [c[1:3] for c in _calls(log, "cuLaunchKernel")] == [["2", "2"], ["4", "8"]]
    log.unlink()
    monkeypatch.setenv("FAKE_CUDA_MIN_BLOCKS", "64")  # fails on the whole grid too: said, once each
    run = sanitize.run_tool("racecheck", _stand_in(tmp_path), _k(spec), 256, tmp_path / "w3", 60, blocks=(2, 2))
    assert run.launch_failed and "CUDA_ERROR_INVALID_CLUSTER_SIZE" in run.reason
    assert len(_calls(log, "cuLaunchKernel")) == 2


def test_without_a_driver_the_runner_says_nothing_was_checked(tmp_path, monkeypatch):
    monkeypatch.setenv(LIBRARY_VAR, str(tmp_path / "no-libcuda.so.1"))
    spec = {**STAGE, "cubin": str(tmp_path / "x.cubin")}
    run = sanitize.run_tool("racecheck", _stand_in(tmp_path), _k(spec), 64, tmp_path / "w", 60)
    assert run.findings == [] and run.proc.returncode == 0
    # the launcher's words are quoted (they are a tool's output): shown, never rendered
    assert run.reason.startswith("not checked: the kernel's launch under racecheck failed (`"), run.reason
    assert "the CUDA driver did not start: dlopen: LIBCUDA_NOT_LOADED" in run.reason, run.reason


def test_an_older_sanitizer_without_kernel_name_is_run_again_without_it(tmp_path, monkeypatch, fake_libcuda):
    cubin = tmp_path / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF")
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    monkeypatch.setenv("REFUSE", "1")
    run = sanitize.run_tool("racecheck", _stand_in(tmp_path), _k({**STAGE, "cubin": str(cubin)}), 64, tmp_path / "w", 60)
    first, second = (tmp_path / "w" / "argv").read_text().splitlines()
    assert "--kernel-name kns=mmTiled" in first and "--kernel-name" not in second
    assert "-m grader.children sanitize" in second and run.reason == "" and run.proc.returncode == 0


def test_in_the_fence_the_child_runs_from_the_runtime_files(tmp_path, monkeypatch, fake_libcuda, bwrap_required):
    """Fenced as racecheck is (grader/gpu/racecheck.py: tool_fence): the child imports the driver binding
    from the read-only runtime folder and loads the driver library it is shown."""
    from grader.sandbox.fence import Fence
    shown = tmp_path / "shown"  # the cubin, the stand-in tool and driver: read-only in the fence
    shown.mkdir()
    (shown / "tiled.cubin").write_bytes(b"\x7fELF")
    work = tmp_path / "w"
    work.mkdir()
    _use_fake(monkeypatch, fake_libcuda, shown / "driver.log")
    monkeypatch.setenv("FAKE_CUDA_LOG", str(work / "driver.log"))  # the scratch folder: the one writable place
    fence = Fence(scratch=work, gpu=True, readonly=(shown,))
    run = sanitize.run_tool("racecheck", _stand_in(shown), _k({**STAGE, "cubin": str(shown / "tiled.cubin")}), 64, work,
                            60, fence=fence)
    assert run.reason == "" and run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert _calls(work / "driver.log", "cuLaunchKernel")
