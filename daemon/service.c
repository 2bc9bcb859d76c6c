/* service: the daemon's composition root (see service.h). Files in the
 * data dir: forum.pid (the pid; its flock is the one-daemon lock),
 * forum.state.json (pid, address, port, start time), token (0600). */
#include "daemon/service.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <openssl/rand.h>

#include "daemon/commit.h"
#include "daemon/httpc.h"
#include "daemon/keys.h"
#include "daemon/orch.h"
#include "daemon/orch_sandbox.h"
#include "daemon/tlog.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_file.h"
#include "ledger/fo_json.h"
#include "ledger/fo_version.h"
#include "ledger/ledger.h"
#include "ledger/note.h"
#include "daemon/orch_engine.h"
#include "daemon/orch_model.h"
#include "surfaces/http.h"
#include "surfaces/surf.h"
#include "surfaces/gateway.h"
#include "surfaces/otlp.h"
#include "surfaces/tlog.h"

struct daemon {
    const struct daemon_config *cfg;
    char path[4096]; /* scratch for file names */
    pthread_mutex_t log_mu;
    FILE *log;
    int log_fd;    /* the log file's fd when logging to a file, else -1 */
    int access_fd; /* the access log's, else -1 */
    struct surf_verify_progress verify; /* every ctx's ledger_verify */
    struct event_base *base;
    struct ledger *ledger;
    struct daemon_commit *commit;
    struct surf_http *http;
    /* the http surface as the committer thread sees it (set once made) */
    _Atomic(struct surf_http *) notify;
    struct surf_ctx loop_ctx;
    struct orch *orch; /* immutable once made: shared by every thread */
    struct evdns_base *dns;
    struct httpc_pool *pool;    /* keep-alive connections of model calls */
    struct orch_engine *engine; /* every run, on the loop thread */
    _Atomic(struct daemon_tlog *) tlog;  /* the public log, witnessing */
    struct surf_gateway *gw;             /* /v1/...: the model gateway */
    struct keys *keys;                   /* the gateway's client keys */
    struct surf_otlp *otlp;              /* POST /v1/traces */
    int stopping, drained, runs_stopped; /* SIGTERM: both, then the end */
    size_t runs_at_stop;
    char token[80];
    int lock_fd;
    int64_t start_us;
    int ready_fd; /* until the starter is told: see ready() */
    /* An engine hosted in another command's process (daemon_embed_*):
     * no lock, no state file, no signals, no resume; HTTP only when
     * listen. */
    int embedded, listen;
    struct event *stop_ev; /* embedded: daemon_embed_stop's drain */
    struct event *sigs[3];
};

/* ---- logging ---------------------------------------------------------- */

static void dlog(void *hook, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void dlog(void *hook, const char *fmt, ...)
{
    struct daemon *d = hook;
    if (!d->log) /* embedded without a log: quiet */
        return;
    char ts[32];
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&d->log_mu);
    fprintf(d->log, "%s.%03ldZ forum[%ld]: ", ts, now.tv_nsec / 1000000L,
            (long)getpid());
    vfprintf(d->log, fmt, ap);
    fputc('\n', d->log);
    fflush(d->log);
    pthread_mutex_unlock(&d->log_mu);
    va_end(ap);
}

static int open_log(struct daemon *d, struct fo_err *err)
{
    d->log = stderr;
    d->log_fd = -1;
    if (!d->cfg->log_file)
        return FO_OK;
    int fd =
        open(d->cfg->log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return fo_err_set(err, FO_E_IO, "%s: %s", d->cfg->log_file,
                          strerror(errno));
    FILE *f = fdopen(fd, "a");
    if (!f) {
        close(fd);
        return fo_err_set(err, FO_E_IO, "%s: %s", d->cfg->log_file,
                          strerror(errno));
    }
    d->log = f;
    d->log_fd = fd;
    dup2(fd, STDERR_FILENO); /* stray stderr lands in the log too */
    return FO_OK;
}

static int open_access_log(struct daemon *d, struct fo_err *err)
{
    d->access_fd = -1;
    if (!d->cfg->access_log)
        return FO_OK;
    d->access_fd = open(d->cfg->access_log,
                        O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (d->access_fd < 0)
        return fo_err_set(err, FO_E_IO, "access log %s: %s", d->cfg->access_log,
                          strerror(errno));
    return FO_OK;
}

/* SIGHUP: the access log reopened under the same descriptor (the http
 * surface writes it from this thread, between signals). */
static void reopen_access_log(struct daemon *d)
{
    if (d->access_fd < 0)
        return;
    surf_http_access_flush(d->http);
    int fd = open(d->cfg->access_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                  0600);
    if (fd < 0 || dup3(fd, d->access_fd, O_CLOEXEC) < 0)
        dlog(d, "SIGHUP: cannot reopen the access log %s: %s",
             d->cfg->access_log, strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* SIGHUP: reopen the log file under the same FILE (after a rotation). */
static void reopen_log(struct daemon *d)
{
    reopen_access_log(d);
    if (d->log_fd < 0)
        return;
    int fd =
        open(d->cfg->log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        dlog(d, "SIGHUP: cannot reopen %s: %s", d->cfg->log_file,
             strerror(errno));
        return;
    }
    pthread_mutex_lock(&d->log_mu);
    fflush(d->log);
    int ok = dup3(fd, d->log_fd, O_CLOEXEC) >= 0;
    int e = errno;
    if (ok)
        dup2(fd, STDERR_FILENO);
    pthread_mutex_unlock(&d->log_mu);
    close(fd);
    if (ok)
        dlog(d, "SIGHUP: log reopened");
    else /* still the old file: say so there */
        dlog(d, "SIGHUP: cannot reopen %s: %s (logging on to the old file)",
             d->cfg->log_file, strerror(e));
}

/* ---- files in the data dir -------------------------------------------- */

static const char *dpath(struct daemon *d, const char *name)
{
    snprintf(d->path, sizeof(d->path), "%s/%s", d->cfg->dir, name);
    return d->path;
}

int daemon_token(const char *dir, int create, char *out, size_t outsz,
                 struct fo_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, DAEMON_TOKEN_FILE) >=
        (int)sizeof(path))
        return fo_err_set(err, FO_E_INVALID, "data dir path too long");
    if (create) /* a creation killed mid-way left a whole token behind */
        fo_file_clean_temps(dir, DAEMON_TOKEN_FILE);
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            int rc = fo_file_check_private(fd, path, err);
            if (rc) {
                close(fd);
                return rc;
            }
            char buf[128];
            ssize_t n = read(fd, buf, sizeof(buf) - 1);
            close(fd);
            if (n < 0)
                return fo_err_set(err, FO_E_IO, "%s: %s", path,
                                  strerror(errno));
            buf[n] = '\0';
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                             buf[n - 1] == ' '))
                buf[--n] = '\0';
            if (n < 16 || (size_t)n >= outsz)
                return fo_err_set(err, FO_E_INVALID,
                                  "%s: a token of 16 to %zu characters, "
                                  "please",
                                  path, outsz - 1);
            memcpy(out, buf, (size_t)n + 1);
            return FO_OK;
        }
        if (errno != ENOENT || !create)
            return fo_err_set(err, errno == ENOENT ? FO_E_NOT_FOUND : FO_E_IO,
                              "%s: %s", path, strerror(errno));
        unsigned char raw[32];
        char hex[65];
        if (RAND_bytes(raw, sizeof(raw)) != 1)
            return fo_err_set(err, FO_E_INTERNAL, "no randomness");
        fo_hex(raw, sizeof(raw), hex);
        /* FO_E_EXISTS: another process made the token first; read theirs */
        int rc = fo_file_create(dir, path, hex, 64, 0600, err);
        if (rc && rc != FO_E_EXISTS)
            return rc;
    }
    return fo_err_set(err, FO_E_IO, "%s: cannot read", path);
}

