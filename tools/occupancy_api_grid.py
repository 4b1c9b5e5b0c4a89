"""Compare the occupancy calculator with the real Occupancy API on this machine's GPU.

Run on a GPU machine with CuPy, from the repository root:

    python3 tools/occupancy_api_grid.py [--out DIR]

Compiles a few test kernels with NVRTC at different register caps (so they use
different register counts, some with static shared memory), then over a grid of
block sizes (32..1024, a few not multiples of 32) and dynamic shared-memory sizes
(0 up to the opt-in maximum, with the kernel's limit raised first) asks the driver
``cuOccupancyMaxActiveBlocksPerMultiprocessor`` and the calculator the same
question. A few extra passes check the un-raised 48 KiB limit, carveout
preferences and ``cuOccupancyMaxPotentialBlockSize``. Writes
``DIR/occupancy_grid.json`` (DIR: --out, else $OUT, else .) with device
properties, every row and the agreement rate; prints the rate and the rows that
disagree. Takes well under a minute on an H200.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.occupancy.calculator import api_occupancy, limits_for, max_potential_block_size  # noqa: E402

# CUfunction_attribute values (cuda.h).
ATTR_MAX_DYNAMIC_SHARED = 8
ATTR_PREFERRED_CARVEOUT = 9

SOURCE = r"""
#ifndef LIVE
#define LIVE 8
#endif
#ifndef STATIC_FLOATS
#define STATIC_FLOATS 0
#endif
extern "C" __global__ void probe(float* out, int n, int iters)
{
    extern __shared__ float dyn[];
#if STATIC_FLOATS > 0
    __shared__ float fixed[STATIC_FLOATS];
#endif
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    float v[LIVE];
#pragma unroll
    for (int j = 0; j < LIVE; ++j) v[j] = out[(gid + 131 * j) % n];
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < LIVE; ++j) v[j] = fmaf(v[(j + 1) % LIVE], 0.5f, v[j] * 0.5f);
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < LIVE; ++j) s += v[j];
#if STATIC_FLOATS > 0
    fixed[threadIdx.x % STATIC_FLOATS] = s;
    __syncthreads();
    s += fixed[(threadIdx.x + 1) % STATIC_FLOATS];
