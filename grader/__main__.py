"""``python -m grader COMMAND ...`` (see grader/cli.py).

The process holds its whole tree: it is a child subreaper, so an orphan of a step it ran (a
daemon that left its session) stays its descendant, and whatever is left of its tree when it
exits, SIGTERM included, is killed (grader/sandbox/process.py: become_subreaper, end_own_tree).
A grading stopped from outside is killed tree and all by whoever stops it (grader/serve/child.py).
"""
import signal
import sys

from grader.cli import main
from grader.sandbox.process import become_subreaper, end_own_tree


def _terminated(signum, _frame):
    raise SystemExit(128 + signum)


become_subreaper()
signal.signal(signal.SIGTERM, _terminated)  # commands that handle SIGTERM themselves set their own
try:
    code = main()
finally:
    end_own_tree()
sys.exit(code)
