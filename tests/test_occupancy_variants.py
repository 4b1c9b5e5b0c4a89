"""Per-student variants of the occupancy exercises (rubric occupancy.variants, grader/occupancy/variants.py):
each draw keeps its exercise's teaching point, two students get different numbers, an answers file worked
for one student's numbers fails on another's with a message naming the numbers (never an accusation),
the default grades as without the feature, and a demo class grades with variants on."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from grader.model import Status
from grader.occupancy.answers import answer_schema, parse_answers
from grader.occupancy.calculator import KIB, api_occupancy, hand_occupancy, hand_occupancy_on, limits_for
from grader.occupancy.exercises import grade_occupancy
from grader.occupancy.variants import (
    annotate,
    ex1_candidates,
    ex1_problem,
    ex2_candidates,
    ex2_problem,
    program_defines,
    student_of,
    variant_for,
)
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
EX1_ITEMS = ("ex1.warps_per_block", "ex1.blocks_by_registers", "ex1.blocks_by_shared_mem", "ex1.blocks_by_warps",
             "ex1.blocks_by_hardware", "ex1.max_blocks", "ex1.bottleneck", "ex1.occupancy", "ex1.fix",
             "ex1.fix_numbers")
ACCUSING = ("copied", "copy", "cheat", "plagiar", "classmate", "dishonest")


@pytest.fixture(scope="module")
def cfg():
    return replace(load_rubric(ROOT / "rubric.yaml").occupancy, variants=True)


def variants_rubric(tmp_path: Path) -> Path:
    text = (ROOT / "rubric.yaml").read_text()
    assert "\n  ex1:\n" in text
    path = tmp_path / "rubric-variants.yaml"
    path.write_text(text.replace("\n  ex1:\n", "\n  variants: true\n  ex1:\n", 1))
    return path


def answers_for(cfg) -> str:
    """solutions/'s answers.yaml with Ex 1 and Ex 2 worked for ``cfg``'s numbers (the calculator's values)."""
    data = yaml.safe_load((ROOT / "solutions/occupancy/answers.yaml").read_text())
    e = cfg.ex1

    def hand(smem):
        return hand_occupancy(max_warps=e.max_warps, max_blocks=e.max_blocks, regs_per_sm=e.registers,
                              smem_per_sm=e.smem_per_sm, threads_per_block=e.threads_per_block,
                              regs_per_thread=e.regs_per_thread, smem_per_block=smem)
    occ = hand(e.smem_per_block)
    fix_kib = next(k for k in range(int(e.smem_per_block // KIB), -1, -1)
                   if hand(k * KIB).occupancy_pct >= e.target_occupancy_pct)
    fixed = hand(fix_kib * KIB)
    data["ex1"].update(warps_per_block=occ.warps_per_block, blocks_by_registers=occ.limits["registers"],
                       blocks_by_shared_mem=occ.limits["shared_mem"], blocks_by_warps=occ.limits["warps"],
                       blocks_by_hardware=occ.limits["blocks"], max_blocks=occ.blocks_per_sm,
                       bottleneck=list(occ.limiting), occupancy_pct=round(occ.occupancy_pct, 2),
                       fix={"threads_per_block": e.threads_per_block, "regs_per_thread": e.regs_per_thread,
                            "shared_mem_kib": fix_kib, "max_blocks": fixed.blocks_per_sm,
                            "bottleneck": list(fixed.limiting), "occupancy_pct": round(fixed.occupancy_pct, 2)})
    lim = limits_for(cfg.reference.compute_capability)
    regs = data["ex2"]["work_registers"]
    b, s = cfg.ex2.block_size, cfg.ex2.dynamic_smem
    api = api_occupancy(lim, block_size=b, registers=regs, dynamic_smem=s)
    data["ex2"].update(api_blocks=api.blocks_per_sm, api_occupancy_pct=round(api.occupancy_pct, 2),
                       hand_blocks=hand_occupancy_on(lim, threads_per_block=b, regs_per_thread=regs,
                                                     smem_per_block=s).blocks_per_sm)
    return yaml.safe_dump(data, sort_keys=False)


def graded(cfg, text: str) -> dict:
    return {r.item: r for r in grade_occupancy(cfg, parse_answers(text, answer_schema(cfg)))}


def test_the_handouts_numbers_keep_the_teaching_points_the_generator_checks(cfg):
    assert ex1_problem(cfg.ex1) == "" and ex2_problem(cfg, cfg.ex2) == ""
    # A kernel limited by registers, not shared memory, is refused: the check can fail.
    assert "not by shared memory alone" in ex1_problem(replace(cfg.ex1, regs_per_thread=255, smem_per_block=KIB))
    assert "agree" in ex2_problem(cfg, replace(cfg.ex2, dynamic_smem=0)) or ex2_problem(cfg, replace(
        cfg.ex2, dynamic_smem=0))
    assert len(ex1_candidates(cfg)) > 50 and len(ex2_candidates(cfg)) > 10
    assert cfg.ex1 not in ex1_candidates(cfg) and cfg.ex2 not in ex2_candidates(cfg)


def test_two_students_get_different_numbers_and_one_student_always_the_same(cfg):
    alice, bob = variant_for(cfg, "s1001"), variant_for(cfg, "s1002")
    assert (alice.cfg.ex1, alice.cfg.ex2) != (bob.cfg.ex1, bob.cfg.ex2) and alice.name != bob.name
    assert variant_for(cfg, " S1001 ").cfg == alice.cfg  # the identity is trimmed and lower-cased
    assert variant_for(replace(cfg, variant_salt="spring"), "s1001").name != alice.name
    names = {variant_for(cfg, f"s{n}").cfg.ex1 for n in range(40)}
    assert len(names) > 30  # a class of 40 shares few Ex 1 kernels
    for v in (alice, bob):
        assert ex1_problem(v.cfg.ex1) == "" and ex2_problem(v.cfg, v.cfg.ex2) == ""
        assert v.cfg.ex3 == cfg.ex3 and v.cfg.ex4 == cfg.ex4 and v.cfg.ex5 == cfg.ex5 and v.cfg.ex6 == cfg.ex6
    assert student_of([{"name": "A", "sid": "", "email": "B@X.EDU"}, {"name": "C", "sid": "9", "email": ""}]) == "9"
    assert student_of([]) is None


def test_answers_worked_for_one_variant_fail_on_anothers_naming_the_numbers(cfg):
    alice, bob = variant_for(cfg, "s1001"), variant_for(cfg, "s1002")
    mine = graded(alice.cfg, answers_for(alice.cfg))
    assert all(mine[i].status is Status.PASSED for i in EX1_ITEMS), {i: mine[i].message for i in EX1_ITEMS}
    assert mine["ex2.answers"].status is Status.PASSED, mine["ex2.answers"].message
    other = {r.item: r for r in annotate(list(graded(bob.cfg, answers_for(alice.cfg)).values()), bob)}
    failed = [i for i in (*EX1_ITEMS, "ex2.answers") if other[i].status is Status.FAILED]
    assert "ex1.max_blocks" in failed and "ex2.answers" in failed
    for item in failed:
        text = other[item].message
        assert f"Graded for your variant {bob.name}" in text and f"{bob.cfg.ex1.threads_per_block} threads" in text
        assert "python -m grader variant --student s1002" in text
        assert not any(word in text.lower() for word in ACCUSING), text
    # Items that do not read a varied exercise are untouched.
    assert "variant" not in other["ex5.active_warps"].message


def test_without_variants_the_rubric_and_the_build_are_todays(tmp_path):
    from grader.pipeline import _with_variant

    rubric = load_rubric(ROOT / "rubric.yaml")
    assert rubric.occupancy is not None and rubric.occupancy.variants is False
    notes: list[str] = []
    assert _with_variant(rubric, "s1001", notes) == (rubric, None) and notes == []
    assert program_defines(rubric.occupancy) == []
    on = load_rubric(variants_rubric(tmp_path))
    changed, variant = _with_variant(on, "s1001", notes)
    assert variant is not None and changed.occupancy == variant.cfg and variant.name in notes[0]
    assert program_defines(changed.occupancy) == [f"-DEX2_BLOCK={variant.cfg.ex2.block_size}",
                                                  f"-DEX2_SMEM={variant.cfg.ex2.dynamic_smem}"]
    notes = []
    assert _with_variant(on, None, notes) == (on, None) and "no student was named" in notes[0]


def test_variant_command_prints_the_students_numbers(tmp_path):
    rubric = variants_rubric(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "grader", "variant", "--student", "s1001", "--rubric", str(rubric)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    v = variant_for(load_rubric(rubric).occupancy, "s1001")
    assert proc.returncode == 0 and v.name in proc.stdout and v.lines()[0] in proc.stdout
    assert " ".join(v.program_defines()) in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "grader", "variant", "--student", "s1001"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "occupancy.variants is off" in proc.stdout


def test_demo_class_grades_with_variants_on(tmp_path):
    """A batch of two students with variants on: each grading names its own variant; the first student's
    answers pass Ex 1 on their numbers; the second student, handing in the same answers file, fails Ex 1's
    items on theirs, told which numbers they were graded for."""
    rubric = variants_rubric(tmp_path)
    cfg = load_rubric(rubric).occupancy
    first, second = variant_for(cfg, "s1001"), variant_for(cfg, "s1002")
    export = tmp_path / "export"
    meta = ""
    for n, sid in ((1, "s1001"), (2, "s1002")):
        sub = export / f"submission_{n}"
        shutil.copytree(ROOT / "solutions/occupancy", sub / "occupancy")
        (sub / "occupancy/answers.yaml").write_text(answers_for(first.cfg))
        meta += f"submission_{n}:\n  :submitters:\n  - :name: Student {n}\n    :sid: '{sid}'\n"
    (export / "submission_metadata.yml").write_text(meta)
    out = tmp_path / "batch"
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(export), "--out", str(out), "--no-gpu",
                           "--stages", "occupancy", "--rubric", str(rubric), "--quiet", "--workers", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for n, v in ((1, first), (2, second)):
        grading = json.loads((out / "submissions" / f"submission_{n}" / "grading.json").read_text())
        assert any(v.name in note for note in grading["notes"]), grading["notes"]
        # Gradescope's feedback (results.json's output, summary.md) names the variant.
        results = json.loads((out / "submissions" / f"submission_{n}" / "results.json").read_text())
        assert f"variant {v.name}" in results["output"]
    mine = json.loads((out / "submissions/submission_1/grading.json").read_text())
    theirs = json.loads((out / "submissions/submission_2/grading.json").read_text())

    def items(g):  # grading.json's item records of the occupancy section
        return {r["item"]: r for r in g["items"] if r["stage"] == "occupancy"}
    a, b = items(mine), items(theirs)
    assert a and b, sorted(mine)
    assert a["ex1.max_blocks"]["status"] == "passed" and b["ex1.max_blocks"]["status"] == "failed"
    assert f"Graded for your variant {second.name}" in b["ex1.max_blocks"]["message"]
    assert math.isclose(a["ex1.occupancy"]["score"], a["ex1.occupancy"]["max_score"])


def test_gradescope_and_batch_name_the_student_to_the_grading(tmp_path):
    from grader.deploy.batch.pool import Options, child_command
    from grader.deploy.gradescope.run import gradescope_submitters
    from grader.untrusted.export import Submission

    (tmp_path / "submission_metadata.json").write_text(json.dumps(
        {"id": 7, "users": [{"name": "B", "sid": "S2002", "email": "b@x.edu"},
                            {"name": "A", "sid": "s1001", "email": "a@x.edu"}]}))
    meta = gradescope_submitters(tmp_path)
    cmd = child_command(Submission("sub", tmp_path, meta), tmp_path / "out", Options(rubric=ROOT / "rubric.yaml"))
    assert cmd[cmd.index("--student") + 1] == "s1001"  # a group: its smallest id, the same for every member
    assert cmd.index("--student") < cmd.index("--")
    assert gradescope_submitters(tmp_path / "nowhere") is None
    cmd = child_command(Submission("sub", tmp_path, None), tmp_path / "out", Options(rubric=ROOT / "rubric.yaml"))
    assert "--student" not in cmd


def test_the_handouts_parameter_table_tells_students_of_their_own_numbers_only_when_on(tmp_path):
    from grader.instructor.handout import block_occupancy_params

    assert "python -m grader variant" not in block_occupancy_params(load_rubric(ROOT / "rubric.yaml"))
    assert "python -m grader variant --student ID" in block_occupancy_params(load_rubric(variants_rubric(tmp_path)))


def test_a_service_token_draws_the_variant_its_jobs_are_graded_for(tmp_path):
    from grader.serve.auth import TokenRecord, token_hash
    from grader.serve.settings import Settings
    from grader.serve.worker import grade_command

    owner = TokenRecord(token_hash("tok-123"), "", "", 0.0, None).owner
    cmd = grade_command(Settings(), tmp_path / "a.zip", tmp_path / "out", None, student=owner)
    assert cmd[cmd.index("--student") + 1] == owner and cmd.index("--student") < cmd.index("--")
    assert "--student" not in grade_command(Settings(), tmp_path / "a.zip", tmp_path / "out", None)
    rubric = variants_rubric(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "grader", "variant", "--token", "tok-123", "--rubric", str(rubric)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and variant_for(load_rubric(rubric).occupancy, owner).name in proc.stdout
