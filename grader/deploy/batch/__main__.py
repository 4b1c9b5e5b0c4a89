"""``python -m grader.deploy.batch grade|merge`` (the same as ``python -m grader batch|merge``): it holds
its process tree as ``python -m grader`` does (grader/sandbox/process.py: run_holding_tree)."""
import sys

from grader.setup_check import run_set_up


def _main() -> int:
    from grader.deploy.batch.cli import main  # after the set-up check (grader/setup_check.py)
    from grader.sandbox.process import run_holding_tree

    return run_holding_tree(main)


sys.exit(run_set_up(_main))
