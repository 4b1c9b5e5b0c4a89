"""Safe intake of a submission (grader/compile/intake.py): one fresh copy, no link followed, sizes capped.

Every case builds the hostile submission for real (links, zips, big files) in a temporary folder.
"""
from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest

from grader.compile.intake import INTAKE_FILE, Intake, Limits, Skip, intake
from grader.untrusted.safe_copy import remove_tree, tree_size
from tests.tree_helpers import deep_chain, unremovable

ROOT = Path(__file__).resolve().parent.parent
MARKERS = ["gemm/naive.cu", "gemm/tiled.cu"]


def make_sub(root: Path) -> Path:
    (root / "gemm").mkdir(parents=True)
    (root / "gemm" / "naive.cu").write_text("__global__ void mmNaive() {}\n")
    (root / "report.md").write_text("# report\n")
    return root


def files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def no_links(folder: Path) -> bool:
    return not any(p.is_symlink() for p in folder.rglob("*"))


def test_plain_folder_is_copied_once_into_a_fresh_folder(tmp_path):
    sub = make_sub(tmp_path / "sub")
    dest = tmp_path / "out" / "work" / "submission"
    dest.mkdir(parents=True)
    (dest / "stale.cu").write_text("left by an earlier run")
    got = intake(sub, dest, markers=MARKERS)
    assert not got.refused and got.root == dest == got.copy
    assert files(dest) == {"gemm/naive.cu", "report.md"}  # the stale file is gone
    assert got.entries == 3 and got.bytes == len("__global__ void mmNaive() {}\n") + len("# report\n")
    assert got.notes == []
    (sub / "gemm" / "naive.cu").write_text("changed after intake")
    assert (dest / "gemm" / "naive.cu").read_text().startswith("__global__")  # a copy, not a view


def test_symlink_three_folders_down_is_left_out_and_named(tmp_path):
    sub = make_sub(tmp_path / "sub")
    deep = sub / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "tiled.cu").symlink_to(ROOT / "solutions" / "gemm" / "tiled.cu")
    (sub / "gemm" / "tiled.cu").symlink_to(ROOT / "solutions" / "gemm" / "tiled.cu")
    got = intake(sub, tmp_path / "copy", markers=MARKERS)
    assert not got.refused
    assert files(got.copy) == {"gemm/naive.cu", "report.md"} and no_links(got.copy)
    links = {s.path for s in got.skipped if s.why is Skip.SYMLINK}
    assert links == {"a/b/c/tiled.cu", "gemm/tiled.cu"}
    assert any("a/b/c/tiled.cu" in n and "symbolic link" in n for n in got.notes)
    assert got.why_missing("gemm/tiled.cu").startswith("gemm/tiled.cu is a symbolic link (to `")
    assert got.why_missing("gemm/naive.cu") == "" and got.why_missing("a/b/c/tiled.cu") != ""


