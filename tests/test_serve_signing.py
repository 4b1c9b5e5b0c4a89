"""HMAC signing of Gradescope's requests, tokens and secrets on disk, and the views' arithmetic."""
from __future__ import annotations

import csv
import io
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.serve.auth import AuthError, Secrets, Tokens, read_roster
from grader.serve.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, read_secret, sign, target, verify

PATH = "/api/v1/jobs"
ROOT = Path(__file__).resolve().parent.parent


def test_a_signature_binds_secret_method_path_body_and_time():
    h = sign(b"k", "post", PATH, b"zip", timestamp=1_000_000)
    assert h[SIGNATURE_HEADER].startswith("sha256=")
    assert verify(b"k", "POST", PATH, b"zip", h, now=1_000_010) is None
    lower = {k.lower(): v for k, v in h.items()}  # header names are case-insensitive
    assert verify(b"k", "POST", PATH, b"zip", lower, now=1_000_010) is None
    for args in ((b"j", "POST", PATH, b"zip"), (b"k", "GET", PATH, b"zip"), (b"k", "POST", "/api/v1/jobz", b"zip"),
                 (b"k", "POST", PATH, b"zap"), (b"k", "POST", target(PATH, "force=1"), b"zip")):
        assert "signature does not match" in verify(*args, h, now=1_000_010)
    assert verify(b"k", "POST", PATH, b"zip", h, now=1_000_812) == \
        "timestamp 812 s old; at most 300 s allowed (is the sender's clock right?)"
    assert "in the future" in verify(b"k", "POST", PATH, b"zip", h, now=999_000)
    assert "missing" in verify(b"k", "POST", PATH, b"zip", {TIMESTAMP_HEADER: "1"})
    assert "not a whole number" in verify(b"k", "POST", PATH, b"zip", {**h, TIMESTAMP_HEADER: "soon"})


def test_secrets_are_private_files_and_rotate_only_when_asked(tmp_path):
    s = Secrets(tmp_path)
    text = s.create("hw1")
    assert text and s.create("hw1") is None
    path = tmp_path / "secrets" / "hw1.secret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert read_secret(path) == text.encode() == s.get("hw1")
    assert s.create("hw1", rotate=True) != text
    with pytest.raises(AuthError, match="no secret for assignment 'hw2'"):
        s.get("hw2")
    with pytest.raises(AuthError, match="not valid"):
        s.get("../tokens")


