"""grader.compile.toolchain: finding nvcc / cuobjdump / ncu / compute-sanitizer, and arch flags.

Fake tools are small shell scripts that print real captured ``--version`` output
(tests/fixtures/*_version_*.txt), laid out like a toolkit or like NVIDIA's pip wheels.
The last tests use this machine's real nvcc (skipped where there is none).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile import toolchain as tc

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
NVCC_VERSION = FIXTURES / "nvcc_version_13.0.txt"
CUOBJDUMP_VERSION = FIXTURES / "cuobjdump_version_13.2.txt"

NO_SYSTEM: tuple[str, ...] = ()


def make_exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_cuda_tool(path: Path, version_file: Path) -> Path:
    return make_exe(path, f'cat "{version_file}"')


def fake_toolkit(root: Path, *, cccl: bool = True, crt: bool = True, runtime: bool = True, nvvm: bool = True) -> Path:
    """A toolkit-shaped tree (also the shape of the 13.x wheels' nvidia/cu13)."""
    nvcc = fake_cuda_tool(root / "bin" / "nvcc", NVCC_VERSION)
    (root / "bin" / "nvcc.profile").write_text("TOP = $(_HERE_)/..\n")
    inc = root / "include"
    inc.mkdir(parents=True, exist_ok=True)
    if runtime:
        (inc / "cuda_runtime.h").write_text("")
    if crt:
        (inc / "crt").mkdir(exist_ok=True)
        (inc / "crt" / "host_config.h").write_text("")
    if cccl:
        (inc / "cccl" / "nv").mkdir(parents=True, exist_ok=True)
        (inc / "cccl" / "nv" / "target").write_text("")
    if nvvm:
        make_exe(root / "nvvm" / "bin" / "cicc", "exit 0")
    return nvcc


@pytest.fixture
def gcc_dir(tmp_path: Path) -> Path:
    """A PATH folder holding only a gcc, so host-compiler checks do not depend on the machine."""
    d = tmp_path / "hostbin"
    real = shutil.which("gcc")
    if real:
        d.mkdir()
        os.symlink(real, d / "gcc")
    else:
        make_exe(d / "gcc", 'case "$1" in -print-prog-name=*) echo /bin/sh;; *) echo 12.2.0;; esac')
    return d


# --------------------------------------------------------------------------- version parsing


def test_parse_nvcc_version_from_captured_output():
    assert tc.parse_cuda_tool_version(NVCC_VERSION.read_text()) == "13.0.88"


def test_parse_cuobjdump_version_from_captured_output():
    assert tc.parse_cuda_tool_version(CUOBJDUMP_VERSION.read_text()) == "13.2.86"


def test_parse_cuda_version_fallbacks():
    assert tc.parse_cuda_tool_version("Cuda compilation tools, release 12.4") == "12.4"
    assert tc.parse_cuda_tool_version("garbage") is None
    assert tc.parse_cuda_tool_version(None) is None


def test_parse_nsight_version():
    # The "Version X (build ...)" line of ncu / compute-sanitizer --version (format, not a capture).
    text = "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 36398880) (public-release)\n"
    assert tc.parse_nsight_version(text) == "2025.3.1.0"
    assert tc.parse_nsight_version("no version here") is None


# --------------------------------------------------------------------------- arch flags


@pytest.mark.parametrize(
    "cc, configured, expected",
    [
        ((9, 0), None, ["-arch=sm_90a"]),  # H100/H200: arch-specific variant
        ((9, 0), "sm_80", ["-arch=sm_90a"]),  # a visible device wins over the configuration
        ((8, 0), None, ["-arch=sm_80"]),
        ((8, 6), "sm_90a", ["-arch=sm_86"]),
        ((8, 9), None, ["-arch=sm_89"]),
        ((10, 0), None, ["-arch=sm_100"]),
        ((12, 0), None, ["-arch=sm_120"]),
        (None, "sm_90a", ["-arch=sm_90a"]),
        (None, "sm_80", ["-arch=sm_80"]),
        (None, " sm_90a ", ["-arch=sm_90a"]),
        (None, None, ["-arch=" + tc.DEFAULT_ARCH]),
    ],
)
def test_nvcc_arch_flags(cc, configured, expected):
    assert tc.nvcc_arch_flags(cc, configured) == expected


def test_default_arch_is_h200():
    assert tc.DEFAULT_ARCH == "sm_90a"


@pytest.mark.parametrize("bad", ["90a", "compute_90a", "sm90", "sm_90x", "-arch=sm_90a", ""])
def test_nvcc_arch_flags_rejects_malformed_configuration(bad):
    if bad == "":
        # empty means "not configured": the default applies
        assert tc.nvcc_arch_flags(None, bad) == ["-arch=" + tc.DEFAULT_ARCH]
        return
    with pytest.raises(ValueError, match="sm_"):
        tc.nvcc_arch_flags(None, bad)


# --------------------------------------------------------------------------- missing tools


def test_missing_tools_give_records_not_exceptions(tmp_path):
    env = {"PATH": str(tmp_path)}
    tools = [
        tc.find_nvcc(environ=env, pip_roots=[], system_roots=NO_SYSTEM),
        tc.find_cuobjdump(environ=env, pip_roots=[], system_roots=NO_SYSTEM),
        tc.find_ncu(environ=env, system_roots=NO_SYSTEM, nsight_glob=str(tmp_path / "none" / "*" / "ncu")),
        tc.find_compute_sanitizer(environ=env, system_roots=NO_SYSTEM),
    ]
    for t in tools:
        assert t.path is None and not t.found and not t.ok
        assert t.version is None
        assert t.reason, t
        assert "not found" in t.summary()
        assert t.to_json()["ok"] is False
    assert "docs/toolchain.md" in tools[0].reason
    assert "nvidia-cuda-cuobjdump" in tools[1].reason


def test_missing_tools_mean_pip_extras():
    nvcc = tc.Tool("nvcc", None, reason="x")
    cuobjdump = tc.Tool("cuobjdump", None, reason="x")
    assert tc.pip_extras_needed(nvcc, cuobjdump) == ["nvcc", "sass"]


def test_bad_override_is_reported_not_skipped(tmp_path):
    real = fake_toolkit(tmp_path / "cuda")
    env = {"GRADER_NVCC": str(tmp_path / "nope" / "nvcc"), "PATH": str(real.parent)}
    t = tc.find_nvcc(environ=env, pip_roots=[], system_roots=NO_SYSTEM)
    assert t.path is None
    assert "GRADER_NVCC" in t.reason and "not an executable" in t.reason


# --------------------------------------------------------------------------- search order


def test_override_wins(tmp_path, gcc_dir):
    a = fake_toolkit(tmp_path / "a")
    b = fake_toolkit(tmp_path / "b")
    env = {"GRADER_NVCC": str(a), "CUDA_HOME": str(tmp_path / "b"), "PATH": f"{b.parent}:{gcc_dir}"}
    t = tc.find_nvcc(environ=env, pip_roots=[], system_roots=NO_SYSTEM)
    assert t.path == str(a) and t.how == "GRADER_NVCC" and t.source == "system"
    assert t.version == "13.0.88"
    assert t.ok, t.problems


def test_cuda_home_before_path_before_system_before_pip(tmp_path, gcc_dir):
    home = fake_toolkit(tmp_path / "home")
    on_path = fake_toolkit(tmp_path / "onpath")
    system = fake_toolkit(tmp_path / "usr-local-cuda")
    pip_root = tmp_path / "site-packages" / "nvidia"
    pip_nvcc = fake_toolkit(pip_root / "cu13")
    path = f"{on_path.parent}:{gcc_dir}"
    kw = dict(pip_roots=[str(pip_root)], system_roots=[str(tmp_path / "usr-local-cuda")])

    t = tc.find_nvcc(environ={"CUDA_HOME": str(tmp_path / "home"), "PATH": path}, **kw)
    assert (t.path, t.how) == (str(home), "CUDA_HOME")
    t = tc.find_nvcc(environ={"PATH": path}, **kw)
    assert (t.path, t.how) == (str(on_path), "PATH")
    t = tc.find_nvcc(environ={"PATH": str(gcc_dir)}, **kw)
    assert t.path == str(system) and t.source == "system"
    t = tc.find_nvcc(environ={"PATH": str(gcc_dir)}, pip_roots=[str(pip_root)], system_roots=NO_SYSTEM)
    assert t.path == str(pip_nvcc) and t.source == "pip" and t.how == "pip"
    assert t.version == "13.0.88" and t.ok, t.problems
    assert t.include_dirs == []  # the merged cu13 tree needs no extra -I


def test_broken_candidate_is_skipped(tmp_path, gcc_dir):
    # Like /usr/local/bin/nvcc when the toolkit it execs is gone.
    broken = make_exe(tmp_path / "bin" / "nvcc", 'exec /nonexistent/cuda/bin/nvcc "$@"')
    pip_root = tmp_path / "nvidia"
    pip_nvcc = fake_toolkit(pip_root / "cu13")
    t = tc.find_nvcc(environ={"PATH": f"{broken.parent}:{gcc_dir}"}, pip_roots=[str(pip_root)], system_roots=NO_SYSTEM)
    assert t.path == str(pip_nvcc) and t.ok
    assert any(str(broken) in n for n in t.notes)
    # Only the broken one: it is returned, with the problem.
    t = tc.find_nvcc(environ={"PATH": f"{broken.parent}:{gcc_dir}"}, pip_roots=[], system_roots=NO_SYSTEM)
    assert t.path == str(broken) and t.version is None and not t.ok
    assert tc.pip_extras_needed(t, tc.Tool("cuobjdump", None)) == ["nvcc", "sass"]


def test_wrapper_script_is_followed_to_its_toolkit(tmp_path, gcc_dir):
    real = fake_toolkit(tmp_path / "cuda-13.0")
    wrapper = make_exe(tmp_path / "bin" / "nvcc", f'exec {real} "$@"')
    t = tc.find_nvcc(environ={"PATH": f"{wrapper.parent}:{gcc_dir}"}, pip_roots=[], system_roots=NO_SYSTEM)
    assert t.path == str(wrapper) and t.ok, t.problems
    assert any(str(tmp_path / "cuda-13.0") in n for n in t.notes)


@pytest.mark.parametrize(
    "missing, wheel",
    [
        ("cccl", "nvidia-cuda-cccl"),
        ("crt", "nvidia-cuda-crt"),
        ("runtime", "nvidia-cuda-runtime"),
        ("nvvm", "nvidia-nvvm"),
    ],
)
def test_incomplete_pip_tree_names_the_missing_wheel(tmp_path, gcc_dir, missing, wheel):
    pip_root = tmp_path / "nvidia"
    fake_toolkit(pip_root / "cu13", **{missing: False})
    t = tc.find_nvcc(environ={"PATH": str(gcc_dir)}, pip_roots=[str(pip_root)], system_roots=NO_SYSTEM)
    assert t.found and not t.ok
    assert any(wheel in p for p in t.problems), t.problems
    assert tc.pip_extras_needed(t, tc.Tool("cuobjdump", "/x", version="13.2.86")) == ["nvcc"]


def test_split_wheel_layout_borrows_sibling_includes(tmp_path, gcc_dir):
    # One wheel per component (nvidia/cuda_nvcc, nvidia/cuda_runtime, ...), as CUDA 12 wheels were.
    root = tmp_path / "nvidia"
    nvcc = fake_cuda_tool(root / "cuda_nvcc" / "bin" / "nvcc", NVCC_VERSION)
    (root / "cuda_nvcc" / "bin" / "nvcc.profile").write_text("")
    make_exe(root / "cuda_nvcc" / "nvvm" / "bin" / "cicc", "exit 0")
    (root / "cuda_nvcc" / "include" / "crt").mkdir(parents=True)
    (root / "cuda_nvcc" / "include" / "crt" / "host_config.h").write_text("")
    (root / "cuda_runtime" / "include").mkdir(parents=True)
    (root / "cuda_runtime" / "include" / "cuda_runtime.h").write_text("")
    (root / "cuda_cccl" / "include" / "nv").mkdir(parents=True)
    (root / "cuda_cccl" / "include" / "nv" / "target").write_text("")
    t = tc.find_nvcc(environ={"PATH": str(gcc_dir)}, pip_roots=[str(root)], system_roots=NO_SYSTEM)
    assert t.path == str(nvcc) and t.ok, t.problems
    assert sorted(t.include_dirs) == sorted([str(root / "cuda_runtime" / "include"), str(root / "cuda_cccl" / "include")])
    assert t.include_flags() == [f"-I{d}" for d in t.include_dirs]


def test_missing_host_compiler_is_a_clear_problem(tmp_path):
    nvcc = fake_toolkit(tmp_path / "cuda")
    t = tc.find_nvcc(environ={"PATH": str(nvcc.parent)}, pip_roots=[], system_roots=NO_SYSTEM)
    assert t.found and not t.ok and t.host_compiler is None
    assert any("host compiler" in p and "gcc" in p for p in t.problems), t.problems
    # A wheel does not fix that.
    assert tc.pip_extras_needed(t, tc.Tool("cuobjdump", "/x", version="13.2.86")) == []


def test_cuobjdump_needs_nvdisasm(tmp_path):
    pip_root = tmp_path / "nvidia"
    cob = fake_cuda_tool(pip_root / "cu13" / "bin" / "cuobjdump", CUOBJDUMP_VERSION)
    empty = tmp_path / "empty"
    empty.mkdir()
    t = tc.find_cuobjdump(environ={"PATH": str(empty)}, pip_roots=[str(pip_root)], system_roots=NO_SYSTEM)
    assert t.path == str(cob) and t.source == "pip" and t.version == "13.2.86"
    assert not t.ok and any("nvdisasm" in p for p in t.problems)
    assert tc.pip_extras_needed(tc.Tool("nvcc", "/x", version="13.0.88"), t) == ["sass"]
    make_exe(pip_root / "cu13" / "bin" / "nvdisasm", "exit 0")
    t = tc.find_cuobjdump(environ={"PATH": str(empty)}, pip_roots=[str(pip_root)], system_roots=NO_SYSTEM)
    assert t.ok and t.env == {}


def test_ncu_prefers_path_then_newest_nsight_install(tmp_path):
    ver = "echo 'Version 2025.3.1.0 (build 1)'"
    old = make_exe(tmp_path / "opt" / "2024.1.0" / "ncu", ver)
    new = make_exe(tmp_path / "opt" / "2025.3.1" / "ncu", ver)
    on_path = make_exe(tmp_path / "bin" / "ncu", ver)
    glob_ = str(tmp_path / "opt" / "*" / "ncu")
    t = tc.find_ncu(environ={"PATH": str(on_path.parent)}, system_roots=NO_SYSTEM, nsight_glob=glob_)
    assert t.path == str(on_path) and t.version == "2025.3.1.0" and t.ok
    t = tc.find_ncu(environ={"PATH": str(tmp_path / "none")}, system_roots=NO_SYSTEM, nsight_glob=glob_)
    assert t.path == str(new)
    assert old.exists()
    t = tc.find_ncu(environ={"PATH": "", "GRADER_NCU": str(old)}, system_roots=NO_SYSTEM, nsight_glob=glob_)
    assert t.path == str(old) and t.how == "GRADER_NCU"


def test_compute_sanitizer_in_cuda_home(tmp_path):
    cs = make_exe(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer", "echo 'Version 2025.3.0.0'")
    t = tc.find_compute_sanitizer(environ={"CUDA_HOME": str(tmp_path / "cuda"), "PATH": ""}, system_roots=NO_SYSTEM)
    assert t.path == str(cs) and t.version == "2025.3.0.0" and t.ok


def test_pip_nvidia_roots_are_directories():
    for r in tc.pip_nvidia_roots():
        assert os.path.isdir(r) and os.path.basename(r) == "nvidia"


# --------------------------------------------------------------------------- this machine

WMMA_SRC = r"""
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
extern "C" __global__ void mmWMMA(const half* A, const half* B, float* C, int N) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int tr = warp / (N / 16), tc = warp % (N / 16);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int k = 0; k < N; k += 16) {
    wmma::load_matrix_sync(a, A + tr * 16 * N + k, N);
    wmma::load_matrix_sync(b, B + k * N + tc * 16, N);
    wmma::mma_sync(c, a, b, c);
  }
  wmma::store_matrix_sync(C + tr * 16 * N + tc * 16, c, N, wmma::mem_row_major);
}
"""


@pytest.fixture(scope="module")
def real_nvcc() -> tc.Tool:
    t = tc.find_nvcc()
    if not t.found:
        pytest.skip(f"no nvcc on this machine: {t.reason}")
    return t


def test_finds_this_machines_nvcc(real_nvcc):
    assert real_nvcc.ok, real_nvcc.problems
    assert real_nvcc.source in ("system", "pip")
    out = subprocess.run([real_nvcc.path, "--version"], capture_output=True, text=True).stdout
    assert real_nvcc.version == tc.parse_cuda_tool_version(out)
    assert real_nvcc.version.count(".") == 2
    assert int(real_nvcc.version.split(".")[0]) >= 12
    assert real_nvcc.host_compiler


def test_compiles_wmma_to_cubin_and_dumps_sass(real_nvcc, tmp_path):
    if not real_nvcc.ok:
        pytest.fail("nvcc found but not usable: " + "; ".join(real_nvcc.problems))
    src = tmp_path / "wmma.cu"
    src.write_text(WMMA_SRC)
    cubin = tmp_path / "wmma.cubin"
    cmd = [
        real_nvcc.path, "-cubin", *tc.nvcc_arch_flags(None, "sm_90a"), "-O3", "-Xptxas", "-v",
        *real_nvcc.include_flags(), "-o", str(cubin), str(src),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **real_nvcc.env}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert "Compiling entry function 'mmWMMA' for 'sm_90a'" in p.stdout + p.stderr

    cob = tc.find_cuobjdump()
    if not cob.ok:
        pytest.skip(f"cuobjdump not usable: {cob.reason or '; '.join(cob.problems)}")
    s = subprocess.run([cob.path, "--dump-sass", str(cubin)], capture_output=True, text=True,
                       env={**os.environ, **cob.env}, timeout=120)
    assert s.returncode == 0, s.stderr
    assert "Function : mmWMMA" in s.stdout
    assert "HMMA" in s.stdout


def test_cli_runs_with_stdlib_only():
    # bootstrap.sh runs `python3 -m grader.compile.toolchain` with a bare python3 before anything is installed,
    # so neither grader/__init__.py nor toolchain.py may import a third-party package (-S: no site-packages).
    p = subprocess.run([sys.executable, "-S", "-m", "grader.compile.toolchain", "--pip-extras"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert set(p.stdout.split()) <= {"nvcc", "sass"}
    p = subprocess.run([sys.executable, str(REPO / "grader" / "compile" / "toolchain.py"), "--json", "--need", "nvcc"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1)
    assert '"nvcc"' in p.stdout


def test_ci_entry_point_and_bootstrap_are_wired():
    ci = REPO / ".ci" / "run"
    assert ci.exists() and os.access(ci, os.X_OK)
    assert "bootstrap.sh test" in ci.read_text() and "bootstrap.sh lint" in ci.read_text()  # ruff, mypy first
    for script in (ci, REPO / "grader" / "bootstrap.sh"):
        p = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
