/* http: the HTTP surface. One generic evhttp callback routes every request
 * through the handler table: transport checks, auth, input from the query,
 * path or body, then the method where the table says it runs: the loop, a
 * worker, the committer or the run engine.
 * Replies, metrics and the drain all happen on the loop thread. */
#include "surfaces/http.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <openssl/crypto.h>

#include "ledger/fo_json.h"
#include "ledger/fo_version.h"
#include "surfaces/events.h"
#include "surfaces/http_guard.h"

#define BODY_MAX_DEFAULT ((1u << 20) + 64 * 1024)
#define HEADER_MAX_DEFAULT (16 * 1024)
#define TIMEOUT_DEFAULT_S 30
#define WORKERS_DEFAULT 2
#define MAX_SEGMENTS 8
/* max_connections by default: the open-file limit less FD_RESERVE (the
 * ledger handles, the log, runs and their children need descriptors too),
 * within CONNECTIONS_FLOOR..CONNECTIONS_CEIL. */
#define FD_RESERVE 128
#define CONNECTIONS_FLOOR 16
#define CONNECTIONS_CEIL 16384
#define ACCEPT_PAUSE_MS 200           /* after a failed accept() */
#define LOG_EVERY_US (10 * 1000000LL) /* one line per kind and interval */

/* Route labels for metrics: one per table row, then these. */
enum {
    ROUTE_METRICS = 0,
    ROUTE_UNKNOWN = 1,
    ROUTE_EVENTS = 2,
    ROUTE_DASHBOARD = 3,
    ROUTE_TLOG = 4, /* the extra hook's routes (surfaces/tlog.c) */
    ROUTE_EXTRA = 5
};
static const int statuses[] = {200, 400, 401, 403, 404, 405, 410, 413,
                               415, 421, 500, 502, 503, 504, 0};
#define NSTATUS (sizeof(statuses) / sizeof(statuses[0]))
static const double lat_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                    0.05,   0.1,   0.5,    1.0,   5.0};
#define NLAT (sizeof(lat_bounds) / sizeof(lat_bounds[0]))

struct job {
    struct surf_http *h;
    struct evhttp_request *req;
    const struct surf_method *m;
    int route;
    int64_t t0;
    cJSON *in;
    /* results of a call (set on the worker) */
    int status;
    char *body;
    size_t body_len;
    /* an append */
    struct ledger_queued_append creq;
    struct fo_buf cbody;
    struct job *next;
};

struct queue {
    struct job *head, *tail;
};

/* A log line at most once per LOG_EVERY_US; the ones held back meanwhile
 * are counted, and the next line says how many. */
struct ratelog {
    int64_t last_us;
    int logged;
    unsigned long held;
};

struct conn;
struct stream;

struct surf_http {
    struct surf_http_config cfg;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    int port;
    const struct surf_method *table;
    size_t nmethods;
    struct route *routes; /* one per method, split at start */
    /* workers */
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct queue work;
    struct queue done;
    int stopping;
    struct event *done_ev;
    /* committer-thread state: answers of the batch being handed over */
    struct queue committed;
    /* loop-thread state */
    long inflight;
    int draining;
    /* Connections, from accept to close (see "connections" below). */
    struct conn **conns;       /* by descriptor */
    size_t nconns;             /* slots in conns */
    struct bufferevent **born; /* accepted this turn of the loop */
    size_t nborn, born_cap;
    struct event *adopt_ev;
    long open;     /* connections open (born or adopted) */
    long max_open; /* max_connections */
    int pins_on;   /* the base has EV_FEATURE_EARLY_CLOSE */
    /* the listener: NULL once draining */
    struct evconnlistener *listener;
    int accepting; /* the listener is enabled */
    int paused;    /* after a failed accept(), until pause_ev */
    struct event *pause_ev;
    struct ratelog full_log, error_log;
    /* timeout_s, as a common timeout: every deadline has the same length,
     * so adding and removing one costs O(1), not a heap operation */
    const struct timeval *deadline_tv;
    struct timeval deadline_plain;
    struct surf_http *next_owner; /* see owners */
    void (*drained)(void *arg);
    void *drained_arg;
    struct event *drain_ev;
    struct event *drain_timer; /* gives up on unsent replies after a while */
    long unsent;               /* replies handed to libevent, not yet written */
    /* metrics (loop thread only) */
    unsigned long long *counts; /* [route][status] */
    unsigned long long lat[NLAT + 1];
    double lat_sum;
    unsigned long long requests;
    unsigned long long accept_errors;   /* accept() failures, each a pause */
    unsigned long long full_stops;      /* times max_connections was hit */
    unsigned long long deadline_closes; /* requests cut by the deadline */
    int64_t start_us;
    /* GET /events: the tailer and the streams open (loop thread) */
    struct surf_events *events;
    struct stream *streams;
    long nstreams;
    /* after a stream that held much output closed: gives the freed memory
     * back to the system (see stream_unlink) */
    struct event *trim_ev;
    /* SURF_ON_LOOP methods run on the loop: only over a local store (a
     * PostgreSQL read is a round trip: those go to the workers) */
    int loop_reads;
    /* the access log's lines not yet written, and its timer */
    struct fo_buf alog;
    struct event *alog_ev;
};

static void logm(struct surf_http *h, const char *what, const char *detail)
{
    if (h->cfg.log)
        h->cfg.log(h->cfg.hook, "%s: %s", what, detail);
}

static void q_push(struct queue *q, struct job *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static struct job *q_pop(struct queue *q)
{
    struct job *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
    }
    return j;
}

/* A job that owns in from here on (NULL when out of memory). */
static struct job *job_new(struct surf_http *h, struct evhttp_request *req,
                           const struct surf_method *m, int route, int64_t t0,
                           cJSON *in)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    *j = (struct job){
        .h = h, .req = req, .m = m, .route = route, .t0 = t0, .in = in};
    fo_buf_init(&j->cbody, 0);
    return j;
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    cJSON_Delete(j->in);
    free(j->body);
    fo_buf_release(&j->cbody);
    free(j);
}

/* ---- replies ---------------------------------------------------------- */

static void count(struct surf_http *h, int route, int status, int64_t t0)
{
    size_t si = NSTATUS - 1;
    for (size_t i = 0; i + 1 < NSTATUS; i++)
        if (statuses[i] == status)
            si = i;
    h->counts[(size_t)route * NSTATUS + si]++;
    double secs = (double)(ledger_now_us() - t0) / 1e6;
    size_t b = 0;
    while (b < NLAT && secs > lat_bounds[b])
        b++;
    h->lat[b]++;
    h->lat_sum += secs;
    h->requests++;
}

/* ---- the access log ------------------------------------------------------
 *
 * One line a request, for people and for grep:
 *   2026-11-25T21:56:19.412Z 127.0.0.1 GET /ledger/42 200 617 0.412ms
 * ledger_get time (UTC, ms), peer, method, path (never the query string, never
 * a header), status, body bytes, time to the reply, the route's label. A GET
 * /events line is written when the stream starts. */

#define ALOG_FLUSH (16 * 1024)

void surf_http_access_flush(struct surf_http *h)
{
    if (!h || !h->cfg.access_on || !h->alog.len)
        return;
    size_t off = 0;
    while (off < h->alog.len) {
        ssize_t w =
            write(h->cfg.access_fd, h->alog.data + off, h->alog.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* a full disk: these lines are lost, the daemon is not */
        off += (size_t)w;
    }
    fo_buf_reset(&h->alog);
}

static void alog_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    surf_http_access_flush(arg);
}

static const char *route_label(const struct surf_http *h, int route);
static const char *method_name(enum evhttp_cmd_type c);

static void access_line(struct surf_http *h, struct evhttp_request *req,
                        int status, size_t bytes, int route, int64_t t0)
{
    if (!h->cfg.access_on)
        return;
    int64_t now = ledger_now_us();
    time_t secs = (time_t)(now / 1000000);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&secs, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    char *peer = NULL;
    ev_uint16_t port = 0;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (evcon)
        evhttp_connection_get_peer(evcon, &peer, &port);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path)
        path = "/";
    /* a control byte or a space in the path cannot forge a line */
    char clean[513];
    size_t n = 0;
    for (; path[n] && n < sizeof(clean) - 1; n++)
        clean[n] =
            (unsigned char)path[n] <= 0x20 || path[n] == 0x7f ? '?' : path[n];
    clean[n] = '\0';
    fo_buf_printf(&h->alog, "%s.%03dZ %s %s %s %d %zu %.3fms %s\n", when,
                  (int)(now / 1000 % 1000), peer ? peer : "-",
                  method_name(evhttp_request_get_command(req)), clean, status,
                  bytes, (double)(now - t0) / 1000.0, route_label(h, route));
    if (h->alog.len >= ALOG_FLUSH)
        surf_http_access_flush(h);
}

static void free_ref(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    free(arg);
}

static void drain_check(struct surf_http *h);
static void conn_replied(struct surf_http *h, struct evhttp_request *req);
static void conn_sent(struct surf_http *h, struct evhttp_request *req);

/* libevent wrote a whole reply to the socket. */
static void reply_written(struct evhttp_request *req, void *arg)
{
    struct surf_http *h = arg;
    conn_replied(h, req);
    h->unsent--;
    drain_check(h);
}

static void write_now(struct bufferevent *bev);

/* Sends data (malloc'd, taken) as the body; counts the request. The reply
 * goes out at once when it fits (write_now), so req may be freed on
 * return. */
