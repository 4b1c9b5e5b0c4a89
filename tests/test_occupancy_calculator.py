"""The occupancy calculator against the API numbers measured on an H200, and per-CC sanity."""
from __future__ import annotations

import pytest

from grader.occupancy.calculator import (
    KIB,
    LIMITS,
    api_occupancy,
    hand_occupancy,
    hand_occupancy_on,
    launch_smem_config,
    limits_for,
    max_potential_block_size,
)

H200 = limits_for("9.0")
WORK_REGS = 28  # the seed's work kernel, measured (FACTS.md)


@pytest.mark.parametrize("smem_kib, blocks", [(12, 17), (7, 28), (6, 32), (0, 32)])
def test_block_32_matches_the_api_on_h200(smem_kib, blocks):
    occ = api_occupancy(H200, block_size=32, registers=WORK_REGS, dynamic_smem=smem_kib * KIB)
    assert occ.blocks_per_sm == blocks


@pytest.mark.parametrize("smem_kib, blocks", [(0, 16), (2, 16), (4, 16), (8, 16), (16, 13),
                                              (32, 6), (48, 4)])
def test_block_128_sweep_matches_the_api_on_h200(smem_kib, blocks):
    occ = api_occupancy(H200, block_size=128, registers=WORK_REGS, dynamic_smem=smem_kib * KIB)
    assert occ.blocks_per_sm == blocks
    assert occ.active_warps == 4 * blocks
    assert occ.occupancy == pytest.approx(4 * blocks / 64)


def test_max_potential_block_size_matches_the_api_on_h200():
    assert max_potential_block_size(H200, registers=WORK_REGS, num_sms=132,
                                    dynamic_smem=12 * KIB) == (264, 1024)


def test_limiting_resources_and_allocations():
    occ = api_occupancy(H200, block_size=32, registers=WORK_REGS, dynamic_smem=12 * KIB)
    assert occ.limiting == ("shared_mem",)
    assert occ.smem_per_block == 13 * KIB  # 12 KiB + the 1 KiB the driver reserves
    assert occ.regs_per_block == 1024  # 28 x 32 = 896, rounded up to 256s
    assert occ.limits["registers"] == 64 and occ.limits["warps"] == 64
    assert occ.occupancy_pct == pytest.approx(100 * 17 / 64)
    tie = api_occupancy(H200, block_size=32, registers=WORK_REGS, dynamic_smem=6 * KIB)
    assert set(tie.limiting) == {"shared_mem", "blocks"}


def test_hand_model_gives_19_where_the_api_gives_17():
    hand = hand_occupancy(max_warps=64, max_blocks=32, regs_per_sm=65536, smem_per_sm=228 * KIB,
                          threads_per_block=32, regs_per_thread=8, smem_per_block=12 * KIB)
    assert hand.blocks_per_sm == 19
    assert hand.limits == {"warps": 64, "registers": 256, "shared_mem": 19, "blocks": 32}
    assert hand.limiting == ("shared_mem",)
    assert hand.occupancy_pct == pytest.approx(29.6875)
    fixed = hand_occupancy_on(H200, threads_per_block=32, regs_per_thread=8, smem_per_block=7 * KIB)
    assert fixed.blocks_per_sm == 32 and fixed.occupancy_pct == 50.0
    assert set(fixed.limiting) == {"shared_mem", "blocks"}


def test_hand_model_without_shared_memory_has_no_shared_limit():
    hand = hand_occupancy_on(H200, threads_per_block=256, regs_per_thread=32, smem_per_block=0)
    assert hand.limits["shared_mem"] is None
    assert hand.blocks_per_sm == 8 and hand.limiting == ("warps", "registers")


def test_register_allocation_rounds_per_warp_and_per_sub_partition():
    # 33 registers: 1056 per warp -> 1280; 16384 // 1280 = 12 warps per sub-partition, 48 per SM.
    occ = api_occupancy(H200, block_size=128, registers=33)
    assert occ.limits["registers"] == 12 and occ.blocks_per_sm == 12
    # 168 registers (the solution's heavy kernel): 3 warps per sub-partition -> 1 block of 256.
    assert api_occupancy(H200, block_size=256, registers=168).blocks_per_sm == 1
    # 255 registers cannot run a block of 1024 threads at all.
    big = api_occupancy(H200, block_size=1024, registers=255)
    assert big.blocks_per_sm == 0 and "registers" in big.limiting


