// bench/gateway.mjs (run by bench/gateway.sh): what the gateway adds. An
// instant upstream (node http) answers a fixed chat completion, or a
// stream whose first event it writes at once. One client (node http,
// keep-alive to whichever it calls) measures, in one run:
//   - the median latency of N sequential calls, direct and through forum
//     (every call through forum durable before it is answered), in
//     alternating blocks of N/4 so that both see the same machine;
//   - the time to the first stream byte, direct and through forum (in
//     blocks likewise);
//   - calls/s at concurrency C for S seconds, direct and through forum, in
//     alternating one-second slices (the machine is shared: a load that
//     comes and goes falls on both alike).
// Not a test: it prints figures. Usage: node gateway.mjs FORUM_BIN
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";

const forum = process.argv[2];
const N = Number(process.env.BENCH_CALLS || 200);
const C = Number(process.env.BENCH_CONC || 64);
const S = Number(process.env.BENCH_SECONDS || 5);
const answer = JSON.stringify({ id: "c", object: "chat.completion", model: "m",
  choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
const upstream = http.createServer((req, res) => {
  let b = "";
  req.on("data", (d) => (b += d));
  req.on("end", () => {
    if (b.includes('"stream":true')) {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write('data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n');
      return setTimeout(() => res.end("data: [DONE]\n\n"), 1);
    }
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(answer) });
    res.end(answer);
  });
});
await new Promise((r) => upstream.listen(0, "127.0.0.1", r));
const up = upstream.address().port;
const dir = fs.mkdtempSync(path.join(process.env.BENCH_TMPDIR || os.tmpdir(), "forum-gwb-"));
fs.writeFileSync(path.join(dir, "forum.json"), JSON.stringify({ models: { providers: [
  { name: "up", api: "chat", url: `http://127.0.0.1:${up}/v1`, model: "m" }] } }));
const daemon = spawn(forum, ["--ledger", dir, "serve", "--port", "0", "--log-file", path.join(dir, "serve.log")],
  { stdio: ["ignore", "pipe", "inherit"] });
const port = await new Promise((res) => {
  let out = "";
  daemon.stdout.on("data", (d) => { out += d; const m = /listening on http:\/\/[^:]+:(\d+)/.exec(out); if (m) res(Number(m[1])); });
});
const token = fs.readFileSync(path.join(dir, "token"), "utf8").trim();
const agent = new http.Agent({ keepAlive: true, maxSockets: C });
const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
const sbody = JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] });

// One call; resolves with [ms to the first body byte, ms to the end].
function call(p, b, ag = agent, route = "/v1/chat/completions") {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    let first = 0;
    const req = http.request({ host: "127.0.0.1", port: p, path: route, method: "POST", agent: ag,
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}`, "Content-Length": Buffer.byteLength(b) } },
    (res) => {
      res.on("data", () => { if (!first) first = Number(process.hrtime.bigint() - t0) / 1e6; });
      res.on("end", () => res.statusCode === 200 ? resolve([first, Number(process.hrtime.bigint() - t0) / 1e6])
        : reject(new Error(`status ${res.statusCode}`)));
    });
    req.on("error", reject);
    req.end(b);
  });
}
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
async function seq(p, b, pick, ag = agent) {
  for (let i = 0; i < 20; i++) await call(p, b, ag);
  const t = [];
  for (let i = 0; i < N; i++) t.push((await call(p, b, ag))[pick]);
  return median(t);
}
// direct and through forum in alternating blocks of N/4 calls (call by
// call alternation would itself add to both: each process would sleep
// through the other's call): [median direct, median forum]
async function pair(b, pick) {
  for (let i = 0; i < 20; i++) { await call(up, b); await call(port, b); }
  const d = [], f = [];
  const blk = Math.max(1, Math.floor(N / 4));
  for (let i = 0; i < N; i += blk) {
    for (let j = i; j < Math.min(N, i + blk); j++) d.push((await call(up, b))[pick]);
    for (let j = i; j < Math.min(N, i + blk); j++) f.push((await call(port, b))[pick]);
  }
  return [median(d), median(f)];
}
async function slice(p, ms) {
  let done = 0;
  const end = Date.now() + ms;
  await Promise.all(Array.from({ length: C }, async () => { while (Date.now() < end) { await call(p, body); done++; } }));
  return done;
}
// calls/s both ways, in alternating one-second slices: [direct, forum]
async function rates() {
  await slice(up, 300); await slice(port, 300);
  let d = 0, f = 0;
  for (let i = 0; i < S; i++) { d += await slice(up, 1000); f += await slice(port, 1000); }
  return [d / S, f / S];
}
const [dl, fl] = await pair(body, 1);
// for reference: direct on a new connection per call
const dn = await seq(up, body, 1, new http.Agent({ keepAlive: false }));
// the floor of witnessing: one durable POST /append, in sequence
const ab = JSON.stringify({ actor: "bench", kind: "note", payload: { n: 1 } });
for (let i = 0; i < 20; i++) await call(port, ab, agent, "/append");
const at = [];
for (let i = 0; i < N; i++) at.push((await call(port, ab, agent, "/append"))[1]);
const al = median(at);
const [dt, ft] = await pair(sbody, 0);
const [dr, fr] = await rates();
console.log(`calls in sequence (median of ${N}): direct ${dl.toFixed(3)} ms, through forum ${fl.toFixed(3)} ms, added ${(fl - dl).toFixed(3)} ms`);
console.log(`  direct on a new connection per call (for reference): ${dn.toFixed(3)} ms`);
console.log(`  one durable POST /append in sequence (the commit alone): ${al.toFixed(3)} ms`);
console.log(`stream first byte (median of ${N}): direct ${dt.toFixed(3)} ms, through forum ${ft.toFixed(3)} ms, added ${(ft - dt).toFixed(3)} ms`);
console.log(`calls/s at c=${C}, ${S} alternating 1 s slices each: direct ${dr.toFixed(0)}, through forum ${fr.toFixed(0)} (${(100 * fr / dr).toFixed(0)}% of direct)`);
daemon.kill("SIGTERM");
await new Promise((r) => daemon.on("exit", r));
upstream.close();
agent.destroy();
fs.rmSync(dir, { recursive: true, force: true });
