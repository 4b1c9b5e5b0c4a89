"""The Gradescope bridge posts again while the service is busy, against the real service.

The service answers 503 while its job store is away (its SQLite file moved aside: grader/serve/
store_sqlite.py refuses to write anywhere else) and answers again, the same store, once it is back:
a busy service that recovers, with no restart in between. The bridge runs in this process
(:func:`bridge.bridge_if_configured`, as run_autograder calls it), with its backoff shortened so
the test waits seconds, not the half minute a real run would. Gradings are the stand-in grade
command (tests/standin_grader.py) writing a GPU grading's results for the pending items' numbers
(:func:`gpu_results`, its GRADER_STANDIN_TEMPLATE).
"""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from grader.deploy.gradescope import bridge
from grader.serve.client import Client, Problem, ServiceError
from tests.serve_helpers import ServiceProcess, free_port, make_secret
from tests.test_serve_bridge_merge import _static

ASSIGNMENT = "gemm"
HANG_S = 180.0  # against a hang only


def gpu_results(folder):
    """The files a GPU grading of the static run's pending items (1.correct, 1.speed) would write."""
    folder.mkdir()
    tests = [{"number": n, "name": f"stand-in: {n}", "score": s, "max_score": s, "status": "passed", "output": "ok"}
             for n, s in (("1.correct", 6.0), ("1.speed", 4.0))]
    (folder / "results.json").write_text(json.dumps({"score": 10.0, "output": "stand-in", "tests": tests}))
    (folder / "grading.json").write_text(json.dumps({"gpu_graded": True}))
    (folder / "summary.md").write_text("# Stand-in grading\n")
    return {"GRADER_STANDIN_TEMPLATE": str(folder)}


@pytest.fixture
def quick_backoff(monkeypatch):
    monkeypatch.setattr(bridge, "FIRST_RETRY_S", 0.5)
    monkeypatch.setattr(bridge, "MAX_RETRY_S", 1.0)


def _package(tmp_path, secret: bytes):
    source, sub, results = tmp_path / "source", tmp_path / "submission", tmp_path / "results"
    for d in (source, sub, results):
        d.mkdir()
    (source / bridge.SECRET_FILE).write_text(secret.decode() + "\n")
    (sub / "report.md").write_text("# report\n")
    (results / "results.json").write_text(json.dumps(_static()))
    return source, sub, results


def _env(tmp_path, url: str, budget_s: float) -> dict[str, str]:
    return {"GRADER_SERVICE_URL": url, "GRADER_SERVICE_ASSIGNMENT": ASSIGNMENT, "GRADER_AUTOGRADER_DIR": str(tmp_path),
            bridge.DEADLINE_KEY: str(time.time() + bridge.MARGIN_S + budget_s), bridge.POLL_KEY: "0.5"}


def test_the_bridge_posts_again_while_the_service_answers_503_and_merges_once_it_recovers(tmp_path, quick_backoff,
                                                                                         capsys):
    data = tmp_path / "data"
    secret = make_secret(data, ASSIGNMENT)
    source, sub, results = _package(tmp_path, secret)
    with ServiceProcess(data, "--workers", "1", standin="delay=0.3", env=gpu_results(tmp_path / "template")) as svc:
        svc.wait_workers(1)  # a worker that opened the store after the move would make a new, empty one
        store, away = data / "jobs.sqlite", data / "jobs.sqlite.away"
        store.rename(away)  # every post: 503, the store is unavailable
        outcome: list[bridge.Outcome] = []
        run = threading.Thread(target=lambda: outcome.append(
            bridge.bridge_if_configured(results, sub, source, env=_env(tmp_path, svc.url, HANG_S))))
        run.start()
        printed = ""
        deadline = time.monotonic() + HANG_S
        while printed.count("gpu service: busy") < 2:  # refused twice, and each time tried again
            assert time.monotonic() < deadline and run.is_alive(), printed
            time.sleep(0.2)
            printed += capsys.readouterr().out
        away.rename(store)  # the service answers again
        run.join(HANG_S)
        assert not run.is_alive()
    assert outcome and outcome[0].state == "merged", outcome
    assert outcome[0].merged_items == 2
    written = json.loads((results / "results.json").read_text())
    assert written["extra_data"]["gpu_service"]["state"] == "merged"
    assert "unavailable" in printed  # the service's own sentence, in the run's log


def test_the_bridge_gives_up_within_its_budget_and_leaves_the_gpu_items_pending_saying_what_to_do(
        tmp_path, quick_backoff):
    data = tmp_path / "data"
    secret = make_secret(data, ASSIGNMENT)
    source, sub, results = _package(tmp_path, secret)
    with ServiceProcess(data, "--workers", "1", standin="delay=0.3", env=gpu_results(tmp_path / "template")) as svc:
        svc.wait_workers(1)
        (data / "jobs.sqlite").rename(data / "jobs.sqlite.away")  # busy for good
        outcome = bridge.bridge_if_configured(results, sub, source, env=_env(tmp_path, svc.url, 4.0))
    assert outcome.state == "unreachable", outcome
    assert "tried" in outcome.reason and "while the service was busy" in outcome.reason
    written = json.loads((results / "results.json").read_text())
    assert written["output"].startswith("> **GPU grading could not start**")
    assert "ask course staff to Regrade this submission" in written["output"]
    pending = [t for t in written["tests"] if t["extra_data"].get("pending_gpu")]
    assert len(pending) == 2 and all("score" not in t for t in pending)


def test_a_timeout_and_a_503_are_worth_another_try_and_a_closed_port_is_not():
    """The client's typing, which the bridge's retry reads: a server that never answers, and nothing listening."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)  # accepts (the kernel does) and never answers
        with Client(f"http://127.0.0.1:{mute.getsockname()[1]}", token="t", timeout_s=1.0) as c:
            with pytest.raises(ServiceError) as timed_out:
                c.job("a" * 22)
    assert timed_out.value.problem is Problem.UNREACHABLE and timed_out.value.passing
    with Client(f"http://127.0.0.1:{free_port()}", token="t", timeout_s=5.0) as c:
        with pytest.raises(ServiceError) as refused:
            c.job("a" * 22)
    assert refused.value.problem is Problem.UNREACHABLE and not refused.value.passing


def test_a_superseded_job_leaves_its_items_pending_and_names_the_newer_submission():
    note = bridge.not_merged_note(bridge.Outcome("superseded", "newerjob", job="olderjob"))
    assert note.startswith("> **GPU grading moved to your newer submission**")
    assert "`olderjob`" in note and "`newerjob`" in note and "stay pending" in note
