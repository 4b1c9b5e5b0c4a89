"""The textbook population (tests/submissions/textbook/) without a GPU.

Each folder holds kernels written as the handout teaches each stage; the rubric's criteria are
calibrated against them on the H200. Here, on any machine with nvcc: every item the grader judges
from the compiled code (compile, SASS, spills) passes for every stage file a folder holds. With a
host C++ compiler, the FP32 and WMMA kernels also run on the CPU (tests/fixtures/cuda_emulator) and
must compute C = A * B, which checks their index arithmetic before any GPU sees them.
"""
import shutil
import subprocess

import pytest

from grader.rubric.load import load_rubric
from tests.test_cli_static import ROOT, _by_number, needs_nvcc, run_cli

TEXTBOOK = ROOT / "tests" / "submissions" / "textbook"
EMULATOR = ROOT / "tests" / "fixtures" / "cuda_emulator"
VARIANTS = ("course", "vectorized", "warptiling")
STATIC_KINDS = ("compiles", "sass", "no_spills")  # the item kinds graded from the compiled code alone
EMULATED_INPUTS = {"fp32": "float", "fp16": "half"}  # stage inputs -> the emulator's element type
RUBRIC = load_rubric(ROOT / "rubric.yaml")


def stages_of(variant: str):
    """The rubric's stages whose file the variant holds (a variant holds only the stages it changes)."""
    return [st for st in RUBRIC.stages if (TEXTBOOK / variant / st.file).is_file()]


def test_course_holds_every_stage_and_variants_hold_theirs():
    assert [st.id for st in stages_of("course")] == [st.id for st in RUBRIC.stages]
    assert [st.id for st in stages_of("vectorized")] == ["blocktiling_2d", "wmma"]
    assert [st.id for st in stages_of("warptiling")] == ["blocktiling_2d"]


@needs_nvcc
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_static_item_passes(variant, tmp_path):
    stages = stages_of(variant)
    proc, res = run_cli(TEXTBOOK / variant, "--no-gpu", "--stages", ",".join(st.id for st in stages), out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tests = _by_number(res)
    for st in stages:
        static = [item for item in st.items if item.kind in STATIC_KINDS]
        assert any(item.kind == "sass" for item in static), st.id  # every stage has its instruction check
        for item in static:
            t = tests[f"{st.number}.{item.id}"]
            assert t["status"] == "passed", f"{variant} {st.number}.{item.id}: {t['output']}"
    # The GPU items are there and say why they were not judged: nothing passed without a GPU.
    assert tests[f"{stages[0].number}.correct"]["extra_data"]["status"] == "not_evaluated"


EMULATED = [(variant, st) for variant in VARIANTS for st in stages_of(variant) if st.inputs in EMULATED_INPUTS]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("variant, stage", EMULATED, ids=[f"{v}-{st.id}" for v, st in EMULATED])
def test_kernel_computes_the_product_on_the_cpu(variant, stage, tmp_path):
    exe = tmp_path / "kernel"
    build = subprocess.run(
        ["g++", "-std=c++20", "-O1", "-w", f"-I{EMULATOR / 'include'}", f"-I{EMULATOR}",
         f'-DKERNEL_FILE="{TEXTBOOK / variant / stage.file}"', f"-DKERNEL={stage.kernel}",
         f"-DELEM={EMULATED_INPUTS[stage.inputs]}", str(EMULATOR / "driver.cpp"), "-o", str(exe)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    # 256 is the smallest size the grader uses (racecheck's); it already spans several blocks of every tile.
    run = subprocess.run([str(exe), "256"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok 256", run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_emulator_catches_a_missing_barrier(tmp_path):
    """The CPU run is a real check: the tiled kernel without its second __syncthreads is wrong there."""
    source = (TEXTBOOK / "course" / "gemm" / "tiled.cu").read_text()
    cut = source.rindex("__syncthreads();")
    broken = tmp_path / "tiled.cu"
    broken.write_text(source[:cut] + source[cut + len("__syncthreads();"):])
    exe = tmp_path / "kernel"
    subprocess.run(["g++", "-std=c++20", "-O1", "-w", f"-I{EMULATOR / 'include'}", f"-I{EMULATOR}",
                    f'-DKERNEL_FILE="{broken}"', "-DKERNEL=mmTiled", "-DELEM=float", str(EMULATOR / "driver.cpp"),
                    "-o", str(exe)], check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(exe), "256"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stdout.startswith("wrong at N=256: C["), run.stdout
