/* cli_mcp: `forum mcp [--admin]`: the MCP server on stdin/stdout over the
 * ledger in the data dir, opened directly (no daemon needed). */
#include "cli/cli.h"
#include "cli/cli_mcp_bridge.h"
#include "cli/cli_opt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/orch.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "daemon/service.h"
#include "surfaces/mcp.h"
#include "surfaces/surf.h"

static const char mcp_usage[] =
    "usage: forum [--ledger DIR] mcp [--init] [--admin] [--local] [--cmd CMD]\n"
    "                                 [--roster FILE] [providers]\n"
    "\n"
    "Serves the Model Context Protocol on stdin/stdout: JSON-RPC 2.0, one\n"
    "message a line; stdout carries the protocol only, logs go to stderr.\n"
    "Every method of the handler table is a tool (forum docs mcp). The\n"
    "ledger (--ledger DIR, else $FORUM_LEDGER, else ./forum-ledger) is\n"
    "opened directly and named on stderr; it is created only with --init.\n"
    "When a daemon serves it (forum serve), every tool call goes to the\n"
    "daemon with its token: runs are its runs, with its models, tools and\n"
    "sandbox (stderr says which it is). If that daemon stops, the next\n"
    "calls go to one serving the ledger by then, else to an engine this\n"
    "process starts for the rest of the session.\n"
    "Exits 0 at the end of input.\n"
    "example (an editor's MCP server entry):\n"
    "  forum --ledger /home/me/forum-ledger mcp\n"
    "\n"
    "  --admin        also offer the admin tools (ledger_redact)\n"
    "  --local        run the calls in this process even when a daemon\n"
    "                 serves the ledger (its runs are then this process's)\n"
    "  --print-config CLIENT  print the MCP configuration of this binary\n"
    "                 and ledger for claude-desktop, vscode, cursor or\n"
    "                 claude-code (where it goes: on stderr)\n"
    "  --http         with --print-config: the running daemon's /mcp\n"
    "                 over HTTP (its URL and token) instead of stdio\n"
    "  --init         create the ledger when there is none (else that is\n"
    "                 an error, so an editor started in the wrong directory\n"
    "                 never makes a stray ledger)\n"
    "  --cmd CMD      plan_run executor: CMD split into argv (never a\n"
    "                 shell), the prompt as last argument (default: stub)\n"
    "  --roster FILE  a roster JSON file instead of the built-in one\n"
    "\n" CLI_PROVIDER_HELP "\n"
    "exit codes: 0 end of input, 2 usage, 3 the ledger cannot be opened or\n"
    "            the output cannot be written\n";

/* The HTTP form: the daemon's /mcp with its token (the daemon must run:
 * its port and token are what the client needs). */
static int print_http_config(struct cli *c, const char *client)
{
    int vscode = !strcmp(client, "vscode");
    if (!strcmp(client, "claude-desktop"))
        return cli_usage_error(c, "mcp: --print-config claude-desktop --http: "
                                  "Claude Desktop adds HTTP servers as "
                                  "connectors in its settings, not in its "
                                  "file; print the stdio form (no --http)");
    struct cli_daemon d;
    struct fo_err err;
    if (cli_daemon_find(c, &d, &err) != FO_OK)
        return cli_fail(c, &err);
    char url[512], auth[160];
    snprintf(url, sizeof(url), "http://%s:%d/mcp", d.host, d.port);
    snprintf(auth, sizeof(auth), "Bearer %s", d.has_token ? d.token : "");
    cJSON *root = cJSON_CreateObject();
    cJSON *servers =
        cJSON_AddObjectToObject(root, vscode ? "servers" : "mcpServers");
    cJSON *srv = cJSON_AddObjectToObject(servers, "forum");
    if (strcmp(client, "cursor") != 0)
        cJSON_AddStringToObject(srv, "type", "http");
    cJSON_AddStringToObject(srv, "url", url);
    if (d.has_token)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(srv, "headers"),
                                "Authorization", auth);
    cli_print_json(root, 1);
    cJSON_Delete(root);
    fprintf(stderr,
            "forum: this entry holds the daemon's token: keep the file "
            "private%s\n",
            !strcmp(client, "claude-code")
                ? " (or run: claude mcp add --transport http forum URL "
                  "--header \"Authorization: Bearer TOKEN\")"
                : "");
    return 0;
}

