"""``python -m grader submit`` and its client (grader/serve/client.py, submit.py) against the real service
(tests/serve_helpers.py: ``python -m grader serve --no-gpu``, one stage): the deterministic archive,
the table and the results folder, the stored job on a second run, and each refusal's exit code and
sentence (bad token, archive too large, too many jobs at once), an unreachable server, a timeout."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from grader.serve import submit as submit_cmd
from grader.serve.client import Client, Problem, ServiceError, make_archive
from tests.serve_helpers import ServiceProcess, free_port, future_zip, hand_worker, issue_tokens

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------
# The archive
# --------------------------------------------------------------------------------------------
def _folder(tmp: Path) -> Path:
    sub = tmp / "sub"
    (sub / "gemm").mkdir(parents=True)
    (sub / "occupancy").mkdir()
    (sub / "gemm" / "naive.cu").write_text((ROOT / "solutions/gemm/naive.cu").read_text())
    (sub / "occupancy" / "answers.yaml").write_text("q1: 2\n")
    (sub / "report.md").write_text("# report\n")
    for junk in ("build/x.o", "gemm/naive.o", "gemm/naive.cubin", "__pycache__/a.pyc", ".git/HEAD", "a.out"):
        (sub / junk).parent.mkdir(parents=True, exist_ok=True)
        (sub / junk).write_text("junk")
    os.symlink(ROOT / "solutions" / "gemm" / "tiled.cu", sub / "gemm" / "tiled.cu")
    os.symlink(ROOT / "solutions", sub / "linked")
    os.mkfifo(sub / "gemm" / "pipe")
    with open(os.fsencode(sub / "gemm") + b"/bad\xff.cu", "w") as f:  # a name a zip cannot hold as UTF-8
        f.write("x")
    return sub


def test_archive_is_deterministic_and_leaves_out_links_and_builds(tmp_path):
    sub = _folder(tmp_path)
    first = make_archive(sub)
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    assert names == ["gemm/naive.cu", "occupancy/answers.yaml", "report.md"]
    assert first.files == 3
    skipped = "\n".join(first.skipped)
    for entry in ("gemm/tiled.cu (a symbolic link)", "linked/ (a symbolic link)", "gemm/pipe (not a regular file)",
                  "build/ (a build or cache folder)", "gemm/naive.o (a build output)", ".git/", "__pycache__/",
                  "a.out (a build output)", "gemm/naive.cubin (a build output)", "(a name that is not UTF-8)"):
        assert entry in skipped, entry
    # new times and modes, the same bytes: the service's dedup sees the same archive
    for path in (sub / "report.md", sub / "gemm" / "naive.cu"):
        os.utime(path, (1_000_000, 1_000_000))
        path.chmod(0o600)
    assert make_archive(sub).data == first.data
    (sub / "report.md").write_text("# report, edited\n")
    assert make_archive(sub).data != first.data
    # a zip goes as it is
    zipped = tmp_path / "sub.zip"
    zipped.write_bytes(first.data)
    assert make_archive(zipped).data == first.data
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="neither a folder nor a zip"):
        make_archive(tmp_path / "notes.txt")
    (tmp_path / "future.zip").write_bytes(future_zip())
    with pytest.raises(ValueError, match="neither a folder nor a zip"):
        make_archive(tmp_path / "future.zip")
    with pytest.raises(ValueError, match="does not exist"):
        make_archive(tmp_path / "nothing")


def test_client_refuses_a_server_that_is_not_a_url():
    with pytest.raises(ValueError, match="expected a URL"):
        Client("gpu.example.edu", token="t")


def test_unreachable_server(tmp_path):
    port = free_port()  # nothing listens there
    proc = _submit(_folder(tmp_path), f"http://127.0.0.1:{port}", "glt_x", tmp_path / "out")
    assert proc.returncode == submit_cmd.EXIT_UNREACHABLE
    assert f"cannot reach the grading service at http://127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# Against the service
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """The service grading with the grader, without a worker of its own: :func:`_submit_seen_queued` starts one."""
    data = tmp_path_factory.mktemp("client") / "data"
    tokens = issue_tokens(data, ["one@example.edu", "two@example.edu"])
    with ServiceProcess(data, "--archive-mib", "1", "--concurrent", "1", "--no-workers") as svc:
        yield svc, tokens


@pytest.fixture(scope="module")
def standin_service(tmp_path_factory):
    """The service grading with tests/standin_grader.py: a job whose submission says ``outcome=hang`` in its
    STANDIN.txt stays running until it is killed, whatever the machine's load."""
    data = tmp_path_factory.mktemp("client-standin") / "data"
    tokens = issue_tokens(data, ["one@example.edu", "two@example.edu"])
    with ServiceProcess(data, "--archive-mib", "1", "--concurrent", "1", standin="delay=0.3") as svc:
        svc.wait_workers(1)
        yield svc, tokens


