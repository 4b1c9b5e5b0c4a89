"""Small result records that every step returns.

A step (compile, run, check, time, profile) never raises for a student's
mistake; it returns one of these records. Records are plain dataclasses so they
serialise to JSON for the results folder and for hand-off between processes.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum

# One Nsight Compute metric's value as ncu's CSV gives it (grader/profile/ncu.py: parse_value): a number, the
# text of a non-numeric cell such as "(32, 32, 1)", or None for "n/a" and an empty cell.
NcuValue = float | str | None
NcuMetrics = Mapping[str, NcuValue]  # one kernel's metrics, by metric name (StageOutcome.ncu)


class Status(str, Enum):
    """An item's verdict. The values are what results.json and grading.json carry.

    NOT_EVALUATED means the grader could not look (no GPU, no ncu): it scores 0
    and says why, but it is never reported as the student's failure.

    MANUAL and REVIEW both leave the points to a person, for different reasons:

    - MANUAL: a hand-graded item (a free-text answer, the report's reasoning). Its points are
      not the autograder's: on Gradescope they belong to a manually graded question of the
      assignment's outline, so results.json shows the item neutrally, outside the autograder's
      total (grader/outputs/results.py). Whatever the answer, the autograder gives no verdict.
    - REVIEW: an automatic item whose result looks implausible (a kernel faster than cuBLAS
      allows): held at 0 for course staff to look at, and still part of the autograder's total.
    """

    PASSED = "passed"
    FAILED = "failed"
    NOT_EVALUATED = "not_evaluated"
    MANUAL = "manual"  # graded by hand (a person's question on Gradescope); never the autograder's points
    REVIEW = "review"  # an automatic item held for course staff to review; 0 until they do

    def __str__(self) -> str:  # f-strings and str() give the JSON value
        return self.value


class Bonus(str, Enum):
    """How an item's points count (a bonus stage's items; settings.bonus in rubric.yaml).

    EXTRA: on top of the total, so full marks plus a bonus pass 100 %. SEPARATE: a total of their
    own, reported beside the score and never added to it. Either way they are outside max_score.
    """

    NONE = "none"
    EXTRA = "extra"
    SEPARATE = "separate"

    def __str__(self) -> str:
        return self.value


class Cause(str, Enum):
    """Whose doing it is that something was not looked at; decides the item's status."""

    STUDENT = "student"  # the submission gave nothing to look at (did not compile, not correct): FAILED
    GRADER = "grader"  # the grader could not look (a tool missing, counters locked): NOT_EVALUATED
    # The grader could not look because the run had no usable GPU: NOT_EVALUATED, and the item
    # says so in ItemResult.needs_gpu (the Gradescope no-GPU policy shows it as pending GPU grading).
    NO_GPU = "no_gpu"

    @property
    def status(self) -> Status:
        return Status.FAILED if self is Cause.STUDENT else Status.NOT_EVALUATED


@dataclass(frozen=True)
class Gap:
    """Why something (a profile, a timing) is missing: whose doing, and words for people.

    Decisions read ``cause``; ``message`` is only shown (it keeps its "not profiled:" /
    "not evaluated:" wording for readers, but nothing parses it).
    """

    cause: Cause
    message: str


class Verdict(str, Enum):
    """How a stage's correctness run ended; set where it happens (run, checker, racecheck)."""

    NOT_EVALUATED = "not_evaluated"  # the grader could not run it (no GPU), or it is still pending
    NOT_COMPILED = "not_compiled"
    NOT_RUN = "not_run"  # the submission's time budget was used up by the stages before it
    TIMED_OUT = "timed_out"
    OUTPUT_LIMIT = "output_limit"  # printed past settings.output_limit_bytes: stopped at once (ProcRecord.limit)
    CRASHED = "crashed"  # could not be loaded, raised a CUDA error, or ended abnormally
    NO_VERDICT = "no_verdict"  # ran, but the reference checker gave no verdict for it
    WRONG = "wrong"
    RACE = "race"  # racecheck found a shared-memory hazard
    CORRECT = "correct"

    @property
    def correct(self) -> bool | None:
        """True / False, or None when correctness was not judged (no GPU, did not compile)."""
        if self is Verdict.CORRECT:
            return True
        if self in (Verdict.NOT_EVALUATED, Verdict.NOT_COMPILED):
            return None
        return False


class Limit(str, Enum):
    """Which of the sandbox's limits ended a process (``ProcRecord.limit``); set by grader.sandbox.guard."""

    TIME = "time"
    OUTPUT = "output"  # more output than the fence allows in total (what is kept is trimmed anyway)
    MEMORY = "memory"
    PROCESSES = "processes"
    FILE_SIZE = "file_size"  # wrote one file past the fence's file_bytes (SIGXFSZ)
    SCRATCH = "scratch"  # the step's work folder grew past the fence's scratch_bytes
    CANCELLED = "cancelled"  # the grader no longer needed it (grader.sandbox.process.Control.cancel)

    def __str__(self) -> str:
        return self.value


