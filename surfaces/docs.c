/* docs: writes docs/HTTP.md and docs/MCP.md from the handler table (the
 * method files of surfaces/methods/) and the error table, with the prose for
 * each page kept here beside the code it describes. scripts/gen-docs.sh runs
 * it; tests/test_docs.c checks the committed files match. */
#include "surfaces/docs.h"

#include <stdarg.h>
#include <string.h>

#include "ledger/fo_json.h"
#include "surfaces/mcp.h"
#include "surfaces/surf.h"

/* A page being written: the first failure sticks, later writes no-op. */
struct page {
    struct fo_buf *out;
    int rc;
};

static void put(struct page *p, const char *s)
{
    if (p->rc == FO_OK)
        p->rc = fo_buf_puts(p->out, s);
}

static void putf(struct page *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(struct page *p, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line)) {
        if (p->rc == FO_OK)
            p->rc = FO_E_INTERNAL; /* a line of ours too long: a bug */
        return;
    }
    put(p, line);
}

#define GENERATED_NOTE                                                         \
    "<!-- Generated from the handler table by `forum docs %s` "                \
    "(surfaces/docs.c).\n"                                                     \
    "     Do not edit: change the method's file in surfaces/methods/ or the "  \
    "prose\n     in surfaces/docs.c, then run\n"                               \
    "     scripts/gen-docs.sh. tests/test_docs.c fails when this file is "     \
    "stale. -->\n"

