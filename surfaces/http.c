/* http: the HTTP surface. One generic evhttp callback routes every request
 * through the handler table: transport checks, auth, input from the query,
 * path or body, then the method where the table says it runs: the loop, a
 * worker, the committer or the run engine.
 * Replies, metrics and the drain all happen on the loop thread. */
#include "surfaces/http.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>

#include "ledger/fo_json.h"

#define BODY_MAX_DEFAULT ((1u << 20) + 64 * 1024)
#define HEADER_MAX_DEFAULT (16 * 1024)
#define TIMEOUT_DEFAULT_S 30
#define WORKERS_DEFAULT 2
#define MAX_SEGMENTS 8

/* Route labels for metrics: one per table row, then these. */
enum { ROUTE_METRICS = 0, ROUTE_UNKNOWN = 1, ROUTE_EXTRA = 2 };
static const int statuses[] = {200, 400, 401, 404, 405, 410,
                               413, 500, 502, 503, 504, 0};
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
    struct daemon_commit_req creq;
    struct fo_buf cbody;
    struct job *next;
};

struct queue {
    struct job *head, *tail;
};

struct surf_http {
    struct surf_http_config cfg;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    int port;
    const struct surf_method *table;
    size_t nmethods;
    struct route *routes; /* one per method, split at start */
    const struct surf_method *append_m;
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
    /* Per descriptor, an event that keeps a connection's read interest in
     * the epoll set between requests (see pin_connection). */
    struct pin {
        struct event *ev;
        struct evhttp_connection *evcon;
        int mode;  /* PIN_READ, PIN_QUIET or PIN_HUP */
        int fresh; /* a request was taken since the pin last fired */
    } * pins;
    size_t npins;
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
    int64_t start_us;
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

static void free_ref(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    free(arg);
}

static void drain_check(struct surf_http *h);

/* libevent wrote a whole reply to the socket. */
static void reply_written(struct evhttp_request *req, void *arg)
{
    (void)req;
    struct surf_http *h = arg;
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
    struct evbuffer *buf = evbuffer_new();
    if (buf && data && len &&
        evbuffer_add_reference(buf, data, len, free_ref, data) == 0)
        data = NULL; /* owned by buf now */
    free(data);
    h->unsent++;
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
    send_raw(h, req, fo_code_http(err->code), "application/json", t, len, close,
             route, t0);
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
    *status = fo_code_http(rc);
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
static void append_done(struct daemon_commit_req *r)
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

static int metrics_text(struct surf_http *h, struct fo_buf *b)
{
    int64_t entries = -1;
    struct fo_err err;
    if (h->cfg.loop_ctx && h->cfg.loop_ctx->ledger)
        ledger_count(h->cfg.loop_ctx->ledger, &entries, &err);
    double up = (double)(ledger_now_us() - h->start_us) / 1e6;
    int rc = 0;
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
    if (h->cfg.commit) {
        struct daemon_commit_stats s;
        daemon_commit_stats(h->cfg.commit, &s);
        rc |= fo_buf_printf(
            b,
            "# HELP forum_appends_total Appends committed.\n"
            "# TYPE forum_appends_total counter\n"
            "forum_appends_total %llu\n"
            "# HELP forum_appends_rejected_total Appends refused.\n"
            "# TYPE forum_appends_rejected_total counter\n"
            "forum_appends_rejected_total %llu\n"
            "# HELP forum_commits_total Transactions committed.\n"
            "# TYPE forum_commits_total counter\n"
            "forum_commits_total %llu\n"
            "# HELP forum_commit_failures_total Transactions that failed.\n"
            "# TYPE forum_commit_failures_total counter\n"
            "forum_commit_failures_total %llu\n"
            "# HELP forum_checkpoints_signed_total Checkpoints signed.\n"
            "# TYPE forum_checkpoints_signed_total counter\n"
            "forum_checkpoints_signed_total %llu\n"
            "# HELP forum_commit_queue Appends waiting for a commit.\n"
            "# TYPE forum_commit_queue gauge\n"
            "forum_commit_queue %llu\n"
            "# HELP forum_commit_batch_size Appends per transaction.\n"
            "# TYPE forum_commit_batch_size histogram\n",
            (unsigned long long)s.appends, (unsigned long long)s.rejected,
            (unsigned long long)s.commits, (unsigned long long)s.failed,
            (unsigned long long)s.checkpoints, (unsigned long long)s.queued);
        unsigned long long cum = 0;
        for (int i = 0; i < 8; i++) {
            cum += s.batch_hist[i];
            if (i < 7)
                rc |= fo_buf_printf(b,
                                    "forum_commit_batch_size_bucket{le=\"%d\"} "
                                    "%llu\n",
                                    (2 << i) - 1, cum);
        }
        rc |= fo_buf_printf(b,
                            "forum_commit_batch_size_bucket{le=\"+Inf\"} %llu\n"
                            "forum_commit_batch_size_sum %llu\n"
                            "forum_commit_batch_size_count %llu\n",
                            cum, (unsigned long long)s.batch_sum, cum);
    }
    rc |= fo_buf_puts(b, "# HELP forum_http_requests_total Requests answered "
                         "by route and status.\n"
                         "# TYPE forum_http_requests_total counter\n");
    for (size_t r = 0; r < h->nmethods + ROUTE_EXTRA; r++) {
        const char *name = r == ROUTE_METRICS ? "metrics"
                           : r == ROUTE_UNKNOWN
                               ? "unknown"
                               : h->table[r - ROUTE_EXTRA].name;
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
        cJSON *v = dec && strlen(dec) == dlen
                       ? surf_param_value(m, r->bind[i], dec)
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
        cJSON *v = surf_param_value(m, p->key, p->value);
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

/* ---- connection pins -------------------------------------------------- */

/* evhttp turns reading off while a request is being answered, turns
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
 * sees the hang-up itself. Freed with the connection (or when the
 * descriptor number comes back with another connection). */

enum { PIN_READ, PIN_QUIET, PIN_HUP };

static void pin_fired(evutil_socket_t fd, short what, void *arg);

static void pin_set(struct surf_http *h, evutil_socket_t fd, int mode)
{
    struct pin *p = &h->pins[fd];
    if (p->ev)
        event_free(p->ev);
    p->ev = NULL;
    p->mode = PIN_HUP;
    if (mode == PIN_HUP)
        return;
    short what =
        mode == PIN_READ ? EV_READ | EV_CLOSED | EV_PERSIST : EV_CLOSED;
    p->ev = event_new(h->base, fd, what, pin_fired, h);
    if (!p->ev || event_add(p->ev, NULL) != 0) {
        if (p->ev)
            event_free(p->ev);
        p->ev = NULL;
        return;
    }
    p->mode = mode;
}

static void pin_fired(evutil_socket_t fd, short what, void *arg)
{
    struct surf_http *h = arg;
    if (fd < 0 || (size_t)fd >= h->npins || !h->pins[fd].ev)
        return;
    struct pin *p = &h->pins[fd];
    if (what & EV_CLOSED) {
        pin_set(h, fd, PIN_HUP);
        return;
    }
    struct bufferevent *bev =
        p->evcon ? evhttp_connection_get_bufferevent(p->evcon) : NULL;
    if (p->mode != PIN_READ ||
        (bev && (bufferevent_get_enabled(bev) & EV_READ)))
        return; /* evhttp reads them */
    if (p->fresh) {
        p->fresh = 0; /* most likely the request evhttp has just read */
        return;
    }
    pin_set(h, fd, PIN_QUIET);
}

static void unpin(struct surf_http *h, evutil_socket_t fd)
{
    if (fd < 0 || (size_t)fd >= h->npins)
        return;
    if (h->pins[fd].ev)
        event_free(h->pins[fd].ev);
    h->pins[fd] = (struct pin){0};
}

static void pin_closed(struct evhttp_connection *evcon, void *arg)
{
    struct surf_http *h = arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0 && (size_t)fd < h->npins && h->pins[fd].evcon == evcon)
        unpin(h, fd);
}

/* Best effort: a connection without a pin works as before. */
static void pin_connection(struct surf_http *h, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0 || fd > 1 << 20 ||
        !(event_base_get_features(h->base) & EV_FEATURE_EARLY_CLOSE))
        return;
    if ((size_t)fd < h->npins && h->pins[fd].evcon == evcon) {
        struct pin *p = &h->pins[fd];
        p->fresh = 1;
        if (p->mode == PIN_QUIET)
            pin_set(h, fd, PIN_READ);
        return;
    }
    if ((size_t)fd >= h->npins) {
        size_t n = h->npins ? h->npins : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct pin *p = realloc(h->pins, n * sizeof(*p));
        if (!p)
            return;
        memset(p + h->npins, 0, (n - h->npins) * sizeof(*p));
        h->pins = p;
        h->npins = n;
    }
    unpin(h, fd); /* a connection gone before that had this number */
    pin_set(h, fd, PIN_READ);
    if (!h->pins[fd].ev)
        return;
    h->pins[fd].evcon = evcon;
    h->pins[fd].fresh = 1;
    evhttp_connection_set_closecb(evcon, pin_closed, h);
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

static void handle(struct evhttp_request *req, void *arg)
{
    struct surf_http *h = arg;
    int64_t t0 = ledger_now_us();
    h->inflight++;
    pin_connection(h, req);
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
    int is_health = strcmp(path, "/health") == 0;
    if (!is_health && !h->cfg.no_auth && !token_ok(h, req)) {
        send_errorf(h, req, FO_E_UNAUTHORIZED,
                    "missing or wrong bearer token (Authorization: Bearer "
                    "<DIR/token>)",
                    0, ROUTE_UNKNOWN, t0);
        goto done;
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
        struct job *j = calloc(1, sizeof(*j));
        if (!j) {
            send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, route, t0);
            goto done;
        }
        *j = (struct job){
            .h = h, .req = req, .m = m, .route = route, .t0 = t0, .in = in};
        fo_buf_init(&j->cbody, 0);
        if (surf_start(h->cfg.loop_ctx, m, in, run_reply, j, &err) != FO_OK) {
            j->in = NULL;
            job_free(j);
            send_error(h, req, &err, 0, route, t0);
            goto done;
        }
        return; /* answered by run_reply */
    }
    if (m->where == SURF_ON_COMMIT && h->cfg.commit) {
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
        if (daemon_commit_submit(h->cfg.commit, &j->creq, &err) != FO_OK) {
            job_free(j);
            send_error(h, req, &err, 1, route, t0);
            goto done;
        }
        j->in = in; /* actor and kind point into it until the reply */
        return;     /* answered by on_done */
    }
    if (m->where == SURF_ON_LOOP) {
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
    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, route, t0);
        goto done;
    }
    *j = (struct job){
        .h = h, .req = req, .m = m, .route = route, .t0 = t0, .in = in};
    fo_buf_init(&j->cbody, 0);
    pthread_mutex_lock(&h->mu);
    q_push(&h->work, j);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return; /* answered by on_done */
done:
    cJSON_Delete(in);
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
    h->append_m = surf_find("ledger_append");
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
    h->http = evhttp_new(base);
    if (!h->counts || !h->threads || !h->done_ev || !h->drain_ev ||
        !h->drain_timer || !h->http) {
        fo_err_set(err, FO_E_NOMEM, NULL);
        goto fail;
    }
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

void surf_http_drain(struct surf_http *h, void (*done)(void *arg), void *arg)
{
    if (!h->draining && h->bound) {
        evhttp_del_accept_socket(h->http, h->bound);
        h->bound = NULL;
    }
    h->draining = 1;
    h->drained = done;
    h->drained_arg = arg;
    drain_check(h);
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
    if (h->http)
        evhttp_free(h->http);
    for (size_t i = 0; i < h->npins; i++)
        if (h->pins[i].ev)
            event_free(h->pins[i].ev);
    free(h->pins);
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
