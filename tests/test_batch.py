"""Batch grading of a Gradescope export (grader/deploy/batch/).

One real run of `run_local.py EXPORT --batch` over 6 generated submissions plus a corrupt one, one
missing from the metadata, a metadata entry without a folder and a folder that is a link to the
solutions (static grading, one stage to keep it short), then its resume; the rest with a fake
child process (crash, hang, GPU pinning, --force, --retry-failed, shards, a zipped export, bad
export entries, formula injection) and the Slurm script with its merge.

The batch refuses to run where the sandbox cannot fence students' code unless told the code is
trusted; the submissions here are this repository's own, so the runs pass --trusted-submissions.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.deploy import batch
from grader.deploy.batch import plan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from make_demo_export import make_export, zip_export  # noqa: E402

needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")
# Every kind of tools/make_demo_export.py once, and a group of two (the sixth): what the rows below check.
N = 6


def read_csv(path: Path) -> tuple[list[str], dict[str, dict]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = {r["folder"]: r for r in reader}
        return list(reader.fieldnames or []), rows


def run_batch(export: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "grader" / "run_local.py"), str(export), "--batch",
                           "--out", str(out), "--no-gpu", "--stages", "naive", "--quiet", "--trusted-submissions",
                           *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    exp = tmp_path_factory.mktemp("export") / "assignment_1_export"
    make_export(exp, N)
    # corrupt: binary junk where the kernels are, answers that are not YAML, a broken zip
    bad = exp / "submission_399001"
    (bad / "gemm").mkdir(parents=True)
    (bad / "gemm" / "naive.cu").write_bytes(bytes(range(256)) * 40)
    (bad / "occupancy").mkdir()
    (bad / "occupancy" / "answers.yaml").write_text("ex1: [unclosed\n  : : :\n")
    (bad / "submission.zip").write_bytes(b"PK\x03\x04 not really a zip")
    # a folder that is a link to the solutions: refused, never followed
    (exp / "submission_399004").symlink_to(ROOT / "solutions", target_is_directory=True)
    # a folder that the metadata does not list, and a metadata entry without a folder
    (exp / "submission_399002" / "gemm").mkdir(parents=True)
    (exp / "submission_399002" / "gemm" / "naive.cu").write_text((ROOT / "solutions/gemm/naive.cu").read_text())
    with open(exp / "submission_metadata.yml", "a", encoding="utf-8") as f:
        f.write(textwrap.dedent("""\
            submission_399001:
              :submitters:
              - :name: Corrupt Upload
                :sid: '999001'
                :email: corrupt@example.edu
              :created_at: 2026-11-30 23:59:59.000000000 -08:00
              :score: !ruby/object:BigDecimal 18:0.0
            submission_399003:
              :submitters:
              - :name: Folder Missing
                :sid: '999003'
                :email: missing@example.edu
            """))
    return exp


@needs_nvcc
def test_batch_over_an_export_then_resume(export, tmp_path):
    out = tmp_path / "out"
    proc = run_batch(export, out, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    columns, rows = read_csv(out / "grades.csv")
    assert columns[:len(batch.META_COLUMNS)] == batch.META_COLUMNS
    assert {"naive.compiles", "naive.correct", "naive.fp32_only"} <= set(columns)
    assert not [c for c in columns if c.startswith(("coalesced.", "wmma."))]  # --stages naive
    assert len(rows) == N + 4
    graded = [r for r in rows.values() if r["status"] == "graded"]
    assert len(graded) == N + 2  # the corrupt one is graded too: the student's problem, as data
    linked = rows["submission_399004"]
    assert linked["status"] == "refused" and "symbolic link" in linked["note"]
    assert linked["total"] == "" and linked["naive.compiles"] == "" and linked["not_evaluated"] == ""  # not a 0
    first = rows["submission_310000"]  # solutions
    assert first["names"] == "Student 000" and first["sids"] == "900000"
    assert first["emails"] == "student000@example.edu" and first["created_at"].startswith("2026-11-01T10:00:00")
    assert float(first["naive.compiles"]) == 2.0 and float(first["total"]) >= 2.0
    assert first["naive.correct"] == "n/e"  # not evaluated (no GPU) is not a 0
    assert 0 < float(first["not_evaluated"]) and float(first["total"]) + float(first["not_evaluated"]) <= 10.0
    assert not (out / "submissions" / "submission_310000" / "work").exists()  # the work folder is removed
    assert first["max_total"] and float(first["max_total"]) == 10.0
    group = rows["submission_310005"]
    assert group["names"] == "Student 010; Student 011" and group["sids"] == "900010; 900011"
    assert float(rows["submission_310002"]["naive.compiles"]) == 0.0  # compile_error kind: naive missing
    # a 0 says why, in the note: the first item that earned nothing, with its reason
    assert "first item lost: 1.compiles:" in rows["submission_310002"]["note"], rows["submission_310002"]["note"]
    # the class view beside grades.csv: scores, pass rates, each submission's first lost item
    page = (out / "class-summary.md").read_text()
    assert f"{N + 4} submissions: " in page and f"{N + 2} graded" in page and "1 refused" in page
    assert "![score distribution](scores.png)" in page and (out / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rate = next(ln for ln in page.splitlines() if ln.startswith("| naive.compiles |"))
    compiled = sum(1 for r in graded if float(r["naive.compiles"]) == 2.0)
    assert rate.startswith(f"| naive.compiles | {compiled} (") and "| n/e" not in rate
    assert any(ln.startswith("| submission_310002 | graded |") and "1.compiles:" in ln for ln in page.splitlines())
    corrupt = rows["submission_399001"]
    assert corrupt["names"] == "Corrupt Upload" and float(corrupt["naive.compiles"]) == 0.0
    orphan = rows["submission_399002"]
    assert orphan["names"] == "" and orphan["status"] == "graded" and float(orphan["naive.compiles"]) == 2.0
    assert rows["submission_399003"]["status"] == "missing_folder" and rows["submission_399003"]["total"] == ""
    for folder, row in rows.items():
        if row["status"] in ("missing_folder", "refused"):
            continue
        res = json.loads((out / "submissions" / folder / "results.json").read_text())
        assert res["tests"] and abs(res["score"] - float(row["total"])) < 1e-9
    info = json.loads((out / "batch.json").read_text())
    assert info["graded_now"] == N + 3 and info["workers"] == 2 and info["missing_folders"] == ["submission_399003"]
    assert "not in submission_metadata.yml" in " ".join(info["notes"])

    # resume: nothing is graded again; a deleted result is the only one re-graded
    stamp = (out / "submissions" / "submission_310000" / "results.json").stat().st_mtime_ns
    (out / "submissions" / "submission_310004" / "results.json").unlink()
    again = run_batch(export, out)
    assert again.returncode == 0, again.stderr
    info = json.loads((out / "batch.json").read_text())
    assert info["graded_now"] == 1 and info["skipped"] == N + 2
    assert [r["folder"] for r in info["records"]] == ["submission_310004"]
    assert (out / "submissions" / "submission_310000" / "results.json").stat().st_mtime_ns == stamp
    assert read_csv(out / "grades.csv")[1].keys() == rows.keys()


@needs_nvcc
def test_stale_gradings_are_graded_again_and_said(tmp_path, fake, monkeypatch):
    import grader
    from grader.rubric.load import load_rubric

    exp = tmp_path / "exp"
    make_export(exp, 1, ("solutions",))
    rubric = tmp_path / "rubric.yaml"
    rubric.write_bytes((ROOT / "rubric.yaml").read_bytes())
    out = tmp_path / "out"

    def cli() -> tuple[subprocess.CompletedProcess, dict]:
        proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(exp), "--out", str(out), "--no-gpu",
                               "--stages", "naive", "--rubric", str(rubric), "--trusted-submissions"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc, json.loads((out / "batch.json").read_text())

    _, info = cli()
    assert info["graded_now"] == 1 and info["graded_by"]["rubric_sha256"] == load_rubric(rubric).sha256
    grading = json.loads((out / "submissions" / "submission_310000" / "grading.json").read_text())
    assert grading["rubric_sha256"] == load_rubric(rubric).sha256 and grading["gpu_graded"] is False
    assert grading["grader_version"] == info["graded_by"]["grader_version"]

    proc, info = cli()  # nothing changed: nothing graded
    assert info["graded_now"] == 0 and info["skipped"] == 1 and "0 to grade" in proc.stderr

    # a score-only rubric change (naive.compiles is worth 3 points, not 2): re-scored from the stored
    # measurements, not graded again, and said so
    rubric.write_text(rubric.read_text().replace('title: "compiles and defines mmNaive", points: 2',
                                                 'title: "compiles and defines mmNaive", points: 3'))
    proc, info = cli()
    assert info["graded_now"] == 0 and info["rescored"] == ["submission_310000"] and info["regraded"] == {}
    assert "1 re-scored without a GPU: the rubric change is score-only" in " ".join(proc.stderr.split())
    grading = json.loads((out / "submissions" / "submission_310000" / "grading.json").read_text())
    assert grading["rubric_sha256"] == load_rubric(rubric).sha256
    _, rows = read_csv(out / "grades.csv")
    assert {r["max_total"] for r in rows.values()} == {"11.0"}
    assert float(rows["submission_310000"]["naive.compiles"]) == 3.0
    proc, info = cli()  # and it is current now
    assert info["graded_now"] == 0 and info["rescored"] == [] and info["skipped"] == 1

    # a rubric change of what is measured (the naive stage's tolerance): graded again, and said so
    rubric.write_text(rubric.read_text().replace("tolerance: {rtol: 1.0e-3}", "tolerance: {rtol: 2.0e-4}", 1))
    assert load_rubric(rubric).stage("naive").rtol == 2.0e-4
    proc, info = cli()
    assert info["graded_now"] == 1 and info["regraded"] == {"rubric changed": 1}
    assert {r["why"] for r in info["records"]} == {"rubric changed"}
    said = [ln for ln in proc.stderr.splitlines() if "re-graded: rubric changed" in ln]
    assert len([ln for ln in said if "submission_310000: graded" in ln]) == 1  # the row says why
    assert said[0].startswith("batch: 1 submissions") and "1 re-graded: rubric changed" in said[-1]  # the totals
    _, rows = read_csv(out / "grades.csv")
    assert {r["max_total"] for r in rows.values()} == {"11.0"}  # the current rubric's, not the kept grading's 10
    assert float(rows["submission_310000"]["naive.compiles"]) == 3.0

    # a batch with a GPU grades again what was graded without one (the GPU child is mocked here)...
    opts = batch.Options(rubric=rubric, use_gpu=True, stages="naive")
    s = batch.grade_export(exp, out, quiet=True, make_cmd=fake, gpus=["0"], opts=opts)
    assert s.graded == 1 and s.regraded == {"graded without a GPU": 1}
    # ...a batch without one keeps GPU gradings of the same rubric and grader (--force would not)
    static = dataclasses.replace(opts, use_gpu=False)
    s = batch.grade_export(exp, out, quiet=True, make_cmd=fake, gpus=[], opts=static)
    assert s.graded == 0 and s.skipped == 1 and any("1 GPU grading(s) kept" in n for n in s.notes)
    # other stages, another grader version: graded again
    s = batch.grade_export(exp, out, quiet=True, make_cmd=fake, gpus=["0"],
                           opts=dataclasses.replace(opts, stages="naive,tiled"))
    assert s.regraded == {"other stages": 1}
    monkeypatch.setattr(grader, "code_version", lambda: "another-version")
    s = batch.grade_export(exp, out, quiet=True, make_cmd=fake, gpus=["0"],
                           opts=dataclasses.replace(opts, stages="naive,tiled"))
    assert s.regraded == {"grader changed": 1}


def test_grades_csv_says_not_evaluated_and_review(tmp_path):
    from grader.rubric.load import load_rubric

    sub = batch.Submission("submission_1", tmp_path, None)
    folder = tmp_path / "subs" / "submission_1"
    folder.mkdir(parents=True)

    def test(item: str, status: str, score: float, max_score: float) -> dict:
        return {"number": item, "score": score, "max_score": max_score, "tags": [],
                "extra_data": {"status": status, "stage": "naive", "item": item}}

    tests = [test("compiles", "passed", 2.0, 2.0), test("correct", "not_evaluated", 0.0, 3.0),
             test("speed", "review", 0.0, 4.0), test("fp32_only", "failed", 0.0, 1.0)]
    (folder / "results.json").write_text(json.dumps({"score": 2.0, "tests": tests}))
    columns, [row] = batch.csv_rows([sub], tmp_path / "subs", max_total=10.0)
    assert columns[:len(batch.META_COLUMNS)] == batch.META_COLUMNS
    assert row["total"] == 2.0 and row["max_total"] == 10.0 and row["not_evaluated"] == 3.0
    assert (row["naive.compiles"], row["naive.correct"], row["naive.speed"], row["naive.fp32_only"]) == \
        (2.0, "n/e", "review", 0.0)
    assert "held for review: naive.speed" in row["note"]
    (folder / "batch_status.json").write_text(json.dumps({"status": "timed_out"}))
    _, [row] = batch.csv_rows([sub], tmp_path / "subs", max_total=10.0)
    assert row["status"] == "timed_out" and row.get("total") is None and row.get("naive.compiles") is None
    # the current rubric's automatic points: hand-graded items are not the autograder's
    rubric = load_rubric(ROOT / "rubric.yaml")
    assert batch.automatic_points(rubric, ["naive"]) == rubric.stage("naive").max_points
    assert batch.automatic_points(rubric) < rubric.max_points
    # shards graded against different rubrics: the merge says so
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("submission_id,folder,status,max_total\n1,submission_1,graded,10\n")
    b.write_text("submission_id,folder,status,max_total\n2,submission_2,graded,11\n")
    _, warnings = batch.merge([a, b], tmp_path / "m.csv")
    assert any("max_total differs" in w for w in warnings)


def test_usage_errors(tmp_path):
    proc = run_batch(tmp_path / "nope", tmp_path / "out")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "grader.deploy.batch", "grade", str(tmp_path), "--stages", "nosuch",
                           "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown stage 'nosuch'" in proc.stderr
    with pytest.raises(batch.BatchError):
        batch.parse_shard("3/3")
    assert batch.parse_shard("1/4") == (1, 4)


# --------------------------------------------------------------------------------------------
# With a fake child: crash, hang, GPU pinning, force, retry, shards, zip
# --------------------------------------------------------------------------------------------
FAKE_CHILD = textwrap.dedent("""\
    import json, os, sys, time
    sub, out = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(sub, "CRASH")):
        print("Traceback: the grader broke", file=sys.stderr)
        sys.exit(3)
    if os.path.exists(os.path.join(sub, "HANG")):
        time.sleep(60)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    test = {"name": "t", "number": "1.compiles", "score": 1.0, "max_score": 2.0, "status": "failed",
            "output": "", "output_format": "md", "visibility": "visible", "tags": [],
            "extra_data": {"status": "failed", "stage": "naive", "item": "compiles"}}
    res = {"score": 1.0, "execution_time": 0, "output": "", "output_format": "md", "visibility": "visible",
           "stdout_visibility": "hidden", "tests": [test], "extra_data": {"gpu": gpu}}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f)
    """)


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    return lambda sub, out, opts: [sys.executable, str(script), str(sub.path), str(out)]


@pytest.fixture
def pinned(tmp_path, monkeypatch) -> batch.Options:
    """Options whose rubric and grader version stay put while the test runs (others may be editing the
    checkout's rubric.yaml or grader/ meanwhile, which would make every grading stale)."""
    import grader

    rubric = tmp_path / "pinned-rubric.yaml"
    rubric.write_bytes((ROOT / "rubric.yaml").read_bytes())
    monkeypatch.setattr(grader, "code_version", lambda: "pinned-version")
    return batch.Options(rubric=rubric)


def _small_export(root: Path, names=("submission_1", "submission_2", "submission_3", "submission_4")) -> Path:
    root.mkdir(parents=True)
    meta = ""
    for name in names:
        (root / name / "gemm").mkdir(parents=True)
        (root / name / "gemm" / "naive.cu").write_text("// a student's file\n")
        meta += f"{name}:\n  :submitters:\n  - :name: N {name}\n    :sid: '{name[-1]}'\n    :email: {name}@x.edu\n"
    (root / "submission_metadata.yml").write_text(meta)
    return root


def test_crash_and_hang_cost_only_their_own_row(tmp_path, fake, pinned):
    exp = _small_export(tmp_path / "exp")
    (exp / "submission_2" / "CRASH").touch()
    (exp / "submission_3" / "HANG").touch()
    # the hung child sleeps 60 s; the others are a Python start and a file written, hundredths of a second
    s = batch.grade_export(exp, tmp_path / "out", workers=2, opts=dataclasses.replace(pinned, timeout_s=2),
                           quiet=True, make_cmd=fake, gpus=[])
    assert s.graded == 2 and s.failed == ["submission_2", "submission_3"]
    _, rows = read_csv(tmp_path / "out" / "grades.csv")
    assert rows["submission_2"]["status"] == "grader_error" and rows["submission_3"]["status"] == "timed_out"
    for folder in ("submission_2", "submission_3"):  # not evaluated: empty, never a 0
        assert rows[folder]["total"] == rows[folder]["naive.compiles"] == rows[folder]["not_evaluated"] == ""
    assert rows["submission_1"]["naive.compiles"] == "1.0" and rows["submission_4"]["status"] == "graded"
    for folder in ("submission_2", "submission_3"):
        res = json.loads((tmp_path / "out" / "submissions" / folder / "results.json").read_text())
        assert res["tests"][0]["tags"] == ["autograder_error"]
    crash = json.loads((tmp_path / "out" / "submissions" / "submission_2" / "results.json").read_text())
    assert "the grader broke" in crash["tests"][1]["output"]
    assert "timed out after 2 s" in (tmp_path / "out" / "submissions" / "submission_3" / "results.json").read_text()
    assert not list((tmp_path / "out" / "submissions").glob("*.partial"))

    # --retry-failed re-grades only the failures; --force everything
    (exp / "submission_2" / "CRASH").unlink()
    (exp / "submission_3" / "HANG").unlink()
    s = batch.grade_export(exp, tmp_path / "out", retry_failed=True, quiet=True, make_cmd=fake, gpus=[],
                           opts=pinned)
    assert s.graded == 2 and s.skipped == 2 and not s.failed
    assert s.regraded == {"failed before (--retry-failed)": 2}
    s = batch.grade_export(exp, tmp_path / "out", force=True, quiet=True, make_cmd=fake, gpus=[], opts=pinned)
    assert s.graded == 4 and s.skipped == 0 and s.regraded == {"--force": 4}


# A grading child with the GPU mocked: the real GPU lock (grader.pipeline.gpu_turn) and clock, sleeps
# where the probe, the compiles and the GPU steps would run. It records its phases as grading.json does.
FAKE_GPU_CHILD = textwrap.dedent("""\
    import json, os, sys, time
    from pathlib import Path
    from grader.clock import Clock
    from grader.pipeline import gpu_turn
    sub, out, lock = sys.argv[1], sys.argv[2], sys.argv[3]
    started = time.time()
    times = open(os.path.join(sub, "SLEEP")).read() if os.path.exists(os.path.join(sub, "SLEEP")) else "0.3 0.3 0"
    compile_s, gpu_s, start_s = map(float, times.split())
    # SYNC (optional): {"dir": a folder shared by the children, step: [mark on entering it, wait for this mark
    # before leaving it]}, for "probe", "compile_stages" and "run_stages"; a wait gives up after 60 s
    sync = json.load(open(os.path.join(sub, "SYNC"))) if os.path.exists(os.path.join(sub, "SYNC")) else {}

    def marks(step):
        mark, wait = sync.get(step) or (None, None)
        if mark:
            Path(sync["dir"], mark).touch()
        return wait

    def wait_for(name):
        end = time.monotonic() + 60
        while name and not Path(sync["dir"], name).exists() and time.monotonic() < end:
            time.sleep(0.01)
        if name:  # stay in the step a little past the mark: phases are kept to the millisecond, and a step that
            time.sleep(0.05)  # saw the mark within a millisecond of its making would seem to end before it

    time.sleep(start_s)  # a later start
    clock = Clock()
    turn = lambda: gpu_turn(Path(lock) if lock else None, clock, True)
    with turn(), clock.step("probe"):
        time.sleep(0.05)
        wait = marks("probe")
    wait_for(wait)
    with clock.step("compile_stages"):  # the CPU steps
        wait = marks("compile_stages")
        time.sleep(compile_s)
        wait_for(wait)
    with turn(), clock.step("run_stages"):  # the GPU steps
        wait = marks("run_stages")
        time.sleep(gpu_s)
        wait_for(wait)
    phases = [dict(name=p.name, seconds=p.seconds, stage=p.stage, detail=p.detail, ended=p.ended)
              for p in clock.phases]
    with open(os.path.join(out, "grading.json"), "w") as f:
        json.dump({"phases": phases}, f)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    test = {"name": "t", "number": "1.compiles", "score": 1.0, "max_score": 2.0, "status": "failed",
            "output": "", "output_format": "md", "visibility": "visible", "tags": [],
            "extra_data": {"status": "failed", "stage": "naive", "item": "compiles"}}
    res = {"score": 1.0, "execution_time": 0, "output": "", "output_format": "md", "visibility": "visible",
           "stdout_visibility": "hidden", "tests": [test], "extra_data": {"gpu": gpu, "lock": lock,
           "started": started}}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f)
    """)


@pytest.fixture
def fake_gpu(tmp_path):
    script = tmp_path / "fake_gpu_child.py"
    script.write_text(FAKE_GPU_CHILD)
    return lambda sub, out, opts: [sys.executable, str(script), str(sub.path), str(out), str(opts.gpu_lock or "")]


def _spans(grading: Path, name: str) -> list[tuple[float, float]]:
    phases = json.loads(grading.read_text())["phases"]
    return [(p["ended"] - p["seconds"], p["ended"]) for p in phases if p["name"] == name]


def test_two_gradings_per_gpu_share_its_lock_and_keep_it_busy(tmp_path, fake_gpu):
    exp = _small_export(tmp_path / "exp", tuple(f"submission_{i}" for i in range(6)))
    out = tmp_path / "out"
    s = batch.grade_export(exp, out, quiet=True, make_cmd=fake_gpu, gpus=["0", "1"])
    assert s.workers == ["0", "1", "0", "1"] and s.graded == 6  # two per GPU
    held: dict[str, list] = {"0": [], "1": []}
    for i in range(6):
        folder = out / "submissions" / f"submission_{i}"
        res = json.loads((folder / "results.json").read_text())
        status = json.loads((folder / "batch_status.json").read_text())
        gpu = status["gpu"]
        assert res["extra_data"]["gpu"] == gpu in ("0", "1")  # one GPU each, never both
        assert res["extra_data"]["lock"] == str(out / "locks" / f"gpu-{gpu}.lock")  # that GPU's own lock
        spans = _spans(folder / "grading.json", "gpu_held")
        assert len(spans) == 2 and status["gpu_held_s"] == pytest.approx(sum(b - a for a, b in spans), abs=0.01)
        held[gpu] += spans
    for gpu in ("0", "1"):
        turns = sorted(held[gpu])
        assert len(turns) >= 4  # two turns (probe, GPU steps) of at least two gradings
        for (_, end), (start, _) in zip(turns, turns[1:]):
            assert start >= end - 0.005, f"GPU {gpu}: two gradings held it at once"
    info = json.loads((out / "batch.json").read_text())
    assert info["gpus"] == ["0", "1"] and info["workers"] == 4 and info["per_gpu"] == 2
    for gpu in ("0", "1"):
        total = sum(r["gpu_held_s"] for r in info["records"] if r["gpu"] == gpu)
        assert info["gpu_busy"][gpu] == pytest.approx(total / info["wall_s"], abs=0.01) and info["gpu_busy"][gpu] > 0
    assert s.gpu_busy == info["gpu_busy"]

    # while one grading is timed on the GPU, the other one on that GPU compiles. Marks order the two
    # children whatever the machine's load: submission_1 leaves its compile only after submission_2's probe
    # (which needs the GPU's lock too), and stays timed until submission_2 compiles; submission_2 stays in
    # its compile until submission_1 is timed. Two gradings run one after the other could not overlap so:
    # the first's wait would give up, and the assert below fails.
    pair = _small_export(tmp_path / "pair", ("submission_1", "submission_2"))
    marks = tmp_path / "marks"
    marks.mkdir()
    (pair / "submission_1" / "SLEEP").write_text("0 0 0")
    (pair / "submission_2" / "SLEEP").write_text("0 0 0")
    (pair / "submission_1" / "SYNC").write_text(json.dumps(
        {"dir": str(marks), "compile_stages": [None, "probed-2"], "run_stages": ["timed-1", "compiling-2"]}))
    (pair / "submission_2" / "SYNC").write_text(json.dumps(
        {"dir": str(marks), "probe": ["probed-2", None], "compile_stages": ["compiling-2", "timed-1"]}))
    s = batch.grade_export(pair, tmp_path / "pair-out", quiet=True, make_cmd=fake_gpu, gpus=["0"])
    assert s.workers == ["0", "0"] and s.graded == 2
    assert sorted(p.name for p in marks.iterdir()) == ["compiling-2", "probed-2", "timed-1"]
    done = tmp_path / "pair-out" / "submissions"
    timed = {f: _spans(done / f / "grading.json", "run_stages")[0] for f in ("submission_1", "submission_2")}
    compiled = {f: _spans(done / f / "grading.json", "compile_stages")[0] for f in ("submission_1", "submission_2")}
    assert any(compiled[a][0] < timed[b][1] and timed[b][0] < compiled[a][1]
               for a, b in (("submission_2", "submission_1"), ("submission_1", "submission_2")))

    # without a GPU the pool takes no lock and has no busy share
    s = batch.grade_export(pair, tmp_path / "static", quiet=True, make_cmd=fake_gpu, gpus=[])
    assert s.workers == [None] and s.graded == 2 and s.gpu_busy == {}
    res = json.loads((tmp_path / "static" / "submissions" / "submission_1" / "results.json").read_text())
    assert res["extra_data"]["lock"] == "" and not (tmp_path / "static" / "locks").exists()



def test_the_longest_earlier_gradings_start_first(tmp_path, fake):
    exp = _small_export(tmp_path / "exp")
    first = tmp_path / "first"
    batch.grade_export(exp, first, quiet=True, make_cmd=fake, gpus=[])
    for folder, wall in (("submission_1", 3.0), ("submission_3", 9.0), ("submission_4", 5.0)):
        path = first / "submissions" / folder / "batch_status.json"
        rec = json.loads(path.read_text())
        path.write_text(json.dumps({**rec, "wall_s": wall + 2.0, "gpu_wait_s": 2.0}))  # alone: wall - wait
    assert batch.known_times([first])["submission_3"] == 9.0
    subs = [batch.Submission(f"submission_{i}", tmp_path, None) for i in range(1, 6)]
    order = [s.folder for s in batch.longest_first(subs, batch.known_times([first]))]
    assert order == ["submission_5", "submission_3", "submission_4", "submission_1", "submission_2"]
    assert batch.longest_first(subs, {}) == subs  # no earlier times: folder order

    s = batch.grade_export(exp, tmp_path / "second", quiet=True, make_cmd=fake, gpus=[], times_from=[first])
    assert s.graded == 4
    started = {}
    for folder in ("submission_1", "submission_2", "submission_3", "submission_4"):
        started[folder] = (tmp_path / "second" / "submissions" / folder / "results.json").stat().st_mtime
    assert sorted(started, key=started.__getitem__) == ["submission_3", "submission_4", "submission_1",
                                                        "submission_2"]
    assert json.loads((tmp_path / "second" / "batch.json").read_text())["longest_first"] is True


def test_visible_gpus_and_worker_plan(monkeypatch):
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)\n"
    monkeypatch.setattr(plan.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listing, stderr=""))
    assert batch.visible_gpus({}) == ["0", "1"]
    assert batch.visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}) == ["1"]
    assert batch.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-b,GPU-a"}) == ["GPU-b", "GPU-a"]
    assert batch.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    monkeypatch.setattr(plan.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError()))
    assert batch.visible_gpus({}) == []
    assert batch.plan_workers([], None) == [None]
    assert batch.plan_workers([], 3) == [None, None, None]
    assert batch.plan_workers(["0", "1"], None) == ["0", "1", "0", "1"]  # two per GPU, sharing its lock
    assert batch.plan_workers(["0", "1"], None, per_gpu=1) == ["0", "1"]
    assert batch.plan_workers(["0", "1"], 3) == ["0", "1", "0"]


