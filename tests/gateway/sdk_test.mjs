// The model gateway against the official npm clients, openai and
// @anthropic-ai/sdk (pinned in package-lock.json, installed by
// scripts/install-deps.sh: nothing is fetched here), with a fake upstream
// in this file that streams. Plain calls, streams (read through each SDK's
// own stream reader), and a wrong key, which each SDK must raise as its
// AuthenticationError. The Anthropic SDK also on a model only a chat
// provider serves (forum translates): plain, streamed, a tool's round trip.
// The openai client on a provider with gateway_forge whose model writes its
// tool call as text: a real tool call. Then every call that reached the upstream is one
// gateway_call entry. Usage: node sdk_test.mjs FORUM_BIN. Exit 77 when the
// packages are not installed.
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

// ---- the fake upstream --------------------------------------------------
const sse = (res, events) => {
  res.writeHead(200, { "Content-Type": "text/event-stream" });
  for (const [type, data] of events)
    res.write((type ? `event: ${type}\n` : "") + `data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`);
  res.end();
};
const upstream = http.createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const j = JSON.parse(body);
    if (req.url === "/v1/chat/completions") {
      // with tools and a user's question: a call of the first tool; with a
      // tool's result last: an answer that quotes it
      const last = j.messages[j.messages.length - 1];
      // forge-model writes its call as text, as small local models do
      if (j.model === "forge-model" && !j.stream) {
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify({ id: "c9", object: "chat.completion", created: 1, model: j.model,
          choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant",
            content: '<tool_call>{"name":"get_weather","arguments":{"city":"Oslo"}}</tool_call>' } }],
          usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }));
      }
      const call = j.tools && last.role === "user";
      const said = last.role === "tool" ? `it is ${last.content}` : null;
      if (!j.stream) {
        const message = call
          ? { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
              function: { name: j.tools[0].function.name, arguments: JSON.stringify({ city: "Oslo" }) } }] }
          : { role: "assistant", content: said ?? "hello back" };
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify({
          id: "c1", object: "chat.completion", created: 1, model: j.model,
          choices: [{ index: 0, message, finish_reason: call ? "tool_calls" : "stop" }],
          usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }));
      }
      const chunk = (delta, fin) => ({ id: "c2", object: "chat.completion.chunk", created: 1, model: j.model,
        choices: [{ index: 0, delta, finish_reason: fin }] });
      const usage = j.stream_options?.include_usage
        ? [[null, { id: "c2", object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 9, completion_tokens: 2 } }]]
        : [];
      if (call)
        return sse(res, [[null, chunk({ role: "assistant", content: "Checking." }, null)],
          [null, chunk({ tool_calls: [{ index: 0, id: "call_2", type: "function",
            function: { name: j.tools[0].function.name, arguments: "" } }] }, null)],
          [null, chunk({ tool_calls: [{ index: 0, function: { arguments: "{\"city\":" } }] }, null)],
          [null, chunk({ tool_calls: [{ index: 0, function: { arguments: "\"Oslo\"}" } }] }, null)],
          [null, chunk({}, "tool_calls")], ...usage, [null, "[DONE]"]]);
      return sse(res, [[null, chunk({ role: "assistant", content: "Hel" }, null)],
        [null, chunk({ content: "lo world" }, "stop")], ...usage, [null, "[DONE]"]]);
    }
    if (req.url === "/v1/messages") {
      const msg = { id: "msg_1", type: "message", role: "assistant", model: j.model,
        content: [{ type: "text", text: "hi from claude" }], stop_reason: "end_turn",
        stop_sequence: null, usage: { input_tokens: 5, output_tokens: 4 } };
      if (!j.stream) {
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify(msg));
      }
      return sse(res, [
        ["message_start", { type: "message_start", message: { ...msg, content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 0 } } }],
        ["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }],
        ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hi from " } }],
        ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "claude" } }],
        ["content_block_stop", { type: "content_block_stop", index: 0 }],
        ["message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 4 } }],
        ["message_stop", { type: "message_stop" }]]);
    }
    res.writeHead(404).end();
  });
});
await new Promise((r) => upstream.listen(0, "127.0.0.1", r));
const up = upstream.address().port;

// ---- the daemon ---------------------------------------------------------
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "forum-gw-"));
fs.writeFileSync(path.join(dir, "forum.json"), JSON.stringify({ models: { providers: [
  { name: "local", api: "chat", url: `http://127.0.0.1:${up}/v1`, model: "fake-model", tier: "cheap" },
  { name: "claude", api: "anthropic", url: `http://127.0.0.1:${up}`, model: "fake-claude" },
  { name: "forged", api: "chat", url: `http://127.0.0.1:${up}/v1`, model: "forge-model", gateway_forge: true }] } }));
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
const token = fs.readFileSync(path.join(dir, "token"), "utf8").trim();
const base = `http://127.0.0.1:${port}`;

