// foundryq console: a plain client of the gateway's API. fetch for calls,
// EventSource for a run's events (resumed by the browser with
// Last-Event-ID after a dropped connection). Everything shown is set with
// textContent: run text is never parsed as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { token: sessionStorage.getItem("foundryq-token") || "", runID: "", source: null, listTimer: 0, queueTimer: 0 };
const TERMINAL = ["run.completed", "run.failed", "run.cancelled"];

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h["Authorization"] = "Bearer " + state.token;
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  let data = null;
  try { data = await resp.json(); } catch (e) { /* no body */ }
  if (resp.status === 401) showAuth(true);
  if (!resp.ok) {
    const err = (data && data.error) || { message: resp.statusText };
    const e = new Error((err.field ? err.field + ": " + err.reason : err.message) || ("HTTP " + resp.status));
    e.status = resp.status;
    throw e;
  }
  return data;
}

function showAuth(needed) {
  $("#auth").hidden = !needed;
  $("#conn").textContent = needed ? "a token is needed" : (state.token ? "signed in with a token" : "no authentication (development)");
}

// ---- run list ----

function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  return Math.round(s / 3600) + "h ago";
}

async function refreshList() {
  clearTimeout(state.listTimer);
  try {
    const data = await api("GET", "/v1/runs?limit=50");
    showAuth(false);
    const body = $("#runs tbody");
    body.replaceChildren();
    for (const r of data.runs) {
      const tr = document.createElement("tr");
      tr.dataset.runId = r.run_id;
      if (r.run_id === state.runID) tr.className = "current";
      const id = document.createElement("td"); id.textContent = r.run_id; id.title = r.run_id;
      const st = document.createElement("td"); const badge = document.createElement("span");
      badge.className = "status " + r.status; badge.textContent = r.status; st.append(badge);
      if (r.queue_reason) badge.title = waitReason(r.queue_reason);
      const up = document.createElement("td"); up.textContent = ago(r.updated_at || r.created_at); up.className = "muted";
      tr.append(id, st, up);
      tr.addEventListener("click", () => { location.hash = "run=" + encodeURIComponent(r.run_id); });
      body.append(tr);
    }
    $("#runs-count").textContent = "(" + data.runs.length + ")";
  } catch (e) {
    if (e.status !== 401) $("#conn").textContent = "list: " + e.message;
  }
  state.listTimer = setTimeout(refreshList, 2000);
}

// ---- new run ----

function parseMetadata(text) {
  const md = {};
  for (const line of text.split("\n")) {
    const l = line.trim();
    if (!l) continue;
    const i = l.indexOf("=");
    if (i <= 0) throw new Error("metadata: want key=value, got " + JSON.stringify(l));
    md[l.slice(0, i).trim()] = l.slice(i + 1).trim();
  }
  return md;
}

async function startRun(ev) {
  ev.preventDefault();
  const out = $("#new-run-error");
  out.textContent = "";
  try {
    const req = { model: $("#model").value.trim(), input: $("#input").value };
    const md = parseMetadata($("#metadata").value);
    if (Object.keys(md).length) req.metadata = md;
    const tools = $("#tools").value.trim();
    if (tools) req.tools = JSON.parse(tools);
    const res = await api("POST", "/v1/runs", req);
    location.hash = "run=" + encodeURIComponent(res.run_id);
    refreshList();
  } catch (e) {
    out.textContent = e.message;
  }
}

// ---- one run ----

// waitReason says why a run a worker handed back waits (queue_reason).
function waitReason(reason) {
  if (reason === "concurrency_cap") return "waits: its fairness key is at its concurrency cap";
  if (reason === "token_budget") return "waits: its deployment's token budget is spent";
  return "waits: " + reason;
}

// queueText says where a queued run waits, from GET /v1/runs/{id}: its
// place in its lane as a worker told it, or why a worker handed it back.
function queueText(run) {
  if (run.queue_reason) return waitReason(run.queue_reason);
  const q = run.queue;
  if (!q) return "waiting for a worker";
  if (q.where === "lane") {
    let s = "waiting in lane " + q.priority + "/" + q.fairness_key + ": " +
      (q.position_capped ? "behind the first 1000" : "number " + q.position) + " of " + q.lane_waiting;
    if (q.higher_waiting) s += " \u00b7 " + q.higher_waiting + " runs of higher priority start first";
    return s;
  }
  if (q.where === "intake") return "waiting in the intake, about to join its lane";
  return "waiting for a worker";
}

