"""grader.compile.reuse: a compile is reused only when every input is unchanged, from a folder the
student's code cannot see, and a reused compile returns the record the real one did.

Real nvcc inside bubblewrap (skipped without either). This file runs with reuse off except where a test
turns it on in a folder of its own (tests/conftest.py: NO_REUSE_FILES).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.compile import reuse
from grader.compile.student import CompileStatus, Scratch, compile_student
from grader.compile.toolchain import find_nvcc
from grader.sandbox import guard as sandbox
from grader.sandbox.fence import Fence
from grader.sandbox.guard import run_guarded

ROOT = Path(__file__).resolve().parent.parent
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(not NVCC.ok, reason=f"nvcc not usable: {NVCC.reason or NVCC.problems}")
HEADER = "#define SCALE 2.0f\n"
KERNEL = '#include "k.h"\nextern "C" __global__ void k(float* x) { x[0] = SCALE; }\n'
FLAGS = ["-cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v"]


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "reuse"
    monkeypatch.setenv(reuse.ENV_FOLDER, str(folder))
    return folder


def _build(tmp_path: Path, name: str = "build", header: str = HEADER, kernel: str = KERNEL) -> tuple[Scratch, Fence]:
    folder = tmp_path / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "k.h").write_text(header)
    (folder / "k.cu").write_text(kernel)
    fence = Fence(scratch=folder)
    if not sandbox.confines(fence):
        pytest.skip(f"no bwrap sandbox here: {sandbox.mode().describe()}")
    return Scratch(folder, "k.cu", "gemm/k.cu"), fence


def _compile(scratch: Scratch, fence: Fence, flags=FLAGS, timeout_s: float = 120):
    return compile_student(NVCC, scratch, "k.cubin", flags, timeout_s=timeout_s, output_limit=64_000, fence=fence)


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.entry")) if folder.is_dir() else []


def _same(a, b) -> None:
    assert (a.status, a.problem, a.dependencies, a.seconds) == (b.status, b.problem, b.dependencies, b.seconds)
    assert dataclasses.asdict(a.proc) == dataclasses.asdict(b.proc)
    assert (a.output is None) == (b.output is None)
    if a.output is not None:
        assert a.output.read_bytes() == b.output.read_bytes()


def _unclocked(record) -> dict:
    """A compile record without what its clock wrote (:data:`_COMPILE_CLOCK_KEYS`, ptxas's "Compile time"): its
    phases by name only, its process record less its wall time and output sizes."""
    proc = {k: _compile_time_unclocked(v) if isinstance(v, str) else v
            for k, v in dataclasses.asdict(record.proc).items() if k not in _COMPILE_CLOCK_KEYS}
    return {"status": record.status, "problem": record.problem, "dependencies": record.dependencies,
            "phases": sorted(record.seconds), "proc": proc}


def _key(folder: Path, flags=FLAGS, nvcc=NVCC, fence: Fence | None = None) -> str | None:
    cmd = [str(nvcc.path), *flags, "-o", "k.cubin", "k.cu"]
    return reuse.key(nvcc, folder, cmd, dict(os.environ), fence or Fence(scratch=folder), 64_000, None)


def test_the_key_changes_with_a_header_a_flag_the_arch_and_the_toolchain(tmp_path):
    """Unit level, no compile: every input of the compile is in the entry's name."""
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "k.h").write_text(HEADER)
    (folder / "k.cu").write_text(KERNEL)
    tool_dir = tmp_path / "cuda" / "bin"
    tool_dir.mkdir(parents=True)
    for name in ("nvcc", "ptxas"):
        (tool_dir / name).write_text("#!/bin/sh\n")
    nvcc = dataclasses.replace(NVCC, path=str(tool_dir / "nvcc"), version="13.0", env={})
    base = _key(folder, nvcc=nvcc)
    assert base is not None and base == _key(folder, nvcc=nvcc)  # the same inputs, the same name

    (folder / "k.h").write_text(HEADER.replace("2.0f", "3.0f"))
    changed_header = _key(folder, nvcc=nvcc)
    (folder / "k.h").write_text(HEADER)
    assert _key(folder, nvcc=nvcc) == base
    (folder / "notes.txt").write_text("a file the compile could read\n")
    another_file = _key(folder, nvcc=nvcc)
    (folder / "notes.txt").unlink()

    other_flag = _key(folder, flags=[*FLAGS, "-DSCALE=3"], nvcc=nvcc)
    other_arch = _key(folder, flags=[f if f != "-arch=sm_90a" else "-arch=sm_80" for f in FLAGS], nvcc=nvcc)
    other_version = _key(folder, nvcc=dataclasses.replace(nvcc, version="13.1"))
    other_host = _key(folder, nvcc=dataclasses.replace(nvcc, host_compiler_version="14.2"))
    other_limits = _key(folder, nvcc=nvcc, fence=Fence(scratch=folder, memory_bytes=1 << 30))
    os.utime(tool_dir / "ptxas", ns=(1, 1))  # a toolchain file beside nvcc replaced (same version string)
    other_ptxas = _key(folder, nvcc=nvcc)
    names = [base, changed_header, another_file, other_flag, other_arch, other_version, other_host, other_limits,
             other_ptxas]
    assert len(set(names)) == len(names), names
    (folder / "sub").mkdir()
    assert _key(folder, nvcc=nvcc) is None  # anything but plain files: not reusable