_LIMIT_WORDS = {Limit.OUTPUT: "output", Limit.MEMORY: "memory", Limit.PROCESSES: "process-count",
                Limit.FILE_SIZE: "file-size", Limit.SCRATCH: "disk-space (work folder)", Limit.CANCELLED: "cancel"}


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
    limit: Limit | None = None  # the sandbox limit that ended it (TIME whenever timed_out), else None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.limit is None

    def brief(self) -> str:
        """One line saying how the process ended, for feedback."""
        if self.timed_out:
            return f"timed out after {self.timeout_s:g} s"
        if self.limit is not None and self.limit in _LIMIT_WORDS:
            return f"stopped: over its {_LIMIT_WORDS[self.limit]} limit"
        if self.returncode is None:
            return "did not start"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"


@dataclass
class Measured:
    """What an item's verdict measured or recorded, for people and tools (grading.json's ``items[].values``,
    results.json's ``extra_data.values``). Each field belongs to the items that set it and is absent from the
    JSON while None; the JSON keeps the fields in this order. A non-finite number is kept (NaN): JSON writes it
    null, and a null number reads back as NaN, so a stored grading writes the same file again.
    """

    # stage items (grader/rubric/kinds.py): the number a kind is graded on is the field its ``measured_key`` names
    registers: int | None = None  # compiles, no_spills: registers per thread
    opcodes: Mapping[str, int] | None = None  # sass: the forbidden opcodes found, with their counts
    fraction_of_baseline: float | None = None
    tflops: float | None = None
    ratio: float | None = None  # fraction_of_peak
    speedup: float | None = None  # speedup_over_stage
    value: float | None = None  # ncu: the expression's value
    threshold: float | None = None  # ncu: the level it was compared with (its own expression's value)
    # the occupancy section (grader/occupancy/)
    occupancy_pct: float | None = None
    blocks: int | None = None
    calls: int | None = None
    launches: int | None = None
    unchecked_lines: list[int] | None = None
    times_ms: Mapping[str, float] | None = None
    plot: str | None = None
    traceback: str | None = None
    # the report's values items (grader/writeup/run.py): how many cited values matched, and so on
    matched: int | None = None
    mismatched: int | None = None
    unreadable: int | None = None
    unchecked: int | None = None
    # a speed item held by its stage's technique items (grader/score/stages.py: gate_speed): their numbers
    gated_by: list[str] | None = None
    # a hand-graded item: what was recorded for course staff, by answer path ("ex2.explanation"; None: no answer).
    # Written as keys of their own beside the fields above.
    answers: Mapping[str, str | None] = field(default_factory=dict)

    def json_form(self) -> dict[str, object]:
        """The JSON object: the fields that are set, in order, and the answers as keys of their own."""
        out: dict[str, object] = {f: v for f in _MEASURED_FIELDS if (v := getattr(self, f)) is not None}
        out.update(self.answers)
        return out

    @classmethod
    def from_json_form(cls, data: object) -> object:
        """:meth:`json_form`'s object back to the fields (grader/records.py reads it so): a key that is not a
        field is an answer, and a null number was a non-finite one."""
        if not isinstance(data, dict):
            return data
        fields = {k: (math.nan if v is None and k in _MEASURED_FLOATS else v) for k, v in data.items()
                  if k in _MEASURED_FIELDS}
        return {**fields, "answers": {k: v for k, v in data.items() if k not in _MEASURED_FIELDS}}

    @property
    def empty(self) -> bool:
        return self == Measured()


_MEASURED_FIELDS = tuple(f.name for f in fields(Measured) if f.name != "answers")
_MEASURED_FLOATS = frozenset(("fraction_of_baseline", "tflops", "ratio", "speedup", "value", "threshold",
                              "occupancy_pct"))


@dataclass
class ItemResult:
    """The verdict on one rubric item."""

    stage: str | None
    item: str
    title: str
    status: Status
    score: float
    max_score: float
    message: str = ""
    visibility: str = "visible"
    number: str = ""
    values: Measured = field(default_factory=Measured)
    # Not evaluated only because the run had no usable GPU (a Gap with Cause.NO_GPU): a GPU run
    # would grade it. Written to grading.json and results.json (extra_data.needs_gpu), where
    # grader/deploy/gradescope/policy.py reads it; never inferred from the message.
    needs_gpu: bool = False
    bonus: Bonus = Bonus.NONE  # a bonus stage's item: outside max_score; in the score only when EXTRA

    @property
    def counted_score(self) -> float:
        """What this item adds to the submission's score."""
        return 0.0 if self.bonus is Bonus.SEPARATE else self.score

    @property
    def counted_max(self) -> float:
        """What this item adds to the total the score is out of."""
        return 0.0 if self.bonus is not Bonus.NONE else self.max_score