int daemon_running(const char *dir, long *pid)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, DAEMON_PID_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (pid) {
        *pid = 0;
        if (n > 0) {
            buf[n] = '\0';
            *pid = strtol(buf, NULL, 10);
        }
    }
    int running = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) != 0)
        running = errno == EWOULDBLOCK ? 1 : -1;
    close(fd); /* releases the probe's shared lock */
    return running;
}

/* Takes the one-daemon lock and writes the pid file. */
static int take_lock(struct daemon *d, struct fo_err *err)
{
    const char *p = dpath(d, DAEMON_PID_FILE);
    for (;;) {
        int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return fo_err_set(err, FO_E_IO, "%s: %s", p, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char buf[32] = {0};
            ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
            close(fd);
            if (e != EWOULDBLOCK)
                return fo_err_set(err, FO_E_IO, "%s: %s", p, strerror(e));
            return fo_err_set(err, FO_E_LOCKED,
                              "another forum daemon (pid %ld) is serving %s",
                              n > 0 ? strtol(buf, NULL, 10) : 0L, d->cfg->dir);
        }
        /* The file we locked may have been unlinked by a daemon that just
         * stopped: lock the file that is there now. */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            char buf[32];
            int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
                close(fd);
                return fo_err_set(err, FO_E_IO, "%s: %s", p, strerror(errno));
            }
            d->lock_fd = fd;
            return FO_OK;
        }
        close(fd);
    }
}

static int write_state(struct daemon *d, int port, struct fo_err *err)
{
    cJSON *o = cJSON_CreateObject();
    char addr[300];
    const char *host = d->cfg->host ? d->cfg->host : "127.0.0.1";
    snprintf(addr, sizeof(addr), "http://%s:%d", host, port);
    char cwd_dir[4096];
    const char *dir = d->cfg->dir;
    if (dir[0] != '/' && getcwd(cwd_dir, sizeof(cwd_dir))) {
        size_t l = strlen(cwd_dir);
        if (l + 1 + strlen(dir) < sizeof(cwd_dir)) {
            cwd_dir[l] = '/';
            memcpy(cwd_dir + l + 1, dir, strlen(dir) + 1);
            dir = cwd_dir;
        }
    }
    if (!o || !fo_json_add_int(o, "pid", getpid()) ||
        !cJSON_AddStringToObject(o, "host", host) ||
        !fo_json_add_int(o, "port", port) ||
        !cJSON_AddStringToObject(o, "address", addr) ||
        !fo_json_add_int(o, "started_us", d->start_us) ||
        !cJSON_AddStringToObject(o, "ledger", dir) ||
        !cJSON_AddStringToObject(o, "version", FO_VERSION) ||
        !cJSON_AddBoolToObject(o, "auth", !d->cfg->no_auth)) {
        cJSON_Delete(o);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    int rc = fo_json_canon(o, &b, err);
    cJSON_Delete(o);
    if (rc == FO_OK && fo_buf_putc(&b, '\n'))
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    char tmp[4200], final_[4096];
    snprintf(final_, sizeof(final_), "%s", dpath(d, DAEMON_STATE_FILE));
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", final_) >= (int)sizeof(tmp))
        rc = fo_err_set(err, FO_E_INVALID, "data dir path too long");
    if (rc == FO_OK) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len ||
            close(fd) != 0 || rename(tmp, final_) != 0)
            rc = fo_err_set(err, FO_E_IO, "%s: %s", final_, strerror(errno));
    }
    fo_buf_release(&b);
    return rc;
}

/* ---- health ----------------------------------------------------------- */

/* The loop thread's (GET /health, and the write methods started there):
 * unhealthy once the committer stopped writing, or once the loop's own
 * ledger handle sees the ledger's files gone from under the daemon (then
 * the committer stops too, so no append is acknowledged after a health
 * check said so, and it is logged once). */
static int daemon_health(void *hook, struct fo_err *err)
{
    struct daemon *d = hook;
    int rc = daemon_commit_health(d->commit, err);
    if (rc == FO_OK) {
        rc = ledger_storage_check(d->ledger, err);
        if (rc == FO_E_STORAGE_MOVED)
            daemon_commit_refuse(d->commit, err);
    }
    return rc;
}

/* A worker's: the committer's verdict alone (the loop's ledger handle is
 * the loop thread's). */
static int worker_health(void *hook, struct fo_err *err)
{
    struct daemon *d = hook;
    return daemon_commit_health(d->commit, err);
}

/* ---- contexts --------------------------------------------------------- */

/* The surfaces' view of the group commit (surfaces/http.h). */
static int commit_submit(void *hook, struct ledger_queued_append *r,
                         struct fo_err *err)
{
    struct daemon *d = hook;
    return daemon_commit_submit(d->commit, r, err);
}

/* /metrics beyond HTTP's own: the group commit's and the run engine's. */
static int daemon_metrics(void *hook, struct fo_buf *out)
{
    struct daemon *d = hook;
    int rc = d->commit ? daemon_commit_metrics(d->commit, out) : FO_OK;
    if (!rc && d->engine)
        rc = orch_engine_metrics(d->engine, out);
    if (!rc && atomic_load(&d->tlog))
        rc = daemon_tlog_metrics(atomic_load(&d->tlog), out);
    if (!rc)
        rc = surf_gateway_metrics(d->gw, out);
    return rc;
}

