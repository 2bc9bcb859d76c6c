/* forum's dashboard: plain JavaScript, no dependencies, served by the
 * daemon from inside its binary. Every call carries the token from this
 * tab's session storage in the Authorization header; the live views read
 * GET /events through fetch (an EventSource cannot send that header).
 * The inclusion check recomputes the entry's hash, the Merkle path and the
 * checkpoint's signature here, with Web Crypto: it trusts the daemon for
 * nothing but the bytes it is checking. */
"use strict";

const TOKEN_KEY = "forum.token";
const VKEY_KEY = "forum.vkey";
const main = document.getElementById("main");

/* ---- small helpers ---------------------------------------------------- */

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  /* a body may scroll: reachable by keyboard */
  if (tag === "pre") e.tabIndex = 0;
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function localTime(tsUs) {
  if (typeof tsUs !== "number") return "";
  const d = new Date(tsUs / 1000);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
    `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function preview(s, n = 80) {
  s = String(s ?? "").replace(/\s+/g, " ");
  return s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
}

function badge(state) {
  return el("span", { class: `badge st-${state}`, "data-state": state }, state);
}

function duration(ms) {
  if (typeof ms !== "number") return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

function pretty(v) {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

/* ---- the token --------------------------------------------------------- */

/* A link from `forum dashboard` carries #token=...&vkey=... once: it goes
 * into session storage (the verifier key, not a secret, into local
 * storage) and leaves the address bar and the history at once. */
function takeFragment() {
  const h = location.hash;
  if (!h.startsWith("#token=")) return;
  const q = new URLSearchParams(h.slice(1));
  if (q.get("token")) sessionStorage.setItem(TOKEN_KEY, q.get("token"));
  if (q.get("vkey")) localStorage.setItem(VKEY_KEY, q.get("vkey"));
  history.replaceState(null, "", location.pathname + "#/runs");
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function showLogin(msg) {
  stopStreams();
  stopNav();
  document.getElementById("login").hidden = false;
  document.getElementById("signout").hidden = true;
  document.getElementById("login-error").textContent = msg || "";
  document.getElementById("token-input").focus();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin("");
}

class ApiError extends Error {
  constructor(status, code, msg) {
    super(msg);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body, asText) {
  const opts = { method, headers: { Authorization: `Bearer ${token()}` } };
  // every write is application/json, with a body or none: the daemon
  // refuses any other (what a cross-site form would send)
  if (method !== "GET") opts.headers["Content-Type"] = "application/json";
  if (body !== undefined) opts.body = JSON.stringify(body);
  const r = await fetch(path, opts);
  const text = await r.text();
  let j = null;
  try { j = text && !(asText && r.ok) ? JSON.parse(text) : null; } catch (e) { j = null; }
  if (r.status === 401) {
    signOut();
    document.getElementById("login-error").textContent =
      "The daemon refused the token.";
    throw new ApiError(401, "unauthorized", "unauthorized");
  }
  if (!r.ok) {
    throw new ApiError(r.status, j && j.code, (j && j.error) || text);
  }
  return asText ? text : j;
}

/* ---- the live event stream ---------------------------------------------- */

const streams = new Set();

/* Follows GET /events?query, calling onEvent({id, kind, entry}) for each
 * event; reconnects with Last-Event-ID after a drop (a daemon restart
 * loses nothing). Returns a stop function. */
function follow(query, onEvent, opts) {
  const st = { stopped: false, ctl: null, last: null, onState: opts && opts.onState };
  if (!(opts && opts.keep)) streams.add(st);
  const say = (state) => { if (st.onState) st.onState(state); };
  async function run() {
    while (!st.stopped) {
      st.ctl = new AbortController();
      try {
        const headers = { Authorization: `Bearer ${token()}` };
        if (st.last !== null) headers["Last-Event-ID"] = String(st.last);
        const r = await fetch(`/events${query}`, { headers, signal: st.ctl.signal });
        if (r.status === 401) { signOut(); return; }
        if (!r.ok) throw new Error(`events: ${r.status}`);
        say("live");
        const rd = r.body.getReader();
        const dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await rd.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const ev = { id: null, kind: null, entry: null };
            for (const line of block.split("\n")) {
              if (line.startsWith("id: ")) ev.id = Number(line.slice(4));
              else if (line.startsWith("event: ")) ev.kind = line.slice(7);
              else if (line.startsWith("data: ")) ev.entry = JSON.parse(line.slice(6));
            }
            if (ev.id !== null) {
              st.last = ev.id;
              try { onEvent(ev); } catch (e) { console.error(e); }
            }
          }
        }
      } catch (e) {
        if (st.stopped) return;
      }
      say("reconnecting");
      await new Promise((res) => setTimeout(res, 1000));
    }
  }
  run();
  return () => {
    st.stopped = true;
    if (st.ctl) st.ctl.abort();
    streams.delete(st);
  };
}

function stopStreams() {
  for (const st of [...streams]) {
    st.stopped = true;
    if (st.ctl) st.ctl.abort();
  }
  streams.clear();
}

/* ---- the page's own stream: the one live/offline indicator and the
 * count of gates waiting in the navigation. It lives while signed in,
 * across views; "live" means exactly this: the page holds an open event
 * stream to the daemon. */

let navStop = null;

function setLive(state) {
  const live = document.getElementById("live");
  live.className = `live ${state === "live" ? "on" : "off"}`;
  live.textContent = state;
}

async function loadGateCount() {
  const c = document.getElementById("gates-count");
  try {
    const g = await api("GET", "/gates");
    const n = (g.gates || []).length;
    c.textContent = String(n);
    c.setAttribute("aria-label", `${n} gate${n === 1 ? "" : "s"} waiting`);
    c.hidden = n === 0;
  } catch (e) { /* the indicator says when the daemon is away */ }
}

function startNav() {
  if (navStop) return;
  loadGateCount();
  loadCampaignCount();
  const gates = debounce(loadGateCount, 250), camps = debounce(loadCampaignCount, 250);
  navStop = follow("?kind=gate_requested,gate_approved,gate_edited,gate_rejected,gate_expired,campaign_declared",
    (ev) => ((ev.entry && ev.entry.kind) === "campaign_declared" ? camps : gates)(),
    { keep: true, onState: setLive });
}

function stopNav() {
  if (navStop) navStop();
  navStop = null;
  setLive("offline");
}

/* Brings a result the user asked for into view, and the focus with it. */
function reveal(node) {
  const h = node.querySelector("h2, h3") || node;
  if (!h.hasAttribute("tabindex")) h.setAttribute("tabindex", "-1");
  node.scrollIntoView({ block: "start" });
  h.focus({ preventScroll: true });
}

/* Calls fn at most every ms (the last call wins). */
function debounce(fn, ms) {
  let t = null;
  return () => {
    if (t) return;
    t = setTimeout(() => { t = null; fn(); }, ms);
  };
}

/* ---- views ------------------------------------------------------------- */

const RUN_KINDS = "request,answer,budget,stop,error,gate_requested," +
  "gate_approved,gate_edited,gate_rejected,gate_expired";

async function viewRuns() {
  const box = el("div", {});
  const stateSel = el("select", { id: "run-state" },
    ["", "running", "waiting", "done", "failed", "budget", "stopped", "cancelled",
      "rejected", "interrupted"].map((s) => el("option", { value: s }, s || "any state")));
  main.replaceChildren(el("h2", {}, "Runs"),
    el("div", { class: "pager" }, el("label", { for: "run-state" }, "State"), stateSel), box);
  async function load() {
    const q = stateSel.value ? `?state=${encodeURIComponent(stateSel.value)}` : "";
    const r = await api("GET", `/runs${q}`);
    const rows = (r.runs || []).map((x) => x.type === "gateway_session" ? sessionRow(x) :
      el("tr", { class: "link", "data-run": x.run, onclick: () => { location.hash = `#/run/${x.run}`; } },
        el("td", { class: "num" }, el("a", { href: `#/run/${x.run}` }, x.run)), el("td", {}, badge(x.state)),
        el("td", {}, preview(x.request, 90)), el("td", {}, x.via || ""),
        el("td", {}, localTime(x.started_ts)), el("td", { class: "num" }, x.entries)));
    box.replaceChildren(rows.length
      ? el("table", { id: "runs" }, el("tr", {}, ["run", "state", "request", "via",
        "started (local)", "entries"].map((h) => el("th", {}, h))), rows)
      : el("p", { class: "dim", id: "runs-empty" }, "No runs yet. Start one: forum run start \"...\""));
  }
  stateSel.addEventListener("change", load);
  await load();
  follow(`?kind=${RUN_KINDS},gateway_call`, debounce(load, 250));
}

