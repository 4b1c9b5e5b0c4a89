// The queue page: workers, queued jobs (positions, never ids), the class leaderboard.
"use strict";

function showQueue(q) {
  const workers = Array.isArray(q.workers) ? q.workers : [];
  fill("workers", workers.length
    ? table(["worker", "GPU", "state", "job started"],
            workers.map((w) => [w.name, w.gpu === null || w.gpu === undefined ? "-" : w.gpu, w.state, ago(w.job_started)]))
    : el("p", { class: "muted" }, "no worker has reported"));
  const queued = Array.isArray(q.queued) ? q.queued : [];
  fill("queue", queued.length
    ? table(["position", "kind", "submitted", "expected done in"],
            queued.map((j) => [j.position, j.kind, ago(j.created), duration(j.estimate_s) || "-"]))
    : el("p", { class: "muted" }, "no job is waiting"));
  const mean = typeof q.mean_grade_s === "number" ? ", mean grading time " + duration(q.mean_grade_s) : "";
  fill("totals", (q.running || 0) + " running, " + queued.length + " queued, " +
       (q.done_last_hour || 0) + " done in the last hour" + mean);
}

function showLeaderboard(board) {
  const stages = Array.isArray(board.stages) ? board.stages : [];
  const rows = Array.isArray(board.rows) ? board.rows : [];
  if (!rows.length) {
    fill("leaderboard", el("p", { class: "muted" }, "no graded job with a timed stage yet"));
    return;
  }
  const columns = ["#", "name"];
  for (const s of stages) columns.push(s + " TFLOP/s", s + " % of cuBLAS");
  const body = rows.map((r, i) => {
    const cells = [i + 1, r.name];
    for (const s of stages) {
      const v = r[s] || {};
      cells.push(num(v.tflops, 2), num(v.pct_of_baseline, 1));
    }
    return cells;
  });
  fill("leaderboard", table(columns, body));
}

async function refresh() {
  try {
    const [q, board] = await Promise.all([getJSON("/queue"), getJSON("/leaderboard")]);
    showQueue(q);
    showLeaderboard(board);
    fill("error");
  } catch (e) {
    fill("error", "cannot load the queue: " + e.message);
  }
}

document.getElementById("lookup").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = document.getElementById("job-id").value.trim();
  if (/^[A-Za-z0-9_-]{8,64}$/.test(id)) window.location.href = "/jobs/" + encodeURIComponent(id);
  else fill("error", "a job id is letters, digits, '-' and '_'");
});

refresh();
setInterval(refresh, 5000);
