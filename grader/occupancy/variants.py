"""Per-student variants of the occupancy exercises (rubric ``occupancy.variants: true``; off by default).

A student's seed is the SHA-256 of the rubric's ``variant_salt`` and the student's identity (lower-cased):
the Gradescope submission's SID (its email when the course has no SIDs), the same in a batch's export
metadata, ``token:<hash>`` for the grading service, or ``--student`` locally. From it each exercise whose
numbers make sense to vary gets its own draw among candidates that keep its teaching point; every
candidate is checked with the calculator, and the handout's own numbers are never drawn:

- Ex 1 (by hand): the kernel's threads, registers and shared memory per block; the SM stays. Checked:
  shared memory alone limits it, its occupancy is below the target, and lowering shared memory alone
  can reach the target.
- Ex 2 (the Occupancy API): the block size and the dynamic shared memory. Checked on the reference GPU
  with the exercise's register count: shared memory limits the API's count, and the API and the hand
  count differ (the reserved shared memory per block, the allocation granularity).

The others keep the handout's numbers. Ex 3's run sizes name the answers file's keys
(``ex3.run_12kib...``): varying them would change the file every student fills in. Ex 4 (the sweeps'
measured times), Ex 5 (a real scheduler report) and Ex 6 (the student's own ``heavy`` kernel against
fixed register caps) teach from measurements that no draw can check without the GPU.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, replace

from grader.model import ItemResult, Status
from grader.occupancy.calculator import KIB, api_occupancy, hand_occupancy, hand_occupancy_on, limits_for
from grader.rubric.occupancy import Ex1, Ex2, OccupancyConfig

# The candidates each exercise draws from.
EX1_THREADS = (32, 64, 96, 128, 192, 256)
EX1_REGISTERS = (8, 16, 24, 32, 40)
EX1_SMEM_KIB = tuple(range(6, 49, 2))
EX2_BLOCKS = (32, 64, 96, 128)
EX2_SMEM_KIB = tuple(range(5, 25))


@dataclass(frozen=True)
class Variant:
    student: str  # the identity it was drawn for, as given (trimmed)
    name: str     # a short label for the feedback: "V-" and the seed's first hex digits
    cfg: OccupancyConfig

    def lines(self) -> list[str]:
        """The student's numbers, one line per exercise that varies (the handout's wording)."""
        e1, e2 = self.cfg.ex1, self.cfg.ex2
        return [f"Ex 1: kernel: {e1.threads_per_block} threads/block, {e1.regs_per_thread} registers/thread, "
                f"{e1.smem_per_block / KIB:g} KiB shared memory/block (SM and target as in the handout)",
                f"Ex 2: block {e2.block_size}, {e2.dynamic_smem / KIB:g} KiB dynamic shared memory"]

    def program_defines(self) -> list[str]:
        return program_defines(self.cfg)


def program_defines(cfg: OccupancyConfig) -> list[str]:
    """The -D flags occ.cu's program is built with when the course draws variants, so it asks the API about
    the student's own Ex 2 launch (the starter reads EX2_BLOCK and EX2_SMEM); none without variants."""
    return [f"-DEX2_BLOCK={cfg.ex2.block_size}", f"-DEX2_SMEM={cfg.ex2.dynamic_smem}"] if cfg.variants else []


def _seed(cfg: OccupancyConfig, student: str) -> bytes:
    return hashlib.sha256(f"occupancy-variant\0{cfg.variant_salt}\0{student.strip().lower()}".encode()).digest()


def _pick(seed: bytes, exercise: str, candidates: list) -> object:
    """One of ``candidates``, by the seed's hash for this exercise (a draw per exercise)."""
    n = int.from_bytes(hashlib.sha256(seed + exercise.encode()).digest()[:8], "big")
    return candidates[n % len(candidates)]


def ex1_problem(e: Ex1) -> str:
    """Why Ex 1's numbers lose its teaching point ("" when they keep it)."""
    def occ(smem: int):
        return hand_occupancy(max_warps=e.max_warps, max_blocks=e.max_blocks, regs_per_sm=e.registers,
                              smem_per_sm=e.smem_per_sm, threads_per_block=e.threads_per_block,
                              regs_per_thread=e.regs_per_thread, smem_per_block=smem)
    now = occ(e.smem_per_block)
    if tuple(now.limiting) != ("shared_mem",):
        return f"limited by {', '.join(now.limiting)}, not by shared memory alone"
    if now.blocks_per_sm < 1 or now.occupancy_pct >= e.target_occupancy_pct:
        return f"occupancy {now.occupancy_pct:.1f}% is not below the target {e.target_occupancy_pct:g}%"
    if occ(0).occupancy_pct < e.target_occupancy_pct:
        return "no amount of shared memory reaches the target"
    return ""


