"""What students see for GPU items when the grading machine has no GPU (Gradescope).

The grader marks every item it could not look at ``not_evaluated`` (0 points, "not evaluated:
<why>"). Without a GPU that is every correctness, timing, Nsight Compute and measured-occupancy
item. This post-processing step on ``results.json`` says it in students' terms, by policy:

``pending`` (default)
    The item stays visible, named "(pending GPU grading) <title>", shown neutrally (neither passed
    nor failed) and outside the score, as hand-graded items are: no ``score``, ``max_score`` or
    ``status``, its points in ``extra_data.pending_gpu_points``. Its text says when it is graded: by
    the course's GPU grading service in this same run when the package names one, otherwise by
    course staff on a GPU after the deadline. The summary on top counts these items and points.
``hide``
    As ``pending``, but the item's visibility becomes ``after_published``: students see it once
    the grades are published. Gradescope then hides the total score from students until that
    time (its documented rule for hidden tests).
``keep``
    Leave the grader's own "not evaluated: ..." items as they are.

The policy comes from, first to last: ``GRADER_NO_GPU_POLICY`` in the environment; the package's
``gradescope.env`` (``python -m grader.deploy.gradescope build --no-gpu-policy ...`` writes it);
``settings.no_gpu_policy`` in rubric.yaml (read from the raw YAML, so this works whether or not
the rubric loader knows the key); ``pending``.

An item counts as a GPU item when it is ``not_evaluated`` and the grader marked it as needing a
GPU (``extra_data.needs_gpu``, from :attr:`grader.model.ItemResult.needs_gpu`: set where the item
is made, when what is missing is missing because the run had no usable GPU). The item's text is
never read for this. Items not evaluated for other reasons (no cuobjdump, say) are left alone.
grading.json only gives the reason the run had no GPU, for the note on top. Pure functions on
results.json's record (grader/evidence/results.py: Results): the policy returns a changed copy.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from grader.evidence.results import Results, ResultsExtra, ResultsTest, ResultsTestExtra
from grader.outputs.results import make_neutral

POLICIES = ("pending", "hide", "keep")
DEFAULT_POLICY = "pending"
POLICY_VAR = "GRADER_NO_GPU_POLICY"
CONFIG_FILE = "gradescope.env"
PENDING_PREFIX = "(pending GPU grading) "
HIDDEN_VISIBILITY = "after_published"

PENDING_MESSAGE = (
    "**Pending GPU grading.** This item needs an NVIDIA GPU, and Gradescope's autograder has none. {when} "
    "Until then it is neither passed nor failed and not part of the score. This is not a judgement of your code."
)
WHEN_SERVICE = ("The course's GPU grading service grades it within this same autograder run (about a minute); "
                "the note on top says if it is still queued, and a Regrade then picks it up.")
WHEN_STAFF = "Course staff grade it on a GPU machine after the deadline."


def pending_message(service: bool) -> str:
    """What a pending item says, with when it will be graded."""
    return PENDING_MESSAGE.format(when=WHEN_SERVICE if service else WHEN_STAFF)


def read_config(path: str | os.PathLike[str]) -> dict[str, str]:
    """``KEY=VALUE`` lines of a ``gradescope.env`` file (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _rubric_policy(rubric_path: str | os.PathLike[str] | None) -> str | None:
    if not rubric_path:
        return None
    try:
        import yaml

        raw = yaml.safe_load(Path(rubric_path).read_text(encoding="utf-8"))
        value = (raw.get("settings") or {}).get("no_gpu_policy")
    except Exception:  # an unreadable rubric is reported by the grader itself
        return None
    return value if isinstance(value, str) else None


def resolve_policy(source_dir: str | os.PathLike[str] | None = None,
                   rubric_path: str | os.PathLike[str] | None = None,
                   env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(policy, where it came from). Raises ValueError for a value not in POLICIES."""
    env = os.environ if env is None else env
    candidates = [(env.get(POLICY_VAR), f"${POLICY_VAR}")]
    if source_dir is not None:
        candidates.append((read_config(Path(source_dir) / CONFIG_FILE).get(POLICY_VAR), CONFIG_FILE))
    candidates.append((_rubric_policy(rubric_path), "rubric settings.no_gpu_policy"))
    for value, where in candidates:
        if value:
            if value not in POLICIES:
                raise ValueError(f"{where}: no-GPU policy {value!r} is not one of {', '.join(POLICIES)}")
            return value, where
    return DEFAULT_POLICY, "default"


def is_gpu_item(extra_data: ResultsTestExtra) -> bool:
    """A test (given by its ``extra_data``) the run could not evaluate because it had no GPU (the grader's typed
    mark, not its text)."""
    return extra_data.status == "not_evaluated" and extra_data.needs_gpu is True


def _pending(test: ResultsTest, message: str, policy: str) -> ResultsTest:
    """``test`` as the policy shows it: named and worded pending, neutral (not failed: not judged yet)."""
    name = test.name if test.name.startswith(PENDING_PREFIX) else PENDING_PREFIX + test.name
    neutral = make_neutral(test, "pending_gpu_points")
    return dataclasses.replace(
        neutral, name=name, output=f"{message}\n\nGrader note: {test.output}" if test.output else message,
        visibility=HIDDEN_VISIBILITY if policy == "hide" else test.visibility,
        extra_data=dataclasses.replace(neutral.extra_data, pending_gpu=True, no_gpu_policy=policy))


def apply_no_gpu_policy(results: Results, detail: Mapping[str, object] | None, policy: str,
                        service: bool = False) -> Results:
    """``results`` with ``policy`` applied (a changed copy; ``results`` itself is left as it is).

    ``detail`` is grading.json (for the run's reason for having no GPU, said in the note on top);
    ``service``: the package names a GPU grading service (which then grades the items in this run).
    """
    if policy not in POLICIES:
        raise ValueError(f"no-GPU policy {policy!r} is not one of {', '.join(POLICIES)}")
    if policy == "keep" or not any(is_gpu_item(t.extra_data) for t in results.tests):
        return results
    reason = str((detail or {}).get("device_reason") or "no CUDA device")
    message = pending_message(service)
    tests = [_pending(t, message, policy) if is_gpu_item(t.extra_data) else t for t in results.tests]
    pending = [t for t, before in zip(tests, results.tests) if t is not before]
    points = sum(t.extra_data.pending_gpu_points or 0.0 for t in pending)
    shown = ("shown neither passed nor failed" if policy == "pending"
             else "hidden until grades are published")
    when = ("the course's GPU grading service grades them in this same run (the note above says how that went)"
            if service else "course staff grade them on a GPU machine after the deadline")
    note = (f"> **{len(pending)} items ({points:g} points) are pending GPU grading** ({shown}, not part of this "
            "score yet). This autograder has no GPU, so it graded what needs none: compilation, registers and "
            "spills, SASS, the occupancy answers that need no measurement and the report's form. Correctness, "
            f"speed, Nsight Compute and measured items need a GPU: {when}. Items graded by hand are "
            "not part of this score at all: course staff grade them after the deadline.\n"
            f">\n> (Why no GPU: {reason}.)\n\n")
    policed = dataclasses.replace(results, output=note + results.output, tests=tests,
                                  extra_data=dataclasses.replace(results.extra_data or ResultsExtra(),
                                                                 pending_gpu_items=len(pending),
                                                                 pending_gpu_points=points, no_gpu_policy=policy))
    return dataclasses.replace(policed, score=policed.total())
