"""The profile feedback: ladder and roofline PNGs, per-stage diagnosis, in markdown and HTML.

Reads a :class:`grader.grading.Grading` (``outcomes[*].stage``, ``.timing``, ``.ncu``,
``.ncu_reason``, ``.profile_n``; ``env.peaks``; ``env.device``), turns it into the plain
inputs of grader/outputs/plots.py and grader/profile/diagnosis.py, and writes into the output folder:
``ladder.png``, ``roofline.png``, ``profile.md`` and ``profile.html`` (both link the PNGs).
"""
from __future__ import annotations

import html
import shutil
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.evidence.rubric import Stage
from grader.grading import Grading, StageOutcome
from grader.outputs.plots import ladder_png, roofline_png, roofline_points
from grader.profile.diagnosis import Diagnosis, diagnose
from grader.rubric.types import BASELINES

# HBM bandwidth (TB/s) by device-name substring, for the roofline's memory roof. Vendor figures.
KNOWN_HBM_TBS = {"H200": 4.8, "H100 SXM": 3.35, "H100 PCIe": 2.0, "H100": 3.35}


@dataclass
class ProfileReport:
    images: dict[str, str | None] = field(default_factory=dict)  # "ladder"/"roofline" -> path or None
    reasons: dict[str, str] = field(default_factory=dict)  # why an image is missing
    diagnoses: dict[str, Diagnosis] = field(default_factory=dict)
    markdown: str = ""
    paths: dict[str, str] = field(default_factory=dict)  # "md"/"html" -> path


def stage_label(stage: Stage) -> str:
    return f"{stage.number} {stage.title}"


def ladder_inputs(grading: Grading) -> tuple[list[dict], list[dict], dict[str, float]]:
    """(rows, baselines, peaks) for plots.ladder_png: timed stages only carry a speed."""
    return ladder_inputs_of(grading.outcomes, grading.env.peaks)


def ladder_plot(outcomes: Mapping[str, StageOutcome], peaks_known: Peaks, out_dir: Path) -> tuple | None:
    """The arguments of the ladder's plots.ladder_png call, or None when no stage was timed. The
    grading draws it ahead from these (grader/pipeline.py) once the timings are final."""
    rows, baselines, peaks = ladder_inputs_of(outcomes, peaks_known)
    if not any(r["tflops"] for r in rows):
        return None
    n_bench = next((o.timing.n for o in outcomes.values() if o.timing), None)
    title = f"The GEMM ladder at N={n_bench}: TFLOP/s per stage" if n_bench else ""
    return rows, Path(out_dir) / "ladder.png", baselines, peaks, title


def ladder_inputs_of(outcomes: Mapping[str, StageOutcome], p: Peaks) -> tuple[list[dict], list[dict], dict[str, float]]:
    rows: list[dict] = []
    base: dict[str, list[float]] = {}
    for o in outcomes.values():
        t = o.timing
        rows.append({"label": stage_label(o.stage), "tflops": t.tflops if t else None, "ceiling": o.stage.peak})
        if t:
            base.setdefault(o.stage.baseline, []).append(t.baseline_tflops)
    baselines = [{"label": (BASELINES[k].label if k in BASELINES else k), "tflops": statistics.median(v)} for k, v in base.items()]
    return rows, baselines, peak_lines(p)


def peak_lines(p: Peaks) -> dict[str, float]:
    """The peak ceilings drawn on the ladder and the roofline, by label (the ones known)."""
    return {label: v for label, v in (("FP32 CUDA cores", p.fp32), ("FP16 Tensor Cores", p.fp16_tensor)) if v}


def hbm_bandwidth(device: ProbeResult | None) -> dict[str, float]:
    name = device.name if device is not None else ""
    for key, tbs in KNOWN_HBM_TBS.items():
        if key.lower() in name.lower():
            return {"HBM": tbs}
    return {}


def stage_diagnosis_text(o: StageOutcome) -> str:
    """The diagnosis for one stage's feedback, or why there is none."""
    if o.ncu:
        return diagnose(o.ncu, o.stage.id).markdown()
    return o.ncu_reason or "not evaluated: no Nsight Compute metrics for this stage"


def plot_inputs(grading: Grading) -> tuple:
    """Everything the two plots are drawn from: two gradings with equal inputs get the same pictures."""
    profiled = {stage_label(o.stage): o.ncu for o in grading.outcomes.values() if o.ncu}
    n_prof = next((o.profile_n for o in grading.outcomes.values() if o.ncu), 0)
    n_bench = next((o.timing.n for o in grading.outcomes.values() if o.timing), None)
    return (ladder_inputs(grading), n_bench, roofline_points(profiled, n_prof), n_prof,
            hbm_bandwidth(grading.env.device))


def _drawn(drawn: Path | None, name: str, out_dir: Path) -> tuple[str | None, str] | None:
    """The picture ``name`` copied from ``drawn`` (None when it is not there: it is drawn)."""
    if drawn is None or not (Path(drawn) / name).is_file() or (Path(drawn) / name).is_symlink():
        return None
    if Path(drawn).resolve() != out_dir.resolve():
        shutil.copyfile(Path(drawn) / name, out_dir / name)
    return str(out_dir / name), ""


