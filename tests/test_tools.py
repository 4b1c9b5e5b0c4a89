"""tools/ holds only what users run, each named by a doc; one-off experiments live beside their records.

The docs are what a user reads: README.md, docs/*.md (the measurement records are history, not a reason to
keep a tool) and the package's README files. A tool no doc names is an experiment (docs/measurements/scripts/)
or gone (git keeps it).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
SCRIPTS = ROOT / "docs" / "measurements" / "scripts"
MAX_LINES = 1600
# A path under the repository's tools/ (not a folder that merely ends in "tools", such as grader/tools/).
TOOL_PATH = re.compile(r"(?<![\w/.-])tools/([\w.-]+\.(?:py|sh|sbatch))")
# Where a tools/ path may be written down: all the repository's text but its recorded outputs.
TEXT_SUFFIXES = {".py", ".md", ".sh", ".sbatch", ".yaml", ".yml", ".toml", ".cu", ".cuh", ".txt", ".in"}
SKIPPED = ("tests/fixtures/", ".git/", ".venv/")


def user_docs() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "grader").rglob("README.md"))]
    return [p for p in docs if p.is_file()]


def tool_files() -> list[Path]:
    return sorted(p for p in TOOLS.iterdir() if p.is_file() and "__pycache__" not in p.parts)


def repo_texts() -> list[Path]:
    """The checkout's own text files: git's list where there is one (what a clone holds, not a local
    scratch folder or a virtual environment), else every file under the root."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    paths = ([ROOT / name for name in listed.stdout.split("\0") if name] if listed.returncode == 0 and listed.stdout
             else list(ROOT.rglob("*")))
    return [p for p in paths if p.is_file() and p.suffix in TEXT_SUFFIXES
            and not str(p.relative_to(ROOT)).startswith(SKIPPED) and "__pycache__" not in p.parts]


def test_tools_holds_at_most_1600_lines():
    counts = {p.name: len(p.read_text().splitlines()) for p in tool_files()}
    assert sum(counts.values()) <= MAX_LINES, (
        f"tools/ holds {sum(counts.values())} lines (at most {MAX_LINES}): {sorted(counts.items())}; "
        "a one-off experiment belongs in docs/measurements/scripts/ beside its record")


def test_every_tool_is_named_by_a_user_doc():
    named = {m for p in user_docs() for m in TOOL_PATH.findall(p.read_text())}
    unnamed = [p.name for p in tool_files() if p.name not in named]
    assert not unnamed, (f"tools/{unnamed} named by no doc ({', '.join(str(p.relative_to(ROOT)) for p in user_docs())}):"
                         " document it, or move it beside the measurement record that used it")


def test_every_tools_path_written_down_exists():
    missing = sorted({f"{p.relative_to(ROOT)}: tools/{name}" for p in repo_texts()
                      for name in TOOL_PATH.findall(p.read_text(errors="replace")) if not (TOOLS / name).is_file()})
    assert not missing, f"paths to tools/ files that are not there (moved? update the path): {missing}"


def test_every_measurement_script_is_in_the_scripts_index():
    index = (SCRIPTS / "README.md").read_text()
    scripts = [p.name for p in SCRIPTS.iterdir() if p.is_file() and p.name != "README.md"]
    assert scripts and not [s for s in scripts if f"`{s}`" not in index], (
        f"docs/measurements/scripts/README.md names no record for {[s for s in scripts if f'`{s}`' not in index]}")
