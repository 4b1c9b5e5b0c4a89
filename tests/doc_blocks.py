"""The shell blocks of the project's Markdown, read and run as a reader would run them
(tests/test_docs_run.py, tests/test_kit_walkthrough.py).

The Markdown is read with markdown-it-py, the CommonMark parser the grader already depends on (the
written report's structure, grader/writeup/markdown.py): it finds fenced blocks as a renderer does
(indented fences, ``~~~``, a fence inside a list), where a regular expression over the text would
not, and gives each block's line. The tools that run Markdown blocks as tests (pytest-markdown-docs,
phmdoctest, mktestdocs) run Python blocks, not shell sessions whose state (``cd``, files) carries from
block to block in a copy of the repository, with a promised exit code per block, and they would be
one more dependency.

Conventions, visible in the rendered page:

- A block runs in bash (``set -e``), in order, in the state the blocks before it left (the folder a
  ``cd`` moved to, the files they made). It must exit 0, or a code its own comment promises:
  ``# exit 0: ...; 1: ...`` promises 0 or 1.
- A block that cannot run on CI has, as the paragraph right before it, ``*Not run in CI: WHY.
  Covered by PATH[, PATH].*``, each PATH a test file (or script) of the repository that covers it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
SHELLS = ("sh", "bash", "shell", "console")
MARKER = re.compile(r"^\*?Not run in CI: (?P<why>.+?)\. Covered by (?P<paths>[^*]+?)\.\*?$")
EXIT = re.compile(r"#\s*exit (\d+)(?::[^;\n]*)?((?:;\s*\d+:[^;\n]*)*)")


@dataclass(frozen=True)
class Block:
    doc: str          # the document, relative to the repository
    line: int         # its first line (1-based, the fence's)
    code: str
    skip_why: str     # "" when it runs
    covered_by: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def promised_exits(self) -> set[int]:
        codes = {0}
        for m in EXIT.finditer(self.code):
            codes = {int(m.group(1))} | {int(c) for c in re.findall(r";\s*(\d+):", m.group(2) or "")}
        return codes


def shell_blocks(path: Path, doc: str | None = None) -> list[Block]:
    """Every shell block of the Markdown file ``path``, with the marker of the paragraph before it."""
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    blocks = []
    for i, tok in enumerate(tokens):
        if tok.type != "fence" or tok.info.strip().split(" ")[0] not in SHELLS:
            continue
        before = tokens[i - 2] if i >= 3 and tokens[i - 1].type == "paragraph_close" else None
        m = MARKER.match(before.content.strip()) if before is not None and before.type == "inline" else None
        paths = tuple(p.strip(" `") for p in re.split(r",| and ", m.group("paths"))) if m else ()
        blocks.append(Block(doc or str(path), (tok.map or [0])[0] + 1, tok.content, m.group("why") if m else "",
                            paths))
    return blocks


def fresh_copy(dest: Path) -> Path:
    """The repository's files as a fresh clone has them (tracked, and new files not ignored), at ``dest``;
    without git (an unpacked archive of the repository), every file but the set-up's and the outputs'."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "__pycache__", "grading-out", ".pytest_cache", "batch-out"}
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                  if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)]
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def seed_venv(root: Path) -> Path:
    """``root/.venv`` as ``bash grader/bootstrap.sh setup`` leaves it, without pip: a venv that sees this
    interpreter's packages (a .pth file), stamped with every extra bootstrap may ask for, so that
    bootstrap's own steps run (it finds python3 lacking, uses .venv and says it is up to date) and the
    commands after it run with .venv/bin/python. Pip's install is not what these tests test."""
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(site, "zz-test-interpreter.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    import hashlib

    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()
    (venv / ".grader-bootstrap").write_text("\n".join([digest, "base", "test", "cuda12", "cuda13", "nvcc", "sass"]) + "\n")
    return venv


def shell_env(home: Path) -> dict[str, str]:
    """A reader's environment: no PYTHONPATH or virtualenv of the test run, a home of its own."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GRADER_DEBUG", "PYTEST_CURRENT_TEST")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(Path(sys.prefix))))
    env["HOME"] = str(home)
    return env


class Reader:
    """Runs blocks one after the other in one place, as a reader at a terminal: each starts in the folder
    the one before it ended in."""

    def __init__(self, cwd: Path, env: dict[str, str], prelude: str = ""):
        self.cwd, self.env, self.prelude = cwd, env, prelude
        self.state = cwd / ".." / f".{cwd.name}-cwd"

    def run(self, code: str, timeout: float = 600) -> subprocess.CompletedProcess:
        script = f"set -e\n{self.prelude}\ntrap 'pwd > {self.state}' EXIT\n{code}"
        proc = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if self.state.is_file():
            self.cwd = Path(self.state.read_text().strip())
        return proc
