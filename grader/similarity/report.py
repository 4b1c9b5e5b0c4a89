"""The similarity run: the class's pairs and its matches with the references, stage by stage, into
similarity.json (the rows), similarity.md and similarity.html (built from those rows alone).

Every text a student controls (file contents, names from the export's metadata, folder names) is
escaped in the HTML and put in code spans in the Markdown.
"""
from __future__ import annotations

import html
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader import REPO_ROOT
from grader.compile.locate import locate
from grader.evidence.rubric import Stage
from grader.evidence.tools import Tool
from grader.files import replace_whole
from grader.rubric.load import Rubric
from grader.similarity.build import Sass, compile_all, file_key
from grader.similarity.collect import Entry, load_class, load_references
from grader.similarity.defaults import DEFAULT_FLAG_AT, DEFAULT_TOP
from grader.similarity.fingerprint import (
    PairScore,
    Print,
    boilerplate_of,
    compare,
    sass_print,
    source_print,
)
from grader.untrusted.quote import quote_code

FORMAT = "similarity-v1"
BINS = 10

MEANING = """\
**What a score means.** Each score is a share between 0 and 1: the part of the two files that lies in
a stretch both have, averaged over the two files. *Source* compares the stage's file after its
comments and whitespace are dropped, every name is replaced by one letter and the starter's code is
removed (copydetect's winnowing). *SASS* compares the machine code of the stage's kernel, compiled
by the grader, with its registers, constants and addresses removed and each run of one instruction
counted once. *Combined* is the mean of the two (the source score alone when the kernel did not
compile). Renaming variables, reformatting, reordering comments or helpers barely lowers either score.

**What a score does not mean.** A high score is not evidence of copying by itself: kernels of one
technique written from the same handout converge (the plainer the technique, the more), a short
kernel has little room to differ, and two students may both have started from a source the course
cites. A low score is not evidence of independent work: a copy rewritten by hand or by a tool can
score low. Compare a pair with the class's histogram, read its shared fragments side by side, and
then talk with the student: a score is a lead for a person to read, never a verdict and never a grade.
docs/measurements/2026-12-06-similarity.md gives the scores measured on honest kernels of one
technique, for scale."""


@dataclass
class Row:
    stage: str
    a: str
    b: str
    source: PairScore
    sass: PairScore | None
    combined: float
    reference: bool = False  # b is a reference folder

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("source", "sass"):
            if out[key] is not None:
                out[key]["fragments"] = [dict(f) for f in out[key]["fragments"]]
        return out


@dataclass
class Report:
    stages: list[str]
    entries: list[Entry]
    references: list[Entry]
    pairs: list[Row] = field(default_factory=list)
    reference_rows: list[Row] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {stage, who, why}: not compared, or SASS missing
    notes: list[str] = field(default_factory=list)
    flag_at: float = DEFAULT_FLAG_AT
    top: int = DEFAULT_TOP
    seconds: float = 0.0

    def ranked(self, stage: str) -> list[Row]:
        return sorted((r for r in self.pairs if r.stage == stage), key=lambda r: (-r.combined, r.a, r.b))

    def flagged(self) -> list[Row]:
        """Each (submission, stage)'s best reference, when at or above the flag level, best first."""
        best: dict[tuple[str, str], Row] = {}
        for r in self.reference_rows:
            key = (r.stage, r.a)
            if r.combined >= self.flag_at and (key not in best or r.combined > best[key].combined):
                best[key] = r
        return sorted(best.values(), key=lambda r: (-r.combined, r.stage, r.a))

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "stages": self.stages, "flag_at": self.flag_at, "top": self.top,
            "meaning": MEANING, "seconds": round(self.seconds, 1),
            "class": [{"name": e.name, "label": e.label} for e in self.entries],
            "references": [{"name": e.name, "path": e.label} for e in self.references],
            "pairs": [r.to_json() for s in self.stages for r in self.ranked(s)],
            "reference_matches": [r.to_json() for r in sorted(self.reference_rows,
                                                               key=lambda r: (-r.combined, r.stage, r.a))],
            "flagged": [{"stage": r.stage, "submission": r.a, "reference": r.b, "combined": r.combined}
                        for r in self.flagged()],
            "skipped": self.skipped, "notes": self.notes,
        }


def _combined(src: PairScore, sass: PairScore | None) -> float:
    return round(src.score if sass is None else (src.score + sass.score) / 2, 4)


@dataclass
class _Side:
    """One (entry, stage): its source print and SASS print, when there are."""
    source: Print | None = None
    sass: Print | None = None


