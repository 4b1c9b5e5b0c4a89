"""Every broken or hostile submission in tests/submissions/ gets the verdict EXPECTED.yaml names.

Static expectations (compile, ptxas, SASS, the #include and launch-array checks) run everywhere,
CI included; GPU expectations are marked `gpu`. Cases that would be awkward to commit (a file over
the size limit, a symlink out of the submission, an empty file) are generated here, each the file of
another stage of one submission, graded once.

On the GPU every case is a stage of ONE grading (tests/gpu_jobs.py: the hostile composite), each
stage with the limits of the stage it stands for, and each test checks its case's items in it. A
hang and a printf flood cost their own stage's limit only: the tests below say how long they ran.
"""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grader.compile import toolchain
from grader.model import Verdict
from grader.rubric.load import load_rubric
from tests.gpu_jobs import (
    COMPOSITE_STAGE_LIMITS,
    HOST_CODE_MARKER,
    HOSTILE_CASES,
    ONE_TIMED_LAUNCH,
    case_tests,
    composite,
    composite_id,
)

ROOT = Path(__file__).resolve().parent.parent
SUBS = ROOT / "tests" / "submissions"
EXPECTED = yaml.safe_load((SUBS / "EXPECTED.yaml").read_text())
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def grade(sub: Path, out: Path, stages, *extra) -> dict:
    cmd = [sys.executable, str(ROOT / "grader" / "run_local.py"), str(sub), "--out", str(out), "--quiet",
           "--stages", ",".join(stages), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {t["number"]: t for t in json.loads((out / "results.json").read_text())["tests"]}


def check(tests: dict, expectations: dict) -> None:
    """Each item's status and message; a list of texts: the message holds one of them (EXPECTED.yaml's header)."""
    for number, (status, needle) in expectations.items():
        t = tests[number]
        assert t["extra_data"]["status"] == status, (number, t["output"][:600])
        needles = needle if isinstance(needle, list) else [needle]
        assert any(n in t["output"] for n in needles), (number, needles, t["output"][:600])
        correct = tests.get(number.split(".")[0] + ".correct", {}).get("extra_data", {}).get("status")
        if status != "passed" and number.split(".")[1] in ("speed", "beats_fp32") and correct != "passed":
            assert "TFLOP" not in t["output"]  # never a speed for a wrong kernel


def test_the_suite_has_at_least_twenty_cases():
    assert len(EXPECTED) + 3 >= 20  # + the three generated below
    for case in EXPECTED:
        assert (SUBS / case).is_dir(), case


@needs_nvcc
@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.slow] if e.get("slow") else [])
                                  for c, e in EXPECTED.items() if e.get("static")])
def test_static_verdicts(tmp_path, case):
    e = EXPECTED[case]
    if any(k.endswith((".fp32_only", ".wgmma_tma")) for k in e["static"]) and toolchain.find_cuobjdump().path is None:
        pytest.skip("SASS verdicts need cuobjdump (grader/bootstrap.sh installs it from NVIDIA's wheels)")
    extra = ["--no-gpu"]
    if e.get("compile_s"):  # a case that runs a compile to its limit: that limit, lowered, ends it sooner
        text = (ROOT / "rubric.yaml").read_text()
        assert "\n    compile_s: 120\n" in text
        (tmp_path / "rubric.yaml").write_text(text.replace("\n    compile_s: 120\n", f"\n    compile_s: {e['compile_s']}\n"))
        extra += ["--rubric", str(tmp_path / "rubric.yaml")]
    if case == "host_static_initializer":  # its static constructor would write the marker if host code ran
        HOST_CODE_MARKER.unlink(missing_ok=True)
    check(grade(SUBS / case, tmp_path / "out", e["stages"], *extra), e["static"])
    if case == "host_static_initializer":
        assert not HOST_CODE_MARKER.exists(), "the grader ran a student's host code (its static initializer)"