static int ctx_open(void *hook, struct surf_ctx **out, struct fo_err *err)
{
    struct daemon *d = hook;
    struct surf_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_open(d->cfg->dir, 0, NULL, &ctx->ledger, err);
    if (rc) {
        free(ctx);
        return rc;
    }
    ctx->start_us = d->start_us;
    ctx->orch = d->orch;
    ctx->append = daemon_commit_append_sync;
    ctx->append_batch = daemon_commit_append_batch_sync;
    ctx->append_hook = d->commit;
    ctx->health = worker_health;
    ctx->health_hook = d;
    ctx->verify = &d->verify;
    *out = ctx;
    return FO_OK;
}

static void ctx_close(void *hook, struct surf_ctx *ctx)
{
    (void)hook;
    if (!ctx)
        return;
    ledger_close(ctx->ledger);
    free(ctx);
}

/* ---- the engine's commits --------------------------------------------- */

/* An engine entry through the group committer: the committer's request
 * around the engine's, copied back when its batch committed. */
struct engine_creq {
    struct ledger_queued_append creq;
    struct ledger_append *a;
    void (*done)(void *arg);
    void *arg;
};

static void engine_committed(struct ledger_queued_append *r)
{
    struct engine_creq *c = r->arg;
    c->a->rc = r->a.rc;
    c->a->err = r->a.err;
    c->a->entry = r->a.entry;
    c->done(c->arg);
    free(c);
}

/* Committer thread: a checkpoint was signed; the public log looks now. */
static void checkpoint_signed(void *hook)
{
    struct daemon *d = hook;
    daemon_tlog_kick(atomic_load(&d->tlog));
}

/* Committer thread: new entries; the event streams look now. */
static void committed(void *hook)
{
    struct daemon *d = hook;
    surf_http_notify(atomic_load(&d->notify));
}

static int engine_append(void *hook, struct ledger_append *a,
                         void (*done)(void *arg), void *arg, struct fo_err *err)
{
    struct daemon *d = hook;
    struct engine_creq *c = calloc(1, sizeof(*c));
    if (!c)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    c->a = a;
    c->done = done;
    c->arg = arg;
    c->creq.a = (struct ledger_append){.actor = a->actor,
                                       .kind = a->kind,
                                       .parent = a->parent,
                                       .body = a->body,
                                       .body_len = a->body_len,
                                       .lease_owner = a->lease_owner,
                                       .lease_run = a->lease_run,
                                       .lease_ms = a->lease_ms,
                                       .sole_kinds = a->sole_kinds};
    c->creq.done = engine_committed;
    c->creq.arg = c;
    int rc = daemon_commit_submit(d->commit, &c->creq, err);
    if (rc)
        free(c);
    return rc;
}

/* An engine redaction (the forget tool) on the committer's thread: the
 * loop thread never waits for the write lock or the WAL checkpoint. */
struct engine_cred {
    struct daemon_commit_redact cr;
    int *rc;
    struct fo_err *rerr;
    void (*done)(void *arg);
    void *arg;
};

static void engine_redacted(struct daemon_commit_redact *r)
{
    struct engine_cred *c = r->arg;
    *c->rc = r->rc;
    *c->rerr = r->err;
    c->done(c->arg);
    free(c);
}

static int engine_redact(void *hook, int64_t seq, const char *reason, int *rc,
                         struct fo_err *rerr, void (*done)(void *arg),
                         void *arg, struct fo_err *err)
{
    struct daemon *d = hook;
    struct engine_cred *c = calloc(1, sizeof(*c));
    if (!c)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    *c = (struct engine_cred){
        .cr = {.seq = seq, .reason = reason, .done = engine_redacted},
        .rc = rc,
        .rerr = rerr,
        .done = done,
        .arg = arg};
    c->cr.arg = c;
    int qrc = daemon_commit_redact(d->commit, &c->cr, err);
    if (qrc)
        free(c);
    return qrc;
}

/* The routes outside the handler table: the trace receiver's
 * (/v1/traces), the model gateway's (/v1/...), then the public log's. */
static int extra_route(void *hook, struct surf_http *h,
                       struct evhttp_request *req, const char *path,
                       const char *verb, int authed, int64_t t0)
{
    struct daemon *d = hook;
    if (surf_otlp_route(d->otlp, h, req, path, verb, authed, t0))
        return 1;
    if (d->gw && surf_gateway_route(d->gw, h, req, path, verb, authed, t0))
        return 1;
    return surf_tlog_route(atomic_load(&d->tlog), h, req, path, verb, authed,
                           t0);
}

/* ---- signals ---------------------------------------------------------- */

/* The loop ends once every request is answered and every run stopped. */
static void drained(void *arg)
{
    struct daemon *d = arg;
    dlog(d, "drained: every request answered");
    d->drained = 1;
    if (d->runs_stopped)
        event_base_loopexit(d->base, NULL);
}

/* Every run has its stop on record: now the requests still open. */
static void runs_stopped(void *arg)
{
    struct daemon *d = arg;
    if (d->runs_at_stop)
        dlog(d, "runs stopped: they resume on the next start");
    d->runs_stopped = 1;
    if (d->drained)
        event_base_loopexit(d->base, NULL);
}

/* The drain, once: the HTTP surface answers 503 to new requests and
 * waits for those in flight, while each run finishes what it has in
 * flight (within the grace), writes its stop and answers its caller 503
 * (it resumes on the next start). */
static void begin_stop(struct daemon *d, const char *why)
{
    dlog(d, "%s: draining (no new connections; finishing in-flight work)", why);
    if (d->stopping)
        return;
    d->stopping = 1;
    size_t n = orch_engine_active(d->engine);
    d->runs_at_stop = n;
    if (n)
        dlog(d, "stopping %zu run%s", n, n == 1 ? "" : "s");
    if (d->http)
        surf_http_drain(d->http, drained, d);
    else
        d->drained = 1;
    orch_engine_stop(d->engine, runs_stopped, d);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct daemon *d = arg;
    if (sig == SIGHUP) {
        reopen_log(d);
        return;
    }
    static const char *names[] = {[SIGINT] = "SIGINT", [SIGTERM] = "SIGTERM"};
    begin_stop(d, names[sig] ? names[sig] : "signal");
}

static int embed_token(struct daemon *d, struct fo_err *err);

/* ---- run -------------------------------------------------------------- */

void daemon_config_init(struct daemon_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->port = -1;
    cfg->ready_fd = -1;
}

/* Tells `serve start` (when it waits on a pipe) how the start went; once. */
static void ready(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ready(struct daemon *d, const char *fmt, ...)
{
    if (d->ready_fd < 0)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(buf) - 1)
        n = (int)sizeof(buf) - 1;
    if (write(d->ready_fd, buf, (size_t)n) < 0) {
        /* the starter went away: nothing to tell */
    }
    close(d->ready_fd);
    d->ready_fd = -1;
}

