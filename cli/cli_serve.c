/* cli_serve: `forum serve` (foreground), `serve start` (detached, returns
 * once the port answers), `serve stop`, `serve status`, `serve logs`, and
 * `serve --check`. The daemon itself is daemon/service.c. */
#include "cli/cli.h"
#include "cli/cli_opt.h"
#include "daemon/orch_sandbox.h"

#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/orch.h"
#include "daemon/service.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "surfaces/http.h"

static const char help_serve[] =
    "usage: forum serve [start|stop|status|logs] [options]\n"
    "\n"
    "  forum serve            run the daemon in the foreground (systemd,\n"
    "                         containers); SIGTERM/SIGINT drain and exit 0\n"
    "  forum serve start      start it in the background; returns once the\n"
    "                         port answers (log: DIR/forum.log)\n"
    "  forum serve stop       SIGTERM, wait, then SIGKILL after --timeout\n"
    "  forum serve status     pid, address, uptime, entries, health\n"
    "                         (exit 1 when not running)\n"
    "  forum serve logs [-n N]  the last N lines of the log (default 50)\n"
    "  forum serve --check    validate the configuration and exit\n"
    "  (forum serve start|stop|status|logs --help for each)\n"
    "\n"
    "options (also read from DIR/forum.json; flags win):\n"
    "  --host H               listen address (default 127.0.0.1)\n"
    "  --port P               port (default 8080; 0 = ephemeral, printed\n"
    "                         and written to DIR/forum.state.json)\n"
    "  --no-auth              no bearer token needed (admin methods still\n"
    "                         need DIR/token)\n"
    "  --metrics-public       GET /metrics without the token\n"
    "  --tlog-public          GET /tlog/ (the log as C2SP tiles) without\n"
    "                         the token (the default)\n"
    "  --no-tlog-public       /tlog/ needs the token\n"
    "  --tlog-hashes-only     /tlog/ withholds the entry bundles\n"
    "  --timeout-s S          HTTP idle read/write timeout, and the time a\n"
    "                         request has to arrive whole from its first\n"
    "                         byte (default 30)\n"
    "  --max-connections N    HTTP connections open at once, 1-1048576;\n"
    "                         more wait until one closes (default: the\n"
    "                         open-file limit less 128, 16-16384)\n"
    "  --workers N            threads for slow methods (default 2)\n"
    "  --checkpoint-ms MS     checkpoint signing cadence (default 1000;\n"
    "                         0 = never)\n"
    "  --log-file F           log to F instead of stderr\n"
    "  --access-log F         a line a request to F (docs/OPERATIONS.md)\n"
    "  --cmd CMD              a model command line: answers every role and\n"
    "                         task, the prompt its last argument (no shell)\n"
    "  --roster FILE          a roster JSON file instead of the built-in one\n"
    "  --sandbox bwrap|none   where agents' commands run (default bwrap)\n"
    "  --workspace DIR        where agents' tools act (absolute; default a\n"
    "                         fresh DIR/workspaces/run-<id> per run)\n"
    "  --max-runs N           runs in memory at once (submit, POST /runs,\n"
    "                         resumed), 1-1000000 (default 10000; one more\n"
    "                         is 503 busy)\n"
    "  --lease-s S            PostgreSQL: run and integration lease,\n"
    "                         1-3600 (default 10)\n" CLI_GATE_HELP;

/* The rest of help_serve (one string would pass the 4,095 bytes C
 * promises). */
static const char help_serve_more[] =
    "\n" CLI_PROVIDER_HELP "\n"
    "exit codes: 0 ok (the foreground daemon: drained after SIGTERM or\n"
    "SIGINT); 2 usage or a bad configuration (--check says which); 3 the\n"
    "ledger cannot be opened, another daemon serves it, or the port is in\n"
    "use (no data dir is left behind)\n"
    "examples:\n"
    "  forum serve --port 8080 --log-file /var/log/forum.log\n"
    "  forum serve --check --tier cheap --chat-url http://127.0.0.1:11434 "
    "--model qwen3:8b\n"
    "  forum serve start --port 0   (forum serve start --help)\n";

static const char help_start[] =
    "usage: forum serve start [options]\n"
    "Starts the daemon in the background and returns once its port\n"
    "answers: prints the pid, the address and the log (DIR/forum.log;\n"
    "--json: {pid, port, address, log}). Takes every option of `forum\n"
    "serve` (forum serve --help), DIR/forum.json under them; --check\n"
    "validates them and starts nothing. The address and pid are kept in\n"
    "DIR/forum.state.json for `serve status`, `serve stop` and clients.\n"
    "exit codes: 0 started; 2 usage or a bad configuration; 3 another\n"
    "daemon serves DIR, the port is in use, or the daemon did not come up\n"
    "(the log's last lines say why)\n"
    "examples:\n"
    "  forum serve start --port 0\n"
    "  forum --ledger /var/lib/forum serve start --host 0.0.0.0 --port 8080\n";

