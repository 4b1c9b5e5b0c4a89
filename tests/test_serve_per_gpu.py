"""Several gradings per GPU in the service (``gradings_per_gpu``): the setting, the supervisor's
workers and their commands, the grade child's ``--gpu-lock``, and a real static service that ignores it.

No GPU here: two workers really sharing a lock cannot be run end to end (a grading without a GPU
never takes the lock: grader/pipeline.py gpu_turn), so the commands are checked by parsing them with
the grader's own command line, and the lock itself by tests/test_batch.py's gradings.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from grader.cli import build_parser
from grader.serve.settings import Settings, SettingsError, from_mapping
from grader.serve.store import State
from grader.serve.store_sqlite import SqliteStore
from grader.serve.supervisor import slots, worker_command
from grader.serve.worker import grade_command
from tests.serve_helpers import (
    QUEUE_POLL_S,
    ROOT,
    STANDIN_COMMAND,
    TLS,
    ServiceProcess,
    bearer,
    issue_tokens,
    pids_matching,
    wait_job,
    zip_folder,
)

HOST = socket.gethostname()


def parsed(cmd: list[str]):
    """``cmd`` (``python -m grader ...``) as the grader's own parser reads it."""
    assert cmd[1:3] == ["-m", "grader"], cmd
    return build_parser().parse_args(cmd[3:])


