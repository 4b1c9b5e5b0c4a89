"""pytest's rewritten test modules, written once by pytest-xdist's controller before its workers start.

pytest rewrites each test module's asserts when it imports it (about 2.7 s of CPU for the suite's test modules on
the development box) and keeps the result in ``__pycache__/NAME.cpython-3X-pytest-V.pyc`` only where bytecode may
be written: with ``PYTHONDONTWRITEBYTECODE`` set, or when the workers of a fresh clone all start at once, every
worker rewrites every module again. Here the controller, which collects nothing itself, writes those files first
(pytest's own format: a pyc checked against the source's hash, so a changed test is rewritten again); each worker
then reads them (pytest reads a current one whatever ``PYTHONDONTWRITEBYTECODE`` says).

It uses pytest's own rewriting functions (``_pytest.assertion.rewrite``, not a public interface): where they are
missing or differ, nothing is written and the workers rewrite as they would without it.
"""
from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest


def _test_files(config: pytest.Config) -> list[Path]:
    """The test modules (``python_files``) and conftest.py files under the run's arguments."""
    patterns = list(config.getini("python_files")) + ["conftest.py"]
    found: dict[Path, None] = {}
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        candidates = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.suffix == ".py" else []
        for f in candidates:
            if any(fnmatch.fnmatch(f.name, p) for p in patterns):
                found.setdefault(f)
    return list(found)


def write_ahead(config: pytest.Config) -> int:
    """Write pytest's rewritten pyc of every test module under the run's arguments that lacks a current one;
    returns how many were written."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        tail, read, write, rewrite_test = rewrite.PYC_TAIL, rewrite._read_pyc, rewrite._write_pyc, rewrite._rewrite_test
        cache_dir, makedirs = rewrite.get_cache_dir, rewrite.try_makedirs
    except (ImportError, AttributeError, KeyError):  # pytest's internals differ, or --assert=plain
        return 0
    written = 0
    for fn in _test_files(config):
        try:
            pyc = cache_dir(fn) / (fn.name[:-3] + tail)
            if read(fn, pyc) is not None:
                continue
            if not makedirs(pyc.parent):
                continue
            source_hash, co = rewrite_test(fn, config)
            written += bool(write(state, co, source_hash, pyc))
        except (OSError, ValueError, SyntaxError, TypeError):
            continue  # this file is left to the workers, which rewrite (and report) it as they would anyway
    return written


def is_xdist_controller(config: pytest.Config) -> bool:
    """True in the process that starts pytest-xdist's workers (``-n N``, N > 0), not in a worker; not under
    ``--collect-only``, which pytest-xdist leaves to the one process."""
    return (not hasattr(config, "workerinput") and not config.getoption("collectonly")
            and config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None)))
