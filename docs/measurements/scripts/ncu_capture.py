"""Capture real Nsight Compute output for the solutions (fixtures and calibration leads).

Run on a GPU machine: python3 docs/measurements/scripts/ncu_capture.py OUTDIR [N]
"""
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from grader.compile import toolchain  # noqa: E402
from grader.compile.stage import compile_stage  # noqa: E402
from grader.rubric.load import load_rubric  # noqa: E402
from grader.sandbox.launch import child_command  # noqa: E402

METRICS = [
    "gpu__time_duration.sum",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "dram__bytes_read.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_bytes.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__inst_executed_op_shared_ld.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
]


def main() -> int:
    out = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    out.mkdir(parents=True, exist_ok=True)
    rubric = load_rubric(ROOT / "rubric.yaml")
    nvcc = toolchain.find_nvcc()
    ncu = toolchain.find_ncu()
    stages = []
    for st in rubric.stages:
        work = Path("/tmp/ncu_build") / st.id
        work.mkdir(parents=True, exist_ok=True)
        c = compile_stage(st, ROOT / "solutions", work, nvcc, ["-arch=sm_90a"], rubric, [n])
        if not c.ok:
            print("compile failed", st.id, c.problem[:300])
            continue
        stages.append({"id": st.id, "cubin": c.cubin, "kernel": st.kernel, "inputs": st.inputs,
                       "launch": {"block": list(c.launch.block), "tile": list(c.launch.tile), "smem": c.launch.smem}})
    spec = out / "profile_spec.json"
    spec.write_text(json.dumps({"n": n, "seed": 1234, "stages": stages}))
    kernels = "|".join(s["kernel"] for s in stages)
    for label, metrics in (("full", METRICS), ("safe", METRICS[:16])):
        cmd = [ncu.path, "--csv", "--page", "raw", "--clock-control", "none", "--metrics", ",".join(metrics),
               "-k", f"regex:^({kernels})$", *child_command("profile", spec, out / "profile_result.json")]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
        dt = time.time() - t0
        (out / f"ncu_raw_{label}_n{n}.csv").write_text(proc.stdout)
        (out / f"ncu_raw_{label}_n{n}.stderr.txt").write_text(proc.stderr)
        print(f"ncu {label}: rc={proc.returncode} {dt:.1f}s stdout {len(proc.stdout)} B")
        print(proc.stdout[-1500:])
        print(proc.stderr[-800:])
        if proc.returncode == 0:
            break
    # the Occupancy / scheduler sections in human-readable form, for the occupancy exercises
    cmd = [ncu.path, "--clock-control", "none", "--section", "Occupancy", "--section", "SchedulerStats",
           "--section", "WarpStateStats", "--section", "SpeedOfLight", "-k", "regex:^mmTiled$",
           *child_command("profile", spec, out / "profile_result.json")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    (out / "ncu_sections_tiled.txt").write_text(proc.stdout + proc.stderr)
    print("sections rc", proc.returncode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