def test_dynamic_shared_memory_above_the_default_limit_needs_the_attribute():
    assert api_occupancy(H200, block_size=128, registers=32, dynamic_smem=100 * KIB).blocks_per_sm == 0
    raised = api_occupancy(H200, block_size=128, registers=32, dynamic_smem=100 * KIB,
                           max_dynamic_smem=227 * KIB)
    assert raised.blocks_per_sm == 2  # 228 KiB // 101 KiB
    assert api_occupancy(H200, block_size=128, registers=32, dynamic_smem=227 * KIB,
                         max_dynamic_smem=227 * KIB).blocks_per_sm == 1
    assert api_occupancy(H200, block_size=128, registers=32, dynamic_smem=227 * KIB + 1,
                         max_dynamic_smem=228 * KIB).blocks_per_sm == 0


def test_carveout_preference_picks_the_next_supported_size():
    # 50 % of 228 KiB = 114 KiB -> the 132 KiB configuration; 9 KiB per block -> 14 blocks.
    occ = api_occupancy(H200, block_size=128, registers=32, dynamic_smem=8 * KIB, carveout_pct=50)
    assert occ.smem_config == 132 * KIB and occ.blocks_per_sm == 14
    # A preference too small for one block grows to the smallest size that holds it.
    tiny = api_occupancy(H200, block_size=128, registers=32, dynamic_smem=20 * KIB, carveout_pct=0)
    assert tiny.smem_config == 32 * KIB and tiny.blocks_per_sm == 1


def test_launch_carveout_is_the_smallest_that_keeps_occupancy():
    occ = api_occupancy(H200, block_size=128, registers=32)  # 16 blocks of 1 KiB (reserved only)
    assert launch_smem_config(H200, occ) == 16 * KIB
    occ12 = api_occupancy(H200, block_size=32, registers=28, dynamic_smem=12 * KIB)
    assert launch_smem_config(H200, occ12) == 228 * KIB


@pytest.mark.parametrize("cc, block, regs, smem, blocks, pct", [
    ("7.5", 256, 32, 0, 4, 100.0),          # 32 warps per SM on Turing
    ("7.5", 128, 32, 12 * KIB, 5, 62.5),    # 64 KiB // 12 KiB, nothing reserved
    ("7.5", 32, 16, 100, 16, 50.0),         # 100 B rounds to 256 B; 16-block limit
    ("8.0", 32, 28, 12 * KIB, 12, 18.75),   # 164 KiB // 13 KiB
    ("8.6", 1024, 32, 0, 1, 100 * 32 / 48),  # 48 warps per SM
    ("8.9", 32, 16, 0, 24, 50.0),           # 24-block limit
    ("9.0", 1024, 32, 0, 2, 100.0),
])
def test_per_cc_sanity(cc, block, regs, smem, blocks, pct):
    occ = api_occupancy(limits_for(cc), block_size=block, registers=regs, dynamic_smem=smem)
    assert occ.blocks_per_sm == blocks
    assert occ.occupancy_pct == pytest.approx(pct)


@pytest.mark.parametrize("cc", sorted(LIMITS))
def test_more_shared_memory_never_fits_more_blocks(cc):
    lim = limits_for(cc)
    for block in (32, 128, 512):
        prev = None
        for smem in range(0, lim.smem_per_block + 1, 1024):
            n = api_occupancy(lim, block_size=block, registers=32, dynamic_smem=smem).blocks_per_sm
            assert prev is None or n <= prev
            assert 0 <= n <= lim.max_blocks_per_sm
            prev = n


def test_table_rows_and_lookup_forms():
    assert limits_for((8, 6)) is limits_for("8.6") is limits_for([8, 6])
    assert limits_for("7.5").reserved_smem_per_block == 0
    assert limits_for("7.5").smem_granularity == 256
    assert all(limits_for(cc).smem_granularity == 128 for cc in ("8.0", "8.6", "8.9", "9.0"))
    assert H200.smem_per_sm == 233472 and H200.max_warps_per_sm == 64
    with pytest.raises(KeyError, match="supported"):
        limits_for("10.0")


def test_potential_block_size_prefers_larger_blocks_on_ties_and_honours_limits():
    # No shared memory: 1024 already fills the SM, so it wins although 64..512 tie.
    # Under a limit of 96, 64 (32 blocks, 2048 threads) beats 96 (21 blocks, 2016 threads).
    assert max_potential_block_size(H200, registers=32, num_sms=132) == (264, 1024)
    assert max_potential_block_size(H200, registers=32, num_sms=132, block_size_limit=96) == (4224, 64)
    # A per-block function of the block size (the VariableSMem form).
    grid, block = max_potential_block_size(H200, registers=32, num_sms=1,
                                           dynamic_smem=lambda b: b * 64)
    assert block * grid <= 2048 and grid == api_occupancy(
        H200, block_size=block, registers=32, dynamic_smem=block * 64).blocks_per_sm
