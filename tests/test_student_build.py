"""grader.compile.student / includes / locate: the one guarded compile of a student's source.

Every way of spelling an #include that reaches outside the submission is refused, by the
first-pass text check where it can tell and by nvcc's own dependency listing in every case,
and neither the refusal nor any recorded compiler output holds a byte of the file it reached.
These run real nvcc (skipped without one).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from grader.compile import includes, locate
from grader.compile.student import CompileStatus, Scratch, compile_student, prepare_scratch
from grader.compile.toolchain import find_nvcc
from grader.sandbox import guard as sandbox
from grader.sandbox.fence import Fence

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(not NVCC.ok, reason=f"nvcc not usable: {NVCC.reason or NVCC.problems}")
KERNEL = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'
FLAGS = ["-cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v"]


@pytest.fixture(params=["quiet", "noisy"])
def secret(request, tmp_path: Path) -> tuple[Path, str]:
    """A file outside every submission whose text is a unique marker. "quiet": it preprocesses
    cleanly (the dependency listing names it; a compile would quote it in its error). "noisy": its
    apostrophe and bad #if make the preprocessor itself complain inside it, quoting the line."""
    marker = f"MARKER_{uuid.uuid4().hex}"
    path = tmp_path / "outside" / "secret.h"
    path.parent.mkdir()
    path.write_text(f"it's {marker}\n#if\n" if request.param == "noisy" else f"{marker}\n")
    return path, marker