/* `status` in the daemon: its runs in memory and its model providers
 * (never a key), for `forum serve status`. */
static void daemon_status(void *hook, cJSON *st)
{
    struct daemon *d = hook;
    cJSON_AddStringToObject(st, "engine",
                            d->embedded ? "in process" : "daemon");
    fo_json_add_int(st, "runs_in_flight",
                    (long long)orch_engine_active(d->engine));
    cJSON *ps = cJSON_AddArrayToObject(st, "providers");
    const struct daemon_config *cfg = d->cfg;
    for (size_t i = 0; ps && cfg->has_models && i < cfg->models.n_providers;
         i++) {
        const struct orch_model_provider *p = &cfg->models.providers[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(ps, o))
            break;
        cJSON_AddStringToObject(
            o, "api", p->api == ORCH_EXEC_ANTHROPIC ? "anthropic" : "chat");
        cJSON_AddStringToObject(o, "model", p->model ? p->model : "");
        cJSON_AddStringToObject(o, "url",
                                p->url ? p->url : "https://api.anthropic.com");
        cJSON_AddStringToObject(
            o, "tier",
            p->tier == ORCH_TIER_ANY ? "any" : orch_tier_name(p->tier));
    }
}

/* The orchestrator of the daemon's configuration (runs' workspaces under
 * DIR/workspaces), its guardrails knowing the daemon's token. */
static int make_orch(struct daemon *d, struct fo_err *err)
{
    const struct daemon_config *cfg = d->cfg;
    int rc = FO_OK;
    if (cfg->orch) { /* the embedding command's, as it made it */
        d->orch = cfg->orch;
        return FO_OK;
    }
    char wsroot[PATH_MAX];
    if (snprintf(wsroot, sizeof(wsroot), "%s/workspaces", cfg->dir) >=
        (int)sizeof(wsroot)) {
        rc = fo_err_set(err, FO_E_INVALID, "%s: path too long", cfg->dir);
        return rc;
    }
    struct orch_config oc = {.roster_path = cfg->roster,
                             .cmd = cfg->cmd,
                             .models = cfg->has_models ? &cfg->models : NULL,
                             .max_runs = cfg->max_runs,
                             .gates = cfg->gates,
                             .workspace = cfg->workspace,
                             .workspace_root = wsroot,
                             .mcp_servers = cfg->mcp_servers,
                             .context = cfg->context,
                             .sandbox = cfg->sandbox,
                             .data_dir = cfg->dir,
                             .cmd_sandbox = cfg->cmd_sandbox,
                             .disk_reserve_mb = cfg->disk_reserve_mb};
    rc = orch_create(&oc, &d->orch, err);
    if (rc)
        return rc;
    /* the guardrails keep the daemon's own token out of the ledger */
    rc = orch_add_secret(d->orch, d->token);
    if (rc) {
        fo_err_set(err, rc, NULL);
        return rc;
    }
    return FO_OK;
}

/* The event loop, made after libevent's thread support is on. */
static int make_base(struct daemon *d, struct fo_err *err)
{
    int rc = FO_OK;
    if (evthread_use_pthreads() != 0) {
        rc = fo_err_set(err, FO_E_INTERNAL, "libevent without threads");
        return rc;
    }
    /* The changelist folds the EV_READ/EV_WRITE toggles evhttp makes per
     * request into one epoll_ctl per descriptor and loop iteration. */
    struct event_config *ecfg = event_config_new();
    if (ecfg)
        event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    d->base = ecfg ? event_base_new_with_config(ecfg) : NULL;
    if (ecfg)
        event_config_free(ecfg);
    if (!d->base) {
        rc = fo_err_set(err, FO_E_INTERNAL, "cannot create the event base");
        return rc;
    }
    return rc;
}

/* The group committer, the resolver, the run engine and the public log,
 * on the loop. */
static int make_engine(struct daemon *d, struct fo_err *err)
{
    const struct daemon_config *cfg = d->cfg;
    int rc;
    struct daemon_commit_config cc = {
        .sign_interval_ms = cfg->sign_interval_ms,
        .log = dlog,
        .log_hook = d,
        .committed = committed,
        .committed_hook = d,
        .signed_cb = checkpoint_signed,
        .lease_ms =
            (cfg->lease_s > 0 ? cfg->lease_s : DAEMON_LEASE_S_DEFAULT) * 1000};
    rc = daemon_commit_create(cfg->dir, &cc, &d->commit, err);
    if (rc)
        return rc;
    /* host names of model providers, looked up without blocking */
    rc = httpc_dns_create(d->base, &d->dns, err);
    if (rc == FO_OK)
        rc = httpc_pool_create(d->base, 0, 0, &d->pool, err);
    if (rc)
        return rc;
    orch_set_http_pool(d->orch, d->base, d->pool);
    struct orch_engine_config ec = {
        .base = d->base,
        .dns = d->dns,
        .ledger = d->ledger,
        .append = engine_append,
        .redact = engine_redact,
        .hook = d,
        .max_runs =
            (size_t)(cfg->max_runs ? cfg->max_runs : orch_max_runs(d->orch)),
        .lease_ms =
            (cfg->lease_s > 0 ? cfg->lease_s : DAEMON_LEASE_S_DEFAULT) * 1000,
        .not_resumable = d->embedded,
        .log = dlog,
        .log_hook = d};
    rc = orch_engine_create(d->orch, &ec, &d->engine, err);
    if (rc || d->embedded)
        return rc;
    struct daemon_tlog_config tc = {.dir = cfg->dir,
                                    .base = d->base,
                                    .dns = d->dns,
                                    .open = !cfg->tlog_private,
                                    .hashes_only = cfg->tlog_hashes_only,
                                    .witnesses = cfg->witnesses,
                                    .witness_of = cfg->witness_of,
                                    .witness_name = cfg->witness_name,
                                    .log = dlog,
                                    .log_hook = d};
    struct daemon_tlog *tlog = NULL;
    rc = daemon_tlog_create(&tc, &tlog, err);
    if (rc)
        return rc;
    atomic_store(&d->tlog, tlog);
    return FO_OK;
}

/* The surfaces' view of the daemon, the model gateway and the HTTP
 * surface, bound. */
