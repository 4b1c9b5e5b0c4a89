"""Errors the grader raises about its *own* inputs (rubric, answers files).

Student mistakes are never exceptions: they are data in result records
(see :mod:`grader.model`). These exceptions are for configuration the grader
cannot work without; the CLI turns them into a one-line message and exit code 2.
"""
from __future__ import annotations


class ConfigError(Exception):
    """A configuration file is wrong at a specific place.

    ``where`` names the file and key path (``rubric.yaml: stages[3].items[1].points``)
    and ``expected`` says what would have been accepted.
    """

    def __init__(self, where: str, problem: str, expected: str | None = None):
        self.where = where
        self.problem = problem
        self.expected = expected
        msg = f"{where}: {problem}"
        if expected:
            msg += f" (expected {expected})"
        super().__init__(msg)


class RubricError(ConfigError):
    """rubric.yaml (or a file passed with --rubric) is invalid."""
