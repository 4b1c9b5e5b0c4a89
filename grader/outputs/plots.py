"""Two pictures for the feedback: the ladder (TFLOP/s per stage) and a roofline.

Inputs are plain dicts and lists, so this module does not depend on the GPU code.
matplotlib is imported only when a plot is drawn; each function returns
``(path, "")`` or ``(None, why not)`` and never raises (a plot is never worth a crash).

The roofline's arithmetic intensity is FLOPs per byte moved through **L2**
(``lts__t_bytes.sum``), with FLOPs per **DRAM** byte drawn as a hollow marker when the
DRAM counters are there. L2 is the level that separates the stages: at the profile size
(N = 2048) A, B and C take 50 MB and stay in the H200's 60 MB L2, so every stage reads
about the same compulsory ~34 MB from DRAM and its DRAM intensity says little about the
kernel, while L2 traffic falls 4x from the naive to the 2D kernel.
"""
from __future__ import annotations

import functools
import hashlib
import struct
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from grader.model import NcuValue
from grader.pyplot import BACKGROUND, PLOT_LOCK, pyplot

COLORS = {"fp32": "#4C72B0", "fp16_tensor": "#C44E52"}
LINE_STYLES = ("--", ":", "-.", (0, (5, 1)))

_AHEAD: dict[tuple[str, str], tuple[str, Future]] = {}  # (plot, path) -> (its arguments, the drawing)
AHEAD_KEPT = 16  # drawings kept for their callers, oldest dropped first (a long-lived process grades many)


def drawn_ahead(fn: Callable[..., tuple[str | None, str]]) -> Callable[..., tuple[str | None, str]]:
    """A plot function that :func:`draw_ahead` may have drawn already: called with the same arguments
    (the same file), it returns that drawing's answer instead of drawing again."""

    @functools.wraps(fn)
    def plot(*args: Any, **kwargs: Any) -> tuple[str | None, str]:
        where, what = _call_key(fn.__name__, args, kwargs)
        ahead = _AHEAD.pop(where, None)
        if ahead is not None:
            drawn = ahead[1].result()  # a stale drawing must not overwrite this one after it
            if ahead[0] == what:
                return drawn
        with PLOT_LOCK:
            return plot.draw(*args, **kwargs)  # type: ignore[attr-defined]

    plot.draw = fn  # type: ignore[attr-defined]  # the undecorated drawing, for draw_ahead
    return plot


def draw_ahead(plot: Callable[..., tuple[str | None, str]], *args: Any, **kwargs: Any) -> None:
    """Draw ``plot(*args, **kwargs)`` on the background thread now; the same call later returns it.
    For a plot whose inputs are final before the grading ends (the ladder, once the timings are in)."""
    fn = plot.draw  # type: ignore[attr-defined]

    def draw() -> tuple[str | None, str]:
        with PLOT_LOCK:
            return fn(*args, **kwargs)

    where, what = _call_key(plot.__name__, args, kwargs)
    _AHEAD.pop(where, None)
    _AHEAD[where] = (what, BACKGROUND.submit(draw))
    while len(_AHEAD) > AHEAD_KEPT:  # a drawing nobody asked for (the grading failed after it) is dropped
        del _AHEAD[next(iter(_AHEAD))]


def _call_key(name: str, args: tuple, kwargs: dict) -> tuple[tuple[str, str], str]:
    """((the plot, its file, resolved), the other arguments as text): the same drawing, whichever
    way its folder was written."""
    at = _PATH_ARG[name]
    rest = list(args)
    path = kwargs.get("path") if "path" in kwargs else (rest.pop(at) if len(rest) > at else None)
    others = {k: v for k, v in kwargs.items() if k != "path"}
    return (name, str(Path(path).resolve()) if path is not None else ""), repr((rest, others))


# Each picture a :func:`kept_if_unchanged` plot draws carries the digest of what it was drawn from (the plot, the
# grader's code version and every argument but the file) in a PNG text chunk of this key.
INPUTS_KEY = "grader-inputs"
_PNG = b"\x89PNG\r\n\x1a\n"
_MAX_CHUNKS = 32  # matplotlib writes its text chunks right after IHDR, before the image data
_MAX_TEXT = 4096
_DIGESTS = threading.local()  # {resolved path: digest} of the drawings under way in this thread