static const char *const http_intro[] = {
    "# HTTP API\n"
    "\n"
    "`forum serve` answers HTTP/1.1 on 127.0.0.1:8080 by default (`--host`,\n"
    "`--port`). Every route is one method of the handler table (one file\n"
    "a method in `surfaces/methods/`, its handler in `surfaces/methods.c`):\n"
    "`GET /methods` serves the same list as JSON, and\n"
    "`forum mcp` offers the same methods as MCP tools (docs/MCP.md) with the\n"
    "same inputs and results.\n"
    "\n",
    "## Requests and responses\n"
    "\n"
    "- JSON in and out. Responses are `Content-Type: application/json`, "
    "written\n"
    "  in the canonical form of RFC 8785 (sorted keys, no white space, "
    "integers\n"
    "  such as `ts` never in exponent form).\n"
    "- `GET` routes take their input as query parameters and `{x}` path\n"
    "  segments (`GET /ledger/42`, `GET /verify?deep=1`; booleans as `1`/`0` "
    "or\n"
    "  `true`/`false`). `POST` routes take a JSON object as the body.\n"
    "  Integers there are read in one spelling only: digits without a sign,\n"
    "  space, leading zero or percent-encoding, at most 2^53 - 1 (what a "
    "JSON\n"
    "  number holds exactly); anything else is 400 `invalid_input`.\n"
    "- The input is checked against the method's schema before the method "
    "runs:\n"
    "  a missing field, an unknown field, a wrong type or a value out of "
    "range is\n"
    "  400 `invalid_input` with a message naming the field.\n"
    "- Success is 200 with the method's result object: the same object the "
    "MCP\n"
    "  tool gives as `structuredContent` and the CLI prints with `--json`.\n"
    "  Where its shape is declared (the MCP tool's `outputSchema`), the\n"
    "  method below lists its fields under Result.\n"
    "- Keep-alive is supported.\n"
    "\n",
    "## Connections\n"
    "\n"
    "The daemon keeps at most `--max-connections` connections open at once\n"
    "(by default the open-file limit less 128; docs/OPERATIONS.md). At that\n"
    "number it stops accepting: a new client's connection waits in the "
    "kernel's\n"
    "backlog, unanswered, until an open one closes, and is then served as "
    "usual.\n"
    "Clients that hold connections open should close the ones they no longer\n"
    "use. The connections already open are served throughout, also when the\n"
    "daemon runs out of file descriptors (it then pauses accepting for 200 ms "
    "at\n"
    "a time).\n"
    "\n"
    "A request must arrive whole (request line, headers and body) within\n"
    "`--timeout-s` (default 30 s) of its first byte, however steadily its "
    "bytes\n"
    "come; on a keep-alive connection each request has its own deadline. A\n"
    "connection also closes after `--timeout-s` without a byte while a "
    "request\n"
    "is being read or a reply written, and when idle that long between\n"
    "requests. Either way it closes without an answer (below).\n"
    "\n"
    "A client of `POST /submit`, `/plan` or `/plan/run` that hangs up (or\n"
    "shuts its side down) before the answer cancels the run: it ends as\n"
    "`run_cancel` ends it (a `budget` entry with reason cancelled, state\n"
    "`cancelled`), and the daemon's log says why. A run begun with `POST\n"
    "/runs` outlives its call and is cancelled only by `run_cancel`.\n"
    "\n",
    "## Authentication\n"
    "\n"
    "Every route but `/health` needs `Authorization: Bearer <token>`, where "
    "the\n"
    "token is the content of `DIR/token` in the data dir (mode 0600). A "
    "daemon\n"
    "started with `--no-auth` lifts this for every method but the admin "
    "ones:\n"
    "admin methods need the token always. A missing or wrong token is 401\n"
    "`unauthorized`.\n"
    "\n"
    "## Host, Origin and Content-Type\n"
    "\n"
    "So that a web page cannot use the API through a browser (a cross-site\n"
    "form, a `no-cors` fetch, a page that rebinds its own name to this\n"
    "address), every request is checked, with or without `--no-auth`:\n"
    "\n"
    "- `Host`, when sent, must name this daemon: an IP literal that is\n"
    "  loopback or the listen address (any address on a wildcard bind),\n"
    "  `localhost`, the `--host` name, or a name given with\n"
    "  `--allowed-host NAME` (repeatable; forum.json `allowed_hosts`), such\n"
    "  as a proxy's public name. Any port. Otherwise 421\n"
    "  `misdirected_request`, on every route, `/health` included.\n"
    "- `Origin`, when sent (browsers send it), must be this daemon: an\n"
    "  allowed host on the port the request came to, or an `--allowed-host`\n"
    "  name. Otherwise (another site, `null`, another local port) 403\n"
    "  `forbidden_origin`.\n"
    "- Every call of a method with any verb but `GET` must carry\n"
    "  `Content-Type: application/json` (parameters such as `charset`\n"
    "  allowed), with a body or without: otherwise 415\n"
    "  `unsupported_media_type`. With curl, give\n"
    "  `-H 'Content-Type: application/json'` (`-d` alone sends a form).\n"
    "\n",
    "## The dashboard: `GET /`\n"
    "\n"
    "`GET /` serves the web dashboard (`/assets/app.js`, `/assets/app.css`):\n"
    "static files inside the binary that need no token, since they hold no\n"
    "data; the page sends the token with every call it makes. `forum\n"
    "dashboard` prints the link that signs it in (docs/DASHBOARD.md). A\n"
    "token in the query string (`token=`, `access_token=`) is 400 on every\n"
    "route: the token goes in the `Authorization` header only.\n"
    "\n",
    "## The event stream: `GET /events`\n"
    "\n"
    "New ledger entries as Server-Sent Events (`text/event-stream`), as\n"
    "they are committed, by this daemon or any other writer of the\n"
    "ledger. Each event is\n"
    "\n"
    "    id: <seq>\n"
    "    event: <kind>\n"
    "    data: <the entry as GET /ledger/{seq} serves it, plus \"run\">\n"
    "\n"
    "where `run` is the seq of the run the entry belongs to (its nearest\n"
    "`request` ancestor, itself for a request) or `null`. Lines starting\n"
    "with `:` are comments: the stream opens with one naming the seq it\n"
    "starts from, and an idle stream gets one every 15 s.\n"
    "\n"
    "| query | meaning |\n"
    "|---|---|\n"
    "| `run=N` | only the entries of run N (404 `not_a_run` when N is not a "
    "run) |\n"
    "| `kind=a,b` | only entries of these kinds (at most 16); a kind forum "
    "never "
    "writes and the ledger holds no entry of is 400 |\n"
    "| `from=SEQ` | start at SEQ (default: only entries committed from now on) "
    "|\n"
    "\n"
    "A `Last-Event-ID: <seq>` header (what an EventSource sends when it\n"
    "reconnects) resumes after that seq and wins over `from`: since ids are\n"
    "seqs, nothing is missed or repeated across a reconnect or a daemon\n"
    "restart. Any other parameter is 400; so is a `token` in the query\n"
    "string: the token goes in the `Authorization` header only, so it never\n"
    "reaches a log or a proxy's history. The stream ends when the daemon\n"
    "drains (reconnect with `Last-Event-ID`); a client that stops reading\n"
    "is dropped once its output has stalled for `--timeout-s`. Streams\n"
    "count as connections (`--max-connections`); `/metrics` has\n"
    "`forum_events_streams` and `forum_events_sent_total`. From a shell:\n"
    "\n"
    "    curl -N -H \"Authorization: Bearer $(cat DIR/token)\" \\\n"
    "      'http://127.0.0.1:8080/events?kind=request,answer'\n"
    "\n"
    "or `forum ledger tail -f`, which reads the ledger itself.\n"
    "\n",
    "## The public log: `GET /tlog/`\n"
    "\n"
    "The daemon serves its log as [C2SP tlog-tiles](https://c2sp.org/"
    "tlog-tiles),\n"
    "so any tlog client (Go's `golang.org/x/mod/sumdb/tlog`, `forum verify\n"
    "--tiles http://HOST:PORT/tlog`) can check it without the database:\n"
    "\n"
    "- `GET /tlog/checkpoint`: the latest signed checkpoint with its "
    "witness\n"
    "  cosignatures, `text/plain; charset=utf-8`, `Cache-Control: "
    "no-cache`.\n"
    "- `GET /tlog/tile/<L>/<N>[.p/<W>]`: Merkle tiles; `GET\n"
    "  /tlog/tile/entries/<N>[.p/<W>]`: entry bundles (each entry: the "
    "uint16\n"
    "  length 32 and the entry hash). `application/octet-stream`,\n"
    "  `Cache-Control: public, max-age=31536000, immutable`. `<N>` in "
    "groups\n"
    "  of three digits, all but the last prefixed `x`; only that canonical\n"
    "  spelling is served (anything else, or a tile not published, is 404).\n"
    "\n"
    "Kept current by the daemon (no cron): after each checkpoint it signs,\n"
    "it writes the new tiles under `DIR/tlog`, then serves the checkpoint.\n"
    "Full tiles come from memory or that directory, never from the "
    "database.\n"
    "No token is needed unless the daemon runs `--no-tlog-public`; with\n"
    "`--tlog-hashes-only` the entry bundles are 404 (docs/SECURITY.md).\n"
    "Errors are the JSON errors below. `HEAD` works as on every route.\n"
    "\n"
    "**`POST /add-checkpoint`** ([C2SP tlog-witness](https://c2sp.org/"
    "tlog-witness))\n"
    "is served when the daemon witnesses other logs (forum.json\n"
    "`witness_of`): the body is `old <size>`, the consistency proof lines\n"
    "(base64), an empty line and the signed checkpoint; 200 with the\n"
    "witness's cosignature line, 409 `text/x.tlog.size` with its size when\n"
    "`old` is not the size it cosigned last, 404 for a log it does not\n"
    "witness, 403 when no signature by that log verifies, 422 when the\n"
    "proof fails (a fork: refused, and said so in the body and the "
    "log), 400\n"
    "for a malformed body. No token: the log's signature is the "
    "credential.\n"
    "docs/LEDGER.md, \"Witnessing by protocol\".\n"
    "\n",
    "## The model gateway: `/v1/`\n"
    "\n"
    "`POST /v1/chat/completions` (OpenAI-compatible), `POST /v1/responses`\n"
    "(OpenAI Responses), `POST /v1/messages` (Anthropic Messages, translated\n"
    "for an OpenAI-compatible provider when no Anthropic one serves the\n"
    "model) and `GET /v1/models` put the daemon between an agent and its\n"
    "model: the request goes to the provider of forum.json its `model` names\n"
    "(the next one when it fails before answering), as the client sent it;\n"
    "the answer (a stream chunk by chunk) comes back as the provider gave it\n"
    "(a plain one with tool calls written as text made real when the forge\n"
    "layer is on for the key or the provider), once the call is a durable\n"
    "`gateway_call` entry. The token, or a client\n"
    "key (`forum key add`, with its own budgets, rate and models), is\n"
    "accepted as a bearer or as\n"
    "`x-api-key`; errors are in each API's own shape, not the ones below.\n"
    "docs/GATEWAY.md.\n"
    "\n"
    "## OpenTelemetry traces: `POST /v1/traces`\n"
    "\n"
    "An OTLP/HTTP trace receiver: an `ExportTraceServiceRequest` as the\n"
    "OpenTelemetry exporters send it (`application/x-protobuf` or\n"
    "`application/json`, `Content-Encoding: gzip` or none), with the bearer\n"
    "token. Its spans become entries as `forum import otel` makes them (an\n"
    "`import` entry, then one entry a span under its parent's), durable\n"
    "before the answer: an `ExportTraceServiceResponse` in the request's\n"
    "encoding, whose `partial_success` counts the spans refused (a bad or\n"
    "duplicate span id, a bad trace id) and says why. A malformed body is\n"
    "400, over the span or size caps 413, another Content-Type or encoding\n"
    "415, all with the error body below. docs/GATEWAY.md.\n"
    "\n",
    "## MCP over HTTP: `/mcp`\n"
    "\n"
    "`POST`, `GET` and `DELETE /mcp` serve the Model Context Protocol's\n"
    "Streamable HTTP transport with the token: the table's methods as\n"
    "tools, sessions by `Mcp-Session-Id`, a run's steps as progress on an\n"
    "event stream, cancel through the engine. Its replies are JSON-RPC\n"
    "messages, not the error bodies below. docs/MCP.md, \"Over HTTP\".\n"
    "\n",
    "## Errors\n"
    "\n"
    "Every error the application decides has a JSON body\n"
    "`{\"error\": \"<message>\", \"code\": \"<stable_name>\"}`. The message "
    "is for\n"
    "people and may change; the code is stable.\n"
    "\n"
    "| status | when |\n"
    "|---|---|\n"
    "| 400 | bad input: not JSON, not an object, a field missing, unknown, "
    "of the wrong type or out of range |\n"
    "| 401 | no token, or a wrong one |\n"
    "| 404 | no such entry, or no such route; an entry that is not a run "
    "(`not_a_run`, for `run_get` and `run_cancel`) |\n"
    "| 405 | the route exists, with another HTTP method (the `Allow` header "
    "names it). `HEAD` on a `GET` route answers the `GET`'s status and "
    "headers, its `Content-Length` included, and no body |\n"
    "| 409 | `run_cancel` of a run this daemon does not run: in progress in "
    "another process, or its state `unknown` (`run_elsewhere`) |\n"
    "| 410 | the body was redacted (`redacted`) |\n"
    "| 413 | the input is over the method's cap (`input_too_large`), or a "
    "`ledger_append` payload's canonical form is over the ledger's body "
    "limit (`body_too_large`) |\n"
    "| 500 | a storage or internal error |\n"
    "| 502 | a model answered nonsense |\n"
    "| 503 | draining during shutdown: requests on keep-alive connections "
    "already open (`draining`); `run_start` with `max_runs` runs in progress "
    "(`busy`); every write, and `GET /health`, once the ledger's files were "
    "deleted, replaced or truncated under the daemon (`storage_moved`, until "
    "it is restarted) |\n"
    "\n"
    "Transport faults that libevent 2.1 answers itself keep libevent's "
    "status\n"
    "and its plain (HTML) body: a malformed request line, headers over the\n"
    "size limit, a negative `Content-Length`, a body over the server's cap.\n"
    "libevent 2.1 cannot send 408: a request that stalls past the read "
    "timeout\n"
    "is closed without an answer, and the daemon keeps serving; so is a\n"
    "request that has not arrived whole by its deadline (Connections, "
    "above).\n"
    "\n",
    NULL};

