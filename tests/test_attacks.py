"""Attacks on the grader itself: each hostile case gets its verdict while the grader runs fenced.

Every grading runs grader/run_local.py under an address-space cap, a file-size cap and a wall-clock limit
(tests/attack_helpers.py), so a regression fails its test instead of taking the machine down. After each
one, no process of the case may be alive, results.json must be the grader's own and whole (no item lost to
a grader crash), and the secret file the #include cases reach for must appear in no output.

Cases: the folders of tests/submissions/ with an `attack` (CI) or `attack_gpu` entry in EXPECTED.yaml, and
those tests/attack_cases.py builds at run time (symbolic links, zips, a zip bomb, a batch export, and the
answers.yaml and report.md attacks, compared item by item with the unmodified solution). The CPU gradings
run three at a time, started together by the first test that needs one.
"""
from __future__ import annotations

import csv
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from grader.compile import toolchain
from tests import attack_cases as cases
from tests.attack_helpers import FAKE_RESULTS, Graded, Jobs, grade
from tests.gpu_jobs import attack_rubric

ROOT = Path(__file__).resolve().parent.parent
SUBS = ROOT / "tests" / "submissions"
SOL = ROOT / "solutions"
EXPECTED = yaml.safe_load((SUBS / "EXPECTED.yaml").read_text())
CPU_CASES = [c for c, e in EXPECTED.items() if e.get("attack")]
GPU_CASES = [c for c, e in EXPECTED.items() if e.get("attack_gpu")]
SECRET = Path("/tmp/gemm-grader-attack-secret.h")  # the path the committed #include cases name
SECRET_MARKER = "GEMM_LADDER_SECRET_LINE_5f0c2a"
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def _rubric(dest: Path) -> Path:
    """rubric.yaml with a shorter compile limit, so a bomb stopped by time costs 45 s, not 120 (the same
    rubric the GPU cases get: tests/gpu_jobs.py)."""
    return attack_rubric(dest)


# ---- the cases built at run time (tests/attack_cases.py) -------------------------------------------
# name: (field, raw YAML value, the item that reads the field, its status, what any other item that changes
# must name). Aliases may be refused for the whole file (then every item that reads the answers fails, saying
# so). O.18 is graded by hand: it stays "manual" (never "failed"), and its text still names the refusal.
ANSWER_ATTACKS = {
    "billion_laughs": ("ex2.explanation", cases.laughs(), "O.18", "manual", ["ex2.explanation", "alias"]),
    "value_250kb": ("ex1.blocks_by_registers", "1" * 250_000, "O.3", "failed", []),
    "hex_300_digits": ("ex1.occupancy_pct", "0x" + "f" * 300, "O.9", "failed", []),
}

# kind: (items that must read so, what any other item that changes must name). The 100 KB report may be
# refused for its size (every item then says so); the 50 KB one fits the size limit and must be parsed.
REPORT_ATTACKS = {
    "heading_8kb": ({}, []),
    "code_spans_50kb": ({}, []),
    "code_spans_100kb": ({}, ["limit"]),
    "citation_1e999": ({"R.2": ["failed", "1e999"]}, []),
}

SYMLINK_STAGES = {"gemm_folder_is_link": ["naive", "report"], "wrapped_folder_is_link": ["naive", "report"],
                  "stage_file_links_to_itself": ["naive", "coalesced"], "link_at_depth_3": ["naive", "coalesced"]}


