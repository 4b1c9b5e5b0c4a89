"""Occupancy against run time for the two Ex 4 sweeps, as one PNG for the feedback.

matplotlib is imported only here and only when a plot is drawn; without it
:func:`plot_sweeps` returns a note instead of a file.
"""
from __future__ import annotations

from pathlib import Path

from grader.occupancy.calculator import KIB
from grader.pyplot import PLOT_LOCK


def sweep_series(api: dict | None, sweep_times: dict | None, program: dict | None,
                 smem_points: list[tuple[int, int]], block_points: list[tuple[int, int]]) -> dict:
    """The numbers behind the plot: per sweep, x values, occupancy (%) from the grader's API
    calls, the grader's times and the program's own times (None where missing)."""
    dev = (api or {}).get("device") or {}
    warp = dev.get("warp_size") or 32
    max_warps = (dev.get("max_threads_per_sm") or 2048) // warp
    rows = {(r.get("block"), r.get("smem")): r.get("blocks") for r in (api or {}).get("occupancy", [])}
    prog = (program or {}).get("ex4") if isinstance(program, dict) else None
    prog = prog if isinstance(prog, dict) else {}

    def series(name: str, points: list[tuple[int, int]], key: str) -> dict:
        times = ((sweep_times or {}).get(name) or {})
        prog_rows = [r for r in (prog.get(f"{name}_sweep") or []) if isinstance(r, dict)]
        out: dict[str, list[float | None]] = {"x": [], "occupancy_pct": [], "grader_ms": [], "program_ms": []}
        for block, smem in points:
            x = smem if key == "smem" else block
            blocks = rows.get((block, smem))
            occ = None if blocks is None else 100.0 * blocks * -(-block // warp) / max_warps
            ms = times.get(x, times.get(str(x)))
            prow = next((r for r in prog_rows if r.get("block") == block and r.get("smem") == smem), {})
            pms = prow.get("time_ms")
            out["x"].append(x)
            out["occupancy_pct"].append(occ)
            out["grader_ms"].append(float(ms) if isinstance(ms, (int, float)) else None)
            out["program_ms"].append(float(pms) if isinstance(pms, (int, float)) and pms > 0 else None)
        return out

    return {"smem": series("smem", smem_points, "smem"), "block": series("block", block_points, "block")}


def plot_sweeps(path: Path, series: dict, title: str = "") -> tuple[Path | None, str]:
    """Draw both sweeps (occupancy on the left axis, run time on the right) into ``path``.
    Returns (the file, "") or (None, why there is no plot)."""
    if not any(v is not None for s in series.values() for v in s["occupancy_pct"] + s["grader_ms"]):
        return None, "no plot: neither occupancy nor run times were measured"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # ImportError, or a broken backend
        return None, f"no plot: matplotlib is not available here ({type(exc).__name__})"
    with PLOT_LOCK:  # pyplot's global state: one figure at a time, whatever thread draws
        try:
            fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
            labels = {"smem": ("dynamic shared memory per block (KiB), block 128", lambda x: x / KIB),
                      "block": ("threads per block, no dynamic shared memory", lambda x: x)}
            for ax, name in zip(axes, ("smem", "block")):
                s = series[name]
                xlabel, conv = labels[name]
                xs = [conv(x) for x in s["x"]]
                occ = [(x, y) for x, y in zip(xs, s["occupancy_pct"]) if y is not None]
                if occ:
                    ax.plot(*zip(*occ), "o-", color="tab:blue", label="theoretical occupancy (API)")
                ax.set_xlabel(xlabel)
                ax.set_ylabel("occupancy (%)", color="tab:blue")
                ax.set_ylim(0, 105)
                if name == "block":
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(xs, [str(int(x)) for x in xs])
                tx = ax.twinx()
                for key, style, label in (("grader_ms", "s-", "run time, grader's re-run"),
                                          ("program_ms", "x--", "run time, your program")):
                    pts = [(x, y) for x, y in zip(xs, s[key]) if y is not None]
                    if pts:
                        tx.plot(*zip(*pts), style, color="tab:red" if key == "grader_ms" else "tab:orange",
                                label=label)
                tx.set_ylabel("time (ms, fastest run)", color="tab:red")
                tx.set_ylim(bottom=0)
                handles = ax.get_legend_handles_labels()[0] + tx.get_legend_handles_labels()[0]
                if handles:
                    ax.legend(handles=handles, loc="lower left", fontsize=8)
                ax.set_title("shared-memory sweep" if name == "smem" else "block-size sweep")
            if title:
                fig.suptitle(title)
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=90)
            plt.close(fig)
        except Exception as exc:  # a plot is feedback only; never fail grading for it
            return None, f"no plot: drawing failed ({type(exc).__name__}: {exc})"
        return path, ""