static const char *const mcp_intro[] = {
    "# MCP server\n"
    "\n"
    "`forum mcp` serves the Model Context Protocol on standard input and\n"
    "output: JSON-RPC 2.0, one message a line. Beside a daemon that serves\n"
    "the same ledger it is that daemon's client: every message goes to the\n"
    "daemon's `/mcp`, so tool calls run on the daemon, with its models,\n"
    "tools, sandbox and runs, and report progress, ask at gates and cancel\n"
    "as below (stderr says which it is; `--local` keeps them here);\n"
    "with none it hosts the same engine in its own process (the loop, the\n"
    "engine and the group committer `forum serve` is made of, and its\n"
    "`/mcp` on a loopback port with a token of its own) and bridges to it\n"
    "the same way, so every call behaves alike. The daemon also serves MCP "
    "over HTTP at `/mcp` (\"Over HTTP\",\n"
    "below), which editors that keep long-lived servers can use directly.\n"
    "Every method of "
    "the\n"
    "handler table is a tool of the same name, with the same input schema "
    "and\n"
    "the same result object as its HTTP route (docs/HTTP.md). A tool with\n"
    "\"also answers as\" below is listed once more under each of those names:\n"
    "the Python reference's tool names (docs/COMPATIBILITY.md).\n"
    "\n"
    "If the daemon stops while `forum mcp` is its client (a `forum serve "
    "stop`,\n"
    "a crash, an upgrade), the session goes on: the first call whose\n"
    "connection is refused finds where to go instead, a daemon serving the\n"
    "ledger by then (restarted on another port: its session is opened again\n"
    "with the client's own `initialize`) or, with none, an engine `forum "
    "mcp`\n"
    "starts in its own process for the rest of the session (stderr says so;\n"
    "`status` answers `\"engine\": \"in process\"`), and the call is sent "
    "there;\n"
    "the client sees no error. A call in flight when the daemon died is\n"
    "answered with an error (`the daemon did not answer`): it may have been\n"
    "acted on, so it is not sent twice; a run it started is resumed by the\n"
    "next daemon. Once the session runs in process it stays there, even if\n"
    "the daemon comes back.\n"
    "\n",
    "## Running\n"
    "\n"
    "    forum --ledger DIR mcp [--admin]\n"
    "\n"
    "The data dir comes from `--ledger`, else `FORUM_LEDGER`, else\n"
    "`./forum-ledger`. stdout carries protocol messages only; logs go to\n"
    "stderr. Standard input may be a pipe or a regular file\n"
    "(`forum mcp < requests.jsonl`). Exit codes: 0 at the end of input (a "
    "last\n"
    "line without a newline is still served), 2 for a bad command line, 3 "
    "when\n"
    "the ledger cannot be opened or the output cannot be written.\n"
    "\n"
    "The ledger is `--ledger DIR`, else `$FORUM_LEDGER`, else "
    "`./forum-ledger`\n"
    "of the directory the client starts the server in; its path and entry\n"
    "count are logged on stderr. A ledger that does not exist is an error\n"
    "(exit 3, naming `--ledger`, `FORUM_LEDGER` and `--init`) unless `--init`\n"
    "is given, so a client started in the wrong directory never makes a\n"
    "stray ledger: create it once with `forum --ledger DIR ledger init`.\n"
    "\n"
    "A client configuration (the shape Claude Desktop, Cursor and most\n"
    "MCP clients read):\n"
    "\n"
    "```json\n"
    "{\n"
    "  \"mcpServers\": {\n"
    "    \"forum\": {\n"
    "      \"command\": \"forum\",\n"
    "      \"args\": [\"--ledger\", \"/home/me/forum-ledger\", \"mcp\"]\n"
    "    }\n"
    "  }\n"
    "}\n"
    "```\n"
    "\n"
    "Setting `FORUM_LEDGER` in the entry's `env` instead of `--ledger` works\n"
    "as well. Add `\"--admin\"` to `args` to offer the admin tools.\n"
    "\n"
    "`forum --ledger DIR mcp --print-config CLIENT` prints the entry for\n"
    "this binary and ledger with absolute paths (an editor starts servers\n"
    "from anywhere), and on stderr where it goes:\n"
    "\n"
    "| CLIENT | file | top-level key |\n"
    "|---|---|---|\n"
    "| `claude-desktop` | `claude_desktop_config.json` (macOS "
    "`~/Library/Application Support/Claude/`, Windows "
    "`%APPDATA%\\Claude\\`, "
    "Linux `~/.config/Claude/`) | `mcpServers` |\n"
    "| `vscode` | `.vscode/mcp.json` in a workspace, or the user "
    "configuration (\"MCP: Open User Configuration\") | `servers`, with "
    "`\"type\": \"stdio\"` |\n"
    "| `cursor` | `~/.cursor/mcp.json`, or `.cursor/mcp.json` in a project | "
    "`mcpServers` |\n"
    "| `claude-code` | `.mcp.json` at the project's root (or `claude mcp "
    "add forum -- forum --ledger DIR mcp`) | `mcpServers`, with `\"type\": "
    "\"stdio\"` |\n"
    "\n"
    "The test suite runs each printed entry's command as the client would.\n"
    "\n",
    "## Protocol\n"
    "\n"
    "- `initialize` echoes the client's `protocolVersion` when it is one of\n"
    "  2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, and answers 2025-11-25\n"
    "  otherwise; capabilities `tools`, `resources` and `prompts` (none\n"
    "  changes while it runs, no subscriptions), serverInfo\n"
    "  `{\"name\": \"forum\", \"version\": ...}`.\n"
    "- `ping` answers `{}`.\n"
    "- `tools/list` gives every tool as `{name, description, inputSchema}` "
    "in one\n"
    "  page; every `inputSchema` has `\"type\": \"object\"`.\n"
    "- `tools/call` takes `{name, arguments}`.\n"
    "- A message without an `id` is a notification "
    "(`notifications/initialized`,\n"
    "  `notifications/cancelled`, ...) and is never answered. An `id` may be "
    "a\n"
    "  number or a string and is echoed; `id` 0 is a request like any "
    "other.\n"
    "- Batches (a JSON array of messages) are accepted only once "
    "`initialize`\n"
    "  has negotiated 2025-03-26, the one version whose specification has "
    "them:\n"
    "  the answer is one array of the replies with notifications left out "
    "(no\n"
    "  line at all when every message was a notification), at most 1000\n"
    "  messages a batch. Under every other version a batch is -32600, and an\n"
    "  empty batch `[]` always is.\n"
    "- A line holds at most 4 MiB (without its newline). A longer line is\n"
    "  answered with -32600 (id null) and skipped; the next line is served.\n"
    "- Every line is read with forum's strict JSON reader (valid UTF-8, no\n"
    "  duplicate keys, nesting at most 64 deep) and every reply is written "
    "in\n"
    "  canonical JSON (RFC 8785) as one line with one write.\n"
    "\n"
    "## Resources and prompts\n"
    "\n"
    "- `resources/list`: `forum://checkpoint/latest` (the latest signed\n"
    "  checkpoint, text/plain) and `forum://status`; `resources/templates/"
    "list`:\n"
    "  `forum://entry/{seq}` (`{entry, body}`, body null when redacted) and\n"
    "  `forum://run/{id}` (what `run_get` gives). `resources/read` of a uri\n"
    "  that names nothing is error -32002 with the reason.\n"
    "- `prompts/list`: `audit_run` (argument `run`: the run's record is\n"
    "  attached, with what to check) and `explain_verify_failure` (runs a\n"
    "  deep verify and attaches the result). `prompts/get` of an unknown\n"
    "  prompt or with a bad argument is -32602.\n"
    "\n"
    "## Long calls: concurrency, progress, cancel, gates\n"
    "\n"
    "- `submit`, `plan`, `plan_run`, `run_start` and the gate tools go to\n"
    "  the engine at once and hold no thread while their runs go on: `ping`,\n"
    "  reads and other calls sent meanwhile are answered, so their replies\n"
    "  may come before the run's. Every other call is answered in the "
    "order\n"
    "  it came.\n"
    "- A long call whose `params._meta.progressToken` is set gets\n"
    "  `notifications/progress` as its run advances: `progress` counts the\n"
    "  run's entries, `message` names each step (`plan (coordinator)`,\n"
    "  `task (backend)`, `gate_requested (gate)`, ...).\n"
    "- `notifications/cancelled` with the call's `requestId` cancels its "
    "run\n"
    "  at its next step, witnessed like `run_cancel` (a `budget` entry with\n"
    "  reason cancelled), and the call is not answered. A run begun by\n"
    "  `run_start` outlives the call; cancel it with `run_cancel`. Beside a\n"
    "  daemon it is the daemon's and outlives the editor too; with no daemon\n"
    "  `forum mcp` waits for it at the end of input (below).\n"
    "- When the client declared the `elicitation` capability, each approval\n"
    "  gate a run of this session waits at is asked with "
    "`elicitation/create`:\n"
    "  the question and the wave's tasks, a `decision` (approve, edit,\n"
    "  reject), a `reason`, and one field per task for an edited "
    "instruction.\n"
    "  An accepted answer is witnessed as `gate_approved`, `gate_edited` or\n"
    "  `gate_rejected` with the approver `<client name> (MCP elicitation)`;\n"
    "  a declined one rejects the wave; a cancelled one leaves the gate\n"
    "  waiting (decide it with `gate_approve` and the others).\n"
    "- At the end of input every call still running is answered before the\n"
    "  process exits 0; with no daemon, the runs the session began with\n"
    "  `run_start` end first too (each within its own budget).\n"
    "- Batches (a JSON array on one line) are accepted under protocol\n"
    "  version 2025-03-26 only (at most 1,000 messages): each message goes\n"
    "  on its own and the replies come back as one array, in order.\n"
    "\n",
    "## Over HTTP: the daemon's `/mcp`\n"
    "\n"
    "`forum serve` answers MCP's Streamable HTTP transport at `/mcp`, with\n"
    "the same tools, on the daemon's own engine: runs are the daemon's,\n"
    "listed in `GET /runs` while they run, and they outlive the editor.\n"
    "\n"
    "- Every request carries the daemon's token (`Authorization: Bearer\n"
    "  TOKEN`, 401 without, as on every route); with it the admin tools\n"
    "  are offered too (under `--no-auth`, without the token, they are not).\n"
    "  `Host` and `Origin` are checked as on every route (a page of another\n"
    "  site is refused: DNS rebinding).\n"
    "- `POST /mcp` carries one JSON-RPC message (a batch is 400).\n"
    "  `initialize` opens a session: its id comes back as `Mcp-Session-Id`,\n"
    "  and every later message names it (400 without, 404 once the session\n"
    "  ended: initialize again). `MCP-Protocol-Version`, when sent, must be\n"
    "  one of the versions above (else 400). A notification or a response\n"
    "  is 202 with no body.\n"
    "- A request is answered as `application/json`, or, when the call\n"
    "  reports steps (a run's `progressToken`, a gate to ask about) and the\n"
    "  client's `Accept` has `text/event-stream`, as an event stream: each\n"
    "  step as `notifications/progress` (from the engine's own events: a run\n"
    "  of 10 ms reports every step, one per entry of the run), an\n"
    "  `elicitation/create` for each gate it waits at, then the result; the\n"
    "  stream then ends.\n"
    "- `submit`, `plan`, `plan_run`, `run_start` and the gate tools go to\n"
    "  the engine and hold no thread while they run; reads run on the\n"
    "  daemon's workers.\n"
    "- `notifications/cancelled` cancels the call's run through the engine\n"
    "  (witnessed once, a `budget` entry with reason cancelled); its result\n"
    "  is not sent. A client that hangs up does not cancel: the\n"
    "  specification says disconnection is not cancellation, and the run\n"
    "  goes on (cancel it with `run_cancel`).\n"
    "- `GET /mcp` opens the session's own stream (one a session, 409 for a\n"
    "  second; a comment every 15 s keeps it open): an elicitation for a\n"
    "  gate whose call's client hung up is sent there. `DELETE /mcp` ends\n"
    "  the session and its stream (204); its runs go on.\n"
    "- At most 256 sessions; when full, the longest idle one without calls\n"
    "  in flight goes once it has been idle a day (else `initialize` is\n"
    "  503). At most 64 run calls in flight a session.\n"
    "\n"
    "`forum --ledger DIR mcp --print-config CLIENT --http` prints the entry\n"
    "for the running daemon's `/mcp` (its URL, and its token as a header:\n"
    "keep that file private) for `vscode`, `cursor` and `claude-code` (or\n"
    "`claude mcp add --transport http forum http://127.0.0.1:8080/mcp\n"
    "--header \"Authorization: Bearer TOKEN\"`). Claude Desktop adds HTTP\n"
    "servers as connectors in its settings; use the stdio entry there.\n"
    "\n",
    "## Errors\n"
    "\n"
    "Protocol errors are JSON-RPC errors `{\"code\", \"message\"}`:\n"
    "\n"
    "| code | when |\n"
    "|---|---|\n"
    "| -32700 | the line is not strict JSON (id null) |\n"
    "| -32600 | not an object, `jsonrpc` not `\"2.0\"`, a missing or "
    "non-string `method`, an `id` neither a number nor a string, a batch "
    "(except under 2025-03-26), an empty batch, a line over 4 MiB |\n"
    "| -32601 | an unknown method (`server/discover` included) |\n"
    "| -32602 | `params` not an object, `tools/call` without a string "
    "`name`, an unknown tool (admin tools are unknown without `--admin`) |\n"
    "| -32603 | a reply that could not be written (over 64 MiB), or out of "
    "memory |\n"
    "\n"
    "A tool that fails, or arguments that do not fit the tool's schema, give "
    "a\n"
    "result with `isError: true` rather than a protocol error, so the model "
    "sees\n"
    "what was wrong. Its text content is the error object "
    "`{\"error\", \"code\"}`\n"
    "as JSON:\n"
    "\n"
    "```json\n"
    "{\"content\":[{\"text\":\"{\\\"code\\\":\\\"invalid_input\\\","
    "\\\"error\\\":\\\"seq: required\\\"}\",\"type\":\"text\"}],"
    "\"isError\":true}\n"
    "```\n"
    "\n"
    "A tool without an `outputSchema` also gives the error object as\n"
    "`structuredContent`. One with an `outputSchema` does not: a client\n"
    "checks `structuredContent` against the schema whenever it is there (the\n"
    "official TypeScript SDK does so even when `isError` is true), and an\n"
    "error object is not the result the schema describes.\n"
    "\n"
    "A successful call gives the method's result object twice: as the text\n"
    "content (canonical JSON) and as `structuredContent`, with `isError:\n"
    "false`. Where the result is structured and stable (the ledger's reads\n"
    "and writes, checkpoints and proofs, `status`, `health`, `route`, the\n"
    "runs, gates and sessions lists) the tool declares its shape in\n"
    "`tools/list` as `outputSchema` (MCP 2025-06-18), its fields shown "
    "below\n"
    "under each tool's Result: the fields every result carries are "
    "required,\n"
    "every field is described, and none refuses a field it does not name,\n"
    "so a result may grow. Arguments are held to the method's input cap,\n"
    "measured on their canonical JSON (`input_too_large`); a "
    "`ledger_append`\n"
    "payload whose canonical form is over the ledger's body limit is\n"
    "`body_too_large`, as over HTTP.\n"
    "\n",
    "## Admin tools\n"
    "\n"
    "Tools whose access is `admin` are listed and callable only when the "
    "server\n"
    "runs as `forum mcp --admin`; without it they are unknown tools "
    "(-32602).\n"
    "Whoever can start `forum mcp` can read the ledger's files anyway, so "
    "the\n"
    "flag guards against a model calling them, not against the user.\n"
    "\n",
    NULL};

