"""The record of one grading: what the pipeline builds, grading.json holds, and every output reads.

One model in two forms. :meth:`Grading.to_json` is what ``grading.json`` holds;
:func:`load_grading` (or :meth:`Grading.from_json`) reads it back into the same typed
objects, equal to the ones that were written, so results.json, summary.md, the profile
page and the leaderboard come out the same from a fresh grading or from its file.

grading.json keeps the keys people and tools read: ``device``, ``device_reason`` and
``compiler`` at the top, ``stages.<id>.ncu`` / ``.profile_n`` / ``.timing`` / ``.correct``
per stage (``correct`` is derived from the stage's typed ``verdict``, written for readers
and ignored on load).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grader.clock import Phase
from grader.evidence.compile import CompileResult, SassResult
from grader.evidence.limits import Peaks, StageLimit
from grader.evidence.profile import Agreement, TimingSummary
from grader.evidence.protocol import BenchRun, CaseVerdict, Kernel, LaunchShape, ProbeResult
from grader.evidence.rubric import Stage
from grader.evidence.sandbox import Mode, PartyTimeline
from grader.evidence.tools import Tool
from grader.model import Bonus, Gap, ItemResult, NcuMetrics, Verdict
from grader.records import RecordError, from_jsonable, to_jsonable

FORMAT = 2  # grading.json's layout; 1 was the untyped dump, which cannot be read back


class GradingFormatError(ValueError):
    """grading.json is missing, not JSON, or not the layout this grader writes."""


@dataclass
class Environment:
    """What the grading ran on: the device probe's report, the tools, the peaks."""

    device: ProbeResult | None  # the probe child's description of the GPU, None when the probe gave none
    device_reason: str  # why there is no GPU ("" when there is one)
    nvcc: Tool | None
    cuobjdump: Tool | None
    arch_flags: list[str]
    peaks: Peaks
    # How students' processes were fenced (bwrap, or the weak fallback and why): recorded, so a
    # grading made without the sandbox says so in grading.json and summary.md.
    sandbox: Mode | None = None

    @property
    def has_gpu(self) -> bool:
        return self.device is not None and self.device.ok

    @property
    def gpu(self) -> ProbeResult | None:
        """The probe's description of a present GPU; None without one."""
        return self.device if self.device is not None and self.device.ok else None


@dataclass
class StageOutcome:
    """Everything that happened to one stage. Decisions read the typed fields
    (``verdict``, ``ncu_gap.cause``); the messages are only for people."""

    stage: Stage
    compile: CompileResult | None = None
    sass: SassResult | None = None
    verdict: Verdict = Verdict.NOT_EVALUATED
    correctness_message: str = ""
    cases: list[CaseVerdict] = field(default_factory=list)  # the checker's verdict per size
    timing: TimingSummary | None = None
    gpu_reason: str = ""  # why GPU work was not done, "" when it was
    run_output: str = ""  # trimmed output of the student's run, for feedback
    bench: BenchRun | None = None  # raw timings from the runner (unjudged)
    ncu: NcuMetrics | None = None  # {metric name: value} for this stage's kernel, from one ncu launch
    ncu_gap: Gap | None = None  # why there are no ncu metrics (None when there are)
    profile_n: int = 0  # the size the kernel was profiled at (N in ncu expressions)
    # ncu's launch against the stage child's launches at the profile size and its timed ones
    # (grader/profile/agreement.py); None when not compared
    agreement: Agreement | None = None
    run_limit: StageLimit | None = None  # the stage child's time limit in force, and where it came from
    # Why this machine cannot grade the stage at all (its rubric's requires_arch is not the target:
    # "not evaluated on this GPU (needs sm_90a, a Hopper GPU) ..."); every item then says so and scores 0.
    unsupported: str = ""

    @property
    def correct(self) -> bool | None:
        """True / False, or None when correctness was not judged (no GPU, did not compile)."""
        return self.verdict.correct

    @property
    def ncu_reason(self) -> str:
        return self.ncu_gap.message if self.ncu_gap else ""

    def launch_spec(self) -> Kernel:
        """What a child needs to launch this compiled stage's kernel (the stage, profile and sanitize
        children alike): the cubin, the kernel, its inputs and operands, the launch shape and, for a
        tensor-map stage, the declared TMA boxes (grader/children/tma.py)."""
        c = self.compile
        assert c is not None and c.cubin is not None and c.launch is not None  # only compiled stages launch
        boxes = c.boxes
        return Kernel(cubin=str(Path(c.cubin).resolve()), kernel=self.stage.kernel, inputs=self.stage.inputs,
                      operands=self.stage.operands, id=self.stage.id,
                      launch=LaunchShape(block=list(c.launch.block), tile=list(c.launch.tile), smem=c.launch.smem),
                      boxes=None if boxes is None else [boxes.k, boxes.a_rows, boxes.b_rows, boxes.swizzle])


@dataclass
class ProfileRun:
    """What grading.json keeps of the one Nsight Compute run (each stage's metrics are in its outcome)."""

    command: list[str] = field(default_factory=list)
    reason: str = ""  # why the whole run gave nothing ("" when it gave metrics)
    wall_s: float | None = None
    notes: list[str] = field(default_factory=list)
    dropped_metrics: list[str] = field(default_factory=list)  # ncu did not know them here


