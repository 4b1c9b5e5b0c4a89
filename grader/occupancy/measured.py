"""The items that need a compiler, a GPU or the program's source: host check, Ex 4, Ex 6.

Ex 4 compares the program's sweep output with the grader's own API results and
the student's conclusions with the grader's re-run of the sweeps. Ex 6 compares
the student's ptxas numbers with the grader's own compilation of ``heavy`` at
each register cap, and the fastest-cap claim with the grader's timings.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from grader.model import ItemResult, Measured, Status
from grader.occupancy.answers import cap_key
from grader.occupancy.calculator import KIB, api_occupancy
from grader.occupancy.grading import Ctx, api_lookup, argmax_set, as_number, near_min, program_value
from grader.occupancy.hostcheck import check_host_source


def grade_host(ctx: Ctx) -> list[ItemResult]:
    item, prog = "host.checked_calls", ctx.cfg.program
    src = ctx.meas.program_source
    if src is None:
        return [ctx.result(item, Status.FAILED, 0.0, f"{ctx.cfg.program_file} is not in the submission")]
    report = check_host_source(src, macros=prog.check_macros, launch_checks=prog.launch_check_calls,
                               exempt=prog.exempt_calls)
    missing = [c for c in prog.required_calls if c not in report.names]
    values = Measured(calls=report.calls, launches=report.launches, unchecked_lines=[u.line for u in report.unchecked])
    if report.ok and not missing:
        return [ctx.result(item, Status.PASSED, 1.0, report.summary(), values)]
    msgs = [] if report.ok else [report.summary()]
    if missing:
        msgs.append("the program does not call " + ", ".join(missing) + " yet")
    return [ctx.result(item, Status.FAILED, 0.0, "\n".join(msgs), values)]


# ---------------------------------------------------------------------------------------
# Ex 4: the sweeps
# ---------------------------------------------------------------------------------------
def _sweep_rows(sec: dict, name: str) -> list[dict]:
    rows = sec.get(name)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _label(row: dict) -> str:
    smem = row.get("smem")
    smem_n = as_number(smem)  # None for text or a huge integer (int / int would overflow to float)
    size = f"{smem_n / KIB:g} KiB" if smem_n is not None else program_value(smem)
    return f"block {program_value(row.get('block'))}, {size}"


def _work(row: dict) -> int | None:
    """grid x block x iters of one sweep point, or None when a value is missing."""
    vals = [v for k in ("grid", "block", "iters")
            if isinstance(v := row.get(k), int) and as_number(v) is not None]  # as_number: not a bool, not huge
    return vals[0] * vals[1] * vals[2] if len(vals) == 3 else None


def _occupancy_parts(api: dict, rows: list[dict], expected: list[tuple[int, int]],
                     label: Callable[[int, int], str]) -> list[tuple[bool, str]]:
    """(correct, message) per sweep point: the program's blocks and occupancy against the grader's ``api``."""
    dev = api["device"]
    max_warps = dev["max_threads_per_sm"] // dev["warp_size"]
    parts = []
    for block, smem in expected:
        row = next((r for r in rows if r.get("block") == block and r.get("smem") == smem), None)
        if row is None:
            parts.append((False, f"no sweep point for {label(block, smem)}"))
            continue
        want = api_lookup(api, block, smem)
        want_occ = (want or 0) * math.ceil(block / dev["warp_size"]) / max_warps
        got = row.get("occupancy")
        got_n = as_number(got)  # None for text, a list, 1e400: math.isclose would raise on a huge int
        ok = (row.get("blocks") == want and want is not None
              and got_n is not None and math.isclose(got_n, want_occ, abs_tol=1e-4))
        parts.append((ok, f"{label(block, smem)}: the program printed {program_value(row.get('blocks'))} blocks, "
                          f"occupancy {program_value(got)}; the API gives {want} blocks, {want_occ:.4f}"))
    return parts


def grade_ex4(ctx: Ctx) -> list[ItemResult]:
    e = ctx.cfg.ex4
    smem_pts = [(e.smem_block_size, s) for s in e.smem_points]
    block_pts = [(b, e.block_smem) for b in e.block_points]
    out = []

    found = ctx.program_section("ex4.smem_sweep_occupancy", "ex4")
    if isinstance(found, ItemResult):
        out += [found] + [ctx.same_as(i, found) for i in ("ex4.block_sweep_occupancy", "ex4.equal_work")]
    else:
        smem_rows, block_rows = _sweep_rows(found.data, "smem_sweep"), _sweep_rows(found.data, "block_sweep")
        out.append(ctx.parts("ex4.smem_sweep_occupancy", _occupancy_parts(
            found.api, smem_rows, smem_pts, lambda b, s: f"{s / KIB:g} KiB"),
            "occupancy column matches the API", reads_answers=False))
        out.append(ctx.parts("ex4.block_sweep_occupancy", _occupancy_parts(
            found.api, block_rows, block_pts, lambda b, s: f"block {b}"),
            "occupancy column matches the API", reads_answers=False))
        totals = [(_label(r), _work(r)) for r in smem_rows + block_rows]
        distinct = {t for _, t in totals}
        common = next(iter(distinct)) if len(distinct) == 1 else None  # None also when a point has no total
        ok = common is not None and common > 0
        msg = (f"grid x block x iters = {common:,} at every point" if ok else
               "grid x block x iters differs between points (or is missing): " +
               ", ".join(f"{label} -> {t}" for label, t in totals))
        out.append(ctx.result("ex4.equal_work", Status.PASSED if ok else Status.FAILED, 1.0 if ok else 0.0, msg))

    out += _conclusions(ctx, smem_pts, block_pts)
    out.append(ctx.manual("ex4.discussion", ["ex4.discussion"]))
    return out


def _conclusion_parts(ctx: Ctx, base: str, peak_field: str, fastest_field: str,
                      occ: dict, times: dict) -> list[tuple[bool, str]]:
    tie = ctx.cfg.tolerance.time_tie_pct
    peaks, fastest = argmax_set(occ), near_min(times, tie)
    fmt = (lambda b: f"{b / KIB:g} KiB") if peak_field.endswith("_kib") else str
    parts = [ctx.expect_choice(f"{base}.{peak_field}", peaks, fmt=fmt),
             ctx.expect_choice(f"{base}.{fastest_field}", fastest,
                               f"the grader's run: within {tie:g}% of the fastest", fmt=fmt)]
    picks = ctx.answers.get(f"{base}.{fastest_field}")
    if not picks or not set(picks) <= fastest:
        best = min((v, k) for k, v in times.items() if k in fastest)[1] if fastest else None
        picks = (best,)
    same = "yes" if all(p in peaks for p in picks) else "no"
    parts.append(ctx.expect_choice(f"{base}.same_point", {same}))
    return parts


def _conclusions(ctx: Ctx, smem_pts, block_pts) -> list[ItemResult]:
    m = ctx.meas
    items = ("ex4.smem_conclusion", "ex4.block_conclusion")
    if not m.device_available:
        return [ctx.gap(i, m.no_device) for i in items]
    if m.sweep_times is None or m.api is None:
        part = "api" if m.api is None else "sweeps"
        return [ctx.missing(i, part, "not evaluated: the grader's re-run of the sweeps is missing")
                for i in items]
    api = m.api
    smem_times = {int(k): float(v) for k, v in (m.sweep_times.get("smem") or {}).items()}
    block_times = {int(k): float(v) for k, v in (m.sweep_times.get("block") or {}).items()}
    smem_occ = {s: (api_lookup(api, b, s) or 0) * b for b, s in smem_pts}
    block_occ = {b: (api_lookup(api, b, s) or 0) * b for b, s in block_pts}
    out = [ctx.parts("ex4.smem_conclusion", _conclusion_parts(
        ctx, "ex4.smem_sweep", "peak_occupancy_kib", "fastest_kib", smem_occ, smem_times),
        values=Measured(times_ms={str(k): v for k, v in smem_times.items()}))]
    parts = _conclusion_parts(ctx, "ex4.block_sweep", "peak_occupancy_block", "fastest_block",
                              block_occ, block_times)
    parts.append(ctx.expect_int("ex4.block_sweep.api_best_block", api["potential"]["best_block"]))
    out.append(ctx.parts("ex4.block_conclusion", parts, values=Measured(times_ms={str(k): v for k, v in block_times.items()})))
    return out


# ---------------------------------------------------------------------------------------
# Ex 6: register caps
# ---------------------------------------------------------------------------------------
def _ptxas_missing(ctx: Ctx, items: tuple[str, ...]) -> list[ItemResult] | None:
    m = ctx.meas
    if m.ptxas is not None:
        return None
    if m.ptxas_problem:
        return [ctx.result(i, Status.FAILED, 0.0, m.ptxas_problem) for i in items]
    return [ctx.not_evaluated(i, m.no_compiler_reason) for i in items]


def grade_ex6(ctx: Ctx) -> list[ItemResult]:
    cfg, a, m = ctx.cfg, ctx.answers, ctx.meas
    caps = cfg.ex6.register_caps
    out = []
    missing = _ptxas_missing(ctx, ("ex6.ptxas_match", "ex6.register_pressure"))
    ptxas = {int(k): v for k, v in (m.ptxas or {}).items()}
    if missing:
        out += missing
    else:
        parts = []
        for cap in caps:
            res, base = ptxas.get(cap), f"ex6.{cap_key(cap)}"
            if res is None:
                parts.append((False, f"cap {cap}: the grader has no ptxas report"))
                continue
            for field, actual in (("registers", res.registers), ("spill_stores_bytes", res.spill_stores),
                                  ("spill_loads_bytes", res.spill_loads)):
                ok, msg = ctx.expect_int(f"{base}.{field}", actual)
                parts.append((ok, msg and f"{msg}; ptxas reports {actual}"))
        out.append(ctx.parts("ex6.ptxas_match", parts, "matches ptxas at every cap"))
        top, low = ptxas.get(max(caps)), ptxas.get(min(caps))
        need = cfg.ex6.min_registers_uncapped
        checks = [
            (top is not None and (top.registers or 0) >= need and not top.spills,
             f"at -maxrregcount={max(caps)} heavy should use at least {need} registers with no "
             f"spills; ptxas: {top.registers if top else None} registers, "
             f"{top.spill_stores if top else None} B spill stores"),
            (low is not None and low.spills,
             f"at -maxrregcount={min(caps)} heavy should spill; ptxas reports no spills"),
        ]
        good = sum(ok for ok, _ in checks)
        out.append(ctx.result("ex6.register_pressure", Status.PASSED if good == 2 else Status.FAILED, good / 2,
                              "\n".join(msg for ok, msg in checks if not ok)
                              or "heavy shows register pressure"))

    # Theoretical occupancy per cap, from ptxas's registers (or the student's own).
    lim, _, gpu = ctx.device()
    parts, pct_by_cap = [], {}
    for cap in caps:
        base = f"ex6.{cap_key(cap)}"
        regs = getattr(ptxas.get(cap), "registers", None) or a.get(f"{base}.registers")
        if regs is None:
            parts.append((False, a.problem(f"{base}.registers") or f"{base}.registers: no answer"))
            continue
        occ = api_occupancy(lim, block_size=cfg.ex6.block_size, registers=regs)
        pct_by_cap[str(cap)] = occ.occupancy_pct
        parts.append(ctx.expect_num(f"{base}.occupancy_pct", occ.occupancy_pct, pct=True,
                                    abs_tol=cfg.tolerance.pct_points))
    parts.append(ctx.expect_choice("ex6.highest_occupancy_cap", argmax_set(pct_by_cap) or {"?"}))
    out.append(ctx.parts("ex6.occupancy", parts, f"correct for {gpu}"))

    item = "ex6.fastest_claim"
    if not m.device_available:
        out.append(ctx.gap(item, m.no_device))
    elif m.heavy_times_ms is None:
        out.append(ctx.result(item, Status.FAILED, 0.0, m.ptxas_problem) if m.ptxas_problem else
                   ctx.missing(item, "heavy", "not evaluated: the grader's timings of heavy are missing"))
    else:
        times = {str(int(k)): float(v) for k, v in m.heavy_times_ms.items()}
        tie = cfg.tolerance.time_tie_pct
        out.append(ctx.parts(item, [ctx.expect_choice(
            "ex6.fastest_cap", near_min(times, tie), f"the grader's timings: {times}")],
            values=Measured(times_ms=times)))
    out.append(ctx.manual("ex6.explanation", ["ex6.explanation"]))
    return out
