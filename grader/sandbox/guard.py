"""Run one untrusted child process: bounded in time and output, fenced, limited, never raising.

``run(cmd, timeout_s=..., fence=None)`` is today's process runner (grader.sandbox.process): wall-clock
limit, trimmed output, the child's whole session killed when it ends. With a
:class:`~grader.sandbox.fence.Fence` the step also runs

* inside bubblewrap (``bwrap``): it sees only the toolchain, Python, its scratch folder and the
  fence's read-only paths (grader.sandbox.fence says exactly what), has no network, and lives in its
  own PID namespace, so every process it started is gone when it ends (setsid'd daemons too);
* under limits: memory, processes, file size, scratch size, total output, through a per-step
  cgroup v2 where the grader can make one (grader.sandbox.cgroup), else rlimits and a watchdog
  (grader.sandbox.limits);
* as the student user, when the grader is root and ``GRADER_STUDENT_USER`` (or ``user=``) names
  one; ``none`` means no switch.

``ProcRecord.limit`` says which limit ended the step. Where bwrap cannot run (not installed, no
namespaces in this container, ``GRADER_SANDBOX=weak``), a fenced run falls back to the
session-kill fence with the same limits and user switch, and :func:`mode` says so and why.
"""
from __future__ import annotations

import json
import math
import os
import pwd
import shutil
import signal
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path

from grader.evidence.sandbox import Confinement, LimitMethod, Mode
from grader.model import Limit, ProcRecord
from grader.sandbox import cgroup as _cgroup
from grader.sandbox import limits as _limits
from grader.sandbox.fence import (
    GIB,
    MIB,
    SCRATCH_TRUSTED_S,
    WATCH_TRUSTED_S,
    Fence,
    bwrap_args,
    is_visible,
    runtime_folder,
)
from grader.sandbox.process import DRAIN_GRACE_S, KILL_WAIT_S, WATCH_EVERY_S, Control, PopenExtra, run_process

__all__ = ["DRAIN_GRACE_S", "KILL_WAIT_S", "GIB", "MIB", "Fence", "Limit",
           "confines", "mode", "reset_mode", "run", "runtime_folder", "student_user"]

STUDENT_USER_VAR = "GRADER_STUDENT_USER"
SANDBOX_VAR = "GRADER_SANDBOX"  # "weak": never use bwrap (the mode then says so)
NO_USER = "none"  # GRADER_STUDENT_USER=none / user="none": no user switch


def student_user() -> str | None:
    """``$GRADER_STUDENT_USER``, with "" and "none" meaning no user switch."""
    name = os.environ.get(STUDENT_USER_VAR, "").strip()
    return None if name in ("", NO_USER) else name


# Who a student's own program runs as, as root with no student user configured: RLIMIT_NPROC never
# binds root (the kernel exempts uid 0), so a fork bomb as root is stopped only by the watchdog racing
# it, long past its time limit; as any other uid the kernel stops the forks.
FALLBACK_HOST_USER = "nobody"


def host_code_user() -> str | None:
    """The user a student's host program runs as: ``$GRADER_STUDENT_USER``; as root without one,
    :data:`FALLBACK_HOST_USER` where the system has it; else None (no switch: not root)."""
    user = student_user()
    if user or os.geteuid() != 0:
        return user
    try:
        pwd.getpwnam(FALLBACK_HOST_USER)
    except KeyError:
        return None
    return FALLBACK_HOST_USER


def mode() -> Mode:
    """How fenced steps run here (probed once per process and student user)."""
    return _fenced_mode(student_user())


def _fenced_mode(user: str | None) -> Mode:
    """How a fenced step run as ``user`` runs here (the user counts only as root)."""
    return _mode_for(user if os.geteuid() == 0 else None)


def _step_user(user: str | None, fence: Fence | None) -> str | None:
    """The user a step runs as: "" and "none" mean no switch; with a fence, None means
    ``$GRADER_STUDENT_USER``."""
    if user is not None and user.strip() in ("", NO_USER):
        return None
    if user is None and fence is not None:
        return student_user()
    return user