def test_the_gpu_composite_grades_each_case_as_its_own_stage(tmp_path):
    """The one grading the GPU cases share: a valid rubric whose stages are the cases' stages as they are
    (limits, items), each reading its case's file (no GPU needed to check that). A case asked for no
    speed verdict times one launch; the stage limits keep their derivation with less slack."""
    sub, path = composite(tmp_path)
    real, rubric = load_rubric(ROOT / "rubric.yaml"), load_rubric(path)
    pairs = [(c, s) for c in HOSTILE_CASES for s in EXPECTED[c]["stages"]]
    assert [st.id for st in rubric.stages] == [composite_id(c, s) for c, s in pairs]
    for (case, sid), st in zip(pairs, rubric.stages):
        orig = real.stage(sid)
        assert (st.limits, st.items, st.launch, st.kernel) == (orig.limits, orig.items, orig.launch, orig.kernel)
        timed = any(k.endswith(".speed") for k in EXPECTED[case]["gpu"])
        assert st.bench == (orig.bench if timed else dataclasses.replace(orig.bench, **ONE_TIMED_LAUNCH)), case
        assert st.number == f"{case}/{orig.number}" and (sub / st.file).is_file()
    assert rubric.occupancy is None and rubric.report is None
    assert rubric.stage_limits == dataclasses.replace(real.stage_limits, **COMPOSITE_STAGE_LIMITS)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c, e in EXPECTED.items() if e.get("gpu")])
def test_gpu_verdicts(hostile_graded, case):
    e = EXPECTED[case]
    assert hostile_graded.rc == 0, hostile_graded.stderr
    check(case_tests(hostile_graded, case), {**e.get("static", {}), **e["gpu"]})
    assert not hostile_graded.extra["host_code_ran"], "a student's host code ran"


def test_every_stop_a_case_accepts_is_a_run_verdict_its_message_names():
    """EXPECTED.yaml's ``stops``: each a verdict a run can end with, and the text given is one its
    correct item accepts, so the two expectations cannot drift apart."""
    cases = [c for c, e in EXPECTED.items() if e.get("stops")]
    assert {"printf_flood", "hang"} <= set(cases)
    for case in cases:
        e = EXPECTED[case]
        number = next(k for k in e["gpu"] if k.endswith(".correct"))
        accepted = e["gpu"][number][1]
        accepted = accepted if isinstance(accepted, list) else [accepted]
        for verdict, needle in e["stops"].items():
            assert verdict in {v.value for v in Verdict} and needle in accepted, (case, verdict)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c, e in EXPECTED.items() if e.get("stops")])
def test_a_flood_or_a_hang_costs_little(hostile_graded, case):
    """The flood is stopped the moment its output passes the rubric's output limit or at its stage's
    time limit, whichever comes first (on an H200 the output limit, on an H100 the time limit: a GPU's
    printf speed decides), and its message says which; the hang at its stage's limit (derived from the
    reference: about 15 s for naive)."""
    sid = composite_id(case, "naive")
    stage = hostile_graded.detail["stages"][sid]
    limit = stage["run_limit"]["seconds"]
    ran = hostile_graded.phase("run", sid)
    stops = EXPECTED[case]["stops"]
    print(f"{case}: {stage['verdict']}, the stage child ran {ran} s (limit {limit:g} s)")
    assert stage["verdict"] in stops, (stage["verdict"], stage["correctness_message"][:600])
    assert stops[stage["verdict"]] in stage["correctness_message"], stage["correctness_message"][:600]
    assert limit <= 16 and ran is not None and ran <= limit + 3, (ran, limit)


# kind: (the stage whose file is generated so, that stage's number, what its compile item must say)
GENERATED = {
    "oversize": ("naive", "1", "bytes; the limit is 1,048,576"),
    "symlink": ("coalesced", "2", "gemm/coalesced.cu is a symbolic link"),  # left out by intake, never followed
    "empty": ("tiled", "3", "gemm/tiled.cu is empty"),
}


@pytest.fixture(scope="module")
def generated_graded(tmp_path_factory) -> dict:
    """One submission whose stages' files are the generated bad inputs, one kind each, graded once: each
    is taken in (or left out) file by file, so one grading gives every kind's verdict."""
    root = tmp_path_factory.mktemp("generated")
    gemm = root / "sub" / "gemm"
    gemm.mkdir(parents=True)
    (gemm / "naive.cu").write_text("// padding\n" * 120_000)
    os.symlink("/etc/hostname", gemm / "coalesced.cu")
    (gemm / "tiled.cu").write_text("")
    return grade(root / "sub", root / "out", [stage for stage, _, _ in GENERATED.values()], "--no-gpu")


@pytest.mark.parametrize("kind", list(GENERATED))
def test_generated_bad_inputs(generated_graded, kind):
    _, number, needle = GENERATED[kind]
    check(generated_graded, {f"{number}.compiles": ["failed", needle], f"{number}.correct": ["failed", ""]})