def _read(entry: Entry, stage: Stage) -> bytes | None:
    found = locate(entry.root, stage.file)
    if found.path is None:
        return None
    try:
        return found.path.read_bytes()
    except OSError:
        return None


def similarity(source: Path, references: list[Path], out: Path, rubric: Rubric, *, stages: list[str] | None = None,
               starter: Path | None = None, nvcc: Tool | None = None, cuobjdump: Tool | None = None,
               use_sass: bool = True, top: int = DEFAULT_TOP, flag_at: float = DEFAULT_FLAG_AT,
               progress: Callable[[str], None] = lambda _m: None) -> Report:
    """Compare the class at ``source`` (and with ``references``); write the three files into ``out``."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    chosen = [st for st in rubric.stages if stages is None or st.id in stages]
    markers = [st.file for st in rubric.stages]
    entries, notes = load_class(source, work, markers)
    refs = load_references(references, markers)
    starter_entry = Entry("starter", "starter", Path(starter) if starter else REPO_ROOT / "starter")
    report = Report([st.id for st in chosen], entries, refs, notes=notes, flag_at=flag_at, top=top)
    everyone = [("class", e) for e in entries] + [("reference", e) for e in refs]

    texts: dict[tuple[str, str, str], bytes] = {}
    for group, e in everyone + [("starter", starter_entry)]:
        for st in chosen:
            data = _read(e, st)
            if data is not None:
                texts[(group, e.name, st.id)] = data
            elif group != "starter":
                report.skipped.append({"stage": st.id, "who": e.name, "why": f"{st.file} is not in the submission"})

    sass: dict[str, Sass] = {}
    if use_sass:
        jobs: dict[str, tuple[Stage, Path]] = {}
        for group, e in everyone + [("starter", starter_entry)]:
            for st in chosen:
                if (group, e.name, st.id) in texts:
                    jobs.setdefault(file_key(st, texts[(group, e.name, st.id)]), (st, e.root))
        progress(f"compiling {len(jobs)} distinct stage file(s) for their SASS")
        sass = compile_all(jobs, rubric, work / "build", nvcc, cuobjdump)

    for st in chosen:
        progress(f"comparing {st.id}")
        start = texts.get(("starter", "starter", st.id))
        start_src = [source_print(start.decode("utf-8", "replace"), st.file)] if start is not None else []
        start_sass = sass.get(file_key(st, start)) if start is not None else None
        start_sass_print = ([sass_print(start_sass.tokens)] if start_sass and start_sass.tokens else [])
        src_boiler, sass_boiler = boilerplate_of(start_src), boilerplate_of(start_sass_print)
        sides: dict[tuple[str, str], _Side] = {}
        for group, e in everyone:
            data = texts.get((group, e.name, st.id))
            if data is None:
                continue
            side = _Side(source_print(data.decode("utf-8", "replace"), st.file, src_boiler))
            if side.source is not None and side.source.empty:
                report.skipped.append({"stage": st.id, "who": e.name,
                                       "why": "nothing but the starter's code (excluded)"})
                continue
            found = sass.get(file_key(st, data))
            if found is not None and found.tokens:
                side.sass = sass_print(found.tokens, sass_boiler)
            elif use_sass and found is not None:
                report.skipped.append({"stage": st.id, "who": e.name, "why": f"SASS not compared: {found.why}"})
            sides[(group, e.name)] = side
        klass = [e for e in entries if ("class", e.name) in sides]
        for x, y in itertools.combinations(klass, 2):
            report.pairs.append(_row(st.id, x, y, sides[("class", x.name)], sides[("class", y.name)], False))
        for x in klass:
            for r in refs:
                if ("reference", r.name) in sides:
                    report.reference_rows.append(_row(st.id, x, r, sides[("class", x.name)],
                                                      sides[("reference", r.name)], True))
        _add_fragments(report, st.id, sides)
    report.seconds = time.monotonic() - started
    write_all(report, out)
    return report


def _row(stage: str, x: Entry, y: Entry, a: _Side, b: _Side, reference: bool) -> Row:
    assert a.source is not None and b.source is not None
    src = compare(a.source, b.source, fragments=False)
    sass = compare(a.sass, b.sass, fragments=False) if a.sass is not None and b.sass is not None else None
    if reference:  # against a reference, what counts is how much of the submission is in it
        src = PairScore(src.share_a, src.share_a, src.share_b)
        sass = PairScore(sass.share_a, sass.share_a, sass.share_b) if sass else None
    return Row(stage, x.name, y.name, src, sass, _combined(src, sass), reference)


def _add_fragments(report: Report, stage: str, sides: dict[tuple[str, str], _Side]) -> None:
    """The shared fragments of the pairs the reports show: each stage's top pairs and the flagged matches."""
    shown = report.ranked(stage)[:report.top] + [r for r in report.reference_rows
                                                 if r.stage == stage and r.combined >= report.flag_at]
    for r in shown:
        a = sides[("class", r.a)]
        b = sides[("reference" if r.reference else "class", r.b)]
        assert a.source is not None and b.source is not None
        full = compare(a.source, b.source)
        r.source = PairScore(r.source.score, r.source.share_a, r.source.share_b, full.fragments)
        if r.sass is not None and a.sass is not None and b.sass is not None:
            full = compare(a.sass, b.sass)
            r.sass = PairScore(r.sass.score, r.sass.share_a, r.sass.share_b, full.fragments)


