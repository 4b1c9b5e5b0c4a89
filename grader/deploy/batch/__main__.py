"""``python -m grader.deploy.batch grade|merge`` (the same as ``python -m grader batch|merge``): it holds
its process tree as ``python -m grader`` does (grader/sandbox/process.py: run_holding_tree)."""
import sys
from collections.abc import Callable

from grader.sandbox.process import run_entry_point


def _command() -> Callable[[], int]:
    from grader.deploy.batch.cli import main  # after the set-up check (grader/setup_check.py)

    return main


sys.exit(run_entry_point(_command))
