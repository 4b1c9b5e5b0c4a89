"""compute-sanitizer output parser, on output captured on an H200 (tests/fixtures/sanitizer/)."""
from pathlib import Path

from grader.gpu.sanitize import parse_sanitizer, race_message

FIX = Path(__file__).parent / "fixtures" / "sanitizer"


def test_racecheck_finds_the_missing_barrier_with_source_lines():
    findings = parse_sanitizer((FIX / "racecheck_2025_tiled_missing_sync_h200.txt").read_text())
    assert [f.summary.split(":")[0] for f in findings] == ["Error", "Warning"]  # 1 error, 1 warning
    assert findings[0].locations[0] == ("mmTiled", "tiled.cu", 16)
    assert findings[1].locations[0] == ("mmTiled", "tiled.cu", 15)
    msg = race_message("mmTiled", findings)
    assert msg.startswith("shared-memory race in mmTiled: write at tiled.cu:16, read at tiled.cu:18 (1 more).")
    assert msg.count("tiled.cu:18") == 1  # repeated accesses at one line are named once


def test_clean_racecheck_has_no_findings():
    # the WMMA solution (cp.async multi-stage pipeline): racecheck reports nothing
    assert parse_sanitizer((FIX / "racecheck_solution_wmma_h200.txt").read_text()) == []


def test_memcheck_names_the_first_bad_write():
    findings = parse_sanitizer((FIX / "memcheck_illegal_address_h200.txt").read_text())
    first = findings[0]
    assert first.summary == "Invalid __global__ write of size 4 bytes"
    assert first.brief() == "Invalid __global__ write of size 4 bytes (naive.cu:12)"
    assert first.details[1].startswith("by thread (0,22,0) in block (0,1,0)")
    assert "out of bounds" in first.details[2]
    # host backtrace lines are details of a finding, never findings of their own
    assert all(not f.summary.startswith(("Host Frame", "Saved host")) for f in findings)
