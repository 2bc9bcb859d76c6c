// The daemon's OTLP/HTTP trace receiver (POST /v1/traces) against the
// official OpenTelemetry exporters for node, pinned in package-lock.json
// and installed by scripts/install-deps.sh (nothing is fetched here):
// @opentelemetry/exporter-trace-otlp-proto (protobuf, configured only by
// the OTEL_EXPORTER_OTLP_* variables the docs give, then again gzipped)
// and @opentelemetry/exporter-trace-otlp-http (JSON). Each export must
// succeed, a wrong token must fail, and every span must be an entry of
// its trace with its parent, name, model and tokens, as `forum import
// otel` makes them. Usage: node otel_test.mjs FORUM_BIN. Exit 77 when the
// packages are not installed.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const forum = process.argv[2];
// resolved from this directory's node_modules only
const require = createRequire(path.join(here, "package.json"));
let ProtoExporter, JsonExporter, sdk, api, resources;
try {
  ProtoExporter = require("@opentelemetry/exporter-trace-otlp-proto").OTLPTraceExporter;
  JsonExporter = require("@opentelemetry/exporter-trace-otlp-http").OTLPTraceExporter;
  sdk = require("@opentelemetry/sdk-trace-base");
  api = require("@opentelemetry/api");
  resources = require("@opentelemetry/resources");
} catch (e) {
  console.error(`skip: run scripts/install-deps.sh (npm ci in tests/gateway): ${e.message}`);
  process.exit(77);
}

const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exitCode = 1; };
const eq = (a, b, what) => { if (a !== b) fail(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`); };

// ---- the daemon ---------------------------------------------------------
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "forum-otlp-"));
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

// Spans made by the SDK: a root, an LLM call under it with the GenAI
// attributes, and a tool call under that; collected in memory, then
// handed to the exporter under test.
function makeSpans(service) {
  const mem = new sdk.InMemorySpanExporter();
  const provider = new sdk.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ "service.name": service }),
    spanProcessors: [new sdk.SimpleSpanProcessor(mem)],
  });
  const tracer = provider.getTracer("otel-test", "1.0.0");
  const root = tracer.startSpan("handle request", { kind: api.SpanKind.SERVER });
  const ctx = api.trace.setSpan(api.context.active(), root);
  const llm = tracer.startSpan("chat small-model", {
    kind: api.SpanKind.CLIENT,
    attributes: { "gen_ai.operation.name": "chat", "gen_ai.request.model": "small-model",
      "gen_ai.usage.input_tokens": 31, "gen_ai.usage.output_tokens": 7 },
  }, ctx);
  const tool = tracer.startSpan("execute_tool read_file", {
    attributes: { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file" },
  }, api.trace.setSpan(ctx, llm));
  tool.addEvent("opened", { path: "/etc/hostname" });
  tool.end();
  llm.end();
  root.end();
  return mem.getFinishedSpans();
}

const exportWith = (exporter, spans) => new Promise((res) => exporter.export(spans, res));

// Every entry of the ledger ({seq, kind, actor, parent, body}).
function entries() {
  const out = execFileSync(forum, ["--ledger", dir, "--json", "ledger", "tail", "-n", "1000"], { encoding: "utf8" });
  return out.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l)).map((e) => ({
    ...e, body: JSON.parse(execFileSync(forum, ["--ledger", dir, "ledger", "body", String(e.seq)], { encoding: "utf8" })),
  }));
}

// The spans of one service are entries of one trace, linked as made.
function checkTrace(all, service, spans, how) {
  const mine = all.filter((e) => e.actor === service);
  eq(mine.length, 3, `${how}: entries of ${service}`);
  const byName = Object.fromEntries(mine.map((e) => [e.body.name, e]));
  const root = byName["handle request"], llm = byName["chat small-model"], tool = byName["execute_tool read_file"];
  if (!root || !llm || !tool) return fail(`${how}: span names ${Object.keys(byName)}`);
  const imp = all.find((e) => e.seq === root.parent);
  eq(imp?.kind, "import", `${how}: the root's parent is an import entry`);
  eq(imp?.body.format, "otel", `${how}: import format`);
  eq(root.kind, "span", `${how}: root kind`);
  eq(llm.kind, "llm_call", `${how}: llm kind`);
  eq(tool.kind, "tool_call", `${how}: tool kind`);
  eq(llm.parent, root.seq, `${how}: llm parent`);
  eq(tool.parent, llm.seq, `${how}: tool parent`);
  eq(llm.body.model, "small-model", `${how}: model`);
  eq(llm.body.tokens?.input, 31, `${how}: input tokens`);
  eq(llm.body.tokens?.output, 7, `${how}: output tokens`);
  eq(root.body.span_kind, 2, `${how}: server span kind`);
  const sdkRoot = spans.find((s) => s.name === "handle request");
  eq(root.body.trace_id, sdkRoot.spanContext().traceId, `${how}: trace id`);
  eq(root.body.id, sdkRoot.spanContext().spanId, `${how}: span id`);
  eq(tool.body.events?.[0]?.name, "opened", `${how}: event`);
}

try {
  // protobuf, configured as docs/GATEWAY.md says: the variables only
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = base;
  process.env.OTEL_EXPORTER_OTLP_HEADERS = `Authorization=Bearer%20${token}`;
  const p1 = makeSpans("svc-proto");
  const r1 = await exportWith(new ProtoExporter(), p1);
  eq(r1.code, 0, `protobuf export: ${r1.error?.message}`);
  delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  delete process.env.OTEL_EXPORTER_OTLP_HEADERS;
  // protobuf, gzipped
  const p2 = makeSpans("svc-proto-gzip");
  const r2 = await exportWith(new ProtoExporter({ url: `${base}/v1/traces`, compression: "gzip",
    headers: { Authorization: `Bearer ${token}` } }), p2);
  eq(r2.code, 0, `protobuf gzip export: ${r2.error?.message}`);
  // JSON
  const p3 = makeSpans("svc-json");
  const r3 = await exportWith(new JsonExporter({ url: `${base}/v1/traces`,
    headers: { Authorization: `Bearer ${token}` } }), p3);
  eq(r3.code, 0, `json export: ${r3.error?.message}`);
  // a wrong token: the export fails, nothing is written
  const r4 = await exportWith(new JsonExporter({ url: `${base}/v1/traces`,
    headers: { Authorization: "Bearer wrong" } }), makeSpans("svc-wrong"));
  eq(r4.code, 1, "a wrong token fails the export");
  if (!/401/.test(String(r4.error?.code ?? "") + String(r4.error?.message ?? "")))
    fail(`a wrong token: ${r4.error?.code} ${r4.error?.message}`);

  const all = entries();
  checkTrace(all, "svc-proto", p1, "protobuf");
  checkTrace(all, "svc-proto-gzip", p2, "protobuf gzip");
  checkTrace(all, "svc-json", p3, "json");
  eq(all.filter((e) => e.actor === "svc-wrong").length, 0, "entries of the wrong token");
  eq(all.filter((e) => e.kind === "import").length, 3, "one import entry per export");
} catch (e) {
  fail(e.stack);
}
daemon.kill("SIGTERM");
await new Promise((r) => daemon.on("exit", r));
if (!process.exitCode) {
  fs.rmSync(dir, { recursive: true, force: true });
  console.log("ok: the OpenTelemetry exporters (protobuf, protobuf gzip, JSON) into /v1/traces");
} else {
  console.error(`kept ${dir}`);
}
