"""The fast tier (``bash grader/bootstrap.sh test -n 0 -m fast``, README and docs/design.md "Testing"): the files it
names exist, so a rename never shrinks it in silence, and none of them starts the service or a grading."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import FAST_FILES

TESTS = Path(__file__).resolve().parent
SLOW_SIGNS = ("ServiceProcess(", "measured_service(", "static_graded", "gpu_jobs", '"grader", "grade"')


def test_every_fast_file_exists_and_starts_no_service_or_grading():
    missing = sorted(name for name in FAST_FILES if not (TESTS / name).is_file())
    assert missing == [], f"FAST_FILES names files that are not in tests/: {missing}"
    others = FAST_FILES - {Path(__file__).name}  # this file names the signs it looks for
    slow = {name: sign for name in others for sign in SLOW_SIGNS if sign in (TESTS / name).read_text()}
    assert slow == {}, f"fast files that start a service or a grading: {slow}"