static int print_config(struct cli *c, const char *client, unsigned flags,
                        int http)
{
    char bin[4096], led[4096];
    ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);
    if (n <= 0)
        snprintf(bin, sizeof(bin), "forum");
    else
        bin[n] = '\0';
    if (!realpath(c->ledger_dir, led))
        snprintf(led, sizeof(led), "%s", c->ledger_dir);
    int vscode = !strcmp(client, "vscode");
    int claude_code = !strcmp(client, "claude-code");
    if (!vscode && !claude_code && strcmp(client, "claude-desktop") != 0 &&
        strcmp(client, "cursor") != 0)
        return cli_usage_error(c,
                               "mcp: --print-config %s: claude-desktop, "
                               "vscode, cursor or claude-code",
                               client);
    if (http)
        return print_http_config(c, client);
    cJSON *root = cJSON_CreateObject();
    cJSON *servers =
        cJSON_AddObjectToObject(root, vscode ? "servers" : "mcpServers");
    cJSON *srv = cJSON_AddObjectToObject(servers, "forum");
    if (vscode || claude_code)
        cJSON_AddStringToObject(srv, "type", "stdio");
    cJSON_AddStringToObject(srv, "command", bin);
    cJSON *args = cJSON_AddArrayToObject(srv, "args");
    cJSON_AddItemToArray(args, cJSON_CreateString("--ledger"));
    cJSON_AddItemToArray(args, cJSON_CreateString(led));
    cJSON_AddItemToArray(args, cJSON_CreateString("mcp"));
    if (flags & SURF_MCP_ADMIN)
        cJSON_AddItemToArray(args, cJSON_CreateString("--admin"));
    cli_print_json(root, 1);
    cJSON_Delete(root);
    fprintf(stderr, "%s",
            vscode ? "forum: put this in .vscode/mcp.json (a workspace) or "
                     "run \"MCP: Open User Configuration\"\n"
            : claude_code
                ? "forum: put this in .mcp.json at the project's root, or "
                  "run: claude mcp add forum -- <command> <args...>\n"
            : !strcmp(client, "cursor")
                ? "forum: put this in ~/.cursor/mcp.json (or "
                  ".cursor/mcp.json in a project)\n"
                : "forum: put this in claude_desktop_config.json "
                  "(~/Library/Application Support/Claude/ on macOS, "
                  "%APPDATA%\\Claude\\ on Windows, ~/.config/Claude/ on "
                  "Linux)\n");
    return 0;
}

/* An engine hosted in this process for the session: the same engine a
 * daemon runs, its /mcp on a loopback port of its own with a token of its
 * own, standard input bridged to it as to a daemon. */
struct hosted {
    struct cli *c;
    struct orch_config oc; /* from the flags */
    struct cli_providers *prov;
    struct daemon_config dc;
    int dc_loaded;
    struct orch *orch;
    struct daemon_embed *host;
    int exit; /* the provider flags' exit code when they were refused */
};

/* Its configuration: the model providers from the flags, else
 * DIR/forum.json's "models"; the orchestrator. FO_OK, else err (the
 * provider flags' own message is on stderr already). */
static int host_prepare(struct hosted *h, struct fo_err *err)
{
    daemon_config_init(&h->dc);
    h->dc.dir = h->c->ledger_dir;
    h->dc_loaded = 1;
    int rc = daemon_config_load(&h->dc, err);
    if (rc)
        return rc;
    if ((h->exit = cli_provider_apply(h->c, "mcp", h->prov, &h->dc)) != 0)
        return fo_err_set(err, FO_E_INVALID, "the provider flags given");
    h->oc.models = h->dc.has_models ? &h->dc.models : NULL;
    h->oc.max_runs = h->dc.max_runs; /* forum.json's max_runs (run_start) */
    h->oc.data_dir = h->c->ledger_dir;
    h->oc.cmd_sandbox = h->dc.cmd_sandbox;
    h->oc.disk_reserve_mb = h->dc.disk_reserve_mb;
    return orch_create(&h->oc, &h->orch, err);
}