def ex2_problem(cfg: OccupancyConfig, e: Ex2) -> str:
    lim = limits_for(cfg.reference.compute_capability)
    api = api_occupancy(lim, block_size=e.block_size, registers=e.work_registers, dynamic_smem=e.dynamic_smem)
    hand = hand_occupancy_on(lim, threads_per_block=e.block_size, regs_per_thread=e.work_registers,
                             smem_per_block=e.dynamic_smem)
    if tuple(api.limiting) != ("shared_mem",):
        return f"the API's count is limited by {', '.join(api.limiting)}, not by shared memory alone"
    if api.blocks_per_sm == hand.blocks_per_sm:
        return "the API and the hand count agree"
    return ""


def ex1_candidates(cfg: OccupancyConfig) -> list[Ex1]:
    e = cfg.ex1
    out = []
    for threads, regs, smem in itertools.product(EX1_THREADS, EX1_REGISTERS, EX1_SMEM_KIB):
        c = replace(e, threads_per_block=threads, regs_per_thread=regs, smem_per_block=smem * KIB)
        if c != e and not ex1_problem(c):
            out.append(c)
    return out


def ex2_candidates(cfg: OccupancyConfig) -> list[Ex2]:
    e = cfg.ex2
    out = []
    for block, smem in itertools.product(EX2_BLOCKS, EX2_SMEM_KIB):
        c = replace(e, block_size=block, dynamic_smem=smem * KIB)
        if c != e and not ex2_problem(cfg, c):
            out.append(c)
    return out


def variant_for(cfg: OccupancyConfig, student: str) -> Variant:
    """The student's variant: ``cfg`` with Ex 1's and Ex 2's numbers drawn from the student's seed."""
    seed = _seed(cfg, student)
    ex1 = _pick(seed, "ex1", ex1_candidates(cfg) or [cfg.ex1])
    ex2 = _pick(seed, "ex2", ex2_candidates(cfg) or [cfg.ex2])
    assert isinstance(ex1, Ex1) and isinstance(ex2, Ex2)
    return Variant(student.strip(), "V-" + seed.hex()[:6], replace(cfg, ex1=ex1, ex2=ex2))


def student_of(submitters: list[dict[str, str]]) -> str | None:
    """A submission's identity from its submitters ({name, sid, email}): the SID, else the email; for a
    group, the smallest, so every member draws the same variant."""
    ids = sorted(v for s in submitters if (v := (s.get("sid") or s.get("email") or "").strip().lower()))
    return ids[0] if ids else None


def mismatch_note(variant: Variant) -> str:
    """Said under a failed answer item of a varied exercise: which numbers it was graded for."""
    return (f"Graded for your variant {variant.name} (" + "; ".join(variant.lines()) + "). If these answers were "
            f"computed for other numbers than these, recompute them with yours: `python -m grader variant "
            f"--student {variant.student}` prints them.")


# The items that grade answers computed from a varied exercise's numbers.
VARIED_ANSWER_ITEMS = ("ex1.warps_per_block", "ex1.blocks_by_registers", "ex1.blocks_by_shared_mem",
                       "ex1.blocks_by_warps", "ex1.blocks_by_hardware", "ex1.max_blocks", "ex1.bottleneck",
                       "ex1.occupancy", "ex1.fix", "ex1.fix_numbers", "ex2.answers", "ex2.difference_cause")
# The program's Ex 2 items: it asks the API about the launch it was built with (-DEX2_BLOCK, -DEX2_SMEM).
VARIED_PROGRAM_ITEMS = ("ex2.program_api_blocks",)


def annotate(items: list[ItemResult], variant: Variant) -> list[ItemResult]:
    """Each failed item of a varied exercise says which numbers it was graded for."""
    note = mismatch_note(variant)
    built = (f"The grader built occ.cu with {' '.join(variant.program_defines())}: a program that reads EX2_BLOCK "
             "and EX2_SMEM (as the starter does) asks the API about your Ex 2 launch.")
    for r in items:
        if r.status is Status.FAILED and r.item in VARIED_ANSWER_ITEMS:
            r.message = (r.message + "\n" if r.message else "") + note
        elif r.status is Status.FAILED and r.item in VARIED_PROGRAM_ITEMS:
            r.message = (r.message + "\n" if r.message else "") + built
    return items
