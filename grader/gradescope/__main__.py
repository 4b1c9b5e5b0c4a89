"""``python -m grader.gradescope build|unpack|run`` (see grader/gradescope/build.py)."""
import sys

from .build import main

sys.exit(main())