static void send_raw(struct surf_http *h, struct evhttp_request *req,
                     int status, const char *ctype, char *data, size_t len,
                     int close, int route, int64_t t0)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", ctype);
    if (close)
        evhttp_add_header(oh, "Connection", "close");
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* the GET's headers, its length, and no body: a keep-alive client
         * reads the next reply where it starts */
        char cl[32];
        snprintf(cl, sizeof(cl), "%zu", data ? len : 0);
        evhttp_remove_header(oh, "Content-Length");
        evhttp_add_header(oh, "Content-Length", cl);
        free(data);
        data = NULL;
        len = 0;
    }
    struct evbuffer *buf = evbuffer_new();
    if (buf && data && len &&
        evbuffer_add_reference(buf, data, len, free_ref, data) == 0)
        data = NULL; /* owned by buf now */
    free(data);
    access_line(h, req, status, len, route, t0);
    h->unsent++;
    conn_sent(h, req);
    evhttp_request_set_on_complete_cb(req, reply_written, h);
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evhttp_send_reply(req, status, NULL, buf); /* the standard phrase */
    if (buf)
        evbuffer_free(buf);
    count(h, route, status, t0);
    if (bev)
        write_now(bev); /* req may be freed from here on */
}

/* Serialises v (canonical, then a newline) into a malloc'd string. */
static char *json_text(const cJSON *v, size_t *len)
{
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (fo_json_canon(v, &b, &err) != FO_OK || fo_buf_putc(&b, '\n')) {
        fo_buf_release(&b);
        return NULL;
    }
    return fo_buf_detach(&b, len);
}

static char *error_text(const struct fo_err *err, size_t *len)
{
    cJSON *o = surf_error_json(err);
    char *t = o ? json_text(o, len) : NULL;
    cJSON_Delete(o);
    return t;
}

static void send_error(struct surf_http *h, struct evhttp_request *req,
                       const struct fo_err *err, int close, int route,
                       int64_t t0)
{
    size_t len = 0;
    char *t = error_text(err, &len);
    send_raw(h, req, surf_code_http(err->code), "application/json", t, len,
             close, route, t0);
}

static void send_errorf(struct surf_http *h, struct evhttp_request *req,
                        int code, const char *msg, int close, int route,
                        int64_t t0)
{
    struct fo_err err;
    fo_err_set(&err, code, "%s", msg);
    send_error(h, req, &err, close, route, t0);
}

/* The result of a method as status + body text (for any thread). */
static void result_text(int rc, const cJSON *out, const struct fo_err *err,
                        int *status, char **body, size_t *len)
{
    if (rc == FO_OK) {
        *body = json_text(out, len);
        *status = 200;
        if (*body)
            return;
        struct fo_err e2;
        fo_err_set(&e2, FO_E_NOMEM, NULL);
        *body = error_text(&e2, len);
        *status = 500;
        return;
    }
    *body = error_text(err, len);
    *status = surf_code_http(rc);
}

/* The drain completes once nothing is in flight and every reply has been
 * written out (or the grace period for slow readers has passed). */
static void drain_check(struct surf_http *h)
{
    if (!h->draining || !h->drained || h->inflight != 0)
        return;
    if (h->unsent == 0) {
        event_active(h->drain_ev, 0, 0);
    } else if (!evtimer_pending(h->drain_timer, NULL)) {
        struct timeval grace = {2, 0};
        evtimer_add(h->drain_timer, &grace);
    }
}

/* A request finished (replied): the drain may complete. */
static void finished(struct surf_http *h)
{
    h->inflight--;
    drain_check(h);
}

/* ---- workers ---------------------------------------------------------- */

static void *worker(void *arg)
{
    struct surf_http *h = arg;
    struct surf_ctx *ctx = NULL;
    struct fo_err err;
    if (h->cfg.ctx_open(h->cfg.hook, &ctx, &err) != FO_OK) {
        logm(h, "worker: cannot open the ledger", err.msg);
        ctx = NULL;
    }
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->work.head && !h->stopping)
            pthread_cond_wait(&h->cv, &h->mu);
        struct job *j = q_pop(&h->work);
        if (!j)
            break;
        pthread_mutex_unlock(&h->mu);
        cJSON *out = NULL;
        int rc = ctx ? surf_call(ctx, j->m, j->in, &out, &err)
                     : fo_err_set(&err, FO_E_IO, "worker has no ledger");
        result_text(rc, out, &err, &j->status, &j->body, &j->body_len);
        cJSON_Delete(out);
        pthread_mutex_lock(&h->mu);
        q_push(&h->done, j);
        event_active(h->done_ev, 0, 0);
    }
    pthread_mutex_unlock(&h->mu);
    if (ctx)
        h->cfg.ctx_close(h->cfg.hook, ctx);
    return NULL;
}

/* Committer thread: an append's transaction ended. The reply is written
 * here, off the loop thread: the served entry directly in its canonical
 * form (ledger_entry_text), or the error; queued for append_flush. */
static void append_done(struct ledger_queued_append *r)
{
    struct job *j = r->arg;
    struct surf_http *h = j->h;
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    if (j->creq.a.rc == FO_OK && fo_buf_reserve(&b, 640) == 0 &&
        ledger_entry_text(&j->creq.a.entry, &b) == 0 &&
        fo_buf_putc(&b, '\n') == 0) {
        j->body = fo_buf_detach(&b, &j->body_len);
        j->status = 200;
    } else {
        fo_buf_release(&b);
        struct fo_err e2;
        const struct fo_err *err = &j->creq.a.err;
        int rc = j->creq.a.rc;
        if (rc == FO_OK) {
            rc = fo_err_set(&e2, FO_E_NOMEM, NULL);
            err = &e2;
        }
        result_text(rc, NULL, err, &j->status, &j->body, &j->body_len);
    }
    q_push(&h->committed, j); /* handed over by append_flush */
}

/* Committer thread: a batch's answers are written; one lock and one wake-up
 * of the loop for all of them. */
static void append_flush(void *arg)
{
    struct surf_http *h = arg;
    if (!h->committed.head)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->done.tail)
        h->done.tail->next = h->committed.head;
    else
        h->done.head = h->committed.head;
    h->done.tail = h->committed.tail;
    event_active(h->done_ev, 0, 0);
    pthread_mutex_unlock(&h->mu);
    h->committed = (struct queue){NULL, NULL};
}

/* Loop thread: answer every finished job. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_http *h = arg;
    pthread_mutex_lock(&h->mu);
    struct queue done = h->done; /* all of them, in one lock */
    h->done = (struct queue){NULL, NULL};
    pthread_mutex_unlock(&h->mu);
    struct job *j;
    while ((j = q_pop(&done)) != NULL) {
        char *body = j->body;
        j->body = NULL;
        send_raw(h, j->req, j->status, "application/json", body, j->body_len, 0,
                 j->route, j->t0);
        job_free(j);
        finished(h);
    }
}

/* Loop thread: a run started on the engine ended (or began, for
 * run_start). */
static void run_reply(void *arg, int rc, cJSON *out, const struct fo_err *err)
{
    struct job *j = arg;
    struct surf_http *h = j->h;
    int status;
    char *body;
    size_t len;
    result_text(rc, out, err, &status, &body, &len);
    cJSON_Delete(out);
    send_raw(h, j->req, status, "application/json", body, len, 0, j->route,
             j->t0);
    job_free(j);
    finished(h);
}

static void on_drained(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct surf_http *h = arg;
    int forced = what == EV_TIMEOUT;
    if (forced && h->cfg.log && h->unsent)
        h->cfg.log(h->cfg.hook,
                   "drain: %ld replies still unwritten after the "
                   "grace period",
                   h->unsent);
    if (h->inflight == 0 && (h->unsent == 0 || forced) && h->drained) {
        void (*cb)(void *) = h->drained;
        h->drained = NULL;
        cb(h->drained_arg);
    }
}

/* ---- metrics ---------------------------------------------------------- */

static const char *route_label(const struct surf_http *h, int route)
{
    return route == ROUTE_METRICS     ? "metrics"
           : route == ROUTE_UNKNOWN   ? "unknown"
           : route == ROUTE_EVENTS    ? "events"
           : route == ROUTE_DASHBOARD ? "dashboard"
           : route == ROUTE_TLOG      ? "tlog"
                                      : h->table[route - ROUTE_EXTRA].name;
}