def confines(fence: Fence | None, user: str | None = None) -> bool:
    """Whether :func:`run` with this ``fence`` and ``user`` puts the step inside bwrap here (so it
    sees only the fence's paths), rather than the weak fence or no fence at all."""
    return fence is not None and _fenced_mode(_step_user(user, fence)).confinement is Confinement.BWRAP


def reset_mode() -> None:
    """Forget the probed modes (tests; a long-lived process after bwrap or the cgroups changed)."""
    _mode_for.cache_clear()
    _cgroup.cgroup_support.cache_clear()


@cache
def _mode_for(user: str | None) -> Mode:
    cg = _cgroup.cgroup_support()
    lim = (LimitMethod.CGROUP if cg.memory else LimitMethod.RLIMIT, cg.reason)

    def weak(reason: str, bwrap: str | None = None) -> Mode:
        return Mode(Confinement.WEAK, reason, *lim, user=user, bwrap=bwrap)

    if os.environ.get(SANDBOX_VAR, "").strip().lower() == "weak":
        return weak(f"{SANDBOX_VAR}=weak")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return weak("bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    if user is not None and shutil.which("setpriv") is None:
        return weak("setpriv (util-linux) is missing: cannot become the student user inside bwrap", bwrap)
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="grader-sandbox-probe-") as tmp:
        rec = _run_fenced([true], Fence(scratch=Path(tmp)), timeout_s=30.0, cwd=None, env=None, output_limit=4000,
                          stdin_data=None, user=user, confinement=Confinement.BWRAP, bwrap=bwrap)
    if rec.returncode != 0:
        said = (rec.stderr.strip().splitlines() or [rec.brief()])[-1]
        return weak(f"bwrap cannot make a sandbox here: {said}", bwrap)
    return Mode(Confinement.BWRAP, "", *lim, user=user, bwrap=bwrap)


def _user_ids(user: str) -> tuple[int, int, str]:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"sandbox user {user!r} does not exist on this machine "
                         f"(create it, or set {STUDENT_USER_VAR}={NO_USER})") from None
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
    fence: Fence | None = None,
    control: Control | None = None,
    nice: int = 0,
    stdout_sink: Callable[[bytes], None] | None = None,
) -> ProcRecord:
    """Run ``cmd`` with a wall-clock limit (and a fence, if given); return what happened as a record.

    ``timeout_s``: wall-clock limit; on expiry everything is killed (SIGKILL) and the record has
    ``timed_out=True``, ``limit=Limit.TIME``. ``output_limit``: bytes kept per stream (first and last
    half). ``stdin_data``: bytes fed to stdin (otherwise ``/dev/null``). ``env``: the child's
    environment (default: a copy of ``os.environ``; in a bwrap fence HOME and TMPDIR are ``/tmp``).
    ``user``: as root, run the child as this user (uid, primary gid, no supplementary groups; with
    the default env USER and LOGNAME are that user's); ``"none"``: no switch; ignored when not root.
    Without a fence only an explicit ``user`` switches; with one, ``user=None`` means
    ``$GRADER_STUDENT_USER``. ``fence``: see the module docstring; ``cwd`` defaults to its scratch.
    ``control``: hold the time limit's clock, or cancel the run (grader.sandbox.process.Control).
    ``nice``: lower the child's CPU priority by this much (a fence has its own: ``Fence.nice``).
    ``stdout_sink``: gets all of stdout, chunk by chunk, as it is read (no fence: a grader tool's
    output read whole, e.g. a SASS listing).

    Raises only for the caller's mistakes (``timeout_s`` not a positive number, an unknown
    ``user``, a fence whose scratch or read-only paths do not exist, a ``cwd`` the fence hides).
    A program that cannot be started gives ``returncode=None`` with the reason in ``stderr``.
    """
    if not isinstance(timeout_s, (int, float)) or not (0 < timeout_s < math.inf):
        raise ValueError(f"timeout_s must be a positive finite number, not {timeout_s!r}")
    command = [os.fspath(c) for c in cmd]
    user = _step_user(user, fence)
    if fence is not None:
        if stdout_sink is not None:
            raise ValueError("stdout_sink is for unfenced runs")
        return _run_fenced(command, fence, timeout_s=float(timeout_s), cwd=cwd, env=env, output_limit=output_limit,
                           stdin_data=stdin_data, user=user, confinement=None, bwrap=None, control=control)
    child_env = dict(os.environ) if env is None else dict(env)
    popen: PopenExtra = {"preexec_fn": _limits.preexec(None, [], None, nice)} if nice else {}
    if user is not None and os.geteuid() == 0:
        uid, gid, home = _user_ids(user)
        popen.update({"user": uid, "group": gid, "extra_groups": []})  # beside the nice, not instead of it
        if env is None:
            child_env.update(HOME=home, USER=user, LOGNAME=user)
    return run_process(command, timeout_s=float(timeout_s), cwd=cwd, env=child_env, output_limit=output_limit,
                       stdin_data=stdin_data, popen_extra=popen, control=control, stdout_sink=stdout_sink)


