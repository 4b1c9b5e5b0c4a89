"""Start one child process, capture its output within bounds, stop it, leave nothing behind.

This is the layer under :mod:`grader.sandbox.guard`: it knows nothing of bwrap or cgroups. What it
guarantees, whatever the child does (loops forever, floods its output, forks, leaves a daemon
holding its pipes, prints invalid UTF-8), is a :class:`~grader.model.ProcRecord` and no exception:

* The child starts in a new session (``start_new_session=True``), so it and its descendants
  share one process group and one session whose id is the child's pid.
* When the child exits, or a limit ends it (time, total output, or whatever ``watch`` reports),
  everything left in that session is killed with SIGKILL (the process group, plus any member that
  moved to another group of the same session, found through ``/proc``). The exited child is not
  reaped until then, so its pid (the group id) cannot be reused by an unrelated process.
* The total-output cap (``output_cap``) is enforced as the output arrives: the reader thread that
  sees the total pass it wakes the waiting loop at once (a pipe in the same ``select`` as the
  child's exit), which kills the session. A kernel flooding printf is stopped within moments of its
  first bytes past the cap, not when its time limit ends; a child that went past the cap and exited
  by itself in between is recorded as stopped by the cap too, so the verdict never depends on
  which came first.
* stdout and stderr are read by two threads (grader.sandbox.capture) that keep the first and last
  ``output_limit // 2`` bytes of each stream and count the rest. The threads poll with a short
  timeout, so a descendant that escaped the session (``setsid``) and still holds a pipe cannot make
  the caller wait past a short grace period.

A descendant that calls ``setsid`` itself escapes the session kill. When a limit ends the child
(or the caller is interrupted), its whole process tree is stopped and killed as well
(:func:`kill_tree`: every descendant by parent pid, whatever its session, frozen with SIGSTOP first
so that none can fork or be reparented away while the tree is read). A process that runs children
of children (``python -m grader``: the grade, the batch, the service's worker) makes itself a
*child subreaper* (:func:`become_subreaper`), so that an orphan of its tree stays in that tree
rather than moving to init, and kills what is left of its tree when it exits
(:func:`end_own_tree`, grader/__main__.py). The sandbox's bwrap fence (a PID namespace, with
``--die-with-parent``) and its cgroup end such processes too, where the machine has them.
"""
from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from grader.model import Limit, ProcRecord
from grader.sandbox.capture import Capture, OutputCap, read_stream, write_stdin
from grader.setup_check import run_set_up

# After the child has exited and its session was killed, how long the reader
# threads may keep draining what is left in the pipes before they are stopped.
DRAIN_GRACE_S = 1.0
# After SIGKILL on timeout, how long to wait for the child to be reapable.
KILL_WAIT_S = 5.0


class PopenExtra(TypedDict, total=False):
    """The Popen arguments a caller may add (the sandbox's identity and limits), typed for mypy."""

    user: int | str
    group: int | str
    extra_groups: list[int | str]
    preexec_fn: Callable[[], object]
    pass_fds: Collection[int]


