"""The Dockerfile, really built and run (no Docker engine needed): buildah builds it on a bare Debian
made by ``debootstrap --variant=minbase``, then the image grades solutions/ and starter/ without a GPU.

This is the image's install path as it runs on the course box: the package stage builds the zip,
the grading stage runs the zip's setup.sh -> grader/deploy/install.sh (apt-get of python3, g++,
bubblewrap, ...; the student user) -> grader/bootstrap.sh setup (the .venv, NVIDIA's nvcc and
cuobjdump wheels, CuPy as the Dockerfile's default GRADER_CUPY asks). tests/test_gradescope_package.py
only reads the Dockerfile's text; this test makes its RUN lines run.

No registry is reached: both FROM lines take local images through the Dockerfile's ARGs (BASE,
PACKAGE_BASE), made here from the debootstrap folder (cached as a tarball for a week: ROOTFS_CACHE).

buildah's storage (the bases and the build's layers) is kept beside that tarball, outside the clone, as
pip keeps its cache, one folder per storage driver: overlay where the kernel mounts it in that folder (a layer, a
container and a commit then cost only the files they change), else vfs, which works anywhere but copies the whole
root filesystem (about 1.4 GB here) for every layer and container (GRADER_TEST_STORAGE_DRIVER=vfs|overlay chooses).
The build runs with ``--layers``, so a step whose inputs are unchanged (the same
Dockerfile line on the same parent layer; for COPY, the same bytes copied) reuses its layer, and any change
builds that step and every later one again, as ``docker build`` does. The grading stage's slow step (setup.sh
over the install's own files: apt-get, the .venv, the CUDA wheels) is built again only when those files change
(the install scripts, pyproject.toml, the toolchain probe); a change to the rest of grader/, rubric.yaml or
starter/ builds only the package stage and the steps after that one (the whole package copied, setup.sh
checking it). The checks below then read the image that exactly these inputs make, and grade solutions/ and
starter/ in it every time. A storage folder is wiped when it is a week old (with the tarball's week, a stale
mirror or PyPI is seen) or when the disk is short. Most of the time is the two gradings, and the install layer's
apt-get and pip when the install's files changed (docs/measurements/2026-12-06-test-suite-speed.md).

Needs root, buildah and debootstrap (.ci/run installs both), Debian's package mirror and PyPI. Skips
without them, except on CI (CI=true), where it fails: CI must run it. Marked slow (nothing deselects
slow: .ci/run runs it).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.model import Status
from tests.test_results import check_spec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ON_CI = os.environ.get("CI", "").lower() == "true"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
CACHE = Path(os.environ.get("GRADER_TEST_CACHE") or Path.home() / ".cache" / "gemm-grader-tests")
ROOTFS_CACHE = CACHE / f"debian-{SUITE}-minbase.tar"
ROOTFS_MAX_AGE_S = 7 * 24 * 3600
# buildah's storage, one folder per driver: the bases and the build's layers, reused by the next run (see the
# module's text). The first driver that works here is used; GRADER_TEST_STORAGE_DRIVER names one.
DRIVERS = ("overlay", "vfs")
LAYERS_CACHES = {"overlay": CACHE / "buildah-overlay", "vfs": CACHE / "buildah"}
STAMP_NAME = "created"
# Local names only ("localhost/..."): `--pull=never` makes any registry look-up an error.
BASE_NAME = "localhost/gemm-test/debian"
PACKAGE_BASE_NAME = "localhost/gemm-test/debian-python"
IMAGE = "localhost/gemm-test/grader:test"
# The bases and the image (~1.4 GB) stored uncompressed, and the build's working containers: with vfs each of
# those is a whole copy of the image; with overlay, only what it changes.
DISK_NEEDED = {"overlay": 4 << 30, "vfs": 8 << 30}
# A machine behind a TLS-intercepting proxy trusts it through these; the image must too, or pip fails.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
STATIC_STATUSES = (Status.PASSED.value, Status.FAILED.value)


def _need_tools() -> None:
    why = []
    if os.geteuid() != 0:
        why.append("root (buildah builds as root here)")
    missing = [tool for tool in ("buildah", "debootstrap", "tar") if shutil.which(tool) is None]
    if missing:
        why.append(f"{', '.join(missing)} (apt-get install {' '.join(missing)})")
    if why:
        msg = f"building the Dockerfile needs {'; '.join(why)}"
        if ON_CI:
            pytest.fail(f"{msg}; CI (CI=true) must run this test: .ci/run installs buildah and debootstrap")
        pytest.skip(msg)


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{_tail(proc.stdout + proc.stderr)}")
    return proc


def _buildah_args(store: Path, driver: str) -> list[str]:
    return ["buildah", "--root", str(store / "storage"), "--runroot", str(store / "runroot"), "--storage-driver", driver]


class Buildah:
    """buildah with storage of its own under ``store``, with ``driver``."""

    def __init__(self, store: Path, driver: str) -> None:
        self.base = _buildah_args(store, driver)

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return _run([*self.base, *args], timeout)

    def quiet(self, *args: str) -> None:
        """For teardown: never fails the test."""
        subprocess.run([*self.base, *args], capture_output=True, timeout=300)

    def has_image(self, name: str) -> bool:
        return subprocess.run([*self.base, "inspect", "--type", "image", name], capture_output=True,
                              timeout=300).returncode == 0


def _storage_driver() -> str:
    """GRADER_TEST_STORAGE_DRIVER, else overlay where buildah can use it in its kept folder, else vfs.

    buildah's overlay driver starts only after mounting a test overlay in its storage folder: no overlay in the
    kernel, a folder on a filesystem overlay cannot stack on, or no right to mount make ``buildah info`` fail."""
    chosen = os.environ.get("GRADER_TEST_STORAGE_DRIVER", "")
    if chosen:
        if chosen not in DRIVERS:
            pytest.fail(f"GRADER_TEST_STORAGE_DRIVER={chosen!r}: not one of {', '.join(DRIVERS)}")
        return chosen
    store = LAYERS_CACHES["overlay"]
    store.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run([*_buildah_args(store, "overlay"), "info"], capture_output=True, timeout=300)
    return "overlay" if probe.returncode == 0 else "vfs"


def _layers_store(driver: str) -> Path:
    """The kept buildah storage for ``driver``, wiped first when a week old or when the disk is short. Another
    driver's kept storage is wiped when a week old too (a machine where overlay came to work keeps no vfs copies)."""
    for name, store in LAYERS_CACHES.items():
        if not store.exists():
            continue
        stamp = store / STAMP_NAME
        age = time.time() - stamp.stat().st_mtime if stamp.is_file() else ROOTFS_MAX_AGE_S
        short = name == driver and shutil.disk_usage(store).free < 2 * DISK_NEEDED[driver]
        if age >= ROOTFS_MAX_AGE_S or short:
            _remove_tree(store)
    store = LAYERS_CACHES[driver]
    stamp = store / STAMP_NAME
    if not stamp.is_file():
        store.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    return store