static int metrics_text(struct surf_http *h, struct fo_buf *b)
{
    int64_t entries = -1;
    struct fo_err err;
    if (h->cfg.loop_ctx && h->cfg.loop_ctx->ledger)
        ledger_count(h->cfg.loop_ctx->ledger, &entries, &err);
    double up = (double)(ledger_now_us() - h->start_us) / 1e6;
    int rc = 0;
    rc |= fo_buf_printf(b,
                        "# HELP forum_build_info The forum that serves.\n"
                        "# TYPE forum_build_info gauge\n"
                        "forum_build_info{version=\"%s\"} 1\n",
                        FO_VERSION);
    rc |= fo_buf_printf(b,
                        "# HELP forum_entries Entries in the ledger.\n"
                        "# TYPE forum_entries gauge\n"
                        "forum_entries %lld\n"
                        "# HELP forum_uptime_seconds Seconds since start.\n"
                        "# TYPE forum_uptime_seconds gauge\n"
                        "forum_uptime_seconds %.3f\n"
                        "# HELP forum_http_inflight Requests in progress.\n"
                        "# TYPE forum_http_inflight gauge\n"
                        "forum_http_inflight %ld\n",
                        (long long)entries, up, h->inflight);
    rc |= fo_buf_printf(
        b,
        "# HELP forum_http_connections Client connections open.\n"
        "# TYPE forum_http_connections gauge\n"
        "forum_http_connections %ld\n"
        "# HELP forum_http_connections_max The most open at once "
        "(max_connections).\n"
        "# TYPE forum_http_connections_max gauge\n"
        "forum_http_connections_max %ld\n"
        "# HELP forum_http_connections_full_total Times accepting stopped "
        "at max_connections.\n"
        "# TYPE forum_http_connections_full_total counter\n"
        "forum_http_connections_full_total %llu\n"
        "# HELP forum_http_accept_errors_total Failed accepts (out of "
        "descriptors or memory), each a pause of %d ms.\n"
        "# TYPE forum_http_accept_errors_total counter\n"
        "forum_http_accept_errors_total %llu\n"
        "# HELP forum_http_request_deadline_total Connections closed "
        "because a request had not arrived whole within the deadline.\n"
        "# TYPE forum_http_request_deadline_total counter\n"
        "forum_http_request_deadline_total %llu\n",
        h->open, h->max_open, h->full_stops, ACCEPT_PAUSE_MS, h->accept_errors,
        h->deadline_closes);
    rc |= fo_buf_printf(b,
                        "# HELP forum_events_streams GET /events streams "
                        "open.\n"
                        "# TYPE forum_events_streams gauge\n"
                        "forum_events_streams %ld\n"
                        "# HELP forum_events_sent_total Events written to "
                        "GET /events streams.\n"
                        "# TYPE forum_events_sent_total counter\n"
                        "forum_events_sent_total %llu\n",
                        h->nstreams, surf_events_sent(h->events));
    if (h->cfg.metrics)
        rc |= h->cfg.metrics(h->cfg.append_hook, b);
    rc |= fo_buf_puts(b, "# HELP forum_http_requests_total Requests answered "
                         "by route and status.\n"
                         "# TYPE forum_http_requests_total counter\n");
    for (size_t r = 0; r < h->nmethods + ROUTE_EXTRA; r++) {
        const char *name = route_label(h, (int)r);
        for (size_t s = 0; s < NSTATUS; s++) {
            unsigned long long n = h->counts[r * NSTATUS + s];
            if (!n)
                continue;
            if (statuses[s])
                rc |= fo_buf_printf(b,
                                    "forum_http_requests_total{route=\"%s\","
                                    "status=\"%d\"} %llu\n",
                                    name, statuses[s], n);
            else
                rc |= fo_buf_printf(b,
                                    "forum_http_requests_total{route=\"%s\","
                                    "status=\"other\"} %llu\n",
                                    name, n);
        }
    }
    rc |= fo_buf_puts(b, "# HELP forum_http_request_duration_seconds Time "
                         "from request to reply.\n"
                         "# TYPE forum_http_request_duration_seconds "
                         "histogram\n");
    unsigned long long cum = 0;
    for (size_t i = 0; i < NLAT; i++) {
        cum += h->lat[i];
        rc |= fo_buf_printf(
            b, "forum_http_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
            lat_bounds[i], cum);
    }
    cum += h->lat[NLAT];
    rc |= fo_buf_printf(
        b,
        "forum_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
        "forum_http_request_duration_seconds_sum %.6f\n"
        "forum_http_request_duration_seconds_count %llu\n",
        cum, h->lat_sum, cum);
    return rc;
}

/* ---- routing ---------------------------------------------------------- */

static int split_path(char *p, char **seg, int max)
{
    int n = 0;
    if (*p != '/')
        return -1;
    p++;
    if (!*p)
        return 0; /* "/" */
    for (;;) {
        if (n == max)
            return -1;
        seg[n++] = p;
        char *s = strchr(p, '/');
        if (!s)
            break;
        *s = '\0';
        p = s + 1;
    }
    return n;
}

/* A method's route, split once at start: literal segments, and the input
 * field each {x} segment binds (NULL for a literal). */
struct route {
    char buf[128];
    char *seg[MAX_SEGMENTS];
    const char *bind[MAX_SEGMENTS];
    int nseg;
};

static int route_compile(struct route *r, const char *pattern)
{
    if (snprintf(r->buf, sizeof(r->buf), "%s", pattern) >= (int)sizeof(r->buf))
        return -1;
    r->nseg = split_path(r->buf, r->seg, MAX_SEGMENTS);
    for (int i = 0; i < r->nseg; i++) {
        size_t l = strlen(r->seg[i]);
        r->bind[i] = NULL;
        if (r->seg[i][0] == '{' && l > 2 && r->seg[i][l - 1] == '}') {
            r->seg[i][l - 1] = '\0';
            r->bind[i] = r->seg[i] + 1;
        }
    }
    return r->nseg < 0 ? -1 : 0;
}

/* Does the route match the path segments? Binds {x} segments into in.
 * Returns 1 on a match, 0 when not, -1 when a bound value is malformed (err
 * set). */
static int match(const struct surf_method *m, const struct route *r, char **seg,
                 int nseg, cJSON *in, struct fo_err *err)
{
    if (r->nseg != nseg)
        return 0;
    for (int i = 0; i < nseg; i++)
        if (!r->bind[i] && strcmp(r->seg[i], seg[i]) != 0)
            return 0;
    for (int i = 0; in && i < nseg; i++) {
        if (!r->bind[i])
            continue;
        if (cJSON_GetObjectItemCaseSensitive(in, r->bind[i])) {
            /* a POST body naming what the path binds */
            fo_err_set(err, FO_E_INVALID,
                       "%s: given by the path; leave it out of the body",
                       r->bind[i]);
            return -1;
        }
        size_t dlen = 0;
        char *dec = evhttp_uridecode(seg[i], 0, &dlen);
        cJSON *v =
            dec && strlen(dec) == dlen
                ? surf_param_value(m, r->bind[i], dec,
                                   strcmp(dec, seg[i]) ? SURF_PARAM_DECODED : 0)
                : NULL;
        free(dec);
        if (!v) {
            fo_err_set(err, FO_E_INVALID, "%s: not a valid value", r->bind[i]);
            return -1;
        }
        cJSON_AddItemToObject(in, r->bind[i], v);
    }
    return 1;
}

/* 1 when the query's raw value for key was percent- or plus-encoded (an
 * integer has one spelling: "from=%31" is not "from=1"). */
static int raw_encoded(const char *query, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = query; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n > kl && !strncmp(p, key, kl) && p[kl] == '=' &&
            (memchr(p + kl + 1, '%', n - kl - 1) ||
             memchr(p + kl + 1, '+', n - kl - 1)))
            return 1;
        p = amp ? amp + 1 : p + n;
    }
    return 0;
}

/* Builds the input object of a GET from the query string. */
static int query_input(const struct surf_method *m, const char *query,
                       cJSON *in, struct fo_err *err)
{
    if (!query || !*query)
        return FO_OK;
    struct evkeyvalq kv;
    kv.tqh_first = NULL;
    kv.tqh_last = &kv.tqh_first;
    if (evhttp_parse_query_str(query, &kv) != 0) {
        evhttp_clear_headers(&kv);
        return fo_err_set(err, FO_E_INVALID, "query: malformed");
    }
    int rc = FO_OK;
    for (struct evkeyval *p = kv.tqh_first; p; p = p->next.tqe_next) {
        if (cJSON_GetObjectItemCaseSensitive(in, p->key)) {
            rc = fo_err_set(err, FO_E_INVALID, "%.64s: given twice", p->key);
            break;
        }
        cJSON *v = surf_param_value(
            m, p->key, p->value,
            raw_encoded(query, p->key) ? SURF_PARAM_DECODED : 0);
        if (!v) {
            rc = fo_err_set(err, FO_E_INVALID, "%.64s: not a valid value",
                            p->key);
            break;
        }
        cJSON_AddItemToObject(in, p->key, v);
    }
    evhttp_clear_headers(&kv);
    return rc;
}

/* Two Content-Length headers that disagree (libevent uses the first). */
static int conflicting_length(struct evhttp_request *req)
{
    const char *first = NULL;
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    for (struct evkeyval *p = ih->tqh_first; p; p = p->next.tqe_next) {
        if (strcasecmp(p->key, "Content-Length") != 0)
            continue;
        if (first && strcmp(first, p->value) != 0)
            return 1;
        first = p->value;
    }
    return 0;
}

static int token_ok(struct surf_http *h, struct evhttp_request *req)
{
    if (!h->cfg.token)
        return 0;
    const char *a = evhttp_find_header(evhttp_request_get_input_headers(req),
                                       "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7) != 0)
        return 0;
    a += 7;
    while (*a == ' ')
        a++;
    size_t la = strlen(a), lt = strlen(h->cfg.token);
    /* Constant time over the token's length whatever was sent. */
    int same = la == lt;
    return CRYPTO_memcmp(same ? a : h->cfg.token, h->cfg.token, lt) == 0 &&
           same;
}

static const char *method_name(enum evhttp_cmd_type c)
{
    switch (c) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_HEAD:
        return "HEAD";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    case EVHTTP_REQ_OPTIONS:
        return "OPTIONS";
    case EVHTTP_REQ_TRACE:
        return "TRACE";
    case EVHTTP_REQ_CONNECT:
        return "CONNECT";
    case EVHTTP_REQ_PATCH:
        return "PATCH";
    }
    return "?";
}

/* ---- connections ------------------------------------------------------ */