static int host_start(struct hosted *h, struct fo_err *err)
{
    h->dc.dir = h->c->ledger_dir;
    h->dc.orch = h->orch;
    if (h->dc.body_max < SURF_MCP_LINE_MAX + 4096) /* a line is a body */
        h->dc.body_max = SURF_MCP_LINE_MAX + 4096;
    return daemon_embed_start(&h->dc, 1, &h->host, err);
}

/* The runs the session began (run_start) end before the session does;
 * then the engine stops. rc: the session's outcome so far. */
static int host_end(struct hosted *h, int rc, struct fo_err *err)
{
    if (h->host) {
        daemon_embed_wait_runs(h->host);
        struct fo_err serr;
        if (daemon_embed_stop(h->host, &serr) != FO_OK && rc == FO_OK) {
            *err = serr;
            rc = serr.code;
        }
        h->host = NULL;
    }
    orch_free(h->orch);
    h->orch = NULL;
    if (h->dc_loaded)
        daemon_config_release(&h->dc);
    h->dc_loaded = 0;
    return rc;
}

/* The bridge's fallback beside a daemon that stopped answering: a daemon
 * serving the ledger now (restarted on another port), else an engine
 * hosted here from then on. */
static int fallback_move(void *arg, char *host, size_t host_size, int *port,
                         char *token, size_t token_size, struct fo_err *err)
{
    struct hosted *h = arg;
    if (h->host)
        return fo_err_set(err, FO_E_IO,
                          "the engine of this process stopped answering");
    struct cli_daemon dmn;
    struct fo_err derr;
    if (cli_daemon_find(h->c, &dmn, &derr) == FO_OK) {
        fprintf(stderr,
                "forum mcp: the daemon at http://%s:%d serves this ledger "
                "now: tool calls go there\n",
                dmn.host, dmn.port);
        snprintf(host, host_size, "%s", dmn.host);
        *port = dmn.port;
        snprintf(token, token_size, "%s", dmn.has_token ? dmn.token : "");
        return FO_OK;
    }
    int rc = host_prepare(h, err);
    if (!rc)
        rc = host_start(h, err);
    if (rc) {
        fo_err_prefix(err, "the daemon stopped answering, and no engine "
                           "could start here");
        return rc;
    }
    fprintf(stderr,
            "forum mcp: the daemon stopped answering: tool calls run in this "
            "process from now on (an engine of its own, until the editor "
            "closes this session)\n");
    snprintf(host, host_size, "127.0.0.1");
    *port = daemon_embed_port(h->host);
    snprintf(token, token_size, "%s", daemon_embed_token(h->host));
    return FO_OK;
}