def _rootfs_tarball(work: Path) -> Path:
    """The debootstrap'ed Debian as a tarball, made once and reused while younger than a week."""
    if ROOTFS_CACHE.is_file() and time.time() - ROOTFS_CACHE.stat().st_mtime < ROOTFS_MAX_AGE_S:
        return ROOTFS_CACHE
    rootfs = work / "rootfs"
    _run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), MIRROR], timeout=900)
    ROOTFS_CACHE.parent.mkdir(parents=True, exist_ok=True)
    partial = ROOTFS_CACHE.with_name(f"{ROOTFS_CACHE.name}.{os.getpid()}.partial")
    _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], timeout=300)
    os.replace(partial, ROOTFS_CACHE)  # atomic: a concurrent run sees the old tarball or the new one
    _remove_tree(rootfs)
    return ROOTFS_CACHE


def _make_bases(bh: Buildah, tarball: Path) -> tuple[str, str]:
    """(BASE, PACKAGE_BASE), tagged with the tarball's time, made unless the kept storage has them.
    BASE: the bare Debian (install.sh must add everything). PACKAGE_BASE: the same plus python3."""
    tag = f"{SUITE}-{int(tarball.stat().st_mtime)}"
    base, package_base = f"{BASE_NAME}:{tag}", f"{PACKAGE_BASE_NAME}:{tag}"
    if bh.has_image(base) and bh.has_image(package_base):
        return base, package_base
    ctr = bh("from", "scratch").stdout.strip()
    bh("add", ctr, str(tarball), "/")  # buildah add unpacks a local tarball
    if LOCAL_CAS.is_dir() and any(LOCAL_CAS.glob("*.crt")):
        # update-ca-certificates (run when install.sh installs ca-certificates) adds these to the bundle.
        bh("copy", ctr, str(LOCAL_CAS), str(LOCAL_CAS))
    bh("commit", "-q", "--rm", ctr, base)
    ctr = bh("from", "--pull=never", "-q", base).stdout.strip()
    bh("run", "--isolation", "chroot", ctr, "--", "sh", "-c",
       "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
       "apt-get install -y -qq --no-install-recommends python3 >/dev/null", timeout=600)
    bh("commit", "-q", "--rm", ctr, package_base)
    return base, package_base


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mounts", encoding="utf-8") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return [p for p in points if p == str(path) or p.startswith(f"{path}/")]