/* Every connection is known from accept to close, for what evhttp 2.1 does
 * not do itself:
 * - a cap on how many are open (max_connections): at the cap the listener
 *   is disabled, so further clients wait in the backlog, and it is enabled
 *   again when one closes;
 * - a deadline for each request to arrive whole: timeout_s from its first
 *   byte, however the bytes trickle in (evhttp's timeout is per read, so a
 *   byte a second would hold a connection forever). The connection is then
 *   closed, as evhttp closes one on a read timeout (no 408 in 2.1);
 * - the pin (below).
 * evhttp has no hook for a new connection, but it makes each one's
 * bufferevent through ours (evhttp_set_bevcb), just after accept() and
 * before the connection itself: born() counts the connection there, where
 * disabling the listener still stops its accept loop before the next
 * accept(), and adopt(), at the end of the same turn of the loop, finds
 * the connection as the bufferevent's callback argument (evhttp sets it to
 * the connection) and watches it until evhttp_connection_set_closecb's
 * callback. The reference born() takes keeps the bufferevent readable in
 * adopt() even when evhttp gave up on the connection in between.
 *
 * An accept() that fails for want of descriptors (EMFILE, ENFILE) or memory
 * leaves the client in the backlog, so the listener would fire again on
 * every turn of the loop: 100% CPU, and libevent logs each failure. The
 * listener's error callback pauses accepting for ACCEPT_PAUSE_MS instead
 * and logs once per LOG_EVERY_US; the connections already open are served
 * meanwhile. */

enum { CONN_IDLE, CONN_READING, CONN_BUSY };

/* Pins. evhttp turns reading off while a request is being answered, turns
 * reading and writing on for the reply, and writing off after it: three
 * EPOLL_CTL_MOD calls per request (and a DEL and an ADD when no interest is
 * left). A pin is our own event on the socket, EV_READ|EV_CLOSED|EV_PERSIST:
 * while it holds the read interest, evhttp's read on/off changes nothing in
 * the epoll set, and with write_now (below) neither does the reply.
 *
 * The pin does no reading. It fires with evhttp whenever bytes arrive. If
 * it fires while evhttp is not reading (bytes behind the request being
 * answered: a pipelining client), it would fire again on every turn of the
 * loop (epoll is level-triggered here), so the second such time it turns
 * quiet: a one-shot EV_CLOSED, until the next request re-arms it. When the
 * peer hangs up (EV_CLOSED, also level-triggered) the pin is dropped: evhttp
 * sees the hang-up itself. Made at a connection's first request, freed with
 * the connection. */
enum { PIN_READ, PIN_QUIET, PIN_HUP };

#define HDR_SCAN_MAX 8192 /* header bytes scanned; libevent caps the rest */

struct conn {
    struct surf_http *h;
    struct evhttp_connection *evcon;
    evutil_socket_t fd;
    struct evbuffer *in;            /* the bufferevent's input */
    struct evbuffer_cb_entry *grew; /* input_grew on it */
    struct event *deadline;         /* armed while CONN_READING */
    int state;                      /* CONN_IDLE, CONN_READING, CONN_BUSY */
    struct event *pin;
    int pin_mode; /* PIN_READ, PIN_QUIET or PIN_HUP */
    int pinned;   /* the first request made the pin */
    int fresh;    /* a request was taken since the pin last fired */
    long unsent;  /* its replies handed to libevent, not yet written */
    /* the header block of the request being read, scanned as it arrives
     * for framing that cannot be honoured (hdr_done: its end was seen) */
    char hdr[HDR_SCAN_MAX];
    size_t hdr_len;
    int hdr_done;
    int refused;           /* answered 400 from here: closing */
    struct stream *stream; /* its request is an open GET /events */
};

/* libevent 2.1 calls a listener's error callback with the listener's
 * argument, which evhttp_bind_listener set to the evhttp, and an evhttp
 * has no way back to its owner: this list is that way back (an exception
 * to "no mutable globals", for want of a user pointer). Written by
 * surf_http_create and surf_http_free, read by accept_failed. */
static pthread_mutex_t owners_mu = PTHREAD_MUTEX_INITIALIZER;
static struct surf_http *owners;

/* 1 when a line may be logged now; held gets what to append to it: how
 * many were held back since the last one (or nothing). */
static int ratelog_due(struct ratelog *r, char *held, size_t size)
{
    int64_t now = ledger_mono_us();
    if (r->logged && now - r->last_us < LOG_EVERY_US) {
        r->held++;
        return 0;
    }
    held[0] = '\0';
    if (r->held)
        snprintf(held, size, " (%lu more since the last such line)", r->held);
    r->held = 0;
    r->logged = 1;
    r->last_us = now;
    return 1;
}

/* Accepting is on unless paused after a failed accept() or at the cap (or
 * draining: then there is no listener). */
static void accept_update(struct surf_http *h)
{
    if (!h->listener)
        return;
    int want = !h->paused && h->open < h->max_open;
    if (want == h->accepting)
        return;
    if ((want ? evconnlistener_enable(h->listener)
              : evconnlistener_disable(h->listener)) != 0)
        return; /* tried again at the next change */
    h->accepting = want;
    if (want || h->paused)
        return;
    h->full_stops++;
    char held[64];
    if (h->cfg.log && ratelog_due(&h->full_log, held, sizeof(held)))
        h->cfg.log(h->cfg.hook,
                   "http: %ld connections open, max_connections: not "
                   "accepting until one closes%s",
                   h->open, held);
}

static void accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_http *h = arg;
    h->paused = 0;
    accept_update(h);
}

/* The listener's error callback: accept() failed with other than EAGAIN,
 * EINTR or ECONNABORTED. */
static void accept_failed(struct evconnlistener *lev, void *arg)
{
    int e = EVUTIL_SOCKET_ERROR();
    pthread_mutex_lock(&owners_mu);
    struct surf_http *h = owners;
    while (h && h->http != arg)
        h = h->next_owner;
    pthread_mutex_unlock(&owners_mu);
    if (!h) { /* cannot happen; never spin */
        evconnlistener_disable(lev);
        return;
    }
    h->accept_errors++;
    h->paused = 1;
    accept_update(h);
    struct timeval pause = {0, ACCEPT_PAUSE_MS * 1000};
    evtimer_add(h->pause_ev, &pause);
    char held[64];
    if (h->cfg.log && ratelog_due(&h->error_log, held, sizeof(held)))
        h->cfg.log(h->cfg.hook,
                   "http: accept: %s (%ld connections open); pausing "
                   "accepts for %d ms%s",
                   evutil_socket_error_to_string(e), h->open, ACCEPT_PAUSE_MS,
                   held);
}

/* The connection of evcon, when we watch it. */
static struct conn *conn_find(struct surf_http *h,
                              struct evhttp_connection *evcon)
{
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0 || (size_t)fd >= h->nconns || !h->conns[fd] ||
        h->conns[fd]->evcon != evcon)
        return NULL;
    return h->conns[fd];
}

static int hdr_scan(struct conn *c, struct evbuffer *buf, size_t from);

static void conn_reading(struct conn *c)
{
    c->state = CONN_READING;
    c->hdr_len = 0;
    c->hdr_done = 0;
    evtimer_add(c->deadline, c->h->deadline_tv);
}

/* Two Content-Length values that differ, in the header block so far. */
static int hdr_conflict(const char *h, size_t n)
{
    const char *first = NULL;
    size_t first_len = 0;
    for (size_t i = 0; i < n;) {
        const char *e = memchr(h + i, '\n', n - i);
        size_t ll = e ? (size_t)(e - (h + i)) : n - i;
        if (ll >= 15 && !strncasecmp(h + i, "content-length:", 15)) {
            const char *v = h + i + 15;
            size_t vl = ll - 15;
            while (vl && (*v == ' ' || *v == '\t'))
                v++, vl--;
            while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
                vl--;
            if (first && (vl != first_len || memcmp(v, first, vl)))
                return 1;
            first = v;
            first_len = vl;
        }
        if (!e)
            break;
        i += ll + 1;
    }
    return 0;
}

/* The Content-Length of a header block (the first one): 1 and *out when
 * there is one made of digits. */
static int hdr_length(const char *h, size_t n, unsigned long long *out)
{
    for (size_t i = 0; i < n;) {
        const char *e = memchr(h + i, '\n', n - i);
        size_t ll = e ? (size_t)(e - (h + i)) : n - i;
        if (ll >= 15 && !strncasecmp(h + i, "content-length:", 15)) {
            const char *v = h + i + 15, *end = h + i + ll;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            unsigned long long x = 0;
            int digits = 0;
            for (; v < end && *v >= '0' && *v <= '9' && digits < 19; v++)
                x = x * 10 + (unsigned)(*v - '0'), digits++;
            if (!digits)
                return 0;
            *out = v < end && *v >= '0' && *v <= '9' ? ~0ULL : x;
            return 1;
        }
        if (!e)
            break;
        i += ll + 1;
    }
    return 0;
}

/* Answers 400 (or 413) at once and closes: the body could never be
 * framed (or taken). The reply is small and goes straight to the socket
 * (there is no request object yet to answer through). */