def write_profile_report(grading: Grading, out_dir: Path, bandwidth: dict[str, float] | None = None,
                         drawn: Path | None = None) -> ProfileReport:
    """Draw both plots and write profile.md / profile.html into ``out_dir``. Never raises for a plot.
    ``drawn``: a folder whose ladder.png and roofline.png were drawn from the same :func:`plot_inputs` (a stored
    grading being re-scored): they are copied, not drawn again."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rep = ProfileReport()
    peaks = peak_lines(grading.env.peaks)
    ladder = ladder_plot(grading.outcomes, grading.env.peaks, out_dir)
    if ladder is not None:
        rep.images["ladder"], why = _drawn(drawn, "ladder.png", out_dir) or ladder_png(*ladder)
    else:
        rep.images["ladder"], why = None, "no stage was timed (no GPU, or no stage passed correctness)"
    if why:
        rep.reasons["ladder"] = why
    profiled = {stage_label(o.stage): o.ncu for o in grading.outcomes.values() if o.ncu}
    n_prof = next((o.profile_n for o in grading.outcomes.values() if o.ncu), 0)
    points = roofline_points(profiled, n_prof)
    if points:
        bw = hbm_bandwidth(grading.env.device) if bandwidth is None else bandwidth
        rep.images["roofline"], why = _drawn(drawn, "roofline.png", out_dir) or roofline_png(
            points, peaks, bw, out_dir / "roofline.png", f"Roofline at N={n_prof} (Nsight Compute, one launch per stage)")
    else:
        reasons = {o.ncu_reason for o in grading.outcomes.values() if o.ncu_reason}
        rep.images["roofline"], why = None, "no stage was profiled" + (f" ({'; '.join(sorted(reasons))})"
                                                                         if reasons else "")
    if why:
        rep.reasons["roofline"] = why
    rep.diagnoses = {sid: diagnose(o.ncu, sid) for sid, o in grading.outcomes.items() if o.ncu}
    sections = [(stage_label(o.stage), stage_diagnosis_text(o)) for o in grading.outcomes.values()]
    rep.markdown = report_markdown(sections, rep.images, rep.reasons)
    (out_dir / "profile.md").write_text(rep.markdown + "\n", encoding="utf-8")
    (out_dir / "profile.html").write_text(report_html(sections, rep.images, rep.reasons), encoding="utf-8")
    rep.paths = {"md": str(out_dir / "profile.md"), "html": str(out_dir / "profile.html")}
    return rep


_INTRO = ("Each stage's Nsight Compute numbers, read with the course's method: the Speed-of-Light "
          "matrix (SM % against memory %), the unit that saturates, the warps' top stall reason, and "
          "the metric that justifies the next step.")
_CAPTIONS = {"ladder": "TFLOP/s of every timed stage, with the cuBLAS baselines and the two peaks.",
             "roofline": "Filled markers: FLOPs per byte through L2 (lts__t_bytes); hollow: per DRAM byte. "
                         "At N=2048 the matrices stay in the 60 MB L2, so L2 traffic is what the stages change."}


def report_markdown(sections: list[tuple[str, str]], images: dict[str, str | None], reasons: dict[str, str]) -> str:
    """Markdown linking the PNGs by file name (they sit next to the report)."""
    parts = ["# Profile of your kernels", "", _INTRO, ""]
    for key in ("ladder", "roofline"):
        image = images.get(key)
        if image:
            parts += [f"![{key}]({Path(image).name})", "", f"*{_CAPTIONS[key]}*", ""]
        else:
            parts += [f"*No {key} plot: {reasons.get(key, 'not drawn')}*", ""]
    for label, text in sections:
        parts += [f"## {label}", "", text, ""]
    return "\n".join(parts).rstrip()


def report_html(sections: list[tuple[str, str]], images: dict[str, str | None], reasons: dict[str, str]) -> str:
    """A self-contained page (images linked by file name) with the same content as the markdown."""
    esc = html.escape
    body = [f"<h1>Profile of your kernels</h1><p>{esc(_INTRO)}</p>"]
    for key in ("ladder", "roofline"):
        image = images.get(key)
        if image:
            name = esc(Path(image).name)
            body.append(f'<figure><a href="{name}"><img src="{name}" alt="{key}" style="max-width:100%"></a>'
                        f"<figcaption>{esc(_CAPTIONS[key])}</figcaption></figure>")
        else:
            body.append(f"<p><em>No {key} plot: {esc(reasons.get(key, 'not drawn'))}</em></p>")
    for label, text in sections:
        lines = text.splitlines()
        items = "".join(f"<li>{esc(ln[2:])}</li>" for ln in lines if ln.startswith("- "))
        head = " ".join(ln for ln in lines if not ln.startswith("- ")).replace("**", "")
        body.append(f"<h2>{esc(label)}</h2><p><strong>{esc(head)}</strong></p>"
                    + (f"<ul>{items}</ul>" if items else ""))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Profile of your kernels</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}</style></head>"
            "<body>" + "\n".join(body) + "</body></html>\n")
