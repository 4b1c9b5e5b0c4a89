// One job's page (/jobs/<id>) is rendered on the server (grader/serve/job_page.py) and reads whole without
// JavaScript. While the job is queued or running, this fetches the page again every few seconds and swaps
// its parts in, so the reader never reloads; the parts come from the service's own renderer, in which every
// value from a student is escaped, and are parsed as an inert document (no script in it runs).
"use strict";

const PARTS = ["state", "detail", "no-gpu", "score", "summary-link", "error", "results"];
const EVERY_MS = Number(document.body.dataset.refreshMs) || 3000; // serve.yaml's page_refresh_s

async function refresh() {
  let doc;
  try {
    const resp = await fetch(window.location.pathname, { cache: "no-store", headers: { Accept: "text/html" } });
    doc = new DOMParser().parseFromString(await resp.text(), "text/html");
  } catch (e) {
    document.getElementById("error").textContent = "cannot load the job: " + e.message;
    return setTimeout(refresh, 10000);
  }
  for (const id of PARTS) {
    const fresh = doc.getElementById(id);
    const here = document.getElementById(id);
    if (fresh && here) here.replaceWith(document.importNode(fresh, true));
  }
  const state = doc.body ? doc.body.dataset.state : "";
  document.body.dataset.state = state || "";
  if (state !== "done" && state !== "failed") setTimeout(refresh, EVERY_MS);
}

const now = document.body.dataset.state;
if (now === "queued" || now === "running") setTimeout(refresh, EVERY_MS);