/* ---- the model gateway's sessions -------------------------------------- */

function sessionHref(name) {
  return `#/run/session:${encodeURIComponent(name)}`;
}

function tokensText(t) {
  return t ? `tokens ${t.input ?? "?"} in, ${t.output ?? "?"} out` : "";
}

/* A gateway session's row in the runs table (GET /runs lists it). */
function sessionRow(x) {
  const n = (v, w) => `${v} ${w}${v === 1 ? "" : "s"}`;
  return el("tr", { class: "link", "data-session": x.session, onclick: () => { location.hash = sessionHref(x.session); } },
    el("td", { class: "num" }, el("a", { href: sessionHref(x.session) }, x.id)), el("td", {}, badge("gateway")),
    el("td", {}, `${n(x.calls, "call")}, ${n(x.errors, "error")}, ${tokensText(x.tokens)}; ${(x.models || []).join(", ")}`),
    el("td", {}, x.headerless ? "gateway (no session header)" : "gateway"),
    el("td", {}, localTime(x.started_ts)), el("td", { class: "num" }, x.entries));
}

/* A gateway call (a step of GET /gateway/sessions/NAME) as the timeline
 * draws it: one bar, placed by its start and latency, red when it failed. */
function gatewayStep(x, i) {
  const st = { kind: "model", name: `call ${i + 1}: ${x.model || "?"}`, start: x.start_ts, end: x.end_ts,
    ok: x.ok, entries: x.entries || [x.seq], key: x.seq, raw: x };
  st.dur = durText(st);
  const tk = x.tokens ? `, ${tokensText(x.tokens)}` : "";
  st.title = `${st.name}: gateway call (${x.model || "?"}), ${st.dur}${tk}, status ${x.status}` +
    (x.ok === false ? `, failed${x.error_class ? ` (${x.error_class})` : ""}` : "");
  return st;
}

async function viewSession(name) {
  const head = el("div", {});
  const tl = timelineBox(`gateway session ${name}`);
  main.replaceChildren(el("h2", {}, `Gateway session ${name}`), head, tl.node);
  async function load() {
    let r;
    try {
      r = await api("GET", `/gateway/sessions/${encodeURIComponent(name)}`);
    } catch (e) {
      head.replaceChildren(el("p", { class: "error" }, e.message));
      return;
    }
    head.replaceChildren(el("div", { class: "card", id: "session-head", "data-calls": r.calls }, el("dl", { class: "kv" },
      el("dt", {}, "session"), el("dd", {}, r.headerless ? `${r.session} (calls of that UTC day without an X-Forum-Session header)` : r.session),
      el("dt", {}, "calls"), el("dd", {}, r.calls, r.truncated ? ` (the first ${r.steps.length} drawn)` : ""),
      el("dt", {}, "errors"), el("dd", {}, r.errors),
      el("dt", {}, "tokens"), el("dd", {}, `${r.tokens.input} in, ${r.tokens.output} out`),
      el("dt", {}, "models"), el("dd", {}, (r.models || []).join(", ")),
      el("dt", {}, "started"), el("dd", {}, localTime(r.started_ts)),
      el("dt", {}, "duration"), el("dd", {}, duration(r.duration_ms)),
      el("dt", {}, "export"), el("dd", { class: "mono" }, `forum export otel ${r.id}`))));
    tl.draw((r.steps || []).map(gatewayStep), true);
  }
  await load();
  follow("?kind=gateway_call", debounce(load, 200));
}

function taskBox(t, onPick) {
  return el("button", {
    type: "button", class: `task st-${t.state || "pending"}`, "data-task": t.id,
    "data-state": t.state || "pending", onclick: () => onPick(t),
  }, el("div", { class: "tid" }, t.id), el("div", { class: "agent" }, t.agent || ""),
  badge(t.state || "pending"));
}

function taskDetail(t) {
  const part = (name, p) => p ? el("div", {},
    el("h3", {}, `${name} `, el("span", { class: "dim mono" }, `seq ${p.seq}, ${localTime(p.ts)}`)),
    el("pre", {}, pretty(p.body ?? "(no body)"))) : null;
  return el("div", { class: "card", id: "task-detail" },
    el("h2", {}, `Task ${t.id} `, badge(t.state || "pending")),
    el("p", {}, t.instruction || ""),
    part("task", t.task), part("result", t.result), part("verdict", t.verdict),
    (t.escalations || []).map((e, i) => part(`escalation ${i + 1}`, e)),
    (t.tool_calls || []).map((e, i) => part(`tool call ${i + 1}`, e)));
}

/* A gate waiting for a decision; tasks (id -> task of run_show), when
 * given, fill the edit boxes with the instructions as planned. */
async function gateCard(g, tasks) {
  const approver = "dashboard";
  const status = el("p", { class: "dim" });
  const edits = {};
  const editBox = el("div", { hidden: true },
    (g.tasks || []).map((t) => {
      const id = typeof t === "string" ? t : t.id;
      const planned = tasks && tasks.get(id);
      const ta = el("textarea", { "data-edit": id },
        (planned && planned.instruction) || (typeof t === "string" ? "" : t.instruction || ""));
      edits[id] = ta;
      return el("label", {}, `Instruction for ${id}`, ta);
    }),
    el("button", { type: "button", class: "primary", "data-act": "edit", onclick: () => act("edit") },
      "Approve with these instructions"));
  const reason = el("input", { placeholder: "why (for reject)", "aria-label": "reason for rejecting", "data-reason": true });
  const act = async (what) => {
    status.textContent = `${what}\u2026`;
    const body = { run_seq: g.run_seq, wave: g.wave, approver };
    try {
      if (what === "reject") {
        body.reason = reason.value || "rejected from the dashboard";
        await api("POST", "/gate/reject", body);
      } else if (what === "edit") {
        body.edits = {};
        for (const [id, ta] of Object.entries(edits)) body.edits[id] = ta.value;
        await api("POST", "/gate/edit", body);
      } else {
        await api("POST", "/gate/approve", body);
      }
      status.className = "ok";
      status.textContent = `${what}: recorded`;
    } catch (e) {
      status.className = "error";
      status.textContent = `${what}: ${e.message}`;
    }
  };
  return el("div", { class: "card gate", "data-gate-run": g.run_seq, "data-gate-wave": g.wave },
    el("h3", {}, `Gate before wave ${g.wave} of run ${g.run_seq}`),
    el("p", {}, g.question || ""),
    el("p", { class: "dim" }, `tasks: ${(g.tasks || []).map((t) => (typeof t === "string" ? t : t.id)).join(", ")}`,
      g.deadline ? `; deadline ${localTime(Date.parse(g.deadline) * 1000)} (then ${g.on_expiry || "reject"})` : ""),
    el("div", { class: "pager" },
      el("button", { type: "button", class: "primary", "data-act": "approve", onclick: () => act("approve") }, "Approve"),
      el("button", { type: "button", "data-act": "edit-open", onclick: () => { editBox.hidden = !editBox.hidden; } }, "Edit\u2026"),
      reason,
      el("button", { type: "button", class: "danger", "data-act": "reject", onclick: () => act("reject") }, "Reject")),
    editBox,
    status);
}

