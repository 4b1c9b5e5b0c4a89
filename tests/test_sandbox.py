"""grader.sandbox.guard.run against real hostile children (python -c snippets)."""
from __future__ import annotations

import os
import pwd
import signal
import sys
import textwrap
import time
import tracemalloc

import pytest

from grader.sandbox import guard as sandbox
from grader.sandbox.guard import run
from tests.hang_guard import no_hang

PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an unreaped zombie is dead enough)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in (b"Z", b"X")


def wait_gone(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return not alive(pid)


def test_normal_exit_with_output():
    rec = run(py("import sys; print('hello'); print('warn', file=sys.stderr)"), timeout_s=10)
    assert rec.returncode == 0 and not rec.timed_out and rec.ok
    assert rec.stdout == "hello\n"
    assert rec.stderr == "warn\n"
    assert rec.stdout_bytes == 6 and rec.stderr_bytes == 5
    assert rec.timeout_s == 10.0
    assert rec.wall_s > 0
    assert rec.command[0] == PY
    assert rec.brief() == "exit code 0"


def test_nonzero_exit():
    rec = run(py("import sys; print('bad input', file=sys.stderr); sys.exit(3)"), timeout_s=10)
    assert rec.returncode == 3 and not rec.timed_out and not rec.ok
    assert "bad input" in rec.stderr
    assert rec.brief() == "exit code 3"


def test_killed_by_signal_is_negative_returncode():
    rec = run(py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), timeout_s=10)
    assert rec.returncode == -signal.SIGSEGV and not rec.timed_out
    assert rec.brief() == f"killed by signal {int(signal.SIGSEGV)}"


def test_infinite_loop_times_out():
    with no_hang("a 1 s limit"):
        rec = run(py("print('spinning', flush=True)\nwhile True: pass"), timeout_s=1.0)
    assert rec.timed_out and not rec.ok
    assert rec.returncode == -signal.SIGKILL
    assert rec.timeout_s == 1.0
    assert rec.stdout == "spinning\n"  # output before the kill is kept
    assert rec.wall_s >= rec.timeout_s  # killed at its limit, not before
    assert rec.brief() == "timed out after 1 s"


def test_output_flood_is_trimmed_counted_and_bounded():
    code = """
        import sys
        out = sys.stdout.buffer
        out.write(b'BEGIN')
        block = b'x' * (1 << 20)
        for _ in range(50):
            out.write(block)
        out.write(b'END')
        out.flush()
    """
    total = 5 + 50 * (1 << 20) + 3
    tracemalloc.start()
    try:
        rec = run(py(code), timeout_s=20, output_limit=64_000)  # drained within its limit: not timed out
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.returncode == 0 and not rec.timed_out
    assert rec.stdout_bytes == total
    assert rec.stdout.startswith("BEGIN" + "x" * 100)
    assert rec.stdout.endswith("x" * 100 + "END")
    trimmed = total - 64_000
    assert f"\n… [{trimmed:,} bytes trimmed] …\n" in rec.stdout
    assert len(rec.stdout.encode()) < 64_000 + 100
    assert peak < 4_000_000, f"Python allocations peaked at {peak:,} bytes"


def test_exact_limit_is_not_trimmed():
    rec = run(py("import sys; sys.stdout.write('a' * 100)"), timeout_s=10, output_limit=100)
    assert rec.stdout == "a" * 100 and rec.stdout_bytes == 100
    rec = run(py("import sys; sys.stdout.write('a' * 50 + 'b' * 51)"), timeout_s=10, output_limit=100)
    assert rec.stdout == "a" * 50 + "\n… [1 bytes trimmed] …\n" + "b" * 50
    assert rec.stdout_bytes == 101


def test_grandchild_holding_pipe_does_not_block():
    code = """
        import subprocess
        p = subprocess.Popen(['sleep', '600'])  # inherits stdout/stderr
        print(p.pid, flush=True)
    """
    with no_hang("run, with a grandchild holding the pipe"):  # waiting for it would outlast the net
        rec = run(py(code), timeout_s=10)
    assert rec.returncode == 0 and not rec.timed_out
    grandchild = int(rec.stdout.split()[0])
    assert wait_gone(grandchild), "leftover grandchild was not killed"


def test_daemonized_shell_background_job():
    with no_hang("run, with a shell's background job"):  # waiting for `sleep 1000` would outlast the net
        rec = run(["sh", "-c", "sleep 1000 & echo $!"], timeout_s=10)
    assert rec.returncode == 0 and not rec.timed_out
    assert wait_gone(int(rec.stdout.strip()))


