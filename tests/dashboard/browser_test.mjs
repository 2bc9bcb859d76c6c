// The dashboard in a real browser: Debian's chromium, headless, driven over
// the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no
// download). The one npm package, axe-core (pinned in package-lock.json,
// installed by scripts/install-deps.sh into tests/dashboard/node_modules,
// never fetched here), checks each view for accessibility violations.
// The daemon's model is fake_model.mjs: a run makes model calls and tool
// calls. Asserts on the rendered DOM:
//  - the #token= link signs in and leaves the address bar;
//  - a run started over HTTP appears in the runs list live;
//  - its plan graph shows its tasks, and its gate waits with Approve;
//  - approving from the page resumes the run to done (live);
//  - the in-browser inclusion check passes for a real entry (entry hash,
//    Merkle path and checkpoint signature all recomputed in the page) and
//    fails for a tampered proof;
//  - a token in the query string is refused;
//  - the run's timeline has one bar per model call and per tool call, as
//    counted from the ledger (the answer's model_calls, the tool_call
//    entries), a bar opens its step's entries by mouse and by keyboard;
//  - an imported trace draws one bar per llm_call and tool_call record;
//  - a model gateway session (calls sent to the daemon's
//    /v1/chat/completions with X-Forum-Session) is listed among the runs
//    and opens with one bar per gateway_call entry of it in the ledger,
//    growing live as calls land; a bar opens the call's entry, its body and
//    an inclusion check that passes;
//  - the metrics view draws its charts from /metrics, live;
//  - the reference's example campaign, declared over HTTP, appears live in
//    the campaigns list (and its count in the navigation); its view shows
//    the features, their states, the dependency arrows and the next
//    runnable ones exactly as campaign_status and campaign_next give them,
//    and follows a dispatched feature's run live to done (its link opens
//    the run, its dependent becomes runnable);
//  - the `waiting` filter, the count of gates in the navigation, results
//    scrolled into view, one live indicator;
//  - axe-core finds no serious or critical violation on any view, light
//    and dark; the page logs no console error.
// With FORUM_SCREENSHOTS=DIR it also writes the main views as PNGs there
// (scripts/screenshots.sh).
// Usage: node browser_test.mjs FORUM_BIN
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startFakeModel } from "./fake_model.mjs";

const forum = process.argv[2];
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
if (!fs.existsSync(chromium)) {
  console.log(`SKIP: ${chromium} is not installed (scripts/install-deps.sh installs it)`);
  process.exit(77);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const axePath = path.join(here, "node_modules", "axe-core", "axe.min.js");
if (!fs.existsSync(axePath)) {
  console.log(`FAIL: ${axePath} is missing: scripts/install-deps.sh installs it ` +
    "(npm ci in tests/dashboard, from package-lock.json)");
  process.exit(1);
}
const shots = process.env.FORUM_SCREENSHOTS || "";
const WAIT_MS = 20000; // a failure detector, not a performance bound
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "forum-dash-"));
let daemon = null, chrome = null, model = null;

function fail(msg) {
  throw new Error(msg);
}

function cleanup() {
  if (chrome) chrome.kill("SIGKILL");
  if (model) model.close();
  if (daemon) daemon.kill("SIGTERM");
  try { fs.rmSync(dir, { recursive: true, force: true }); } catch (e) { /* */ }
}

function cli(...args) {
  return execFileSync(forum, ["--ledger", dir, ...args], { encoding: "utf8" }).trim();
}

async function startDaemon() {
  cli("ledger", "init");
  cli("ledger", "key"); // the checkpoint key, so the page can check signatures
  model = await startFakeModel(shots ? 250 : 60);
  daemon = spawn(forum, ["--ledger", dir, "serve", "--port", "0", "--gate", "all",
    "--sandbox", "none", "--chat-url", `http://127.0.0.1:${model.port}/v1`, "--model", "fake-model",
    "--log-file", path.join(dir, "serve.log")], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  await new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error("the daemon did not start")), WAIT_MS);
    daemon.stdout.on("data", (d) => {
      out += d;
      if (/listening on/.test(out)) { clearTimeout(t); res(); }
    });
    daemon.on("exit", (c) => rej(new Error(`the daemon exited ${c}`)));
  });
  const state = JSON.parse(fs.readFileSync(path.join(dir, "forum.state.json"), "utf8"));
  return { port: state.port, token: fs.readFileSync(path.join(dir, "token"), "utf8").trim() };
}

// ---- the DevTools protocol over a pipe ------------------------------------

