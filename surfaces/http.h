/* http: the handler table served over HTTP on libevent's evhttp. Routes,
 * auth, the error model and the transport limits. Each method runs where
 * its table row says: SURF_ON_LOOP on the event loop, SURF_ON_COMMIT
 * through the group committer, SURF_ON_RUN on the run engine (parked until
 * the run answers), SURF_ON_WORKER on a small pool of worker threads, each
 * with its own surf_ctx, handing its reply back to the loop (evhttp is not
 * thread-safe). Every request gets exactly one reply. The code is http.c
 * and http_*.c, split by concern (http_int.h says which does what). */
#ifndef SURF_HTTP_H
#define SURF_HTTP_H

#include <stddef.h>

#include <event2/event.h>
#include <event2/http.h>

#include "ledger/fo_buf.h"
#include "ledger/ledger.h"
#include "surfaces/surf.h"

struct surf_http;

/* The most max_connections may be. */
#define SURF_HTTP_CONNECTIONS_MAX (1 << 20)

struct surf_http_config {
    const char *host;  /* NULL: 127.0.0.1 */
    int port;          /* 0: an ephemeral port (read it back) */
    const char *token; /* the bearer token; NULL refuses admin methods */
    int no_auth;       /* no token needed, except for admin methods */
    /* Names a request's Host (and Origin) may give besides the listen
     * address, loopback and localhost (--allowed-host: a proxy's public
     * name); they must outlive the server. */
    const char *const *allowed_hosts;
    size_t n_allowed_hosts;
    int metrics_public;  /* GET /metrics without the token */
    size_t body_max;     /* the server's request body cap; 0: 1 MiB + 64 KiB */
    size_t header_max;   /* request header bytes; 0: 16 KiB */
    int timeout_s;       /* idle read/write timeout, and the deadline for a
                            request to arrive whole from its first byte; 0:
                            30 */
    int max_connections; /* open at once (1..SURF_HTTP_CONNECTIONS_MAX);
                            0: surf_http_connections_default() */
    int workers;         /* threads for methods that may block; 0: 2 */
    int keepalive_s;     /* a comment on idle GET /events streams this
                            often; 0: 15 */
    /* The access log: with access_on, a line a request is written to
     * access_fd (buffered; written out each second, at 16 KiB, on
     * surf_http_access_flush and when freed). */
    int access_on;
    int access_fd;
    /* The context fast methods use on the loop thread. */
    struct surf_ctx *loop_ctx;
    /* Makes and frees one worker's context (its own ledger handle). */
    int (*ctx_open)(void *hook, struct surf_ctx **out, struct fo_err *err);
    void (*ctx_close)(void *hook, struct surf_ctx *ctx);
    void *hook;
    /* Asynchronous appends for SURF_ON_COMMIT methods (the daemon's group
     * commit): append_submit queues r, whose done then runs on another
     * thread once r committed or failed; NULL: appends run on a worker.
     * metrics appends its counters to GET /metrics (may be NULL). */
    int (*append_submit)(void *hook, struct ledger_queued_append *r,
                         struct fo_err *err);
    int (*metrics)(void *hook, struct fo_buf *out);
    void *append_hook;
    /* Log lines (may be NULL). */
    void (*log)(void *hook, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    /* Routes outside the table (surfaces/tlog.c: GET /tlog/... and POST
     * /add-checkpoint), offered every request past the transport checks and
     * before the token check: 1 when it took req (it then answers it once,
     * at once or later, on the loop thread, with surf_http_reply), 0 to
     * route it as usual. authed: the request carries the token, or the
     * daemon runs --no-auth. t0 goes back to surf_http_reply. May be
     * NULL. */
    int (*extra)(void *extra_hook, struct surf_http *h,
                 struct evhttp_request *req, const char *path, const char *verb,
                 int authed, int64_t t0);
    void *extra_hook;
};

/* Answers a request the extra hook took: status, the Content-Type and the
 * body (malloc'd, taken; may be NULL), headers added to the request's
 * output headers before; counted under the route "tlog". Loop thread,
 * once per request. */
void surf_http_reply(struct surf_http *h, struct evhttp_request *req,
                     int status, const char *ctype, char *body, size_t len,
                     int64_t t0);

/* surf_http_reply with the JSON error {"error": msg, "code"} of code. */
void surf_http_reply_error(struct surf_http *h, struct evhttp_request *req,
                           int code, const char *msg, int64_t t0);

/* A streamed answer to a request the extra hook took (the gateway's
 * relayed model streams): the status line and headers now (with
 * Connection: close, no read deadline while it lasts), then chunks as they
 * come, then the end, which counts the request as answered. Loop thread.
 * stream_chunk sends data's bytes (drained from it) and returns 0, or -1
 * when the client has gone (nothing sent; still call stream_end, which
 * then frees the request). */
void surf_http_stream_start(struct surf_http *h, struct evhttp_request *req,
                            int status, const char *ctype, int64_t t0);
int surf_http_stream_chunk(struct evhttp_request *req, struct evbuffer *data);
void surf_http_stream_end(struct surf_http *h, struct evhttp_request *req);
/* (req NULL: the request went with its connection; only counted as
 * answered.) */

/* Calls fn(arg) on the loop when the connection of req closes before it
 * is answered (the client hung up); the request is then detached from it
 * (evhttp_request_get_connection is NULL) and still to be answered (an
 * answer frees it), unless still attached, when the connection freed it:
 * then call surf_http_stream_end(h, NULL). fn NULL: no longer. */
void surf_http_on_gone(struct surf_http *h, struct evhttp_request *req,
                       void (*fn)(void *arg), void *arg);

/* Binds host:port and starts the workers. The base must have been created
 * after evthread_use_pthreads(). FO_E_IO when the address cannot be bound
 * (the message says why). */
int surf_http_create(struct event_base *base,
                     const struct surf_http_config *cfg, struct surf_http **out,
                     struct fo_err *err);

/* The bound port (the ephemeral one when port 0 was asked). */
int surf_http_port(const struct surf_http *h);

/* max_connections when none is given: the open-file limit (RLIMIT_NOFILE,
 * soft) less 128 descriptors for the rest of the daemon, at least 16 and
 * at most 16384 (also when there is no limit). The limit goes in *fd_limit
 * (-1: none) when fd_limit is not NULL. */
long surf_http_connections_default(long long *fd_limit);

/* The connection cap in force. */
long surf_http_max_connections(const struct surf_http *h);

/* Requests answered so far (for status). */
unsigned long long surf_http_requests(const struct surf_http *h);

/* Starts draining: the listener is closed, new requests on open keep-alive
 * connections get 503 `draining`, in-flight work finishes and is answered;
 * then done(arg) runs on the loop thread (at once when nothing is in
 * flight). */
void surf_http_drain(struct surf_http *h, void (*done)(void *arg), void *arg);

/* New ledger entries may be there: GET /events streams look now. Any
 * thread (the committer calls it after each transaction); NULL-safe. */
void surf_http_notify(struct surf_http *h);

/* Writes out the access log's buffered lines (before the descriptor is
 * reopened). Loop thread. NULL-safe. */
void surf_http_access_flush(struct surf_http *h);

/* GET /events streams open now. */
long surf_http_streams(const struct surf_http *h);

/* Stops the workers and frees everything; open connections are closed.
 * Drain first to lose no reply. NULL-safe. */
void surf_http_free(struct surf_http *h);

#endif