# ---------------------------------------------------------------------------------------------
# The files
# ---------------------------------------------------------------------------------------------
def write_all(report: Report, out: Path) -> None:
    data = report.to_json()
    replace_whole(out / "similarity.json", json.dumps(data, indent=1) + "\n", mode=0o644)
    replace_whole(out / "similarity.md", render_markdown(data), mode=0o644)
    replace_whole(out / "similarity.html", render_html(data), mode=0o644)


def _histogram(scores: list[float]) -> list[int]:
    counts = [0] * BINS
    for s in scores:
        counts[min(BINS - 1, int(s * BINS))] += 1
    return counts


def _score(part: dict | None) -> str:
    return "—" if part is None else f"{part['score']:.2f}"


def _labels(data: dict) -> dict[str, str]:
    return {c["name"]: c["label"] for c in data["class"]}


def render_markdown(data: dict) -> str:
    labels = _labels(data)
    lines = ["# Similarity and provenance report", "", data["meaning"], ""]
    lines += [f"{len(data['class'])} submissions, {len(data['references'])} reference folder(s), stages "
              + ", ".join(data["stages"]) + ".", ""]
    lines += [f"## Matches a reference (combined score at least {data['flag_at']:g})", ""]
    if data["flagged"]:
        lines += ["| stage | submission | reference | combined |", "|---|---|---|---|"]
        lines += [f"| {f['stage']} | {quote_code(labels.get(f['submission'], f['submission']))} | "
                  f"{quote_code(f['reference'])} | {f['combined']:.2f} |" for f in data["flagged"]]
    else:
        lines.append("None.")
    lines.append("")
    for stage in data["stages"]:
        rows = [p for p in data["pairs"] if p["stage"] == stage]
        lines += [f"## {stage}", "", "Class histogram (combined score of every pair):", "", "| score | pairs |",
                  "|---|---|"]
        counts = _histogram([p["combined"] for p in rows])
        lines += [f"| {i / BINS:.1f}–{(i + 1) / BINS:.1f} | {n} |" for i, n in enumerate(counts)]
        lines += ["", f"Ranked pairs (the first {data['top']}):", "",
                  "| rank | submission | submission | combined | source | SASS |", "|---|---|---|---|---|---|"]
        for n, p in enumerate(rows[:data["top"]], 1):
            lines.append(f"| {n} | {quote_code(labels.get(p['a'], p['a']))} | {quote_code(labels.get(p['b'], p['b']))} "
                         f"| {p['combined']:.2f} | {_score(p['source'])} | {_score(p['sass'])} |")
        lines.append("")
    if data["skipped"]:
        lines += ["## Not compared", ""] + [f"- {s['stage']}: {quote_code(s['who'])}: {s['why']}"
                                             for s in data["skipped"]] + [""]
    lines += [f"- note: {n}" for n in data["notes"]]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}.hi{background:#fde2e2}.frag{display:grid;grid-template-columns:1fr 1fr;gap:.6em}
pre{background:#f7f7f7;border:1px solid #ddd;padding:.5em;overflow:auto;max-height:22em;font-size:12px;margin:0}
.meaning{background:#eef4fb;border-left:4px solid #4a7bbf;padding:.2em 1em}
details{margin:.2em 0}summary{cursor:pointer;color:#245}"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _emphasis(escaped: str) -> str:
    """MEANING's Markdown emphasis (the grader's own text, already escaped) as HTML."""
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"\*(.+?)\*", r"<em>\1</em>", escaped)


def _svg_histogram(counts: list[int]) -> str:
    w, h, bar = 420, 120, 38
    top = max(counts) or 1
    parts = [f'<svg width="{w}" height="{h + 30}" role="img" aria-label="histogram">']
    for i, n in enumerate(counts):
        bh = int(h * n / top)
        x = 10 + i * (bar + 3)
        parts.append(f'<rect x="{x}" y="{h - bh}" width="{bar}" height="{bh}" fill="#4a7bbf"/>'
                     f'<text x="{x + bar / 2}" y="{h - bh - 2}" font-size="10" text-anchor="middle">{n}</text>'
                     f'<text x="{x + bar / 2}" y="{h + 14}" font-size="10" text-anchor="middle">{i / BINS:.1f}</text>')
    parts.append(f'<text x="10" y="{h + 28}" font-size="10">combined score of each pair (bin start)</text></svg>')
    return "".join(parts)


def _fragments_html(row: dict, a: str, b: str, shown: bool = False) -> str:
    out = []
    for level in ("source", "sass"):
        part = row.get(level)
        if not part or not part["fragments"]:
            continue
        for f in part["fragments"]:
            out.append(f"<div><b>{level}</b>, {f['length']} shared {'instructions' if level == 'sass' else 'characters'}"
                       f"</div><div class=frag><pre title='{_e(a)}'>{_e(f['a'])}</pre>"
                       f"<pre title='{_e(b)}'>{_e(f['b'])}</pre></div>")
    if not out:
        return ""
    return (f"<details{' open' if shown else ''}><summary>shared fragments: {_e(a)} | {_e(b)}</summary>"
            f"{''.join(out)}</details>")


def render_html(data: dict) -> str:
    labels = _labels(data)
    body = ["<h1>Similarity and provenance report</h1>"]
    meaning = "".join(f"<p>{_emphasis(_e(p))}</p>" for p in data["meaning"].split("\n\n"))
    body.append(f"<div class=meaning>{meaning}</div>")
    body.append(f"<p>{len(data['class'])} submissions, {len(data['references'])} reference folder(s); stages: "
                f"{_e(', '.join(data['stages']))}.</p>")
    body.append(f"<h2>Matches a reference (combined score at least {data['flag_at']:g})</h2>")
    flagged = {(f["stage"], f["submission"], f["reference"]) for f in data["flagged"]}
    refrows = [r for r in data["reference_matches"] if (r["stage"], r["a"], r["b"]) in flagged]
    if refrows:
        body.append("<table><tr><th>stage</th><th>submission</th><th>reference</th><th>combined</th><th>source</th>"
                    "<th>SASS</th><th>fragments</th></tr>")
        for r in refrows:
            who = labels.get(r["a"], r["a"])
            body.append(f"<tr class=hi><td>{_e(r['stage'])}</td><td>{_e(who)}</td><td>{_e(r['b'])}</td>"
                        f"<td>{r['combined']:.2f}</td><td>{_score(r['source'])}</td><td>{_score(r['sass'])}</td>"
                        f"<td>{_fragments_html(r, who, r['b'])}</td></tr>")
        body.append("</table>")
    else:
        body.append("<p>None.</p>")
    for stage in data["stages"]:
        rows = [p for p in data["pairs"] if p["stage"] == stage]
        body.append(f"<h2>{_e(stage)}</h2>")
        body.append(_svg_histogram(_histogram([p["combined"] for p in rows])))
        body.append("<table><tr><th>rank</th><th>submission</th><th>submission</th><th>combined</th><th>source</th>"
                    "<th>SASS</th><th>fragments</th></tr>")
        for n, p in enumerate(rows[:data["top"]], 1):
            a, b = labels.get(p["a"], p["a"]), labels.get(p["b"], p["b"])
            body.append(f"<tr><td>{n}</td><td>{_e(a)}</td><td>{_e(b)}</td><td>{p['combined']:.2f}</td>"
                        f"<td>{_score(p['source'])}</td><td>{_score(p['sass'])}</td>"
                        f"<td>{_fragments_html(p, a, b, shown=n == 1)}</td></tr>")
        body.append("</table>")
    if data["skipped"]:
        body.append("<h2>Not compared</h2><ul>" + "".join(
            f"<li>{_e(s['stage'])}: {_e(s['who'])}: {_e(s['why'])}</li>" for s in data["skipped"]) + "</ul>")
    if data["notes"]:
        body.append("<ul>" + "".join(f"<li>note: {_e(n)}</li>" for n in data["notes"]) + "</ul>")
    return ("<!doctype html><html><head><meta charset=utf-8><title>Similarity report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")