def test_shards_and_merge(tmp_path, fake):
    exp = _small_export(tmp_path / "exp", tuple(f"submission_{i}" for i in range(5)))
    for i in range(2):
        batch.grade_export(exp, tmp_path / f"shard-{i}", shard=(i, 2), quiet=True, make_cmd=fake, gpus=[])
    _, a = read_csv(tmp_path / "shard-0" / "grades.csv")
    _, b = read_csv(tmp_path / "shard-1" / "grades.csv")
    assert set(a) == {"submission_0", "submission_2", "submission_4"} and set(b) == {"submission_1", "submission_3"}
    n, warnings = batch.merge([tmp_path / "shard-0", tmp_path / "shard-1", tmp_path / "nothing"],
                              tmp_path / "grades.csv")
    columns, rows = read_csv(tmp_path / "grades.csv")
    assert n == 5 and sorted(rows) == [f"submission_{i}" for i in range(5)]
    assert columns[:len(batch.META_COLUMNS)] == batch.META_COLUMNS and "naive.compiles" in columns
    assert any("no grades.csv" in w for w in warnings)


def test_zipped_export_and_missing_metadata(tmp_path, fake):
    src = _small_export(tmp_path / "src", ("submission_7", "submission_8"))
    zip_export(src, tmp_path / "export.zip")
    s = batch.grade_export(tmp_path / "export.zip", tmp_path / "out", quiet=True, make_cmd=fake, gpus=[])
    assert s.graded == 2
    _, rows = read_csv(tmp_path / "out" / "grades.csv")
    assert rows["submission_7"]["names"] == "N submission_7"
    (src / "submission_metadata.yml").unlink()
    s = batch.grade_export(src, tmp_path / "out2", quiet=True, make_cmd=fake, gpus=[])
    assert s.graded == 2 and any("no submission_metadata.yml" in n for n in s.notes)


