"""grader/instructor/shifted.py: the one-stage-shifted submission used for calibration."""
import re
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.instructor.shifted import FP16_FFMA_PORT, rename_kernel, write_shifted
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
SOL = ROOT / "solutions"


def kernels_defined(text: str) -> list[str]:
    return re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(", text)


def test_rename_touches_whole_identifiers_only():
    src = ('extern "C" __constant__ int mmNaive_launch[5] = {1};\n'
           'extern "C" __global__ void mmNaive(int N) { mmNaiveHelper(); } // mmNaive')
    out = rename_kernel(src, "mmNaive", "mmCoalesced")
    assert "mmCoalesced_launch[5]" in out and "void mmCoalesced(int N)" in out
    assert "mmNaiveHelper" in out and out.endswith("// mmCoalesced")


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    dest = tmp_path_factory.mktemp("shifted") / "sub"
    return dest, write_shifted(SOL, RUBRIC, dest)


def test_each_stage_holds_its_predecessors_kernel_under_its_own_name(shifted):
    dest, what = shifted
    stages = list(RUBRIC.stages)
    assert (dest / stages[0].file).read_text() == (SOL / stages[0].file).read_text()
    for prev, st in zip(stages, stages[1:]):
        text = (dest / st.file).read_text()
        assert kernels_defined(text) == [st.kernel], st.id
        assert f"{st.kernel}_launch[5]" in text
        if prev.inputs == st.inputs:
            assert not re.search(rf"\b{prev.kernel}\b", text.split("\n", 1)[1]), st.id
            body = (SOL / prev.file).read_text().replace(prev.kernel, st.kernel)
            assert text.endswith(body), st.id
            assert what[st.id] == f"stage {prev.number}'s kernel {prev.kernel}, renamed {st.kernel}"


def test_the_fp16_stage_gets_the_ffma_port(shifted):
    dest, what = shifted
    wmma = RUBRIC.stage("wmma")
    text = (dest / wmma.file).read_text()
    assert text == FP16_FFMA_PORT.replace("@KERNEL@", "mmWMMA")
    assert "const half* __restrict__ A" in text and "fmaf" in text and "wmma::" not in text
    assert "ported to fp16 inputs" in what["wmma"]


def test_other_files_and_a_manifest_are_there(shifted):
    dest, what = shifted
    assert (dest / "occupancy" / "occ.cu").read_text() == (SOL / "occupancy" / "occ.cu").read_text()
    manifest = (dest / "SHIFTED.md").read_text()
    assert all(f"`{s.file}`" in manifest for s in RUBRIC.stages) and "renamed mmTiled" in manifest


def test_reference_mode_keeps_the_fp16_reference(tmp_path):
    what = write_shifted(SOL, RUBRIC, tmp_path / "sub", mismatched="reference")
    assert (tmp_path / "sub" / "gemm/wmma.cu").read_text() == (SOL / "gemm/wmma.cu").read_text()
    assert "other input types" in what["wmma"]


def test_rewriting_an_existing_destination_replaces_it(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "stale.txt").write_text("old")
    write_shifted(SOL, RUBRIC, tmp_path / "sub")
    assert not (tmp_path / "sub" / "stale.txt").exists()


@pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="needs nvcc")
def test_every_shifted_file_compiles_with_its_launch_shape(shifted, tmp_path):
    from grader.compile.stage import compile_stage
    from grader.compile.student import student_user
    from grader.sandbox.fence import Fence

    def compiled(stage, submission, work):
        """The stage compiled as a grading compiles it (fenced: the session's compile reuse serves the
        solutions' compiles, and the calibration's gradings of the same shifted files, to each other)."""
        return compile_stage(stage, submission, work, nvcc, ["-arch=sm_90a"], RUBRIC, [512, 1280, 4096],
                             user=student_user(), fence=Fence(scratch=work / "build"))

    dest, _ = shifted
    nvcc = toolchain.find_nvcc()
    stages = list(RUBRIC.stages)
    for prev, st in zip(stages, stages[1:]):
        c = compiled(st, dest, tmp_path / st.id)
        assert c.ok, c.problem
        assert c.kernel.spills == 0, st.id
        if prev.inputs == st.inputs:
            ref = compiled(prev, SOL, tmp_path / f"ref_{prev.id}")
            assert c.launch == ref.launch, st.id
        elif st.inputs == "bf16":  # the WMMA algorithm in the Hopper contract (grader/instructor/bf16_wmma_port.cu)
            assert c.launch.block == (128, 1) and c.launch.tile == (128, 128) and c.boxes is not None
        else:
            assert c.launch.block == (256, 1) and c.launch.tile == (128, 128)
