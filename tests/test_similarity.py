"""The class's similarity report (python -m grader similarity, grader/similarity/) on the demo class of
tests/submissions/similarity_class: the planted copy with renamed names ranks first, the copy of the
reference ladder is flagged against it, and the honest kernels of the same technique rank below both;
starter code never counts; what a student wrote is escaped in the HTML; a batch runs it with --similarity."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.similarity.sass_tokens import abstract_instruction, kernel_instructions, run_length

ROOT = Path(__file__).resolve().parent.parent
CLASS = ROOT / "tests/submissions/similarity_class/class"
REFERENCE = ROOT / "tests/submissions/textbook/course"
HONEST = ("honest_solutions", "honest_vectorized", "honest_warptiling")
# The command README.md shows, with --out in the test's folder.
README_COMMAND = ["similarity", "tests/submissions/similarity_class/class", "--against",
                  "tests/submissions/textbook/course", "--stages", "blocktiling_2d"]

needs_sass = pytest.mark.skipif(toolchain.find_nvcc().path is None or toolchain.find_cuobjdump().path is None,
                                reason="needs nvcc and cuobjdump (pip install -e '.[nvcc,sass]')")

# Lines of `cuobjdump -sass` of solutions/gemm/tiled.cu (sm_90a, nvcc 13.0), as printed.
CAPTURED = """
\tcode for sm_90a
\t\tFunction : mmTiled
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;              /* 0x00000a00ff017b82 */
                                                                       /* 0x000fe20000000800 */
        /*0090*/                   ISETP.GE.AND P0, PT, R0, 0x1, PT ;  /* 0x000000010000780c */
                                                                       /* 0x002fc40003f06270 */
        /*00a0*/                   LEA R7, R7, R6, 0x5 ;               /* 0x0000000607077211 */
                                                                       /* 0x001fe400078e28ff */
        /*00b0*/                   LEA R2, R8, R5, 0x5 ;               /* 0x0000000508027211 */
                                                                       /* 0x004fca00078e28ff */
        /*00c0*/              @!P0 BRA 0x7d0 ;                         /* 0x0000000400008947 */
        /*00d0*/                   NOP ;                               /* 0x0000000000007918 */
"""


def test_sass_tokens_drop_register_numbers_constants_and_targets():
    tokens = kernel_instructions(CAPTURED, "mmTiled")
    assert tokens == ["LDC R, c[#]", "ISETP.GE.AND P, PT, R, #, PT", "LEA R, R, R, #", "LEA R, R, R, #",
                      "@!P BRA #"]
    assert run_length(tokens) == ["LDC R, c[#]", "ISETP.GE.AND P, PT, R, #, PT", "LEA R, R, R, # x2", "@!P BRA #"]
    assert kernel_instructions(CAPTURED, "mmOther") is None
    assert abstract_instruction("FFMA R4, R5.reuse, R6, R4") == "FFMA R, R, R, R"


def test_renamed_and_reformatted_source_still_matches_and_starter_code_never_counts():
    # copydetect (and the matplotlib it imports) here, not at the module's top: every worker collects this file
    from grader.similarity.fingerprint import compare, source_print

    honest = (CLASS / "honest_solutions/gemm/blocktiling_2d.cu").read_text()
    planted = (CLASS / "planted_copy/gemm/blocktiling_2d.cu").read_text()
    other = (CLASS / "honest_warptiling/gemm/blocktiling_2d.cu").read_text()
    copy = compare(source_print(honest), source_print(planted))
    assert copy.score > compare(source_print(honest), source_print(other)).score
    assert copy.fragments and copy.fragments[0].a and copy.fragments[0].b
    starter = (ROOT / "starter/gemm/blocktiling_2d.cu").read_text()
    boiler = source_print(starter).fp.hashes
    # Two students who both hand in the starter share only the starter: nothing is left to compare.
    assert source_print(starter, boilerplate=boiler).empty
    assert compare(source_print(starter, boilerplate=boiler), source_print(starter, boilerplate=boiler)).score == 0


@needs_sass
def test_the_demo_class_is_what_make_class_writes_from_the_current_kernels(tmp_path):
    """The class holds copies of solutions/ and the textbook kernels, committed so the README's command runs
    on a folder; written again from today's kernels by its make_class.py, it must be the same files, byte for
    byte (else: run `python tests/submissions/similarity_class/make_class.py` and commit the class)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_class", CLASS.parent / "make_class.py")
    assert spec is not None and spec.loader is not None
    make_class = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_class)
    make_class.main(tmp_path / "class")

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    written, committed = files(tmp_path / "class"), files(CLASS)
    assert sorted(written) == sorted(committed) and len(committed) == 5
    stale = [name for name in committed if written[name] != committed[name]]
    assert stale == [], f"{stale} differ from what make_class.py writes from today's kernels"


