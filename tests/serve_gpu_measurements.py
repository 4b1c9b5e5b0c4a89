"""The one mock of the service's client tests: the GPU's measurements.

CI has no GPU, so the service grades statically and would produce no timings, no plots and no
leaderboard entries. :func:`gpu_measurements_env` returns environment variables for the service
process under which every ``python -m grader grade`` it starts (its workers' children) records,
for each stage that compiled, the H200 measurements the grader's own tests use
(docs/measurements/2026-11-29-h200-stability.json timings, the live Nsight Compute fixture) just
before it writes its outputs, with the H200 as its device and its stage items judged on them.
Everything else is the real grading: the real service, worker,
compile, results.json, plots (ladder.png, roofline.png) and leaderboard.

It works through a ``sitecustomize.py`` on PYTHONPATH (Python imports it at start-up), active only
when ``GRADER_TEST_GPU_MEASUREMENTS`` names the repository and the process is ``grader grade``.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SITECUSTOMIZE = '''
import os
import sys

_root = os.environ.get("GRADER_TEST_GPU_MEASUREMENTS")
if _root and sys.argv[1:2] == ["grade"]:
    import json
    from pathlib import Path

    from grader.model import Verdict
    from grader.outputs import write
    from grader.profile.ncu import parse_raw_csv
    from grader.evidence.profile import TimingSummary
    _timings = json.loads(Path(_root, "docs/measurements/2026-11-29-h200-stability.json").read_text())
    _timings = _timings["runs"][0]["stages"]
    _ncu = parse_raw_csv(Path(_root, "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_h200_n2048.csv").read_text())
    _original = write.write_outputs
    from grader.children.protocol import ProbeResult

    _DEVICE = ProbeResult(ok=True, name="NVIDIA H200 (the recorded measurements)", cc=[9, 0], sms=132)

    def _with_measurements(grading, out):
        measured = False
        for sid, o in grading.outcomes.items():
            if o.compile is not None and o.compile.ok and sid in _timings and o.stage.kernel in _ncu:
                o.verdict = Verdict.CORRECT
                o.timing = TimingSummary(**_timings[sid])
                o.ncu, o.profile_n = dict(_ncu[o.stage.kernel]), 2048
                o.gpu_reason = ""
                measured = True
        if measured:  # a grading on the GPU: its device, and the stage items judged on the measurements
            from grader.score.stages import score

            grading.env.device, grading.env.device_reason = _DEVICE, ""
            staged = {sid for sid in grading.outcomes}
            grading.items = score(grading.outcomes, grading.env.peaks) + [
                i for i in grading.items if i.stage not in staged]
        return _original(grading, out)

    write.write_outputs = _with_measurements
'''


def gpu_measurements_env(folder: Path, pythonpath: str | None = None) -> dict[str, str]:
    """Write the sitecustomize into ``folder``; the variables to start the service with."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = str(folder) + (":" + pythonpath if pythonpath else "")
    return {"PYTHONPATH": path, "GRADER_TEST_GPU_MEASUREMENTS": str(ROOT)}


@contextmanager
def measured_service(tmp: Path, stages: str):
    """A started service (tests/serve_helpers.py: ServiceProcess) whose grading children record the H200's
    measurements above, with one live worker; stopped afterwards."""
    import pytest

    from tests.serve_helpers import ServiceProcess

    env = gpu_measurements_env(tmp / "site", os.environ.get("PYTHONPATH"))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        svc = ServiceProcess(tmp / "data", stages=stages).start()
    try:
        svc.wait_workers(1)
        yield svc
    finally:
        svc.stop()
