"""Grading of the six occupancy exercises: one ItemResult per rubric item.

:func:`grade_occupancy` is the entry point. Ex 1 and Ex 5 need only the answers;
Ex 2 and Ex 3 compare the answers with the calculator for the GPU the answers
name (the rubric's reference GPU by default) and, for Ex 2, the student's program
with the grader's own Occupancy API calls; Ex 4 and Ex 6 (in :mod:`.measured`)
need the program's output, ptxas reports and timings. Free-text answers become
``manual`` items. Expected answers to the handout's questions are never printed in messages.
A knock-on answer, one computed from the student's own earlier answer (Ex 1's numbers for the
student's own changed kernel), is shown with the value expected for that answer: it reveals
nothing the handout asks, unless the earlier answer is the handout's own data (the kernel of
Ex 1 unchanged), and then it is not shown.
"""
from __future__ import annotations

import math

from grader.model import ItemResult, Measured, Status
from grader.occupancy.answers import MEMORY_LEVELS, Answers, run_key
from grader.occupancy.calculator import (
    KIB,
    api_occupancy,
    hand_occupancy,
    hand_occupancy_on,
    launch_smem_config,
    limits_for,
    max_potential_block_size,
)
from grader.occupancy.grading import FIX_KERNEL, Ctx, Measurements, api_lookup, as_number, implausible, program_value
from grader.occupancy.measured import grade_ex4, grade_ex6, grade_host
from grader.rubric.occupancy import OccupancyConfig

# What each dominant stall waits on (ex5.memory_level).
_STALL_MEMORY = {"long_scoreboard": {"global"}, "short_scoreboard": {"shared"}}


def grade_occupancy(cfg: OccupancyConfig, answers: Answers,
                    meas: Measurements | None = None) -> list[ItemResult]:
    """Every occupancy item, in rubric order. Never raises for a student's mistake."""
    ctx = Ctx(cfg, answers, meas or Measurements())
    results = grade_host(ctx) + grade_ex1(ctx) + grade_ex2(ctx) + grade_ex3(ctx) \
        + grade_ex4(ctx) + grade_ex5(ctx) + grade_ex6(ctx)
    order = list(cfg.items)
    return sorted(results, key=lambda r: order.index(r.item))


# ---------------------------------------------------------------------------------------
# Ex 1: occupancy by hand
# ---------------------------------------------------------------------------------------
def _ex1_model(cfg: OccupancyConfig, threads: int, regs: int, smem: int):
    e = cfg.ex1
    return hand_occupancy(max_warps=e.max_warps, max_blocks=e.max_blocks, regs_per_sm=e.registers,
                          smem_per_sm=e.smem_per_sm, threads_per_block=threads,
                          regs_per_thread=regs, smem_per_block=smem)