@dataclass
class Grading:
    submission: str
    env: Environment
    outcomes: Mapping[str, StageOutcome]
    items: list[ItemResult]
    seconds: float
    notes: list[str] = field(default_factory=list)
    profile: ProfileRun | None = None  # the one profiling run, when there was one
    phases: list[Phase] = field(default_factory=list)  # where the time went (grader/clock.py)
    # What graded it: the rubric file's sha256 and the grader's code version (grader.code_version),
    # so a batch knows which of its gradings are stale.
    rubric_sha256: str = ""
    grader_version: str = ""
    # The GPU schedule's children and when each started, waited at a gate, got its turn and ended
    # (grader/sandbox/turns.py: Schedule.timeline; wall-clock times like the phases' ``ended``).
    timeline: list[PartyTimeline] = field(default_factory=list)
    # CPU seconds (user + system) of the grading process and every process it waited for: what one
    # grading costs a host whose CPUs a batch's gradings share. None: not measured (a rebuilt record).
    cpu_s: float | None = None
    # Of which the grading process itself (its threads watch, feed and read every child): when this
    # nears the wall time, the process is what the children wait on. None: not measured.
    cpu_self_s: float | None = None
    # The text of the rubric that graded it (``rubric_sha256`` is its hash): what a re-score under an
    # edited rubric compares with (grader/instructor/rescore.py). "": not kept (an older grading).
    rubric_text: str = ""
    # The per-GPU calibration entry it was graded with (its file's text, grader/rubric/calibration.py), "" when the
    # rubric's defaults graded it: a re-score applies it again to the rubric it re-scores under.
    calibration: str = ""

    @property
    def gpu_graded(self) -> bool:
        """Whether the GPU items were judged (a device was there), not left "not evaluated"."""
        return self.env.has_gpu

    @property
    def score(self) -> float:
        """The points earned; a bonus stage's count too when settings.bonus is "extra"."""
        return round(sum(i.counted_score for i in self.items), 4)

    @property
    def max_score(self) -> float:
        """What the score is out of: every item but the bonus stages'."""
        return sum(i.counted_max for i in self.items)

    @property
    def bonus(self) -> tuple[float, float]:
        """(earned, possible) over the bonus stages' items."""
        bonus = [i for i in self.items if i.bonus is not Bonus.NONE]
        return round(sum(i.score for i in bonus), 4), sum(i.max_score for i in bonus)

    def to_json(self) -> dict[str, object]:
        """The grading.json dict (JSON-ready)."""
        env = self.env
        stages = {}
        for sid, o in self.outcomes.items():
            stages[sid] = {**to_jsonable(o), "correct": o.correct}
        return to_jsonable({
            "format": FORMAT, "submission": self.submission, "seconds": self.seconds,
            "rubric_sha256": self.rubric_sha256, "grader_version": self.grader_version,
            "gpu_graded": self.gpu_graded, "phases": self.phases,
            "score": self.score, "max_score": self.max_score,
            "bonus": dict(zip(("score", "max_score"), self.bonus)), "notes": self.notes,
            "device": env.device, "device_reason": env.device_reason, "arch_flags": env.arch_flags,
            "compiler": env.nvcc, "cuobjdump": env.cuobjdump, "peaks": env.peaks, "sandbox": env.sandbox,
            "ncu": self.profile, "stages": stages, "items": self.items, "timeline": self.timeline,
            "cpu_seconds": self.cpu_s, "cpu_seconds_grader": self.cpu_self_s, "rubric": self.rubric_text,
            "calibration": self.calibration,
        })

    @classmethod
    def from_json(cls, data: object) -> Grading:
        """The Grading a grading.json dict holds. Raises GradingFormatError naming what is wrong."""
        if not isinstance(data, dict):
            raise GradingFormatError(f"grading.json: expected an object, found {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise GradingFormatError(f"grading.json: format {data.get('format')!r}, expected {FORMAT} "
                                     "(written by another version of the grader)")
        shaped = {
            "submission": data.get("submission"), "seconds": data.get("seconds"), "notes": data.get("notes", []),
            "env": {"device": data.get("device"), "device_reason": data.get("device_reason"),
                    "nvcc": data.get("compiler"), "cuobjdump": data.get("cuobjdump"),
                    "arch_flags": data.get("arch_flags"), "peaks": data.get("peaks"),
                    "sandbox": data.get("sandbox")},
            "profile": data.get("ncu"), "outcomes": data.get("stages"), "items": data.get("items"),
            "phases": data.get("phases", []), "rubric_sha256": data.get("rubric_sha256", ""),
            "grader_version": data.get("grader_version", ""), "timeline": data.get("timeline", []),
            "cpu_s": data.get("cpu_seconds"), "cpu_self_s": data.get("cpu_seconds_grader"),
            "rubric_text": data.get("rubric") or "", "calibration": data.get("calibration") or "",
        }
        if isinstance(shaped["outcomes"], dict):  # a stage without a benchmark was written {} before it was a record
            shaped["outcomes"] = {k: {**v, "bench": None} if isinstance(v, dict) and v.get("bench") == {} else v
                                  for k, v in shaped["outcomes"].items()}
        try:
            return from_jsonable(cls, shaped, strict=False)  # a stage's derived "correct" is not a field
        except RecordError as exc:
            raise GradingFormatError(f"grading.json: {exc}") from None

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n", encoding="utf-8")


def load_grading(path: str | Path) -> Grading:
    """Read grading.json back into a Grading. Raises GradingFormatError (never a bare OSError)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise GradingFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise GradingFormatError(f"{path}: not JSON ({exc})") from None
    return Grading.from_json(data)
