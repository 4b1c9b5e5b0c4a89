"""``python -m grader.deploy.gradescope build|unpack|run`` (see grader/deploy/gradescope/build.py): it
holds its process tree as ``python -m grader`` does (grader/sandbox/process.py: run_holding_tree);
``run`` sets its own SIGTERM handler while its grading runs."""
import sys
from collections.abc import Callable

from grader.sandbox.process import run_entry_point


def _command() -> Callable[[], int]:
    from grader.deploy.gradescope.build import main  # after the set-up check (grader/setup_check.py)

    return main


# build is standard library only (the Dockerfile runs it in python:slim, with no packages): checked as it goes.
sys.exit(run_entry_point(_command, check_first=sys.argv[1:2] != ["build"]))
