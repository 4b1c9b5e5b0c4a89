"""The bwrap fence, against the real bwrap: what a hostile step can see, write, reach and leave behind."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import REPO_ROOT
from grader.compile import toolchain
from grader.evidence.sandbox import Confinement
from grader.sandbox import guard as sandbox
from grader.sandbox.guard import Fence, Limit, run
from tests.child_helpers import launch_json
from tests.fence_helpers import live_with, marker, py, switch_user, wait_none_with


@pytest.fixture(autouse=True)
def _bwrap(bwrap_required):
    """Every test here starts the real bwrap."""


def test_sees_no_secrets_and_no_repository(scratch: Path):
    secrets = ["/etc/shadow", "/etc/passwd", "/etc/hostname", str(REPO_ROOT / "rubric.yaml"),
               str(REPO_ROOT / "grader" / "__init__.py"), str(REPO_ROOT / "tests" / "conftest.py")]
    code = f"""
        import os
        for path in {secrets!r}:
            try:
                open(path).read(1)
                print("READ", path)
            except OSError as exc:
                print("hidden", path, type(exc).__name__)
        try:
            print("listing", sorted(os.listdir({str(REPO_ROOT)!r})))
        except FileNotFoundError:
            print("listing []")  # no .venv in the repository: nothing of it is shown
    """
    rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.returncode == 0, rec.stderr
    assert "READ" not in rec.stdout
    assert rec.stdout.count("hidden") == len(secrets)
    assert "listing ['.venv']" in rec.stdout or "listing []" in rec.stdout  # only the interpreter's venv


def test_include_trick_cannot_show_files(scratch: Path):
    """The issue's attack: #include of /etc/passwd or rubric.yaml put their lines into compile messages."""
    rubric = REPO_ROOT / "rubric.yaml"
    rec = run(["sh", "-c", f"cat /etc/passwd {rubric} 2>&1; cpp -P {rubric} 2>&1 | head -3"], timeout_s=30,
              fence=Fence(scratch=scratch))
    assert "root:" not in rec.stdout
    assert "stages" not in rec.stdout  # a word of rubric.yaml
    assert "No such file" in rec.stdout


def test_writes_only_into_scratch(scratch: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = [str(outside / "x"), "/usr/x", "/etc/x", str(REPO_ROOT / ".venv" / "x"), str(REPO_ROOT / "x"),
               "/x"]
    code = f"""
        for path in {targets!r}:
            try:
                open(path, "w").write("pwned")
                print("WROTE", path)
            except OSError as exc:
                print("refused", path, type(exc).__name__)
        open("inside.txt", "w").write("ok")
        open("/tmp/private.txt", "w").write("ok")
    """
    rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.returncode == 0, rec.stderr
    # A path under /tmp may be "written" inside the fence: its /tmp is a private tmpfs (a checkout that
    # lives under /tmp has its .venv's mount point there). What counts is that the host never sees it.
    for path in targets:
        if not path.startswith("/tmp/"):
            assert f"WROTE {path}\n" not in rec.stdout, rec.stdout
        assert path == "/x" or not Path(path).exists(), path
    assert (scratch / "inside.txt").read_text() == "ok"
    assert not any(outside.iterdir())
    assert not (REPO_ROOT / "x").exists() and not (REPO_ROOT / ".venv" / "x").exists()
    assert not Path("/tmp/private.txt").exists()  # the step's /tmp is its own


def test_readonly_paths_are_visible_not_writable(scratch: Path, tmp_path: Path):
    ro = tmp_path / "submission"
    ro.mkdir()
    (ro / "naive.cu").write_text("// student code\n")
    code = f"""
        print(open({str(ro / 'naive.cu')!r}).read().strip())
        try:
            open({str(ro / 'naive.cu')!r}, "w").write("x")
        except OSError as exc:
            print("refused", type(exc).__name__)
    """
    rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch, readonly=(ro,)))
    assert rec.stdout.split("\n")[:2] == ["// student code", "refused OSError"]
    assert (ro / "naive.cu").read_text() == "// student code\n"