def test_escaped_session_holding_pipe_still_returns():
    # A grandchild that setsid()s escapes the group kill; run must still return.
    code = """
        import subprocess
        p = subprocess.Popen(['sleep', '600'], start_new_session=True)
        print(p.pid, flush=True)
    """
    with no_hang("run, with an escaped session holding the pipe"):  # its sleep outlasts the net
        rec = run(py(code), timeout_s=10)
    escaped = int(rec.stdout.split()[0])
    try:
        assert rec.returncode == 0 and not rec.timed_out
    finally:
        try:
            os.kill(escaped, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_child_closes_pipes_and_keeps_running():
    code = """
        import os, time
        os.close(1); os.close(2)
        time.sleep(600)
    """
    with no_hang("a 1 s limit on a child without pipes"):  # its sleep outlasts the net
        rec = run(py(code), timeout_s=1.0)
    assert rec.timed_out and rec.returncode == -signal.SIGKILL


def test_fork_and_spin_kills_whole_group():
    code = """
        import os, time
        pid = os.fork()
        if pid == 0:
            while True:
                time.sleep(0.1)
        print(pid, flush=True)
        while True:
            pass
    """
    with no_hang("a 1 s limit on a forked spinner"):
        rec = run(py(code), timeout_s=1.0)
    assert rec.timed_out and rec.returncode == -signal.SIGKILL
    grandchild = int(rec.stdout.split()[0])
    assert wait_gone(grandchild), "forked grandchild survived the timeout"


def test_grandchild_in_other_process_group_same_session_is_killed():
    code = """
        import os, time
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)   # leaves the child's group, stays in its session
            os.close(1); os.close(2)
            time.sleep(60)
            os._exit(0)
        print(pid, flush=True)
    """
    rec = run(py(code), timeout_s=10)
    assert rec.returncode == 0
    assert wait_gone(int(rec.stdout.split()[0]))


def test_invalid_utf8_and_nul_bytes():
    code = r"""
        import sys
        sys.stdout.buffer.write(b'ok \xff\xfe bad \x00nul\n')
        sys.stderr.buffer.write(b'\xc3(')
    """
    rec = run(py(code), timeout_s=10)
    assert rec.returncode == 0
    assert rec.stdout == "ok \ufffd\ufffd bad nul\n"
    assert "\x00" not in rec.stdout
    assert rec.stderr == "\ufffd("
    assert rec.stdout_bytes == len(b"ok \xff\xfe bad \x00nul\n")


def test_missing_executable_is_a_record():
    rec = run(["/nonexistent/definitely-not-here", "--x"], timeout_s=5)
    assert rec.returncode is None and not rec.timed_out and not rec.ok
    assert "definitely-not-here" in rec.stderr
    assert rec.brief() == "did not start"
    rec = run([PY, "-c", "pass"], timeout_s=5, cwd="/nonexistent-dir-xyz")
    assert rec.returncode is None and "nonexistent-dir-xyz" in rec.stderr


def test_stdin_env_and_cwd(tmp_path):
    code = """
        import os, sys
        data = sys.stdin.buffer.read()
        print(len(data), os.environ.get('SANDBOX_T'), os.getcwd())
    """
    rec = run(
        py(code), timeout_s=10, stdin_data=b"z" * 300_000,
        env={**os.environ, "SANDBOX_T": "yes"}, cwd=tmp_path,
    )
    assert rec.returncode == 0
    assert rec.stdout.split() == ["300000", "yes", str(tmp_path)]


def test_stdin_not_read_does_not_block():
    rec = run(py("print('ignored stdin')"), timeout_s=5, stdin_data=b"q" * 5_000_000)
    assert rec.returncode == 0 and rec.stdout == "ignored stdin\n"


def test_default_env_is_a_copy_of_os_environ(monkeypatch):
    monkeypatch.setenv("SANDBOX_INHERITED", "1")
    rec = run(py("import os; print(os.environ.get('SANDBOX_INHERITED'))"), timeout_s=10)
    assert rec.stdout == "1\n"


def test_bad_timeout_is_the_callers_error():
    with pytest.raises(ValueError):
        run([PY, "-c", "pass"], timeout_s=0)


def test_user_ignored_when_not_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    rec = run(["id", "-u"], timeout_s=5, user="no-such-user-xyz")
    assert rec.returncode == 0
    assert rec.stdout.strip() == str(os.getuid())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch user")
def test_user_switch_as_root():
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user")
    rec = run(["sh", "-c", 'id -u; id -G; echo "$HOME"'], timeout_s=5, user="nobody", cwd="/")
    assert rec.returncode == 0, rec.stderr
    uid, groups, home = rec.stdout.split("\n")[:3]
    assert int(uid) == pw.pw_uid
    assert groups.split() == [str(pw.pw_gid)]
    assert home == pw.pw_dir
    with pytest.raises(ValueError):
        run(["true"], timeout_s=5, user="no-such-user-xyz")


def test_without_pidfd_falls_back_to_polling(monkeypatch):
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    rec = run(py("print('fine')"), timeout_s=5)
    assert rec.returncode == 0 and rec.stdout == "fine\n"
    with no_hang("a 0.5 s limit, polled"):
        rec = run(py("while True: pass"), timeout_s=0.5)
    assert rec.timed_out


def test_a_step_may_run_at_a_lower_cpu_priority():
    """The SASS dumps run at nice 19 beside the compiles and the children's start (grader/compile/sass.py)."""
    own = os.nice(0)
    show = [sys.executable, "-c", "import os; print(os.nice(0))"]
    assert sandbox.run(show, timeout_s=30).stdout.strip() == str(own)
    assert sandbox.run(show, timeout_s=30, nice=7).stdout.strip() == str(min(19, own + 7))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch user")
def test_a_lower_priority_holds_for_a_step_run_as_another_user():
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user")
    rec = sandbox.run(["sh", "-c", "id -u; nice"], timeout_s=5, user="nobody", cwd="/", nice=7)
    uid, niceness = rec.stdout.split()
    assert uid == str(pwd.getpwnam("nobody").pw_uid) and niceness == str(min(19, os.nice(0) + 7))
