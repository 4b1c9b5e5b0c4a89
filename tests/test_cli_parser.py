"""``python -m grader``'s parser adds only the running subcommand's arguments (grader/cli.py: build_parser), so a
grading child imports none of the service, kit, batch or Gradescope modules; what it prints stays the whole
parser's: the top-level help and every subcommand's help read the same built either way."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from grader.cli import _command_word, build_parser

ROOT = Path(__file__).resolve().parent.parent


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_each_subcommand_reads_the_same_built_alone_or_with_every_other():
    whole = build_parser()
    names = list(_subparsers(whole))
    assert {"grade", "batch", "merge", "serve", "submit", "check", "kit", "gradescope", "similarity"} <= set(names)
    for name in names:
        alone = build_parser(name)
        assert alone.format_help() == whole.format_help(), name
        assert _subparsers(alone)[name].format_help() == _subparsers(whole)[name].format_help(), name
        assert list(_subparsers(alone)) == names


def test_the_command_word_is_the_first_argument_that_is_no_option():
    assert _command_word(["grade", "--out", "x", "sub"]) == "grade"
    assert _command_word(["-h", "serve", "worker"]) == "serve"
    assert _command_word(["--help"]) is None and _command_word([]) is None


def test_a_grading_command_imports_no_service_kit_or_batch_module():
    probe = ("import sys\nfrom grader.cli import main\ntry:\n    main(['grade', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('grader.serve', 'grader.deploy', "
             "'grader.similarity', 'fastapi', 'huey'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