@needs_nvcc
def test_a_second_compile_is_reused_with_the_same_record_and_a_changed_header_compiles_again(tmp_path, store,
                                                                                          monkeypatch):
    scratch, fence = _build(tmp_path)
    first = _compile(scratch, fence)
    assert first.ok, first.problem
    assert len(_entries(store)) == 1
    assert any(d.endswith("k.h") for d in first.dependencies)
    assert store.stat().st_mode & 0o077 == 0  # the grader's own folder

    scratch2, fence2 = _build(tmp_path, "build2")
    second = _compile(scratch2, fence2)
    _same(first, second)  # the stored record and the output's bytes
    assert len(_entries(store)) == 1

    scratch3, fence3 = _build(tmp_path, "build3", header=HEADER.replace("2.0f", "3.0f"))
    third = _compile(scratch3, fence3)
    assert third.ok and len(_entries(store)) == 2
    assert third.output.read_bytes() != first.output.read_bytes()

    # The first compile, which found the folder empty, gave the record a compile without reuse gives: storing it
    # changed nothing but the clock's readings (the phases' seconds, ptxas's "Compile time").
    monkeypatch.delenv(reuse.ENV_FOLDER)
    scratch4, fence4 = _build(tmp_path, "build4")
    plain = _compile(scratch4, fence4)
    assert len(_entries(store)) == 2
    assert _unclocked(plain) == _unclocked(first)
    assert plain.output.read_bytes() == first.output.read_bytes()


@needs_nvcc
def test_an_entry_keeps_only_the_compiles_own_outputs_when_a_neighbour_writes_in_its_folder(tmp_path, store,
                                                                                           monkeypatch):
    # The occupancy exercise's builds share one folder and compile side by side: while this compile runs,
    # another build's half-written cubin appears beside it. Its entry must not keep that file, or a reuse
    # would write the half-written cubin over the neighbour's real one.
    import grader.compile.student as student

    real = student._compile_student

    def with_a_neighbour(nvcc, scratch, *args, **kwargs):
        record = real(nvcc, scratch, *args, **kwargs)
        (scratch.folder / "neighbour.cubin").write_bytes(b"\x7fELF half")
        return record

    monkeypatch.setattr(student, "_compile_student", with_a_neighbour)
    scratch, fence = _build(tmp_path)
    first = _compile(scratch, fence)
    assert first.ok, first.problem
    [entry] = _entries(store)
    kept = json.loads(entry.read_bytes().partition(b"\n")[2])["files"]
    assert sorted(kept) == ["k.cubin", "k.cubin.d"]

    scratch2, fence2 = _build(tmp_path, "build2")
    monkeypatch.setattr(student, "_compile_student", real)
    second = _compile(scratch2, fence2)
    _same(first, second)  # reused
    assert sorted(p.name for p in scratch2.folder.iterdir()) == ["k.cu", "k.cubin", "k.cubin.d", "k.h"]


