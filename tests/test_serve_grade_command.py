"""serve.yaml's ``grade_command`` (``--grade-command``): a service whose workers grade with another program
given the grader's arguments, here the test suite's stand-in (tests/standin_grader.py); and the stand-in
itself, as the service's tests use it (real processes: the service, its worker, the stand-in child)."""
from __future__ import annotations

import json
import shlex
import sys
from argparse import Namespace

import pytest

from grader.serve.settings import Settings, SettingsError, from_mapping, load
from grader.serve.supervisor import worker_command
from grader.serve.worker import grade_command
from tests.serve_helpers import (
    STANDIN,
    STANDIN_COMMAND,
    ServiceProcess,
    bearer,
    issue_tokens,
    tiny_zip,
    wait_job,
    zip_folder,
)


def test_grade_command_is_read_as_a_list_or_a_command_line_and_a_bad_one_is_named(tmp_path):
    s = from_mapping(Settings(), {"grade_command": ["python3", "/x/grade.py"]}, "serve.yaml")
    assert s.grade_command == ("python3", "/x/grade.py")
    assert from_mapping(Settings(), {"grade_command": "python3 '/a b/g.py'"}, "f").grade_command == ("python3",
                                                                                                  "/a b/g.py")
    for bad, why in ((3, "is not a command"), ("", "names no program"), ("'open", "is not a command line"),
                     (["a", 1], "is not a command")):
        with pytest.raises(SettingsError, match=f"serve.yaml: grade_command: .*{why}"):
            from_mapping(Settings(), {"grade_command": bad}, "serve.yaml")
    flags = Namespace(data=str(tmp_path), grade_command=STANDIN_COMMAND)
    assert load(flags).grade_command == (sys.executable, str(STANDIN))


def test_a_worker_grades_with_the_grade_command_given_the_graders_arguments(tmp_path):
    archive, out = tmp_path / "submission.zip", tmp_path / "out"
    plain = Settings(no_gpu=True, stages=("naive",))
    other = Settings(no_gpu=True, stages=("naive",), grade_command=("python3", "/x/grade.py"))
    assert grade_command(plain, archive, out, None)[:4] == [sys.executable, "-m", "grader", "grade"]
    assert grade_command(other, archive, out, None) == ["python3", "/x/grade.py"] + grade_command(plain, archive,
                                                                                                 out, None)[4:]
    # a worker started by the supervisor is told the command; another program's gradings are another key
    cmd = worker_command(other, "w", None)
    assert shlex.split(cmd[cmd.index("--grade-command") + 1]) == ["python3", "/x/grade.py"]
    assert "--grade-command" not in worker_command(plain, "w", None)
    assert plain.grading_key() != other.grading_key()


def test_the_standin_writes_results_after_its_delay_and_obeys_the_submissions_words(tmp_path):
    import subprocess

    for words, code, files in (("", 0, {"results.json", "summary.md", "grading.json", "standin.json"}),
                               ("outcome=fail", 1, {"standin.json"}), ("outcome=nothing", 0, {"standin.json"}),
                               ("outcome=crash", -9, {"standin.json"}), ("score=2", 0, None)):
        sub = tmp_path / f"sub-{len(words)}-{code}"
        sub.mkdir()
        (sub / "STANDIN.txt").write_text(f"delay=0 {words}")
        out = tmp_path / f"out-{sub.name}"
        done = subprocess.run([sys.executable, str(STANDIN), "--out", str(out), "--quiet", "--stages", "naive", "--",
                               str(sub)], capture_output=True, text=True, timeout=60)
        assert done.returncode == code, done.stdout + done.stderr
        if files is not None:
            assert {p.name for p in out.iterdir()} == files
        if words == "":  # its grading.json is the grader's own for a grading of no stage, and reads back
            assert json.loads((out / "grading.json").read_text()) == _empty_grading(
                "no CUDA device (the stand-in grader)")
    assert json.loads((out / "results.json").read_text())["score"] == 2.0
    record = json.loads((out / "standin.json").read_text())
    assert record["words"]["score"] == "2" and record["argv"][-1] == str(sub)
    # until=PATH: it grades only once PATH exists (a test's go-ahead), however long that takes
    go, out = tmp_path / "go", tmp_path / "out-until"
    (sub / "STANDIN.txt").write_text(f"delay=0 until={go}")
    waiting = subprocess.Popen([sys.executable, str(STANDIN), "--out", str(out), "--", str(sub)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert waiting.stdout is not None and waiting.stdout.readline().startswith("standin: grading")
        with pytest.raises(subprocess.TimeoutExpired):  # a stand-in that did not wait would be done by then
            waiting.wait(timeout=0.5)
        assert not (out / "standin.json").exists()
        go.touch()
        assert waiting.wait(timeout=60) == 0 and (out / "results.json").exists()
    finally:
        waiting.kill()
        waiting.wait()
        waiting.stdout.close()
    (sub / "STANDIN.txt").write_text("speed=1")
    bad = subprocess.run([sys.executable, str(STANDIN), "--out", str(out), "--", str(sub)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "'speed=1' is not one of" in bad.stderr


def _empty_grading(reason: str) -> dict:
    """What grader.grading writes for a grading of no stage without a device, read back through it."""
    from grader.evidence.limits import Peaks
    from grader.grading import Environment, Grading

    env = Environment(device=None, device_reason=reason, nvcc=None, cuobjdump=None, arch_flags=[],
                      peaks=Peaks(None, None, "no device"))
    written = Grading(submission="stand-in", env=env, outcomes={}, items=[], seconds=0.0,
                      notes=["the stand-in grader"]).to_json()
    assert Grading.from_json(json.loads(json.dumps(written))).to_json() == written
    return json.loads(json.dumps(written))


def test_a_service_grading_with_the_standin_marks_each_outcome_as_the_grader_would(tmp_path):
    data = tmp_path / "data"
    service = ServiceProcess(data, "--workers", "1", "--per-hour", "20", "--concurrent", "5",
                             "--grade-timeout-s", "3", standin="delay=0.2")
    token = issue_tokens(data, ["a@x.edu"])["a@x.edu"]
    with service:
        service.wait_workers(1)
        with service.client() as c:
            def submit(words: str) -> str:
                body = zip_folder(tmp_path / "empty", {"STANDIN.txt": words}) if words else tiny_zip("standin ok")
                r = c.post("/api/v1/jobs", content=body, headers=bearer(token))
                assert r.status_code == 202, r.text
                return r.json()["id"]

            (tmp_path / "empty").mkdir()
            ids = {w: submit(w) for w in ("", "outcome=fail", "outcome=hang", "outcome=garbage")}
            views = {w: wait_job(c, i, service=service) for w, i in ids.items()}
            ok = views[""]
            assert ok["state"] == "done" and ok["score"] == 1.0 and ok["max_score"] == 2.0, ok
            assert c.get(f"/api/v1/jobs/{ids['']}/files/results.json").json()["tests"][0]["max_score"] == 2.0
            assert views["outcome=fail"]["state"] == "failed"
            assert "failing as told" in views["outcome=fail"]["error"], views["outcome=fail"]
            assert views["outcome=hang"]["state"] == "failed" and "longer than 3 s" in views["outcome=hang"]["error"]
            assert views["outcome=garbage"]["state"] == "failed", views["outcome=garbage"]