def usable_cpus() -> int:
    """The CPUs this process may use: a container's CPU set, not the host's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# A child's clock may be held this long in all (its turn on the GPU never came: a grader bug);
# past it the time limit runs again.
MAX_HOLD_S = 900.0
# How often the wait loop looks at a Control (a cancel, a hold that ended).
CONTROL_TICK_S = 0.05


@dataclass
class Control:
    """What the grader may do to a running child besides its limits (grader/sandbox/turns.py).

    * ``hold()`` / ``resume()``: stop and restart the child's clock while it waits for its turn on
      the GPU (its time limit counts the time it works, not the time it is kept waiting), at most
      :data:`MAX_HOLD_S` in all; a hold begun before the process started counts from its start.
    * ``cancel``: set it to stop the child now (``Limit.CANCELLED``): its answer is no longer needed.
    """

    cancel: threading.Event = field(default_factory=threading.Event)
    _held: float = 0.0
    _since: float | None = None
    _base: float = 0.0  # held before the process started (a start-up held from when it was scheduled)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def started(self) -> None:
        """The process starts now: what was held before does not count (no clock was running)."""
        with self._lock:
            now = 0.0 if self._since is None else time.monotonic() - self._since
            self._base = self._held + now

    def hold(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()

    def resume(self) -> None:
        with self._lock:
            if self._since is not None:
                self._held += time.monotonic() - self._since
                self._since = None

    def held_s(self) -> float:
        """Seconds the clock has been held so far (the current hold included), capped."""
        with self._lock:
            now = 0.0 if self._since is None else time.monotonic() - self._since
            return min(self._held + now - self._base, MAX_HOLD_S)


# ``watch(pid)`` is called every ``watch_every_s`` while the child runs; a Limit it returns ends it.
WATCH_EVERY_S = 0.05
Watch = Callable[[int], "Limit | None"]
# For the first second the watch runs more often: a fork bomb doubles every few milliseconds, and
# once there are thousands of processes the grader itself gets too little CPU to stop them soon.
FAST_WATCH_S = 0.01
FAST_WATCH_FOR_S = 1.0


class _ExitWaiter:
    """Wait for child ``pid`` to exit without reaping it (the zombie keeps the pid, and so the
    process-group id, reserved until :meth:`Popen.wait` reaps it)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.pidfd: int | None = None
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self.pidfd = pidfd_open(pid)
            except OSError:
                self.pidfd = None

    def wait(self, timeout: float, wake: OutputCap | None = None) -> bool:
        """True if the child exited within ``timeout`` seconds; False also when ``wake`` fired first."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self.pidfd is not None:
            with selectors.DefaultSelector() as sel:
                sel.register(self.pidfd, selectors.EVENT_READ)
                if wake is not None and wake.wake_r >= 0:
                    sel.register(wake.wake_r, selectors.EVENT_READ)
                return any(key.fd == self.pidfd for key, _ in sel.select(max(0.0, timeout)))
        # Fallback without pidfd (old kernels, non-Linux): poll.
        delay = 0.001
        while True:
            if wake is not None and wake.passed.is_set():
                return False
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True  # already reaped
            if info is not None:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.02)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def stat_fields() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of /proc/PID/stat after the command name) of every process, zombies included
    (Linux /proc; else nothing). The fields start at the state: state, ppid, pgrp, session, ... (the
    name in parentheses may itself hold spaces and parentheses)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields:
            yield int(name), fields


def live_stat_fields() -> Iterator[tuple[int, list[bytes]]]:
    """:func:`stat_fields` of every live process: zombies and dead ones left out."""
    return ((pid, fields) for pid, fields in stat_fields() if fields[0] not in (b"Z", b"X"))


def zombie_children(parent: int) -> list[int]:
    """The children of ``parent`` that have exited and wait to be reaped (state Z), which
    :func:`children_of` leaves out: a subreaper inherits them from the trees below it, and they stay
    until it waits for them."""
    ppid = str(parent).encode()
    return [pid for pid, fields in stat_fields() if len(fields) > 1 and fields[0] == b"Z" and fields[1] == ppid]


def _session_members(sid: int) -> list[int]:
    """Pids of live processes whose session id is ``sid`` (Linux /proc; else [])."""
    pids: list[int] = []
    for pid, fields in live_stat_fields():
        try:
            if int(fields[3]) == sid:
                pids.append(pid)
        except (IndexError, ValueError):
            continue
    return pids


def _children_by_parent() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for pid, fields in live_stat_fields():
        try:
            kids.setdefault(int(fields[1]), []).append(pid)
        except (IndexError, ValueError):
            continue
    return kids


def children_of(pid: int) -> list[int]:
    """The live children of ``pid``."""
    return _children_by_parent().get(pid, [])


def process_tree(root: int) -> list[int]:
    """The live descendants of ``root`` (not ``root`` itself), parents before their children, by
    each process's parent pid in /proc: whatever their session, group or PID namespace."""
    kids = _children_by_parent()
    found: list[int] = []
    todo = [root]
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _gone(pid: int) -> bool:
    """No such process, or only its zombie is left."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return True
    return not fields or fields[0] in (b"Z", b"X")


# How many times the tree is read again for processes born while it was being stopped.
TREE_ROUNDS = 50


def kill_tree(root: int, *, include_root: bool = True, wait_s: float = KILL_WAIT_S) -> list[int]:
    """SIGKILL ``root`` (unless ``include_root`` is False) and every live descendant; return their pids.

    Each process found is first stopped (SIGSTOP), and the tree is read again until a reading finds
    no new process: a stopped process cannot fork, and its children cannot be reparented out of the
    tree by its death. Then all are killed, and this waits (up to ``wait_s``) until each is gone or
    a zombie, so that a caller who checks right after sees none of them running. Processes this
    user may not signal are left to the fence that holds them (bwrap's ``--die-with-parent``)."""
    stopped: list[int] = []
    if include_root:
        _signal(root, signal.SIGSTOP)
        stopped.append(root)
    for _ in range(TREE_ROUNDS):
        new = [pid for pid in process_tree(root) if pid not in stopped]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped.extend(new)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    for pid in stopped:
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.005)
    return stopped


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