def _submit(sub: Path, server: str, token: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "submit", str(sub), "--server", server, "--token", token,
                           "--out", str(out), *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _submit_seen_queued(svc: ServiceProcess, sub: Path, token: str, out: Path) -> subprocess.CompletedProcess:
    """``grader submit`` to a service with no worker until the client has shown its job queued; then a worker is
    started on the service's data folder (as on a second host) and grades it. (An idle worker takes a job within
    0.05 s here, often before the client's first look: the queued line would depend on the machine's load.)"""
    cmd = [sys.executable, "-m", "grader", "submit", str(sub), "--server", svc.url, "--token", token,
           "--out", str(out), "--timeout", "240"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = []
    for line in proc.stderr:
        err.append(line)
        if ": queued" in line:
            break
    with hand_worker(svc.data, "client-worker"):
        err += list(proc.stderr)
        proc.wait(timeout=60)
    return subprocess.CompletedProcess(cmd, proc.returncode, "", "".join(err))


def test_submit_prints_the_table_and_writes_the_results(service, tmp_path):
    svc, tokens = service
    sub, out = _folder(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "roofline.png").write_bytes(b"stale")  # from an earlier run: must not pass for this one's
    proc = _submit_seen_queued(svc, sub, tokens["one@example.edu"], out)
    assert proc.returncode == 0, proc.stderr + svc.log_text()
    err = proc.stderr
    assert "sending" in err and "3 files" in err and "KiB" in err
    assert "queued" in err and "done" in err  # the progress lines (not a terminal: one line per change)
    # the table of `python -m grader grade`, titled with the student's own path
    assert "stage" in err and "correct" in err and "% of cuBLAS" in err and "1 naive" in err
    assert f"{sub}:" in err and "points" in err
    # a service without a GPU says so as its own choice, never as a flag the student passed
    assert "(--no-gpu)" not in err and "the grading service has no GPU: its operator started it" in err
    job = json.loads((out / "service-job.json").read_text())
    assert f"{svc.url}/jobs/{job['id']}" in err
    with svc.client() as http:
        view = http.get(f"/api/v1/jobs/{job['id']}").json()
        for name in view["files"]:
            assert (out / name).read_bytes() == http.get(f"/api/v1/jobs/{job['id']}/files/{name}").content, name
    assert {"results.json", "summary.md", "grading.json"} <= set(os.listdir(out))
    assert not (out / "roofline.png").exists()
    results = json.loads((out / "results.json").read_text())
    assert results["score"] == view["score"] and f"{results['score']:g} / " in err

    # the same files again: the stored job, not a second grading
    again = _submit(sub, svc.url, tokens["one@example.edu"], tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert "the same files were graded before" in again.stderr
    assert json.loads((tmp_path / "again" / "service-job.json").read_text())["id"] == job["id"]


def test_refusals_have_exit_codes_and_the_services_sentence(standin_service, tmp_path):
    svc, tokens = standin_service
    sub = _folder(tmp_path)
    bad = _submit(sub, svc.url, "glt_not-a-token", tmp_path / "o1")
    assert bad.returncode == submit_cmd.EXIT_REFUSED
    assert "the service refused your token: unknown token" in bad.stderr and "Traceback" not in bad.stderr

    big = tmp_path / "big"
    (big / "gemm").mkdir(parents=True)
    (big / "gemm" / "naive.cu").write_bytes(os.urandom(2 * 1024 * 1024))  # incompressible, over --archive-mib 1
    large = _submit(big, svc.url, tokens["two@example.edu"], tmp_path / "o2")
    assert large.returncode == submit_cmd.EXIT_REFUSED
    assert "refused the archive as too large" in large.stderr and "Your archive is 2.0 MiB (1 files)" in large.stderr

    # --timeout 0: the job goes on (exit 6); a second job of the same token meanwhile is one too many (429)
    (sub / "report.md").write_text("# another report\n")
    (sub / "STANDIN.txt").write_text("outcome=hang\n")  # it is still running when the next one comes
    slow = _submit(sub, svc.url, tokens["two@example.edu"], tmp_path / "o3", "--timeout", "0")
    assert slow.returncode == submit_cmd.EXIT_TIMEOUT, slow.stderr
    assert "it goes on" in slow.stderr and "run the same command again" in slow.stderr
    (sub / "report.md").write_text("# a third report\n")
    busy = _submit(sub, svc.url, tokens["two@example.edu"], tmp_path / "o4", "--no-wait")
    assert busy.returncode == submit_cmd.EXIT_REFUSED, busy.stderr
    assert "not taking more submissions from you now" in busy.stderr


def test_client_errors_are_typed(service):
    svc, tokens = service
    with Client(svc.url, token=tokens["one@example.edu"]) as client:
        with pytest.raises(ServiceError) as exc:
            client.job("nosuchjobnosuchjob")
        assert exc.value.problem is Problem.NOT_FOUND and exc.value.status == 404
        with pytest.raises(ServiceError) as exc:
            client.submit(b"this is not a zip")
        assert exc.value.problem is Problem.BAD_REQUEST and exc.value.message
        with pytest.raises(ServiceError) as exc:  # a zip Python cannot read: a 400 that says so, not a 500
            client.submit(future_zip())
        assert exc.value.status == 400 and "not a zip archive (zip file version 15.0)" in exc.value.message
        with pytest.raises(ServiceError) as exc:
            client.file("x" * 22, "../secrets")
        assert exc.value.problem is Problem.BAD_ANSWER  # never asked for
    # a server that is not the grading service
    with Client(svc.url + "/static", token="t", transport=httpx.HTTPTransport(retries=0)) as other:
        with pytest.raises(ServiceError) as exc:
            other.job("abc")
        assert exc.value.problem in (Problem.NOT_FOUND, Problem.BAD_ANSWER)


def test_a_previous_runs_plots_never_pass_for_this_jobs(tmp_path):
    from grader.occupancy.run import PLOT_FILE
    from grader.serve.submit import _clear_old_results

    for name in ("results.json", "ladder.png", PLOT_FILE, "notes.txt"):
        (tmp_path / name).write_text("from an earlier run")
    _clear_old_results(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # the student's own file stays


def test_a_deep_folder_chain_is_packed_without_recursion_and_says_what_it_left(tmp_path):
    """os.walk recurses per level (Python 3.11): a student's 1500-deep chain must not crash `submit`."""
    from grader.untrusted.safe_copy import MAX_DEPTH
    from tests.tree_helpers import deep_chain

    sub = tmp_path / "sub"
    (sub / "gemm").mkdir(parents=True)
    (sub / "gemm" / "naive.cu").write_text("// k\n")
    with deep_chain(sub / "deep", 1500, file_every=100):
        archive = make_archive(sub)
    names = zipfile.ZipFile(io.BytesIO(archive.data)).namelist()
    assert "gemm/naive.cu" in names and not any(n.count("/") > MAX_DEPTH + 2 for n in names)
    assert any(f"more than {MAX_DEPTH} nested folders" in s for s in archive.skipped), archive.skipped