def _cases(secret: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (the compiled file's text, other files beside it)."""
    s = str(secret)
    return {
        "comment_before_hash": (f'/* a note */ #include "{s}"\n' + KERNEL, {}),
        "line_splice": (f'#inc\\\nlude "{s}"\n' + KERNEL, {}),
        "digraph": (f'%:include "{s}"\n' + KERNEL, {}),
        "import": (f'#import "{s}"\n' + KERNEL, {}),
        "header_beside": ('#include "helper.h"\n' + KERNEL, {"helper.h": f'#include "{s}"\n'}),
        "header_beside_etc_hostname": ('#include "helper.h"\n' + KERNEL, {"helper.h": '#include "/etc/hostname"\n'}),
        "absolute": (f'#include "{s}"\n' + KERNEL, {}),
        "dotdot": ('#include "../../outside/secret.h"\n' + KERNEL, {}),
        "computed": (f'#define WHERE "{s}"\n#include WHERE\n' + KERNEL, {}),
        "device_pass_only": (f'#ifdef __CUDA_ARCH__\n#include "{s}"\n#endif\n' + KERNEL, {}),
    }


def _submission(tmp_path: Path, text: str, beside: dict[str, str]) -> Path:
    gemm = tmp_path / "sub" / "gemm"
    gemm.mkdir(parents=True)
    for name, body in beside.items():
        (gemm / name).write_text(body)
    (gemm / "k.cu").write_text(text)
    return gemm / "k.cu"


def _hand_filled(tmp_path: Path, text: str, beside: dict[str, str]) -> Path:
    """A build folder filled by hand (no first pass): k.cu and the files beside it."""
    folder = tmp_path / "work" / "build"
    folder.mkdir(parents=True)
    for name, body in {**beside, "k.cu": text}.items():
        (folder / name).write_text(body)
    return folder


def _compile(scratch: Scratch, flags=FLAGS):
    return compile_student(NVCC, scratch, "k.cubin", flags, timeout_s=120, output_limit=64_000)


def _assert_refused_without_leak(record, marker: str, *, names: str | None = None) -> None:
    assert record.status is CompileStatus.REFUSED, (record.status, record.problem)
    assert marker not in record.problem
    if record.proc is not None:
        assert marker not in record.proc.stdout + record.proc.stderr
    if names:
        assert names in record.problem, record.problem


@needs_nvcc
@pytest.mark.parametrize("case", list(_cases(Path("/x"))))
def test_every_spelling_is_refused_end_to_end(tmp_path, secret, case):
    path, marker = secret
    text, beside = _cases(path)[case]
    src = _submission(tmp_path, text, beside)
    scratch, problem = prepare_scratch(src, tmp_path / "work" / "build", "gemm/k.cu")
    if scratch is None:  # the first pass refused it: a clear message naming the file and line
        assert "is not allowed" in problem and marker not in problem
        assert problem.startswith(("gemm/k.cu:", "gemm/helper.h:1:")), problem
        return
    _assert_refused_without_leak(_compile(scratch), marker)


@needs_nvcc
@pytest.mark.parametrize("case", list(_cases(Path("/x"))))
def test_the_preprocessor_check_alone_refuses_every_spelling(tmp_path, secret, case):
    """Without the first pass (a build folder filled by hand): nvcc -M is what refuses."""
    path, marker = secret
    folder = _hand_filled(tmp_path, *_cases(path)[case])
    record = _compile(Scratch(folder, "k.cu", "gemm/k.cu"))
    target = "/etc/hostname" if "etc_hostname" in case else str(path)
    _assert_refused_without_leak(record, marker, names=target)
    assert "gemm/k.cu: the compile would read" in record.problem
    assert not (folder / "k.cubin").exists()


@needs_nvcc
@pytest.mark.parametrize("case", list(_cases(Path("/x"))))
def test_inside_bwrap_the_compile_itself_refuses_every_spelling(tmp_path, secret, case):
    """Inside bwrap there is no -M run first: the compile's own -MD listing, or its diagnostics when it
    fails, refuse it and withhold its output. The secret is shown read-only inside the fence (as the
    system's own files are), so the compile really reads it."""
    path, marker = secret
    folder = _hand_filled(tmp_path, *_cases(path)[case])
    fence = Fence(scratch=folder, readonly=(path.parent,))
    if not sandbox.confines(fence):
        pytest.skip(f"no bwrap sandbox here: {sandbox.mode().describe()}")
    record = compile_student(NVCC, Scratch(folder, "k.cu", "gemm/k.cu"), "k.cubin", FLAGS, timeout_s=120,
                             output_limit=64_000, fence=fence)
    assert "deps" not in record.seconds  # no listing run first
    if "etc_hostname" in case:  # not shown inside the fence: nothing was read, the compile just fails
        assert record.status is CompileStatus.FAILED and "/etc/hostname" in record.problem
        return
    _assert_refused_without_leak(record, marker, names=str(path))
    assert record.proc is not None and record.proc.stdout == ""
    assert record.proc.stderr == "[output withheld: the compile read a file outside the submission]"


@needs_nvcc
def test_an_include_behind_a_define_of_the_build_is_checked_with_that_build_flags(tmp_path, secret):
    path, marker = secret
    src = _submission(tmp_path, f'#if REGCAP == 32\n#include "{path}"\n#endif\n' + KERNEL, {})
    scratch, problem = prepare_scratch(src, tmp_path / "work" / "build", "occupancy/k.cu")
    assert scratch is None and "is not allowed" in problem  # the literal path is caught first anyway
    folder = tmp_path / "hand"
    folder.mkdir()
    (folder / "k.cu").write_text(src.read_text())
    scratch = Scratch(folder, "k.cu", "occupancy/k.cu")
    assert _compile(scratch, [*FLAGS, "-maxrregcount=64", "-DREGCAP=64"]).ok
    _assert_refused_without_leak(_compile(scratch, [*FLAGS, "-maxrregcount=32", "-DREGCAP=32"]), marker,
                                 names=str(path))


@needs_nvcc
def test_headers_beside_the_file_and_system_headers_compile(tmp_path):
    src = _submission(tmp_path, '#include "tile.h"\n#include <cuda_fp16.h>\n#include <cstdio>\n'
                                'extern "C" __global__ void k(float* x) { x[0] = TILE; }\n',
                      {"tile.h": "#pragma once\n#define TILE 32\n", "notes.txt": "not a header"})
    (src.parent / "odd name.h").write_text("// not copied: not a plain name\n")
    scratch, problem = prepare_scratch(src, tmp_path / "work" / "build", "gemm/k.cu")
    assert scratch is not None, problem
    assert sorted(p.name for p in scratch.folder.iterdir()) == ["k.cu", "notes.txt", "tile.h"]
    assert any("odd name.h" in s for s in scratch.skipped)
    record = _compile(scratch)
    assert record.ok, record.problem
    assert record.output == scratch.folder / "k.cubin" and record.output.read_bytes()[:4] == b"\x7fELF"
    assert "tile.h" in record.dependencies
    assert "Compiling entry function 'k'" in record.report


@needs_nvcc
def test_a_compile_error_in_the_students_own_file_is_shown(tmp_path):
    src = _submission(tmp_path, 'extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n', {})
    scratch, _ = prepare_scratch(src, tmp_path / "work" / "build", "gemm/k.cu")
    record = _compile(scratch)
    assert record.status is CompileStatus.FAILED
    assert record.problem.startswith("nvcc failed (exit code 1)") and "undefined_name" in record.problem


@needs_nvcc
def test_a_missing_header_fails_with_the_preprocessors_message(tmp_path):
    src = _submission(tmp_path, '#include "nowhere.h"\n' + KERNEL, {})
    scratch, _ = prepare_scratch(src, tmp_path / "work" / "build", "gemm/k.cu")
    record = _compile(scratch)
    assert record.status is CompileStatus.FAILED and "nowhere.h: No such file" in record.problem


# --------------------------------------------------------------------------- pure parts


def test_first_pass_names_the_line_after_splices_and_comments():
    src = b'#define M(a) \\\n  (a)\n/* x\n y */\n%:include "/etc/passwd"\n'
    assert includes.literal_problem(src, "gemm/k.cu").startswith('gemm/k.cu:5: `#include "/etc/passwd"`')
    assert includes.literal_problem(b'const char* s = "#include \\"/etc/x\\"";\n', "k.cu") == ""
    assert includes.literal_problem(b'#include <cuda_runtime.h>\n#include "mine.h"\n', "k.cu") == ""
    assert "literal name" in includes.literal_problem(b"#include NAME\n", "k.cu")


def test_make_dependency_lists_are_parsed_with_escapes():
    text = "k.o : k.cu \\\n    /usr/include/stdio.h \\\n    /tmp/a\\ b/x.h \\\n    tile.h\n"
    assert includes.parse_make_deps(text) == ["k.cu", "/usr/include/stdio.h", "/tmp/a b/x.h", "tile.h"]


def test_outside_dependencies_resolve_links_and_refuse_process_paths(tmp_path):
    build, system = tmp_path / "build", tmp_path / "include"
    build.mkdir()
    system.mkdir()
    (system / "ok.h").write_text("")
    os.symlink("/etc/hostname", system / "sneaky.h")
    deps = ["k.cu", str(system / "ok.h"), str(system / "sneaky.h"), "/proc/self/fd/3", f"{system}/../x.h"]
    bad = includes.outside_dependencies(deps, build, [str(system.resolve())])
    assert [listed for listed, _ in bad] == [str(system / "sneaky.h"), "/proc/self/fd/3", f"{system}/../x.h"]
    assert bad[0][1] == os.path.realpath("/etc/hostname")


def test_diagnostic_paths_find_gcc_and_edg_locations():
    out = ("In file included from k.cu:1:\n/tmp/outside/secret.h:1:8: warning: missing terminating ' character\n"
           "    1 | it's MARKER\n/x/y.h(3): error: expected a \";\"\n")
    assert includes.diagnostic_paths(out) == ["k.cu", "/tmp/outside/secret.h", "/x/y.h"]


def test_locate_finds_nearby_files_and_refuses_what_must_not_be_read(tmp_path):
    root = tmp_path / "a"
    (root / "wrapped" / "occupancy").mkdir(parents=True)
    (root / "wrapped" / "occupancy" / "occ.cu").write_text("x")
    (root / "occ2.cu").write_text("x")
    assert locate.locate(root, "occupancy/occ.cu").problem is locate.Problem.MISSING
    assert locate.locate(root, "occupancy/occ2.cu", nearby=True).path == root / "occ2.cu"
    (root / "wrapped" / "occ.cu").write_text("y")
    assert locate.locate(root, "occupancy/occ.cu", nearby=True).path == root / "wrapped" / "occ.cu"
    os.symlink("/etc/hostname", root / "out.cu")
    got = locate.locate(root, "out.cu")
    assert got.problem is locate.Problem.LINK_OUTSIDE and "outside the submission" in got.message
    (root / "empty.cu").write_text("")
    assert locate.locate(root, "empty.cu").message == "empty.cu is empty"
    (root / "big.cu").write_text("x" * 11)
    assert locate.locate(root, "big.cu", limit=10).problem is locate.Problem.TOO_LARGE


def test_submission_root_steps_into_one_wrapping_folder(tmp_path):
    (tmp_path / "my-project" / "gemm").mkdir(parents=True)
    (tmp_path / "my-project" / "gemm" / "naive.cu").write_text("x")
    (tmp_path / "__MACOSX").mkdir()
    root, note = locate.submission_root(tmp_path, ["gemm/naive.cu"])
    assert root == tmp_path / "my-project" and "one folder down" in note
    assert locate.submission_root(root, ["gemm/naive.cu"]) == (root, "")


def test_only_files_a_build_reads_are_judged(tmp_path):
    """A stray file with a refused #include fails nothing but itself: it is left out with a note; a
    header the source reaches (also as "./name") is still checked."""
    from grader.compile.student import prepare_scratch

    src = tmp_path / "gemm"
    src.mkdir()
    (src / "naive.cu").write_text('#include "./helpers.h"\nint x;\n')
    (src / "helpers.h").write_text("int y;\n")
    (src / "scratch_test.cu").write_text('#include "../x"\n')
    scratch, problem = prepare_scratch(src / "naive.cu", tmp_path / "build", "gemm/naive.cu")
    assert scratch is not None and problem == ""
    assert (scratch.folder / "helpers.h").is_file() and not (scratch.folder / "scratch_test.cu").exists()
    assert len(scratch.unread) == 1 and "scratch_test.cu` is read by no build" in scratch.unread[0]
    (src / "helpers.h").write_text('#include "../x"\n')
    scratch, problem = prepare_scratch(src / "naive.cu", tmp_path / "build", "gemm/naive.cu")
    assert scratch is None and problem.startswith("gemm/helpers.h:1:")