def test_symlinked_folders_to_the_solutions_earn_nothing(tmp_path):
    """The attack of the issue: gemm/ (or the one wrapping folder) is a link to solutions/."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "gemm").symlink_to(ROOT / "solutions" / "gemm", target_is_directory=True)
    got = intake(sub, tmp_path / "copy", markers=MARKERS)
    assert files(got.copy) == set() and got.skipped[0].why is Skip.SYMLINK
    wrapped = tmp_path / "wrapped"
    wrapped.mkdir()
    (wrapped / "my-project").symlink_to(ROOT / "solutions", target_is_directory=True)
    got = intake(wrapped, tmp_path / "copy2", markers=MARKERS)
    assert got.root == got.copy and files(got.copy) == set()  # not stepped into, not followed
    assert got.why_missing("my-project/gemm/naive.cu").startswith("my-project is a symbolic link")


def test_symlinked_top_folder_is_refused(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(make_sub(tmp_path / "real"), target_is_directory=True)
    got = intake(link, tmp_path / "copy", markers=MARKERS)
    assert got.refused and "symbolic link" in got.refusal and str(link) in got.refusal
    assert files(got.copy) == set() and got.root == got.copy
    assert got.notes[0].startswith("Submission refused:")


def test_self_symlink_and_a_fifo_do_not_crash(tmp_path):
    sub = make_sub(tmp_path / "sub")
    (sub / "gemm" / "loop.cu").symlink_to("loop.cu")  # a file linked to itself
    os.mkfifo(sub / "gemm" / "pipe.cu")  # opening it would block forever
    got = intake(sub, tmp_path / "copy", markers=MARKERS)
    assert not got.refused and files(got.copy) == {"gemm/naive.cu", "report.md"}
    why = {s.path: s.why for s in got.skipped}
    assert why == {"gemm/loop.cu": Skip.SYMLINK, "gemm/pipe.cu": Skip.SPECIAL}


def test_wrapper_folder_is_stepped_into_once(tmp_path):
    sub = tmp_path / "sub"
    make_sub(sub / "my-project")
    (sub / ".hidden").write_text("dot files do not count as a second folder")
    got = intake(sub, tmp_path / "copy", markers=MARKERS)
    assert got.root == got.copy / "my-project" and "one folder down" in got.notes[-1]
    twice = tmp_path / "twice"
    make_sub(twice / "outer" / "inner")
    got = intake(twice, tmp_path / "copy2", markers=MARKERS)
    assert got.root == got.copy  # files two folders down are not looked for
    only_gemm = tmp_path / "only_gemm"
    (only_gemm / "gemm").mkdir(parents=True)
    (only_gemm / "gemm" / "x.cu").write_text("")
    got = intake(only_gemm, tmp_path / "copy3", markers=MARKERS)
    assert got.root == got.copy  # a submission holding only gemm/ is not a wrapper


def test_too_many_files_is_refused(tmp_path):
    sub = make_sub(tmp_path / "sub")
    for i in range(30):
        (sub / f"f{i}.txt").write_text("x")
    got = intake(sub, tmp_path / "copy", limits=Limits(max_entries=20), markers=MARKERS)
    assert got.refused and "more than 20 files and folders" in got.refusal
    assert files(got.copy) == set()  # nothing half-copied is graded


def test_large_file_is_left_out_and_total_is_capped(tmp_path):
    sub = make_sub(tmp_path / "sub")
    (sub / "big.bin").write_bytes(b"\0" * 5000)
    got = intake(sub, tmp_path / "copy", limits=Limits(max_file_bytes=4096), markers=MARKERS)
    assert not got.refused and "big.bin" not in files(got.copy)
    assert [s.why for s in got.skipped] == [Skip.TOO_LARGE]
    got = intake(sub, tmp_path / "copy2", limits=Limits(max_total_bytes=3000), markers=MARKERS)
    assert got.refused and "add up to more than" in got.refusal


def test_output_folder_inside_the_submission_is_not_copied_into_itself(tmp_path):
    sub = make_sub(tmp_path / "sub")
    dest = sub / "grading-out" / "work" / "submission"  # `grade . --out grading-out`
    got = intake(sub, dest, markers=MARKERS)
    assert not got.refused and files(dest) == {"gemm/naive.cu", "report.md"}
    assert [s.why for s in got.skipped] == [Skip.OWN_OUTPUT] and got.notes == []


# --------------------------------------------------------------------------------------------
# Zips
# --------------------------------------------------------------------------------------------
def write_zip(path: Path, members: dict[str, bytes], *, links: dict[str, str] | None = None,
              compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def test_zip_with_a_wrapping_folder_is_graded_from_inside(tmp_path):
    z = write_zip(tmp_path / "sub.zip", {"my-sub/gemm/naive.cu": b"// k\n", "my-sub/report.md": b"r",
                                         "__MACOSX/my-sub/._naive.cu": b"junk"})
    got = intake(z, tmp_path / "copy", markers=MARKERS)
    assert not got.refused and got.root == got.copy / "my-sub"
    assert got.why_missing("gemm/naive.cu") == ""
    assert files(got.copy) == {"my-sub/gemm/naive.cu", "my-sub/report.md"}


def test_zip_bomb_by_ratio_is_refused_before_writing(tmp_path):
    z = write_zip(tmp_path / "bomb.zip", {"gemm/naive.cu": b"// k\n", "pad.txt": b"\0" * (8 * 1024 * 1024)})
    assert zipfile.ZipFile(z).getinfo("pad.txt").compress_size < 80 * 1024  # > 100x
    got = intake(z, tmp_path / "copy", markers=MARKERS)
    assert got.refused and "zip bomb" in got.refusal and "pad.txt" in got.refusal
    assert files(got.copy) == set()


def test_zip_member_with_dotdot_or_absolute_path_is_refused(tmp_path):
    for name in ("../evil.cu", "/etc/evil.cu", "gemm/../../evil.cu", "C:\\evil.cu"):
        z = write_zip(tmp_path / "z.zip", {"gemm/naive.cu": b"// k\n", name: b"x"})
        got = intake(z, tmp_path / "copy", markers=MARKERS)
        assert got.refused and "'..'" in got.refusal, name
        assert not (tmp_path / "evil.cu").exists() and files(got.copy) == set()


def test_zip_symlink_member_is_not_written(tmp_path):
    z = write_zip(tmp_path / "z.zip", {"gemm/naive.cu": b"// k\n"},
                  links={"gemm/tiled.cu": str(ROOT / "solutions" / "gemm" / "tiled.cu")})
    got = intake(z, tmp_path / "copy", markers=MARKERS)
    assert not got.refused and files(got.copy) == {"gemm/naive.cu"} and no_links(got.copy)
    assert [(s.path, s.why) for s in got.skipped] == [("gemm/tiled.cu", Skip.SYMLINK)]


def test_zip_file_with_a_folders_name_and_a_large_member(tmp_path):
    z = write_zip(tmp_path / "z.zip", {"gemm": b"a file named like the folder", "gemm/naive.cu": b"// k\n",
                                       "report.md": b"r"})
    got = intake(z, tmp_path / "copy", markers=MARKERS)
    assert not got.refused and files(got.copy) == {"gemm", "report.md"}
    assert [(s.path, s.why) for s in got.skipped] == [("gemm/naive.cu", Skip.CONFLICT)]
    z = write_zip(tmp_path / "big.zip", {"gemm/naive.cu": b"// k\n", "big.bin": b"\1" * 5000},
                  compression=zipfile.ZIP_STORED)
    got = intake(z, tmp_path / "copy2", limits=Limits(max_file_bytes=4096))
    assert not got.refused and files(got.copy) == {"gemm/naive.cu"}
    assert [(s.path, s.why) for s in got.skipped] == [("big.bin", Skip.TOO_LARGE)]


def test_corrupt_zip_and_corrupt_member(tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    got = intake(bad, tmp_path / "copy")
    assert got.refused and "neither a folder nor a zip" in got.refusal
    z = write_zip(tmp_path / "crc.zip", {"gemm/naive.cu": b"// kernel one\n", "report.md": b"hello"},
                  compression=zipfile.ZIP_STORED)
    raw = z.read_bytes().replace(b"hello", b"jello")  # the CRC no longer matches
    z.write_bytes(raw)
    got = intake(z, tmp_path / "copy2", markers=MARKERS)
    assert not got.refused and files(got.copy) == {"gemm/naive.cu"}
    assert [(s.path, s.why) for s in got.skipped] == [("report.md", Skip.UNREADABLE)]


def test_missing_path_and_the_written_record(tmp_path):
    got = intake(tmp_path / "nope", tmp_path / "copy")
    assert got.refused and "does not exist" in got.refusal
    got = intake(make_sub(tmp_path / "sub"), tmp_path / "copy2")
    got.write(tmp_path / INTAKE_FILE)
    import json

    data = json.loads((tmp_path / INTAKE_FILE).read_text())
    assert data["refused"] is False and data["entries"] == 3 and data["root"] == str(got.root)
    assert isinstance(got, Intake)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable files")
def test_unreadable_file_is_left_out(tmp_path):
    sub = make_sub(tmp_path / "sub")
    secret = sub / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    got = intake(sub, tmp_path / "copy")
    assert [(s.path, s.why) for s in got.skipped] == [("secret.txt", Skip.UNREADABLE)]


# --------------------------------------------------------------------------------------------
# Depth: a chain of nested folders is cut at the limit, and any tree is removed without recursion
# --------------------------------------------------------------------------------------------
def test_a_folder_chain_past_the_depth_limit_is_cut_once_and_the_rest_is_copied(tmp_path):
    sub = make_sub(tmp_path / "sub")
    (sub / "ok" / ("a/" * 30)).mkdir(parents=True)
    (sub / "ok" / ("a/" * 30) / "kept.txt").write_text("at depth 31 of 32")
    with deep_chain(sub / "deep", 1500):
        got = intake(sub, tmp_path / "copy", markers=MARKERS)
    assert not got.refused and {"gemm/naive.cu", "report.md", "ok/" + "a/" * 30 + "kept.txt"} <= files(got.copy)
    cut = "deep/" + "d/" * 31 + "d"  # the 33rd folder: what it would hold lies under 33
    assert [(s.path, s.why) for s in got.skipped] == [(cut, Skip.TOO_DEEP)]
    assert got.notes == [f"Left out of the grading: {cut} lies under more than 32 nested folders (the limit is "
                         "32); it and everything below it are left out"]
    assert not (got.copy / cut).exists() and (got.copy / cut).parent.is_dir()


def test_a_zip_of_a_1500_deep_chain_is_cut_once_at_the_limit(tmp_path):
    chain = {"d/" * n: b"" for n in (1, 2, 3, 600, 1500)}  # folder members, and a file 1500 folders down
    z = write_zip(tmp_path / "deep.zip", {**chain, "d/" * 1500 + "x.cu": b"deep", "gemm/naive.cu": b"// k\n"})
    assert z.stat().st_size < 40_000
    got = intake(z, tmp_path / "copy", limits=Limits(max_depth=4), markers=MARKERS)
    assert not got.refused and files(got.copy) == {"gemm/naive.cu"}
    assert [(s.path, s.why) for s in got.skipped] == [("d/d/d/d/d", Skip.TOO_DEEP)]
    assert "more than 4 nested folders (the limit is 4)" in got.notes[0] and len(got.notes) == 1
    assert (got.copy / "d/d/d").is_dir() and not (got.copy / "d/d/d/d/d").exists()


def test_remove_tree_removes_a_chain_past_path_max_and_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the grader's")
    for depth in (1500, 3000):  # 3000 * 'dd/' is past PATH_MAX (4096): no path to the bottom exists
        with deep_chain(tmp_path / f"work{depth}", depth, name="dd", file_every=100) as top:
            (top / "out").symlink_to(outside, target_is_directory=True)
            assert tree_size(top) == (depth // 100) * (10 + len("/etc")) + len(str(outside))
            remove_tree(top)
            assert not os.path.lexists(top)
    assert (outside / "keep").read_text() == "not the grader's" and os.path.isfile("/etc/passwd")
    link = tmp_path / "link"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        remove_tree(link)
    remove_tree(link, ignore_errors=True)
    assert (outside / "keep").exists()


def test_remove_tree_removes_what_it_can_and_raises_for_the_rest(tmp_path):
    top = tmp_path / "work"
    with deep_chain(top / "a", 50), unremovable(top / "b" / "held-folder"):
        (top / "c.txt").write_text("x")
        with pytest.raises(OSError):
            remove_tree(top)
        assert sorted(p.name for p in top.iterdir()) == ["b"] and (top / "b" / "held-folder" / "held").exists()
        remove_tree(top, ignore_errors=True)  # no error raised
    remove_tree(top)
    assert not top.exists()