_SUBREAPER = {"on": False, "sweep_steps": False}


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): an orphaned
    descendant is reparented to it rather than to init, so :func:`process_tree` still finds it.
    False where the call is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _SUBREAPER["on"] = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _SUBREAPER["on"] = False
    return _SUBREAPER["on"]


def sweep_after_steps() -> bool:
    """From now on, each step's end kills what this subreaper adopted (:func:`kill_adopted`). Only for
    a process that starts its long-lived children through run_process alone (a grading; a batch, whose
    gradings are such steps): a service worker also holds a grading started otherwise
    (grader/serve/child.py, which sweeps after it itself). False (and nothing changes) unless this
    process is a subreaper (``python -m grader``; never a test's own process)."""
    _SUBREAPER["sweep_steps"] = _SUBREAPER["on"]
    return _SUBREAPER["sweep_steps"]


# The children run_process has started and not yet reaped, each the leader of its own session. Starting
# one holds the lock from Popen until its pid is here, so that a sweep never sees it unregistered.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


def kill_adopted() -> list[int]:
    """Kill (tree and all) the orphans this process adopted as a subreaper: children of its own that
    run_process did not start and that are in a session neither this process's nor a live step's
    (a daemon that left its step's session and its parent). Children started otherwise share this
    process's session, so they are spared. Returns their pids."""
    me = os.getpid()
    own_sid = os.getsid(0)
    adopted: list[int] = []
    with _LIVE_LOCK:
        live = set(_LIVE)
        for pid, fields in live_stat_fields():
            try:
                ppid, sid = int(fields[1]), int(fields[3])
            except (IndexError, ValueError):
                continue
            if ppid == me and pid not in live and sid != own_sid and sid not in live:
                adopted.append(pid)
    for pid in adopted:
        kill_tree(pid)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return adopted


def end_own_tree() -> list[int]:
    """Kill whatever this process's tree still holds (its exit: every step it ran was waited for, so
    whatever is left is a stray), and reap those that were its own children."""
    killed = kill_tree(os.getpid(), include_root=False)
    for pid in killed:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return killed