def run_guarded(cmd: Sequence[str], *, cwd: Path, timeout_s: float, output_limit: int,
                user: str | None = None, env: Mapping[str, str] | None = None,
                fence: Fence | None = None, control: Control | None = None) -> ProcRecord:
    """Run a process whose behaviour a submission decides (nvcc on a student's source, a student's
    program, a child that loads a student's kernel): the one call of :func:`run`
    for them, so the limits and the ``fence`` are applied in one place. With a fence, ``user=None``
    means the student user (the sandbox hands the fence's scratch folder over itself). ``control``:
    hold its clock or cancel it (grader.sandbox.process.Control)."""
    return run(list(cmd), timeout_s=timeout_s, cwd=str(cwd), env=env, output_limit=output_limit,
                       user=user, fence=fence, control=control)


def _hand_over(scratch: Path, uid: int, gid: int, *, reach_parents: bool) -> None:
    """Give the scratch folder to the student user (as root). Inside bwrap the folders above it
    are the sandbox's own; without bwrap the user needs search (o+x) on the three above it."""
    for path in [scratch, *scratch.rglob("*")]:
        os.lchown(path, uid, gid)
    if reach_parents:
        for parent in list(scratch.parents)[:3]:
            st = parent.stat().st_mode
            if not st & 0o001:
                os.chmod(parent, st | 0o001)


def _resolve(exe: str, env: Mapping[str, str], cwd: Path) -> str | None:
    if os.sep in exe:
        path = exe if os.path.isabs(exe) else str(cwd / exe)
        return path if os.access(path, os.X_OK) and os.path.isfile(path) else None
    return shutil.which(exe, path=env.get("PATH", os.defpath))


def _read_status(fd: int) -> dict:
    """bwrap's --json-status-fd: {"child-pid": N} once the sandbox is set up, {"exit-code": N} at the end."""
    data = b""
    os.set_blocking(fd, False)
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    out: dict = {}
    for line in data.decode(errors="replace").splitlines():
        try:
            out.update(json.loads(line))
        except ValueError:
            continue
    return out


def _not_started(command: list[str], why: str, timeout_s: float) -> ProcRecord:
    return ProcRecord(command=command, returncode=None, stderr=f"could not start {command[0]}: {why}",
                      timeout_s=timeout_s)