async function viewRun(id) {
  const head = el("div", {});
  const graph = el("div", {});
  const gates = el("div", {});
  const detail = el("div", {});
  const tl = timelineBox(`run ${id}`);
  main.replaceChildren(el("h2", {}, `Run ${id}`), head, gates, tl.node, graph, detail);
  let picked = null;
  async function load() {
    let r;
    try {
      r = await api("GET", `/runs/${id}/show`);
    } catch (e) {
      head.replaceChildren(el("p", { class: "error" }, e.message));
      return;
    }
    head.replaceChildren(el("div", { class: "card" }, el("dl", { class: "kv" },
      el("dt", {}, "state"), el("dd", { id: "run-state-badge" }, badge(r.state)),
      el("dt", {}, "request"), el("dd", {}, r.request || ""),
      el("dt", {}, "route"), el("dd", {}, r.route ? `${r.route.lane} (${r.route.by})` : "\u2014"),
      el("dt", {}, "started"), el("dd", {}, localTime(r.started_ts)),
      el("dt", {}, "duration"), el("dd", {}, duration(r.duration_ms)),
      el("dt", {}, "entries"), el("dd", {}, r.entries,
        " ", el("a", { href: `#/ledger/run/${id}` }, "in the ledger")),
      r.budget ? [el("dt", {}, "budget"), el("dd", {}, pretty(r.budget))] : null,
      el("dt", {}, "answer"), el("dd", { id: "run-answer" },
        r.answer ? el("pre", {}, r.answer.text ?? pretty(r.answer)) : el("span", { class: "dim" }, "not yet")),
      r.intent ? [el("dt", {}, "intent judge"), el("dd", { id: "run-intent" },
        r.intent.covers ? `covers ${r.intent.covers}` +
          ((r.intent.missing || []).length ? ` (missing: ${r.intent.missing.join("; ")})` : "")
          : `not run (${r.intent.skipped || "no verdict"})`)] : null,
      r.retries ? [el("dt", {}, "retries"), el("dd", {}, String(r.retries))] : null,
      (r.checkpoints || []).length ? [el("dt", {}, "checkpoints"), el("dd", {},
        r.checkpoints.map((c) => el("div", { class: "mono" }, `wave ${c.wave}: size ${c.size} ${c.root}`)))] : null)));
    tl.draw((r.steps || []).map(runStep), !["running", "waiting"].includes(r.state));
    const byId = new Map((r.tasks || []).map((t) => [t.id, t]));
    const pick = (t) => {
      picked = t.id;
      for (const b of graph.querySelectorAll(".task")) b.classList.toggle("sel", b.dataset.task === t.id);
      detail.replaceChildren(taskDetail(t));
    };
    const waves = (r.plan && r.plan.waves) || [];
    const cols = [];
    waves.forEach((w, i) => {
      if (i) cols.push(el("div", { class: "arrow" }, "\u2192"));
      cols.push(el("div", { class: "wave", "data-wave": i }, el("h3", {}, `wave ${i}`),
        w.map((tid) => taskBox(byId.get(tid) || { id: tid, state: "pending" }, pick))));
    });
    graph.replaceChildren(el("h2", {}, "Plan"), waves.length
      ? el("div", { class: "waves", id: "plan-graph" }, cols)
      : el("p", { class: "dim" }, "No plan yet."));
    if (picked && byId.get(picked)) pick(byId.get(picked));
    const g = await api("GET", `/gates?run=${id}`);
    gates.replaceChildren(...await Promise.all((g.gates || []).map((x) => gateCard(x, byId))));
  }
  await load();
  follow(`?run=${id}`, debounce(load, 200));
  tl.tick();
}

async function viewGates() {
  const box = el("div", {});
  main.replaceChildren(el("h2", {}, "Gates waiting for a decision"), box);
  async function load() {
    const g = await api("GET", "/gates");
    box.replaceChildren(...(g.gates || []).length
      ? await Promise.all(g.gates.map(async (x) => el("div", {},
        el("a", { href: `#/run/${x.run_seq}` }, `run ${x.run_seq}`), await gateCard(x))))
      : [el("p", { class: "dim" }, "None.")]);
  }
  await load();
  follow("?kind=gate_requested,gate_approved,gate_edited,gate_rejected,gate_expired",
    debounce(load, 250));
}

/* ---- campaigns: a declared feature DAG, its state reduced from the
 * ledger by the daemon (campaign_status), never kept here ------------------ */

/* with RUN_KINDS, 14 kinds: /events takes at most 16 in one filter */
const CAMPAIGN_KINDS = "campaign_declared,campaign_dispatch,feature_status,project_status";

function campaignHref(id) {
  return `#/campaign/${encodeURIComponent(id)}`;
}

async function loadCampaignCount() {
  const c = document.getElementById("campaigns-count");
  try {
    const r = await api("GET", "/campaigns?limit=1");
    const n = r.count || 0;
    c.textContent = String(n);
    c.setAttribute("aria-label", `${n} campaign${n === 1 ? "" : "s"} declared`);
    c.hidden = n === 0;
  } catch (e) { /* the indicator says when the daemon is away */ }
}

async function viewCampaigns() {
  const box = el("div", {});
  main.replaceChildren(el("h2", {}, "Campaigns"), box);
  async function load() {
    const r = await api("GET", "/campaigns?limit=1000");
    const rows = (r.campaigns || []).map((c) =>
      el("tr", { class: "link", "data-campaign": c.campaign_id, onclick: () => { location.hash = campaignHref(c.campaign_id); } },
        el("td", {}, el("a", { href: campaignHref(c.campaign_id) }, c.campaign_id)), el("td", {}, c.title),
        el("td", { class: "num" }, c.projects), el("td", { class: "num" }, c.features),
        el("td", {}, localTime(c.declared_ts)), el("td", { class: "num" }, c.declared_seq)));
    box.replaceChildren(rows.length
      ? el("table", { id: "campaigns" }, el("tr", {}, ["campaign", "title", "projects", "features",
        "declared (local)", "seq"].map((h) => el("th", {}, h))), rows)
      : el("p", { class: "dim", id: "campaigns-empty" },
        "No campaign declared. Declare one: forum campaign declare FILE"));
  }
  await load();
  follow("?kind=campaign_declared", debounce(load, 250));
}

/* Each feature's column: 0 with no dependency, else one past its deepest
 * dependency (the daemon refused cycles when the campaign was declared). */
function campaignDepths(features) {
  const by = new Map(features.map((f) => [f.feature_id, f]));
  const depth = new Map();
  const walk = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id) || !by.has(id)) return 0;
    seen.add(id);
    const deps = by.get(id).depends_on || [];
    const d = deps.length ? 1 + Math.max(...deps.map((x) => walk(x, seen))) : 0;
    depth.set(id, d);
    return d;
  };
  for (const f of features) walk(f.feature_id, new Set());
  return depth;
}