try {
  // openai
  const oa = new OpenAI({ apiKey: token, baseURL: `${base}/v1`, maxRetries: 0 });
  const r1 = await oa.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hi" }] });
  eq(r1.choices[0].message.content, "hello back", "openai plain");
  eq(r1.usage.total_tokens, 10, "openai usage");
  const s1 = await oa.chat.completions.create({ model: "cheap", stream: true, messages: [{ role: "user", content: "hi" }] });
  let text = "";
  for await (const c of s1) text += c.choices[0]?.delta?.content ?? "";
  eq(text, "Hello world", "openai stream");
  // the forge layer (gateway_forge): a call written as text comes back as
  // a real tool call the SDK parses
  const r1f = await oa.chat.completions.create({ model: "forge-model",
    messages: [{ role: "user", content: "weather in Oslo?" }],
    tools: [{ type: "function", function: { name: "get_weather",
      parameters: { type: "object", properties: { city: { type: "string" } } } } }] });
  eq(r1f.choices[0].finish_reason, "tool_calls", "openai forge finish_reason");
  eq(r1f.choices[0].message.content, null, "openai forge content");
  eq(r1f.choices[0].message.tool_calls?.[0]?.function?.name, "get_weather", "openai forge tool");
  eq(JSON.parse(r1f.choices[0].message.tool_calls?.[0]?.function?.arguments ?? "{}").city, "Oslo",
    "openai forge arguments");
  const models = await oa.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  eq(ids.includes("fake-model") && ids.includes("cheap"), true, `openai models ${ids}`);
  try {
    await new OpenAI({ apiKey: "wrong", baseURL: `${base}/v1`, maxRetries: 0 }).chat.completions.create({
      model: "fake-model", messages: [{ role: "user", content: "hi" }] });
    fail("openai: a wrong key was accepted");
  } catch (e) {
    eq(e instanceof OpenAI.AuthenticationError, true, `openai wrong key: ${e.constructor.name} ${e.message}`);
  }
  // anthropic (x-api-key)
  const an = new Anthropic({ apiKey: token, baseURL: base, maxRetries: 0 });
  const r2 = await an.messages.create({ model: "fake-claude", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
  eq(r2.content[0].text, "hi from claude", "anthropic plain");
  const s2 = await an.messages.create({ model: "fake-claude", max_tokens: 16, stream: true,
    messages: [{ role: "user", content: "hi" }] });
  text = "";
  for await (const ev of s2)
    if (ev.type === "content_block_delta") text += ev.delta.text;
  eq(text, "hi from claude", "anthropic stream");
  try {
    await new Anthropic({ apiKey: "wrong", baseURL: base, maxRetries: 0 }).messages.create({
      model: "fake-claude", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
    fail("anthropic: a wrong key was accepted");
  } catch (e) {
    eq(e instanceof Anthropic.AuthenticationError, true, `anthropic wrong key: ${e.constructor.name} ${e.message}`);
  }
  // anthropic on a chat-only model: forum translates both ways
  const r3 = await an.messages.create({ model: "fake-model", max_tokens: 16, system: "be brief",
    messages: [{ role: "user", content: "hi" }] });
  eq(r3.content[0].text, "hello back", "translated plain");
  eq(r3.stop_reason, "end_turn", "translated stop_reason");
  eq(r3.usage.input_tokens, 7, "translated usage");
  const s3 = an.messages.stream({ model: "fake-model", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
  text = "";
  s3.on("text", (t) => (text += t));
  const m3 = await s3.finalMessage();
  eq(text, "Hello world", "translated stream text");
  eq(m3.content[0].text, "Hello world", "translated stream message");
  eq(m3.stop_reason, "end_turn", "translated stream stop_reason");
  eq(m3.usage.output_tokens, 2, "translated stream usage");
  const tools = [{ name: "get_weather", description: "the weather in a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const ask = { role: "user", content: "weather in Oslo?" };
  const r4 = await an.messages.create({ model: "fake-model", max_tokens: 64, tools, messages: [ask] });
  eq(r4.stop_reason, "tool_use", "translated tool stop_reason");
  const use = r4.content.find((b) => b.type === "tool_use");
  eq(use?.name, "get_weather", "translated tool_use name");
  eq(use?.input?.city, "Oslo", "translated tool_use input");
  const r5 = await an.messages.create({ model: "fake-model", max_tokens: 64, tools, messages: [ask,
    { role: "assistant", content: r4.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use?.id, content: "-3C" }] }] });
  eq(r5.content[0].text, "it is -3C", "translated tool_result round trip");
  const m6 = await an.messages.stream({ model: "fake-model", max_tokens: 64, tools, messages: [ask] }).finalMessage();
  eq(m6.stop_reason, "tool_use", "translated streamed tool stop_reason");
  eq(m6.content[0].text, "Checking.", "translated streamed tool text");
  eq(m6.content[1]?.type, "tool_use", "translated streamed tool block");
  eq(m6.content[1]?.id, "call_2", "translated streamed tool id");
  eq(JSON.stringify(m6.content[1]?.input), JSON.stringify({ city: "Oslo" }), "translated streamed tool input");
} catch (e) {
  fail(e.stack);
}
daemon.kill("SIGTERM");
await new Promise((r) => daemon.on("exit", r));
upstream.close();
const sum = JSON.parse(execFileSync(forum, ["--ledger", dir, "--json", "ledger", "summary"], { encoding: "utf8" }));
eq(sum.by_kind?.gateway_call, 10, "gateway_call entries (the wrong keys reach no upstream)");
if (!process.exitCode) {
  fs.rmSync(dir, { recursive: true, force: true });
  console.log("ok: openai and @anthropic-ai/sdk through the gateway");
} else {
  console.error(`kept ${dir}`);
}
