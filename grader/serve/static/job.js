// One job's page (/jobs/<id>): its state, refreshed until it is done; then the score, the per-stage
// table with % of cuBLAS (from grading.json), the items not passed, those not evaluated and those graded
// by hand (each apart), summary.md as the service rendered it, the ladder and roofline plots. A job the
// service graded without a GPU says so in a banner on top.
"use strict";

const JOB_ID = decodeURIComponent(window.location.pathname.replace(/\/+$/, "").split("/").pop() || "");
const JOB_PATH = "/jobs/" + encodeURIComponent(JOB_ID);
const COLUMNS = ["stage", "correct", "ms", "TFLOP/s", "% of peak", "% of cuBLAS", "vs first", "regs", "spills", "points"];
const PLOTS = [["ladder.png", "The ladder: TFLOP/s per stage against cuBLAS"],
               ["roofline.png", "Roofline (Nsight Compute, one launch per stage)"]];
let shownResults = false;

function fileURL(name) {
  return API + JOB_PATH + "/files/" + encodeURIComponent(name);
}

function stageRows(grading) {
  const stages = grading && typeof grading.stages === "object" && grading.stages ? grading.stages : {};
  const items = Array.isArray(grading.items) ? grading.items : [];
  const outcomes = Object.entries(stages);
  const first = outcomes.length ? (outcomes[0][1] || {}).timing : null;
  return outcomes.map(([sid, o]) => {
    o = o || {};
    const t = o.timing || null;
    const comp = o.compile || null;
    const k = comp && comp.ok ? comp.kernel : null;
    const mine = items.filter((i) => i && i.stage === sid);
    const got = mine.reduce((a, i) => a + (Number(i.score) || 0), 0);
    const top = mine.reduce((a, i) => a + (Number(i.max_score) || 0), 0);
    const number = mine.length && typeof mine[0].number === "string" ? mine[0].number.split(".")[0] + " " : "";
    let correct = o.correct === true ? "yes" : o.correct === false ? "NO" : "n/e";
    if (!comp || !comp.ok) correct = "no build";
    const cls = correct === "yes" ? "good" : (correct === "NO" || correct === "no build") ? "bad" : "muted";
    return [
      number + sid,
      el("td", { class: cls }, correct),
      t ? num(t.median_ms, 3) : "-",
      t ? num(t.tflops, 2) : "-",
      t && typeof t.fraction_of_peak === "number" ? num(100 * t.fraction_of_peak, 1) : "-",
      t ? num(100 * t.fraction_of_baseline, 1) : "-",
      t && first && t.median_ms > 0 ? (first.median_ms / t.median_ms).toFixed(1) + "x" : "-",
      k ? k.registers : "-",
      k ? k.spill_stores + "/" + k.spill_loads : "-",
      got.toFixed(1).replace(/\.0$/, "") + "/" + top.toFixed(1).replace(/\.0$/, ""),
    ];
  });
}

// The items of one kind: "failed" (and "review") are not passed; "not_evaluated" and "manual" (graded by
// hand) are listed apart, as they are no verdict on the code.
const PARTS = { notPassed: (s) => s !== "passed" && s !== "not_evaluated" && s !== "manual",
                notEvaluated: (s) => s === "not_evaluated", hand: (s) => s === "manual" };

function itemList(grading, part) {
  const items = (Array.isArray(grading.items) ? grading.items : []).filter((i) => i && PARTS[part](i.status));
  if (!items.length) return part === "notPassed" ? el("p", { class: "good" }, "every graded item passed") : null;
  const marks = { failed: "FAIL", not_evaluated: "n/e", manual: "by hand", review: "review" };
  return el("ul", { class: "items" }, ...items.map((i) => {
    const text = typeof i.message === "string" ? i.message : "";
    const lines = text.split("\n");
    const rest = lines.slice(1).join("\n").slice(0, 3000);
    return el("li", {}, el("span", { class: i.status === "failed" ? "bad" : "muted" }, (marks[i.status] || i.status) + " "),
              el("span", { class: "num" }, i.number || ""), " " + (i.title || "") + ": " + lines[0],
              rest.trim() ? el("pre", { class: "message" }, rest) : null);
  }));
}

