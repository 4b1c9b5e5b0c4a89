"""Replays the real Occupancy API answers captured on an H200 against the calculator (no GPU).

tests/fixtures/occupancy/api_grid_h200.json is the output of tools/occupancy_api_grid.py on an
H200 (2026-11-29): cudaOccupancyMaxActiveBlocksPerMultiprocessor over 5,933 combinations of
registers, static and dynamic shared memory and block size.
"""
import json
from pathlib import Path

from grader.occupancy.calculator import api_occupancy, limits_for

GRID = json.loads((Path(__file__).parent / "fixtures" / "occupancy" / "api_grid_h200.json").read_text())


def test_fixture_is_a_real_h200_capture():
    assert GRID["device"]["name"] == "NVIDIA H200" and len(GRID["rows"]) > 5000


def test_calculator_matches_every_captured_api_answer():
    # The grid was captured with the kernel's dynamic shared-memory limit raised to the opt-in
    # maximum (tools/occupancy_api_grid.py, pass 2).
    lim = limits_for(GRID["device"]["cc"])
    wrong = []
    for row in GRID["rows"]:
        occ = api_occupancy(lim, block_size=row["block"], registers=row["registers"],
                            dynamic_smem=row["smem"], static_smem=row["static_smem"],
                            max_dynamic_smem=lim.smem_per_block_optin - row["static_smem"])
        if occ.blocks_per_sm != row["api_blocks"]:
            wrong.append((row, occ.blocks_per_sm))
    assert not wrong, f"{len(wrong)} disagreements, first: {wrong[:3]}"


def test_default_limit_pass_agrees_too():
    # Without opting in, a launch above 48 KiB (less static) cannot run: the API says 0 blocks.
    lim = limits_for(GRID["device"]["cc"])
    rows = [r for r in GRID["extra_rows"] if r["pass"] == "default_limit"]
    assert rows
    for row in rows:
        occ = api_occupancy(lim, block_size=row["block"], registers=row["registers"],
                            dynamic_smem=row["smem"], static_smem=row["static_smem"])
        assert occ.blocks_per_sm == row["api_blocks"], row