def grade_ex1(ctx: Ctx) -> list[ItemResult]:
    e = ctx.cfg.ex1
    occ = _ex1_model(ctx.cfg, e.threads_per_block, e.regs_per_thread, e.smem_per_block)
    pct_tol = ctx.cfg.tolerance.pct_points
    out = []
    for item, field, expected in (
            ("ex1.warps_per_block", "ex1.warps_per_block", occ.warps_per_block),
            ("ex1.blocks_by_registers", "ex1.blocks_by_registers", occ.limits["registers"]),
            ("ex1.blocks_by_shared_mem", "ex1.blocks_by_shared_mem", occ.limits["shared_mem"]),
            ("ex1.blocks_by_warps", "ex1.blocks_by_warps", occ.limits["warps"]),
            ("ex1.blocks_by_hardware", "ex1.blocks_by_hardware", occ.limits["blocks"]),
            ("ex1.max_blocks", "ex1.max_blocks", occ.blocks_per_sm)):
        out.append(ctx.parts(item, [ctx.expect_int(field, expected)]))
    out.append(ctx.parts("ex1.bottleneck", [ctx.expect_choice("ex1.bottleneck", set(occ.limiting))]))
    out.append(ctx.parts("ex1.occupancy", [ctx.expect_num("ex1.occupancy_pct", occ.occupancy_pct,
                                                          pct=True, abs_tol=pct_tol)]))

    # The fix: the student's new kernel parameters must reach the target occupancy.
    a = ctx.answers
    threads, regs, smem = (a.get(f) for f in FIX_KERNEL)
    problems = [p for f in FIX_KERNEL if (p := a.problem(f))]
    if a.error or problems:
        msg = a.error or "\n".join(problems)
        out.append(ctx.result("ex1.fix", Status.FAILED, 0.0, msg))
        out.append(ctx.result("ex1.fix_numbers", Status.FAILED, 0.0,
                              "needs the changed kernel first: " + msg))
        return out
    odd = implausible(a, ctx.cfg)  # what `python -m grader check` says too
    if "ex1.fix" in odd:
        msg = odd["ex1.fix"]
        return out + [ctx.result("ex1.fix", Status.FAILED, 0.0, msg),
                      ctx.result("ex1.fix_numbers", Status.FAILED, 0.0, msg)]
    if (threads, regs, smem) == (e.threads_per_block, e.regs_per_thread, e.smem_per_block):
        # The exercise's own kernel: its numbers are the answers above, so none is shown here.
        msg = ("ex1.fix: this is the exercise's kernel unchanged (same threads, registers and shared memory); "
               "change at least one of them")
        return out + [ctx.result("ex1.fix", Status.FAILED, 0.0, msg), ctx.result("ex1.fix_numbers", Status.FAILED,
                                                                               0.0, "needs a changed kernel: " + msg)]
    new = _ex1_model(ctx.cfg, threads, regs, smem)
    values = Measured(occupancy_pct=new.occupancy_pct, blocks=new.blocks_per_sm)
    kernel = f"{threads} threads, {regs} registers, {smem / KIB:g} KiB"
    unit = "\n" + odd[FIX_KERNEL[2]] if FIX_KERNEL[2] in odd else ""
    if new.occupancy_pct + 1e-9 >= e.target_occupancy_pct:
        out.append(ctx.result("ex1.fix", Status.PASSED, 1.0,
                              f"{kernel} reach {new.occupancy_pct:.1f}% by the hand model", values))
    else:
        out.append(ctx.result("ex1.fix", Status.FAILED, 0.0,
                              f"{kernel} give {new.occupancy_pct:.1f}% by the hand model, below "
                              f"{e.target_occupancy_pct:g}% (recheck every limit after the change)" + unit,
                              values))
    # Knock-on: the numbers for the student's own changed kernel, so the expected ones can be shown.
    mine = "expected for your changed kernel (ex1.fix), by the hand model:"
    out.append(ctx.parts("ex1.fix_numbers", [
        ctx.expect_int("ex1.fix.max_blocks", new.blocks_per_sm, f"{mine} {new.blocks_per_sm} blocks per SM"),
        ctx.expect_choice("ex1.fix.bottleneck", set(new.limiting),
                          f"{mine} {', '.join(sorted(new.limiting))}"),
        ctx.expect_num("ex1.fix.occupancy_pct", new.occupancy_pct, pct=True, abs_tol=pct_tol,
                       what=f"{mine} {new.occupancy_pct:.1f}%")]))
    if unit and out[-1].status == Status.FAILED:
        out[-1].message += unit
    return out


# ---------------------------------------------------------------------------------------
# Ex 2: the Occupancy API
# ---------------------------------------------------------------------------------------
def simulated_api(cfg: OccupancyConfig, cc: str, registers: int, sm_count: int,
                  static_smem: int = 0) -> dict:
    """What the grader's own API calls return, computed by the calculator.

    The same format the GPU flow must produce from real API calls on the student's
    compiled ``work``: device, the kernel's registers, one entry per (block, smem)
    point of :func:`api_points`, and the suggested block for Ex 2's shared memory.
    """
    lim = limits_for(cc)
    occupancy = []
    for block, smem in api_points(cfg):
        occ = api_occupancy(lim, block_size=block, registers=registers, dynamic_smem=smem,
                            static_smem=static_smem,
                            max_dynamic_smem=max(smem, lim.smem_per_block - static_smem))
        occupancy.append({"block": block, "smem": smem, "blocks": occ.blocks_per_sm})
    min_grid, best = max_potential_block_size(lim, registers=registers, num_sms=sm_count,
                                              dynamic_smem=cfg.ex2.dynamic_smem,
                                              static_smem=static_smem)
    return {
        "device": {"cc": lim.cc, "sm_count": sm_count, "warp_size": lim.warp_size,
                   "max_threads_per_sm": lim.max_threads_per_sm,
                   "max_blocks_per_sm": lim.max_blocks_per_sm, "regs_per_sm": lim.regs_per_sm,
                   "smem_per_sm": lim.smem_per_sm, "smem_per_block_optin": lim.smem_per_block_optin,
                   "reserved_smem_per_block": lim.reserved_smem_per_block},
        "work": {"registers": registers, "static_smem": static_smem},
        "occupancy": occupancy,
        "potential": {"smem": cfg.ex2.dynamic_smem, "best_block": best, "min_grid": min_grid},
    }


def api_points(cfg: OccupancyConfig) -> list[tuple[int, int]]:
    """Every (block size, dynamic smem bytes) the grader must ask the API about."""
    pts = [(cfg.ex2.block_size, cfg.ex2.dynamic_smem)]
    pts += [(cfg.ex3.block_size, s) for s in cfg.ex3.runs]
    pts += [(cfg.ex4.smem_block_size, s) for s in cfg.ex4.smem_points]
    pts += [(b, cfg.ex4.block_smem) for b in cfg.ex4.block_points]
    return list(dict.fromkeys(pts))