static int make_http(struct daemon *d, struct fo_err *err)
{
    const struct daemon_config *cfg = d->cfg;
    int rc;
    d->loop_ctx =
        (struct surf_ctx){.ledger = d->ledger,
                          .start_us = d->start_us,
                          .orch = d->orch,
                          .engine = d->engine,
                          .append = daemon_commit_append_sync,
                          .append_batch = daemon_commit_append_batch_sync,
                          .append_hook = d->commit,
                          .health = daemon_health,
                          .health_hook = d,
                          .status_extra = daemon_status,
                          .status_hook = d,
                          .verify = &d->verify};
    if (!d->listen)
        return FO_OK;
    struct surf_http_config hc = {
        .host = cfg->host,
        .port = cfg->port < 0 ? 8080 : cfg->port,
        .token = d->token,
        .no_auth = cfg->no_auth,
        .allowed_hosts = cfg->allowed_hosts,
        .n_allowed_hosts = (size_t)cfg->n_allowed_hosts,
        .body_max = cfg->body_max,
        .timeout_s = cfg->timeout_s,
        .max_connections = cfg->max_connections,
        .workers = cfg->workers,
        .loop_ctx = &d->loop_ctx,
        .ctx_open = ctx_open,
        .ctx_close = ctx_close,
        .hook = d,
        .append_submit = d->commit ? commit_submit : NULL,
        .metrics = daemon_metrics,
        .append_hook = d,
        .metrics_public = cfg->metrics_public,
        .access_on = d->access_fd >= 0,
        .access_fd = d->access_fd,
        .log = dlog,
        .extra = extra_route,
        .extra_hook = d,
    };
    /* the client keys, their usage counted from the ledger (before the
     * loop runs), the file watched for changes */
    rc = keys_load(cfg->dir, &d->keys, err);
    if (!rc)
        rc = keys_count_usage(d->keys, d->ledger, err);
    if (!rc)
        rc = keys_watch(d->keys, err);
    if (rc)
        return rc;
    struct surf_gateway_config gc = {
        .base = d->base,
        .dns = d->dns,
        .models = cfg->has_models ? &cfg->models : NULL,
        .token = d->token,
        .keys = d->keys,
        .no_auth = cfg->no_auth,
        .append_submit = d->commit ? commit_submit : NULL,
        .append_hook = d};
    rc = surf_gateway_create(&gc, &d->gw, err);
    if (rc)
        return rc;
    struct surf_otlp_config oc = {.base = d->base,
                                  .ledger = d->ledger,
                                  .batch = daemon_commit_append_batch_sync,
                                  .batch_hook = d->commit};
    rc = surf_otlp_create(&oc, &d->otlp, err);
    if (rc)
        return rc;
    rc = surf_http_create(d->base, &hc, &d->http, err);
    if (rc)
        return rc;
    return rc;
}

/* Says at start what answers the runs, where commands run, and whether
 * a gate policy is set. */
static void log_setup(struct daemon *d)
{
    const struct daemon_config *cfg = d->cfg;
    /* what answers the runs (never a key: only the variable's name) */
    for (size_t i = 0; cfg->has_models && i < cfg->models.n_providers; i++) {
        const struct orch_model_provider *p = &cfg->models.providers[i];
        dlog(d, "model provider %zu: %s %s at %s, tier %s, key %s", i + 1,
             p->api == ORCH_EXEC_ANTHROPIC ? "anthropic" : "chat", p->model,
             p->url ? p->url : "https://api.anthropic.com",
             p->tier == ORCH_TIER_ANY ? "any" : orch_tier_name(p->tier),
             p->api_key_env ? p->api_key_env : "(none)");
    }
    if (!cfg->has_models)
        dlog(d, "no model provider: %s",
             cfg->cmd ? "the --cmd command answers every role and runs "
                        "every task"
                      : "every role is the deterministic stub");
    if (cfg->sandbox == ORCH_SANDBOX_NONE) {
        dlog(d, "sandbox: none (configured): agents' commands run "
                "unconfined, and every result says so");
    } else {
        char why[256];
        if (orch_sandbox_available(why, sizeof(why)))
            dlog(d, "sandbox: bubblewrap (agents' commands run confined to "
                    "their workspace)");
        else
            dlog(d,
                 "sandbox: unavailable: %s; run_command calls are "
                 "refused (set \"sandbox\": \"none\" to run them "
                 "unconfined)",
                 why);
    }
    if (cfg->gates)
        dlog(d, "approval gates: a standing policy is set (forum gate "
                "list shows the gates waiting)");
}

/* Everything up to the loop: the ledger, the lock and the state file (a
 * daemon's), the orchestrator, the engine, the HTTP surface (a daemon's,
 * or an embedded host's that listens), signals (a daemon's), and the runs
 * a crash or a shutdown left (a daemon resumes them). */
/* The line a supervisor (and the tests) wait for: the daemon serves and
 * the runs it resumed are on record. */
static void say_ready(struct daemon *d)
{
    const struct daemon_config *cfg = d->cfg;
    ready(d, "ok %d\n", surf_http_port(d->http)); /* to `serve start` */
    if (cfg->quiet)
        return;
    printf("forum: listening on http://%s:%d\n",
           cfg->host ? cfg->host : "127.0.0.1", surf_http_port(d->http));
    fflush(stdout);
}

static void on_resumed(void *arg, size_t n, int rc, const struct fo_err *err)
{
    struct daemon *d = arg;
    if (rc == FO_E_DRAINING)
        return; /* stopped before it was ready */
    if (rc)
        dlog(d, "resume: %s", err->msg);
    else if (n)
        dlog(d, "resumed %zu run%s", n, n == 1 ? "" : "s");
    say_ready(d);
}

static int daemon_setup(struct daemon *d, struct fo_err *err)
{
    const struct daemon_config *cfg = d->cfg;
    int rc = d->embedded && !cfg->log_file ? FO_OK : open_log(d, err);
    if (rc == FO_OK)
        rc = open_access_log(d, err);
    if (rc)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    rc = ledger_open(cfg->dir, LEDGER_OPEN_CREATE, NULL, &d->ledger, err);
    if (!rc && !d->embedded)
        rc = take_lock(d, err);
    if (!rc)
        rc = d->embedded
                 ? embed_token(d, err)
                 : daemon_token(cfg->dir, 1, d->token, sizeof(d->token), err);
    if (!rc)
        rc = make_orch(d, err);
    if (!rc)
        rc = make_base(d, err);
    if (!rc)
        rc = make_engine(d, err);
    if (!rc)
        rc = make_http(d, err);
    if (rc)
        return rc;
    atomic_store(&d->notify, d->http);
    if (d->embedded)
        return FO_OK;
    int port = surf_http_port(d->http);
    rc = write_state(d, port, err);
    if (rc)
        return rc;
    static const int signums[3] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        d->sigs[i] = evsignal_new(d->base, signums[i], on_signal, d);
        if (!d->sigs[i] || event_add(d->sigs[i], NULL) != 0)
            return fo_err_set(err, FO_E_INTERNAL, "cannot watch signals");
    }
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    dlog(d,
         "serving %s on http://%s:%d (pid %ld, auth %s, at most %ld "
         "connections)",
         cfg->dir, host, port, (long)getpid(), cfg->no_auth ? "off" : "on",
         surf_http_max_connections(d->http));
    log_setup(d);
    /* Runs that a crash or a shutdown left without an end go on: listed,
     * folded and their resume entries committed off the loop, which
     * serves meanwhile; the daemon says it is ready once they did. */
    struct fo_err rerr;
    if (orch_engine_resume_start(d->engine, on_resumed, d, &rerr) != FO_OK) {
        dlog(d, "resume: %s", rerr.msg);
        say_ready(d);
    }
    return FO_OK;
}