int cli_mcp(struct cli *c, int argc, char **argv)
{
    int admin = 0, init = 0, local = 0, http = 0;
    const char *client = NULL;
    struct orch_config oc = {0};
    struct cli_providers prov = {0};
    struct cli_opt_call pcall = {cli_provider_call, &prov};
    const struct cli_opt opts[] = {
        {"--local", NULL, CLI_OPT_BOOL, &local, 0, 0, NULL, NULL,
         "run the calls in this process even beside a daemon"},
        {"--admin", NULL, CLI_OPT_BOOL, &admin, 0, 0, NULL, NULL,
         "also offer the admin tools (ledger_redact)"},
        {"--print-config", "CLIENT", CLI_OPT_STR, &client, 0, 0, NULL, NULL,
         "print the MCP configuration for claude-desktop, vscode, cursor or "
         "claude-code"},
        {"--http", NULL, CLI_OPT_BOOL, &http, 0, 0, NULL, NULL,
         "with --print-config: the daemon's /mcp over HTTP (it must run)"},
        {"--init", NULL, CLI_OPT_BOOL, &init, 0, 0, NULL, NULL,
         "create the ledger when there is none"},
        {"--cmd", "CMD", CLI_OPT_STR, &oc.cmd, 0, 0, NULL, NULL,
         "plan_run executor: CMD PROMPT, never a shell (default: stub)"},
        {"--roster", "FILE", CLI_OPT_STR, &oc.roster_path, 0, 0, NULL, NULL,
         "a roster JSON file instead of the built-in one"},
        CLI_PROVIDER_OPTS(&pcall),
        CLI_OPT_END,
    };
    int pex = cli_parse(c, "mcp", argc, argv, opts, NULL, 0, NULL);
    if (pex == CLI_PARSE_HELP)
        return cli_help(mcp_usage);
    if (pex)
        return pex;
    unsigned flags = admin ? SURF_MCP_ADMIN : 0;
    if (client)
        return print_config(c, client, flags, http);
    struct fo_err err;
    fo_err_clear(&err);
    /* A client that goes away is a write error to report, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    /* a daemon serving this ledger runs the calls (its /mcp): the editor's
     * runs are the daemon's, with its models; else they run here */
    struct hosted h = {.c = c, .oc = oc, .prov = &prov};
    struct cli_daemon dmn;
    struct fo_err derr;
    if (!local && cli_daemon_find(c, &dmn, &derr) == FO_OK) {
        fprintf(stderr,
                "forum mcp: the daemon at http://%s:%d serves this ledger: "
                "tool calls run there (its models, tools and runs)%s\n",
                dmn.host, dmn.port,
                prov.given ? "; the provider flags given here are "
                             "not used"
                           : "");
        struct cli_mcp_fallback fb = {fallback_move, &h};
        int brc =
            cli_mcp_bridge(dmn.host, dmn.port, dmn.has_token ? dmn.token : NULL,
                           0, 1, flags, &fb, &err);
        brc = host_end(&h, brc, &err);
        if (brc) {
            fprintf(stderr, "forum mcp: %s\n",
                    err.msg[0] ? err.msg : fo_code_message(brc));
            return 3;
        }
        return 0;
    }
    if (host_prepare(&h, &err) != FO_OK) {
        struct fo_err ignore;
        host_end(&h, FO_OK, &ignore);
        return h.exit ? h.exit : cli_fail(c, &err); /* said already */
    }
    /* An editor starts `forum mcp` in whatever directory it likes: a
     * ledger is made only when asked (--init), and the one opened is
     * named on stderr. */
    struct ledger *l = NULL;
    fo_err_clear(&err);
    int orc2 = ledger_open(c->ledger_dir, init ? LEDGER_OPEN_CREATE : 0, NULL,
                           &l, &err);
    if (orc2 == FO_E_NOT_FOUND && !init) {
        fprintf(stderr,
                "forum mcp: no ledger at %s: give --ledger DIR (or set "
                "FORUM_LEDGER) to an existing one, or add --init to create "
                "it there\n",
                c->ledger_dir);
        host_end(&h, FO_OK, &err);
        return 3;
    }
    if (orc2) {
        struct fo_err ignore;
        host_end(&h, FO_OK, &ignore);
        if (err.code == FO_E_NOT_FOUND)
            err.code = FO_E_IO;
        cli_fail(c, &err);
        return 3; /* any failure to open is a storage error */
    }
    int64_t count = 0;
    struct fo_err cerr;
    char abs[4096];
    if (ledger_count(l, &count, &cerr) != FO_OK)
        count = -1;
    fprintf(stderr, "forum mcp: ledger %s (%lld entries)\n",
            realpath(c->ledger_dir, abs) ? abs : c->ledger_dir,
            (long long)count);
    ledger_close(l);
    int rc = host_start(&h, &err);
    if (rc == FO_OK) {
        fprintf(stderr,
                "forum mcp: %s: tool calls run in this process (an engine "
                "of its own, until the editor closes this session)\n",
                local ? "--local" : "no daemon serves this ledger");
        rc =
            cli_mcp_bridge("127.0.0.1", daemon_embed_port(h.host),
                           daemon_embed_token(h.host), 0, 1, flags, NULL, &err);
    }
    rc = host_end(&h, rc, &err);
    if (rc) {
        fprintf(stderr, "forum mcp: %s\n",
                err.msg[0] ? err.msg : fo_code_message(rc));
        return 3;
    }
    return 0;
}
