"""Per-step cgroups (v2): ``memory.max`` (no swap, an OOM kills the whole step), ``pids.max``.

Used when the grader's own cgroup delegates the memory or pids controller to children, or lets us
enable it (root, or a cgroup with no process of its own). ``memory.events`` and ``pids.events`` say
which limit was hit; ``cgroup.kill`` ends every member, setsid'd daemons included. Without one,
grader.sandbox.limits' rlimits and watchdog stand in.
"""
from __future__ import annotations

import errno
import itertools
import os
import signal
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_CGROUP_PREFIX = "gemm-grader"
_SELF_PREFIX = f"{_CGROUP_PREFIX}-self-"  # the leaf a grader moves itself into (see _move_into_own_leaf)


@dataclass(frozen=True)
class CgroupSupport:
    """Where per-step cgroups are made (``parent``) and with which of the memory and pids
    controllers (``controllers``), or why there are none / not both (``reason``)."""

    parent: Path | None
    controllers: frozenset[str]
    reason: str

    @property
    def memory(self) -> bool:
        return "memory" in self.controllers

    @property
    def pids(self) -> bool:
        return "pids" in self.controllers


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    return Path(parts[1])
    except OSError:
        pass
    return None


def _enable(base: Path, wanted: frozenset[str]) -> None:
    enabled = set((base / "cgroup.subtree_control").read_text().split())
    if not wanted <= enabled:
        (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted - enabled)))


def _move_into_own_leaf(base: Path, wanted: frozenset[str]) -> str:
    """cgroup v2 hands controllers to children only from a cgroup that holds no process itself.
    Alone in ``base`` (``systemd-run --scope -p Delegate=yes python -m grader ...``), the grader
    moves into a leaf of its own, as systemd and container runtimes do, and enables them; among
    other processes it is not ours to rearrange. Returns why not, or ""."""
    try:
        others = [int(p) for p in (base / "cgroup.procs").read_text().split() if int(p) != os.getpid()]
    except (OSError, ValueError) as exc:
        return f"cannot read {base}/cgroup.procs ({exc})"
    if others:
        return (f"cgroup {base} holds other processes; to give steps a cgroup, run the grader alone in a "
                f"delegated one (systemd-run --scope -p Delegate=yes ...)")
    leaf = base / f"{_SELF_PREFIX}{os.getpid()}"
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
        _enable(base, wanted)
        return ""
    except OSError as exc:
        try:
            (base / "cgroup.procs").write_text(str(os.getpid()))
            leaf.rmdir()
        except OSError:
            pass
        return f"cannot make limited child cgroups under {base} ({exc.strerror})"


@lru_cache(maxsize=1)
def cgroup_support() -> CgroupSupport:
    """Find (once per process) a cgroup v2 under which this process may create limited children."""
    none = frozenset[str]()
    mount = _cgroup2_mount()
    if mount is None:
        return CgroupSupport(None, none, "no cgroup v2 hierarchy is mounted")
    try:
        own = next(line.split(":", 2)[2].strip() for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if line.startswith("0::"))
    except (OSError, StopIteration):
        return CgroupSupport(None, none, "this process is in no cgroup v2")
    base = mount / own.lstrip("/")
    if base.name.startswith(_SELF_PREFIX):  # started by a grader that moved there (a batch): share its parent
        base = base.parent
    try:
        wanted = frozenset(c for c in (base / "cgroup.controllers").read_text().split() if c in ("memory", "pids"))
    except OSError as exc:
        return CgroupSupport(None, none, f"cannot read {base}/cgroup.controllers ({exc.strerror})")
    if not wanted:
        return CgroupSupport(None, none, f"cgroup {base} offers neither the memory nor the pids controller")
    try:
        _enable(base, wanted)
    except OSError as exc:
        why = _move_into_own_leaf(base, wanted) if exc.errno == errno.EBUSY else \
            f"cannot make limited child cgroups under {base} ({exc.strerror})"
        if why:
            return CgroupSupport(None, none, why)
    try:
        probe = base / f"{_CGROUP_PREFIX}-probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as exc:
        return CgroupSupport(None, none, f"cannot make child cgroups under {base} ({exc.strerror})")
    missing = {"memory", "pids"} - wanted
    return CgroupSupport(base, wanted, f"cgroup {base} offers no {missing.pop()} controller" if missing else "")


class RunCgroup:
    """One step's cgroup: created with its limits, joined by the child, read, killed, removed."""

    _ids = itertools.count(1)  # next() is one step under the GIL: steps run side by side never share a name

    def __init__(self, support: CgroupSupport, memory_bytes: int, processes: int):
        assert support.parent is not None
        self.path = support.parent / f"{_CGROUP_PREFIX}-{os.getpid()}-{next(RunCgroup._ids)}"
        self.path.mkdir()
        if support.memory:
            (self.path / "memory.max").write_text(str(int(memory_bytes)))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                try:
                    (self.path / name).write_text(value)
                except OSError:  # no swap accounting / an old kernel: the limit above still holds
                    pass
        if support.pids:
            (self.path / "pids.max").write_text(str(int(processes)))
        self.procs = str(self.path / "cgroup.procs")

    def _events(self, name: str, key: str) -> int:
        try:
            for line in (self.path / name).read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def out_of_memory(self) -> bool:
        return self._events("memory.events", "oom_kill") > 0

    def hit_pids_max(self) -> bool:
        return self._events("pids.events", "max") > 0

    def kill(self) -> None:
        """SIGKILL every member (cgroup.kill, Linux 5.14+; else one by one)."""
        try:
            (self.path / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass
        for _ in range(3):  # members may fork while we kill; pids.max bounds how long
            try:
                pids = [int(p) for p in Path(self.procs).read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def remove(self) -> None:
        deadline = time.monotonic() + 2.0
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY while the killed members are still being torn down
                if time.monotonic() > deadline:
                    return
                self.kill()
                time.sleep(0.01)