static const char *access_name(unsigned flags)
{
    return (flags & SURF_ADMIN)   ? "admin"
           : (flags & SURF_WRITE) ? "write"
                                  : "read";
}

/* Where a method runs (the table's `where` column), for readers. */
static const char *where_name(int where)
{
    return where == SURF_ON_LOOP     ? "the event loop (answers at once)"
           : where == SURF_ON_COMMIT ? "the group committer (answers once "
                                       "its entry is durable)"
           : where == SURF_ON_RUN    ? "the run engine (the request waits, "
                                       "holding no thread, for its run)"
                                     : "a worker thread";
}

static void put_cap(struct page *p, size_t cap)
{
    if (cap % (1024 * 1024) == 0)
        putf(p, "%zu bytes (%zu MiB)", cap, cap / (1024 * 1024));
    else if (cap % 1024 == 0)
        putf(p, "%zu bytes (%zu KiB)", cap, cap / 1024);
    else
        putf(p, "%zu bytes", cap);
}

/* The code table, from fo_err: the stable names on the wire. */
static void put_codes(struct page *p, int http)
{
    put(p, http ? "### Error codes\n\n| code | status | meaning |\n|---|---|"
                  "---|\n"
                : "### Error codes\n\nThe `code` of an `isError` result:\n\n"
                  "| code | meaning |\n|---|---|\n");
    for (int c = 1; c < FO_E__COUNT; c++) {
        if (http)
            putf(p, "| `%s` | %d | %s |\n", fo_code_name(c), surf_code_http(c),
                 fo_code_message(c));
        else
            putf(p, "| `%s` | %s |\n", fo_code_name(c), fo_code_message(c));
    }
    put(p, "\n");
}

