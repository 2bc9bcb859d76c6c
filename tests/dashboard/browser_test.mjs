// The dashboard in a real browser: Debian's chromium, headless, driven over
// the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no
// download, no npm package). Asserts on the rendered DOM:
//  - the #token= link signs in and leaves the address bar;
//  - a run started over HTTP appears in the runs list live;
//  - its plan graph shows its tasks, and its gate waits with Approve;
//  - approving from the page resumes the run to done (live);
//  - the in-browser inclusion check passes for a real entry (entry hash,
//    Merkle path and checkpoint signature all recomputed in the page) and
//    fails for a tampered proof;
//  - a token in the query string is refused.
// With FORUM_SCREENSHOTS=DIR it also writes the main views as PNGs there
// (scripts/screenshots.sh).
// Usage: node browser_test.mjs FORUM_BIN
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const forum = process.argv[2];
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
if (!fs.existsSync(chromium)) {
  console.log(`SKIP: ${chromium} is not installed (scripts/install-deps.sh installs it)`);
  process.exit(77);
}
const shots = process.env.FORUM_SCREENSHOTS || "";
const WAIT_MS = 20000; // a failure detector, not a performance bound
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "forum-dash-"));
let daemon = null, chrome = null;

function fail(msg) {
  throw new Error(msg);
}

function cleanup() {
  if (chrome) chrome.kill("SIGKILL");
  if (daemon) daemon.kill("SIGTERM");
  try { fs.rmSync(dir, { recursive: true, force: true }); } catch (e) { /* */ }
}

function cli(...args) {
  return execFileSync(forum, ["--ledger", dir, ...args], { encoding: "utf8" }).trim();
}

async function startDaemon() {
  cli("ledger", "init");
  cli("ledger", "key"); // the checkpoint key, so the page can check signatures
  daemon = spawn(forum, ["--ledger", dir, "serve", "--port", "0", "--gate", "all",
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
    let buf = Buffer.alloc(0);
    proc.stdio[4].on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      let i;
      while ((i = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, i).toString("utf8"));
        buf = buf.subarray(i + 1);
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
  const { targetInfos } = await cdp.send("Target.getTargets");
  const page = targetInfos.find((t) => t.type === "page");
  if (!page) fail("chromium opened no page");
  ({ sessionId: session } = await cdp.send("Target.attachToTarget",
    { targetId: page.targetId, flatten: true }));
  await cdp.send("Page.enable", {}, session);
  await cdp.send("Emulation.setDeviceMetricsOverride",
    { width: 1280, height: 900, deviceScaleFactor: 1, mobile: false }, session);

  // 1. the link signs in; the token leaves the address bar at once
  const url = cli("dashboard");
  if (!url.includes("#token=")) fail(`forum dashboard: ${url}`);
  await cdp.send("Page.navigate", { url }, session);
  await until("document.body.dataset.ready === '#/runs'", "the runs view");
  const href = await evaluate("location.href");
  if (href.includes("token")) fail(`the token stayed in the address bar: ${href}`);
  if (await evaluate("sessionStorage.getItem('forum.token')") !== token) fail("no token in session storage");
  await until("document.getElementById('live').className === 'live on'", "the live stream");

  // 2. a run started over HTTP appears, live
  const started = await api("POST", "/runs", { request: "add a login endpoint to the api server" });
  if (started.status !== 200) fail(`POST /runs: ${started.status} ${JSON.stringify(started.json)}`);
  const run = started.json.run;
  await until(`!!document.querySelector('tr[data-run="${run}"]')`, `run ${run} in the runs list`);
  await shot("runs");

  // 3. its plan graph shows its tasks, and its gate waits
  await evaluate(`location.hash = '#/run/${run}'`);
  await until(`document.querySelectorAll('#plan-graph .task').length > 0`, "the plan graph's tasks");
  const tasks = await evaluate("[...document.querySelectorAll('#plan-graph .task')].map(t => t.dataset.task)");
  const shown = (await api("GET", `/runs/${run}/show`)).json;
  const want = shown.plan.waves.flat();
  if (JSON.stringify(tasks) !== JSON.stringify(want)) fail(`graph ${tasks} vs plan ${want}`);
  await until(`!!document.querySelector('.gate [data-act="approve"]')`, "the gate's Approve button");
  await evaluate("document.querySelector('#plan-graph .task').click()");
  await until("!!document.getElementById('task-detail')", "a task's details");
  await shot("run-gate");

  // 4. approving from the page resumes the run, to done
  await evaluate(`document.querySelector('.gate [data-act="approve"]').click()`);
  await until(`document.querySelector('#run-state-badge [data-state]')?.dataset.state === 'done'`,
    "the run done after approving (gate_approved, live)");
  const kinds = (await api("GET", `/runs/${run}`)).json.entries.map((e) => e.kind);
  if (!kinds.includes("gate_approved") || !kinds.includes("answer")) fail(`entries: ${kinds}`);
  await until("!!document.querySelector('#run-answer pre')", "the answer");
  await shot("run-done");

  // 5. the inclusion check, done by the page itself
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
  await shot("ledger-inclusion");

  // 6. verify, from the page
  await evaluate("location.hash = '#/verify'");
  await until("!!document.getElementById('checkpoint')", "the checkpoint card");
  const sig = await evaluate("document.querySelector('#checkpoint .kv dd.ok')?.textContent || ''");
  if (!sig.includes("verified in this browser")) fail(`checkpoint signature: ${sig}`);
  await evaluate("document.getElementById('verify-chain').click()");
  await until("!!document.querySelector('#verify-result h3.ok')", "verify ok");
  await shot("verify");
  console.log(`ok: run ${run} live, graph ${tasks.length} task(s), gate approved from the page, ` +
    `inclusion of ${seq} checked in the browser (tampered proof refused)`);
}

main().then(() => { cleanup(); process.exit(0); },
  (e) => { console.error(`FAIL: ${e.message}`); cleanup(); process.exit(1); });