def png_text(path: str | Path, key: str) -> str | None:
    """The value of the tEXt chunk ``key`` of the PNG at ``path``, looked for before its image data; None when the
    file is missing, not a PNG or has no such chunk there. Reads a bounded number of small chunks, whatever the file."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != _PNG:
                return None
            for _ in range(_MAX_CHUNKS):
                head = f.read(8)
                if len(head) < 8:
                    return None
                size, kind = struct.unpack(">I4s", head)
                if kind in (b"IDAT", b"IEND") or size > _MAX_TEXT:
                    return None
                data = f.read(size)
                f.seek(4, 1)  # the chunk's CRC
                name, _, value = data.partition(b"\0")
                if kind == b"tEXt" and name == key.encode("latin-1"):
                    return value.decode("latin-1")
    except OSError:
        return None
    return None


def kept_if_unchanged(fn: Callable[..., tuple[str | None, str]]) -> Callable[..., tuple[str | None, str]]:
    """A plot that is not drawn again where its file holds the picture of the same arguments by the same grader (a
    batch run again over the same output folder: its class summary's scores, where no score changed), so the
    process need not import matplotlib at all; every other call draws, and the picture records what it shows."""

    @functools.wraps(fn)
    def plot(*args: Any, **kwargs: Any) -> tuple[str | None, str]:
        from grader import code_version

        (_name, path), what = _call_key(fn.__name__, args, kwargs)
        digest = hashlib.sha256(f"{fn.__name__}\0{code_version()}\0{what}".encode()).hexdigest()
        if path and png_text(path, INPUTS_KEY) == digest:
            given = kwargs["path"] if "path" in kwargs else args[_PATH_ARG[fn.__name__]]
            return str(given), ""  # as a drawing returns it
        drawing = getattr(_DIGESTS, "paths", {})
        _DIGESTS.paths = {**drawing, path: digest}
        try:
            return fn(*args, **kwargs)
        finally:
            _DIGESTS.paths = drawing

    return plot


def _no_matplotlib() -> tuple[None, str]:
    return None, "matplotlib is not installed here (pip install matplotlib): plot skipped"


def _saved(plt, fig, path: str | Path) -> tuple[str, str]:
    """Write ``fig`` to ``path`` and close it: a plot function's answer when it drew."""
    fig.tight_layout()
    digest = getattr(_DIGESTS, "paths", {}).get(str(Path(path).resolve()))
    fig.savefig(path, metadata={INPUTS_KEY: digest} if digest else None)
    plt.close(fig)
    return str(path), ""


def _failed(plt, what: str, exc: Exception) -> tuple[None, str]:
    """Close every figure and say why ``what`` was not drawn: a plot function's answer when it failed."""
    plt.close("all")
    return None, f"{what} failed: {type(exc).__name__}: {exc}"


@drawn_ahead
def ladder_png(rows: list[dict], path: str | Path, baselines: list[dict] | None = None,
               peaks: dict[str, float] | None = None, title: str = "") -> tuple[str | None, str]:
    """Bars of TFLOP/s per stage (log scale), baselines and peak ceilings as lines.

    ``rows``: ``{"label", "tflops" (None = not timed), "ceiling": "fp32" | "fp16_tensor"}``.
    ``baselines``: ``{"label", "tflops"}`` (cuBLAS SGEMM, cublasGemmEx).
    ``peaks``: ``{label: TFLOP/s}`` (FP32 CUDA cores, FP16 Tensor Cores).
    """
    plt = pyplot()
    if plt is None:
        return _no_matplotlib()
    try:
        fig, ax = plt.subplots(figsize=(9, 5.2), dpi=110)
        xs = range(len(rows))
        values = [r.get("tflops") or 0 for r in rows]
        colors = [COLORS.get(r.get("ceiling", "fp32"), "#777777") for r in rows]
        known = [v for v in values if v > 0] + [b["tflops"] for b in baselines or [] if b.get("tflops")]
        known += list((peaks or {}).values())
        low = min(known) / 3 if known else 0.1
        timed = [x for x, v in zip(xs, values) if v > 0]
        ax.bar(timed, [values[x] for x in timed], color=[colors[x] for x in timed], edgecolor="black",
               linewidth=0.6)
        for x, v in zip(xs, values):
            ax.text(x, v * 1.08 if v > 0 else low * 1.2, f"{v:.3g}" if v > 0 else "not timed",
                    ha="center", va="bottom", fontsize=9, zorder=4,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        ax.set_yscale("log")
        ax.set_ylim(low, max(known) * 40 if known else 10)  # head room for the legend
        from matplotlib.patches import Patch

        handles = [Patch(color=COLORS["fp32"], label="FP32 CUDA-core stage"),
                   Patch(color=COLORS["fp16_tensor"], label="FP16 Tensor Core stage")]
        lines = [(b["label"], b["tflops"], "#2CA02C") for b in baselines or [] if b.get("tflops")]
        lines += [(f"{label} (peak)", v, "#555555") for label, v in (peaks or {}).items() if v]
        for k, (label, v, color) in enumerate(lines):
            handles.append(ax.axhline(v, color=color, linestyle=LINE_STYLES[k % len(LINE_STYLES)],
                                      linewidth=1.3, label=f"{label}: {v:.3g} TFLOP/s"))
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["label"] for r in rows], rotation=20, ha="right")
        ax.set_ylabel("TFLOP/s (log scale)")
        ax.set_title(title or "The GEMM ladder: speed of each stage")
        ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.95)
        ax.grid(axis="y", which="both", alpha=0.25)
        return _saved(plt, fig, path)
    except Exception as exc:  # noqa: BLE001 - a plot must never stop the grading
        return _failed(plt, "the ladder plot", exc)


