/* service: `forum serve`, the composition root. It opens the ledger, takes
 * the data dir's daemon lock, starts the group committer and the HTTP
 * surface on one event loop, and owns signals: SIGTERM/SIGINT drain and
 * exit 0, SIGHUP reopens the log. The only file in daemon/ that knows the
 * surfaces. */
#ifndef DAEMON_SERVICE_H
#define DAEMON_SERVICE_H

#include <stddef.h>

#include "daemon/orch_model.h"
#include "ledger/fo_err.h"

#define DAEMON_PID_FILE "forum.pid"
#define DAEMON_STATE_FILE "forum.state.json"
#define DAEMON_LOG_FILE "forum.log"
#define DAEMON_TOKEN_FILE "token"
#define DAEMON_CONFIG_FILE "forum.json"
/* the run lease on a PostgreSQL ledger (several daemons), seconds */
#define DAEMON_LEASE_S_DEFAULT 10
/* names --allowed-host and forum.json "allowed_hosts" may give, together */
#define DAEMON_ALLOWED_HOSTS_MAX 16

struct daemon_config {
    const char *dir;    /* the data dir (created when absent) */
    const char *host;   /* NULL: 127.0.0.1 */
    int port;           /* -1: 8080; 0: ephemeral */
    int no_auth;        /* --no-auth */
    int metrics_public; /* --metrics-public: GET /metrics without token */
    /* --allowed-host (repeatable) and forum.json "allowed_hosts": names a
     * request's Host and Origin may give besides the listen address,
     * loopback and localhost */
    const char *allowed_hosts[DAEMON_ALLOWED_HOSTS_MAX];
    int n_allowed_hosts;
    int timeout_s;          /* HTTP idle read/write timeout, and the deadline
                               for a request to arrive whole; 0: 30 */
    int max_connections;    /* HTTP connections open at once; 0: from the
                               open-file limit (surf_http_connections_default) */
    int workers;            /* worker threads; 0: 2 */
    size_t body_max;        /* HTTP body cap; 0: 1 MiB + 64 KiB */
    int sign_interval_ms;   /* checkpoint cadence; 0: 1000; < 0: never */
    const char *log_file;   /* NULL: stderr */
    const char *access_log; /* one line a request to this file; NULL: none */
    int ready_fd;       /* -1, or a pipe told "ok <port>" or "error <msg>" */
    int quiet;          /* no "listening on" line on stdout */
    const char *cmd;    /* plan executor command (NULL: the stub) */
    const char *roster; /* roster file (NULL: the built-in roster) */
    int max_runs;       /* runs at once; 0: the engine's default (10,000;
                           1..ORCH_RUNS_MAX) */
    int lease_s;        /* run lease on a PostgreSQL ledger; 0: 10 (1..3600) */
    /* Where tools act (--workspace, forum.json "workspace"); NULL: a fresh
     * DIR/workspaces/run-<id> per run. */
    const char *workspace;
    /* forum.json "mcp_servers" (daemon/orch_mcpc.h), or NULL */
    const cJSON *mcp_servers;
    /* forum.json "context": the context limits of session turns, or NULL */
    const cJSON *context;
    /* forum.json "sandbox" / --sandbox: ORCH_SANDBOX_BWRAP (0) or _NONE */
    int sandbox;
    /* forum.json "cmd_sandbox": how the --cmd model program runs
     * (orch_cmd_box_parse), or NULL */
    const cJSON *cmd_sandbox;
    /* forum.json "disk_reserve_mb" (0: the default) */
    int64_t disk_reserve_mb;
    /* The approval-gate policy every run starts with (forum.json "gates"
     * or the --gate flags); NULL: none. gates_owned is freed by
     * daemon_config_release. */
    const cJSON *gates;
    cJSON *gates_owned;
    /* The public log and witnessing (daemon/tlog.h): /tlog/ needs the
     * token only with tlog_private (--no-tlog-public, forum.json
     * "tlog_public": false); tlog_hashes_only withholds the entry bundles
     * ("tlog_hashes_only"); forum.json "witnesses", "witness_of" and
     * "witness_name" (NULL when absent). */
    int tlog_private;
    int tlog_hashes_only;
    const cJSON *witnesses;
    const cJSON *witness_of;
    const char *witness_name;
    void *owned; /* the parsed forum.json strings point into */
    /* Model providers for the control loop (submit, plan): forum.json's
     * "models", or the providers of the model flags. has_models 0: every
     * role is the deterministic stub. */
    int has_models;
    struct orch_model_config models;
    struct orch_model_provider *providers_owned; /* models.providers */
    /* An embedded host's orchestrator, made by the embedding command (it
     * outlives the host); NULL: made from this configuration. */
    struct orch *orch;
};