@needs_nvcc
def test_slurm_array_script_shards_and_merges(tmp_path):
    exp = tmp_path / "exp"
    make_export(exp, 2, ("solutions", "starter"))
    for task in (3, 4):  # --array=3-4: shards 0 and 1 of 2
        env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="3",
                   SLURM_ARRAY_TASK_COUNT="2", SLURM_SUBMIT_DIR=str(ROOT), GRADER_PYTHON=sys.executable,
                   GRADER_BATCH_ARGS="--no-gpu --stages naive --quiet --trusted-submissions")
        proc = subprocess.run(["bash", str(ROOT / "tools" / "slurm_batch.sbatch"), str(exp), str(tmp_path / "out")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert f"shard {task - 3}/2" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "grader.deploy.batch", "merge", str(tmp_path / "out" / "shard-0"),
                           str(tmp_path / "out" / "shard-1"), "--out", str(tmp_path / "grades.csv")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    _, rows = read_csv(tmp_path / "grades.csv")
    assert len(rows) == 2 and all(r["status"] == "graded" for r in rows.values())


# --------------------------------------------------------------------------------------------
# Bad export entries, formula injection, the sandbox check, the new command line
# --------------------------------------------------------------------------------------------
def test_bad_export_entries_cost_only_their_own_rows(tmp_path, fake, pinned):
    import stat
    import zipfile

    src = _small_export(tmp_path / "src", ("submission_1", "submission_2", "submission_3", "submission_4"))
    meta = (src / "submission_metadata.yml").read_text() + "submission_5:\n  :submitters: []\n"
    (src / "submission_metadata.yml").write_text(meta)
    zpath = tmp_path / "export.zip"
    zip_export(src, zpath)
    top = "assignment_0_export"
    with zipfile.ZipFile(zpath, "a", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{top}/submission_5", b"a file with a submission folder's name")  # then a member under it
        zf.writestr(f"{top}/submission_5/gemm/naive.cu", b"// lost\n")
        zf.writestr(f"{top}/submission_2/pad.bin", b"\0" * (4 * 1024 * 1024))  # a zip bomb by ratio
        link = zipfile.ZipInfo(f"{top}/submission_3/gemm/tiled.cu")
        link.create_system, link.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, str(ROOT / "solutions" / "gemm" / "tiled.cu"))
        zf.writestr("../escaped.txt", b"never written")
        zf.writestr(f"{top}/submission_4/" + "d/" * 1500 + "deep.txt", b"1500 folders down")
    s = batch.grade_export(zpath, tmp_path / "out", quiet=True, make_cmd=fake, gpus=[], opts=pinned)
    assert s.graded == 4 and not s.failed
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "out" / "escaped.txt").exists()
    assert not list((tmp_path / "out" / "export").rglob("pad.bin"))
    assert not [p for p in (tmp_path / "out" / "export").rglob("*") if p.is_symlink()]
    _, rows = read_csv(tmp_path / "out" / "grades.csv")
    assert rows["submission_5"]["status"] == "bad_entry" and "is a file" in rows["submission_5"]["note"]
    assert rows["submission_2"]["status"] == "graded" and "zip bomb" in rows["submission_2"]["note"]
    assert rows["submission_3"]["status"] == "graded" and "symbolic link" in rows["submission_3"]["note"]
    assert rows["submission_1"]["note"] == "" and rows["submission_4"]["naive.compiles"] == "1.0"
    assert "more than 34 nested folders" in rows["submission_4"]["note"]  # the export's two folders, then 32
    assert not (tmp_path / "out" / "export" / top / "submission_4" / "d").exists()  # the member was never written
    assert any("escaped.txt" in n for n in s.notes)
    # a resumed run reads what the first extraction left out instead of extracting again
    again = batch.grade_export(zpath, tmp_path / "out", quiet=True, make_cmd=fake, gpus=[], opts=pinned)
    assert again.skipped == 4
    assert "zip bomb" in read_csv(tmp_path / "out" / "grades.csv")[1]["submission_2"]["note"]


def test_csv_cells_that_start_like_formulas_are_neutralized(tmp_path, fake):
    assert batch.safe_cell("=HYPERLINK(\"http://x\",\"y\")") == "'=HYPERLINK(\"http://x\",\"y\")"
    for text in ("+1+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx"):
        assert batch.safe_cell(text) == "'" + text
    assert batch.safe_cell("-1.5") == "-1.5" and batch.safe_cell("Ann Lee") == "Ann Lee"
    assert batch.safe_cell(-2.0) == -2.0 and batch.safe_cell(None) == "" and batch.safe_cell("'=x") == "'=x"

    exp = _small_export(tmp_path / "exp", ("submission_1", "submission_2"))
    (exp / "submission_metadata.yml").write_text(
        "submission_1:\n  :submitters:\n  - :name: '=HYPERLINK(\"http://evil\",\"click\")'\n"
        "    :sid: '+1+1'\n    :email: '@SUM(A1:A9)'\n"
        "submission_2:\n  :submitters:\n  - :name: \"-2+3\"\n    :sid: '42'\n    :email: a@x.edu\n")
    batch.grade_export(exp, tmp_path / "out", quiet=True, make_cmd=fake, gpus=[])
    _, rows = read_csv(tmp_path / "out" / "grades.csv")
    one, two = rows["submission_1"], rows["submission_2"]
    assert one["names"] == "'=HYPERLINK(\"http://evil\",\"click\")" and one["sids"] == "'+1+1"
    assert one["emails"] == "'@SUM(A1:A9)" and two["names"] == "'-2+3" and two["sids"] == "42"
    assert one["naive.compiles"] == "1.0"
    # the merge writes through the same function, and quoting twice changes nothing
    batch.merge([tmp_path / "out"], tmp_path / "merged.csv")
    assert read_csv(tmp_path / "merged.csv")[1]["submission_1"]["names"] == one["names"]


def test_batch_refuses_an_unfenced_machine_unless_trusted(tmp_path, monkeypatch):
    from grader.sandbox import guard as sandbox
    exp = _small_export(tmp_path / "exp", ("submission_1",))
    env = dict(os.environ, GRADER_SANDBOX="weak")  # the sandbox's own switch to its weak fence
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(exp), "--out", str(tmp_path / "out"),
                           "--no-gpu", "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "refusing to grade a whole class without the sandbox" in proc.stderr
    assert "GRADER_SANDBOX=weak" in proc.stderr and "--trusted-submissions" in proc.stderr
    assert not (tmp_path / "out" / "grades.csv").exists()
    monkeypatch.setenv("GRADER_SANDBOX", "weak")
    sandbox.reset_mode()
    try:
        with pytest.raises(batch.BatchError):
            batch.require_sandbox(trusted=False)
        assert "without the sandbox" in batch.require_sandbox(trusted=True)
    finally:
        monkeypatch.delenv("GRADER_SANDBOX")
        sandbox.reset_mode()


def test_python_m_grader_batch_and_merge(tmp_path):
    exp = _small_export(tmp_path / "exp", ("submission_1",))
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(exp), "--out", str(tmp_path / "out"),
                           "--stages", "nosuch", "--trusted-submissions"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown stage 'nosuch'" in proc.stderr
    (tmp_path / "a.csv").write_text("submission_id,folder,status\n1,submission_1,graded\n")
    (tmp_path / "b.csv").write_text("submission_id,folder,status,naive.compiles\n2,submission_2,graded,2.0\n")
    proc = subprocess.run([sys.executable, "-m", "grader", "merge", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"),
                           "--out", str(tmp_path / "m.csv")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    columns, rows = read_csv(tmp_path / "m.csv")
    assert columns == ["submission_id", "folder", "status", "naive.compiles"] and set(rows) == {"submission_1",
                                                                                            "submission_2"}
