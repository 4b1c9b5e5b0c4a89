"""``python -m grader.deploy.batch grade|merge`` (the same as ``python -m grader batch|merge``)."""
import sys

from grader.deploy.batch.cli import main

sys.exit(main())
