"""``python -m grader.deploy.gradescope build|unpack|run`` (see grader/deploy/gradescope/build.py)."""
import sys

from grader.deploy.gradescope.build import main

sys.exit(main())
