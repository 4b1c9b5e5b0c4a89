"""What a batch's class-summary.md and grades.csv say about submissions that were not graded (a hung one,
a missing folder, a bad entry) and about a graded one that lost points: a row that earned nothing never
reads as perfect, each status is explained in grades.csv's note, and the first lost item keeps its reason.

The starter and the broken kernel are graded by the real grader, with the command line the batch gives its
children (``python -m grader grade --no-gpu --stages naive ...``, a few seconds each), side by side before the
batch; in the batch their children copy those gradings into their folders. So the batch's --timeout need only
outlast a copy: the hung grading, a stand-in child that sleeps past it, is stopped after HANG_S seconds instead
of a timeout long enough for real gradings on a loaded machine. The batch's three children run side by side."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest

from grader.deploy.batch.pool import Options, child_command
from grader.deploy.batch.run import grade_export
from grader.outputs.class_summary import SUMMARY_FILE
from grader.untrusted.export import load_export

ROOT = Path(__file__).resolve().parent.parent
BROKEN_NAIVE = 'extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N) {\n  C[0] = \n}\n'
# The batch's --timeout: what the hung stand-in (a sleep 20 times as long) outlasts, and a copy (its neighbours: one
# `cp -a` of a small folder, unfenced, a few milliseconds) never comes near.
HANG_S = 2


def _export(root: Path) -> Path:
    for name, naive in (("submission_1", (ROOT / "starter" / "gemm" / "naive.cu").read_text()),
                        ("submission_2", BROKEN_NAIVE), ("submission_3", "// hangs\n")):
        (root / name / "gemm").mkdir(parents=True)
        (root / name / "gemm" / "naive.cu").write_text(naive)
    (root / "submission_3" / "HANG").touch()
    (root / "submission_5").write_text("a file where a folder should be\n")  # a bad entry
    meta = "".join(f"{name}:\n  :submitters:\n  - :name: Student {name[-1]}\n    :sid: '{name[-1]}'\n"
                   f"    :email: s{name[-1]}@example.edu\n"
                   for name in ("submission_1", "submission_2", "submission_3", "submission_4", "submission_5"))
    (root / "submission_metadata.yml").write_text(meta)  # submission_4: in the metadata, no folder
    return root


@pytest.fixture(scope="module")
def batch_out(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("class")
    exp = _export(tmp / "export")
    hang = tmp / "hang.py"
    hang.write_text(f"import time\ntime.sleep({HANG_S * 20})\n")

    opts = Options(rubric=ROOT / "rubric.yaml", use_gpu=False, stages="naive", timeout_s=HANG_S)
    graded = tmp / "graded"
    real = [sub for sub in load_export(exp)[1] if sub.path is not None and not (Path(sub.path) / "HANG").exists()]
    children = {sub.folder: subprocess.Popen(child_command(sub, graded / sub.folder, opts), cwd=ROOT,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for sub in real}
    for folder, child in children.items():
        output = child.communicate(timeout=1200)[0]
        assert child.returncode == 0, f"the real grading of {folder} failed:\n{output[-3000:]}"

    def command(sub, out, opts):  # the hung stand-in, or a copy of the submission's real grading
        if sub.path is not None and (Path(sub.path) / "HANG").exists():
            return [sys.executable, str(hang)]
        return ["cp", "-a", "--", f"{graded / sub.folder}/.", str(out)]

    grade_export(exp, tmp / "out", workers=3, opts=opts, quiet=True, make_cmd=command, gpus=[])
    return tmp / "out"


def _rows(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {r["folder"]: r for r in csv.DictReader(f)}


def _summary_rows(out: Path) -> dict[str, list[str]]:
    text = (out / SUMMARY_FILE).read_text()
    table = text.split("## Each submission's first lost item")[1]
    return {cells[0]: cells[1:] for line in table.splitlines() if line.startswith("| submission_")
            for cells in [[c.strip() for c in line.strip("|").split(" | ")]]}


def test_each_status_is_explained_in_the_note(batch_out):
    rows = _rows(batch_out)
    assert {f: r["status"] for f, r in rows.items()} == {
        "submission_1": "graded", "submission_2": "graded", "submission_3": "timed_out",
        "submission_4": "missing_folder", "submission_5": "bad_entry"}
    hung, missing, bad = rows["submission_3"], rows["submission_4"], rows["submission_5"]
    assert hung["note"].startswith("not graded: the grading ran past the batch's --timeout and was stopped: ")
    assert f"timed out after {HANG_S} s" in hung["note"]
    assert missing["note"] == "not graded: in the export's metadata, but the export has no folder for it"
    assert bad["note"].startswith("not graded: the export's entry for it is not a submission folder")
    assert "export entry submission_5 is a file, not a submission folder" in bad["note"]
    for row in (hung, missing, bad):  # not evaluated: empty cells, never a 0
        assert row["total"] == "" and row["naive.compiles"] == ""


def test_the_first_lost_item_keeps_its_whole_reason(batch_out):
    rows = _rows(batch_out)
    starter, broken = rows["submission_1"]["note"], rows["submission_2"]["note"]
    # The starter compiles, but its SASS never stores C: the message goes on past its first "; ".
    assert starter.startswith("first item lost: 1.compiles: compiled; 4 registers"), starter
    assert "No credit yet" in starter
    assert broken.startswith("first item lost: 1.compiles: nvcc failed (exit code 1): naive.cu(3): error: "), broken
    summary = _summary_rows(batch_out)
    assert summary["submission_1"][0] == "graded" and "No credit yet" in summary["submission_1"][2]
    assert summary["submission_2"][2] == broken.removeprefix("first item lost: ").replace("|", "\\|")


def test_a_row_that_was_not_graded_never_reads_as_perfect(batch_out):
    summary = _summary_rows(batch_out)
    rows = _rows(batch_out)
    for folder in ("submission_3", "submission_4", "submission_5"):
        status, total, why = summary[folder]
        assert status == rows[folder]["status"] and total == ""
        assert "earned points" not in why and why == rows[folder]["note"].replace("|", "\\|")
    text = (batch_out / SUMMARY_FILE).read_text()
    assert "5 submissions: 1 bad_entry, 2 graded, 1 missing_folder, 1 timed_out" in text


def test_the_log_says_what_happened_to_a_bad_entry(batch_out):
    import json

    notes = json.loads((batch_out / "batch.json").read_text())["notes"]
    said = [n for n in notes if n.startswith("submission_5")]
    assert said == ["submission_5: not graded (bad_entry): export entry submission_5 is a file, not a submission "
                    "folder"], notes
    assert not [n for n in notes if "without names" in n]
