"""A missing set-up, said in one line: every entry point (``python -m grader``, grader/run_local.py, the
Gradescope bridge's ``python -m grader.deploy.gradescope``, the batch's ``python -m grader.deploy.batch``)
runs through :func:`run_set_up`.

Before anything else it asks the import system, without importing, whether the grader's own
packages (pyproject.toml's ``dependencies``) are there; a package that is missing, or a
``ModuleNotFoundError`` for one of them later, ends the process with one line that names the set-up
command and the interpreter it sets up, and :data:`EXIT_SETUP`, a code no command uses for anything
else (1 is ``check``'s "rows to fix", 2 bad usage, 3 the grader's own failure). This module imports
only the standard library, so that it runs where nothing else does.
"""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

# sysexits.h's EX_CONFIG ("an unconfigured or misconfigured state"): free in every command of the grader.
EXIT_SETUP = 78
SETUP_COMMAND = "bash grader/bootstrap.sh setup"
# The modules of pyproject.toml's [project] dependencies, as imported (httpx only for `submit`, which
# says so itself: `check` and grading work without it).
REQUIRED = ("numpy", "yaml", "rich", "matplotlib", "dacite", "markdown_it")
# Optional packages and the pyproject.toml extra that installs each (a command that needs one says so).
EXTRAS = {"copydetect": "similarity", "fastapi": "serve", "uvicorn": "serve", "huey": "serve", "redis": "serve",
          "httpx": "base"}
_REPO = Path(__file__).resolve().parent.parent


def missing_modules(names: tuple[str, ...] = REQUIRED) -> list[str]:
    """The modules of ``names`` this interpreter cannot find (none imported)."""
    missing = []
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def setup_message(missing: list[str], executable: str | None = None) -> str:
    """The one line for a missing set-up: which packages, the command that installs them and the
    interpreter to run the grader with afterwards."""
    executable = executable or sys.executable
    venv_python = _REPO / ".venv" / "bin" / "python"
    try:
        shown = str(venv_python.relative_to(Path.cwd()))
    except ValueError:
        shown = str(venv_python)
    here = "" if _REPO == Path.cwd() else f" in {_REPO}"
    inside = Path(executable).absolute().parent.parent == venv_python.parent.parent
    if venv_python.is_file() and not inside:
        then = (f"the set-up made {shown}: run the grader with it (`{shown} -m grader ...`), "
                f"or run `{SETUP_COMMAND}`{here} again")
    else:
        then = f"run `{SETUP_COMMAND}`{here}, then run the grader with the Python it names (`{shown} -m grader ...`)"
    return (f"error: the grader's Python packages are not set up for {executable} (it cannot import "
            f"{', '.join(missing)}): {then}")


def run_set_up(main: Callable[[], int], needed: tuple[str, ...] = REQUIRED, check_first: bool = True) -> int:
    """``main()``'s exit code, or :data:`EXIT_SETUP` after one line on stderr when a package of
    ``needed`` is missing (before ``main`` starts unless ``check_first`` is off, for a command that needs
    none of them, or as a ModuleNotFoundError out of it)."""
    missing = missing_modules(needed) if check_first else []
    if missing:
        print(setup_message(missing), file=sys.stderr)
        return EXIT_SETUP
    try:
        return main()
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in needed:
            print(setup_message([top]), file=sys.stderr)
        elif EXTRAS.get(top, "base") != "base":
            print(extra_message(top, EXTRAS[top]), file=sys.stderr)
        else:
            raise
        return EXIT_SETUP


def extra_message(module: str, extra: str) -> str:
    """The one line for a command that needs an optional package: the pip command that installs its extra."""
    python = Path(sys.executable)
    try:
        shown = str(python.relative_to(Path.cwd()))
    except ValueError:
        shown = str(python)
    return (f"error: this command needs the {extra!r} extra ({module} cannot be imported): "
            f"`{shown} -m pip install -e '{_REPO}[{extra}]'`")
