// The dashboard: polls /v1/dashboard and redraws. Data is built with DOM calls (never
// innerHTML), so nothing a node or customer named can run as script here. The admin key, when
// given, stays in this tab's sessionStorage and goes out only as the x-admin-key header.
"use strict";

const API = "/v1/dashboard";
const KEY = "mesh-admin-key";
const thumbnails = new Map(); // thumbnail URL -> blob: URL (results never change)
let timer = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value; else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function short(hex) { return hex && hex.length > 14 ? hex.slice(0, 8) + "…" + hex.slice(-4) : (hex || "—"); }
function pct(x) { return x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %"; }
function num(x, digits = 3) { return x === null || x === undefined ? "—" : Number(x).toFixed(digits); }
function seconds(s) {
  if (s === null || s === undefined) return "—";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function tokens(wei) { // decimal string of 18-decimal units, shown to 4 places
  if (wei === null || wei === undefined) return "—";
  const value = BigInt(wei), unit = 10n ** 18n;
  const whole = value / unit, frac = (value % unit) * 10000n / unit;
  return whole.toString() + "." + frac.toString().padStart(4, "0");
}

function sparkline(values) {
  const w = 90, h = 22, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", w); svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  if (!values.length) return svg;
  const step = values.length > 1 ? w / (values.length - 1) : 0;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - v * (h - 4)).toFixed(1)}`);
  const line = document.createElementNS(ns, values.length > 1 ? "polyline" : "circle");
  if (values.length > 1) {
    line.setAttribute("points", points.join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#2563eb"); line.setAttribute("stroke-width", "1.5");
  } else {
    const [x, y] = points[0].split(",");
    line.setAttribute("cx", x || 2); line.setAttribute("cy", y); line.setAttribute("r", "2"); line.setAttribute("fill", "#2563eb");
  }
  svg.append(line);
  return svg;
}

function filled(fraction) { // CSSOM, not a style attribute: the page's CSP forbids those
  const inner = el("span");
  inner.style.width = `${(100 * fraction).toFixed(1)}%`;
  return inner;
}

function bar(fraction) { return el("span", { class: "bar", title: pct(fraction) }, filled(fraction)); }

function fill(table, rows) {
  const body = document.querySelector(`#${table} tbody`);
  body.replaceChildren(...rows);
  if (!rows.length) {
    const span = document.querySelectorAll(`#${table} thead th`).length;
    body.append(el("tr", {}, el("td", { colspan: span, class: "muted" }, "none yet")));
  }
}

function figure(label, value, metric) {
  return el("div", { class: "figure", title: metric }, el("small", {}, label), el("b", {}, value), el("small", {}, metric));
}

function renderService(s) {
  document.getElementById("service").replaceChildren(
    figure("time to assignment (mean)", seconds(s.time_to_assignment_mean_s), "mesh_time_to_assignment_seconds"),
    figure("time to assignment (p50)", seconds(s.time_to_assignment_p50_s), "mesh_time_to_assignment_p50_seconds"),
    figure("time to assignment (p99)", seconds(s.time_to_assignment_p99_s), "mesh_time_to_assignment_p99_seconds"),
    figure("tasks re-run", pct(s.rerun_share) + ` (${s.retries}/${s.placements})`, "mesh_task_rerun_share"),
    figure("node failures", `${s.node_failures} (${num(s.node_failures_per_hour, 2)}/h)`, "mesh_node_failures_per_hour"),
    figure("upload errors", s.upload_errors, "mesh_upload_errors_total"),
    figure("done vs settled divergence", s.divergence, "mesh_execution_settlement_divergence_total"),
    figure("settlement lag (mean)", seconds(s.settlement_lag_mean_s), "mesh_settlement_lag_seconds"));
}

function renderNodes(nodes) {
  fill("nodes", nodes.map((n) => el("tr", { "data-node": n.node_id },
    el("td", {}, el("code", {}, n.node_id)),
    el("td", { title: n.provider }, el("code", {}, short(n.provider))),
    el("td", {}, `${n.gpu_model} · ${n.region}`),
    el("td", { class: "state-" + n.health }, n.health + (n.draining ? " (draining)" : "")),
    el("td", {}, n.tier),
    el("td", { class: "num" }, num(n.rs)),
    el("td", { title: n.rs_history.map((v) => v.toFixed(3)).join(" ") }, sparkline(n.rs_history)),
    el("td", { class: "num" }, n.stake_bonded === null ? "chain unreachable" : `${tokens(n.stake_bonded)} (${tokens(n.stake_free)})`),
    el("td", { class: "num" }, pct(n.uptime_1d)),
    el("td", { class: "num" }, pct(n.uptime_7d)),
    el("td", { class: "num" }, `${n.verification_passed} / ${n.verification_failed}`),
    el("td", { class: "num" }, `${tokens(n.earned)} (${tokens(n.pending_earnings)})`),
    el("td", { class: "num" }, n.last_heartbeat_s === null ? "never" : seconds(n.last_heartbeat_s) + " ago"))));
}

async function thumbnailImage(url, alt) {
  let local = thumbnails.get(url);
  if (!local) {
    const response = await fetch(url, { headers: { "x-admin-key": sessionStorage.getItem(KEY) || "" } });
    if (!response.ok) return el("div", { class: "placeholder" }, "no thumbnail");
    local = URL.createObjectURL(await response.blob());
    thumbnails.set(url, local);
  }
  return el("img", { src: local, alt, class: "thumbnail" });
}