def test_demo_class_ranks_the_planted_copy_first_and_flags_the_reference_copy(tmp_path):
    out = tmp_path / "similarity"
    proc = subprocess.run([sys.executable, "-m", "grader", *README_COMMAND, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "similarity.json").read_text())
    pairs = [p for p in data["pairs"] if p["stage"] == "blocktiling_2d"]
    assert {pairs[0]["a"], pairs[0]["b"]} == {"honest_solutions", "planted_copy"}
    assert pairs[0]["source"]["fragments"] and pairs[0]["sass"]["fragments"]  # both levels, side by side
    assert [(f["submission"], f["reference"]) for f in data["flagged"]] == [("reference_copy", "course")]
    flagged = data["flagged"][0]["combined"]
    planted = pairs[0]["combined"]
    honest_pairs = [p for p in pairs if {p["a"], p["b"]} != {"honest_solutions", "planted_copy"}]
    assert honest_pairs and max(p["combined"] for p in honest_pairs) < min(planted, flagged)
    # Every other submission's best match with the reference stays below the reference copy's.
    others = [r["combined"] for r in data["reference_matches"] if r["a"] != "reference_copy"]
    assert others and max(others) < flagged
    # Honest kernels of one technique compile to different machine code (the SASS level is not saturated).
    honest_sass = [p["sass"]["score"] for p in pairs if p["a"] in HONEST and p["b"] in HONEST]
    assert honest_sass and max(honest_sass) < pairs[0]["sass"]["score"]
    md = (out / "similarity.md").read_text()
    page = (out / "similarity.html").read_text()
    for text in (md, page):
        assert "What a score does not mean" in text and "Matches a reference" in text
    assert "<svg" in page and "planted_copy" in page


def test_student_text_is_escaped_in_the_html(tmp_path):
    klass = tmp_path / "class"
    evil = "<script>alert(1)</script>"
    body = (CLASS / "honest_vectorized/gemm/blocktiling_2d.cu").read_text()
    for name in ("a<img src=x onerror=alert(1)>", "b"):
        (klass / name / "gemm").mkdir(parents=True)
        (klass / name / "gemm/blocktiling_2d.cu").write_text(f"// {evil}\n" + body.replace("{", "{ /*</pre>*/", 3))
    out = tmp_path / "out"
    from grader.similarity.cli import run

    assert run(klass, [], out, stages="blocktiling_2d", use_sass=False, quiet=True) == 0
    page = (out / "similarity.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and "&lt;img src=x" in page
    assert "/*</pre>*/" not in page and "&lt;/pre&gt;" in page


def test_bad_arguments_are_said_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grader", "similarity", str(tmp_path / "nope"), "--out",
                           str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "grader", "similarity", str(CLASS), "--stages", "nosuch", "--out",
                           str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown stage 'nosuch'" in proc.stderr


def test_batch_with_similarity_writes_the_report_at_its_end(tmp_path, monkeypatch):
    """A batch over an export of the demo class: the report lands in OUT/similarity, names from the metadata."""
    from grader.deploy.batch import cli, run

    export = tmp_path / "export"
    meta = ""
    for n, folder in enumerate(sorted(CLASS.iterdir())):
        shutil.copytree(folder, export / f"submission_{n}")
        meta += f"submission_{n}:\n  :submitters:\n  - :name: Student {folder.name}\n    :sid: '{n}'\n"
    (export / "submission_metadata.yml").write_text(meta)

    def graded_by_a_stand_in(export_path, out, **kwargs):  # the batch's own steps, with a child that grades nothing
        fake = tmp_path / "child.py"
        fake.write_text("import json, sys; open(sys.argv[2] + '/results.json', 'w').write(json.dumps("
                        "{'score': 0, 'tests': []}))\n")
        return run.grade_export(export_path, out, make_cmd=lambda sub, o, opts: [sys.executable, str(fake),
                                                                               str(sub.path), str(o)],
                                gpus=[], **kwargs)

    monkeypatch.setattr(cli, "grade_export", graded_by_a_stand_in)
    parser = __import__("argparse").ArgumentParser()
    cli.add_grade_arguments(parser)
    args = parser.parse_args([str(export), "--out", str(tmp_path / "batch"), "--stages", "blocktiling_2d",
                              "--similarity", "--quiet", "--trusted-submissions"])
    assert cli.run_grade(args) == 0
    data = json.loads((tmp_path / "batch/similarity/similarity.json").read_text())
    assert "Student planted_copy (3)" in {c["label"] for c in data["class"]}
    assert len(data["pairs"]) == 10