static const char help_stop[] =
    "usage: forum serve stop [--timeout S]\n"
    "Stops the daemon serving DIR: SIGTERM, so it drains (every request\n"
    "in flight answered, runs left resumable, a last checkpoint signed),\n"
    "then SIGKILL if it still runs after S seconds (default 10). --json:\n"
    "{pid, killed}.\n"
    "exit codes: 0 stopped; 1 no daemon is running on DIR; 2 usage; 3 it\n"
    "did not stop even after SIGKILL\n"
    "example:\n"
    "  forum serve stop --timeout 30\n";

static const char help_status[] =
    "usage: forum serve status\n"
    "Whether a daemon serves DIR: its pid, address, uptime, entries, runs\n"
    "in flight, model providers (never keys) and health (GET /health: it\n"
    "still writes to its ledger). --json: {running, pid, address, port,\n"
    "uptime_s, entries, runs_in_flight, providers, health, error}.\n"
    "exit codes: 0 running and healthy; 1 not running, or unhealthy (the\n"
    "reason is printed); 2 usage\n"
    "example:\n"
    "  forum --json serve status\n";

static const char help_logs[] =
    "usage: forum serve logs [-n N]\n"
    "The last N lines (default 50) of DIR/forum.log, the log of a daemon\n"
    "started with `serve start`: the ledger, the address and the model\n"
    "providers at start, then runs, gates, checkpoints and errors (a\n"
    "daemon in the foreground logs to stderr or --log-file).\n"
    "exit codes: 0 printed; 1 no log in DIR; 2 usage\n"
    "example:\n"
    "  forum serve logs -n 200\n";

struct serve_opts {
    struct daemon_config cfg;
    int sandbox_given;
    int tlog_public, no_tlog_public;
    struct cli_providers prov;
    int check;
    int lines;
    int stop_timeout_s;
    /* serve start: the daemon's flags as given, passed on to the detached
     * daemon: room for the other options and 32 provider groups of 4 flags
     * with their values */
    char *pass[320];
    int npass;
};

/* A table INT row's value (-1: not given) into *dst. */
static void set_int(int *dst, long long v)
{
    if (v >= 0)
        *dst = (int)v;
}

/* Parses the flags of `serve [SUB]`: argv[0] is "serve" or the subcommand.
 * The daemon's flags are serve's own and start's (which passes them on to
 * the daemon it starts, --check aside); stop takes --timeout, logs -n,
 * status nothing. */
