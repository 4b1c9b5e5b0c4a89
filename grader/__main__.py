"""``python -m grader COMMAND ...`` (see grader/cli.py).

The process holds its whole tree: it is a child subreaper, so an orphan of a step it ran (a
daemon that left its session) stays its descendant, and whatever is left of its tree when it
exits, SIGTERM and SIGHUP included, is killed (grader/sandbox/process.py: run_holding_tree).
A grading stopped from outside is killed tree and all by whoever stops it (grader/serve/child.py).
"""
import sys

from grader.cli import main
from grader.sandbox.process import run_holding_tree

sys.exit(run_holding_tree(main))
