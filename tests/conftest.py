"""Shared test setup: the `gpu` marker skips unless a CUDA device answers the probe."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@functools.lru_cache(maxsize=1)
def probe() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec.write_text("{}")
        proc = subprocess.run([sys.executable, "-m", "grader.children", "probe", str(spec), str(result)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        try:
            return json.loads(result.read_text())
        except (OSError, ValueError):
            return {"ok": False, "reason": proc.stderr[-300:]}


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    info = probe()
    if info.get("ok"):
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {info.get('reason')}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def root() -> Path:
    return ROOT


# The sandbox tests (tests/test_fence.py, tests/test_fence_limits.py) share these two.
@pytest.fixture
def bwrap_required():
    """Skip, saying why, where bwrap cannot make a sandbox."""
    from tests.fence_helpers import need_bwrap

    need_bwrap()


@pytest.fixture
def scratch(tmp_path):
    """The step's one writable folder."""
    d = tmp_path / "scratch"
    d.mkdir()
    return d
