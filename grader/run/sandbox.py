"""Run one child process with a wall-clock limit and bounded output.

The child is the untrusted part (a student's kernel runner, ``nvcc`` on a
student's file). Whatever it does -- loops forever, floods its output, forks,
leaves a daemon holding its pipes, prints invalid UTF-8 -- :func:`run` returns a
:class:`~grader.model.ProcRecord`; the child's behaviour never raises.

How the limits are enforced:

* The child starts in a new session (``start_new_session=True``), so it and its
  descendants share one process group and one session whose id is the child's pid.
* When the child exits *or* the time limit passes, everything left in that session
  is killed with SIGKILL (the process group, plus any member that moved to another
  group of the same session, found through ``/proc``). The exited child is not reaped
  until then, so its pid (the group id) cannot be reused by an unrelated process.
* stdout and stderr are read by two threads that keep the first and last
  ``output_limit // 2`` bytes of each stream and count the rest. The threads poll
  with a short timeout, so a descendant that escaped the session (``setsid``) and
  still holds a pipe cannot make :func:`run` wait past a short grace period.

Known limit: a descendant that calls ``setsid`` itself escapes the kill. Running the
child as a dedicated ``user`` (then killing every process of that uid) or a cgroup is
the stronger fence.
"""
from __future__ import annotations

import math
import os
import pwd
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

from grader.model import ProcRecord

# After the child has exited and its session was killed, how long the reader
# threads may keep draining what is left in the pipes before they are stopped.
DRAIN_GRACE_S = 1.0
# After SIGKILL on timeout, how long to wait for the child to be reapable.
KILL_WAIT_S = 5.0
# How often the I/O threads look at their stop flag.
_POLL_S = 0.05
_CHUNK = 64 * 1024


class _Capture:
    """Keep the first and last ``half`` bytes of a stream and count all of it."""

    def __init__(self, limit: int):
        self.half = max(0, int(limit)) // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.half > 0:
            self.tail += data
            excess = len(self.tail) - self.half
            if excess > 0:
                del self.tail[:excess]

    def text(self) -> str:
        trimmed = self.total - len(self.head) - len(self.tail)
        head = _decode(bytes(self.head))
        if trimmed <= 0:
            return head + _decode(bytes(self.tail))
        return head + f"\n… [{trimmed:,} bytes trimmed] …\n" + _decode(bytes(self.tail))


def _decode(data: bytes) -> str:
    return data.replace(b"\x00", b"").decode("utf-8", errors="replace")


def _reader(fd: int, cap: _Capture, stop: threading.Event) -> None:
    """Read ``fd`` until EOF or until ``stop`` is set."""
    try:
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not stop.is_set():
                if not sel.select(_POLL_S):
                    continue
                try:
                    data = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    return  # EOF: every writer closed the pipe
                cap.feed(data)
    except OSError:
        return


