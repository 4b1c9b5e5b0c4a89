"""The grading service's web pages (grader/serve/static/) in a real browser: Debian's Chromium driven by
Playwright, against the real service (tests/serve_helpers.py) grading a real submission.

- the job page follows a job from queued to done by itself, then shows the score, the per-stage
  table with % of cuBLAS (equal to the job's grading.json), and the ladder and roofline plots load;
- a student's text (a compile error quoting ``<script>`` and an ``<img onerror>``) shows as text;
- the queue page's class leaderboard lists the graded job's 2D blocktiling speed under its pseudonym;
- the queue page lists a queued job with its position (a service without workers keeps it queued);
- a job graded without a GPU (``serve --no-gpu``, no measurements): a banner says so, the items not
  passed, those not evaluated and those graded by hand are listed apart, summary.md is rendered, long
  messages wrap (element widths measured), item numbers tell O from 0; its screenshot is
  docs/screenshots/job-page.png (``GRADER_UPDATE_SCREENSHOT=1`` writes it again);
- every estimate of a queued job (job page, queue page, submit's answer, a refusal) is one number, said one way.

CI has no GPU: the service's gradings are static plus the GPU's measurements
(tests/serve_gpu_measurements.py), so the plots and the leaderboard exist.
Needs ``chromium`` (Debian package; .ci/run installs it) and the playwright wheel (never a downloaded browser).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from grader.serve.client import Client, ServiceError, make_archive
from grader.serve.worker import SERVICE_WITHOUT_GPU
from tests.serve_gpu_measurements import measured_service
from tests.serve_helpers import ServiceProcess, issue_tokens, zip_folder

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
STAGES = "naive,coalesced,blocktiling_2d"
PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
# The grading services' job pages look again every half second (serve.yaml's page_refresh_s, 3 s by default):
# a page follows its job by itself either way, and the test waits for the grading, not for the next look.
REFRESH = "page_refresh_s: 0.5\n"

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a test dependency (pip install -e .[test])")
pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """The service (one static worker with the GPU's measurements) and a student's token."""
    tmp = tmp_path_factory.mktemp("page")
    token = issue_tokens(tmp / "data", ["student@example.edu"])["student@example.edu"]
    (tmp / "data" / "serve.yaml").write_text(REFRESH)
    with measured_service(tmp, STAGES) as svc:
        yield svc, token


def _submission(tmp: Path) -> Path:
    """The 2D and naive references, and a coalesced stage whose compile error quotes hostile HTML."""
    sub = tmp / "sub"
    (sub / "gemm").mkdir(parents=True)
    for name in ("naive.cu", "blocktiling_2d.cu"):
        shutil.copy(ROOT / "solutions" / "gemm" / name, sub / "gemm" / name)
    (sub / "gemm" / "coalesced.cu").write_text(f"#error {PAYLOAD}\n")
    return sub


def test_job_page_follows_the_job_and_shows_results(service, browser, tmp_path):
    svc, token = service
    with Client(svc.url, token=token) as client:
        job = client.submit(make_archive(_submission(tmp_path)).data)
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{svc.url}/jobs/{job.id}")
        assert page.text_content("#job-id") == job.id
        assert page.get_attribute("body", "data-refresh-ms") == "500"  # the service's page_refresh_s
        # no reload: the page refreshes itself until the job is done
        page.wait_for_function("document.getElementById('state').textContent === 'done'", timeout=120_000)
        page.wait_for_selector("#results:not([hidden])")
        grading = json.loads(client.file(job.id, "grading.json"))
        final = client.job(job.id)

    assert page.text_content("#score") == f"{final.score:g} / {final.max_score:g} points"
    rows = page.eval_on_selector_all("#stages tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert [r[0] for r in rows] == ["1 naive", "2 coalesced", "4b blocktiling_2d"]
    by_stage = {r[0].split()[1]: r for r in rows}
    timing = grading["stages"]["blocktiling_2d"]["timing"]
    assert by_stage["blocktiling_2d"][1] == "yes"
    assert by_stage["blocktiling_2d"][5] == f"{100 * timing['fraction_of_baseline']:.1f}"  # % of cuBLAS
    assert by_stage["blocktiling_2d"][3] == f"{timing['tflops']:.2f}"
    assert by_stage["coalesced"][1] == "no build" and by_stage["coalesced"][5] == "-"

    # both plots are served and decoded by the browser
    page.wait_for_function("[...document.querySelectorAll('#plots img')].every(i => i.complete)")
    sizes = page.eval_on_selector_all("#plots img", "imgs => imgs.map(i => [i.getAttribute('src'), i.naturalWidth])")
    assert [src.rsplit("/", 1)[1] for src, _ in sizes] == ["ladder.png", "roofline.png"]
    assert all(width > 0 for _, width in sizes), sizes
    assert page.get_attribute("#summary-link a", "href") == f"/jobs/{job.id}/summary"

    # the student's text is text: quoted whole, nothing of it ran or became an element
    assert PAYLOAD in page.text_content("#items")
    assert page.evaluate("window.__pwned") is None
    assert page.eval_on_selector_all("img[src='x'], #items script", "nodes => nodes.length") == 0
    assert errors == []

    # the queue page's class leaderboard: this job, under its pseudonym (never the email)
    page.goto(svc.url + "/")
    page.wait_for_selector("#leaderboard table", timeout=30_000)
    head = page.eval_on_selector_all("#leaderboard th", "cells => cells.map(c => c.textContent)")
    title = "2D register blocktiling"
    assert head[:2] == ["#", "name"] and f"{title} TFLOP/s" in head and f"{title} % of cuBLAS" in head
    row = page.eval_on_selector_all("#leaderboard tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert len(row) == 1 and "@" not in row[0][1]
    assert row[0][head.index(f"{title} TFLOP/s")] == f"{round(timing['tflops'], 2):.2f}"
    assert row[0][head.index(f"{title} % of cuBLAS")] == f"{round(100 * timing['fraction_of_baseline'], 1):.1f}"
    assert page.eval_on_selector_all("#workers tbody tr", "rows => rows.length") == 1
    page.close()

    # the page is HTML from the server, whole without JavaScript; summary.md has a rendered page of its own
    plain = browser.new_page(java_script_enabled=False)
    plain.goto(f"{svc.url}/jobs/{job.id}")
    assert plain.text_content("#state") == "done" and plain.is_visible("#results")
    assert plain.text_content("#score") == f"{final.score:g} / {final.max_score:g} points"
    assert plain.eval_on_selector_all("#stages tbody tr", "rows => rows.map(r => r.cells[0].textContent)") == \
        ["1 naive", "2 coalesced", "4b blocktiling_2d"]
    assert PAYLOAD in plain.text_content("#items")
    assert plain.eval_on_selector_all("img[src='x'], #items script", "nodes => nodes.length") == 0
    plain.click("#summary-link a")
    assert plain.url.endswith(f"/jobs/{job.id}/summary")
    assert plain.eval_on_selector_all("#summary th", "cells => cells.length") > 0 and "| stage |" not in plain.content()
    plain.close()


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    """A service without workers (it shares nothing with the grading ones), 100 s its estimate before any grading
    finished (serve.yaml), and the one job it keeps queued: the service, a token, submit's answer for the job.
    The tests that use it only read; a refused submission queues nothing."""
    data = tmp_path_factory.mktemp("idle") / "data"
    token = issue_tokens(data, ["wait@example.edu"])["wait@example.edu"]
    (data / "serve.yaml").write_text("estimate_default_s: 100\n")
    with ServiceProcess(data, "--no-workers", stages=STAGES) as svc, Client(svc.url, token=token) as client:
        yield svc, token, client.submit(make_archive(ROOT / "starter").data)


def test_queue_page_lists_a_queued_job(idle, browser):
    svc, _, job = idle
    assert job.state == "queued" and job.position == 1
    page = browser.new_page()
    page.goto(svc.url + "/")
    page.wait_for_selector("#queue table")
    rows = page.eval_on_selector_all("#queue tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert rows[0][:2] == ["1", "selfcheck"]
    assert job.id not in page.content()  # the queue never shows ids
    assert "1 queued" in page.text_content("#totals")
    page.close()


LONG_LINE = "#error " + "a_long_word_with_no_space_in_it_" * 12  # one line far wider than the page


# The sections the no-GPU job page is read for: a stage that compiles (its GPU items not evaluated), the stage whose
# compile error is the long line (items not passed), and occupancy and the report (items graded by hand, numbers
# with the letter O). The screenshot in docs/ (GRADER_UPDATE_SCREENSHOT=1) shows every section.
BARE_STAGES = "" if os.environ.get("GRADER_UPDATE_SCREENSHOT") else "naive,coalesced,occupancy,report"


@pytest.fixture(scope="module")
def bare_service(tmp_path_factory):
    """A service without a GPU and without the GPU's measurements (`serve --no-gpu`), grading the sections above."""
    tmp = tmp_path_factory.mktemp("bare")
    token = issue_tokens(tmp / "data", ["nogpu@example.edu"])["nogpu@example.edu"]
    (tmp / "data" / "serve.yaml").write_text(REFRESH)
    with ServiceProcess(tmp / "data", stages=BARE_STAGES) as svc:
        svc.wait_workers(1)
        yield svc, token


def test_a_job_graded_without_a_gpu_shows_its_banner_hand_graded_items_apart_and_wraps(bare_service, browser,
                                                                                       tmp_path):
    svc, token = bare_service
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "solutions", sub)
    (sub / "gemm" / "coalesced.cu").write_text(LONG_LINE + "\n")
    with Client(svc.url, token=token) as client:
        job = client.submit(make_archive(sub).data)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{svc.url}/jobs/{job.id}")
        page.wait_for_function("document.getElementById('state').textContent === 'done'", timeout=120_000)
        page.wait_for_selector("#summary table")
        grading = json.loads(client.file(job.id, "grading.json"))
    items = grading["items"]

    # the banner: this score is no GPU grading
    assert page.is_visible("#no-gpu")
    assert page.text_content("#no-gpu").startswith(f"Graded without a GPU ({SERVICE_WITHOUT_GPU})")

    # hand-graded and not-evaluated items are apart from the items not passed, each exactly once
    def numbers(where: str) -> list[str]:
        return page.eval_on_selector_all(f"{where} li .num", "nodes => nodes.map(n => n.textContent)")

    hand = [i["number"] for i in items if i["status"] == "manual"]
    unseen = [i["number"] for i in items if i["status"] == "not_evaluated"]
    failed = [i["number"] for i in items if i["status"] in ("failed", "review")]
    assert hand and unseen and failed
    assert numbers("#hand") == hand and numbers("#not-evaluated") == unseen and numbers("#items") == failed
    assert page.is_visible("#hand-part") and page.is_visible("#not-evaluated-part")

    # summary.md rendered as Markdown: its table is a table, its bold is bold, no Markdown syntax shows
    summary = page.text_content("#summary")
    assert "| stage |" not in summary and "**" not in summary
    assert page.eval_on_selector_all("#summary strong", "n => n.length") > 0
    assert page.eval_on_selector_all("#summary th", "cells => cells.map(c => c.textContent)")[:2] == ["stage",
                                                                                                         "correct"]

    # long messages wrap: no block is wider than its box, the page does not scroll sideways, and the
    # compile error's one long line takes several lines
    widths = page.eval_on_selector_all("pre, #summary code, ul.items li", """nodes => nodes.map(n => [n.scrollWidth,
        n.clientWidth || n.getBoundingClientRect().width, n.getBoundingClientRect().right])""")
    page_width = page.evaluate("document.documentElement.clientWidth")
    assert widths and all(scroll <= box + 1 and right <= page_width + 1 for scroll, box, right in widths), widths
    assert page.evaluate("document.documentElement.scrollWidth") <= page_width
    long_pre = page.locator("pre.message", has_text="a_long_word_with_no_space_in_it_").first
    line = float(long_pre.evaluate("n => parseFloat(getComputedStyle(n).lineHeight) || 16"))
    assert long_pre.bounding_box()["height"] > 3 * line

    # item numbers: in their face the letter O and the digit 0 differ ("O.10" is not "0.10")
    o_width, zero_width = page.evaluate("""() => ['O', '0'].map(c => {
        const s = document.createElement('span'); s.className = 'num'; s.textContent = c.repeat(10);
        document.body.append(s); const w = s.getBoundingClientRect().width; s.remove(); return w; })""")
    assert abs(o_width - zero_width) > 0.15 * zero_width, (o_width, zero_width)
    assert errors == []

    shot = tmp_path / "job-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("GRADER_UPDATE_SCREENSHOT"):  # docs/screenshots/job-page.png is this page
        from PIL import Image  # (matplotlib's dependency) 256 colours: a text page's PNG at a third of the bytes

        (ROOT / "docs" / "screenshots").mkdir(exist_ok=True)
        Image.open(shot).convert("RGB").quantize(256).save(ROOT / "docs" / "screenshots" / "job-page.png",
                                                          optimize=True)
        top = tmp_path / "job-page-top.png"  # what a student sees first: the state, the banner, the ladder
        page.screenshot(path=str(top), full_page=False)
        Image.open(top).convert("RGB").quantize(256).save(ROOT / "docs" / "screenshots" / "job-page-top.png",
                                                         optimize=True)
    page.close()


def test_every_estimate_of_a_queued_job_is_the_same(idle, browser):
    """The job page, the queue page, submit's answer and a refusal's "try again" give one estimate, said one
    way: 100 s before any grading finished (serve.yaml) reads "~2 min" everywhere."""
    svc, token, job = idle
    assert (job.state, job.estimate_s) == ("queued", 100.0)
    with Client(svc.url, token=token) as client, pytest.raises(ServiceError) as refused:
        client.submit(zip_folder(ROOT / "starter", {"NOTES.txt": "another"}))
    page = browser.new_page()
    page.goto(f"{svc.url}/jobs/{job.id}")
    page.wait_for_function("document.getElementById('detail').textContent.includes('to go')")
    detail = page.text_content("#detail")
    page.goto(svc.url + "/")
    page.wait_for_selector("#queue table")
    row = page.eval_on_selector_all("#queue tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    page.close()
    assert "position 1 · ~2 min to go" in detail
    assert row[0][3] == "~2 min"
    assert "(in ~2 min, as the job page says)" in refused.value.message