# ---- the jobs ---------------------------------------------------------------------------------------
def _register(jobs: Jobs, rubric: Path, reuse: dict[str, str]) -> None:
    """``reuse``: the session's compile reuse, for the gradings whose claim is about what the grader makes of
    answers.yaml, report.md, links, a zip or a batch's rows, where every compile is of the solution's own
    unmodified sources. The cases of EXPECTED.yaml (the compile is what they attack), the zip bomb and the
    grading with no student user compile for real."""
    def case(c: str, **kw):
        return lambda w: grade(SUBS / c, w, EXPECTED[c]["stages"], rubric=rubric, **kw)

    for c in CPU_CASES:
        heavy = c in ("include_dev_zero", "include_dev_urandom_splice", "macro_bomb")
        jobs.add(f"test_attack_verdicts[{c}]", case(c, limit_s=180 if heavy else 120), heavy=heavy)
    jobs.add("baseline:occupancy", lambda w: grade(cases.answers(w, None), w, ["occupancy"], rubric=rubric, env=reuse))
    jobs.add("baseline:report", lambda w: grade(cases.report(w, None), w, ["report"], rubric=rubric, env=reuse))
    def answers_attack(w: Path, fld: str, raw: str) -> Graded:
        jobs.result("baseline:occupancy")  # started first (FIRST): its occ.cu compiles are the ones reused here
        return grade(cases.answers(w, fld, raw), w, ["occupancy"], rubric=rubric, limit_s=60, env=reuse)

    for name, (fld, raw, _, _, _) in ANSWER_ATTACKS.items():
        jobs.add(f"test_answers_attack[{name}]", lambda w, f=fld, r=raw: answers_attack(w, f, r))
    for kind in REPORT_ATTACKS:
        jobs.add(f"test_report_attack[{kind}]",
                 lambda w, k=kind: grade(cases.report(w, k), w, ["report"], rubric=rubric, limit_s=60, env=reuse))
    for kind, stages in SYMLINK_STAGES.items():
        jobs.add(f"test_symlink_refused[{kind}]",
                 lambda w, k=kind, s=stages: grade(cases.symlinked(w, k), w, s, rubric=rubric, env=reuse))

    def zip_and_folder(w: Path) -> tuple[Graded, Graded]:
        folder = w / "folder"
        (folder / "my-ladder" / "gemm").mkdir(parents=True)
        shutil.copy(SOL / "gemm" / "naive.cu", folder / "my-ladder" / "gemm" / "naive.cu")
        shutil.copy(SOL / "report.md", folder / "my-ladder" / "report.md")
        z = cases.zip_of(folder, w / "submission.zip")
        return (grade(z, w / "zip", ["naive", "report"], rubric=rubric, env=reuse),
                grade(folder, w / "dir", ["naive", "report"], rubric=rubric, env=reuse))

    jobs.add("test_zip_grades_like_its_folder", zip_and_folder)
    jobs.add("test_zip_bomb_refused", lambda w: grade(cases.zip_bomb(w / "submission.zip"), w, ["naive"],
                                                      rubric=rubric, limit_s=90), heavy=True)
    jobs.add("test_batch_bad_entry_costs_one_row", lambda w: grade(
        w, w, None, rubric=rubric, limit_s=240, env=reuse,
        command=[str(cases.export(w / "export.zip")), "--batch", "--out", str(w / "out"), "--no-gpu", "--quiet",
                 "--stages", "naive", "--workers", "2", "--rubric", str(rubric)]))
    jobs.add("test_student_user_none", lambda w: grade(SOL, w, ["naive", "occupancy"], rubric=rubric,
                                                       env={"GRADER_STUDENT_USER": "none"}))


# Started before any other grading: the answers attacks wait for it in their thread, so it must never queue
# behind them.
FIRST = ("baseline:occupancy",)


@pytest.fixture(scope="module")
def jobs(request, tmp_path_factory, session_compile_reuse):
    SECRET.write_text("".join(f"{SECRET_MARKER} line {k}: int secret_{k} = ;\n" for k in range(4)))
    SECRET.chmod(0o644)
    base = tmp_path_factory.mktemp("attacks")
    pool = Jobs(base)
    _register(pool, _rubric(base / "rubric_attacks.yaml"), session_compile_reuse)
    wanted = [it.name for it in request.session.items
              if getattr(getattr(it, "module", None), "__name__", "") == __name__ and it.name in pool.builders]
    if any("answers" in n for n in wanted):
        wanted.append("baseline:occupancy")
    if any("report" in n for n in wanted):
        wanted.append("baseline:report")
    # The gradings that must be fast go first, before the bombs and compiles load the machine.
    pool.start(sorted(wanted, key=lambda n: (n not in FIRST, not n.startswith(("baseline", "test_answers",
                                                                                  "test_report")))))
    yield pool
    pool.close()


# ---- what every grading must satisfy ------------------------------------------------------------------
def sound(g: Graded, rcs: tuple[int, ...] = (0,)) -> dict[str, dict]:
    """The grading ended by itself with one of ``rcs``, wrote a whole results.json, leaked nothing, left
    no process behind; returns its items by number."""
    assert not g.timed_out, f"the grader ran past the test's {g.limit_s:g} s limit and was killed"
    assert g.rc in rcs, f"exit code {g.rc}; stderr ends:\n{g.stderr[-2500:]}"
    assert g.results is not None, "no results.json"
    assert not g.leftovers, "processes of the case outlived the grading:\n" + "\n".join(g.leftovers)
    leaked = [name for name in ("results.json", "summary.md", "grading.json") if SECRET_MARKER in g.text(name)]
    assert not leaked, f"a line of the secret file appears in {leaked}"
    faked, traceback = FAKE_RESULTS in g.text(), "Traceback" in g.text()
    assert not faked, "results.json was overwritten by the submission"
    assert not traceback, "a traceback in results.json"
    broken = [n for n, t in g.tests.items() if "the grader failed" in t.get("output", "")]
    assert not broken, f"the grader failed on items {broken}: {g.tests[broken[0]]['output'][:400]}"
    return g.tests


def check(tests: dict[str, dict], expectations: dict) -> None:
    """Each item has its status, and its feedback holds the text (or one of the texts) expected."""
    for number, (status, needle) in expectations.items():
        assert number in tests, f"{number} is missing from results.json"
        out = tests[number]["output"]
        assert tests[number]["extra_data"]["status"] == status, (number, out[:600])
        needles = needle if isinstance(needle, list) else [needle]
        assert any(n in out for n in needles), (number, needles, out[:600])