def test_no_network(scratch: Path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3)
                print("CONNECTED")
            except OSError as exc:
                print("no network", type(exc).__name__)
        """
        rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch))
        assert rec.stdout.startswith("no network"), rec.stdout + rec.stderr
        rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch, network=True))
        assert rec.stdout.startswith("CONNECTED"), rec.stdout + rec.stderr


def test_detached_daemon_is_gone_when_run_returns(scratch: Path):
    """fork, setsid, fork: the issue's daemon that outlived grading and rewrote results.json."""
    word = marker()
    code = f"""
        import os, subprocess, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c",
                         "import time\\nwhile True:\\n    open('beat', 'a').write('x'); time.sleep(0.05)", "{word}"])
            os._exit(0)
        time.sleep(0.5)
        print("parent exits")
    """
    rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.returncode == 0 and rec.stdout == "parent exits\n", rec.stderr
    assert live_with(word) == [], "the daemon outlived run()"
    beats = (scratch / "beat").read_text()
    time.sleep(0.3)
    assert (scratch / "beat").read_text() == beats, "something still writes into the scratch folder"


def test_time_limit_kills_the_whole_namespace(scratch: Path):
    word = marker()
    code = f"""
        import os, subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{word}"], start_new_session=True)
        while True:
            pass
    """
    rec = run(py(code), timeout_s=1.5, fence=Fence(scratch=scratch))
    assert rec.timed_out and rec.limit is Limit.TIME and rec.returncode == -signal.SIGKILL
    assert wait_none_with(word) == []


