"""How students' processes were fenced on this machine, and each GPU party's turns on the schedule.

Built by grader/sandbox/guard.py (Mode) and grader/sandbox/turns.py (PartyTimeline).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class PartyTimeline:
    """One party's events on the schedule (grading.json's ``timeline``): (wall-clock time, what)."""

    party: str
    events: list[tuple[float, str]]


class Confinement(str, Enum):
    BWRAP = "bwrap"  # namespaces: only the fence's paths, no network, own PID namespace
    WEAK = "weak"  # the session-kill fence: sees the whole machine; a setsid'd daemon may survive


class LimitMethod(str, Enum):
    CGROUP = "cgroup"  # per-step cgroup v2: memory.max, pids.max, cgroup.kill
    RLIMIT = "rlimit"  # RLIMIT_DATA/NPROC/FSIZE and the watchdog


@dataclass(frozen=True)
class Mode:
    """How fenced steps run on this machine, and why not better. Read it; never parse ``describe``."""

    confinement: Confinement
    reason: str  # why WEAK ("" for BWRAP)
    limits: LimitMethod  # CGROUP when a per-step cgroup has at least the memory controller
    limits_reason: str  # why no cgroup, or which controller it lacks ("" when it has both)
    user: str | None  # the student user fenced steps run as (None: the grader's own user)
    bwrap: str | None = None

    def describe(self) -> str:
        who = f"as user {self.user}" if self.user else "as the grader's own user"
        what = "bwrap sandbox" if self.confinement is Confinement.BWRAP else f"weak sandbox ({self.reason})"
        how = "cgroup v2 limits" if self.limits is LimitMethod.CGROUP else "rlimit limits"
        how += f" ({self.limits_reason})" if self.limits_reason else ""
        return f"{what}, {how}, {who}"