def same_as(tests: dict[str, dict], baseline: dict[str, dict], but: dict, cause: Sequence[str] = ()) -> None:
    """Every item of ``baseline`` has the same status here, except those in ``but`` (checked instead) and
    items that failed naming one of ``cause``."""
    assert set(tests) == set(baseline), set(tests) ^ set(baseline)
    check(tests, but)
    moved = {n: (baseline[n]["extra_data"]["status"], t["extra_data"]["status"], t["output"][:200])
             for n, t in tests.items() if n not in but and t["extra_data"]["status"] != baseline[n]["extra_data"]["status"]
             and not (t["extra_data"]["status"] == "failed" and any(c in t["output"] for c in cause))}
    assert not moved, f"items the attack should not touch changed (baseline, now, message): {moved}"


def mentions(g: Graded, number: str, needles: list[str]) -> bool:
    """The item's feedback or the submission's overall message names one of ``needles``."""
    text = g.tests[number]["output"] + "\n" + str((g.results or {}).get("output", ""))
    return any(n in text for n in needles)


# ---- the tests ----------------------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("case", CPU_CASES)
def test_attack_verdicts(jobs, case, request):
    check(sound(jobs.result(request.node.name)), EXPECTED[case]["attack"])


@needs_nvcc
@pytest.mark.parametrize("name", list(ANSWER_ATTACKS))
def test_answers_attack(jobs, name, request):
    field, _, item, status, cause = ANSWER_ATTACKS[name]
    g = jobs.result(request.node.name)
    tests = sound(g)
    # O.1 reads occ.cu only: it is graded whatever happens to the answers.
    same_as(tests, sound(jobs.result("baseline:occupancy")),
            {item: [status, [field, *cause]], "O.1": ["passed", ""]}, cause)


@pytest.mark.parametrize("kind", list(REPORT_ATTACKS))
def test_report_attack(jobs, kind, request):
    g = jobs.result(request.node.name)
    tests = sound(g)
    assert len(g.text()) < 200_000, "results.json echoes the attack"
    but, cause = REPORT_ATTACKS[kind]
    same_as(tests, sound(jobs.result("baseline:report")), but, cause)


@needs_nvcc
@pytest.mark.parametrize("kind", list(SYMLINK_STAGES))
def test_symlink_refused(jobs, kind, request):
    g = jobs.result(request.node.name)
    tests = sound(g)
    assert tests["1.compiles"]["extra_data"]["status"] == "failed" and tests["1.compiles"]["score"] == 0
    assert mentions(g, "1.compiles", ["symbolic link", "symlink"]), tests["1.compiles"]["output"][:600]
    if kind == "wrapped_folder_is_link":  # nothing of the submission is its own: no point at all
        assert g.results["score"] == 0 and all(t.get("score", 0) == 0 for t in tests.values())  # hand-graded: none
    elif kind == "gemm_folder_is_link":  # the report is the student's own and is graded as usual
        check(tests, {"R.1": ["passed", ""], "R.11": ["passed", ""]})
    else:
        check(tests, {"2.compiles": ["passed", ""]})


@needs_nvcc
def test_zip_grades_like_its_folder(jobs, request):
    zipped, folder = jobs.result(request.node.name)
    verdicts = {n: (t["extra_data"]["status"], t.get("score")) for n, t in sound(folder).items()}
    assert {n: (t["extra_data"]["status"], t.get("score")) for n, t in sound(zipped).items()} == verdicts
    assert verdicts["1.compiles"] == ("passed", 2.0)


def test_zip_bomb_refused(jobs, request):
    g = jobs.result(request.node.name)
    tests = sound(g, rcs=(0, 2))
    assert (g.results or {}).get("score", 0) == 0 and all(t.get("score", 0) == 0 for t in tests.values())
    assert any(w in g.text() for w in ("zip bomb", "ratio", "inflates", "compress", "too large")), g.text()[:800]
    written = sum(p.stat().st_size for p in g.out.parent.rglob("*") if p.is_file() and p.name != "submission.zip")
    assert written < 64 << 20, f"{written:,} bytes were written: the bomb was unpacked"


@needs_nvcc
def test_batch_bad_entry_costs_one_row(jobs, request):
    g = jobs.result(request.node.name)
    assert not g.timed_out and g.rc == 0 and not g.leftovers, (g.rc, g.leftovers, g.stderr[-2500:])
    with open(g.out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {r["folder"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(cases.FORMULA_NAMES)
    for folder, row in rows.items():
        if folder == cases.BAD_ENTRY:
            assert row["status"] not in ("graded", ""), row
        else:
            assert row["status"] == "graded" and float(row["naive.compiles"]) == 2.0, row
        name = row["names"]
        assert name[:1] not in ("=", "+", "-", "@") and cases.FORMULA_NAMES[folder] in name, name


@needs_nvcc
def test_student_user_none(jobs, request):
    check(sound(jobs.result(request.node.name)),
          {"1.compiles": ["passed", ""], "O.1": ["passed", ""], "O.35": ["passed", ""]})


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES)
def test_gpu_attack_verdicts(attacks_graded, case):
    # Graded with the suite's other GPU gradings, one case at a time (tests/gpu_jobs.py: _attacks).
    g, unchanged = attacks_graded[case]
    tests = sound(g)
    assert unchanged, "results.json changed after the grader ended"
    check(tests, {**EXPECTED[case].get("attack", {}), **EXPECTED[case]["attack_gpu"]})
