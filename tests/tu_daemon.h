/* tu_daemon: tests that run the real daemon: start `forum serve` on
 * 127.0.0.1 port 0 in a temp data dir, talk HTTP to it (well formed or
 * raw bytes), signal it, wait for it. */
#ifndef TU_DAEMON_H
#define TU_DAEMON_H

#include <stddef.h>
#include <sys/types.h>

#include <cJSON.h>

struct tu_daemon {
    pid_t pid;
    int port;
    char token[128];
    const char *dir;
    int out; /* tu_daemon_start_early: its stdout, until it said it is ready */
};

/* Starts FORUM_BIN --ledger dir serve --port 0 [extra args...] (NULL-ended)
 * in the foreground as a child, waits for its "listening on" line and reads
 * the token. Aborts the test on failure. */
void tu_daemon_start(struct tu_daemon *d, const char *dir, ...);

/* tu_daemon_start with the daemon's open-file limit (RLIMIT_NOFILE, soft
 * and hard) set to nofile. */
void tu_daemon_start_nofile(struct tu_daemon *d, const char *dir, int nofile,
                            ...);

/* tu_daemon_start, but returns once the daemon serves (its state file
 * names its pid and port, /health answers) without waiting for its
 * "listening on" line, which says it also resumed its runs: that line is
 * read by tu_daemon_ready. */
void tu_daemon_start_early(struct tu_daemon *d, const char *dir, ...);

/* 1 when the daemon of tu_daemon_start_early said "listening on" within
 * wait_ms (0: has it yet), 0 when not; aborts when it exited first. */
int tu_daemon_ready(struct tu_daemon *d, int wait_ms);

/* Sends SIGTERM and returns once the daemon stopped serving (its drain
 * closed the listener: /health no longer answers 200), without waiting for
 * its exit (tu_daemon_signal_wait with sig 0 does). Aborts after 10 s. */
void tu_daemon_term_drained(struct tu_daemon *d);

/* Sends sig and waits for the exit; returns the exit code, or 128 + signal
 * when it died of one. Aborts when it does not exit in timeout_ms. */
int tu_daemon_signal_wait(struct tu_daemon *d, int sig, int timeout_ms);

/* One request with the daemon's token (auth 0: none); returns the status,
 * the body in *body (malloc'd; may be NULL). -1 when no reply came. */
int tu_http(const struct tu_daemon *d, const char *method, const char *path,
            const char *json, int auth, char **body);

/* tu_http with the token, which must answer status want (else the test
 * aborts with the reply); returns the reply parsed (the caller frees it). */
cJSON *tu_http_json(const struct tu_daemon *d, const char *method,
                    const char *path, const char *json, int want);

/* Reads one reply from fd (blocking) into its status and body (malloc'd);
 * buf (cap bytes) holds what was read, *len of it: bytes of the next reply
 * stay there for the next call. Aborts when the connection closes first. */
int tu_http_read_reply(int fd, char *buf, size_t cap, size_t *len, char **body);

/* Sends raw bytes on a new connection, then reads until the server closes
 * or wait_ms passes. Returns the status of the first reply line (0 when no
 * reply, e.g. closed silently); *closed says whether the server closed the
 * connection within wait_ms; *reply gets everything read (malloc'd, may be
 * NULL). */
int tu_http_raw(int port, const char *data, size_t len, int wait_ms,
                int *closed, char **reply);

/* Calls tool over MCP: runs `forum --ledger dir mcp [--admin]` with an
 * initialize and a tools/call of tool with args (JSON object text), and
 * returns the call's structuredContent (the caller frees it). Aborts the
 * test when the process fails or the result is an error. */
cJSON *tu_mcp_call(const char *dir, int admin, const char *tool,
                   const char *args);
/* The same with more arguments after `mcp` (extra: NULL-ended, may be NULL;
 * at most 60), e.g. model provider flags. */
cJSON *tu_mcp_callv(const char *dir, const char *const *extra, const char *tool,
                    const char *args);

/* Arguments that make method m succeed on the small ledger the parity and
 * MCP tests build (three entries and a signed checkpoint). A method with
 * required input and no row here fails the test: add the row. */
struct surf_method;
const char *tu_method_args(const struct surf_method *m);
/* 1 for the methods the table-walking tests leave to their own suite. */
int tu_method_skip(const struct surf_method *m);

/* In process: method called through the handler table with the JSON text
 * json; the return code must be want (else the test aborts with the
 * error). Returns the result (NULL unless FO_OK; the caller frees it). */
struct surf_ctx;
cJSON *tu_surf_call(struct surf_ctx *ctx, const char *method, const char *json,
                    int want);
/* Polls GET /runs/RUN of daemon d until the run is neither running,
 * waiting nor stopped (aborts after ms); returns the last answer. */
cJSON *tu_daemon_run_wait(const struct tu_daemon *d, long long run, int ms);
/* Polls run_get of run until its state is no longer "running" (aborts
 * after ms); returns the last result. */
cJSON *tu_run_wait(struct surf_ctx *ctx, long long run, int ms);
/* "request route plan ... " from the entries of a run_get result. */
void tu_entry_kinds(const cJSON *g, char *out, size_t size);

/* bench/fake_model as a child process (it dies with the test): replies
 * after delay_ms, or (hold) not before SIGUSR1. */
struct tu_fakebin {
    pid_t pid;
    int port;
};
void tu_fakebin_start(struct tu_fakebin *f, int hold, const char *delay_ms);
void tu_fakebin_stop(struct tu_fakebin *f);
/* A counter of its GET /stats (calls, held, in_flight, coordinator...). */
long long tu_fakebin_stat(const struct tu_fakebin *f, const char *key);
/* How many entries of kind the ledger in dir has (ledger summary). */
long long tu_kind_count(const char *dir, const char *kind);

#endif
