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

async function api(method, path, body) {
  const opts = { method, headers: { Authorization: `Bearer ${token()}` } };
  // every write is application/json, with a body or none: the daemon
  // refuses any other (what a cross-site form would send)
  if (method !== "GET") opts.headers["Content-Type"] = "application/json";
  if (body !== undefined) opts.body = JSON.stringify(body);
  const r = await fetch(path, opts);
  const text = await r.text();
  let j = null;
  try { j = text ? JSON.parse(text) : null; } catch (e) { j = null; }
  if (r.status === 401) {
    signOut();
    document.getElementById("login-error").textContent =
      "The daemon refused the token.";
    throw new ApiError(401, "unauthorized", "unauthorized");
  }
  if (!r.ok) {
    throw new ApiError(r.status, j && j.code, (j && j.error) || text);
  }
  return j;
}

/* ---- the live event stream ---------------------------------------------- */

const streams = new Set();

/* Follows GET /events?query, calling onEvent({id, kind, entry}) for each
 * event; reconnects with Last-Event-ID after a drop (a daemon restart
 * loses nothing). Returns a stop function. */
function follow(query, onEvent) {
  const st = { stopped: false, ctl: null, last: null };
  streams.add(st);
  const live = document.getElementById("live");
  async function run() {
    while (!st.stopped) {
      st.ctl = new AbortController();
      try {
        const headers = { Authorization: `Bearer ${token()}` };
        if (st.last !== null) headers["Last-Event-ID"] = String(st.last);
        const r = await fetch(`/events${query}`, { headers, signal: st.ctl.signal });
        if (r.status === 401) { signOut(); return; }
        if (!r.ok) throw new Error(`events: ${r.status}`);
        live.className = "live on";
        live.textContent = "live";
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
      live.className = "live off";
      live.textContent = "reconnecting";
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
  const live = document.getElementById("live");
  live.className = "live off";
  live.textContent = "offline";
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
    ["", "running", "done", "failed", "budget", "stopped", "cancelled",
      "rejected", "interrupted"].map((s) => el("option", { value: s }, s || "any state")));
  main.replaceChildren(el("h2", {}, "Runs"),
    el("div", { class: "pager" }, "State ", stateSel), box);
  async function load() {
    const q = stateSel.value ? `?state=${encodeURIComponent(stateSel.value)}` : "";
    const r = await api("GET", `/runs${q}`);
    const rows = (r.runs || []).map((x) =>
      el("tr", { class: "link", "data-run": x.run, onclick: () => { location.hash = `#/run/${x.run}`; } },
        el("td", { class: "num" }, x.run), el("td", {}, badge(x.state)),
        el("td", {}, preview(x.request, 90)), el("td", {}, x.via || ""),
        el("td", {}, localTime(x.started_ts)), el("td", { class: "num" }, x.entries)));
    box.replaceChildren(rows.length
      ? el("table", { id: "runs" }, el("tr", {}, ["run", "state", "request", "via",
        "started (local)", "entries"].map((h) => el("th", {}, h))), rows)
      : el("p", { class: "dim", id: "runs-empty" }, "No runs yet. Start one: forum run start \"...\""));
  }
  stateSel.addEventListener("change", load);
  await load();
  follow(`?kind=${RUN_KINDS}`, debounce(load, 250));
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
  const reason = el("input", { placeholder: "why (for reject)", "data-reason": true });
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
  main.replaceChildren(el("h2", {}, `Run ${id}`), head, gates, graph, detail);
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
        r.answer ? el("pre", {}, r.answer.text ?? pretty(r.answer)) : el("span", { class: "dim" }, "not yet")))));
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

async function viewLedger(runFilter) {
  const PAGE = 50;
  const kindIn = el("input", { placeholder: "kind", size: 14, id: "ledger-kind" });
  const actorIn = el("input", { placeholder: "actor", size: 14 });
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
          el("button", { type: "button", "data-prove": e.seq, onclick: () => showProof(e.seq) }, "check inclusion"))));
    box.replaceChildren(el("table", { id: "ledger" },
      el("tr", {}, ["seq", "time (local)", "actor", "kind", "parent", "hash", ""].map((h) => el("th", {}, h))), rows));
  }
  async function showBody(seq) {
    try {
      const b = await api("GET", `/ledger/${seq}/payload`);
      out.replaceChildren(el("div", { class: "card" }, el("h3", {}, `Body of ${seq}`), el("pre", {}, pretty(b))));
    } catch (e) {
      out.replaceChildren(el("p", { class: "error" }, `${seq}: ${e.message}`));
    }
  }
  async function showProof(seq) {
    out.replaceChildren(el("p", {}, `Checking entry ${seq}\u2026`));
    const res = await checkInclusion(seq, false);
    out.replaceChildren(inclusionCard(seq, res));
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

async function route() {
  stopStreams();
  if (!token()) { showLogin(""); return; }
  document.getElementById("login").hidden = true;
  document.getElementById("signout").hidden = false;
  const h = location.hash || "#/runs";
  const seg = h.slice(2).split("/");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("on", a.dataset.nav === seg[0]);
  try {
    if (seg[0] === "run" && seg[1]) await viewRun(Number(seg[1]));
    else if (seg[0] === "gates") await viewGates();
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