static void hdr_refuse(struct conn *c, int status, const char *body)
{
    char reply[512];
    int n =
        snprintf(reply, sizeof(reply),
                 "HTTP/1.1 %d %s\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\nConnection: "
                 "close\r\n\r\n%s",
                 status, status == 413 ? "Payload Too Large" : "Bad Request",
                 strlen(body), body);
    if (n > 0 && (size_t)n < sizeof(reply))
        (void)!send(c->fd, reply, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    count(c->h, ROUTE_UNKNOWN, status, ledger_now_us());
    /* closed from the loop, not from inside libevent's read; a 413 first
     * lingers a moment, the body that follows read and dropped, so the
     * reply is not lost to a reset while the client still sends */
    c->refused = 1;
    static const struct timeval now = {0, 0}, linger = {1, 0};
    if (status == 413)
        shutdown(c->fd, SHUT_WR);
    evtimer_add(c->deadline, status == 413 ? &linger : &now);
}

/* Scans buf from byte `from` on into the header block; 1 when the
 * connection was refused (it closes on the loop's next turn). */
static int hdr_scan(struct conn *c, struct evbuffer *buf, size_t from)
{
    size_t len = evbuffer_get_length(buf);
    if (c->refused || c->hdr_done || from >= len ||
        c->hdr_len >= sizeof(c->hdr))
        return 0;
    size_t take = len - from;
    if (take > sizeof(c->hdr) - c->hdr_len)
        take = sizeof(c->hdr) - c->hdr_len;
    struct evbuffer_ptr p;
    if (evbuffer_ptr_set(buf, &p, from, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(buf, &p, c->hdr + c->hdr_len, take) < 0)
        return 0;
    size_t old = c->hdr_len;
    c->hdr_len += take;
    /* the block ends at the first blank line (looked for from just before
     * the new bytes, which may complete it) */
    size_t start = old >= 3 ? old - 3 : 0;
    for (size_t i = start; i + 1 < c->hdr_len; i++) {
        if (c->hdr[i] == '\n' &&
            (c->hdr[i + 1] == '\n' ||
             (c->hdr[i + 1] == '\r' && i + 2 < c->hdr_len &&
              c->hdr[i + 2] == '\n'))) {
            c->hdr_done = 1;
            c->hdr_len = i + 1;
            break;
        }
    }
    if (c->hdr_done && hdr_conflict(c->hdr, c->hdr_len)) {
        hdr_refuse(c, 400,
                   "{\"code\":\"invalid_input\",\"error\":\"conflicting "
                   "Content-Length headers\"}\n");
        return 1;
    }
    unsigned long long cl = 0;
    if (c->hdr_done && hdr_length(c->hdr, c->hdr_len, &cl) &&
        cl > c->h->cfg.body_max) {
        /* answered now, not after the body (or a stalled client's idle
         * timeout): it could never be taken */
        char body[160];
        snprintf(body, sizeof(body),
                 "{\"code\":\"body_too_large\",\"error\":\"Content-Length "
                 "%llu over the server's %zu-byte cap\"}\n",
                 cl, c->h->cfg.body_max);
        hdr_refuse(c, 413, body);
        return 1;
    }
    return 0;
}

/* The first bytes of a request start its deadline; its header block is
 * checked as it arrives. */
static void input_grew(struct evbuffer *buf,
                       const struct evbuffer_cb_info *info, void *arg)
{
    struct conn *c = arg;
    if (!info->n_added)
        return;
    size_t len = evbuffer_get_length(buf);
    if (c->state == CONN_IDLE) {
        conn_reading(c);
        hdr_scan(c, buf, 0); /* what is there is this request's start */
    } else if (c->state == CONN_READING) {
        hdr_scan(c, buf, len - info->n_added);
    }
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    if (!c->refused)
        c->h->deadline_closes++;
    evhttp_connection_free(c->evcon); /* conn_closed frees c */
}

/* Stops watching c (its connection is going). */
static void conn_forget(struct conn *c)
{
    struct surf_http *h = c->h;
    if (c->pin)
        event_free(c->pin);
    event_free(c->deadline);
    h->conns[c->fd] = NULL;
    free(c);
    h->open--;
    accept_update(h);
}

static void conn_drop(struct conn *c)
{
    evbuffer_remove_cb_entry(c->in, c->grew); /* the buffer outlives us */
    conn_forget(c);
}

/* ---- the event stream: GET /events ----------------------------------- */

/* An open GET /events: a chunked reply that goes on until the client
 * leaves, the stream cannot go on, or the daemon drains. The request
 * stays in flight meanwhile (the drain ends the streams first). */
struct stream {
    struct surf_http *h;
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct surf_events_sub *sub;
    struct evbuffer *tmp;
    struct stream *prev, *next;
};

static size_t stream_pending(void *arg);

/* The allocator keeps what a closed stream's buffers freed (up to
 * SURF_EVENTS_HIGH and more a stalled stream, in many small chains) in its
 * free lists, where it counts in the daemon's resident set for good:
 * malloc_trim hands the free pages back. It runs on a timer, after the
 * connection (whose buffers are freed once its close callback returns),
 * once for many streams closed together. */
static void trim_memory(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

static void stream_unlink(struct stream *st)
{
    struct surf_http *h = st->h;
    if (h->trim_ev && stream_pending(st) >= SURF_EVENTS_HIGH / 4 &&
        !evtimer_pending(h->trim_ev, NULL)) {
        struct timeval soon = {0, 100 * 1000};
        evtimer_add(h->trim_ev, &soon);
    }
    if (st->prev)
        st->prev->next = st->next;
    else
        h->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    h->nstreams--;
    surf_events_unsubscribe(h->events, st->sub);
    evbuffer_free(st->tmp);
    free(st);
    finished(h);
}

static void stream_sent(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    struct stream *st = arg;
    surf_events_writable(st->h->events, st->sub);
}

static int stream_write(void *arg, const char *data, size_t len)
{
    struct stream *st = arg;
    if (evbuffer_add(st->tmp, data, len) != 0)
        return -1;
    evhttp_send_reply_chunk_with_cb(st->req, st->tmp, stream_sent, st);
    return 0;
}

static size_t stream_pending(void *arg)
{
    struct stream *st = arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(st->evcon);
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* Ends the reply (the connection then closes: Connection: close). */
static void stream_end(void *arg)
{
    struct stream *st = arg;
    struct conn *c = conn_find(st->h, st->evcon);
    if (c)
        c->stream = NULL;
    evhttp_send_reply_end(st->req);
    stream_unlink(st);
}

/* The connection is going (conn_closed). When evhttp detached the request
 * from it (the peer hung up mid-reply), the request is ours to free;
 * otherwise the connection frees it. */
static void stream_lost(struct stream *st)
{
    if (!evhttp_request_get_connection(st->req))
        evhttp_send_reply_end(st->req); /* frees a detached request */
    stream_unlink(st);
}

/* GET /events, past the auth check: 1 when the stream was opened (the
 * request is in flight until stream_unlink), 0 when it was answered with
 * an error. */
static int stream_open(struct surf_http *h, struct evhttp_request *req,
                       const char *verb, int64_t t0)
{
    struct fo_err err;
    if (strcmp(verb, "GET") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET");
        send_errorf(h, req, FO_E_METHOD, "/events: use GET", 0, ROUTE_EVENTS,
                    t0);
        return 0;
    }
    struct conn *c = conn_find(h, evhttp_request_get_connection(req));
    if (!h->events || !c) {
        send_errorf(h, req, FO_E_UNAVAILABLE,
                    "the event stream is not available here", 0, ROUTE_EVENTS,
                    t0);
        return 0;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *last = evhttp_find_header(evhttp_request_get_input_headers(req),
                                          "Last-Event-ID");
    struct surf_events_filter f;
    if (surf_events_filter_parse(h->events,
                                 uri ? evhttp_uri_get_query(uri) : NULL, last,
                                 &f, &err) != FO_OK) {
        send_error(h, req, &err, 0, ROUTE_EVENTS, t0);
        return 0;
    }
    struct stream *st = calloc(1, sizeof(*st));
    if (st)
        st->tmp = evbuffer_new();
    if (!st || !st->tmp) {
        free(st);
        send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, ROUTE_EVENTS, t0);
        return 0;
    }
    st->h = h;
    st->req = req;
    st->evcon = evhttp_request_get_connection(req);
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", "text/event-stream");
    evhttp_add_header(oh, "Cache-Control", "no-store");
    evhttp_add_header(oh, "X-Accel-Buffering", "no");
    evhttp_add_header(oh, "Connection", "close");
    evhttp_send_reply_start(req, 200, "OK");
    count(h, ROUTE_EVENTS, 200, t0);
    access_line(h, req, 200, 0, ROUTE_EVENTS, t0);
    /* Quiet is the stream's normal state: no read timeout. A client that
     * stops reading is still dropped timeout_s after its output stalls. */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(st->evcon);
    if (bev)
        bufferevent_set_timeouts(bev, NULL, &h->deadline_plain);
    st->next = h->streams;
    if (h->streams)
        h->streams->prev = st;
    h->streams = st;
    h->nstreams++;
    c->stream = st;
    static const struct surf_events_sink sink = {stream_write, stream_pending,
                                                 stream_end};
    st->sub = surf_events_subscribe(h->events, &f, &sink, st, &err);
    if (!st->sub) {
        char msg[300];
        int n = snprintf(msg, sizeof(msg),
                         "event: error\ndata: {\"error\":\"cannot start the "
                         "stream\"}\n\n");
        if (n > 0)
            stream_write(st, msg, (size_t)n);
        stream_end(st);
    }
    return 1;
}

static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
    struct surf_http *h = arg;
    struct conn *c = conn_find(h, evcon);
    if (!c)
        return;
    /* replies the client went away before reading are never written (and
     * never reported written): they are no longer waited for */
    long lost = c->unsent;
    struct stream *st = c->stream;
    conn_drop(c);
    if (st)
        stream_lost(st);
    if (lost) {
        h->unsent -= lost;
        drain_check(h);
    }
}

static int conn_add(struct surf_http *h, struct evhttp_connection *evcon,
                    struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0 || fd > SURF_HTTP_CONNECTIONS_MAX)
        return -1;
    if ((size_t)fd >= h->nconns) {
        size_t n = h->nconns ? h->nconns : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct conn **p = realloc(h->conns, n * sizeof(*p));
        if (!p)
            return -1;
        memset(p + h->nconns, 0, (n - h->nconns) * sizeof(*p));
        h->conns = p;
        h->nconns = n;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    *c = (struct conn){.h = h,
                       .evcon = evcon,
                       .fd = fd,
                       .in = bufferevent_get_input(bev),
                       .pin_mode = PIN_HUP};
    c->deadline = evtimer_new(h->base, deadline_passed, c);
    c->grew = c->deadline ? evbuffer_add_cb(c->in, input_grew, c) : NULL;
    if (!c->grew) {
        if (c->deadline)
            event_free(c->deadline);
        free(c);
        return -1;
    }
    if (h->conns[fd]) /* gone unseen (no close callback): cannot happen */
        conn_forget(h->conns[fd]);
    h->conns[fd] = c;
    evhttp_connection_set_closecb(evcon, conn_closed, h);
    if (evbuffer_get_length(c->in))
        conn_reading(c);
    return 0;
}

/* evhttp's bufferevent maker (evhttp_set_bevcb), called just after
 * accept(). */
static struct bufferevent *born(struct event_base *base, void *arg)
{
    struct surf_http *h = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    if (!bev)
        return NULL; /* evhttp makes its own: a connection not watched */
    if (h->nborn == h->born_cap) {
        size_t n = h->born_cap ? 2 * h->born_cap : 16;
        struct bufferevent **p = realloc(h->born, n * sizeof(*p));
        if (!p)
            return bev; /* not watched */
        h->born = p;
        h->born_cap = n;
    }
    bufferevent_incref(bev);
    h->born[h->nborn++] = bev;
    h->open++;
    event_active(h->adopt_ev, 0, 0);
    accept_update(h); /* at the cap: no more accept() this turn */
    return bev;
}

static void adopt(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct surf_http *h = arg;
    for (size_t i = 0; i < h->nborn; i++) {
        struct bufferevent *bev = h->born[i];
        void *evcon = NULL;
        bufferevent_getcb(bev, NULL, NULL, NULL, &evcon);
        /* NULL: evhttp freed it already */
        if (!evcon || conn_add(h, evcon, bev) != 0)
            h->open--;
        bufferevent_decref(bev);
    }
    h->nborn = 0;
    accept_update(h);
}

static void pin_fired(evutil_socket_t fd, short what, void *arg);

static void pin_set(struct conn *c, int mode)
{
    if (c->pin)
        event_free(c->pin);
    c->pin = NULL;
    c->pin_mode = PIN_HUP;
    if (mode == PIN_HUP)
        return;
    short what =
        mode == PIN_READ ? EV_READ | EV_CLOSED | EV_PERSIST : EV_CLOSED;
    c->pin = event_new(c->h->base, c->fd, what, pin_fired, c);
    if (!c->pin || event_add(c->pin, NULL) != 0) {
        if (c->pin)
            event_free(c->pin);
        c->pin = NULL;
        return;
    }
    c->pin_mode = mode;
}

static void pin_fired(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct conn *c = arg;
    if (what & EV_CLOSED) {
        pin_set(c, PIN_HUP);
        if (c->stream) /* nothing will be read: the peer left the stream */
            evhttp_connection_free(c->evcon); /* conn_closed ends it */
        return;
    }
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    if (c->pin_mode != PIN_READ ||
        (bev && (bufferevent_get_enabled(bev) & EV_READ)))
        return; /* evhttp reads them */
    if (c->fresh) {
        c->fresh = 0; /* most likely the request evhttp has just read */
        return;
    }
    pin_set(c, PIN_QUIET);
}

/* A request has arrived whole (handle): its deadline is met; the pin is
 * made, or woken. Best effort: a connection not watched works as before. */
static void conn_request(struct surf_http *h, struct evhttp_request *req)
{
    struct conn *c = conn_find(h, evhttp_request_get_connection(req));
    if (!c)
        return;
    c->state = CONN_BUSY;
    evtimer_del(c->deadline);
    if (!h->pins_on)
        return;
    if (!c->pinned) {
        pin_set(c, PIN_READ);
        c->pinned = c->pin != NULL;
    } else if (c->pin_mode == PIN_QUIET) {
        pin_set(c, PIN_READ);
    }
    c->fresh = 1;
}

/* A reply was handed to libevent on req's connection. */
static void conn_sent(struct surf_http *h, struct evhttp_request *req)
{
    struct conn *c = conn_find(h, evhttp_request_get_connection(req));
    if (c)
        c->unsent++;
}

/* Its reply is written: the next request's deadline starts with its first
 * byte, which may be here already (pipelined). */
static void conn_replied(struct surf_http *h, struct evhttp_request *req)
{
    struct conn *c = conn_find(h, evhttp_request_get_connection(req));
    if (!c)
        return;
    if (c->unsent > 0)
        c->unsent--;
    c->state = CONN_IDLE;
    if (evbuffer_get_length(c->in)) {
        conn_reading(c);
        hdr_scan(c, c->in, 0); /* a pipelined request, already here */
    }
}

/* A reply evhttp has queued, written at once instead of on the loop's next
 * turn: saves that turn and the two epoll changes that turn write interest
 * on and off. Only when all of it fits in the socket; otherwise (or on an
 * error) the bufferevent carries on as usual. Then what the bufferevent
 * would do after its own write: drop write interest, call evhttp's write
 * callback (which finishes the request, and may free the connection). */
static void write_now(struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    struct evbuffer *out = bufferevent_get_output(bev);
    if (fd < 0 || !(bufferevent_get_enabled(bev) & EV_WRITE) ||
        evbuffer_get_length(out) == 0)
        return;
    evbuffer_unfreeze(out, 1); /* as bufferevent_sock.c does around writes */
    int n = evbuffer_write(out, fd);
    evbuffer_freeze(out, 1);
    if (n <= 0 || evbuffer_get_length(out) != 0)
        return;
    bufferevent_disable(bev, EV_WRITE);
    bufferevent_trigger(bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
}

/* A credential in the query string (token=, access_token=): refused on
 * every route, before anything else looks at the request, so a token
 * pasted into a URL is never honoured (and never written anywhere). */
static int query_has_token(const char *q)
{
    for (const char *p = q; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if ((n >= 6 && !strncasecmp(p, "token=", 6)) ||
            (n == 5 && !strncasecmp(p, "token", 5)) ||
            (n >= 13 && !strncasecmp(p, "access_token=", 13)))
            return 1;
        p = amp ? amp + 1 : p + n;
    }
    return 0;
}

/* ---- the dashboard: GET / and its assets -------------------------------- */

extern const char surf_dash_html[], surf_dash_js[], surf_dash_css[],
    surf_dash_chart[];
extern const size_t surf_dash_html_len, surf_dash_js_len, surf_dash_css_len,
    surf_dash_chart_len;

/* The page and its assets need no token: they hold no data. Every call the
 * page makes carries the token it keeps in the browser's session storage.
 * 1 when path was one of them (answered). */
static int dashboard(struct surf_http *h, struct evhttp_request *req,
                     const char *path, const char *verb, int64_t t0)
{
    const char *data = NULL, *ctype = NULL;
    size_t len = 0;
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
        data = surf_dash_html;
        len = surf_dash_html_len;
        ctype = "text/html; charset=utf-8";
    } else if (!strcmp(path, "/assets/app.js")) {
        data = surf_dash_js;
        len = surf_dash_js_len;
        ctype = "text/javascript; charset=utf-8";
    } else if (!strcmp(path, "/assets/chart.js")) {
        data = surf_dash_chart;
        len = surf_dash_chart_len;
        ctype = "text/javascript; charset=utf-8";
    } else if (!strcmp(path, "/assets/app.css")) {
        data = surf_dash_css;
        len = surf_dash_css_len;
        ctype = "text/css; charset=utf-8";
    } else {
        return 0;
    }
    if (strcmp(verb, "GET") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET");
        send_errorf(h, req, FO_E_METHOD, "the dashboard: use GET", 0,
                    ROUTE_DASHBOARD, t0);
        return 1;
    }
    char *copy = malloc(len ? len : 1);
    if (!copy) {
        send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, ROUTE_DASHBOARD,
                    t0);
        return 1;
    }
    memcpy(copy, data, len);
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    /* everything from this origin, nothing inline, never framed */
    evhttp_add_header(oh, "Content-Security-Policy",
                      "default-src 'none'; script-src 'self'; style-src "
                      "'self'; connect-src 'self'; img-src 'self' data:; "
                      "base-uri 'none'; form-action 'none'; frame-ancestors "
                      "'none'");
    evhttp_add_header(oh, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(oh, "Referrer-Policy", "no-referrer");
    evhttp_add_header(oh, "Cache-Control", "no-cache");
    send_raw(h, req, 200, ctype, copy, len, 0, ROUTE_DASHBOARD, t0);
    return 1;
}

/* Host and Origin (http_guard.h), on every route, with or without a
 * token: 1 when the request may go on, else it was answered. */
static int guard_hosts(struct surf_http *h, struct evhttp_request *req,
                       int64_t t0)
{
    struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
    const char *host = NULL, *origin = NULL;
    int n_host = 0;
    for (struct evkeyval *p = ih->tqh_first; p; p = p->next.tqe_next) {
        if (!strcasecmp(p->key, "Host")) {
            host = p->value;
            n_host++;
        } else if (!strcasecmp(p->key, "Origin") && !origin) {
            origin = p->value;
        }
    }
    struct surf_http_hosts hs = {.listen = h->cfg.host,
                                 .port = h->port,
                                 .names = h->cfg.allowed_hosts,
                                 .n_names = h->cfg.n_allowed_hosts};
    struct fo_err err;
    if (surf_http_guard_hosts(&hs, host, n_host, origin, &err) == FO_OK)
        return 1;
    send_error(h, req, &err, 0, ROUTE_UNKNOWN, t0);
    return 0;
}

static void handle(struct evhttp_request *req, void *arg)
{
    struct surf_http *h = arg;
    int64_t t0 = ledger_now_us();
    struct conn *rc0 = conn_find(h, evhttp_request_get_connection(req));
    if (rc0 && rc0->refused)
        return; /* answered 400 as its headers came; closing */
    h->inflight++;
    conn_request(h, req);
    struct fo_err err;
    cJSON *in = NULL;
    char path[1024];
    if (conflicting_length(req)) {
        send_errorf(h, req, FO_E_INVALID, "conflicting Content-Length headers",
                    1, ROUTE_UNKNOWN, t0);
        goto done;
    }
    if (h->draining) {
        send_errorf(h, req, FO_E_DRAINING, "the daemon is shutting down", 1,
                    ROUTE_UNKNOWN, t0);
        goto done;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *upath = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!upath || !*upath)
        upath = "/";
    size_t plen = strlen(upath);
    if (plen >= sizeof(path)) {
        send_errorf(h, req, FO_E_NOT_FOUND, "no such route", 0, ROUTE_UNKNOWN,
                    t0);
        goto done;
    }
    memcpy(path, upath, plen + 1);
    const char *verb = method_name(evhttp_request_get_command(req));
    /* HEAD is a GET whose body is not sent (send_raw) */
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
        verb = "GET";
    if (query_has_token(uri ? evhttp_uri_get_query(uri) : NULL)) {
        send_errorf(h, req, FO_E_INVALID,
                    "a token in the query string is refused: send it as "
                    "Authorization: Bearer <token>",
                    0, ROUTE_UNKNOWN, t0);
        goto done;
    }
    if (!guard_hosts(h, req, t0))
        goto done;
    if (dashboard(h, req, path, verb, t0))
        goto done;
    if (h->cfg.extra && h->cfg.extra(h->cfg.extra_hook, h, req, path, verb,
                                     h->cfg.no_auth || token_ok(h, req), t0))
        return; /* answered, now or later, by surf_http_reply */
    int is_health = strcmp(path, "/health") == 0;
    int open_metrics = h->cfg.metrics_public && strcmp(path, "/metrics") == 0;
    if (!is_health && !open_metrics && !h->cfg.no_auth && !token_ok(h, req)) {
        send_errorf(h, req, FO_E_UNAUTHORIZED,
                    "missing or wrong bearer token (Authorization: Bearer "
                    "<DIR/token>)",
                    0, ROUTE_UNKNOWN, t0);
        goto done;
    }
    if (strcmp(path, "/events") == 0) {
        if (!stream_open(h, req, verb, t0))
            goto done; /* answered with an error */
        return;        /* in flight until the stream ends */
    }
    if (strcmp(path, "/metrics") == 0) {
        if (strcmp(verb, "GET") != 0) {
            send_errorf(h, req, FO_E_METHOD, "/metrics: use GET", 0,
                        ROUTE_METRICS, t0);
            goto done;
        }
        struct fo_buf b;
        fo_buf_init(&b, FO_BUF_UNLIMITED);
        if (metrics_text(h, &b) != 0) {
            fo_buf_release(&b);
            send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, ROUTE_METRICS,
                        t0);
            goto done;
        }
        size_t len = 0;
        char *t = fo_buf_detach(&b, &len);
        send_raw(h, req, 200, "text/plain; version=0.0.4", t, len, 0,
                 ROUTE_METRICS, t0);
        goto done;
    }
    char *seg[MAX_SEGMENTS];
    int nseg = split_path(path, seg, MAX_SEGMENTS);
    const struct surf_method *m = NULL;
    const char *allow = NULL;
    for (size_t i = 0; nseg >= 0 && i < h->nmethods; i++) {
        if (match(&h->table[i], &h->routes[i], seg, nseg, NULL, NULL) != 1)
            continue;
        if (strcmp(h->table[i].http_method, verb) == 0) {
            m = &h->table[i];
            break;
        }
        allow = h->table[i].http_method;
    }
    if (!m) {
        if (allow) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                              allow);
            char msg[160];
            snprintf(msg, sizeof(msg), "%s: use %s, not %s", upath, allow,
                     verb);
            send_errorf(h, req, FO_E_METHOD, msg, 0, ROUTE_UNKNOWN, t0);
        } else {
            send_errorf(h, req, FO_E_NOT_FOUND, "no such route", 0,
                        ROUTE_UNKNOWN, t0);
        }
        goto done;
    }
    int route = (int)(m - h->table) + ROUTE_EXTRA;
    if ((m->flags & SURF_ADMIN) && !token_ok(h, req)) {
        send_errorf(h, req, FO_E_UNAUTHORIZED,
                    "an admin method: the bearer token is required", 0, route,
                    t0);
        goto done;
    }
    if (strcmp(verb, "GET") != 0 &&
        surf_http_guard_ctype(
            evhttp_find_header(evhttp_request_get_input_headers(req),
                               "Content-Type"),
            &err) != FO_OK) {
        send_error(h, req, &err, 0, route, t0);
        goto done;
    }
    /* The input object: path bindings, query (GET) or body (POST). */
    struct evbuffer *ib = evhttp_request_get_input_buffer(req);
    size_t blen = evbuffer_get_length(ib);
    if (blen > m->max_input) {
        char msg[128];
        snprintf(msg, sizeof(msg), "request body over %zu bytes for %s",
                 m->max_input, m->name);
        send_errorf(h, req, FO_E_INPUT_TOO_LARGE, msg, 0, route, t0);
        goto done;
    }
    if (strcmp(verb, "POST") == 0 && blen > 0) {
        const char *data = (const char *)evbuffer_pullup(ib, -1);
        if (!data || fo_json_parse(data, blen, &in, &err) != FO_OK) {
            if (!data)
                fo_err_set(&err, FO_E_NOMEM, NULL);
            send_error(h, req, &err, 0, route, t0);
            goto done;
        }
        if (!cJSON_IsObject(in)) {
            send_errorf(h, req, FO_E_INVALID,
                        "input: the body must be a JSON object", 0, route, t0);
            goto done;
        }
    } else {
        in = cJSON_CreateObject();
        if (!in) {
            send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, route, t0);
            goto done;
        }
        if (strcmp(verb, "GET") == 0 &&
            query_input(m, evhttp_uri_get_query(uri), in, &err) != FO_OK) {
            send_error(h, req, &err, 0, route, t0);
            goto done;
        }
    }
    if (match(m, &h->routes[m - h->table], seg, nseg, in, &err) < 0) {
        send_error(h, req, &err, 0, route, t0);
        goto done;
    }
    if (m->where == SURF_ON_RUN && h->cfg.loop_ctx->engine) {
        /* The run engine: parked, holding no thread, answered at its end */
        struct job *j = job_new(h, req, m, route, t0, in);
        if (!j) {
            send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, route, t0);
            goto done;
        }
        if (surf_start(h->cfg.loop_ctx, m, in, run_reply, j, &err) != FO_OK) {
            j->in = NULL;
            job_free(j);
            send_error(h, req, &err, 0, route, t0);
            goto done;
        }
        return; /* answered by run_reply */
    }
    if (m->where == SURF_ON_COMMIT && h->cfg.append_submit) {
        /* The group commit: validate and canonicalise here, answer when
         * the committer has made it durable. */
        if (surf_validate(m, in, &err) != FO_OK) {
            send_error(h, req, &err, 0, route, t0);
            goto done;
        }
        struct job *j = calloc(1, sizeof(*j));
        if (!j) {
            send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, route, t0);
            goto done;
        }
        *j = (struct job){.h = h, .req = req, .m = m, .route = route, .t0 = t0};
        if (surf_append_prepare(h->cfg.loop_ctx, in, &j->creq.a, &j->cbody,
                                &err) != FO_OK) {
            free(j);
            send_error(h, req, &err, 0, route, t0);
            goto done;
        }
        j->creq.done = append_done;
        j->creq.arg = j;
        j->creq.flush = append_flush;
        j->creq.flush_arg = h;
        if (h->cfg.append_submit(h->cfg.append_hook, &j->creq, &err) != FO_OK) {
            job_free(j);
            send_error(h, req, &err, 1, route, t0);
            goto done;
        }
        j->in = in; /* actor and kind point into it until the reply */
        return;     /* answered by on_done */
    }
    if (m->where == SURF_ON_LOOP && h->loop_reads) {
        cJSON *out = NULL;
        int rc = surf_call(h->cfg.loop_ctx, m, in, &out, &err);
        int status;
        char *body;
        size_t len;
        result_text(rc, out, &err, &status, &body, &len);
        cJSON_Delete(out);
        send_raw(h, req, status, "application/json", body, len, 0, route, t0);
        goto done;
    }
    struct job *j = job_new(h, req, m, route, t0, in);
    if (!j) {
        send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, route, t0);
        goto done;
    }
    pthread_mutex_lock(&h->mu);
    q_push(&h->work, j);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return; /* answered by on_done */
