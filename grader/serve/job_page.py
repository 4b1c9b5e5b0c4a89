"""One job's page (/jobs/<id>), rendered on the server: the state, the score, the per-stage table with % of
cuBLAS (from grading.json, read as the Grading record), the items not passed, those not evaluated and those graded by hand (each
apart), summary.md rendered, the plots and the files. It reads whole without JavaScript; static/job.js
only refreshes it while the job is queued or running (it fetches this page again and swaps its parts).

Every value that came from a student (messages, file names) is escaped; an item's first line is rendered
as inline Markdown with raw HTML escaped (its `code spans` become <code>); the rest of a message is
preformatted text, or Markdown when it holds a fenced block (a compile error's).
"""
from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Sequence

from markdown_it import MarkdownIt

from grader.grading import Grading
from grader.model import ItemResult, Status
from grader.serve.views import about

COLUMNS = ["stage", "correct", "ms", "TFLOP/s", "% of peak", "% of cuBLAS", "vs first", "regs", "spills", "points"]
PLOTS = [("ladder.png", "The ladder: TFLOP/s per stage against cuBLAS"),
         ("roofline.png", "Roofline (Nsight Compute, one launch per stage)")]
MARKS = {"failed": "FAIL", "not_evaluated": "n/e", "manual": "by hand", "review": "review"}
MESSAGE_CHARS = 3000  # of an item's message under its first line
# An item message's first line: inline Markdown only (code spans, emphasis), no raw HTML, no images.
_INLINE = MarkdownIt("commonmark", {"html": False}).disable("image")

e = html.escape


def _num(x: object, digits: int) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else "-"


def _points(x: float) -> str:
    return f"{x:.1f}".removesuffix(".0")


def _ago(iso: str | None, now: float) -> str:
    if not iso:
        return "-"
    try:
        t = dt.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return iso
    s = max(0, round(now - t))
    return f"{s} s ago" if s < 90 else f"{round(s / 60)} min ago" if s < 5400 else f"{round(s / 3600)} h ago"


def stage_rows(grading: Grading) -> list[tuple[str, str, list[str]]]:
    """(stage label, correct's class, the other cells) per stage, as the terminal's table gives them."""
    outcomes = list(grading.outcomes.items())
    first = outcomes[0][1].timing if outcomes else None
    rows = []
    for sid, o in outcomes:
        t, comp = o.timing, o.compile
        k = comp.kernel if comp is not None and comp.ok else None
        mine = [i for i in grading.items if i.stage == sid]
        got = sum(i.score for i in mine)
        top = sum(i.max_score for i in mine)
        number = mine[0].number.split(".")[0] + " " if mine and mine[0].number else ""
        correct = "yes" if o.correct is True else "NO" if o.correct is False else "n/e"
        if comp is None or not comp.ok:
            correct = "no build"
        cls = "good" if correct == "yes" else "bad" if correct in ("NO", "no build") else "muted"
        vs = "-"
        if t is not None and first is not None and t.median_ms > 0:
            vs = f"{first.median_ms / t.median_ms:.1f}x"
        rows.append((number + sid, cls, [
            correct, _num(t.median_ms, 3) if t else "-", _num(t.tflops, 2) if t else "-",
            _num(100 * t.fraction_of_peak, 1) if t and t.fraction_of_peak is not None else "-",
            _num(100 * t.fraction_of_baseline, 1) if t else "-", vs,
            str(k.registers) if k is not None else "-",
            f"{k.spill_stores}/{k.spill_loads}" if k is not None else "-",
            f"{_points(got)}/{_points(top)}"]))
    return rows


def _stage_table(grading: Grading) -> str:
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "".join(f"<tr><td>{e(label)}</td><td class=\"{cls}\">{e(cells[0])}</td>"
                   + "".join(f"<td>{e(c)}</td>" for c in cells[1:]) + "</tr>"
                   for label, cls, cells in stage_rows(grading))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _rest(text: str) -> str:
    """A message's lines after its first: Markdown (a compile error's fenced block is a block of code), raw
    HTML escaped; plain lines stay as they were written (a fenced block of their own when there is no fence)."""
    if "```" not in text and "~~~" not in text:
        return f"<pre class=\"message\">{e(text)}</pre>"
    return _INLINE.render(text).replace("<pre>", "<pre class=\"message\">")


PARTS = {"notPassed": lambda s: s not in (Status.PASSED, Status.NOT_EVALUATED, Status.MANUAL),
         "notEvaluated": lambda s: s is Status.NOT_EVALUATED, "hand": lambda s: s is Status.MANUAL}


def item_list(items: Sequence[ItemResult], part: str) -> str:
    """The items of one kind as a list ("" when none; the items not passed say when every one passed)."""
    items = [i for i in items if PARTS[part](i.status)]
    if not items:
        return "<p class=\"good\">every graded item passed</p>" if part == "notPassed" else ""
    out = []
    for i in items:
        first, _, rest = i.message.partition("\n")
        rest = rest[:MESSAGE_CHARS]
        status = i.status.value
        out.append(f"<li><span class=\"{'bad' if status == 'failed' else 'muted'}\">{e(MARKS.get(status, status))} "
                   f"</span><span class=\"num\">{e(i.number)}</span> {e(i.title)}: "
                   f"{_INLINE.renderInline(first)}" + (_rest(rest) if rest.strip() else "") + "</li>")
    return "<ul class=\"items\">" + "".join(out) + "</ul>"