// showQueue shows where the open run waits, every 2s while it is queued.
async function showQueue(id) {
  const queued = () => state.runID === id && $("#run-status").textContent === "queued";
  if (!queued()) return;
  try {
    const run = await api("GET", "/v1/runs/" + encodeURIComponent(id));
    if (queued() && run.status === "queued") $("#run-meta").textContent = queueText(run);
  } catch (e) {
    // The run's stream says what became of it; ask again.
  }
  if (queued()) state.queueTimer = setTimeout(() => showQueue(id), 2000);
}

function setStatus(status) {
  const el = $("#run-status");
  // A cancel is recorded: events that were already on their way do not
  // make the run look running again; only its terminal event ends it.
  if (status === "running" && el.textContent === "cancelling") return;
  el.textContent = status;
  el.className = "status " + status;
  $("#stop").disabled = ["cancelling", "completed", "failed", "cancelled"].includes(status);
}

// ---- runs that ask ----

// showAsked shows what a waiting run asks, each item with the controls
// that answer it: Approve / Deny for an MCP tool call, an output box for a
// function call. Text only: names and arguments come from the model.
function showAsked(ev) {
  setStatus("waiting");
  const box = $("#run-asked");
  box.replaceChildren();
  for (const item of ev.items || []) {
    const div = document.createElement("div");
    div.className = "asked";
    div.dataset.itemId = item.id;
    const what = document.createElement("p");
    what.textContent = item.kind === "approval"
      ? "Approve " + item.name + " on " + item.server_label + "? arguments " + item.arguments
      : "Function " + item.name + " wants its output; arguments " + item.arguments;
    div.append(what);
    if (item.kind === "approval") {
      for (const [label, approve] of [["Approve", true], ["Deny", false]]) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = approve ? "approve" : "deny";
        b.textContent = label;
        b.addEventListener("click", () => answer(div, { id: item.id, approve }));
        div.append(b);
      }
    } else {
      const out = document.createElement("textarea");
      out.rows = 2;
      out.className = "output";
      const b = document.createElement("button");
      b.type = "button";
      b.className = "send-output";
      b.textContent = "Send output";
      b.addEventListener("click", () => answer(div, { id: item.id, output: out.value }));
      div.append(out, b);
    }
    const note = document.createElement("span");
    note.className = "muted note";
    div.append(note);
    box.append(div);
  }
}

async function answer(div, body) {
  const id = state.runID;
  for (const b of div.querySelectorAll("button")) b.disabled = true;
  try {
    const reply = await api("POST", "/v1/runs/" + encodeURIComponent(id) + "/input", body);
    // The run's input.received may come before this reply: it has the last word.
    if (!div.dataset.received) div.querySelector(".note").textContent = reply.result === "accepted" ? "sent" : reply.result.replace("_", " ");
  } catch (e) {
    div.querySelector(".note").textContent = "not sent: " + e.message;
    for (const b of div.querySelectorAll("button")) b.disabled = false;
  }
}

function markAnswered(ev) {
  const div = [...document.querySelectorAll("#run-asked .asked")].find((d) => d.dataset.itemId === ev.input.id);
  if (div) {
    div.dataset.received = "1";
    for (const b of div.querySelectorAll("button")) b.disabled = true;
    div.querySelector(".note").textContent = ev.input.kind === "approval" ? (ev.input.approve ? "approved" : "denied") : "output received";
  }
}

// cancelText says what a cancel reply knows. cancelling is recorded, not
// confirmed: Foundry's outcome follows as the run's terminal event.
function cancelText(reply) {
  if (reply.result !== "cancelling") {
    return "cancel: " + reply.result + (reply.upstream_status ? " (Foundry: " + reply.upstream_status + ")" : "");
  }
  if (reply.unrecorded) {
    return "cancelling: the cancel could not be stored (the store is full); the run's owner was told. Press Stop again if the run does not end.";
  }
  return "cancelling: the cancel is recorded, not yet confirmed; Foundry's outcome follows here" +
    (reply.upstream_status ? " (Foundry: " + reply.upstream_status + ")" : "");
}

