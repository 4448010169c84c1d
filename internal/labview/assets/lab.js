// The live lab page: decisions arrive on /lab/events (Server-Sent Events, one JSON decision per
// message); the counters are re-read from /lab/counters. Hand-written, no build step.
"use strict";

const feed = document.querySelector("#feed tbody");
const byEvent = document.querySelector("#by-event tbody");
const statusEl = document.getElementById("status");
const FEED_MAX = 300;     // rows kept on the page
const EVENTS_MAX = 50;    // callback events summarised
const ORDER = ["applied", "duplicate", "stale", "recorded", "rejected"];
let lastSeq = 0;
const events = new Map(); // event_id -> {row, counts, copies}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function outcomeSpan(outcome) {
  const s = document.createElement("span");
  s.className = "o o-" + outcome;
  s.textContent = outcome;
  return s;
}

function summary(counts) {
  return ORDER.filter(o => counts[o]).map(o => counts[o] + " " + o).join(", ");
}

function summarise(d) {
  let e = events.get(d.event_id);
  if (!e) {
    const tr = document.createElement("tr");
    tr.dataset.event = d.event_id;
    cell(tr, d.event_id);
    cell(tr, d.order_id || "");
    const copies = cell(tr, "", "num copies");
    const outs = cell(tr, "", "outcomes");
    if (d.guard && d.guard !== "guarded") outs.classList.add("twin");
    e = {row: tr, copies: copies, outs: outs, counts: {}, n: 0, guard: d.guard};
    events.set(d.event_id, e);
    byEvent.prepend(tr);
    while (byEvent.rows.length > EVENTS_MAX) {
      const old = byEvent.rows[byEvent.rows.length - 1];
      events.delete(old.dataset.event);
      old.remove();
    }
  }
  e.n++;
  e.counts[d.outcome] = (e.counts[d.outcome] || 0) + 1;
  e.copies.textContent = e.n;
  e.outs.textContent = summary(e.counts) + (e.guard && e.guard !== "guarded" ? " (unsafe twin " + e.guard + ")" : "");
}

function handle(d) {
  if (d.seq && d.seq <= lastSeq) return; // already shown (a reconnect sends what was missed)
  if (d.seq) lastSeq = d.seq;
  const tr = document.createElement("tr");
  tr.dataset.type = d.type;
  cell(tr, (d.at || "").substring(11, 23));
  cell(tr, d.type);
  cell(tr, "").appendChild(outcomeSpan(d.outcome));
  cell(tr, d.event_id || d.route || "");
  cell(tr, d.order_id || "");
  cell(tr, d.copy || "", "num");
  let detail = d.detail || "";
  if (d.count) detail = "×" + d.count + " " + detail;
  if (d.fence) detail = "fence " + d.fence + " " + detail;
  if (d.guard && d.guard !== "guarded") detail = "[" + d.guard + "] " + detail;
  cell(tr, detail);
  feed.prepend(tr);
  while (feed.rows.length > FEED_MAX) feed.deleteRow(feed.rows.length - 1);
  if (d.type === "callback" && d.event_id) summarise(d);
  countersSoon();
}

let countersTimer = null;
function countersSoon() {
  if (countersTimer) return;
  countersTimer = setTimeout(() => { countersTimer = null; refreshCounters(); }, 500);
}

function fillTable(id, rows, fn) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map(r => {
    const tr = document.createElement("tr");
    fn(r).forEach((v, i) => cell(tr, v, i > 0 ? "num" : ""));
    return tr;
  }));
}

async function refreshCounters() {
  try {
    const r = await fetch("/lab/counters", {cache: "no-store"});
    if (!r.ok) return;
    const c = await r.json();
    for (const k of ["received", "applied", "duplicate", "stale", "recorded", "rejected"]) {
      document.getElementById("cb-" + k).textContent = c.callbacks[k];
    }
    document.getElementById("ob-published").textContent = c.outbox.published;
    document.getElementById("ob-pending").textContent = c.outbox.pending;
    document.getElementById("pc-status").textContent = c.points_consumer;
    fillTable("stock", c.products || [], p => [p.id + " " + p.name, p.stock]);
    fillTable("balances", c.balances || [], b => [b.user, b.balance]);
  } catch (e) { /* the next decision or tick tries again */ }
}

function connect() {
  const es = new EventSource("/lab/events?since=" + lastSeq);
  es.onopen = () => { statusEl.textContent = "● live"; statusEl.className = "live"; };
  es.onmessage = m => handle(JSON.parse(m.data));
  es.onerror = () => {
    // Reconnect ourselves, asking for what came after the last decision shown.
    es.close();
    statusEl.textContent = "○ reconnecting…"; statusEl.className = "down";
    setTimeout(connect, 2000);
  };
}

const result = document.getElementById("control-result");
async function call(method, url, body) {
  try {
    const r = await fetch(url, {method: method, headers: {"Content-Type": "application/json"},
      body: body === undefined ? undefined : JSON.stringify(body)});
    const text = await r.text();
    result.textContent = method + " " + url + " → " + r.status + "\n" + text;
    return r.ok ? JSON.parse(text) : null;
  } catch (e) {
    result.textContent = method + " " + url + " failed: " + e;
    return null;
  }
}

const chaosForm = document.getElementById("chaos-form");
function showChaos(c) {
  if (!c) return;
  for (const el of chaosForm.elements) {
    if (!el.name || !(el.name in c)) continue;
    if (el.type === "checkbox") el.checked = !!c[el.name]; else el.value = c[el.name];
  }
}
chaosForm.addEventListener("submit", async ev => {
  ev.preventDefault();
  const patch = {};
  for (const el of chaosForm.elements) {
    if (!el.name) continue;
    patch[el.name] = el.type === "checkbox" ? el.checked : Number(el.value);
  }
  showChaos(await call("PUT", "/lab/platform/chaos", patch));
});

document.getElementById("replay-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const f = ev.target.elements;
  call("POST", "/lab/platform/replay", {payment_id: f.payment_id.value.trim(),
    times: Number(f.times.value), parallel: f.parallel.checked});
});

document.getElementById("earn-form").addEventListener("submit", async ev => {
  ev.preventDefault();
  await call("POST", "/lab/earn", {user: ev.target.elements.user.value});
  refreshCounters();
});

for (const d of JSON.parse(document.getElementById("backlog").textContent || "[]")) handle(d);
connect();
fetch("/lab/platform/chaos", {cache: "no-store"}).then(r => r.ok ? r.json() : null).then(showChaos).catch(() => {});
setInterval(refreshCounters, 5000);