/* The loop until drained and every run stopped, then the last commits and
 * the last checkpoint. */
static int daemon_loop(struct daemon *d, struct fo_err *err)
{
    int rc = FO_OK;
    /* an embedded host may wait with nothing on its loop until a call or
     * its stop comes (from another thread) */
    if (event_base_loop(d->base, d->embedded ? EVLOOP_NO_EXIT_ON_EMPTY : 0) < 0)
        rc = fo_err_set(err, FO_E_INTERNAL, "the event loop failed");
    daemon_commit_stop(d->commit);
    dlog(d, "stopped");
    return rc;
}

/* Lets go of everything setup made (any part of it). */
static void daemon_teardown(struct daemon *d)
{
    /* the witness's last answers go out through the HTTP surface */
    daemon_tlog_free(atomic_exchange(&d->tlog, NULL));
    surf_http_free(d->http);  /* writes out the access log's last lines */
    surf_gateway_free(d->gw); /* no call in flight once drained */
    keys_free(d->keys);
    surf_otlp_free(d->otlp); /* nor a trace export */
    if (d->access_fd >= 0)
        close(d->access_fd);
    orch_engine_free(d->engine); /* stopped before the loop ended */
    if (d->base) /* jobs it cancelled at the stop: their children reaped */
        orch_jobs_reap_wait(d->base, 2000);
    if (d->dns)
        evdns_base_free(d->dns, 0);
    if (d->orch)
        orch_set_http_pool(d->orch, NULL, NULL);
    httpc_pool_free(d->pool); /* no call is left on the loop */
    daemon_commit_free(d->commit);
    for (int i = 0; i < 3; i++)
        if (d->sigs[i])
            event_free(d->sigs[i]);
    if (d->stop_ev)
        event_free(d->stop_ev);
    if (d->base)
        event_base_free(d->base);
    if (d->lock_fd >= 0) {
        unlink(dpath(d, DAEMON_STATE_FILE));
        unlink(dpath(d, DAEMON_PID_FILE));
        close(d->lock_fd);
    }
    ledger_close(d->ledger);
    if (d->orch != d->cfg->orch)
        orch_free(d->orch);
    if (d->log && d->log != stderr)
        fclose(d->log);
    pthread_mutex_destroy(&d->log_mu);
    free(d);
}

static struct daemon *daemon_new(const struct daemon_config *cfg, int embedded,
                                 int listen)
{
    struct daemon *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->cfg = cfg;
    d->lock_fd = -1;
    d->log_fd = -1;
    d->access_fd = -1;
    d->ready_fd = embedded ? -1 : cfg->ready_fd;
    d->start_us = ledger_now_us();
    d->embedded = embedded;
    d->listen = !embedded || listen;
    pthread_mutex_init(&d->log_mu, NULL);
    return d;
}

int daemon_run(const struct daemon_config *cfg, struct fo_err *err)
{
    struct daemon *d = daemon_new(cfg, 0, 1);
    if (!d)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = daemon_setup(d, err);
    if (rc == FO_OK) /* ready once its runs are resumed: say_ready */
        rc = daemon_loop(d, err);
    if (rc != FO_OK) {
        ready(d, "error %s\n", err->msg);
        if (d->log_fd >= 0) /* on stderr the CLI says it already */
            dlog(d, "cannot serve: %s", err->msg);
    }
    daemon_teardown(d);
    return rc;
}

/* ---- an engine hosted in process ---------------------------------------- */

struct daemon_embed {
    struct daemon *d;
    struct daemon_config cfg; /* d->cfg: a copy the host outlives */
    pthread_t tid;
    int started;
    int rc;
    struct fo_err err;
};

/* A random token for an embedded host that listens: known to this
 * process alone (the data dir's token file is the daemon's). */
static int embed_token(struct daemon *d, struct fo_err *err)
{
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return fo_err_set(err, FO_E_INTERNAL, "no random bytes");
    fo_hex(raw, sizeof(raw), d->token);
    return FO_OK;
}

static void *embed_main(void *arg)
{
    struct daemon_embed *e = arg;
    /* the loop's handle, opened by daemon_embed_start, is this thread's */
    ledger_set_owner(e->d->ledger);
    e->rc = daemon_loop(e->d, &e->err);
    return NULL;
}

/* Loop thread: daemon_embed_stop asked; the same drain as SIGTERM. */
static void embed_stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    begin_stop(arg, "stopping");
}

int daemon_embed_start(const struct daemon_config *cfg, int listen,
                       struct daemon_embed **out, struct fo_err *err)
{
    struct daemon_embed *e = calloc(1, sizeof(*e));
    if (!e)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    e->cfg = *cfg;
    e->cfg.sign_interval_ms = -1; /* checkpoints are a daemon's cadence */
    if (listen) { /* loopback, a port of its own, the random token */
        e->cfg.host = "127.0.0.1";
        e->cfg.port = 0;
        e->cfg.no_auth = 0;
    }
    e->d = daemon_new(&e->cfg, 1, listen);
    int rc = e->d ? daemon_setup(e->d, err) : fo_err_set(err, FO_E_NOMEM, NULL);
    if (rc == FO_OK) {
        e->d->stop_ev = event_new(e->d->base, -1, 0, embed_stop_cb, e->d);
        if (!e->d->stop_ev)
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
    }
    if (rc == FO_OK && pthread_create(&e->tid, NULL, embed_main, e) != 0)
        rc = fo_err_set(err, FO_E_INTERNAL, "cannot start the loop thread");
    if (rc) {
        if (e->d)
            daemon_teardown(e->d);
        free(e);
        return rc;
    }
    e->started = 1;
    *out = e;
    return FO_OK;
}

int daemon_embed_port(const struct daemon_embed *e)
{
    return e->d->http ? surf_http_port(e->d->http) : -1;
}

const char *daemon_embed_token(const struct daemon_embed *e)
{
    return e->d->token;
}