def _writer(fd: int, data: bytes, stop: threading.Event) -> None:
    """Write ``data`` to ``fd`` (the child's stdin), then close it."""
    view = memoryview(data)
    try:
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            while view and not stop.is_set():
                if not sel.select(_POLL_S):
                    continue
                try:
                    n = os.write(fd, view[:_CHUNK])
                except BlockingIOError:
                    continue
                view = view[n:]
    except OSError:  # BrokenPipeError: the child does not read its stdin
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _wait_exit_noreap(pid: int, timeout: float) -> bool:
    """Wait until child ``pid`` has exited, without reaping it.

    True if it exited within ``timeout`` seconds. The zombie keeps the pid (and
    so the process-group id) reserved until :meth:`Popen.wait` reaps it.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(pid)
        except OSError:
            pidfd = None
        if pidfd is not None:
            try:
                with selectors.DefaultSelector() as sel:
                    sel.register(pidfd, selectors.EVENT_READ)
                    while True:
                        left = deadline - time.monotonic()
                        if sel.select(max(0.0, left)):
                            return True
                        if left <= 0:
                            return False
            finally:
                os.close(pidfd)
    # Fallback without pidfd (old kernels, non-Linux): poll.
    delay = 0.001
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # already reaped
        if info is not None:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)


def _session_members(sid: int) -> list[int]:
    """Pids of live processes whose session id is ``sid`` (Linux /proc; else [])."""
    pids: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return pids
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ..." -- comm may contain spaces and parens.
        fields = stat.rpartition(b")")[2].split()
        try:
            if int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
                pids.append(int(name))
        except (IndexError, ValueError):
            continue
    return pids


def _kill_session(sid: int) -> None:
    """SIGKILL the process group ``sid`` and every other member of session ``sid``."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _user_ids(user: str) -> tuple[int, int, str]:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"sandbox user {user!r} does not exist on this machine") from None
    return pw.pw_uid, pw.pw_gid, pw.pw_dir


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    timeout_s: float,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    output_limit: int = 64_000,
    stdin_data: bytes | None = None,
    user: str | None = None,
) -> ProcRecord:
    """Run ``cmd`` with a wall-clock limit; return what happened as a record.

    ``timeout_s``: wall-clock limit; on expiry the child's whole session is killed
    (SIGKILL) and the record has ``timed_out=True``. ``output_limit``: bytes kept per
    stream (first half and last half). ``stdin_data``: bytes fed to the child's stdin
    (otherwise stdin is ``/dev/null``). ``env``: the child's environment (default: a
    copy of ``os.environ``). ``user``: when the grader runs as root, run the child as
    this user (uid, primary gid, no supplementary groups; with the default env, HOME,
    USER and LOGNAME are that user's); ignored when not root.

    Raises only for the caller's mistakes (``timeout_s`` not a positive number,
    unknown ``user``). A program that cannot be started gives ``returncode=None``
    with the reason in ``stderr``.
    """
    if not isinstance(timeout_s, (int, float)) or not (0 < timeout_s < math.inf):
        raise ValueError(f"timeout_s must be a positive finite number, not {timeout_s!r}")
    command = [os.fspath(c) for c in cmd]
    child_env = dict(os.environ) if env is None else dict(env)

    popen_user: dict[str, object] = {}
    if user is not None and os.geteuid() == 0:
        uid, gid, home = _user_ids(user)
        popen_user = {"user": uid, "group": gid, "extra_groups": []}
        if env is None:
            child_env.update(HOME=home, USER=user, LOGNAME=user)

    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            **popen_user,  # type: ignore[arg-type]
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        name = command[0] if command else "(empty command)"
        return ProcRecord(
            command=command,
            returncode=None,
            wall_s=time.monotonic() - start,
            stderr=f"could not start {name}: {exc}",
            timeout_s=float(timeout_s),
        )

    stop = threading.Event()
    out_cap, err_cap = _Capture(output_limit), _Capture(output_limit)
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_reader, args=(proc.stdout.fileno(), out_cap, stop), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr.fileno(), err_cap, stop), daemon=True),
    ]
    if stdin_data is not None:
        assert proc.stdin is not None
        stdin_fd = os.dup(proc.stdin.fileno())  # the writer owns (and closes) this copy
        proc.stdin.close()
        threads.append(
            threading.Thread(target=_writer, args=(stdin_fd, bytes(stdin_data), stop), daemon=True)
        )
    for t in threads:
        t.start()

    timed_out = False
    try:
        exited = _wait_exit_noreap(proc.pid, start + timeout_s - time.monotonic())
        if not exited:
            timed_out = True
        wall_s = time.monotonic() - start
        # Exited or not, nothing the child started may outlive it.
        _kill_session(proc.pid)
        if timed_out:
            try:
                proc.kill()  # in case the child left its own process group
            except OSError:
                pass
        try:
            returncode: int | None = proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # unkillable (D state); report the kill we sent
            returncode = -signal.SIGKILL
        if timed_out:
            wall_s = time.monotonic() - start
        # Let the readers drain what is left in the pipes, then stop them.
        drain_deadline = time.monotonic() + DRAIN_GRACE_S
        for t in threads:
            t.join(max(0.0, drain_deadline - time.monotonic()))
    except BaseException:  # KeyboardInterrupt etc. in the grader: leave nothing running
        _kill_session(proc.pid)
        try:
            proc.kill()
            proc.wait(timeout=KILL_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        raise
    finally:
        stop.set()
        for t in threads:
            t.join(1.0)
        for f in (proc.stdout, proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    return ProcRecord(
        command=command,
        returncode=returncode,
        timed_out=timed_out,
        wall_s=wall_s,
        stdout=out_cap.text(),
        stderr=err_cap.text(),
        stdout_bytes=out_cap.total,
        stderr_bytes=err_cap.total,
        timeout_s=float(timeout_s),
    )