def render(view: dict, grading: Grading | None, summary: str | None, now: float, refresh_s: float = 3.0) -> str:
    """The page of the job ``view`` (views.job_view), with its grading.json and summary.md rendered
    (views.summary_html) when done; static/job.js fetches it again every ``refresh_s`` while the job waits or runs
    (serve.yaml's page_refresh_s)."""
    jid = str(view.get("id", ""))
    base = f"/api/v1/jobs/{jid}/files/"
    state = str(view.get("state", ""))
    detail = []
    if state == "queued" and isinstance(view.get("position"), int):
        detail.append(f"position {view['position']}")
    if state in ("queued", "running") and isinstance(view.get("estimate_s"), (int, float)):
        detail.append(f"{about(view['estimate_s'])} to go")
    if view.get("kind"):
        detail.append(str(view["kind"]))
    for key, word in (("created", "submitted"), ("started", "started"), ("finished", "finished")):
        if view.get(key):
            detail.append(f"{word} {_ago(view[key], now)}")
    files = [str(f) for f in view.get("files") or []]
    done = state in ("done", "failed")
    score = (f"<strong>{view['score']:g} / {view['max_score']:g} points</strong>"
             if isinstance(view.get("score"), (int, float)) and isinstance(view.get("max_score"), (int, float)) else "")
    banner = ""
    if view.get("without_gpu"):
        banner = (f"<strong>Graded without a GPU</strong> ({e(str(view['without_gpu']))}): correctness, speed, "
                  "Nsight Compute and measured items were not evaluated, so this score is not the GPU grading's.")
    links = []
    if "summary.md" in files:
        links.append(f"<a href=\"/jobs/{e(jid)}/summary\">the full summary (summary.md)</a>")
    if "profile.html" in files:
        links.append(f"<a href=\"{e(base)}profile.html\">the profile page with the Nsight Compute diagnosis</a>")
    error = f"the grading failed: {e(str(view.get('error') or 'no reason given'))}" if state == "failed" else \
        e(str(view.get("error_page") or ""))

    results = ""
    if done:
        plots = [(n, alt) for n, alt in PLOTS if n in files]
        plot_html = "".join(f"<figure><img src=\"{e(base + n)}\" alt=\"{e(alt)}\"><figcaption class=\"muted\">{e(alt)}"
                            "</figcaption></figure>" for n, alt in plots) or \
            ("<p class=\"muted\">no plots: nothing was timed or profiled (graded without a GPU, or no stage "
             "passed)</p>")
        items = grading.items if grading is not None else []
        not_eval, hand = item_list(items, "notEvaluated"), item_list(items, "hand")
        results = f"""<div id="results">
  <h2>The ladder</h2>
  <p class="muted">% of cuBLAS: the stage's cuBLAS baseline time over its own (100 = as fast as cuBLAS).</p>
  <div id="stages">{_stage_table(grading) if grading is not None else ""}</div>
  <h2>Items not passed</h2>
  <div id="items">{item_list(items, "notPassed") if grading is not None else ""}</div>
  <div id="not-evaluated-part"{"" if not_eval else " hidden"}>
    <h2>Not evaluated</h2>
    <p class="muted">The grader could not look at these (no GPU, or a tool missing): 0 points for now, never a
    judgement of your code.</p>
    <div id="not-evaluated">{not_eval}</div>
  </div>
  <div id="hand-part"{"" if hand else " hidden"}>
    <h2>Graded by hand</h2>
    <p class="muted">Course staff grade these after the deadline; their points are not in the score above.</p>
    <div id="hand">{hand}</div>
  </div>
  <h2>Summary</h2>
  <div id="summary" class="summary">{summary or ""}</div>
  <h2>Plots</h2>
  <div id="plots" class="plots">{plot_html}</div>
  <h2>Files</h2>
  <ul id="files">{"".join(f'<li><a href="{e(base + f)}">{e(f)}</a></li>' for f in files)}</ul>
</div>"""
    else:
        results = "<div id=\"results\" hidden></div>"
    state_class = "".join(c for c in state if c.isalpha())
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GEMM ladder: a grading job</title>
<link rel="stylesheet" href="/static/style.css">
</head>
<body data-state="{e(state)}" data-refresh-ms="{round(refresh_s * 1000)}">
<p><a href="/">&larr; the queue</a></p>
<h1>Job <span id="job-id" class="mono">{e(jid)}</span></h1>
<p><span id="state" class="state {state_class}">{e(state)}</span> <span id="detail" class="muted">{e(" · ".join(detail))}</span></p>
<p id="no-gpu" class="banner"{"" if banner else " hidden"}>{banner}</p>
<p id="score">{score}</p>
<p id="summary-link">{" · ".join(links)}</p>
<p id="error" class="bad">{error}</p>
{results}
<script src="/static/job.js"></script>
</body>
</html>
"""


def render_summary_page(jid: str, summary: str) -> str:
    """summary.md rendered (views.summary_html) as a page of its own."""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GEMM ladder: the summary of job {e(jid)}</title>
<link rel="stylesheet" href="/static/style.css">
</head>
<body>
<p><a href="/jobs/{e(jid)}">&larr; the job</a> · <a href="/api/v1/jobs/{e(jid)}/files/summary.md">summary.md as
Markdown</a></p>
<div id="summary" class="summary">{summary}</div>
</body>
</html>
"""