def test_gradings_per_gpu_defaults_to_two_and_refuses_anything_but_1_to_4(tmp_path):
    assert Settings().gradings_per_gpu == 2
    assert from_mapping(Settings(), {"gradings_per_gpu": 4}, "serve.yaml").gradings_per_gpu == 4
    assert from_mapping(Settings(), {"gradings_per_gpu": 1}, "serve.yaml").gradings_per_gpu == 1
    for bad in (0, 5, 2.5, "2", True, None, [2]):
        with pytest.raises(SettingsError, match=r"^serve.yaml: gradings_per_gpu: .* is not an integer from 1 to 4$"):
            from_mapping(Settings(), {"gradings_per_gpu": bad}, "serve.yaml")
    data = tmp_path / "data"
    data.mkdir()
    r = subprocess.run([sys.executable, "-m", "grader", "serve", "--data", str(data), "--no-gpu",
                        "--gradings-per-gpu", "9"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "command line: gradings_per_gpu: 9 is not an integer from 1 to 4" in r.stderr, r.stderr
    (data / "serve.yaml").write_text("gradings_per_gpu: two\n")
    r = subprocess.run([sys.executable, "-m", "grader", "serve", "--data", str(data), "--no-gpu"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "serve.yaml: gradings_per_gpu: 'two' is not an integer from 1 to 4" in r.stderr, \
        r.stderr


def test_two_gpus_by_two_get_four_named_workers_each_gpus_pair_sharing_its_lock(tmp_path):
    s = Settings(data=tmp_path, gradings_per_gpu=2, stages=("naive",))
    got = slots(s, ["0", "1"])
    assert [(w.name, w.gpu, w.gpu_lock) for w in got] == [
        (f"{HOST}-gpu0", "0", tmp_path / "locks" / "gpu0.lock"),
        (f"{HOST}-gpu0.2", "0", tmp_path / "locks" / "gpu0.lock"),
        (f"{HOST}-gpu1", "1", tmp_path / "locks" / "gpu1.lock"),
        (f"{HOST}-gpu1.2", "1", tmp_path / "locks" / "gpu1.lock")]
    for w in got:
        args = parsed(worker_command(s, w.name, w.gpu, w.gpu_lock))
        assert (args.serve_command, args.name, args.gpu, args.gpu_lock) == ("worker", w.name, w.gpu, str(w.gpu_lock))
        assert not getattr(args, "no_gpu", False) and args.stages == "naive"
    # each worker's own folder: its GPU's description, its gradings
    assert len({s.data / "work" / w.name for w in got}) == 4
    assert s.gpu_lock("../x") == tmp_path / "locks" / "gpu.._x.lock"  # an index never leaves the folder


def test_a_workers_look_at_the_queue_comes_from_the_service_and_stays_within_its_lease(tmp_path):
    """serve.yaml's queue_poll_s (an idle worker's wait between looks at an SQLite queue) reaches every worker
    the supervisor starts; it is more than 0 and at most a quarter of the lease (the worker's reaping period)."""
    from argparse import Namespace

    from grader.serve.settings import load

    assert Settings().queue_poll_s == 0.5
    (tmp_path / "serve.yaml").write_text("queue_poll_s: 0.05\n")
    s = load(Namespace(data=str(tmp_path)))
    assert s.queue_poll_s == 0.05
    assert parsed(worker_command(s, "w", None)).queue_poll_s == 0.05
    assert load(Namespace(data=str(tmp_path), queue_poll_s=2.0)).queue_poll_s == 2.0  # the flag over the file
    for bad in ("0", "16"):  # 16 > lease_s / 4
        (tmp_path / "serve.yaml").write_text(f"queue_poll_s: {bad}\n")
        with pytest.raises(SettingsError, match=r"queue_poll_s must be more than 0 and at most lease_s / 4 \(15\)"):
            load(Namespace(data=str(tmp_path)))
    for bad, said in (("-1", "-1"), ("soon", "'soon'")):
        (tmp_path / "serve.yaml").write_text(f"queue_poll_s: {bad}\n")
        with pytest.raises(SettingsError, match=f"serve.yaml: queue_poll_s: {said} is not seconds$"):
            load(Namespace(data=str(tmp_path)))


def test_one_grading_per_gpu_and_static_workers_take_no_lock(tmp_path):
    one = Settings(data=tmp_path, gradings_per_gpu=1)
    got = slots(one, ["0", "1"])
    assert [(w.name, w.gpu_lock) for w in got] == [(f"{HOST}-gpu0", None), (f"{HOST}-gpu1", None)]
    assert "--gpu-lock" not in worker_command(one, got[0].name, "0", got[0].gpu_lock)
    static = Settings(data=tmp_path, no_gpu=True, workers=2, gradings_per_gpu=3)
    got = slots(static, static.worker_slots())
    assert [(w.name, w.gpu, w.gpu_lock) for w in got] == [(f"{HOST}-cpu0", None, None), (f"{HOST}-cpu1", None, None)]
    assert "--gpu-lock" not in worker_command(static, got[0].name, None, tmp_path / "x.lock")


def test_a_sharing_workers_gradings_take_the_gpus_lock_and_static_ones_do_not(tmp_path):
    archive, out, lock = tmp_path / "submission.zip", tmp_path / "out", tmp_path / "locks" / "gpu0.lock"
    args = parsed(grade_command(Settings(), archive, out, tmp_path / "device.json", lock))
    assert (args.gpu_lock, args.device, args.submission) == (str(lock), str(tmp_path / "device.json"), str(archive))
    assert "--gpu-lock" not in grade_command(Settings(), archive, out, None)  # the GPU's only worker
    assert "--gpu-lock" not in grade_command(Settings(no_gpu=True), archive, out, None, lock)


def test_a_static_service_ignores_gradings_per_gpu_and_grades_as_before(tmp_path):
    data = tmp_path / "data"
    service = ServiceProcess(data, "--workers", "2", "--gradings-per-gpu", "3", standin="")
    token = issue_tokens(data, ["a@x.edu"])["a@x.edu"]
    with service:
        service.wait_workers(2)
        c = service.client()
        names = sorted(w["name"] for w in c.get("/api/v1/queue").json()["workers"])
        assert names == [f"{HOST}-cpu0", f"{HOST}-cpu1"]
        r = c.post("/api/v1/jobs", content=zip_folder(ROOT / "starter", {"NOTES.txt": "per-gpu"}),
                   headers=bearer(token))
        assert r.status_code in (200, 201, 202), r.text
        job = wait_job(c, r.json()["id"])
        assert job["state"] == "done", job
    assert not (data / "locks").exists()
    assert "gpu-lock" not in Path(service.log_path).read_text(errors="replace")


@pytest.fixture(scope="module")
def gpu_service(tmp_path_factory):
    """``--gpus 0`` with 2 gradings per GPU on a host without a GPU, started by tools/serve_load.py's spawn (as the
    load tools start theirs: it returns once both workers registered), grading with the stand-in grade command
    (tests/standin_grader.py), which holds the GPU's lock 0.2 s when given it. The tests that use it start no
    worker and leave nothing queued or running. Yields the data folder, the URL and a student's token."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from serve_load import spawn, stop_spawned
    finally:
        sys.path.remove(str(ROOT / "tools"))
    data = tmp_path_factory.mktemp("gpu-service") / "data"
    token = issue_tokens(data, ["a@x.edu"])["a@x.edu"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADER_STANDIN", "gpu=0.2")
        proc, url, _ = spawn("0", data, "load", ["--stages", "naive", "--grade-command", STANDIN_COMMAND,
                                                 "--queue-poll-s", QUEUE_POLL_S], 2)
    try:
        yield data, url, token
    finally:
        stop_spawned(proc, None)


def test_a_gpu_service_starts_two_workers_on_its_gpu_each_with_the_lock_and_its_own_folder(gpu_service):
    """``--gpus 0`` on a host without a GPU: the workers start as on a GPU host (their kept context and
    probe fail, said in the log, and the gradings grade without a GPU), so the supervisor's real
    processes and the worker names seen by /api/v1/queue are checked here. The job is graded by the
    stand-in grade command, given the GPU's lock (tests/standin_grader.py)."""
    data, url, token = gpu_service
    lock = str(data.resolve() / "locks" / "gpu0.lock")
    with httpx.Client(base_url=url, timeout=30, verify=TLS) as c:
        workers = sorted((w["name"], w["gpu"]) for w in c.get("/api/v1/queue").json()["workers"])
        assert workers == [(f"{HOST}-gpu0", "0"), (f"{HOST}-gpu0.2", "0")]
        for name, _ in workers:
            assert pids_matching("serve worker", f"--name {name} ", f"--gpu-lock {lock}"), name
        r = c.post("/api/v1/jobs", content=zip_folder(ROOT / "starter", {"NOTES.txt": "per-gpu-gpu"}),
                   headers=bearer(token))
        assert r.status_code in (200, 201, 202), r.text
        job = wait_job(c, r.json()["id"], timeout_s=180)
        assert job["state"] == "done", job
        ran = json.loads(c.get(f"/api/v1/jobs/{job['id']}/files/standin.json").content)
        assert ran["argv"][ran["argv"].index("--gpu-lock") + 1] == "gpu0.lock" and ran["gpu_held"], ran
        assert (data / "work" / f"{HOST}-gpu0").is_dir() and (data / "work" / f"{HOST}-gpu0.2").is_dir()


def test_two_workers_on_one_gpu_take_turns_on_it_through_its_lock(tmp_path, monkeypatch, fake_libcuda):
    """End to end over the stand-in driver and tests/fake_cupy (an H100-like GPU whose kernels compute
    C = A @ B): two jobs posted at once grade on the GPU's two workers, each grading holds the GPU's
    lock for its GPU steps, and no two of those turns overlap."""
    from tests.test_batch import _spans
    from tests.test_sanitize_child import _use_fake

    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "fake_cupy"))
    monkeypatch.setenv("FAKE_CUPY", json.dumps({"gemm": {}, "launch_s": 0.05}))
    data = tmp_path / "data"
    tokens = issue_tokens(data, ["a@x.edu", "b@x.edu"])
    with ServiceProcess(data, "--gpus", "0", "--gradings-per-gpu", "2", gpu=True) as svc, svc.client() as c:
        svc.wait_workers(2)
        ids = []
        for who in ("a@x.edu", "b@x.edu"):
            r = c.post("/api/v1/jobs", content=zip_folder(ROOT / "solutions", {"NOTES.txt": who}),
                       headers=bearer(tokens[who]))
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
        turns, workers = [], set()
        for job_id in ids:
            view = wait_job(c, job_id, timeout_s=240, service=svc)
            assert view["state"] == "done", (view, svc.log_text())
            (tmp_path / "grading.json").write_bytes(c.get(f"/api/v1/jobs/{job_id}/files/grading.json").content)
            spans = _spans(tmp_path / "grading.json", "gpu_held")
            assert spans, svc.log_text()  # the grading took the GPU's lock
            turns += spans
        workers = {j.worker for j in SqliteStore(data / "jobs.sqlite").jobs_in(State.DONE)}
    assert workers == {f"{HOST}-gpu0", f"{HOST}-gpu0.2"}  # both workers graded
    turns.sort()
    for (_, end), (start, _) in zip(turns, turns[1:]):
        assert start >= end - 0.005, f"two gradings held GPU 0 at once: {turns}"


def test_the_load_tools_service_gets_the_gradings_per_gpu_they_are_given(gpu_service):
    """tools/serve_load.py's spawn (tools/serve_gradescope_load.py's too): ``--gpus 0`` with 2 per GPU
    starts the service's two workers on GPU 0 and returns once both registered (no GPU needed for that)."""
    _, url, _ = gpu_service
    workers = httpx.get(url + "/api/v1/queue", timeout=10).json()["workers"]
    assert sorted(w["name"] for w in workers) == [f"{HOST}-gpu0", f"{HOST}-gpu0.2"]


def test_a_worker_probes_its_gpu_only_while_holding_the_gpus_lock(tmp_path):
    """A worker that starts (or is restarted) beside another on its GPU waits for the GPU's lock before
    its probe touches the GPU: the other may be timing a kernel. Here the test holds
    the lock: the worker does not probe its GPU nor register until the lock is released."""
    import fcntl
    import time

    data, lock = tmp_path / "data", tmp_path / "locks" / "gpu0.lock"
    lock.parent.mkdir()
    issue_tokens(data, ["a@x.edu"])  # the data folder as the service makes it
    log = open(tmp_path / "worker.log", "wb")
    with open(lock, "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = subprocess.Popen([sys.executable, "-m", "grader", "serve", "worker", "--data", str(data), "--gpu", "0",
                                   "--gpu-lock", str(lock), "--name", "w-gpu0"], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            store = SqliteStore(data / "jobs.sqlite")
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:  # the whole wait: it must stay before its probe
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                assert not (data / "work" / "w-gpu0" / "device.json").exists()
                assert not [w for w in store.workers() if w.name == "w-gpu0"]
                time.sleep(0.2)
            fcntl.flock(held, fcntl.LOCK_UN)
            deadline = time.monotonic() + 90.0
            while not [w for w in store.workers() if w.name == "w-gpu0"]:
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                time.sleep(0.2)
        finally:
            worker.terminate()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            log.close()