class Cdp {
  constructor(proc) {
    this.w = proc.stdio[3];
    this.next = 1;
    this.pending = new Map();
    this.on = null; // every event: (method, params)
    let buf = Buffer.alloc(0);
    proc.stdio[4].on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      let i;
      while ((i = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, i).toString("utf8"));
        buf = buf.subarray(i + 1);
        if (!msg.id && msg.method && this.on) this.on(msg.method, msg.params);
        const p = msg.id && this.pending.get(msg.id);
        if (p) {
          this.pending.delete(msg.id);
          msg.error ? p.rej(new Error(JSON.stringify(msg.error))) : p.res(msg.result);
        }
      }
    });
  }
  send(method, params = {}, sessionId) {
    const id = this.next++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    this.w.write(JSON.stringify(msg) + "\0");
    return new Promise((res, rej) => this.pending.set(id, { res, rej }));
  }
}

let cdp, session;

async function evaluate(expr) {
  const r = await cdp.send("Runtime.evaluate",
    { expression: expr, awaitPromise: true, returnByValue: true }, session);
  if (r.exceptionDetails) fail(`page: ${expr}: ${JSON.stringify(r.exceptionDetails)}`);
  return r.result.value;
}

async function until(expr, what) {
  const t0 = Date.now();
  for (;;) {
    // the page may be between documents: an error is "not yet"
    const v = await evaluate(`(() => { try { return (${expr}); } catch (e) { return false; } })()`);
    if (v) return v;
    if (Date.now() - t0 > WAIT_MS) {
      const dom = await evaluate("document.getElementById('main').innerText");
      fail(`never: ${what}\n--- the page showed:\n${dom}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function shot(name) {
  if (!shots) return;
  const r = await cdp.send("Page.captureScreenshot", { format: "png" }, session);
  fs.mkdirSync(shots, { recursive: true });
  fs.writeFileSync(path.join(shots, `${name}.png`), Buffer.from(r.data, "base64"));
  console.log(`wrote ${path.join(shots, name + ".png")}`);
}

const consoleErrors = [];

function watchConsole(method, p) {
  if (method === "Runtime.exceptionThrown")
    consoleErrors.push(`exception: ${p.exceptionDetails.text} ${p.exceptionDetails.exception?.description || ""}`);
  else if (method === "Runtime.consoleAPICalled" && (p.type === "error" || p.type === "assert"))
    consoleErrors.push(`console.${p.type}: ${p.args.map((a) => a.value ?? a.description).join(" ")}`);
  else if (method === "Log.entryAdded" && p.entry.level === "error")
    consoleErrors.push(`${p.entry.source}: ${p.entry.text} ${p.entry.url || ""}`);
}

let axeLoaded = false;
const axeSeen = [];

// axe-core on the page as it is: no serious or critical violation.
async function axe(view) {
  if (!axeLoaded) {
    await evaluate(fs.readFileSync(axePath, "utf8") + ";true");
    axeLoaded = true;
  }
  const v = await evaluate(`axe.run(document, { resultTypes: ["violations"] }).then((r) =>
    r.violations.filter((x) => x.impact === "serious" || x.impact === "critical")
      .map((x) => ({ id: x.id, impact: x.impact, help: x.help,
        nodes: x.nodes.slice(0, 3).map((n) => n.target.join(" ") + ": " + (n.failureSummary || "").split("\\n")[1]) })))`);
  if (v.length) fail(`axe-core, ${view}: ${JSON.stringify(v, null, 1)}`);
  axeSeen.push(view);
}

async function key(k) {
  for (const type of ["keyDown", "keyUp"])
    await cdp.send("Input.dispatchKeyEvent", { type, key: k, code: k,
      windowsVirtualKeyCode: k === "Enter" ? 13 : 9 }, session);
}

async function main() {
  const { port, token } = await startDaemon();
  const base = `http://127.0.0.1:${port}`;
  const api = async (method, p, body) => {
    const r = await fetch(base + p, {
      method, headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: r.status, json: await r.json().catch(() => null) };
  };
  const waitApi = async (what, f) => {
    const t0 = Date.now();
    for (;;) {
      const v = await f();
      if (v) return v;
      if (Date.now() - t0 > WAIT_MS) fail(`never: ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  // a token in a query string is refused, on the page's route too
  for (const p of ["/?token=" + token, "/runs?token=" + token, "/events?access_token=x"]) {
    const r = await fetch(base + p);
    if (r.status !== 400) fail(`${p}: ${r.status}, not 400`);
  }

  chrome = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu",
    "--remote-debugging-pipe", `--user-data-dir=${path.join(dir, "chrome")}`,
    "--no-first-run", "--window-size=1280,900", "about:blank"],
  { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
  cdp = new Cdp(chrome);
  cdp.on = watchConsole;
  const { targetInfos } = await cdp.send("Target.getTargets");
  const page = targetInfos.find((t) => t.type === "page");
  if (!page) fail("chromium opened no page");
  ({ sessionId: session } = await cdp.send("Target.attachToTarget",
    { targetId: page.targetId, flatten: true }));
  await cdp.send("Page.enable", {}, session);
  await cdp.send("Runtime.enable", {}, session);
  await cdp.send("Log.enable", {}, session);
  await cdp.send("Emulation.setDeviceMetricsOverride",
    { width: 1280, height: 900, deviceScaleFactor: 1, mobile: false }, session);

  // 0. without a token: the sign-in form, accessible, and not one console error
  await cdp.send("Page.navigate", { url: `${base}/` }, session);
  await until("!document.getElementById('login').hidden", "the sign-in form");
  await axe("sign in");
  axeLoaded = false;
  if (consoleErrors.length) fail(`console errors at load:\n${consoleErrors.join("\n")}`);

  // 1. the link signs in; the token leaves the address bar at once
  const url = cli("dashboard");
  if (!url.includes("#token=")) fail(`forum dashboard: ${url}`);
  await cdp.send("Page.navigate", { url }, session);
  await until("document.body.dataset.ready === '#/runs'", "the runs view");
  const href = await evaluate("location.href");
  if (href.includes("token")) fail(`the token stayed in the address bar: ${href}`);
  if (await evaluate("sessionStorage.getItem('forum.token')") !== token) fail("no token in session storage");
  await until("document.getElementById('live').className === 'live on'", "the live indicator");
  axeLoaded = false;
  await axe("runs (empty)");

  // 2. a run started over HTTP appears, live
  const started = await api("POST", "/runs", { request: "add a login endpoint to the api server" });
  if (started.status !== 200) fail(`POST /runs: ${started.status} ${JSON.stringify(started.json)}`);
  const run = started.json.run;
  await until(`!!document.querySelector('tr[data-run="${run}"]')`, `run ${run} in the runs list`);

  // the `waiting` filter shows it once it waits at its gate; the navigation counts the gate
  await waitApi("the run waiting at its gate", async () =>
    ((await api("GET", "/runs?state=waiting")).json.runs || []).some((x) => x.run === run));
  await evaluate("(() => { const s = document.getElementById('run-state'); s.value = 'waiting'; s.dispatchEvent(new Event('change')); })()");
  await until(`document.querySelector('tr[data-run="${run}"] [data-state]')?.dataset.state === 'waiting'`, "the waiting filter");
  await until("document.getElementById('gates-count').textContent === '1' && !document.getElementById('gates-count').hidden",
    "the count of gates waiting in the navigation");
  await axe("runs");
  await shot("runs");

  // 3. its plan graph shows its tasks, and its gate waits
  await evaluate(`location.hash = '#/run/${run}'`);
  await until(`document.querySelectorAll('#plan-graph .task').length > 0`, "the plan graph's tasks");
  const tasks = await evaluate("[...document.querySelectorAll('#plan-graph .task')].map(t => t.dataset.task)");
  const shown = (await api("GET", `/runs/${run}/show`)).json;
  const want = shown.plan.waves.flat();
  if (JSON.stringify(tasks) !== JSON.stringify(want)) fail(`graph ${tasks} vs plan ${want}`);
  await until(`!!document.querySelector('.gate [data-act="approve"]')`, "the gate's Approve button");
  await until(`!!document.querySelector('#timeline .step[data-kind="gate"] .open')`, "the waiting gate on the timeline");
  await evaluate("document.querySelector('#plan-graph .task').click()");
  await until("!!document.getElementById('task-detail')", "a task's details");
  await axe("run (at a gate)");
  await shot("run-gate");

  // 4. approving from the page resumes the run, to done; the timeline grows live
  // (the plan has two waves: a gate before each)
  await evaluate(`document.querySelector('.gate [data-act="approve"]').click()`);
  await until(`document.querySelector('.gate h3')?.textContent.includes('wave 1')`, "the second wave's gate, live");
  await evaluate(`document.querySelector('.gate [data-act="approve"]').click()`);
  await until(`document.querySelector('#run-state-badge [data-state]')?.dataset.state === 'done'`,
    "the run done after approving (gate_approved, live)");
  const entries = (await api("GET", `/runs/${run}`)).json.entries;
  const kinds = entries.map((e) => e.kind);
  if (!kinds.includes("gate_approved") || !kinds.includes("answer")) fail(`entries: ${kinds}`);
  await until("!!document.querySelector('#run-answer pre')", "the answer");
  // one bar per model call and per tool call, counted from the ledger
  const answer = entries.find((e) => e.kind === "answer");
  const modelCalls = (await api("GET", `/ledger/${answer.seq}/payload`)).json.body.model_calls;
  const toolCalls = kinds.filter((k) => k === "tool_call").length;
  if (!(modelCalls > 0) || !(toolCalls > 0)) fail(`a run without model or tool calls: ${modelCalls}, ${toolCalls}`);
  await until(`document.querySelectorAll('#timeline .step[data-kind="model"]').length === ${modelCalls} &&
    document.querySelectorAll('#timeline .step[data-kind="tool"]').length === ${toolCalls}`,
  `${modelCalls} model bars and ${toolCalls} tool bars on the timeline`);
  const titles = await evaluate("[...document.querySelectorAll('#timeline .step title')].map((t) => t.textContent)");
  if (!titles.some((t) => /list_dir: tool call, \d+ ms/.test(t))) fail(`bar titles: ${titles}`);
  // a bar opens its step: the entries, their bodies, an inclusion check
  await evaluate(`document.querySelector('#timeline .step[data-kind="tool"]').dispatchEvent(new MouseEvent('click'))`);
  await until("document.querySelectorAll('#step-detail pre').length === 2", "the tool call's two entries");
  const detail = await evaluate("document.getElementById('step-detail').innerText");
  if (!detail.includes("tool_call") || !detail.includes("tool_result") || !detail.includes("list_dir"))
    fail(`step detail: ${detail}`);
  // by keyboard: focus the first model bar, Enter
  const firstSeq = await evaluate(`(() => { const g = document.querySelector('#timeline .step[data-kind="model"]'); g.focus(); return g.dataset.seq; })()`);
  await key("Enter");
  await until(`document.getElementById('step-detail')?.dataset.step === '${firstSeq}'`, "a bar opened with Enter");
  await until("document.activeElement && document.getElementById('step-detail').contains(document.activeElement)",
    "the focus on the opened step");
  await axe("run (done, a step open)");
  await evaluate("window.scrollTo(0, 0)");
  await shot("run-timeline");
  // the same steps in text: forum run show lists every model and tool call
  const text = cli("run", "show", String(run));
  const m = /steps: (\d+) model calls?, (\d+) tool calls?/.exec(text);
  if (!m || Number(m[1]) !== modelCalls || Number(m[2]) !== toolCalls) fail(`forum run show:\n${text}`);
  for (const tool of ["list_dir", "write_file"])
    if (!new RegExp(`\\d+ ms +tool +${tool} `).test(text)) fail(`forum run show: no ${tool} step:\n${text}`);
  if (/\.\.\.(?! \[cut: whole with --full or forum ledger body \d+\])/.test(text)) fail(`a cut without saying so:\n${text}`);
  if (!cli("run", "show", String(run), "--full").includes('"content":"POST /login checks the password and sets a session.'))
    fail("forum run show --full cut a text");
  await until("!!document.querySelector('#run-answer pre')", "the answer");
  await shot("run-done");

  // 5. the inclusion check, done by the page itself, drawn in view
  await evaluate("location.hash = '#/ledger'");
  await until("!!document.querySelector('#ledger tr[data-seq]')", "the ledger table");
  // a checkpoint that covers the entries (the daemon signs every second)
  const head = (await api("GET", "/summary")).json.entries;
  const t0 = Date.now();
  while ((await api("GET", "/checkpoint")).json.size < head) {
    if (Date.now() - t0 > WAIT_MS) fail("no checkpoint covers the run");
    await new Promise((r) => setTimeout(r, 200));
  }
  const seq = Math.floor(head / 2);
  const good = await evaluate(`forumCheckInclusion(${seq}, false)`);
  if (!good.ok || !good.signed) fail(`inclusion of ${seq}: ${JSON.stringify(good)}`);
  const bad = await evaluate(`forumCheckInclusion(${seq}, true)`);
  if (bad.ok) fail(`a tampered proof passed: ${JSON.stringify(bad)}`);
  await evaluate(`document.querySelector('#ledger button[data-prove="${seq}"]').click()`);
  await until("document.getElementById('inclusion')?.dataset.ok === 'true'", "the inclusion card");
  await until("(() => { const r = document.getElementById('inclusion').getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight; })()",
    "the inclusion card scrolled into view");
  await axe("ledger");
  await shot("ledger-inclusion");

  // 6. an imported trace, drawn from the source's own times
  const trace = [
    { id: "req-1", kind: "span", name: "handle request", ts: "2025-01-01T10:00:00.000Z", end: "2025-01-01T10:00:02.400Z" },
    { id: "llm-1", parent: "req-1", kind: "llm_call", name: "plan", model: "claude-3-5-haiku", tokens: { input: 310, output: 54 },
      ts: "2025-01-01T10:00:00.100Z", end: "2025-01-01T10:00:00.900Z", prompt: "plan it", completion: "search, then answer" },
    { id: "tool-1", parent: "req-1", kind: "tool_call", name: "search_docs", ts: "2025-01-01T10:00:00.950Z", end: "2025-01-01T10:00:01.300Z" },
    { id: "llm-2", parent: "req-1", kind: "llm_call", name: "answer", model: "claude-3-5-haiku", tokens: { input: 820, output: 140 },
      ts: "2025-01-01T10:00:01.350Z", end: "2025-01-01T10:00:02.300Z" },
  ];
  const imp = await api("POST", "/ledger/import", { format: "jsonl", name: "trace.jsonl",
    data: trace.map((x) => JSON.stringify(x)).join("\n") + "\n" });
  if (imp.status !== 200) fail(`import: ${imp.status} ${JSON.stringify(imp.json)}`);
  await evaluate(`location.hash = '#/trace/${imp.json.import_seq}'`);
  await until(`document.querySelectorAll('#timeline .step[data-kind="model"]').length === 2 &&
    document.querySelectorAll('#timeline .step[data-kind="tool"]').length === 1 &&
    document.querySelectorAll('#timeline .step').length === 4`, "the imported trace's bars");
  const tt = await evaluate("[...document.querySelectorAll('#timeline .step title')].map((t) => t.textContent)");
  if (!tt.some((t) => t.includes("plan: llm_call (claude-3-5-haiku), 800 ms, tokens 310 in, 54 out"))) fail(`trace titles: ${tt}`);
  await axe("imported trace");
  await shot("trace-timeline");

  // 6b. a model gateway session: calls through the daemon's own gateway
  const SESSION = "refactor-auth";
  const gw = async (text, session = SESSION) => {
    const r = await fetch(`${base}/v1/chat/completions`, { method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "X-Forum-Session": session },
      body: JSON.stringify({ model: "fake-model", messages: [{ role: "user", content: text }] }) });
    await r.text();
    return r.status;
  };
  // the calls of the session, counted from the ledger (each entry's payload)
  const gwCalls = async () => {
    const out = [];
    for (const e of (await api("GET", "/ledger?limit=1000")).json.entries.filter((x) => x.kind === "gateway_call")) {
      const b = (await api("GET", `/ledger/${e.seq}/payload`)).json.body;
      if (b.session === SESSION) out.push({ seq: e.seq, ok: b.status === 200 && !b.error_class });
    }
    return out;
  };
  for (const t of ["read src/auth.c and list its functions", "propose a smaller login()"])
    if (await gw(t) !== 200) fail("a gateway call failed");
  await evaluate("location.hash = '#/runs'");
  await until(`!!document.querySelector('tr[data-session="${SESSION}"]')`, "the gateway session in the runs list");
  const sessionHash = `#/run/session:${SESSION}`;
  await evaluate(`document.querySelector('tr[data-session="${SESSION}"] a').click()`);
  await until(`document.body.dataset.ready === '${sessionHash}'`, "the gateway session view");
  let calls = await gwCalls();
  await until(`document.querySelectorAll('#timeline .step[data-kind="model"]').length === ${calls.length}`,
    `${calls.length} gateway bars`);
  // more calls land while the view is open: the timeline grows, live
  if (await gw("write the new login() RATE_LIMIT_ME") !== 429) fail("the upstream's 429 was not relayed");
  for (const t of ["write the new login()", "write a test for login()"])
    if (await gw(t) !== 200) fail("a gateway call failed");
  if (await gw("another task's call", "other-task") !== 200) fail("a gateway call failed");
  calls = await gwCalls();
  if (calls.length !== 5 || calls.filter((c) => !c.ok).length !== 1) fail(`gateway calls: ${JSON.stringify(calls)}`);
  await until(`document.querySelectorAll('#timeline .step').length === ${calls.length} &&
    document.querySelectorAll('#timeline .step[data-kind="model"]').length === ${calls.length} &&
    document.querySelectorAll('#timeline .step .bar.failed').length === 1`,
  `${calls.length} gateway bars (one failed), live`);
  const seqs = await evaluate("[...document.querySelectorAll('#timeline .step')].map((g) => Number(g.dataset.seq))");
  if (JSON.stringify(seqs) !== JSON.stringify(calls.map((c) => c.seq))) fail(`bars ${seqs} vs calls ${calls.map((c) => c.seq)}`);
  const gtitles = await evaluate("[...document.querySelectorAll('#timeline .step title')].map((t) => t.textContent)");
  if (!gtitles.every((t) => /^call \d+: fake-model: gateway call \(fake-model\), \d+ ms(, tokens \d+ in, \d+ out)?, status \d+/.test(t)) ||
      !gtitles.some((t) => /tokens \d+ in, \d+ out, status 200$/.test(t)) || !gtitles.some((t) => /status 429, failed/.test(t)))
    fail(`gateway bar titles: ${gtitles}`);
  // a bar opens the call: its entry, its body, an inclusion check
  const gseq = calls[1].seq;
  await evaluate(`document.querySelector('#timeline .step[data-seq="${gseq}"]').dispatchEvent(new MouseEvent('click'))`);
  await until(`document.getElementById('step-detail')?.dataset.step === '${gseq}' && document.querySelectorAll('#step-detail pre').length === 1`,
    "the gateway call's entry");
  const gdetail = await evaluate("document.getElementById('step-detail').innerText");
  if (!gdetail.includes("gateway_call") || !gdetail.includes("propose a smaller login()") || !gdetail.includes("request_sha256"))
    fail(`gateway step detail: ${gdetail}`);
  const t1 = Date.now();
  while ((await api("GET", "/checkpoint")).json.size <= gseq) {
    if (Date.now() - t1 > WAIT_MS) fail("no checkpoint covers the gateway call");
    await new Promise((r) => setTimeout(r, 200));
  }
  await evaluate(`document.querySelector('#step-detail button[data-prove="${gseq}"]').click()`);
  await until("document.querySelector('#step-detail #inclusion')?.dataset.ok === 'true'", "the gateway call's inclusion check");
  await axe("gateway session");
  await evaluate("window.scrollTo(0, 0)");
  await shot("gateway-session");

  // 7. the metrics view: charts of the daemon, live, while a second run goes
  await evaluate("location.hash = '#/metrics'");
  await until("document.querySelectorAll('#charts svg[data-chart]').length >= 2", "the charts");
  const run2 = (await api("POST", "/runs", { request: "add a logout endpoint to the api server" })).json.run;
  for (const wave of [0, 1]) {
    await waitApi(`run ${run2} at its gate ${wave}`, async () =>
      ((await api("GET", `/gates?run=${run2}`)).json.gates || []).some((g) => g.wave === wave));
    await api("POST", "/gate/approve", { run_seq: run2, wave, approver: "test" });
  }
  await waitApi("the second run done", async () => (await api("GET", `/runs/${run2}`)).json.state === "done");
  await until(`(() => {
    // the highest reading drawn, in px above the x axis (at y 160)
    const peak = (id) => Math.max(0, ...[...document.querySelectorAll('#charts svg[data-chart="' + id + '"] path.series')]
      .map((p) => (p.getAttribute('d') || '').split(/[ML]/).filter(Boolean).map((xy) => 160 - Number(xy.split(',')[1]))).flat(),
    ...[...document.querySelectorAll('#charts svg[data-chart="' + id + '"] circle.dot')].map((c) => 160 - Number(c.getAttribute('cy'))));
    return peak('appends') > 40 && peak('latency') > 40 && peak('runs') > 40;
  })()`, "the appends and latency charts drawn with the second run's data");
  await new Promise((r) => setTimeout(r, shots ? 8000 : 1500)); // a few more readings for the picture
  await axe("metrics");
  await shot("metrics");

  // 8. verify, from the page; the one indicator says live
  await evaluate("location.hash = '#/verify'");
  await until("!!document.getElementById('checkpoint')", "the checkpoint card");
  const sig = await evaluate("document.querySelector('#checkpoint .kv dd.ok')?.textContent || ''");
  if (!sig.includes("verified in this browser")) fail(`checkpoint signature: ${sig}`);
  await evaluate("document.getElementById('verify-chain').click()");
  await until("!!document.querySelector('#verify-result h3.ok')", "verify ok");
  await until("document.getElementById('live').textContent === 'live'", "one live indicator on verify");
  await axe("verify");
  await shot("verify");
  await evaluate("location.hash = '#/gates'");
  await until("document.body.dataset.ready === '#/gates'", "the gates view");
  await axe("gates");

  // 8b. campaigns: the reference's example declared over HTTP; the view
  // shows what campaign_status reduces from the ledger, live
  const example = JSON.parse(fs.readFileSync(path.join(here, "..", "ref", "flagship_campaign.json"), "utf8"));
  const cid = example.campaign_id;
  await evaluate("location.hash = '#/campaigns'");
  await until("document.body.dataset.ready === '#/campaigns'", "the campaigns view");
  if (!await evaluate("!!document.getElementById('campaigns-empty') && document.getElementById('campaigns-count').hidden"))
    fail("campaigns before any is declared");
  const decl = await api("POST", "/campaigns", { campaign: example });
  if (decl.status !== 200) fail(`POST /campaigns: ${decl.status} ${JSON.stringify(decl.json)}`);
  await until(`!!document.querySelector('#campaigns tr[data-campaign="${cid}"]')`, "the declared campaign in the list, live");
  await until("document.getElementById('campaigns-count').textContent === '1' && !document.getElementById('campaigns-count').hidden",
    "the count of campaigns in the navigation");
  const listed = (await api("GET", "/campaigns")).json;
  if (listed.count !== 1 || listed.campaigns[0].campaign_id !== cid ||
      listed.campaigns[0].features !== example.projects.reduce((n, p) => n + p.features.length, 0))
    fail(`GET /campaigns: ${JSON.stringify(listed)}`);
  await axe("campaigns");
  await evaluate(`document.querySelector('#campaigns tr[data-campaign="${cid}"] a').click()`);
  await until(`document.body.dataset.ready === '#/campaign/${cid}'`, "the campaign view");
  // the features and their states, the graph's boxes and arrows, the next
  // runnable ones: each as the API reduces them
  const shownCampaign = async () => evaluate(`({
    rows: [...document.querySelectorAll('#campaign-features tr[data-feature]')].map((r) => [r.dataset.feature, r.dataset.state]),
    nodes: [...document.querySelectorAll('#campaign-dag .node')].map((n) => [n.dataset.feature, n.dataset.state]),
    edges: [...document.querySelectorAll('#campaign-dag .edge')].map((e) => e.dataset.from + '>' + e.dataset.to),
    runnable: [...document.querySelectorAll('[data-next="runnable"] li')].map((l) => l.dataset.feature),
    runs: [...document.querySelectorAll('#campaign-features a[data-run-link]')].map((a) => [a.closest('tr').dataset.feature, Number(a.dataset.runLink)]),
    counts: [...document.querySelectorAll('#campaign-counts [data-state]')].map((b) => b.dataset.state + ' ' + b.nextSibling.textContent.trim()),
  })`);
  const wantCampaign = async () => {
    const st = (await api("GET", `/campaigns/status?campaign_id=${cid}`)).json;
    const nx = (await api("GET", `/campaigns/next?campaign_id=${cid}`)).json;
    const rows = st.features.map((f) => [f.feature_id, f.state]);
    return { rows, nodes: rows,
      edges: st.features.flatMap((f) => f.depends_on.map((d) => `${d}>${f.feature_id}`)),
      runnable: nx.runnable.map((f) => f.feature_id),
      runs: st.features.filter((f) => typeof f.run === "number").map((f) => [f.feature_id, f.run]),
      counts: Object.entries(st.counts).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`), st, nx };
  };
  const sameCampaign = async (what) => {
    const t0 = Date.now();
    for (;;) {
      const want = await wantCampaign();
      const got = await shownCampaign();
      const keys = ["rows", "nodes", "edges", "runnable", "runs", "counts"];
      if (keys.every((k) => JSON.stringify(got[k]) === JSON.stringify(want[k]))) return want;
      if (Date.now() - t0 > WAIT_MS)
        fail(`${what}: the view ${JSON.stringify(got)}\nvs campaign_status/next ${JSON.stringify(want)}`);
      await new Promise((r) => setTimeout(r, 150));
    }
  };
  let camp = await sameCampaign("the campaign as declared");
  if (camp.rows.length !== 9 || camp.edges.length !== 1 || camp.runnable.length !== 6 ||
      !camp.rows.some(([f, s]) => s === "waiting") || !camp.rows.some(([f, s]) => s === "unreported"))
    fail(`the example's states: ${JSON.stringify(camp.rows)}, next ${camp.runnable}`);
  await axe("campaign (declared)");
  // a feature dispatched as its campaign run would: a run with the request
  // campaign_next gives it, witnessed; the view follows it live to done
  const feat = camp.nx.runnable.find((f) => f.feature_id === "index-verified-wiki");
  const frun = (await api("POST", "/runs", { request: feat.request })).json.run;
  const disp = await api("POST", "/campaigns/dispatch", { campaign_id: cid, feature_id: feat.feature_id, run: frun });
  if (disp.status !== 200) fail(`dispatch: ${disp.status} ${JSON.stringify(disp.json)}`);
  await until(`document.querySelector('#campaign-features tr[data-feature="${feat.feature_id}"] a[data-run-link="${frun}"]')`,
    "the dispatched run's link, live");
  await sameCampaign("the campaign with a run dispatched");
  for (const wave of [0, 1]) {
    await waitApi(`run ${frun} at its gate ${wave}`, async () =>
      ((await api("GET", `/gates?run=${frun}`)).json.gates || []).some((g) => g.wave === wave));
    await api("POST", "/gate/approve", { run_seq: frun, wave, approver: "test" });
  }
  await waitApi("the feature's run done", async () => (await api("GET", `/runs/${frun}`)).json.state === "done");
  await until(`document.querySelector('#campaign-features tr[data-feature="${feat.feature_id}"]')?.dataset.state === 'done' &&
    document.querySelector('#campaign-dag .node[data-feature="buildlang-effect-fields"]')?.dataset.state === 'runnable'`,
  "the feature done and its dependent runnable, live");
  camp = await sameCampaign("the campaign with a feature done");
  if (!camp.runnable.includes("buildlang-effect-fields")) fail(`next after index: ${camp.runnable}`);
  await evaluate(`document.querySelector('#campaign-features a[data-run-link="${frun}"]').click()`);
  await until(`document.body.dataset.ready === '#/run/${frun}'`, "the feature's run from its link");
  await evaluate(`location.hash = '#/campaign/${cid}'`);
  await until(`!!document.querySelector('#campaign-dag .node[data-state="done"]')`, "the campaign again");
  await axe("campaign (a feature done)");
  await evaluate("window.scrollTo(0, 0)");
  await shot("campaign");

  // 9. the dark scheme follows prefers-color-scheme, accessible too
  await cdp.send("Emulation.setEmulatedMedia", { features: [{ name: "prefers-color-scheme", value: "dark" }] }, session);
  const bg = await evaluate("getComputedStyle(document.body).backgroundColor");
  if (bg !== "rgb(20, 21, 24)") fail(`dark scheme: body ${bg}`);
  for (const [h, what] of [[`#/run/${run}`, "#timeline .step"], [sessionHash, "#timeline .step"],
    ["#/metrics", "#charts svg"], ["#/ledger", "#ledger tr[data-seq]"],
    [`#/campaign/${cid}`, "#campaign-dag .node"]]) {
    await evaluate(`location.hash = '${h}'`);
    await until(`!!document.querySelector('${what}')`, `${h} (dark)`);
    await axe(`${h} (dark)`);
    if (h === `#/run/${run}`) await shot("run-dark");
    if (h === `#/campaign/${cid}`) await shot("campaign-dark");
  }
  // the login form too
  await evaluate("document.getElementById('signout').click()");
  await until("!document.getElementById('login').hidden", "the sign-in form");
  await axe("sign in (dark)");

  if (consoleErrors.length) fail(`console errors:\n${consoleErrors.join("\n")}`);
  console.log(`ok: run ${run} live, graph ${tasks.length} task(s), gate approved from the page, ` +
    `timeline ${modelCalls} model and ${toolCalls} tool bars, gateway session ${calls.length} bars, ` +
    `inclusion of ${seq} checked in the browser (tampered proof refused), ` +
    `campaign ${cid} ${camp.rows.length} features as campaign_status gives them, ` +
    `axe-core clean on ${axeSeen.length} views, no console error`);
}

main().then(() => { cleanup(); process.exit(0); },
  (e) => { console.error(`FAIL: ${e.message}`); cleanup(); process.exit(1); });