function appendText(text) {
  const box = $("#run-text");
  let last = box.lastChild;
  if (!last || last.nodeType !== Node.TEXT_NODE) { last = document.createTextNode(""); box.append(last); }
  last.appendData(text);
  box.scrollTop = box.scrollHeight;
}

// appendRefusal shows the model's refusal (refusal.delta) as text, in one
// element marked as a refusal (class "refusal", a "refused" label before
// it): the model declined and says why; that is not its answer.
function appendRefusal(text) {
  const box = $("#run-text");
  let el = box.lastChild;
  if (!el || el.nodeType !== Node.ELEMENT_NODE || !el.classList.contains("refusal")) {
    el = document.createElement("span");
    el.className = "refusal";
    el.title = "the model refused";
    el.append(document.createTextNode(""));
    box.append(el);
  }
  el.firstChild.appendData(text);
  box.scrollTop = box.scrollHeight;
}

function toolLabel(tool) {
  return [tool.server_label, tool.name].filter(Boolean).join("/") || tool.type;
}

// OUTPUT_SHOWN bounds the characters of a function tool's output shown
// inline; the worker's event carries at most 4 KiB of it (output_truncated
// when it cut more).
const OUTPUT_SHOWN = 160;

// outputText is a function tool's output as shown: its beginning, and a
// mark saying so when it is cut.
function outputText(ev) {
  const chars = Array.from(ev.output || "");
  const cut = chars.length > OUTPUT_SHOWN || ev.output_truncated;
  if (!cut) return "\u2192 " + chars.join("");
  const total = (ev.output_truncated ? "more than " : "") + chars.length;
  return "\u2192 " + chars.slice(0, OUTPUT_SHOWN).join("") + " \u2026 [truncated: " + Math.min(chars.length, OUTPUT_SHOWN) + " of " + total + " characters shown]";
}

// showTool shows a tool call inline, one chip per call updated as its
// events come: name, type (mcp: run by Foundry; function: called by the
// worker over NATS), status, and a function tool's output. Text only: the
// output comes from the tool's service.
function showTool(ev) {
  const box = $("#run-text");
  const tool = ev.tool || {};
  const id = "tool-" + (tool.call_id || ev.seq);
  let chip = document.getElementById(id);
  if (!chip) {
    chip = document.createElement("span");
    chip.id = id;
    box.append(chip);
  }
  const status = ev.type.split(".")[1];
  const type = tool.type || "mcp";
  chip.className = "tool " + status;
  chip.dataset.type = type;
  const mark = status === "started" ? "\u2699 " : status === "completed" ? "\u2713 " : "\u2717 ";
  const head = document.createElement("span");
  head.className = "tool-head";
  head.textContent = mark + toolLabel(tool) + " \u00b7 " + type + " \u00b7 " + status + (status === "started" ? " \u2026" : "") + (ev.error ? ": " + ev.error.message : "");
  const parts = [head];
  if (type === "function" && status === "completed") {
    const out = document.createElement("span");
    out.className = "tool-output";
    out.textContent = outputText(ev);
    parts.push(out);
  }
  chip.replaceChildren(...parts);
  box.scrollTop = box.scrollHeight;
}

function usageText(u) {
  if (!u) return "unknown";
  return "input " + u.input_tokens + ", output " + u.output_tokens + ", total " + u.total_tokens;
}