const SVGNS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

/* The DAG: one column a depth, an arrow from each dependency to what
 * depends on it, each box coloured by its state. A picture of the table
 * below it, which is its text alternative. */
function campaignGraph(st) {
  const fs = st.features || [];
  const depth = campaignDepths(fs);
  const cols = [];
  for (const f of fs) (cols[depth.get(f.feature_id)] ||= []).push(f);
  const W = 230, H = 40, GX = 70, GY = 12, PAD = 12;
  const pos = new Map();
  cols.forEach((c, x) => c.forEach((f, y) =>
    pos.set(f.feature_id, { x: PAD + x * (W + GX), y: PAD + y * (H + GY) })));
  const width = PAD * 2 + cols.length * W + Math.max(0, cols.length - 1) * GX;
  const height = PAD * 2 + Math.max(1, ...cols.map((c) => c.length)) * (H + GY) - GY;
  const edges = [];
  for (const f of fs) for (const d of f.depends_on || []) {
    const a = pos.get(d), b = pos.get(f.feature_id);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 4, y2 = b.y + H / 2;
    edges.push(svgEl("path", { class: "edge", "data-from": d, "data-to": f.feature_id, "marker-end": "url(#dag-arrow)",
      d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}` }));
  }
  const nodes = fs.map((f) => {
    const p = pos.get(f.feature_id);
    const name = f.feature_id.length > 30 ? f.feature_id.slice(0, 29) + "\u2026" : f.feature_id;
    const deps = (f.depends_on || []).length ? `, depends on ${f.depends_on.join(", ")}` : "";
    return svgEl("g", { class: `node st-${f.state}`, "data-feature": f.feature_id, "data-state": f.state,
      transform: `translate(${p.x},${p.y})` },
    svgEl("title", {}, `${f.feature_id} (${f.project_id}): ${f.state}${deps}`),
    svgEl("rect", { class: "box", width: W, height: H, rx: 4 }),
    svgEl("rect", { class: "stripe", width: 6, height: H, rx: 2 }),
    svgEl("text", { class: "label", x: 14, y: 16 }, name),
    svgEl("text", { class: "sub", x: 14, y: 32 },
      `${f.state}${typeof f.run === "number" ? ` \u00b7 run ${f.run}` : ""} \u00b7 ${f.owner === "forum" ? "forum" : f.owner}`));
  });
  const summary = `Dependency graph of campaign ${st.campaign_id}: ${fs.length} features in ${cols.length} ` +
    `column${cols.length === 1 ? "" : "s"}; ` +
    (fs.filter((f) => (f.depends_on || []).length)
      .map((f) => `${f.feature_id} depends on ${f.depends_on.join(" and ")}`).join("; ") || "no dependencies");
  return svgEl("svg", { id: "campaign-dag", class: "dag", role: "img", "aria-label": summary,
    viewBox: `0 0 ${width} ${height}`, width, height },
  svgEl("defs", {}, svgEl("marker", { id: "dag-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto" }, svgEl("path", { class: "arrowhead", d: "M0,0 L10,5 L0,10 z" }))),
  edges, nodes);
}

function featureRow(f) {
  const run = typeof f.run === "number"
    ? el("span", {}, el("a", { href: `#/run/${f.run}`, "data-run-link": f.run }, `run ${f.run}`), " ",
      badge(f.run_state || "unknown"), f.dispatch_witnessed === false ? " (dispatch not witnessed)" : "")
    : el("span", { class: "dim" }, f.owner === "forum" ? "not dispatched" : "outside forum");
  const rep = f.reported
    ? el("div", { class: "dim" }, `reported by ${f.reported.source || "?"}` +
      (f.reported.reason ? `: ${f.reported.reason}` : "") + ` (seq ${f.reported.seq})`) : null;
  return el("tr", { "data-feature": f.feature_id, "data-state": f.state, id: `feature-${f.feature_id}` },
    el("td", {}, el("div", { class: "mono" }, f.feature_id), el("div", {}, f.title || ""), rep),
    el("td", {}, f.project_id, el("div", { class: "dim" }, f.owner)),
    el("td", {}, badge(f.state)),
    el("td", { class: "num" }, f.priority),
    el("td", {}, f.agent || ""),
    el("td", {}, (f.depends_on || []).length
      ? (f.depends_on || []).flatMap((d, i) => [i ? ", " : "", "\u2190 ", el("a", { href: `#feature-${d}`,
        onclick: (ev) => { ev.preventDefault(); const t = document.getElementById(`feature-${d}`); if (t) reveal(t); } }, d)])
      : el("span", { class: "dim" }, "none")),
    el("td", {}, run));
}

function nextCard(nx) {
  const list = (name, items, what) => el("div", { "data-next": name },
    el("h3", {}, `${name} (${items.length})`),
    items.length ? el("ul", {}, items.map((x) => el("li", { "data-feature": x.feature_id },
      el("span", { class: "mono" }, x.feature_id), what(x))))
      : el("p", { class: "dim" }, "none"));
  const runLink = (x) => typeof x.run === "number"
    ? [": ", el("a", { href: `#/run/${x.run}` }, `run ${x.run}`)] : [];
  return el("div", { class: "card", id: "campaign-next" },
    el("h2", {}, "Next"),
    el("p", { class: "dim" }, nx.complete ? "Complete: every forum feature is done." :
      `forum campaign run ${nx.campaign_id} starts the runnable features as durable runs.`),
    el("div", { class: "next-lists" },
      list("runnable", nx.runnable || [], (x) => ` priority ${x.priority}, ${x.agent || "?"}`),
      list("running", nx.running || [], runLink),
      list("unwitnessed", nx.unwitnessed || [], runLink),
      list("blocked", nx.blocked || [], () => "")));
}

async function viewCampaign(id) {
  const head = el("div", {});
  const graph = el("div", {});
  const next = el("div", {});
  const table = el("div", {});
  main.replaceChildren(el("h2", {}, `Campaign ${id}`), head, graph, next, table);
  async function load() {
    let st, nx;
    const q = `?campaign_id=${encodeURIComponent(id)}`;
    try {
      [st, nx] = await Promise.all([api("GET", `/campaigns/status${q}`), api("GET", `/campaigns/next${q}`)]);
    } catch (e) {
      head.replaceChildren(el("p", { class: "error" }, e.message));
      return;
    }
    const counts = Object.entries(st.counts || {}).filter(([, n]) => n > 0);
    head.replaceChildren(el("div", { class: "card", id: "campaign-head", "data-complete": String(!!st.complete) },
      el("dl", { class: "kv" },
        el("dt", {}, "title"), el("dd", {}, st.title || ""),
        el("dt", {}, "complete"), el("dd", {}, st.complete ? "yes" : "no"),
        el("dt", {}, "features"), el("dd", { id: "campaign-counts" },
          counts.flatMap(([k, n], i) => [i ? " " : "", badge(k), ` ${n}`])),
        el("dt", {}, "projects"), el("dd", {}, (st.projects || []).flatMap((p, i) =>
          [i ? ", " : "", `${p.project_id} (${p.owner}${p.reported ? `, reported ${p.reported.status}` : ""})`])),
        el("dt", {}, "declared"), el("dd", {}, `seq ${st.declared_seq} `,
          el("a", { href: `#/ledger` }, "in the ledger")))));
    graph.replaceChildren(el("h2", {}, "Dependencies"),
      el("div", { class: "dag-box" }, campaignGraph(st)));
    next.replaceChildren(nextCard(nx));
    table.replaceChildren(el("h2", {}, "Features"),
      el("table", { id: "campaign-features" },
        el("tr", {}, ["feature", "project", "state", "priority", "agent", "depends on", "run"]
          .map((h) => el("th", {}, h))),
        (st.features || []).map(featureRow)));
  }
  await load();
  follow(`?kind=${CAMPAIGN_KINDS},${RUN_KINDS}`, debounce(load, 250));
}

async function viewLedger(runFilter) {
  const PAGE = 50;
  const kindIn = el("input", { placeholder: "kind", size: 14, id: "ledger-kind", "aria-label": "filter by kind" });
  const actorIn = el("input", { placeholder: "actor", size: 14, "aria-label": "filter by actor" });
  const info = el("span", { class: "dim" });
  const box = el("div", {});
  const out = el("div", {});
  let from = null; /* null: the newest page */
  const prev = el("button", { type: "button", onclick: () => { from = Math.max(0, (from ?? 0) - PAGE); load(); } }, "\u2190 older");
  const next = el("button", { type: "button", onclick: () => { from += PAGE; load(); } }, "newer \u2192");
  main.replaceChildren(el("h2", {}, runFilter !== undefined ? `Ledger: run ${runFilter}` : "Ledger"),
    el("div", { class: "pager" }, prev, next, info, "filter:", kindIn, actorIn), box, out);
  let runSeqs = null;
  async function load() {
    const s = await api("GET", "/summary");
    const count = s.entries;
    if (runFilter !== undefined && runSeqs === null) {
      const r = await api("GET", `/runs/${runFilter}`);
      runSeqs = new Set((r.entries || []).map((e) => e.seq));
    }
    if (from === null) from = Math.max(0, count - PAGE);
    from = Math.min(from, Math.max(0, count - PAGE));
    const r = count ? await api("GET", `/ledger?from=${from}&limit=${PAGE}`) : { entries: [] };
    info.textContent = `entries ${from}\u2013${from + r.entries.length - 1} of ${count}`;
    prev.disabled = from === 0;
    next.disabled = from + PAGE >= count;
    const k = kindIn.value.trim(), a = actorIn.value.trim();
    const rows = r.entries.slice().reverse()
      .filter((e) => (!k || e.kind.includes(k)) && (!a || e.actor.includes(a)) &&
        (!runSeqs || runSeqs.has(e.seq)))
      .map((e) => el("tr", { "data-seq": e.seq },
        el("td", { class: "num" }, e.seq), el("td", {}, localTime(e.ts)), el("td", {}, e.actor),
        el("td", {}, e.kind), el("td", { class: "num" }, e.parent ?? "\u2014"),
        el("td", { class: "mono" }, e.hash.slice(0, 12)),
        el("td", {},
          el("button", { type: "button", onclick: () => showBody(e.seq) }, "body"), " ",
          el("button", { type: "button", "data-prove": e.seq, onclick: () => showProof(e.seq) }, "check inclusion"),
          e.kind === "import" ? [" ", el("a", { href: `#/trace/${e.seq}`, "data-trace": e.seq }, "timeline")] : null)));
    box.replaceChildren(el("table", { id: "ledger" },
      el("tr", {}, ["seq", "time (local)", "actor", "kind", "parent", "hash", ""].map((h) => el("th", {}, h))), rows));
  }
  async function showBody(seq) {
    try {
      const b = await api("GET", `/ledger/${seq}/payload`);
      out.replaceChildren(el("div", { class: "card", id: "body" }, el("h3", {}, `Body of ${seq}`), el("pre", {}, pretty(b))));
    } catch (e) {
      out.replaceChildren(el("p", { class: "error" }, `${seq}: ${e.message}`));
    }
    reveal(out);
  }
  async function showProof(seq) {
    out.replaceChildren(el("p", {}, `Checking entry ${seq}\u2026`));
    reveal(out);
    const res = await checkInclusion(seq, false);
    out.replaceChildren(inclusionCard(seq, res));
    reveal(out);
  }
  kindIn.addEventListener("input", load);
  actorIn.addEventListener("input", load);
  await load();
  follow("", debounce(() => { if (from !== null && info.textContent) load(); }, 500));
}

function inclusionCard(seq, res) {
  return el("div", { class: "card", id: "inclusion", "data-ok": res.ok ? "true" : "false" },
    el("h3", { class: res.ok ? "ok" : "error" },
      !res.ok ? `Entry ${seq}: the check FAILED`
        : res.signed ? `Entry ${seq} is in the signed log (checked in this browser)`
          : `Entry ${seq} is in the checkpoint's tree; the checkpoint's signature was not verified`),
    el("ol", { class: "steps" }, res.steps.map((s) => el("li", { class: s.ok ? "" : "error" }, s.text))));
}

async function viewVerify() {
  const res = el("div", {});
  const cp = el("div", {});
  const vkeyIn = el("input", { size: 70, id: "vkey", placeholder: "verifier key (forum ledger key)",
    "aria-label": "verifier key",
    value: localStorage.getItem(VKEY_KEY) || "" });
  const run = async (deep) => {
    const t0 = performance.now();
    let finished = false;
    /* the daemon reports how far a verify has got in GET /status */
    const tick = setInterval(async () => {
      let how = "";
      try {
        const st = await api("GET", "/status");
        if (st.verify && st.verify.total)
          how = `: ${st.verify.done} of ${st.verify.total} entries (${Math.floor(100 * st.verify.done / st.verify.total)}%)`;
      } catch (e) { /* the verify's own answer says what failed */ }
      if (!finished)
        res.replaceChildren(el("p", { id: "verify-progress" },
          `verifying${deep ? " (deep: every body re-hashed)" : ""}${how}, ${((performance.now() - t0) / 1000).toFixed(1)} s`));
    }, 250);
    try {
      const r = await api("GET", `/verify${deep ? "?deep=1" : ""}`);
      res.replaceChildren(el("div", { class: "card", id: "verify-result" },
        el("h3", { class: r.ok ? "ok" : "error" }, r.ok ? "The ledger verifies" : "Verification FAILED"),
        el("p", { class: "dim" }, `${((performance.now() - t0) / 1000).toFixed(2)} s`),
        el("pre", {}, pretty(r))));
    } catch (e) {
      res.replaceChildren(el("p", { class: "error" }, e.message));
    } finally {
      finished = true;
      clearInterval(tick);
    }
  };
  main.replaceChildren(el("h2", {}, "Verify"),
    el("div", { class: "pager" },
      el("button", { type: "button", class: "primary", id: "verify-chain", onclick: () => run(false) }, "Verify chain and tree"),
      el("button", { type: "button", id: "verify-deep", onclick: () => run(true) }, "Verify deep")),
    res, el("h2", {}, "Latest signed checkpoint"),
    el("div", { class: "pager" }, vkeyIn,
      el("button", { type: "button", onclick: () => { localStorage.setItem(VKEY_KEY, vkeyIn.value.trim()); loadCp(); } }, "Use key")),
    cp);
  async function loadCp() {
    try {
      const c = await api("GET", "/checkpoint");
      const sig = await checkNote(c.note, localStorage.getItem(VKEY_KEY));
      cp.replaceChildren(el("div", { class: "card", id: "checkpoint" },
        el("dl", { class: "kv" }, el("dt", {}, "size"), el("dd", {}, c.size),
          el("dt", {}, "root"), el("dd", { class: "mono" }, c.root),
          el("dt", {}, "signature"), el("dd", { class: sig.ok ? "ok" : "error" }, sig.text)),
        el("pre", {}, c.note)));
    } catch (e) {
      cp.replaceChildren(el("p", { class: "error" }, e.message));
    }
  }
  await loadCp();
}

/* ---- the timeline of a run or an imported trace ------------------------ */

const KIND_NAMES = { model: "model call", tool: "tool call", task: "task", gate: "gate",
  escalation: "escalation", retry: "retry", span: "span" };

function durText(st) {
  if (st.end == null) return "running";
  return duration(Math.round((st.end - st.start) / 1000));
}

/* A step of run_show's `steps` as the timeline draws it. */
function runStep(x) {
  const st = { kind: x.kind, name: x.kind === "tool" && x.task ? `${x.task} ${x.name}` : x.name,
    start: x.start_ts, end: x.end_ts ?? null, ok: x.ok, entries: x.entries || [], key: x.seq,
    marker: x.kind === "escalation" || x.kind === "retry", raw: x };
  const tk = x.tokens ? `, tokens ${x.tokens.input ?? "?"} in, ${x.tokens.output ?? "?"} out` : "";
  st.dur = durText(st);
  st.title = `${st.name}: ${KIND_NAMES[x.kind] || x.kind}` +
    (x.model ? ` (${x.model})` : "") + `, ${st.dur}${tk}` +
    (x.ok === false ? ", failed" : "") + (x.decision ? `, ${x.decision}` : "");
  return st;
}

/* The timeline's box: draw(steps, ended) redraws it; tick() keeps open
 * steps growing until the view goes. Clicking a step opens its entries. */
function timelineBox(what) {
  const svgBox = el("div", { id: "timeline" });
  const info = el("p", { class: "dim" });
  const detail = el("div", {});
  const key = (k, text) => el("span", {}, svgKey(k), text);
  const node = el("section", { class: "card", "aria-labelledby": "timeline-h" },
    el("h2", { id: "timeline-h" }, "Timeline"),
    el("div", { class: "legend" }, key("model", "model call"), key("tool", "tool call"),
      key("task", "command / stub"), key("gate", "gate"), key("escalation", "escalation"),
      key("failed", "failed"), " dashed: still running. Each bar is a step; Tab to it, Enter opens it."),
    info, svgBox, detail);
  let steps = [], ended = true, picked = null, timer = null;
  const redraw = () => {
    if (!steps.length) {
      svgBox.replaceChildren(el("p", { class: "dim", id: "timeline-empty" }, "No steps yet."));
      return;
    }
    const svg = forumChart.timeline({ steps, now: Date.now() * 1000, label: `timeline of ${what}`,
      onPick: (st) => { picked = st.key; open(st); } });
    svgBox.replaceChildren(svg);
    for (const g of svg.querySelectorAll(".step")) g.classList.toggle("sel", Number(g.dataset.seq) === picked);
  };
  async function open(st) {
    for (const g of svgBox.querySelectorAll(".step")) g.classList.toggle("sel", Number(g.dataset.seq) === st.key);
    detail.replaceChildren(el("p", {}, `Opening ${st.name}\u2026`));
    const parts = await Promise.all(st.entries.map(async (seq) => {
      let e = null, b = null, err = null;
      try { e = await api("GET", `/ledger/${seq}`); b = (await api("GET", `/ledger/${seq}/payload`)).body; } catch (x) { err = x.message; }
      const res = el("div", {});
      return el("div", {},
        el("h3", {}, `${e ? e.kind : "entry"} `, el("span", { class: "dim mono" }, `seq ${seq}${e ? `, ${e.actor}, ${localTime(e.ts)}` : ""}`)),
        err ? el("p", { class: "error" }, err) : el("pre", {}, pretty(b)),
        el("button", { type: "button", "data-prove": seq, onclick: async () => {
          res.replaceChildren(el("p", {}, `Checking entry ${seq}\u2026`));
          res.replaceChildren(inclusionCard(seq, await checkInclusion(seq, false)));
          reveal(res);
        } }, `check inclusion of ${seq}`), res);
    }));
    detail.replaceChildren(el("div", { class: "card", id: "step-detail", "data-step": st.key },
      el("h2", {}, `${st.name} `, el("span", { class: "dim" }, `${KIND_NAMES[st.kind] || st.kind}, ${st.dur}`)),
      st.raw && st.raw.tokens ? el("p", {}, `tokens: ${st.raw.tokens.input ?? "?"} in, ${st.raw.tokens.output ?? "?"} out`) : null,
      parts));
    reveal(detail);
  }
  return {
    node,
    draw(s, e) {
      steps = s;
      ended = e;
      const n = (k) => s.filter((x) => x.kind === k).length;
      info.textContent = `${n("model")} model call${n("model") === 1 ? "" : "s"}, ${n("tool")} tool call${n("tool") === 1 ? "" : "s"}` +
        (n("gate") ? `, ${n("gate")} gate${n("gate") === 1 ? "" : "s"}` : "") +
        (n("escalation") ? `, ${n("escalation")} escalation${n("escalation") === 1 ? "" : "s"}` : "");
      redraw();
    },
    /* while a step is open, its bar grows with the clock */
    tick() {
      if (timer) return;
      timer = setInterval(() => {
        if (!svgBox.isConnected) { clearInterval(timer); return; }
        if (!ended && steps.some((x) => x.end == null)) redraw();
      }, 1000);
    },
  };
}

function svgKey(kind) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", "12");
  svg.setAttribute("height", "12");
  svg.setAttribute("aria-hidden", "true");
  const r = document.createElementNS(NS, "rect");
  r.setAttribute("width", "12");
  r.setAttribute("height", "12");
  r.setAttribute("class", kind === "failed" ? "bar failed" : `bar k-${kind}`);
  svg.append(r);
  return svg;
}

/* An imported trace (an `import` entry and the records after it): its
 * llm_call and tool_call records as model and tool steps, other spans as
 * spans, placed by the source's own start and end times. */
function sourceTimeUs(v) {
  if (v === undefined || v === null) return null;
  if (typeof v === "number") return v > 1e17 ? v / 1000 : v > 1e14 ? v : v > 1e11 ? v * 1000 : v * 1e6;
  if (/^\d+$/.test(String(v))) return Number(BigInt(v) / 1000n); /* OTLP nanoseconds */
  const ms = Date.parse(v);
  return isNaN(ms) ? null : ms * 1000;
}

async function viewTrace(seq) {
  const head = el("div", {});
  const tl = timelineBox(`import ${seq}`);
  main.replaceChildren(el("h2", {}, `Imported trace ${seq}`), head, tl.node);
  const imp = await api("GET", `/ledger/${seq}`);
  const body = (await api("GET", `/ledger/${seq}/payload`)).body || {};
  if (imp.kind !== "import") throw new Error(`entry ${seq} is a ${imp.kind}, not an import`);
  const total = (body.counts && body.counts.records) || 0;
  const LIMIT = 1000;
  const n = Math.min(total, LIMIT);
  head.replaceChildren(el("div", { class: "card" }, el("dl", { class: "kv" },
    el("dt", {}, "format"), el("dd", {}, body.format || ""),
    el("dt", {}, "source"), el("dd", {}, (body.source && body.source.name) || ""),
    el("dt", {}, "records"), el("dd", {}, total, total > LIMIT ? ` (the first ${LIMIT} drawn)` : ""),
    el("dt", {}, "imported"), el("dd", {}, localTime(imp.ts)))));
  const entries = [];
  for (let from = seq + 1; from <= seq + n; from += 200) {
    const r = await api("GET", `/ledger?from=${from}&limit=${Math.min(200, seq + n + 1 - from)}`);
    entries.push(...r.entries);
  }
  const steps = [];
  for (let i = 0; i < entries.length; i += 16) {
    await Promise.all(entries.slice(i, i + 16).map(async (e) => {
      let b = {};
      try { b = (await api("GET", `/ledger/${e.seq}/payload`)).body || {}; } catch (x) { b = {}; }
      const kind = e.kind === "llm_call" ? "model" : e.kind === "tool_call" ? "tool" : "span";
      const start = sourceTimeUs(b.start) ?? e.ts;
      const end = sourceTimeUs(b.end) ?? start;
      const st = { kind, name: b.name || e.kind, start, end: Math.max(start, end), ok: b.status && b.status.code === 2 ? false : undefined,
        entries: [e.seq], key: e.seq, raw: { tokens: b.tokens, model: b.model } };
      st.dur = durText(st);
      st.title = `${st.name}: ${e.kind}${b.model ? ` (${b.model})` : ""}, ${st.dur}` +
        (b.tokens ? `, tokens ${b.tokens.input ?? "?"} in, ${b.tokens.output ?? "?"} out` : "");
      steps.push(st);
    }));
  }
  steps.sort((a, b) => a.start - b.start || a.key - b.key);
  tl.draw(steps, true);
}

/* ---- the daemon in charts: GET /metrics, scraped every second --------- */

function parseProm(text) {
  const m = new Map();
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const sp = line.lastIndexOf(" ");
    m.set(line.slice(0, sp), Number(line.slice(sp + 1)));
  }
  return m;
}