def test_signal_death_reads_as_without_the_fence(scratch: Path):
    rec = run(py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), timeout_s=30,
              fence=Fence(scratch=scratch))
    assert rec.returncode == -signal.SIGSEGV and rec.limit is None
    assert rec.brief() == f"killed by signal {int(signal.SIGSEGV)}"
    rec = run(py("import sys; sys.exit(3)"), timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.returncode == 3


def test_program_missing_or_hidden_is_a_record(scratch: Path):
    rec = run(["definitely-not-a-program-xyz"], timeout_s=10, fence=Fence(scratch=scratch))
    assert rec.returncode is None and "no such program" in rec.stderr
    hidden = REPO_ROOT / "grader" / "bootstrap.sh"
    rec = run([str(hidden)], timeout_s=10, fence=Fence(scratch=scratch))
    assert rec.returncode is None and "not visible inside the sandbox" in rec.stderr


def test_callers_mistakes_raise(scratch: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="does not exist"):
        run(["true"], timeout_s=5, fence=Fence(scratch=tmp_path / "missing"))
    with pytest.raises(ValueError, match="not visible"):
        run(["true"], timeout_s=5, cwd=tmp_path, fence=Fence(scratch=scratch))
    with pytest.raises(ValueError, match="memory_bytes"):
        Fence(scratch=scratch, memory_bytes=0)


def test_nvcc_compiles_inside_the_fence(scratch: Path):
    nvcc = toolchain.find_nvcc()
    if not nvcc.ok:
        pytest.skip(f"no usable nvcc: {nvcc.reason or nvcc.problems}")
    (scratch / "k.cu").write_text('extern "C" __global__ void twice(float* a) { a[threadIdx.x] *= 2.0f; }\n')
    env = {**os.environ, **(nvcc.env or {})}
    cmd = [nvcc.path, "-cubin", "-arch=sm_90", *nvcc.include_flags(), "-o", "k.cubin", "k.cu"]
    rec = run(cmd, timeout_s=300, env=env, fence=Fence(scratch=scratch))
    assert rec.ok, rec.stderr
    assert (scratch / "k.cubin").stat().st_size > 0


def test_child_runs_from_the_runtime_folder(scratch: Path, tmp_path: Path):
    rt = sandbox.runtime_folder(tmp_path / "runtime", ["__init__.py", "model.py"])
    assert sorted(str(p.relative_to(rt)) for p in rt.rglob("*.py")) == ["grader/__init__.py", "grader/model.py"]
    code = """
        import grader, grader.model
        print(grader.__file__)
        try:
            import grader.pipeline
            print("IMPORTED the grader's own source")
        except ImportError:
            print("pipeline hidden")
    """
    env = {**os.environ, "PYTHONPATH": str(rt)}
    rec = run(py(code), timeout_s=30, env=env, fence=Fence(scratch=scratch, readonly=(rt,)))
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == [str(rt / "grader" / "__init__.py"), "pipeline", "hidden"]


def test_runtime_folder_refuses_paths_outside_the_package(tmp_path: Path):
    for bad in ("../rubric.yaml", "/etc/passwd", "no_such_file.py"):
        with pytest.raises(ValueError, match="not a file of the grader package"):
            sandbox.runtime_folder(tmp_path / "rt", [bad])


def test_runtime_folder_copies_the_declared_runtime_files(tmp_path: Path):
    from grader import children

    files = getattr(children, "RUNTIME_FILES", None)
    if files is None:
        pytest.skip("grader.children.RUNTIME_FILES is not declared yet")
    rt = sandbox.runtime_folder(tmp_path / "rt")
    assert sorted(str(p.relative_to(rt / "grader")) for p in rt.rglob("*") if p.is_file()) == sorted(files)


def test_student_user_owns_what_it_writes(scratch: Path, monkeypatch):
    pw = switch_user()
    monkeypatch.setenv(sandbox.STUDENT_USER_VAR, pw.pw_name)
    rec = run(["sh", "-c", "id -u; id -G; touch made; grep CapEff /proc/self/status"], timeout_s=30,
              fence=Fence(scratch=scratch))
    assert rec.returncode == 0, rec.stderr
    uid, groups, caps = rec.stdout.split("\n")[:3]
    assert int(uid) == pw.pw_uid and groups.split() == [str(pw.pw_gid)]
    assert caps.split()[1] == "0000000000000000"
    assert (scratch / "made").stat().st_uid == pw.pw_uid
    rec = run(py("print('python runs')"), timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.stdout == "python runs\n", rec.stderr


def test_student_user_none_means_no_switch(scratch: Path, monkeypatch):
    """install.sh documents GRADER_STUDENT_USER=none: it means no user switch, and the grader runs."""
    monkeypatch.setenv(sandbox.STUDENT_USER_VAR, "none")
    assert sandbox.student_user() is None
    rec = run(["id", "-u"], timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.returncode == 0 and int(rec.stdout) == os.geteuid()
    rec = run(["id", "-u"], timeout_s=30, user="none")
    assert rec.returncode == 0 and int(rec.stdout) == os.geteuid()


def test_root_without_a_user_has_no_capabilities(scratch: Path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("about the grader running as root")
    monkeypatch.setenv(sandbox.STUDENT_USER_VAR, "none")
    rec = run(["sh", "-c", "grep CapEff /proc/self/status; echo 5 > /proc/sys/kernel/printk_ratelimit"],
              timeout_s=30, fence=Fence(scratch=scratch))
    assert rec.stdout.split()[1] == "0000000000000000"
    assert rec.returncode != 0 and "Read-only file system" in rec.stderr


def test_mode_names_the_fallback_reason(monkeypatch):
    try:
        monkeypatch.setenv("PATH", "/nonexistent")
        sandbox.reset_mode()
        m = sandbox.mode()
        assert m.confinement is Confinement.WEAK and "bwrap is not installed" in m.reason
        monkeypatch.undo()
        monkeypatch.setenv(sandbox.SANDBOX_VAR, "weak")
        sandbox.reset_mode()
        m = sandbox.mode()
        assert m.confinement is Confinement.WEAK and m.reason == "GRADER_SANDBOX=weak"
        assert "weak sandbox (GRADER_SANDBOX=weak)" in m.describe()
    finally:
        monkeypatch.undo()
        sandbox.reset_mode()
    assert sandbox.mode().confinement is Confinement.BWRAP


def test_weak_fallback_still_runs_and_limits(scratch: Path, monkeypatch):
    monkeypatch.setenv(sandbox.SANDBOX_VAR, "weak")
    sandbox.reset_mode()
    try:
        assert run(["pwd"], timeout_s=30, fence=Fence(scratch=scratch)).stdout.strip() == str(scratch)
        rec = run(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=4"], timeout_s=30,
                  fence=Fence(scratch=scratch, file_bytes=1 << 20))
        assert rec.limit is Limit.FILE_SIZE and (scratch / "big").stat().st_size == 1 << 20
    finally:
        monkeypatch.undo()
        sandbox.reset_mode()


@pytest.mark.gpu
def test_cupy_runs_on_the_gpu_inside_the_fence(scratch: Path, gpu_alone):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    rec = run(py("import cupy; print(int(cupy.arange(10).sum()))"), timeout_s=300, env=env,
              fence=Fence(scratch=scratch, gpu=True))
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.strip().splitlines()[-1] == "45"


def test_a_fenced_program_runs_again_and_again(scratch: Path):
    """Each run makes its sandbox afresh in the same scratch folder. What a run costs is a benchmark,
    not a pass/fail: python docs/measurements/scripts/timing_claims.py sandbox."""
    true = shutil.which("true")
    for _ in range(6):
        assert run([true], timeout_s=30, fence=Fence(scratch=scratch)).returncode == 0


def test_grader_child_runs_fenced_from_the_shared_runtime(tmp_path: Path):
    """launch() with a fence: the child imports grader.children from the read-only runtime copy,
    the checkout being invisible, and still writes its result."""
    work = tmp_path / "probe"
    child, res = launch_json("probe", {}, work, 120, 20_000, fence=Fence(scratch=work, gpu=True))
    assert child.proc.returncode == 0, child.proc.stderr
    assert res is not None and "ok" in res
    from grader.sandbox.fence import shared_runtime
    assert not str(shared_runtime()).startswith(str(REPO_ROOT))  # the checkout itself is hidden (tests above)


def test_a_grader_started_from_tmp_keeps_the_steps_private_tmp(tmp_path: Path):
    # `python -m grader` puts the folder it was started from first on sys.path. Started from /tmp, that
    # folder must not be shown to the steps: read-only over their private /tmp, nvcc could not write its
    # temporary files there, and a student's program could read the host's /tmp.
    from grader.sandbox.fence import _allowed

    assert not _allowed(Path("/tmp")) and not _allowed(Path("/"))
    assert _allowed(Path("/tmp/site-packages-of-a-ta"))
    marker_file = Path("/tmp") / f"host-tmp-marker-{os.getpid()}"
    marker_file.write_text("the host's /tmp")
    try:
        probe = tmp_path / "probe.py"
        probe.write_text(
            "import sys\n"
            "sys.path.insert(0, '/tmp')  # where `python -m` started from /tmp puts it\n"
            "from grader.sandbox.guard import Fence, run\n"
            f"code = {f'import os; print(os.path.exists({str(marker_file)!r}))'!r}\n"
            f"r = run([sys.executable, '-c', code], fence=Fence(scratch={str(tmp_path / 'scratch')!r}), timeout_s=60, "
            "cwd=None, env=None, output_limit=4000)\n"
            "print(r.stdout.strip(), r.returncode)\n")
        (tmp_path / "scratch").mkdir()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GRADER_COMPILE_REUSE": ""}
        seen = subprocess.run([sys.executable, "-c", f"exec(open({str(probe)!r}).read())"],
                              cwd="/tmp", env=env, capture_output=True, text=True, timeout=120)
        assert seen.stdout.split() == ["False", "0"], seen.stdout + seen.stderr
        out = tmp_path / "graded"
        proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(REPO_ROOT / "solutions"), "--no-gpu",
                               "--stages", "naive", "--out", str(out), "--quiet"],
                              cwd="/tmp", env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        first = json.loads((out / "results.json").read_text())["tests"][0]
        assert (first["number"], first["status"]) == ("1.compiles", "passed"), first["output"]
    finally:
        marker_file.unlink()