/* Where each input field of a GET route goes: path segment or query. */
static void put_get_input(struct page *p, const struct surf_method *m)
{
    const cJSON *props =
        cJSON_GetObjectItemCaseSensitive(surf_schema(m), "properties");
    const cJSON *f;
    int any = 0;
    cJSON_ArrayForEach (f, props) {
        char seg[128];
        int n = snprintf(seg, sizeof(seg), "{%s}", f->string);
        int in_path = n > 0 && (size_t)n < sizeof(seg) &&
                      strstr(m->http_path, seg) != NULL;
        putf(p, "%s`%s` (%s)", any ? ", " : "- input: ", f->string,
             in_path ? "path" : "query");
        any = 1;
    }
    put(p, any ? "\n" : "- input: none\n");
}

/* A schema's type for people: "integer", "string or null", "array of
 * {agent, score}". */
static void put_type(struct page *p, const cJSON *s)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(t)) {
        put(p, t->valuestring);
    } else if (cJSON_IsArray(t)) {
        const cJSON *x;
        int k = 0;
        cJSON_ArrayForEach (x, t)
            putf(p, "%s%s", k++ ? " or " : "", x->valuestring);
    } else {
        put(p, "any");
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *ip = cJSON_GetObjectItemCaseSensitive(items, "properties");
    if (ip) {
        put(p, " of {");
        const cJSON *f;
        int k = 0;
        cJSON_ArrayForEach (f, ip)
            putf(p, "%s%s", k++ ? ", " : "", f->string);
        put(p, "}");
    } else if (items) {
        put(p, " of ");
        put_type(p, items);
    }
}