function showPart(id, list) {
  if (list) fill(id, list);
  document.getElementById(id + "-part").hidden = !list;
}

async function showResults(job) {
  const files = Array.isArray(job.files) ? job.files : [];
  fill("files", ...files.map((f) => el("li", {}, el("a", { href: fileURL(f) }, f))));
  if (files.includes("summary.md")) {
    fill("summary-link", el("a", { href: fileURL("summary.md") }, "the full summary (summary.md)"),
         files.includes("profile.html") ? " · " : "",
         files.includes("profile.html") ? el("a", { href: fileURL("profile.html") }, "the profile page with the Nsight Compute diagnosis") : "");
  }
  const plots = PLOTS.filter(([name]) => files.includes(name));
  fill("plots", ...(plots.length
    ? plots.map(([name, alt]) => el("figure", {}, el("img", { src: fileURL(name), alt: alt }), el("figcaption", { class: "muted" }, alt)))
    : [el("p", { class: "muted" }, "no plots: nothing was timed or profiled (graded without a GPU, or no stage passed)")]));
  if (files.includes("grading.json")) {
    try {
      const resp = await fetch(fileURL("grading.json"), { cache: "no-store" });
      const grading = await resp.json();
      fill("stages", table(COLUMNS, stageRows(grading)));
      fill("items", itemList(grading, "notPassed"));
      showPart("not-evaluated", itemList(grading, "notEvaluated"));
      showPart("hand", itemList(grading, "hand"));
    } catch (e) {
      fill("stages", el("p", { class: "bad" }, "cannot read grading.json: " + e.message));
    }
  }
  if (files.includes("summary.md")) {
    try {
      // The one HTML the page takes from the service: rendered there from summary.md with raw HTML escaped
      // and no images (grader/serve/views.py: summary_html), never a student's markup.
      document.getElementById("summary").innerHTML = (await getJSON(JOB_PATH + "/summary")).html;
    } catch (e) {
      fill("summary", el("p", { class: "bad" }, "cannot show summary.md: " + e.message));
    }
  }
  document.getElementById("results").hidden = false;
}

async function refresh() {
  let job;
  try {
    job = await getJSON(JOB_PATH);
  } catch (e) {
    fill("state", "unknown");
    fill("error", "cannot load the job: " + e.message);
    return setTimeout(refresh, 10000);
  }
  fill("error");
  const stateNode = fill("state", job.state);
  stateNode.className = "state " + (typeof job.state === "string" ? job.state.replace(/[^a-z]/g, "") : "");
  const detail = [];
  if (job.state === "queued" && typeof job.position === "number") detail.push("position " + job.position);
  if ((job.state === "queued" || job.state === "running") && typeof job.estimate_s === "number") {
    detail.push(duration(job.estimate_s) + " to go");  // the service's one estimate (grader/serve/views.py)
  }
  if (job.kind) detail.push(job.kind);
  if (job.created) detail.push("submitted " + ago(job.created));
  if (job.started) detail.push("started " + ago(job.started));
  if (job.finished) detail.push("finished " + ago(job.finished));
  fill("detail", detail.join(" · "));
  if (typeof job.score === "number") fill("score", el("strong", {}, job.score + " / " + job.max_score + " points"));
  const banner = document.getElementById("no-gpu");
  banner.hidden = !job.without_gpu;
  if (job.without_gpu) {
    fill("no-gpu", el("strong", {}, "Graded without a GPU"), " (" + job.without_gpu + "): correctness, speed, " +
         "Nsight Compute and measured items were not evaluated, so this score is not the GPU grading's.");
  }
  if (job.state === "failed") fill("error", "the grading failed: " + (job.error || "no reason given"));
  if ((job.state === "done" || job.state === "failed") && !shownResults) {
    shownResults = true;
    await showResults(job);
  }
  if (job.state !== "done" && job.state !== "failed") setTimeout(refresh, 3000);
}

fill("job-id", JOB_ID);
if (/^[A-Za-z0-9_-]{1,100}$/.test(JOB_ID)) refresh();
else fill("error", "this is not a job id");