@needs_nvcc
def test_a_corrupt_or_truncated_entry_is_a_miss_and_is_written_again(tmp_path, store):
    scratch, fence = _build(tmp_path)
    first = _compile(scratch, fence)
    (entry,) = _entries(store)
    for damage in (lambda b: b[:-7] + b"garbage", lambda b: b[: len(b) // 2], lambda b: b"\n"):
        name = entry.name.removesuffix(".entry")
        entry.write_bytes(damage(entry.read_bytes()))
        assert reuse.load(reuse.configured(), name) is None  # a miss, not an error
        assert not entry.exists()  # and removed
        again_scratch, again_fence = _build(tmp_path, "again")
        again = _compile(again_scratch, again_fence)
        assert again.ok and again.output.read_bytes() == first.output.read_bytes()
        assert _entries(store) == [entry]  # compiled for real and written again
        hit = reuse.load(reuse.configured(), name)
        assert hit is not None and hit.record["seconds"] == again.seconds
        first = again


@needs_nvcc
def test_a_changed_system_header_the_compile_read_is_a_miss(tmp_path, store, monkeypatch):
    """A header outside the build folder (an include folder nvcc is given) is hashed when stored and again
    when reused."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.h").write_text("#define SCALE 2.0f\n")
    nvcc = dataclasses.replace(NVCC, include_dirs=[*NVCC.include_dirs, str(inc)])
    kernel = '#include <scale.h>\nextern "C" __global__ void k(float* x) { x[0] = SCALE; }\n'

    def build(name):
        scratch, _ = _build(tmp_path, name, kernel=kernel)
        fence = Fence(scratch=scratch.folder, readonly=(inc,))
        return compile_student(nvcc, scratch, "k.cubin", FLAGS, timeout_s=120, output_limit=64_000, fence=fence)

    first = build("one")
    assert first.ok, first.problem
    (inc / "scale.h").write_text("#define SCALE 5.0f\n")
    second = build("two")
    assert second.ok and second.output.read_bytes() != first.output.read_bytes()


@needs_nvcc
def test_a_timed_out_compile_is_not_stored_and_a_stored_one_is_not_reused_under_a_shorter_limit(tmp_path, store):
    scratch, fence = _build(tmp_path)
    short = _compile(scratch, fence, timeout_s=0.1)
    assert short.status is CompileStatus.FAILED and short.proc is not None and short.proc.timed_out
    assert _entries(store) == []

    scratch, fence = _build(tmp_path)
    full = _compile(scratch, fence)
    assert full.ok and len(_entries(store)) == 1
    scratch, fence = _build(tmp_path)
    again = _compile(scratch, fence, timeout_s=0.1)  # the real compile would time out: so does this one
    assert again.status is CompileStatus.FAILED and again.proc.timed_out
    assert len(_entries(store)) == 1


@needs_nvcc
def test_the_students_code_cannot_see_the_folder_and_a_folder_the_fence_shows_is_never_used(tmp_path, store):
    scratch, fence = _build(tmp_path)
    assert _compile(scratch, fence).ok
    (entry,) = _entries(store)
    before = entry.read_bytes()
    # A student's program, run as the grader runs it: it tries to list, read and overwrite the entries.
    probe = (f"ls {store}; cat {entry}; echo poison > {entry}; echo poison > {store}/new.entry; "
             f"test -e {entry} && echo SEEN")
    proc = run_guarded(["/bin/sh", "-c", probe], cwd=scratch.folder, timeout_s=30, output_limit=64_000,
                       fence=Fence(scratch=scratch.folder))
    assert "SEEN" not in proc.stdout and before[:64].decode() not in proc.stdout + proc.stderr
    assert entry.read_bytes() == before and _entries(store) == [entry]

    # A store inside what the fence shows (here: its own scratch folder) turns reuse off.
    inside = tmp_path / "shown"
    inside.mkdir()
    os.environ[reuse.ENV_FOLDER] = str(inside / "reuse")  # undone by the store fixture's monkeypatch
    for _ in range(2):
        scratch2, _fence = _build(tmp_path, "shown")
        record = _compile(scratch2, Fence(scratch=inside))
        assert record.ok
    assert _entries(inside / "reuse") == []


@needs_nvcc
def test_a_graded_folder_is_the_same_with_and_without_reuse(tmp_path, static_graded):
    """solutions/ graded statically twice with reuse in a folder of its own: first with the folder empty, where every
    compile and every stage's SASS listing runs for real and is stored (a grading as without reuse: an empty
    folder changes no compile record, test_a_second_compile_is_reused_with_the_same_record_and_a_changed_header_
    compiles_again), then with every one of them reused. The reused grading's results.json and grading.json are the
    first one's, byte for byte, once the grading's own clock (its phases' seconds and end times, the folder it
    wrote to) is set aside: every compile record (return code, output, seconds, resources) is the stored one.
    Against the session's grading, the compiles' own timings (their seconds, ptxas's "Compile time") are set aside
    too: every verdict, score, message and resource is the same."""
    env = {k: v for k, v in os.environ.items() if k != reuse.ENV_FOLDER}

    def grade(name: str) -> Path:
        out = tmp_path / name
        proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "solutions"), "--no-gpu",
                               "--quiet", "--out", str(out)], cwd=ROOT, env={**env, reuse.ENV_FOLDER: str(tmp_path / "reuse")},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return out

    # The session's grading (made here if no test made it yet) shares nothing with the cold one: side by side.
    with ThreadPoolExecutor(1) as pool:
        session_graded = pool.submit(static_graded, "solutions")
        cold = grade("cold")
        entries = _entries(tmp_path / "reuse")
        listings = [e for e in entries if b'"opcodes"' in e.read_bytes()]  # the stages' SASS counts
        assert len(entries) - len(listings) >= 7 and len(listings) >= 7  # one per stage at least
        # A read entry is marked used (its modification time set); a listing dumped again would be a new file.
        planted = 1_000_000_000
        for e in listings:
            os.utime(e, (planted, planted))
        kept = {e: e.stat().st_ino for e in listings}
        warm = grade("warm")
        session = session_graded.result()
    read = [e for e in listings if e.stat().st_ino == kept[e] and e.stat().st_mtime != planted]
    assert len(read) >= 7  # the warm grading read a listing per stage and dumped none of them again
    for name in ("results.json", "grading.json"):
        assert _steady(cold, name) == _steady(warm, name), name
        compiled = {which: _steady(out, name, compiles=True) for which, out in
                    (("cold", cold), ("warm", warm), ("session", session))}
        assert compiled["cold"] == compiled["warm"] == compiled["session"], name
    assert _compile_records(cold) == _compile_records(warm) != []


# What a grading's clock writes: the seconds and end of each phase, the grading's time and CPU.
_CLOCK_KEYS = frozenset({"ended", "started", "seconds", "scratch", "cubin", "execution_time", "cpu_seconds",
                         "cpu_seconds_grader"})
# What a real compile's clock writes: its seconds, and ptxas's own "Compile time" (whose digits change the
# bytes of its output).
_COMPILE_CLOCK_KEYS = frozenset({"wall_s", "nvcc", "deps", "stderr_bytes", "stdout_bytes"})


def _compile_time_unclocked(text: str) -> str:
    return re.sub(r"Compile time = [0-9.]+ ms", "Compile time = <clock> ms", text)


def _steady(out: Path, name: str, *, compiles: bool = False) -> str:
    """``out/name`` with what a clock writes replaced by a mark or left out (the summary's time line), and
    ``out``'s own path by ``<out>`` (the session's grading was written to ``out.partial`` first:
    tests/conftest.py, static_graded)."""
    keys = _CLOCK_KEYS | (_COMPILE_CLOCK_KEYS if compiles else frozenset())

    def walk(x, key=""):
        if isinstance(x, dict):
            return {k: walk(v, k) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, key) for v in x]
        if isinstance(x, (int, float)) and not isinstance(x, bool) and key in keys:
            return "<clock>"
        if isinstance(x, str):
            # the time line, which a grading whose every step took under half a second has not (summary.py)
            x = re.sub(r"\n*Grading time: [^\n]*", "", x.replace(f"{out}.partial", "<out>").replace(str(out), "<out>"))
            if compiles:
                x = _compile_time_unclocked(x)
        return x

    return json.dumps(walk(json.loads((out / name).read_text())), sort_keys=True, indent=1)


def _compile_records(out: Path) -> list[str]:
    """Every compile process record in grading.json, as it is written."""
    found: list[str] = []

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("command"), list) and x["command"][:1] == ["nvcc"]:
                found.append(json.dumps(x, sort_keys=True))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads((out / "grading.json").read_text()))
    return found


@needs_nvcc
def test_a_sass_listing_is_read_back_for_the_same_cubin_only_and_never_from_a_shown_folder(tmp_path, store,
                                                                                          monkeypatch):
    """A cubin's opcode counts are kept after a real dump and read back, in the listing's order, for a cubin
    of the same bytes without running cuobjdump; another cubin, another cuobjdump version or a corrupt entry
    is a real dump (the corrupt entry written again); reuse off, or a store the grading's fence shows, keeps
    nothing."""
    from grader.compile import sass
    from grader.compile.toolchain import find_cuobjdump

    cuobjdump = find_cuobjdump()
    if cuobjdump.path is None:
        pytest.skip(f"no cuobjdump: {cuobjdump.reason}")
    scratch, fence = _build(tmp_path)
    assert _compile(scratch, fence).ok
    cubin = str(scratch.folder / "k.cubin")
    shared = reuse.listing_store(Fence(scratch=tmp_path / "work"))
    assert shared is not None and shared.folder == store
    real = sass.dump_sass(cubin, cuobjdump)
    assert real.available and real.opcodes["k"]["EXIT"] >= 1
    compiles = len(_entries(store))
    assert sass.dump_sass(cubin, cuobjdump, store=shared) == real
    assert len(_entries(store)) == compiles + 1

    runs: list = []
    real_run = sass.sandbox.run
    monkeypatch.setattr(sass.sandbox, "run", lambda cmd, **k: ("-sass" in cmd and runs.append(cmd)) or real_run(cmd, **k))
    again = sass.dump_sass(cubin, cuobjdump, store=shared)
    assert runs == [] and again == real
    assert list(again.opcodes["k"].items()) == list(real.opcodes["k"].items())

    scratch2, fence2 = _build(tmp_path, "other", kernel=KERNEL.replace("x[0] = SCALE", "x[1] = SCALE * x[2]"))
    assert _compile(scratch2, fence2).ok
    other = sass.dump_sass(str(scratch2.folder / "k.cubin"), cuobjdump, store=shared)
    assert len(runs) == 1 and other.available and other != real
    assert sass.dump_sass(cubin, dataclasses.replace(cuobjdump, version="0.0"), store=shared) == real
    assert len(runs) == 2

    name = reuse.listing_key(cuobjdump, Path(cubin).read_bytes(),
                             (sass.MAX_LISTING_BYTES, sass.MAX_FUNCTIONS, sass._MAX_LINE))
    entry = store / f"{name}.entry"
    assert entry.is_file()
    entry.write_bytes(b"0" * 64 + b"\n{}")
    assert sass.dump_sass(cubin, cuobjdump, store=shared) == real and len(runs) == 3
    assert not entry.read_bytes().startswith(b"0" * 64)

    assert reuse.listing_store(Fence(scratch=tmp_path)) is None  # the store is inside the fence's scratch
    assert reuse.listing_store(Fence(scratch=tmp_path / "work", readonly=(store,))) is None
    monkeypatch.delenv(reuse.ENV_FOLDER)
    assert reuse.listing_store(Fence(scratch=tmp_path / "work")) is None