static int parse_opts(struct cli *c, const char *sub, int argc, char **argv,
                      struct serve_opts *o)
{
    long long port = -1, timeout_s = -1, workers = -1, ckpt = -1, maxconn = -1,
              maxruns = -1, lease = -1, ready = -1, stop_s = -1, lines = -1;
    const char *sandbox = NULL;
    struct cli_opt_call prov = {cli_provider_call, &o->prov},
                        gate = {cli_gate_call, &o->cfg.gates_owned};
    /* serve's table; start's is the same from its second row (the hidden
     * --ready-fd is what start gives the daemon it starts, never a user's) */
    const struct cli_opt daemon_opts[] = {
        {"--ready-fd", "FD", CLI_OPT_INT, &ready, 3, 1 << 20, NULL, "bad fd",
         NULL},
        {"--check", NULL, CLI_OPT_BOOL, &o->check, 0, 0, NULL, NULL,
         "validate the configuration and exit"},
        {"--host", "H", CLI_OPT_STR, &o->cfg.host, 0, 0, NULL, NULL,
         "listen address (default 127.0.0.1)"},
        {"--port", "P", CLI_OPT_INT, &port, 0, 65535, NULL,
         "not a port (0-65535)", "port (default 8080; 0 = ephemeral)"},
        {"--no-auth", NULL, CLI_OPT_BOOL, &o->cfg.no_auth, 0, 0, NULL, NULL,
         "no bearer token needed (admin methods still need DIR/token)"},
        {"--metrics-public", NULL, CLI_OPT_BOOL, &o->cfg.metrics_public, 0, 0,
         NULL, NULL, "GET /metrics without the token"},
        {"--tlog-public", NULL, CLI_OPT_BOOL, &o->tlog_public, 0, 0, NULL, NULL,
         "GET /tlog/ without the token (the default)"},
        {"--no-tlog-public", NULL, CLI_OPT_BOOL, &o->no_tlog_public, 0, 0, NULL,
         NULL, "/tlog/ needs the token"},
        {"--tlog-hashes-only", NULL, CLI_OPT_BOOL, &o->cfg.tlog_hashes_only, 0,
         0, NULL, NULL, "/tlog/ withholds the entry bundles"},
        {"--allowed-host", "NAME", CLI_OPT_LIST, o->cfg.allowed_hosts, 0,
         DAEMON_ALLOWED_HOSTS_MAX, &o->cfg.n_allowed_hosts, NULL,
         "a name clients may reach the daemon by (a proxy's; repeat)"},
        {"--timeout-s", "S", CLI_OPT_INT, &timeout_s, 1, 3600, NULL, NULL,
         "HTTP idle read/write timeout (default 30)"},
        {"--max-connections", "N", CLI_OPT_INT, &maxconn, 1,
         SURF_HTTP_CONNECTIONS_MAX, NULL, NULL,
         "HTTP connections open at once"},
        {"--workers", "N", CLI_OPT_INT, &workers, 1, 64, NULL, NULL,
         "threads for slow methods (default 2)"},
        {"--checkpoint-ms", "MS", CLI_OPT_INT, &ckpt, 0, 86400000, NULL, NULL,
         "checkpoint signing cadence (default 1000; 0 = never)"},
        {"--log-file", "F", CLI_OPT_STR, &o->cfg.log_file, 0, 0, NULL, NULL,
         "log to F instead of stderr"},
        {"--access-log", "F", CLI_OPT_STR, &o->cfg.access_log, 0, 0, NULL, NULL,
         "a line a request to F"},
        {"--cmd", "CMD", CLI_OPT_STR, &o->cfg.cmd, 0, 0, NULL, NULL,
         "a model command line answering every role and task"},
        {"--roster", "FILE", CLI_OPT_STR, &o->cfg.roster, 0, 0, NULL, NULL,
         "a roster JSON file instead of the built-in one"},
        {"--sandbox", "bwrap|none", CLI_OPT_STR, &sandbox, 0, 0, NULL, NULL,
         "where agents' commands run (default bwrap)"},
        {"--workspace", "DIR", CLI_OPT_STR, &o->cfg.workspace, 0, 0, NULL, NULL,
         "where agents' tools act (absolute)"},
        {"--max-runs", "N", CLI_OPT_INT, &maxruns, 1, ORCH_RUNS_MAX, NULL, NULL,
         "runs in memory at once (default 10000)"},
        {"--lease-s", "S", CLI_OPT_INT, &lease, 1, 3600, NULL, NULL,
         "PostgreSQL: run and integration lease (default 10)"},
        CLI_PROVIDER_OPTS(&prov),
        CLI_GATE_OPTS(&gate),
        CLI_OPT_END,
    };
    const struct cli_opt *start_opts = daemon_opts + 1;
    const struct cli_opt stop_opts[] = {
        {"--timeout", "S", CLI_OPT_INT, &stop_s, 1, 3600, NULL, NULL,
         "seconds before SIGKILL (default 10)"},
        CLI_OPT_END,
    };
    const struct cli_opt status_opts[] = {CLI_OPT_END};
    const struct cli_opt logs_opts[] = {
        {"-n", "N", CLI_OPT_INT, &lines, 1, 1000000, NULL, NULL,
         "the last N lines (default 50)"},
        CLI_OPT_END,
    };
    const struct cli_opt *opts = !sub                     ? daemon_opts
                                 : !strcmp(sub, "start")  ? start_opts
                                 : !strcmp(sub, "stop")   ? stop_opts
                                 : !strcmp(sub, "status") ? status_opts
                                                          : logs_opts;
    char cmd[32];
    snprintf(cmd, sizeof(cmd), "serve%s%s", sub ? " " : "", sub ? sub : "");
    int ex = cli_parse(c, cmd, argc, argv, opts, NULL, 0, NULL);
    if (ex)
        return ex;
    if (o->tlog_public && o->no_tlog_public)
        return cli_usage_error(c,
                               "%s: --tlog-public and --no-tlog-public: "
                               "one or the other",
                               cmd);
    if (o->cfg.host && !*o->cfg.host)
        return cli_usage_error(c, "%s: --host: empty", cmd);
    for (int i = 0; i < o->cfg.n_allowed_hosts; i++)
        if (!*o->cfg.allowed_hosts[i] ||
            strpbrk(o->cfg.allowed_hosts[i], ":/ \t[]@"))
            return cli_usage_error(c,
                                   "%s: --allowed-host %s: a host name (no "
                                   "port, no scheme)",
                                   cmd, o->cfg.allowed_hosts[i]);
    if (sandbox) {
        o->cfg.sandbox = orch_sandbox_mode_parse(sandbox);
        if (o->cfg.sandbox < 0)
            return cli_usage_error(c, "%s: --sandbox %s: bwrap or none", cmd,
                                   sandbox);
        o->sandbox_given = 1;
    }
    if (o->cfg.workspace && o->cfg.workspace[0] != '/')
        return cli_usage_error(c, "%s: --workspace %s: an absolute path", cmd,
                               o->cfg.workspace);
    if (o->cfg.gates_owned)
        o->cfg.gates = o->cfg.gates_owned;
    set_int(&o->cfg.port, port);
    set_int(&o->cfg.timeout_s, timeout_s);
    set_int(&o->cfg.workers, workers);
    if (ckpt >= 0)
        o->cfg.sign_interval_ms = ckpt == 0 ? -1 : (int)ckpt;
    set_int(&o->cfg.max_connections, maxconn);
    set_int(&o->cfg.max_runs, maxruns);
    set_int(&o->cfg.lease_s, lease);
    set_int(&o->cfg.ready_fd, ready);
    set_int(&o->stop_timeout_s, stop_s);
    set_int(&o->lines, lines);
    if (opts != start_opts)
        return 0;
    /* What start passes on: its flags as given (each, as the table says,
     * with its value when it takes one), but --check, which is start's. */
    for (int i = 1; i < argc; i++) {
        const struct cli_opt *r = cli_opt_find(opts, argv[i]);
        int takes = r && r->arg; /* a switch's row has no ARG */
        if (r && !strcmp(r->name, "--check"))
            continue;
        if (o->npass + 2 >= (int)(sizeof(o->pass) / sizeof(o->pass[0])))
            return cli_usage_error(c, "%s: too many options", cmd);
        o->pass[o->npass++] = argv[i];
        if (takes && i + 1 < argc)
            o->pass[o->npass++] = argv[++i];
    }
    return 0;
}

