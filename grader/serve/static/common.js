// Used by index.html (the job page is rendered on the server: grader/serve/job_page.py). Every value that
// came from the service (and so possibly from a student: names, file names) enters the page as textContent,
// never as HTML.
"use strict";

const API = "/api/v1";

async function getJSON(path) {
  const resp = await fetch(API + path, { cache: "no-store", headers: { Accept: "application/json" } });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const why = body && typeof body.error === "string" ? body.error : "HTTP " + resp.status;
    throw new Error(why);
  }
  return body;
}

// el("td", {class: "x"}, "text", childNode, ...): strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(columns, rows) {
  const head = el("tr", {}, ...columns.map((c) => el("th", {}, c)));
  const body = rows.map((r) => el("tr", {}, ...r.map((c) => (c instanceof Node && c.tagName === "TD") ? c : el("td", {}, c))));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
}

function fill(id, ...children) {
  const node = document.getElementById(id);
  node.replaceChildren(...children);
  return node;
}

function num(x, digits) {
  return typeof x === "number" && isFinite(x) ? x.toFixed(digits) : "-";
}

function ago(iso) {
  if (!iso) return "-";
  const t = Date.parse(iso);
  if (isNaN(t)) return String(iso);
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 90) return s + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

// An estimate as people read it; the same rule as grader/serve/views.py: about().
function duration(seconds) {
  if (typeof seconds !== "number" || !isFinite(seconds)) return "";
  return seconds < 90 ? "~" + Math.round(Math.max(seconds, 0)) + " s" : "~" + Math.round(seconds / 60) + " min";
}
