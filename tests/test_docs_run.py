"""The documentation runs: every shell block of README.md, assignment/README.md and docs/*.md, as written,
in order, in a fresh copy of the repository (tests/doc_blocks.py says how blocks are found and run).
A block either exits with a code its text promises, or says, visibly, why CI cannot run it and which
test covers it instead. The kit's README is run from a freshly built kit by tests/test_kit_walkthrough.py.

The set-up (`bash grader/bootstrap.sh ...`) finds a .venv that sees this interpreter's packages
(doc_blocks.seed_venv), so no block waits for pip; a command such as grading solutions/ runs once."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, Block, Reader, fresh_copy, seed_venv, shell_blocks, shell_env

DOCS = ["README.md", "assignment/README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
KIT_README = "grader/deploy/kit/README-students.md"


def _all_blocks() -> list[Block]:
    return [b for doc in [*DOCS, KIT_README] for b in shell_blocks(ROOT / doc, doc)]


def test_every_block_that_is_not_run_says_why_and_what_covers_it():
    for block in _all_blocks():
        if not block.skip_why:
            continue
        assert block.covered_by, block.where
        for path in block.covered_by:
            assert (ROOT / path).is_file(), f"{block.where}: the marker names {path}, which does not exist"


def test_the_markers_are_read_as_written(tmp_path):
    text = ("Intro.\n\n*Not run in CI: it needs a GPU. Covered by tests/test_gpu_grading.py, "
            "tests/test_calibrate.py.*\n\n```sh\npython -m grader calibrate\n```\n\n```sh\nls  # exit 0: ok; 1: no\n```\n")
    md = tmp_path / "x.md"
    md.write_text(text)
    first, second = shell_blocks(md, "x.md")
    assert first.skip_why == "it needs a GPU" and first.covered_by == ("tests/test_gpu_grading.py",
                                                                       "tests/test_calibrate.py")
    assert second.skip_why == "" and second.promised_exits() == {0, 1} and second.line == 9


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    root = fresh_copy(tmp_path_factory.mktemp("docs") / "gemm-ladder")
    seed_venv(root)
    return root


# A document that says this means its `python` is the set-up's interpreter: the blocks after it run in the
# .venv's environment (`source .venv/bin/activate`), as a reader who follows the sentence would.
SET_UP_PYTHON = "`python` in the commands below is the interpreter `bootstrap.sh` set up"


def _set_up_from(doc: str) -> int:
    """The line from which ``doc``'s `python` is the set-up's interpreter (past its end: never)."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    return next((i + 1 for i, ln in enumerate(lines) if SET_UP_PYTHON in " ".join(lines[i:i + 2])), len(lines) + 1)


# The documents with a block to run (the others' blocks all carry the marker, checked above).
RUNNABLE = [doc for doc in DOCS if any(not b.skip_why for b in shell_blocks(ROOT / doc, doc))]


def test_the_readers_first_documents_have_blocks_that_run():
    assert {"README.md", "assignment/README.md", "docs/deployment.md"} <= set(RUNNABLE)


@pytest.mark.parametrize("doc", RUNNABLE)
def test_each_document_runs_as_written(doc, repo_copy, tmp_path):
    blocks = [b for b in shell_blocks(ROOT / doc, doc)]
    reader = Reader(repo_copy, shell_env(tmp_path))
    ran = 0
    activate = f"source {repo_copy}/.venv/bin/activate"
    for block in blocks:
        if block.skip_why:
            continue
        if block.line > _set_up_from(doc):
            reader.prelude = activate
        proc = reader.run(block.code)
        assert proc.returncode in block.promised_exits(), \
            f"{block.where} exited {proc.returncode}:\n{block.code}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr, f"{block.where}:\n{proc.stderr[-3000:]}"
        ran += 1
    assert ran == len([b for b in blocks if not b.skip_why])
