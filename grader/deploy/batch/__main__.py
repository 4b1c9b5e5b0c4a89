"""``python -m grader.deploy.batch grade|merge`` (the same as ``python -m grader batch|merge``): it holds
its process tree as ``python -m grader`` does (grader/sandbox/process.py: run_holding_tree)."""
import sys

from grader.deploy.batch.cli import main
from grader.sandbox.process import run_holding_tree

sys.exit(run_holding_tree(main))
