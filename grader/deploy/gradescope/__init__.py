"""Deployment on Gradescope (and on a GPU box that grades the way Gradescope does).

- :mod:`.build`: ``python -m grader.deploy.gradescope build [--out autograder.zip]``, the zip Gradescope
  takes (``setup.sh`` and ``run_autograder`` at its root, the grader, ``rubric.yaml``,
  ``pyproject.toml``, ``starter/``; never ``solutions/`` or ``tests/``). Standard library only.
- ``setup.sh`` -> ``grader/deploy/install.sh``, the one install script (the Dockerfile runs the same).
- ``run_autograder`` -> ``python -m grader.deploy.gradescope run`` (:mod:`.run`), with a shell fallback
  that writes a valid ``results.json`` whatever happens.
- :mod:`.policy`: what students see for GPU items when the machine has no GPU.
- :func:`leaderboard_entries` (from :mod:`grader.outputs.leaderboard`) for the 2D and WMMA stages.

This package imports nothing outside the standard library at import time.
"""
from __future__ import annotations

from grader.outputs.leaderboard import leaderboard_entries

__all__ = ["leaderboard_entries"]