function showSummary(ev) {
  const rows = [];
  if (ev.type === "run.cancelled") {
    rows.push(["ended", "cancelled (" + ev.reason + ")"]);
    rows.push(["Foundry status", ev.upstream_status || "never reached Foundry"]);
    rows.push(["usage", ev.usage_unknown ? "unknown" : usageText(ev.usage)]);
  } else if (ev.type === "run.completed") {
    rows.push(["ended", ev.status + (ev.incomplete_reason ? " (" + ev.incomplete_reason + ")" : "")]);
    if (ev.refusal) rows.push(["refusal", "the model refused (its reason is above)"]);
    rows.push(["usage", usageText(ev.usage)]);
  } else {
    rows.push(["ended", "failed"]);
    rows.push(["error", ev.error ? ev.error.code + ": " + ev.error.message : "unknown"]);
  }
  if (ev.response_id) rows.push(["response", ev.response_id]);
  const dl = document.createElement("dl");
  for (const [k, v] of rows) {
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd"); dd.textContent = v;
    dl.append(dt, dd);
  }
  $("#run-summary").replaceChildren(dl);
}

function closeSource() {
  if (state.source) { state.source.close(); state.source = null; }
}

function openRun(id) {
  closeSource();
  state.runID = id;
  $("#empty").hidden = true;
  $("#run").hidden = false;
  $("#run-id").textContent = id;
  $("#run-text").replaceChildren();
  $("#run-summary").replaceChildren();
  $("#run-asked").replaceChildren();
  $("#run-meta").textContent = "";
  setStatus("queued");
  clearTimeout(state.queueTimer);
  showQueue(id);
  let url = "/v1/runs/" + encodeURIComponent(id) + "/events";
  if (state.token) url += "?access_token=" + encodeURIComponent(state.token);
  const es = new EventSource(url);
  state.source = es;
  es.addEventListener("run.started", (m) => {
    const ev = JSON.parse(m.data);
    setStatus("running");
    $("#run-meta").textContent = "response " + ev.response_id + " \u00b7 attempt " + ev.attempt + " \u00b7 worker " + ev.worker;
  });
  es.addEventListener("text.delta", (m) => { setStatus("running"); appendText(JSON.parse(m.data).text); });
  es.addEventListener("refusal.delta", (m) => { setStatus("running"); appendRefusal(JSON.parse(m.data).text); });
  for (const t of ["tool.started", "tool.completed", "tool.failed"]) {
    es.addEventListener(t, (m) => showTool(JSON.parse(m.data)));
  }
  es.addEventListener("input.required", (m) => showAsked(JSON.parse(m.data)));
  es.addEventListener("input.received", (m) => markAnswered(JSON.parse(m.data)));
  es.addEventListener("step.started", (m) => {
    const ev = JSON.parse(m.data);
    setStatus("running");
    $("#run-meta").textContent = "step " + ev.step + " \u00b7 response " + ev.response_id;
  });
  for (const t of TERMINAL) {
    es.addEventListener(t, (m) => {
      const ev = JSON.parse(m.data);
      setStatus(t === "run.completed" ? "completed" : t === "run.failed" ? "failed" : "cancelled");
      showSummary(ev);
      closeSource();
      refreshList();
    });
  }
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED && state.source === es) {
      $("#run-meta").textContent = "the event stream closed (no such run, or no access)";
    }
  });
}

async function stopRun() {
  const id = state.runID;
  $("#stop").disabled = true;
  try {
    const reply = await api("POST", "/v1/runs/" + encodeURIComponent(id) + "/cancel", { reason: "stop button in the console" });
    if (state.runID !== id) return;
    $("#run-meta").textContent = cancelText(reply);
    if (reply.result === "cancelling" && $("#run-status").textContent !== "cancelled") {
      setStatus("cancelling");
      if (reply.unrecorded) $("#stop").disabled = false; // nothing on record: let the user send it again
    }
  } catch (e) {
    $("#run-meta").textContent = "cancel failed: " + e.message;
    $("#stop").disabled = false;
  }
}

function route() {
  const m = /^#run=(.+)$/.exec(location.hash);
  if (m) {
    openRun(decodeURIComponent(m[1]));
  } else {
    closeSource();
    state.runID = "";
    $("#run").hidden = true;
    $("#empty").hidden = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("#token").value.trim();
    sessionStorage.setItem("foundryq-token", state.token);
    refreshList();
    route();
  });
  $("#new-run").addEventListener("submit", startRun);
  $("#stop").addEventListener("click", stopRun);
  window.addEventListener("hashchange", route);
  refreshList();
  route();
});
