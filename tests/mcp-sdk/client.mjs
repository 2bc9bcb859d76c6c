// client.mjs: the official MCP client SDK against `forum mcp`: connect
// (initialize), listTools, callTool ledger_append, then ledger_verify and
// more tools whose outputSchema the SDK checks each result against;
// then a submit that waits at an approval gate: a ping is answered while
// it runs, its progress arrives, and an aborted call cancels its run.
// Then the same over Streamable HTTP at a daemon's /mcp (`forum serve`):
// refused without the token; with it, the tools, a run's progress from the
// engine's events, an aborted call cancelling its run, and the session
// ended with DELETE.
// Env: FORUM_BIN (the forum binary), FORUM_LEDGER (a fresh ledger dir).
// Exits non-zero with a message on any mismatch.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

function fail(msg) {
  console.error(`client.mjs: ${msg}`);
  process.exit(1);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

const bin = process.env.FORUM_BIN;
const ledger = process.env.FORUM_LEDGER;
check(bin && ledger, 'FORUM_BIN and FORUM_LEDGER must be set');

// The stdio transport passes only a few variables to the child: give it
// what forum needs (and what a sanitizer build reads).
const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', FORUM_LEDGER: ledger };
for (const k of ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS', 'HOME']) {
  if (process.env[k] !== undefined) env[k] = process.env[k];
}

const transport = new StdioClientTransport({
  command: bin,
  args: ['mcp', '--init'],
  env,
  stderr: 'inherit',
});
const client = new Client({ name: 'forum-sdk-test', version: '1.0.0' });

const timer = setTimeout(() => fail('timed out after 150 s'), 150000);

// A run's steps over HTTP: progress for each, the gate among them.
async function httpRun(c) {
  const steps = [];
  const r = await c.callTool(
    { name: 'submit',
      arguments: { request: 'build the api database server',
                   gates: { all: true, timeout_s: 1, on_expiry: 'approve' } } },
    undefined,
    { onprogress: (p) => steps.push(p.message), timeout: 30000 });
  check(r.isError === false && r.structuredContent.answer,
        `http submit: ${JSON.stringify(r)}`);
  check(steps[0] === 'request received' && steps[steps.length - 1] === 'answer' &&
        steps.some((m) => m && m.startsWith('waiting at the gate of wave')),
        `http progress: ${JSON.stringify(steps)}`);
}

async function overHttp() {
  const dir = `${ledger}-http`;
  const daemon = spawn(bin, ['--ledger', dir, 'serve', '--port', '0'],
                       { env: { ...process.env }, stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    daemon.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    daemon.on('exit', (code) => reject(new Error(`forum serve exited ${code}`)));
  });
  try {
    const url = new URL(`http://127.0.0.1:${port}/mcp`);
    const token = readFileSync(`${dir}/token`, 'utf8').trim();
    // without the token: refused
    const anon = new Client({ name: 'anon', version: '1.0.0' });
    let refused = false;
    try {
      await anon.connect(new StreamableHTTPClientTransport(url));
    } catch (e) {
      refused = true;
    }
    check(refused, 'connected to /mcp without the token');
    const t = new StreamableHTTPClientTransport(url, {
      requestInit: { headers: { Authorization: `Bearer ${token}` } } });
    const c = new Client({ name: 'forum-sdk-http', version: '1.0.0' });
    await c.connect(t);
    check(t.sessionId && /^[0-9a-f]{32}$/.test(t.sessionId),
          `session id: ${t.sessionId}`);
    const { tools } = await c.listTools();
    // the token is what HTTP's admin routes ask for: its tools too
    check(tools.some((x) => x.name === 'submit') &&
          tools.some((x) => x.name === 'ledger_redact'),
          `http tools: ${tools.map((x) => x.name).join(', ')}`);
    const ver = await c.callTool({ name: 'ledger_verify', arguments: {} });
    check(ver.isError === false && ver.structuredContent.ok === true,
          `http ledger_verify: ${JSON.stringify(ver)}`);
    await httpRun(c);
    // an aborted call cancels its run on the daemon
    const ac = new AbortController();
    const doomed = c.callTool(
      { name: 'submit',
        arguments: { request: 'build the api database server',
                     gates: { all: true, timeout_s: 60 } } },
      undefined, { signal: ac.signal });
    await new Promise((r) => setTimeout(r, 500));
    ac.abort('changed my mind');
    await doomed.then(() => fail('an aborted http call answered'), () => {});
    let cancelled = false;
    for (let i = 0; i < 100 && !cancelled; i++) {
      const s = await c.callTool({ name: 'ledger_summary', arguments: {} });
      cancelled = (s.structuredContent.by_kind.budget ?? 0) === 1;
      if (!cancelled) await new Promise((r) => setTimeout(r, 100));
    }
    check(cancelled, 'the aborted http call\'s run was not cancelled');
    await t.terminateSession();
    await c.close();
  } finally {
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.on('exit', r));
  }
}
try {
  await client.connect(transport);
  const info = client.getServerVersion();
  check(info && info.name === 'forum', `serverInfo: ${JSON.stringify(info)}`);
  const caps = client.getServerCapabilities();
  check(caps && caps.tools, `capabilities: ${JSON.stringify(caps)}`);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check(names.includes('ledger_append'), `tools: ${names.join(', ')}`);
  check(names.includes('ledger_verify'), `tools: ${names.join(', ')}`);
  check(!names.includes('ledger_redact'), 'admin tool listed without --admin');
  for (const t of tools) {
    check(t.inputSchema && t.inputSchema.type === 'object',
          `${t.name}: inputSchema without "type": "object"`);
    check(!t.outputSchema || t.outputSchema.type === 'object',
          `${t.name}: outputSchema without "type": "object"`);
  }
  // The SDK checks structuredContent against a tool's outputSchema on
  // every call below (it throws on a mismatch).
  for (const n of ['ledger_append', 'ledger_verify', 'ledger_get', 'status',
                   'health', 'ledger_summary', 'run_list', 'route']) {
    check(tools.find((t) => t.name === n).outputSchema,
          `${n}: no outputSchema`);
  }

  const app = await client.callTool({
    name: 'ledger_append',
    arguments: { actor: 'sdk', kind: 'test', payload: { hello: 'world', n: 1 } },
  });
  check(app.isError === false, `ledger_append: ${JSON.stringify(app)}`);
  const entry = app.structuredContent;
  check(entry && entry.seq === 0 && entry.actor === 'sdk' && entry.kind === 'test',
        `ledger_append result: ${JSON.stringify(app)}`);
  check(app.content[0].type === 'text' &&
        JSON.stringify(JSON.parse(app.content[0].text)) === JSON.stringify(entry),
        'ledger_append: text content differs from structuredContent');

  const ver = await client.callTool({ name: 'ledger_verify', arguments: {} });
  check(ver.isError === false, `ledger_verify: ${JSON.stringify(ver)}`);
  const v = ver.structuredContent;
  check(v && v.ok === true && v.entries === 1,
        `ledger_verify result: ${JSON.stringify(v)}`);

  const got = await client.callTool({ name: 'ledger_get', arguments: { seq: 0 } });
  check(got.isError === false && got.structuredContent.body === 'present',
        `ledger_get: ${JSON.stringify(got)}`);
  for (const n of ['status', 'health', 'ledger_summary', 'run_list']) {
    const r = await client.callTool({ name: n, arguments: {} });
    check(r.isError === false, `${n}: ${JSON.stringify(r)}`);
  }
  const rt = await client.callTool(
    { name: 'route', arguments: { text: 'build the api database server' } });
  check(rt.isError === false && rt.structuredContent.decided === 'backend',
        `route: ${JSON.stringify(rt)}`);

  // An error of a tool with an outputSchema: isError, the error object in
  // the text content, no structuredContent (it is not the result the
  // schema describes).
  const bad = await client.callTool({ name: 'ledger_get', arguments: {} });
  check(bad.isError === true && bad.structuredContent === undefined &&
        JSON.parse(bad.content[0].text).code === 'invalid_input',
        `ledger_get without seq: ${JSON.stringify(bad)}`);
  // ... and of one without: the error object as structuredContent too.
  const bad2 = await client.callTool({ name: 'run_show', arguments: {} });
  check(bad2.isError === true && bad2.structuredContent &&
        bad2.structuredContent.code === 'invalid_input',
        `run_show without run: ${JSON.stringify(bad2)}`);

  await client.ping();

  // A run that waits at a gate for 2 s (then approved by its deadline):
  // the ping is answered while it runs, and its steps arrive as progress.
  const steps = [];
  let submitDone = false;
  const submit = client.callTool(
    { name: 'submit',
      arguments: { request: 'build the api database server',
                   gates: { all: true, timeout_s: 2, on_expiry: 'approve' } } },
    undefined,
    { onprogress: (p) => steps.push(p.message), timeout: 30000 },
  ).then((r) => { submitDone = true; return r; });
  await new Promise((r) => setTimeout(r, 300));
  await client.ping();
  check(!submitDone, 'the ping waited for the submit');
  const sub = await submit;
  check(sub.isError === false && sub.structuredContent.answer,
        `submit: ${JSON.stringify(sub)}`);
  // each step in words, from the engine's own events: the gate among them
  check(steps.some((m) => m && m.startsWith('waiting at the gate of wave')) &&
        steps[0] === 'request received',
        `progress: ${JSON.stringify(steps)}`);

  // An aborted call: the SDK sends notifications/cancelled; the run ends
  // cancelled (a budget entry says so).
  const ac = new AbortController();
  const doomed = client.callTool(
    { name: 'submit',
      arguments: { request: 'build the api database server',
                   gates: { all: true, timeout_s: 60 } } },
    undefined, { signal: ac.signal });
  await new Promise((r) => setTimeout(r, 500));
  ac.abort('changed my mind');
  await doomed.then(() => fail('an aborted call answered'), () => {});
  let cancelled = false;
  for (let i = 0; i < 100 && !cancelled; i++) {
    const s = await client.callTool({ name: 'ledger_summary', arguments: {} });
    cancelled = (s.structuredContent.by_kind.budget ?? 0) === 1;
    if (!cancelled) await new Promise((r) => setTimeout(r, 100));
  }
  check(cancelled, 'the aborted call\'s run was not cancelled');
  await client.close();
  await overHttp();
} catch (e) {
  fail(e && e.stack ? e.stack : String(e));
}
clearTimeout(timer);
console.log('mcp sdk: ok');
