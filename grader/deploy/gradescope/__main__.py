"""``python -m grader.deploy.gradescope build|unpack|run`` (see grader/deploy/gradescope/build.py): it
holds its process tree as ``python -m grader`` does (grader/sandbox/process.py: run_holding_tree);
``run`` sets its own SIGTERM handler while its grading runs."""
import sys

from grader.deploy.gradescope.build import main
from grader.sandbox.process import run_holding_tree

sys.exit(run_holding_tree(main))