def _run_fenced(command: list[str], fence: Fence, *, timeout_s: float, cwd: str | os.PathLike[str] | None,
                env: Mapping[str, str] | None, output_limit: int, stdin_data: bytes | None, user: str | None,
                confinement: Confinement | None, bwrap: str | None, control: Control | None = None) -> ProcRecord:
    if confinement is None:
        m = _fenced_mode(user)
        confinement, bwrap = m.confinement, m.bwrap
    in_bwrap = confinement is Confinement.BWRAP
    as_root = os.geteuid() == 0
    ids = _user_ids(user)[:2] if user is not None and as_root else None
    for path in (fence.scratch, *fence.readonly):
        if not path.exists():
            raise ValueError(f"the fence's path {path} does not exist")
    run_cwd = Path(os.path.abspath(cwd)) if cwd is not None else fence.scratch
    child_env = dict(os.environ) if env is None else dict(env)
    if user is not None and env is None:
        child_env.update(USER=user, LOGNAME=user)
    if in_bwrap:
        child_env.update(HOME="/tmp", TMPDIR="/tmp")
        if not is_visible(run_cwd, fence, child_env):
            raise ValueError(f"cwd {run_cwd} is not visible inside the fence (not under its scratch or read-only "
                             "paths)")
        exe = _resolve(command[0], child_env, run_cwd) if command else None
        if exe is None:
            return _not_started(command or ["(empty command)"], "no such program", timeout_s)
        if not is_visible(exe, fence, child_env):
            return _not_started(command, f"{exe} is not visible inside the sandbox", timeout_s)
    if ids is not None:
        _hand_over(fence.scratch, *ids, reach_parents=not in_bwrap)

    cg = None
    support = _cgroup.cgroup_support()
    if support.parent is not None:
        try:
            cg = _cgroup.RunCgroup(support, fence.memory_bytes, fence.processes)
        except OSError:
            cg = None  # e.g. the parent went away; rlimits and the watchdog still apply
    cg_memory, cg_pids = cg is not None and support.memory, cg is not None and support.pids
    rlimits = _limits.rlimits_for(fence.memory_bytes, fence.file_bytes, fence.processes,
                                  cgroup_memory=cg_memory, cgroup_pids=cg_pids, dedicated_user=ids is not None)
    # The process count is watched even under pids.max: the kernel stops the count at the cap,
    # the watchdog then ends the step at once (a fork bomb otherwise spins until its time limit).
    watch = _limits.Watchdog(memory_bytes=None if cg_memory else fence.memory_bytes, processes=fence.processes,
                             scratch=fence.scratch, scratch_bytes=fence.scratch_bytes,
                             scratch_every_s=None if fence.student_host_code else SCRATCH_TRUSTED_S)
    status_r, status_w = os.pipe() if in_bwrap else (-1, -1)
    popen: PopenExtra = {"preexec_fn": _limits.preexec(cg.procs if cg else None, rlimits,
                                                       None if in_bwrap else ids, fence.nice)}
    argv = command
    if in_bwrap:
        assert bwrap is not None
        popen["pass_fds"] = (status_w,)
        argv = bwrap_args(bwrap, fence, cwd=run_cwd, env=child_env, as_root=as_root, switch=ids,
                          setpriv=shutil.which("setpriv"), status_fd=status_w) + command
    status: dict = {}
    oom = pids_hit = False
    try:
        rec = run_process(argv, timeout_s=timeout_s, cwd=None if in_bwrap else run_cwd, env=child_env,
                          output_limit=output_limit, stdin_data=stdin_data, popen_extra=popen, watch=watch,
                          output_cap=fence.output_bytes, kill_extra=cg.kill if cg else None, control=control,
                          watch_every_s=WATCH_EVERY_S if fence.student_host_code else WATCH_TRUSTED_S,
                          fast_start=fence.student_host_code)
    finally:
        if in_bwrap:
            os.close(status_w)
            status = _read_status(status_r)
            os.close(status_r)
        if cg is not None:
            oom, pids_hit = cg.out_of_memory(), cg.hit_pids_max()
            cg.kill()
            cg.remove()
    rec.command = command
    if in_bwrap and rec.limit is None and rec.returncode is not None and rec.returncode >= 0:
        if "child-pid" not in status:  # bwrap failed before starting the command: the grader's set-up
            rec.returncode = None
            rec.stderr = f"the sandbox (bwrap) could not start {command[0]}: {rec.stderr.strip()}"
        elif 128 < rec.returncode <= 128 + 64:
            # bwrap reports a signal death as 128 + signal, as shells do; give it back as -signal,
            # as without the fence (an exit(139) therefore also reads as SIGSEGV, as in a shell).
            rec.returncode = -(rec.returncode - 128)
    if rec.limit is None and rec.returncode != 0:
        if oom:
            rec.limit = Limit.MEMORY
        elif rec.returncode == -signal.SIGXFSZ:
            rec.limit = Limit.FILE_SIZE
        elif pids_hit:
            rec.limit = Limit.PROCESSES
    return rec


def main() -> int:
    """``python -m grader.sandbox.guard``: one line saying how students' processes are fenced here."""
    print(f"sandbox: {mode().describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