def _remove_tree(path: Path) -> None:
    """rm -rf that never follows a bind mount (/dev, /proc) a killed `buildah run` may have left."""
    for point in sorted(_mounts_under(path), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)
    if _mounts_under(path):
        raise RuntimeError(f"mounts remain under {path}; not removing it")
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], capture_output=True, timeout=600)


@dataclass
class Built:
    """The image and one working container of it, mounted at ``fs``.

    One container serves every check and both gradings (with vfs, each container is a whole copy of the
    image). The starter is graded after the solutions, so anything the first run left behind could only
    raise the starter's score, which must be 0.
    """

    bh: Buildah
    work: Path
    build_log: str
    ctr: str
    fs: Path

    def grade(self, submission: Path, name: str) -> tuple[str, dict]:
        """run_autograder on ``submission`` in the container: (its output, results.json)."""
        sub, out = self.work / name / "submission", self.work / name / "results"
        shutil.copytree(submission, sub)
        out.mkdir(parents=True)
        proc = self.bh("run", "--isolation", "chroot", "-v", f"{sub}:/autograder/submission",
                       "-v", f"{out}:/autograder/results", self.ctr, "--", "/autograder/run_autograder",
                       timeout=900)
        text = (out / "results.json").read_text(encoding="utf-8")
        results = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-finite {c} in results.json"))
        check_spec(results)  # Gradescope's documented fields and values (tests/test_results.py)
        return proc.stdout + proc.stderr, results


@pytest.fixture(scope="module")
def built() -> Iterator[Built]:
    _need_tools()
    work = Path(tempfile.mkdtemp(prefix="gemm-dockerfile-", dir="/var/tmp"))
    ctr = ""
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        driver = _storage_driver()
        free = min(shutil.disk_usage(work).free, shutil.disk_usage(CACHE).free)
        if free < DISK_NEEDED[driver]:
            pytest.fail(f"building the image ({driver} storage) needs {DISK_NEEDED[driver] >> 30} GiB free in "
                        f"/var/tmp and {CACHE}; {free >> 30} GiB free")
        bh = Buildah(_layers_store(driver), driver)
        base, package_base = _make_bases(bh, _rootfs_tarball(work))
        iid = work / "image-id"  # the image this build made, by its ID: the tag is shared with other runs' builds
        proc = bh("bud", "--layers", "--isolation", "chroot", "--pull=never", "--build-arg", f"BASE={base}",
                  "--build-arg", f"PACKAGE_BASE={package_base}", "-t", IMAGE, "--iidfile", str(iid),
                  "-f", str(ROOT / "Dockerfile"), str(ROOT), timeout=1800)
        ctr = bh("from", "--pull=never", "-q", iid.read_text().strip()).stdout.strip()
        fs = Path(bh("mount", ctr).stdout.strip())
        yield Built(bh, work, proc.stdout + proc.stderr, ctr, fs)
    finally:
        # The working container goes (the layers stay in the kept storage); the gradings' folders with `work`.
        if ctr:
            bh.quiet("umount", ctr)
            bh.quiet("rm", ctr)
        _remove_tree(work)


@pytest.fixture(scope="module")
def solutions_run(built: Built) -> tuple[str, dict]:
    return built.grade(ROOT / "solutions", "solutions")


