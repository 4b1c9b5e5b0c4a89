"""Theoretical occupancy, two ways: as CUDA's Occupancy API computes it, and by hand.

Pure functions, no GPU. :func:`api_occupancy` reproduces
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` for compute capabilities
7.5, 8.0, 8.6, 8.9 and 9.0: registers are allocated per warp in units of 256
and per SM sub-partition (4 per SM), shared memory in units of 128 B (256 B on
7.5) with a per-block reservation the driver keeps (1 KiB from 8.0 on), and the
shared-memory carveout is the largest one unless a preference is given.
:func:`hand_occupancy` is the simplified model the exercise teaches: plain
divisions, no granularity, no reservation. On an H200 a block of 32 threads with
12 KiB of dynamic shared memory gets 17 blocks from the API (233472 // 13312)
and 19 by hand (233472 // 12288).

All sizes are in bytes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from grader.rubric.sm_limits import KIB as KIB
from grader.rubric.sm_limits import LIMITS as LIMITS
from grader.rubric.sm_limits import RESOURCES as RESOURCES
from grader.rubric.sm_limits import SMLimits as SMLimits
from grader.rubric.sm_limits import limits_for as limits_for


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of one kernel fit on an SM, and why no more.

    A per-resource limit of ``None`` means that resource does not limit at all
    (the kernel uses none of it).
    """

    blocks_per_sm: int
    limits: dict[str, int | None]
    limiting: tuple[str, ...]  # every resource whose limit equals blocks_per_sm
    warps_per_block: int
    active_warps: int
    max_warps: int
    regs_per_block: int = 0  # as allocated (API model only)
    smem_per_block: int = 0  # as allocated, reservation included (API model only)
    smem_config: int | None = None  # the shared-memory carveout assumed (API model only)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def occupancy(self) -> float:
        """Active warps over the SM's maximum, a fraction in [0, 1]."""
        return self.active_warps / self.max_warps if self.max_warps else 0.0

    @property
    def occupancy_pct(self) -> float:
        return 100.0 * self.occupancy


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _summarise(limits: dict[str, int | None], warps_per_block: int, max_warps: int,
               **extra) -> Occupancy:
    finite = [v for v in limits.values() if v is not None]
    blocks = min(finite) if finite else 0
    limiting = tuple(k for k, v in limits.items() if v is not None and v == blocks)
    return Occupancy(blocks_per_sm=blocks, limits=dict(limits), limiting=limiting,
                     warps_per_block=warps_per_block, active_warps=blocks * warps_per_block,
                     max_warps=max_warps, **extra)


def _config_at_least(lim: SMLimits, size: int) -> int | None:
    """The smallest carveout holding ``size`` bytes, or None if none does."""
    for c in lim.carveouts:
        if c >= size:
            return c
    return None


