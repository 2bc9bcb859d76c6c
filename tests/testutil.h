/* testutil: helpers shared by the Criterion tests: temp dirs, files, and
 * running the real `forum` binary with captured output. */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

/* Creates a fresh temp dir (/tmp/forum-test-XXXXXX); aborts on failure.
 * Returns a malloc'd path. */
char *tu_tmpdir(void);

/* rm -rf of a temp dir made by tu_tmpdir (NULL-safe). Frees path. */
void tu_rmrf(char *path);

/* Reads a whole file; returns malloc'd NUL-terminated data or NULL. */
char *tu_read_file(const char *path, size_t *len);

/* Writes data to path; returns 0 on success. */
int tu_write_file(const char *path, const void *data, size_t len);

/* Parses the JSON file tests/vectors/<name> with cJSON; aborts on failure. */
cJSON *tu_vector(const char *name);

/* The result of running a command. */
struct tu_run {
    int status; /* exit code, or 128 + signal */
    char *out;  /* captured stdout, NUL-terminated */
    size_t out_len;
    char *err; /* captured stderr */
    size_t err_len;
};

/* Runs FORUM_BIN with argv (NULL-terminated, without argv[0]) and optional
 * stdin data (NULL: /dev/null). Waits for it. */
struct tu_run tu_forum(const char *stdin_data, size_t stdin_len,
                       const char *const *argv);

/* Convenience: tu_forum with a NULL-terminated variadic list of strings. */
struct tu_run tu_forumv(const char *stdin_data, const char *arg, ...);

void tu_run_free(struct tu_run *r);

/* Parses r->out as JSON (aborting the test with the output when it is not). */
cJSON *tu_run_json(const struct tu_run *r);

/* Runs FORUM_BIN with argv (NULL-terminated, without argv[0]) with stdin
 * the regular file at stdin_path (not a pipe: what `forum mcp < file`
 * sees). stdout and stderr are captured through temp files. */
struct tu_run tu_forum_file(const char *stdin_path, const char *const *argv);

/* Member k of object j, which must be a number (an integer) or a string;
 * aborts the test naming k when it is not. */
long long tu_num(const cJSON *j, const char *k);
const char *tu_str(const cJSON *j, const char *k);

/* text parsed as strict JSON (fo_json_parse); aborts the test with the
 * text when it is NULL or not JSON. The caller frees the result. */
cJSON *tu_json_parse(const char *text);

/* Whether the file at path (read whole) holds needle; 0 when unreadable. */
int tu_file_has(const char *path, const char *needle);

/* CPU time process pid has used so far (user + system), in clock ticks
 * (sysconf(_SC_CLK_TCK) a second), from /proc/PID/stat. */
long long tu_cpu_ticks(int pid);

/* Lines in the file at path (0 when unreadable). */
long tu_file_lines(const char *path);

/* Milliseconds of CLOCK_MONOTONIC, for deadlines. */
int64_t tu_now_ms(void);

/* A test seam's hold (fo_test_hold, in builds with the seams): code that
 * reads while the file at path exists waits for it to go (at most 30 s),
 * making path.held as it begins to wait and path.expired if it gave up.
 * tu_hold_init makes a temp dir for it, no file yet; tu_hold_set makes the
 * file; tu_hold_wait waits (at most ms, else the test fails naming what)
 * until something holds; tu_hold_release removes the file;
 * tu_hold_expired says whether a hold gave up; tu_hold_free removes the
 * dir. */
struct tu_hold {
    char *dir;
    char path[512], held[600], expired[600];
};
void tu_hold_init(struct tu_hold *h);
void tu_hold_set(const struct tu_hold *h);
void tu_hold_wait(const struct tu_hold *h, int ms, const char *what);
void tu_hold_release(const struct tu_hold *h);
int tu_hold_expired(const struct tu_hold *h);
void tu_hold_free(struct tu_hold *h);

/* A TCP socket listening on 127.0.0.1 at an ephemeral port (in *port);
 * aborts the test on failure. */
int tu_listen_loopback(int *port);

/* A TCP socket connected to 127.0.0.1:port; with rcvbuf > 0, its receive
 * buffer is set to that many bytes first. Aborts the test on failure. */
int tu_connect_loopback(int port, int rcvbuf);

/* A TLS server context with a self-signed P-256 certificate for san
 * ("IP:127.0.0.1" or "DNS:other.example"), its PEM written to pem_path
 * when not NULL. Aborts the test on failure. */
typedef struct ssl_ctx_st SSL_CTX;
SSL_CTX *tu_tls_server(const char *san, const char *pem_path);

/* A whole run on the engine, hosted in this process for the call
 * (daemon_embed_start on w->ledger's dir with o, daemon_embed_run, then
 * daemon_embed_stop): what `forum submit` does. The result or the run's
 * error as the engine gives them. */
struct orch;
struct orch_witness;
struct orch_run_req;
struct orch_submit_opts;
struct fo_err;
int tu_engine_run(const struct orch *o, const struct orch_witness *w,
                  const struct orch_run_req *req, cJSON **out,
                  struct fo_err *err);
/* An engine hosted in this process for ctx (daemon_embed_start on
 * ctx->ledger's dir with ctx->orch): its run methods go there
 * (ctx->host_call), as in `forum submit`. tu_unhost stops it (before the
 * orchestrator or the ledger goes); aborts the test on failure. */
struct surf_ctx;
void tu_host(struct surf_ctx *ctx);
void tu_unhost(struct surf_ctx *ctx);
/* tu_engine_run of a submit, a plan_run and a plan. */
int tu_submit(const struct orch *o, const struct orch_witness *w,
              const char *request, const struct orch_submit_opts *opts,
              cJSON **out, struct fo_err *err);
int tu_run_plan(const struct orch *o, const struct orch_witness *w,
                const cJSON *plan, const char *request, cJSON **out,
                struct fo_err *err);
int tu_plan_request(const struct orch *o, const struct orch_witness *w,
                    const char *request, cJSON **out, struct fo_err *err);

#endif
