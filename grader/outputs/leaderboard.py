"""Gradescope leaderboard entries: TFLOP/s and % of cuBLAS for the 2D and WMMA stages.

Only a stage whose kernel passed correctness and was timed gets entries (a speed is never
reported for a wrong result). Gradescope shows the leaderboard when it is switched on in the
assignment's settings; students appear under pseudonyms.

The values come from the grading: either a :class:`grader.pipeline.Grading` (``outcomes[sid]`` with
``correct`` and ``timing.tflops`` / ``timing.fraction_of_baseline``) or the ``grading.json`` that
:func:`grader.outputs.write.write_outputs` writes (``stages[sid]["correct"]`` and
``stages[sid]["timing"]``). Standard library only.
"""
from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping

# The stages on the leaderboard (rubric stage ids); GRADER_LEADERBOARD_STAGES=a,b overrides.
# Ids that the grading does not have are skipped.
LEADERBOARD_STAGES = ("blocktiling_2d", "wmma")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def leaderboard_stages(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    raw = (os.environ if env is None else env).get("GRADER_LEADERBOARD_STAGES", "")
    ids = tuple(s.strip() for s in raw.split(",") if s.strip())
    return ids or LEADERBOARD_STAGES


def leaderboard_entries(grading: Any, stages: Iterable[str] | None = None,
                        titles: Mapping[str, str] | None = None) -> list[dict]:
    """Gradescope ``leaderboard`` entries for ``grading`` (a Grading or a grading.json dict).

    Two entries per leaderboard stage whose kernel is correct and timed, in stage order:
    ``"<title>: TFLOP/s"`` and ``"<title>: % of cuBLAS"`` (``order: desc``, higher ranks first).
    ``titles`` maps stage ids to names when ``grading`` does not carry them (grading.json).
    An empty list when no stage qualifies (e.g. graded without a GPU).
    """
    outcomes = _get(grading, "outcomes")
    if outcomes is None:
        outcomes = _get(grading, "stages") or {}
    entries: list[dict] = []
    for sid in (leaderboard_stages() if stages is None else tuple(stages)):
        o = outcomes.get(sid) if isinstance(outcomes, Mapping) else None
        if o is None or _get(o, "correct") is not True:
            continue
        timing = _get(o, "timing")
        tflops = _number(_get(timing, "tflops"))
        fraction = _number(_get(timing, "fraction_of_baseline"))
        if timing is None or tflops is None or fraction is None:
            continue
        # The same names from a Grading and from grading.json (pass the rubric's titles with it),
        # so the columns do not change with the path. % of the stage's own cuBLAS baseline
        # (SGEMM for FP32 stages, cublasGemmEx FP16 for WMMA).
        title = (titles or {}).get(sid) or _get(_get(o, "stage"), "title") or sid
        entries.append({"name": f"{title}: TFLOP/s", "value": round(tflops, 2), "order": "desc"})
        entries.append({"name": f"{title}: % of cuBLAS", "value": round(100 * fraction, 1), "order": "desc"})
    return entries
