// A scripted OpenAI-compatible chat server for the dashboard's browser test
// and its screenshots: it plays each role of forum's control loop from the
// system prompt, and a task offered tools calls two of them (list_dir, then
// write_file) before it answers, so a run has model calls and tool calls on
// its ledger. A prompt holding RATE_LIMIT_ME is answered 429 (a gateway call
// that failed). Every reply reports token usage and waits delayMs, so steps
// have lengths to draw.
import http from "node:http";

function reply(res, message, usage) {
  const body = JSON.stringify({
    id: "fake", object: "chat.completion", model: "fake-model",
    choices: [{ index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" }],
    usage,
  });
  res.writeHead(200, { "Content-Type": "application/json" });
  res.end(body);
}

function answer(req) {
  const msgs = req.messages || [];
  const system = (msgs.find((m) => m.role === "system") || {}).content || "";
  const text = (s) => ({ role: "assistant", content: s });
  if (system.includes("coordinator of forum")) {
    const m = /suggests the agent "([^"]+)"/.exec(system);
    const lane = m ? m[1] : "backend";
    return text(JSON.stringify({ tasks: [
      { id: "T1", agent: lane, instruction: "write the login handler" },
      { id: "T2", agent: lane, instruction: "write the session table", depends_on: ["T1"] }] }));
  }
  if (system.includes("classifier of forum")) return text('{"lane":"backend"}');
  if (system.includes("validator of forum")) return text('{"pass":true,"reason":"ok"}');
  if (system.includes("synthesizer of forum")) return text("The login endpoint and its session table are written.");
  const tools = (req.tools || []).map((t) => t.function && t.function.name);
  const used = msgs.filter((m) => m.role === "tool").length;
  const call = (name, args) => ({ role: "assistant", content: null, tool_calls: [{
    id: `call_${used + 1}`, type: "function", function: { name, arguments: JSON.stringify(args) } }] });
  if (tools.includes("list_dir") && used === 0) return call("list_dir", { path: "." });
  if (tools.includes("write_file") && used === 1)
    return call("write_file", { path: "login.txt", content: "POST /login checks the password and sets a session.\n" });
  return text("Done: the handler is written to login.txt.");
}

// Starts the server on an ephemeral port; resolves to {port, close()}.
export function startFakeModel(delayMs = 120) {
  const server = http.createServer((req, res) => {
    let data = "";
    req.on("data", (d) => { data += d; });
    req.on("end", () => {
      let j = {};
      try { j = JSON.parse(data); } catch (e) { /* answered as a task */ }
      // a prompt asking for it gets the provider's rate limit (a failed call)
      if (JSON.stringify(j.messages || []).includes("RATE_LIMIT_ME")) {
        setTimeout(() => {
          res.writeHead(429, { "Content-Type": "application/json" });
          res.end(JSON.stringify({ error: { message: "slow down", type: "rate_limit_error" } }));
        }, delayMs);
        return;
      }
      const msg = answer(j);
      const prompt = JSON.stringify(j.messages || []).length;
      setTimeout(() => reply(res, msg, {
        prompt_tokens: Math.ceil(prompt / 4), completion_tokens: 40 + (prompt % 60),
        total_tokens: Math.ceil(prompt / 4) + 40 + (prompt % 60),
      }), delayMs);
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () =>
    resolve({ port: server.address().port, close: () => server.close() })));
}