/* The q-quantile of a histogram's bucket counts (Prometheus's
 * histogram_quantile: linear within the bucket). */
function quantile(q, buckets) {
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevC = 0;
  for (const [le, c] of buckets) {
    if (c >= rank) {
      if (!isFinite(le)) return prevLe;
      return prevLe + (le - prevLe) * ((rank - prevC) / Math.max(c - prevC, 1e-9));
    }
    prevLe = le; prevC = c;
  }
  return prevLe;
}

function bucketsOf(m, name) {
  const out = [];
  for (const [k, v] of m) {
    const r = new RegExp(`^${name}_bucket\\{le="([^"]+)"\\}$`).exec(k);
    if (r) out.push([r[1] === "+Inf" ? Infinity : Number(r[1]), v]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

function sumOf(m, prefix, test) {
  let t = 0;
  for (const [k, v] of m) if (k.startsWith(prefix) && (!test || test(k))) t += v;
  return t;
}

const metricsRing = { samples: [], max: 300 };

async function viewMetrics() {
  const box = el("div", { class: "charts", id: "charts" });
  const note = el("p", { class: "dim" });
  main.replaceChildren(el("h2", {}, "Metrics"),
    el("p", { class: "dim" }, "From the daemon's own GET /metrics, read every second by this page; " +
      "rates are per second between two readings, the latency quantiles are of the calls between them."),
    note, box);
  async function scrape() {
    const text = await api("GET", "/metrics", undefined, true);
    const m = parseProm(text);
    const ring = metricsRing.samples;
    ring.push({ t: Date.now(), m });
    if (ring.length > metricsRing.max) ring.shift();
    draw();
  }
  function series(f) {
    const ring = metricsRing.samples, pts = [];
    for (let i = 1; i < ring.length; i++) {
      const a = ring[i - 1], b = ring[i], dt = (b.t - a.t) / 1000;
      pts.push([b.t, dt > 0 && b.t - a.t < 10000 ? f(a.m, b.m, dt) : null]);
    }
    return pts;
  }
  const rate = (name) => (a, b, dt) => Math.max(0, ((b.get(name) ?? 0) - (a.get(name) ?? 0)) / dt);
  const gauge = (name) => (a, b) => b.get(name) ?? null;
  const lat = (q) => (a, b) => {
    const ba = bucketsOf(a, "forum_model_call_seconds"), bb = bucketsOf(b, "forum_model_call_seconds");
    const d = bb.map(([le, c], i) => [le, c - ((ba[i] && ba[i][1]) || 0)]);
    const v = quantile(q, d);
    return v === null ? null : v * 1000;
  };
  const errs = (test) => (a, b, dt) => Math.max(0, (sumOf(b, "forum_", test) - sumOf(a, "forum_", test)) / dt);
  function draw() {
    const n = metricsRing.samples.length;
    note.textContent = n < 2 ? "collecting the first readings\u2026" : `${n} readings, the last ${Math.round((metricsRing.samples[n - 1].t - metricsRing.samples[0].t) / 1000)} s`;
    const charts = [
      { id: "runs", title: "Runs", unit: " /s", series: [
        { name: "started", points: series(rate("forum_runs_started_total")) },
        { name: "finished", points: series((a, b, dt) => Math.max(0, ((b.get("forum_runs_started_total") ?? 0) - (a.get("forum_runs_started_total") ?? 0) -
          ((b.get("forum_runs_in_flight") ?? 0) - (a.get("forum_runs_in_flight") ?? 0))) / dt)) },
        { name: "in flight", points: series(gauge("forum_runs_in_flight")) }] },
      { id: "latency", title: "Model call latency", unit: " ms", series: [
        { name: "p50", points: series(lat(0.5)) }, { name: "p95", points: series(lat(0.95)) }] },
      { id: "tokens", title: "Model tokens", unit: " /s", series: [
        { name: "input", points: series(rate('forum_model_tokens_total{direction="input"}')) },
        { name: "output", points: series(rate('forum_model_tokens_total{direction="output"}')) }] },
      { id: "errors", title: "Errors by class", unit: " /s", series: [
        { name: "model", points: series(rate('forum_model_calls_total{outcome="error"}')) },
        { name: "HTTP 4xx", points: series(errs((k) => k.startsWith("forum_http_requests_total") && /status="4/.test(k))) },
        { name: "HTTP 5xx", points: series(errs((k) => k.startsWith("forum_http_requests_total") && /status="5/.test(k))) },
        { name: "commits", points: series(errs((k) => k === "forum_commit_failures_total" || k === "forum_appends_rejected_total")) }] },
      { id: "appends", title: "Appends", unit: " /s", series: [
        { name: "appends", points: series(rate("forum_appends_total")) },
        { name: "commits", points: series(rate("forum_commits_total")) }] },
      { id: "streams", title: "Event-stream subscribers", unit: "", series: [
        { name: "streams", points: series(gauge("forum_events_streams")) },
        { name: "gates waiting", points: series(gauge("forum_gates_waiting")) }] },
    ];
    box.replaceChildren(...charts.map((c) => {
      const svg = forumChart.line(c);
      svg.setAttribute("data-chart", c.id);
      return svg;
    }));
  }
  await scrape();
  const timer = setInterval(() => {
    if (!box.isConnected) { clearInterval(timer); return; }
    scrape().catch(() => { /* the indicator says when the daemon is away */ });
  }, 1000);
}

/* ---- checking in the browser ------------------------------------------- */

function hexToBytes(h) {
  const b = new Uint8Array(h.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(h.substr(2 * i, 2), 16);
  return b;
}
function bytesToHex(b) {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
function b64ToBytes(s) {
  const bin = atob(s);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}
async function sha256(...parts) {
  const n = parts.reduce((a, p) => a + p.length, 0);
  const buf = new Uint8Array(n);
  let o = 0;
  for (const p of parts) { buf.set(p, o); o += p.length; }
  return new Uint8Array(await crypto.subtle.digest("SHA-256", buf));
}
function sameBytes(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/* The entry's hash from its eight fields: SHA-256 of their JCS form (for
 * these fields: keys sorted, JSON.stringify's escaping, no spaces). */
async function entryHash(e) {
  const f = { actor: e.actor, kind: e.kind, parent: e.parent, payload: e.payload,
    prev: e.prev, seq: e.seq, ts: e.ts, v: e.v };
  const text = "{" + Object.keys(f).sort().map((k) => JSON.stringify(k) + ":" + JSON.stringify(f[k])).join(",") + "}";
  return sha256(new TextEncoder().encode(text));
}

/* RFC 9162 2.1.3.2: the root a leaf and its inclusion path make. */
async function rootFromPath(index, size, leaf, path) {
  if (index >= size) return null;
  let fn = index, sn = size - 1, r = leaf;
  for (const p of path) {
    if (sn === 0) return null;
    if (fn % 2 === 1 || fn === sn) {
      r = await sha256(Uint8Array.of(1), p, r);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
      }
    } else {
      r = await sha256(Uint8Array.of(1), r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 ? r : null;
}

/* A C2SP signed note's first signature by vkey (Go's note verifier key
 * text NAME+HEXID+BASE64(0x01||pub)), with Web Crypto's Ed25519. */
async function checkNote(note, vkey) {
  if (!vkey) return { ok: false, text: "not checked: no verifier key (paste the output of `forum ledger key`, or open the link `forum dashboard` prints)" };
  /* the key's base64 may hold '+' itself: split at the first two */
  const i = vkey.indexOf("+"), j = vkey.indexOf("+", i + 1);
  if (i <= 0 || j <= i) return { ok: false, text: "the verifier key is not NAME+ID+KEY" };
  const name = vkey.slice(0, i), hexid = vkey.slice(i + 1, j), b64 = vkey.slice(j + 1);
  const kb = b64ToBytes(b64);
  if (kb.length !== 33 || kb[0] !== 1) return { ok: false, text: "not an Ed25519 verifier key" };
  const id = await sha256(new TextEncoder().encode(name + "\n"), kb);
  if (bytesToHex(id.slice(0, 4)) !== hexid) return { ok: false, text: "the verifier key's id does not match its key" };
  const cut = note.indexOf("\n\n");
  if (cut < 0) return { ok: false, text: "not a signed note" };
  const msg = new TextEncoder().encode(note.slice(0, cut + 1));
  for (const line of note.slice(cut + 2).split("\n")) {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const sig = b64ToBytes(m[2]);
    if (sig.length !== 68 || bytesToHex(sig.slice(0, 4)) !== hexid) continue;
    try {
      const key = await crypto.subtle.importKey("raw", kb.slice(1), { name: "Ed25519" }, false, ["verify"]);
      const ok = await crypto.subtle.verify({ name: "Ed25519" }, key, sig.slice(4), msg);
      return { ok, text: ok ? `signed by ${name} (verified in this browser)` : "the signature does NOT verify" };
    } catch (e) {
      return { ok: false, text: `this browser cannot check Ed25519: ${e.message}` };
    }
  }
  return { ok: false, text: `no signature by ${name}` };
}

/* Is entry seq in the log the latest signed checkpoint commits to? Every
 * step is recomputed here; tamper flips a bit of the proof's first hash
 * (what a lying server would have to do), to show the check failing. */
async function checkInclusion(seq, tamper) {
  const steps = [];
  const step = (ok, text) => { steps.push({ ok, text }); return ok; };
  try {
    const e = await api("GET", `/ledger/${seq}`);
    const h = await entryHash(e);
    if (!step(bytesToHex(h) === e.hash, `entry ${seq}: its hash recomputed from its fields here: ${bytesToHex(h).slice(0, 16)}\u2026`))
      return { ok: false, steps };
    const leaf = await sha256(Uint8Array.of(0), h);
    const c = await api("GET", "/checkpoint");
    const lines = c.note.split("\n");
    const size = Number(lines[1]);
    const root = b64ToBytes(lines[2]);
    if (!step(size > seq, `checkpoint: tree size ${size}, root ${bytesToHex(root).slice(0, 16)}\u2026 (from the note's text)`))
      return { ok: false, steps };
    const sig = await checkNote(c.note, localStorage.getItem(VKEY_KEY));
    step(sig.ok, `checkpoint signature: ${sig.text}`);
    const p = await api("GET", `/proof/inclusion?seq=${seq}&size=${size}`);
    const path = p.path.map(hexToBytes);
    if (tamper && path.length) path[0][0] ^= 1;
    else if (tamper) leaf[0] ^= 1;
    const r = await rootFromPath(seq, size, leaf, path);
    const ok = r !== null && sameBytes(r, root);
    step(ok, ok ? `the ${path.length}-hash inclusion path leads to the checkpoint's root`
      : `the inclusion path does NOT lead to the checkpoint's root${tamper ? " (the proof was tampered with on purpose)" : ""}`);
    return { ok, signed: sig.ok, steps };
  } catch (err) {
    step(false, err.message);
    return { ok: false, steps };
  }
}
window.forumCheckInclusion = checkInclusion;

/* ---- routing ----------------------------------------------------------- */

let checkedToken = null;

async function route() {
  stopStreams();
  if (!token()) { showLogin(""); return; }
  /* a token kept from before is tried once, before any view or stream
   * uses it: a stale one costs one refused call, then the sign-in form */
  if (checkedToken !== token()) {
    try { await api("GET", "/status"); } catch (e) { if (e.status === 401) return; }
    checkedToken = token();
  }
  document.getElementById("login").hidden = true;
  document.getElementById("signout").hidden = false;
  startNav();
  const h = location.hash || "#/runs";
  const seg = h.slice(2).split("/");
  const navOf = seg[0] === "campaign" ? "campaigns" : seg[0];
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("on", a.dataset.nav === navOf);
    if (a.dataset.nav === navOf) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    if (seg[0] === "run" && seg[1] && seg[1].startsWith("session:"))
      await viewSession(decodeURIComponent(seg.slice(1).join("/").slice(8)));
    else if (seg[0] === "run" && seg[1]) await viewRun(Number(seg[1]));
    else if (seg[0] === "gates") await viewGates();
    else if (seg[0] === "campaigns") await viewCampaigns();
    else if (seg[0] === "campaign" && seg[1]) await viewCampaign(decodeURIComponent(seg.slice(1).join("/")));
    else if (seg[0] === "trace" && seg[1]) await viewTrace(Number(seg[1]));
    else if (seg[0] === "metrics") await viewMetrics();
    else if (seg[0] === "ledger" && seg[1] === "run") await viewLedger(Number(seg[2]));
    else if (seg[0] === "ledger") await viewLedger();
    else if (seg[0] === "verify") await viewVerify();
    else await viewRuns();
  } catch (e) {
    if (e.status !== 401) main.replaceChildren(el("p", { class: "error" }, e.message));
  }
  document.body.dataset.ready = h;
}

document.getElementById("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
  document.getElementById("token-input").value = "";
  route();
});
document.getElementById("signout").addEventListener("click", signOut);
window.addEventListener("hashchange", () => { if (!location.hash.startsWith("#token=")) route(); else { takeFragment(); route(); } });
takeFragment();
route();
