"""``python -m grader COMMAND ...`` (see grader/cli.py).

The process holds its whole tree: it is a child subreaper, so an orphan of a step it ran (a
daemon that left its session) stays its descendant, and whatever is left of its tree when it
exits, SIGTERM and SIGHUP included, is killed (grader/sandbox/process.py: run_holding_tree).
A missing set-up is one line and its own exit code (grader/setup_check.py).
A grading stopped from outside is killed tree and all by whoever stops it (grader/serve/child.py).
"""
import sys
from collections.abc import Callable

from grader.sandbox.process import run_entry_point


def _command() -> Callable[[], int]:
    from grader.cli import main  # after the set-up check: it imports the grader's packages

    return main


sys.exit(run_entry_point(_command))
