// The gateway's client keys against the official npm clients, openai and
// @anthropic-ai/sdk (pinned in package-lock.json, installed by
// scripts/install-deps.sh: nothing is fetched here): a key made with
// `forum key add` while the daemon runs works in each SDK; over its
// --max-calls each raises its RateLimitError (with the Retry-After header
// in the error), a model outside --models its PermissionDeniedError, a
// revoked key its AuthenticationError. Usage: node keys_test.mjs
// FORUM_BIN. Exit 77 when the packages are not installed.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const forum = process.argv[2];
let OpenAI, Anthropic;
try {
  OpenAI = (await import(path.join(here, "node_modules/openai/index.mjs"))).default;
  Anthropic = (await import(path.join(here, "node_modules/@anthropic-ai/sdk/index.mjs"))).default;
} catch (e) {
  console.error(`skip: run scripts/install-deps.sh (npm ci in tests/gateway): ${e.message}`);
  process.exit(77);
}

const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exitCode = 1; };
const eq = (a, b, what) => { if (a !== b) fail(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`); };

// ---- the fake upstream: plain answers of each API -----------------------
const upstream = http.createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const j = JSON.parse(body);
    res.writeHead(200, { "Content-Type": "application/json" });
    if (req.url === "/v1/messages")
      return res.end(JSON.stringify({ id: "msg_1", type: "message", role: "assistant", model: j.model,
        content: [{ type: "text", text: "hi from claude" }], stop_reason: "end_turn",
        stop_sequence: null, usage: { input_tokens: 5, output_tokens: 4 } }));
    res.end(JSON.stringify({ id: "c1", object: "chat.completion", created: 1, model: j.model,
      choices: [{ index: 0, message: { role: "assistant", content: "hello back" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }));
  });
});
await new Promise((r) => upstream.listen(0, "127.0.0.1", r));
const up = upstream.address().port;

// ---- the daemon ---------------------------------------------------------
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "forum-gwkeys-"));
fs.writeFileSync(path.join(dir, "forum.json"), JSON.stringify({ models: { providers: [
  { name: "local", api: "chat", url: `http://127.0.0.1:${up}/v1`, model: "fake-model", tier: "cheap" },
  { name: "other", api: "chat", url: `http://127.0.0.1:${up}/v1`, model: "other-model" },
  { name: "claude", api: "anthropic", url: `http://127.0.0.1:${up}`, model: "fake-claude" }] } }));
const daemon = spawn(forum, ["--ledger", dir, "serve", "--port", "0", "--log-file", path.join(dir, "serve.log")],
  { stdio: ["ignore", "pipe", "inherit"] });
const port = await new Promise((res, rej) => {
  let out = "";
  const t = setTimeout(() => rej(new Error("the daemon did not start")), 30000);
  daemon.stdout.on("data", (d) => {
    out += d;
    const m = /listening on http:\/\/[^:]+:(\d+)/.exec(out);
    if (m) { clearTimeout(t); res(Number(m[1])); }
  });
});
const base = `http://127.0.0.1:${port}`;
const keyAdd = (...args) =>
  execFileSync(forum, ["--ledger", dir, "key", "add", ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();

const msg = [{ role: "user", content: "hi" }];
const raises = async (what, Cls, fn, check) => {
  try {
    await fn();
    fail(`${what}: accepted`);
  } catch (e) {
    eq(e instanceof Cls, true, `${what}: ${e.constructor.name} ${e.message}`);
    if (check) check(e);
  }
};

try {
  // added while the daemon runs, used at once
  const key = keyAdd("sdk", "--max-calls", "2", "--models", "fake-model,fake-claude");
  const oa = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0 });
  const an = new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0 });
  const r1 = await oa.chat.completions.create({ model: "fake-model", messages: msg });
  eq(r1.choices[0].message.content, "hello back", "openai with a key");
  const r2 = await an.messages.create({ model: "fake-claude", max_tokens: 16, messages: msg });
  eq(r2.content[0].text, "hi from claude", "anthropic with a key (x-api-key)");
  await raises("openai, a model not allowed", OpenAI.PermissionDeniedError,
    () => oa.chat.completions.create({ model: "other-model", messages: msg }));
  const retry = (e) => eq(Number(e.headers?.["retry-after"] ?? e.headers?.get?.("retry-after")) >= 1, true,
    `Retry-After in ${JSON.stringify(e.headers)}`);
  await raises("openai, over --max-calls", OpenAI.RateLimitError,
    () => oa.chat.completions.create({ model: "fake-model", messages: msg }), retry);
  await raises("anthropic, over --max-calls", Anthropic.RateLimitError,
    () => an.messages.create({ model: "fake-claude", max_tokens: 16, messages: msg }), retry);
  // revoked: each SDK's AuthenticationError
  const key2 = keyAdd("gone");
  const oa2 = new OpenAI({ apiKey: key2, baseURL: `${base}/v1`, maxRetries: 0 });
  eq((await oa2.chat.completions.create({ model: "cheap", messages: msg })).choices[0].message.content,
    "hello back", "the second key");
  execFileSync(forum, ["--ledger", dir, "key", "revoke", "gone"], { stdio: "ignore" });
  await raises("openai, a revoked key", OpenAI.AuthenticationError,
    () => oa2.chat.completions.create({ model: "cheap", messages: msg }));
  await raises("anthropic, a revoked key", Anthropic.AuthenticationError,
    () => new Anthropic({ apiKey: key2, baseURL: base, maxRetries: 0 }).messages.create({
      model: "fake-claude", max_tokens: 16, messages: msg }));
} catch (e) {
  fail(e.stack);
}
daemon.kill("SIGTERM");
await new Promise((r) => daemon.on("exit", r));
upstream.close();
const list = JSON.parse(execFileSync(forum, ["--ledger", dir, "--json", "key", "list"], { encoding: "utf8" }));
const used = Object.fromEntries(list.keys.map((k) => [k.name, k.used_calls]));
eq(JSON.stringify(used), JSON.stringify({ sdk: 2, gone: 1 }), "calls used per key (refusals not counted)");
if (!process.exitCode) {
  fs.rmSync(dir, { recursive: true, force: true });
  console.log("ok: client keys through openai and @anthropic-ai/sdk");
} else {
  console.error(`kept ${dir}`);
}