class Terminated(SystemExit):
    """This process was told to stop (SIGTERM, SIGHUP; SIGINT in ``grade``): raised in its main thread,
    exit code 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


# Set (never cleared) when a signal stops this process: run_process starts nothing more.
_STOPPING = {"on": False}
# Set by run_holding_tree: this process holds its tree, so a signal may stop it at once.
_HOLDING = {"on": False}


def stopping() -> bool:
    """Whether a signal is stopping this process (:func:`run_holding_tree`): its steps were killed, so
    what they return is no verdict."""
    return _STOPPING["on"]


def _terminated(signum: int, _frame: object) -> None:
    """Stop at once: no new step starts, and every step's tree is killed now, so that the threads
    waiting on them return and the main thread unwinds (it may be waiting on one of them). Only
    system calls and /proc reads: a signal handler may interrupt a thread that holds any lock.

    Python runs this handler in the main thread only, between two bytecodes. The kernel hands a
    signal sent to the process to any thread that does not block it; when that is another thread,
    a main thread blocked in a wait (a future, a join) would run it only once the wait ended: a
    SIGHUP waited for an endless compile to die of its own limits (tests/test_stop_signals.py sends
    the signal to another thread). :func:`_watch_stop_signals` kills the steps at once whichever
    thread got the signal, and wakes the main thread from a wait that no step ends (the GPU's lock),
    so that this runs."""
    _STOPPING["on"] = True
    kill_tree(os.getpid(), include_root=False)
    raise Terminated(signum)


def _watch_stop_signals(read_fd: int) -> None:
    """The thread behind :func:`_terminated`. Python's C-level handler writes each caught signal's
    number to the wakeup fd (:func:`signal.set_wakeup_fd`), in whatever thread the signal arrived;
    for a signal that stops this process, this thread marks it stopping and kills its steps. It
    takes the lock run_process holds from its check of the mark to its child's registration, so no
    step can start after the kill (a signal handler cannot take that lock). A signal whose handler
    is no longer :func:`_terminated` (the service sets its own) is left to that handler."""
    while True:
        try:
            caught = os.read(read_fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not caught:
            return
        if any(signal.getsignal(signum) is _terminated for signum in caught):
            with _LIVE_LOCK:
                _STOPPING["on"] = True
            kill_tree(os.getpid(), include_root=False)
            # A main thread blocked in a wait that no step ends (the GPU's lock, which another grading
            # holds) is woken: its system call fails with EINTR, Python runs the pending handler.
            main = threading.main_thread().ident
            try:
                if main is not None:
                    signal.pthread_kill(main, _WAKE_MAIN)
            except OSError:  # the main thread has ended
                pass


# Sent by the watcher to the main thread only to interrupt what it is blocked in; its handler does nothing.
_WAKE_MAIN = signal.SIGRTMIN


def _woken(_signum: int, _frame: object) -> None:
    """The handler of :data:`_WAKE_MAIN`: the stop signal's own handler, pending, does the work."""


def _start_stop_watcher() -> None:
    """Start :func:`_watch_stop_signals` (main thread only). Nothing is started where a wakeup fd is
    set already (its owner reads it) or none can be set."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # the C handler must never block on it
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    signal.signal(_WAKE_MAIN, _woken)
    threading.Thread(target=_watch_stop_signals, args=(read_fd,), name="stop-signals", daemon=True).start()


def run_holding_tree(main: Callable[[], int]) -> int:
    """Run ``main`` as the owner of its whole process tree (``python -m grader``, grader/run_local.py):
    a child subreaper (:func:`become_subreaper`), ended by SIGTERM or SIGHUP (a closed terminal) as
    by an exit, so that its ``finally`` blocks run, and whatever is left of its tree at the end is
    killed (:func:`end_own_tree`). Without this, a signalled grader left its steps running with no time
    limit: each runs in a session of its own, out of the terminal's reach. A SIGHUP that was ignored
    when the process started (``nohup``) stays ignored; commands that handle SIGTERM themselves (the
    service) set their own handler over this one."""
    become_subreaper()
    _HOLDING["on"] = True
    signal.signal(signal.SIGTERM, _terminated)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:
        signal.signal(signal.SIGHUP, _terminated)
    _start_stop_watcher()
    try:
        return main()
    finally:
        end_own_tree()


def run_entry_point(load: Callable[[], Callable[[], int]], *, check_first: bool = True) -> int:
    """The exit code of an entry point that holds its tree (``python -m grader``, grader/run_local.py,
    ``python -m grader.deploy.batch`` and ``python -m grader.deploy.gradescope``): the set-up check
    (grader/setup_check.py: run_set_up; ``check_first`` as there), then the command ``load`` imports,
    run by :func:`run_holding_tree`. ``load`` imports the command's module only after the check, so a
    missing package is one line, not a traceback."""
    return run_set_up(lambda: run_holding_tree(load()), check_first=check_first)


def stop_at_once_on(signum: int) -> bool:
    """Let ``signum`` stop this process as SIGTERM does (``grade``: Ctrl-C, whose KeyboardInterrupt
    would wait for the running steps and leave no results.json). Only in a process that holds its tree
    (:func:`run_holding_tree`; never a test's own process); True when set."""
    if not _HOLDING["on"] or signal.getsignal(signum) == signal.SIG_IGN:
        return False
    signal.signal(signum, _terminated)
    return True


def kill_session(sid: int) -> None:
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


def run_process(
    command: list[str],
    *,
    timeout_s: float,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    output_limit: int,
    stdin_data: bytes | None = None,
    popen_extra: PopenExtra | None = None,
    watch: Watch | None = None,
    watch_every_s: float = WATCH_EVERY_S,
    fast_start: bool = True,
    output_cap: int | None = None,
    kill_extra: Callable[[], None] | None = None,
    control: Control | None = None,
    stdout_sink: Callable[[bytes], None] | None = None,
) -> ProcRecord:
    """Run ``command`` until it exits or a limit ends it; the record says which (``limit``).

    ``popen_extra``: more :class:`subprocess.Popen` arguments (``user``, ``preexec_fn``,
    ``pass_fds``). ``output_cap``: total bytes on stdout+stderr after which the child is stopped
    (``Limit.OUTPUT``). ``watch``: see :data:`Watch`; ``fast_start``: watched every :data:`FAST_WATCH_S`
    for its first :data:`FAST_WATCH_FOR_S` (a step that may fork), else every ``watch_every_s`` from the
    start. ``kill_extra``: called with the session kill
    (a cgroup's kill), so that processes outside the session die as promptly. ``control``: a
    :class:`Control` whose held time extends the time limit and whose cancel stops the child.
    ``stdout_sink``: gets every chunk of stdout as it is read (the record still keeps head and tail).
    """
    start = time.monotonic()
    if control is not None:
        control.started()
    with _LIVE_LOCK:
        if _STOPPING["on"]:
            return ProcRecord(command=command, returncode=None, wall_s=0.0, timeout_s=float(timeout_s),
                              stderr="not started: the grader is stopping (it was sent a signal)")
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                **(popen_extra or PopenExtra()),
            )
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            name = command[0] if command else "(empty command)"
            return ProcRecord(command=command, returncode=None, wall_s=time.monotonic() - start,
                              stderr=f"could not start {name}: {exc}", timeout_s=float(timeout_s))
        _LIVE.add(proc.pid)

    stop = threading.Event()
    out_cap, err_cap = Capture(output_limit, stdout_sink), Capture(output_limit)
    total_cap = OutputCap(output_cap, (out_cap, err_cap))
    assert proc.stdout is not None and proc.stderr is not None
    threads = [threading.Thread(target=read_stream, args=(pipe.fileno(), cap, stop, total_cap.check), daemon=True)
               for pipe, cap in ((proc.stdout, out_cap), (proc.stderr, err_cap))]
    if stdin_data is not None:
        assert proc.stdin is not None
        stdin_fd = os.dup(proc.stdin.fileno())  # the writer owns (and closes) this copy
        proc.stdin.close()
        threads.append(threading.Thread(target=write_stdin, args=(stdin_fd, bytes(stdin_data), stop), daemon=True))
    for t in threads:
        t.start()

    def kill_all(tree: bool) -> None:
        if tree:  # still running: its whole tree, whatever sessions it made, before it can be reparented
            kill_tree(proc.pid)
        if kill_extra is not None:
            kill_extra()
        kill_session(proc.pid)

    limit: Limit | None = None
    waiter = _ExitWaiter(proc.pid)
    next_watch = start + (FAST_WATCH_S if fast_start else watch_every_s)
    try:
        while True:
            now = time.monotonic()
            left = start + timeout_s + (control.held_s() if control is not None else 0.0) - now
            if left <= 0:
                limit = Limit.TIME
                break
            if control is not None and control.cancel.is_set():
                limit = Limit.CANCELLED
                break
            # Without a watch one wait covers the whole time limit: the output cap needs no tick (a
            # reader wakes the wait the moment the cap is passed). A control's tick does not call the
            # watch sooner than its own interval.
            tick = float("inf") if watch is None else max(0.0, next_watch - now)
            if control is not None:
                tick = min(tick, CONTROL_TICK_S)
            if waiter.wait(min(left, tick), total_cap):
                break
            if total_cap.passed.is_set():
                limit = Limit.OUTPUT
                break
            now = time.monotonic()
            if watch is not None and now >= next_watch:
                limit = watch(proc.pid)
                if limit is not None:
                    break
                fast = fast_start and now - start < FAST_WATCH_FOR_S
                next_watch = time.monotonic() + (FAST_WATCH_S if fast else watch_every_s)
        wall_s = time.monotonic() - start
        # Exited or not, nothing the child started may outlive it. Ended by a limit, it is still
        # running: its tree is stopped and killed from the top (the child first, so that under a fork
        # bomb nothing new is born; bwrap's namespace dies with it), before anything in it can be
        # reparented away by a parent's death.
        kill_all(limit is not None)
        try:
            returncode: int | None = proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # unkillable (D state); report the kill we sent
            returncode = -signal.SIGKILL
        if limit is not None:
            wall_s = time.monotonic() - start
        # Let the readers drain what is left in the pipes, then stop them.
        drain_deadline = time.monotonic() + DRAIN_GRACE_S
        for t in threads:
            t.join(max(0.0, drain_deadline - time.monotonic()))
        if limit is None and total_cap.passed.is_set():
            limit = Limit.OUTPUT  # past the cap, then exited before the kill: the same verdict either way
    except BaseException:  # KeyboardInterrupt etc. in the grader: leave nothing running
        kill_all(True)
        try:
            proc.kill()
            proc.wait(timeout=KILL_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc.pid)
        # A daemon of this step that left its session and its parent is this process's now (a
        # subreaper's): killed here, at the step's end, not at the grading's.
        if _SUBREAPER["sweep_steps"]:
            kill_adopted()
        waiter.close()
        stop.set()
        for t in threads:
            t.join(1.0)
        total_cap.close()
        for f in (proc.stdout, proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    return ProcRecord(
        command=command,
        returncode=returncode,
        timed_out=limit is Limit.TIME,
        wall_s=wall_s,
        stdout=out_cap.text(),
        stderr=err_cap.text(),
        stdout_bytes=out_cap.total,
        stderr_bytes=err_cap.total,
        timeout_s=float(timeout_s),
        limit=limit,
    )