/* The declared shape of a method's result (surf_output_schema), as a
 * table of its fields; the full schema is served by tools/list. */
static void put_result(struct page *p, const struct surf_method *m, int http)
{
    const cJSON *os = surf_output_schema(m);
    if (!os)
        return;
    put(p, http ? "Result (the 200 body; the MCP tool's `outputSchema`):\n\n"
                : "Result (`outputSchema`, the `structuredContent` of a "
                  "success):\n\n");
    put(p, "| field | type | description |\n|---|---|---|\n");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(os, "required");
    const cJSON *f;
    cJSON_ArrayForEach (f, cJSON_GetObjectItemCaseSensitive(os, "properties")) {
        int required = 0;
        const cJSON *r;
        cJSON_ArrayForEach (r, req)
            required |= !strcmp(r->valuestring, f->string);
        putf(p, "| `%s` | ", f->string);
        put_type(p, f);
        putf(p, "%s | %s |\n", required ? "" : ", optional",
             cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "description"))
                 ? cJSON_GetObjectItemCaseSensitive(f, "description")
                       ->valuestring
                 : "");
    }
    put(p, "\n");
}

static void put_method(struct page *p, const struct surf_method *m, int http)
{
    struct fo_buf schema;
    struct fo_err e;
    fo_buf_init(&schema, FO_BUF_UNLIMITED);
    putf(p, "### `%s`\n\n%s\n\n", m->name, m->summary);
    if (http)
        putf(p, "- route: `%s %s`\n", m->http_method, m->http_path);
    else
        putf(p, "- tool: `%s`\n", m->name);
    if (!http) { /* the reference's names for it (surfaces/methods/) */
        size_t na, k = 0;
        const struct surf_alias *a = surf_aliases(&na);
        for (size_t i = 0; i < na; i++)
            if (!strcmp(a[i].method, m->name))
                putf(p, "%s`%s`",
                     k++ ? ", " : "- also answers as: ", a[i].name);
        if (k)
            put(p, "\n");
    }
    putf(p, "- access: %s\n- runs on: %s\n- input cap: ", access_name(m->flags),
         where_name(m->where));
    put_cap(p, m->max_input);
    put(p, "\n");
    if (http && !strcmp(m->http_method, "GET"))
        put_get_input(p, m);
    else if (http)
        put(p, "- input: a JSON object body\n");
    if (p->rc == FO_OK)
        p->rc = fo_json_write(surf_schema(m), FO_JSON_PRETTY, &schema, &e);
    put(p, "\nInput schema:\n\n```json\n");
    put(p, schema.data ? schema.data : "");
    put(p, "\n```\n\n");
    fo_buf_release(&schema);
    put_result(p, m, http);
}

