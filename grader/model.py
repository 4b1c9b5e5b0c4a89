"""Small result records that every step returns.

A step (compile, run, check, time, profile) never raises for a student's
mistake; it returns one of these records. Records are plain dataclasses so they
serialise to JSON for the results folder and for hand-off between processes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Item statuses. NOT_EVALUATED means the grader could not look (no GPU, no ncu):
# it scores 0 and says why, but it is never reported as the student's failure.
PASSED = "passed"
FAILED = "failed"
NOT_EVALUATED = "not_evaluated"
MANUAL = "manual"  # graded by a person later; 0 automatic points


@dataclass
class ProcRecord:
    """One child process: what ran, how it ended, what it printed (trimmed)."""

    command: list[str]
    returncode: int | None
    timed_out: bool = False
    wall_s: float = 0.0
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0  # total bytes the child wrote, before trimming
    stderr_bytes: int = 0
    timeout_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def brief(self) -> str:
        """One line saying how the process ended, for feedback."""
        if self.timed_out:
            return f"timed out after {self.timeout_s:g} s"
        if self.returncode is None:
            return "did not start"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"


@dataclass
class ItemResult:
    """The verdict on one rubric item."""

    stage: str | None
    item: str
    title: str
    status: str
    score: float
    max_score: float
    message: str = ""
    visibility: str = "visible"
    number: str = ""
    values: dict[str, Any] = field(default_factory=dict)


def to_jsonable(obj: Any) -> Any:
    """Turn records (and containers of them) into JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not valid JSON
        return None
    return obj