def _register_limit(lim: SMLimits, registers: int, warps_per_block: int) -> tuple[int | None, int]:
    if registers <= 0:
        return None, 0
    per_warp = _round_up(registers * lim.warp_size, lim.reg_alloc_unit)
    per_block = per_warp * warps_per_block
    # The launch check assumes each block's warps are spread over all sub-partitions.
    assumed = per_warp * _round_up(warps_per_block, lim.sub_partitions)
    if registers > lim.max_regs_per_thread or per_block > lim.regs_per_block \
            or assumed > lim.regs_per_block:
        return 0, per_block
    warps_per_partition = (lim.regs_per_sm // lim.sub_partitions) // per_warp
    return (warps_per_partition * lim.sub_partitions) // warps_per_block, per_block


def api_occupancy(lim: SMLimits, *, block_size: int, registers: int, dynamic_smem: int = 0,
                  static_smem: int = 0, max_dynamic_smem: int | None = None,
                  carveout_pct: int | None = None, barriers: int = 1) -> Occupancy:
    """Blocks per SM as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` reports them.

    ``registers`` is the kernel's per-thread count (ptxas "Used N registers");
    ``static_smem`` its static shared memory; ``dynamic_smem`` the launch's.
    ``max_dynamic_smem`` is the kernel's ``cudaFuncAttributeMaxDynamicSharedMemorySize``
    (default: 48 KiB less the static part, what a kernel has before it opts in);
    a launch asking for more gets 0 blocks. ``carveout_pct`` is the kernel's
    preferred shared-memory carveout in percent (None: no preference, which the
    API treats as the largest carveout). ``barriers`` counts named barriers
    (``__syncthreads`` uses one); only Hopper's calculation looks at it.
    """
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    warps_per_block = -(-block_size // lim.warp_size)
    max_warps = lim.max_warps_per_sm
    notes: list[str] = []

    if block_size > lim.max_threads_per_block:
        warps_limit = 0
        notes.append(f"block of {block_size} threads exceeds {lim.max_threads_per_block}")
    else:
        warps_limit = max_warps // warps_per_block

    regs_limit, regs_alloc = _register_limit(lim, registers, warps_per_block)

    if max_dynamic_smem is None:
        max_dynamic_smem = max(lim.smem_per_block - static_smem, 0)
    fixed = static_smem + lim.reserved_smem_per_block
    smem_alloc = _round_up(fixed + dynamic_smem, lim.smem_granularity)
    opted_in = static_smem + max_dynamic_smem > lim.smem_per_block
    per_block_cap = (lim.smem_per_block_optin if opted_in else lim.smem_per_block) \
        + lim.reserved_smem_per_block
    config: int | None = None
    if dynamic_smem > max_dynamic_smem or smem_alloc > per_block_cap:
        smem_limit: int | None = 0
        notes.append(f"{smem_alloc} B of shared memory per block exceeds what the kernel may use")
    else:
        wanted = None if carveout_pct is None else _config_at_least(lim, lim.smem_per_sm * carveout_pct // 100)
        preferred = lim.smem_per_sm if wanted is None else wanted
        config = preferred if preferred >= smem_alloc else _config_at_least(lim, smem_alloc)
        if config is None:
            config = lim.smem_per_sm
        smem_limit = config // smem_alloc if smem_alloc > 0 else None

    barrier_limit = None
    if lim.cc.startswith("9") and barriers > 0:
        barrier_limit = lim.max_blocks_per_sm * lim.barrier_slots_per_block // barriers

    limits = {"warps": warps_limit, "registers": regs_limit, "shared_mem": smem_limit,
              "blocks": lim.max_blocks_per_sm, "barriers": barrier_limit}
    return _summarise(limits, warps_per_block, max_warps, regs_per_block=regs_alloc,
                      smem_per_block=smem_alloc, smem_config=config, notes=tuple(notes))


def launch_smem_config(lim: SMLimits, occ: Occupancy) -> int | None:
    """The smallest carveout that still holds ``occ.blocks_per_sm`` blocks.

    At launch the driver may choose a smaller carveout than the API assumes when
    that costs no occupancy (more L1 cache); Nsight Compute's "Block Limit Shared
    Mem" can then be computed against this size. None when no block fits.
    """
    if occ.blocks_per_sm <= 0:
        return None
    return _config_at_least(lim, occ.blocks_per_sm * occ.smem_per_block)


def max_potential_block_size(lim: SMLimits, *, registers: int, num_sms: int,
                             dynamic_smem: int | Callable[[int], int] = 0, static_smem: int = 0,
                             max_dynamic_smem: int | None = None, block_size_limit: int = 0,
                             kernel_max_threads: int | None = None,
                             carveout_pct: int | None = None) -> tuple[int, int]:
    """``(min_grid, block)`` as ``cudaOccupancyMaxPotentialBlockSize`` returns them.

    ``dynamic_smem`` is the per-block dynamic shared memory, the same for every
    candidate block size, or a function of the block size (the VariableSMem form).
    Candidates are tried from the largest multiple of the warp size down; the
    first one that reaches the best thread count wins (so ties go to larger blocks).
    """
    limit = lim.max_threads_per_block
    for cap in (block_size_limit, kernel_max_threads):
        if cap:
            limit = min(limit, cap)
    best_block, best_blocks, best_threads = 0, 0, 0
    candidate = _round_up(limit, lim.warp_size)
    while candidate > 0:
        block = min(limit, candidate)
        smem = dynamic_smem(block) if callable(dynamic_smem) else dynamic_smem
        occ = api_occupancy(lim, block_size=block, registers=registers, dynamic_smem=smem,
                            static_smem=static_smem, max_dynamic_smem=max_dynamic_smem,
                            carveout_pct=carveout_pct)
        threads = occ.blocks_per_sm * block
        if threads > best_threads:
            best_block, best_blocks, best_threads = block, occ.blocks_per_sm, threads
        if best_threads == lim.max_threads_per_sm:
            break
        candidate -= lim.warp_size
    return best_blocks * num_sms, best_block


def hand_occupancy(*, max_warps: int, max_blocks: int, regs_per_sm: int, smem_per_sm: int,
                   threads_per_block: int, regs_per_thread: int, smem_per_block: int,
                   warp_size: int = 32) -> Occupancy:
    """The exercise's model: each resource divided by the block's need, rounded down.

    No allocation granularity and no reserved shared memory. Sizes in bytes.
    """
    if threads_per_block <= 0:
        raise ValueError("threads_per_block must be positive")
    warps = -(-threads_per_block // warp_size)
    regs_needed = threads_per_block * regs_per_thread
    limits = {
        "warps": max_warps // warps,
        "registers": regs_per_sm // regs_needed if regs_needed > 0 else None,
        "shared_mem": smem_per_sm // smem_per_block if smem_per_block > 0 else None,
        "blocks": max_blocks,
    }
    return _summarise(limits, warps, max_warps)


def hand_occupancy_on(lim: SMLimits, *, threads_per_block: int, regs_per_thread: int,
                      smem_per_block: int) -> Occupancy:
    """:func:`hand_occupancy` with one SM's limits from the table."""
    return hand_occupancy(max_warps=lim.max_warps_per_sm, max_blocks=lim.max_blocks_per_sm,
                          regs_per_sm=lim.regs_per_sm, smem_per_sm=lim.smem_per_sm,
                          threads_per_block=threads_per_block, regs_per_thread=regs_per_thread,
                          smem_per_block=smem_per_block, warp_size=lim.warp_size)