int daemon_embed_stop(struct daemon_embed *e, struct fo_err *err)
{
    if (!e)
        return FO_OK;
    event_active(e->d->stop_ev, EV_TIMEOUT, 0);
    pthread_join(e->tid, NULL);
    ledger_set_owner(e->d->ledger); /* the teardown's, on this thread */
    int rc = e->rc;
    if (rc && err)
        *err = e->err;
    daemon_teardown(e->d);
    free(e);
    return rc;
}

/* daemon_embed_wait_runs: a tick on the loop until the engine holds no
 * run. */
struct embed_idle {
    struct daemon *d;
    struct event *tick;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void idle_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct embed_idle *w = arg;
    if (orch_engine_active(w->d->engine) != 0)
        return;
    event_del(w->tick);
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void daemon_embed_wait_runs(struct daemon_embed *e)
{
    struct embed_idle w = {.d = e->d};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    struct timeval tv = {0, 50000};
    w.tick = event_new(e->d->base, -1, EV_PERSIST, idle_tick, &w);
    if (w.tick && event_add(w.tick, &tv) == 0) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
    }
    if (w.tick)
        event_free(w.tick); /* waits for a tick under way */
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

/* One call parked on the host's loop until it is answered. */
struct embed_call {
    struct daemon *d;
    const struct surf_method *m;
    const struct orch_run_req *req; /* daemon_embed_run's, else m's */
    const cJSON *in;
    cJSON *out;
    int rc, done;
    struct fo_err err;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void call_finish(struct embed_call *c, int rc, cJSON *out,
                        const struct fo_err *err)
{
    pthread_mutex_lock(&c->mu);
    c->rc = rc;
    c->out = out;
    if (rc && err)
        c->err = *err;
    else if (rc)
        fo_err_set(&c->err, rc, NULL);
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Loop thread: the engine's answer, a method's (surf_reply_fn) or a
 * run's end (orch_run_done_fn): out is ours either way (as
 * http_run_reply frees it), handed to the caller. */
static void call_done(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    call_finish(arg, rc, out, err);
}

/* Loop thread: the call where its row says it runs. */
static void call_on_loop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct embed_call *c = arg;
    struct surf_ctx *ctx = &c->d->loop_ctx;
    struct fo_err err;
    fo_err_clear(&err);
    if (c->req) {
        if (c->d->stopping)
            call_finish(c, fo_err_set(&err, FO_E_DRAINING, "shutting down"),
                        NULL, &err);
        else if (orch_engine_start(c->d->engine, c->req, NULL, call_done, c,
                                   &err) != FO_OK)
            call_finish(c, err.code ? err.code : FO_E_INTERNAL, NULL, &err);
        return;
    }
    if (c->m->where == SURF_ON_RUN) {
        if (c->d->stopping)
            call_finish(c, fo_err_set(&err, FO_E_DRAINING, "shutting down"),
                        NULL, &err);
        else if (surf_start(ctx, c->m, c->in, call_done, c, &err) != FO_OK)
            call_finish(c, err.code ? err.code : FO_E_INTERNAL, NULL, &err);
        return;
    }
    cJSON *out = NULL;
    int rc = surf_call(ctx, c->m, c->in, &out, &err);
    call_finish(c, rc, out, &err);
}

/* Posts c to the host's loop and parks until it is answered. */
static int call_park(struct daemon_embed *e, struct embed_call *c, cJSON **out,
                     struct fo_err *err)
{
    c->d = e->d;
    fo_err_clear(&c->err);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    struct timeval now = {0, 0};
    int rc = FO_OK;
    if (event_base_once(e->d->base, -1, EV_TIMEOUT, call_on_loop, c, &now) !=
        0) {
        rc = fo_err_set(err, FO_E_NOMEM, "cannot reach the engine's loop");
    } else {
        pthread_mutex_lock(&c->mu);
        while (!c->done)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        rc = c->rc;
        if (rc)
            *err = c->err;
        else
            *out = c->out;
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    return rc;
}

int daemon_embed_call(void *hook, const struct surf_method *m, const cJSON *in,
                      cJSON **out, struct fo_err *err)
{
    struct embed_call c = {.m = m, .in = in};
    return call_park(hook, &c, out, err);
}

int daemon_embed_run(struct daemon_embed *e, const struct orch_run_req *req,
                     cJSON **out, struct fo_err *err)
{
    struct embed_call c = {.req = req};
    return call_park(e, &c, out, err);
}

/* ---- forum.json ------------------------------------------------------- */

/* forum.json "allowed_hosts": host names (no port, no scheme), added to
 * what cfg holds. */
static int allowed_hosts_load(struct daemon_config *cfg, const cJSON *v,
                              const char *path, struct fo_err *err)
{
    const cJSON *e;
    cJSON_ArrayForEach (e, v) {
        if (!cJSON_IsString(e) || !*e->valuestring ||
            strpbrk(e->valuestring, ":/ \t[]@"))
            return fo_err_set(err, FO_E_INVALID,
                              "%s: allowed_hosts: each a host name (no "
                              "port, no scheme)",
                              path);
        if (cfg->n_allowed_hosts >= DAEMON_ALLOWED_HOSTS_MAX)
            return fo_err_set(err, FO_E_INVALID,
                              "%s: allowed_hosts: at most %d names", path,
                              DAEMON_ALLOWED_HOSTS_MAX);
        cfg->allowed_hosts[cfg->n_allowed_hosts++] = e->valuestring;
    }
    return FO_OK;
}

int daemon_config_load(struct daemon_config *cfg, struct fo_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", cfg->dir, DAEMON_CONFIG_FILE);
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT
                   ? FO_OK
                   : fo_err_set(err, FO_E_IO, "%s: %s", path, strerror(errno));
    char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), f);
    int big = !feof(f);
    fclose(f);
    if (big)
        return fo_err_set(err, FO_E_INVALID, "%s: over 64 KiB", path);
    cJSON *o = NULL;
    int rc = fo_json_parse(buf, n, &o, err);
    if (rc) {
        fo_err_prefix(err, "%s", path);
        return rc;
    }
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return fo_err_set(err, FO_E_INVALID, "%s: must be a JSON object", path);
    }
    /* the fields below may point into o: on an error they are put back,
     * so nothing is left pointing into the freed file */
    const struct daemon_config before = *cfg;
    const cJSON *v;
    cJSON_ArrayForEach (v, o) {
        const char *k = v->string;
        long long x = 0;
        int is_int =
            cJSON_IsNumber(v) && v->valuedouble == (long long)v->valuedouble;
        x = is_int ? (long long)v->valuedouble : 0;
        if (!strcmp(k, "host") && cJSON_IsString(v) && *v->valuestring)
            cfg->host = v->valuestring;
        else if (!strcmp(k, "port") && is_int && x >= 0 && x <= 65535)
            cfg->port = (int)x;
        else if (!strcmp(k, "no_auth") && cJSON_IsBool(v))
            cfg->no_auth = cJSON_IsTrue(v);
        else if (!strcmp(k, "metrics_public") && cJSON_IsBool(v))
            cfg->metrics_public = cJSON_IsTrue(v);
        else if (!strcmp(k, "allowed_hosts") && cJSON_IsArray(v)) {
            rc = allowed_hosts_load(cfg, v, path, err);
            if (rc)
                goto fail;
        } else if (!strcmp(k, "access_log") && cJSON_IsString(v) &&
                   *v->valuestring)
            cfg->access_log = v->valuestring;
        else if (!strcmp(k, "timeout_s") && is_int && x >= 1 && x <= 3600)
            cfg->timeout_s = (int)x;
        else if (!strcmp(k, "workers") && is_int && x >= 1 && x <= 64)
            cfg->workers = (int)x;
        else if (!strcmp(k, "body_max") && is_int && x >= 1024 &&
                 x <= (1LL << 30))
            cfg->body_max = (size_t)x;
        else if (!strcmp(k, "max_runs") && is_int && x >= 1 &&
                 x <= ORCH_RUNS_MAX)
            cfg->max_runs = (int)x;
        else if (!strcmp(k, "lease_s") && is_int && x >= 1 && x <= 3600)
            cfg->lease_s = (int)x;
        else if (!strcmp(k, "disk_reserve_mb") && is_int && x >= 1 &&
                 x <= (1LL << 30))
            cfg->disk_reserve_mb = x;
        else if (!strcmp(k, "max_connections") && is_int && x >= 1 &&
                 x <= SURF_HTTP_CONNECTIONS_MAX)
            cfg->max_connections = (int)x;
        else if (!strcmp(k, "models") && cJSON_IsObject(v)) {
            struct orch_model_provider *pv = NULL;
            struct orch_model_config mc;
            rc = orch_model_config_parse(v, &mc, &pv, err);
            if (rc) {
                fo_err_prefix(err, "%s", path);
                goto fail;
            }
            if (cfg->providers_owned != before.providers_owned)
                free(cfg->providers_owned); /* "models" given twice */
            cfg->providers_owned = pv;
            cfg->models = mc;
            cfg->has_models = 1;
        } else if (!strcmp(k, "gates") && cJSON_IsObject(v)) {
            cfg->gates = v; /* checked with the roster by orch_create */
        } else if (!strcmp(k, "sandbox") && cJSON_IsString(v) &&
                   orch_sandbox_mode_parse(v->valuestring) >= 0) {
            cfg->sandbox = orch_sandbox_mode_parse(v->valuestring);
        } else if (!strcmp(k, "cmd_sandbox") && cJSON_IsObject(v)) {
            cfg->cmd_sandbox = v; /* checked by orch_create */
        } else if (!strcmp(k, "context") && cJSON_IsObject(v)) {
            cfg->context = v; /* checked by orch_create */
        } else if (!strcmp(k, "mcp_servers") && cJSON_IsObject(v)) {
            cfg->mcp_servers = v; /* checked by orch_create */
        } else if (!strcmp(k, "workspace") && cJSON_IsString(v) &&
                   v->valuestring[0] == '/') {
            if (!cfg->workspace)
                cfg->workspace = v->valuestring; /* the flag wins */
        } else if (!strcmp(k, "tlog_public") && cJSON_IsBool(v)) {
            cfg->tlog_private = !cJSON_IsTrue(v);
        } else if (!strcmp(k, "tlog_hashes_only") && cJSON_IsBool(v)) {
            cfg->tlog_hashes_only = cJSON_IsTrue(v);
        } else if (!strcmp(k, "witnesses") || !strcmp(k, "witness_of")) {
            int logs = !strcmp(k, "witnesses"); /* else: the witness's */
            rc =
                daemon_tlog_config_check(logs ? v : NULL, logs ? NULL : v, err);
            if (rc) {
                fo_err_prefix(err, "%s", path);
                goto fail;
            }
            if (logs)
                cfg->witnesses = v;
            else
                cfg->witness_of = v;
        } else if (!strcmp(k, "witness_name") && cJSON_IsString(v) &&
                   note_name_check(v->valuestring, strlen(v->valuestring),
                                   NULL) == FO_OK) {
            cfg->witness_name = v->valuestring;
        } else if (!strcmp(k, "checkpoint_interval_ms") && is_int && x >= -1 &&
                   x <= 86400000)
            cfg->sign_interval_ms = x == 0 ? -1 : (int)x;
        else {
            rc = fo_err_set(err, FO_E_INVALID,
                            "%s: field %s: unknown or out of range", path, k);
            goto fail;
        }
    }
    if (cfg->providers_owned != before.providers_owned)
        free(before.providers_owned);
    cfg->owned = o;
    return FO_OK;