def _setup_steps_ran_or_were_cached(log: str) -> bool:
    """Both setup.sh RUN steps (over the install's files, then over the whole package) either ran to their end in
    this build, or buildah reused their layer (``--> Using cache``), which it committed only when that same step,
    on the same parent layer, ran and exited 0."""
    lines = [ln.strip() for ln in log.splitlines()]  # "[2/2] STEP 4/9: RUN bash /autograder/source/setup.sh ..."
    steps = [i for i, ln in enumerate(lines) if " STEP " in f" {ln}" and "RUN bash /autograder/source/setup.sh" in ln]
    cached = [i for i in steps if lines[i + 1:i + 2] != [] and lines[i + 1].startswith("--> Using cache")]
    return len(steps) == 2 and len(cached) + log.count("install: done") == len(steps)


def test_image_is_the_package_installed_by_its_setup_script(built: Built):
    assert _setup_steps_ran_or_were_cached(built.build_log), _tail(built.build_log)
    fs = built.fs
    source = fs / "autograder" / "source"
    assert os.access(fs / "autograder" / "run_autograder", os.X_OK)
    assert (fs / "autograder" / "submission").is_dir() and (fs / "autograder" / "results").is_dir()
    assert not (source / "solutions").exists() and not (source / "tests").exists()
    assert not (source / ".git").exists()
    # bootstrap chose the package's .venv (the bare base's python3 has no numpy)
    assert (source / ".grader-python").read_text().strip() == "/autograder/source/.venv/bin/python"
    site = next((source / ".venv" / "lib").glob("python3*/site-packages"))
    for tool in ("nvcc", "cuobjdump"):  # NVIDIA's wheels: the bare base has no CUDA toolkit
        assert os.access(site / "nvidia" / "cu13" / "bin" / tool, os.X_OK), tool
    assert (site / "cupy").is_dir()  # the Dockerfile's default GRADER_CUPY=cuda13
    assert "\nstudent:" in "\n" + (fs / "etc" / "passwd").read_text()  # install.sh's unprivileged user
    assert (fs / "usr" / "bin" / "bwrap").is_file()
    assert not any((fs / "var" / "lib" / "apt" / "lists").glob("*_Packages"))  # the RUN line cleans up


def test_solutions_in_the_image_lose_no_static_point(solutions_run):
    log, res = solutions_run
    assert "students' code runs as student" in log and "grader exit code 0" in log, _tail(log)
    tests = res["tests"]
    for number in ("1", "2", "3", "4a", "4b", "5", "6"):
        assert any(t["number"] == f"{number}.compiles" for t in tests), number
    for t in tests:
        status = t["extra_data"].get("status")
        extra = t["extra_data"]
        if status in STATIC_STATUSES:
            # judged without a GPU (compiles, kernel names, SASS, spills, occupancy answers, report form); a
            # bonus item's own points are in extra_data (its max_score is 0: outside the total)
            earned, possible = ((extra["bonus_points"], extra["bonus_max"]) if "bonus" in extra
                                else (t["score"], t["max_score"]))
            assert status == Status.PASSED.value and earned == possible, (t["number"], t["output"])
        elif status == Status.NOT_EVALUATED.value:
            # only for want of the GPU: a missing tool (nvcc, cuobjdump wheels) would show here
            assert t["extra_data"].get("needs_gpu") is True, (t["number"], t["output"])
        else:
            assert status == Status.MANUAL.value, (t["number"], status)  # a person's points, not the grader's
    judged = [t for t in tests if t["extra_data"].get("status") in STATIC_STATUSES]
    assert len(judged) >= 30 and res["score"] == sum(t["score"] for t in judged) > 0
    assert sum(t["max_score"] for t in judged) == sum(t["score"] for t in judged if "bonus" not in t["extra_data"])


def test_starter_in_the_image_scores_zero(built: Built, solutions_run):
    log, res = built.grade(ROOT / "starter", "starter")
    assert "grader exit code 0" in log, _tail(log)
    assert res["score"] <= solutions_run[1]["score"]
    assert res["score"] == 0, [(t["number"], t["score"]) for t in res["tests"] if t.get("score")]  # hand-graded: none
    assert not [t for t in res["tests"] if "autograder_error" in t["tags"]]