/* Applies forum.json under the flags: load the file into a fresh config,
 * then lay the flags given over it. */
static int load_config(struct cli *c, struct serve_opts *o)
{
    struct daemon_config flags = o->cfg;
    struct daemon_config file;
    daemon_config_init(&file);
    file.dir = c->ledger_dir;
    struct fo_err err;
    fo_err_clear(&err);
    if (daemon_config_load(&file, &err) != FO_OK)
        return cli_fail(c, &err);
    struct daemon_config def;
    daemon_config_init(&def);
    if (flags.host)
        file.host = flags.host;
    if (flags.port != def.port)
        file.port = flags.port;
    if (flags.no_auth)
        file.no_auth = 1;
    if (flags.metrics_public)
        file.metrics_public = 1;
    if (o->tlog_public || o->no_tlog_public)
        file.tlog_private = o->no_tlog_public;
    if (flags.tlog_hashes_only)
        file.tlog_hashes_only = 1;
    for (int i = 0; i < flags.n_allowed_hosts; i++) {
        if (file.n_allowed_hosts >= DAEMON_ALLOWED_HOSTS_MAX) {
            daemon_config_release(&file);
            return cli_usage_error(c,
                                   "serve: --allowed-host: at most %d "
                                   "names with forum.json's",
                                   DAEMON_ALLOWED_HOSTS_MAX);
        }
        file.allowed_hosts[file.n_allowed_hosts++] = flags.allowed_hosts[i];
    }
    if (flags.timeout_s)
        file.timeout_s = flags.timeout_s;
    if (flags.workers)
        file.workers = flags.workers;
    if (flags.sign_interval_ms)
        file.sign_interval_ms = flags.sign_interval_ms;
    if (flags.max_runs)
        file.max_runs = flags.max_runs;
    if (flags.lease_s)
        file.lease_s = flags.lease_s;
    if (flags.max_connections)
        file.max_connections = flags.max_connections;
    if (flags.gates) { /* the flags' policy replaces the file's */
        file.gates = flags.gates;
        file.gates_owned = flags.gates_owned;
    }
    file.log_file = flags.log_file;
    if (flags.access_log)
        file.access_log = flags.access_log;
    file.cmd = flags.cmd;
    file.roster = flags.roster;
    if (flags.workspace)
        file.workspace = flags.workspace;
    if (o->sandbox_given)
        file.sandbox = flags.sandbox;
    file.ready_fd = flags.ready_fd;
    o->cfg = file;
    /* flags win over forum.json's models */
    return cli_provider_apply(c, "serve", &o->prov, &o->cfg);
}

static const char *state_path(struct cli *c, const char *name, char *buf,
                              size_t n)
{
    snprintf(buf, n, "%s/%s", c->ledger_dir, name);
    return buf;
}

cJSON *cli_read_state(struct cli *c)
{
    char p[4096];
    FILE *f = fopen(state_path(c, DAEMON_STATE_FILE, p, sizeof(p)), "rb");
    if (!f)
        return NULL;
    char buf[8192]; /* the file is ~300 bytes */
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    cJSON *o = NULL;
    struct fo_err err;
    if (n == sizeof(buf) || fo_json_parse(buf, n, &o, &err) != FO_OK)
        return NULL;
    return o;
}

