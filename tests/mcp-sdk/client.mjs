// client.mjs: the official MCP client SDK against `forum mcp`: connect
// (initialize), listTools, callTool ledger_append, then ledger_verify.
// Env: FORUM_BIN (the forum binary), FORUM_LEDGER (a fresh ledger dir).
// Exits non-zero with a message on any mismatch.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

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
  args: ['mcp'],
  env,
  stderr: 'inherit',
});
const client = new Client({ name: 'forum-sdk-test', version: '1.0.0' });

const timer = setTimeout(() => fail('timed out after 60 s'), 60000);
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

  const bad = await client.callTool({ name: 'ledger_get', arguments: {} });
  check(bad.isError === true && bad.structuredContent &&
        bad.structuredContent.code === 'invalid_input',
        `ledger_get without seq: ${JSON.stringify(bad)}`);

  await client.ping();
  await client.close();
} catch (e) {
  fail(e && e.stack ? e.stack : String(e));
}
clearTimeout(timer);
console.log('mcp sdk: ok');