def test_tokens_are_stored_hashed_expire_and_revoke(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("Name,Email\nA,a@x.edu\nB,b@x.edu\nB again,b@x.edu\n")
    assert read_roster(roster) == ["a@x.edu", "b@x.edu"]
    tokens = Tokens(tmp_path)
    now = time.time()
    issued, skipped = tokens.issue(["a@x.edu", "b@x.edu"], expires_days=1, now=now)
    assert skipped == [] and len(issued) == 2
    raw = (tmp_path / "tokens.json").read_text()
    assert all(token not in raw for _, _, token in issued)  # only hashes on disk
    assert stat.S_IMODE(os.stat(tmp_path / "tokens.json").st_mode) == 0o600
    (_, pseudo_a, tok_a), (_, _, tok_b) = issued
    assert tokens.authenticate(tok_a, now=now).pseudonym == pseudo_a
    assert tokens.issue(["a@x.edu"], 1, now=now) == ([], ["a@x.edu"])  # a live token is not replaced silently
    with pytest.raises(AuthError, match="expired on"):
        tokens.authenticate(tok_a, now=now + 2 * 86400)
    assert tokens.revoke("b@x.edu") == 1
    with pytest.raises(AuthError, match="revoked on"):
        Tokens(tmp_path).authenticate(tok_b)  # a fresh reader (another process) sees it too
    with pytest.raises(AuthError, match="unknown token"):
        tokens.authenticate("glt_nope")


def test_estimates_and_leaderboard():
    from grader.serve.settings import Settings
    from grader.serve.store import Job, Kind, State, WorkerInfo
    from grader.serve.views import Snapshot, leaderboard_view

    t = 1_000_000.0
    run = Job("r", Kind.SELFCHECK, "o", "l", "s", "k", t - 50, state=State.RUNNING, started=t - 20)
    q1 = Job("q1", Kind.GRADESCOPE, "o", "l", "s", "k", t - 5)
    q2 = Job("q2", Kind.SELFCHECK, "o", "l", "s", "k", t - 40)
    workers = [WorkerInfo("w0", "0", "grading", t), WorkerInfo("w1", "1", "idle", t)]
    snap = Snapshot([q1, q2], [run], workers, mean_s=60.0, now=t)
    assert (snap.position(q1), snap.position(q2)) == (1, 2)
    assert snap.estimate(run) == 40.0  # 60 s mean, 20 s in
    assert snap.estimate(q1) == 40 / 2 + 60  # the running job's rest shared by two workers, then its own
    assert snap.estimate(q2) == (40 + 60) / 2 + 60

    class Board:
        def leaderboard_jobs(self):
            def done(id, owner, label, tf, pct):
                return Job(id, Kind.SELFCHECK, owner, label, "s", "k", t, state=State.DONE, leaderboard=[
                    {"name": "WMMA: TFLOP/s", "value": tf}, {"name": "WMMA: % of cuBLAS", "value": pct}])
            return [done("a", "token:1", "calm-otter-01", 10.0, 20.0), done("b", "token:1", "calm-otter-01", 30, 60),
                    done("c", "token:2", "keen-lynx-02", 20, 40)]

    view = leaderboard_view(Board())  # type: ignore[arg-type]
    assert view == {"stages": ["WMMA"], "rows": [
        {"name": "calm-otter-01", "WMMA": {"tflops": 30, "pct_of_baseline": 60}},
        {"name": "keen-lynx-02", "WMMA": {"tflops": 20, "pct_of_baseline": 40}}]}
    assert Settings().limits.archive_bytes == 20 * 1024 * 1024


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "serve", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_written_tokens_and_secrets_are_private_even_over_an_old_file(tmp_path):
    """``--out`` over an existing world-readable file (last term's tokens.csv) must not leave it readable."""
    roster, tokens_csv, secret = tmp_path / "roster.csv", tmp_path / "tokens.csv", tmp_path / "hw1.secret"
    roster.write_text("email\na@x.edu\n")
    for old in (tokens_csv, secret):
        old.write_text("last term's\n")
        old.chmod(0o644)
    r = _cli("tokens", "issue", "--data", str(tmp_path / "data"), str(roster), "--out", str(tokens_csv))
    assert r.returncode == 0, r.stderr
    r = _cli("secret", "--data", str(tmp_path / "data"), "--assignment", "hw1", "--out", str(secret))
    assert r.returncode == 0, r.stderr
    assert "glt_" in tokens_csv.read_text() and "last term" not in secret.read_text()
    for path in (tokens_csv, secret):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_roster_labels_that_start_like_formulas_are_text_in_tokens_csv_and_tokens_list(tmp_path):
    """The same escaping as grades.csv (grader/untrusted/cells.py): a roster label is anyone's text."""
    hostile = ['=HYPERLINK("http://x","y")', "+1+cmd", "@SUM(1+1)", "-2+3"]
    roster = tmp_path / "roster.csv"
    with roster.open("w", newline="") as f:
        csv.writer(f).writerows([["email"], *([label] for label in hostile), ["a@x.edu"], ["-1.5"]])
    out, data = tmp_path / "tokens.csv", str(tmp_path / "data")
    r = _cli("tokens", "issue", "--data", data, str(roster), "--out", str(out))
    assert r.returncode == 0, r.stderr
    listed = _cli("tokens", "list", "--data", data)
    assert listed.returncode == 0, listed.stderr
    expected = ["'" + label for label in hostile] + ["a@x.edu", "-1.5"]  # a number stays a number
    for rows in (list(csv.DictReader(out.open(newline=""))), list(csv.DictReader(io.StringIO(listed.stdout)))):
        assert [row["label"] for row in rows] == expected
        assert all(row["pseudonym"][0].isalpha() for row in rows)
    issued = list(csv.DictReader(out.open(newline="")))
    assert all(row["token"].startswith("glt_") for row in issued)  # tokens are never touched


def test_pseudonyms_are_unique(tmp_path):
    """The leaderboard's names and ``tokens revoke NAME`` need one student per pseudonym (a class of 1000
    would share some of 40,000 names by chance)."""
    roster = tmp_path / "roster.csv"
    roster.write_text("sid\n" + "".join(f"s{i:04d}\n" for i in range(1000)))
    out = tmp_path / "tokens.csv"
    r = _cli("tokens", "issue", "--data", str(tmp_path / "data"), str(roster), "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 1000 and len({row["pseudonym"] for row in rows}) == 1000
    assert len({row["token"] for row in rows}) == 1000