static int check(struct cli *c, struct serve_opts *o)
{
    struct fo_err err;
    fo_err_clear(&err);
    struct stat st;
    if (stat(c->ledger_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fo_err_set(&err, FO_E_INVALID, "%s: not a directory", c->ledger_dir);
        return cli_fail(c, &err);
    }
    struct ledger *l = NULL;
    if (stat(c->ledger_dir, &st) == 0) {
        int rc =
            ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &l, &err);
        if (rc && rc != FO_E_NOT_FOUND)
            return cli_fail(c, &err);
        ledger_close(l);
        char tok[128];
        rc = daemon_token(c->ledger_dir, 0, tok, sizeof(tok), &err);
        if (rc && rc != FO_E_NOT_FOUND)
            return cli_fail(c, &err);
    }
    struct orch_config oc = {.roster_path = o->cfg.roster,
                             .cmd = o->cfg.cmd,
                             .models =
                                 o->cfg.has_models ? &o->cfg.models : NULL,
                             .max_runs = o->cfg.max_runs,
                             .gates = o->cfg.gates,
                             .workspace = o->cfg.workspace,
                             .data_dir = c->ledger_dir,
                             .cmd_sandbox = o->cfg.cmd_sandbox};
    struct orch *orch = NULL;
    if (orch_create(&oc, &orch, &err) != FO_OK)
        return cli_fail(c, &err);
    orch_free(orch);
    int port = o->cfg.port < 0 ? 8080 : o->cfg.port;
    const char *host = o->cfg.host ? o->cfg.host : "127.0.0.1";
    /* the sandbox, tried as the daemon will make it (under a service
     * manager's restrictions too: ExecStartPre runs this) */
    char why[512] = "";
    const char *sb = o->cfg.sandbox == ORCH_SANDBOX_NONE        ? "none"
                     : orch_sandbox_available(why, sizeof(why)) ? "bwrap"
                                                                : "unavailable";
    if (c->json) {
        cJSON *r = cJSON_CreateObject();
        if (r) {
            cJSON_AddTrueToObject(r, "ok");
            cJSON_AddStringToObject(r, "host", host);
            fo_json_add_int(r, "port", port);
            cJSON_AddBoolToObject(r, "auth", !o->cfg.no_auth);
            cJSON_AddStringToObject(r, "sandbox", sb);
            if (*why)
                cJSON_AddStringToObject(r, "sandbox_why", why);
            cli_print_json(r, 0);
        }
        cJSON_Delete(r);
    } else {
        printf("configuration ok: %s on %s:%d, auth %s\n", c->ledger_dir, host,
               port, o->cfg.no_auth ? "off" : "on");
        if (*why)
            printf("sandbox: unavailable: %s; run_command calls will be "
                   "refused\n",
                   why);
        else
            printf("sandbox: %s\n", !strcmp(sb, "none")
                                        ? "none (configured): commands run "
                                          "unconfined"
                                        : "bubblewrap");
    }
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int type,
                  struct FTW *ftw)
{
    (void)st, (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

/* A start that failed leaves nothing behind: the data dir it made goes,
 * with what the failed daemon wrote into it. */
static void unmake_dir(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int foreground(struct cli *c, struct serve_opts *o)
{
    struct fo_err err;
    fo_err_clear(&err);
    o->cfg.dir = c->ledger_dir;
    struct stat st;
    int made = stat(c->ledger_dir, &st) != 0 && errno == ENOENT;
    int rc = daemon_run(&o->cfg, &err);
    daemon_config_release(&o->cfg);
    if (rc && made) { /* made for a start that failed, and still empty */
        struct ledger *l = NULL;
        struct fo_err e2;
        int64_t n = -1;
        if (ledger_open(c->ledger_dir, LEDGER_OPEN_READONLY, NULL, &l, &e2) ==
            FO_OK) {
            if (ledger_count(l, &n, &e2) != FO_OK)
                n = -1;
            ledger_close(l);
        }
        if (n == 0)
            unmake_dir(c->ledger_dir);
    }
    if (rc)
        return cli_fail(c, &err);
    return 0;
}

/* Before a start: no daemon serves the dir already; the dir exists (*made
 * when this made it). 0, or the exit code of the failure (printed). */
static int start_check(struct cli *c, int *made)
{
    long pid = 0;
    struct fo_err err;
    if (daemon_running(c->ledger_dir, &pid) == 1) {
        fo_err_set(&err, FO_E_LOCKED,
                   "another forum daemon (pid %ld) is serving %s", pid,
                   c->ledger_dir);
        return cli_fail(c, &err);
    }
    *made = mkdir(c->ledger_dir, 0700) == 0;
    if (!*made && errno != EEXIST) {
        fo_err_set(&err, FO_E_IO, "%s: %s", c->ledger_dir, strerror(errno));
        return cli_fail(c, &err);
    }
    return 0;
}

static int start(struct cli *c, struct serve_opts *o, const char *self)
{
    int made = 0;
    int sex = start_check(c, &made);
    if (sex)
        return sex;
    char logp[4096];
    state_path(c, DAEMON_LOG_FILE, logp, sizeof(logp));
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        perror("forum: pipe");
        return 3;
    }
    char fdbuf[16];
    snprintf(fdbuf, sizeof(fdbuf), "%d", pfd[1]);
    char *av[sizeof(o->pass) / sizeof(o->pass[0]) + 16];
    int n = 0;
    char a_forum[] = "forum", a_ledger[] = "--ledger", a_serve[] = "serve";
    char a_log[] = "--log-file", a_ready[] = "--ready-fd";
    char *dir = strdup(c->ledger_dir);
    if (!dir) {
        close(pfd[0]);
        close(pfd[1]);
        return 3;
    }
    av[n++] = a_forum;
    av[n++] = a_ledger;
    av[n++] = dir;
    av[n++] = a_serve;
    for (int i = 0; i < o->npass; i++)
        av[n++] = o->pass[i];
    if (!o->cfg.log_file) {
        av[n++] = a_log;
        av[n++] = logp;
    }
    av[n++] = a_ready;
    av[n++] = fdbuf;
    av[n] = NULL;
    pid_t child = fork();
    if (child < 0) {
        perror("forum: fork");
        return 3;
    }
    if (child == 0) {
        setsid();
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
            if (nul > 2)
                close(nul);
        }
        close(pfd[0]);
        int fl = fcntl(pfd[1], F_GETFD);
        fcntl(pfd[1], F_SETFD, fl & ~FD_CLOEXEC);
        /* a grandchild, so the daemon is nobody's child but init's */
        pid_t g = fork();
        if (g != 0)
            _exit(g < 0 ? 1 : 0);
        execv(self, av);
        _exit(127);
    }
    free(dir);
    close(pfd[1]);
    int st = 0;
    waitpid(child, &st, 0);
    char msg[600] = {0};
    size_t got = 0;
    int64_t deadline = ledger_now_us() + 30 * 1000000LL;
    while (got < sizeof(msg) - 1 && !strchr(msg, '\n')) {
        int64_t left = (deadline - ledger_now_us()) / 1000;
        if (left <= 0)
            break;
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0)
            break;
        ssize_t r = read(pfd[0], msg + got, sizeof(msg) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(pfd[0]);
    long port = -1;
    if (strncmp(msg, "ok ", 3) == 0)
        port = strtol(msg + 3, NULL, 10);
    if (port <= 0) {
        char *nl = strchr(msg, '\n');
        if (nl)
            *nl = '\0';
        struct fo_err err;
        const char *why = !strncmp(msg, "error ", 6) ? msg + 6
                          : got                      ? msg
                                                     : "it exited without a "
                                                       "word";
        if (made) { /* nothing of this start stays behind */
            struct timespec ts = {0, 200 * 1000000L}; /* let it exit */
            nanosleep(&ts, NULL);
            unmake_dir(c->ledger_dir);
            fo_err_set(&err, FO_E_IO,
                       "the daemon did not start: %s (%s, made for it, was "
                       "removed)",
                       why, c->ledger_dir);
        } else {
            fo_err_set(&err, FO_E_IO, "the daemon did not start: %s (log: %s)",
                       why, logp);
        }
        return cli_fail(c, &err);
    }
    /* It says it listens: check that the port answers. */
    const char *host = o->cfg.host ? o->cfg.host : "127.0.0.1";
    int status = 0;
    char *body = NULL;
    struct fo_err err;
    fo_err_clear(&err);
    if (cli_http_request(host, (int)port, "GET", "/health", NULL, NULL, 0, 5000,
                         &status, &body, NULL, &err) != FO_OK ||
        status != 200) {
        free(body);
        return cli_fail(c, &err);
    }
    free(body);
    long dpid = 0;
    daemon_running(c->ledger_dir, &dpid);
    if (c->json) {
        cJSON *r = cJSON_CreateObject();
        char addr[300];
        snprintf(addr, sizeof(addr), "http://%s:%ld", host, port);
        if (r) {
            fo_json_add_int(r, "pid", dpid);
            fo_json_add_int(r, "port", port);
            cJSON_AddStringToObject(r, "address", addr);
            cJSON_AddStringToObject(r, "log", logp);
            cli_print_json(r, 0);
        }
        cJSON_Delete(r);
    } else {
        printf("forum: started (pid %ld) on http://%s:%ld, log %s\n", dpid,
               host, port, logp);
    }
    return 0;
}

static int not_running(struct cli *c)
{
    struct fo_err err;
    fo_err_set(&err, FO_E_NOT_FOUND, "no forum daemon is running on %s",
               c->ledger_dir);
    return cli_fail(c, &err);
}

static int stop(struct cli *c, struct serve_opts *o)
{
    long pid = 0;
    int r = daemon_running(c->ledger_dir, &pid);
    if (r <= 0 || pid <= 0)
        return not_running(c);
    if (kill((pid_t)pid, SIGTERM) != 0)
        return not_running(c);
    int timeout = o->stop_timeout_s ? o->stop_timeout_s : 10;
    int64_t deadline = ledger_now_us() + (int64_t)timeout * 1000000;
    int killed = 0;
    while (daemon_running(c->ledger_dir, NULL) == 1) {
        if (!killed && ledger_now_us() > deadline) {
            fprintf(stderr,
                    "forum: pid %ld still running after %d s: SIGKILL\n", pid,
                    timeout);
            kill((pid_t)pid, SIGKILL);
            killed = 1;
            deadline = ledger_now_us() + 5 * 1000000LL;
        } else if (killed && ledger_now_us() > deadline) {
            struct fo_err err;
            fo_err_set(&err, FO_E_IO, "pid %ld did not stop", pid);
            return cli_fail(c, &err);
        }
        usleep(20000);
    }
    if (c->json) {
        cJSON *j = cJSON_CreateObject();
        if (j) {
            fo_json_add_int(j, "pid", pid);
            cJSON_AddBoolToObject(j, "killed", killed);
            cli_print_json(j, 0);
        }
        cJSON_Delete(j);
    } else {
        printf("forum: stopped (pid %ld)%s\n", pid,
               killed ? " with SIGKILL" : "");
    }
    return 0;
}

static int status(struct cli *c)
{
    long pid = 0;
    if (daemon_running(c->ledger_dir, &pid) != 1)
        return not_running(c);
    cJSON *st = cli_read_state(c);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(st, "host");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(st, "port");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(st, "address");
    if (!cJSON_IsString(h) || !cJSON_IsNumber(p) || !cJSON_IsString(a)) {
        cJSON_Delete(st);
        struct fo_err err;
        fo_err_set(&err, FO_E_IO, "pid %ld holds %s but wrote no state yet",
                   pid, c->ledger_dir);
        return cli_fail(c, &err);
    }
    char tok[128];
    struct fo_err err;
    fo_err_clear(&err);
    int have_tok =
        daemon_token(c->ledger_dir, 0, tok, sizeof(tok), &err) == FO_OK;
    int code = 0;
    char *body = NULL;
    cJSON *s = NULL;
    int healthy = cli_http_request(h->valuestring, (int)p->valuedouble, "GET",
                                   "/status", have_tok ? tok : NULL, NULL, 0,
                                   5000, &code, &body, NULL, &err) == FO_OK &&
                  code == 200 &&
                  fo_json_parse(body, strlen(body), &s, &err) == FO_OK;
    free(body);
    body = NULL;
    /* /health says whether it still writes (its ledger's files may have
     * gone from under it): the reason is its error message. */
    if (healthy && (cli_http_request(h->valuestring, (int)p->valuedouble, "GET",
                                     "/health", NULL, NULL, 0, 5000, &code,
                                     &body, NULL, &err) != FO_OK ||
                    code != 200)) {
        healthy = 0;
        cJSON *e = NULL;
        struct fo_err perr;
        const cJSON *m = NULL;
        if (body && fo_json_parse(body, strlen(body), &e, &perr) == FO_OK)
            m = cJSON_GetObjectItemCaseSensitive(e, "error");
        if (cJSON_IsString(m))
            fo_err_set(&err, FO_E_IO, "%s", m->valuestring);
        else if (code != 200 && body)
            fo_err_set(&err, FO_E_IO, "GET /health answered %d", code);
        cJSON_Delete(e);
    }
    free(body);
    cJSON *r = cJSON_CreateObject();
    if (!r) {
        cJSON_Delete(st);
        cJSON_Delete(s);
        return 3;
    }
    cJSON_AddTrueToObject(r, "running");
    fo_json_add_int(r, "pid", pid);
    cJSON_AddStringToObject(r, "address", a->valuestring);
    fo_json_add_int(r, "port", (long long)p->valuedouble);
    const cJSON *up = cJSON_GetObjectItemCaseSensitive(s, "uptime_s");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "entries");
    fo_json_add_int(r, "uptime_s",
                    cJSON_IsNumber(up) ? (long long)up->valuedouble : -1);
    fo_json_add_int(r, "entries",
                    cJSON_IsNumber(en) ? (long long)en->valuedouble : -1);
    cJSON_AddStringToObject(r, "health", healthy ? "ok" : "unhealthy");
    const cJSON *rif = cJSON_GetObjectItemCaseSensitive(s, "runs_in_flight");
    if (cJSON_IsNumber(rif))
        fo_json_add_int(r, "runs_in_flight", (long long)rif->valuedouble);
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(s, "providers");
    if (cJSON_IsArray(pv))
        cJSON_AddItemToObject(r, "providers", cJSON_Duplicate(pv, 1));
    if (!healthy && err.msg[0])
        cJSON_AddStringToObject(r, "error", err.msg);
    if (c->json) {
        cli_print_json(r, 0);
    } else {
        printf("running: pid %ld on %s\n", pid, a->valuestring);
        if (cJSON_IsNumber(up) && cJSON_IsNumber(en))
            printf("uptime: %lld s\nentries: %lld\n",
                   (long long)up->valuedouble, (long long)en->valuedouble);
        if (cJSON_IsNumber(rif))
            printf("runs in flight: %lld\n", (long long)rif->valuedouble);
        if (cJSON_IsArray(pv)) {
            if (!cJSON_GetArraySize(pv))
                printf("model providers: none (every role is the stub)\n");
            const cJSON *x;
            cJSON_ArrayForEach (x, pv) {
                const cJSON *api = cJSON_GetObjectItemCaseSensitive(x, "api");
                const cJSON *mo = cJSON_GetObjectItemCaseSensitive(x, "model");
                const cJSON *ti = cJSON_GetObjectItemCaseSensitive(x, "tier");
                const cJSON *ur = cJSON_GetObjectItemCaseSensitive(x, "url");
                printf("model provider: %s %s (tier %s) at %s\n",
                       cJSON_IsString(api) ? api->valuestring : "?",
                       cJSON_IsString(mo) ? mo->valuestring : "?",
                       cJSON_IsString(ti) ? ti->valuestring : "?",
                       cJSON_IsString(ur) ? ur->valuestring : "?");
            }
        }
        if (healthy)
            printf("health: ok\n");
        else
            printf("health: unhealthy (%s)\n", err.msg);
    }
    cJSON_Delete(r);
    cJSON_Delete(st);
    cJSON_Delete(s);
    return healthy ? 0 : 1;
}

static int logs(struct cli *c, struct serve_opts *o)
{
    char p[4096];
    state_path(c, DAEMON_LOG_FILE, p, sizeof(p));
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        struct fo_err err;
        fo_err_set(&err, FO_E_NOT_FOUND, "%s: no log (%s)", p, strerror(errno));
        return cli_fail(c, &err);
    }
    int want = o->lines ? o->lines : 50;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t pos = end;
    int lines = 0;
    char buf[8192];
    /* Walk back from the end to the newline before the last want lines
     * (the file's trailing newline aside). */
    while (pos > 0 && lines < want) {
        size_t chunk = pos > (off_t)sizeof(buf) ? sizeof(buf) : (size_t)pos;
        pos -= (off_t)chunk;
        ssize_t r = pread(fd, buf, chunk, pos);
        if (r <= 0)
            break;
        for (ssize_t i = r - 1; i >= 0; i--) {
            if (buf[i] == '\n' && pos + i != end - 1 && ++lines >= want) {
                pos += i + 1;
                break;
            }
        }
    }
    if (pos < 0)
        pos = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, sizeof(buf), pos);
        if (r <= 0)
            break;
        fwrite(buf, 1, (size_t)r, stdout);
        pos += r;
    }
    close(fd);
    return 0;
}