def grade_ex2(ctx: Ctx) -> list[ItemResult]:
    cfg = ctx.cfg
    out = []
    block, smem = cfg.ex2.block_size, cfg.ex2.dynamic_smem

    found = ctx.program_section("ex2.device_props", "device")
    if isinstance(found, ItemResult):
        out.append(found)
    else:
        dev, want = found.data, found.api["device"]
        parts = [(dev.get(k) == want.get(k),
                  f"device.{k}: the program printed {program_value(dev.get(k))}, the device reports {want.get(k)!r}")
                 for k in ("max_threads_per_sm", "regs_per_sm", "smem_per_sm", "warp_size")]
        out.append(ctx.parts("ex2.device_props", parts, "device properties match",
                             reads_answers=False))

    found = ctx.program_section("ex2.program_api_blocks", "ex2")
    if isinstance(found, ItemResult):
        out += [found] + [ctx.same_as(i, found) for i in ("ex2.program_occupancy", "ex2.program_best_block")]
    else:
        sec, grader_api = found.data, found.api
        want = api_lookup(grader_api, block, smem)
        same_point = sec.get("block") == block and sec.get("smem") == smem
        if not same_point:
            msg = (f"the program asked about block {program_value(sec.get('block'))}, "
                   f"smem {program_value(sec.get('smem'))}; "
                   f"the exercise asks for block {block}, smem {smem}")
        else:
            msg = f"the program printed {program_value(sec.get('blocks'))} blocks per SM; the API gives {want}"
        out.append(ctx.parts("ex2.program_api_blocks", [
            (same_point and want is not None and sec.get("blocks") == want, msg)],
            reads_answers=False))
        dev = grader_api["device"]
        max_warps = dev["max_threads_per_sm"] // dev["warp_size"]
        expected = (want or 0) * math.ceil(block / dev["warp_size"]) / max_warps
        got = sec.get("occupancy")
        got_n = as_number(got)  # None for text, a list, 1e400: math.isclose would raise on a huge int
        ok = got_n is not None and math.isclose(got_n, expected, abs_tol=1e-4)
        out.append(ctx.parts("ex2.program_occupancy", [
            (ok, f"the program printed occupancy {program_value(got)}; {want} blocks give {expected:.4f}")],
            reads_answers=False))
        pot = grader_api["potential"]
        out.append(ctx.parts("ex2.program_best_block", [
            (sec.get("best_block") == pot["best_block"],
             f"the program printed best block {program_value(sec.get('best_block'))}; the API gives "
             f"{pot['best_block']}"),
            (sec.get("min_grid") == pot["min_grid"],
             f"the program printed min grid {program_value(sec.get('min_grid'))}; the API gives "
             f"{pot['min_grid']}")],
            reads_answers=False))

    # The answers' API numbers, against the calculator for the GPU the answers name.
    lim, sms, gpu = ctx.device()
    regs = ctx.answers.get("ex2.work_registers") or cfg.ex2.work_registers
    api = api_occupancy(lim, block_size=block, registers=regs, dynamic_smem=smem)
    hand = hand_occupancy_on(lim, threads_per_block=block, regs_per_thread=regs, smem_per_block=smem)
    parts = [ctx.expect_int("ex2.api_blocks", api.blocks_per_sm),
             ctx.expect_int("ex2.hand_blocks", hand.blocks_per_sm),
             ctx.expect_num("ex2.api_occupancy_pct", api.occupancy_pct, pct=True,
                            abs_tol=cfg.tolerance.pct_points)]
    min_grid, best = max_potential_block_size(lim, registers=regs, num_sms=sms or 1, dynamic_smem=smem)
    parts.append(ctx.expect_int("ex2.best_block", best))
    if sms:
        parts.append(ctx.expect_int("ex2.min_grid", min_grid))
    out.append(ctx.parts("ex2.answers", parts, f"correct for {gpu}"))

    causes = set()
    if api.blocks_per_sm != hand.blocks_per_sm:
        if lim.reserved_smem_per_block:
            causes.add("reserved_shared_memory")
        if smem % lim.smem_granularity:
            causes.add("allocation_granularity")
        if api.limits["registers"] is not None and api.limits["registers"] < (hand.limits["registers"] or 0):
            causes.add("registers")
    out.append(ctx.parts("ex2.difference_cause",
                         [ctx.expect_choice("ex2.difference_cause", causes or {"none"})]))
    out.append(ctx.manual("ex2.explanation", ["ex2.explanation"]))
    return out


