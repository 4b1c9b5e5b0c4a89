"""What one SM of each compute capability offers: the table the occupancy calculator and the
occupancy section's settings read (what cudaGetDeviceProperties reports, per compute capability).

Hardware data, like grader/rubric/peaks.py: the rubric's occupancy section names a compute capability
from this table, and grader/occupancy/calculator.py computes occupancy from its rows. All sizes in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

KIB = 1024

# Resource names, in the order reports list them (ncu's Block Limit rows use the same four).
RESOURCES = ("warps", "registers", "shared_mem", "blocks", "barriers")


@dataclass(frozen=True)
class SMLimits:
    """What one SM of a compute capability offers (what cudaGetDeviceProperties reports)."""

    cc: str
    example: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # sharedMemPerMultiprocessor: the largest carveout
    smem_per_block_optin: int  # sharedMemPerBlockOptin
    reserved_smem_per_block: int
    smem_granularity: int
    carveouts: tuple[int, ...]  # shared-memory sizes the SM can be configured to, ascending
    barrier_slots_per_block: int  # hardware barriers per resident-block slot
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers are given to a warp in multiples of this
    sub_partitions: int = 4  # registers are split evenly among the SM's schedulers
    smem_per_block: int = 48 * KIB  # without opting in
    max_threads_per_block: int = 1024
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def _sizes(*kib: int) -> tuple[int, ...]:
    return tuple(k * KIB for k in kib)


LIMITS: dict[str, SMLimits] = {
    "7.5": SMLimits("7.5", "Tesla T4", 1024, 16, 64 * KIB, 64 * KIB, 0, 256,
                    _sizes(32, 64), 2),
    "8.0": SMLimits("8.0", "A100", 2048, 32, 164 * KIB, 163 * KIB, KIB, 128,
                    _sizes(0, 8, 16, 32, 64, 100, 132, 164), 2),
    "8.6": SMLimits("8.6", "RTX 3090 / A10", 1536, 16, 100 * KIB, 99 * KIB, KIB, 128,
                    _sizes(0, 8, 16, 32, 64, 100), 1),
    "8.9": SMLimits("8.9", "L4 / RTX 4090", 1536, 24, 100 * KIB, 99 * KIB, KIB, 128,
                    _sizes(0, 8, 16, 32, 64, 100), 1),
    "9.0": SMLimits("9.0", "H100 / H200", 2048, 32, 228 * KIB, 227 * KIB, KIB, 128,
                    _sizes(0, 8, 16, 32, 64, 100, 132, 164, 196, 228), 2),
}


def limits_for(cc: str | tuple[int, int] | list[int]) -> SMLimits:
    """The table row for ``"9.0"``, ``(9, 0)`` or ``[9, 0]``; KeyError names the supported ones."""
    key = f"{cc[0]}.{cc[1]}" if isinstance(cc, (tuple, list)) else str(cc).strip()
    if key not in LIMITS:
        raise KeyError(f"compute capability {key!r} is not in the table "
                       f"(supported: {', '.join(LIMITS)})")
    return LIMITS[key]