#endif
    if (n < 0) dyn[threadIdx.x] = s;  // never true; keeps the dynamic array referenced
    if (gid < n) out[gid] = s;
}
"""

# (live values, -maxrregcount or None, static shared floats): a spread of register counts.
VARIANTS = [
    (4, None, 0), (8, None, 0), (16, None, 0), (24, None, 0), (32, None, 0), (48, None, 0),
    (64, None, 0), (96, None, 0), (96, 72, 0), (96, 128, 0), (128, None, 0), (200, None, 0),
    (16, None, 1024), (48, None, 3000),
]
BLOCKS = [32, 33, 64, 96, 100, 128, 160, 192, 256, 288, 320, 384, 512, 640, 768, 1000, 1024]
SMEM = [0, 1, 127, 1024, 2048, 4096, 6144, 7168, 8192, 12288, 16384, 24576, 32768, 40960, 49152,
        49153, 65536, 81920, 98304, 102400, 131072, 163840, 196608, 200000, 225280]


def device_props(runtime, dev: int) -> dict:
    p = runtime.getDeviceProperties(dev)
    name = p.get("name", b"")
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "cc": f"{p['major']}.{p['minor']}",
        "sm_count": p["multiProcessorCount"],
        "warp_size": p["warpSize"],
        "max_threads_per_sm": p["maxThreadsPerMultiProcessor"],
        "max_blocks_per_sm": p.get("maxBlocksPerMultiProcessor"),
        "regs_per_sm": p["regsPerMultiprocessor"],
        "regs_per_block": p["regsPerBlock"],
        "smem_per_sm": p["sharedMemPerMultiprocessor"],
        "smem_per_block": p["sharedMemPerBlock"],
        "smem_per_block_optin": p.get("sharedMemPerBlockOptin"),
        "reserved_smem_per_block": p.get("reservedSharedMemPerBlock"),
    }


def compare_table(props: dict) -> list[str]:
    """Differences between the device's properties and the calculator's row for its CC."""
    lim = limits_for(props["cc"])
    want = {"max_threads_per_sm": lim.max_threads_per_sm, "max_blocks_per_sm": lim.max_blocks_per_sm,
            "regs_per_sm": lim.regs_per_sm, "regs_per_block": lim.regs_per_block,
            "smem_per_sm": lim.smem_per_sm, "smem_per_block": lim.smem_per_block,
            "smem_per_block_optin": lim.smem_per_block_optin,
            "reserved_smem_per_block": lim.reserved_smem_per_block, "warp_size": lim.warp_size}
    return [f"{k}: device {props.get(k)} vs table {v}" for k, v in want.items()
            if props.get(k) is not None and props.get(k) != v]


def set_attribute(driver, kern, attr: int, value: int) -> None:
    """cuFuncSetAttribute through CuPy's driver module, else RawKernel's property."""
    if hasattr(driver, "funcSetAttribute"):
        driver.funcSetAttribute(kern.kernel.ptr, attr, value)
    elif attr == ATTR_MAX_DYNAMIC_SHARED:
        kern.max_dynamic_shared_size_bytes = value
    else:
        kern.preferred_shared_memory_carveout = value


def summarise(rows: list[dict]) -> dict:
    agree = sum(1 for r in rows if r["api_blocks"] == r["calc_blocks"])
    return {"rows": len(rows), "agree": agree, "rate": agree / len(rows) if rows else None}


def run(out_dir: Path) -> int:
    import cupy
    from cupy.cuda import driver, runtime

    t0 = time.time()
    dev = runtime.getDevice()
    props = device_props(runtime, dev)
    lim = limits_for(props["cc"])
    rows, extra, potential, kernels, errors = [], [], [], [], []

    for live, cap, static_floats in VARIANTS:
        opts = [f"-DLIVE={live}", f"-DSTATIC_FLOATS={static_floats}"]  # CuPy adds the arch
        if cap:
            opts.append(f"-maxrregcount={cap}")
        kern = cupy.RawModule(code=SOURCE, options=tuple(opts)).get_function("probe")
        attrs = kern.attributes
        regs, static = int(attrs["num_regs"]), int(attrs["shared_size_bytes"])
        fptr = kern.kernel.ptr
        kernels.append({"live": live, "cap": cap, "registers": regs, "static_smem": static,
                        "max_threads_per_block": int(attrs["max_threads_per_block"]),
                        "local_bytes": int(attrs["local_size_bytes"])})

        def ask(block: int, smem: int, fptr: int = fptr) -> int:
            try:
                return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(fptr, block, smem))
            except Exception:  # the driver refuses a launch that cannot fit at all
                return -1

        # Pass 1: default limit (48 KiB less static); sizes above it must give 0 blocks.
        default_max = lim.smem_per_block - static
        for block in (32, 128, 1024):
            for smem in (0, 12288, default_max, default_max + 1, 65536):
                calc = api_occupancy(lim, block_size=block, registers=regs, dynamic_smem=smem,
                                     static_smem=static)
                extra.append({"pass": "default_limit", "registers": regs, "static_smem": static,
                              "block": block, "smem": smem, "api_blocks": max(ask(block, smem), 0),
                              "calc_blocks": calc.blocks_per_sm})

        # Pass 2: the limit raised to the opt-in maximum, the full grid.
        max_dyn = lim.smem_per_block_optin - static
        set_attribute(driver, kern, ATTR_MAX_DYNAMIC_SHARED, max_dyn)
        for block in BLOCKS:
            for smem in SMEM:
                if smem > max_dyn:
                    continue
                calc = api_occupancy(lim, block_size=block, registers=regs, dynamic_smem=smem,
                                     static_smem=static, max_dynamic_smem=max_dyn)
                rows.append({"registers": regs, "static_smem": static, "block": block, "smem": smem,
                             "api_blocks": max(ask(block, smem), 0),
                             "calc_blocks": calc.blocks_per_sm,
                             "calc_limiting": list(calc.limiting)})

        # Pass 3: the suggested block size (only for the first few kernels).
        if len(potential) < 12 and hasattr(driver, "occupancyMaxPotentialBlockSize"):
            for smem in (0, 12288):
                try:
                    min_grid, best = driver.occupancyMaxPotentialBlockSize(fptr, smem, 0)
                except Exception as exc:
                    potential.append({"registers": regs, "error": str(exc)})
                    break
                c_grid, c_best = max_potential_block_size(
                    lim, registers=regs, num_sms=props["sm_count"], dynamic_smem=smem,
                    static_smem=static, max_dynamic_smem=max_dyn,
                    kernel_max_threads=int(attrs["max_threads_per_block"]))
                potential.append({"registers": regs, "smem": smem, "api": [min_grid, best],
                                  "calc": [c_grid, c_best]})

        # Pass 4: carveout preferences on a light kernel.
        if regs <= 32 and static == 0 and not any(r["pass"] == "carveout" for r in extra):
            try:
                for pct in (0, 25, 50, 100):
                    set_attribute(driver, kern, ATTR_PREFERRED_CARVEOUT, pct)
                    for block, smem in ((128, 0), (128, 8192), (32, 12288), (256, 32768)):
                        calc = api_occupancy(lim, block_size=block, registers=regs,
                                             dynamic_smem=smem, max_dynamic_smem=max_dyn,
                                             carveout_pct=pct)
                        extra.append({"pass": "carveout", "carveout_pct": pct, "registers": regs,
                                      "block": block, "smem": smem,
                                      "api_blocks": max(ask(block, smem), 0),
                                      "calc_blocks": calc.blocks_per_sm})
                set_attribute(driver, kern, ATTR_PREFERRED_CARVEOUT, -1)
            except Exception as exc:  # an older CuPy without the setter: record and go on
                errors.append(f"carveout pass: {type(exc).__name__}: {exc}")

    result = {
        "device": props, "table_differences": compare_table(props),
        "cupy": cupy.__version__, "driver_version": runtime.driverGetVersion(),
        "runtime_version": runtime.runtimeGetVersion(), "kernels": kernels,
        "grid": summarise(rows), "extra": summarise(extra),
        "potential_agree": sum(1 for p in potential if p.get("api") == p.get("calc")),
        "potential_total": len(potential), "rows": rows, "extra_rows": extra,
        "potential": potential, "errors": errors, "seconds": round(time.time() - t0, 2),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "occupancy_grid.json").write_text(json.dumps(result, indent=1))

    print(f"device: {props['name']} (cc {props['cc']}), {props['sm_count']} SMs")
    for d in result["table_differences"]:
        print(f"  table differs: {d}")
    print("kernels (registers, static smem):",
          ", ".join(f"{k['registers']}/{k['static_smem']}" for k in kernels))
    for label, s in (("grid", result["grid"]), ("extra passes", result["extra"])):
        print(f"{label}: {s['agree']}/{s['rows']} agree ({100 * (s['rate'] or 0):.2f}%)")
    print(f"potential block size: {result['potential_agree']}/{result['potential_total']} agree")
    for e in errors:
        print(f"  error: {e}")
    bad = [r for r in rows + extra if r["api_blocks"] != r["calc_blocks"]]
    bad += [p for p in potential if p.get("api") != p.get("calc")]
    for r in bad[:40]:
        print("  disagree:", json.dumps({k: v for k, v in r.items() if k != "calc_limiting"}))
    if len(bad) > 40:
        print(f"  ... {len(bad) - 40} more in occupancy_grid.json")
    print(f"wrote {out_dir / 'occupancy_grid.json'} in {result['seconds']} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    return run(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