done:
    cJSON_Delete(in);
    finished(h);
}

void surf_http_reply(struct surf_http *h, struct evhttp_request *req,
                     int status, const char *ctype, char *body, size_t len,
                     int64_t t0)
{
    send_raw(h, req, status, ctype, body, len, 0, ROUTE_TLOG, t0);
    finished(h);
}

void surf_http_reply_error(struct surf_http *h, struct evhttp_request *req,
                           int code, const char *msg, int64_t t0)
{
    send_errorf(h, req, code, msg, 0, ROUTE_TLOG, t0);
    finished(h);
}

/* ---- lifecycle -------------------------------------------------------- */

int surf_http_create(struct event_base *base,
                     const struct surf_http_config *cfg, struct surf_http **out,
                     struct fo_err *err)
{
    struct surf_http *h = calloc(1, sizeof(*h));
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = FO_E_NOMEM;
    h->cfg = *cfg;
    if (!h->cfg.host)
        h->cfg.host = "127.0.0.1";
    if (!h->cfg.body_max)
        h->cfg.body_max = BODY_MAX_DEFAULT;
    if (!h->cfg.header_max)
        h->cfg.header_max = HEADER_MAX_DEFAULT;
    if (h->cfg.timeout_s <= 0)
        h->cfg.timeout_s = TIMEOUT_DEFAULT_S;
    if (h->cfg.workers <= 0)
        h->cfg.workers = WORKERS_DEFAULT;
    h->base = base;
    h->start_us = ledger_now_us();
    h->table = surf_methods(&h->nmethods);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->routes = calloc(h->nmethods, sizeof(*h->routes));
    if (!h->routes) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    for (size_t i = 0; i < h->nmethods; i++) {
        if (route_compile(&h->routes[i], h->table[i].http_path) != 0) {
            rc = fo_err_set(err, FO_E_INTERNAL, "method %s: bad route %s",
                            h->table[i].name, h->table[i].http_path);
            goto fail;
        }
    }
    h->counts =
        calloc((h->nmethods + ROUTE_EXTRA) * NSTATUS, sizeof(*h->counts));
    h->threads = calloc((size_t)h->cfg.workers, sizeof(*h->threads));
    h->done_ev = event_new(base, -1, 0, on_done, h);
    h->drain_ev = event_new(base, -1, 0, on_drained, h);
    h->drain_timer = evtimer_new(base, on_drained, h);
    h->adopt_ev = event_new(base, -1, 0, adopt, h);
    h->pause_ev = evtimer_new(base, accept_resume, h);
    h->trim_ev = evtimer_new(base, trim_memory, h);
    h->http = evhttp_new(base);
    if (!h->counts || !h->threads || !h->done_ev || !h->drain_ev ||
        !h->drain_timer || !h->adopt_ev || !h->pause_ev || !h->trim_ev ||
        !h->http) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
    h->pins_on = (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE) != 0;
    h->deadline_plain = (struct timeval){h->cfg.timeout_s, 0};
    h->deadline_tv = event_base_init_common_timeout(base, &h->deadline_plain);
    if (!h->deadline_tv)
        h->deadline_tv = &h->deadline_plain;
    long long fd_limit = -1;
    h->max_open = surf_http_connections_default(&fd_limit);
    if (h->cfg.max_connections > 0) {
        h->max_open = h->cfg.max_connections;
        if (fd_limit >= 0 && h->max_open > fd_limit - FD_RESERVE && h->cfg.log)
            h->cfg.log(h->cfg.hook,
                       "http: max_connections %ld leaves fewer than %d of "
                       "the %lld descriptors allowed (RLIMIT_NOFILE) to the "
                       "rest of the daemon; when they run out, accepts "
                       "pause",
                       h->max_open, FD_RESERVE, fd_limit);
    }
    evhttp_set_bevcb(h->http, born, h);
    evhttp_set_max_body_size(h->http, (ev_ssize_t)h->cfg.body_max);
    evhttp_set_max_headers_size(h->http, (ev_ssize_t)h->cfg.header_max);
    evhttp_set_timeout(h->http, h->cfg.timeout_s);
    /* Every method reaches us, so a wrong one is our 405, not a 501. */
    evhttp_set_allowed_methods(
        h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                     EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                     EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    /* An early 413 must not reach the client as a reset. */
    evhttp_set_flags(h->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_gencb(h->http, handle, h);
    h->bound = evhttp_bind_socket_with_handle(h->http, h->cfg.host,
                                              (ev_uint16_t)h->cfg.port);
    if (!h->bound) {
        rc = fo_err_set(err, FO_E_IO, "cannot listen on %s:%d: %s", h->cfg.host,
                        h->cfg.port, strerror(errno));
        goto fail;
    }
    h->listener = evhttp_bound_socket_get_listener(h->bound);
    h->accepting = 1; /* evhttp_bind_listener enabled it */
    evconnlistener_set_error_cb(h->listener, accept_failed);
    pthread_mutex_lock(&owners_mu);
    h->next_owner = owners;
    owners = h;
    pthread_mutex_unlock(&owners_mu);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(evhttp_bound_socket_get_fd(h->bound),
                    (struct sockaddr *)&ss, &sl) != 0) {
        rc = fo_err_set(err, FO_E_IO, "getsockname: %s", strerror(errno));
        goto fail;
    }
    if (ss.ss_family == AF_INET)
        h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    for (int i = 0; i < h->cfg.workers; i++) {
        if (pthread_create(&h->threads[i], NULL, worker, h) != 0) {
            rc = fo_err_set(err, FO_E_INTERNAL, "cannot start a worker");
            goto fail;
        }
        h->nthreads++;
    }
    h->loop_reads =
        !h->cfg.loop_ctx || !h->cfg.loop_ctx->ledger ||
        !strcmp(ledger_store_name(h->cfg.loop_ctx->ledger), "sqlite");
    fo_buf_init(&h->alog, FO_BUF_UNLIMITED);
    if (h->cfg.access_on) {
        struct timeval one = {1, 0};
        h->alog_ev = event_new(base, -1, EV_PERSIST, alog_tick, h);
        if (!h->alog_ev || event_add(h->alog_ev, &one) != 0) {
            rc = fo_err_set(err, FO_E_NOMEM, NULL);
            goto fail;
        }
    }
    if (h->cfg.loop_ctx && h->cfg.loop_ctx->ledger &&
        surf_events_create(base, h->cfg.loop_ctx->ledger, h->cfg.keepalive_s,
                           &h->events, err) != FO_OK) {
        rc = err->code;
        goto fail;
    }
    *out = h;
    return FO_OK;
fail:
    surf_http_free(h);
    return rc;
}

int surf_http_port(const struct surf_http *h)
{
    return h->port;
}

unsigned long long surf_http_requests(const struct surf_http *h)
{
    return h->requests;
}

long surf_http_connections_default(long long *fd_limit)
{
    struct rlimit rl;
    long long lim = -1;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        lim = (long long)rl.rlim_cur;
    if (fd_limit)
        *fd_limit = lim;
    if (lim < 0 || lim - FD_RESERVE > CONNECTIONS_CEIL)
        return CONNECTIONS_CEIL;
    if (lim - FD_RESERVE < CONNECTIONS_FLOOR)
        return CONNECTIONS_FLOOR;
    return (long)(lim - FD_RESERVE);
}

long surf_http_max_connections(const struct surf_http *h)
{
    return h->max_open;
}

void surf_http_drain(struct surf_http *h, void (*done)(void *arg), void *arg)
{
    if (!h->draining && h->bound) {
        evhttp_del_accept_socket(h->http, h->bound);
        h->bound = NULL;
        h->listener = NULL; /* freed with it */
        evtimer_del(h->pause_ev);
    }
    h->draining = 1;
    h->drained = done;
    h->drained_arg = arg;
    /* the streams end now (a client reconnects elsewhere, or later, with
     * its Last-Event-ID) */
    while (h->streams)
        stream_end(h->streams);
    drain_check(h);
}

void surf_http_notify(struct surf_http *h)
{
    if (h)
        surf_events_notify(h->events);
}

long surf_http_streams(const struct surf_http *h)
{
    return h->nstreams;
}

void surf_http_free(struct surf_http *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < h->nthreads; i++)
        pthread_join(h->threads[i], NULL);
    /* Jobs never answered (free without a drain): drop them. */
    struct job *j;
    while ((j = q_pop(&h->work)) != NULL)
        job_free(j);
    while ((j = q_pop(&h->done)) != NULL)
        job_free(j);
    pthread_mutex_lock(&owners_mu);
    struct surf_http **o = &owners;
    while (*o && *o != h)
        o = &(*o)->next_owner;
    if (*o)
        *o = h->next_owner;
    pthread_mutex_unlock(&owners_mu);
    /* evhttp_free frees the listener first, then each connection (our
     * conn_closed runs for each) */
    h->listener = NULL;
    if (h->http)
        evhttp_free(h->http);
    while (h->streams) { /* none: each went with its connection */
        struct stream *st = h->streams;
        h->streams = st->next;
        surf_events_unsubscribe(h->events, st->sub);
        evbuffer_free(st->tmp);
        free(st);
    }
    surf_events_free(h->events);
    surf_http_access_flush(h);
    fo_buf_release(&h->alog);
    if (h->alog_ev)
        event_free(h->alog_ev);
    free(h->conns); /* empty now */
    for (size_t i = 0; i < h->nborn; i++)
        bufferevent_decref(h->born[i]);
    free(h->born);
    if (h->adopt_ev)
        event_free(h->adopt_ev);
    if (h->pause_ev)
        event_free(h->pause_ev);
    if (h->trim_ev)
        event_free(h->trim_ev);
    if (h->done_ev)
        event_free(h->done_ev);
    if (h->drain_ev)
        event_free(h->drain_ev);
    if (h->drain_timer)
        event_free(h->drain_timer);
    free(h->threads);
    free(h->counts);
    free(h->routes);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
