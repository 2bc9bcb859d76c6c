/* http_int: the HTTP surface's insides, shared by its files (http.c and
 * http_*.c) and by no other module: the server's state, a job, a
 * connection, a stream, a route, and the functions the files call across.
 * The surface's API is http.h. */
#ifndef SURF_HTTP_INT_H
#define SURF_HTTP_INT_H

#include "surfaces/http.h"

#include <errno.h>
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
    ROUTE_MCP = 5,  /* MCP over Streamable HTTP (http_mcp.c) */
    ROUTE_EXTRA = 6
};
static const int statuses[] = {200, 202, 204, 400, 401, 403, 404, 405, 410,
                               413, 415, 421, 500, 502, 503, 504, 0};
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
    /* An MCP message on a worker (http_mcp.c): work(j, ctx) writes status
     * and body in place of surf_call (ctx NULL: the worker has no ledger);
     * mflags are its session's (SURF_MCP_ADMIN). */
    void (*work)(struct job *j, struct surf_ctx *ctx);
    unsigned mflags;
    /* Work other than a reply (the event stream's reads, http_stream.c's
     * filter): finish(j) runs on the loop in place of sending status and
     * body, and frees j (and answers j->req, if any). arg is the work's;
     * free_arg: http_job_free frees it too. */
    void (*finish)(struct job *j);
    void (*read)(void *arg, struct ledger *l);
    void (*read_done)(void *arg);
    void *arg;
    int free_arg;
    /* A run that ends with its call (submit, plan, plan_run): its id once
     * its request landed (-1 before), so a client that hangs up cancels
     * it (http_run_gone). */
    int64_t run;
    int watch_gone, hung_up, cancel_sent;
    /* GET /metrics: the ledger's entries, counted on a worker (-1: not
     * known) */
    int64_t entries;
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
     * back to the system (see stream_unlink in http_stream.c) */
    struct event *trim_ev;
    /* SURF_ON_LOOP methods run on the loop: only over a local store (a
     * PostgreSQL read is a round trip: those go to the workers) */
    int loop_reads;
    /* MCP over HTTP: its sessions (http_mcp.c; NULL until the first) */
    struct http_mcp *mcp;
    /* the access log's lines not yet written, and its timer */
    struct fo_buf alog;
    struct event *alog_ev;
};

struct route {
    char buf[128];
    char *seg[MAX_SEGMENTS];
    const char *bind[MAX_SEGMENTS];
    int nseg;
};

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
    /* surf_http_on_gone: told when the connection goes */
    void (*gone)(void *arg);
    void *gone_arg;
    /* http_conn_on_hup: told once when the peer hangs up (EV_CLOSED, or
     * the connection's end), while its request is parked */
    void (*hup)(void *arg);
    void *hup_arg;
};

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

/* ---- shared by the files of the HTTP surface ---------------------------
 * http.c: the lifecycle, the worker pool and the hand-back of finished
 * work; http_route.c: the request path (handle, routing, input);
 * http_reply.c: replies and the access log; http_conn.c: connections from
 * accept to close; http_stream.c: GET /events; http_metrics.c: /metrics.
 * Everything here runs on the loop thread unless it says otherwise. */

/* http.c */
void http_logm(struct surf_http *h, const char *what, const char *detail);
void http_q_push(struct queue *q, struct job *j);
struct job *http_job_new(struct surf_http *h, struct evhttp_request *req,
                         const struct surf_method *m, int route, int64_t t0,
                         cJSON *in);
void http_job_free(struct job *j);
/* Queues j for a worker. */
void http_job_post(struct surf_http *h, struct job *j);
/* The committer's callbacks of a SURF_ON_COMMIT job (committer thread). */
void http_append_done(struct ledger_queued_append *r);
void http_append_flush(void *arg);
/* The run engine's reply of a SURF_ON_RUN job (surf_reply_fn). */
/* A parked run call: each step (its run's id) and its client gone
 * (surf_http_on_gone: the run is cancelled). */
struct orch_run_event;
void http_run_event(void *arg, const struct orch_run_event *ev);
void http_run_gone(void *arg);
void http_run_reply(void *arg, int rc, cJSON *out, const struct fo_err *err);

/* http_route.c: the one evhttp callback, and its parts the others use */
void http_handle(struct evhttp_request *req, void *arg);
int http_route_compile(struct route *r, const char *pattern);
const char *http_method_name(enum evhttp_cmd_type c);

/* http_reply.c */
void http_count(struct surf_http *h, int route, int status, int64_t t0);
void http_alog_tick(evutil_socket_t fd, short what, void *arg);
void http_access_line(struct surf_http *h, struct evhttp_request *req,
                      int status, size_t bytes, int route, int64_t t0);
/* Sends data (malloc'd, taken) as the body; counts the request. */
void http_send_raw(struct surf_http *h, struct evhttp_request *req, int status,
                   const char *ctype, char *data, size_t len, int close,
                   int route, int64_t t0);
void http_send_error(struct surf_http *h, struct evhttp_request *req,
                     const struct fo_err *err, int close, int route,
                     int64_t t0);
void http_send_errorf(struct surf_http *h, struct evhttp_request *req, int code,
                      const char *msg, int close, int route, int64_t t0);
/* A method's result (or error) as the reply's status and body (malloc'd;
 * any thread). */
void http_result_text(int rc, const cJSON *out, const struct fo_err *err,
                      int *status, char **body, size_t *len);
void http_write_now(struct bufferevent *bev);
void http_drain_check(struct surf_http *h);
void http_finished(struct surf_http *h);

/* http_conn.c */
void http_owner_add(struct surf_http *h);
void http_owner_remove(struct surf_http *h);
void http_accept_failed(struct evconnlistener *lev, void *arg);
void http_accept_resume(evutil_socket_t fd, short what, void *arg);
/* Gives freed memory back to the system after stalled streams closed. */
void http_trim_memory(evutil_socket_t fd, short what, void *arg);
struct bufferevent *http_born(struct event_base *base, void *arg);
void http_adopt(evutil_socket_t fd, short what, void *arg);
struct conn *http_conn_find(struct surf_http *h,
                            struct evhttp_connection *evcon);
void http_conn_closed(struct evhttp_connection *evcon, void *arg);
/* fn(arg) once when req's peer hangs up (NULL: no longer). */
void http_conn_on_hup(struct surf_http *h, struct evhttp_request *req,
                      void (*fn)(void *arg), void *arg);
void http_conn_request(struct surf_http *h, struct evhttp_request *req);
void http_conn_sent(struct surf_http *h, struct evhttp_request *req);
void http_conn_replied(struct surf_http *h, struct evhttp_request *req);

/* http_stream.c */
int http_stream_open(struct surf_http *h, struct evhttp_request *req,
                     const char *verb, int64_t t0);
void http_stream_end(void *arg);
void http_stream_lost(struct stream *st);

/* http_mcp.c: /mcp (1: in flight, answered later; 0: answered). admin:
 * the request carries the token. */
int http_mcp_handle(struct surf_http *h, struct evhttp_request *req,
                    const char *verb, int admin, int64_t t0);
void http_mcp_free(struct surf_http *h);
/* Ends the sessions' GET streams (the drain). */
void http_mcp_drain(struct surf_http *h);

/* http_metrics.c */
const char *http_route_label(const struct surf_http *h, int route);
int http_metrics_text(struct surf_http *h, int64_t entries, struct fo_buf *b);

#endif