fail:
    if (cfg->providers_owned != before.providers_owned)
        free(cfg->providers_owned);
    *cfg = before; /* nothing points into the file about to be freed */
    cJSON_Delete(o);
    return rc;
}

void daemon_config_release(struct daemon_config *cfg)
{
    cJSON_Delete(cfg->owned);
    cfg->owned = NULL;
    free(cfg->providers_owned);
    cfg->providers_owned = NULL;
    cfg->has_models = 0;
    cJSON_Delete(cfg->gates_owned);
    cfg->gates_owned = NULL;
    cfg->gates = NULL;
    cfg->mcp_servers = NULL;
    cfg->context = NULL;
    cfg->witnesses = NULL;
    cfg->witness_of = NULL;
    cfg->witness_name = NULL;
    cfg->cmd_sandbox = NULL;
}

int daemon_config_set_providers(struct daemon_config *cfg,
                                const struct orch_model_provider *p, size_t n,
                                struct fo_err *err)
{
    if (n < 1 || n > ORCH_MODEL_PROVIDERS_MAX)
        return fo_err_set(err, FO_E_INVALID, "models: 1-%d providers",
                          ORCH_MODEL_PROVIDERS_MAX);
    struct orch_model_provider *copy = calloc(n, sizeof(*copy));
    if (!copy)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    memcpy(copy, p, n * sizeof(*copy));
    free(cfg->providers_owned);
    cfg->providers_owned = copy;
    cfg->models = (struct orch_model_config){
        .providers = copy, .n_providers = n, .fallover = 1};
    cfg->has_models = 1;
    return FO_OK;
}