def roofline_points(per_stage: Mapping[str, Mapping[str, NcuValue]], n: int) -> list[dict]:
    """Roofline points from ncu metrics: ``{label: metrics}`` at profile size ``n``.

    FLOPs = 2 N^3; time = ``gpu__time_duration.sum`` (ns, as ``--print-units base`` prints it).
    Stages without L2 bytes or a duration are left out.
    """
    points = []
    for label, m in per_stage.items():
        l2, ns = (m or {}).get("lts__t_bytes.sum"), (m or {}).get("gpu__time_duration.sum")
        if not isinstance(l2, (int, float)) or not isinstance(ns, (int, float)) or l2 <= 0 or ns <= 0:
            continue
        dram = sum(v for v in (m.get("dram__bytes_read.sum"), m.get("dram__bytes_write.sum"))
                   if isinstance(v, (int, float)))
        points.append({"label": label, "flops": 2.0 * n**3, "seconds": ns * 1e-9, "l2_bytes": float(l2),
                       "dram_bytes": float(dram) if dram > 0 else None})
    return points


@drawn_ahead
def roofline_png(points: list[dict], peaks: dict[str, float], bandwidth: dict[str, float] | float,
                 path: str | Path, title: str = "") -> tuple[str | None, str]:
    """A log-log roofline: TFLOP/s against FLOPs per byte.

    ``points``: ``{"label", "flops", "seconds" (or "tflops"), "l2_bytes", "dram_bytes" (optional)}``.
    ``peaks``: ``{label: TFLOP/s}`` (horizontal roofs). ``bandwidth``: ``{label: TB/s}``, or one
    number for HBM (diagonal roofs).
    """
    plt = pyplot()
    if plt is None:
        return _no_matplotlib()
    if not points:
        return None, "no stage has the L2-bytes and duration metrics a roofline needs"
    try:
        bws = {"HBM": float(bandwidth)} if isinstance(bandwidth, (int, float)) else dict(bandwidth or {})
        fig, ax = plt.subplots(figsize=(11.5, 5.8), dpi=110)
        xs_all = []
        cmap = plt.get_cmap("viridis")
        for k, p in enumerate(points):
            tflops = p.get("tflops") or p["flops"] / p["seconds"] / 1e12
            x_l2 = p["flops"] / p["l2_bytes"]
            color = cmap(k / max(1, len(points) - 1) * 0.9)
            ax.plot([x_l2], [tflops], "o", color=color, markersize=9, label=p["label"], zorder=3)
            xs_all.append(x_l2)
            if p.get("dram_bytes"):
                x_d = p["flops"] / p["dram_bytes"]
                ax.plot([x_l2, x_d], [tflops, tflops], ":", color=color, linewidth=1, zorder=2)
                ax.plot([x_d], [tflops], "o", markerfacecolor="none", color=color, markersize=9, zorder=3)
                xs_all.append(x_d)
        x_lo, x_hi = min(xs_all) / 4, max(xs_all) * 4
        top = max(peaks.values()) if peaks else 1.0
        for k, (label, peak) in enumerate(peaks.items()):
            ax.axhline(peak, color="#555555", linestyle=LINE_STYLES[k % len(LINE_STYLES)], linewidth=1.2)
            ax.text(x_lo * 1.1, peak * 1.06, f"{label} peak {peak:g} TFLOP/s", fontsize=8, va="bottom")
        for k, (label, bw) in enumerate(bws.items()):
            ridge = top / bw  # FLOP/byte where the diagonal meets the highest roof (TFLOP/s / TB/s)
            xs = [x_lo, min(ridge, x_hi)]
            which = "hollow markers" if label.upper() in ("HBM", "DRAM") else "filled markers"
            ax.plot(xs, [bw * x for x in xs], color="#8C564B", linestyle=LINE_STYLES[k % len(LINE_STYLES)],
                    linewidth=1.2, label=f"{label} roof, {bw:g} TB/s (for the {which})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x_lo, x_hi)
        ys = [p.get("tflops") or p["flops"] / p["seconds"] / 1e12 for p in points]
        ax.set_ylim(min(ys + [top]) / 4, top * 3)
        ax.set_xlabel("arithmetic intensity (FLOP per byte); filled: per L2 byte, hollow: per DRAM byte")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(title or "Roofline (Nsight Compute, one launch per stage)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.95)
        ax.grid(which="both", alpha=0.2)
        return _saved(plt, fig, path)
    except Exception as exc:  # noqa: BLE001 - a plot must never stop the grading
        return _failed(plt, "the roofline plot", exc)


_PATH_ARG = {"ladder_png": 1, "roofline_png": 3, "threshold_histogram_png": 2}  # where each takes its output path


# The what-if report's pictures (grader/instructor/whatif.py): the current rubric in blue, the proposed in red.
WHATIF_COLORS = {"current": COLORS["fp32"], "proposed": COLORS["fp16_tensor"]}


def _bins(values: list[float], lines: list[float], count: int = 20,
          x_range: tuple[float, float] | None = None) -> list[float]:
    known = values + lines + list(x_range or ())
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    pad = (hi - lo) * 0.05
    step = (hi - lo + 2 * pad) / count
    return [lo - pad + k * step for k in range(count + 1)]


@kept_if_unchanged
def threshold_histogram_png(series: dict[str, list[float]], thresholds: dict[str, float | None], path: str | Path,
                            title: str, xlabel: str, counted: str = "measured",
                            x_range: tuple[float, float] | None = None) -> tuple[str | None, str]:
    """The class's measured values of one item as a histogram, one series per rubric ("current", "proposed":
    drawn once when equal; another name is its own legend), with each rubric's threshold as a vertical line
    labelled with how many pass it (``thresholds``: {legend label: value}; the label's first word names the
    rubric). ``x_range``: the axis covers at least it (a score's 0 to its maximum)."""
    plt = pyplot()
    if plt is None:
        return _no_matplotlib()
    with PLOT_LOCK:
        try:
            fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=100)
            values = [v for vs in series.values() for v in vs]
            bins = _bins(values, [v for v in thresholds.values() if v is not None], x_range=x_range)
            names = list(series)
            # Side by side in each bin, so two rubrics' counts are both readable where they agree.
            ax.hist([series[n] for n in names], bins=bins, color=[WHATIF_COLORS.get(n, "#777777") for n in names],
                    alpha=0.85, edgecolor="black", linewidth=0.5,
                    label=[f"{n} rubric: {len(series[n])} {counted}" if n in WHATIF_COLORS
                           else f"{n}: {len(series[n])} {counted}" for n in names])
            for k, (label, v) in enumerate(thresholds.items()):
                if v is None:
                    continue
                color = WHATIF_COLORS.get(label.split()[0], "#555555")
                ax.axvline(v, color=color, linestyle=LINE_STYLES[k % len(LINE_STYLES)], linewidth=2, label=label)
            ax.set_ylim(0, ax.get_ylim()[1] * 1.45)  # head room for the legend
            ax.set_xlabel(xlabel)
            ax.set_ylabel("gradings")
            ax.set_title(title, fontsize=10)
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.legend(fontsize=8, framealpha=0.9, loc="best")
            ax.grid(axis="y", alpha=0.25)
            return _saved(plt, fig, path)
        except Exception as exc:  # noqa: BLE001 - a plot must never stop the report
            return _failed(plt, "the histogram", exc)


def score_histogram_png(series: dict[str, list[float]], max_score: float, path: str | Path,
                        title: str) -> tuple[str | None, str]:
    """Total scores under each rubric ({"current": [...], "proposed": [...]}, or one series named as its legend
    says), on an axis from 0 to ``max_score``."""
    return threshold_histogram_png(series, {}, path, title, f"points (of {max_score:g})", "graded",
                                   x_range=(0.0, max_score)) if series else (None, "no grading to show")