int cli_serve(struct cli *c, int argc, char **argv)
{
    struct serve_opts o;
    memset(&o, 0, sizeof(o));
    daemon_config_init(&o.cfg);
    const char *sub = NULL;
    if (argc > 1 && argv[1][0] != '-') {
        sub = argv[1];
        if (strcmp(sub, "start") && strcmp(sub, "stop") &&
            strcmp(sub, "status") && strcmp(sub, "logs"))
            return cli_bad_sub(c, "serve", sub, "start stop status logs");
    }
    /* the subcommand's own table sees its flags (argv[0]: the sub) */
    int ex =
        parse_opts(c, sub, sub ? argc - 1 : argc, sub ? argv + 1 : argv, &o);
    if (ex == CLI_PARSE_HELP) {
        daemon_config_release(&o.cfg);
        if (!sub)
            cli_help(help_serve);
        return cli_help(!sub                     ? help_serve_more
                        : !strcmp(sub, "start")  ? help_start
                        : !strcmp(sub, "stop")   ? help_stop
                        : !strcmp(sub, "status") ? help_status
                                                 : help_logs);
    }
    if (!ex && (!sub || !strcmp(sub, "start")))
        ex = load_config(c, &o);
    if (ex) {
        daemon_config_release(&o.cfg);
        return ex;
    }
    if (o.check)
        ex = check(c, &o);
    else if (!sub)
        ex = foreground(c, &o);
    else if (!strcmp(sub, "start"))
        ex = start(c, &o, "/proc/self/exe");
    else if (!strcmp(sub, "stop"))
        ex = stop(c, &o);
    else if (!strcmp(sub, "status"))
        ex = status(c);
    else
        ex = logs(c, &o);
    if (sub || o.check)
        daemon_config_release(&o.cfg);
    return ex;
}