function renderFrame(frame) {
  // A tiled frame's tiles are horizontal strips, tile 0 on top: stacked, they are the frame.
  let picture = el("div", { class: "placeholder" }, frame.progress >= 1 ? "done" : pct(frame.progress));
  if (frame.tiles.every((t) => t.thumbnail)) {
    const stack = el("div", { class: "stack" });
    Promise.all(frame.tiles.map((t) => thumbnailImage(t.thumbnail, `frame ${frame.frame} tile ${t.tile}`)))
      .then((images) => { stack.replaceChildren(...images); picture.replaceWith(stack); picture = stack; });
  }
  const tiles = el("div", { class: "tiles" }, ...frame.tiles.map((t) =>
    el("span", { class: "tile", title: `tile ${t.tile}: ${t.status} ${pct(t.progress)} on ${t.node_id || "—"} (attempt ${t.attempts})` },
      filled(t.progress))));
  return el("div", { class: "frame", "data-frame": frame.frame }, picture,
    el("div", {}, `frame ${frame.frame} · ${frame.tiles.length} tile${frame.tiles.length > 1 ? "s" : ""}`), tiles);
}

function renderJobs(jobs) {
  const box = document.getElementById("jobs");
  if (!jobs.length) { box.replaceChildren(el("p", { class: "muted" }, "no jobs yet")); return; }
  box.replaceChildren(...jobs.map((j) => el("div", { class: "job", "data-job": j.job_id, "data-status": j.status },
    el("h3", {}, el("code", { title: j.job_id }, short(j.job_id)), ` · ${j.status} · `, bar(j.progress),
      ` ${j.tasks_done}/${j.tasks} tasks · ETA ${j.eta_s === null ? "—" : seconds(j.eta_s)}`),
    j.reason ? el("p", { class: "reason" }, `stopped: ${j.reason}`) : null,
    el("div", { class: "frames" }, ...j.frames.map(renderFrame)))));
}

function renderSettlements(rows) {
  fill("settlements", rows.map((s) => el("tr", {},
    el("td", {}, el("code", { title: s.job_id }, short(s.job_id))), el("td", {}, s.status),
    el("td", { title: s.tx_hash || "" }, el("code", {}, short(s.tx_hash))),
    el("td", { class: "num" }, s.gas_used === null ? "—" : s.gas_used.toLocaleString()),
    el("td", { class: "num" }, s.providers), el("td", { class: "num" }, tokens(s.paid)))));
}

function renderSlashes(rows) {
  fill("slashes", rows.map((s) => el("tr", { "data-slash": s.slash_id ?? "" },
    el("td", { class: "num", title: `decision ${s.decision_id}` }, s.slash_id === null ? "—" : s.slash_id),
    el("td", {}, el("code", {}, s.node_id)), el("td", { title: s.provider }, el("code", {}, short(s.provider))),
    el("td", {}, s.reason), el("td", { class: "num" }, tokens(s.amount)),
    el("td", { class: s.chain_note ? "prose" : "" }, s.chain_status === null ? "epoch proof"
      : s.chain_status + (s.tx_hash ? ` ${short(s.tx_hash)}` : "") + (s.chain_note ? `: ${s.chain_note}` : "")),
    el("td", {}, s.detail))));
}

function renderDisputes(rows) {
  fill("disputes", rows.map((d) => el("tr", { "data-dispute": d.dispute_id },
    el("td", {}, d.dispute_id),
    el("td", {}, d.kind === "slash" ? `slash ${d.slash_id}` : el("code", { title: d.job_id || "" }, short(d.job_id))),
    el("td", { title: d.opener }, el("code", {}, short(d.opener))),
    el("td", { title: d.respondent }, el("code", {}, short(d.respondent))),
    el("td", { class: "num" }, tokens(d.bond)), el("td", { class: "num" }, tokens(d.frozen_amount)),
    el("td", {}, d.status), el("td", {}, new Date(d.ruling_deadline * 1000).toLocaleString()),
    el("td", { title: `${d.opened_tx} ${d.ruled_tx || ""}` }, el("code", {}, short(d.opened_tx)),
      d.ruled_tx ? " · " : "", d.ruled_tx ? el("code", {}, short(d.ruled_tx)) : ""),
    el("td", { class: "prose" }, d.outcome))));
}

function renderContested(rows) {
  fill("contested", rows.map((d) => el("tr", {},
    el("td", {}, d.commitment_id), el("td", {}, el("code", { title: d.job_id }, short(d.job_id))),
    el("td", {}, d.task_id), el("td", {}, el("code", {}, d.node_id)), el("td", {}, d.status),
    el("td", { title: d.evidence || "" }, el("code", {}, short(d.evidence))), el("td", {}, d.detail))));
}

async function refresh() {
  const key = sessionStorage.getItem(KEY);
  const error = document.getElementById("error");
  let delay = 2000;
  try {
    const response = await fetch(API, { headers: key ? { "x-admin-key": key } : {}, cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error ? `${body.error.code}: ${body.error.message}` : response.statusText);
    renderService(body.service); renderNodes(body.nodes); renderJobs(body.jobs);
    renderSettlements(body.settlements); renderSlashes(body.slashes); renderDisputes(body.disputes); renderContested(body.contested);
    document.getElementById("freshness").textContent =
      `updated ${new Date(body.generated_at * 1000).toLocaleTimeString()}${body.admin ? " · admin view" : ""}`;
    document.body.dataset.generatedAt = body.generated_at;
    error.hidden = true;
    delay = 1000 * body.refresh_s;
  } catch (exc) {
    error.textContent = `cannot refresh: ${exc.message}; retrying`;
    error.hidden = false;
  }
  timer = setTimeout(refresh, delay);
}

document.getElementById("admin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = document.getElementById("admin-key").value.trim();
  if (value) sessionStorage.setItem(KEY, value); else sessionStorage.removeItem(KEY);
  clearTimeout(timer);
  refresh();
});
refresh();
