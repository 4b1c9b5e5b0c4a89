"""Per-stage bottleneck diagnosis from Nsight Compute metrics (pure).

It follows the measure -> diagnose -> fix method of the course: first the Speed-of-Light
decision matrix (SM throughput % against memory throughput %), then the unit that
saturates (L1/shared, L2, DRAM; the FMA or tensor pipe) and the warps' dominant stall
reason, and finally the one or two metrics that justify the next step.

Speed-of-Light matrix (``HIGH`` = 60 % of peak):

    SM %   memory %   cell
    high   low        compute-bound
    low    high       memory-bound
    low    low        latency-bound (neither unit is busy: warps wait)
    high   high       near the roofline

"High SM %" can come from load/store instructions rather than math, so the verdict is
refined with the pipe that does the GEMM's work (FMA for FP32, tensor for FP16): a kernel
in the "near the roofline" cell whose FMA pipe is 30 % busy is limited by memory
instructions, not by arithmetic.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from grader.model import NcuValue

SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
L1 = "l1tex__throughput.avg.pct_of_peak_sustained_active"
L2 = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
FMA = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
FFMA = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
SHARED_LD = "smsp__inst_executed_op_shared_ld.sum"
GLOBAL_LD_REQ = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
SECTORS_PER_REQ = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"
WARPS_ACTIVE = "sm__warps_active.avg.pct_of_peak_sustained_active"
ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
WAVES = "launch__waves_per_multiprocessor"
L2_BYTES = "lts__t_bytes.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"

# Stall reasons: smsp__warp_issue_stalled_<reason>_per_warp_active.pct, with what each means.
STALL_MEANING = {
    "long_scoreboard": "waiting for data from global memory (L1TEX/L2)",
    "mio_throttle": "the shared-memory (MIO) instruction queue is full",
    "barrier": "waiting at __syncthreads()",
    "short_scoreboard": "waiting for shared-memory results",
    "lg_throttle": "the global load/store queue is full",
    "math_pipe_throttle": "the math pipe is busy (the kernel is limited by arithmetic)",
    "wait": "fixed-latency dependencies between consecutive instructions",
    "not_selected": "ready but another warp issued (plenty of ready warps)",
}
STALLS = {r: f"smsp__warp_issue_stalled_{r}_per_warp_active.pct" for r in STALL_MEANING}

# Everything diagnose() and the roofline plot read; grader.profile.ncu.metrics_needed adds these.
METRICS = (SM, MEM, L1, L2, DRAM, FMA, TENSOR, FFMA, SHARED_LD, GLOBAL_LD_REQ, SECTORS_PER_REQ,
           WARPS_ACTIVE, ISSUE_ACTIVE, WAVES, L2_BYTES, DRAM_READ, DRAM_WRITE, DURATION,
           *STALLS.values())

HIGH = 60.0  # % of peak that counts as "high" in the Speed-of-Light matrix


@dataclass
class Evidence:
    label: str
    value: float
    text: str  # the value as shown, with its unit


@dataclass
class Diagnosis:
    stage: str
    cell: str  # the Speed-of-Light matrix cell, or "unknown"
    verdict: str  # refined: what limits the kernel
    next_step: str
    evidence: list[Evidence] = field(default_factory=list)  # the 1-2 metrics that justify next_step
    details: list[str] = field(default_factory=list)  # SOL numbers, busiest unit, top stall
    missing: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"**{self.verdict}** (Speed-of-Light cell: {self.cell})"]
        lines += [f"- {d}" for d in self.details]
        if self.evidence:
            lines.append("- evidence: " + "; ".join(f"{e.label} = {e.text}" for e in self.evidence))
        lines.append(f"- next step: {self.next_step}")
        return "\n".join(lines)


def _num(m: Mapping[str, NcuValue], key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pct(x: float) -> str:
    return f"{x:.2f}%" if abs(x) < 1 else f"{x:.1f}%"


def cell(sm: float | None, mem: float | None) -> str:
    if sm is None or mem is None:
        return "unknown"
    if sm >= HIGH and mem >= HIGH:
        return "near the roofline"
    if sm >= HIGH:
        return "compute-bound"
    if mem >= HIGH:
        return "memory-bound"
    return "latency-bound"


def top_stall(m: Mapping[str, NcuValue]) -> tuple[str, float] | None:
    found = [(r, v) for r, k in STALLS.items() if (v := _num(m, k)) is not None]
    return max(found, key=lambda rv: rv[1]) if found else None


def busiest_memory(m: Mapping[str, NcuValue]) -> tuple[str, float] | None:
    """The busiest of L1/shared, L2 and DRAM; None unless the on-chip levels were measured."""
    if _num(m, L1) is None and _num(m, L2) is None:
        return None
    levels = [(name, v) for name, key in (("L1/shared", L1), ("L2", L2), ("DRAM", DRAM))
              if (v := _num(m, key)) is not None]
    return max(levels, key=lambda nv: nv[1])


def diagnose(metrics: Mapping[str, NcuValue] | None, stage: str = "") -> Diagnosis:
    """Classify one kernel from its ncu metrics; see the module docstring."""
    m = metrics or {}
    sm, mem, dram = _num(m, SM), _num(m, MEM), _num(m, DRAM)
    fma, tensor, ffma = _num(m, FMA), _num(m, TENSOR), _num(m, FFMA)
    missing = [k for k in (SM, MEM, FMA, TENSOR, FFMA) if _num(m, k) is None]
    d = Diagnosis(stage, cell(sm, mem), "", "", missing=missing)
    if sm is not None and mem is not None:
        d.details.append(f"Speed of Light: SM {_pct(sm)}, memory {_pct(mem)} of peak -> {d.cell}")
    unit = busiest_memory(m)
    if unit:
        d.details.append(f"busiest memory level: {unit[0]} at {_pct(unit[1])}"
                         + (f" (DRAM {_pct(dram)})" if dram is not None and unit[0] != "DRAM" else ""))
    elif dram is not None and mem is not None and mem >= HIGH and dram < HIGH / 2:
        d.details.append(f"DRAM is only {_pct(dram)} busy: the memory traffic is served on chip (L1/shared, L2)")
    warps, waves = _num(m, WARPS_ACTIVE), _num(m, WAVES)
    issue = _num(m, ISSUE_ACTIVE)
    if d.cell == "latency-bound" and warps is not None:
        d.details.append(f"warps active: {_pct(warps)} of the SM's maximum"
                         + (f"; the grid is {waves:.2f} waves of blocks" if waves is not None else "")
                         + (f"; issue slots used {_pct(issue)}" if issue is not None else ""))
    pipes = ", ".join(f"{n} pipe {_pct(v)}" for n, v in (("FMA", fma), ("tensor", tensor)) if v is not None)
    if pipes:
        d.details.append(pipes)
    stall = top_stall(m)
    if stall:
        d.details.append(f"top stall: {stall[0].replace('_', ' ')} ({_pct(stall[1])} of active warp cycles): "
                         f"{STALL_MEANING[stall[0]]}")
    if d.cell == "near the roofline" and fma is not None and tensor is not None and max(fma, tensor) < HIGH:
        d.details.append(f"both Speed-of-Light numbers are high, but no math pipe is (FMA {_pct(fma)}, tensor "
                         f"{_pct(tensor)}): the SM is busy with memory instructions, not arithmetic")
    if ffma is None and tensor is None:
        d.verdict, d.next_step = "not enough metrics to diagnose", "profile with the metrics in grader/profile/diagnosis.py"
        return d
    if (ffma == 0 and tensor is not None) or (tensor is not None and tensor >= 5.0):
        _tensor_kernel(d, m, tensor or 0.0, stall)
    else:
        _fp32_kernel(d, m, ffma or 0.0, fma, stall)
    return d


def _stall_evidence(stall) -> list[Evidence]:
    if not stall:
        return []
    return [Evidence(f"{stall[0].replace('_', ' ')} stall", stall[1], f"{_pct(stall[1])} of active warp cycles")]


def _tensor_kernel(d: Diagnosis, m: Mapping[str, NcuValue], tensor: float, stall) -> None:
    warps = _num(m, WARPS_ACTIVE)
    pipe = [Evidence("tensor pipe active", tensor, _pct(tensor))]
    if tensor >= HIGH:
        d.verdict = "compute-bound on the Tensor Cores"
        d.next_step = ("the tensor pipe is close to its peak for this instruction mix; what remains is the gap to "
                       "cublasGemmEx (Hopper's wgmma/TMA path)")
        d.evidence = pipe
    elif d.cell == "memory-bound":
        unit = busiest_memory(m)
        d.verdict = "memory-bound: the Tensor Cores wait for operands"
        d.next_step = ("fetch fewer bytes per mma: larger block and warp tiles staged through shared memory, "
                       "wider (16-byte) copies")
        d.evidence = pipe + ([Evidence(f"{unit[0]} throughput", unit[1], _pct(unit[1]))] if unit else [])
    else:
        d.verdict = "latency-bound: the Tensor Cores are mostly idle while warps wait"
        d.next_step = ("keep more work in flight: deeper cp.async pipelines, more warps per SM (fewer registers "
                       "or less shared memory per block), or more blocks than SMs")
        d.evidence = pipe + (_stall_evidence(stall) if stall else
                             [Evidence("warps active", warps, _pct(warps))] if warps is not None else [])


def _fp32_kernel(d: Diagnosis, m: Mapping[str, NcuValue], ffma: float, fma: float | None, stall) -> None:
    warp_ffma = ffma / 32 if ffma else None
    req, shld, spr = _num(m, GLOBAL_LD_REQ), _num(m, SHARED_LD), _num(m, SECTORS_PER_REQ)
    req_per = req / warp_ffma if req is not None and warp_ffma else None
    shld_per = shld / warp_ffma if shld is not None and warp_ffma else None
    dram, mem = _num(m, DRAM), _num(m, MEM)
    if dram is not None and dram >= HIGH:
        d.verdict = "memory-bound on DRAM (HBM)"
        d.next_step = ("reuse each loaded value on chip (tiles in shared memory, then registers) so fewer "
                       "bytes reach DRAM")
        d.evidence = [Evidence("DRAM throughput", dram, _pct(dram))]
    elif req_per is not None and req_per >= 0.5 and spr is not None and spr > 4.5:
        d.verdict = "memory-bound: global loads are not coalesced"
        d.next_step = ("coalesce: let threadIdx.x (consecutive lanes) select consecutive columns so that a warp's "
                       "load is one 128-byte segment (4 sectors) (stage 2)")
        d.evidence = [Evidence("sectors per global-load request", spr, f"{spr:.2f} (4 is ideal for 4-byte loads)"),
                      Evidence("global-load requests per warp FFMA", req_per, f"{req_per:.2f}")]
    elif req_per is not None and req_per >= 0.5:
        d.verdict = "memory-bound: every multiply-add loads its operands from global memory"
        d.next_step = ("reuse: stage tiles of A and B in shared memory so each global load feeds TILE "
                       "multiply-adds (stage 3)")
        d.evidence = [Evidence("global-load requests per warp FFMA", req_per, f"{req_per:.2f}")]
        if mem is not None:
            d.evidence.append(Evidence("memory throughput", mem, _pct(mem)))
    elif shld_per is not None and shld_per >= 0.75:
        d.verdict = "bound by shared-memory loads: more shared loads than multiply-adds"
        d.next_step = ("register blocking: let each thread compute several outputs and reuse a value loaded "
                       "from shared memory from a register (stage 4a)")
        d.evidence = [Evidence("shared loads per warp FFMA", shld_per, f"{shld_per:.3g}")]
        d.evidence += _stall_evidence(stall) if stall and stall[0] in ("mio_throttle", "short_scoreboard") else []
    elif fma is not None and fma >= HIGH:
        d.verdict = "compute-bound on the FP32 FMA pipe"
        d.next_step = ("the FP32 CUDA cores are close to saturation: more speed needs another unit, the Tensor "
                       "Cores (stage 5)")
        d.evidence = [Evidence("FMA pipe active", fma, _pct(fma))]
        if shld_per is not None:
            d.evidence.append(Evidence("shared loads per warp FFMA", shld_per, f"{shld_per:.3g}"))
    elif shld_per is not None and shld_per >= 0.15:
        d.verdict = "still limited by shared-memory traffic; the FMA pipe is not yet busy"
        d.next_step = ("2D register blocking: each thread computes a TM x TN tile from TM + TN values in registers "
                       "(an outer product), read with wide shared loads (stage 4b)")
        d.evidence = [Evidence("shared loads per warp FFMA", shld_per, f"{shld_per:.3g}")]
        if fma is not None:
            d.evidence.append(Evidence("FMA pipe active", fma, _pct(fma)))
    else:
        _by_cell(d, m, fma, stall)


def _by_cell(d: Diagnosis, m: Mapping[str, NcuValue], fma: float | None, stall) -> None:
    if d.cell == "latency-bound":
        d.verdict = "latency-bound: neither the SM nor memory is busy"
        d.next_step = "give each warp more independent work (ILP) or keep more warps resident; see the top stall"
        d.evidence = _stall_evidence(stall)
    elif d.cell == "memory-bound":
        unit = busiest_memory(m)
        d.verdict = "memory-bound" + (f" on {unit[0]}" if unit else "")
        d.next_step = "move fewer bytes per multiply-add through the busiest level"
        d.evidence = [Evidence(f"{unit[0]} throughput", unit[1], _pct(unit[1]))] if unit else []
    else:
        d.verdict = "compute-bound, but not on the FMA pipe"
        d.next_step = "cut the instructions around the multiply-adds (address arithmetic, loads)"
        d.evidence = [Evidence("FMA pipe active", fma, _pct(fma))] if fma is not None else []


def diagnose_all(per_stage: Mapping[str, Mapping[str, NcuValue] | None]) -> dict[str, Diagnosis]:
    """{stage id: metrics or None} -> {stage id: Diagnosis} for the stages that have metrics."""
    return {sid: diagnose(m, sid) for sid, m in per_stage.items() if m}
