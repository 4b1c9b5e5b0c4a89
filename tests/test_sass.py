"""cuobjdump -sass parser, on real output captured from the solution cubins on an H200."""
from pathlib import Path

import pytest

from grader.compile.sass import parse_sass

FIX = Path(__file__).parent / "fixtures" / "sass"
TENSOR = {"HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "BMMA", "DMMA"}


@pytest.mark.parametrize("stage,kernel", [("naive", "mmNaive"), ("coalesced", "mmCoalesced"), ("tiled", "mmTiled"),
                                          ("blocktiling_1d", "mm1DBlocktiling"),
                                          ("blocktiling_2d", "mm2DBlocktiling")])
def test_fp32_solutions_are_ffma_only(stage, kernel):
    ops = parse_sass((FIX / f"cuobjdump13.0_sm90a_solution_{stage}.txt").read_text())
    assert kernel in ops
    assert ops[kernel]["FFMA"] > 0
    assert not TENSOR & set(ops[kernel])


def test_wmma_solution_has_hmma_and_async_copies():
    ops = parse_sass((FIX / "cuobjdump13.0_sm90a_solution_wmma.txt").read_text())["mmWMMA"]
    assert ops["HMMA"] >= 32
    assert ops["LDGSTS"] > 0  # cp.async: global -> shared without registers
    assert ops["FFMA"] == 0


def test_register_blocking_shows_in_the_instruction_mix():
    # 2D blocktiling issues far more FFMA per shared load than the tiled kernel (the point of the stage).
    tiled = parse_sass((FIX / "cuobjdump13.0_sm90a_solution_tiled.txt").read_text())["mmTiled"]
    two_d = parse_sass((FIX / "cuobjdump13.0_sm90a_solution_blocktiling_2d.txt").read_text())["mm2DBlocktiling"]
    assert two_d["FFMA"] / two_d["LDS"] > 4 * tiled["FFMA"] / tiled["LDS"]


def test_predicated_instructions_count_by_base_opcode():
    text = ("        Function : k\n"
            "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
            "        /*0010*/              @!P0 BRA 0x320 ;\n"
            "        /*0020*/               @P1 HMMA.16816.F32 R4, R8, R12, R4 ;\n"
            "        /*0030*/              @!UPT UIADD3 UR4, UR4, 0x1, URZ ;\n")
    assert dict(parse_sass(text)["k"]) == {"MOV": 1, "BRA": 1, "HMMA": 1, "UIADD3": 1}