# ---------------------------------------------------------------------------------------
# Ex 3: Nsight Compute's occupancy section
# ---------------------------------------------------------------------------------------
def grade_ex3(ctx: Ctx) -> list[ItemResult]:
    cfg, a = ctx.cfg, ctx.answers
    lim, _, gpu = ctx.device()
    regs = a.get("ex3.registers_per_thread") or a.get("ex2.work_registers") or cfg.ex2.work_registers
    limit_parts, occ_parts = [], []
    if a.get("ex3.registers_per_thread") is None:
        limit_parts.append((False, a.problem("ex3.registers_per_thread")
                            or "ex3.registers_per_thread: no answer"))
    for smem in cfg.ex3.runs:
        run = f"ex3.{run_key(smem)}"
        occ = api_occupancy(lim, block_size=cfg.ex3.block_size, registers=regs, dynamic_smem=smem)
        smem_ok = {occ.limits["shared_mem"]}
        # ncu may divide the carveout the driver chose at launch (the smallest that holds
        # all resident blocks); accept that count too.
        config = launch_smem_config(lim, occ)
        if config and occ.smem_per_block:
            smem_ok.add(config // occ.smem_per_block)
        got_smem = a.get(f"{run}.block_limit_shared_mem")
        limit_parts += [
            ctx.expect_int(f"{run}.block_limit_sm", occ.limits["blocks"]),
            ctx.expect_int(f"{run}.block_limit_registers", occ.limits["registers"]),
            (got_smem in smem_ok, a.problem(f"{run}.block_limit_shared_mem")
             or f"{run}.block_limit_shared_mem: {got_smem} is not right"),
            ctx.expect_int(f"{run}.block_limit_warps", occ.limits["warps"]),
            ctx.expect_choice(f"{run}.limiter", set(occ.limiting)),
        ]
        occ_parts.append(ctx.expect_num(f"{run}.theoretical_occupancy_pct", occ.occupancy_pct,
                                        pct=True, abs_tol=cfg.tolerance.pct_points))
        achieved = a.get(f"{run}.achieved_occupancy_pct")
        theo = a.get(f"{run}.theoretical_occupancy_pct")
        if achieved is None:
            occ_parts.append((False, a.problem(f"{run}.achieved_occupancy_pct") or f"{run}: no answer"))
        else:
            ceiling = (theo if theo is not None else occ.occupancy_pct) + cfg.tolerance.pct_points
            occ_parts.append((0 < achieved <= ceiling,
                              f"{run}.achieved_occupancy_pct: {achieved:g} cannot be right: achieved "
                              f"occupancy is above 0 and at most the theoretical"))
    return [ctx.parts("ex3.block_limits", limit_parts, f"block limits match {gpu}"),
            ctx.parts("ex3.occupancy", occ_parts),
            ctx.manual("ex3.explanation", ["ex3.explanation"])]


# ---------------------------------------------------------------------------------------
# Ex 5: reading a Scheduler / Warp State report
# ---------------------------------------------------------------------------------------
def grade_ex5(ctx: Ctx) -> list[ItemResult]:
    r = ctx.cfg.ex5
    per_sm = r.active_per_scheduler * r.schedulers_per_sm
    dominant = max(r.stalls, key=lambda s: r.stalls[s])
    issued_ok = {"yes"} if r.issued_per_scheduler <= r.eligible_per_scheduler else {"no"}
    return [
        ctx.parts("ex5.active_warps", [
            ctx.expect_num("ex5.active_warps_per_scheduler", r.active_per_scheduler),
            ctx.expect_num("ex5.active_warps_per_sm", per_sm)]),
        ctx.parts("ex5.occupancy", [ctx.expect_num("ex5.occupancy_pct",
                                                   100.0 * per_sm / r.max_warps_per_sm, pct=True)]),
        ctx.parts("ex5.eligible_issued", [
            ctx.expect_num("ex5.eligible_warps_per_scheduler", r.eligible_per_scheduler),
            ctx.expect_num("ex5.issued_warps_per_scheduler", r.issued_per_scheduler),
            ctx.expect_choice("ex5.issued_le_eligible", issued_ok)]),
        ctx.parts("ex5.stall_share", [ctx.expect_num(
            "ex5.dominant_stall_share_pct", 100.0 * r.stalls[dominant] / r.cycles_per_issue, pct=True)]),
        ctx.parts("ex5.dominant_stall", [ctx.expect_choice("ex5.dominant_stall", {dominant})]),
        ctx.parts("ex5.memory_level", [ctx.expect_choice(
            "ex5.memory_level", _STALL_MEMORY.get(dominant, set(MEMORY_LEVELS)))]),
        ctx.manual("ex5.reasoning", ["ex5.why_issued_le_eligible", "ex5.no_eligible_meaning",
                                     "ex5.diagnosis"]),
    ]
