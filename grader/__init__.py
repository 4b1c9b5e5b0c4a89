"""The GEMM-ladder autograder (docs/design.md draws the layout and the flow)."""

from functools import lru_cache as _lru_cache
from pathlib import Path as _Path

# The release (pyproject.toml takes it from here: tool.setuptools.dynamic).
__version__ = "0.1.0"

# Every module that needs a path outside its own folder derives it from these, never from its own depth.
PACKAGE_DIR = _Path(__file__).resolve().parent
# Where `import grader` resolves from: the checkout, or site-packages after a non-editable install.
IMPORT_ROOT = PACKAGE_DIR.parent
# A checkout has rubric.yaml and pyproject.toml beside the package; an installed package does not.
IN_CHECKOUT = (IMPORT_ROOT / "rubric.yaml").is_file() and (IMPORT_ROOT / "pyproject.toml").is_file()
# The checkout's root (rubric.yaml, solutions/, tests/); after an install, the package itself.
REPO_ROOT = IMPORT_ROOT if IN_CHECKOUT else PACKAGE_DIR
# What students' processes must never see: the whole checkout, or the installed package's own folder
# (its site-packages stays visible for the interpreter's libraries; grader/sandbox/fence.py masks the package).
PRIVATE_ROOT = REPO_ROOT
# The rubric graded by default: the checkout's, or the copy the build put into the package (setup.py).
DEFAULT_RUBRIC = IMPORT_ROOT / "rubric.yaml" if IN_CHECKOUT else PACKAGE_DIR / "data" / "rubric.yaml"


@_lru_cache(maxsize=1)
def code_version() -> str:
    """The grader's version as graded: the package version and a hash of its own Python and shell
    files, so a grading made by changed code is recognisably another version (batches re-grade it)."""
    import hashlib

    # __version__, not importlib.metadata: importing that costs about 40 ms of CPU in each grading process.
    release = __version__
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if path.suffix in (".py", ".sh") and "__pycache__" not in path.parts and path.is_file():
            digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    return f"{release}+{digest.hexdigest()[:12]}"