/* The providers of the command-line model flags (cli_provider_apply), n of
 * them in the order given, into cfg->models: they replace forum.json's
 * "models" as a whole (its attempts, timeouts and ca_file too). The array
 * is copied; its strings must outlive cfg. Within a tier they fall over in
 * the order given (fallover on). FO_OK, or FO_E_INVALID for n outside
 * 1..ORCH_MODEL_PROVIDERS_MAX, FO_E_NOMEM. */
int daemon_config_set_providers(struct daemon_config *cfg,
                                const struct orch_model_provider *p, size_t n,
                                struct fo_err *err);

/* Defaults for every field (dir NULL). */
void daemon_config_init(struct daemon_config *cfg);

/* Reads DIR/forum.json when it exists into cfg (fields: host, port,
 * no_auth, timeout_s, workers, body_max, checkpoint_interval_ms, max_runs
 * (1..ORCH_RUNS_MAX), max_connections (1..SURF_HTTP_CONNECTIONS_MAX),
 * allowed_hosts (an array of up to DAEMON_ALLOWED_HOSTS_MAX names),
 * models (orch_model_config_parse)). Unknown
 * fields and wrong types are FO_E_INVALID naming the field; a missing file
 * is not an error. Strings stay valid until daemon_config_release. */
int daemon_config_load(struct daemon_config *cfg, struct fo_err *err);
void daemon_config_release(struct daemon_config *cfg);

/* Runs the daemon in the foreground until SIGTERM/SIGINT, then drains and
 * returns FO_OK (every acknowledged write committed). FO_E_LOCKED when
 * another daemon serves the dir; FO_E_IO when the port cannot be bound. */
int daemon_run(const struct daemon_config *cfg, struct fo_err *err);

/* An engine hosted in another command's process: `forum submit`, `forum
 * mcp` with no daemon, tests. The same loop, engine and group committer
 * as `forum serve`, on a thread of its own; no lock, no state file, no
 * signals, no resume, no checkpoints on a cadence, no log unless
 * cfg->log_file. With listen, also the HTTP surface on 127.0.0.1, an
 * ephemeral port and a random token (daemon_embed_port, _token): what
 * `forum mcp` bridges its standard input to. cfg must outlive the host
 * (the host keeps a copy of the struct, not of what it points to). */
struct daemon_embed;
struct surf_method;
int daemon_embed_start(const struct daemon_config *cfg, int listen,
                       struct daemon_embed **out, struct fo_err *err);
int daemon_embed_port(const struct daemon_embed *e);
const char *daemon_embed_token(const struct daemon_embed *e);
/* One method of the table on the host's loop (surf_ctx.host_call, with
 * the host as hook): a run method started on its engine, a loop method
 * called there; the caller is parked until the answer. */
int daemon_embed_call(void *hook, const struct surf_method *m, const cJSON *in,
                      cJSON **out, struct fo_err *err);
/* A run of req on the host's engine (orch_engine_start on its loop), the
 * caller parked until its end: FO_OK and *out its result, or the run's
 * error. req and what it points to stay the caller's. */
struct orch_run_req;
int daemon_embed_run(struct daemon_embed *e, const struct orch_run_req *req,
                     cJSON **out, struct fo_err *err);
/* Parks the caller until the host's engine holds no run (the runs
 * run_start began ended, each by its own budget): `forum mcp` at the end
 * of its input, so the runs an editor started end before it exits. */
void daemon_embed_wait_runs(struct daemon_embed *e);
/* Drains as SIGTERM does (runs still going write their stop and resume on
 * the next daemon's start), stops the thread and frees. NULL-safe. */
int daemon_embed_stop(struct daemon_embed *e, struct fo_err *err);

/* Reads (creating with 0600 on first use when create) DIR/token into out
 * (NUL-terminated, at least 65 bytes). */
int daemon_token(const char *dir, int create, char *out, size_t outsz,
                 struct fo_err *err);

/* Is a daemon holding DIR's lock? 1 yes (its pid in *pid when known), 0 no,
 * < 0 on error. Never takes the lock for longer than the check. */
int daemon_running(const char *dir, long *pid);

#endif
