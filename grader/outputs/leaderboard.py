"""Gradescope leaderboard entries: TFLOP/s and % of cuBLAS for the 2D, WMMA and Hopper stages.

Only a stage whose kernel passed correctness and was timed gets entries (a speed is never
reported for a wrong result). Gradescope shows the leaderboard when it is switched on in the
assignment's settings; students appear under pseudonyms.

The values come from a :class:`grader.grading.Grading`, fresh from the pipeline or read back
from its grading.json with :func:`grader.grading.load_grading`: the same entries either way.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: grader.deploy.gradescope imports this at startup, standard library only
    from grader.evidence.results import LeaderboardEntry
    from grader.grading import Grading

# The stages on the leaderboard (rubric stage ids); GRADER_LEADERBOARD_STAGES=a,b overrides.
# Ids that the grading does not have are skipped.
LEADERBOARD_STAGES = ("blocktiling_2d", "wmma", "hopper")


def _positive(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


def leaderboard_stages(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    raw = (os.environ if env is None else env).get("GRADER_LEADERBOARD_STAGES", "")
    ids = tuple(s.strip() for s in raw.split(",") if s.strip())
    return ids or LEADERBOARD_STAGES


def leaderboard_entries(grading: Grading, stages: Iterable[str] | None = None) -> list[LeaderboardEntry]:
    """Gradescope ``leaderboard`` entries for ``grading``.

    Two entries per leaderboard stage whose kernel is correct and timed, in stage order:
    ``"<title>: TFLOP/s"`` and ``"<title>: % of cuBLAS"`` (``order: desc``, higher ranks first).
    An empty list when no stage qualifies (e.g. graded without a GPU).
    """
    from grader.evidence.results import LeaderboardEntry

    entries: list[LeaderboardEntry] = []
    for sid in (leaderboard_stages() if stages is None else tuple(stages)):
        o = grading.outcomes.get(sid)
        if o is None or o.correct is not True or o.timing is None:
            continue
        tflops, fraction = _positive(o.timing.tflops), _positive(o.timing.fraction_of_baseline)
        if tflops is None or fraction is None:
            continue
        # % of the stage's own cuBLAS baseline (SGEMM for FP32 stages, cublasGemmEx FP16 for WMMA, BF16 for Hopper).
        title = o.stage.title
        entries.append(LeaderboardEntry(f"{title}: TFLOP/s", round(tflops, 2), "desc"))
        entries.append(LeaderboardEntry(f"{title}: % of cuBLAS", round(100 * fraction, 1), "desc"))
    return entries