int surf_docs_markdown(const char *which, struct fo_buf *out,
                       struct fo_err *err)
{
    int http;
    if (which && !strcmp(which, "http"))
        http = 1;
    else if (which && !strcmp(which, "mcp"))
        http = 0;
    else
        return fo_err_set(err, FO_E_INVALID,
                          "docs: %s: not a page (http or mcp)",
                          which ? which : "(null)");
    struct page p = {out, FO_OK};
    size_t n;
    const struct surf_method *t = surf_methods(&n);

    for (const char *const *part = http ? http_intro : mcp_intro; *part; part++)
        put(&p, *part);
    put_codes(&p, http);
    putf(&p, "## %s\n\n", http ? "Routes" : "Tools");
    put(&p,
        http ? "| method | route | access | input cap |\n|---|---|---|---|\n"
             : "| tool | access | input cap | summary |\n|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        if (http)
            putf(&p, "| `%s` | `%s %s` | %s | ", t[i].name, t[i].http_method,
                 t[i].http_path, access_name(t[i].flags));
        else
            putf(&p, "| `%s` | %s | ", t[i].name, access_name(t[i].flags));
        put_cap(&p, t[i].max_input);
        if (http)
            put(&p, " |\n");
        else
            putf(&p, " | %s |\n", t[i].summary);
    }
    put(&p, "\n");
    for (size_t i = 0; i < n; i++)
        put_method(&p, &t[i], http);
    putf(&p, GENERATED_NOTE, http ? "http" : "mcp");
    if (p.rc != FO_OK)
        return fo_err_set(err, p.rc, "docs: cannot write the %s page",
                          http ? "HTTP" : "MCP");
    return FO_OK;
}
